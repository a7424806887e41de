//! Interop of the IMS-ALG in `v6gate run` ([alg] + [trgw]) with real SIP
//! programs, in network namespaces:
//!
//! ```text
//!  h6 (IPv6 only)               gw: v6gate run                   h4 (IPv4 only)
//!  SIPp UAs / a moving UE  ---  [alg] [2001:db8:1::1]:5060  ---  Kamailio 198.51.100.2:5060
//!  2001:db8:1::2 (and ::3)      [alg] 198.51.100.1:5060          (registrar, proxy)
//!                               [trgw] media on both             SIPp UAs :5070, :5080
//! ```
//!
//! The ALG routes `ipv4.test` to Kamailio (a domain route), IP literals by
//! their family. Each test asserts what the UAs saw (SDP, Contact,
//! Request-URI), that RTP flowed both ways through the TrGW (raw-socket
//! counters in each UA namespace), the daemon's counters, and that the
//! daemon's ALG tables (transactions, dialogs) and TrGW table (calls) are
//! empty afterwards (`v6gate ctl status`).
//!
//! - `v6_caller_through_kamailio_to_v4`: SIPp (IPv6) → ALG → Kamailio →
//!   SIPp (IPv4, RTP echo).
//! - `v4_caller_to_v6`: SIPp (IPv4) → ALG → SIPp (IPv6, RTP echo).
//! - `cancel_while_ringing`, `busy_callee`: CANCEL / 486 through the ALG
//!   and Kamailio; the media allocated for the offer is released.
//! - `register_then_call_from_v4`: a UE registers through the ALG with
//!   Kamailio (Path); an IPv4 SIPp calls it through Kamailio and the ALG.
//! - `handover_by_reinvite`: a UE in the IPv6 realm (this test's own UA:
//!   SIPp cannot move its media address) calls the IPv4 SIPp, moves to a
//!   new address with a re-INVITE; media continues from and to the new
//!   address, the old address is no longer relayed.
//! - `reload_applies_routes_and_refuses_listener_changes`: SIGHUP with a
//!   new domain route applies; a new SIP port is refused (restart needed).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use alg::msg::Name;
use bench::harness::guard::Proc;
use lab::gateconf;

mod daemon_util;
mod sip_util;
#[path = "../crates/alg/tests/common/wire.rs"]
mod wire;

use daemon_util::Lab;
use sip_util::*;

const GW6: &str = "2001:db8:1::1";
const GW4: &str = "198.51.100.1";
const H6: &str = "2001:db8:1::2";
const H6_MOVED: &str = "2001:db8:1::3";
const H4: &str = "198.51.100.2";
/// Kamailio's port on h4; the IPv4 SIPp callee and caller use 5070, 5080.
const KAM_PORT: u16 = 5060;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/alg")
}

