//! Shared by the `tunnel_*` integration tests: namespaces joined by veth
//! pairs, NATs of each kind built with nftables, `v6gate tunnel`, Miredo
//! and miredo-server run with their own configuration files in a temporary
//! directory (never /etc), and checks that what is sent arrives intact
//! (ping, UDP and TCP echo with random payloads).
//!
//! Every namespace is uniquely named and removed on drop, with every
//! process inside it killed, also when a test fails.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::netns::{veth, Netns};

pub const BIN: &str = env!("CARGO_BIN_EXE_v6gate");

/// A NAT between a private network (`in`) and the IPv4 "Internet" (`o`),
/// built with nftables in the NAT's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatKind {
    /// Endpoint-independent mapping and filtering: a static port forward
    /// of the client's port.
    FullCone,
    /// Endpoint-independent mapping, address-dependent filtering (a set of
    /// the addresses the client sent to).
    Restricted,
    /// Endpoint-independent mapping (Linux keeps the port), address- and
    /// port-dependent filtering (conntrack): plain masquerade.
    PortRestricted,
    /// Address- and port-dependent mapping: masquerade with random ports.
    Symmetric,
}

impl NatKind {
    /// The nftables ruleset for a NAT with public address `public`, the
    /// client at `client` using UDP port `port`.
    pub fn ruleset(self, public: &str, client: &str, port: u16) -> String {
        match self {
            NatKind::FullCone => format!(
                "table ip nat {{\n chain pre {{\n  type nat hook prerouting priority -100;\n  iif \"o\" ip daddr {public} udp dport {port} dnat to {client}\n }}\n chain post {{\n  type nat hook postrouting priority 100;\n  oif \"o\" ip saddr {client} udp sport {port} snat to {public}\n  oif \"o\" masquerade\n }}\n}}\n"
            ),
            // Unsolicited packets are dropped before conntrack sees them
            // (priority raw): otherwise the first one, refused, leaves an
            // entry that keeps refusing its flow after the client has
            // opened the filter.
            NatKind::Restricted => format!(
                "table ip nat {{\n set peers {{\n  type ipv4_addr\n  flags timeout\n  timeout 120s\n }}\n chain raw {{\n  type filter hook prerouting priority -300;\n  iif \"o\" ip daddr {public} udp dport {port} ip saddr != @peers drop\n }}\n chain pre {{\n  type nat hook prerouting priority -100;\n  iif \"o\" ip daddr {public} udp dport {port} ip saddr @peers dnat to {client}\n }}\n chain post {{\n  type nat hook postrouting priority 100;\n  oif \"o\" ip saddr {client} udp sport {port} add @peers {{ ip daddr }}\n  oif \"o\" ip saddr {client} udp sport {port} snat to {public}\n  oif \"o\" masquerade\n }}\n}}\n"
            ),
            NatKind::PortRestricted => {
                "table ip nat {\n chain post {\n  type nat hook postrouting priority 100;\n  oif \"o\" masquerade\n }\n}\n".to_string()
            }
            NatKind::Symmetric => {
                "table ip nat {\n chain post {\n  type nat hook postrouting priority 100;\n  oif \"o\" masquerade fully-random\n }\n}\n".to_string()
            }
        }
    }
}

/// A set of namespaces and the processes running in them.
pub struct World {
    pub ns: HashMap<String, Netns>,
    prefix: String,
    procs: Vec<(String, Child)>,
    pub dir: tempfile::TempDir,
}

