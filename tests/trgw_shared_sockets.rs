//! The TrGW's shared-socket media mode (`[trgw] sockets = "shared"`, BPF
//! sk_lookup) holds more calls than the process's descriptor limit would
//! allow with a socket per port.
//!
//! `v6gate trgw` runs in a namespace under `prlimit --nofile=256:256`. Per
//! port (four sockets per call), allocations fail with "too many open
//! files" before 100 calls; shared, 150 calls (600 media ports) are set up,
//! RTP is relayed 6->4 and 4->6 on several of them (from each leg's own
//! port, counted per stream), and the daemon's descriptor count stays
//! flat while the calls are created. `v6gate run` with `[trgw]` runs the
//! same mode and shows its counters in `/metrics`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use bench::harness::guard::Proc;
use bench::ng::{self, Value};
use lab::netns::{in_netns, Netns};

mod sip_util;
use sip_util::*;

const GW4: Ipv4Addr = Ipv4Addr::new(10, 0, 17, 1);
const UA4: Ipv4Addr = Ipv4Addr::new(10, 0, 17, 2);
const GW6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x17, 0, 0, 0, 0, 1);
const UA6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x17, 0, 0, 0, 0, 2);
const NG: &str = "127.0.0.1:2223";
/// The daemon's descriptor limit (soft and hard).
const NOFILE: u32 = 256;
/// Calls set up in shared mode: 4 * CALLS media ports > NOFILE.
const CALLS: u16 = 150;

fn namespace() -> Netns {
    let ns = Netns::unique("trgwsh").expect("namespace (tests run as root)");
    for a in [format!("{GW4}/32"), format!("{UA4}/32")] {
        ns.ip(&["addr", "add", &a, "dev", "lo"]).unwrap();
    }
    for a in [format!("{GW6}/128"), format!("{UA6}/128")] {
        ns.ip(&["addr", "add", &a, "dev", "lo", "nodad"]).unwrap();
    }
    ns
}

/// The `[trgw]` table of the tests.
fn trgw_table(sockets: &str) -> String {
    // The user agents are on this namespace's loopback, so their addresses
    // are the host's own: allow them one by one.
    format!(
        "[trgw]\nsockets = \"{sockets}\"\nng = \"{NG}\"\nrtpproxy-udp = \"127.0.0.1:0\"\nport-min = 30000\n\
         port-max = 31999\nworkers = 2\nio = \"poll\"\nmedia-allow = [\"{UA4}/32\", \"{UA6}/128\"]\n\
         [[trgw.interface]]\nname = \"v6\"\nipv6 = \"{GW6}\"\n[[trgw.interface]]\nname = \"v4\"\nipv4 = \"{GW4}\"\n"
    )
}

fn start(ns: &Netns, dir: &TestDir, sockets: &str) -> Proc {
    let cfg = dir.join(&format!("trgw-{sockets}.toml"));
    std::fs::write(&cfg, trgw_table(sockets)).unwrap();
    let mut c = ns.command("prlimit");
    c.arg(format!("--nofile={NOFILE}:{NOFILE}")).arg("--").arg(env!("CARGO_BIN_EXE_v6gate"));
    c.arg("trgw").arg("--config").arg(&cfg);
    let p = spawn("v6gate trgw", c, &dir.join(&format!("trgw-{sockets}.log")));
    wait_udp_listen(ns, 2223, 1, &p);
    p
}

fn client(ns: &Netns) -> ng::Client {
    let server: SocketAddr = NG.parse().unwrap();
    in_netns(ns, || ng::Client::connect(server)).unwrap()
}

fn sdp(ip: IpAddr, port: u16) -> String {
    let fam = if ip.is_ipv6() { "IP6" } else { "IP4" };
    format!("v=0\r\no=- 1 1 IN {fam} {ip}\r\ns=-\r\nc=IN {fam} {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n")
}

