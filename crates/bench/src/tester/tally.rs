//! What every tester backend does with what comes back: each packet
//! carries its index in the trial and its send time; the receiver's
//! [`Tally`] marks it seen (duplicates and strangers counted apart), judges
//! it on time or late (later than the budget counts as lost), records its
//! latency and the trend of the trial, and [`Tally::outcome`] turns that
//! and the sender's [`SendStats`] into the trial's [`Outcome`].

use serde::Serialize;

use crate::harness::latency::{Latency, LatencyHistogram};

/// Tenths of a trial over which the latency trend is taken.
const TREND: usize = 10;

/// What became of one received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// First arrival within the budget, with its latency (ns).
    OnTime(u64),
    /// First arrival, later than the budget (lost).
    Late,
    /// Seen before.
    Duplicate,
    /// Not a packet of this trial.
    Foreign,
}

/// A receiver's bookkeeping for one trial of `total` packets (indices
/// `0..total`).
#[derive(Debug, Clone)]
pub struct Tally {
    total: u64,
    budget_ns: u64,
    seen: Vec<u64>,
    received: u64,
    late: u64,
    dup: u64,
    foreign: u64,
    hist: LatencyHistogram,
    trend: [(f64, u64); TREND],
    /// Set when the packets were judged elsewhere ([`Tally::counted`]):
    /// (first arrivals, on time); the histogram then holds samples.
    counted: Option<(u64, u64)>,
}

/// What a receiver that judges packets itself (the XDP tester's, in the
/// kernel) counted in one trial.
#[derive(Debug, Clone, Default)]
pub struct Counted {
    /// First arrivals, on time or late.
    pub received: u64,
    /// First arrivals later than the budget.
    pub late: u64,
    /// Packets seen before.
    pub dup: u64,
    /// Packets that were not this trial's.
    pub foreign: u64,
    /// Latency sum (ns) and packets per tenth of the trial.
    pub trend: Vec<(u64, u64)>,
}

impl Tally {
    /// Bookkeeping for `total` packets; later than `budget_ns` is late.
    pub fn new(total: u64, budget_ns: u64) -> Self {
        Tally {
            total,
            budget_ns,
            seen: vec![0; total.div_ceil(64) as usize],
            received: 0,
            late: 0,
            dup: 0,
            foreign: 0,
            hist: LatencyHistogram::new(),
            trend: [(0.0, 0); TREND],
            counted: None,
        }
    }

    /// The tally of a trial of `total` packets that a receiver judged
    /// itself: its counts, and the latencies (ns) of a sample of the
    /// packets it received on time, which make the latency histogram.
    pub fn counted(total: u64, budget_ns: u64, c: &Counted, samples: impl IntoIterator<Item = u64>) -> Self {
        let mut t = Tally::new(0, budget_ns);
        t.total = total;
        t.received = c.received;
        t.late = c.late;
        t.dup = c.dup;
        t.foreign = c.foreign;
        for (slot, &(sum, n)) in t.trend.iter_mut().zip(&c.trend) {
            *slot = (sum as f64, n);
        }
        for ns in samples {
            t.hist.record(ns);
        }
        t.counted = Some((c.received, c.received.saturating_sub(c.late)));
        t
    }

    /// Counts a datagram or frame that is not one of the trial's packets.
    pub fn foreign(&mut self) {
        self.foreign += 1;
    }

    /// Judges packet `index`, sent at `sent_ns`, received at `now_ns`.
    #[inline]
    pub fn record(&mut self, index: u64, sent_ns: u64, now_ns: u64) -> Verdict {
        if index >= self.total {
            self.foreign += 1;
            return Verdict::Foreign;
        }
        let (w, bit) = ((index / 64) as usize, 1u64 << (index % 64));
        if self.seen[w] & bit != 0 {
            self.dup += 1;
            return Verdict::Duplicate;
        }
        self.seen[w] |= bit;
        self.received += 1;
        let lat = now_ns.saturating_sub(sent_ns);
        let t = &mut self.trend[(index * TREND as u64 / self.total) as usize];
        t.0 += lat as f64;
        t.1 += 1;
        if lat > self.budget_ns {
            self.late += 1;
            return Verdict::Late;
        }
        self.hist.record(lat);
        Verdict::OnTime(lat)
    }

    /// Adds another receiver's bookkeeping of the same trial.
    pub fn merge(&mut self, o: &Tally) {
        for (a, b) in self.seen.iter_mut().zip(&o.seen) {
            *a |= b;
        }
        self.received += o.received;
        self.late += o.late;
        self.dup += o.dup;
        self.foreign += o.foreign;
        self.hist.merge(&o.hist);
        for (a, b) in self.trend.iter_mut().zip(o.trend) {
            a.0 += b.0;
            a.1 += b.1;
        }
    }

