//! The ALG between two real realms (network namespaces, root): an
//! IPv6-only UA (no IPv4 address at all) calls an IPv4-only UA (IPv6
//! disabled) through the ALG and its in-process TrGW in a gateway
//! namespace; SDP is rewritten for each realm, RTP flows both ways, BYE
//! releases the media. Namespaces are unique and removed on drop.

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use alg::msg::{Message, Name};
use lab::netns::{veth, Netns};

#[path = "common/wire.rs"]
mod wire;
use wire::*;

#[test]
fn an_ipv6_only_ua_calls_an_ipv4_only_ua_through_the_gateway() {
    lab::need_root!();
    let gw = Netns::unique("alg-gw").unwrap();
    let n6 = Netns::unique("alg-ua6").unwrap();
    let n4 = Netns::unique("alg-ua4").unwrap();
    let tag = &gw.name()[gw.name().len() - 5..];
    let (g6, u6, g4, u4) = (format!("g6{tag}"), format!("u6{tag}"), format!("g4{tag}"), format!("u4{tag}"));
    veth(&gw, &g6, &n6, &u6).unwrap();
    veth(&gw, &g4, &n4, &u4).unwrap();
    for ns in [&gw, &n6, &n4] {
        ns.ip(&["link", "set", "lo", "up"]).unwrap();
    }
    gw.ip(&["-6", "addr", "add", "2001:db8:6::1/64", "dev", &g6, "nodad"]).unwrap();
    n6.ip(&["-6", "addr", "add", "2001:db8:6::10/64", "dev", &u6, "nodad"]).unwrap();
    gw.ip(&["addr", "add", "192.0.2.1/24", "dev", &g4]).unwrap();
    n4.ip(&["addr", "add", "192.0.2.50/24", "dev", &u4]).unwrap();
    n4.sysctl("net.ipv6.conf.all.disable_ipv6", "1").unwrap();

    // The gateway: TrGW + ALG, sockets bound inside its namespace.
    let (relay, served) = gw
        .run(|| {
            let relay = Arc::new(trgw::Relay::start(trgw::Config {
                interfaces: vec![
                    trgw::config::Interface::new("v6", None, Some("2001:db8:6::1".parse().unwrap())),
                    trgw::config::Interface::new("v4", Some("192.0.2.1".parse().unwrap()), None),
                ],
                port_min: 30000,
                port_max: 30099,
                ng: Some("127.0.0.1:2223".parse().unwrap()),
                rtpproxy_udp: None,
                io: trgw::IoMode::Poll,
                workers: Some(1),
                ..trgw::Config::default()
            })?);
            let cfg = alg::Config {
                listen_v6: "[2001:db8:6::1]:5060".parse().unwrap(),
                listen_v4: "192.0.2.1:5060".parse().unwrap(),
                media_v6_interface: Some("v6".into()),
                media_v4_interface: Some("v4".into()),
                ..alg::Config::default()
            };
            let served = alg::cli::serve(cfg, Some(relay.clone()))?;
            Ok((relay, served))
        })
        .unwrap();
    let (sip6, rtp6) =
        n6.run(|| Ok((UdpSocket::bind("[2001:db8:6::10]:5060")?, UdpSocket::bind("[2001:db8:6::10]:4000")?))).unwrap();
    let (sip4, rtp4) =
        n4.run(|| Ok((UdpSocket::bind("192.0.2.50:5060")?, UdpSocket::bind("192.0.2.50:5000")?))).unwrap();
    let alg6 = "[2001:db8:6::1]:5060";
    let alg4 = "192.0.2.1:5060";

    let inv = msg("INVITE sip:bob@192.0.2.50 SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8:6::10]:5060;branch=z9hG4bK-ns1\r\nMax-Forwards: 70\r\nFrom: <sip:alice@[2001:db8:6::10]>;tag=a\r\nTo: <sip:bob@192.0.2.50>\r\nCall-ID: ns1\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@[2001:db8:6::10]>\r\n", &sdp("2001:db8:6::10", 4000));
    sip6.send_to(&inv, alg6).unwrap();
    let inv4 = recv_sip(&sip4);
    // What the IPv4 UA must reach is IPv4: the Contact, the Record-Route it
    // will use, the SDP (From and the UA's Via keep their IPv6 text).
    let m4 = Message::parse_datagram(&inv4).unwrap();
    let contact = alg::msg::addresses(m4.header(Name::Contact).unwrap())[0].uri.to_string();
    assert!(contact.ends_with("@192.0.2.1:5060"), "{contact}");
    assert!(m4.header(Name::RecordRoute).unwrap().starts_with("<sip:192.0.2.1:5060;lr;r2=on>"));
    assert!(!String::from_utf8_lossy(m4.body).contains("IP6"));
    let (c4, relay4) = media_of(&inv4);
    assert_eq!(c4, "192.0.2.1");
    sip4.send_to(&respond(&inv4, "200 OK", "b", "sip:bob@192.0.2.50", &sdp("192.0.2.50", 5000)), alg4).unwrap();
    let ok6 = recv_sip(&sip6);
    let (c6, relay6) = media_of(&ok6);
    assert_eq!(c6, "2001:db8:6::1");

    rtp6.send_to(b"\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01six", format!("[2001:db8:6::1]:{relay6}")).unwrap();
    rtp4.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 64];
    let n = rtp4.recv(&mut b).unwrap();
    assert_eq!(&b[12..n], b"six");
    rtp4.send_to(b"\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02four", format!("192.0.2.1:{relay4}")).unwrap();
    rtp6.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let n = rtp6.recv(&mut b).unwrap();
    assert_eq!(&b[12..n], b"four");
    assert_eq!(relay.stats().calls, 1);

    // BYE from the IPv4 side along its route set.
    let routes: String = m4.all(Name::RecordRoute).map(|h| format!("Route: {}\r\n", h.value)).collect();
    let target = alg::msg::addresses(m4.header(Name::Contact).unwrap())[0].uri.to_string();
    let bye = msg(&format!("BYE {target} SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.50:5060;branch=z9hG4bK-ns2\r\nMax-Forwards: 70\r\n{routes}From: <sip:bob@192.0.2.50>;tag=b\r\nTo: <sip:alice@[2001:db8:6::10]>;tag=a\r\nCall-ID: ns1\r\nCSeq: 1 BYE\r\n"), "");
    sip4.send_to(&bye, alg4).unwrap();
    let bye6 = recv_sip(&sip6);
    assert!(bye6.starts_with(b"BYE sip:alice@[2001:db8:6::10] SIP/2.0"));
    sip6.send_to(&respond(&bye6, "200 OK", "a", "sip:alice@[2001:db8:6::10]", ""), alg6).unwrap();
    assert!(recv_sip(&sip4).starts_with(b"SIP/2.0 200 OK"));
    assert_eq!(relay.stats().calls, 0, "media released");
    // The snapshot is written right after the sends of the same event.
    let t0 = std::time::Instant::now();
    while served.alg.snapshot().tables.2 != 0 && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(served.alg.snapshot().tables.2, 0, "dialog released");
    drop(served);
}
