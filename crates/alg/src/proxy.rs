//! The deterministic core: an RFC 3261 §16 stateful proxy between the two
//! realms. The caller hands it datagrams / stream messages and the time;
//! it returns what to send ([`Alg::poll_transmit`]) and when to call it
//! again ([`Alg::poll_timeout`]). No sockets, no clock, no DNS of its own.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::config::{Config, ContactMode, Transport};
use crate::dialog::Dialog;
use crate::emit::{self, Builder};
use crate::media::MediaControl;
use crate::msg::{Message, Name, Reject, Start, Via};
use crate::realm::{self, Realm, Resolution, Resolver};
use crate::txn::*;
use crate::uri::{self, host_of, Host, Scheme, Uri};

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// To whom (with the realm that says which listener sends it).
    pub peer: Peer,
    /// The bytes.
    pub data: Vec<u8>,
}

/// Counters (every drop has one).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Requests received (new and retransmitted).
    pub requests_in: u64,
    /// Responses received.
    pub responses_in: u64,
    /// Requests forwarded (first transmissions).
    pub requests_forwarded: u64,
    /// Responses forwarded.
    pub responses_forwarded: u64,
    /// Retransmissions absorbed (answered from transaction state).
    pub retransmissions_absorbed: u64,
    /// Retransmissions the ALG sent (Timers A, E, G).
    pub retransmissions_sent: u64,
    /// Malformed requests answered with 4xx/5xx.
    pub malformed_answered: u64,
    /// Malformed messages dropped.
    pub malformed_dropped: u64,
    /// Messages over `max-message`.
    pub oversized: u64,
    /// Requests dropped by the per-source rate limit.
    pub rate_limited: u64,
    /// Stray responses dropped (no transaction, top Via not ours).
    pub stray_responses: u64,
    /// Loops detected (482).
    pub loops: u64,
    /// Max-Forwards exhausted (483).
    pub too_many_hops: u64,
    /// Requests with no route / failed DNS (404).
    pub unroutable: u64,
    /// Client transactions that timed out (408).
    pub timeouts: u64,
    /// Media commands that failed.
    pub media_errors: u64,
    /// SDP bodies removed from responses because the relay refused them.
    pub sdp_dropped: u64,
    /// Dialogs created / released (BYE, failure, CANCEL, timeout).
    pub dialogs_created: u64,
    /// Dialogs released.
    pub dialogs_released: u64,
    /// Dialogs released by the session timeout.
    pub dialogs_timed_out: u64,
    /// Media re-pointed by a re-INVITE/UPDATE from a new address.
    pub handovers: u64,
    /// Requests parked waiting for DNS.
    pub parked: u64,
    /// Requests sent to the next destination after one never answered.
    pub failovers: u64,
    /// Requests refused because the transaction table was full.
    pub overload: u64,
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
    resolver: Box<dyn Resolver>,
    pub(crate) media: Option<Box<dyn MediaControl>>,
    pub(crate) server: HashMap<ServerKey, ServerTxn>,
    pub(crate) client: HashMap<String, ClientTxn>,
    pub(crate) dialogs: HashMap<String, Dialog>,
    timers: BinaryHeap<Reverse<Timer>>,
    out: VecDeque<Transmit>,
    parked: Vec<(Peer, Vec<u8>)>,
    rate: HashMap<IpAddr, Bucket>,
    rate_sweep: Option<Instant>,
    next_id: u64,
    /// Counters.
    pub stats: Stats,
}

const ENC_PREFIX: &str = "alg-";
/// Most sources the rate limiter remembers.
const RATE_SOURCES_MAX: usize = 65_536;

fn hash(parts: &[&str]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for &b in p.as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn reason_of(code: u16) -> &'static str {
    match code {
        100 => "Trying",
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        416 => "Unsupported URI Scheme",
        420 => "Bad Extension",
        481 => "Call/Transaction Does Not Exist",
        482 => "Loop Detected",
        483 => "Too Many Hops",
        487 => "Request Terminated",
        488 => "Not Acceptable Here",
        500 => "Server Internal Error",
        503 => "Service Unavailable",
        505 => "Version Not Supported",
        513 => "Message Too Large",
        _ => "Error",
    }
}

