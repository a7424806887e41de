//! The DS-Lite AFTR's NAT44 sessions on the softwire fast path
//! (`bpf/softwire.bpf.c` with `SW_F_DSLITE`, its `ds_*`
//! maps): a [`SoftwireFastPath`] loaded with [`SoftwireSettings::dslite`]
//! carries the packets of the sessions the AFTR mirrors here.
//!
//! One [`Nat44Session`] is two entries: `ds_out` (softwire → IPv4, keyed
//! by the B4 and the inner source) and `ds_in` (IPv4 → softwire, keyed by
//! the pool transport address). The slow path inserts a session when its
//! NAT44 would translate the flow's packets without a state change but
//! the idle timer (UDP and ICMP echo at creation, TCP from ESTABLISHED
//! through the close; the program passes TCP SYN, FIN and RST to it),
//! removes it when that
//! stops or the mapping expires, and reads [`SoftwireFastPath::session_seen`]
//! before it expires one, so a flow carried only here lives on.
//!
//! A TCP mapping goes in half-open ([`Nat44Session::half_open`]) when the
//! B4's SYN creates it: the program carries only its outside SYN+ACK and
//! records that in both entries ([`DS_F_SYN_ACK`]); the slow path reads
//! it ([`SessionSeen::syn_ack`], also through a [`SessionProbe`] it owns)
//! whenever it next handles the mapping and moves its state machine as if
//! it had seen that SYN+ACK.
//!
//! [`SoftwireSettings::dslite`]: crate::softwire::SoftwireSettings::dslite

use crate::loader::{drain_ring, dup_map, found, map_err, own_ring};
use crate::portblock::{BlockMem, Mmap, RingWatch};
use crate::softwire::{SoftwireFastPath, DS_B4, DS_BLOCKS, DS_EVENTS, DS_IN, DS_OUT, DS_POOL, DS_STATE};
use crate::Error;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{HashMap, Map, MapData, RingBuf};
use core::borrow::Borrow;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::types::DsState;
pub use crate::types::{
    DsB4Key, DsB4Val, DsEvent, DsInKey, DsInVal, DsOutKey, DsOutVal, DS_EV_CREATED, DS_EV_FIN, DS_F_FIN_V4,
    DS_F_FIN_V6, DS_F_HALF_OPEN, DS_F_SYN_ACK, DS_F_XDP, PB_MAX_PORTS,
};

/// `DS_BLOCKS`: port blocks per B4 and protocol at most.
pub const MAX_BLOCKS_PER_B4: usize = crate::types::DS_BLOCKS;

/// A TCP FIN the program carried ([`CreatedRing::drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedFin {
    /// The mapping (its entries as the program found them).
    pub session: Nat44Session,
    /// From the IPv4 side (else from the B4).
    pub from_v4: bool,
    /// The segment's TCP flags.
    pub tcp_flags: u8,
    /// CLOCK_MONOTONIC (coarse) when it was carried.
    pub mono_ns: u64,
}

/// What the program told the slow path through `ds_events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingEvent {
    /// A mapping it created.
    Created(Created),
    /// A FIN it carried.
    Fin(CarriedFin),
}

/// A mapping the program created ([`CreatedRing::drain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Created {
    /// The mapping (half-open TCP).
    pub session: Nat44Session,
    /// The block its port came from.
    pub slot: u32,
    /// CLOCK_MONOTONIC (coarse) at creation.
    pub mono_ns: u64,
}

impl DsEvent {
    /// The event in the ring buffer's bytes (native order, as the program
    /// wrote it); `None` when too short.
    pub fn parse(b: &[u8]) -> Option<DsEvent> {
        crate::sys::read_pod(b)
    }

    fn session(&self, half_open: bool) -> Nat44Session {
        Nat44Session {
            b4: Ipv6Addr::from(self.b4),
            proto: self.proto,
            inside: SocketAddrV4::new(Ipv4Addr::from(u32::from_be(self.addr)), u16::from_be(self.port)),
            outside: SocketAddrV4::new(Ipv4Addr::from(u32::from_be(self.out_addr)), u16::from_be(self.out_port)),
            half_open,
        }
    }

    /// The event as a [`Created`] (whatever its kind).
    pub fn created(&self) -> Created {
        Created { session: self.session(self.proto == 6), slot: self.slot, mono_ns: self.ns }
    }

