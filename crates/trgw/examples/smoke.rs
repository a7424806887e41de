//! A short smoke load, not a benchmark: N G.711 calls (RTP header + 160
//! bytes every 20 ms) relayed IPv6 -> IPv4 for a few seconds inside a
//! network namespace; prints loss and latency percentiles.
//!
//!     cargo run --release -p trgw --example smoke -- 1000 5
//!
//! (calls, seconds, and optionally `epoll` for the epoll engine, `shared`
//! for the shared-socket media mode (sk_lookup, epoll) or
//! `rtpengine` to run the same load through rtpengine in userspace mode,
//! for a ratio measured on the same machine at the same time).
//! `v6gate bench trgw` is the real measurement.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab::netns::Netns;
use trgw::bencode::{self, Value};
use trgw::config::Interface;
use trgw::{Config, IoMode, Relay, SocketMode};

static COOKIE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let calls: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let secs: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let mode = args.get(3).cloned().unwrap_or_default();
    let io = if mode == "epoll" || mode == "poll" { IoMode::Poll } else { IoMode::Uring };
    let sockets = if mode == "shared" { SocketMode::Shared } else { SocketMode::PerPort };
    let rtpengine = mode == "rtpengine";
    let ns = Arc::new(Netns::unique("trgw-smoke").expect("namespace (run as root)"));
    ns.ip(&["addr", "add", "192.0.2.1/32", "dev", "lo"]).unwrap();
    ns.ip(&["addr", "add", "192.0.2.50/32", "dev", "lo"]).unwrap();
    ns.ip(&["addr", "add", "2001:db8::1/128", "dev", "lo", "nodad"]).unwrap();
    ns.ip(&["addr", "add", "2001:db8:6::10/128", "dev", "lo", "nodad"]).unwrap();
    let ns2 = ns.clone();
    std::thread::spawn(move || {
        ns2.enter_thread().unwrap();
        run(calls, secs, io, sockets, rtpengine);
    })
    .join()
    .unwrap();
}

