//! The frame tester's test frames: Ethernet + IPv4/IPv6 + UDP + a
//! timestamped payload, built once per flow as a template and stamped per
//! packet (checksums by `xlat::checksum`). A frame may also carry its IPv4
//! packet in an outer IPv6 header (RFC 2473 4in6, next header 4: the
//! softwires' frames, [`Template::new_4in6`]), 40 bytes longer than the
//! plain IPv4 frame of the same payload.
//!
//! Frame sizes follow RFC 2544 / RFC 8219: the size of the Ethernet frame
//! including its 4-byte FCS. Veth carries no FCS, so a frame of size `S`
//! is `S - 4` bytes on the wire here. An 84-byte IPv6 frame (the smallest
//! RFC 8219 size) leaves 18 bytes of UDP payload, exactly [`PAYLOAD_LEN`]:
//!
//! ```text
//! 0        8        12     14       18
//! | ts_ns  |  seq   | flow | magic  | zero padding ...
//! ```
//!
//! `ts_ns` is CLOCK_MONOTONIC at send time (shared by every namespace of one
//! machine), `seq` counts packets of one trial, `flow` indexes the trial's
//! flow table and `magic` carries the trial id, so a late packet of an
//! earlier trial is never counted in the next one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use xlat::checksum::{finish, sum};

/// Ethernet header length.
pub const ETH_LEN: usize = 14;
/// FCS length counted in RFC 2544 frame sizes but absent on veth.
pub const FCS_LEN: usize = 4;
/// UDP header length.
pub const UDP_LEN: usize = 8;
/// The tester's payload: timestamp, sequence number, flow, magic.
pub const PAYLOAD_LEN: usize = 18;
/// Upper 16 bits of the magic word; the lower 16 are the trial id (the
/// XDP tester's programs use the same value).
pub const MAGIC_HI: u32 = xdp::types::TESTER_MAGIC_HI;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const PROTO_UDP: u8 = 17;
/// IPv4 in IPv6 (RFC 2473): the outer header's next header.
const PROTO_IPIP: u8 = 4;
/// The outer IPv6 header of a 4in6 frame.
pub const OUTER6_LEN: usize = 40;

/// The smallest frame (with FCS) that carries the payload for this IP version.
pub fn min_frame(v6: bool) -> usize {
    ETH_LEN + if v6 { 40 } else { 20 } + UDP_LEN + PAYLOAD_LEN + FCS_LEN
}

/// The smallest 4in6 frame (with FCS): the smallest IPv4 frame plus the
/// outer IPv6 header, 20 bytes longer than the smallest IPv6 frame.
pub fn min_frame_4in6() -> usize {
    min_frame(false) + OUTER6_LEN
}

/// The outer IPv6 header of a 4in6 frame (RFC 2473): the softwire's two
/// end-points (a B4 and its AFTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunnel6 {
    /// Outer source (the sending end-point).
    pub src: Ipv6Addr,
    /// Outer destination (the receiving end-point).
    pub dst: Ipv6Addr,
}

/// One packet's addressing: MACs, IP addresses and UDP ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Destination MAC (the next hop: the DUT's interface).
    pub dst_mac: [u8; 6],
    /// Source MAC (the tester's interface).
    pub src_mac: [u8; 6],
    /// Source IP address; its version picks IPv4 or IPv6 (must match `dst`).
    pub src: IpAddr,
    /// Destination IP address.
    pub dst: IpAddr,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
}

/// A frame for one flow, built once; [`Template::stamp`] writes the
/// per-packet fields and fixes the UDP checksum.
#[derive(Debug, Clone)]
pub struct Template {
    frame: Vec<u8>,
    /// Offset of the UDP header.
    udp: usize,
    /// One's-complement sum of the pseudo header and the UDP header and
    /// payload with the per-packet fields zero (not folded).
    base_sum: u64,
}

