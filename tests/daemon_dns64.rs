//! `v6gate run` with [dns64] next to [siit]: the IPv6 host asks the
//! daemon's DNS64 for an IPv4-only name, gets a synthesised AAAA under the
//! translation prefix, and reaches the IPv4 host through the translator.

mod daemon_util;

use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use daemon_util::*;

const CONFIG: &str = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:1::2", "192.0.2.2"]]
[tun]
queues = 1
[dns64]
listen = ["[2001:db8:1::1]:53"]
upstream = ["198.51.100.2:5353"]
prefix = "64:ff9b:1::/96"
allow = ["2001:db8:1::/64"]
timeout = "2s"
"#;

/// A fake upstream resolver: `v4only.example.` has A 198.51.100.2 and no
/// AAAA. Answers `n` queries.
fn fake_upstream(sock: &UdpSocket, n: usize) {
    let mut buf = [0u8; 1500];
    for _ in 0..n {
        let Ok((len, from)) = sock.recv_from(&mut buf) else { return };
        let q = &buf[..len];
        // Question: name labels from offset 12, then QTYPE, QCLASS.
        let mut i = 12;
        while i < len && q[i] != 0 {
            i += 1 + q[i] as usize;
        }
        let qend = i + 5;
        let qtype = u16::from_be_bytes([q[i + 1], q[i + 2]]);
        let is_a = qtype == 1;
        let mut r = Vec::new();
        r.extend_from_slice(&q[..2]);
        r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
        r.extend_from_slice(&q[12..qend]);
        if is_a {
            r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 51, 100, 2]);
        }
        sock.send_to(&r, from).unwrap();
    }
}

fn aaaa_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.trim_end_matches('.').split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 28, 0, 1]);
    q
}

#[test]
fn dns64_answers_through_the_daemon_and_the_answer_is_reachable() {
    lab::need_root!();
    let lab = Lab::start(CONFIG);
    assert_eq!(lab.status()["functions"], serde_json::json!(["siit", "dns64"]));
    let answer = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let h4 = &lab.h4;
        let up = s.spawn(move || {
            h4.enter_thread().unwrap();
            let sock = UdpSocket::bind("198.51.100.2:5353").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            tx.send(()).unwrap();
            fake_upstream(&sock, 2);
        });
        rx.recv().unwrap();
        let a = in_ns(&lab.h6, || {
            let sock = UdpSocket::bind("[::]:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            sock.send_to(&aaaa_query("v4only.example."), "[2001:db8:1::1]:53".parse::<SocketAddr>().unwrap()).unwrap();
            let mut buf = [0u8; 1500];
            let (n, _) = sock.recv_from(&mut buf).unwrap();
            buf[..n].to_vec()
        });
        up.join().unwrap();
        a
    });
    assert_eq!(&answer[..2], &[0x12, 0x34], "same ID");
    assert_eq!(answer[3] & 0x0f, 0, "NOERROR");
    assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 1, "one answer: {answer:02x?}");
    let rdata: [u8; 16] = answer[answer.len() - 16..].try_into().unwrap();
    let synth = Ipv6Addr::from(rdata);
    assert_eq!(synth, "64:ff9b:1::c633:6402".parse::<Ipv6Addr>().unwrap());
    assert_eq!(lab.metric("v6gate_dns64_synthesized_total"), 1);
    assert_eq!(lab.status()["dns64"]["synthesized"], 1);

    // The synthesised address works through the translator.
    let (got, _) =
        tcp_echo(&lab.h4, "0.0.0.0:4020".parse().unwrap(), &lab.h6, SocketAddr::new(synth.into(), 4020), b"hi");
    assert_eq!(got, b"hi");
}

/// A reload (SIGHUP) that changes the `[dns64]` prefix does not take DNS64
/// down: a client querying all along gets every answer, first under the
/// old prefix, then under the new one.
#[test]
fn dns64_keeps_answering_while_a_reload_changes_the_prefix() {
    lab::need_root!();
    let lab = Lab::start(CONFIG);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let h4 = &lab.h4;
        s.spawn(move || {
            h4.enter_thread().unwrap();
            let sock = UdpSocket::bind("198.51.100.2:5353").unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            tx.send(()).unwrap();
            fake_upstream(&sock, usize::MAX);
        });
        rx.recv().unwrap();
        let (stop, h6) = (&stop, &lab.h6);
        let client = s.spawn(move || {
            in_ns(h6, || {
                let sock = UdpSocket::bind("[::]:0").unwrap();
                sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut seen = Vec::new();
                let mut buf = [0u8; 1500];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    sock.send_to(&aaaa_query("v4only.example."), "[2001:db8:1::1]:53".parse::<SocketAddr>().unwrap())
                        .unwrap();
                    let (n, _) = sock.recv_from(&mut buf).expect("every query is answered");
                    let a = &buf[..n];
                    assert_eq!(a[3] & 0x0f, 0, "NOERROR");
                    let rdata: [u8; 16] = a[n - 16..].try_into().unwrap();
                    seen.push(Ipv6Addr::from(rdata));
                    std::thread::sleep(Duration::from_millis(5));
                }
                seen
            })
        });
        std::thread::sleep(Duration::from_millis(300));
        lab.write_config(&CONFIG.replace("prefix = \"64:ff9b:1::/96\"\nallow", "prefix = \"64:ff9b:2::/96\"\nallow"));
        lab.sighup();
        assert_eq!(lab.wait_metric("v6gate_config_generation", |v| v == 2), 2, "{}", lab.log());
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        client.join().unwrap()
    });
    let old: Ipv6Addr = "64:ff9b:1::c633:6402".parse().unwrap();
    let new: Ipv6Addr = "64:ff9b:2::c633:6402".parse().unwrap();
    assert!(seen.len() > 20, "{} answers", seen.len());
    assert_eq!(seen[0], old);
    assert_eq!(*seen.last().unwrap(), new);
    let switch = seen.iter().position(|a| *a == new).unwrap();
    assert!(seen[switch..].iter().all(|a| *a == new), "no answer under the old prefix after the switch");
    assert!(lab.log().contains("dns64: reconfigured"), "{}", lab.log());
    assert!(lab.metric("v6gate_dns64_cache_hits_total") > 0, "the A answer came from the cache");
}