    /// The event by its kind; `None` for a kind this build does not know.
    pub fn event(&self) -> Option<RingEvent> {
        match self.kind {
            DS_EV_CREATED => Some(RingEvent::Created(self.created())),
            DS_EV_FIN => Some(RingEvent::Fin(CarriedFin {
                session: self.session(false),
                from_v4: self.from_v4 != 0,
                tcp_flags: self.tcp_flags,
                mono_ns: self.ns,
            })),
            _ => None,
        }
    }
}

/// The DS-Lite port blocks as the slow path holds them: `ds_blocks` and
/// `ds_state` mapped into memory (`bpf/portblock.h`'s contract: the slow
/// path writes a block before listing it in `ds_b4`, takes and gives its
/// ports with the same atomic OR / AND as the program), and a handle of
/// its own on `ds_b4`. `Send` and `Sync`: the NAT44's port allocator
/// holds it.
#[derive(Debug)]
pub struct PortBlocks {
    mem: BlockMem,
    state: Mmap,
    b4: Mutex<HashMap<MapData, DsB4Key, DsB4Val>>,
}

impl PortBlocks {
    /// Slots in `ds_blocks`.
    pub fn slots(&self) -> u32 {
        self.mem.slots()
    }

    /// Write block `slot`: `size` ports (1..=[`PB_MAX_PORTS`]) from
    /// `base` on `addr`, none in use. Only for a slot no `ds_b4` entry
    /// lists.
    pub fn write(&self, slot: u32, addr: Ipv4Addr, base: u16, size: u16) {
        self.mem.write(slot, addr, base, size)
    }

    /// Take a free port index of block `slot` of `size` ports, the first
    /// at or after `hint` (mod size) as `pb_take`. `None`: full (or every
    /// try lost a race with the program).
    pub fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        self.mem.take(slot, size, hint)
    }

    /// Mark index `i` of block `slot` in use (a mapping the program made
    /// must already have it; true when it was free).
    pub fn mark(&self, slot: u32, i: u16) -> bool {
        self.mem.mark(slot, i)
    }

    /// Give index `i` of block `slot` back (`pb_give`).
    pub fn give(&self, slot: u32, i: u16) {
        self.mem.give(slot, i)
    }

    /// Ports of block `slot` in use.
    pub fn in_use(&self, slot: u32) -> u32 {
        self.mem.in_use(slot)
    }

    /// List `slots` (at most [`MAX_BLOCKS_PER_B4`]) as the blocks of `b4`
    /// for `proto`; none: remove the entry.
    pub fn set_b4(&self, b4: Ipv6Addr, proto: u8, slots: &[u32]) -> Result<(), Error> {
        let k = DsB4Key { b4: b4.octets(), proto, pad: [0; 3] };
        let mut m = function::lock(&self.b4);
        if slots.is_empty() {
            found(DS_B4, m.remove(&k))?;
            return Ok(());
        }
        let mut v = DsB4Val::default();
        for (d, s) in v.slot.iter_mut().zip(slots) {
            *d = s + 1;
        }
        m.insert(k, v, 0).map_err(|e| map_err(DS_B4, e))
    }

    /// `ds_state`: what the program checks its table limit against.
    pub fn set_state(&self, engine_len: u64, drained: u64, limit: u64) {
        use core::mem::offset_of;
        self.state.word(offset_of!(DsState, limit)).store(limit, Ordering::Relaxed);
        self.state.word(offset_of!(DsState, engine_len)).store(engine_len, Ordering::Relaxed);
        self.state.word(offset_of!(DsState, drained)).store(drained, Ordering::Release);
    }

    /// Mappings the program created so far (`ds_state.created`).
    pub fn created(&self) -> u64 {
        self.state.word(core::mem::offset_of!(DsState, created)).load(Ordering::Acquire)
    }
}

/// The ring buffer of mappings the program created and FINs it carried
/// (`ds_events`).
pub struct CreatedRing {
    rb: RingBuf<MapData>,
}

impl core::fmt::Debug for CreatedRing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CreatedRing(ds_events)")
    }
}

impl CreatedRing {
    /// Hand each event since the last call to `f`, oldest first (a
    /// record too short or of an unknown kind is skipped). Returns how
    /// many were handed.
    pub fn drain(&mut self, mut f: impl FnMut(RingEvent)) -> usize {
        let mut n = 0;
        drain_ring(&mut self.rb, |b| {
            if let Some(ev) = DsEvent::parse(b).and_then(|e| e.event()) {
                n += 1;
                f(ev);
            }
        });
        n
    }
}

