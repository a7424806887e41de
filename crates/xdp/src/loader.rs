//! Loading the programs, filling the maps, attaching to interfaces.

use crate::sys;
use crate::types::{maps, progs, Config, Count, Counter, Eam, FlowKey, Nat64Value, RelayKey, RelayValue};
use crate::Error;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, DevMapHash, HashMap, MapData, MapError, PerCpuArray, RingBuf};
use aya::programs::xdp::XdpLinkId;
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use std::collections::{BTreeMap, BTreeSet};
use xlat::addr::{Prefix4, Prefix6};

/// The BPF object built by build.rs from `bpf/v6gate.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/v6gate.bpf.o"));

/// Map sizes. Every table the slow path mirrors is bounded: a full map
/// means the overflow stays on the slow path (see [`Error::MapFull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// EAMT entries (each trie).
    pub eamt: u32,
    /// NAT64 session entries (two per session: one per direction).
    pub nat64_sessions: u32,
    /// TrGW relay entries (one per leg socket: four per stream).
    pub trgw_relays: u32,
    /// TrGW per-stream counter slots (`stats_index` < this).
    pub trgw_stats: u32,
    /// Interfaces the fast path may redirect to.
    pub tx_ports: u32,
    /// FIB cache entries per CPU (LRU; see [`FastPath::set_fib_cache`]).
    pub fib_cache: u32,
    /// Mirrored routes (each trie; see [`FastPath::route4_insert`]).
    pub routes: u32,
    /// Mirrored next hops (ids `0..nexthops`).
    pub nexthops: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            eamt: 4096,
            nat64_sessions: 262_144,
            trgw_relays: 65_536,
            trgw_stats: 65_536,
            tx_ports: 64,
            fib_cache: 16_384,
            routes: 4096,
            nexthops: 256,
        }
    }
}

/// How to attach to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// In the driver; falls back to generic (with a warning) when the
    /// driver cannot.
    #[default]
    Native,
    /// Generic XDP in the kernel's receive path (any interface, slower).
    Generic,
    /// Not attached: the slow path does everything.
    Off,
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "native" => Ok(Mode::Native),
            "generic" => Ok(Mode::Generic),
            "off" => Ok(Mode::Off),
            _ => Err(Error::Config(format!("xdp mode `{s}`: expected native, generic or off"))),
        }
    }
}

/// One attachment.
#[derive(Debug)]
pub struct Attachment {
    /// Interface name.
    pub iface: String,
    /// Interface index.
    pub ifindex: u32,
    /// The program attached (a [`progs`] name).
    pub program: &'static str,
    /// The mode in force (generic after a native fallback).
    pub mode: Mode,
    /// Why native attach failed, when it fell back to generic.
    pub fallback: Option<String>,
    pub(crate) link: XdpLinkId,
}

/// The result of one `BPF_PROG_TEST_RUN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    /// The XDP action (`XDP_PASS` = 2, `XDP_TX` = 3, `XDP_REDIRECT` = 4, ...).
    pub action: u32,
    /// The frame after the program.
    pub frame: Vec<u8>,
    /// Mean run time per repetition, nanoseconds (as the kernel reports it).
    pub ns_per_run: u64,
}

/// XDP actions.
pub mod action {
    /// Dropped with an error.
    pub const ABORTED: u32 = 0;
    /// Dropped.
    pub const DROP: u32 = 1;
    /// Up the stack: the slow path.
    pub const PASS: u32 = 2;
    /// Back out of the receiving interface.
    pub const TX: u32 = 3;
    /// Out of another interface (devmap).
    pub const REDIRECT: u32 = 4;
}

