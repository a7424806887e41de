//! The TRT relay's in-kernel copy (`bpf/trt.bpf.c`): a sockhash whose
//! stream-verdict program redirects each relayed socket's received bytes
//! to its peer socket's send side, so the relay's user space only sets a
//! pair up and tears it down.
//!
//! [`SockRelay::pair`] registers two connected TCP sockets as each
//! other's peer; from then on the kernel moves their bytes. Sockets leave
//! the sockhash by themselves when they are closed; [`SockRelay::unpair`]
//! forgets the byte counts. A pair whose redirect ever failed (its peer
//! was not in the sockhash yet or any more) is flagged "user"
//! ([`Direction::user`]): its bytes then wait in the socket's own receive
//! queue for the relay to copy.

use crate::loader::{chain, map_err};
use crate::Error;
use aya::maps::{HashMap, MapData, SockHash};
use aya::programs::SkSkb;
use aya::{Ebpf, EbpfLoader};
use std::os::fd::AsRawFd;

/// The BPF object built by build.rs from `bpf/trt.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/trt.bpf.o"));

const SOCKS: &str = "trt_socks";
const PAIRS: &str = "trt_pairs";
const VERDICT: &str = "trt_verdict";

/// One direction's state as the verdict program keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Direction {
    /// Bytes redirected to the peer so far.
    pub bytes: u64,
    /// A redirect failed: this socket's bytes stay in its own receive
    /// queue (in order) and user space must copy them.
    pub user: bool,
}

/// The loaded program and its two maps.
pub struct SockRelay {
    // Owns the program (and so its attachment to the sockhash).
    _bpf: Ebpf,
    socks: SockHash<MapData, u64>,
    // `struct trt_pair`: peer cookie, bytes, user flag.
    pairs: HashMap<MapData, u64, [u64; 3]>,
}

impl std::fmt::Debug for SockRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SockRelay").finish_non_exhaustive()
    }
}

impl SockRelay {
    /// Load the program with room for `max_pairs` relayed connections and
    /// attach it to its sockhash. Fails with [`Error::Unavailable`] where
    /// the kernel has no sockmap (or refuses the program).
    pub fn load(max_pairs: u32) -> Result<SockRelay, Error> {
        let n = max_pairs.clamp(1, u32::MAX / 2) * 2;
        let mut bpf = EbpfLoader::new()
            .map_max_entries(SOCKS, n)
            .map_max_entries(PAIRS, n)
            .load(OBJECT)
            .map_err(|e| Error::Unavailable(format!("loading the TRT sockmap object: {}", chain(&e))))?;
        let socks: SockHash<MapData, u64> = bpf
            .take_map(SOCKS)
            .ok_or_else(|| Error::Bpf(format!("map {SOCKS} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("map {SOCKS}: {e}")))?;
        let pairs: HashMap<MapData, u64, [u64; 3]> = bpf
            .take_map(PAIRS)
            .ok_or_else(|| Error::Bpf(format!("map {PAIRS} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("map {PAIRS}: {e}")))?;
        let prog: &mut SkSkb = bpf
            .program_mut(VERDICT)
            .ok_or_else(|| Error::Bpf(format!("program {VERDICT} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {VERDICT}: {e}")))?;
        prog.load().map_err(|e| Error::Unavailable(format!("loading {VERDICT}: {}", chain(&e))))?;
        prog.attach(socks.fd()).map_err(|e| Error::Unavailable(format!("attaching {VERDICT}: {}", chain(&e))))?;
        Ok(SockRelay { _bpf: bpf, socks, pairs })
    }

    /// Make `a` (cookie `ca`) and `b` (cookie `cb`) each other's peer and
    /// put both in the sockhash, `a` first. Bytes already queued on either
    /// socket are not moved until the socket's next receive event (the
    /// relay kicks it). On error nothing is left behind.
    pub fn pair(&mut self, a: &impl AsRawFd, ca: u64, b: &impl AsRawFd, cb: u64) -> Result<(), Error> {
        let r = self.try_pair(a, ca, b, cb);
        if r.is_err() {
            self.unpair(ca, cb);
        }
        r
    }

    fn try_pair(&mut self, a: &impl AsRawFd, ca: u64, b: &impl AsRawFd, cb: u64) -> Result<(), Error> {
        self.pairs.insert(ca, [cb, 0, 0], 0).map_err(|e| map_err(PAIRS, e))?;
        self.pairs.insert(cb, [ca, 0, 0], 0).map_err(|e| map_err(PAIRS, e))?;
        self.socks.insert(ca, a.as_raw_fd(), 0).map_err(|e| map_err(SOCKS, e))?;
        self.socks.insert(cb, b.as_raw_fd(), 0).map_err(|e| map_err(SOCKS, e))?;
        Ok(())
    }

    /// What the program has done for the socket with cookie `c`.
    pub fn direction(&self, c: u64) -> Option<Direction> {
        self.pairs.get(&c, 0).ok().map(|v| Direction { bytes: v[1], user: v[2] != 0 })
    }

    /// Take both sockets out of the sockhash (closing them does too) and
    /// forget the pair.
    pub fn unpair(&mut self, ca: u64, cb: u64) {
        for c in [ca, cb] {
            let _ = self.socks.remove(&c);
            let _ = self.pairs.remove(&c);
        }
    }
}
