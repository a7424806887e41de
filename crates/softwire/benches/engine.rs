//! Per-packet cost of the softwire engines (issue #15: the lwAFTR's
//! zero-loss throughput against userspace SIIT and the DS-Lite AFTR).
//! `cargo bench -p softwire --bench engine`.
//!
//! The traffic is `bench xlat`'s softwire rows without the TUN device:
//! 1,024 UDP flows with 18-byte payloads (84-byte IPv6 frames, the 4in6
//! packets 20 bytes longer), one lwB4 on a shared address (PSID length 4,
//! offset 6: every flow's port in its set) or one B4 behind the AFTR's
//! NAT44 (the IPv4 → softwire packets go to the mappings the softwire →
//! IPv4 packets created). Each iteration pushes all 1,024 packets through
//! `process`, each answered with one emitted packet (checked).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use etherparse::PacketBuilder;
use softwire::aftr::{Aftr, AftrConfig};
use softwire::binding::{Binding, BindingTable};
use softwire::endpoint::EndpointConfig;
use softwire::lwaftr::{Lwaftr, LwaftrConfig};
use softwire::nat44::{Nat44Config, PoolPorts};
use softwire::portset::PsidMap;
use softwire::Action;
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::Out;

const FLOWS: u16 = 1024;
const AFTR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const B46: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, 0, 0x10);
const SERVER: [u8; 4] = [198, 18, 0, 2];
const PAYLOAD: [u8; 18] = [0x5a; 18];

fn udp4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ipv4(src, dst, 64).udp(sport, dport).write(&mut v, &PAYLOAD).unwrap();
    v
}

fn softwire(inner: &[u8]) -> Vec<u8> {
    let mut out = Out::new();
    xlat::tunnel::ip4in6::encap(inner, B46, AFTR6, 64, None, false, &mut out);
    out.get(0).unwrap().1.to_vec()
}

fn endpoint() -> EndpointConfig {
    EndpointConfig::new(AFTR6, Ipv4Addr::new(192, 0, 0, 1))
}

/// Every packet through `process`; panics unless each one is emitted.
fn run(pkts: &[Vec<u8>], out: &mut Out, mut process: impl FnMut(&[u8], &mut Out) -> Action) -> usize {
    let mut n = 0;
    for p in pkts {
        assert_eq!(process(black_box(p), out), Action::Emit);
        n += out.len();
    }
    assert_eq!(n, pkts.len());
    n
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_84");
    g.throughput(Throughput::Elements(u64::from(FLOWS)));
    let mut out = Out::new();

    // lw4o6: the lwB4 holds 192.0.2.130 PSID 5 of 16.
    let map = PsidMap::new(6, 4).unwrap();
    let mut table = BindingTable::new();
    let ipv4 = Ipv4Addr::new(192, 0, 2, 130);
    table.insert(Binding { b4: B46, ipv4, psid: 5, map }).unwrap();
    let lw = Lwaftr::new(
        LwaftrConfig { endpoint: endpoint(), hairpinning: true, icmpv4_errors: true, icmpv6_errors: true },
        table,
    );
    let ports: Vec<u16> = (0..FLOWS).map(|i| map.nth(5, u32::from(i) * 3)).collect();
    let up: Vec<Vec<u8>> = ports.iter().map(|&p| softwire(&udp4(ipv4.octets(), p, SERVER, 53))).collect();
    let down: Vec<Vec<u8>> = ports.iter().map(|&p| udp4(SERVER, 53, ipv4.octets(), p)).collect();
    g.bench_function("lwaftr_6to4", |b| b.iter(|| run(&up, &mut out, |p, o| lw.process(p, 0, o))));
    g.bench_function("lwaftr_4to6", |b| b.iter(|| run(&down, &mut out, |p, o| lw.process(p, 0, o))));

    // DS-Lite: a B4 behind the NAT44; the warm-up creates the mappings.
    let aftr = Aftr::new(
        AftrConfig {
            endpoint: endpoint(),
            b4_prefixes: vec!["2001:db8::/32".parse().unwrap()],
            nat: Nat44Config { log_mappings: false, ..Default::default() },
            hairpinning: true,
            icmpv6_errors: true,
        },
        Box::new(PoolPorts::new(
            vec![nat64::Pool4Entry {
                prefix: "203.0.113.1/32".parse().unwrap(),
                ports: (1024, 65535),
                protocols: nat64::Protocol::ALL.to_vec(),
            }],
            1024,
        )),
    );
    let up: Vec<Vec<u8>> = (0..FLOWS).map(|i| softwire(&udp4([192, 168, 0, 10], 10_000 + i, SERVER, 53))).collect();
    let down: Vec<Vec<u8>> = up
        .iter()
        .map(|p| {
            assert_eq!(aftr.process(p, 0, &mut out), Action::Emit);
            let v4 = out.get(0).unwrap().1;
            let sport = u16::from_be_bytes([v4[20], v4[21]]);
            udp4(SERVER, 53, [v4[12], v4[13], v4[14], v4[15]], sport)
        })
        .collect();
    g.bench_function("aftr_6to4", |b| b.iter(|| run(&up, &mut out, |p, o| aftr.process(p, 1, o))));
    g.bench_function("aftr_4to6", |b| b.iter(|| run(&down, &mut out, |p, o| aftr.process(p, 1, o))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
