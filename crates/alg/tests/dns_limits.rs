//! Issue #29 D1 in the runner, on loopback: the bounded DNS resolver
//! (lookups in flight per client, one deadline per lookup, a few shared
//! sockets, answers parsed from a real DNS reply). One test in this file:
//! it counts the process's descriptors.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::{rdata, RData, Record, RecordType};

#[path = "common/wire.rs"]
mod wire;
use wire::{options, status, wait_for};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A nameserver on loopback: answers A for `ok.example` with 127.0.0.1,
/// stays silent for every other name; counts the queries.
fn nameserver(stop: Arc<AtomicBool>, queries: Arc<AtomicUsize>) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let addr = s.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let mut b = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = s.recv_from(&mut b) else { continue };
            queries.fetch_add(1, Ordering::Relaxed);
            let Ok(q) = Message::from_vec(&b[..n]) else { continue };
            let Some(query) = q.queries().first().cloned() else { continue };
            if query.name().to_utf8() != "ok.example." || query.query_type() != RecordType::A {
                continue;
            }
            let mut r = Message::new();
            r.set_id(q.id()).set_message_type(MessageType::Response).set_recursion_available(true);
            r.add_query(query.clone());
            r.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(rdata::A::new(127, 0, 0, 1))));
            let _ = s.send_to(&r.to_vec().unwrap(), from);
        }
    });
    (addr, t)
}

/// D1: a flood of names nobody answers from one client holds at most its
/// share of the lookups in flight (the rest: 503 + Retry-After at once),
/// every lookup ends with 504 at its deadline, the resolver's sockets do
/// not grow with the lookups, and names that do resolve and literals are
/// served meanwhile.
#[test]
fn dns_lookups_are_bounded_per_client_and_end_at_their_deadline() {
    let stop = Arc::new(AtomicBool::new(false));
    let queries = Arc::new(AtomicUsize::new(0));
    let (ns, ns_thread) = nameserver(stop.clone(), queries.clone());
    let fds0 = open_fds();
    let cfg = alg::Config {
        listen_v6: "[::1]:0".parse().unwrap(),
        listen_v4: "127.0.0.1:0".parse().unwrap(),
        media: alg::config::MediaMode::None,
        tcp: false,
        rate_limit: 0,
        max_dns_lookups: 16,
        client_share: 25,
        dns_timeout: Duration::from_millis(800),
        dns_servers: vec![ns],
        next_hop_allow: vec!["127.0.0.1/32".parse().unwrap()],
        ..alg::Config::default()
    };
    let h = alg::runner::spawn(cfg, None, None).unwrap();
    let ua = UdpSocket::bind("127.0.0.1:0").unwrap();
    ua.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let me = ua.local_addr().unwrap();
    // The UAS the resolvable name points at.
    let uas = UdpSocket::bind("127.0.0.1:0").unwrap();
    uas.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    const NAMES: usize = 200;
    for n in 0..NAMES {
        ua.send_to(&options(me, &format!("sip:x@dead{n}.example"), n, "UDP"), h.udp_v4).unwrap();
    }
    let mut codes = Vec::new();
    let mut b = [0u8; 4096];
    let t0 = Instant::now();
    while codes.len() < NAMES && t0.elapsed() < Duration::from_secs(20) {
        if let Ok(n) = ua.recv(&mut b) {
            codes.push(status(&b[..n]));
            if status(&b[..n]) == 503 {
                assert!(String::from_utf8_lossy(&b[..n]).contains("\r\nRetry-After: 5\r\n"));
            }
        }
    }
    let busy = codes.iter().filter(|&&c| c == 503).count();
    let timed_out = codes.iter().filter(|&&c| c == 504).count();
    assert_eq!(
        (busy, timed_out),
        (NAMES - 4, 4),
        "4 lookups (a quarter of 16) for the client, the rest refused: {codes:?}"
    );
    let refused = |r: alg::stats::Refusal| h.snapshot().stats.refused[r.index()];
    wait_for("the refusals counted", || {
        refused(alg::stats::Refusal::DnsBusy) == NAMES as u64 - 4 && refused(alg::stats::Refusal::DnsTimeout) == 4
    });
    // The ALG's listeners, its few DNS sockets, its runtime and netlink
    // sockets, this test's two UAs: a constant, not a socket per lookup.
    assert!(open_fds() <= fds0 + 20, "descriptors: {fds0} before, {} now", open_fds());
    assert!(queries.load(Ordering::Relaxed) <= 4 * 6, "{} queries", queries.load(Ordering::Relaxed));
    // A name that resolves (its port given: A only) goes to its address.
    let target = format!("sip:x@ok.example:{}", uas.local_addr().unwrap().port());
    ua.send_to(&options(me, &target, 100, "UDP"), h.udp_v4).unwrap();
    let n = uas.recv(&mut b).expect("forwarded to the address DNS gave");
    assert!(b[..n].starts_with(b"OPTIONS sip:x@ok.example:"), "{}", String::from_utf8_lossy(&b[..n]));
    wait_for("the lookups to finish", || h.snapshot().budgets.dns_lookups.0 == 0);
    stop.store(true, Ordering::Relaxed);
    ns_thread.join().unwrap();
}
