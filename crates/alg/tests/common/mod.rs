//! A scripted pair of user agents around the ALG core: UA6 in the IPv6
//! realm, UA4 in the IPv4 realm, the TrGW core without sockets behind it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alg::media::LocalCore;
use alg::msg::{Message, Name};
use alg::realm::StaticResolver;
use alg::{Alg, Config, Incoming, Peer, Realm, Transmit, Transport};

pub const UA6: &str = "[2001:db8:6::10]:5060";
pub const UA4: &str = "192.0.2.50:5060";

pub struct Lab {
    pub alg: Alg,
    pub trgw: Arc<Mutex<LocalCore>>,
    pub now: Instant,
}

pub fn trgw_config() -> trgw::Config {
    trgw::Config {
        interfaces: vec![
            trgw::config::Interface::new("v6", None, Some("2001:db8::1".parse().unwrap())),
            trgw::config::Interface::new("v4", Some("198.51.100.1".parse().unwrap()), None),
        ],
        port_min: 30000,
        port_max: 30099,
        ..trgw::Config::default()
    }
}

pub fn alg_config() -> Config {
    Config {
        listen_v6: "[2001:db8::1]:5060".parse().unwrap(),
        listen_v4: "192.0.2.1:5060".parse().unwrap(),
        media_v6_interface: Some("v6".into()),
        media_v4_interface: Some("v4".into()),
        ..Config::default()
    }
}

impl Lab {
    pub fn new() -> Lab {
        Lab::with(alg_config(), StaticResolver::default())
    }

    pub fn with(cfg: Config, resolver: StaticResolver) -> Lab {
        Lab::with_resolver(cfg, Box::new(resolver))
    }

    pub fn with_resolver(cfg: Config, resolver: Box<dyn alg::realm::Resolver>) -> Lab {
        let trgw = Arc::new(Mutex::new(LocalCore::new(trgw_config())));
        let alg = Alg::new(cfg, resolver, Some(Box::new(trgw.clone())));
        Lab { alg, trgw, now: Instant::now() }
    }

    pub fn peer(addr: &str) -> Peer {
        let a: std::net::SocketAddr = addr.parse().unwrap();
        Peer { realm: Realm::of(a.ip()), transport: Transport::Udp, addr: a, conn: None }
    }

    /// Delivers `data` from `from` and returns everything the ALG sends.
    pub fn send(&mut self, from: &str, data: &[u8]) -> Vec<Transmit> {
        let p = Lab::peer(from);
        self.alg.handle(self.now, Incoming { peer: &p, data });
        self.drain()
    }

    pub fn drain(&mut self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.alg.poll_transmit()).collect()
    }

    /// Moves the clock and runs timers.
    pub fn advance(&mut self, d: Duration) -> Vec<Transmit> {
        let end = self.now + d;
        let mut out = Vec::new();
        while let Some(t) = self.alg.poll_timeout().filter(|&t| t <= end) {
            self.now = t.max(self.now);
            self.alg.handle_timeout(self.now);
            out.extend(self.drain());
        }
        self.now = end;
        out
    }

    pub fn media_calls(&self) -> usize {
        self.trgw.lock().unwrap().0.call_count()
    }

    /// No transaction, dialog, parked request or media session left.
    pub fn assert_empty(&mut self) {
        self.advance(Duration::from_secs(300));
        assert_eq!(self.alg.table_sizes(), (0, 0, 0, 0), "tables empty");
        assert_eq!(self.media_calls(), 0, "no media session left");
    }
}

pub fn text(t: &Transmit) -> String {
    String::from_utf8_lossy(&t.data).into_owned()
}

/// The one message sent to `addr` (panics otherwise).
pub fn to<'a>(out: &'a [Transmit], addr: &str) -> Vec<&'a Transmit> {
    out.iter().filter(|t| t.peer.addr == addr.parse().unwrap()).collect()
}

pub fn one<'a>(out: &'a [Transmit], addr: &str) -> &'a Transmit {
    let v = to(out, addr);
    assert_eq!(v.len(), 1, "one message to {addr}: {:#?}", out.iter().map(text).collect::<Vec<_>>());
    v[0]
}

pub fn sdp(addr: &str, port: u16) -> String {
    let fam = if addr.contains(':') { "IP6" } else { "IP4" };
    format!("v=0\r\no=- 1 1 IN {fam} {addr}\r\ns=-\r\nc=IN {fam} {addr}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\n")
}

