//! DSTM address leases: a whole IPv4 address per host, on demand, with
//! expiry and reuse — the DSTM server of the comparison paper (Fig. 5),
//! serving the lwAFTR's whole-address bindings.
//!
//! RFC 7341 (DHCPv4 over DHCPv6) is the standard way to do this; v6gate
//! uses a much smaller protocol of its own, documented here and in
//! docs/softwire.md, because a DHCPv4-over-DHCPv6 server needs the whole
//! DHCPv4 and DHCPv6 machinery (and a 4o6 client on every host) for what
//! is one request and one answer.
//!
//! ## The lease protocol (UDP over IPv6)
//!
//! Every message starts with a 12-byte header, all fields big-endian:
//!
//! ```text
//! 0       4     5    6          8            12
//! +-------+-----+----+----------+------------+
//! | DSTM  | ver | op | reserved |    xid     |  then the body of `op`
//! +-------+-----+----+----------+------------+
//! ```
//!
//! `ver` is 1. The client's IPv6 source address is its softwire end-point
//! (the lease's key); a lease can only be renewed or released from there.
//!
//! | op | name    | body                                              |
//! |----|---------|---------------------------------------------------|
//! | 1  | REQUEST | none: give me an address (the one I hold, if any)  |
//! | 2  | RENEW   | IPv4 address (4)                                   |
//! | 3  | RELEASE | IPv4 address (4)                                   |
//! | 4  | ACK     | IPv4 address (4), lease seconds (4), TEP IPv6 address (16) |
//! | 5  | NAK     | reason (1): 1 pool exhausted, 2 no such lease, 3 refused |
//!
//! The server answers each REQUEST or RENEW with ACK or NAK and each
//! RELEASE with ACK (lease seconds 0). Malformed messages and unknown ops
//! get no answer (counted). Clients renew at half the lease time; the
//! server keeps an expired address out of use as long as it has others,
//! and gives a returning client its old address when it is still free.
//!
//! The lease table is written to `lease-file` (one `B4 IPV4 EXPIRY` line
//! each, expiry in Unix seconds) after every change, atomically, and read
//! back at start and on reload: leases survive both.

use crate::binding::{Binding, BindingTable};
use crate::portset::PsidMap;
use core::net::{Ipv4Addr, Ipv6Addr};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use xlat::addr::{Prefix4, Prefix6};

/// Protocol magic.
pub const MAGIC: &[u8; 4] = b"DSTM";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Header length.
pub const HEADER_LEN: usize = 12;
/// Default UDP port of the lease server (no IANA assignment).
pub const DEFAULT_PORT: u16 = 4739;

/// A message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// op 1.
    Request,
    /// op 2.
    Renew(Ipv4Addr),
    /// op 3.
    Release(Ipv4Addr),
    /// op 4.
    Ack {
        /// Leased address.
        ipv4: Ipv4Addr,
        /// Lease seconds (0 after a release).
        secs: u32,
        /// The tunnel end-point to use.
        tep: Ipv6Addr,
    },
    /// op 5.
    Nak(u8),
}

/// NAK reasons.
pub mod nak {
    /// No free address.
    pub const EXHAUSTED: u8 = 1;
    /// The lease named does not exist for this client.
    pub const NO_LEASE: u8 = 2;
    /// Refused: source outside the allowed prefixes, or the rate limit.
    pub const REFUSED: u8 = 3;
}

/// Encode `m` with transaction id `xid`.
pub fn encode(m: Msg, xid: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + 24);
    b.extend_from_slice(MAGIC);
    b.push(VERSION);
    let (op, body): (u8, Vec<u8>) = match m {
        Msg::Request => (1, vec![]),
        Msg::Renew(a) => (2, a.octets().to_vec()),
        Msg::Release(a) => (3, a.octets().to_vec()),
        Msg::Ack { ipv4, secs, tep } => {
            let mut v = ipv4.octets().to_vec();
            v.extend_from_slice(&secs.to_be_bytes());
            v.extend_from_slice(&tep.octets());
            (4, v)
        }
        Msg::Nak(r) => (5, vec![r]),
    };
    b.push(op);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&xid.to_be_bytes());
    b.extend_from_slice(&body);
    b
}