/// `v6gate run` with the ALG and its TrGW (media on both gw addresses, ng
/// for nothing but this test's look at the relay), T1 = 50 ms so the
/// transaction timers end within seconds.
fn config() -> String {
    let iface = |name: &str, ipv4: Option<&str>, ipv6: Option<&str>| gateconf::TrgwInterface {
        name: name.into(),
        ipv4: ipv4.map(|a| a.parse().unwrap()),
        ipv6: ipv6.map(|a| a.parse().unwrap()),
    };
    gateconf::V6gate {
        trgw: Some(gateconf::Trgw {
            ng: Some("127.0.0.1:2223".into()),
            port_min: 30000,
            port_max: 30999,
            workers: Some(1),
            interface: vec![iface("v6", None, Some(GW6)), iface("v4", Some(GW4), None)],
            ..Default::default()
        }),
        alg: Some(gateconf::Alg {
            listen_v6: format!("[{GW6}]:5060"),
            listen_v4: format!("{GW4}:5060"),
            media_v6_interface: Some("v6".into()),
            media_v4_interface: Some("v4".into()),
            t1: Some("50ms".into()),
            route: vec![gateconf::AlgRoute {
                domain: "ipv4.test".into(),
                next_hop: format!("{H4}:{KAM_PORT}"),
                transport: None,
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .render()
    .unwrap()
}

/// The testbed: the daemon in gw, Kamailio in h4 (IPv6 off there).
struct Net {
    lab: Lab,
    dir: TestDir,
    kamailio: Proc,
}

impl Net {
    fn start() -> Net {
        for b in ["kamailio", "sipp", "ss"] {
            need(b);
        }
        let lab = Lab::start(&config());
        lab.h4.sysctl("net.ipv6.conf.all.disable_ipv6", "1").unwrap();
        let dir = TestDir::new("v6gate-alg-interop");
        let cfg = std::fs::read_to_string(fixtures().join("kamailio.cfg"))
            .unwrap()
            .replace("@KAM@", H4)
            .replace("@UA4@", &format!("{H4}:5070"))
            .replace("@MPATH@", KAMAILIO_MODULES);
        std::fs::write(dir.join("kamailio.cfg"), cfg).unwrap();
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        let mut k = lab.h4.command("kamailio");
        k.arg("-f").arg(dir.join("kamailio.cfg")).args(["-DD", "-E", "-m", "64", "-M", "8"]);
        k.arg("-Y").arg(&run).arg("-P").arg(run.join("k.pid"));
        let kamailio = spawn("kamailio", k, &dir.join("kamailio.log"));
        wait_udp_listen(&lab.h4, KAM_PORT, 1, &kamailio);
        Net { lab, dir, kamailio }
    }

    /// SIPp in h6 (`v6`) or h4 with the keys the scenarios use.
    fn sipp(&self, v6: bool, scenario: &str, port: u16, name: &str, keys: &[(&str, &str)]) -> std::process::Command {
        let (ns, ip) = if v6 { (&self.lab.h6, H6) } else { (&self.lab.h4, H4) };
        let mut c = sip_util::sipp(ns, &self.scenario(scenario), ip, port, &self.dir, name);
        let me = if v6 { format!("[{ip}]") } else { ip.to_string() };
        c.args(["-key", "me", &me, "-key", "mip", ip, "-key", "fam", if v6 { "6" } else { "4" }]);
        for (k, v) in keys {
            c.args(["-key", k, v]);
        }
        c
    }

    /// The scenario file, with @AUDIO@ pointing at 1 s of PCMU silence.
    fn scenario(&self, name: &str) -> PathBuf {
        let audio = self.dir.join("silence.pcmu");
        if !audio.exists() {
            std::fs::write(&audio, vec![0xffu8; 8000]).unwrap();
        }
        let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
        let p = self.dir.join(name);
        std::fs::write(&p, text.replace("@AUDIO@", &audio.display().to_string())).unwrap();
        p
    }

    fn diag(&self) -> String {
        let mut s = self.dir.tails(&[
            "kamailio.log",
            "uac-errors.log",
            "uas-errors.log",
            "uac.log",
            "uas.log",
            "uac-messages.log",
            "uas-messages.log",
        ]);
        let log = self.lab.log();
        let lines: Vec<&str> = log.lines().collect();
        s += &format!("\n--- v6gate (last 40 lines):\n{}", lines[lines.len().saturating_sub(40)..].join("\n"));
        s
    }

    fn status(&self) -> serde_json::Value {
        self.lab.status()
    }

    /// The ALG's dialogs and the TrGW's calls are gone at once; the
    /// transactions once their timers ran (`within`: Timer D keeps a
    /// client INVITE transaction that got a failure for 32 s over UDP).
    fn assert_tables_empty(&self, within: Duration) {
        let t0 = Instant::now();
        let calls = |s: &serde_json::Value| (s["alg"]["dialogs"].as_u64(), s["trgw"]["calls"].as_u64());
        loop {
            let s = self.status();
            if calls(&s) == (Some(0), Some(0)) {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "dialogs or media left: {}{}", s, self.diag());
            std::thread::sleep(Duration::from_millis(100));
        }
        loop {
            let s = self.status();
            let a = &s["alg"];
            let t = (a["transactions"]["server"].as_u64(), a["transactions"]["client"].as_u64(), a["parked"].as_u64());
            if t == (Some(0), Some(0), Some(0)) {
                break;
            }
            assert!(t0.elapsed() < within, "ALG transactions left after {within:?}: {a}{}", self.diag());
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn metric(&self, series: &str) -> u64 {
        self.lab.metric(series)
    }

    fn kamailio_alive(&mut self) -> bool {
        self.kamailio.running()
    }
}

fn ip(a: &str) -> IpAddr {
    a.parse().unwrap()
}

/// Runs a call between a SIPp caller and a SIPp callee with RTP sniffers
/// in both UA namespaces; returns (RTP from the relay at the caller, at the
/// callee's media port).
fn call_with_media(
    net: &Net,
    uac: std::process::Command,
    uas: std::process::Command,
    callee_v6: bool,
    callee_port: u16,
) -> (u64, u64) {
    let (got_caller, got_callee, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let (caller_ns, callee_ns) = if callee_v6 { (&net.lab.h4, &net.lab.h6) } else { (&net.lab.h6, &net.lab.h4) };
    let (caller_from, callee_from) = if callee_v6 { (ip(GW4), ip(GW6)) } else { (ip(GW6), ip(GW4)) };
    std::thread::scope(|sc| {
        let _stop = StopOnDrop(&stop);
        sc.spawn(|| sniff(caller_ns, caller_from, &got_caller, &stop));
        sc.spawn(|| sniff_to(callee_ns, callee_from, Some(6000), &got_callee, &stop));
        let mut uas = spawn("sipp uas", uas, &net.dir.join("uas.log"));
        wait_udp_listen(callee_ns, callee_port, 1, &uas);
        let mut uac = spawn("sipp uac", uac, &net.dir.join("uac.log"));
        let uac_ok = uac.wait_exit(Duration::from_secs(30)).unwrap();
        let uas_ok = uas.wait_exit(Duration::from_secs(10)).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(uac_ok, "the SIPp caller failed{}", net.diag());
        assert!(uas_ok, "the SIPp callee failed{}", net.diag());
    });
    (got_caller.load(Ordering::Relaxed), got_callee.load(Ordering::Relaxed))
}

/// The callee's SIPp: `uas.xml` with RTP echo on port 6000.
fn callee(net: &Net, v6: bool, port: u16) -> std::process::Command {
    let mut c = net.sipp(v6, "uas.xml", port, "uas", &[]);
    c.args(["-mi", if v6 { H6 } else { H4 }, "-mp", "6000", "-rtp_echo"]);
    c
}

/// The caller's SIPp: `uac.xml` calling `ruri` through `via`.
fn caller(net: &Net, v6: bool, port: u16, ruri: &str, via: &str) -> std::process::Command {
    let mut c = net.sipp(v6, "uac.xml", port, "uac", &[("ruri", ruri)]);
    c.args(["-mi", if v6 { H6 } else { H4 }, "-mp", "7000"]);
    c.arg(via);
    c
}

#[test]
fn v6_caller_through_kamailio_to_v4() {
    let mut net = Net::start();
    let uas = callee(&net, false, 5070);
    let uac = caller(&net, true, 5060, "sip:ua4@ipv4.test", &format!("[{GW6}]:5060"));
    let (echo, rtp) = call_with_media(&net, uac, uas, false, 5070);
    eprintln!("RTP from the relay: {rtp} at the IPv4 callee, {echo} echoed back to the IPv6 caller");

    // The callee saw the ALG's IPv4 side: media, Contact, Record-Route.
    let uas_in = received_in(&net.dir.join("uas-messages.log"));
    let invite = uas_in.iter().find(|m| m.starts_with("INVITE")).expect("the callee got the INVITE");
    assert_eq!(sdp_c_line(invite).as_deref(), Some(format!("c=IN IP4 {GW4}").as_str()), "{invite}");
    let contact = header(invite, "Contact").unwrap();
    assert!(contact.contains(&format!("@{GW4}:5060")), "the caller's Contact is at the ALG's IPv4 side: {invite}");
    let body = invite.split_once("\n\n").or_else(|| invite.split_once("\r\n\r\n")).map_or("", |x| x.1);
    assert!(!body.contains("IP6") && !body.contains(H6), "no IPv6 address in the IPv4 callee's SDP: {invite}");
    // The caller saw the IPv6 side.
    let uac_in = received_in(&net.dir.join("uac-messages.log"));
    let ok = uac_in
        .iter()
        .find(|m| m.starts_with("SIP/2.0 200") && m.contains("INVITE"))
        .expect("the caller got the 200 OK");
    assert_eq!(sdp_c_line(ok).as_deref(), Some(format!("c=IN IP6 {GW6}").as_str()), "{ok}");
    assert!(header(ok, "Contact").unwrap().contains(&format!("@[{GW6}]:5060")), "{ok}");
    let rr = ok.lines().filter(|l| l.starts_with("Record-Route")).collect::<Vec<_>>().join(", ");
    assert!(
        rr.contains(&format!("[{GW6}]")) && rr.contains(GW4) && rr.contains(H4),
        "ALG both sides and Kamailio: {rr}"
    );
    // 3 s of RTP at 50 packets/s each way.
    assert!(rtp >= 50, "RTP from the IPv6 caller did not reach the IPv4 callee ({rtp}){}", net.diag());
    assert!(echo >= 50, "the IPv4 callee's RTP did not reach the IPv6 caller ({echo}){}", net.diag());
    assert_eq!(net.metric("v6gate_alg_calls_total{result=\"answered\"}"), 1);
    assert!(net.metric("v6gate_alg_requests_total{method=\"INVITE\"}") >= 1);
    assert!(net.metric("v6gate_trgw_relayed_packets_total{kind=\"rtp\"}") >= 100);
    net.assert_tables_empty(Duration::from_secs(20));
    assert!(net.kamailio_alive(), "kamailio died{}", net.diag());
}

#[test]
fn v4_caller_to_v6() {
    let net = Net::start();
    let uas = callee(&net, true, 5060);
    let uac = caller(&net, false, 5080, &format!("sip:ua6@[{H6}]:5060"), &format!("{GW4}:5060"));
    let (echo, rtp) = call_with_media(&net, uac, uas, true, 5060);
    eprintln!("RTP from the relay: {rtp} at the IPv6 callee, {echo} echoed back to the IPv4 caller");
    let uas_in = received_in(&net.dir.join("uas-messages.log"));
    let invite = uas_in.iter().find(|m| m.starts_with("INVITE")).expect("the callee got the INVITE");
    assert_eq!(sdp_c_line(invite).as_deref(), Some(format!("c=IN IP6 {GW6}").as_str()), "{invite}");
    let uac_in = received_in(&net.dir.join("uac-messages.log"));
    let ok = uac_in.iter().find(|m| m.starts_with("SIP/2.0 200") && m.contains("INVITE")).expect("200 OK");
    assert_eq!(sdp_c_line(ok).as_deref(), Some(format!("c=IN IP4 {GW4}").as_str()), "{ok}");
    assert!(header(ok, "Contact").unwrap().contains(&format!("@{GW4}:5060")), "{ok}");
    assert!(rtp >= 50 && echo >= 50, "RTP both ways: {rtp} / {echo}{}", net.diag());
    net.assert_tables_empty(Duration::from_secs(20));
}

#[test]
fn cancel_while_ringing() {
    let net = Net::start();
    let mut uas = net.sipp(false, "uas_cancel.xml", 5070, "uas", &[]);
    uas.args(["-mi", H4]);
    let mut uac = net.sipp(true, "uac_cancel.xml", 5060, "uac", &[("ruri", "sip:ua4@ipv4.test")]);
    uac.arg(format!("[{GW6}]:5060"));
    let mut uas = spawn("sipp uas", uas, &net.dir.join("uas.log"));
    wait_udp_listen(&net.lab.h4, 5070, 1, &uas);
    let mut uac = spawn("sipp uac", uac, &net.dir.join("uac.log"));
    // While it rings, the offer holds media in the TrGW.
    let t0 = Instant::now();
    while net.status()["trgw"]["calls"].as_u64() != Some(1) {
        assert!(
            t0.elapsed() < Duration::from_secs(10) && uac.running(),
            "no media allocated for the offer{}",
            net.diag()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(uac.wait_exit(Duration::from_secs(30)).unwrap(), "the SIPp caller failed{}", net.diag());
    assert!(uas.wait_exit(Duration::from_secs(10)).unwrap(), "the SIPp callee failed{}", net.diag());
    assert_eq!(net.metric("v6gate_alg_calls_total{result=\"cancelled\"}"), 1);
    assert_eq!(net.metric("v6gate_alg_requests_total{method=\"CANCEL\"}"), 1);
    net.assert_tables_empty(Duration::from_secs(45));
}

#[test]
fn busy_callee() {
    let net = Net::start();
    let mut uas = net.sipp(false, "uas_busy.xml", 5070, "uas", &[]);
    uas.args(["-mi", H4]);
    let mut uac = net.sipp(true, "uac_busy.xml", 5060, "uac", &[("ruri", "sip:ua4@ipv4.test")]);
    uac.arg(format!("[{GW6}]:5060"));
    let mut uas = spawn("sipp uas", uas, &net.dir.join("uas.log"));
    wait_udp_listen(&net.lab.h4, 5070, 1, &uas);
    let mut uac = spawn("sipp uac", uac, &net.dir.join("uac.log"));
    assert!(uac.wait_exit(Duration::from_secs(30)).unwrap(), "the SIPp caller failed{}", net.diag());
    assert!(uas.wait_exit(Duration::from_secs(10)).unwrap(), "the SIPp callee failed{}", net.diag());
    let uac_in = received_in(&net.dir.join("uac-messages.log"));
    assert!(uac_in.iter().any(|m| m.starts_with("SIP/2.0 486")), "the caller got the 486");
    assert_eq!(net.metric("v6gate_alg_calls_total{result=\"failed\"}"), 1);
    assert!(net.metric("v6gate_trgw_calls_total{event=\"deleted\"}") >= 1, "the offer's media was released");
    net.assert_tables_empty(Duration::from_secs(45));
}

#[test]
fn register_then_call_from_v4() {
    let net = Net::start();
    // The UE registers ue6@ipv4.test with the IPv4 registrar through the ALG.
    let mut reg =
        net.sipp(true, "register.xml", 5062, "reg", &[("aor", "sip:ue6@ipv4.test"), ("registrar", "sip:ipv4.test")]);
    reg.arg(format!("[{GW6}]:5060"));
    let mut reg = spawn("sipp register", reg, &net.dir.join("reg.log"));
    assert!(
        reg.wait_exit(Duration::from_secs(20)).unwrap(),
        "REGISTER failed{}",
        net.dir.tails(&["reg-errors.log", "kamailio.log"])
    );
    let ok = received_in(&net.dir.join("reg-messages.log")).into_iter().find(|m| m.starts_with("SIP/2.0 200")).unwrap();
    assert!(
        header(&ok, "Contact").unwrap().contains(&format!("sip:ue6@[{H6}]:5062")),
        "the UE finds its own Contact in the 200: {ok}"
    );
    // An IPv4 SIPp calls it through Kamailio, which routes by the Path.
    let mut uas = net.sipp(true, "uas.xml", 5062, "uas", &[]);
    uas.args(["-mi", H6, "-mp", "6000", "-rtp_echo"]);
    let uac = caller(&net, false, 5080, "sip:ue6@ipv4.test", &format!("{H4}:{KAM_PORT}"));
    let (echo, rtp) = call_with_media(&net, uac, uas, true, 5062);
    let invite = received_in(&net.dir.join("uas-messages.log")).into_iter().find(|m| m.starts_with("INVITE")).unwrap();
    assert!(
        invite.starts_with(&format!("INVITE sip:ue6@[{H6}]:5062 SIP/2.0")),
        "the registered UE gets the call at its own Contact: {invite}"
    );
    assert_eq!(sdp_c_line(&invite).as_deref(), Some(format!("c=IN IP6 {GW6}").as_str()), "{invite}");
    assert!(rtp >= 50 && echo >= 50, "RTP both ways: {rtp} / {echo}{}", net.diag());
    assert!(net.metric("v6gate_alg_requests_total{method=\"REGISTER\"}") >= 1);
    net.assert_tables_empty(Duration::from_secs(20));
}

/// An RTP packet with a one-byte tag in its payload.
fn rtp(seq: u16, tag: u8) -> Vec<u8> {
    let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 0, 0x56, 0x36, 0x47, 0x42];
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[tag; 160]);
    p
}

/// Sends `n` tagged packets from `from` to `to`, 20 ms apart, and counts
/// the echoes with the same tag arriving at `from` (and anything arriving
/// at `other`).
fn talk(from: &UdpSocket, to: SocketAddr, n: u16, tag: u8, other: &UdpSocket) -> (u32, u32) {
    from.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    other.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    let (mut mine, mut stray) = (0, 0);
    let mut b = [0u8; 512];
    for seq in 0..n + 10 {
        if seq < n {
            from.send_to(&rtp(seq, tag), to).unwrap();
        }
        let end = Instant::now() + Duration::from_millis(20);
        while Instant::now() < end {
            if let Ok(k) = from.recv(&mut b) {
                if k == 172 && b[12] == tag {
                    mine += 1;
                }
            }
            if other.recv(&mut b).is_ok() {
                stray += 1;
            }
        }
    }
    (mine, stray)
}

#[test]
fn handover_by_reinvite() {
    use wire::*;
    let net = Net::start();
    net.lab.h6.ip(&["addr", "add", &format!("{H6_MOVED}/64"), "dev", "a6", "nodad"]).unwrap();
    let mut uas = net.sipp(false, "uas.xml", 5070, "uas", &[]);
    uas.args(["-mi", H4, "-mp", "6000", "-rtp_echo"]);
    let mut uas = spawn("sipp uas", uas, &net.dir.join("uas.log"));
    wait_udp_listen(&net.lab.h4, 5070, 1, &uas);
    let alg6: SocketAddr = format!("[{GW6}]:5060").parse().unwrap();
    let bind = |a: &str, p: u16| {
        let addr: SocketAddr = SocketAddr::new(ip(a), p);
        daemon_util::in_ns(&net.lab.h6, || UdpSocket::bind(addr).unwrap())
    };
    let (sip_old, sip_new) = (bind(H6, 5064), bind(H6_MOVED, 5064));
    let (rtp_old, rtp_new) = (bind(H6, 40000), bind(H6_MOVED, 40000));

    // The call, from the old address.
    let dialog = "From: <sip:ue@ipv6.test>;tag=ue1\r\nCall-ID: handover-1\r\n";
    let inv = msg(
        &format!(
            "INVITE sip:ua4@ipv4.test SIP/2.0\r\nVia: SIP/2.0/UDP [{H6}]:5064;branch=z9hG4bK-h1\r\nMax-Forwards: 70\r\n\
             {dialog}To: <sip:ua4@ipv4.test>\r\nCSeq: 1 INVITE\r\nContact: <sip:ue@[{H6}]:5064>\r\n"
        ),
        &sdp(H6, 40000),
    );
    sip_old.send_to(&inv, alg6).unwrap();
    let mut ok = recv_sip(&sip_old);
    while ok.starts_with(b"SIP/2.0 18") {
        ok = recv_sip(&sip_old);
    }
    assert!(ok.starts_with(b"SIP/2.0 200"), "{}", String::from_utf8_lossy(&ok));
    let (c, relay_port) = media_of(&ok);
    assert_eq!(c, GW6);
    let relay: SocketAddr = SocketAddr::new(ip(GW6), relay_port);
    let to_tag = alg::msg::Message::parse_datagram(&ok).unwrap().to_tag().unwrap().to_string();
    let target = addrs(&ok, Name::Contact)[0].clone();
    let mut rr = addrs(&ok, Name::RecordRoute);
    rr.reverse();
    let routes: String = rr.iter().map(|r| format!("Route: <{r}>\r\n")).collect();
    let in_dialog = |method: &str, cseq: u32, host: &str, branch: &str, body: &str| {
        let contact = if method == "INVITE" { format!("Contact: <sip:ue@[{host}]:5064>\r\n") } else { String::new() };
        msg(
            &format!(
                "{method} {target} SIP/2.0\r\nVia: SIP/2.0/UDP [{host}]:5064;branch={branch}\r\nMax-Forwards: 70\r\n\
                 {routes}{dialog}To: <sip:ua4@ipv4.test>;tag={to_tag}\r\nCSeq: {cseq} {method}\r\n{contact}"
            ),
            body,
        )
    };
    sip_old.send_to(&in_dialog("ACK", 1, H6, "z9hG4bK-h2", ""), alg6).unwrap();

    // Media from the old address is echoed back to it.
    let (echo_old, stray) = talk(&rtp_old, relay, 50, 1, &rtp_new);
    assert!(echo_old >= 40, "media before the handover: {echo_old} of 50 echoed{}", net.diag());
    assert_eq!(stray, 0);

    // The UE moves: re-INVITE from the new address with the new media address.
    sip_new.send_to(&in_dialog("INVITE", 2, H6_MOVED, "z9hG4bK-h3", &sdp(H6_MOVED, 40000)), alg6).unwrap();
    let ok2 = recv_sip(&sip_new);
    assert!(ok2.starts_with(b"SIP/2.0 200"), "{}", String::from_utf8_lossy(&ok2));
    let (c2, port2) = media_of(&ok2);
    assert_eq!((c2.as_str(), port2), (GW6, relay_port), "the UE keeps its relay address and port");
    sip_new.send_to(&in_dialog("ACK", 2, H6_MOVED, "z9hG4bK-h4", ""), alg6).unwrap();
    let (echo_new, to_old) = talk(&rtp_new, relay, 50, 2, &rtp_old);
    assert!(echo_new >= 40, "media after the handover: {echo_new} of 50 echoed to the new address{}", net.diag());
    assert_eq!(to_old, 0, "nothing is sent to the old address after the handover");
    // The old address is no longer relayed.
    let (echo_late, to_new) = talk(&rtp_old, relay, 20, 3, &rtp_new);
    assert_eq!((echo_late, to_new), (0, 0), "media from the old address is not relayed");
    // Dropped by the relay: the leg is latched to the new address.
    assert!(net.metric("v6gate_trgw_dropped_packets_total{reason=\"stream\"}") >= 20);
    assert_eq!(net.metric("v6gate_alg_handovers_total"), 1);

    sip_new.send_to(&in_dialog("BYE", 3, H6_MOVED, "z9hG4bK-h5", ""), alg6).unwrap();
    let bye_ok = recv_sip(&sip_new);
    assert!(bye_ok.starts_with(b"SIP/2.0 200"), "{}", String::from_utf8_lossy(&bye_ok));
    assert!(uas.wait_exit(Duration::from_secs(10)).unwrap(), "the SIPp callee failed{}", net.diag());
    net.assert_tables_empty(Duration::from_secs(20));
}

#[test]
fn reload_applies_routes_and_refuses_listener_changes() {
    let lab = Lab::start(&config());
    assert_eq!(lab.status()["alg"]["routes"], 1);
    // A second domain route: applied to the running ALG.
    let two = config().replace(
        "[[alg.route]]",
        &format!("[[alg.route]]\ndomain = \"other.test\"\nnext-hop = \"{H4}:5099\"\n\n[[alg.route]]"),
    );
    lab.write_config(&two);
    lab.sighup();
    let t0 = Instant::now();
    while lab.status()["reloads"]["ok"] != 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "reload not applied: {}", lab.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(lab.status()["alg"]["routes"], 2);
    // A new SIP port needs a restart: refused, the old configuration stays.
    lab.write_config(&two.replace(&format!("{GW4}:5060"), &format!("{GW4}:5070")));
    lab.sighup();
    while lab.status()["reloads"]["error"] != 1 {
        assert!(t0.elapsed() < Duration::from_secs(20), "reload not refused: {}", lab.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = lab.status();
    assert!(s["reloads"]["last_error"].as_str().unwrap().contains("[alg] listen-v4 changed"), "{s}");
    assert_eq!(s["alg"]["listen_v4"], format!("{GW4}:5060"));
    assert_eq!(s["functions"], serde_json::json!(["trgw", "alg"]));
}

/// `v6gate bench sip --quick` end to end, without the rate search: the
/// direct IPv6 call and v6gate (this build's binary) measured — setup
/// times from SIPp's logs, the RTP delay of the bench's probe calls both
/// ways, the handover — the reports written, and no namespace left.
#[test]
fn bench_sip_quick_smoke() {
    use clap::Parser as _;
    need("sipp");
    let out = TestDir::new("v6gate-bench-sip");
    // A search bounded at 300 calls/s: the direct call (SIPp's ceiling)
    // and the gateway up to it, on fresh ports per trial.
    let a = bench::sip::Args::parse_from([
        "x",
        "--quick",
        "--max-rate",
        "300",
        "--paths",
        "native-v6,v6gate",
        "--v6gate-bin",
        env!("CARGO_BIN_EXE_v6gate"),
        "--out",
        out.0.to_str().unwrap(),
    ]);
    let r = bench::sip::run(&a).unwrap();
    assert_eq!(r.paths.len(), 2);
    for p in &r.paths {
        assert!(p.errors.is_empty(), "{}: {:?}", p.name, p.errors);
        let s = p.setup.as_ref().unwrap();
        assert_eq!((s.calls, s.measured), (20, 20), "{}", p.name);
        let d = p.rtp.as_ref().unwrap();
        assert_eq!((d.calls, d.set_up), (3, 3), "{}", p.name);
        // 3 calls of 2 s, a packet every 20 ms each way.
        assert_eq!((d.sent_forward, d.sent_back), (300, 300), "{}", p.name);
        assert!(d.received_forward > 0 && d.received_back > 0, "{}: {d:?}", p.name);
        assert!(d.lost() * 10 <= 600, "{}: the probes' media flows: {d:?}", p.name);
        assert_eq!(d.delay.samples, d.received_forward + d.received_back);
        assert_eq!((d.forward.samples, d.back.samples), (d.received_forward, d.received_back));
        let l = d.delay;
        assert!(0 < l.min_ns && l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns, "{l:?}");
        let s = p.search.as_ref().expect("searched");
        assert!(s.max_cps > 0 && s.max_cps <= 300 && !s.trials.is_empty(), "{}: {s:?}", p.name);
        for t in &s.trials {
            assert!(t.sipp_cpu.is_some() && t.invite_rate.is_some(), "{}: SIPp's pacing and CPU kept: {t:?}", p.name);
            assert!(!(t.passed && t.tester_bound.is_some()), "{}: a tester-bound trial never passes: {t:?}", p.name);
        }
    }
    let h = r.paths[1].handover.as_ref().expect("the handover through v6gate");
    assert!(h.echoed_old > 0 && h.echoed_new > 0, "{h:?}");
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("## Table I: call setup time and RTP one-way delay, ms"), "{md}");
    assert!(md.contains("| v6gate ALG+TrGW | ") && md.contains("| 3/3 |"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["paths"][1]["rtp"]["set_up"], 3);
    for f in ["setup-native-v6.svg", "setup-v6gate.svg"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let ns = lab::netns::run("ip", &["netns", "list"]).unwrap();
    let prefix = format!("v6gate-bs-{}-", std::process::id());
    assert!(!String::from_utf8_lossy(&ns.stdout).contains(&prefix), "the bench's namespaces are removed");
}
