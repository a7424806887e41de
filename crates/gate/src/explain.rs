//! One-line, human-readable packet summaries for `v6gate translate --explain`.
//!
//! Deliberately independent of xlat's own parser: packets are decoded with
//! `etherparse` and checksums are recomputed here, so a translator bug
//! cannot hide itself in the explanation.
//!
//! ```text
//! IPv4 198.51.100.7 > 192.0.2.1 UDP 40000 > 53 len=40 ttl=64
//! IPv6 2001:db8:6::1 > 64:ff9b:1::c633:6407 ICMPv6 echo-request id=7 seq=1 len=64 hlim=64
//! IPv6 64:ff9b:1::c000:8 > 2001:db8::1 ICMPv6 time-exceeded code=0 {IPv6 2001:db8::1 > ... UDP 1 > 2 ...} len=96 hlim=64
//! ```
//!
//! A wrong checksum shows as `BAD-CHECKSUM(<what>)`.

use core::fmt::Write as _;
use core::net::{Ipv4Addr, Ipv6Addr};

use etherparse::{IpNumber, LaxNetSlice, LaxSlicedPacket, TransportSlice};

/// Summarise one L3 packet (IPv4 or IPv6 header first) on one line.
pub fn summarize(pkt: &[u8]) -> String {
    let mut s = String::with_capacity(128);
    write_summary(&mut s, pkt, true);
    s
}

/// Where the transport checksum's pseudo-header comes from.
enum Pseudo {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

fn write_summary(s: &mut String, pkt: &[u8], outer: bool) {
    let p = match LaxSlicedPacket::from_ip(pkt) {
        Ok(p) => p,
        Err(e) => {
            let _ = write!(s, "unparseable {} bytes ({e})", pkt.len());
            return;
        }
    };
    let (pseudo, len_txt, frag_txt) = match &p.net {
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            let _ = write!(s, "IPv4 {} > {} ", h.source_addr(), h.destination_addr());
            let mut frag = String::new();
            if h.more_fragments() || h.fragments_offset().value() != 0 {
                let _ = write!(
                    frag,
                    " frag(id=0x{:04x} off={}{})",
                    h.identification(),
                    u32::from(h.fragments_offset().value()) * 8,
                    if h.more_fragments() { " MF" } else { "" }
                );
            }
            if h.dont_fragment() {
                frag.push_str(" DF");
            }
            if outer && checksum(h.slice()) != 0 {
                frag.push_str(" BAD-CHECKSUM(ipv4-header)");
            }
            let tos = (h.dcp().value() << 2) | h.ecn().value();
            if tos != 0 {
                let _ = write!(frag, " tos=0x{tos:02x}");
            }
            (Pseudo::V4(h.source_addr(), h.destination_addr()), format!("len={} ttl={}", h.total_len(), h.ttl()), frag)
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            let _ = write!(s, "IPv6 {} > {} ", h.source_addr(), h.destination_addr());
            let mut frag = String::new();
            for ext in v6.extensions().clone().into_iter() {
                if let etherparse::Ipv6ExtensionSlice::Fragment(f) = ext {
                    let _ = write!(
                        frag,
                        " frag(id=0x{:08x} off={}{})",
                        f.identification(),
                        u32::from(f.fragment_offset().value()) * 8,
                        if f.more_fragments() { " MF" } else { "" }
                    );
                }
            }
            if h.traffic_class() != 0 {
                let _ = write!(frag, " tclass=0x{:02x}", h.traffic_class());
            }
            (
                Pseudo::V6(h.source_addr(), h.destination_addr()),
                format!("len={} hlim={}", 40 + usize::from(h.payload_length()), h.hop_limit()),
                frag,
            )
        }
        None => {
            let _ = write!(s, "unparseable {} bytes", pkt.len());
            return;
        }
    };
    let payload = p.net.as_ref().and_then(|n| n.ip_payload_ref());
    // Checksums can only be verified on a complete, unfragmented packet.
    let verify = outer && payload.is_some_and(|pl| !pl.incomplete && !pl.fragmented);
    match &p.transport {
        Some(TransportSlice::Udp(u)) => {
            let _ = write!(s, "UDP {} > {}", u.source_port(), u.destination_port());
            if u.checksum() == 0 {
                s.push_str(" udp-checksum=0");
            } else if verify && payload.is_some_and(|pl| l4_checksum(&pseudo, 17, pl.payload) != 0) {
                s.push_str(" BAD-CHECKSUM(udp)");
            }
        }
        Some(TransportSlice::Tcp(t)) => {
            let _ = write!(s, "TCP {} > {} [{}]", t.source_port(), t.destination_port(), tcp_flags(t));
            if verify && payload.is_some_and(|pl| l4_checksum(&pseudo, 6, pl.payload) != 0) {
                s.push_str(" BAD-CHECKSUM(tcp)");
            }
        }
        Some(TransportSlice::Icmpv4(i)) => {
            let b = i.bytes5to8();
            icmpv4(s, i.type_u8(), i.code_u8(), b, i.payload());
            if verify && checksum(i.slice()) != 0 {
                s.push_str(" BAD-CHECKSUM(icmpv4)");
            }
        }
        Some(TransportSlice::Icmpv6(i)) => {
            let b = i.bytes5to8();
            icmpv6(s, i.type_u8(), i.code_u8(), b, i.payload());
            if verify && payload.is_some_and(|pl| l4_checksum(&pseudo, 58, pl.payload) != 0) {
                s.push_str(" BAD-CHECKSUM(icmpv6)");
            }
        }
        None => match payload {
            Some(pl) => {
                let _ = write!(s, "{}", proto_name(pl.ip_number));
                if pl.fragmented {
                    s.push_str(" (fragment)");
                }
            }
            None => s.push('?'),
        },
    }
    if payload.is_some_and(|pl| pl.incomplete) {
        s.push_str(" (truncated)");
    }
    if let Some((e, layer)) = &p.stop_err {
        if p.transport.is_none() && payload.is_some_and(|pl| !pl.fragmented) {
            let _ = write!(s, " [{layer:?}: {e}]");
        }
    }
    s.push_str(&frag_txt);
    s.push(' ');
    s.push_str(&len_txt);
}

