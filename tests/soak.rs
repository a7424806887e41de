//! The soak test of issues #11 and #29 (`make soak`, not part of `make
//! test`): one `v6gate run` with every plane on — SIIT, NAT64, DNS64, the
//! TrGW (ng, rtpproxy UDP and Unix), the IMS-ALG (UDP and TCP, its DNS
//! resolver a server that never answers), a Teredo server and relay
//! (separate addresses), the DS-Lite AFTR, the lwAFTR's DSTM lease
//! server, the TRT and the admin API — under mixed hostile traffic for
//! `SOAK_SECONDS` (default 600) from one attacker host with 128 addresses
//! of its IPv6 /64 and four IPv4 addresses, besides the local attackers of
//! the admin API and the control sockets. Meanwhile, and checked every few
//! seconds, the legitimate users keep working: a NAT64 session and a TrGW
//! call set up before, a SIP call through the ALG, a DS-Lite subscriber's
//! flow, a DSTM lease holder's RENEW, a trusted Teredo peer's traffic
//! through the relay both ways and a TRT transfer; `/status` answers.
//!
//! The daemon's RSS and descriptors are sampled: after the warm-up they
//! must stay flat, and after the attackers stop (and the timeouts pass) the
//! descriptors must be back where they started. Canary listeners on
//! loopback and on the gateway's own addresses, which the attackers aim
//! at through the ALG, the TrGW and the TRT, must receive nothing; and
//! every refusal family the attack should trigger ([`EXPECTED`]) must be
//! nonzero in `/metrics`.
//!
//! Every attacker is paced and stops by itself at the deadline; all traffic
//! stays inside the test's own namespaces.

mod daemon_util;
mod hardening_util;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daemon_util::{in_ns, Lab};
use hardening_util::sip::{self, ALG4, ALG6};
use hardening_util::wire::options;
use hardening_util::*;
use lab::netns::Netns;
use softwire::lease::Msg;
use trgw::bencode::Value;
use xlat::tunnel::teredo;

const DNS64: &str = r#"
[dns64]
listen = ["[2001:db8:1::1]:53"]
upstream = ["198.51.100.2:5353"]
prefix = "64:ff9b:1::/96"
allow = ["2001:db8:1::/64"]
timeout-ms = 500
"#;

/// The attacker host's addresses: 128 of its /64 (2001:db8:7::1:0 + i, on
/// h6, routed there by the gateway) and four IPv4 addresses on h4.
const ATTACK64: &str = "2001:db8:7::1:";
const ATTACKERS: u16 = 128;
const ATTACKERS4: [&str; 4] = ["198.51.100.50", "198.51.100.51", "198.51.100.52", "198.51.100.53"];

/// The Teredo server (primary; the secondary is .11) and the relay, on
/// addresses of their own (issue #32 defect 1).
const TEREDO_SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const RELAY: &str = "198.51.100.20:3544";
const RELAY6: &str = "2001:db8:1::1";
/// The legitimate Teredo peer: a client on h4 whose mapping is its own address.
const PEER: &str = "198.51.100.2:40000";
/// The native host the Teredo peer talks to (on h6).
const NATIVE: &str = "[2001:db8:1::2]:7400";

/// The DS-Lite AFTR and the legitimate B4 (another /56 than the attacker's).
const AFTR: &str = "2001:db8:ffff::1";
const B4: &str = "2001:db8:5::2";
/// The DSTM lease server and the legitimate lease holder (a /64 of its own).
const DSTM: &str = "[2001:db8:1::1]:4739";
const DSTM_CLIENT: &str = "2001:db8:6::2";

/// h4 through the TRT's prefix; a black-holed target (10.99.0.1: routed
/// to h4, which does not forward); the gateway itself and loopback.
const TRT_SERVER: &str = "64:ff9b:3::c633:6402";
const TRT_HOLE: &str = "[64:ff9b:3::a63:1]:80";
const TRT_OWN: [&str; 2] = ["[64:ff9b:3::c633:6401]", "[64:ff9b:3::7f00:1]"];
/// The TCP echo server on h4 the TRT attackers connect to.
const TRT_ECHO: u16 = 7200;

/// Canary listeners on loopback and the gateway's own addresses (UDP and
/// TCP ports): the attackers aim there through the ALG, the TrGW and the
/// TRT; nothing may arrive.
const CANARY_UDP: u16 = 7002;
const CANARY_TCP: u16 = 7003;
const CANARY_HOSTS: [&str; 4] = ["127.0.0.1", "[::1]", "198.51.100.1", "[2001:db8:1::1]"];

