//! The DNS64 server: UDP and TCP (RFC 1035 §4.2.2 length-prefixed, RFC 7766)
//! listeners driving [`Core`] with [`Upstreams`].
//!
//! Sockets are bound before [`Server::start`] / [`Server::spawn`] return, so
//! a busy port or a missing address is reported to the caller. Every query
//! runs as its own task, bounded by [`MAX_INFLIGHT`] (more are dropped and
//! counted) and by the answer bound ([`Config::answer_bound`]): when it is
//! reached the client gets SERVFAIL.
//!
//! TCP: at most [`MAX_TCP_CONNECTIONS`] connections (more are closed at
//! once and counted as `dropped_overload`); each read of a query and each
//! write of an answer must finish within [`TCP_IDLE`]; accept errors (out
//! of file descriptors) are counted (`tcp_accept_errors`) and backed off
//! from (10 ms doubling to 1 s) while the listener stays.

use core::net::SocketAddr;
use core::time::Duration;
use std::sync::Arc;
use std::thread::JoinHandle;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::config::{Config, ConfigError};
use crate::core::{Action, Core};
use crate::stats::{Counters, Stats};
use crate::upstream::Upstreams;

/// Queries in flight at once (UDP and TCP together).
pub const MAX_INFLIGHT: usize = 1024;
/// TCP connections open at once.
pub const MAX_TCP_CONNECTIONS: usize = 128;
/// A TCP connection idle this long is closed (RFC 7766 §6.2.3 suggests seconds).
pub const TCP_IDLE: Duration = Duration::from_secs(10);

/// Errors starting the server.
#[derive(Debug)]
pub enum Error {
    /// The configuration is invalid.
    Config(ConfigError),
    /// A listen address could not be bound.
    Bind(SocketAddr, std::io::Error),
    /// The runtime thread could not be started.
    Runtime(std::io::Error),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Config(e) => write!(f, "{e}"),
            Error::Bind(a, e) => write!(f, "dns64.listen: cannot bind {a}: {e}"),
            Error::Runtime(e) => write!(f, "dns64: cannot start the runtime thread: {e}"),
        }
    }
}

impl std::error::Error for Error {}

struct Ctx {
    core: Core,
    upstream: Upstreams,
    bound: Duration,
    inflight: Arc<Semaphore>,
    tcp_slots: Arc<Semaphore>,
}

impl Ctx {
    fn counters(&self) -> &Counters {
        self.core.counters()
    }

    /// Answer one query (`None`: send nothing).
    async fn handle(&self, from: SocketAddr, bytes: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let task = match self.core.query(from.ip(), bytes, tcp) {
            Action::Reply(b) => return Some(b),
            Action::Drop => return None,
            Action::Lookup(t) => t,
        };
        let client = task.client().clone();
        let work = async {
            let mut task = task;
            loop {
                let outcome = self.upstream.exchange(task.lookup()).await;
                match self.core.upstream(task, outcome) {
                    Action::Reply(b) => return Some(b),
                    Action::Drop => return None,
                    Action::Lookup(t) => task = t,
                }
            }
        };
        match tokio::time::timeout(self.bound, work).await {
            Ok(r) => r,
            Err(_) => Some(self.core.servfail(&client)),
        }
    }
}

struct Bound {
    udp: Vec<std::net::UdpSocket>,
    tcp: Vec<std::net::TcpListener>,
    addrs: Vec<SocketAddr>,
}

fn bind_all(listen: &[SocketAddr]) -> Result<Bound, Error> {
    let mut b = Bound { udp: Vec::new(), tcp: Vec::new(), addrs: Vec::new() };
    for &a in listen {
        let e = |err| Error::Bind(a, err);
        let domain = Domain::for_address(a);
        // UDP first; with port 0 the TCP listener takes the same port.
        let u = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(e)?;
        if a.is_ipv6() {
            u.set_only_v6(true).map_err(e)?;
        }
        u.set_nonblocking(true).map_err(e)?;
        u.bind(&a.into()).map_err(e)?;
        let actual = u.local_addr().map_err(e)?.as_socket().unwrap_or(a);
        let t = Socket::new(domain, Type::STREAM, Some(Protocol::TCP)).map_err(e)?;
        if a.is_ipv6() {
            t.set_only_v6(true).map_err(e)?;
        }
        t.set_reuse_address(true).map_err(e)?;
        t.set_nonblocking(true).map_err(e)?;
        t.bind(&actual.into()).map_err(|err| Error::Bind(actual, err))?;
        t.listen(128).map_err(e)?;
        b.udp.push(u.into());
        b.tcp.push(t.into());
        b.addrs.push(actual);
    }
    Ok(b)
}

async fn udp_loop(sock: UdpSocket, ctx: Arc<Ctx>) {
    let sock = Arc::new(sock);
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; 65535];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(x) => x,
            // ICMP errors from earlier sends surface here; keep serving.
            Err(_) => continue,
        };
        while tasks.try_join_next().is_some() {}
        let Ok(permit) = ctx.inflight.clone().try_acquire_owned() else {
            Counters::inc(&ctx.counters().queries_udp);
            Counters::inc(&ctx.counters().dropped_overload);
            continue;
        };
        let bytes = buf[..n].to_vec();
        let (ctx, sock) = (ctx.clone(), sock.clone());
        tasks.spawn(async move {
            if let Some(reply) = ctx.handle(from, &bytes, false).await {
                Counters::inc(&ctx.counters().answers);
                let _ = sock.send_to(&reply, from).await;
            }
            drop(permit);
        });
    }
}

