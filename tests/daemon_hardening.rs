//! Issue #11: nothing a client sends can stop the gateway, exhaust it, or
//! reach where it should not. Each test runs `v6gate run` with SIIT, NAT64
//! and the TrGW between an IPv6 host and an IPv4 host (network
//! namespaces, real sockets), sets up a NAT64 session and a TrGW call,
//! attacks one listener with bounded traffic, and checks that the daemon
//! still serves and that the session and the call still carry packets.

mod daemon_util;
mod hardening_util;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use daemon_util::*;
use hardening_util::*;
use trgw::bencode::Value;

/// Case 1 and 2: a huge Content-Length, an endless header line, slow and
/// idle connections and more connections than allowed; the admin API
/// answers each with a status or a close, memory stays put, and it serves
/// again once the attack stops.
#[test]
fn admin_api_limits_hold_and_the_daemon_keeps_serving() {
    let (mut lab, _sock) = start(
        "max-connections = 8\nrequest-timeout = 2\nidle-timeout = 2\nmax-header-bytes = 16384\nmax-body-bytes = 4096",
        "",
        "",
    );
    let base = Baseline::new(&lab);
    let rss0 = lab.rss_kib();

    // A huge declared body is refused from the header alone.
    let r =
        http_raw(&lab.gw, b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1:9164\r\nContent-Length: 99999999999999\r\n\r\n");
    assert_eq!(http_status(&r), 413, "{r}");
    assert!(lab.alive(), "daemon died: {}", lab.log());
    // A body over the limit without a declared length (chunked) too.
    let mut chunked = b"POST /reload HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..4 {
        chunked.extend_from_slice(b"800\r\n");
        chunked.extend_from_slice(&[b'x'; 0x800]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(http_status(&http_raw(&lab.gw, &chunked)), 413);

    // An endless header line: answered 431 (or closed) after the limit,
    // memory does not grow with what is sent.
    let sent = in_ns(&lab.gw, || {
        let mut s = TcpStream::connect("127.0.0.1:9164").unwrap();
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let _ = s.write_all(b"GET /status HTTP/1.1\r\nX-Long: ");
        let chunk = vec![b'a'; 64 * 1024];
        let mut sent = 0usize;
        while sent < 32 << 20 {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        sent
    });
    assert!(sent < 32 << 20, "the server kept reading an endless header ({sent} bytes)");
    assert!(lab.alive(), "daemon died: {}", lab.log());
    let grown = lab.rss_kib().saturating_sub(rss0);
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB");

    // A request trickled one byte at a time is cut off by request-timeout.
    let cut = in_ns(&lab.gw, || {
        let mut s = TcpStream::connect("127.0.0.1:9164").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let t0 = Instant::now();
        for b in b"GET /status HTTP/1.1\r\nX-Slow: ".iter().cycle() {
            if s.write_all(&[*b]).is_err() || t0.elapsed() > Duration::from_secs(8) {
                break;
            }
            let mut buf = [0u8; 256];
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => break,
                Err(_) => {}
            }
        }
        t0.elapsed()
    });
    assert!(cut < Duration::from_secs(8), "slow request not cut off ({cut:?})");

    // More connections than allowed: the extra ones get 503 at once.
    let held: Vec<TcpStream> =
        in_ns(&lab.gw, || (0..8).map(|_| TcpStream::connect("127.0.0.1:9164").unwrap()).collect());
    std::thread::sleep(Duration::from_millis(300));
    let r = http_raw(&lab.gw, b"GET /status HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(http_status(&r), 503, "{r}");
    // The idle ones are closed after idle-timeout; then the API serves again.
    wait_until("idle connections closed", || lab.ctl(&["status"]).is_ok());
    drop(held);
    assert!(lab.metric("v6gate_admin_refused_total{reason=\"connection-limit\"}") >= 1);
    // Silent before their first request: closed by the header or the idle timeout.
    let closed = lab.metric("v6gate_admin_refused_total{reason=\"idle-timeout\"}")
        + lab.metric("v6gate_admin_refused_total{reason=\"header-timeout\"}");
    assert!(closed >= 8, "{closed}");
    assert!(lab.metric("v6gate_admin_refused_total{reason=\"body-too-large\"}") >= 2);

    // The descriptor limit was raised for the TrGW port range and /status says how close it is.
    let st = lab.status();
    let d = &st["descriptors"];
    assert!(d["open"].as_u64().unwrap() > 0 && d["open"].as_u64() < d["limit"].as_u64(), "{d}");
    assert!(
        d["limit"].as_u64().unwrap() >= d["needed"].as_u64().unwrap().min(d["hard_limit"].as_u64().unwrap()),
        "{d}"
    );
    assert!(lab.metric("process_open_fds") > 0 && lab.metric("process_max_fds") >= 1024);
    base.check("after");
}

/// Case 2: out of file descriptors, the admin API backs off and keeps
/// listening, the relay names the error, and both serve again once
/// descriptors are free.
#[test]
fn descriptor_exhaustion_is_survived_and_named() {
    let (lab, _sock) = start("", "", "");
    let base = Baseline::new(&lab);
    let (conns, (soft, hard)) = exhaust_descriptors(&lab);
    let mut ng = Ng::new(&lab);
    let o = offer(&mut ng, "starved", "2001:db8:1::2", 9100);
    assert_eq!(result(&o), "error");
    assert!(reason(&o).starts_with("Too many open files"), "{o:?}");
    std::thread::sleep(Duration::from_millis(500));
    drop(conns);
    // Descriptors free again (the limit still low): served again.
    wait_until("the admin API to answer again", || lab.ctl(&["status"]).is_ok());
    assert!(lab.metric("v6gate_admin_refused_total{reason=\"no-descriptors\"}") >= 1, "{}", lab.log());
    assert!(lab.log().contains("too many open files"), "{}", lab.log());
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"no-descriptors\"}"), 1);
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"ports-exhausted\"}"), 0);
    set_nofile(&lab, soft, hard);
    base.check("after");
}

