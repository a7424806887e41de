//! `v6gate run` with `[xdp]`: the SIIT fast path attached to the gateway's
//! interfaces (generic mode, which works on any interface), in network
//! namespaces (see `daemon_util`). Frames with known bytes are sent from
//! each host; the translated packet the other host receives is counted on
//! the fast path and byte-identical to what the Rust core
//! (`xlat::siit::Translator`) makes of the frame sent. A reload detaches
//! an interface dropped from the file, stopping detaches everything, and
//! `mode = "off"` runs with nothing loaded.

#[path = "../crates/xlat/tests/common/mod.rs"]
mod common;
mod daemon_util;
mod hardening_util;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use daemon_util::*;
use lab::netns::Netns;
use xlat::{Out, PacketKind, Verdict};

const SIIT: &str = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:1::2", "192.0.2.2"]]
[tun]
queues = 1
"#;

/// The IPv4 host seen from the IPv6 side.
const H4_AS_V6: &str = "64:ff9b:1::c633:6402";

fn config(interfaces: &str, mode: &str) -> String {
    format!("{SIIT}[xdp]\ninterfaces = [{interfaces}]\nmode = \"{mode}\"\n")
}

/// The MAC address of `dev` in `ns`.
fn mac(ns: &Netns, dev: &str) -> [u8; 6] {
    let out = ns.ip(&["-o", "link", "show", dev]).unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    let hex = s.split("link/ether ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("{s}"));
    let mut m = [0u8; 6];
    for (i, b) in hex.split(':').enumerate() {
        m[i] = u8::from_str_radix(b, 16).unwrap();
    }
    m
}

/// Which XDP program `ip link` shows on `dev` in `ns` (empty: none).
fn xdp_shown(ns: &Netns, dev: &str) -> String {
    let out = ns.ip(&["-d", "link", "show", dev]).unwrap();
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("xdp")).collect::<Vec<_>>().join("\n")
}

fn packet_socket(proto: u16) -> i32 {
    // SAFETY: plain socket(2); the caller closes the descriptor.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto.to_be())) };
    assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
    fd
}

