//! RFC 3263 server location for the runner: NAPTR (`SIP+D2U` /
//! `SIP+D2T`), then SRV (`_sip._udp` / `_sip._tcp`), then A (AAAA when
//! there is no A), over a stub resolver of its own that is bounded in
//! every way a flood of names could grow it (issue #29 D1):
//!
//! - a few UDP sockets shared by every query ([`SOCKETS_PER_FAMILY`] per
//!   address family of the nameservers), not one per lookup; an answer
//!   counts only from the server asked, with the query's ID (random) and
//!   question;
//! - at most `max-dns-lookups` lookups in flight, and one client (an IPv6
//!   prefix or an IPv4 address) at most its `client-share` of them; a
//!   lookup beyond either is refused ([`Resolution::Busy`]: the core
//!   answers 503 with Retry-After) instead of queued;
//! - each lookup has one deadline for all its queries (`dns-timeout`):
//!   [`Resolution::TimedOut`] (504) when it passes;
//! - answers are cached for their TTL (at most 5 minutes; no address 30 s,
//!   a timeout 5 s), at most [`CACHE_MAX`] names.
//!
//! The nameservers are `dns-servers`, or those of /etc/resolv.conf (its
//! `search` list is not used: SIP host names are fully qualified).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::net::UdpSocket;
use tokio::sync::{oneshot, Notify};

use crate::config::{Config, Transport};
use crate::realm::{LookupKey, Resolution, Resolver, Target};
use crate::shares::{ClientKey, Shares};

/// Sockets per address family the nameservers need.
pub const SOCKETS_PER_FAMILY: usize = 4;
/// Names cached at most.
pub const CACHE_MAX: usize = 4096;
/// How long answers are kept at most.
const MAX_TTL: Duration = Duration::from_secs(300);
/// How long "no address" is kept.
const NEG_TTL: Duration = Duration::from_secs(30);
/// How long a timeout is kept (a flood at one dead name waits, it does
/// not look again).
const TIMEOUT_TTL: Duration = Duration::from_secs(5);
/// Most records of one answer used.
const MAX_RECORDS: usize = 32;

/// One NAPTR record's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naptr {
    /// Order.
    pub order: u16,
    /// Preference.
    pub preference: u16,
    /// Flags (`s` for SRV).
    pub flags: String,
    /// Service (`SIP+D2U`, ...).
    pub service: String,
    /// Replacement (the SRV name).
    pub replacement: String,
}

/// RFC 3263 §4.1: the NAPTR records usable for SIP over UDP/TCP, in order
/// (order, then preference), as (transport, SRV name).
pub fn naptr_choices(mut recs: Vec<Naptr>) -> Vec<(Transport, String)> {
    recs.sort_by_key(|r| (r.order, r.preference));
    recs.into_iter()
        .filter(|r| r.flags.eq_ignore_ascii_case("s"))
        .filter_map(|r| {
            let t = if r.service.eq_ignore_ascii_case("SIP+D2U") {
                Transport::Udp
            } else if r.service.eq_ignore_ascii_case("SIP+D2T") {
                Transport::Tcp
            } else {
                return None;
            };
            Some((t, r.replacement.trim_end_matches('.').to_string()))
        })
        .collect()
}

/// RFC 2782 order: priority ascending, heavier weight first within a
/// priority (deterministic instead of the weighted lottery).
pub fn srv_order(mut recs: Vec<(u16, u16, u16, String)>) -> Vec<(u16, String)> {
    recs.sort_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
    recs.into_iter().filter(|r| r.3 != ".").map(|r| (r.2, r.3.trim_end_matches('.').to_string())).collect()
}

/// A query's waiting reply.
struct Waiter {
    server: SocketAddr,
    tx: oneshot::Sender<Vec<u8>>,
}

/// The sockets and the queries waiting on them.
struct Net {
    servers: Vec<SocketAddr>,
    /// (IPv6, socket).
    socks: Vec<(bool, Arc<UdpSocket>)>,
    /// By (socket index, query ID).
    waiters: Mutex<HashMap<(usize, u16), Waiter>>,
    rng: Mutex<u64>,
}

