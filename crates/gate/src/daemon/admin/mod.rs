//! The admin HTTP API: hyper 1 (HTTP/1.1) on a tokio runtime of its own
//! (one thread, named `v6gate-admin`), with hard limits, so nothing a
//! client sends can stop the daemon or exhaust it:
//!
//! | limit (`[admin]` key)          | default | what happens |
//! |--------------------------------|---------|--------------|
//! | `max-connections`              | 64      | one more is answered `503` and closed at once (counted) |
//! | `max-header-bytes`             | 16384   | hyper answers `431` and closes |
//! | `max-body-bytes`               | 65536   | `413` from the declared `Content-Length` (nothing allocated), or once the body read passes it |
//! | `request-timeout` (s)          | 10      | headers must arrive, the body be read and the answer be computed within it (`408`/`503` or close) |
//! | `idle-timeout` (s)             | 30      | a connection silent both ways this long is closed (also one that does not read its answer) |
//!
//! Out of file descriptors (EMFILE/ENFILE on `accept`), the server keeps
//! listening: it backs off (10 ms doubling to 1 s), counts it and logs
//! "too many open files" with the limit; connections are served again as
//! soon as descriptors are free.
//!
//! Access (see [`access`]): exactly one `Host` header (else `400`), naming
//! this server (as must an absolute-form request target), and an
//! `Origin` header, when present, this server too (DNS rebinding and
//! cross-site requests from a browser are refused, `403`); state-changing
//! requests (`POST`) need `Authorization: Bearer <[admin] token>` when a
//! token is set (`401` otherwise), and are accepted only from loopback
//! peers when none is set. `token-for-read = true` makes the `GET`
//! endpoints need the token too.
//!
//! hyper rather than axum: the API is seven fixed routes, and the limits
//! above need the connection loop in our hands (accept errors, the
//! connection cap, the per-connection idle watch); axum's `serve` hides
//! that loop and would add a router and tower layers for nothing.

pub mod access;
pub mod metrics;
pub mod routes;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

pub use routes::{parse_proto, parse_transport, route, split_query, status, Reply};

use super::Daemon;
use crate::config::AdminConfig;

/// Counters of the admin server (`v6gate_admin_*` metrics).
#[derive(Debug, Default)]
pub struct AdminStats {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections refused because `max-connections` were open.
    pub refused_busy: AtomicU64,
    /// `accept` failures for lack of file descriptors (EMFILE/ENFILE).
    pub accept_no_descriptors: AtomicU64,
    /// Other `accept` failures.
    pub accept_other: AtomicU64,
    /// Connections closed by the idle timeout.
    pub idle_closed: AtomicU64,
    /// Connections whose request headers did not arrive in time.
    pub header_timeouts: AtomicU64,
    /// Requests hyper refused: malformed, or headers over the limit.
    pub bad_requests: AtomicU64,
    /// Requests answered (any status).
    pub requests: AtomicU64,
    /// Requests refused for a missing or wrong token.
    pub denied_token: AtomicU64,
    /// Requests refused for a foreign `Host`.
    pub denied_host: AtomicU64,
    /// Requests refused (400) without a `Host`, or with more than one.
    pub bad_host: AtomicU64,
    /// Requests refused for an absolute-form target naming another server.
    pub denied_target: AtomicU64,
    /// Requests refused for a foreign `Origin`.
    pub denied_origin: AtomicU64,
    /// State-changing requests refused from a non-loopback peer without a token set.
    pub denied_remote: AtomicU64,
    /// Requests refused for a body over `max-body-bytes`.
    pub body_too_large: AtomicU64,
    /// Requests not answered within `request-timeout`.
    pub request_timeouts: AtomicU64,
}

impl AdminStats {
    /// (reason, count) of every refusal, for metrics.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("connection-limit", self.refused_busy.load(Relaxed)),
            ("no-descriptors", self.accept_no_descriptors.load(Relaxed)),
            ("accept-error", self.accept_other.load(Relaxed)),
            ("idle-timeout", self.idle_closed.load(Relaxed)),
            ("header-timeout", self.header_timeouts.load(Relaxed)),
            ("bad-request", self.bad_requests.load(Relaxed)),
            ("token", self.denied_token.load(Relaxed)),
            ("host", self.denied_host.load(Relaxed)),
            ("host-count", self.bad_host.load(Relaxed)),
            ("target", self.denied_target.load(Relaxed)),
            ("origin", self.denied_origin.load(Relaxed)),
            ("remote-without-token", self.denied_remote.load(Relaxed)),
            ("body-too-large", self.body_too_large.load(Relaxed)),
            ("request-timeout", self.request_timeouts.load(Relaxed)),
        ]
    }
}