    /// The trial's outcome, with what the sender(s) reported.
    pub fn outcome(&self, sent: &SendStats, streams: usize) -> Outcome {
        let (received, on_time) = self
            .counted
            .unwrap_or_else(|| (self.seen.iter().map(|w| u64::from(w.count_ones())).sum(), self.hist.count()));
        let missing = sent.sent.saturating_sub(received);
        let trend_us: Vec<f64> =
            self.trend.iter().map(|(s, c)| if *c == 0 { 0.0 } else { s / *c as f64 / 1e3 }).collect();
        let (first, last) = (self.trend[0].1 > 0, self.trend[TREND - 1].1 > 0);
        let rising_queue = first && last && trend_us[TREND - 1] - trend_us[0] > self.budget_ns as f64 / 4.0 / 1e3;
        Outcome {
            streams,
            sent: sent.sent,
            on_time,
            late: self.late,
            missing,
            duplicates: self.dup,
            foreign: self.foreign,
            loss_rate: if sent.sent == 0 { 0.0 } else { (missing + self.late) as f64 / sent.sent as f64 },
            latency: self.hist.summary(),
            trend_us,
            rising_queue,
            send_lag: sent.lag.summary(),
            send_errors: sent.errors,
            sent_pps: if sent.secs > 0.0 { sent.sent as f64 / sent.secs } else { 0.0 },
        }
    }
}

/// What the sender(s) of a trial report.
#[derive(Debug, Clone, Default)]
pub struct SendStats {
    /// Packets sent (refused ones included: they count as missing).
    pub sent: u64,
    /// Packets the kernel refused.
    pub errors: u64,
    /// How late against the schedule packets were handed to the kernel.
    pub lag: LatencyHistogram,
    /// Seconds the sending took (at least the schedule's length).
    pub secs: f64,
}

impl SendStats {
    /// Adds another sender's figures (senders run side by side: the
    /// longer time counts).
    pub fn merge(&mut self, o: &SendStats) {
        self.sent += o.sent;
        self.errors += o.errors;
        self.lag.merge(&o.lag);
        self.secs = self.secs.max(o.secs);
    }
}

/// What one trial measured (both benches' JSON carry it).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// Streams (calls' media streams, or flows).
    pub streams: usize,
    /// Packets sent.
    pub sent: u64,
    /// Received within the budget, each counted once.
    pub on_time: u64,
    /// Received, but later than the budget (counted as lost).
    pub late: u64,
    /// Never received.
    pub missing: u64,
    /// Received more than once (counted once).
    pub duplicates: u64,
    /// Datagrams or frames that were not this trial's packets.
    pub foreign: u64,
    /// (missing + late) / sent.
    pub loss_rate: f64,
    /// Latency of the packets received within the budget.
    pub latency: Latency,
    /// Mean latency (µs) of all received packets, per tenth of the trial:
    /// a rising queue shows as a rising trend.
    pub trend_us: Vec<f64>,
    /// The last tenth's mean is more than a quarter budget above the first's.
    pub rising_queue: bool,
    /// How late the sender handed packets to the kernel against the
    /// schedule: large values mean the tester itself fell behind.
    pub send_lag: Latency,
    /// Packets the kernel refused to send.
    pub send_errors: u64,
    /// The rate the sender achieved, packets per second.
    pub sent_pps: f64,
}

/// How far a tester's achieved rate may fall short of the offered one
/// before its trial is TESTER-BOUND (a share of the offered rate).
pub const RATE_TOLERANCE: f64 = 0.02;

