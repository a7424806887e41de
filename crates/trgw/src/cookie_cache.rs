//! The ng reply cache: replies by cookie, so a retransmitted command (same
//! cookie, e.g. Kamailio resending after a timeout) gets the same reply
//! again instead of being executed twice.
//!
//! rtpengine keeps replies for 30 to 60 seconds (two generations swapped
//! every 30 s) and nothing else bounds its cache. Here a reply is kept
//! [`COOKIE_CACHE_SECS`] at most, and the cache is also bounded by the
//! number of entries and by the bytes of cookies and replies it holds: the
//! oldest entries go first when a bound is reached, and a reply larger than
//! a quarter of the byte bound is not cached at all. So a client that
//! re-offers huge SDPs under fresh cookies costs at most the byte bound.
//!
//! The cache belongs to the ng listener (the control layer), not to the
//! session state: [`crate::core`] knows nothing of it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a reply is kept for a retransmitted cookie.
pub const COOKIE_CACHE_SECS: u64 = 30;
/// Default bound on cached replies.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;
/// Default bound on the bytes of cookies and replies cached.
pub const DEFAULT_MAX_BYTES: usize = 16 << 20;

/// Counters of a [`CookieCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries now.
    pub entries: u64,
    /// Bytes of cookies and replies now.
    pub bytes: u64,
    /// Commands answered from the cache.
    pub hits: u64,
    /// Entries evicted before their time because a bound was reached.
    pub evicted: u64,
    /// Replies not cached because they alone were too large.
    pub too_large: u64,
}

/// Replies by cookie, bounded by age, entries and bytes (see the module).
#[derive(Debug)]
pub struct CookieCache {
    map: HashMap<Vec<u8>, Vec<u8>>,
    /// Insertion order: (time, cookie). Every cookie in `map` is here once.
    order: VecDeque<(Instant, Vec<u8>)>,
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    stats: CacheStats,
}

impl Default for CookieCache {
    fn default() -> Self {
        CookieCache::new(DEFAULT_MAX_ENTRIES, DEFAULT_MAX_BYTES)
    }
}

impl CookieCache {
    /// A cache holding at most `max_entries` replies and `max_bytes` bytes.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        CookieCache {
            map: HashMap::new(),
            order: VecDeque::new(),
            ttl: Duration::from_secs(COOKIE_CACHE_SECS),
            max_entries,
            max_bytes,
            stats: CacheStats::default(),
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((_, c)) = self.order.pop_front() {
            if let Some(r) = self.map.remove(&c) {
                self.stats.bytes -= (c.len() + r.len()) as u64;
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((t, _)) = self.order.front() {
            if now.saturating_duration_since(*t) < self.ttl {
                break;
            }
            self.pop_oldest();
        }
    }

    /// The cached reply for `cookie`, if any (and younger than the TTL).
    pub fn get(&mut self, cookie: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.expire(now);
        let r = self.map.get(cookie).cloned();
        if r.is_some() {
            self.stats.hits += 1;
        }
        r
    }

    /// Caches `reply` for `cookie`, evicting the oldest entries to stay
    /// within the bounds.
    pub fn put(&mut self, cookie: &[u8], reply: &[u8], now: Instant) {
        self.expire(now);
        let size = cookie.len() + reply.len();
        if size > self.max_bytes / 4 || self.max_entries == 0 {
            self.stats.too_large += 1;
            return;
        }
        if self.map.contains_key(cookie) {
            return;
        }
        while !self.order.is_empty()
            && (self.map.len() + 1 > self.max_entries || self.stats.bytes as usize + size > self.max_bytes)
        {
            self.pop_oldest();
            self.stats.evicted += 1;
        }
        self.map.insert(cookie.to_vec(), reply.to_vec());
        self.order.push_back((now, cookie.to_vec()));
        self.stats.bytes += size as u64;
    }

    /// Counters and current size.
    pub fn stats(&self) -> CacheStats {
        CacheStats { entries: self.map.len() as u64, ..self.stats }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_expire_after_the_ttl() {
        let mut c = CookieCache::default();
        let t0 = Instant::now();
        c.put(b"a", b"reply", t0);
        assert_eq!(c.get(b"a", t0 + Duration::from_secs(29)).as_deref(), Some(&b"reply"[..]));
        assert_eq!(c.get(b"a", t0 + Duration::from_secs(30)), None);
        assert_eq!(c.stats().entries, 0);
        assert_eq!(c.stats().bytes, 0);
    }

    #[test]
    fn bounded_by_entries_oldest_first() {
        let mut c = CookieCache::new(3, 1 << 20);
        let t = Instant::now();
        for k in [b"1", b"2", b"3", b"4"] {
            c.put(k, b"r", t);
        }
        assert_eq!(c.get(b"1", t), None, "the oldest went");
        assert!(c.get(b"4", t).is_some() && c.get(b"2", t).is_some());
        assert_eq!(c.stats().entries, 3);
        assert_eq!(c.stats().evicted, 1);
    }

    #[test]
    fn bounded_by_bytes_and_huge_replies_not_cached() {
        let mut c = CookieCache::new(1000, 4000);
        let t = Instant::now();
        let big = vec![b'x'; 900];
        for i in 0..100u32 {
            c.put(format!("c{i}").as_bytes(), &big, t);
            assert!(c.stats().bytes <= 4000, "{:?}", c.stats());
        }
        assert_eq!(c.stats().entries, 4);
        assert!(c.get(b"c99", t).is_some());
        c.put(b"huge", &[0u8; 1001], t);
        assert_eq!(c.get(b"huge", t), None);
        assert_eq!(c.stats().too_large, 1);
    }

    #[test]
    fn a_cookie_is_cached_once() {
        let mut c = CookieCache::new(10, 1000);
        let t = Instant::now();
        c.put(b"a", b"first", t);
        c.put(b"a", b"second", t);
        assert_eq!(c.get(b"a", t).as_deref(), Some(&b"first"[..]));
        assert_eq!(c.stats().bytes, 6);
    }
}
