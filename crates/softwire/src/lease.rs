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
//! ## Budgets
//!
//! A client is not an address but its IPv6 prefix (`client-prefix-length`,
//! a /64 by default: a host can use any number of addresses of its /64).
//! Each client holds at most `max-leases-per-client` leases (NAK 4 beyond:
//! one host cannot take the pool with many addresses) and sends at most
//! `max-requests-per-second-per-client` messages (NAK 3 beyond). A
//! global `max-requests-per-second` bounds the messages of clients that
//! hold no lease (new work): a flood of REQUESTs from other clients never
//! refuses the RENEW or RELEASE of a lease held (only its own client's rate
//! can).
//!
//! The lease table is written to `lease-file` (one `B4 IPV4 EXPIRY` line
//! each, expiry in Unix seconds) atomically (a temporary file, flushed to
//! disk, renamed over it) at most once per `lease-file-interval` while
//! leases change, and at shutdown ([`LeaseServer::save_if_due`],
//! [`LeaseServer::save`]); it is read back at start and on reload: leases
//! survive both.

use crate::binding::{Binding, BindingTable};
use crate::portset::PsidMap;
use budget::{Bucket, ClientKey, FairShare, RateTable};
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
    /// Refused: source outside the allowed prefixes, or a rate limit.
    pub const REFUSED: u8 = 3;
    /// The client (its prefix) holds `max-leases-per-client` leases.
    pub const SHARE: u8 = 4;
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
    /// Messages per second at most from clients that hold no lease (new
    /// work; a lease flood is refused and counted).
    pub max_requests_per_sec: u32,
    /// The client of an address: its IPv6 prefix of this length.
    pub client_prefix_len: u8,
    /// Leases one client holds at most.
    pub max_leases_per_client: usize,
    /// Messages per second at most from one client (its burst: as many).
    pub client_requests_per_sec: u32,
    /// The lease file is written at most once per this many milliseconds.
    pub file_interval_ms: u64,
}

impl LeaseConfig {
    /// A server leasing `pool` with the default budgets (any client, one
    /// hour leases, no file, 1000 requests a second, a /64 client with 4
    /// leases and 10 messages a second, the file written at most once a
    /// second).
    pub fn new(pool: Vec<Prefix4>, tep: Ipv6Addr) -> Self {
        LeaseConfig {
            pool,
            clients: Vec::new(),
            lease_secs: 3600,
            tep,
            file: None,
            max_requests_per_sec: DEFAULT_MAX_REQUESTS_PER_SEC,
            client_prefix_len: budget::DEFAULT_V6_PREFIX,
            max_leases_per_client: DEFAULT_MAX_LEASES_PER_CLIENT,
            client_requests_per_sec: DEFAULT_CLIENT_REQUESTS_PER_SEC,
            file_interval_ms: DEFAULT_FILE_INTERVAL_MS,
        }
    }
}