/// One call: the offerer (family of `from`) on UA port `port`, the
/// answerer on `port` of the other family. Returns where the offerer and
/// the answerer send.
fn call(c: &mut ng::Client, id: &str, v6_offers: bool, port: u16) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let (from, to, dirs, fam): (IpAddr, IpAddr, _, _) = if v6_offers {
        (UA6.into(), UA4.into(), ["v6", "v4"], "IP4")
    } else {
        (UA4.into(), UA6.into(), ["v4", "v6"], "IP6")
    };
    let o = c.request(&ng::dict([
        ("command", Value::str("offer")),
        ("call-id", Value::str(id)),
        ("from-tag", Value::str("ft")),
        ("sdp", Value::str(&sdp(from, port))),
        ("direction", ng::list(&dirs)),
        ("address family", Value::str(fam)),
    ]))?;
    let to_answerer_side = ng::sdp_audio_addr(o.get("sdp").and_then(Value::as_str).unwrap_or("")).unwrap();
    let a = c.request(&ng::dict([
        ("command", Value::str("answer")),
        ("call-id", Value::str(id)),
        ("from-tag", Value::str("ft")),
        ("to-tag", Value::str("tt")),
        ("sdp", Value::str(&sdp(to, port))),
    ]))?;
    let to_offerer_side = ng::sdp_audio_addr(a.get("sdp").and_then(Value::as_str).unwrap_or("")).unwrap();
    Ok((to_offerer_side, to_answerer_side))
}

fn open_fds(p: &Proc) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", p.id())).map(Iterator::count).unwrap_or(0)
}

fn rtp(seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0xd5; 160]);
    p
}

fn ua(ip: IpAddr, port: u16) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::new(ip, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s
}

/// Sends `n` RTP packets from `a` to `relay` and checks each arrives at
/// `b` from `relay_out`.
fn relays(a: &UdpSocket, relay: SocketAddr, b: &UdpSocket, relay_out: SocketAddr, n: u16) {
    let mut buf = [0u8; 512];
    for seq in 1..=n {
        a.send_to(&rtp(seq), relay).unwrap();
        let (len, from) = b.recv_from(&mut buf).unwrap_or_else(|e| panic!("RTP {seq} to {relay} not relayed: {e}"));
        assert_eq!((&buf[..len], from), (&rtp(seq)[..], relay_out));
    }
}

fn packets(c: &mut ng::Client, id: &str) -> i64 {
    let q = c.request(&ng::dict([("command", Value::str("query")), ("call-id", Value::str(id))])).unwrap();
    q.get("totals").and_then(|t| t.get("RTP")).and_then(|r| r.get("packets")).and_then(Value::as_int).unwrap_or(-1)
}

#[test]
fn shared_sockets_hold_more_calls_than_the_descriptor_limit_allows_per_port() {
    lab::need_root!();
    let ns = namespace();
    let dir = TestDir::new("trgw-shared");

    // Per port: the descriptor limit stops allocations early.
    let mut d = start(&ns, &dir, "per-port");
    let mut c = client(&ns);
    let mut failed = None;
    for i in 0..CALLS {
        if let Err(e) = call(&mut c, &format!("pp{i}"), i % 2 == 0, 20000 + 2 * i) {
            failed = Some((i, e.to_string()));
            break;
        }
    }
    let (at, why) = failed.expect("per-port mode cannot hold 150 calls under a 256-descriptor limit");
    assert!(at < 100, "failed at call {at}");
    assert!(why.contains("Too many open files"), "{why}");
    drop(d);

    // Shared: every call, and the descriptors stay flat.
    d = start(&ns, &dir, "shared");
    let mut c = client(&ns);
    let before = open_fds(&d);
    let mut seen = vec![before];
    let mut relay_addrs = Vec::new();
    for i in 0..CALLS {
        let r = call(&mut c, &format!("sh{i}"), i % 2 == 0, 20000 + 2 * i)
            .unwrap_or_else(|e| panic!("call {i}: {e}\n{}", d.log_tail()));
        relay_addrs.push(r);
        if i % 50 == 49 {
            seen.push(open_fds(&d));
        }
    }
    let (lo, hi) = (*seen.iter().min().unwrap(), *seen.iter().max().unwrap());
    assert!(lo > 0 && hi - lo <= 4, "descriptors stay flat while {CALLS} calls are set up: {seen:?}");
    assert!(hi < usize::from(CALLS), "far fewer descriptors than media ports: {seen:?}");
    eprintln!("per-port: call {at} failed ({why}); shared: {CALLS} calls, descriptors {seen:?}");

    // RTP both ways on several calls: 6->4 (even calls) and 4->6 (odd).
    in_netns(&ns, || {
        let end = Instant::now() + Duration::from_secs(60);
        for i in [0u16, 1, 74, 75, 148, 149] {
            let port = 20000 + 2 * i;
            let (to_offerer_side, to_answerer_side) = relay_addrs[usize::from(i)];
            let (ua6, ua4) = (ua(UA6.into(), port), ua(UA4.into(), port));
            let (offerer, answerer) = if i % 2 == 0 { (&ua6, &ua4) } else { (&ua4, &ua6) };
            relays(offerer, to_offerer_side, answerer, to_answerer_side, 3);
            relays(answerer, to_answerer_side, offerer, to_offerer_side, 2);
            assert!(Instant::now() < end);
        }
        Ok(())
    })
    .unwrap();
    for i in [0u16, 1, 74, 75, 148, 149] {
        assert_eq!(packets(&mut c, &format!("sh{i}")), 5, "call sh{i}: 3 + 2 RTP packets counted");
    }
    assert_eq!(packets(&mut c, "sh2"), 0, "a call without media counts none");
    assert!(open_fds(&d) - lo <= 4, "still flat after relaying");
    drop(d);
}

