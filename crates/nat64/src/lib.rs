//! # nat64 — the v6gate stateful translation plane
//!
//! RFC 6146 stateful NAT64 and NAT-PT pool mode (RFC 2766 behaviour, the
//! Napt-d TrGW model) on top of the RFC 7915 packet plane in `xlat`:
//! this crate owns the state (BIB, sessions, held SYNs, fragments) and
//! decides the addresses and ports of every packet; `xlat` writes the
//! translated headers, ICMP and checksums
//! ([`xlat::siit::Translator::translate_with`]) and this crate then
//! rewrites ports and ICMP identifiers in place.
//!
//! Concurrency: [`Nat64::translate`] takes `&self` and is called from one
//! worker per core. The tables are split into shards by the IPv6 host
//! address (each a short-held `Mutex`), a second sharded index maps IPv4
//! transport addresses back to their IPv6 owner, and pool4 ports are
//! claimed in lock-free bitmaps; there is no global lock on the packet
//! path (the held-SYN store and the fragment buffer are locked only for
//! unsolicited IPv4 SYNs and fragments). Expiry runs from
//! [`Nat64::expire`] over one hashed timing wheel per shard.
//!
//! Time is the caller's monotonic clock in nanoseconds (`now: u64`), so
//! tests drive a fake clock.
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod config;
mod frag;
mod pool;
mod rewrite;
pub mod tcp;
pub mod wheel;

pub use config::{Config, ConfigError, Mode, Pool4Entry, Protocol, StaticBib, EXAMPLE_TOML};
pub use tcp::TcpState;

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use frag::{Fed, Reassembler};
use pool::Pool;
use rewrite::Ports;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Hash maps of the state tables: foldhash with a random per-process seed
/// (fast on the small fixed-size keys here, seeded so table layouts cannot
/// be predicted from outside).
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use tcp::{Lifetime, Side};
use wheel::Wheel;
use xlat::addr::{Mapper, Rfc6052};
use xlat::siit::{AddrMap, Role, Translator};
use xlat::wire::icmp::{is_error_v4, is_error_v6, v4 as icmp4, v6 as icmp6};
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::ipv6::Ipv6Packet;
use xlat::wire::proto;
use xlat::{DropReason, Out, PacketKind, Verdict};

const NS: u64 = 1_000_000_000;
/// Timer wheel: 100 ms ticks, 4096 slots (a revolution of ~7 minutes).
const TICK_NS: u64 = 100_000_000;
const WHEEL_SLOTS: usize = 4096;

/// Errors from building or changing the translator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The configuration is invalid (the key is named).
    Config(ConfigError),
    /// A static BIB entry could not be added or removed.
    Bib(String),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Config(e) => write!(f, "{e}"),
            Error::Bib(m) => write!(f, "bib: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

/// An IPv6 transport address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct T6 {
    addr: Ipv6Addr,
    port: u16,
}

/// An IPv4 transport address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct T4 {
    addr: Ipv4Addr,
    port: u16,
}

/// Session key: protocol, the IPv6 host's transport address (X, x) and the
/// IPv4 peer's (Y, y). For ICMP the peer's "port" is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SessKey {
    p: Protocol,
    x: T6,
    y: T4,
}

#[derive(Debug, Clone, Copy)]
struct Bib {
    t: T4,
    sessions: u32,
    is_static: bool,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    t: T4,
    state: Option<TcpState>,
    expires: u64,
    created: u64,
}

/// NAT-PT: the address an IPv6 host holds and how many BIB entries use it.
#[derive(Debug, Clone, Copy)]
struct Host {
    addr: Ipv4Addr,
    bibs: u32,
    pinned: bool,
}

/// IPv4-side index key. NAT-PT mode indexes whole addresses (`p = None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct V4Key {
    p: Option<Protocol>,
    t: T4,
}

#[derive(Debug)]
struct Shard {
    bib: Map<(Protocol, T6), Bib>,
    sessions: Map<SessKey, Session>,
    /// Sessions per (BIB entry, peer address): address-dependent filtering.
    peers: Map<(Protocol, T6, Ipv4Addr), u32>,
    hosts: Map<Ipv6Addr, Host>,
    wheel: Wheel<SessKey>,
}

/// An unsolicited IPv4 SYN held for `tcp-incoming-syn-timeout`.
#[derive(Debug)]
struct Held {
    t: T4,
    y: T4,
    deadline: u64,
    pkt: Vec<u8>,
}

/// Refusal of a new flow.
#[derive(Debug, Clone, Copy)]
struct Refusal {
    reason: DropReason,
    /// ICMP (type, code) to send back, in the packet's family.
    icmp: Option<(u8, u8)>,
}

const fn refuse(reason: DropReason, icmp: Option<(u8, u8)>) -> Refusal {
    Refusal { reason, icmp }
}

#[derive(Debug)]
struct Counters {
    in6: AtomicU64,
    in4: AtomicU64,
    emitted: AtomicU64,
    hairpinned: AtomicU64,
    created: [AtomicU64; 3],
    expired: [AtomicU64; 3],
    drops: Box<[AtomicU64]>,
    refused: Box<[AtomicU64]>,
    held_expired: AtomicU64,
    frag_expired: AtomicU64,
    reassembled: AtomicU64,
}

fn reason_idx(r: DropReason) -> usize {
    DropReason::ALL.iter().position(|x| *x == r).unwrap_or(0)
}

/// Counters and table sizes (`v6gate ctl nat64 stats`, `/metrics`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct Stats {
    /// Packets in from the IPv6 side.
    pub packets_6to4: u64,
    /// Packets in from the IPv4 side.
    pub packets_4to6: u64,
    /// Inputs that produced output (translated or an ICMP error).
    pub emitted: u64,
    /// Packets hairpinned (RFC 6146 §3.8).
    pub hairpinned: u64,
    /// Drops by reason (`DropReason::as_str`), including refused new flows.
    pub drops: BTreeMap<&'static str, u64>,
    /// New flows refused, by reason (a subset of the drops; an ICMP error
    /// may have been sent).
    pub refused: BTreeMap<&'static str, u64>,
    /// Sessions now, per protocol.
    pub sessions: BTreeMap<&'static str, u64>,
    /// BIB entries now, per protocol.
    pub bib: BTreeMap<&'static str, u64>,
    /// Sessions created since start, per protocol.
    pub sessions_created: BTreeMap<&'static str, u64>,
    /// Sessions expired since start, per protocol.
    pub sessions_expired: BTreeMap<&'static str, u64>,
    /// pool4 ports (or identifiers) per protocol: total.
    pub pool4_ports: BTreeMap<&'static str, u64>,
    /// pool4 ports per protocol: in use.
    pub pool4_ports_used: BTreeMap<&'static str, u64>,
    /// pool4 addresses.
    pub pool4_addresses: u64,
    /// NAT-PT: addresses held by IPv6 hosts.
    pub natpt_hosts: u64,
    /// Unsolicited IPv4 SYNs held now.
    pub held_syns: u64,
    /// Held SYNs answered with ICMP Port Unreachable after their timeout.
    pub held_syns_expired: u64,
    /// Datagrams in reassembly now.
    pub fragment_sets: u64,
    /// Datagrams reassembled.
    pub reassembled: u64,
    /// Reassemblies given up after `fragment-timeout`.
    pub fragment_sets_expired: u64,
}

