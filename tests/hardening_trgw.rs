//! Issue #29, the destination policy and the TrGW (D4, D6, D7, D13 and
//! directed broadcasts): each test runs `v6gate run` with SIIT, NAT64 and
//! the TrGW (and the IMS-ALG where it says) between an IPv6 host and an
//! IPv4 host (tests/daemon_util: h6 2001:db8:1::2 — gw 2001:db8:1::1,
//! 198.51.100.1/24 — h4 198.51.100.2; NAT64 pool6 64:ff9b:2::/96, pool4
//! 203.0.113.1; SIIT pool6 64:ff9b:1::/96), sets up a NAT64 session and a
//! TrGW call, attacks, and checks the refusal, its counter, and that the
//! session and the call still carry packets.

mod daemon_util;
mod hardening_util;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use alg::msg::Message;
use daemon_util::*;
use hardening_util::*;
use trgw::bencode::Value;

fn refused(lab: &Lab, plane: &str, reason: &str) -> u64 {
    lab.metric(&format!("v6gate_destination_refused_total{{plane=\"{plane}\",reason=\"{reason}\"}}"))
}

fn bind(ns: &lab::netns::Netns, addr: &str, timeout_ms: u64) -> UdpSocket {
    let s = in_ns(ns, || UdpSocket::bind(addr).unwrap());
    s.set_read_timeout(Some(Duration::from_millis(timeout_ms))).unwrap();
    s
}

/// D4 and directed broadcasts: a media address that carries the
/// gateway's own IPv4 address — under the well-known prefix, the NAT64's
/// and the SIIT's prefixes, 6to4, IPv4-mapped — or the NAT64 pool
/// address, or a subnet's broadcast address, is refused; and media that
/// comes back to the relay through its own NAT64 (from the pool address)
/// is not latched, so the relay does not talk to itself.
#[test]
fn own_addresses_behind_the_gateways_prefixes_and_directed_broadcasts_are_refused() {
    lab::need_root!();
    let (lab, _sock) = start("", "", "");
    let base = Baseline::new(&lab);
    let mut ng = Ng::new(&lab);
    let cases = [
        ("64:ff9b::198.51.100.1", "own-address"),
        ("64:ff9b:2::198.51.100.1", "own-address"),
        ("64:ff9b:2::203.0.113.1", "own-address"),
        ("203.0.113.1", "own-address"),
        ("64:ff9b:1::198.51.100.1", "own-address"),
        ("2002:c633:6401::1", "own-address"),
        ("::ffff:198.51.100.1", "own-address"),
        ("198.51.100.255", "directed-broadcast"),
        ("64:ff9b:2::198.51.100.255", "directed-broadcast"),
    ];
    for (i, (ip, why)) in cases.iter().enumerate() {
        let o = offer(&mut ng, &format!("d4-{i}"), ip, 5555);
        assert_eq!(result(&o), "error", "{ip}: {o:?}");
        assert!(reason(&o).contains(why), "{ip}: {}", reason(&o));
    }
    assert_eq!(refused(&lab, "trgw", "own-address"), 7);
    assert_eq!(refused(&lab, "trgw", "directed-broadcast"), 2);
    assert_eq!(lab.metric("v6gate_trgw_calls_total{event=\"created\"}"), 1, "refused offers are not calls");
    // The IPv4 host behind the NAT64 prefix is a fine media address.
    assert_eq!(result(&offer(&mut ng, "via-nat64", "64:ff9b:2::198.51.100.2", 5556)), "ok");

    // A call; then a packet to its IPv4 leg through the gateway's own
    // NAT64 (it arrives from the pool address) before the callee's.
    let o = offer(&mut ng, "loop", "2001:db8:1::2", 9104);
    let to4 = media_of(&o);
    let a = answer(&mut ng, "loop", "198.51.100.2", 9106);
    let to6 = media_of(&a);
    let ua6 = bind(&lab.h6, "[2001:db8:1::2]:9104", 2000);
    let ua4 = bind(&lab.h4, "198.51.100.2:9106", 2000);
    let attacker = bind(&lab.h6, "[2001:db8:1::2]:0", 500);
    let through_nat64 = SocketAddr::new(format!("64:ff9b:2::{}", to4.ip()).parse().unwrap(), to4.port());
    wait_until("the pool address to be refused by latching", || {
        attacker.send_to(b"loop", through_nat64).unwrap();
        refused(&lab, "trgw-latch", "own-address") >= 1
    });
    ua6.send_to(b"voice", to6).unwrap();
    assert_eq!(recv_from(&ua4).map(|x| x.0), Some(b"voice".to_vec()), "media goes to the signalled callee");
    assert!(recv_from(&attacker).is_none(), "media looped back through the gateway's NAT64");
    base.check("after");
}

