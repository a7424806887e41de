//! `v6gate run` with [siit], in network namespaces: an IPv6 host, the
//! gateway running the daemon, an IPv4 host (see `daemon_util`).

mod daemon_util;

use std::net::{IpAddr, SocketAddr};

use daemon_util::*;

/// pool6 for IPv4 hosts; the IPv6 host is 192.0.2.2 to the IPv4 side (EAMT).
const CONFIG: &str = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:1::2", "192.0.2.2"]]
[tun]
queues = 2
"#;

/// The IPv4 host seen from the IPv6 side.
const H4_AS_V6: &str = "64:ff9b:1::c633:6402";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn siit_ping_udp_tcp_both_ways_icmp_errors_and_metrics() {
    lab::need_root!();
    let mut lab = Lab::start(CONFIG);
    // Routes the daemon put into the gateway: pool6 and the EAMT IPv4 prefix.
    let routes = lab.status()["routes"].clone();
    assert_eq!(routes, serde_json::json!(["64:ff9b:1::/96", "192.0.2.2/32"]), "{routes}");
    let r6 = lab.gw.ip(&["-6", "route", "show", "64:ff9b:1::/96"]).unwrap();
    assert!(String::from_utf8_lossy(&r6.stdout).contains("dev v6gate0"));
    // Up, with the MTU and queue length of the configuration, no link-local address.
    let link = String::from_utf8_lossy(&lab.gw.ip(&["addr", "show", "v6gate0"]).unwrap().stdout).into_owned();
    assert!(link.contains(",UP,") && link.contains("mtu 1500") && link.contains("qlen 1000"), "{link}");
    assert!(!link.contains("fe80"), "{link}");

    // ICMP echo both ways.
    let (ok, out) = ping(&lab.h6, H4_AS_V6, &[]);
    assert!(ok, "IPv6 -> IPv4 ping: {out}");
    let (ok, out) = ping(&lab.h4, "192.0.2.2", &[]);
    assert!(ok, "IPv4 -> IPv6 ping: {out}");

    // UDP both ways; the servers see the translated source addresses.
    let (got, from) = udp_echo(&lab.h4, sa("0.0.0.0:4000"), &lab.h6, sa(&format!("[{H4_AS_V6}]:4000")), b"udp 6->4");
    assert_eq!(got, b"udp 6->4");
    assert_eq!(from.ip(), "192.0.2.2".parse::<IpAddr>().unwrap());
    let (got, from) = udp_echo(&lab.h6, sa("[::]:4001"), &lab.h4, sa("192.0.2.2:4001"), b"udp 4->6");
    assert_eq!(got, b"udp 4->6");
    assert_eq!(from.ip(), H4_AS_V6.parse::<IpAddr>().unwrap());

    // TCP both ways, with a payload larger than one small segment.
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let (got, from) = tcp_echo(&lab.h4, sa("0.0.0.0:4002"), &lab.h6, sa(&format!("[{H4_AS_V6}]:4002")), &big);
    assert_eq!(got, big);
    assert_eq!(from.ip(), "192.0.2.2".parse::<IpAddr>().unwrap());
    let (got, from) = tcp_echo(&lab.h6, sa("[::]:4003"), &lab.h4, sa("192.0.2.2:4003"), &big);
    assert_eq!(got, big);
    assert_eq!(from.ip(), H4_AS_V6.parse::<IpAddr>().unwrap());

    // Hop limit 2: the gateway's kernel forwards with 1, the translator
    // must answer Time Exceeded from its own address (RFC 7915 §5.1).
    let (ok, out) = ping(&lab.h6, H4_AS_V6, &["-t", "2"]);
    assert!(!ok);
    assert!(out.contains("Time exceeded"), "{out}");
    assert!(out.contains("64:ff9b:1::c000:8"), "{out}");
    // TTL 2 from the IPv4 side: ICMPv4 Time Exceeded from 192.0.0.8.
    let (ok, out) = ping(&lab.h4, "192.0.2.2", &["-t", "2"]);
    assert!(!ok);
    assert!(out.contains("Time to live exceeded") && out.contains("192.0.0.8"), "{out}");
    assert_eq!(lab.metric("v6gate_icmp_errors_total{result=\"sent\"}"), 2);

    // An ICMP error from beyond the translator is translated back: UDP to a
    // closed port of the IPv4 host is refused on the IPv6 host (ICMPv4 3/3
    // -> ICMPv6 1/4) and vice versa (ICMPv6 1/4 -> ICMPv4 3/3).
    for (ns, dst) in [(&lab.h6, format!("[{H4_AS_V6}]:4999")), (&lab.h4, "192.0.2.2:4999".to_string())] {
        let e = in_ns(ns, || {
            let s = std::net::UdpSocket::bind(if dst.starts_with('[') { "[::]:0" } else { "0.0.0.0:0" }).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            s.connect(&dst).unwrap();
            s.send(b"anyone?").unwrap();
            s.recv(&mut [0u8; 16]).unwrap_err()
        });
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{dst}: {e}");
    }
    assert_eq!(lab.metric("v6gate_icmp_errors_total{result=\"sent\"}"), 2, "translated errors are not originated ones");

    // Counters moved in both families and directions.
    for s in [
        "v6gate_packets_total{direction=\"rx\",family=\"ipv4\"}",
        "v6gate_packets_total{direction=\"rx\",family=\"ipv6\"}",
        "v6gate_packets_total{direction=\"tx\",family=\"ipv4\"}",
        "v6gate_packets_total{direction=\"tx\",family=\"ipv6\"}",
        "v6gate_bytes_total{direction=\"rx\",family=\"ipv6\"}",
        "v6gate_engine_packets_total{engine=\"siit\"}",
    ] {
        assert!(lab.metric(s) > 0, "{s} did not move");
    }
    assert!(lab.metric("v6gate_bytes_total{direction=\"tx\",family=\"ipv4\"}") > 2 * big.len() as u64);
    assert_eq!(lab.metric("v6gate_workers"), 2);
    let st = lab.status();
    assert_eq!(st["functions"], serde_json::json!(["siit"]));
    assert_eq!(st["device"]["name"], "v6gate0");

    // SIGTERM: clean exit, device and routes gone.
    let (st, log) = lab.stop();
    assert!(st.success(), "{st}: {log}");
    assert!(lab.gw.ip(&["link", "show", "v6gate0"]).is_err(), "device left behind");
    let r = lab.gw.ip(&["-6", "route", "show", "64:ff9b:1::/96"]).unwrap();
    assert!(r.stdout.is_empty(), "route left behind");
}

