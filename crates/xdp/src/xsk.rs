//! AF_XDP transmit sockets: the ring protocol over [`crate::sys::xsk`]'s
//! memory, in safe code. `crates/bench`'s `--tester afxdp` sends its frames
//! with a [`TxSocket`]; the frames are counted on the other side by the XDP
//! tester's receiver (`xdp::tester`), which needs no AF_XDP RX ring:
//! counting in the receiving port's XDP program costs less than handing
//! each frame to userspace through a ring and judging it there.
//!
//! One [`TxSocket`] owns one UMEM (anonymous memory cut into frame slots,
//! written once with the trial's frame and then only where a frame
//! differs), its TX ring and its completion ring (the fill ring exists
//! because the kernel needs one per UMEM; a TX-only socket never fills it).
//! A slot goes out in a TX descriptor and comes back through the
//! completion ring when the kernel is done with it, to be reused: no
//! memory is allocated per frame or per call on this side.
//!
//! The rings are single-producer, single-consumer arrays of free-running
//! `u32` indices shared with the kernel ([`Producer`], [`Consumer`]): the
//! side that writes entries publishes them by storing its index with
//! `Release` after writing them; the other side loads that index with
//! `Acquire` before reading them, and gives the slots back by storing its
//! own index (`Release`) after reading. Each side caches the other's index
//! and reloads it only when the cached value says the ring is full
//! (producer) or empty (consumer).
//!
//! Copy mode (`XDP_COPY`) works on every driver, veth included: each
//! `sendto` turns up to the socket's budget of descriptors into socket
//! buffers and transmits them (raised from 32 with
//! `XDP_MAX_TX_SKB_BUDGET` where the kernel has it, Linux 6.17).
//! [`TxSocket::open`] lets the kernel pick zero-copy where the driver
//! offers it and says which mode it got ([`TxSocket::zero_copy`]).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

use crate::sys::xsk::{self as sys, Desc, Entry, Mapping, Ring, RingKind};
use crate::Error;

/// The writing side of a ring: the application on the TX and fill rings.
#[derive(Debug)]
pub struct Producer<E: Entry> {
    ring: Ring<E>,
    /// Our index: entries before it are published.
    prod: u32,
    /// The consumer's index as last read.
    cons: u32,
}

impl<E: Entry> Producer<E> {
    /// The producer of `ring`, from the ring's current indices.
    pub fn new(ring: Ring<E>) -> Self {
        let prod = ring.producer().load(Ordering::Relaxed);
        let cons = ring.consumer().load(Ordering::Acquire);
        Producer { ring, prod, cons }
    }

    /// Entries free to write now, reading the consumer's index again only
    /// when the cached one leaves fewer than `want`.
    pub fn free(&mut self, want: u32) -> u32 {
        let size = self.ring.size();
        let free = size - self.prod.wrapping_sub(self.cons);
        if free >= want {
            return free;
        }
        self.cons = self.ring.consumer().load(Ordering::Acquire);
        size - self.prod.wrapping_sub(self.cons)
    }

    /// Writes the `k`-th entry after the published ones (`k` below what
    /// [`Producer::free`] returned).
    pub fn put(&mut self, k: u32, e: E) {
        self.ring.write(self.prod.wrapping_add(k), e);
    }

    /// Publishes the first `n` entries written with [`Producer::put`].
    pub fn submit(&mut self, n: u32) {
        self.prod = self.prod.wrapping_add(n);
        self.ring.producer().store(self.prod, Ordering::Release);
    }

    /// Entries published that the consumer has not taken yet.
    pub fn pending(&mut self) -> u32 {
        self.cons = self.ring.consumer().load(Ordering::Acquire);
        self.prod.wrapping_sub(self.cons)
    }

    /// Whether the kernel asks to be woken for this ring (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.ring.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// The reading side of a ring: the application on the RX and completion rings.
#[derive(Debug)]
pub struct Consumer<E: Entry> {
    ring: Ring<E>,
    /// Our index: entries before it are given back.
    cons: u32,
    /// The producer's index as last read.
    prod: u32,
}

impl<E: Entry> Consumer<E> {
    /// The consumer of `ring`, from the ring's current indices.
    pub fn new(ring: Ring<E>) -> Self {
        let cons = ring.consumer().load(Ordering::Relaxed);
        let prod = ring.producer().load(Ordering::Acquire);
        Consumer { ring, cons, prod }
    }

