//! Interop: Kamailio (rtpengine module, ng protocol) drives the media relay
//! while SIPp places a call from an IPv6 UA to an IPv4 UA through it.
//!
//! ```text
//!  ua6 (IPv6 only)             gw                            ua4 (IPv4 only)
//!  SIPp UAC  ---------  Kamailio [::1]:5060 / .1:5060  ---------  SIPp UAS (-rtp_echo)
//!  2001:db8:16::2       relay (v6gate trgw or rtpengine)          10.0.16.2
//!                       ng on 127.0.0.1:2223
//! ```
//!
//! Asserted: the call completes (SIPp exit status 0 on both sides); the SDP
//! each UA receives carries the relay's address of its own family; RTP
//! arrives at both UAs from the relay (raw-socket counters in each UA
//! namespace: the UAC's stream reaches the UAS, whose echo comes back); the
//! relay lists the call during the call and no longer after the BYE.
//!
//! The same test runs against rtpengine (the reference the ng protocol
//! comes from), so a failure against v6gate is v6gate's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench::harness::guard::Proc;
use bench::ng::{self, Value};
use lab::gateconf;
use lab::netns::{self, in_netns, Netns};

mod sip_util;
use sip_util::*;

const UA6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x16, 0, 0, 0, 0, 2);
const GW6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x16, 0, 0, 0, 0, 1);
const UA4: Ipv4Addr = Ipv4Addr::new(10, 0, 16, 2);
const GW4: Ipv4Addr = Ipv4Addr::new(10, 0, 16, 1);
const NG: &str = "127.0.0.1:2223";
const MPATH: &str = KAMAILIO_MODULES;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trgw")
}

/// Which relay Kamailio drives, and how.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Relay {
    /// `v6gate trgw` through Kamailio's rtpengine module (ng protocol).
    V6gate,
    /// `v6gate trgw` through Kamailio's rtpproxy module (bridging e/i).
    V6gateRtpproxy,
    /// rtpengine itself through the rtpengine module: the reference.
    Rtpengine,
}

const RTPPROXY: &str = "127.0.0.1:22222";