/// The loaded fast path: programs, maps and attachments. Dropping it
/// detaches every attachment (bpf_link) and unloads the programs.
pub struct FastPath {
    bpf: Ebpf,
    pub(crate) limits: Limits,
    pub(crate) config: Config,
    eamt: Vec<(Prefix6, Prefix4)>,
    attached: Vec<Attachment>,
    /// Interfaces in `tx_ports`.
    pub(crate) egress: BTreeSet<u32>,
    /// Prefixes in `routes4` / `routes6` (address, length) → next hop.
    pub(crate) routes4: BTreeMap<([u8; 4], u8), u32>,
    pub(crate) routes6: BTreeMap<([u8; 16], u8), u32>,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath").field("limits", &self.limits).field("attached", &self.attached).finish()
    }
}

/// The key was not there (a lookup or delete of an absent entry).
pub(crate) fn gone(e: &MapError) -> bool {
    matches!(e, MapError::KeyNotFound)
        || matches!(e, MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOENT))
}

/// The result `r` of a lookup or delete in map `map`: `None` when the key
/// was not there ([`gone`]), other errors as [`map_err`].
pub(crate) fn found<T>(map: &'static str, r: Result<T, MapError>) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(map_err(map, e)),
    }
}

pub(crate) fn map_err(map: &'static str, e: MapError) -> Error {
    match &e {
        // A full hash map says E2BIG, a full LPM trie ENOSPC.
        MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::E2BIG) => Error::MapFull(map),
        MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOSPC) => Error::MapFull(map),
        _ => Error::Bpf(format!("map {map}: {e}")),
    }
}

/// A ring buffer (`BPF_MAP_TYPE_RINGBUF`) of a loaded object on a handle
/// of its own (a duplicated fd), for a consumer that keeps it: aya maps
/// the ring's pages when the handle is made, so a consumer that drains
/// often holds one instead of making it per drain. Drain it with
/// [`drain_ring`].
pub(crate) fn own_ring(m: &aya::maps::Map, name: &'static str) -> Result<RingBuf<MapData>, Error> {
    let aya::maps::Map::RingBuf(d) = m else { return Err(Error::Bpf(format!("map {name}: not a ring buffer"))) };
    RingBuf::try_from(aya::maps::Map::RingBuf(dup_map(d, name)?)).map_err(|e| Error::Bpf(format!("map {name}: {e}")))
}

/// Map `name`'s data on a descriptor of its own (duplicated), for a
/// handle used beside the loader's (another thread, another lock).
pub(crate) fn dup_map(d: &MapData, name: &'static str) -> Result<MapData, Error> {
    use std::os::fd::AsFd as _;
    let fd = d.fd().as_fd().try_clone_to_owned().map_err(|e| Error::Bpf(format!("map {name}: dup: {e}")))?;
    MapData::from_fd(fd).map_err(|e| map_err(name, e))
}

/// Hand every record in `rb` to `f` (consuming it), oldest first; returns
/// how many.
pub(crate) fn drain_ring(rb: &mut RingBuf<MapData>, mut f: impl FnMut(&[u8])) -> usize {
    let mut n = 0;
    while let Some(item) = rb.next() {
        f(&item);
        n += 1;
    }
    n
}

