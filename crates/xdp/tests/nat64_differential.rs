//! The NAT64 differential test: established sessions created by the Rust
//! core (`nat64::Nat64`, RFC 6146) and mirrored into `nat64_sessions`;
//! packets run through the XDP program with BPF_PROG_TEST_RUN and through
//! the core. Each result is XDP_PASS with the frame unchanged, or
//! byte-identical to the core's output. TCP SYN/FIN/RST always pass (the
//! core's state machine stays the truth), but the IPv4 side's SYN+ACK of a
//! half-open session (mirrored by the core's `FastHook` when the IPv6 SYN
//! created it), which is carried and recorded; the core then learns it and
//! ends with the table of a core that saw every packet itself. A forwarded
//! packet refreshes the entry's last-seen time.

#[path = "../../xlat/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use nat64::{FastHook, Nat64, Protocol, SessionFilter, SessionInfo, TcpState};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
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
        let m = session(&s, false);
        for (k, v) in m.entries() {
            net.fp.nat64_insert(&k, &v).unwrap();
        }
        out.push(m);
    }
    out
}

/// Session `s` of the core in the contract's form.
fn session(s: &SessionInfo, half_open: bool) -> Session {
    let l4 = match s.protocol {
        Protocol::Udp => L4::Udp,
        Protocol::Tcp => L4::Tcp,
        Protocol::Icmp => L4::Icmp,
    };
    Session { l4, x: s.ipv6_src, y6: s.ipv6_dst, t: s.ipv4_src, y: s.ipv4_dst, half_open }
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
    lab::need_root!();
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
        half_open: false,
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
    lab::need_root!();
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

/// The core's fast-path hook on the test's map, as the daemon's: mirrors
/// what the core creates, reads back a half-open session's SYN+ACK. The
/// core's clock is CLOCK_MONOTONIC here (the program's stamps are used as
/// they are).
#[derive(Debug)]
struct Hook(Mutex<xdp::nat64::Nat64Sessions>, Mutex<Vec<(SessionInfo, bool)>>);

impl FastHook for Hook {
    fn mirror(&self, s: &SessionInfo, half_open: bool) {
        self.0.lock().unwrap().insert(&session(s, half_open)).expect("mirror");
        self.1.lock().unwrap().push((s.clone(), half_open));
    }
    fn syn_ack(&self, s: &SessionInfo) -> Option<u64> {
        let seen = self.0.lock().unwrap().seen(&session(s, true)).expect("read back")?;
        seen.syn_ack.then_some(seen.last_seen_ns)
    }
}

fn mono() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `l3` through the fast path, or else through `engine` (the slow path
/// behind it); `twin` (a core that sees every packet) translates it too
/// at `now`, and both results must be the same bytes.
fn twin_step(net: &Net, engine: &Nat64, twin: &Nat64, l3: &[u8], now: u64) -> Outcome {
    let o = run(net, progs::NAT64, &frame(l3), net.ingress(l3));
    let got = match &o {
        Outcome::Forwarded(p) => p.clone(),
        Outcome::Passed => core_forward(engine, l3, now, 0).unwrap_or_else(|e| panic!("engine: {e}")),
    };
    let want = core_forward(twin, l3, now, ident_of(&got)).unwrap_or_else(|e| panic!("twin: {e}"));
    assert_eq!(hex(&got), hex(&want), "fast path + engine and twin differ for {}", hex(l3));
    o
}

/// (state, ms to expiry) of the TCP sessions at `now`.
fn tcp_table(n: &Nat64, now: u64) -> Vec<(u16, Option<TcpState>, u64)> {
    let f = SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() };
    n.sessions(&f, now).iter().map(|s| (s.ipv6_src.port(), s.state, s.expires_in_ms)).collect()
}

#[test]
fn half_open_sessions_from_the_first_packet() {
    lab::need_root!();
    let mut net = Net::new("xdp-nat64-half");
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    let engine = core();
    let twin = core();
    let hook = Arc::new(Hook(Mutex::new(net.fp.nat64_sessions().unwrap()), Mutex::default()));
    engine.set_fast_hook(Some(hook.clone()));
    let t0 = mono();

    // The IPv6 SYN creates the session on the slow path: mirrored
    // half-open before it is written out. (TCP keeps the host's port.)
    let syn = v6(6).tcp(40005, 80, 0x02, b"");
    assert_eq!(twin_step(&net, &engine, &twin, &syn, t0), Outcome::Passed);
    let m = hook.1.lock().unwrap().clone();
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].0.state, m[0].1), (Some(TcpState::V6Init), true));
    let half = session(&m[0].0, true);
    let tt = half.t.port();
    for (k, _) in half.entries() {
        assert_eq!(net.fp.nat64_get(&k).unwrap().expect("mirrored").flags, xdp::types::NAT64_F_HALF_OPEN);
    }
    // Half-open: everything but the IPv4 SYN+ACK passes.
    let now = t0 + 1000;
    pass(&net, &engine, now, &v6(6).tcp(40005, 80, 0x10, b""), "ACK 6->4 before the SYN+ACK");
    pass(&net, &engine, now, &v4(6).tcp(80, tt, 0x10, b""), "ACK 4->6 before the SYN+ACK");
    pass(&net, &engine, now, &v4(6).tcp(80, tt, 0x02, b""), "plain SYN 4->6 (simultaneous open)");
    pass(&net, &engine, now, &v4(6).tcp(80, tt, 0x13, b""), "SYN+ACK+FIN");
    pass(&net, &engine, now, &v4(6).tcp(80, tt, 0x16, b""), "SYN+ACK+RST");
    pass(&net, &engine, now, &v6(6).tcp(40005, 80, 0x12, b""), "SYN+ACK from the IPv6 side");
    assert_eq!(tcp_table(&engine, now)[0].1, Some(TcpState::V6Init), "passed packets changed nothing");
    // The SYN+ACK: carried, byte for byte as the twin translates it, and
    // recorded in both entries; the engine does not see it.
    let sa = v4(6).tcp(80, tt, 0x12, b"");
    let got = match run(&net, progs::NAT64, &frame(&sa), net.ingress(&sa)) {
        Outcome::Forwarded(p) => p,
        o => panic!("SYN+ACK of a half-open session: {o:?}"),
    };
    let seen = net.fp.nat64_get(&half.entries()[1].0).unwrap().unwrap().last_seen_ns;
    assert!(seen > 0);
    assert_eq!(hex(&got), hex(&core_forward(&twin, &sa, seen, 0).unwrap()), "SYN+ACK translation");
    for (k, _) in half.entries() {
        let f = net.fp.nat64_get(&k).unwrap().unwrap().flags;
        assert_eq!(f, xdp::types::NAT64_F_HALF_OPEN | xdp::types::NAT64_F_SYN_ACK, "recorded in both entries");
    }
    assert_eq!(tcp_table(&engine, seen)[0].1, Some(TcpState::V6Init), "the engine did not see it");
    // Then the handshake's ACK and data are carried both ways.
    let now = seen + 1_000_000_000;
    for p in [v6(6).tcp(40005, 80, 0x10, b""), v6(6).tcp(40005, 80, 0x18, b"GET /"), v4(6).tcp(80, tt, 0x18, b"200")] {
        assert!(matches!(twin_step(&net, &engine, &twin, &p, now), Outcome::Forwarded(_)), "carried");
    }
    // The SYN+ACK again (retransmitted): the engine's now; it learns first.
    assert_eq!(twin_step(&net, &engine, &twin, &sa, now), Outcome::Passed);
    assert_eq!(tcp_table(&engine, now), tcp_table(&twin, now), "learnt: the twin's table");
    // The close: FINs pass, the engine's state machine steps as the twin's.
    let later = now + 2_000_000_000;
    assert_eq!(twin_step(&net, &engine, &twin, &v6(6).tcp(40005, 80, 0x11, b""), later), Outcome::Passed);
    assert_eq!(twin_step(&net, &engine, &twin, &v4(6).tcp(80, tt, 0x11, b""), later), Outcome::Passed);
    assert_eq!(tcp_table(&engine, later), tcp_table(&twin, later));
    assert_eq!(tcp_table(&engine, later)[0].1, Some(TcpState::V4FinV6FinRcv));

    // A second session learnt at its first passed packet (the FIN), and a
    // third whose SYN+ACK the fast path passed: the engine opens it itself and the entries are rewritten in full at once.
    let t1 = later + 1_000_000_000;
    twin_step(&net, &engine, &twin, &v6(6).tcp(40006, 80, 0x02, b""), t1);
    twin_step(&net, &engine, &twin, &v6(6).tcp(40007, 80, 0x02, b""), t1);
    let sa6 = v4(6).tcp(80, 40006, 0x12, b"");
    assert!(matches!(run(&net, progs::NAT64, &frame(&sa6), net.ingress(&sa6)), Outcome::Forwarded(_)));
    let s6 = net.fp.nat64_get(&session(&hook.1.lock().unwrap()[1].0, true).entries()[0].0).unwrap().unwrap();
    core_forward(&twin, &sa6, s6.last_seen_ns, 0).unwrap();
    let fin = v6(6).tcp(40006, 80, 0x11, b"");
    assert_eq!(twin_step(&net, &engine, &twin, &fin, t1 + 5), Outcome::Passed);
    let sa7 = V4 { ttl: 1, ..v4(6) }.tcp(80, 40007, 0x12, b"");
    assert_eq!(run(&net, progs::NAT64, &frame(&sa7), net.ingress(&sa7)), Outcome::Passed, "TTL 1");
    // The engine gets it (as after any pass: no route, TTL, ...).
    let sa7 = v4(6).tcp(80, 40007, 0x12, b"");
    let (a, b) = (core_forward(&engine, &sa7, t1 + 5, 0).unwrap(), core_forward(&twin, &sa7, t1 + 5, 0).unwrap());
    assert_eq!(hex(&a), hex(&b));
    let last = hook.1.lock().unwrap().last().cloned().unwrap();
    assert_eq!((last.0.ipv6_src.port(), last.0.state, last.1), (40007, Some(TcpState::Established), false));
    for (k, _) in session(&last.0, false).entries() {
        assert_eq!(net.fp.nat64_get(&k).unwrap().unwrap().flags, 0, "carried in full");
    }
    assert!(matches!(twin_step(&net, &engine, &twin, &v6(6).tcp(40007, 80, 0x10, b""), t1 + 5), Outcome::Forwarded(_)));
    assert_eq!(tcp_table(&engine, t1 + 5), tcp_table(&twin, t1 + 5), "every session as the twin has it");

    // UDP and ICMP echo: mirrored in full at creation, the reply carried.
    // (Ports of new UDP and ICMP flows are drawn at random: no twin.)
    slow(&engine, &v6(17).udp(41000, 53, b"q"), t1);
    slow(&engine, &v6(58).icmp(128, 0, [0, 0x42, 0, 1], b"ping"), t1);
    let ms = hook.1.lock().unwrap().clone();
    let udp = ms.iter().find(|m| m.0.protocol == Protocol::Udp).expect("UDP mirrored");
    let icmp = ms.iter().find(|m| m.0.protocol == Protocol::Icmp).expect("ICMP mirrored");
    assert!(!udp.1 && !icmp.1);
    let tu = udp.0.ipv4_src.port();
    let ti = icmp.0.ipv4_src.port();
    fast(&net, &engine, t1, &v4(17).udp(53, tu, b"a"), "UDP reply");
    fast(&net, &engine, t1, &v4(1).icmp(0, 0, [(ti >> 8) as u8, ti as u8, 0, 1], b"ping"), "echo reply");

    let c = net.fp.counter_map().unwrap();
    assert_eq!(c["nat64-syn-ack"].packets, 2, "{c:?}");
    assert_eq!(c["half-open"].packets, 2, "the two ACKs (SYN, FIN, RST count as tcp-control): {c:?}");
}