/// Case 3: state-changing endpoints need the token, foreign Host and
/// Origin are refused, `ctl` reads the token from the configuration, and
/// static BIB entries added with `ctl` survive a reload.
#[test]
fn state_changing_endpoints_need_the_token_and_own_host_and_origin() {
    let (lab, _sock) = start(&format!("token = \"{TOKEN}\""), "", "");
    let base = Baseline::new(&lab);
    let req = |extra: &str| {
        let r = format!(
            "POST /reload HTTP/1.1\r\nHost: 127.0.0.1:9164\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        http_status(&http_raw(&lab.gw, r.as_bytes()))
    };
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    assert_eq!(req(""), 401, "no token");
    assert_eq!(req("Authorization: Bearer wrong-token-wrong-token\r\n"), 401);
    assert_eq!(lab.metric("v6gate_config_reloads_total{result=\"ok\"}"), 0, "nothing applied");
    assert_eq!(req(&auth), 200);
    assert_eq!(lab.metric("v6gate_config_reloads_total{result=\"ok\"}"), 1);
    let foreign_host = format!("POST /reload HTTP/1.1\r\nHost: evil.example:9164\r\n{auth}Content-Length: 0\r\n\r\n");
    assert_eq!(http_status(&http_raw(&lab.gw, foreign_host.as_bytes())), 403);
    assert_eq!(req(&format!("{auth}Origin: http://evil.example\r\n")), 403);
    assert_eq!(req(&format!("{auth}Origin: http://127.0.0.1:9164\r\n")), 200);
    assert_eq!(lab.metric("v6gate_config_reloads_total{result=\"ok\"}"), 2);
    // GET needs no token.
    assert!(lab.ctl(&["status"]).is_ok());
    // ctl: without a token refused; with --config, the env or --token-file it works.
    let cfg = config_path(&lab.dir);
    let cfg = cfg.to_str().unwrap();
    let e = lab.ctl(&["reload"]).unwrap_err();
    assert!(e.contains("401"), "{e}");
    lab.ctl(&["--config", cfg, "reload"]).unwrap();
    lab.ctl_env(&["reload"], &[("V6GATE_ADMIN_TOKEN", TOKEN)]).unwrap();
    let tf = lab.dir.path().join("tok");
    std::fs::write(&tf, format!("{TOKEN}\n")).unwrap();
    lab.ctl(&["--token-file", tf.to_str().unwrap(), "reload"]).unwrap();
    assert!(lab.metric("v6gate_admin_refused_total{reason=\"token\"}") >= 3);
    assert!(lab.metric("v6gate_admin_refused_total{reason=\"host\"}") >= 1);
    assert!(lab.metric("v6gate_admin_refused_total{reason=\"origin\"}") >= 1);

    // A static BIB entry added with ctl survives a reload (SIGHUP and API).
    lab.ctl(&["--config", cfg, "bib", "add", "--proto", "udp", "203.0.113.1#5353", "2001:db8:1::2#53"]).unwrap();
    let has = || lab.ctl(&["bib", "list", "--proto", "udp"]).unwrap().contains("203.0.113.1:5353");
    assert!(has());
    lab.sighup();
    assert_eq!(lab.wait_metric("v6gate_config_generation", |g| g >= 7), 7, "{}", lab.log());
    assert!(has(), "kept by SIGHUP reload: {}", lab.log());
    lab.ctl(&["--config", cfg, "reload"]).unwrap();
    assert!(has(), "kept by the API reload");
    base.check("after");
    // A file whose pool4 no longer holds it drops it, with a log line
    // (the NAT64 session goes with the old pool4 address too).
    let text = std::fs::read_to_string(config_path(&lab.dir)).unwrap();
    lab.write_config(&text.replace("pool4 = [\"203.0.113.1/32\"]", "pool4 = [\"203.0.113.9/32\"]"));
    lab.ctl(&["--config", cfg, "reload"]).unwrap();
    assert!(!has());
    assert!(lab.log().contains("dropped by the reload"), "{}", lab.log());
    lab.write_config(&text);
    lab.ctl(&["--config", cfg, "reload"]).unwrap();
    base.check("after the pool4 came back");
}

/// Case 4: the rtpproxy Unix socket serves clients side by side: idle
/// clients and one that never reads its replies delay nobody, and
/// connections beyond control-connections are closed at once.
#[test]
fn rtpproxy_unix_socket_is_concurrent_bounded_and_timed() {
    let (lab, sock) = start("", "control-connections = 4\ncontrol-timeout = \"3s\"", "");
    let base = Baseline::new(&lab);
    let path = sock.path().join("rtpp.sock");
    let _ = std::fs::metadata(&path).expect("the socket exists");
    let ask = |p: &std::path::Path| -> std::io::Result<String> {
        let mut c = UnixStream::connect(p)?;
        c.set_read_timeout(Some(Duration::from_millis(1500)))?;
        c.write_all(b"V")?;
        let mut buf = [0u8; 64];
        let n = c.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    // Two idle clients and one that floods commands without reading.
    let idle: Vec<UnixStream> = (0..2).map(|_| UnixStream::connect(&path).unwrap()).collect();
    let mut flood = UnixStream::connect(&path).unwrap();
    flood.set_write_timeout(Some(Duration::from_millis(300))).unwrap();
    let cmds = b"V\n".repeat(32 * 1024);
    for _ in 0..4 {
        if flood.write_all(&cmds).is_err() {
            break;
        }
    }
    // A fourth client is served at once.
    assert_eq!(ask(&path).expect("served beside idle and flooding clients"), "20040107\n");
    // A fourth and a fifth while the three are open: one too many, closed
    // at once and counted.
    let extra = UnixStream::connect(&path).unwrap();
    extra.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let _fourth = UnixStream::connect(&path).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    wait_until("the connection limit to count", || {
        lab.metric("v6gate_trgw_control_errors_total{reason=\"connection-limit\"}") >= 1
    });
    // The timeouts free the slots (idle ones by the read timeout, the
    // flooding one by the write timeout): served again.
    wait_until("the idle and flooding connections to time out", || {
        lab.metric("v6gate_trgw_control_errors_total{reason=\"connection-timeout\"}") >= 3
    });
    assert_eq!(ask(&path).expect("served again"), "20040107\n");
    drop((idle, flood, extra));
    base.check("after");
}

/// Case 5: media is never sent to loopback, multicast, link-local or the
/// relay's own addresses, whether signalled (ng, rtpproxy) or learnt by
/// latching.
#[test]
fn media_address_policy_refuses_internal_destinations() {
    let (lab, _sock) = start("", "", "");
    let base = Baseline::new(&lab);
    // A local service on the gateway the attacker wants to reach.
    let victim = in_ns(&lab.gw, || UdpSocket::bind("127.0.0.1:5555").unwrap());
    victim.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut ng = Ng::new(&lab);
    for (ip, why) in [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("fe80::1", "link-local"),
        ("198.51.100.1", "own-address"),
        ("2001:db8:1::1", "own-address"),
        ("255.255.255.255", "broadcast"),
    ] {
        let o = offer(&mut ng, &format!("evil-{ip}"), ip, 5555);
        assert_eq!(result(&o), "error", "{ip}: {o:?}");
        assert!(reason(&o).contains(why), "{ip}: {}", reason(&o));
    }
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"media-address-refused\"}"), 8);
    assert_eq!(lab.metric("v6gate_trgw_calls_total{event=\"created\"}"), 1, "refused offers are not calls");
    // rtpproxy: E32.
    let r = in_ns(&lab.gw, || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.send_to(b"k1 U evil 127.0.0.1 5555 ft", "127.0.0.1:22299").unwrap();
        let mut buf = [0u8; 128];
        let n = s.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    assert_eq!(r, "k1 E32\n");

    // Latching: a packet from the relay's own address (a process on the
    // gateway) reaches the IPv4 leg first; symmetric latching must not
    // learn it, so media keeps going to the signalled UA.
    let mut ng = Ng::new(&lab);
    let o = offer(&mut ng, "latch", "2001:db8:1::2", 9004);
    let to4 = media_of(&o);
    let a = answer(&mut ng, "latch", "198.51.100.2", 9006);
    let to6 = media_of(&a);
    let ua4 = in_ns(&lab.h4, || UdpSocket::bind("198.51.100.2:9006").unwrap());
    ua4.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let inside = in_ns(&lab.gw, || UdpSocket::bind("198.51.100.1:5556").unwrap());
    inside.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    inside.send_to(b"hijack", to4).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    base.ua6.send_to(b"voice", to6).unwrap();
    assert!(recv_from(&inside).is_none(), "media redirected to the gateway itself");
    assert_eq!(recv_from(&ua4).map(|x| x.0), Some(b"voice".to_vec()), "media goes to the signalled UA");
    assert!(lab.metric("v6gate_trgw_dropped_packets_total{reason=\"latch-refused\"}") >= 1);
    assert!(recv_from(&victim).is_none(), "nothing reached 127.0.0.1:5555");
    base.check("after");
}

/// Case 6: the ng reply cache is bounded (re-offers of a huge SDP under
/// fresh cookies do not grow memory without end) and a reply too large
/// for a datagram is answered with an error, counted.
#[test]
fn ng_reply_cache_is_bounded_and_oversized_replies_are_answered() {
    let (lab, _sock) = start("", "ng-cache-bytes = 4194304", "");
    let base = Baseline::new(&lab);
    let mut ng = Ng::new(&lab);
    // A ~50 KB SDP: many attribute lines.
    let mut big = sdp("2001:db8:1::2", 9010);
    while big.len() < 50_000 {
        big.push_str("a=x-padding:0123456789012345678901234567890123456789012345678901234567890123456789\r\n");
    }
    let rss0 = lab.rss_kib();
    for i in 0..1500 {
        let r = ng
            .cmd(vec![
                ("command", s("offer")),
                ("call-id", s("big")),
                ("from-tag", s("ft")),
                ("sdp", s(&big)),
                ("direction", Value::List(vec![s("v6"), s("v4")])),
                ("address family", s("IP4")),
            ])
            .unwrap_or_else(|| panic!("re-offer {i} unanswered"));
        assert_eq!(result(&r), "ok");
    }
    let grown = lab.rss_kib().saturating_sub(rss0);
    assert!(grown < 32 * 1024, "RSS grew by {grown} KiB for 1500 cached replies of 50 KB");
    assert!(lab.metric("v6gate_trgw_ng_cache_bytes") <= 4 << 20);
    assert!(lab.metric("v6gate_trgw_ng_cache_evicted_total") > 0);

    // Two calls whose Call-IDs alone exceed a datagram: `list` gets an error.
    for c in ['x', 'y'] {
        let id: String = std::iter::repeat_n(c, 40_000).collect();
        let o = offer(&mut ng, &id, "2001:db8:1::2", 9012);
        assert_eq!(result(&o), "ok");
    }
    let l = ng.cmd(vec![("command", s("list")), ("limit", Value::Int(100))]).expect("an answer to list");
    assert_eq!(result(&l), "error");
    assert!(reason(&l).starts_with("Reply too large"), "{l:?}");
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"reply-too-large\"}"), 1);
    base.check("after");
}