impl FastPath {
    /// Load the programs and create the maps with `limits`. Fails with
    /// [`Error::Unavailable`] (naming the kernel's reason) when BPF cannot
    /// be used here (no `bpf()` syscall, no permission, ...).
    pub fn load(limits: Limits) -> Result<FastPath, Error> {
        for (what, n) in [
            ("eamt", limits.eamt),
            ("nat64-sessions", limits.nat64_sessions),
            ("trgw-relays", limits.trgw_relays),
            ("trgw-stats", limits.trgw_stats),
            ("tx-ports", limits.tx_ports),
            ("fib-cache", limits.fib_cache),
            ("routes", limits.routes),
            ("nexthops", limits.nexthops),
        ] {
            if n == 0 {
                return Err(Error::Config(format!("xdp limit {what} must be at least 1")));
            }
        }
        let mut bpf = EbpfLoader::new()
            .map_max_entries(maps::EAMT4, limits.eamt)
            .map_max_entries(maps::EAMT6, limits.eamt)
            .map_max_entries(maps::NAT64_SESSIONS, limits.nat64_sessions)
            .map_max_entries(maps::TRGW_RELAY, limits.trgw_relays)
            .map_max_entries(maps::TRGW_STATS, limits.trgw_stats)
            .map_max_entries(maps::TX_PORTS, limits.tx_ports)
            .map_max_entries(maps::FIB_CACHE, limits.fib_cache)
            .map_max_entries(maps::ROUTES4, limits.routes)
            .map_max_entries(maps::ROUTES6, limits.routes)
            .map_max_entries(maps::NEXTHOPS, limits.nexthops)
            .load(OBJECT)
            .map_err(|e| Error::Unavailable(format!("loading the BPF object: {}", chain(&e))))?;
        for name in [progs::SIIT, progs::NAT64, progs::TRGW, progs::GATE] {
            load_xdp(&mut bpf, name)?;
        }
        let mut fp = FastPath {
            bpf,
            limits,
            config: Config::default(),
            eamt: Vec::new(),
            attached: Vec::new(),
            egress: BTreeSet::new(),
            routes4: BTreeMap::new(),
            routes6: BTreeMap::new(),
        };
        fp.write_config()?;
        Ok(fp)
    }

