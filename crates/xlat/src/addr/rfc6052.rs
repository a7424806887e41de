//! RFC 6052 — IPv6 Addressing of IPv4/IPv6 Translators.
//! HELPER-OWNED: see the brief. Public API below is fixed.

use super::{AddrError, Prefix6};
use core::net::{Ipv4Addr, Ipv6Addr};

/// An RFC 6052 translation prefix (/32, /40, /48, /56, /64 or /96).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc6052 {
    prefix: Prefix6,
}

impl Rfc6052 {
    /// Validate and build.
    pub fn new(prefix: Prefix6) -> Result<Self, AddrError> {
        Ok(Rfc6052 { prefix })
    }
    /// The prefix.
    pub fn prefix(&self) -> Prefix6 {
        self.prefix
    }
    /// IPv4 → IPv4-embedded IPv6; `None` when not allowed (WKP rule).
    pub fn embed(&self, _v4: Ipv4Addr) -> Option<Ipv6Addr> {
        None
    }
    /// IPv4-embedded IPv6 → IPv4; `None` when `v6` is outside the prefix.
    pub fn extract(&self, _v6: &Ipv6Addr) -> Option<Ipv4Addr> {
        None
    }
}