/// Case 7: errors name what ran out: an interface address not on the host,
/// the port range; refused offers are not counted as created calls.
#[test]
fn relay_errors_are_named_and_refused_offers_not_counted() {
    let sock = tempfile::tempdir().unwrap();
    let text = config(sock.path(), "", "").replace("port-max = 30099", "port-max = 30007");
    let lab = Lab::start(&format!("{text}[[trgw.interface]]\nname = \"ghost\"\nipv4 = \"192.0.2.99\"\n"));
    let base = Baseline::new(&lab);
    let mut ng = Ng::new(&lab);
    let o = ng
        .cmd(vec![
            ("command", s("offer")),
            ("call-id", s("ghost")),
            ("from-tag", s("ft")),
            ("sdp", s(&sdp("2001:db8:1::2", 9020))),
            ("direction", Value::List(vec![s("v6"), s("ghost")])),
            ("address family", s("IP4")),
        ])
        .unwrap();
    assert_eq!(result(&o), "error");
    assert!(reason(&o).contains("192.0.2.99 is not on this host"), "{o:?}");
    // Four port pairs per address: the baseline call holds one on each,
    // three more calls fit, the next finds the range used up.
    for c in ["second", "third", "fourth"] {
        assert_eq!(result(&offer(&mut ng, c, "2001:db8:1::2", 9022)), "ok", "{c}");
    }
    let o = offer(&mut ng, "fifth", "2001:db8:1::2", 9024);
    assert!(reason(&o).starts_with("Ran out of ports"), "{o:?}");
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"address-not-on-host\"}"), 1);
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"ports-exhausted\"}"), 1);
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"no-descriptors\"}"), 0);
    assert_eq!(lab.metric("v6gate_trgw_calls_total{event=\"created\"}"), 4);
    assert_eq!(lab.metric("v6gate_trgw_calls"), 4);
    // Relayed packets are counted monotonically: deleting a call keeps them.
    base.check("counted");
    let before = lab.metric("v6gate_trgw_relayed_packets_total{kind=\"rtp\"}");
    assert!(before >= 6, "{before}");
    let d = ng.cmd(vec![("command", s("delete")), ("call-id", s("second"))]).unwrap();
    assert_eq!(result(&d), "ok");
    assert!(lab.metric("v6gate_trgw_relayed_packets_total{kind=\"rtp\"}") >= before);
    base.check("after");
}

