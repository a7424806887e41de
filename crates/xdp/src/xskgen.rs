//! The XDP tester's AF_XDP generator (`crates/bench`'s `--tester afxdp`,
//! and `--tester xdp` where the kernel refuses `BPF_PROG_RUN` with live
//! frames, [`crate::tester::live_frames`]): the frames `xdp_tgen` would
//! send, stamped in userspace by [`Stamper`] and sent from an AF_XDP
//! [`TxSocket`], so that the XDP receiver (`xdp_trecv`) counts them as it
//! counts the live-frames generator's: the same flows in order, sequence
//! numbers, CLOCK_MONOTONIC timestamps, flow index, magic, RTP header and
//! UDP checksum.
//!
//! The UMEM is filled once with the trial's first template frame; a frame
//! slot is then only rewritten where frames differ (the flow's header
//! bytes and the per-frame fields) and reused once the kernel completes
//! it, so nothing is allocated per frame or per call on this side. The
//! frames of one [`Generator::send`] call share one timestamp, taken just
//! before they are written (a frame's latency includes its wait in the
//! batch, as a live-frames batch's does).

use crate::sys::monotonic_ns;
use crate::tester::Stamper;
use crate::xsk::{TxConfig, TxSocket};
use crate::Error;

/// The largest frame the generator sends: one UMEM chunk (aligned mode,
/// no multi-buffer frames).
pub const MAX_FRAME: usize = 4096;

/// An AF_XDP generator on one interface.
#[derive(Debug)]
pub struct Generator {
    sock: TxSocket,
    stamper: Stamper,
    /// The next frame's sequence number (= frames generated).
    seq: u64,
    len: u32,
}

impl Generator {
    /// A generator on interface `ifindex` (of the calling thread's
    /// namespace, queue 0), its UMEM filled with `frame0` (the trial's
    /// first template frame), sending frames as `stamper` stamps them from
    /// sequence number 0.
    pub fn open(ifindex: u32, frame0: &[u8], stamper: Stamper) -> Result<Generator, Error> {
        Generator::open_with(TxConfig::new(ifindex), frame0, stamper)
    }

    /// [`Generator::open`] with the socket's sizes given (`cfg.frame_size`
    /// is raised to hold the frame).
    pub fn open_with(mut cfg: TxConfig, frame0: &[u8], stamper: Stamper) -> Result<Generator, Error> {
        let len = frame0.len();
        if len != stamper.len() {
            return Err(Error::Config(format!("a {len}-byte frame for a stamper of {}-byte frames", stamper.len())));
        }
        if len > MAX_FRAME {
            return Err(Error::Config(format!(
                "a {len}-byte frame: the AF_XDP generator sends frames of at most {MAX_FRAME} bytes"
            )));
        }
        if len > cfg.frame_size as usize {
            cfg.frame_size = MAX_FRAME as u32;
        }
        let mut sock = TxSocket::open(cfg)?;
        sock.fill(frame0)?;
        Ok(Generator { sock, stamper, seq: 0, len: len as u32 })
    }

    /// Starts again from sequence number 0 with `stamper`'s settings (the
    /// same frame length).
    pub fn restart(&mut self, stamper: Stamper) -> Result<(), Error> {
        if stamper.len() != self.len as usize {
            return Err(Error::Config(format!(
                "a stamper of {}-byte frames for a generator of {}-byte frames",
                stamper.len(),
                self.len
            )));
        }
        self.stamper = stamper;
        self.seq = 0;
        Ok(())
    }

    /// Stamps up to `n` frames (the next sequence numbers, all with the
    /// time of this call), queues them and wakes the kernel. Returns how
    /// many were queued: fewer than `n` while the TX ring or the frame
    /// slots are full (the kernel has not caught up; call again).
    pub fn send(&mut self, n: u32) -> Result<u32, Error> {
        // Sequence numbers are 32 bits (the receiver's).
        let n = u64::from(n).min((1u64 << 32).saturating_sub(self.seq)) as u32;
        let (st, seq0, ts) = (&self.stamper, self.seq, monotonic_ns());
        let k = self.sock.queue(n, self.len, |i, f| {
            st.stamp(f, (seq0 + u64::from(i)) as u32, ts);
        })?;
        self.seq += u64::from(k);
        self.sock.kick()?;
        Ok(k)
    }

    /// Wakes the kernel again; returns the frames still waiting in the TX ring.
    pub fn kick(&mut self) -> Result<u32, Error> {
        self.sock.kick()
    }

    /// Wakes the kernel until the TX ring is empty or CLOCK_MONOTONIC
    /// passes `deadline_ns`; returns the frames left in the ring.
    pub fn flush(&mut self, deadline_ns: u64) -> Result<u32, Error> {
        loop {
            let left = self.sock.kick()?;
            if left == 0 || monotonic_ns() > deadline_ns {
                return Ok(left);
            }
            std::thread::yield_now();
        }
    }

    /// The length of the frames it sends.
    pub fn frame_len(&self) -> usize {
        self.len as usize
    }

    /// Frames generated (stamped and queued) since the start (or restart).
    pub fn generated(&self) -> u64 {
        self.seq
    }

    /// Frames the kernel has taken from the TX ring since the generator
    /// was opened (sent, or dropped by the device as a full queue would).
    pub fn sent(&mut self) -> u64 {
        self.sock.sent()
    }

    /// The socket (its mode, budget and counters).
    pub fn socket(&self) -> &TxSocket {
        &self.sock
    }
}
