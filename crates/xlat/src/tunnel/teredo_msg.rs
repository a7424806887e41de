//! Teredo control messages — the IPv6 packets Teredo nodes exchange to
//! qualify, test connectivity and traverse NATs, and the RFC 6081 trailers.
//!
//! Implements:
//! - RFC 4380 §5.2.1 / §5.3.1: the Router Solicitation a client sends to its
//!   server (link-local source, `ff02::2`, Authentication indicator with a
//!   nonce) — [`router_solicitation`], [`is_router_solicitation`]; and the
//!   Router Advertisement the server answers with (Prefix Information
//!   `2001:0:SERVER::/64`, MTU option, the nonce echoed, the client's
//!   mapping in the Origin indication) — [`router_advertisement`],
//!   [`parse_router_advertisement`].
//! - RFC 4380 §5.2.9: the ICMPv6 Echo Request of the direct IPv6
//!   connectivity test and its reply — [`echo_request`], [`parse_echo`].
//! - RFC 6081 §4: trailers after the IPv6 packet in the UDP payload (type,
//!   length, value) — [`trailers`], [`Trailer`], [`write_trailer`]: the Nonce
//!   trailer (type 1), the Alternate Address trailer (type 3, hairpinning),
//!   the Neighbor Discovery Option trailer (type 4) and the Random Port
//!   trailer (type 5).
//!
//! Same conventions as [`super::teredo`]: writers take a `&mut [u8]` and
//! return the length written; readers are zero-copy and never panic.

use super::teredo::{Auth, TEREDO_PORT};
use super::TunnelError;
use crate::checksum;
use crate::wire::ipv6::{self, Ipv6Header, Ipv6Packet};
use crate::wire::{be16, proto, put16};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// ICMPv6 Router Solicitation (RFC 4861 §4.1).
pub const ND_ROUTER_SOLICIT: u8 = 133;
/// ICMPv6 Router Advertisement (RFC 4861 §4.2).
pub const ND_ROUTER_ADVERT: u8 = 134;
/// ICMPv6 Echo Request / Reply (RFC 4443 §4).
pub const ECHO_REQUEST: u8 = 128;
/// ICMPv6 Echo Reply.
pub const ECHO_REPLY: u8 = 129;
/// All-routers multicast, the destination of a Router Solicitation.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// The link-local source of a client's solicitation with the cone bit clear
/// (RFC 4380 §5.2.1, the value Windows clients use).
pub const RS_SRC_RESTRICTED: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0xffff, 0xfffe);
/// The same with the cone bit set: the server answers it from its other
/// address (the cone test, RFC 4380 §5.2.1 / §5.3.1).
pub const RS_SRC_CONE: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x8000, 0xffff, 0xffff, 0xfffe);
/// Length of the Authentication indicator with empty identifier and value.
pub const AUTH_SIMPLE_LEN: usize = 13;
/// Prefix Information option (RFC 4861 §4.6.2) type and length (32 bytes).
const OPT_PREFIX: u8 = 3;
/// MTU option (RFC 4861 §4.6.4) type.
const OPT_MTU: u8 = 5;
/// Router Solicitation ICMPv6 part: type, code, checksum, reserved.
const RS_LEN: usize = 8;
/// Router Advertisement fixed part (RFC 4861 §4.2).
const RA_LEN: usize = 16;
/// Prefix Information option length.
const PIO_LEN: usize = 32;
/// MTU option length.
const MTU_OPT_LEN: usize = 8;
/// Echo header: type, code, checksum, identifier, sequence.
const ECHO_LEN: usize = 8;

/// The cone bit of a link-local solicitation source (same place as in a
/// Teredo address: the first bit of the flags, bits 64..80).
#[inline]
pub fn ll_is_cone(a: &Ipv6Addr) -> bool {
    (u128::from(*a) >> 48) as u16 & super::teredo::FLAG_CONE != 0
}

/// The ICMPv6 checksum of `body` (type onward, checksum field zero) between `src` and `dst`.
pub fn icmp6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, body: &[u8]) -> u16 {
    checksum::finish(checksum::pseudo_v6(src, dst, proto::ICMPV6, body.len() as u32) + checksum::sum(body))
}

