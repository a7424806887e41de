//! The io_uring memory the kernel shares with the relay: a provided-buffer
//! ring of [`NBUF`] buffers of [`BUF`] bytes, the receive header multishot
//! `RECVMSG` uses, and one send context (header, iovec, destination) per
//! buffer, so a datagram leaves from the buffer it arrived in. [`Ring`]
//! owns them with the ring itself and builds every submission that points
//! into them; the engine above it (`crate::uring`) is safe code.
//!
//! The memory must outlive every operation that can still touch it: the
//! engine cancels everything and waits before dropping a [`Ring`], and
//! calls [`Ring::leak`] when the kernel does not let go in time.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::{BufRingEntry, RecvMsgOut, SubmitArgs, Timespec};
use io_uring::{opcode, squeue, types, IoUring};

use super::{from_bytes, to_storage, zeroed};

/// Buffers in the ring (and send contexts).
pub(crate) const NBUF: u16 = 4096;
/// Bytes per buffer.
pub(crate) const BUF: usize = 2048;
/// The buffer group id of the ring.
const BGID: u16 = 7;

struct BufRing {
    base: *mut BufRingEntry,
    layout: Layout,
    tail: u16,
    /// Never free (the kernel may still use it).
    leak: bool,
}

impl BufRing {
    fn new() -> io::Result<BufRing> {
        let layout = Layout::from_size_align(usize::from(NBUF) * size_of::<BufRingEntry>(), 4096)
            .map_err(|_| io::Error::other("layout"))?;
        // SAFETY: a layout of non-zero size.
        let base = unsafe { alloc_zeroed(layout) }.cast::<BufRingEntry>();
        if base.is_null() {
            return Err(io::Error::other("out of memory"));
        }
        Ok(BufRing { base, layout, tail: 0, leak: false })
    }