#[test]
fn half_open_generated_packets() {
    lab::need_root!();
    // Random TCP flags both ways on fresh half-open sessions: a pass, or
    // (only the IPv4 side's SYN+ACK) the core's bytes.
    let mut net = Net::new("xdp-nat64-halfp");
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    let n = core();
    let hook = Arc::new(Hook(Mutex::new(net.fp.nat64_sessions().unwrap()), Mutex::default()));
    n.set_fast_hook(Some(hook.clone()));
    let port = std::cell::Cell::new(20000u16);
    let strat = (any::<bool>(), any::<u8>(), prop::collection::vec(any::<u8>(), 0..200));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 200, ..ProptestConfig::default() });
    runner
        .run(&strat, |(from4, flags, data)| {
            port.set(port.get() + 1);
            let port = port.get();
            slow(&n, &v6(6).tcp(port, 80, 0x02, b""), 0);
            let l3 = if from4 { v4(6).tcp(80, port, flags, &data) } else { v6(6).tcp(port, 80, flags, &data) };
            let o = diff(&net, &n, &l3, 1);
            prop_assert_eq!(matches!(o, Outcome::Forwarded(_)), from4 && flags & 0x17 == 0x12, "{}", hex(&l3));
            Ok(())
        })
        .unwrap();
}

// ---- NAT-PT sessions created in XDP (issue #15) ----

