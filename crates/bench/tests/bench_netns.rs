//! Network-namespace tests of the benches: tiny runs against kernel
//! forwarding (no peer needed) that check the testers work end to end,
//! the reports are written in their shape, and nothing is left behind.
//! They check that the tester works, not how fast anything is.
//!
//! Each test uses its own namespace prefix and removes its namespaces,
//! also when it fails (`PrefixGuard`).

use lab::netns::{self, am_root, unique_name, PrefixGuard};

#[test]
fn bench_smoke_against_kernel_forwarding() {
    xlat_smoke("af-packet");
}

/// The XDP tester end to end: generator and receiver in the kernel, the
/// DUT's ports prepared (GRO/NAPI), the ceiling row first.
#[test]
fn bench_smoke_xdp_tester_against_kernel_forwarding() {
    xlat_smoke("xdp");
}

fn xlat_smoke(tester: &str) {
    use clap::Parser;
    assert!(am_root(), "network-namespace tests need root (CI runs as root)");
    #[derive(Parser)]
    struct W {
        #[command(flatten)]
        a: bench::xlat::Args,
    }
    let prefix = unique_name("v6lb");
    let _guard = PrefixGuard(prefix.clone());
    let out = std::env::temp_dir().join(format!("{prefix}-out"));
    let out_s = out.to_string_lossy().into_owned();
    // Low rates and a generous lateness limit: this checks that the tester
    // works end to end, not how fast anything is.
    let a = W::parse_from([
        "x",
        "--tester",
        tester,
        "--dut",
        "kernel",
        "--dir",
        "6to4",
        "--sizes",
        "84",
        "--flows",
        "16",
        "--max-rate",
        "2000",
        "--trial-ms",
        "300",
        "--drain-ms",
        "300",
        "--late-ms",
        "2000",
        "--max-trials",
        "4",
        "--overload",
        "150",
        "--loads",
        "50",
        "--prefix",
        &prefix,
        "--out",
        &out_s,
    ])
    .a;
    let r = bench::xlat::run(&a).unwrap();
    // The tester's own ceiling is always measured, first.
    let names: Vec<_> = r.duts.iter().map(|d| d.dut).collect();
    assert_eq!(names, ["tester", "kernel"]);
    for d in &r.duts {
        assert_eq!(d.status, "ok", "{}", d.dut);
        let p = &d.points[0];
        assert!(p.throughput_fps > 0.0, "{}: a zero-loss rate was found: {:?}", d.dut, p.search);
        let l = p.latency.expect("latency at the throughput rate");
        assert!(l.samples > 0);
        assert!(l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.p999_ns && l.p999_ns <= l.max_ns);
        assert_eq!(l.pdv_ns, l.p999_ns - l.min_ns);
    }
    assert_eq!(r.duts[1].points[0].sent_frame_size, 64, "kernel forwarding sends IPv4 frames 20 bytes shorter");
    for f in ["results.json", "results.md", "throughput-6to4.svg", "latency-6to4.svg"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["duts"][1]["dut"], "kernel");
    assert!(!netns::exists(&format!("{prefix}-dut")), "bench namespaces removed");
    let _ = std::fs::remove_dir_all(&out);
}

/// A tiny `bench trgw` run: the ceiling only (kernel forwarding between
/// the UA namespaces; the relay row is skipped with a note, as when
/// rtpengine is not installed), `calls` calls of 20 packets, `extra`
/// options. Returns the report and the output directory.
fn trgw_run(calls: &str, extra: &[&str]) -> (bench::trgw::Report, std::path::PathBuf) {
    trgw_run_searching(calls, extra, false)
}

/// [`trgw_run`], with the zero-loss search when `search`.
fn trgw_run_searching(calls: &str, extra: &[&str], search: bool) -> (bench::trgw::Report, std::path::PathBuf) {
    use clap::Parser;
    assert!(am_root(), "network-namespace tests need root (CI runs as root)");
    let out = std::env::temp_dir().join(unique_name("v6gate-bt-test-out"));
    let out_s = out.to_string_lossy().into_owned();
    let mut args = vec![
        "x",
        "--relays",
        "rtpengine",
        "--rtpengine-bin",
        "/nonexistent/rtpengine",
        "--calls",
        calls,
        "--packets",
        "20",
        "--sockets",
        "2",
        "--budget-ms",
        "2000",
        "--tester-cpus",
        "",
        "--out",
        &out_s,
    ];
    if !search {
        args.push("--no-search");
    }
    args.extend_from_slice(extra);
    let r = bench::trgw::run(bench::trgw::Args::parse_from(args)).unwrap();
    assert!(r.relays[0].skipped.as_deref().is_some_and(|s| s.contains("not installed")), "{:?}", r.relays[0]);
    (r, out)
}

