//! The deterministic core: an RFC 3261 §16 stateful proxy between the two
//! realms. The caller hands it datagrams / stream messages and the time;
//! it returns what to send ([`Alg::poll_transmit`]) and when to call it
//! again ([`Alg::poll_timeout`]). No sockets, no clock, no DNS of its own.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, Transport};
use crate::dialog::Dialog;
use crate::emit;
use crate::media::MediaControl;
use crate::msg::{Message, Name, Reject, Via};
use crate::realm::{LookupKey, Realm, Resolution, Resolver};
use crate::shares::ClientKey;
use crate::state::Budgets;
pub use crate::stats::Stats;
use crate::stats::{local_code_index, method_index, Refusal};
use crate::txn::*;
use crate::uri::{self, host_of, Host};

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// To whom (with the realm that says which listener sends it).
    pub peer: Peer,
    /// The bytes.
    pub data: Vec<u8>,
}

/// One incoming message.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// From whom.
    pub peer: &'a Peer,
    /// The bytes (one datagram, or one framed stream message).
    pub data: &'a [u8],
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The ALG core.
pub struct Alg {
    pub(crate) cfg: Config,
    pub(crate) timers_cfg: Timers,
    pub(crate) resolver: Box<dyn Resolver>,
    pub(crate) media: Option<Box<dyn MediaControl>>,
    pub(crate) server: Map<Arc<ServerKey>, ServerTxn>,
    /// Server transactions by id (what their timers name).
    pub(crate) server_ids: Map<u64, Arc<ServerKey>>,
    pub(crate) client: Map<String, ClientTxn>,
    /// Client transactions by id.
    pub(crate) client_ids: Map<u64, String>,
    pub(crate) dialogs: Map<Arc<str>, Dialog>,
    /// Dialogs by id.
    pub(crate) dialog_ids: Map<u64, Arc<str>>,
    pub(crate) timers: TimerQueue,
    out: VecDeque<Transmit>,
    /// Requests waiting for a DNS lookup, by lookup.
    pub(crate) parked: Map<LookupKey, crate::dnswait::Waiting>,
    /// Lookups with requests waiting, by id (their deadline timers).
    pub(crate) parked_ids: Map<u64, LookupKey>,
    /// Requests parked now.
    pub(crate) parked_count: usize,
    /// A finished lookup's answer while its parked requests run again.
    pub(crate) answer: Option<(LookupKey, Resolution)>,
    rate: HashMap<ClientKey, Bucket, foldhash::fast::RandomState>,
    rate_sweep: Option<Instant>,
    /// What transactions, dialogs and parked requests may hold.
    pub(crate) budgets: Budgets,
    /// The refusal log lines' rate limit, per [`Refusal`] and for the other
    /// warnings (by their message).
    pub(crate) logs: dstpolicy::RateLog<Refusal>,
    pub(crate) warn_log: dstpolicy::RateLog<&'static str>,
    /// Where requests may go (None: only the ALG's own listeners are refused).
    pub(crate) policy: Option<Arc<dstpolicy::Policy>>,
    next_id: u64,
    /// The time of the event being handled (for work started deep down,
    /// e.g. a media delete when a dialog is released).
    pub(crate) clock: Instant,
    /// Calls with a media command in flight, and their work queued behind it.
    pub(crate) media_busy: Map<String, VecDeque<crate::pending::Work>>,
    /// Media commands in flight, by ticket.
    pub(crate) media_inflight: HashMap<u64, crate::pending::InFlight>,
    /// Counters.
    pub stats: Stats,
    /// Our host:port in headers, IPv4 realm then IPv6 (fixed: a reload
    /// keeps the listen and advertised addresses).
    hostport: [String; 2],
}

/// The core's tables: foldhash, several times faster than SipHash on the
/// short string keys looked up for every message, and seeded at random per
/// table like std's, so keys a peer chooses (Call-IDs, branches) cannot be
/// aimed at one bucket.
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

pub(crate) const ENC_PREFIX: &str = "alg-";
/// Most sources the rate limiter remembers.
const RATE_SOURCES_MAX: usize = 65_536;