#[test]
fn reload_bad_config_keeps_the_old_one_and_a_good_one_changes_behaviour() {
    lab::need_root!();
    let lab = Lab::start(CONFIG);
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0);

    // A broken file: rejected, logged, counted; translation goes on.
    lab.write_config(&format!("{CONFIG}\n[siit]\npool7 = 1\n"));
    lab.sighup();
    assert!(lab.wait_log("reload rejected"), "{}", lab.log());
    assert_eq!(lab.wait_metric("v6gate_config_reloads_total{result=\"error\"}", |v| v == 1), 1);
    assert_eq!(lab.metric("v6gate_config_generation"), 1);
    assert!(lab.status()["reloads"]["last_error"].as_str().unwrap().contains("config error"));
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0, "old configuration must keep working");
    // A valid file that changes the device name is refused too.
    lab.write_config(&CONFIG.replace("queues = 2", "queues = 2\nname = \"other0\""));
    let e = lab.ctl(&["reload"]).unwrap_err();
    assert!(e.contains("[tun] name changed"), "{e}");
    assert!(ping(&lab.h6, H4_AS_V6, &[]).0);

    // A good file that moves the IPv6 host to 192.0.2.3.
    lab.write_config(&CONFIG.replace("192.0.2.2", "192.0.2.3"));
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 2), 2, "{}", lab.log());
    assert!(lab.log().contains("reloaded"), "{}", lab.log());
    assert_eq!(lab.metric("v6gate_config_reloads_total{result=\"ok\"}"), 1);
    let (ok, out) = ping(&lab.h4, "192.0.2.3", &[]);
    assert!(ok, "new mapping: {out}");
    assert!(!ping(&lab.h4, "192.0.2.2", &[]).0, "old mapping must be gone");
    assert_eq!(lab.status()["routes"], serde_json::json!(["64:ff9b:1::/96", "192.0.2.3/32"]));
    let (got, from) = udp_echo(&lab.h4, sa("0.0.0.0:4010"), &lab.h6, sa(&format!("[{H4_AS_V6}]:4010")), b"x");
    assert_eq!(got, b"x");
    assert_eq!(from.ip(), "192.0.2.3".parse::<IpAddr>().unwrap());
}