/// Why a frame could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// Source and destination differ in IP version.
    MixedVersions,
    /// Frame size below [`min_frame`] ([`min_frame_4in6`]) or above 9018.
    BadSize(usize),
    /// A 4in6 frame whose inner addresses are not IPv4.
    InnerNotIpv4,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::MixedVersions => write!(f, "source and destination address differ in IP version"),
            BuildError::BadSize(s) => write!(f, "frame size {s} is outside the range this IP version allows"),
            BuildError::InnerNotIpv4 => write!(f, "a 4in6 frame carries IPv4: the inner addresses must be IPv4"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Writes an IPv6 header (hop limit 64) into `ip` (40 bytes).
fn put_ipv6(ip: &mut [u8], payload_len: usize, next: u8, s: Ipv6Addr, d: Ipv6Addr) {
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    ip[6] = next;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&s.octets());
    ip[24..40].copy_from_slice(&d.octets());
}

/// Writes a UDP-carrying IPv4 header (DF, TTL 64, valid checksum) into `ip`
/// (20 bytes).
fn put_ipv4(ip: &mut [u8], total_len: usize, s: Ipv4Addr, d: Ipv4Addr) {
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total_len as u16).to_be_bytes());
    ip[6] = 0x40; // DF: the translator maps it to IPv6 without a Fragment header
    ip[8] = 64;
    ip[9] = PROTO_UDP;
    ip[12..16].copy_from_slice(&s.octets());
    ip[16..20].copy_from_slice(&d.octets());
    let c = finish(sum(ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

impl Template {
    /// Builds the frame of `frame_size` bytes (RFC 2544 size, FCS included).
    pub fn new(h: &Header, frame_size: usize) -> Result<Self, BuildError> {
        Template::build(h, None, frame_size)
    }

    /// Builds a 4in6 frame of `frame_size` bytes (FCS included): `h`'s
    /// IPv4 UDP packet inside an IPv6 header from `outer.src` to
    /// `outer.dst` (next header 4, RFC 2473); `h`'s MACs are the frame's.
    pub fn new_4in6(h: &Header, outer: Tunnel6, frame_size: usize) -> Result<Self, BuildError> {
        Template::build(h, Some(outer), frame_size)
    }

    fn build(h: &Header, outer: Option<Tunnel6>, frame_size: usize) -> Result<Self, BuildError> {
        let v6 = match (h.src, h.dst) {
            (IpAddr::V6(_), IpAddr::V6(_)) => true,
            (IpAddr::V4(_), IpAddr::V4(_)) => false,
            _ => return Err(BuildError::MixedVersions),
        };
        if v6 && outer.is_some() {
            return Err(BuildError::InnerNotIpv4);
        }
        let outer_len = if outer.is_some() { OUTER6_LEN } else { 0 };
        if frame_size < min_frame(v6) + outer_len || frame_size > 9018 {
            return Err(BuildError::BadSize(frame_size));
        }
        let len = frame_size - FCS_LEN;
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&h.dst_mac);
        f[6..12].copy_from_slice(&h.src_mac);
        let ethertype = if v6 || outer.is_some() { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 };
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        let mut l3 = ETH_LEN;
        if let Some(t) = outer {
            put_ipv6(&mut f[l3..l3 + OUTER6_LEN], len - l3 - OUTER6_LEN, PROTO_IPIP, t.src, t.dst);
            l3 += OUTER6_LEN;
        }
        let ip_len = len - l3;
        let (udp_len, mut pseudo) = match (h.src, h.dst) {
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                put_ipv6(&mut f[l3..l3 + 40], ip_len - 40, PROTO_UDP, s, d);
                (ip_len - 40, sum(&f[l3 + 8..l3 + 40]))
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                put_ipv4(&mut f[l3..l3 + 20], ip_len, s, d);
                (ip_len - 20, sum(&f[l3 + 12..l3 + 20]))
            }
            _ => return Err(BuildError::MixedVersions),
        };
        let udp = len - udp_len;
        f[udp..udp + 2].copy_from_slice(&h.sport.to_be_bytes());
        f[udp + 2..udp + 4].copy_from_slice(&h.dport.to_be_bytes());
        f[udp + 4..udp + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        pseudo += u64::from(PROTO_UDP) + udp_len as u64;
        let base_sum = pseudo + sum(&f[udp..]);
        Ok(Template { frame: f, udp, base_sum })
    }

    /// The frame as built (per-packet fields zero).
    pub fn bytes(&self) -> &[u8] {
        &self.frame
    }

    /// Frame length on the wire (without FCS).
    pub fn len(&self) -> usize {
        self.frame.len()
    }

    /// Never true: a template holds at least one minimal frame.
    pub fn is_empty(&self) -> bool {
        self.frame.is_empty()
    }

    /// Copies the frame into `out` (which must be [`Template::len`] long)
    /// with the payload fields set and the UDP checksum fixed.
    pub fn stamp(&self, out: &mut [u8], ts_ns: u64, seq: u32, flow: u16, magic: u32) {
        out.copy_from_slice(&self.frame);
        let p = self.udp + UDP_LEN;
        out[p..p + 8].copy_from_slice(&ts_ns.to_be_bytes());
        out[p + 8..p + 12].copy_from_slice(&seq.to_be_bytes());
        out[p + 12..p + 14].copy_from_slice(&flow.to_be_bytes());
        out[p + 14..p + 18].copy_from_slice(&magic.to_be_bytes());
        let c = finish(self.base_sum + sum(&out[p..p + PAYLOAD_LEN]));
        // RFC 768: a computed zero is sent as all ones.
        let c = if c == 0 { 0xffff } else { c };
        out[self.udp + 6..self.udp + 8].copy_from_slice(&c.to_be_bytes());
    }
}

/// What the receiver needs from a test frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rx {
    /// Source IP address as received (after translation).
    pub src: IpAddr,
    /// Destination IP address as received.
    pub dst: IpAddr,
    /// UDP source port as received (a NAT64 maps it).
    pub sport: u16,
    /// UDP destination port as received.
    pub dport: u16,
    /// Send timestamp, CLOCK_MONOTONIC ns.
    pub ts_ns: u64,
    /// Sequence number within the trial.
    pub seq: u32,
    /// Flow index.
    pub flow: u16,
    /// Magic word (`MAGIC_HI | trial id`).
    pub magic: u32,
    /// The outer IPv6 header of a 4in6 frame (`src` and `dst` are then
    /// the inner IPv4 packet's).
    pub tunnel: Option<Tunnel6>,
}

