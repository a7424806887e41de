//! NAT44 with the RFC 6888 carrier-grade NAT behaviour, keyed by the
//! softwire: the DS-Lite AFTR's NAT (RFC 6333 §6.6: the subscriber is the
//! B4's IPv6 address plus the inner IPv4 5-tuple, so overlapping private
//! addresses of different B4s never collide) and the lwB4's NAPT into its
//! port set (RFC 7596 §5.1).
//!
//! Reused from the NAT64 state plane (`nat64`): pool4 port allocation
//! (RFC 6056 algorithm 3, paired pooling by subscriber — RFC 6888 REQ-2 /
//! RFC 4787 REQ-2), the RFC 6146 TCP state machine (`nat64::tcp`, which
//! is the RFC 5382 life cycle with the IPv6 side read as the inside) and
//! the hashed timer wheel (`nat64::wheel`) with lazy expiry.
//!
//! Behaviour:
//! - endpoint-independent mapping (RFC 4787 REQ-1, RFC 5382 REQ-1): one
//!   external address and port per (B4, protocol, inside address, inside
//!   port), whatever the destination;
//! - endpoint-independent filtering (RFC 4787 REQ-8 option, RFC 6888 asks
//!   for it to be possible): any external host may use a mapping;
//! - a per-subscriber quota of external ports (RFC 6888 REQ-4,
//!   `max-ports-per-subscriber`) and a table limit (`max-mappings`), both
//!   counted when they refuse; the subscriber is the B4's IPv6 prefix of
//!   `subscriber-mask` bits (RFC 7785 §3: a /56 by default), not its
//!   address, so a B4 (or a host) using many addresses of its prefix still
//!   has one quota;
//! - hairpinning (RFC 6888 REQ-9 via RFC 4787 REQ-9 / RFC 5382 REQ-8),
//!   done by the engine with [`Nat44::inbound`] after [`Nat44::outbound`];
//! - a TCP mapping is only created by a SYN from inside (RFC 5382 §5);
//! - logging of every mapping's creation and deletion for abuse tracing
//!   (RFC 6888 §4 REQ-12 asks to be able to log; RFC 6302), one line per
//!   event, see [`log_line`].
//!
//! - with [`Nat44::set_mirror`], a list of [`Change`]s for a fast path
//!   (the AFTR's XDP program, `crate::fast`): a mapping is "carried" while
//!   its packets change nothing here but the idle timer (UDP and ICMP from
//!   creation, TCP from ESTABLISHED through the close: V4/V6 FIN RCV and
//!   V4 FIN + V6 FIN RCV, whose RST the fast path passes to the state
//!   machine here, whose FINs it passes or carries and tells afterwards
//!   ([`Nat44::carried`]), and whose last ACKs it carries; a carried packet
//!   of V4 FIN + V6 FIN RCV does not restart its transitory lifetime, as
//!   here); it goes up when that starts, down
//!   when it stops or the mapping is deleted, in the order the packets
//!   caused it. [`Nat44::expire_with`] asks the fast path when it last saw
//!   a carried mapping before deleting it (or ageing ESTABLISHED out).
//!   A TCP mapping is listed [`Change::HalfOpen`] when the B4's SYN
//!   creates it: the fast path carries only the outside SYN+ACK and
//!   records it; whenever the NAT next handles the mapping (a packet the
//!   fast path passed — FIN, RST, a retransmitted SYN —, or expiry) it
//!   asks the fast path ([`Nat44::set_probe`], [`Seen`]) and steps its
//!   state machine as if it had seen that SYN+ACK, then handles the rest.
//!
//! One mutex guards the tables (the standalone runner has one worker per
//! function); `nat64` shards by subscriber for multi-queue use and the
//! daemon integration will do the same here.

use crate::portset::PsidMap;
use crate::stats::Reason;
use budget::ClientKey;
use core::net::{Ipv4Addr, Ipv6Addr};
use nat64::config::Protocol;
use nat64::tcp::{self, Lifetime, Side, TcpState};
use nat64::wheel::Wheel;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

const NS: u64 = 1_000_000_000;

/// The inside of a mapping: the softwire and the private transport address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Inside {
    /// The B4's IPv6 address (the softwire).
    pub sub: Ipv6Addr,
    /// Protocol.
    pub proto: Protocol,
    /// Private source address.
    pub addr: Ipv4Addr,
    /// Private source port (ICMP query identifier).
    pub port: u16,
}

/// The outside of a mapping: a pool transport address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Outside {
    /// Protocol.
    pub proto: Protocol,
    /// Pool address.
    pub addr: Ipv4Addr,
    /// Pool port (ICMP query identifier).
    pub port: u16,
}

/// How a fast path carries a mapping: the last [`Change`] listed for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carry {
    No,
    /// TCP in V6 INIT: only the outside SYN+ACK.
    HalfOpen,
    /// Every packet but TCP SYN, FIN and RST.
    Full,
}

#[derive(Debug, Clone, Copy)]
struct Mapping {
    out: Outside,
    tcp: Option<TcpState>,
    expires: u64,
    created: u64,
    carried: Carry,
}

impl Mapping {
    /// How a fast path may carry it (see the module documentation): in
    /// full while its packets change nothing but the idle timer, half-open
    /// while TCP waits for the outside SYN.
    /// TCP through the close too: in V4 FIN RCV and V6 FIN RCV a packet
    /// other than FIN or RST only restarts the idle timer (as in
    /// ESTABLISHED), and in V4 FIN + V6 FIN RCV no packet changes
    /// anything; the fast path passes RST and passes or tells FIN
    /// ([`Nat44::carried`]), which step the state machine here.
    fn carriable(&self) -> Carry {
        match self.tcp {
            None | Some(TcpState::Established | TcpState::V4FinRcv | TcpState::V6FinRcv | TcpState::V4FinV6FinRcv) => {
                Carry::Full
            }
            Some(TcpState::V6Init) => Carry::HalfOpen,
            Some(_) => Carry::No,
        }
    }

    /// Whether a packet the fast path carried restarts the idle timer:
    /// not in V4 FIN + V6 FIN RCV, whose transitory lifetime runs from
    /// the second FIN whatever follows (RFC 6146 §3.5.2.2).
    fn refreshed_by_packets(&self) -> bool {
        self.carriable() == Carry::Full && self.tcp != Some(TcpState::V4FinV6FinRcv)
    }
}

/// A change of what a fast path may carry ([`Nat44::set_mirror`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The mapping's packets may take the fast path from now on.
    Up(Inside, Outside),
    /// A TCP mapping the B4's SYN created (V6 INIT): the fast path may
    /// carry its outside SYN+ACK only, and must record that it did
    /// ([`Seen::syn_ack`]).
    HalfOpen(Inside, Outside),
    /// A half-open mapping reached ESTABLISHED: carried as [`Change::Up`]
    /// from now on (what the fast path recorded was read).
    Opened(Inside, Outside),
    /// They must not any more (the mapping changes state or is gone).
    Down(Inside, Outside),
}

