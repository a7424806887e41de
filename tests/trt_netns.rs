//! `v6gate trt` in network namespaces (issue #15): an IPv6-only client,
//! the relay, an IPv4-only server.
//!
//! ```text
//!  h6 ns                      gw ns (v6gate trt)                   h4 ns
//!  2001:db8:1::2/64  ------  2001:db8:1::1/64  198.51.100.254/24 ------ 198.51.100.1/24
//!  64:ff9b:1::/96 via gw
//! ```
//!
//! An HTTP download (curl) and a SIP call's signalling (SIPp UAC and UAS)
//! through the relay prefix; UDP flows expiring; a static mapping for an
//! IPv4-initiated connection; a connection flood beyond max-connections
//! and an unreachable server reset and counted.

#[path = "daemon_util/mod.rs"]
mod daemon_util;
#[path = "trt_util/mod.rs"]
mod trt_util;

use daemon_util::{in_ns, tcp_echo, udp_echo};
use lab::netns::Netns;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use trt_util::{bed, sa, spawn_bed, SERVER6};

/// An HTTP server on a thread in `ns` that answers one GET with `body`.
fn http_server(ns: &Netns, port: u16, body: Vec<u8>) -> std::thread::JoinHandle<SocketAddr> {
    let name = ns.name().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        let l = TcpListener::bind(("0.0.0.0", port)).unwrap();
        tx.send(()).unwrap();
        let (mut c, from) = l.accept().unwrap();
        let mut req = [0u8; 4096];
        let mut got = 0;
        while !req[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            let n = c.read(&mut req[got..]).unwrap();
            assert!(n > 0);
            got += n;
        }
        write!(c, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n", body.len()).unwrap();
        c.write_all(&body).unwrap();
        from
    });
    rx.recv().unwrap();
    h
}

