//! RFC 7757 — Explicit Address Mappings for Stateless IP/ICMP Translation.
//! HELPER-OWNED: see the brief. Public API below is fixed.

use super::{AddrError, Prefix4, Prefix6};
use core::net::{Ipv4Addr, Ipv6Addr};

/// The Explicit Address Mapping Table.
#[derive(Debug, Clone, Default)]
pub struct Eamt {
    entries: Vec<(Prefix6, Prefix4)>,
}

impl Eamt {
    /// Build from (IPv6 prefix, IPv4 prefix) pairs.
    pub fn new(entries: &[(Prefix6, Prefix4)]) -> Result<Self, AddrError> {
        Ok(Eamt { entries: entries.to_vec() })
    }
    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Longest-prefix match on the IPv4 side.
    pub fn v4_to_v6(&self, _a: Ipv4Addr) -> Option<Ipv6Addr> {
        None
    }
    /// Longest-prefix match on the IPv6 side.
    pub fn v6_to_v4(&self, _a: &Ipv6Addr) -> Option<Ipv4Addr> {
        None
    }
    /// True when `a` is covered by an entry's IPv4 prefix (hairpin test).
    pub fn contains_v4(&self, _a: Ipv4Addr) -> bool {
        false
    }
}