/// D13: with every descriptor taken, the own-address list is still kept
/// current (the watcher's netlink sockets were opened at start): an
/// address added meanwhile is refused at once, one the host had before
/// stays refused, and no reading failed.
#[test]
fn the_policy_does_not_fail_open_when_descriptors_are_exhausted() {
    lab::need_root!();
    let (lab, _sock) = start("", "", "");
    let base = Baseline::new(&lab);
    let host = || lab.metric("v6gate_destination_own_addresses{source=\"host\"}");
    let before = host();
    lab.gw.ip(&["addr", "add", "192.0.2.99/32", "dev", "lo"]).unwrap();
    wait_until("the new host address to be read", || host() > before);
    let (conns, (soft, hard)) = exhaust_descriptors(&lab);
    lab.gw.ip(&["addr", "add", "198.51.100.77/24", "dev", "g4"]).unwrap();
    let mut ng = Ng::new(&lab);
    // Until the watcher reads the new address, the offer fails for want
    // of descriptors; once read, it is refused as the gateway's own.
    wait_until("the address added under exhaustion to be refused as own", || {
        reason(&offer(&mut ng, "added", "198.51.100.77", 5555)).contains("own-address")
    });
    let o = offer(&mut ng, "known", "192.0.2.99", 5555);
    assert!(reason(&o).contains("own-address"), "{o:?}");
    drop(conns);
    set_nofile(&lab, soft, hard);
    wait_until("the admin API to answer again", || lab.ctl(&["status"]).is_ok());
    assert_eq!(lab.metric("v6gate_destination_own_refreshes_total{result=\"error\"}"), 0);
    assert_eq!(lab.metric("v6gate_destination_own_stale"), 0);
    assert!(refused(&lab, "trgw", "own-address") >= 2);
    base.check("after");
}

/// An ng offer with `received from` (what Kamailio sends: the SIP
/// source of the offer).
fn offer_from(ng: &mut Ng, call: &str, client: &str) -> Value {
    ng.cmd(vec![
        ("command", s("offer")),
        ("call-id", s(call)),
        ("from-tag", s("ft")),
        ("sdp", s(&sdp("2001:db8:1::2", 9200))),
        ("direction", Value::List(vec![s("v6"), s("v4")])),
        ("address family", s("IP4")),
        ("received from", Value::List(vec![s("IP6"), s(client)])),
    ])
    .expect("an ng reply")
}

/// D6 over ng: one client (a /64, whatever addresses of it) holds at most
/// `client-streams` streams; its other offers are refused with an error,
/// nobody's call is evicted, other clients are served, and the share
/// comes back when its calls go.
#[test]
fn one_client_holds_at_most_its_share_of_the_media_ports() {
    lab::need_root!();
    let (lab, _sock) = start("", "client-streams = 4", "");
    let base = Baseline::new(&lab);
    let mut ng = Ng::new(&lab);
    let (mut ok, mut busy) = (0, 0);
    for i in 0..60 {
        let o = offer_from(&mut ng, &format!("flood-{i}"), &format!("2001:db8:66::{:x}", i + 1));
        match result(&o) {
            "ok" => ok += 1,
            _ if reason(&o).starts_with("Media relay busy") => busy += 1,
            _ => panic!("{o:?}"),
        }
    }
    assert_eq!((ok, busy), (4, 56));
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"client-streams\"}"), 56);
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"ports-exhausted\"}"), 0);
    // Another client, and the baseline call's own client, are served.
    assert_eq!(result(&offer_from(&mut ng, "other", "2001:db8:77::1")), "ok");
    assert_eq!(result(&offer(&mut ng, "plain", "2001:db8:1::2", 9300)), "ok");
    assert_eq!(lab.metric("v6gate_trgw_clients"), 3);
    let del = ng.cmd(vec![("command", s("delete")), ("call-id", s("flood-0"))]).unwrap();
    assert_eq!(result(&del), "ok");
    assert_eq!(result(&offer_from(&mut ng, "flood-again", "2001:db8:66::99")), "ok");
    base.check("after");
}

