//! `v6gate run` with the softwire and transport-relay tables (issue #15):
//! the DS-Lite AFTR and the TRT run inside the daemon, next to its admin
//! API, as they do under `v6gate softwire` and `v6gate trt`.
//!
//! ```text
//!  h6 ns                          gw ns (v6gate run)                 h4 ns
//!  2001:db8:1::2/64      veth     [dslite] AFTR 2001:db8:ffff::1  veth 198.51.100.2
//!  B4 (v6gate softwire)  -------  [trt] 64:ff9b:1::/96           ------
//!  softwire 2001:db8:5::2         pool4 203.0.113.1
//! ```
//!
//! A B4 in h6 reaches h4 over the daemon's AFTR (UDP and TCP, NAT44 to the
//! pool address); h6 reaches h4 through the daemon's TRT (TCP); `/status`
//! and `/metrics` show both; a SIGHUP with the same tables is accepted and
//! one that changes `[trt]` is refused, with the relay still running.

#[path = "daemon_util/mod.rs"]
mod daemon_util;

use daemon_util::{bin, tcp_echo, udp_echo, Lab};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[dslite]
aftr-address = "2001:db8:ffff::1"
b4-prefixes = ["2001:db8:5::/48"]
pool4 = ["203.0.113.1/32"]
tun = "v6d-aftr"

[trt]
prefix = "64:ff9b:1::/96"
"#;

/// The B4, `v6gate softwire`, in h6.
struct B4(Child);

impl Drop for B4 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Reload with SIGHUP and wait until `/status` counts it as `key` (`ok` or `error`).
fn reload_counted(lab: &Lab, key: &str) -> serde_json::Value {
    let before = lab.status()["reloads"][key].as_u64().unwrap_or(0);
    lab.sighup();
    let t0 = Instant::now();
    loop {
        let s = lab.status();
        if s["reloads"][key].as_u64().unwrap_or(0) > before {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "reload not counted as {key}: {s}\n{}", lab.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dslite_aftr_and_trt_run_in_the_daemon() {
    lab::need_root!();
    let lab = Lab::start(CONFIG);
    // The B4's softwire address lives on its own device; the AFTR reaches
    // it via h6, which forwards what the B4 writes into its device.
    lab.h6.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    lab.gw.ip(&["-6", "route", "add", "2001:db8:5::/48", "via", "2001:db8:1::2"]).unwrap();
    let b4_cfg = lab.dir.path().join("b4.toml");
    std::fs::write(
        &b4_cfg,
        "[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8:5::2\"\naftr = \"2001:db8:ffff::1\"\n\
         host-address = \"192.0.0.2\"\nroutes = [\"198.51.100.0/24\"]\ntun = \"v6d-b4\"\n",
    )
    .unwrap();
    let b4_log = lab.dir.path().join("b4.log");
    let _b4 = B4(lab
        .h6
        .command(&bin())
        .args(["softwire", "--config", b4_cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&b4_log).unwrap())
        .spawn()
        .unwrap());
    let t0 = Instant::now();
    while lab.h6.ip(&["link", "show", "v6d-b4"]).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "B4 device: {}", std::fs::read_to_string(&b4_log).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }

    let s = lab.status();
    let functions: Vec<&str> = s["functions"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
    assert!(functions.contains(&"dslite") && functions.contains(&"trt"), "{s}");

    // Over the softwire: the server sees the AFTR's pool address.
    let (got, from) = udp_echo(&lab.h4, sa("0.0.0.0:7000"), &lab.h6, sa("198.51.100.2:7000"), b"over the softwire");
    assert_eq!(got, b"over the softwire");
    assert_eq!(from.ip().to_string(), "203.0.113.1");
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (got, from) = tcp_echo(&lab.h4, sa("0.0.0.0:7001"), &lab.h6, sa("198.51.100.2:7001"), &big);
    assert!(got == big, "TCP over the softwire corrupted");
    assert_eq!(from.ip().to_string(), "203.0.113.1");

    // Through the relay: IPv6 client, IPv4 server; the server sees the gateway.
    let (got, from) =
        tcp_echo(&lab.h4, sa("0.0.0.0:7002"), &lab.h6, sa("[64:ff9b:1::c633:6402]:7002"), b"through the relay");
    assert_eq!(got, b"through the relay");
    assert_eq!(from.ip().to_string(), "198.51.100.1");

    // The softwire threads publish their status a few times a second.
    let t0 = Instant::now();
    let s = loop {
        let s = lab.status();
        if s["softwires"]["dslite"]["mappings"].as_u64().unwrap_or(0) >= 2 {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "AFTR mappings never shown: {s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(s["softwires"]["dslite"]["counters"]["decapsulated"].as_u64().unwrap_or(0) >= 2, "{s}");
    assert_eq!(s["trt"]["tcp_relayed"], 1, "{s}");
    assert!(lab.metric("v6gate_softwire_events_total{function=\"dslite\",event=\"decapsulated\"}") >= 2);
    assert_eq!(lab.metric("v6gate_softwire_up{function=\"dslite\"}"), 1);
    assert_eq!(lab.metric("v6gate_trt_events_total{event=\"tcp-relayed\"}"), 1);

    // The same tables reload; a changed [trt] is refused and the relay keeps running.
    reload_counted(&lab, "ok");
    lab.write_config(&CONFIG.replace("64:ff9b:1::/96", "64:ff9b:2::/96"));
    let s = reload_counted(&lab, "error");
    let why = s["reloads"]["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("[trt]") && why.contains("restart"), "{s}");
    let (got, _) = tcp_echo(&lab.h4, sa("0.0.0.0:7003"), &lab.h6, sa("[64:ff9b:1::c633:6402]:7003"), b"still relayed");
    assert_eq!(got, b"still relayed");
}
