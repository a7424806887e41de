//! Port blocks (`bpf/portblock.h`) as the slow path holds them: the
//! memory of a `BPF_F_MMAPABLE` array of `struct pb_block` it shares with
//! a program, written, taken from and given back to with the same atomics
//! as the program's. Used by the DS-Lite AFTR (`ds_blocks`) and NAT64
//! (`n64_blocks`).

use crate::Error;
use aya::maps::Map;
use core::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};

/// `PB_MAX_PORTS` (`bpf/portblock.h`): the largest port block.
pub const PB_MAX_PORTS: u16 = 256;
/// `PB_WORDS`.
pub(crate) const PB_WORDS: usize = 4;
/// `sizeof(struct pb_block)`: the array element (a multiple of 8, so
/// the mmapped array has no padding between elements).
pub(crate) const PB_BLOCK_SIZE: usize = 8 + 8 * PB_WORDS;
/// `PB_RETRIES`.
pub(crate) const PB_RETRIES: usize = 4;
const _: () = assert!(PB_BLOCK_SIZE == 40);

/// The memory of a `BPF_F_MMAPABLE` array, shared with the program: the
/// one place of this module that needs `unsafe`.
#[allow(unsafe_code)]
mod mmap {
    use crate::Error;
    use aya::maps::Map;
    use std::os::fd::{AsFd as _, AsRawFd as _};
    use std::sync::atomic::{AtomicU32, AtomicU64};

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
            let fd = d.fd().as_fd().as_raw_fd();
            let len = bytes.max(1);
            // SAFETY: a fresh shared mapping of the map's fd; checked below.
            let ptr = unsafe {
                libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            };
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

        /// The 4-byte word at byte offset `off` (a multiple of 4, inside).
        pub(crate) fn word32(&self, off: usize) -> &AtomicU32 {
            assert!(off.is_multiple_of(4) && off + 4 <= self.len, "mmap word {off} outside {}", self.len);
            // SAFETY: as `word`.
            unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
        }
    }

    impl Drop for Mmap {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `of`, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}
pub(crate) use mmap::Mmap;

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
        self.blocks.word(slot as usize * PB_BLOCK_SIZE + 8 + 8 * w)
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
        self.blocks.word32(off).store(u32::from(addr).to_be(), Ordering::Relaxed);
        let bs = u32::from(base) | (u32::from(size.min(PB_MAX_PORTS)) << 16);
        self.blocks.word32(off + 4).store(bs, Ordering::Release);
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
