//! RFC 6146 §3.8: hairpinning — an IPv6 host reaching another IPv6 host
//! through the other's pool4 transport address. The 6→4 result is fed
//! back in as an IPv4 packet.
//!
//! The two passes act as one router hop: the first pass (RFC 7915 §5,
//! [`xlat::siit::Pass::hairpin_out`]) decrements the Hop Limit and is not
//! held to `ipv4-mtu`, since the packet never reaches the IPv4 link; the
//! second (§4, [`xlat::siit::Pass::hairpin_in`]) keeps the TTL and sends
//! no ICMPv4 error. What the second pass refuses is answered to the IPv6
//! sender in ICMPv6 from the translator's own address: a refused flow
//! (`from4`), a held SYN nobody answered (`expire`), a packet too big for
//! `ipv6-mtu` (Packet Too Big, here). ICMPv6 errors sent back to a
//! hairpinned packet's pool6 source go the same way (`icmp`).

use crate::tuple::Via;
use crate::Nat64;
use std::sync::atomic::Ordering;
use xlat::wire::icmp::v6 as icmp6;
use xlat::{DropReason, Out, PacketKind, Verdict};

impl Nat64 {
    /// The 6→4 pass of `orig` (the IPv6 packet as it came in) left one
    /// IPv4 packet in `out`; run it through the IPv4 side.
    pub(crate) fn hairpin(&self, orig: &[u8], now: u64, out: &mut Out) -> Verdict {
        self.c.hairpinned.fetch_add(1, Ordering::Relaxed);
        match out.get(0) {
            // An ICMP error for the sender (e.g. Hop Limit) goes back as is.
            Some((PacketKind::IcmpError, _)) => return Verdict::Emit,
            Some(_) if out.len() == 1 => {}
            // Not held to ipv4-mtu, the first pass never fragments.
            _ => {
                out.clear();
                return Verdict::Drop(DropReason::Unsupported);
            }
        }
        let mut scratch = out.take_scratch();
        scratch.clear();
        if let Some((_, p)) = out.get(0) {
            scratch.extend_from_slice(p);
        }
        let v = self.from4(&scratch, now, out, Via::Hairpin(orig));
        out.put_scratch(scratch);
        if v == Verdict::Drop(DropReason::TooBig) {
            // RFC 4443 §3.2: too big for the IPv6 link it would leave on.
            let mtu = u32::from(self.xl.config().ipv6_mtu).to_be_bytes();
            out.clear();
            if self.xl.icmp6_error(out, orig, icmp6::PACKET_TOO_BIG, 0, mtu) {
                return Verdict::Emit;
            }
        }
        v
    }
}
