//! Teredo — RFC 4380 "Teredo: Tunneling IPv6 over UDP through Network
//! Address Translations (NATs)".
//!
//! Implements:
//! - RFC 4380 §4: the Teredo address (prefix `2001:0000::/32`, server IPv4,
//!   16 flag bits, obfuscated mapped port and IPv4) — [`TeredoAddr`]. The
//!   flags are carried as a plain `u16` so the RFC 5991 random bits survive.
//! - RFC 4380 §5.1.1: the packet format — an IPv6 packet as the UDP payload,
//!   optionally preceded by the Authentication indicator and/or the Origin
//!   indication, authentication first — [`parse`], [`encap_udp_payload`];
//!   and the full IPv4+UDP framing for raw-socket/TUN use — [`encap`],
//!   [`decap`].
//! - RFC 4380 §2.8 / §5.2.6: bubbles (an IPv6 header, Next Header 59, no
//!   payload) — [`bubble`], [`TeredoPacket::is_bubble`].
//! - RFC 4380 §5.2.3 (client reception) and §5.4.2 (relay reception): the
//!   source-address acceptance rule — [`source_matches`], [`from_server`].
//!
//! - RFC 6081 §4: trailers after the IPv6 packet are returned, checked, in
//!   [`TeredoPacket::trailers`] (see [`super::teredo_msg`] for reading
//!   and writing them); RFC 5991 random flag bits are carried untouched.
//! - [`is_global_v4`]: the IPv4 addresses a Teredo node may take as a peer's
//!   mapped address or a server address.
//!
//! The qualification messages (Router Solicitation/Advertisement), the
//! Echo of the connectivity test and the trailers are in
//! [`super::teredo_msg`].
//!
//! Style: [`encap`] writes into `Out` and returns a [`Verdict`];
//! [`encap_udp_payload`] and [`bubble`] write into a caller `&mut [u8]` and
//! return the length; [`parse`] and [`decap`] are zero-copy views.

use super::{drop_verdict, Ipv4Outer, TunnelError};
use crate::checksum;
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Header, Ipv6Packet};
use crate::wire::l4::{UdpHeader, UDP_LEN};
use crate::wire::{be16, proto, put16};
use crate::{Out, PacketKind, Verdict};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// The Teredo UDP port of servers (and, by convention, relays): 3544.
pub const TEREDO_PORT: u16 = 3544;
/// The Teredo prefix `2001:0000::/32` (RFC 4380 §2.6), as its first 32 bits.
pub const PREFIX_HI32: u32 = 0x2001_0000;
/// Flags: the cone bit (RFC 4380 §4: "C" flag, the NAT is a cone NAT).
pub const FLAG_CONE: u16 = 0x8000;
/// Hop limit of bubbles built by [`bubble`] (as Miredo does).
pub const BUBBLE_HOP_LIMIT: u8 = 255;

// RFC 4380 §5.1.1 indicator layout. Every indicator starts with a 16-bit
// type; an IPv6 packet starts with version 6, so its first 16 bits are
// >= 0x6000 and can never be taken for an indicator.
/// Indicator type of the Origin indication.
const IND_ORIGIN: u16 = 0x0000;
/// Indicator type of the Authentication indicator.
const IND_AUTH: u16 = 0x0001;
/// Origin indication: type(2) + obfuscated port(2) + obfuscated IPv4(4).
const ORIGIN_LEN: usize = 8;
/// Offset of the obfuscated port within the Origin indication.
const ORIGIN_PORT: usize = 2;
/// Offset of the obfuscated IPv4 within the Origin indication.
const ORIGIN_ADDR: usize = 4;
/// Authentication: offset of the client-identifier length octet.
const AUTH_ID_LEN: usize = 2;
/// Authentication: offset of the authentication-value length octet.
const AUTH_AU_LEN: usize = 3;
/// Authentication: fixed part before the client identifier.
const AUTH_FIXED: usize = 4;
/// Authentication: nonce length.
const NONCE_LEN: usize = 8;
/// Authentication: confirmation byte length.
const CONFIRM_LEN: usize = 1;

// UDP header layout (RFC 768), for emitting; parsing uses `UdpHeader`.
/// Offset of the UDP source port.
const UDP_SRC_PORT: usize = 0;
/// Offset of the UDP destination port.
const UDP_DST_PORT: usize = 2;
/// Offset of the UDP length.
const UDP_LENGTH: usize = 4;
/// Offset of the UDP checksum.
const UDP_CHECKSUM: usize = 6;