/// Decode a message; `None` for anything malformed (wrong magic, version,
/// op, or length).
pub fn decode(b: &[u8]) -> Option<(Msg, u32)> {
    if b.len() < HEADER_LEN || &b[..4] != MAGIC || b[4] != VERSION {
        return None;
    }
    let xid = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    let body = &b[HEADER_LEN..];
    let a4 = |x: &[u8]| Ipv4Addr::new(x[0], x[1], x[2], x[3]);
    let m = match (b[5], body.len()) {
        (1, 0) => Msg::Request,
        (2, 4) => Msg::Renew(a4(body)),
        (3, 4) => Msg::Release(a4(body)),
        (4, 24) => Msg::Ack {
            ipv4: a4(body),
            secs: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
            tep: Ipv6Addr::from(<[u8; 16]>::try_from(&body[8..24]).ok()?),
        },
        (5, 1) => Msg::Nak(body[0]),
        _ => return None,
    };
    Some((m, xid))
}

/// One lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// The host's softwire end-point.
    pub b4: Ipv6Addr,
    /// Its address.
    pub ipv4: Ipv4Addr,
    /// Expiry, Unix seconds.
    pub expires: u64,
}

/// The server's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Addresses to lease.
    pub pool: Vec<Prefix4>,
    /// Sources allowed to ask (empty: any).
    pub clients: Vec<Prefix6>,
    /// Lease time in seconds.
    pub lease_secs: u32,
    /// The TEP (lwAFTR end-point) address the ACKs name.
    pub tep: Ipv6Addr,
    /// Where leases are kept across reloads and restarts.
    pub file: Option<PathBuf>,
    /// Requests handled per second at most (a lease flood is refused and counted).
    pub max_requests_per_sec: u32,
}

/// Counters of the lease server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseStats {
    /// Messages received.
    pub received: u64,
    /// Malformed or unexpected messages (no answer).
    pub malformed: u64,
    /// ACKs sent for new leases.
    pub granted: u64,
    /// ACKs for renewals (and repeated requests).
    pub renewed: u64,
    /// Leases released.
    pub released: u64,
    /// Leases expired.
    pub expired: u64,
    /// NAK: pool exhausted.
    pub exhausted: u64,
    /// NAK: no such lease.
    pub no_lease: u64,
    /// NAK: refused (prefix or rate).
    pub refused: u64,
}

/// The lease server core (I/O-free except for the lease file).
#[derive(Debug)]
pub struct LeaseServer {
    cfg: LeaseConfig,
    leases: HashMap<Ipv6Addr, Lease>,
    by4: HashMap<Ipv4Addr, Ipv6Addr>,
    /// Free addresses, least recently used first.
    free: VecDeque<Ipv4Addr>,
    /// Last holder of each address once leased (for reuse by the same host).
    last: HashMap<Ipv4Addr, Ipv6Addr>,
    bucket: (u64, u64),
    /// Counters.
    pub stats: LeaseStats,
}

impl LeaseServer {
    /// A server with no leases (see [`LeaseServer::load`]).
    pub fn new(cfg: LeaseConfig) -> Self {
        let mut free = VecDeque::new();
        for p in &cfg.pool {
            for i in 0..p.size() {
                // Skip network and broadcast addresses of prefixes wider than /31.
                if p.len() < 31 && (i == 0 || i == p.size() - 1) {
                    continue;
                }
                free.push_back(p.nth(i));
            }
        }
        LeaseServer {
            bucket: (u64::from(cfg.max_requests_per_sec), 0),
            cfg,
            leases: HashMap::new(),
            by4: HashMap::new(),
            free,
            last: HashMap::new(),
            stats: LeaseStats::default(),
        }
    }

    /// The parameters.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// Leases held.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Addresses free.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Every lease.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }

    /// The leases as whole-address bindings for the lwAFTR.
    pub fn table(&self) -> BindingTable {
        let mut t = BindingTable::with_capacity(self.leases.len());
        for l in self.leases.values() {
            // Keys are unique by construction; a clash would be a bug, not input.
            let _ = t.insert(Binding { b4: l.b4, ipv4: l.ipv4, psid: 0, map: PsidMap::FULL });
        }
        t
    }

