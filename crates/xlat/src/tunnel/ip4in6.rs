//! IPv4-in-IPv6 — RFC 2473 "Generic Packet Tunneling in IPv6", as used by
//! DSTM and by DS-Lite (RFC 6333 §5: the B4 and the AFTR carry IPv4 in IPv6
//! with Next Header 4).
//!
//! Implements:
//! - RFC 2473 §3.1 (encapsulation) and §3.3 (decapsulation): [`encap`],
//!   [`encap_tunnel`] (and [`encap_tunnel_append`]), [`decap`]. Decapsulation is generic (§1): it accepts
//!   IPv4 (Next Header 4) and IPv6 (Next Header 41) original packets.
//! - RFC 2473 §4.1.1 and §5.1: the Tunnel Encapsulation Limit option (type 4,
//!   length 1) in a Destination Options header padded with PadN; emitted
//!   when a limit is configured, and reported by [`decap`] (a zero limit is
//!   the caller's concern when it would re-encapsulate).
//! - RFC 2473 §6.3 (hop limit set by the entry point), §6.4 (Traffic Class
//!   preconfigured — 0 — or copied from the original packet's TOS), §6.5
//!   (flow label 0), §6.7 (tunnel MTU = path MTU − tunnel headers).
//! - RFC 2473 §7.2 (IPv4 original packets larger than the tunnel MTU): with
//!   DF set, drop and send an ICMPv4 Destination Unreachable "fragmentation
//!   needed" (type 3 code 4, RFC 1191 next-hop MTU = tunnel MTU) back to the
//!   source, built per RFC 1812 §4.3.2.3 (as much of the original as fits in
//!   576 bytes) and not sent when RFC 1812 §4.3.2.7 forbids; with DF clear,
//!   encapsulate and fragment the IPv6 tunnel packet (§7.1 / RFC 8200 §4.5).
//!   With [`MtuRule::fragment_df`], RFC 6333 §5.3 instead: the IPv4 packet
//!   is never refused for its size, the tunnel packet is fragmented.
//! - RFC 2473 §8 (ICMPv6 errors about tunnel packets relayed to the
//!   original IPv4 source) is [`super::ip4in6_err`].
//!
//! Style: encapsulation writes into `Out` and returns a [`Verdict`] (tunnel
//! packets are [`PacketKind::Forward`], the ICMPv4 error is
//! [`PacketKind::IcmpError`]); [`decap`] is zero-copy and returns the
//! original packet as a borrowed slice.

use super::{drop_verdict, TunnelError};
use crate::wire::icmp;
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::{self, emit_frag, Ipv6Header, Ipv6Packet};
use crate::wire::proto;
use crate::{Out, PacketKind, Verdict};
use core::net::{Ipv4Addr, Ipv6Addr};

/// Option type of the Tunnel Encapsulation Limit option (RFC 2473 §4.1.1).
pub const OPT_TUNNEL_ENCAP_LIMIT: u8 = 4;
/// Pad1 option type (RFC 8200 §4.2).
const OPT_PAD1: u8 = 0;
/// PadN option type (RFC 8200 §4.2).
const OPT_PADN: u8 = 1;
/// Default encapsulation limit RFC 2473 §6.6 recommends configuring.
pub const DEFAULT_ENCAP_LIMIT: u8 = 4;
/// Length of the Destination Options header carrying the limit option:
/// next header, length 0, option (4, 1, limit), PadN (1, 1, 0).
pub const ENCAP_LIMIT_HDR_LEN: usize = 8;
/// The IPv6 minimum link MTU (RFC 8200 §5); smaller tunnel MTUs are raised to it.
pub const IPV6_MIN_MTU: u16 = 1280;
/// One IPv6 tunnel's encapsulation parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunnel {
    /// Tunnel entry point (our address; e.g. the B4 or AFTR).
    pub src: Ipv6Addr,
    /// Tunnel exit point.
    pub dst: Ipv6Addr,
    /// Tunnel hop limit (RFC 2473 §6.3: set independently of the original packet).
    pub hop_limit: u8,
    /// Emit a Tunnel Encapsulation Limit option with this value (RFC 2473 §4.1.1).
    pub encap_limit: Option<u8>,
    /// Copy the original IPv4 TOS into the Traffic Class (RFC 2473 §6.4);
    /// otherwise the preconfigured value 0.
    pub traffic_class_from_inner: bool,
}

