//! RFC 6146 §3.8: hairpinning — an IPv6 host reaching another IPv6 host
//! through the other's pool4 transport address. The 6→4 result is fed
//! back in as an IPv4 packet.

use crate::Nat64;
use std::sync::atomic::Ordering;
use xlat::{DropReason, Out, PacketKind, Verdict};

impl Nat64 {
    /// The 6→4 pass left one IPv4 packet in `out`; run it through the
    /// IPv4 side. Refusals are not answered (the sender is behind us and
    /// its IPv4 form is our own address): the packet is dropped.
    pub(crate) fn hairpin(&self, now: u64, out: &mut Out) -> Verdict {
        self.c.hairpinned.fetch_add(1, Ordering::Relaxed);
        if out.len() != 1 || out.get(0).is_some_and(|(k, _)| k != PacketKind::Forward) {
            // An ICMP error for the sender (e.g. Hop Limit) goes back as is;
            // a fragmented hairpin is not supported.
            return if out.get(0).is_some_and(|(k, _)| k == PacketKind::IcmpError) {
                Verdict::Emit
            } else {
                out.clear();
                Verdict::Drop(DropReason::Unsupported)
            };
        }
        let mut scratch = out.take_scratch();
        scratch.clear();
        if let Some((_, p)) = out.get(0) {
            scratch.extend_from_slice(p);
        }
        let v = self.from4(&scratch, now, out, false);
        out.put_scratch(scratch);
        if v == Verdict::Emit && out.iter().any(|(k, _)| k == PacketKind::IcmpError) {
            out.clear();
            return Verdict::Drop(DropReason::HairpinLoop);
        }
        v
    }
}
