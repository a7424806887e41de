//! 6to4 — RFC 3056 "Connection of IPv6 Domains via IPv4 Clouds".
//!
//! Implements:
//! - RFC 3056 §2: the 6to4 prefix `2002::/16` and a site's `2002:V4ADDR::/48`
//!   ([`prefix_for`], [`addr`], [`v4_of`]).
//! - RFC 3056 §4 / §5: IPv6 carried in IPv4 with protocol 41; the outer
//!   destination is the IPv4 address embedded in a 6to4 destination, or a
//!   relay router's address for a native IPv6 destination ([`encap`]). The
//!   outer header follows RFC 4213 §3.5 (TTL per §3.3, DF per §3.2, TOS 0
//!   unless asked to copy the Traffic Class) — see [`Ipv4Outer`];
//!   [`encap_to`] takes explicit end points (RFC 4213 configured tunnels).
//! - RFC 3056 §8 and RFC 3964 §5.1: the decapsulation sanity checks
//!   ([`decap`], [`DecapPolicy`]): a 6to4 inner source must embed the outer
//!   IPv4 source, a 6to4 inner destination should embed the outer IPv4
//!   destination, and no 6to4 address may embed a forbidden IPv4 address
//!   (0/8, 127/8, 224/3 — multicast, class E and broadcast — and, as an
//!   option, the RFC 1918 private ranges).
//!
//! Relays: RFC 3068 gave 6to4 relay routers the anycast address
//! [`RELAY_ANYCAST`] (192.88.99.1); RFC 7526 has since deprecated that
//! anycast prefix, so the relay address is always a caller parameter.
//!
//! Style: [`encap`] writes one [`PacketKind::Forward`] packet into `Out` and
//! returns a [`Verdict`]; [`decap`] is zero-copy and returns the inner IPv6
//! packet as a borrowed slice of the input.

use super::{drop_verdict, Ipv4Outer, TunnelError};
use crate::addr::Prefix6;
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::Ipv6Packet;
use crate::wire::proto;
use crate::{Out, PacketKind, Verdict};
use core::net::{Ipv4Addr, Ipv6Addr};

/// The 6to4 prefix `2002::/16` (RFC 3056 §2), as the value of its first 16 bits.
pub const PREFIX_HI16: u16 = 0x2002;
/// The 6to4 relay anycast address (RFC 3068 §2.3; deprecated by RFC 7526).
pub const RELAY_ANYCAST: Ipv4Addr = Ipv4Addr::new(192, 88, 99, 1);

/// The 6to4 prefix `2002::/16`.
pub fn prefix() -> Prefix6 {
    Prefix6::new(Ipv6Addr::new(PREFIX_HI16, 0, 0, 0, 0, 0, 0, 0), 16).expect("2002::/16 has no host bits")
}

/// The site prefix `2002:V4ADDR::/48` for a 6to4 router's IPv4 address (RFC 3056 §2).
pub fn prefix_for(v4: Ipv4Addr) -> Prefix6 {
    Prefix6::new(addr(v4, 0, 0), 48).expect("a 6to4 /48 built from V4ADDR has no host bits")
}

/// A 6to4 address: `2002:V4ADDR:SLA::IFACE` (RFC 3056 §2: 16-bit prefix,
/// 32-bit IPv4, 16-bit subnet ID, 64-bit interface ID).
pub fn addr(v4: Ipv4Addr, subnet_id: u16, iface_id: u64) -> Ipv6Addr {
    let v = (u128::from(PREFIX_HI16) << 112)
        | (u128::from(u32::from(v4)) << 80)
        | (u128::from(subnet_id) << 64)
        | u128::from(iface_id);
    Ipv6Addr::from(v)
}

/// The IPv4 address embedded in a 6to4 address; `None` outside `2002::/16`.
#[inline]
pub fn v4_of(v6: &Ipv6Addr) -> Option<Ipv4Addr> {
    let v = u128::from(*v6);
    if (v >> 112) as u16 == PREFIX_HI16 {
        Some(Ipv4Addr::from((v >> 80) as u32))
    } else {
        None
    }
}

