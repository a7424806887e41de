//! `v6gate softwire` in network namespaces: a B4 host, the AFTR, an IPv4
//! server, over real TUN devices and veth links (issue #15).
//!
//! ```text
//!  b4 ns                          aftr ns                            h4 ns
//!  B4 runner (v6gate-b4)   veth   AFTR / lwAFTR runner        veth   198.51.100.1
//!  2001:db8:ff::2/64  ---------- 2001:db8:ff::1/64            ------ 198.51.100.254/24
//!  softwire 2001:db8:1::2         end-point 2001:db8:ffff::1
//! ```
//!
//! DS-Lite B4 <-> AFTR and lwB4 <-> lwAFTR with ping, UDP and TCP; DSTM:
//! a lease, then traffic, then the lease surviving an lwAFTR restart; the
//! binding file reloaded at run time; a bad binding file refused; a DSTM
//! pool exhausted, a lease expiring and its address reused.

#[path = "daemon_util/mod.rs"]
mod daemon_util;
#[path = "softwire_util/mod.rs"]
mod softwire_util;

use daemon_util::{in_ns, ping, tcp_echo, udp_echo};
use lab::netns::{veth, Netns};
use softwire_util::{bed, sa, Bed, Proc, SERVER};
use std::net::SocketAddr;
use std::time::Duration;

/// ping, UDP and TCP from the B4 host to the server; returns the source
/// addresses the server saw (UDP, TCP).
fn traffic(bed: &Bed, udp_port: u16) -> (SocketAddr, SocketAddr) {
    let (ok, out) = ping(&bed.b4, SERVER, &[]);
    assert!(ok, "ping through the softwire: {out}");
    let (got, from_udp) = udp_echo(
        &bed.h4,
        sa(&format!("0.0.0.0:{udp_port}")),
        &bed.b4,
        sa(&format!("{SERVER}:{udp_port}")),
        b"over the softwire",
    );
    assert_eq!(got, b"over the softwire");
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let (got, from_tcp) = tcp_echo(
        &bed.h4,
        sa(&format!("0.0.0.0:{}", udp_port + 1)),
        &bed.b4,
        sa(&format!("{SERVER}:{}", udp_port + 1)),
        &big,
    );
    assert_eq!(got.len(), big.len());
    assert!(got == big, "TCP payload corrupted");
    (from_udp, from_tcp)
}

/// The AFTR of the DS-Lite tests (more keys may follow).
const DSLITE_AFTR: &str = r#"
[dslite]
aftr-address = "2001:db8:ffff::1"
b4-prefixes = ["2001:db8:1::/48"]
pool4 = ["203.0.113.1/32"]
"#;

/// Its B4.
const DSLITE_B4: &str = r#"
[b4]
mode = "ds-lite"
address = "2001:db8:1::2"
aftr = "2001:db8:ffff::1"
host-address = "192.0.0.2"
routes = ["198.51.100.0/24"]
"#;

#[test]
fn dslite_b4_and_aftr_ping_udp_tcp() {
    let bed = bed();
    let aftr = Proc::start(&bed.aftr, bed.dir.path(), "aftr", &format!("{DSLITE_AFTR}max-ports-per-subscriber = 64\n"));
    let b4 = Proc::start(&bed.b4, bed.dir.path(), "b4", DSLITE_B4);
    let (u, t) = traffic(&bed, 7000);
    assert_eq!(u.ip().to_string(), "203.0.113.1", "the server sees the AFTR's pool address");
    assert_eq!(t.ip().to_string(), "203.0.113.1");
    let s = aftr.wait_status(|v| v["dslite"]["mappings"].as_u64().unwrap_or(0) >= 3);
    let c = &s["dslite"]["counters"];
    assert!(c["decapsulated"].as_u64().unwrap() > 10 && c["encapsulated"].as_u64().unwrap() > 10, "{s}");
    let log = aftr.log();
    assert!(log.contains("nat44 map proto=udp b4=2001:db8:1::2 inside=192.0.0.2:"), "abuse-tracing log: {log}");
    let bs = b4.status();
    assert!(bs["b4"]["counters"]["encapsulated"].as_u64().unwrap() > 10, "{bs}");
    // The engine's MSS clamp (the host's SYN, the server's SYN-ACK): the
    // 200 KB echo crossed the tunnel unfragmented, the AFTR reassembled nothing.
    assert!(bs["b4"]["counters"]["mss_clamped"].as_u64().unwrap() >= 2, "{bs}");
    assert_eq!(c["reassembled"], 0, "{s}");
    // RFC 6888 REQ-4: 80 more UDP flows from the subscriber; the AFTR maps
    // up to its quota of 64 ports and drops and counts the rest.
    in_ns(&bed.b4, || {
        let socks: Vec<_> = (0..80).map(|_| std::net::UdpSocket::bind("0.0.0.0:0").unwrap()).collect();
        for s in &socks {
            s.send_to(b"flow", format!("{SERVER}:9")).unwrap();
        }
    });
    let s = aftr.wait_status(|v| v["dslite"]["counters"]["drops"]["quota-exceeded"].as_u64().unwrap_or(0) >= 16);
    assert_eq!(s["dslite"]["mappings"], 64, "the quota bounds the subscriber's mappings: {s}");
    b4.stop();
    aftr.stop();
    assert!(lab::netns::exists(bed.aftr.name()));
}

