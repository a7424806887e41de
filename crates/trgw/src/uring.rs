//! The io_uring relay worker: one ring per worker thread. Every relay
//! socket has one multishot `RECVMSG` in flight that picks buffers from a
//! provided-buffer ring; each datagram is written out of the other leg's
//! socket with a `SENDMSG` that points into the same buffer (no copy), and
//! the buffer goes back to the ring when the send completes. One
//! `io_uring_enter` per loop submits every send and collects every
//! completion of every socket, so the syscall cost per packet falls as the
//! load rises (thousands of sockets at 50 packets/s each rarely batch on a
//! single socket, as `recvmmsg` needs).
//!
//! Completion `user_data`: `WAKE` for the control eventfd poll; bit 63 set
//! for sends (low 16 bits = buffer id, which also indexes the send
//! context); otherwise `generation << 32 | slot` for a socket's receive.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::cqueue;
use socket2::Socket;

use crate::sys::epoll::EventFd;
use crate::sys::uring::{Ring, NBUF};
use crate::worker::{base_of, grow, ingress, Cmd, Slot};

const WAKE: u64 = u64::MAX;
pub(crate) const SEND: u64 = 1 << 63;
/// User data of cancel requests (their completions are ignored).
const CANCEL: u64 = SEND | 0xffff_0000;

struct USlot {
    slot: Slot,
    gen: u32,
}

pub(crate) struct UringWorker {
    ring: Ring,
    efd: Arc<EventFd>,
    rx: Receiver<Cmd>,
    nworkers: u32,
    slots: Vec<Option<USlot>>,
    gen: u32,
    /// Sockets of removed streams, closed when their receive ends.
    dying: HashMap<u64, Socket>,
    /// Operations in flight that can still write into our buffers or read
    /// our send contexts (receives armed, sends submitted).
    inflight: usize,
    epoch: Instant,
}

fn ud(gen: u32, slot: usize) -> u64 {
    (u64::from(gen) << 32) | slot as u64
}

impl UringWorker {
    /// A worker, or the error and the channel back (to fall back to epoll).
    #[allow(clippy::result_large_err)]
    pub fn new(
        rx: Receiver<Cmd>,
        nworkers: u32,
        epoch: Instant,
    ) -> Result<(UringWorker, Arc<EventFd>), (io::Error, Receiver<Cmd>)> {
        let setup = Ring::new().and_then(|ring| Ok((ring, Arc::new(EventFd::new()?))));
        match setup {
            Ok((ring, efd)) => {
                let mut w = UringWorker {
                    ring,
                    efd: efd.clone(),
                    rx,
                    nworkers,
                    slots: Vec::new(),
                    gen: 0,
                    dying: HashMap::new(),
                    inflight: 0,
                    epoch,
                };
                w.arm_wake();
                Ok((w, efd))
            }
            Err(e) => Err((e, rx)),
        }
    }

    fn arm_wake(&mut self) {
        self.ring.poll(self.efd.as_raw_fd(), WAKE);
    }

    fn arm_recv(&mut self, idx: usize) {
        let Some(Some(s)) = self.slots.get(idx) else { return };
        // Shared-mode slots have no socket; that mode runs on epoll only.
        let Some(sock) = &s.slot.sock else { return };
        let (fd, u) = (sock.as_raw_fd(), ud(s.gen, idx));
        self.ring.recv(fd, u);
        self.inflight += 1;
    }

    fn base(&self, id: u32) -> usize {
        base_of(id, self.nworkers)
    }

