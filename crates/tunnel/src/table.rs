//! A hash table with a capacity and a time to live: the peer lists and
//! rate-limit tables of the tunnel cores.
//!
//! Every entry expires `ttl` after it was inserted or last touched; when the
//! table is full, [`Table::insert`] evicts the entry touched longest ago and
//! [`Table::try_insert`] refuses (for state that must not be taken away). Lookups
//! are O(1); expiry and eviction are amortised O(1) through a queue of
//! (key, generation) in touch order, where an entry touched again leaves a
//! stale record behind that is skipped (and compacted away when the queue
//! grows past twice the capacity). Touches within one second of the last
//! one are not queued again, so a busy entry costs one queue record a
//! second, not one a packet.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// Milliseconds on the caller's monotonic clock.
pub type Millis = u64;

/// How often (at most) a touched entry is re-queued.
const TOUCH_GRANULARITY: Millis = 1000;

#[derive(Debug)]
struct Slot<V> {
    value: V,
    touched: Millis,
    generation: u64,
}

/// A bounded, expiring map.
#[derive(Debug)]
pub struct Table<K, V> {
    map: HashMap<K, Slot<V>>,
    order: VecDeque<(K, u64, Millis)>,
    capacity: usize,
    ttl: Millis,
    generation: u64,
}

impl<K: Hash + Eq + Copy, V> Table<K, V> {
    /// An empty table of at most `capacity` entries (at least 1) living `ttl` ms.
    pub fn new(capacity: usize, ttl: Millis) -> Self {
        Table { map: HashMap::new(), order: VecDeque::new(), capacity: capacity.max(1), ttl, generation: 0 }
    }

