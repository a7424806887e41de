//! Per-worker counters, merged for `/metrics` and `/status`.
//!
//! Each worker owns one cache-line-aligned [`WorkerStats`] and is its only
//! writer, so an increment is a relaxed load and store (no locked
//! instruction); readers sum over all workers.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use xlat::DropReason;

/// Drops the daemon counts itself, beyond the packet plane's [`DropReason`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonDrop {
    /// Writing a packet to the TUN queue failed.
    WriteError,
    /// Reading from the TUN queue failed.
    ReadError,
    /// An ICMP error the translator originated was suppressed by the rate limit.
    IcmpRateLimited,
}

impl DaemonDrop {
    /// Every daemon drop.
    pub const ALL: [DaemonDrop; 3] = [DaemonDrop::WriteError, DaemonDrop::ReadError, DaemonDrop::IcmpRateLimited];

    /// Stable name, used as the `reason` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            DaemonDrop::WriteError => "tun-write-error",
            DaemonDrop::ReadError => "tun-read-error",
            DaemonDrop::IcmpRateLimited => "icmp-rate-limited",
        }
    }
}

/// Address family index: 0 = IPv4, 1 = IPv6.
pub const FAMILIES: [&str; 2] = ["ipv4", "ipv6"];

/// Which engine handled a packet.
pub const ENGINES: [&str; 2] = ["siit", "nat64"];

/// Counters of one worker.
#[derive(Debug)]
#[repr(align(64))]
pub struct WorkerStats {
    /// Packets read from the TUN, by family.
    pub rx_packets: [AtomicU64; 2],
    /// Bytes read, by family.
    pub rx_bytes: [AtomicU64; 2],
    /// Packets written to the TUN, by family.
    pub tx_packets: [AtomicU64; 2],
    /// Bytes written, by family.
    pub tx_bytes: [AtomicU64; 2],
    /// Packets handled, by engine ([`ENGINES`]).
    pub engine_packets: [AtomicU64; 2],
    /// Packet-plane drops, indexed like [`DropReason::ALL`].
    pub drops: Vec<AtomicU64>,
    /// Daemon drops, indexed like [`DaemonDrop::ALL`].
    pub daemon_drops: [AtomicU64; 3],
    /// ICMP errors originated and sent.
    pub icmp_errors_sent: AtomicU64,
}

/// Add `n` to a counter only this thread writes.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats {
            rx_packets: Default::default(),
            rx_bytes: Default::default(),
            tx_packets: Default::default(),
            tx_bytes: Default::default(),
            engine_packets: Default::default(),
            drops: DropReason::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            daemon_drops: Default::default(),
            icmp_errors_sent: AtomicU64::new(0),
        }
    }
}

/// Index of `r` in [`DropReason::ALL`].
#[inline]
pub fn drop_index(r: DropReason) -> usize {
    DropReason::ALL.iter().position(|x| *x == r).unwrap_or(0)
}

impl WorkerStats {
    /// Count a packet-plane drop.
    #[inline]
    pub fn drop_reason(&self, r: DropReason) {
        if let Some(c) = self.drops.get(drop_index(r)) {
            bump(c, 1);
        }
    }

    /// Count a daemon drop.
    #[inline]
    pub fn daemon_drop(&self, d: DaemonDrop) {
        bump(&self.daemon_drops[d as usize], 1);
    }
}