/// The report names the ceiling's rows; the run's namespaces are gone;
/// the output directory is removed.
fn trgw_check_and_clean(r: &bench::trgw::Report, out: &std::path::Path, calls: u32) {
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains(&format!("| kernel forwarding (tester ceiling) | curve | {calls} |")), "{md}");
    trgw_clean(r, out);
}

/// The run's namespaces are gone; the output directory is removed.
fn trgw_clean(r: &bench::trgw::Report, out: &std::path::Path) {
    let left: Vec<String> = std::fs::read_dir(netns::NETNS_DIR)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let mine = format!("{}-", r.namespace_prefix);
    assert!(!left.iter().any(|n| n.starts_with(&mine)), "bench namespaces removed: {left:?}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn trgw_smoke_against_kernel_forwarding() {
    let (r, out) = trgw_run("5", &["--directions", "v6v4,both"]);
    let c = r.ceiling.as_ref().expect("the tester ceiling ran");
    assert_eq!(c.directions.len(), 2);
    for d in &c.directions {
        assert!(d.error.is_none(), "{:?}", d.error);
        let t = &d.points[0];
        let streams = if d.direction == bench::trgw::Direction::Both { 10 } else { 5 };
        assert_eq!((t.calls, t.outcome.streams, t.outcome.sent), (5, streams, 20 * streams as u64));
        assert_eq!(t.outcome.lost(), 0, "kernel forwarding at 250 packets/s loses nothing: {:?}", t.outcome);
        let l = t.outcome.latency;
        assert_eq!(l.samples, t.outcome.on_time);
        assert!(l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns, "{l:?}");
    }
    for f in ["results.json", "results.md", "fig8-loss-v6v4.svg", "fig9-latency-both.svg"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    trgw_check_and_clean(&r, &out, 5);
}

/// `bench trgw --tester xdp` end to end against kernel forwarding (the
/// tester's ceiling row): the UA sockets' warm-up, RTP frames from the
/// XDP generator per stream, the XDP receiver's counts, samples and loss
/// per stream; `both` (two generators at once) is a clean error row.
#[test]
fn trgw_smoke_xdp_tester_against_kernel_forwarding() {
    let (r, out) = trgw_run("7", &["--tester", "xdp", "--directions", "v6v4,both,v4v6"]);
    assert_eq!(r.tester, bench::trgw::TesterKind::Xdp);
    let c = r.ceiling.as_ref().expect("the tester ceiling ran");
    assert_eq!(c.directions.len(), 3);
    for d in &c.directions {
        if d.direction == bench::trgw::Direction::Both {
            assert!(d.error.as_deref().is_some_and(|e| e.contains("one direction per trial")), "{:?}", d.error);
            continue;
        }
        assert!(d.error.is_none(), "{:?}", d.error);
        let t = &d.points[0];
        let o = &t.outcome;
        assert_eq!((t.calls, o.streams), (7, 7));
        // A generator the loaded machine holds up sends on for up to a
        // budget (2 s here): every frame goes out.
        assert_eq!((o.sent, t.unsent), (7 * 20, 0), "{o:?}");
        assert_eq!((o.lost(), o.duplicates, o.foreign), (0, 0, 0), "kernel forwarding at 350 packets/s: {o:?}");
        let l = t.stream_loss.as_ref().expect("loss per stream");
        assert_eq!((l.flows, l.with_loss, l.worst_flow), (7, 0, None), "{l:?}");
        assert_eq!(o.latency.samples, o.on_time, "every frame sampled at this size");
        assert!(o.latency.min_ns <= o.latency.p50_ns && o.latency.p99_ns <= o.latency.max_ns, "{:?}", o.latency);
    }
    trgw_check_and_clean(&r, &out, 7);
}

/// `bench xlat --quick` as a newcomer runs it, cut to one DUT, direction
/// and size: the tester's own row offers `--max-rate` (2 M/s, far above
/// what an `AF_PACKET` tester sends on a small machine) in a calibration
/// trial and searches below what it achieved, so every row gets a nonzero
/// figure, each flagged as the tester's or the DUT's; the options given
/// override `--quick`'s. Nothing here is timed.
#[test]
fn bench_quick_starts_at_the_tester_s_ceiling() {
    assert!(am_root(), "network-namespace tests need root (CI runs as root)");
    let prefix = unique_name("v6lq");
    let _guard = PrefixGuard(prefix.clone());
    let out = std::env::temp_dir().join(format!("{prefix}-out"));
    let out_s = out.to_string_lossy().into_owned();
    let a: bench::xlat::Args = bench::parse_args(&[
        "x",
        "--quick",
        "--dut",
        "kernel",
        "--dir",
        "6to4",
        "--sizes",
        "84",
        "--max-trials",
        "6",
        "--prefix",
        &prefix,
        "--out",
        &out_s,
    ]);
    assert_eq!((a.max_trials, a.trial_ms, a.max_rate), (6, 300, 2_000_000.0), "--max-trials given, --quick's others");
    let r = bench::xlat::run(&a).unwrap();
    for d in &r.duts {
        assert_eq!(d.status, "ok", "{}", d.dut);
        let p = &d.points[0];
        assert!(p.throughput_fps > 0.0, "{}: a nonzero figure: {:?}", d.dut, p.search);
        assert!(p.search.len() <= 6, "{}: the trial budget holds: {}", d.dut, p.search.len());
        assert!(p.ceiling_fps > 0.0 && p.throughput_fps <= p.ceiling_fps, "{}: {p:?}", d.dut);
        assert_eq!(p.search[0].rate_fps, p.ceiling_fps, "{}: the first trial at the ceiling", d.dut);
        for t in &p.search {
            assert!(!(t.passed && t.tester_bound.is_some()), "{}: a tester-bound trial never passes: {t:?}", d.dut);
        }
        // The figure is flagged: the tester's when the search ended below
        // a rate it could not offer.
        let reach_hit = p.search.iter().any(|t| t.tester_bound.is_some() && t.rate_fps > p.throughput_fps);
        let failed = p.search.iter().any(|t| !t.passed && t.tester_bound.is_none() && t.rate_fps > p.throughput_fps);
        if reach_hit && !failed {
            assert!(p.tester_bound, "{}: {:?}", d.dut, p.search);
        }
    }
    // The tester can never send 2 M frames/s here: its ceiling is what it
    // achieved, under --max-rate, and the kernel row starts at its figure.
    let t = &r.duts[0].points[0];
    assert!(t.ceiling_fps < 2_000_000.0 && !t.capped, "{t:?}");
    assert_eq!(r.duts[1].points[0].ceiling_fps, t.throughput_fps);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| bound |"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(json["duts"][0]["points"][0]["tester_bound"].is_boolean());
    assert!(json["duts"][0]["points"][0]["search"][0].get("tester_bound").is_some());
    let _ = std::fs::remove_dir_all(&out);
}

/// `bench trgw`'s search with the socket tester: the kernel row first
/// offers `--max-calls` (20,000 calls, a million packets/s, beyond this
/// tester) in a calibration trial, starts its search at the calls the
/// tester achieved and never passes a trial in which the tester fell
/// behind; its figure is nonzero and flagged.
#[test]
fn trgw_search_starts_at_the_tester_s_ceiling() {
    let (r, out) = trgw_run_searching(
        "5",
        &["--directions", "v6v4", "--max-calls", "20000", "--search-packets", "10", "--confirm", "0"],
        true,
    );
    let d = &r.ceiling.as_ref().expect("the tester ceiling ran").directions[0];
    assert!(d.error.is_none(), "{:?}", d.error);
    let c = d.calibration.as_ref().expect("the kernel row calibrates");
    assert!(c.tester_bound && c.ceiling_calls > 0 && c.ceiling_calls < 20_000, "{c:?}");
    let s = d.search.as_ref().expect("searched");
    assert_eq!(s.started_at, c.ceiling_calls, "RFC 2544: the first trial at the tester's ceiling");
    assert!(s.max_zero_loss > 0 && s.max_zero_loss <= c.ceiling_calls, "{s:?}");
    assert!(s.trials.iter().all(|t| !(t.passed && t.tester_bound.is_some())), "{:?}", s.trials);
    if s.trials.iter().any(|t| t.tester_bound.is_some()) && s.first_failure.is_none() {
        assert!(s.tester_bound, "{s:?}");
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("- Tester ceiling, IPv6->IPv4: "), "{md}");
    assert!(md.contains(&format!("| kernel forwarding (tester ceiling) | search | {} |", s.started_at)), "{md}");
    trgw_clean(&r, &out);
}
