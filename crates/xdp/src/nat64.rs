//! NAT64 sessions in the contract's form: the two `nat64_sessions`
//! entries (one per direction) that mirror one session of `crates/nat64`
//! (its `SessionInfo` fields: X:x, Y':y, T:t, Y:y), carried in full or
//! half-open (a TCP session in V6 INIT: only the IPv4 side's SYN+ACK is
//! carried, and recorded with [`NAT64_F_SYN_ACK`]); and [`Nat64Sessions`],
//! a handle of its own on the map for the slow path's workers, which
//! mirror a session while the packet that created it is being handled.

use crate::dslite::own_hash;
use crate::loader::{drain_ring, dup_map, found, map_err, own_ring, FastPath};
use crate::portblock::{BlockMem, RingWatch};
use crate::types::maps::{
    N64_BIB, N64_BLOCKS, N64_HOSTS, NAT64_SESSIONS, NATPT_EVENTS, NATPT_HOSTS, NATPT_MAKE, NATPT_POOL4,
};
use crate::types::{
    FlowKey, N64Bib, N64BibKey, N64Host, Nat64Value, NatptEvent, NatptHost, NatptMake, NAT64_F_HALF_OPEN,
    NAT64_F_SYN_ACK, NATPT_EV_CREATED, NATPT_EV_FIN4, NATPT_EV_FIN6, NATPT_MAKE_HELD, NATPT_MAKE_NAPT, NATPT_MAKE_ON,
};
use crate::Error;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, Map, MapData, RingBuf};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Mutex;

/// Transport of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
    /// ICMP echo (ports are echo identifiers; the peer's is unused).
    Icmp,
}

/// One NAT64 session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Transport.
    pub l4: L4,
    /// The IPv6 host's transport address (X, x).
    pub x: SocketAddrV6,
    /// The IPv4 peer as the IPv6 host addresses it: pool6 + Y, and y.
    pub y6: SocketAddrV6,
    /// The host's pool4 transport address (T, t).
    pub t: SocketAddrV4,
    /// The IPv4 peer (Y, y).
    pub y: SocketAddrV4,
    /// TCP in V6 INIT: only the IPv4 side's SYN+ACK is carried
    /// ([`NAT64_F_HALF_OPEN`]).
    pub half_open: bool,
}

/// What the fast path recorded of a session ([`Nat64Sessions::seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// CLOCK_MONOTONIC ns of the last packet it translated (0: none).
    pub last_seen_ns: u64,
    /// It carried the IPv4 side's SYN+ACK of the half-open session.
    pub syn_ack: bool,
}