#[test]
fn trt_http_download_udp_static_mapping_and_limits() {
    lab::need_root_and_programs!("nft", "curl");
    let mut b = bed("udp-timeout = \"2s\"\nmax-connections = 4\n[[trt.static]]\nlisten = \"198.51.100.254:8081\"\nto = \"[2001:db8:1::2]:9000\"\n");
    // HTTP download of 8 MB with curl from the IPv6-only client.
    let body: Vec<u8> = (0..8_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let srv = http_server(&b.h4, 8080, body.clone());
    let file = b.dir.path().join("download");
    let out = b
        .h6
        .command("curl")
        .args(["-sS", "-g", "--max-time", "30", "-o", file.to_str().unwrap(), &format!("http://[{SERVER6}]:8080/big")])
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    let from = srv.join().unwrap();
    assert_eq!(from.ip().to_string(), "198.51.100.254", "the server sees the relay's IPv4 address");
    assert!(std::fs::read(&file).unwrap() == body, "downloaded bytes differ");
    // The connection is counted and leaves the relay (it may lag curl's exit).
    b.wait_status(|v| {
        v["tcp_relayed"] == 1
            && v["bytes_down"].as_u64().unwrap_or(0) >= 8_000_000
            && v["bytes_up"].as_u64().unwrap_or(0) > 0
            && v["tcp_active"] == 0
    });

    // TCP echo on another port, and UDP: the relay handles any port.
    let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let (got, _) = tcp_echo(&b.h4, sa("0.0.0.0:4443"), &b.h6, sa(&format!("[{SERVER6}]:4443")), &big);
    assert!(got == big);
    let (got, from) = udp_echo(&b.h4, sa("0.0.0.0:5353"), &b.h6, sa(&format!("[{SERVER6}]:5353")), b"udp through TRT");
    assert_eq!(got, b"udp through TRT");
    assert_eq!(from.ip().to_string(), "198.51.100.254");
    b.wait_status(|v| v["udp_flows"] == 1);
    // The flow expires after udp-timeout (2 s).
    b.wait_status(|v| v["udp_flows"] == 0 && v["udp_flows_expired"].as_u64().unwrap_or(0) >= 1);

    // IPv4-initiated: the static mapping 198.51.100.254:8081 -> [2001:db8:1::2]:9000.
    let (got, from) = tcp_echo(&b.h6, sa("[::]:9000"), &b.h4, sa("198.51.100.254:8081"), b"from the IPv4 side");
    assert_eq!(got, b"from the IPv4 side");
    assert_eq!(from.ip().to_string(), "2001:db8:1::1");

    // An unreachable IPv4 server: the client's connection is reset, counted.
    // (The reset may come before connect() has returned.)
    let refused = in_ns(&b.h6, || {
        let mut c = TcpStream::connect_timeout(&sa(&format!("[{SERVER6}]:1")), Duration::from_secs(5))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = [0u8; 1];
        c.read(&mut buf)
    });
    assert!(matches!(refused, Err(_) | Ok(0)), "{refused:?}");
    b.wait_status(|v| v["tcp_connect_failed"].as_u64().unwrap_or(0) >= 1);

    // A connection flood: the server keeps connections open; four are
    // relayed, the rest reset at once and counted. The connections above
    // must have left the relay first, or they would take places.
    b.wait_status(|v| v["tcp_active"] == 0);
    let name = b.h4.name().to_string();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let hold = std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        let l = TcpListener::bind("0.0.0.0:6000").unwrap();
        l.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        let mut held = Vec::new();
        // Accept until the client side has read its outcomes and the
        // relayed connections have all arrived (bounded).
        let t0 = Instant::now();
        let mut done = false;
        while !(done && held.len() >= 4) && t0.elapsed() < Duration::from_secs(30) {
            done = done || done_rx.try_recv().is_ok();
            if let Ok((c, _)) = l.accept() {
                held.push(c);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        held.len()
    });
    ready_rx.recv().unwrap();
    let mut conns = in_ns(&b.h6, || {
        (0..12)
            .map(|_| {
                // The relay may reset a refused connection before connect()
                // has even returned: that is a refusal too.
                let c = TcpStream::connect_timeout(&sa(&format!("[{SERVER6}]:6000")), Duration::from_secs(5)).ok();
                // In order, so the first four are the ones relayed.
                std::thread::sleep(Duration::from_millis(50));
                c
            })
            .collect::<Vec<_>>()
    });
    // Every refusal is counted before the outcomes are read, so a late
    // reset cannot pass for an open connection.
    let s = b.wait_status(|v| v["tcp_refused"].as_u64().unwrap_or(0) >= 8);
    let outcomes = conns
        .iter_mut()
        .map(|c| {
            let Some(c) = c else { return "reset" };
            c.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            let mut buf = [0u8; 1];
            match c.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                    "open"
                }
                _ => "reset",
            }
        })
        .collect::<Vec<_>>();
    done_tx.send(()).unwrap();
    let open = outcomes.iter().filter(|o| **o == "open").count();
    assert_eq!(open, 4, "{outcomes:?}");
    assert_eq!(hold.join().unwrap(), 4);
    assert!(s["trt"]["tcp_active"].as_u64().unwrap() <= 4);
    b.stop();
    // The relay removed its nftables table and its rule.
    let tables = b.gw.exec("nft", &["list", "tables"]).unwrap();
    assert!(!String::from_utf8_lossy(&tables.stdout).contains("v6gate_trt"));
    let rules = b.gw.ip(&["-6", "rule", "show"]).unwrap();
    assert!(!String::from_utf8_lossy(&rules.stdout).contains("9331"), "{}", String::from_utf8_lossy(&rules.stdout));
}