    fn take(&mut self, a: Ipv4Addr) -> bool {
        match self.free.iter().position(|x| *x == a) {
            Some(i) => {
                self.free.remove(i);
                true
            }
            None => false,
        }
    }

    fn rate_ok(&mut self, now_ms: u64) -> bool {
        let rate = u64::from(self.cfg.max_requests_per_sec);
        let (tokens, last) = &mut self.bucket;
        let add = now_ms.saturating_sub(*last) * rate / 1000;
        if add > 0 {
            *tokens = (*tokens + add).min(rate);
            *last = now_ms;
        }
        if *tokens > 0 {
            *tokens -= 1;
            true
        } else {
            false
        }
    }

    /// Handle one datagram from `from` at `now_ms` (Unix milliseconds).
    /// Returns the answer (if any) and whether the lease table changed.
    pub fn handle(&mut self, from: Ipv6Addr, msg: &[u8], now_ms: u64) -> (Option<Vec<u8>>, bool) {
        self.stats.received += 1;
        let Some((m, xid)) = decode(msg) else {
            self.stats.malformed += 1;
            return (None, false);
        };
        let now = now_ms / 1000;
        let allowed = self.cfg.clients.is_empty() || self.cfg.clients.iter().any(|p| p.contains(&from));
        if !matches!(m, Msg::Request | Msg::Renew(_) | Msg::Release(_)) {
            self.stats.malformed += 1;
            return (None, false);
        }
        if !allowed || !self.rate_ok(now_ms) {
            self.stats.refused += 1;
            return (Some(encode(Msg::Nak(nak::REFUSED), xid)), false);
        }
        let secs = self.cfg.lease_secs;
        let tep = self.cfg.tep;
        let ack = move |ipv4, secs| Some(encode(Msg::Ack { ipv4, secs, tep }, xid));
        match m {
            Msg::Request => {
                if let Some(l) = self.leases.get_mut(&from) {
                    l.expires = now + u64::from(secs);
                    self.stats.renewed += 1;
                    let a = l.ipv4;
                    return (ack(a, secs), true);
                }
                // The host's previous address if still free, else the least recently used.
                let prev = self.last.iter().find(|(_, b)| **b == from).map(|(a, _)| *a);
                let a = match prev.filter(|a| self.take(*a)) {
                    Some(a) => a,
                    None => match self.free.pop_front() {
                        Some(a) => a,
                        None => {
                            self.stats.exhausted += 1;
                            return (Some(encode(Msg::Nak(nak::EXHAUSTED), xid)), false);
                        }
                    },
                };
                self.leases.insert(from, Lease { b4: from, ipv4: a, expires: now + u64::from(secs) });
                self.by4.insert(a, from);
                self.last.insert(a, from);
                self.stats.granted += 1;
                (ack(a, secs), true)
            }
            Msg::Renew(a) => match self.leases.get_mut(&from) {
                Some(l) if l.ipv4 == a => {
                    l.expires = now + u64::from(secs);
                    self.stats.renewed += 1;
                    (ack(a, secs), true)
                }
                _ => {
                    self.stats.no_lease += 1;
                    (Some(encode(Msg::Nak(nak::NO_LEASE), xid)), false)
                }
            },
            Msg::Release(a) => match self.leases.get(&from) {
                Some(l) if l.ipv4 == a => {
                    self.leases.remove(&from);
                    self.by4.remove(&a);
                    self.free.push_back(a);
                    self.stats.released += 1;
                    (ack(a, 0), true)
                }
                _ => {
                    self.stats.no_lease += 1;
                    (Some(encode(Msg::Nak(nak::NO_LEASE), xid)), false)
                }
            },
            _ => (None, false),
        }
    }

    /// Remove leases expired at `now_secs` (Unix); their addresses go to
    /// the back of the free list. Returns the expired leases.
    pub fn expire(&mut self, now_secs: u64) -> Vec<Lease> {
        let gone: Vec<Lease> = self.leases.values().filter(|l| l.expires <= now_secs).copied().collect();
        for l in &gone {
            self.leases.remove(&l.b4);
            self.by4.remove(&l.ipv4);
            self.free.push_back(l.ipv4);
            self.stats.expired += 1;
        }
        gone
    }

