//! The DNS64 server over real sockets on loopback, against an in-process
//! fake upstream resolver (UDP and TCP, scripted answers; one variant
//! truncates every UDP answer, another never answers).

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use dns64::{Config, Server};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, PTR, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::io::{Read, Write};

/// How long a test client waits before declaring a hang (a guard, not a
/// measured threshold: every answer is expected far sooner).
const HANG: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Answer from the scripted zone.
    Normal,
    /// UDP answers carry TC=1 and no records; TCP answers are complete.
    TruncateUdp,
    /// Read queries, never answer.
    Silent,
}

/// A fake recursive resolver on 127.0.0.1 (UDP and TCP on one port).
struct Fake {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    udp_queries: Arc<AtomicU64>,
    tcp_queries: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

fn soa() -> Record {
    Record::from_rdata(
        name("test."),
        3600,
        RData::SOA(SOA::new(name("ns.test."), name("host.test."), 1, 3600, 600, 86400, 120)),
    )
}

/// The scripted zone.
fn zone(q: &Message) -> Message {
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
    fn start(mode: Mode) -> Fake {
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

fn config(upstreams: &[SocketAddr], timeout_ms: u64) -> Config {
    Config {
        listen: vec!["127.0.0.1:0".into(), "[::1]:0".into()],
        prefix: "64:ff9b:1::/96".into(),
        upstream: upstreams.iter().map(|a| a.to_string()).collect(),
        timeout_ms,
        ..Config::default()
    }
}

fn query_bytes(n: &str, t: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id).set_recursion_desired(true);
    m.add_query(Query::query(name(n), t));
    m.to_vec().unwrap()
}

fn udp_ask(server: SocketAddr, bytes: &[u8]) -> Message {
    let bind = if server.is_ipv4() { "127.0.0.1:0" } else { "[::1]:0" };
    let s = UdpSocket::bind(bind).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s.send_to(bytes, server).unwrap();
    let mut buf = [0u8; 65535];
    let (n, _) = s.recv_from(&mut buf).expect("an answer, not a hang");
    Message::from_vec(&buf[..n]).unwrap()
}

fn udp(server: SocketAddr, n: &str, t: RecordType) -> Message {
    let m = udp_ask(server, &query_bytes(n, t, 0x4242));
    assert_eq!(m.id(), 0x4242);
    m
}

fn tcp(server: SocketAddr, n: &str, t: RecordType) -> Message {
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

fn aaaa_addrs(m: &Message) -> Vec<String> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::AAAA(AAAA(a)) => Some(a.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn answers_over_udp_and_tcp_on_both_families() {
    let up = Fake::start(Mode::Normal);
    let srv = Server::start(&config(&[up.addr], 2000)).unwrap();
    let addrs = srv.local_addrs().to_vec();
    assert_eq!(addrs.len(), 2);
    assert_ne!(addrs[0].port(), 0);
    for &a in &addrs {
        // Synthesis from A (RFC 6147 §5.1.6/§5.1.7).
        let m = udp(a, "v4only.test.", RecordType::AAAA);
        assert_eq!(m.response_code(), ResponseCode::NoError);
        assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
        assert_eq!(m.answers()[0].ttl(), 120, "min(A TTL 300, SOA MINIMUM 120)");
        // Real AAAA passes (RFC 6147 §5.1.1).
        assert_eq!(aaaa_addrs(&udp(a, "dual.test.", RecordType::AAAA)), ["2001:db8::10"]);
        // A passes unchanged (§5.3.3).
        let m = udp(a, "v4only.test.", RecordType::A);
        assert_eq!(m.answers()[0].data(), &RData::A(A("198.51.100.10".parse().unwrap())));
        // NXDOMAIN as is (§5.1.2).
        assert_eq!(udp(a, "nope.test.", RecordType::AAAA).response_code(), ResponseCode::NXDomain);
        // Over TCP.
        assert_eq!(aaaa_addrs(&tcp(a, "v4only.test.", RecordType::AAAA)), ["64:ff9b:1::c633:640a"]);
    }
    // PTR for a synthesised address (§5.3.1): CNAME + PTR.
    let rev = dns64::arpa::ip6_arpa_name("64:ff9b:1::c633:640a".parse().unwrap()).to_ascii();
    let m = udp(addrs[0], &rev, RecordType::PTR);
    assert_eq!(m.answers().len(), 2);
    assert_eq!(m.answers()[1].data(), &RData::PTR(PTR(name("v4only.test."))));
    let s = srv.stats();
    assert_eq!(s.synthesized, 6);
    assert_eq!(s.aaaa_real, 2);
    assert_eq!(s.ptr_synthesized, 1);
    assert_eq!(s.queries_tcp, 4);
    assert_eq!(s.answers, s.queries_udp + s.queries_tcp);
    assert_eq!(up.tcp_queries.load(Ordering::Relaxed), 0);
    srv.stop();
}

#[test]
fn truncated_upstream_answers_are_retried_over_tcp() {
    let up = Fake::start(Mode::TruncateUdp);
    let srv = Server::start(&config(&[up.addr], 2000)).unwrap();
    let a = srv.local_addrs()[0];
    // Over TCP to us: the full synthesised answer.
    let m = tcp(a, "v4only.test.", RecordType::AAAA);
    assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
    let s = srv.stats();
    assert!(s.upstream_tcp_retries >= 4, "{s:?}");
    assert_eq!(up.tcp_queries.load(Ordering::Relaxed), s.upstream_tcp_retries);
    // Over UDP to us: 60 synthesised records do not fit in 512 bytes: TC.
    let m = udp(a, "big.test.", RecordType::AAAA);
    assert!(m.truncated() && m.answers().is_empty());
    assert_eq!(aaaa_addrs(&tcp(a, "big.test.", RecordType::AAAA)).len(), 60);
}

#[test]
fn dead_upstream_gives_servfail_not_a_hang() {
    let dead = Fake::start(Mode::Silent);
    let srv = Server::start(&config(&[dead.addr], 100)).unwrap();
    let a = srv.local_addrs()[0];
    let m = udp(a, "v4only.test.", RecordType::AAAA);
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    assert_eq!(m.queries()[0].name(), &name("v4only.test."));
    let m = udp(a, "v4only.test.", RecordType::MX);
    assert_eq!(m.response_code(), ResponseCode::ServFail);
    let s = srv.stats();
    assert_eq!(s.servfail_upstream + s.servfail_deadline, 2);
    assert!(s.upstream_timeouts >= 2, "{s:?}");
    assert!(dead.udp_queries.load(Ordering::Relaxed) >= 2);
}

#[test]
fn failover_to_the_next_upstream() {
    let dead = Fake::start(Mode::Silent);
    let up = Fake::start(Mode::Normal);
    let srv = Server::start(&config(&[dead.addr, up.addr], 100)).unwrap();
    let m = udp(srv.local_addrs()[1], "v4only.test.", RecordType::AAAA);
    assert_eq!(aaaa_addrs(&m), ["64:ff9b:1::c633:640a"]);
    assert!(srv.stats().upstream_timeouts >= 2);
}

#[test]
fn garbage_gets_formerr_and_strangers_refused() {
    let up = Fake::start(Mode::Normal);
    let mut cfg = config(&[up.addr], 2000);
    cfg.allow = vec!["::1/128".into()];
    let srv = Server::start(&cfg).unwrap();
    let (v4, v6) = (srv.local_addrs()[0], srv.local_addrs()[1]);
    let m = udp_ask(v6, b"\x77\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0");
    assert_eq!((m.id(), m.response_code()), (0x7701, ResponseCode::FormErr));
    assert_eq!(udp(v4, "v4only.test.", RecordType::AAAA).response_code(), ResponseCode::Refused);
    assert_eq!(aaaa_addrs(&udp(v6, "v4only.test.", RecordType::AAAA)), ["64:ff9b:1::c633:640a"]);
    let s = srv.stats();
    assert_eq!((s.formerr, s.refused, s.synthesized), (1, 1, 1));
    assert_eq!(up.udp_queries.load(Ordering::Relaxed), 2, "REFUSED and FORMERR never reach upstream");
}

#[test]
fn spawn_on_a_runtime_and_stop_frees_the_port() {
    let up = Fake::start(Mode::Normal);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let srv = Server::spawn(&config(&[up.addr], 2000), rt.handle()).unwrap();
    let a = srv.local_addrs()[0];
    assert_eq!(aaaa_addrs(&udp(a, "v4only.test.", RecordType::AAAA)), ["64:ff9b:1::c633:640a"]);
    srv.stop();
    // The same port is free again (UDP and TCP).
    let mut cfg = config(&[up.addr], 2000);
    cfg.listen = vec![a.to_string()];
    let mut again = Server::start(&cfg);
    for _ in 0..50 {
        if again.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        again = Server::start(&cfg);
    }
    let again = again.unwrap();
    assert_eq!(again.local_addrs(), [a]);
    assert!(Server::start(&cfg).is_err(), "a bound port is reported");
}

#[test]
fn bad_config_is_an_error() {
    let mut cfg = config(&["127.0.0.1:53".parse().unwrap()], 100);
    cfg.prefix = "64:ff9b::/72".into();
    let e = Server::start(&cfg).err().unwrap().to_string();
    assert!(e.starts_with("dns64.prefix:"), "{e}");
}