#[test]
fn lw4o6_lwb4_and_lwaftr_ping_udp_tcp_and_reload() {
    let bed = bed();
    let map = softwire::portset::PsidMap::new(6, 6).unwrap();
    let bindings = bed.dir.path().join("bindings");
    std::fs::write(&bindings, "2001:db8:1::2 192.0.2.1 5 6\n2001:db8:1::3 192.0.2.1 6 6\n").unwrap();
    let lw = Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "lwaftr",
        &format!(
            r#"
[lw4o6]
aftr-address = "2001:db8:ffff::1"
binding-file = "{}"
ipv4-prefixes = ["192.0.2.0/24"]
"#,
            bindings.display()
        ),
    );
    let _b4 = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "lwb4",
        r#"
[b4]
mode = "lw4o6"
address = "2001:db8:1::2"
aftr = "2001:db8:ffff::1"
ipv4-address = "192.0.2.1"
psid = 5
psid-length = 6
host-address = "192.168.1.2"
routes = ["198.51.100.0/24"]
"#,
    );
    let (u, t) = traffic(&bed, 7100);
    for from in [u, t] {
        assert_eq!(from.ip().to_string(), "192.0.2.1");
        assert!(map.allowed(from.port(), 5), "the lwB4 used a port of its set: {from}");
    }
    let s = lw.wait_status(|v| v["lw4o6"]["bindings"] == 2);
    assert_eq!(s["lw4o6"]["counters"]["drops"].get("port-set-violation"), None, "{s}");
    // The binding file changes under the running lwAFTR: watched, reloaded.
    std::fs::write(&bindings, "2001:db8:1::2 192.0.2.1 5 6\n").unwrap();
    lw.wait_status(|v| v["lw4o6"]["bindings"] == 1 && v["lw4o6"]["reloads"] == 1);
    // A broken file is refused; the bindings in force stay.
    std::fs::write(&bindings, "2001:db8:1::2 192.0.2.1 5 6\nnot a binding\n").unwrap();
    lw.signal(libc::SIGHUP);
    let s = lw.wait_status(|v| v["lw4o6"]["reload_errors"].as_u64().unwrap_or(0) >= 1);
    assert_eq!(s["lw4o6"]["bindings"], 1);
    assert!(s["lw4o6"]["last_reload_error"].as_str().unwrap().contains("line 2"), "{s}");
    traffic(&bed, 7200);
}

/// What the XDP fast path needs of the veth testbed (real NICs need
/// neither): NAPI (GRO) at the peers it redirects into, and complete
/// checksums from the senders' sockets (transmit checksum offload off).
fn xdp_testbed(bed: &Bed) {
    for (ns, dev) in [(&bed.b4, "w6"), (&bed.h4, "s4")] {
        ns.run(|| {
            xdp::sys::set_gro(dev, true)?;
            xdp::sys::set_tx_checksum(dev, false)?;
            Ok(())
        })
        .unwrap();
    }
}

/// Fast-path counter `c` of the function in status `s` that has one.
fn xdp_count(s: &serde_json::Value, c: &str) -> u64 {
    s.as_object().into_iter().flat_map(|o| o.values()).find_map(|f| f["xdp"]["counters"][c].as_u64()).unwrap_or(0)
}

