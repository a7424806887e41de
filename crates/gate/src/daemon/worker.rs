//! One worker thread per TUN queue: read a batch of packets (non-blocking
//! reads until the queue is empty or the batch is full, `poll(2)` when
//! idle), translate each with the current [`Engines`] into the worker's
//! reused [`Out`], write what it emits back to the same queue, count.
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
use crate::sys::tun::TunQueue;

/// Largest packet a worker reads (the TUN never hands over more).
pub const BUF_LEN: usize = 65_536;

/// What a worker needs, moved into its thread.
#[derive(Debug)]
pub struct Worker {
    /// Worker number (also the CPU it is pinned to with `pin-workers`).
    pub id: usize,
    /// Its TUN queue.
    pub queue: TunQueue,
    /// Its counters.
    pub stats: Arc<WorkerStats>,
    /// The current engines.
    pub engines: Arc<ArcSwap<Engines>>,
    /// Set to stop.
    pub shutdown: Arc<AtomicBool>,
    /// Packets per batch.
    pub batch: usize,
    /// Clock origin shared by all workers.
    pub epoch: Instant,
}

/// 0 for IPv4, 1 for IPv6 (by version nibble; anything else counts as IPv4).
#[inline]
fn family(p: &[u8]) -> usize {
    usize::from(p.first().is_some_and(|b| b >> 4 == 6))
}

struct Ctx<'a> {
    queue: &'a TunQueue,
    stats: &'a WorkerStats,
    out: Out,
    bucket: TokenBucket,
    holder: Option<FragmentHolder>,
}

impl Ctx<'_> {
    /// Write what `out` holds, rate-limiting originated ICMP errors.
    #[inline]
    fn emit(&mut self, now_ns: u64) {
        for (kind, p) in self.out.iter() {
            if kind == PacketKind::IcmpError {
                if !self.bucket.take(now_ns) {
                    self.stats.daemon_drop(DaemonDrop::IcmpRateLimited);
                    continue;
                }
                bump(&self.stats.icmp_errors_sent, 1);
            }
            match self.queue.send(p) {
                Ok(()) => {
                    let f = family(p);
                    bump(&self.stats.tx_packets[f], 1);
                    bump(&self.stats.tx_bytes[f], p.len() as u64);
                }
                Err(e) => {
                    self.stats.daemon_drop(DaemonDrop::WriteError);
                    log::debug!("TUN write failed: {e}");
                }
            }
        }
    }

    #[inline]
    fn translate(&mut self, eng: &Engines, kind: EngineKind, pkt: &[u8], now_ns: u64) {
        let v = eng.translate_with(kind, pkt, now_ns, &mut self.out);
        bump(&self.stats.engine_packets[kind as usize], 1);
        match v {
            Verdict::Emit => self.emit(now_ns),
            Verdict::Drop(r) => self.stats.drop_reason(r),
        }
    }

    #[inline]
    fn handle(&mut self, eng: &Engines, pkt: &[u8], now_ns: u64) {
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
                            self.translate(eng, kind, frag, now_ns);
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
        self.translate(eng, kind, pkt, now_ns);
    }
}

impl Worker {
    /// Run until `shutdown` is set.
    pub fn run(self) {
        let mut bufs: Vec<Box<[u8]>> = (0..self.batch).map(|_| vec![0u8; BUF_LEN].into_boxed_slice()).collect();
        let mut lens = vec![0usize; self.batch];
        let first = self.engines.load_full();
        let mut generation = first.generation;
        let mut ctx = Ctx {
            queue: &self.queue,
            stats: &self.stats,
            out: Out::with_ident_seed((self.id as u16).wrapping_mul(0x3b11)),
            bucket: TokenBucket::new(first.icmp_rate, first.icmp_burst),
            holder: first.amend.then(FragmentHolder::default),
        };
        drop(first);
        while !self.shutdown.load(Ordering::Relaxed) {
            match self.queue.wait_readable(200) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    log::warn!("worker {}: poll failed: {e}", self.id);
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
                            log::debug!("worker {}: TUN read failed: {e}", self.id);
                            break;
                        }
                    }
                }
                if n == 0 {
                    break;
                }
                let eng = self.engines.load();
                if eng.generation != generation {
                    generation = eng.generation;
                    ctx.bucket = TokenBucket::new(eng.icmp_rate, eng.icmp_burst);
                    if eng.amend != ctx.holder.is_some() {
                        ctx.holder = eng.amend.then(FragmentHolder::default);
                    }
                }
                let now_ns = self.epoch.elapsed().as_nanos() as u64;
                for (buf, &len) in bufs.iter().zip(&lens).take(n) {
                    ctx.handle(&eng, &buf[..len], now_ns);
                }
                if n < self.batch {
                    break;
                }
            }
        }
    }
}
