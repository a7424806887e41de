//! Pre-connect (`preconnect`, opt-in): the IPv4 connect of a TCP session
//! starts at the client's SYN instead of at the relay's `accept`.
//!
//! The relay's kernel answers a client's SYN itself (the tproxy listener);
//! the relay's loop learns of the connection only when the client's
//! handshake has completed, and then opens the IPv4 side: a second
//! handshake in series on the session's path. With pre-connect a raw IPv6
//! TCP socket ([`syn_socket`]) whose classic-BPF filter passes only SYNs
//! (SYN set, ACK clear) to the relay prefix wakes the loop at the SYN; the
//! loop starts the IPv4 connect at once, keyed by the connection's
//! 4-tuple ([`Table`]), and the accept that follows claims it. The IPv4
//! handshake then runs while the client's completes.
//!
//! The table is bounded ([`Table::max`]: SYNs beyond it are not
//! pre-connected, counted) and its entries expire ([`TTL`], counted,
//! closed with a reset): a SYN flood costs at most `max` server
//! connections per [`TTL`]. What servers see changes: a connection for a
//! client SYN that is never completed (a scan, a flood, a client that
//! gave up), reset after [`TTL`]; hence opt-in.

use crate::sys;
use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn6};
use socket2::{Domain, Protocol, SockFilter, Socket, Type};
use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long a pre-connect waits for its accept.
pub const TTL: Duration = Duration::from_secs(2);

/// A connection's key: (client, the address it connected to).
pub type Key = (SocketAddrV6, SocketAddrV6);

/// A pre-connect waiting for its accept.
#[derive(Debug)]
struct Entry {
    sock: Socket,
    server: SocketAddr,
    deadline: Instant,
}

/// What [`Table::offer`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// The IPv4 connect was started.
    Started,
    /// This 4-tuple has one already (a retransmitted SYN).
    Known,
    /// The table is full: not pre-connected.
    Full,
    /// The socket or the connect failed at once: not pre-connected (the
    /// accept connects as without pre-connect, and resets the client if
    /// that fails too).
    Failed,
}

/// The pre-connects of one listener, by 4-tuple.
#[derive(Debug)]
pub struct Table {
    /// Pre-connects at most.
    pub max: usize,
    ttl: Duration,
    map: HashMap<Key, Entry>,
}

impl Table {
    /// An empty table of at most `max` pre-connects living `ttl` each.
    pub fn new(max: usize, ttl: Duration) -> Table {
        Table { max, ttl, map: HashMap::new() }
    }

    /// Pre-connects waiting.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No pre-connect waits.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A SYN for `key` came in: start a non-blocking connect to `server`
    /// (with a socket from `spares`).
    pub fn offer(&mut self, key: Key, server: SocketAddr, now: Instant, spares: &mut Spares) -> Offer {
        if self.map.contains_key(&key) {
            return Offer::Known;
        }
        if self.map.len() >= self.max {
            return Offer::Full;
        }
        match open(spares, server) {
            Ok(sock) => {
                self.map.insert(key, Entry { sock, server, deadline: now + self.ttl });
                Offer::Started
            }
            Err(_) => Offer::Failed,
        }
    }

    /// The accept of `key`: its pre-connect (connecting, connected or
    /// failed) if there is one for `server`. One for another server (the
    /// target changed) is closed.
    pub fn claim(&mut self, key: &Key, server: SocketAddr) -> Option<Socket> {
        let e = self.map.remove(key)?;
        if e.server == server {
            return Some(e.sock);
        }
        reset(e.sock);
        None
    }

    /// Close (reset) the pre-connects past their time; how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.map.len();
        let old: Vec<Key> = self.map.iter().filter(|(_, e)| e.deadline <= now).map(|(k, _)| *k).collect();
        for k in old {
            if let Some(e) = self.map.remove(&k) {
                reset(e.sock);
            }
        }
        before - self.map.len()
    }

    /// When the next pre-connect expires.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.map.values().map(|e| e.deadline).min()
    }

    /// Close every pre-connect (the relay stops).
    pub fn clear(&mut self) {
        for (_, e) in self.map.drain() {
            reset(e.sock);
        }
    }
}

fn reset(s: Socket) {
    let _ = s.set_linger(Some(Duration::ZERO));
}

