//! Port blocks (`bpf/portblock.h`) as the slow path holds them: the
//! memory of a `BPF_F_MMAPABLE` array of `struct pb_block` it shares with
//! a program, written, taken from and given back to with the same atomics
//! as the program's. Used by the DS-Lite AFTR (`ds_blocks`) and NAT64
//! (`n64_blocks`). Also the shared mappings these rest on, and
//! [`RingWatch`]: whether the ring of sessions such a program created
//! (`ds_events`, `natpt_events`) has anything to drain, without a lock.

use crate::Error;
use aya::maps::Map;
use core::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::types::PB_MAX_PORTS;
use crate::types::{PbBlock, PB_RETRIES, PB_WORDS};
use core::mem::offset_of;

/// `sizeof(struct pb_block)`: the array element (a multiple of 8, so
/// the mmapped array has no padding between elements).
const PB_BLOCK_SIZE: usize = core::mem::size_of::<PbBlock>();
const _: () = assert!(PB_BLOCK_SIZE.is_multiple_of(8) && offset_of!(PbBlock, used).is_multiple_of(8));
// `write` stores base and size with one 32-bit store.
const _: () = assert!(offset_of!(PbBlock, size) == offset_of!(PbBlock, base) + 2);

/// The memory of a `BPF_F_MMAPABLE` array, shared with the program: the
/// one place of this module that needs `unsafe`.
#[allow(unsafe_code)]
mod mmap {
    use crate::Error;
    use aya::maps::Map;
    use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
    use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

    /// A shared mapping of a `BPF_F_MMAPABLE` array's values.
    #[derive(Debug)]
    pub(crate) struct Mmap {
        ptr: *mut u8,
        len: usize,
    }

    // SAFETY: the memory is shared with the BPF program anyway; every access
    // goes through atomics (`word`, `word32`).
    unsafe impl Send for Mmap {}
    // SAFETY: as above.
    unsafe impl Sync for Mmap {}

    impl Mmap {
        /// Map the values of array `m` (`bytes` of them) read-write, shared.
        pub(crate) fn of(m: &Map, name: &'static str, bytes: usize) -> Result<Mmap, Error> {
            let Map::Array(d) = m else { return Err(Error::Bpf(format!("map {name}: not an array"))) };
            Mmap::fd(d.fd().as_fd(), name, bytes, libc::PROT_READ | libc::PROT_WRITE)
        }

        /// Map the first `bytes` of map fd `fd` shared, with `prot`.
        pub(crate) fn fd(fd: BorrowedFd<'_>, name: &'static str, bytes: usize, prot: i32) -> Result<Mmap, Error> {
            let len = bytes.max(1);
            // SAFETY: a fresh shared mapping of the map's fd; checked below.
            let ptr = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
            if ptr == libc::MAP_FAILED {
                return Err(Error::Bpf(format!("map {name}: mmap: {}", std::io::Error::last_os_error())));
            }
            Ok(Mmap { ptr: ptr.cast(), len })
        }

        /// The 8-byte word at byte offset `off` (a multiple of 8, inside).
        pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
            assert!(off.is_multiple_of(8) && off + 8 <= self.len, "mmap word {off} outside {}", self.len);
            // SAFETY: in bounds and aligned (the mapping is page-aligned); the
            // memory lives as long as self.
            unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
        }

        /// The `unsigned long` at byte offset `off` (aligned, inside).
        pub(crate) fn ulong(&self, off: usize) -> &AtomicUsize {
            let n = core::mem::size_of::<usize>();
            assert!(off.is_multiple_of(n) && off + n <= self.len, "mmap word {off} outside {}", self.len);
            // SAFETY: as `word`.
            unsafe { &*(self.ptr.add(off) as *const AtomicUsize) }
        }

        /// The 4-byte word at byte offset `off` (a multiple of 4, inside).
        pub(crate) fn word32(&self, off: usize) -> &AtomicU32 {
            assert!(off.is_multiple_of(4) && off + 4 <= self.len, "mmap word {off} outside {}", self.len);
            // SAFETY: as `word`.
            unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
        }
    }

    /// The system's page size.
    pub(crate) fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(page).ok().filter(|p| *p > 0).unwrap_or(4096)
    }

    impl Drop for Mmap {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `of`, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}
pub(crate) use mmap::Mmap;

/// Whether a BPF ring buffer holds a record not yet consumed, read without
/// a lock or a system call: its consumer and producer positions (the
/// first two pages of the ring's mapping, `consumer_pos` and
/// `producer_pos` of the kernel's `struct bpf_ringbuf`), mapped read-only
/// beside the consumer's own handle (aya's `RingBuf`, which does not
/// expose them).
#[derive(Debug)]
pub struct RingWatch {
    pos: Mmap,
    page: usize,
}

impl RingWatch {
    /// Watch ring buffer `rb` (named `name` in errors).
    pub(crate) fn of(rb: &impl std::os::fd::AsFd, name: &'static str) -> Result<RingWatch, Error> {
        let page = mmap::page_size();
        Ok(RingWatch { pos: Mmap::fd(rb.as_fd(), name, 2 * page, libc::PROT_READ)?, page })
    }

