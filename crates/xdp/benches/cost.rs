//! Per-packet cost of the XDP programs with BPF_PROG_TEST_RUN `repeat`
//! (issue #12 bar: SIIT ≤ 100 ns, NAT64 established ≤ 150 ns, TrGW ≤ 100
//! ns). Root only; builds the same namespace as the differential tests.
//!
//!     cargo bench -p xdp --bench cost
//!
//! How: in BPF_PROG_TEST_RUN's non-live mode the kernel runs the program
//! `repeat` times over the same buffer without restoring it, so a
//! translated packet is translated back on the next run (4→6, 6→4, ...,
//! a ping-pong through the same maps). Each run decrements the TTL, so one
//! call repeats 60 times starting from TTL 64 (every run translates) and
//! the figure is the kernel's mean time per run over many calls: the mean
//! cost of one translation, both directions alternating, FIB lookup and
//! rewrite included, the redirect itself not (it is not executed in this
//! mode). The pass row (an ARP frame) is the floor: entry, config lookup,
//! counter. Timing on a shared machine is noisy: run it on a quiet one.

#[path = "../../xlat/tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use common::*;
use support::{frame, Net};
use xdp::action;
use xdp::nat64::{Session, L4};
use xdp::trgw::Leg;
use xdp::types::progs;

const REPEAT: u32 = 60;
const CALLS: u32 = 5_000;

/// Mean ns per run of `prog` over `frame`, `CALLS` calls of `repeat` runs;
/// checks the first call's action is `want`.
fn cost(net: &Net, prog: &str, frame: &[u8], ingress: u32, repeat: u32, want: &[u32]) -> f64 {
    let first = net.fp.test_run(prog, frame, ingress, 1).unwrap_or_else(|e| panic!("{e}"));
    assert!(want.contains(&first.action), "{prog}: action {} (wanted {want:?})", first.action);
    let mut total = 0u64;
    for _ in 0..CALLS {
        let r = net.fp.test_run(prog, frame, ingress, repeat).unwrap_or_else(|e| panic!("{e}"));
        total += r.ns_per_run;
    }
    total as f64 / f64::from(CALLS)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // On a thread of its own: the namespace is removed when the bench ends,
    // with every process whose main thread is inside it.
    std::thread::spawn(bench).join().expect("bench thread");
}

