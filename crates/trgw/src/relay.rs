//! Running the relay: workers, control listeners (ng over UDP, rtpproxy
//! over UDP and a Unix stream socket) and the idle-timeout sweeper.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use socket2::Socket;

use crate::config::{Config, IoMode, SocketMode};
use crate::cookie_cache::{CacheStats, CookieCache};
use crate::core::{Core, PacketTotals, Plane, StreamInit, Totals};
use crate::policy::MediaPolicy;
use crate::shared::{SharedSockets, Steer};
use crate::sys::epoll::EventFd;
use crate::table::{RelayKey, RelayValue};
use crate::uring::UringWorker;
use crate::worker::{Cmd, Shared, Worker, WorkerCtl};

/// The plane with real sockets and workers.
struct SocketPlane {
    workers: Vec<WorkerCtl>,
    /// Shared-socket mode: the sk_lookup steering (no socket per port).
    steer: Option<Arc<Mutex<Steer>>>,
    /// Shared-socket mode: the port pairs found free.
    probed: crate::shared::ProbeCache,
}

fn bind_one(addr: SocketAddr) -> io::Result<Socket> {
    crate::shared::udp_socket(addr, 1 << 20)
}

impl Plane for SocketPlane {
    fn bind(&mut self, addr: IpAddr, port: u16) -> io::Result<[Option<Socket>; 2]> {
        if self.steer.is_some() {
            // No socket is kept; the pair must be free on the host (checked
            // the first time it is used).
            self.probed.check(addr, port)?;
            return Ok([None, None]);
        }
        let rtp = bind_one(SocketAddr::new(addr, port))?;
        let rtcp = bind_one(SocketAddr::new(addr, port + 1))?;
        Ok([Some(rtp), Some(rtcp)])
    }

    fn install(&mut self, id: u32, sockets: [Option<Socket>; 4], locals: [SocketAddr; 4], init: StreamInit) {
        let w = &self.workers[id as usize % self.workers.len()];
        w.send(Cmd::Install { id, sockets: Box::new(sockets), locals, init });
        if let Some(st) = &self.steer {
            lock(st).add(id, locals);
        }
    }

    fn set_peers(&mut self, id: u32, peers: [Option<SocketAddr>; 4]) {
        let w = &self.workers[id as usize % self.workers.len()];
        w.send(Cmd::SetPeers { id, peers });
    }

    fn remove(&mut self, id: u32) {
        if let Some(st) = &self.steer {
            lock(st).remove(id);
        }
        let w = &self.workers[id as usize % self.workers.len()];
        w.send(Cmd::Remove { id });
    }
}

/// Entry point: [`Relay::start`].
#[derive(Debug)]
pub struct Relay;

/// A running relay. Dropping it stops it too.
#[derive(Debug)]
pub struct RelayHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    core: Arc<Mutex<Core>>,
    ng: Option<SocketAddr>,
    rtpproxy_udp: Option<SocketAddr>,
    unix_path: Option<PathBuf>,
    io: IoMode,
    ng_cache: Arc<Mutex<CookieCache>>,
    policy: Arc<MediaPolicy>,
    /// `v6gate trgw`: the own-address watcher (the daemon runs its own).
    _watch: Option<dstpolicy::Watch>,
    steer: Option<Arc<Mutex<Steer>>>,
    shared_unmatched: Arc<AtomicU64>,
}

/// A snapshot of the relay's counters (for Prometheus / `v6gate ctl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Live calls.
    pub calls: u64,
    /// Live media streams.
    pub streams: u64,
    /// Clients holding streams.
    pub clients: u64,
    /// Global counters (calls created/deleted/timed out, port exhaustion,
    /// control errors and denials).
    pub totals: Totals,
    /// Packet counters summed over the live calls.
    pub packets: PacketTotals,
    /// Packet counters since start, ended calls included (monotonic).
    pub relayed: PacketTotals,
    /// The ng reply cache.
    pub ng_cache: CacheStats,
    /// Media packets dropped because latching refused their source.
    pub latch_refused: u64,
    /// Shared-socket mode (`sockets = "shared"`): present then.
    pub shared: Option<SharedStats>,
}