fn server_key(m: &Message, method: &str) -> Option<ServerKey> {
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

fn host_text(h: &Host) -> String {
    match h {
        Host::V4(a) => a.to_string(),
        Host::V6(a) => format!("[{a}]"),
        Host::Name(n) => n.to_ascii_lowercase(),
    }
}

fn client_key(branch: &str, method: &str) -> String {
    format!("{branch}|{method}")
}

impl Alg {
    /// A core. `media` None: signalling only (no SDP rewriting).
    pub fn new(cfg: Config, resolver: Box<dyn Resolver>, media: Option<Box<dyn MediaControl>>) -> Alg {
        let timers_cfg = Timers::new(cfg.t1);
        Alg {
            cfg,
            timers_cfg,
            resolver,
            media,
            server: HashMap::new(),
            client: HashMap::new(),
            dialogs: HashMap::new(),
            timers: BinaryHeap::new(),
            out: VecDeque::new(),
            parked: Vec::new(),
            rate: HashMap::new(),
            rate_sweep: None,
            next_id: 1,
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Live (server transactions, client transactions, dialogs, parked).
    pub fn table_sizes(&self) -> (usize, usize, usize, usize) {
        (self.server.len(), self.client.len(), self.dialogs.len(), self.parked.len())
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// When [`Alg::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|t| t.0.at)
    }

    pub(crate) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn schedule(&mut self, at: Instant, kind: TimerKind, whose: TimerRef, id: u64) {
        let seq = self.id();
        self.timers.push(Reverse(Timer { at, seq, kind, whose, id }));
    }

    pub(crate) fn send(&mut self, peer: Peer, data: Vec<u8>) {
        self.out.push_back(Transmit { peer, data });
    }

    /// Our address and port in a realm, as written in headers.
    pub fn local(&self, realm: Realm) -> (IpAddr, u16) {
        let port = if realm.v6() { self.cfg.listen_v6.port() } else { self.cfg.listen_v4.port() };
        (self.cfg.advertised(realm.v6()), port)
    }

    fn local_hostport(&self, realm: Realm) -> String {
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

    fn rate_ok(&mut self, ip: IpAddr, now: Instant) -> bool {
        let limit = f64::from(self.cfg.rate_limit);
        if limit == 0.0 {
            return true;
        }
        // Idle sources are forgotten every 10 s; a flood from many (spoofed)
        // sources keeps only the last second's, so the map stays bounded.
        let full = self.rate.len() >= RATE_SOURCES_MAX;
        if full || self.rate_sweep.is_none_or(|t| now.saturating_duration_since(t) > Duration::from_secs(10)) {
            let keep = if full { Duration::from_secs(1) } else { Duration::from_secs(10) };
            self.rate.retain(|_, b| now.saturating_duration_since(b.at) < keep);
            self.rate_sweep = Some(now);
        }
        let b = self.rate.entry(ip).or_insert(Bucket { tokens: limit * 2.0, at: now });
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
            if !self.rate_ok(peer.addr.ip(), now) {
                self.stats.rate_limited += 1;
                return;
            }
        } else {
            self.stats.responses_in += 1;
        }
        if let Err(r) = m.validate() {
            self.reject(&m, peer, r);
            return;
        }
        if m.is_request() {
            self.on_request(now, peer, &m, inc.data);
        } else {
            self.on_response(now, peer, &m);
        }
    }

    fn reject(&mut self, m: &Message, peer: &Peer, r: Reject) {
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
    fn resp_headers(&self, m: &Message, peer: &Peer) -> String {
        let mut s = String::with_capacity(256);
        let mut first = true;
        for h in m.all(Name::Via) {
            if first {
                first = false;
                if let Some((_, v, rest)) = emit::first_via(m) {
                    s.push_str("Via: ");
                    s.push_str(&self.with_received(&v, peer));
                    for r in rest {
                        s.push_str(", ");
                        s.push_str(&r);
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
    fn with_received(&self, via: &str, peer: &Peer) -> String {
        let Ok(v) = Via::parse(via) else { return via.to_string() };
        let mut out = via.to_string();
        let src = peer.addr.ip();
        if v.host.ip() != Some(src) && v.param("received").is_none() {
            // RFC 5118 §4.5: an IPv6 received value has no brackets.
            out.push_str(";received=");
            out.push_str(&src.to_string());
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

    fn local_response(resp_headers: &str, code: u16, reason: &str, to_tag: Option<&str>, extra: &str) -> Vec<u8> {
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

    fn reply_stateless(&mut self, m: &Message, peer: &Peer, code: u16, reason: &str) {
        let rh = self.resp_headers(m, peer);
        let tag = format!("{:x}", hash(&[m.call_id(), "v6gate"]));
        let r = Self::local_response(&rh, code, reason, Some(&tag), "");
        self.send(peer.clone(), r);
    }

    /// Replies to a request in a server transaction (and records it).
    pub(crate) fn reply(&mut self, now: Instant, key: &ServerKey, code: u16, reason: &str, extra: &str) {
        let Some(st) = self.server.get(key) else { return };
        let r = Self::local_response(&st.resp_headers, code, reason, Some(&st.to_tag), extra);
        self.server_send(now, key, code, r);
    }

    /// Sends a response in a server transaction and moves its state.
    pub(crate) fn server_send(&mut self, now: Instant, key: &ServerKey, code: u16, data: Vec<u8>) {
        let t = self.timers_cfg;
        let Some(st) = self.server.get_mut(key) else { return };
        let peer = st.peer.clone();
        st.last = Some(data.clone());
        let id = st.id;
        let reliable = peer.transport.reliable();
        let tref = TimerRef::Server(key.branch.clone(), key.sent_by.clone(), key.method.clone());
        let (invite, state) = (st.invite, st.state);
        if code >= 200 && state == SState::Proceeding {
            if invite && code < 300 {
                st.state = SState::Accepted;
                self.schedule(now + t.t64(), TimerKind::L, tref, id);
            } else if invite {
                st.state = SState::Completed;
                st.g = t.t1;
                if !reliable {
                    self.schedule(now + t.t1, TimerKind::G, tref.clone(), id);
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

    /// Requests waiting for DNS are run again (the runner calls this when
    /// its resolver has new answers).
    pub fn retry_parked(&mut self, now: Instant) {
        let parked = std::mem::take(&mut self.parked);
        for (peer, data) in parked {
            self.handle(now, Incoming { peer: &peer, data: &data });
        }
    }

    fn on_request(&mut self, now: Instant, peer: &Peer, m: &Message, raw: &[u8]) {
        let Start::Request { method, uri: ruri } = m.start else { return };
        let Some(key) = server_key(m, method) else { return };
        // ACK: absorbed by a Completed INVITE transaction (non-2xx, hop by
        // hop), else end to end.
        if method == "ACK" {
            if let Some(st) = self.server.get_mut(&key) {
                match st.state {
                    SState::Completed => {
                        st.state = SState::Confirmed;
                        let (id, reliable) = (st.id, st.peer.transport.reliable());
                        let i = if reliable { Duration::ZERO } else { self.timers_cfg.t4 };
                        let tref = TimerRef::Server(key.branch.clone(), key.sent_by.clone(), key.method.clone());
                        self.schedule(now + i, TimerKind::I, tref, id);
                        self.stats.retransmissions_absorbed += 1;
                        return;
                    }
                    SState::Confirmed => {
                        self.stats.retransmissions_absorbed += 1;
                        return;
                    }
                    _ => {}
                }
            }
            self.forward_new(now, peer, m, raw, method, ruri, None);
            return;
        }
        // Retransmission of a request with a transaction.
        if let Some(st) = self.server.get(&key) {
            if let Some(last) = st.last.clone() {
                let p = st.peer.clone();
                self.send(p, last);
            }
            self.stats.retransmissions_absorbed += 1;
            return;
        }
        if method == "CANCEL" {
            self.on_cancel(now, peer, m, key);
            return;
        }
        if self.server.len() >= self.cfg.max_transactions {
            self.stats.overload += 1;
            let rh = self.resp_headers(m, peer);
            let r = Self::local_response(&rh, 503, "Service Unavailable", Some("ovl"), "Retry-After: 5\r\n");
            self.send(peer.clone(), r);
            return;
        }
        self.forward_new(now, peer, m, raw, method, ruri, Some(key));
    }

    fn new_server(&mut self, now: Instant, peer: &Peer, m: &Message, key: &ServerKey, method: &str) {
        let id = self.id();
        let invite = method == "INVITE";
        let st = ServerTxn {
            id,
            invite,
            state: SState::Proceeding,
            peer: peer.clone(),
            last: None,
            client: None,
            resp_headers: self.resp_headers(m, peer),
            to_tag: format!("{:x}", hash(&[m.call_id(), &key.branch])),
            g: self.timers_cfg.t1,
            call_id: m.call_id().to_string(),
            initial_invite: invite && m.to_tag().is_none(),
            cancelled: false,
            in_realm: peer.realm,
            out_realm: peer.realm,
            offer: false,
            method: method.to_string(),
        };
        self.server.insert(key.clone(), st);
        let _ = now;
    }

    /// Answers a new request locally in its own server transaction.
    fn answer_new(&mut self, now: Instant, peer: &Peer, m: &Message, key: Option<ServerKey>, code: u16, reason: &str) {
        match key {
            Some(k) => {
                let method = m.method().unwrap_or("");
                self.new_server(now, peer, m, &k, method);
                self.reply(now, &k, code, reason, "");
            }
            None => {
                if m.method() != Some("ACK") {
                    self.reply_stateless(m, peer, code, reason);
                }
            }
        }
    }

    fn on_cancel(&mut self, now: Instant, peer: &Peer, m: &Message, key: ServerKey) {
        let ikey = ServerKey { method: "INVITE".into(), ..key.clone() };
        self.new_server(now, peer, m, &key, "CANCEL");
        if !self.server.contains_key(&ikey) {
            self.reply(now, &key, 481, reason_of(481), "");
            return;
        }
        self.reply(now, &key, 200, "OK", "");
        let Some(inv) = self.server.get_mut(&ikey) else { return };
        if inv.state != SState::Proceeding || inv.cancelled {
            return;
        }
        inv.cancelled = true;
        let ck = inv.client.clone();
        match ck {
            Some(ck) => {
                let provisional = self.client.get(&ck).map(|c| c.state == CState::Proceeding);
                match provisional {
                    Some(true) => self.send_cancel(now, &ck),
                    Some(false) => {
                        if let Some(c) = self.client.get_mut(&ck) {
                            c.cancel_pending = true;
                        }
                    }
                    None => {}
                }
            }
            None => {
                self.reply(now, &ikey, 487, reason_of(487), "");
                self.release_dialog_of(&ikey);
            }
        }
    }

    /// Sends CANCEL for client INVITE transaction `ck` (RFC 3261 §9.1:
    /// same Request-URI, Call-ID, To, From, CSeq number, one Via = ours).
    pub(crate) fn send_cancel(&mut self, now: Instant, ck: &str) {
        let Some(c) = self.client.get(ck) else { return };
        let Ok(req) = Message::parse_datagram(&c.request) else { return };
        let Start::Request { uri: ruri, .. } = req.start else { return };
        let mut b = Builder::new(&format!("CANCEL {ruri} SIP/2.0"), 512);
        if let Some((_, v, _)) = emit::first_via(&req) {
            b.header("Via", &v);
        }
        for h in &req.headers {
            match h.name {
                Name::From | Name::To | Name::CallId | Name::Route => b.raw(h),
                Name::CSeq => {
                    let n = req.cseq().map_or(1, |c| c.0);
                    b.header("CSeq", &format!("{n} CANCEL"));
                }
                _ => {}
            }
        }
        b.header("Max-Forwards", "70");
        let data = b.finish(b"");
        let (peer, branch) = (c.peer.clone(), c.branch.clone());
        self.start_client(now, client_key(&branch, "CANCEL"), branch, "CANCEL", peer, data, None);
    }

    /// Starts a client transaction and sends its request.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_client(
        &mut self,
        now: Instant,
        ck: String,
        branch: String,
        method: &str,
        peer: Peer,
        data: Vec<u8>,
        server: Option<ServerKey>,
    ) {
        let t = self.timers_cfg;
        let id = self.id();
        let invite = method == "INVITE";
        let reliable = peer.transport.reliable();
        let tref = TimerRef::Client(ck.clone());
        if invite {
            if !reliable {
                self.schedule(now + t.t1, TimerKind::A, tref.clone(), id);
            }
            self.schedule(now + t.t64(), TimerKind::B, tref.clone(), id);
            self.schedule(now + t.c(), TimerKind::C, tref, id);
        } else {
            if !reliable {
                self.schedule(now + t.t1, TimerKind::E, tref.clone(), id);
            }
            self.schedule(now + t.t64(), TimerKind::F, tref, id);
        }
        self.client.insert(
            ck,
            ClientTxn {
                id,
                invite,
                state: CState::Calling,
                request: data.clone(),
                peer: peer.clone(),
                server,
                branch,
                interval: t.t1,
                cancel_pending: false,
                ack: None,
                method: method.to_string(),
                alternates: Vec::new(),
            },
        );
        self.send(peer, data);
    }

    fn loop_hash(m: &Message, ruri: &str) -> u64 {
        hash(&[
            ruri,
            m.from_tag().unwrap_or(""),
            m.to_tag().unwrap_or(""),
            m.call_id(),
            &m.cseq().map_or(0, |c| c.0).to_string(),
            m.header(Name::ProxyRequire).unwrap_or(""),
        ])
    }

    /// Proxies a new request (RFC 3261 §16.3 – §16.6). `key` None: ACK for
    /// a 2xx (forwarded without a transaction).
    #[allow(clippy::too_many_arguments)]
    fn forward_new(
        &mut self,
        now: Instant,
        peer: &Peer,
        m: &Message,
        raw: &[u8],
        method: &str,
        ruri: &str,
        key: Option<ServerKey>,
    ) {
        // §16.3 step 2: URI scheme.
        let Ok(ru) = Uri::parse(ruri) else { return };
        // §16.3 step 3: Max-Forwards.
        let mf = m.max_forwards().unwrap_or(70);
        if mf == 0 {
            self.stats.too_many_hops += 1;
            if key.is_some() {
                self.answer_new(now, peer, m, key, 483, reason_of(483));
            }
            return;
        }
        // §16.3 step 4: loop detection, over our own Via entries.
        let lh = format!("{:x}", Self::loop_hash(m, ruri));
        if key.is_some() {
            for v in m.vias() {
                if let Ok(v) = Via::parse(v) {
                    if self.is_us(&v.host, v.port) && v.branch().is_some_and(|b| b.ends_with(&format!("-{lh}"))) {
                        self.stats.loops += 1;
                        self.answer_new(now, peer, m, key, 482, reason_of(482));
                        return;
                    }
                }
            }
        }
        // §16.3 step 6: Proxy-Require (no extensions are required of us).
        if let Some(pr) = m.header(Name::ProxyRequire) {
            if key.is_some() {
                let extra = format!("Unsupported: {pr}\r\n");
                let k = key.clone().expect("checked");
                self.new_server(now, peer, m, &k, method);
                self.reply(now, &k, 420, reason_of(420), &extra);
            }
            return;
        }
        // §16.4: Route processing. Strict-routing predecessor first.
        let mut routes: Vec<String> = Vec::new();
        for h in m.all(Name::Route) {
            for a in crate::msg::addresses(&h.value) {
                routes.push(a.uri.to_string());
            }
        }
        let mut new_ruri: String = ruri.to_string();
        let mut drop_last_route = false;
        if ru.user.is_none() && self.is_us(&ru.host, ru.port) && !routes.is_empty() {
            new_ruri = routes.last().cloned().unwrap_or_default();
            drop_last_route = true;
            routes.pop();
        }
        let mut popped = 0;
        while popped < routes.len() {
            let Ok(u) = Uri::parse(&routes[popped]) else { break };
            if u.user.is_none() && self.is_us(&u.host, u.port) {
                popped += 1;
            } else {
                break;
            }
        }
        // A Request-URI we made (a rewritten Contact) goes back to what it was.
        let decoded = {
            let cur = Uri::parse(&new_ruri).unwrap_or(ru.clone());
            match cur.user.and_then(|u| u.strip_prefix(ENC_PREFIX)) {
                Some(enc) if self.is_us(&cur.host, cur.port) => Some(
                    uri::b64url_decode(enc).and_then(|b| String::from_utf8(b).ok()).filter(|o| Uri::parse(o).is_ok()),
                ),
                _ => None,
            }
        };
        match decoded {
            Some(Some(orig)) => new_ruri = orig,
            Some(None) => {
                self.answer_new(now, peer, m, key, 404, "Not Found (bad ALG contact)");
                return;
            }
            None => {}
        }
        let ru = match Uri::parse(&new_ruri) {
            Ok(u) => u,
            Err(_) => return,
        };
        let next = routes.get(popped).cloned();
        let target_uri = match &next {
            Some(r) => Uri::parse(r).ok(),
            None => Some(ru.clone()),
        };
        let Some(target_uri) = target_uri else { return };
        if next.is_none() && !matches!(target_uri.scheme, Scheme::Sip | Scheme::Sips) {
            self.answer_new(now, peer, m, key, 416, reason_of(416));
            return;
        }
        if next.is_none() && target_uri.user.is_none() && self.is_us(&target_uri.host, target_uri.port) {
            // Addressed to the ALG itself.
            if method == "OPTIONS" {
                let k = key.clone();
                if let Some(k) = k {
                    self.new_server(now, peer, m, &k, method);
                    self.reply(now, &k, 200, "OK", "Allow: INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE, PRACK, REGISTER, SUBSCRIBE, NOTIFY, REFER, INFO, MESSAGE\r\n");
                }
            } else {
                self.answer_new(now, peer, m, key, 404, "Not Found (no route)");
            }
            return;
        }
        let mut targets = match realm::targets(&target_uri, &self.cfg.route, self.resolver.as_mut(), now) {
            Resolution::Ready(t) if !t.is_empty() => t,
            Resolution::Ready(_) | Resolution::Failed(_) => {
                self.stats.unroutable += 1;
                self.answer_new(now, peer, m, key, 404, "Not Found (no route to the target)");
                return;
            }
            Resolution::Pending => {
                self.stats.parked += 1;
                if self.parked.len() < 10_000 {
                    self.parked.push((peer.clone(), raw.to_vec()));
                }
                return;
            }
        };
        let dest = targets.remove(0);
        let out_realm = Realm::of(dest.addr.ip());
        targets.retain(|t| Realm::of(t.addr.ip()) == out_realm);
        let out_peer = Peer { realm: out_realm, transport: dest.transport, addr: dest.addr, conn: None };
        let initial = m.to_tag().is_none();
        if let Some(k) = &key {
            self.new_server(now, peer, m, k, method);
            if let Some(st) = self.server.get_mut(k) {
                st.out_realm = out_realm;
                st.offer = m.has_sdp();
            }
            if method == "INVITE" {
                self.reply(now, k, 100, "Trying", "");
            }
        }
        // Media (SDP offer/answer through the TrGW).
        let body = match self.media_for_request(now, m, method, peer.realm, out_realm) {
            Ok(b) => b,
            Err((code, reason)) => {
                if let Some(k) = &key {
                    if let Some(st) = self.server.get_mut(k) {
                        st.state = SState::Proceeding;
                    }
                    self.reply(now, k, code, &reason, "");
                }
                return;
            }
        };
        // Build the request.
        let branch = match &key {
            Some(_) => format!("z9hG4bK-v6g{:x}-{lh}", self.id()),
            None => format!("z9hG4bK-v6ga{:x}", hash(&[m.top_via().and_then(|v| v.branch()).unwrap_or(""), "ack"])),
        };
        let out_hp = self.local_hostport(out_realm);
        let in_hp = self.local_hostport(peer.realm);
        let tp = dest.transport;
        let our_via = format!("SIP/2.0/{} {out_hp};branch={branch}", tp.token());
        let mut b = Builder::new(&format!("{method} {new_ruri} SIP/2.0"), raw.len() + 400);
        b.header("Via", &our_via);
        let rr = initial && matches!(method, "INVITE" | "SUBSCRIBE" | "REFER" | "NOTIFY");
        if rr {
            // RFC 5658 double Record-Route: the entry facing the next hop
            // first, then the one facing the previous hop.
            let mk = |hp: &str, t: Transport| {
                let tparam = if t == Transport::Tcp { ";transport=tcp" } else { "" };
                format!("<sip:{hp}{tparam};lr;r2=on>")
            };
            if out_realm != peer.realm {
                b.header("Record-Route", &format!("{}, {}", mk(&out_hp, tp), mk(&in_hp, peer.transport)));
            } else {
                b.header("Record-Route", &mk(&in_hp, peer.transport).replace(";r2=on", ""));
            }
        }
        if method == "REGISTER" {
            let tparam = if tp == Transport::Tcp { ";transport=tcp" } else { "" };
            b.header("Path", &format!("<sip:{out_hp}{tparam};lr>"));
        }
        let rewrite_contact = out_realm != peer.realm && self.cfg.contact == ContactMode::Rewrite;
        let mut route_skip = popped;
        let total_routes = m.all(Name::Route).map(|h| crate::msg::addresses(&h.value).len()).sum::<usize>();
        let mut route_seen = 0usize;
        let mut first_via = true;
        for h in &m.headers {
            match h.name {
                Name::Via if first_via => {
                    first_via = false;
                    if let Some((_, v, rest)) = emit::first_via(m) {
                        let mut val = self.with_received(&v, peer);
                        for r in rest {
                            val.push_str(", ");
                            val.push_str(&r);
                        }
                        b.header(h.raw_name, &val);
                    }
                }
                Name::MaxForwards => {}
                Name::ContentLength => {}
                Name::Route => {
                    let n = crate::msg::addresses(&h.value).len();
                    if drop_last_route && route_seen + n == total_routes {
                        // Remove the last element (strict-route fix-up).
                        let v = h.value.as_ref();
                        if let Ok(parts) = uri::split_list(v) {
                            let keep: Vec<&str> =
                                parts[..parts.len() - 1].iter().map(|r| v[r.clone()].trim()).collect();
                            let mut skip_here = route_skip.min(keep.len());
                            route_skip -= skip_here;
                            let rest: Vec<&str> = keep
                                .into_iter()
                                .filter(|_| {
                                    if skip_here > 0 {
                                        skip_here -= 1;
                                        false
                                    } else {
                                        true
                                    }
                                })
                                .collect();
                            if !rest.is_empty() {
                                b.header(h.raw_name, &rest.join(", "));
                            }
                        }
                    } else {
                        emit::write_list_skipping(&mut b, h, &mut route_skip);
                    }
                    route_seen += n;
                }
                Name::Contact if rewrite_contact => {
                    let hp = out_hp.clone();
                    let t = tp;
                    let mut f = |a: &uri::NameAddr| Some(emit::replace_uri(a, &encode_contact(a.uri, &hp, t)));
                    match emit::map_addresses(h, &mut f) {
                        Some(v) => b.header(h.raw_name, &v),
                        None => b.raw(h),
                    }
                }
                _ => b.raw(h),
            }
        }
        // §16.6 step 3: decrement, or add 70 when absent.
        b.header("Max-Forwards", &m.max_forwards().map_or(70, |v| v - 1).to_string());
        let data = b.finish(body.as_deref().unwrap_or(m.body));
        self.stats.requests_forwarded += 1;
        match key {
            Some(k) => {
                let ck = client_key(&branch, method);
                if let Some(st) = self.server.get_mut(&k) {
                    st.client = Some(ck.clone());
                }
                self.start_client(now, ck.clone(), branch, method, out_peer, data, Some(k));
                if let Some(c) = self.client.get_mut(&ck) {
                    c.alternates = targets;
                }
            }
            None => self.send(out_peer, data),
        }
    }

    fn on_response(&mut self, now: Instant, peer: &Peer, m: &Message) {
        let Some(via) = m.top_via() else { return };
        let Some((_, cseq_m)) = m.cseq() else { return };
        let code = m.code().unwrap_or(0);
        let branch = via.branch().unwrap_or("").to_string();
        let ck = client_key(&branch, cseq_m);
        let Some(c) = self.client.get_mut(&ck) else {
            // §16.7 step 1: no transaction: forward statelessly when the top
            // Via is ours (2xx retransmissions after the transaction ended).
            if self.is_us(&via.host, via.port) {
                self.forward_response_stateless(now, m);
            } else {
                self.stats.stray_responses += 1;
            }
            return;
        };
        let _ = peer;
        let t = self.timers_cfg;
        let tref = TimerRef::Client(ck.clone());
        let id = c.id;
        let reliable = c.peer.transport.reliable();
        match (c.invite, c.state, code) {
            (true, CState::Calling | CState::Proceeding, 100..=199) => {
                c.state = CState::Proceeding;
                if c.cancel_pending {
                    c.cancel_pending = false;
                    self.send_cancel(now, &ck);
                }
                if code > 100 {
                    self.schedule(now + t.c(), TimerKind::C, tref, id);
                    self.relay_response(now, &ck, m);
                }
            }
            (true, CState::Calling | CState::Proceeding | CState::Accepted, 200..=299) => {
                if c.state != CState::Accepted {
                    c.state = CState::Accepted;
                    self.schedule(now + t.t64(), TimerKind::M, tref, id);
                }
                self.relay_response(now, &ck, m);
            }
            (true, CState::Calling | CState::Proceeding, 300..=699) => {
                c.state = CState::Completed;
                let ack = build_ack(&c.request, m);
                c.ack = ack.clone();
                let p = c.peer.clone();
                if let Some(a) = ack {
                    self.send(p, a);
                }
                let d = if reliable { Duration::ZERO } else { t.d() };
                self.schedule(now + d, TimerKind::D, tref, id);
                self.relay_response(now, &ck, m);
            }
            (true, CState::Completed, 300..=699) => {
                if let Some(a) = c.ack.clone() {
                    let p = c.peer.clone();
                    self.send(p, a);
                }
                self.stats.retransmissions_absorbed += 1;
            }
            (false, CState::Calling | CState::Proceeding, 100..=199) => {
                c.state = CState::Proceeding;
                if code > 100 {
                    self.relay_response(now, &ck, m);
                }
            }
            (false, CState::Calling | CState::Proceeding, 200..=699) => {
                c.state = CState::Completed;
                let k = if reliable { Duration::ZERO } else { t.t4 };
                self.schedule(now + k, TimerKind::K, tref, id);
                self.relay_response(now, &ck, m);
            }
            _ => self.stats.retransmissions_absorbed += 1,
        }
    }

    /// Forwards a response to the server transaction of client `ck`.
    fn relay_response(&mut self, now: Instant, ck: &str, m: &Message) {
        let Some(c) = self.client.get(ck) else { return };
        let method = c.method.clone();
        let Some(sk) = c.server.clone() else { return };
        let Some(st) = self.server.get(&sk) else { return };
        if st.state != SState::Proceeding
            && !(st.state == SState::Accepted && (200..300).contains(&m.code().unwrap_or(0)))
        {
            return;
        }
        let (in_realm, out_realm, offer, initial) = (st.in_realm, st.out_realm, st.offer, st.initial_invite);
        let code = m.code().unwrap_or(0);
        let body = self.media_for_response(now, m, &method, out_realm, in_realm, offer);
        let data = self.build_response(m, in_realm, out_realm, &method, body.as_deref());
        self.stats.responses_forwarded += 1;
        self.server_send(now, &sk, code, data);
        if code >= 300 && method == "INVITE" {
            if initial {
                self.release_dialog_of(&sk);
            } else {
                let cid = m.call_id().to_string();
                self.revert_epoch(&cid);
            }
        }
        if code >= 200 && method == "INVITE" && code < 300 {
            self.dialog_confirmed(now, m);
        }
        if code >= 200 && method == "BYE" {
            self.release_dialog(m.call_id(), "BYE");
        }
    }

    fn forward_response_stateless(&mut self, now: Instant, m: &Message) {
        let vias = m.vias();
        let Some(next) = vias.get(1).and_then(|v| Via::parse(v).ok()) else {
            self.stats.stray_responses += 1;
            return;
        };
        let host =
            match next.param("received").flatten().and_then(|r| r.trim_matches(['[', ']']).parse::<IpAddr>().ok()) {
                Some(ip) => ip,
                None => match next.host.ip() {
                    Some(ip) => ip,
                    None => {
                        self.stats.stray_responses += 1;
                        return;
                    }
                },
            };
        let port = next.param("rport").flatten().and_then(|p| p.parse().ok()).or(next.port).unwrap_or(5060);
        let tp = Transport::from_token(next.transport).unwrap_or_default();
        let in_realm = Realm::of(host);
        let out_realm = in_realm.other();
        let method = m.cseq().map(|c| c.1.to_string()).unwrap_or_default();
        let body = if (200..300).contains(&m.code().unwrap_or(0)) && method == "INVITE" {
            self.media_for_response(now, m, &method, out_realm, in_realm, true)
        } else {
            None
        };
        let data = self.build_response(m, in_realm, out_realm, &method, body.as_deref());
        self.stats.responses_forwarded += 1;
        self.send(Peer { realm: in_realm, transport: tp, addr: SocketAddr::new(host, port), conn: None }, data);
    }

    /// A response with our Via removed, Contact made reachable from
    /// `to_realm` (or restored for REGISTER), and the new body.
    fn build_response(
        &self,
        m: &Message,
        to_realm: Realm,
        from_realm: Realm,
        method: &str,
        body: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut b = Builder::new(m.start_line, m.body.len() + 600);
        let mut via_done = false;
        let hp = self.local_hostport(to_realm);
        let rewrite = to_realm != from_realm && self.cfg.contact == ContactMode::Rewrite;
        for h in &m.headers {
            match h.name {
                Name::Via if !via_done => {
                    via_done = true;
                    let mut skip = 1;
                    emit::write_list_skipping(&mut b, h, &mut skip);
                }
                Name::ContentLength => {}
                Name::Contact if method == "REGISTER" => {
                    let mut f = |a: &uri::NameAddr| {
                        let u = Uri::parse(a.uri).ok()?;
                        let enc = u.user?.strip_prefix(ENC_PREFIX)?;
                        let orig = String::from_utf8(uri::b64url_decode(enc)?).ok()?;
                        Some(emit::replace_uri(a, &orig))
                    };
                    match emit::map_addresses(h, &mut f) {
                        Some(v) => b.header(h.raw_name, &v),
                        None => b.raw(h),
                    }
                }
                Name::Contact if rewrite => {
                    let hp = hp.clone();
                    let mut f =
                        |a: &uri::NameAddr| Some(emit::replace_uri(a, &encode_contact(a.uri, &hp, Transport::Udp)));
                    match emit::map_addresses(h, &mut f) {
                        Some(v) => b.header(h.raw_name, &v),
                        None => b.raw(h),
                    }
                }
                _ => b.raw(h),
            }
        }
        b.finish(body.unwrap_or(m.body))
    }

    /// Runs expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(Reverse(t)) = self.timers.peek() {
            if t.at > now {
                break;
            }
            let Reverse(t) = self.timers.pop().expect("peeked");
            self.fire(now, t);
        }
    }

    fn fire(&mut self, now: Instant, t: Timer) {
        let tc = self.timers_cfg;
        match t.whose.clone() {
            TimerRef::Dialog(cid) => self.dialog_timer(now, &cid, t.id),
            TimerRef::Client(ck) => {
                let Some(c) = self.client.get_mut(&ck) else { return };
                if c.id != t.id {
                    return;
                }
                match (t.kind, c.state) {
                    (TimerKind::A, CState::Calling) => {
                        c.interval *= 2;
                        let (p, d, iv, id) = (c.peer.clone(), c.request.clone(), c.interval, c.id);
                        self.stats.retransmissions_sent += 1;
                        self.send(p, d);
                        self.schedule(now + iv, TimerKind::A, t.whose, id);
                    }
                    (TimerKind::E, CState::Calling | CState::Proceeding) => {
                        c.interval = if c.state == CState::Proceeding { tc.t2 } else { (c.interval * 2).min(tc.t2) };
                        let (p, d, iv, id) = (c.peer.clone(), c.request.clone(), c.interval, c.id);
                        self.stats.retransmissions_sent += 1;
                        self.send(p, d);
                        self.schedule(now + iv, TimerKind::E, t.whose, id);
                    }
                    (TimerKind::B | TimerKind::F, CState::Calling)
                        if !c.alternates.is_empty()
                            && c.server.as_ref().and_then(|k| self.server.get(k)).is_some_and(|s| !s.cancelled) =>
                    {
                        let c = self.client.remove(&ck).expect("present");
                        self.failover(now, c);
                    }
                    (TimerKind::B, CState::Calling) | (TimerKind::F, CState::Calling | CState::Proceeding) => {
                        self.stats.timeouts += 1;
                        let c = self.client.remove(&ck).expect("present");
                        tracing::debug!(method = %c.method, to = %c.peer.addr, "client transaction timed out");
                        if let Some(sk) = c.server {
                            let (bye, initial) = self
                                .server
                                .get(&sk)
                                .map(|s| (s.method == "BYE", s.initial_invite))
                                .unwrap_or((false, false));
                            self.reply(now, &sk, 408, reason_of(408), "");
                            if initial {
                                self.release_dialog_of(&sk);
                            }
                            if bye {
                                let cid = self.server.get(&sk).map(|s| s.call_id.clone()).unwrap_or_default();
                                self.release_dialog(&cid, "BYE timeout");
                            }
                        }
                    }
                    (TimerKind::C, CState::Proceeding) => self.send_cancel(now, &ck),
                    (TimerKind::C, CState::Calling) => {}
                    (TimerKind::D, CState::Completed)
                    | (TimerKind::K, CState::Completed)
                    | (TimerKind::M, CState::Accepted) => {
                        self.client.remove(&ck);
                    }
                    _ => {}
                }
            }
            TimerRef::Server(branch, sent_by, method) => {
                let key = ServerKey { branch, sent_by, method };
                let Some(s) = self.server.get_mut(&key) else { return };
                if s.id != t.id {
                    return;
                }
                match (t.kind, s.state) {
                    (TimerKind::G, SState::Completed) => {
                        s.g = (s.g * 2).min(tc.t2);
                        let (p, d, g, id) = (s.peer.clone(), s.last.clone(), s.g, s.id);
                        if let Some(d) = d {
                            self.stats.retransmissions_sent += 1;
                            self.send(p, d);
                        }
                        self.schedule(now + g, TimerKind::G, t.whose, id);
                    }
                    (TimerKind::H, SState::Completed)
                    | (TimerKind::I, SState::Confirmed)
                    | (TimerKind::J, SState::Completed)
                    | (TimerKind::L, SState::Accepted) => {
                        if t.kind == TimerKind::H {
                            tracing::debug!("no ACK for a final response (Timer H)");
                        }
                        let s = self.server.remove(&key).expect("present");
                        if let Some(ck) = s.client {
                            // The client side ends by its own timers.
                            let _ = ck;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Alg {
    /// RFC 3263 §4.3: a destination that never answered is replaced by the
    /// next one of the same realm, in a new client transaction (new branch,
    /// same loop-detection hash).
    fn failover(&mut self, now: Instant, mut c: ClientTxn) {
        let next = c.alternates.remove(0);
        let lh = c.branch.rsplit('-').next().unwrap_or("").to_string();
        let branch = format!("z9hG4bK-v6g{:x}-{lh}", self.id());
        let old = format!("branch={}", c.branch);
        let Some(at) = find_bytes(&c.request, old.as_bytes()) else { return };
        let mut data = Vec::with_capacity(c.request.len() + 8);
        data.extend_from_slice(&c.request[..at]);
        data.extend_from_slice(format!("branch={branch}").as_bytes());
        data.extend_from_slice(&c.request[at + old.len()..]);
        self.stats.failovers += 1;
        tracing::debug!(from = %c.peer.addr, to = %next.addr, "no answer; trying the next destination");
        let peer = Peer { realm: c.peer.realm, transport: next.transport, addr: next.addr, conn: None };
        let ck = client_key(&branch, &c.method);
        if let Some(sk) = &c.server {
            if let Some(st) = self.server.get_mut(sk) {
                st.client = Some(ck.clone());
            }
        }
        let method = c.method.clone();
        self.start_client(now, ck.clone(), branch, &method, peer, data, c.server.take());
        if let Some(n) = self.client.get_mut(&ck) {
            n.alternates = std::mem::take(&mut c.alternates);
        }
    }
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `sip:alg-<base64url(original)>@ours` — the original comes back when a
/// request is sent to it.
pub fn encode_contact(orig: &str, hostport: &str, t: Transport) -> String {
    let tparam = if t == Transport::Tcp { ";transport=tcp" } else { "" };
    format!("sip:{ENC_PREFIX}{}@{hostport}{tparam}", uri::b64url_encode(orig.as_bytes()))
}

/// The ACK for a non-2xx final response (RFC 3261 §17.1.1.3): the
/// request's Request-URI, top Via, From, Call-ID, CSeq number and Route,
/// the response's To.
fn build_ack(request: &[u8], resp: &Message) -> Option<Vec<u8>> {
    let req = Message::parse_datagram(request).ok()?;
    let Start::Request { uri: ruri, .. } = req.start else { return None };
    let mut b = Builder::new(&format!("ACK {ruri} SIP/2.0"), 512);
    let (_, v, _) = emit::first_via(&req)?;
    b.header("Via", &v);
    for h in &req.headers {
        match h.name {
            Name::From | Name::CallId | Name::Route => b.raw(h),
            Name::CSeq => b.header("CSeq", &format!("{} ACK", req.cseq()?.0)),
            _ => {}
        }
    }
    if let Some(h) = resp.all(Name::To).next() {
        b.raw(h);
    }
    b.header("Max-Forwards", "70");
    Some(b.finish(b""))
}
