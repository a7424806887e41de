//! The relay in a network namespace with IPv4 and IPv6 addresses: 6->4 and
//! 4->6 relaying, RTCP, latching (symmetric and strict), the idle timeout,
//! delete, query statistics and every control command (malformed ones
//! too) over real UDP and Unix sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use lab::netns::Netns;
use trgw::bencode::{self, Value};
use trgw::config::{Interface, Latching};
use trgw::{Config, IoMode, Relay, RelayHandle, SocketMode};

const RELAY4: &str = "192.0.2.1";
const RELAY6: &str = "2001:db8::1";
const UA4: &str = "192.0.2.50";
const UA6: &str = "2001:db8:6::10";

/// Runs `f` on a thread inside a fresh namespace whose loopback carries
/// the relay's and the user agents' addresses.
fn in_ns(f: impl FnOnce() + Send + 'static) {
    let ns = Netns::unique("trgw").expect("namespace (tests run as root)");
    for a in [format!("{RELAY4}/32"), format!("{UA4}/32"), "192.0.2.51/32".into()] {
        ns.ip(&["addr", "add", &a, "dev", "lo"]).unwrap();
    }
    for a in [format!("{RELAY6}/128"), format!("{UA6}/128")] {
        ns.ip(&["addr", "add", &a, "dev", "lo", "nodad"]).unwrap();
    }
    let ns = std::sync::Arc::new(ns);
    let ns2 = ns.clone();
    let r = std::thread::spawn(move || {
        ns2.enter_thread().unwrap();
        f();
    })
    .join();
    drop(ns);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

fn config(latching: Latching, timeout: u64) -> Config {
    Config {
        interfaces: vec![
            Interface::new("v6", None, Some(RELAY6.parse().unwrap())),
            Interface::new("v4", Some(RELAY4.parse().unwrap()), None),
        ],
        latching,
        timeout_secs: timeout,
        // A call without media both ways is early: the same timeout here.
        early_timeout_secs: timeout,
        ng: Some("127.0.0.1:0".parse().unwrap()),
        rtpproxy_udp: Some("127.0.0.1:0".parse().unwrap()),
        workers: Some(2),
        rtpproxy_internal: Some("v4".into()),
        rtpproxy_external: Some("v6".into()),
        // The user agents live on this namespace's loopback, so their
        // addresses are the host's own: allow them one by one.
        media_allow: [UA4, "192.0.2.51", UA6].iter().map(|a| a.parse().unwrap()).collect(),
        ..Config::default()
    }
}

fn udp(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    s
}

struct Ng {
    sock: UdpSocket,
    to: SocketAddr,
    n: u32,
}

impl Ng {
    fn new(r: &RelayHandle) -> Ng {
        Ng { sock: udp("127.0.0.1:0"), to: r.ng_addr().unwrap(), n: 0 }
    }

    fn raw(&mut self, body: &[u8]) -> Vec<u8> {
        self.n += 1;
        let cookie = format!("c{}", self.n);
        let mut m = format!("{cookie} ").into_bytes();
        m.extend_from_slice(body);
        self.sock.send_to(&m, self.to).unwrap();
        let mut buf = vec![0u8; 65536];
        let (n, _) = self.sock.recv_from(&mut buf).expect("ng reply");
        let r = &buf[..n];
        assert!(r.starts_with(format!("{cookie} ").as_bytes()), "cookie echoed: {}", String::from_utf8_lossy(r));
        r[cookie.len() + 1..].to_vec()
    }

    fn cmd(&mut self, pairs: Vec<(&str, Value)>) -> Value {
        let v = Value::Dict(pairs.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect());
        bencode::decode(&self.raw(&v.encode())).unwrap()
    }
}

fn s(x: &str) -> Value {
    Value::str(x)
}

fn result(v: &Value) -> &str {
    v.get("result").and_then(Value::as_str).unwrap_or("")
}

fn sdp(ip: &str, port: u16) -> String {
    let fam = if ip.contains(':') { "IP6" } else { "IP4" };
    format!("v=0\r\no=- 1 1 IN {fam} {ip}\r\ns=-\r\nc=IN {fam} {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n")
}

/// m= port and c= address of an SDP body.
fn media_of(sdp: &str) -> SocketAddr {
    let addr = sdp.lines().find_map(|l| l.strip_prefix("c=IN ")).unwrap()[4..].trim().to_string();
    let port: u16 =
        sdp.lines().find_map(|l| l.strip_prefix("m=audio ")).unwrap().split(' ').next().unwrap().parse().unwrap();
    SocketAddr::new(addr.parse().unwrap(), port)
}

fn rtp(seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p[4..8].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&[0xd5; 160]);
    p
}