#[test]
fn malformed_packet_storm_is_counted_and_the_daemon_stays_up() {
    lab::need_root!();
    let lab = Lab::start(CONFIG);
    const N: usize = 500;
    // IPv6 packets carrying 3 bytes of "TCP": truncated.
    send_raw(&lab.h6, H4_AS_V6.parse().unwrap(), libc::IPPROTO_TCP, b"abc", N);
    // IPv4 packets carrying 3 bytes of "UDP": truncated.
    send_raw(&lab.h4, "192.0.2.2".parse().unwrap(), libc::IPPROTO_UDP, b"abc", N);
    // ICMPv4 Destination Unreachable with a wrong checksum: bad-checksum.
    let mut icmp = vec![3u8, 1, 0x12, 0x34, 0, 0, 0, 0];
    icmp.extend_from_slice(&[0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 192, 0, 2, 2, 198, 51, 100, 2]);
    icmp.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
    send_raw(&lab.h4, "192.0.2.2".parse().unwrap(), libc::IPPROTO_ICMP, &icmp, N);
    let truncated = lab.wait_metric("v6gate_drops_total{reason=\"truncated\"}", |v| v >= 2 * N as u64);
    let bad = lab.wait_metric("v6gate_drops_total{reason=\"bad-checksum\"}", |v| v >= N as u64);
    // The TUN queue may overflow under the storm; what reached the daemon is
    // counted exactly, nothing is sent on.
    let rx = lab.metric("v6gate_packets_total{direction=\"rx\",family=\"ipv4\"}")
        + lab.metric("v6gate_packets_total{direction=\"rx\",family=\"ipv6\"}");
    assert_eq!(truncated, 2 * N as u64, "rx {rx}");
    assert_eq!(bad, N as u64);
    assert_eq!(lab.metric("v6gate_packets_total{direction=\"tx\",family=\"ipv4\"}"), 0);
    assert_eq!(lab.metric("v6gate_icmp_errors_total{result=\"sent\"}"), 0);
    // Still translating.
    assert!(ping(&lab.h6, H4_AS_V6, &[]).0);
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0);
}

#[test]
fn originated_icmp_errors_are_rate_limited_and_counted() {
    lab::need_root!();
    let lab = Lab::start(
        &format!("{CONFIG}\n[daemon]\nicmp-error-rate = 1\nicmp-error-burst = 1\n").replace("queues = 2", "queues = 1"),
    );
    // 20 probes that each make the translator originate Time Exceeded.
    let out =
        lab.h6.command("ping").args(["-c", "20", "-i", "0.002", "-W", "1", "-t", "2", H4_AS_V6]).output().unwrap();
    assert!(!out.status.success());
    let sent = lab.wait_metric("v6gate_icmp_errors_total{result=\"sent\"}", |_| true);
    let limited = lab.wait_metric("v6gate_icmp_errors_total{result=\"rate-limited\"}", |v| v + sent >= 20);
    assert_eq!(sent + limited, 20);
    assert!(sent >= 1 && limited >= 1, "sent {sent}, rate-limited {limited}");
}