/// What a fast path recorded of a mapping it carries ([`Nat44::set_probe`],
/// [`Nat44::expire_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// When it last forwarded one of its packets (this NAT's clock).
    pub last_ns: Option<u64>,
    /// It carried the outside SYN+ACK of the half-open mapping.
    pub syn_ack: bool,
}

/// Asks a fast path what it recorded of a mapping at `now` (this NAT's
/// clock); `None`: not carried there.
pub type Probe = Box<dyn FnMut(&Inside, &Outside, u64) -> Option<Seen> + Send>;

/// The TCP ACK flag.
const ACK: u8 = 0x10;

/// Where external ports come from.
pub trait Ports: Send + Sync + fmt::Debug {
    /// A free external transport address for subscriber `sub`'s `port`
    /// first sent towards `dst`.
    fn alloc(&self, p: Protocol, sub: &Ipv6Addr, port: u16, dst: Ipv4Addr) -> Option<(Ipv4Addr, u16)>;
    /// Give one back.
    fn release(&self, p: Protocol, a: Ipv4Addr, port: u16);
    /// True when `a` is one of ours.
    fn contains(&self, a: Ipv4Addr) -> bool;
    /// (ports, ports in use) for `p`.
    fn usage(&self, p: Protocol) -> (u64, u64);
    /// Housekeeping at each expiry turn (port blocks given back).
    fn maintain(&self) {}
    /// Ports held for the subscriber of B4 address `sub` (every address
    /// of its prefix, [`Nat44Config::subscriber_mask`]) but not in use:
    /// the free ports of its port blocks (RFC 7422), which count against
    /// its quota.
    fn reserved(&self, _sub: &Ipv6Addr) -> u32 {
        0
    }
    /// [`Ports::alloc`] for a subscriber that may hold `room` more ports
    /// under its quota than it holds now (in use or reserved): an
    /// allocator that reserves ports ahead (port blocks) reserves no
    /// more than that.
    fn alloc_within(
        &self,
        p: Protocol,
        sub: &Ipv6Addr,
        port: u16,
        dst: Ipv4Addr,
        room: u32,
    ) -> Option<(Ipv4Addr, u16)> {
        let _ = room;
        self.alloc(p, sub, port, dst)
    }
}

/// The CGN's pool: `nat64`'s pool4 with RFC 6056 algorithm 3.
#[derive(Debug)]
pub struct PoolPorts {
    pool: nat64::pool::Pool,
    probes: u32,
}

impl PoolPorts {
    /// A pool of `entries` (address prefixes, port ranges, protocols);
    /// the search for a free port stops after `probes` tries per address.
    pub fn new(entries: Vec<nat64::Pool4Entry>, probes: u32) -> Self {
        let cfg = nat64::Config { pool4: entries, ..nat64::Config::default() };
        PoolPorts { pool: nat64::pool::Pool::new(&cfg), probes }
    }
}

impl Ports for PoolPorts {
    fn alloc(&self, p: Protocol, sub: &Ipv6Addr, port: u16, dst: Ipv4Addr) -> Option<(Ipv4Addr, u16)> {
        self.pool.alloc(p, sub, port, dst, self.probes)
    }
    fn release(&self, p: Protocol, a: Ipv4Addr, port: u16) {
        self.pool.release(p, a, port)
    }
    fn contains(&self, a: Ipv4Addr) -> bool {
        self.pool.contains(a)
    }
    fn usage(&self, p: Protocol) -> (u64, u64) {
        self.pool.usage(p)
    }
}

/// The lwB4's ports: one address, the ports of one PSID (RFC 7597 §5.1).
/// The inside port is kept when it is in the set (port preservation),
/// else the search starts at a hashed position and walks the set.
#[derive(Debug)]
pub struct SetPorts {
    addr: Ipv4Addr,
    map: PsidMap,
    psid: u16,
    used: Mutex<[Vec<u64>; 3]>,
    counts: [AtomicU64; 3],
}

impl SetPorts {
    /// The port set of `psid` under `map` on `addr`.
    pub fn new(addr: Ipv4Addr, map: PsidMap, psid: u16) -> Self {
        let words = (map.set_size() as usize).div_ceil(64);
        SetPorts {
            addr,
            map,
            psid,
            used: Mutex::new([vec![0; words], vec![0; words], vec![0; words]]),
            counts: Default::default(),
        }
    }

    /// Index of `port` within the set, if it is in it.
    fn index(&self, port: u16) -> Option<u32> {
        if !self.map.allowed(port, self.psid) {
            return None;
        }
        if self.map.is_full() {
            return Some(u32::from(port));
        }
        let m = 16 - self.map.offset() - self.map.psid_len();
        let a = if self.map.offset() == 0 { 0 } else { (u32::from(port) >> (16 - self.map.offset())) - 1 };
        Some((a << m) | (u32::from(port) & ((1 << m) - 1)))
    }
}

impl Ports for SetPorts {
    fn alloc(&self, p: Protocol, _sub: &Ipv6Addr, port: u16, dst: Ipv4Addr) -> Option<(Ipv4Addr, u16)> {
        let n = self.map.set_size();
        let mut g = function::lock(&self.used);
        let bits = &mut g[p.idx()];
        let start = self
            .index(port)
            .unwrap_or_else(|| (u32::from(port) ^ u32::from(dst).rotate_left(7)).wrapping_mul(2_654_435_761) % n);
        for k in 0..n {
            let i = (start + k) % n;
            let (w, b) = ((i / 64) as usize, 1u64 << (i % 64));
            if bits[w] & b == 0 {
                bits[w] |= b;
                self.counts[p.idx()].fetch_add(1, Ordering::Relaxed);
                return Some((self.addr, self.map.nth(self.psid, i)));
            }
        }
        None
    }
    fn release(&self, p: Protocol, a: Ipv4Addr, port: u16) {
        let Some(i) = self.index(port).filter(|_| a == self.addr) else { return };
        let mut g = function::lock(&self.used);
        let (w, b) = ((i / 64) as usize, 1u64 << (i % 64));
        if g[p.idx()][w] & b != 0 {
            g[p.idx()][w] &= !b;
            self.counts[p.idx()].fetch_sub(1, Ordering::Relaxed);
        }
    }
    fn contains(&self, a: Ipv4Addr) -> bool {
        a == self.addr
    }
    fn usage(&self, p: Protocol) -> (u64, u64) {
        (u64::from(self.map.set_size()), self.counts[p.idx()].load(Ordering::Relaxed))
    }
}

/// The default subscriber-mask: a /56, the prefix a CPE is commonly
/// delegated (RFC 7785 §3's example).
pub const DEFAULT_SUBSCRIBER_MASK: u8 = 56;

