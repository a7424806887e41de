//! RFC 7915 §5 — translating IPv6 packets into IPv4; EAM hairpinning
//! (RFC 7757 §4.2).

use super::emit::{append_4884, emit_v4, l4_patch, split_4884, Dir, Patch};
use super::icmp::{map_6to4, Rest};
use super::{AddrMap, Pass, Role, Translator};
use crate::addr::is_forbidden_v6;
use crate::checksum::{self, sum_v4, sum_v6};
use crate::origin::{icmp6_error, ICMP4_ERROR_MAX, ICMP6_ERROR_MAX};
use crate::wire::icmp::{self as wicmp, is_error_v6, IcmpMessage};
use crate::wire::ipv4::{self, Ipv4Header};
use crate::wire::ipv6::{self, FragHeader, Ipv6Packet};
use crate::wire::l4::{TcpHeader, UdpHeader};
use crate::wire::{be16, proto, put16};
use crate::{DropReason, Out, PacketKind, Verdict};
use core::net::{Ipv4Addr, Ipv6Addr};

/// RFC 7915 §5.1: DF is set when the translated packet exceeds this size,
/// so that smaller packets can still be fragmented on the IPv4 side.
const DF_THRESHOLD: usize = 1260;

impl Translator {
    /// RFC 7915 §5, with a stateful caller's switches in `pass`.
    pub(crate) fn v6_to_v4<M: AddrMap>(&self, map: &M, pkt: &[u8], out: &mut Out, pass: Pass) -> Verdict {
        let ip = match Ipv6Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let chain = match ip.walk() {
            Ok(c) => c,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let (src6, dst6) = (ip.src(), ip.dst());
        if is_forbidden_v6(&src6) || is_forbidden_v6(&dst6) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }
        let payload = &ip.as_bytes()[chain.upper_at..];
        let frag = chain.frag;
        let first = frag.is_none_or(|f| f.offset == 0);
        let upper = chain.upper;
        let is_icmp_error = upper == proto::ICMPV6 && first && payload.len() >= 8 && is_error_v6(payload[0]);

        if frag.is_some_and(|f| usize::from(f.offset) * 8 + payload.len() > usize::from(u16::MAX)) {
            return Verdict::Drop(DropReason::Malformed);
        }
        let Some(dst4) = map.map_6to4(&self.map, Role::Dst, &dst6) else {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        };
        let src4 = match (map.map_6to4(&self.map, Role::Src, &src6), is_icmp_error) {
            (Some(a), _) => a,
            // RFC 6791: an ICMPv6 error from a router with no IPv4 mapping
            // is sourced from the rfc6791v4 pool, else from the translator.
            (None, true) => self.rfc6791_v4(&src6),
            (None, false) => return Verdict::Drop(DropReason::UntranslatableSource),
        };
        if crate::addr::is_forbidden_v4(src4) || crate::addr::is_forbidden_v4(dst4) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }
        // RFC 7757 §4.2.2: a destination reached through pool6 whose IPv4
        // form belongs to an EAM is an IPv6 node behind this translator:
        // the packet, or the ICMPv6 error, is turned around into IPv6. (A
        // destination that is itself an EAM IPv6 address is that node's
        // own address and is not hairpinned.) Jool decides for an error by
        // its quoted source, which is the same address in any error sent
        // back to the source of the packet it quotes.
        let hairpin = M::EAM_HAIRPIN
            && self.intrinsic_hairpin
            && self.map.eamt.contains_v4(dst4)
            && self.map.eamt.lookup_v6(&dst6).is_none();

        let refuse = |kind: u8, code: u8, rest: [u8; 4], reason: DropReason, out: &mut Out| -> Verdict {
            if is_icmp_error || !first {
                return Verdict::Drop(reason);
            }
            if icmp6_error(out, self.ipv6_address, pkt, kind, code, rest) {
                Verdict::Emit
            } else {
                Verdict::Drop(reason)
            }
        };

