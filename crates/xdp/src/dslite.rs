//! The DS-Lite AFTR's NAT44 sessions on the softwire fast path
//! (`bpf/softwire.bpf.c` with `SW_F_DSLITE`, `bpf/softwire.h`'s `ds_*`
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

use crate::loader::{found, map_err};
use crate::softwire::{SoftwireFastPath, DS_IN, DS_OUT, DS_POOL};
use crate::Error;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{HashMap, Map, MapData};
use core::borrow::Borrow;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::AsFd as _;

/// `struct ds_out_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DsOutKey {
    /// The B4's IPv6 address.
    pub b4: [u8; 16],
    /// Inner source address, network order.
    pub addr: u32,
    /// Inner source port (ICMP echo identifier), network order.
    pub port: u16,
    /// IP protocol.
    pub proto: u8,
    /// Zero.
    pub pad: u8,
}

/// `DS_F_HALF_OPEN`: a TCP mapping in V6 INIT; only its outside SYN+ACK is carried.
pub const DS_F_HALF_OPEN: u32 = 1;
/// `DS_F_SYN_ACK`: the program carried that SYN+ACK (set by the program).
pub const DS_F_SYN_ACK: u32 = 2;

/// `struct ds_out_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DsOutVal {
    /// Pool address, network order.
    pub addr: u32,
    /// Pool port, network order.
    pub port: u16,
    /// Zero.
    pub pad: u16,
    /// `DS_F_*`.
    pub flags: u32,
    /// Zero.
    pub pad2: u32,
    /// `bpf_ktime_get_coarse_ns()` of the last packet forwarded (0: none).
    pub last_seen_ns: u64,
}

/// `struct ds_in_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DsInKey {
    /// Pool address, network order.
    pub addr: u32,
    /// Pool port, network order.
    pub port: u16,
    /// IP protocol.
    pub proto: u8,
    /// Zero.
    pub pad: u8,
}

/// `struct ds_in_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DsInVal {
    /// The B4's IPv6 address.
    pub b4: [u8; 16],
    /// Inner address, network order.
    pub addr: u32,
    /// Inner port, network order.
    pub port: u16,
    /// Zero.
    pub pad: u16,
    /// `DS_F_*`.
    pub flags: u32,
    /// Zero.
    pub pad2: u32,
    /// `bpf_ktime_get_coarse_ns()` of the last packet forwarded (0: none).
    pub last_seen_ns: u64,
}

/// `BPF_EXIST`: update an element that is there.
const BPF_EXIST: u64 = 2;

/// `struct ds_pool_key`'s address part (the LPM trie's data).
type PoolKey = [u8; 4];

const _: () = assert!(core::mem::size_of::<DsOutKey>() == 24);
const _: () = assert!(core::mem::size_of::<DsOutVal>() == 24);
const _: () = assert!(core::mem::size_of::<DsInKey>() == 8);
const _: () = assert!(core::mem::size_of::<DsInVal>() == 40);

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
    Ok(Some(SessionSeen { last_seen_ns: ta.max(tb), syn_ack: (fa | fb) & DS_F_SYN_ACK != 0 }))
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
}

/// A second handle on the hash map `m` (named `name`).
pub(crate) fn own_hash<K: aya::Pod, V: aya::Pod>(m: &Map, name: &'static str) -> Result<HashMap<MapData, K, V>, Error> {
    let Map::HashMap(d) = m else { return Err(Error::Bpf(format!("map {name}: not a hash map"))) };
    let fd = d.fd().as_fd().try_clone_to_owned().map_err(|e| Error::Bpf(format!("map {name}: dup: {e}")))?;
    let d = MapData::from_fd(fd).map_err(|e| map_err(name, e))?;
    HashMap::try_from(Map::HashMap(d)).map_err(|e| Error::Bpf(format!("map {name}: {e}")))
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
        self.sessions += 1;
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
            self.sessions = self.sessions.saturating_sub(1);
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
        self.sessions
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