/// The subscriber (quota holder) of B4 address `b4` under `mask`.
pub fn subscriber(b4: &Ipv6Addr, mask: u8) -> ClientKey {
    ClientKey::v6(*b4, mask)
}

/// Limits and timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nat44Config {
    /// Mappings at most (all subscribers).
    pub max_mappings: usize,
    /// External ports one subscriber may hold at most (RFC 6888 REQ-4).
    pub max_ports_per_subscriber: u32,
    /// The subscriber of a B4 address: its prefix of this length (RFC
    /// 7785 §3 subscriber-mask; 128: the address itself).
    pub subscriber_mask: u8,
    /// UDP mapping lifetime (RFC 4787 REQ-5: at least 2 minutes; 5 by default).
    pub udp_timeout_ns: u64,
    /// ICMP query mapping lifetime (RFC 5508 REQ-1: 60 s).
    pub icmp_timeout_ns: u64,
    /// Established TCP lifetime (RFC 5382 REQ-5: 2 h 4 min).
    pub tcp_est_timeout_ns: u64,
    /// Transitory TCP lifetime (RFC 5382 REQ-5: 4 min).
    pub tcp_trans_timeout_ns: u64,
    /// Log every mapping created and deleted ([`log_line`]).
    pub log_mappings: bool,
}

impl Default for Nat44Config {
    fn default() -> Self {
        Nat44Config {
            max_mappings: 1 << 20,
            max_ports_per_subscriber: 2048,
            subscriber_mask: DEFAULT_SUBSCRIBER_MASK,
            udp_timeout_ns: 300 * NS,
            icmp_timeout_ns: 60 * NS,
            tcp_est_timeout_ns: 7440 * NS,
            tcp_trans_timeout_ns: 240 * NS,
            log_mappings: true,
        }
    }
}

/// A mapping, for listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingInfo {
    /// Inside.
    pub inside: Inside,
    /// Outside.
    pub outside: Outside,
    /// TCP state.
    pub tcp: Option<TcpState>,
    /// Seconds until it expires (from `now` of the listing).
    pub expires_in_s: u64,
}

#[derive(Default)]
struct ProbeSlot(Option<Probe>);

impl fmt::Debug for ProbeSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(probe)" } else { "None" })
    }
}

#[derive(Debug)]
struct Inner {
    by_in: Map<Inside, Mapping>,
    by_out: Map<Outside, Inside>,
    /// Ports in use per subscriber (prefix).
    per_sub: Map<ClientKey, u32>,
    wheel: Wheel<Inside>,
    changes: Vec<Change>,
    probe: ProbeSlot,
}

/// List the change of `m` (of `k`) when mirroring is on and how it is
/// carriable changed.
fn note(changes: &mut Vec<Change>, on: bool, k: Inside, m: &mut Mapping) {
    let want = if on { m.carriable() } else { Carry::No };
    if want != m.carried {
        changes.push(match (m.carried, want) {
            (_, Carry::No) => Change::Down(k, m.out),
            (Carry::HalfOpen, Carry::Full) => Change::Opened(k, m.out),
            (_, Carry::Full) => Change::Up(k, m.out),
            (_, Carry::HalfOpen) => Change::HalfOpen(k, m.out),
        });
        m.carried = want;
    }
}

/// The NAT44. See the module documentation.
#[derive(Debug)]
pub struct Nat44 {
    cfg: Nat44Config,
    ports: Box<dyn Ports>,
    inner: Mutex<Inner>,
    mirror: std::sync::atomic::AtomicBool,
    /// Mappings created.
    pub created: AtomicU64,
    /// Mappings expired.
    pub expired: AtomicU64,
}

fn proto_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Icmp => "icmp",
    }
}

/// The abuse-tracing log line of a mapping event, stable for parsers:
///
/// ```text
/// nat44 map proto=tcp b4=2001:db8:1::2 inside=192.168.1.2:5000 outside=203.0.113.1:40001
/// nat44 unmap proto=tcp b4=2001:db8:1::2 inside=192.168.1.2:5000 outside=203.0.113.1:40001 lifetime=125s
/// ```
///
/// Logged at INFO with the tracing target `softwire::cgn` (the logger adds
/// the wall-clock timestamp RFC 6302 asks for).
pub fn log_line(event: &str, i: &Inside, o: &Outside, lifetime_s: Option<u64>) -> String {
    let mut s = format!(
        "nat44 {event} proto={} b4={} inside={}:{} outside={}:{}",
        proto_name(i.proto),
        i.sub,
        i.addr,
        i.port,
        o.addr,
        o.port
    );
    if let Some(l) = lifetime_s {
        s.push_str(&format!(" lifetime={l}s"));
    }
    s
}

