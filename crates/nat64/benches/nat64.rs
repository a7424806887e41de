//! `cargo bench -p nat64`: established-flow translation both ways and
//! new-session creation (first packet of a flow: BIB entry, RFC 6056 port
//! allocation or, in NAT-PT mode, the host's pool4 address, session,
//! timer-wheel insertion; expiry of old sessions is amortised into it),
//! in both modes (groups `nat64` and `natpt`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nat64::{Config, Nat64};
use std::hint::black_box;
use std::net::Ipv6Addr;
use xlat::{Out, Verdict};

fn csum(data: &[u8]) -> u16 {
    let mut acc = 0u32;
    for c in data.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from(c[0]) << 8 };
        acc += u32::from(w);
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn udp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let ulen = 8 + payload;
    let mut p = vec![0u8; 40 + ulen];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
    p[42..44].copy_from_slice(&dport.to_be_bytes());
    p[44..46].copy_from_slice(&(ulen as u16).to_be_bytes());
    let mut ps = Vec::new();
    ps.extend_from_slice(&src.octets());
    ps.extend_from_slice(&dst.octets());
    ps.extend_from_slice(&(ulen as u32).to_be_bytes());
    ps.extend_from_slice(&[0, 0, 0, 17]);
    ps.extend_from_slice(&p[40..]);
    let c = csum(&ps);
    p[46..48].copy_from_slice(&c.to_be_bytes());
    p
}

/// New source address (low 32 bits) and port. The UDP checksum is left
/// stale: the translator adjusts it incrementally and never verifies it, so
/// the work measured is the same.
fn set_src(p: &mut [u8], host: u32, sport: u16) {
    p[20..24].copy_from_slice(&host.to_be_bytes());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
}

/// Both pool modes on the same traffic: `nat64` (RFC 6056 port per BIB
/// entry) and `natpt` (the host's whole pool4 address, ports kept).
fn bench(c: &mut Criterion) {
    for mode in ["nat64", "natpt"] {
        bench_mode(c, mode);
    }
}

fn bench_mode(c: &mut Criterion, mode: &str) {
    let cfg: Config = toml::from_str(&format!(
        r#"
        mode = "{mode}"
        pool6 = "2001:db8:64::/96"
        pool4 = ["192.0.2.0/24"]
        udp-timeout = 1
        max-sessions = 262144
        max-bib = 262144
        preallocate-tables = true
        "#
    ))
    .unwrap();
    let nat = Nat64::new(cfg).unwrap();
    let host: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let peer: Ipv6Addr = "2001:db8:64::c633:6407".parse().unwrap();
    let mut out = Out::new();
    let pkt = udp6(host, peer, 40000, 53, 100);
    assert_eq!(nat.translate(&pkt, 0, &mut out), Verdict::Emit);
    let v4 = out.get(0).unwrap().1.to_vec();
    let t = u16::from_be_bytes([v4[20], v4[21]]);
    // The reply: swap addresses and ports in the translated packet.
    let mut reply = v4.clone();
    reply[12..16].copy_from_slice(&v4[16..20]);
    reply[16..20].copy_from_slice(&v4[12..16]);
    reply[20..22].copy_from_slice(&53u16.to_be_bytes());
    reply[22..24].copy_from_slice(&t.to_be_bytes());
    // The UDP checksum is symmetric in the swap; the header checksum too.
    assert_eq!(nat.translate(&reply, 0, &mut out), Verdict::Emit);

    let mut g = c.benchmark_group(mode);
    g.throughput(Throughput::Elements(1));
    g.bench_function("udp-6to4-established", |b| {
        b.iter(|| black_box(nat.translate(black_box(&pkt), 1, &mut out)));
    });
    g.bench_function("udp-4to6-established", |b| {
        b.iter(|| black_box(nat.translate(black_box(&reply), 1, &mut out)));
    });
    let mut flow = udp6(host, peer, 1, 53, 100);
    let mut i: u64 = 0;
    g.bench_function("udp-new-session", |b| {
        b.iter(|| {
            i += 1;
            // A fresh (host, port) every time: a new BIB entry and session.
            set_src(&mut flow, 0x0100_0000 | (i >> 14) as u32, 1024 + (i & 0x3fff) as u16);
            // 10 µs of fake time per flow; sessions live 1 s.
            let now = 10 + i * 10_000;
            if i.is_multiple_of(4096) {
                nat.expire(now);
            }
            let v = nat.translate(&flow, now, &mut out);
            debug_assert_eq!(v, Verdict::Emit);
            black_box(v)
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