/// `BPF_EXIST`: update an element that is there.
const BPF_EXIST: u64 = 2;

/// `struct ds_pool_key`'s address part (the LPM trie's data, after aya's
/// `u32` prefix length: the layout of [`crate::types::DsPoolKey`]).
type PoolKey = [u8; 4];
const _: () = assert!(core::mem::size_of::<Key<PoolKey>>() == core::mem::size_of::<crate::types::DsPoolKey>());

/// One NAT44 mapping of the DS-Lite AFTR as the fast path carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nat44Session {
    /// The B4's IPv6 address (the softwire).
    pub b4: Ipv6Addr,
    /// IP protocol: 6, 17 or 1 (ICMP echo; the ports are identifiers).
    pub proto: u8,
    /// The private transport address inside the softwire.
    pub inside: SocketAddrV4,
    /// The pool transport address.
    pub outside: SocketAddrV4,
    /// TCP in V6 INIT: only the outside SYN+ACK is carried ([`DS_F_HALF_OPEN`]).
    pub half_open: bool,
}

/// What the program recorded of a carried session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSeen {
    /// `bpf_ktime_get_coarse_ns()` of the last packet forwarded either
    /// way (CLOCK_MONOTONIC at tick resolution), 0: none.
    pub last_seen_ns: u64,
    /// The outside SYN+ACK of the half-open mapping was carried.
    pub syn_ack: bool,
    /// A FIN from the B4 was carried ([`DS_F_FIN_V6`]).
    pub fin_v6: bool,
    /// A FIN from the IPv4 side was carried ([`DS_F_FIN_V4`]).
    pub fin_v4: bool,
}

/// What the two entries of `s` recorded; `None` when it is not carried.
fn seen<T: Borrow<MapData>, U: Borrow<MapData>>(
    out: &HashMap<T, DsOutKey, DsOutVal>,
    inn: &HashMap<U, DsInKey, DsInVal>,
    s: &Nat44Session,
) -> Result<Option<SessionSeen>, Error> {
    let ((ok, _), (ik, _)) = s.entries();
    let a = found(DS_OUT, out.get(&ok, 0))?.map(|v| (v.last_seen_ns, v.flags));
    let b = found(DS_IN, inn.get(&ik, 0))?.map(|v| (v.last_seen_ns, v.flags));
    if a.is_none() && b.is_none() {
        return Ok(None);
    }
    let (ta, fa) = a.unwrap_or_default();
    let (tb, fb) = b.unwrap_or_default();
    // Both entries are marked; either one counts (the other may be gone).
    let f = fa | fb;
    Ok(Some(SessionSeen {
        last_seen_ns: ta.max(tb),
        syn_ack: f & DS_F_SYN_ACK != 0,
        fin_v6: f & DS_F_FIN_V6 != 0,
        fin_v4: f & DS_F_FIN_V4 != 0,
    }))
}

/// The session maps on handles of their own (`Send`), for the slow path
/// to read what the program recorded while it handles a packet
/// ([`SoftwireFastPath::session_probe`]).
#[derive(Debug)]
pub struct SessionProbe {
    out: HashMap<MapData, DsOutKey, DsOutVal>,
    inn: HashMap<MapData, DsInKey, DsInVal>,
}

impl SessionProbe {
    /// As [`SoftwireFastPath::session_seen`].
    pub fn seen(&self, s: &Nat44Session) -> Result<Option<SessionSeen>, Error> {
        seen(&self.out, &self.inn, s)
    }

    /// Remove the `ds_in` entry of pool transport address `outside` for
    /// `proto` (a mapping the program created that the slow path did not
    /// take: it had one of the same inside). Returns whether it was there.
    pub fn remove_in(&mut self, proto: u8, outside: SocketAddrV4) -> Result<bool, Error> {
        let ik = DsInKey { addr: be(*outside.ip()), port: outside.port().to_be(), proto, pad: 0 };
        Ok(found(DS_IN, self.inn.remove(&ik))?.is_some())
    }