/// A Teredo address (RFC 4380 §4):
/// `2001:0000 | server IPv4 | flags | port ^ 0xffff | mapped IPv4 ^ 0xffffffff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TeredoAddr {
    /// The client's Teredo server.
    pub server: Ipv4Addr,
    /// Flags (bit 0x8000 = cone; other bits random per RFC 5991, kept as is).
    pub flags: u16,
    /// The client's mapped (NAT public) address and port, not obfuscated.
    pub mapped: SocketAddrV4,
}

impl TeredoAddr {
    /// The IPv6 address.
    pub fn to_ipv6(&self) -> Ipv6Addr {
        let v = (u128::from(PREFIX_HI32) << 96)
            | (u128::from(u32::from(self.server)) << 64)
            | (u128::from(self.flags) << 48)
            | (u128::from(!self.mapped.port()) << 32)
            | u128::from(!u32::from(*self.mapped.ip()));
        Ipv6Addr::from(v)
    }

    /// Decode a Teredo address; `None` outside `2001:0000::/32`.
    pub fn from_ipv6(a: &Ipv6Addr) -> Option<Self> {
        let v = u128::from(*a);
        if (v >> 96) as u32 != PREFIX_HI32 {
            return None;
        }
        Some(TeredoAddr {
            server: Ipv4Addr::from((v >> 64) as u32),
            flags: (v >> 48) as u16,
            mapped: SocketAddrV4::new(Ipv4Addr::from(!(v as u32)), !((v >> 32) as u16)),
        })
    }

    /// True when the cone flag is set.
    #[inline]
    pub fn is_cone(&self) -> bool {
        self.flags & FLAG_CONE != 0
    }
}

/// True for an address inside `2001:0000::/32`.
#[inline]
pub fn is_teredo(a: &Ipv6Addr) -> bool {
    (u128::from(*a) >> 96) as u32 == PREFIX_HI32
}

/// The Authentication indicator (RFC 4380 §5.1.1), borrowed from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auth<'a> {
    /// Client identifier (0..=255 bytes).
    pub client_id: &'a [u8],
    /// Authentication value (0..=255 bytes).
    pub auth_value: &'a [u8],
    /// Nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Confirmation byte.
    pub confirmation: u8,
}

impl Auth<'_> {
    /// Encoded length of the indicator.
    #[inline]
    pub fn wire_len(&self) -> usize {
        AUTH_FIXED + self.client_id.len() + self.auth_value.len() + NONCE_LEN + CONFIRM_LEN
    }
}

/// A parsed Teredo UDP payload.
#[derive(Debug, Clone, Copy)]
pub struct TeredoPacket<'a> {
    /// The Authentication indicator, if present.
    pub auth: Option<Auth<'a>>,
    /// The Origin indication, de-obfuscated, if present.
    pub origin: Option<SocketAddrV4>,
    /// The IPv6 packet (validated: version 6, payload length within the payload).
    pub ipv6: &'a [u8],
    /// RFC 6081 trailers after the IPv6 packet (checked; empty when none).
    pub trailers: &'a [u8],
    view: Ipv6Packet<'a>,
}

impl<'a> TeredoPacket<'a> {
    /// The IPv6 packet as a checked view.
    #[inline]
    pub fn ipv6_packet(&self) -> Ipv6Packet<'a> {
        self.view
    }

    /// A bubble (RFC 4380 §2.8): Next Header 59 and Payload Length 0.
    #[inline]
    pub fn is_bubble(&self) -> bool {
        self.view.next_header() == proto::NONE && self.view.payload_len() == 0
    }
}

#[inline]
fn obfuscated(b: &[u8]) -> SocketAddrV4 {
    let port = !be16(b, ORIGIN_PORT);
    let ip = !u32::from_be_bytes([b[ORIGIN_ADDR], b[ORIGIN_ADDR + 1], b[ORIGIN_ADDR + 2], b[ORIGIN_ADDR + 3]]);
    SocketAddrV4::new(Ipv4Addr::from(ip), port)
}

