//! Holding zero-checksum UDP fragments until their datagram is complete,
//! for `amend-udp-checksum-zero` (RFC 7915 §4.5).
//!
//! The packet plane translates one packet at a time and cannot checksum a
//! datagram it only sees a piece of. When amending is on, the first
//! fragment of an IPv4 UDP datagram whose checksum is zero, and the later
//! fragments with the same (source, destination, protocol, identification),
//! are held here. When the set is complete, the checksum is computed over
//! the whole datagram and written into the first fragment
//! ([`xlat::siit::amend`]); every fragment is then translated as usual,
//! keeping its boundaries.
//!
//! Bounded: at most [`MAX_DATAGRAMS`] datagrams of at most
//! [`MAX_FRAGMENTS`] fragments are held; the oldest datagram is evicted
//! (and counted) to make room. Later fragments that arrive before their
//! first fragment are translated at once (the checksum is unknown then),
//! so such a datagram can never complete and ends up evicted.

use std::collections::{HashMap, VecDeque};

use xlat::siit::amend::{amend_udp_checksum_zero, classify, is_complete, FragClass, FragKey};
use xlat::DropReason;

/// Datagrams held at once.
pub const MAX_DATAGRAMS: usize = 64;
/// Fragments held per datagram (a 65,535-byte datagram in 576-byte
/// fragments needs 118).
pub const MAX_FRAGMENTS: usize = 128;

/// What [`FragmentHolder::offer`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer {
    /// Not held: translate the packet as it is.
    Pass,
    /// Held; nothing to emit yet.
    Held,
    /// The datagram is complete and amended: translate these fragments.
    Complete(Vec<Vec<u8>>),
    /// The set was complete but inconsistent (or over the fragment limit):
    /// its fragments are dropped for this reason.
    Failed(DropReason, usize),
}

/// The holding area.
#[derive(Debug, Default)]
pub struct FragmentHolder {
    held: HashMap<FragKey, Vec<Vec<u8>>>,
    order: VecDeque<FragKey>,
    /// Fragments dropped because their datagram was evicted.
    pub evicted_fragments: u64,
}

impl FragmentHolder {
    /// Consider one input packet.
    pub fn offer(&mut self, pkt: &[u8]) -> Offer {
        let key = match classify(pkt) {
            FragClass::Translate => return Offer::Pass,
            FragClass::Later(k) if !self.held.contains_key(&k) => return Offer::Pass,
            FragClass::Later(k) | FragClass::HoldFirst(k) => k,
        };
        if !self.held.contains_key(&key) {
            if self.held.len() >= MAX_DATAGRAMS {
                if let Some(old) = self.order.pop_front() {
                    self.evicted_fragments += self.held.remove(&old).map_or(0, |v| v.len() as u64);
                }
            }
            self.order.push_back(key);
        }
        let set = self.held.entry(key).or_default();
        set.push(pkt.to_vec());
        if set.len() > MAX_FRAGMENTS {
            let n = self.take(&key).len();
            return Offer::Failed(DropReason::UdpChecksumZeroFragment, n);
        }
        if !is_complete(set) {
            return Offer::Held;
        }
        let mut set = self.take(&key);
        match amend_udp_checksum_zero(&mut set) {
            Ok(()) => Offer::Complete(set),
            Err(r) => Offer::Failed(r, set.len()),
        }
    }

    /// Fragments still held (their datagrams are incomplete).
    pub fn pending(&self) -> usize {
        self.held.values().map(Vec::len).sum()
    }

    fn take(&mut self, key: &FragKey) -> Vec<Vec<u8>> {
        self.order.retain(|k| k != key);
        self.held.remove(key).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 UDP fragment 192.0.2.1 → 198.51.100.2, ident `id`.
    fn frag(id: u16, offset8: u16, mf: bool, payload: &[u8]) -> Vec<u8> {
        let tl = 20 + payload.len();
        let flags = (u16::from(mf) << 13) | offset8;
        let mut b =
            vec![0x45, 0, (tl >> 8) as u8, tl as u8, (id >> 8) as u8, id as u8, (flags >> 8) as u8, flags as u8];
        b.extend_from_slice(&[64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2]);
        let mut acc: u32 = b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
        while acc >> 16 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        let c = !(acc as u16);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b.extend_from_slice(payload);
        b
    }

    fn udp_zero(len: usize) -> Vec<u8> {
        let mut u = vec![0x13, 0x88, 0, 53, (len >> 8) as u8, len as u8, 0, 0];
        u.resize(len, 0x42);
        u
    }

    #[test]
    fn holds_until_complete_then_amends() {
        let mut h = FragmentHolder::default();
        let u = udp_zero(40);
        assert_eq!(h.offer(&frag(1, 0, true, &u[..16])), Offer::Held);
        assert_eq!(h.pending(), 1);
        match h.offer(&frag(1, 2, false, &u[16..])) {
            Offer::Complete(set) => {
                assert_eq!(set.len(), 2);
                assert_ne!(&set[0][26..28], &[0, 0], "checksum written into the first fragment");
            }
            other => panic!("expected Complete, got {other:?}"),
        }
        assert_eq!(h.pending(), 0);
    }

    #[test]
    fn passes_what_it_need_not_hold() {
        let mut h = FragmentHolder::default();
        let mut u = udp_zero(40);
        u[6] = 0x12; // non-zero checksum
        assert_eq!(h.offer(&frag(2, 0, true, &u[..16])), Offer::Pass);
        assert_eq!(h.offer(&frag(3, 2, false, &u[16..])), Offer::Pass, "later fragment of an unheld datagram");
        assert_eq!(h.offer(&[0x45, 0, 0]), Offer::Pass);
    }

    #[test]
    fn evicts_the_oldest_datagram_when_full() {
        let mut h = FragmentHolder::default();
        let u = udp_zero(40);
        for id in 0..=MAX_DATAGRAMS as u16 {
            assert_eq!(h.offer(&frag(id, 0, true, &u[..16])), Offer::Held);
        }
        assert_eq!(h.evicted_fragments, 1);
        assert_eq!(h.pending(), MAX_DATAGRAMS);
        // Datagram 0 was evicted: its last fragment now passes through.
        assert_eq!(h.offer(&frag(0, 2, false, &u[16..])), Offer::Pass);
    }

    #[test]
    fn inconsistent_complete_set_fails() {
        let mut h = FragmentHolder::default();
        let mut u = udp_zero(40);
        u[5] = 99; // UDP length disagrees with the datagram
        assert_eq!(h.offer(&frag(4, 0, true, &u[..16])), Offer::Held);
        assert_eq!(h.offer(&frag(4, 2, false, &u[16..])), Offer::Failed(DropReason::Malformed, 2));
    }
}
