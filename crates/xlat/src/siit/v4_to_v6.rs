//! RFC 7915 §4 — translating IPv4 packets into IPv6.

use super::emit::{append_4884, emit_v6, l4_patch, split_4884, Dir, FragSpec, Patch};
use super::icmp::{map_4to6, Rest};
use super::{AddrMap, Role, Translator, UdpChecksumZero};
use crate::addr::is_forbidden_v4;
use crate::checksum::{self, sum_v4, sum_v6};
use crate::origin::{icmp4_error, icmp6_checksum, ICMP6_ERROR_MAX};
use crate::wire::icmp::{self as wicmp, is_error_v4, IcmpMessage};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::{self, emit_frag, Ipv6Header};
use crate::wire::l4::{TcpHeader, UdpHeader};
use crate::wire::{be16, proto, put16};
use crate::{DropReason, Out, Verdict};
use core::net::{Ipv4Addr, Ipv6Addr};

/// Why the translator answers with an ICMPv4 error instead of translating.
struct Refuse {
    kind: u8,
    code: u8,
    rest: [u8; 4],
    reason: DropReason,
}

impl Translator {
    /// RFC 7915 §4. `hairpin` is the second pass of an intrinsic EAM
    /// hairpin (RFC 7757 §4.2.2): the TTL was already decremented, no ICMP
    /// error is sent back (the source is IPv6) and the hairpin address
    /// rules of [`hairpin_src`] apply, as they do to every
    /// packet in simple mode (§4.2.1).
    pub(crate) fn v4_to_v6<M: AddrMap>(&self, map: &M, pkt: &[u8], out: &mut Out, hairpin: bool) -> Verdict {
        let ip = match Ipv4Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if !ip.checksum_ok() {
            return Verdict::Drop(DropReason::BadIpv4Checksum);
        }
        let (src4, dst4) = (ip.src(), ip.dst());
        let payload = ip.payload();
        let first = ip.frag_offset() == 0;
        let is_icmp_error = ip.protocol() == proto::ICMP && first && payload.len() >= 8 && is_error_v4(payload[0]);
        // §4.1 Source Address: illegal sources (0.0.0.0, 127.0.0.1, ...) are
        // silently dropped, except that "when translating ICMPv4 Error
        // Messages into ICMPv6, the 'illegal' source address will be
        // translated for the purpose of trouble shooting."
        if (is_forbidden_v4(src4) && !is_icmp_error) || is_forbidden_v4(dst4) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }

        // A fragment reaching past 65,535 bytes belongs to no valid datagram
        // (RFC 791 / RFC 8200 §4.5).
        if usize::from(ip.frag_offset()) * 8 + payload.len() > usize::from(u16::MAX) {
            return Verdict::Drop(DropReason::Malformed);
        }
        let Some(dst6) = map.map_4to6(&self.map, Role::Dst, dst4) else {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        };
        // The RFC 7757 address rules belong to EAM hairpinning: a stateful
        // caller's second pass ([`super::Pass::hairpin_in`]) keeps its own.
        let eam_hairpin = M::EAM_HAIRPIN && (hairpin || self.simple_hairpin);
        let src6 = if eam_hairpin && hairpin_src(src4, is_icmp_error, payload) {
            self.map.v4_to_v6_prefix_only(src4)
        } else {
            map.map_4to6(&self.map, Role::Src, src4)
        };
        let src6 = match (src6, is_icmp_error) {
            (Some(a), _) => a,
            // RFC 6791 / RFC 7915 §4.2: an ICMPv4 error from a router whose
            // address has no IPv6 counterpart (e.g. a private address under
            // the well-known prefix) gets a source from the rfc6791v6 pool,
            // else the translator's own IPv6 address.
            (None, true) => self.rfc6791_v6(src4),
            (None, false) => return Verdict::Drop(DropReason::UntranslatableSource),
        };