/// A snapshot of the counters of all workers, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// See [`WorkerStats`].
    pub rx_packets: [u64; 2],
    /// See [`WorkerStats`].
    pub rx_bytes: [u64; 2],
    /// See [`WorkerStats`].
    pub tx_packets: [u64; 2],
    /// See [`WorkerStats`].
    pub tx_bytes: [u64; 2],
    /// See [`WorkerStats`].
    pub engine_packets: [u64; 2],
    /// (reason, count) for every [`DropReason`].
    pub drops: Vec<(&'static str, u64)>,
    /// (reason, count) for every [`DaemonDrop`].
    pub daemon_drops: Vec<(&'static str, u64)>,
    /// See [`WorkerStats`].
    pub icmp_errors_sent: u64,
}

impl Totals {
    /// Sum the counters of `workers`.
    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a WorkerStats>) -> Totals {
        let mut t = Totals {
            drops: DropReason::ALL.iter().map(|r| (r.as_str(), 0)).collect(),
            daemon_drops: DaemonDrop::ALL.iter().map(|d| (d.as_str(), 0)).collect(),
            ..Totals::default()
        };
        for w in workers {
            for f in 0..2 {
                t.rx_packets[f] += w.rx_packets[f].load(Relaxed);
                t.rx_bytes[f] += w.rx_bytes[f].load(Relaxed);
                t.tx_packets[f] += w.tx_packets[f].load(Relaxed);
                t.tx_bytes[f] += w.tx_bytes[f].load(Relaxed);
                t.engine_packets[f] += w.engine_packets[f].load(Relaxed);
            }
            for (slot, c) in t.drops.iter_mut().zip(&w.drops) {
                slot.1 += c.load(Relaxed);
            }
            for (slot, c) in t.daemon_drops.iter_mut().zip(&w.daemon_drops) {
                slot.1 += c.load(Relaxed);
            }
            t.icmp_errors_sent += w.icmp_errors_sent.load(Relaxed);
        }
        t
    }

    /// Sum of packet-plane drops.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(|d| d.1).sum()
    }
}

/// Token bucket for the ICMP errors one worker originates. Refilled from a
/// caller-supplied clock reading (nanoseconds), so it is deterministic in tests.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Tokens per second; 0 = unlimited.
    rate: u64,
    burst: u64,
    /// Tokens, scaled by 1e9 (token-nanoseconds).
    level: u64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket of depth `burst` refilled at `rate` per second.
    pub fn new(rate: u64, burst: u64) -> Self {
        let burst = burst.max(1);
        TokenBucket { rate, burst, level: burst * 1_000_000_000, last_ns: 0 }
    }

    /// Take one token at time `now_ns`; false when the bucket is empty.
    pub fn take(&mut self, now_ns: u64) -> bool {
        if self.rate == 0 {
            return true;
        }
        let cap = self.burst * 1_000_000_000;
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.level = self.level.saturating_add(dt.saturating_mul(self.rate)).min(cap);
        if self.level >= 1_000_000_000 {
            self.level -= 1_000_000_000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_rate() {
        let mut b = TokenBucket::new(10, 3);
        assert!(b.take(0) && b.take(0) && b.take(0));
        assert!(!b.take(0), "burst spent");
        assert!(!b.take(50_000_000), "half a token after 50 ms");
        assert!(b.take(100_000_000), "one token after 100 ms");
        assert!(!b.take(100_000_000));
        // A long pause refills to the burst, not beyond.
        for _ in 0..3 {
            assert!(b.take(60_000_000_000));
        }
        assert!(!b.take(60_000_000_000));
        let mut free = TokenBucket::new(0, 1);
        assert!((0..1000).all(|_| free.take(0)));
    }

    #[test]
    fn totals_sum_workers() {
        let a = WorkerStats::default();
        let b = WorkerStats::default();
        bump(&a.rx_packets[1], 2);
        bump(&b.rx_packets[1], 3);
        a.drop_reason(DropReason::Truncated);
        b.drop_reason(DropReason::Truncated);
        b.daemon_drop(DaemonDrop::IcmpRateLimited);
        let t = Totals::sum([&a, &b]);
        assert_eq!(t.rx_packets, [0, 5]);
        assert_eq!(t.drops.iter().find(|d| d.0 == "truncated").map(|d| d.1), Some(2));
        assert_eq!(t.daemon_drops.iter().find(|d| d.0 == "icmp-rate-limited").map(|d| d.1), Some(1));
        assert_eq!(t.dropped(), 2);
    }
}