/// The engine's hook as the daemon's: mirrors into `nat64_sessions`, the
/// host bindings and held flag into the NAT-PT maps, and takes over the
/// sessions the program created (the clocks are both CLOCK_MONOTONIC).
#[derive(Debug)]
struct PtHook {
    map: Mutex<xdp::nat64::Nat64Sessions>,
    pt: Arc<xdp::nat64::Natpt>,
    adopted: Mutex<Vec<nat64::Created>>,
    /// Set: the ring is not drained (a translator lagging behind).
    hold: std::sync::atomic::AtomicBool,
    /// FINs the program carried, stepped by the engine.
    fins: Mutex<Vec<nat64::Created>>,
}

fn fin_side(k: xdp::nat64::MadeKind) -> Option<nat64::tcp::Side> {
    match k {
        xdp::nat64::MadeKind::Created => None,
        xdp::nat64::MadeKind::Fin6 => Some(nat64::tcp::Side::V6),
        xdp::nat64::MadeKind::Fin4 => Some(nat64::tcp::Side::V4),
    }
}

impl FastHook for PtHook {
    fn mirror(&self, s: &SessionInfo, half_open: bool) {
        self.map.lock().unwrap().insert(&session(s, half_open)).expect("mirror");
    }
    fn syn_ack(&self, s: &SessionInfo) -> Option<u64> {
        let seen = self.map.lock().unwrap().seen(&session(s, true)).expect("read back")?;
        seen.syn_ack.then_some(seen.last_seen_ns)
    }
    fn host(&self, x: std::net::Ipv6Addr, t: Option<std::net::Ipv4Addr>) {
        self.pt.set_host(x, t).expect("host binding");
    }
    fn held(&self, present: bool) {
        self.pt.set_held(present).expect("held flag");
    }
    fn created(&self, adopt: &mut dyn FnMut(&nat64::Created) -> bool) {
        if self.hold.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        self.pt.drain(|m| {
            let s = m.session;
            let c = nat64::Created {
                protocol: Protocol::Tcp,
                x: s.x,
                y: s.y,
                t: *s.t.ip(),
                port: s.t.port(),
                fin: fin_side(m.kind),
                at: m.ns,
            };
            let ok = adopt(&c);
            if ok && c.fin.is_none() {
                self.adopted.lock().unwrap().push(c);
            }
            if ok && c.fin.is_some() {
                self.fins.lock().unwrap().push(c);
            }
            ok
        });
    }
    fn port_blocks(&self) -> Option<Arc<dyn nat64::PortBlockMem>> {
        Some(Arc::new(ProgramBlocks(self.pt.clone())))
    }
    fn bib(&self, x: std::net::SocketAddrV6, t: Option<std::net::SocketAddrV4>) {
        self.pt.set_bib(x, t).expect("BIB entry");
    }
}

/// One address: the engine and the twin bind the host to the same one.
const PT_POOL4: &str = "192.0.2.1/32";

fn core_pt(max_sessions: usize) -> Nat64 {
    let mut c: nat64::Config = toml::from_str(&format!(
        r#"
        mode = "natpt"
        pool6 = "2001:db8:64::/96"
        pool4 = ["{PT_POOL4}"]
        "#
    ))
    .unwrap();
    c.shards = 2;
    c.max_sessions = max_sessions;
    Nat64::new(c).expect("valid NAT-PT config")
}

/// The engine's hook on `net`'s program, creation configured with the
/// tests' pool6 and pool4, `limit` and `port_block` (None: NAT-PT).
fn pt_hook(net: &Net, limit: u64, port_block: Option<u16>) -> Arc<PtHook> {
    let pt = net.fp.natpt().unwrap();
    pt.configure(Some(&xdp::nat64::NatptConfig {
        pool6: "2001:db8:64::/96".parse().unwrap(),
        pool4: vec![PT_POOL4.parse().unwrap()],
        limit,
        port_block,
    }))
    .unwrap();
    Arc::new(PtHook {
        map: Mutex::new(net.fp.nat64_sessions().unwrap()),
        pt: Arc::new(pt),
        adopted: Mutex::default(),
        hold: Default::default(),
        fins: Mutex::default(),
    })
}

fn pt_setup(name: &str, max_sessions: usize) -> (Net, Nat64, Nat64, Arc<PtHook>) {
    let mut net = Net::new(name);
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    let engine = core_pt(max_sessions);
    let twin = core_pt(max_sessions);
    let hook = pt_hook(&net, max_sessions as u64, None);
    engine.set_fast_hook(Some(hook.clone()));
    (net, engine, twin, hook)
}

/// The SYN `l3` through the program: forwarded (the session created
/// there) or passed to the engine. Either way the engine then holds the
/// session as the twin does that saw the SYN itself, at the time the
/// program created it, and the bytes are the twin's.
fn pt_syn(net: &Net, engine: &Nat64, twin: &Nat64, hook: &PtHook, l3: &[u8], now: u64) -> Outcome {
    let before = hook.adopted.lock().unwrap().len();
    let o = run(net, progs::NAT64, &frame(l3), net.ingress(l3));
    match &o {
        Outcome::Forwarded(got) => {
            engine.expire(now);
            let ad = hook.adopted.lock().unwrap();
            assert_eq!(ad.len(), before + 1, "the created session was taken over");
            let at = ad[before].at;
            let want = core_forward(twin, l3, at, ident_of(got)).unwrap_or_else(|e| panic!("twin: {e}"));
            assert_eq!(hex(got), hex(&want), "created in XDP and twin differ for {}", hex(l3));
            check_ip(got);
            assert_eq!(engine.sessions(&SessionFilter::default(), at), twin.sessions(&SessionFilter::default(), at));
        }
        Outcome::Passed => {
            let got = core_forward(engine, l3, now, 0).unwrap_or_else(|e| panic!("engine: {e}"));
            let want = core_forward(twin, l3, now, 0).unwrap_or_else(|e| panic!("twin: {e}"));
            assert_eq!(hex(&got), hex(&want));
        }
    }
    o
}

fn pt_v6(src: &str, dst: &str) -> V6 {
    V6 { tc: 0x28, ..V6::new(6, src, dst) }
}