/// Parse a Teredo UDP payload (RFC 4380 §5.1.1): `[auth] [origin] ipv6`.
///
/// Errors: an indicator cut short → `Truncated`; an unknown indicator type,
/// indicators out of order or repeated, an IPv6 packet that is not version
/// 6 → `Malformed`; bytes after the IPv6 packet that are not well-formed
/// RFC 6081 trailers → `Malformed` or `Truncated`.
pub fn parse(udp_payload: &[u8]) -> Result<TeredoPacket<'_>, TunnelError> {
    let mut rest = udp_payload;
    let mut auth = None;
    let mut origin = None;
    loop {
        let Some(t) = rest.get(..2).map(|b| be16(b, 0)) else {
            return Err(TunnelError::Truncated);
        };
        match t {
            IND_AUTH if auth.is_none() && origin.is_none() => {
                let fixed = rest.get(..AUTH_FIXED).ok_or(TunnelError::Truncated)?;
                let id_len = usize::from(fixed[AUTH_ID_LEN]);
                let au_len = usize::from(fixed[AUTH_AU_LEN]);
                let total = AUTH_FIXED + id_len + au_len + NONCE_LEN + CONFIRM_LEN;
                let ind = rest.get(..total).ok_or(TunnelError::Truncated)?;
                let (client_id, tail) = ind[AUTH_FIXED..].split_at(id_len);
                let (auth_value, tail) = tail.split_at(au_len);
                let mut nonce = [0u8; NONCE_LEN];
                nonce.copy_from_slice(&tail[..NONCE_LEN]);
                auth = Some(Auth { client_id, auth_value, nonce, confirmation: tail[NONCE_LEN] });
                rest = &rest[total..];
            }
            IND_ORIGIN if origin.is_none() => {
                let ind = rest.get(..ORIGIN_LEN).ok_or(TunnelError::Truncated)?;
                origin = Some(obfuscated(ind));
                rest = &rest[ORIGIN_LEN..];
            }
            _ if rest[0] >> 4 == 6 => break,
            _ => return Err(TunnelError::Malformed),
        }
    }
    let view = Ipv6Packet::new(rest)?;
    let (ipv6, trailers) = rest.split_at(view.as_bytes().len());
    if !trailers.is_empty() {
        super::teredo_msg::check_trailers(trailers).map_err(|_| TunnelError::Malformed)?;
    }
    Ok(TeredoPacket { auth, origin, ipv6, trailers, view })
}

/// Write a Teredo UDP payload `[auth] [origin] ipv6` into `buf` (RFC 4380
/// §5.1.1) and return its length. `ipv6` is validated with
/// [`Ipv6Packet::new`]; bytes after its Payload Length are not carried.
pub fn encap_udp_payload(
    auth: Option<&Auth<'_>>,
    origin: Option<SocketAddrV4>,
    ipv6: &[u8],
    buf: &mut [u8],
) -> Result<usize, TunnelError> {
    let inner = Ipv6Packet::new(ipv6)?.as_bytes();
    let ind_len = indicators_len(auth, origin)?;
    let total = ind_len + inner.len();
    let buf = buf.get_mut(..total).ok_or(TunnelError::NoSpace)?;
    write_indicators(auth, origin, buf);
    buf[ind_len..].copy_from_slice(inner);
    Ok(total)
}

fn indicators_len(auth: Option<&Auth<'_>>, origin: Option<SocketAddrV4>) -> Result<usize, TunnelError> {
    let mut n = 0;
    if let Some(a) = auth {
        if a.client_id.len() > usize::from(u8::MAX) || a.auth_value.len() > usize::from(u8::MAX) {
            return Err(TunnelError::Malformed);
        }
        n += a.wire_len();
    }
    if origin.is_some() {
        n += ORIGIN_LEN;
    }
    Ok(n)
}

/// Write the indicators; `b` must be at least `indicators_len` long and the
/// auth lengths already checked.
fn write_indicators(auth: Option<&Auth<'_>>, origin: Option<SocketAddrV4>, b: &mut [u8]) {
    let mut at = 0;
    if let Some(a) = auth {
        put16(b, at, IND_AUTH);
        b[at + AUTH_ID_LEN] = a.client_id.len() as u8;
        b[at + AUTH_AU_LEN] = a.auth_value.len() as u8;
        at += AUTH_FIXED;
        b[at..at + a.client_id.len()].copy_from_slice(a.client_id);
        at += a.client_id.len();
        b[at..at + a.auth_value.len()].copy_from_slice(a.auth_value);
        at += a.auth_value.len();
        b[at..at + NONCE_LEN].copy_from_slice(&a.nonce);
        at += NONCE_LEN;
        b[at] = a.confirmation;
        at += CONFIRM_LEN;
    }
    if let Some(o) = origin {
        put16(b, at, IND_ORIGIN);
        put16(b, at + ORIGIN_PORT, !o.port());
        b[at + ORIGIN_ADDR..at + ORIGIN_LEN].copy_from_slice(&(!u32::from(*o.ip())).to_be_bytes());
    }
}