/// `[alg]` in the gateway: SIP on both of its addresses, media in the
/// TrGW of the process.
const ALG: &str = r#"
[alg]
listen-v6 = "[2001:db8:1::1]:5060"
listen-v4 = "198.51.100.1:5060"
media-v6-interface = "v6"
media-v4-interface = "v4"
"#;

/// An INVITE from `from` (`[v6]:port` or `v4:port`) to `to`, with an
/// offer of `media` port `mport`.
fn invite(call: &str, from: &str, to: &str, media: &str, mport: u16) -> Vec<u8> {
    let head = format!(
        "INVITE sip:bob@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-{call}\r\nMax-Forwards: 70\r\n\
         From: <sip:alice@{from}>;tag=a-{call}\r\nTo: <sip:bob@{to}>\r\nCall-ID: {call}\r\nCSeq: 1 INVITE\r\n\
         Contact: <sip:alice@{from}>\r\n"
    );
    wire::msg(&head, &wire::sdp(media, mport))
}

/// Sends [`invite`] from `sock` (bound to `from`) to the ALG's address in
/// the caller's realm.
fn place(sock: &UdpSocket, call: &str, from: &str, to: &str, media: &str, mport: u16) {
    let alg = if from.starts_with('[') { "[2001:db8:1::1]:5060" } else { "198.51.100.1:5060" };
    sock.send_to(&invite(call, from, to, media, mport), alg).unwrap();
}

/// SIP messages arriving on `sock` until it stays silent, with where from.
fn drain(sock: &UdpSocket) -> Vec<(Vec<u8>, SocketAddr)> {
    std::iter::from_fn(|| recv_from_big(sock)).collect()
}

fn recv_from_big(sock: &UdpSocket) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = vec![0u8; 65536];
    sock.recv_from(&mut buf).ok().map(|(n, a)| (buf[..n].to_vec(), a))
}

