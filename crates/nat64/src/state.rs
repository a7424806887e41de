//! RFC 6146 §3.1 / §3.2: the state tables — the Binding Information Base
//! (BIB), the session table, NAT-PT host addresses, the IPv4-side index —
//! and the operations every direction shares on them (RFC 6146 §3.5:
//! creating and refreshing sessions, dropping sessions and their BIB
//! entries, finding the IPv6 owner of a pool4 transport address).

use crate::config::{Mode, Protocol};
use crate::tcp::{self, Lifetime, Side, TcpState};
use crate::tuple::Flow;
use crate::wheel::Wheel;
use crate::{Map, Nat64, TO_EST, TO_ICMP, TO_TRANS, TO_UDP};
use core::net::{Ipv4Addr, Ipv6Addr};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use xlat::DropReason;

/// An IPv6 transport address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct T6 {
    pub(crate) addr: Ipv6Addr,
    pub(crate) port: u16,
}

/// An IPv4 transport address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct T4 {
    pub(crate) addr: Ipv4Addr,
    pub(crate) port: u16,
}

/// Session key: protocol, the IPv6 host's transport address (X, x) and the
/// IPv4 peer's (Y, y). For ICMP the peer's "port" is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SessKey {
    pub(crate) p: Protocol,
    pub(crate) x: T6,
    pub(crate) y: T4,
}

/// Where a BIB entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BibOrigin {
    /// Made by traffic; goes with its last session.
    Dynamic,
    /// `[[nat64.bib]]` in the configuration.
    Config,
    /// Added at run time ([`Nat64::bib_add`], `v6gate ctl bib add`); kept
    /// across reloads ([`Nat64::reconfigure`]) while the configuration
    /// can hold it.
    Added,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bib {
    pub(crate) t: T4,
    pub(crate) sessions: u32,
    pub(crate) origin: BibOrigin,
}

impl Bib {
    /// Static: stays without sessions.
    pub(crate) fn is_static(&self) -> bool {
        self.origin != BibOrigin::Dynamic
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    pub(crate) t: T4,
    pub(crate) state: Option<TcpState>,
    pub(crate) expires: u64,
    pub(crate) created: u64,
}

/// NAT-PT: the address an IPv6 host holds and how many BIB entries use it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Host {
    pub(crate) addr: Ipv4Addr,
    pub(crate) bibs: u32,
    pub(crate) pinned: bool,
}

/// IPv4-side index key. NAT-PT mode indexes whole addresses (`p = None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct V4Key {
    pub(crate) p: Option<Protocol>,
    pub(crate) t: T4,
}

#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) bib: Map<(Protocol, T6), Bib>,
    pub(crate) sessions: Map<SessKey, Session>,
    /// Sessions per (BIB entry, peer address): address-dependent filtering.
    pub(crate) peers: Map<(Protocol, T6, Ipv4Addr), u32>,
    pub(crate) hosts: Map<Ipv6Addr, Host>,
    pub(crate) wheel: Wheel<SessKey>,
}

/// An unsolicited IPv4 SYN held for `tcp-incoming-syn-timeout`.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) t: T4,
    pub(crate) y: T4,
    pub(crate) deadline: u64,
    /// The IPv4 SYN.
    pub(crate) pkt: Vec<u8>,
    /// A hairpinned SYN (RFC 6146 §3.8): the IPv6 SYN it came from, which
    /// the error at expiry is about.
    pub(crate) orig6: Option<Vec<u8>>,
}

/// Refusal of a new flow.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal {
    pub(crate) reason: DropReason,
    /// ICMP (type, code) to send back, in the packet's family.
    pub(crate) icmp: Option<(u8, u8)>,
}

pub(crate) const fn refuse(reason: DropReason, icmp: Option<(u8, u8)>) -> Refusal {
    Refusal { reason, icmp }
}

#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) in6: AtomicU64,
    pub(crate) in4: AtomicU64,
    pub(crate) emitted: AtomicU64,
    pub(crate) hairpinned: AtomicU64,
    pub(crate) created: [AtomicU64; 3],
    pub(crate) expired: [AtomicU64; 3],
    pub(crate) drops: Box<[AtomicU64]>,
    pub(crate) refused: Box<[AtomicU64]>,
    pub(crate) held_expired: AtomicU64,
    pub(crate) frag_expired: AtomicU64,
    pub(crate) reassembled: AtomicU64,
}

pub(crate) fn reason_idx(r: DropReason) -> usize {
    DropReason::ALL.iter().position(|x| *x == r).unwrap_or(0)
}

pub(crate) use function::lock;

