//! IPv4 header (RFC 791), with options.

use super::{be16, put16, WireError};
use crate::checksum;
use core::net::Ipv4Addr;

/// Fixed header length.
pub const HEADER_LEN: usize = 20;
/// Option: end of option list.
pub const OPT_EOL: u8 = 0;
/// Option: no operation.
pub const OPT_NOP: u8 = 1;
/// Option: loose source and record route.
pub const OPT_LSRR: u8 = 131;
/// Option: strict source and record route.
pub const OPT_SSRR: u8 = 137;

/// A checked view of an IPv4 packet. Construction guarantees: version 4,
/// IHL ≥ 5, the header fits, `total_len` ≥ header and ≤ the buffer.
/// Bytes past `total_len` (link padding) are ignored.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<'a> {
    b: &'a [u8],
}

impl<'a> Ipv4Packet<'a> {
    /// Check and wrap.
    #[inline]
    pub fn new(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(WireError::Malformed);
        }
        let hl = usize::from(b[0] & 0xf) * 4;
        if hl < HEADER_LEN {
            return Err(WireError::Malformed);
        }
        let tl = usize::from(be16(b, 2));
        if tl < hl {
            return Err(WireError::Malformed);
        }
        if b.len() < hl || b.len() < tl {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { b: &b[..tl] })
    }
    /// Wrap the packet quoted inside an ICMP error: the header must be
    /// complete, but the payload may be cut short of `total_len`. The view
    /// then covers `min(total_len, buffer)` bytes; `total_len()` still
    /// reports the original value.
    #[inline]
    pub fn new_quoted(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(WireError::Malformed);
        }
        let hl = usize::from(b[0] & 0xf) * 4;
        let tl = usize::from(be16(b, 2));
        if hl < HEADER_LEN || tl < hl {
            return Err(WireError::Malformed);
        }
        if b.len() < hl {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { b: &b[..tl.min(b.len())] })
    }
    /// Header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.b[0] & 0xf) * 4
    }
    /// Type of Service / DSCP+ECN octet.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.b[1]
    }
    /// Total length.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.b, 2)
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.b, 4)
    }
    /// Don't Fragment.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.b[6] & 0x40 != 0
    }
    /// More Fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.b[6] & 0x20 != 0
    }
    /// Fragment offset in 8-octet units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.b, 6) & 0x1fff
    }
    /// True for any fragment (MF set or offset ≠ 0).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.b, 6) & 0x3fff != 0
    }
    /// Time to Live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.b[8]
    }
    /// Protocol.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.b[9]
    }
    /// Header checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b, 10)
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.b[12], self.b[13], self.b[14], self.b[15])
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.b[16], self.b[17], self.b[18], self.b[19])
    }
    /// The header bytes, options included.
    #[inline]
    pub fn header(&self) -> &'a [u8] {
        &self.b[..self.header_len()]
    }
    /// Options (may be empty).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.b[HEADER_LEN..self.header_len()]
    }
    /// Payload up to `total_len`.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.b[self.header_len()..]
    }
    /// The packet up to `total_len`.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.b
    }
    /// True when the header checksum verifies.
    #[inline]
    pub fn checksum_ok(&self) -> bool {
        checksum::verifies(checksum::sum(self.header()))
    }
    /// If the options hold an unexpired Loose or Strict Source Route
    /// (RFC 791: pointer ≤ length), the offset of that option within the
    /// header. Malformed option lists return `Err`.
    pub fn unexpired_source_route(&self) -> Result<Option<usize>, WireError> {
        let opts = self.options();
        let mut i = 0;
        while i < opts.len() {
            match opts[i] {
                OPT_EOL => break,
                OPT_NOP => i += 1,
                kind => {
                    let len = *opts.get(i + 1).ok_or(WireError::Malformed)? as usize;
                    if len < 2 || i + len > opts.len() {
                        return Err(WireError::Malformed);
                    }
                    if (kind == OPT_LSRR || kind == OPT_SSRR) && len >= 3 {
                        let ptr = opts[i + 2] as usize;
                        if ptr <= len {
                            return Ok(Some(HEADER_LEN + i));
                        }
                    }
                    i += len;
                }
            }
        }
        Ok(None)
    }
}