/// True when the ICMPv6 checksum of an IPv6 packet whose only header is
/// ICMPv6 verifies.
pub fn icmp6_verifies(p: &Ipv6Packet<'_>) -> bool {
    let body = &p.as_bytes()[ipv6::HEADER_LEN..];
    let acc = checksum::pseudo_v6(&p.src(), &p.dst(), proto::ICMPV6, body.len() as u32) + checksum::sum(body);
    checksum::verifies(acc)
}

fn write_v6(buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, body_len: usize) {
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        payload_len: body_len as u16,
        next_header: proto::ICMPV6,
        hop_limit,
        src,
        dst,
    }
    .emit(buf);
}

fn seal_icmp6(pkt: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
    let body = &mut pkt[ipv6::HEADER_LEN..];
    body[2] = 0;
    body[3] = 0;
    let c = icmp6_checksum(src, dst, body);
    put16(body, 2, c);
}

/// Write a client's qualification request into `buf` (RFC 4380 §5.2.1):
/// an Authentication indicator carrying `nonce` (no client identifier, no
/// authentication value, confirmation 0), then a Router Solicitation from
/// [`RS_SRC_CONE`] or [`RS_SRC_RESTRICTED`] to `ff02::2`, hop limit 255.
/// Returns the UDP payload length.
pub fn router_solicitation(cone: bool, nonce: [u8; 8], buf: &mut [u8]) -> Result<usize, TunnelError> {
    let total = AUTH_SIMPLE_LEN + ipv6::HEADER_LEN + RS_LEN;
    let b = buf.get_mut(..total).ok_or(TunnelError::NoSpace)?;
    b[..AUTH_SIMPLE_LEN].fill(0);
    b[1] = 1;
    b[4..12].copy_from_slice(&nonce);
    let src = if cone { RS_SRC_CONE } else { RS_SRC_RESTRICTED };
    let pkt = &mut b[AUTH_SIMPLE_LEN..];
    write_v6(pkt, src, ALL_ROUTERS, 255, RS_LEN);
    pkt[ipv6::HEADER_LEN..].fill(0);
    pkt[ipv6::HEADER_LEN] = ND_ROUTER_SOLICIT;
    seal_icmp6(pkt, &src, &ALL_ROUTERS);
    Ok(total)
}

/// True for a Router Solicitation as a Teredo server accepts it (RFC 4380
/// §5.3.1): ICMPv6 type 133 code 0 from a link-local source to
/// `ff02::2`, at least the 8-byte ICMPv6 part.
pub fn is_router_solicitation(p: &Ipv6Packet<'_>) -> bool {
    let b = p.as_bytes();
    p.next_header() == proto::ICMPV6
        && (u128::from(p.src()) >> 118) == 0x3fa // fe80::/10
        && p.dst() == ALL_ROUTERS
        && b.len() >= ipv6::HEADER_LEN + RS_LEN
        && b[ipv6::HEADER_LEN] == ND_ROUTER_SOLICIT
        && b[ipv6::HEADER_LEN + 1] == 0
}

/// What a server puts in its Router Advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaParams {
    /// The server's link-local source address.
    pub src: Ipv6Addr,
    /// The solicitation's source, to which the advertisement goes.
    pub dst: Ipv6Addr,
    /// The Teredo prefix's first 32 bits (`2001:0000`).
    pub prefix_hi32: u32,
    /// The server's primary IPv4 address (bits 32..64 of the prefix).
    pub server: Ipv4Addr,
    /// Link MTU to advertise (RFC 4380 §5.2: 1280 by default).
    pub mtu: u32,
}

