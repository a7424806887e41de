//! The soak test of issue #11 (`make soak`, not part of `make test`):
//! mixed hostile traffic against every listener of `v6gate run` (admin
//! API, ng, rtpproxy UDP and Unix, DNS64 UDP and TCP, the media ports and
//! the TUN device) for `SOAK_SECONDS` (default 600), while a NAT64 session
//! and a TrGW call set up before must keep working. The daemon's RSS and
//! descriptors are sampled: after the warm-up they must stay flat, and
//! after the attackers stop (and the timeouts pass) the descriptors must
//! be back where they started.
//!
//! Every attacker is paced and stops by itself at the deadline; all traffic
//! stays inside the test's own namespaces.

mod daemon_util;
mod hardening_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon_util::Lab;
use hardening_util::*;
use lab::netns::Netns;
use trgw::bencode::Value;

const DNS64: &str = r#"
[dns64]
listen = ["[2001:db8:1::1]:53"]
upstream = ["198.51.100.2:5353"]
prefix = "64:ff9b:1::/96"
allow = ["2001:db8:1::/64"]
timeout-ms = 500
"#;

/// A tiny xorshift generator: reproducible garbage without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// Random bytes without the letters of rtpproxy's destructive commands
    /// (`D` delete, `X` delete all): an allowed control client may delete
    /// calls, which is no attack; garbage must not do it by chance.
    fn garbage(&mut self, min: usize, spread: u64) -> Vec<u8> {
        let mut v = self.some(min, spread);
        for b in &mut v {
            if matches!(*b, b'D' | b'd' | b'X' | b'x') {
                *b = b'?';
            }
        }
        v
    }

    /// `min` to `min + spread - 1` random bytes.
    fn some(&mut self, min: usize, spread: u64) -> Vec<u8> {
        let n = min + self.below(spread) as usize;
        self.bytes(n)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Runs `f(rng, round)` in a loop on a thread inside `ns` until `stop`,
/// sleeping `pace` between rounds; counts rounds.
fn attacker(
    name: &'static str,
    ns: &Netns,
    stop: &Arc<AtomicBool>,
    rounds: &Arc<AtomicU64>,
    pace: Duration,
    mut f: impl FnMut(&mut Rng, u64) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let path = format!("{}/{}", lab::netns::NETNS_DIR, ns.name());
    let (stop, rounds) = (stop.clone(), rounds.clone());
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let f_ns = std::fs::File::open(path).unwrap();
            nix::sched::setns(f_ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
            let mut round = 0;
            while !stop.load(Relaxed) {
                f(&mut rng, round);
                round += 1;
                rounds.fetch_add(1, Relaxed);
                std::thread::sleep(pace);
            }
        })
        .unwrap()
}

fn tcp(addr: &str) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(500))).ok()?;
    Some(s)
}

fn drain(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}