    /// Entries ready to read now (at most `max`), reading the producer's
    /// index again only when the cached one shows none.
    pub fn available(&mut self, max: u32) -> u32 {
        if self.prod == self.cons {
            self.prod = self.ring.producer().load(Ordering::Acquire);
        }
        self.prod.wrapping_sub(self.cons).min(max)
    }

    /// The `k`-th entry not yet given back (`k` below what
    /// [`Consumer::available`] returned).
    pub fn get(&self, k: u32) -> E {
        self.ring.read(self.cons.wrapping_add(k))
    }

    /// Gives the first `n` entries back to the producer.
    pub fn release(&mut self, n: u32) {
        self.cons = self.cons.wrapping_add(n);
        self.ring.consumer().store(self.cons, Ordering::Release);
    }
}

/// Sizes of a [`TxSocket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxConfig {
    /// The interface to send on (in the calling thread's namespace).
    pub ifindex: u32,
    /// Its queue (0 on a veth).
    pub queue: u32,
    /// UMEM frame slots (a power of two): the most frames in flight, the
    /// completion ring's size.
    pub frames: u32,
    /// Bytes per slot: 2048 or 4096 (the largest frame it carries).
    pub frame_size: u32,
    /// TX ring entries (a power of two, at most `frames`).
    pub tx_ring: u32,
    /// Descriptors one `sendto` sends in copy mode (`XDP_MAX_TX_SKB_BUDGET`,
    /// 32 up to `tx_ring`; kernels before 6.17 keep 32).
    pub budget: u32,
    /// The socket's send buffer, bytes (`SO_SNDBUFFORCE`): every frame in
    /// flight in copy mode is a socket buffer charged to it.
    pub sndbuf: u32,
}

impl TxConfig {
    /// The sizes the bench's generator uses, for interface `ifindex`.
    pub fn new(ifindex: u32) -> TxConfig {
        TxConfig { ifindex, queue: 0, frames: 4096, frame_size: 2048, tx_ring: 2048, budget: 256, sndbuf: 16 << 20 }
    }
}

/// The fill ring's size: the kernel needs a fill ring per UMEM; a TX-only
/// socket never puts anything in it.
const FILL_RING: u32 = 64;

/// Failures that mean "try again later", not an error: the kernel's budget
/// of descriptors or socket buffers ran out, or the device was busy.
fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR))
}

/// An AF_XDP socket that only transmits, with its own UMEM.
#[derive(Debug)]
pub struct TxSocket {
    fd: OwnedFd,
    umem: Mapping,
    frame_size: u32,
    tx: Producer<Desc>,
    cq: Consumer<u64>,
    _fill: Ring<u64>,
    /// Free slots' UMEM offsets (the most recently completed first: its
    /// cache lines are the warmest).
    free: Vec<u64>,
    zero_copy: bool,
    budget: Option<u32>,
    /// Descriptors published so far.
    queued: u64,
    /// Completions that named no slot of this UMEM (none from a correct kernel).
    bad_completions: u64,
}

