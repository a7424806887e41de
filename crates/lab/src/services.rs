//! The lab's demo services on the IPv4-only server — a tiny authoritative
//! DNS server for the lab zone (the DNS64's upstream), an HTTP responder
//! (TCP) and a UDP echo — and the clients the demo runs on the IPv6-only
//! host, so the demo needs neither dig nor curl nor ncat.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};

/// A static authoritative zone: names and their IPv4 addresses.
#[derive(Debug, Clone)]
pub struct Zone {
    /// Zone apex, e.g. `lab.example.`.
    pub apex: Name,
    /// A records.
    pub a: Vec<(Name, Ipv4Addr)>,
}

impl Zone {
    /// The lab's zone: `server.lab.example.` -> the IPv4-only server.
    pub fn lab() -> Self {
        use crate::topo::lab_addr::*;
        let name = |s: &str| Name::from_ascii(s).unwrap_or_else(|_| Name::root());
        Zone { apex: name(ZONE), a: vec![(name(SERVER_NAME), H4), (name("h4.lab.example."), H4)] }
    }

    /// The response to one query message (bytes in, bytes out). `None` for
    /// input that is not a DNS query (not answered, as servers do).
    pub fn answer(&self, query: &[u8]) -> Option<Vec<u8>> {
        let req = Message::from_bytes(query).ok()?;
        if req.message_type() != MessageType::Query {
            return None;
        }
        let mut resp = Message::new();
        resp.set_id(req.id())
            .set_message_type(MessageType::Response)
            .set_op_code(req.op_code())
            .set_recursion_desired(req.recursion_desired());
        let code = match (req.op_code(), req.queries()) {
            (OpCode::Query, [q]) => {
                resp.add_query(q.clone());
                let name = q.name();
                if !self.apex.zone_of(name) {
                    ResponseCode::Refused
                } else {
                    resp.set_authoritative(true);
                    let hits: Vec<_> = self.a.iter().filter(|(n, _)| n == name).collect();
                    let exists = hits.is_empty() && name != &self.apex;
                    for (n, a) in &hits {
                        if matches!(q.query_type(), RecordType::A | RecordType::ANY) {
                            resp.add_answer(Record::from_rdata(n.clone(), 300, RData::A(A(*a))));
                        }
                    }
                    // No AAAA anywhere: an empty NOERROR answer, which is
                    // what makes a DNS64 synthesize (RFC 6147 §5.1.1).
                    if exists {
                        ResponseCode::NXDomain
                    } else {
                        ResponseCode::NoError
                    }
                }
            }
            (OpCode::Query, _) => ResponseCode::FormErr,
            _ => ResponseCode::NotImp,
        };
        resp.set_response_code(code);
        resp.to_bytes().ok()
    }
}

/// Serves the zone on UDP `addr` until the process ends.
pub fn serve_dns(sock: UdpSocket, zone: Zone) -> Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("dns recv"),
        };
        if let Some(r) = zone.answer(&buf[..n]) {
            let _ = sock.send_to(&r, peer);
        }
    }
}

/// The HTTP responder's body for a client seen as `peer`.
pub fn http_body(peer: SocketAddr) -> String {
    format!("hello from the IPv4-only server {}; your address as seen here: {}\n", crate::topo::lab_addr::H4, peer)
}

/// Serves a one-line HTTP/1.0 page on `listener` until the process ends.
pub fn serve_http(listener: TcpListener) -> Result<()> {
    for conn in listener.incoming() {
        let Ok(mut c) = conn else { continue };
        std::thread::spawn(move || {
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16384 {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let body = c.peer_addr().map(http_body).unwrap_or_default();
            let _ = write!(
                c,
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        });
    }
    Ok(())
}

/// Echoes every UDP datagram back to its sender until the process ends.
pub fn serve_echo(sock: UdpSocket) -> Result<()> {
    let mut buf = [0u8; 65536];
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, peer)) => {
                let _ = sock.send_to(&buf[..n], peer);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("echo recv"),
        }
    }
}

/// Queries `server` for `name`/`rtype`; returns the answer records as
/// "name TYPE data" lines, or the response code when it is not NOERROR.
pub fn dns_query(server: SocketAddr, name: &str, rtype: &str) -> Result<Vec<String>> {
    let name = Name::from_str(name).with_context(|| format!("bad name {name}"))?;
    let rtype = RecordType::from_str(&rtype.to_ascii_uppercase()).with_context(|| format!("bad type {rtype}"))?;
    let bind: SocketAddr = if server.is_ipv6() { "[::]:0".parse()? } else { "0.0.0.0:0".parse()? };
    let sock = UdpSocket::bind(bind)?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let mut m = Message::new();
    m.set_id(id).set_message_type(MessageType::Query).set_op_code(OpCode::Query).set_recursion_desired(true);
    m.add_query(Query::query(name, rtype));
    let q = m.to_bytes()?;
    let mut buf = [0u8; 4096];
    for _ in 0..3 {
        sock.send_to(&q, server).with_context(|| format!("sending to {server}"))?;
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                let r = Message::from_bytes(&buf[..n]).context("malformed DNS response")?;
                if r.id() != id {
                    continue;
                }
                if r.response_code() != ResponseCode::NoError {
                    bail!("{}", r.response_code());
                }
                return Ok(r
                    .answers()
                    .iter()
                    .map(|rec| format!("{} {} {}", rec.name(), rec.record_type(), rec.data()))
                    .collect());
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e.into()),
        }
    }
    bail!("no answer from {server}")
}

