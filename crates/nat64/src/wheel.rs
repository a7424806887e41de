//! A hashed timing wheel (Varghese & Lauck, scheme 6): O(1) insertion, and
//! expiry work proportional to the entries in the slots the clock passes.
//! Entries due more than one revolution ahead stay in their slot and are
//! looked at again on each pass. The wheel does not own the truth about a
//! deadline: the tables refresh lifetimes in place on every packet (no
//! wheel operation on the hot path) and, when an entry comes due, check the
//! real expiry and re-insert it if it was refreshed ("lazy" expiry).

/// A hashed timing wheel of keys `K`; time is in nanoseconds.
#[derive(Debug)]
pub struct Wheel<K> {
    slots: Vec<Vec<(u64, K)>>,
    tick_ns: u64,
    /// First tick not yet processed.
    cursor: u64,
    len: usize,
}

impl<K> Wheel<K> {
    /// A wheel of `slots` slots (rounded up to a power of two) of `tick_ns` each,
    /// starting at time `now`.
    pub fn new(slots: usize, tick_ns: u64, now: u64) -> Self {
        let n = slots.max(2).next_power_of_two();
        let tick_ns = tick_ns.max(1);
        Wheel { slots: (0..n).map(|_| Vec::new()).collect(), tick_ns, cursor: now / tick_ns, len: 0 }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> u64 {
        self.slots.len() as u64 - 1
    }

    /// Schedule `k` at `deadline` (ns). A deadline in the past fires at the
    /// next [`Wheel::advance`].
    pub fn insert(&mut self, deadline: u64, k: K) {
        let tick = (deadline / self.tick_ns).max(self.cursor);
        let slot = (tick & self.mask()) as usize;
        self.slots[slot].push((deadline, k));
        self.len += 1;
    }

    /// Move the clock to `now` and hand every entry whose deadline is at or
    /// before `now` to `due`. Visits at most one revolution of slots.
    pub fn advance(&mut self, now: u64, mut due: impl FnMut(u64, K)) {
        let now_tick = now / self.tick_ns;
        if now_tick < self.cursor {
            return;
        }
        let n = self.slots.len() as u64;
        let span = (now_tick - self.cursor + 1).min(n);
        for i in 0..span {
            let slot = ((self.cursor + i) & self.mask()) as usize;
            let v = &mut self.slots[slot];
            let mut j = 0;
            while j < v.len() {
                if v[j].0 <= now {
                    let (d, k) = v.swap_remove(j);
                    self.len -= 1;
                    due(d, k);
                } else {
                    j += 1;
                }
            }
        }
        // The current tick may still hold entries due later within it.
        self.cursor = now_tick;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_of_ticks_and_not_early() {
        let mut w = Wheel::new(8, 10, 0);
        w.insert(25, "a");
        w.insert(5, "b");
        w.insert(1000, "far"); // more than one revolution (80 ns) ahead
        assert_eq!(w.len(), 3);
        let mut got = Vec::new();
        w.advance(9, |_, k| got.push(k));
        assert_eq!(got, vec!["b"]);
        w.advance(24, |_, k| got.push(k));
        assert_eq!(got, vec!["b"], "not before its deadline");
        w.advance(30, |_, k| got.push(k));
        assert_eq!(got, vec!["b", "a"]);
        // Many revolutions later the far entry is found.
        w.advance(999, |_, k| got.push(k));
        assert_eq!(got.len(), 2);
        w.advance(5000, |_, k| got.push(k));
        assert_eq!(got, vec!["b", "a", "far"]);
        assert!(w.is_empty());
    }

    #[test]
    fn past_deadline_fires_next_advance_and_time_going_back_is_ignored() {
        let mut w = Wheel::new(4, 100, 1000);
        w.insert(10, 1u32);
        let mut got = Vec::new();
        w.advance(500, |_, k| got.push(k)); // earlier than the start: nothing
        assert!(got.is_empty());
        w.advance(1000, |_, k| got.push(k));
        assert_eq!(got, vec![1]);
    }

    #[test]
    fn jump_longer_than_a_revolution_visits_every_slot() {
        let mut w = Wheel::new(4, 1, 0);
        for d in 0..20u64 {
            w.insert(d, d);
        }
        let mut got = Vec::new();
        w.advance(1_000_000, |_, k| got.push(k));
        got.sort();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    }
}
