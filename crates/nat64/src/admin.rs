//! The operator's view and hand on the tables: counters, session and BIB
//! listings (`v6gate ctl nat64 ...`, `/metrics`) and static BIB entries
//! (RFC 6146 §3.5.1 / §3.5.2: manually configured BIB entries let IPv4
//! hosts open sessions to IPv6 servers).

use crate::config::{Mode, Protocol, StaticBib};
use crate::state::{lock, BibOrigin, Host, SessKey, Session, T4, T6};
use crate::tcp::TcpState;
use crate::{Error, Nat64};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use xlat::DropReason;

/// Counters and table sizes (`v6gate ctl nat64 stats`, `/metrics`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct Stats {
    /// Packets in from the IPv6 side.
    pub packets_6to4: u64,
    /// Packets in from the IPv4 side.
    pub packets_4to6: u64,
    /// Inputs that produced output (translated or an ICMP error).
    pub emitted: u64,
    /// Packets hairpinned (RFC 6146 §3.8).
    pub hairpinned: u64,
    /// Drops by reason (`DropReason::as_str`), including refused new flows.
    pub drops: BTreeMap<&'static str, u64>,
    /// New flows refused, by reason (a subset of the drops; an ICMP error
    /// may have been sent).
    pub refused: BTreeMap<&'static str, u64>,
    /// Sessions now, per protocol.
    pub sessions: BTreeMap<&'static str, u64>,
    /// BIB entries now, per protocol.
    pub bib: BTreeMap<&'static str, u64>,
    /// Sessions created since start, per protocol.
    pub sessions_created: BTreeMap<&'static str, u64>,
    /// Sessions expired since start, per protocol.
    pub sessions_expired: BTreeMap<&'static str, u64>,
    /// pool4 ports (or identifiers) per protocol: total.
    pub pool4_ports: BTreeMap<&'static str, u64>,
    /// pool4 ports per protocol: in use.
    pub pool4_ports_used: BTreeMap<&'static str, u64>,
    /// pool4 addresses.
    pub pool4_addresses: u64,
    /// NAT-PT: addresses held by IPv6 hosts.
    pub natpt_hosts: u64,
    /// Unsolicited IPv4 SYNs held now.
    pub held_syns: u64,
    /// Held SYNs answered with ICMP Port Unreachable after their timeout.
    pub held_syns_expired: u64,
    /// Datagrams in reassembly now.
    pub fragment_sets: u64,
    /// Datagrams reassembled.
    pub reassembled: u64,
    /// Reassemblies given up after `fragment-timeout`.
    pub fragment_sets_expired: u64,
    /// NAT64 with a fast path: the per-host TCP port blocks.
    pub port_blocks: crate::BlockStats,
}

/// One session, for `v6gate ctl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SessionInfo {
    /// Protocol.
    pub protocol: Protocol,
    /// IPv6 host (X, x).
    pub ipv6_src: SocketAddrV6,
    /// IPv4 peer as the IPv6 host sees it (Y', y).
    pub ipv6_dst: SocketAddrV6,
    /// The host's pool4 transport address (T, t).
    pub ipv4_src: SocketAddrV4,
    /// The IPv4 peer (Y, y).
    pub ipv4_dst: SocketAddrV4,
    /// TCP state (`None` for UDP and ICMP).
    pub state: Option<TcpState>,
    /// Milliseconds until it expires (0 if overdue).
    pub expires_in_ms: u64,
    /// Age in milliseconds.
    pub age_ms: u64,
}

/// One BIB entry, for `v6gate ctl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BibInfo {
    /// Protocol.
    pub protocol: Protocol,
    /// IPv6 transport address.
    pub ipv6: SocketAddrV6,
    /// IPv4 transport address.
    pub ipv4: SocketAddrV4,
    /// Configured or added with [`Nat64::bib_add`].
    pub is_static: bool,
    /// Where it comes from: `dynamic`, `config` or `added` (at run time).
    pub origin: BibOrigin,
    /// Sessions using it.
    pub sessions: u32,
}

/// Which sessions [`Nat64::sessions`] lists. Empty filter: all.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this protocol.
    pub protocol: Option<Protocol>,
    /// Only this IPv6 host.
    pub ipv6: Option<Ipv6Addr>,
    /// Only this IPv4 address (pool4 side or peer).
    pub ipv4: Option<Ipv4Addr>,
    /// At most this many (0: no limit).
    pub limit: usize,
}