impl Rx {
    /// Whether the frame arrived as IPv6: plain IPv6 or 4in6.
    pub fn outer_v6(&self) -> bool {
        self.tunnel.is_some() || self.src.is_ipv6()
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// An IPv6 header's source, destination, next header and payload (as
/// long as the payload length says).
fn ipv6(ip: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr, u8, &[u8])> {
    if ip.first()? >> 4 != 6 {
        return None;
    }
    let s: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
    let d: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
    let plen = usize::from(be16(ip, 4)?);
    Some((s.into(), d.into(), *ip.get(6)?, ip.get(40..40 + plen)?))
}

/// An unfragmented IPv4 UDP packet's source, destination and UDP segment.
fn ipv4_udp(ip: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, &[u8])> {
    let b0 = *ip.first()?;
    let ihl = usize::from(b0 & 0x0f) * 4;
    // Fragments (MF or a non-zero offset) are not test frames.
    if b0 >> 4 != 4 || ihl < 20 || *ip.get(9)? != PROTO_UDP || be16(ip, 6)? & 0x3fff != 0 {
        return None;
    }
    let total = usize::from(be16(ip, 2)?);
    let s: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
    let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
    Some((s.into(), d.into(), ip.get(ihl..total)?))
}

/// Decodes a received Ethernet frame. `None` for anything that is not an
/// unfragmented IPv4/IPv6 UDP packet, bare or IPv4 in IPv6 (4in6),
/// carrying a tester payload with the `MAGIC_HI` marker. Never panics,
/// whatever the bytes.
pub fn decode(frame: &[u8]) -> Option<Rx> {
    let ethertype = be16(frame, 12)?;
    let ip = frame.get(ETH_LEN..)?;
    let (src, dst, l4, tunnel) = match ethertype {
        ETHERTYPE_IPV6 => match ipv6(ip)? {
            (s, d, PROTO_UDP, l4) => (IpAddr::V6(s), IpAddr::V6(d), l4, None),
            (s, d, PROTO_IPIP, inner) => {
                let (is, id, l4) = ipv4_udp(inner)?;
                (IpAddr::V4(is), IpAddr::V4(id), l4, Some(Tunnel6 { src: s, dst: d }))
            }
            _ => return None,
        },
        ETHERTYPE_IPV4 => {
            let (s, d, l4) = ipv4_udp(ip)?;
            (IpAddr::V4(s), IpAddr::V4(d), l4, None)
        }
        _ => return None,
    };
    let p = l4.get(UDP_LEN..UDP_LEN + PAYLOAD_LEN)?;
    let magic = u32::from_be_bytes(p[14..18].try_into().ok()?);
    if magic & 0xffff_0000 != MAGIC_HI {
        return None;
    }
    Some(Rx {
        src,
        dst,
        sport: be16(l4, 0)?,
        dport: be16(l4, 2)?,
        ts_ns: u64::from_be_bytes(p[0..8].try_into().ok()?),
        seq: u32::from_be_bytes(p[8..12].try_into().ok()?),
        flow: u16::from_be_bytes(p[12..14].try_into().ok()?),
        magic,
        tunnel,
    })
}

/// RFC 4814 §4.5 pseudorandom UDP ports for `n` flows: source ports in
/// 1024..=65535 and destination ports in 1..=49151, from a fixed-seed
/// generator so every DUT sees the same flows. Source ports are distinct
/// (a flow is a source port), up to 64,512 flows.
pub fn rfc4814_ports(n: usize, seed: u64) -> Vec<(u16, u16)> {
    let mut rng = SplitMix(seed);
    let mut used = vec![false; 65536];
    let n = n.min(65535 - 1024 + 1);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = rng.next_u64();
        let sport = 1024 + (r % (65536 - 1024)) as u16;
        if used[usize::from(sport)] {
            continue;
        }
        used[usize::from(sport)] = true;
        let dport = 1 + ((r >> 32) % 49151) as u16;
        out.push((sport, dport));
    }
    out
}

/// SplitMix64: a small, fast, fixed-seed generator (no crypto needed).
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 pseudorandom bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use xlat::checksum;

