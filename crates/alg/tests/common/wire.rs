//! Helpers for the tests that talk to the ALG over real sockets
//! (`runner.rs`, `netns.rs`, `dns_limits.rs`, `tcp_limits.rs`): one UA's
//! view of SIP and SDP.
#![allow(dead_code)]

use std::net::UdpSocket;
use std::time::Duration;

use alg::msg::{Message, Name};

pub fn recv(s: &UdpSocket) -> Option<Vec<u8>> {
    let mut b = vec![0u8; 65536];
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.recv(&mut b).ok().map(|n| b[..n].to_vec())
}

/// The next SIP message that is not a 100 Trying.
pub fn recv_sip(s: &UdpSocket) -> Vec<u8> {
    loop {
        let d = recv(s).expect("a SIP message");
        if Message::parse_datagram(&d).unwrap().code() != Some(100) {
            return d;
        }
    }
}

/// The next SIP message other than a 100 and other than a retransmission
/// of `prev` (a loaded machine may see Timer A resend a request before its
/// answer got through).
pub fn recv_sip_after(s: &UdpSocket, prev: &[u8]) -> Vec<u8> {
    loop {
        let d = recv_sip(s);
        if d != prev {
            return d;
        }
    }
}

pub fn sdp(addr: &str, port: u16) -> String {
    let fam = if addr.contains(':') { "IP6" } else { "IP4" };
    format!("v=0\r\no=- 1 1 IN {fam} {addr}\r\ns=-\r\nc=IN {fam} {addr}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n")
}

pub fn msg(head: &str, body: &str) -> Vec<u8> {
    let ct = if body.is_empty() { "" } else { "Content-Type: application/sdp\r\n" };
    format!("{head}{ct}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

pub fn respond(req: &[u8], code: &str, tag: &str, contact: &str, body: &str) -> Vec<u8> {
    let m = Message::parse_datagram(req).unwrap();
    let mut s = format!("SIP/2.0 {code}\r\n");
    for h in &m.headers {
        match h.name {
            Name::Via | Name::RecordRoute | Name::From | Name::CallId | Name::CSeq => {
                s.push_str(&format!("{}\r\n", h.line))
            }
            Name::To if m.to_tag().is_none() => s.push_str(&format!("{};tag={tag}\r\n", h.line)),
            Name::To => s.push_str(&format!("{}\r\n", h.line)),
            _ => {}
        }
    }
    s.push_str(&format!("Contact: <{contact}>\r\n"));
    msg(&s, body)
}

pub fn media_of(d: &[u8]) -> (String, u16) {
    let b = String::from_utf8(Message::parse_datagram(d).unwrap().body.to_vec()).unwrap();
    let c = b.lines().find_map(|l| l.strip_prefix("c=IN ")).unwrap().split(' ').nth(1).unwrap().to_string();
    let p = b.lines().find_map(|l| l.strip_prefix("m=audio ")).unwrap().split(' ').next().unwrap().parse().unwrap();
    (c, p)
}

pub fn addrs(d: &[u8], n: Name) -> Vec<String> {
    let m = Message::parse_datagram(d).unwrap();
    m.all(n)
        .flat_map(|h| alg::msg::addresses(&h.value).into_iter().map(|a| a.uri.to_string()).collect::<Vec<_>>())
        .collect()
}

/// An OPTIONS from `from` to `target` (`n` makes its branch and Call-ID),
/// over `transport` (`UDP` or `TCP`).
pub fn options(from: std::net::SocketAddr, target: &str, n: usize, transport: &str) -> Vec<u8> {
    format!("OPTIONS {target} SIP/2.0\r\nVia: SIP/2.0/{transport} {from};branch=z9hG4bK-l{n}\r\nMax-Forwards: 70\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: l{n}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

/// The status code of a response (0 for anything else).
pub fn status(d: &[u8]) -> u16 {
    d.get(8..11).and_then(|c| std::str::from_utf8(c).ok()).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Polls `f` until it holds (the test fails after a minute).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
