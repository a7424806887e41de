//! For a fast path that translates sessions outside this crate (the XDP
//! programs of `crates/xdp`). This crate's tables stay the truth: sessions
//! are created, moved through the TCP state machine and expired here. A
//! fast path
//!
//! - is told at once ([`FastHook::mirror`], called while the packet that
//!   created the session is handled, before it is emitted) of every
//!   session it may carry from its first packet: UDP and ICMP echo in
//!   full, TCP created by the IPv6 host's SYN *half-open* (V6 INIT: the
//!   fast path may carry only the IPv4 side's SYN+ACK, and records that it
//!   did); and again when a half-open session reached ESTABLISHED here
//!   (then in full);
//! - is asked ([`FastHook::syn_ack`]) whenever this crate next handles a
//!   half-open session (a packet the fast path passed, the expiry timer,
//!   [`Nat64::refresh`]) whether it carried that SYN+ACK: if so the
//!   session steps V6 INIT → ESTABLISHED with the established lifetime
//!   from when the fast path forwarded it, exactly as if the SYN+ACK had
//!   come here, before the packet is handled;
//! - has its use applied with [`Nat64::refresh`], so that a session
//!   carried only by the fast path does not expire here;
//! - NAT-PT: is told which address each host holds ([`FastHook::host`])
//!   and whether IPv4 SYNs are held ([`FastHook::held`]), may create a
//!   host's TCP session from its SYN itself (half-open, the translation
//!   determined by the binding), and hands each such session over
//!   ([`FastHook::created`]) before this crate handles any packet or
//!   expires sessions: it is entered as that SYN would have entered it
//!   ([`Nat64::adopt`]);
//! - NAT64 (NAPT): shares the memory of per-host TCP port blocks
//!   ([`FastHook::port_blocks`], see [`crate::PortBlockMem`]), is told of
//!   every TCP BIB entry ([`FastHook::bib`]: one mapping per host port),
//!   may create a host's TCP session from its SYN with a port of its
//!   blocks, and hands it over the same way.

use crate::blocks::PortBlockMem;
use crate::config::{Mode, Protocol};
use crate::state::{lock, Host, SessKey, Session, T4, T6};
use crate::tcp::{self, Lifetime, Side, TcpState};
use crate::{Nat64, SessionInfo, TO_EST, TO_TRANS};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use xlat::DropReason;

/// A session a fast path created from the IPv6 host's TCP SYN (X:x →
/// Y:y, translated T:t → Y:y; NAT-PT: t = x, T the host's address; NAT64:
/// T:t a port of one of the host's blocks), handed over by
/// [`FastHook::created`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Created {
    /// Transport (TCP).
    pub protocol: Protocol,
    /// The IPv6 host's transport address (X, x).
    pub x: SocketAddrV6,
    /// The IPv4 peer (Y, y).
    pub y: SocketAddrV4,
    /// The pool4 address: NAT-PT, the one the fast path found the host
    /// holding; NAT64, its block's.
    pub t: Ipv4Addr,
    /// The pool4 port (NAT-PT: x).
    pub port: u16,
    /// Not a creation: the fast path carried a FIN (no SYN or RST) of the
    /// session, which it carries in full, from this side at `at`
    /// ([`Nat64::adopt`] steps the TCP state machine as that FIN would).
    pub fin: Option<crate::tcp::Side>,
    /// When (this translator's clock).
    pub at: u64,
}

