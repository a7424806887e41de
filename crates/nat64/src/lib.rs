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
//!
//! Where each part of RFC 6146 lives: `state` (§3.1/§3.2 the BIB and
//! session tables and their shared operations), `tuple` (§3.4/§3.6 the
//! incoming and outgoing tuples), `from6` and `from4` (§3.5 the two
//! directions), `hairpin` (§3.8), `icmp` (ICMP errors about a flow),
//! `frag` (§3.4 reassembly), `pool` (pool4, RFC 6056 port selection),
//! `tcp` (§3.5.2 the TCP state machine), `expire` and `wheel` (lifetimes),
//! `admin` (counters, listings, static BIB entries), `reload` (carrying
//! state into a new configuration) and `config`.
//!
//! `pool`, `frag`, `tcp` and `wheel` are public so that the `softwire`
//! crate's NAT44 (the DS-Lite AFTR and the lwB4) reuses the port
//! allocation, outer-packet reassembly, TCP state machine and timer wheel
//! instead of keeping copies.
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod config;
pub mod frag;
pub mod pool;
mod rewrite;
pub mod tcp;
pub mod wheel;

mod admin;
mod blocks;
mod expire;
mod fastpath;
mod from4;
mod from6;
mod hairpin;
mod icmp;
mod reload;
mod state;
mod tuple;

pub use admin::{BibInfo, SessionFilter, SessionInfo, Stats};
pub use blocks::{BlockBook, BlockStats, HeapBlocks, PortBlockMem, MAX_BLOCKS_PER_HOST, MAX_BLOCK_PORTS};
pub use config::{Config, ConfigError, Mode, Pool4Entry, Protocol, StaticBib, EXAMPLE_TOML};
pub use expire::Expired;
pub use fastpath::{Created, FastHook};
pub use state::BibOrigin;
pub use tcp::TcpState;

use frag::Reassembler;
use pool::Pool;
use state::{Counters, Held, Shard, V4Key, T6};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use wheel::Wheel;
use xlat::addr::Rfc6052;
use xlat::siit::Translator;
use xlat::{DropReason, Out, Verdict};

/// Hash maps of the state tables: foldhash with a random per-process seed
/// (fast on the small fixed-size keys here, seeded so table layouts cannot
/// be predicted from outside).
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

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
    /// Added static entries a reload could not keep (see [`Nat64::bib_lost`]).
    lost_bib: Vec<(StaticBib, String)>,
    /// A fast path told of new sessions ([`Nat64::set_fast_hook`]).
    fast: std::sync::RwLock<Option<std::sync::Arc<dyn FastHook>>>,
    /// NAT64 mode with a fast path: per-host TCP port blocks (`blocks`).
    blocks: Mutex<blocks::Table>,
}

// Indices into `Nat64::to` (timeouts in ns).
pub(crate) const TO_UDP: usize = 0;
pub(crate) const TO_ICMP: usize = 1;
pub(crate) const TO_EST: usize = 2;
pub(crate) const TO_TRANS: usize = 3;
pub(crate) const TO_SYN: usize = 4;

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
            lost_bib: Vec::new(),
            fast: std::sync::RwLock::new(None),
            blocks: Mutex::default(),
            cfg,
        };
        for b in nat.cfg.bib.clone() {
            nat.bib_insert_static(b, state::BibOrigin::Config)?;
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

    /// RFC 6146 §3.4: what feeding a fragment to the reassembler leads to:
    /// held, refused (a limit), or the whole datagram, handed to `next`.
    fn on_fragment(&self, fed: frag::Fed, next: impl FnOnce(&[u8]) -> Verdict) -> Verdict {
        match fed {
            frag::Fed::Held => Verdict::Drop(DropReason::FragmentHeld),
            frag::Fed::Refused => Verdict::Drop(DropReason::FragmentLimit),
            frag::Fed::Done(full) => {
                self.c.reassembled.fetch_add(1, Ordering::Relaxed);
                next(&full)
            }
        }
    }

    /// Translate one L3 packet (IPv4 or IPv6, by the version nibble) at
    /// time `now` (monotonic nanoseconds). Clears `out` first. On
    /// [`Verdict::Emit`] `out` holds the translated packet(s) and/or an ICMP
    /// error for the sender (a refused new flow: the reason is counted in
    /// [`Stats::refused`]). Thread-safe; call from every worker.
    pub fn translate(&self, pkt: &[u8], now: u64, out: &mut Out) -> Verdict {
        out.clear();
        // Sessions a fast path created first (NAT-PT): the packet may be
        // one of theirs.
        self.fast_drain();
        let v = match pkt.first().map(|b| b >> 4) {
            Some(6) => {
                self.c.in6.fetch_add(1, Ordering::Relaxed);
                self.from6(pkt, now, out, false)
            }
            Some(4) => {
                self.c.in4.fetch_add(1, Ordering::Relaxed);
                self.from4(pkt, now, out, tuple::Via::Wire)
            }
            _ => Verdict::Drop(DropReason::UnknownVersion),
        };
        match v {
            Verdict::Emit => {
                self.c.emitted.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Drop(r) => {
                // Nothing half-built (a hairpin's first pass) goes out.
                out.clear();
                self.count_drop(r);
            }
        }
        v
    }
}