#[test]
#[ignore = "soak test: run with `make soak` (SOAK_SECONDS, default 600)"]
fn soak_hostile_traffic_on_every_listener() {
    lab::need_root!();
    let secs: u64 = std::env::var("SOAK_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    // The TUN attacker opens a new NAT64 UDP flow every few milliseconds:
    // a 30 s UDP timeout lets the session table reach its steady state
    // within the warm-up, so state that expires is not taken for a leak.
    let sock = tempfile::tempdir().unwrap();
    let text = config(
        sock.path(),
        &format!("token = \"{TOKEN}\"\nmax-connections = 32\nrequest-timeout = 2\nidle-timeout = 3"),
        "control-connections = 16\ncontrol-timeout = \"2s\"\nng-cache-bytes = 8388608",
    )
    .replace("pool4 = [\"203.0.113.1/32\"]", "pool4 = [\"203.0.113.1/32\"]\nudp-timeout = 30");
    let mut lab = Lab::start(&format!("{text}{DNS64}"));
    let unix = sock.path().join("rtpp.sock");
    let base = Baseline::new(&lab);
    let fds0 = lab.open_fds();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();

    // Admin API: huge bodies, endless headers, slow and idle connections,
    // garbage, missing tokens, foreign Host/Origin.
    threads.push(attacker("admin", &lab.gw, &stop, &rounds, Duration::from_millis(20), |rng, round| {
        let Some(mut s) = tcp("127.0.0.1:9164") else { return };
        match round % 8 {
            0 => {
                let _ = s.write_all(b"POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999999\r\n\r\n");
            }
            1 => {
                let _ = s.write_all(b"GET /status HTTP/1.1\r\nX: ");
                let _ = s.write_all(&vec![b'a'; 64 * 1024]);
            }
            2 => std::thread::sleep(Duration::from_millis(300)), // idle, then dropped
            3 => {
                let _ = s.write_all(&rng.bytes(512));
            }
            4 => {
                let _ = s.write_all(b"POST /bib/add?proto=udp&v6=2001:db8:1::2%2353&v4=203.0.113.1%235353 HTTP/1.1\r\nHost: localhost\r\n\r\n");
            }
            5 => {
                let r = format!("POST /reload HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
                let _ = s.write_all(r.as_bytes());
            }
            6 => {
                let _ = s.write_all(b"POST /reload HTTP/1.1\r\nHost: localhost\r\nOrigin: http://evil.example\r\n\r\n");
            }
            _ => {
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            }
        }
        drain(&mut s);
    }));
    // Admin connections held open (up to the cap, then refused).
    threads.push(attacker("admin-hold", &lab.gw, &stop, &rounds, Duration::from_millis(500), |_, _| {
        let held: Vec<TcpStream> = (0..40).filter_map(|_| tcp("127.0.0.1:9164")).collect();
        std::thread::sleep(Duration::from_secs(1));
        drop(held);
    }));
    // ng: garbage, refused addresses, re-offers of a big SDP under fresh
    // cookies, call churn, list.
    threads.push(attacker("ng", &lab.gw, &stop, &rounds, Duration::from_millis(5), {
        let mut big = sdp("2001:db8:1::2", 9500);
        while big.len() < 30_000 {
            big.push_str("a=x-padding:01234567890123456789012345678901234567890123456789\r\n");
        }
        let mut ng: Option<Ng> = None;
        move |rng, round| {
            let ng = ng.get_or_insert_with(|| {
                let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
                Ng::from_socket(sock)
            });
            match round % 6 {
                0 => {
                    let _ = ng.sock.send_to(&rng.some(1, 2000), "127.0.0.1:2299");
                }
                1 => {
                    let ip = ["127.0.0.1", "224.0.0.1", "::1", "198.51.100.1", "fe80::1"][rng.below(5) as usize];
                    let _ = ng.cmd(vec![
                        ("command", s("offer")),
                        ("call-id", s("evil")),
                        ("from-tag", s("f")),
                        ("sdp", s(&sdp(ip, 5555))),
                    ]);
                }
                2 => {
                    let _ = ng.cmd(vec![
                        ("command", s("offer")),
                        ("call-id", s("soak-big")),
                        ("from-tag", s("f")),
                        ("sdp", s(&big)),
                        ("direction", Value::List(vec![s("v6"), s("v4")])),
                        ("address family", s("IP4")),
                    ]);
                }
                3 => {
                    let id = format!("churn-{}", rng.below(20));
                    let _ = offer(ng, &id, "2001:db8:1::2", 9600);
                }
                4 => {
                    let id = format!("churn-{}", rng.below(20));
                    let _ = ng.cmd(vec![("command", s("delete")), ("call-id", s(&id))]);
                }
                _ => {
                    let _ = ng.cmd(vec![("command", s("list")), ("limit", Value::Int(1000))]);
                }
            }
        }
    }));
    // rtpproxy UDP.
    threads.push(attacker("rtpp-udp", &lab.gw, &stop, &rounds, Duration::from_millis(5), |rng, round| {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let msg = match round % 3 {
            0 => rng.garbage(1, 600),
            1 => b"k U evil 127.0.0.1 5555 ft".to_vec(),
            _ => b"k V".to_vec(),
        };
        let _ = s.send_to(&msg, "127.0.0.1:22299");
    }));
    // rtpproxy Unix: idle clients, clients that never read, garbage.
    threads.push(attacker("rtpp-unix", &lab.gw, &stop, &rounds, Duration::from_millis(50), move |rng, round| {
        let Ok(mut c) = UnixStream::connect(&unix) else { return };
        let _ = c.set_write_timeout(Some(Duration::from_millis(200)));
        match round % 3 {
            0 => std::thread::sleep(Duration::from_millis(500)),
            1 => {
                let _ = c.write_all(&b"V\n".repeat(32 * 1024));
            }
            _ => {
                let _ = c.write_all(&rng.garbage(256, 1));
            }
        }
    }));
    // DNS64: UDP garbage from the IPv6 host, TCP with bad lengths and slow clients.
    threads.push(attacker("dns64", &lab.h6, &stop, &rounds, Duration::from_millis(10), |rng, round| {
        if round % 4 == 3 {
            if let Some(mut t) = tcp("[2001:db8:1::1]:53") {
                let _ = t.write_all(&[0xff, 0xff]);
                let _ = t.write_all(&rng.bytes(100));
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            let s = UdpSocket::bind("[::]:0").unwrap();
            let _ = s.send_to(&rng.some(12, 500), "[2001:db8:1::1]:53");
        }
    }));
    // Media ports: stray datagrams from both sides.
    for (name, ns, dst) in [("media6", &lab.h6, "2001:db8:1::1"), ("media4", &lab.h4, "198.51.100.1")] {
        threads.push(attacker(name, ns, &stop, &rounds, Duration::from_millis(2), move |rng, _| {
            let s = UdpSocket::bind(if dst.contains(':') { "[::]:0" } else { "0.0.0.0:0" }).unwrap();
            let port = 30000 + rng.below(100) as u16;
            let _ = s.send_to(&rng.some(1, 1400), SocketAddr::new(dst.parse().unwrap(), port));
        }));
    }
    // The TUN device: malformed and random packets into the SIIT and NAT64
    // prefixes, and short-lived NAT64 UDP flows.
    threads.push(attacker("tun", &lab.h6, &stop, &rounds, Duration::from_millis(5), |rng, round| {
        let dst = if round % 2 == 0 { "64:ff9b:1::c633:6402" } else { H4_NAT64 };
        if round % 3 == 0 {
            let s = UdpSocket::bind("[::]:0").unwrap();
            let _ = s.send_to(&rng.bytes(64), SocketAddr::new(dst.parse().unwrap(), 7100 + rng.below(50) as u16));
        } else {
            let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::RAW, Some(socket2::Protocol::from(253)));
            if let Ok(s) = s {
                let a: SocketAddr = SocketAddr::new(dst.parse().unwrap(), 0);
                let _ = s.send_to(&rng.some(1, 1200), &a.into());
            }
        }
    }));

    // Watch: the baseline keeps working; RSS and descriptors sampled.
    let t0 = Instant::now();
    let warmup = Duration::from_secs((secs / 5).max(10));
    let mut after_warmup: Option<(u64, usize)> = None;
    let mut peak = (0u64, 0usize);
    let mut samples = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(5));
        assert!(lab.alive(), "daemon died: {}", lab.log());
        base.check(&format!("soak {}s", t0.elapsed().as_secs()));
        let (rss, fds) = (lab.rss_kib(), lab.open_fds());
        samples += 1;
        if t0.elapsed() >= warmup {
            match after_warmup {
                None => after_warmup = Some((rss, fds)),
                Some(_) => peak = (peak.0.max(rss), peak.1.max(fds)),
            }
        }
        eprintln!(
            "soak: {:>4}s rss {rss} KiB fds {fds} nat64 udp sessions {} attacker rounds {}",
            t0.elapsed().as_secs(),
            // The admin API may be saturated by the attack: "-" then.
            lab.ctl(&["metrics"])
                .ok()
                .and_then(|m| m
                    .lines()
                    .find_map(|l| l.strip_prefix("v6gate_nat64_sessions{proto=\"udp\"} ").map(str::to_string)))
                .unwrap_or_else(|| "-".into()),
            rounds.load(Relaxed)
        );
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // The calls the attackers left are legitimate: delete them, so only
    // the baseline call holds media sockets; then let every timeout pass
    // (admin idle 3 s, rtpproxy 2 s, DNS64 TCP 10 s).
    let mut ng = Ng::new(&lab);
    for id in (0..20).map(|i| format!("churn-{i}")).chain(["soak-big".to_string()]) {
        let _ = ng.cmd(vec![("command", s("delete")), ("call-id", s(&id))]);
    }
    std::thread::sleep(Duration::from_secs(12));
    assert!(lab.alive(), "daemon died: {}", lab.log());
    // Sampled before the session listing below allocates.
    let (rss_end, fds_end) = (lab.rss_kib(), lab.open_fds());
    base.check("soak end");
    let st = lab.status();
    let calls = st["trgw"]["calls"].as_u64().unwrap();
    assert!(calls >= 1, "the baseline call is kept: {st}");
    let sessions: serde_json::Value = serde_json::from_str(&lab.ctl(&["sessions", "--proto", "udp"]).unwrap()).unwrap();
    assert!(!sessions.as_array().unwrap().is_empty(), "the NAT64 session is kept");
    let (rss_w, fds_w) = after_warmup.expect("at least one sample after the warm-up");
    eprintln!(
        "soak: {samples} samples; rss after warm-up {rss_w} KiB, peak {} KiB, end {rss_end} KiB; fds at start {fds0}, \
         after warm-up {fds_w}, peak {}, end {fds_end}; {} attacker rounds",
        peak.0,
        peak.1,
        rounds.load(Relaxed)
    );
    assert!(peak.0.max(rss_end) < rss_w + 24 * 1024, "RSS grew: {rss_w} KiB -> peak {} KiB", peak.0);
    // Each live call holds four media sockets (garbage on the rtpproxy
    // sockets may form valid `U` commands: calls of an allowed client,
    // gone after timeout-secs); everything else must be given back.
    let media = 4 * (calls as usize - 1);
    assert!(fds_end <= fds0 + 8 + media, "descriptors not given back: {fds0} -> {fds_end} ({calls} calls)");
    for key in [
        "v6gate_admin_refused_total{reason=\"token\"}",
        "v6gate_trgw_control_errors_total{reason=\"media-address-refused\"}",
    ] {
        assert!(lab.metric(key) > 0, "{key} never moved: the attack did not run");
    }
}
