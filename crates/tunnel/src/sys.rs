//! The tunnels' system interfaces: the protocol-41 raw socket, the Teredo
//! UDP sockets, the TUN device on the IPv6 side (from `netsys`, shared
//! with the daemon) and waiting on several of them at once.
//!
//! No `unsafe` here: socket2 and nix wrap the system calls, and the TUN
//! device and netlink code (which need it) live in `netsys`.

use core::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::io::{self, Read as _};
use std::net::UdpSocket;
use std::os::fd::AsFd;

use anyhow::{Context as _, Result};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// A raw IPv4 socket for protocol 41 that sends complete IPv4 packets
/// (IP_HDRINCL) and receives them with their IPv4 header.
#[derive(Debug)]
pub struct Raw41(Socket);

impl Raw41 {
    /// Open it, bound to `local` so that it receives only what is for us.
    pub fn open(local: Ipv4Addr) -> Result<Raw41> {
        let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(41)))
            .context("opening a raw IPv4 socket for protocol 41 (needs CAP_NET_RAW)")?;
        s.set_header_included_v4(true).context("IP_HDRINCL")?;
        s.set_nonblocking(true)?;
        s.bind(&SockAddr::from(SocketAddrV4::new(local, 0)))
            .with_context(|| format!("binding the protocol-41 socket to {local} (is it a local address?)"))?;
        let _ = s.set_recv_buffer_size(4 << 20);
        Ok(Raw41(s))
    }

    /// Read one packet; `Ok(None)` when there is none.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match (&self.0).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Send a complete IPv4 packet to `dst`.
    pub fn send(&self, pkt: &[u8], dst: Ipv4Addr) -> io::Result<()> {
        self.0.send_to(pkt, &SockAddr::from(SocketAddrV4::new(dst, 0))).map(|_| ())
    }
}

impl AsFd for Raw41 {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A non-blocking UDP socket bound to `addr` (port 0: any).
pub fn udp(addr: SocketAddrV4) -> Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_reuse_address(true);
    s.bind(&SockAddr::from(addr)).with_context(|| format!("binding UDP {addr}"))?;
    s.set_nonblocking(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    Ok(s.into())
}

/// Read one datagram; `Ok(None)` when there is none. ICMP errors the
/// kernel reports on the socket (a peer's port unreachable) are skipped.
pub fn udp_recv(s: &UdpSocket, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddrV4)>> {
    loop {
        return match s.recv_from(buf) {
            Ok((n, core::net::SocketAddr::V4(a))) => Ok(Some((n, a))),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(None),
            Err(e)
                if e.raw_os_error().is_some_and(|c| {
                    c == nix::libc::ECONNREFUSED || c == nix::libc::EHOSTUNREACH || c == nix::libc::ENETUNREACH
                }) =>
            {
                continue
            }
            Err(e) => Err(e),
        };
    }
}

/// The local address the kernel would use towards `dst` (for a socket bound to 0.0.0.0).
pub fn source_towards(dst: Ipv4Addr) -> Option<Ipv4Addr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect(SocketAddrV4::new(dst, 3544)).ok()?;
    match s.local_addr().ok()?.ip() {
        IpAddr::V4(a) if !a.is_unspecified() => Some(a),
        _ => None,
    }
}

pub use netsys::{wait, Device};
