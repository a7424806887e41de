//! Shared by `daemon_hardening` and `soak`: the gateway with SIIT, NAT64
//! and the TrGW, an ng client, and the NAT64 session and TrGW call whose
//! survival every hostile test checks.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use trgw::bencode::{self, Value};

use crate::daemon_util::*;

/// The IPv4 host through NAT64.
pub const H4_NAT64: &str = "64:ff9b:2::c633:6402";
pub const TOKEN: &str = "hardening-test-token-0123456789";

/// SIIT, NAT64 and the TrGW (its interfaces on the gateway's veths), ng on
/// 127.0.0.1:2299, rtpproxy UDP on 127.0.0.1:22299 and on a Unix socket;
/// `admin` and `trgw` lines are added to their tables.
pub fn config(dir: &std::path::Path, admin: &str, trgw: &str) -> String {
    format!(
        r#"[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:1::2", "192.0.2.2"]]
[nat64]
pool6 = "64:ff9b:2::/96"
pool4 = ["203.0.113.1/32"]
[tun]
queues = 1
[admin]
listen = "127.0.0.1:9164"
{admin}
[trgw]
ng = "127.0.0.1:2299"
rtpproxy-udp = "127.0.0.1:22299"
rtpproxy-unix = "{}"
port-min = 30000
port-max = 30099
workers = 1
{trgw}
[[trgw.interface]]
name = "v6"
ipv6 = "2001:db8:1::1"
[[trgw.interface]]
name = "v4"
ipv4 = "198.51.100.1"
"#,
        dir.join("rtpp.sock").display()
    )
}

/// The lab with [`config`] plus `tail` (e.g. another `[[trgw.interface]]`);
/// the second value holds the rtpproxy Unix socket's directory.
pub fn start(admin: &str, trgw: &str, tail: &str) -> (Lab, tempfile::TempDir) {
    let sock = tempfile::tempdir().unwrap();
    let lab = Lab::start(&format!("{}{tail}\n", config(sock.path(), admin, trgw)));
    (lab, sock)
}

pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// An ng client in the gateway namespace.
pub struct Ng {
    pub sock: UdpSocket,
    n: u32,
}

impl Ng {
    pub fn new(lab: &Lab) -> Ng {
        let sock = in_ns(&lab.gw, || UdpSocket::bind("127.0.0.1:0").unwrap());
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        Ng { sock, n: 0 }
    }

    /// A client on a socket already in the gateway namespace.
    pub fn from_socket(sock: UdpSocket) -> Ng {
        Ng { sock, n: 0 }
    }

    /// Sends a command; the reply dictionary, or None when none came.
    pub fn cmd(&mut self, pairs: Vec<(&str, Value)>) -> Option<Value> {
        // Cookies are unique across clients (replies are cached by cookie).
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        self.n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let v = Value::Dict(pairs.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect());
        let mut m = format!("c{} ", self.n).into_bytes();
        m.extend_from_slice(&v.encode());
        self.sock.send_to(&m, "127.0.0.1:2299").unwrap();
        let mut buf = vec![0u8; 70_000];
        let n = self.sock.recv(&mut buf).ok()?;
        let sp = buf[..n].iter().position(|&b| b == b' ')?;
        bencode::decode(&buf[sp + 1..n]).ok()
    }
}

pub fn s(x: &str) -> Value {
    Value::str(x)
}

pub fn result(v: &Value) -> &str {
    v.get("result").and_then(Value::as_str).unwrap_or("")
}

pub fn reason(v: &Value) -> String {
    v.get("error-reason").and_then(Value::as_str).unwrap_or("").to_string()
}

pub fn sdp(ip: &str, port: u16) -> String {
    let fam = if ip.contains(':') { "IP6" } else { "IP4" };
    format!("v=0\r\no=- 1 1 IN {fam} {ip}\r\ns=-\r\nc=IN {fam} {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n")
}

/// m= port and c= address of an SDP body.
pub fn media_of(v: &Value) -> SocketAddr {
    let sdp = v.get("sdp").and_then(Value::as_str).unwrap();
    let addr = sdp.lines().find_map(|l| l.strip_prefix("c=IN ")).unwrap()[4..].trim().to_string();
    let port: u16 =
        sdp.lines().find_map(|l| l.strip_prefix("m=audio ")).unwrap().split(' ').next().unwrap().parse().unwrap();
    SocketAddr::new(addr.parse().unwrap(), port)
}

pub fn offer(ng: &mut Ng, call: &str, ip: &str, port: u16) -> Value {
    ng.cmd(vec![
        ("command", s("offer")),
        ("call-id", s(call)),
        ("from-tag", s("ft")),
        ("sdp", s(&sdp(ip, port))),
        ("direction", Value::List(vec![s("v6"), s("v4")])),
        ("address family", s("IP4")),
    ])
    .expect("an ng reply")
}

