//! IPv6 header (RFC 8200) and the extension-header chain, including the
//! Fragment header (RFC 8200 §4.5).

use super::{be16, be32, proto, put16, put32, WireError};
use core::net::Ipv6Addr;

/// Fixed header length.
pub const HEADER_LEN: usize = 40;
/// Fragment header length.
pub const FRAG_LEN: usize = 8;
/// Longest extension-header chain walked before giving up.
const MAX_EXT_HEADERS: usize = 16;

/// A checked view of an IPv6 packet: version 6, header present, payload
/// length fits in the buffer. Bytes past the payload length are ignored.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<'a> {
    b: &'a [u8],
}

impl<'a> Ipv6Packet<'a> {
    /// Check and wrap.
    #[inline]
    pub fn new(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(WireError::Malformed);
        }
        let end = HEADER_LEN + usize::from(be16(b, 4));
        if b.len() < end {
            return Err(WireError::Truncated);
        }
        Ok(Ipv6Packet { b: &b[..end] })
    }
    /// Wrap the packet quoted inside an ICMPv6 error: the fixed header must
    /// be complete, the payload may be cut short of its Payload Length.
    #[inline]
    pub fn new_quoted(b: &'a [u8]) -> Result<Self, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(WireError::Malformed);
        }
        let end = HEADER_LEN + usize::from(be16(b, 4));
        Ok(Ipv6Packet { b: &b[..end.min(b.len())] })
    }
    /// Traffic Class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((be16(self.b, 0) >> 4) & 0xff) as u8
    }
    /// Flow Label.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.b, 0) & 0x000f_ffff
    }
    /// Payload Length.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.b, 4)
    }
    /// Next Header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.b[6]
    }
    /// Hop Limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.b[7]
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b[8..24]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b[24..40]);
        Ipv6Addr::from(a)
    }
    /// The packet up to the end of its payload.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.b
    }

    /// Walk the extension headers (RFC 7915 §5.1: Hop-by-Hop, Routing and
    /// Destination Options are skipped, the Fragment header is decoded;
    /// anything else is the upper layer). Walking stops after the Fragment
    /// header of a non-first fragment, since what follows is not a header.
    pub fn walk(&self) -> Result<ExtChain, WireError> {
        let b = self.b;
        let mut next = self.next_header();
        let mut off = HEADER_LEN;
        let mut frag = None;
        let mut segments_left_at = None;
        for _ in 0..MAX_EXT_HEADERS {
            match next {
                proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                    if b.len() < off + 2 {
                        return Err(WireError::Truncated);
                    }
                    let len = (usize::from(b[off + 1]) + 1) * 8;
                    if b.len() < off + len {
                        return Err(WireError::Truncated);
                    }
                    if next == proto::ROUTING && segments_left_at.is_none() && b[off + 3] != 0 {
                        segments_left_at = Some(off + 3);
                    }
                    next = b[off];
                    off += len;
                }
                proto::FRAGMENT => {
                    if frag.is_some() {
                        return Err(WireError::Malformed);
                    }
                    if b.len() < off + FRAG_LEN {
                        return Err(WireError::Truncated);
                    }
                    let fo = be16(b, off + 2);
                    let f = FragHeader {
                        at: off,
                        next: b[off],
                        offset: fo >> 3,
                        more: fo & 1 != 0,
                        ident: be32(b, off + 4),
                    };
                    frag = Some(f);
                    next = b[off];
                    off += FRAG_LEN;
                    if f.offset != 0 {
                        return Ok(ExtChain { upper: next, upper_at: off, frag, segments_left_at });
                    }
                }
                _ => return Ok(ExtChain { upper: next, upper_at: off, frag, segments_left_at }),
            }
        }
        Err(WireError::Malformed)
    }
}

/// A decoded Fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragHeader {
    /// Offset of the Fragment header within the packet.
    pub at: usize,
    /// Its Next Header field.
    pub next: u8,
    /// Fragment offset in 8-octet units.
    pub offset: u16,
    /// M flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// True for the IPv6 extension headers RFC 7915 §5.1 refuses after a
/// Fragment header: every extension header of the IANA registry except ESP
/// (AH included) — Hop-by-Hop, Routing, Fragment, AH, Destination Options,
/// Mobility, HIP, Shim6 and the two experimental values.
#[inline]
pub fn is_extension_header(next: u8) -> bool {
    matches!(next, 0 | 43 | 44 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
}

impl FragHeader {
    /// RFC 6946 atomic fragment: offset 0 and M = 0.
    #[inline]
    pub fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

/// What [`Ipv6Packet::walk`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtChain {
    /// The upper-layer protocol number (first header that is not skipped).
    pub upper: u8,
    /// Offset of the upper-layer data within the packet.
    pub upper_at: usize,
    /// The Fragment header, if any.
    pub frag: Option<FragHeader>,
    /// Offset of the Segments Left octet of the first Routing header whose
    /// Segments Left is non-zero.
    pub segments_left_at: Option<usize>,
}

/// Owned IPv6 header fields for emitting the 40-byte fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Header {
    /// Traffic Class.
    pub traffic_class: u8,
    /// Flow Label (20 bits).
    pub flow_label: u32,
    /// Payload Length.
    pub payload_len: u16,
    /// Next Header.
    pub next_header: u8,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Source.
    pub src: Ipv6Addr,
    /// Destination.
    pub dst: Ipv6Addr,
}

