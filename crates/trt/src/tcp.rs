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
//! - **splice** (the default, [`Copier::Loop`]): the loop itself moves the
//!   bytes with non-blocking `splice(2)` through a 1 MiB pipe per
//!   direction (pipes are kept in a small pool for the next connections).
//!   Both sockets are in the loop's epoll set, edge-triggered, for
//!   `EPOLLIN | EPOLLOUT | EPOLLRDHUP`. A direction reads its source only
//!   when its pipe is empty and stops when the peer's send buffer is full
//!   (the peer's `EPOLLOUT` resumes it), so the receiving leg's window
//!   follows what the sending leg takes; it moves at most [`BUDGET`]
//!   bytes per turn and then waits behind the other ready connections.
//! - **splice-threads** ([`Copier::Threads`]): two small threads (64 KiB
//!   stacks) per connection with blocking `splice(2)` through a 1 MiB
//!   pipe.
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
//! A session's first bytes take no extra turns of the loop: a connect
//! that completed within the `connect` call is relayed at once, and a new
//! loop-copied pair moves the bytes already waiting on either side at once,
//! before its sockets enter the epoll set; with [`Opts::ack_with_data`]
//! they carry the server's handshake ACK, so the server's accept finds
//! the request there.
//! The server's socket is made ahead, while the loop is idle
//! ([`pre::Spares`]). Around a session's opening (a new pair, a
//! pre-connect, the server's first bytes passed to the client) the loop
//! polls instead of sleeping, for at most [`Opts::open_spin`]; new connections
//! are accepted before the other events of a batch; with
//! [`Opts::preconnect`] the IPv4 connect starts at the client's SYN
//! ([`pre`]).
//!
//! `max-connections` bounds the connections in progress (connecting and
//! relayed); connections beyond it are reset at once and counted. With a
//! busy-poll window the loop keeps polling its epoll set (yielding the CPU
//! between polls) for that long after its last event instead of sleeping,
//! so the next packet of a session does not wait for a wake-up.

use crate::config::Budgets;
use crate::pre;
use crate::sys::{self, Pipe};
use crate::Counters;
use budget::{ClientKey, FairShare};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use socket2::{SockRef, Socket};
use std::io;
use std::net::{Ipv6Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use xdp::sockmap::SockRelay;

/// The in-kernel copy, shared by the relay's listeners.
pub type Kernel = Arc<Mutex<SockRelay>>;

/// How a listener's relayed connections are copied.
#[derive(Debug, Clone)]
pub enum Copier {
    /// Non-blocking `splice(2)` driven by the listener's loop.
    Loop,
    /// Two threads per connection with blocking `splice(2)`.
    Threads,
    /// The BPF sockhash (connections it cannot take get splice threads).
    Kernel(Kernel),
}

/// What a listener's loop does.
#[derive(Debug, Clone)]
pub struct Opts {
    /// `max-connections`: connections in progress at most.
    pub max: usize,
    /// `connect-timeout` of the connection to the server.
    pub timeout: Duration,
    /// How the bytes are moved.
    pub copier: Copier,
    /// How long the loop keeps polling after its last event (zero: it
    /// sleeps in `epoll_wait`).
    pub busy_poll: Duration,
    /// Start the IPv4 connect at the client's SYN (`preconnect`; the
    /// listener of the relay prefix only).
    pub preconnect: Option<Preconnect>,
    /// `open-spin`: the loop polls instead of sleeping for at most this
    /// long after a new loop-copied pair is made, after a pre-connect is
    /// started, and after a server's first bytes (or FIN) have been passed
    /// to the client (zero: never).
    pub open_spin: Duration,
    /// `ack-with-data`: the loop's copy (`splice`) connects with sockets
    /// that hold their handshake's last ACK for the client's first bytes
    /// ([`sys::hold_handshake_ack`]); a pair whose client has sent
    /// nothing yet sends it alone after `open_spin` (at once when that is
    /// zero). Off by default: plain TCP.
    pub ack_with_data: bool,
    /// `congestion-control`: the TCP congestion control of the relay's
    /// sockets, both legs (the listener's, which accepted sockets inherit,
    /// and those to servers); `None`: the system's default.
    pub congestion: Option<String>,
    /// `close-delay`: the loop's copy (`splice`) passes a FIN on (the
    /// `shutdown`) and closes finished pairs when no session is being
    /// opened (after a server's answer reached its client, or before the
    /// loop sleeps), at the latest this long after the FIN came in (zero:
    /// at once).
    pub close_delay: Duration,
    /// What one client may hold, and the idle timeout of a relayed pair.
    pub budgets: Budgets,
}

/// What each client holds of a listener: its connections (connecting and
/// relayed, wherever they are copied) and, of them, those still
/// connecting. Shared with the splice threads, which give a connection
/// back when they end.
#[derive(Debug)]
struct ClientBook {
    conns: FairShare<ClientKey>,
    connecting: FairShare<ClientKey>,
}

type Book = Arc<Mutex<ClientBook>>;

fn book(b: &Book) -> MutexGuard<'_, ClientBook> {
    function::lock(b)
}

/// Pre-connect ([`pre`]): SYNs to `prefix`/`len` start the IPv4 connect.
#[derive(Debug, Clone, Copy)]
pub struct Preconnect {
    /// Pre-connects waiting for their accept at most.
    pub max: usize,
    /// The prefix whose SYNs are watched.
    pub prefix: Ipv6Addr,
    /// Its length.
    pub len: u8,
    /// Only SYNs to this port (a listener that is not transparent), or
    /// any port (the tproxy listener).
    pub port: Option<u16>,
}

/// Bytes one direction of a [`Copier::Loop`] pair moves per turn before
/// the loop serves the other ready connections.
pub const BUDGET: usize = sys::CHUNK;

/// Empty pipes (two descriptors each) kept for the next connections of a
/// [`Copier::Loop`] listener.
pub const POOL: usize = 64;

/// Where an accepted connection goes.
pub trait Target: Send + Sync + 'static {
    /// The server for a connection accepted with local address `local`,
    /// or `None` when the relay has no server for it.
    fn server(&self, local: SocketAddr) -> Option<SocketAddr>;
}

/// RFC 6052 extraction: `PREFIX::IPv4:port` → `IPv4:port`, for targets
/// the gateway's destination policy accepts (not the gateway's own
/// addresses, loopback, link-local, broadcast ...: refused and counted by
/// the policy, the client reset like any connection without a server).
#[derive(Debug)]
pub struct Embedded {
    /// The relay prefix.
    pub prefix: xlat::addr::Rfc6052,
    /// The destination policy (plane `trt`).
    pub policy: Arc<dstpolicy::Policy>,
}