/// The limits and access settings the server enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// See [`AdminConfig::max_connections`].
    pub max_connections: usize,
    /// See [`AdminConfig::max_header_bytes`].
    pub max_header_bytes: usize,
    /// See [`AdminConfig::max_body_bytes`].
    pub max_body_bytes: usize,
    /// See [`AdminConfig::request_timeout`].
    pub request_timeout: Duration,
    /// See [`AdminConfig::idle_timeout`].
    pub idle_timeout: Duration,
    /// See [`AdminConfig::token_for_read`].
    pub token_for_read: bool,
    /// See [`AdminConfig::hosts`].
    pub hosts: Vec<String>,
}

impl Limits {
    /// The limits of `c`.
    pub fn of(c: &AdminConfig) -> Self {
        Limits {
            max_connections: c.max_connections,
            max_header_bytes: c.max_header_bytes,
            max_body_bytes: c.max_body_bytes,
            request_timeout: Duration::from_secs(c.request_timeout),
            idle_timeout: Duration::from_secs(c.idle_timeout),
            token_for_read: c.token_for_read,
            hosts: c.hosts.clone(),
        }
    }
}

/// The running admin server.
pub struct Admin {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("addr", &self.addr).finish()
    }
}

impl Admin {
    /// Listen on `addr` and serve `daemon` with `limits`. The socket is
    /// bound before this returns (a taken port is an error here).
    pub fn start(addr: SocketAddr, limits: Limits, daemon: Arc<Daemon>) -> anyhow::Result<Admin> {
        let std_l = std::net::TcpListener::bind(addr)?;
        std_l.set_nonblocking(true)?;
        let local = std_l.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(4).build()?;
        let (stop, rx) = watch::channel(false);
        let thread = std::thread::Builder::new().name("v6gate-admin".into()).spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(std_l) {
                    Ok(l) => serve(l, Arc::new(limits), daemon, rx).await,
                    Err(e) => tracing::error!(error = %e, "admin API: cannot use the listening socket"),
                }
            });
        })?;
        Ok(Admin { addr: local, stop, thread: Some(thread) })
    }

    /// The address served (with the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop serving (connections in progress are dropped).
    pub fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The accept loop: the connection cap, and back-off on accept errors.
async fn serve(l: TcpListener, limits: Arc<Limits>, d: Arc<Daemon>, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let stats = d.admin_stats.clone();
    let mut backoff = Duration::from_millis(10);
    let mut last_warn: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            r = l.accept() => r,
        };
        match accepted {
            Ok((s, peer)) => {
                backoff = Duration::from_millis(10);
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    stats.refused_busy.fetch_add(1, Relaxed);
                    // Best effort, never waits: the socket buffer is empty.
                    let _ = s.try_write(BUSY);
                    continue;
                };
                stats.accepted.fetch_add(1, Relaxed);
                let (limits, d) = (limits.clone(), d.clone());
                tokio::spawn(async move {
                    d.admin_stats.open.fetch_add(1, Relaxed);
                    connection(s, peer, &limits, &d).await;
                    d.admin_stats.open.fetch_sub(1, Relaxed);
                    drop(permit);
                });
            }
            Err(e) => {
                let fds = matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE));
                if fds {
                    stats.accept_no_descriptors.fetch_add(1, Relaxed);
                } else {
                    stats.accept_other.fetch_add(1, Relaxed);
                }
                if last_warn.is_none_or(|t: Instant| t.elapsed() > Duration::from_secs(10)) {
                    last_warn = Some(Instant::now());
                    if fds {
                        let lim = crate::limits::nofile();
                        tracing::warn!(
                            "admin API: too many open files ({e}; limit {} open descriptors): backing off, still listening",
                            lim.map_or("unknown".to_string(), |l| l.soft.to_string())
                        );
                    } else {
                        tracing::warn!("admin API: accept failed ({e}): backing off, still listening");
                    }
                }
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 52\r\n\
Connection: close\r\n\r\n{\"error\":\"too many admin connections, retry later\"}\n";

/// A stream that records when it last moved a byte either way.
struct Watched {
    inner: TcpStream,
    epoch: Instant,
    last: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        self.last.store(self.epoch.elapsed().as_millis() as u64, Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, b);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves once the connection has been silent for `idle`.
async fn idle_watch(epoch: Instant, last: Arc<AtomicU64>, idle: Duration) {
    loop {
        let since = epoch.elapsed().saturating_sub(Duration::from_millis(last.load(Relaxed)));
        if since >= idle {
            return;
        }
        tokio::time::sleep(idle - since).await;
    }
}

async fn connection(s: TcpStream, peer: SocketAddr, limits: &Arc<Limits>, d: &Arc<Daemon>) {
    let local = s.local_addr().unwrap_or(peer);
    let _ = s.set_nodelay(true);
    let epoch = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(Watched { inner: s, epoch, last: last.clone() });
    let svc = {
        let (limits, d) = (limits.clone(), d.clone());
        hyper::service::service_fn(move |req| {
            let (limits, d) = (limits.clone(), d.clone());
            async move { Ok::<_, std::convert::Infallible>(request(req, peer, local, &limits, &d).await) }
        })
    };
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .max_buf_size(limits.max_header_bytes)
        .max_headers(64)
        .keep_alive(true);
    let conn = b.serve_connection(io, svc);
    let stats = &d.admin_stats;
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                if e.is_timeout() {
                    stats.header_timeouts.fetch_add(1, Relaxed);
                } else if e.is_parse() || e.is_parse_too_large() {
                    stats.bad_requests.fetch_add(1, Relaxed);
                }
                tracing::debug!(%peer, error = %e, "admin connection ended");
            }
        }
        _ = idle_watch(epoch, last, limits.idle_timeout) => {
            stats.idle_closed.fetch_add(1, Relaxed);
            tracing::debug!(%peer, "admin connection closed: idle");
        }
    }
}