impl Tunnel {
    /// Bytes of tunnel headers: 40, or 48 with the encapsulation-limit option.
    #[inline]
    pub fn header_len(&self) -> usize {
        ipv6::HEADER_LEN + if self.encap_limit.is_some() { ENCAP_LIMIT_HDR_LEN } else { 0 }
    }
}

/// What to do with original packets too big for the tunnel (RFC 2473 §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtuRule {
    /// Path MTU from the entry point to the exit point: the largest IPv6
    /// tunnel packet to send. Values below 1280 are treated as 1280.
    /// The tunnel MTU (RFC 2473 §6.7) is this minus [`Tunnel::header_len`].
    pub mtu: u16,
    /// Source address of the ICMPv4 "fragmentation needed" errors (an IPv4
    /// address of this node, e.g. 192.0.0.2 on a DS-Lite B4, RFC 6333 §5.7).
    pub icmp_src: Ipv4Addr,
    /// Identification of the Fragment header, when DF is clear and the
    /// tunnel packet must be fragmented (the caller keeps the counter).
    pub frag_ident: u32,
    /// RFC 6333 §5.3: carry the IPv4 packet unaltered whatever its DF bit
    /// and fragment the IPv6 tunnel packet (the exit point reassembles);
    /// the softwire looks like a link with the IPv4 MTU to the inner
    /// hosts. When false, RFC 2473 §7.2 (i): DF set means drop and send
    /// "fragmentation needed".
    pub fragment_df: bool,
}

