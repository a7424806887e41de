//! Issue #29 D11 against `v6gate trt` in network namespaces: one host
//! with many addresses of one /64 no longer locks everyone out. It holds
//! at most its share of TCP connections, of connects in progress (to a
//! black-holed server) and of UDP flows; what is beyond is refused with a
//! reset or an ICMPv6 error and counted, and another client is served
//! meanwhile. A relayed connection with no byte either way for
//! `tcp-idle-timeout` is reset, in each copy mode.

#[path = "daemon_util/mod.rs"]
mod daemon_util;
mod hardening_util;
#[path = "trt_util/mod.rs"]
mod trt_util;

use daemon_util::in_ns;
use hardening_util::tcp_echo_server as echo_server;
use lab::netns::Netns;
use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};
use trt_util::{bed, sa, Bed, SERVER6};

/// Addresses of the client's /64 (2001:db8:1::/64) that one host uses.
const MANY: u16 = 30;

fn many(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0x100, i)
}

/// Another client: a /64 of its own.
const OTHER: &str = "2001:db8:2::2";

/// The h6 namespace's extra addresses: `MANY` of its /64 and the other
/// client's, routed back by the relay's namespace.
fn addresses(b: &Bed) {
    for i in 0..MANY {
        b.h6.ip(&["addr", "add", &format!("{}/64", many(i)), "dev", "c6", "nodad"]).unwrap();
    }
    b.h6.ip(&["addr", "add", &format!("{OTHER}/64"), "dev", "c6", "nodad"]).unwrap();
    b.gw.ip(&["-6", "route", "add", "2001:db8:2::/64", "via", "2001:db8:1::2"]).unwrap();
}

/// Whether the relay reset `c` (or it is closed): a read that ends.
/// A TCP connection from `src` (port chosen) to `dst`, or the error.
fn connect_from(src: Ipv6Addr, dst: SocketAddr) -> std::io::Result<TcpStream> {
    hardening_util::connect_from(src.into(), dst, Duration::from_secs(5))
}

fn was_reset(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut b = [0u8; 1];
    match c.read(&mut b) {
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        Ok(n) => n == 0,
    }
}

/// One echo exchange over a connection from `src`.
fn echo_from(src: Ipv6Addr, dst: SocketAddr, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut c = connect_from(src, dst)?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.write_all(msg)?;
    let mut back = vec![0u8; msg.len()];
    c.read_exact(&mut back)?;
    Ok(back)
}