/// Write a server's qualification answer into `buf` (RFC 4380 §5.3.1): the
/// Authentication indicator echoing the solicitation's `nonce` (when it
/// had one), the Origin indication with the client's mapped address and
/// port, and a Router Advertisement with one Prefix Information option
/// (`prefix_hi32:server::/64`, autonomous) and an MTU option. Returns the
/// UDP payload length.
pub fn router_advertisement(
    ra: &RaParams,
    nonce: Option<[u8; 8]>,
    origin: SocketAddrV4,
    buf: &mut [u8],
) -> Result<usize, TunnelError> {
    let auth = nonce.map(|n| Auth { client_id: &[], auth_value: &[], nonce: n, confirmation: 0 });
    let body_len = RA_LEN + PIO_LEN + MTU_OPT_LEN;
    let mut inner = [0u8; ipv6::HEADER_LEN + RA_LEN + PIO_LEN + MTU_OPT_LEN];
    write_v6(&mut inner, ra.src, ra.dst, 255, body_len);
    let b = &mut inner[ipv6::HEADER_LEN..];
    b[0] = ND_ROUTER_ADVERT;
    // cur hop limit 0, flags 0, router lifetime 0 (not a default router),
    // reachable time 0, retransmission timer 2000 ms (RFC 4380 §5.2.1).
    b[12..16].copy_from_slice(&2000u32.to_be_bytes());
    let pio = &mut b[RA_LEN..RA_LEN + PIO_LEN];
    pio[0] = OPT_PREFIX;
    pio[1] = (PIO_LEN / 8) as u8;
    pio[2] = 64;
    pio[3] = 0x40; // autonomous address configuration
    pio[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    pio[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    pio[16..20].copy_from_slice(&ra.prefix_hi32.to_be_bytes());
    pio[20..24].copy_from_slice(&ra.server.octets());
    let mo = &mut b[RA_LEN + PIO_LEN..];
    mo[0] = OPT_MTU;
    mo[1] = 1;
    mo[4..8].copy_from_slice(&ra.mtu.to_be_bytes());
    seal_icmp6(&mut inner, &ra.src, &ra.dst);
    super::teredo::encap_udp_payload(auth.as_ref(), Some(origin), &inner, buf)
}

/// A Router Advertisement as a client reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedRa {
    /// The advertised /64 (its first 64 bits; the rest zero).
    pub prefix: Ipv6Addr,
    /// The MTU option's value, if present (1280..=65535).
    pub mtu: Option<u16>,
}

/// Read a Router Advertisement (RFC 4380 §5.2.1): ICMPv6 type 134 code 0
/// with exactly one Prefix Information option of length 64 and at most
/// one valid MTU option. `None` for anything else.
pub fn parse_router_advertisement(p: &Ipv6Packet<'_>) -> Option<ParsedRa> {
    let b = p.as_bytes();
    if p.next_header() != proto::ICMPV6 || b.len() < ipv6::HEADER_LEN + RA_LEN {
        return None;
    }
    let body = &b[ipv6::HEADER_LEN..];
    if body[0] != ND_ROUTER_ADVERT || body[1] != 0 {
        return None;
    }
    let mut opts = &body[RA_LEN..];
    let (mut prefix, mut mtu) = (None, None);
    while !opts.is_empty() {
        let len = usize::from(*opts.get(1)?) * 8;
        if len == 0 || len > opts.len() {
            return None;
        }
        let o = &opts[..len];
        match o[0] {
            OPT_PREFIX if len >= PIO_LEN => {
                if o[2] != 64 || prefix.is_some() {
                    return None;
                }
                let mut a = [0u8; 16];
                a[..8].copy_from_slice(&o[16..24]);
                prefix = Some(Ipv6Addr::from(a));
            }
            OPT_PREFIX => return None,
            OPT_MTU => {
                let m = u32::from_be_bytes([o[4], o[5], o[6], o[7]]);
                if !(1280..=65535).contains(&m) {
                    return None;
                }
                mtu = Some(m as u16);
            }
            _ => {}
        }
        opts = &opts[len..];
    }
    Some(ParsedRa { prefix: prefix?, mtu })
}

/// Write an ICMPv6 Echo Request from `src` to `dst` (RFC 4443 §4.1) into
/// `buf`: identifier, sequence, then `payload`; hop limit `hop_limit`.
/// Returns the IPv6 packet length.
pub fn echo_request(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    id: u16,
    seq: u16,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<usize, TunnelError> {
    let body_len = ECHO_LEN + payload.len();
    let total = ipv6::HEADER_LEN + body_len;
    if total > usize::from(u16::MAX) {
        return Err(TunnelError::TooBig { mtu: usize::from(u16::MAX) });
    }
    let b = buf.get_mut(..total).ok_or(TunnelError::NoSpace)?;
    write_v6(b, src, dst, hop_limit, body_len);
    let body = &mut b[ipv6::HEADER_LEN..];
    body[..4].copy_from_slice(&[ECHO_REQUEST, 0, 0, 0]);
    put16(body, 4, id);
    put16(body, 6, seq);
    body[ECHO_LEN..].copy_from_slice(payload);
    seal_icmp6(b, &src, &dst);
    Ok(total)
}

/// An Echo Request or Reply, borrowed from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo<'a> {
    /// True for a reply (type 129), false for a request (type 128).
    pub reply: bool,
    /// Identifier.
    pub id: u16,
    /// Sequence number.
    pub seq: u16,
    /// Data.
    pub payload: &'a [u8],
}

/// Read an ICMPv6 Echo Request or Reply whose checksum verifies; `None`
/// for anything else (including an IPv6 packet with extension headers).
pub fn parse_echo<'a>(p: &Ipv6Packet<'a>) -> Option<Echo<'a>> {
    let b = p.as_bytes();
    if p.next_header() != proto::ICMPV6 || b.len() < ipv6::HEADER_LEN + ECHO_LEN {
        return None;
    }
    let body = &b[ipv6::HEADER_LEN..];
    let reply = match (body[0], body[1]) {
        (ECHO_REQUEST, 0) => false,
        (ECHO_REPLY, 0) => true,
        _ => return None,
    };
    if !icmp6_verifies(p) {
        return None;
    }
    Some(Echo { reply, id: be16(body, 4), seq: be16(body, 6), payload: &body[ECHO_LEN..] })
}

