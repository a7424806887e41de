//! # trt — the Transport Relay Translator (RFC 3142)
//!
//! IPv6-only clients reach IPv4 servers through a relay prefix: DNS64
//! synthesises `PREFIX::IPv4` for an IPv4-only name (the `dns64` crate
//! with the TRT prefix as its prefix), the network routes the prefix to
//! this relay, and the relay terminates each TCP connection (any port) and
//! opens its own to the IPv4 server; the bytes stay in the kernel
//! (non-blocking `splice(2)` driven by the listener's epoll loop, or with
//! `copy = "sockmap"` a BPF sockhash stream verdict, `bpf/trt.bpf.c`)
//! ([`tcp`]); UDP flows are relayed datagram by datagram with an idle
//! timeout ([`udp`]). Static mappings let IPv4 clients reach IPv6 servers.
//!
//! Capture is nftables `tproxy` (built into this kernel) with transparent
//! sockets, set up and removed by the relay ([`setup`]). Trade-offs
//! against NAT64 are in docs/trt.md: TRT keeps no per-packet state and
//! needs no ALG for protocols that only carry names, but breaks end-to-end
//! TCP semantics (the client's handshake completes before the server is
//! reached), carries only TCP and UDP (no ICMP, no other protocols), and
//! embedded addresses (FTP, SIP bodies) still need an ALG.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod cli;
pub mod config;
mod function;
pub mod pre;
pub mod setup;
#[allow(unsafe_code)]
pub mod sys;
pub mod tcp;
pub mod udp;

use anyhow::{Context as _, Result};
use config::TrtConfig;
use serde::Serialize;
use std::net::{SocketAddrV6, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The relay's counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// TCP connections relayed.
    pub tcp_relayed: AtomicU64,
    /// TCP connections in progress.
    pub tcp_active: AtomicUsize,
    /// TCP connections reset because `max-connections` were active (or out of descriptors).
    pub tcp_refused: AtomicU64,
    /// TCP connections reset because their client held `max-connections-per-client`.
    pub tcp_refused_client: AtomicU64,
    /// TCP connections reset because their client had `max-connecting-per-client` connects in progress.
    pub tcp_refused_connecting: AtomicU64,
    /// Relayed TCP connections reset after `tcp-idle-timeout` without a byte either way.
    pub tcp_idle_closed: AtomicU64,
    /// TCP connections to an address with no IPv4 server (not in the prefix, forbidden).
    pub tcp_no_server: AtomicU64,
    /// IPv4 connects that failed or timed out (the client was reset).
    pub tcp_connect_failed: AtomicU64,
    /// Relayed connections that ended in an error.
    pub tcp_errors: AtomicU64,
    /// IPv4 connects started at a client's SYN (`preconnect`).
    pub tcp_preconnects: AtomicU64,
    /// Pre-connects taken by their connection's accept.
    pub tcp_preconnect_claimed: AtomicU64,
    /// Pre-connects no accept took in time (closed with a reset).
    pub tcp_preconnect_expired: AtomicU64,
    /// SYNs not pre-connected: the pre-connect bound or `max-connections` was reached.
    pub tcp_preconnect_refused: AtomicU64,
    /// Relayed connections whose client had sent nothing when the server's
    /// side was connected: the server's handshake ACK went alone
    /// (`ack-with-data`), not with the client's first bytes.
    pub tcp_ack_alone: AtomicU64,
    /// FINs whose pass-on was put off while sessions opened (`close-delay`).
    pub tcp_fin_deferred: AtomicU64,
    /// Times the closing work put off had waited `close-delay` (done then,
    /// not between sessions).
    pub tcp_fin_late: AtomicU64,
    /// Bytes from clients to servers.
    pub bytes_up: AtomicU64,
    /// Bytes from servers to clients.
    pub bytes_down: AtomicU64,
    /// UDP datagrams from clients.
    pub udp_in: AtomicU64,
    /// UDP datagrams to clients.
    pub udp_out: AtomicU64,
    /// UDP flows now.
    pub udp_flows: AtomicUsize,
    /// UDP flows created.
    pub udp_flows_created: AtomicU64,
    /// UDP flows forgotten after `udp-timeout`.
    pub udp_flows_expired: AtomicU64,
    /// UDP datagrams dropped because `max-udp-flows` were held.
    pub udp_refused: AtomicU64,
    /// UDP datagrams dropped because their client held `max-udp-flows-per-client`.
    pub udp_refused_client: AtomicU64,
    /// ICMP errors sent for refused UDP datagrams (administratively prohibited).
    pub udp_icmp_sent: AtomicU64,
    /// ICMP errors not sent: over the rate limit, or no raw socket (no CAP_NET_RAW).
    pub udp_icmp_suppressed: AtomicU64,
    /// UDP datagrams with no IPv4 server.
    pub udp_no_server: AtomicU64,
    /// UDP socket errors.
    pub udp_errors: AtomicU64,
}

