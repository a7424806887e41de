//! Issue #29 D8 and D9 in network namespaces: one host with many
//! addresses of one prefix no longer takes the DS-Lite AFTR's port pool or
//! the DSTM lease pool, a lease flood no longer refuses another client's
//! renewal, the lease file is not rewritten at every request, and the
//! lease server's counters are metrics.
//!
//! D8: `v6gate softwire` as the AFTR (the bed of `softwire_netns`);
//! softwires from 40 addresses of one /56 and from another /56, sent by
//! raw IPv4-in-IPv6 sockets bound to each address.
//! D9: `v6gate run` with `[lw4o6.dstm]` (the bed of the daemon tests);
//! lease requests from UDP sockets bound to 126 addresses of one /64, and a
//! flood from ten addresses of each of twenty other /64s.

#[path = "daemon_util/mod.rs"]
mod daemon_util;
mod hardening_util;
#[path = "softwire_util/mod.rs"]
mod softwire_util;

use daemon_util::{in_ns, Lab};
use hardening_util::{dstm_config, inner_udp, lease_ask, softwire_send};
use lab::netns::Netns;
use softwire::lease::{self, nak, Msg};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

#[test]
fn dslite_quota_belongs_to_the_subscriber_prefix() {
    lab::need_root!();
    let bed = softwire_util::bed();
    let aftr = softwire_util::Proc::start(
        &bed.aftr,
        bed.dir.path(),
        "aftr",
        r#"
[dslite]
aftr-address = "2001:db8:ffff::1"
b4-prefixes = ["2001:db8:1::/48"]
pool4 = ["203.0.113.1/32"]
max-ports-per-subscriber = 100
log-mappings = false
"#,
    );
    // One host: 40 addresses of 2001:db8:1::/64 (one /56). Another
    // subscriber: 2001:db8:1:100::2 (another /56 of the B4 prefix).
    let one = |i: u16| Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 1, i);
    for i in 0..40 {
        bed.b4.ip(&["addr", "add", &format!("{}/64", one(i)), "dev", "w6", "nodad"]).unwrap();
    }
    let other: Ipv6Addr = "2001:db8:1:100::2".parse().unwrap();
    bed.b4.ip(&["addr", "add", &format!("{other}/64"), "dev", "w6", "nodad"]).unwrap();
    // The server counts what reaches it.
    let name = bed.h4.name().to_string();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        let s = UdpSocket::bind("0.0.0.0:9").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        ready_tx.send(()).unwrap();
        let mut n = 0;
        let mut b = [0u8; 64];
        while s.recv(&mut b).is_ok() {
            n += 1;
        }
        n
    });
    ready_rx.recv().unwrap();
    let aftr6: Ipv6Addr = "2001:db8:ffff::1".parse().unwrap();
    in_ns(&bed.b4, || {
        // Ten flows from each address: 400 wanted, the /56's quota is 100.
        for i in 0..40u16 {
            for j in 0..10u16 {
                softwire_send(one(i), aftr6, &flow(10_000 + i * 10 + j));
            }
        }
        for j in 0..5u16 {
            softwire_send(other, aftr6, &flow(20_000 + j));
        }
    });
    let s = aftr.wait_status(|v| {
        v["dslite"]["counters"]["drops"]["quota-exceeded"].as_u64().unwrap_or(0) == 300
            && v["dslite"]["mappings"].as_u64().unwrap_or(0) == 105
    });
    assert_eq!(s["dslite"]["mappings_created"], 105, "{s}");
    assert_eq!(server.join().unwrap(), 105, "what the quota let through reached the server");
    aftr.stop();
}

/// An IPv4 UDP packet `192.0.0.2:sport` → `198.51.100.1:9`.
fn flow(sport: u16) -> Vec<u8> {
    inner_udp(SocketAddrV4::new([192, 0, 0, 2].into(), sport), SocketAddrV4::new([198, 51, 100, 1].into(), 9), b"flow")
}

/// One lease message from `src` to the daemon's lease server.
fn ask(src: Ipv6Addr, m: Msg, xid: u32) -> Option<Msg> {
    lease_ask(src, "[2001:db8:1::1]:4739".parse().unwrap(), m, xid)
}