pub fn with_body(head: &str, body: &str) -> Vec<u8> {
    let ct = if body.is_empty() { "" } else { "Content-Type: application/sdp\r\n" };
    format!("{head}{ct}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// An initial INVITE from UA6 to bob at UA4.
pub fn invite6(call_id: &str, body: &str) -> Vec<u8> {
    with_body(
        &format!(
            "INVITE sip:bob@{UA4} SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-inv-{call_id}\r\nMax-Forwards: 70\r\nFrom: <sip:alice@[2001:db8:6::10]>;tag=alice1\r\nTo: <sip:bob@192.0.2.50>\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@{UA6}>\r\n"
        ),
        body,
    )
}

/// The caller's CANCEL of INVITE `inv6` (same Request-URI, Via, From,
/// To, Call-ID and CSeq number).
pub fn cancel_of(inv6: &[u8]) -> Vec<u8> {
    let cancel = String::from_utf8(inv6.to_vec())
        .unwrap()
        .replacen("INVITE sip", "CANCEL sip", 1)
        .replace("CSeq: 1 INVITE", "CSeq: 1 CANCEL");
    (cancel.split("Content-Type").next().unwrap().to_string() + "Content-Length: 0\r\n\r\n").into_bytes()
}

/// A response to `req` (as received by its UAS): Vias, Record-Route,
/// From, To (+tag), Call-ID, CSeq copied.
pub fn respond(
    req: &[u8],
    code: u16,
    reason: &str,
    to_tag: Option<&str>,
    contact: Option<&str>,
    body: &str,
) -> Vec<u8> {
    let m = Message::parse_datagram(req).unwrap();
    let mut s = format!("SIP/2.0 {code} {reason}\r\n");
    for h in &m.headers {
        match h.name {
            Name::Via | Name::RecordRoute | Name::From | Name::CallId | Name::CSeq => {
                s.push_str(h.line);
                s.push_str("\r\n");
            }
            Name::To => {
                s.push_str(h.line);
                if let (Some(t), None) = (to_tag, m.to_tag()) {
                    s.push_str(";tag=");
                    s.push_str(t);
                }
                s.push_str("\r\n");
            }
            _ => {}
        }
    }
    if let Some(c) = contact {
        s.push_str(&format!("Contact: <{c}>\r\n"));
    }
    with_body(&s, body)
}

/// The Record-Route entries of a message, in order.
pub fn record_route(data: &[u8]) -> Vec<String> {
    let m = Message::parse_datagram(data).unwrap();
    m.all(Name::RecordRoute)
        .flat_map(|h| alg::msg::addresses(&h.value).into_iter().map(|a| a.uri.to_string()).collect::<Vec<_>>())
        .collect()
}

pub fn contact_uri(data: &[u8]) -> String {
    let m = Message::parse_datagram(data).unwrap();
    alg::msg::addresses(m.header(Name::Contact).unwrap())[0].uri.to_string()
}

pub fn header(data: &[u8], n: Name) -> Option<String> {
    Message::parse_datagram(data).unwrap().header(n).map(str::to_string)
}

pub fn request_uri(data: &[u8]) -> String {
    match Message::parse_datagram(data).unwrap().start {
        alg::msg::Start::Request { uri, .. } => uri.to_string(),
        _ => panic!("not a request"),
    }
}

pub fn body(data: &[u8]) -> String {
    String::from_utf8(Message::parse_datagram(data).unwrap().body.to_vec()).unwrap()
}

pub fn code(data: &[u8]) -> u16 {
    Message::parse_datagram(data).unwrap().code().unwrap()
}

/// An in-dialog request: route set and remote target given.
#[allow(clippy::too_many_arguments)]
pub fn in_dialog(
    method: &str,
    target: &str,
    routes: &[String],
    via: &str,
    branch: &str,
    from: &str,
    to: &str,
    call_id: &str,
    cseq: u32,
    contact: Option<&str>,
    body: &str,
) -> Vec<u8> {
    let mut s = format!("{method} {target} SIP/2.0\r\nVia: SIP/2.0/UDP {via};branch={branch}\r\nMax-Forwards: 70\r\n");
    for r in routes {
        s.push_str(&format!("Route: <{r}>\r\n"));
    }
    s.push_str(&format!(
        "From: {from}\r\nTo: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq} {}\r\n",
        if method == "ACK" { "ACK" } else { method }
    ));
    if let Some(c) = contact {
        s.push_str(&format!("Contact: <{c}>\r\n"));
    }
    with_body(&s, body)
}