fn recv(s: &UdpSocket) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = [0u8; 2048];
    s.recv_from(&mut buf).ok().map(|(n, a)| (buf[..n].to_vec(), a))
}

/// Offer from the IPv6 UA, answer from the IPv4 UA; returns (where the
/// IPv6 UA sends, where the IPv4 UA sends).
fn setup_call(ng: &mut Ng, call: &str, ua4_port: u16) -> (SocketAddr, SocketAddr) {
    let o = ng.cmd(vec![
        ("command", s("offer")),
        ("call-id", s(call)),
        ("from-tag", s("ft")),
        ("sdp", s(&sdp(UA6, 9002))),
        ("direction", Value::List(vec![s("v6"), s("v4")])),
        ("address family", s("IP4")),
        ("flags", Value::List(vec![s("trust-address")])),
        ("replace", Value::List(vec![s("origin"), s("session-connection")])),
    ]);
    assert_eq!(result(&o), "ok", "{o:?}");
    let to_relay_from4 = media_of(o.get("sdp").and_then(Value::as_str).unwrap());
    assert!(to_relay_from4.is_ipv4());
    let a = ng.cmd(vec![
        ("command", s("answer")),
        ("call-id", s(call)),
        ("from-tag", s("ft")),
        ("to-tag", s("tt")),
        ("sdp", s(&sdp(UA4, ua4_port))),
    ]);
    assert_eq!(result(&a), "ok", "{a:?}");
    let to_relay_from6 = media_of(a.get("sdp").and_then(Value::as_str).unwrap());
    assert!(to_relay_from6.is_ipv6());
    (to_relay_from6, to_relay_from4)
}

#[test]
fn relays_6_to_4_and_back_with_rtcp_stats_and_delete() {
    relay_both_ways(IoMode::Uring, SocketMode::PerPort);
}

#[test]
fn relays_with_the_epoll_engine_too() {
    relay_both_ways(IoMode::Poll, SocketMode::PerPort);
}

/// The shared-socket mode (BPF sk_lookup, raw sockets): the same
/// behaviour; it runs the epoll engine whatever `io` says.
#[test]
fn relays_with_shared_sockets_too() {
    relay_both_ways(IoMode::Uring, SocketMode::Shared);
}

