//! The DNS64 server over real sockets on loopback, against an in-process
//! fake upstream resolver (UDP and TCP, scripted answers; one variant
//! truncates every UDP answer, another never answers).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use dns64::{Config, Server};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, PTR};
use hickory_proto::rr::{RData, RecordType};

#[test]
fn answers_over_udp_and_tcp_on_both_families() {
    let up = Fake::start(Mode::Normal);
    let srv = Server::start(&config(&[up.addr], 2000)).unwrap();
    let addrs = srv.local_addrs().to_vec();
    assert_eq!(addrs.len(), 2);
    assert_ne!(addrs[0].port(), 0);
    for &a in &addrs {
        // Synthesis from A (RFC 6147 §5.1.6/§5.1.7).
        let m = udp(a, "v4only.test.", RecordType::AAAA);
        assert_eq!(m.response_code(), ResponseCode::NoError);
        assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
        assert_eq!(m.answers()[0].ttl(), 120, "min(A TTL 300, SOA MINIMUM 120)");
        // Real AAAA passes (RFC 6147 §5.1.1).
        assert_eq!(aaaa_addrs(&udp(a, "dual.test.", RecordType::AAAA)), ["2001:db8::10"]);
        // A passes unchanged (§5.3.3).
        let m = udp(a, "v4only.test.", RecordType::A);
        assert_eq!(m.answers()[0].data(), &RData::A(A("198.51.100.10".parse().unwrap())));
        // NXDOMAIN as is (§5.1.2).
        assert_eq!(udp(a, "nope.test.", RecordType::AAAA).response_code(), ResponseCode::NXDomain);
        // Over TCP.
        assert_eq!(aaaa_addrs(&tcp(a, "v4only.test.", RecordType::AAAA)), ["64:ff9b:1::c633:640a"]);
    }
    // PTR for a synthesised address (§5.3.1): CNAME + PTR.
    let rev = dns64::arpa::ip6_arpa_name("64:ff9b:1::c633:640a".parse().unwrap()).to_ascii();
    let m = udp(addrs[0], &rev, RecordType::PTR);
    assert_eq!(m.answers().len(), 2);
    assert_eq!(m.answers()[1].data(), &RData::PTR(PTR(name("v4only.test."))));
    let s = srv.stats();
    assert_eq!(s.synthesized, 6);
    assert_eq!(s.aaaa_real, 2);
    assert_eq!(s.ptr_synthesized, 1);
    assert_eq!(s.queries_tcp, 4);
    assert_eq!(s.answers, s.queries_udp + s.queries_tcp);
    assert_eq!(up.tcp_queries.load(Ordering::Relaxed), 0);
    srv.stop();
}

#[test]
fn truncated_upstream_answers_are_retried_over_tcp() {
    let up = Fake::start(Mode::TruncateUdp);
    // No cache: every lookup goes upstream (and is retried over TCP).
    let srv = Server::start(&Config { cache_entries: 0, ..config(&[up.addr], 2000) }).unwrap();
    let a = srv.local_addrs()[0];
    // Over TCP to us: the full synthesised answer.
    let m = tcp(a, "v4only.test.", RecordType::AAAA);
    assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
    let s = srv.stats();
    assert!(s.upstream_tcp_retries >= 4, "{s:?}");
    assert_eq!(up.tcp_queries.load(Ordering::Relaxed), s.upstream_tcp_retries);
    // Over UDP to us: 60 synthesised records do not fit in 512 bytes: TC.
    let m = udp(a, "big.test.", RecordType::AAAA);
    assert!(m.truncated() && m.answers().is_empty());
    assert_eq!(aaaa_addrs(&tcp(a, "big.test.", RecordType::AAAA)).len(), 60);
}

#[test]
fn dead_upstream_gives_servfail_not_a_hang() {
    let dead = Fake::start(Mode::Silent);
    let srv = Server::start(&config(&[dead.addr], 100)).unwrap();
    let a = srv.local_addrs()[0];
    let m = udp(a, "v4only.test.", RecordType::AAAA);
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    assert_eq!(m.queries()[0].name(), &name("v4only.test."));
    let m = udp(a, "v4only.test.", RecordType::MX);
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    let s = srv.stats();
    assert_eq!(s.servfail_upstream + s.servfail_deadline, 2);
    assert!(s.upstream_timeouts >= 2, "{s:?}");
    assert!(dead.udp_queries.load(Ordering::Relaxed) >= 2);
}

