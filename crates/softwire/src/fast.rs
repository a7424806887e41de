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
use crate::nat44::{self, Change, Inside, Outside, Ports, Seen};
use budget::ClientKey;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use nat64::config::Protocol;
use nat64::tcp::Side;
use nat64::BlockBook;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use xdp::dslite::{CarriedFin, CreatedRing, Nat44Session, PortBlocks, RingEvent, SessionSeen, MAX_BLOCKS_PER_B4};
use xdp::softwire::{Bound, SoftwireCounter, SoftwireFastPath, SoftwireSettings, SyncStats};
use xdp::{Mode, RingWatch};

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

/// `ds_blocks` as the block book's memory: TCP blocks, listed in `ds_b4`.
#[derive(Debug)]
struct B4Blocks {
    mem: PortBlocks,
    size: u16,
}

impl nat64::PortBlockMem for B4Blocks {
    fn size(&self) -> u16 {
        self.size
    }
    fn slots(&self) -> u32 {
        self.mem.slots()
    }
    fn write(&self, slot: u32, addr: Ipv4Addr, base: u16, size: u16) {
        self.mem.write(slot, addr, base, size)
    }
    fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        self.mem.take(slot, size, hint)
    }
    fn give(&self, slot: u32, i: u16) {
        self.mem.give(slot, i)
    }
    fn in_use(&self, slot: u32) -> u32 {
        self.mem.in_use(slot)
    }
    fn list(&self, b4: Ipv6Addr, slots: &[u32]) {
        if let Err(e) = self.mem.set_b4(b4, 6, slots) {
            tracing::warn!("dslite port blocks: {e}");
        }
    }
}

/// The shared half of [`BlockPorts`]: the block book ([`BlockBook`]) and,
/// once the fast path is loaded, its memory ([`PortBlocks`]).
#[derive(Debug)]
pub struct BlockShared {
    size: u16,
    quota: u32,
    /// The subscriber of a B4 address: its prefix of this length (RFC 7785).
    mask: u8,
    mem: OnceLock<B4Blocks>,
    book: Mutex<BlockBook>,
    /// The B4 addresses of each subscriber that were granted blocks (the
    /// book is per address; the quota per subscriber). Locked after `book`.
    members: Mutex<HashMap<ClientKey, Vec<Ipv6Addr>>>,
}

