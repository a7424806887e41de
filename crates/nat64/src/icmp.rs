//! RFC 6146 §3.5 with RFC 7915 §4.2 / §5.2 and §4.5 / §5.3: ICMP error
//! messages about a translated flow. The packet quoted inside goes back
//! through the BIB (addresses and ports); no state is created or
//! refreshed.

use crate::state::{lock, T4, T6};
use crate::tuple::{flow_of, Fixed, In, NewPort, Via};
use crate::Nat64;
use core::net::{Ipv4Addr, Ipv6Addr};
use xlat::siit::Pass;
use xlat::wire::icmp::{is_error_v4, is_error_v6};
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::ipv6::Ipv6Packet;
use xlat::wire::proto;
use xlat::{DropReason, Out, Verdict};

impl Nat64 {
    /// An ICMPv6 error from the IPv6 side about a packet (Y', y) → (X, x)
    /// that came through us: addresses and ports of the quoted packet go
    /// back through the BIB (RFC 6146 §3.5 and RFC 7915 §5.3); the outer
    /// source becomes T. No state is created or refreshed. When Y is one
    /// of our pool4 addresses the packet in error was hairpinned, and the
    /// caller hairpins the error back too (`pass.hairpin_out`).
    pub(crate) fn icmp_error_6to4(&self, pkt: &[u8], y: Ipv4Addr, l4: &[u8], out: &mut Out, pass: Pass) -> Verdict {
        let inner = &l4[8..];
        let Ok(q) = Ipv6Packet::new_quoted(inner) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let Ok(chain) = q.walk() else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let ql4 = &q.as_bytes()[chain.upper_at.min(q.as_bytes().len())..];
        if chain.upper == proto::ICMPV6 && !ql4.is_empty() && is_error_v6(ql4[0]) {
            return Verdict::Drop(DropReason::IcmpErrorInError);
        }
        let Ok(f) = flow_of(chain.upper, ql4, true, true) else {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        };
        let Some(qy) = self.p6.extract(&q.src()) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let x = T6 { addr: q.dst(), port: f.dport };
        let t = {
            let sh = lock(&self.shards[self.shard_of6(&x.addr)]);
            match sh.bib.get(&(f.p, x)) {
                Some(b) => b.t,
                None => return Verdict::Drop(DropReason::IcmpInnerUntranslatable),
            }
        };
        let map = Fixed { v4: [t.addr, y, qy, t.addr], v6: [Ipv6Addr::UNSPECIFIED; 4] };
        self.translate_flow(&map, pkt, out, f.p, NewPort::Dst(t.port), In::Quoted, pass)
    }

    /// An ICMPv4 error from the IPv4 side about a packet (T, t) → (Y, y)
    /// we sent: the quoted source goes back to (X, x) through the BIB.
    pub(crate) fn icmp_error_4to6(
        &self,
        pkt: &[u8],
        src4: Ipv4Addr,
        dst4: Ipv4Addr,
        l4: &[u8],
        out: &mut Out,
        via: Via<'_>,
    ) -> Verdict {
        if !self.pool.contains(dst4) {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        }
        let inner = &l4[8..];
        let Ok(q) = Ipv4Packet::new_quoted(inner) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let ql4 = q.payload();
        if q.frag_offset() != 0 {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        }
        if q.protocol() == proto::ICMP && !ql4.is_empty() && is_error_v4(ql4[0]) {
            return Verdict::Drop(DropReason::IcmpErrorInError);
        }
        let Ok(f) = flow_of(q.protocol(), ql4, false, true) else {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        };
        let t = T4 { addr: q.src(), port: f.sport };
        if t.addr != dst4 {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        }
        let Some(x) = self.owner_of(f.p, t) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let Some(qy6) = self.p6.embed(q.dst()) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        // `source-icmpv6-errors-better`: the router's own address under
        // pool6 (Jool's default), or RFC 6146 §3.6's outgoing tuple, the
        // quoted destination Y' as if the far host had sent the error. The
        // translator's own address covers addresses pool6 cannot hold.
        let outer_src = if self.cfg.source_icmpv6_errors_better {
            self.p6.embed(src4).unwrap_or_else(|| self.xl.ipv6_address())
        } else {
            qy6
        };
        let map = Fixed { v4: [src4; 4], v6: [outer_src, x.addr, x.addr, qy6] };
        self.translate_flow(&map, pkt, out, f.p, NewPort::Src(x.port), In::Quoted, via.pass())
    }
}
