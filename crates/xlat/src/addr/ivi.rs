//! RFC 6219 — CERNET IVI address format.
//! HELPER-OWNED: see the brief. Public API below is fixed.

use super::{AddrError, Prefix6};
use core::net::{Ipv4Addr, Ipv6Addr};

/// IVI mapping under an ISP prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ivi {
    isp: Prefix6,
}

impl Ivi {
    /// Build from the ISP's IPv6 prefix (e.g. 2001:dba::/32).
    pub fn new(isp: Prefix6) -> Result<Self, AddrError> {
        Ok(Ivi { isp })
    }
    /// IPv4 → IVI IPv6.
    pub fn embed(&self, _v4: Ipv4Addr) -> Option<Ipv6Addr> {
        None
    }
    /// IVI IPv6 → IPv4.
    pub fn extract(&self, _v6: &Ipv6Addr) -> Option<Ipv4Addr> {
        None
    }
}