/// A copy of [`Counters`].
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Snapshot {
    pub tcp_relayed: u64,
    pub tcp_active: u64,
    pub tcp_refused: u64,
    pub tcp_refused_client: u64,
    pub tcp_refused_connecting: u64,
    pub tcp_idle_closed: u64,
    pub tcp_no_server: u64,
    pub tcp_connect_failed: u64,
    pub tcp_errors: u64,
    pub tcp_preconnects: u64,
    pub tcp_preconnect_claimed: u64,
    pub tcp_preconnect_expired: u64,
    pub tcp_preconnect_refused: u64,
    pub tcp_ack_alone: u64,
    pub tcp_fin_deferred: u64,
    pub tcp_fin_late: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub udp_in: u64,
    pub udp_out: u64,
    pub udp_flows: u64,
    pub udp_flows_created: u64,
    pub udp_flows_expired: u64,
    pub udp_refused: u64,
    pub udp_refused_client: u64,
    pub udp_icmp_sent: u64,
    pub udp_icmp_suppressed: u64,
    pub udp_no_server: u64,
    pub udp_errors: u64,
}

impl Counters {
    /// A copy.
    pub fn snapshot(&self) -> Snapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            tcp_relayed: g(&self.tcp_relayed),
            tcp_active: self.tcp_active.load(Ordering::Relaxed) as u64,
            tcp_refused: g(&self.tcp_refused),
            tcp_refused_client: g(&self.tcp_refused_client),
            tcp_refused_connecting: g(&self.tcp_refused_connecting),
            tcp_idle_closed: g(&self.tcp_idle_closed),
            tcp_no_server: g(&self.tcp_no_server),
            tcp_connect_failed: g(&self.tcp_connect_failed),
            tcp_errors: g(&self.tcp_errors),
            tcp_preconnects: g(&self.tcp_preconnects),
            tcp_preconnect_claimed: g(&self.tcp_preconnect_claimed),
            tcp_preconnect_expired: g(&self.tcp_preconnect_expired),
            tcp_preconnect_refused: g(&self.tcp_preconnect_refused),
            tcp_ack_alone: g(&self.tcp_ack_alone),
            tcp_fin_deferred: g(&self.tcp_fin_deferred),
            tcp_fin_late: g(&self.tcp_fin_late),
            bytes_up: g(&self.bytes_up),
            bytes_down: g(&self.bytes_down),
            udp_in: g(&self.udp_in),
            udp_out: g(&self.udp_out),
            udp_flows: self.udp_flows.load(Ordering::Relaxed) as u64,
            udp_flows_created: g(&self.udp_flows_created),
            udp_flows_expired: g(&self.udp_flows_expired),
            udp_refused: g(&self.udp_refused),
            udp_refused_client: g(&self.udp_refused_client),
            udp_icmp_sent: g(&self.udp_icmp_sent),
            udp_icmp_suppressed: g(&self.udp_icmp_suppressed),
            udp_no_server: g(&self.udp_no_server),
            udp_errors: g(&self.udp_errors),
        }
    }
}

