//! Test support: hand-made packet builders and an independent validator.
//!
//! Nothing here calls into `xlat`'s checksum or wire code: builders use a
//! from-the-definition RFC 1071 sum, and [`check`] validates every header
//! and checksum with `etherparse`.
#![allow(dead_code)]

use etherparse::{Ipv4HeaderSlice, Ipv6HeaderSlice, TcpHeaderSlice, UdpHeaderSlice};
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::siit::{Config, Translator};
use xlat::{Out, PacketKind, Verdict};

pub fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
pub fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// RFC 1071, 16 bits at a time, straight from the definition.
pub fn csum(parts: &[&[u8]]) -> u16 {
    let mut data = Vec::new();
    for p in parts {
        data.extend_from_slice(p);
    }
    let mut acc: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from(c[0]) << 8 };
        acc += u32::from(w);
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn pseudo4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p
}

fn pseudo6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, proto]);
    p
}

/// IPv4 header fields for the builder.
#[derive(Clone, Copy)]
pub struct V4 {
    pub tos: u8,
    pub id: u16,
    pub df: bool,
    pub mf: bool,
    pub offset: u16,
    pub ttl: u8,
    pub proto: u8,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
}

impl V4 {
    pub fn new(proto: u8, src: &str, dst: &str) -> Self {
        V4 { tos: 0, id: 0x1234, df: true, mf: false, offset: 0, ttl: 64, proto, src: a4(src), dst: a4(dst) }
    }
    /// A complete packet with `options` and `payload`.
    pub fn build_opts(&self, options: &[u8], payload: &[u8]) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let hl = 20 + options.len();
        let mut b = vec![0u8; hl];
        b[0] = 0x40 | (hl / 4) as u8;
        b[1] = self.tos;
        b[2..4].copy_from_slice(&((hl + payload.len()) as u16).to_be_bytes());
        b[4..6].copy_from_slice(&self.id.to_be_bytes());
        let flags = (u16::from(self.df) << 14) | (u16::from(self.mf) << 13) | self.offset;
        b[6..8].copy_from_slice(&flags.to_be_bytes());
        b[8] = self.ttl;
        b[9] = self.proto;
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        b[20..].copy_from_slice(options);
        let c = csum(&[&b]);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b.extend_from_slice(payload);
        b
    }
    pub fn build(&self, payload: &[u8]) -> Vec<u8> {
        self.build_opts(&[], payload)
    }
    pub fn udp(&self, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
        let mut u = udp_raw(sport, dport, data);
        let c = csum(&[&pseudo4(self.src, self.dst, 17, u.len()), &u]);
        u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        self.build(&u)
    }
    pub fn tcp(&self, sport: u16, dport: u16, flags: u8, data: &[u8]) -> Vec<u8> {
        let mut t = tcp_raw(sport, dport, flags, data);
        let c = csum(&[&pseudo4(self.src, self.dst, 6, t.len()), &t]);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        self.build(&t)
    }
    pub fn icmp(&self, kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
        self.build(&icmp4(kind, code, rest, body))
    }
}

/// IPv6 header fields for the builder.
#[derive(Clone, Copy)]
pub struct V6 {
    pub tc: u8,
    pub flow: u32,
    pub hop: u8,
    pub next: u8,
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
}

