//! The softwire XDP fast path (`xdp::softwire`, `bpf/softwire.bpf.c`):
//! loading it for an lwAFTR and keeping its maps equal to the engine's
//! binding table and DSTM leases ([`LwaftrFast`]), or for the DS-Lite
//! AFTR and keeping its session maps equal to the NAT44's carried
//! mappings ([`AftrFast`]).
//!
//! The engine stays the slow path and the truth: the fast path serves
//! only packets of a binding it mirrors and passes everything else up to
//! the kernel, which routes it into the TUN device as without XDP.
//! [`LwaftrFast::refresh`] is cheap when nothing changed (two pointer
//! comparisons), so the runner calls it after every batch of packets: a
//! reload or a lease grant or expiry reaches the maps within one loop
//! turn, and only the entries that changed are written.

use crate::aftr::{Aftr, AftrConfig};
use crate::binding::BindingTable;
use crate::endpoint::EndpointConfig;
use crate::lwaftr::{Lwaftr, LwaftrConfig};
use crate::nat44::{Change, Inside, Outside, Ports, Seen};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use nat64::config::Protocol;
use nat64::tcp::Side;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use xdp::dslite::{CarriedFin, CreatedRing, Nat44Session, PortBlocks, RingEvent, SessionSeen, MAX_BLOCKS_PER_B4};
use xdp::softwire::{Bound, SoftwireCounter, SoftwireFastPath, SoftwireSettings, SyncStats};
use xdp::Mode;

/// The bindings of `t` as the fast path mirrors them.
pub fn bounds(t: &BindingTable) -> Vec<Bound> {
    t.iter()
        .map(|b| Bound { b4: b.b4, ipv4: b.ipv4, psid: b.psid, psid_len: b.map.psid_len(), offset: b.map.offset() })
        .collect()
}

/// The fast path's settings for an lwAFTR with `cfg`, room for
/// `max_bindings` bindings and leases.
pub fn settings(cfg: &LwaftrConfig, max_bindings: u32) -> SoftwireSettings {
    endpoint_settings(&cfg.endpoint, max_bindings, None)
}

/// The fast path's settings for a DS-Lite AFTR with `cfg`, room for
/// `max_sessions` NAT44 sessions.
pub fn aftr_settings(cfg: &AftrConfig, max_sessions: u32) -> SoftwireSettings {
    endpoint_settings(&cfg.endpoint, 1, Some(max_sessions))
}

/// Port-block slots for blocks of `size` ports (0: none) and
/// `max_sessions` carried sessions: every session in a block of its own
/// at worst, at most 65,536.
pub fn block_slots(size: u16, max_sessions: u32) -> u32 {
    if size == 0 {
        return 0;
    }
    max_sessions.clamp(1, 65_536)
}

fn endpoint_settings(e: &EndpointConfig, max_bindings: u32, sessions: Option<u32>) -> SoftwireSettings {
    SoftwireSettings {
        local: e.local,
        hop_limit: e.hop_limit,
        encap_limit: e.encap_limit,
        mtu: e.mtu,
        copy_tos: e.copy_tos,
        max_bindings,
        dslite: sessions.is_some(),
        max_sessions: sessions.unwrap_or(0),
        port_blocks: 0,
    }
}

/// The attachments and the non-zero counters (by `label`) of an XDP
/// object, for a status: the softwire fast path's and the B4 kernel
/// path's.
pub(crate) fn xdp_status<C>(
    attachments: &[xdp::Attachment],
    counters: Result<Vec<(C, xdp::types::Count)>, xdp::Error>,
    label: fn(C) -> &'static str,
) -> (serde_json::Value, serde_json::Value) {
    let counters: serde_json::Map<String, serde_json::Value> = counters
        .map(|v| {
            v.into_iter()
                .filter(|(_, c)| c.packets > 0)
                .map(|(k, c)| (label(k).to_owned(), serde_json::json!(c.packets)))
                .collect()
        })
        .unwrap_or_default();
    let attached = attachments
        .iter()
        .map(|a| serde_json::json!({"iface": a.iface, "mode": format!("{:?}", a.mode).to_lowercase()}))
        .collect::<Vec<_>>();
    (serde_json::json!(attached), serde_json::Value::Object(counters))
}

