//! The I/O runner: UDP and TCP listeners on the two realm addresses, a
//! tokio task that owns the core and feeds it datagrams, framed stream
//! messages, timer expiries and DNS completions, and sends what it
//! returns. [`spawn`] runs it on its own thread with a current-thread
//! runtime, so the daemon (phase 2) and tests start it the same way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context as _, Result};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, Notify};

use crate::config::{Config, Transport};
use crate::media::MediaControl;
use crate::proxy::{Alg, Incoming, Stats};
use crate::realm::{Realm, Resolver};
use crate::state::{BudgetUse, Usage};
use crate::tcp::{spawn_conn, ConnCounts, Conns, Event};
use crate::txn::Peer;

/// What the runner shares with its handle.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Counters.
    pub stats: Stats,
    /// (server transactions, client transactions, dialogs, parked).
    pub tables: (usize, usize, usize, usize),
    /// Open TCP connections (accepted and opened).
    pub tcp_connections: usize,
    /// The TCP budgets.
    pub tcp: ConnCounts,
    /// The core's budgets and the DNS lookups'.
    pub budgets: BudgetUse,
}

impl Snapshot {
    /// Every budget by name (the `budget` label of `v6gate_alg_budget_*`
    /// and `/status`): what it holds, its cap, one client's share and how
    /// many clients hold some of it (DNS lookups and outbound connections
    /// have no per-client count here: 0).
    pub fn budgets(&self) -> [(&'static str, Usage); 6] {
        let b = &self.budgets;
        let t = &self.tcp;
        let plain = |used: usize, limit: usize| Usage { used: used as u64, limit: limit as u64, share: 0, clients: 0 };
        [
            ("transactions", b.transactions),
            ("state-bytes", b.state_bytes),
            ("parked-bytes", b.parked_bytes),
            ("dns-lookups", plain(b.dns_lookups.0, b.dns_lookups.1)),
            ("tcp-connections", Usage { used: t.inbound as u64, limit: t.inbound_limit as u64, ..t.inbound_use }),
            ("tcp-outbound", plain(t.outbound, t.outbound_limit)),
        ]
    }
}

/// A running ALG.
pub struct AlgHandle {
    stop: Arc<Notify>,
    stopped: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    snapshot: Arc<Mutex<Snapshot>>,
    cfg_tx: mpsc::UnboundedSender<Config>,
    cfg: Mutex<Config>,
    conns: Arc<Conns>,
    policy: Arc<dstpolicy::Policy>,
    /// Keeps the standalone ALG's own-address list current (None: the
    /// policy was given, its owner keeps it current).
    _watch: Option<dstpolicy::Watch>,
    /// Bound UDP address in the IPv6 realm (real port when 0 was asked).
    pub udp_v6: SocketAddr,
    /// Bound UDP address in the IPv4 realm.
    pub udp_v4: SocketAddr,
}

impl AlgHandle {
    /// The latest counters and table sizes (updated after every event).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = *function::lock(&self.snapshot);
        // The connection budgets change outside the core's events: read now.
        with_tcp(&mut s, self.conns.snapshot());
        s
    }

    /// The destination policy next hops go through (its refusals by
    /// reason: [`dstpolicy::Policy::refused`]).
    pub fn policy(&self) -> &Arc<dstpolicy::Policy> {
        &self.policy
    }

    /// The configuration in force.
    pub fn config(&self) -> Config {
        function::lock(&self.cfg).clone()
    }

    /// Applies a reloaded `[alg]` to the running ALG without touching a
    /// call (see [`Config::restart_needed`] for what it refuses).
    pub fn reconfigure(&self, new: Config) -> Result<(), String> {
        new.check()?;
        let mut cur = function::lock(&self.cfg);
        if let Some(k) = cur.restart_needed(&new) {
            return Err(format!("[alg] {k} changed: restart v6gate to apply"));
        }
        self.conns.reconfigure(&new);
        self.cfg_tx.send(new.clone()).map_err(|_| "the ALG is not running".to_string())?;
        *cur = new;
        Ok(())
    }