impl V6 {
    pub fn new(next: u8, src: &str, dst: &str) -> Self {
        V6 { tc: 0, flow: 0, hop: 64, next, src: a6(src), dst: a6(dst) }
    }
    /// A complete packet; `exts` are raw extension headers placed before
    /// the payload (the caller chains their Next Header fields).
    pub fn build(&self, exts: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        let w = (6u32 << 28) | (u32::from(self.tc) << 20) | (self.flow & 0xfffff);
        b[0..4].copy_from_slice(&w.to_be_bytes());
        b[4..6].copy_from_slice(&((exts.len() + payload.len()) as u16).to_be_bytes());
        b[6] = self.next;
        b[7] = self.hop;
        b[8..24].copy_from_slice(&self.src.octets());
        b[24..40].copy_from_slice(&self.dst.octets());
        b.extend_from_slice(exts);
        b.extend_from_slice(payload);
        b
    }
    pub fn udp_payload(&self, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
        let mut u = udp_raw(sport, dport, data);
        let c = csum(&[&pseudo6(self.src, self.dst, 17, u.len()), &u]);
        u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        u
    }
    pub fn udp(&self, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
        self.build(&[], &self.udp_payload(sport, dport, data))
    }
    pub fn tcp(&self, sport: u16, dport: u16, flags: u8, data: &[u8]) -> Vec<u8> {
        let mut t = tcp_raw(sport, dport, flags, data);
        let c = csum(&[&pseudo6(self.src, self.dst, 6, t.len()), &t]);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        self.build(&[], &t)
    }
    pub fn icmp_payload(&self, kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind, code, 0, 0];
        m.extend_from_slice(&rest);
        m.extend_from_slice(body);
        let c = csum(&[&pseudo6(self.src, self.dst, 58, m.len()), &m]);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        m
    }
    pub fn icmp(&self, kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
        self.build(&[], &self.icmp_payload(kind, code, rest, body))
    }
}

pub fn udp_raw(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    u
}

pub fn tcp_raw(sport: u16, dport: u16, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(data);
    t
}

pub fn icmp4(kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    let c = csum(&[&m]);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// Validate only the IP layer of an emitted packet (header checksum and
/// length fields): what must hold even when the input's transport checksum
/// was already wrong, since translation preserves such errors.
pub fn check_ip(pkt: &[u8]) {
    match pkt[0] >> 4 {
        4 => {
            let h = Ipv4HeaderSlice::from_slice(pkt).expect("etherparse rejects IPv4 header");
            assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum(), "IPv4 header checksum");
            assert_eq!(usize::from(h.total_len()), pkt.len(), "IPv4 total length");
        }
        6 => {
            let h = Ipv6HeaderSlice::from_slice(pkt).expect("etherparse rejects IPv6 header");
            assert_eq!(usize::from(h.payload_length()) + 40, pkt.len(), "IPv6 payload length");
        }
        v => panic!("emitted packet with version {v}"),
    }
}