/// Every refusal family the attackers must trigger: each series must be
/// nonzero at the end, or the attack did not run (or was not counted).
const EXPECTED: &[&str] = &[
    // The admin API and the TrGW's control sockets.
    "v6gate_admin_refused_total{reason=\"token\"}",
    "v6gate_admin_refused_total{reason=\"host\"}",
    "v6gate_admin_refused_total{reason=\"origin\"}",
    "v6gate_trgw_control_errors_total{reason=\"media-address-refused\"}",
    "v6gate_destination_refused_total{plane=\"trgw\",reason=\"loopback\"}",
    // The DNS64: garbage, and clients outside `allow`.
    "v6gate_dns64_events_total{event=\"dropped_malformed\"}",
    "v6gate_dns64_events_total{event=\"refused\"}",
    // The IMS-ALG: names nobody resolves, padded INVITEs, next hops at
    // loopback and the gateway, garbage, TCP held idle or trickled.
    "v6gate_alg_refused_total{reason=\"dns-busy\"}",
    "v6gate_alg_refused_total{reason=\"dns-timeout\"}",
    "v6gate_alg_refused_total{reason=\"client-share\"}",
    "v6gate_alg_refused_total{reason=\"next-hop-refused\"}",
    "v6gate_alg_refused_total{reason=\"own-listener\"}",
    "v6gate_alg_drops_total{reason=\"rate-limited\"}",
    "v6gate_alg_local_responses_total{code=\"400\"}",
    "v6gate_alg_tcp_refused_total{reason=\"client-share\"}",
    "v6gate_alg_tcp_closed_total{reason=\"idle-timeout\"}",
    "v6gate_alg_tcp_closed_total{reason=\"message-timeout\"}",
    "v6gate_destination_refused_total{plane=\"alg\",reason=\"loopback\"}",
    "v6gate_destination_refused_total{plane=\"alg\",reason=\"own-address\"}",
    // DS-Lite: flows from many B4 addresses of one /56.
    "v6gate_softwire_dropped_packets_total{function=\"dslite\",reason=\"quota-exceeded\"}",
    // DSTM: REQUESTs from many addresses of one /64.
    "v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"share-exceeded\"}",
    "v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"client-rate-limited\"}",
    // Teredo: spoofed bubbles, new peers from one /64, rotating flag bits;
    // Router Solicitations over a client's rate, garbage.
    "v6gate_tunnel_events_total{function=\"teredo-relay\",event=\"peers-refused\"}",
    "v6gate_tunnel_dropped_packets_total{function=\"teredo-relay\",reason=\"untrusted-share\"}",
    "v6gate_tunnel_events_total{function=\"teredo-relay\",event=\"bubbles-limited\"}",
    "v6gate_tunnel_dropped_packets_total{function=\"teredo-server\",reason=\"rate-limited\"}",
    "v6gate_tunnel_dropped_packets_total{function=\"teredo-server\",reason=\"malformed\"}",
    // The RFC 4380 budget of one mapping spent: the peer is unreachable.
    "v6gate_tunnel_dropped_packets_total{function=\"teredo-relay\",reason=\"unreachable\"}",
    // TRT: connection floods, idle connections, black-holed and own targets, UDP flows.
    "v6gate_trt_events_total{event=\"tcp-refused-client\"}",
    "v6gate_trt_events_total{event=\"tcp-refused-connecting\"}",
    "v6gate_trt_events_total{event=\"tcp-connect-failed\"}",
    "v6gate_trt_events_total{event=\"tcp-idle-closed\"}",
    "v6gate_trt_events_total{event=\"udp-refused-client\"}",
    "v6gate_destination_refused_total{plane=\"trt\",reason=\"own-address\"}",
    // Loopback never reaches the policy: the relay has no server there.
    "v6gate_trt_events_total{event=\"tcp-no-server\"}",
    "v6gate_trt_events_total{event=\"udp-no-server\"}",
];

/// The planes beyond hardening_util's (SIIT, NAT64, TrGW, admin) and the
/// DNS64: budgets small enough that the attack reaches them within the
/// warm-up of a one-minute soak.
fn planes(leases: &std::path::Path) -> String {
    format!(
        r#"
[alg]
listen-v6 = "{ALG6}"
listen-v4 = "{ALG4}"
media-v6-interface = "v6"
media-v4-interface = "v4"
t1 = "100ms"
dns-servers = ["127.0.0.1:5353"]
dns-timeout = "2s"
rate-limit = 200
max-state-bytes = 16777216
max-connections = 64
tcp-idle-timeout = "3s"
tcp-message-timeout = "2s"

[teredo.server]
primary = "{TEREDO_SERVER}"
secondary = "198.51.100.11"

[teredo.relay]
bind = "{RELAY}"
address = "{RELAY6}"
max-peers = 256
untrusted-peers-per-client = 64
server-bubble-rate = 10

[dslite]
aftr-address = "{AFTR}"
b4-prefixes = ["2001:db8:5::/48", "2001:db8:7::/48"]
pool4 = ["203.0.113.9/32"]
max-ports-per-subscriber = 64
log-mappings = false
tun = "v6s-aftr"

[trt]
prefix = "64:ff9b:3::/96"
max-connections-per-client = 16
max-connecting-per-client = 4
max-udp-flows-per-client = 32
tcp-idle-timeout = "10s"
connect-timeout = "3s"
udp-timeout = "10s"
{}"#,
        dstm_config(leases, "")
    )
}