#[test]
fn lw4o6_and_dstm_over_the_xdp_fast_path() {
    let bed = bed();
    xdp_testbed(&bed);
    let bindings = bed.dir.path().join("bindings");
    std::fs::write(&bindings, "2001:db8:1::2 192.0.2.1 5 6\n2001:db8:1::3 192.0.2.1 6 6\n").unwrap();
    let leases = bed.dir.path().join("leases");
    let lw = Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "lwaftr",
        &format!(
            r#"
[lw4o6]
aftr-address = "2001:db8:ffff::1"
binding-file = "{}"
ipv4-prefixes = ["192.0.2.0/25"]
[lw4o6.dstm]
pool = ["192.0.2.128/30"]
listen = "[2001:db8:ff::1]:4739"
lease-file = "{}"
clients = ["2001:db8:1::/48"]
[lw4o6.xdp]
interfaces = ["a6", "a4"]
"#,
            bindings.display(),
            leases.display()
        ),
    );
    let s = lw.wait_status(|v| v["lw4o6"]["xdp"]["bindings"] == 2);
    assert_eq!(s["lw4o6"]["xdp"]["attached"].as_array().map(Vec::len), Some(2), "{s}");
    let b4 = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "lwb4",
        r#"
[b4]
mode = "lw4o6"
address = "2001:db8:1::2"
aftr = "2001:db8:ffff::1"
ipv4-address = "192.0.2.1"
psid = 5
psid-length = 6
host-address = "192.168.1.2"
routes = ["198.51.100.0/24"]
"#,
    );
    let (u, _) = traffic(&bed, 7500);
    assert_eq!(u.ip().to_string(), "192.0.2.1");
    let s = lw.wait_status(|v| xdp_count(v, "decap") > 0 && xdp_count(v, "encap") > 0);
    // The fast path carried the traffic (the TCP transfer's fragmented
    // 4in6 packets, and its 1500-byte segments over the tunnel MTU, take
    // the engine: RFC 6333 §5.3).
    assert!(xdp_count(&s, "decap") + xdp_count(&s, "encap") > 20, "{s}");
    // A reload reaches the fast path's maps.
    std::fs::write(&bindings, "2001:db8:1::2 192.0.2.1 5 6\n").unwrap();
    lw.wait_status(|v| v["lw4o6"]["xdp"]["bindings"] == 1);
    b4.stop();
    // A DSTM lease is mirrored when granted and removed when released.
    let host = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "dstm",
        r#"
[b4]
mode = "dstm"
address = "2001:db8:1::2"
lease-server = "[2001:db8:ff::1]:4739"
routes = ["198.51.100.0/24"]
"#,
    );
    host.wait_status(|v| v["b4"]["lease"]["ipv4"].is_string());
    // The lwB4's binding (same IPv6 address) wins over the lease (as in
    // the engine): the lease is not mirrored while the binding is there.
    let s = lw.wait_status(|v| v["lw4o6"]["leases"] == 1);
    assert_eq!(s["lw4o6"]["xdp"]["bindings"], 1, "{s}");
    std::fs::write(&bindings, "2001:db8:1::9 192.0.2.9\n").unwrap();
    let s = lw.wait_status(|v| v["lw4o6"]["xdp"]["bindings"] == 2 && v["lw4o6"]["leases"] == 1);
    let before = xdp_count(&s, "decap");
    let (u, _) = traffic(&bed, 7600);
    assert_eq!(u.ip().to_string(), "192.0.2.129");
    lw.wait_status(|v| xdp_count(v, "decap") > before);
    host.stop();
    lw.wait_status(|v| v["lw4o6"]["xdp"]["bindings"] == 1 && v["lw4o6"]["leases"] == 0);
}

/// The number of `proto` mappings the AFTR's log says it deleted.
fn log_unmaps(log: &str, proto: &str) -> usize {
    log.matches(&format!("nat44 unmap proto={proto} ")).count()
}