/// The server's link-local address as Miredo and Windows build it: `fe80::`,
/// the cone flag, the Teredo port and the obfuscated server address.
pub fn server_link_local(server: Ipv4Addr) -> Ipv6Addr {
    let v = (0xfe80u128 << 112)
        | (u128::from(super::teredo::FLAG_CONE) << 48)
        | (u128::from(TEREDO_PORT) << 32)
        | u128::from(!u32::from(server));
    Ipv6Addr::from(v)
}

// ---- RFC 6081 trailers --------------------------------------------------

/// Nonce trailer type (RFC 6081 §4).
pub const TRAILER_NONCE: u8 = 0x01;
/// Alternate Address trailer type (RFC 6081 §4, hairpinning).
pub const TRAILER_ALT_ADDR: u8 = 0x03;
/// Neighbor Discovery Option trailer type (RFC 6081 §4, server load reduction).
pub const TRAILER_ND_OPTION: u8 = 0x04;
/// Random Port trailer type (RFC 6081 §4, port-preserving symmetric NATs).
pub const TRAILER_RANDOM_PORT: u8 = 0x05;
/// At most this many alternate addresses are read from or written to one trailer.
pub const MAX_ALT_ADDRS: usize = 8;

/// One RFC 6081 trailer, borrowed from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trailer<'a> {
    /// Nonce trailer: 4 bytes a peer echoes.
    Nonce([u8; 4]),
    /// Alternate Address trailer: the sender's other (local) addresses.
    AltAddrs(AltAddrs<'a>),
    /// Neighbor Discovery Option trailer: 0 = solicitation, 1 = advertisement.
    NdOption(u8),
    /// Random Port trailer: the port the sender will use next.
    RandomPort(u16),
    /// A trailer of a type this implementation does not know (ignored).
    Unknown(u8),
}

/// The address list of an Alternate Address trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AltAddrs<'a>(&'a [u8]);

impl AltAddrs<'_> {
    /// The addresses, at most [`MAX_ALT_ADDRS`].
    pub fn iter(&self) -> impl Iterator<Item = SocketAddrV4> + '_ {
        self.0
            .chunks_exact(6)
            .take(MAX_ALT_ADDRS)
            .map(|c| SocketAddrV4::new(Ipv4Addr::new(c[0], c[1], c[2], c[3]), u16::from_be_bytes([c[4], c[5]])))
    }
}

