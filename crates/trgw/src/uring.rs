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

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use io_uring::types::{BufRingEntry, RecvMsgOut, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use socket2::Socket;

use crate::worker::{base_of, from_storage, grow, ingress, to_storage, Cmd, Slot};

const NBUF: u16 = 4096;
const BUF: usize = 2048;
const BGID: u16 = 7;
const WAKE: u64 = u64::MAX;
const SEND: u64 = 1 << 63;

struct BufRing {
    base: *mut BufRingEntry,
    layout: Layout,
    tail: u16,
    /// Never free (the kernel may still use it).
    leak: bool,
}

impl BufRing {
    fn push(&mut self, bufs: *mut u8, bid: u16) {
        // SAFETY: base points at NBUF entries; the index is masked.
        unsafe {
            let e = &mut *self.base.add(usize::from(self.tail & (NBUF - 1)));
            e.set_addr(bufs.add(usize::from(bid) * BUF) as u64);
            e.set_len(BUF as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field of the first entry, shared with the kernel.
        unsafe {
            let t = BufRingEntry::tail(self.base) as *const AtomicU16;
            (*t).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.leak {
            // SAFETY: allocated with this layout in `UringWorker::setup`.
            unsafe { dealloc(self.base.cast(), self.layout) };
        }
    }
}

#[repr(C)]
struct SendCtx {
    hdr: libc::msghdr,
    iov: libc::iovec,
    dst: libc::sockaddr_storage,
    slot: u32,
    gen: u32,
}

struct USlot {
    slot: Slot,
    gen: u32,
}

pub(crate) struct UringWorker {
    ring: IoUring,
    bufring: BufRing,
    bufs: Vec<u8>,
    ctx: Box<[SendCtx]>,
    recv_hdr: Box<libc::msghdr>,
    efd: RawFd,
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

// SAFETY: the raw pointers in the worker (buffer ring, send contexts,
// receive header) point at memory the worker owns; it is moved to its
// thread once and used only there.
unsafe impl Send for UringWorker {}

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
    ) -> Result<(UringWorker, RawFd), (io::Error, Receiver<Cmd>)> {
        match Self::setup() {
            Ok((ring, bufring, bufs, efd)) => Ok(Self::assemble(ring, bufring, bufs, efd, rx, nworkers, epoch)),
            Err(e) => Err((e, rx)),
        }
    }

    fn setup() -> io::Result<(IoUring, BufRing, Vec<u8>, RawFd)> {
        // Completions are reaped only when the worker enters the ring
        // (no interrupts of a busy worker); older kernels get a plain ring.
        let ring = IoUring::builder()
            .setup_cqsize(u32::from(NBUF) * 4)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(u32::from(NBUF))
            .or_else(|_| IoUring::builder().setup_cqsize(u32::from(NBUF) * 4).build(u32::from(NBUF)))?;
        let layout = Layout::from_size_align(usize::from(NBUF) * size_of::<BufRingEntry>(), 4096)
            .map_err(|_| io::Error::other("layout"))?;
        // SAFETY: non-zero size layout.
        let base = unsafe { alloc_zeroed(layout) }.cast::<BufRingEntry>();
        if base.is_null() {
            return Err(io::Error::other("out of memory"));
        }
        let mut bufring = BufRing { base, layout, tail: 0, leak: false };
        let mut bufs = vec![0u8; usize::from(NBUF) * BUF];
        for bid in 0..NBUF {
            bufring.push(bufs.as_mut_ptr(), bid);
        }
        bufring.publish();
        // SAFETY: the ring memory lives as long as the worker (dropped after
        // the ring, field order below).
        unsafe { ring.submitter().register_buf_ring_with_flags(base as u64, NBUF, BGID, 0)? };
        // SAFETY: plain syscall.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((ring, bufring, bufs, efd))
    }

    fn assemble(
        ring: IoUring,
        bufring: BufRing,
        bufs: Vec<u8>,
        efd: RawFd,
        rx: Receiver<Cmd>,
        nworkers: u32,
        epoch: Instant,
    ) -> (UringWorker, RawFd) {
        // SAFETY: zeroed C structures are valid initial values.
        let mut recv_hdr: Box<libc::msghdr> = Box::new(unsafe { zeroed() });
        recv_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
        let ctx: Box<[SendCtx]> = (0..NBUF)
            .map(|_| SendCtx {
                // SAFETY: as above.
                hdr: unsafe { zeroed() },
                iov: libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 },
                dst: unsafe { zeroed() },
                slot: 0,
                gen: 0,
            })
            .collect();
        let mut w = UringWorker {
            ring,
            bufring,
            bufs,
            ctx,
            recv_hdr,
            efd,
            rx,
            nworkers,
            slots: Vec::new(),
            gen: 0,
            dying: HashMap::new(),
            inflight: 0,
            epoch,
        };
        w.arm_wake();
        (w, efd)
    }

    fn push(&mut self, e: squeue::Entry) {
        // SAFETY: every entry points at memory owned by the worker that
        // outlives the operation (buffers, contexts, the receive header).
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            if let Err(err) = self.ring.submit() {
                tracing::error!(error = %err, "io_uring submit failed");
                return;
            }
        }
    }

    fn arm_wake(&mut self) {
        let e = opcode::PollAdd::new(types::Fd(self.efd), libc::POLLIN as u32).multi(true).build().user_data(WAKE);
        self.push(e);
    }

    fn arm_recv(&mut self, idx: usize) {
        let Some(Some(s)) = self.slots.get(idx) else { return };
        let e = opcode::RecvMsgMulti::new(types::Fd(s.slot.sock.as_raw_fd()), &*self.recv_hdr, BGID)
            .build()
            .user_data(ud(s.gen, idx));
        self.push(e);
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
                        self.dying.insert(u, s.slot.sock);
                        self.push(opcode::AsyncCancel::new(u).build().user_data(SEND | 0xffff_0000));
                    }
                }
            }
            Cmd::Sync(tx) => {
                let _ = tx.send(());
            }
        }
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let ts = Timespec::new().nsec(200_000_000);
        let args = SubmitArgs::new().timespec(&ts);
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(usize::from(NBUF) * 4);
        while !stop.load(Ordering::Relaxed) {
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) || e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => {
                    tracing::error!(error = %e, "io_uring_enter failed; worker stops");
                    break;
                }
            }
            cqes.clear();
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            let now_ns = self.epoch.elapsed().as_nanos() as u64;
            let mut recycled = false;
            for &(u, res, flags) in &cqes {
                if u == WAKE {
                    let mut v = 0u64;
                    // SAFETY: 8-byte read from our eventfd into a u64.
                    unsafe { libc::read(self.efd, (&mut v as *mut u64).cast(), 8) };
                    while let Ok(c) = self.rx.try_recv() {
                        self.apply(c);
                    }
                    if !cqueue::more(flags) {
                        self.arm_wake();
                    }
                } else if u & SEND != 0 {
                    if u == SEND | 0xffff_0000 {
                        continue; // cancel request done
                    }
                    let bid = (u & 0xffff) as u16;
                    self.inflight = self.inflight.saturating_sub(1);
                    if res < 0 {
                        let c = &self.ctx[usize::from(bid)];
                        if let Some(Some(s)) = self.slots.get(c.slot as usize) {
                            if s.gen == c.gen {
                                let st = &s.slot.init.stats.slots[s.slot.k];
                                st.dropped.fetch_add(1, Ordering::Relaxed);
                                st.packets.fetch_sub(1, Ordering::Relaxed);
                            }
                        }
                    }
                    self.bufring.push(self.bufs.as_mut_ptr(), bid);
                    recycled = true;
                } else {
                    recycled |= self.on_recv(u, res, flags, now_ns);
                }
            }
            if recycled {
                self.bufring.publish();
            }
        }
        self.shutdown();
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.efd) };
    }

    /// Cancels everything in flight and waits (up to a second) for the
    /// kernel to let go of the buffers; if it does not, the buffers are
    /// leaked rather than freed under it.
    fn shutdown(&mut self) {
        self.slots.clear();
        self.push(opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(SEND | 0xffff_0000));
        let ts = Timespec::new().nsec(100_000_000);
        let args = SubmitArgs::new().timespec(&ts);
        let deadline = Instant::now() + std::time::Duration::from_secs(1);
        while self.inflight > 0 && Instant::now() < deadline {
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let done: Vec<(u64, u32)> = self.ring.completion().map(|c| (c.user_data(), c.flags())).collect();
            for (u, flags) in done {
                let send = u & SEND != 0 && u != SEND | 0xffff_0000;
                let recv_end = u != WAKE && u & SEND == 0 && !cqueue::more(flags);
                if send || recv_end {
                    self.inflight -= 1.min(self.inflight);
                }
            }
        }
        if self.inflight > 0 {
            tracing::warn!(inflight = self.inflight, "io_uring operations outlived shutdown; leaking their buffers");
            std::mem::forget(std::mem::take(&mut self.bufs));
            std::mem::forget(std::mem::replace(&mut self.ctx, Box::new([])));
            self.bufring.leak = true;
        }
    }

    /// One receive completion; true when a buffer went back to the ring.
    fn on_recv(&mut self, u: u64, res: i32, flags: u32, now_ns: u64) -> bool {
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
                self.bufring.push(self.bufs.as_mut_ptr(), b);
                return true;
            }
            return false;
        }
        if !more {
            // Multishot ended (ENOBUFS, error or cancel): re-arm.
            self.arm_recv(idx);
        }
        let Some(bid) = bid else { return false };
        if res < 0 {
            self.bufring.push(self.bufs.as_mut_ptr(), bid);
            return true;
        }
        let off = usize::from(bid) * BUF;
        let len = (res as usize).min(BUF);
        // SAFETY: the kernel wrote `len` bytes of this buffer, which is not
        // in the ring until we push it back.
        let buf = unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().add(off), len) };
        let Ok(msg) = RecvMsgOut::parse(buf, &self.recv_hdr) else {
            self.bufring.push(self.bufs.as_mut_ptr(), bid);
            return true;
        };
        let payload = msg.payload_data();
        let pay_off = payload.as_ptr() as usize - self.bufs.as_ptr() as usize;
        let pay_len = payload.len();
        let truncated = msg.is_payload_truncated();
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let name = msg.name_data();
        let n = name.len().min(size_of::<libc::sockaddr_storage>());
        // SAFETY: copying at most sizeof(sockaddr_storage) bytes into it.
        unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), (&mut ss as *mut libc::sockaddr_storage).cast(), n) };
        let src = from_storage(&ss);
        let out_idx = idx ^ 2;
        let (out_fd, out_dst, out_local) = match self.slots.get(out_idx) {
            Some(Some(o)) => (o.slot.sock.as_raw_fd(), o.slot.latched.or(o.slot.peer), Some(o.slot.local.ip())),
            _ => (-1, None, None),
        };
        let Some(Some(s)) = self.slots.get_mut(idx) else { return false };
        let slot = &mut s.slot;
        let st_ok = match src {
            Some(src) if !truncated => {
                // SAFETY: as above, the payload bytes are ours.
                let pkt = unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().add(pay_off), pay_len) };
                ingress(slot, src, pkt, now_ns)
            }
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
                self.bufring.push(self.bufs.as_mut_ptr(), bid);
                return true;
            }
        };
        st.packets.fetch_add(1, Ordering::Relaxed);
        st.bytes.fetch_add(pay_len as u64, Ordering::Relaxed);
        let gen = s.gen;
        let c = &mut self.ctx[usize::from(bid)];
        let dlen = to_storage(dst, &mut c.dst);
        // SAFETY: pointer into our buffer area.
        c.iov = libc::iovec { iov_base: unsafe { self.bufs.as_mut_ptr().add(pay_off) }.cast(), iov_len: pay_len };
        c.hdr.msg_name = (&mut c.dst as *mut libc::sockaddr_storage).cast();
        c.hdr.msg_namelen = dlen;
        c.hdr.msg_iov = &mut c.iov;
        c.hdr.msg_iovlen = 1;
        c.slot = idx as u32;
        c.gen = gen;
        let e = opcode::SendMsg::new(types::Fd(out_fd), &c.hdr).build().user_data(SEND | u64::from(bid));
        self.push(e);
        self.inflight += 1;
        false
    }
}