/// Default `max-requests-per-second`.
pub const DEFAULT_MAX_REQUESTS_PER_SEC: u32 = 1000;
/// Default `max-leases-per-client`.
pub const DEFAULT_MAX_LEASES_PER_CLIENT: usize = 4;
/// Default `max-requests-per-second-per-client`.
pub const DEFAULT_CLIENT_REQUESTS_PER_SEC: u32 = 10;
/// Default `lease-file-interval` (ms).
pub const DEFAULT_FILE_INTERVAL_MS: u64 = 1000;
/// Clients whose message rates are tracked at once (a bounded table:
/// [`budget::RateTable`]).
const RATE_CLIENTS: usize = 4096;

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
    /// NAK: refused, the source is outside `clients`.
    pub refused: u64,
    /// NAK: refused, over `max-requests-per-second` (a client holding no lease).
    pub rate_limited: u64,
    /// NAK: refused, over `max-requests-per-second-per-client`.
    pub client_rate_limited: u64,
    /// NAK: the client holds `max-leases-per-client` leases.
    pub share_exceeded: u64,
    /// Lease file writes.
    pub file_writes: u64,
    /// Lease file writes that failed.
    pub file_errors: u64,
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
    /// The global rate of messages from clients holding no lease.
    bucket: Bucket,
    /// Each client's message rate.
    rates: RateTable<ClientKey>,
    /// Leases per client.
    share: FairShare<ClientKey>,
    /// The table changed since the file was last written.
    dirty: bool,
    /// When the file was last written (the caller's ms).
    saved_ms: Option<u64>,
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
        let rate = cfg.client_requests_per_sec;
        LeaseServer {
            bucket: Bucket::full(cfg.max_requests_per_sec, 0),
            rates: RateTable::new(rate, rate, RATE_CLIENTS),
            share: FairShare::new(free.len(), cfg.max_leases_per_client),
            dirty: false,
            saved_ms: None,
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

    /// The client (prefix) of `from`.
    pub fn client(&self, from: &Ipv6Addr) -> ClientKey {
        ClientKey::v6(*from, self.cfg.client_prefix_len)
    }

    /// Leases the client of `from` holds.
    pub fn leases_of_client(&self, from: &Ipv6Addr) -> usize {
        self.share.held(&self.client(from))
    }

    fn insert(&mut self, l: Lease) {
        self.leases.insert(l.b4, l);
        self.by4.insert(l.ipv4, l.b4);
        self.last.insert(l.ipv4, l.b4);
        self.dirty = true;
    }

    fn remove(&mut self, b4: &Ipv6Addr) -> Option<Lease> {
        let l = self.leases.remove(b4)?;
        self.by4.remove(&l.ipv4);
        self.free.push_back(l.ipv4);
        let k = self.client(b4);
        self.share.release(&k);
        self.dirty = true;
        Some(l)
    }

    /// The rate limits, in order: the client's own, then (for a client
    /// holding no lease: new work) the global one. `Err`: the counter of
    /// the refusal.
    fn rate_check(&mut self, from: &Ipv6Addr, now_ms: u64) -> Result<(), ()> {
        let k = self.client(from);
        if !self.rates.take(&k, now_ms) {
            self.stats.client_rate_limited += 1;
            return Err(());
        }
        let holds = self.leases.contains_key(from);
        if !holds && !self.bucket.take(self.cfg.max_requests_per_sec, self.cfg.max_requests_per_sec, now_ms) {
            self.stats.rate_limited += 1;
            return Err(());
        }
        Ok(())
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
        if !allowed {
            self.stats.refused += 1;
            return (Some(encode(Msg::Nak(nak::REFUSED), xid)), false);
        }
        if self.rate_check(&from, now_ms).is_err() {
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
                    self.dirty = true;
                    let a = l.ipv4;
                    return (ack(a, secs), true);
                }
                if self.free.is_empty() {
                    self.stats.exhausted += 1;
                    return (Some(encode(Msg::Nak(nak::EXHAUSTED), xid)), false);
                }
                // The client's share of the pool (its prefix, not this address).
                let k = self.client(&from);
                if self.share.try_acquire(&k).is_err() {
                    self.stats.share_exceeded += 1;
                    return (Some(encode(Msg::Nak(nak::SHARE), xid)), false);
                }
                // The host's previous address if still free, else the least recently used.
                let prev = self.last.iter().find(|(_, b)| **b == from).map(|(a, _)| *a);
                let a = match prev.filter(|a| self.take(*a)).or_else(|| self.free.pop_front()) {
                    Some(a) => a,
                    None => {
                        self.share.release(&k);
                        self.stats.exhausted += 1;
                        return (Some(encode(Msg::Nak(nak::EXHAUSTED), xid)), false);
                    }
                };
                self.insert(Lease { b4: from, ipv4: a, expires: now + u64::from(secs) });
                self.stats.granted += 1;
                (ack(a, secs), true)
            }
            Msg::Renew(a) => match self.leases.get_mut(&from) {
                Some(l) if l.ipv4 == a => {
                    l.expires = now + u64::from(secs);
                    self.stats.renewed += 1;
                    self.dirty = true;
                    (ack(a, secs), true)
                }
                _ => {
                    self.stats.no_lease += 1;
                    (Some(encode(Msg::Nak(nak::NO_LEASE), xid)), false)
                }
            },
            Msg::Release(a) => match self.leases.get(&from) {
                Some(l) if l.ipv4 == a => {
                    self.remove(&from);
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
            self.remove(&l.b4);
            self.stats.expired += 1;
        }
        gone
    }

    /// Whether the table changed since the file was last written.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Write the lease file when the table changed and the last write is
    /// at least `lease-file-interval` old at `now_ms` (the caller's clock):
    /// a flood of lease changes costs one write per interval. Returns
    /// whether it wrote; a failed write is counted and tried again an
    /// interval later.
    pub fn save_if_due(&mut self, now_ms: u64) -> std::io::Result<bool> {
        let due = self.saved_ms.is_none_or(|t| now_ms.saturating_sub(t) >= self.cfg.file_interval_ms);
        if !self.dirty || !due {
            return Ok(false);
        }
        self.saved_ms = Some(now_ms);
        self.save().map(|()| true)
    }

    /// Write the lease file now (at shutdown, after a reload): atomically
    /// (a temporary file flushed to disk and renamed over it, the
    /// directory flushed too). Counted.
    pub fn save(&mut self) -> std::io::Result<()> {
        let Some(path) = self.cfg.file.clone() else {
            self.dirty = false;
            return Ok(());
        };
        let r = write_atomically(&path, &self.file_text());
        match &r {
            Ok(()) => {
                self.stats.file_writes += 1;
                self.dirty = false;
            }
            Err(_) => self.stats.file_errors += 1,
        }
        r
    }

    fn file_text(&self) -> String {
        let mut text = String::from("# v6gate DSTM leases: B4 IPV4 EXPIRY(unix seconds)\n");
        let mut v: Vec<&Lease> = self.leases.values().collect();
        v.sort_by_key(|l| u32::from(l.ipv4));
        for l in v {
            text.push_str(&format!("{} {} {}\n", l.b4, l.ipv4, l.expires));
        }
        text
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
            if expires <= now_secs || !self.restore(Lease { b4, ipv4, expires }) {
                skipped += 1;
                continue;
            }
            kept += 1;
        }
        // What was read is what the file says.
        self.dirty = false;
        Ok((kept, skipped))
    }

    /// Enter a lease kept from before (the file, a reload) when its host
    /// holds none and its address is free in this pool; it counts in its
    /// client's share even above a share lowered since (a lease held is
    /// never taken back for a budget). Returns whether it was kept.
    fn restore(&mut self, l: Lease) -> bool {
        if self.leases.contains_key(&l.b4) || self.by4.contains_key(&l.ipv4) || !self.take(l.ipv4) {
            return false;
        }
        let k = self.client(&l.b4);
        self.share.keep(&k);
        self.insert(l);
        true
    }

    /// Carry the leases of `old` (a reload): those whose address is still
    /// in this server's pool are kept.
    pub fn adopt(&mut self, old: &LeaseServer) -> usize {
        let mut n = 0;
        for l in old.leases.values() {
            n += usize::from(self.restore(*l));
        }
        self.stats = old.stats.clone();
        self.saved_ms = old.saved_ms;
        n
    }
}