impl Nat44 {
    /// A NAT with external ports from `ports`.
    pub fn new(cfg: Nat44Config, ports: Box<dyn Ports>) -> Self {
        Nat44 {
            cfg,
            ports,
            inner: Mutex::new(Inner {
                by_in: Map::default(),
                by_out: Map::default(),
                per_sub: Map::default(),
                wheel: Wheel::new(4096, 100_000_000, 0),
                changes: Vec::new(),
                probe: ProbeSlot::default(),
            }),
            mirror: std::sync::atomic::AtomicBool::new(false),
            created: AtomicU64::new(0),
            expired: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        function::lock(&self.inner)
    }

    fn mirroring(&self) -> bool {
        self.mirror.load(Ordering::Relaxed)
    }

    /// List [`Change`]s for a fast path from now on (on: every mapping
    /// already carriable goes up at once; off: every carried one down).
    pub fn set_mirror(&self, on: bool) {
        self.mirror.store(on, Ordering::Relaxed);
        let mut g = self.lock();
        let Inner { by_in, changes, .. } = &mut *g;
        for (k, m) in by_in.iter_mut() {
            note(changes, on, *k, m);
        }
    }

    /// Ask `probe` what the fast path recorded of a half-open mapping
    /// whenever a packet of it comes here (a fast path that carries its
    /// outside SYN+ACK passes the rest of its control segments here).
    pub fn set_probe(&self, probe: Option<Probe>) {
        self.lock().probe = ProbeSlot(probe);
    }

    /// Move the changes listed since the last call to the end of `into`,
    /// oldest first.
    pub fn take_changes(&self, into: &mut Vec<Change>) {
        let mut g = self.lock();
        if g.changes.is_empty() {
            return;
        }
        if into.is_empty() {
            std::mem::swap(into, &mut g.changes);
        } else {
            into.append(&mut g.changes);
        }
    }

    /// True when `a` is an external address of this NAT.
    pub fn is_external(&self, a: Ipv4Addr) -> bool {
        self.ports.contains(a)
    }

    /// (ports, ports in use) for `p`.
    pub fn usage(&self, p: Protocol) -> (u64, u64) {
        self.ports.usage(p)
    }

    /// Mappings held.
    pub fn len(&self) -> usize {
        self.lock().by_in.len()
    }

    /// True when no mapping is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ports the subscriber of B4 address `sub` holds (every address of
    /// its prefix together).
    pub fn ports_of(&self, sub: &Ipv6Addr) -> u32 {
        self.lock().per_sub.get(&self.subscriber(sub)).copied().unwrap_or(0)
    }

    /// The subscriber of B4 address `b4` (its prefix).
    pub fn subscriber(&self, b4: &Ipv6Addr) -> ClientKey {
        subscriber(b4, self.cfg.subscriber_mask)
    }

    fn idle(&self, p: Protocol) -> u64 {
        match p {
            Protocol::Udp => self.cfg.udp_timeout_ns,
            Protocol::Icmp => self.cfg.icmp_timeout_ns,
            Protocol::Tcp => self.cfg.tcp_est_timeout_ns,
        }
    }

    /// Take in what a fast path recorded of `m` (`now`: this clock): the
    /// outside SYN+ACK it carried moves the state machine as that packet
    /// would have here; its last forward restarts the idle timer of a
    /// mapping it carries in full.
    fn learn(&self, m: &mut Mapping, seen: Seen, now: u64) {
        let t = seen.last_ns.unwrap_or(now).min(now);
        if seen.syn_ack && m.tcp == Some(TcpState::V6Init) {
            self.touch(m, Side::V4, Some(tcp::SYN | ACK), t);
        }
        if let Some(t) = seen.last_ns.filter(|_| m.refreshed_by_packets()) {
            m.expires = m.expires.max(t.saturating_add(self.idle(m.out.proto)));
        }
    }

    /// Before a packet of `m` is handled here: what the fast path
    /// recorded of it while it was half-open.
    fn catch_up(&self, probe: &mut ProbeSlot, k: &Inside, m: &mut Mapping, now: u64) {
        if m.carried != Carry::HalfOpen {
            return;
        }
        if let Some(seen) = probe.0.as_mut().and_then(|p| p(k, &m.out, now)) {
            self.learn(m, seen, now);
        }
    }

    fn touch(&self, m: &mut Mapping, side: Side, flags: Option<u8>, now: u64) {
        match (m.tcp, flags) {
            (Some(st), Some(f)) => {
                let (next, life) = tcp::step(st, side, f, false);
                m.tcp = Some(next);
                match life {
                    Lifetime::Keep => {}
                    Lifetime::Est => m.expires = now.saturating_add(self.cfg.tcp_est_timeout_ns),
                    Lifetime::Trans => m.expires = now.saturating_add(self.cfg.tcp_trans_timeout_ns),
                }
            }
            _ => m.expires = now.saturating_add(self.idle(m.out.proto)),
        }
    }

    /// A packet from inside: the mapping of `k` (created when missing —
    /// for TCP only by a SYN), refreshed. `flags` are the TCP flags.
    pub fn outbound(&self, k: Inside, dst: Ipv4Addr, flags: Option<u8>, now: u64) -> Result<Outside, Reason> {
        let on = self.mirroring();
        let mut g = self.lock();
        if let Some(out) = self.step(&mut g, on, k, None, Side::V6, flags, now) {
            return Ok(out);
        }
        if k.proto == Protocol::Tcp && flags.is_some_and(|f| f & tcp::SYN == 0 || f & tcp::RST != 0) {
            return Err(Reason::NoMapping);
        }
        // RFC 6888 REQ-4 with RFC 7422 port blocks: the subscriber's
        // ports are those its mappings use plus the free ones of its
        // blocks (the fast path takes those without asking), so a
        // mapping from outside a block must fit beside them.
        // The subscriber is the B4's prefix (RFC 7785): its addresses share one quota.
        let quota = self.cfg.max_ports_per_subscriber;
        let reserved = self.ports.reserved(&k.sub);
        let held = g.per_sub.get(&self.subscriber(&k.sub)).copied().unwrap_or(0).saturating_add(reserved);
        let from_block = k.proto == Protocol::Tcp && reserved > 0;
        if held >= quota && !from_block {
            return Err(Reason::QuotaExceeded);
        }
        if g.by_in.len() >= self.cfg.max_mappings {
            return Err(Reason::TableFull);
        }
        let room = quota.saturating_sub(held);
        let (a, port) = self.ports.alloc_within(k.proto, &k.sub, k.port, dst, room).ok_or(if held >= quota {
            Reason::QuotaExceeded
        } else {
            Reason::PoolExhausted
        })?;
        let out = Outside { proto: k.proto, addr: a, port };
        let (tcp, expires) = match k.proto {
            // RFC 6146 §3.5.2.2 / RFC 5382: a SYN from inside starts V6 INIT, transitory lifetime.
            Protocol::Tcp => (Some(TcpState::V6Init), now.saturating_add(self.cfg.tcp_trans_timeout_ns)),
            p => (None, now.saturating_add(self.idle(p))),
        };
        let mut m = Mapping { out, tcp, expires, created: now, carried: Carry::No };
        note(&mut g.changes, on, k, &mut m);
        self.enter(g, k, m);
        Ok(out)
    }

    /// Enter the new mapping `m` of `k` (its port taken): both tables,
    /// the subscriber's count and the wheel; then, the lock released, the
    /// count of mappings created and the mapping log.
    fn enter(&self, mut g: MutexGuard<'_, Inner>, k: Inside, m: Mapping) {
        g.by_in.insert(k, m);
        g.by_out.insert(m.out, k);
        *g.per_sub.entry(self.subscriber(&k.sub)).or_insert(0) += 1;
        g.wheel.insert(m.expires, k);
        drop(g);
        self.created.fetch_add(1, Ordering::Relaxed);
        if self.cfg.log_mappings {
            tracing::info!(target: "softwire::cgn", "{}", log_line("map", &k, &m.out, None));
        }
    }

    /// Enter a TCP mapping `k` ↔ `o` a fast path created for the B4's SYN
    /// at `at` (this clock; the port is already taken from the
    /// allocator, e.g. one of the B4's port blocks): as [`Nat44::outbound`]
    /// would have for that SYN — V6 INIT, the transitory lifetime, the
    /// subscriber's count, the mapping log — and carried half-open (the
    /// fast path wrote its entries; no [`Change`] is listed).
    ///
    /// `Err(Some((out, half_open)))`: `k` has a mapping already (`out`,
    /// carried half-open or not; the fast path and this NAT created one
    /// each): `o`'s port is given back and the fast path must drop its
    /// entries of `o` and restore `out`'s.
    /// `Err(None)`: `o` is in use by another mapping (nothing changed).
    pub fn adopt(&self, k: Inside, o: Outside, at: u64) -> Result<(), Option<(Outside, bool)>> {
        let on = self.mirroring();
        let g = self.lock();
        if let Some(m) = g.by_in.get(&k) {
            let had = (m.out, m.carried == Carry::HalfOpen);
            drop(g);
            if had.0 != o {
                self.ports.release(o.proto, o.addr, o.port);
            }
            return Err(Some(had));
        }
        if g.by_out.contains_key(&o) {
            return Err(None);
        }
        let expires = at.saturating_add(self.cfg.tcp_trans_timeout_ns);
        let carried = if on { Carry::HalfOpen } else { Carry::No };
        self.enter(g, k, Mapping { out: o, tcp: Some(TcpState::V6Init), expires, created: at, carried });
        Ok(())
    }

    /// The NAT's limits and timers.
    pub fn config(&self) -> &Nat44Config {
        &self.cfg
    }

    /// A packet from outside to `o`: the inside it maps to, refreshed
    /// (endpoint-independent filtering: any remote host).
    pub fn inbound(&self, o: Outside, flags: Option<u8>, now: u64) -> Result<Inside, Reason> {
        let on = self.mirroring();
        let mut g = self.lock();
        let k = *g.by_out.get(&o).ok_or(Reason::NoMapping)?;
        self.step(&mut g, on, k, None, Side::V4, flags, now);
        Ok(k)
    }

    /// A packet of the existing mapping of `k` (of outside `o` when
    /// given) from `side` at `now`: what the fast path recorded of it
    /// while half-open first, then the state machine and the lifetime.
    /// Returns its outside; `None` when there is no such mapping.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        g: &mut Inner,
        on: bool,
        k: Inside,
        o: Option<Outside>,
        side: Side,
        flags: Option<u8>,
        now: u64,
    ) -> Option<Outside> {
        let Inner { by_in, changes, probe, wheel, .. } = g;
        let m = by_in.get_mut(&k).filter(|m| o.is_none_or(|o| m.out == o))?;
        self.catch_up(probe, &k, m, now);
        let before = m.expires;
        self.touch(m, side, flags, now);
        if m.expires < before {
            // A FIN or RST shortened the lifetime: the wheel's entry may
            // sit at the old, later deadline (lazy expiry only moves
            // entries later), so schedule the new one too.
            wheel.insert(m.expires, k);
        }
        note(changes, on, k, m);
        Some(m.out)
    }