/// Why [`open`] failed.
#[derive(Debug)]
pub enum OpenError {
    /// No socket (out of descriptors or memory).
    Socket(io::Error),
    /// The connect failed at once (no route, ...).
    Connect(io::Error),
}

/// Spare sockets a loop keeps at most per address family.
pub const SPARES: usize = 4;

/// Unconnected sockets for the relay's side of the next connections, made
/// while the loop is idle (`socket` and `TCP_NODELAY`: two system calls
/// fewer on a session's path). Kept for the address family of the servers
/// the loop has connected to.
#[derive(Debug, Default)]
pub struct Spares {
    v4: Vec<Socket>,
    v6: Vec<Socket>,
    /// The family of the last server: the one [`Spares::fill`] makes.
    last_v6: Option<bool>,
    /// The sockets hold their handshake's last ACK for the first bytes
    /// (`ack-with-data`; [`sys::hold_handshake_ack`]).
    hold_ack: bool,
    /// The TCP congestion control the sockets get (`congestion-control`;
    /// `None`: the system's).
    congestion: Option<String>,
}

impl Spares {
    /// No spares yet; the sockets made hold their handshake's last ACK
    /// for the first bytes when `hold_ack` ([`sys::hold_handshake_ack`]).
    pub fn new(hold_ack: bool) -> Spares {
        Spares { hold_ack, ..Spares::default() }
    }

    /// The sockets made get the TCP congestion control `name`
    /// (`congestion-control`; [`sys::set_congestion`]); `None`: the
    /// system's default.
    pub fn with_congestion(self, name: Option<String>) -> Spares {
        Spares { congestion: name, ..self }
    }

    /// A socket for a connection to `server`: a spare, or a new one.
    pub fn take(&mut self, server: SocketAddr) -> io::Result<Socket> {
        self.last_v6 = Some(server.is_ipv6());
        let pool = if server.is_ipv6() { &mut self.v6 } else { &mut self.v4 };
        pool.pop().map_or_else(|| fresh(Domain::for_address(server), self.hold_ack, self.congestion.as_deref()), Ok)
    }

    /// Make spares for the family last taken, up to [`SPARES`] (nothing
    /// before the first connection; stops at the first error).
    pub fn fill(&mut self) {
        let Some(v6) = self.last_v6 else { return };
        let (pool, domain) = if v6 { (&mut self.v6, Domain::IPV6) } else { (&mut self.v4, Domain::IPV4) };
        while pool.len() < SPARES {
            match fresh(domain, self.hold_ack, self.congestion.as_deref()) {
                Ok(s) => pool.push(s),
                Err(_) => return,
            }
        }
    }

    /// The sockets made hold their handshake's last ACK for the first bytes.
    pub fn holds_ack(&self) -> bool {
        self.hold_ack
    }

    /// Spares ready for `server`'s family.
    pub fn ready(&self, server: SocketAddr) -> usize {
        if server.is_ipv6() {
            self.v6.len()
        } else {
            self.v4.len()
        }
    }
}

/// A new non-blocking TCP socket with TCP_NODELAY (and holding its
/// handshake's last ACK for the first bytes when `hold_ack`), with the
/// congestion control `cc` if given.
fn fresh(domain: Domain, hold_ack: bool, cc: Option<&str>) -> io::Result<Socket> {
    let s = Socket::new(domain, Type::STREAM.nonblocking().cloexec(), Some(Protocol::TCP))?;
    let _ = s.set_tcp_nodelay(true);
    if let Some(cc) = cc {
        // Checked when the relay started (`serve`): an error here is not
        // expected; the socket then keeps the system's.
        let _ = sys::set_congestion(&s, cc);
    }
    if hold_ack {
        // Best effort: without it the ACK goes out at once, as before.
        let _ = sys::hold_handshake_ack(&s);
    }
    Ok(s)
}

/// A non-blocking TCP socket (TCP_NODELAY; from `spares`) connecting to
/// `server`: the relay's side of every connection, pre-connected or not.
pub fn open(spares: &mut Spares, server: SocketAddr) -> Result<Socket, OpenError> {
    let s = spares.take(server).map_err(OpenError::Socket)?;
    match s.connect(&server.into()) {
        Ok(()) => Ok(s),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(s),
        Err(e) => Err(OpenError::Connect(e)),
    }
}