    /// Write both entries of `s` (BPF_ANY) without counting a session:
    /// the slow path's own mapping of an inside the program also created
    /// (its `ds_out` entry may hold the program's).
    pub fn restore(&mut self, s: &Nat44Session) -> Result<(), Error> {
        let ((ok, ov), (ik, iv)) = s.entries();
        self.inn.insert(ik, iv, 0).map_err(|e| map_err(DS_IN, e))?;
        self.out.insert(ok, ov, 0).map_err(|e| map_err(DS_OUT, e))
    }
}

/// A second handle on the hash map `m` (named `name`).
pub(crate) fn own_hash<K: aya::Pod, V: aya::Pod>(m: &Map, name: &'static str) -> Result<HashMap<MapData, K, V>, Error> {
    let Map::HashMap(d) = m else { return Err(Error::Bpf(format!("map {name}: not a hash map"))) };
    HashMap::try_from(Map::HashMap(dup_map(d, name)?)).map_err(|e| Error::Bpf(format!("map {name}: {e}")))
}

fn be(a: Ipv4Addr) -> u32 {
    u32::from(a).to_be()
}

impl Nat44Session {
    /// The `ds_out` and `ds_in` entries (last-seen times zero).
    pub fn entries(&self) -> ((DsOutKey, DsOutVal), (DsInKey, DsInVal)) {
        let ok = DsOutKey {
            b4: self.b4.octets(),
            addr: be(*self.inside.ip()),
            port: self.inside.port().to_be(),
            proto: self.proto,
            pad: 0,
        };
        let flags = if self.half_open { DS_F_HALF_OPEN } else { 0 };
        let ov =
            DsOutVal { addr: be(*self.outside.ip()), port: self.outside.port().to_be(), flags, ..Default::default() };
        let ik = DsInKey { addr: be(*self.outside.ip()), port: self.outside.port().to_be(), proto: self.proto, pad: 0 };
        let iv = DsInVal {
            b4: self.b4.octets(),
            addr: be(*self.inside.ip()),
            port: self.inside.port().to_be(),
            flags,
            ..Default::default()
        };
        ((ok, ov), (ik, iv))
    }
}

impl SoftwireFastPath {
    /// The pool4 prefixes (address, length): packets from a softwire to
    /// one of them are hairpinned by the slow path.
    pub fn set_pool(&mut self, prefixes: &[(Ipv4Addr, u8)]) -> Result<(), Error> {
        let mut t: LpmTrie<&mut MapData, PoolKey, u8> =
            LpmTrie::try_from(self.obj.map_mut(DS_POOL)?).map_err(|e| Error::Bpf(format!("map {DS_POOL}: {e}")))?;
        for (a, len) in prefixes {
            let k = Key::new(u32::from(*len.min(&32)), a.octets());
            t.insert(&k, 1, 0).map_err(|e| map_err(DS_POOL, e))?;
        }
        Ok(())
    }

