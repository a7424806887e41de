//! One worker thread per TUN queue: take a batch of packets from the
//! queue, translate each with the current [`Engines`] into the worker's
//! reused [`Out`], hand what it emits back to the same queue, count.
//!
//! Two I/O modes (`[tun] io`):
//! - `poll` (default): non-blocking `read(2)` until the queue is empty or
//!   the batch is full, one `write(2)` per packet, `poll(2)` when idle.
//! - `uring`: `batch` reads stay posted on an io_uring; one
//!   `io_uring_enter(2)` submits the writes of the last batch and collects
//!   the next batch of packets. Writes are copied into pre-allocated slots.
//!
//! Nothing on the per-packet path allocates or takes a lock: the buffers
//! are allocated once, the engines are reached through an `ArcSwap` load
//! per batch, and the counters have a single writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use xlat::{Out, PacketKind, Verdict};

use super::engine::{EngineKind, Engines};
use super::stats::{bump, DaemonDrop, TokenBucket, WorkerStats};
use crate::amend::{FragmentHolder, Offer};
use crate::sys::tun::{TunQueue, Waiter};
use crate::sys::uring::{Done, TunRing};
use confval::IoMode;

/// Largest packet a worker reads (the TUN never hands over more).
pub const BUF_LEN: usize = 65_536;
/// Size of an io_uring write slot; larger packets are written directly.
pub const SLOT_LEN: usize = 2048;

/// What a worker needs, moved into its thread.
#[derive(Debug)]
pub struct Worker {
    /// Worker number (also the CPU it is pinned to with `pin-workers`).
    pub id: usize,
    /// Its TUN queue (blocking for `uring`, non-blocking for `poll`).
    pub queue: TunQueue,
    /// I/O mode.
    pub io: IoMode,
    /// Its counters.
    pub stats: Arc<WorkerStats>,
    /// The current engines.
    pub engines: Arc<ArcSwap<Engines>>,
    /// Set to stop.
    pub shutdown: Arc<AtomicBool>,
    /// Packets per batch.
    pub batch: usize,
    /// `[tun] busy-poll` (poll mode): spin this long after the last packet.
    pub busy_poll: std::time::Duration,
    /// Clock origin shared by all workers.
    pub epoch: Instant,
}

/// 0 for IPv4, 1 for IPv6 (by version nibble; anything else counts as IPv4).
#[inline]
pub fn family(p: &[u8]) -> usize {
    usize::from(p.first().is_some_and(|b| b >> 4 == 6))
}

/// Where emitted packets go.
trait Sink {
    fn send(&mut self, p: &[u8], stats: &WorkerStats);
}

/// Direct `write(2)`.
struct Direct<'a>(&'a TunQueue);

impl Sink for Direct<'_> {
    #[inline]
    fn send(&mut self, p: &[u8], stats: &WorkerStats) {
        write_direct(self.0, p, stats);
    }
}

#[inline]
fn write_direct(q: &TunQueue, p: &[u8], stats: &WorkerStats) {
    match q.send(p) {
        Ok(()) => {
            let f = family(p);
            bump(&stats.tx_packets[f], 1);
            bump(&stats.tx_bytes[f], p.len() as u64);
        }
        Err(e) => {
            stats.daemon_drop(DaemonDrop::WriteError);
            tracing::debug!("TUN write failed: {e}");
        }
    }
}

/// Through the ring (counted when the write completes), directly when no
/// slot is free.
struct Ring<'a> {
    ring: &'a mut TunRing,
    queue: &'a TunQueue,
}

impl Sink for Ring<'_> {
    #[inline]
    fn send(&mut self, p: &[u8], stats: &WorkerStats) {
        match self.ring.write(p) {
            Ok(true) => {}
            Ok(false) => {
                // No slot (or too big): hand the queued writes to the kernel
                // first (TUN writes complete inline), so this one does not
                // overtake them.
                if let Err(e) = self.ring.submit() {
                    tracing::debug!("io_uring submit failed: {e}");
                }
                write_direct(self.queue, p, stats)
            }
            Err(e) => {
                stats.daemon_drop(DaemonDrop::WriteError);
                tracing::debug!("io_uring submit failed: {e}");
            }
        }
    }
}

/// Per-worker translation state.
struct Ctx<'a> {
    stats: &'a WorkerStats,
    out: Out,
    bucket: TokenBucket,
    holder: Option<FragmentHolder>,
    generation: u64,
}

impl<'a> Ctx<'a> {
    fn new(id: usize, stats: &'a WorkerStats, eng: &Engines) -> Self {
        Ctx {
            stats,
            out: Out::with_ident_seed((id as u16).wrapping_mul(0x3b11)),
            bucket: TokenBucket::new(eng.icmp_rate, eng.icmp_burst),
            holder: eng.amend.then(FragmentHolder::default),
            generation: eng.generation,
        }
    }

    /// Pick up settings of a reloaded configuration.
    #[inline]
    fn refresh(&mut self, eng: &Engines) {
        if eng.generation != self.generation {
            self.generation = eng.generation;
            self.bucket = TokenBucket::new(eng.icmp_rate, eng.icmp_burst);
            if eng.amend != self.holder.is_some() {
                self.holder = eng.amend.then(FragmentHolder::default);
            }
        }
    }

    /// Send what `out` holds, rate-limiting originated ICMP errors.
    #[inline]
    fn emit(&mut self, now_ns: u64, sink: &mut impl Sink) {
        for (kind, p) in self.out.iter() {
            if kind == PacketKind::IcmpError {
                if !self.bucket.take(now_ns) {
                    self.stats.daemon_drop(DaemonDrop::IcmpRateLimited);
                    continue;
                }
                bump(&self.stats.icmp_errors_sent, 1);
            }
            sink.send(p, self.stats);
        }
    }

