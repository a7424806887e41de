//! UDP: RFC 3142 §3 — a flow is (IPv6 client, `PREFIX::IPv4:port`). The
//! tproxy rule hands the first datagram to the relay's transparent socket,
//! which learns the original destination (`IPV6_ORIGDSTADDR`); the flow
//! gets an IPv4 socket connected to the server and an IPv6 socket bound to
//! the original destination (a foreign address: `IPV6_TRANSPARENT`) and
//! connected to the client, so answers leave from the address the client
//! wrote to and the client's later datagrams reach the flow directly.
//! Flows idle for `udp-timeout` are forgotten; `max-udp-flows` bounds the
//! table and `max-udp-flows-per-client` what one client (its IPv6 /64, or
//! its IPv4 address) holds of it: a datagram that would start a flow
//! beyond either is dropped, counted, and answered with an ICMP error
//! (administratively prohibited: ICMPv6 1/1, ICMPv4 3/13) from the
//! address the client wrote to, rate-limited ([`Refuser`]).
//!
//! Static UDP mappings (IPv4-initiated) use the same flows with the roles
//! of the families swapped: a plain IPv4 socket, IPv6 server sockets.

use crate::config::Budgets;
use crate::sys::set_ipv6_transparent;
use crate::tcp::Target;
use crate::Counters;
use budget::{Bucket, ClientKey, FairShare};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn6, SockaddrStorage};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Flow {
    /// Towards the server.
    up: UdpSocket,
    /// Towards the client (bound to the address the client wrote to).
    down: UdpSocket,
    last: Instant,
    /// The client it counts for.
    who: ClientKey,
}

/// The UDP relay's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Flows at most (`max-udp-flows`).
    pub max_flows: usize,
    /// An idle flow is forgotten after this (`udp-timeout`).
    pub idle: Duration,
    /// Per-client shares.
    pub budgets: Budgets,
}

/// ICMP errors for refused datagrams a second at most (RFC 4443 §2.4 (f),
/// RFC 1812 §4.3.2.8), and the bucket's depth.
const ICMP_RATE: u32 = 100;
const ICMP_BURST: u32 = 10;

/// Answers a refused datagram with ICMP "administratively prohibited"
/// (ICMPv6 1/1, ICMPv4 3/13) quoting it, from the address the client
/// wrote to, through a raw socket (`IPPROTO_RAW`: the packet is written
/// whole, CAP_NET_RAW) opened at the first refusal; rate-limited. Without
/// the capability the refusal stays a counted drop.
#[derive(Debug)]
pub struct Refuser {
    v6: Option<Option<Socket>>,
    v4: Option<Option<Socket>>,
    bucket: Bucket,
    start: Instant,
    out: xlat::Out,
}

impl Default for Refuser {
    fn default() -> Self {
        Refuser {
            v6: None,
            v4: None,
            bucket: Bucket::full(ICMP_BURST, 0),
            start: Instant::now(),
            out: xlat::Out::new(),
        }
    }
}

