//! Token buckets: one ([`Bucket`]) or one per client ([`RateTable`]).

use std::collections::HashMap;
use std::hash::Hash;

/// A token bucket: `rate` tokens a second, at most `burst`, on the
/// caller's clock in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    last: u64,
}

impl Bucket {
    /// A full bucket at `now` (ms).
    pub fn full(burst: u32, now: u64) -> Self {
        Bucket { tokens: f64::from(burst), last: now }
    }

    /// Take a token if there is one at `now` (ms). `rate == 0` means no
    /// limit.
    pub fn take(&mut self, rate: u32, burst: u32, now: u64) -> bool {
        if rate == 0 {
            return true;
        }
        self.refill(rate, burst, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn refill(&mut self, rate: u32, burst: u32, now: u64) {
        let dt = now.saturating_sub(self.last) as f64 / 1000.0;
        self.tokens = (self.tokens + dt * f64::from(rate)).min(f64::from(burst.max(1)));
        self.last = now.max(self.last);
    }

    /// Whether the bucket would be full at `now` (its owner has been
    /// quiet long enough to be forgotten).
    fn is_full_at(&self, rate: u32, burst: u32, now: u64) -> bool {
        let dt = now.saturating_sub(self.last) as f64 / 1000.0;
        self.tokens + dt * f64::from(rate) >= f64::from(burst.max(1))
    }
}

/// A token bucket per client, `rate` a second and `burst` deep each, for
/// at most `capacity` clients. A client not in the table has a full
/// bucket, so a table that must make room forgets first the clients
/// whose buckets have refilled (they lose nothing: one sweep at most every
/// `SWEEP_MS`), and only then one client it holds (which then starts
/// again from a full bucket: the global limit, kept by the caller, still
/// holds). A flood of new clients costs O(1) each.
#[derive(Debug, Clone)]
pub struct RateTable<K> {
    buckets: HashMap<K, Bucket>,
    rate: u32,
    burst: u32,
    capacity: usize,
    /// When the refilled buckets were last swept out (ms).
    swept: Option<u64>,
    /// Clients forgotten while still limited (the table was full).
    pub evicted: u64,
}

/// How often a full [`RateTable`] sweeps its refilled buckets at most (ms).
pub const SWEEP_MS: u64 = 100;

impl<K: Hash + Eq + Clone> RateTable<K> {
    /// `rate` tokens a second per client (0: no limit), `burst` deep, for
    /// at most `capacity` clients (at least 1).
    pub fn new(rate: u32, burst: u32, capacity: usize) -> Self {
        RateTable { buckets: HashMap::new(), rate, burst, capacity: capacity.max(1), swept: None, evicted: 0 }
    }

    /// Take a token of `k`'s bucket at `now` (ms).
    pub fn take(&mut self, k: &K, now: u64) -> bool {
        if self.rate == 0 {
            return true;
        }
        let (rate, burst) = (self.rate, self.burst);
        if let Some(b) = self.buckets.get_mut(k) {
            return b.take(rate, burst, now);
        }
        if self.buckets.len() >= self.capacity {
            if self.swept.is_none_or(|t| now.saturating_sub(t) >= SWEEP_MS) {
                self.swept = Some(now);
                self.buckets.retain(|_, b| !b.is_full_at(rate, burst, now));
            }
            if self.buckets.len() >= self.capacity {
                let any = self.buckets.keys().next().cloned();
                if let Some(o) = any {
                    self.buckets.remove(&o);
                    self.evicted += 1;
                }
            }
        }
        let mut b = Bucket::full(burst, now);
        let ok = b.take(rate, burst, now);
        self.buckets.insert(k.clone(), b);
        ok
    }

    /// Clients with a bucket now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when no client has a bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_at_the_rate() {
        let mut b = Bucket::full(2, 0);
        assert!(b.take(10, 2, 0) && b.take(10, 2, 0));
        assert!(!b.take(10, 2, 0), "burst used up");
        assert!(b.take(10, 2, 100), "0.1 s at 10/s gives one token");
        assert!(!b.take(10, 2, 100));
        assert!(b.take(0, 0, 100), "rate 0: unlimited");
        assert!(!b.take(10, 2, 50), "a clock going back adds nothing");
    }

    #[test]
    fn each_client_has_its_own_bucket() {
        let mut t = RateTable::new(1, 2, 100);
        assert!(t.take(&"a", 0) && t.take(&"a", 0));
        assert!(!t.take(&"a", 0), "a's burst is spent");
        assert!(t.take(&"b", 0), "b is not limited by a");
        assert!(t.take(&"a", 1000), "a second later a has a token again");
        assert_eq!(t.len(), 2);
        assert!(RateTable::new(0, 0, 1).take(&"x", 0), "rate 0: unlimited");
    }

    #[test]
    fn a_full_table_forgets_refilled_clients_first() {
        let mut t = RateTable::new(1, 1, 2);
        assert!(t.take(&1, 0));
        assert!(t.take(&2, 5000));
        assert!(!t.take(&2, 5000), "2 is limited");
        // 1 has refilled by 5000 ms: forgotten to make room for 3; 2 stays limited.
        assert!(t.take(&3, 5000));
        assert_eq!((t.len(), t.evicted), (2, 0));
        assert!(!t.take(&2, 5000));
        // Nobody refilled (and no sweep within 100 ms): one is forgotten, counted.
        assert!(t.take(&4, 5001));
        assert_eq!((t.len(), t.evicted), (2, 1));
        // A flood of new clients: the table stays at its capacity.
        for k in 10..10_000 {
            t.take(&k, 5002);
        }
        assert_eq!(t.len(), 2);
    }
}