/// Classic BPF: `ldb`, `ld` (absolute), `and`, `jeq`, `ret`.
const LDB_ABS: u16 = 0x30;
const LD_ABS: u16 = 0x20;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `SKF_NET_OFF`: loads relative to the network (IPv6) header.
const NET_OFF: u32 = (-0x100000i32) as u32;

/// The filter: TCP flags SYN without ACK (a raw IPv6 socket's data starts
/// at the TCP header), and the IPv6 destination in `prefix`/`len`.
/// Accepted packets are cut to the TCP header's first 20 bytes.
fn syn_filter(prefix: Ipv6Addr, len: u8) -> Vec<SockFilter> {
    let mut checks = vec![(LDB_ABS, 13, 0x12, 0x02)];
    let words = prefix.octets().chunks(4).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]])).collect::<Vec<_>>();
    let mut left = u32::from(len.min(128));
    for (i, w) in words.iter().enumerate() {
        if left == 0 {
            break;
        }
        let bits = left.min(32);
        let mask = if bits == 32 { u32::MAX } else { !(u32::MAX >> bits) };
        // The destination address is at offset 24 of the IPv6 header.
        checks.push((LD_ABS, NET_OFF + 24 + 4 * i as u32, mask, w & mask));
        left -= bits;
    }
    // Each check: load, and, jeq (to the next check, or to the drop).
    let n = checks.len();
    let mut prog = Vec::new();
    for (i, &(ld, off, mask, want)) in checks.iter().enumerate() {
        prog.push(SockFilter::new(ld, 0, 0, off));
        prog.push(SockFilter::new(AND_K, 0, 0, mask));
        // Instructions after this jeq up to the drop: the later checks and the accept.
        let skip = (3 * (n - 1 - i) + 1) as u8;
        prog.push(SockFilter::new(JEQ_K, 0, skip, want));
    }
    prog.push(SockFilter::new(RET_K, 0, 0, 20));
    prog.push(SockFilter::new(RET_K, 0, 0, 0));
    prog
}

/// A non-blocking raw IPv6 TCP socket that receives a copy of each SYN to
/// `prefix`/`len` (CAP_NET_RAW), with its destination address.
pub fn syn_socket(prefix: Ipv6Addr, len: u8) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV6, Type::RAW.nonblocking().cloexec(), Some(Protocol::TCP))?;
    s.attach_filter(&syn_filter(prefix, len))?;
    setsockopt(&s, sockopt::Ipv6RecvPacketInfo, &true)?;
    // Room for a burst of SYNs; beyond it the kernel drops the copies
    // (those connections are connected at accept, as without pre-connect).
    let _ = s.set_recv_buffer_size(256 << 10);
    Ok(s)
}

/// The next SYN on `s`: (client, the address it is for), `WouldBlock`
/// when none waits. Datagrams that are not a SYN's TCP header are skipped.
pub fn recv_syn(s: &Socket) -> io::Result<Key> {
    loop {
        let mut buf = [0u8; 20];
        let mut cmsg = nix::cmsg_space!(libc::in6_pktinfo);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let m = recvmsg::<SockaddrIn6>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_DONTWAIT)?;
        let (n, from) = (m.bytes, m.address);
        let dst = m.cmsgs().ok().into_iter().flatten().find_map(|c| match c {
            ControlMessageOwned::Ipv6PacketInfo(p) => Some(Ipv6Addr::from(p.ipi6_addr.s6_addr)),
            _ => None,
        });
        let (Some(from), Some(dst)) = (from, dst) else { continue };
        if n < 4 {
            continue;
        }
        let sport = u16::from_be_bytes([buf[0], buf[1]]);
        let dport = u16::from_be_bytes([buf[2], buf[3]]);
        let client = SocketAddrV6::new(from.ip(), sport, 0, from.scope_id());
        return Ok((client, SocketAddrV6::new(dst, dport, 0, 0)));
    }
}

