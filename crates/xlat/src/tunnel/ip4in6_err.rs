//! RFC 2473 §8: ICMPv6 errors about IPv4-in-IPv6 tunnel packets, relayed
//! to the source of the original IPv4 packet (RFC 6333 §5.3 / §6.3 and
//! RFC 7596 §8: "ICMP relayed to the inner source").
//!
//! A router between the two tunnel end-points that cannot deliver a tunnel
//! packet sends its ICMPv6 error to the tunnel entry point (the packet's
//! IPv6 source). The entry point is not the originator of the inner IPv4
//! packet, so it reports the failure to that originator as an ICMPv4 error
//! built from the IPv4 header quoted inside the ICMPv6 error (RFC 2473
//! §8.1, §8.3):
//!
//! | ICMPv6 error about the tunnel packet     | ICMPv4 to the original source              |
//! |------------------------------------------|--------------------------------------------|
//! | Packet Too Big, MTU M                    | with DF: 3/4 "fragmentation needed", next-hop MTU M − tunnel headers; without DF: none (the entry point fragments from now on) |
//! | Destination Unreachable (any code)       | 3/1 host unreachable                        |
//! | Time Exceeded (hop limit in transit)     | 3/1 host unreachable                        |
//! | Parameter Problem (e.g. the Tunnel Encapsulation Limit reached, code 2) | 3/1 host unreachable |
//!
//! In every case [`relay_error`] tells the caller which tunnel the error is
//! about and, for Packet Too Big, the new tunnel MTU (RFC 2473 §6.7:
//! tunnel MTU = path MTU − tunnel headers), so it can fragment later
//! packets. ICMPv4 errors are not sent when RFC 1812 §4.3.2.7 forbids
//! (the original was itself an ICMP error, a non-first fragment, or from a
//! non-unicast source).

use super::TunnelError;
use crate::checksum;
use crate::wire::icmp::{self, IcmpMessage};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::proto;
use crate::Out;
use core::net::{Ipv4Addr, Ipv6Addr};

/// What an ICMPv6 error about one of our tunnel packets was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relayed {
    /// The quoted tunnel packet's source: our tunnel end-point (the caller
    /// checks it is one of its addresses).
    pub tunnel_src: Ipv6Addr,
    /// The quoted tunnel packet's destination: the remote end-point.
    pub tunnel_dst: Ipv6Addr,
    /// The original IPv4 packet's source (where the ICMPv4 went).
    pub inner_src: Ipv4Addr,
    /// The original IPv4 packet's destination.
    pub inner_dst: Ipv4Addr,
    /// Packet Too Big: the IPv6 path MTU it reported (at least 1280).
    pub path_mtu: Option<u16>,
    /// True when an ICMPv4 error was written to `out`.
    pub sent: bool,
}

/// Find the original IPv4 header inside a quoted tunnel packet: walk the
/// extension headers (Destination Options with the encapsulation limit,
/// a first Fragment header) to Next Header 4.
fn quoted_inner<'a>(q: &Ipv6Packet<'a>) -> Result<&'a [u8], TunnelError> {
    let b = q.as_bytes();
    let mut next = q.next_header();
    let mut off = ipv6::HEADER_LEN;
    for _ in 0..8 {
        match next {
            proto::IPIP => return b.get(off..).ok_or(TunnelError::Truncated),
            proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                let len = (usize::from(*b.get(off + 1).ok_or(TunnelError::Truncated)?) + 1) * 8;
                next = *b.get(off).ok_or(TunnelError::Truncated)?;
                off += len;
            }
            proto::FRAGMENT => {
                let h = b.get(off..off + ipv6::FRAG_LEN).ok_or(TunnelError::Truncated)?;
                if u16::from_be_bytes([h[2], h[3]]) >> 3 != 0 {
                    return Err(TunnelError::Rule("RFC 2473 §8: the quoted tunnel packet is a non-first fragment"));
                }
                next = h[0];
                off += ipv6::FRAG_LEN;
            }
            _ => return Err(TunnelError::Rule("RFC 2473 §8: the quoted packet is not an IPv4-in-IPv6 tunnel packet")),
        }
    }
    Err(TunnelError::Malformed)
}