/// `a` IPv4-mapped, as the contract stores IPv4 addresses.
pub fn mapped(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

impl Session {
    /// The (key, value) of the IPv6 → IPv4 direction and of the IPv4 →
    /// IPv6 direction.
    pub fn entries(&self) -> [(FlowKey, Nat64Value); 2] {
        let icmp = self.l4 == L4::Icmp;
        let (p6, p4) = match self.l4 {
            L4::Udp => (17, 17),
            L4::Tcp => (6, 6),
            L4::Icmp => (58, 1),
        };
        let peer = if icmp { 0 } else { self.y.port() };
        let flags = if self.half_open && self.l4 == L4::Tcp { NAT64_F_HALF_OPEN } else { 0 };
        let k6 = FlowKey {
            src: self.x.ip().octets(),
            dst: self.y6.ip().octets(),
            sport_be: self.x.port().to_be(),
            dport_be: peer.to_be(),
            family: 6,
            proto: p6,
            pad: [0; 2],
        };
        let v6 = Nat64Value {
            src: mapped(*self.t.ip()),
            dst: mapped(*self.y.ip()),
            port_be: self.t.port().to_be(),
            pad: [0; 2],
            flags,
            last_seen_ns: 0,
        };
        let k4 = FlowKey {
            src: mapped(*self.y.ip()),
            dst: mapped(*self.t.ip()),
            sport_be: peer.to_be(),
            dport_be: self.t.port().to_be(),
            family: 4,
            proto: p4,
            pad: [0; 2],
        };
        let v4 = Nat64Value {
            src: self.y6.ip().octets(),
            dst: self.x.ip().octets(),
            port_be: self.x.port().to_be(),
            pad: [0; 2],
            flags,
            last_seen_ns: 0,
        };
        [(k6, v6), (k4, v4)]
    }
}

/// The `nat64_sessions` map on a handle of its own (`Send`), for the slow
/// path to mirror a session and read what the program recorded of it
/// without the [`FastPath`].
#[derive(Debug)]
pub struct Nat64Sessions {
    map: HashMap<MapData, FlowKey, Nat64Value>,
}

impl Nat64Sessions {
    /// Write both entries of `s` (replacing any: what they recorded starts
    /// again). [`Error::MapFull`] when the map is full: nothing is left
    /// written and the session stays on the slow path.
    pub fn insert(&mut self, s: &Session) -> Result<(), Error> {
        let [(k6, v6), (k4, v4)] = s.entries();
        self.map.insert(k6, v6, 0).map_err(|e| map_err(NAT64_SESSIONS, e))?;
        if let Err(e) = self.map.insert(k4, v4, 0) {
            let _ = self.map.remove(&k6);
            return Err(map_err(NAT64_SESSIONS, e));
        }
        Ok(())
    }

    /// What the program recorded of `s`'s entries (None: neither is there).
    pub fn seen(&self, s: &Session) -> Result<Option<Seen>, Error> {
        let mut out: Option<Seen> = None;
        for (k, _) in s.entries() {
            if let Some(v) = found(NAT64_SESSIONS, self.map.get(&k, 0))? {
                let o = out.get_or_insert_with(Seen::default);
                o.last_seen_ns = o.last_seen_ns.max(v.last_seen_ns);
                o.syn_ack |= v.flags & NAT64_F_SYN_ACK != 0;
            }
        }
        Ok(out)
    }
}

impl Nat64Sessions {
    /// Remove both entries of `s` (those that are there).
    pub fn remove(&mut self, s: &Session) -> Result<(), Error> {
        for (k, _) in s.entries() {
            found(NAT64_SESSIONS, self.map.remove(&k))?;
        }
        Ok(())
    }
}

/// A session the program created from the IPv6 host's SYN
/// (`natpt_events`; NAT-PT, or NAT64 with a block port): TCP, half-open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    /// The session, as its entries were written (`half_open`; a FIN's:
    /// carried in full).
    pub session: Session,
    /// `bpf_ktime_get_coarse_ns()` (CLOCK_MONOTONIC) when it was created
    /// (the FIN carried).
    pub ns: u64,
    /// Created, or a FIN of it carried.
    pub kind: MadeKind,
}

/// What a `natpt_events` record tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadeKind {
    /// The program created the session from the IPv6 host's SYN.
    Created,
    /// The program carried a FIN (no SYN or RST) of the session from its
    /// IPv6 side.
    Fin6,
    /// ... from its IPv4 side.
    Fin4,
}

impl Made {
    /// The event `b` (a `natpt_events` record), None when it is not one.
    /// `pool6` is the /96 prefix whose last 4 bytes the program replaced.
    pub fn parse(b: &[u8], pool6: [u8; 12]) -> Option<Made> {
        let ev: NatptEvent = crate::sys::read_pod(b)?;
        if ev.proto != 6 {
            return None;
        }
        let kind = match ev.kind {
            NATPT_EV_CREATED => MadeKind::Created,
            NATPT_EV_FIN6 => MadeKind::Fin6,
            NATPT_EV_FIN4 => MadeKind::Fin4,
            _ => return None,
        };
        let mut y6 = [0u8; 16];
        y6[..12].copy_from_slice(&pool6);
        y6[12..].copy_from_slice(&ev.y);
        let (xp, yp, tp) = (u16::from_be(ev.sport_be), u16::from_be(ev.dport_be), u16::from_be(ev.tport_be));
        let session = Session {
            l4: L4::Tcp,
            x: SocketAddrV6::new(ev.x.into(), xp, 0, 0),
            y6: SocketAddrV6::new(y6.into(), yp, 0, 0),
            t: SocketAddrV4::new(ev.t.into(), tp),
            y: SocketAddrV4::new(ev.y.into(), yp),
            half_open: kind == MadeKind::Created,
        };
        Some(Made { session, ns: ev.ns, kind })
    }
}

