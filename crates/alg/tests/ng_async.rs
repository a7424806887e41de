//! `media = "ng"` without blocking: the core hands ng commands to the
//! remote servers and goes on serving; replies resume the messages that
//! wait for them, in each call's order. Driven without sockets: the test
//! carries the datagrams between the core and a TrGW core playing the
//! remote server (or a server that never answers).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use alg::media::{LocalCore, MediaControl, NgClients};
use alg::realm::StaticResolver;
use alg::{Alg, Incoming, Peer, Realm, Transmit, Transport};
use trgw::bencode;

mod common;
use common::{sdp, trgw_config, with_body};

const UA6: &str = "[2001:db8:6::10]:5060";
const UA4: &str = "192.0.2.50:5060";

struct Net {
    alg: Alg,
    /// The server that answers (a TrGW core).
    trgw: LocalCore,
    live: SocketAddr,
    now: Instant,
    /// Datagrams the core sent and the test holds back.
    held: Vec<(SocketAddr, Vec<u8>)>,
}

fn peer(a: &str) -> Peer {
    let a: SocketAddr = a.parse().unwrap();
    Peer { realm: Realm::of(a.ip()), transport: Transport::Udp, addr: a, conn: None }
}

impl Net {
    /// `dead`: a first server that never answers (higher weight: tried first).
    fn new(dead: bool) -> Net {
        let live: SocketAddr = "127.0.0.1:2223".parse().unwrap();
        let mut servers = vec![(live, 1)];
        if dead {
            servers.insert(0, ("127.0.0.1:2224".parse().unwrap(), 1000));
        }
        let ng = NgClients::new(&servers, Duration::from_millis(500), 2).unwrap();
        let mut cfg = common::alg_config();
        cfg.media = alg::config::MediaMode::Ng;
        cfg.ng = servers.iter().map(|&(addr, weight)| alg::config::NgServer { addr, weight }).collect();
        let alg = Alg::new(cfg, Box::new(StaticResolver::default()), Some(Box::new(ng)));
        Net { alg, trgw: LocalCore::new(trgw_config()), live, now: Instant::now(), held: Vec::new() }
    }

    fn send(&mut self, from: &str, data: &[u8]) -> Vec<Transmit> {
        self.alg.handle(self.now, Incoming { peer: &peer(from), data });
        self.collect()
    }

    /// Takes the ng datagrams the core wants sent (held until answered).
    fn collect(&mut self) -> Vec<Transmit> {
        while let Some(d) = self.alg.poll_media_transmit() {
            self.held.push(d);
        }
        std::iter::from_fn(|| self.alg.poll_transmit()).collect()
    }

    /// The live server answers held datagram `i` (the others stay held).
    fn answer(&mut self, i: usize) -> Vec<Transmit> {
        let (to, d) = self.held.remove(i);
        assert_eq!(to, self.live, "sent to the live server");
        let (cookie, req) = bench_parse(&d);
        let reply = self.trgw.command(&req).unwrap();
        let mut out = cookie.to_vec();
        out.push(b' ');
        reply.encode_into(&mut out);
        self.alg.handle_media_datagram(self.now, to, &out);
        self.collect()
    }

    /// The command of held datagram `i`.
    fn command_of(&self, i: usize) -> String {
        let (_, v) = bench_parse(&self.held[i].1);
        v.get("command").and_then(bencode::Value::as_str).unwrap().to_string()
    }

    fn advance(&mut self, d: Duration) -> Vec<Transmit> {
        let end = self.now + d;
        let mut out = Vec::new();
        while let Some(t) = self.alg.poll_timeout().filter(|&t| t <= end) {
            self.now = t.max(self.now);
            self.alg.handle_timeout(self.now);
            out.extend(self.collect());
        }
        self.now = end;
        out
    }
}

fn bench_parse(d: &[u8]) -> (&[u8], bencode::Value) {
    let sp = d.iter().position(|&c| c == b' ').unwrap();
    (&d[..sp], bencode::decode(&d[sp + 1..]).unwrap())
}

fn invite(call: &str, branch: &str) -> Vec<u8> {
    with_body(
        &format!(
            "INVITE sip:bob@{UA4} SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch={branch}\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@[2001:db8:6::10]>;tag=a-{call}\r\nTo: <sip:bob@192.0.2.50>\r\nCall-ID: {call}\r\n\
             CSeq: 1 INVITE\r\nContact: <sip:alice@{UA6}>\r\n"
        ),
        &sdp("2001:db8:6::10", 9000),
    )
}

fn to4(out: &[Transmit]) -> Vec<String> {
    out.iter().filter(|t| t.peer.realm == Realm::V4).map(|t| String::from_utf8_lossy(&t.data).into_owned()).collect()
}