#[test]
fn natpt_sessions_created_in_xdp() {
    lab::need_root!();
    let (net, engine, twin, hook) = pt_setup("xdp-natpt-make", 100_000);
    let t0 = mono();
    // A SYN of a host without an address passes: the engine binds it
    // (host told to the program) and creates the session itself.
    let syn = |sport: u16| pt_v6(X, Y6).tcp(sport, 80, 0x02, b"");
    assert_eq!(pt_syn(&net, &engine, &twin, &hook, &syn(40010), t0), Outcome::Passed);
    let t = hook.pt.host(X.parse().unwrap()).unwrap().expect("the binding is mirrored");
    assert_eq!(engine.natpt_hosts(), [(X.parse().unwrap(), t)]);
    // The host's next SYNs (new ports, another peer) are created in XDP.
    let y2 = "2001:db8:64::c633:6408";
    for (sport, dst) in [(40011, Y6), (40012, y2), (40013, Y6)] {
        let l3 = pt_v6(X, dst).tcp(sport, 80, 0x02, b"\x02\x04\x05\xb4\x01\x01\x04\x02");
        assert!(matches!(pt_syn(&net, &engine, &twin, &hook, &l3, mono()), Outcome::Forwarded(_)), "SYN {sport}");
    }
    let c = net.fp.counter_map().unwrap();
    assert_eq!(c["natpt-created"].packets, 3, "{c:?}");
    assert_eq!(hook.pt.created().unwrap(), 3);
    // The retransmitted SYN passes (the session exists: half-open).
    assert_eq!(run(&net, progs::NAT64, &frame(&syn(40011)), net.ingress(&syn(40011))), Outcome::Passed);
    // Its SYN+ACK is carried and recorded; the engine learns it at the
    // next packet it handles (the FIN) and ends as the twin.
    let sa = V4 { tos: 0x28, ..V4::new(6, Y, &t.to_string()) }.tcp(80, 40011, 0x12, b"");
    let got = match run(&net, progs::NAT64, &frame(&sa), net.ingress(&sa)) {
        Outcome::Forwarded(p) => p,
        o => panic!("SYN+ACK of a created session: {o:?}"),
    };
    let k4 = xdp::nat64::Session {
        l4: L4::Tcp,
        x: format!("[{X}]:40011").parse().unwrap(),
        y6: format!("[{Y6}]:80").parse().unwrap(),
        t: std::net::SocketAddrV4::new(t, 40011),
        y: format!("{Y}:80").parse().unwrap(),
        half_open: true,
    };
    let seen = net.fp.nat64_get(&k4.entries()[1].0).unwrap().unwrap().last_seen_ns;
    assert_eq!(hex(&got), hex(&core_forward(&twin, &sa, seen, 0).unwrap()), "SYN+ACK translation");
    // Both FINs are carried (the session is carried in full since its
    // SYN+ACK): each byte for byte the twin's, and the engine, told at
    // its next drain, steps as the twin that saw them at their time.
    let fin6 = pt_v6(X, Y6).tcp(40011, 80, 0x11, b"");
    let fin4 = V4 { tos: 0x28, ..V4::new(6, Y, &t.to_string()) }.tcp(80, 40011, 0x11, b"");
    carried_fins(&net, &engine, &twin, &hook, &[fin6, fin4]);
    assert_eq!(engine.stats().sessions_created, twin.stats().sessions_created);
    assert_eq!(engine.stats().natpt_hosts, 1);
}

/// FINs `l3s` through the program, each carried (byte for byte the twin's
/// at the time the program recorded), then the engine's drain: its TCP
/// sessions (states, lifetimes) are the twin's.
fn carried_fins(net: &Net, engine: &Nat64, twin: &Nat64, hook: &PtHook, l3s: &[Vec<u8>]) {
    for l3 in l3s {
        let before = hook.fins.lock().unwrap().len();
        let got = match run(net, progs::NAT64, &frame(l3), net.ingress(l3)) {
            Outcome::Forwarded(p) => p,
            o => panic!("FIN not carried: {o:?} {}", hex(l3)),
        };
        engine.expire(mono());
        let fins = hook.fins.lock().unwrap();
        assert_eq!(fins.len(), before + 1, "the FIN was told and stepped");
        let at = fins[before].at;
        let want = core_forward(twin, l3, at, ident_of(&got)).unwrap_or_else(|e| panic!("twin: {e}"));
        assert_eq!(hex(&got), hex(&want), "FIN carried and twin differ");
        check_ip(&got);
        let now = mono();
        assert_eq!(tcp_table(engine, now), tcp_table(twin, now), "every session as the twin has it");
    }
}

#[test]
fn natpt_creation_refusals_pass() {
    lab::need_root!();
    let (net, engine, twin, hook) = pt_setup("xdp-natpt-refuse", 100_000);
    let now = mono();
    let bind = pt_v6(X, Y6).tcp(40020, 80, 0x02, b"");
    assert_eq!(pt_syn(&net, &engine, &twin, &hook, &bind, now), Outcome::Passed);
    let t = hook.pt.host(X.parse().unwrap()).unwrap().unwrap();
    let passes = |l3: &[u8], why: &str| {
        let before = net.fp.counter_map().unwrap();
        assert_eq!(run(&net, progs::NAT64, &frame(l3), net.ingress(l3)), Outcome::Passed, "{why}");
        let after = net.fp.counter_map().unwrap();
        let b = before.get(why).map_or(0, |c| c.packets);
        assert_eq!(after[why].packets, b + 1, "counted as {why}: {before:?} -> {after:?}");
    };
    // Not a plain SYN: nothing created.
    passes(&pt_v6(X, Y6).tcp(40021, 80, 0x12, b""), "no-match");
    passes(&pt_v6(X, Y6).tcp(40021, 80, 0x10, b""), "no-match");
    // Outside pool6, from pool6, to pool4 (hairpin), forbidden peer.
    passes(&pt_v6(X, "2001:db8:65::c633:6407").tcp(40022, 80, 0x02, b""), "no-match");
    passes(&pt_v6("2001:db8:64::1", Y6).tcp(40022, 80, 0x02, b""), "natpt-hairpin");
    passes(&pt_v6(X, "2001:db8:64::c000:201").tcp(40022, 80, 0x02, b""), "natpt-hairpin");
    passes(&pt_v6(X, "2001:db8:64::7f00:1").tcp(40022, 80, 0x02, b""), "natpt-forbidden");
    passes(&pt_v6(X, "2001:db8:64::e000:1").tcp(40022, 80, 0x02, b""), "natpt-forbidden");
    // A host without an address.
    passes(&pt_v6("2001:db8:6::9", Y6).tcp(40022, 80, 0x02, b""), "natpt-no-host");
    // An IPv4 SYN held by the engine: the program leaves new sessions to it
    // until the store is empty again.
    let y3 = "198.51.100.9";
    let held = V4::new(6, y3, &t.to_string()).tcp(80, 40030, 0x02, b"");
    let mut out = Out::new();
    assert_eq!(engine.translate(&held, now, &mut out), Verdict::Drop(xlat::DropReason::SynHeld));
    passes(&pt_v6(X, Y6).tcp(40023, 80, 0x02, b""), "natpt-held");
    engine.expire(now + 60_000_000_000);
    assert_eq!(engine.stats().held_syns, 0);
    let ok = pt_v6(X, Y6).tcp(40023, 80, 0x02, b"");
    twin.expire(now + 60_000_000_000);
    assert!(matches!(pt_syn(&net, &engine, &twin, &hook, &ok, mono()), Outcome::Forwarded(_)), "held store empty");
    // Nothing was created by a refused SYN.
    let c = net.fp.counter_map().unwrap();
    assert_eq!(c["natpt-created"].packets, 1, "{c:?}");
    assert_eq!(
        engine.sessions(&SessionFilter::default(), now).len(),
        twin.sessions(&SessionFilter::default(), now).len()
    );
}

