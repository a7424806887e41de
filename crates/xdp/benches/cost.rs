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
use support::{frame, Fwd, Net};
use xdp::action;
use xdp::nat64::{Session, L4};
use xdp::trgw::Leg;
use xdp::types::progs;
use xdp::FibLookup;

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

/// One measured case.
struct Row {
    name: &'static str,
    prog: &'static str,
    frame: Vec<u8>,
    ingress: u32,
    repeat: u32,
    want: &'static [u32],
}

impl Row {
    fn new(
        name: &'static str,
        prog: &'static str,
        frame: Vec<u8>,
        ingress: u32,
        repeat: u32,
        want: &'static [u32],
    ) -> Row {
        Row { name, prog, frame, ingress, repeat, want }
    }
}

/// Command line: `--runs N` (repeat every row, print min and median),
/// `--filter TEXT` (rows whose name contains it), `--variant TEXT` (the
/// forwarding variants whose title contains it), `--loop SECS` (run the
/// selected rows for that long and print nothing: for `perf record -a`).
struct Opts {
    runs: usize,
    filter: Option<String>,
    variant: Option<String>,
    loop_secs: Option<f64>,
}

impl Opts {
    fn parse() -> Opts {
        let mut o = Opts { runs: 5, filter: None, variant: None, loop_secs: None };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--runs" => o.runs = it.next().and_then(|v| v.parse::<usize>().ok()).expect("--runs N").max(1),
                "--filter" => o.filter = it.next(),
                "--variant" => o.variant = it.next(),
                "--loop" => o.loop_secs = it.next().and_then(|v| v.parse().ok()),
                _ => {}
            }
        }
        o
    }

    fn selects(&self, name: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| name.contains(f))
    }

    fn selects_variant(&self, title: &str) -> bool {
        self.variant.as_deref().is_none_or(|f| title.contains(f))
    }
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
    const FWD: &[u32] = &[action::TX, action::REDIRECT];
    let fwd = FWD;
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
        half_open: false,
    };
    let s2 = Session {
        l4: L4::Udp,
        x: y6.parse().unwrap(),
        y6: x.parse().unwrap(),
        t: y.parse().unwrap(),
        y: t.parse().unwrap(),
        half_open: false,
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

    let opts = Opts::parse();
    let rows: Vec<Row> = vec![
        Row::new("pass (ARP frame), xdp_siit", progs::SIIT, arp, net.if4, REPEAT, &[action::PASS]),
        Row::new("SIIT UDP 84 B, from 4->6, alternating", progs::SIIT, frame(&udp4), net.if4, REPEAT, fwd),
        Row::new("SIIT UDP 84 B, from 6->4, alternating", progs::SIIT, frame(&udp6), net.if6, REPEAT, fwd),
        Row::new("SIIT UDP 84 B, 4->6 only (1 run per call)", progs::SIIT, frame(&udp4), net.if4, 1, fwd),
        Row::new("SIIT UDP 84 B, 6->4 only (1 run per call)", progs::SIIT, frame(&udp6), net.if6, 1, fwd),
        Row::new("NAT64 established UDP 84 B, alternating", progs::NAT64, frame(&nat6), net.if6, REPEAT, fwd),
        Row::new("NAT64 established UDP, 6->4 only (1 run/call)", progs::NAT64, frame(&nat6), net.if6, 1, fwd),
        Row::new("TrGW G.711 RTP, 6->4 and 4->6 alternating", progs::TRGW, frame(&rtp6), net.if6, REPEAT, fwd),
        Row::new("TrGW G.711 RTP, 6->4 only (1 run/call)", progs::TRGW, frame(&rtp6), net.if6, 1, fwd),
        Row::new("xdp_gate, TrGW RTP, alternating", progs::GATE, frame(&rtp6), net.if6, REPEAT, fwd),
        Row::new("xdp_gate, NAT64 UDP 84 B, alternating", progs::GATE, frame(&nat6), net.if6, REPEAT, fwd),
        Row::new("xdp_gate, SIIT UDP 84 B, alternating", progs::GATE, frame(&udp4), net.if4, REPEAT, fwd),
    ];
    let rows: Vec<Row> = rows.into_iter().filter(|r| opts.selects(r.name)).collect();
    if let Some(secs) = opts.loop_secs {
        if let Some(v) = &opts.variant {
            let how = if v.contains("DIRECT") {
                Fwd::Fib(FibLookup::Main, 0)
            } else if v.contains("cache") {
                Fwd::Fib(FibLookup::Rules, 100)
            } else if v.contains("routes") {
                Fwd::Routes
            } else {
                Fwd::Fib(FibLookup::Rules, 0)
            };
            support::set_forwarding(&mut net, &how);
        }
        // For `perf record -a`: run the selected rows over and over.
        let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
        while std::time::Instant::now() < until {
            for r in &rows {
                cost(&net, r.prog, &r.frame, r.ingress, r.repeat, r.want);
            }
        }
        return;
    }
    println!(
        "XDP per-packet cost, BPF_PROG_TEST_RUN, {CALLS} calls x {REPEAT} runs (mean ns per run); {} run(s): min / median",
        opts.runs
    );
    println!("{:<48} {:>8} {:>8}", "case", "min", "median");
    // How the egress is found: the variants of docs/xdp.md ("Forwarding").
    let variants: &[(&str, Fwd)] = &[
        ("bpf_fib_lookup (policy rules, then the table)", Fwd::Fib(FibLookup::Rules, 0)),
        ("bpf_fib_lookup with BPF_FIB_LOOKUP_DIRECT (main table)", Fwd::Fib(FibLookup::Main, 0)),
        ("bpf_fib_lookup behind the FIB cache (fib_cache_ms = 100)", Fwd::Fib(FibLookup::Rules, 100)),
        ("mirrored routes and next hops (routes4/6 -> nexthops)", Fwd::Routes),
    ];
    for (title, how) in variants {
        if !opts.selects_variant(title) {
            continue;
        }
        println!("{title}:");
        support::set_forwarding(&mut net, how);
        for r in &rows {
            let mut v: Vec<f64> =
                (0..opts.runs).map(|_| cost(&net, r.prog, &r.frame, r.ingress, r.repeat, r.want)).collect();
            v.sort_by(f64::total_cmp);
            println!("  {:<46} {:>8.1} {:>8.1}", r.name, v[0], v[v.len() / 2]);
        }
    }
    println!("(rows with 1 run per call include the kernel's timer reads, ~2 clock reads per call)");
}
