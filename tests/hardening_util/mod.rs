//! Shared by the hostile tests (`daemon_hardening`, `hardening_*`,
//! `soak`): the gateway with SIIT, NAT64 and the TrGW, an ng client, the
//! NAT64 session and TrGW call whose survival every hostile test checks,
//! and the attackers' and legitimate users' tools for the other planes
//! (the IMS-ALG in [`sip`]; DS-Lite, DSTM, Teredo and TRT below).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use lab::netns::Netns;
use softwire::lease::{self, Msg};
use trgw::bencode::{self, Value};
use xlat::tunnel::teredo::{self, TeredoAddr};

use crate::daemon_util::*;

pub mod sip;
#[path = "../../crates/alg/tests/common/wire.rs"]
pub mod wire;

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

/// An IPv4 UDP packet `src` → `dst` carrying `payload` (what a B4 puts
/// in its softwire).
pub fn inner_udp(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    etherparse::PacketBuilder::ipv4(src.ip().octets(), dst.ip().octets(), 64)
        .udp(src.port(), dst.port())
        .write(&mut v, payload)
        .unwrap();
    v
}

/// A raw IPv4-in-IPv6 socket (protocol 4) bound to `src`: what it sends
/// gets an IPv6 header from the kernel, and it receives the packets of
/// protocol 4 sent to `src` (without their IPv6 header).
pub fn softwire_socket(src: Ipv6Addr) -> socket2::Socket {
    let s = socket2::Socket::new(
        socket2::Domain::IPV6,
        socket2::Type::RAW,
        Some(socket2::Protocol::from(libc::IPPROTO_IPIP)),
    )
    .unwrap();
    s.bind(&SocketAddr::new(src.into(), 0).into()).unwrap();
    s
}

/// Sends `inner` (an IPv4 packet) in IPv6 from `src` to `aftr`.
pub fn softwire_send(src: Ipv6Addr, aftr: Ipv6Addr, inner: &[u8]) {
    let s = softwire_socket(src);
    s.send_to(inner, &SocketAddr::new(aftr.into(), 0).into()).unwrap();
}

/// The lwAFTR with DSTM only (`[lw4o6]`, device `v6d-lw`): its lease
/// server on the gateway's address towards h6, port 4739, for clients of
/// 2001:db8::/32; `extra` lines added to `[lw4o6.dstm]`.
pub fn dstm_config(leases: &std::path::Path, extra: &str) -> String {
    format!(
        r#"
[lw4o6]
aftr-address = "2001:db8:ffff::2"
tun = "v6d-lw"
[lw4o6.dstm]
pool = ["192.0.2.128/25"]
listen = "[2001:db8:1::1]:4739"
lease-file = "{}"
clients = ["2001:db8::/32"]
{extra}"#,
        leases.display()
    )
}

/// One DSTM lease message from `src` (its own socket) to `server` and the
/// answer with the same transaction id.
pub fn lease_ask(src: Ipv6Addr, server: SocketAddr, m: Msg, xid: u32) -> Option<Msg> {
    let s = UdpSocket::bind(SocketAddr::new(src.into(), 0)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.send_to(&lease::encode(m, xid), server).ok()?;
    let mut b = [0u8; 64];
    let n = s.recv(&mut b).ok()?;
    lease::decode(&b[..n]).filter(|(_, x)| *x == xid).map(|(m, _)| m)
}

/// The Teredo address of a client of `server` whose NAT maps it to `mapped`.
pub fn teredo_of(server: Ipv4Addr, mapped: SocketAddrV4, flags: u16) -> Ipv6Addr {
    TeredoAddr { server, flags, mapped }.to_ipv6()
}

/// A Teredo bubble `src` → `dst`.
pub fn bubble_from(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = [0u8; 40];
    let n = teredo::bubble(src, dst, &mut b).unwrap();
    b[..n].to_vec()
}

/// An IPPROTO_RAW socket: it writes whole IPv4 packets, any source.
pub fn raw_ipv4() -> socket2::Socket {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::RAW, Some(socket2::Protocol::from(libc::IPPROTO_RAW)))
        .unwrap()
}

/// A UDP datagram `from` → `to` carrying `payload`, written whole through
/// a raw socket ([`raw_ipv4`]).
pub fn spoofed(raw: &socket2::Socket, from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) {
    let mut v = Vec::new();
    etherparse::PacketBuilder::ipv4(from.ip().octets(), to.ip().octets(), 64)
        .udp(from.port(), to.port())
        .write(&mut v, payload)
        .unwrap();
    let dst = SocketAddr::new((*to.ip()).into(), 0);
    let _ = raw.send_to(&v, &dst.into());
}

/// The Teredo packets `sock` receives within `wait` of quiet: (data
/// packets, bubbles).
pub fn teredo_received(sock: &UdpSocket, wait: Duration) -> (usize, usize) {
    sock.set_read_timeout(Some(wait)).unwrap();
    let (mut data, mut bubbles) = (0, 0);
    let mut b = [0u8; 2048];
    while let Ok(n) = sock.recv(&mut b) {
        match teredo::parse(&b[..n]) {
            Ok(p) if p.is_bubble() => bubbles += 1,
            Ok(_) => data += 1,
            Err(_) => {}
        }
    }
    (data, bubbles)
}

/// A TCP connection from `src` (port chosen) to `dst`, or the error.
pub fn connect_from(src: std::net::IpAddr, dst: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::for_address(dst), socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(src, 0).into())?;
    s.connect_timeout(&dst.into(), timeout)?;
    Ok(s.into())
}

/// A TCP server in `ns` on `port` that echoes on every connection it
/// accepts, until the process ends.
pub fn tcp_echo_server(ns: &Netns, port: u16) {
    let name = ns.name().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        let l = TcpListener::bind(("0.0.0.0", port)).unwrap();
        tx.send(()).unwrap();
        for mut c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                while let Ok(n) = c.read(&mut b) {
                    if n == 0 || c.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    rx.recv().unwrap();
}