#[test]
fn trt_carries_a_sip_call_signalling_flow() {
    lab::need_root_and_programs!("nft", "sipp");
    let b = bed("");
    // SIPp UAS on the IPv4-only server, UAC on the IPv6-only client.
    let uas_log = b.dir.path().join("uas.log");
    let mut uas = b
        .h4
        .command("sipp")
        .args(["-sn", "uas", "-i", "198.51.100.1", "-p", "5060", "-t", "u1", "-m", "1", "-nostdin", "-timeout", "30s"])
        .current_dir(b.dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&uas_log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let uas = Kill(&mut uas);
    std::thread::sleep(Duration::from_millis(500));
    let uac =
        b.h6.command("sipp")
            .args([
                "-sn",
                "uac",
                &format!("[{SERVER6}]:5060"),
                "-i",
                "2001:db8:1::2",
                "-p",
                "5061",
                "-m",
                "1",
                "-d",
                "100",
                "-t",
                "u1",
                "-nostdin",
                "-timeout",
                "20s",
                "-timeout_error",
            ])
            .stdin(Stdio::null())
            .current_dir(b.dir.path())
            .output()
            .unwrap();
    assert!(
        uac.status.success(),
        "SIPp UAC call through TRT failed ({}): {} {}\n{}",
        uac.status,
        String::from_utf8_lossy(&uac.stdout).lines().rev().take(30).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&uac.stderr),
        b.log()
    );
    let t0 = Instant::now();
    let uas_ok = loop {
        if let Some(st) = uas.0.try_wait().unwrap() {
            break st.success();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the UAS did not finish its call");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(uas_ok, "SIPp UAS: {}", std::fs::read_to_string(&uas_log).unwrap_or_default());
    // INVITE, ACK, BYE up; 100/180/200 and the BYE's 200 down, on one flow.
    let s = b.wait_status(|v| v["udp_in"].as_u64().unwrap_or(0) >= 3 && v["udp_out"].as_u64().unwrap_or(0) >= 3);
    assert_eq!(s["trt"]["udp_flows_created"], 1, "{s}");
    let _ = &b.gw;
}

/// What the relay must keep whichever way it copies: a server that speaks
/// first, a client whose bytes come before the IPv4 side is connected, a
/// half-close each way with all the bytes before it, and a reset each way.
/// The TCP semantics with `copy`, and `preconnect` (0: off).
fn tcp_semantics(copy: &str, preconnect: usize) {
    tcp_semantics_with(copy, preconnect, "")
}

fn tcp_semantics_with(copy: &str, preconnect: usize, extra: &str) {
    let b = bed(&format!("copy = \"{copy}\"\npreconnect = {preconnect}\n{extra}"));
    assert_eq!(b.status()["copy"], copy, "{}", b.log());
    let name = b.h4.name().to_string();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    // The server: a banner at once; then reads the upload to its end
    // (the client's half-close), answers with its length and a 1 MB tail,
    // and closes. The second connection it resets (linger 0) after one
    // byte; the third it reads until the client's reset.
    let srv = std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        let l = TcpListener::bind("0.0.0.0:7000").unwrap();
        ready_tx.send(()).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(b"220 banner\r\n").unwrap();
        let mut up = Vec::new();
        c.read_to_end(&mut up).unwrap();
        writeln!(c, "{}", up.len()).unwrap();
        let tail: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        c.write_all(&tail).unwrap();
        drop(c);
        let (mut c, _) = l.accept().unwrap();
        let mut one = [0u8; 1];
        c.read_exact(&mut one).unwrap();
        socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
        drop(c);
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut sink = Vec::new();
        let r = c.read_to_end(&mut sink);
        (up, r.map_err(|e| e.kind()))
    });
    ready_rx.recv().unwrap();
    let dst = sa(&format!("[{SERVER6}]:7000"));
    let upload: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let (banner, answer, reset_seen) = in_ns(&b.h6, || {
        let mut c = TcpStream::connect(dst).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // Upload first (the bytes may arrive before the relay has
        // connected), then the banner is there to read.
        c.write_all(&upload).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        // The reset: one byte up, the server resets, the client sees it.
        let mut r = TcpStream::connect(dst).unwrap();
        r.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        r.write_all(b"x").unwrap();
        let mut buf = [0u8; 16];
        let reset = r.read(&mut buf);
        // The client resets: the server's read ends in an error.
        let k = TcpStream::connect(dst).unwrap();
        (&k).write_all(b"bye").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        socket2::SockRef::from(&k).set_linger(Some(Duration::ZERO)).unwrap();
        drop(k);
        // The banner line and the length line, then the tail.
        let nl = |from: usize| rest[from..].iter().position(|&x| x == b'\n').map(|i| from + i + 1);
        let split = nl(0).and_then(nl).expect("two lines before the tail");
        let (head, tail) = rest.split_at(split);
        (head.to_vec(), tail.to_vec(), reset.map_err(|e| e.kind()))
    });
    let (up, last) = srv.join().unwrap();
    assert!(up == upload, "the server got {} of {} bytes, or other bytes", up.len(), upload.len());
    let text = String::from_utf8_lossy(&banner).into_owned();
    assert!(text.starts_with("220 banner\r\n3000000\n"), "{text:?}");
    let tail: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    assert!(answer == tail, "the client got {} of 1000000 tail bytes, or other bytes", answer.len());
    assert_eq!(reset_seen, Err(std::io::ErrorKind::ConnectionReset));
    assert_eq!(last, Err(std::io::ErrorKind::ConnectionReset));
    let s = b.wait_status(|v| {
        v["tcp_active"] == 0
            && v["tcp_relayed"] == 3
            && v["tcp_errors"].as_u64().unwrap_or(0) >= 2
            && v["bytes_up"].as_u64().unwrap_or(0) >= 3_000_001
            && v["bytes_down"].as_u64().unwrap_or(0) >= 1_000_020
    });
    assert_eq!(s["trt"]["tcp_connect_failed"], 0, "{s}");
    // With pre-connect, each of the three connects started at the
    // client's SYN (the raw socket saw the tproxied SYNs) and was taken by
    // its accept; none was left over.
    let n = if preconnect > 0 { 3 } else { 0 };
    let s = b.wait_status(|v| v["tcp_preconnects"] == n && v["tcp_preconnect_claimed"] == n);
    assert_eq!(s["trt"]["tcp_preconnect_expired"], 0, "{s}");
    assert_eq!(s["trt"]["tcp_preconnect_refused"], 0, "{s}");
    // Only the loop's copy holds the server's handshake ACK for the first
    // bytes (and may send it alone); the others never count one.
    let alone = s["trt"]["tcp_ack_alone"].as_u64().expect("tcp_ack_alone in the status");
    if copy != "splice" {
        assert_eq!(alone, 0, "{s}");
    }
}