    /// Write the lease file (atomically: a temporary file renamed over it).
    pub fn save(&self) -> std::io::Result<()> {
        let Some(path) = &self.cfg.file else { return Ok(()) };
        let mut text = String::from("# v6gate DSTM leases: B4 IPV4 EXPIRY(unix seconds)\n");
        let mut v: Vec<&Lease> = self.leases.values().collect();
        v.sort_by_key(|l| u32::from(l.ipv4));
        for l in v {
            text.push_str(&format!("{} {} {}\n", l.b4, l.ipv4, l.expires));
        }
        let tmp = tmp_path(path);
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    }

    /// Read the lease file (if configured and present), keeping the leases
    /// that are unexpired at `now_secs` and whose address is in the pool.
    /// Returns how many were kept and how many lines were skipped.
    pub fn load(&mut self, now_secs: u64) -> std::io::Result<(usize, usize)> {
        let Some(path) = self.cfg.file.clone() else { return Ok((0, 0)) };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
            Err(e) => return Err(e),
        };
        let (mut kept, mut skipped) = (0, 0);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let parsed = match f.as_slice() {
                [b, a, e] => b.parse::<Ipv6Addr>().ok().zip(a.parse::<Ipv4Addr>().ok()).zip(e.parse::<u64>().ok()),
                _ => None,
            };
            let Some(((b4, ipv4), expires)) = parsed else {
                skipped += 1;
                continue;
            };
            if expires <= now_secs || self.leases.contains_key(&b4) || self.by4.contains_key(&ipv4) || !self.take(ipv4)
            {
                skipped += 1;
                continue;
            }
            self.leases.insert(b4, Lease { b4, ipv4, expires });
            self.by4.insert(ipv4, b4);
            self.last.insert(ipv4, b4);
            kept += 1;
        }
        Ok((kept, skipped))
    }

    /// Carry the leases of `old` (a reload): those whose address is still
    /// in this server's pool are kept.
    pub fn adopt(&mut self, old: &LeaseServer) -> usize {
        let mut n = 0;
        for l in old.leases.values() {
            if !self.leases.contains_key(&l.b4) && self.take(l.ipv4) {
                self.leases.insert(l.b4, *l);
                self.by4.insert(l.ipv4, l.b4);
                self.last.insert(l.ipv4, l.b4);
                n += 1;
            }
        }
        self.stats = old.stats.clone();
        n
    }
}

