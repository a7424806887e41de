//! `v6gate run` with [nat64] (and [siit] beside it), in network
//! namespaces: IPv6 host — gateway running the daemon — IPv4 host.
//! pool6 64:ff9b:2::/96, pool4 203.0.113.1; SIIT keeps 64:ff9b:1::/96.

mod daemon_util;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use daemon_util::*;

const SIIT: &str = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:1::2", "192.0.2.2"]]
"#;

fn config(nat64_extra: &str) -> String {
    format!(
        r#"{SIIT}
[nat64]
pool6 = "64:ff9b:2::/96"
pool4 = ["203.0.113.1/32"]
{nat64_extra}
[[nat64.bib]]
protocol = "tcp"
ipv6 = "[2001:db8:1::2]:80"
ipv4 = "203.0.113.1:8080"
[tun]
queues = 2
"#
    )
}

/// The IPv4 host through NAT64.
const H4_NAT64: &str = "64:ff9b:2::c633:6402";
const POOL4: &str = "203.0.113.1";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn nat64_tcp_udp_icmp_both_ways_beside_siit() {
    lab::need_root!();
    let lab = Lab::start(&config(""));
    let st = lab.status();
    assert_eq!(st["functions"], serde_json::json!(["siit", "nat64"]));
    let routes: Vec<String> = serde_json::from_value(st["routes"].clone()).unwrap();
    assert!(
        routes.contains(&"64:ff9b:2::/96".to_string()) && routes.contains(&"203.0.113.1/32".to_string()),
        "{routes:?}"
    );

    // ICMP echo, IPv6-initiated.
    let (ok, out) = ping(&lab.h6, H4_NAT64, &[]);
    assert!(ok, "NAT64 ping: {out}");
    // SIIT still serves its own prefix beside it.
    assert!(ping(&lab.h6, "64:ff9b:1::c633:6402", &[]).0);

    // UDP and TCP, IPv6-initiated: the IPv4 server sees the pool4 address.
    let (got, from) = udp_echo(&lab.h4, sa("0.0.0.0:5000"), &lab.h6, sa(&format!("[{H4_NAT64}]:5000")), b"nat64 udp");
    assert_eq!(got, b"nat64 udp");
    assert_eq!(from.ip(), POOL4.parse::<IpAddr>().unwrap());
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
    let (got, from) = tcp_echo(&lab.h4, sa("0.0.0.0:5001"), &lab.h6, sa(&format!("[{H4_NAT64}]:5001")), &big);
    assert_eq!(got, big);
    assert_eq!(from.ip(), POOL4.parse::<IpAddr>().unwrap());

    // IPv4-initiated TCP through the static BIB entry of the configuration.
    let (got, from) = tcp_echo(&lab.h6, sa("[::]:80"), &lab.h4, sa(&format!("{POOL4}:8080")), b"to the v6 server");
    assert_eq!(got, b"to the v6 server");
    assert_eq!(from.ip(), H4_NAT64.parse::<IpAddr>().unwrap());

    // IPv4-initiated UDP and ICMP need a BIB entry: add them with ctl.
    let e = lab.ctl(&["bib", "add", "--proto", "udp", &format!("{POOL4}#5353"), "2001:db8:1::2#53"]);
    assert!(e.is_ok(), "{e:?}");
    let (got, from) = udp_echo(&lab.h6, sa("[::]:53"), &lab.h4, sa(&format!("{POOL4}:5353")), b"to v6 dns");
    assert_eq!(got, b"to v6 dns");
    assert_eq!(from.ip(), H4_NAT64.parse::<IpAddr>().unwrap());
    let bib: serde_json::Value = serde_json::from_str(&lab.ctl(&["bib", "list", "--proto", "udp"]).unwrap()).unwrap();
    let entries = bib.as_array().unwrap();
    assert!(entries.iter().any(|b| b["is-static"] == true && b["ipv4"] == "203.0.113.1:5353"), "{bib}");
    assert!(entries.iter().all(|b| b["protocol"] == "udp"), "{bib}");
    // A bad entry is refused with a reason, not accepted.
    let e = lab.ctl(&["bib", "add", "--proto", "udp", "198.51.100.9#53", "2001:db8:1::2#53"]).unwrap_err();
    assert!(e.contains("not in pool4"), "{e}");
    assert!(lab.ctl(&["bib", "remove", "--proto", "udp", "2001:db8:1::2#53", &format!("{POOL4}#5353")]).is_ok());

    // Sessions are listed, by protocol.
    let s: serde_json::Value = serde_json::from_str(&lab.ctl(&["sessions", "--proto", "tcp"]).unwrap()).unwrap();
    assert!(!s.as_array().unwrap().is_empty(), "{s}");
    assert!(s.as_array().unwrap().iter().all(|x| x["protocol"] == "tcp"));
    let s: serde_json::Value = serde_json::from_str(&lab.ctl(&["sessions"]).unwrap()).unwrap();
    assert!(s.as_array().unwrap().iter().any(|x| x["protocol"] == "icmp"), "{s}");

    // Metrics.
    assert!(lab.metric("v6gate_engine_packets_total{engine=\"nat64\"}") > 0);
    assert!(lab.metric("v6gate_engine_packets_total{engine=\"siit\"}") > 0);
    assert!(lab.metric("v6gate_nat64_sessions{proto=\"tcp\"}") >= 2);
    assert!(lab.metric("v6gate_nat64_sessions_created_total{proto=\"udp\"}") >= 2);
    assert_eq!(lab.metric("v6gate_nat64_pool4_addresses"), 1);
    assert!(lab.metric("v6gate_nat64_pool4_ports_used{proto=\"tcp\"}") >= 1);
    assert!(lab.status()["nat64"]["sessions"]["icmp"].as_u64().unwrap() >= 1);
}

