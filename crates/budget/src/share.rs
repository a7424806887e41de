//! A count per client under a global cap and a per-client share.

use std::collections::HashMap;
use std::hash::Hash;

/// Why [`FairShare::try_acquire`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The whole table is at its global cap.
    Full,
    /// This client holds its share already.
    ClientShare,
}

/// Refusals so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// [`Refusal::Full`].
    pub full: u64,
    /// [`Refusal::ClientShare`].
    pub client_share: u64,
}

/// How many entries each client holds of a table, at most `per_client`
/// each and `global` in all. A table that is full, or a client at its
/// share, is refused: nothing held is ever taken away to make room (the
/// caller answers with its protocol's refusal: a NAK, an ICMP error, a
/// reset). Counts of zero are forgotten, so the book holds at most
/// `global` clients.
#[derive(Debug, Clone)]
pub struct FairShare<K> {
    held: HashMap<K, usize>,
    total: usize,
    global: usize,
    per_client: usize,
    refusals: Refusals,
}

impl<K: Hash + Eq + Clone> FairShare<K> {
    /// At most `global` entries in all and `per_client` per client (0:
    /// none at all).
    pub fn new(global: usize, per_client: usize) -> Self {
        FairShare { held: HashMap::new(), total: 0, global, per_client, refusals: Refusals::default() }
    }

    /// Take one entry for `k`, or say why not (counted).
    pub fn try_acquire(&mut self, k: &K) -> Result<(), Refusal> {
        let mine = self.held(k);
        let why = if mine >= self.per_client {
            Refusal::ClientShare
        } else if self.total >= self.global {
            Refusal::Full
        } else {
            *self.held.entry(k.clone()).or_insert(0) += 1;
            self.total += 1;
            return Ok(());
        };
        match why {
            Refusal::Full => self.refusals.full += 1,
            Refusal::ClientShare => self.refusals.client_share += 1,
        }
        Err(why)
    }

    /// Count one entry of `k` kept from before (a restart, a reload), even
    /// above the limits: established state is never dropped for them; it
    /// keeps new entries out until it falls below.
    pub fn keep(&mut self, k: &K) {
        *self.held.entry(k.clone()).or_insert(0) += 1;
        self.total += 1;
    }

    /// Whether `k` could take one more entry now (nothing taken, nothing
    /// counted).
    pub fn has_room(&self, k: &K) -> bool {
        self.held(k) < self.per_client && self.total < self.global
    }

    /// Give one entry of `k` back (nothing when it holds none).
    pub fn release(&mut self, k: &K) {
        if let Some(n) = self.held.get_mut(k) {
            *n -= 1;
            self.total -= 1;
            if *n == 0 {
                self.held.remove(k);
            }
        }
    }

    /// Entries `k` holds.
    pub fn held(&self, k: &K) -> usize {
        self.held.get(k).copied().unwrap_or(0)
    }

    /// Entries held in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Clients holding at least one entry.
    pub fn clients(&self) -> usize {
        self.held.len()
    }

    /// The global cap.
    pub fn global(&self) -> usize {
        self.global
    }

    /// The per-client share.
    pub fn per_client(&self) -> usize {
        self.per_client
    }

    /// New limits (a reload): what is held stays held, even above them;
    /// it only keeps new entries out until it falls below.
    pub fn set_limits(&mut self, global: usize, per_client: usize) {
        self.global = global;
        self.per_client = per_client;
    }

    /// Refusals so far.
    pub fn refusals(&self) -> Refusals {
        self.refusals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_client_gets_its_share_and_no_more() {
        let mut s = FairShare::new(10, 3);
        for _ in 0..3 {
            s.try_acquire(&"a").unwrap();
        }
        assert_eq!(s.try_acquire(&"a"), Err(Refusal::ClientShare));
        assert!(!s.has_room(&"a") && s.has_room(&"b"));
        s.try_acquire(&"b").unwrap();
        assert_eq!((s.held(&"a"), s.held(&"b"), s.total(), s.clients()), (3, 1, 4, 2));
        s.release(&"a");
        s.try_acquire(&"a").unwrap();
        assert_eq!(s.refusals(), Refusals { full: 0, client_share: 1 });
    }

    #[test]
    fn a_full_table_refuses_and_takes_nothing_away() {
        let mut s = FairShare::new(4, 3);
        for k in ["a", "a", "a", "b"] {
            s.try_acquire(&k).unwrap();
        }
        assert_eq!(s.try_acquire(&"c"), Err(Refusal::Full));
        assert_eq!(s.try_acquire(&"a"), Err(Refusal::ClientShare), "the share is checked first");
        assert_eq!((s.held(&"a"), s.held(&"b")), (3, 1), "nothing evicted");
        s.release(&"b");
        assert_eq!(s.clients(), 1, "a count of zero is forgotten");
        s.try_acquire(&"c").unwrap();
        s.release(&"zzz");
        assert_eq!(s.total(), 4, "releasing what is not held changes nothing");
        assert_eq!(s.refusals(), Refusals { full: 1, client_share: 1 });
    }

    #[test]
    fn lower_limits_keep_what_is_held() {
        let mut s = FairShare::new(10, 5);
        for _ in 0..5 {
            s.try_acquire(&1u8).unwrap();
        }
        s.set_limits(3, 2);
        s.keep(&1);
        s.release(&1);
        assert_eq!((s.held(&1), s.global(), s.per_client()), (5, 3, 2));
        assert_eq!(s.try_acquire(&2), Err(Refusal::Full));
        for _ in 0..3 {
            s.release(&1);
        }
        s.try_acquire(&2).unwrap();
    }

    proptest! {
        /// Whatever the order of acquisitions and releases, no client holds
        /// more than its share, the total stays under the cap and equals
        /// the sum of the clients' counts.
        #[test]
        fn the_caps_hold(ops in proptest::collection::vec((0u8..6, any::<bool>()), 0..400)) {
            let mut s = FairShare::new(10, 4);
            let mut model = [0usize; 6];
            for (k, take) in ops {
                if take {
                    let ok = s.try_acquire(&k).is_ok();
                    let room = model[k as usize] < 4 && model.iter().sum::<usize>() < 10;
                    prop_assert_eq!(ok, room);
                    model[k as usize] += usize::from(ok);
                } else {
                    s.release(&k);
                    model[k as usize] = model[k as usize].saturating_sub(1);
                }
                prop_assert_eq!(s.total(), model.iter().sum::<usize>());
                for (i, m) in model.iter().enumerate() {
                    prop_assert_eq!(s.held(&(i as u8)), *m);
                }
            }
        }
    }
}