/// Case 7: a file with only [trgw] runs the admin API and reloads on
/// SIGHUP; every reload path records `reloads.last_error`.
#[test]
fn trgw_only_daemon_serves_admin_and_every_reload_path_records_errors() {
    let trgw =
        "[admin]\nlisten = \"127.0.0.1:9164\"\n[daemon]\nlog-level = \"info\"\n[trgw]\nng = \"127.0.0.1:2299\"\n\
                [[trgw.interface]]\nname = \"v4\"\nipv4 = \"198.51.100.1\"\n";
    let lab = Lab::start(trgw);
    let st = lab.status();
    assert_eq!(st["functions"], serde_json::json!(["trgw"]), "{st}");
    assert!(st["device"].is_null(), "{st}");
    // SIGHUP with a bad file: rejected, recorded; a good one: applied, cleared.
    lab.write_config(&trgw.replace("log-level = \"info\"", "log-level = \"loud\""));
    lab.sighup();
    lab.wait_metric("v6gate_config_reloads_total{result=\"error\"}", |v| v == 1);
    assert!(lab.status()["reloads"]["last_error"].as_str().unwrap().contains("log-level"));
    lab.write_config(&trgw.replace("log-level = \"info\"", "log-level = \"debug\""));
    lab.sighup();
    lab.wait_metric("v6gate_config_reloads_total{result=\"ok\"}", |v| v == 1);
    assert!(lab.status()["reloads"]["last_error"].is_null());
    // The API path records too.
    lab.write_config(&trgw.replace("[trgw]", "[siit]\npool6 = \"64:ff9b:1::/96\"\n[trgw]"));
    let e = lab.ctl(&["reload"]).unwrap_err();
    assert!(e.contains("without a TUN device"), "{e}");
    let last = lab.status()["reloads"]["last_error"].as_str().unwrap_or("").to_string();
    assert!(last.contains("without a TUN device"), "{last}");
    // The relay still answers.
    let pong = in_ns(&lab.gw, || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.send_to(b"p d7:command4:pinge", "127.0.0.1:2299").unwrap();
        let mut buf = [0u8; 64];
        let n = s.recv(&mut buf).unwrap();
        buf[..n].to_vec()
    });
    assert_eq!(pong, b"p d6:result4:ponge");
}

