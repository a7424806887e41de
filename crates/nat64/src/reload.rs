//! Reload (`SIGHUP`, `v6gate ctl reload`): a new translator for a changed
//! configuration that carries over the BIB entries and sessions still
//! valid under it, so established flows survive (RFC 6146 §3.5 state is
//! kept; only what the new pool4 cannot hold is dropped). Static entries
//! added at run time ([`Nat64::bib_add`]) are carried first, before any
//! dynamic entry could take their port.

use crate::config::{Config, Mode, Protocol, StaticBib};
use crate::state::{lock, BibOrigin, Host, SessKey, Session, T4, T6};
use crate::{Error, Nat64};
use std::sync::atomic::Ordering;

impl Nat64 {
    /// Reload: build a translator for `cfg` that keeps every session and
    /// dynamic BIB entry whose pool4 transport address is still in the new
    /// pool4 (NAT-PT: whose host address is), and the static entries of
    /// the new configuration. Entries that no longer fit are dropped. The
    /// daemon swaps the returned instance in (e.g. with `ArcSwap`);
    /// counters restart. Call while `self` no longer receives packets, or
    /// accept that packets translated meanwhile by `self` are not carried.
    ///
    /// Static entries added with [`Nat64::bib_add`] stay (with their
    /// sessions) when the new configuration can hold them; those it cannot
    /// are listed by [`Nat64::bib_lost`] on the returned instance.
    pub fn reconfigure(&self, cfg: Config, xcfg: xlat::siit::Config, now: u64) -> Result<Nat64, Error> {
        // What a fast path created is this instance's to carry over; its
        // port blocks stay with it (the next one grants its own).
        self.fast_drain();
        self.blocks_unlist();
        let mut next = Nat64::with_xlat(cfg, xcfg)?;
        next.set_fast_hook(self.fast_hook());
        for e in self.added_bib() {
            if let Err(err) = next.bib_insert_static(e, BibOrigin::Added) {
                next.lost_bib.push((e, err.to_string()));
            }
        }
        let pool6_same = next.cfg.pool6 == self.cfg.pool6 && next.cfg.mode == self.cfg.mode;
        for s in self.shards.iter() {
            let sh = lock(s);
            let mut nsh_cache: Vec<(SessKey, Session)> = sh.sessions.iter().map(|(k, v)| (*k, *v)).collect();
            nsh_cache.sort_by_key(|(k, _)| (k.p, k.x.addr, k.x.port));
            if !pool6_same {
                // Sessions and dynamic entries were made under another
                // pool6 (or mode): only the static entries stay.
                nsh_cache.clear();
            }
            for ((p, x), b) in &sh.bib {
                if b.is_static() || !pool6_same {
                    continue;
                }
                next.carry_bib(*p, *x, b.t);
            }
            for (k, v) in nsh_cache {
                next.carry_session(k, v, now);
            }
        }
        // Dynamic entries whose sessions did not fit would never expire.
        next.sweep_idle_bib();
        Ok(next)
    }

    /// Static entries of the previous instance that [`Nat64::reconfigure`]
    /// could not keep (added at run time, no longer fitting the new
    /// configuration), with why.
    pub fn bib_lost(&self) -> &[(StaticBib, String)] {
        &self.lost_bib
    }

    fn carry_bib(&self, p: Protocol, x: T6, t: T4) {
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if sh.bib.contains_key(&(p, x)) {
            return;
        }
        if self.n_bib.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_bib {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let ok = match self.cfg.mode {
            Mode::Nat64 => {
                let ok = self.pool.claim(p, t.addr, t.port);
                if ok {
                    let k = self.v4key(p, t);
                    lock(&self.v4idx[self.shard_of4(&k)]).insert(k, x);
                }
                ok
            }
            Mode::Natpt => match sh.hosts.get_mut(&x.addr) {
                Some(h) if h.addr == t.addr => {
                    h.bibs += 1;
                    true
                }
                Some(_) => false,
                None => {
                    let ok = self.pool.claim_this_addr(t.addr);
                    if ok {
                        sh.hosts.insert(x.addr, Host { addr: t.addr, bibs: 1, pinned: false });
                        let k = self.v4key(p, t);
                        lock(&self.v4idx[self.shard_of4(&k)]).insert(k, T6 { addr: x.addr, port: 0 });
                    }
                    ok
                }
            },
        };
        if !ok {
            self.n_bib.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.bib_put(&mut sh, p, x, t, BibOrigin::Dynamic);
    }

    fn carry_session(&self, k: SessKey, s: Session, _now: u64) {
        let mut sh = lock(&self.shards[self.shard_of6(&k.x.addr)]);
        match sh.bib.get(&(k.p, k.x)) {
            Some(b) if b.t == s.t => {}
            _ => return,
        }
        if sh.sessions.contains_key(&k) {
            return;
        }
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.insert_session(&mut sh, k, s.t, s.state, s.created, s.expires);
        self.c.created[k.p.idx()].fetch_sub(1, Ordering::Relaxed);
    }

    /// Delete dynamic BIB entries left without sessions (after a reload
    /// carried a BIB entry whose sessions did not fit). Returns how many.
    fn sweep_idle_bib(&self) -> usize {
        let mut n = 0;
        for s in self.shards.iter() {
            let mut sh = lock(s);
            let idle: Vec<(Protocol, T6)> =
                sh.bib.iter().filter(|(_, b)| b.sessions == 0 && !b.is_static()).map(|(k, _)| *k).collect();
            for (p, x) in idle {
                self.bib_drop(&mut sh, p, x);
                n += 1;
            }
        }
        n
    }
}
