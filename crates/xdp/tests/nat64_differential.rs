//! The NAT64 differential test: established sessions created by the Rust
//! core (`nat64::Nat64`, RFC 6146) and mirrored into `nat64_sessions`;
//! packets run through the XDP program with BPF_PROG_TEST_RUN and through
//! the core. Each result is XDP_PASS with the frame unchanged, or
//! byte-identical to the core's output. TCP SYN/FIN/RST always pass (the
//! core's state machine stays the truth); a forwarded packet refreshes the
//! entry's last-seen time.

#[path = "../../xlat/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use nat64::{Nat64, Protocol, SessionFilter, TcpState};
use proptest::prelude::*;
use support::{frame, hex, ident_of, run, Net, Outcome};
use xdp::nat64::{Session, L4};
use xdp::types::progs;
use xlat::{Out, PacketKind, Verdict};

const X: &str = "2001:db8:6::5";
const Y: &str = "198.51.100.7";
const Y6: &str = "2001:db8:64::c633:6407";
const T: &str = "192.0.2.1";

fn core() -> Nat64 {
    let mut c: nat64::Config = toml::from_str(
        r#"
        pool6 = "2001:db8:64::/96"
        pool4 = ["192.0.2.1/32"]
        "#,
    )
    .unwrap();
    c.shards = 2;
    Nat64::new(c).expect("valid NAT64 config")
}

/// The core's single forwarded packet for `l3`.
fn core_forward(n: &Nat64, l3: &[u8], now: u64, ident: u16) -> Result<Vec<u8>, String> {
    let mut out = Out::with_ident_seed(ident);
    match n.translate(l3, now, &mut out) {
        Verdict::Emit => match out.iter().collect::<Vec<_>>().as_slice() {
            [(PacketKind::Forward, p)] => Ok(p.to_vec()),
            o => Err(format!("core emitted {} packets", o.len())),
        },
        Verdict::Drop(r) => Err(format!("core dropped it ({r})")),
    }
}

fn diff(net: &Net, n: &Nat64, l3: &[u8], now: u64) -> Outcome {
    let o = run(net, progs::NAT64, &frame(l3), net.ingress(l3));
    if let Outcome::Forwarded(got) = &o {
        let want = core_forward(n, l3, now, ident_of(got))
            .unwrap_or_else(|e| panic!("fast path forwarded what the core does not: {e}\ninput {}", hex(l3)));
        assert_eq!(hex(got), hex(&want), "fast path and core differ for input {}", hex(l3));
        // The IP layer always verifies; the transport checksum only when
        // the input's did (translation keeps an error, as it must).
        check_ip(got);
    }
    o
}

/// Run `l3` through the core only (the slow path), expecting a translation.
fn slow(n: &Nat64, l3: &[u8], now: u64) {
    core_forward(n, l3, now, 0).unwrap_or_else(|e| panic!("slow path: {e}"));
}

/// Mirror every session of `n` whose state is established (or UDP/ICMP).
fn mirror(net: &mut Net, n: &Nat64) -> Vec<Session> {
    let mut out = Vec::new();
    for s in n.sessions(&SessionFilter::default(), 0) {
        if s.state.is_some_and(|st| st != TcpState::Established) {
            continue;
        }
        let l4 = match s.protocol {
            Protocol::Udp => L4::Udp,
            Protocol::Tcp => L4::Tcp,
            Protocol::Icmp => L4::Icmp,
        };
        let m = Session { l4, x: s.ipv6_src, y6: s.ipv6_dst, t: s.ipv4_src, y: s.ipv4_dst };
        for (k, v) in m.entries() {
            net.fp.nat64_insert(&k, &v).unwrap();
        }
        out.push(m);
    }
    out
}

fn v6(next: u8) -> V6 {
    V6 { tc: 0x28, ..V6::new(next, X, Y6) }
}

fn v4(proto: u8) -> V4 {
    V4 { tos: 0x28, ..V4::new(proto, Y, T) }
}