/// Encapsulate an IPv6 packet as a complete IPv4+UDP Teredo packet from
/// `src` to `dst`, with an optional Origin indication, for raw-socket/TUN
/// engines. Outer header per [`Ipv4Outer::default`] (TTL 64, DF clear).
/// Clears `out`; on [`Verdict::Emit`] it holds one [`PacketKind::Forward`]
/// packet. The UDP checksum is always computed (never 0; 0 → 0xffff).
pub fn encap(
    inner_v6: &[u8],
    src: SocketAddrV4,
    dst: SocketAddrV4,
    origin: Option<SocketAddrV4>,
    out: &mut Out,
) -> Verdict {
    encap_with(inner_v6, src, dst, None, origin, &Ipv4Outer::default(), out)
}

/// [`encap`] with an Authentication indicator and explicit outer-header options.
pub fn encap_with(
    inner_v6: &[u8],
    src: SocketAddrV4,
    dst: SocketAddrV4,
    auth: Option<&Auth<'_>>,
    origin: Option<SocketAddrV4>,
    opts: &Ipv4Outer,
    out: &mut Out,
) -> Verdict {
    out.clear();
    match encap_inner(inner_v6, src, dst, auth, origin, opts, out) {
        Ok(()) => Verdict::Emit,
        Err(e) => drop_verdict(e),
    }
}

fn encap_inner(
    inner_v6: &[u8],
    src: SocketAddrV4,
    dst: SocketAddrV4,
    auth: Option<&Auth<'_>>,
    origin: Option<SocketAddrV4>,
    opts: &Ipv4Outer,
    out: &mut Out,
) -> Result<(), TunnelError> {
    let p = Ipv6Packet::new(inner_v6)?;
    let inner = p.as_bytes();
    let ind_len = indicators_len(auth, origin)?;
    let udp_len = UDP_LEN + ind_len + inner.len();
    let total = ipv4::HEADER_LEN + udp_len;
    let too_big = TunnelError::TooBig { mtu: usize::from(u16::MAX) };
    let total_len = u16::try_from(total).map_err(|_| too_big)?;
    let udp_len16 = udp_len as u16; // < total_len
    let ident = out.take_ident();
    let hdr = opts.header(&p, proto::UDP, (*src.ip(), *dst.ip()), total_len, ident);
    let buf = out.space(total).ok_or(TunnelError::NoSpace)?;
    hdr.emit(buf);
    let udp = &mut buf[ipv4::HEADER_LEN..total];
    put16(udp, UDP_SRC_PORT, src.port());
    put16(udp, UDP_DST_PORT, dst.port());
    put16(udp, UDP_LENGTH, udp_len16);
    put16(udp, UDP_CHECKSUM, 0);
    write_indicators(auth, origin, &mut udp[UDP_LEN..]);
    udp[UDP_LEN + ind_len..].copy_from_slice(inner);
    let acc = checksum::pseudo_v4(*src.ip(), *dst.ip(), proto::UDP, udp_len16) + checksum::sum(udp);
    let c = match checksum::finish(acc) {
        0 => 0xffff,
        c => c,
    };
    put16(udp, UDP_CHECKSUM, c);
    out.commit(total, PacketKind::Forward);
    Ok(())
}

/// Decapsulate a complete IPv4+UDP Teredo packet: checks the IPv4 header
/// (checksum, protocol 17, not a fragment), the UDP length (≥ 8 and within
/// the IPv4 payload) and a non-zero UDP checksum, then [`parse`]s the UDP
/// payload. Returns the outer source and destination and the parsed packet,
/// borrowing from `ipv4_packet`.
pub fn decap(ipv4_packet: &[u8]) -> Result<(SocketAddrV4, SocketAddrV4, TeredoPacket<'_>), TunnelError> {
    let o = Ipv4Packet::new(ipv4_packet)?;
    if !o.checksum_ok() {
        return Err(TunnelError::BadIpv4Checksum);
    }
    if o.protocol() != proto::UDP {
        return Err(TunnelError::Rule("RFC 4380 §5.1.1: Teredo packets are carried in UDP"));
    }
    if o.is_fragment() {
        return Err(TunnelError::Fragmented);
    }
    let payload = o.payload();
    let u = UdpHeader::new(payload)?;
    let len = usize::from(u.length());
    if len < UDP_LEN {
        return Err(TunnelError::Malformed);
    }
    let udp = payload.get(..len).ok_or(TunnelError::Truncated)?;
    if u.checksum() != 0 {
        let acc = checksum::pseudo_v4(o.src(), o.dst(), proto::UDP, u.length()) + checksum::sum(udp);
        if !checksum::verifies(acc) {
            return Err(TunnelError::BadUdpChecksum);
        }
    }
    let src = SocketAddrV4::new(o.src(), u.src_port());
    let dst = SocketAddrV4::new(o.dst(), u.dst_port());
    Ok((src, dst, parse(&udp[UDP_LEN..])?))
}