/// Why a query got no usable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueryError {
    /// No server answered in time.
    Timeout,
    /// The servers answered with failures (SERVFAIL, REFUSED, a bad reply).
    Failed,
}

impl Net {
    fn random(&self) -> u64 {
        let mut s = function::lock(&self.rng);
        // xorshift64*: IDs and socket choice, seeded from the process's
        // random hash keys.
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// One question to the servers in order, within `deadline`: the
    /// records of the first usable answer (none for NXDOMAIN or no data),
    /// with their lowest TTL.
    async fn query(&self, name: &Name, rtype: RecordType, deadline: Instant) -> Result<(Vec<RData>, u32), QueryError> {
        let mut timed_out = false;
        for (i, &server) in self.servers.iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(QueryError::Timeout);
            }
            // The time left, shared by the servers still to try.
            let per_try = left / (self.servers.len() - i) as u32;
            let fam: Vec<usize> = (0..self.socks.len()).filter(|&k| self.socks[k].0 == server.is_ipv6()).collect();
            if fam.is_empty() {
                continue;
            }
            let sock = fam[(self.random() as usize) % fam.len()];
            let (tx, rx) = oneshot::channel();
            let id = {
                let mut w = function::lock(&self.waiters);
                let mut id = self.random() as u16;
                while w.contains_key(&(sock, id)) {
                    id = id.wrapping_add(1);
                }
                w.insert((sock, id), Waiter { server, tx });
                id
            };
            let mut msg = Message::new();
            msg.set_id(id).set_message_type(MessageType::Query).set_op_code(OpCode::Query).set_recursion_desired(true);
            msg.add_query(Query::query(name.clone(), rtype));
            let sent = match msg.to_vec() {
                Ok(bytes) => self.socks[sock].1.send_to(&bytes, server).await.is_ok(),
                Err(_) => false,
            };
            let reply = if sent { tokio::time::timeout(per_try, rx).await.ok().and_then(Result::ok) } else { None };
            function::lock(&self.waiters).remove(&(sock, id));
            let Some(reply) = reply else {
                timed_out |= sent;
                continue;
            };
            let Ok(r) = Message::from_vec(&reply) else { continue };
            let asked = r.queries().first().is_some_and(|q| q.name() == name && q.query_type() == rtype);
            if r.message_type() != MessageType::Response || !asked {
                continue;
            }
            match r.response_code() {
                ResponseCode::NoError => {}
                ResponseCode::NXDomain => return Ok((Vec::new(), NEG_TTL.as_secs() as u32)),
                _ => continue,
            }
            let mut ttl = MAX_TTL.as_secs() as u32;
            let recs = r
                .answers()
                .iter()
                .filter(|a| a.record_type() == rtype)
                .take(MAX_RECORDS)
                .map(|a| {
                    ttl = ttl.min(a.ttl());
                    a.data().clone()
                })
                .collect();
            return Ok((recs, ttl));
        }
        Err(if timed_out { QueryError::Timeout } else { QueryError::Failed })
    }

    /// Hands each datagram of socket `k` to the query it answers.
    async fn read(self: Arc<Self>, k: usize) {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = self.socks[k].1.recv_from(&mut buf).await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            if n < 12 {
                continue;
            }
            let id = u16::from_be_bytes([buf[0], buf[1]]);
            let mut w = function::lock(&self.waiters);
            if w.get(&(k, id)).is_some_and(|x| x.server == from) {
                if let Some(x) = w.remove(&(k, id)) {
                    let _ = x.tx.send(buf[..n].to_vec());
                }
            }
        }
    }
}

/// A finished lookup: its answer and how long to keep it.
type Outcome = (Resolution, Duration);

/// What the lookup tasks hand back.
#[derive(Default)]
struct Done {
    queue: VecDeque<(LookupKey, Outcome)>,
}