/// What the program may create NAT-PT sessions with ([`Natpt::configure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatptConfig {
    /// The NAT64 `pool6` (must be a /96; another length: nothing created).
    pub pool6: xlat::addr::Prefix6,
    /// The NAT64 pool4 prefixes (their destinations stay on the slow path).
    pub pool4: Vec<xlat::addr::Prefix4>,
    /// `max-sessions`.
    pub limit: u64,
    /// NAT64 (NAPT) mode: ports per block of the hosts' TCP port blocks
    /// (1..=256; 0: nothing created). None: NAT-PT mode.
    pub port_block: Option<u16>,
}

/// `natpt_pool4`: pool4 prefixes → 1.
type Pool4Trie = LpmTrie<MapData, [u8; 4], u8>;

/// NAT-PT sessions created in XDP: the host bindings (`natpt_hosts`), the
/// checks (`natpt_make`, `natpt_pool4`) and the ring of created sessions
/// (`natpt_events`), on handles of their own (`Send`, `Sync`) for the
/// translator's hook.
pub struct Natpt {
    hosts: Mutex<HashMap<MapData, [u8; 16], NatptHost>>,
    make: Mutex<(Array<MapData, NatptMake>, NatptMake)>,
    pool4: Mutex<(Pool4Trie, Vec<xlat::addr::Prefix4>)>,
    ring: Mutex<RingBuf<MapData>>,
    /// `ring`'s positions: whether it has anything to drain.
    watch: RingWatch,
    sessions: Mutex<Nat64Sessions>,
    drained: AtomicU64,
    /// NAT64: the hosts' port blocks (`n64_hosts`, `n64_blocks`), ports
    /// per block (0: none), and the TCP BIB entries (`n64_bib`).
    n64_hosts: Mutex<HashMap<MapData, [u8; 16], N64Host>>,
    blocks: BlockMem,
    block_size: AtomicU16,
    n64_bib: Mutex<HashMap<MapData, N64BibKey, N64Bib>>,
    /// Host block lists the map refused.
    unlisted: AtomicU64,
}

impl core::fmt::Debug for Natpt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Natpt(natpt_events)")
    }
}

use function::lock;

/// A map of a loaded object on a handle of its own (a duplicated fd).
fn own_map(m: &Map, name: &'static str) -> Result<MapData, Error> {
    match m {
        Map::Array(d) | Map::LpmTrie(d) => dup_map(d, name),
        _ => Err(Error::Bpf(format!("map {name}: not an array or LPM trie"))),
    }
}

fn bpf_err(name: &'static str, e: impl core::fmt::Display) -> Error {
    Error::Bpf(format!("map {name}: {e}"))
}

impl Natpt {
    fn write_make(&self, f: impl FnOnce(&mut NatptMake)) -> Result<(), Error> {
        let mut g = lock(&self.make);
        let (a, v) = &mut *g;
        f(v);
        a.set(1, *v, 0).map_err(|e| map_err(NATPT_MAKE, e))
    }

    /// Turn creation on with `c` (a /96 pool6, pool4, limit), or off (None,
    /// or a pool6 of another length). The host bindings stay.
    pub fn configure(&self, c: Option<&NatptConfig>) -> Result<(), Error> {
        let c = c.filter(|c| c.pool6.len() == 96);
        {
            let mut g = lock(&self.pool4);
            let (t, had) = &mut *g;
            for p in had.drain(..) {
                found(NATPT_POOL4, t.remove(&Key::new(u32::from(p.len()), p.addr().octets())))?;
            }
            for p in c.map(|c| c.pool4.as_slice()).unwrap_or_default() {
                t.insert(&Key::new(u32::from(p.len()), p.addr().octets()), 1, 0)
                    .map_err(|e| map_err(NATPT_POOL4, e))?;
                had.push(*p);
            }
        }
        let napt = c.and_then(|c| c.port_block);
        self.block_size.store(napt.unwrap_or(0).min(crate::portblock::PB_MAX_PORTS), Ordering::Relaxed);
        let c = c.filter(|_| napt != Some(0));
        self.write_make(|m| {
            m.flags &= !(NATPT_MAKE_ON | NATPT_MAKE_NAPT);
            if let Some(c) = c {
                m.flags |= NATPT_MAKE_ON;
                if napt.is_some() {
                    m.flags |= NATPT_MAKE_NAPT;
                }
                m.limit = c.limit;
                m.pool6.copy_from_slice(&c.pool6.addr().octets()[..12]);
            }
        })
    }