/// What the daemon must find at start (the Teredo addresses on g4) and
/// the routes and addresses of the attacker and the legitimate users.
fn testbed(lab: &Lab) {
    for a in ["198.51.100.10/24", "198.51.100.11/24", "198.51.100.20/24"] {
        lab.gw.ip(&["addr", "add", a, "dev", "g4"]).unwrap();
    }
    // Spoofed bubbles come from 100.64/10 on g4: no reverse-path filter in
    // their way; whatever answers them goes to h4, which drops it.
    for k in ["all", "default", "g4"] {
        lab.gw.sysctl(&format!("net.ipv4.conf.{k}.rp_filter"), "0").unwrap();
    }
    lab.gw.ip(&["route", "add", "100.64.0.0/10", "via", "198.51.100.2"]).unwrap();
    lab.gw.ip(&["route", "add", "10.99.0.0/16", "via", "198.51.100.2"]).unwrap();
    for net in ["2001:db8:7::/64", "2001:db8:5::/48", "2001:db8:6::/64"] {
        lab.gw.ip(&["-6", "route", "add", net, "via", "2001:db8:1::2"]).unwrap();
    }
    // Deprecated, like the attacker's: used only by the sockets bound there.
    for a in [B4, DSTM_CLIENT] {
        lab.h6.ip(&["-6", "addr", "add", &format!("{a}/64"), "dev", "a6", "nodad", "preferred_lft", "0"]).unwrap();
    }
    for a in ATTACKERS4 {
        lab.h4.ip(&["addr", "add", &format!("{a}/24"), "dev", "a4"]).unwrap();
    }
}

