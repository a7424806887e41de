//! pool4: the IPv4 transport addresses the translator hands out.
//!
//! Ports (and ICMP identifiers) are claimed in lock-free bitmaps, one bit
//! per port per protocol per address, so workers holding different table
//! shards never contend on allocation. NAT64 mode picks ports with RFC 6056
//! algorithm 3 ("simple hash-based port selection"), keyed by the IPv6
//! source (so one host's mappings stay on one address, RFC 4787 REQ-2
//! "paired" pooling, RFC 6146 §3.5.1.1) and preserving the port's range
//! class (0–1023 / 1024–65535) and parity when the pool allows; the search
//! is bounded by `max-port-probes`. NAT-PT mode claims whole addresses.

use crate::config::{Config, Protocol};
use core::net::{Ipv4Addr, Ipv6Addr};
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[derive(Debug)]
struct Range {
    lo: u16,
    hi: u16,
    bits: Box<[AtomicU64]>,
    used: AtomicU32,
}

impl Range {
    fn new(lo: u16, hi: u16) -> Self {
        let n = usize::from(hi - lo) + 1;
        Range { lo, hi, bits: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(), used: AtomicU32::new(0) }
    }
    fn size(&self) -> u32 {
        u32::from(self.hi - self.lo) + 1
    }
    fn try_claim(&self, port: u16) -> bool {
        if port < self.lo || port > self.hi {
            return false;
        }
        let i = usize::from(port - self.lo);
        let bit = 1u64 << (i % 64);
        let prev = self.bits[i / 64].fetch_or(bit, Ordering::AcqRel);
        if prev & bit == 0 {
            self.used.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
    fn release(&self, port: u16) {
        if port < self.lo || port > self.hi {
            return;
        }
        let i = usize::from(port - self.lo);
        let bit = 1u64 << (i % 64);
        let prev = self.bits[i / 64].fetch_and(!bit, Ordering::AcqRel);
        if prev & bit != 0 {
            self.used.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(Debug)]
struct Addr {
    addr: Ipv4Addr,
    /// Per protocol; `None` when this address does not serve it.
    ranges: [Option<Range>; 3],
    /// NAT-PT: held by one IPv6 host.
    owned: AtomicBool,
}

/// The pool.
#[derive(Debug)]
pub struct Pool {
    addrs: Vec<Addr>,
    index: crate::Map<Ipv4Addr, usize>,
    /// Addresses serving each protocol (indices into `addrs`).
    by_proto: [Vec<usize>; 3],
    /// RFC 6056 algorithm 3's table of increments, indexed by G().
    table: Box<[AtomicU32]>,
    keys: std::hash::RandomState,
    owned: AtomicU32,
    /// Lowest and highest pool4 address.
    lo: u32,
    hi: u32,
}

const TABLE_LEN: usize = 256;

impl Pool {
    pub fn new(cfg: &Config) -> Self {
        let mut addrs: Vec<Addr> = Vec::new();
        let mut index = crate::Map::default();
        for e in &cfg.pool4 {
            for i in 0..e.prefix.size() {
                let a = e.prefix.nth(i);
                let at = *index.entry(a).or_insert_with(|| {
                    addrs.push(Addr { addr: a, ranges: [None, None, None], owned: AtomicBool::new(false) });
                    addrs.len() - 1
                });
                for p in &e.protocols {
                    if addrs[at].ranges[p.idx()].is_none() {
                        addrs[at].ranges[p.idx()] = Some(Range::new(e.ports.0, e.ports.1));
                    }
                }
            }
        }
        let by_proto =
            Protocol::ALL.map(|p| (0..addrs.len()).filter(|&i| addrs[i].ranges[p.idx()].is_some()).collect());
        let lo = addrs.iter().map(|a| u32::from(a.addr)).min().unwrap_or(1);
        let hi = addrs.iter().map(|a| u32::from(a.addr)).max().unwrap_or(0);
        Pool {
            addrs,
            index,
            by_proto,
            table: (0..TABLE_LEN).map(|_| AtomicU32::new(0)).collect(),
            keys: std::hash::RandomState::new(),
            owned: AtomicU32::new(0),
            lo,
            hi,
        }
    }

    /// True when `a` is a pool4 address.
    #[inline]
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        // Most packets' addresses are far from the pool: a range test first.
        let v = u32::from(a);
        v >= self.lo && v <= self.hi && self.index.contains_key(&a)
    }

    fn range(&self, p: Protocol, a: Ipv4Addr) -> Option<&Range> {
        self.addrs.get(*self.index.get(&a)?)?.ranges[p.idx()].as_ref()
    }

    fn hash(&self, v: impl Hash) -> u64 {
        self.keys.hash_one(v)
    }

    /// RFC 6056 algorithm 3 for a new mapping of `(x, port)` first seen
    /// towards `y`: the address is chosen by F(x) (paired pooling), the
    /// first port by F(x, y, secret) + table[G(x)], then stepping by two
    /// (keeping parity) through the port's range class, then the other
    /// parity, at most `probes` ports per address; other addresses follow.
    pub fn alloc(&self, p: Protocol, x: &Ipv6Addr, port: u16, y: Ipv4Addr, probes: u32) -> Option<(Ipv4Addr, u16)> {
        let cands = &self.by_proto[p.idx()];
        let first = self.paired_idx(p, x)?;
        let f = self.hash((1u8, x, y)) as u32;
        let g = (self.hash((2u8, x)) as usize) % TABLE_LEN;
        let bump = self.table[g].fetch_add(2, Ordering::Relaxed);
        for k in 0..cands.len() {
            let a = &self.addrs[cands[(first + k) % cands.len()]];
            let Some(r) = a.ranges[p.idx()].as_ref() else { continue };
            // Range class: ports below 1024 map below 1024 when the range has any.
            let (lo, hi) = if port < 1024 && r.lo < 1024 {
                (r.lo, r.hi.min(1023))
            } else if port >= 1024 && r.hi >= 1024 {
                (r.lo.max(1024), r.hi)
            } else {
                (r.lo, r.hi)
            };
            let num = u32::from(hi - lo) + 1;
            let mut start = f.wrapping_add(bump) % num;
            // Parity of the original port (ICMP identifiers have none to keep).
            if p != Protocol::Icmp && (u32::from(lo) + start) % 2 != u32::from(port) % 2 {
                start = (start + 1) % num;
            }
            for i in 0..num.min(probes) {
                let two_i = 2 * i;
                let off = if two_i < num { two_i } else { two_i - num + 1 };
                let cand = lo + ((start + off) % num) as u16;
                if r.try_claim(cand) {
                    // RFC 6056 algorithm 3 increments table[G] once per
                    // probe, so the host's next search starts past the
                    // ports just found taken.
                    self.table[g].fetch_add(2 * i, Ordering::Relaxed);
                    return Some((a.addr, cand));
                }
            }
        }
        None
    }

    /// Index in `by_proto[p]` of the address F(x) pairs host `x` with.
    fn paired_idx(&self, p: Protocol, x: &Ipv6Addr) -> Option<usize> {
        let n = self.by_proto[p.idx()].len();
        (n > 0).then(|| (self.hash((0u8, x)) % n as u64) as usize)
    }

    /// The address host `x`'s `p` mappings go to first (RFC 4787 REQ-2
    /// paired pooling).
    pub fn paired(&self, p: Protocol, x: &Ipv6Addr) -> Option<Ipv4Addr> {
        let i = self.paired_idx(p, x)?;
        Some(self.addrs[self.by_proto[p.idx()][i]].addr)
    }

    /// The port range (lowest, highest) address `a` serves `p` with.
    pub fn ports(&self, p: Protocol, a: Ipv4Addr) -> Option<(u16, u16)> {
        self.range(p, a).map(|r| (r.lo, r.hi))
    }

    /// Claim a specific transport address (static BIB entries, NAT-PT).
    pub fn claim(&self, p: Protocol, a: Ipv4Addr, port: u16) -> bool {
        self.range(p, a).is_some_and(|r| r.try_claim(port))
    }

    /// Give a transport address back.
    pub fn release(&self, p: Protocol, a: Ipv4Addr, port: u16) {
        if let Some(r) = self.range(p, a) {
            r.release(port);
        }
    }

    /// NAT-PT: claim a whole address for host `x`, starting at F(x).
    pub fn claim_addr(&self, x: &Ipv6Addr) -> Option<Ipv4Addr> {
        let n = self.addrs.len();
        if n == 0 {
            return None;
        }
        let first = (self.hash((3u8, x)) % n as u64) as usize;
        for k in 0..n {
            let a = &self.addrs[(first + k) % n];
            if a.owned.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                self.owned.fetch_add(1, Ordering::Relaxed);
                return Some(a.addr);
            }
        }
        None
    }

    /// NAT-PT: claim a given address (static entries). True if now owned by the caller.
    pub fn claim_this_addr(&self, a: Ipv4Addr) -> bool {
        let Some(&i) = self.index.get(&a) else { return false };
        let ok = self.addrs[i].owned.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if ok {
            self.owned.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// NAT-PT: release an address.
    pub fn release_addr(&self, a: Ipv4Addr) {
        if let Some(&i) = self.index.get(&a) {
            if self.addrs[i].owned.swap(false, Ordering::AcqRel) {
                self.owned.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// (ports in the pool, ports in use) for `p`.
    pub fn usage(&self, p: Protocol) -> (u64, u64) {
        let mut total = 0u64;
        let mut used = 0u64;
        for a in &self.addrs {
            if let Some(r) = &a.ranges[p.idx()] {
                total += u64::from(r.size());
                used += u64::from(r.used.load(Ordering::Relaxed));
            }
        }
        (total, used)
    }

    /// Addresses in the pool and (NAT-PT) addresses held by hosts.
    pub fn addresses(&self) -> (usize, usize) {
        (self.addrs.len(), self.owned.load(Ordering::Relaxed) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pool4Entry;

    fn pool(prefix: &str, ports: (u16, u16)) -> Pool {
        let cfg = Config {
            pool4: vec![Pool4Entry { prefix: prefix.parse().unwrap(), ports, protocols: Protocol::ALL.to_vec() }],
            ..Config::default()
        };
        Pool::new(&cfg)
    }

    #[test]
    fn alloc_keeps_class_and_parity_and_address_per_host() {
        let p = pool("192.0.2.0/30", (1, 65535));
        let x: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let y: Ipv4Addr = "198.51.100.1".parse().unwrap();
        let (a1, p1) = p.alloc(Protocol::Udp, &x, 40001, y, 64).unwrap();
        let (a2, p2) = p.alloc(Protocol::Udp, &x, 40002, y, 64).unwrap();
        assert_eq!(a1, a2, "paired pooling: one host, one address");
        assert!(p1 >= 1024 && p1 % 2 == 1);
        assert!(p2 >= 1024 && p2 % 2 == 0);
        let (_, p3) = p.alloc(Protocol::Tcp, &x, 80, y, 64).unwrap();
        assert!(p3 < 1024 && p3 % 2 == 0);
        assert_ne!(p1, p2);
        assert_eq!(p.usage(Protocol::Udp).1, 2);
        p.release(Protocol::Udp, a1, p1);
        assert_eq!(p.usage(Protocol::Udp).1, 1);
    }

    #[test]
    fn exhaustion_is_bounded_and_reported() {
        let p = pool("192.0.2.1/32", (2000, 2003));
        let x: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let y: Ipv4Addr = "198.51.100.1".parse().unwrap();
        let mut got = Vec::new();
        for i in 0..4 {
            got.push(p.alloc(Protocol::Udp, &x, 5000 + i, y, 1024).unwrap().1);
        }
        got.sort();
        assert_eq!(got, vec![2000, 2001, 2002, 2003]);
        assert_eq!(p.alloc(Protocol::Udp, &x, 5000, y, 1024), None);
        // A bounded search gives up early even when ports are free.
        let q = pool("192.0.2.1/32", (2000, 2099));
        for port in 2000..2100 {
            if port != 2050 {
                assert!(q.claim(Protocol::Udp, "192.0.2.1".parse().unwrap(), port));
            }
        }
        let mut found = 0;
        for _ in 0..20 {
            if q.alloc(Protocol::Udp, &x, 5000, y, 1).is_some() {
                found += 1;
            }
        }
        assert!(found <= 1);
    }

    #[test]
    fn natpt_addresses() {
        let p = pool("192.0.2.0/31", (1, 65535));
        let a = p.claim_addr(&"2001:db8::1".parse().unwrap()).unwrap();
        let b = p.claim_addr(&"2001:db8::2".parse().unwrap()).unwrap();
        assert_ne!(a, b);
        assert_eq!(p.claim_addr(&"2001:db8::3".parse().unwrap()), None);
        p.release_addr(a);
        assert_eq!(p.claim_addr(&"2001:db8::3".parse().unwrap()), Some(a));
        assert!(!p.claim_this_addr(a));
        assert_eq!(p.addresses(), (2, 2));
    }
}