    /// Carry `s` (both directions). [`Error::MapFull`] when the maps hold
    /// `max_sessions` already: nothing is written and the flow stays on
    /// the slow path.
    pub fn session_insert(&mut self, s: &Nat44Session) -> Result<(), Error> {
        self.session_write(s, 0)?;
        self.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Rewrite the entries of a carried `s` (a half-open mapping's
    /// handshake completed: carried in full now, the recorded flags and
    /// last-seen times start again). Returns false, writing nothing, when
    /// `s` was not carried (the full maps had refused it).
    pub fn session_update(&mut self, s: &Nat44Session) -> Result<bool, Error> {
        match self.session_write(s, BPF_EXIST) {
            Ok(()) => Ok(true),
            Err(Error::Bpf(_)) if !self.session_present(s)? => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn session_present(&self, s: &Nat44Session) -> Result<bool, Error> {
        let ((_, _), (ik, _)) = s.entries();
        Ok(found(DS_IN, self.obj.hash::<DsInKey, DsInVal>(DS_IN)?.get(&ik, 0))?.is_some())
    }

    /// Write both entries with `flags` (`BPF_ANY`, `BPF_EXIST`).
    fn session_write(&mut self, s: &Nat44Session, flags: u64) -> Result<(), Error> {
        let ((ok, ov), (ik, iv)) = s.entries();
        {
            let mut m = self.obj.hash_mut::<DsInKey, DsInVal>(DS_IN)?;
            m.insert(ik, iv, flags).map_err(|e| map_err(DS_IN, e))?;
        }
        let mut m = self.obj.hash_mut::<DsOutKey, DsOutVal>(DS_OUT)?;
        if let Err(e) = m.insert(ok, ov, flags) {
            let e = map_err(DS_OUT, e);
            let mut i = self.obj.hash_mut::<DsInKey, DsInVal>(DS_IN)?;
            let _ = i.remove(&ik);
            return Err(e);
        }
        Ok(())
    }

    /// Stop carrying `s`. Returns false when it was not there.
    pub fn session_remove(&mut self, s: &Nat44Session) -> Result<bool, Error> {
        let ((ok, _), (ik, _)) = s.entries();
        let was = found(DS_OUT, self.obj.hash_mut::<DsOutKey, DsOutVal>(DS_OUT)?.remove(&ok))?.is_some();
        found(DS_IN, self.obj.hash_mut::<DsInKey, DsInVal>(DS_IN)?.remove(&ik))?;
        if was {
            let _ = self.sessions.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
        }
        Ok(was)
    }

    /// What the program recorded of `s`: when it last forwarded one of
    /// its packets and whether it carried its outside SYN+ACK; `None`
    /// when `s` is not carried.
    pub fn session_seen(&self, s: &Nat44Session) -> Result<Option<SessionSeen>, Error> {
        seen(&self.obj.hash(DS_OUT)?, &self.obj.hash(DS_IN)?, s)
    }

    /// Handles of its own on the session maps, for [`SessionProbe::seen`].
    pub fn session_probe(&self) -> Result<SessionProbe, Error> {
        Ok(SessionProbe { out: own_hash(self.obj.map(DS_OUT)?, DS_OUT)?, inn: own_hash(self.obj.map(DS_IN)?, DS_IN)? })
    }

    /// Sessions carried.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// The port blocks, on handles of their own ([`PortBlocks`]); only
    /// with [`SoftwireSettings::port_blocks`] (else an error).
    ///
    /// [`SoftwireSettings::port_blocks`]: crate::softwire::SoftwireSettings::port_blocks
    pub fn port_blocks(&self) -> Result<PortBlocks, Error> {
        let slots = self.settings().port_blocks;
        if slots == 0 {
            return Err(Error::Bpf("port blocks are off (SoftwireSettings::port_blocks 0)".into()));
        }
        Ok(PortBlocks {
            mem: BlockMem::of(self.obj.map(DS_BLOCKS)?, DS_BLOCKS, slots)?,
            state: Mmap::of(self.obj.map(DS_STATE)?, DS_STATE, core::mem::size_of::<DsState>())?,
            b4: Mutex::new(own_hash(self.obj.map(DS_B4)?, DS_B4)?),
        })
    }

    /// The ring of mappings the program creates, on a handle of its own
    /// ([`CreatedRing`]), and its positions ([`RingWatch`]: whether it has
    /// anything to drain, read without the ring's lock).
    pub fn created_ring(&self) -> Result<(CreatedRing, RingWatch), Error> {
        let rb = own_ring(self.obj.map(DS_EVENTS)?, DS_EVENTS)?;
        let watch = RingWatch::of(&rb, DS_EVENTS)?;
        Ok((CreatedRing { rb }, watch))
    }

    /// Count `n` sessions the program created (drained from its
    /// [`CreatedRing`]) as carried.
    pub fn count_created(&self, n: usize) {
        self.sessions.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_the_two_directions_of_one_mapping() {
        let s = Nat44Session {
            b4: "2001:db8::2".parse().unwrap(),
            proto: 17,
            inside: "192.168.1.2:5000".parse().unwrap(),
            outside: "203.0.113.1:40001".parse().unwrap(),
            half_open: false,
        };
        let ((ok, ov), (ik, iv)) = s.entries();
        assert_eq!(ok.b4, iv.b4);
        assert_eq!((ok.addr, ok.port), (iv.addr, iv.port));
        assert_eq!((ov.addr, ov.port), (ik.addr, ik.port));
        assert_eq!(ok.addr.to_ne_bytes(), [192, 168, 1, 2], "network order in memory");
        assert_eq!(ik.port.to_ne_bytes(), 40001u16.to_be_bytes());
        assert_eq!((ok.proto, ik.proto), (17, 17));
        assert_eq!((ov.flags, iv.flags), (0, 0));
        let ((_, ov), (_, iv)) = Nat44Session { half_open: true, proto: 6, ..s }.entries();
        assert_eq!((ov.flags, iv.flags), (DS_F_HALF_OPEN, DS_F_HALF_OPEN));
    }
}