impl TxSocket {
    /// Opens a socket with a UMEM of `cfg.frames` slots, binds it to
    /// `cfg.queue` of `cfg.ifindex` (the kernel picks zero-copy where the
    /// driver offers it, copy mode otherwise) and sets the budget.
    pub fn open(cfg: TxConfig) -> Result<TxSocket, Error> {
        let cfgerr = |why: String| Error::Config(format!("AF_XDP socket: {why}"));
        if !cfg.frames.is_power_of_two() || !cfg.tx_ring.is_power_of_two() || cfg.tx_ring > cfg.frames {
            return Err(cfgerr(format!(
                "{} frames and a TX ring of {}: powers of two, the ring no larger",
                cfg.frames, cfg.tx_ring
            )));
        }
        if cfg.frame_size != 2048 && cfg.frame_size != 4096 {
            return Err(cfgerr(format!("frame slots of {} bytes: 2048 or 4096", cfg.frame_size)));
        }
        let step = |what: &'static str| move |e: io::Error| Error::Unavailable(format!("AF_XDP socket ({what}): {e}"));
        let fd = sys::socket().map_err(step("socket"))?;
        let len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = Mapping::anonymous(len).map_err(step("UMEM"))?;
        sys::register_umem(fd.as_fd(), &umem, cfg.frame_size, 0).map_err(step("XDP_UMEM_REG"))?;
        sys::set_u32(fd.as_fd(), libc::XDP_UMEM_FILL_RING, FILL_RING).map_err(step("fill ring"))?;
        sys::set_u32(fd.as_fd(), libc::XDP_UMEM_COMPLETION_RING, cfg.frames).map_err(step("completion ring"))?;
        sys::set_u32(fd.as_fd(), libc::XDP_TX_RING, cfg.tx_ring).map_err(step("TX ring"))?;
        let [_, tx_off, fill_off, cq_off] = sys::mmap_offsets(fd.as_fd()).map_err(step("XDP_MMAP_OFFSETS"))?;
        let tx = sys::map_ring::<Desc>(fd.as_fd(), RingKind::Tx, tx_off, cfg.tx_ring).map_err(step("map TX ring"))?;
        let fill =
            sys::map_ring::<u64>(fd.as_fd(), RingKind::Fill, fill_off, FILL_RING).map_err(step("map fill ring"))?;
        let cq = sys::map_ring::<u64>(fd.as_fd(), RingKind::Completion, cq_off, cfg.frames)
            .map_err(step("map completion ring"))?;
        sys::bind(fd.as_fd(), cfg.ifindex, cfg.queue, libc::XDP_USE_NEED_WAKEUP).map_err(|e| {
            Error::Interface(format!("AF_XDP bind to interface {} queue {}: {e}", cfg.ifindex, cfg.queue))
        })?;
        let zero_copy = sys::zero_copy(fd.as_fd()).map_err(step("XDP_OPTIONS"))?;
        let budget = match sys::set_u32(fd.as_fd(), sys::XDP_MAX_TX_SKB_BUDGET, cfg.budget) {
            Ok(()) => Some(cfg.budget),
            // Before Linux 6.17 (ENOPROTOOPT) or out of its range (EACCES): 32.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EACCES)) => None,
            Err(e) => return Err(step("XDP_MAX_TX_SKB_BUDGET")(e)),
        };
        sys::set_sndbuf_force(fd.as_fd(), cfg.sndbuf).map_err(step("SO_SNDBUFFORCE (needs CAP_NET_ADMIN)"))?;
        let free = (0..u64::from(cfg.frames)).rev().map(|i| i * u64::from(cfg.frame_size)).collect();
        Ok(TxSocket {
            fd,
            umem,
            frame_size: cfg.frame_size,
            tx: Producer::new(tx),
            cq: Consumer::new(cq),
            _fill: fill,
            free,
            zero_copy,
            budget,
            queued: 0,
            bad_completions: 0,
        })
    }

    /// Whether the kernel gave zero-copy mode (veth: no, copy mode).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The descriptors per `sendto` set with `XDP_MAX_TX_SKB_BUDGET`
    /// (`None`: the kernel has no such option and sends 32).
    pub fn budget(&self) -> Option<u32> {
        self.budget
    }

    /// One line for reports: the mode and the budget.
    pub fn describe(&self) -> String {
        let mode = if self.zero_copy { "zero-copy" } else { "copy mode (no zero-copy on this driver)" };
        match self.budget {
            Some(b) => format!("{mode}, {b} frames per sendto (XDP_MAX_TX_SKB_BUDGET)"),
            None => format!("{mode}, 32 frames per sendto (no XDP_MAX_TX_SKB_BUDGET before Linux 6.17)"),
        }
    }