impl Relay {
    /// Kamailio's module, its socket and its offer/answer/delete calls.
    fn kamailio_media(self) -> [(&'static str, String); 4] {
        const FLAGS: &str = "replace-origin replace-session-connection ICE=remove";
        match self {
            Relay::V6gate | Relay::Rtpengine => [
                (
                    "@MEDIA_MODULE@",
                    format!("loadmodule \"rtpengine.so\"\nmodparam(\"rtpengine\", \"rtpengine_sock\", \"udp:{NG}\")"),
                ),
                ("@OFFER@", format!("rtpengine_offer(\"address-family=IP4 {FLAGS}\")")),
                ("@ANSWER@", format!("rtpengine_answer(\"address-family=IP6 {FLAGS}\")")),
                ("@DELETE@", "rtpengine_delete()".into()),
            ],
            // The offer comes from the external (IPv6) side and goes to the
            // internal (IPv4) one; the answer the other way round.
            Relay::V6gateRtpproxy => [
                (
                    "@MEDIA_MODULE@",
                    format!(
                        "loadmodule \"rtpproxy.so\"\nmodparam(\"rtpproxy\", \"rtpproxy_sock\", \"udp:{RTPPROXY}\")"
                    ),
                ),
                ("@OFFER@", "rtpproxy_offer(\"ei\")".into()),
                ("@ANSWER@", "rtpproxy_answer(\"ie\")".into()),
                ("@DELETE@", "unforce_rtp_proxy()".into()),
            ],
        }
    }
}

fn start_relay(relay: Relay, gw: &Netns, dir: &TestDir) -> Proc {
    let log = dir.join("relay.log");
    match relay {
        Relay::V6gate | Relay::V6gateRtpproxy => {
            let cfg = dir.join("trgw.toml");
            let text = if relay == Relay::V6gate {
                bench::trgw::v6gate_config(GW4, GW6, (30000, 30999), 1).unwrap()
            } else {
                // rtpproxy bridging needs one interface per realm.
                let iface = |name: &str, ipv4, ipv6| gateconf::TrgwInterface { name: name.into(), ipv4, ipv6 };
                gateconf::V6gate {
                    trgw: Some(gateconf::Trgw {
                        ng: Some(NG.into()),
                        rtpproxy_udp: Some(RTPPROXY.into()),
                        rtpproxy_external: Some("v6".into()),
                        rtpproxy_internal: Some("v4".into()),
                        port_min: 30000,
                        port_max: 30999,
                        workers: Some(1),
                        sockets: None,
                        interface: vec![iface("v6", None, Some(GW6)), iface("v4", Some(GW4), None)],
                    }),
                    ..Default::default()
                }
                .render()
                .unwrap()
            };
            std::fs::write(&cfg, text).unwrap();
            let mut c = gw.command(env!("CARGO_BIN_EXE_v6gate"));
            c.arg("run").arg("--config").arg(&cfg);
            spawn("v6gate trgw", c, &log)
        }
        Relay::Rtpengine => {
            let mut c = gw.command("rtpengine");
            c.args(bench::trgw::rtpengine_args(NG, GW4, GW6, (30000, 30999), None, 6));
            spawn("rtpengine", c, &log)
        }
    }
}

fn ng_client(gw: &Netns) -> ng::Client {
    let server: SocketAddr = NG.parse().unwrap();
    in_netns(gw, || ng::Client::connect(server)).unwrap()
}

fn listed_calls(c: &mut ng::Client) -> Vec<String> {
    let r = c.request(&ng::dict([("command", Value::str("list")), ("limit", Value::Int(100))])).expect("ng list");
    match r.get("calls") {
        Some(Value::List(l)) => l.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
        other => panic!("ng list reply without a calls list: {other:?} in {r:?}"),
    }
}

/// The logs a failure message shows.
fn diagnostics(dir: &TestDir) -> String {
    dir.tails(&["kamailio.log", "relay.log", "uac-errors.log", "uas-errors.log", "uac.log", "uas.log"])
}

/// The test calling it has checked for root, kamailio, sipp (and
/// rtpengine for [`Relay::Rtpengine`]).
fn call_through(relay: Relay) {
    let dir = TestDir::new("v6gate-kamailio");
    let ua6 = Netns::unique("v6k-ua6").unwrap();
    let gw = Netns::unique("v6k-gw").unwrap();
    let ua4 = Netns::unique("v6k-ua4").unwrap();
    for ns in [&ua6, &gw, &ua4] {
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
    }
    // Interface names unique per test run and per test in this process.
    static N: AtomicU64 = AtomicU64::new(0);
    let id = (std::process::id() % 10_000) * 10 + N.fetch_add(1, Ordering::Relaxed) as u32 % 10;
    let (a6, b6, a4, b4) = (format!("k{id}a6"), format!("k{id}b6"), format!("k{id}a4"), format!("k{id}b4"));
    netns::veth(&ua6, &a6, &gw, &b6).unwrap();
    netns::veth(&ua4, &a4, &gw, &b4).unwrap();
    ua6.ip(&["-6", "addr", "add", &format!("{UA6}/64"), "dev", &a6, "nodad"]).unwrap();
    gw.ip(&["-6", "addr", "add", &format!("{GW6}/64"), "dev", &b6, "nodad"]).unwrap();
    ua4.ip(&["addr", "add", &format!("{UA4}/24"), "dev", &a4]).unwrap();
    gw.ip(&["addr", "add", &format!("{GW4}/24"), "dev", &b4]).unwrap();
    ua4.sysctl("net.ipv6.conf.all.disable_ipv6", "1").unwrap();

    // The relay, answering ng.
    let mut relay_p = start_relay(relay, &gw, &dir);
    let mut ngc = ng_client(&gw);
    ngc.timeout = Duration::from_millis(200);
    let end = Instant::now() + Duration::from_secs(10);
    while ngc.ping().is_err() {
        assert!(relay_p.running() && Instant::now() < end, "relay does not answer ng ping:\n{}", relay_p.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    ngc.timeout = Duration::from_secs(2);

    // Kamailio between the realms.
    let mut cfg = std::fs::read_to_string(fixtures().join("kamailio.cfg")).unwrap();
    for (k, v) in relay.kamailio_media() {
        cfg = cfg.replace(k, &v);
    }
    let cfg = cfg
        .replace("@GW6@", &GW6.to_string())
        .replace("@GW4@", &GW4.to_string())
        .replace("@UA4@", &UA4.to_string())
        .replace("@MPATH@", MPATH);
    let cfg_path = dir.join("kamailio.cfg");
    std::fs::write(&cfg_path, cfg).unwrap();
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let mut k = gw.command("kamailio");
    k.arg("-f")
        .arg(&cfg_path)
        .args(["-DD", "-E", "-m", "64", "-M", "8"])
        .arg("-Y")
        .arg(&run)
        .arg("-P")
        .arg(run.join("k.pid"));
    let mut kam = spawn("kamailio", k, &dir.join("kamailio.log"));
    wait_udp_listen(&gw, 5060, 2, &kam);

    // Sniffers: RTP from the relay reaching each UA.
    let (got6, got4, stop) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    std::thread::scope(|sc| {
        // Stops the sniffers however this scope ends (a failed assertion
        // must not leave the scope waiting for them).
        let _stop_guard = StopOnDrop(&stop);
        sc.spawn(|| sniff(&ua6, IpAddr::V6(GW6), &got6, &stop));
        sc.spawn(|| sniff(&ua4, IpAddr::V4(GW4), &got4, &stop));

        // SIPp UAS in ua4, echoing RTP.
        let mut c = ua4.command("sipp");
        c.arg("-sf").arg(fixtures().join("uas.xml")).args([
            "-i",
            &UA4.to_string(),
            "-p",
            "5060",
            "-t",
            "u1",
            "-mi",
            &UA4.to_string(),
            "-mp",
            "6000",
            "-rtp_echo",
            "-m",
            "1",
            "-nostdin",
            "-timeout",
            "40s",
            "-timeout_error",
            "-trace_msg",
            "-message_file",
        ]);
        c.arg(dir.join("uas-messages.log")).arg("-trace_err").arg("-error_file").arg(dir.join("uas-errors.log"));
        let mut uas = spawn("sipp uas", c, &dir.join("uas.log"));
        wait_udp_listen(&ua4, 5060, 1, &uas);

        // SIPp UAC in ua6: 4 s of PCMU (a silence file, looped) then BYE.
        let audio = dir.join("silence.pcmu");
        std::fs::write(&audio, vec![0xffu8; 8000]).unwrap();
        let scenario = dir.join("uac.xml");
        let xml = std::fs::read_to_string(fixtures().join("uac.xml")).unwrap();
        std::fs::write(&scenario, xml.replace("@AUDIO@", &audio.display().to_string())).unwrap();
        let mut c = ua6.command("sipp");
        c.arg("-sf").arg(&scenario).args([
            "-i",
            &UA6.to_string(),
            "-p",
            "5060",
            "-t",
            "u1",
            "-mi",
            &UA6.to_string(),
            "-key",
            "ua6",
            &UA6.to_string(),
            "-key",
            "ua6uri",
            &format!("[{UA6}]"),
            "-s",
            "echo",
            "-m",
            "1",
            "-l",
            "1",
            "-nostdin",
            "-timeout",
            "30s",
            "-timeout_error",
            "-trace_msg",
            "-message_file",
        ]);
        c.arg(dir.join("uac-messages.log")).arg("-trace_err").arg("-error_file").arg(dir.join("uac-errors.log"));
        c.arg(format!("[{GW6}]:5060"));
        let mut uac = spawn("sipp uac", c, &dir.join("uac.log"));

        // The relay lists the call while it is up.
        let end = Instant::now() + Duration::from_secs(15);
        let calls = loop {
            let calls = listed_calls(&mut ngc);
            if !calls.is_empty() {
                break calls;
            }
            assert!(
                uac.running() && Instant::now() < end,
                "the relay never listed a call.\nkamailio:\n{}\nuac:\n{}\nrelay:\n{}",
                kam.log(),
                std::fs::read_to_string(dir.join("uac-errors.log")).unwrap_or_default(),
                relay_p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(calls.len(), 1, "one call expected: {calls:?}");
        std::thread::sleep(Duration::from_millis(1500));
        let q = ngc.request(&ng::dict([("command", Value::str("query")), ("call-id", Value::str(&calls[0]))]));
        match &q {
            Ok(v) => eprintln!("ng query during the call: totals {}", v.get("totals").unwrap_or(v).to_json()),
            Err(e) => eprintln!("ng query during the call failed: {e:#}"),
        }

        let uac_ok = uac.wait_exit(Duration::from_secs(30)).unwrap();
        let uas_ok = uas.wait_exit(Duration::from_secs(10)).unwrap();
        stop.store(true, Ordering::Relaxed);
        let diag = || diagnostics(&dir);
        assert!(uac_ok, "the SIPp UAC (IPv6) call failed{}", diag());
        assert!(uas_ok, "the SIPp UAS (IPv4) call failed{}", diag());

        // Each UA saw the relay's address of its own family in the SDP.
        let uas_msgs = received_messages(&std::fs::read_to_string(dir.join("uas-messages.log")).unwrap());
        let invite = uas_msgs.iter().find(|m| m.starts_with("INVITE")).expect("the UAS received an INVITE");
        assert_eq!(sdp_c_line(invite).as_deref(), Some(format!("c=IN IP4 {GW4}").as_str()), "{invite}");
        let uac_msgs = received_messages(&std::fs::read_to_string(dir.join("uac-messages.log")).unwrap());
        let ok = uac_msgs
            .iter()
            .find(|m| m.starts_with("SIP/2.0 200") && m.contains("CSeq: 1 INVITE"))
            .expect("the UAC received a 200 OK to its INVITE");
        assert_eq!(sdp_c_line(ok).as_deref(), Some(format!("c=IN IP6 {GW6}").as_str()), "{ok}");

        // RTP went both ways through the relay: 4 s at 50 packets/s.
        let (n6, n4) = (got6.load(Ordering::Relaxed), got4.load(Ordering::Relaxed));
        eprintln!("RTP from the relay: {n4} packets at the IPv4 UA, {n6} echoed back to the IPv6 UA");
        assert!(n4 >= 50, "RTP from the IPv6 UA did not reach the IPv4 UA through the relay ({n4} packets){}", diag());
        assert!(n6 >= 50, "the IPv4 UA's RTP did not reach the IPv6 UA through the relay ({n6} packets){}", diag());

        // The BYE deleted the relay's call.
        let end = Instant::now() + Duration::from_secs(3);
        loop {
            let left = listed_calls(&mut ngc);
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < end, "the relay still lists {left:?} after the BYE{}", diag());
            std::thread::sleep(Duration::from_millis(100));
        }
        let (relay_up, kam_up) = (relay_p.running(), kam.running());
        assert!(relay_up, "the relay died{}", diag());
        assert!(kam_up, "kamailio died{}", diag());
    });
    drop(kam);
    drop(relay_p);
}

/// The reference: the same call through rtpengine (userspace). Proves the
/// test itself (Kamailio config, SIPp scenarios, checks) is right.
#[test]
fn kamailio_call_v6_to_v4_through_rtpengine() {
    lab::need_root_and_programs!("kamailio", "sipp", "rtpengine");
    call_through(Relay::Rtpengine);
}

/// The product: Kamailio's rtpengine module drives `v6gate trgw`.
#[test]
fn kamailio_call_v6_to_v4_through_v6gate() {
    lab::need_root_and_programs!("kamailio", "sipp");
    call_through(Relay::V6gate);
}

/// Kamailio's rtpproxy module (rtpproxy protocol, bridging external IPv6
/// to internal IPv4) drives `v6gate trgw`.
#[test]
fn kamailio_rtpproxy_module_call_v6_to_v4_through_v6gate() {
    lab::need_root_and_programs!("kamailio", "sipp");
    call_through(Relay::V6gateRtpproxy);
}