/// One session, for `v6gate ctl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SessionInfo {
    /// Protocol.
    pub protocol: Protocol,
    /// IPv6 host (X, x).
    pub ipv6_src: SocketAddrV6,
    /// IPv4 peer as the IPv6 host sees it (Y', y).
    pub ipv6_dst: SocketAddrV6,
    /// The host's pool4 transport address (T, t).
    pub ipv4_src: SocketAddrV4,
    /// The IPv4 peer (Y, y).
    pub ipv4_dst: SocketAddrV4,
    /// TCP state (`None` for UDP and ICMP).
    pub state: Option<TcpState>,
    /// Milliseconds until it expires (0 if overdue).
    pub expires_in_ms: u64,
    /// Age in milliseconds.
    pub age_ms: u64,
}

/// One BIB entry, for `v6gate ctl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BibInfo {
    /// Protocol.
    pub protocol: Protocol,
    /// IPv6 transport address.
    pub ipv6: SocketAddrV6,
    /// IPv4 transport address.
    pub ipv4: SocketAddrV4,
    /// Configured or added with [`Nat64::bib_add`].
    pub is_static: bool,
    /// Sessions using it.
    pub sessions: u32,
}

/// Which sessions [`Nat64::sessions`] lists. Empty filter: all.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this protocol.
    pub protocol: Option<Protocol>,
    /// Only this IPv6 host.
    pub ipv6: Option<Ipv6Addr>,
    /// Only this IPv4 address (pool4 side or peer).
    pub ipv4: Option<Ipv4Addr>,
    /// At most this many (0: no limit).
    pub limit: usize,
}

/// What [`Nat64::expire`] did and what it has to send.
#[derive(Debug, Default)]
pub struct Expired {
    /// Sessions deleted.
    pub sessions: usize,
    /// TCP sessions moved to TRANS.
    pub to_trans: usize,
    /// ICMPv4 errors to send to the IPv4 side (Port Unreachable for held
    /// SYNs nobody answered, RFC 6146 §3.5.2.2), complete IPv4 packets.
    pub icmp: Vec<Vec<u8>>,
}

/// The stateful translator. See the crate documentation.
#[derive(Debug)]
pub struct Nat64 {
    cfg: Config,
    xl: Translator,
    p6: Rfc6052,
    pool: Pool,
    shards: Box<[Mutex<Shard>]>,
    v4idx: Box<[Mutex<Map<V4Key, T6>>]>,
    held: Mutex<Vec<Held>>,
    held_n: AtomicUsize,
    reasm: Reassembler,
    n_bib: AtomicUsize,
    n_sess: AtomicUsize,
    bib_by: [AtomicUsize; 3],
    sess_by: [AtomicUsize; 3],
    c: Counters,
    keys: foldhash::fast::RandomState,
    to: [u64; 6],
}

// Indices into `Nat64::to` (timeouts in ns).
const TO_UDP: usize = 0;
const TO_ICMP: usize = 1;
const TO_EST: usize = 2;
const TO_TRANS: usize = 3;
const TO_SYN: usize = 4;

/// Addresses for one translation, by role (see [`AddrMap`]).
#[derive(Debug, Clone, Copy)]
struct Fixed {
    v4: [Ipv4Addr; 4],
    v6: [Ipv6Addr; 4],
}

#[inline]
fn role_idx(r: Role) -> usize {
    match r {
        Role::Src => 0,
        Role::Dst => 1,
        Role::InnerSrc => 2,
        Role::InnerDst => 3,
    }
}

impl AddrMap for Fixed {
    #[inline]
    fn map_6to4(&self, _siit: &Mapper, role: Role, _a: &Ipv6Addr) -> Option<Ipv4Addr> {
        Some(self.v4[role_idx(role)])
    }
    #[inline]
    fn map_4to6(&self, _siit: &Mapper, role: Role, _a: Ipv4Addr) -> Option<Ipv6Addr> {
        Some(self.v6[role_idx(role)])
    }
}

/// Transport identity of a packet: protocol, ports (or ICMP id), TCP flags.
#[derive(Debug, Clone, Copy)]
struct Flow {
    p: Protocol,
    sport: u16,
    dport: u16,
    flags: u8,
}

