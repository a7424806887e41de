//! Issue #29 in the core (no sockets): budgets per client, not per
//! address (D1, D3), requests waiting for DNS (D1), the next hops the ALG
//! refuses (D2: its own listeners), the prompt answer to a request that
//! grew too large (oversize), multipart SDP (item 4) and the IPv4-mapped
//! Request-URI (issue #32 defect 3).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use alg::realm::StaticResolver;
use alg::stats::Refusal;
use common::*;

/// A source address of the caller's /64 (2001:db8:6::/64), `i` apart.
fn addr6(i: u32) -> String {
    format!("[2001:db8:6::{:x}:{:x}]:5060", 0x100 + (i >> 16), i & 0xffff)
}

fn options(from: &str, target: &str, n: u32) -> Vec<u8> {
    format!("OPTIONS {target} SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-o{n}\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: o{n}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

fn refused(lab: &Lab, why: Refusal) -> u64 {
    lab.alg.stats.refused[why.index()]
}

/// D1: the rate limit counts a client (its /64), not each address, so a
/// host spreading its flood over its addresses is held to one budget.
#[test]
fn the_rate_limit_is_per_client_across_the_addresses_of_a_64() {
    let mut cfg = alg_config();
    cfg.rate_limit = 10;
    let mut lab = Lab::with(cfg, Default::default());
    let mut answered = 0;
    for i in 0..100 {
        answered += lab.send(&addr6(i), &options(&addr6(i), "sip:[2001:db8::1]:5060", i)).len();
    }
    assert_eq!(answered, 20, "one burst for the whole /64");
    assert_eq!(lab.alg.stats.rate_limited, 80);
    // Another /64 has a budget of its own.
    let other = "[2001:db8:7::5]:5060";
    assert_eq!(code(&one(&lab.send(other, &options(other, "sip:[2001:db8::1]:5060", 999)), other).data), 200);
    lab.assert_empty();
}

/// An INVITE of about `pad` bytes from `from` to a silent callee.
fn padded_invite(from: &str, n: u32, pad: usize) -> Vec<u8> {
    let s = String::from_utf8(invite6(&format!("pad{n}"), &sdp("2001:db8:6::10", 4000))).unwrap();
    s.replace(&format!("Via: SIP/2.0/UDP {UA6};"), &format!("Via: SIP/2.0/UDP {from};"))
        .replacen("Max-Forwards: 70\r\n", &format!("Max-Forwards: 70\r\nX-Pad: {}\r\n", "p".repeat(pad)), 1)
        .into_bytes()
}

/// D3: transactions are bounded in bytes, globally and per client; a
/// client over its share gets 503 with Retry-After while another client's
/// call goes through, and everything held is given back by the timers.
#[test]
fn padded_invites_meet_the_byte_budget_of_their_client() {
    let mut cfg = alg_config();
    cfg.rate_limit = 0;
    cfg.max_state_bytes = 2 << 20;
    cfg.client_share = 25;
    let mut lab = Lab::with(cfg, Default::default());
    let share = lab.alg.budgets().state.share();
    assert_eq!(share, (2 << 20) / 4);
    let (mut forwarded, mut unavailable) = (0, 0);
    for i in 0..200 {
        let from = addr6(i);
        let out = lab.send(&from, &padded_invite(&from, i, 20_000));
        forwarded += to(&out, UA4).len();
        for t in to(&out, &from) {
            if code(&t.data) == 503 {
                assert!(text(t).contains("\r\nRetry-After: 5\r\n"), "{}", text(t));
                unavailable += 1;
            }
        }
    }
    let held = lab.alg.budgets().state.held_by(alg::shares::ClientKey::of("2001:db8:6::1".parse().unwrap(), 64));
    assert!(held <= share, "the client holds {held} of its share {share}");
    assert!(forwarded > 5 && forwarded < 60, "{forwarded} forwarded");
    assert_eq!(forwarded + unavailable, 200);
    assert_eq!(refused(&lab, Refusal::ClientShare), unavailable as u64);
    // Another client (the IPv4 realm) still calls.
    let inv4 = format!("INVITE sip:alice@[2001:db8:6::10] SIP/2.0\r\nVia: SIP/2.0/UDP {UA4};branch=z9hG4bK-v4\r\nMax-Forwards: 70\r\nFrom: <sip:bob@192.0.2.50>;tag=b\r\nTo: <sip:alice@[2001:db8:6::10]>\r\nCall-ID: v4call\r\nCSeq: 1 INVITE\r\n");
    let out = lab.send(UA4, &with_body(&inv4, &sdp("192.0.2.50", 5000)));
    assert_eq!(to(&out, UA6).len(), 1, "forwarded to the IPv6 UA");
    lab.assert_empty();
    assert_eq!(lab.alg.budgets().state.used(), 0, "every byte given back");
    assert_eq!(lab.alg.budgets().transactions.used(), 0);
}

/// D3: a transaction holds the bytes it needs once: once the callee
/// answers, the forwarded copy of a large INVITE shrinks to what CANCEL
/// and ACK need.
#[test]
fn an_answered_invite_keeps_only_what_cancel_and_ack_need() {
    let mut lab = Lab::new();
    let inv = padded_invite(UA6, 1, 30_000);
    let out = lab.send(UA6, &inv);
    let fwd = one(&out, UA4).data.clone();
    let before = lab.alg.budgets().state.used();
    assert!(before > 30_000, "the forwarded copy is held while it may be retransmitted: {before}");
    lab.send(UA4, &respond(&fwd, 180, "Ringing", Some("b"), Some("sip:bob@192.0.2.50"), ""));
    let after = lab.alg.budgets().state.used();
    assert!(after < 10_000, "no second copy of the padding once nothing retransmits: {after}");
    lab.send(UA4, &respond(&fwd, 486, "Busy Here", Some("b"), None, ""));
    lab.assert_empty();
}

/// D1: a request waits for its own lookup only; a retransmission is not
/// parked twice; the answer runs it without the rate limiter (it passed it
/// when it came); a lookup that never finishes gives 504.
#[test]
fn requests_wait_for_their_own_lookup_and_run_once_with_its_answer() {
    let mut r = StaticResolver::default();
    r.add("a.example", "192.0.2.50:5060".parse().unwrap(), alg::Transport::Udp);
    r.add("b.example", "192.0.2.51:5060".parse().unwrap(), alg::Transport::Udp);
    r.hold("a.example");
    r.hold("b.example");
    r.hold("dead.example");
    let mut cfg = alg_config();
    cfg.rate_limit = 1; // a burst of two
    cfg.dns_timeout = Duration::from_secs(2);
    let r = Arc::new(Mutex::new(r));
    let mut lab = Lab::with_resolver(cfg, Box::new(r.clone()));
    let ia = options(UA6, "sip:x@a.example", 1);
    assert!(lab.send(UA6, &ia).is_empty(), "parked");
    assert!(lab.send(UA6, &options(UA6, "sip:x@b.example", 2)).is_empty());
    assert_eq!(lab.alg.table_sizes().3, 2);
    // Over the rate now: a retransmission is dropped before the parking.
    assert!(lab.send(UA6, &ia).is_empty());
    assert_eq!(lab.alg.stats.rate_limited, 1);
    assert_eq!(lab.alg.table_sizes().3, 2, "not parked twice");
    // a.example answers: only its request runs, and it is not rate-limited.
    r.lock().unwrap().release("a.example");
    lab.alg.dns_completed(lab.now);
    let out = lab.drain();
    assert_eq!(out.len(), 1, "{:?}", out.iter().map(text).collect::<Vec<_>>());
    assert_eq!(out[0].peer.addr, "192.0.2.50:5060".parse().unwrap());
    assert_eq!(lab.alg.stats.rate_limited, 1, "the parked request passed the limiter once");
    assert_eq!(lab.alg.table_sizes().3, 1, "b.example's request still waits");
    // A retransmission while parked is absorbed, not parked again.
    lab.advance(Duration::from_secs(1));
    let absorbed = lab.alg.stats.retransmissions_absorbed;
    assert!(lab.send(UA6, &options(UA6, "sip:x@b.example", 2)).is_empty());
    assert_eq!(lab.alg.stats.retransmissions_absorbed, absorbed + 1);
    assert_eq!(lab.alg.table_sizes().3, 1);
    // b.example never answers: 504 at dns-timeout + 1 s.
    let out = lab.advance(Duration::from_secs(3));
    assert_eq!(code(&one(&out, UA6).data), 504);
    assert_eq!(refused(&lab, Refusal::DnsTimeout), 1);
    assert_eq!(lab.alg.budgets().parked.used(), 0, "parked bytes given back");
    lab.assert_empty();
}

/// D1: parked requests are bounded in bytes per client: past its share a
/// client gets 503, and the others still park.
#[test]
fn parked_requests_meet_the_parked_bytes_budget() {
    let mut r = StaticResolver::default();
    r.hold("slow.example");
    let mut cfg = alg_config();
    cfg.rate_limit = 0;
    cfg.max_parked_bytes = 200_000;
    cfg.client_share = 25;
    let mut lab = Lab::with(cfg, r);
    let mut unavailable = 0;
    for i in 0..20 {
        let from = addr6(i);
        let m = String::from_utf8(options(&from, "sip:x@slow.example", i))
            .unwrap()
            .replace("Content-Length: 0\r\n", &format!("X-Pad: {}\r\nContent-Length: 0\r\n", "p".repeat(9_000)));
        let out = lab.send(&from, m.as_bytes());
        unavailable += to(&out, &from).iter().filter(|t| code(&t.data) == 503).count();
    }
    assert_eq!(lab.alg.table_sizes().3, 5, "50 kB of parked requests per client, 9 kB each");
    assert_eq!(unavailable, 15);
    assert_eq!(refused(&lab, Refusal::Parked), 15);
    assert!(lab.send(UA4, &options(UA4, "sip:y@slow.example", 100)).is_empty(), "another client parks");
    assert_eq!(lab.alg.table_sizes().3, 6);
    lab.advance(Duration::from_secs(10));
    assert_eq!(lab.alg.budgets().parked.used(), 0);
    lab.assert_empty();
}

/// D2: a next hop that is one of the ALG's own listeners is a loop, refused
/// at once (482) instead of forwarded to itself.
#[test]
fn the_alg_is_not_its_own_next_hop() {
    let mut lab = Lab::new();
    for (n, target) in
        ["sip:bob@192.0.2.1:5060", "sip:bob@[2001:db8::1]:5060", "sip:bob@[::ffff:192.0.2.1]"].iter().enumerate()
    {
        let out = lab.send(UA6, &options(UA6, target, n as u32));
        assert_eq!(out.len(), 1, "{target}: only the answer");
        assert_eq!(code(&one(&out, UA6).data), 482, "{target}");
    }
    assert_eq!(refused(&lab, Refusal::OwnListener), 3);
    lab.assert_empty();
}

/// D2: every next hop goes through the destination policy: loopback
/// (however it is named: a literal, IPv4-mapped, `maddr`, a Route, over
/// TCP), the gateway's own addresses; refused with 403 and nothing sent
/// there. A response forwarded by its next Via is held to the same.
#[test]
fn next_hops_the_policy_refuses_get_403_and_nothing_goes_there() {
    let mut lab = Lab::new();
    let own: Vec<xlat::addr::IpPrefix> =
        ["198.51.100.1/32", "2001:db8::1/128"].iter().map(|p| p.parse().unwrap()).collect();
    let gw = std::sync::Arc::new(dstpolicy::Gateway::new(dstpolicy::Spec { own, embeddings: Default::default() }));
    lab.alg.set_policy(Arc::new(dstpolicy::Policy::new("alg", gw, Default::default())));
    let targets = [
        "sip:x@127.0.0.1:22",
        "sip:x@127.0.0.2",
        "sip:x@[::1]:5070",
        "sip:x@[::ffff:127.0.0.1]:2223",
        "sip:x@192.0.2.50;maddr=127.0.0.1",
        "sip:x@127.0.0.1:9164;transport=tcp",
        "sip:x@198.51.100.1:2223",
        "sip:x@[64:ff9b::c633:6401]",
    ];
    for (n, t) in targets.iter().enumerate() {
        let out = lab.send(UA6, &options(UA6, t, n as u32));
        assert_eq!(out.len(), 1, "{t}: {:?}", out.iter().map(text).collect::<Vec<_>>());
        assert_eq!(code(&one(&out, UA6).data), 403, "{t}");
    }
    // A Route naming loopback, the Request-URI fine.
    let r = String::from_utf8(options(UA6, "sip:x@192.0.2.50", 50))
        .unwrap()
        .replace("From: ", "Route: <sip:127.0.0.1:5080;lr>\r\nFrom: ");
    assert_eq!(code(&one(&lab.send(UA6, r.as_bytes()), UA6).data), 403);
    assert_eq!(refused(&lab, Refusal::NextHop), targets.len() as u64 + 1);
    // A 2xx with our Via on top and loopback next: not forwarded.
    let stray = "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-v6g1-x, SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bK-a\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: s\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    assert!(lab.send(UA4, stray.as_bytes()).is_empty());
    assert_eq!(refused(&lab, Refusal::NextHop), targets.len() as u64 + 2);
    // Allowed destinations still go.
    assert_eq!(one(&lab.send(UA6, &options(UA6, "sip:x@192.0.2.50", 99)), UA4).peer.addr.port(), 5060);
    lab.assert_empty();
}

/// Issue #32 defect 3: an IPv4-mapped Request-URI going into the IPv4
/// realm is written in the dotted form.
#[test]
fn an_ipv4_mapped_request_uri_is_dotted_in_the_ipv4_realm() {
    let mut lab = Lab::new();
    let inv = String::from_utf8(invite6("mapped", &sdp("2001:db8:6::10", 4000)))
        .unwrap()
        .replace(&format!("INVITE sip:bob@{UA4}"), "INVITE sip:svc@[::ffff:192.0.2.50]:5060;user=phone");
    let out = lab.send(UA6, inv.as_bytes());
    let fwd = &one(&out, UA4).data;
    assert_eq!(request_uri(fwd), "sip:svc@192.0.2.50:5060;user=phone");
    lab.send(UA4, &respond(fwd, 486, "Busy Here", Some("b"), None, ""));
    lab.assert_empty();
}

/// Oversize: a request that only grows past a datagram when rewritten is
/// answered 513 at once, not 408 after Timer B.
#[test]
fn a_request_grown_past_a_datagram_gets_513_at_once() {
    let mut lab = Lab::new();
    let head = format!("MESSAGE sip:bob@{UA4} SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-big\r\nMax-Forwards: 70\r\nFrom: <sip:alice@[2001:db8:6::10]>;tag=a\r\nTo: <sip:bob@192.0.2.50>\r\nCall-ID: big\r\nCSeq: 1 MESSAGE\r\nContent-Type: text/plain\r\n");
    let pad = 65_480 - head.len() - 40;
    let m = format!("{head}Content-Length: {pad}\r\n\r\n{}", "x".repeat(pad)).into_bytes();
    assert!(m.len() <= 65_507, "the request itself fits: {}", m.len());
    let out = lab.send(UA6, &m);
    assert!(to(&out, UA4).is_empty(), "nothing too large is sent");
    let r = one(&out, UA6);
    assert_eq!(code(&r.data), 513, "{}", text(r));
    assert_eq!(refused(&lab, Refusal::TooLarge), 1);
    lab.assert_empty();
}

const ISUP: &str = "\x01\x00\x49\x00\x00\x03\x02\x00\x07\x04\x10\x00\x33\x63\x21\x43\x00\x00\x03";

fn multipart(sdp_part: &str, extra_sdp: bool) -> String {
    let mut b = format!("--unique-boundary-1\r\nContent-Type: application/sdp\r\n\r\n{sdp_part}\r\n");
    if extra_sdp {
        b += &format!("--unique-boundary-1\r\nContent-Type: application/sdp\r\n\r\n{sdp_part}\r\n");
    }
    b += &format!("--unique-boundary-1\r\nContent-Type: application/ISUP;version=nxv3\r\nContent-Disposition: signal;handling=optional\r\n\r\n{ISUP}\r\n--unique-boundary-1--\r\n");
    b
}

fn multipart_invite(call_id: &str, body: &str) -> Vec<u8> {
    String::from_utf8(invite6(call_id, body))
        .unwrap()
        .replacen("Content-Type: application/sdp", "Content-Type: multipart/mixed;boundary=unique-boundary-1", 1)
        .into_bytes()
}

/// Item 4: a multipart body's SDP is anchored like a plain one (the SDP
/// part rewritten, the ISUP part byte for byte); one the ALG cannot
/// anchor is refused with 415 and Accept, never passed on unchecked.
#[test]
fn multipart_sdp_is_anchored_or_refused() {
    let mut lab = Lab::new();
    let out = lab.send(UA6, &multipart_invite("mp", &multipart(&sdp("2001:db8:6::10", 4000), false)));
    let fwd = &one(&out, UA4).data;
    let b = body(fwd);
    assert!(b.contains("c=IN IP4 198.51.100.1"), "SDP part anchored in the TrGW: {b}");
    assert!(!b.contains("2001:db8:6::10"), "{b}");
    assert!(b.contains(&format!("\r\n\r\n{ISUP}\r\n--unique-boundary-1--\r\n")), "ISUP part as it was");
    assert_eq!(lab.media_calls(), 1);
    // The answer comes back in a multipart body too.
    let ans = multipart(&sdp("192.0.2.50", 5000), false);
    let resp = String::from_utf8(respond(fwd, 200, "OK", Some("b"), Some("sip:bob@192.0.2.50"), &ans))
        .unwrap()
        .replacen("Content-Type: application/sdp", "Content-Type: multipart/mixed;boundary=unique-boundary-1", 1);
    let out = lab.send(UA4, resp.as_bytes());
    let ok = body(&one(&out, UA6).data);
    assert!(ok.contains("c=IN IP6 2001:db8::1") && !ok.contains("192.0.2.50"), "{ok}");
    // Two SDP parts: 415 with Accept, no media, nothing forwarded.
    let out = lab.send(UA6, &multipart_invite("mp2", &multipart(&sdp("2001:db8:6::10", 4002), true)));
    assert!(to(&out, UA4).is_empty());
    let r = to(&out, UA6).into_iter().find(|t| code(&t.data) == 415).expect("415");
    assert!(text(r).contains("\r\nAccept: application/sdp, multipart/mixed"), "{}", text(r));
    assert_eq!(refused(&lab, Refusal::Body), 1);
    assert_eq!(lab.media_calls(), 1, "only the first call's session");
}