/// The attachments and the non-zero counters of `fp`, for a status.
fn fast_path_status(fp: &SoftwireFastPath) -> (serde_json::Value, serde_json::Value) {
    xdp_status(fp.attachments(), fp.counters(), SoftwireCounter::label)
}

/// An lwAFTR's loaded fast path and what of the engine's tables it mirrors.
#[derive(Debug)]
pub struct LwaftrFast {
    fp: SoftwireFastPath,
    seen: Option<(Arc<BindingTable>, Arc<BindingTable>)>,
    last_error: Option<String>,
}

impl LwaftrFast {
    /// Load the fast path for `lw`'s configuration (maps sized for
    /// `max_bindings`) and mirror its tables. Nothing is attached yet.
    pub fn load(lw: &Lwaftr, max_bindings: u32) -> Result<LwaftrFast, xdp::Error> {
        let fp = SoftwireFastPath::load(settings(lw.config(), max_bindings))?;
        let mut f = LwaftrFast { fp, seen: None, last_error: None };
        f.refresh(lw)?;
        Ok(f)
    }

    /// Attach to `iface` in `mode` (`Mode::Off`: nothing).
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<(), xdp::Error> {
        self.fp.attach(iface, mode).map(|_| ())
    }

    /// The loaded program and its maps.
    pub fn fast_path(&self) -> &SoftwireFastPath {
        &self.fp
    }

    /// The loaded program and its maps (tests allow egress interfaces).
    pub fn fast_path_mut(&mut self) -> &mut SoftwireFastPath {
        &mut self.fp
    }

