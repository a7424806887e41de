//! The DNS64 server: UDP and TCP (RFC 1035 §4.2.2 length-prefixed, RFC 7766)
//! listeners driving [`Core`] with [`Upstreams`] and the [`Cache`].
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
//!
//! [`Server::reconfigure`] applies a changed `[dns64]` table without going
//! down: the new policy, upstreams and cache limits take over from the next
//! query (queries in flight finish with the old ones); listen addresses
//! that stay keep their sockets, new ones are bound first (a failure
//! changes nothing), removed ones are closed last. The cache is kept when
//! the upstreams and the cache limits stay the same.

use core::net::SocketAddr;
use core::time::Duration;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::cache::Cache;
use crate::config::{Config, ConfigError};
use crate::core::{Action, Core, Lookup, Upstream};
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

/// What one query is answered with: the configuration in force when it
/// arrived.
struct Ctx {
    core: Core,
    upstream: Upstreams,
    upstream_addrs: Vec<SocketAddr>,
    cache: Option<Arc<Cache>>,
    bound: Duration,
    inflight: Arc<Semaphore>,
    tcp_slots: Arc<Semaphore>,
}

/// What the listeners share: the [`Ctx`] in force (swapped by a reload)
/// and the counters (kept across reloads).
struct Shared {
    ctx: RwLock<Arc<Ctx>>,
    counters: Arc<Counters>,
    /// The gateway's destination policy ([`Server::start_with`]).
    destinations: Option<Arc<dstpolicy::Policy>>,
}