#[test]
fn run_refuses_a_bad_config_and_a_taken_device() {
    lab::need_root!();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "[siit]\npool6 = \"2001:db8::1/32\"\n").unwrap();
    let out = std::process::Command::new(BIN).args(["run", "--config"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG, which the systemd unit does not restart on");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("config error") && e.contains("[siit] pool6"), "{e}");

    // Inside a namespace where the device name is taken by a second daemon.
    let lab = Lab::start(CONFIG);
    let out = lab.gw.command(BIN).args(["run", "--config"]).arg(config_path(&lab.dir)).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "not a configuration error");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("v6gate0 already exists"), "{e}");
    assert!(ping(&lab.h6, H4_AS_V6, &[]).0, "the first daemon is undisturbed");
}

#[test]
fn siit_with_poll_io_mode() {
    lab::need_root!();
    let lab = Lab::start(&CONFIG.replace("queues = 2", "queues = 2\nio = \"poll\""));
    assert!(ping(&lab.h6, H4_AS_V6, &[]).0);
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0);
    let (got, _) = udp_echo(&lab.h6, sa("[::]:4030"), &lab.h4, sa("192.0.2.2:4030"), b"poll");
    assert_eq!(got, b"poll");
    assert!(!lab.log().contains("io_uring unavailable"));
}

#[test]
fn uring_io_mode_is_used() {
    lab::need_root!();
    let lab = Lab::start(&CONFIG.replace("queues = 2", "queues = 2\nio = \"uring\""));
    assert!(ping(&lab.h6, H4_AS_V6, &[]).0);
    assert!(!lab.log().contains("io_uring unavailable"), "{}", lab.log());
}

#[test]
fn fragments_and_jumbo_packets_both_ways() {
    lab::need_root!();
    // Fragments: 3000-byte UDP datagrams cross the 1500-byte links as
    // fragments, which the translator translates one by one (RFC 7915
    // §4.1/§5.1); fragmented ICMP cannot be (its checksum covers a pseudo
    // header in IPv6 only) and is dropped and counted.
    let lab = Lab::start(CONFIG);
    let msg: Vec<u8> = (0..3000u32).map(|i| (i % 241) as u8).collect();
    let (got, _) = udp_echo(&lab.h4, sa("0.0.0.0:4040"), &lab.h6, sa(&format!("[{H4_AS_V6}]:4040")), &msg);
    assert_eq!(got, msg);
    let (got, _) = udp_echo(&lab.h6, sa("[::]:4041"), &lab.h4, sa("192.0.2.2:4041"), &msg);
    assert_eq!(got, msg);
    assert!(!ping(&lab.h6, H4_AS_V6, &["-s", "3000"]).0);
    assert!(lab.metric("v6gate_drops_total{reason=\"fragmented-icmp\"}") >= 2);
    drop(lab);

    // Jumbo: 5000-byte packets unfragmented through a 9000-byte path (larger
    // than an io_uring write slot: written directly).
    let jumbo = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:1::2", "192.0.2.2"]]
ipv4-mtu = 9000
ipv6-mtu = 9000
[tun]
queues = 2
mtu = 9000
"#;
    let lab = Lab::start(jumbo);
    for (ns, ifs) in [(&lab.h6, ["a6"]), (&lab.h4, ["a4"]), (&lab.gw, ["g6"]), (&lab.gw, ["g4"])] {
        ns.ip(&["link", "set", ifs[0], "mtu", "9000"]).unwrap();
    }
    for (ns, dst) in [(&lab.h6, H4_AS_V6), (&lab.h4, "192.0.2.2")] {
        let (ok, out) = ping(ns, dst, &["-s", "5000", "-M", "do"]);
        assert!(ok, "{dst}: {out}");
    }
    assert!(lab.metric("v6gate_bytes_total{direction=\"tx\",family=\"ipv4\"}") >= 5000);
}