fn run(calls: usize, secs: u64, io: IoMode, sockets: SocketMode, rtpengine: bool) {
    let cfg = Config {
        interfaces: vec![
            Interface::new("v6", None, Some("2001:db8::1".parse().unwrap())),
            Interface::new("v4", Some("192.0.2.1".parse().unwrap()), None),
        ],
        port_min: 20000,
        port_max: 60000,
        ng: Some("127.0.0.1:0".parse().unwrap()),
        rtpproxy_udp: None,
        io,
        sockets,
        // The user agents are on the namespace's loopback, so their
        // addresses are the host's own (refused by default): allow them.
        media_allow: ["192.0.2.50", "2001:db8:6::10"].iter().map(|a| a.parse().unwrap()).collect(),
        ..Config::default()
    };
    let (relay, mut peer) = if rtpengine {
        let child = std::process::Command::new("rtpengine")
            .args([
                "--foreground",
                "--log-stderr",
                "--log-level=3",
                "--table=-1",
                "--interface=v6/2001:db8::1",
                "--interface=v4/192.0.2.1",
                "--listen-ng=127.0.0.1:2223",
                "--port-min=20000",
                "--port-max=60000",
                "--num-threads=2",
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("rtpengine");
        std::thread::sleep(Duration::from_millis(1500));
        (None, Some(child))
    } else {
        (Some(Relay::start(cfg).unwrap()), None)
    };
    let ng_addr: SocketAddr =
        relay.as_ref().and_then(|r| r.ng_addr()).unwrap_or_else(|| "127.0.0.1:2223".parse().unwrap());
    let ctl = UdpSocket::bind("127.0.0.1:0").unwrap();
    ctl.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let sdp = |ip: &str, fam: &str, port: u16| {
        format!("v=0\r\no=- 1 1 IN {fam} {ip}\r\ns=-\r\nc=IN {fam} {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n")
    };
    let ng = |pairs: Vec<(&str, Value)>| -> Value {
        let v = Value::Dict(pairs.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect());
        // rtpengine answers a repeated cookie from its cache: one per message.
        let cookie = format!("k{} ", COOKIE.fetch_add(1, Ordering::Relaxed));
        let mut m = cookie.clone().into_bytes();
        v.encode_into(&mut m);
        ctl.send_to(&m, ng_addr).unwrap();
        let mut buf = vec![0u8; 65536];
        let (n, _) = ctl.recv_from(&mut buf).unwrap();
        bencode::decode(&buf[cookie.len()..n]).unwrap()
    };
    let mut targets: Vec<SocketAddr> = Vec::with_capacity(calls);
    for i in 0..calls {
        let cid = format!("smoke-{i}");
        ng(vec![
            ("command", Value::str("offer")),
            ("call-id", Value::str(&cid)),
            ("from-tag", Value::str("a")),
            ("sdp", Value::str(&sdp("2001:db8:6::10", "IP6", 9002))),
            ("direction", Value::List(vec![Value::str("v6"), Value::str("v4")])),
            ("address family", Value::str("IP4")),
        ]);
        let a = ng(vec![
            ("command", Value::str("answer")),
            ("call-id", Value::str(&cid)),
            ("from-tag", Value::str("a")),
            ("to-tag", Value::str("b")),
            ("sdp", Value::str(&sdp("192.0.2.50", "IP4", 9000))),
            ("direction", Value::List(vec![Value::str("v4"), Value::str("v6")])),
        ]);
        let body = a.get("sdp").and_then(Value::as_str).expect("answer sdp").to_string();
        let port: u16 =
            body.lines().find_map(|l| l.strip_prefix("m=audio ")).unwrap().split(' ').next().unwrap().parse().unwrap();
        targets.push(SocketAddr::new("2001:db8::1".parse().unwrap(), port));
    }
    let rx = UdpSocket::bind("192.0.2.50:9000").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let _ = socket2::SockRef::from(&rx).set_recv_buffer_size(8 << 20);
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let receiver = std::thread::spawn(move || {
        let mut lat = Vec::new();
        let mut buf = [0u8; 2048];
        loop {
            match rx.recv_from(&mut buf) {
                Ok((n, _)) if n >= 20 => {
                    let sent = u64::from_be_bytes(buf[12..20].try_into().unwrap());
                    lat.push(mono_ns().saturating_sub(sent));
                }
                Ok(_) => {}
                Err(_) if d2.load(Ordering::Relaxed) => break,
                Err(_) => {}
            }
        }
        lat
    });
    let tx = UdpSocket::bind("[2001:db8:6::10]:9002").unwrap();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tick = 0u32;
    let mut pkt = vec![0u8; 172];
    pkt[0] = 0x80;
    pkt[11] = 1;
    while start.elapsed() < Duration::from_secs(secs) {
        let due = start + Duration::from_millis(20 * u64::from(tick));
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        pkt[2..4].copy_from_slice(&(tick as u16).to_be_bytes());
        pkt[4..8].copy_from_slice(&(tick * 160).to_be_bytes());
        for t in &targets {
            pkt[12..20].copy_from_slice(&mono_ns().to_be_bytes());
            if tx.send_to(&pkt, t).is_ok() {
                sent += 1;
            }
        }
        tick += 1;
    }
    std::thread::sleep(Duration::from_millis(300));
    done.store(true, Ordering::Relaxed);
    let mut lat = receiver.join().unwrap();
    lat.sort_unstable();
    let p = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0) as f64 / 1000.0;
    let late = lat.iter().filter(|&&l| l > 20_000_000).count();
    println!(
        "calls={calls} secs={secs} sent={sent} received={} loss={:.4}% late(>20ms)={late} latency_us p50={:.1} p99={:.1} p99.9={:.1} max={:.1}",
        lat.len(),
        100.0 * (sent.saturating_sub(lat.len() as u64)) as f64 / sent.max(1) as f64,
        p(0.5),
        p(0.99),
        p(0.999),
        p(1.0)
    );
    let cpu = match &peer {
        Some(c) => process_cpu_secs(c.id()),
        None => worker_cpu_secs(),
    };
    println!(
        "relay worker CPU: {cpu:.2} s for {} packets = {:.2} us/packet",
        lat.len(),
        cpu * 1e6 / lat.len().max(1) as f64
    );
    if let Some(relay) = relay {
        let st = relay.stats();
        println!(
            "relay ({:?}): rtp_packets={} dropped={}",
            relay.io_mode(),
            st.packets.rtp_packets,
            st.packets.dropped
        );
        relay.stop();
    }
    if let Some(c) = peer.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// CPU time (user + system) of this process's relay worker threads.
fn worker_cpu_secs() -> f64 {
    let tick = 100.0; // USER_HZ
    let mut total = 0u64;
    for e in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if !stat[open + 1..close].starts_with("trgw-w") {
            continue;
        }
        let f: Vec<&str> = stat[close + 2..].split(' ').collect();
        // Fields 14 and 15 (utime, stime) are 12 and 13 after the comm.
        total += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    total as f64 / tick
}

/// CPU time (user + system) of a whole process.
fn process_cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(close) = stat.rfind(')') else { return 0.0 };
    let f: Vec<&str> = stat[close + 2..].split(' ').collect();
    let t: u64 = [11, 12].iter().filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok())).sum();
    t as f64 / 100.0
}