    /// Stops the runner and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stopped.store(true, Relaxed);
        self.stop.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AlgHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn bind_udp(addr: SocketAddr) -> Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&addr.into()).with_context(|| format!("binding SIP UDP on {addr}"))?;
    Ok(s.into())
}

fn bind_tcp(addr: SocketAddr) -> Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into()).with_context(|| format!("binding SIP TCP on {addr}"))?;
    s.listen(1024)?;
    Ok(s.into())
}

/// Starts the ALG: binds its sockets (errors are returned here), then runs
/// on a thread of its own. `resolver` None: DNS through the bounded stub
/// resolver ([`crate::dns::StubResolver`]) on `dns-servers` or the
/// nameservers of /etc/resolv.conf. Next hops go through a destination
/// policy of the ALG's own: the host's addresses (read over netlink and
/// kept current) and the configuration's listen and advertised ones
/// ([`Config::gateway_spec`]), with `next-hop-allow` / `next-hop-deny`.
pub fn spawn(
    cfg: Config,
    media: Option<Box<dyn MediaControl>>,
    resolver: Option<Box<dyn Resolver>>,
) -> Result<AlgHandle> {
    let gw = dstpolicy::Gateway::of_host(cfg.gateway_spec());
    let watch = gw.watch(dstpolicy::DEFAULT_BACKSTOP).context("watching the host's addresses")?;
    let policy = Arc::new(dstpolicy::Policy::new("alg", gw, cfg.next_hop_lists()));
    spawn_inner(cfg, media, resolver, policy, Some(watch))
}

/// [`spawn`] with a destination policy given (the daemon's, over the
/// gateway every plane shares, kept current by its owner).
pub fn spawn_with_policy(
    cfg: Config,
    media: Option<Box<dyn MediaControl>>,
    resolver: Option<Box<dyn Resolver>>,
    policy: Arc<dstpolicy::Policy>,
) -> Result<AlgHandle> {
    spawn_inner(cfg, media, resolver, policy, None)
}

fn spawn_inner(
    mut cfg: Config,
    media: Option<Box<dyn MediaControl>>,
    resolver: Option<Box<dyn Resolver>>,
    policy: Arc<dstpolicy::Policy>,
    watch: Option<dstpolicy::Watch>,
) -> Result<AlgHandle> {
    cfg.check().map_err(anyhow::Error::msg)?;
    let u6 = bind_udp(cfg.listen_v6)?;
    let u4 = bind_udp(cfg.listen_v4)?;
    let (udp_v6, udp_v4) = (u6.local_addr()?, u4.local_addr()?);
    // Port 0 (tests): the real ports are what the core writes in headers.
    cfg.listen_v6.set_port(udp_v6.port());
    cfg.listen_v4.set_port(udp_v4.port());
    let tcp = if cfg.tcp {
        Some((
            bind_tcp(SocketAddr::new(cfg.listen_v6.ip(), udp_v6.port()))?,
            bind_tcp(SocketAddr::new(cfg.listen_v4.ip(), udp_v4.port()))?,
        ))
    } else {
        None
    };
    let stop = Arc::new(Notify::new());
    let stopped = Arc::new(AtomicBool::new(false));
    let snapshot = Arc::new(Mutex::new(Snapshot::default()));
    let conns = Arc::new(Conns::new(&cfg));
    let (cfg_tx, cfg_rx) = mpsc::unbounded_channel();
    let running_cfg = cfg.clone();
    let (st, sn, stp, cn, pol) = (stop.clone(), snapshot.clone(), stopped.clone(), conns.clone(), policy.clone());
    let thread = std::thread::Builder::new().name("alg".into()).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the ALG runtime");
                return;
            }
        };
        rt.block_on(async move {
            let wake = Arc::new(Notify::new());
            let resolver = match resolver {
                Some(r) => r,
                None => match crate::dns::StubResolver::new(&cfg, wake.clone()) {
                    Ok(r) => Box::new(r) as Box<dyn Resolver>,
                    Err(e) => {
                        tracing::warn!(error = %e, "no DNS; only literals and domain routes resolve");
                        Box::new(crate::realm::StaticResolver::default())
                    }
                },
            };
            let mut alg = Alg::new(cfg, resolver, media);
            alg.set_policy(pol);
            let ctl = Control { stop: st, stopped: stp, snapshot: sn, dns_wake: wake, cfg_rx, conns: cn };
            if let Err(e) = run(alg, u6, u4, tcp, ctl).await {
                tracing::error!(error = %e, "ALG stopped");
            }
        });
    })?;
    tracing::info!(%udp_v6, %udp_v4, "IMS-ALG listening");
    Ok(AlgHandle {
        stop,
        stopped,
        thread: Some(thread),
        snapshot,
        cfg_tx,
        cfg: Mutex::new(running_cfg),
        conns,
        policy,
        _watch: watch,
        udp_v6,
        udp_v4,
    })
}