/// A running relay.
#[derive(Debug)]
pub struct Relay {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
    copy: &'static str,
    _plumbing: Option<setup::Plumbing>,
    /// `cpu-latency`: the PM QoS request, held until the relay is dropped.
    _cpu_latency: Option<netsys::cpu_latency::CpuLatency>,
    /// Where the relay may connect (plane `trt`).
    policy: Arc<dstpolicy::Policy>,
    /// `v6gate trt`: the own-address watcher (the daemon runs its own).
    _watch: Option<dstpolicy::Watch>,
}

/// The copy `cfg.copy` asks for: the in-kernel one only where the kernel
/// allows it (else the loop's splice, with a warning). One sockhash serves
/// every TCP listener, so it has room for `max-connections` pairs per
/// listener.
fn copier(cfg: &TrtConfig) -> tcp::Copier {
    match cfg.copy {
        config::CopyMode::Splice => return tcp::Copier::Loop,
        config::CopyMode::SpliceThreads => return tcp::Copier::Threads,
        config::CopyMode::Sockmap => {}
    }
    let listeners = 1 + cfg.statics.iter().filter(|s| !s.udp).count();
    let pairs = u32::try_from(cfg.max_connections.saturating_mul(listeners)).unwrap_or(u32::MAX);
    match xdp::sockmap::SockRelay::load(pairs) {
        Ok(k) => tcp::Copier::Kernel(Arc::new(std::sync::Mutex::new(k))),
        Err(e) => {
            tracing::warn!("TRT: copy = \"sockmap\" is not available here ({e}); TCP is spliced");
            tcp::Copier::Loop
        }
    }
}

fn transparent_tcp(port: u16) -> Result<TcpListener> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    s.set_only_v6(true)?;
    s.set_reuse_address(true)?;
    sys::set_ipv6_transparent(&s).context("IPV6_TRANSPARENT (needs CAP_NET_ADMIN)")?;
    s.bind(&SockAddr::from(SocketAddrV6::new(core::net::Ipv6Addr::UNSPECIFIED, port, 0, 0)))
        .with_context(|| format!("binding the TCP tproxy port {port}"))?;
    s.listen(1024)?;
    Ok(s.into())
}

impl Relay {
    /// Set up the plumbing (when `setup = "auto"`), open the sockets and
    /// start the threads, with a destination policy of its own: the host's
    /// addresses (kept current) and the relay prefix looked through.
    pub fn start(cfg: &TrtConfig) -> Result<Relay> {
        let mut spec = dstpolicy::Spec::default();
        spec.embeddings.add_rfc6052(cfg.prefix);
        let gw = dstpolicy::Gateway::of_host(spec);
        let watch = gw.watch(dstpolicy::DEFAULT_BACKSTOP).context("starting the watcher of the host's addresses")?;
        let policy = Arc::new(dstpolicy::Policy::new("trt", gw, dstpolicy::Lists::default()));
        let mut r = Relay::start_with(cfg, policy)?;
        r._watch = Some(watch);
        Ok(r)
    }