/// The flows every test uses, established through the core: UDP
/// 40000 -> 53, TCP 40001 -> 80 (handshake done), echo identifier 0x77.
/// Returns (t_udp, t_tcp, t_icmp): the pool4 ports the core chose.
fn establish(net: &mut Net, n: &Nat64) -> (u16, u16, u16) {
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    slow(n, &v6(17).udp(40000, 53, b"query"), 0);
    slow(n, &v6(6).tcp(40001, 80, 0x02, b""), 0);
    slow(n, &v6(58).icmp(128, 0, [0, 0x77, 0, 1], b"ping"), 0);
    let tcp_t = n
        .sessions(&SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() }, 0)
        .first()
        .map(|s| s.ipv4_src.port())
        .expect("tcp session");
    slow(n, &v4(6).tcp(80, tcp_t, 0x12, b""), 1);
    slow(n, &v6(6).tcp(40001, 80, 0x10, b""), 2);
    let ms = mirror(net, n);
    assert_eq!(ms.len(), 3, "three established sessions mirrored");
    let port = |l4| ms.iter().find(|s| s.l4 == l4).unwrap().t.port();
    (port(L4::Udp), port(L4::Tcp), port(L4::Icmp))
}

fn fast(net: &Net, n: &Nat64, now: u64, l3: &[u8], what: &str) {
    match diff(net, n, l3, now) {
        Outcome::Forwarded(p) => check(&p),
        Outcome::Passed => panic!("{what}: expected the fast path"),
    }
}

fn pass(net: &Net, n: &Nat64, now: u64, l3: &[u8], what: &str) {
    assert_eq!(diff(net, n, l3, now), Outcome::Passed, "{what}: expected a pass");
}

#[test]
fn rfc6146_established_sessions() {
    let mut net = Net::new("xdp-nat64");
    let n = core();
    let (tu, tt, ti) = establish(&mut net, &n);
    let now = 3_000_000_000;

    fast(&net, &n, now, &v6(17).udp(40000, 53, b"query 2"), "UDP 6->4");
    fast(&net, &n, now, &v4(17).udp(53, tu, b"answer"), "UDP 4->6");
    fast(&net, &n, now, &v6(6).tcp(40001, 80, 0x18, b"GET / HTTP/1.0\r\n\r\n"), "TCP data 6->4");
    fast(&net, &n, now, &v4(6).tcp(80, tt, 0x10, b""), "TCP ACK 4->6");
    fast(&net, &n, now, &v4(6).tcp(80, tt, 0x18, &[0x55; 1200]), "TCP data 4->6");
    fast(&net, &n, now, &v6(58).icmp(128, 0, [0, 0x77, 0, 2], b"ping"), "echo request 6->4");
    fast(&net, &n, now, &v4(1).icmp(0, 0, [(ti >> 8) as u8, ti as u8, 0, 2], b"ping"), "echo reply 4->6");
    pass(&net, &n, now, &v6(6).tcp(40001, 80, 0x11, b""), "TCP FIN 6->4");
    pass(&net, &n, now, &v4(6).tcp(80, tt, 0x14, b""), "TCP RST 4->6");
    pass(&net, &n, now, &v6(6).tcp(40001, 80, 0x02, b""), "TCP SYN 6->4");
    pass(&net, &n, now, &v6(17).udp(40002, 53, b"new flow"), "no session");
    pass(&net, &n, now, &v4(17).udp(53, tu.wrapping_add(1), b"no session"), "no session 4->6");
    pass(&net, &n, now, &V6 { hop: 1, ..v6(17) }.udp(40000, 53, b"ttl"), "hop limit");
    pass(&net, &n, now, &v6(17).udp(40000, 53, &vec![0; 1480]), "too big for IPv4");
    pass(&net, &n, now, &v6(58).icmp(1, 4, [0; 4], &v6(17).udp(1, 2, b"")), "ICMPv6 error");

    // Last-seen refreshed by the fast path only for the flows it served.
    let s = Session {
        l4: L4::Udp,
        x: format!("[{X}]:40000").parse().unwrap(),
        y6: format!("[{Y6}]:53").parse().unwrap(),
        t: format!("{T}:{tu}").parse().unwrap(),
        y: format!("{Y}:53").parse().unwrap(),
    };
    let [(k6, _), (k4, _)] = s.entries();
    let seen6 = net.fp.nat64_get(&k6).unwrap().expect("entry").last_seen_ns;
    let seen4 = net.fp.nat64_get(&k4).unwrap().expect("entry").last_seen_ns;
    assert!(seen6 > 0 && seen4 > 0, "last-seen refreshed: {seen6} {seen4}");
    // Removing the entry sends the flow back to the slow path.
    assert!(net.fp.nat64_remove(&k6).unwrap());
    assert!(!net.fp.nat64_remove(&k6).unwrap());
    pass(&net, &n, now, &v6(17).udp(40000, 53, b"removed"), "removed entry");

    let c = net.fp.counter_map().unwrap();
    assert_eq!(c["nat64-6to4"].packets, 3, "{c:?}");
    assert_eq!(c["nat64-4to6"].packets, 4, "{c:?}");
    assert_eq!(c["tcp-control"].packets, 3, "{c:?}");
}