#[test]
fn nat64_pool_exhaustion_refuses_new_flows_and_keeps_old_ones() {
    lab::need_root!();
    let lab = Lab::start(&config("").replace(
        r#"pool4 = ["203.0.113.1/32"]"#,
        r#"pool4 = ["203.0.113.1/32", { prefix = "203.0.113.2/32", ports = "2000-2001", protocols = ["udp"] }]"#,
    ).replace("\"203.0.113.1/32\", {", "{ prefix = \"203.0.113.1/32\", protocols = [\"tcp\", \"icmp\"] }, {"));
    let _srv = EchoServers::udp(&lab.h4, "0.0.0.0", &[6000]);
    let dst = sa(&format!("[{H4_NAT64}]:6000"));
    let a = udp_client(&lab.h6, true);
    let b = udp_client(&lab.h6, true);
    let c = udp_client(&lab.h6, true);
    assert_eq!(udp_roundtrip(&a, dst, b"a").unwrap(), b"a");
    assert_eq!(udp_roundtrip(&b, dst, b"b").unwrap(), b"b");
    // Two UDP ports in pool4: the third mapping is refused.
    assert!(udp_roundtrip(&c, dst, b"c").is_err());
    assert!(lab.metric("v6gate_nat64_refused_total{reason=\"pool4-exhausted\"}") >= 1);
    assert!(lab.metric("v6gate_icmp_errors_total{result=\"sent\"}") >= 1, "ICMPv6 error for the refused flow");
    assert_eq!(lab.metric("v6gate_nat64_pool4_ports_used{proto=\"udp\"}"), 2);
    // Existing flows keep working.
    assert_eq!(udp_roundtrip(&a, dst, b"a2").unwrap(), b"a2");
    assert_eq!(udp_roundtrip(&b, dst, b"b2").unwrap(), b"b2");
}

#[test]
fn nat64_session_table_limit() {
    lab::need_root!();
    let lab = Lab::start(&config("max-sessions = 2"));
    let _srv = EchoServers::udp(&lab.h4, "0.0.0.0", &[6001, 6002, 6003]);
    let a = udp_client(&lab.h6, true);
    let to = |p: u16| sa(&format!("[{H4_NAT64}]:{p}"));
    assert_eq!(udp_roundtrip(&a, to(6001), b"1").unwrap(), b"1");
    assert_eq!(udp_roundtrip(&a, to(6002), b"2").unwrap(), b"2");
    assert!(udp_roundtrip(&a, to(6003), b"3").is_err(), "third session must be refused");
    assert!(lab.metric("v6gate_nat64_refused_total{reason=\"session-table-full\"}") >= 1);
    assert_eq!(lab.metric("v6gate_nat64_sessions{proto=\"udp\"}"), 2);
    assert_eq!(udp_roundtrip(&a, to(6001), b"1b").unwrap(), b"1b", "existing sessions keep working");
}