#[test]
fn dslite_aftr_over_the_xdp_fast_path() {
    let bed = bed();
    xdp_testbed(&bed);
    let aftr = Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "aftr",
        // A short transitory lifetime: closed TCP mappings go within seconds.
        &format!(
            "{DSLITE_AFTR}tcp-trans-timeout = \"3s\"\n[dslite.xdp]\ninterfaces = [\"a6\", \"a4\"]\nmax-sessions = 1024\n"
        ),
    );
    let s = aftr.wait_status(|v| v["dslite"]["xdp"]["attached"].as_array().is_some_and(|a| a.len() == 2));
    assert_eq!(s["dslite"]["xdp"]["sessions"], 0, "{s}");
    let b4 = Proc::start(&bed.b4, bed.dir.path(), "b4", DSLITE_B4);
    let (u, t) = traffic(&bed, 7700);
    assert_eq!(u.ip().to_string(), "203.0.113.1", "the server sees the AFTR's pool address");
    assert_eq!(t.ip().to_string(), "203.0.113.1");
    // Ping, UDP and TCP: the first packets and the B4's first SYN (it
    // has no port block yet) take the engine, the rest the fast path (the
    // SYN-ACK of the half-open TCP mapping and the FINs included; the
    // bulk's 1500-byte segments are over the tunnel MTU, and the B4
    // fragments its 4in6 packets: those take the engine too, RFC 6333 §5.3).
    let s = aftr.wait_status(|v| xdp_count(v, "decap") > 0 && xdp_count(v, "encap") > 0);
    assert!(xdp_count(&s, "decap") + xdp_count(&s, "encap") > 20, "{s}");
    assert!(xdp_count(&s, "pass-no-session") > 0 && xdp_count(&s, "pass-no-block") > 0, "{s}");
    assert!(xdp_count(&s, "syn-ack") > 0, "the SYN-ACK took the fast path: {s}");
    // The ICMP and UDP mappings stay carried, and the TCP one through its
    // close (FIN RCV, V4 FIN + V6 FIN RCV) until the engine expires it.
    assert!(s["dslite"]["xdp"]["sessions"].as_u64().unwrap() >= 2, "{s}");
    assert!(s["dslite"]["xdp"]["sessions"].as_u64().unwrap() <= s["dslite"]["mappings"].as_u64().unwrap(), "{s}");
    // The abuse-tracing log is the engine's, fast path or not.
    let log = aftr.log();
    assert!(log.contains("nat44 map proto=tcp b4=2001:db8:1::2 inside=192.0.0.2:"), "{log}");
    assert!(log.contains("nat44 map proto=udp b4=2001:db8:1::2 inside=192.0.0.2:"), "{log}");
    // Another UDP exchange (a new mapping): mirrored when the engine
    // creates it, so the reply already takes the fast path.
    let before = xdp_count(&s, "encap");
    let (got, _) = udp_echo(&bed.h4, sa("0.0.0.0:7700"), &bed.b4, sa(&format!("{SERVER}:7700")), b"again");
    assert_eq!(got, b"again");
    aftr.wait_status(|v| xdp_count(v, "encap") > before);
    // Port blocks (the default port-block = 256): the B4's first SYN took
    // the engine, which granted it a block; the next TCP connections'
    // SYNs create their mappings in XDP, and the engine enters them (its
    // status and its mapping log list them) and carries them end to end.
    let s = aftr.status();
    assert_eq!(s["dslite"]["xdp"]["port_blocks"]["size"], 256, "{s}");
    assert!(s["dslite"]["xdp"]["port_blocks"]["held"].as_u64() >= Some(1), "{s}");
    for i in 0..3u16 {
        let data: Vec<u8> = (0..3000u32).map(|x| (x % 251) as u8 ^ i as u8).collect();
        let (got, from) = tcp_echo(
            &bed.h4,
            sa(&format!("0.0.0.0:{}", 7800 + i)),
            &bed.b4,
            sa(&format!("{SERVER}:{}", 7800 + i)),
            &data,
        );
        assert!(got == data, "TCP over a mapping created in XDP");
        assert_eq!(from.ip().to_string(), "203.0.113.1");
    }
    let s = aftr.wait_status(|v| {
        xdp_count(v, "created") >= 3 && v["dslite"]["xdp"]["port_blocks"]["created"].as_u64() >= Some(3)
    });
    assert_eq!(s["dslite"]["xdp"]["port_blocks"]["conflicts"], 0, "{s}");
    let log = aftr.log();
    assert!(log.matches("nat44 map proto=tcp b4=2001:db8:1::2").count() >= 4, "every TCP mapping logged: {log}");
    // The close: both FINs of each connection take the fast path, and the
    // engine learns them from the ring (fins, none stale): its mappings
    // reach V4 FIN + V6 FIN RCV and go at the transitory timeout (3 s
    // here; in FIN RCV or ESTABLISHED they would live 2 h 4 min), and the
    // ports go back to the blocks, the blocks to the pool.
    let s =
        aftr.wait_status(|v| xdp_count(v, "fin") >= 6 && v["dslite"]["xdp"]["port_blocks"]["fins"].as_u64() >= Some(6));
    assert_eq!(s["dslite"]["xdp"]["port_blocks"]["fins_stale"], 0, "{s}");
    let s = aftr.wait_status(|v| {
        v["dslite"]["xdp"]["port_blocks"]["held"] == 0
            && v["dslite"]["xdp"]["port_blocks"]["returned"].as_u64() >= Some(1)
    });
    assert!(log_unmaps(&aftr.log(), "tcp") >= 4, "every TCP mapping expired: {s}");
    b4.stop();
    aftr.stop();
}

