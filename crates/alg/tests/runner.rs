//! The runner on loopback: real UDP/TCP sockets, the real TrGW relay in
//! the same process. A UA in the IPv6 realm ([::1]) calls a UA in the IPv4
//! realm (127.0.0.1): INVITE/100/200/ACK with SDP rewritten, RTP relayed,
//! a re-INVITE handover to a new address (media follows, the old address
//! is no longer relayed), BYE, and everything released.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alg::msg::Name;

#[path = "common/wire.rs"]
mod wire;
use wire::*;

/// A relay on loopback: `[::1]` and 127.0.0.1, 100 ports from `port_min`,
/// ng on an ephemeral port, one poll worker, loopback media allowed.
fn relay_config(port_min: u16) -> trgw::Config {
    trgw::Config {
        interfaces: vec![
            trgw::config::Interface::new("v6", None, Some("::1".parse().unwrap())),
            trgw::config::Interface::new("v4", Some("127.0.0.1".parse().unwrap()), None),
        ],
        port_min,
        port_max: port_min + 99,
        ng: Some("127.0.0.1:0".parse().unwrap()),
        rtpproxy_udp: None,
        io: trgw::IoMode::Poll,
        workers: Some(1),
        // The UAs of these tests are on loopback, like the relay itself.
        media_allow: ["::1", "127.0.0.1"].iter().map(|a| a.parse().unwrap()).collect(),
        ..trgw::Config::default()
    }
}

