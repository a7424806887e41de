//! TCP: RFC 3142 §2 — the relay terminates the IPv6 client's connection
//! (the tproxy rule hands it a connection to `PREFIX::IPv4:port`, for any
//! port; the accepted socket's local address is that original
//! destination), opens a connection to the IPv4 server, and copies both
//! ways. A half-close is passed on (FIN → `shutdown(SHUT_WR)`), a reset
//! is passed on as a reset, and a failed IPv4 connect resets the IPv6
//! client (linger 0), as an unreachable server would.
//!
//! The static mappings run the other way round: an IPv4 listener of this
//! host, an IPv6 server.
//!
//! One thread per listener runs an epoll loop ([`serve`]): it accepts,
//! starts the IPv4 connect without blocking (no thread is started for a
//! new connection), and once connected hands the pair to the copy:
//!
//! - **splice** (the default): two small threads (64 KiB stacks) per
//!   connection with blocking `splice(2)` through a 1 MiB pipe; the
//!   receiving leg's window follows what the sending leg takes.
//! - **sockmap** (`copy = "sockmap"`, where the kernel allows it): both sockets go
//!   into the BPF sockhash of `bpf/trt.bpf.c` (crate `xdp`, module
//!   `sockmap`), whose stream verdict redirects every byte a socket
//!   receives to its peer's send side in the kernel. The loop is woken
//!   only by a FIN or an error (its interest is `EPOLLRDHUP`, which data
//!   wake-ups do not match). A FIN is passed on once the peer has sent
//!   every byte the program redirected to it (the verdict counts them; the
//!   peer's acknowledged bytes plus its send queue say what it took).
//!   The redirected bytes wait in the peer's psock queue, which is not
//!   charged to the receiving socket: its window stays open, so this copy
//!   has no flow control of its own (docs/trt.md, Limits).
//!
//! `max-connections` bounds the connections in progress (connecting and
//! relayed); connections beyond it are reset at once and counted.

use crate::sys::{self, Pipe};
use crate::Counters;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xdp::sockmap::SockRelay;

/// The in-kernel copy, shared by the relay's listeners.
pub type Kernel = Arc<Mutex<SockRelay>>;

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
    let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
    drop(s);
}

/// Copy `from` → `to` until end of file, then half-close `to`. An error
/// (a reset on either socket) aborts the pair: both sockets get linger 0,
/// so they are reset when closed, and their receive sides are shut (no
/// FIN sent) to wake the other direction, which then passes no FIN on.
fn pump(from: &TcpStream, to: &TcpStream, c: &Counters, up: bool, abort: &AtomicBool) {
    let moved = Pipe::new().and_then(|p| p.copy(from, to));
    match moved {
        Ok(n) => {
            let b = if up { &c.bytes_up } else { &c.bytes_down };
            b.fetch_add(n, Ordering::Relaxed);
            if !abort.load(Ordering::Acquire) {
                let _ = to.shutdown(Shutdown::Write);
            }
        }
        Err(_) => {
            c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            abort.store(true, Ordering::Release);
            for s in [from, to] {
                let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
                let _ = s.shutdown(Shutdown::Read);
            }
        }
    }
}

/// Relay an established pair with two splice threads (this one returns
/// at once). `done` runs when both directions have ended.
fn spliced(client: TcpStream, upstream: TcpStream, c: Arc<Counters>, done: impl FnOnce() + Send + 'static) -> bool {
    let _ = client.set_nonblocking(false);
    let _ = upstream.set_nonblocking(false);
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        reset(client);
        reset(upstream);
        return false;
    };
    let spawned = std::thread::Builder::new().name("trt-tcp".into()).stack_size(64 << 10).spawn(move || {
        let abort = AtomicBool::new(false);
        std::thread::scope(|s| {
            let back =
                std::thread::Builder::new().stack_size(64 << 10).spawn_scoped(s, || pump(&u2, &c2, &c, false, &abort));
            pump(&client, &upstream, &c, true, &abort);
            if let Ok(h) = back {
                let _ = h.join();
            }
        });
        done();
    });
    spawned.is_ok()
}

/// Copy `from` → `to` with read/write until end of file, then half-close
/// `to`: a sockmap direction whose redirect failed keeps its bytes in the
/// socket's own queue, which only `read` drains.
fn user_copy(mut from: TcpStream, mut to: TcpStream, c: &Counters, up: bool) {
    match io::copy(&mut from, &mut to) {
        Ok(n) => {
            let b = if up { &c.bytes_up } else { &c.bytes_down };
            b.fetch_add(n, Ordering::Relaxed);
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            for s in [&from, &to] {
                let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
                let _ = s.shutdown(Shutdown::Read);
            }
        }
    }
}