#[test]
fn dstm_lease_then_traffic_and_the_lease_survives_a_restart() {
    let bed = bed();
    let leases = bed.dir.path().join("leases");
    let cfg = format!(
        r#"
[lw4o6]
aftr-address = "2001:db8:ffff::1"
[lw4o6.dstm]
pool = ["192.0.2.128/30"]
listen = "[2001:db8:ff::1]:4739"
lease-time = "1m"
lease-file = "{}"
clients = ["2001:db8:1::/48"]
"#,
        leases.display()
    );
    let lw = Proc::start(&bed.aftr, bed.dir.path(), "tep", &cfg);
    let b4 = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "dstm",
        r#"
[b4]
mode = "dstm"
address = "2001:db8:1::2"
lease-server = "[2001:db8:ff::1]:4739"
routes = ["198.51.100.0/24"]
"#,
    );
    let s = b4.wait_status(|v| v["b4"]["lease"]["ipv4"].is_string());
    let leased = s["b4"]["lease"]["ipv4"].as_str().unwrap().to_string();
    assert_eq!(leased, "192.0.2.129");
    assert_eq!(s["b4"]["aftr"], "2001:db8:ffff::1", "the lease names the TEP");
    let (u, t) = traffic(&bed, 7300);
    assert_eq!(u.ip().to_string(), leased, "the host uses its leased address end to end");
    assert_eq!(t.ip().to_string(), leased);
    assert!(std::fs::read_to_string(&leases).unwrap().contains("2001:db8:1::2 192.0.2.129"));
    // The TEP restarts: the lease is read back and traffic flows at once.
    lw.stop();
    let lw = Proc::start(&bed.aftr, bed.dir.path(), "tep", &cfg);
    let s = lw.wait_status(|v| v["lw4o6"]["leases"] == 1);
    assert!(s["lw4o6"]["dstm"]["stats"]["granted"] == 0, "restored, not granted again: {s}");
    let (ok, out) = ping(&bed.b4, SERVER, &[]);
    assert!(ok, "after the restart: {out}");
    // The B4 stops and releases its lease.
    b4.stop();
    lw.wait_status(|v| v["lw4o6"]["leases"] == 0);
    // A lease flood from one client address is answered with the same lease.
    let answers = in_ns(&bed.b4, || {
        let s = std::net::UdpSocket::bind("[2001:db8:ff::2]:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut got = Vec::new();
        for i in 0..20u32 {
            s.send_to(&softwire::lease::encode(softwire::lease::Msg::Request, i), "[2001:db8:ff::1]:4739").unwrap();
            let mut b = [0u8; 64];
            if let Ok(n) = s.recv(&mut b) {
                got.push(softwire::lease::decode(&b[..n]).map(|m| m.0));
            }
        }
        got
    });
    assert_eq!(answers.len(), 20);
    // 2001:db8:ff::2 is not in `clients`: every request refused.
    assert!(
        answers.iter().all(|m| *m == Some(softwire::lease::Msg::Nak(softwire::lease::nak::REFUSED))),
        "{answers:?}"
    );
    let s = lw.wait_status(|v| v["lw4o6"]["dstm"]["stats"]["refused"].as_u64().unwrap_or(0) >= 20);
    assert_eq!(s["lw4o6"]["leases"], 0);
    let _ = &bed.aftr;
}

/// One DSTM lease exchange from `src` (in the B4 namespace) with the lease
/// server at [2001:db8:ff::1]:4739: the answer, or None on no answer.
fn lease_call(bed: &Bed, src: &str, m: softwire::lease::Msg, xid: u32) -> Option<softwire::lease::Msg> {
    let src = sa(&format!("[{src}]:0"));
    in_ns(&bed.b4, move || {
        let s = std::net::UdpSocket::bind(src).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.send_to(&softwire::lease::encode(m, xid), "[2001:db8:ff::1]:4739").unwrap();
        let mut b = [0u8; 64];
        let n = s.recv(&mut b).ok()?;
        let (got, x) = softwire::lease::decode(&b[..n])?;
        assert_eq!(x, xid, "the answer echoes the transaction id");
        Some(got)
    })
}

