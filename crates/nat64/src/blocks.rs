//! NAT64 (NAPT) per-host TCP port blocks (RFC 7422 bulk port allocation),
//! for a fast path that creates a host's TCP sessions itself.
//!
//! With a fast path whose hook offers block memory
//! ([`crate::FastHook::port_blocks`]) a new dynamic TCP BIB entry of host
//! X (source port 1024 or above, no held IPv4 SYN to keep a port for)
//! takes its port from one of X's blocks: `size` consecutive, aligned
//! pool4 TCP ports on X's paired address (RFC 6146 §3.5.1.1, RFC 4787
//! REQ-2 "paired" pooling), claimed in the pool when granted, at most
//! [`MAX_BLOCKS_PER_HOST`] per host. Beyond that (no block to spare, a low
//! port) the pool's RFC 6056 allocation is used as without blocks. The
//! fast path takes ports from the same blocks (the memory's bitmap, taken
//! and given back with atomics by both sides) for the SYNs it creates
//! sessions for, and hands each over ([`crate::Nat64::adopt`]).
//!
//! What differs from the pool's own allocation: a block port keeps the
//! range class (blocks lie above 1023 when the range allows, and low
//! source ports never take one) but neither the port's parity nor the
//! port itself (RFC 4787 REQ-4 parity is a UDP recommendation; blocks are
//! TCP only); the randomisation of RFC 6056 is within the block only; a
//! block is held while any of its ports is.
//!
//! A host whose blocks hold no port any more loses them: unlisted for the
//! fast path at once, given back to the pool at the next expiry turn
//! unless the fast path took a port meanwhile (it may have read the list
//! before), which gives the block back to the host.

use crate::config::{Mode, Protocol};
use crate::state::{lock, T4, T6};
use crate::Nat64;
use core::net::{Ipv4Addr, Ipv6Addr};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Blocks a host holds at most (the fast path's per-host list).
pub const MAX_BLOCKS_PER_HOST: usize = 8;

/// Largest block, in ports (a 256-bit bitmap per block).
pub const MAX_BLOCK_PORTS: u16 = 256;

/// The memory of the port blocks, shared with a fast path: per slot a
/// block (address, first port, size) and a bitmap of its ports in use,
/// and per host the list of its slots.
pub trait PortBlockMem: Send + Sync + std::fmt::Debug {
    /// Ports per block (1..=[`MAX_BLOCK_PORTS`]); 0: no blocks.
    fn size(&self) -> u16;
    /// Slots in the memory.
    fn slots(&self) -> u32;
    /// Write block `slot` (`size` ports from `base` on `addr`, none in use).
    /// Only for a slot no host's list holds.
    fn write(&self, slot: u32, addr: Ipv4Addr, base: u16, size: u16);
    /// Take a free port index of block `slot` (the first free at or after
    /// `hint` mod size): set its bit. `None`: none free.
    fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16>;
    /// Give index `i` of block `slot` back (clear its bit).
    fn give(&self, slot: u32, i: u16);
    /// Ports of block `slot` in use.
    fn in_use(&self, slot: u32) -> u32;
    /// Host `x`'s blocks are `slots` from now on (none: it has none).
    fn list(&self, x: Ipv6Addr, slots: &[u32]);
}

/// One block on the heap: its bitmap and (address, first port).
type HeapBlock = ([AtomicU64; 4], Mutex<(Ipv4Addr, u16)>);

/// Block memory on the heap, for a translator without a fast path that
/// shares it (tests, and as the model of the contract).
#[derive(Debug)]
pub struct HeapBlocks {
    size: u16,
    blocks: Vec<HeapBlock>,
    lists: Mutex<crate::Map<Ipv6Addr, Vec<u32>>>,
}

impl HeapBlocks {
    /// `slots` blocks of `size` ports.
    pub fn new(size: u16, slots: u32) -> HeapBlocks {
        HeapBlocks {
            size: size.min(MAX_BLOCK_PORTS),
            blocks: (0..slots).map(|_| (Default::default(), Mutex::new((Ipv4Addr::UNSPECIFIED, 0)))).collect(),
            lists: Mutex::default(),
        }
    }

    /// The slots listed for `x`.
    pub fn listed(&self, x: &Ipv6Addr) -> Vec<u32> {
        lock(&self.lists).get(x).cloned().unwrap_or_default()
    }

    /// (address, first port) of block `slot`.
    pub fn block(&self, slot: u32) -> Option<(Ipv4Addr, u16)> {
        self.blocks.get(slot as usize).map(|b| *lock(&b.1))
    }
}

impl PortBlockMem for HeapBlocks {
    fn size(&self) -> u16 {
        self.size
    }
    fn slots(&self) -> u32 {
        self.blocks.len() as u32
    }
    fn write(&self, slot: u32, addr: Ipv4Addr, base: u16, _size: u16) {
        if let Some(b) = self.blocks.get(slot as usize) {
            b.0.iter().for_each(|w| w.store(0, Ordering::Relaxed));
            *lock(&b.1) = (addr, base);
        }
    }
    fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        let b = self.blocks.get(slot as usize)?;
        let size = u32::from(size.min(MAX_BLOCK_PORTS));
        let h = hint % size.max(1);
        (0..size).map(|k| (h + k) % size).find_map(|i| {
            let bit = 1u64 << (i % 64);
            (b.0[i as usize / 64].fetch_or(bit, Ordering::AcqRel) & bit == 0).then_some(i as u16)
        })
    }
    fn give(&self, slot: u32, i: u16) {
        if let (Some(b), true) = (self.blocks.get(slot as usize), i < MAX_BLOCK_PORTS) {
            b.0[usize::from(i / 64)].fetch_and(!(1u64 << (i % 64)), Ordering::AcqRel);
        }
    }
    fn in_use(&self, slot: u32) -> u32 {
        self.blocks.get(slot as usize).map_or(0, |b| b.0.iter().map(|w| w.load(Ordering::Acquire).count_ones()).sum())
    }
    fn list(&self, x: Ipv6Addr, slots: &[u32]) {
        let mut l = lock(&self.lists);
        if slots.is_empty() {
            l.remove(&x);
        } else {
            l.insert(x, slots.to_vec());
        }
    }
}