    #[inline]
    fn translate(&mut self, eng: &Engines, kind: EngineKind, pkt: &[u8], now_ns: u64, sink: &mut impl Sink) {
        let v = eng.translate_with(kind, pkt, now_ns, &mut self.out);
        bump(&self.stats.engine_packets[kind as usize], 1);
        match v {
            Verdict::Emit => self.emit(now_ns, sink),
            Verdict::Drop(r) => self.stats.drop_reason(r),
        }
    }

    #[inline]
    fn handle(&mut self, eng: &Engines, pkt: &[u8], now_ns: u64, sink: &mut impl Sink) {
        let f = family(pkt);
        bump(&self.stats.rx_packets[f], 1);
        bump(&self.stats.rx_bytes[f], pkt.len() as u64);
        let kind = eng.owner(pkt);
        if kind == EngineKind::Siit {
            if let Some(h) = self.holder.as_mut() {
                match h.offer(pkt) {
                    Offer::Pass => {}
                    Offer::Held => return,
                    Offer::Complete(set) => {
                        for frag in &set {
                            self.translate(eng, kind, frag, now_ns, sink);
                        }
                        return;
                    }
                    Offer::Failed(r, n) => {
                        for _ in 0..n {
                            self.stats.drop_reason(r);
                        }
                        return;
                    }
                }
            }
        }
        self.translate(eng, kind, pkt, now_ns, sink);
    }
}

impl Worker {
    /// Run until `shutdown` is set.
    pub fn run(self) {
        if self.io == IoMode::Uring {
            if !self.busy_poll.is_zero() && self.id == 0 {
                tracing::warn!("[tun] busy-poll applies to io = \"poll\" only; the io_uring workers do not spin");
            }
            match TunRing::new(&self.queue, self.batch, BUF_LEN, self.batch * 2, SLOT_LEN) {
                Ok(ring) => return self.run_uring(ring),
                Err(e) => {
                    tracing::warn!("worker {}: io_uring unavailable ({e}); using poll", self.id);
                    if let Err(e) = self.queue.set_nonblocking() {
                        tracing::error!("worker {}: cannot make the queue non-blocking: {e}", self.id);
                        return;
                    }
                }
            }
        }
        self.run_poll()
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn run_uring(&self, mut ring: TunRing) {
        let first = self.engines.load_full();
        let mut ctx = Ctx::new(self.id, &self.stats, &first);
        drop(first);
        while !self.shutdown.load(Ordering::Relaxed) {
            if let Err(e) = ring.wait(200) {
                tracing::warn!("worker {}: io_uring wait failed: {e}", self.id);
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            let n = ring.completions();
            if n == 0 {
                continue;
            }
            let eng = self.engines.load();
            ctx.refresh(&eng);
            let now_ns = self.now_ns();
            for k in 0..n {
                match ring.completion(k) {
                    Done::Write { len, first, err } => match err {
                        None => {
                            let f = usize::from(first >> 4 == 6);
                            bump(&self.stats.tx_packets[f], 1);
                            bump(&self.stats.tx_bytes[f], len as u64);
                        }
                        Some(e) => {
                            self.stats.daemon_drop(DaemonDrop::WriteError);
                            tracing::debug!("TUN write failed: errno {e}");
                        }
                    },
                    Done::Read(usize::MAX, _) => {}
                    Done::Read(i, res) => {
                        let buf = ring.read_buf(i);
                        match res {
                            Ok(len) => {
                                let mut sink = Ring { ring: &mut ring, queue: &self.queue };
                                ctx.handle(&eng, &buf[..len.min(buf.len())], now_ns, &mut sink);
                            }
                            Err(e) => {
                                self.stats.daemon_drop(DaemonDrop::ReadError);
                                tracing::debug!("worker {}: TUN read failed: {e}", self.id);
                                // Not expected while the device exists; do not spin if it is gone.
                                std::thread::sleep(std::time::Duration::from_millis(10));
                            }
                        }
                        if let Err(e) = ring.rearm(i, buf) {
                            tracing::error!("worker {}: cannot post a read: {e}", self.id);
                        }
                    }
                }
            }
        }
        ring.cancel_all();
    }

    fn run_poll(&self) {
        let mut bufs: Vec<Box<[u8]>> = (0..self.batch).map(|_| vec![0u8; BUF_LEN].into_boxed_slice()).collect();
        let mut lens = vec![0usize; self.batch];
        let first = self.engines.load_full();
        let mut ctx = Ctx::new(self.id, &self.stats, &first);
        drop(first);
        let mut sink = Direct(&self.queue);
        let mut waiter = Waiter::new(self.busy_poll);
        while !self.shutdown.load(Ordering::Relaxed) {
            match waiter.wait(&self.queue, 200) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!("worker {}: poll failed: {e}", self.id);
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
            }
            loop {
                let mut n = 0;
                while n < self.batch {
                    match self.queue.recv(&mut bufs[n]) {
                        Ok(Some(len)) => {
                            lens[n] = len;
                            n += 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            self.stats.daemon_drop(DaemonDrop::ReadError);
                            tracing::debug!("worker {}: TUN read failed: {e}", self.id);
                            std::thread::sleep(std::time::Duration::from_millis(10));
                            break;
                        }
                    }
                }
                if n == 0 {
                    break;
                }
                waiter.worked();
                let eng = self.engines.load();
                ctx.refresh(&eng);
                let now_ns = self.now_ns();
                for (buf, &len) in bufs.iter().zip(&lens).take(n) {
                    ctx.handle(&eng, &buf[..len], now_ns, &mut sink);
                }
                if n < self.batch {
                    break;
                }
            }
        }
    }
}