/// The key of an accepted connection (`peer`, `local`), when both are IPv6.
pub fn key(peer: SocketAddr, local: SocketAddr) -> Option<Key> {
    match (peer, local) {
        (SocketAddr::V6(p), SocketAddr::V6(l)) => Some((SocketAddrV6::new(*p.ip(), p.port(), 0, p.scope_id()), l)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    fn key_for(port: u16) -> Key {
        ("[::1]:40000".parse().unwrap(), SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0))
    }

    #[test]
    fn a_preconnect_is_claimed_once_for_its_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let (mut t, mut sp) = (Table::new(4, TTL), Spares::default());
        let now = Instant::now();
        assert_eq!(t.offer(key_for(1), server, now, &mut sp), Offer::Started);
        assert_eq!(t.offer(key_for(1), server, now, &mut sp), Offer::Known, "a retransmitted SYN");
        // The server sees the connection before any accept of the relay.
        let (mut srv, _) = l.accept().unwrap();
        let up = t.claim(&key_for(1), server).expect("claimed");
        assert!(t.claim(&key_for(1), server).is_none(), "claimed twice");
        let mut up: TcpStream = up.into();
        up.set_nonblocking(false).unwrap();
        std::io::Write::write_all(&mut up, b"hi").unwrap();
        let mut b = [0u8; 2];
        srv.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hi");
        assert!(t.is_empty());
        // One for another server is not handed out, and is closed.
        assert_eq!(t.offer(key_for(2), server, now, &mut sp), Offer::Started);
        let (mut srv2, _) = l.accept().unwrap();
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(t.claim(&key_for(2), other).is_none());
        srv2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(srv2.read(&mut b).map_err(|e| e.kind()), Err(io::ErrorKind::ConnectionReset));
    }

    #[test]
    fn the_bound_refuses_and_unclaimed_preconnects_expire_with_a_reset() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let (mut t, mut sp) = (Table::new(2, Duration::from_millis(50)), Spares::default());
        let now = Instant::now();
        assert_eq!(t.offer(key_for(1), server, now, &mut sp), Offer::Started);
        assert_eq!(t.offer(key_for(2), server, now, &mut sp), Offer::Started);
        assert_eq!(t.offer(key_for(3), server, now, &mut sp), Offer::Full);
        assert_eq!(t.len(), 2);
        assert_eq!(t.next_deadline(), Some(now + Duration::from_millis(50)));
        assert_eq!(t.expire(now), 0, "not yet");
        assert_eq!(t.expire(now + Duration::from_millis(50)), 2);
        assert!(t.is_empty() && t.next_deadline().is_none());
        for _ in 0..2 {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            assert_eq!(s.read(&mut b).map_err(|e| e.kind()), Err(io::ErrorKind::ConnectionReset));
        }
        // Room again.
        assert_eq!(t.offer(key_for(3), server, now, &mut sp), Offer::Started);
        t.clear();
        assert!(t.is_empty());
    }

    #[test]
    fn spares_are_made_for_the_family_last_used_and_connect() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        let mut sp = Spares::default();
        sp.fill();
        assert_eq!((sp.ready(server), sp.ready(v6)), (0, 0), "no family known before the first connection");
        let first = open(&mut sp, server).expect("a new socket connects");
        sp.fill();
        assert_eq!((sp.ready(server), sp.ready(v6)), (SPARES, 0));
        // A spare is taken, connects (non-blocking, TCP_NODELAY) and carries bytes.
        let up = open(&mut sp, server).expect("a spare connects");
        assert_eq!(sp.ready(server), SPARES - 1);
        assert!(up.tcp_nodelay().unwrap());
        let (_s1, _) = l.accept().unwrap();
        let (mut s2, _) = l.accept().unwrap();
        let mut up: TcpStream = up.into();
        up.set_nonblocking(false).unwrap();
        std::io::Write::write_all(&mut up, b"ok").unwrap();
        let mut b = [0u8; 2];
        s2.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ok");
        drop(first);
        // IPv6 servers (static mappings) get IPv6 spares.
        let _ = sp.take(v6).unwrap();
        sp.fill();
        assert_eq!((sp.ready(server), sp.ready(v6)), (SPARES - 1, SPARES));
    }

    #[test]
    fn spares_get_the_congestion_control_asked_for() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
        // "reno" is built into every kernel. (Where the system's is reno
        // too, the two cases below cannot be told apart.)
        let mut plain = Spares::new(false);
        let made = open(&mut plain, server).unwrap();
        assert_eq!(sys::congestion(&made).unwrap(), system.trim(), "no setting: the system's");
        let mut sp = Spares::new(false).with_congestion(Some("reno".into()));
        let first = open(&mut sp, server).unwrap();
        sp.fill();
        let spare = open(&mut sp, server).unwrap();
        for s in [&first, &spare] {
            assert_eq!(sys::congestion(s).unwrap(), "reno");
        }
    }

    /// `l`'s next connection (waiting at most 5 s).
    fn accept_within(l: &TcpListener) -> TcpStream {
        l.set_nonblocking(true).unwrap();
        let t0 = Instant::now();
        loop {
            match l.accept() {
                Ok((s, _)) => return s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && t0.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("no connection to accept: {e}"),
            }
        }
    }

    /// A socket from `sp` connected (non-blocking) to `server`, once its
    /// connect has completed.
    fn connected(sp: &mut Spares, server: SocketAddr) -> TcpStream {
        let up: TcpStream = open(sp, server).expect("connects").into();
        let t0 = Instant::now();
        while up.peer_addr().is_err() {
            assert!(t0.elapsed() < Duration::from_secs(5), "the connect never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
        up
    }

    #[test]
    fn a_held_handshake_ack_goes_with_the_first_bytes_or_alone() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let server = l.local_addr().unwrap();
        let mut sp = Spares::new(true);
        assert!(sp.holds_ack());
        // Connected on the relay's side, but the server has nothing to
        // accept: the handshake's last ACK is held (the kernel sends it
        // on its own only after its delayed-ACK maximum, 200 ms, which
        // the check leaves out on a machine too slow to look before).
        let t0 = Instant::now();
        let mut up = connected(&mut sp, server);
        let early = l.accept().map(|_| ()).map_err(|e| e.kind());
        if t0.elapsed() < Duration::from_millis(100) {
            assert_eq!(early, Err(io::ErrorKind::WouldBlock), "the ACK went out at once");
        }
        // The first bytes carry it: the server's accept finds them there.
        std::io::Write::write_all(&mut up, b"GET").unwrap();
        let mut a = accept_within(&l);
        a.set_nonblocking(true).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(a.read(&mut b).map_err(|e| e.kind()), Ok(3), "the request is there at accept");
        assert_eq!(&b[..3], b"GET");
        // Nothing to send: the ACK goes alone, and the server can accept.
        let quiet = connected(&mut sp, server);
        sys::send_ack(&quiet).unwrap();
        let mut a = accept_within(&l);
        a.set_nonblocking(true).unwrap();
        assert_eq!(a.read(&mut b).map_err(|e| e.kind()), Err(io::ErrorKind::WouldBlock));
        // Without: the ACK goes with the connect, as with any socket.
        let mut plain = Spares::new(false);
        let _up = connected(&mut plain, server);
        let _a = accept_within(&l);
    }

    #[test]
    fn an_unreachable_server_is_not_preconnected() {
        // TCP to a multicast address fails within the connect call.
        let (mut t, mut sp) = (Table::new(2, TTL), Spares::default());
        let bad: SocketAddr = "224.0.0.1:80".parse().unwrap();
        assert_eq!(t.offer(key_for(1), bad, Instant::now(), &mut sp), Offer::Failed);
        assert!(t.is_empty());
    }

    #[test]
    fn the_filter_passes_only_syns_to_the_prefix() {
        // SYN, SYN-ACK, ACK and a SYN to another address, on loopback:
        // only the connect to the prefix's listener is seen, as a SYN.
        lab::need_root!(); // CAP_NET_RAW
        let l = TcpListener::bind("[::1]:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let s = syn_socket(Ipv6Addr::LOCALHOST, 128).unwrap_or_else(|e| panic!("a raw socket as root: {e}"));
        let c = TcpStream::connect(("::1", port)).unwrap();
        let (_a, _) = l.accept().unwrap();
        std::io::Write::write_all(&mut &c, b"data").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let want = key(c.local_addr().unwrap(), c.peer_addr().unwrap()).unwrap();
        let mut seen = Vec::new();
        loop {
            match recv_syn(&s) {
                Ok(k) => seen.push(k),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        // Other tests of this binary may connect on ::1 at the same time.
        assert_eq!(seen.iter().filter(|k| k.1.port() == port).collect::<Vec<_>>(), vec![&want]);
        // A prefix that ::1 is not in passes nothing.
        let none = syn_socket("2001:db8::".parse().unwrap(), 32).unwrap();
        let c2 = TcpStream::connect(("::1", port)).unwrap();
        let _ = l.accept().unwrap();
        drop(c2);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(recv_syn(&none).map_err(|e| e.kind()), Err(io::ErrorKind::WouldBlock));
    }
}