/// One block a host holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    slot: u32,
    addr: Ipv4Addr,
    base: u16,
}

/// The blocks granted, and the memory they live in.
#[derive(Debug, Default)]
pub(crate) struct Table {
    mem: Option<Arc<dyn PortBlockMem>>,
    size: u16,
    by_host: crate::Map<Ipv6Addr, Vec<Block>>,
    /// (address, first port) → host.
    by_base: crate::Map<(Ipv4Addr, u16), Ipv6Addr>,
    free: Vec<u32>,
    next_slot: u32,
    /// Blocks of hosts that hold no port in them, unlisted since the last
    /// expiry turn (`retired`) and before it (`retired_before`, freed now).
    retired: Vec<(Ipv6Addr, Block)>,
    retired_before: Vec<(Ipv6Addr, Block)>,
    granted: u64,
    returned: u64,
    conflicts: u64,
}

/// What [`Nat64::port_blocks`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BlockStats {
    /// Ports per block (0: no blocks).
    pub size: u16,
    /// Blocks held now (by hosts, or retired and not yet given back).
    pub held: usize,
    /// Blocks granted so far.
    pub granted: u64,
    /// Blocks given back to the pool so far.
    pub returned: u64,
    /// Sessions a fast path created whose host's port had another mapping
    /// here first (that one stayed, the block port went back).
    pub conflicts: u64,
}

impl Table {
    fn find(&self, x: &Ipv6Addr, t: T4) -> Option<Block> {
        let base = t.port - t.port % self.size.max(1);
        self.by_host.get(x)?.iter().find(|b| b.addr == t.addr && b.base == base).copied()
    }

    fn list(&self, x: Ipv6Addr) {
        if let Some(mem) = &self.mem {
            let slots: Vec<u32> = self.by_host.get(&x).map(|v| v.iter().map(|b| b.slot).collect()).unwrap_or_default();
            mem.list(x, &slots);
        }
    }