#[test]
fn nat64_timeouts_with_short_timers() {
    lab::need_root!();
    let lab = Lab::start(&config("udp-timeout = 1\nicmp-timeout = 1\ntcp-incoming-syn-timeout = 1"));
    let _srv = EchoServers::udp(&lab.h4, "0.0.0.0", &[6010]);
    let a = udp_client(&lab.h6, true);
    assert_eq!(udp_roundtrip(&a, sa(&format!("[{H4_NAT64}]:6010")), b"x").unwrap(), b"x");
    assert!(ping(&lab.h6, H4_NAT64, &[]).0);
    assert_eq!(lab.metric("v6gate_nat64_sessions{proto=\"udp\"}"), 1);
    // The timer thread expires them.
    assert_eq!(lab.wait_metric("v6gate_nat64_sessions{proto=\"udp\"}", |v| v == 0), 0);
    assert_eq!(lab.wait_metric("v6gate_nat64_sessions{proto=\"icmp\"}", |v| v == 0), 0);
    assert!(lab.metric("v6gate_nat64_sessions_expired_total{proto=\"udp\"}") >= 1);
    assert_eq!(lab.metric("v6gate_nat64_bib_entries{proto=\"udp\"}"), 0, "dynamic BIB entry gone with its session");

    // An unsolicited IPv4 SYN to a pool4 port without a BIB entry is held,
    // then answered with ICMP Port Unreachable by the timer thread
    // (RFC 6146 §3.5.2.2): connect() is refused.
    let t0 = Instant::now();
    let r =
        in_ns(&lab.h4, || std::net::TcpStream::connect_timeout(&sa(&format!("{POOL4}:9999")), Duration::from_secs(10)));
    let e = r.expect_err("nobody listens behind the NAT64");
    assert!(
        matches!(e.kind(), std::io::ErrorKind::ConnectionRefused) || e.raw_os_error() == Some(libc::EHOSTUNREACH),
        "{e} after {:?}",
        t0.elapsed()
    );
    assert_eq!(lab.metric("v6gate_nat64_held_syns_expired_total"), 1);
    assert!(lab.metric("v6gate_drops_total{reason=\"syn-held\"}") >= 1);
}

#[test]
fn nat64_reload_keeps_sessions_and_applies_new_limits() {
    lab::need_root!();
    let lab = Lab::start(&config(""));
    let _srv = EchoServers::udp(&lab.h4, "0.0.0.0", &[6020, 6021]);
    let a = udp_client(&lab.h6, true);
    let dst = sa(&format!("[{H4_NAT64}]:6020"));
    assert_eq!(udp_roundtrip(&a, dst, b"before").unwrap(), b"before");
    let before = lab.ctl(&["bib", "list", "--proto", "udp"]).unwrap();
    lab.write_config(&config("max-sessions = 1"));
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 2), 2, "{}", lab.log());
    assert_eq!(lab.ctl(&["bib", "list", "--proto", "udp"]).unwrap(), before, "BIB carried over");
    assert_eq!(udp_roundtrip(&a, dst, b"after").unwrap(), b"after", "session carried over");
    // The new limit applies: a second session is refused.
    assert!(udp_roundtrip(&a, sa(&format!("[{H4_NAT64}]:6021")), b"new").is_err());
    // A broken [nat64] table is rejected; the old one stays.
    lab.write_config(&config("max-sessions = 0"));
    lab.sighup();
    assert!(lab.wait_log("[nat64] max-sessions"), "{}", lab.log());
    assert_eq!(lab.metric("v6gate_config_generation"), 2);
    assert_eq!(udp_roundtrip(&a, dst, b"still").unwrap(), b"still");
}