    fn h6() -> Header {
        Header {
            dst_mac: [2, 0, 0, 0, 6, 1],
            src_mac: [2, 0, 0, 0, 6, 2],
            src: IpAddr::V6("2001:db8:46::10".parse().unwrap()),
            dst: IpAddr::V6("2001:db8:64::cb00:710a".parse().unwrap()),
            sport: 40000,
            dport: 53,
        }
    }

    fn h4() -> Header {
        Header {
            src: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 130)),
            ..h6()
        }
    }

    /// Verifies a checksum over the pseudo header and the UDP segment.
    fn udp_ok(frame: &[u8]) -> bool {
        let ip = &frame[ETH_LEN..];
        let (pseudo, l4) = if ip[0] >> 4 == 6 { (sum(&ip[8..40]), &ip[40..]) } else { (sum(&ip[12..20]), &ip[20..]) };
        checksum::verifies(pseudo + 17 + l4.len() as u64 + sum(l4))
    }

    #[test]
    fn sizes_follow_rfc8219() {
        // 84-byte IPv6 frame: 80 bytes on veth, 18 bytes of payload.
        let t = Template::new(&h6(), 84).unwrap();
        assert_eq!(t.len(), 80);
        assert_eq!(min_frame(true), 84);
        assert_eq!(min_frame(false), 64);
        assert_eq!(Template::new(&h4(), 64).unwrap().len(), 60);
        assert_eq!(Template::new(&h6(), 83).unwrap_err(), BuildError::BadSize(83));
        assert_eq!(Template::new(&h6(), 1518).unwrap().len(), 1514);
        let mixed = Header { dst: IpAddr::V4(Ipv4Addr::LOCALHOST), ..h6() };
        assert_eq!(Template::new(&mixed, 100).unwrap_err(), BuildError::MixedVersions);
    }

    #[test]
    fn stamp_then_decode_round_trips_both_versions() {
        for (h, size) in [(h6(), 84), (h6(), 1518), (h4(), 64), (h4(), 512)] {
            let t = Template::new(&h, size).unwrap();
            let mut buf = vec![0u8; t.len()];
            t.stamp(&mut buf, 123_456_789_012, 77, 5, MAGIC_HI | 9);
            assert!(udp_ok(&buf), "UDP checksum of a {size}-byte frame");
            let rx = decode(&buf).unwrap();
            assert_eq!(
                rx,
                Rx {
                    src: h.src,
                    dst: h.dst,
                    sport: 40000,
                    dport: 53,
                    ts_ns: 123_456_789_012,
                    seq: 77,
                    flow: 5,
                    magic: MAGIC_HI | 9,
                    tunnel: None,
                }
            );
        }
    }

    #[test]
    fn ipv4_header_checksum_is_valid() {
        let t = Template::new(&h4(), 100).unwrap();
        assert!(checksum::verifies(sum(&t.bytes()[ETH_LEN..ETH_LEN + 20])));
    }

    #[test]
    fn decode_rejects_foreign_and_truncated_frames() {
        let t = Template::new(&h6(), 84).unwrap();
        let mut buf = vec![0u8; t.len()];
        t.stamp(&mut buf, 1, 2, 3, 0x1234_0001);
        assert_eq!(decode(&buf), None, "wrong magic");
        t.stamp(&mut buf, 1, 2, 3, MAGIC_HI);
        for cut in 0..buf.len() {
            assert_eq!(decode(&buf[..cut]), None, "truncated at {cut}");
        }
        let mut tcp = buf.clone();
        tcp[ETH_LEN + 6] = 6;
        assert_eq!(decode(&tcp), None);
        // An IPv4 fragment is not a test frame.
        let t4 = Template::new(&h4(), 64).unwrap();
        let mut b4 = vec![0u8; t4.len()];
        t4.stamp(&mut b4, 1, 2, 3, MAGIC_HI);
        assert!(decode(&b4).is_some());
        b4[ETH_LEN + 6] = 0x20; // MF
        assert_eq!(decode(&b4), None);
        let mut bad_ihl = b4.clone();
        bad_ihl[ETH_LEN] = 0x41;
        assert_eq!(decode(&bad_ihl), None);
        let _ = Ipv6Addr::LOCALHOST;
    }

    fn tunnel() -> Tunnel6 {
        Tunnel6 { src: "2001:db8:46::10".parse().unwrap(), dst: "2001:db8:ffff::1".parse().unwrap() }
    }

    fn stamped_4in6(size: usize) -> Vec<u8> {
        let t = Template::new_4in6(&h4(), tunnel(), size).unwrap();
        let mut buf = vec![0u8; t.len()];
        t.stamp(&mut buf, 987_654_321, 11, 7, MAGIC_HI | 3);
        buf
    }

    #[test]
    fn a_4in6_frame_is_20_bytes_longer_than_the_ipv6_frame() {
        assert_eq!(min_frame_4in6(), min_frame(true) + 20);
        assert_eq!(min_frame_4in6(), 104);
        assert_eq!(Template::new_4in6(&h4(), tunnel(), 104).unwrap().len(), 100);
        assert_eq!(Template::new_4in6(&h4(), tunnel(), 103).unwrap_err(), BuildError::BadSize(103));
        assert_eq!(Template::new_4in6(&h6(), tunnel(), 200).unwrap_err(), BuildError::InnerNotIpv4);
        assert_eq!(Template::new_4in6(&h4(), tunnel(), 1538).unwrap().len(), 1534);
    }

    #[test]
    fn a_4in6_frame_has_valid_headers_and_checksums() {
        for size in [104, 300, 1538] {
            let b = stamped_4in6(size);
            let len = size - FCS_LEN;
            assert_eq!(&b[12..14], &[0x86, 0xdd], "Ethernet type IPv6");
            let outer = &b[ETH_LEN..];
            assert_eq!(outer[0] >> 4, 6);
            assert_eq!(outer[6], 4, "next header: IPv4 (RFC 2473)");
            assert_eq!(usize::from(u16::from_be_bytes([outer[4], outer[5]])), len - ETH_LEN - 40);
            assert_eq!(&outer[8..24], &tunnel().src.octets());
            assert_eq!(&outer[24..40], &tunnel().dst.octets());
            let inner = &outer[40..];
            assert_eq!(inner[0], 0x45);
            assert_eq!(inner[9], 17);
            assert_eq!(usize::from(u16::from_be_bytes([inner[2], inner[3]])), len - ETH_LEN - 40);
            assert!(checksum::verifies(sum(&inner[..20])), "inner IPv4 header checksum");
            let l4 = &inner[20..];
            assert!(
                checksum::verifies(sum(&inner[12..20]) + 17 + l4.len() as u64 + sum(l4)),
                "UDP checksum of a {size}-byte 4in6 frame"
            );
        }
    }

    #[test]
    fn stamp_then_decode_round_trips_4in6() {
        let rx = decode(&stamped_4in6(104)).unwrap();
        let h = h4();
        assert_eq!(
            rx,
            Rx {
                src: h.src,
                dst: h.dst,
                sport: 40000,
                dport: 53,
                ts_ns: 987_654_321,
                seq: 11,
                flow: 7,
                magic: MAGIC_HI | 3,
                tunnel: Some(tunnel()),
            }
        );
        assert!(rx.outer_v6(), "a 4in6 frame arrives as IPv6");
        let plain = Template::new(&h4(), 64).unwrap();
        let mut b = vec![0u8; plain.len()];
        plain.stamp(&mut b, 1, 2, 3, MAGIC_HI);
        assert!(!decode(&b).unwrap().outer_v6());
    }

    #[test]
    fn decode_rejects_truncated_and_foreign_4in6_frames() {
        let good = stamped_4in6(104);
        for cut in 0..good.len() {
            assert_eq!(decode(&good[..cut]), None, "truncated at {cut}");
        }
        let mut v6in6 = good.clone();
        v6in6[ETH_LEN + 6] = 41;
        assert_eq!(decode(&v6in6), None, "next header 41 is not 4in6");
        let inner = ETH_LEN + 40;
        let mut tcp = good.clone();
        tcp[inner + 9] = 6;
        assert_eq!(decode(&tcp), None, "inner TCP");
        let mut frag = good.clone();
        frag[inner + 6] = 0x20; // MF
        assert_eq!(decode(&frag), None, "inner fragment");
        let mut v6_inner = good.clone();
        v6_inner[inner] = 0x60;
        assert_eq!(decode(&v6_inner), None, "an IPv6 header where IPv4 belongs");
        let mut long = good.clone();
        long[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(decode(&long), None, "outer payload length beyond the frame");
        let mut long_inner = good.clone();
        long_inner[inner + 2..inner + 4].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(decode(&long_inner), None, "inner total length beyond the outer payload");
    }

    #[test]
    fn rfc4814_ports_are_in_range_distinct_and_reproducible() {
        let p = rfc4814_ports(5000, 1);
        assert_eq!(p.len(), 5000);
        assert!(p.iter().all(|&(s, d)| s >= 1024 && (1..=49151).contains(&d)));
        let mut s: Vec<u16> = p.iter().map(|x| x.0).collect();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), 5000);
        assert_eq!(p, rfc4814_ports(5000, 1));
        assert_ne!(p, rfc4814_ports(5000, 2));
        assert_eq!(rfc4814_ports(100_000, 1).len(), 64512);
    }
}