#[test]
fn dstm_pool_exhausted_then_an_unrenewed_lease_expires_and_its_address_is_reused() {
    use softwire::lease::{nak, Msg};
    let bed = bed();
    bed.b4.ip(&["addr", "add", "2001:db8:ff::3/64", "dev", "w6", "nodad"]).unwrap();
    let leases = bed.dir.path().join("leases");
    // One address, the shortest lease the configuration accepts.
    let lw = Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "tep",
        &format!(
            r#"
[lw4o6]
aftr-address = "2001:db8:ffff::1"
[lw4o6.dstm]
pool = ["192.0.2.200/32"]
listen = "[2001:db8:ff::1]:4739"
lease-time = "10s"
lease-file = "{}"
clients = ["2001:db8:ff::/64"]
"#,
            leases.display()
        ),
    );
    let leased: std::net::Ipv4Addr = "192.0.2.200".parse().unwrap();
    let a = lease_call(&bed, "2001:db8:ff::2", Msg::Request, 1);
    assert!(matches!(a, Some(Msg::Ack { ipv4, secs: 10, .. }) if ipv4 == leased), "{a:?}");
    // The pool is empty: a second host is refused with "exhausted", counted.
    let b = lease_call(&bed, "2001:db8:ff::3", Msg::Request, 2);
    assert_eq!(b, Some(Msg::Nak(nak::EXHAUSTED)));
    // A host cannot renew a lease it does not hold.
    let b = lease_call(&bed, "2001:db8:ff::3", Msg::Renew(leased), 3);
    assert_eq!(b, Some(Msg::Nak(nak::NO_LEASE)));
    let s = lw.wait_status(|v| v["lw4o6"]["leases"] == 1 && v["lw4o6"]["dstm"]["stats"]["exhausted"] == 1);
    assert_eq!(s["lw4o6"]["dstm"]["stats"]["no_lease"], 1, "{s}");
    assert!(std::fs::read_to_string(&leases).unwrap().contains("2001:db8:ff::2 192.0.2.200"));
    // The first host never renews: the lease expires (10 s), the lease file
    // and the lwAFTR's table forget it.
    let s = lw.wait_status_for(Duration::from_secs(40), |v| v["lw4o6"]["leases"] == 0);
    assert_eq!(s["lw4o6"]["dstm"]["stats"]["expired"], 1, "{s}");
    assert!(!std::fs::read_to_string(&leases).unwrap().contains("192.0.2.200"));
    // The address is free again: the second host gets it; the first one's
    // renewal is refused.
    let b = lease_call(&bed, "2001:db8:ff::3", Msg::Request, 4);
    assert!(matches!(b, Some(Msg::Ack { ipv4, .. }) if ipv4 == leased), "{b:?}");
    let a = lease_call(&bed, "2001:db8:ff::2", Msg::Renew(leased), 5);
    assert_eq!(a, Some(Msg::Nak(nak::NO_LEASE)));
    // Garbage gets no answer and is counted.
    in_ns(&bed.b4, || {
        let s = std::net::UdpSocket::bind("[2001:db8:ff::2]:0").unwrap();
        s.send_to(b"\xff\x00garbage", "[2001:db8:ff::1]:4739").unwrap();
    });
    lw.wait_status(|v| v["lw4o6"]["dstm"]["stats"]["malformed"].as_u64().unwrap_or(0) >= 1);
    lw.stop();
}

fn b4_kernel_count(s: &serde_json::Value, c: &str) -> u64 {
    s["b4"]["kernel"]["counters"][c].as_u64().unwrap_or(0)
}

/// Nothing of the bulk transfer took the B4 engine's fragmentation: no
/// GSO packet or packet over the tunnel MTU passed to it, and the tunnel
/// end-point `table` of the AFTR process reassembled nothing.
fn no_fragments(b4: &serde_json::Value, aftr: &serde_json::Value, table: &str) {
    for c in ["pass-gso", "pass-too-big", "pass-fragment"] {
        assert_eq!(b4_kernel_count(b4, c), 0, "{c}: {b4}");
    }
    let c = &aftr[table]["counters"];
    assert_eq!(c["reassembled"], 0, "{aftr}");
    assert!(c["drops"]["fragment-held"].is_null(), "{aftr}");
}

