//! The IMS-ALG's side of the hostile tests (`hardening_alg`, `soak`): the
//! attacker host's SIP sockets on many addresses of one /64, padded
//! INVITEs, TCP connections from chosen sources, and the legitimate call
//! from the IPv4 realm that must still complete.

use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use alg::msg::Name;

use super::sa;
use super::wire::*;
use crate::daemon_util::{in_ns, Lab};

/// The ALG's listeners in the daemon testbed.
pub const ALG6: &str = "[2001:db8:1::1]:5060";
pub const ALG4: &str = "198.51.100.1:5060";

/// `n` more addresses of h6 (`{prefix}{i:x}`, e.g. `2001:db8:1::1:` gives
/// 2001:db8:1::1:0 + i, each a /64 on `a6`), a SIP socket on port 5070 of
/// each (non-blocking). The addresses are deprecated (preferred lifetime
/// 0): sockets bound to them work, but the kernel never picks one as the
/// source of a legitimate user's unbound socket.
pub fn flooders(lab: &Lab, prefix: &str, n: u16) -> Vec<UdpSocket> {
    for i in 0..n {
        let a = format!("{prefix}{i:x}/64");
        lab.h6.ip(&["-6", "addr", "add", &a, "dev", "a6", "nodad", "preferred_lft", "0"]).unwrap();
    }
    in_ns(&lab.h6, || {
        (0..n)
            .map(|i| {
                let s = UdpSocket::bind(format!("[{prefix}{i:x}]:5070")).unwrap();
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect()
    })
}

/// Sends `d` from a non-blocking socket, waiting while its buffer is full.
pub fn send(s: &UdpSocket, d: &[u8], to: &str) {
    for _ in 0..1000 {
        match s.send_to(d, to) {
            Ok(_) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Every datagram waiting on non-blocking `s`.
pub fn drain(s: &UdpSocket) -> Vec<Vec<u8>> {
    let mut b = vec![0u8; 65536];
    std::iter::from_fn(|| s.recv(&mut b).ok().map(|n| b[..n].to_vec())).collect()
}

/// The next request `method` `s` receives (retransmissions of others
/// skipped).
pub fn recv_request(s: &UdpSocket, method: &str) -> Vec<u8> {
    let mut seen = Vec::new();
    for _ in 0..20 {
        let d = recv(s).unwrap_or_else(|| panic!("no {method}; got {seen:?}"));
        if d.starts_with(format!("{method} ").as_bytes()) {
            return d;
        }
        seen.push(String::from_utf8_lossy(&d[..d.len().min(60)]).into_owned());
    }
    panic!("no {method}; got {seen:?}");
}

/// A call from the IPv4 realm (198.51.100.2) to a UA of the IPv6 realm
/// (2001:db8:1::2) through the ALG: INVITE with SDP, 200 with SDP (both
/// anchored in the TrGW), ACK and BYE along the route set, 200.
pub fn call_completes(lab: &Lab, id: &str) {
    let ua4 = in_ns(&lab.h4, || UdpSocket::bind("198.51.100.2:0").unwrap());
    let ua6 = in_ns(&lab.h6, || UdpSocket::bind("[2001:db8:1::2]:0").unwrap());
    let (a4, a6) = (ua4.local_addr().unwrap(), ua6.local_addr().unwrap());
    let head = |m: &str, target: &str, routes: &str, cseq: u32, tag: &str| {
        format!("{m} {target} SIP/2.0\r\nVia: SIP/2.0/UDP {a4};branch=z9hG4bK-{id}-{cseq}{m}\r\nMax-Forwards: 70\r\n{routes}From: <sip:alice@198.51.100.2>;tag=a\r\nTo: <sip:bob@[2001:db8:1::2]>{tag}\r\nCall-ID: {id}\r\nCSeq: {cseq} {m}\r\nContact: <sip:alice@{a4}>\r\n")
    };
    let inv = msg(&head("INVITE", &format!("sip:bob@{a6}"), "", 1, ""), &sdp("198.51.100.2", 9000));
    ua4.send_to(&inv, ALG4).unwrap();
    let inv6 = recv_request(&ua6, "INVITE");
    assert_eq!(media_of(&inv6).0, "2001:db8:1::1", "the offer anchored in the TrGW");
    ua6.send_to(&respond(&inv6, "200 OK", "b", &format!("sip:bob@{a6}"), &sdp("2001:db8:1::2", 9002)), ALG6).unwrap();
    let ok = recv_sip_after(&ua4, &inv);
    assert!(ok.starts_with(b"SIP/2.0 200"), "{}", String::from_utf8_lossy(&ok));
    assert_eq!(media_of(&ok).0, "198.51.100.1");
    let routes: String = addrs(&ok, Name::RecordRoute).iter().rev().map(|r| format!("Route: <{r}>\r\n")).collect();
    let target = addrs(&ok, Name::Contact)[0].clone();
    ua4.send_to(&msg(&head("ACK", &target, &routes, 1, ";tag=b"), ""), ALG4).unwrap();
    recv_request(&ua6, "ACK");
    ua4.send_to(&msg(&head("BYE", &target, &routes, 2, ";tag=b"), ""), ALG4).unwrap();
    let bye6 = recv_request(&ua6, "BYE");
    ua6.send_to(&respond(&bye6, "200 OK", "b", &format!("sip:bob@{a6}"), ""), ALG6).unwrap();
    assert!(recv_sip(&ua4).starts_with(b"SIP/2.0 200"), "BYE answered");
}

/// A padded INVITE without SDP (no media: only the ALG holds state) of
/// about `pad` bytes, to a callee at 198.51.100.2:5090.
pub fn padded_invite(from: SocketAddr, n: usize, pad: usize) -> Vec<u8> {
    msg(
        &format!("INVITE sip:bob@198.51.100.2:5090 SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-p{n}\r\nMax-Forwards: 70\r\nX-Pad: {}\r\nFrom: <sip:a@[2001:db8:1::2]>;tag=a{n}\r\nTo: <sip:bob@198.51.100.2>\r\nCall-ID: p{n}\r\nCSeq: 1 INVITE\r\n", "p".repeat(pad)),
        "",
    )
}

/// A TCP connection from `src` (an address of the namespace it runs in) to `to`.
pub fn tcp_from(src: &str, to: &str) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::for_address(sa(to)), socket2::Type::STREAM, None).unwrap();
    s.bind(&sa(src).into()).unwrap();
    s.connect(&sa(to).into()).unwrap();
    s.into()
}

/// Whether the ALG closes `t` (EOF or reset within 20 s).
pub fn closed_by_peer(t: &mut TcpStream) -> bool {
    t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut b = [0u8; 256];
    loop {
        match t.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                return false
            }
            Err(_) => return true,
        }
    }
}
