//! Entry point: the ALG core with the TrGW core behind it. The input is
//! split into an SDP offer and answer (on the first 0xff byte) carried by
//! an INVITE from the IPv6 realm and its 200 from the IPv4 realm, then
//! BYE; any body is rewritten or refused, nothing panics, and once the
//! timers ran out no transaction, dialog or media session is left.
#![no_main]

use std::time::{Duration, Instant};

use alg::media::LocalCore;
use alg::msg::{Message, Name};
use alg::realm::StaticResolver;
use alg::{Alg, Config, Incoming, Peer, Realm, Transport};
use libfuzzer_sys::fuzz_target;

fn respond(req: &[u8], code: &str, body: &[u8]) -> Vec<u8> {
    let Ok(m) = Message::parse_datagram(req) else { return Vec::new() };
    let mut s = format!("SIP/2.0 {code}\r\n");
    for h in &m.headers {
        match h.name {
            Name::Via | Name::RecordRoute | Name::From | Name::CallId | Name::CSeq => s.push_str(&format!("{}\r\n", h.line)),
            Name::To => s.push_str(&format!("{};tag=b\r\n", h.line)),
            _ => {}
        }
    }
    let mut v = format!("Contact: <sip:bob@192.0.2.50>\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    let mut out = s.into_bytes();
    out.append(&mut v);
    out.extend_from_slice(body);
    out
}

fuzz_target!(|data: &[u8]| {
    let (offer, answer) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let trgw_cfg = trgw::Config {
        interfaces: vec![
            trgw::config::Interface::new("v6", None, Some("2001:db8::1".parse().unwrap())),
            trgw::config::Interface::new("v4", Some("192.0.2.1".parse().unwrap()), None),
        ],
        port_min: 30000,
        port_max: 30199,
        ..trgw::Config::default()
    };
    let cfg = Config { listen_v6: "[2001:db8::1]:5060".parse().unwrap(), listen_v4: "192.0.2.1:5060".parse().unwrap(), ..Config::default() };
    let media = std::sync::Arc::new(std::sync::Mutex::new(LocalCore::new(trgw_cfg)));
    let mut alg = Alg::new(cfg, Box::new(StaticResolver::default()), Some(Box::new(media.clone())));
    let p6 = Peer { realm: Realm::V6, transport: Transport::Udp, addr: "[2001:db8:6::10]:5060".parse().unwrap(), conn: None };
    let p4 = Peer { realm: Realm::V4, transport: Transport::Udp, addr: "192.0.2.50:5060".parse().unwrap(), conn: None };
    let now = Instant::now();
    let mut inv = format!("INVITE sip:bob@192.0.2.50 SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8:6::10]:5060;branch=z9hG4bK1\r\nFrom: <sip:a@[2001:db8:6::10]>;tag=a\r\nTo: <sip:bob@192.0.2.50>\r\nCall-ID: fz\r\nCSeq: 1 INVITE\r\nContact: <sip:a@[2001:db8:6::10]>\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n", offer.len()).into_bytes();
    inv.extend_from_slice(offer);
    alg.handle(now, Incoming { peer: &p6, data: &inv });
    let mut fwd = Vec::new();
    while let Some(t) = alg.poll_transmit() {
        if t.peer.realm == Realm::V4 {
            fwd = t.data;
        }
    }
    if !fwd.is_empty() {
        alg.handle(now, Incoming { peer: &p4, data: &respond(&fwd, "200 OK", answer) });
        while alg.poll_transmit().is_some() {}
        let bye = b"BYE sip:a@[2001:db8:6::10] SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.50:5060;branch=z9hG4bK2\r\nRoute: <sip:192.0.2.1:5060;lr;r2=on>, <sip:[2001:db8::1]:5060;lr;r2=on>\r\nFrom: <sip:bob@192.0.2.50>;tag=b\r\nTo: <sip:a@[2001:db8:6::10]>;tag=a\r\nCall-ID: fz\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";
        alg.handle(now, Incoming { peer: &p4, data: bye });
        let mut b6 = Vec::new();
        while let Some(t) = alg.poll_transmit() {
            if t.peer.realm == Realm::V6 {
                b6 = t.data;
            }
        }
        if !b6.is_empty() {
            alg.handle(now, Incoming { peer: &p6, data: &respond(&b6, "200 OK", b"") });
        }
    }
    let later = now + Duration::from_secs(8000);
    alg.handle_timeout(later);
    while alg.poll_transmit().is_some() {}
    assert_eq!(alg.table_sizes(), (0, 0, 0, 0));
    assert_eq!(media.lock().unwrap().0.call_count(), 0);
});