#[test]
fn reload_failing_half_way_is_rolled_back() {
    lab::need_root!();
    let lab = Lab::start(CONFIG);
    // A new route and address (applied first) and a DNS64 server that
    // cannot bind (its address is not local): the reload fails at the last
    // step and must take the route and address back.
    lab.write_config(&format!(
        "{}addresses = [\"192.0.2.77/32\"]\nroutes = [\"198.18.0.0/15\"]\n[dns64]\nlisten = [\"[2001:db8:99::1]:53\"]\nupstream = [\"198.51.100.2\"]\n",
        CONFIG.trim_start()
    ));
    lab.sighup();
    assert!(lab.wait_log("reload rejected"), "{}", lab.log());
    assert!(lab.log().contains("[dns64]"), "{}", lab.log());
    assert_eq!(lab.metric("v6gate_config_generation"), 1);
    let r = lab.gw.ip(&["route", "show", "198.18.0.0/15"]).unwrap();
    assert!(r.stdout.is_empty(), "route not rolled back: {}", String::from_utf8_lossy(&r.stdout));
    let a = String::from_utf8_lossy(&lab.gw.ip(&["addr", "show", "v6gate0"]).unwrap().stdout).into_owned();
    assert!(!a.contains("192.0.2.77"), "address not rolled back: {a}");
    assert_eq!(lab.status()["functions"], serde_json::json!(["siit"]));
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0);

    // Adding and then removing the device's only IPv4 address (the kernel
    // flushes the device's IPv4 routes then) keeps translation working.
    lab.write_config(&format!("{}addresses = [\"192.0.2.77/32\"]\n", CONFIG.trim_start()));
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 2), 2, "{}", lab.log());
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0);
    lab.write_config(CONFIG);
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 3), 3, "{}", lab.log());
    let a = String::from_utf8_lossy(&lab.gw.ip(&["addr", "show", "v6gate0"]).unwrap().stdout).into_owned();
    assert!(!a.contains("192.0.2.77"), "{a}");
    assert!(ping(&lab.h4, "192.0.2.2", &[]).0, "routes flushed with the last address must be back");
}

/// `[trgw]` next to `[siit]`: `v6gate run` starts the media relay too, its
/// ng control answers, /metrics and /status show it, and a reload that
/// changes `[trgw]` is refused (live calls hold its sockets) while the old
/// configuration keeps working.
#[test]
fn trgw_runs_inside_the_daemon() {
    lab::need_root!();
    let trgw = "\n[trgw]\nng = \"127.0.0.1:2299\"\nrtpproxy-udp = \"127.0.0.1:0\"\n\
                [[trgw.interface]]\nname = \"pub\"\nipv4 = \"127.0.0.1\"\nipv6 = \"::1\"\n";
    let lab = Lab::start(&format!("{CONFIG}{trgw}"));
    let status = lab.status();
    let funcs: Vec<&str> = status["functions"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(funcs.contains(&"siit") && funcs.contains(&"trgw"), "{status}");

    // An ng ping (bencode) from inside the gateway namespace.
    let reply = in_ns(&lab.gw, || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        s.send_to(b"c1 d7:command4:pinge", "127.0.0.1:2299").unwrap();
        let mut buf = [0u8; 256];
        let n = s.recv(&mut buf).unwrap();
        buf[..n].to_vec()
    });
    assert_eq!(reply, b"c1 d6:result4:ponge");
    assert_eq!(lab.metric("v6gate_trgw_calls"), 0);
    assert_eq!(lab.metric("v6gate_trgw_calls_total{event=\"created\"}"), 0);

    // Changing [trgw] needs a restart: refused, counted, SIIT still works.
    lab.write_config(&format!("{CONFIG}{}", trgw.replace("2299", "2300")));
    lab.sighup();
    lab.wait_metric("v6gate_config_reloads_total{result=\"error\"}", |v| v == 1);
    assert!(lab.log().contains("[trgw] changed: restart v6gate to apply"), "{}", lab.log());
    assert!(ping(&lab.h6, H4_AS_V6, &[]).0);
}