/// A non-blocking UDP socket on `port` of each of the attacker's IPv4
/// addresses (call it inside h4).
fn attackers4(port: u16) -> Vec<UdpSocket> {
    ATTACKERS4
        .iter()
        .map(|a| {
            let s = UdpSocket::bind(format!("{a}:{port}")).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

/// The attacker's `i`-th address of its /64.
fn attacker6(i: u64) -> Ipv6Addr {
    format!("{ATTACK64}{:x}", i % u64::from(ATTACKERS)).parse().unwrap()
}

/// Up to `tries` attempts of `f` (a legitimate user over UDP retries a
/// lost datagram, as any real client would), the last error if all fail.
fn retry<T>(tries: usize, mut f: impl FnMut() -> Result<T, String>) -> T {
    let mut why = String::new();
    for _ in 0..tries {
        match f() {
            Ok(v) => return v,
            Err(e) => why = e,
        }
    }
    panic!("{why}");
}

/// The legitimate users besides hardening_util's baseline (NAT64 session,
/// TrGW call): each [`Users::check`] completes a SIP call through the
/// ALG, a DS-Lite flow, a DSTM RENEW, Teredo traffic through the relay
/// both ways and a TRT transfer.
struct Users {
    base: Baseline,
    b4: socket2::Socket,
    lease: Ipv4Addr,
    peer: UdpSocket,
    peer6: Ipv6Addr,
    native: UdpSocket,
    n: std::cell::Cell<u32>,
}

impl Users {
    fn new(lab: &Lab) -> Users {
        let base = Baseline::new(lab);
        let b4 = in_ns(&lab.h6, || softwire_socket(B4.parse().unwrap()));
        let dstm_client: Ipv6Addr = DSTM_CLIENT.parse().unwrap();
        let lease = in_ns(&lab.h6, || match lease_ask(dstm_client, sa(DSTM), Msg::Request, 1) {
            Some(Msg::Ack { ipv4, .. }) => ipv4,
            other => panic!("the lease holder's REQUEST: {other:?}\n{}", lab.log()),
        });
        let peer = in_ns(&lab.h4, || UdpSocket::bind(PEER).unwrap());
        let peer6 = teredo_of(TEREDO_SERVER, PEER.parse().unwrap(), 0);
        let native = in_ns(&lab.h6, || UdpSocket::bind(NATIVE).unwrap());
        native.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        tcp_echo_server(&lab.h4, TRT_ECHO);
        let u = Users { base, b4, lease, peer, peer6, native, n: 0.into() };
        u.check(lab, "before");
        u
    }

    fn check(&self, lab: &Lab, what: &str) {
        let n = self.n.get();
        self.n.set(n + 1);
        self.base.check(what);
        sip::call_completes(lab, &format!("soak-call-{n}"));
        self.dslite(what);
        let client: Ipv6Addr = DSTM_CLIENT.parse().unwrap();
        let lease = self.lease;
        let renewed = retry(3, || {
            in_ns(&lab.h6, || lease_ask(client, sa(DSTM), Msg::Renew(lease), 1000 + n))
                .ok_or_else(|| format!("{what}: no answer to the lease holder's RENEW"))
        });
        assert!(
            matches!(renewed, Msg::Ack { ipv4, .. } if ipv4 == self.lease),
            "{what}: RENEW of {} answered {renewed:?}",
            self.lease
        );
        self.teredo(what);
        self.trt(lab, what);
    }

    /// 64 KiB through the TRT to h4's echo server and back.
    fn trt(&self, lab: &Lab, what: &str) {
        let payload: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        let back = in_ns(&lab.h6, || -> std::io::Result<Vec<u8>> {
            let mut c = TcpStream::connect_timeout(&sa(&format!("[{TRT_SERVER}]:{TRT_ECHO}")), Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(5)))?;
            c.set_write_timeout(Some(Duration::from_secs(5)))?;
            let mut back = vec![0u8; payload.len()];
            std::thread::scope(|s| {
                let mut w = c.try_clone()?;
                let writer = s.spawn(move || w.write_all(&payload));
                c.read_exact(&mut back)?;
                writer.join().unwrap()
            })?;
            Ok(back)
        });
        let back = back.unwrap_or_else(|e| panic!("{what}: the TRT transfer: {e}"));
        assert!(
            back.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
            "{what}: the TRT transfer came back altered"
        );
    }

    /// The B4's flow 192.0.0.2:4000 → h4's UDP echo through the AFTR: the
    /// answer comes back in the softwire.
    fn dslite(&self, what: &str) {
        let inner = inner_udp("192.0.0.2:4000".parse().unwrap(), "198.51.100.2:7000".parse().unwrap(), what.as_bytes());
        let aftr = SocketAddr::new(AFTR.parse::<Ipv6Addr>().unwrap().into(), 0);
        self.b4.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        retry(3, || {
            self.b4.send_to(&inner, &aftr.into()).map_err(|e| e.to_string())?;
            let mut b = [0u8; 2048];
            loop {
                let n = (&self.b4).read(&mut b).map_err(|e| format!("{what}: the DS-Lite answer: {e}"))?;
                // An IPv4 UDP packet whose payload is ours.
                if n > 28 && b[9] == 17 && b[..n].ends_with(what.as_bytes()) {
                    return Ok(());
                }
            }
        })
    }

    /// The trusted peer's bubble (it stays trusted), the native host's
    /// datagram to it straight through the relay, and its answer.
    fn teredo(&self, what: &str) {
        let relay6: Ipv6Addr = RELAY6.parse().unwrap();
        self.peer.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        retry(3, || {
            self.peer.send_to(&bubble_from(self.peer6, relay6), RELAY).map_err(|e| e.to_string())?;
            self.native.send_to(what.as_bytes(), SocketAddr::new(self.peer6.into(), 9)).map_err(|e| e.to_string())?;
            let mut b = [0u8; 2048];
            loop {
                let n = self
                    .peer
                    .recv(&mut b)
                    .map_err(|e| format!("{what}: the native host's datagram to the Teredo peer: {e}"))?;
                match teredo::parse(&b[..n]) {
                    Ok(p) if !p.is_bubble() && p.ipv6.ends_with(what.as_bytes()) => return Ok(()),
                    _ => continue,
                }
            }
        });
        let native = self.native.local_addr().unwrap();
        let IpAddr::V6(dst) = native.ip() else { unreachable!() };
        let mut pkt = Vec::new();
        etherparse::PacketBuilder::ipv6(self.peer6.octets(), dst.octets(), 64)
            .udp(9, native.port())
            .write(&mut pkt, what.as_bytes())
            .unwrap();
        retry(3, || {
            self.peer.send_to(&pkt, RELAY).map_err(|e| e.to_string())?;
            let mut b = [0u8; 2048];
            loop {
                let (n, from) =
                    self.native.recv_from(&mut b).map_err(|e| format!("{what}: the Teredo peer's datagram: {e}"))?;
                if &b[..n] == what.as_bytes() && from.ip() == IpAddr::V6(self.peer6) {
                    return Ok(());
                }
            }
        });
    }
}

/// UDP and TCP listeners on loopback and the gateway's own addresses,
/// counting what reaches them.
struct Canary {
    hits: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Canary {
    fn new(gw: &Netns) -> Canary {
        let (udp, tcp): (Vec<UdpSocket>, Vec<TcpListener>) = in_ns(gw, || {
            let udp = CANARY_HOSTS.iter().map(|h| UdpSocket::bind(format!("{h}:{CANARY_UDP}")).unwrap()).collect();
            let tcp = CANARY_HOSTS.iter().map(|h| TcpListener::bind(format!("{h}:{CANARY_TCP}")).unwrap()).collect();
            (udp, tcp)
        });
        udp.iter().for_each(|s| s.set_nonblocking(true).unwrap());
        tcp.iter().for_each(|s| s.set_nonblocking(true).unwrap());
        let hits = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, st) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut b = [0u8; 2048];
            while !st.load(Relaxed) {
                for s in &udp {
                    while let Ok((_, from)) = s.recv_from(&mut b) {
                        h.lock().unwrap().push(format!("udp {from} -> {}", s.local_addr().unwrap()));
                    }
                }
                for l in &tcp {
                    while let Ok((_, from)) = l.accept() {
                        h.lock().unwrap().push(format!("tcp {from} -> {}", l.local_addr().unwrap()));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Canary { hits, stop, thread: Some(thread) }
    }

    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The daemon's descriptors by kind (`socket`, `pipe`, `anon_inode`, a path).
fn fd_kinds(lab: &Lab) -> std::collections::BTreeMap<String, usize> {
    let mut kinds = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{}/fd", lab.pid())).into_iter().flatten().flatten() {
        let t = std::fs::read_link(e.path()).map(|t| t.display().to_string()).unwrap_or_default();
        *kinds.entry(t.split(':').next().unwrap_or_default().to_string()).or_default() += 1;
    }
    kinds
}

/// The daemon's descriptors by kind and its TCP and UDP sockets (`ss`, in
/// the gateway namespace), for a failure message.
fn sockets(lab: &Lab) -> String {
    let kinds = fd_kinds(lab);
    let out = lab.gw.command("ss").args(["-tuanp"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let ss = out.unwrap_or_else(|e| e.to_string());
    format!("{kinds:?}\n{}", ss.lines().filter(|l| l.contains("v6gate")).collect::<Vec<_>>().join("\n"))
}

/// Sets its flag when dropped.
struct StopGuard(Arc<AtomicBool>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// The value of `series` in a `/metrics` text (0 when absent).
fn metric_in(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap_or(0.0) as u64)
}

/// `/status` within a few seconds: the admin API may refuse a connection
/// at its cap while the admin attackers hold it (503), never for longer.
fn status_answers(lab: &Lab, what: &str) -> serde_json::Value {
    for _ in 0..40 {
        if let Ok(s) = lab.ctl(&["status"]) {
            return serde_json::from_str(&s).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: /status did not answer within 4 s");
}

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

fn drain_tcp(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}

#[test]
#[ignore = "soak test: run with `make soak` (SOAK_SECONDS, default 600)"]
fn soak_hostile_traffic_on_every_surface() {
    lab::need_root_and_programs!("nft");
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
    .replace("pool4 = [\"203.0.113.1/32\"]", "pool4 = [\"203.0.113.1/32\"]\nudp-timeout = 30")
    // Room for the calls the control attackers leave ringing (up to
    // early-timeout) besides the ALG's legitimate ones.
    .replace("port-max = 30099", "port-max = 31999");
    let mut lab = Lab::start_with(&format!("{text}{DNS64}{}", planes(&sock.path().join("leases"))), testbed);
    let unix = sock.path().join("rtpp.sock");
    // The ALG's resolver: a socket in the gateway that never answers.
    let _dns = in_ns(&lab.gw, || UdpSocket::bind("127.0.0.1:5353").unwrap());
    // The callee of the padded INVITEs: never answers either.
    let _silent = in_ns(&lab.h4, || UdpSocket::bind("198.51.100.2:5090").unwrap());
    let canary = Canary::new(&lab.gw);
    let users = Users::new(&lab);
    let sip6 = Arc::new(sip::flooders(&lab, ATTACK64, ATTACKERS));
    let sip4 = Arc::new(in_ns(&lab.h4, || attackers4(5070)));
    let (fds0, pipes0) = (lab.open_fds(), fd_kinds(&lab).get("pipe").copied().unwrap_or(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The attackers stop however the test ends (a failed check included).
    let _stop_guard = StopGuard(stop.clone());
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
        drain_tcp(&mut s);
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
                    let ip = ["127.0.0.1", "224.0.0.1", "::1", "198.51.100.1", "fe80::1", "2001:db8:1::1"]
                        [rng.below(6) as usize];
                    let _ = ng.cmd(vec![
                        ("command", s("offer")),
                        ("call-id", s("evil")),
                        ("from-tag", s("f")),
                        ("sdp", s(&sdp(ip, CANARY_UDP))),
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
    // DNS64: UDP garbage from the IPv6 host and from the attacker's /64
    // (outside `allow`), TCP with bad lengths and slow clients.
    threads.push(attacker("dns64", &lab.h6, &stop, &rounds, Duration::from_millis(10), |rng, round| {
        if round % 4 == 3 {
            if let Some(mut t) = tcp("[2001:db8:1::1]:53") {
                let _ = t.write_all(&[0xff, 0xff]);
                let _ = t.write_all(&rng.bytes(100));
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            // From the attacker's /64: well-formed AAAA queries (id, RD,
            // one question `x.example`), refused; else garbage.
            let (from, q) = if round % 4 == 2 {
                let mut q = (rng.next() as u16).to_be_bytes().to_vec();
                q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'x', 7]);
                q.extend_from_slice(b"example\0\0\x1c\0\x01");
                (SocketAddr::new(attacker6(rng.next()).into(), 0), q)
            } else {
                (sa("[::]:0"), rng.some(12, 500))
            };
            let s = UdpSocket::bind(from).unwrap();
            let _ = s.send_to(&q, "[2001:db8:1::1]:53");
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

    // The IMS-ALG over UDP, from the attacker's /64: OPTIONS to names
    // nobody resolves (bursts of 32 addresses, over the /64's rate limit).
    threads.push(attacker("alg-names", &lab.h6, &stop, &rounds, Duration::from_millis(100), {
        let socks = sip6.clone();
        move |_, round| {
            for k in 0..32 {
                let n = (round * 32 + k) as usize;
                let s = &socks[n % socks.len()];
                let o = options(s.local_addr().unwrap(), &format!("sip:x@n{n}.flood.example"), n, "UDP");
                sip::send(s, &o, ALG6);
            }
            socks.iter().for_each(|s| drop(sip::drain(s)));
        }
    }));
    // Padded INVITEs (20 kB) to a callee that never answers.
    threads.push(attacker("alg-invite", &lab.h6, &stop, &rounds, Duration::from_millis(20), {
        let socks = sip6.clone();
        move |_, round| {
            let s = &socks[round as usize % socks.len()];
            sip::send(s, &sip::padded_invite(s.local_addr().unwrap(), 1_000_000 + round as usize, 20_000), ALG6);
        }
    }));
    // Next hops at loopback, the gateway's own addresses (the canaries),
    // what embeds them, and the ALG itself; from both realms.
    threads.push(attacker("alg-next-hop", &lab.h6, &stop, &rounds, Duration::from_millis(50), {
        let (socks, socks4) = (sip6.clone(), sip4.clone());
        move |rng, round| {
            let targets = [
                format!("sip:x@127.0.0.1:{CANARY_UDP}"),
                format!("sip:x@127.0.0.2:{CANARY_UDP}"),
                format!("sip:x@[::1]:{CANARY_UDP}"),
                format!("sip:x@[::ffff:127.0.0.1]:{CANARY_UDP}"),
                format!("sip:x@198.51.100.2:{CANARY_UDP};maddr=127.0.0.1"),
                format!("sip:x@127.0.0.1:{CANARY_TCP};transport=tcp"),
                format!("sip:x@198.51.100.1:{CANARY_UDP}"),
                format!("sip:x@[2001:db8:1::1]:{CANARY_UDP}"),
                format!("sip:x@[64:ff9b:2::c633:6401]:{CANARY_UDP}"),
                "sip:x@198.51.100.1:5060".to_string(),
            ];
            let n = 2_000_000 + round as usize;
            let t = &targets[rng.below(targets.len() as u64) as usize];
            let (s, to) = if round % 4 == 3 {
                (&socks4[rng.below(socks4.len() as u64) as usize], ALG4)
            } else {
                (&socks[rng.below(socks.len() as u64) as usize], ALG6)
            };
            let mut m = String::from_utf8(options(s.local_addr().unwrap(), t, n, "UDP")).unwrap();
            if round % 5 == 0 {
                m = m.replace("From: ", &format!("Route: <sip:127.0.0.1:{CANARY_UDP};lr>\r\nFrom: "));
            }
            sip::send(s, m.as_bytes(), to);
            drop(sip::drain(s));
        }
    }));
    // Garbage and torture: random bytes, valid requests with bytes
    // flipped, and requests RFC 4475 calls invalid; from both realms.
    threads.push(attacker("alg-garbage", &lab.h6, &stop, &rounds, Duration::from_millis(10), {
        let (socks, socks4) = (sip6.clone(), sip4.clone());
        move |rng, round| {
            let (s, to) = if round % 3 == 2 {
                (&socks4[rng.below(socks4.len() as u64) as usize], ALG4)
            } else {
                (&socks[rng.below(socks.len() as u64) as usize], ALG6)
            };
            let me = s.local_addr().unwrap();
            let n = 3_000_000 + round as usize;
            let valid = String::from_utf8(options(me, "sip:x@198.51.100.2:5090", n, "UDP")).unwrap();
            let d = match round % 7 {
                0 => rng.some(1, 1500),
                1 => {
                    let mut v = valid.into_bytes();
                    for _ in 0..4 {
                        let i = rng.below(v.len() as u64) as usize;
                        v[i] = rng.next() as u8;
                    }
                    v
                }
                2 => valid.replace("SIP/2.0\r\n", "SIP/7.0\r\n").into_bytes(),
                3 => valid.replace("Content-Length: 0", "Content-Length: 9999").into_bytes(),
                4 => valid.replace("Content-Length: 0", "Content-Length: -1").into_bytes(),
                5 => valid.replace("CSeq: 1 OPTIONS", "CSeq: 99999999999999999999 OPTIONS").into_bytes(),
                _ => valid
                    .replace("Max-Forwards: 70\r\n", &format!("Via: SIP/2.0/UDP {me};branch=z9hG4bK-x\r\n").repeat(200))
                    .into_bytes(),
            };
            sip::send(s, &d, to);
            drop(sip::drain(s));
        }
    }));
    // The IMS-ALG over TCP: more connections than the /64's share, half
    // held idle, half trickling a request a byte at a time.
    threads.push(attacker("alg-tcp", &lab.h6, &stop, &rounds, Duration::from_millis(200), |_, round| {
        let mut conns: Vec<TcpStream> = (0..24u64)
            .filter_map(|k| {
                let src = format!("[{}]:0", attacker6(round * 24 + k));
                let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).ok()?;
                s.bind(&sa(&src).into()).ok()?;
                s.connect_timeout(&sa(ALG6).into(), Duration::from_secs(1)).ok()?;
                Some(s.into())
            })
            .collect();
        let head =
            b"INVITE sip:bob@198.51.100.2 SIP/2.0\r\nVia: SIP/2.0/TCP [2001:db8:7::1]:5070;branch=z9hG4bK-slow\r\n";
        for byte in head.iter().take(20) {
            for c in conns.iter_mut().skip(12) {
                let _ = c.write_all(&[*byte]);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(conns);
    }));
    // DS-Lite: flows from many B4 addresses of the attacker's /56, over
    // its port quota.
    threads.push(attacker("dslite", &lab.h6, &stop, &rounds, Duration::from_millis(5), |rng, _| {
        let src = attacker6(rng.next());
        let sport = 10_000 + rng.below(4000) as u16;
        let inner = inner_udp(
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 0, 2), sport),
            "198.51.100.2:9".parse().unwrap(),
            b"flow",
        );
        softwire_send(src, AFTR.parse().unwrap(), &inner);
    }));
    // DSTM: REQUESTs from many addresses of one /64 (answers not read).
    threads.push(attacker("dstm", &lab.h6, &stop, &rounds, Duration::from_millis(10), |rng, round| {
        if let Ok(s) = UdpSocket::bind(SocketAddr::new(attacker6(rng.next()).into(), 0)) {
            let _ = s.send_to(&softwire::lease::encode(Msg::Request, round as u32), DSTM);
        }
    }));
    // Teredo: bubbles spoofed from many IPv4 mappings (each its own peer).
    threads.push(attacker("teredo-spoof", &lab.h4, &stop, &rounds, Duration::from_millis(10), {
        let relay6: Ipv6Addr = RELAY6.parse().unwrap();
        // Opened on the attacker's thread, inside h4.
        let mut raw: Option<socket2::Socket> = None;
        move |_, round| {
            let raw = raw.get_or_insert_with(raw_ipv4);
            for k in 0..4u64 {
                let i = round * 4 + k;
                let from = SocketAddrV4::new(
                    Ipv4Addr::new(100, 64 + (i >> 16) as u8 % 64, (i >> 8) as u8, i as u8),
                    1024 + (i % 60_000) as u16,
                );
                spoofed(raw, from, RELAY.parse().unwrap(), &bubble_from(teredo_of(TEREDO_SERVER, from, 0), relay6));
            }
        }
    }));
    // The Teredo server: Router Solicitations over a client's rate (20/s
    // per address) from the IPv4 addresses, and garbage.
    threads.push(attacker("teredo-server", &lab.h4, &stop, &rounds, Duration::from_millis(5), {
        let mut socks: Option<Vec<UdpSocket>> = None;
        move |rng, round| {
            let socks = socks.get_or_insert_with(|| attackers4(3545));
            let s = &socks[round as usize % socks.len()];
            let to = SocketAddrV4::new(TEREDO_SERVER, 3544);
            if round % 10 == 9 {
                let _ = s.send_to(&rng.some(1, 200), to);
            } else {
                let mut b = [0u8; 128];
                if let Ok(n) = xlat::tunnel::teredo_msg::router_solicitation(true, rng.next().to_be_bytes(), &mut b) {
                    let _ = s.send_to(&b[..n], to);
                }
            }
            drop(sip::drain(s));
        }
    }));
    // Teredo from the native side: new peers from one /64 beyond its
    // share, and one victim mapping under rotating flag bits.
    threads.push(attacker("teredo-native", &lab.h6, &stop, &rounds, Duration::from_millis(10), |rng, round| {
        let Ok(s) = UdpSocket::bind(SocketAddr::new(attacker6(rng.next()).into(), 0)) else { return };
        let dst = if round % 2 == 0 {
            teredo_of(TEREDO_SERVER, "198.51.100.2:5000".parse().unwrap(), rng.next() as u16 & !teredo::FLAG_CONE)
        } else {
            teredo_of(
                TEREDO_SERVER,
                SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 2), 2000 + rng.below(4000) as u16),
                0,
            )
        };
        let _ = s.send_to(b"x", SocketAddr::new(dst.into(), 9));
    }));
    // TRT: connection floods over the /64's share (held briefly, so the
    // idle attacker below gets slots too).
    threads.push(attacker("trt-flood", &lab.h6, &stop, &rounds, Duration::from_millis(900), |_, round| {
        let to = sa(&format!("[{TRT_SERVER}]:{TRT_ECHO}"));
        let conns: Vec<TcpStream> = (0..24u64)
            .filter_map(|k| connect_from(attacker6(round * 24 + k).into(), to, Duration::from_secs(1)).ok())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        drop(conns);
    }));
    // TRT: connections held idle past tcp-idle-timeout.
    threads.push(attacker("trt-idle", &lab.h6, &stop, &rounds, Duration::from_millis(100), |_, round| {
        let to = sa(&format!("[{TRT_SERVER}]:{TRT_ECHO}"));
        // Each held until the relay resets it: at once when the share is
        // full (the next round tries again), else at the idle timeout.
        for mut c in
            (0..4u64).filter_map(|k| connect_from(attacker6(round * 4 + k).into(), to, Duration::from_secs(1)).ok())
        {
            let _ = c.set_read_timeout(Some(Duration::from_secs(15)));
            let _ = c.read(&mut [0u8; 1]);
        }
    }));
    // TRT: connects to a black-holed target, to the gateway itself and to
    // loopback (the canaries); UDP flows over the /64's share.
    threads.push(attacker("trt-targets", &lab.h6, &stop, &rounds, Duration::from_millis(20), |rng, round| {
        let src: IpAddr = attacker6(rng.next()).into();
        match round % 4 {
            0 => {
                let _ = connect_from(src, sa(TRT_HOLE), Duration::from_millis(200));
            }
            1 => {
                let own = TRT_OWN[rng.below(2) as usize];
                let _ = connect_from(src, sa(&format!("{own}:{CANARY_TCP}")), Duration::from_millis(500));
                if let Ok(s) = UdpSocket::bind(SocketAddr::new(src, 0)) {
                    let _ = s.send_to(b"canary", sa(&format!("{own}:{CANARY_UDP}")));
                }
            }
            _ => {
                if let Ok(s) = UdpSocket::bind(SocketAddr::new(src, 0)) {
                    let _ = s.send_to(b"flow", sa(&format!("[{TRT_SERVER}]:9")));
                }
            }
        }
    }));

    // Watch: the legitimate users keep working and /status answers; RSS
    // and descriptors sampled.
    let t0 = Instant::now();
    let warmup = Duration::from_secs((secs / 5).max(10));
    let mut after_warmup: Option<(u64, usize)> = None;
    let mut peak = (0u64, 0usize);
    let mut samples = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(5));
        assert!(lab.alive(), "daemon died: {}", lab.log());
        let what = format!("soak {}s", t0.elapsed().as_secs());
        let t_check = Instant::now();
        users.check(&lab, &what);
        let st = status_answers(&lab, &what);
        let (rss, fds) = (lab.rss_kib(), lab.open_fds());
        samples += 1;
        if t0.elapsed() >= warmup {
            match after_warmup {
                None => after_warmup = Some((rss, fds)),
                Some(_) => peak = (peak.0.max(rss), peak.1.max(fds)),
            }
        }
        eprintln!(
            "soak: {:>4}s rss {rss} KiB fds {fds} users checked in {} ms; alg state {} B, dslite mappings {}, \
             teredo peers {}, trt active {}; attacker rounds {}",
            t0.elapsed().as_secs(),
            t_check.elapsed().as_millis(),
            st["alg"]["budgets"]["state-bytes"]["used"],
            st["softwires"]["dslite"]["mappings"],
            st["tunnels"]["teredo-relay"]["counters"]["peers_trusted"],
            st["trt"]["tcp_active"],
            rounds.load(Relaxed)
        );
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // The calls the attackers left are legitimate: delete them, so only
    // the baseline call holds media sockets; then let every timeout pass
    // (admin idle 3 s, rtpproxy 2 s, ALG TCP 3 s, DNS lookups 2 s, DNS64
    // TCP 10 s, TRT idle 10 s and connects 3 s).
    let mut ng = Ng::new(&lab);
    for id in (0..20).map(|i| format!("churn-{i}")).chain(["soak-big".to_string()]) {
        let _ = ng.cmd(vec![("command", s("delete")), ("call-id", s(&id))]);
    }
    std::thread::sleep(Duration::from_secs(15));
    assert!(lab.alive(), "daemon died: {}", lab.log());
    // Sampled before the session listing below allocates.
    let (rss_end, fds_end) = (lab.rss_kib(), lab.open_fds());
    let pipes = fd_kinds(&lab).get("pipe").copied().unwrap_or(0);
    users.check(&lab, "soak end");
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
    // Descriptors during the attack: what the warm-up held plus what the
    // tables still filling may add, each capped (the TRT's spare pipes,
    // 128; the attacker's TRT share, 16 connections of up to six
    // descriptors, and its 32 UDP flows; the ALG's TCP connections, 64;
    // the admin API's 32 and rtpproxy's 16 connections; calls the control
    // attackers leave ringing): never a leak's thousands.
    assert!(peak.1 < fds_w + 512, "descriptors grew: {fds_w} after the warm-up -> peak {}", peak.1);
    // Each live call holds four media sockets (garbage on the rtpproxy
    // sockets may form valid `U` commands: calls of an allowed client,
    // gone after timeout-secs); everything else must be given back.
    // The TRT keeps up to trt::tcp::POOL spare splice pipes (two
    // descriptors each) for the next connections: bounded, not given back.
    let media = 4 * (calls as usize - 1);
    assert!(pipes <= pipes0 + 2 * trt::tcp::POOL, "{pipes} pipe descriptors, {pipes0} at start");
    assert!(
        fds_end - pipes <= fds0 - pipes0 + 8 + media,
        "descriptors not given back: {fds0} -> {fds_end} ({calls} calls); the daemon's sockets:\n{}",
        sockets(&lab)
    );
    let hits = canary.hits();
    assert!(
        hits.is_empty(),
        "{} packets or connections reached loopback or the gateway's own addresses: {:?}",
        hits.len(),
        &hits[..hits.len().min(10)]
    );
    let metrics = lab.ctl(&["metrics"]).unwrap();
    let zero: Vec<&str> = EXPECTED.iter().copied().filter(|k| metric_in(&metrics, k) == 0).collect();
    for k in EXPECTED {
        eprintln!("soak: {k} {}", metric_in(&metrics, k));
    }
    assert!(
        zero.is_empty(),
        "refusal families that never moved (the attack did not run, or was not counted): {zero:?}"
    );
}
