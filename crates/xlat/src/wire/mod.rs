//! Zero-copy header views, one file per protocol.
//!
//! Each view wraps a byte slice, is built with a checked constructor that
//! guarantees every fixed-offset accessor is in bounds, and exposes named
//! field accessors. The `*Header` structs are the owned "repr" side: they
//! `emit` a header into a buffer. Nothing outside this module reads or
//! writes raw header offsets.

pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod l4;

use crate::DropReason;

/// Why a header could not be viewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the header or than its own length fields claim.
    Truncated,
    /// Inconsistent fields.
    Malformed,
}

impl From<WireError> for DropReason {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Truncated => DropReason::Truncated,
            WireError::Malformed => DropReason::Malformed,
        }
    }
}

/// IP protocol / IPv6 Next Header numbers used by the packet plane.
pub mod proto {
    /// IPv6 Hop-by-Hop Options.
    pub const HOPOPT: u8 = 0;
    /// ICMPv4.
    pub const ICMP: u8 = 1;
    /// IPv4 in IP (RFC 2003 / RFC 2473 4in6).
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation (6in4, RFC 3056 protocol 41).
    pub const IPV6: u8 = 41;
    /// IPv6 Routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No next header.
    pub const NONE: u8 = 59;
    /// IPv6 Destination Options.
    pub const DSTOPTS: u8 = 60;
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