/// A global unicast IPv4 address, as Teredo nodes require of mapped and
/// server addresses (RFC 4380 §5.2.3 and §5.3.1; the ranges are those
/// Miredo refuses too): not 0/8, 10/8, 127/8, 169.254/16, 172.16/12,
/// 192.168/16, the 6to4 relay anycast 192.88.99/24, nor 224/3.
#[inline]
pub fn is_global_v4(a: Ipv4Addr) -> bool {
    let v = u32::from(a);
    !(v >> 24 == 0
        || v >> 24 == 10
        || v >> 24 == 127
        || v >> 16 == 0xa9fe
        || v >> 20 == 0xac1
        || v >> 16 == 0xc0a8
        || v >> 8 == 0xc0_5863
        || v >> 29 == 0b111)
}

/// The RFC 4380 §5.2.3 / §5.4.2 acceptance rule for a packet from a Teredo
/// peer: its IPv6 source must be a Teredo address whose mapped address and
/// port equal the outer IPv4 source and UDP port. Packets from the client's
/// own server (see [`from_server`]) are exempt, and a client also accepts
/// packets from relays it has a peer entry for — both are the caller's
/// state, not checked here.
#[inline]
pub fn source_matches(outer_src: SocketAddrV4, inner_src: &Ipv6Addr) -> bool {
    TeredoAddr::from_ipv6(inner_src).is_some_and(|t| t.mapped == outer_src)
}

/// True when the outer source is the Teredo server `server` on port 3544
/// (RFC 4380 §5.2.3: such packets skip the [`source_matches`] check).
#[inline]
pub fn from_server(outer_src: SocketAddrV4, server: Ipv4Addr) -> bool {
    *outer_src.ip() == server && outer_src.port() == TEREDO_PORT
}