/// Encapsulate an IPv4 packet in IPv6 (RFC 2473 §3.1), without an MTU
/// limit other than the 65,535-byte IPv6 payload. See [`encap_tunnel`].
pub fn encap(
    inner_v4: &[u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    encap_limit: Option<u8>,
    traffic_class_from_inner: bool,
    out: &mut Out,
) -> Verdict {
    let t = Tunnel { src, dst, hop_limit, encap_limit, traffic_class_from_inner };
    encap_tunnel(inner_v4, &t, None, out)
}

/// Encapsulate an IPv4 packet in IPv6 through `t`, applying the RFC 2473
/// §7.2 packet-size rules when `mtu` is given.
///
/// The original packet must be a well-formed IPv4 packet with a valid
/// header checksum (bytes after its Total Length are not carried). Its TTL
/// is not touched: decrementing it is part of forwarding (§3.1), which the
/// caller does. Clears `out`; on [`Verdict::Emit`] `out` holds either the
/// tunnel packet, its fragments, or one ICMPv4 error
/// ([`PacketKind::IcmpError`]). Oversized packets for which no ICMP error
/// may be sent are dropped with `TooBig`.
pub fn encap_tunnel(inner_v4: &[u8], t: &Tunnel, mtu: Option<&MtuRule>, out: &mut Out) -> Verdict {
    out.clear();
    encap_tunnel_append(inner_v4, t, mtu, out)
}

/// [`encap_tunnel`] without clearing `out` first: the tunnel packet(s) or
/// the ICMPv4 error are appended after what `out` already holds (an engine
/// that emits several packets for one input, e.g. a hairpinned packet and
/// an error). On a drop, nothing is appended.
pub fn encap_tunnel_append(inner_v4: &[u8], t: &Tunnel, mtu: Option<&MtuRule>, out: &mut Out) -> Verdict {
    let mark = out.mark();
    match encap_inner(inner_v4, t, mtu, out) {
        Ok(()) => Verdict::Emit,
        Err(e) => {
            out.rollback(mark);
            drop_verdict(e)
        }
    }
}

/// The Destination Options header with the limit option (RFC 2473 §5.1).
#[inline]
fn limit_header(limit: u8) -> [u8; ENCAP_LIMIT_HDR_LEN] {
    [proto::IPIP, 0, OPT_TUNNEL_ENCAP_LIMIT, 1, limit, OPT_PADN, 1, 0]
}

fn encap_inner(inner_v4: &[u8], t: &Tunnel, rule: Option<&MtuRule>, out: &mut Out) -> Result<(), TunnelError> {
    let p = Ipv4Packet::new(inner_v4)?;
    if !p.checksum_ok() {
        return Err(TunnelError::BadIpv4Checksum);
    }
    let inner = p.as_bytes();
    let lh;
    let ext: &[u8] = match t.encap_limit {
        Some(l) => {
            lh = limit_header(l);
            &lh
        }
        None => &[],
    };
    // Everything after the fixed IPv6 header (the fragmentable part).
    let payload_len = ext.len() + inner.len();
    let limit = rule.map_or(usize::MAX, |r| usize::from(r.mtu.max(IPV6_MIN_MTU)));
    let first_next = if ext.is_empty() { proto::IPIP } else { proto::DSTOPTS };
    let mut hdr = Ipv6Header {
        traffic_class: if t.traffic_class_from_inner { p.tos() } else { 0 },
        flow_label: 0,
        payload_len: 0,
        next_header: first_next,
        hop_limit: t.hop_limit,
        src: t.src,
        dst: t.dst,
    };
    let too_big = TunnelError::TooBig { mtu: limit.min(ipv6::HEADER_LEN + usize::from(u16::MAX)) };
    if ipv6::HEADER_LEN + payload_len <= limit {
        // Fits: one tunnel packet, if the payload length fits its field.
        hdr.payload_len = u16::try_from(payload_len).map_err(|_| too_big)?;
        let total = ipv6::HEADER_LEN + payload_len;
        let buf = out.space(total).ok_or(TunnelError::NoSpace)?;
        hdr.emit(buf);
        buf[ipv6::HEADER_LEN..ipv6::HEADER_LEN + ext.len()].copy_from_slice(ext);
        buf[ipv6::HEADER_LEN + ext.len()..total].copy_from_slice(inner);
        out.commit(total, PacketKind::Forward);
        return Ok(());
    }
    let Some(rule) = rule else { return Err(too_big) };
    if p.dont_frag() && !rule.fragment_df {
        // RFC 2473 §7.2 (i): drop and report the tunnel MTU (§6.7).
        let tunnel_mtu = limit - ipv6::HEADER_LEN - ext.len();
        return frag_needed(&p, rule.icmp_src, tunnel_mtu as u16, out);
    }
    // RFC 2473 §7.2 (ii): encapsulate, then fragment the tunnel packet.
    // The reassembled payload must still fit the Payload Length field.
    if payload_len > usize::from(u16::MAX) {
        return Err(too_big);
    }
    let chunk_max = (limit - ipv6::HEADER_LEN - ipv6::FRAG_LEN) & !7;
    hdr.next_header = proto::FRAGMENT;
    let mut off = 0;
    while off < payload_len {
        let n = chunk_max.min(payload_len - off);
        let more = off + n < payload_len;
        hdr.payload_len = (ipv6::FRAG_LEN + n) as u16;
        let total = ipv6::HEADER_LEN + ipv6::FRAG_LEN + n;
        let buf = out.space(total).ok_or(TunnelError::NoSpace)?;
        hdr.emit(buf);
        emit_frag(&mut buf[ipv6::HEADER_LEN..], first_next, (off / 8) as u16, more, rule.frag_ident);
        copy_concat(&mut buf[ipv6::HEADER_LEN + ipv6::FRAG_LEN..total], ext, inner, off);
        out.commit(total, PacketKind::Forward);
        off += n;
    }
    Ok(())
}

/// Fill `dst` with bytes `from..from + dst.len()` of `a ++ b`.
fn copy_concat(dst: &mut [u8], a: &[u8], b: &[u8], from: usize) {
    let mut w = 0;
    if from < a.len() {
        let n = (a.len() - from).min(dst.len());
        dst[..n].copy_from_slice(&a[from..from + n]);
        w = n;
    }
    let rest = dst.len() - w;
    if rest > 0 {
        let at = from + w - a.len();
        dst[w..].copy_from_slice(&b[at..at + rest]);
    }
}

/// RFC 1812 §4.3.2.7: an ICMP error must not be sent about an ICMP error,
/// a non-first fragment, or a datagram whose source is not a unicast host
/// (0/8, 127/8, multicast, class E, broadcast) or whose destination is
/// multicast or broadcast.
fn may_send_icmp(p: &Ipv4Packet<'_>) -> bool {
    let bad = |a: Ipv4Addr| {
        let o = a.octets()[0];
        o == 0 || o == 127 || o >= 224
    };
    if p.frag_offset() != 0 || bad(p.src()) || p.dst().octets()[0] >= 224 {
        return false;
    }
    !(p.protocol() == proto::ICMP && p.payload().first().is_some_and(|&t| icmp::is_error_v4(t)))
}

/// Write an ICMPv4 Destination Unreachable / fragmentation needed (RFC 792,
/// RFC 1191) about `p` from `src`, as an [`PacketKind::IcmpError`] packet.
fn frag_needed(p: &Ipv4Packet<'_>, src: Ipv4Addr, next_hop_mtu: u16, out: &mut Out) -> Result<(), TunnelError> {
    if !may_send_icmp(p) {
        return Err(TunnelError::TooBig { mtu: usize::from(next_hop_mtu) });
    }
    let mtu = next_hop_mtu.to_be_bytes();
    let rest = [0, 0, mtu[0], mtu[1]];
    if !crate::origin::icmp4_error(out, src, p.as_bytes(), icmp::v4::DEST_UNREACH, icmp::v4::CODE_FRAG_NEEDED, rest) {
        return Err(TunnelError::NoSpace);
    }
    Ok(())
}

/// The family of the original packet inside an IPv6 tunnel packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (Next Header 4): 4in6, DSTM, DS-Lite.
    Ipv4,
    /// IPv6 (Next Header 41): 6in6.
    Ipv6,
}