/// The listener's token; connections use `slot << 1 | side`.
const LISTENER: u64 = u64::MAX;
/// Side 0 is the accepted socket, side 1 the one the relay opened.
const CLIENT: usize = 0;
const SERVER: usize = 1;

/// A pair in the sockhash.
#[derive(Debug)]
struct Paired {
    socks: [TcpStream; 2],
    cookies: [u64; 2],
    /// `sys::sent_total` of each socket when the pair was made.
    base: [u64; 2],
    /// A FIN came in on this side (its direction is ending).
    fin_in: [bool; 2],
    /// This side's direction is over: its FIN was passed on.
    done: [bool; 2],
    /// This side's direction is copied by a user-space thread, which sets
    /// the flag when it has passed the FIN on.
    user: [Option<Arc<AtomicBool>>; 2],
}

#[derive(Debug)]
enum Conn {
    Connecting { client: TcpStream, up: Socket, deadline: Instant },
    Paired(Box<Paired>),
}

/// The epoll loop of one listener.
struct Loop {
    ep: Epoll,
    target: Arc<dyn Target>,
    max: usize,
    timeout: Duration,
    c: Arc<Counters>,
    kernel: Option<Kernel>,
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections in progress, including those on splice threads.
    active: Arc<AtomicUsize>,
}

fn token(slot: usize, side: usize) -> u64 {
    ((slot as u64) << 1) | side as u64
}