impl Nat64 {
    /// Counters and table sizes.
    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            packets_6to4: self.c.in6.load(Ordering::Relaxed),
            packets_4to6: self.c.in4.load(Ordering::Relaxed),
            emitted: self.c.emitted.load(Ordering::Relaxed),
            hairpinned: self.c.hairpinned.load(Ordering::Relaxed),
            held_syns: self.held_n.load(Ordering::Relaxed) as u64,
            held_syns_expired: self.c.held_expired.load(Ordering::Relaxed),
            fragment_sets: self.reasm.sets() as u64,
            reassembled: self.c.reassembled.load(Ordering::Relaxed),
            fragment_sets_expired: self.c.frag_expired.load(Ordering::Relaxed),
            port_blocks: self.port_blocks(),
            ..Stats::default()
        };
        for (i, r) in DropReason::ALL.iter().enumerate() {
            let d = self.c.drops[i].load(Ordering::Relaxed);
            if d > 0 {
                s.drops.insert(r.as_str(), d);
            }
            let f = self.c.refused[i].load(Ordering::Relaxed);
            if f > 0 {
                s.refused.insert(r.as_str(), f);
            }
        }
        for p in Protocol::ALL {
            let n = p.as_str();
            s.sessions.insert(n, self.sess_by[p.idx()].load(Ordering::Relaxed) as u64);
            s.bib.insert(n, self.bib_by[p.idx()].load(Ordering::Relaxed) as u64);
            s.sessions_created.insert(n, self.c.created[p.idx()].load(Ordering::Relaxed));
            s.sessions_expired.insert(n, self.c.expired[p.idx()].load(Ordering::Relaxed));
            let (total, used) = self.pool.usage(p);
            s.pool4_ports.insert(n, total);
            s.pool4_ports_used.insert(n, used);
        }
        let (addrs, owned) = self.pool.addresses();
        s.pool4_addresses = addrs as u64;
        s.natpt_hosts = owned as u64;
        s
    }

    /// How [`Nat64::sessions`] lists session `k` at `now`.
    pub(crate) fn session_info(&self, k: &SessKey, sess: &Session, now: u64) -> SessionInfo {
        let yport = if k.p == Protocol::Icmp { sess.t.port } else { k.y.port };
        let y6 = self.p6.embed(k.y.addr).unwrap_or(Ipv6Addr::UNSPECIFIED);
        let xport = k.x.port;
        SessionInfo {
            protocol: k.p,
            ipv6_src: SocketAddrV6::new(k.x.addr, xport, 0, 0),
            ipv6_dst: SocketAddrV6::new(y6, if k.p == Protocol::Icmp { xport } else { k.y.port }, 0, 0),
            ipv4_src: SocketAddrV4::new(sess.t.addr, sess.t.port),
            ipv4_dst: SocketAddrV4::new(k.y.addr, yport),
            state: sess.state,
            expires_in_ms: sess.expires.saturating_sub(now) / 1_000_000,
            age_ms: now.saturating_sub(sess.created) / 1_000_000,
        }
    }

    /// Sessions matching `filter`, at time `now` (for the expiry column).
    pub fn sessions(&self, filter: &SessionFilter, now: u64) -> Vec<SessionInfo> {
        let mut v = Vec::new();
        for s in self.shards.iter() {
            let sh = lock(s);
            for (k, sess) in &sh.sessions {
                if filter.protocol.is_some_and(|p| p != k.p)
                    || filter.ipv6.is_some_and(|a| a != k.x.addr)
                    || filter.ipv4.is_some_and(|a| a != k.y.addr && a != sess.t.addr)
                {
                    continue;
                }
                v.push(self.session_info(k, sess, now));
                if filter.limit != 0 && v.len() >= filter.limit {
                    return v;
                }
            }
        }
        v.sort_by_key(|a| (a.protocol, a.ipv6_src, a.ipv4_dst));
        v
    }

    /// Every BIB entry.
    pub fn bib(&self) -> Vec<BibInfo> {
        let mut v = Vec::new();
        for s in self.shards.iter() {
            let sh = lock(s);
            for ((p, x), b) in &sh.bib {
                v.push(BibInfo {
                    protocol: *p,
                    ipv6: SocketAddrV6::new(x.addr, x.port, 0, 0),
                    ipv4: SocketAddrV4::new(b.t.addr, b.t.port),
                    is_static: b.is_static(),
                    origin: b.origin,
                    sessions: b.sessions,
                });
            }
        }
        v.sort_by_key(|a| (a.protocol, a.ipv4));
        v
    }

    /// Add a static BIB entry (IPv4 hosts can then open sessions to the
    /// IPv6 server). Refused when its IPv4 side is outside pool4, in use,
    /// or the IPv6 side already has an entry. It stays across reloads
    /// ([`Nat64::reconfigure`]) while the configuration can hold it.
    pub fn bib_add(&self, e: StaticBib) -> Result<(), Error> {
        self.bib_insert_static(e, BibOrigin::Added)
    }

    /// The static entries added with [`Nat64::bib_add`] that are in the
    /// table now (not those of the configuration), sorted.
    pub fn added_bib(&self) -> Vec<StaticBib> {
        let mut v = Vec::new();
        for s in self.shards.iter() {
            let sh = lock(s);
            for ((p, x), b) in &sh.bib {
                if b.origin == BibOrigin::Added {
                    v.push(StaticBib {
                        protocol: *p,
                        ipv6: SocketAddrV6::new(x.addr, x.port, 0, 0),
                        ipv4: SocketAddrV4::new(b.t.addr, b.t.port),
                    });
                }
            }
        }
        v.sort_by_key(|e| (e.protocol, e.ipv4, e.ipv6));
        v
    }

    /// Insert a static entry of `origin` (a configured entry wins over an
    /// added one, which wins over a dynamic one for the same mapping).
    pub(crate) fn bib_insert_static(&self, e: StaticBib, origin: BibOrigin) -> Result<(), Error> {
        self.cfg.check_static(&e).map_err(Error::Bib)?;
        let x = T6 { addr: *e.ipv6.ip(), port: e.ipv6.port() };
        let t = T4 { addr: *e.ipv4.ip(), port: e.ipv4.port() };
        let p = e.protocol;
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if let Some(b) = sh.bib.get_mut(&(p, x)) {
            if b.t == t {
                if b.origin != BibOrigin::Config {
                    b.origin = origin;
                }
                return Ok(());
            }
            return Err(Error::Bib(format!("{p} {} already maps to {}:{}", e.ipv6, b.t.addr, b.t.port)));
        }
        if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Bib("max-bib reached".into()));
        }
        let fail = |m: String| {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            Err(Error::Bib(m))
        };
        match self.cfg.mode {
            Mode::Nat64 => {
                if !self.pool.claim(p, t.addr, t.port) {
                    return fail(format!("{p} {} is in use", e.ipv4));
                }
                let k = self.v4key(p, t);
                lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
            }
            Mode::Natpt => match sh.hosts.get_mut(&x.addr) {
                Some(h) if h.addr == t.addr => {
                    h.bibs += 1;
                    h.pinned = true;
                }
                Some(h) => return fail(format!("{} holds {} already", x.addr, h.addr)),
                None => {
                    if !self.pool.claim_this_addr(t.addr) {
                        return fail(format!("{} is held by another host", t.addr));
                    }
                    self.host_bind(&mut sh, x.addr, Host { addr: t.addr, bibs: 1, pinned: true });
                }
            },
        }
        self.bib_put(&mut sh, p, x, t, origin);
        Ok(())
    }

    /// Remove a static BIB entry and its sessions.
    pub fn bib_remove(&self, e: StaticBib) -> Result<(), Error> {
        let x = T6 { addr: *e.ipv6.ip(), port: e.ipv6.port() };
        let t = T4 { addr: *e.ipv4.ip(), port: e.ipv4.port() };
        let p = e.protocol;
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        match sh.bib.get_mut(&(p, x)) {
            Some(b) if b.t == t && b.is_static() => b.origin = BibOrigin::Dynamic,
            _ => return Err(Error::Bib(format!("no static {p} entry {} ↔ {}", e.ipv6, e.ipv4))),
        }
        if self.cfg.mode == Mode::Natpt {
            if let Some(h) = sh.hosts.get_mut(&x.addr) {
                h.pinned = false;
            }
        }
        let keys: Vec<SessKey> = sh.sessions.keys().filter(|k| k.p == p && k.x == x).copied().collect();
        for k in &keys {
            self.session_drop(&mut sh, k);
        }
        if sh.bib.contains_key(&(p, x)) {
            self.bib_drop(&mut sh, p, x);
        }
        Ok(())
    }
}