#[test]
fn natpt_creation_table_limit_and_ring_full() {
    lab::need_root!();
    let (net, engine, twin, hook) = pt_setup("xdp-natpt-limit", 3);
    let now = mono();
    assert_eq!(pt_syn(&net, &engine, &twin, &hook, &pt_v6(X, Y6).tcp(40040, 80, 0x02, b""), now), Outcome::Passed);
    hook.pt.set_sessions(engine.sessions(&SessionFilter::default(), now).len() as u64).unwrap();
    for sport in [40041, 40042] {
        let l3 = pt_v6(X, Y6).tcp(sport, 80, 0x02, b"");
        assert!(matches!(pt_syn(&net, &engine, &twin, &hook, &l3, mono()), Outcome::Forwarded(_)));
    }
    // Three sessions: the fourth SYN passes, and the engine refuses it too.
    let l3 = pt_v6(X, Y6).tcp(40043, 80, 0x02, b"");
    assert_eq!(run(&net, progs::NAT64, &frame(&l3), net.ingress(&l3)), Outcome::Passed);
    assert_eq!(net.fp.counter_map().unwrap()["natpt-table-full"].packets, 1);

    // Ring full: without a drain, creation stops when the ring is full;
    // the refused SYNs leave nothing behind.
    let (net, engine, _twin, hook) = pt_setup("xdp-natpt-ring", 100_000);
    let first = pt_v6(X, Y6).tcp(1000, 80, 0x02, b"");
    let mut out = Out::new();
    assert_eq!(engine.translate(&first, now, &mut out), Verdict::Emit);
    let mut made = 0u32;
    let mut sport = 1001u16;
    loop {
        let l3 = pt_v6(X, Y6).tcp(sport, 80, 0x02, b"");
        match run(&net, progs::NAT64, &frame(&l3), net.ingress(&l3)) {
            Outcome::Forwarded(_) => made += 1,
            Outcome::Passed => break,
        }
        sport += 1;
        assert!(sport < 5000, "the ring never filled");
    }
    let c = net.fp.counter_map().unwrap();
    assert_eq!(c["natpt-ring-full"].packets, 1, "{c:?}");
    assert_eq!(u64::from(made), c["natpt-created"].packets);
    let refused = xdp::nat64::Session {
        l4: L4::Tcp,
        x: format!("[{X}]:{sport}").parse().unwrap(),
        y6: format!("[{Y6}]:80").parse().unwrap(),
        t: std::net::SocketAddrV4::new(hook.pt.host(X.parse().unwrap()).unwrap().unwrap(), sport),
        y: format!("{Y}:80").parse().unwrap(),
        half_open: true,
    };
    for (k, _) in refused.entries() {
        assert!(net.fp.nat64_get(&k).unwrap().is_none(), "no entry for the refused SYN");
    }
    // The translator takes every created session over.
    engine.expire(mono());
    assert_eq!(hook.adopted.lock().unwrap().len(), made as usize);
    assert_eq!(engine.sessions(&SessionFilter::default(), now).len(), made as usize + 1);
}

#[test]
fn natpt_creation_generated_packets() {
    lab::need_root!();
    // Generated IPv6 TCP segments of a bound host (random flags, Traffic
    // Class, Hop Limit, payload, ports, peer): created in XDP only for a
    // plain SYN, and then byte for byte the twin's; anything else passes
    // and the engine answers it as the twin does.
    let (net, engine, twin, hook) = pt_setup("xdp-natpt-gen", 100_000);
    let now = mono();
    assert_eq!(pt_syn(&net, &engine, &twin, &hook, &pt_v6(X, Y6).tcp(1, 80, 0x02, b""), now), Outcome::Passed);
    let port = std::cell::Cell::new(30000u16);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 150, ..ProptestConfig::default() });
    runner
        .run(&segments(), |(flags, tc, hop, data, dport, y)| {
            port.set(port.get() + 1);
            let l3 = segment(port.get(), dport, flags, tc, hop, &data, y);
            let created = hook.adopted.lock().unwrap().len();
            let o = run(&net, progs::NAT64, &frame(&l3), net.ingress(&l3));
            prop_assert_eq!(matches!(o, Outcome::Forwarded(_)), flags & 0x17 == 0x02, "{}", hex(&l3));
            match o {
                Outcome::Forwarded(got) => {
                    engine.expire(mono());
                    let at = hook.adopted.lock().unwrap()[created].at;
                    let want = core_forward(&twin, &l3, at, ident_of(&got)).unwrap();
                    prop_assert_eq!(hex(&got), hex(&want));
                }
                Outcome::Passed => {
                    let t = mono();
                    let (mut a, mut b) = (Out::with_ident_seed(1), Out::with_ident_seed(1));
                    let (va, vb) = (engine.translate(&l3, t, &mut a), twin.translate(&l3, t, &mut b));
                    prop_assert_eq!(va, vb);
                    let pa: Vec<_> = a.iter().map(|(k, p)| (k, hex(p))).collect();
                    let pb: Vec<_> = b.iter().map(|(k, p)| (k, hex(p))).collect();
                    prop_assert_eq!(pa, pb);
                }
            }
            Ok(())
        })
        .unwrap();
    let t = mono();
    assert_eq!(tcp_table(&engine, t), tcp_table(&twin, t), "every session as the twin has it");
}

// ---- NAT64 (NAPT) sessions created in XDP with port blocks (issue #15) ----

/// The pool4 of the NAPT tests: one address whose TCP ports are exactly one
/// block (the engine's and the twin's blocks are the same ports).
const NAPT_PORTS: (u16, u16) = (1024, 1031);
const NAPT_BLOCK: u16 = 8;

fn core_napt(max_sessions: usize, ports: (u16, u16)) -> Nat64 {
    let mut c: nat64::Config = toml::from_str(r#"pool6 = "2001:db8:64::/96""#).unwrap();
    c.pool4 = vec![nat64::Pool4Entry { prefix: PT_POOL4.parse().unwrap(), ports, protocols: Protocol::ALL.to_vec() }];
    c.shards = 2;
    c.max_sessions = max_sessions;
    Nat64::new(c).expect("valid NAT64 config")
}

/// The program's port blocks (`n64_blocks`) as the translator's memory,
/// as the daemon wires them (crates/gate's `xdp_blocks`).
#[derive(Debug)]
struct ProgramBlocks(Arc<xdp::nat64::Natpt>);

impl nat64::PortBlockMem for ProgramBlocks {
    fn size(&self) -> u16 {
        self.0.block_size()
    }
    fn slots(&self) -> u32 {
        self.0.block_slots()
    }
    fn write(&self, slot: u32, addr: std::net::Ipv4Addr, base: u16, size: u16) {
        self.0.block_write(slot, addr, base, size)
    }
    fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        self.0.block_take(slot, size, hint)
    }
    fn give(&self, slot: u32, i: u16) {
        self.0.block_give(slot, i)
    }
    fn in_use(&self, slot: u32) -> u32 {
        self.0.block_in_use(slot)
    }
    fn list(&self, x: std::net::Ipv6Addr, slots: &[u32]) {
        self.0.list_blocks(x, slots)
    }
}

