//! The bench's clock and packet pacing.
//!
//! Every timestamp a tester writes into a packet and every receive time is
//! [`now_ns`]: CLOCK_MONOTONIC, which all network namespaces of one machine
//! share, so one-way latency is receive time minus the payload's time.

pub use crate::sys::{now_ns, sleep_until_ns};

/// Paces packets at a constant rate: packet `i` is due at
/// `t0 + i * interval`. The sender asks [`Pacer::wait`] how many packets
/// are due, sends them, and reports them with [`Pacer::advance`]; a sender
/// that falls behind sends what is due in one go (and its lag shows).
#[derive(Debug, Clone)]
pub struct Pacer {
    t0: u64,
    interval_ns: f64,
    total: u64,
    next: u64,
    min_wake_ns: u64,
    spin_ns: u64,
    last_wake: u64,
    deadline: Option<u64>,
}

impl Pacer {
    /// `total` packets from `t0` (a [`now_ns`] time), one every `interval_ns`.
    pub fn new(t0: u64, interval_ns: f64, total: u64) -> Self {
        Pacer {
            t0,
            interval_ns: interval_ns.max(1e-3),
            total,
            next: 0,
            min_wake_ns: 0,
            spin_ns: 0,
            last_wake: 0,
            deadline: None,
        }
    }

    /// Sleeps at least `ns` between wake-ups (packets due meanwhile go out
    /// together): fewer, larger batches at high rates.
    pub fn min_wake(mut self, ns: u64) -> Self {
        self.min_wake_ns = ns;
        self
    }

    /// Spins instead of sleeping for the last `ns` before a packet is due
    /// (sleeps wake up late by tens of microseconds).
    pub fn spin(mut self, ns: u64) -> Self {
        self.spin_ns = ns;
        self
    }

    /// Stops at `t` even when packets are left (a sender that cannot keep
    /// up ends with the trial; its shortfall shows in the achieved rate).
    pub fn deadline(mut self, t: u64) -> Self {
        self.deadline = Some(t);
        self
    }

    /// When packet `i` is due.
    pub fn due_at(&self, i: u64) -> u64 {
        self.t0 + (i as f64 * self.interval_ns) as u64
    }

    /// Index of the next packet to send (= packets sent so far).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The start time.
    pub fn t0(&self) -> u64 {
        self.t0
    }

    /// Waits until the next packet is due and returns how many are due now
    /// (at least one); `None` when every packet was sent or the deadline
    /// passed.
    pub fn wait(&mut self) -> Option<u64> {
        if self.next >= self.total {
            return None;
        }
        loop {
            let now = now_ns();
            if self.deadline.is_some_and(|d| now > d) {
                return None;
            }
            let target = self.due_at(self.next).max(self.last_wake + self.min_wake_ns);
            if now >= target {
                self.last_wake = now;
                let due = if now >= self.t0 { ((now - self.t0) as f64 / self.interval_ns) as u64 + 1 } else { 0 };
                return Some(due.min(self.total).saturating_sub(self.next).max(1));
            }
            let wait = target - now;
            if wait > self.spin_ns + 10_000 {
                sleep_until_ns(target - self.spin_ns);
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Marks `n` packets sent.
    pub fn advance(&mut self, n: u64) {
        self.next = (self.next + n).min(self.total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_every_packet_no_earlier_than_due() {
        let t0 = now_ns();
        let mut p = Pacer::new(t0, 200_000.0, 20).spin(50_000);
        let mut sent = 0;
        while let Some(n) = p.wait() {
            let now = now_ns();
            for i in p.next()..p.next() + n {
                assert!(p.due_at(i) <= now, "packet {i} sent before it was due");
            }
            p.advance(n);
            sent += n;
        }
        assert_eq!(sent, 20);
        assert!(now_ns() >= t0 + 19 * 200_000);
    }

    #[test]
    fn a_late_sender_gets_everything_due_at_once_and_a_deadline_stops_it() {
        let t0 = now_ns().saturating_sub(1_000_000);
        let mut p = Pacer::new(t0, 100_000.0, 1000);
        let n = p.wait().unwrap();
        assert!((10..=1000).contains(&n), "{n} due after 1 ms at 10 per ms");
        let mut q = Pacer::new(now_ns(), 1e9, 10).deadline(now_ns() + 1_000_000);
        assert_eq!(q.wait(), Some(1));
        q.advance(1);
        assert_eq!(q.wait(), None, "the next packet is due after the deadline");
    }

    #[test]
    fn min_wake_batches_packets() {
        let mut p = Pacer::new(now_ns(), 10_000.0, 200).min_wake(500_000);
        p.wait();
        p.advance(1);
        let n = p.wait().unwrap();
        assert!(n >= 40, "{n} packets due after a 0.5 ms wake-up gap at 10 µs each");
    }
}
