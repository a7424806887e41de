//! The gateway's own addresses: the host's interface addresses (with the
//! directed broadcast address of each IPv4 subnet), read over route
//! netlink, and the configured ones; and the embeddings the policy looks
//! through. One per process, shared by every plane's [`crate::Policy`].

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use netsys::netlink::{Address, Netlink};
use xlat::addr::{IpPrefix, Prefix6};

use crate::embed::Embeddings;
use crate::ratelog::RateLog;

/// What the configuration says the gateway is.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Own addresses and networks besides the host's interface addresses:
    /// listen and advertised addresses (an advertised address may sit on a
    /// NAT in front of the host), NAT64 IPv4 pools.
    pub own: Vec<IpPrefix>,
    /// Translation prefixes, IVI and EAMT looked through.
    pub embeddings: Embeddings,
}

/// The host's addresses as last read.
#[derive(Debug, Default)]
struct State {
    /// Interface addresses, sorted.
    addrs: Vec<IpAddr>,
    /// Directed broadcast addresses of the IPv4 subnets, sorted.
    broadcasts: Vec<Ipv4Addr>,
    /// The last reading failed: fail closed.
    stale: bool,
}

/// The gateway's own addresses and embeddings (see the module docs).
#[derive(Debug)]
pub struct Gateway {
    spec: ArcSwap<Spec>,
    state: ArcSwap<State>,
    refreshes: AtomicU64,
    failures: AtomicU64,
    log: RateLog<()>,
}

/// The own-address list's state, for `/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnStatus {
    /// Addresses on the host's interfaces, as last read.
    pub host_addresses: usize,
    /// Directed broadcast addresses derived from them.
    pub broadcasts: usize,
    /// Configured own addresses and networks.
    pub configured: usize,
    /// The last reading failed: only allow-listed destinations pass.
    pub stale: bool,
    /// Successful readings since start.
    pub refreshes: u64,
    /// Failed readings since start.
    pub failures: u64,
    /// The translation and IVI prefixes looked through.
    pub prefixes: Vec<Prefix6>,
}

/// The broadcast address of `a`'s IPv4 subnet (none for /31 and /32).
fn directed_broadcast(a: &Address) -> impl Iterator<Item = Ipv4Addr> {
    let computed = match a.local.addr {
        IpAddr::V4(v4) if a.local.len <= 30 => {
            let host_bits = u32::MAX >> a.local.len;
            Some(Ipv4Addr::from(u32::from(v4) | host_bits))
        }
        _ => None,
    };
    let told = match a.broadcast {
        Some(IpAddr::V4(b)) if b != Ipv4Addr::BROADCAST && IpAddr::V4(b) != a.local.addr => Some(b),
        _ => None,
    };
    computed.into_iter().chain(told)
}

impl Gateway {
    /// A gateway of `spec` whose host addresses are not read (none known,
    /// not stale): tests and fuzzing; [`Gateway::of_host`] reads them.
    pub fn new(spec: Spec) -> Self {
        Gateway {
            spec: ArcSwap::from_pointee(spec),
            state: ArcSwap::from_pointee(State::default()),
            refreshes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            log: RateLog::new(1, std::time::Duration::from_secs(60)),
        }
    }

    /// A gateway of `spec` with the host's addresses read now (over route
    /// netlink; a failure leaves it failing closed). Keep it current with
    /// [`Gateway::watch`].
    pub fn of_host(spec: Spec) -> Arc<Self> {
        let g = Arc::new(Gateway::new(spec));
        g.apply(Netlink::open().and_then(|mut nl| nl.addresses()));
        g
    }

    /// Takes a reading of the host's addresses: the new list, or — when
    /// it could not be read — the old list kept and the gateway failing
    /// closed until a reading succeeds.
    pub fn apply(&self, reading: io::Result<Vec<Address>>) {
        match reading {
            Ok(list) => {
                let mut addrs: Vec<IpAddr> = list.iter().map(|a| a.local.addr).collect();
                addrs.sort_unstable();
                addrs.dedup();
                let mut broadcasts: Vec<Ipv4Addr> = list.iter().flat_map(directed_broadcast).collect();
                broadcasts.sort_unstable();
                broadcasts.dedup();
                let was_stale = self.state.load().stale;
                self.state.store(Arc::new(State { addrs, broadcasts, stale: false }));
                self.refreshes.fetch_add(1, Relaxed);
                if was_stale {
                    tracing::info!("the host's addresses are read again: destinations are judged normally");
                }
            }
            Err(e) => {
                let old = self.state.load();
                if !old.stale {
                    self.state.store(Arc::new(State {
                        addrs: old.addrs.clone(),
                        broadcasts: old.broadcasts.clone(),
                        stale: true,
                    }));
                }
                let n = self.failures.fetch_add(1, Relaxed) + 1;
                if let Some(suppressed) = self.log.admit((), Instant::now()) {
                    tracing::warn!(
                        error = %e,
                        failures = n,
                        suppressed,
                        "cannot read the host's addresses: until they can be read, every destination outside an allow list is refused (fail closed)"
                    );
                }
            }
        }
    }