/// The B4's kernel datapath (`[b4.kernel]`: tc egress encapsulation on its
/// TUN device, XDP decapsulation on its uplink w6) against the AFTR and
/// the DSTM tunnel end-point on their TUN engines: ping, UDP and TCP, the
/// kernel path carrying what it can and the engine the rest.
#[test]
fn dslite_b4_and_dstm_host_over_the_b4_kernel_path() {
    let bed = bed();
    let leases = bed.dir.path().join("leases");
    let aftr = Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "aftr",
        &format!(
            r#"
[dslite]
aftr-address = "2001:db8:ffff::1"
b4-prefixes = ["2001:db8:1::/48"]
pool4 = ["203.0.113.1/32"]
[lw4o6]
aftr-address = "2001:db8:ffff::2"
ipv4-prefixes = ["192.0.2.0/25"]
[lw4o6.dstm]
pool = ["192.0.2.128/30"]
listen = "[2001:db8:ff::1]:4739"
lease-file = "{}"
clients = ["2001:db8:1::/48"]
"#,
            leases.display()
        ),
    );
    let kernel = "[b4.kernel]\ninterfaces = [\"w6\"]\n";
    let b4 = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "b4k",
        &format!(
            "[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8:1::2\"\naftr = \"2001:db8:ffff::1\"\n\
             host-address = \"192.0.0.2\"\nroutes = [\"198.51.100.0/24\"]\n{kernel}"
        ),
    );
    let s = b4.wait_status(|v| v["b4"]["kernel"]["aftr"] == "2001:db8:ffff::1");
    assert_eq!(s["b4"]["kernel"]["uplinks"][0]["iface"], "w6", "{s}");
    let (u, t) = traffic(&bed, 7700);
    assert_eq!((u.ip().to_string(), t.ip().to_string()), ("203.0.113.1".into(), "203.0.113.1".into()));
    let s = b4.wait_status(|v| b4_kernel_count(v, "encap") > 0 && b4_kernel_count(v, "decap") > 0);
    // ping, the UDP echo and the whole TCP echo went through the kernel:
    // the MSS clamp lowered the host's SYN (8960 for the 9000-byte TUN
    // device, in tc) and the server's SYN-ACK (1460, in XDP) to 1420, so
    // the host's bulk TCP leaves in GSO packets of 1420-byte segments
    // which the path encapsulates whole and the kernel segments after the
    // encapsulation; nothing is fragmented, either way.
    assert!(b4_kernel_count(&s, "encap") >= 3 && b4_kernel_count(&s, "decap") >= 3, "{s}");
    assert!(b4_kernel_count(&s, "mss-clamped") >= 2, "the SYN and the SYN-ACK: {s}");
    no_fragments(&s, &aftr.status(), "dslite");
    b4.stop();
    // The DSTM host: off until the lease, then pointed at its TEP; its
    // bulk TCP unfragmented the same way.
    let host = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "dstmk",
        &format!(
            "[b4]\nmode = \"dstm\"\naddress = \"2001:db8:1::2\"\nlease-server = \"[2001:db8:ff::1]:4739\"\n\
             routes = [\"198.51.100.0/24\"]\n{kernel}"
        ),
    );
    let s = host.wait_status(|v| v["b4"]["lease"]["ipv4"].is_string() && v["b4"]["kernel"]["aftr"].is_string());
    assert_eq!(s["b4"]["kernel"]["aftr"], "2001:db8:ffff::2", "the lease's TEP: {s}");
    let (u, _) = traffic(&bed, 7800);
    assert_eq!(u.ip().to_string(), "192.0.2.129");
    let s = host.wait_status(|v| b4_kernel_count(v, "encap") >= 3 && b4_kernel_count(v, "decap") >= 3);
    assert!(b4_kernel_count(&s, "pass-disabled") > 0, "before the lease everything took the engine: {s}");
    assert!(b4_kernel_count(&s, "mss-clamped") >= 2, "the SYN and the SYN-ACK: {s}");
    no_fragments(&s, &aftr.status(), "lw4o6");
    host.stop();
    aftr.stop();
    // Detached with the runner: nothing left on the uplink.
    let link = bed.b4.ip(&["link", "show", "w6"]).unwrap();
    assert!(!String::from_utf8_lossy(&link.stdout).contains("xdp"), "XDP left attached");
}