    /// Writes `frame` into every slot (the UMEM filled once: a frame sent
    /// later is this one with its per-frame bytes rewritten).
    pub fn fill(&mut self, frame: &[u8]) -> Result<(), Error> {
        if frame.len() > self.frame_size as usize {
            return Err(Error::Config(format!(
                "a {}-byte frame does not fit the AF_XDP frame slots of {} bytes",
                frame.len(),
                self.frame_size
            )));
        }
        let slots = self.umem.len() / self.frame_size as usize;
        for i in 0..slots {
            self.umem
                .write(i * self.frame_size as usize, frame)
                .map_err(|e| Error::Config(format!("UMEM slot {i}: {e}")))?;
        }
        Ok(())
    }

    /// Takes the slots the kernel has completed back; returns how many.
    pub fn reclaim(&mut self) -> u32 {
        let n = self.cq.available(u32::MAX);
        let slots = self.umem.len() as u64;
        for k in 0..n {
            let a = self.cq.get(k);
            if a.is_multiple_of(u64::from(self.frame_size)) && a < slots {
                self.free.push(a);
            } else {
                self.bad_completions += 1;
            }
        }
        self.cq.release(n);
        n
    }

    /// Queues up to `n` frames of `len` bytes: for each, a free slot is
    /// handed to `write(k, frame)` (`k` counting from 0 in this call; the
    /// slot holds the frame last sent from it, or the one [`TxSocket::fill`]
    /// wrote) and then published in a TX descriptor. Fewer than `n` when
    /// slots or TX ring entries run out. Nothing is sent before
    /// [`TxSocket::kick`].
    pub fn queue(&mut self, n: u32, len: u32, mut write: impl FnMut(u32, &mut [u8])) -> Result<u32, Error> {
        if len == 0 || len > self.frame_size {
            return Err(Error::Config(format!("a {len}-byte frame in {}-byte AF_XDP slots", self.frame_size)));
        }
        self.reclaim();
        let k = n.min(self.free.len() as u32).min(self.tx.free(n));
        let mut written = 0;
        let mut failed = None;
        while written < k {
            let Some(addr) = self.free.pop() else { break };
            if let Err(e) = self.umem.with_mut(addr as usize, len as usize, |f| write(written, f)) {
                self.free.push(addr);
                failed = Some(Error::Config(format!("UMEM slot at {addr}: {e}")));
                break;
            }
            self.tx.put(written, Desc { addr, len, options: 0 });
            written += 1;
        }
        // Only what was written is published, also when a slot failed.
        self.tx.submit(written);
        self.queued += u64::from(written);
        match failed {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// Asks the kernel to send what the TX ring holds (in copy mode one
    /// call sends up to the budget). Returns the descriptors still in the
    /// ring. A transient refusal (the budget, the socket's buffer or the
    /// device full) is not an error: call again.
    pub fn kick(&mut self) -> Result<u32, Error> {
        if self.tx.pending() == 0 {
            return Ok(0);
        }
        if !self.zero_copy || self.tx.needs_wakeup() {
            match sys::wake_tx(self.fd.as_fd()) {
                Ok(()) => {}
                Err(e) if transient(&e) => {}
                Err(e) => return Err(Error::Interface(format!("AF_XDP sendto: {e}"))),
            }
        }
        Ok(self.tx.pending())
    }

    /// Descriptors the kernel has taken from the TX ring so far (sent or
    /// being sent).
    pub fn sent(&mut self) -> u64 {
        self.queued - u64::from(self.tx.pending())
    }

    /// Frames queued or sent whose slots have not come back yet.
    pub fn in_flight(&self) -> u32 {
        (self.umem.len() / self.frame_size as usize - self.free.len()) as u32
    }

    /// Completions that named no slot of this UMEM (0 from a correct kernel).
    pub fn bad_completions(&self) -> u64 {
        self.bad_completions
    }

    /// Descriptors the kernel found invalid (`XDP_STATISTICS`).
    pub fn invalid_descriptors(&self) -> Result<u64, Error> {
        sys::tx_statistics(self.fd.as_fd())
            .map(|s| s.0)
            .map_err(|e| Error::Interface(format!("AF_XDP statistics: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair<E: Entry>(size: u32) -> (Producer<E>, Consumer<E>) {
        let r = Ring::<E>::anonymous(size).unwrap();
        (Producer::new(r.clone()), Consumer::new(r))
    }

    fn desc(i: u32) -> Desc {
        Desc { addr: u64::from(i) * 2048, len: 60 + i % 1000, options: 0 }
    }

    #[test]
    fn a_ring_fills_empties_and_wraps() {
        let (mut p, mut c) = pair::<Desc>(8);
        assert_eq!((p.free(1), c.available(u32::MAX)), (8, 0), "empty");
        let mut next = 0u32;
        let mut seen = 0u32;
        // 1000 rounds of uneven batches: the indices wrap the 8 entries
        // many times; every entry arrives once, in order.
        for round in 0..1000u32 {
            let want = 1 + round % 8;
            let k = p.free(want).min(want);
            for i in 0..k {
                p.put(i, desc(next + i));
            }
            assert!(c.available(u32::MAX) <= next - seen, "nothing unpublished is available");
            p.submit(k);
            next += k;
            let n = c.available(1 + round % 5);
            for i in 0..n {
                assert_eq!(c.get(i), desc(seen + i));
            }
            c.release(n);
            seen += n;
        }
        let n = c.available(u32::MAX);
        (0..n).for_each(|i| assert_eq!(c.get(i), desc(seen + i)));
        c.release(n);
        assert_eq!(seen + n, next);
        assert_eq!(p.pending(), 0);
        assert!(next > 1000, "the ring wrapped {} times", next / 8);
    }

    #[test]
    fn a_full_ring_takes_nothing_until_the_consumer_releases() {
        let (mut p, mut c) = pair::<u64>(4);
        for i in 0..4 {
            p.put(i, u64::from(i));
        }
        p.submit(4);
        assert_eq!((p.free(1), p.pending()), (0, 4), "full");
        assert_eq!(c.available(2), 2, "at most max");
        c.release(1);
        assert_eq!(p.free(1), 1, "the cached consumer index is reloaded when short");
        assert_eq!(p.free(0), 1);
        assert_eq!(c.available(u32::MAX), 3);
        assert_eq!((c.get(0), c.get(2)), (1, 3));
    }

    #[test]
    fn indices_wrap_at_2_pow_32() {
        let r = Ring::<u64>::anonymous(4).unwrap();
        r.producer().store(u32::MAX - 1, Ordering::Relaxed);
        r.consumer().store(u32::MAX - 1, Ordering::Relaxed);
        let (mut p, mut c) = (Producer::new(r.clone()), Consumer::new(r.clone()));
        for round in 0..3u64 {
            assert_eq!(p.free(4), 4);
            (0..3).for_each(|i| p.put(i, round * 10 + u64::from(i)));
            p.submit(3);
            assert_eq!(c.available(u32::MAX), 3);
            assert_eq!((c.get(0), c.get(2)), (round * 10, round * 10 + 2));
            c.release(3);
        }
        assert_eq!(r.producer().load(Ordering::Relaxed), (u32::MAX - 1).wrapping_add(9));
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn the_wakeup_flag_is_read_from_the_ring() {
        let r = Ring::<Desc>::anonymous(2).unwrap();
        let p = Producer::new(r.clone());
        assert!(!p.needs_wakeup());
        r.flags().store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(p.needs_wakeup());
    }

    #[test]
    fn bad_sizes_are_refused_before_any_system_call() {
        let base = TxConfig::new(1);
        for (cfg, why) in [
            (TxConfig { frames: 3000, ..base }, "frames not a power of two"),
            (TxConfig { tx_ring: 8192, ..base }, "ring larger than the UMEM"),
            (TxConfig { frame_size: 1500, ..base }, "slot size"),
        ] {
            assert!(matches!(TxSocket::open(cfg), Err(Error::Config(_))), "{why}");
        }
        assert!(transient(&io::Error::from_raw_os_error(libc::EAGAIN)));
        assert!(!transient(&io::Error::from_raw_os_error(libc::ENETDOWN)));
    }
}
