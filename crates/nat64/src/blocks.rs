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
use crate::pool::Pool;
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

/// One block a host holds: `size` pool ports from `base` on `addr`, in
/// slot `slot` of the block memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    slot: u32,
    addr: Ipv4Addr,
    base: u16,
}

/// The book of the TCP port blocks granted to hosts (RFC 7422 bulk port
/// allocation), kept beside the [`PortBlockMem`] a fast path takes ports
/// from: which host holds which blocks (and, by (address, first port),
/// whose a port is), the slots free in the memory, the blocks retired and
/// the counts. NAT64's per-host blocks and the DS-Lite AFTR's per-B4
/// blocks (`softwire::fast::BlockPorts`) are both kept in one.
///
/// A block is granted on the host's paired pool address (RFC 6146
/// §3.5.1.1, RFC 4787 REQ-2): the first aligned run of `size` TCP ports,
/// above 1023 when the range allows, each claimed in the [`Pool`], from a
/// start the caller hashes from the host. The memory and the pool are
/// passed to each call, so that each user keeps them where it must (a
/// memory installed once a fast path is loaded, a pool shared with
/// allocation without blocks).
///
/// A host whose blocks hold no port any more loses them: unlisted for the
/// fast path at once ([`PortBlockMem::list`]), given back to the pool at
/// the next [`BlockBook::maintain`] but one unless the fast path took a
/// port meanwhile (it may have read the list before), which gives the
/// block back to the host ([`BlockBook::owns`], or `maintain` finding it
/// in use).
#[derive(Debug)]
pub struct BlockBook {
    size: u16,
    max_per_host: usize,
    by_host: crate::Map<Ipv6Addr, Vec<Block>>,
    /// (address, first port) → host.
    by_base: crate::Map<(Ipv4Addr, u16), Ipv6Addr>,
    /// Slots given back; `next_slot` and above were never used.
    free: Vec<u32>,
    next_slot: u32,
    /// Blocks of hosts that hold no port in them, unlisted since the last
    /// turn (`retired`) and before it (`retired_before`, freed at this one).
    retired: Vec<(Ipv6Addr, Block)>,
    retired_before: Vec<(Ipv6Addr, Block)>,
    granted: u64,
    returned: u64,
}

/// Where in its block a host's new mapping looks first: from its source
/// port and its peer's address (RFC 6056's randomisation within the block).
fn block_hint(port: u16, dst: Ipv4Addr) -> u32 {
    (u32::from(port) ^ u32::from(dst).rotate_left(7)).wrapping_mul(2_654_435_761)
}

impl BlockBook {
    /// A book of blocks of `size` ports (at most [`MAX_BLOCK_PORTS`]; 0:
    /// none is ever granted), at most `max_per_host` per host.
    pub fn new(size: u16, max_per_host: usize) -> BlockBook {
        BlockBook {
            size: size.min(MAX_BLOCK_PORTS),
            max_per_host,
            by_host: crate::Map::default(),
            by_base: crate::Map::default(),
            free: Vec::new(),
            next_slot: 0,
            retired: Vec::new(),
            retired_before: Vec::new(),
            granted: 0,
            returned: 0,
        }
    }

    /// Ports per block.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// The first port of the block `port` would lie in.
    fn base_of(&self, port: u16) -> u16 {
        port - port % self.size.max(1)
    }

    /// Tell the memory host `x`'s blocks as the book has them now.
    fn list<M: PortBlockMem + ?Sized>(&self, mem: &M, x: Ipv6Addr) {
        let slots: Vec<u32> = self.by_host.get(&x).map(|v| v.iter().map(|b| b.slot).collect()).unwrap_or_default();
        mem.list(x, &slots);
    }

    /// A TCP port for a new mapping of host `x` (from source port `flow.0`
    /// to `flow.1`): from x's blocks, or, when they are full, x holds
    /// fewer than `max_per_host` and `may_grant`, from a block granted now
    /// on x's paired address, searched from `start()` (a hash of x). `None`
    /// (no room, no block to spare): the caller uses the pool's own
    /// allocation.
    pub fn alloc<M: PortBlockMem + ?Sized>(
        &mut self,
        mem: &M,
        pool: &Pool,
        x: &Ipv6Addr,
        flow: (u16, Ipv4Addr),
        may_grant: bool,
        start: impl FnOnce() -> u64,
    ) -> Option<(Ipv4Addr, u16)> {
        if self.size == 0 {
            return None;
        }
        let hint = block_hint(flow.0, flow.1);
        let held = self.by_host.get(x).map_or(&[][..], Vec::as_slice);
        for b in held {
            if let Some(i) = mem.take(b.slot, self.size, hint) {
                return Some((b.addr, b.base + i));
            }
        }
        if held.len() >= self.max_per_host || !may_grant {
            return None;
        }
        let b = self.grant(mem, pool, x, start)?;
        self.by_base.insert((b.addr, b.base), *x);
        self.by_host.entry(*x).or_default().push(b);
        self.list(mem, *x);
        let i = mem.take(b.slot, self.size, hint)?;
        Some((b.addr, b.base + i))
    }

