//! `v6gate doctor --json` as root, checked against what this test can
//! find out by itself: every section and feature present, the kernel
//! features this project's machines have (network namespaces, TUN, native
//! and generic XDP on veth, BPF_PROG_TEST_RUN, AF_XDP, sk_lookup, sockmap),
//! live frames answered as `xdp::tester::live_frames()` answers here, the
//! kernel release, CPUs and descriptor limits of this process, the peers
//! found where PATH has them, and no namespace of the probe left behind.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The features, in the order the report lists them.
const FEATURES: [&str; 13] = [
    "netns",
    "tun",
    "xdp-native",
    "xdp-generic",
    "bpf-test-run",
    "live-frames",
    "af-xdp",
    "sk-lookup",
    "sockmap",
    "raw-ip41",
    "raw-ip6-4",
    "pm-qos",
    "io-uring",
];

/// The soft and hard "Max open files" of /proc/self/limits.
fn nofile() -> (u64, u64) {
    let t = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = t.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    (n[0], n[1])
}

#[test]
fn doctor_json_agrees_with_what_this_machine_does() {
    lab::need_root!();
    let child = Command::new(env!("CARGO_BIN_EXE_v6gate"))
        .args(["doctor", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(r["root"], true);
    assert_eq!(r["kernel"], std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim());
    assert_eq!(r["cpus"], std::thread::available_parallelism().unwrap().get());
    let ids: Vec<&str> = r["features"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, FEATURES);
    let state = |id: &str| {
        let f = r["features"].as_array().unwrap().iter().find(|f| f["id"] == id).unwrap();
        for k in ["name", "detail", "without"] {
            assert!(f[k].as_str().is_some_and(|s| !s.is_empty()), "{id}: {k} in {f}");
        }
        f["state"].as_str().unwrap().to_owned()
    };
    // What every machine this project runs on offers (kernel 6.x, root).
    for id in ["netns", "tun", "xdp-native", "xdp-generic", "bpf-test-run", "af-xdp", "sk-lookup", "sockmap"] {
        assert_eq!(state(id), "yes", "{id}: {r}");
    }
    for id in FEATURES {
        assert!(["yes", "no", "unknown"].contains(&state(id).as_str()), "{id}");
    }
    // Live frames: the report's answer is the kernel's answer to this process.
    let live = xdp::tester::live_frames().unwrap_or_else(|e| panic!("{e}"));
    let f = r["features"].as_array().unwrap().iter().find(|f| f["id"] == "live-frames").unwrap();
    match &live {
        xdp::tester::LiveFrames::Granted => assert_eq!(f["state"], "yes", "{f}"),
        refused => {
            assert_eq!(f["state"], "no", "{f}");
            assert_eq!(f["detail"], refused.describe());
        }
    }
    // The summary says the same in one line.
    let summary = r["summary"].as_str().unwrap();
    assert!(!summary.contains('\n'));
    assert!(summary.starts_with(&format!("kernel {}, ", r["kernel"].as_str().unwrap())), "{summary}");
    let lacks = summary.split("; lacks: ").nth(1).unwrap_or("");
    assert_eq!(lacks.contains("live-frames"), !live.granted(), "{summary}");

    // The limits are this process's (the child inherited them).
    let (soft, hard) = nofile();
    assert_eq!((r["nofile"]["soft"].as_u64(), r["nofile"]["hard"].as_u64()), (Some(soft), Some(hard)));
    assert!(r["nofile"]["can_raise_hard"].is_boolean());
    assert!(r["cpuidle"].get("driver").is_some() && r["cpuidle"].get("pm_qos_limit_us").is_some());

    // Each peer is found exactly where PATH has it.
    let peers = r["peers"].as_array().unwrap();
    let programs: Vec<&str> = peers.iter().map(|p| p["program"].as_str().unwrap()).collect();
    assert_eq!(programs, ["tayga", "rtpengine", "kamailio", "sipp", "miredo", "miredo-server", "socat", "nft"]);
    for p in peers {
        let found = lab::testenv::find_program(Path::new(p["program"].as_str().unwrap()));
        assert_eq!(p["path"].as_str(), found.as_ref().and_then(|f| f.to_str()), "{p}");
        assert_eq!(p["version"].is_string(), found.is_some(), "a found peer has a version: {p}");
    }

    // The probe's namespace is gone.
    let left: Vec<String> = std::fs::read_dir(lab::netns::NETNS_DIR)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let ours = format!("v6doc-{pid}-");
    assert!(!left.iter().any(|n| n.starts_with(&ours)), "{left:?}");
}

#[test]
fn doctor_text_names_what_a_missing_piece_disables() {
    lab::need_root!();
    let out = Command::new(env!("CARGO_BIN_EXE_v6gate")).arg("doctor").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("v6gate doctor: kernel "), "{text}");
    for line in [
        "native XDP on veth",
        "BPF_PROG_RUN live frames",
        "descriptors (RLIMIT_NOFILE): soft ",
        "cpuidle: driver ",
        "peers:",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    // Every feature that is not there says what that disables, on the next line.
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("  ") && (l.contains("  NO  ") || l.contains("  unknown  ")) {
            assert!(lines.get(i + 1).is_some_and(|n| n.trim_start().starts_with("without it: ")), "{l}\n{text}");
        }
    }
}