/// A decapsulated IPv6 tunnel packet, borrowing from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decapped<'a> {
    /// Tunnel entry point.
    pub src: Ipv6Addr,
    /// Tunnel exit point.
    pub dst: Ipv6Addr,
    /// Tunnel Traffic Class (for ECN/Diffserv egress handling by the caller).
    pub traffic_class: u8,
    /// Tunnel hop limit.
    pub hop_limit: u8,
    /// The Tunnel Encapsulation Limit option's value, if present (first one
    /// found, RFC 2473 §4.1.1 left-to-right order). A value of 0 forbids
    /// re-encapsulation: the caller must check before tunnelling again.
    pub encap_limit: Option<u8>,
    /// Family of the original packet.
    pub family: Family,
    /// The original packet (validated: a well-formed IPv4 packet with a
    /// valid header checksum, or a well-formed IPv6 packet, filling the
    /// tunnel payload exactly).
    pub inner: &'a [u8],
}

/// Find the Tunnel Encapsulation Limit option in the Destination Options
/// headers before `upper_at` (RFC 2473 §4.1.1: strict left-to-right).
fn find_encap_limit(p: &Ipv6Packet<'_>, upper_at: usize) -> Result<Option<u8>, TunnelError> {
    let b = p.as_bytes();
    let mut next = p.next_header();
    let mut off = ipv6::HEADER_LEN;
    while off < upper_at {
        match next {
            proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                let len_byte = *b.get(off + 1).ok_or(TunnelError::Truncated)?;
                let len = (usize::from(len_byte) + 1) * 8;
                let h = b.get(off..off + len).ok_or(TunnelError::Truncated)?;
                if next == proto::DSTOPTS {
                    if let Some(l) = scan_options(&h[2..])? {
                        return Ok(Some(l));
                    }
                }
                next = h[0];
                off += len;
            }
            proto::FRAGMENT => {
                next = *b.get(off).ok_or(TunnelError::Truncated)?;
                off += ipv6::FRAG_LEN;
            }
            _ => break,
        }
    }
    Ok(None)
}

/// Walk an options area (RFC 8200 §4.2 TLVs); return the encapsulation limit.
fn scan_options(opts: &[u8]) -> Result<Option<u8>, TunnelError> {
    let mut i = 0;
    while i < opts.len() {
        let t = opts[i];
        if t == OPT_PAD1 {
            i += 1;
            continue;
        }
        let len = usize::from(*opts.get(i + 1).ok_or(TunnelError::Malformed)?);
        let data = opts.get(i + 2..i + 2 + len).ok_or(TunnelError::Malformed)?;
        if t == OPT_TUNNEL_ENCAP_LIMIT {
            return match data {
                [l] => Ok(Some(*l)),
                _ => Err(TunnelError::Malformed),
            };
        }
        i += 2 + len;
    }
    Ok(None)
}

