//! Shared by the `daemon_*` integration tests: a three-namespace testbed
//! (IPv6 host — gateway running `v6gate run` — IPv4 host) and helpers to
//! run socket code inside a namespace.
//!
//! Addresses:
//! - h6: 2001:db8:1::2/64 on `a6`, default route via the gateway's 2001:db8:1::1
//! - gw: 2001:db8:1::1/64 on `g6`, 198.51.100.1/24 on `g4`, forwarding on
//! - h4: 198.51.100.2/24 on `a4`, default route via 198.51.100.1
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lab::netns::{veth, Netns};

pub const BIN: &str = env!("CARGO_BIN_EXE_v6gate");

/// The binary the testbed runs: `V6GATE_BIN` when set (e.g. a release
/// build), else the one cargo built for the tests.
pub fn bin() -> String {
    std::env::var("V6GATE_BIN").unwrap_or_else(|_| BIN.to_string())
}
pub const H6: &str = "2001:db8:1::2";
pub const H4: &str = "198.51.100.2";

pub struct Lab {
    pub h6: Netns,
    pub gw: Netns,
    pub h4: Netns,
    pub daemon: Option<Child>,
    pub dir: tempfile::TempDir,
}

pub fn config_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("v6gate.toml")
}

impl Lab {
    /// Build the namespaces and start the daemon with `config`.
    pub fn start(config: &str) -> Lab {
        Lab::start_with(config, |_| {})
    }