/// The twin's port blocks: on the heap, each port taken the one the test
/// names (the port the engine or the program took), so that the twin sees
/// each SYN with the same port.
#[derive(Debug)]
struct Forced {
    mem: nat64::HeapBlocks,
    next: Mutex<Option<u16>>,
}

impl nat64::PortBlockMem for Forced {
    fn size(&self) -> u16 {
        self.mem.size()
    }
    fn slots(&self) -> u32 {
        self.mem.slots()
    }
    fn write(&self, slot: u32, addr: std::net::Ipv4Addr, base: u16, size: u16) {
        self.mem.write(slot, addr, base, size)
    }
    fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        let want = self.next.lock().unwrap().take().map(|p| u32::from(p - NAPT_PORTS.0));
        let i = self.mem.take(slot, size, want.unwrap_or(hint))?;
        assert!(want.is_none_or(|w| w == u32::from(i)), "the twin's port {i} is taken");
        Some(i)
    }
    fn give(&self, slot: u32, i: u16) {
        self.mem.give(slot, i)
    }
    fn in_use(&self, slot: u32) -> u32 {
        self.mem.in_use(slot)
    }
    fn list(&self, x: std::net::Ipv6Addr, slots: &[u32]) {
        self.mem.list(x, slots)
    }
}

#[derive(Debug)]
struct TwinHook(Arc<Forced>);

impl FastHook for TwinHook {
    fn mirror(&self, _: &SessionInfo, _: bool) {}
    fn syn_ack(&self, _: &SessionInfo) -> Option<u64> {
        None
    }
    fn port_blocks(&self) -> Option<Arc<dyn nat64::PortBlockMem>> {
        Some(self.0.clone())
    }
}

struct Napt {
    net: Net,
    engine: Nat64,
    twin: Nat64,
    hook: Arc<PtHook>,
    forced: Arc<Forced>,
}

fn napt_setup(name: &str, max_sessions: usize) -> Napt {
    napt_setup_with(name, max_sessions, NAPT_PORTS, NAPT_BLOCK)
}

/// As [`napt_setup`] with a pool of TCP `ports` (from 1024: one block of
/// `block` ports).
fn napt_setup_with(name: &str, max_sessions: usize, ports: (u16, u16), block: u16) -> Napt {
    let mut net = Net::new(name);
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    let engine = core_napt(max_sessions, ports);
    let twin = core_napt(max_sessions, ports);
    let hook = pt_hook(&net, max_sessions as u64, Some(block));
    engine.set_fast_hook(Some(hook.clone()));
    let forced = Arc::new(Forced { mem: nat64::HeapBlocks::new(block, 4), next: Mutex::default() });
    twin.set_fast_hook(Some(Arc::new(TwinHook(forced.clone()))));
    Napt { net, engine, twin, hook, forced }
}

/// IPv4 source port of a translated TCP packet.
fn tport(p: &[u8]) -> u16 {
    u16::from_be_bytes([p[20], p[21]])
}

impl Napt {
    /// The SYN `l3` through the program: created there (the twin then
    /// sees it with the port the program took, at the event's time: same
    /// bytes, and after the drain the same sessions), or passed (engine
    /// and twin answer alike, the twin's port forced to the engine's).
    fn syn(&self, l3: &[u8]) -> Outcome {
        let before = self.hook.adopted.lock().unwrap().len();
        let o = run(&self.net, progs::NAT64, &frame(l3), self.net.ingress(l3));
        match &o {
            Outcome::Forwarded(got) => {
                self.engine.expire(mono());
                let ad = self.hook.adopted.lock().unwrap();
                assert_eq!(ad.len(), before + 1, "the created session was taken over");
                let c = ad[before];
                assert_eq!(c.port, tport(got));
                *self.forced.next.lock().unwrap() = Some(c.port);
                let want = core_forward(&self.twin, l3, c.at, ident_of(got)).unwrap_or_else(|e| panic!("twin: {e}"));
                assert_eq!(hex(got), hex(&want), "created in XDP and twin differ for {}", hex(l3));
                check_ip(got);
                let f = SessionFilter::default();
                assert_eq!(self.engine.sessions(&f, c.at), self.twin.sessions(&f, c.at));
                assert_eq!(self.engine.bib(), self.twin.bib());
            }
            Outcome::Passed => {
                let now = mono();
                let (mut a, mut b) = (Out::with_ident_seed(1), Out::with_ident_seed(1));
                let va = self.engine.translate(l3, now, &mut a);
                if let (Verdict::Emit, Some((PacketKind::Forward, p))) = (va, a.get(0)) {
                    if p[0] >> 4 == 4 {
                        *self.forced.next.lock().unwrap() = Some(tport(p));
                    }
                }
                let vb = self.twin.translate(l3, now, &mut b);
                assert_eq!(va, vb);
                let pa: Vec<_> = a.iter().map(|(k, p)| (k, hex(p))).collect();
                let pb: Vec<_> = b.iter().map(|(k, p)| (k, hex(p))).collect();
                assert_eq!(pa, pb, "engine and twin answer a passed SYN alike");
                *self.forced.next.lock().unwrap() = None;
            }
        }
        o
    }

    fn count(&self, what: &str) -> u64 {
        self.net.fp.counter_map().unwrap().get(what).map_or(0, |c| c.packets)
    }
}