#[test]
fn failover_to_the_next_upstream() {
    let dead = Fake::start(Mode::Silent);
    let up = Fake::start(Mode::Normal);
    let srv = Server::start(&config(&[dead.addr, up.addr], 100)).unwrap();
    let m = udp(srv.local_addrs()[1], "v4only.test.", RecordType::AAAA);
    assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
    assert!(srv.stats().upstream_timeouts >= 2);
}

#[test]
fn garbage_gets_formerr_and_strangers_refused() {
    let up = Fake::start(Mode::Normal);
    let mut cfg = config(&[up.addr], 2000);
    cfg.allow = vec!["::1/128".into()];
    let srv = Server::start(&cfg).unwrap();
    let (v4, v6) = (srv.local_addrs()[0], srv.local_addrs()[1]);
    let m = udp_ask(v6, b"\x77\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0");
    assert_eq!((m.id(), m.response_code()), (0x7701, ResponseCode::FormErr));
    assert_eq!(udp(v4, "v4only.test.", RecordType::AAAA).response_code(), ResponseCode::Refused);
    assert_eq!(aaaa_addrs(&udp(v6, "v4only.test.", RecordType::AAAA)), ["64:ff9b:1::c633:640a"]);
    let s = srv.stats();
    assert_eq!((s.formerr, s.refused, s.synthesized), (1, 1, 1));
    assert_eq!(up.udp_queries.load(Ordering::Relaxed), 2, "REFUSED and FORMERR never reach upstream");
}

#[test]
fn spawn_on_a_runtime_and_stop_frees_the_port() {
    let up = Fake::start(Mode::Normal);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let srv = Server::spawn(&config(&[up.addr], 2000), rt.handle()).unwrap();
    let a = srv.local_addrs()[0];
    assert_eq!(aaaa_addrs(&udp(a, "v4only.test.", RecordType::AAAA)), ["64:ff9b:1::c633:640a"]);
    srv.stop();
    // The same port is free again (UDP and TCP).
    let mut cfg = config(&[up.addr], 2000);
    cfg.listen = vec![a.to_string()];
    let mut again = Server::start(&cfg);
    for _ in 0..50 {
        if again.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        again = Server::start(&cfg);
    }
    let again = again.unwrap();
    assert_eq!(again.local_addrs(), [a]);
    assert!(Server::start(&cfg).is_err(), "a bound port is reported");
}

#[test]
fn bad_config_is_an_error() {
    let mut cfg = config(&["127.0.0.1:53".parse().unwrap()], 100);
    cfg.prefix = "64:ff9b::/72".into();
    let e = Server::start(&cfg).err().unwrap().to_string();
    assert!(e.starts_with("dns64.prefix:"), "{e}");
}

/// RFC 2308 through the server: the second query for a name is answered
/// from the cache (no upstream query), its synthesised TTL counting down
/// with the cached records (RFC 6147 §5.1.7 on aged records); NXDOMAIN is
/// cached too (negative caching, RFC 2308 §5).
#[test]
fn answers_come_from_the_cache_with_ttls_counting_down() {
    let up = Fake::start(Mode::Normal);
    let srv = Server::start(&config(&[up.addr], 2000)).unwrap();
    let a = srv.local_addrs()[0];
    let m = udp(a, "v4only.test.", RecordType::AAAA);
    assert_eq!(m.answers()[0].ttl(), 120, "min(A TTL 300, SOA MINIMUM 120)");
    let upstream_queries = up.udp_queries.load(Ordering::Relaxed);
    assert_eq!(upstream_queries, 2, "AAAA, then A");
    assert_eq!(udp(a, "nope.test.", RecordType::AAAA).response_code(), ResponseCode::NXDomain);
    let upstream_queries = up.udp_queries.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(1100));
    let m = udp(a, "v4only.test.", RecordType::AAAA);
    assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
    let ttl = m.answers()[0].ttl();
    assert!((115..120).contains(&ttl), "the TTL counts down: {ttl}");
    assert_eq!(udp(a, "nope.test.", RecordType::AAAA).response_code(), ResponseCode::NXDomain);
    assert_eq!(up.udp_queries.load(Ordering::Relaxed), upstream_queries, "all from the cache");
    let s = srv.stats();
    assert_eq!((s.cache_hits, s.cache_inserts), (3, 3), "{s:?}");
    assert_eq!(srv.cache_usage().0, 3);
    assert!(srv.cache_usage().1 > 0);
    srv.stop();
}

