//! NAT64 sessions in the contract's form: the two `nat64_sessions`
//! entries (one per direction) that mirror one established session of
//! `crates/nat64` (its `SessionInfo` fields: X:x, Y':y, T:t, Y:y).

use crate::types::{FlowKey, Nat64Value};
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
            pad: [0; 6],
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
            pad: [0; 6],
            last_seen_ns: 0,
        };
        [(k6, v6), (k4, v4)]
    }
}