/// FNV-1a's offset basis (the hash of nothing).
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over `data`, continuing from `h` ([`FNV_OFFSET`] to start):
/// stable across runs and builds.
pub(crate) fn fnv1a(h: u64, data: &[u8]) -> u64 {
    data.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// FNV-1a of `parts`, each ended by a 0xff byte (which no UTF-8 text
/// holds, so ("ab", "c") and ("a", "bc") differ).
pub(crate) fn hash(parts: &[&str]) -> u64 {
    parts.iter().fold(FNV_OFFSET, |h, p| fnv1a(fnv1a(h, p.as_bytes()), &[0xff]))
}

pub(crate) fn reason_of(code: u16) -> &'static str {
    match code {
        100 => "Trying",
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        403 => "Forbidden",
        415 => "Unsupported Media Type",
        416 => "Unsupported URI Scheme",
        420 => "Bad Extension",
        481 => "Call/Transaction Does Not Exist",
        482 => "Loop Detected",
        483 => "Too Many Hops",
        487 => "Request Terminated",
        488 => "Not Acceptable Here",
        500 => "Server Internal Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Server Time-out",
        505 => "Version Not Supported",
        513 => "Message Too Large",
        _ => "Error",
    }
}

pub(crate) fn server_key(m: &Message, method: &str) -> Option<ServerKey> {
    let via = m.top_via()?;
    let sent_by = format!("{}:{}", host_text(&via.host), via.port.unwrap_or(5060));
    let method = if method == "ACK" { "INVITE".to_string() } else { method.to_string() };
    let branch = match via.branch() {
        Some(b) if b.starts_with("z9hG4bK") => b.to_string(),
        // RFC 2543 peers: identify by the request's identity instead.
        _ => format!(
            "2543|{}|{}|{}|{}",
            m.call_id(),
            m.from_tag().unwrap_or(""),
            m.cseq().map_or(0, |c| c.0),
            m.vias().first().copied().unwrap_or("")
        ),
    };
    Some(ServerKey { branch, sent_by, method })
}

pub(crate) fn host_text(h: &Host) -> String {
    match h {
        Host::V4(a) => a.to_string(),
        Host::V6(a) => format!("[{a}]"),
        Host::Name(n) => n.to_ascii_lowercase(),
    }
}

pub(crate) fn client_key(branch: &str, method: &str) -> String {
    format!("{branch}|{method}")
}