pub fn answer(ng: &mut Ng, call: &str, ip: &str, port: u16) -> Value {
    ng.cmd(vec![
        ("command", s("answer")),
        ("call-id", s(call)),
        ("from-tag", s("ft")),
        ("to-tag", s("tt")),
        ("sdp", s(&sdp(ip, port))),
    ])
    .expect("an ng reply")
}

/// A NAT64 session and a TrGW call set up before the attack.
pub struct Baseline {
    _echo: EchoServers,
    /// The NAT64 client socket (IPv6 host) and where it sends.
    pub nat: UdpSocket,
    pub nat_dst: SocketAddr,
    /// The user agents of the call.
    pub ua6: UdpSocket,
    pub ua4: UdpSocket,
    /// Where UA6 sends (the relay's IPv6 leg) and where UA4 sends.
    pub to6: SocketAddr,
    pub to4: SocketAddr,
}

pub fn recv_from(sock: &UdpSocket) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = [0u8; 2048];
    sock.recv_from(&mut buf).ok().map(|(n, a)| (buf[..n].to_vec(), a))
}

impl Baseline {
    pub fn new(lab: &Lab) -> Baseline {
        let echo = EchoServers::udp(&lab.h4, "0.0.0.0", &[7000]);
        let nat = udp_client(&lab.h6, true);
        let nat_dst = sa(&format!("[{H4_NAT64}]:7000"));
        assert_eq!(udp_roundtrip(&nat, nat_dst, b"before").unwrap(), b"before");
        let ua6 = in_ns(&lab.h6, || UdpSocket::bind("[2001:db8:1::2]:9002").unwrap());
        let ua4 = in_ns(&lab.h4, || UdpSocket::bind("198.51.100.2:9000").unwrap());
        for u in [&ua6, &ua4] {
            u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let mut ng = Ng::new(lab);
        let o = offer(&mut ng, "baseline", "2001:db8:1::2", 9002);
        assert_eq!(result(&o), "ok", "{o:?}");
        let to4 = media_of(&o);
        let a = answer(&mut ng, "baseline", "198.51.100.2", 9000);
        assert_eq!(result(&a), "ok", "{a:?}");
        let to6 = media_of(&a);
        let b = Baseline { _echo: echo, nat, nat_dst, ua6, ua4, to6, to4 };
        b.check("before");
        b
    }

    /// The NAT64 session and the call still carry packets both ways.
    pub fn check(&self, what: &str) {
        assert_eq!(udp_roundtrip(&self.nat, self.nat_dst, what.as_bytes()).unwrap(), what.as_bytes(), "NAT64 session");
        for i in 0..3 {
            let m6 = format!("rtp 6->4 {what} {i}");
            self.ua6.send_to(m6.as_bytes(), self.to6).unwrap();
            let (got, from) = recv_from(&self.ua4).expect("RTP 6->4 through the relay");
            assert_eq!(got, m6.as_bytes());
            assert_eq!(from, self.to4, "from the relay's IPv4 leg");
            let m4 = format!("rtp 4->6 {what} {i}");
            self.ua4.send_to(m4.as_bytes(), self.to4).unwrap();
            let (got, _) = recv_from(&self.ua6).expect("RTP 4->6 through the relay");
            assert_eq!(got, m4.as_bytes());
        }
    }
}

pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(15), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The daemon's RLIMIT_NOFILE (soft, hard), from /proc.
pub fn nofile(lab: &Lab) -> (usize, usize) {
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", lab.pid())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let field = |i: usize| line.split_whitespace().nth(i).and_then(|v| v.parse().ok()).unwrap();
    (field(3), field(4))
}

/// Sets the daemon's RLIMIT_NOFILE (`prlimit`).
pub fn set_nofile(lab: &Lab, soft: usize, hard: usize) {
    let v = format!("--nofile={soft}:{hard}");
    let out = std::process::Command::new("prlimit").args(["--pid", &lab.pid().to_string(), &v]).output().unwrap();
    assert!(out.status.success(), "prlimit: {}", String::from_utf8_lossy(&out.stderr));
}

/// Leaves the daemon no free descriptor: its soft limit two above what it
/// holds, then twenty admin connections (the first take the last two,
/// the rest make its accept fail with EMFILE). Returns the connections
/// (hold them) and the limits to restore with [`set_nofile`].
pub fn exhaust_descriptors(lab: &Lab) -> (Vec<std::net::TcpStream>, (usize, usize)) {
    let (soft, hard) = nofile(lab);
    set_nofile(lab, lab.open_fds() + 2, hard);
    let conns =
        in_ns(&lab.gw, || (0..20).filter_map(|_| std::net::TcpStream::connect("127.0.0.1:9164").ok()).collect());
    (conns, (soft, hard))
}