/// RFC 1812 §4.3.2.7 (see `ip4in6::may_send_icmp`): no error about an
/// ICMP error, a non-first fragment, or a non-unicast source/destination.
fn may_send(p: &Ipv4Packet<'_>) -> bool {
    let o = p.src().octets()[0];
    if p.frag_offset() != 0 || o == 0 || o == 127 || o >= 224 || p.dst().octets()[0] >= 224 {
        return false;
    }
    !(p.protocol() == proto::ICMP && p.payload().first().is_some_and(|&t| icmp::is_error_v4(t)))
}

/// Handle an ICMPv6 error (`pkt`, a whole IPv6 packet) about one of our
/// IPv4-in-IPv6 tunnel packets (RFC 2473 §8): write the ICMPv4 error for
/// the original source into `out` (cleared first; at most one packet, an
/// [`crate::PacketKind::IcmpError`]) from `icmp_src`, and say what it was
/// about. `header_len` is the tunnel header length our packets carry (40,
/// or 48 with the encapsulation-limit option).
///
/// Errors: not an ICMPv6 error (`Rule`), a bad ICMPv6 checksum
/// (`Malformed`), a quote that is not one of our tunnel packets or is too
/// short to hold the original IPv4 header (`Rule`, `Truncated`).
pub fn relay_error(pkt: &[u8], icmp_src: Ipv4Addr, header_len: usize, out: &mut Out) -> Result<Relayed, TunnelError> {
    out.clear();
    let ip = Ipv6Packet::new(pkt)?;
    let chain = ip.walk()?;
    if chain.upper != proto::ICMPV6 || chain.frag.is_some_and(|f| !f.is_atomic()) {
        return Err(TunnelError::Rule("RFC 2473 §8: not an (unfragmented) ICMPv6 message"));
    }
    let msg = ip.as_bytes().get(chain.upper_at..).ok_or(TunnelError::Truncated)?;
    let m = IcmpMessage::new(msg)?;
    if !icmp::is_error_v6(m.kind()) {
        return Err(TunnelError::Rule("RFC 2473 §8: not an ICMPv6 error"));
    }
    let sum = checksum::pseudo_v6(&ip.src(), &ip.dst(), proto::ICMPV6, msg.len() as u32) + checksum::sum(msg);
    if !checksum::verifies(sum) {
        return Err(TunnelError::Malformed);
    }
    let q = Ipv6Packet::new_quoted(m.body())?;
    let inner = quoted_inner(&q)?;
    let i4 = Ipv4Packet::new_quoted(inner)?;
    let mut r = Relayed {
        tunnel_src: q.src(),
        tunnel_dst: q.dst(),
        inner_src: i4.src(),
        inner_dst: i4.dst(),
        path_mtu: None,
        sent: false,
    };
    let (kind, code, rest) = match m.kind() {
        icmp::v6::PACKET_TOO_BIG => {
            let mtu = u32::from_be_bytes(m.rest()).clamp(1280, 65535) as u16;
            r.path_mtu = Some(mtu);
            if !i4.dont_frag() {
                // §8.3: the entry point fragments from now on; nothing to report.
                return Ok(r);
            }
            let tunnel_mtu = (usize::from(mtu).saturating_sub(header_len)).max(68) as u16;
            let b = tunnel_mtu.to_be_bytes();
            (icmp::v4::DEST_UNREACH, icmp::v4::CODE_FRAG_NEEDED, [0, 0, b[0], b[1]])
        }
        _ => (icmp::v4::DEST_UNREACH, icmp::v4::CODE_HOST_UNREACH, [0; 4]),
    };
    if may_send(&i4) {
        r.sent = crate::origin::icmp4_error(out, icmp_src, i4.as_bytes(), kind, code, rest);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::ip4in6::{encap_tunnel, MtuRule, Tunnel};
    use crate::wire::ipv6::Ipv6Header;
    use crate::{PacketKind, Verdict};

    const B4: &str = "2001:db8:0:1::2";
    const AFTR: &str = "2001:db8:ffff::1";
    const ROUTER: &str = "2001:db8:9::1";
    const SRC4: Ipv4Addr = Ipv4Addr::new(192, 0, 0, 2);

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn v4(len: usize, df: bool, protocol: u8) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[0] = 0x45;
        b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        b[6] = if df { 0x40 } else { 0 };
        b[8] = 64;
        b[9] = protocol;
        b[12..16].copy_from_slice(&[10, 0, 0, 1]);
        b[16..20].copy_from_slice(&[198, 51, 100, 7]);
        let c = checksum::finish(checksum::sum(&b[..20]));
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b
    }

    /// The ICMPv6 error a router sends to the B4 about `tunnel_pkt`.
    fn icmp6(kind: u8, code: u8, rest: [u8; 4], tunnel_pkt: &[u8]) -> Vec<u8> {
        let quote = &tunnel_pkt[..tunnel_pkt.len().min(1280 - 48)];
        let mut msg = vec![kind, code, 0, 0];
        msg.extend_from_slice(&rest);
        msg.extend_from_slice(quote);
        let c = checksum::finish(
            checksum::pseudo_v6(&a6(ROUTER), &a6(B4), proto::ICMPV6, msg.len() as u32) + checksum::sum(&msg),
        );
        msg[2..4].copy_from_slice(&c.to_be_bytes());
        let mut b = vec![0u8; 40];
        Ipv6Header {
            traffic_class: 0,
            flow_label: 0,
            payload_len: msg.len() as u16,
            next_header: proto::ICMPV6,
            hop_limit: 64,
            src: a6(ROUTER),
            dst: a6(B4),
        }
        .emit(&mut b);
        b.extend_from_slice(&msg);
        b
    }

    fn tunnel_pkt(inner: &[u8], limit: Option<u8>) -> Vec<u8> {
        let t =
            Tunnel { src: a6(B4), dst: a6(AFTR), hop_limit: 64, encap_limit: limit, traffic_class_from_inner: false };
        let mut out = Out::new();
        assert_eq!(encap_tunnel(inner, &t, None, &mut out), Verdict::Emit);
        out.get(0).unwrap().1.to_vec()
    }

    #[test]
    fn rfc2473_8_packet_too_big_df_becomes_frag_needed() {
        let inner = v4(1400, true, proto::UDP);
        let tp = tunnel_pkt(&inner, Some(4));
        let err = icmp6(icmp::v6::PACKET_TOO_BIG, 0, 1300u32.to_be_bytes(), &tp);
        let mut out = Out::new();
        let r = relay_error(&err, SRC4, 48, &mut out).unwrap();
        assert_eq!(
            (r.tunnel_src, r.tunnel_dst, r.inner_src, r.path_mtu),
            (a6(B4), a6(AFTR), Ipv4Addr::new(10, 0, 0, 1), Some(1300))
        );
        assert!(r.sent);
        let (k, p) = out.get(0).unwrap();
        assert_eq!(k, PacketKind::IcmpError);
        let e = Ipv4Packet::new(p).unwrap();
        assert!(e.checksum_ok());
        assert_eq!((e.src(), e.dst(), e.protocol()), (SRC4, Ipv4Addr::new(10, 0, 0, 1), proto::ICMP));
        let m = IcmpMessage::new(e.payload()).unwrap();
        // 1300 - 48 = 1252 = 0x04e4
        assert_eq!((m.kind(), m.code(), m.rest()), (3, 4, [0, 0, 0x04, 0xe4]));
        assert!(checksum::verifies(checksum::sum(e.payload())));
        assert_eq!(&m.body()[..20], &inner[..20]);
    }

    #[test]
    fn rfc2473_8_packet_too_big_without_df_only_updates_mtu() {
        let tp = tunnel_pkt(&v4(1400, false, proto::UDP), None);
        let err = icmp6(icmp::v6::PACKET_TOO_BIG, 0, 1000u32.to_be_bytes(), &tp);
        let mut out = Out::new();
        let r = relay_error(&err, SRC4, 40, &mut out).unwrap();
        assert_eq!((r.path_mtu, r.sent), (Some(1280), false), "an MTU below 1280 is raised to it");
        assert!(out.is_empty());
    }

    #[test]
    fn rfc2473_8_unreachable_and_hop_limit_become_host_unreachable() {
        for (kind, code) in [(icmp::v6::DEST_UNREACH, 3), (icmp::v6::TIME_EXCEEDED, 0), (icmp::v6::PARAM_PROBLEM, 2)] {
            let tp = tunnel_pkt(&v4(60, false, proto::TCP), Some(0));
            let err = icmp6(kind, code, [0, 0, 0, 42], &tp);
            let mut out = Out::new();
            let r = relay_error(&err, SRC4, 48, &mut out).unwrap();
            assert!(r.sent);
            let e = Ipv4Packet::new(out.get(0).unwrap().1).unwrap();
            let m = IcmpMessage::new(e.payload()).unwrap();
            assert_eq!((m.kind(), m.code()), (3, 1), "ICMPv6 {kind}/{code}");
        }
    }

    #[test]
    fn rfc1812_no_error_about_an_icmp_error() {
        let mut inner = v4(56, true, proto::ICMP);
        inner[20] = icmp::v4::DEST_UNREACH;
        let tp = tunnel_pkt(&inner, None);
        let err = icmp6(icmp::v6::DEST_UNREACH, 0, [0; 4], &tp);
        let mut out = Out::new();
        let r = relay_error(&err, SRC4, 40, &mut out).unwrap();
        assert!(!r.sent);
        assert!(out.is_empty());
    }

    #[test]
    fn refusals() {
        let tp = tunnel_pkt(&v4(60, false, proto::UDP), None);
        let mut out = Out::new();
        // Bad checksum.
        let mut err = icmp6(icmp::v6::DEST_UNREACH, 0, [0; 4], &tp);
        err[43] ^= 1;
        assert_eq!(relay_error(&err, SRC4, 40, &mut out), Err(TunnelError::Malformed));
        // An echo request is not an error.
        let err = icmp6(icmp::v6::ECHO_REQUEST, 0, [0; 4], &tp);
        assert!(matches!(relay_error(&err, SRC4, 40, &mut out), Err(TunnelError::Rule(_))));
        // The quote is not a tunnel packet (UDP inside).
        let mut other = tp.clone();
        other[6] = proto::UDP;
        let err = icmp6(icmp::v6::DEST_UNREACH, 0, [0; 4], &other);
        assert!(matches!(relay_error(&err, SRC4, 40, &mut out), Err(TunnelError::Rule(_))));
        // The quote stops inside the IPv4 header.
        let err = icmp6(icmp::v6::DEST_UNREACH, 0, [0; 4], &tp[..50]);
        assert_eq!(relay_error(&err, SRC4, 40, &mut out), Err(TunnelError::Truncated));
        assert!(out.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut out = Out::new();
            let _ = relay_error(&body, SRC4, 40, &mut out);
            let tp = tunnel_pkt(&v4(60, true, proto::UDP), None);
            let mut cut = tp.clone();
            cut.truncate(body.len().min(tp.len()));
            let _ = relay_error(&icmp6(2, 0, [0, 0, 5, 0], &cut), SRC4, 40, &mut out);
        }
    }

    #[test]
    fn fragmented_tunnel_packet_first_fragment_quoted() {
        let inner = v4(3000, false, proto::UDP);
        let t =
            Tunnel { src: a6(B4), dst: a6(AFTR), hop_limit: 64, encap_limit: None, traffic_class_from_inner: false };
        let mut out = Out::new();
        let rule = MtuRule { mtu: 1280, icmp_src: SRC4, frag_ident: 1, fragment_df: false };
        assert_eq!(encap_tunnel(&inner, &t, Some(&rule), &mut out), Verdict::Emit);
        let first = out.get(0).unwrap().1.to_vec();
        let second = out.get(1).unwrap().1.to_vec();
        let r = relay_error(&icmp6(icmp::v6::DEST_UNREACH, 0, [0; 4], &first), SRC4, 40, &mut out).unwrap();
        assert_eq!(r.inner_dst, Ipv4Addr::new(198, 51, 100, 7));
        assert!(relay_error(&icmp6(icmp::v6::DEST_UNREACH, 0, [0; 4], &second), SRC4, 40, &mut out).is_err());
    }
}