/// `recv_from` on a socket that may not exist (then never ready).
async fn recv_opt(s: Option<&UdpSocket>, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
    match s {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

/// What the runner's loop shares with its handle.
struct Control {
    stop: Arc<Notify>,
    stopped: Arc<AtomicBool>,
    snapshot: Arc<Mutex<Snapshot>>,
    dns_wake: Arc<Notify>,
    cfg_rx: mpsc::UnboundedReceiver<Config>,
    conns: Arc<Conns>,
}

async fn run(
    mut alg: Alg,
    u6: std::net::UdpSocket,
    u4: std::net::UdpSocket,
    tcp: Option<(std::net::TcpListener, std::net::TcpListener)>,
    ctl: Control,
) -> Result<()> {
    let Control { stop, stopped, snapshot, dns_wake, mut cfg_rx, conns } = ctl;
    let u6 = UdpSocket::from_std(u6)?;
    let u4 = UdpSocket::from_std(u4)?;
    let max = alg.config().max_message;
    let (etx, mut erx) = mpsc::channel::<Event>(4096);
    if let Some((l6, l4)) = tcp {
        for (l, realm) in [(l6, Realm::V6), (l4, Realm::V4)] {
            let l = TcpListener::from_std(l)?;
            let (etx, conns) = (etx.clone(), conns.clone());
            tokio::spawn(async move {
                let accept_log = dstpolicy::RateLog::<()>::default();
                loop {
                    match l.accept().await {
                        Ok((s, a)) => {
                            let a = unmap(a);
                            let Some(slot) = conns.take_inbound(a) else { continue };
                            let _ = s.set_nodelay(true);
                            spawn_conn(s, (a, realm), etx.clone(), max, conns.clone(), slot);
                        }
                        Err(e) => {
                            if let Some(suppressed) = accept_log.admit((), Instant::now()) {
                                tracing::warn!(suppressed, error = %e, "SIP TCP accept failed");
                            }
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    }
                }
            });
        }
    }
    let mut tcp_out: HashMap<u64, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let mut by_addr: HashMap<SocketAddr, u64> = HashMap::new();
    let mut pending_out: HashMap<SocketAddr, Vec<Vec<u8>>> = HashMap::new();
    // Remote media control: one socket per family its servers need.
    let ng_sock = |any: &str, need: bool| -> Result<Option<UdpSocket>> {
        if !need {
            return Ok(None);
        }
        let s = std::net::UdpSocket::bind(any).with_context(|| format!("binding the ng client socket on {any}"))?;
        s.set_nonblocking(true)?;
        Ok(Some(UdpSocket::from_std(s)?))
    };
    let ng = alg.config().media == crate::config::MediaMode::Ng;
    let ng4 = ng_sock("0.0.0.0:0", ng && alg.config().ng.iter().any(|s| s.addr.is_ipv4()))?;
    let ng6 = ng_sock("[::]:0", ng && alg.config().ng.iter().any(|s| s.addr.is_ipv6()))?;
    let (mut bng4, mut bng6) = (vec![0u8; 65_536], vec![0u8; 65_536]);
    let mut b6 = vec![0u8; 65_536];
    let mut b4 = vec![0u8; 65_536];
    // Datagrams still to read without going back to the reactor.
    let mut budget = 0usize;
    // Events handled since the handle's snapshot was last updated.
    let mut unpublished = false;
    let mut v4_first = false;
    loop {
        if stopped.load(Relaxed) {
            break;
        }
        // Under load the SIP sockets hold more than one datagram: read them
        // straight away (a recvfrom each, no epoll and no timer set-up per
        // message) up to DRAIN_BUDGET, then give the reactor, the timers and
        // the other events their turn. Due timers run first.
        let ready = if budget > 0 && alg.poll_timeout().is_none_or(|d| d > Instant::now()) {
            v4_first = !v4_first;
            try_recv_udp(&u6, &u4, &mut b6, &mut b4, v4_first)
        } else {
            None
        };
        if let Some((realm, n, a)) = ready {
            budget -= 1;
            handle_udp(&mut alg, realm, a, if realm == Realm::V6 { &b6[..n] } else { &b4[..n] });
            // Counts against tokio's cooperative budget as a recv_from in
            // the select does, so the connection tasks keep their turns.
            tokio::task::consume_budget().await;
        } else {
            budget = DRAIN_BUDGET;
            if unpublished {
                // Before waiting: the handle sees every event handled.
                publish(&alg, &conns, &snapshot);
            }
            let deadline = alg.poll_timeout().map(tokio::time::Instant::from_std);
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = u6.recv_from(&mut b6) => if let Ok((n, a)) = r {
                    handle_udp(&mut alg, Realm::V6, a, &b6[..n]);
                },
                r = u4.recv_from(&mut b4) => if let Ok((n, a)) = r {
                    handle_udp(&mut alg, Realm::V4, unmap(a), &b4[..n]);
                },
                Some(ev) = erx.recv() => match ev {
                    Event::Msg { realm, conn, addr, data } => {
                        let p = Peer { realm, transport: Transport::Tcp, addr, conn: Some(conn) };
                        alg.handle(Instant::now(), Incoming { peer: &p, data: &data });
                    }
                    Event::Connected { conn, addr, tx } => {
                        for d in pending_out.remove(&addr).unwrap_or_default() {
                            let _ = tx.try_send(d);
                        }
                        tcp_out.insert(conn, tx);
                        by_addr.insert(addr, conn);
                    }
                    Event::ConnectFailed { addr } => {
                        pending_out.remove(&addr);
                    }
                    Event::Closed { conn } => {
                        tcp_out.remove(&conn);
                        by_addr.retain(|_, c| *c != conn);
                    }
                },
                r = recv_opt(ng4.as_ref(), &mut bng4) => if let Ok((n, a)) = r {
                    alg.handle_media_datagram(Instant::now(), a, &bng4[..n]);
                },
                r = recv_opt(ng6.as_ref(), &mut bng6) => if let Ok((n, a)) = r {
                    alg.handle_media_datagram(Instant::now(), a, &bng6[..n]);
                },
                Some(c) = cfg_rx.recv() => {
                    alg.reconfigure(c);
                    tracing::info!("[alg] reconfigured");
                }
                _ = sleep => alg.handle_timeout(Instant::now()),
                _ = dns_wake.notified() => alg.dns_completed(Instant::now()),
                _ = stop.notified() => break,
            }
        }
        while let Some((to, d)) = alg.poll_media_transmit() {
            let s = if to.is_ipv4() { ng4.as_ref() } else { ng6.as_ref() };
            if let Some(Err(e)) = s.map(|s| s.try_send_to(&d, to)) {
                tracing::debug!(%to, error = %e, "ng send failed");
            }
        }
        while let Some(t) = alg.poll_transmit() {
            match t.peer.transport {
                Transport::Udp => {
                    let s = if t.peer.addr.is_ipv6() { &u6 } else { &u4 };
                    if let Err(e) = s.try_send_to(&t.data, t.peer.addr) {
                        alg.stats.send_errors += 1;
                        tracing::debug!(to = %t.peer.addr, error = %e, "SIP send failed");
                    }
                }
                Transport::Tcp => {
                    let c =
                        t.peer.conn.filter(|c| tcp_out.contains_key(c)).or_else(|| by_addr.get(&t.peer.addr).copied());
                    match c.and_then(|c| tcp_out.get(&c)) {
                        Some(tx) => {
                            if tx.try_send(t.data).is_err() {
                                alg.stats.send_errors += 1;
                            }
                        }
                        None if pending_out.contains_key(&t.peer.addr) => {
                            // Queued behind the connect (a few messages at most).
                            match pending_out.get_mut(&t.peer.addr) {
                                Some(q) if q.len() < PENDING_OUT_MAX => q.push(t.data),
                                _ => alg.stats.send_errors += 1,
                            }
                        }
                        None => match conns.take_outbound(t.peer.addr) {
                            None => alg.stats.send_errors += 1,
                            Some(slot) => {
                                pending_out.insert(t.peer.addr, vec![t.data]);
                                let (addr, etx, realm, conns) = (t.peer.addr, etx.clone(), t.peer.realm, conns.clone());
                                tokio::spawn(async move {
                                    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                                        Ok(Ok(s)) => {
                                            let _ = s.set_nodelay(true);
                                            spawn_conn(s, (addr, realm), etx, max, conns, slot);
                                        }
                                        _ => {
                                            conns.give_back(slot);
                                            tracing::debug!(%addr, "TCP connect failed");
                                            let _ = etx.send(Event::ConnectFailed { addr }).await;
                                        }
                                    }
                                });
                            }
                        },
                    }
                }
            }
        }
        // Published after every event, every eighth in a run of datagrams.
        unpublished = ready.is_some() && !budget.is_multiple_of(8);
        if !unpublished {
            publish(&alg, &conns, &snapshot);
        }
    }
    Ok(())
}

/// Datagrams read in a row without the reactor (see `run`).
const DRAIN_BUDGET: usize = 32;
/// How long opening a TCP connection to a next hop may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Messages queued for a TCP connection being opened.
const PENDING_OUT_MAX: usize = 64;

/// One SIP datagram from a realm's UDP socket into the core.
fn handle_udp(alg: &mut Alg, realm: Realm, addr: SocketAddr, data: &[u8]) {
    let p = Peer { realm, transport: Transport::Udp, addr, conn: None };
    alg.handle(Instant::now(), Incoming { peer: &p, data });
}

/// An IPv4-mapped source (a dual-stack socket) as the IPv4 address.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v) => v.ip().to_ipv4_mapped().map_or(a, |ip| SocketAddr::new(ip.into(), v.port())),
        v => v,
    }
}

