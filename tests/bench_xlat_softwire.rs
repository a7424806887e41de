//! `v6gate bench xlat` with the softwire DUTs (issue #15's last bar), in
//! network namespaces: a tiny run of `v6gate-lw4o6` and `v6gate-dslite`
//! both ways at the smallest and the largest frame size,
//! through the `v6gate` binary cargo built, with each tester (`af-packet`;
//! `xdp`, whose generator and receiver take 4in6 frames in the kernel — the
//! AF_XDP generator where the kernel refuses live frames — also with
//! `v6gate-xdp-lw4o6`, the lwAFTR's XDP fast path). It checks that 4in6 frames go
//! through the lwAFTR and the AFTR both ways (a zero-loss rate found, the
//! frames 20 bytes longer than the IPv6 label), that DS-Lite's 4to6 runs
//! on the mappings of its warm-up, and that the report carries the bar's
//! section (not judged: no `v6gate-siit` in this run; the verdicts are
//! `xlat::report`'s unit tests); not how fast anything is (low rates, a
//! generous lateness and drain, and a search that goes down to 1/16 of
//! the rate, as a loaded machine can stall the DUT for a while).

use clap::Parser;
use lab::netns::{self, unique_name, PrefixGuard};

#[derive(Parser)]
struct W {
    #[command(flatten)]
    a: bench::xlat::Args,
}

#[test]
fn softwire_duts_forward_4in6_both_ways() {
    lab::need_root!();
    softwire_run("af-packet", &["v6gate-lw4o6", "v6gate-dslite"]);
}

/// With `--tester xdp`: live frames where the kernel grants them, the
/// AF_XDP generator where it refuses them (the report names it and why).
#[test]
fn softwire_duts_forward_4in6_both_ways_xdp_tester() {
    lab::need_root!();
    let r = softwire_run("xdp", &["v6gate-lw4o6", "v6gate-xdp-lw4o6", "v6gate-dslite"]);
    let want = match xdp::tester::live_frames().expect("the live frames probe") {
        xdp::tester::LiveFrames::Granted => "xdp (BPF_PROG_RUN live frames".to_string(),
        refused => format!("afxdp (live frames {}; AF_XDP copy mode", refused.describe()),
    };
    assert!(r.generator.starts_with(&want), "{}", r.generator);
    // The fast path carried the XDP lwAFTR's frames (its counters, one
    // note per direction, beside any TESTER-BOUND note).
    let x = &r.duts[2];
    let counters: Vec<_> = x.notes.iter().filter(|n| n.contains("softwire XDP counters")).collect();
    assert_eq!(counters.len(), 2, "{:?}", x.notes);
    assert!(counters.iter().all(|n| n.contains("\"decap\"") || n.contains("\"encap\"")), "{:?}", x.notes);
}

fn softwire_run(tester: &str, duts: &[&str]) -> bench::xlat::Report {
    let prefix = unique_name("v6sw");
    let _guard = PrefixGuard(prefix.clone());
    let out = std::env::temp_dir().join(format!("{prefix}-out"));
    let out_s = out.to_string_lossy().into_owned();
    let a = W::parse_from([
        "x",
        "--v6gate-bin",
        env!("CARGO_BIN_EXE_v6gate"),
        "--tester",
        tester,
        "--dut",
        &duts.join(","),
        "--sizes",
        "84,1518",
        "--flows",
        "16",
        "--max-rate",
        "1000",
        "--trial-ms",
        "300",
        "--drain-ms",
        "1000",
        "--late-ms",
        "2000",
        "--max-trials",
        "5",
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
    let names: Vec<_> = r.duts.iter().map(|d| d.dut).collect();
    assert_eq!(names, [&["tester"][..], duts].concat());
    for d in &r.duts {
        assert_eq!(d.status, "ok", "{}", d.dut);
        assert_eq!(d.points.len(), 4, "{}: two directions, two sizes", d.dut);
        for p in &d.points {
            assert!(p.throughput_fps > 0.0, "{} {:?} {}: a zero-loss rate: {:?}", d.dut, p.dir, p.frame_size, p.search);
        }
    }
    for d in &r.duts[1..] {
        let sent: Vec<(&str, usize, usize)> =
            d.points.iter().map(|p| (p.dir.name(), p.frame_size, p.sent_frame_size)).collect();
        assert_eq!(
            sent,
            [("6to4", 84, 104), ("6to4", 1518, 1538), ("4to6", 84, 64), ("4to6", 1518, 1498)],
            "{}: 4in6 frames 20 bytes longer, IPv4 frames 20 bytes shorter",
            d.dut
        );
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("## Softwires against userspace SIIT (issue #15 bar)"), "{md}");
    for dut in duts {
        assert!(md.contains(&format!("- {dut}: not judged: no direction and frame size")), "{dut}: {md}");
    }
    assert!(!netns::exists(&format!("{prefix}-dut")), "bench namespaces removed");
    let _ = std::fs::remove_dir_all(&out);
    r
}