impl Shared {
    fn ctx(&self) -> Arc<Ctx> {
        self.ctx.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl Ctx {
    fn counters(&self) -> &Counters {
        self.core.counters()
    }

    /// One upstream lookup, from the cache when it holds the answer.
    async fn lookup(&self, l: &Lookup) -> Upstream {
        if let Some(c) = &self.cache {
            if let Some(b) = c.get(l, Instant::now()) {
                return Upstream::Reply(b);
            }
        }
        let r = self.upstream.exchange(l).await;
        if let (Some(c), Upstream::Reply(b)) = (&self.cache, &r) {
            c.put(l, b, Instant::now());
        }
        r
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
                let outcome = self.lookup(task.lookup()).await;
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

async fn udp_loop(sock: UdpSocket, shared: Arc<Shared>) {
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
        let ctx = shared.ctx();
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

async fn tcp_conn(mut s: TcpStream, from: SocketAddr, shared: Arc<Shared>) {
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
        // Each query with the configuration in force when it came.
        let ctx = shared.ctx();
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

async fn tcp_loop(l: TcpListener, shared: Arc<Shared>) {
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
                let n = shared.counters().tcp_accept_errors.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
                if n.is_multiple_of(100) {
                    tracing::warn!("dns64: TCP accept failed ({e}); backing off, still listening");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        while tasks.try_join_next().is_some() {}
        let Ok(permit) = shared.ctx().tcp_slots.clone().try_acquire_owned() else {
            Counters::inc(&shared.counters().dropped_overload);
            continue;
        };
        let shared = shared.clone();
        tasks.spawn(async move {
            tcp_conn(s, from, shared).await;
            drop(permit);
        });
    }
}

/// One listen address: its UDP and TCP tasks.
struct Listener {
    /// As configured (port 0 stays 0).
    configured: SocketAddr,
    /// As bound.
    actual: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A running DNS64 server. Dropping it stops it, like [`Server::stop`].
pub struct Server {
    shared: Arc<Shared>,
    handle: tokio::runtime::Handle,
    listeners: Mutex<Vec<Listener>>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

/// The [`Ctx`] for `cfg`; `prev` lends its limits and, when the upstreams
/// and cache limits are the same, its cache.
fn build_ctx(
    cfg: &Config,
    counters: &Arc<Counters>,
    prev: Option<&Ctx>,
    destinations: Option<&Arc<dstpolicy::Policy>>,
) -> Result<(Ctx, Vec<SocketAddr>), Error> {
    let s = cfg.settings().map_err(Error::Config)?;
    let core = Core::new(cfg, counters.clone()).map_err(Error::Config)?.with_destinations(destinations.cloned());
    let cache = match prev.and_then(|p| p.cache.as_ref()) {
        _ if s.cache.entries == 0 => None,
        Some(c) if c.limits() == s.cache && prev.is_some_and(|p| p.upstream_addrs == s.upstream) => Some(c.clone()),
        _ => Some(Arc::new(Cache::new(s.cache, counters.clone()))),
    };
    let ctx = Ctx {
        core,
        upstream: Upstreams::new(s.upstream.clone(), s.timeout, counters.clone()),
        upstream_addrs: s.upstream,
        cache,
        bound: cfg.answer_bound(),
        inflight: prev.map_or_else(|| Arc::new(Semaphore::new(MAX_INFLIGHT)), |p| p.inflight.clone()),
        tcp_slots: prev.map_or_else(|| Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS)), |p| p.tcp_slots.clone()),
    };
    Ok((ctx, s.listen))
}

use function::lock;

impl Server {
    /// Check `cfg`, bind every listen address, and serve on a thread of
    /// its own (named `dns64`, with a single-threaded tokio runtime). For
    /// callers that are not async.
    pub fn start(cfg: &Config) -> Result<Server, Error> {
        Server::start_with(cfg, None)
    }

    /// [`Server::start`] with the gateway's destination policy: no AAAA
    /// is synthesised for an A record naming an address it refuses
    /// ([`Core::with_destinations`]).
    pub fn start_with(cfg: &Config, destinations: Option<Arc<dstpolicy::Policy>>) -> Result<Server, Error> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Error::Runtime)?;
        let handle = rt.handle().clone();
        let (stop, mut rx) = watch::channel(false);
        let mut srv = Server::prepare(cfg, handle, stop, destinations)?;
        let thread = std::thread::Builder::new()
            .name("dns64".into())
            .spawn(move || {
                rt.block_on(async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
            })
            .map_err(Error::Runtime)?;
        srv.thread = Some(thread);
        Ok(srv)
    }

    /// Check `cfg`, bind every listen address, and serve as tasks on the
    /// runtime of `handle` (e.g. `tokio::runtime::Handle::current()`).
    pub fn spawn(cfg: &Config, handle: &tokio::runtime::Handle) -> Result<Server, Error> {
        let (stop, _) = watch::channel(false);
        Server::prepare(cfg, handle.clone(), stop, None)
    }

    fn prepare(
        cfg: &Config,
        handle: tokio::runtime::Handle,
        stop: watch::Sender<bool>,
        destinations: Option<Arc<dstpolicy::Policy>>,
    ) -> Result<Server, Error> {
        let counters = Arc::new(Counters::default());
        let (ctx, listen) = build_ctx(cfg, &counters, None, destinations.as_ref())?;
        let bound = bind_all(&listen)?;
        let shared = Arc::new(Shared { ctx: RwLock::new(Arc::new(ctx)), counters, destinations });
        let srv = Server { shared, handle, listeners: Mutex::new(Vec::new()), stop, thread: None };
        let ls = srv.serve(bound, &listen);
        *lock(&srv.listeners) = ls;
        Ok(srv)
    }

    /// Start the UDP and TCP tasks of freshly bound sockets.
    fn serve(&self, b: Bound, configured: &[SocketAddr]) -> Vec<Listener> {
        // from_std needs a runtime context.
        let _guard = self.handle.enter();
        let mut out = Vec::new();
        for (((u, t), actual), configured) in b.udp.into_iter().zip(b.tcp).zip(b.addrs).zip(configured) {
            let mut tasks = Vec::new();
            match UdpSocket::from_std(u) {
                Ok(u) => tasks.push(self.handle.spawn(udp_loop(u, self.shared.clone()))),
                Err(e) => tracing::error!("dns64: udp socket {actual}: {e}"),
            }
            match TcpListener::from_std(t) {
                Ok(t) => tasks.push(self.handle.spawn(tcp_loop(t, self.shared.clone()))),
                Err(e) => tracing::error!("dns64: tcp listener {actual}: {e}"),
            }
            out.push(Listener { configured: *configured, actual, tasks });
        }
        out
    }

    /// Apply a changed `[dns64]` table without going down (see the module
    /// documentation). On error nothing changed.
    pub fn reconfigure(&self, cfg: &Config) -> Result<(), Error> {
        let old = self.shared.ctx();
        let (ctx, want) = build_ctx(cfg, &self.shared.counters, Some(&old), self.shared.destinations.as_ref())?;
        let mut ls = lock(&self.listeners);
        let add: Vec<SocketAddr> = want.iter().filter(|a| !ls.iter().any(|l| l.configured == **a)).copied().collect();
        let bound = bind_all(&add)?;
        *self.shared.ctx.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ctx);
        let fresh = self.serve(bound, &add);
        ls.retain(|l| {
            let keep = want.contains(&l.configured);
            if !keep {
                l.tasks.iter().for_each(tokio::task::JoinHandle::abort);
            }
            keep
        });
        ls.extend(fresh);
        ls.sort_by_key(|l| want.iter().position(|a| *a == l.configured));
        Ok(())
    }

    /// The bound addresses, in `listen` order (port 0 resolved); UDP and
    /// TCP share each.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        lock(&self.listeners).iter().map(|l| l.actual).collect()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// The live counters (for an exporter that reads them repeatedly).
    pub fn counters(&self) -> Arc<Counters> {
        self.shared.counters.clone()
    }

    /// Cached answers now: (entries, bytes); (0, 0) without a cache.
    pub fn cache_usage(&self) -> (usize, usize) {
        self.shared.ctx().cache.as_ref().map_or((0, 0), |c| c.usage())
    }

    /// Stop serving: sockets are closed and queries in flight dropped. With
    /// [`Server::start`] this waits for the thread to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        for l in lock(&self.listeners).drain(..) {
            l.tasks.iter().for_each(tokio::task::JoinHandle::abort);
        }
        let _ = self.stop.send(true);
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
