//! Nanoseconds per packet for the SIIT translator: UDP, TCP, ICMP echo and
//! ICMP error translation in both directions, for each address-mapping
//! mode. Run with `make bench` (or `cargo bench -p xlat`).
//!
//! Packets are built once; each iteration translates one packet into a
//! reused `Out` arena, as a worker does.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::siit::{Config, MappingMode, Translator};
use xlat::{Out, Verdict};

fn csum(data: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    for c in data.chunks(2) {
        acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn v4(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, l4: &[u8]) -> Vec<u8> {
    let mut b = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
    b[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    let c = csum(&b);
    b[10..12].copy_from_slice(&c.to_be_bytes());
    b.extend_from_slice(l4);
    b
}

fn v6(next: u8, src: Ipv6Addr, dst: Ipv6Addr, l4: &[u8]) -> Vec<u8> {
    let mut b = vec![0x60, 0, 0, 0, 0, 0, next, 64];
    b[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    b.extend_from_slice(l4);
    b
}

/// Transport headers with a plausible non-zero checksum: the translator
/// updates checksums incrementally, so the value itself does not matter.
fn udp(payload: usize) -> Vec<u8> {
    let mut u = vec![0x13, 0x88, 0x00, 0x35, 0, 0, 0xab, 0xcd];
    u[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    u.resize(8 + payload, 0x5a);
    u
}
fn tcp(payload: usize) -> Vec<u8> {
    let mut t = vec![0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0x12, 0x34, 0, 0];
    t.resize(20 + payload, 0x5a);
    t
}
fn echo(kind: u8, payload: usize) -> Vec<u8> {
    let mut m = vec![kind, 0, 0x77, 0x77, 0, 1, 0, 1];
    m.resize(8 + payload, 0x5a);
    m
}

struct Mode {
    name: &'static str,
    cfg: Config,
    v4_host: Ipv4Addr,
    v6_host: Ipv6Addr,
    v4_peer: Ipv4Addr,
}

fn modes() -> Vec<Mode> {
    // 64 EAMs 2001:db8:6:N::/120 <-> 198.51.N.0/24, so lookups are real LPM work.
    let eamt: Vec<_> = (0..64u32)
        .map(|i| {
            let v4 = Ipv4Addr::from(0xc633_0000u32 | (i << 8));
            (format!("2001:db8:6:{i:x}::/120").parse().unwrap(), format!("{v4}/24").parse().unwrap())
        })
        .collect();
    vec![
        Mode {
            name: "rfc6052-96",
            cfg: Config { pool6: Some("64:ff9b::/96".parse().unwrap()), ..Config::default() },
            v4_host: "9.9.9.9".parse().unwrap(),
            v6_host: "64:ff9b::5.5.5.5".parse().unwrap(),
            v4_peer: "5.5.5.5".parse().unwrap(),
        },
        Mode {
            name: "rfc6052-40",
            cfg: Config { pool6: Some("2001:db8:100::/40".parse().unwrap()), ..Config::default() },
            v4_host: "192.0.2.1".parse().unwrap(),
            v6_host: "2001:db8:1c6:3364:5::".parse().unwrap(),
            v4_peer: "198.51.100.5".parse().unwrap(),
        },
        Mode {
            name: "ivi",
            cfg: Config {
                pool6: Some("2001:dba::/32".parse().unwrap()),
                mapping: MappingMode::Ivi,
                ..Config::default()
            },
            v4_host: "192.0.2.1".parse().unwrap(),
            v6_host: "2001:dba:ffca:2661:cd::".parse().unwrap(),
            v4_peer: "202.38.97.205".parse().unwrap(),
        },
        Mode {
            name: "eamt64+pool6",
            cfg: Config { pool6: Some("64:ff9b::/96".parse().unwrap()), eamt, ..Config::default() },
            v4_host: "9.9.9.9".parse().unwrap(),
            v6_host: "2001:db8:6:2a::5".parse().unwrap(),
            v4_peer: "198.51.42.5".parse().unwrap(),
        },
    ]
}

fn bench(c: &mut Criterion) {
    for m in modes() {
        let t = Translator::new(m.cfg.clone()).expect("bench config");
        let host6 = t.mapper().v4_to_v6(m.v4_host).expect("v4 host maps");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("udp-4to6", v4(17, m.v4_host, m.v4_peer, &udp(64))),
            ("udp-6to4", v6(17, m.v6_host, host6, &udp(64))),
            ("tcp-4to6", v4(6, m.v4_host, m.v4_peer, &tcp(64))),
            ("tcp-6to4", v6(6, m.v6_host, host6, &tcp(64))),
            ("echo-4to6", v4(1, m.v4_host, m.v4_peer, &echo(8, 56))),
            ("echo-6to4", v6(58, m.v6_host, host6, &echo(128, 56))),
            ("error-4to6", icmp4_error(&m, host6)),
            ("error-6to4", icmp6_error(&t, &m, host6)),
        ];
        let mut g = c.benchmark_group(format!("siit/{}", m.name));
        g.throughput(Throughput::Elements(1));
        let mut out = Out::new();
        for (name, pkt) in &cases {
            assert_eq!(t.translate(pkt, &mut out), Verdict::Emit, "{} {name} must translate", m.name);
            g.bench_with_input(BenchmarkId::from_parameter(name), pkt, |b, pkt| {
                b.iter(|| black_box(t.translate(black_box(pkt), &mut out)))
            });
        }
        g.finish();
    }
}

/// ICMPv4 Port Unreachable from the IPv4 host about a UDP packet the IPv6
/// host sent.
fn icmp4_error(m: &Mode, _host6: Ipv6Addr) -> Vec<u8> {
    let quoted = v4(17, m.v4_peer, m.v4_host, &udp(64));
    let mut msg = vec![3, 3, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&quoted);
    let c = csum(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    v4(1, m.v4_host, m.v4_peer, &msg)
}

/// ICMPv6 Port Unreachable from the IPv6 host about a UDP packet from the
/// IPv4 host.
fn icmp6_error(_t: &Translator, m: &Mode, host6: Ipv6Addr) -> Vec<u8> {
    let quoted = v6(17, host6, m.v6_host, &udp(64));
    let mut msg = vec![1, 4, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&quoted);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&m.v6_host.octets());
    pseudo.extend_from_slice(&host6.octets());
    pseudo.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&msg);
    let c = csum(&pseudo);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    v6(58, m.v6_host, host6, &msg)
}

criterion_group!(benches, bench);
criterion_main!(benches);