/// The one rule of every bench for a generator that fell behind, which
/// makes its trial TESTER-BOUND (neither a pass nor a failure of the
/// device): it achieved `sent_pps`, under `1 - RATE_TOLERANCE` of the
/// offered `offered_pps`, or its send lag (how late against the schedule
/// packets left, p99: `lag_p99_ns`) was above `budget_ns`, the late
/// budget: the device was then offered bursts a packet that late would be
/// lost in, not the schedule. Returns why, or `None`: the tester offered
/// the load.
pub fn fell_behind(sent_pps: f64, lag_p99_ns: u64, offered_pps: f64, budget_ns: u64) -> Option<String> {
    let mut why = Vec::new();
    if offered_pps > 0.0 && sent_pps < (1.0 - RATE_TOLERANCE) * offered_pps {
        why.push(format!(
            "sent {sent_pps:.0} of {offered_pps:.0} packets/s offered ({:.1} %)",
            sent_pps * 100.0 / offered_pps
        ));
    }
    if lag_p99_ns > budget_ns {
        why.push(format!(
            "send lag p99 {:.1} ms above the {:.1} ms budget",
            lag_p99_ns as f64 / 1e6,
            budget_ns as f64 / 1e6
        ));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

impl Outcome {
    /// Packets lost: missing or late.
    pub fn lost(&self) -> u64 {
        self.missing + self.late
    }

    /// Why the generator fell behind in this trial ([`fell_behind`] of its
    /// achieved rate and send lag), which makes it TESTER-BOUND.
    pub fn tester_bound(&self, offered_pps: f64, budget_ns: u64) -> Option<String> {
        fell_behind(self.sent_pps, self.send_lag.p99_ns, offered_pps, budget_ns)
    }

    /// Zero loss (nothing missing, nothing late) and no rising queue.
    pub fn passes(&self) -> bool {
        self.sent > 0 && self.lost() == 0 && !self.rising_queue
    }
}

/// Loss per flow of a trial whose frames cycle through the flows in
/// order (frame `seq` belongs to flow `seq % flows`, the flow's packet
/// `seq / flows`), from the receiver's bitmap of first arrivals (late
/// ones included: a late packet is lost in the [`Outcome`], not here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlowLoss {
    /// Flows (media streams) in the trial.
    pub flows: usize,
    /// Flows that missed at least one packet.
    pub with_loss: usize,
    /// Packets the worst flow missed.
    pub worst_missing: u64,
    /// That flow's index (the first one, when several missed as many).
    pub worst_flow: Option<usize>,
}

impl FlowLoss {
    /// Accounts `total` frames sent round-robin over `flows` flows, given
    /// the bitmap `seen` (bit `seq % 64` of word `seq / 64`; words past the
    /// end of the bitmap count as unseen).
    pub fn from_bitmap(seen: &[u64], total: u64, flows: usize) -> FlowLoss {
        if flows == 0 {
            return FlowLoss::default();
        }
        let mut missing = vec![0u64; flows];
        let mut flow = 0usize;
        for seq in 0..total {
            let w = seen.get((seq / 64) as usize).copied().unwrap_or(0);
            if w >> (seq % 64) & 1 == 0 {
                missing[flow] += 1;
            }
            flow += 1;
            if flow == flows {
                flow = 0;
            }
        }
        let worst = missing.iter().enumerate().max_by_key(|&(i, &m)| (m, std::cmp::Reverse(i)));
        FlowLoss {
            flows,
            with_loss: missing.iter().filter(|&&m| m > 0).count(),
            worst_missing: worst.map_or(0, |w| *w.1),
            worst_flow: worst.filter(|w| *w.1 > 0).map(|w| w.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(n: u64) -> SendStats {
        SendStats { sent: n, secs: 1.0, ..Default::default() }
    }

    #[test]
    fn counted_elsewhere_gives_the_same_outcome() {
        // A receiver that judged 1000 packets itself: 900 first arrivals,
        // 10 of them late, 5 duplicates, 2 strangers; latencies sampled.
        let mut trend = vec![(0u64, 0u64); TREND];
        trend[0] = (90 * 500, 90);
        trend[TREND - 1] = (90 * 600, 90);
        let c = Counted { received: 900, late: 10, dup: 5, foreign: 2, trend };
        let t = Tally::counted(1000, 1_000_000, &c, [400u64, 500, 600]);
        let o = t.outcome(&sent(1000), 4);
        assert_eq!((o.on_time, o.late, o.missing, o.duplicates, o.foreign), (890, 10, 100, 5, 2));
        assert!((o.loss_rate - 0.11).abs() < 1e-9);
        assert_eq!(o.latency.samples, 3, "the histogram holds the samples");
        assert!(!o.rising_queue && !o.passes());
        let clean = Counted { received: 1000, trend: vec![(0, 0); TREND], ..Counted::default() };
        assert!(Tally::counted(1000, 1_000_000, &clean, [1u64]).outcome(&sent(1000), 1).passes());
    }

    #[test]
    fn judges_every_packet_once() {
        let mut t = Tally::new(200, 1_000);
        for i in 0..150 {
            assert_eq!(t.record(i, 1_000, 1_500), Verdict::OnTime(500));
        }
        assert_eq!(t.record(5, 0, 10), Verdict::Duplicate);
        assert_eq!(t.record(150, 0, 5_000), Verdict::Late);
        assert_eq!(t.record(200, 0, 1), Verdict::Foreign);
        t.foreign();
        let o = t.outcome(&sent(200), 3);
        assert_eq!((o.on_time, o.late, o.missing, o.duplicates, o.foreign), (150, 1, 49, 1, 2));
        assert_eq!(o.lost(), 50);
        assert!((o.loss_rate - 0.25).abs() < 1e-12);
        assert_eq!((o.latency.samples, o.latency.p50_ns, o.streams, o.sent_pps), (150, 500, 3, 200.0));
        assert!(!o.passes());
        assert_eq!(Tally::new(0, 1).outcome(&sent(0), 0).loss_rate, 0.0);
    }

    #[test]
    fn a_generator_that_fell_behind_is_tester_bound() {
        let o = |sent_pps: f64, lag_p99_ms: u64| Outcome {
            sent_pps,
            send_lag: Latency { p99_ns: lag_p99_ms * 1_000_000, ..Default::default() },
            ..Default::default()
        };
        assert_eq!(o(99_000.0, 1).tester_bound(100_000.0, 10_000_000), None, "within the tolerance, lag in budget");
        let short = o(97_000.0, 1).tester_bound(100_000.0, 10_000_000).unwrap();
        assert_eq!(short, "sent 97000 of 100000 packets/s offered (97.0 %)");
        let lag = o(100_000.0, 3400).tester_bound(100_000.0, 20_000_000).unwrap();
        assert_eq!(
            lag, "send lag p99 3400.0 ms above the 20.0 ms budget",
            "the trgw trials that passed with 3.4 s of lag"
        );
        let both = o(50_000.0, 30).tester_bound(100_000.0, 20_000_000).unwrap();
        assert!(both.starts_with("sent 50000") && both.ends_with("above the 20.0 ms budget"), "{both}");
    }

    #[test]
    fn a_rising_queue_fails_a_trial_without_loss() {
        let mut t = Tally::new(100, 20_000_000);
        for i in 0..100 {
            // Latency grows by 0.1 ms per packet: 10 ms more at the end.
            t.record(i, 0, 1_000_000 + i * 100_000);
        }
        let o = t.outcome(&sent(100), 1);
        assert_eq!(o.lost(), 0);
        assert!(o.rising_queue && !o.passes(), "{:?}", o.trend_us);
        let mut flat = Tally::new(100, 20_000_000);
        (0..100).for_each(|i| {
            flat.record(i, 0, 1_000_000);
        });
        assert!(flat.outcome(&sent(100), 1).passes());
    }

    #[test]
    fn loss_per_flow_from_the_bitmap() {
        // 3 flows, 10 packets each: frames 0..30, flow = seq % 3.
        let set = |bits: &[u64]| {
            let mut w = vec![0u64; 1];
            (0..30).filter(|s| !bits.contains(s)).for_each(|s| w[0] |= 1 << s);
            w
        };
        assert_eq!(
            FlowLoss::from_bitmap(&set(&[]), 30, 3),
            FlowLoss { flows: 3, with_loss: 0, worst_missing: 0, worst_flow: None }
        );
        // Flow 1 misses packets 0 and 9 (frames 1, 28), flow 2 one (frame 5).
        assert_eq!(
            FlowLoss::from_bitmap(&set(&[1, 28, 5]), 30, 3),
            FlowLoss { flows: 3, with_loss: 2, worst_missing: 2, worst_flow: Some(1) }
        );
        // A tie goes to the first flow; a short bitmap means unseen.
        assert_eq!(FlowLoss::from_bitmap(&set(&[4, 5]), 30, 3).worst_flow, Some(1));
        let l = FlowLoss::from_bitmap(&[u64::MAX], 100, 4);
        assert_eq!((l.with_loss, l.worst_missing), (4, 9), "frames 64..100 missing: 9 per flow");
        assert_eq!(FlowLoss::from_bitmap(&[], 10, 0), FlowLoss::default());
    }

    #[test]
    fn receivers_merge() {
        let (mut a, mut b) = (Tally::new(10, 100), Tally::new(10, 100));
        (0..5).for_each(|i| {
            a.record(i, 0, 10);
        });
        (5..10).for_each(|i| {
            b.record(i, 0, 20);
        });
        b.foreign();
        a.merge(&b);
        let mut s = sent(6);
        s.merge(&SendStats { sent: 4, errors: 1, secs: 2.0, ..Default::default() });
        let o = a.outcome(&s, 2);
        assert_eq!((o.sent, o.on_time, o.missing, o.foreign, o.send_errors), (10, 10, 0, 1, 1));
        assert!(o.passes());
        assert_eq!(o.sent_pps, 5.0);
    }
}