        let refuse = |r: Refuse, out: &mut Out| -> Verdict {
            // Never answer an ICMP error with an ICMP error (RFC 1812
            // §4.3.2.7), nor a non-first fragment, nor from the second
            // pass of a hairpin (the source is IPv6).
            if is_icmp_error || hairpin || !first {
                return Verdict::Drop(r.reason);
            }
            if icmp4_error(out, self.cfg.ipv4_address, pkt, r.kind, r.code, r.rest) {
                Verdict::Emit
            } else {
                Verdict::Drop(r.reason)
            }
        };

        // §4.1 Hop Limit: the translator is a router; decrement the TTL and
        // send Time Exceeded when it reaches zero.
        let hop_limit = if hairpin {
            ip.ttl()
        } else if ip.ttl() <= 1 {
            let r = Refuse { kind: wicmp::v4::TIME_EXCEEDED, code: 0, rest: [0; 4], reason: DropReason::TtlExpired };
            return refuse(r, out);
        } else {
            ip.ttl() - 1
        };

        // §4.1: IPv4 options are not translated, except that an unexpired
        // source route option makes the packet untranslatable: Destination
        // Unreachable / Source Route Failed (Type 3, Code 5).
        match ip.unexpired_source_route() {
            Err(e) => return Verdict::Drop(e.into()),
            Ok(Some(_)) => {
                let r = Refuse {
                    kind: wicmp::v4::DEST_UNREACH,
                    code: wicmp::v4::CODE_SOURCE_ROUTE_FAILED,
                    rest: [0; 4],
                    reason: DropReason::SourceRoute,
                };
                return refuse(r, out);
            }
            Ok(None) => {}
        }

        let cfg = &self.cfg;
        let traffic_class = self.traffic_class_for(ip.tos());
        let next = if ip.protocol() == proto::ICMP { proto::ICMPV6 } else { ip.protocol() };
        let hdr = Ipv6Header {
            traffic_class,
            flow_label: 0,
            payload_len: 0,
            next_header: next,
            hop_limit,
            src: src6,
            dst: dst6,
        };

        // §4.1: a Fragment header is added when the packet is a fragment,
        // or when DF is clear and the result exceeds lowest-ipv6-mtu (the
        // translator then fragments). Atomic fragments are never generated
        // (RFC 8021).
        let v6_len = ipv6::HEADER_LEN + payload.len();
        let frag_mtu = usize::from(cfg.lowest_ipv6_mtu.min(cfg.ipv6_mtu));
        let frag = if ip.is_fragment() || (!ip.dont_frag() && v6_len > frag_mtu) {
            Some(FragSpec { offset: ip.frag_offset(), more: ip.more_frags(), ident: u32::from(ip.ident()) })
        } else {
            None
        };
        // DF set: the packet (a fragment too, Fragment header included) is
        // sent as it is, and one too big for the IPv6 link is answered with
        // Fragmentation Needed carrying the MTU the IPv4 sender must use:
        // the IPv6 MTU less the header growth (20 bytes, 28 with the
        // Fragment header). An ICMP error is exempt: it is cut to 1280
        // bytes (RFC 4443 §2.4(c)), which every IPv6 link carries.
        let emit_mtu = if ip.dont_frag() { usize::from(cfg.ipv6_mtu) } else { frag_mtu };
        if ip.dont_frag() && !is_icmp_error {
            let frag_hdr = if frag.is_some() { ipv6::FRAG_LEN } else { 0 };
            if v6_len + frag_hdr > usize::from(cfg.ipv6_mtu) {
                let mtu = cfg.ipv6_mtu - 20 - frag_hdr as u16;
                let r = Refuse {
                    kind: wicmp::v4::DEST_UNREACH,
                    code: wicmp::v4::CODE_FRAG_NEEDED,
                    rest: [0, 0, (mtu >> 8) as u8, mtu as u8],
                    reason: DropReason::TooBig,
                };
                return refuse(r, out);
            }
        }