#[test]
fn trt_sockmap_keeps_half_close_resets_and_early_bytes() {
    lab::need_root_and_programs!("nft");
    tcp_semantics("sockmap", 0);
}

#[test]
fn trt_splice_keeps_half_close_resets_and_early_bytes() {
    lab::need_root_and_programs!("nft");
    tcp_semantics("splice", 0);
}

#[test]
fn trt_splice_threads_keeps_half_close_resets_and_early_bytes() {
    lab::need_root_and_programs!("nft");
    tcp_semantics("splice-threads", 0);
}

#[test]
fn trt_preconnect_keeps_half_close_resets_and_early_bytes() {
    lab::need_root_and_programs!("nft");
    tcp_semantics("splice", 8);
}

#[test]
fn trt_sockmap_preconnect_keeps_half_close_resets_and_early_bytes() {
    lab::need_root_and_programs!("nft");
    tcp_semantics("sockmap", 8);
}

#[test]
fn trt_splice_with_its_own_congestion_control_keeps_half_close_resets_and_early_bytes() {
    lab::need_root_and_programs!("nft");
    tcp_semantics_with("splice", 0, "congestion-control = \"reno\"\n");
}

#[test]
fn trt_refuses_to_start_with_a_congestion_control_the_kernel_lacks() {
    lab::need_root_and_programs!("nft");
    let mut b = spawn_bed("congestion-control = \"no-such-cc\"\n");
    let c = b.relay.as_mut().unwrap();
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the relay kept running: {}", b.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    b.relay = None;
    assert!(!st.success());
    let log = b.log();
    assert!(log.contains("[trt] congestion-control: `no-such-cc`"), "{log}");
    // Nothing was left installed: the nftables table is not there.
    let tables = b.gw.exec("nft", &["list", "tables"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let tables = tables.unwrap();
    assert!(!tables.contains("v6gate_trt"), "{tables}");
}

/// The machine's PM QoS CPU latency limit.
fn cpu_latency_limit() -> Duration {
    netsys::cpu_latency::current().unwrap()
}

#[test]
fn trt_holds_its_cpu_latency_request_while_it_runs() {
    lab::need_root_and_programs!("nft");
    let before = cpu_latency_limit();
    let mut b = bed("cpu-latency = \"4us\"\n");
    let us4 = Duration::from_micros(4);
    assert!(cpu_latency_limit() <= us4, "limit {:?} while the relay runs: {}", cpu_latency_limit(), b.log());
    assert!(b.log().contains("holding the CPU wake-up latency request"), "{}", b.log());
    b.stop();
    // Withdrawn with the relay (unless another holder already asked for as little).
    let after = cpu_latency_limit();
    assert!(after == before || before <= us4, "{before:?} → {after:?}");
}

/// Issue #29 (D11's destinations): a target the destination policy
/// refuses — the relay host's own address, link-local — is never
/// connected to: the client is reset and the refusal counted by reason.
#[test]
fn trt_refuses_the_gateways_own_addresses_and_link_local_targets() {
    lab::need_root_and_programs!("nft");
    let b = bed("");
    // A service on the relay host itself, which a client must not reach
    // through the relay prefix.
    let own = in_ns(&b.gw, || TcpListener::bind("198.51.100.254:8099").unwrap());
    own.set_nonblocking(true).unwrap();
    for (target, why) in [("64:ff9b:1::c633:64fe", "own-address"), ("64:ff9b:1::a9fe:1", "link-local")] {
        let got = in_ns(&b.h6, || {
            let mut c = TcpStream::connect(sa(&format!("[{target}]:8099"))).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = c.write_all(b"GET / HTTP/1.0\r\n\r\n");
            let mut buf = [0u8; 16];
            c.read(&mut buf)
        });
        assert!(
            matches!(&got, Ok(0)) || got.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{target}: {got:?}"
        );
        let t0 = Instant::now();
        while b.status()["destinations_refused"][why].as_u64().unwrap_or(0) < 1 {
            assert!(t0.elapsed() < Duration::from_secs(15), "{why} never counted: {}\n{}", b.status(), b.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(own.accept().is_err(), "the relay connected to its own host");
    let st = b.status();
    assert_eq!(st["destinations_refused"]["own-address"], 1, "{st}");
    assert_eq!(st["destinations_refused"]["link-local"], 1, "{st}");
    assert_eq!(st["trt"]["tcp_no_server"], 2, "{st}");
}

/// `v6gate trt` has the daemon's signals (the one standalone runner):
/// SIGHUP re-reads the file and refuses a changed `[trt]` without
/// stopping (before the runner, SIGHUP killed it), applies an unchanged
/// one, and SIGTERM stops it and removes its nftables table.
#[test]
fn trt_alone_reloads_on_sighup_and_stops_on_sigterm() {
    lab::need_root_and_programs!("nft");
    let mut b = bed("");
    let cfg = b.dir.path().join("trt.toml");
    let hup = |b: &trt_util::Bed| {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(b.relay.as_ref().unwrap().id() as i32, libc::SIGHUP) };
    };
    let wait_log = |b: &trt_util::Bed, line: &str| {
        let t0 = Instant::now();
        while !b.log().contains(line) {
            assert!(t0.elapsed() < Duration::from_secs(10), "no `{line}` in the log:\n{}", b.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    std::fs::write(&cfg, "[trt]\nprefix = \"64:ff9b:2::/96\"\n").unwrap();
    hup(&b);
    wait_log(&b, "SIGHUP: reload refused: [trt] changed: restart v6gate to apply");
    assert!(b.relay.as_mut().unwrap().try_wait().unwrap().is_none(), "SIGHUP stopped the relay: {}", b.log());
    std::fs::write(&cfg, "[trt]\nprefix = \"64:ff9b:1::/96\"\n").unwrap();
    hup(&b);
    wait_log(&b, "SIGHUP: reloaded");
    // Still relaying and reporting.
    b.wait_status(|v| v.is_object());
    let tables = b.gw.exec("nft", &["list", "tables"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    assert!(tables.unwrap().contains("v6gate_trt"));
    b.stop();
    assert!(b.log().contains("signal 15: stopping"), "{}", b.log());
    let tables = b.gw.exec("nft", &["list", "tables"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    assert!(!tables.unwrap().contains("v6gate_trt"));
}