/// The runner's resolver (see the module documentation).
pub struct StubResolver {
    net: Arc<Net>,
    done: Arc<Mutex<Done>>,
    wake: Arc<Notify>,
    lookups: Shares,
    in_flight: HashMap<LookupKey, ClientKey>,
    cache: HashMap<LookupKey, (Instant, Resolution)>,
    timeout: Duration,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

/// The nameservers of a resolv.conf text (port 53).
pub fn resolv_conf_servers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_ascii_whitespace();
            (it.next()? == "nameserver").then_some(())?;
            let a = it.next()?;
            // A scoped IPv6 address (fe80::1%eth0) is not supported: skipped.
            a.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
        })
        .collect()
}

impl StubResolver {
    /// The resolver for `cfg` (`dns-servers`, else /etc/resolv.conf), with
    /// its sockets bound; `wake` is notified when lookups finish. Must be
    /// called inside a tokio runtime.
    pub fn new(cfg: &Config, wake: Arc<Notify>) -> Result<StubResolver, String> {
        let servers = if cfg.dns_servers.is_empty() {
            let text = std::fs::read_to_string("/etc/resolv.conf").map_err(|e| format!("/etc/resolv.conf: {e}"))?;
            resolv_conf_servers(&text)
        } else {
            cfg.dns_servers.clone()
        };
        if servers.is_empty() {
            return Err("no nameserver (set [alg] dns-servers or a nameserver in /etc/resolv.conf)".into());
        }
        let mut socks = Vec::new();
        for v6 in [false, true] {
            if !servers.iter().any(|s| s.is_ipv6() == v6) {
                continue;
            }
            for _ in 0..SOCKETS_PER_FAMILY {
                let any: SocketAddr = if v6 { "[::]:0" } else { "0.0.0.0:0" }.parse().map_err(|_| "address")?;
                let s = std::net::UdpSocket::bind(any).map_err(|e| format!("DNS socket on {any}: {e}"))?;
                s.set_nonblocking(true).map_err(|e| e.to_string())?;
                socks.push((v6, Arc::new(UdpSocket::from_std(s).map_err(|e| e.to_string())?)));
            }
        }
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id().into());
            h.finish() | 1
        };
        let net = Arc::new(Net { servers, socks, waiters: Mutex::default(), rng: Mutex::new(seed) });
        let readers = (0..net.socks.len()).map(|k| tokio::spawn(net.clone().read(k))).collect();
        Ok(StubResolver {
            net,
            done: Arc::default(),
            wake,
            lookups: Shares::new(cfg.max_dns_lookups as u64, cfg.client_share),
            in_flight: HashMap::new(),
            cache: HashMap::new(),
            timeout: cfg.dns_timeout,
            readers,
        })
    }

    /// The nameservers asked.
    pub fn servers(&self) -> &[SocketAddr] {
        &self.net.servers
    }

    /// Sockets it holds.
    pub fn sockets(&self) -> usize {
        self.net.socks.len()
    }

    fn cache_put(&mut self, key: LookupKey, res: Resolution, ttl: Duration) {
        let now = Instant::now();
        if self.cache.len() >= CACHE_MAX {
            self.cache.retain(|_, (exp, _)| *exp > now);
        }
        if self.cache.len() >= CACHE_MAX {
            if let Some(k) = self.cache.keys().next().cloned() {
                self.cache.remove(&k);
            }
        }
        self.cache.insert(key, (now + ttl, res));
    }
}

impl Drop for StubResolver {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

impl Resolver for StubResolver {
    fn resolve(&mut self, client: ClientKey, key: &LookupKey, now: Instant) -> Resolution {
        match self.cache.get(key) {
            Some((exp, r)) if *exp > now => return r.clone(),
            Some(_) => {
                self.cache.remove(key);
            }
            None => {}
        }
        if self.in_flight.contains_key(key) {
            return Resolution::Pending;
        }
        if self.lookups.take(client, 1).is_err() {
            return Resolution::Busy;
        }
        self.in_flight.insert(key.clone(), client);
        let (net, done, wake, key, timeout) =
            (self.net.clone(), self.done.clone(), self.wake.clone(), key.clone(), self.timeout);
        tokio::spawn(async move {
            let deadline = Instant::now() + timeout;
            let out = match tokio::time::timeout(timeout, locate(&net, &key, deadline)).await {
                Ok(o) => o,
                Err(_) => (Resolution::TimedOut, TIMEOUT_TTL),
            };
            function::lock(&done).queue.push_back((key, out));
            wake.notify_one();
        });
        Resolution::Pending
    }

