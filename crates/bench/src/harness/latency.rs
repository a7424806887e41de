//! The one latency summary of every bench: an HDR histogram (3
//! significant digits, 1 ns to one hour) that testers record one-way
//! delays into, summarised as median, p99, p99.9, maximum, mean, standard
//! deviation and PDV.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest value recorded exactly (larger ones count as this): one hour.
const HIGHEST_NS: u64 = 3_600_000_000_000;

/// Latency samples in nanoseconds. Cheap to record into, cheap to merge.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        // Valid bounds (1 <= low, high >= 2 * low, 3 digits): cannot fail.
        LatencyHistogram(Histogram::new_with_bounds(1, HIGHEST_NS, 3).expect("valid histogram bounds"))
    }

    /// Records one sample.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.0.saturating_record(ns);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides: cannot fail; saturate if it ever did.
        let _ = self.0.add(&other.0);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The summary (all zero when empty).
    pub fn summary(&self) -> Latency {
        let h = &self.0;
        if h.is_empty() {
            return Latency::default();
        }
        let (min, p999) = (h.min(), h.value_at_quantile(0.999));
        Latency {
            samples: h.len(),
            min_ns: min,
            mean_ns: h.mean().round() as u64,
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: p999,
            max_ns: h.max(),
            pdv_ns: p999.saturating_sub(min),
            stdev_ns: h.stdev().round() as u64,
        }
    }

    /// The value at quantile `q` (0..=1; 0 when empty).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.0.is_empty() {
            0
        } else {
            self.0.value_at_quantile(q)
        }
    }
}

/// Latency summary (ns), as the JSON reports carry it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Latency {
    /// Number of samples.
    pub samples: u64,
    /// Smallest.
    pub min_ns: u64,
    /// Mean.
    pub mean_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Packet delay variation (RFC 8219 §7.3.1 after RFC 5481): the 99.9th
    /// percentile of one-way delay minus the minimum.
    pub pdv_ns: u64,
    /// Standard deviation (root mean square from the mean), as the
    /// SIP-over-IPv6 paper's Table I reports it.
    pub stdev_ns: u64,
}

/// Nanoseconds as microseconds with one decimal ("12.3"), for tables.
pub fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: u64, b: u64) -> bool {
        a.abs_diff(b) * 1000 <= b.max(1)
    }

    #[test]
    fn percentiles_mean_and_pdv_within_three_digits() {
        let mut h = LatencyHistogram::new();
        for us in 1..=1000u64 {
            h.record(us * 1000);
        }
        let l = h.summary();
        assert_eq!((l.samples, l.min_ns), (1000, 1000));
        assert!(close(l.p50_ns, 500_000), "{l:?}");
        assert!(close(l.p99_ns, 990_000), "{l:?}");
        assert!(close(l.p999_ns, 999_000), "{l:?}");
        assert!(close(l.max_ns, 1_000_000), "{l:?}");
        assert!(close(l.mean_ns, 500_500), "{l:?}");
        assert_eq!(l.pdv_ns, l.p999_ns - l.min_ns);
        // 1..=1000 µs uniform: standard deviation ~288.7 µs.
        assert!(l.stdev_ns.abs_diff(288_675) < 1_000, "{l:?}");
        assert!(close(h.quantile(0.8), 800_000), "{}", h.quantile(0.8));
        assert!(l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.p999_ns && l.p999_ns <= l.max_ns);
    }

    #[test]
    fn merge_empty_and_huge_values() {
        let mut a = LatencyHistogram::new();
        assert_eq!(a.summary(), Latency::default());
        let mut b = LatencyHistogram::new();
        b.record(10);
        b.record(u64::MAX); // saturates at the highest trackable value
        a.record(0);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        let l = a.summary();
        assert_eq!(l.min_ns, 0);
        assert!(l.max_ns >= HIGHEST_NS && l.max_ns <= HIGHEST_NS + HIGHEST_NS / 1000);
        assert_eq!(us(12_345), "12.3");
    }
}