/// `config check` refuses overlapping prefixes across tables naming both
/// keys, and warns (exit 0) about a network-facing admin API without a token.
#[test]
fn config_check_refuses_overlaps_and_warns_about_an_open_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let f = dir.path().join("c.toml");
        std::fs::write(&f, text).unwrap();
        let out = std::process::Command::new(BIN)
            .args(["config", "check", "--config"])
            .arg(&f)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = check(
        "[siit]\npool6 = \"64:ff9b:1::/96\"\n[nat64]\npool6 = \"64:ff9b:1::/96\"\npool4 = [\"203.0.113.0/30\"]\n",
    );
    assert!(!ok && err.contains("[siit] pool6") && err.contains("[nat64] pool6"), "{err}");
    let (ok, _, err) = check(
        "[siit]\npool6 = \"64:ff9b:1::/96\"\neamt = [[\"2001:db8::/124\", \"203.0.113.0/28\"]]\n\
         [nat64]\npool6 = \"64:ff9b:2::/96\"\npool4 = [\"203.0.113.4/30\"]\n",
    );
    assert!(!ok && err.contains("[siit] eamt[0].ipv4") && err.contains("[nat64] pool4[0]"), "{err}");
    let (ok, out, err) = check("[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\nlisten = \"0.0.0.0:9164\"\n");
    assert!(ok && out.trim() == "ok", "{out} {err}");
    assert!(err.contains("warning") && err.contains("not a loopback address"), "{err}");
    let (ok, _, err) = check(&format!(
        "[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\nlisten = \"0.0.0.0:9164\"\ntoken = \"{TOKEN}\"\n"
    ));
    assert!(ok && err.is_empty(), "{err}");
}