/// Parse one trailer at the start of `b`: `(trailer, bytes used)`.
fn one_trailer(b: &[u8]) -> Result<(Trailer<'_>, usize), TunnelError> {
    let (&ty, &len) = (b.first().ok_or(TunnelError::Truncated)?, b.get(1).ok_or(TunnelError::Truncated)?);
    let v = b.get(2..2 + usize::from(len)).ok_or(TunnelError::Truncated)?;
    let t = match ty {
        TRAILER_NONCE if v.len() == 4 => Trailer::Nonce([v[0], v[1], v[2], v[3]]),
        TRAILER_ALT_ADDR if v.len() >= 8 && (v.len() - 2) % 6 == 0 => Trailer::AltAddrs(AltAddrs(&v[2..])),
        TRAILER_ND_OPTION if v.len() == 4 => Trailer::NdOption(v[0]),
        TRAILER_RANDOM_PORT if v.len() == 2 => Trailer::RandomPort(u16::from_be_bytes([v[0], v[1]])),
        TRAILER_NONCE | TRAILER_ALT_ADDR | TRAILER_ND_OPTION | TRAILER_RANDOM_PORT => {
            return Err(TunnelError::Malformed)
        }
        other => Trailer::Unknown(other),
    };
    Ok((t, 2 + v.len()))
}

/// Check that `b` is a well-formed sequence of trailers (RFC 6081 §4): each
/// a type, a length and that many bytes, known types with their lengths.
pub fn check_trailers(mut b: &[u8]) -> Result<(), TunnelError> {
    while !b.is_empty() {
        let (_, n) = one_trailer(b)?;
        b = &b[n..];
    }
    Ok(())
}

/// The trailers of a packet already checked by [`check_trailers`] (as
/// [`super::teredo::parse`] does); stops at the first malformed one.
pub fn trailers(b: &[u8]) -> impl Iterator<Item = Trailer<'_>> + '_ {
    let mut rest = b;
    core::iter::from_fn(move || {
        let (t, n) = one_trailer(rest).ok()?;
        rest = &rest[n..];
        Some(t)
    })
}

/// Append one trailer to `buf` at `at`; returns the new end. Alternate
/// address lists are cut to [`MAX_ALT_ADDRS`].
pub fn write_trailer(t: &Trailer<'_>, buf: &mut [u8], at: usize) -> Result<usize, TunnelError> {
    let mut v = [0u8; 2 + 6 * MAX_ALT_ADDRS];
    let (ty, len) = match t {
        Trailer::Nonce(n) => {
            v[..4].copy_from_slice(n);
            (TRAILER_NONCE, 4)
        }
        Trailer::AltAddrs(a) => {
            let n = a.0.len().min(6 * MAX_ALT_ADDRS) / 6 * 6;
            v[2..2 + n].copy_from_slice(&a.0[..n]);
            (TRAILER_ALT_ADDR, 2 + n)
        }
        Trailer::NdOption(k) => {
            v[0] = *k;
            (TRAILER_ND_OPTION, 4)
        }
        Trailer::RandomPort(p) => {
            v[..2].copy_from_slice(&p.to_be_bytes());
            (TRAILER_RANDOM_PORT, 2)
        }
        Trailer::Unknown(_) => return Err(TunnelError::Malformed),
    };
    let out = buf.get_mut(at..at + 2 + len).ok_or(TunnelError::NoSpace)?;
    out[0] = ty;
    out[1] = len as u8;
    out[2..].copy_from_slice(&v[..len]);
    Ok(at + 2 + len)
}

/// The wire form of an address list for [`Trailer::AltAddrs`]: 6 bytes an
/// address (IPv4, port), at most [`MAX_ALT_ADDRS`]; returns the bytes used.
pub fn alt_addrs_bytes(addrs: &[SocketAddrV4], buf: &mut [u8; 6 * MAX_ALT_ADDRS]) -> usize {
    let mut n = 0;
    for a in addrs.iter().take(MAX_ALT_ADDRS) {
        buf[n..n + 4].copy_from_slice(&a.ip().octets());
        buf[n + 4..n + 6].copy_from_slice(&a.port().to_be_bytes());
        n += 6;
    }
    n
}