#[test]
fn dstm_leases_are_shared_per_client_and_renewals_survive_a_flood() {
    lab::need_root!();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leases");
    let mut lab = Lab::start(&dstm_config(&file, "max-requests-per-second = 50\n"));
    let t_start = Instant::now();
    // h6: 126 addresses of its /64; a host of another /64; twenty /64s of flooders.
    let one = |i: u16| Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 1, 0, i);
    for i in 0..126 {
        lab.h6.ip(&["addr", "add", &format!("{}/64", one(i)), "dev", "a6", "nodad"]).unwrap();
    }
    let legit: Ipv6Addr = "2001:db8:6::2".parse().unwrap();
    lab.h6.ip(&["addr", "add", &format!("{legit}/64"), "dev", "a6", "nodad"]).unwrap();
    lab.gw.ip(&["-6", "route", "add", "2001:db8:6::/64", "via", "2001:db8:1::2"]).unwrap();
    // Flooders need no answers: their sockets bind to addresses h6 does
    // not have (IPV6_FREEBIND).
    let flooder = |k: u16, j: u16| Ipv6Addr::new(0x2001, 0xdb8, 7, k, 0, 0, 0, j);

    let Some(Msg::Ack { ipv4: mine, .. }) = in_ns(&lab.h6, || ask(legit, Msg::Request, 1)) else {
        panic!("the legitimate host gets a lease: {}", lab.log())
    };
    // One host, 126 addresses of its /64: its share (4), not the pool.
    let answers =
        in_ns(&lab.h6, || (0..126u16).map(|i| ask(one(i), Msg::Request, 100 + u32::from(i))).collect::<Vec<_>>());
    let acks = answers.iter().filter(|a| matches!(a, Some(Msg::Ack { .. }))).count();
    let naks = answers.iter().filter(|a| matches!(a, Some(Msg::Nak(nak::SHARE | nak::REFUSED)))).count();
    assert_eq!((acks, naks), (4, 122), "{answers:?}");

    // A flood of REQUESTs from twenty other /64s, then the legitimate
    // host's RENEW behind it in the server's queue.
    let renewed = in_ns(&lab.h6, || {
        // Ten addresses of each /64 (their client's burst), one REQUEST
        // each: 200 from hosts holding no lease, within the server
        // socket's buffer, four times the global rate.
        for k in 0..20u16 {
            for j in 1..=10u16 {
                let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None).unwrap();
                s.set_freebind_v6(true).unwrap();
                s.bind(&SocketAddr::new(flooder(k, j).into(), 0).into()).unwrap();
                let to: SocketAddr = "[2001:db8:1::1]:4739".parse().unwrap();
                let _ = s.send_to(&lease::encode(Msg::Request, u32::from(k * 100 + j)), &to.into());
            }
        }
        ask(legit, Msg::Renew(mine), 7)
    });
    assert!(matches!(renewed, Some(Msg::Ack { ipv4, .. }) if ipv4 == mine), "{renewed:?}");

    // Every refusal is a metric (the status behind them is refreshed a
    // few times a second).
    let at_least = |series: &str, n: u64| {
        let got = lab.wait_metric(series, |v| v >= n);
        assert!(got >= n, "{series}: {got} < {n}");
    };
    at_least("v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"share-exceeded\"}", 6);
    at_least("v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"client-rate-limited\"}", 100);
    at_least("v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"rate-limited\"}", 100);
    at_least("v6gate_softwire_dstm_messages_total{function=\"lw4o6\",event=\"granted\"}", 5);
    at_least("v6gate_softwire_dstm_messages_total{function=\"lw4o6\",event=\"renewed\"}", 1);

    // The lease file: written at most once a second while leases change
    // (hundreds of messages above), and as the table stands at exit.
    let t0 = Instant::now();
    let stats = loop {
        let s = lab.status()["softwires"]["lw4o6"]["dstm"]["stats"].clone();
        if s["file_writes"].as_u64().unwrap_or(0) >= 1 {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the lease file was never written: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let writes = stats["file_writes"].as_u64().unwrap();
    assert!(writes <= t_start.elapsed().as_secs() + 2, "{writes} writes in {:?}: {stats}", t_start.elapsed());
    let leases = lab.status()["softwires"]["lw4o6"]["leases"].as_u64().unwrap();
    let (st, log) = lab.stop();
    assert!(st.success(), "{log}");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines = text.lines().filter(|l| !l.starts_with('#')).count() as u64;
    assert_eq!(lines, leases, "the file holds the leases at exit: {text}");
    assert!(text.contains(&format!("{legit} {mine} ")), "{text}");
}