/// The first bytes of the IPv6 or IPv4 UDP datagram `client` → `dst`
/// carrying `payload` (as much as an ICMP error quotes), checksummed.
pub fn invoking(client: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Option<Vec<u8>> {
    use xlat::checksum;
    use xlat::wire::{ipv4, ipv6, proto};
    let udp_len = u16::try_from(8 + payload.len()).ok()?;
    let (mut b, hl, pseudo) = match (client, dst) {
        (SocketAddr::V6(c), SocketAddr::V6(d)) => {
            let mut b = vec![0u8; ipv6::HEADER_LEN];
            ipv6::Ipv6Header {
                traffic_class: 0,
                flow_label: 0,
                payload_len: udp_len,
                next_header: proto::UDP,
                hop_limit: 64,
                src: *c.ip(),
                dst: *d.ip(),
            }
            .emit(&mut b);
            (b, ipv6::HEADER_LEN, checksum::pseudo_v6(c.ip(), d.ip(), proto::UDP, u32::from(udp_len)))
        }
        (SocketAddr::V4(c), SocketAddr::V4(d)) => {
            let mut b = vec![0u8; ipv4::HEADER_LEN];
            ipv4::Ipv4Header {
                tos: 0,
                total_len: u16::try_from(ipv4::HEADER_LEN).ok()?.checked_add(udp_len)?,
                ident: 0,
                df: true,
                mf: false,
                frag_offset: 0,
                ttl: 64,
                protocol: proto::UDP,
                src: *c.ip(),
                dst: *d.ip(),
            }
            .emit(&mut b);
            (b, ipv4::HEADER_LEN, checksum::pseudo_v4(*c.ip(), *d.ip(), proto::UDP, udp_len))
        }
        _ => return None,
    };
    let mut udp = [0u8; 8];
    udp[0..2].copy_from_slice(&client.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    let c = checksum::finish(pseudo + checksum::sum(&udp) + checksum::sum(payload));
    udp[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    b.extend_from_slice(&udp);
    // An error quotes at most the IPv6 minimum MTU's worth.
    let room = xlat::origin::ICMP6_ERROR_MAX.saturating_sub(hl + 8);
    b.extend_from_slice(&payload[..payload.len().min(room)]);
    Some(b)
}

impl Refuser {
    /// Answer the refused datagram `client` → `dst` carrying `payload`.
    pub fn refuse(&mut self, client: SocketAddr, dst: SocketAddr, payload: &[u8], c: &Counters) {
        let now = self.start.elapsed().as_millis() as u64;
        if !self.bucket.take(ICMP_RATE, ICMP_BURST, now) {
            c.udp_icmp_suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // An error must come from the address the client wrote to.
        let Some(inv) = invoking(client, dst, payload).filter(|_| !dst.ip().is_unspecified()) else {
            c.udp_icmp_suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.out.clear();
        let built = match dst.ip() {
            std::net::IpAddr::V6(src) => xlat::origin::icmp6_error(&mut self.out, src, &inv, 1, 1, [0; 4]),
            std::net::IpAddr::V4(src) => xlat::origin::icmp4_error(&mut self.out, src, &inv, 3, 13, [0; 4]),
        };
        let slot = if dst.is_ipv6() { &mut self.v6 } else { &mut self.v4 };
        let sock = slot.get_or_insert_with(|| {
            let d = if dst.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
            Socket::new(d, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))
                .inspect_err(|e| {
                    tracing::warn!(
                        "TRT: no raw socket for ICMP errors ({e}; needs CAP_NET_RAW): refused UDP is dropped silently"
                    )
                })
                .ok()
        });
        let sent = match (built, sock, self.out.get(0)) {
            (true, Some(s), Some((_, pkt))) => s.send_to(pkt, &SockAddr::from(SocketAddr::new(client.ip(), 0))).is_ok(),
            _ => false,
        };
        let n = if sent { &c.udp_icmp_sent } else { &c.udp_icmp_suppressed };
        n.fetch_add(1, Ordering::Relaxed);
    }
}

/// The transparent IPv6 socket the tproxy rule delivers to.
pub fn listener(port: u16) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_only_v6(true)?;
    s.set_reuse_address(true)?;
    set_ipv6_transparent(&s)?;
    nix::sys::socket::setsockopt(&s, sockopt::Ipv6OrigDstAddr, &true).map_err(io::Error::from)?;
    s.bind(&SockAddr::from(SocketAddrV6::new(core::net::Ipv6Addr::UNSPECIFIED, port, 0, 0)))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// A socket bound to `local` (a foreign address for IPv6: transparent)
/// and connected to `peer`.
fn flow_socket(local: Option<SocketAddr>, peer: SocketAddr) -> io::Result<UdpSocket> {
    let d = if peer.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(d, Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(l) = local {
        s.set_reuse_address(true)?;
        if l.is_ipv6() {
            set_ipv6_transparent(&s)?;
        }
        s.bind(&SockAddr::from(l))?;
    }
    s.connect(&SockAddr::from(peer))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Receive one datagram and the destination it was sent to.
fn recv_orig(l: &UdpSocket, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr, SocketAddr)>> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(libc::sockaddr_in6);
    let r = match recvmsg::<SockaddrStorage>(l.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()) {
        Ok(r) => r,
        Err(nix::errno::Errno::EAGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let n = r.bytes;
    let from = r.address.and_then(|a| a.as_sockaddr_in6().map(|a| SocketAddr::V6(SocketAddrV6::from(*a))));
    let mut orig = None;
    for c in r.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::Ipv6OrigDstAddr(sa) = c {
            orig = Some(SocketAddr::V6(SocketAddrV6::from(SockaddrIn6::from(sa))));
        }
    }
    match (from, orig) {
        (Some(f), Some(o)) => Ok(Some((n, f, o))),
        _ => Ok(Some((n, SocketAddr::from(([0u8; 16], 0)), SocketAddr::from(([0u8; 16], 0))))),
    }
}

/// Relay the tproxied UDP of the relay prefix until `stop`.
/// `entry` is the listener and how it learns destinations: `None` for the
/// transparent listener (original destination from the ancillary data),
/// `Some(fixed)` for a static mapping's plain IPv4 socket.
pub fn serve(
    entry: UdpSocket,
    fixed: Option<SocketAddr>,
    target: Arc<dyn Target>,
    limits: Limits,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    let Limits { max_flows: max, idle, budgets } = limits;
    let mut share = FairShare::new(max, budgets.udp_flows_per_client);
    let mut refuser = Refuser::default();
    let mut flows: HashMap<(SocketAddr, SocketAddr), Flow> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    let mut sweep = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let keys: Vec<(SocketAddr, SocketAddr)> = flows.keys().copied().collect();
        let mut ready = vec![false; 1 + 2 * keys.len()];
        {
            let mut fds = vec![PollFd::new(std::os::fd::AsFd::as_fd(&entry), PollFlags::POLLIN)];
            for k in &keys {
                let f = &flows[k];
                fds.push(PollFd::new(std::os::fd::AsFd::as_fd(&f.up), PollFlags::POLLIN));
                fds.push(PollFd::new(std::os::fd::AsFd::as_fd(&f.down), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::from(100u16)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            for (i, p) in fds.iter().enumerate() {
                ready[i] = p.revents().is_some_and(|r| !r.is_empty());
            }
        }
        // New datagrams at the entry socket.
        if ready[0] {
            for _ in 0..256 {
                let got = match fixed {
                    None => recv_orig(&entry, &mut buf)?,
                    Some(f) => match entry.recv_from(&mut buf) {
                        Ok((n, from)) => Some((n, from, f)),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                        Err(_) => None,
                    },
                };
                let Some((n, client, dst)) = got else { break };
                c.udp_in.fetch_add(1, Ordering::Relaxed);
                let key = (client, dst);
                if let std::collections::hash_map::Entry::Vacant(slot) = flows.entry(key) {
                    let Some(server) = target.server(dst) else {
                        c.udp_no_server.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let who = budgets.client(client.ip());
                    if let Err(why) = share.try_acquire(&who) {
                        let counter = match why {
                            budget::Refusal::Full => &c.udp_refused,
                            budget::Refusal::ClientShare => &c.udp_refused_client,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        refuser.refuse(client, dst, &buf[..n], &c);
                        continue;
                    }
                    let down_local = if fixed.is_none() { Some(dst) } else { None };
                    let made = flow_socket(None, server).and_then(|up| {
                        let down = match down_local {
                            Some(_) => flow_socket(down_local, client)?,
                            None => entry.try_clone()?,
                        };
                        Ok(Flow { up, down, last: Instant::now(), who })
                    });
                    match made {
                        Ok(f) => {
                            slot.insert(f);
                            c.udp_flows_created.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            share.release(&who);
                            c.udp_errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                }
                if let Some(f) = flows.get_mut(&key) {
                    f.last = Instant::now();
                    if f.up.send(&buf[..n]).is_err() {
                        c.udp_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        // Flow sockets: answers from servers, later datagrams from clients.
        for (i, k) in keys.iter().enumerate() {
            let Some(f) = flows.get_mut(k) else { continue };
            if ready[1 + 2 * i] {
                while let Ok(n) = f.up.recv(&mut buf) {
                    f.last = Instant::now();
                    c.udp_out.fetch_add(1, Ordering::Relaxed);
                    let sent = if fixed.is_some() { f.down.send_to(&buf[..n], k.0) } else { f.down.send(&buf[..n]) };
                    if sent.is_err() {
                        c.udp_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if ready[2 + 2 * i] && fixed.is_none() {
                while let Ok(n) = f.down.recv(&mut buf) {
                    f.last = Instant::now();
                    c.udp_in.fetch_add(1, Ordering::Relaxed);
                    let _ = f.up.send(&buf[..n]);
                }
            }
        }
        if sweep.elapsed() >= Duration::from_millis(500) {
            sweep = Instant::now();
            let before = flows.len();
            flows.retain(|_, f| {
                let keep = f.last.elapsed() < idle;
                if !keep {
                    share.release(&f.who);
                }
                keep
            });
            c.udp_flows_expired.fetch_add((before - flows.len()) as u64, Ordering::Relaxed);
            c.udp_flows.store(flows.len(), Ordering::Relaxed);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::Fixed;
    use xlat::wire::{icmp, ipv4::Ipv4Packet, ipv6::Ipv6Packet};

    #[test]
    fn the_quoted_datagram_is_well_formed() {
        let c6: SocketAddr = "[2001:db8::2]:40000".parse().unwrap();
        let d6: SocketAddr = "[64:ff9b:1::c633:6401]:53".parse().unwrap();
        let inv = invoking(c6, d6, b"query").unwrap();
        let p = Ipv6Packet::new(&inv).unwrap();
        let (src, dst): (core::net::Ipv6Addr, core::net::Ipv6Addr) =
            ("2001:db8::2".parse().unwrap(), "64:ff9b:1::c633:6401".parse().unwrap());
        assert_eq!((p.src(), p.dst(), p.next_header(), p.payload_len()), (src, dst, 17, 13));
        let body = &inv[40..];
        let sum = xlat::checksum::pseudo_v6(&p.src(), &p.dst(), 17, 13) + xlat::checksum::sum(body);
        assert!(xlat::checksum::verifies(sum), "the UDP checksum verifies");
        let c4: SocketAddr = "192.0.2.2:40000".parse().unwrap();
        let d4: SocketAddr = "198.51.100.254:8080".parse().unwrap();
        let big = vec![7u8; 3000];
        let inv = invoking(c4, d4, &big).unwrap();
        let p = Ipv4Packet::new_quoted(&inv).unwrap();
        assert!(p.checksum_ok());
        assert_eq!(usize::from(p.total_len()), 20 + 8 + 3000, "the header says the whole datagram");
        assert!(inv.len() <= xlat::origin::ICMP6_ERROR_MAX, "only what an error quotes");
        assert!(invoking(c4, d6, b"").is_none(), "mixed families");
        // What the refusal sends: administratively prohibited, quoting it.
        let mut out = xlat::Out::new();
        assert!(xlat::origin::icmp4_error(&mut out, "198.51.100.254".parse().unwrap(), &inv, 3, 13, [0; 4]));
        let (_, e) = out.get(0).unwrap();
        let ip = Ipv4Packet::new(e).unwrap();
        assert_eq!((ip.dst(), ip.src()), ("192.0.2.2".parse().unwrap(), "198.51.100.254".parse().unwrap()));
        let m = icmp::IcmpMessage::new(&e[20..]).unwrap();
        assert_eq!((m.kind(), m.code()), (3, 13));
    }

    /// Issue #29 D11: 5,000 UDP flows from one host locked out everyone.
    /// One client holds at most its share of flows; the datagrams beyond
    /// are refused with ICMP (its socket sees the error; as root, which
    /// raw sockets need: else the refusal is counted, the error not sent)
    /// and counted.
    #[test]
    fn a_client_holds_its_share_of_flows() {
        let root = nix::unistd::geteuid().is_root();
        // An echo server.
        let srv = UdpSocket::bind("127.0.0.1:0").unwrap();
        let srv_addr = srv.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut b = [0u8; 1500];
            while let Ok((n, from)) = srv.recv_from(&mut b) {
                let _ = srv.send_to(&b[..n], from);
            }
        });
        let entry = UdpSocket::bind("127.0.0.1:0").unwrap();
        entry.set_nonblocking(true).unwrap();
        let listen = entry.local_addr().unwrap();
        let (c, stop) = (Arc::new(Counters::default()), Arc::new(AtomicBool::new(false)));
        let limits = Limits {
            max_flows: 100,
            idle: Duration::from_secs(60),
            budgets: Budgets { udp_flows_per_client: 3, ..Budgets::default() },
        };
        let (c2, s2) = (c.clone(), stop.clone());
        let h = std::thread::spawn(move || serve(entry, Some(listen), Arc::new(Fixed(srv_addr)), limits, c2, s2));
        let mut answered = 0;
        let mut refused = 0;
        for i in 0..5 {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(listen).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(if root { 5 } else { 1 }))).unwrap();
            s.send(format!("flow {i}").as_bytes()).unwrap();
            let mut b = [0u8; 64];
            match s.recv(&mut b) {
                Ok(n) => {
                    assert_eq!(&b[..n], format!("flow {i}").as_bytes());
                    answered += 1;
                }
                Err(e) => {
                    // The ICMP error (root: a raw socket) reaches the client's socket.
                    let want = if root { libc::EHOSTUNREACH } else { libc::EAGAIN };
                    assert_eq!(e.raw_os_error(), Some(want), "{e}");
                    refused += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap().unwrap();
        let st = c.snapshot();
        assert_eq!((answered, refused), (3, 2), "{st:?}");
        let sent = if root { 2 } else { 0 };
        assert_eq!((st.udp_flows_created, st.udp_refused_client, st.udp_icmp_sent), (3, 2, sent), "{st:?}");
        assert_eq!(st.udp_icmp_suppressed, 2 - sent);
    }
}