impl Ipv6Header {
    /// Write the fixed header into `b[..40]`.
    #[inline]
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..HEADER_LEN];
        put32(b, 0, (6 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000f_ffff));
        put16(b, 4, self.payload_len);
        b[6] = self.next_header;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.src.octets());
        b[24..40].copy_from_slice(&self.dst.octets());
    }
}

/// Write a Fragment header into `b[..8]`.
#[inline]
pub fn emit_frag(b: &mut [u8], next: u8, offset: u16, more: bool, ident: u32) {
    b[0] = next;
    b[1] = 0;
    put16(b, 2, (offset << 3) | u16::from(more));
    put32(b, 4, ident);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        Ipv6Header {
            traffic_class: 0xab,
            flow_label: 0x12345,
            payload_len: payload.len() as u16,
            next_header: next,
            hop_limit: 9,
            src: "2001:db8::1".parse().unwrap(),
            dst: "64:ff9b::c000:201".parse().unwrap(),
        }
        .emit(&mut b);
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn emit_then_view() {
        let b = base(proto::UDP, &[0; 8]);
        let p = Ipv6Packet::new(&b).unwrap();
        assert_eq!((p.traffic_class(), p.flow_label(), p.payload_len(), p.hop_limit()), (0xab, 0x12345, 8, 9));
        let e = etherparse::Ipv6HeaderSlice::from_slice(&b).unwrap();
        assert_eq!(e.traffic_class(), 0xab);
        assert_eq!(e.flow_label().value(), 0x12345);
        assert_eq!(e.source_addr(), p.src());
        let c = p.walk().unwrap();
        assert_eq!((c.upper, c.upper_at, c.frag, c.segments_left_at), (proto::UDP, 40, None, None));
    }

    #[test]
    fn walks_extension_chain() {
        // HBH(8) -> Routing(SL=2, 24 bytes) -> Frag(offset 0, M) -> DstOpts(8) -> TCP
        let mut pl = vec![proto::ROUTING, 0, 1, 4, 0, 0, 0, 0];
        pl.extend_from_slice(&[proto::FRAGMENT, 2, 0, 2, 0, 0, 0, 0]);
        pl.extend_from_slice(&[0; 16]);
        pl.extend_from_slice(&[proto::DSTOPTS, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
        pl.extend_from_slice(&[proto::TCP, 0, 1, 4, 0, 0, 0, 0]);
        pl.extend_from_slice(&[0; 20]);
        let b = base(proto::HOPOPT, &pl);
        let c = Ipv6Packet::new(&b).unwrap().walk().unwrap();
        assert_eq!(c.upper, proto::TCP);
        assert_eq!(c.upper_at, 40 + 8 + 24 + 8 + 8);
        assert_eq!(c.segments_left_at, Some(40 + 8 + 3));
        let f = c.frag.unwrap();
        assert_eq!((f.at, f.offset, f.more, f.ident, f.next), (72, 0, true, 0xdeadbeef, proto::DSTOPTS));
        assert!(!f.is_atomic());
    }

    #[test]
    fn stops_after_non_first_fragment_and_rejects_truncation() {
        let b = base(proto::FRAGMENT, &[proto::DSTOPTS, 0, 0, 0x10, 0, 0, 0, 7, 0xff, 0xff]);
        let c = Ipv6Packet::new(&b).unwrap().walk().unwrap();
        assert_eq!((c.upper, c.upper_at), (proto::DSTOPTS, 48));
        assert_eq!(c.frag.unwrap().offset, 2);
        let b = base(proto::DSTOPTS, &[proto::UDP, 1, 0, 0]);
        assert_eq!(Ipv6Packet::new(&b).unwrap().walk(), Err(WireError::Truncated));
        let mut b = base(proto::UDP, &[0; 8]);
        b.truncate(44);
        assert!(matches!(Ipv6Packet::new(&b), Err(WireError::Truncated)));
        let b = base(proto::FRAGMENT, &[proto::FRAGMENT, 0, 0, 0, 0, 0, 0, 1, proto::UDP, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Ipv6Packet::new(&b).unwrap().walk(), Err(WireError::Malformed));
    }
}
