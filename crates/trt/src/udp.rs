//! UDP: RFC 3142 §3 — a flow is (IPv6 client, `PREFIX::IPv4:port`). The
//! tproxy rule hands the first datagram to the relay's transparent socket,
//! which learns the original destination (`IPV6_ORIGDSTADDR`); the flow
//! gets an IPv4 socket connected to the server and an IPv6 socket bound to
//! the original destination (a foreign address: `IPV6_TRANSPARENT`) and
//! connected to the client, so answers leave from the address the client
//! wrote to and the client's later datagrams reach the flow directly.
//! Flows idle for `udp-timeout` are forgotten; `max-udp-flows` bounds the
//! table (new flows beyond it are dropped and counted).
//!
//! Static UDP mappings (IPv4-initiated) use the same flows with the roles
//! of the families swapped: a plain IPv4 socket, IPv6 server sockets.

use crate::sys::set_ipv6_transparent;
use crate::tcp::Target;
use crate::Counters;
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
    max: usize,
    idle: Duration,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
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
                if !flows.contains_key(&key) {
                    if flows.len() >= max {
                        c.udp_refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let Some(server) = target.server(dst) else {
                        c.udp_no_server.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let down_local = if fixed.is_none() { Some(dst) } else { None };
                    let made = flow_socket(None, server).and_then(|up| {
                        let down = match down_local {
                            Some(_) => flow_socket(down_local, client)?,
                            None => entry.try_clone()?,
                        };
                        Ok(Flow { up, down, last: Instant::now() })
                    });
                    match made {
                        Ok(f) => {
                            flows.insert(key, f);
                            c.udp_flows_created.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
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
            flows.retain(|_, f| f.last.elapsed() < idle);
            c.udp_flows_expired.fetch_add((before - flows.len()) as u64, Ordering::Relaxed);
            c.udp_flows.store(flows.len(), Ordering::Relaxed);
        }
    }
    Ok(())
}