#[test]
fn natpt_pool_mode_keeps_ports() {
    lab::need_root!();
    let lab = Lab::start(&format!(
        "{SIIT}\n[nat64]\nmode = \"natpt\"\npool6 = \"64:ff9b:2::/96\"\npool4 = [\"203.0.113.8/31\"]\n[tun]\nqueues = 1\n"
    ));
    assert_eq!(lab.status()["functions"], serde_json::json!(["siit", "natpt"]));
    let srv = EchoServers::udp(&lab.h4, "0.0.0.0", &[6030]);
    let sock = in_ns(&lab.h6, || {
        let s = std::net::UdpSocket::bind("[::]:7777").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s
    });
    assert_eq!(udp_roundtrip(&sock, sa(&format!("[{H4_NAT64}]:6030")), b"pt").unwrap(), b"pt");
    let from = srv.seen.lock().unwrap()[0];
    assert_eq!(from.port(), 7777, "NAT-PT keeps the port");
    assert!(["203.0.113.8", "203.0.113.9"].contains(&from.ip().to_string().as_str()), "{from}");
    assert_eq!(lab.metric("v6gate_nat64_natpt_hosts"), 1);
    assert!(ping(&lab.h6, H4_NAT64, &[]).0);
}

#[test]
fn nat64_bib_limit() {
    lab::need_root!();
    // The static TCP entry of the file takes one of the two BIB slots.
    let lab = Lab::start(&config("max-bib = 2"));
    let _srv = EchoServers::udp(&lab.h4, "0.0.0.0", &[6040]);
    let dst = sa(&format!("[{H4_NAT64}]:6040"));
    let a = udp_client(&lab.h6, true);
    let b = udp_client(&lab.h6, true);
    assert_eq!(udp_roundtrip(&a, dst, b"a").unwrap(), b"a");
    assert!(udp_roundtrip(&b, dst, b"b").is_err(), "a third BIB entry must be refused");
    assert!(lab.metric("v6gate_nat64_refused_total{reason=\"bib-full\"}") >= 1);
    assert_eq!(udp_roundtrip(&a, dst, b"a2").unwrap(), b"a2");
}

/// `v6gate ctl bib add` entries survive a reload (SIGHUP) with their
/// sessions, and a restart through `[nat64] bib-file`; a removed one stays
/// removed.
#[test]
fn nat64_bib_entries_added_with_ctl_survive_reload_and_restart() {
    lab::need_root!();
    let mut lab = Lab::start(&config(""));
    let file = lab.dir.path().join("nat64-bib.toml");
    let with_file = config(&format!("bib-file = \"{}\"", file.display()));
    lab.write_config(&with_file);
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 2), 2, "{}", lab.log());
    for (v4, v6) in [("5353", "53"), ("5454", "54")] {
        let e = lab.ctl(&["bib", "add", "--proto", "udp", &format!("{POOL4}#{v4}"), &format!("2001:db8:1::2#{v6}")]);
        assert!(e.is_ok(), "{e:?}");
    }
    assert!(lab.ctl(&["bib", "remove", "--proto", "udp", "2001:db8:1::2#54", &format!("{POOL4}#5454")]).is_ok());
    let (got, _) = udp_echo(&lab.h6, sa("[::]:53"), &lab.h4, sa(&format!("{POOL4}:5353")), b"before");
    assert_eq!(got, b"before");
    let added = |lab: &Lab| -> Vec<String> {
        let bib: serde_json::Value =
            serde_json::from_str(&lab.ctl(&["bib", "list", "--proto", "udp"]).unwrap()).unwrap();
        bib.as_array().unwrap().iter().filter(|b| b["origin"] == "added").map(|b| b["ipv4"].to_string()).collect()
    };
    assert_eq!(added(&lab), ["\"203.0.113.1:5353\""]);

    // A reload keeps it (and its session); the file says what is kept.
    lab.write_config(&with_file.replace("[tun]", "# reloaded\n[tun]"));
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 3), 3, "{}", lab.log());
    assert_eq!(added(&lab), ["\"203.0.113.1:5353\""], "{}", lab.log());
    assert!(lab.metric("v6gate_nat64_sessions{proto=\"udp\"}") >= 1);
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("203.0.113.1:5353") && !saved.contains("5454"), "{saved}");

    // A restart reads it back.
    let (st, _) = lab.stop();
    assert!(st.success());
    lab.restart();
    assert_eq!(added(&lab), ["\"203.0.113.1:5353\""], "{}", lab.log());
    assert!(lab.log().contains("1 static BIB entry restored"), "{}", lab.log());
    let (got, _) = udp_echo(&lab.h6, sa("[::]:53"), &lab.h4, sa(&format!("{POOL4}:5353")), b"after restart");
    assert_eq!(got, b"after restart");
}