fn proto_name(n: IpNumber) -> String {
    match n.keyword_str() {
        Some(k) => format!("proto={k}({})", n.0),
        None => format!("proto={}", n.0),
    }
}

fn tcp_flags(t: &etherparse::TcpSlice<'_>) -> String {
    let mut f = Vec::new();
    for (on, name) in [
        (t.syn(), "SYN"),
        (t.fin(), "FIN"),
        (t.rst(), "RST"),
        (t.psh(), "PSH"),
        (t.ack(), "ACK"),
        (t.urg(), "URG"),
        (t.ece(), "ECE"),
        (t.cwr(), "CWR"),
    ] {
        if on {
            f.push(name);
        }
    }
    f.join(",")
}

fn be16(b: [u8; 4], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn icmpv4(s: &mut String, ty: u8, code: u8, b: [u8; 4], payload: &[u8]) {
    let (name, error) = match ty {
        0 => ("echo-reply", false),
        3 => ("dest-unreachable", true),
        4 => ("source-quench", true),
        5 => ("redirect", true),
        8 => ("echo-request", false),
        9 => ("router-advertisement", false),
        10 => ("router-solicitation", false),
        11 => ("time-exceeded", true),
        12 => ("parameter-problem", true),
        13 => ("timestamp", false),
        14 => ("timestamp-reply", false),
        _ => ("", false),
    };
    if name.is_empty() {
        let _ = write!(s, "ICMPv4 type={ty} code={code}");
    } else {
        let _ = write!(s, "ICMPv4 {name}");
    }
    match ty {
        0 | 8 | 13 | 14 => {
            let _ = write!(s, " id={} seq={}", be16(b, 0), be16(b, 2));
        }
        3 if code == 4 => {
            let _ = write!(s, " code=4(frag-needed) mtu={}", be16(b, 2));
        }
        12 => {
            let _ = write!(s, " code={code} pointer={}", b[0]);
        }
        _ if !name.is_empty() && (error || code != 0) => {
            let _ = write!(s, " code={code}");
        }
        _ => {}
    }
    if error {
        inner(s, payload);
    }
}

fn icmpv6(s: &mut String, ty: u8, code: u8, b: [u8; 4], payload: &[u8]) {
    let name = match ty {
        1 => "dest-unreachable",
        2 => "packet-too-big",
        3 => "time-exceeded",
        4 => "parameter-problem",
        128 => "echo-request",
        129 => "echo-reply",
        130 => "mld-query",
        131 => "mld-report",
        132 => "mld-done",
        133 => "router-solicitation",
        134 => "router-advertisement",
        135 => "neighbor-solicitation",
        136 => "neighbor-advertisement",
        137 => "redirect",
        _ => "",
    };
    if name.is_empty() {
        let _ = write!(s, "ICMPv6 type={ty} code={code}");
    } else {
        let _ = write!(s, "ICMPv6 {name}");
    }
    match ty {
        128 | 129 => {
            let _ = write!(s, " id={} seq={}", be16(b, 0), be16(b, 2));
        }
        2 => {
            let _ = write!(s, " mtu={}", u32::from_be_bytes(b));
        }
        4 => {
            let _ = write!(s, " code={code} pointer={}", u32::from_be_bytes(b));
        }
        1 | 3 => {
            let _ = write!(s, " code={code}");
        }
        _ if !name.is_empty() && code != 0 => {
            let _ = write!(s, " code={code}");
        }
        _ => {}
    }
    if ty < 128 {
        inner(s, payload);
    }
}

/// The packet quoted inside an ICMP error, in braces.
fn inner(s: &mut String, payload: &[u8]) {
    if payload.is_empty() {
        return;
    }
    s.push_str(" {");
    write_summary(s, payload, false);
    s.push('}');
}

/// RFC 1071 one's-complement sum, folded; 0 means "verifies" when the data
/// includes its checksum field.
fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn checksum(data: &[u8]) -> u16 {
    fold(sum(0, data))
}

fn l4_checksum(p: &Pseudo, proto: u8, seg: &[u8]) -> u16 {
    let mut acc = match p {
        Pseudo::V4(a, b) => sum(sum(0, &a.octets()), &b.octets()),
        Pseudo::V6(a, b) => sum(sum(0, &a.octets()), &b.octets()),
    };
    let len = seg.len() as u32;
    acc += (len >> 16) + (len & 0xffff) + u32::from(proto);
    fold(sum(acc, seg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn udp4() -> Vec<u8> {
        let b = PacketBuilder::ipv4([198, 51, 100, 7], [192, 0, 2, 1], 64).udp(40000, 53);
        let mut v = Vec::new();
        b.write(&mut v, b"hello").unwrap();
        v
    }

    #[test]
    fn udp_v4() {
        let s = summarize(&udp4());
        assert_eq!(s, "IPv4 198.51.100.7 > 192.0.2.1 UDP 40000 > 53 DF len=33 ttl=64");
    }

    #[test]
    fn bad_checksum_is_flagged() {
        let mut p = udp4();
        let n = p.len();
        p[n - 1] ^= 1;
        assert!(summarize(&p).contains("BAD-CHECKSUM(udp)"), "{}", summarize(&p));
        p[10] ^= 1;
        assert!(summarize(&p).contains("BAD-CHECKSUM(ipv4-header)"), "{}", summarize(&p));
    }

    #[test]
    fn tcp_and_icmp_v6() {
        let b = PacketBuilder::ipv6([0x20, 1, 0xd, 0xb8, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0; 16], 64)
            .tcp(40001, 80, 1, 65535)
            .syn();
        let mut v = Vec::new();
        b.write(&mut v, &[]).unwrap();
        let s = summarize(&v);
        assert!(s.starts_with("IPv6 2001:db8:6::1 > :: TCP 40001 > 80 [SYN] len=60 hlim=64"), "{s}");
        let b = PacketBuilder::ipv6([0x20, 1, 0xd, 0xb8, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0; 16], 64)
            .icmpv6_echo_request(7, 1);
        let mut v = Vec::new();
        b.write(&mut v, b"ping").unwrap();
        let s = summarize(&v);
        assert_eq!(s, "IPv6 2001:db8:6::1 > :: ICMPv6 echo-request id=7 seq=1 len=52 hlim=64");
    }

    #[test]
    fn icmp_error_shows_inner_packet() {
        let inner = udp4();
        let b = PacketBuilder::ipv4([192, 0, 0, 8], [198, 51, 100, 7], 64)
            .icmpv4(etherparse::Icmpv4Type::TimeExceeded(etherparse::icmpv4::TimeExceededCode::TtlExceededInTransit));
        let mut v = Vec::new();
        b.write(&mut v, &inner[..28]).unwrap();
        let s = summarize(&v);
        assert!(s.starts_with("IPv4 192.0.0.8 > 198.51.100.7 ICMPv4 time-exceeded code=0 {IPv4 198.51.100.7 > 192.0.2.1 UDP 40000 > 53"), "{s}");
        assert!(!s.contains("BAD"), "{s}");
    }

    #[test]
    fn garbage_does_not_panic() {
        for p in [&[][..], &[0x45], &[0x60; 7], &[0x45, 0, 0, 20, 0, 0, 0x20, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]]
        {
            let _ = summarize(p);
        }
        assert!(summarize(&[0x10, 0]).starts_with("unparseable 2 bytes"));
    }
}