impl Alg {
    /// A core. `media` None: signalling only (no SDP rewriting).
    pub fn new(cfg: Config, resolver: Box<dyn Resolver>, media: Option<Box<dyn MediaControl>>) -> Alg {
        let timers_cfg = Timers::new(cfg.t1);
        let budgets = Budgets::new(&cfg);
        let mut alg = Alg {
            cfg,
            timers_cfg,
            resolver,
            media,
            server: Map::default(),
            server_ids: Map::default(),
            client: Map::default(),
            client_ids: Map::default(),
            dialogs: Map::default(),
            dialog_ids: Map::default(),
            timers: TimerQueue::default(),
            out: VecDeque::new(),
            parked: Map::default(),
            parked_ids: Map::default(),
            parked_count: 0,
            answer: None,
            rate: HashMap::default(),
            rate_sweep: None,
            budgets,
            logs: Default::default(),
            warn_log: Default::default(),
            policy: None,
            next_id: 1,
            clock: Instant::now(),
            media_busy: Map::default(),
            media_inflight: HashMap::new(),
            stats: Stats::default(),
            hostport: Default::default(),
        };
        alg.hostport = [alg.hostport_of(Realm::V4), alg.hostport_of(Realm::V6)];
        alg
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Every next hop goes through `policy` too (the destination policy of
    /// the plane `alg`: loopback, link-local, multicast, broadcast, the
    /// gateway's own addresses and what embeds them, `next-hop-allow` and
    /// `next-hop-deny`).
    pub fn set_policy(&mut self, policy: Arc<dstpolicy::Policy>) {
        self.policy = Some(policy);
    }

    /// Applies a reloaded configuration: routes, limits, timers and the
    /// Contact mode take effect for new requests; live transactions keep
    /// their timers and live dialogs their media. The keys
    /// [`Config::restart_needed`] names are kept as they are (the caller
    /// refuses such a reload before it gets here).
    pub fn reconfigure(&mut self, mut cfg: Config) {
        if let Some(k) = self.cfg.restart_needed(&cfg) {
            tracing::warn!(key = k, "[alg] reload: this key needs a restart; keeping the running value");
        }
        cfg.listen_v6 = self.cfg.listen_v6;
        cfg.listen_v4 = self.cfg.listen_v4;
        cfg.advertise_v6 = self.cfg.advertise_v6;
        cfg.advertise_v4 = self.cfg.advertise_v4;
        cfg.tcp = self.cfg.tcp;
        cfg.media = self.cfg.media;
        cfg.media_v6_interface = self.cfg.media_v6_interface.take();
        cfg.media_v4_interface = self.cfg.media_v4_interface.take();
        cfg.ng = std::mem::take(&mut self.cfg.ng);
        cfg.dns_servers = std::mem::take(&mut self.cfg.dns_servers);
        self.timers_cfg = Timers::new(cfg.t1);
        self.budgets.reconfigure(&cfg);
        self.resolver.reconfigure(&cfg);
        self.cfg = cfg;
    }

    /// Live (server transactions, client transactions, dialogs, parked).
    pub fn table_sizes(&self) -> (usize, usize, usize, usize) {
        (self.server.len(), self.client.len(), self.dialogs.len(), self.parked_count)
    }

    /// (DNS lookups in flight, their cap).
    pub fn dns_in_flight(&self) -> (usize, usize) {
        self.resolver.in_flight()
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// When [`Alg::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let media = self.media.as_deref().and_then(|m| m.poll_timeout());
        match (self.timers.next_at(), media) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn schedule(&mut self, at: Instant, kind: TimerKind, whose: TimerRef, id: u64) {
        let seq = self.id();
        self.timers.push(Timer { at, seq, kind, whose, id });
    }

    pub(crate) fn send(&mut self, peer: Peer, data: Vec<u8>) {
        self.out.push_back(Transmit { peer, data });
    }

    /// Our address and port in a realm, as written in headers.
    pub fn local(&self, realm: Realm) -> (IpAddr, u16) {
        let port = if realm.v6() { self.cfg.listen_v6.port() } else { self.cfg.listen_v4.port() };
        (self.cfg.advertised(realm.v6()), port)
    }

    pub(crate) fn local_hostport(&self, realm: Realm) -> String {
        self.hostport[usize::from(realm.v6())].clone()
    }

    fn hostport_of(&self, realm: Realm) -> String {
        let (ip, port) = self.local(realm);
        format!("{}:{port}", host_of(ip))
    }

    /// True when host:port names this ALG (either realm).
    pub fn is_us(&self, host: &Host, port: Option<u16>) -> bool {
        let Some(ip) = host.ip() else { return false };
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v => v,
        };
        let port = port.unwrap_or(5060);
        [Realm::V6, Realm::V4].iter().any(|&r| {
            let (adv, p) = self.local(r);
            let listen = if r.v6() { self.cfg.listen_v6 } else { self.cfg.listen_v4 };
            (ip == adv || ip == listen.ip()) && port == p
        })
    }

    /// The per-client token bucket (`rate-limit` requests/s, burst twice
    /// that): one client is an IPv6 prefix or an IPv4 address, so a host
    /// cannot spread a flood over the addresses of its /64.
    pub(crate) fn rate_ok(&mut self, ip: IpAddr, now: Instant) -> bool {
        let limit = f64::from(self.cfg.rate_limit);
        if limit == 0.0 {
            return true;
        }
        let client = self.owner_of(ip);
        // Idle sources are forgotten every 10 s; a flood from many (spoofed)
        // sources keeps only the last second's, so the map stays bounded.
        let full = self.rate.len() >= RATE_SOURCES_MAX;
        if full || self.rate_sweep.is_none_or(|t| now.saturating_duration_since(t) > Duration::from_secs(10)) {
            let keep = if full { Duration::from_secs(1) } else { Duration::from_secs(10) };
            self.rate.retain(|_, b| now.saturating_duration_since(b.at) < keep);
            self.rate_sweep = Some(now);
        }
        let b = self.rate.entry(client).or_insert(Bucket { tokens: limit * 2.0, at: now });
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + dt * limit).min(limit * 2.0);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Handles one received message.
    pub fn handle(&mut self, now: Instant, inc: Incoming) {
        self.clock = now;
        let peer = inc.peer;
        if inc.data.len() > self.cfg.max_message {
            self.stats.oversized += 1;
            // Answer 513 when the head is readable (RFC 3261 §18.1.1).
            if let Ok(m) = Message::parse_datagram(&inc.data[..inc.data.len().min(self.cfg.max_message)]) {
                if m.is_request() && m.method() != Some("ACK") {
                    self.reply_stateless(&m, peer, 513, "Message Too Large");
                    return;
                }
            }
            self.stats.malformed_dropped += 1;
            return;
        }
        let m = match Message::parse_datagram(inc.data) {
            Ok(m) => m,
            Err(r) => {
                if r.reason != "keep-alive" {
                    self.stats.malformed_dropped += 1;
                    tracing::debug!(from = %peer.addr, reason = %r.reason, "malformed SIP dropped");
                }
                return;
            }
        };
        if m.is_request() {
            self.stats.requests_in += 1;
            self.stats.requests_by_method[method_index(m.method().unwrap_or(""))] += 1;
            if !self.rate_ok(peer.addr.ip(), now) {
                self.stats.rate_limited += 1;
                const WHAT: &str = "SIP requests over rate-limit dropped";
                if let Some(suppressed) = self.warn_log.admit(WHAT, now) {
                    let client = self.owner_of(peer.addr.ip());
                    tracing::info!(suppressed, %client, "{WHAT}");
                }
                return;
            }
        } else {
            self.stats.responses_in += 1;
            if let Some(c) = m.code().filter(|c| (100..700).contains(c)) {
                self.stats.responses_by_class[usize::from(c / 100 - 1)] += 1;
            }
        }
        if let Err(r) = m.validate() {
            self.reject(&m, peer, r);
            return;
        }
        if m.is_request() {
            self.on_request(now, peer, &m, inc.data);
        } else {
            self.on_response(now, peer, &m, inc.data);
        }
    }

    pub(crate) fn reject(&mut self, m: &Message, peer: &Peer, r: Reject) {
        if r.status == 0 || !m.is_request() || m.method() == Some("ACK") {
            self.stats.malformed_dropped += 1;
            tracing::debug!(from = %peer.addr, reason = %r.reason, "SIP message dropped");
            return;
        }
        // A response needs Via (to route it), From, To, Call-ID and CSeq.
        let can = [Name::Via, Name::From, Name::To, Name::CallId, Name::CSeq].iter().all(|&n| m.header(n).is_some());
        if !can {
            self.stats.malformed_dropped += 1;
            return;
        }
        self.stats.malformed_answered += 1;
        tracing::debug!(from = %peer.addr, status = r.status, reason = %r.reason, "malformed request answered");
        self.reply_stateless(m, peer, r.status, &r.reason);
    }

    /// Header block for a locally generated response (RFC 3261 §8.2.6).
    pub(crate) fn resp_headers(&self, m: &Message, peer: &Peer) -> String {
        let mut s = String::with_capacity(256);
        let mut first = true;
        for h in m.all(Name::Via) {
            if first {
                first = false;
                if let Some((_, v, rest)) = emit::first_via(m) {
                    s.push_str("Via: ");
                    s.push_str(&self.with_received(v, peer));
                    for r in rest {
                        s.push_str(", ");
                        s.push_str(r);
                    }
                    s.push_str("\r\n");
                    continue;
                }
            }
            s.push_str(h.line);
            s.push_str("\r\n");
        }
        for n in [Name::From, Name::To, Name::CallId, Name::CSeq] {
            if let Some(h) = m.all(n).next() {
                s.push_str(h.line);
                s.push_str("\r\n");
            }
        }
        s
    }

    /// Adds `received` (and fills `rport`, RFC 3581) to a Via value when the
    /// packet came from elsewhere than its sent-by (RFC 3261 §18.2.1).
    pub(crate) fn with_received(&self, via: &str, peer: &Peer) -> String {
        let Ok(v) = Via::parse(via) else { return via.to_string() };
        let mut out = via.to_string();
        let src = peer.addr.ip();
        match v.param("received") {
            None if v.host.ip() != Some(src) => {
                // RFC 5118 §4.5: an IPv6 received value has no brackets.
                out.push_str(";received=");
                out.push_str(&src.to_string());
            }
            // A received the sender wrote itself (RFC 5118 §4.5's messages
            // carry one, with or without brackets) that is not where the
            // packet came from would send the responses elsewhere: it is
            // replaced by the source.
            Some(Some(r)) if received_ip(r) != Some(src) => {
                let lower = out.to_ascii_lowercase();
                if let Some(i) = lower.find(";received=").map(|i| i + ";received=".len()) {
                    let end = out[i..].find(|c: char| c == ';' || c.is_ascii_whitespace()).map_or(out.len(), |e| i + e);
                    out.replace_range(i..end, &src.to_string());
                }
            }
            _ => {}
        }
        if v.param("rport") == Some(None) {
            let at = out.find(";rport").map(|i| i + 6);
            if let Some(i) = at {
                let tail = out[i..].to_string();
                if tail.is_empty() || tail.starts_with(';') || tail.starts_with(' ') {
                    out.truncate(i);
                    out.push('=');
                    out.push_str(&peer.addr.port().to_string());
                    out.push_str(&tail);
                }
            }
        }
        out
    }

    pub(crate) fn local_response(
        resp_headers: &str,
        code: u16,
        reason: &str,
        to_tag: Option<&str>,
        extra: &str,
    ) -> Vec<u8> {
        let mut s = format!("SIP/2.0 {code} {reason}\r\n");
        for line in resp_headers.split("\r\n").filter(|l| !l.is_empty()) {
            let is_to = line.split(':').next().is_some_and(|n| matches!(Name::of(n.trim()), Name::To));
            s.push_str(line);
            if is_to && code > 100 {
                if let Some(t) = to_tag {
                    let v = &line[line.find(':').map_or(0, |i| i + 1)..];
                    if uri::parse_name_addr(v).ok().and_then(|a| a.tag()).is_none() {
                        s.push_str(";tag=");
                        s.push_str(t);
                    }
                }
            }
            s.push_str("\r\n");
        }
        s.push_str(extra);
        s.push_str("Server: v6gate-alg\r\nContent-Length: 0\r\n\r\n");
        s.into_bytes()
    }

    pub(crate) fn reply_stateless(&mut self, m: &Message, peer: &Peer, code: u16, reason: &str) {
        let rh = self.resp_headers(m, peer);
        let tag = format!("{:x}", hash(&[m.call_id(), "v6gate"]));
        let r = Self::local_response(&rh, code, reason, Some(&tag), "");
        self.stats.local_responses[local_code_index(code)] += 1;
        self.send(peer.clone(), r);
    }

    /// Replies to a request in a server transaction (and records it).
    pub(crate) fn reply(&mut self, now: Instant, key: &ServerKey, code: u16, reason: &str, extra: &str) {
        let Some(st) = self.server.get(key) else { return };
        let r = Self::local_response(&st.resp_headers, code, reason, Some(&st.to_tag), extra);
        self.stats.local_responses[local_code_index(code)] += 1;
        let last = Last::Local { code, reason: reason.to_string(), extra: extra.to_string() };
        self.server_send(now, key, code, r, last);
    }

    /// The bytes of a server transaction's last response.
    pub(crate) fn last_response(st: &ServerTxn) -> Option<Vec<u8>> {
        match st.last.as_ref()? {
            Last::Relayed(d) => Some(d.clone()),
            Last::Local { code, reason, extra } => {
                Some(Self::local_response(&st.resp_headers, *code, reason, Some(&st.to_tag), extra))
            }
        }
    }

    /// Sends a response in a server transaction (`last`: what is kept to
    /// send it again) and moves its state.
    pub(crate) fn server_send(&mut self, now: Instant, key: &ServerKey, code: u16, data: Vec<u8>, last: Last) {
        let t = self.timers_cfg;
        self.server_set_last(key, last);
        let Some(st) = self.server.get_mut(key) else { return };
        let peer = st.peer.clone();
        let id = st.id;
        let reliable = peer.transport.reliable();
        let tref = TimerRef::Server;
        let (invite, state) = (st.invite, st.state);
        if code >= 200 && state == SState::Proceeding && st.initial_invite {
            match code {
                200..=299 => self.stats.calls_answered += 1,
                487 => self.stats.calls_cancelled += 1,
                _ => self.stats.calls_failed += 1,
            }
        }
        if code >= 200 && state == SState::Proceeding {
            if invite && code < 300 {
                st.state = SState::Accepted;
                self.schedule(now + t.t64(), TimerKind::L, tref, id);
            } else if invite {
                st.state = SState::Completed;
                st.g = t.t1;
                if !reliable {
                    self.schedule(now + t.t1, TimerKind::G, tref, id);
                }
                self.schedule(now + t.t64(), TimerKind::H, tref, id);
            } else {
                st.state = SState::Completed;
                let j = if reliable { Duration::ZERO } else { t.t64() };
                self.schedule(now + j, TimerKind::J, tref, id);
            }
        }
        self.send(peer, data);
    }
}

/// `sip:alg-<base64url(original)>@ours` — the original comes back when a
/// request is sent to it.
pub fn encode_contact(orig: &str, hostport: &str, t: Transport) -> String {
    let tparam = if t == Transport::Tcp { ";transport=tcp" } else { "" };
    format!("sip:{ENC_PREFIX}{}@{hostport}{tparam}", uri::b64url_encode(orig.as_bytes()))
}

/// The address of a Via `received` value (an IPv6 one with or without
/// brackets, RFC 5118 §4.5).
fn received_ip(v: &str) -> Option<std::net::IpAddr> {
    let v = v.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(v);
    v.parse::<std::net::Ipv4Addr>().ok().map(Into::into).or_else(|| crate::uri::parse_ipv6(v).map(Into::into))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_function_and_parts_are_delimited() {
        // FNV-1a 64 test vectors (the hash of "" and of "a").
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(fnv1a(FNV_OFFSET, b"ab"), b"c"), fnv1a(FNV_OFFSET, b"abc"), "continues");
        assert_eq!(hash(&["a"]), fnv1a(FNV_OFFSET, b"a\xff"));
        assert_ne!(hash(&["ab", "c"]), hash(&["a", "bc"]));
    }
}