        // §5.1 Total Length: "If the Next Header field of the Fragment
        // Header is an extension header (except ESP, but including the
        // Authentication Header (AH)), then the packet SHOULD be dropped and
        // logged." §5.4: the sender gets Destination Unreachable /
        // Communication Administratively Prohibited (1/1), unless the packet
        // is itself an ICMPv6 message.
        if frag.is_some_and(|f| ipv6::is_extension_header(f.next)) {
            let reason = DropReason::ExtensionAfterFragment;
            if upper == proto::ICMPV6 {
                return Verdict::Drop(reason);
            }
            return refuse(wicmp::v6::DEST_UNREACH, wicmp::v6::CODE_ADMIN_PROHIBITED, [0; 4], reason, out);
        }

        // §5.1 TTL: Hop Limit minus one; Time Exceeded when it runs out.
        if ip.hop_limit() <= 1 {
            return refuse(wicmp::v6::TIME_EXCEEDED, 0, [0; 4], DropReason::TtlExpired, out);
        }
        let ttl = ip.hop_limit() - 1;

        // §5.1: a Routing header with Segments Left ≠ 0 makes the packet
        // untranslatable: Parameter Problem, Code 0, pointing at Segments Left.
        if let Some(at) = chain.segments_left_at {
            let ptr = (at as u32).to_be_bytes();
            return refuse(wicmp::v6::PARAM_PROBLEM, 0, ptr, DropReason::SegmentsLeft, out);
        }

        let cfg = &self.cfg;
        let protocol = if upper == proto::ICMPV6 { proto::ICMP } else { upper };
        let total = ipv4::HEADER_LEN + payload.len();
        let mut hdr = self.ipv4_header(&ip, frag, (src4, dst4), protocol, total, ttl, || out.take_ident());
        if pass.reassembled && hdr.df {
            // Sent as fragments: DF stays clear, as on each fragment.
            hdr.df = false;
            hdr.ident = out.take_ident();
        }
        // A hairpinned packet never reaches the IPv4 link: only IPv4's own
        // limit applies to it on the way through.
        let turned = hairpin || pass.hairpin_out;
        let link_mtu = if turned { usize::from(u16::MAX) } else { usize::from(cfg.ipv4_mtu) };
        // Too big for the IPv4 link and may not be fragmented (DF set, or
        // beyond IPv4's 65,535 bytes, or a fragment the translator does not
        // fragment again, RFC 7915 §1.4): Packet Too Big with the largest
        // IPv6 packet that fits, never below the IPv6 minimum MTU. ICMPv6
        // errors are exempt: they are cut to 576 bytes (RFC 1812
        // §4.3.2.3), below.
        let no_refrag = frag.is_some() && !cfg.refragment_ipv6_fragments;
        if total > link_mtu && (hdr.df || total > usize::from(u16::MAX) || no_refrag) && !is_icmp_error {
            let mtu = (u32::from(cfg.ipv4_mtu) + 20).max(1280);
            return refuse(wicmp::v6::PACKET_TOO_BIG, 0, mtu.to_be_bytes(), DropReason::TooBig, out);
        }