/// `GET path` from the admin API; the body.
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    c.set_read_timeout(Some(Duration::from_secs(3)))?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", addr.ip())?;
    let mut out = String::new();
    c.read_to_string(&mut out)?;
    Ok(out)
}

/// The value of the metric line starting with `series ` (0 when absent).
fn metric(text: &str, series: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse::<f64>().ok()).unwrap_or(0.0)
        as u64
}

#[test]
fn the_daemon_runs_shared_sockets_and_counts_them() {
    lab::need_root!();
    let ns = namespace();
    let dir = TestDir::new("trgw-shared-run");
    let cfg = dir.join("v6gate.toml");
    let admin: SocketAddr = "127.0.0.1:9188".parse().unwrap();
    std::fs::write(&cfg, format!("[admin]\nlisten = \"{admin}\"\n{}", trgw_table("shared"))).unwrap();
    let mut c = ns.command(env!("CARGO_BIN_EXE_v6gate"));
    c.arg("run").arg("--config").arg(&cfg);
    let d = spawn("v6gate run", c, &dir.join("v6gate.log"));
    wait_udp_listen(&ns, 2223, 1, &d);
    let mut ng = client(&ns);
    let (to_offerer_side, to_answerer_side) = call(&mut ng, "run6", true, 21000).unwrap();
    let (to_offerer_side4, to_answerer_side4) = call(&mut ng, "run4", false, 21002).unwrap();
    let metrics = in_netns(&ns, || {
        let (ua6, ua4) = (ua(UA6.into(), 21000), ua(UA4.into(), 21000));
        relays(&ua6, to_offerer_side, &ua4, to_answerer_side, 2);
        relays(&ua4, to_answerer_side, &ua6, to_offerer_side, 1);
        let (ua4, ua6) = (ua(UA4.into(), 21002), ua(UA6.into(), 21002));
        relays(&ua4, to_offerer_side4, &ua6, to_answerer_side4, 2);
        relays(&ua6, to_answerer_side4, &ua4, to_offerer_side4, 1);
        // The admin listener comes up with the relay; wait for it.
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(t) = http_get(admin, "/metrics") {
                return Ok(t);
            }
            assert!(Instant::now() < end, "no admin API:\n{}", d.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .unwrap();
    assert_eq!(packets(&mut ng, "run6"), 3);
    assert_eq!(packets(&mut ng, "run4"), 3);
    assert_eq!(metric(&metrics, "v6gate_trgw_shared_steered_packets_total{outcome=\"steered\"}"), 6, "{metrics}");
    assert_eq!(metric(&metrics, "v6gate_trgw_shared_steered_packets_total{outcome=\"failed\"}"), 0);
    assert_eq!(metric(&metrics, "v6gate_trgw_relayed_packets_total{kind=\"rtp\"}"), 6);
    drop(d);
}