    /// Mirror `lw`'s binding table and leases when either changed since
    /// the last call. `Ok(None)`: nothing to do. On an error (a full map)
    /// the maps hold a consistent subset (the rest takes the slow path),
    /// the status shows the error, and the next change tries again.
    pub fn refresh(&mut self, lw: &Lwaftr) -> Result<Option<SyncStats>, xdp::Error> {
        let (b, l) = (lw.bindings(), lw.leases());
        if let Some((sb, sl)) = &self.seen {
            if Arc::ptr_eq(sb, &b) && Arc::ptr_eq(sl, &l) {
                return Ok(None);
            }
        }
        match self.fp.sync(&bounds(&b), &bounds(&l)) {
            Ok(st) => {
                self.seen = Some((b, l));
                self.last_error = None;
                Ok(Some(st))
            }
            Err(e) => {
                self.seen = Some((b, l));
                self.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The status: attachments, mirrored bindings, counters by label.
    pub fn status(&self) -> serde_json::Value {
        let (attached, counters) = fast_path_status(&self.fp);
        serde_json::json!({
            "attached": attached,
            "bindings": self.fp.bindings(),
            "counters": counters,
            "last_error": self.last_error,
        })
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_coarse_ns()`.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64))
}

fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Icmp => 1,
    }
}

/// The fast path's form of the mapping `k` ↔ `o` (`half_open`: TCP in
/// V6 INIT, [`Change::HalfOpen`]).
pub fn session(k: &Inside, o: &Outside, half_open: bool) -> Nat44Session {
    Nat44Session {
        b4: k.sub,
        proto: proto_number(k.proto),
        inside: SocketAddrV4::new(k.addr, k.port),
        outside: SocketAddrV4::new(o.addr, o.port),
        half_open,
    }
}

/// What the fast path recorded (`r`), on the engine's clock: `now` there
/// is `mono` on CLOCK_MONOTONIC.
fn engine_seen(r: Result<Option<SessionSeen>, xdp::Error>, now: u64, mono: u64) -> Option<Seen> {
    let s = r.ok()??;
    let last_ns = Some(s.last_seen_ns).filter(|t| *t > 0).map(|t| now.saturating_sub(mono.saturating_sub(t)));
    Some(Seen { last_ns, syn_ack: s.syn_ack })
}

/// One port block a subscriber holds: `size` pool ports from `base` on
/// `addr`, in `ds_blocks` slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    slot: u32,
    addr: Ipv4Addr,
    base: u16,
}

#[derive(Debug, Default)]
struct BlockTable {
    /// A subscriber's TCP blocks, in `ds_b4` order.
    by_sub: HashMap<Ipv6Addr, Vec<Block>>,
    /// (address, base) → (slot, subscriber).
    by_base: HashMap<(Ipv4Addr, u16), Ipv6Addr>,
    /// Slots never used or given back.
    free: Vec<u32>,
    /// Blocks of subscribers whose ports were all given back, no longer
    /// listed in `ds_b4`: freed at the next expiry turn if still unused
    /// (a program that read `ds_b4` before may still take a port: then
    /// the block goes back to its subscriber). `retired` since the last
    /// turn, `retired_before` in an earlier one (the ones freed now).
    retired: Vec<(Ipv6Addr, Block)>,
    retired_before: Vec<(Ipv6Addr, Block)>,
    /// Blocks granted and given back.
    granted: u64,
    returned: u64,
}

/// The shared half of [`BlockPorts`]: the block table and, once the fast
/// path is loaded, its memory ([`PortBlocks`]).
#[derive(Debug)]
pub struct BlockShared {
    size: u16,
    quota: u32,
    mem: OnceLock<PortBlocks>,
    t: Mutex<BlockTable>,
}

impl BlockShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BlockTable> {
        self.t.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The block size in ports.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// (blocks held, blocks granted so far, blocks given back so far).
    pub fn counts(&self) -> (usize, u64, u64) {
        let t = self.lock();
        let held = t.by_sub.values().map(Vec::len).sum::<usize>() + t.retired.len() + t.retired_before.len();
        (held, t.granted, t.returned)
    }

    /// The blocks `sub` holds: (pool address, first port, ports in use).
    pub fn blocks_of(&self, sub: &Ipv6Addr) -> Vec<(Ipv4Addr, u16, u32)> {
        let Some(mem) = self.mem.get() else { return Vec::new() };
        let t = self.lock();
        t.by_sub.get(sub).map_or_else(Vec::new, |v| v.iter().map(|b| (b.addr, b.base, mem.in_use(b.slot))).collect())
    }

    /// A mapping the program created from block `slot` of `sub`: a
    /// retired block goes back to its subscriber.
    fn adopted(&self, sub: Ipv6Addr, slot: u32) {
        let Some(mem) = self.mem.get() else { return };
        let mut t = self.lock();
        let t = &mut *t;
        let list = if t.retired.iter().any(|(s, b)| *s == sub && b.slot == slot) {
            &mut t.retired
        } else {
            &mut t.retired_before
        };
        if let Some(i) = list.iter().position(|(s, b)| *s == sub && b.slot == slot) {
            let (_, b) = list.swap_remove(i);
            let v = t.by_sub.entry(sub).or_default();
            v.push(b);
            let slots: Vec<u32> = v.iter().map(|b| b.slot).collect();
            let _ = mem.set_b4(sub, 6, &slots);
        }
    }
}

/// The DS-Lite AFTR's port allocator with per-B4 port blocks (RFC 7422
/// bulk port allocation, RFC 6888 REQ-4): TCP ports of a subscriber come
/// from blocks of `size` pool ports on its paired pool address, granted
/// when the subscriber needs one and its quota has room for the whole
/// block (its blocks' free ports count as its own: [`Ports::reserved`]),
/// at most [`MAX_BLOCKS_PER_B4`], and mirrored into the fast path, which takes
/// ports from them for the SYNs it creates mappings for
/// (`bpf/portblock.h`). A subscriber's blocks are given back when it
/// holds no port in them. UDP and ICMP, and everything before the fast
/// path is loaded ([`AftrFast::load`] installs its memory), take the
/// pool's RFC 6056 ports as [`crate::nat44::PoolPorts`].
#[derive(Debug)]
pub struct BlockPorts {
    pool: nat64::pool::Pool,
    probes: u32,
    shared: Arc<BlockShared>,
}

impl BlockPorts {
    /// Blocks of `size` ports (1..=256) from a pool of `entries`, at most
    /// `quota` ports per subscriber; `probes` as [`crate::nat44::PoolPorts`].
    pub fn new(entries: Vec<nat64::Pool4Entry>, probes: u32, size: u16, quota: u32) -> (BlockPorts, Arc<BlockShared>) {
        let cfg = nat64::Config { pool4: entries, ..nat64::Config::default() };
        let size = size.clamp(1, xdp::dslite::PB_MAX_PORTS);
        let shared = Arc::new(BlockShared { size, quota, mem: OnceLock::new(), t: Mutex::new(BlockTable::default()) });
        (BlockPorts { pool: nat64::pool::Pool::new(&cfg), probes, shared: shared.clone() }, shared)
    }

    /// Claim a block for `sub` on its paired address: the first aligned
    /// run of `size` free TCP ports from a hashed start. `None`: none free.
    fn grant(&self, sub: &Ipv6Addr, mem: &PortBlocks, t: &mut BlockTable) -> Option<Block> {
        let size = self.shared.size;
        let addr = self.pool.paired(Protocol::Tcp, sub)?;
        let (lo, hi) = self.pool.ports(Protocol::Tcp, addr)?;
        // Aligned blocks wholly inside [lo, hi], above the well-known ports when the range allows.
        let lo = if hi >= 1024 { lo.max(1024) } else { lo };
        let first = u32::from(lo).div_ceil(u32::from(size));
        let last = (u32::from(hi) + 1) / u32::from(size);
        if last <= first {
            return None;
        }
        let n = last - first;
        let start = (u32::from_be_bytes(sub.octets()[12..16].try_into().unwrap_or_default())
            ^ u32::from_be_bytes(sub.octets()[8..12].try_into().unwrap_or_default()))
        .wrapping_mul(2_654_435_761)
            % n;
        let slot = *t.free.last()?;
        for k in 0..n.min(4096) {
            let base = ((first + (start + k) % n) * u32::from(size)) as u16;
            let mut got = 0u16;
            while got < size && self.pool.claim(Protocol::Tcp, addr, base + got) {
                got += 1;
            }
            if got == size {
                t.free.pop();
                mem.write(slot, addr, base, size);
                t.granted += 1;
                return Some(Block { slot, addr, base });
            }
            for i in 0..got {
                self.pool.release(Protocol::Tcp, addr, base + i);
            }
        }
        None
    }

    fn list(mem: &PortBlocks, sub: Ipv6Addr, v: &[Block]) {
        let slots: Vec<u32> = v.iter().map(|b| b.slot).collect();
        if let Err(e) = mem.set_b4(sub, 6, &slots) {
            tracing::warn!("dslite port blocks: {e}");
        }
    }

    fn alloc_block(&self, sub: &Ipv6Addr, port: u16, dst: Ipv4Addr, room: u32) -> Option<(Ipv4Addr, u16)> {
        let mem = self.shared.mem.get()?;
        let size = self.shared.size;
        let hint = (u32::from(port) ^ u32::from(dst).rotate_left(7)).wrapping_mul(2_654_435_761);
        let mut t = self.shared.lock();
        if let Some(v) = t.by_sub.get(sub) {
            for b in v {
                if let Some(i) = mem.take(b.slot, size, hint) {
                    return Some((b.addr, b.base + i));
                }
            }
        }
        let held = t.by_sub.get(sub).map_or(0, Vec::len);
        // A new block is reserved whole: it must fit in the quota's room.
        if held >= MAX_BLOCKS_PER_B4 || room < u32::from(size) {
            return None;
        }
        let b = self.grant(sub, mem, &mut t)?;
        let i = mem.take(b.slot, size, hint)?;
        t.by_base.insert((b.addr, b.base), *sub);
        let v = t.by_sub.entry(*sub).or_default();
        v.push(b);
        Self::list(mem, *sub, v);
        Some((b.addr, b.base + i))
    }
}

impl Ports for BlockPorts {
    fn alloc(&self, p: Protocol, sub: &Ipv6Addr, port: u16, dst: Ipv4Addr) -> Option<(Ipv4Addr, u16)> {
        self.alloc_within(p, sub, port, dst, self.shared.quota)
    }

    fn alloc_within(
        &self,
        p: Protocol,
        sub: &Ipv6Addr,
        port: u16,
        dst: Ipv4Addr,
        room: u32,
    ) -> Option<(Ipv4Addr, u16)> {
        if p == Protocol::Tcp && self.shared.mem.get().is_some() {
            if let Some(x) = self.alloc_block(sub, port, dst, room) {
                return Some(x);
            }
            // No block to spare (MAX_BLOCKS_PER_B4, the quota, the pool): a pool port, as without blocks.
        }
        if room == 0 {
            return None;
        }
        self.pool.alloc(p, sub, port, dst, self.probes)
    }

    fn reserved(&self, sub: &Ipv6Addr) -> u32 {
        let Some(mem) = self.shared.mem.get() else { return 0 };
        let size = u32::from(self.shared.size);
        let t = self.shared.lock();
        t.by_sub.get(sub).map_or(0, |v| v.iter().map(|b| size.saturating_sub(mem.in_use(b.slot))).sum())
    }

    fn release(&self, p: Protocol, a: Ipv4Addr, port: u16) {
        let size = self.shared.size;
        let base = port - port % size;
        if let (Protocol::Tcp, Some(mem)) = (p, self.shared.mem.get()) {
            let mut t = self.shared.lock();
            if let Some(sub) = t.by_base.get(&(a, base)).copied() {
                let Some(v) = t.by_sub.get(&sub) else {
                    // a retired block: its port goes back to the bitmap only
                    if let Some((_, b)) =
                        t.retired.iter().chain(&t.retired_before).find(|(_, b)| b.addr == a && b.base == base)
                    {
                        mem.give(b.slot, port - base);
                    }
                    return;
                };
                let Some(b) = v.iter().find(|b| b.addr == a && b.base == base).copied() else { return };
                mem.give(b.slot, port - base);
                if v.iter().all(|b| mem.in_use(b.slot) == 0) {
                    // The subscriber holds no port: out of ds_b4, freed at the next turn.
                    let v = t.by_sub.remove(&sub).unwrap_or_default();
                    Self::list(mem, sub, &[]);
                    t.retired.extend(v.into_iter().map(|b| (sub, b)));
                }
                return;
            }
        }
        self.pool.release(p, a, port)
    }

    fn contains(&self, a: Ipv4Addr) -> bool {
        self.pool.contains(a)
    }

    fn usage(&self, p: Protocol) -> (u64, u64) {
        self.pool.usage(p)
    }

    fn maintain(&self) {
        let Some(mem) = self.shared.mem.get() else { return };
        let size = self.shared.size;
        let mut t = self.shared.lock();
        let now = std::mem::take(&mut t.retired);
        for (sub, b) in std::mem::replace(&mut t.retired_before, now) {
            if mem.in_use(b.slot) == 0 {
                for i in 0..size {
                    self.pool.release(Protocol::Tcp, b.addr, b.base + i);
                }
                t.by_base.remove(&(b.addr, b.base));
                t.free.push(b.slot);
                t.returned += 1;
            } else {
                // a port was taken after all: the block is the subscriber's again
                let v = t.by_sub.entry(sub).or_default();
                v.push(b);
                Self::list(mem, sub, v);
            }
        }
    }
}

/// The NAT44's keys of the TCP mapping `s` (a ring event's).
fn tcp_keys(s: &Nat44Session) -> (Inside, Outside) {
    let k = Inside { sub: s.b4, proto: Protocol::Tcp, addr: *s.inside.ip(), port: s.inside.port() };
    (k, Outside { proto: Protocol::Tcp, addr: *s.outside.ip(), port: s.outside.port() })
}

/// The DS-Lite AFTR's loaded fast path. It turns the NAT44's
/// [`Change`]s into session entries: the runner calls [`AftrFast::sync`]
/// after each packet the engine handled and before it writes what the
/// engine emitted, so the session is in the maps when the next packet of
/// the flow arrives (UDP: the reply to the first packet; TCP: the
/// server's SYN-ACK to the B4's SYN that created the mapping, half-open).
/// The NAT44 gets a probe on the session maps ([`Nat44::set_probe`]) to
/// read, whenever it handles a half-open mapping's packet, whether the
/// fast path carried its SYN-ACK.
///
/// [`Nat44::set_probe`]: crate::nat44::Nat44::set_probe
#[derive(Debug)]
pub struct AftrFast {
    fp: SoftwireFastPath,
    changes: Vec<Change>,
    full: u64,
    errors: u64,
    last_error: Option<String>,
    /// With port blocks: the blocks and the ring of created mappings.
    blocks: Option<Creation>,
}

/// Mappings the fast path creates: the blocks, the ring, handles of its
/// own on the session maps, counts. Behind a mutex, so that
/// [`AftrFast::drain`] takes `&self` (a reader of the fast path may hold
/// it meanwhile).
#[derive(Debug)]
struct Creation {
    shared: Arc<BlockShared>,
    st: Mutex<CreationState>,
}

#[derive(Debug)]
struct CreationState {
    ring: CreatedRing,
    maps: xdp::dslite::SessionProbe,
    /// Created-mapping events drained (`ds_state.drained`).
    drained: u64,
    conflicts: u64,
    /// FIN events drained, and those whose mapping was gone (or another's).
    fins: u64,
    fins_stale: u64,
}

impl AftrFast {
    /// Load the fast path for `aftr` (maps for `max_sessions` sessions,
    /// `pool` the pool4 prefixes as (address, length)), turn the NAT44's
    /// mirroring on and mirror what is carriable already. Nothing is
    /// attached yet.
    pub fn load(aftr: &Aftr, pool: &[(Ipv4Addr, u8)], max_sessions: u32) -> Result<AftrFast, xdp::Error> {
        Self::load_with(aftr, pool, max_sessions, None)
    }

    /// [`AftrFast::load`] with the AFTR's port blocks (`blocks`: the AFTR
    /// was made with [`BlockPorts`]): a B4's TCP SYN without a mapping
    /// creates it in the fast path, which [`AftrFast::drain`] enters into
    /// the NAT44.
    pub fn load_with(
        aftr: &Aftr,
        pool: &[(Ipv4Addr, u8)],
        max_sessions: u32,
        blocks: Option<Arc<BlockShared>>,
    ) -> Result<AftrFast, xdp::Error> {
        let mut settings = aftr_settings(aftr.config(), max_sessions);
        if let Some(b) = &blocks {
            settings.port_blocks = block_slots(b.size, max_sessions);
        }
        let mut fp = SoftwireFastPath::load(settings)?;
        fp.set_pool(pool)?;
        let probe = fp.session_probe()?;
        let blocks = match blocks {
            Some(b) => {
                let mem = fp.port_blocks()?;
                b.lock().free = (0..mem.slots()).rev().collect();
                if b.mem.set(mem).is_err() {
                    return Err(xdp::Error::Bpf("port blocks already in use by another fast path".into()));
                }
                let st = CreationState {
                    ring: fp.created_ring()?,
                    maps: fp.session_probe()?,
                    drained: 0,
                    conflicts: 0,
                    fins: 0,
                    fins_stale: 0,
                };
                Some(Creation { shared: b, st: Mutex::new(st) })
            }
            None => None,
        };
        let mut f = AftrFast { fp, changes: Vec::new(), full: 0, errors: 0, last_error: None, blocks };
        aftr.nat().set_probe(Some(Box::new(move |k, o, now| {
            engine_seen(probe.seen(&session(k, o, false)), now, monotonic_ns())
        })));
        aftr.nat().set_mirror(true);
        f.sync(aftr);
        Ok(f)
    }

    /// Attach to `iface` in `mode` (`Mode::Off`: nothing).
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<(), xdp::Error> {
        self.fp.attach(iface, mode).map(|_| ())
    }

    /// The loaded program and its maps.
    pub fn fast_path(&self) -> &SoftwireFastPath {
        &self.fp
    }

    /// The loaded program and its maps (tests allow egress interfaces).
    pub fn fast_path_mut(&mut self) -> &mut SoftwireFastPath {
        &mut self.fp
    }

    /// Enter the mappings the fast path created and the FINs it carried
    /// since the last call into `aftr`'s NAT44 (`now`: the engine's
    /// clock), in the order they happened, as if the SYNs and FINs had
    /// come here at their times; then tell the program the table's size.
    /// The runner calls it before every packet and at each loop turn (so
    /// an idle engine learns of a FIN within its idle wait, 50 ms).
    /// Returns how many were entered (mappings taken, FINs of a mapping
    /// still there).
    pub fn drain(&self, aftr: &Aftr, now: u64) -> usize {
        let Some(c) = &self.blocks else { return 0 };
        let mut st = c.st.lock().unwrap_or_else(|e| e.into_inner());
        let mut got: Vec<RingEvent> = Vec::new();
        if st.ring.drain(|x| got.push(x)) == 0 {
            return 0;
        }
        let mono = monotonic_ns();
        let at = |ns: u64| now.saturating_sub(mono.saturating_sub(ns));
        let (mut entered, mut created, mut fins, mut stepped) = (0, 0, 0, 0);
        for ev in got {
            let x = match ev {
                RingEvent::Created(x) => x,
                RingEvent::Fin(f) => {
                    fins += 1;
                    if Self::fin(aftr, &f, at(f.mono_ns)) {
                        stepped += 1;
                    } else {
                        st.fins_stale += 1;
                    }
                    continue;
                }
            };
            created += 1;
            let s = x.session;
            let (k, o) = tcp_keys(&s);
            c.shared.adopted(s.b4, x.slot);
            match aftr.nat().adopt(k, o, at(x.mono_ns)) {
                Ok(()) => entered += 1,
                Err(had) => {
                    // Both made one: the NAT44's stays, the program's entries of `o` go.
                    st.conflicts += 1;
                    let _ = st.maps.remove_in(6, s.outside);
                    if let Some((out, half)) = had {
                        let _ = st.maps.restore(&session(&k, &out, half));
                    }
                }
            }
        }
        self.fp.count_created(entered);
        st.drained += created;
        st.fins += fins;
        let drained = st.drained;
        drop(st);
        self.publish_with(aftr, drained);
        entered + stepped
    }

    /// A FIN the program carried, stepped in the NAT44 at `at`.
    fn fin(aftr: &Aftr, f: &CarriedFin, at: u64) -> bool {
        let (k, o) = tcp_keys(&f.session);
        let side = if f.from_v4 { Side::V4 } else { Side::V6 };
        aftr.nat().carried(k, o, side, f.tcp_flags, at)
    }

    /// FIN events taken in, and those whose mapping was gone.
    pub fn fins(&self) -> (u64, u64) {
        self.blocks.as_ref().map_or((0, 0), |c| {
            let st = c.st.lock().unwrap_or_else(|e| e.into_inner());
            (st.fins, st.fins_stale)
        })
    }

    /// `ds_state`: the NAT44's size and limit, and the events drained.
    fn publish(&self, aftr: &Aftr) {
        if let Some(c) = &self.blocks {
            let drained = c.st.lock().unwrap_or_else(|e| e.into_inner()).drained;
            self.publish_with(aftr, drained);
        }
    }

    fn publish_with(&self, aftr: &Aftr, drained: u64) {
        if let Some(mem) = self.blocks.as_ref().and_then(|c| c.shared.mem.get()) {
            let n = aftr.nat();
            mem.set_state(n.len() as u64, drained, n.config().max_mappings as u64);
        }
    }

    /// Mappings the fast path created that the NAT44 entered, and those it
    /// did not (it had one of the same inside already).
    pub fn created(&self) -> (u64, u64) {
        self.blocks.as_ref().map_or((0, 0), |c| {
            let st = c.st.lock().unwrap_or_else(|e| e.into_inner());
            (st.drained - st.conflicts, st.conflicts)
        })
    }

    /// Apply the NAT44's changes since the last call, oldest first. A
    /// session the full maps refuse stays on the slow path (counted).
    /// Returns how many changes were applied.
    pub fn sync(&mut self, aftr: &Aftr) -> usize {
        aftr.nat().take_changes(&mut self.changes);
        if self.blocks.is_some() && !self.changes.is_empty() {
            self.publish(aftr);
        }
        let n = self.changes.len();
        for c in self.changes.drain(..) {
            let r = match c {
                Change::Up(k, o) => self.fp.session_insert(&session(&k, &o, false)),
                Change::HalfOpen(k, o) => self.fp.session_insert(&session(&k, &o, true)),
                Change::Opened(k, o) => self.fp.session_update(&session(&k, &o, false)).map(|_| ()),
                Change::Down(k, o) => self.fp.session_remove(&session(&k, &o, false)).map(|_| ()),
            };
            match r {
                Ok(()) => {}
                Err(xdp::Error::MapFull(_)) => self.full += 1,
                Err(e) => {
                    self.errors += 1;
                    self.last_error = Some(e.to_string());
                }
            }
        }
        n
    }

    /// Expire `aftr`'s mappings at `now` (the engine's clock), a mapping
    /// the fast path carried living on from its last packet there; then
    /// the maps follow.
    pub fn expire(&mut self, aftr: &Aftr, now: u64) -> usize {
        self.drain(aftr, now);
        let mono = monotonic_ns();
        let fp = &self.fp;
        let n = aftr.expire_with(now, |k, o| engine_seen(fp.session_seen(&session(k, o, false)), now, mono));
        self.sync(aftr);
        self.publish(aftr);
        n
    }

    /// Sessions the full maps refused so far.
    pub fn refused_full(&self) -> u64 {
        self.full
    }

    /// The status: attachments, sessions carried, counters by label.
    pub fn status(&self) -> serde_json::Value {
        let (attached, counters) = fast_path_status(&self.fp);
        serde_json::json!({
            "attached": attached,
            "sessions": self.fp.sessions(),
            "max_sessions": self.fp.settings().max_sessions,
            "refused_full": self.full,
            "errors": self.errors,
            "port_blocks": self.blocks.as_ref().map(|c| {
                let (held, granted, returned) = c.shared.counts();
                let (created, conflicts) = self.created();
                let (fins, fins_stale) = self.fins();
                serde_json::json!({
                    "size": c.shared.size,
                    "held": held,
                    "granted": granted,
                    "returned": returned,
                    "created": created,
                    "conflicts": conflicts,
                    "fins": fins,
                    "fins_stale": fins_stale,
                })
            }),
            "counters": counters,
            "last_error": self.last_error,
        })
    }
}