/// The host-integrated lwB4's kernel path (`[b4] host-ports`, `[b4.kernel]`)
/// against the lwAFTR on its TUN engine: the lwB4 host's own ping, UDP and
/// TCP (its sockets confined to its share of the port set by the sysctls
/// the status names) through the kernel, untranslated; a LAN host behind
/// the NAPT at the same time through the engine, into the NAPT's ports.
#[test]
fn lw4o6_host_integrated_lwb4_over_the_b4_kernel_path() {
    let bed = bed();
    let lan = Netns::unique("sw-lan").unwrap();
    veth(&lan, "l0", &bed.b4, "b0").unwrap();
    lan.ip(&["addr", "add", "192.168.1.2/24", "dev", "l0"]).unwrap();
    lan.ip(&["route", "add", "default", "via", "192.168.1.1"]).unwrap();
    bed.b4.ip(&["addr", "add", "192.168.1.1/24", "dev", "b0"]).unwrap();
    let map = softwire::portset::PsidMap::new(6, 6).unwrap();
    let bindings = bed.dir.path().join("bindings");
    std::fs::write(&bindings, "2001:db8:1::2 192.0.2.1 5 6\n").unwrap();
    let lw = Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "lwaftr",
        &format!(
            "[lw4o6]\naftr-address = \"2001:db8:ffff::1\"\nbinding-file = \"{}\"\nipv4-prefixes = [\"192.0.2.0/24\"]\n",
            bindings.display()
        ),
    );
    // PSID 5: ports A·1024 + 80 ... A·1024 + 95; the host holds A = 48..63.
    let (first, last) = (48 * 1024 + 80, 63 * 1024 + 95);
    let b4 = Proc::start(
        &bed.b4,
        bed.dir.path(),
        "lwb4k",
        &format!(
            "[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8:1::2\"\naftr = \"2001:db8:ffff::1\"\n\
             ipv4-address = \"192.0.2.1\"\npsid = 5\npsid-length = 6\nhost-ports = \"{first}-{last}\"\n\
             routes = [\"198.51.100.0/24\"]\n[b4.kernel]\ninterfaces = [\"w6\"]\n"
        ),
    );
    let s = b4.wait_status(|v| v["b4"]["kernel"]["aftr"] == "2001:db8:ffff::1");
    let h = &s["b4"]["host_ports"];
    assert_eq!(h["ports"], 16 * 16, "{s}");
    assert!(b4.log().contains("ip_local_port_range"), "the default range is not the host's: warned");
    // The operator's part: the host's stack confined to its ports.
    bed.b4.sysctl("net.ipv4.ip_local_port_range", h["ip_local_port_range"].as_str().unwrap()).unwrap();
    bed.b4.sysctl("net.ipv4.ip_local_reserved_ports", h["ip_local_reserved_ports"].as_str().unwrap()).unwrap();
    let owns = |p: u16| (first..=last).contains(&p) && map.allowed(p, 5);

    // The host and a LAN host behind the NAPT, at the same time.
    let (host, from_lan) = std::thread::scope(|sc| {
        let l =
            sc.spawn(|| tcp_echo(&bed.h4, sa("0.0.0.0:7901"), &lan, sa(&format!("{SERVER}:7901")), &[7u8; 100_000]).1);
        (traffic(&bed, 7900 - 1), l.join().unwrap())
    });
    for from in [host.0, host.1] {
        assert_eq!(from.ip().to_string(), "192.0.2.1");
        assert!(owns(from.port()), "the host used its own port: {from}");
    }
    assert_eq!(from_lan.ip().to_string(), "192.0.2.1", "the LAN translated into the binding");
    assert!(map.allowed(from_lan.port(), 5) && !owns(from_lan.port()), "the NAPT's port: {from_lan}");
    // ping with an identifier of the host's: the kernel path too.
    let (ok, out) = ping(&bed.b4, SERVER, &["-e", &first.to_string()]);
    assert!(ok, "ping with the host's identifier: {out}");
    let (ok, out) = ping(&lan, SERVER, &[]);
    assert!(ok, "ping from the LAN through the NAPT: {out}");

    let s = b4.wait_status(|v| b4_kernel_count(v, "encap") >= 4 && b4_kernel_count(v, "decap") >= 4);
    assert!(b4_kernel_count(&s, "mss-clamped") >= 2, "the host's SYN and the server's SYN-ACK: {s}");
    assert!(b4_kernel_count(&s, "pass-napt") >= 10, "the LAN's packets both ways to the engine: {s}");
    assert_eq!(s["b4"]["mappings"].as_u64().map(|m| m >= 2), Some(true), "the LAN's TCP and ping: {s}");
    no_fragments(&s, &lw.status(), "lw4o6");
    let ls = lw.status();
    assert_eq!(ls["lw4o6"]["counters"]["drops"].get("port-set-violation"), None, "{ls}");
    b4.stop();
    lw.stop();
    let link = bed.b4.ip(&["link", "show", "w6"]).unwrap();
    assert!(!String::from_utf8_lossy(&link.stdout).contains("xdp"), "XDP left attached");
}
