//! `v6gate bench transition --quick` in network namespaces, through the
//! `v6gate` binary cargo built: the native-IPv4 row, NAT64 and the
//! lwAFTR's XDP fast path (`lw4o6-xdp`), each measured beside the run's
//! native-IPv4 baseline testbed. It checks the method, not how fast
//! anything is: every row measured, sessions recorded on the row's testbed
//! and on its interleaved baseline, "added over IPv4" the difference of
//! the two medians (session, connect() and UDP round trip), the Markdown's
//! columns and figures, nothing of the run left behind and another run's
//! namespaces left alone.

use clap::Parser;
use lab::netns;

#[derive(Parser)]
struct W {
    #[command(flatten)]
    a: bench::transition::Args,
}

/// A signed ns difference as the Markdown writes it.
fn signed_us(ns: i64) -> String {
    format!("{:+.1}", ns as f64 / 1e3)
}

#[test]
fn quick_run_pairs_every_row_with_its_own_native_baseline() {
    lab::need_root!();
    let prefix = bench::transition::run_prefix(std::process::id());
    let out = std::env::temp_dir().join(format!("{prefix}out"));
    let out_s = out.to_string_lossy().into_owned();
    // Another run's namespace (as a concurrent run names them): this run
    // leaves it alone.
    let other = netns::Netns::create(&format!("{}c", bench::transition::run_prefix(u32::MAX))).unwrap();
    let mechs = ["ipv4", "nat64", "lw4o6-xdp", "nat64-xdp"];
    let a = W::parse_from([
        "x",
        "--v6gate",
        env!("CARGO_BIN_EXE_v6gate"),
        "--quick",
        "--mech",
        &mechs.join(","),
        "--session-blocks",
        "10",
        "--out",
        &out_s,
    ])
    .a;
    let r = bench::transition::run(&a).unwrap();
    assert_eq!((r.sessions, r.pings, r.session_blocks), (100, 100, 10));
    assert_eq!(r.ns_prefix, prefix);
    let names: Vec<_> = r.results.iter().map(|m| m.mech.as_str()).collect();
    assert_eq!(names, mechs);
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    for (i, m) in r.results.iter().enumerate() {
        assert_eq!(m.skipped, None, "{}", m.mech);
        assert!(m.throughput_mbps > 0.0, "{}", m.mech);
        let b = m.baseline.as_ref().unwrap_or_else(|| panic!("{}: no baseline", m.mech));
        // Every session is on one side or the other, as many on each.
        assert_eq!(m.session.samples + m.session_failures, 100, "{}", m.mech);
        assert_eq!(b.session.samples + b.session_failures, 100, "{}", m.mech);
        assert!(m.session.samples >= 90 && b.session.samples >= 90, "{}: {m:?}", m.mech);
        assert_eq!(m.rtt.samples + m.ping_losses, 100, "{}", m.mech);
        assert_eq!(b.rtt.samples + b.ping_losses, 100, "{}", m.mech);
        assert!(m.rtt.samples >= 90 && b.rtt.samples >= 90, "{}: {m:?}", m.mech);
        assert!(b.session.p50_ns > 0 && b.connect.p50_ns > 0 && b.rtt.p50_ns > 0, "{}: {b:?}", m.mech);
        let session_added = m.session.p50_ns as i64 - b.session.p50_ns as i64;
        assert_eq!(m.session_added_ns, Some(session_added), "{}", m.mech);
        assert_eq!(m.connect_added_ns, Some(m.connect.p50_ns as i64 - b.connect.p50_ns as i64), "{}", m.mech);
        assert_eq!(m.rtt_added_ns, Some(m.rtt.p50_ns as i64 - b.rtt.p50_ns as i64), "{}", m.mech);
        // One median per block pair on each side, as the schedule ran them.
        assert_eq!(m.session_block_p50_ns.len(), 10, "{}", m.mech);
        assert!(
            m.session_block_p50_ns.iter().all(|p| p[0] > 0 && p[1] > 0),
            "{}: {:?}",
            m.mech,
            m.session_block_p50_ns
        );
        assert_eq!(m.rtt_block_p50_ns.len(), 10, "{}", m.mech);
        // The JSON carries the same figures.
        let j = &json["results"][i];
        assert_eq!(j["mech"], m.mech.as_str());
        assert_eq!(j["session_added_ns"], session_added);
        assert_eq!(j["baseline"]["session"]["p50_ns"], b.session.p50_ns);
        // Table 1's row: the median, the baseline's, their difference.
        let row = format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} | {} |",
            m.mech,
            m.session.min_ns as f64 / 1e6,
            m.session.max_ns as f64 / 1e6,
            m.session.mean_ns as f64 / 1e6,
            m.session.p50_ns as f64 / 1e3,
            b.session.p50_ns as f64 / 1e3,
            signed_us(session_added)
        );
        assert!(md.contains(&row), "{row} not in\n{md}");
    }
    assert!(
        md.contains("| median (µs) | native median (µs) | added over IPv4 (µs) | − ipv4 row (µs) | connect() median (µs) | native connect() (µs) | connect() added (µs) |"),
        "{md}"
    );
    assert!(md.contains("| RTT median (µs) | native RTT (µs) | RTT added (µs) |"), "{md}");
    for m in &r.results[1..] {
        let added = m.session_added_ns.unwrap();
        let bar = format!(
            "- {}: session initiation adds {:.1} µs (median) over native IPv4 measured interleaved with it (bar: ≤ 50 µs): **{}**",
            m.mech,
            added as f64 / 1e3,
            if added <= 50_000 { "met" } else { "NOT met" }
        );
        assert!(md.contains(&bar), "{bar} not in\n{md}");
    }
    // The lwAFTR's fast path carried the lw4o6-xdp row.
    assert!(r.results[2].xdp_counters.is_some(), "{:?}", r.results[2]);
    // The gateway's fast path carried the nat64-xdp row: each session's
    // SYN+ACK (half-open at the SYN), read back through GET /xdp.
    let x = r.results[3].xdp_counters.as_ref().unwrap_or_else(|| panic!("{:?}", r.results[3]));
    assert!(x["nat64-syn-ack"].as_u64().unwrap_or(0) >= 90, "{x}");
    // Nothing of the run is left: no namespace with its prefix.
    let left: Vec<_> = std::fs::read_dir(netns::NETNS_DIR)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_else(|_| Vec::new());
    assert!(left.iter().all(|n| !n.starts_with(&prefix)), "left behind: {left:?}");
    assert!(netns::exists(other.name()), "another run's namespace removed");
    let _ = std::fs::remove_dir_all(&out);
}