    /// Claim a block for `x` on its paired address: the first aligned run
    /// of `size` free TCP ports (above 1023 when the range allows) from a
    /// start hashed from `x`, in a free slot, written to the memory.
    fn grant<M: PortBlockMem + ?Sized>(
        &mut self,
        mem: &M,
        pool: &Pool,
        x: &Ipv6Addr,
        start: impl FnOnce() -> u64,
    ) -> Option<Block> {
        let size = u32::from(self.size);
        let addr = pool.paired(Protocol::Tcp, x)?;
        let (lo, hi) = pool.ports(Protocol::Tcp, addr)?;
        let lo = if hi >= 1024 { lo.max(1024) } else { lo };
        let first = u32::from(lo).div_ceil(size);
        let last = (u32::from(hi) + 1) / size;
        if last <= first {
            return None;
        }
        let slot = match self.free.last() {
            Some(s) => *s,
            None if self.next_slot < mem.slots() => self.next_slot,
            None => return None,
        };
        let n = last - first;
        let start = (start() % u64::from(n)) as u32;
        for k in 0..n.min(4096) {
            let base = ((first + (start + k) % n) * size) as u16;
            let mut got = 0u32;
            while got < size && pool.claim(Protocol::Tcp, addr, base + got as u16) {
                got += 1;
            }
            if got == size {
                if self.free.pop().is_none() {
                    self.next_slot += 1;
                }
                mem.write(slot, addr, base, size as u16);
                self.granted += 1;
                return Some(Block { slot, addr, base });
            }
            for i in 0..got {
                pool.release(Protocol::Tcp, addr, base + i as u16);
            }
        }
        None
    }

    /// Give TCP port (`addr`, `port`) back when it is a block port (true;
    /// false: not one, the caller gives it to the pool), retiring its
    /// host's blocks when they hold no port any more.
    pub fn release<M: PortBlockMem + ?Sized>(&mut self, mem: &M, addr: Ipv4Addr, port: u16) -> bool {
        let base = self.base_of(port);
        let Some(x) = self.by_base.get(&(addr, base)).copied() else { return false };
        let Some(v) = self.by_host.get(&x) else {
            // A retired block: its port goes back to the bitmap only.
            if let Some((_, b)) =
                self.retired.iter().chain(&self.retired_before).find(|(_, b)| b.addr == addr && b.base == base)
            {
                mem.give(b.slot, port - base);
            }
            return true;
        };
        let Some(b) = v.iter().find(|b| b.addr == addr && b.base == base).copied() else { return true };
        mem.give(b.slot, port - base);
        if v.iter().all(|b| mem.in_use(b.slot) == 0) {
            let v = self.by_host.remove(&x).unwrap_or_default();
            mem.list(x, &[]);
            self.retired.extend(v.into_iter().map(|b| (x, b)));
        }
        true
    }

    /// Whether TCP port (`addr`, `port`), which a fast path took, is in one
    /// of `x`'s blocks; a retired one goes back to `x` (listed again).
    pub fn owns<M: PortBlockMem + ?Sized>(&mut self, mem: &M, x: &Ipv6Addr, addr: Ipv4Addr, port: u16) -> bool {
        let base = self.base_of(port);
        let is = |b: &Block| b.addr == addr && b.base == base;
        if self.by_host.get(x).is_some_and(|v| v.iter().any(is)) {
            return true;
        }
        let hit = |list: &mut Vec<(Ipv6Addr, Block)>| {
            let i = list.iter().position(|(h, b)| h == x && is(b))?;
            Some(list.swap_remove(i).1)
        };
        let Some(b) = hit(&mut self.retired).or_else(|| hit(&mut self.retired_before)) else { return false };
        self.by_host.entry(*x).or_default().push(b);
        self.list(mem, *x);
        true
    }