/// True for an address inside `2002::/16`.
#[inline]
pub fn is_6to4(v6: &Ipv6Addr) -> bool {
    v4_of(v6).is_some()
}

/// RFC 3964 §5.1: IPv4 addresses that must never appear as a 6to4 tunnel
/// end point or embedded in a 6to4 address: 0.0.0.0/8, 127.0.0.0/8,
/// 224.0.0.0/3 (multicast, class E, limited broadcast) and, when
/// `reject_private`, the RFC 1918 ranges 10/8, 172.16/12, 192.168/16.
#[inline]
pub fn is_forbidden_v4(a: Ipv4Addr, reject_private: bool) -> bool {
    let o = a.octets();
    o[0] == 0 || o[0] == 127 || o[0] >= 224 || (reject_private && a.is_private())
}

/// The outer IPv4 destination for an inner IPv6 destination (RFC 3056 §5):
/// the embedded IPv4 of a 6to4 destination, else the relay router.
pub fn outer_dst(inner_dst: &Ipv6Addr, relay: Option<Ipv4Addr>) -> Result<Ipv4Addr, TunnelError> {
    match v4_of(inner_dst) {
        Some(v4) if is_forbidden_v4(v4, false) => {
            Err(TunnelError::Rule("RFC 3964 §5.1: 6to4 destination embeds a forbidden IPv4 address"))
        }
        Some(v4) => Ok(v4),
        None => relay.ok_or(TunnelError::Rule("RFC 3056 §5: native IPv6 destination and no relay router configured")),
    }
}

/// Encapsulate one IPv6 packet for 6to4 (RFC 3056 §4/§5, RFC 4213 §3.5).
///
/// The outer source is `outer_src` (the 6to4 router's or relay's IPv4
/// address); the outer destination is derived by [`outer_dst`]. Clears
/// `out`; on [`Verdict::Emit`] it holds one [`PacketKind::Forward`] packet.
/// Bytes after the inner packet's Payload Length are not carried.
pub fn encap(
    inner_v6: &[u8],
    outer_src: Ipv4Addr,
    relay: Option<Ipv4Addr>,
    opts: &Ipv4Outer,
    out: &mut Out,
) -> Verdict {
    out.clear();
    let r = (|| {
        let p = Ipv6Packet::new(inner_v6)?;
        let dst = outer_dst(&p.dst(), relay)?;
        emit(&p, outer_src, dst, opts, out)
    })();
    match r {
        Ok(()) => Verdict::Emit,
        Err(e) => drop_verdict(e),
    }
}

/// Encapsulate one IPv6 packet in IPv4 protocol 41 between explicit end
/// points (a configured tunnel, RFC 4213 §3, or a caller that has already
/// chosen the outer destination). Same output contract as [`encap`].
pub fn encap_to(inner_v6: &[u8], outer_src: Ipv4Addr, outer_dst: Ipv4Addr, opts: &Ipv4Outer, out: &mut Out) -> Verdict {
    out.clear();
    let r =
        Ipv6Packet::new(inner_v6).map_err(TunnelError::from).and_then(|p| emit(&p, outer_src, outer_dst, opts, out));
    match r {
        Ok(()) => Verdict::Emit,
        Err(e) => drop_verdict(e),
    }
}

fn emit(p: &Ipv6Packet<'_>, src: Ipv4Addr, dst: Ipv4Addr, opts: &Ipv4Outer, out: &mut Out) -> Result<(), TunnelError> {
    let inner = p.as_bytes();
    let total = ipv4::HEADER_LEN + inner.len();
    let total_len = u16::try_from(total).map_err(|_| TunnelError::TooBig { mtu: usize::from(u16::MAX) })?;
    let ident = out.take_ident();
    let hdr = opts.header(p, proto::IPV6, (src, dst), total_len, ident);
    let buf = out.space(total).ok_or(TunnelError::NoSpace)?;
    hdr.emit(buf);
    buf[ipv4::HEADER_LEN..total].copy_from_slice(inner);
    out.commit(total, PacketKind::Forward);
    Ok(())
}