    /// The map sizes in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The configuration entry as last written.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn write_config(&mut self) -> Result<(), Error> {
        let config = self.config;
        let mut a: Array<&mut MapData, Config> = Array::try_from(self.map_mut(maps::CONFIG)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::CONFIG)))?;
        a.set(0, config, 0).map_err(|e| map_err(maps::CONFIG, e))
    }

    pub(crate) fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, Error> {
        self.bpf.map_mut(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    pub(crate) fn map(&self, name: &'static str) -> Result<&aya::maps::Map, Error> {
        self.bpf.map(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    /// Mirror the SIIT configuration (pool6, EAMT, MTUs, TOS settings) and
    /// turn SIIT on. Replaces the previous SIIT state, as a reload does.
    pub fn set_siit(&mut self, cfg: &xlat::siit::Config) -> Result<(), Error> {
        let (c, eamt) = crate::config::siit(self.config, cfg)?;
        if eamt.len() > self.limits.eamt as usize {
            return Err(Error::Config(format!(
                "the EAMT has {} entries, the XDP limit is {}",
                eamt.len(),
                self.limits.eamt
            )));
        }
        // Turn SIIT off while the tries change, so no packet sees half a table.
        self.config.siit.flags = 0;
        self.write_config()?;
        self.clear_eamt()?;
        for &(p6, p4, e) in &eamt {
            self.insert_eam(p6, p4, e)?;
        }
        self.eamt = eamt.iter().map(|&(p6, p4, _)| (p6, p4)).collect();
        self.config = c;
        self.write_config()
    }

    /// Turn SIIT off on the fast path (every IP packet passes).
    pub fn siit_off(&mut self) -> Result<(), Error> {
        self.config.siit.flags = 0;
        self.write_config()
    }

    /// Turn the NAT64 fast path on with the RFC 7915 knobs of the NAT64's
    /// translator (`xcfg` as given to `nat64::Nat64::with_xlat`; its pool6
    /// and EAMT are not used: the sessions carry the addresses).
    pub fn set_nat64(&mut self, xcfg: &xlat::siit::Config) -> Result<(), Error> {
        if xcfg.lowest_ipv6_mtu < 1280 || xcfg.ipv6_mtu < 1280 || xcfg.ipv4_mtu < 68 {
            return Err(Error::Config("nat64: MTUs below the IPv4/IPv6 minimums".into()));
        }
        self.config.nat64 = crate::config::xlat_params(xcfg);
        self.write_config()
    }

    /// Reuse each `bpf_fib_lookup` answer for `ms` milliseconds (per CPU,
    /// keyed by every input of the lookup; 0 = look up every packet, the
    /// default). Route or neighbour changes then reach the fast path
    /// within `ms`; the lookup is most of the per-packet cost.
    pub fn set_fib_cache(&mut self, ms: u32) -> Result<(), Error> {
        if ms > 60_000 {
            return Err(Error::Config(format!("fib cache lifetime {ms} ms: at most 60000")));
        }
        self.config.fib_cache_ms = ms;
        self.write_config()
    }

    /// Turn the TrGW fast path on or off (relay entries stay in the map).
    pub fn set_trgw(&mut self, on: bool) -> Result<(), Error> {
        self.config.trgw_flags = if on { crate::types::TRGW_ON } else { 0 };
        self.write_config()
    }

    /// Turn the NAT64 fast path off (sessions stay in the map).
    pub fn nat64_off(&mut self) -> Result<(), Error> {
        self.config.nat64.flags = 0;
        self.write_config()
    }

    fn clear_eamt(&mut self) -> Result<(), Error> {
        let old = std::mem::take(&mut self.eamt);
        for (p6, p4) in old {
            let mut t4: LpmTrie<&mut MapData, [u8; 4], Eam> = LpmTrie::try_from(self.map_mut(maps::EAMT4)?)
                .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::EAMT4)))?;
            let _ = t4.remove(&Key::new(u32::from(p4.len()), p4.addr().octets()));
            let mut t6: LpmTrie<&mut MapData, [u8; 16], Eam> = LpmTrie::try_from(self.map_mut(maps::EAMT6)?)
                .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::EAMT6)))?;
            let _ = t6.remove(&Key::new(u32::from(p6.len()), p6.addr().octets()));
        }
        Ok(())
    }

    fn insert_eam(&mut self, p6: Prefix6, p4: Prefix4, e: Eam) -> Result<(), Error> {
        let mut t4: LpmTrie<&mut MapData, [u8; 4], Eam> = LpmTrie::try_from(self.map_mut(maps::EAMT4)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::EAMT4)))?;
        t4.insert(&Key::new(u32::from(p4.len()), p4.addr().octets()), e, 0).map_err(|e| map_err(maps::EAMT4, e))?;
        let mut t6: LpmTrie<&mut MapData, [u8; 16], Eam> = LpmTrie::try_from(self.map_mut(maps::EAMT6)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::EAMT6)))?;
        t6.insert(&Key::new(u32::from(p6.len()), p6.addr().octets()), e, 0).map_err(|e| map_err(maps::EAMT6, e))
    }

    /// Allow redirecting translated packets out of interface `ifindex`
    /// (every attached interface is added; add others the FIB may pick).
    pub fn allow_egress(&mut self, ifindex: u32) -> Result<(), Error> {
        let mut m: DevMapHash<&mut MapData> = DevMapHash::try_from(self.map_mut(maps::TX_PORTS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::TX_PORTS)))?;
        m.insert(ifindex, ifindex, None, 0).map_err(|e| match e {
            aya::maps::xdp::XdpMapError::MapError(e) => map_err(maps::TX_PORTS, e),
            e => Error::Bpf(format!("map {}: {e}", maps::TX_PORTS)),
        })?;
        self.egress.insert(ifindex);
        Ok(())
    }

    /// Stop redirecting to interface `ifindex` (packets the FIB sends there
    /// pass to the slow path). Returns false when it was not allowed.
    pub fn deny_egress(&mut self, ifindex: u32) -> Result<bool, Error> {
        if !self.egress.remove(&ifindex) {
            return Ok(false);
        }
        let mut m: DevMapHash<&mut MapData> = DevMapHash::try_from(self.map_mut(maps::TX_PORTS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::TX_PORTS)))?;
        match m.remove(ifindex) {
            Ok(()) | Err(MapError::KeyNotFound) => Ok(true),
            Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(true),
            Err(e) => Err(map_err(maps::TX_PORTS, e)),
        }
    }

    /// The interfaces packets may be redirected to (indexes).
    pub fn egress(&self) -> impl Iterator<Item = u32> + '_ {
        self.egress.iter().copied()
    }

    /// Attach the combined program (`xdp_gate`) to `iface` through a
    /// bpf_link: a crash of the process detaches it. `Mode::Native` falls
    /// back to generic, logging a warning and recording why in the
    /// returned [`Attachment::fallback`]; `Mode::Off` attaches nothing.
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<Option<&Attachment>, Error> {
        self.attach_program(iface, mode, progs::GATE)
    }

    /// [`FastPath::attach`] with one function's program (`progs::SIIT`,
    /// `progs::NAT64`, `progs::TRGW` or `progs::GATE`).
    pub fn attach_program(&mut self, iface: &str, mode: Mode, program: &str) -> Result<Option<&Attachment>, Error> {
        let program = [progs::SIIT, progs::NAT64, progs::TRGW, progs::GATE]
            .into_iter()
            .find(|p| *p == program)
            .ok_or_else(|| Error::Config(format!("no XDP program {program}")))?;
        if mode == Mode::Off {
            return Ok(None);
        }
        let ifindex = sys::if_index(iface).ok_or_else(|| Error::Interface(format!("no interface {iface}")))?;
        if self.attached.iter().any(|a| a.ifindex == ifindex) {
            return Err(Error::Interface(format!("{iface}: already attached")));
        }
        let prog = self.xdp_mut(program)?;
        let (link, used, fallback) = attach_link(prog, iface, ifindex, mode)?;
        self.attached.push(Attachment { iface: iface.to_owned(), ifindex, program, mode: used, fallback, link });
        if let Err(e) = self.allow_egress(ifindex) {
            let _ = self.detach(iface);
            return Err(e);
        }
        Ok(self.attached.last())
    }

    /// Detach from `iface`. Returns false when it was not attached.
    pub fn detach(&mut self, iface: &str) -> Result<bool, Error> {
        let Some(i) = self.attached.iter().position(|a| a.iface == iface) else { return Ok(false) };
        let a = self.attached.remove(i);
        let prog = self.xdp_mut(a.program)?;
        prog.detach(a.link).map_err(|e| Error::Interface(format!("{iface}: detach failed: {}", chain(&e))))?;
        Ok(true)
    }

    /// Detach from every interface.
    pub fn detach_all(&mut self) -> Result<(), Error> {
        let names: Vec<String> = self.attached.iter().map(|a| a.iface.clone()).collect();
        for n in names {
            self.detach(&n)?;
        }
        Ok(())
    }

    /// The attachments in force.
    pub fn attachments(&self) -> &[Attachment] {
        &self.attached
    }

    fn xdp_mut(&mut self, name: &str) -> Result<&mut Xdp, Error> {
        self.bpf
            .program_mut(name)
            .ok_or_else(|| Error::Bpf(format!("program {name} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {name}: {e}")))
    }

    fn xdp(&self, name: &str) -> Result<&Xdp, Error> {
        self.bpf
            .program(name)
            .ok_or_else(|| Error::Bpf(format!("program {name} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {name}: {e}")))
    }

    /// Fast-path counters summed over CPUs, in [`Counter::ALL`] order.
    pub fn counters(&self) -> Result<Vec<(Counter, Count)>, Error> {
        let a: PerCpuArray<&MapData, Count> = PerCpuArray::try_from(self.map(maps::COUNTERS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::COUNTERS)))?;
        let mut out = Vec::with_capacity(Counter::ALL.len());
        for &c in Counter::ALL {
            let v = a.get(&(c as u32), 0).map_err(|e| map_err(maps::COUNTERS, e))?;
            let sum = v.iter().fold(Count::default(), |s, x| Count {
                packets: s.packets.wrapping_add(x.packets),
                bytes: s.bytes.wrapping_add(x.bytes),
            });
            out.push((c, sum));
        }
        Ok(out)
    }

    /// Counters as a name → value map (for display and tests).
    pub fn counter_map(&self) -> Result<BTreeMap<&'static str, Count>, Error> {
        Ok(self.counters()?.into_iter().map(|(c, v)| (c.label(), v)).collect())
    }

    /// Run program `prog` once per repetition over `frame` with
    /// `BPF_PROG_TEST_RUN`, as if received on `ingress_ifindex` (an
    /// interface of the caller's network namespace; the FIB lookups use
    /// that namespace). The frame is not sent anywhere.
    pub fn test_run(&self, prog: &str, frame: &[u8], ingress_ifindex: u32, repeat: u32) -> Result<TestResult, Error> {
        test_run_once(self.xdp(prog)?, frame, ingress_ifindex, repeat)
    }

    // ---- NAT64 and TrGW tables (filled by the slow path) ----

    /// Mirror one direction of an established NAT64 session.
    pub fn nat64_insert(&mut self, key: &FlowKey, value: &Nat64Value) -> Result<(), Error> {
        let mut m: HashMap<&mut MapData, FlowKey, Nat64Value> = HashMap::try_from(self.map_mut(maps::NAT64_SESSIONS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::NAT64_SESSIONS)))?;
        m.insert(key, value, 0).map_err(|e| map_err(maps::NAT64_SESSIONS, e))
    }

    /// Remove one direction of a NAT64 session; false when absent.
    pub fn nat64_remove(&mut self, key: &FlowKey) -> Result<bool, Error> {
        let mut m: HashMap<&mut MapData, FlowKey, Nat64Value> = HashMap::try_from(self.map_mut(maps::NAT64_SESSIONS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::NAT64_SESSIONS)))?;
        match m.remove(key) {
            Ok(()) => Ok(true),
            Err(MapError::KeyNotFound) => Ok(false),
            Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(map_err(maps::NAT64_SESSIONS, e)),
        }
    }

    /// The entry of a NAT64 session direction (with its last-seen time).
    pub fn nat64_get(&self, key: &FlowKey) -> Result<Option<Nat64Value>, Error> {
        let m: HashMap<&MapData, FlowKey, Nat64Value> = HashMap::try_from(self.map(maps::NAT64_SESSIONS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::NAT64_SESSIONS)))?;
        match m.get(key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(maps::NAT64_SESSIONS, e)),
        }
    }

    /// Mirror one TrGW relay leg.
    pub fn relay_insert(&mut self, key: &RelayKey, value: &RelayValue) -> Result<(), Error> {
        if value.stats_index >= self.limits.trgw_stats {
            return Err(Error::Config(format!(
                "relay stats_index {} beyond the trgw-stats limit {}",
                value.stats_index, self.limits.trgw_stats
            )));
        }
        let mut m: HashMap<&mut MapData, RelayKey, RelayValue> = HashMap::try_from(self.map_mut(maps::TRGW_RELAY)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::TRGW_RELAY)))?;
        m.insert(key, value, 0).map_err(|e| map_err(maps::TRGW_RELAY, e))
    }

    /// Remove one TrGW relay leg; false when absent.
    pub fn relay_remove(&mut self, key: &RelayKey) -> Result<bool, Error> {
        let mut m: HashMap<&mut MapData, RelayKey, RelayValue> = HashMap::try_from(self.map_mut(maps::TRGW_RELAY)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::TRGW_RELAY)))?;
        match m.remove(key) {
            Ok(()) => Ok(true),
            Err(MapError::KeyNotFound) => Ok(false),
            Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(map_err(maps::TRGW_RELAY, e)),
        }
    }

    /// The fast path's packet and byte counts of relay slot `index`, summed
    /// over CPUs (add them to the slow path's own counts).
    pub fn relay_stats(&self, index: u32) -> Result<Count, Error> {
        let a: PerCpuArray<&MapData, Count> = PerCpuArray::try_from(self.map(maps::TRGW_STATS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::TRGW_STATS)))?;
        let v = a.get(&index, 0).map_err(|e| map_err(maps::TRGW_STATS, e))?;
        Ok(v.iter().fold(Count::default(), |s, x| Count {
            packets: s.packets.wrapping_add(x.packets),
            bytes: s.bytes.wrapping_add(x.bytes),
        }))
    }
}