/// Borrow `bytes` (from [`alt_addrs_bytes`]) as an Alternate Address trailer.
pub fn alt_addrs(bytes: &[u8]) -> Trailer<'_> {
    Trailer::AltAddrs(AltAddrs(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::teredo::{self, TeredoAddr, FLAG_CONE};
    use proptest::prelude::*;

    fn sa(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn rfc4380_5_2_1_router_solicitation_bytes() {
        let mut buf = [0u8; 128];
        let n = router_solicitation(false, [1, 2, 3, 4, 5, 6, 7, 8], &mut buf).unwrap();
        assert_eq!(n, 13 + 48);
        // Authentication indicator: type 1, no id, no value, nonce, confirmation 0.
        assert_eq!(&buf[..13], &[0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
        let p = teredo::parse(&buf[..n]).unwrap();
        assert_eq!(p.auth.unwrap().nonce, [1, 2, 3, 4, 5, 6, 7, 8]);
        let v = p.ipv6_packet();
        assert!(is_router_solicitation(&v));
        assert_eq!((v.src(), v.dst(), v.hop_limit()), (RS_SRC_RESTRICTED, ALL_ROUTERS, 255));
        assert!(icmp6_verifies(&v));
        assert!(!ll_is_cone(&v.src()));
        // Checked against etherparse's ICMPv6 checksum.
        let e = etherparse::SlicedPacket::from_ip(p.ipv6).unwrap();
        let Some(etherparse::TransportSlice::Icmpv6(icmp)) = e.transport else { panic!("not ICMPv6") };
        let ip = etherparse::Ipv6HeaderSlice::from_slice(p.ipv6).unwrap();
        assert_eq!(
            icmp.icmp_type().calc_checksum(ip.source(), ip.destination(), icmp.payload()).unwrap(),
            icmp.checksum()
        );
        let n = router_solicitation(true, [0; 8], &mut buf).unwrap();
        assert!(ll_is_cone(&teredo::parse(&buf[..n]).unwrap().ipv6_packet().src()));
        assert_eq!(router_solicitation(true, [0; 8], &mut [0u8; 20]), Err(TunnelError::NoSpace));
    }

    #[test]
    fn rfc4380_5_3_1_router_advertisement_round_trip() {
        let server = Ipv4Addr::new(192, 0, 2, 1);
        let params = RaParams {
            src: server_link_local(server),
            dst: RS_SRC_RESTRICTED,
            prefix_hi32: teredo::PREFIX_HI32,
            server,
            mtu: 1280,
        };
        let mut buf = [0u8; 256];
        let n = router_advertisement(&params, Some([9; 8]), sa("198.51.100.7:40000"), &mut buf).unwrap();
        // auth 13 + origin 8 + 40 + 16 + 32 + 8
        assert_eq!(n, 117);
        let p = teredo::parse(&buf[..n]).unwrap();
        assert_eq!(p.auth.unwrap().nonce, [9; 8]);
        assert_eq!(p.origin, Some(sa("198.51.100.7:40000")));
        let v = p.ipv6_packet();
        assert!(icmp6_verifies(&v));
        let ra = parse_router_advertisement(&v).unwrap();
        assert_eq!(ra.prefix, "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ra.mtu, Some(1280));
        // The client's address from the RA and the origin indication.
        let t = TeredoAddr { server, flags: 0, mapped: p.origin.unwrap() };
        assert_eq!(u128::from(t.to_ipv6()) >> 64, u128::from(ra.prefix) >> 64);
        // Without a nonce there is no authentication indicator.
        let n = router_advertisement(&params, None, sa("198.51.100.7:40000"), &mut buf).unwrap();
        assert_eq!(n, 104);
        assert!(teredo::parse(&buf[..n]).unwrap().auth.is_none());
        assert_eq!(server_link_local(server).segments()[4], FLAG_CONE);
    }

    #[test]
    fn router_advertisement_rejections() {
        let server = Ipv4Addr::new(192, 0, 2, 1);
        let params =
            RaParams { src: server_link_local(server), dst: RS_SRC_CONE, prefix_hi32: 0x2001_0000, server, mtu: 1280 };
        let mut buf = [0u8; 256];
        let n = router_advertisement(&params, None, sa("198.51.100.7:1"), &mut buf).unwrap();
        let ipv6 = teredo::parse(&buf[..n]).unwrap().ipv6.to_vec();
        let body = 40;
        // Prefix length other than 64.
        let mut bad = ipv6.clone();
        bad[body + 16 + 2] = 48;
        assert!(parse_router_advertisement(&Ipv6Packet::new(&bad).unwrap()).is_none());
        // Option length 0 (would loop forever if not refused).
        let mut bad = ipv6.clone();
        bad[body + 16 + 1] = 0;
        assert!(parse_router_advertisement(&Ipv6Packet::new(&bad).unwrap()).is_none());
        // MTU below 1280.
        let mut bad = ipv6.clone();
        bad[body + 16 + 32 + 4..body + 16 + 32 + 8].copy_from_slice(&1000u32.to_be_bytes());
        assert!(parse_router_advertisement(&Ipv6Packet::new(&bad).unwrap()).is_none());
        // Not an RA.
        let mut bad = ipv6.clone();
        bad[body] = ND_ROUTER_SOLICIT;
        assert!(parse_router_advertisement(&Ipv6Packet::new(&bad).unwrap()).is_none());
    }

    #[test]
    fn rfc4380_5_2_9_echo_round_trip() {
        let src: Ipv6Addr = "2001:0:c000:201:0:63bf:3fff:fdd2".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let mut buf = [0u8; 128];
        let n = echo_request(src, dst, 21, 0x1234, 7, &[0xaa; 8], &mut buf).unwrap();
        let v = Ipv6Packet::new(&buf[..n]).unwrap();
        let e = parse_echo(&v).unwrap();
        assert_eq!((e.reply, e.id, e.seq, e.payload), (false, 0x1234, 7, &[0xaa; 8][..]));
        // A reply: swap addresses, type 129, fix checksum.
        let mut r = buf[..n].to_vec();
        r[8..24].copy_from_slice(&dst.octets());
        r[24..40].copy_from_slice(&src.octets());
        r[40] = ECHO_REPLY;
        seal_icmp6(&mut r, &dst, &src);
        let e = parse_echo(&Ipv6Packet::new(&r).unwrap()).unwrap();
        assert!(e.reply);
        r[50] ^= 1;
        assert!(parse_echo(&Ipv6Packet::new(&r).unwrap()).is_none(), "bad checksum");
    }

    #[test]
    fn rfc6081_trailers() {
        let mut buf = [0u8; 64];
        let mut at = write_trailer(&Trailer::Nonce([1, 2, 3, 4]), &mut buf, 0).unwrap();
        let mut list = [0u8; 6 * MAX_ALT_ADDRS];
        let n = alt_addrs_bytes(&[sa("192.168.1.2:4000"), sa("10.0.0.1:5")], &mut list);
        at = write_trailer(&alt_addrs(&list[..n]), &mut buf, at).unwrap();
        at = write_trailer(&Trailer::RandomPort(5555), &mut buf, at).unwrap();
        at = write_trailer(&Trailer::NdOption(1), &mut buf, at).unwrap();
        assert_eq!(&buf[..6], &[1, 4, 1, 2, 3, 4]);
        assert_eq!(&buf[6..10], &[3, 14, 0, 0]);
        check_trailers(&buf[..at]).unwrap();
        let got: Vec<_> = trailers(&buf[..at]).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Trailer::Nonce([1, 2, 3, 4]));
        let Trailer::AltAddrs(a) = got[1] else { panic!() };
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![sa("192.168.1.2:4000"), sa("10.0.0.1:5")]);
        assert_eq!(got[2], Trailer::RandomPort(5555));
        assert_eq!(got[3], Trailer::NdOption(1));
        // Wrong lengths for known types, truncation; unknown types pass.
        assert_eq!(check_trailers(&[1, 3, 0, 0, 0]), Err(TunnelError::Malformed));
        assert_eq!(check_trailers(&[3, 7, 0, 0, 1, 2, 3, 4, 5]), Err(TunnelError::Malformed));
        assert_eq!(check_trailers(&[5, 2, 0]), Err(TunnelError::Truncated));
        assert_eq!(check_trailers(&[9]), Err(TunnelError::Truncated));
        assert_eq!(check_trailers(&[0x77, 1, 0]), Ok(()));
        assert_eq!(trailers(&[0x77, 1, 0]).next(), Some(Trailer::Unknown(0x77)));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = check_trailers(&data);
            let _ = trailers(&data).count();
            if let Ok(v) = Ipv6Packet::new(&data) {
                let _ = parse_router_advertisement(&v);
                let _ = parse_echo(&v);
                let _ = is_router_solicitation(&v);
            }
        }
    }
}