    /// Whether `ip` is one of the gateway's addresses (an IPv4 address is
    /// given as such, not IPv4-mapped).
    pub fn is_own(&self, ip: IpAddr) -> bool {
        self.state.load().addrs.binary_search(&ip).is_ok() || self.spec.load().own.iter().any(|p| p.contains(ip))
    }

    /// Whether `a` is the directed broadcast address of a subnet on the
    /// host's interfaces.
    pub fn is_directed_broadcast(&self, a: Ipv4Addr) -> bool {
        self.state.load().broadcasts.binary_search(&a).is_ok()
    }

    /// The last reading of the host's addresses failed (fail closed).
    pub fn stale(&self) -> bool {
        self.state.load().stale
    }

    /// What the configuration says the gateway is (its configured own
    /// addresses, the embeddings looked through).
    pub fn spec(&self) -> Arc<Spec> {
        self.spec.load_full()
    }

    /// Takes a new configuration (a reload): the host's addresses stay.
    pub fn reconfigure(&self, spec: Spec) {
        self.spec.store(Arc::new(spec));
    }

    /// The state of the own-address list.
    pub fn status(&self) -> OwnStatus {
        let s = self.state.load();
        let spec = self.spec.load();
        OwnStatus {
            host_addresses: s.addrs.len(),
            broadcasts: s.broadcasts.len(),
            configured: spec.own.len(),
            stale: s.stale,
            refreshes: self.refreshes.load(Relaxed),
            failures: self.failures.load(Relaxed),
            prefixes: spec.embeddings.prefixes(),
        }
    }

    /// Keeps the host's addresses current: re-read when the kernel
    /// announces an address change, and every `backstop` in any case (and
    /// every quarter second while failing closed), until the [`crate::Watch`]
    /// is dropped.
    pub fn watch(self: &Arc<Self>, backstop: std::time::Duration) -> io::Result<crate::Watch> {
        crate::watch::Watch::start(self.clone(), backstop)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use netsys::IfAddr;

    /// An interface address `a/len` on link 2.
    pub(crate) fn addr(a: &str, len: u8) -> Address {
        Address { ifindex: 2, local: IfAddr { addr: a.parse().unwrap(), len }, broadcast: None }
    }

    #[test]
    fn host_addresses_and_directed_broadcasts() {
        let g = Gateway::new(Spec { own: vec!["203.0.113.0/28".parse().unwrap()], ..Spec::default() });
        let mut told = addr("198.18.0.1", 32);
        told.broadcast = Some("198.18.0.255".parse().unwrap());
        g.apply(Ok(vec![
            addr("192.0.2.1", 24),
            addr("10.1.2.3", 16),
            addr("192.0.2.9", 31),
            addr("2001:db8::1", 64),
            told,
        ]));
        for a in ["192.0.2.1", "10.1.2.3", "2001:db8::1", "203.0.113.5"] {
            assert!(g.is_own(a.parse().unwrap()), "{a}");
        }
        assert!(!g.is_own("192.0.2.2".parse().unwrap()));
        // A reload's configuration replaces the configured addresses only.
        g.reconfigure(Spec { own: vec!["203.0.113.64/28".parse().unwrap()], ..Spec::default() });
        assert!(!g.is_own("203.0.113.5".parse().unwrap()) && g.is_own("203.0.113.65".parse().unwrap()));
        assert!(g.is_own("192.0.2.1".parse().unwrap()));
        g.reconfigure(Spec { own: vec!["203.0.113.0/28".parse().unwrap()], ..Spec::default() });
        for a in ["192.0.2.255", "10.1.255.255", "198.18.0.255"] {
            assert!(g.is_directed_broadcast(a.parse().unwrap()), "{a}");
        }
        // A /31 has no broadcast address (RFC 3021); nor has a /32.
        assert!(!g.is_directed_broadcast("192.0.2.9".parse().unwrap()));
        let st = g.status();
        assert_eq!((st.host_addresses, st.broadcasts, st.configured, st.stale, st.refreshes), (5, 3, 1, false, 1));
        assert_eq!(st.prefixes, ["64:ff9b::/96".parse::<Prefix6>().unwrap()]);
    }

    #[test]
    fn a_failed_reading_keeps_the_old_list_and_fails_closed_until_one_succeeds() {
        let g = Gateway::new(Spec::default());
        g.apply(Ok(vec![addr("192.0.2.1", 24)]));
        g.apply(Err(io::Error::from_raw_os_error(libc_emfile())));
        assert!(g.stale());
        assert!(g.is_own("192.0.2.1".parse().unwrap()), "the last list still counts");
        g.apply(Err(io::Error::from_raw_os_error(libc_emfile())));
        assert_eq!((g.status().failures, g.status().refreshes), (2, 1));
        g.apply(Ok(vec![addr("192.0.2.7", 24)]));
        assert!(!g.stale());
        assert!(!g.is_own("192.0.2.1".parse().unwrap()) && g.is_own("192.0.2.7".parse().unwrap()));
    }

    /// EMFILE without a libc dependency.
    fn libc_emfile() -> i32 {
        24
    }
}