    /// The expiry turn: give back to `pool` the blocks retired before the
    /// last turn that are still unused; a block in use again (the fast
    /// path took a port) goes back to its host.
    pub fn maintain<M: PortBlockMem + ?Sized>(&mut self, mem: &M, pool: &Pool) {
        let now = std::mem::take(&mut self.retired);
        for (x, b) in std::mem::replace(&mut self.retired_before, now) {
            if mem.in_use(b.slot) == 0 {
                for i in 0..self.size {
                    pool.release(Protocol::Tcp, b.addr, b.base + i);
                }
                self.by_base.remove(&(b.addr, b.base));
                self.free.push(b.slot);
                self.returned += 1;
            } else {
                self.by_host.entry(x).or_default().push(b);
                self.list(mem, x);
            }
        }
    }

    /// Unlist every host's blocks for the fast path (the book stays).
    pub fn unlist_all<M: PortBlockMem + ?Sized>(&self, mem: &M) {
        for x in self.by_host.keys() {
            mem.list(*x, &[]);
        }
    }

    /// (blocks held by hosts or retired and not yet given back, blocks
    /// granted so far, blocks given back so far).
    pub fn counts(&self) -> (usize, u64, u64) {
        let held = self.by_host.values().map(Vec::len).sum::<usize>() + self.retired.len() + self.retired_before.len();
        (held, self.granted, self.returned)
    }

    /// The blocks host `x` holds: (pool address, first port, ports in use).
    pub fn blocks_of<M: PortBlockMem + ?Sized>(&self, mem: &M, x: &Ipv6Addr) -> Vec<(Ipv4Addr, u16, u32)> {
        self.by_host.get(x).map_or_else(Vec::new, |v| v.iter().map(|b| (b.addr, b.base, mem.in_use(b.slot))).collect())
    }

    /// Ports of `x`'s blocks not in use.
    pub fn free_ports<M: PortBlockMem + ?Sized>(&self, mem: &M, x: &Ipv6Addr) -> u32 {
        let size = u32::from(self.size);
        self.by_host.get(x).map_or(0, |v| v.iter().map(|b| size.saturating_sub(mem.in_use(b.slot))).sum())
    }
}

/// NAT64's blocks: the memory in force (the hook's, the first time one is
/// offered: the blocks granted live in it) with its book, and the
/// conflicts counted.
#[derive(Debug, Default)]
pub(crate) struct Table {
    mem: Option<(Arc<dyn PortBlockMem>, BlockBook)>,
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

impl Nat64 {
    /// The blocks in force, when NAT64 mode with a hook that offered block
    /// memory of blocks of 1 port or more: `f` of the memory, the book and
    /// the conflicts count.
    fn with_blocks<R>(&self, f: impl FnOnce(&dyn PortBlockMem, &mut BlockBook, &mut u64) -> R) -> Option<R> {
        if self.cfg.mode != Mode::Nat64 {
            return None;
        }
        let mut g = lock(&self.blocks);
        let t = &mut *g;
        if t.mem.is_none() {
            let mem = self.fast_hook()?.port_blocks()?;
            let book = BlockBook::new(mem.size(), MAX_BLOCKS_PER_HOST);
            t.mem = Some((mem, book));
        }
        let (mem, book) = t.mem.as_mut()?;
        (book.size() > 0).then(|| f(&**mem, book, &mut t.conflicts))
    }

    /// Whether new TCP BIB entries take block ports.
    pub(crate) fn blocks_on(&self) -> bool {
        self.with_blocks(|_, _, _| ()).is_some()
    }

    /// A port for a new dynamic TCP BIB entry of `x` from x's blocks
    /// (granting one when they are full), or None (no blocks, a low port,
    /// no block to spare: the caller uses the pool).
    pub(crate) fn block_alloc(&self, x: &T6, y: Ipv4Addr) -> Option<T4> {
        if x.port < 1024 {
            return None;
        }
        let start = || self.keys.hash_one(("block", x.addr));
        let (addr, port) =
            self.with_blocks(|mem, book, _| book.alloc(mem, &self.pool, &x.addr, (x.port, y), true, start))??;
        Some(T4 { addr, port })
    }

    /// Give TCP port `t` back when it is a block port (true), retiring its
    /// host's blocks when they hold no port any more.
    pub(crate) fn block_release(&self, t: T4) -> bool {
        self.with_blocks(|mem, book, _| book.release(mem, t.addr, t.port)).unwrap_or(false)
    }

    /// Whether TCP port `t`, which a fast path took, is in one of `x`'s
    /// blocks (a retired one goes back to `x`).
    pub(crate) fn block_owns(&self, x: &Ipv6Addr, t: T4) -> bool {
        self.with_blocks(|mem, book, _| book.owns(mem, x, t.addr, t.port)).unwrap_or(false)
    }