fn relay_both_ways(io: IoMode, sockets: SocketMode) {
    in_ns(move || {
        let mut cfg = config(Latching::Symmetric, 60);
        cfg.io = io;
        cfg.sockets = sockets;
        let relay = Relay::start(cfg).unwrap();
        let want = if sockets == SocketMode::Shared { IoMode::Poll } else { io };
        assert_eq!(relay.io_mode(), want, "kernel 6.x runs io_uring");
        let mut ng = Ng::new(&relay);
        let (to6, to4) = setup_call(&mut ng, "call-1", 9000);
        let ua6 = udp(&format!("[{UA6}]:9002"));
        let ua6c = udp(&format!("[{UA6}]:9003"));
        let ua4 = udp(&format!("{UA4}:9000"));
        let ua4c = udp(&format!("{UA4}:9001"));

        // 6 -> 4, with a gap at seq 3 (one packet lost).
        for seq in [1u16, 2, 4, 5] {
            ua6.send_to(&rtp(seq), to6).unwrap();
            let (p, from) = recv(&ua4).expect("relayed to the IPv4 UA");
            assert_eq!(p, rtp(seq));
            assert_eq!(from, to4, "sent from the IPv4 leg's port");
        }
        // 4 -> 6.
        ua4.send_to(&rtp(100), to4).unwrap();
        let (p, from) = recv(&ua6).expect("relayed to the IPv6 UA");
        assert_eq!((p, from), (rtp(100), to6));
        // RTCP both ways on port + 1.
        let rtcp = [0x80u8, 200, 0, 6, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let rtcp6 = SocketAddr::new(to6.ip(), to6.port() + 1);
        let rtcp4 = SocketAddr::new(to4.ip(), to4.port() + 1);
        ua6c.send_to(&rtcp, rtcp6).unwrap();
        assert_eq!(recv(&ua4c).expect("RTCP relayed 6->4"), (rtcp.to_vec(), rtcp4));
        ua4c.send_to(&rtcp, rtcp4).unwrap();
        assert_eq!(recv(&ua6c).expect("RTCP relayed 4->6"), (rtcp.to_vec(), rtcp6));

        // query: per-stream counters, loss from the sequence gap.
        let q = ng.cmd(vec![("command", s("query")), ("call-id", s("call-1"))]);
        assert_eq!(result(&q), "ok");
        let ft = q.get("tags").and_then(|t| t.get("ft")).unwrap();
        let streams =
            ft.get("medias").and_then(Value::as_list).unwrap()[0].get("streams").and_then(Value::as_list).unwrap();
        let st = streams[0].get("stats").unwrap();
        assert_eq!(st.get("packets").and_then(Value::as_int), Some(4));
        assert_eq!(st.get("bytes").and_then(Value::as_int), Some(4 * 172));
        assert_eq!(st.get("lost").and_then(Value::as_int), Some(1));
        assert!(streams[0].get("last packet").and_then(Value::as_int).unwrap() > 0);
        let totals = q.get("totals").unwrap();
        assert_eq!(totals.get("RTP").and_then(|r| r.get("packets")).and_then(Value::as_int), Some(5));
        assert_eq!(totals.get("RTCP").and_then(|r| r.get("packets")).and_then(Value::as_int), Some(2));
        let st = relay.stats();
        assert_eq!((st.calls, st.packets.rtp_packets, st.packets.rtcp_packets), (1, 5, 2));
        assert_eq!(relay.relay_table().len(), 4);
        if let Some(sh) = st.shared {
            assert_eq!((sh.steered, sh.steer_failed, sh.unmatched), (7, 0, 0), "every packet steered: {sh:?}");
        } else {
            assert_eq!(sockets, SocketMode::PerPort);
        }

        // delete: no more relaying, ports free again.
        let d = ng.cmd(vec![("command", s("delete")), ("call-id", s("call-1")), ("from-tag", s("ft"))]);
        assert_eq!(result(&d), "ok");
        std::thread::sleep(Duration::from_millis(100));
        ua6.send_to(&rtp(6), to6).unwrap();
        ua4.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(recv(&ua4).is_none(), "nothing relayed after delete");
        assert_eq!((relay.stats().calls, relay.stats().streams), (0, 0));
        setup_call(&mut ng, "call-2", 9000);
        assert_eq!(relay.stats().streams, 1);
        relay.stop();
    });
}

#[test]
fn symmetric_latching_follows_nat_and_strict_drops() {
    latching(SocketMode::PerPort);
}

#[test]
fn latching_with_shared_sockets_too() {
    latching(SocketMode::Shared);
}

fn latching(sockets: SocketMode) {
    let config = move |l, t| Config { sockets, ..config(l, t) };
    in_ns(move || {
        let relay = Relay::start(config(Latching::Symmetric, 60)).unwrap();
        let mut ng = Ng::new(&relay);
        // The IPv4 UA signals 9000 but is behind a NAT that uses 9100.
        let (to6, to4) = setup_call(&mut ng, "nat", 9000);
        let ua6 = udp(&format!("[{UA6}]:9002"));
        let natted = udp(&format!("{UA4}:9100"));
        natted.send_to(&rtp(1), to4).unwrap();
        assert!(recv(&ua6).is_some(), "4->6 relayed");
        ua6.send_to(&rtp(2), to6).unwrap();
        let (_, from) = recv(&natted).expect("6->4 goes to the latched address");
        assert_eq!(from, to4);
        // Another source after latching is dropped and counted.
        let other = udp("192.0.2.51:9000");
        other.send_to(&rtp(3), to4).unwrap();
        ua6.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(recv(&ua6).is_none());
        let q = ng.cmd(vec![("command", s("query")), ("call-id", s("nat"))]);
        let tt = q.get("tags").and_then(|t| t.get("tt")).unwrap();
        let s0 =
            &tt.get("medias").and_then(Value::as_list).unwrap()[0].get("streams").and_then(Value::as_list).unwrap()[0];
        assert_eq!(s0.get("endpoint").and_then(|e| e.get("port")).and_then(Value::as_int), Some(9100));
        assert_eq!(s0.get("stats").and_then(|x| x.get("errors")).and_then(Value::as_int), Some(1));
        relay.stop();

        let relay = Relay::start(config(Latching::Strict, 60)).unwrap();
        let mut ng = Ng::new(&relay);
        let (to6, to4) = setup_call(&mut ng, "strict", 9000);
        natted.send_to(&rtp(1), to4).unwrap();
        ua6.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(recv(&ua6).is_none(), "strict: unsignalled source dropped");
        let ua4 = udp(&format!("{UA4}:9000"));
        ua4.send_to(&rtp(2), to4).unwrap();
        assert!(recv(&ua6).is_some(), "strict: signalled source relayed");
        ua6.send_to(&rtp(3), to6).unwrap();
        assert!(recv(&ua4).is_some());
        assert_eq!(relay.stats().packets.dropped, 1);
        relay.stop();
    });
}

#[test]
fn idle_calls_time_out() {
    in_ns(|| {
        let relay = Relay::start(config(Latching::Symmetric, 1)).unwrap();
        let mut ng = Ng::new(&relay);
        setup_call(&mut ng, "idle", 9000);
        let l = ng.cmd(vec![("command", s("list"))]);
        assert_eq!(l.get("calls").and_then(Value::as_list).map(<[Value]>::len), Some(1));
        let mut gone = false;
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(100));
            if relay.stats().calls == 0 {
                gone = true;
                break;
            }
        }
        assert!(gone, "call torn down after the 1 s timeout");
        let q = ng.cmd(vec![("command", s("query")), ("call-id", s("idle"))]);
        assert_eq!(result(&q), "error");
        let st = ng.cmd(vec![("command", s("statistics"))]);
        let tot = st.get("statistics").and_then(|x| x.get("totalstatistics")).unwrap();
        assert_eq!(tot.get("timeoutsessions").and_then(Value::as_int), Some(1));
        assert_eq!(relay.stats().totals.calls_timed_out, 1);
        assert_eq!(relay.stats().totals.early_timed_out, 1, "no media flowed: an early call");
        relay.stop();
    });
}