/// Write a bubble from `src` to `dst` into `buf` (RFC 4380 §2.8: an IPv6
/// header with Next Header 59 and Payload Length 0; hop limit
/// [`BUBBLE_HOP_LIMIT`]) and return its length (40).
pub fn bubble(src: Ipv6Addr, dst: Ipv6Addr, buf: &mut [u8]) -> Result<usize, TunnelError> {
    let b = buf.get_mut(..ipv6::HEADER_LEN).ok_or(TunnelError::NoSpace)?;
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        payload_len: 0,
        next_header: proto::NONE,
        hop_limit: BUBBLE_HOP_LIMIT,
        src,
        dst,
    }
    .emit(b);
    Ok(ipv6::HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DropReason;
    use proptest::prelude::*;

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn sa(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    fn paper() -> TeredoAddr {
        TeredoAddr { server: Ipv4Addr::new(3, 3, 3, 3), flags: FLAG_CONE, mapped: sa("1.1.1.1:7863") }
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        Ipv6Header {
            traffic_class: 0x20,
            flow_label: 0xbeef,
            payload_len: payload.len() as u16,
            next_header: proto::UDP,
            hop_limit: 64,
            src,
            dst,
        }
        .emit(&mut b);
        b.extend_from_slice(payload);
        b
    }

    fn sample() -> Vec<u8> {
        v6(paper().to_ipv6(), a6("2001:db8::1"), &[0xaa; 12])
    }

    #[test]
    fn paper_example_address() {
        // sip-mobility-teredo-ims §3: server 3.3.3.3, cone NAT, mapped 1.1.1.1:7863.
        let want = a6("2001:0:303:303:8000:e148:fefe:fefe");
        assert_eq!(paper().to_ipv6(), want);
        let back = TeredoAddr::from_ipv6(&want).unwrap();
        assert_eq!(back, paper());
        assert!(back.is_cone());
        assert!(is_teredo(&want));
        assert_eq!(TeredoAddr::from_ipv6(&a6("2001:db8::1")), None);
        assert_eq!(TeredoAddr::from_ipv6(&a6("2001:1::1")), None);
    }

    #[test]
    fn rfc4380_section4_example() {
        // RFC 4380 §4: server 65.54.227.120, cone, mapped 192.0.2.45:40000.
        let t =
            TeredoAddr { server: Ipv4Addr::new(65, 54, 227, 120), flags: FLAG_CONE, mapped: sa("192.0.2.45:40000") };
        assert_eq!(t.to_ipv6(), a6("2001:0000:4136:e378:8000:63bf:3fff:fdd2"));
        let restricted = TeredoAddr { flags: 0, ..t };
        assert!(!restricted.is_cone());
        assert_eq!(restricted.to_ipv6(), a6("2001:0000:4136:e378:0000:63bf:3fff:fdd2"));
        // RFC 5991 random bits are carried untouched.
        let r = TeredoAddr { flags: 0x8123, ..t };
        assert_eq!(TeredoAddr::from_ipv6(&r.to_ipv6()).unwrap().flags, 0x8123);
    }

    #[test]
    fn origin_indication_encoding() {
        let inner = sample();
        let mut buf = [0u8; 200];
        let n = encap_udp_payload(None, Some(sa("1.1.1.1:7863")), &inner, &mut buf).unwrap();
        assert_eq!(n, 8 + inner.len());
        assert_eq!(&buf[..8], &[0x00, 0x00, 0xe1, 0x48, 0xfe, 0xfe, 0xfe, 0xfe]);
        assert_eq!(&buf[8..n], &inner[..]);
        let p = parse(&buf[..n]).unwrap();
        assert_eq!(p.origin, Some(sa("1.1.1.1:7863")));
        assert_eq!(p.auth, None);
        assert_eq!(p.ipv6, &inner[..]);
        assert!(!p.is_bubble());
        assert_eq!(p.ipv6_packet().src(), paper().to_ipv6());
    }

    #[test]
    fn auth_and_origin_together() {
        // Hand-built: auth (id "ab", au 3 bytes, nonce, confirmation 0) then origin.
        let inner = sample();
        let mut pl = vec![0x00, 0x01, 2, 3, b'a', b'b', 9, 8, 7, 1, 2, 3, 4, 5, 6, 7, 8, 0x00];
        pl.extend_from_slice(&[0x00, 0x00, 0xe1, 0x48, 0xfe, 0xfe, 0xfe, 0xfe]);
        pl.extend_from_slice(&inner);
        let p = parse(&pl).unwrap();
        let a = p.auth.unwrap();
        assert_eq!(
            (a.client_id, a.auth_value, a.nonce, a.confirmation),
            (&b"ab"[..], &[9, 8, 7][..], [1, 2, 3, 4, 5, 6, 7, 8], 0)
        );
        assert_eq!(a.wire_len(), 18);
        assert_eq!(p.origin, Some(sa("1.1.1.1:7863")));
        assert_eq!(p.ipv6, &inner[..]);
        // The writer produces the same bytes.
        let mut buf = [0u8; 300];
        let n = encap_udp_payload(Some(&a), p.origin, &inner, &mut buf).unwrap();
        assert_eq!(&buf[..n], &pl[..]);
        // Auth alone (RFC 4380 router solicitation from a client), empty id/value.
        let a0 = Auth { client_id: &[], auth_value: &[], nonce: [0xee; 8], confirmation: 1 };
        let n = encap_udp_payload(Some(&a0), None, &inner, &mut buf).unwrap();
        assert_eq!(&buf[..13], &[0, 1, 0, 0, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 1]);
        assert_eq!(parse(&buf[..n]).unwrap().auth, Some(a0));
    }

    #[test]
    fn indicator_errors() {
        let inner = sample();
        // Origin cut short.
        assert_eq!(parse(&[0, 0, 0xe1, 0x48, 0xfe]).unwrap_err(), TunnelError::Truncated);
        // Auth fixed part cut short, and body cut short.
        assert_eq!(parse(&[0, 1, 0]).unwrap_err(), TunnelError::Truncated);
        assert_eq!(parse(&[0, 1, 4, 4, 1, 2, 3, 4, 5]).unwrap_err(), TunnelError::Truncated);
        // Indicators with nothing after them.
        assert_eq!(parse(&[0, 0, 0xe1, 0x48, 0xfe, 0xfe, 0xfe, 0xfe]).unwrap_err(), TunnelError::Truncated);
        assert_eq!(parse(&[]).unwrap_err(), TunnelError::Truncated);
        // Origin before auth (wrong order), two origins, unknown indicator type.
        let mut pl = vec![0, 0, 0xe1, 0x48, 0xfe, 0xfe, 0xfe, 0xfe];
        pl.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        pl.extend_from_slice(&inner);
        assert_eq!(parse(&pl).unwrap_err(), TunnelError::Malformed);
        let mut pl = [0, 0, 0xe1, 0x48, 0xfe, 0xfe, 0xfe, 0xfe].repeat(2);
        pl.extend_from_slice(&inner);
        assert_eq!(parse(&pl).unwrap_err(), TunnelError::Malformed);
        let mut pl = vec![0, 2, 0, 0];
        pl.extend_from_slice(&inner);
        assert_eq!(parse(&pl).unwrap_err(), TunnelError::Malformed);
        // IPv6 shorter than its payload length, or with trailing bytes that
        // are no RFC 6081 trailers; well-formed trailers are returned.
        assert_eq!(parse(&inner[..inner.len() - 1]).unwrap_err(), TunnelError::Truncated);
        let mut pl = inner.clone();
        pl.push(0);
        assert_eq!(parse(&pl).unwrap_err(), TunnelError::Malformed);
        let mut pl = inner.clone();
        pl.extend_from_slice(&[1, 4, 9, 9, 9, 9]);
        let p = parse(&pl).unwrap();
        assert_eq!((p.ipv6, p.trailers), (&inner[..], &[1, 4, 9, 9, 9, 9][..]));
        pl.extend_from_slice(&[5, 3, 0, 0, 0]);
        assert_eq!(parse(&pl).unwrap_err(), TunnelError::Malformed);
        // Oversized auth fields cannot be written; short buffers are reported.
        let big = [0u8; 256];
        let a = Auth { client_id: &big, auth_value: &[], nonce: [0; 8], confirmation: 0 };
        assert_eq!(encap_udp_payload(Some(&a), None, &inner, &mut [0u8; 1000]), Err(TunnelError::Malformed));
        assert_eq!(encap_udp_payload(None, None, &inner, &mut [0u8; 10]), Err(TunnelError::NoSpace));
    }

    #[test]
    fn bubbles() {
        let mut buf = [0u8; 40];
        let src = paper().to_ipv6();
        let dst = a6("2001:0:4136:e378:8000:63bf:3fff:fdd2");
        assert_eq!(bubble(src, dst, &mut buf), Ok(40));
        let mut want = vec![0x60, 0, 0, 0, 0, 0, 59, 255];
        want.extend_from_slice(&src.octets());
        want.extend_from_slice(&dst.octets());
        assert_eq!(&buf[..], &want[..]);
        let p = parse(&buf).unwrap();
        assert!(p.is_bubble());
        assert_eq!(bubble(src, dst, &mut [0u8; 39]), Err(TunnelError::NoSpace));
        let e = etherparse::Ipv6HeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(e.next_header(), etherparse::IpNumber::IPV6_NO_NEXT_HEADER);
    }

    #[test]
    fn encap_decap_round_trip_with_etherparse() {
        let inner = sample();
        let relay = sa("2.2.2.2:3544");
        let client = sa("1.1.1.1:7863");
        let mut out = Out::new();
        assert_eq!(encap(&inner, relay, client, Some(sa("192.0.2.7:1234")), &mut out), Verdict::Emit);
        let (kind, pkt) = out.get(0).unwrap();
        assert_eq!(kind, PacketKind::Forward);
        // etherparse checks the IPv4 header checksum and the UDP checksum over the pseudo-header.
        let ip = etherparse::Ipv4HeaderSlice::from_slice(pkt).unwrap().to_header();
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        let sliced = etherparse::SlicedPacket::from_ip(pkt).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = sliced.transport else { panic!("not UDP") };
        assert_eq!((u.source_port(), u.destination_port()), (3544, 7863));
        let want = u.to_header().calc_checksum_ipv4(&ip, u.payload()).unwrap();
        assert_eq!(u.checksum(), want);
        assert_ne!(u.checksum(), 0);
        assert_eq!(u.payload().len(), 8 + inner.len());
        let (s, d, p) = decap(pkt).unwrap();
        assert_eq!((s, d), (relay, client));
        assert_eq!(p.origin, Some(sa("192.0.2.7:1234")));
        assert_eq!(p.ipv6, &inner[..]);
        assert!(source_matches(d, &paper().to_ipv6()));
    }

    #[test]
    fn decap_checks() {
        let inner = sample();
        let mut out = Out::new();
        let opts = Ipv4Outer { ttl: 9, df: true, copy_traffic_class: true };
        let au = Auth { client_id: b"x", auth_value: b"y", nonce: [3; 8], confirmation: 0 };
        let v = encap_with(&inner, sa("192.0.2.1:3544"), sa("198.51.100.2:4000"), Some(&au), None, &opts, &mut out);
        assert_eq!(v, Verdict::Emit);
        let pkt = out.get(0).unwrap().1.to_vec();
        let ip = Ipv4Packet::new(&pkt).unwrap();
        assert_eq!((ip.ttl(), ip.dont_frag(), ip.tos()), (9, true, 0x20));
        assert_eq!(decap(&pkt).unwrap().2.auth, Some(au));
        // Corrupt the UDP checksum.
        let mut bad = pkt.clone();
        bad[26] ^= 0x55;
        assert_eq!(decap(&bad).unwrap_err(), TunnelError::BadUdpChecksum);
        // A zero UDP checksum is not verified.
        bad[26] = 0;
        bad[27] = 0;
        assert!(decap(&bad).is_ok());
        // UDP length larger than the IPv4 payload, or below 8.
        let mut bad = pkt.clone();
        bad[24] = 0xff;
        assert_eq!(decap(&bad).unwrap_err(), TunnelError::Truncated);
        bad[24] = 0;
        bad[25] = 7;
        assert_eq!(decap(&bad).unwrap_err(), TunnelError::Malformed);
        // Not UDP / bad header checksum.
        let mut bad = pkt.clone();
        bad[9] = 6;
        assert_eq!(decap(&bad).unwrap_err(), TunnelError::BadIpv4Checksum);
        let c = checksum::finish(checksum::sum(&{
            let mut h = bad[..20].to_vec();
            h[10] = 0;
            h[11] = 0;
            h
        }));
        bad[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(matches!(decap(&bad).unwrap_err(), TunnelError::Rule(_)));
        assert_eq!(DropReason::from(decap(&pkt[..27]).unwrap_err()), DropReason::Truncated);
        // Encap of a non-IPv6 payload.
        assert_eq!(
            encap(&[0u8; 40], sa("1.2.3.4:1"), sa("5.6.7.8:2"), None, &mut out),
            Verdict::Drop(DropReason::Malformed)
        );
    }

    #[test]
    fn global_v4() {
        for a in [
            "0.1.1.1",
            "10.0.0.1",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.9.9",
            "192.168.0.1",
            "192.88.99.1",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!is_global_v4(a.parse().unwrap()), "{a}");
        }
        for a in ["192.0.2.1", "198.51.100.1", "172.32.0.1", "8.8.8.8", "192.88.98.1"] {
            assert!(is_global_v4(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn acceptance_rule() {
        let t = paper().to_ipv6();
        assert!(source_matches(sa("1.1.1.1:7863"), &t));
        assert!(!source_matches(sa("1.1.1.1:7864"), &t));
        assert!(!source_matches(sa("1.1.1.2:7863"), &t));
        assert!(!source_matches(sa("1.1.1.1:7863"), &a6("2001:db8::1")));
        assert!(from_server(sa("3.3.3.3:3544"), Ipv4Addr::new(3, 3, 3, 3)));
        assert!(!from_server(sa("3.3.3.3:3545"), Ipv4Addr::new(3, 3, 3, 3)));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse(&data);
            let _ = decap(&data);
            let mut out = Out::new();
            let _ = encap(&data, sa("1.2.3.4:1"), sa("5.6.7.8:2"), None, &mut out);
            let mut buf = [0u8; 400];
            let _ = encap_udp_payload(None, Some(sa("1.2.3.4:5")), &data, &mut buf);
        }

        #[test]
        fn indicator_prefixed_garbage_never_panics(
            kind in 0u8..2, a in any::<u8>(), b in any::<u8>(),
            data in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut pl = vec![0, kind, a, b];
            pl.extend_from_slice(&data);
            let _ = parse(&pl);
        }

        #[test]
        fn address_round_trip(server in any::<u32>(), flags in any::<u16>(), ip in any::<u32>(), port in any::<u16>()) {
            let t = TeredoAddr { server: Ipv4Addr::from(server), flags, mapped: SocketAddrV4::new(Ipv4Addr::from(ip), port) };
            prop_assert_eq!(TeredoAddr::from_ipv6(&t.to_ipv6()), Some(t));
        }

        #[test]
        fn payload_round_trip(
            ip in any::<u32>(), port in any::<u16>(), with_origin in any::<bool>(), with_auth in any::<bool>(),
            id in proptest::collection::vec(any::<u8>(), 0..20), body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let inner = v6(a6("2001:db8::1"), a6("2001:db8::2"), &body);
            let origin = with_origin.then(|| SocketAddrV4::new(Ipv4Addr::from(ip), port));
            let auth = Auth { client_id: &id, auth_value: &body, nonce: [7; 8], confirmation: 2 };
            let auth = with_auth.then_some(&auth);
            let mut buf = [0u8; 512];
            let n = encap_udp_payload(auth, origin, &inner, &mut buf).unwrap();
            let p = parse(&buf[..n]).unwrap();
            prop_assert_eq!(p.origin, origin);
            prop_assert_eq!(p.auth.as_ref(), auth);
            prop_assert_eq!(p.ipv6, &inner[..]);
        }
    }
}