fn tmp_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Write `text` to `path` so that a crash leaves the old file or the new
/// one: a temporary file beside it, flushed to disk, renamed over it, and
/// the directory flushed (the rename itself).
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = tmp_path(path);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pool: &str, file: Option<PathBuf>) -> LeaseConfig {
        LeaseConfig {
            clients: vec!["2001:db8::/32".parse().unwrap()],
            lease_secs: 60,
            file,
            max_requests_per_sec: 100,
            ..LeaseConfig::new(vec![pool.parse().unwrap()], "2001:db8:ffff::1".parse().unwrap())
        }
    }

    fn server(pool: &str, file: Option<PathBuf>) -> LeaseServer {
        LeaseServer::new(config(pool, file))
    }

    /// Host `n`, alone in its /64 (a client of its own).
    fn h(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 1, n, 0, 0, 0, 1)
    }

    /// Address `n` of one /64 (one client).
    fn one64(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0xa, 0, n, 1)
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
        assert_eq!((s.stats.malformed, s.stats.refused, s.stats.rate_limited), (2, 1, 50));
    }

    /// Issue #29 D9: one host with 126 addresses of its /64 took the whole
    /// pool. The client is the /64: it gets its share (4), NAK 4 beyond.
    #[test]
    fn many_addresses_of_one_prefix_get_one_share_of_the_pool() {
        let mut s = server("192.0.2.0/24", None);
        let mut acks = 0;
        for i in 0..126u16 {
            // Five a second: under the client's rate.
            match reply(&mut s, one64(i), Msg::Request, u64::from(i) * 200) {
                Msg::Ack { .. } => acks += 1,
                m => assert_eq!(m, Msg::Nak(nak::SHARE)),
            }
        }
        assert_eq!((acks, s.leases_of_client(&one64(999))), (DEFAULT_MAX_LEASES_PER_CLIENT, 4));
        assert_eq!(s.stats.share_exceeded, 122);
        // Another client is served; a lease given back makes room.
        assert!(matches!(reply(&mut s, h(1), Msg::Request, 30_000), Msg::Ack { .. }));
        let Some(a) = s.leases().find(|l| l.b4 == one64(0)).map(|l| l.ipv4) else { panic!("one64(0) holds a lease") };
        assert!(matches!(reply(&mut s, one64(0), Msg::Release(a), 30_200), Msg::Ack { secs: 0, .. }));
        assert!(matches!(reply(&mut s, one64(77), Msg::Request, 30_400), Msg::Ack { .. }));
        // Expiry gives the share back too.
        s.expire(30 + 61);
        assert_eq!(s.leases_of_client(&one64(0)), 0);
        // A /128 client: each address its own.
        let mut per_address = LeaseServer::new(LeaseConfig { client_prefix_len: 128, ..config("192.0.2.0/24", None) });
        for i in 0..6u16 {
            assert!(matches!(reply(&mut per_address, one64(i), Msg::Request, u64::from(i) * 200), Msg::Ack { .. }));
        }
    }

    /// Issue #29 D9: a flooder's REQUESTs used up the one global bucket
    /// and other clients' RENEWs were refused. The global limit is for
    /// clients holding no lease; each client has its own rate.
    #[test]
    fn a_flood_never_refuses_another_clients_renewal() {
        let mut s = server("192.0.2.0/24", None);
        let Msg::Ack { ipv4: mine, .. } = reply(&mut s, h(1), Msg::Request, 0) else { panic!() };
        // 500 REQUESTs in one millisecond from 500 clients: 100 tokens.
        let mut refused = 0;
        for i in 0..500u16 {
            refused += usize::from(reply(&mut s, h(i + 100), Msg::Request, 10) == Msg::Nak(nak::REFUSED));
        }
        assert_eq!((refused, s.stats.rate_limited), (400, 400), "100 tokens");
        // The lease holder renews, requests again and releases in that same millisecond.
        assert!(matches!(reply(&mut s, h(1), Msg::Renew(mine), 10), Msg::Ack { ipv4, .. } if ipv4 == mine));
        assert!(matches!(reply(&mut s, h(1), Msg::Request, 10), Msg::Ack { ipv4, .. } if ipv4 == mine));
        // A client flooding RENEWs of its own lease meets its own limit only.
        let Some(f) = s.leases().find(|l| l.b4 == h(100)).map(|l| l.ipv4) else { panic!("h(100) holds a lease") };
        let naks = (0..20).filter(|_| reply(&mut s, h(100), Msg::Renew(f), 10) == Msg::Nak(nak::REFUSED)).count();
        assert_eq!(naks, 20 - (DEFAULT_CLIENT_REQUESTS_PER_SEC as usize - 1), "its burst less the REQUEST");
        assert!(matches!(reply(&mut s, h(1), Msg::Release(mine), 10), Msg::Ack { secs: 0, .. }));
        assert_eq!(s.stats.client_rate_limited, naks as u64);
    }

    /// Issue #29 D9: every REQUEST rewrote the lease file. It is written
    /// at most once per interval while leases change, and on demand (at
    /// shutdown), atomically; what it holds reads back.
    #[test]
    fn the_lease_file_is_written_at_most_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("leases");
        let mut s =
            LeaseServer::new(LeaseConfig { max_requests_per_sec: 1000, ..config("192.0.2.0/24", Some(f.clone())) });
        assert!(!s.save_if_due(0).unwrap(), "nothing changed: nothing written");
        let mut writes = 0;
        for i in 0..200u16 {
            let t = 1_000_000 + u64::from(i) * 5; // 200 grants within one second
            reply(&mut s, h(i + 1), Msg::Request, t);
            writes += usize::from(s.save_if_due(t).unwrap());
        }
        assert_eq!((writes, s.stats.file_writes), (1, 1), "one write for 200 changes in a second");
        assert!(s.is_dirty());
        assert!(s.save_if_due(1_001_000).unwrap(), "the interval passed");
        assert!(!s.is_dirty() && !f.with_extension("tmp").exists());
        let mut back = server("192.0.2.0/24", Some(f.clone()));
        assert_eq!(back.load(1000).unwrap(), (200, 0));
        // A change then the shutdown's write.
        let a = s.leases().find(|l| l.b4 == h(1)).unwrap().ipv4;
        reply(&mut s, h(1), Msg::Release(a), 1_001_100);
        assert!(!s.save_if_due(1_001_100).unwrap());
        s.save().unwrap();
        let mut back = server("192.0.2.0/24", Some(f));
        assert_eq!(back.load(1000).unwrap(), (199, 0));
        assert_eq!(s.stats.file_writes, 3);
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