#[test]
fn every_control_command_over_sockets() {
    in_ns(|| {
        let dir = std::env::temp_dir().join(format!("trgw-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rtpp.sock");
        let mut cfg = config(Latching::Symmetric, 60);
        cfg.rtpproxy_unix = Some(path.clone());
        let relay = Relay::start(cfg).unwrap();
        let mut ng = Ng::new(&relay);

        // ng: ping in bencode and JSON, malformed and unknown commands.
        assert_eq!(ng.raw(b"d7:command4:pinge"), b"d6:result4:ponge");
        let j: serde_json::Value = serde_json::from_slice(&ng.raw(br#"{"command":"ping"}"#)).unwrap();
        assert_eq!(j["result"], "pong");
        for bad in [&b"d7:comm"[..], b"i5e", b"d7:command3:fooe", b"d7:command5:offere", b"{nope"] {
            let r = ng.raw(bad);
            let v = if r.first() == Some(&b'{') {
                Value::from_json(&serde_json::from_slice(&r).unwrap())
            } else {
                bencode::decode(&r).unwrap()
            };
            assert_eq!(result(&v), "error", "{}", String::from_utf8_lossy(bad));
            assert!(v.get("error-reason").is_some());
        }
        // Hostile SDP.
        let o = ng.cmd(vec![
            ("command", s("offer")),
            ("call-id", s("x")),
            ("from-tag", s("f")),
            ("sdp", s("v=0\r\nc=IN IP4 300.1.1.1\r\n")),
        ]);
        assert!(o.get("error-reason").and_then(Value::as_str).unwrap().contains("SDP"));
        // JSON offer.
        let r = ng.raw(
            serde_json::json!({"command":"offer","call-id":"j1","from-tag":"f","sdp":sdp(UA4, 4000)})
                .to_string()
                .as_bytes(),
        );
        let j: serde_json::Value = serde_json::from_slice(&r).unwrap();
        assert_eq!(j["result"], "ok");
        assert!(j["sdp"].as_str().unwrap().contains("c=IN IP4 192.0.2.1"));
        let l = ng.cmd(vec![("command", s("list"))]);
        assert_eq!(l.get("calls"), Some(&Value::List(vec![s("j1")])));
        let st = ng.cmd(vec![("command", s("statistics"))]);
        assert_eq!(result(&st), "ok");
        let d = ng.cmd(vec![("command", s("delete")), ("call-id", s("j1"))]);
        assert_eq!(result(&d), "ok");
        let d = ng.cmd(vec![("command", s("delete")), ("call-id", s("j1"))]);
        assert_eq!(result(&d), "error");

        // rtpproxy over UDP.
        let rp = udp("127.0.0.1:0");
        let to = relay.rtpproxy_udp_addr().unwrap();
        let ask = |c: &str| -> String {
            rp.send_to(c.as_bytes(), to).unwrap();
            let mut b = [0u8; 4096];
            let (n, _) = rp.recv_from(&mut b).expect("rtpproxy reply");
            String::from_utf8_lossy(&b[..n]).into_owned()
        };
        assert_eq!(ask("k1 V"), "k1 20040107\n");
        assert_eq!(ask("k2 VF 20050322"), "k2 1\n");
        let u = ask(&format!("k3 U6ei rc {UA6} 9002 a;1"));
        assert!(u.starts_with("k3 3") && u.ends_with(" 192.0.2.1\n"), "{u}");
        let l = ask(&format!("k4 Lie rc {UA4} 9000 a;1 b;1"));
        assert!(l.ends_with(" 2001:db8::1 6\n"), "{l}");
        assert_eq!(ask("k5 Q rc a;1 b;1"), "k5 60 0 0 0 0\n");
        assert!(ask("k6 I").contains("active sessions: 1\n"));
        assert_eq!(ask("k7 D rc a b"), "k7 0\n");
        assert_eq!(ask("k8 D rc a b"), "k8 E50\n");
        assert_eq!(ask("k9 W"), "k9 E0\n");
        assert_eq!(ask("k10 U"), "k10 E1\n");

        // rtpproxy over the Unix socket: no cookie.
        let unix = |c: &str| -> String {
            let mut st = UnixStream::connect(&path).unwrap();
            st.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            st.write_all(c.as_bytes()).unwrap();
            st.shutdown(std::net::Shutdown::Write).unwrap();
            let mut out = String::new();
            st.read_to_string(&mut out).unwrap();
            out
        };
        assert_eq!(unix("V\n"), "20040107\n");
        assert!(unix(&format!("U uc {UA4} 4000 t")).ends_with(" 192.0.2.1\n"));
        assert_eq!(unix("D uc t"), "0\n");
        assert_eq!(unix("Q nope a b"), "E50\n");

        let errors = relay.stats().totals.control_errors;
        // 5 malformed ng + hostile SDP + second delete; D/W/U over UDP; Q over Unix.
        assert_eq!(errors, 11);
        relay.stop();
        assert!(!path.exists(), "the Unix socket is removed on stop");
        let _ = std::fs::remove_dir_all(dir);
    });
}

#[test]
fn allow_list_drops_other_clients() {
    in_ns(|| {
        let mut cfg = config(Latching::Symmetric, 60);
        cfg.allow = vec!["10.0.0.0/8".parse().unwrap()];
        let relay = Relay::start(cfg).unwrap();
        let sock = udp("127.0.0.1:0");
        sock.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        sock.send_to(b"1 d7:command4:pinge", relay.ng_addr().unwrap()).unwrap();
        assert!(recv(&sock).is_none(), "no reply to a client off the allow-list");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(relay.stats().totals.control_denied, 1);
        relay.stop();
    });
}

#[test]
fn port_exhaustion_over_ng_is_an_error_reply() {
    port_exhaustion(SocketMode::PerPort);
}

#[test]
fn port_exhaustion_with_shared_sockets_too() {
    port_exhaustion(SocketMode::Shared);
}

fn port_exhaustion(sockets: SocketMode) {
    in_ns(move || {
        let mut cfg = config(Latching::Symmetric, 60);
        cfg.sockets = sockets;
        cfg.port_min = 31000;
        cfg.port_max = 31003; // two RTP/RTCP pairs per address
        let relay = Relay::start(cfg).unwrap();
        let mut ng = Ng::new(&relay);
        let offer = |ng: &mut Ng, c: &str| {
            ng.cmd(vec![("command", s("offer")), ("call-id", s(c)), ("from-tag", s("f")), ("sdp", s(&sdp(UA4, 4000)))])
        };
        assert_eq!(result(&offer(&mut ng, "p1")), "ok");
        let e = offer(&mut ng, "p2");
        assert!(e.get("error-reason").and_then(Value::as_str).unwrap().contains("Ran out of ports"), "{e:?}");
        assert_eq!(relay.stats().totals.port_exhausted, 1);
        relay.stop();
    });
}

/// A port another program holds is never handed out, per port (its bind
/// fails) and shared (the pair is probed before it is handed out).
#[test]
fn ports_held_by_others_are_skipped_in_both_modes() {
    for sockets in [SocketMode::PerPort, SocketMode::Shared] {
        in_ns(move || {
            // Someone holds 31001, the RTCP port of the first pair.
            let _held = udp(&format!("{RELAY4}:31001"));
            let mut cfg = config(Latching::Symmetric, 60);
            cfg.sockets = sockets;
            cfg.port_min = 31000;
            cfg.port_max = 31005; // three pairs per address, one unusable
            let relay = Relay::start(cfg).unwrap();
            let mut ng = Ng::new(&relay);
            let offer = |ng: &mut Ng, c: &str| {
                ng.cmd(vec![
                    ("command", s("offer")),
                    ("call-id", s(c)),
                    ("from-tag", s("f")),
                    ("sdp", s(&sdp(UA4, 4000))),
                ])
            };
            let o = offer(&mut ng, "h1");
            assert_eq!(result(&o), "ok", "{sockets:?}: {o:?}");
            let port = media_of(o.get("sdp").and_then(Value::as_str).unwrap()).port();
            assert!(port == 31002 || port == 31004, "{sockets:?}: the held pair is skipped, got {port}");
            let e = offer(&mut ng, "h2");
            assert!(e.get("error-reason").and_then(Value::as_str).unwrap().contains("Ran out of ports"), "{e:?}");
            relay.stop();
        });
    }
}

#[test]
fn start_fails_cleanly_when_a_listener_port_is_taken() {
    in_ns(|| {
        let taken = udp("127.0.0.1:0");
        let mut cfg = config(Latching::Symmetric, 60);
        cfg.ng = Some(taken.local_addr().unwrap());
        let e = Relay::start(cfg).unwrap_err();
        assert!(format!("{e:#}").contains("ng listener"), "{e:#}");
        let mut bad = config(Latching::Symmetric, 60);
        bad.interfaces.clear();
        assert!(Relay::start(bad).is_err(), "an unchecked configuration is refused");
    });
}

#[test]
fn rtcp_mux_rides_the_rtp_port_and_does_not_count_as_rtp_loss() {
    in_ns(|| {
        let relay = Relay::start(config(Latching::Symmetric, 60)).unwrap();
        let mut ng = Ng::new(&relay);
        let mux = |ip: &str, port: u16| format!("{}a=rtcp-mux\r\n", sdp(ip, port));
        let o = ng.cmd(vec![
            ("command", s("offer")),
            ("call-id", s("mux")),
            ("from-tag", s("ft")),
            ("sdp", s(&mux(UA6, 9002))),
            ("address family", s("IP4")),
        ]);
        let osdp = o.get("sdp").and_then(Value::as_str).unwrap();
        assert!(osdp.contains("a=rtcp-mux") && !osdp.contains("a=rtcp:"), "{osdp}");
        let to4 = media_of(osdp);
        let a = ng.cmd(vec![
            ("command", s("answer")),
            ("call-id", s("mux")),
            ("from-tag", s("ft")),
            ("to-tag", s("tt")),
            ("sdp", s(&mux(UA4, 9000))),
        ]);
        let to6 = media_of(a.get("sdp").and_then(Value::as_str).unwrap());
        let ua6 = udp(&format!("[{UA6}]:9002"));
        let ua4 = udp(&format!("{UA4}:9000"));
        let rtcp = [0x80u8, 200, 0, 1, 0, 0, 0, 7];
        for seq in [1u16, 2] {
            ua6.send_to(&rtp(seq), to6).unwrap();
            assert_eq!(recv(&ua4).unwrap().0, rtp(seq));
            ua6.send_to(&rtcp, to6).unwrap();
            assert_eq!(recv(&ua4).unwrap(), (rtcp.to_vec(), to4), "RTCP on the RTP ports");
        }
        let q = ng.cmd(vec![("command", s("query")), ("call-id", s("mux"))]);
        let ft = q.get("tags").and_then(|t| t.get("ft")).unwrap();
        let st = ft.get("medias").and_then(Value::as_list).unwrap()[0].get("streams").and_then(Value::as_list).unwrap()
            [0]
        .get("stats")
        .unwrap()
        .clone();
        assert_eq!(st.get("packets").and_then(Value::as_int), Some(4));
        assert_eq!(st.get("lost").and_then(Value::as_int), Some(0));
        relay.stop();
    });
}