#[test]
fn a_waiting_offer_does_not_hold_up_other_calls() {
    let mut n = Net::new(false);
    let out = n.send(UA6, &invite("c1", "z9hG4bK-1"));
    assert!(to4(&out).is_empty(), "the INVITE waits for its offer");
    assert!(out.iter().any(|t| t.data.starts_with(b"SIP/2.0 100")), "100 Trying at once");
    let out = n.send(UA6, &invite("c2", "z9hG4bK-2"));
    assert!(to4(&out).is_empty());
    assert_eq!((n.held.len(), n.alg.media_pending()), (2, 2), "both offers sent, neither waited for the other");
    // The second call's reply comes first: its INVITE goes first.
    let out = n.answer(1);
    let f = to4(&out);
    assert!(f.len() == 1 && f[0].contains("Call-ID: c2"), "{f:?}");
    let out = n.answer(0);
    let f = to4(&out);
    assert!(f.len() == 1 && f[0].contains("Call-ID: c1") && f[0].contains("c=IN IP4 198.51.100.1"), "{f:?}");
    assert_eq!(n.alg.media_pending(), 0);
}

#[test]
fn cancel_while_the_offer_waits_deletes_its_session() {
    let mut n = Net::new(false);
    n.send(UA6, &invite("c3", "z9hG4bK-3"));
    let cancel = with_body(
        &format!(
            "CANCEL sip:bob@{UA4} SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-3\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@[2001:db8:6::10]>;tag=a-c3\r\nTo: <sip:bob@192.0.2.50>\r\nCall-ID: c3\r\nCSeq: 1 CANCEL\r\n"
        ),
        "",
    );
    let out = n.send(UA6, &cancel);
    let codes: Vec<&[u8]> = out.iter().map(|t| &t.data[..11]).collect();
    assert!(codes.contains(&&b"SIP/2.0 200"[..]) && codes.contains(&&b"SIP/2.0 487"[..]), "{codes:?}");
    // The offer's reply comes after all: the INVITE is not forwarded, and
    // the session the offer made is deleted (after it, in the call's order).
    let out = n.answer(0);
    assert!(to4(&out).is_empty(), "a cancelled INVITE is not forwarded");
    assert_eq!(n.trgw.0.call_count(), 1);
    assert!(!n.held.is_empty() && n.command_of(0) == "delete", "the session is deleted");
    while !n.held.is_empty() {
        n.answer(0);
    }
    assert_eq!(n.trgw.0.call_count(), 0, "no session left");
    n.advance(Duration::from_secs(300));
    assert_eq!(n.alg.table_sizes(), (0, 0, 0, 0));
    assert_eq!(n.alg.media_pending(), 0);
}

#[test]
fn a_dead_server_is_skipped_and_the_call_goes_on() {
    let mut n = Net::new(true);
    n.send(UA6, &invite("c4", "z9hG4bK-4"));
    let dead: SocketAddr = "127.0.0.1:2224".parse().unwrap();
    assert_eq!(n.held[0].0, dead, "the heavier server first");
    n.held.clear();
    // Meanwhile another request is served at once.
    let opt = with_body(
        "OPTIONS sip:192.0.2.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.50:5060;branch=z9hG4bK-o\r\nMax-Forwards: 70\r\n\
         From: <sip:x@y>;tag=o\r\nTo: <sip:192.0.2.1>\r\nCall-ID: o1\r\nCSeq: 1 OPTIONS\r\n",
        "",
    );
    let out = n.send(UA4, &opt);
    assert!(out.iter().any(|t| t.data.starts_with(b"SIP/2.0 200")), "OPTIONS answered while the offer waits");
    // Two retries on the dead one (same cookie), then the live one.
    n.advance(Duration::from_millis(1600));
    let retries = n.held.iter().filter(|(to, _)| *to == dead).count();
    assert_eq!(retries, 2, "two retries to the dead server");
    assert!(n.held.iter().any(|(to, _)| *to == n.live), "failed over to the live server");
    n.held.retain(|(to, _)| *to != dead);
    let out = n.answer(0);
    assert_eq!(to4(&out).len(), 1, "forwarded once the live server answered");
}

#[test]
fn no_server_answers_the_caller_gets_503_and_nothing_is_left() {
    let mut n = Net::new(false);
    n.send(UA6, &invite("c5", "z9hG4bK-5"));
    n.held.clear(); // the only server never answers
    let out = n.advance(Duration::from_secs(2));
    let to6: Vec<String> = out.iter().map(|t| String::from_utf8_lossy(&t.data).into_owned()).collect();
    assert!(to6.iter().any(|m| m.starts_with("SIP/2.0 503 Media relay unavailable")), "{to6:?}");
    assert_eq!(n.alg.media_pending(), 0);
    assert_eq!(n.alg.stats.media_errors, 1);
    n.advance(Duration::from_secs(300));
    assert_eq!(n.alg.table_sizes(), (0, 0, 0, 0));
}