#[test]
fn call_handover_and_release_over_real_sockets() {
    let relay = Arc::new(trgw::Relay::start(relay_config(41000)).unwrap());
    let cfg = alg::Config {
        listen_v6: "[::1]:0".parse().unwrap(),
        listen_v4: "127.0.0.1:0".parse().unwrap(),
        media_v6_interface: Some("v6".into()),
        media_v4_interface: Some("v4".into()),
        t1: Duration::from_millis(20),
        // The UAs are on loopback too: allowed as next hops.
        next_hop_allow: ["::1", "127.0.0.1"].iter().map(|a| a.parse().unwrap()).collect(),
        ..alg::Config::default()
    };
    let served = alg::cli::serve(cfg, Some(relay.clone())).unwrap();
    let (a6, a4) = (served.alg.udp_v6, served.alg.udp_v4);

    let ua6 = UdpSocket::bind("[::1]:0").unwrap();
    let ua4 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let rtp6 = UdpSocket::bind("[::1]:0").unwrap();
    let rtp4 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (p6, p4) = (ua6.local_addr().unwrap(), ua4.local_addr().unwrap());
    let (r6, r4) = (rtp6.local_addr().unwrap().port(), rtp4.local_addr().unwrap().port());

    let inv = msg(&format!("INVITE sip:bob@{p4} SIP/2.0\r\nVia: SIP/2.0/UDP {p6};branch=z9hG4bK-1\r\nMax-Forwards: 70\r\nFrom: <sip:alice@[::1]>;tag=a\r\nTo: <sip:bob@127.0.0.1>\r\nCall-ID: rc1\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{p6}>\r\n"), &sdp("::1", r6));
    ua6.send_to(&inv, a6).unwrap();
    let inv4 = recv_sip(&ua4);
    let (c, relay4) = media_of(&inv4);
    assert_eq!(c, "127.0.0.1", "the callee is offered the relay's IPv4 address");
    ua4.send_to(&respond(&inv4, "200 OK", "b", &format!("sip:bob@{p4}"), &sdp("127.0.0.1", r4)), a4).unwrap();
    let ok6 = recv_sip(&ua6);
    let (c, relay6) = media_of(&ok6);
    assert_eq!(c, "::1");
    assert_eq!(relay.stats().calls, 1, "media allocated");
    let mut rs = addrs(&ok6, Name::RecordRoute);
    rs.reverse();
    let routes: String = rs.iter().map(|r| format!("Route: <{r}>\r\n")).collect();
    let target = addrs(&ok6, Name::Contact)[0].clone();
    let ack = msg(&format!("ACK {target} SIP/2.0\r\nVia: SIP/2.0/UDP {p6};branch=z9hG4bK-2\r\nMax-Forwards: 70\r\n{routes}From: <sip:alice@[::1]>;tag=a\r\nTo: <sip:bob@127.0.0.1>;tag=b\r\nCall-ID: rc1\r\nCSeq: 1 ACK\r\n"), "");
    ua6.send_to(&ack, a6).unwrap();
    let ack4 = recv_sip_after(&ua4, &inv4);
    assert!(ack4.starts_with(format!("ACK sip:bob@{p4} SIP/2.0").as_bytes()));

    // RTP both ways through the relay.
    let relay6_addr: SocketAddr = format!("[::1]:{relay6}").parse().unwrap();
    let relay4_addr: SocketAddr = format!("127.0.0.1:{relay4}").parse().unwrap();
    rtp6.send_to(&[0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xaa], relay6_addr).unwrap();
    assert_eq!(recv(&rtp4).unwrap().last(), Some(&0xaa), "6 -> 4 relayed");
    rtp4.send_to(&[0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0xbb], relay4_addr).unwrap();
    assert_eq!(recv(&rtp6).unwrap().last(), Some(&0xbb), "4 -> 6 relayed");

    // Handover: alice moves to a new address (new SIP and RTP sockets).
    let ua6b = UdpSocket::bind("[::1]:0").unwrap();
    let rtp6b = UdpSocket::bind("[::1]:0").unwrap();
    let (p6b, r6b) = (ua6b.local_addr().unwrap(), rtp6b.local_addr().unwrap().port());
    let re = msg(&format!("INVITE {target} SIP/2.0\r\nVia: SIP/2.0/UDP {p6b};branch=z9hG4bK-3\r\nMax-Forwards: 70\r\n{routes}From: <sip:alice@[::1]>;tag=a\r\nTo: <sip:bob@127.0.0.1>;tag=b\r\nCall-ID: rc1\r\nCSeq: 2 INVITE\r\nContact: <sip:alice@{p6b}>\r\n"), &sdp("::1", r6b));
    ua6b.send_to(&re, a6).unwrap();
    let re4 = recv_sip(&ua4);
    assert_eq!(media_of(&re4), ("127.0.0.1".to_string(), relay4), "the callee keeps its relay port");
    ua4.send_to(&respond(&re4, "200 OK", "b", &format!("sip:bob@{p4}"), &sdp("127.0.0.1", r4)), a4).unwrap();
    let ok6b = recv_sip(&ua6b);
    assert_eq!(media_of(&ok6b).1, relay6);
    let t0 = Instant::now();
    rtp4.send_to(&[0x80, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0xcc], relay4_addr).unwrap();
    assert_eq!(recv(&rtp6b).unwrap().last(), Some(&0xcc), "media follows the terminal");
    rtp6b.send_to(&[0x80, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0xdd], relay6_addr).unwrap();
    assert_eq!(recv(&rtp4).unwrap().last(), Some(&0xdd));
    assert!(t0.elapsed() < Duration::from_secs(3));
    // The old address is latched out.
    rtp6.send_to(&[0x80, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0xee], relay6_addr).unwrap();
    rtp4.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut b = [0u8; 64];
    assert!(rtp4.recv(&mut b).is_err(), "media from the old address is not relayed");
    assert_eq!(relay.stats().calls, 1, "the call was never torn down");

    // BYE from bob (route set = Record-Route of the INVITE he got).
    let rs4: String = addrs(&inv4, Name::RecordRoute).iter().map(|r| format!("Route: <{r}>\r\n")).collect();
    let alice_target = addrs(&re4, Name::Contact)[0].clone();
    let bye = msg(&format!("BYE {alice_target} SIP/2.0\r\nVia: SIP/2.0/UDP {p4};branch=z9hG4bK-4\r\nMax-Forwards: 70\r\n{rs4}From: <sip:bob@127.0.0.1>;tag=b\r\nTo: <sip:alice@[::1]>;tag=a\r\nCall-ID: rc1\r\nCSeq: 1 BYE\r\n"), "");
    ua4.send_to(&bye, a4).unwrap();
    let bye6 = recv_sip(&ua6b);
    assert!(bye6.starts_with(format!("BYE sip:alice@{p6b} SIP/2.0").as_bytes()), "{}", String::from_utf8_lossy(&bye6));
    ua6b.send_to(&respond(&bye6, "200 OK", "a", &format!("sip:alice@{p6b}"), ""), a6).unwrap();
    assert!(recv_sip_after(&ua4, &re4).starts_with(b"SIP/2.0 200 OK"));
    assert_eq!(relay.stats().calls, 0, "media released");

    // OPTIONS to the ALG over TCP.
    use std::io::{Read, Write};
    let mut t = std::net::TcpStream::connect(a4).unwrap();
    let o = msg(&format!("OPTIONS sip:{a4} SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bK-t\r\nFrom: <sip:x@y>;tag=1\r\nTo: <sip:{a4}>\r\nCall-ID: tcp1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n"), "");
    t.write_all(&o).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 2048];
    let n = t.read(&mut b).unwrap();
    assert!(b[..n].starts_with(b"SIP/2.0 200 OK"), "{}", String::from_utf8_lossy(&b[..n]));

    // Every transaction ends by its timers (T1 = 20 ms; T4 = 5 s).
    let deadline = Instant::now() + Duration::from_secs(15);
    while served.alg.snapshot().tables != (0, 0, 0, 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = served.alg.snapshot();
    assert_eq!(s.tables, (0, 0, 0, 0), "tables empty: {s:?}");
    assert_eq!(s.stats.dialogs_created, 1);
    assert_eq!(s.stats.handovers, 1);
}