    /// Host `x` holds `t` (Some) or gave its address back (None).
    /// [`Error::MapFull`]: that host's first packets stay on the slow path.
    pub fn set_host(&self, x: Ipv6Addr, t: Option<Ipv4Addr>) -> Result<(), Error> {
        let mut m = lock(&self.hosts);
        match t {
            Some(t) => m.insert(x.octets(), NatptHost { addr: t.octets() }, 0).map_err(|e| map_err(NATPT_HOSTS, e)),
            None => found(NATPT_HOSTS, m.remove(&x.octets())).map(drop),
        }
    }

    /// The pool4 address the program sees host `x` hold.
    pub fn host(&self, x: Ipv6Addr) -> Result<Option<Ipv4Addr>, Error> {
        let m = lock(&self.hosts);
        Ok(found(NATPT_HOSTS, m.get(&x.octets(), 0))?.map(|h| Ipv4Addr::from(h.addr)))
    }

    /// NAT64: the TCP BIB entry of `x` is `t` (Some) or none. A failure
    /// to record one (the map full) turns creation off: the program must
    /// never make a second mapping of an x.
    pub fn set_bib(&self, x: SocketAddrV6, t: Option<SocketAddrV4>) -> Result<(), Error> {
        let k = N64BibKey { x: x.ip().octets(), port_be: x.port().to_be(), pad: [0; 2] };
        let mut m = lock(&self.n64_bib);
        let r = match t {
            Some(t) => m
                .insert(k, N64Bib { t: t.ip().octets(), port_be: t.port().to_be(), pad: [0; 2] }, 0)
                .map_err(|e| map_err(N64_BIB, e)),
            None => found(N64_BIB, m.remove(&k)).map(drop),
        };
        drop(m);
        if r.is_err() && t.is_some() {
            self.write_make(|m| m.flags &= !NATPT_MAKE_ON)?;
        }
        r
    }

    /// NAT64: host block lists `n64_hosts` refused (full) so far.
    pub fn unlisted(&self) -> u64 {
        self.unlisted.load(Ordering::Relaxed)
    }

    /// NAT64: the TCP mapping of `x` the program sees.
    pub fn bib(&self, x: SocketAddrV6) -> Result<Option<SocketAddrV4>, Error> {
        let k = N64BibKey { x: x.ip().octets(), port_be: x.port().to_be(), pad: [0; 2] };
        let m = lock(&self.n64_bib);
        Ok(found(N64_BIB, m.get(&k, 0))?.map(|v| SocketAddrV4::new(v.t.into(), u16::from_be(v.port_be))))
    }

    /// The translator holds IPv4 SYNs (true) or none (false).
    pub fn set_held(&self, held: bool) -> Result<(), Error> {
        self.write_make(|m| {
            m.flags &= !NATPT_MAKE_HELD;
            if held {
                m.flags |= NATPT_MAKE_HELD;
            }
        })
    }

    /// The translator's session table holds `sessions` (after a drain):
    /// what the program counts its table limit from.
    pub fn set_sessions(&self, sessions: u64) -> Result<(), Error> {
        let drained = self.drained.load(Ordering::Acquire);
        self.write_make(|m| m.n = sessions.wrapping_sub(drained))
    }

    /// Sessions the program created so far.
    pub fn created(&self) -> Result<u64, Error> {
        let g = lock(&self.make);
        g.0.get(&0, 0).map(|v| v.n).map_err(|e| map_err(NATPT_MAKE, e))
    }

    /// Whether the ring may hold a session (or FIN) not yet drained: a
    /// record not yet consumed ([`RingWatch::is_empty`], no lock).
    pub fn pending(&self) -> bool {
        !self.watch.is_empty()
    }

