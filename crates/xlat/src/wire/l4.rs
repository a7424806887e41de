//! UDP (RFC 768) and TCP (RFC 9293) header views: ports and the checksum
//! field, which is all the translator touches.

use super::{be16, proto, WireError};

/// UDP header length.
pub const UDP_LEN: usize = 8;
/// Minimum TCP header length.
pub const TCP_MIN_LEN: usize = 20;

/// Offset of the checksum field within the upper-layer header for the
/// protocols whose checksum covers a pseudo-header or that the translator
/// rewrites: UDP 6, TCP 16, ICMPv4/ICMPv6 2.
#[inline]
pub fn checksum_offset(p: u8) -> Option<usize> {
    match p {
        proto::UDP => Some(6),
        proto::TCP => Some(16),
        proto::ICMP | proto::ICMPV6 => Some(2),
        _ => None,
    }
}

/// Bytes of the upper-layer header that must be present (in a first
/// fragment or unfragmented packet) for the translator to rewrite it.
#[inline]
pub fn min_header_len(p: u8) -> usize {
    match p {
        proto::UDP => UDP_LEN,
        proto::TCP => TCP_MIN_LEN,
        proto::ICMP | proto::ICMPV6 => 8,
        _ => 0,
    }
}

/// A UDP header view.
#[derive(Debug, Clone, Copy)]
pub struct UdpHeader<'a> {
    b: &'a [u8],
}

impl<'a> UdpHeader<'a> {
    /// Check and wrap (at least 8 bytes).
    #[inline]
    pub fn new(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < UDP_LEN {
            return Err(WireError::Truncated);
        }
        Ok(UdpHeader { b })
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.b, 0)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.b, 2)
    }
    /// Length field.
    #[inline]
    pub fn length(&self) -> u16 {
        be16(self.b, 4)
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b, 6)
    }
}

/// A TCP header view.
#[derive(Debug, Clone, Copy)]
pub struct TcpHeader<'a> {
    b: &'a [u8],
}

impl<'a> TcpHeader<'a> {
    /// Check and wrap (at least 20 bytes).
    #[inline]
    pub fn new(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < TCP_MIN_LEN {
            return Err(WireError::Truncated);
        }
        Ok(TcpHeader { b })
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.b, 0)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.b, 2)
    }
    /// Flags octet (CWR..FIN).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.b[13]
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b, 16)
    }
}