impl Loop {
    fn alloc(&mut self, conn: Conn) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(conn);
                i
            }
            None => {
                self.slots.push(Some(conn));
                self.slots.len() - 1
            }
        }
    }

    fn release(&mut self, slot: usize) -> Option<Conn> {
        let conn = self.slots.get_mut(slot)?.take();
        if conn.is_some() {
            self.free.push(slot);
        }
        conn
    }

    fn begin(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.c.tcp_active.fetch_add(1, Ordering::Relaxed);
    }

    fn end(&self) {
        end(&self.active, &self.c);
    }

    fn accept(&mut self, l: &TcpListener) {
        loop {
            match l.accept() {
                Ok((s, _)) => self.start(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
                    ) =>
                {
                    // Out of descriptors or memory: back off instead of spinning.
                    self.c.tcp_refused.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// A new client: refuse it, or start the IPv4 connect.
    fn start(&mut self, s: TcpStream) {
        if self.active.load(Ordering::Relaxed) >= self.max {
            self.c.tcp_refused.fetch_add(1, Ordering::Relaxed);
            return reset(s);
        }
        let Some(server) = s.local_addr().ok().and_then(|a| self.target.server(a)) else {
            self.c.tcp_no_server.fetch_add(1, Ordering::Relaxed);
            return reset(s);
        };
        let up = match Socket::new(Domain::for_address(server), Type::STREAM, Some(Protocol::TCP)) {
            Ok(u) => u,
            Err(_) => {
                self.c.tcp_refused.fetch_add(1, Ordering::Relaxed);
                return reset(s);
            }
        };
        let _ = up.set_nonblocking(true);
        let _ = up.set_tcp_nodelay(true);
        match up.connect(&server.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(_) => {
                self.c.tcp_connect_failed.fetch_add(1, Ordering::Relaxed);
                return reset(s);
            }
        }
        self.begin();
        let deadline = Instant::now() + self.timeout;
        let slot = self.alloc(Conn::Connecting { client: s, up, deadline });
        let Some(Some(Conn::Connecting { up, .. })) = self.slots.get(slot) else { return };
        if self.ep.add(up, EpollEvent::new(EpollFlags::EPOLLOUT, token(slot, SERVER))).is_err() {
            self.fail_connect(slot);
        }
    }

    fn fail_connect(&mut self, slot: usize) {
        if let Some(Conn::Connecting { client, up, .. }) = self.release(slot) {
            let _ = self.ep.delete(&up);
            self.c.tcp_connect_failed.fetch_add(1, Ordering::Relaxed);
            reset(client);
            self.end();
        }
    }

    /// The IPv4 connect finished (or failed).
    fn connected(&mut self, slot: usize) {
        let ok = match self.slots.get(slot) {
            Some(Some(Conn::Connecting { up, .. })) => matches!(up.take_error(), Ok(None)) && up.peer_addr().is_ok(),
            _ => return,
        };
        if !ok {
            return self.fail_connect(slot);
        }
        let Some(Conn::Connecting { client, up, .. }) = self.release(slot) else { return };
        let _ = self.ep.delete(&up);
        let up: TcpStream = up.into();
        let _ = up.set_nonblocking(false);
        let _ = client.set_nodelay(true);
        self.c.tcp_relayed.fetch_add(1, Ordering::Relaxed);
        let (client, up) = match self.kernel.clone() {
            Some(k) => match self.pair(&k, client, up) {
                Ok(()) => return,
                Err(back) => back,
            },
            None => (client, up),
        };
        let (active, c) = (self.active.clone(), self.c.clone());
        let c2 = c.clone();
        if !spliced(client, up, c2, move || end(&active, &c)) {
            self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            self.end();
        }
    }

    /// Put a connected pair in the sockhash; gives the sockets back when
    /// the sockhash cannot take them (full), for the splice threads.
    fn pair(&mut self, k: &Kernel, client: TcpStream, up: TcpStream) -> Result<(), (TcpStream, TcpStream)> {
        let socks = [client, up];
        let ids = (|| -> io::Result<([u64; 2], [u64; 2])> {
            let cookies = [SockRef::from(&socks[0]).cookie()?, SockRef::from(&socks[1]).cookie()?];
            let base = [sys::sent_total(&socks[0])?, sys::sent_total(&socks[1])?];
            Ok((cookies, base))
        })();
        let Ok((cookies, base)) = ids else {
            let [a, b] = socks;
            return Err((a, b));
        };
        {
            let mut k = k.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = k.pair(&socks[CLIENT], cookies[CLIENT], &socks[SERVER], cookies[SERVER]) {
                tracing::debug!("TRT sockmap: {e}; this connection is spliced");
                let [a, b] = socks;
                return Err((a, b));
            }
        }
        // Bytes that came before the pair was made wait in the receive
        // queues: run the verdict over them now. The kick also takes each
        // socket's lock, so a verdict that raced the inserts is over.
        for s in &socks {
            let _ = sys::kick(s);
        }
        let mut p = Box::new(Paired { socks, cookies, base, fin_in: [false; 2], done: [false; 2], user: [None, None] });
        {
            let k = k.lock().unwrap_or_else(|p| p.into_inner());
            for side in [CLIENT, SERVER] {
                if k.direction(p.cookies[side]).is_some_and(|d| d.user) {
                    // A byte came in between the two inserts: this
                    // direction is copied in user space, in order.
                    let flag = Arc::new(AtomicBool::new(false));
                    let (from, to) = (p.socks[side].try_clone(), p.socks[1 - side].try_clone());
                    let (f2, c) = (flag.clone(), self.c.clone());
                    if let (Ok(from), Ok(to)) = (from, to) {
                        let _ =
                            std::thread::Builder::new().name("trt-copy".into()).stack_size(64 << 10).spawn(move || {
                                user_copy(from, to, &c, side == CLIENT);
                                f2.store(true, Ordering::Release);
                            });
                    }
                    p.user[side] = Some(flag);
                }
            }
        }
        let slot = self.alloc(Conn::Paired(p));
        let Some(Some(Conn::Paired(p))) = self.slots.get(slot) else { return Ok(()) };
        let flags = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLET;
        let added = [CLIENT, SERVER].map(|side| self.ep.add(&p.socks[side], EpollEvent::new(flags, token(slot, side))));
        if added.iter().any(|r| r.is_err()) {
            tracing::debug!(?added, "TRT: epoll add failed");
            self.abort(slot);
        }
        Ok(())
    }

    /// An event on a paired socket.
    fn paired_event(&mut self, slot: usize, side: usize, ev: EpollFlags) {
        let Some(Some(Conn::Paired(p))) = self.slots.get_mut(slot) else { return };
        let err = p.socks[side].take_error();
        tracing::debug!(slot, side, ?ev, ?err, "TRT pair event");
        if matches!(err, Ok(Some(_))) || ev.contains(EpollFlags::EPOLLERR) {
            // A reset (or another error) on one side resets the other.
            self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            return self.abort(slot);
        }
        if ev.intersects(EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP) && p.user[side].is_none() {
            p.fin_in[side] = true;
        }
        self.progress(slot);
    }

    /// Pass on the FINs whose bytes are all sent, and close the pair when
    /// both directions are over. Returns whether a FIN is still waiting.
    fn progress(&mut self, slot: usize) -> bool {
        let Some(Some(Conn::Paired(p))) = self.slots.get_mut(slot) else { return false };
        let mut waiting = false;
        for side in [CLIENT, SERVER] {
            if p.done[side] {
                continue;
            }
            if let Some(f) = &p.user[side] {
                p.done[side] = f.load(Ordering::Acquire);
                continue;
            }
            if !p.fin_in[side] {
                continue;
            }
            let other = 1 - side;
            let redirected = self.kernel.as_ref().and_then(|k| {
                let k = k.lock().unwrap_or_else(|p| p.into_inner());
                k.direction(p.cookies[side])
            });
            let sent = sys::sent_total(&p.socks[other]).map(|n| n.saturating_sub(p.base[other]));
            tracing::trace!(slot, side, ?redirected, ?sent, "TRT FIN waits for its bytes");
            match (redirected, sent) {
                (Some(d), Ok(n)) if n >= d.bytes => {
                    let _ = p.socks[other].shutdown(Shutdown::Write);
                    p.done[side] = true;
                }
                (Some(_), Ok(_)) => waiting = true,
                _ => {
                    let _ = p.socks[other].shutdown(Shutdown::Write);
                    p.done[side] = true;
                }
            }
        }
        if p.done == [true, true] {
            self.close(slot, false);
            return false;
        }
        waiting
    }

    fn abort(&mut self, slot: usize) {
        self.close(slot, true);
    }

    /// Close a pair (with resets when `rst`), count its bytes.
    fn close(&mut self, slot: usize, rst: bool) {
        let Some(Conn::Paired(p)) = self.release(slot) else { return };
        let Paired { socks, cookies, .. } = *p;
        if let Some(k) = &self.kernel {
            let mut k = k.lock().unwrap_or_else(|p| p.into_inner());
            for (side, up) in [(CLIENT, true), (SERVER, false)] {
                if let Some(d) = k.direction(cookies[side]) {
                    let b = if up { &self.c.bytes_up } else { &self.c.bytes_down };
                    b.fetch_add(d.bytes, Ordering::Relaxed);
                }
            }
            k.unpair(cookies[CLIENT], cookies[SERVER]);
        }
        for s in socks {
            let _ = self.ep.delete(&s);
            if rst {
                // Shutting the receive side sends nothing and stops a
                // user-copy thread blocked on it; linger 0 makes the
                // close a reset.
                let _ = s.shutdown(Shutdown::Read);
                reset(s);
            }
        }
        self.end();
    }

    /// Connect timeouts, FINs waiting for their bytes, user-copy threads.
    /// Returns how long the loop may sleep.
    fn timers(&mut self) -> Duration {
        let now = Instant::now();
        let mut sleep = Duration::from_millis(100);
        for slot in 0..self.slots.len() {
            match &self.slots[slot] {
                Some(Conn::Connecting { deadline, .. }) => {
                    if *deadline <= now {
                        self.fail_connect(slot);
                    } else {
                        sleep = sleep.min(*deadline - now);
                    }
                }
                Some(Conn::Paired(p)) => {
                    let pending = (0..2).any(|s| !p.done[s] && (p.fin_in[s] || p.user[s].is_some()));
                    if pending && self.progress(slot) {
                        sleep = sleep.min(Duration::from_millis(1));
                    }
                }
                None => {}
            }
        }
        sleep
    }
}

fn end(active: &AtomicUsize, c: &Counters) {
    active.fetch_sub(1, Ordering::Relaxed);
    c.tcp_active.fetch_sub(1, Ordering::Relaxed);
}

/// Accept on `l` until `stop`, relaying each connection to `target`,
/// through `kernel` when given (else with splice threads).
pub fn serve(
    l: TcpListener,
    target: Arc<dyn Target>,
    max: usize,
    timeout: Duration,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
    kernel: Option<Kernel>,
) -> io::Result<()> {
    l.set_nonblocking(true)?;
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    ep.add(&l, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))?;
    let mut lp = Loop {
        ep,
        target,
        max,
        timeout,
        c,
        kernel,
        slots: Vec::new(),
        free: Vec::new(),
        active: Arc::new(AtomicUsize::new(0)),
    };
    let mut events = [EpollEvent::empty(); 64];
    let mut sleep = Duration::from_millis(100);
    while !stop.load(Ordering::Relaxed) {
        let ms = sleep.as_millis().clamp(1, 100) as u16;
        let n = match lp.ep.wait(&mut events, EpollTimeout::from(ms)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        for ev in &events[..n] {
            let (data, flags) = (ev.data(), ev.events());
            if data == LISTENER {
                lp.accept(&l);
                continue;
            }
            let (slot, side) = ((data >> 1) as usize, (data & 1) as usize);
            match lp.slots.get(slot) {
                Some(Some(Conn::Connecting { .. })) => lp.connected(slot),
                Some(Some(Conn::Paired(_))) => lp.paired_event(slot, side, flags),
                _ => {}
            }
        }
        sleep = lp.timers();
    }
    // Stopping: the pairs still open are reset.
    for slot in 0..lp.slots.len() {
        match lp.slots[slot] {
            Some(Conn::Connecting { .. }) => lp.fail_connect(slot),
            Some(Conn::Paired(_)) => lp.abort(slot),
            None => {}
        }
    }
    Ok(())
}