    fn apply(&mut self, c: Cmd) {
        match c {
            Cmd::Install { id, sockets, locals, init } => {
                let base = self.base(id);
                grow(&mut self.slots, base);
                for (k, slot) in Slot::for_stream(*sockets, locals, init) {
                    self.gen = self.gen.wrapping_add(1);
                    self.slots[base + k] = Some(USlot { slot, gen: self.gen });
                    self.arm_recv(base + k);
                }
            }
            Cmd::SetPeers { id, peers } => {
                let base = self.base(id);
                for (k, p) in peers.iter().enumerate() {
                    if let Some(Some(s)) = self.slots.get_mut(base + k) {
                        s.slot.set_peer(*p);
                    }
                }
            }
            Cmd::Remove { id } => {
                let base = self.base(id);
                for k in 0..4 {
                    if let Some(s) = self.slots.get_mut(base + k).and_then(Option::take) {
                        let u = ud(s.gen, base + k);
                        if let Some(sock) = s.slot.sock {
                            self.dying.insert(u, sock);
                            self.ring.cancel(u, CANCEL);
                        }
                    }
                }
            }
        }
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(usize::from(NBUF) * 4);
        while !stop.load(Ordering::Relaxed) {
            match self.ring.submit_and_wait(Duration::from_millis(200)) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) || e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => {
                    tracing::error!(error = %e, "io_uring_enter failed; worker stops");
                    break;
                }
            }
            cqes.clear();
            self.ring.completions(&mut cqes);
            let now_ns = self.epoch.elapsed().as_nanos() as u64;
            let mut recycled = false;
            for &(u, res, flags) in &cqes {
                if u == WAKE {
                    self.take_commands();
                    if !cqueue::more(flags) {
                        self.arm_wake();
                    }
                } else if u & SEND != 0 {
                    if u == CANCEL {
                        continue; // cancel request done
                    }
                    let bid = (u & 0xffff) as u16;
                    self.inflight = self.inflight.saturating_sub(1);
                    if res < 0 {
                        let (slot, gen) = self.ring.send_ctx(bid);
                        if let Some(Some(s)) = self.slots.get(slot as usize) {
                            if s.gen == gen {
                                let st = &s.slot.init.stats.slots[s.slot.k];
                                st.dropped.fetch_add(1, Ordering::Relaxed);
                                st.packets.fetch_sub(1, Ordering::Relaxed);
                            }
                        }
                    }
                    self.ring.recycle(bid);
                    recycled = true;
                } else {
                    recycled |= self.on_recv(u, res, flags, now_ns);
                }
            }
            if recycled {
                self.ring.publish();
            }
        }
        self.shutdown();
    }

    /// Cancels everything in flight and waits (up to a second) for the
    /// kernel to let go of the buffers; if it does not, the buffers are
    /// leaked rather than freed under it.
    fn shutdown(&mut self) {
        self.slots.clear();
        self.ring.cancel_all(CANCEL);
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut done = Vec::new();
        while self.inflight > 0 && Instant::now() < deadline {
            let _ = self.ring.submit_and_wait(Duration::from_millis(100));
            done.clear();
            self.ring.completions(&mut done);
            for &(u, _, flags) in &done {
                let send = u & SEND != 0 && u != CANCEL;
                let recv_end = u != WAKE && u & SEND == 0 && !cqueue::more(flags);
                if send || recv_end {
                    self.inflight -= 1.min(self.inflight);
                }
            }
        }
        if self.inflight > 0 {
            tracing::warn!(inflight = self.inflight, "io_uring operations outlived shutdown; leaking their buffers");
            self.ring.leak();
        }
    }

    /// Applies every queued control command (see the epoll worker's
    /// `take_commands`: no round trip to the control side, commands
    /// first when a datagram comes while a signal is outstanding).
    fn take_commands(&mut self) {
        self.efd.drain();
        while let Ok(c) = self.rx.try_recv() {
            self.apply(c);
        }
    }

    /// One receive completion; true when a buffer went back to the ring.
    fn on_recv(&mut self, u: u64, res: i32, flags: u32, now_ns: u64) -> bool {
        if res > 0 && self.efd.raised() {
            // The stream's new state first; a stream removed meanwhile
            // fails the generation check below.
            self.take_commands();
        }
        let idx = (u & 0xffff_ffff) as usize;
        let gen = (u >> 32) as u32;
        let live = matches!(self.slots.get(idx), Some(Some(s)) if s.gen == gen);
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        if !more {
            self.inflight = self.inflight.saturating_sub(1);
        }
        if !live {
            if !more {
                self.dying.remove(&u);
            }
            if let Some(b) = bid {
                self.ring.recycle(b);
                return true;
            }
            return false;
        }
        if !more {
            // Multishot ended (ENOBUFS, error or cancel): re-arm.
            self.arm_recv(idx);
        }
        let Some(bid) = bid else { return false };
        let Some(msg) = usize::try_from(res).ok().and_then(|len| self.ring.received(bid, len)) else {
            self.ring.recycle(bid);
            return true;
        };
        let out_idx = idx ^ 2;
        let (out_fd, out_dst, out_local) = match self.slots.get(out_idx) {
            Some(Some(o)) => (
                o.slot.sock.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                o.slot.latched.or(o.slot.peer),
                Some(o.slot.local.ip()),
            ),
            _ => (-1, None, None),
        };
        let Some(Some(s)) = self.slots.get_mut(idx) else { return false };
        let slot = &mut s.slot;
        let st_ok = match msg.src {
            Some(src) if !msg.truncated => ingress(slot, src, self.ring.payload(&msg.payload), now_ns),
            _ => false,
        };
        let st = &slot.init.stats.slots[slot.k];
        st.last_ns.store(now_ns.max(1), Ordering::Relaxed);
        if slot.k & 1 == 0 {
            st.lost.store(slot.rx.lost(), Ordering::Relaxed);
            st.jitter.store(slot.rx.jitter(), Ordering::Relaxed);
        }
        let dst = match (st_ok, out_dst, out_local) {
            (true, Some(d), Some(l)) if d.is_ipv4() == l.is_ipv4() => d,
            _ => {
                st.dropped.fetch_add(1, Ordering::Relaxed);
                self.ring.recycle(bid);
                return true;
            }
        };
        st.packets.fetch_add(1, Ordering::Relaxed);
        st.bytes.fetch_add(msg.payload.len() as u64, Ordering::Relaxed);
        let gen = s.gen;
        self.ring.send(bid, out_fd, dst, msg.payload, idx as u32, gen, SEND | u64::from(bid));
        self.inflight += 1;
        false
    }
}