#[test]
fn napt_sessions_created_in_xdp_with_block_ports() {
    lab::need_root!();
    let n = napt_setup("xdp-napt-make", 100_000);
    let syn = |sport: u16, dst: &str| pt_v6(X, dst).tcp(sport, 80, 0x02, b"\x02\x04\x05\xb4\x01\x01\x04\x02");
    let y2 = "2001:db8:64::c633:6408";
    // The host's first SYN: no block yet (passed); the engine grants one.
    assert_eq!(n.syn(&syn(40010, Y6)), Outcome::Passed);
    assert_eq!(n.count("nat64-no-block"), 1);
    let blocks = n.engine.blocks_of(&X.parse().unwrap());
    assert_eq!(blocks.len(), 1);
    let x10 = format!("[{X}]:40010").parse().unwrap();
    let t10 = n.hook.pt.bib(x10).unwrap().expect("the engine's BIB entry mirrored");
    // The next SYNs (new ports, another peer) are created in XDP.
    let mut ports = vec![t10.port()];
    for (sport, dst) in [(40011, Y6), (40012, y2), (40013, Y6)] {
        match n.syn(&syn(sport, dst)) {
            Outcome::Forwarded(p) => ports.push(tport(&p)),
            o => panic!("SYN {sport}: {o:?}"),
        }
    }
    assert_eq!(n.count("nat64-created"), 3);
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 4, "four mappings, four ports");
    assert!(ports.iter().all(|p| (NAPT_PORTS.0..=NAPT_PORTS.1).contains(p)), "block ports: {ports:?}");
    assert_eq!(blocks[0].2 + 3, n.engine.blocks_of(&X.parse().unwrap())[0].2, "taken in the shared bitmap");
    // Endpoint-independent mapping: X:40011 towards another peer passes
    // (its mapping exists) and the engine uses the same T:t.
    let x11 = format!("[{X}]:40011").parse().unwrap();
    let t11 = n.hook.pt.bib(x11).unwrap().expect("the program's BIB entry");
    match n.syn(&syn(40011, y2)) {
        Outcome::Passed => {}
        o => panic!("a second mapping of X:40011 was created: {o:?}"),
    }
    assert_eq!(n.count("nat64-bib"), 1);
    let f = SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() };
    let s11: Vec<_> = n.engine.sessions(&f, mono()).into_iter().filter(|s| s.ipv6_src == x11).collect();
    assert_eq!(s11.len(), 2);
    assert!(s11.iter().all(|s| s.ipv4_src == t11), "one mapping for X:40011: {s11:?}");
    // A retransmitted SYN passes (its session is half-open).
    assert_eq!(n.syn(&syn(40012, y2)), Outcome::Passed);
    // The SYN+ACK of a created session is carried; the rest as the twin.
    let sa = V4 { tos: 0x28, ..V4::new(6, Y, T) }.tcp(80, t11.port(), 0x12, b"");
    let got = match run(&n.net, progs::NAT64, &frame(&sa), n.net.ingress(&sa)) {
        Outcome::Forwarded(p) => p,
        o => panic!("SYN+ACK: {o:?}"),
    };
    let k4 = Session {
        l4: L4::Tcp,
        x: x11,
        y6: format!("[{Y6}]:80").parse().unwrap(),
        t: t11,
        y: format!("{Y}:80").parse().unwrap(),
        half_open: true,
    };
    let seen = n.net.fp.nat64_get(&k4.entries()[1].0).unwrap().unwrap().last_seen_ns;
    assert_eq!(hex(&got), hex(&core_forward(&n.twin, &sa, seen, 0).unwrap()), "SYN+ACK translation");
    // Both FINs carried, the engine stepped as the twin (V4 FIN RCV, then
    // V4 FIN + V6 FIN RCV with the transitory lifetime from the second).
    let fin4 = V4 { tos: 0x28, ..V4::new(6, Y, T) }.tcp(80, t11.port(), 0x11, b"");
    let fin6 = pt_v6(X, Y6).tcp(40011, 80, 0x11, b"");
    carried_fins(&n.net, &n.engine, &n.twin, &n.hook, &[fin4, fin6]);
    let s = n
        .engine
        .sessions(&f, mono())
        .into_iter()
        .find(|s| s.ipv6_src == x11 && s.ipv4_dst.port() == 80 && s.ipv4_dst.ip().to_string() == Y);
    assert_eq!(s.unwrap().state, Some(TcpState::V4FinV6FinRcv));
    assert_eq!(n.count("nat64-fin"), 2);
}

/// The translator drains the ring before every packet it handles, with
/// a check of the ring's positions that takes no lock when it is empty: a
/// session the program created is still adopted before the next packet
/// of it reaches the translator (here a retransmitted SYN, with no expiry
/// turn between), which then keeps the program's mapping and port.
#[test]
fn napt_created_session_adopted_before_its_next_packet() {
    lab::need_root!();
    let n = napt_setup("xdp-napt-next", 100_000);
    let syn = |sport: u16| pt_v6(X, Y6).tcp(sport, 80, 0x02, b"\x02\x04\x05\xb4\x01\x01\x04\x02");
    assert_eq!(n.syn(&syn(40020)), Outcome::Passed, "the first SYN: the engine grants the block");
    assert!(!n.hook.pt.pending(), "nothing created yet");
    assert_eq!(n.hook.pt.drain(|_| panic!("an empty ring hands nothing")), 0);
    let got = match run(&n.net, progs::NAT64, &frame(&syn(40021)), n.net.ingress(&syn(40021))) {
        Outcome::Forwarded(p) => p,
        o => panic!("SYN from a host with a block: {o:?}"),
    };
    assert!(n.hook.pt.pending(), "the created session waits in the ring");
    let before = n.hook.adopted.lock().unwrap().len();
    let mut out = Out::with_ident_seed(1);
    assert_eq!(n.engine.translate(&syn(40021), mono(), &mut out), Verdict::Emit);
    assert_eq!(n.hook.adopted.lock().unwrap().len(), before + 1, "adopted before the packet was handled");
    assert!(!n.hook.pt.pending(), "drained");
    match out.get(0) {
        Some((PacketKind::Forward, p)) => assert_eq!(tport(p), tport(&got), "the program's mapping, no second one"),
        o => panic!("the retransmitted SYN: {o:?}"),
    }
    assert_eq!(n.engine.port_blocks().conflicts, 0);
    let x = format!("[{X}]:40021").parse().unwrap();
    assert_eq!(n.hook.pt.bib(x).unwrap().map(|t| t.port()), Some(tport(&got)));
}

#[test]
fn napt_creation_refusals_pass_and_are_counted() {
    lab::need_root!();
    let n = napt_setup("xdp-napt-refuse", 100_000);
    let syn = |sport: u16| pt_v6(X, Y6).tcp(sport, 80, 0x02, b"");
    assert_eq!(n.syn(&syn(40020)), Outcome::Passed);
    // Not a plain SYN, a low port, to pool4 (hairpin), from pool6, forbidden peer.
    let cases: [(Vec<u8>, &str); 5] = [
        (pt_v6(X, Y6).tcp(40021, 80, 0x12, b""), "no-match"),
        (syn(800), "nat64-low-port"),
        (pt_v6(X, "2001:db8:64::c000:201").tcp(40022, 80, 0x02, b""), "natpt-hairpin"),
        (pt_v6("2001:db8:64::c633:6409", Y6).tcp(40023, 80, 0x02, b""), "natpt-hairpin"),
        (pt_v6(X, "2001:db8:64::7f00:1").tcp(40024, 80, 0x02, b""), "natpt-forbidden"),
    ];
    for (l3, why) in &cases {
        let before = n.count(why);
        assert_eq!(run(&n.net, progs::NAT64, &frame(l3), n.net.ingress(l3)), Outcome::Passed, "{why}");
        assert_eq!(n.count(why), before + 1, "{why}");
    }
    // Another host without blocks.
    let other = pt_v6("2001:db8:6::9", Y6).tcp(40025, 80, 0x02, b"");
    assert_eq!(run(&n.net, progs::NAT64, &frame(&other), n.net.ingress(&other)), Outcome::Passed);
    assert_eq!(n.count("nat64-no-block"), 2);
    // Block exhaustion: the block's 8 ports (one the engine's), then the
    // host's SYNs pass; the engine has no block or pool port either.
    let mut made = 0;
    for sport in 40030..40040 {
        if let Outcome::Forwarded(_) = n.syn(&syn(sport)) {
            made += 1;
        }
    }
    assert_eq!(made, 7);
    assert_eq!(n.count("nat64-block-full"), 3);
    assert_eq!(n.count("nat64-created"), 7);
    // Nothing was created by a refused SYN.
    assert_eq!(n.engine.stats().sessions["tcp"], 8);
}

