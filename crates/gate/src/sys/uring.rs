//! Batched TUN I/O with io_uring: a worker keeps `reads` reads posted on
//! its queue and hands its writes to the ring, so one `io_uring_enter(2)`
//! both submits a batch of writes and collects a batch of packets, instead
//! of one `read(2)`/`write(2)` pair per packet.
//!
//! Buffers are allocated once. A buffer is never touched while the kernel
//! owns it: a read buffer only between its completion and its re-posting,
//! a write slot only while it is on the free list. On drop the buffers are
//! leaked rather than freed, because the kernel may still own them while
//! the ring is torn down.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{opcode, squeue, types, IoUring};

use super::tun::TunQueue;

/// `user_data` tag of writes (reads carry their buffer index).
const WRITE: u64 = 1 << 32;
/// `user_data` of the cancel request at shutdown.
const CANCEL: u64 = 1 << 33;

/// One queue's ring.
pub struct TunRing {
    ring: IoUring,
    fd: RawFd,
    rbufs: Vec<Box<[u8]>>,
    wbufs: Vec<Box<[u8]>>,
    wlen: Vec<u32>,
    free: Vec<u32>,
    done: Vec<(u64, i32)>,
    /// Reads and writes posted and not completed.
    pending: usize,
}

impl std::fmt::Debug for TunRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunRing").field("fd", &self.fd).field("reads", &self.rbufs.len()).finish()
    }
}

/// A finished operation.
#[derive(Debug)]
pub enum Done {
    /// Read buffer `i` holds a packet of this length (or the error).
    Read(usize, io::Result<usize>),
    /// A write of `len` bytes finished (or failed); `first` is its first byte.
    Write { len: usize, first: u8, err: Option<i32> },
}

impl TunRing {
    /// A ring over `queue` (which must be in blocking mode) with `reads`
    /// reads of `buf_len` bytes posted and `writes` write slots of
    /// `slot_len` bytes.
    pub fn new(queue: &TunQueue, reads: usize, buf_len: usize, writes: usize, slot_len: usize) -> io::Result<TunRing> {
        let entries = (reads + writes).next_power_of_two().max(8) as u32;
        // Completions are only ever reaped by this thread, inside
        // io_uring_enter: defer the kernel's completion work to then
        // instead of interrupting the worker for every packet (Linux 6.1+;
        // plain setup otherwise).
        let ring = match IoUring::builder()
            .setup_cqsize(entries * 2)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
        {
            Ok(r) => r,
            Err(_) => IoUring::builder().setup_cqsize(entries * 2).build(entries)?,
        };
        let mut r = TunRing {
            ring,
            fd: queue.as_raw_fd(),
            rbufs: (0..reads).map(|_| vec![0u8; buf_len].into_boxed_slice()).collect(),
            wbufs: (0..writes).map(|_| vec![0u8; slot_len].into_boxed_slice()).collect(),
            wlen: vec![0; writes],
            free: (0..writes as u32).rev().collect(),
            done: Vec::with_capacity(entries as usize * 2),
            pending: 0,
        };
        for i in 0..reads {
            r.arm_read(i)?;
        }
        Ok(r)
    }

    fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every entry points into a buffer this struct owns and
            // does not touch or free until the entry's completion (see the
            // module documentation).
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Cancel every posted operation and wait (up to a second) until the
    /// kernel has let go of them, so the queue's file is closed as soon as
    /// the ring and the queue are dropped.
    pub fn cancel_all(&mut self) {
        let e = opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(CANCEL);
        if self.push(&e).is_err() {
            return;
        }
        for _ in 0..10 {
            if self.pending == 0 || self.wait(100).is_err() {
                return;
            }
            for k in 0..self.done.len() {
                if self.done[k].0 != CANCEL {
                    let _ = self.completion(k);
                }
            }
        }
    }

    fn arm_read(&mut self, i: usize) -> io::Result<()> {
        let b = &mut self.rbufs[i];
        let e = opcode::Read::new(types::Fd(self.fd), b.as_mut_ptr(), b.len() as u32)
            .offset(u64::MAX)
            .build()
            .user_data(i as u64);
        self.push(&e)?;
        self.pending += 1;
        Ok(())
    }

    /// Submit what is queued and wait up to `timeout_ms` for at least one
    /// completion; then collect every completion available.
    pub fn wait(&mut self, timeout_ms: u32) -> io::Result<()> {
        let ts = types::Timespec::new().sec(u64::from(timeout_ms / 1000)).nsec((timeout_ms % 1000) * 1_000_000);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        self.done.clear();
        for c in self.ring.completion() {
            self.done.push((c.user_data(), c.result()));
        }
        Ok(())
    }

    /// Number of completions collected by the last [`wait`](Self::wait).
    pub fn completions(&self) -> usize {
        self.done.len()
    }

    /// The `k`-th completion of the last wait. Write slots are released here.
    pub fn completion(&mut self, k: usize) -> Done {
        let (ud, res) = self.done[k];
        if ud != CANCEL {
            self.pending = self.pending.saturating_sub(1);
        }
        if ud == CANCEL {
            Done::Read(usize::MAX, Err(io::Error::from_raw_os_error(libc::ECANCELED)))
        } else if ud & WRITE != 0 {
            let slot = (ud & 0xffff_ffff) as usize;
            let len = self.wlen[slot] as usize;
            let first = self.wbufs[slot][0];
            self.free.push(slot as u32);
            Done::Write { len, first, err: (res < 0).then_some(-res) }
        } else {
            let r = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
            Done::Read(ud as usize, r)
        }
    }

    /// Read buffer `i` (valid after its `Done::Read` and before [`rearm`](Self::rearm)).
    pub fn read_buf(&mut self, i: usize) -> Box<[u8]> {
        std::mem::take(&mut self.rbufs[i])
    }

    /// Give buffer `i` back and post a new read into it.
    pub fn rearm(&mut self, i: usize, buf: Box<[u8]>) -> io::Result<()> {
        self.rbufs[i] = buf;
        self.arm_read(i)
    }

    /// Queue a copy of `pkt` for writing. `Ok(false)` when no slot is free
    /// or the packet does not fit one (the caller writes it directly).
    pub fn write(&mut self, pkt: &[u8]) -> io::Result<bool> {
        let Some(&slot) = self.free.last() else { return Ok(false) };
        let s = slot as usize;
        if pkt.len() > self.wbufs[s].len() || pkt.is_empty() {
            return Ok(false);
        }
        self.free.pop();
        self.wbufs[s][..pkt.len()].copy_from_slice(pkt);
        self.wlen[s] = pkt.len() as u32;
        let b = &self.wbufs[s];
        let e = opcode::Write::new(types::Fd(self.fd), b.as_ptr(), pkt.len() as u32)
            .offset(u64::MAX)
            .build()
            .user_data(WRITE | u64::from(slot));
        self.push(&e)?;
        self.pending += 1;
        Ok(true)
    }

    /// Submit queued entries without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        self.ring.submit().map(|_| ())
    }
}

impl Drop for TunRing {
    fn drop(&mut self) {
        // The kernel may still own these while the ring shuts down.
        std::mem::forget(std::mem::take(&mut self.rbufs));
        std::mem::forget(std::mem::take(&mut self.wbufs));
    }
}