/// Which RFC 3964 checks [`decap`] applies beyond the mandatory ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecapPolicy {
    /// Treat RFC 1918 private IPv4 addresses as forbidden, in the outer
    /// source and embedded in 6to4 addresses (RFC 3964 §5.1). Default on;
    /// turn off for a private-scoped 6to4 deployment or a lab.
    pub reject_private: bool,
    /// Require a 6to4 inner destination to embed the outer IPv4 destination
    /// (RFC 3964 §5.1). Default on; a router that also receives on other
    /// addresses (e.g. the relay anycast) may relax it.
    pub strict_dst: bool,
    /// Accept inner sources outside 2002::/16 (traffic from a relay router,
    /// RFC 3056 §5.2). Default on.
    pub allow_native_src: bool,
    /// Accept inner destinations outside 2002::/16 — only a relay router
    /// forwards to native IPv6 (RFC 3056 §5.2). Default on.
    pub allow_native_dst: bool,
}

impl Default for DecapPolicy {
    fn default() -> Self {
        DecapPolicy { reject_private: true, strict_dst: true, allow_native_src: true, allow_native_dst: true }
    }
}

/// A decapsulated 6to4 packet: the outer addresses and the inner IPv6
/// packet, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decapped<'a> {
    /// Outer IPv4 source (the sending 6to4 router or relay).
    pub outer_src: Ipv4Addr,
    /// Outer IPv4 destination.
    pub outer_dst: Ipv4Addr,
    /// Outer TOS octet (for ECN/Diffserv egress handling by the caller).
    pub outer_tos: u8,
    /// The inner IPv6 packet, exactly as carried.
    pub inner: &'a [u8],
}

/// True for IPv6 sources that can never be valid on a packet coming out of
/// a tunnel (RFC 4291 §2.5): unspecified, loopback, multicast, and the
/// IPv4-compatible and IPv4-mapped ranges (`::/96`, `::ffff:0:0/96`).
#[inline]
fn is_bogus_v6(a: &Ipv6Addr) -> bool {
    let v = u128::from(*a);
    (v >> 32) == 0 || (v >> 32) == 0xffff || (v >> 120) == 0xff
}

/// The checks every IPv6-in-IPv4 (protocol 41) decapsulation shares, 6to4
/// and 6rd alike: a well-formed IPv4 header with a valid checksum;
/// protocol 41; not a fragment; outer addresses not forbidden (RFC 3964
/// §5.1; RFC 1918 sources too when `reject_private`); a well-formed inner
/// IPv6 packet filling the IPv4 payload exactly, whose source can come out
/// of a tunnel and whose destination is not unspecified, loopback or
/// IPv4-mapped (RFC 4291 §2.5). Returns the decapsulated packet and its
/// checked IPv6 view for the mechanism's address rules.
pub(crate) fn outer41(outer_v4: &[u8], reject_private: bool) -> Result<(Decapped<'_>, Ipv6Packet<'_>), TunnelError> {
    let o = Ipv4Packet::new(outer_v4)?;
    if !o.checksum_ok() {
        return Err(TunnelError::BadIpv4Checksum);
    }
    if o.protocol() != proto::IPV6 {
        return Err(TunnelError::Rule("RFC 3056 §5: outer IPv4 protocol is not 41 (IPv6)"));
    }
    if o.is_fragment() {
        return Err(TunnelError::Fragmented);
    }
    let (src4, dst4) = (o.src(), o.dst());
    if is_forbidden_v4(src4, reject_private) {
        return Err(TunnelError::Rule("RFC 3964 §5.1: outer IPv4 source is a forbidden address"));
    }
    if is_forbidden_v4(dst4, false) {
        return Err(TunnelError::Rule("RFC 3964 §5.1: outer IPv4 destination is a forbidden address"));
    }
    let payload = o.payload();
    let inner = Ipv6Packet::new(payload)?;
    if inner.as_bytes().len() != payload.len() {
        return Err(TunnelError::Malformed);
    }
    if is_bogus_v6(&inner.src()) {
        return Err(TunnelError::Rule("RFC 4291 §2.5: inner IPv6 source can never come out of a tunnel"));
    }
    let dst6 = u128::from(inner.dst());
    if (dst6 >> 32) == 0 || (dst6 >> 32) == 0xffff {
        return Err(TunnelError::Rule("RFC 4291 §2.5: inner IPv6 destination is unspecified, loopback or IPv4-mapped"));
    }
    Ok((Decapped { outer_src: src4, outer_dst: dst4, outer_tos: o.tos(), inner: payload }, inner))
}