/// Decapsulate an IPv6 tunnel packet (RFC 2473 §3.3). Walks the extension
/// chain (Hop-by-Hop, Routing, Destination Options skipped; the limit
/// option reported), rejects fragments (reassemble first) and routing
/// headers with segments left, and requires the upper layer to be IPv4 (4)
/// or IPv6 (41). Zero-copy.
pub fn decap(outer_v6: &[u8]) -> Result<Decapped<'_>, TunnelError> {
    let p = Ipv6Packet::new(outer_v6)?;
    let chain = p.walk()?;
    if chain.frag.is_some_and(|f| !f.is_atomic()) {
        return Err(TunnelError::Fragmented);
    }
    if chain.segments_left_at.is_some() {
        return Err(TunnelError::Rule("RFC 8200 §4.4: routing header with segments left; not the tunnel exit point"));
    }
    let encap_limit = find_encap_limit(&p, chain.upper_at)?;
    let inner = p.as_bytes().get(chain.upper_at..).ok_or(TunnelError::Truncated)?;
    let family = match chain.upper {
        proto::IPIP => {
            let i = Ipv4Packet::new(inner)?;
            if i.as_bytes().len() != inner.len() {
                return Err(TunnelError::Malformed);
            }
            if !i.checksum_ok() {
                return Err(TunnelError::BadIpv4Checksum);
            }
            Family::Ipv4
        }
        proto::IPV6 => {
            let i = Ipv6Packet::new(inner)?;
            if i.as_bytes().len() != inner.len() {
                return Err(TunnelError::Malformed);
            }
            Family::Ipv6
        }
        _ => return Err(TunnelError::Rule("RFC 2473 §3.3: next header is neither IPv4 (4) nor IPv6 (41)")),
    };
    Ok(Decapped {
        src: p.src(),
        dst: p.dst(),
        traffic_class: p.traffic_class(),
        hop_limit: p.hop_limit(),
        encap_limit,
        family,
        inner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::DropReason;
    use proptest::prelude::*;

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    const B4: &str = "2001:db8:0:1::2";
    const AFTR: &str = "2001:db8:ffff::1";
    const ICMP_SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 0, 2);

    /// Hand-built IPv4/UDP packet of `len` bytes total.
    fn v4(len: usize, df: bool, tos: u8) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[0] = 0x45;
        b[1] = tos;
        b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        b[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
        b[6] = if df { 0x40 } else { 0 };
        b[8] = 63;
        b[9] = proto::UDP;
        b[12..16].copy_from_slice(&[10, 0, 0, 1]);
        b[16..20].copy_from_slice(&[198, 51, 100, 7]);
        let c = checksum::finish(checksum::sum(&b[..20]));
        b[10..12].copy_from_slice(&c.to_be_bytes());
        for (i, x) in b[20..].iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    fn tunnel(limit: Option<u8>) -> Tunnel {
        Tunnel { src: a6(B4), dst: a6(AFTR), hop_limit: 64, encap_limit: limit, traffic_class_from_inner: false }
    }

    fn only_packet(out: &Out) -> Vec<u8> {
        assert_eq!(out.len(), 1);
        let (k, p) = out.get(0).unwrap();
        assert_eq!(k, PacketKind::Forward);
        p.to_vec()
    }

    #[test]
    fn encap_plain_bytes() {
        let inner = v4(28, false, 0xb8);
        let mut out = Out::new();
        assert_eq!(encap(&inner, a6(B4), a6(AFTR), 64, None, true, &mut out), Verdict::Emit);
        let pkt = only_packet(&out);
        // 6 | TC b8 | flow 0 ; payload 28 ; NH 4 ; HL 64
        let mut want = vec![0x6b, 0x80, 0, 0, 0, 28, 4, 64];
        want.extend_from_slice(&a6(B4).octets());
        want.extend_from_slice(&a6(AFTR).octets());
        want.extend_from_slice(&inner);
        assert_eq!(pkt, want);
        let s = etherparse::SlicedPacket::from_ip(&pkt).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = s.net else { panic!() };
        assert_eq!(ip.payload().ip_number, etherparse::IpNumber::IPV4);
        assert_eq!(ip.payload().payload, &inner[..]);
        // Without copying, the Traffic Class is 0.
        assert_eq!(encap(&inner, a6(B4), a6(AFTR), 64, None, false, &mut out), Verdict::Emit);
        assert_eq!(Ipv6Packet::new(out.get(0).unwrap().1).unwrap().traffic_class(), 0);
    }

    #[test]
    fn encap_limit_option_present_and_parsed() {
        let inner = v4(40, true, 0);
        let mut out = Out::new();
        assert_eq!(encap(&inner, a6(B4), a6(AFTR), 10, Some(DEFAULT_ENCAP_LIMIT), false, &mut out), Verdict::Emit);
        let pkt = only_packet(&out);
        assert_eq!(pkt.len(), 40 + 8 + 40);
        assert_eq!(pkt[6], proto::DSTOPTS);
        assert_eq!(&pkt[40..48], &[4, 0, 4, 1, 4, 1, 1, 0]);
        let s = etherparse::SlicedPacket::from_ip(&pkt).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = s.net else { panic!() };
        assert_eq!(ip.payload().ip_number, etherparse::IpNumber::IPV4);
        assert_eq!(ip.extensions().slice().len(), 8);
        let d = decap(&pkt).unwrap();
        assert_eq!((d.src, d.dst, d.hop_limit, d.family), (a6(B4), a6(AFTR), 10, Family::Ipv4));
        assert_eq!(d.encap_limit, Some(4));
        assert_eq!(d.inner, &inner[..]);
        // A zero limit is reported, not refused.
        encap(&inner, a6(B4), a6(AFTR), 10, Some(0), false, &mut out);
        assert_eq!(decap(out.get(0).unwrap().1).unwrap().encap_limit, Some(0));
    }

    #[test]
    fn round_trip_and_6in6() {
        let inner = v4(300, false, 0);
        let mut out = Out::new();
        assert_eq!(encap(&inner, a6(B4), a6(AFTR), 64, None, false, &mut out), Verdict::Emit);
        let pkt = only_packet(&out);
        let d = decap(&pkt).unwrap();
        assert_eq!((d.family, d.inner, d.encap_limit), (Family::Ipv4, &inner[..], None));
        // 6in6 with a Pad1-padded destination options header in front.
        let mut inner6 = vec![0x60, 0, 0, 0, 0, 0, 59, 9];
        inner6.extend_from_slice(&[0x11; 32]);
        let mut b = vec![0u8; 40];
        Ipv6Header {
            traffic_class: 0,
            flow_label: 0,
            payload_len: (8 + inner6.len()) as u16,
            next_header: proto::DSTOPTS,
            hop_limit: 3,
            src: a6(B4),
            dst: a6(AFTR),
        }
        .emit(&mut b);
        b.extend_from_slice(&[proto::IPV6, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&inner6);
        let d = decap(&b).unwrap();
        assert_eq!((d.family, d.inner, d.encap_limit), (Family::Ipv6, &inner6[..], None));
    }

    #[test]
    fn decap_rejections() {
        let inner = v4(60, false, 0);
        let mut out = Out::new();
        encap(&inner, a6(B4), a6(AFTR), 64, None, false, &mut out);
        let good = only_packet(&out);
        // Wrong next header.
        let mut bad = good.clone();
        bad[6] = proto::UDP;
        let e = decap(&bad).unwrap_err();
        assert!(matches!(e, TunnelError::Rule(m) if m.contains("RFC 2473")));
        assert_eq!(DropReason::from(e), DropReason::TunnelRule);
        // Inner IPv4 header checksum wrong, inner truncated, trailing junk.
        let mut bad = good.clone();
        bad[40 + 10] ^= 1;
        assert_eq!(decap(&bad), Err(TunnelError::BadIpv4Checksum));
        let mut bad = good.clone();
        bad[5] -= 1;
        assert_eq!(decap(&bad[..good.len() - 1]), Err(TunnelError::Truncated));
        let mut bad = good.clone();
        bad[5] += 1;
        bad.push(0);
        assert_eq!(decap(&bad), Err(TunnelError::Malformed));
        // Limit option with a bad length; options overrunning the header.
        let mut b = good[..40].to_vec();
        b[5] = (8 + inner.len()) as u8;
        b[6] = proto::DSTOPTS;
        b.extend_from_slice(&[4, 0, 4, 2, 1, 1, 0, 0]);
        b.extend_from_slice(&inner);
        assert_eq!(decap(&b), Err(TunnelError::Malformed));
        b[43] = 9;
        assert_eq!(decap(&b), Err(TunnelError::Malformed));
        // A real fragment.
        let mut f = good[..40].to_vec();
        f[5] = 16;
        f[6] = proto::FRAGMENT;
        f.extend_from_slice(&[4, 0, 0, 1, 0, 0, 0, 9]);
        f.extend_from_slice(&inner[..8]);
        assert_eq!(decap(&f), Err(TunnelError::Fragmented));
        assert_eq!(decap(&good[..39]), Err(TunnelError::Truncated));
        // Not IPv4 inside: encap refuses.
        assert_eq!(encap(&good, a6(B4), a6(AFTR), 64, None, false, &mut out), Verdict::Drop(DropReason::Malformed));
        let mut badsum = inner.clone();
        badsum[10] ^= 0xff;
        assert_eq!(
            encap(&badsum, a6(B4), a6(AFTR), 64, None, false, &mut out),
            Verdict::Drop(DropReason::BadIpv4Checksum)
        );
    }

    fn rule(mtu: u16) -> MtuRule {
        MtuRule { mtu, icmp_src: ICMP_SRC, frag_ident: 0xdead_beef, fragment_df: false }
    }

    #[test]
    fn append_keeps_what_was_there_and_rolls_back_on_drop() {
        let mut out = Out::new();
        out.push(PacketKind::IcmpError, &[0x45; 20]);
        let inner = v4(100, false, 0);
        assert_eq!(encap_tunnel_append(&inner, &tunnel(None), None, &mut out), Verdict::Emit);
        assert_eq!(out.len(), 2);
        assert_eq!(out.get(0).unwrap().1, &[0x45; 20]);
        assert_eq!(decap(out.get(1).unwrap().1).unwrap().inner, &inner[..]);
        let mut bad = inner.clone();
        bad[10] ^= 1;
        assert_eq!(
            encap_tunnel_append(&bad, &tunnel(None), None, &mut out),
            Verdict::Drop(DropReason::BadIpv4Checksum)
        );
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn rfc6333_5_3_df_packet_fragmented_not_refused() {
        let inner = v4(1500, true, 0);
        let mut out = Out::new();
        let r = MtuRule { fragment_df: true, ..rule(1280) };
        assert_eq!(encap_tunnel(&inner, &tunnel(None), Some(&r), &mut out), Verdict::Emit);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(k, f)| k == PacketKind::Forward && f.len() <= 1280));
        let p = Ipv6Packet::new(out.get(0).unwrap().1).unwrap();
        assert_eq!(p.next_header(), proto::FRAGMENT);
    }

    #[test]
    fn fits_exactly_at_mtu() {
        let mut out = Out::new();
        let inner = v4(1400 - 48, true, 0);
        assert_eq!(encap_tunnel(&inner, &tunnel(Some(4)), Some(&rule(1400)), &mut out), Verdict::Emit);
        assert_eq!(only_packet(&out).len(), 1400);
    }

    fn check_frag_needed(limit: Option<u8>, want_mtu: u16) {
        let inner = v4(1500, true, 0);
        let mut out = Out::new();
        assert_eq!(encap_tunnel(&inner, &tunnel(limit), Some(&rule(1500)), &mut out), Verdict::Emit);
        assert_eq!(out.len(), 1);
        let (k, pkt) = out.get(0).unwrap();
        assert_eq!(k, PacketKind::IcmpError);
        assert_eq!(pkt.len(), 576);
        let s = etherparse::SlicedPacket::from_ip(pkt).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &s.net else { panic!() };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        assert_eq!((h.source, h.destination), (ICMP_SRC.octets(), [10, 0, 0, 1]));
        let Some(etherparse::TransportSlice::Icmpv4(icmp)) = &s.transport else { panic!() };
        use etherparse::icmpv4::DestUnreachableHeader;
        assert_eq!(
            icmp.icmp_type(),
            etherparse::Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: want_mtu
            })
        );
        let want = etherparse::Icmpv4Header::with_checksum(icmp.icmp_type(), icmp.payload()).checksum;
        assert_eq!(icmp.checksum(), want);
        assert_eq!(icmp.payload(), &inner[..548]);
    }

    #[test]
    fn oversize_df_sends_frag_needed() {
        check_frag_needed(None, 1460);
        check_frag_needed(Some(3), 1452);
    }

    #[test]
    fn oversize_df_without_icmp() {
        let mut out = Out::new();
        // The original is itself an ICMP error: drop silently (RFC 1812 §4.3.2.7).
        let mut inner = v4(1500, true, 0);
        inner[9] = proto::ICMP;
        inner[20] = icmp::v4::DEST_UNREACH;
        inner[10] = 0;
        inner[11] = 0;
        let c = checksum::finish(checksum::sum(&inner[..20]));
        inner[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(encap_tunnel(&inner, &tunnel(None), Some(&rule(1280)), &mut out), Verdict::Drop(DropReason::TooBig));
        assert!(out.is_empty());
        // No MTU rule and the payload cannot fit 65,535 bytes.
        let big = v4(65535, true, 0);
        assert_eq!(encap_tunnel(&big, &tunnel(Some(1)), None, &mut out), Verdict::Drop(DropReason::TooBig));
        assert_eq!(encap_tunnel(&big, &tunnel(None), None, &mut out), Verdict::Emit);
    }

    fn check_fragments(limit: Option<u8>, inner_len: usize, mtu: u16) {
        let inner = v4(inner_len, false, 0x04);
        let t = tunnel(limit);
        let mut out = Out::new();
        assert_eq!(encap_tunnel(&inner, &t, None, &mut out), Verdict::Emit);
        let whole = only_packet(&out);
        assert_eq!(encap_tunnel(&inner, &t, Some(&rule(mtu)), &mut out), Verdict::Emit);
        assert!(out.len() > 1);
        let (mut filled, mut last_end) = (0, 0);
        let mut manual = vec![0u8; whole.len() - 40];
        for (i, (k, f)) in out.iter().enumerate() {
            assert_eq!(k, PacketKind::Forward);
            assert!(f.len() <= usize::from(mtu.max(1280)), "fragment {i} is {} bytes", f.len());
            let p = Ipv6Packet::new(f).unwrap();
            let c = p.walk().unwrap();
            let fh = c.frag.unwrap();
            assert_eq!((fh.ident, fh.more, fh.next), (0xdead_beef, i + 1 < out.len(), whole[6]));
            let data = &f[48..];
            if fh.more {
                assert_eq!(data.len() % 8, 0);
            }
            let at = usize::from(fh.offset) * 8;
            manual[at..at + data.len()].copy_from_slice(data);
            assert_eq!(&f[..4], &whole[..4]);
            assert_eq!(&f[7..40], &whole[7..40]);
            // etherparse validates the fixed header (its 0.16 Fragment-header
            // accessors do not follow the RFC 8200 bit layout, so the
            // reassembly below is done by hand).
            let e = etherparse::Ipv6HeaderSlice::from_slice(f).unwrap();
            assert_eq!(usize::from(e.payload_length()) + 40, f.len());
            assert_eq!(e.next_header(), etherparse::IpNumber::IPV6_FRAGMENTATION_HEADER);
            filled += data.len();
            last_end = at + data.len();
        }
        assert_eq!((filled, last_end), (whole.len() - 40, whole.len() - 40));
        assert_eq!(&manual[..], &whole[40..]);
    }

    #[test]
    fn oversize_df_clear_fragments_reassemble() {
        check_fragments(None, 3000, 1280);
        check_fragments(Some(4), 3000, 1500);
        check_fragments(Some(4), 1300, 1000); // mtu raised to 1280
        check_fragments(None, 65535, 1280);
    }

    #[test]
    fn icmp_error_bytes_at_minimum_mtu() {
        // A DF packet just over a 1280 MTU: next-hop MTU 1240 (0x04d8), 576 bytes in all.
        let inner = v4(1300, true, 0);
        let mut out = Out::new();
        encap_tunnel(&inner, &tunnel(None), Some(&rule(1280)), &mut out);
        let (_, pkt) = out.get(0).unwrap();
        assert_eq!(pkt.len(), 576);
        let m = icmp::IcmpMessage::new(&pkt[20..]).unwrap();
        assert_eq!((m.kind(), m.code(), m.rest()), (3, 4, [0, 0, 0x04, 0xd8]));
        assert!(checksum::verifies(checksum::sum(&pkt[20..])));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300), mtu in any::<u16>(), limit in any::<Option<u8>>()) {
            let _ = decap(&data);
            let mut out = Out::new();
            let _ = encap_tunnel(&data, &tunnel(limit), Some(&rule(mtu)), &mut out);
            let _ = encap_tunnel(&data, &tunnel(limit), None, &mut out);
        }

        #[test]
        fn v6_headed_garbage_never_panics(next in any::<u8>(), body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut b = vec![0u8; 40];
            Ipv6Header { traffic_class: 0, flow_label: 0, payload_len: body.len() as u16, next_header: next, hop_limit: 1, src: a6(B4), dst: a6(AFTR) }.emit(&mut b);
            b.extend_from_slice(&body);
            let _ = decap(&b);
        }

        #[test]
        fn round_trip_any_size(len in 20usize..4000, limit in any::<Option<u8>>(), mtu in 1280u16..9000, df in any::<bool>()) {
            let inner = v4(len, df, 0);
            let mut out = Out::new();
            prop_assert_eq!(encap_tunnel(&inner, &tunnel(limit), Some(&rule(mtu)), &mut out), Verdict::Emit);
            let hl = tunnel(limit).header_len();
            if len + hl <= usize::from(mtu) {
                let d = decap(out.get(0).unwrap().1).unwrap();
                prop_assert_eq!(d.inner, &inner[..]);
                prop_assert_eq!(d.encap_limit, limit);
            } else if df {
                prop_assert_eq!(out.get(0).unwrap().0, PacketKind::IcmpError);
            } else {
                prop_assert!(out.iter().all(|(_, f)| f.len() <= usize::from(mtu)));
            }
        }
    }
}