    fn push(&mut self, bufs: *mut u8, bid: u16) {
        // SAFETY: base points at NBUF entries and the index is masked; the
        // address is inside the NBUF * BUF buffer area `bufs` points at.
        unsafe {
            let e = &mut *self.base.add(usize::from(self.tail & (NBUF - 1)));
            e.set_addr(bufs.add(usize::from(bid % NBUF) * BUF) as u64);
            e.set_len(BUF as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field of the first entry, shared with the kernel,
        // is a naturally aligned u16 the kernel reads atomically.
        unsafe {
            let t = BufRingEntry::tail(self.base) as *const AtomicU16;
            (*t).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.leak {
            // SAFETY: allocated with this layout in `BufRing::new`.
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

/// A received datagram, as [`Ring::received`] finds it in its buffer.
#[derive(Debug)]
pub(crate) struct Received {
    /// Where the payload is in the buffer area ([`Ring::payload`]).
    pub payload: Range<usize>,
    /// The sender.
    pub src: Option<SocketAddr>,
    /// Longer than the buffer.
    pub truncated: bool,
}

/// An io_uring with its provided buffers and send contexts.
pub(crate) struct Ring {
    // Field order: the ring goes before the memory it points at.
    ring: IoUring,
    bufring: BufRing,
    bufs: Vec<u8>,
    ctx: Box<[SendCtx]>,
    recv_hdr: Box<libc::msghdr>,
}

// SAFETY: the raw pointers inside (buffer ring, send contexts, receive
// header) point at memory this value owns; it is moved to its worker
// thread once and used only there.
unsafe impl Send for Ring {}

impl Ring {
    pub fn new() -> io::Result<Ring> {
        // Completions are reaped only when the worker enters the ring
        // (no interrupts of a busy worker); older kernels get a plain ring.
        let ring = IoUring::builder()
            .setup_cqsize(u32::from(NBUF) * 4)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(u32::from(NBUF))
            .or_else(|_| IoUring::builder().setup_cqsize(u32::from(NBUF) * 4).build(u32::from(NBUF)))?;
        let mut bufring = BufRing::new()?;
        let mut bufs = vec![0u8; usize::from(NBUF) * BUF];
        for bid in 0..NBUF {
            bufring.push(bufs.as_mut_ptr(), bid);
        }
        bufring.publish();
        // SAFETY: the ring memory lives as long as the ring (dropped after
        // it, field order of `Ring`).
        unsafe { ring.submitter().register_buf_ring_with_flags(bufring.base as u64, NBUF, BGID, 0)? };
        let mut recv_hdr: Box<libc::msghdr> = Box::new(zeroed());
        recv_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
        let ctx = (0..NBUF)
            .map(|_| SendCtx {
                hdr: zeroed(),
                iov: libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 },
                dst: zeroed(),
                slot: 0,
                gen: 0,
            })
            .collect();
        Ok(Ring { ring, bufring, bufs, ctx, recv_hdr })
    }

    fn push(&mut self, e: &squeue::Entry) {
        // SAFETY: every entry built by this type points only at memory the
        // `Ring` owns (buffers, send contexts, the receive header), which
        // outlives the operation (see the module documentation).
        while unsafe { self.ring.submission().push(e) }.is_err() {
            if let Err(err) = self.ring.submit() {
                tracing::error!(error = %err, "io_uring submit failed");
                return;
            }
        }
    }

    /// A multishot poll for input on `fd` (the worker's eventfd).
    pub fn poll(&mut self, fd: RawFd, user_data: u64) {
        self.push(&opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).multi(true).build().user_data(user_data));
    }

    /// A multishot receive on `fd` into the provided buffers.
    pub fn recv(&mut self, fd: RawFd, user_data: u64) {
        let e = opcode::RecvMsgMulti::new(types::Fd(fd), &*self.recv_hdr, BGID).build().user_data(user_data);
        self.push(&e);
    }

    /// Cancels the operation `target`.
    pub fn cancel(&mut self, target: u64, user_data: u64) {
        self.push(&opcode::AsyncCancel::new(target).build().user_data(user_data));
    }

    /// Cancels every operation in flight.
    pub fn cancel_all(&mut self, user_data: u64) {
        self.push(&opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(user_data));
    }

    /// Sends `payload` of buffer `bid` to `dst` out of `fd`, remembering
    /// (`slot`, `gen`) for [`Ring::send_ctx`]; the buffer stays out of the
    /// ring until the caller [`recycle`](Ring::recycle)s it.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        bid: u16,
        fd: RawFd,
        dst: SocketAddr,
        payload: Range<usize>,
        slot: u32,
        gen: u32,
        user_data: u64,
    ) {
        let Some(c) = self.ctx.get_mut(usize::from(bid)) else { return };
        if payload.end > self.bufs.len() || payload.start > payload.end {
            return;
        }
        let dlen = to_storage(dst, &mut c.dst);
        // A pointer, not a slice: the kernel may be writing other buffers.
        let base = self.bufs.as_mut_ptr().wrapping_add(payload.start);
        c.iov = libc::iovec { iov_base: base.cast(), iov_len: payload.len() };
        c.hdr.msg_name = (&mut c.dst as *mut libc::sockaddr_storage).cast();
        c.hdr.msg_namelen = dlen;
        c.hdr.msg_iov = &mut c.iov;
        c.hdr.msg_iovlen = 1;
        c.slot = slot;
        c.gen = gen;
        let e = opcode::SendMsg::new(types::Fd(fd), &c.hdr).build().user_data(user_data);
        self.push(&e);
    }

    /// The (`slot`, `gen`) the last send from buffer `bid` was for.
    pub fn send_ctx(&self, bid: u16) -> (u32, u32) {
        self.ctx.get(usize::from(bid)).map_or((u32::MAX, 0), |c| (c.slot, c.gen))
    }

    /// Submits what is queued and waits up to `timeout` for at least one
    /// completion.
    pub fn submit_and_wait(&mut self, timeout: std::time::Duration) -> io::Result<usize> {
        let ts = Timespec::from(timeout);
        let args = SubmitArgs::new().timespec(&ts);
        self.ring.submitter().submit_with_args(1, &args)
    }

    /// Moves every completion into `out` as (user data, result, flags).
    pub fn completions(&mut self, out: &mut Vec<(u64, i32, u32)>) {
        out.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
    }

    /// Gives buffer `bid` back to the ring (visible to the kernel after
    /// [`publish`](Ring::publish)).
    pub fn recycle(&mut self, bid: u16) {
        self.bufring.push(self.bufs.as_mut_ptr(), bid);
    }

    /// Publishes the recycled buffers to the kernel.
    pub fn publish(&self) {
        self.bufring.publish();
    }

    /// The datagram a receive of `len` bytes (its completion result) wrote
    /// into buffer `bid`, or `None` if it cannot be parsed.
    pub fn received(&self, bid: u16, len: usize) -> Option<Received> {
        let off = usize::from(bid % NBUF) * BUF;
        let buf = self.area(off..off + len.min(BUF));
        let msg = RecvMsgOut::parse(buf, &self.recv_hdr).ok()?;
        let payload = msg.payload_data();
        let start = payload.as_ptr() as usize - self.bufs.as_ptr() as usize;
        Some(Received {
            payload: start..start + payload.len(),
            src: from_bytes(msg.name_data()),
            truncated: msg.is_payload_truncated(),
        })
    }

    /// Bytes of the buffer area (a [`Received::payload`]).
    pub fn payload(&self, r: &Range<usize>) -> &[u8] {
        self.area(r.clone())
    }

    /// A range of the buffer area, without making a reference to the rest
    /// of it (which the kernel may be writing into).
    fn area(&self, r: Range<usize>) -> &[u8] {
        if r.start > r.end || r.end > self.bufs.len() {
            return &[];
        }
        // SAFETY: in bounds (checked above); these bytes belong to a
        // buffer the kernel has completed and that is not back in the
        // ring (the caller recycles it only after it is done with it).
        unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().add(r.start), r.len()) }
    }

    /// Never frees the memory (the kernel did not let go of it in time).
    pub fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut self.bufs));
        std::mem::forget(std::mem::replace(&mut self.ctx, Box::new([])));
        self.bufring.leak = true;
    }
}
