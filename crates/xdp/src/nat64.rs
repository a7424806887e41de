//! NAT64 sessions in the contract's form: the two `nat64_sessions`
//! entries (one per direction) that mirror one session of `crates/nat64`
//! (its `SessionInfo` fields: X:x, Y':y, T:t, Y:y), carried in full or
//! half-open (a TCP session in V6 INIT: only the IPv4 side's SYN+ACK is
//! carried, and recorded with [`NAT64_F_SYN_ACK`]); and [`Nat64Sessions`],
//! a handle of its own on the map for the slow path's workers, which
//! mirror a session while the packet that created it is being handled.

use crate::dslite::own_hash;
use crate::loader::{found, map_err, FastPath};
use crate::types::{maps::NAT64_SESSIONS, FlowKey, Nat64Value, NAT64_F_HALF_OPEN, NAT64_F_SYN_ACK};
use crate::Error;
use aya::maps::{HashMap, MapData};
use core::net::{Ipv4Addr, SocketAddrV4, SocketAddrV6};

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

impl FastPath {
    /// A handle of its own on `nat64_sessions` ([`Nat64Sessions`]).
    pub fn nat64_sessions(&self) -> Result<Nat64Sessions, Error> {
        let m = self.map(NAT64_SESSIONS)?;
        Ok(Nat64Sessions { map: own_hash(m, NAT64_SESSIONS)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_open_flag_only_on_tcp_entries() {
        let s = Session {
            l4: L4::Tcp,
            x: "[2001:db8::5]:4000".parse().unwrap(),
            y6: "[64:ff9b::c633:6407]:80".parse().unwrap(),
            t: "192.0.2.1:4000".parse().unwrap(),
            y: "198.51.100.7:80".parse().unwrap(),
            half_open: true,
        };
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
