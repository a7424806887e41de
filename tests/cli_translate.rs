//! The `v6gate translate` / `v6gate config` contract, driven through the
//! built binary exactly as an external harness would.
//!
//! These tests check the contract (one JSON line per packet, key names,
//! error reporting, pcap framing) and that what comes out is the
//! translation, decoded independently with etherparse; the RFC 7915
//! behaviours themselves are tested packet by packet in `xlat`.

mod cli_util;

use cli_util::{run, BIN};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use serde_json::Value;
use xlat::DropReason;

/// A valid configuration. `ipv6-address` is explicit so the file does not
/// depend on address-mapping details.
const GOOD: &str = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:6::/120", "192.0.2.0/24"]]
ipv6-address = "64:ff9b:1::c000:8"
"#;

/// IPv4 UDP 198.51.100.7:40000 -> 192.0.2.1:53, valid checksums.
const V4_UDP: &str = "450000270101000040118d89c6336407c00002019c400035001330477636676174652064656d6f";
/// IPv6 UDP 2001:db8:6::1:53 -> 64:ff9b:1::c633:6407:40000, valid checksums.
const V6_UDP: &str = "600000000014114020010db80006000000000000000000010064ff9b0001000000000000c633640700359c400014c6fb763667617465207265706c79";

fn scratch(name: &str) -> PathBuf {
    cli_util::scratch("cli_translate", name)
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("v6gate.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("utf-8 output")
}

/// Check one output line against the contract; returns the drop reason.
fn check_line(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    let obj = v.as_object().unwrap_or_else(|| panic!("not an object: {line}"));
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["drop", "out"], "{line}");
    let out = obj["out"].as_array().unwrap_or_else(|| panic!("out is not an array: {line}"));
    for item in out {
        let hex = item["hex"].as_str().unwrap_or_else(|| panic!("out item without hex: {line}"));
        assert!(hex.len() % 2 == 0 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{hex}");
        if let Some(k) = item.get("kind") {
            assert!(matches!(k.as_str(), Some("forward" | "icmp-error")), "{line}");
        }
    }
    match &obj["drop"] {
        Value::Null => None,
        Value::String(r) => {
            assert!(out.is_empty(), "a drop with output: {line}");
            let known = r == "bad-hex" || r == "held" || DropReason::ALL.iter().any(|d| d.as_str() == r);
            assert!(known, "unknown drop reason {r}");
            Some(r.clone())
        }
        other => panic!("drop is {other}: {line}"),
    }
}

#[test]
fn hex_lines_in_json_lines_out() {
    let dir = scratch("hex_lines");
    let cfg = write_config(&dir, GOOD);
    let input = format!(
        "# comment\n\n   \t\n{V4_UDP}\n  {V6_UDP}  \r\n   # indented comment\nnot hex\n{}\n\n{}\n",
        &V4_UDP[..5],
        V4_UDP.to_uppercase()
    );
    let o = run(&["translate", "--config", cfg.to_str().unwrap()], &input);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "one line per non-blank, non-comment input line:\n{stdout}");
    let drops: Vec<Option<String>> = lines.iter().map(|l| check_line(l)).collect();
    assert_eq!(drops[2].as_deref(), Some("bad-hex"));
    assert_eq!(drops[3].as_deref(), Some("bad-hex"), "odd number of digits");
    assert_ne!(drops[4].as_deref(), Some("bad-hex"), "upper-case hex is hex");
    assert_ne!(drops[0].as_deref(), Some("bad-hex"));
    assert_eq!(lines[0], lines[4], "same packet, same answer");
    assert!(o.stderr.is_empty(), "stderr without --explain: {}", text(&o.stderr));

    // What came out is the translation: IPv4 → IPv6 through pool6/EAMT
    // and back, TTL/Hop Limit decremented, ports and payload kept, valid
    // checksums.
    let six = out_packets(lines[0]);
    assert_eq!(six.len(), 1);
    let p = etherparse::SlicedPacket::from_ip(&six[0]).expect("IPv6 packet");
    let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else { panic!("not IPv6: {}", lines[0]) };
    assert_eq!(ip.header().source_addr(), "64:ff9b:1::c633:6407".parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!(ip.header().destination_addr(), "2001:db8:6::1".parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!(ip.header().hop_limit(), 63);
    let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else { panic!("not UDP") };
    assert_eq!((u.source_port(), u.destination_port()), (40000, 53));
    assert_eq!(u.payload(), b"v6gate demo");
    let c = u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap();
    assert_eq!(u.checksum(), c, "UDP/IPv6 checksum");

    let four = out_packets(lines[1]);
    let p = etherparse::SlicedPacket::from_ip(&four[0]).expect("IPv4 packet");
    let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else { panic!("not IPv4: {}", lines[1]) };
    assert_eq!(ip.header().source_addr(), std::net::Ipv4Addr::new(192, 0, 2, 1));
    assert_eq!(ip.header().destination_addr(), std::net::Ipv4Addr::new(198, 51, 100, 7));
    assert_eq!(ip.header().ttl(), 63);
    let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else { panic!("not UDP") };
    assert_eq!((u.source_port(), u.destination_port(), u.payload()), (53, 40000, &b"v6gate reply"[..]));
    let c = u.to_header().calc_checksum_ipv4(&ip.header().to_header(), u.payload()).unwrap();
    assert_eq!(u.checksum(), c, "UDP/IPv4 checksum");
}

/// The packets of one JSON output line.
fn out_packets(line: &str) -> Vec<Vec<u8>> {
    let v: Value = serde_json::from_str(line).unwrap();
    v["out"].as_array().unwrap().iter().map(|o| unhex(o["hex"].as_str().unwrap())).collect()
}

#[test]
fn empty_input_gives_empty_output() {
    let dir = scratch("empty");
    let cfg = write_config(&dir, GOOD);
    let o = run(&["translate", "--config", cfg.to_str().unwrap()], "");
    assert!(o.status.success());
    assert!(o.stdout.is_empty());
}

#[test]
fn explain_goes_to_stderr() {
    let dir = scratch("explain");
    let cfg = write_config(&dir, GOOD);
    let o = run(&["translate", "--config", cfg.to_str().unwrap(), "--explain"], &format!("{V4_UDP}\nzz\n"));
    assert!(o.status.success());
    assert_eq!(text(&o.stdout).lines().count(), 2);
    let err = text(&o.stderr);
    assert!(err.contains("IPv4 198.51.100.7 > 192.0.2.1 UDP 40000 > 53"), "{err}");
    assert!(err.contains("not hex"), "{err}");
}

#[test]
fn answers_each_line_before_the_next_arrives() {
    let dir = scratch("interactive");
    let cfg = write_config(&dir, GOOD);
    let mut child = Command::new(BIN)
        .args(["translate", "--config", cfg.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    for pkt in [V4_UDP, "# comment: no answer", V6_UDP, "zz"] {
        writeln!(stdin, "{pkt}").unwrap();
        stdin.flush().unwrap();
        if pkt.starts_with('#') {
            continue;
        }
        let line = rx.recv_timeout(Duration::from_secs(20)).expect("no answer while stdin is still open");
        check_line(&line);
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert!(rx.recv_timeout(Duration::from_secs(5)).is_err(), "extra output");
}

#[test]
fn bad_config_names_the_key() {
    let dir = scratch("bad_config");
    let cases = [
        ("[siit]\npool6 = \"2001:db8::1/32\"\n", "[siit] pool6", "line 2"),
        ("[siit]\npool6 = \"64:ff9b:1::/96\"\npool7 = true\n", "[siit] pool7", "line 3"),
        ("[siit]\npool6 = \"64:ff9b:1::/96\"\nlowest-ipv6-mtu = \"big\"\n", "[siit] lowest-ipv6-mtu", "line 3"),
        ("[siit]\npool6 = \"64:ff9b:1::/96\"\nipv6-address = \"::8\"\nlowest-ipv6-mtu = 576\n", "lowest-ipv6-mtu", ""),
        ("[siit\npool6 = 1\n", "", "line 1"),
    ];
    for (i, (cfg_text, key, pos)) in cases.iter().enumerate() {
        let cfg = dir.join(format!("bad{i}.toml"));
        std::fs::write(&cfg, cfg_text).unwrap();
        let o = run(&["translate", "--config", cfg.to_str().unwrap()], &format!("{V4_UDP}\n"));
        assert_eq!(o.status.code(), Some(78), "EX_CONFIG: {cfg_text}");
        assert!(o.stdout.is_empty(), "no output on a bad config");
        let err = text(&o.stderr);
        assert!(err.contains(key) && err.contains(pos), "{cfg_text} -> {err}");
        assert!(err.contains(cfg.to_str().unwrap()), "names the file: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one-line error: {err}");
        assert!(!err.contains("panicked"), "{err}");

        // `config check` says it exactly as every other command does.
        let o = run(&["config", "check", "--config", cfg.to_str().unwrap()], "");
        assert_eq!(o.status.code(), Some(78));
        assert_eq!(text(&o.stderr), err, "config check prints the error like translate");
        assert!(err.starts_with("v6gate: config error in "), "{err}");
        assert!(o.stdout.is_empty());
    }
    let absent = dir.join("absent.toml");
    for cmd in [
        &["translate", "--config"][..],
        &["config", "check", "--config"],
        &["run", "--config"],
        &["trgw", "--config"],
        &["tunnel", "--config"],
        &["softwire", "--config"],
        &["trt", "--config"],
    ] {
        let mut args = cmd.to_vec();
        args.push(absent.to_str().unwrap());
        let o = run(&args, "");
        assert_eq!(o.status.code(), Some(78), "{args:?}: an unreadable configuration is EX_CONFIG");
        assert!(text(&o.stderr).contains("absent.toml"));
    }
    // `v6gate tunnel` (read before it needs root): a file without a tunnel
    // table, or with an unknown key in one, is EX_CONFIG too.
    let good = write_config(&dir, GOOD);
    let unknown = dir.join("tunnel_unknown.toml");
    std::fs::write(&unknown, "[sixtofour]\nbogus-key = 1\n").unwrap();
    for (cfg, says) in [(&good, "no [sixtofour]"), (&unknown, "bogus-key")] {
        let o = run(&["tunnel", "--config", cfg.to_str().unwrap()], "");
        assert_eq!(o.status.code(), Some(78), "tunnel with {}", cfg.display());
        let err = text(&o.stderr);
        assert!(err.starts_with("v6gate: config error in ") && err.contains(says), "{err}");
    }
    // `v6gate softwire` and `v6gate trt` likewise: no table of theirs, or
    // a bad key in one.
    let bad_sw = dir.join("softwire_bad.toml");
    std::fs::write(&bad_sw, "[lw4o6]\naftr-address = \"2001:db8::1\"\npsid-offset = 17\n").unwrap();
    let bad_trt = dir.join("trt_bad.toml");
    std::fs::write(&bad_trt, "[trt]\nprefix = \"64:ff9b::/96\"\nmax-connections = 0\n").unwrap();
    for (cmd, cfg, says) in [
        ("softwire", &good, "no [dslite], [lw4o6] or [b4]"),
        ("softwire", &bad_sw, "psid-offset"),
        ("trt", &good, "no [trt]"),
        ("trt", &bad_trt, "max-connections"),
    ] {
        let o = run(&[cmd, "--config", cfg.to_str().unwrap()], "");
        assert_eq!(o.status.code(), Some(78), "{cmd} with {}", cfg.display());
        let err = text(&o.stderr);
        assert!(err.starts_with("v6gate: config error in ") && err.contains(says), "{err}");
    }
    // Other errors keep status 1.
    let o = run(&["translate", "--config", good.to_str().unwrap(), "--pcap-in", "in.pcap"], "");
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn config_check_and_example() {
    let dir = scratch("config_check");
    let cfg = write_config(&dir, GOOD);
    let o = run(&["config", "check", "--config", cfg.to_str().unwrap()], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "ok\n");

    let o = run(&["config", "example"], "");
    assert!(o.status.success());
    let ex = text(&o.stdout);
    assert_eq!(ex, gate::config::example());
    for k in gate::config::SIIT_KEYS {
        assert!(ex.contains(&format!("{k} =")), "example lacks {k}");
    }
}

#[test]
fn completions_and_man_pages_from_the_cli() {
    let o = run(&["completions", "bash"], "");
    assert!(o.status.success());
    let bash = text(&o.stdout);
    assert!(bash.contains("_v6gate()") && bash.contains("complete "), "a bash completion function");
    for sub in ["translate", "run", "ctl", "config", "trgw", "lab", "bench", "completions", "manpages", "doctor"] {
        assert!(bash.contains(sub), "bash completion lacks {sub}");
    }
    let o = run(&["completions", "zsh"], "");
    assert!(text(&o.stdout).starts_with("#compdef v6gate"));
    let o = run(&["completions", "fish"], "");
    assert!(text(&o.stdout).contains("complete -c v6gate"));
    assert!(!run(&["completions", "tcsh"], "").status.success(), "unknown shell refused");

    let dir = scratch("manpages").join("man1");
    let o = run(&["manpages", "--dir", dir.to_str().unwrap()], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let top = std::fs::read_to_string(dir.join("v6gate.1")).expect("v6gate.1");
    assert!(top.starts_with(".ie") || top.contains(".TH v6gate 1"), "a roff page: {}", &top[..top.len().min(200)]);
    let page = std::fs::read_to_string(dir.join("v6gate-run.1")).expect("v6gate-run.1");
    assert!(page.contains(".TH v6gate-run 1"), "titled after the subcommand");
    assert!(page.contains("/etc/v6gate/v6gate.toml"), "shows the default configuration path");
    for f in ["v6gate-config-check.1", "v6gate-ctl-bib-add.1", "v6gate-translate.1"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
}

#[test]
fn version_and_usage_errors() {
    let o = run(&["--version"], "");
    assert!(o.status.success());
    assert!(text(&o.stdout).starts_with("v6gate "));
    let o = run(&["translate"], "");
    assert!(!o.status.success(), "--config is required");
    let o = run(&["translate", "--config", "x.toml", "--pcap-in", "in.pcap"], "");
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("--pcap-out") && err.trim_end().lines().count() == 1, "{err}");
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn write_pcap(path: &Path) -> Vec<Duration> {
    let hdr = PcapHeader { datalink: DataLink::ETHERNET, ..PcapHeader::default() };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), hdr).unwrap();
    let eth = |ethertype: [u8; 2], payload: &[u8]| {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, ethertype[0], ethertype[1]];
        f.extend_from_slice(payload);
        f
    };
    let v4 = unhex(V4_UDP);
    let v6 = unhex(V6_UDP);
    let mut vlan_v6 = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x81, 0x00, 0x00, 0x07, 0x86, 0xdd];
    vlan_v6.extend_from_slice(&v6);
    let frames = [eth([0x08, 0x00], &v4), eth([0x08, 0x06], &[0; 28]), vlan_v6, eth([0x86, 0xdd], &v6)];
    let mut ts = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let t = Duration::new(1_700_000_000 + i as u64, 123_000 * (i as u32 + 1));
        w.write_packet(&PcapPacket::new(t, f.len() as u32, f)).unwrap();
        ts.push(t);
    }
    ts
}

#[test]
fn pcap_round_trip() {
    let dir = scratch("pcap");
    let cfg = write_config(&dir, GOOD);
    let pin = dir.join("in.pcap");
    let pout = dir.join("out.pcap");
    let _ = std::fs::remove_file(&pout);
    let ts = write_pcap(&pin);
    let o = run(
        &[
            "translate",
            "--config",
            cfg.to_str().unwrap(),
            "--pcap-in",
            pin.to_str().unwrap(),
            "--pcap-out",
            pout.to_str().unwrap(),
        ],
        "",
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("3 packets in") && err.contains("1 non-IP frames skipped"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one-line summary: {err}");

    let mut r = PcapReader::new(std::fs::File::open(&pout).unwrap()).unwrap();
    assert_eq!(r.header().datalink, DataLink::RAW);
    let mut n = 0;
    let mut families = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert!(ts.contains(&p.timestamp), "timestamp {:?} not from the input", p.timestamp);
        assert!(matches!(p.data.first().map(|b| b >> 4), Some(4 | 6)), "not an IP packet");
        families.push(p.data[0] >> 4);
        n += 1;
    }
    assert!(err.contains(&format!("{n} packets out")), "{err} vs {n} packets in the file");
    assert_eq!(families, vec![6, 4, 4], "the IPv4 frame became IPv6, both IPv6 frames (one VLAN-tagged) IPv4");
    assert!(!dir.join("out.pcap.tmp").exists());

    // A file that is not a pcap: a clear error, no output left behind.
    let bogus = dir.join("bogus.pcap");
    std::fs::write(&bogus, "hello").unwrap();
    let pout2 = dir.join("out2.pcap");
    let o = run(
        &[
            "translate",
            "--config",
            cfg.to_str().unwrap(),
            "--pcap-in",
            bogus.to_str().unwrap(),
            "--pcap-out",
            pout2.to_str().unwrap(),
        ],
        "",
    );
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("not a pcap file"), "{}", text(&o.stderr));
    assert!(!pout2.exists() && !dir.join("out2.pcap.tmp").exists());
}

#[test]
fn readme_documents_every_key_and_drop_reason() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for k in gate::config::SIIT_KEYS {
        assert!(readme.contains(&format!("`{k}`")), "README lacks config key `{k}`");
    }
    for r in DropReason::ALL {
        assert!(readme.contains(&format!("`{}`", r.as_str())), "README lacks drop reason `{}`", r.as_str());
    }
    assert!(readme.contains("`bad-hex`"));
}