/// A fast path told of sessions as they are created ([`Nat64::set_fast_hook`]).
/// Both methods are called from the packet path (some while a table shard
/// is locked): they must not call back into the [`Nat64`].
pub trait FastHook: Send + Sync + std::fmt::Debug {
    /// Carry session `s` from now on: half-open (only the IPv4 side's
    /// SYN+ACK of a TCP session in V6 INIT, recorded) or in full (UDP,
    /// ICMP echo; TCP once ESTABLISHED). Replaces what the fast path held
    /// for `s`.
    fn mirror(&self, s: &SessionInfo, half_open: bool);
    /// Whether the fast path carried the IPv4 side's SYN+ACK of half-open
    /// session `s`: `Some(when)` (this translator's clock), else `None`.
    fn syn_ack(&self, s: &SessionInfo) -> Option<u64>;
    /// NAT-PT: host `x` holds pool4 address `t` from now on (Some) or gave
    /// it back (None). Called with the host's shard locked.
    fn host(&self, _x: Ipv6Addr, _t: Option<Ipv4Addr>) {}
    /// NAT-PT: IPv4 SYNs are held (true) or none is (false) from now on
    /// (a new TCP session may have to discard one: the fast path leaves
    /// those to this crate). Called with the held-SYN store locked.
    fn held(&self, _present: bool) {}
    /// Hand each session the fast path created since the last call to
    /// `adopt` ([`Nat64::adopt`]); when it returns false the fast path
    /// removes its entries (the flow starts again here). Called before any
    /// packet is handled and before sessions expire, with nothing locked.
    fn created(&self, _adopt: &mut dyn FnMut(&Created) -> bool) {}
    /// NAT64 (NAPT): the memory of the per-host TCP port blocks shared
    /// with the fast path (crate::blocks), None: no blocks. Asked once,
    /// when the translator first needs it.
    fn port_blocks(&self) -> Option<Arc<dyn PortBlockMem>> {
        None
    }
    /// NAT64 (NAPT): the TCP BIB entry of `x` is `t` from now on (Some)
    /// or gone (None): a fast path that creates sessions uses no other
    /// mapping of `x` (RFC 6146 §3.5.2.1 endpoint-independent mapping).
    /// Called with x's shard locked.
    fn bib(&self, _x: SocketAddrV6, _t: Option<SocketAddrV4>) {}
}