/// RFC 6147 §5.2: IPv4 ranges under prefixes of their own; others under
/// `prefix`; PTR queries under any of them (§5.3.1).
#[test]
fn several_prefixes_for_several_ipv4_ranges() {
    let up = Fake::start(Mode::Normal);
    let cfg = Config {
        prefixes: vec![dns64::RangePrefix {
            prefix: "2001:db8:64::/96".into(),
            ipv4: vec!["198.51.100.10/32".into(), "198.51.100.40/29".into()],
        }],
        ..config(&[up.addr], 2000)
    };
    let srv = Server::start(&cfg).unwrap();
    let a = srv.local_addrs()[0];
    assert_eq!(aaaa_addrs(&udp(a, "v4only.test.", RecordType::AAAA)), ["2001:db8:64::c633:640a"]);
    let big = aaaa_addrs(&tcp(a, "big.test.", RecordType::AAAA));
    assert_eq!(big.len(), 60);
    for (i, v6) in big.iter().enumerate() {
        let ranged = i == 10 || (40..48).contains(&i);
        let want = if ranged { format!("2001:db8:64::c633:64{i:02x}") } else { format!("64:ff9b:1::c633:64{i:02x}") };
        assert_eq!(v6.to_string(), want.parse::<std::net::Ipv6Addr>().unwrap().to_string());
    }
    // PTR under the range's prefix, not under the default one for the
    // same address (that is not an address this DNS64 gives out).
    let rev = dns64::arpa::ip6_arpa_name("2001:db8:64::c633:640a".parse().unwrap()).to_ascii();
    let m = udp(a, &rev, RecordType::PTR);
    assert_eq!(m.answers().len(), 2, "CNAME + PTR");
    let rev = dns64::arpa::ip6_arpa_name("64:ff9b:1::c633:640a".parse().unwrap()).to_ascii();
    assert_eq!(udp(a, &rev, RecordType::PTR).response_code(), ResponseCode::NXDomain, "forwarded unchanged");
    let bad = Config {
        prefixes: vec![dns64::RangePrefix { prefix: "2001:db8:64::/96".into(), ipv4: vec![] }],
        ..config(&[up.addr], 2000)
    };
    let e = bad.check().unwrap_err();
    assert_eq!(e.key, "prefixes");
    assert!(e.to_string().contains("entry 1"), "{e}");
}

/// A reload that changes the prefix (and the listen addresses) never takes
/// DNS64 down: a client querying all along gets every answer, first under
/// the old prefix, then under the new one; an address that goes stops
/// answering, one that comes answers.
#[test]
fn reconfigure_changes_the_prefix_without_going_down() {
    let up = Fake::start(Mode::Normal);
    let base = config(&[up.addr], 2000);
    let srv = Server::start(&base).unwrap();
    let a = srv.local_addrs()[0];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // udp() panics after HANG without an answer.
                let m = udp(a, "v4only.test.", RecordType::AAAA);
                assert_eq!(m.response_code(), ResponseCode::NoError);
                seen.push(aaaa_addrs(&m)[0].to_string());
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        })
    };
    let other = Config { prefix: "2001:db8:64::/96".into(), ..base.clone() };
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(30));
        srv.reconfigure(if i % 2 == 0 { &other } else { &base }).unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    let seen = client.join().expect("every query answered");
    assert!(seen.len() > 20, "{} answers", seen.len());
    assert!(seen.contains(&"64:ff9b:1::c633:640a".to_string()) && seen.contains(&"2001:db8:64::c633:640a".to_string()));
    assert_eq!(
        aaaa_addrs(&udp(a, "v4only.test.", RecordType::AAAA)),
        ["64:ff9b:1::c633:640a"],
        "the last one in force"
    );
    assert_eq!(srv.local_addrs()[0], a, "the same socket all along");

    // Listen addresses: [::1] goes, a second loopback port comes; a bind
    // failure changes nothing.
    let v6 = srv.local_addrs()[1];
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let busy = Config { listen: vec!["127.0.0.1:0".into(), taken.local_addr().unwrap().to_string()], ..base.clone() };
    assert!(srv.reconfigure(&busy).is_err());
    assert_eq!(srv.local_addrs(), vec![a, v6]);
    let moved = Config { listen: vec!["127.0.0.1:0".into(), "127.0.0.2:0".into()], ..base.clone() };
    srv.reconfigure(&moved).unwrap();
    let now = srv.local_addrs();
    assert_eq!(now[0], a);
    assert_eq!(aaaa_addrs(&udp(now[1], "v4only.test.", RecordType::AAAA)).len(), 1);
    let probe = std::net::UdpSocket::bind("[::1]:0").unwrap();
    probe.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    probe.send_to(&query_bytes("v4only.test.", RecordType::AAAA, 9), v6).unwrap();
    assert!(probe.recv_from(&mut [0u8; 512]).is_err(), "the removed address no longer answers");
    srv.stop();
}