/// One waiting datagram from either SIP socket (`v4_first`: which one is
/// tried first, alternated for fairness), without waiting.
fn try_recv_udp(
    u6: &UdpSocket,
    u4: &UdpSocket,
    b6: &mut [u8],
    b4: &mut [u8],
    v4_first: bool,
) -> Option<(Realm, usize, SocketAddr)> {
    let mut try6 = || u6.try_recv_from(b6).ok().map(|(n, a)| (Realm::V6, n, a));
    let mut try4 = || u4.try_recv_from(b4).ok().map(|(n, a)| (Realm::V4, n, unmap(a)));
    if v4_first {
        try4().or_else(try6)
    } else {
        try6().or_else(try4)
    }
}

/// The TCP budgets' figures in a snapshot.
fn with_tcp(s: &mut Snapshot, tcp: ConnCounts) {
    s.stats.tcp_refused = tcp.refused;
    s.stats.tcp_closed = tcp.closed;
    s.tcp_connections = tcp.inbound + tcp.outbound;
    s.tcp = tcp;
}

/// Updates what the handle reads.
fn publish(alg: &Alg, conns: &Conns, snapshot: &Mutex<Snapshot>) {
    let mut snap =
        Snapshot { stats: alg.stats, tables: alg.table_sizes(), budgets: alg.budget_use(), ..Snapshot::default() };
    with_tcp(&mut snap, conns.snapshot());
    *function::lock(snapshot) = snap;
}