    /// Hand each session the program created since the last drain to
    /// `adopt`, oldest first; the entries of those it returns false for
    /// are removed (the flow starts again on the slow path). Returns how
    /// many. Another thread draining at the time is waited for, so that
    /// on return every session created before the call has been handed
    /// over (a packet of one of them is never handled first). An empty
    /// ring (the common case: the translator calls this before every
    /// packet) costs two loads, no lock and no system call
    /// ([`RingWatch::is_empty`] tells why that keeps the guarantee).
    pub fn drain(&self, mut adopt: impl FnMut(&Made) -> bool) -> usize {
        if self.watch.is_empty() {
            return 0;
        }
        let mut rb = lock(&self.ring);
        let mut pool6 = None;
        let mut refused = Vec::new();
        let n = drain_ring(&mut rb, |b| {
            let p6 = *pool6.get_or_insert_with(|| lock(&self.make).1.pool6);
            if let Some(m) = Made::parse(b, p6) {
                if !adopt(&m) {
                    refused.push(m.session);
                }
            }
        });
        drop(rb);
        self.drained.fetch_add(n as u64, Ordering::AcqRel);
        if !refused.is_empty() {
            let mut s = lock(&self.sessions);
            for r in &refused {
                // Entries left by a failed removal go with the next sync.
                let _ = s.remove(r);
            }
        }
        n
    }
}