/// Counters of the shared-socket mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// Packets the sk_lookup program steered to a shared socket.
    pub steered: u64,
    /// Packets to an allocated port the program could not steer (no
    /// shared socket, or the kernel refused the assignment); they went on
    /// to the normal socket lookup.
    pub steer_failed: u64,
    /// Datagrams on a shared socket for no live leg (a port just freed,
    /// or sent to the shared socket's own port), dropped.
    pub unmatched: u64,
}

use function::lock;

impl Relay {
    /// Starts workers and control listeners, with the destination policy
    /// of `cfg` alone ([`MediaPolicy::standalone`]), kept current by a
    /// watcher of the host's addresses. Listener addresses with port 0
    /// get an ephemeral port: see [`RelayHandle::ng_addr`].
    pub fn start(cfg: Config) -> Result<RelayHandle> {
        cfg.check().map_err(anyhow::Error::msg)?;
        let policy = MediaPolicy::standalone(&cfg);
        let watch = policy
            .gateway()
            .watch(dstpolicy::DEFAULT_BACKSTOP)
            .context("starting the watcher of the host's addresses")?;
        let mut h = Relay::start_with(cfg, policy)?;
        h._watch = Some(watch);
        Ok(h)
    }

    /// [`Relay::start`] with a given media policy (the daemon's: one
    /// gateway for every plane, kept current by the daemon).
    pub fn start_with(cfg: Config, policy: MediaPolicy) -> Result<RelayHandle> {
        cfg.check().map_err(anyhow::Error::msg)?;
        let epoch = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let n = cfg.worker_count();
        let mut threads = Vec::new();
        let mut ctls = Vec::new();
        let mut io = cfg.io;
        let shared_unmatched = Arc::new(AtomicU64::new(0));
        // Shared-socket mode: the worker's shared sockets and the sk_lookup
        // program steering the media ports to them, set up before any
        // worker starts; a failure is an error (no silent per-port mode).
        let (mut shared_socks, steer) = if cfg.sockets == SocketMode::Shared {
            let socks = (0..n).map(|_| SharedSockets::open()).collect::<io::Result<Vec<_>>>().context(
                "[trgw] sockets = \"shared\": cannot open the shared and raw media sockets (needs CAP_NET_RAW)",
            )?;
            let steer = Steer::attach(&cfg, &socks).context(
                "[trgw] sockets = \"shared\": cannot set up the BPF sk_lookup program (needs CAP_BPF and \
                 CAP_NET_ADMIN, Linux >= 5.9); use sockets = \"per-port\"",
            )?;
            if io == IoMode::Uring {
                tracing::info!("[trgw] sockets = \"shared\" runs the epoll engine (io = \"poll\")");
                io = IoMode::Poll;
            }
            (socks.into_iter().map(Some).collect::<Vec<_>>(), Some(Arc::new(Mutex::new(steer))))
        } else {
            (Vec::new(), None)
        };
        for i in 0..n {
            let (tx, rx) = mpsc::channel();
            let st = stop.clone();
            let name = format!("trgw-w{i}");
            // The ring is created on the worker's own thread (io_uring's
            // single-issuer mode wants the creator to be the submitter);
            // the thread reports its eventfd and engine, or the error.
            let (rtx, rrx) = mpsc::sync_channel::<io::Result<(Arc<EventFd>, IoMode)>>(1);
            let want = io;
            let nw = n as u32;
            let shared = shared_socks.get_mut(i).and_then(Option::take).map(|s| (s, shared_unmatched.clone()));
            threads.push(std::thread::Builder::new().name(name).spawn(move || {
                let rx = if want == IoMode::Uring {
                    match UringWorker::new(rx, nw, epoch) {
                        Ok((w, efd)) => {
                            let _ = rtx.send(Ok((efd, IoMode::Uring)));
                            return w.run(st);
                        }
                        Err((e, rx)) => {
                            tracing::warn!(error = %e, "io_uring unavailable, using epoll");
                            rx
                        }
                    }
                } else {
                    rx
                };
                match Worker::new(rx, nw, epoch, shared.map(|(s, u)| Shared::new(s, u))) {
                    Ok((w, efd)) => {
                        let _ = rtx.send(Ok((efd, IoMode::Poll)));
                        w.run(st);
                    }
                    Err(e) => {
                        let _ = rtx.send(Err(e));
                    }
                }
            })?);
            let (efd, got) = match rrx.recv() {
                Ok(Ok(x)) => x,
                failed => {
                    // Stop the workers already running before reporting.
                    stop.store(true, Relaxed);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(match failed {
                        Ok(Err(e)) => anyhow::Error::new(e).context("creating a relay worker"),
                        _ => anyhow::anyhow!("a relay worker died while starting"),
                    });
                }
            };
            io = got;
            ctls.push(WorkerCtl { tx, efd });
        }
        let mut probed = crate::shared::ProbeCache::default();
        if steer.is_some() {
            let t0 = std::time::Instant::now();
            let (free, all) = probed.warm(&cfg);
            tracing::info!(
                free,
                probed = all,
                ms = t0.elapsed().as_millis() as u64,
                "[trgw] shared sockets: media port pairs probed"
            );
        }
        let policy = Arc::new(policy);
        let core = Core::with_policy(
            cfg.clone(),
            Box::new(SocketPlane { workers: ctls, steer: steer.clone(), probed }),
            epoch,
            policy.clone(),
        );
        let mut handle = RelayHandle {
            stop: stop.clone(),
            threads,
            core: Arc::new(Mutex::new(core)),
            ng: None,
            rtpproxy_udp: None,
            unix_path: None,
            io,
            ng_cache: Arc::new(Mutex::new(CookieCache::new(cfg.ng_cache_entries, cfg.ng_cache_bytes))),
            policy,
            _watch: None,
            steer,
            shared_unmatched,
        };
        tracing::info!(workers = n, io = ?io, sockets = ?cfg.sockets, "relay workers started");
        let allow = Arc::new(cfg.clone());
        if let Some(a) = cfg.ng {
            let sock = UdpSocket::bind(a).with_context(|| format!("binding the ng listener on {a}"))?;
            handle.ng = Some(sock.local_addr()?);
            let cache = handle.ng_cache.clone();
            handle.spawn_udp("trgw-ng", sock, allow.clone(), move |core, m| {
                crate::ng::handle_cached(core, &mut function::lock(&cache), m)
            })?;
            tracing::info!(addr = ?handle.ng, "rtpengine ng control listening");
        }
        if let Some(a) = cfg.rtpproxy_udp {
            let sock = UdpSocket::bind(a).with_context(|| format!("binding the rtpproxy listener on {a}"))?;
            handle.rtpproxy_udp = Some(sock.local_addr()?);
            handle.spawn_udp("trgw-rtpp", sock, allow.clone(), |core, m| crate::rtpproxy::handle(core, m, true))?;
            tracing::info!(addr = ?handle.rtpproxy_udp, "rtpproxy control listening (UDP)");
        }
        if let Some(p) = &cfg.rtpproxy_unix {
            let _ = std::fs::remove_file(p);
            let l = UnixListener::bind(p).with_context(|| format!("binding the rtpproxy socket {}", p.display()))?;
            handle.unix_path = Some(p.clone());
            let srv = UnixServer {
                core: handle.core.clone(),
                stop: stop.clone(),
                busy: Arc::new(AtomicUsize::new(0)),
                max: cfg.control_connections,
                timeout: Duration::from_secs(cfg.control_timeout_secs),
            };
            handle.threads.push(std::thread::Builder::new().name("trgw-rtpp-unix".into()).spawn(move || {
                srv.accept_loop(&l);
            })?);
            tracing::info!(path = %p.display(), "rtpproxy control listening (Unix)");
        }
        // Idle sweeper.
        let (core, st) = (handle.core.clone(), stop.clone());
        let tick = Duration::from_millis((cfg.timeout_secs * 1000 / 4).clamp(100, 1000));
        handle.threads.push(std::thread::Builder::new().name("trgw-timer".into()).spawn(move || {
            while !st.load(Relaxed) {
                std::thread::sleep(tick);
                let gone = lock(&core).expire(Instant::now());
                // The core logged each one ("call timed out (no media)").
                for c in gone {
                    tracing::debug!(call_id = %c, "media timeout: call torn down");
                }
            }
        })?);
        Ok(handle)
    }
}