    /// [`Relay::start`] with a given destination policy (the daemon's).
    pub fn start_with(cfg: &TrtConfig, policy: Arc<dstpolicy::Policy>) -> Result<Relay> {
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tl = transparent_tcp(cfg.tcp_port)?;
        if let Some(cc) = &cfg.congestion_control {
            // A name the kernel refuses is refused here, at start, rather
            // than in a listener's thread (`tcp::serve` sets it on every
            // listener it runs, the static ones too).
            sys::set_congestion(&tl, cc).map_err(|e| tcp::congestion_error(cc, e))?;
        }
        let ul =
            udp::listener(cfg.udp_port).with_context(|| format!("binding the UDP tproxy port {}", cfg.udp_port))?;
        let mut statics = Vec::new();
        for s in &cfg.statics {
            if s.udp {
                let u =
                    std::net::UdpSocket::bind(s.listen).with_context(|| format!("[trt] static listen {}", s.listen))?;
                u.set_nonblocking(true)?;
                statics.push((s, None, Some(u)));
            } else {
                let l = TcpListener::bind(s.listen).with_context(|| format!("[trt] static listen {}", s.listen))?;
                statics.push((s, Some(l), None));
            }
        }
        let cpu_latency = match cfg.cpu_latency {
            Some(d) => Some(
                netsys::cpu_latency::CpuLatency::hold(d)
                    .with_context(|| format!("[trt] cpu-latency: {} (needs root)", netsys::cpu_latency::DEVICE))?,
            ),
            None => None,
        };
        let plumbing = match cfg.setup {
            config::Setup::Auto => Some(setup::Plumbing::install(cfg)?),
            config::Setup::None => None,
        };
        let opts = tcp::Opts {
            max: cfg.max_connections,
            timeout: cfg.connect_timeout,
            copier: copier(cfg),
            busy_poll: cfg.busy_poll,
            preconnect: None,
            open_spin: cfg.open_spin,
            ack_with_data: cfg.ack_with_data,
            congestion: cfg.congestion_control.clone(),
            close_delay: cfg.close_delay,
            budgets: cfg.budgets,
        };
        let copy = match opts.copier {
            tcp::Copier::Loop => "splice",
            tcp::Copier::Threads => "splice-threads",
            tcp::Copier::Kernel(_) => "sockmap",
        };
        let mut threads = Vec::new();
        let target: Arc<dyn tcp::Target> = Arc::new(tcp::Embedded { prefix: cfg.prefix, policy: policy.clone() });
        let prefix = cfg.prefix.prefix();
        let preconnect = (cfg.preconnect > 0).then_some(tcp::Preconnect {
            max: cfg.preconnect,
            prefix: prefix.addr(),
            len: prefix.len(),
            port: None,
        });
        let o = tcp::Opts { preconnect, ..opts.clone() };
        let (c, st, t) = (counters.clone(), stop.clone(), target.clone());
        threads.push(std::thread::Builder::new().name("trt-accept".into()).spawn(move || {
            if let Err(e) = tcp::serve(tl, t, o, c, st) {
                tracing::error!("TRT TCP listener: {e}");
            }
        })?);
        let limits = udp::Limits { max_flows: cfg.max_udp_flows, idle: cfg.udp_timeout, budgets: cfg.budgets };
        let (c, st, t) = (counters.clone(), stop.clone(), target);
        threads.push(std::thread::Builder::new().name("trt-udp".into()).spawn(move || {
            if let Err(e) = udp::serve(ul, None, t, limits, c, st) {
                tracing::error!("TRT UDP relay: {e}");
            }
        })?);
        for (s, tcp_l, udp_s) in statics {
            let fixed: Arc<dyn tcp::Target> = Arc::new(tcp::Fixed(s.to));
            let (c, st) = (counters.clone(), stop.clone());
            let (listen, o) = (s.listen, opts.clone());
            threads.push(std::thread::Builder::new().name("trt-static".into()).spawn(move || {
                let r = match (tcp_l, udp_s) {
                    (Some(l), _) => tcp::serve(l, fixed, o, c, st),
                    (_, Some(u)) => udp::serve(u, Some(listen), fixed, limits, c, st),
                    _ => Ok(()),
                };
                if let Err(e) = r {
                    tracing::error!("TRT static mapping {listen}: {e}");
                }
            })?);
        }
        tracing::info!(prefix = %cfg.prefix.prefix(), tcp = cfg.tcp_port, udp = cfg.udp_port, statics = cfg.statics.len(), copy, "TRT relay running");
        if let Some(q) = &cpu_latency {
            tracing::info!(limit_us = q.limit().as_micros() as u64, "TRT: holding the CPU wake-up latency request");
        }
        Ok(Relay {
            stop,
            threads,
            counters,
            copy,
            _plumbing: plumbing,
            _cpu_latency: cpu_latency,
            policy,
            _watch: None,
        })
    }

    /// How TCP bytes are moved: `"splice"`, `"splice-threads"` or `"sockmap"`.
    pub fn copy(&self) -> &'static str {
        self.copy
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The destination policy (its refusal counters).
    pub fn policy(&self) -> &Arc<dstpolicy::Policy> {
        &self.policy
    }

    /// Stop the threads and remove the plumbing. Connections being set up,
    /// connections the loops copy and connections in the sockhash are
    /// reset (the sockhash goes with the relay); connections on splice
    /// threads (`splice-threads`) finish on their own threads.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