#[test]
fn napt_creation_table_limit_and_ring_full() {
    lab::need_root!();
    let n = napt_setup("xdp-napt-limit", 3);
    assert_eq!(n.syn(&pt_v6(X, Y6).tcp(40040, 80, 0x02, b"")), Outcome::Passed);
    n.hook.pt.set_sessions(n.engine.sessions(&SessionFilter::default(), mono()).len() as u64).unwrap();
    for sport in [40041, 40042] {
        assert!(matches!(n.syn(&pt_v6(X, Y6).tcp(sport, 80, 0x02, b"")), Outcome::Forwarded(_)));
    }
    let l3 = pt_v6(X, Y6).tcp(40043, 80, 0x02, b"");
    assert_eq!(run(&n.net, progs::NAT64, &frame(&l3), n.net.ingress(&l3)), Outcome::Passed);
    assert_eq!(n.count("natpt-table-full"), 1);

    // Ring full (no drain): the refused SYN leaves nothing behind (its
    // port back in the block, no BIB entry); every created one is then
    // adopted. Blocks of 256 ports (the engine grants another each time
    // the program finds the host's full) so that the ring fills first.
    let mut net = Net::new("xdp-napt-ring");
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    let mut c: nat64::Config = toml::from_str(r#"pool6 = "2001:db8:64::/96""#).unwrap();
    c.pool4 = vec![nat64::Pool4Entry {
        prefix: PT_POOL4.parse().unwrap(),
        ports: (1024, 65535),
        protocols: Protocol::ALL.to_vec(),
    }];
    let engine = Nat64::new(c).unwrap();
    let hook = pt_hook(&net, 100_000, Some(256));
    engine.set_fast_hook(Some(hook.clone()));
    let count = |what: &str| net.fp.counter_map().unwrap().get(what).map_or(0, |c| c.packets);
    hook.hold.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut made, mut by_engine) = (0usize, 0usize);
    let mut sport = 2000u16;
    let refused = loop {
        let l3 = pt_v6(X, Y6).tcp(sport, 80, 0x02, b"");
        let full = count("natpt-ring-full");
        match run(&net, progs::NAT64, &frame(&l3), net.ingress(&l3)) {
            Outcome::Forwarded(_) => made += 1,
            Outcome::Passed if count("natpt-ring-full") > full => break sport,
            Outcome::Passed => {
                // No block, or the host's full: the engine's own SYN grants one.
                let mut out = Out::new();
                assert_eq!(engine.translate(&l3, mono(), &mut out), Verdict::Emit);
                by_engine += 1;
            }
        }
        sport += 1;
        assert!(sport < 4000, "the ring never filled");
    };
    assert!(made > 1000 && by_engine >= 2, "{made} {by_engine}");
    let xr = format!("[{X}]:{refused}").parse().unwrap();
    assert_eq!(hook.pt.bib(xr).unwrap(), None, "no mapping left for the refused SYN");
    let in_use = |e: &Nat64| e.blocks_of(&X.parse().unwrap()).iter().map(|b| b.2 as usize).sum::<usize>();
    assert_eq!(in_use(&engine), made + by_engine, "the refused SYN's port went back to its block");
    hook.hold.store(false, std::sync::atomic::Ordering::Relaxed);
    engine.expire(mono());
    assert_eq!(hook.adopted.lock().unwrap().len(), made, "every created session adopted");
    assert_eq!(engine.stats().sessions["tcp"], (made + by_engine) as u64);
}

#[test]
fn napt_creation_generated_packets() {
    lab::need_root!();
    // Generated IPv6 TCP segments of a host with a block (random flags,
    // Traffic Class, Hop Limit, payload, peer, fresh source ports): created
    // in XDP exactly for a plain SYN, byte for byte the twin's with the
    // port the program took; anything else passes and the engine answers
    // it as the twin does (the twin's port forced to the engine's).
    let n = napt_setup_with("xdp-napt-gen", 100_000, (1024, 1279), 256);
    assert_eq!(n.syn(&pt_v6(X, Y6).tcp(1024, 80, 0x02, b"")), Outcome::Passed);
    let port = std::cell::Cell::new(30000u16);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 120, ..ProptestConfig::default() });
    runner
        .run(&segments(), |(flags, tc, hop, data, dport, y)| {
            port.set(port.get() + 1);
            let l3 = segment(port.get(), dport, flags, tc, hop, &data, y);
            let o = n.syn(&l3);
            prop_assert_eq!(matches!(o, Outcome::Forwarded(_)), flags & 0x17 == 0x02, "{}", hex(&l3));
            Ok(())
        })
        .unwrap();
    let t = mono();
    assert_eq!(tcp_table(&n.engine, t), tcp_table(&n.twin, t), "every session as the twin has it");
    assert!(n.count("nat64-created") > 0);
}

/// Generated IPv6 TCP segments of host X: flags (a plain SYN half the
/// time), Traffic Class, Hop Limit, payload, peer port, peer (last byte).
fn segments() -> impl Strategy<Value = (u8, u8, u8, Vec<u8>, u16, u8)> {
    (
        prop_oneof![Just(0x02u8), any::<u8>()],
        any::<u8>(),
        2u8..=255,
        prop::collection::vec(any::<u8>(), 0..200),
        any::<u16>(),
        any::<u8>(),
    )
}

/// One of [`segments`] from X's port `sport`.
fn segment(sport: u16, dport: u16, flags: u8, tc: u8, hop: u8, data: &[u8], y: u8) -> Vec<u8> {
    let dst = format!("2001:db8:64::c633:64{:02x}", y.max(1));
    V6 { tc, hop, ..V6::new(6, X, &dst) }.tcp(sport, dport.max(1), flags, data)
}
