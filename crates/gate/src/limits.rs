//! The descriptor limit (RLIMIT_NOFILE): what a configuration needs, and
//! raising the soft limit towards it at start (up to the hard limit).
//!
//! Every media port of the TrGW is a socket, every admin, rtpproxy-Unix,
//! DNS64 or SIP (ALG) TCP connection one more, so the default soft limit
//! of 1024 runs out long before the configured port ranges do. [`needed`] adds up what
//! the configuration may hold open at once; [`raise`] lifts the soft limit
//! to that (never lowering it, never above the hard limit) and says when
//! the hard limit is short. `/status` shows `descriptors.open` against
//! `descriptors.limit`, `/metrics` `process_open_fds` and `process_max_fds`.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::config::Config;

/// Descriptors the daemon holds besides the listeners below: TUN queues,
/// netlink, epoll and eventfds, log files, the runtime's own.
const BASE: u64 = 256;

/// The soft and hard RLIMIT_NOFILE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoFile {
    /// Soft limit (in force).
    pub soft: u64,
    /// Hard limit (the ceiling an unprivileged process may raise to).
    pub hard: u64,
}

/// The process's descriptor limits.
pub fn nofile() -> Option<NoFile> {
    getrlimit(Resource::RLIMIT_NOFILE).ok().map(|(soft, hard)| NoFile { soft, hard })
}

/// Descriptors open now (entries of /proc/self/fd).
pub fn open_fds() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64)
}

/// What `cfg` may hold open at once: every TrGW media port on every
/// interface address, the rtpproxy Unix and admin connection caps, DNS64
/// connections and in-flight upstream queries, the ALG's listeners and
/// `max-connections`, TUN queues, the tunnels' devices and sockets, the
/// softwires' devices, the transport relay's connections and flows, plus a
/// margin.
pub fn needed(cfg: &Config) -> u64 {
    let mut n = BASE + cfg.tun.effective_queues() as u64 * 2;
    if cfg.admin.listen.is_some() {
        n += cfg.admin.max_connections as u64;
    }
    if cfg.dns64.is_some() {
        n += (dns64::server::MAX_TCP_CONNECTIONS + dns64::server::MAX_INFLIGHT) as u64;
    }
    if let Some(t) = &cfg.trgw {
        n += trgw_needed(t);
    }
    // A tunnel function: its TUN queue, a raw or up to two UDP sockets, a netlink socket.
    n += 4 * cfg.tunnels.devices().len() as u64;
    if let Some(a) = &cfg.alg {
        // Two UDP and two TCP listeners, the TCP connections accepted and
        // opened, the ng client sockets, the DNS sockets (a few per family).
        n += 6 + (a.max_connections + a.max_outbound_connections + 2 * alg::dns::SOCKETS_PER_FAMILY) as u64;
    }
    // A softwire function: its TUN queue, a netlink socket, the lease server's socket.
    n += 3 * cfg.softwires.functions().len() as u64;
    if let Some(t) = &cfg.trt {
        // Two sockets and two pipes (four descriptors) per relayed
        // connection, the loop's pool of empty pipes, two sockets per UDP
        // flow, the listeners.
        n += 6 * t.max_connections as u64 + 2 * trt::tcp::POOL as u64 + 2 * t.max_udp_flows as u64 + 4;
    }
    n
}

/// What the `[trgw]` relay alone may need (`v6gate trgw`): a socket per
/// media port per address in per-port mode; in the shared-socket mode
/// four sockets per worker and the sk_lookup program's few BPF objects.
pub fn trgw_needed(t: &trgw::Config) -> u64 {
    let workers = t.worker_count() as u64;
    let media = match t.sockets {
        trgw::SocketMode::PerPort => {
            let ports = u64::from(t.port_max.saturating_sub(t.port_min)) + 1;
            let addrs: u64 =
                t.interfaces.iter().map(|i| u64::from(i.ipv4.is_some()) + u64::from(i.ipv6.is_some())).sum();
            ports * addrs
        }
        trgw::SocketMode::Shared => 4 * workers + 8,
    };
    BASE + media + t.control_connections as u64 + 2 * workers
}

/// What [`raise`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    /// The limits before.
    pub before: NoFile,
    /// The soft limit now.
    pub soft: u64,
    /// What the configuration needs.
    pub needed: u64,
}

impl Raised {
    /// A warning when the limit in force is below what is needed.
    pub fn warning(&self) -> Option<String> {
        (self.soft < self.needed).then(|| {
            format!(
                "open-file limit {} (hard limit {}) is below the {} descriptors this configuration may need \
                 (TrGW media ports, connection caps): raise it (systemd LimitNOFILE=, ulimit -n), narrow \
                 [trgw] port-min/port-max or set [trgw] sockets = \"shared\"; allocations beyond it fail with \"too many open files\"",
                self.soft, self.before.hard, self.needed
            )
        })
    }
}

/// Lifts the soft limit to `needed` (at most the hard limit; never lowers it).
pub fn raise(needed: u64) -> Result<Raised, String> {
    let before = nofile().ok_or("cannot read RLIMIT_NOFILE")?;
    let want = needed.min(before.hard);
    let mut soft = before.soft;
    if want > before.soft {
        setrlimit(Resource::RLIMIT_NOFILE, want, before.hard)
            .map_err(|e| format!("cannot raise the open-file limit to {want}: {e}"))?;
        soft = want;
    }
    Ok(Raised { before, soft, needed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trgw_ports_and_caps_are_counted() {
        let c = Config::parse(
            "[trgw]\nport-min = 30000\nport-max = 30999\nworkers = 2\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\nipv6 = \"2001:db8::1\"\n",
        )
        .unwrap();
        let t = c.trgw.as_ref().unwrap();
        assert_eq!(trgw_needed(t), BASE + 2000 + 64 + 4);
        assert!(needed(&c) >= trgw_needed(t) + 64, "plus the admin connections");
        let shared = trgw::Config { sockets: trgw::SocketMode::Shared, ..t.clone() };
        assert_eq!(trgw_needed(&shared), BASE + (4 * 2 + 8) + 64 + 4, "no descriptor per port");
    }

    #[test]
    fn raise_never_lowers_and_stays_under_the_hard_limit() {
        let now = nofile().unwrap();
        let r = raise(1).unwrap();
        assert_eq!(r.soft, now.soft, "not lowered");
        assert!(r.warning().is_none());
        let r = raise(u64::MAX).unwrap();
        assert_eq!(r.soft, now.hard.max(now.soft));
        assert!(r.warning().is_some());
        assert!(open_fds().unwrap() > 2);
    }
}