impl Drop for FastPath {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}

/// Attach `prog` to `ifindex` through a bpf_link: `Mode::Native` in the
/// driver, falling back to generic with a warning (the reason returned);
/// otherwise generic. The one attach path of every XDP program of v6gate.
pub(crate) fn attach_link(
    prog: &mut Xdp,
    iface: &str,
    ifindex: u32,
    mode: Mode,
) -> Result<(XdpLinkId, Mode, Option<String>), Error> {
    match mode {
        Mode::Native => match prog.attach_to_if_index(ifindex, XdpMode::Driver) {
            Ok(l) => Ok((l, Mode::Native, None)),
            Err(e) => {
                let why = chain(&e);
                let l = prog.attach_to_if_index(ifindex, XdpMode::Skb).map_err(|e2| {
                    Error::Interface(format!("{iface}: native XDP failed ({why}); generic failed too ({})", chain(&e2)))
                })?;
                log::warn!("xdp: {iface}: native XDP not available ({why}); attached in generic mode");
                Ok((l, Mode::Generic, Some(why)))
            }
        },
        Mode::Generic => {
            let l = prog
                .attach_to_if_index(ifindex, XdpMode::Skb)
                .map_err(|e| Error::Interface(format!("{iface}: generic XDP attach failed: {}", chain(&e))))?;
            Ok((l, Mode::Generic, None))
        }
        Mode::Off => Err(Error::Config(format!("{iface}: attach with mode off"))),
    }
}