/// D6 through the ALG: INVITEs from one host to a callee that never
/// answers take at most the host's share of the relay; the rest get a
/// prompt 503 with Retry-After, and a caller elsewhere still gets through.
/// (And D4 through the ALG first.)
#[test]
fn a_flood_of_unanswered_invites_from_one_host_gets_503_and_others_get_through() {
    lab::need_root!();
    // The baseline call's client (2001:db8:1::/64, its media address) is
    // the flooder's too: it holds one of the four.
    let (lab, _sock) = start("", "client-streams = 4", ALG);
    let base = Baseline::new(&lab);
    let caller = bind(&lab.h6, "[2001:db8:1::2]:5070", 1500);
    let silent = bind(&lab.h4, "198.51.100.2:5099", 1500);
    // D4 through the ALG: an offer whose media is the gateway's own IPv4
    // address behind the well-known prefix is refused (488), uses no share.
    place(&caller, "d4", "[2001:db8:1::2]:5070", "198.51.100.2:5099", "64:ff9b::198.51.100.1", 9398);
    let r = wire::recv_sip(&caller);
    assert_eq!(Message::parse_datagram(&r).unwrap().code(), Some(488), "{}", String::from_utf8_lossy(&r));
    assert_eq!(refused(&lab, "trgw", "own-address"), 1);
    for i in 0..6 {
        place(
            &caller,
            &format!("flood{i}"),
            "[2001:db8:1::2]:5070",
            "198.51.100.2:5099",
            "2001:db8:1::2",
            9400 + 2 * i,
        );
    }
    let finals: Vec<String> = drain(&caller)
        .iter()
        .filter(|(d, _)| {
            // Finals other than the 488 above (retransmitted: never ACKed).
            Message::parse_datagram(d).ok().and_then(|m| m.code()).is_some_and(|c| c >= 200 && c != 488)
        })
        .map(|(d, _)| String::from_utf8_lossy(d).into_owned())
        .collect();
    // (Each 503 is retransmitted until the ACK that never comes: one per call.)
    let mut refused_calls: Vec<&str> =
        finals.iter().filter_map(|f| f.split("Call-ID: ").nth(1)?.split("\r\n").next()).collect();
    refused_calls.sort();
    refused_calls.dedup();
    assert_eq!(refused_calls, ["flood3", "flood4", "flood5"], "three over the share refused");
    for f in &finals {
        assert!(f.starts_with("SIP/2.0 503 "), "{f}");
        assert!(f.contains("\r\nRetry-After: "), "{f}");
    }
    let mut forwarded: Vec<String> = drain(&silent)
        .iter()
        .filter_map(|(d, _)| Message::parse_datagram(d).ok().map(|m| m.call_id().to_string()))
        .collect();
    forwarded.sort();
    forwarded.dedup();
    assert_eq!(forwarded.len(), 3, "three forwarded: {forwarded:?}");
    assert_eq!(lab.metric("v6gate_trgw_control_errors_total{reason=\"client-streams\"}"), 3);
    // A caller in the IPv4 realm is another client: its call goes through.
    let other = bind(&lab.h4, "198.51.100.2:5080", 1500);
    let callee6 = bind(&lab.h6, "[2001:db8:1::2]:5099", 3000);
    place(&other, "other", "198.51.100.2:5080", "[2001:db8:1::2]:5099", "198.51.100.2", 9500);
    let got = wire::recv(&callee6).expect("the other client's INVITE forwarded");
    assert_eq!(wire::media_of(&got).0, "2001:db8:1::1", "its media anchored in the relay");
    base.check("after");
}

/// D7: a callee that rings for longer than the TrGW's idle `timeout`
/// (2 s here) still finds its media: the relay keeps the early call, and
/// the 200 OK reaches the caller with the relay's SDP. (No baseline call:
/// an established call idle for 2 s is rightly torn down.)
#[test]
fn a_call_ringing_past_the_idle_timeout_keeps_its_media() {
    lab::need_root!();
    let (lab, _sock) = start("", "timeout = \"2s\"", ALG);
    let caller = bind(&lab.h6, "[2001:db8:1::2]:5072", 3000);
    let callee = bind(&lab.h4, "198.51.100.2:5098", 3000);
    place(&caller, "ring", "[2001:db8:1::2]:5072", "198.51.100.2:5098", "2001:db8:1::2", 9600);
    let (inv, alg) = recv_from_big(&callee).expect("the INVITE forwarded");
    assert_eq!(wire::media_of(&inv).0, "198.51.100.1");
    callee.send_to(&wire::respond(&inv, "180 Ringing", "b-ring", "sip:bob@198.51.100.2:5098", ""), alg).unwrap();
    let ringing = wire::recv_sip(&caller);
    assert_eq!(Message::parse_datagram(&ringing).unwrap().code(), Some(180));
    // Ring for more than twice the idle timeout, no media.
    std::thread::sleep(Duration::from_secs(5));
    let ok = wire::respond(&inv, "200 OK", "b-ring", "sip:bob@198.51.100.2:5098", &wire::sdp("198.51.100.2", 9700));
    callee.send_to(&ok, alg).unwrap();
    let answered = wire::recv_sip_after(&caller, &ringing);
    let m = Message::parse_datagram(&answered).unwrap();
    assert_eq!(m.code(), Some(200));
    assert!(m.has_sdp(), "the 200 OK carries the relay's answer: {}", String::from_utf8_lossy(&answered));
    assert_eq!(wire::media_of(&answered).0, "2001:db8:1::1");
    assert_eq!(lab.metric("v6gate_trgw_calls_total{event=\"timed-out\"}"), 0);
    assert_eq!(lab.metric("v6gate_trgw_calls"), 1, "the answered call is in the relay");
}