impl Nat64 {
    #[inline]
    pub(crate) fn shard_of6(&self, a: &Ipv6Addr) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        (self.keys.hash_one(a) % self.shards.len() as u64) as usize
    }

    #[inline]
    pub(crate) fn shard_of4(&self, k: &V4Key) -> usize {
        if self.v4idx.len() == 1 {
            return 0;
        }
        (self.keys.hash_one(k) % self.v4idx.len() as u64) as usize
    }

    pub(crate) fn v4key(&self, p: Protocol, t: T4) -> V4Key {
        match self.cfg.mode {
            Mode::Nat64 => V4Key { p: Some(p), t },
            Mode::Natpt => V4Key { p: None, t: T4 { addr: t.addr, port: 0 } },
        }
    }

    pub(crate) fn idle_timeout(&self, p: Protocol) -> u64 {
        match p {
            Protocol::Udp => self.to[TO_UDP],
            Protocol::Icmp => self.to[TO_ICMP],
            Protocol::Tcp => self.to[TO_EST],
        }
    }

    pub(crate) fn count_drop(&self, r: DropReason) {
        self.c.drops[reason_idx(r)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_refused(&self, r: DropReason) {
        self.c.refused[reason_idx(r)].fetch_add(1, Ordering::Relaxed);
    }

    /// A packet of session `s` from `side`: the TCP state machine and the
    /// lifetime. Returns the new deadline when it is sooner than the old
    /// one (a FIN or RST moving a long-lived session to a transitory
    /// lifetime): the caller schedules it on the wheel, whose entry for the
    /// session may sit at the old, later deadline (lazy expiry only ever
    /// moves entries later).
    pub(crate) fn touch(&self, s: &mut Session, side: Side, flow: Flow, now: u64) -> Option<u64> {
        let before = s.expires;
        match s.state {
            Some(st) => {
                let (next, life) = tcp::step(st, side, flow.flags, self.cfg.handle_rst_during_fin_rcv);
                s.state = Some(next);
                match life {
                    Lifetime::Keep => {}
                    Lifetime::Est => s.expires = now.saturating_add(self.to[TO_EST]),
                    Lifetime::Trans => s.expires = now.saturating_add(self.to[TO_TRANS]),
                }
            }
            None => s.expires = now.saturating_add(self.idle_timeout(flow.p)),
        }
        (s.expires < before).then_some(s.expires)
    }

    pub(crate) fn insert_session(
        &self,
        sh: &mut Shard,
        key: SessKey,
        t: T4,
        state: Option<TcpState>,
        now: u64,
        expires: u64,
    ) -> Session {
        let sess = Session { t, state, expires, created: now };
        sh.sessions.insert(key, sess);
        sh.wheel.insert(expires, key);
        if let Some(b) = sh.bib.get_mut(&(key.p, key.x)) {
            b.sessions += 1;
        }
        *sh.peers.entry((key.p, key.x, key.y.addr)).or_insert(0) += 1;
        self.sess_by[key.p.idx()].fetch_add(1, Ordering::Relaxed);
        self.c.created[key.p.idx()].fetch_add(1, Ordering::Relaxed);
        sess
    }

    /// The BIB entry of `(p, x)`, created if missing (the caller holds the
    /// owner shard). Dynamic entries get `keep` when it is given and free,
    /// else a port by RFC 6056 algorithm 3 (NAT64), or the host's whole
    /// address (NAT-PT).
    pub(crate) fn bib_get_or_create(
        &self,
        sh: &mut Shard,
        p: Protocol,
        x: T6,
        y: Ipv4Addr,
        keep: Option<T4>,
    ) -> Result<T4, DropReason> {
        if let Some(b) = sh.bib.get(&(p, x)) {
            return Ok(b.t);
        }
        if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return Err(DropReason::BibFull);
        }
        // NAT-PT callers give no `keep` (ports are kept on the host's address).
        let kept = keep.filter(|k| self.cfg.mode == Mode::Nat64 && self.pool.claim(p, k.addr, k.port));
        let found = kept.map(|k| (k.addr, k.port));
        // A TCP port from the host's blocks when a fast path shares them.
        let block = || (p == Protocol::Tcp).then(|| self.block_alloc(&x, y)).flatten().map(|t| (t.addr, t.port));
        let t = match self.cfg.mode {
            Mode::Nat64 => {
                match found.or_else(block).or_else(|| self.pool.alloc(p, &x.addr, x.port, y, self.cfg.max_port_probes))
                {
                    Some((a, port)) => {
                        let t = T4 { addr: a, port };
                        let k = self.v4key(p, t);
                        lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
                        t
                    }
                    None => {
                        self.n_bib.fetch_sub(1, Ordering::AcqRel);
                        return Err(DropReason::Pool4Exhausted);
                    }
                }
            }
            Mode::Natpt => {
                let addr = match sh.hosts.get_mut(&x.addr) {
                    Some(h) => {
                        h.bibs += 1;
                        h.addr
                    }
                    None => {
                        let Some(a) = self.pool.claim_addr(&x.addr) else {
                            self.n_bib.fetch_sub(1, Ordering::AcqRel);
                            return Err(DropReason::Pool4Exhausted);
                        };
                        self.host_bind(sh, x.addr, Host { addr: a, bibs: 1, pinned: false });
                        a
                    }
                };
                T4 { addr, port: x.port }
            }
        };
        self.bib_put(sh, p, x, t, BibOrigin::Dynamic);
        Ok(t)
    }

    /// Enter BIB entry (p, x) → t in the owner shard `sh` (the caller has
    /// claimed t and, in NAT64 mode, indexed it); a fast path that creates
    /// NAT64 TCP sessions is told (endpoint-independent mapping: it must
    /// not make a second mapping of x).
    pub(crate) fn bib_put(&self, sh: &mut Shard, p: Protocol, x: T6, t: T4, origin: BibOrigin) {
        self.bib_enter(sh, p, x, t, origin);
        self.fast_bib(p, x, Some(t));
    }

    /// [`Nat64::bib_put`] without telling the fast path (it made the entry).
    pub(crate) fn bib_enter(&self, sh: &mut Shard, p: Protocol, x: T6, t: T4, origin: BibOrigin) {
        sh.bib.insert((p, x), Bib { t, sessions: 0, origin });
        self.bib_by[p.idx()].fetch_add(1, Ordering::Relaxed);
    }

    /// NAT-PT: host `x` holds `h.addr` (claimed from the pool by the
    /// caller): the host table, the IPv4 side's index of whole addresses
    /// and the fast path's host bindings.
    pub(crate) fn host_bind(&self, sh: &mut Shard, x: Ipv6Addr, h: Host) {
        let a = h.addr;
        sh.hosts.insert(x, h);
        let k = self.v4key(Protocol::Tcp, T4 { addr: a, port: 0 });
        lock(&self.v4idx[self.shard_of4(&k)]).insert(k, T6 { addr: x, port: 0 });
        self.fast_host(x, Some(a));
    }

    /// NAT-PT: host `x` gives its address back to the pool (the reverse
    /// of [`Nat64::host_bind`]).
    pub(crate) fn host_unbind(&self, sh: &mut Shard, x: Ipv6Addr) {
        let Some(h) = sh.hosts.remove(&x) else { return };
        let k = self.v4key(Protocol::Tcp, T4 { addr: h.addr, port: 0 });
        lock(&self.v4idx[self.shard_of4(&k)]).remove(&k);
        self.pool.release_addr(h.addr);
        self.fast_host(x, None);
    }

    /// Remove a BIB entry and give back what it held (caller holds the shard).
    pub(crate) fn bib_drop(&self, sh: &mut Shard, p: Protocol, x: T6) {
        let Some(b) = sh.bib.remove(&(p, x)) else { return };
        self.n_bib.fetch_sub(1, Ordering::AcqRel);
        self.bib_by[p.idx()].fetch_sub(1, Ordering::Relaxed);
        match self.cfg.mode {
            Mode::Nat64 => {
                let k = self.v4key(p, b.t);
                let mut idx = lock(&self.v4idx[self.shard_of4(&k)]);
                if idx.get(&k) == Some(&x) {
                    idx.remove(&k);
                }
                drop(idx);
                self.fast_bib(p, x, None);
                if !(p == Protocol::Tcp && self.block_release(b.t)) {
                    self.pool.release(p, b.t.addr, b.t.port);
                }
            }
            Mode::Natpt => {
                let Some(h) = sh.hosts.get_mut(&x.addr) else { return };
                h.bibs = h.bibs.saturating_sub(1);
                if h.bibs == 0 && !h.pinned {
                    self.host_unbind(sh, x.addr);
                }
            }
        }
    }

    /// Remove a session (caller holds the shard); drops its BIB entry when
    /// it was the last session of a dynamic entry.
    pub(crate) fn session_drop(&self, sh: &mut Shard, key: &SessKey) -> bool {
        if sh.sessions.remove(key).is_none() {
            return false;
        }
        self.n_sess.fetch_sub(1, Ordering::AcqRel);
        self.sess_by[key.p.idx()].fetch_sub(1, Ordering::Relaxed);
        let pk = (key.p, key.x, key.y.addr);
        if let Some(n) = sh.peers.get_mut(&pk) {
            *n -= 1;
            if *n == 0 {
                sh.peers.remove(&pk);
            }
        }
        let mut gone = false;
        if let Some(b) = sh.bib.get_mut(&(key.p, key.x)) {
            b.sessions = b.sessions.saturating_sub(1);
            gone = b.sessions == 0 && !b.is_static();
        }
        if gone {
            self.bib_drop(sh, key.p, key.x);
        }
        true
    }

    /// The IPv6 owner of pool4 transport address `t`.
    pub(crate) fn owner_of(&self, p: Protocol, t: T4) -> Option<T6> {
        let k = self.v4key(p, t);
        let owner = *lock(&self.v4idx[self.shard_of4(&k)]).get(&k)?;
        Some(match self.cfg.mode {
            Mode::Nat64 => owner,
            Mode::Natpt => T6 { addr: owner.addr, port: t.port },
        })
    }
}