fn bench() {
    let mut net = Net::new("xdp-cost");
    net.fp.set_siit(&config()).unwrap();
    let fwd = [action::TX, action::REDIRECT];
    let v4 = V4::new(17, "192.0.2.1", "198.51.100.5");
    // 84-byte frames on the wire: 14 + 66 (+ 4 FCS), i.e. 38 bytes of UDP data.
    let udp4 = v4.udp(1234, 5678, &[0u8; 38]);
    let v6 = V6::new(17, "2001:db8:6::5", "2001:db8:1c0:2:1::");
    let udp6 = v6.udp(5678, 1234, &[0u8; 18]);
    let arp = {
        let mut f = frame(&udp4);
        f[12] = 0x08;
        f[13] = 0x06;
        f
    };
    // NAT64: one established UDP session X:5000 <-> Y:53 through T:5000, and
    // a second entry pair that maps the translated packet straight back
    // (its IPv4 peer is T, its pool4 address Y), so the ping-pong keeps
    // hitting established entries: every run is a session lookup, the
    // RFC 7915 rewrite, the port rewrite and the last-seen refresh.
    net.fp.set_nat64(&xlat::siit::Config::default()).unwrap();
    let (x, y6, t, y) = ("[2001:db8:6::5]:5000", "[2001:db8:64::c633:6407]:53", "192.0.2.1:5000", "198.51.100.7:53");
    let s1 = Session {
        l4: L4::Udp,
        x: x.parse().unwrap(),
        y6: y6.parse().unwrap(),
        t: t.parse().unwrap(),
        y: y.parse().unwrap(),
    };
    let s2 = Session {
        l4: L4::Udp,
        x: y6.parse().unwrap(),
        y6: x.parse().unwrap(),
        t: y.parse().unwrap(),
        y: t.parse().unwrap(),
    };
    for (k, v) in s1.entries().into_iter().chain(s2.entries()) {
        net.fp.nat64_insert(&k, &v).unwrap();
    }
    let nat6 = V6::new(17, "2001:db8:6::5", "2001:db8:64::c633:6407").udp(5000, 53, &[0u8; 18]);

    // TrGW: a relay leg 6->4 and a leg that takes its output back 4->6
    // (local = the first leg's far end), so every run relays a G.711 RTP
    // packet (12 + 160 bytes) with its checksum verified and updated.
    net.fp.set_trgw(true).unwrap();
    let (l1, p1, l2, p2) = ("[2001:db8:6::1]:30000", "[2001:db8:6::99]:4000", "192.0.2.1:30002", "198.51.100.7:5004");
    let a = Leg {
        local: l1.parse().unwrap(),
        latched: p1.parse().unwrap(),
        out_local: l2.parse().unwrap(),
        out_peer: Some(p2.parse().unwrap()),
        stats_index: 0,
    };
    let b = Leg {
        local: p2.parse().unwrap(),
        latched: l2.parse().unwrap(),
        out_local: p1.parse().unwrap(),
        out_peer: Some(l1.parse().unwrap()),
        stats_index: 1,
    };
    for leg in [a, b] {
        let (k, v) = leg.entry().unwrap();
        net.fp.relay_insert(&k, &v).unwrap();
    }
    let rtp6 = V6::new(17, "2001:db8:6::99", "2001:db8:6::1").udp(4000, 30000, &[0xd5u8; 172]);

    println!("XDP per-packet cost, BPF_PROG_TEST_RUN, {CALLS} calls x {REPEAT} runs (mean ns per run)");
    println!("{:<44} {:>8}", "case", "ns/pkt");
    let rows = [
        ("pass (ARP frame), xdp_siit", cost(&net, progs::SIIT, &arp, net.if4, REPEAT, &[action::PASS])),
        ("SIIT UDP 84 B, from 4->6, alternating", cost(&net, progs::SIIT, &frame(&udp4), net.if4, REPEAT, &fwd)),
        ("SIIT UDP 84 B, from 6->4, alternating", cost(&net, progs::SIIT, &frame(&udp6), net.if6, REPEAT, &fwd)),
        ("SIIT UDP 84 B, 4->6 only (1 run per call)", cost(&net, progs::SIIT, &frame(&udp4), net.if4, 1, &fwd)),
        ("SIIT UDP 84 B, 6->4 only (1 run per call)", cost(&net, progs::SIIT, &frame(&udp6), net.if6, 1, &fwd)),
        ("NAT64 established UDP 84 B, alternating", cost(&net, progs::NAT64, &frame(&nat6), net.if6, REPEAT, &fwd)),
        ("NAT64 established UDP, 6->4 only (1 run/call)", cost(&net, progs::NAT64, &frame(&nat6), net.if6, 1, &fwd)),
        ("TrGW G.711 RTP, 6->4 and 4->6 alternating", cost(&net, progs::TRGW, &frame(&rtp6), net.if6, REPEAT, &fwd)),
        ("TrGW G.711 RTP, 6->4 only (1 run/call)", cost(&net, progs::TRGW, &frame(&rtp6), net.if6, 1, &fwd)),
        ("xdp_gate, TrGW RTP, alternating", cost(&net, progs::GATE, &frame(&rtp6), net.if6, REPEAT, &fwd)),
        ("xdp_gate, NAT64 UDP 84 B, alternating", cost(&net, progs::GATE, &frame(&nat6), net.if6, REPEAT, &fwd)),
        ("xdp_gate, SIIT UDP 84 B, alternating", cost(&net, progs::GATE, &frame(&udp4), net.if4, REPEAT, &fwd)),
    ];
    for (name, ns) in rows {
        println!("{name:<44} {ns:>8.1}");
    }
    net.fp.set_fib_cache(100).unwrap();
    println!("with the FIB cache (fib_cache_ms = 100):");
    let rows = [
        ("SIIT UDP 84 B, alternating", cost(&net, progs::SIIT, &frame(&udp4), net.if4, REPEAT, &fwd)),
        ("NAT64 established UDP 84 B, alternating", cost(&net, progs::NAT64, &frame(&nat6), net.if6, REPEAT, &fwd)),
        ("TrGW G.711 RTP, alternating", cost(&net, progs::TRGW, &frame(&rtp6), net.if6, REPEAT, &fwd)),
        ("xdp_gate, SIIT UDP 84 B, alternating", cost(&net, progs::GATE, &frame(&udp4), net.if4, REPEAT, &fwd)),
    ];
    for (name, ns) in rows {
        println!("{name:<44} {ns:>8.1}");
    }
    println!("(rows with 1 run per call include the kernel's timer reads, ~2 clock reads per call)");
}