fn tmp_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(pool: &str, file: Option<PathBuf>) -> LeaseServer {
        LeaseServer::new(LeaseConfig {
            pool: vec![pool.parse().unwrap()],
            clients: vec!["2001:db8::/32".parse().unwrap()],
            lease_secs: 60,
            tep: "2001:db8:ffff::1".parse().unwrap(),
            file,
            max_requests_per_sec: 100,
        })
    }

    fn h(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, n)
    }

    fn reply(s: &mut LeaseServer, from: Ipv6Addr, m: Msg, now_ms: u64) -> Msg {
        let (r, _) = s.handle(from, &encode(m, 7), now_ms);
        let (m, xid) = decode(&r.unwrap()).unwrap();
        assert_eq!(xid, 7);
        m
    }

    #[test]
    fn wire_round_trip_and_malformed() {
        for m in [
            Msg::Request,
            Msg::Renew(Ipv4Addr::new(192, 0, 2, 1)),
            Msg::Release(Ipv4Addr::new(192, 0, 2, 1)),
            Msg::Ack { ipv4: Ipv4Addr::new(192, 0, 2, 1), secs: 3600, tep: h(1) },
            Msg::Nak(nak::EXHAUSTED),
        ] {
            assert_eq!(decode(&encode(m, 0xdead_beef)), Some((m, 0xdead_beef)));
        }
        let ok = encode(Msg::Request, 1);
        assert_eq!(decode(&ok[..11]), None);
        let mut bad = ok.clone();
        bad[4] = 2;
        assert_eq!(decode(&bad), None);
        let mut bad = ok.clone();
        bad[5] = 9;
        assert_eq!(decode(&bad), None);
        let mut long = ok.clone();
        long.push(0);
        assert_eq!(decode(&long), None);
    }

    #[test]
    fn lease_expiry_and_reuse() {
        let mut s = server("192.0.2.0/30", None); // .1 and .2 usable
        let Msg::Ack { ipv4: a, secs, tep } = reply(&mut s, h(1), Msg::Request, 0) else { panic!() };
        assert_eq!((secs, tep), (60, "2001:db8:ffff::1".parse().unwrap()));
        // Asking again gives the same address.
        assert!(matches!(reply(&mut s, h(1), Msg::Request, 1000), Msg::Ack { ipv4, .. } if ipv4 == a));
        let Msg::Ack { ipv4: b, .. } = reply(&mut s, h(2), Msg::Request, 0) else { panic!() };
        assert_ne!(a, b);
        assert_eq!(reply(&mut s, h(3), Msg::Request, 0), Msg::Nak(nak::EXHAUSTED));
        assert_eq!(s.table().len(), 2);
        assert_eq!(s.table().lookup4(a, 80), Some(&h(1)));
        // A renewal from another host is refused.
        assert_eq!(reply(&mut s, h(2), Msg::Renew(a), 0), Msg::Nak(nak::NO_LEASE));
        assert!(matches!(reply(&mut s, h(2), Msg::Renew(b), 50_000), Msg::Ack { .. }));
        // h(1) expires at 61 s, h(2) (renewed at 50 s) at 110 s.
        assert!(s.expire(60).is_empty());
        let gone = s.expire(61);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].b4, h(1));
        assert!(matches!(reply(&mut s, h(3), Msg::Request, 62_000), Msg::Ack { ipv4, .. } if ipv4 == a));
        assert!(matches!(reply(&mut s, h(2), Msg::Release(b), 63_000), Msg::Ack { secs: 0, .. }));
        assert_eq!(s.len(), 1);
        // h(2) comes back and gets its old address.
        assert!(matches!(reply(&mut s, h(2), Msg::Request, 64_000), Msg::Ack { ipv4, .. } if ipv4 == b));
        assert_eq!((s.stats.granted, s.stats.expired, s.stats.released), (4, 1, 1));
    }

    #[test]
    fn floods_and_strangers_refused_and_counted() {
        let mut s = server("192.0.2.0/24", None);
        assert_eq!(reply(&mut s, "2001:db9::1".parse().unwrap(), Msg::Request, 0), Msg::Nak(nak::REFUSED));
        // 100 per second: the 101st request in the same millisecond is refused.
        let mut naks = 0;
        for i in 0..150u16 {
            if reply(&mut s, h(i + 10), Msg::Request, 5) == Msg::Nak(nak::REFUSED) {
                naks += 1;
            }
        }
        assert_eq!(naks, 50, "the stranger spent no token");
        assert_eq!(s.len(), 100);
        assert_eq!(s.handle(h(1), b"garbage", 2000), (None, false));
        assert_eq!(s.handle(h(1), &encode(Msg::Nak(1), 1), 2000), (None, false));
        assert_eq!(s.stats.malformed, 2);
        assert_eq!(s.stats.refused, 51);
    }

    #[test]
    fn leases_survive_a_restart_and_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("leases");
        let mut s = server("192.0.2.0/29", Some(f.clone()));
        let Msg::Ack { ipv4: a, .. } = reply(&mut s, h(1), Msg::Request, 1_000_000) else { panic!() };
        let Msg::Ack { ipv4: b, .. } = reply(&mut s, h(2), Msg::Request, 1_000_000) else { panic!() };
        s.save().unwrap();
        let mut t = server("192.0.2.0/29", Some(f.clone()));
        assert_eq!(t.load(1000).unwrap(), (2, 0));
        assert_eq!(t.table().lookup4(a, 1), Some(&h(1)));
        assert!(matches!(reply(&mut t, h(2), Msg::Renew(b), 1_010_000), Msg::Ack { .. }));
        // Expired at load time: dropped; garbage lines skipped.
        std::fs::write(&f, format!("{} {} 5\nnonsense\n", h(9), "192.0.2.3")).unwrap();
        let mut u = server("192.0.2.0/29", Some(f));
        assert_eq!(u.load(1000).unwrap(), (0, 2));
        // A reload keeps what is still in the new pool.
        let mut r = server("192.0.2.0/30", None);
        let kept = r.adopt(&t);
        assert_eq!(kept, [a, b].iter().filter(|x| x.octets()[3] < 3).count());
    }
}