#[test]
fn options_over_tcp_and_a_clean_stop() {
    use std::io::{Read, Write};
    let cfg = alg::Config {
        listen_v6: "[::1]:0".parse().unwrap(),
        listen_v4: "127.0.0.1:0".parse().unwrap(),
        media: alg::config::MediaMode::None,
        ..alg::Config::default()
    };
    let h = alg::runner::spawn(cfg, None, Some(Box::new(alg::realm::StaticResolver::default()))).unwrap();
    let a4 = h.udp_v4;
    let mut t = std::net::TcpStream::connect(a4).unwrap();
    let o = msg(&format!("OPTIONS sip:{a4} SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bK-t\r\nFrom: <sip:x@y>;tag=1\r\nTo: <sip:{a4}>\r\nCall-ID: tcp1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\n"), "");
    t.write_all(&o).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 2048];
    let n = t.read(&mut b).unwrap();
    assert!(b[..n].starts_with(b"SIP/2.0 200 OK"), "{}", String::from_utf8_lossy(&b[..n]));
    let t0 = Instant::now();
    h.stop();
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// `media = "ng"`: the core drives a TrGW over the ng protocol (UDP,
/// bencode), here the relay's own ng listener on loopback.
#[test]
fn media_through_a_remote_trgw_over_ng() {
    use alg::media::NgClients;
    use alg::{Alg, Incoming, Peer, Realm, Transport};
    let relay = trgw::Relay::start(relay_config(41400)).unwrap();
    let ng = NgClients::new(&[(relay.ng_addr().unwrap(), 1)], Duration::from_millis(500), 2).unwrap();
    let cfg = alg::Config {
        listen_v6: "[::1]:5060".parse().unwrap(),
        listen_v4: "127.0.0.1:5060".parse().unwrap(),
        media: alg::config::MediaMode::Ng,
        ng: vec![alg::config::NgServer { addr: relay.ng_addr().unwrap(), weight: 1 }],
        ..alg::Config::default()
    };
    let mut core = Alg::new(cfg, Box::new(alg::realm::StaticResolver::default()), Some(Box::new(ng)));
    // The test is the runner: it carries the ng datagrams.
    let ngs = UdpSocket::bind("127.0.0.1:0").unwrap();
    ngs.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let pump = |core: &mut Alg| {
        while let Some((to, d)) = core.poll_media_transmit() {
            ngs.send_to(&d, to).unwrap();
            let mut b = vec![0u8; 65536];
            let (n, from) = ngs.recv_from(&mut b).unwrap();
            core.handle_media_datagram(Instant::now(), from, &b[..n]);
        }
    };
    let p6 = Peer { realm: Realm::V6, transport: Transport::Udp, addr: "[::1]:7000".parse().unwrap(), conn: None };
    let p4 = Peer { realm: Realm::V4, transport: Transport::Udp, addr: "127.0.0.1:7002".parse().unwrap(), conn: None };
    let inv = msg("INVITE sip:bob@127.0.0.1:7002 SIP/2.0\r\nVia: SIP/2.0/UDP [::1]:7000;branch=z9hG4bK-ng1\r\nMax-Forwards: 70\r\nFrom: <sip:alice@[::1]>;tag=a\r\nTo: <sip:bob@127.0.0.1>\r\nCall-ID: ng1\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@[::1]:7000>\r\n", &sdp("::1", 9000));
    let now = Instant::now();
    core.handle(now, Incoming { peer: &p6, data: &inv });
    let out: Vec<_> = std::iter::from_fn(|| core.poll_transmit()).collect();
    assert!(out.iter().all(|t| t.peer.realm == Realm::V6), "only the 100 Trying before the offer's reply");
    assert_eq!(core.media_pending(), 1);
    pump(&mut core);
    let out: Vec<_> = std::iter::from_fn(|| core.poll_transmit()).collect();
    let fwd = out.iter().find(|t| t.peer.realm == Realm::V4).expect("forwarded");
    let (c, port) = media_of(&fwd.data);
    assert_eq!(c, "127.0.0.1");
    assert!((41400..41500).contains(&port));
    assert_eq!(relay.stats().calls, 1);
    core.handle(
        now,
        Incoming { peer: &p4, data: &respond(&fwd.data, "486 Busy Here", "b", "sip:bob@127.0.0.1:7002", "") },
    );
    let out: Vec<_> = std::iter::from_fn(|| core.poll_transmit()).collect();
    assert!(out.iter().any(|t| t.peer.realm == Realm::V6 && t.data.starts_with(b"SIP/2.0 486")));
    pump(&mut core);
    assert_eq!(relay.stats().calls, 0, "deleted over ng");
    assert_eq!(core.media_pending(), 0);
}