    /// A retired block of `x` holding `t` goes back to `x`.
    fn unretire(&mut self, x: &Ipv6Addr, t: T4) -> Option<Block> {
        let base = t.port - t.port % self.size.max(1);
        let hit = |list: &mut Vec<(Ipv6Addr, Block)>| {
            let i = list.iter().position(|(h, b)| h == x && b.addr == t.addr && b.base == base)?;
            Some(list.swap_remove(i).1)
        };
        let b = hit(&mut self.retired).or_else(|| hit(&mut self.retired_before))?;
        self.by_host.entry(*x).or_default().push(b);
        self.list(*x);
        Some(b)
    }
}

impl Nat64 {
    /// The block memory in force: the hook's, the first time one is
    /// offered (the blocks granted live in it).
    fn block_table(&self) -> Option<std::sync::MutexGuard<'_, Table>> {
        if self.cfg.mode != Mode::Nat64 {
            return None;
        }
        let mut t = lock(&self.blocks);
        if t.mem.is_none() {
            let mem = self.fast_hook()?.port_blocks()?;
            t.size = mem.size().min(MAX_BLOCK_PORTS);
            t.mem = Some(mem);
        }
        (t.size > 0).then_some(t)
    }

    /// Whether new TCP BIB entries take block ports.
    pub(crate) fn blocks_on(&self) -> bool {
        self.block_table().is_some()
    }

    /// A port for a new dynamic TCP BIB entry of `x` from x's blocks
    /// (granting one when they are full), or None (no blocks, a low port,
    /// no block to spare: the caller uses the pool).
    pub(crate) fn block_alloc(&self, x: &T6, y: Ipv4Addr) -> Option<T4> {
        if x.port < 1024 {
            return None;
        }
        let mut t = self.block_table()?;
        let mem = t.mem.clone()?;
        let size = t.size;
        let hint = (u32::from(x.port) ^ u32::from(y).rotate_left(7)).wrapping_mul(2_654_435_761);
        if let Some(v) = t.by_host.get(&x.addr) {
            for b in v {
                if let Some(i) = mem.take(b.slot, size, hint) {
                    return Some(T4 { addr: b.addr, port: b.base + i });
                }
            }
        }
        if t.by_host.get(&x.addr).map_or(0, Vec::len) >= MAX_BLOCKS_PER_HOST {
            return None;
        }
        let b = self.block_grant(&x.addr, &mut t, &*mem)?;
        let i = mem.take(b.slot, size, hint)?;
        t.by_base.insert((b.addr, b.base), x.addr);
        t.by_host.entry(x.addr).or_default().push(b);
        t.list(x.addr);
        Some(T4 { addr: b.addr, port: b.base + i })
    }

    /// Claim a block for `x` on its paired address: the first aligned run
    /// of `size` free TCP ports (above 1023 when the range allows) from a
    /// start hashed from `x`.
    fn block_grant(&self, x: &Ipv6Addr, t: &mut Table, mem: &dyn PortBlockMem) -> Option<Block> {
        let size = u32::from(t.size);
        let addr = self.pool.paired(Protocol::Tcp, x)?;
        let (lo, hi) = self.pool.ports(Protocol::Tcp, addr)?;
        let lo = if hi >= 1024 { lo.max(1024) } else { lo };
        let first = u32::from(lo).div_ceil(size);
        let last = (u32::from(hi) + 1) / size;
        if last <= first {
            return None;
        }
        let slot = match t.free.last() {
            Some(s) => *s,
            None if t.next_slot < mem.slots() => t.next_slot,
            None => return None,
        };
        let n = last - first;
        let start = (self.keys.hash_one(("block", x)) % u64::from(n)) as u32;
        for k in 0..n.min(4096) {
            let base = ((first + (start + k) % n) * size) as u16;
            let mut got = 0u32;
            while got < size && self.pool.claim(Protocol::Tcp, addr, base + got as u16) {
                got += 1;
            }
            if got == size {
                if t.free.pop().is_none() {
                    t.next_slot += 1;
                }
                mem.write(slot, addr, base, size as u16);
                t.granted += 1;
                return Some(Block { slot, addr, base });
            }
            for i in 0..got {
                self.pool.release(Protocol::Tcp, addr, base + i as u16);
            }
        }
        None
    }

    /// Give TCP port `t` back when it is a block port (true), retiring its
    /// host's blocks when they hold no port any more.
    pub(crate) fn block_release(&self, t: T4) -> bool {
        let Some(mut tb) = self.block_table() else { return false };
        let size = tb.size;
        let base = t.port - t.port % size;
        let Some(x) = tb.by_base.get(&(t.addr, base)).copied() else { return false };
        let Some(mem) = tb.mem.clone() else { return false };
        let Some(v) = tb.by_host.get(&x) else {
            if let Some((_, b)) =
                tb.retired.iter().chain(&tb.retired_before).find(|(_, b)| b.addr == t.addr && b.base == base)
            {
                mem.give(b.slot, t.port - base);
            }
            return true;
        };
        let Some(b) = v.iter().find(|b| b.addr == t.addr && b.base == base).copied() else { return true };
        mem.give(b.slot, t.port - base);
        if v.iter().all(|b| mem.in_use(b.slot) == 0) {
            let v = tb.by_host.remove(&x).unwrap_or_default();
            mem.list(x, &[]);
            tb.retired.extend(v.into_iter().map(|b| (x, b)));
        }
        true
    }

    /// Whether TCP port `t`, which a fast path took, is in one of `x`'s
    /// blocks (a retired one goes back to `x`).
    pub(crate) fn block_owns(&self, x: &Ipv6Addr, t: T4) -> bool {
        let Some(mut tb) = self.block_table() else { return false };
        tb.find(x, t).is_some() || tb.unretire(x, t).is_some()
    }

    pub(crate) fn block_conflict(&self) {
        if let Some(mut t) = self.block_table() {
            t.conflicts += 1;
        }
    }

    /// Give back the blocks retired before the last turn that are still
    /// unused (called by the expiry timer).
    pub(crate) fn blocks_maintain(&self) {
        let Some(mut tb) = self.block_table() else { return };
        let Some(mem) = tb.mem.clone() else { return };
        let now = std::mem::take(&mut tb.retired);
        for (x, b) in std::mem::replace(&mut tb.retired_before, now) {
            if mem.in_use(b.slot) == 0 {
                for i in 0..tb.size {
                    self.pool.release(Protocol::Tcp, b.addr, b.base + i);
                }
                tb.by_base.remove(&(b.addr, b.base));
                tb.free.push(b.slot);
                tb.returned += 1;
            } else {
                tb.by_host.entry(x).or_default().push(b);
                tb.list(x);
            }
        }
    }

    /// Unlist every host's blocks for the fast path (a reload: the next
    /// translator grants its own; the ports in use are carried as plain
    /// pool ports).
    pub(crate) fn blocks_unlist(&self) {
        let Some(tb) = self.block_table() else { return };
        if let Some(mem) = &tb.mem {
            for x in tb.by_host.keys() {
                mem.list(*x, &[]);
            }
        }
    }

    /// The port blocks: size, held, granted, given back.
    pub fn port_blocks(&self) -> BlockStats {
        let Some(t) = self.block_table() else { return BlockStats::default() };
        let held = t.by_host.values().map(Vec::len).sum::<usize>() + t.retired.len() + t.retired_before.len();
        BlockStats { size: t.size, held, granted: t.granted, returned: t.returned, conflicts: t.conflicts }
    }

    /// The blocks host `x` holds: (pool address, first port, ports in use).
    pub fn blocks_of(&self, x: &Ipv6Addr) -> Vec<(Ipv4Addr, u16, u32)> {
        let Some(t) = self.block_table() else { return Vec::new() };
        let Some(mem) = &t.mem else { return Vec::new() };
        t.by_host.get(x).map_or_else(Vec::new, |v| v.iter().map(|b| (b.addr, b.base, mem.in_use(b.slot))).collect())
    }
}
