//! TCP: RFC 3142 §2 — the relay terminates the IPv6 client's connection
//! (the tproxy rule hands it a connection to `PREFIX::IPv4:port`, for any
//! port; the accepted socket's local address is that original
//! destination), opens a connection to the IPv4 server, and copies both
//! ways with `splice(2)` through a pipe (the bytes stay in the kernel).
//! A half-close is passed on (FIN → `shutdown(SHUT_WR)`); a failed IPv4
//! connect resets the IPv6 client (linger 0), as an unreachable server
//! would.
//!
//! The static mappings run the other way round: an IPv4 listener of this
//! host, an IPv6 server.
//!
//! Each relayed connection takes two small threads (64 KiB stacks), one
//! per direction, with blocking splices; `max-connections` bounds them,
//! and connections beyond it are reset at once and counted.

use crate::sys::Pipe;
use crate::Counters;
use std::io;
use std::net::{Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where an accepted connection goes.
pub trait Target: Send + Sync + 'static {
    /// The server for a connection accepted with local address `local`,
    /// or `None` when the relay has no server for it.
    fn server(&self, local: SocketAddr) -> Option<SocketAddr>;
}

/// RFC 6052 extraction: `PREFIX::IPv4:port` → `IPv4:port`.
#[derive(Debug)]
pub struct Embedded(pub xlat::addr::Rfc6052);

impl Target for Embedded {
    fn server(&self, local: SocketAddr) -> Option<SocketAddr> {
        match local {
            SocketAddr::V6(a) => {
                let v4 = self.0.extract(a.ip())?;
                // RFC 6052 §3.1: no relaying to non-global IPv4 under the well-known prefix.
                if self.0.is_wkp() && !xlat::addr::rfc6052::is_global_v4(v4) {
                    return None;
                }
                if xlat::addr::is_forbidden_v4(v4) {
                    return None;
                }
                Some(SocketAddr::V4(SocketAddrV4::new(v4, a.port())))
            }
            SocketAddr::V4(_) => None,
        }
    }
}

/// A fixed server (a static mapping).
#[derive(Debug)]
pub struct Fixed(pub SocketAddr);

impl Target for Fixed {
    fn server(&self, _: SocketAddr) -> Option<SocketAddr> {
        Some(self.0)
    }
}

/// Reset `s` (close with linger 0).
fn reset(s: TcpStream) {
    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
    drop(s);
}

/// Copy `from` → `to` until end of file, then half-close `to`.
fn pump(from: &TcpStream, to: &TcpStream, c: &Counters, up: bool) {
    let moved = Pipe::new().and_then(|p| p.copy(from, to));
    match moved {
        Ok(n) => {
            let b = if up { &c.bytes_up } else { &c.bytes_down };
            b.fetch_add(n, Ordering::Relaxed);
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        }
    }
}

/// Relay one accepted connection (runs on its own thread).
fn relay(client: TcpStream, target: &dyn Target, timeout: Duration, c: &Counters) {
    let Ok(local) = client.local_addr() else { return };
    let Some(server) = target.server(local) else {
        c.tcp_no_server.fetch_add(1, Ordering::Relaxed);
        return reset(client);
    };
    let upstream = match TcpStream::connect_timeout(&server, timeout) {
        Ok(s) => s,
        Err(_) => {
            c.tcp_connect_failed.fetch_add(1, Ordering::Relaxed);
            return reset(client);
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    c.tcp_relayed.fetch_add(1, Ordering::Relaxed);
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else { return };
    std::thread::scope(|s| {
        let back = std::thread::Builder::new().stack_size(64 << 10).spawn_scoped(s, || pump(&u2, &c2, c, false));
        pump(&client, &upstream, c, true);
        if let Ok(h) = back {
            let _ = h.join();
        }
    });
}

/// Accept on `l` until `stop`, relaying each connection to `target`.
pub fn serve(
    l: TcpListener,
    target: Arc<dyn Target>,
    max: usize,
    timeout: Duration,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    l.set_nonblocking(true)?;
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                if active.load(Ordering::Relaxed) >= max {
                    c.tcp_refused.fetch_add(1, Ordering::Relaxed);
                    reset(s);
                    continue;
                }
                active.fetch_add(1, Ordering::Relaxed);
                c.tcp_active.fetch_add(1, Ordering::Relaxed);
                let (t, c2, a2) = (target.clone(), c.clone(), active.clone());
                let spawned =
                    std::thread::Builder::new().name("trt-tcp".into()).stack_size(64 << 10).spawn(move || {
                        relay(s, &*t, timeout, &c2);
                        a2.fetch_sub(1, Ordering::Relaxed);
                        c2.tcp_active.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::Relaxed);
                    c.tcp_active.fetch_sub(1, Ordering::Relaxed);
                    c.tcp_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let _ = nix::poll::poll(
                    &mut [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&l), nix::poll::PollFlags::POLLIN)],
                    nix::poll::PollTimeout::from(100u16),
                );
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
                ) =>
            {
                // Out of descriptors or memory: back off instead of spinning.
                c.tcp_refused.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => {}
        }
    }
    Ok(())
}