/// Whether an accept error means the process or the system ran out of
/// file descriptors.
pub fn is_descriptor_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// The rtpproxy Unix stream socket: each connection is served on its own
/// thread (at most `max` at once; more are closed at once and counted),
/// with read and write timeouts, so an idle client or one that does not
/// read its replies delays nobody else.
struct UnixServer {
    core: Arc<Mutex<Core>>,
    stop: Arc<AtomicBool>,
    busy: Arc<AtomicUsize>,
    max: usize,
    timeout: Duration,
}

impl UnixServer {
    fn accept_loop(&self, l: &UnixListener) {
        let mut backoff = Duration::from_millis(10);
        while !self.stop.load(Relaxed) {
            match l.accept() {
                Ok((s, _)) => {
                    backoff = Duration::from_millis(10);
                    if self.stop.load(Relaxed) {
                        break;
                    }
                    if self.busy.fetch_add(1, Relaxed) >= self.max {
                        self.busy.fetch_sub(1, Relaxed);
                        let n = {
                            let mut c = lock(&self.core);
                            c.totals.control_connections_refused += 1;
                            c.totals.control_connections_refused
                        };
                        if n % 100 == 1 {
                            tracing::warn!(max = self.max, "rtpproxy unix socket: connection limit reached, connection closed (control-connections)");
                        }
                        continue;
                    }
                    let (core, busy, timeout) = (self.core.clone(), self.busy.clone(), self.timeout);
                    let spawned = std::thread::Builder::new().name("trgw-rtpp-conn".into()).spawn(move || {
                        serve_unix(s, &core, timeout);
                        busy.fetch_sub(1, Relaxed);
                    });
                    if let Err(e) = spawned {
                        self.busy.fetch_sub(1, Relaxed);
                        tracing::warn!(error = %e, "rtpproxy unix socket: cannot start a connection thread");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE/ENFILE and the like: keep listening, back off.
                    let n = {
                        let mut c = lock(&self.core);
                        c.totals.control_accept_errors += 1;
                        c.totals.control_accept_errors
                    };
                    if n % 100 == 1 {
                        if is_descriptor_exhaustion(&e) {
                            tracing::warn!(error = %e, "rtpproxy unix socket: out of file descriptors (too many open files); backing off");
                        } else {
                            tracing::warn!(error = %e, "rtpproxy unix socket: accept failed; backing off");
                        }
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// One rtpproxy Unix connection: each read is one or more commands (one
/// per line), answered in one write, until the client closes, a timeout
/// passes or a write fails.
fn serve_unix(mut s: std::os::unix::net::UnixStream, core: &Mutex<Core>, timeout: Duration) {
    if s.set_read_timeout(Some(timeout)).is_err() || s.set_write_timeout(Some(timeout)).is_err() {
        return;
    }
    let mut buf = vec![0u8; 65536];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                    lock(core).totals.control_timeouts += 1;
                }
                return;
            }
        };
        let mut out = Vec::new();
        for line in buf[..n].split(|&b| b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
            if let Some(r) = crate::rtpproxy::handle(&mut lock(core), line, false) {
                out.extend_from_slice(&r);
            }
        }
        if let Err(e) = s.write_all(&out) {
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                lock(core).totals.control_timeouts += 1;
            }
            return;
        }
    }
}

impl RelayHandle {
    fn spawn_udp(
        &mut self,
        name: &str,
        sock: UdpSocket,
        cfg: Arc<Config>,
        mut f: impl FnMut(&mut Core, &[u8]) -> Option<Vec<u8>> + Send + 'static,
    ) -> Result<()> {
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let (core, stop) = (self.core.clone(), self.stop.clone());
        self.threads.push(std::thread::Builder::new().name(name.into()).spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Relaxed) {
                let (n, from) = match sock.recv_from(&mut buf) {
                    Ok(x) => x,
                    Err(_) => continue,
                };
                if !cfg.allowed(from.ip()) {
                    let mut c = lock(&core);
                    c.totals.control_denied += 1;
                    if let Some(suppressed) = c.warn_log.admit("control-denied", std::time::Instant::now()) {
                        tracing::warn!(%from, suppressed, "control message from a client not on the allow-list dropped");
                    }
                    continue;
                }
                let reply = f(&mut lock(&core), &buf[..n]);
                if let Some(r) = reply {
                    if let Err(e) = sock.send_to(&r, from) {
                        let n = {
                            let mut c = lock(&core);
                            c.totals.control_send_errors += 1;
                            c.totals.control_send_errors
                        };
                        if n % 100 == 1 {
                            tracing::warn!(%from, bytes = r.len(), error = %e, "control reply not sent");
                        }
                    }
                }
            }
        })?);
        Ok(())
    }

    /// The media policy (its two planes' refusal counters, its gateway).
    pub fn policy(&self) -> &MediaPolicy {
        &self.policy
    }

    /// The packet I/O engine the workers use (io_uring falls back to epoll
    /// when the kernel refuses it).
    pub fn io_mode(&self) -> IoMode {
        self.io
    }

    /// The ng listener's address (with the real port when 0 was asked).
    pub fn ng_addr(&self) -> Option<SocketAddr> {
        self.ng
    }

    /// The rtpproxy UDP listener's address.
    pub fn rtpproxy_udp_addr(&self) -> Option<SocketAddr> {
        self.rtpproxy_udp
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RelayStats {
        let c = lock(&self.core);
        RelayStats {
            calls: c.call_count() as u64,
            streams: c.stream_count() as u64,
            clients: c.client_count() as u64,
            totals: c.totals,
            packets: c.packet_totals(),
            relayed: c.relayed_totals(),
            ng_cache: self.ng_cache.lock().map(|g| g.stats()).unwrap_or_default(),
            latch_refused: self.policy.latch_refused(),
            shared: self.shared_stats(),
        }
    }

    /// The shared-socket mode's counters (None in per-port mode).
    fn shared_stats(&self) -> Option<SharedStats> {
        let st = self.steer.as_ref()?;
        let c = lock(st).counts().unwrap_or_default();
        Some(SharedStats {
            steered: c.steered,
            steer_failed: c.no_socket + c.assign_failed,
            unmatched: self.shared_unmatched.load(Relaxed),
        })
    }

    /// Runs an ng command dictionary in-process ([`crate::ng::command`]):
    /// the IMS-ALG's default media backend.
    pub fn ng_command(&self, req: &crate::bencode::Value) -> crate::bencode::Value {
        crate::ng::command(&mut lock(&self.core), req)
    }

    /// Runs an offer or answer with typed arguments in-process
    /// ([`crate::ng::offer_answer`]): the IMS-ALG's default media backend.
    pub fn offer_answer(&self, sig: &crate::ng::Signal) -> Result<Vec<u8>, String> {
        crate::ng::offer_answer(&mut lock(&self.core), sig)
    }

    /// Deletes a call in-process ([`crate::ng::delete_call`]).
    pub fn delete_call(&self, call_id: &str, from_tag: Option<&str>) -> Result<(), String> {
        crate::ng::delete_call(&mut lock(&self.core), call_id, from_tag).map(|_| ())
    }

    /// The relay table as XDP map entries (see [`crate::table`]).
    pub fn relay_table(&self) -> Vec<(RelayKey, RelayValue)> {
        lock(&self.core).relay_table()
    }

    /// The latched relay sockets, for a fast path ([`crate::core::Core::fast_legs`]).
    pub fn fast_legs(&self) -> Vec<crate::core::FastLeg> {
        lock(&self.core).fast_legs()
    }

    /// Merge a fast path's per-slot counts ([`crate::core::Core::add_fast_counts`]).
    pub fn add_fast_counts(&self, counts: &[(u32, u64, u64)]) {
        lock(&self.core).add_fast_counts(counts)
    }

    /// Stops every thread and closes every socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(p) = &self.unix_path {
            // Wake the accept loop blocked in accept(2).
            let _ = std::os::unix::net::UnixStream::connect(p);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(p) = self.unix_path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