fn counter(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

#[test]
fn one_host_with_many_addresses_holds_only_its_share() {
    lab::need_root_and_programs!("nft");
    let b = bed("max-connections-per-client = 20\nmax-connecting-per-client = 5\nmax-udp-flows-per-client = 10\nudp-timeout = \"1m\"\n");
    addresses(&b);
    echo_server(&b.h4, 6000);
    // A black hole: the relay's route to 203.0.113.0/24 leads to the
    // server's namespace, which does not forward: SYNs vanish, connects hang.
    b.gw.ip(&["route", "add", "203.0.113.0/24", "via", "198.51.100.1"]).unwrap();
    let hole = sa("[64:ff9b:1::cb00:7109]:80");
    let server = sa(&format!("[{SERVER6}]:6000"));

    // Connects in progress: ten from the /64 to the black hole, five at a time.
    let pending = in_ns(&b.h6, || (0..10).map(|i| connect_from(many(i), hole)).collect::<Vec<_>>());
    let s = b.wait_status(|v| counter(v, "tcp_refused_connecting") == 5 && counter(v, "tcp_active") == 5);
    assert_eq!(counter(&s["trt"], "tcp_relayed"), 0);
    // Meanwhile another client is served.
    let back = in_ns(&b.h6, || echo_from(OTHER.parse().unwrap(), server, b"served meanwhile")).unwrap();
    assert_eq!(back, b"served meanwhile");
    // The five time out (connect-timeout, 5 s) and are reset.
    b.wait_status(|v| counter(v, "tcp_connect_failed") >= 5 && counter(v, "tcp_active") == 0);
    drop(pending);

    // Connections: thirty from the /64, twenty relayed, ten reset at once.
    let mut conns = in_ns(&b.h6, || (0..MANY).map(|i| connect_from(many(i), server)).collect::<Vec<_>>());
    let s = b.wait_status(|v| counter(v, "tcp_refused_client") == 10);
    assert_eq!(counter(&s["trt"], "tcp_active"), 20, "{s}");
    let (mut open, mut reset) = (0, 0);
    for c in conns.iter_mut() {
        let alive = match c {
            Ok(c) => !was_reset(c),
            Err(_) => false,
        };
        if alive {
            open += 1;
        } else {
            reset += 1;
        }
    }
    assert_eq!((open, reset), (20, 10));
    // The other client still gets through, and so does the /64 once it lets go.
    let back = in_ns(&b.h6, || echo_from(OTHER.parse().unwrap(), server, b"still served")).unwrap();
    assert_eq!(back, b"still served");
    drop(conns);
    b.wait_status(|v| counter(v, "tcp_active") == 0);
    let back = in_ns(&b.h6, || echo_from(many(0), server, b"room again")).unwrap();
    assert_eq!(back, b"room again");

    // UDP: thirty flows from the /64, ten relayed; the rest refused with
    // ICMPv6 administratively prohibited, which the client's socket sees.
    let name = b.h4.name().to_string();
    std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        let s = UdpSocket::bind("0.0.0.0:5353").unwrap();
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let dst = sa(&format!("[{SERVER6}]:5353"));
    let outcomes = in_ns(&b.h6, || {
        (0..MANY)
            .map(|i| {
                let s = UdpSocket::bind(SocketAddr::new(many(i).into(), 0)).unwrap();
                s.connect(dst).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                s.send(b"flow").unwrap();
                let mut b = [0u8; 16];
                s.recv(&mut b).map_err(|e| e.raw_os_error())
            })
            .collect::<Vec<_>>()
    });
    let answered = outcomes.iter().filter(|o| o.is_ok()).count();
    let prohibited = outcomes.iter().filter(|o| **o == Err(Some(libc::EACCES))).count();
    let unanswered = outcomes.iter().filter(|o| **o == Err(Some(libc::EAGAIN))).count();
    assert_eq!((answered, prohibited + unanswered), (10, 20), "{outcomes:?}");
    // The errors are rate-limited (100 a second, 10 at once): the ones
    // over it are counted, not sent.
    assert!(prohibited >= 10, "{outcomes:?}");
    let s = b.wait_status(|v| counter(v, "udp_refused_client") == 20);
    let t = &s["trt"];
    assert_eq!(counter(t, "udp_flows_created"), 10, "{s}");
    assert_eq!(
        (counter(t, "udp_icmp_sent"), counter(t, "udp_icmp_suppressed")),
        (prohibited as u64, unanswered as u64)
    );
    let other = in_ns(&b.h6, || {
        let s = UdpSocket::bind(SocketAddr::new(OTHER.parse::<Ipv6Addr>().unwrap().into(), 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.send_to(b"other", dst).unwrap();
        let mut b = [0u8; 16];
        s.recv(&mut b).map(|n| b[..n].to_vec())
    });
    assert_eq!(other.unwrap(), b"other");
}

/// A connection that moves nothing for `tcp-idle-timeout` (10 s, its
/// least) is reset at both ends; one that talks lives on.
fn idle_connections_are_reset(copy: &str) {
    let b = bed(&format!("copy = \"{copy}\"\ntcp-idle-timeout = \"10s\"\n"));
    echo_server(&b.h4, 6000);
    let server = sa(&format!("[{SERVER6}]:6000"));
    in_ns(&b.h6, || {
        let mut quiet = TcpStream::connect(server).unwrap();
        let mut busy = TcpStream::connect(server).unwrap();
        busy.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t0 = Instant::now();
        // The busy one talks every half second; the quiet one waits.
        while !was_reset(&mut quiet) {
            assert!(t0.elapsed() < Duration::from_secs(30), "{copy}: the idle connection was never reset");
            busy.write_all(b"x").unwrap();
            let mut one = [0u8; 1];
            busy.read_exact(&mut one).unwrap();
        }
        assert!(t0.elapsed() >= Duration::from_secs(9), "{copy}: not before the timeout");
        busy.write_all(b"y").unwrap();
        let mut one = [0u8; 1];
        busy.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"y", "{copy}: the busy connection lives on");
    });
    let s = b.wait_status(|v| counter(v, "tcp_idle_closed") == 1);
    assert_eq!(counter(&s["trt"], "tcp_errors"), 0, "{s}");
}

#[test]
fn idle_connections_are_reset_splice() {
    lab::need_root_and_programs!("nft");
    idle_connections_are_reset("splice");
}

#[test]
fn idle_connections_are_reset_splice_threads() {
    lab::need_root_and_programs!("nft");
    idle_connections_are_reset("splice-threads");
}

#[test]
fn idle_connections_are_reset_sockmap() {
    lab::need_root_and_programs!("nft");
    idle_connections_are_reset("sockmap");
}
