//! Rate-limited logging of refusals: at most `lines` lines per `interval`
//! for each key (a refusal reason, say), the rest suppressed and their
//! number reported with the next line that is written — so a flood of bad
//! requests costs a few lines, not one each, and the log still says how
//! many there were.
//!
//! ```
//! use dstpolicy::RateLog;
//! use std::time::{Duration, Instant};
//! let log = RateLog::new(2, Duration::from_secs(10));
//! let t = Instant::now();
//! assert_eq!(log.admit("loopback", t), Some(0));
//! assert_eq!(log.admit("loopback", t), Some(0));
//! assert_eq!(log.admit("loopback", t), None); // suppressed
//! assert_eq!(log.admit("loopback", t + Duration::from_secs(10)), Some(1));
//! ```
//!
//! The caller writes the line (so it keeps its own level, message and
//! fields), e.g. `if let Some(suppressed) = log.admit(reason, now) {
//! tracing::warn!(suppressed, ...) }`.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys one log tracks separately at most; later keys share one window.
pub const MAX_KEYS: usize = 256;

/// The default budget: lines per interval per key.
pub const DEFAULT_LINES: u32 = 10;
/// The default interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    written: u32,
    suppressed: u64,
}

/// A rate limit on log lines, per key.
#[derive(Debug)]
pub struct RateLog<K> {
    lines: u32,
    interval: Duration,
    windows: Mutex<(HashMap<K, Window>, Option<Window>)>,
}

impl<K: Eq + Hash> Default for RateLog<K> {
    fn default() -> Self {
        RateLog::new(DEFAULT_LINES, DEFAULT_INTERVAL)
    }
}

impl<K: Eq + Hash> RateLog<K> {
    /// At most `lines` lines per `interval` per key.
    pub fn new(lines: u32, interval: Duration) -> Self {
        RateLog { lines, interval, windows: Mutex::new((HashMap::new(), None)) }
    }

    /// Whether a line for `key` may be written at `now`: `Some(n)` with
    /// the number of lines suppressed for this key since the last one
    /// written (to report in it), or `None` (suppressed, counted).
    pub fn admit(&self, key: K, now: Instant) -> Option<u64> {
        let mut g = function::lock(&self.windows);
        let (map, overflow) = &mut *g;
        let fresh = Window { start: now, written: 0, suppressed: 0 };
        let w = if map.contains_key(&key) || map.len() < MAX_KEYS {
            map.entry(key).or_insert(fresh)
        } else {
            overflow.get_or_insert(fresh)
        };
        if now.saturating_duration_since(w.start) >= self.interval {
            w.start = now;
            w.written = 0;
        }
        if w.written < self.lines {
            w.written += 1;
            Some(std::mem::take(&mut w.suppressed))
        } else {
            w.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_has_its_own_budget_and_suppressed_lines_are_reported() {
        let log = RateLog::new(3, Duration::from_secs(10));
        let t = Instant::now();
        let admitted = (0..100).filter(|_| log.admit("a", t).is_some()).count();
        assert_eq!(admitted, 3);
        assert_eq!(log.admit("b", t), Some(0), "another key is not limited by the first");
        assert_eq!(log.admit("a", t + Duration::from_secs(9)), None);
        // Next interval: the 98 suppressed are reported once.
        assert_eq!(log.admit("a", t + Duration::from_secs(10)), Some(98));
        assert_eq!(log.admit("a", t + Duration::from_secs(10)), Some(0));
    }

    #[test]
    fn keys_beyond_the_cap_share_one_window() {
        let log = RateLog::new(1, Duration::from_secs(10));
        let t = Instant::now();
        for k in 0..MAX_KEYS {
            assert_eq!(log.admit(k, t), Some(0));
        }
        assert_eq!(log.admit(MAX_KEYS, t), Some(0));
        assert_eq!(log.admit(MAX_KEYS + 1, t), None, "shares the overflow window");
        assert_eq!(log.windows.lock().unwrap().0.len(), MAX_KEYS, "the map stays bounded");
    }
}