/// Ports / identifier of an upper-layer header. A packet quoted in an ICMP
/// error may be cut after its first 8 bytes (RFC 792), which still hold
/// the ports and the echo identifier.
fn flow_of(upper: u8, l4: &[u8], v6: bool, quoted: bool) -> Result<Flow, DropReason> {
    match upper {
        proto::UDP | proto::TCP => {
            let min = match (quoted, upper) {
                (true, _) => 8,
                (false, proto::UDP) => 8,
                (false, _) => 20,
            };
            if l4.len() < min {
                return Err(DropReason::Truncated);
            }
            let p = if upper == proto::UDP { Protocol::Udp } else { Protocol::Tcp };
            let flags = if upper == proto::TCP && l4.len() > 13 { l4[13] } else { 0 };
            Ok(Flow { p, sport: u16::from_be_bytes([l4[0], l4[1]]), dport: u16::from_be_bytes([l4[2], l4[3]]), flags })
        }
        proto::ICMP | proto::ICMPV6 if (upper == proto::ICMPV6) == v6 => {
            if l4.len() < 8 {
                return Err(DropReason::Truncated);
            }
            let echo = if v6 {
                matches!(l4[0], icmp6::ECHO_REQUEST | icmp6::ECHO_REPLY)
            } else {
                matches!(l4[0], icmp4::ECHO_REQUEST | icmp4::ECHO_REPLY)
            };
            if !echo {
                return Err(DropReason::IcmpUntranslatable);
            }
            let id = u16::from_be_bytes([l4[4], l4[5]]);
            Ok(Flow { p: Protocol::Icmp, sport: id, dport: id, flags: 0 })
        }
        _ => Err(DropReason::UnsupportedProtocol),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Nat64 {
    /// Build from a checked configuration, with RFC 7915 defaults for the
    /// header rules (MTUs 1500, `lowest-ipv6-mtu` 1280, ...).
    pub fn new(cfg: Config) -> Result<Nat64, Error> {
        Self::with_xlat(cfg, xlat::siit::Config::default())
    }

    /// Build with the RFC 7915 knobs of `xcfg` (MTUs, TOS/Traffic Class,
    /// `ipv4-address`, ...); its `pool6`, `eamt` and `mapping` are replaced
    /// by this configuration's `pool6`.
    pub fn with_xlat(cfg: Config, xcfg: xlat::siit::Config) -> Result<Nat64, Error> {
        cfg.check()?;
        let mut xcfg = xcfg;
        xcfg.pool6 = Some(cfg.pool6);
        xcfg.eamt.clear();
        xcfg.mapping = xlat::siit::MappingMode::Rfc6052;
        let xl = Translator::new(xcfg).map_err(Error::Config)?;
        let p6 = Rfc6052::new(cfg.pool6)
            .map_err(|e| Error::Config(ConfigError { key: "nat64.pool6", msg: e.to_string() }))?;
        let n = cfg.shard_count();
        // With preallocate-tables, each shard gets its share of the hard
        // limits plus slack for an uneven spread.
        let (ns, nb) = if cfg.preallocate_tables {
            (cfg.max_sessions / n + cfg.max_sessions / (4 * n) + 16, cfg.max_bib / n + cfg.max_bib / (4 * n) + 16)
        } else {
            (0, 0)
        };
        let shards = (0..n)
            .map(|_| {
                Mutex::new(Shard {
                    bib: Map::with_capacity_and_hasher(nb, Default::default()),
                    sessions: Map::with_capacity_and_hasher(ns, Default::default()),
                    peers: Map::with_capacity_and_hasher(ns, Default::default()),
                    hosts: Map::default(),
                    wheel: Wheel::new(WHEEL_SLOTS, TICK_NS, 0),
                })
            })
            .collect();
        let v4idx = (0..n).map(|_| Mutex::new(Map::with_capacity_and_hasher(nb, Default::default()))).collect();
        let nreasons = DropReason::ALL.len();
        let to = [
            cfg.udp_timeout.0 * NS,
            cfg.icmp_timeout.0 * NS,
            cfg.tcp_est_timeout.0 * NS,
            cfg.tcp_trans_timeout.0 * NS,
            cfg.tcp_incoming_syn_timeout.0 * NS,
            cfg.fragment_timeout.0 * NS,
        ];
        let nat = Nat64 {
            pool: Pool::new(&cfg),
            reasm: Reassembler::new(to[5], cfg.max_fragment_sets, cfg.max_fragment_bytes),
            xl,
            p6,
            shards,
            v4idx,
            held: Mutex::new(Vec::new()),
            held_n: AtomicUsize::new(0),
            n_bib: AtomicUsize::new(0),
            n_sess: AtomicUsize::new(0),
            bib_by: Default::default(),
            sess_by: Default::default(),
            c: Counters {
                in6: AtomicU64::new(0),
                in4: AtomicU64::new(0),
                emitted: AtomicU64::new(0),
                hairpinned: AtomicU64::new(0),
                created: Default::default(),
                expired: Default::default(),
                drops: (0..nreasons).map(|_| AtomicU64::new(0)).collect(),
                refused: (0..nreasons).map(|_| AtomicU64::new(0)).collect(),
                held_expired: AtomicU64::new(0),
                frag_expired: AtomicU64::new(0),
                reassembled: AtomicU64::new(0),
            },
            keys: foldhash::fast::RandomState::default(),
            to,
            cfg,
        };
        for b in nat.cfg.bib.clone() {
            nat.bib_add(b)?;
        }
        Ok(nat)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The RFC 7915 translator used for headers.
    pub fn translator(&self) -> &Translator {
        &self.xl
    }

    #[inline]
    fn shard_of6(&self, a: &Ipv6Addr) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        (self.keys.hash_one(a) % self.shards.len() as u64) as usize
    }

    #[inline]
    fn shard_of4(&self, k: &V4Key) -> usize {
        if self.v4idx.len() == 1 {
            return 0;
        }
        (self.keys.hash_one(k) % self.v4idx.len() as u64) as usize
    }

    fn v4key(&self, p: Protocol, t: T4) -> V4Key {
        match self.cfg.mode {
            Mode::Nat64 => V4Key { p: Some(p), t },
            Mode::Natpt => V4Key { p: None, t: T4 { addr: t.addr, port: 0 } },
        }
    }

    fn idle_timeout(&self, p: Protocol) -> u64 {
        match p {
            Protocol::Udp => self.to[TO_UDP],
            Protocol::Icmp => self.to[TO_ICMP],
            Protocol::Tcp => self.to[TO_EST],
        }
    }

    fn count_drop(&self, r: DropReason) {
        self.c.drops[reason_idx(r)].fetch_add(1, Ordering::Relaxed);
    }

    fn count_refused(&self, r: DropReason) {
        self.c.refused[reason_idx(r)].fetch_add(1, Ordering::Relaxed);
    }

    /// Translate one L3 packet (IPv4 or IPv6, by the version nibble) at
    /// time `now` (monotonic nanoseconds). Clears `out` first. On
    /// [`Verdict::Emit`] `out` holds the translated packet(s) and/or an ICMP
    /// error for the sender (a refused new flow: the reason is counted in
    /// [`Stats::refused`]). Thread-safe; call from every worker.
    pub fn translate(&self, pkt: &[u8], now: u64, out: &mut Out) -> Verdict {
        out.clear();
        let v = match pkt.first().map(|b| b >> 4) {
            Some(6) => {
                self.c.in6.fetch_add(1, Ordering::Relaxed);
                self.from6(pkt, now, out, true)
            }
            Some(4) => {
                self.c.in4.fetch_add(1, Ordering::Relaxed);
                self.from4(pkt, now, out, true)
            }
            _ => Verdict::Drop(DropReason::UnknownVersion),
        };
        match v {
            Verdict::Emit => {
                self.c.emitted.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Drop(r) => self.count_drop(r),
        }
        v
    }

    /// Answer a refused packet with the ICMP error RFC 6146 names, or drop.
    fn refuse_v6(&self, r: Refusal, pkt: &[u8], out: &mut Out) -> Verdict {
        self.count_refused(r.reason);
        if let Some((t, c)) = r.icmp {
            out.clear();
            if self.xl.icmp6_error(out, pkt, t, c, [0; 4]) {
                return Verdict::Emit;
            }
        }
        Verdict::Drop(r.reason)
    }

    fn refuse_v4(&self, r: Refusal, pkt: &[u8], out: &mut Out) -> Verdict {
        self.count_refused(r.reason);
        if let Some((t, c)) = r.icmp {
            out.clear();
            // From the address the sender tried to reach (a pool4 address),
            // as the host behind it would answer.
            let src = Ipv4Packet::new_quoted(pkt).ok().map(|ip| ip.dst());
            if self.xl.icmp4_error(out, src, pkt, t, c, [0; 4]) {
                return Verdict::Emit;
            }
        }
        Verdict::Drop(r.reason)
    }

    // ---------------------------------------------------------------- IPv6 in

    fn from6(&self, pkt: &[u8], now: u64, out: &mut Out, may_reassemble: bool) -> Verdict {
        let ip = match Ipv6Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let chain = match ip.walk() {
            Ok(c) => c,
            Err(e) => return Verdict::Drop(e.into()),
        };
        // RFC 6146 §3.4: reassemble fragments before looking at state.
        if let Some(f) = chain.frag.filter(|f| !f.is_atomic()) {
            if !may_reassemble || chain.segments_left_at.is_some() || xlat::wire::ipv6::is_extension_header(f.next) {
                // Let RFC 7915 refuse what it refuses (Segments Left,
                // extension after fragment), statelessly.
                return self.xl.translate(pkt, out);
            }
            return match self.reasm.feed_v6(&ip, f, now) {
                Fed::Held => Verdict::Drop(DropReason::FragmentHeld),
                Fed::Refused => Verdict::Drop(DropReason::FragmentLimit),
                Fed::Done(full) => {
                    self.c.reassembled.fetch_add(1, Ordering::Relaxed);
                    self.from6(&full, now, out, false)
                }
            };
        }
        let (src6, dst6) = (ip.src(), ip.dst());
        // A source inside pool6 is one of our own translations coming back.
        if self.cfg.pool6.contains(&src6) {
            return Verdict::Drop(DropReason::HairpinLoop);
        }
        let Some(y) = self.p6.extract(&dst6) else {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        };
        if xlat::addr::is_forbidden_v6(&src6) || xlat::addr::is_forbidden_v4(y) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }
        let l4 = &pkt[chain.upper_at.min(pkt.len())..];
        if chain.upper == proto::ICMPV6 && l4.len() >= 8 && is_error_v6(l4[0]) {
            return self.icmp_error_6to4(pkt, &src6, y, l4, out);
        }
        let flow = match flow_of(chain.upper, l4, true, false) {
            Ok(f) => f,
            Err(r) => return Verdict::Drop(r),
        };
        let x = T6 { addr: src6, port: flow.sport };
        let yt = T4 { addr: y, port: if flow.p == Protocol::Icmp { 0 } else { flow.dport } };
        let t = match self.state_6to4(flow, x, yt, now) {
            Ok(t) => t,
            Err(r) => return self.refuse_v6(r, pkt, out),
        };
        let map = Fixed { v4: [t.addr, y, t.addr, y], v6: [src6; 4] };
        let v = self.xl.translate_with(&map, pkt, out);
        if v != Verdict::Emit {
            return v;
        }
        let ports = match flow.p {
            Protocol::Icmp => Ports { id: Some(t.port), ..Ports::default() },
            _ => Ports { src: Some(t.port), ..Ports::default() },
        };
        for i in 0..out.len() {
            if let Some((PacketKind::Forward, b)) = out.get_mut(i) {
                rewrite::outer(b, ports);
            }
        }
        // RFC 6146 §3.8 hairpinning: the destination is one of our own
        // pool4 addresses, so the IPv4 packet comes straight back in.
        if self.pool.contains(y) {
            return self.hairpin(now, out);
        }
        Verdict::Emit
    }

    /// The 6→4 pass left one IPv4 packet in `out`; run it through the
    /// IPv4 side. Refusals are not answered (the sender is behind us and
    /// its IPv4 form is our own address): the packet is dropped.
    fn hairpin(&self, now: u64, out: &mut Out) -> Verdict {
        self.c.hairpinned.fetch_add(1, Ordering::Relaxed);
        if out.len() != 1 || out.get(0).is_some_and(|(k, _)| k != PacketKind::Forward) {
            // An ICMP error for the sender (e.g. Hop Limit) goes back as is;
            // a fragmented hairpin is not supported.
            return if out.get(0).is_some_and(|(k, _)| k == PacketKind::IcmpError) {
                Verdict::Emit
            } else {
                out.clear();
                Verdict::Drop(DropReason::Unsupported)
            };
        }
        let mut scratch = out.take_scratch();
        scratch.clear();
        if let Some((_, p)) = out.get(0) {
            scratch.extend_from_slice(p);
        }
        let v = self.from4(&scratch, now, out, false);
        out.put_scratch(scratch);
        if v == Verdict::Emit && out.iter().any(|(k, _)| k == PacketKind::IcmpError) {
            out.clear();
            return Verdict::Drop(DropReason::HairpinLoop);
        }
        v
    }

    /// RFC 6146 §3.5.1 / §3.5.2 / §3.5.3, IPv6 side: find or create the BIB
    /// entry and session for `x` → `y`; returns the IPv4 source (T, t).
    fn state_6to4(&self, flow: Flow, x: T6, y: T4, now: u64) -> Result<T4, Refusal> {
        let key = SessKey { p: flow.p, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if let Some(s) = sh.sessions.get_mut(&key) {
            self.touch(s, Side::V6, flow, now);
            return Ok(s.t);
        }
        // CLOSED: only a V6 SYN opens a TCP session; another segment is
        // translated through an existing BIB entry without creating state,
        // and dropped when there is none.
        if flow.p == Protocol::Tcp && flow.flags & tcp::SYN == 0 {
            return match sh.bib.get(&(flow.p, x)) {
                Some(b) => Ok(b.t),
                None => Err(refuse(DropReason::NoSession, None)),
            };
        }
        // RFC 6146 §3.5.1.1: when no transport address or BIB entry can be
        // had, "the NAT64 SHOULD send an ICMPv6 Destination Unreachable
        // error message with Code 3 (Address Unreachable)".
        let unreach = Some((icmp6::DEST_UNREACH, icmp6::CODE_ADDR_UNREACH));
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return Err(refuse(DropReason::SessionTableFull, unreach));
        }
        let t = match self.bib_get_or_create(&mut sh, flow.p, x, y.addr) {
            Ok(t) => t,
            Err(r) => {
                self.n_sess.fetch_sub(1, Ordering::AcqRel);
                return Err(refuse(r, unreach));
            }
        };
        let (state, life) = match flow.p {
            Protocol::Tcp => (Some(TcpState::V6Init), self.to[TO_TRANS]),
            p => (None, self.idle_timeout(p)),
        };
        self.insert_session(&mut sh, key, t, state, now, now.saturating_add(life));
        drop(sh);
        // Simultaneous open: a held V4 SYN for this connection is discarded.
        if flow.p == Protocol::Tcp && self.held_n.load(Ordering::Acquire) > 0 {
            let mut held = lock(&self.held);
            let before = held.len();
            held.retain(|h| !(h.t == t && h.y == y));
            self.held_n.fetch_sub(before - held.len(), Ordering::AcqRel);
        }
        Ok(t)
    }

    fn touch(&self, s: &mut Session, side: Side, flow: Flow, now: u64) {
        match s.state {
            Some(st) => {
                let (next, life) = tcp::step(st, side, flow.flags, self.cfg.handle_rst_during_fin_rcv);
                s.state = Some(next);
                match life {
                    Lifetime::Keep => {}
                    Lifetime::Est => s.expires = now.saturating_add(self.to[TO_EST]),
                    Lifetime::Trans => s.expires = now.saturating_add(self.to[TO_TRANS]),
                }
            }
            None => s.expires = now.saturating_add(self.idle_timeout(flow.p)),
        }
    }

    fn insert_session(&self, sh: &mut Shard, key: SessKey, t: T4, state: Option<TcpState>, now: u64, expires: u64) {
        sh.sessions.insert(key, Session { t, state, expires, created: now });
        sh.wheel.insert(expires, key);
        if let Some(b) = sh.bib.get_mut(&(key.p, key.x)) {
            b.sessions += 1;
        }
        *sh.peers.entry((key.p, key.x, key.y.addr)).or_insert(0) += 1;
        self.sess_by[key.p.idx()].fetch_add(1, Ordering::Relaxed);
        self.c.created[key.p.idx()].fetch_add(1, Ordering::Relaxed);
    }

    /// The BIB entry of `(p, x)`, created if missing (the caller holds the
    /// owner shard). Dynamic entries get a port by RFC 6056 algorithm 3
    /// (NAT64) or the host's whole address (NAT-PT).
    fn bib_get_or_create(&self, sh: &mut Shard, p: Protocol, x: T6, y: Ipv4Addr) -> Result<T4, DropReason> {
        if let Some(b) = sh.bib.get(&(p, x)) {
            return Ok(b.t);
        }
        if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return Err(DropReason::BibFull);
        }
        let t = match self.cfg.mode {
            Mode::Nat64 => match self.pool.alloc(p, &x.addr, x.port, y, self.cfg.max_port_probes) {
                Some((a, port)) => {
                    let t = T4 { addr: a, port };
                    let k = self.v4key(p, t);
                    lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
                    t
                }
                None => {
                    self.n_bib.fetch_sub(1, Ordering::AcqRel);
                    return Err(DropReason::Pool4Exhausted);
                }
            },
            Mode::Natpt => {
                let addr = match sh.hosts.get_mut(&x.addr) {
                    Some(h) => {
                        h.bibs += 1;
                        h.addr
                    }
                    None => {
                        let Some(a) = self.pool.claim_addr(&x.addr) else {
                            self.n_bib.fetch_sub(1, Ordering::AcqRel);
                            return Err(DropReason::Pool4Exhausted);
                        };
                        sh.hosts.insert(x.addr, Host { addr: a, bibs: 1, pinned: false });
                        let k = self.v4key(p, T4 { addr: a, port: 0 });
                        lock(&self.v4idx[self.shard_of4(&k)]).insert(k, T6 { addr: x.addr, port: 0 });
                        a
                    }
                };
                T4 { addr, port: x.port }
            }
        };
        sh.bib.insert((p, x), Bib { t, sessions: 0, is_static: false });
        self.bib_by[p.idx()].fetch_add(1, Ordering::Relaxed);
        Ok(t)
    }

    /// Remove a BIB entry and give back what it held (caller holds the shard).
    fn bib_drop(&self, sh: &mut Shard, p: Protocol, x: T6) {
        let Some(b) = sh.bib.remove(&(p, x)) else { return };
        self.n_bib.fetch_sub(1, Ordering::AcqRel);
        self.bib_by[p.idx()].fetch_sub(1, Ordering::Relaxed);
        match self.cfg.mode {
            Mode::Nat64 => {
                let k = self.v4key(p, b.t);
                let mut idx = lock(&self.v4idx[self.shard_of4(&k)]);
                if idx.get(&k) == Some(&x) {
                    idx.remove(&k);
                }
                drop(idx);
                self.pool.release(p, b.t.addr, b.t.port);
            }
            Mode::Natpt => {
                let Some(h) = sh.hosts.get_mut(&x.addr) else { return };
                h.bibs = h.bibs.saturating_sub(1);
                if h.bibs == 0 && !h.pinned {
                    let a = h.addr;
                    sh.hosts.remove(&x.addr);
                    let k = self.v4key(p, T4 { addr: a, port: 0 });
                    lock(&self.v4idx[self.shard_of4(&k)]).remove(&k);
                    self.pool.release_addr(a);
                }
            }
        }
    }

    /// Remove a session (caller holds the shard); drops its BIB entry when
    /// it was the last session of a dynamic entry.
    fn session_drop(&self, sh: &mut Shard, key: &SessKey) -> bool {
        if sh.sessions.remove(key).is_none() {
            return false;
        }
        self.n_sess.fetch_sub(1, Ordering::AcqRel);
        self.sess_by[key.p.idx()].fetch_sub(1, Ordering::Relaxed);
        let pk = (key.p, key.x, key.y.addr);
        if let Some(n) = sh.peers.get_mut(&pk) {
            *n -= 1;
            if *n == 0 {
                sh.peers.remove(&pk);
            }
        }
        let mut gone = false;
        if let Some(b) = sh.bib.get_mut(&(key.p, key.x)) {
            b.sessions = b.sessions.saturating_sub(1);
            gone = b.sessions == 0 && !b.is_static;
        }
        if gone {
            self.bib_drop(sh, key.p, key.x);
        }
        true
    }

    // ---------------------------------------------------------------- IPv4 in

    fn from4(&self, pkt: &[u8], now: u64, out: &mut Out, may_reassemble: bool) -> Verdict {
        let ip = match Ipv4Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if !ip.checksum_ok() {
            return Verdict::Drop(DropReason::BadIpv4Checksum);
        }
        if ip.is_fragment() {
            if !may_reassemble {
                return Verdict::Drop(DropReason::Unsupported);
            }
            return match self.reasm.feed_v4(&ip, now) {
                Fed::Held => Verdict::Drop(DropReason::FragmentHeld),
                Fed::Refused => Verdict::Drop(DropReason::FragmentLimit),
                Fed::Done(full) => {
                    self.c.reassembled.fetch_add(1, Ordering::Relaxed);
                    self.from4(&full, now, out, false)
                }
            };
        }
        let (src4, dst4) = (ip.src(), ip.dst());
        let l4 = ip.payload();
        if ip.protocol() == proto::ICMP && l4.len() >= 8 && is_error_v4(l4[0]) {
            return self.icmp_error_4to6(pkt, src4, dst4, l4, out);
        }
        if !self.pool.contains(dst4) {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        }
        if xlat::addr::is_forbidden_v4(src4) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }
        let Some(y6) = self.p6.embed(src4) else {
            return Verdict::Drop(DropReason::UntranslatableSource);
        };
        let flow = match flow_of(ip.protocol(), l4, false, false) {
            Ok(f) => f,
            Err(r) => return Verdict::Drop(r),
        };
        let t = T4 { addr: dst4, port: flow.dport };
        let y = T4 { addr: src4, port: if flow.p == Protocol::Icmp { 0 } else { flow.sport } };
        let x = match self.state_4to6(flow, t, y, now, pkt) {
            Ok(x) => x,
            Err(r) if r.reason == DropReason::SynHeld => return Verdict::Drop(DropReason::SynHeld),
            Err(r) => return self.refuse_v4(r, pkt, out),
        };
        let map = Fixed { v4: [src4; 4], v6: [y6, x.addr, y6, x.addr] };
        let v = self.xl.translate_with(&map, pkt, out);
        if v != Verdict::Emit {
            return v;
        }
        let ports = match flow.p {
            Protocol::Icmp => Ports { id: Some(x.port), ..Ports::default() },
            _ => Ports { dst: Some(x.port), ..Ports::default() },
        };
        for i in 0..out.len() {
            if let Some((PacketKind::Forward, b)) = out.get_mut(i) {
                rewrite::outer(b, ports);
            }
        }
        Verdict::Emit
    }

    /// The IPv6 owner of pool4 transport address `t`.
    fn owner_of(&self, p: Protocol, t: T4) -> Option<T6> {
        let k = self.v4key(p, t);
        let owner = *lock(&self.v4idx[self.shard_of4(&k)]).get(&k)?;
        Some(match self.cfg.mode {
            Mode::Nat64 => owner,
            Mode::Natpt => T6 { addr: owner.addr, port: t.port },
        })
    }

    /// RFC 6146 §3.5.1 / §3.5.2 / §3.5.3, IPv4 side: the IPv6 destination
    /// (X, x) of a packet from `y` to pool4 address `t`.
    fn state_4to6(&self, flow: Flow, t: T4, y: T4, now: u64, pkt: &[u8]) -> Result<T6, Refusal> {
        let syn = flow.p == Protocol::Tcp && flow.flags & tcp::SYN != 0;
        // "If the NAT64 does not find a BIB entry ... the packet is
        // discarded" — UDP: "the NAT64 SHOULD send an ICMP Destination
        // Unreachable error message with code 3 (Port Unreachable)".
        let no_bib = match flow.p {
            Protocol::Udp => refuse(DropReason::NoBinding, Some((icmp4::DEST_UNREACH, 3))),
            _ => refuse(DropReason::NoBinding, None),
        };
        // "... with code 13 (Communication Administratively Prohibited)".
        let prohibited = Some((icmp4::DEST_UNREACH, icmp4::CODE_ADMIN_PROHIBITED));
        let Some(x) = self.owner_of(flow.p, t) else {
            if syn {
                return Err(self.hold_syn(t, y, now, pkt));
            }
            return Err(no_bib);
        };
        let key = SessKey { p: flow.p, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        match sh.bib.get(&(flow.p, x)) {
            Some(b) if b.t == t => {}
            _ => {
                drop(sh);
                if syn {
                    return Err(self.hold_syn(t, y, now, pkt));
                }
                return Err(no_bib);
            }
        }
        if let Some(s) = sh.sessions.get_mut(&key) {
            self.touch(s, Side::V4, flow, now);
            return Ok(x);
        }
        let allowed = !self.cfg.address_dependent_filtering || sh.peers.contains_key(&(flow.p, x, y.addr));
        match flow.p {
            Protocol::Tcp => {
                // CLOSED, not a SYN: translated through the BIB entry, no state.
                if !syn {
                    return Ok(x);
                }
                if self.cfg.drop_externally_initiated_tcp {
                    return Err(refuse(DropReason::ExternallyInitiatedTcp, None));
                }
                if !allowed {
                    drop(sh);
                    return Err(self.hold_syn(t, y, now, pkt));
                }
            }
            _ if !allowed => return Err(refuse(DropReason::Filtered, prohibited)),
            _ => {}
        }
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return Err(refuse(DropReason::SessionTableFull, prohibited));
        }
        // A V4 SYN through a BIB entry, allowed by the filter: translated,
        // session in V4 INIT with the transitory lifetime.
        let (state, life) = match flow.p {
            Protocol::Tcp => (Some(TcpState::V4Init), self.to[TO_TRANS]),
            p => (None, self.idle_timeout(p)),
        };
        self.insert_session(&mut sh, key, t, state, now, now.saturating_add(life));
        Ok(x)
    }

    /// RFC 6146 §3.5.2.2: an IPv4 SYN with no way in yet is held for
    /// TCP_INCOMING_SYN; a V6 SYN for the same connection discards it,
    /// otherwise [`Nat64::expire`] answers it with Port Unreachable.
    fn hold_syn(&self, t: T4, y: T4, now: u64, pkt: &[u8]) -> Refusal {
        if self.cfg.drop_externally_initiated_tcp {
            return refuse(DropReason::ExternallyInitiatedTcp, None);
        }
        let mut held = lock(&self.held);
        if held.iter().any(|h| h.t == t && h.y == y) {
            return refuse(DropReason::SynHeld, None);
        }
        if held.len() >= self.cfg.max_stored_pkts {
            return refuse(DropReason::Filtered, None);
        }
        held.push(Held { t, y, deadline: now.saturating_add(self.to[TO_SYN]), pkt: pkt.to_vec() });
        self.held_n.fetch_add(1, Ordering::AcqRel);
        refuse(DropReason::SynHeld, None)
    }

    // ---------------------------------------------------------- ICMP errors

    /// An ICMPv6 error from the IPv6 side about a packet (Y', y) → (X, x)
    /// that came through us: addresses and ports of the quoted packet go
    /// back through the BIB (RFC 6146 §3.5 and RFC 7915 §5.3); the outer
    /// source becomes T. No state is created or refreshed.
    fn icmp_error_6to4(&self, pkt: &[u8], _src6: &Ipv6Addr, y: Ipv4Addr, l4: &[u8], out: &mut Out) -> Verdict {
        let inner = &l4[8..];
        let Ok(q) = Ipv6Packet::new_quoted(inner) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let Ok(chain) = q.walk() else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let ql4 = &q.as_bytes()[chain.upper_at.min(q.as_bytes().len())..];
        if chain.upper == proto::ICMPV6 && !ql4.is_empty() && is_error_v6(ql4[0]) {
            return Verdict::Drop(DropReason::IcmpErrorInError);
        }
        let Ok(f) = flow_of(chain.upper, ql4, true, true) else {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        };
        let Some(qy) = self.p6.extract(&q.src()) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let x = T6 { addr: q.dst(), port: f.dport };
        let t = {
            let sh = lock(&self.shards[self.shard_of6(&x.addr)]);
            match sh.bib.get(&(f.p, x)) {
                Some(b) => b.t,
                None => return Verdict::Drop(DropReason::IcmpInnerUntranslatable),
            }
        };
        let map = Fixed { v4: [t.addr, y, qy, t.addr], v6: [Ipv6Addr::UNSPECIFIED; 4] };
        let v = self.xl.translate_with(&map, pkt, out);
        if v != Verdict::Emit {
            return v;
        }
        let ports = match f.p {
            Protocol::Icmp => Ports { id: Some(t.port), ..Ports::default() },
            _ => Ports { dst: Some(t.port), ..Ports::default() },
        };
        for i in 0..out.len() {
            if let Some((PacketKind::Forward, b)) = out.get_mut(i) {
                rewrite::inner(b, ports);
            }
        }
        Verdict::Emit
    }

    /// An ICMPv4 error from the IPv4 side about a packet (T, t) → (Y, y)
    /// we sent: the quoted source goes back to (X, x) through the BIB.
    fn icmp_error_4to6(&self, pkt: &[u8], src4: Ipv4Addr, dst4: Ipv4Addr, l4: &[u8], out: &mut Out) -> Verdict {
        if !self.pool.contains(dst4) {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        }
        let inner = &l4[8..];
        let Ok(q) = Ipv4Packet::new_quoted(inner) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let ql4 = q.payload();
        if q.frag_offset() != 0 {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        }
        if q.protocol() == proto::ICMP && !ql4.is_empty() && is_error_v4(ql4[0]) {
            return Verdict::Drop(DropReason::IcmpErrorInError);
        }
        let Ok(f) = flow_of(q.protocol(), ql4, false, true) else {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        };
        let t = T4 { addr: q.src(), port: f.sport };
        if t.addr != dst4 {
            return Verdict::Drop(DropReason::IcmpInnerUntranslatable);
        }
        let Some(x) = self.owner_of(f.p, t) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        let Some(qy6) = self.p6.embed(q.dst()) else { return Verdict::Drop(DropReason::IcmpInnerUntranslatable) };
        // The router's address under pool6; RFC 6791's fallback (xlat)
        // covers addresses pool6 cannot hold.
        let outer_src = self.p6.embed(src4).unwrap_or_else(|| self.xl.ipv6_address());
        let map = Fixed { v4: [src4; 4], v6: [outer_src, x.addr, x.addr, qy6] };
        let v = self.xl.translate_with(&map, pkt, out);
        if v != Verdict::Emit {
            return v;
        }
        let ports = match f.p {
            Protocol::Icmp => Ports { id: Some(x.port), ..Ports::default() },
            _ => Ports { src: Some(x.port), ..Ports::default() },
        };
        for i in 0..out.len() {
            if let Some((PacketKind::Forward, b)) = out.get_mut(i) {
                rewrite::inner(b, ports);
            }
        }
        Verdict::Emit
    }

    // ------------------------------------------------------------- expiry

    /// Expire what is due at `now`: sessions (TCP established-like ones
    /// move to TRANS first), their BIB entries when they were the last
    /// session of a dynamic entry (and in NAT-PT mode the host's address
    /// with its last entry), held SYNs (answered with ICMPv4 Port
    /// Unreachable, returned in [`Expired::icmp`]) and stale fragments.
    /// Call it every 100 ms–1 s; cost is proportional to what is due.
    pub fn expire(&self, now: u64) -> Expired {
        let mut rep = Expired::default();
        let mut due = Vec::new();
        for s in self.shards.iter() {
            let mut sh = lock(s);
            due.clear();
            sh.wheel.advance(now, |_, k| due.push(k));
            for k in &due {
                let Some(sess) = sh.sessions.get(k).copied() else { continue };
                if sess.expires > now {
                    sh.wheel.insert(sess.expires, *k);
                    continue;
                }
                if let Some(next) = sess.state.and_then(tcp::on_timeout) {
                    let exp = now.saturating_add(self.to[TO_TRANS]);
                    if let Some(s) = sh.sessions.get_mut(k) {
                        s.state = Some(next);
                        s.expires = exp;
                    }
                    sh.wheel.insert(exp, *k);
                    rep.to_trans += 1;
                    continue;
                }
                if self.session_drop(&mut sh, k) {
                    self.c.expired[k.p.idx()].fetch_add(1, Ordering::Relaxed);
                    rep.sessions += 1;
                }
            }
        }
        if self.held_n.load(Ordering::Acquire) > 0 {
            let mut held = lock(&self.held);
            let mut i = 0;
            let mut out = Out::new();
            while i < held.len() {
                if held[i].deadline <= now {
                    let h = held.swap_remove(i);
                    self.held_n.fetch_sub(1, Ordering::AcqRel);
                    self.c.held_expired.fetch_add(1, Ordering::Relaxed);
                    out.clear();
                    if self.xl.icmp4_error(&mut out, Some(h.t.addr), &h.pkt, icmp4::DEST_UNREACH, 3, [0; 4]) {
                        if let Some((_, b)) = out.get(0) {
                            rep.icmp.push(b.to_vec());
                        }
                    }
                } else {
                    i += 1;
                }
            }
        }
        let f = self.reasm.expire(now);
        self.c.frag_expired.fetch_add(f as u64, Ordering::Relaxed);
        rep
    }

    // ---------------------------------------------------------- inspection

    /// Counters and table sizes.
    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            packets_6to4: self.c.in6.load(Ordering::Relaxed),
            packets_4to6: self.c.in4.load(Ordering::Relaxed),
            emitted: self.c.emitted.load(Ordering::Relaxed),
            hairpinned: self.c.hairpinned.load(Ordering::Relaxed),
            held_syns: self.held_n.load(Ordering::Relaxed) as u64,
            held_syns_expired: self.c.held_expired.load(Ordering::Relaxed),
            fragment_sets: self.reasm.sets() as u64,
            reassembled: self.c.reassembled.load(Ordering::Relaxed),
            fragment_sets_expired: self.c.frag_expired.load(Ordering::Relaxed),
            ..Stats::default()
        };
        for (i, r) in DropReason::ALL.iter().enumerate() {
            let d = self.c.drops[i].load(Ordering::Relaxed);
            if d > 0 {
                s.drops.insert(r.as_str(), d);
            }
            let f = self.c.refused[i].load(Ordering::Relaxed);
            if f > 0 {
                s.refused.insert(r.as_str(), f);
            }
        }
        for p in Protocol::ALL {
            let n = p.as_str();
            s.sessions.insert(n, self.sess_by[p.idx()].load(Ordering::Relaxed) as u64);
            s.bib.insert(n, self.bib_by[p.idx()].load(Ordering::Relaxed) as u64);
            s.sessions_created.insert(n, self.c.created[p.idx()].load(Ordering::Relaxed));
            s.sessions_expired.insert(n, self.c.expired[p.idx()].load(Ordering::Relaxed));
            let (total, used) = self.pool.usage(p);
            s.pool4_ports.insert(n, total);
            s.pool4_ports_used.insert(n, used);
        }
        let (addrs, owned) = self.pool.addresses();
        s.pool4_addresses = addrs as u64;
        s.natpt_hosts = owned as u64;
        s
    }

    /// Sessions matching `filter`, at time `now` (for the expiry column).
    pub fn sessions(&self, filter: &SessionFilter, now: u64) -> Vec<SessionInfo> {
        let mut v = Vec::new();
        for s in self.shards.iter() {
            let sh = lock(s);
            for (k, sess) in &sh.sessions {
                if filter.protocol.is_some_and(|p| p != k.p)
                    || filter.ipv6.is_some_and(|a| a != k.x.addr)
                    || filter.ipv4.is_some_and(|a| a != k.y.addr && a != sess.t.addr)
                {
                    continue;
                }
                let yport = if k.p == Protocol::Icmp { sess.t.port } else { k.y.port };
                let y6 = self.p6.embed(k.y.addr).unwrap_or(Ipv6Addr::UNSPECIFIED);
                let xport = k.x.port;
                v.push(SessionInfo {
                    protocol: k.p,
                    ipv6_src: SocketAddrV6::new(k.x.addr, xport, 0, 0),
                    ipv6_dst: SocketAddrV6::new(y6, if k.p == Protocol::Icmp { xport } else { k.y.port }, 0, 0),
                    ipv4_src: SocketAddrV4::new(sess.t.addr, sess.t.port),
                    ipv4_dst: SocketAddrV4::new(k.y.addr, yport),
                    state: sess.state,
                    expires_in_ms: sess.expires.saturating_sub(now) / 1_000_000,
                    age_ms: now.saturating_sub(sess.created) / 1_000_000,
                });
                if filter.limit != 0 && v.len() >= filter.limit {
                    return v;
                }
            }
        }
        v.sort_by_key(|a| (a.protocol, a.ipv6_src, a.ipv4_dst));
        v
    }

    /// Every BIB entry.
    pub fn bib(&self) -> Vec<BibInfo> {
        let mut v = Vec::new();
        for s in self.shards.iter() {
            let sh = lock(s);
            for ((p, x), b) in &sh.bib {
                v.push(BibInfo {
                    protocol: *p,
                    ipv6: SocketAddrV6::new(x.addr, x.port, 0, 0),
                    ipv4: SocketAddrV4::new(b.t.addr, b.t.port),
                    is_static: b.is_static,
                    sessions: b.sessions,
                });
            }
        }
        v.sort_by_key(|a| (a.protocol, a.ipv4));
        v
    }

    /// Add a static BIB entry (IPv4 hosts can then open sessions to the
    /// IPv6 server). Refused when its IPv4 side is outside pool4, in use,
    /// or the IPv6 side already has an entry.
    pub fn bib_add(&self, e: StaticBib) -> Result<(), Error> {
        self.cfg.check_static(&e).map_err(Error::Bib)?;
        let x = T6 { addr: *e.ipv6.ip(), port: e.ipv6.port() };
        let t = T4 { addr: *e.ipv4.ip(), port: e.ipv4.port() };
        let p = e.protocol;
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if let Some(b) = sh.bib.get_mut(&(p, x)) {
            if b.t == t {
                b.is_static = true;
                return Ok(());
            }
            return Err(Error::Bib(format!("{p} {} already maps to {}:{}", e.ipv6, b.t.addr, b.t.port)));
        }
        if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Bib("max-bib reached".into()));
        }
        let fail = |m: String| {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            Err(Error::Bib(m))
        };
        match self.cfg.mode {
            Mode::Nat64 => {
                if !self.pool.claim(p, t.addr, t.port) {
                    return fail(format!("{p} {} is in use", e.ipv4));
                }
                let k = self.v4key(p, t);
                lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
            }
            Mode::Natpt => match sh.hosts.get_mut(&x.addr) {
                Some(h) if h.addr == t.addr => {
                    h.bibs += 1;
                    h.pinned = true;
                }
                Some(h) => return fail(format!("{} holds {} already", x.addr, h.addr)),
                None => {
                    if !self.pool.claim_this_addr(t.addr) {
                        return fail(format!("{} is held by another host", t.addr));
                    }
                    sh.hosts.insert(x.addr, Host { addr: t.addr, bibs: 1, pinned: true });
                    let k = self.v4key(p, t);
                    lock(&self.v4idx[self.shard_of4(&k)]).insert(k, T6 { addr: x.addr, port: 0 });
                }
            },
        }
        sh.bib.insert((p, x), Bib { t, sessions: 0, is_static: true });
        self.bib_by[p.idx()].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Remove a static BIB entry and its sessions.
    pub fn bib_remove(&self, e: StaticBib) -> Result<(), Error> {
        let x = T6 { addr: *e.ipv6.ip(), port: e.ipv6.port() };
        let t = T4 { addr: *e.ipv4.ip(), port: e.ipv4.port() };
        let p = e.protocol;
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        match sh.bib.get_mut(&(p, x)) {
            Some(b) if b.t == t && b.is_static => b.is_static = false,
            _ => return Err(Error::Bib(format!("no static {p} entry {} ↔ {}", e.ipv6, e.ipv4))),
        }
        if self.cfg.mode == Mode::Natpt {
            if let Some(h) = sh.hosts.get_mut(&x.addr) {
                h.pinned = false;
            }
        }
        let keys: Vec<SessKey> = sh.sessions.keys().filter(|k| k.p == p && k.x == x).copied().collect();
        for k in &keys {
            self.session_drop(&mut sh, k);
        }
        if sh.bib.contains_key(&(p, x)) {
            self.bib_drop(&mut sh, p, x);
        }
        Ok(())
    }

    /// Reload: build a translator for `cfg` that keeps every session and
    /// dynamic BIB entry whose pool4 transport address is still in the new
    /// pool4 (NAT-PT: whose host address is), and the static entries of
    /// the new configuration. Entries that no longer fit are dropped. The
    /// daemon swaps the returned instance in (e.g. with `ArcSwap`);
    /// counters restart. Call while `self` no longer receives packets, or
    /// accept that packets translated meanwhile by `self` are not carried.
    pub fn reconfigure(&self, cfg: Config, xcfg: xlat::siit::Config, now: u64) -> Result<Nat64, Error> {
        let next = Nat64::with_xlat(cfg, xcfg)?;
        let pool6_same = next.cfg.pool6 == self.cfg.pool6 && next.cfg.mode == self.cfg.mode;
        if !pool6_same {
            return Ok(next);
        }
        for s in self.shards.iter() {
            let sh = lock(s);
            let mut nsh_cache: Vec<(SessKey, Session)> = sh.sessions.iter().map(|(k, v)| (*k, *v)).collect();
            nsh_cache.sort_by_key(|(k, _)| (k.p, k.x.addr, k.x.port));
            for ((p, x), b) in &sh.bib {
                if b.is_static {
                    continue;
                }
                next.carry_bib(*p, *x, b.t);
            }
            for (k, v) in nsh_cache {
                next.carry_session(k, v, now);
            }
        }
        // Dynamic entries whose sessions did not fit would never expire.
        next.sweep_idle_bib();
        Ok(next)
    }

    fn carry_bib(&self, p: Protocol, x: T6, t: T4) {
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if sh.bib.contains_key(&(p, x)) {
            return;
        }
        if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let ok = match self.cfg.mode {
            Mode::Nat64 => {
                let ok = self.pool.claim(p, t.addr, t.port);
                if ok {
                    let k = self.v4key(p, t);
                    lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
                }
                ok
            }
            Mode::Natpt => match sh.hosts.get_mut(&x.addr) {
                Some(h) if h.addr == t.addr => {
                    h.bibs += 1;
                    true
                }
                Some(_) => false,
                None => {
                    let ok = self.pool.claim_this_addr(t.addr);
                    if ok {
                        sh.hosts.insert(x.addr, Host { addr: t.addr, bibs: 1, pinned: false });
                        let k = self.v4key(p, t);
                        lock(&self.v4idx[self.shard_of4(&k)]).insert(k, T6 { addr: x.addr, port: 0 });
                    }
                    ok
                }
            },
        };
        if !ok {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        sh.bib.insert((p, x), Bib { t, sessions: 0, is_static: false });
        self.bib_by[p.idx()].fetch_add(1, Ordering::Relaxed);
    }

    fn carry_session(&self, k: SessKey, s: Session, _now: u64) {
        let mut sh = lock(&self.shards[self.shard_of6(&k.x.addr)]);
        match sh.bib.get(&(k.p, k.x)) {
            Some(b) if b.t == s.t => {}
            _ => return,
        }
        if sh.sessions.contains_key(&k) {
            return;
        }
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.insert_session(&mut sh, k, s.t, s.state, s.created, s.expires);
        self.c.created[k.p.idx()].fetch_sub(1, Ordering::Relaxed);
    }

    /// Delete dynamic BIB entries left without sessions (after a reload
    /// carried a BIB entry whose sessions did not fit). Returns how many.
    fn sweep_idle_bib(&self) -> usize {
        let mut n = 0;
        for s in self.shards.iter() {
            let mut sh = lock(s);
            let idle: Vec<(Protocol, T6)> =
                sh.bib.iter().filter(|(_, b)| b.sessions == 0 && !b.is_static).map(|(k, _)| *k).collect();
            for (p, x) in idle {
                self.bib_drop(&mut sh, p, x);
                n += 1;
            }
        }
        n
    }
}