/// Owned IPv4 header fields for emitting a 20-byte header (no options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Header {
    /// TOS octet.
    pub tos: u8,
    /// Total length.
    pub total_len: u16,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub df: bool,
    /// More Fragments.
    pub mf: bool,
    /// Fragment offset in 8-octet units.
    pub frag_offset: u16,
    /// TTL.
    pub ttl: u8,
    /// Protocol.
    pub protocol: u8,
    /// Source.
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// Write the 20-byte header, checksum included, into `b[..20]`.
    #[inline]
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..HEADER_LEN];
        b[0] = 0x45;
        b[1] = self.tos;
        put16(b, 2, self.total_len);
        put16(b, 4, self.ident);
        let flags = (u16::from(self.df) << 14) | (u16::from(self.mf) << 13) | (self.frag_offset & 0x1fff);
        put16(b, 6, flags);
        b[8] = self.ttl;
        b[9] = self.protocol;
        put16(b, 10, 0);
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum::finish(checksum::sum(b));
        put16(b, 10, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> Ipv4Header {
        Ipv4Header {
            tos: 0x10,
            total_len: 28,
            ident: 0x1234,
            df: true,
            mf: false,
            frag_offset: 0,
            ttl: 64,
            protocol: 17,
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(198, 51, 100, 2),
        }
    }

    #[test]
    fn emit_then_view() {
        let mut b = [0u8; 28];
        hdr().emit(&mut b);
        let p = Ipv4Packet::new(&b).unwrap();
        assert!(p.checksum_ok());
        assert_eq!((p.tos(), p.total_len(), p.ident(), p.dont_frag(), p.more_frags()), (0x10, 28, 0x1234, true, false));
        assert_eq!((p.ttl(), p.protocol(), p.src(), p.dst()), (64, 17, hdr().src, hdr().dst));
        assert_eq!(p.payload().len(), 8);
        let e = etherparse::Ipv4HeaderSlice::from_slice(&b).unwrap();
        assert_eq!(e.header_checksum(), p.checksum());
        assert_eq!(e.to_header().calc_header_checksum(), p.checksum());
    }

    #[test]
    fn rejects_bad_lengths() {
        let mut b = [0u8; 28];
        hdr().emit(&mut b);
        assert_eq!(Ipv4Packet::new(&b[..19]).unwrap_err(), WireError::Truncated);
        assert_eq!(Ipv4Packet::new(&b[..27]).unwrap_err(), WireError::Truncated);
        let mut c = b;
        c[0] = 0x44;
        assert_eq!(Ipv4Packet::new(&c).unwrap_err(), WireError::Malformed);
        let mut c = b;
        c[3] = 19;
        assert_eq!(Ipv4Packet::new(&c).unwrap_err(), WireError::Malformed);
        let mut c = b;
        c[0] = 0x65;
        assert_eq!(Ipv4Packet::new(&c).unwrap_err(), WireError::Malformed);
        // Link-layer padding beyond total length is ignored.
        let mut padded = [0u8; 40];
        padded[..28].copy_from_slice(&b);
        assert_eq!(Ipv4Packet::new(&padded).unwrap().as_bytes().len(), 28);
    }

    #[test]
    fn source_route_detection() {
        let mut b = [0u8; 32];
        hdr().emit(&mut b);
        b[0] = 0x47; // IHL 7: 8 option bytes
        b[3] = 32;
        // NOP, LSRR len 7 ptr 4 (unexpired), route of 1 address
        b[20..28].copy_from_slice(&[OPT_NOP, OPT_LSRR, 7, 4, 10, 0, 0, 1]);
        let p = Ipv4Packet::new(&b).unwrap();
        assert_eq!(p.unexpired_source_route(), Ok(Some(21)));
        b[23] = 8; // pointer past the end: expired
        assert_eq!(Ipv4Packet::new(&b).unwrap().unexpired_source_route(), Ok(None));
        b[22] = 40; // option length overruns the header
        assert_eq!(Ipv4Packet::new(&b).unwrap().unexpired_source_route(), Err(WireError::Malformed));
    }
}