/// XDP program `name` of `bpf`.
pub(crate) fn xdp_mut<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp, Error> {
    bpf.program_mut(name)
        .ok_or_else(|| Error::Bpf(format!("program {name} missing from the object")))?
        .try_into()
        .map_err(|e| Error::Bpf(format!("program {name}: {e}")))
}

/// Loads XDP program `name` of `bpf` into the kernel.
pub(crate) fn load_xdp(bpf: &mut Ebpf, name: &str) -> Result<(), Error> {
    xdp_mut(bpf, name)?.load().map_err(|e| Error::Unavailable(format!("loading program {name}: {}", chain(&e))))
}

/// A `struct xdp_md` for BPF_PROG_TEST_RUN: a frame of `len` bytes
/// received on `ingress_ifindex` (fields data, data_end, data_meta,
/// ingress_ifindex, rx_queue_index, egress_ifindex).
pub(crate) fn xdp_md(len: u32, ingress_ifindex: u32) -> [u8; 24] {
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&len.to_ne_bytes());
    ctx[12..16].copy_from_slice(&ingress_ifindex.to_ne_bytes());
    ctx
}

/// `BPF_PROG_TEST_RUN` of `p` over `frame` (not live: nothing is sent),
/// `repeat` runs, as received on `ingress_ifindex`.
pub(crate) fn test_run_once(p: &Xdp, frame: &[u8], ingress_ifindex: u32, repeat: u32) -> Result<TestResult, Error> {
    let len = u32::try_from(frame.len()).map_err(|_| Error::Config("frame too large".into()))?;
    let ctx = xdp_md(len, ingress_ifindex);
    let mut out = vec![0u8; frame.len() + 256];
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(frame);
    opts.data_out = Some(&mut out);
    opts.ctx_in = Some(&ctx);
    opts.repeat = repeat.max(1);
    let r = p.test_run(opts).map_err(|e| Error::Unavailable(format!("BPF_PROG_TEST_RUN: {}", chain(&e))))?;
    out.truncate(r.data_size_out as usize);
    Ok(TestResult { action: r.return_value, frame: out, ns_per_run: r.duration.as_nanos() as u64 })
}

/// An error and its sources on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A per-CPU counter summed over the CPUs.
pub(crate) fn per_cpu_sum(v: &aya::maps::PerCpuValues<Count>) -> Count {
    v.iter().fold(Count::default(), |s, x| Count {
        packets: s.packets.wrapping_add(x.packets),
        bytes: s.bytes.wrapping_add(x.bytes),
    })
}