impl Target for Embedded {
    fn server(&self, local: SocketAddr) -> Option<SocketAddr> {
        match local {
            SocketAddr::V6(a) => {
                let v4 = self.prefix.extract(a.ip())?;
                // RFC 6052 §3.1: no relaying to non-global IPv4 under the well-known prefix.
                if self.prefix.is_wkp() && !xlat::addr::rfc6052::is_global_v4(v4) {
                    return None;
                }
                if xlat::addr::is_forbidden_v4(v4) || self.policy.check(std::net::IpAddr::V4(v4)).is_err() {
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

/// The idle clock of a pair copied by blocking splices (both directions
/// share it): when a byte last moved, and how long the pair may go
/// without one.
#[derive(Debug)]
pub struct Idle {
    base: Instant,
    /// Milliseconds after `base` of the last byte moved.
    last_ms: AtomicU64,
    timeout: Duration,
}

impl Idle {
    /// A pair that moved a byte now and may go `timeout` without one.
    pub fn new(timeout: Duration) -> Idle {
        Idle { base: Instant::now(), last_ms: Default::default(), timeout }
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    /// A byte moved.
    pub fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// No byte moved for the timeout.
    pub fn expired(&self) -> bool {
        let last = self.last_ms.load(Ordering::Relaxed);
        self.now_ms().saturating_sub(last) >= self.timeout.as_millis() as u64
    }

    /// Make the blocking calls on `s` return at least once a second (or
    /// once per timeout, when shorter) so that [`Pipe::copy`] can look.
    pub fn arm(&self, s: &TcpStream) -> io::Result<()> {
        let tick = self.timeout.min(Duration::from_secs(1)).max(Duration::from_millis(10));
        s.set_read_timeout(Some(tick))?;
        s.set_write_timeout(Some(tick))
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
fn pump(from: &TcpStream, to: &TcpStream, c: &Counters, up: bool, abort: &AtomicBool, idle: &Idle) {
    let moved = Pipe::new().and_then(|p| p.copy(from, to, Some(idle)));
    match moved {
        Ok(n) => {
            let b = if up { &c.bytes_up } else { &c.bytes_down };
            b.fetch_add(n, Ordering::Relaxed);
            if !abort.load(Ordering::Acquire) {
                let _ = to.shutdown(Shutdown::Write);
            }
        }
        Err(e) => {
            // One direction's timeout resets the pair: the other sees its
            // receive side shut and ends without a count of its own.
            // Both directions can time out at once: the one that sets
            // `abort` first counts the pair, once.
            let idle = e.kind() == io::ErrorKind::TimedOut;
            if !abort.swap(true, Ordering::AcqRel) {
                let n = if idle { &c.tcp_idle_closed } else { &c.tcp_errors };
                n.fetch_add(1, Ordering::Relaxed);
            }
            for s in [from, to] {
                let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
                let _ = s.shutdown(Shutdown::Read);
            }
        }
    }
}

/// Relay an established pair with two splice threads (this one returns
/// at once). `done` runs when both directions have ended; a pair that
/// moves no byte either way for `idle` is reset.
fn spliced(
    client: TcpStream,
    upstream: TcpStream,
    c: Arc<Counters>,
    idle: Duration,
    done: impl FnOnce() + Send + 'static,
) -> bool {
    let _ = client.set_nonblocking(false);
    let _ = upstream.set_nonblocking(false);
    let idle = Idle::new(idle);
    if idle.arm(&client).and_then(|()| idle.arm(&upstream)).is_err() {
        reset(client);
        reset(upstream);
        return false;
    }
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        reset(client);
        reset(upstream);
        return false;
    };
    let spawned = std::thread::Builder::new().name("trt-tcp".into()).stack_size(64 << 10).spawn(move || {
        let abort = AtomicBool::new(false);
        let idle = &idle;
        std::thread::scope(|s| {
            let back = std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn_scoped(s, || pump(&u2, &c2, &c, false, &abort, idle));
            pump(&client, &upstream, &c, true, &abort, idle);
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
/// The pre-connect SYN socket's token.
const SYNS: u64 = u64::MAX - 1;
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
    /// The client it counts for.
    who: ClientKey,
    /// Bytes the program had redirected both ways when last looked at,
    /// and when they last changed (the idle timeout).
    seen_bytes: u64,
    active_at: Instant,
}

/// One direction of a pair the loop copies: from `socks[side]` to
/// `socks[1 - side]` through its own pipe.
#[derive(Debug)]
struct Flow {
    pipe: Pipe,
    /// Bytes in the pipe, not sent yet.
    queued: usize,
    /// The source reached its end of file (a FIN came in).
    eof: bool,
    /// The FIN was passed on: this direction is over.
    done: bool,
    /// The peer's send buffer is full: wait for its `EPOLLOUT`.
    blocked: bool,
    /// Bytes sent so far.
    moved: u64,
    /// Every byte is sent and the FIN waits to be passed on (`close-delay`).
    fin_due: bool,
}

impl Flow {
    fn new(pipe: Pipe) -> Flow {
        Flow { pipe, queued: 0, eof: false, done: false, blocked: false, moved: 0, fin_due: false }
    }

    /// Pass the FIN on: this direction is over.
    fn pass_fin(&mut self, to: &TcpStream) {
        let _ = to.shutdown(Shutdown::Write);
        self.done = true;
        self.fin_due = false;
    }

    /// Move bytes `from` → `to` until `from` has none, `to` has no room,
    /// or `budget` bytes were sent (then true: call again). The pipe is
    /// filled only when empty, so a slow `to` stops the reads from `from`
    /// and its window closes. At `from`'s end of file, once the pipe is
    /// empty, `to` is half-closed, or with `defer` the FIN is left due
    /// ([`Flow::fin_due`]). An error is a reset of either socket.
    fn pump(
        &mut self,
        from: &TcpStream,
        to: &TcpStream,
        budget: usize,
        bytes: &AtomicU64,
        defer: bool,
    ) -> io::Result<bool> {
        let mut sent = 0;
        while !self.done {
            while self.queued > 0 {
                match self.pipe.drain(to, self.queued) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        self.queued -= n;
                        sent += n;
                        self.moved += n as u64;
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.blocked = true;
                        return Ok(false);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            self.blocked = false;
            if self.eof && defer {
                self.fin_due = true;
                return Ok(false);
            } else if self.eof {
                self.pass_fin(to);
            } else if sent >= budget {
                return Ok(true);
            } else {
                match self.pipe.fill(from, sys::CHUNK) {
                    Ok(0) => self.eof = true,
                    Ok(n) => self.queued = n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(false)
    }
}

/// A pair the loop copies ([`Copier::Loop`]); `flows[side]` moves the
/// bytes that `socks[side]` receives.
#[derive(Debug)]
struct Spliced {
    socks: [TcpStream; 2],
    flows: [Flow; 2],
    /// Being opened: the server's first bytes (or FIN) have not been
    /// passed on yet (the loop's open-spin waits for them).
    opening: bool,
    /// The server's handshake ACK is held for the client's first bytes
    /// until then (`ack-with-data`; sent alone after it).
    ack_due: Option<Instant>,
    /// The client it counts for.
    who: ClientKey,
    /// When a byte last moved either way (the idle timeout).
    active_at: Instant,
}

#[derive(Debug)]
enum Conn {
    Connecting { client: TcpStream, up: Socket, deadline: Instant, who: ClientKey },
    Paired(Box<Paired>),
    Spliced(Box<Spliced>),
}

/// The epoll loop of one listener.
struct Loop {
    ep: Epoll,
    target: Arc<dyn Target>,
    max: usize,
    timeout: Duration,
    c: Arc<Counters>,
    kernel: Option<Kernel>,
    /// Copy with splice threads (`splice-threads`), not in the loop.
    threads: bool,
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Slots released while the current batch of events is handled: they
    /// are reused only after it, so that an event of the batch for a
    /// closed connection cannot reach a new one in the same slot.
    freed: Vec<usize>,
    /// Connections in progress, including those on splice threads.
    active: Arc<AtomicUsize>,
    /// Empty pipes for the next loop-copied pairs.
    pipes: Vec<Pipe>,
    /// Loop-copied directions (slot, side) that used up their budget
    /// and have more to move.
    again: Vec<(usize, usize)>,
    /// Pre-connect: the SYN socket, its settings and the connects started.
    syns: Option<(Socket, Preconnect)>,
    pre: pre::Table,
    /// Sockets for the next connections to servers, made while idle.
    spares: pre::Spares,
    /// `open-spin`, and until when the loop polls instead of sleeping:
    /// open-spin after the newest pair was made, pre-connect started, or
    /// answer passed to a client.
    open_spin: Duration,
    spin_until: Instant,
    /// A pre-connect was started since the loop last looked (its accept
    /// is tried before the rest of the batch).
    pre_started: bool,
    /// Pairs whose server's handshake ACK waits for their client's first
    /// bytes ([`Spliced::ack_due`]).
    acks: Vec<usize>,
    /// Pairs being opened ([`Spliced::opening`]): their answers are on
    /// the way, and the loop makes no spare socket meanwhile.
    answers_due: usize,
    /// `close-delay` (zero: FINs and closes at once).
    close_delay: Duration,
    /// Closing work put off while sessions open: FINs due (slot, side)
    /// and finished pairs (slot, [`DONE`]), with when the oldest came.
    closing: Vec<(usize, usize)>,
    closing_since: Option<Instant>,
    /// A server's answer reached its client in this batch: a moment
    /// between sessions, for the closing work.
    answered: bool,
    /// Per-client limits and the idle timeout; what each client holds.
    budgets: Budgets,
    book: Book,
    /// When the relayed pairs were last looked at for the idle timeout.
    idle_check: Instant,
}

/// The side of a [`Loop::closing`] entry for a finished pair.
const DONE: usize = 2;

/// The epoll interest of a loop-copied socket.
const SPLICED: EpollFlags =
    EpollFlags::EPOLLIN.union(EpollFlags::EPOLLOUT).union(EpollFlags::EPOLLRDHUP).union(EpollFlags::EPOLLET);

/// Something the relay sent to the server (the client's bytes or its FIN)
/// carried the handshake's last ACK.
fn ack_sent(p: &Spliced) -> bool {
    p.flows[CLIENT].moved > 0 || p.flows[CLIENT].done
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
            self.freed.push(slot);
        }
        conn
    }

    fn begin(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.c.tcp_active.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection of `who` is over.
    fn end(&self, who: &ClientKey) {
        end(&self.active, &self.c);
        book(&self.book).conns.release(who);
    }

    /// Take a connection (and a connect in progress) for `who`, or count
    /// why not.
    fn admit(&self, who: &ClientKey) -> bool {
        let mut b = book(&self.book);
        if b.conns.try_acquire(who).is_err() {
            self.c.tcp_refused_client.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if b.connecting.try_acquire(who).is_err() {
            b.conns.release(who);
            self.c.tcp_refused_connecting.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// `who`'s connect is over (connected, or failed).
    fn connect_done(&self, who: &ClientKey) {
        book(&self.book).connecting.release(who);
    }

    /// The copy is the loop's (non-blocking sockets).
    fn in_loop(&self) -> bool {
        self.kernel.is_none() && !self.threads
    }

    fn accept(&mut self, l: &TcpListener) {
        // The SYNs of the connections about to be accepted are in the SYN
        // socket already (its copy is delivered before TCP handles the
        // SYN): start their connects first, so that each accept finds its
        // own and no pre-connect is left behind for an accepted connection.
        self.syns_in();
        // The loop's copy wants a non-blocking socket: accept it so. The
        // accepted socket inherits TCP_NODELAY from the listener (`serve`).
        let flags = libc::SOCK_CLOEXEC | if self.in_loop() { libc::SOCK_NONBLOCK } else { 0 };
        loop {
            match SockRef::from(l).accept4(flags) {
                Ok((s, peer)) => match peer.as_socket() {
                    Some(peer) => self.start(s.into(), peer),
                    None => reset(s.into()),
                },
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

    /// The SYNs waiting on the SYN socket: start their IPv4 connects.
    fn syns_in(&mut self) {
        let Some((syns, p)) = &self.syns else { return };
        let now = Instant::now();
        // A bounded batch: a flood does not hold up the loop.
        for _ in 0..256 {
            let key = match pre::recv_syn(syns) {
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if p.port.is_some_and(|port| port != key.1.port()) {
                continue;
            }
            // Connections beyond max-connections are refused at accept.
            if self.active.load(Ordering::Relaxed) + self.pre.len() >= self.max {
                self.c.tcp_preconnect_refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Some(server) = self.target.server(SocketAddr::V6(key.1)) else { continue };
            match self.pre.offer(key, server, now, &mut self.spares) {
                pre::Offer::Started => {
                    self.c.tcp_preconnects.fetch_add(1, Ordering::Relaxed);
                    self.pre_started = true;
                    // Its accept follows within microseconds (the client's
                    // handshake completes in the softirq that sent the SYN):
                    // open-spin from here, so that the accept finds the loop
                    // running instead of paying a second wake-up.
                    self.spin_until = self.spin_until.max(now + self.open_spin);
                }
                pre::Offer::Full => {
                    self.c.tcp_preconnect_refused.fetch_add(1, Ordering::Relaxed);
                }
                pre::Offer::Known | pre::Offer::Failed => {}
            }
        }
    }

    /// A new client: refuse it, or start the IPv4 connect (or take the
    /// one its SYN started).
    fn start(&mut self, s: TcpStream, peer: SocketAddr) {
        let local = s.local_addr().ok();
        let server = local.and_then(|a| self.target.server(a));
        let key = local.and_then(|l| pre::key(peer, l));
        let claimed = match (server, key) {
            (Some(server), Some(key)) if self.syns.is_some() => self.pre.claim(&key, server).or_else(|| {
                // The whole handshake may have run between the loop's
                // last read of the SYN socket and this accept: its SYN is
                // queued there by now.
                self.syns_in();
                self.pre.claim(&key, server)
            }),
            _ => None,
        };
        let who = self.budgets.client(peer.ip());
        let refuse = |s: TcpStream, claimed: Option<Socket>| {
            if let Some(u) = claimed {
                let _ = u.set_linger(Some(Duration::ZERO));
            }
            reset(s);
        };
        if self.active.load(Ordering::Relaxed) >= self.max {
            self.c.tcp_refused.fetch_add(1, Ordering::Relaxed);
            return refuse(s, claimed);
        }
        let Some(server) = server else {
            self.c.tcp_no_server.fetch_add(1, Ordering::Relaxed);
            return refuse(s, claimed);
        };
        // The client's share (issue #29): no connect is started for a client beyond it.
        if !self.admit(&who) {
            return refuse(s, claimed);
        }
        let up = match claimed {
            Some(u) => {
                self.c.tcp_preconnect_claimed.fetch_add(1, Ordering::Relaxed);
                u
            }
            None => match pre::open(&mut self.spares, server) {
                Ok(u) => u,
                Err(e) => {
                    let n = match e {
                        pre::OpenError::Socket(_) => &self.c.tcp_refused,
                        pre::OpenError::Connect(_) => &self.c.tcp_connect_failed,
                    };
                    n.fetch_add(1, Ordering::Relaxed);
                    self.connect_done(&who);
                    book(&self.book).conns.release(&who);
                    return reset(s);
                }
            },
        };
        self.begin();
        let deadline = Instant::now() + self.timeout;
        let slot = self.alloc(Conn::Connecting { client: s, up, deadline, who });
        let Some(Some(Conn::Connecting { up, .. })) = self.slots.get(slot) else { return };
        // A server on this host or a veth away often answers within the
        // connect call (the handshake runs in the softirq the SYN's
        // transmission raised), and a pre-connect has usually finished:
        // then relay at once instead of one more turn of the loop for the
        // `EPOLLOUT`.
        let connected = up.peer_addr().is_ok();
        if connected && self.in_loop() {
            // The loop's copy: the client's first bytes go out before the
            // sockets enter the epoll set (`splice`).
            return self.splice(slot, false);
        }
        // The loop's copy: the socket's final interest at once (no
        // epoll_ctl to change it once connected); its `EPOLLOUT` says
        // the connect finished.
        let flags = if self.in_loop() { SPLICED } else { EpollFlags::EPOLLOUT };
        if self.ep.add(up, EpollEvent::new(flags, token(slot, SERVER))).is_err() {
            return self.fail_connect(slot);
        }
        if connected {
            self.relay(slot);
        }
    }

    fn fail_connect(&mut self, slot: usize) {
        if let Some(Conn::Connecting { client, up, who, .. }) = self.release(slot) {
            let _ = self.ep.delete(&up);
            self.c.tcp_connect_failed.fetch_add(1, Ordering::Relaxed);
            reset(client);
            self.connect_done(&who);
            self.end(&who);
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
        self.relay(slot);
    }

    /// Relay the connected pair in `slot` with the listener's copy.
    fn relay(&mut self, slot: usize) {
        if self.in_loop() {
            return self.splice(slot, true);
        }
        let Some(Conn::Connecting { client, up, who, .. }) = self.release(slot) else { return };
        self.connect_done(&who);
        let _ = self.ep.delete(&up);
        let up: TcpStream = up.into();
        let _ = up.set_nonblocking(false);
        self.c.tcp_relayed.fetch_add(1, Ordering::Relaxed);
        let (client, up) = match self.kernel.clone() {
            Some(k) => match self.pair(&k, client, up, who) {
                Ok(()) => return,
                Err(back) => back,
            },
            None => (client, up),
        };
        let (active, c, b) = (self.active.clone(), self.c.clone(), self.book.clone());
        let c2 = c.clone();
        let done = move || {
            end(&active, &c);
            book(&b).conns.release(&who);
        };
        if !spliced(client, up, c2, self.budgets.tcp_idle_timeout, done) {
            self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            self.end(&who);
        }
    }

    /// A pipe from the pool, or a new one.
    fn pipe(&mut self) -> io::Result<Pipe> {
        self.pipes.pop().map_or_else(Pipe::nonblocking, Ok)
    }

    /// Copy the connected pair in `slot` in the loop. The client's first
    /// bytes (sent right after its handshake) are usually waiting: they
    /// are moved at once, before any `epoll_ctl`, and carry the server's
    /// handshake ACK (`ack-with-data`; sent alone when there are none).
    /// Then the sockets join the epoll set: the server's only if it is not
    /// in it already (`up_polled`: it waited there for its connect). A
    /// socket added with bytes or a FIN waiting is reported at once, so
    /// nothing that came before the adds is missed. The client's socket is
    /// non-blocking and has TCP_NODELAY from its accept.
    fn splice(&mut self, slot: usize, up_polled: bool) {
        let Some(Conn::Connecting { client, up, who, .. }) = self.slots.get_mut(slot).and_then(Option::take) else {
            return;
        };
        self.connect_done(&who);
        let up: TcpStream = up.into();
        self.c.tcp_relayed.fetch_add(1, Ordering::Relaxed);
        let (a, b) = (self.pipe(), self.pipe());
        let (Ok(a), Ok(b)) = (a, b) else {
            self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            if up_polled {
                let _ = self.ep.delete(&up);
            }
            reset(client);
            reset(up);
            self.freed.push(slot);
            return self.end(&who);
        };
        let opening = !self.open_spin.is_zero();
        if opening {
            self.answers_due += 1;
            self.spin_until = self.spin_until.max(Instant::now() + self.open_spin);
        }
        let flows = [Flow::new(a), Flow::new(b)];
        let p =
            Box::new(Spliced { socks: [client, up], flows, opening, ack_due: None, who, active_at: Instant::now() });
        self.slots[slot] = Some(Conn::Spliced(p));
        self.pump(slot, CLIENT);
        let Some(Some(Conn::Spliced(p))) = self.slots.get_mut(slot) else { return };
        if self.spares.holds_ack() && !ack_sent(p) {
            // Nothing from the client yet: a pre-connect (or a fast
            // connect) can be ready before the client's request, which
            // follows its handshake within microseconds. The ACK waits
            // for it for at most `open-spin` (the loop polls meanwhile),
            // so that the server is woken once, with the request; then,
            // or at once without open-spin, it goes alone (a server that
            // speaks first, a slow client): the server's accept must not
            // wait longer.
            if opening {
                let due = Instant::now() + self.open_spin;
                p.ack_due = Some(due);
                self.acks.push(slot);
                self.spin_until = self.spin_until.max(due);
            } else {
                self.c.tcp_ack_alone.fetch_add(1, Ordering::Relaxed);
                let _ = sys::send_ack(&p.socks[SERVER]);
            }
        }
        let mut added = self.ep.add(&p.socks[CLIENT], EpollEvent::new(SPLICED, token(slot, CLIENT)));
        if !up_polled && added.is_ok() {
            added = self.ep.add(&p.socks[SERVER], EpollEvent::new(SPLICED, token(slot, SERVER)));
        }
        if let Err(e) = added {
            tracing::debug!("TRT: epoll: {e}");
            self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            return self.close_spliced(slot, true);
        }
        if up_polled {
            // Its edge may have been taken by the connect's `EPOLLOUT`.
            self.pump(slot, SERVER);
        }
    }

    /// An event on a loop-copied socket: move what it allows.
    fn spliced_event(&mut self, slot: usize, side: usize, ev: EpollFlags) {
        let Some(Some(Conn::Spliced(p))) = self.slots.get(slot) else { return };
        if ev.contains(EpollFlags::EPOLLERR) {
            // A reset (or another error) on one side resets the other.
            self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
            return self.close_spliced(slot, true);
        }
        let hup = ev.contains(EpollFlags::EPOLLHUP);
        // This side's bytes, unless they wait for room at the peer.
        let read = (hup || ev.intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP)) && !p.flows[side].blocked;
        // The peer's bytes that waited for room here.
        let write = (hup || ev.contains(EpollFlags::EPOLLOUT)) && p.flows[1 - side].blocked;
        if read {
            self.pump(slot, side);
        }
        if write {
            self.pump(slot, 1 - side);
        }
    }

    /// One turn of a loop-copied direction; closes the pair when both
    /// directions are over, resets it on an error.
    fn pump(&mut self, slot: usize, side: usize) {
        let Some(Some(Conn::Spliced(p))) = self.slots.get_mut(slot) else { return };
        let bytes = if side == CLIENT { &self.c.bytes_up } else { &self.c.bytes_down };
        let [a, b] = &p.socks;
        let (from, to) = if side == CLIENT { (a, b) } else { (b, a) };
        let defer = !self.close_delay.is_zero();
        let was_due = p.flows[side].fin_due;
        let before = p.flows[side].moved;
        let r = p.flows[side].pump(from, to, BUDGET, bytes, defer);
        if p.flows[side].moved != before {
            p.active_at = Instant::now();
        }
        if p.opening && (p.flows[SERVER].moved > 0 || p.flows[SERVER].eof) {
            // The server's answer reached the client: the session is open.
            // The loop keeps polling for open-spin more: the session's
            // FINs and the next session's SYN or accept find it running.
            p.opening = false;
            self.answers_due -= 1;
            self.answered = true;
            self.spin_until = self.spin_until.max(Instant::now() + self.open_spin);
        }
        let both_done = p.flows[CLIENT].done && p.flows[SERVER].done;
        if p.flows[side].fin_due && !was_due {
            self.c.tcp_fin_deferred.fetch_add(1, Ordering::Relaxed);
            self.put_off(slot, side);
        }
        match r {
            Ok(true) => self.again.push((slot, side)),
            Ok(false) if both_done => self.finished(slot),
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(slot, side, "TRT copy: {e}");
                self.c.tcp_errors.fetch_add(1, Ordering::Relaxed);
                self.close_spliced(slot, true);
            }
        }
    }

    /// The held handshake ACKs: forgotten once the client's first bytes
    /// (or its FIN) carried them, sent alone once due.
    fn acks_due(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.acks.len() {
            let slot = self.acks[i];
            let keep = match self.slots.get_mut(slot) {
                // A stale entry (the pair closed, the slot reused by a
                // pair that holds no ACK) is dropped.
                Some(Some(Conn::Spliced(p))) => match p.ack_due {
                    Some(_) if ack_sent(p) => {
                        p.ack_due = None;
                        false
                    }
                    Some(due) if due <= now => {
                        p.ack_due = None;
                        self.c.tcp_ack_alone.fetch_add(1, Ordering::Relaxed);
                        let _ = sys::send_ack(&p.socks[SERVER]);
                        false
                    }
                    Some(_) => true,
                    None => false,
                },
                _ => false,
            };
            if keep {
                i += 1;
            } else {
                self.acks.swap_remove(i);
            }
        }
    }

    /// Closing work for later ([`Loop::closing`]).
    fn put_off(&mut self, slot: usize, side: usize) {
        self.closing.push((slot, side));
        self.closing_since.get_or_insert_with(Instant::now);
    }

    /// A pair whose directions are both over: closed at once, or put off
    /// with the FINs (`close-delay`).
    fn finished(&mut self, slot: usize) {
        if self.close_delay.is_zero() {
            self.close_spliced(slot, false);
        } else {
            self.put_off(slot, DONE);
        }
    }

    /// No session is being opened: no pre-connect waits for its accept, no
    /// pair for its answer or its client's first bytes.
    fn quiet(&self) -> bool {
        self.pre.is_empty() && self.answers_due == 0 && self.acks.is_empty()
    }

    /// The closing work put off: at a moment between sessions (`quiet`
    /// after an answer), before the loop sleeps (`all`), or once the oldest
    /// has waited `close-delay` (counted).
    fn closing_due(&mut self, all: bool) {
        // Only an answer of this batch makes a moment between sessions.
        let gap = std::mem::take(&mut self.answered) && self.quiet();
        if gap && !self.close_delay.is_zero() {
            // The spare socket the session took is made here too, not on
            // an idle turn that the next session's SYN may find busy.
            self.spares.fill();
        }
        let Some(since) = self.closing_since else { return };
        let late = since.elapsed() >= self.close_delay;
        if !(all || late || gap) {
            return;
        }
        if late {
            self.c.tcp_fin_late.fetch_add(1, Ordering::Relaxed);
        }
        self.closing_since = None;
        for (slot, side) in std::mem::take(&mut self.closing) {
            // A stale entry (the pair reset meanwhile, the slot reused)
            // finds no FIN due, or a pair not finished.
            let Some(Some(Conn::Spliced(p))) = self.slots.get_mut(slot) else { continue };
            if side < DONE && p.flows[side].fin_due {
                p.flows[side].pass_fin(&p.socks[1 - side]);
            }
            if p.flows[CLIENT].done && p.flows[SERVER].done {
                self.close_spliced(slot, false);
            }
        }
    }

    /// The directions that used up their budget get their next turn.
    fn pump_again(&mut self) {
        for (slot, side) in std::mem::take(&mut self.again) {
            // A stale entry (the pair closed, the slot reused) only costs
            // a splice that finds nothing.
            if matches!(self.slots.get(slot), Some(Some(Conn::Spliced(p))) if !p.flows[side].blocked) {
                self.pump(slot, side);
            }
        }
    }

    /// Close a loop-copied pair (with resets when `rst`); its empty pipes
    /// go back to the pool.
    fn close_spliced(&mut self, slot: usize, rst: bool) {
        let Some(Conn::Spliced(p)) = self.release(slot) else { return };
        let Spliced { socks, flows, opening, who, .. } = *p;
        if opening {
            self.answers_due -= 1;
        }
        // Closing a socket takes it out of the epoll set (the loop holds
        // its only descriptor).
        for s in socks {
            if rst {
                reset(s);
            }
        }
        for f in flows {
            if f.queued == 0 && self.pipes.len() < POOL {
                self.pipes.push(f.pipe);
            }
        }
        self.end(&who);
    }

    /// Put a connected pair in the sockhash; gives the sockets back when
    /// the sockhash cannot take them (full), for the splice threads.
    fn pair(
        &mut self,
        k: &Kernel,
        client: TcpStream,
        up: TcpStream,
        who: ClientKey,
    ) -> Result<(), (TcpStream, TcpStream)> {
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
            let mut k = function::lock(k);
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
        let mut p = Box::new(Paired {
            socks,
            cookies,
            base,
            fin_in: [false; 2],
            done: [false; 2],
            user: [None, None],
            who,
            seen_bytes: 0,
            active_at: Instant::now(),
        });
        {
            let k = function::lock(k);
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
                let k = function::lock(k);
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
        let Paired { socks, cookies, who, .. } = *p;
        if let Some(k) = &self.kernel {
            let mut k = function::lock(k);
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
        self.end(&who);
    }

    /// Bytes the program redirected both ways for pair `p` so far.
    fn redirected(&self, p: &Paired) -> u64 {
        let Some(k) = &self.kernel else { return 0 };
        let k = function::lock(k);
        p.cookies.iter().filter_map(|c| k.direction(*c)).map(|d| d.bytes).sum()
    }

    /// The idle timeout (issue #29): a relayed pair that moved no byte
    /// either way for `tcp-idle-timeout` is reset, counted. Looked at once
    /// a second.
    fn idle_sweep(&mut self, now: Instant) {
        if now.saturating_duration_since(self.idle_check) < Duration::from_secs(1) {
            return;
        }
        self.idle_check = now;
        let limit = self.budgets.tcp_idle_timeout;
        for slot in 0..self.slots.len() {
            let idle = match &self.slots[slot] {
                Some(Conn::Spliced(p)) => now.saturating_duration_since(p.active_at) >= limit,
                Some(Conn::Paired(p)) if p.user.iter().all(Option::is_none) => {
                    let bytes = self.redirected(p);
                    let Some(Some(Conn::Paired(p))) = self.slots.get_mut(slot) else { continue };
                    if bytes != p.seen_bytes {
                        p.seen_bytes = bytes;
                        p.active_at = now;
                    }
                    now.saturating_duration_since(p.active_at) >= limit
                }
                _ => false,
            };
            if !idle {
                continue;
            }
            self.c.tcp_idle_closed.fetch_add(1, Ordering::Relaxed);
            match &self.slots[slot] {
                Some(Conn::Spliced(_)) => self.close_spliced(slot, true),
                _ => self.abort(slot),
            }
        }
    }

    /// Connect timeouts, FINs waiting for their bytes, user-copy threads,
    /// idle pairs. Returns how long the loop may sleep.
    fn timers(&mut self) -> Duration {
        let now = Instant::now();
        self.idle_sweep(now);
        let mut sleep = Duration::from_millis(100);
        if !self.pre.is_empty() {
            let n = self.pre.expire(now);
            self.c.tcp_preconnect_expired.fetch_add(n as u64, Ordering::Relaxed);
            if let Some(d) = self.pre.next_deadline() {
                sleep = sleep.min(d.saturating_duration_since(now));
            }
        }
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
                Some(Conn::Spliced(_)) | None => {}
            }
        }
        sleep
    }
}

/// The error of a `congestion-control` the kernel refuses.
pub fn congestion_error(name: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENOENT) => {
            "the kernel has no such TCP congestion control (see net.ipv4.tcp_available_congestion_control)".to_string()
        }
        Some(libc::EPERM) => {
            "not permitted (needs CAP_NET_ADMIN, or a name in net.ipv4.tcp_allowed_congestion_control)".to_string()
        }
        _ => e.to_string(),
    };
    io::Error::new(e.kind(), format!("[trt] congestion-control: `{name}`: {why}"))
}

fn end(active: &AtomicUsize, c: &Counters) {
    active.fetch_sub(1, Ordering::Relaxed);
    c.tcp_active.fetch_sub(1, Ordering::Relaxed);
}

/// Accept on `l` until `stop`, relaying each connection to `target` as
/// `o` says.
pub fn serve(
    l: TcpListener,
    target: Arc<dyn Target>,
    o: Opts,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    l.set_nonblocking(true)?;
    // Accepted sockets inherit it.
    SockRef::from(&l).set_tcp_nodelay(true)?;
    if let Some(cc) = &o.congestion {
        sys::set_congestion(&l, cc).map_err(|e| congestion_error(cc, e))?;
    }
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    ep.add(&l, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))?;
    let syns = o.preconnect.and_then(|p| match pre::syn_socket(p.prefix, p.len) {
        Ok(s) => match ep.add(&s, EpollEvent::new(EpollFlags::EPOLLIN, SYNS)) {
            Ok(()) => Some((s, p)),
            Err(e) => {
                tracing::warn!("TRT: preconnect: epoll: {e}; connects start at accept");
                None
            }
        },
        Err(e) => {
            tracing::warn!("TRT: preconnect: the SYN socket: {e} (needs CAP_NET_RAW); connects start at accept");
            None
        }
    });
    let pre_max = o.preconnect.map_or(0, |p| p.max);
    let hold_ack = o.ack_with_data && matches!(o.copier, Copier::Loop);
    let (kernel, threads) = match o.copier {
        Copier::Loop => (None, false),
        Copier::Threads => (None, true),
        Copier::Kernel(k) => (Some(k), false),
    };
    let in_loop = kernel.is_none() && !threads;
    let mut lp = Loop {
        ep,
        target,
        max: o.max,
        timeout: o.timeout,
        c,
        kernel,
        threads,
        slots: Vec::new(),
        free: Vec::new(),
        freed: Vec::new(),
        active: Arc::new(AtomicUsize::new(0)),
        pipes: Vec::new(),
        again: Vec::new(),
        syns,
        pre: pre::Table::new(pre_max, pre::TTL),
        spares: pre::Spares::new(hold_ack).with_congestion(o.congestion.clone()),
        open_spin: o.open_spin,
        spin_until: Instant::now(),
        pre_started: false,
        acks: Vec::new(),
        answers_due: 0,
        close_delay: if in_loop { o.close_delay } else { Duration::ZERO },
        closing: Vec::new(),
        closing_since: None,
        answered: false,
        budgets: o.budgets,
        book: Arc::new(Mutex::new(ClientBook {
            conns: FairShare::new(usize::MAX, o.budgets.connections_per_client),
            connecting: FairShare::new(usize::MAX, o.budgets.connecting_per_client),
        })),
        idle_check: Instant::now(),
    };
    let mut waiter = netsys::tun::Waiter::new(o.busy_poll);
    let mut events = [EpollEvent::empty(); 64];
    let mut sleep = Duration::from_millis(100);
    while !stop.load(Ordering::Relaxed) {
        // Directions with more to move, or a busy-poll window, or a
        // session being opened within its open-spin: only look.
        let busy = !lp.again.is_empty();
        if !lp.acks.is_empty() {
            lp.acks_due(Instant::now());
        }
        // Held ACKs not yet due keep the loop polling (their pairs set
        // `spin_until` to their due time, which this covers too).
        let opening = Instant::now() < lp.spin_until || !lp.acks.is_empty();
        let timeout = if busy || opening || waiter.spinning() {
            EpollTimeout::ZERO
        } else {
            // About to sleep: the closing work put off, and the sockets of
            // the next connections.
            lp.closing_due(true);
            lp.spares.fill();
            EpollTimeout::from(sleep.as_millis().clamp(1, 100) as u16)
        };
        let n = match lp.ep.wait(&mut events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e.into()),
        };
        if n > 0 || busy {
            waiter.worked();
        } else {
            if opening && lp.quiet() {
                // An idle turn of the open-spin (sessions that follow each
                // other keep the loop from sleeping): make the spare
                // socket that the last session took; not while a session
                // is being opened (`quiet`: a pre-connect waiting for its
                // accept, a new pair for its answer or its client's first
                // bytes), whose next step comes within microseconds and
                // should not wait behind a `socket` (the turns between an
                // answer and the next SYN make it).
                lp.spares.fill();
            }
            if !waiter.spin() && opening {
                // Within the window (busy-poll or open-spin): yield the
                // CPU once, then look again.
                std::thread::yield_now();
            }
        }
        // New sessions first (their first bytes are what a client waits
        // for), then the pairs' events (data, FINs and closes).
        for ev in &events[..n] {
            match ev.data() {
                LISTENER => lp.accept(&l),
                SYNS => lp.syns_in(),
                _ => {}
            }
        }
        if std::mem::take(&mut lp.pre_started) && !lp.pre.is_empty() {
            // A pre-connect was started in this batch: its client's
            // handshake usually completed during the pre-connect's
            // `connect` call (the client's runs on the other CPU). Accept
            // it now, before the batch's other events: the previous
            // session's FIN and close (a `shutdown` that runs the server's
            // stack in the call, two `close`s), which come in the same
            // batch as the next session's SYN when the client closes and
            // connects again at once, would otherwise sit between the
            // pre-connect and its accept, on the new session's path.
            lp.accept(&l);
        }
        for ev in &events[..n] {
            let (data, flags) = (ev.data(), ev.events());
            if data == LISTENER || data == SYNS {
                continue;
            }
            let (slot, side) = ((data >> 1) as usize, (data & 1) as usize);
            match lp.slots.get(slot) {
                Some(Some(Conn::Connecting { .. })) => lp.connected(slot),
                Some(Some(Conn::Paired(_))) => lp.paired_event(slot, side, flags),
                Some(Some(Conn::Spliced(_))) => lp.spliced_event(slot, side, flags),
                _ => {}
            }
        }
        lp.pump_again();
        lp.closing_due(false);
        lp.free.append(&mut lp.freed);
        sleep = lp.timers();
    }
    // Stopping: the FINs due are passed on and the finished pairs closed;
    // the pairs still open are reset.
    lp.closing_due(true);
    for slot in 0..lp.slots.len() {
        match lp.slots[slot] {
            Some(Conn::Connecting { .. }) => lp.fail_connect(slot),
            Some(Conn::Paired(_)) => lp.abort(slot),
            Some(Conn::Spliced(_)) => lp.close_spliced(slot, true),
            None => {}
        }
    }
    lp.pre.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The copies on loopback, with a fixed server (no tproxy, no root).
    use super::*;
    use std::io::{Read, Write};
    use std::thread::JoinHandle;

    /// A relay listening on loopback for `server`, until dropped.
    struct Relay {
        addr: SocketAddr,
        c: Arc<Counters>,
        stop: Arc<AtomicBool>,
        h: Option<JoinHandle<io::Result<()>>>,
    }

    impl Drop for Relay {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(h) = self.h.take() {
                let _ = h.join();
            }
        }
    }

    /// A test relay's settings: the loop's defaults but for `close-delay`
    /// (1 ms, so that the tests go through the put-off FINs); change
    /// fields with struct update syntax, then [`Setup::start`].
    struct Setup {
        listen: &'static str,
        copier: Copier,
        busy_poll: Duration,
        preconnect: usize,
        ack_with_data: bool,
        congestion: Option<String>,
        open_spin: Duration,
        close_delay: Duration,
        budgets: Budgets,
    }

    impl Setup {
        fn new(copier: Copier, busy_poll: Duration) -> Setup {
            Setup {
                listen: "127.0.0.1:0",
                copier,
                busy_poll,
                preconnect: 0,
                ack_with_data: false,
                congestion: None,
                open_spin: Duration::from_micros(100),
                close_delay: Duration::from_millis(1),
                budgets: Budgets::default(),
            }
        }

        /// A relay with these settings for `server`, until dropped.
        fn start(self, server: SocketAddr) -> Relay {
            let l = TcpListener::bind(self.listen).unwrap();
            let addr = l.local_addr().unwrap();
            let (c, stop) = (Arc::new(Counters::default()), Arc::new(AtomicBool::new(false)));
            let preconnect = (self.preconnect > 0).then_some(Preconnect {
                max: self.preconnect,
                prefix: Ipv6Addr::LOCALHOST,
                len: 128,
                port: Some(addr.port()),
            });
            let o = Opts {
                max: 1024,
                timeout: Duration::from_secs(5),
                copier: self.copier,
                busy_poll: self.busy_poll,
                preconnect,
                open_spin: self.open_spin,
                ack_with_data: self.ack_with_data,
                congestion: self.congestion,
                close_delay: self.close_delay,
                budgets: self.budgets,
            };
            let (c2, s2) = (c.clone(), stop.clone());
            let h = std::thread::spawn(move || serve(l, Arc::new(Fixed(server)), o, c2, s2));
            // The SYN socket is opened by the loop's thread (a loop that
            // starts later misses the first SYN, and the counts are off).
            if preconnect.is_some() {
                std::thread::sleep(Duration::from_millis(300));
            }
            Relay { addr, c, stop, h: Some(h) }
        }
    }

    impl Relay {
        /// A relay with the test defaults ([`Setup::new`]) for `server`.
        fn new(server: SocketAddr, copier: Copier, busy_poll: Duration) -> Relay {
            Setup::new(copier, busy_poll).start(server)
        }

        /// Wait until no connection is in progress; the counters then.
        fn idle(&self) -> crate::Snapshot {
            let t0 = Instant::now();
            loop {
                let s = self.c.snapshot();
                if s.tcp_active == 0 {
                    return s;
                }
                assert!(t0.elapsed() < Duration::from_secs(20), "connections never ended: {s:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// The copies under test (the sockhash needs root and BPF: tests/trt_netns.rs).
    fn copiers() -> [(Copier, Duration); 3] {
        [(Copier::Loop, Duration::ZERO), (Copier::Loop, Duration::from_millis(1)), (Copier::Threads, Duration::ZERO)]
    }

    fn pattern(seed: u32, len: usize) -> Vec<u8> {
        (0..len as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 24) as u8).collect()
    }

    /// A server on loopback running `f` on each accepted connection (a
    /// thread each) until the test ends.
    fn server(f: impl Fn(TcpStream) + Send + Sync + 'static) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let f = Arc::new(f);
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let f = f.clone();
                std::thread::spawn(move || f(c));
            }
        });
        addr
    }

    /// Echo until the client's half-close, then close.
    fn echo(mut c: TcpStream) {
        let mut buf = vec![0u8; 65536];
        loop {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
    }

    /// Send `data`, half-close, and read the answer to its end (the
    /// writing on its own thread, so that neither side waits for the other).
    fn exchange(to: SocketAddr, data: &[u8]) -> Vec<u8> {
        let mut c = TcpStream::connect(to).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = c.try_clone().unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                w.write_all(data).unwrap();
                w.shutdown(Shutdown::Write).unwrap();
            });
            let mut back = Vec::new();
            c.read_to_end(&mut back).unwrap();
            back
        })
    }

    #[test]
    fn many_concurrent_connections_each_get_their_own_bytes() {
        let srv = server(echo);
        for (copier, bp) in copiers() {
            let r = Relay::new(srv, copier.clone(), bp);
            // A few bulk connections among many small ones.
            let sizes: Vec<usize> =
                (0..48).map(|i| if i % 12 == 0 { 4_000_000 + i * 1000 } else { 1 + i * 997 % 60_000 }).collect();
            let label = format!("{copier:?}");
            std::thread::scope(|s| {
                for (i, &n) in sizes.iter().enumerate() {
                    let (addr, label) = (r.addr, &label);
                    s.spawn(move || {
                        let data = pattern(i as u32, n);
                        let back = exchange(addr, &data);
                        assert!(
                            back == data,
                            "{label}: connection {i}: {} of {n} bytes back, or other bytes",
                            back.len()
                        );
                    });
                }
            });
            let st = r.idle();
            let total: u64 = sizes.iter().map(|&n| n as u64).sum();
            assert_eq!((st.tcp_relayed, st.tcp_errors, st.tcp_connect_failed), (48, 0, 0), "{copier:?}");
            assert_eq!((st.bytes_up, st.bytes_down), (total, total), "{copier:?}");
        }
    }

    #[test]
    fn a_slow_reader_stops_a_fast_writer_and_gets_every_byte() {
        // The server reads nothing until told, then everything.
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = Arc::new(Mutex::new(go_rx));
        let (got_tx, got_rx) = std::sync::mpsc::channel();
        let srv = server(move |mut c| {
            let _ = go_rx.lock().unwrap().recv();
            let mut all = Vec::new();
            let _ = c.read_to_end(&mut all);
            let _ = got_tx.send(all);
        });
        let data = pattern(7, 96 << 20);
        for (copier, bp) in copiers() {
            let r = Relay::new(srv, copier.clone(), bp);
            let mut c = TcpStream::connect(r.addr).unwrap();
            c.set_nonblocking(true).unwrap();
            // Write until nothing more is taken for half a second.
            let (mut off, mut still) = (0, 0);
            while still < 10 {
                match c.write(&data[off..]) {
                    Ok(n) => {
                        off += n;
                        still = 0;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        still += 1;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => panic!("{copier:?}: {e}"),
                }
                assert!(off < data.len(), "{copier:?}: the relay took all 96 MiB for a server that reads nothing");
            }
            // What is taken is at most the socket buffers (tcp_rmem and
            // tcp_wmem at most 32 and 4 MiB by default) and a pipe.
            assert!(off < 64 << 20, "{copier:?}: {off} bytes taken for a server that reads nothing");
            go_tx.send(()).unwrap();
            c.set_nonblocking(false).unwrap();
            c.write_all(&data[off..]).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let got = got_rx.recv_timeout(Duration::from_secs(30)).unwrap();
            assert!(got == data, "{copier:?}: the server got {} of {} bytes, or other bytes", got.len(), data.len());
            drop(c);
            let st = r.idle();
            assert_eq!((st.bytes_up, st.tcp_errors), (data.len() as u64, 0), "{copier:?}");
        }
    }

    #[test]
    fn half_close_is_passed_on_both_ways() {
        // The server speaks first and half-closes, then reads the client's
        // answer to its end and says how long it was.
        let (len_tx, len_rx) = std::sync::mpsc::channel();
        let srv = server(move |mut c| {
            c.write_all(&pattern(1, 300_000)).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let mut up = Vec::new();
            c.read_to_end(&mut up).unwrap();
            let _ = len_tx.send(up);
        });
        for (copier, bp) in copiers() {
            let r = Relay::new(srv, copier.clone(), bp);
            let mut c = TcpStream::connect(r.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut down = Vec::new();
            c.read_to_end(&mut down).unwrap();
            assert!(down == pattern(1, 300_000), "{copier:?}: {} bytes down", down.len());
            // The client's side is still open after the server's FIN.
            let up = pattern(2, 500_000);
            c.write_all(&up).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let got = len_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            assert!(got == up, "{copier:?}: {} bytes up", got.len());
            let st = r.idle();
            assert_eq!((st.bytes_up, st.bytes_down, st.tcp_errors), (500_000, 300_000, 0), "{copier:?}");
        }
    }

    #[test]
    fn a_fin_put_off_is_passed_on_within_close_delay() {
        // The server reports when the client's FIN reached it, then
        // answers and closes.
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let srv = server(move |mut c| {
            let mut got = Vec::new();
            let _ = c.read_to_end(&mut got);
            let _ = tx.lock().unwrap().send((Instant::now(), got.len()));
            let _ = c.write_all(b"bye");
        });
        let delay = Duration::from_millis(30);
        // (busy-poll, close-delay): a loop that keeps polling passes the FIN
        // on when it is due (no answer came, nothing else to do); one that
        // sleeps passes it on before sleeping; without close-delay at once.
        for (bp, close_delay, late) in [
            (Duration::from_secs(1), delay, 1),
            (Duration::ZERO, delay, 0),
            (Duration::from_secs(1), Duration::ZERO, 0),
        ] {
            let r = Setup { close_delay, ..Setup::new(Copier::Loop, bp) }.start(srv);
            let mut c = TcpStream::connect(r.addr).unwrap();
            c.write_all(b"half").unwrap();
            let t0 = Instant::now();
            c.shutdown(Shutdown::Write).unwrap();
            let (at, n) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
            assert_eq!(n, 4, "busy-poll {bp:?}, close-delay {close_delay:?}");
            if late == 1 {
                // Put off for the whole delay: no moment between sessions came.
                assert!(at.duration_since(t0) >= delay, "{:?}", at.duration_since(t0));
            }
            // The half-closed client still gets the answer and the server's FIN.
            let mut back = Vec::new();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.read_to_end(&mut back).unwrap();
            assert_eq!(back, b"bye");
            let st = r.idle();
            let deferred = if close_delay.is_zero() { 0 } else { 2 };
            // The server's FIN may be put off until due as well.
            let lates = if late == 1 { 1..=2 } else { 0..=0 };
            assert_eq!(st.tcp_fin_deferred, deferred, "{bp:?} {close_delay:?}: {st:?}");
            assert!(lates.contains(&st.tcp_fin_late), "{bp:?} {close_delay:?}: {st:?}");
            assert_eq!((st.tcp_relayed, st.tcp_errors, st.bytes_up, st.bytes_down), (1, 0, 4, 3));
        }
    }

    #[test]
    fn a_client_that_sends_nothing_gets_the_servers_banner_at_once() {
        // The server speaks first (SMTP, SSH): its accept must not wait for
        // bytes from the client (the held handshake ACK goes alone).
        let srv = server(|mut c| {
            let _ = c.write_all(b"220 ready\r\n");
            let mut sink = Vec::new();
            let _ = c.read_to_end(&mut sink);
        });
        for (copier, ack_with_data, alone) in
            [(Copier::Loop, true, 1), (Copier::Loop, false, 0), (Copier::Threads, true, 0)]
        {
            let r = Setup { ack_with_data, ..Setup::new(copier.clone(), Duration::ZERO) }.start(srv);
            let mut c = TcpStream::connect(r.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut b = [0u8; 11];
            c.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"220 ready\r\n", "{copier:?}");
            // Then the client's bytes pass as usual.
            c.write_all(b"QUIT\r\n").unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            let st = r.idle();
            assert_eq!((st.tcp_relayed, st.tcp_errors, st.bytes_up, st.bytes_down), (1, 0, 6, 11), "{copier:?}");
            assert_eq!(st.tcp_ack_alone, alone, "{copier:?} ack-with-data {ack_with_data}");
        }
    }

    #[test]
    fn a_request_that_follows_the_pair_within_open_spin_carries_the_held_ack() {
        // The server notes whether its accept found the request there.
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let srv = server(move |mut c| {
            c.set_nonblocking(true).unwrap();
            let mut b = [0u8; 4];
            let n = c.read(&mut b).unwrap_or(0);
            let _ = tx.lock().unwrap().send(n > 0);
            c.set_nonblocking(false).unwrap();
            // What the look took is echoed too.
            let _ = c.write_all(&b[..n]);
            echo(c);
        });
        for spin in [Duration::from_millis(10), Duration::ZERO] {
            let r =
                Setup { open_spin: spin, ack_with_data: true, ..Setup::new(Copier::Loop, Duration::ZERO) }.start(srv);
            let mut c = TcpStream::connect(r.addr).unwrap();
            let t0 = Instant::now();
            // The relay pairs the connection meanwhile (the server is on
            // loopback: its connect completes within the call).
            std::thread::sleep(Duration::from_millis(2));
            c.write_all(b"ping").unwrap();
            let late = t0.elapsed();
            c.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::new();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.read_to_end(&mut back).unwrap();
            assert_eq!(back, b"ping", "open-spin {spin:?}");
            let there = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let st = r.idle();
            if st.tcp_ack_alone == 0 {
                // The ACK went with the request: the accept found it.
                assert!(there, "open-spin {spin:?}: {st:?}");
            }
            // Without the wait (open-spin 0) the ACK goes alone at the
            // pairing, unless the request was already there: either way
            // the request is relayed (above).
            if !spin.is_zero() && late < spin / 2 {
                // The request came within the wait: it carried the ACK.
                assert_eq!(st.tcp_ack_alone, 0, "the ACK went alone {late:?} after the connect: {st:?}");
            }
        }
    }

    #[test]
    fn a_request_sent_at_once_is_relayed_with_or_without_the_held_ack() {
        let srv = server(echo);
        for ack_with_data in [true, false] {
            let r = Setup { ack_with_data, ..Setup::new(Copier::Loop, Duration::ZERO) }.start(srv);
            for i in 0..20u32 {
                let data = pattern(i, 1 + i as usize * 300);
                assert!(exchange(r.addr, &data) == data, "ack-with-data {ack_with_data}: connection {i}");
            }
            let st = r.idle();
            assert_eq!((st.tcp_relayed, st.tcp_errors, st.tcp_connect_failed), (20, 0, 0), "{ack_with_data}");
            if !ack_with_data {
                // Nothing is held, so nothing is sent alone.
                assert_eq!(st.tcp_ack_alone, 0, "{st:?}");
            }
        }
    }

    #[test]
    fn resets_are_passed_on_and_a_failed_connect_resets_the_client() {
        // The server resets after one byte; or reads until the client's reset.
        let (end_tx, end_rx) = std::sync::mpsc::channel();
        let srv = server(move |mut c| {
            let mut b = [0u8; 1];
            c.read_exact(&mut b).unwrap();
            if b[0] == b'r' {
                socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
                return;
            }
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut sink = Vec::new();
            let _ = end_tx.send(c.read_to_end(&mut sink).map_err(|e| e.kind()));
        });
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        for (copier, bp) in copiers() {
            let r = Relay::new(srv, copier.clone(), bp);
            let mut c = TcpStream::connect(r.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.write_all(b"r").unwrap();
            let mut b = [0u8; 8];
            assert_eq!(c.read(&mut b).map_err(|e| e.kind()), Err(io::ErrorKind::ConnectionReset), "{copier:?}");
            let k = TcpStream::connect(r.addr).unwrap();
            (&k).write_all(b"k and more").unwrap();
            std::thread::sleep(Duration::from_millis(100));
            socket2::SockRef::from(&k).set_linger(Some(Duration::ZERO)).unwrap();
            drop(k);
            let end = end_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            assert_eq!(end, Err(io::ErrorKind::ConnectionReset), "{copier:?}");
            let st = r.idle();
            assert!(st.tcp_errors >= 2, "{copier:?}: {st:?}");
            // Nothing listens at `closed`: the client is reset.
            let r = Relay::new(closed, copier.clone(), bp);
            let mut c = TcpStream::connect(r.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let got = c.read(&mut b).map_err(|e| e.kind());
            assert_eq!(got, Err(io::ErrorKind::ConnectionReset), "{copier:?}");
            let st = r.idle();
            assert_eq!((st.tcp_connect_failed, st.tcp_relayed), (1, 0), "{copier:?}");
        }
    }

    /// Wait (at most 10 s) until `f` holds for the counters; them then.
    fn until(r: &Relay, f: impl Fn(&crate::Snapshot) -> bool) -> crate::Snapshot {
        let t0 = Instant::now();
        loop {
            let s = r.c.snapshot();
            if f(&s) || t0.elapsed() > Duration::from_secs(10) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A raw IPv6 TCP socket that can send a lone SYN (the tests that call
    /// it start with `lab::need_root!()`: CAP_NET_RAW).
    fn syn_sender() -> Socket {
        Socket::new(socket2::Domain::IPV6, socket2::Type::RAW, Some(socket2::Protocol::TCP))
            .unwrap_or_else(|e| panic!("a raw socket as root: {e}"))
    }

    /// A SYN's TCP header from [::1]:`sport` to [::1]:`dport`, checksummed.
    fn syn(sport: u16, dport: u16) -> [u8; 20] {
        let mut h = [0u8; 20];
        h[0..2].copy_from_slice(&sport.to_be_bytes());
        h[2..4].copy_from_slice(&dport.to_be_bytes());
        h[4..8].copy_from_slice(&7u32.to_be_bytes());
        h[12] = 5 << 4; // data offset: 5 words
        h[13] = 0x02; // SYN
        h[14..16].copy_from_slice(&8192u16.to_be_bytes());
        // The pseudo-header: both addresses ::1 (1 each), length 20, next header 6.
        let mut sum: u32 = 1 + 1 + 20 + 6;
        for w in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        h
    }

    #[test]
    fn preconnects_are_claimed_by_their_accepts() {
        lab::need_root!(); // CAP_NET_RAW: the relay's SYN socket
        let srv = server(echo);
        for (copier, bp) in copiers() {
            let r = Setup { listen: "[::1]:0", preconnect: 8, ..Setup::new(copier.clone(), bp) }.start(srv);
            for i in 0..20u32 {
                let data = pattern(i, 1 + i as usize * 5000);
                assert!(exchange(r.addr, &data) == data, "{copier:?}: connection {i}");
            }
            let st = r.idle();
            assert_eq!((st.tcp_relayed, st.tcp_errors, st.tcp_connect_failed), (20, 0, 0), "{copier:?}");
            // Every connect started at the SYN and was taken by its accept.
            assert_eq!((st.tcp_preconnects, st.tcp_preconnect_claimed), (20, 20), "{copier:?}: {st:?}");
            assert_eq!((st.tcp_preconnect_expired, st.tcp_preconnect_refused), (0, 0), "{copier:?}");
        }
    }

    #[test]
    fn a_failed_preconnect_resets_the_client() {
        lab::need_root!(); // CAP_NET_RAW: the relay's SYN socket
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let r = Setup { listen: "[::1]:0", preconnect: 8, ..Setup::new(Copier::Loop, Duration::ZERO) }.start(closed);
        let mut c = TcpStream::connect(r.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(c.read(&mut b).map_err(|e| e.kind()), Err(io::ErrorKind::ConnectionReset));
        let st = r.idle();
        assert_eq!((st.tcp_preconnects, st.tcp_preconnect_claimed), (1, 1), "{st:?}");
        assert_eq!((st.tcp_connect_failed, st.tcp_relayed), (1, 0), "{st:?}");
    }

    #[test]
    fn an_unclaimed_preconnect_expires_and_the_bound_refuses() {
        lab::need_root!(); // CAP_NET_RAW: the lone SYNs
                           // The server counts the connections it sees and how they end.
        let (tx, rx) = std::sync::mpsc::channel();
        let srv = server(move |mut c| {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut b = [0u8; 1];
            let _ = tx.send(c.read(&mut b).map_err(|e| e.kind()));
        });
        let tx_syn = syn_sender();
        let r = Setup { listen: "[::1]:0", preconnect: 2, ..Setup::new(Copier::Loop, Duration::ZERO) }.start(srv);
        // Three lone SYNs (no handshake follows: the kernel's SYN-ACK
        // finds no socket at the source port and is answered with a reset).
        let to: SocketAddr = r.addr;
        for sport in [1u16, 2, 3] {
            tx_syn.send_to(&syn(sport, to.port()), &SocketAddr::new(to.ip(), 0).into()).unwrap();
        }
        // Two pre-connected (the bound), the third refused and counted.
        let st = until(&r, |s| s.tcp_preconnects + s.tcp_preconnect_refused >= 3);
        assert_eq!((st.tcp_preconnects, st.tcp_preconnect_refused), (2, 1), "{st:?}");
        // No accept claims them: after pre::TTL they are reset, which the server sees.
        let st = until(&r, |s| s.tcp_preconnect_expired >= 2);
        assert_eq!((st.tcp_preconnect_expired, st.tcp_preconnect_claimed, st.tcp_relayed), (2, 0, 0), "{st:?}");
        for _ in 0..2 {
            let end = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(end, Err(io::ErrorKind::ConnectionReset));
        }
        assert_eq!(r.c.snapshot().tcp_active, 0);
    }

    #[test]
    fn the_relays_sockets_get_the_congestion_control_asked_for() {
        // The server holds each connection open until the client closes.
        let srv = server(|mut c| {
            let mut b = [0u8; 1];
            let _ = c.read_exact(&mut b).and_then(|_| c.write_all(&b));
            let _ = c.read(&mut b);
        });
        for copier in [Copier::Loop, Copier::Threads] {
            let r = Setup { congestion: Some("reno".into()), ..Setup::new(copier.clone(), Duration::ZERO) }.start(srv);
            // A connection made before the loop set the listener's may
            // keep the system's: the checked ones follow a relayed one.
            for i in 0..4 {
                let mut c = TcpStream::connect(r.addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                c.write_all(b"x").unwrap();
                let mut b = [0u8; 1];
                c.read_exact(&mut b).unwrap();
                // The relay's two sockets of this connection: the accepted
                // one (its local address is the relay's, its peer the
                // client) and the one to the server.
                let mine = c.local_addr().unwrap();
                if i == 0 {
                    continue;
                }
                let accepted = sys::congestion_of_peers(mine);
                let to_server = sys::congestion_of_peers(srv);
                // (splice-threads holds two descriptors of each socket)
                assert!(!accepted.is_empty() && accepted.iter().all(|c| c == "reno"), "{copier:?}: {accepted:?}");
                assert!(!to_server.is_empty() && to_server.iter().all(|c| c == "reno"), "{copier:?}: {to_server:?}");
            }
            let st = r.idle();
            assert_eq!((st.tcp_relayed, st.tcp_errors), (4, 0), "{copier:?}");
        }
    }

    #[test]
    fn a_congestion_control_the_kernel_lacks_is_an_error_naming_the_key() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let o = Opts {
            max: 8,
            timeout: Duration::from_secs(1),
            copier: Copier::Loop,
            busy_poll: Duration::ZERO,
            preconnect: None,
            open_spin: Duration::ZERO,
            ack_with_data: true,
            congestion: Some("no-such-cc".into()),
            close_delay: Duration::ZERO,
            budgets: Budgets::default(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let e = serve(l, Arc::new(Fixed("127.0.0.1:9".parse().unwrap())), o, Arc::new(Counters::default()), stop)
            .unwrap_err();
        let m = e.to_string();
        assert!(m.contains("[trt] congestion-control: `no-such-cc`"), "{m}");
    }

    /// Wait (up to 10 s) for `pred` over the relay's counters.
    fn wait_for(r: &Relay, what: &str, pred: impl Fn(&crate::Snapshot) -> bool) -> crate::Snapshot {
        let t0 = Instant::now();
        loop {
            let s = r.c.snapshot();
            if pred(&s) {
                return s;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "{what}: {s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the relay reset (or closed) `c`: a read that ends.
    fn closed(c: &mut TcpStream) -> bool {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 16];
        matches!(c.read(&mut b), Ok(0) | Err(_))
    }

    /// Issue #29 D11: 1,100 idle connections from one host locked out
    /// everyone. One client (here 127.0.0.1) holds at most its share; more
    /// are reset at once and counted; another client is served.
    #[test]
    fn a_client_holds_its_share_of_connections() {
        let srv = server(echo);
        for (copier, bp) in copiers() {
            let budgets = Budgets { connections_per_client: 3, ..Budgets::default() };
            let r = Setup { budgets, ..Setup::new(copier.clone(), bp) }.start(srv);
            let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(r.addr).unwrap()).collect();
            wait_for(&r, "three relayed", |s| s.tcp_relayed == 3);
            let mut extra: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(r.addr).unwrap()).collect();
            for c in &mut extra {
                assert!(closed(c), "{copier:?}: reset beyond the share");
            }
            let s = wait_for(&r, "refusals counted", |s| s.tcp_refused_client == 2);
            assert_eq!((s.tcp_relayed, s.tcp_active), (3, 3), "{copier:?}");
            // The held ones still work; one closed makes room.
            held[0].write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            held[0].read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ping");
            drop(held.remove(0));
            wait_for(&r, "one ended", |s| s.tcp_active == 2);
            let back = exchange(r.addr, b"room again");
            assert_eq!(back, b"room again", "{copier:?}");
            drop(held);
            r.idle();
        }
        // Another client (a /64 of its own) is not counted with 127.0.0.1.
        let b = Budgets { connections_per_client: 1, ..Budgets::default() };
        assert_ne!(b.client("127.0.0.1".parse().unwrap()), b.client("::1".parse().unwrap()));
        assert_eq!(b.client("2001:db8::1".parse().unwrap()), b.client("2001:db8::ffff:2".parse().unwrap()));
    }

    /// Issue #29 D11: 400 connects a second to a black-holed server held
    /// every slot for the connect timeout. A client's connects in progress
    /// are bounded; beyond, its connections are reset at once (no connect
    /// is started), counted.
    #[test]
    fn a_client_holds_its_share_of_connects_in_progress() {
        // A server whose accept queue is full: connects to it hang.
        let black = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = socket2::SockRef::from(&black);
        sock.listen(0).unwrap();
        let hole = black.local_addr().unwrap();
        let _filler: Vec<TcpStream> =
            (0..2).filter_map(|_| TcpStream::connect_timeout(&hole, Duration::from_millis(300)).ok()).collect();
        let budgets = Budgets { connecting_per_client: 2, ..Budgets::default() };
        let r = Setup { budgets, ..Setup::new(Copier::Loop, Duration::ZERO) }.start(hole);
        let clients: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(r.addr).unwrap()).collect();
        let s = wait_for(&r, "refusals", |s| s.tcp_refused_connecting == 3);
        assert_eq!(s.tcp_active, 2, "two connects in progress");
        // The connect timeout (5 s here) resets the two.
        let s = wait_for(&r, "timed out", |s| s.tcp_connect_failed == 2 && s.tcp_active == 0);
        assert_eq!(s.tcp_relayed, 0);
        drop(clients);
    }

    /// Issue #29 D11: no idle timeout. A relayed pair that moves no byte
    /// either way for the timeout (2 s here) is reset (both sides),
    /// counted; one that keeps talking is not.
    #[test]
    fn idle_pairs_are_reset() {
        let srv = server(echo);
        for (copier, bp) in copiers() {
            // A timeout far above the busy pair's gaps (a few ms each, even
            // on a loaded machine), so that only the quiet pair reaches it.
            let budgets = Budgets { tcp_idle_timeout: Duration::from_secs(2), ..Budgets::default() };
            let r = Setup { budgets, ..Setup::new(copier.clone(), bp) }.start(srv);
            let mut quiet = TcpStream::connect(r.addr).unwrap();
            let mut busy = TcpStream::connect(r.addr).unwrap();
            busy.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            wait_for(&r, "relayed", |s| s.tcp_relayed == 2);
            // The busy one talks every 20 ms until the quiet one is gone.
            let t0 = Instant::now();
            while r.c.snapshot().tcp_idle_closed == 0 {
                assert!(t0.elapsed() < Duration::from_secs(20), "{copier:?}: never reset");
                busy.write_all(b"x").unwrap();
                let mut b = [0u8; 1];
                busy.read_exact(&mut b).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(closed(&mut quiet), "{copier:?}");
            busy.write_all(b"y").unwrap();
            let mut b = [0u8; 1];
            busy.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"y", "{copier:?}: the busy pair lives on");
            let s = r.c.snapshot();
            assert_eq!(s.tcp_idle_closed, 1, "{copier:?}: {s:?}");
            drop(busy);
            r.idle();
        }
    }
}