fn respond(r: Reply) -> Response<Full<Bytes>> {
    let ctype = r.content_type();
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(Full::new(Bytes::from(r.body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"v6gate\""));
    }
    resp
}

/// One request: limits, access control, then the route (on the blocking
/// pool: routes take the daemon's locks, reload talks to netlink).
async fn request(
    req: Request<Incoming>,
    peer: SocketAddr,
    local: SocketAddr,
    limits: &Limits,
    d: &Arc<Daemon>,
) -> Response<Full<Bytes>> {
    let stats = &d.admin_stats;
    stats.requests.fetch_add(1, Relaxed);
    let token = d.admin_token();
    let ctx = access::Request {
        method_changes_state: req.method() == Method::POST,
        host: req.headers().get(hyper::header::HOST).map(|v| v.as_bytes()),
        host_count: req.headers().get_all(hyper::header::HOST).iter().count(),
        target_scheme: req.uri().scheme_str(),
        target_authority: req.uri().authority().map(|a| a.as_str()),
        origin: req.headers().get(hyper::header::ORIGIN).map(|v| v.as_bytes()),
        authorization: req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes()),
        peer: peer.ip(),
        local,
    };
    if let Err(denied) = access::check(&ctx, token.as_deref(), limits) {
        match denied {
            access::Denied::NoHost | access::Denied::DuplicateHost => stats.bad_host.fetch_add(1, Relaxed),
            access::Denied::Target => stats.denied_target.fetch_add(1, Relaxed),
            access::Denied::Host => stats.denied_host.fetch_add(1, Relaxed),
            access::Denied::Origin => stats.denied_origin.fetch_add(1, Relaxed),
            access::Denied::Token => stats.denied_token.fetch_add(1, Relaxed),
            access::Denied::RemoteWithoutToken => stats.denied_remote.fetch_add(1, Relaxed),
        };
        tracing::debug!(%peer, reason = denied.message(), "admin request refused");
        return respond(Reply::error(denied.status(), denied.message()));
    }
    // The body: refused from its declared length before anything is read.
    let declared =
        req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        stats.body_too_large.fetch_add(1, Relaxed);
        return respond(Reply::error(
            413,
            format!("request body over {} bytes ([admin] max-body-bytes)", limits.max_body_bytes),
        ));
    }
    let method = req.method().clone();
    let target = req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    let body = Limited::new(req.into_body(), limits.max_body_bytes);
    match tokio::time::timeout(limits.request_timeout, body.collect()).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => {
            stats.body_too_large.fetch_add(1, Relaxed);
            return respond(Reply::error(
                413,
                format!("request body over {} bytes ([admin] max-body-bytes), or unreadable", limits.max_body_bytes),
            ));
        }
        Err(_) => {
            stats.request_timeouts.fetch_add(1, Relaxed);
            return respond(Reply::error(408, "request body not received in time ([admin] request-timeout)"));
        }
    }
    let d2 = d.clone();
    let work = tokio::task::spawn_blocking(move || {
        let (path, params) = split_query(&target);
        route(&d2, &method, path, &params)
    });
    match tokio::time::timeout(limits.request_timeout, work).await {
        Ok(Ok(r)) => respond(r),
        Ok(Err(e)) => respond(Reply::error(500, format!("internal error: {e}"))),
        Err(_) => {
            stats.request_timeouts.fetch_add(1, Relaxed);
            respond(Reply::error(503, "not answered within [admin] request-timeout; it may still complete"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answer_is_well_formed_http() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let len: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().parse().unwrap();
        assert_eq!(body.len(), len);
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }

    #[test]
    fn limits_come_from_the_config() {
        let c = AdminConfig { max_connections: 3, request_timeout: 7, ..AdminConfig::default() };
        let l = Limits::of(&c);
        assert_eq!((l.max_connections, l.request_timeout), (3, Duration::from_secs(7)));
        assert_eq!(l.idle_timeout, Duration::from_secs(30));
    }
}
