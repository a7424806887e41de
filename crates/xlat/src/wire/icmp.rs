//! ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) message views. Both share the
//! first 8 bytes' layout: type, code, checksum, 4 bytes of
//! message-specific data, then the body.

use super::{be16, WireError};

/// ICMP header length (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = 8;

/// ICMPv4 types.
pub mod v4 {
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination Unreachable.
    pub const DEST_UNREACH: u8 = 3;
    /// Source Quench.
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time Exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter Problem.
    pub const PARAM_PROBLEM: u8 = 12;
    /// Dest Unreachable code: fragmentation needed and DF set.
    pub const CODE_FRAG_NEEDED: u8 = 4;
    /// Dest Unreachable code: source route failed.
    pub const CODE_SOURCE_ROUTE_FAILED: u8 = 5;
    /// Dest Unreachable code: host unreachable.
    pub const CODE_HOST_UNREACH: u8 = 1;
    /// Dest Unreachable code: communication administratively prohibited.
    pub const CODE_ADMIN_PROHIBITED: u8 = 13;
    /// Dest Unreachable code: port unreachable.
    pub const CODE_PORT_UNREACH: u8 = 3;
}

/// ICMPv6 types.
pub mod v6 {
    /// Destination Unreachable.
    pub const DEST_UNREACH: u8 = 1;
    /// Packet Too Big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time Exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter Problem.
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Dest Unreachable code: address unreachable.
    pub const CODE_ADDR_UNREACH: u8 = 3;
    /// Dest Unreachable code: communication administratively prohibited.
    pub const CODE_ADMIN_PROHIBITED: u8 = 1;
    /// Dest Unreachable code: port unreachable.
    pub const CODE_PORT_UNREACH: u8 = 4;
}

/// True for ICMPv4 error types (RFC 792, RFC 1812 §4.3.2).
#[inline]
pub fn is_error_v4(t: u8) -> bool {
    matches!(t, v4::DEST_UNREACH | v4::SOURCE_QUENCH | v4::REDIRECT | v4::TIME_EXCEEDED | v4::PARAM_PROBLEM)
}

/// True for ICMPv6 error types (RFC 4443 §2.1: types 0-127).
#[inline]
pub fn is_error_v6(t: u8) -> bool {
    t < 128
}

/// A view of an ICMP message (either family).
#[derive(Debug, Clone, Copy)]
pub struct IcmpMessage<'a> {
    b: &'a [u8],
}

impl<'a> IcmpMessage<'a> {
    /// Check and wrap (at least 8 bytes).
    #[inline]
    pub fn new(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(IcmpMessage { b })
    }
    /// Type.
    #[inline]
    pub fn kind(&self) -> u8 {
        self.b[0]
    }
    /// Code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.b[1]
    }
    /// Checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b, 2)
    }
    /// Bytes 4..8 (identifier/sequence, MTU, pointer, length...).
    #[inline]
    pub fn rest(&self) -> [u8; 4] {
        [self.b[4], self.b[5], self.b[6], self.b[7]]
    }
    /// Everything after the 8-byte header.
    #[inline]
    pub fn body(&self) -> &'a [u8] {
        &self.b[HEADER_LEN..]
    }
}