async fn tcp_conn(mut s: TcpStream, from: SocketAddr, ctx: Arc<Ctx>) {
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, s.read_u16()).await {
            Ok(Ok(l)) => usize::from(l),
            _ => return,
        };
        let mut buf = vec![0u8; len];
        match tokio::time::timeout(TCP_IDLE, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let Ok(permit) = ctx.inflight.clone().try_acquire_owned() else {
            Counters::inc(&ctx.counters().queries_tcp);
            Counters::inc(&ctx.counters().dropped_overload);
            return;
        };
        let reply = ctx.handle(from, &buf, true).await;
        drop(permit);
        let Some(reply) = reply else { return };
        let Ok(l) = u16::try_from(reply.len()) else { return };
        let mut out = Vec::with_capacity(reply.len() + 2);
        out.extend_from_slice(&l.to_be_bytes());
        out.extend_from_slice(&reply);
        Counters::inc(&ctx.counters().answers);
        // A client that does not read its answers loses the connection
        // after TCP_IDLE instead of holding a slot for ever.
        match tokio::time::timeout(TCP_IDLE, s.write_all(&out)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}

async fn tcp_loop(l: TcpListener, ctx: Arc<Ctx>) {
    let mut tasks = JoinSet::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        let (s, from) = match l.accept().await {
            Ok(x) => {
                backoff = Duration::from_millis(10);
                x
            }
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or another accept
                // error: keep listening, back off instead of spinning.
                let n = ctx.counters().tcp_accept_errors.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
                if n.is_multiple_of(100) {
                    tracing::warn!("dns64: TCP accept failed ({e}); backing off, still listening");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        while tasks.try_join_next().is_some() {}
        let Ok(permit) = ctx.tcp_slots.clone().try_acquire_owned() else {
            Counters::inc(&ctx.counters().dropped_overload);
            continue;
        };
        let ctx = ctx.clone();
        tasks.spawn(async move {
            tcp_conn(s, from, ctx).await;
            drop(permit);
        });
    }
}

/// Serve until `stop` changes; dropping the task set aborts every query.
async fn serve(b: Bound, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let mut tasks = JoinSet::new();
    for u in b.udp {
        match UdpSocket::from_std(u) {
            Ok(u) => {
                tasks.spawn(udp_loop(u, ctx.clone()));
            }
            Err(e) => tracing::error!("dns64: udp socket: {e}"),
        }
    }
    for t in b.tcp {
        match TcpListener::from_std(t) {
            Ok(t) => {
                tasks.spawn(tcp_loop(t, ctx.clone()));
            }
            Err(e) => tracing::error!("dns64: tcp listener: {e}"),
        }
    }
    let _ = stop.wait_for(|s| *s).await;
}

/// A running DNS64 server. Dropping it stops it, like [`Server::stop`].
pub struct Server {
    counters: Arc<Counters>,
    addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

fn prepare(cfg: &Config) -> Result<(Bound, Arc<Ctx>), Error> {
    let s = cfg.settings().map_err(Error::Config)?;
    let counters = Arc::new(Counters::default());
    let core = Core::new(cfg, counters.clone()).map_err(Error::Config)?;
    let bound = bind_all(&s.listen)?;
    let ctx = Arc::new(Ctx {
        core,
        upstream: Upstreams::new(s.upstream, s.timeout, counters),
        bound: cfg.answer_bound(),
        inflight: Arc::new(Semaphore::new(MAX_INFLIGHT)),
        tcp_slots: Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS)),
    });
    Ok((bound, ctx))
}

impl Server {
    /// Check `cfg`, bind every listen address, and serve on a thread of
    /// its own (named `dns64`, with a single-threaded tokio runtime). For
    /// callers that are not async.
    pub fn start(cfg: &Config) -> Result<Server, Error> {
        let (b, ctx) = prepare(cfg)?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Error::Runtime)?;
        let (stop, rx) = watch::channel(false);
        let counters = ctx.core.counters().clone();
        let addrs = b.addrs.clone();
        let thread = std::thread::Builder::new()
            .name("dns64".into())
            .spawn(move || rt.block_on(serve(b, ctx, rx)))
            .map_err(Error::Runtime)?;
        Ok(Server { counters, addrs, stop, thread: Some(thread), task: None })
    }

    /// Check `cfg`, bind every listen address, and serve as a task on the
    /// runtime of `handle` (e.g. `tokio::runtime::Handle::current()`).
    pub fn spawn(cfg: &Config, handle: &tokio::runtime::Handle) -> Result<Server, Error> {
        let (b, ctx) = prepare(cfg)?;
        let (stop, rx) = watch::channel(false);
        let counters = ctx.core.counters().clone();
        let addrs = b.addrs.clone();
        // from_std needs a runtime context.
        let _guard = handle.enter();
        let task = handle.spawn(serve(b, ctx, rx));
        Ok(Server { counters, addrs, stop, thread: None, task: Some(task) })
    }

    /// The bound addresses, in `listen` order (port 0 resolved); UDP and
    /// TCP share each.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// The live counters (for an exporter that reads them repeatedly).
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Stop serving: sockets are closed and queries in flight dropped. With
    /// [`Server::start`] this waits for the thread to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}