impl Nat64 {
    /// Tell `hook` of sessions from now on (None: no fast path). Sessions
    /// that exist already are not listed: the caller mirrors those from
    /// [`Nat64::sessions`].
    pub fn set_fast_hook(&self, hook: Option<Arc<dyn FastHook>>) {
        *self.fast.write().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// The hook in force.
    pub fn fast_hook(&self) -> Option<Arc<dyn FastHook>> {
        self.fast.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether a fast path may carry session `k` from its first packet:
    /// not a hairpinned one (RFC 6146 §3.8: the peer is one of our pool4
    /// addresses), which stays here.
    fn fast_may_carry(&self, k: &SessKey) -> bool {
        !self.pool.contains(k.y.addr)
    }

    /// A session was created (`sess`, just inserted): tell the hook when it
    /// may be carried at once (UDP, ICMP echo; TCP in V6 INIT, half-open).
    /// Call without the shard locked.
    pub(crate) fn fast_created(&self, k: &SessKey, sess: &Session, now: u64) {
        let half_open = match sess.state {
            None => false,
            Some(TcpState::V6Init) => true,
            Some(_) => return,
        };
        if let Some(h) = self.fast_hook().filter(|_| self.fast_may_carry(k)) {
            h.mirror(&self.session_info(k, sess, now), half_open);
        }
    }

    /// Session `k` (`sess`, as it is now) left V6 INIT here without the
    /// fast path's help (the SYN+ACK came this way): carried in full now.
    pub(crate) fn fast_opened(&self, k: &SessKey, sess: &Session, now: u64) {
        if let Some(h) = self.fast_hook().filter(|_| self.fast_may_carry(k)) {
            h.mirror(&self.session_info(k, sess, now), false);
        }
    }

    /// A half-open session is handled here: when the fast path carried its
    /// IPv4 SYN+ACK, step it as that packet would have (V6 INIT →
    /// ESTABLISHED, the established lifetime from then). True when it did.
    pub(crate) fn fast_learn(&self, k: &SessKey, sess: &mut Session, now: u64) -> bool {
        if sess.state != Some(TcpState::V6Init) {
            return false;
        }
        let Some(h) = self.fast_hook() else { return false };
        let Some(at) = h.syn_ack(&self.session_info(k, sess, now)) else { return false };
        let (next, life) = tcp::step(TcpState::V6Init, Side::V4, tcp::SYN | 0x10, self.cfg.handle_rst_during_fin_rcv);
        sess.state = Some(next);
        if life == Lifetime::Est {
            sess.expires = at.saturating_add(self.to[TO_EST]);
        }
        true
    }

    /// NAT-PT: tell the hook that host `x` holds `t` (Some) or no address.
    pub(crate) fn fast_host(&self, x: Ipv6Addr, t: Option<Ipv4Addr>) {
        if let Some(h) = self.fast_hook() {
            h.host(x, t);
        }
    }

    /// Tell the hook whether IPv4 SYNs are held (call with the held-SYN
    /// store locked, after changing it).
    pub(crate) fn fast_held(&self, present: bool) {
        if let Some(h) = self.fast_hook() {
            h.held(present);
        }
    }

    /// NAT64: tell the hook of TCP BIB entry (x, t) made (Some) or gone.
    pub(crate) fn fast_bib(&self, p: Protocol, x: T6, t: Option<T4>) {
        if self.cfg.mode != Mode::Nat64 || p != Protocol::Tcp {
            return;
        }
        if let Some(h) = self.fast_hook() {
            h.bib(SocketAddrV6::new(x.addr, x.port, 0, 0), t.map(|t| SocketAddrV4::new(t.addr, t.port)));
        }
    }

    /// Take over the sessions the fast path created.
    pub(crate) fn fast_drain(&self) {
        if let Some(h) = self.fast_hook() {
            h.created(&mut |c| self.adopt(c));
        }
    }

    /// NAT-PT: the host bindings (X, T), for a fast path that starts now.
    pub fn natpt_hosts(&self) -> Vec<(Ipv6Addr, Ipv4Addr)> {
        let mut v = Vec::new();
        for s in self.shards.iter() {
            v.extend(lock(s).hosts.iter().map(|(x, h)| (*x, h.addr)));
        }
        v
    }

    /// Enter session `c`, created by a fast path from the host's TCP SYN,
    /// as that SYN would have here (RFC 6146 §3.5.2: the BIB entry and the
    /// host's count, V6 INIT with the transitory lifetime from `c.at`, the
    /// counters); a session that exists already stays as it is. When the
    /// host gave its address back meanwhile, that address is claimed again
    /// if free. False when the session cannot be had (another address, a
    /// limit, not NAT-PT, not TCP): the fast path removes it.
    ///
    /// NAT64 (NAPT): the BIB entry (x → T:t) is made as that SYN would
    /// have with that port (the port one of the host's blocks, else
    /// claimed in the pool), the session as above. When the host's x has
    /// another mapping already (the translator made it first), that one
    /// stays (endpoint-independent mapping): the port is given back, the
    /// hook told the mapping in force ([`FastHook::bib`]), and false.
    pub fn adopt(&self, c: &Created) -> bool {
        if c.protocol != Protocol::Tcp {
            return false;
        }
        if let Some(side) = c.fin {
            return self.carried_fin(c, side);
        }
        if self.cfg.mode == Mode::Nat64 {
            return self.adopt_napt(c);
        }
        let x = T6 { addr: *c.x.ip(), port: c.x.port() };
        let y = T4 { addr: *c.y.ip(), port: c.y.port() };
        let key = SessKey { p: Protocol::Tcp, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if sh.sessions.contains_key(&key) {
            return true;
        }
        let claimed = match sh.hosts.get(&x.addr) {
            Some(h) if h.addr == c.t => false,
            Some(_) => return false,
            None => {
                if !self.pool.claim_this_addr(c.t) {
                    return false;
                }
                self.host_bind(&mut sh, x.addr, Host { addr: c.t, bibs: 0, pinned: false });
                true
            }
        };
        let full = self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions;
        let t = if full {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            Err(DropReason::SessionTableFull)
        } else {
            self.bib_get_or_create(&mut sh, Protocol::Tcp, x, y.addr, None).inspect_err(|_| {
                self.n_sess.fetch_sub(1, Ordering::AcqRel);
            })
        };
        match t {
            Ok(t) => {
                self.insert_session(
                    &mut sh,
                    key,
                    t,
                    Some(TcpState::V6Init),
                    c.at,
                    c.at.saturating_add(self.to[TO_TRANS]),
                );
                true
            }
            Err(r) => {
                self.count_refused(r);
                if claimed && sh.hosts.get(&x.addr).is_some_and(|h| h.bibs == 0) {
                    self.host_unbind(&mut sh, x.addr);
                }
                false
            }
        }
    }

    /// A FIN of session `c` the fast path carried from `side` at `c.at`:
    /// the session steps as that FIN would have stepped it here (a SYN+ACK
    /// the fast path carried before learnt first); its lifetime from
    /// `c.at`. False when the session is gone (the fast path removes its
    /// entries).
    fn carried_fin(&self, c: &Created, side: Side) -> bool {
        let x = T6 { addr: *c.x.ip(), port: c.x.port() };
        let y = T4 { addr: *c.y.ip(), port: c.y.port() };
        let key = SessKey { p: Protocol::Tcp, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        let Some(s) = sh.sessions.get_mut(&key) else { return false };
        self.fast_learn(&key, s, c.at);
        let (sport, dport) = match side {
            Side::V6 => (x.port, y.port),
            Side::V4 => (y.port, s.t.port),
        };
        let flow = crate::tuple::Flow { p: Protocol::Tcp, sport, dport, flags: tcp::FIN | 0x10 };
        if let Some(at) = self.touch(s, side, flow, c.at) {
            sh.wheel.insert(at, key);
        }
        true
    }

    fn adopt_napt(&self, c: &Created) -> bool {
        let x = T6 { addr: *c.x.ip(), port: c.x.port() };
        let y = T4 { addr: *c.y.ip(), port: c.y.port() };
        let t = T4 { addr: c.t, port: c.port };
        let key = SessKey { p: Protocol::Tcp, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        let have = sh.bib.get(&(Protocol::Tcp, x)).map(|b| b.t);
        if have.is_some_and(|b| b != t) || sh.sessions.get(&key).is_some_and(|s| s.t != t) {
            // Made here first: its mapping stays, the port goes back.
            self.block_release(t);
            self.block_conflict();
            self.fast_bib(Protocol::Tcp, x, have);
            return false;
        }
        if sh.sessions.contains_key(&key) {
            return true;
        }
        let refuse = |sh: &mut crate::state::Shard, r: DropReason| {
            self.count_refused(r);
            if sh.bib.get(&(Protocol::Tcp, x)).is_some_and(|b| b.sessions == 0 && !b.is_static()) {
                self.bib_drop(sh, Protocol::Tcp, x);
            } else if have.is_none() {
                self.fast_bib(Protocol::Tcp, x, None);
            }
            false
        };
        if have.is_none() {
            if !self.block_owns(&x.addr, t) && !self.pool.claim(Protocol::Tcp, t.addr, t.port) {
                return refuse(&mut sh, DropReason::Pool4Exhausted);
            }
            if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
                self.n_bib.fetch_sub(1, Ordering::AcqRel);
                if !self.block_release(t) {
                    self.pool.release(Protocol::Tcp, t.addr, t.port);
                }
                return refuse(&mut sh, DropReason::BibFull);
            }
            let k = self.v4key(Protocol::Tcp, t);
            lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
            self.bib_enter(&mut sh, Protocol::Tcp, x, t, crate::BibOrigin::Dynamic);
        }
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return refuse(&mut sh, DropReason::SessionTableFull);
        }
        self.insert_session(&mut sh, key, t, Some(TcpState::V6Init), c.at, c.at.saturating_add(self.to[TO_TRANS]));
        true
    }

    /// A packet of session `s` (as [`Nat64::sessions`] lists it) was
    /// translated elsewhere at `seen` (this translator's clock, the `now`
    /// of [`Nat64::translate`]): extend its lifetime as a packet that does
    /// not change the TCP state would, i.e. the UDP or ICMP idle timeout,
    /// or the established timeout for a TCP session in ESTABLISHED, V4 FIN
    /// RCV or V6 FIN RCV (in V4 FIN + V6 FIN RCV a packet changes nothing;
    /// other TCP states keep theirs: their packets go through
    /// [`Nat64::translate`]). A half-open session first learns what the
    /// fast path recorded (see the module documentation). Never shortens a
    /// lifetime. Returns false when the session is gone.
    pub fn refresh(&self, s: &SessionInfo, seen: u64) -> bool {
        let y_port = if s.protocol == Protocol::Icmp { 0 } else { s.ipv4_dst.port() };
        let key = SessKey {
            p: s.protocol,
            x: T6 { addr: *s.ipv6_src.ip(), port: s.ipv6_src.port() },
            y: T4 { addr: *s.ipv4_dst.ip(), port: y_port },
        };
        let mut sh = lock(&self.shards[self.shard_of6(&key.x.addr)]);
        let Some(sess) = sh.sessions.get_mut(&key) else { return false };
        self.fast_learn(&key, sess, seen);
        let life = match sess.state {
            None => self.idle_timeout(key.p),
            Some(TcpState::Established | TcpState::V4FinRcv | TcpState::V6FinRcv) => self.to[TO_EST],
            Some(_) => return true,
        };
        sess.expires = sess.expires.max(seen.saturating_add(life));
        true
    }
}