    /// A TCP segment with `flags` (a FIN) of the mapping `k` ↔ `o` that a
    /// fast path carried from `side` at `at` (this clock), told here
    /// afterwards: the state machine and the lifetime step exactly as
    /// [`Nat44::outbound`] / [`Nat44::inbound`] would have stepped them
    /// for that segment at `at`. Nothing when `k` has no mapping to `o`
    /// any more. Returns whether it had.
    pub fn carried(&self, k: Inside, o: Outside, side: Side, flags: u8, at: u64) -> bool {
        let on = self.mirroring();
        let mut g = self.lock();
        self.step(&mut g, on, k, Some(o), side, Some(flags), at).is_some()
    }

    /// The inside of `o`, without refreshing it (ICMP errors).
    pub fn lookup_out(&self, o: &Outside) -> Option<Inside> {
        self.lock().by_out.get(o).copied()
    }

    /// The outside of `k`, without refreshing it (ICMP errors).
    pub fn lookup_in(&self, k: &Inside) -> Option<Outside> {
        self.lock().by_in.get(k).map(|m| m.out)
    }

    /// Delete mappings whose lifetime ran out (established TCP first goes
    /// to the transitory state, RFC 5382 / RFC 6146). Returns how many
    /// were deleted.
    pub fn expire(&self, now: u64) -> usize {
        self.expire_with(now, |_, _| None)
    }

    /// [`Nat44::expire`], asking `seen` first when a carried mapping is
    /// due: what a fast path recorded of it ([`Seen`]: the time it last
    /// forwarded one of its packets, which counts as a packet here — the
    /// idle timer restarts from it —, and the outside SYN+ACK it carried
    /// to a half-open mapping, which moves it to ESTABLISHED as if seen
    /// here).
    pub fn expire_with(&self, now: u64, mut seen: impl FnMut(&Inside, &Outside) -> Option<Seen>) -> usize {
        let on = self.mirroring();
        let mut g = self.lock();
        let mut due = Vec::new();
        g.wheel.advance(now, |_, k| due.push(k));
        let mut gone = 0;
        for k in due {
            let Inner { by_in, changes, wheel, .. } = &mut *g;
            let Some(m) = by_in.get_mut(&k) else { continue };
            if m.expires <= now && m.carried != Carry::No {
                if let Some(s) = seen(&k, &m.out) {
                    self.learn(m, s, now);
                }
            }
            if m.expires > now {
                wheel.insert(m.expires, k);
                note(changes, on, k, m);
                continue;
            }
            if let Some(next) = m.tcp.and_then(tcp::on_timeout) {
                m.tcp = Some(next);
                m.expires = now.saturating_add(self.cfg.tcp_trans_timeout_ns);
                wheel.insert(m.expires, k);
                note(changes, on, k, m);
                continue;
            }
            let m = *m;
            if m.carried != Carry::No {
                changes.push(Change::Down(k, m.out));
            }
            g.by_in.remove(&k);
            g.by_out.remove(&m.out);
            let s = self.subscriber(&k.sub);
            if let Some(n) = g.per_sub.get_mut(&s) {
                *n -= 1;
                if *n == 0 {
                    g.per_sub.remove(&s);
                }
            }
            self.ports.release(k.proto, m.out.addr, m.out.port);
            gone += 1;
            if self.cfg.log_mappings {
                let life = now.saturating_sub(m.created) / NS;
                tracing::info!(target: "softwire::cgn", "{}", log_line("unmap", &k, &m.out, Some(life)));
            }
        }
        drop(g);
        self.ports.maintain();
        self.expired.fetch_add(gone as u64, Ordering::Relaxed);
        gone
    }

    /// Up to `limit` mappings (for `status`), optionally of one subscriber.
    pub fn list(&self, sub: Option<&Ipv6Addr>, limit: usize, now: u64) -> Vec<MappingInfo> {
        let g = self.lock();
        g.by_in
            .iter()
            .filter(|(k, _)| sub.is_none_or(|s| *s == k.sub))
            .take(limit)
            .map(|(k, m)| MappingInfo {
                inside: *k,
                outside: m.out,
                tcp: m.tcp,
                expires_in_s: m.expires.saturating_sub(now) / NS,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(prefix: &str, lo: u16, hi: u16) -> Box<dyn Ports> {
        Box::new(PoolPorts::new(
            vec![nat64::Pool4Entry {
                prefix: prefix.parse().unwrap(),
                ports: (lo, hi),
                protocols: Protocol::ALL.to_vec(),
            }],
            1024,
        ))
    }

    /// Subscriber `sub`'s B4 (each in its own /48: separate subscribers
    /// under any subscriber-mask).
    fn inside(sub: u8, addr: &str, port: u16, proto: Protocol) -> Inside {
        Inside {
            sub: Ipv6Addr::new(0x2001, 0xdb8, u16::from(sub), 0, 0, 0, 0, 2),
            proto,
            addr: addr.parse().unwrap(),
            port,
        }
    }

    const Y: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const Z: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

    #[test]
    fn rfc4787_req1_endpoint_independent_mapping_and_filtering() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 1024, 65535));
        let k = inside(1, "192.168.1.2", 5000, Protocol::Udp);
        let o1 = n.outbound(k, Y, None, 0).unwrap();
        let o2 = n.outbound(k, Z, None, 1).unwrap();
        assert_eq!(o1, o2, "same mapping whatever the destination");
        // Any external host may send to it (EIF).
        assert_eq!(n.inbound(o1, None, 2).unwrap(), k);
        // Two B4s with the same private address get different mappings.
        let k2 = inside(2, "192.168.1.2", 5000, Protocol::Udp);
        let o3 = n.outbound(k2, Y, None, 3).unwrap();
        assert_ne!(o1, o3);
        assert_eq!(n.inbound(o3, None, 4).unwrap(), k2);
        assert_eq!(n.len(), 2);
        assert_eq!(n.inbound(Outside { port: o3.port ^ 1, ..o3 }, None, 5), Err(Reason::NoMapping));
    }