/// `GET /` over TCP; returns the response.
pub fn http_get(addr: SocketAddr) -> Result<String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).with_context(|| format!("connect {addr}"))?;
    c.set_read_timeout(Some(Duration::from_secs(3)))?;
    write!(c, "GET / HTTP/1.0\r\nHost: {}\r\n\r\n", addr.ip())?;
    let mut out = String::new();
    c.read_to_string(&mut out).context("reading the response")?;
    Ok(out)
}

/// Sends `msg` over UDP and returns the reply and who sent it.
pub fn udp_echo(addr: SocketAddr, msg: &str) -> Result<(String, SocketAddr)> {
    let bind: SocketAddr = if addr.is_ipv6() { "[::]:0".parse()? } else { "0.0.0.0:0".parse()? };
    let sock = UdpSocket::bind(bind)?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 65536];
    for _ in 0..3 {
        sock.send_to(msg.as_bytes(), addr)?;
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => return Ok((String::from_utf8_lossy(&buf[..n]).into_owned(), from)),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e.into()),
        }
    }
    bail!("no echo from {addr}")
}

/// Parses "ADDR:PORT" or a bare address (then `default_port`).
pub fn sockaddr(s: &str, default_port: u16) -> Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip: IpAddr =
        s.trim_start_matches('[').trim_end_matches(']').parse().with_context(|| format!("bad address {s}"))?;
    Ok(SocketAddr::new(ip, default_port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(zone: &Zone, name: &str, t: RecordType) -> Message {
        let mut m = Message::new();
        m.set_id(7).set_message_type(MessageType::Query);
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
        Message::from_bytes(&zone.answer(&m.to_bytes().unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn zone_answers_a_and_an_empty_aaaa() {
        let z = Zone::lab();
        let r = ask(&z, "server.lab.example.", RecordType::A);
        assert_eq!((r.id(), r.response_code(), r.authoritative()), (7, ResponseCode::NoError, true));
        assert_eq!(r.answers().len(), 1);
        assert_eq!(r.answers()[0].data(), &RData::A(A(Ipv4Addr::new(198, 51, 100, 2))));
        let r = ask(&z, "server.lab.example.", RecordType::AAAA);
        assert_eq!((r.response_code(), r.answers().len()), (ResponseCode::NoError, 0));
        assert_eq!(ask(&z, "nope.lab.example.", RecordType::A).response_code(), ResponseCode::NXDomain);
        assert_eq!(ask(&z, "example.com.", RecordType::A).response_code(), ResponseCode::Refused);
    }

    #[test]
    fn zone_ignores_garbage_and_responses() {
        let z = Zone::lab();
        assert_eq!(z.answer(b""), None);
        assert_eq!(z.answer(&[0xff; 40]), None);
        let mut m = Message::new();
        m.set_message_type(MessageType::Response);
        assert_eq!(z.answer(&m.to_bytes().unwrap()), None);
    }

    #[test]
    fn services_answer_over_loopback() {
        let dns = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dns_addr = dns.local_addr().unwrap();
        std::thread::spawn(move || serve_dns(dns, Zone::lab()));
        let ans = dns_query(dns_addr, "server.lab.example.", "A").unwrap();
        assert_eq!(ans, vec!["server.lab.example. A 198.51.100.2".to_string()]);
        let http = TcpListener::bind("127.0.0.1:0").unwrap();
        let http_addr = http.local_addr().unwrap();
        std::thread::spawn(move || serve_http(http));
        let page = http_get(http_addr).unwrap();
        assert!(page.starts_with("HTTP/1.0 200 OK") && page.contains("your address as seen here: 127.0.0.1:"));
        let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo.local_addr().unwrap();
        std::thread::spawn(move || serve_echo(echo));
        assert_eq!(udp_echo(echo_addr, "ping").unwrap(), ("ping".to_string(), echo_addr));
        assert_eq!(sockaddr("[2001:db8::1]", 53).unwrap().to_string(), "[2001:db8::1]:53");
        assert_eq!(sockaddr("192.0.2.1:7", 53).unwrap().port(), 7);
    }
}
