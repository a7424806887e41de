//! `v6gate translate` with a `[nat64]` table, driven through the built
//! binary as an external harness would: one stateful NAT64 across all
//! lines, its clock moved only by `@advance`, settings changed by `@set`
//! as a reload changes them (sessions kept), and in pcap mode a clock that
//! follows the capture. The NAT64 behaviours themselves are tested packet
//! by packet in `crates/nat64`.

mod cli_util;
#[path = "../crates/xlat/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::time::Duration;

use cli_util::run;
use common::{check, V4, V6};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use serde_json::Value;

const NAT64: &str = r#"
[nat64]
pool6 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
"#;

const H6: &str = "2001:db8::1";
/// 198.51.100.7 under pool6 (a network-specific prefix: the well-known
/// one carries global IPv4 addresses only, RFC 6052 §3.1).
const Y6: &str = "2001:db8:64::c633:6407";
const Y4: &str = "198.51.100.7";
const T4: &str = "203.0.113.1";

fn scratch(name: &str) -> std::path::PathBuf {
    cli_util::scratch("cli_translate_nat64", name)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// One output line: its packets (kind, bytes, each validated) and drop.
fn parse(line: &str) -> (Vec<(String, Vec<u8>)>, Value) {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let out = v["out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["kind"].as_str().unwrap().to_string(), unhex(o["hex"].as_str().unwrap())))
        .collect::<Vec<_>>();
    for (_, p) in &out {
        check(p);
    }
    (out, v["drop"].clone())
}

/// A UDP packet from H6 port `sport` to Y:53.
fn udp_out(sport: u16) -> String {
    hex(&V6::new(17, H6, Y6).udp(sport, 53, b"query"))
}

/// Y's UDP answer to pool4 port `t`.
fn udp_back(t: u16) -> String {
    hex(&V4::new(17, Y4, T4).udp(53, t, b"answer"))
}

/// A `v6gate translate` driven line by line (answers read as they come,
/// so later lines can use what earlier answers said).
struct Session {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    rx: std::sync::mpsc::Receiver<String>,
}

impl Session {
    fn start(args: &[&str]) -> Session {
        use std::io::BufRead;
        let mut child = cli_util::command(args).spawn().expect("spawn v6gate");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        Session { child, stdin, rx }
    }

    /// Send one line; its answer, parsed and validated.
    fn ask(&mut self, line: &str) -> (Vec<(String, Vec<u8>)>, Value, String) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let answer = self.rx.recv_timeout(Duration::from_secs(20)).expect("an answer for every line");
        let (out, drop) = parse(&answer);
        (out, drop, answer)
    }

    /// Close stdin; exit status and stderr.
    fn finish(self) -> (bool, String) {
        drop(self.stdin);
        let o = self.child.wait_with_output().unwrap();
        (o.status.success(), String::from_utf8(o.stderr).unwrap())
    }
}

/// The scripted scenario of issue #10: sessions made on one line are there
/// on the next; `@advance` expires them (and answers a held SYN with the
/// ICMP error expiry emits); `@set` changes a timeout for new sessions as
/// a reload does, keeping the ones there; a refused `@set` changes nothing
/// and the run goes on.
#[test]
fn stateful_nat64_across_lines_with_advance_and_set() {
    let dir = scratch("scenario");
    let cfg = dir.join("nat64.toml");
    std::fs::write(&cfg, NAT64).unwrap();
    let mut s = Session::start(&["translate", "--config", cfg.to_str().unwrap(), "--explain"]);

    // A session, and the answer through it on the next line.
    let (out, drop, _) = s.ask(&udp_out(40000));
    assert!(drop.is_null());
    assert_eq!(out[0].0, "forward");
    let t1 = be16(&out[0].1, 20);
    let (out, _, _) = s.ask(&udp_back(t1));
    assert_eq!(out[0].1[0] >> 4, 6);
    assert_eq!(be16(&out[0].1, 42), 40000, "through the session of the line before");

    // udp-timeout 300 s: alive at 299 s (the answer refreshes it) ...
    let (out, drop, line) = s.ask("@advance 299");
    assert!(out.is_empty() && drop.is_null(), "{line}");
    assert_eq!(s.ask(&udp_back(t1)).0[0].1[0] >> 4, 6);
    // ... gone 300 s after its last use: the answer is refused.
    assert_eq!(s.ask("@advance 300").2, r#"{"out":[],"drop":null}"#);
    let (out, _, line) = s.ask(&udp_back(t1));
    assert_eq!(out[0].0, "icmp-error", "{line}");
    assert_eq!((out[0].1[20], out[0].1[21]), (3, 3), "Port Unreachable");

    // A reload-like change: new sessions get 10 s.
    let (out, _) = (s.ask(&udp_out(40001)).0, ());
    let t2 = be16(&out[0].1, 20);
    assert_eq!(s.ask("@set nat64.udp-timeout 10s").2, r#"{"out":[],"drop":null}"#);
    let (out, _, _) = s.ask(&udp_out(40002));
    let t3 = be16(&out[0].1, 20);
    // A refused change: named, nothing changes, the run goes on.
    let (_, drop, line) = s.ask("@set udp-timeout 0");
    assert_eq!(drop, "bad-directive");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert!(v["error"].as_str().unwrap().starts_with("[nat64] udp-timeout: "), "{line}");
    s.ask("@advance 11");
    // The session made before @set kept its 300 s; the one after has 10 s.
    assert_eq!(be16(&s.ask(&udp_back(t2)).0[0].1, 42), 40001);
    assert_eq!(s.ask(&udp_back(t3)).0[0].0, "icmp-error");

    // An unsolicited SYN is held; TCP_INCOMING_SYN (6 s) later expiry
    // answers it with Port Unreachable, on the @advance line.
    let (out, drop, _) = s.ask(&hex(&V4::new(6, Y4, T4).tcp(80, 9999, 0x02, b"")));
    assert!(out.is_empty());
    assert_eq!(drop, "syn-held");
    assert!(s.ask("@advance 5").0.is_empty());
    let (out, drop, line) = s.ask("@advance 1");
    assert!(drop.is_null());
    assert_eq!(out.len(), 1, "{line}");
    assert_eq!(out[0].0, "icmp-error");
    assert_eq!((out[0].1[20], out[0].1[21]), (3, 3));
    assert_eq!(&out[0].1[16..20], &[198, 51, 100, 7]);
    // Bad directives are answered, and the run goes on.
    assert_eq!(s.ask("@advance soon").1, "bad-directive");
    assert_eq!(s.ask("@frobnicate").1, "bad-directive");
    assert_eq!(s.ask(&udp_out(40003)).0[0].0, "forward");

    let (ok, stderr) = s.finish();
    assert!(ok, "{stderr}");
    assert!(stderr.contains("3 directive line(s) refused"), "{stderr}");
    assert!(stderr.contains("expiry emitted 1 packet(s)"), "{stderr}");
}

/// `@set` keeps sessions (as a reload does); with both [siit] and [nat64]
/// each packet goes to the engine the daemon would pick.
#[test]
fn set_keeps_sessions_and_dispatch_follows_the_daemon() {
    let dir = scratch("keep");
    let cfg = dir.join("both.toml");
    std::fs::write(&cfg, format!("[siit]\npool6 = \"64:ff9b:1::/96\"\n{NAT64}")).unwrap();
    let mut s = Session::start(&["translate", "--config", cfg.to_str().unwrap()]);
    let t = be16(&s.ask(&udp_out(40000)).0[0].1, 20);
    assert!(s.ask("@set nat64.max-sessions 10").1.is_null());
    assert!(s.ask("@set siit.ipv4-mtu 1400").1.is_null());
    assert_eq!(be16(&s.ask(&udp_back(t)).0[0].1, 42), 40000, "the session survived two @set");
    // Both addresses under the [siit] pool6: stateless, SIIT's.
    let (out, _, _) = s.ask(&hex(&V6::new(17, "64:ff9b:1::c000:205", "64:ff9b:1::c633:6407").udp(1, 2, b"siit")));
    let p = &out[0].1;
    assert_eq!(p[0] >> 4, 4);
    assert_eq!(&p[16..20], &[198, 51, 100, 7], "SIIT took the packet of its own pool6");
    assert_eq!(be16(p, 20), 1, "SIIT keeps ports");
    assert!(s.finish().0);
}

fn pcap(packets: &[(Duration, Vec<u8>)]) -> Vec<u8> {
    let mut buf = Vec::new();
    let hdr = PcapHeader { datalink: DataLink::RAW, ..PcapHeader::default() };
    let mut w = PcapWriter::with_header(&mut buf, hdr).unwrap();
    for (ts, p) in packets {
        w.write_packet(&PcapPacket::new(*ts, p.len() as u32, p)).unwrap();
    }
    buf
}

/// Pcap mode: the clock follows the capture from its first packet. A TCP
/// connection opened at 1000 s (its port kept, RFC 5382) is answered at
/// 1100 s and used at 8100 s; 7440 s (TCP_EST) plus 240 s (TCP_TRANS)
/// after that it is gone, so a packet at 15800 s finds nothing. A SYN held
/// at 1000 s is answered with Port Unreachable when expiry runs, at the
/// 1100 s packet, stamped with its time and written before it.
#[test]
fn pcap_clock_follows_the_capture() {
    let dir = scratch("pcap");
    let cfg = dir.join("nat64.toml");
    std::fs::write(&cfg, NAT64).unwrap();
    let s = Duration::from_secs;
    let (inp, outp) = (dir.join("in.pcap"), dir.join("out.pcap"));
    let from_y = |flags: u8| V4::new(6, Y4, T4).tcp(80, 40000, flags, b"");
    std::fs::write(
        &inp,
        pcap(&[
            (s(1000), V6::new(6, H6, Y6).tcp(40000, 80, 0x02, b"")),
            (s(1000), V4::new(6, Y4, T4).tcp(81, 9999, 0x02, b"")),
            (s(1100), from_y(0x12)),
            (s(8100), from_y(0x10)),
            (s(15800), from_y(0x10)),
        ]),
    )
    .unwrap();
    let args = [
        "translate",
        "--config",
        cfg.to_str().unwrap(),
        "--pcap-in",
        inp.to_str().unwrap(),
        "--pcap-out",
        outp.to_str().unwrap(),
    ];
    let o = run(&args, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut r = PcapReader::new(std::fs::File::open(&outp).unwrap()).unwrap();
    let mut got = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        check(&p.data);
        got.push((p.timestamp, p.data.into_owned()));
    }
    assert_eq!(got.len(), 4, "SYN out, the held SYN's error, SYN-ACK back, ACK back; nothing at 15800 s");
    assert_eq!((got[0].0, got[0].1[0] >> 4, be16(&got[0].1, 20)), (s(1000), 4, 40000));
    assert_eq!(got[1].0, s(1100));
    assert_eq!((got[1].1[20], got[1].1[21]), (3, 3), "Port Unreachable for the held SYN");
    assert_eq!(be16(&got[1].1, 28 + 20 + 2), 9999, "about the held SYN");
    assert_eq!((got[2].0, got[2].1[0] >> 4, be16(&got[2].1, 42)), (s(1100), 6, 40000));
    assert_eq!((got[3].0, be16(&got[3].1, 42)), (s(8100), 40000));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("5 packets in, 4 packets out, 2 dropped"), "{err}");
}