    #[test]
    fn rfc6888_req4_port_quota_and_table_limit() {
        let n = Nat44::new(
            Nat44Config { max_ports_per_subscriber: 3, max_mappings: 5, log_mappings: false, ..Default::default() },
            pool("203.0.113.1/32", 1024, 65535),
        );
        for p in 0..3 {
            n.outbound(inside(1, "10.0.0.1", 1000 + p, Protocol::Udp), Y, None, 0).unwrap();
        }
        assert_eq!(n.outbound(inside(1, "10.0.0.1", 2000, Protocol::Udp), Y, None, 0), Err(Reason::QuotaExceeded));
        assert_eq!(n.ports_of(&inside(1, "10.0.0.1", 0, Protocol::Udp).sub), 3);
        // Another subscriber is not affected, until the table is full.
        n.outbound(inside(2, "10.0.0.1", 1, Protocol::Udp), Y, None, 0).unwrap();
        n.outbound(inside(2, "10.0.0.1", 2, Protocol::Udp), Y, None, 0).unwrap();
        assert_eq!(n.outbound(inside(3, "10.0.0.1", 1, Protocol::Udp), Y, None, 0), Err(Reason::TableFull));
    }

    /// RFC 7785 §3: the quota belongs to the subscriber's prefix, not to
    /// an address. Addresses of one /56 (the default subscriber-mask)
    /// share it, whichever of them asks; another /56 has its own; with a
    /// /128 mask each address is a subscriber (the old behaviour, which
    /// let one B4 take the pool address by address).
    #[test]
    fn rfc7785_addresses_of_a_subscriber_prefix_share_one_quota() {
        let n = Nat44::new(
            Nat44Config { max_ports_per_subscriber: 10, log_mappings: false, ..Default::default() },
            pool("203.0.113.1/32", 1024, 65535),
        );
        let b4 = |s: &str| -> Ipv6Addr { s.parse().unwrap() };
        let k =
            |sub: Ipv6Addr, port: u16| Inside { sub, proto: Protocol::Udp, addr: "10.0.0.1".parse().unwrap(), port };
        for i in 0..10u16 {
            // Ten addresses of 2001:db8:1:ff00::/56, one mapping each.
            let a = Ipv6Addr::from(u128::from(b4("2001:db8:1:ff00::")) | u128::from(i + 1) << 64 | 1);
            n.outbound(k(a, 1000), Y, None, 0).unwrap();
        }
        let eleventh = b4("2001:db8:1:ff42::77");
        assert_eq!(n.outbound(k(eleventh, 1000), Y, None, 0), Err(Reason::QuotaExceeded));
        assert_eq!(n.ports_of(&eleventh), 10, "counted for the prefix");
        assert_eq!(n.subscriber(&eleventh).to_string(), "2001:db8:1:ff00::/56");
        n.outbound(k(b4("2001:db8:1:fe00::1"), 1000), Y, None, 0).unwrap();
        // Expiry gives the prefix's ports back.
        assert_eq!(n.expire(301 * NS), 11);
        assert_eq!(n.ports_of(&eleventh), 0);
        n.outbound(k(eleventh, 1000), Y, None, 302 * NS).unwrap();
        let per_address = Nat44::new(
            Nat44Config {
                max_ports_per_subscriber: 1,
                subscriber_mask: 128,
                log_mappings: false,
                ..Default::default()
            },
            pool("203.0.113.1/32", 1024, 65535),
        );
        per_address.outbound(k(b4("2001:db8:1::1"), 1), Y, None, 0).unwrap();
        per_address.outbound(k(b4("2001:db8:1::2"), 1), Y, None, 0).unwrap();
    }