    /// Entries (some may have expired and not been collected yet).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn live(&self, s: &Slot<V>, now: Millis) -> bool {
        now < s.touched.saturating_add(self.ttl)
    }

    /// The entry for `k` unless it has expired.
    pub fn get(&self, k: &K, now: Millis) -> Option<&V> {
        self.map.get(k).filter(|s| self.live(s, now)).map(|s| &s.value)
    }

    /// The entry for `k` unless it has expired, mutably (not touched).
    pub fn get_mut(&mut self, k: &K, now: Millis) -> Option<&mut V> {
        let ttl = self.ttl;
        self.map.get_mut(k).filter(|s| now < s.touched.saturating_add(ttl)).map(|s| &mut s.value)
    }

    /// Restart `k`'s time to live at `now`. Returns false when absent.
    pub fn touch(&mut self, k: &K, now: Millis) -> bool {
        let Some(s) = self.map.get_mut(k) else { return false };
        if now >= s.touched.saturating_add(TOUCH_GRANULARITY) || now < s.touched {
            self.generation += 1;
            s.generation = self.generation;
            self.order.push_back((*k, self.generation, now));
        }
        s.touched = s.touched.max(now);
        self.compact_if_needed();
        true
    }

    /// Insert or replace `k` (touched at `now`). Returns the entry evicted
    /// to make room, if any (the one touched longest ago).
    pub fn insert(&mut self, k: K, v: V, now: Millis) -> Option<(K, V)> {
        let mut evicted = None;
        if !self.map.contains_key(&k) && self.map.len() >= self.capacity {
            self.expire(now);
            if self.map.len() >= self.capacity {
                evicted = self.evict_oldest();
            }
        }
        self.put(k, v, now);
        evicted
    }

    /// Insert or replace `k` (touched at `now`) only if there is room
    /// once the expired entries are gone: a full table keeps what it holds
    /// and gives `v` back.
    pub fn try_insert(&mut self, k: K, v: V, now: Millis) -> Result<(), V> {
        if !self.map.contains_key(&k) && self.map.len() >= self.capacity {
            self.expire(now);
            if self.map.len() >= self.capacity {
                return Err(v);
            }
        }
        self.put(k, v, now);
        Ok(())
    }

    fn put(&mut self, k: K, v: V, now: Millis) {
        self.generation += 1;
        self.map.insert(k, Slot { value: v, touched: now, generation: self.generation });
        self.order.push_back((k, self.generation, now));
        self.compact_if_needed();
    }

    /// Remove `k`, returning its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|s| s.value)
    }

    fn evict_oldest(&mut self) -> Option<(K, V)> {
        while let Some((k, g, _)) = self.order.pop_front() {
            if self.map.get(&k).is_some_and(|s| s.generation == g) {
                return self.map.remove(&k).map(|s| (k, s.value));
            }
        }
        None
    }

    /// Remove every expired entry; returns how many.
    pub fn expire(&mut self, now: Millis) -> usize {
        self.expire_with(now, |_, _| {})
    }

    /// Remove every expired entry, handing each to `gone`; returns how many.
    pub fn expire_with(&mut self, now: Millis, mut gone: impl FnMut(K, V)) -> usize {
        let mut n = 0;
        // Each record is looked at once: a live entry whose touch was not
        // re-queued (within the granularity) goes to the back.
        for _ in 0..self.order.len() {
            let Some(&(k, g, t)) = self.order.front() else { break };
            match self.map.get(&k) {
                Some(s) if s.generation == g => {
                    if now < t.saturating_add(self.ttl) {
                        break;
                    }
                    if now < s.touched.saturating_add(self.ttl) {
                        let touched = s.touched;
                        self.order.pop_front();
                        self.order.push_back((k, g, touched));
                        continue;
                    }
                    if let Some(s) = self.map.remove(&k) {
                        gone(k, s.value);
                    }
                    n += 1;
                }
                _ => {}
            }
            self.order.pop_front();
        }
        n
    }

    /// Remove every entry.
    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    /// Iterate over the live entries.
    pub fn iter(&self, now: Millis) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().filter(move |(_, s)| self.live(s, now)).map(|(k, s)| (k, &s.value))
    }

    fn compact_if_needed(&mut self) {
        if self.order.len() <= 2 * self.capacity + 64 {
            return;
        }
        let map = &self.map;
        self.order.retain(|(k, g, _)| map.get(k).is_some_and(|s| s.generation == *g));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_follows_touches() {
        let mut t = Table::new(4, 1000);
        t.insert(1, "a", 0);
        assert_eq!(t.get(&1, 999), Some(&"a"));
        assert_eq!(t.get(&1, 1000), None, "expired at ttl");
        assert!(t.touch(&1, 999));
        assert_eq!(t.get(&1, 1500), Some(&"a"), "touch restarted the ttl");
        assert_eq!(t.expire(1500), 0);
        assert_eq!(t.expire(2000), 1);
        assert!(t.is_empty());
        assert!(!t.touch(&1, 2000));
    }

    #[test]
    fn full_table_evicts_the_least_recently_touched() {
        let mut t = Table::new(3, 60_000);
        for k in 0..3 {
            assert_eq!(t.insert(k, k, k as u64 * 2000), None);
        }
        t.touch(&0, 10_000);
        assert_eq!(t.insert(9, 9, 11_000), Some((1, 1)));
        assert_eq!(t.len(), 3);
        assert!(t.get(&0, 11_000).is_some() && t.get(&1, 11_000).is_none());
        // Replacing an existing key evicts nothing.
        assert_eq!(t.insert(9, 10, 12_000), None);
        assert_eq!(t.get(&9, 12_000), Some(&10));
    }

    #[test]
    fn try_insert_refuses_when_full_and_takes_nothing_away() {
        let mut t = Table::new(2, 1000);
        assert_eq!(t.try_insert(1, "a", 0), Ok(()));
        assert_eq!(t.try_insert(2, "b", 0), Ok(()));
        assert_eq!(t.try_insert(3, "c", 10), Err("c"), "full: refused");
        assert_eq!((t.get(&1, 10), t.get(&2, 10)), (Some(&"a"), Some(&"b")));
        assert_eq!(t.try_insert(2, "B", 20), Ok(()), "replacing needs no room");
        t.touch(&1, 900);
        // At 1100 ms 2 has expired (1 was touched): room for 3.
        assert_eq!(t.try_insert(3, "c", 1100), Ok(()));
        assert_eq!(t.get(&1, 1100), Some(&"a"));
        let mut gone = Vec::new();
        assert_eq!(t.expire_with(5000, |k, v| gone.push((k, v))), 2);
        gone.sort();
        assert_eq!(gone, [(1, "a"), (3, "c")]);
    }

    #[test]
    fn a_flood_stays_bounded_and_the_queue_compacts() {
        let mut t = Table::new(100, 30_000);
        for i in 0..100_000u64 {
            t.insert(i, (), i);
            t.touch(&(i / 2), i + 5000);
        }
        assert_eq!(t.len(), 100);
        assert!(t.order.len() <= 2 * 100 + 65, "queue {}", t.order.len());
        assert_eq!(t.iter(200_000).count(), 0, "everything expired");
        assert_eq!(t.expire(200_000), 100);
    }
}
