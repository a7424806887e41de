//! Shared by the socket tests: a fake upstream resolver with a scripted
//! zone, and small blocking DNS clients.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use dns64::Config;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, PTR, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// How long a test client waits before declaring a hang (a guard, not a
/// measured threshold: every answer is expected far sooner).
pub const HANG: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    /// Answer from the scripted zone.
    Normal,
    /// UDP answers carry TC=1 and no records; TCP answers are complete.
    TruncateUdp,
    /// Read queries, never answer.
    Silent,
}

/// A fake recursive resolver on 127.0.0.1 (UDP and TCP on one port).
pub struct Fake {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    pub udp_queries: Arc<AtomicU64>,
    pub tcp_queries: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

pub fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

pub fn soa() -> Record {
    Record::from_rdata(
        name("test."),
        3600,
        RData::SOA(SOA::new(name("ns.test."), name("host.test."), 1, 3600, 600, 86400, 120)),
    )
}

/// The scripted zone.
pub fn zone(q: &Message) -> Message {
    let query = q.queries()[0].clone();
    let n = query.name().to_lowercase().to_ascii();
    let mut m = Message::new();
    m.set_id(q.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(q.recursion_desired())
        .set_recursion_available(true);
    m.add_query(query.clone());
    let t = query.query_type();
    match (n.as_str(), t) {
        ("v4only.test.", RecordType::A) => {
            m.add_answer(Record::from_rdata(query.name().clone(), 300, RData::A(A("198.51.100.10".parse().unwrap()))));
        }
        ("v4only.test.", _) => {
            m.add_name_server(soa());
        }
        ("dual.test.", RecordType::AAAA) => {
            m.add_answer(Record::from_rdata(
                query.name().clone(),
                300,
                RData::AAAA(AAAA("2001:db8::10".parse().unwrap())),
            ));
        }
        ("dual.test.", RecordType::A) => {
            m.add_answer(Record::from_rdata(query.name().clone(), 300, RData::A(A("198.51.100.11".parse().unwrap()))));
        }
        ("big.test.", RecordType::A) => {
            for i in 0..60 {
                let a = format!("198.51.100.{i}").parse().unwrap();
                m.add_answer(Record::from_rdata(query.name().clone(), 300, RData::A(A(a))));
            }
        }
        ("big.test.", _) => {
            m.add_name_server(soa());
        }
        ("10.100.51.198.in-addr.arpa.", RecordType::PTR) => {
            m.add_answer(Record::from_rdata(query.name().clone(), 900, RData::PTR(PTR(name("v4only.test.")))));
        }
        _ => {
            m.set_response_code(ResponseCode::NXDomain);
            m.add_name_server(soa());
        }
    }
    m
}

impl Fake {
    pub fn start(mode: Mode) -> Fake {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).unwrap();
        udp.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        tcp.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (udp_queries, tcp_queries) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut threads = Vec::new();
        let (s, uq) = (stop.clone(), udp_queries.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 65535];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = udp.recv_from(&mut buf) else { continue };
                uq.fetch_add(1, Ordering::Relaxed);
                let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
                let reply = match mode {
                    Mode::Silent => continue,
                    Mode::Normal => zone(&q),
                    Mode::TruncateUdp => {
                        let mut r = zone(&q);
                        r.take_answers();
                        r.take_name_servers();
                        r.set_truncated(true);
                        r
                    }
                };
                let _ = udp.send_to(&reply.to_vec().unwrap(), from);
            }
        }));
        let (s, tq) = (stop.clone(), tcp_queries.clone());
        threads.push(std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = tcp.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut len = [0u8; 2];
                if c.read_exact(&mut len).is_err() {
                    continue;
                }
                let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if c.read_exact(&mut body).is_err() {
                    continue;
                }
                tq.fetch_add(1, Ordering::Relaxed);
                if mode == Mode::Silent {
                    continue;
                }
                let Ok(q) = Message::from_vec(&body) else { continue };
                let r = zone(&q).to_vec().unwrap();
                let mut out = (r.len() as u16).to_be_bytes().to_vec();
                out.extend_from_slice(&r);
                let _ = c.write_all(&out);
            }
        }));
        Fake { addr, stop, udp_queries, tcp_queries, threads }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub fn config(upstreams: &[SocketAddr], timeout_ms: u64) -> Config {
    Config {
        listen: vec!["127.0.0.1:0".into(), "[::1]:0".into()],
        prefix: "64:ff9b:1::/96".into(),
        upstream: upstreams.iter().map(|a| a.to_string()).collect(),
        timeout: std::time::Duration::from_millis(timeout_ms),
        ..Config::default()
    }
}

pub fn query_bytes(n: &str, t: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id).set_recursion_desired(true);
    m.add_query(Query::query(name(n), t));
    m.to_vec().unwrap()
}

pub fn udp_ask(server: SocketAddr, bytes: &[u8]) -> Message {
    let bind = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(bind).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s.send_to(bytes, server).unwrap();
    let mut buf = [0u8; 65535];
    let (n, _) = s.recv_from(&mut buf).expect("an answer, not a hang");
    Message::from_vec(&buf[..n]).unwrap()
}

pub fn udp(server: SocketAddr, n: &str, t: RecordType) -> Message {
    let m = udp_ask(server, &query_bytes(n, t, 0x4242));
    assert_eq!(m.id(), 0x4242);
    m
}

pub fn tcp(server: SocketAddr, n: &str, t: RecordType) -> Message {
    let mut s = TcpStream::connect(server).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    let q = query_bytes(n, t, 0x5151);
    let mut out = (q.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&q);
    // Two pipelined queries on one connection.
    s.write_all(&out).unwrap();
    s.write_all(&out).unwrap();
    let mut last = None;
    for _ in 0..2 {
        let mut len = [0u8; 2];
        s.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut body).unwrap();
        let m = Message::from_vec(&body).unwrap();
        assert_eq!(m.id(), 0x5151);
        last = Some(m);
    }
    last.unwrap()
}

pub fn aaaa_addrs(m: &Message) -> Vec<String> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::AAAA(AAAA(a)) => Some(a.to_string()),
            _ => None,
        })
        .collect()
}