    #[test]
    fn pool_exhaustion_and_expiry_give_ports_back() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 2000, 2001));
        n.outbound(inside(1, "10.0.0.1", 1, Protocol::Udp), Y, None, 0).unwrap();
        n.outbound(inside(1, "10.0.0.1", 2, Protocol::Udp), Y, None, 0).unwrap();
        assert_eq!(n.outbound(inside(1, "10.0.0.1", 3, Protocol::Udp), Y, None, 0), Err(Reason::PoolExhausted));
        // A refresh at 100 s keeps the first alive past 300 s.
        n.outbound(inside(1, "10.0.0.1", 1, Protocol::Udp), Y, None, 100 * NS).unwrap();
        assert_eq!(n.expire(301 * NS), 1);
        assert_eq!(n.len(), 1);
        n.outbound(inside(1, "10.0.0.1", 3, Protocol::Udp), Y, None, 302 * NS).unwrap();
        assert_eq!(n.expire(1000 * NS), 2);
        assert!(n.is_empty());
        assert_eq!(n.usage(Protocol::Udp), (2, 0));
        assert_eq!(n.expired.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn tcp_needs_syn_and_follows_the_state_machine() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 1024, 65535));
        let k = inside(1, "10.0.0.1", 40000, Protocol::Tcp);
        assert_eq!(n.outbound(k, Y, Some(0x10), 0), Err(Reason::NoMapping), "no mapping from an ACK");
        let o = n.outbound(k, Y, Some(tcp::SYN), 0).unwrap();
        n.inbound(o, Some(tcp::SYN | 0x10), NS).unwrap();
        let l = n.list(None, 10, NS);
        assert_eq!(l[0].tcp, Some(TcpState::Established));
        // Established survives the transitory timeout; then goes TRANS, then away.
        assert_eq!(n.expire(300 * NS), 0);
        assert_eq!(n.expire(7442 * NS), 0);
        assert_eq!(n.list(None, 10, 7442 * NS)[0].tcp, Some(TcpState::Trans));
        assert_eq!(n.expire(7442 * NS + 241 * NS), 1);
    }

    /// A close after the expiry turn has rescheduled a mapping at its
    /// established deadline: it goes at the transitory lifetime from the
    /// second FIN, not at the later deadline the wheel held.
    #[test]
    fn a_close_after_a_long_established_phase_expires_at_trans() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 1024, 65535));
        let k = inside(1, "10.0.0.1", 40001, Protocol::Tcp);
        let o = n.outbound(k, Y, Some(tcp::SYN), 0).unwrap();
        n.inbound(o, Some(tcp::SYN | 0x10), NS).unwrap();
        // The opening's deadline passes: rescheduled at the established one.
        assert_eq!(n.expire(300 * NS), 0);
        n.outbound(k, Y, Some(tcp::FIN | 0x10), 400 * NS).unwrap();
        n.inbound(o, Some(tcp::FIN | 0x10), 400 * NS).unwrap();
        assert_eq!(n.list(None, 10, 400 * NS)[0].tcp, Some(TcpState::V4FinV6FinRcv));
        assert_eq!(n.expire(639 * NS), 0);
        assert_eq!(n.expire(641 * NS), 1, "gone 240 s after the second FIN");
        assert!(n.is_empty());
    }

    #[test]
    fn port_set_allocation_stays_in_the_set() {
        let map = PsidMap::new(6, 6).unwrap();
        let s = SetPorts::new(Ipv4Addr::new(192, 0, 2, 1), map, 5);
        let n = Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, Box::new(s));
        let size = map.set_size();
        let mut seen = std::collections::HashSet::new();
        for i in 0..size {
            let o = n.outbound(inside(1, "192.168.1.2", i as u16, Protocol::Udp), Y, None, 0).unwrap();
            assert!(map.allowed(o.port, 5), "{}", o.port);
            assert!(seen.insert(o.port));
        }
        assert_eq!(n.outbound(inside(1, "192.168.1.2", 60000, Protocol::Udp), Y, None, 0), Err(Reason::PoolExhausted));
        // Port preservation when the inside port is in the set.
        let s = SetPorts::new(Ipv4Addr::new(192, 0, 2, 1), map, 5);
        let keep = map.nth(5, 77);
        assert_eq!(s.alloc(Protocol::Tcp, &Ipv6Addr::LOCALHOST, keep, Y), Some((Ipv4Addr::new(192, 0, 2, 1), keep)));
        s.release(Protocol::Tcp, Ipv4Addr::new(192, 0, 2, 1), keep);
        assert_eq!(s.usage(Protocol::Tcp), (u64::from(size), 0));
    }

    #[test]
    fn mirror_changes_follow_carriable_mappings() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 1024, 65535));
        let mut ch = Vec::new();
        let u0 = inside(1, "10.0.0.1", 1, Protocol::Udp);
        let ou0 = n.outbound(u0, Y, None, 0).unwrap();
        n.set_mirror(true);
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Up(u0, ou0)], "what was carriable before goes up at once");
        ch.clear();
        let u = inside(1, "10.0.0.1", 2, Protocol::Udp);
        let ou = n.outbound(u, Y, None, 0).unwrap();
        let t = inside(1, "10.0.0.1", 3, Protocol::Tcp);
        let ot = n.outbound(t, Y, Some(tcp::SYN), 0).unwrap();
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Up(u, ou), Change::HalfOpen(t, ot)], "UDP at creation, TCP half-open in V6 INIT");
        ch.clear();
        n.inbound(ot, Some(tcp::SYN | 0x10), NS).unwrap();
        n.outbound(t, Y, Some(0x10), NS).unwrap();
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Opened(t, ot)], "TCP in full once ESTABLISHED, once");
        ch.clear();
        n.outbound(t, Y, Some(tcp::FIN | 0x10), 2 * NS).unwrap();
        n.inbound(ot, Some(tcp::FIN | 0x10), 3 * NS).unwrap();
        n.take_changes(&mut ch);
        assert_eq!(ch, [], "the close stays carried");
        // A fast path that saw `u` at 299 s keeps it past 300 s; `u0` goes,
        // and `t` 240 s after its second FIN.
        let seen = |k: &Inside, _: &Outside| (*k == u).then_some(Seen { last_ns: Some(299 * NS), syn_ack: false });
        assert_eq!(n.expire_with(301 * NS, seen), 2);
        n.take_changes(&mut ch);
        ch.sort_by_key(|c| matches!(c, Change::Down(k, _) if *k == t));
        assert_eq!(ch, [Change::Down(u0, ou0), Change::Down(t, ot)]);
        assert!(n.lookup_in(&u).is_some());
        ch.clear();
        assert_eq!(n.expire_with(600 * NS, seen), 1, "the last sighting counts once");
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Down(u, ou)]);
        ch.clear();
        // Off: no more changes, and what was carried goes down.
        let u2 = inside(2, "10.0.0.1", 2, Protocol::Udp);
        n.outbound(u2, Y, None, 601 * NS).unwrap();
        n.take_changes(&mut ch);
        ch.clear();
        n.set_mirror(false);
        n.take_changes(&mut ch);
        assert!(matches!(ch.as_slice(), [Change::Down(k, _)] if *k == u2), "{ch:?}");
    }

    /// A fast path that carried the outside SYN+ACK of a half-open mapping
    /// (the probe says so) leaves the NAT in the state that SYN+ACK would
    /// have: the B4's FIN then moves ESTABLISHED to V6 FIN RCV, expiry ages
    /// it as ESTABLISHED.
    #[test]
    fn half_open_mappings_learn_the_syn_ack_from_the_fast_path() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 1024, 65535));
        n.set_mirror(true);
        let acked = std::sync::Arc::new(Mutex::new(Vec::<Inside>::new()));
        let a = acked.clone();
        n.set_probe(Some(Box::new(move |k, _, now| {
            let yes = a.lock().unwrap().contains(k);
            Some(Seen { last_ns: yes.then_some(now - NS), syn_ack: yes })
        })));
        let mut ch = Vec::new();
        let state = |n: &Nat44, k: Inside| n.list(None, 100, 0).into_iter().find(|m| m.inside == k).unwrap().tcp;
        // FIN after a SYN+ACK the fast path carried.
        let t = inside(1, "10.0.0.1", 1, Protocol::Tcp);
        let ot = n.outbound(t, Y, Some(tcp::SYN), 0).unwrap();
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::HalfOpen(t, ot)]);
        ch.clear();
        acked.lock().unwrap().push(t);
        n.outbound(t, Y, Some(tcp::FIN | ACK), 10 * NS).unwrap();
        assert_eq!(state(&n, t), Some(TcpState::V6FinRcv), "ESTABLISHED, then the FIN");
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Opened(t, ot)], "carried in full through the close");
        ch.clear();
        // Without the SYN+ACK the same FIN changes nothing (V6 INIT).
        let u = inside(1, "10.0.0.1", 2, Protocol::Tcp);
        let ou = n.outbound(u, Y, Some(tcp::SYN), 0).unwrap();
        n.outbound(u, Y, Some(tcp::FIN | ACK), 10 * NS).unwrap();
        assert_eq!(state(&n, u), Some(TcpState::V6Init));
        // An RST from outside after a carried SYN+ACK: ESTABLISHED -> TRANS.
        let r = inside(1, "10.0.0.1", 3, Protocol::Tcp);
        let or = n.outbound(r, Y, Some(tcp::SYN), 0).unwrap();
        acked.lock().unwrap().push(r);
        n.inbound(or, Some(tcp::RST), 20 * NS).unwrap();
        assert_eq!(state(&n, r), Some(TcpState::Trans));
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::HalfOpen(u, ou), Change::HalfOpen(r, or), Change::Down(r, or)]);
        ch.clear();
        // Expiry: a half-open mapping the fast path completed becomes
        // ESTABLISHED (carried in full) and lives on from its last packet
        // there; one it did not is deleted at the transitory timeout.
        let e = inside(1, "10.0.0.1", 4, Protocol::Tcp);
        let oe = n.outbound(e, Y, Some(tcp::SYN), 0).unwrap();
        n.take_changes(&mut ch);
        ch.clear();
        let seen = |k: &Inside, _: &Outside| (*k == e).then_some(Seen { last_ns: Some(200 * NS), syn_ack: true });
        assert_eq!(n.expire_with(241 * NS, seen), 1, "u goes (r in TRANS since 20 s, t in V6 FIN RCV stay), e stays");
        assert_eq!(state(&n, e), Some(TcpState::Established));
        n.take_changes(&mut ch);
        assert!(ch.contains(&Change::Opened(e, oe)), "{ch:?}");
        assert!(ch.contains(&Change::Down(u, ou)), "{ch:?}");
        let l: Vec<_> = n.list(None, 100, 241 * NS).into_iter().filter(|m| m.inside == e).collect();
        assert_eq!(l[0].expires_in_s, (200 + 7440 - 241), "idle timer from the fast path's last packet");
    }

    /// The close of a carried TCP mapping: the FINs (and an RST) come here
    /// and step the state machine without taking the mapping off the fast
    /// path; what the fast path forwarded in between restarts the idle
    /// timer in V4/V6 FIN RCV (as here: ESTABLISHED's lifetime) but not in
    /// V4 FIN + V6 FIN RCV, which dies 4 minutes after the second FIN.
    #[test]
    fn the_close_stays_carried_and_expires_from_the_second_fin() {
        let n =
            Nat44::new(Nat44Config { log_mappings: false, ..Default::default() }, pool("203.0.113.1/32", 1024, 65535));
        n.set_mirror(true);
        let state = |n: &Nat44, k: Inside| n.list(None, 100, 0).into_iter().find(|m| m.inside == k).map(|m| m.tcp);
        let open = |port: u16| {
            let k = inside(1, "10.0.0.1", port, Protocol::Tcp);
            let o = n.outbound(k, Y, Some(tcp::SYN), 0).unwrap();
            n.inbound(o, Some(tcp::SYN | ACK), 0).unwrap();
            n.outbound(k, Y, Some(ACK), NS).unwrap();
            (k, o)
        };
        let mut ch = Vec::new();
        let (t, ot) = open(1);
        let (r, or) = open(2);
        n.take_changes(&mut ch);
        assert_eq!(
            ch,
            [Change::HalfOpen(t, ot), Change::Opened(t, ot), Change::HalfOpen(r, or), Change::Opened(r, or)]
        );
        ch.clear();
        // FIN from outside, then an RST from outside (RST during FIN RCV
        // is not handled: the state stays) and one from inside.
        n.inbound(ot, Some(tcp::FIN | ACK), 10 * NS).unwrap();
        assert_eq!(state(&n, t), Some(Some(TcpState::V4FinRcv)));
        n.outbound(r, Y, Some(tcp::FIN | ACK), 10 * NS).unwrap();
        n.inbound(or, Some(tcp::RST), 11 * NS).unwrap();
        n.outbound(r, Y, Some(tcp::RST), 11 * NS).unwrap();
        assert_eq!(state(&n, r), Some(Some(TcpState::V6FinRcv)));
        n.take_changes(&mut ch);
        assert_eq!(ch, [], "FIN RCV stays carried");
        // The second FIN: V4 FIN + V6 FIN RCV, still carried, and the
        // transitory lifetime from it whatever the fast path forwards later.
        let fin2 = 20 * NS;
        n.outbound(t, Y, Some(tcp::FIN | ACK), fin2).unwrap();
        assert_eq!(state(&n, t), Some(Some(TcpState::V4FinV6FinRcv)));
        n.take_changes(&mut ch);
        assert_eq!(ch, [], "the last ACKs stay carried");
        let trans = Nat44Config::default().tcp_trans_timeout_ns;
        let est = Nat44Config::default().tcp_est_timeout_ns;
        let late = |k: &Inside, _: &Outside| {
            let last = if *k == t { fin2 + trans - NS } else { 5000 * NS };
            Some(Seen { last_ns: Some(last), syn_ack: false })
        };
        assert_eq!(n.expire_with(fin2 + trans - NS, late), 0);
        assert_eq!(n.expire_with(fin2 + trans + NS, late), 1, "t: 240 s after the second FIN");
        assert_eq!(state(&n, t), None);
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Down(t, ot)]);
        ch.clear();
        // In FIN RCV the fast path's last packet keeps the mapping past the
        // established lifetime, then it ages to TRANS (off the fast path)
        // like ESTABLISHED, and goes.
        assert_eq!(n.expire_with(11 * NS + est + NS, late), 0);
        assert_eq!(state(&n, r), Some(Some(TcpState::V6FinRcv)), "refreshed by the carried packet");
        assert_eq!(n.expire_with(5000 * NS + est + NS, |_, _| None), 0);
        assert_eq!(state(&n, r), Some(Some(TcpState::Trans)));
        n.take_changes(&mut ch);
        assert_eq!(ch, [Change::Down(r, or)]);
        let gone_before = n.expired.load(Ordering::Relaxed);
        assert_eq!(n.expire_with(5000 * NS + est + trans + 2 * NS, |_, _| None), 1);
        assert_eq!(n.expired.load(Ordering::Relaxed), gone_before + 1);
        assert_eq!((n.ports_of(&t.sub), n.len()), (0, 0));
    }

    #[test]
    fn log_lines_are_stable() {
        let k = inside(2, "192.168.1.2", 5000, Protocol::Tcp);
        let o = Outside { proto: Protocol::Tcp, addr: Ipv4Addr::new(203, 0, 113, 1), port: 40001 };
        assert_eq!(
            log_line("map", &k, &o, None),
            "nat44 map proto=tcp b4=2001:db8:2::2 inside=192.168.1.2:5000 outside=203.0.113.1:40001"
        );
        assert!(log_line("unmap", &k, &o, Some(125)).ends_with(" lifetime=125s"));
    }
}