impl World {
    /// A world whose namespaces are called `<prefix>-<pid>-<n>-<name>`.
    pub fn new(prefix: &str) -> World {
        World {
            ns: HashMap::new(),
            prefix: lab::netns::unique_name(prefix),
            procs: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Add namespace `name` (loopback up, no IPv6 DAD).
    pub fn add(&mut self, name: &str) -> &Netns {
        let n = Netns::create(&format!("{}-{name}", self.prefix)).unwrap();
        n.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
        n.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
        self.ns.insert(name.to_string(), n);
        &self.ns[name]
    }

    pub fn get(&self, name: &str) -> &Netns {
        &self.ns[name]
    }

    /// A veth pair `a:ai` <-> `b:bi`, both up.
    pub fn link(&self, a: &str, ai: &str, b: &str, bi: &str) {
        veth(self.get(a), ai, self.get(b), bi).unwrap();
    }

    /// `ip ARGS` in `ns`.
    pub fn ip(&self, ns: &str, args: &str) {
        let v: Vec<&str> = args.split_whitespace().collect();
        self.get(ns).ip(&v).unwrap_or_else(|e| panic!("{ns}: ip {args}: {e}"));
    }

    pub fn sysctl(&self, ns: &str, k: &str, v: &str) {
        self.get(ns).sysctl(k, v).unwrap();
    }

    /// Load an nftables ruleset in `ns`.
    pub fn nft(&self, ns: &str, rules: &str) {
        let p = self.dir.path().join(format!("{ns}.nft"));
        std::fs::write(&p, rules).unwrap();
        self.get(ns).exec("nft", &["-f", p.to_str().unwrap()]).unwrap_or_else(|e| panic!("nft in {ns}: {e}\n{rules}"));
    }

    fn spawn(&mut self, ns: &str, tag: &str, cmd: &str, args: &[&str]) -> usize {
        let log = std::fs::File::create(self.dir.path().join(format!("{tag}.log"))).unwrap();
        let child = self
            .get(ns)
            .command(cmd)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
        self.procs.push((tag.to_string(), child));
        self.procs.len() - 1
    }

    /// Run `v6gate tunnel` in `ns` with `toml`; `tag` names its files.
    pub fn v6gate(&mut self, ns: &str, tag: &str, toml: &str) {
        let cfg = self.dir.path().join(format!("{tag}.toml"));
        std::fs::write(&cfg, toml).unwrap();
        let status = self.dir.path().join(format!("{tag}.json"));
        let (c, s) = (cfg.to_str().unwrap().to_string(), status.to_str().unwrap().to_string());
        self.spawn(ns, tag, BIN, &["tunnel", "--config", &c, "--status-file", &s]);
        let t0 = Instant::now();
        while !status.exists() {
            assert!(t0.elapsed() < Duration::from_secs(15), "v6gate {tag} did not start: {}", self.log(tag));
            if let Some(st) = self.procs.iter_mut().find(|(t, _)| t == tag).and_then(|(_, c)| c.try_wait().unwrap()) {
                panic!("v6gate {tag} exited ({st}): {}", self.log(tag));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run `miredo` (client or relay) in `ns` with a configuration of our own.
    pub fn miredo(&mut self, ns: &str, tag: &str, conf: &str) {
        let c = self.dir.path().join(format!("{tag}.conf"));
        std::fs::write(&c, conf).unwrap();
        let pid = self.dir.path().join(format!("{tag}.pid"));
        let (c, p) = (c.to_str().unwrap().to_string(), pid.to_str().unwrap().to_string());
        self.spawn(ns, tag, "miredo", &["-f", "-c", &c, "-p", &p]);
    }

    /// Run `miredo-server` in `ns` with a configuration of our own.
    pub fn miredo_server(&mut self, ns: &str, tag: &str, conf: &str) {
        let c = self.dir.path().join(format!("{tag}.conf"));
        std::fs::write(&c, conf).unwrap();
        let pid = self.dir.path().join(format!("{tag}.pid"));
        let (c, p) = (c.to_str().unwrap().to_string(), pid.to_str().unwrap().to_string());
        self.spawn(ns, tag, "miredo-server", &["-f", "-c", &c, "-p", &p]);
    }

    /// A process's output so far.
    pub fn log(&self, tag: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{tag}.log"))).unwrap_or_default()
    }

    /// `v6gate tunnel`'s status file.
    pub fn status(&self, tag: &str) -> serde_json::Value {
        let p = self.dir.path().join(format!("{tag}.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_default()).unwrap_or(serde_json::Value::Null)
    }

    /// Wait (up to 10 s) until the status satisfies `pred`; returns it.
    pub fn wait_status(&self, tag: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let s = self.status(tag);
            if pred(&s) || t0.elapsed() > Duration::from_secs(10) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One counter: `function.counters.name` of `tag`'s status.
    pub fn counter(&self, tag: &str, function: &str, name: &str) -> u64 {
        self.status(tag)[function]["counters"][name].as_u64().unwrap_or(0)
    }

    /// Wait (up to `secs`) until the counter satisfies `pred`.
    pub fn wait_counter(&self, tag: &str, function: &str, name: &str, secs: u64, pred: impl Fn(u64) -> bool) -> u64 {
        let t0 = Instant::now();
        loop {
            let v = self.counter(tag, function, name);
            if pred(v) || t0.elapsed() > Duration::from_secs(secs) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait (up to `secs`) for an IPv6 address starting with `prefix` on `dev` in `ns`.
    pub fn wait_addr(&self, ns: &str, dev: &str, prefix: &str, secs: u64) -> Option<String> {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(secs) {
            if let Ok(o) = self.get(ns).ip(&["-6", "-o", "addr", "show", "dev", dev]) {
                let s = String::from_utf8_lossy(&o.stdout).into_owned();
                if let Some(a) = s.split_whitespace().find(|w| w.starts_with(prefix)) {
                    return Some(a.split('/').next().unwrap().to_string());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// `ping -c N` from `ns` to `dst`; true when every echo came back.
    pub fn ping(&self, ns: &str, dst: &str, n: u32) -> bool {
        let c = n.to_string();
        let out = Command::new("ip")
            .args(["netns", "exec", self.get(ns).name(), "ping", "-c", &c, "-i", "0.3", "-W", "3", dst])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        out.status.success() && s.contains(&format!("{n} received"))
    }

    /// Ping until one answer comes (the first packets wait for the Teredo
    /// trust procedure), at most `secs`.
    pub fn ping_until(&self, ns: &str, dst: &str, secs: u64) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(secs) {
            let out = Command::new("ip")
                .args(["netns", "exec", self.get(ns).name(), "ping", "-c", "1", "-W", "1", dst])
                .output()
                .unwrap();
            if out.status.success() {
                return true;
            }
        }
        false
    }

    /// Run `f` on a thread inside `ns`.
    pub fn in_ns<T: Send>(&self, ns: &str, f: impl FnOnce() -> T + Send) -> T {
        let n = self.get(ns);
        std::thread::scope(|s| {
            s.spawn(|| {
                n.enter_thread().unwrap();
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// UDP from `from` to `[dst]:port` served by an echo server in `server`:
    /// `count` datagrams of random bytes, each echoed back intact. Returns
    /// how many came back intact.
    pub fn udp_echo(&self, server: &str, from: &str, dst: &str, port: u16, count: usize, size: usize) -> usize {
        let srv = self.in_ns(server, || UdpSocket::bind(format!("[::]:{port}")).unwrap());
        srv.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut b = [0u8; 2048];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok((n, a)) = srv.recv_from(&mut b) {
                        let _ = srv.send_to(&b[..n], a);
                    }
                }
            });
            let dst: SocketAddr = format!("[{dst}]:{port}").parse().unwrap();
            let ok = self.in_ns(from, || {
                let c = UdpSocket::bind("[::]:0").unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut ok = 0;
                let mut seed = 0x1234_5678_u64 ^ port as u64;
                for _ in 0..count {
                    let msg: Vec<u8> = (0..size)
                        .map(|_| {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            seed as u8
                        })
                        .collect();
                    c.send_to(&msg, dst).unwrap();
                    let mut b = [0u8; 2048];
                    if let Ok((n, _)) = c.recv_from(&mut b) {
                        if b[..n] == msg[..] {
                            ok += 1;
                        }
                    }
                }
                ok
            });
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            ok
        })
    }

    /// TCP from `from` to `[dst]:port` served by an echo server in
    /// `server`: `size` random bytes sent and read back; true when intact.
    pub fn tcp_echo(&self, server: &str, from: &str, dst: &str, port: u16, size: usize) -> bool {
        let l = self.in_ns(server, || TcpListener::bind(format!("[::]:{port}")).unwrap());
        std::thread::scope(|s| {
            s.spawn(move || {
                if let Ok((mut c, _)) = l.accept() {
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut b = vec![0u8; 65536];
                    let mut total = 0;
                    while total < size {
                        match c.read(&mut b) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                total += n;
                                if c.write_all(&b[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                }
            });
            let dst: SocketAddr = format!("[{dst}]:{port}").parse().unwrap();
            self.in_ns(from, || {
                let Ok(mut c) = TcpStream::connect_timeout(&dst, Duration::from_secs(10)) else { return false };
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let msg: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
                let w = {
                    let mut c2 = c.try_clone().unwrap();
                    let m = msg.clone();
                    std::thread::spawn(move || c2.write_all(&m).is_ok())
                };
                let mut got = vec![0u8; size];
                let r = c.read_exact(&mut got).is_ok();
                w.join().unwrap() && r && got == msg
            })
        })
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for (_, c) in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The namespaces go with their handles (every process inside killed).
    }
}

/// Path of a file in the world's temporary directory.
pub fn path(w: &World, name: &str) -> PathBuf {
    w.dir.path().join(name)
}