    pub(crate) fn block_conflict(&self) {
        self.with_blocks(|_, _, conflicts| *conflicts += 1);
    }

    /// Give back the blocks retired before the last turn that are still
    /// unused (called by the expiry timer).
    pub(crate) fn blocks_maintain(&self) {
        self.with_blocks(|mem, book, _| book.maintain(mem, &self.pool));
    }

    /// Unlist every host's blocks for the fast path (a reload: the next
    /// translator grants its own; the ports in use are carried as plain
    /// pool ports).
    pub(crate) fn blocks_unlist(&self) {
        self.with_blocks(|mem, book, _| book.unlist_all(mem));
    }

    /// The port blocks: size, held, granted, given back.
    pub fn port_blocks(&self) -> BlockStats {
        self.with_blocks(|_, book, conflicts| {
            let (held, granted, returned) = book.counts();
            BlockStats { size: book.size(), held, granted, returned, conflicts: *conflicts }
        })
        .unwrap_or_default()
    }

    /// The blocks host `x` holds: (pool address, first port, ports in use).
    pub fn blocks_of(&self, x: &Ipv6Addr) -> Vec<(Ipv4Addr, u16, u32)> {
        self.with_blocks(|mem, book, _| book.blocks_of(mem, x)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Pool4Entry};

    const X: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
    const Z: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 6);
    const Y: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    /// A pool of one address, TCP ports `lo..=hi`.
    fn pool(lo: u16, hi: u16) -> Pool {
        let e = Pool4Entry { prefix: "192.0.2.1/32".parse().unwrap(), ports: (lo, hi), protocols: vec![Protocol::Tcp] };
        Pool::new(&Config { pool4: vec![e], ..Config::default() })
    }

    /// Every port of block (a, base) of `size` claimed in `p` (true) or
    /// none (false); anything between: panic.
    fn claimed(p: &Pool, a: Ipv4Addr, base: u16, size: u16) -> bool {
        let free: Vec<bool> = (0..size).map(|i| p.claim(Protocol::Tcp, a, base + i)).collect();
        for (i, f) in free.iter().enumerate() {
            if *f {
                p.release(Protocol::Tcp, a, base + i as u16);
            }
        }
        assert!(free.iter().all(|f| *f) || free.iter().all(|f| !*f), "block {a}:{base} claimed in part: {free:?}");
        !free[0]
    }

    #[test]
    fn grants_an_aligned_block_claimed_in_the_pool_and_listed() {
        let (p, mem) = (pool(1000, 1127), HeapBlocks::new(16, 4));
        let mut book = BlockBook::new(16, 2);
        let (a, port) = book.alloc(&mem, &p, &X, (5000, Y), true, || 3).expect("a block port");
        let base = port - port % 16;
        assert_eq!(a, p.paired(Protocol::Tcp, &X).unwrap(), "on the paired address");
        // Aligned runs above 1023: 1024, 1040, ..., 1104 (6 of them); the 4th from the start.
        assert_eq!(base, 1024 + 3 * 16);
        assert!(claimed(&p, a, base, 16));
        assert_eq!(mem.listed(&X), vec![0]);
        assert_eq!(mem.block(0), Some((a, base)));
        assert_eq!(book.blocks_of(&mem, &X), vec![(a, base, 1)]);
        assert_eq!(book.free_ports(&mem, &X), 15);
        // The next ports come from the same block, each once.
        let mut ports = vec![port];
        for k in 1..16 {
            let (b, q) = book.alloc(&mem, &p, &X, (5000 + k, Y), true, || unreachable!("no grant")).unwrap();
            assert_eq!((b, q - q % 16), (a, base));
            ports.push(q);
        }
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 16);
        assert_eq!(book.counts(), (1, 1, 0));
    }