    /// Whether every record the program reserved before this call has
    /// been consumed (and handled: see below). False: there may be one to
    /// drain (or one still being written, or being drained by another
    /// thread), so the caller drains under its lock as it would without
    /// the check.
    ///
    /// Memory ordering. The kernel advances `producer_pos` past a record
    /// with a release store when the program reserves it, before the
    /// program writes and commits it; a record committed before this call
    /// (its packet, or a later one of the flow, seen by the caller since)
    /// is therefore within the `producer_pos` this Acquire load reads. A
    /// consumer advances `consumer_pos` past a record with a release store
    /// when the record's handle drops, after the drain's callback handled
    /// it (aya's `RingBufItem`). So when `consumer_pos`, read with Acquire
    /// after `producer_pos`, equals it, every record up to it was consumed
    /// and what its consumer did with it (an adoption) happens-before
    /// this return. The positions only grow (compared for equality, as
    /// aya does, so a wrap-around is harmless); a consumer that moved past
    /// the producer position read first makes them differ: the caller
    /// takes the slow way.
    pub fn is_empty(&self) -> bool {
        let producer = self.pos.ulong(self.page).load(Ordering::Acquire);
        let consumer = self.pos.ulong(0).load(Ordering::Acquire);
        producer == consumer
    }
}

/// The bits of word `w` that stand for ports of a block of `size` ports
/// (`pb_mask`).
fn pb_mask(size: u32, w: u32) -> u64 {
    let lo = w * 64;
    if size >= lo + 64 {
        !0
    } else if size <= lo {
        0
    } else {
        (1u64 << (size - lo)) - 1
    }
}

/// The 32-bit word whose first two bytes in memory are `a` and next two `b`
/// (both host order), as two adjacent `u16` fields.
fn u16_pair(a: u16, b: u16) -> u32 {
    let (a, b) = (a.to_ne_bytes(), b.to_ne_bytes());
    u32::from_ne_bytes([a[0], a[1], b[0], b[1]])
}

/// A `struct pb_block` array's memory.
#[derive(Debug)]
pub(crate) struct BlockMem {
    blocks: Mmap,
    slots: u32,
}

impl BlockMem {
    /// Map the `slots` blocks of array `m`.
    pub(crate) fn of(m: &Map, name: &'static str, slots: u32) -> Result<BlockMem, Error> {
        Ok(BlockMem { blocks: Mmap::of(m, name, slots as usize * PB_BLOCK_SIZE)?, slots })
    }
    /// Slots in the array.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    fn used(&self, slot: u32, w: usize) -> &AtomicU64 {
        self.blocks.word(slot as usize * PB_BLOCK_SIZE + offset_of!(PbBlock, used) + 8 * w)
    }

    /// Write block `slot`: `size` ports (1..=[`PB_MAX_PORTS`]) from
    /// `base` on `addr`, none in use. Only for a slot no host or B4
    /// list holds.
    pub(crate) fn write(&self, slot: u32, addr: Ipv4Addr, base: u16, size: u16) {
        if slot >= self.slots {
            return;
        }
        let off = slot as usize * PB_BLOCK_SIZE;
        for w in 0..PB_WORDS {
            self.used(slot, w).store(0, Ordering::Relaxed);
        }
        self.blocks.word32(off + offset_of!(PbBlock, addr)).store(u32::from(addr).to_be(), Ordering::Relaxed);
        // base and size in one store, as they lie in memory.
        let bs = u16_pair(base, size.min(PB_MAX_PORTS));
        self.blocks.word32(off + offset_of!(PbBlock, base)).store(bs, Ordering::Release);
    }

    /// Take a free port index of block `slot` of `size` ports, the first
    /// at or after `hint` (mod size) as `pb_take`. `None`: full (or every
    /// try lost a race with the program).
    pub(crate) fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        let size = u32::from(size);
        if slot >= self.slots || size == 0 || size > u32::from(PB_MAX_PORTS) {
            return None;
        }
        let hint = hint % size;
        let w0 = hint / 64;
        for i in 0..PB_WORDS as u32 {
            let w = (w0 + i) % PB_WORDS as u32;
            let mask = pb_mask(size, w);
            let after = if i == 0 { mask & (!0u64 << (hint % 64)) } else { 0 };
            let word = self.used(slot, w as usize);
            for _ in 0..PB_RETRIES {
                let cur = word.load(Ordering::Acquire);
                let free = if !cur & after != 0 { !cur & after } else { !cur & mask };
                if free == 0 {
                    break;
                }
                let at = free.trailing_zeros();
                let bit = 1u64 << at;
                if word.fetch_or(bit, Ordering::AcqRel) & bit == 0 {
                    return Some((w * 64 + at) as u16);
                }
            }
        }
        None
    }

    /// Mark index `i` of block `slot` in use (a mapping the program made
    /// must already have it; true when it was free).
    pub(crate) fn mark(&self, slot: u32, i: u16) -> bool {
        if slot >= self.slots || i >= PB_MAX_PORTS {
            return false;
        }
        let bit = 1u64 << (i % 64);
        self.used(slot, usize::from(i / 64)).fetch_or(bit, Ordering::AcqRel) & bit == 0
    }

    /// Give index `i` of block `slot` back (`pb_give`).
    pub(crate) fn give(&self, slot: u32, i: u16) {
        if slot < self.slots && i < PB_MAX_PORTS {
            self.used(slot, usize::from(i / 64)).fetch_and(!(1u64 << (i % 64)), Ordering::AcqRel);
        }
    }

    /// Ports of block `slot` in use.
    pub(crate) fn in_use(&self, slot: u32) -> u32 {
        if slot >= self.slots {
            return 0;
        }
        (0..PB_WORDS).map(|w| self.used(slot, w).load(Ordering::Acquire).count_ones()).sum()
    }
}