        let sums = (sum_v6(&src6) + sum_v6(&dst6), sum_v4(src4) + sum_v4(dst4));
        let mut patch = Patch::default();
        match upper {
            proto::ICMPV6 => {
                // §5.2: fragmented ICMPv6 cannot be translated statelessly.
                if frag.is_some_and(|f| !f.is_atomic()) {
                    return Verdict::Drop(DropReason::FragmentedIcmp);
                }
                let msg = match IcmpMessage::new(payload) {
                    Ok(m) => m,
                    Err(e) => return Verdict::Drop(e.into()),
                };
                if is_icmp_error {
                    // A hairpinned error never leaves as IPv4: keep what
                    // RFC 4443 lets the final ICMPv6 error carry.
                    let max = if turned { ICMP6_ERROR_MAX } else { ICMP4_ERROR_MAX };
                    let v = self.icmp_error_6to4(map, (&src6, &dst6), payload, &msg, hdr, out, max);
                    return if hairpin && v == Verdict::Emit { self.hairpin(pkt, out) } else { v };
                }
                if map_6to4(msg.kind(), msg.code(), msg.rest()).is_none() {
                    return Verdict::Drop(DropReason::IcmpUntranslatable);
                }
                patch = l4_patch(Dir::SixToFour, upper, payload, sums, (&src6, &dst6), payload.len());
            }
            // A zero UDP checksum (legal in IPv6 only for tunnels, RFC 6936)
            // stays zero: "no checksum" in IPv4.
            proto::UDP | proto::TCP if first => {
                let short =
                    if upper == proto::UDP { UdpHeader::new(payload).err() } else { TcpHeader::new(payload).err() };
                if let Some(e) = short {
                    return Verdict::Drop(e.into());
                }
                patch = l4_patch(Dir::SixToFour, upper, payload, sums, (&src6, &dst6), payload.len());
            }
            _ => {}
        }
        if let Err(r) = emit_v4(out, hdr, payload, &patch, link_mtu) {
            out.clear();
            return Verdict::Drop(r);
        }
        if hairpin {
            return self.hairpin(pkt, out);
        }
        Verdict::Emit
    }

    /// RFC 7757 §4.2.2: the IPv4 destination belongs to an EAM, i.e. to an
    /// IPv6 node behind this translator. Translate the IPv4 result back to
    /// IPv6, mapping the source with the prefix only so the receiver
    /// answers through the translator (for an ICMP error, the source when
    /// it is the quoted destination, and the quoted destination).
    ///
    /// The IPv6 rules of the second pass decide the size: a packet too big
    /// for `ipv6-mtu` that may not be fragmented gets Packet Too Big from
    /// this translator, about `orig`, the packet as it came in.
    fn hairpin(&self, orig: &[u8], out: &mut Out) -> Verdict {
        let mut scratch = core::mem::take(&mut out.scratch);
        scratch.clear();
        for (_, p) in out.iter() {
            scratch.extend_from_slice(p);
        }
        out.clear();
        let mut verdict = Verdict::Emit;
        let mut at = 0;
        // The first pass emitted IPv4 packets back to back; each one's Total
        // Length delimits it.
        while at + ipv4::HEADER_LEN <= scratch.len() {
            let len = usize::from(be16(&scratch, at + 2)).clamp(ipv4::HEADER_LEN, scratch.len() - at);
            if let Verdict::Drop(r) = self.v4_to_v6(&super::Stateless, &scratch[at..at + len], out, true) {
                verdict = Verdict::Drop(r);
                out.clear();
                break;
            }
            at += len;
        }
        out.scratch = scratch;
        if verdict == Verdict::Drop(DropReason::TooBig) && self.packet_too_big(orig, out) {
            return Verdict::Emit;
        }
        verdict
    }

    /// RFC 4443 §3.2 Packet Too Big about `orig` (an IPv6 packet this
    /// translator turned around) with `ipv6-mtu`, from the translator's
    /// own IPv6 address; false when nothing may be sent (an ICMPv6 error
    /// about an error, ...).
    pub(crate) fn packet_too_big(&self, orig: &[u8], out: &mut Out) -> bool {
        let mtu = u32::from(self.cfg.ipv6_mtu).to_be_bytes();
        out.clear();
        icmp6_error(out, self.ipv6_address, orig, wicmp::v6::PACKET_TOO_BIG, 0, mtu)
    }

    /// RFC 7915 §5.2 and §5.3: translate an ICMPv6 error and the IPv6
    /// packet it quotes into an ICMPv4 error of at most `max` bytes,
    /// whatever the size of the input. §5.3 sets no limit of its own; the
    /// ICMPv4 rule is RFC 1812 §4.3.2.3's 576 bytes, which every IPv4
    /// path carries (DF is clear, so a smaller link fragments it).
    #[allow(clippy::too_many_arguments)]
    fn icmp_error_6to4<M: AddrMap>(
        &self,
        map: &M,
        (src6, dst6): (&Ipv6Addr, &Ipv6Addr),
        payload: &[u8],
        msg: &IcmpMessage<'_>,
        mut hdr: Ipv4Header,
        out: &mut Out,
        max: usize,
    ) -> Verdict {
        let Some(m) = map_6to4(msg.kind(), msg.code(), msg.rest()) else {
            return Verdict::Drop(DropReason::IcmpUntranslatable);
        };
        let pseudo = checksum::pseudo_v6(src6, dst6, proto::ICMPV6, payload.len() as u32);
        if !checksum::verifies(pseudo + checksum::sum(payload)) {
            return Verdict::Drop(DropReason::BadChecksum);
        }
        // RFC 4884: ICMPv6 Destination Unreachable and Time Exceeded carry
        // a Length attribute in octet 4, in 64-bit words.
        let has_len = matches!(msg.kind(), wicmp::v6::DEST_UNREACH | wicmp::v6::TIME_EXCEEDED);
        let len_attr = if has_len { usize::from(msg.rest()[0]) * 8 } else { 0 };
        let Some((orig, mut ext)) = split_4884(msg.body(), len_attr) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        // Only ICMPv4 Destination Unreachable / Time Exceeded keep extensions
        // (Fragmentation Needed and Protocol Unreachable come from types
        // without them).
        if !(m.kind == wicmp::v4::TIME_EXCEEDED || (m.kind == wicmp::v4::DEST_UNREACH && m.code != 2 && m.code != 4)) {
            ext = &[];
        }

        // The translated error is small: DF clear, so it needs an ID.
        if hdr.df {
            hdr.ident = out.take_ident();
            hdr.df = false;
        }
        let hl = ipv4::HEADER_LEN + wicmp::HEADER_LEN;
        let Some(space) = out.space(max) else {
            return Verdict::Drop(DropReason::Unsupported);
        };
        let cap = max - hl;
        let room = if !ext.is_empty() && cap >= ext.len() + 128 { (cap - ext.len()) & !3 } else { cap };
        if room == cap {
            ext = &[];
        }
        let (n, inner_frag) = match self.inner_6to4(map, orig, &mut space[hl..hl + room]) {
            Ok(x) => x,
            Err(r) => return Verdict::Drop(r),
        };
        let (body_len, len4) = append_4884(&mut space[hl..], n, ext, 4, cap);
        let rest = match m.rest {
            Rest::Copy | Rest::Unused => [0, len4, 0, 0],
            Rest::Pointer(p) => [p, 0, 0, 0],
            Rest::Mtu => {
                let mtu = self.ptb_mtu_6to4(u32::from_be_bytes(msg.rest()), inner_frag);
                [0, 0, (mtu >> 8) as u8, mtu as u8]
            }
        };
        let total = hl + body_len;
        hdr.total_len = total as u16;
        hdr.emit(space);
        let icmp = &mut space[ipv4::HEADER_LEN..total];
        icmp[0] = m.kind;
        icmp[1] = m.code;
        put16(icmp, 2, 0);
        icmp[4..8].copy_from_slice(&rest);
        let c = checksum::finish(checksum::sum(icmp));
        put16(icmp, 2, c);
        out.commit(total, PacketKind::Forward);
        Verdict::Emit
    }

    /// RFC 7915 §5.2 Packet Too Big → Fragmentation Needed MTU:
    /// minimum(advertised MTU − 20, MTU of the IPv4 next hop, MTU of the
    /// IPv6 next hop − 20), "taking into account whether or not the packet
    /// in error includes a Fragment Header" (8 more bytes that vanish in
    /// IPv4).
    fn ptb_mtu_6to4(&self, advertised: u32, inner_frag: bool) -> u16 {
        let cfg = &self.cfg;
        let shrink = if inner_frag { 28 } else { 20 };
        let m = advertised
            .saturating_sub(shrink)
            .min(u32::from(cfg.ipv4_mtu))
            .min(u32::from(cfg.ipv6_mtu).saturating_sub(shrink));
        m.min(u32::from(u16::MAX)) as u16
    }

    /// RFC 7915 §5.3: translate the IPv6 packet quoted in an ICMPv6 error
    /// into `dst`. Returns the bytes written and whether the quoted packet
    /// had a Fragment header.
    pub(crate) fn inner_6to4<M: AddrMap>(
        &self,
        map: &M,
        orig: &[u8],
        dst: &mut [u8],
    ) -> Result<(usize, bool), DropReason> {
        let inner = Ipv6Packet::new_quoted(orig).map_err(|_| DropReason::IcmpInnerUntranslatable)?;
        let chain = inner.walk().map_err(|_| DropReason::IcmpInnerUntranslatable)?;
        let (s6, d6) = (inner.src(), inner.dst());
        let s4 = map.map_6to4(&self.map, Role::InnerSrc, &s6).ok_or(DropReason::IcmpInnerUntranslatable)?;
        let d4 = map.map_6to4(&self.map, Role::InnerDst, &d6).ok_or(DropReason::IcmpInnerUntranslatable)?;
        let payload = &inner.as_bytes()[chain.upper_at..];
        let first = chain.frag.is_none_or(|f| f.offset == 0);
        let p = chain.upper;
        if p == proto::ICMPV6 && first && !payload.is_empty() && is_error_v6(payload[0]) {
            return Err(DropReason::IcmpErrorInError);
        }
        let ext_len = chain.upper_at - ipv6::HEADER_LEN;
        let claimed =
            usize::from(inner.payload_len()).checked_sub(ext_len).ok_or(DropReason::IcmpInnerUntranslatable)?;
        let total = ipv4::HEADER_LEN + claimed;
        let protocol = if p == proto::ICMPV6 { proto::ICMP } else { p };
        // The quoted packet keeps its Hop Limit and gets no fresh ID.
        let hdr = self.ipv4_header(&inner, chain.frag, (s4, d4), protocol, total, inner.hop_limit(), || 0);
        if dst.len() < ipv4::HEADER_LEN {
            return Err(DropReason::Unsupported);
        }
        hdr.emit(dst);
        let n = payload.len().min(dst.len() - ipv4::HEADER_LEN);
        let body = &mut dst[ipv4::HEADER_LEN..ipv4::HEADER_LEN + n];
        body.copy_from_slice(&payload[..n]);
        if first {
            let sums = (sum_v6(&s6) + sum_v6(&d6), sum_v4(s4) + sum_v4(d4));
            l4_patch(Dir::SixToFour, p, payload, sums, (&s6, &d6), claimed).apply(body);
        }
        Ok((ipv4::HEADER_LEN + n, chain.frag.is_some()))
    }

    /// The IPv4 header for an IPv6 packet of `total` translated bytes
    /// (RFC 7915 §5.1, §5.1.1): with a Fragment header, Identification is
    /// its low 16 bits, MF and the offset are copied and DF is clear (atomic
    /// fragments included, RFC 6946); without one, DF is set above 1260
    /// bytes and a packet with DF clear gets the Identification `ident()`.
    /// Total Length is `total` (capped; `emit_v4` rewrites it per packet).
    #[allow(clippy::too_many_arguments)]
    fn ipv4_header(
        &self,
        ip: &Ipv6Packet<'_>,
        frag: Option<FragHeader>,
        (src, dst): (Ipv4Addr, Ipv4Addr),
        protocol: u8,
        total: usize,
        ttl: u8,
        ident: impl FnOnce() -> u16,
    ) -> Ipv4Header {
        let (ident, df, mf, frag_offset) = match frag {
            Some(f) => (f.ident as u16, false, f.more, f.offset),
            None if total > DF_THRESHOLD => (0, true, false, 0),
            None => (ident(), false, false, 0),
        };
        Ipv4Header {
            tos: self.tos_for(ip.traffic_class()),
            total_len: total.min(usize::from(u16::MAX)) as u16,
            ident,
            df,
            mf,
            frag_offset,
            ttl,
            protocol,
            src,
            dst,
        }
    }

    /// RFC 6791 source address for a translated ICMPv6 error: a stable
    /// choice from `rfc6791v4-prefix` keyed by the IPv6 source (so each
    /// router keeps one address in a traceroute), else `ipv4-address`.
    fn rfc6791_v4(&self, src6: &Ipv6Addr) -> Ipv4Addr {
        match self.cfg.rfc6791_v4 {
            Some(p) => {
                let v = u128::from(*src6);
                let h = (v ^ (v >> 64)) as u64;
                let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
                p.nth(h)
            }
            None => self.cfg.ipv4_address,
        }
    }
}