    fn poll_done(&mut self) -> Option<(LookupKey, Resolution)> {
        let (key, (res, ttl)) = function::lock(&self.done).queue.pop_front()?;
        if let Some(c) = self.in_flight.remove(&key) {
            self.lookups.give_back(c, 1);
        }
        self.cache_put(key.clone(), res.clone(), ttl);
        Some((key, res))
    }

    fn reconfigure(&mut self, cfg: &Config) {
        self.lookups.set_limits(cfg.max_dns_lookups as u64, cfg.client_share);
        self.timeout = cfg.dns_timeout;
    }

    fn in_flight(&self) -> (usize, usize) {
        (self.in_flight.len(), self.lookups.limit() as usize)
    }
}

fn fqdn(host: &str) -> Option<Name> {
    let mut n = Name::from_ascii(host).ok()?;
    n.set_fqdn(true);
    Some(n)
}

/// A query's records, with a timeout remembered in `timed_out`.
async fn records(net: &Net, name: &str, t: RecordType, deadline: Instant, timed_out: &mut bool) -> (Vec<RData>, u32) {
    let Some(n) = fqdn(name) else { return (Vec::new(), NEG_TTL.as_secs() as u32) };
    match net.query(&n, t, deadline).await {
        Ok(r) => r,
        Err(e) => {
            *timed_out |= e == QueryError::Timeout;
            (Vec::new(), 0)
        }
    }
}

/// A then AAAA (only when there is no A), as the system resolver's
/// default strategy did.
async fn ips(net: &Net, host: &str, deadline: Instant, timed_out: &mut bool, ttl: &mut u32) -> Vec<IpAddr> {
    let (a, t) = records(net, host, RecordType::A, deadline, timed_out).await;
    let mut v: Vec<IpAddr> =
        a.iter().filter_map(|r| if let RData::A(a) = r { Some(IpAddr::V4(a.0)) } else { None }).collect();
    if v.is_empty() {
        let (aaaa, t6) = records(net, host, RecordType::AAAA, deadline, timed_out).await;
        v = aaaa.iter().filter_map(|r| if let RData::AAAA(a) = r { Some(IpAddr::V6(a.0)) } else { None }).collect();
        *ttl = (*ttl).min(t6);
    } else {
        *ttl = (*ttl).min(t);
    }
    v
}

async fn srv(
    net: &Net,
    name: &str,
    tp: Transport,
    deadline: Instant,
    timed_out: &mut bool,
    ttl: &mut u32,
) -> Vec<Target> {
    let (recs, t) = records(net, name, RecordType::SRV, deadline, timed_out).await;
    *ttl = (*ttl).min(t);
    let recs = recs
        .iter()
        .filter_map(|r| match r {
            RData::SRV(s) => Some((s.priority(), s.weight(), s.port(), s.target().to_utf8())),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (port, host) in srv_order(recs).into_iter().take(8) {
        for ip in ips(net, &host, deadline, timed_out, ttl).await {
            out.push(Target { addr: SocketAddr::new(ip, port), transport: tp });
        }
    }
    out
}

fn ready_or(v: Vec<Target>, ttl: u32, timed_out: bool, host: &str) -> Outcome {
    if !v.is_empty() {
        let ttl = Duration::from_secs(u64::from(ttl)).clamp(Duration::from_secs(1), MAX_TTL);
        (Resolution::Ready(v), ttl)
    } else if timed_out {
        (Resolution::TimedOut, TIMEOUT_TTL)
    } else {
        (Resolution::Failed(format!("no address for {host}")), NEG_TTL)
    }
}

/// RFC 3263 §4 for one URI's host, port and transport.
async fn locate(net: &Net, key: &LookupKey, deadline: Instant) -> Outcome {
    let (host, port, transport) = (key.host.as_str(), key.port, key.transport);
    let mut timed_out = false;
    let mut ttl = MAX_TTL.as_secs() as u32;
    // §4.1/§4.2: an explicit port or transport skips NAPTR (and a port SRV).
    if let Some(p) = port {
        let t = transport.unwrap_or_default();
        let v = ips(net, host, deadline, &mut timed_out, &mut ttl).await;
        let v = v.into_iter().map(|ip| Target { addr: SocketAddr::new(ip, p), transport: t }).collect();
        return ready_or(v, ttl, timed_out, host);
    }
    if transport.is_none() {
        let (recs, t) = records(net, host, RecordType::NAPTR, deadline, &mut timed_out).await;
        ttl = ttl.min(t);
        let recs = recs
            .iter()
            .filter_map(|d| match d {
                RData::NAPTR(n) => Some(Naptr {
                    order: n.order(),
                    preference: n.preference(),
                    flags: String::from_utf8_lossy(n.flags()).into_owned(),
                    service: String::from_utf8_lossy(n.services()).into_owned(),
                    replacement: n.replacement().to_utf8(),
                }),
                _ => None,
            })
            .collect();
        for (t, name) in naptr_choices(recs) {
            let v = srv(net, &name, t, deadline, &mut timed_out, &mut ttl).await;
            if !v.is_empty() {
                return ready_or(v, ttl, false, host);
            }
        }
    }
    let ts: Vec<Transport> = match transport {
        Some(t) => vec![t],
        None => vec![Transport::Udp, Transport::Tcp],
    };
    for t in ts {
        let name = format!("_sip._{}.{host}", if t == Transport::Udp { "udp" } else { "tcp" });
        let v = srv(net, &name, t, deadline, &mut timed_out, &mut ttl).await;
        if !v.is_empty() {
            return ready_or(v, ttl, false, host);
        }
    }
    let t = transport.unwrap_or_default();
    let v = ips(net, host, deadline, &mut timed_out, &mut ttl).await;
    let v = v.into_iter().map(|ip| Target { addr: SocketAddr::new(ip, 5060), transport: t }).collect();
    ready_or(v, ttl, timed_out, host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3263_4_1_naptr_selection() {
        let n = |o, p, f: &str, s: &str, r: &str| Naptr {
            order: o,
            preference: p,
            flags: f.into(),
            service: s.into(),
            replacement: r.into(),
        };
        let v = naptr_choices(vec![
            n(50, 50, "s", "SIPS+D2T", "_sips._tcp.example.com."),
            n(90, 50, "s", "SIP+D2T", "_sip._tcp.example.com."),
            n(100, 50, "s", "SIP+D2U", "_sip._udp.example.com."),
            n(10, 10, "u", "SIP+D2U", "!regexp!"),
        ]);
        assert_eq!(
            v,
            [
                (Transport::Tcp, "_sip._tcp.example.com".to_string()),
                (Transport::Udp, "_sip._udp.example.com".to_string())
            ]
        );
    }

    #[test]
    fn nameservers_of_resolv_conf() {
        let t = "# c\nsearch example\nnameserver 192.0.2.53\nnameserver  2001:db8::53\nnameserver fe80::1%eth0\noptions ndots:2\n";
        let v = resolv_conf_servers(t);
        assert_eq!(v, ["192.0.2.53:53".parse::<SocketAddr>().unwrap(), "[2001:db8::53]:53".parse().unwrap()]);
    }

    #[test]
    fn rfc2782_srv_order() {
        let v = srv_order(vec![
            (20, 0, 5062, "c.example.".into()),
            (10, 1, 5060, "b.example.".into()),
            (10, 5, 5061, "a.example.".into()),
            (0, 0, 0, ".".into()),
        ]);
        assert_eq!(
            v,
            [(5061, "a.example".to_string()), (5060, "b.example".to_string()), (5062, "c.example".to_string())]
        );
    }
}
