//! The DS-Lite AFTR's NAT44 sessions on the softwire fast path
//! (`bpf/softwire.bpf.c` with `SW_F_DSLITE`, `bpf/softwire.h`'s `ds_*`
//! maps): a [`SoftwireFastPath`] loaded with [`SoftwireSettings::dslite`]
//! carries the packets of the sessions the AFTR mirrors here.
//!
//! One [`Nat44Session`] is two entries: `ds_out` (softwire → IPv4, keyed
//! by the B4 and the inner source) and `ds_in` (IPv4 → softwire, keyed by
//! the pool transport address). The slow path inserts a session when its
//! NAT44 would translate the flow's packets without a state change (UDP
//! and ICMP echo at creation, TCP while ESTABLISHED), removes it when that
//! stops or the mapping expires, and reads [`SoftwireFastPath::session_last_seen`]
//! before it expires one, so a flow carried only here lives on.
//!
//! [`SoftwireSettings::dslite`]: crate::softwire::SoftwireSettings::dslite

use crate::loader::{gone, map_err};
use crate::softwire::{SoftwireFastPath, DS_IN, DS_OUT, DS_POOL};
use crate::Error;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::MapData;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

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
    /// `bpf_ktime_get_coarse_ns()` of the last packet forwarded (0: none).
    pub last_seen_ns: u64,
}

/// `struct ds_pool_key`'s address part (the LPM trie's data).
type PoolKey = [u8; 4];

const _: () = assert!(core::mem::size_of::<DsOutKey>() == 24);
const _: () = assert!(core::mem::size_of::<DsOutVal>() == 16);
const _: () = assert!(core::mem::size_of::<DsInKey>() == 8);
const _: () = assert!(core::mem::size_of::<DsInVal>() == 32);

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
        let ov = DsOutVal { addr: be(*self.outside.ip()), port: self.outside.port().to_be(), pad: 0, last_seen_ns: 0 };
        let ik = DsInKey { addr: be(*self.outside.ip()), port: self.outside.port().to_be(), proto: self.proto, pad: 0 };
        let iv = DsInVal {
            b4: self.b4.octets(),
            addr: be(*self.inside.ip()),
            port: self.inside.port().to_be(),
            pad: 0,
            last_seen_ns: 0,
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
        let ((ok, ov), (ik, iv)) = s.entries();
        {
            let mut m = self.obj.hash_mut::<DsInKey, DsInVal>(DS_IN)?;
            m.insert(ik, iv, 0).map_err(|e| map_err(DS_IN, e))?;
        }
        let mut m = self.obj.hash_mut::<DsOutKey, DsOutVal>(DS_OUT)?;
        if let Err(e) = m.insert(ok, ov, 0) {
            let e = map_err(DS_OUT, e);
            let mut i = self.obj.hash_mut::<DsInKey, DsInVal>(DS_IN)?;
            let _ = i.remove(&ik);
            return Err(e);
        }
        self.sessions += 1;
        Ok(())
    }

    /// Stop carrying `s`. Returns false when it was not there.
    pub fn session_remove(&mut self, s: &Nat44Session) -> Result<bool, Error> {
        let ((ok, _), (ik, _)) = s.entries();
        let mut found = false;
        {
            let mut m = self.obj.hash_mut::<DsOutKey, DsOutVal>(DS_OUT)?;
            match m.remove(&ok) {
                Ok(()) => found = true,
                Err(e) if gone(&e) => {}
                Err(e) => return Err(map_err(DS_OUT, e)),
            }
        }
        let mut m = self.obj.hash_mut::<DsInKey, DsInVal>(DS_IN)?;
        match m.remove(&ik) {
            Ok(()) => {}
            Err(e) if gone(&e) => {}
            Err(e) => return Err(map_err(DS_IN, e)),
        }
        if found {
            self.sessions = self.sessions.saturating_sub(1);
        }
        Ok(found)
    }

    /// When the fast path last forwarded a packet of `s`, either way
    /// (`bpf_ktime_get_coarse_ns()`, CLOCK_MONOTONIC at tick resolution);
    /// `None` when never or when `s` is not carried.
    pub fn session_last_seen(&self, s: &Nat44Session) -> Result<Option<u64>, Error> {
        let ((ok, _), (ik, _)) = s.entries();
        let o = self.obj.hash::<DsOutKey, DsOutVal>(DS_OUT)?;
        let a = match o.get(&ok, 0) {
            Ok(v) => v.last_seen_ns,
            Err(e) if gone(&e) => 0,
            Err(e) => return Err(map_err(DS_OUT, e)),
        };
        let i = self.obj.hash::<DsInKey, DsInVal>(DS_IN)?;
        let b = match i.get(&ik, 0) {
            Ok(v) => v.last_seen_ns,
            Err(e) if gone(&e) => 0,
            Err(e) => return Err(map_err(DS_IN, e)),
        };
        Ok(Some(a.max(b)).filter(|t| *t > 0))
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
        };
        let ((ok, ov), (ik, iv)) = s.entries();
        assert_eq!(ok.b4, iv.b4);
        assert_eq!((ok.addr, ok.port), (iv.addr, iv.port));
        assert_eq!((ov.addr, ov.port), (ik.addr, ik.port));
        assert_eq!(ok.addr.to_ne_bytes(), [192, 168, 1, 2], "network order in memory");
        assert_eq!(ik.port.to_ne_bytes(), 40001u16.to_be_bytes());
        assert_eq!((ok.proto, ik.proto), (17, 17));
    }
}