/// Send `l3` out of `dev` of `ns` in an Ethernet frame to `dst_mac`.
fn send_frame(ns: &Netns, dev: &str, dst_mac: [u8; 6], l3: &[u8]) {
    let proto: u16 = if l3[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    in_ns(ns, || {
        let fd = packet_socket(proto);
        let name = std::ffi::CString::new(dev).unwrap();
        // SAFETY: `name` is a valid C string for the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert!(ifindex > 0, "no {dev}");
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid start.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto.to_be();
        sa.sll_ifindex = ifindex as i32;
        sa.sll_halen = 6;
        sa.sll_addr[..6].copy_from_slice(&dst_mac);
        // SAFETY: `l3` and `sa` are valid for the lengths given.
        let n = unsafe {
            libc::sendto(
                fd,
                l3.as_ptr().cast(),
                l3.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        let err = std::io::Error::last_os_error();
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        assert_eq!(n, l3.len() as isize, "sendto: {err}");
    });
}

/// In `ns`, the first packet of family `proto` received (not sent) that
/// contains `marker`, within 5 s. `ready` is signalled once listening.
fn capture(ns: &Netns, proto: u16, marker: &[u8], ready: mpsc::Sender<()>) -> Option<Vec<u8>> {
    in_ns(ns, || {
        let fd = packet_socket(proto);
        let tv = libc::timeval { tv_sec: 0, tv_usec: 200_000 };
        // SAFETY: `tv` is valid for the length given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        let _ = ready.send(());
        let t0 = Instant::now();
        let mut buf = vec![0u8; 4096];
        let mut found = None;
        while found.is_none() && t0.elapsed() < Duration::from_secs(5) {
            // SAFETY: sockaddr_ll is plain data.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf` and `sa` are valid for the lengths given.
            let n = unsafe {
                libc::recvfrom(
                    fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut sa as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n <= 0 || sa.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let p = &buf[..n as usize];
            if p.windows(marker.len()).any(|w| w == marker) {
                found = Some(p.to_vec());
            }
        }
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
        found
    })
}

/// Send `l3` from `from` (out of `dev`, to the gateway's `gw_dev`) and
/// return what `to` receives.
fn through(lab: &Lab, from: (&Netns, &str), gw_dev: &str, to: &Netns, l3: &[u8], marker: &[u8]) -> Option<Vec<u8>> {
    let rx_proto: u16 = if l3[0] >> 4 == 6 { 0x0800 } else { 0x86dd };
    let gw_mac = mac(&lab.gw, gw_dev);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let h = s.spawn(move || capture(to, rx_proto, marker, tx));
        rx.recv_timeout(Duration::from_secs(5)).expect("capture ready");
        send_frame(from.0, from.1, gw_mac, l3);
        h.join().unwrap()
    })
}

/// The core's single forwarded packet for `l3`, the IPv4 Identification
/// generator seeded with `ident`.
fn core(t: &xlat::siit::Translator, l3: &[u8], ident: u16) -> Vec<u8> {
    let mut out = Out::with_ident_seed(ident);
    assert!(matches!(t.translate(l3, &mut out), Verdict::Emit), "the core must translate it");
    let pkts: Vec<_> = out.iter().map(|(k, p)| (k, p.to_vec())).collect();
    match pkts.as_slice() {
        [(PacketKind::Forward, p)] => p.clone(),
        other => panic!("core emitted {} packets", other.len()),
    }
}

fn ident_of(l3: &[u8]) -> u16 {
    if l3[0] >> 4 == 4 && l3[6] & 0x40 == 0 {
        u16::from_be_bytes([l3[4], l3[5]])
    } else {
        0
    }
}

const FAST_64: &str = "v6gate_xdp_fast_path_packets_total{function=\"siit\",direction=\"6to4\"}";
const FAST_46: &str = "v6gate_xdp_fast_path_packets_total{function=\"siit\",direction=\"4to6\"}";

#[test]
fn siit_fast_path_counts_and_matches_the_core_reload_and_stop_detach() {
    lab::need_root!();
    let mut lab = Lab::start(&config("\"g6\", \"g4\"", "generic"));
    let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
    let names: Vec<&str> = x["interfaces"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["g6", "g4"], "{x}");
    assert!(x["interfaces"].as_array().unwrap().iter().all(|i| i["mode"] == "generic"), "{x}");
    assert_eq!(x["siit"]["pool6"], "64:ff9b:1::/96", "{x}");
    assert_eq!(x["siit"]["eamt_entries"], 1, "{x}");
    for dev in ["g6", "g4"] {
        assert!(xdp_shown(&lab.gw, dev).contains("xdpgeneric"), "{dev}: {}", xdp_shown(&lab.gw, dev));
    }
    assert_eq!(lab.metric("v6gate_xdp_attached{interface=\"g4\",mode=\"generic\"}"), 1);
    // The gateway knows both hosts' MACs (the fast path forwards only to
    // resolved neighbours; the first packets would otherwise pass).
    for (host, dst) in [(&lab.h6, "2001:db8:1::1"), (&lab.h4, "198.51.100.1")] {
        let (ok, out) = ping(host, dst, &[]);
        assert!(ok, "{out}");
    }
    let t = gate::config::Config::parse(SIIT).unwrap().siit_translator().unwrap();

    // IPv6 -> IPv4: UDP from the IPv6 host to the IPv4 host.
    let before = lab.metric(FAST_64);
    // What the slow path wrote as IPv4 (its translations of IPv6 input):
    // the marker must not be among them. (The TUN device's IPv6 receive
    // count is no measure: a stray IPv6 packet routed into it, which the
    // engine drops, may land in the window.)
    let tx4_before = lab.metric("v6gate_packets_total{direction=\"tx\",family=\"ipv4\"}");
    let marker = b"xdp-fast-6to4-marker";
    let sent = common::V6 { tc: 0x28, flow: 0x12345, ..common::V6::new(17, H6, H4_AS_V6) }.udp(40000, 5300, marker);
    let got = through(&lab, (&lab.h6, "a6"), "g6", &lab.h4, &sent, marker).expect("translated packet at the IPv4 host");
    assert_eq!(common::hex(&got), common::hex(&core(&t, &sent, ident_of(&got))), "fast path differs from the core");
    common::check(&got);
    assert!(lab.wait_metric(FAST_64, |v| v > before) > before, "not counted on the fast path");
    assert_eq!(
        lab.metric("v6gate_packets_total{direction=\"tx\",family=\"ipv4\"}"),
        tx4_before,
        "the slow path translated it too"
    );

    // IPv4 -> IPv6: TCP (an ACK with data) from the IPv4 host to the EAMT address.
    let before = lab.metric(FAST_46);
    let marker = b"xdp-fast-4to6-marker";
    let sent = common::V4 { tos: 0x10, ..common::V4::new(6, H4, "192.0.2.2") }.tcp(5301, 40001, 0x18, marker);
    let got = through(&lab, (&lab.h4, "a4"), "g4", &lab.h6, &sent, marker).expect("translated packet at the IPv6 host");
    assert_eq!(common::hex(&got), common::hex(&core(&t, &sent, 0)), "fast path differs from the core");
    common::check(&got);
    assert!(lab.wait_metric(FAST_46, |v| v > before) > before, "not counted on the fast path");

    // What needs the slow path still works through it: hop limit 2 gets
    // Time Exceeded... from the translator (the fast path passes it).
    let passes = lab.metric("v6gate_xdp_passes_total{reason=\"ttl\"}");
    let marker = b"xdp-pass-ttl";
    let sent = common::V6 { hop: 1, ..common::V6::new(17, H6, H4_AS_V6) }.udp(40002, 5302, marker);
    assert!(through(&lab, (&lab.h6, "a6"), "g6", &lab.h4, &sent, marker).is_none(), "hop limit 1 forwarded");
    assert!(lab.wait_metric("v6gate_xdp_passes_total{reason=\"ttl\"}", |v| v > passes) > passes);

    // Reload without g4: detached from g4, still on g6.
    lab.write_config(&config("\"g6\"", "generic"));
    lab.sighup();
    assert!(lab.wait_log("xdp: detached from g4"), "{}", lab.log());
    assert!(xdp_shown(&lab.gw, "g4").is_empty(), "{}", xdp_shown(&lab.gw, "g4"));
    assert!(xdp_shown(&lab.gw, "g6").contains("xdpgeneric"));
    let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
    assert_eq!(x["interfaces"].as_array().unwrap().len(), 1, "{x}");
    // A map size change needs a restart: rejected, the old state stays.
    lab.write_config(&format!("{}eamt-entries = 8\n", config("\"g6\"", "generic")));
    assert!(lab.ctl(&["reload"]).unwrap_err().contains("restart"), "map sizes are fixed");
    assert!(xdp_shown(&lab.gw, "g6").contains("xdpgeneric"));

    // Stop: nothing stays attached.
    let (st, log) = lab.stop();
    assert!(st.success(), "{log}");
    for dev in ["g6", "g4"] {
        assert!(xdp_shown(&lab.gw, dev).is_empty(), "{dev} after stop: {}", xdp_shown(&lab.gw, dev));
    }
}

#[test]
fn xdp_mode_off_runs_the_slow_path_only() {
    lab::need_root!();
    let lab = Lab::start(&config("\"g6\"", "off"));
    let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
    assert_eq!((x["mode"].as_str(), x["loaded"].as_bool()), (Some("off"), Some(false)), "{x}");
    assert!(xdp_shown(&lab.gw, "g6").is_empty());
    let (ok, out) = ping(&lab.h6, H4_AS_V6, &[]);
    assert!(ok, "slow path: {out}");
    assert_eq!(lab.metric(FAST_64), 0);
    // Without [xdp] the endpoint says so.
    let lab2 = Lab::start(SIIT);
    assert!(lab2.ctl(&["xdp"]).unwrap_err().contains("not configured"));
}

const NAT64_CONFIG: &str = r#"
[nat64]
pool6 = "64:ff9b:2::/96"
pool4 = ["203.0.113.1/32"]
udp-timeout = 3
[tun]
queues = 1
[xdp]
interfaces = ["g6", "g4"]
mode = "generic"
"#;

const H4_NAT64: &str = "64:ff9b:2::c633:6402";
const NAT_64: &str = "v6gate_xdp_fast_path_packets_total{function=\"nat64\",direction=\"6to4\"}";
const NAT_46: &str = "v6gate_xdp_fast_path_packets_total{function=\"nat64\",direction=\"4to6\"}";

fn udp_sessions(lab: &Lab) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&lab.ctl(&["sessions", "--proto", "udp"]).unwrap()).unwrap();
    v.as_array().cloned().unwrap_or_default()
}

/// A NAT64 UDP session created by the slow path is mirrored and then
/// carried by the fast path both ways; used only there, it does not
/// expire (its last use is read back); idle, it expires and leaves the map.
#[test]
fn nat64_established_sessions_on_the_fast_path() {
    lab::need_root!();
    let lab = Lab::start(NAT64_CONFIG);
    for (host, dst) in [(&lab.h6, "2001:db8:1::1"), (&lab.h4, "198.51.100.1")] {
        let (ok, out) = ping(host, dst, &[]);
        assert!(ok, "{out}");
    }
    let _echo = EchoServers::udp(&lab.h4, "0.0.0.0", &[5000]);
    let sock = udp_client(&lab.h6, true);
    let dst: std::net::SocketAddr = format!("[{H4_NAT64}]:5000").parse().unwrap();
    // The first datagram creates the session on the slow path; within a
    // sync period it is mirrored and the following ones take the fast path.
    let t0 = Instant::now();
    let mut i = 0u32;
    while lab.metric(NAT_64) == 0 || lab.metric(NAT_46) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "never on the fast path: {}", lab.ctl(&["xdp"]).unwrap());
        let msg = format!("warm-up {i}");
        assert_eq!(udp_roundtrip(&sock, dst, msg.as_bytes()).expect("echo"), msg.as_bytes());
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    // The translator mirrors the session as it creates it (its first
    // reply already takes the fast path); the mirror's bookkeeping, which
    // the status and metrics show, adopts it at the next sync (0.5 s).
    let t2 = Instant::now();
    loop {
        let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
        if x["nat64"]["sessions_mirrored"] == 1 {
            break;
        }
        assert!(t2.elapsed() < Duration::from_secs(3), "not adopted by the sync: {x}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lab.metric("v6gate_xdp_mirrored{table=\"nat64-sessions\"}"), 1);
    let port = udp_sessions(&lab)[0]["ipv4-src"].clone();
    assert!(port.is_string(), "{port}");

    // Traffic on the fast path only, for more than twice the UDP timeout:
    // every datagram comes back, the session stays (same pool4 port) and
    // the TUN device sees none of it.
    let rx = lab.metric("v6gate_packets_total{direction=\"rx\",family=\"ipv6\"}");
    let fast = lab.metric(NAT_64);
    let t1 = Instant::now();
    let mut n = 0u64;
    while t1.elapsed() < Duration::from_secs(7) {
        let msg = format!("fast {n}");
        assert_eq!(udp_roundtrip(&sock, dst, msg.as_bytes()).expect("echo on the fast path"), msg.as_bytes());
        n += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = udp_sessions(&lab);
    assert_eq!(s.len(), 1, "the session lives on: {s:?}");
    assert_eq!(s[0]["ipv4-src"], port, "same session");
    assert!(lab.wait_metric(NAT_64, |v| v >= fast + n) >= fast + n, "all {n} on the fast path");
    assert_eq!(lab.metric("v6gate_packets_total{direction=\"rx\",family=\"ipv6\"}"), rx, "TUN saw none");

    // Idle: it expires on the slow path and leaves the map.
    let t2 = Instant::now();
    while !udp_sessions(&lab).is_empty() {
        assert!(t2.elapsed() < Duration::from_secs(10), "idle session never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
    let t3 = Instant::now();
    loop {
        let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
        if x["nat64"]["sessions_mirrored"] == 0 {
            break;
        }
        assert!(t3.elapsed() < Duration::from_secs(5), "expired session still mirrored: {x}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The fast path's counter `label` as `ctl xdp` shows it.
fn xdp_counter(lab: &Lab, label: &str) -> u64 {
    let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
    x["counters"][label]["packets"].as_u64().unwrap_or(0)
}

/// Sessions mirrored from their first packet, in NAT64 and NAT-PT mode: a
/// UDP flow's first reply and each TCP connection's SYN+ACK take the fast
/// path (the SYN+ACK recorded for the translator), the connections work,
/// and the translator's table ends as if it had seen every packet (both
/// FINs, which still pass, in V4 FIN + V6 FIN RCV). In NAT-PT mode each
/// TCP session is created in XDP from its SYN (the host bound by the UDP
/// flow) and taken over by the translator; in NAT64 mode each but the
/// first (which makes the translator grant the host a port block).
#[test]
fn nat64_sessions_on_the_fast_path_from_their_first_packet() {
    lab::need_root!();
    for mode in ["nat64", "natpt"] {
        let conf = NAT64_CONFIG.replace("udp-timeout = 3", &format!("udp-timeout = 3\nmode = \"{mode}\""));
        let lab = Lab::start(&conf);
        for (host, dst) in [(&lab.h6, "2001:db8:1::1"), (&lab.h4, "198.51.100.1")] {
            let (ok, out) = ping(host, dst, &[]);
            assert!(ok, "{out}");
        }
        let srv: std::net::SocketAddr = "0.0.0.0:5001".parse().unwrap();
        let dst: std::net::SocketAddr = format!("[{H4_NAT64}]:5001").parse().unwrap();
        // UDP: the reply to the first datagram is carried.
        let (got, _) = udp_echo(&lab.h4, srv, &lab.h6, dst, b"first");
        assert_eq!(got, b"first");
        assert_eq!(lab.metric(NAT_46), 1, "{mode}: the first reply on the fast path");
        // TCP: connect, a few bytes each way, close.
        let n = 5;
        for i in 0..n {
            let msg = format!("{mode} tcp {i}");
            let (got, _) = tcp_echo(&lab.h4, srv, &lab.h6, dst, msg.as_bytes());
            assert_eq!(got, msg.as_bytes());
        }
        assert_eq!(xdp_counter(&lab, "nat64-syn-ack"), n, "{mode}: every SYN+ACK carried");
        // Open but idle: the sync lets the translator learn it (ESTABLISHED).
        let srv2: std::net::SocketAddr = "0.0.0.0:5002".parse().unwrap();
        let l = lab.h4.run(|| Ok(std::net::TcpListener::bind(srv2)?)).unwrap();
        let dst2: std::net::SocketAddr = format!("[{H4_NAT64}]:5002").parse().unwrap();
        let c = lab.h6.run(|| Ok(std::net::TcpStream::connect_timeout(&dst2, Duration::from_secs(5))?)).unwrap();
        let t0 = Instant::now();
        loop {
            let v: serde_json::Value =
                serde_json::from_str(&lab.ctl(&["sessions", "--proto", "tcp"]).unwrap()).unwrap();
            let open =
                v.as_array().unwrap().iter().find(|s| s["ipv4-dst"].as_str().is_some_and(|d| d.ends_with(":5002")));
            if open.is_some_and(|s| s["state"] == "established") {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(3), "{mode}: never learnt: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
        drop((c, l));
        assert!(lab.metric(NAT_64) >= n, "{mode}: the handshake's ACKs and data 6->4 carried");
        let v: serde_json::Value = serde_json::from_str(&lab.ctl(&["sessions", "--proto", "tcp"]).unwrap()).unwrap();
        let states: Vec<_> = v
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["ipv4-dst"].as_str().is_some_and(|d| d.ends_with(":5001")))
            .map(|s| s["state"].clone())
            .collect();
        assert_eq!(states.len(), n as usize, "{mode}: {v}");
        assert!(states.iter().all(|s| s == "v4-fin-v6-fin-rcv"), "{mode}: learnt, then both FINs: {states:?}");
        // Both FINs of each connection carried in XDP and told to the
        // translator, which stepped its sessions with them (above).
        let fins = xdp_counter(&lab, "nat64-fin");
        assert!(fins >= 2 * n, "{mode}: FINs carried: {fins}");
        // Only the RST of the idle connection, never accepted, when its
        // listener closed goes to the slow path.
        assert!(xdp_counter(&lab, "tcp-control") <= 1, "{mode}: no FIN through the slow path");
        // NAT-PT: the host holds its address from the UDP flow on, so each
        // connection's SYN created its session in XDP, taken over by the
        // translator (listed above, as every other session).
        let created = xdp_counter(&lab, "natpt-created");
        let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
        if mode == "natpt" {
            assert_eq!(created, n + 1, "every SYN created in XDP: {x}");
            assert_eq!(x["nat64"]["natpt_created"]["adopted"], n + 1, "{x}");
            assert_eq!(x["nat64"]["natpt_created"]["refused"], 0, "{x}");
        } else {
            // NAT64: the host's first SYN has no port block yet (the
            // translator grants one); every later SYN created in XDP with
            // a port of that block, taken over by the translator.
            assert_eq!(created, 0, "NAT64 mode: no NAT-PT creation");
            assert_eq!(xdp_counter(&lab, "nat64-no-block"), 1, "{x}");
            assert_eq!(xdp_counter(&lab, "nat64-created"), n, "{x}");
            assert_eq!(x["nat64"]["natpt_created"]["adopted"], n, "{x}");
            assert_eq!(x["nat64"]["natpt_created"]["refused"], 0, "{x}");
            assert_eq!(lab.metric("v6gate_nat64_port_blocks"), 1, "one block for the host");
            assert_eq!(lab.metric("v6gate_nat64_port_blocks_granted_total"), 1);
        }
    }
}

const TRGW_FAST: &str = "v6gate_xdp_fast_path_packets_total{function=\"trgw\",direction=\"relay\"}";
const RELAYED_RTP: &str = "v6gate_trgw_relayed_packets_total{kind=\"rtp\"}";

/// A TrGW call set up over ng: after the first packets latch on the slow
/// path, the relay legs are mirrored and RTP both ways (6->4, 4->6) is
/// relayed by the fast path, byte for byte and from the relay's addresses;
/// the fast path's counts are merged into the relay's own counters.
#[test]
fn trgw_media_on_the_fast_path_with_merged_counters() {
    lab::need_root!();
    use hardening_util::{recv_from, Baseline};
    let (lab, _dir) = hardening_util::start("", "", "[xdp]\ninterfaces = [\"g6\", \"g4\"]\nmode = \"generic\"\n");
    for (host, dst) in [(&lab.h6, "2001:db8:1::1"), (&lab.h4, "198.51.100.1")] {
        let (ok, out) = ping(host, dst, &[]);
        assert!(ok, "{out}");
    }
    // Datagrams from local sockets with their UDP checksum computed (see
    // xdp::sys::set_tx_checksum): the TrGW program verifies it.
    for (ns, dev) in [(&lab.h6, "a6"), (&lab.h4, "a4")] {
        in_ns(ns, || xdp::sys::set_tx_checksum(dev, false)).unwrap();
    }
    let b = Baseline::new(&lab);
    let t0 = Instant::now();
    loop {
        let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
        if x["trgw"]["legs_mirrored"].as_u64().unwrap_or(0) >= 2 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "latched legs never mirrored: {x}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let fast = lab.metric(TRGW_FAST);
    let relayed = lab.metric(RELAYED_RTP);
    let n = 20u64;
    for i in 0..n {
        let m6 = format!("fast rtp 6->4 {i}");
        b.ua6.send_to(m6.as_bytes(), b.to6).unwrap();
        let (got, from) = recv_from(&b.ua4).expect("RTP 6->4 through the fast path");
        assert_eq!((got.as_slice(), from), (m6.as_bytes(), b.to4));
        let m4 = format!("fast rtp 4->6 {i}");
        b.ua4.send_to(m4.as_bytes(), b.to4).unwrap();
        let (got, from) = recv_from(&b.ua6).expect("RTP 4->6 through the fast path");
        assert_eq!((got.as_slice(), from), (m4.as_bytes(), b.to6));
    }
    assert!(
        lab.wait_metric(TRGW_FAST, |v| v >= fast + 2 * n) >= fast + 2 * n,
        "relayed on the fast path: {}",
        lab.ctl(&["xdp"]).unwrap()
    );
    assert!(
        lab.wait_metric(RELAYED_RTP, |v| v >= relayed + 2 * n) >= relayed + 2 * n,
        "the fast path's packets counted in the relay's own statistics"
    );
    assert_eq!(lab.metric("v6gate_xdp_map_full_total{map=\"trgw-relays\"}"), 0);
}

/// The `routes` part of `v6gate ctl xdp`.
fn routes_status(lab: &Lab) -> serde_json::Value {
    let x: serde_json::Value = serde_json::from_str(&lab.ctl(&["xdp"]).unwrap()).unwrap();
    x["routes"].clone()
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Wait (10 s at most) until an IPv4 route is mirrored with a next hop, a
/// mirrored next hop carries `mac`, and none carries `not` (when given).
fn wait_next_hop(lab: &Lab, mac: [u8; 6], not: Option<[u8; 6]>) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let r = routes_status(lab);
        let macs: Vec<&str> =
            r["next_hops"].as_array().map(|a| a.iter().filter_map(|h| h["mac"].as_str()).collect()).unwrap_or_default();
        if r["routes4_with_next_hop"].as_u64().unwrap_or(0) >= 1
            && macs.contains(&mac_text(mac).as_str())
            && not.is_none_or(|n| !macs.contains(&mac_text(n).as_str()))
        {
            return r;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "next hop {} never mirrored: {r}", mac_text(mac));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Send a UDP datagram from the IPv6 host to the IPv4 host's `port` through
/// the gateway and return what a UDP socket on the IPv4 host receives (its
/// kernel takes only frames to its own MAC with correct checksums).
fn deliver_6to4(lab: &Lab, port: u16, msg: &[u8]) -> Option<Vec<u8>> {
    let sock = in_ns(&lab.h4, || std::net::UdpSocket::bind(("0.0.0.0", port)).unwrap());
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let sent = common::V6::new(17, H6, H4_AS_V6).udp(40000, port, msg);
    send_frame(&lab.h6, "a6", mac(&lab.gw, "g6"), &sent);
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}

/// `mirror-routes` (on by default): the gateway's connected prefixes and
/// resolved neighbours are mirrored into routes4/routes6 → nexthops, the
/// fast path forwards with them (IPv4 forwarding is off on the ingress
/// interface, so `bpf_fib_lookup` would refuse: only the mirror can
/// forward these packets on the fast path), and a changed neighbour MAC
/// is followed. `mirror-routes = false` mirrors nothing.
#[test]
fn routes_and_neighbours_mirrored_and_followed() {
    lab::need_root!();
    let lab = Lab::start(&config("\"g6\", \"g4\"", "generic"));
    // No IPv6 on the IPv4 link: the IPv4 host's MAC then reaches the
    // mirror only through its IPv4 neighbour entry (not a link-local one).
    lab.gw.sysctl("net.ipv6.conf.g4.disable_ipv6", "1").unwrap();
    lab.h4.sysctl("net.ipv6.conf.a4.disable_ipv6", "1").unwrap();
    for (host, dst) in [(&lab.h6, "2001:db8:1::1"), (&lab.h4, "198.51.100.1")] {
        let (ok, out) = ping(host, dst, &[]);
        assert!(ok, "{out}");
    }
    let a4 = mac(&lab.h4, "a4");
    let r = wait_next_hop(&lab, a4, None);
    assert_eq!(r["mirror"], true, "{r}");
    assert!(r["routes4_with_next_hop"].as_u64().unwrap() >= 1, "the IPv4 host's route: {r}");
    // The connected prefixes and local addresses are there too, sending
    // their other destinations to bpf_fib_lookup.
    assert!(r["routes4"].as_u64().unwrap() > r["routes4_with_next_hop"].as_u64().unwrap(), "{r}");
    assert!(r["routes6_with_next_hop"].as_u64().unwrap() >= 1, "the IPv6 host's route: {r}");
    assert!(wait_next_hop(&lab, mac(&lab.h6, "a6"), None)["next_hops"].as_array().unwrap().len() >= 2);

    lab.gw.sysctl("net.ipv4.conf.g6.forwarding", "0").unwrap();
    let (fast, fib) = (lab.metric(FAST_64), lab.metric("v6gate_xdp_passes_total{reason=\"fib\"}"));
    assert_eq!(deliver_6to4(&lab, 5310, b"mirrored-1").as_deref(), Some(&b"mirrored-1"[..]));
    assert!(lab.wait_metric(FAST_64, |v| v > fast) > fast, "not on the fast path: {}", lab.ctl(&["xdp"]).unwrap());
    assert_eq!(lab.metric("v6gate_xdp_passes_total{reason=\"fib\"}"), fib, "took bpf_fib_lookup");

    // The IPv4 host changes its MAC; the gateway's neighbour entry follows
    // (as ARP would), and so does the mirror.
    let new = [0x02, 0, 0, 0, 0x44, 0x44];
    lab.h4.ip(&["link", "set", "a4", "address", &mac_text(new)]).unwrap();
    lab.gw.ip(&["neigh", "replace", H4, "lladdr", &mac_text(new), "dev", "g4", "nud", "permanent"]).unwrap();
    wait_next_hop(&lab, new, Some(a4));
    let fast = lab.metric(FAST_64);
    assert_eq!(deliver_6to4(&lab, 5311, b"mirrored-2").as_deref(), Some(&b"mirrored-2"[..]), "new MAC followed");
    assert!(lab.wait_metric(FAST_64, |v| v > fast) > fast);
    assert_eq!(lab.metric("v6gate_xdp_passes_total{reason=\"fib\"}"), fib);
    drop(lab);

    let lab = Lab::start(&format!("{}mirror-routes = false\n", config("\"g6\", \"g4\"", "generic")));
    let r = routes_status(&lab);
    assert_eq!(r["mirror"], false, "{r}");
    assert!(r.get("next_hops").is_none(), "{r}");
}