    /// As [`Lab::start`], with `setup` run on the testbed before the
    /// daemon starts (addresses it must find, routes, sysctls).
    pub fn start_with(config: &str, setup: impl FnOnce(&Lab)) -> Lab {
        let h6 = Netns::unique("v6d-h6").unwrap();
        let gw = Netns::unique("v6d-gw").unwrap();
        let h4 = Netns::unique("v6d-h4").unwrap();
        // No duplicate address detection: a fresh veth's link-local address
        // is otherwise tentative for a second and neighbour discovery waits.
        for ns in [&h6, &gw, &h4] {
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
        }
        veth(&h6, "a6", &gw, "g6").unwrap();
        veth(&h4, "a4", &gw, "g4").unwrap();
        h6.ip(&["addr", "add", "2001:db8:1::2/64", "dev", "a6", "nodad"]).unwrap();
        gw.ip(&["addr", "add", "2001:db8:1::1/64", "dev", "g6", "nodad"]).unwrap();
        h6.ip(&["-6", "route", "add", "default", "via", "2001:db8:1::1"]).unwrap();
        h4.ip(&["addr", "add", "198.51.100.2/24", "dev", "a4"]).unwrap();
        gw.ip(&["addr", "add", "198.51.100.1/24", "dev", "g4"]).unwrap();
        h4.ip(&["route", "add", "default", "via", "198.51.100.1"]).unwrap();
        gw.sysctl("net.ipv4.ip_forward", "1").unwrap();
        gw.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(config_path(&dir), config).unwrap();
        let mut lab = Lab { h6, gw, h4, daemon: None, dir };
        setup(&lab);
        lab.spawn();
        lab
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let child = self
            .gw
            .command(&bin())
            .args(["run", "--config"])
            .arg(config_path(&self.dir))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        let t0 = Instant::now();
        loop {
            if self.ctl(&["status"]).is_ok() {
                return;
            }
            if let Some(st) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited ({st}): {}", self.log());
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "daemon not ready: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Replace the configuration file (not yet reloaded).
    pub fn write_config(&self, text: &str) {
        std::fs::write(config_path(&self.dir), text).unwrap();
    }

    /// Send SIGHUP to the daemon.
    pub fn sighup(&self) {
        let pid = self.daemon.as_ref().unwrap().id() as i32;
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    }

    /// The daemon's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// `v6gate ctl ARGS` inside the gateway namespace: stdout, or stderr as the error.
    pub fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let out =
            self.gw.command(BIN).arg("ctl").args(args).stdin(Stdio::null()).output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `v6gate ctl ARGS` with extra environment variables.
    pub fn ctl_env(&self, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
        let mut c = self.gw.command(BIN);
        c.arg("ctl").args(args).stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.daemon.as_ref().unwrap().id()
    }

    /// Whether the daemon process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.daemon.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The daemon's resident set size in KiB (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Descriptors the daemon holds open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count())
    }

    /// `/status` as JSON.
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ctl(&["status"]).unwrap()).unwrap()
    }

    /// The value of one metric line, e.g. `v6gate_drops_total{reason="truncated"}` (0 when absent).
    pub fn metric(&self, series: &str) -> u64 {
        let m = self.ctl(&["metrics"]).unwrap();
        m.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
            .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
    }

    /// Poll `series` until `pred` holds (or 10 s pass); returns the last value.
    pub fn wait_metric(&self, series: &str, pred: impl Fn(u64) -> bool) -> u64 {
        let t0 = Instant::now();
        loop {
            let v = self.metric(series);
            if pred(v) || t0.elapsed() > Duration::from_secs(10) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the log contains `needle` (or 10 s pass).
    pub fn wait_log(&self, needle: &str) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stop the daemon with SIGTERM; returns its exit status and log.
    pub fn stop(&mut self) -> (std::process::ExitStatus, String) {
        let mut c = self.daemon.take().unwrap();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return (st, self.log());
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = c.kill();
                panic!("daemon did not stop on SIGTERM: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start the daemon again (after [`Lab::stop`]), same namespaces and
    /// configuration file; waits until it answers.
    #[allow(dead_code)]
    pub fn restart(&mut self) {
        assert!(self.daemon.is_none(), "stop it first");
        self.spawn();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run `f` on a thread inside `ns`.
pub fn in_ns<T: Send>(ns: &Netns, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_thread().unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// `ping -c COUNT -W 2 [extra] DST` inside `ns`: (success, output).
pub fn ping(ns: &Netns, dst: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["-c", "1", "-W", "2"];
    args.extend_from_slice(extra);
    args.push(dst);
    let out = ns.command("ping").args(&args).stdin(Stdio::null()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// Run `server` on a thread in `srv_ns` (it calls `ready` once it is
/// listening and returns the peer it served), then `client` on a thread in
/// `cli_ns`; returns what the client got back and the peer the server saw.
fn round_trip(
    srv_ns: &Netns,
    cli_ns: &Netns,
    server: impl FnOnce(&dyn Fn()) -> SocketAddr + Send,
    client: impl FnOnce() -> Vec<u8> + Send,
) -> (Vec<u8>, SocketAddr) {
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let srv = s.spawn(move || {
            srv_ns.enter_thread().unwrap();
            server(&move || tx.send(()).unwrap())
        });
        rx.recv().unwrap();
        let got = s
            .spawn(move || {
                cli_ns.enter_thread().unwrap();
                client()
            })
            .join()
            .unwrap();
        (got, srv.join().unwrap())
    })
}

/// A UDP echo round trip: server bound in `srv_ns` on `bind`, client in
/// `cli_ns` sending to `dst`. Returns what the client got back and the
/// source address the server saw.
pub fn udp_echo(
    srv_ns: &Netns,
    bind: SocketAddr,
    cli_ns: &Netns,
    dst: SocketAddr,
    msg: &[u8],
) -> (Vec<u8>, SocketAddr) {
    let server = move |ready: &dyn Fn()| {
        let sock = UdpSocket::bind(bind).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        ready();
        let mut buf = vec![0u8; 65536];
        let (n, from) = sock.recv_from(&mut buf).unwrap();
        sock.send_to(&buf[..n], from).unwrap();
        from
    };
    let client = move || {
        let unspec: SocketAddr = if dst.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }.parse().unwrap();
        let sock = UdpSocket::bind(unspec).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sock.send_to(msg, dst).unwrap();
        let mut buf = vec![0u8; 65536];
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        buf[..n].to_vec()
    };
    round_trip(srv_ns, cli_ns, server, client)
}

/// A listener on `bind`. A previous round trip's connection on the same
/// port may hold it for a moment after its close (the kernel answers
/// `EADDRINUSE` while it goes): tried again for up to 5 s.
fn listen_on(bind: SocketAddr) -> TcpListener {
    let t0 = Instant::now();
    loop {
        match TcpListener::bind(bind) {
            Ok(l) => return l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("listening on {bind}: {e}"),
        }
    }
}

/// The first connection `l` accepts within `limit`; panics after it, so
/// that a client that never connects fails the test instead of hanging
/// it in `accept`.
fn accept_within(l: &TcpListener, limit: Duration) -> (TcpStream, SocketAddr) {
    l.set_nonblocking(true).unwrap();
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok(c) => return c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && t0.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("no connection accepted within {limit:?}: {e}"),
        }
    }
}

/// A TCP echo round trip (connect, send, read back, close), as [`udp_echo`].
pub fn tcp_echo(
    srv_ns: &Netns,
    bind: SocketAddr,
    cli_ns: &Netns,
    dst: SocketAddr,
    msg: &[u8],
) -> (Vec<u8>, SocketAddr) {
    let server = move |ready: &dyn Fn()| {
        let l = listen_on(bind);
        ready();
        let (mut c, from) = accept_within(&l, Duration::from_secs(15));
        c.set_nonblocking(false).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; msg.len()];
        c.read_exact(&mut buf).unwrap();
        c.write_all(&buf).unwrap();
        from
    };
    let client = move || {
        let mut c = TcpStream::connect_timeout(&dst, Duration::from_secs(5)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(msg).unwrap();
        let mut buf = vec![0u8; msg.len()];
        c.read_exact(&mut buf).unwrap();
        buf
    };
    round_trip(srv_ns, cli_ns, server, client)
}

/// Send `count` raw IP payloads with protocol `proto` from a thread in
/// `ns` to `dst` (the kernel writes the IP header).
pub fn send_raw(ns: &Netns, dst: std::net::IpAddr, proto: i32, payload: &[u8], count: usize) {
    in_ns(ns, || {
        let fam = if dst.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: plain socket(2); the fd is closed below.
        let fd = unsafe { libc::socket(fam, libc::SOCK_RAW, proto) };
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let sa = socket2_addr(SocketAddr::new(dst, 0));
        for i in 0..count {
            // Paced, so the TUN queue (500 packets) never overflows.
            if i % 50 == 49 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            // SAFETY: payload and the sockaddr storage are valid for the lengths given.
            let n = unsafe {
                libc::sendto(
                    fd,
                    payload.as_ptr().cast(),
                    payload.len(),
                    0,
                    (&sa.0 as *const libc::sockaddr_storage).cast(),
                    sa.1,
                )
            };
            assert!(n >= 0, "sendto: {}", std::io::Error::last_os_error());
        }
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
    })
}

fn socket2_addr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// UDP echo servers on `ports` inside a namespace, for as long as the
/// value lives. Each reply is the request prefixed with nothing; the
/// sources seen are recorded.
pub struct EchoServers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<SocketAddr>>>,
}

impl EchoServers {
    pub fn udp(ns: &Netns, bind_ip: &str, ports: &[u16]) -> EchoServers {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for &port in ports {
            let (tx, rx) = std::sync::mpsc::channel();
            let path = format!("{}/{}", lab::netns::NETNS_DIR, ns.name());
            let (stop, seen) = (stop.clone(), seen.clone());
            let bind: SocketAddr = format!("{bind_ip}:{port}").parse().unwrap();
            threads.push(std::thread::spawn(move || {
                let f = std::fs::File::open(path).unwrap();
                nix_setns(&f);
                let sock = UdpSocket::bind(bind).unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                tx.send(()).unwrap();
                let mut buf = vec![0u8; 65536];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        seen.lock().unwrap().push(from);
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            }));
            rx.recv().unwrap();
        }
        EchoServers { stop, threads, seen }
    }
}

impl Drop for EchoServers {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn nix_setns(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: setns(2) on an open namespace file, for this thread only.
    assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
}

/// A UDP client socket inside `ns` (bound to an ephemeral port), for
/// several round trips.
pub fn udp_client(ns: &Netns, v6: bool) -> UdpSocket {
    in_ns(ns, || {
        let s = UdpSocket::bind(if v6 { "[::]:0" } else { "0.0.0.0:0" }).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s
    })
}

/// One round trip on `sock`: send `msg` to `dst`, wait for the echo.
pub fn udp_roundtrip(sock: &UdpSocket, dst: SocketAddr, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    sock.send_to(msg, dst)?;
    let mut buf = vec![0u8; 65536];
    let (n, _) = sock.recv_from(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// One raw HTTP exchange with the admin API (127.0.0.1:9164 in `ns`):
/// writes `req` and returns what came back until the server closed the
/// connection or 5 s passed.
pub fn http_raw(ns: &Netns, req: &[u8]) -> String {
    in_ns(ns, || {
        let mut s = TcpStream::connect("127.0.0.1:9164").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(req);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
}

/// The status code of an HTTP answer (0 when there is none).
pub fn http_status(answer: &str) -> u16 {
    answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}