    #[test]
    fn exhaustion_per_host_slots_pool_and_the_callers_say() {
        // Room for three aligned blocks of 4 above 1023.
        let (p, mem) = (pool(1024, 1035), HeapBlocks::new(4, 8));
        let mut book = BlockBook::new(4, 2);
        let take = |book: &mut BlockBook, x: &Ipv6Addr, n: u16, grant: bool| {
            (0..n).map(|k| book.alloc(&mem, &p, x, (2000 + k, Y), grant, || 0)).collect::<Vec<_>>()
        };
        let got = take(&mut book, &X, 9, true);
        assert!(got[..8].iter().all(Option::is_some), "two blocks of 4");
        assert_eq!(got[8], None, "at most two blocks per host");
        assert_eq!(take(&mut book, &Z, 1, false), vec![None], "the caller allows no grant");
        assert!(take(&mut book, &Z, 4, true).iter().all(Option::is_some), "the pool's last block");
        assert_eq!(take(&mut book, &Z, 1, true), vec![None], "the pool has no aligned run left");
        assert_eq!(book.counts(), (3, 3, 0));
        // Out of slots: one slot, a pool with room.
        let (p, mem) = (pool(1024, 2047), HeapBlocks::new(4, 1));
        let mut book = BlockBook::new(4, 8);
        let a = (0..5).map(|k| book.alloc(&mem, &p, &X, (2000 + k, Y), true, || 0)).collect::<Vec<_>>();
        assert!(a[..4].iter().all(Option::is_some));
        assert_eq!(a[4], None, "no slot for a second block");
        // Blocks of 0 ports: none ever.
        assert_eq!(BlockBook::new(0, 8).alloc(&mem, &p, &X, (2000, Y), true, || 0), None);
    }

    /// A book of blocks of 8 whose host X was granted one (search from
    /// `start`) and holds a port of it: (pool, memory, book, address, port).
    fn granted(start: u64) -> (Pool, HeapBlocks, BlockBook, Ipv4Addr, u16) {
        let (p, mem) = (pool(1024, 2047), HeapBlocks::new(8, 4));
        let mut book = BlockBook::new(8, 8);
        let (a, port) = book.alloc(&mem, &p, &X, (4000, Y), true, || start).unwrap();
        (p, mem, book, a, port)
    }

    #[test]
    fn retired_then_given_back_a_turn_later() {
        let (p, mem, mut book, a, port) = granted(5);
        let base = port - port % 8;
        let (_, port2) = book.alloc(&mem, &p, &X, (4001, Y), true, || 5).unwrap();
        assert!(!book.release(&mem, a, 999), "not a block port");
        assert!(book.release(&mem, a, port));
        assert_eq!(mem.listed(&X), vec![0], "still a port in use");
        assert!(book.release(&mem, a, port2));
        assert!(mem.listed(&X).is_empty(), "unlisted at once");
        assert!(book.blocks_of(&mem, &X).is_empty());
        assert_eq!(book.counts(), (1, 1, 0), "retired, still held");
        book.maintain(&mem, &p);
        assert!(claimed(&p, a, base, 8), "not given back in the turn it was retired in");
        assert_eq!(book.counts(), (1, 1, 0));
        book.maintain(&mem, &p);
        assert!(!claimed(&p, a, base, 8), "given back to the pool at the next turn");
        assert_eq!(book.counts(), (0, 1, 1));
        // The slot is used again.
        let (b, q) = book.alloc(&mem, &p, &Z, (4000, Y), true, || 9).unwrap();
        assert_eq!(mem.listed(&Z), vec![0]);
        assert_eq!(mem.block(0), Some((b, q - q % 8)));
        assert_eq!(book.counts(), (1, 2, 1));
    }

    #[test]
    fn a_port_the_fast_path_took_unretires_the_block() {
        let (p, mem, mut book, a, port) = granted(1);
        let base = port - port % 8;
        assert!(book.owns(&mem, &X, a, base + 7), "a port of x's listed block");
        assert!(!book.owns(&mem, &Z, a, base + 7), "not z's");
        assert!(book.release(&mem, a, port));
        // The fast path read the list before: it takes a port, the slow path learns of it.
        let i = mem.take(0, 8, 3).unwrap();
        assert!(book.owns(&mem, &X, a, base + i), "the retired block is x's again");
        assert_eq!(mem.listed(&X), vec![0]);
        assert_eq!(book.blocks_of(&mem, &X), vec![(a, base, 1)]);
        // Retired again, and a port taken that the slow path never hears of: the turn keeps it.
        assert!(book.release(&mem, a, base + i));
        let j = mem.take(0, 8, 0).unwrap();
        book.maintain(&mem, &p);
        book.maintain(&mem, &p);
        assert_eq!(mem.listed(&X), vec![0], "in use: back to x, listed");
        assert!(claimed(&p, a, base, 8));
        assert_eq!(book.counts(), (1, 1, 0));
        // Given back: retired again; a port of a retired block goes back to the bitmap only.
        assert!(book.release(&mem, a, base + j));
        assert!(book.release(&mem, a, base + j));
        assert_eq!(mem.in_use(0), 0);
        book.unlist_all(&mem);
    }
}