impl BlockShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BlockBook> {
        function::lock(&self.book)
    }

    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, Vec<Ipv6Addr>>> {
        function::lock(&self.members)
    }

    /// `sub` holds blocks now: one of its subscriber's addresses.
    fn note_member(&self, sub: &Ipv6Addr) {
        let mut m = self.members();
        let list = m.entry(nat44::subscriber(sub, self.mask)).or_default();
        if !list.contains(sub) {
            list.push(*sub);
        }
    }

    /// The free ports of the blocks of every address of `sub`'s
    /// subscriber (addresses that hold none any more are forgotten).
    fn free_ports_of_subscriber(&self, mem: &B4Blocks, sub: &Ipv6Addr) -> u32 {
        let book = self.lock();
        let mut m = self.members();
        let key = nat44::subscriber(sub, self.mask);
        let Some(list) = m.get_mut(&key) else { return 0 };
        list.retain(|x| !book.blocks_of(mem, x).is_empty());
        let free = list.iter().map(|x| book.free_ports(mem, x)).sum();
        if list.is_empty() {
            m.remove(&key);
        }
        free
    }

    /// The block size in ports.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// (blocks held, blocks granted so far, blocks given back so far).
    pub fn counts(&self) -> (usize, u64, u64) {
        self.lock().counts()
    }

    /// The blocks `sub` holds: (pool address, first port, ports in use).
    pub fn blocks_of(&self, sub: &Ipv6Addr) -> Vec<(Ipv4Addr, u16, u32)> {
        let Some(mem) = self.mem.get() else { return Vec::new() };
        self.lock().blocks_of(mem, sub)
    }

    /// A mapping the program created on `out` for `sub`: a retired block
    /// holding it goes back to its subscriber.
    fn adopted(&self, sub: Ipv6Addr, out: SocketAddrV4) {
        if let Some(mem) = self.mem.get() {
            self.lock().owns(mem, &sub, *out.ip(), out.port());
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
/// holds no port in them (the book: [`BlockBook`]). UDP and ICMP, and
/// everything before the fast path is loaded ([`AftrFast::load`] installs
/// its memory), take the pool's RFC 6056 ports as
/// [`crate::nat44::PoolPorts`].
#[derive(Debug)]
pub struct BlockPorts {
    pool: nat64::pool::Pool,
    probes: u32,
    shared: Arc<BlockShared>,
}

impl BlockPorts {
    /// Blocks of `size` ports (1..=256) from a pool of `entries`, at most
    /// `quota` ports per subscriber; `probes` as [`crate::nat44::PoolPorts`].
    /// `mask` is the subscriber-mask: every address of a subscriber's
    /// prefix shares its quota, blocks included.
    pub fn new(
        entries: Vec<nat64::Pool4Entry>,
        probes: u32,
        size: u16,
        quota: u32,
        mask: u8,
    ) -> (BlockPorts, Arc<BlockShared>) {
        let cfg = nat64::Config { pool4: entries, ..nat64::Config::default() };
        let size = size.clamp(1, xdp::dslite::PB_MAX_PORTS);
        let book = Mutex::new(BlockBook::new(size, MAX_BLOCKS_PER_B4));
        let members = Mutex::default();
        let shared = Arc::new(BlockShared { size, quota, mask, mem: OnceLock::new(), book, members });
        (BlockPorts { pool: nat64::pool::Pool::new(&cfg), probes, shared: shared.clone() }, shared)
    }
}

/// Where a subscriber's block search starts in its paired address's
/// aligned runs (before the modulo).
fn block_start(sub: &Ipv6Addr) -> u64 {
    let o = sub.octets();
    let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
    u64::from((w(12) ^ w(8)).wrapping_mul(2_654_435_761))
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
        if let (Protocol::Tcp, Some(mem)) = (p, self.shared.mem.get()) {
            // A new block is reserved whole: it must fit in the quota's room.
            let may_grant = room >= u32::from(self.shared.size);
            let got = self.shared.lock().alloc(mem, &self.pool, sub, (port, dst), may_grant, || block_start(sub));
            if got.is_some() {
                self.shared.note_member(sub);
                return got;
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
        self.shared.free_ports_of_subscriber(mem, sub)
    }

    fn release(&self, p: Protocol, a: Ipv4Addr, port: u16) {
        if let (Protocol::Tcp, Some(mem)) = (p, self.shared.mem.get()) {
            if self.shared.lock().release(mem, a, port) {
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
        if let Some(mem) = self.shared.mem.get() {
            let mut book = self.shared.lock();
            book.maintain(mem, &self.pool);
            // Subscribers whose addresses hold no block any more are forgotten.
            self.shared.members().retain(|_, list| {
                list.retain(|x| !book.blocks_of(mem, x).is_empty());
                !list.is_empty()
            });
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
    /// The ring's positions: whether it has anything to drain.
    watch: RingWatch,
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
                let mem = B4Blocks { mem: fp.port_blocks()?, size: b.size };
                if b.mem.set(mem).is_err() {
                    return Err(xdp::Error::Bpf("port blocks already in use by another fast path".into()));
                }
                let (ring, watch) = fp.created_ring()?;
                let st =
                    CreationState { ring, maps: fp.session_probe()?, drained: 0, conflicts: 0, fins: 0, fins_stale: 0 };
                Some(Creation { shared: b, watch, st: Mutex::new(st) })
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
    /// still there). An empty ring costs no lock and no system call
    /// ([`xdp::RingWatch::is_empty`]: every event committed before the
    /// call is still entered on return).
    pub fn drain(&self, aftr: &Aftr, now: u64) -> usize {
        let Some(c) = &self.blocks else { return 0 };
        if c.watch.is_empty() {
            return 0;
        }
        let mut st = function::lock(&c.st);
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
            c.shared.adopted(s.b4, s.outside);
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
            let st = function::lock(&c.st);
            (st.fins, st.fins_stale)
        })
    }

    /// `ds_state`: the NAT44's size and limit, and the events drained.
    fn publish(&self, aftr: &Aftr) {
        if let Some(c) = &self.blocks {
            let drained = function::lock(&c.st).drained;
            self.publish_with(aftr, drained);
        }
    }

    fn publish_with(&self, aftr: &Aftr, drained: u64) {
        if let Some(b) = self.blocks.as_ref().and_then(|c| c.shared.mem.get()) {
            let mem = &b.mem;
            let n = aftr.nat();
            mem.set_state(n.len() as u64, drained, n.config().max_mappings as u64);
        }
    }

    /// Mappings the fast path created that the NAT44 entered, and those it
    /// did not (it had one of the same inside already).
    pub fn created(&self) -> (u64, u64) {
        self.blocks.as_ref().map_or((0, 0), |c| {
            let st = function::lock(&c.st);
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
