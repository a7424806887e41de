//! Issue #29 D5 in the runner, on loopback: the TCP budgets (connections
//! per client) and time limits (idle and message timeouts).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[path = "common/wire.rs"]
mod wire;
use wire::{options, status, wait_for};

/// The runner on ports the kernel picks: the UDP port's number may be in
/// use for TCP already (a client socket of another test took it as its
/// ephemeral port), so binding is tried again on another.
fn spawn(cfg: alg::Config) -> alg::runner::AlgHandle {
    let mut last = None;
    for _ in 0..10 {
        match alg::runner::spawn(cfg.clone(), None, Some(Box::new(alg::realm::StaticResolver::default()))) {
            Ok(h) => return h,
            Err(e) => last = Some(e),
        }
    }
    panic!("cannot start the ALG: {last:?}");
}

/// D5: one client holds at most its share of the accepted connections
/// (another client still connects), an idle connection is closed, and a
/// message that does not complete in time is closed too.
#[test]
fn tcp_connections_are_capped_per_client_and_idle_or_slow_ones_closed() {
    let cfg = alg::Config {
        listen_v6: "[::1]:0".parse().unwrap(),
        listen_v4: "127.0.0.1:0".parse().unwrap(),
        media: alg::config::MediaMode::None,
        max_connections: 8,
        client_share: 25,
        tcp_idle_timeout: Duration::from_secs(1),
        tcp_message_timeout: Duration::from_millis(500),
        ..alg::Config::default()
    };
    let h = spawn(cfg);
    let (a4, a6) = (h.udp_v4, h.udp_v6);
    let closed = |t: &mut TcpStream| {
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 64];
        matches!(t.read(&mut b), Ok(0) | Err(_))
    };
    let mut held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(a4).unwrap()).collect();
    wait_for("two connections", || h.snapshot().tcp.inbound == 2);
    let mut third = TcpStream::connect(a4).unwrap();
    assert!(closed(&mut third), "the third connection of 127.0.0.1 is closed");
    wait_for("the refusal counted as client-share", || h.snapshot().stats.tcp_refused[1] == 1);
    // Another client (::1) is served.
    let mut other = TcpStream::connect(a6).unwrap();
    let me = other.local_addr().unwrap();
    other.write_all(&options(me, &format!("sip:{a6}"), 1, "TCP")).unwrap();
    other.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 2048];
    let n = other.read(&mut b).unwrap();
    assert_eq!(status(&b[..n]), 200, "{}", String::from_utf8_lossy(&b[..n]));
    // The idle ones are closed by tcp-idle-timeout.
    for t in held.iter_mut().chain([&mut other]) {
        assert!(closed(t), "idle connection closed");
    }
    wait_for("idle closes counted", || h.snapshot().stats.tcp_closed[0] == 3);
    // A head that never ends is closed by tcp-message-timeout, however it
    // keeps the connection busy.
    let mut slow = TcpStream::connect(a4).unwrap();
    slow.write_all(b"OPTIONS sip:x@y SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bK-s\r\n").unwrap();
    let mut gone = false;
    for _ in 0..200 {
        if slow.write_all(b"X: y\r\n").is_err() {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(gone || closed(&mut slow), "slow message closed");
    wait_for("message-timeout counted", || h.snapshot().stats.tcp_closed[1] == 1);
    wait_for("slots given back", || h.snapshot().tcp.inbound == 0);
}

/// A busy stream whose reads never end between messages is not a slow
/// message: each message it completes starts the next one's clock.
#[test]
fn a_busy_stream_split_mid_message_is_not_timed_out() {
    let cfg = alg::Config {
        listen_v6: "[::1]:0".parse().unwrap(),
        listen_v4: "127.0.0.1:0".parse().unwrap(),
        media: alg::config::MediaMode::None,
        rate_limit: 0,
        tcp_message_timeout: Duration::from_millis(500),
        ..alg::Config::default()
    };
    let h = spawn(cfg);
    let a4 = h.udp_v4;
    let mut t = TcpStream::connect(a4).unwrap();
    t.set_nodelay(true).unwrap();
    let me = t.local_addr().unwrap();
    let msgs: Vec<Vec<u8>> = (0..40).map(|n| options(me, &format!("sip:{a4}"), n, "TCP")).collect();
    // Each write: the second half of one message and the first of the next.
    let half = msgs[0].len() / 2;
    t.write_all(&msgs[0][..half]).unwrap();
    for n in 0..40 {
        let mut w = msgs[n][half..].to_vec();
        if let Some(next) = msgs.get(n + 1) {
            w.extend_from_slice(&next[..half]);
        }
        t.write_all(&w).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    // 2 s of one stream, never between messages at a read's end: all answered.
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while got.windows(12).filter(|w| w == b"SIP/2.0 200 ").count() < 40 {
        match t.read(&mut b) {
            Ok(0) | Err(_) => {
                panic!("closed after {} answers", got.windows(12).filter(|w| w == b"SIP/2.0 200 ").count())
            }
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
    assert_eq!(h.snapshot().stats.tcp_closed[1], 0, "no message timeout");
}