/// NAT64 (NAPT): the hosts' TCP port blocks, shared with the program
/// (`n64_blocks` mapped, `n64_hosts` the lists; `bpf/portblock.h`). The
/// translator sees them through its `nat64::PortBlockMem`, which the
/// daemon implements over these (this crate depends on no state crate).
impl Natpt {
    /// Ports per block (0: no blocks, creation off or NAT-PT mode).
    pub fn block_size(&self) -> u16 {
        self.block_size.load(Ordering::Relaxed)
    }
    /// Slots in `n64_blocks`.
    pub fn block_slots(&self) -> u32 {
        self.blocks.slots()
    }
    /// Write block `slot`: `size` ports from `base` on `addr`, none in use
    /// (only for a slot no host lists).
    pub fn block_write(&self, slot: u32, addr: Ipv4Addr, base: u16, size: u16) {
        self.blocks.write(slot, addr, base, size);
    }
    /// Take a free port index of block `slot` (the first free at or after
    /// `hint` mod size), as `pb_take`; `None`: none free.
    pub fn block_take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        self.blocks.take(slot, size, hint)
    }
    /// Give index `i` of block `slot` back (`pb_give`).
    pub fn block_give(&self, slot: u32, i: u16) {
        self.blocks.give(slot, i);
    }
    /// Ports of block `slot` in use.
    pub fn block_in_use(&self, slot: u32) -> u32 {
        self.blocks.in_use(slot)
    }
    /// Host `x`'s blocks are `slots` from now on (none: it has none), in
    /// `n64_hosts`. A host the full map cannot list keeps its SYNs on the
    /// slow path ([`Natpt::unlisted`] counts it).
    pub fn list_blocks(&self, x: Ipv6Addr, slots: &[u32]) {
        let mut m = lock(&self.n64_hosts);
        let r = if slots.is_empty() {
            found(N64_HOSTS, m.remove(&x.octets())).map(drop)
        } else {
            let mut v = N64Host::default();
            for (d, s) in v.slot.iter_mut().zip(slots) {
                *d = s + 1;
            }
            m.insert(x.octets(), v, 0).map_err(|e| map_err(N64_HOSTS, e))
        };
        if r.is_err() {
            self.unlisted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl FastPath {
    /// A handle of its own on `nat64_sessions` ([`Nat64Sessions`]).
    pub fn nat64_sessions(&self) -> Result<Nat64Sessions, Error> {
        let m = self.map(NAT64_SESSIONS)?;
        Ok(Nat64Sessions { map: own_hash(m, NAT64_SESSIONS)? })
    }

    /// Handles of their own on the maps of NAT-PT sessions created in XDP
    /// ([`Natpt`]); creation is off until [`Natpt::configure`].
    pub fn natpt(&self) -> Result<Natpt, Error> {
        let make = Array::try_from(Map::Array(own_map(self.map(NATPT_MAKE)?, NATPT_MAKE)?))
            .map_err(|e| bpf_err(NATPT_MAKE, e))?;
        let pool4 = LpmTrie::try_from(Map::LpmTrie(own_map(self.map(NATPT_POOL4)?, NATPT_POOL4)?))
            .map_err(|e| bpf_err(NATPT_POOL4, e))?;
        let ring = own_ring(self.map(NATPT_EVENTS)?, NATPT_EVENTS)?;
        let n = Natpt {
            watch: RingWatch::of(&ring, NATPT_EVENTS)?,
            hosts: Mutex::new(own_hash(self.map(NATPT_HOSTS)?, NATPT_HOSTS)?),
            make: Mutex::new((make, NatptMake::default())),
            pool4: Mutex::new((pool4, Vec::new())),
            ring: Mutex::new(ring),
            sessions: Mutex::new(self.nat64_sessions()?),
            drained: AtomicU64::new(0),
            n64_hosts: Mutex::new(own_hash(self.map(N64_HOSTS)?, N64_HOSTS)?),
            blocks: BlockMem::of(self.map(N64_BLOCKS)?, N64_BLOCKS, crate::types::N64_BLOCK_SLOTS)?,
            block_size: AtomicU16::new(0),
            n64_bib: Mutex::new(own_hash(self.map(N64_BIB)?, N64_BIB)?),
            unlisted: AtomicU64::new(0),
        };
        n.write_make(|_| ())?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The half-open TCP session of these tests: X [2001:db8::5]:4000 to
    /// Y 198.51.100.7:80 as T 192.0.2.1:4000.
    fn tcp_half_open() -> Session {
        Session {
            l4: L4::Tcp,
            x: "[2001:db8::5]:4000".parse().unwrap(),
            y6: "[64:ff9b::c633:6407]:80".parse().unwrap(),
            t: "192.0.2.1:4000".parse().unwrap(),
            y: "198.51.100.7:80".parse().unwrap(),
            half_open: true,
        }
    }

    #[test]
    fn natpt_event_parsed_at_the_contract_offsets() {
        let off = |f: &str| NatptEvent::FIELDS.iter().find(|(n, _, _)| *n == f).map(|(_, o, _)| *o).unwrap();
        let mut b = [0u8; 40];
        b[off("x")..off("x") + 16].copy_from_slice(&"2001:db8::5".parse::<Ipv6Addr>().unwrap().octets());
        b[off("y")..off("y") + 4].copy_from_slice(&[198, 51, 100, 7]);
        b[off("t")..off("t") + 4].copy_from_slice(&[192, 0, 2, 1]);
        b[off("sport_be")..off("sport_be") + 2].copy_from_slice(&4000u16.to_be_bytes());
        b[off("dport_be")..off("dport_be") + 2].copy_from_slice(&80u16.to_be_bytes());
        b[off("proto")] = 6;
        b[off("tport_be")..off("tport_be") + 2].copy_from_slice(&4000u16.to_be_bytes());
        b[off("ns")..off("ns") + 8].copy_from_slice(&12345u64.to_ne_bytes());
        let pool6 = [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0];
        let m = Made::parse(&b, pool6).expect("an event");
        let want = tcp_half_open();
        assert_eq!(m, Made { session: want, ns: 12345, kind: MadeKind::Created });
        b[off("kind")] = NATPT_EV_FIN4;
        let f = Made::parse(&b, pool6).expect("a FIN");
        assert_eq!(f, Made { session: Session { half_open: false, ..want }, ns: 12345, kind: MadeKind::Fin4 });
        b[off("kind")] = 9;
        assert_eq!(Made::parse(&b, pool6), None, "an unknown kind");
        b[off("kind")] = NATPT_EV_CREATED;
        b[off("proto")] = 17;
        assert_eq!(Made::parse(&b, pool6), None, "only TCP is created");
        assert_eq!(Made::parse(&b[..39], pool6), None, "cut short");
    }

    #[test]
    fn half_open_flag_only_on_tcp_entries() {
        let s = tcp_half_open();
        let [(k6, v6), (k4, v4)] = s.entries();
        assert_eq!((v6.flags, v4.flags), (NAT64_F_HALF_OPEN, NAT64_F_HALF_OPEN));
        // The program derives the IPv6 key from the IPv4 entry: X:x -> Y':y.
        assert_eq!((k6.src, k6.dst, k6.sport_be, k6.dport_be), (v4.dst, v4.src, v4.port_be, k4.sport_be));
        let full = Session { half_open: false, ..s };
        assert!(full.entries().iter().all(|(_, v)| v.flags == 0));
        let udp = Session { l4: L4::Udp, ..s };
        assert!(udp.entries().iter().all(|(_, v)| v.flags == 0), "UDP is never half-open");
    }
}