/// Decapsulate a 6to4 packet (RFC 3056 §5, security checks of RFC 3056 §8
/// and RFC 3964 §5.1). Zero-copy: returns the inner IPv6 packet as a slice
/// of `outer_v4`.
///
/// Checks, in order: a well-formed IPv4 header with a valid checksum;
/// protocol 41; not a fragment; outer source not forbidden; a well-formed
/// inner IPv6 packet filling the IPv4 payload exactly; inner source and
/// destination sane, 6to4 ones embedding allowed IPv4 addresses that match
/// the outer header as [`DecapPolicy`] says.
pub fn decap<'a>(outer_v4: &'a [u8], policy: &DecapPolicy) -> Result<Decapped<'a>, TunnelError> {
    let (d, inner) = outer41(outer_v4, policy.reject_private)?;
    let (src4, dst4) = (d.outer_src, d.outer_dst);
    let (src6, dst6) = (inner.src(), inner.dst());
    match v4_of(&src6) {
        Some(v4) if is_forbidden_v4(v4, policy.reject_private) => {
            return Err(TunnelError::Rule("RFC 3964 §5.1: 6to4 inner source embeds a forbidden IPv4 address"));
        }
        Some(v4) if v4 != src4 => {
            return Err(TunnelError::Rule(
                "RFC 3056 §8 / RFC 3964 §5.1: 6to4 inner source does not embed the outer IPv4 source",
            ));
        }
        Some(_) => {}
        None if !policy.allow_native_src => {
            return Err(TunnelError::Rule("RFC 3056 §5.2: native inner source accepted only from relays"));
        }
        None => {}
    }
    match v4_of(&dst6) {
        Some(v4) if is_forbidden_v4(v4, policy.reject_private) => {
            return Err(TunnelError::Rule("RFC 3964 §5.1: 6to4 inner destination embeds a forbidden IPv4 address"));
        }
        Some(v4) if policy.strict_dst && v4 != dst4 => {
            return Err(TunnelError::Rule(
                "RFC 3964 §5.1: 6to4 inner destination does not embed the outer IPv4 destination",
            ));
        }
        Some(_) => {}
        None if !policy.allow_native_dst => {
            return Err(TunnelError::Rule("RFC 3056 §5.2: only a relay router forwards to native IPv6"));
        }
        None => {}
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::wire::ipv6::Ipv6Header;
    use crate::DropReason;
    use proptest::prelude::*;

    const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

    fn v6(src: Ipv6Addr, dst: Ipv6Addr, tc: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        Ipv6Header {
            traffic_class: tc,
            flow_label: 0,
            payload_len: payload.len() as u16,
            next_header: proto::UDP,
            hop_limit: 63,
            src,
            dst,
        }
        .emit(&mut b);
        b.extend_from_slice(payload);
        b
    }

    /// Hand-built outer header, independent of `Ipv4Header::emit`.
    fn v4(src: Ipv4Addr, dst: Ipv4Addr, proto_: u8, payload: &[u8]) -> Vec<u8> {
        let tl = (20 + payload.len()) as u16;
        let mut b = vec![0x45, 0, (tl >> 8) as u8, tl as u8, 0, 0, 0, 0, 64, proto_, 0, 0];
        b.extend_from_slice(&src.octets());
        b.extend_from_slice(&dst.octets());
        let c = checksum::finish(checksum::sum(&b));
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b.extend_from_slice(payload);
        b
    }

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn rfc3056_section2_address_format() {
        assert_eq!(v4_of(&a6("2002:c000:201::1")), Some(A));
        assert_eq!(addr(A, 0, 1), a6("2002:c000:201::1"));
        assert_eq!(addr(A, 0xabcd, 0x0123_4567_89ab_cdef), a6("2002:c000:201:abcd:123:4567:89ab:cdef"));
        assert_eq!(prefix_for(A).to_string(), "2002:c000:201::/48");
        assert!(prefix_for(A).contains(&a6("2002:c000:201:ffff::9")));
        assert!(prefix().contains(&a6("2002:c000:201::1")));
        assert_eq!(v4_of(&a6("2001:db8::1")), None);
        assert_eq!(v4_of(&a6("2003:c000:201::1")), None);
        assert!(is_6to4(&a6("2002::")));
    }

    #[test]
    fn forbidden_v4_per_rfc3964() {
        for a in ["0.1.2.3", "127.0.0.1", "224.0.0.1", "239.1.1.1", "240.0.0.1", "255.255.255.255"] {
            assert!(is_forbidden_v4(a.parse().unwrap(), false), "{a}");
        }
        for a in ["10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1"] {
            assert!(is_forbidden_v4(a.parse().unwrap(), true), "{a}");
            assert!(!is_forbidden_v4(a.parse().unwrap(), false), "{a}");
        }
        assert!(!is_forbidden_v4(A, true));
        assert!(!is_forbidden_v4(Ipv4Addr::new(172, 32, 0, 1), true));
    }

    #[test]
    fn encap_6to4_to_6to4_bytes_and_etherparse() {
        let inner = v6(a6("2002:c000:201::1"), a6("2002:c633:6402::1"), 0xb8, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut out = Out::with_ident_seed(0x1234);
        let v = encap(&inner, A, None, &Ipv4Outer::default(), &mut out);
        assert_eq!(v, Verdict::Emit);
        assert_eq!(out.len(), 1);
        let (kind, pkt) = out.get(0).unwrap();
        assert_eq!(kind, PacketKind::Forward);
        // Hand-computed outer header: 45 00 | len 68 | id 1234 | no DF | ttl 64 | proto 41 | csum | src | dst
        let tl = 20 + inner.len() as u16;
        let mut want = vec![0x45, 0x00, (tl >> 8) as u8, tl as u8, 0x12, 0x34, 0x00, 0x00, 64, 41, 0, 0];
        want.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 2]);
        let c = checksum::finish(checksum::sum(&want));
        want[10..12].copy_from_slice(&c.to_be_bytes());
        want.extend_from_slice(&inner);
        assert_eq!(pkt, &want[..]);
        let e = etherparse::Ipv4HeaderSlice::from_slice(pkt).unwrap();
        assert_eq!(e.to_header().calc_header_checksum(), e.header_checksum());
        assert_eq!(e.protocol(), etherparse::IpNumber::IPV6);
        assert_eq!(e.ttl(), 64);
        assert!(!e.dont_fragment());
        let sliced = etherparse::SlicedPacket::from_ip(pkt).unwrap();
        assert!(sliced.net.is_some());
    }

    #[test]
    fn encap_options_and_relay() {
        let inner = v6(a6("2002:c000:201::1"), a6("2001:db8::1"), 0xb8, &[0; 4]);
        let mut out = Out::new();
        // Native destination without a relay: rule drop.
        assert_eq!(encap(&inner, A, None, &Ipv4Outer::default(), &mut out), Verdict::Drop(DropReason::TunnelRule));
        assert!(out.is_empty());
        let opts = Ipv4Outer { ttl: 17, df: true, copy_traffic_class: true };
        assert_eq!(encap(&inner, A, Some(RELAY_ANYCAST), &opts, &mut out), Verdict::Emit);
        let p = Ipv4Packet::new(out.get(0).unwrap().1).unwrap();
        assert_eq!((p.dst(), p.ttl(), p.dont_frag(), p.tos()), (RELAY_ANYCAST, 17, true, 0xb8));
        assert!(p.checksum_ok());
        // 6to4 destination embedding a forbidden address.
        let bad = v6(a6("2002:c000:201::1"), addr(Ipv4Addr::new(127, 0, 0, 1), 0, 1), 0, &[]);
        assert_eq!(encap(&bad, A, Some(RELAY_ANYCAST), &opts, &mut out), Verdict::Drop(DropReason::TunnelRule));
        // Explicit end points (configured tunnel).
        assert_eq!(encap_to(&inner, A, B, &Ipv4Outer::default(), &mut out), Verdict::Emit);
        let p = Ipv4Packet::new(out.get(0).unwrap().1).unwrap();
        assert_eq!((p.src(), p.dst(), p.protocol(), p.payload()), (A, B, 41, &inner[..]));
        // Not IPv6.
        assert_eq!(encap(&[0x45; 40], A, None, &opts, &mut out), Verdict::Drop(DropReason::Malformed));
        assert_eq!(encap_to(&[0x45; 40], A, B, &opts, &mut out), Verdict::Drop(DropReason::Malformed));
        assert_eq!(encap(&inner[..30], A, None, &opts, &mut out), Verdict::Drop(DropReason::Truncated));
    }

    #[test]
    fn encap_decap_round_trip_preserves_inner() {
        let inner = v6(addr(A, 7, 1), addr(B, 9, 2), 0, &(0..200u8).collect::<Vec<_>>());
        let mut out = Out::new();
        assert_eq!(encap(&inner, A, None, &Ipv4Outer::default(), &mut out), Verdict::Emit);
        let pkt = out.get(0).unwrap().1.to_vec();
        let d = decap(&pkt, &DecapPolicy::default()).unwrap();
        assert_eq!((d.outer_src, d.outer_dst, d.inner), (A, B, &inner[..]));
    }

    #[test]
    fn decap_hand_built_vector() {
        let inner = v6(a6("2002:c000:201::1"), a6("2002:c633:6402::1"), 0, &[9; 8]);
        let pkt = v4(A, B, 41, &inner);
        let d = decap(&pkt, &DecapPolicy::default()).unwrap();
        assert_eq!(d.inner, &inner[..]);
        // From a relay: native source allowed by default, rejected when not.
        let inner = v6(a6("2001:db8::1"), a6("2002:c633:6402::1"), 0, &[]);
        let pkt = v4(RELAY_ANYCAST, B, 41, &inner);
        assert!(decap(&pkt, &DecapPolicy::default()).is_ok());
        let strict = DecapPolicy { allow_native_src: false, ..DecapPolicy::default() };
        assert!(matches!(decap(&pkt, &strict), Err(TunnelError::Rule(_))));
    }

    #[test]
    fn decap_rejects_spoofed_inner_source() {
        // Inner source claims 2002:c000:202::/48 (192.0.2.2) but comes from 192.0.2.1.
        let inner = v6(a6("2002:c000:202::1"), a6("2002:c633:6402::1"), 0, &[]);
        let pkt = v4(A, B, 41, &inner);
        let e = decap(&pkt, &DecapPolicy::default()).unwrap_err();
        assert!(matches!(e, TunnelError::Rule(m) if m.contains("RFC 3056 §8")), "{e:?}");
        assert_eq!(DropReason::from(e), DropReason::TunnelRule);
    }

    #[test]
    fn decap_destination_and_address_rules() {
        // Inner destination embeds another IPv4 than the outer destination.
        let inner = v6(a6("2002:c000:201::1"), addr(Ipv4Addr::new(203, 0, 113, 9), 0, 1), 0, &[]);
        let pkt = v4(A, B, 41, &inner);
        assert!(matches!(decap(&pkt, &DecapPolicy::default()), Err(TunnelError::Rule(_))));
        let lax = DecapPolicy { strict_dst: false, ..DecapPolicy::default() };
        assert!(decap(&pkt, &lax).is_ok());
        // Private embedded addresses: rejected by default, accepted when allowed.
        let p10 = Ipv4Addr::new(10, 0, 0, 1);
        let inner = v6(addr(p10, 0, 1), addr(B, 0, 1), 0, &[]);
        let pkt = v4(p10, B, 41, &inner);
        assert!(matches!(decap(&pkt, &DecapPolicy::default()), Err(TunnelError::Rule(_))));
        let private_ok = DecapPolicy { reject_private: false, ..DecapPolicy::default() };
        assert!(decap(&pkt, &private_ok).is_ok());
        // Forbidden embedded destination (broadcast), loopback outer source.
        let inner = v6(addr(A, 0, 1), addr(Ipv4Addr::BROADCAST, 0, 1), 0, &[]);
        assert!(matches!(decap(&v4(A, B, 41, &inner), &lax), Err(TunnelError::Rule(_))));
        let inner = v6(addr(Ipv4Addr::LOCALHOST, 0, 1), addr(B, 0, 1), 0, &[]);
        assert!(matches!(decap(&v4(Ipv4Addr::LOCALHOST, B, 41, &inner), &lax), Err(TunnelError::Rule(_))));
        // IPv4-mapped inner source, multicast inner source, native dst policy.
        let inner = v6(a6("::ffff:192.0.2.1"), addr(B, 0, 1), 0, &[]);
        assert!(matches!(decap(&v4(A, B, 41, &inner), &lax), Err(TunnelError::Rule(_))));
        let inner = v6(a6("ff02::1"), addr(B, 0, 1), 0, &[]);
        assert!(matches!(decap(&v4(A, B, 41, &inner), &lax), Err(TunnelError::Rule(_))));
        let inner = v6(addr(A, 0, 1), a6("2001:db8::1"), 0, &[]);
        assert!(decap(&v4(A, B, 41, &inner), &lax).is_ok());
        let router = DecapPolicy { allow_native_dst: false, ..DecapPolicy::default() };
        assert!(matches!(decap(&v4(A, B, 41, &inner), &router), Err(TunnelError::Rule(_))));
    }

    #[test]
    fn decap_structural_errors() {
        let inner = v6(addr(A, 0, 1), addr(B, 0, 1), 0, &[1, 2, 3]);
        let good = v4(A, B, 41, &inner);
        assert!(decap(&good, &DecapPolicy::default()).is_ok());
        assert_eq!(
            DropReason::from(decap(&v4(A, B, 4, &inner), &DecapPolicy::default()).unwrap_err()),
            DropReason::TunnelRule
        );
        let mut bad = good.clone();
        bad[11] ^= 1;
        assert_eq!(decap(&bad, &DecapPolicy::default()), Err(TunnelError::BadIpv4Checksum));
        assert_eq!(decap(&good[..19], &DecapPolicy::default()), Err(TunnelError::Truncated));
        // Inner shorter than the IPv4 payload (trailing junk) or truncated.
        let mut junk = inner.clone();
        junk.push(0);
        assert_eq!(decap(&v4(A, B, 41, &junk), &DecapPolicy::default()), Err(TunnelError::Malformed));
        assert_eq!(decap(&v4(A, B, 41, &inner[..42]), &DecapPolicy::default()), Err(TunnelError::Truncated));
        // A fragment.
        let mut frag = good.clone();
        frag[6] = 0x20;
        frag[10] = 0;
        frag[11] = 0;
        let c = checksum::finish(checksum::sum(&frag[..20]));
        frag[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(decap(&frag, &DecapPolicy::default()), Err(TunnelError::Fragmented));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200), relay in any::<u32>()) {
            let _ = decap(&data, &DecapPolicy::default());
            let _ = decap(&data, &DecapPolicy { reject_private: false, strict_dst: false, ..DecapPolicy::default() });
            let mut out = Out::new();
            let _ = encap(&data, A, Some(Ipv4Addr::from(relay)), &Ipv4Outer::default(), &mut out);
        }

        #[test]
        fn address_round_trip(v4 in any::<u32>(), sla in any::<u16>(), iid in any::<u64>()) {
            let a = addr(Ipv4Addr::from(v4), sla, iid);
            prop_assert_eq!(v4_of(&a), Some(Ipv4Addr::from(v4)));
            prop_assert!(prefix_for(Ipv4Addr::from(v4)).contains(&a));
        }
    }
}