        let sums = (sum_v4(src4) + sum_v4(dst4), sum_v6(&src6) + sum_v6(&dst6));
        let rewrite = || l4_patch(Dir::FourToSix, ip.protocol(), payload, sums, (&src6, &dst6), payload.len());
        let mut patch = Patch::default();
        match ip.protocol() {
            proto::ICMP => {
                // §4.2: fragmented ICMP cannot be translated statelessly (the
                // ICMPv6 checksum covers a pseudo-header with the full length).
                if ip.is_fragment() {
                    return Verdict::Drop(DropReason::FragmentedIcmp);
                }
                let msg = match IcmpMessage::new(payload) {
                    Ok(m) => m,
                    Err(e) => return Verdict::Drop(e.into()),
                };
                if is_icmp_error {
                    return self.icmp_error_4to6(map, &ip, &msg, hdr, out, eam_hairpin);
                }
                if map_4to6(msg.kind(), msg.code(), msg.rest()).is_none() {
                    return Verdict::Drop(DropReason::IcmpUntranslatable);
                }
                patch = rewrite();
            }
            proto::UDP if first => {
                let udp = match UdpHeader::new(payload) {
                    Ok(u) => u,
                    Err(e) => return Verdict::Drop(e.into()),
                };
                if udp.checksum() != 0 {
                    patch = rewrite();
                } else if ip.is_fragment() || cfg.amend_udp_checksum_zero == UdpChecksumZero::Drop {
                    // §4.5: a stateless translator cannot compute the
                    // checksum of a fragmented datagram, and is configured
                    // to drop unfragmented ones (Jool's
                    // `amend-udp-checksum-zero = false`): drop it, and
                    // (§4.4) tell the sender, Communication
                    // Administratively Prohibited (3/13).
                    let reason = if ip.is_fragment() {
                        DropReason::UdpChecksumZeroFragment
                    } else {
                        DropReason::UdpChecksumZero
                    };
                    let r = Refuse {
                        kind: wicmp::v4::DEST_UNREACH,
                        code: wicmp::v4::CODE_ADMIN_PROHIBITED,
                        rest: [0; 4],
                        reason,
                    };
                    return refuse(r, out);
                } else {
                    // §4.5: compute the missing checksum (IPv6 forbids zero).
                    let ulen = usize::from(udp.length());
                    if ulen < 8 || ulen > payload.len() {
                        return Verdict::Drop(DropReason::Malformed);
                    }
                    let acc =
                        checksum::pseudo_v6(&src6, &dst6, proto::UDP, ulen as u32) + checksum::sum(&payload[..ulen]);
                    let c = checksum::finish(acc);
                    patch.push(6, if c == 0 { 0xffff } else { c });
                }
            }
            proto::TCP if first => {
                if let Err(e) = TcpHeader::new(payload) {
                    return Verdict::Drop(e.into());
                }
                patch = rewrite();
            }
            // Non-first fragments carry no transport header; other protocols
            // are passed through unchanged (§4.1 Next Header).
            _ => {}
        }
        match emit_v6(out, hdr, payload, &patch, frag, emit_mtu) {
            Ok(()) => Verdict::Emit,
            Err(r) => {
                out.clear();
                Verdict::Drop(r)
            }
        }
    }

    /// RFC 7915 §4.2 and §4.3: translate an ICMPv4 error, including the
    /// IPv4 packet it quotes, into an ICMPv6 error of at most 1280 bytes
    /// (RFC 4443 §2.4(c)), whatever the size of the input. `eam_hairpin`:
    /// the quoted destination is mapped with the prefix only (RFC 7757
    /// §4.2).
    fn icmp_error_4to6<M: AddrMap>(
        &self,
        map: &M,
        ip: &Ipv4Packet<'_>,
        msg: &IcmpMessage<'_>,
        mut hdr: Ipv6Header,
        out: &mut Out,
        eam_hairpin: bool,
    ) -> Verdict {
        let Some(m) = map_4to6(msg.kind(), msg.code(), msg.rest()) else {
            return Verdict::Drop(DropReason::IcmpUntranslatable);
        };
        let payload = ip.payload();
        if !checksum::verifies(checksum::sum(payload)) {
            return Verdict::Drop(DropReason::BadChecksum);
        }
        // RFC 4884: the Length attribute (octet 5, 32-bit words) of
        // Destination Unreachable, Time Exceeded and Parameter Problem.
        let len_attr = usize::from(msg.rest()[1]) * 4;
        let Some((orig, mut ext)) = split_4884(msg.body(), len_attr) else {
            return Verdict::Drop(DropReason::Malformed);
        };
        // ICMPv6 Packet Too Big and Parameter Problem have no Length field.
        if !matches!(m.kind, wicmp::v6::DEST_UNREACH | wicmp::v6::TIME_EXCEEDED) {
            ext = &[];
        }

        let hl = ipv6::HEADER_LEN + wicmp::HEADER_LEN;
        let Some(space) = out.space(ICMP6_ERROR_MAX) else {
            return Verdict::Drop(DropReason::Unsupported);
        };
        let cap = ICMP6_ERROR_MAX - hl;
        // Leave room for the extension when there is one worth keeping.
        let room = if !ext.is_empty() && cap >= ext.len() + 128 { (cap - ext.len()) & !7 } else { cap };
        if room == cap {
            ext = &[];
        }
        let n = match self.inner_4to6(map, orig, &mut space[hl..hl + room], eam_hairpin) {
            Ok(n) => n,
            Err(r) => return Verdict::Drop(r),
        };
        let (body_len, len6) = append_4884(&mut space[hl..], n, ext, 8, cap);

        let rest = match m.rest {
            Rest::Copy | Rest::Unused => [len6, 0, 0, 0],
            Rest::Pointer(p) => [0, 0, 0, p],
            Rest::Mtu => {
                let mtu = self.ptb_mtu_4to6(be16(&msg.rest(), 2), orig);
                mtu.to_be_bytes()
            }
        };
        let total = hl + body_len;
        hdr.payload_len = (total - ipv6::HEADER_LEN) as u16;
        hdr.emit(space);
        let icmp = &mut space[ipv6::HEADER_LEN..total];
        icmp[0] = m.kind;
        icmp[1] = m.code;
        put16(icmp, 2, 0);
        icmp[4..8].copy_from_slice(&rest);
        let c = icmp6_checksum(&hdr.src, &hdr.dst, icmp);
        put16(icmp, 2, c);
        out.commit(total, crate::PacketKind::Forward);
        Verdict::Emit
    }

    /// RFC 7915 §4.2 Fragmentation Needed → Packet Too Big MTU:
    /// minimum(advertised MTU + 20, MTU of the IPv6 next hop, MTU of the
    /// IPv4 next hop + 20); an advertised MTU of zero (a pre-RFC 1191
    /// router) is replaced by the greatest plateau below the quoted Total
    /// Length. Raised to 1280, below which IPv6 never goes (RFC 8200 §5).
    fn ptb_mtu_4to6(&self, advertised: u16, orig: &[u8]) -> u32 {
        let cfg = &self.cfg;
        let mut mtu = u32::from(advertised);
        if mtu == 0 {
            let tot = if orig.len() >= 4 { be16(orig, 2) } else { 0 };
            mtu = u32::from(cfg.mtu_plateaus.iter().copied().find(|&p| p < tot).unwrap_or(68));
        }
        let m = (mtu + 20).min(u32::from(cfg.ipv6_mtu)).min(u32::from(cfg.ipv4_mtu) + 20);
        m.max(1280)
    }

    /// RFC 7915 §4.3: translate the IPv4 packet quoted in an ICMPv4 error
    /// into `dst`, cutting it to `dst.len()`. The quoted packet's TTL is
    /// copied, its lengths are derived from its own header (not from the
    /// truncated size), and its transport checksum is updated for the new
    /// addresses. With `eam_hairpin` the destination (an IPv6 node behind
    /// this translator that the quoted packet reached through `pool6`) is
    /// mapped with the prefix only (RFC 7757 §4.2). Returns the bytes
    /// written.
    pub(crate) fn inner_4to6<M: AddrMap>(
        &self,
        map: &M,
        orig: &[u8],
        dst: &mut [u8],
        eam_hairpin: bool,
    ) -> Result<usize, DropReason> {
        let inner = Ipv4Packet::new_quoted(orig).map_err(|_| DropReason::IcmpInnerUntranslatable)?;
        let (s4, d4) = (inner.src(), inner.dst());
        let s6 = map.map_4to6(&self.map, Role::InnerSrc, s4).ok_or(DropReason::IcmpInnerUntranslatable)?;
        let d6 =
            if eam_hairpin { self.map.v4_to_v6_prefix_only(d4) } else { map.map_4to6(&self.map, Role::InnerDst, d4) };
        let d6 = d6.ok_or(DropReason::IcmpInnerUntranslatable)?;
        let payload = inner.payload();
        let first = inner.frag_offset() == 0;
        let p = inner.protocol();
        if p == proto::ICMP && first && !payload.is_empty() && is_error_v4(payload[0]) {
            return Err(DropReason::IcmpErrorInError);
        }
        let claimed = usize::from(inner.total_len()) - inner.header_len();
        let frag = inner.is_fragment();
        let hl = ipv6::HEADER_LEN + if frag { ipv6::FRAG_LEN } else { 0 };
        if dst.len() < hl {
            return Err(DropReason::Unsupported);
        }
        let next = if p == proto::ICMP { proto::ICMPV6 } else { p };
        let traffic_class = self.traffic_class_for(inner.tos());
        let plen = claimed + if frag { ipv6::FRAG_LEN } else { 0 };
        Ipv6Header {
            traffic_class,
            flow_label: 0,
            payload_len: plen.min(usize::from(u16::MAX)) as u16,
            next_header: if frag { proto::FRAGMENT } else { next },
            hop_limit: inner.ttl(),
            src: s6,
            dst: d6,
        }
        .emit(dst);
        if frag {
            emit_frag(
                &mut dst[ipv6::HEADER_LEN..hl],
                next,
                inner.frag_offset(),
                inner.more_frags(),
                u32::from(inner.ident()),
            );
        }
        let n = payload.len().min(dst.len() - hl);
        let body = &mut dst[hl..hl + n];
        body.copy_from_slice(&payload[..n]);
        if first {
            let sums = (sum_v4(s4) + sum_v4(d4), sum_v6(&s6) + sum_v6(&d6));
            l4_patch(Dir::FourToSix, p, payload, sums, (&s6, &d6), claimed).apply(body);
        }
        Ok(hl + n)
    }

    /// An RFC 6791 source for an ICMPv4 error whose source has no IPv6
    /// mapping: the IPv4 address in the host bits of `rfc6791v6-prefix`
    /// (so each router keeps a distinct, stable address in a traceroute),
    /// else the translator's own `ipv6-address`.
    fn rfc6791_v6(&self, src4: Ipv4Addr) -> Ipv6Addr {
        match self.cfg.rfc6791_v6 {
            Some(p) => {
                let host = u128::from(u32::from(src4)) & !p.mask();
                Ipv6Addr::from(u128::from(p.addr()) | host)
            }
            None => self.ipv6_address,
        }
    }
}

/// RFC 7757 §4.2: under the hairpin rules, is the source of this IPv4
/// packet mapped with the prefix only? Yes for a packet (its source is an
/// IPv6 node behind this translator, known to its peer in `pool6` form);
/// for an ICMP error only when it comes from the node the quoted packet
/// was sent to (whose peer addressed it in `pool6` form), not from a
/// router on the way, which keeps its own mapping (as Jool does).
fn hairpin_src(src4: Ipv4Addr, is_icmp_error: bool, icmp: &[u8]) -> bool {
    if !is_icmp_error {
        return true;
    }
    // The quoted IPv4 header's destination, at octets 16..20 after the
    // 8-byte ICMP header.
    icmp.get(8 + 16..8 + 20).is_some_and(|d| d == src4.octets())
}