/// Validate an emitted packet with etherparse: IP header, and (for
/// unfragmented packets and first fragments that hold a whole datagram)
/// the transport or ICMP checksum. Panics with a description on failure.
pub fn check(pkt: &[u8]) {
    match pkt[0] >> 4 {
        4 => {
            let h = Ipv4HeaderSlice::from_slice(pkt).expect("etherparse rejects IPv4 header");
            assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum(), "IPv4 header checksum");
            assert_eq!(usize::from(h.total_len()), pkt.len(), "IPv4 total length");
            if h.is_fragmenting_payload() {
                return;
            }
            let payload = &pkt[h.slice().len()..];
            let (s, d) = (h.source(), h.destination());
            match h.protocol().0 {
                17 => {
                    let u = UdpHeaderSlice::from_slice(payload).expect("UDP header");
                    if u.checksum() != 0 {
                        let c = u.to_header().calc_checksum_ipv4_raw(s, d, &payload[8..]).unwrap();
                        assert_eq!(u.checksum(), c, "UDP/IPv4 checksum");
                    }
                }
                6 => {
                    let t = TcpHeaderSlice::from_slice(payload).expect("TCP header");
                    let c = t.calc_checksum_ipv4_raw(s, d, &payload[t.slice().len()..]).unwrap();
                    assert_eq!(t.checksum(), c, "TCP/IPv4 checksum");
                }
                1 => {
                    let c = u16::from_be_bytes([payload[2], payload[3]]);
                    let mut z = payload.to_vec();
                    z[2] = 0;
                    z[3] = 0;
                    assert_eq!(c, csum(&[&z]), "ICMPv4 checksum");
                    if payload[0] == 0 || payload[0] == 8 {
                        let e = etherparse::Icmpv4Slice::from_slice(payload).expect("ICMPv4");
                        let mut hdr = e.header();
                        hdr.update_checksum(e.payload());
                        assert_eq!(hdr.checksum, c, "ICMPv4 echo checksum (etherparse)");
                    }
                }
                _ => {}
            }
        }
        6 => {
            let h = Ipv6HeaderSlice::from_slice(pkt).expect("etherparse rejects IPv6 header");
            assert_eq!(usize::from(h.payload_length()) + 40, pkt.len(), "IPv6 payload length");
            let mut next = h.next_header().0;
            let mut at = 40;
            // Skip a Fragment header; stop on non-first fragments.
            if next == 44 {
                let fo = u16::from_be_bytes([pkt[at + 2], pkt[at + 3]]);
                if fo >> 3 != 0 || fo & 1 != 0 {
                    return;
                }
                next = pkt[at];
                at += 8;
            }
            let payload = &pkt[at..];
            let (s, d) = (h.source(), h.destination());
            match next {
                17 => {
                    let u = UdpHeaderSlice::from_slice(payload).expect("UDP header");
                    assert_ne!(u.checksum(), 0, "zero UDP checksum in IPv6");
                    let c = u.to_header().calc_checksum_ipv6_raw(s, d, &payload[8..]).unwrap();
                    assert_eq!(u.checksum(), c, "UDP/IPv6 checksum");
                }
                6 => {
                    let t = TcpHeaderSlice::from_slice(payload).expect("TCP header");
                    let c = t.calc_checksum_ipv6_raw(s, d, &payload[t.slice().len()..]).unwrap();
                    assert_eq!(t.checksum(), c, "TCP/IPv6 checksum");
                }
                58 => {
                    let c = u16::from_be_bytes([payload[2], payload[3]]);
                    let mut z = payload.to_vec();
                    z[2] = 0;
                    z[3] = 0;
                    let pseudo = pseudo6(Ipv6Addr::from(s), Ipv6Addr::from(d), 58, z.len());
                    assert_eq!(c, csum(&[&pseudo, &z]), "ICMPv6 checksum");
                    // etherparse rebuilds bytes 4..8 from its own model of the
                    // type, so it can only judge messages it models fully.
                    if payload[0] >= 128 || payload[4..8] == [0, 0, 0, 0] || payload[0] == 2 || payload[0] == 4 {
                        let e = etherparse::Icmpv6Slice::from_slice(payload).expect("ICMPv6");
                        let c2 = e.icmp_type().calc_checksum(s, d, e.payload()).unwrap();
                        assert_eq!(c, c2, "ICMPv6 checksum (etherparse)");
                    }
                }
                _ => {}
            }
        }
        v => panic!("emitted packet with version {v}"),
    }
}

/// The test network used by the vectors:
/// - pool6 2001:db8:100::/40 (RFC 6052, not the WKP, so documentation
///   IPv4 addresses translate);
/// - EAM 2001:db8:6::/120 ↔ 198.51.100.0/24 (the IPv6 side's hosts).
pub fn config() -> Config {
    Config {
        pool6: Some("2001:db8:100::/40".parse().unwrap()),
        eamt: vec![("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap())],
        ..Config::default()
    }
}

pub fn xlat_with(cfg: Config) -> Translator {
    Translator::new(cfg).expect("valid test config")
}

/// Translate and return (verdict, emitted packets with kinds); every
/// emitted packet is validated with [`check`].
pub fn run(t: &Translator, pkt: &[u8]) -> (Verdict, Vec<(PacketKind, Vec<u8>)>) {
    let mut out = Out::new();
    let v = t.translate(pkt, &mut out);
    let pkts: Vec<_> = out.iter().map(|(k, p)| (k, p.to_vec())).collect();
    for (_, p) in &pkts {
        check(p);
    }
    match v {
        Verdict::Emit => assert!(!pkts.is_empty(), "Emit with nothing emitted"),
        Verdict::Drop(_) => assert!(pkts.is_empty(), "Drop with packets emitted"),
    }
    (v, pkts)
}

/// Translate expecting exactly one forwarded packet.
pub fn one(t: &Translator, pkt: &[u8]) -> Vec<u8> {
    let (v, pkts) = run(t, pkt);
    assert_eq!(v, Verdict::Emit, "expected a translation");
    assert_eq!(pkts.len(), 1, "expected one packet");
    assert_eq!(pkts[0].0, PacketKind::Forward);
    pkts[0].1.clone()
}

/// Hex dump for assertion messages.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