#[test]
fn nat64_knobs_and_generated_packets() {
    let mut net = Net::new("xdp-nat64-prop");
    let n = core();
    let (tu, tt, ti) = establish(&mut net, &n);
    let now = 5_000_000_000;
    let strat =
        (0u8..6, any::<u8>(), 2u8..=255, any::<bool>(), prop::collection::vec(any::<u8>(), 0..1400), any::<u8>());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 400, ..ProptestConfig::default() });
    runner
        .run(&strat, |(kind, tos, ttl, df, data, flags)| {
            // Data segments only (ACK/PSH/URG/ECE/CWR): SYN, FIN, RST pass.
            let flags = (flags & !0x07) | 0x10;
            let l3 = match kind {
                0 => V6 { tc: tos, hop: ttl, ..v6(17) }.udp(40000, 53, &data),
                1 => V6 { tc: tos, hop: ttl, ..v6(6) }.tcp(40001, 80, flags, &data),
                2 => V6 { tc: tos, hop: ttl, ..v6(58) }.icmp(128 + (flags & 1), 0, [0, 0x77, 0, 9], &data),
                3 => V4 { tos, ttl, df, ..v4(17) }.udp(53, tu, &data),
                4 => V4 { tos, ttl, df, ..v4(6) }.tcp(80, tt, flags, &data),
                _ => V4 { tos, ttl, df, ..v4(1) }.icmp(8 * (flags & 1), 3, [(ti >> 8) as u8, ti as u8, 0, 9], &data),
            };
            let v6in = l3[0] >> 4 == 6;
            let fits = if v6in { l3.len() - 20 <= 1500 } else { l3.len() + 20 <= if df { 1500 } else { 1280 } };
            let o = diff(&net, &n, &l3, now);
            if let Outcome::Forwarded(p) = &o {
                check(p);
            }
            prop_assert_eq!(matches!(o, Outcome::Forwarded(_)), ttl > 1 && fits, "fast path choice for {}", hex(&l3));
            Ok(())
        })
        .unwrap();
    // Mutated packets of the established flows: a pass or the core's bytes.
    let mutate =
        (0u8..2, prop::collection::vec((0usize..60, any::<u8>()), 1..4), prop::collection::vec(any::<u8>(), 0..64));
    runner
        .run(&mutate, |(kind, flips, data)| {
            let mut l3 = if kind == 0 { v6(17).udp(40000, 53, &data) } else { v4(6).tcp(80, tt, 0x10, &data) };
            for (at, x) in flips {
                let at = at % l3.len();
                l3[at] ^= x | 1;
            }
            diff(&net, &n, &l3, now);
            Ok(())
        })
        .unwrap();
    // reset-tos / reset-traffic-class / MTUs of the NAT64's translator.
    let x = xlat::siit::Config {
        reset_tos: true,
        new_tos: 0x48,
        reset_traffic_class: true,
        ipv4_mtu: 1000,
        ..Default::default()
    };
    let mut c: nat64::Config = toml::from_str("pool6 = \"2001:db8:64::/96\"\npool4 = [\"192.0.2.1/32\"]").unwrap();
    c.shards = 2;
    let n2 = Nat64::with_xlat(c, x.clone()).unwrap();
    // n2 is a second core with those knobs: its UDP session replaces the
    // mirrored one (same IPv6 key; its own pool4 port).
    slow(&n2, &v6(17).udp(40000, 53, b"first"), 0);
    let t2 = n2.sessions(&SessionFilter::default(), 0)[0].ipv4_src.port();
    mirror(&mut net, &n2);
    net.fp.set_nat64(&x).unwrap();
    assert!(matches!(diff(&net, &n2, &v6(17).udp(40000, 53, b"tos"), now), Outcome::Forwarded(_)));
    assert!(matches!(diff(&net, &n2, &v4(17).udp(53, t2, b"tc"), now), Outcome::Forwarded(_)));
    assert_eq!(diff(&net, &n2, &v6(17).udp(40000, 53, &[0; 1000]), now), Outcome::Passed, "ipv4-mtu 1000");
    net.fp.nat64_off().unwrap();
    assert_eq!(diff(&net, &n2, &v6(17).udp(40000, 53, b"off"), now), Outcome::Passed, "NAT64 off");
}
