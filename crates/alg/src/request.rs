//! Requests (RFC 3261 §16.3 – §16.6): retransmissions, ACK, CANCEL,
//! validation of the proxy's own (Max-Forwards, loops, Proxy-Require),
//! Route processing, the realm decision and the forwarded copy with its
//! Via, Record-Route, Path, Contact and SDP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{ContactMode, Transport};
use crate::dialog::SdpJob;
use crate::emit::{self, Builder};
use crate::media::Started;
use crate::msg::{Message, Name, Start, Via};
use crate::pending::Work;
use crate::proxy::{client_key, encode_contact, hash, reason_of, server_key, Alg, ENC_PREFIX};
use crate::realm::{self, Located, Realm, Resolution, Target};
use crate::shares::ClientKey;
use crate::stats::Refusal;
use crate::txn::*;
use crate::uri::{self, Host, Scheme, Uri};

/// The largest message the ALG sends over `t` (IPv6: `v6`): a UDP
/// datagram's payload (65,535 bytes less the IPv4 or UDP headers), or the
/// size any SIP element is asked to accept over a stream.
pub(crate) fn max_forwarded(t: Transport, v6: bool) -> usize {
    match (t, v6) {
        (Transport::Udp, false) => 65_507,
        (Transport::Udp, true) => 65_527,
        (Transport::Tcp, _) => crate::MAX_MESSAGE,
    }
}

/// The parts of a request its CANCEL and ACK are built from (RFC 3261
/// §9.1, §17.1.1.3: the Request-URI, top Via, From, To, Call-ID, CSeq and
/// Route): what a client transaction keeps of its request once nothing
/// retransmits it.
pub(crate) fn skeleton(req: &[u8]) -> Option<Vec<u8>> {
    let m = Message::parse_datagram(req).ok()?;
    let mut b = Builder::new(m.start_line, 512);
    if let Some((_, v, _)) = emit::first_via(&m) {
        b.header("Via", v);
    }
    for h in &m.headers {
        if matches!(h.name, Name::From | Name::To | Name::CallId | Name::CSeq | Name::Route) {
            b.raw(h);
        }
    }
    Some(b.finish(b""))
}

/// What forwarding a request decided before its media step.
#[derive(Debug)]
pub(crate) struct Fwd {
    /// Where it came from.
    pub(crate) peer: Peer,
    /// Its server transaction (None: ACK for a 2xx).
    pub(crate) key: Option<ServerKey>,
    /// The loop-detection hash.
    pub(crate) lh: String,
    /// The Request-URI it goes with.
    pub(crate) new_ruri: String,
    /// Route entries of ours removed from the top.
    pub(crate) popped: usize,
    /// The last Route became the Request-URI (strict-routing previous hop).
    pub(crate) drop_last_route: bool,
    /// Where it goes.
    pub(crate) dest: Target,
    /// The other destinations of that realm (failover).
    pub(crate) targets: Vec<Target>,
    /// The realm it goes to.
    pub(crate) out_realm: Realm,
}

impl Alg {
    pub(crate) fn on_request(&mut self, now: Instant, peer: &Peer, m: &Message, raw: &[u8]) {
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
                        self.schedule(now + i, TimerKind::I, TimerRef::Server, id);
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
            if let Some(last) = Self::last_response(st) {
                let p = st.peer.clone();
                self.send(p, last);
            }
            self.stats.retransmissions_absorbed += 1;
            return;
        }
        // A new transaction: within the budgets of its client, or 503.
        if let Err(why) = self.admit(self.owner_of(peer.addr.ip()), raw.len()) {
            self.refuse_overloaded(m, peer, why);
            return;
        }
        if method == "CANCEL" {
            self.on_cancel(now, peer, m, key);
            return;
        }
        self.forward_new(now, peer, m, raw, method, ruri, Some(key));
    }

    pub(crate) fn new_server(&mut self, now: Instant, peer: &Peer, m: &Message, key: &ServerKey, method: &str) {
        let id = self.id();
        let invite = method == "INVITE";
        let st = ServerTxn {
            id,
            invite,
            owner: self.owner_of(peer.addr.ip()),
            bytes: 0,
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
        self.server_insert(key.clone(), st);
        let _ = now;
    }

    /// Answers a new request locally in its own server transaction.
    pub(crate) fn answer_new(
        &mut self,
        now: Instant,
        peer: &Peer,
        m: &Message,
        key: Option<ServerKey>,
        code: u16,
        reason: &str,
    ) {
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

    pub(crate) fn on_cancel(&mut self, now: Instant, peer: &Peer, m: &Message, key: ServerKey) {
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
        // The caller gave up: its media goes now, not when the callee's 487
        // (or our timeout) ends the INVITE (a 2xx crossing the CANCEL is
        // relayed without media, and the caller ends that call with BYE).
        self.release_dialog_of(&ikey);
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
            None => self.reply(now, &ikey, 487, reason_of(487), ""),
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
            b.header("Via", v);
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
        let (peer, branch, id, owner) = (c.peer.clone(), c.branch.clone(), c.id, c.owner);
        if let Some(c) = self.client.get_mut(ck) {
            c.cancel_sent = true;
        }
        // RFC 3261 §9.1: no final response 64 × T1 after the CANCEL ends the
        // INVITE transaction (Timer B's handling in Proceeding).
        let t64 = self.timers_cfg.t64();
        self.schedule(now + t64, TimerKind::B, TimerRef::Client, id);
        self.start_client(now, branch, "CANCEL", (peer, data), (None, owner), Vec::new());
    }

    /// Starts a client transaction (`to`: where and what; `by`: the
    /// server transaction it serves and the client it is charged to;
    /// `alternates`: destinations to fail over to) and sends its request.
    pub(crate) fn start_client(
        &mut self,
        now: Instant,
        branch: String,
        method: &str,
        (peer, data): (Peer, Vec<u8>),
        (server, owner): (Option<Arc<ServerKey>>, ClientKey),
        alternates: Vec<Target>,
    ) {
        let t = self.timers_cfg;
        let id = self.id();
        let invite = method == "INVITE";
        let reliable = peer.transport.reliable();
        let tref = TimerRef::Client;
        let ck = client_key(&branch, method);
        if invite {
            if !reliable {
                self.schedule(now + t.t1, TimerKind::A, tref, id);
            }
            self.schedule(now + t.t64(), TimerKind::B, tref, id);
            self.schedule(now + t.c(), TimerKind::C, tref, id);
        } else {
            if !reliable {
                self.schedule(now + t.t1, TimerKind::E, tref, id);
            }
            self.schedule(now + t.t64(), TimerKind::F, tref, id);
        }
        // Over TCP nothing is retransmitted: without destinations to fail
        // over to, the request is kept only as far as CANCEL and ACK need it.
        let compact = reliable && alternates.is_empty();
        let keep = if compact { skeleton(&data).unwrap_or_else(|| data.clone()) } else { data.clone() };
        self.client_insert(
            ck,
            ClientTxn {
                id,
                invite,
                state: CState::Calling,
                request: keep,
                peer: peer.clone(),
                server,
                owner,
                bytes: 0,
                compact,
                branch,
                interval: t.t1,
                cancel_pending: false,
                cancel_sent: false,
                c_at: now + t.c(),
                first_2xx: None,
                ack: None,
                method: method.to_string(),
                alternates,
            },
        );
        self.send(peer, data);
    }

    pub(crate) fn loop_hash(m: &Message, ruri: &str) -> u64 {
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
    pub(crate) fn forward_new(
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
        let targets = match realm::locate(&target_uri, &self.cfg.route) {
            Located::Ready(t) => t,
            Located::Failed(_) => Vec::new(),
            Located::Lookup(lookup) => {
                let res = match &self.answer {
                    Some((k, r)) if *k == lookup => r.clone(),
                    _ => {
                        let owner = self.owner_of(peer.addr.ip());
                        self.resolver.resolve(owner, &lookup, now)
                    }
                };
                match res {
                    Resolution::Ready(t) => t,
                    Resolution::Failed(_) => Vec::new(),
                    Resolution::Pending => return self.park(now, peer, m, raw, key.as_ref(), lookup),
                    Resolution::Busy => return self.refuse_overloaded(m, peer, Refusal::DnsBusy),
                    Resolution::TimedOut => {
                        self.count_refusal(Refusal::DnsTimeout, peer);
                        return self.answer_new(now, peer, m, key, 504, "Server Time-out (DNS)");
                    }
                }
            }
        };
        if targets.is_empty() {
            self.stats.unroutable += 1;
            return self.answer_new(now, peer, m, key, 404, "Not Found (no route to the target)");
        }
        // Every destination through the ALG's own checks (issue #29 D2).
        let mut targets = match self.screen_next_hops(targets) {
            Ok(t) => t,
            Err(why) => {
                self.count_refusal(why, peer);
                let (code, reason) = match why {
                    Refusal::OwnListener => (482, "Loop Detected (the next hop is this ALG)"),
                    _ => (403, "Forbidden (next hop refused)"),
                };
                return self.answer_new(now, peer, m, key, code, reason);
            }
        };
        let dest = targets.remove(0);
        let out_realm = Realm::of(dest.addr.ip());
        targets.retain(|t| Realm::of(t.addr.ip()) == out_realm);
        // An IPv4-mapped Request-URI going into the IPv4 realm is written
        // in the dotted form an IPv4-only UA parses (RFC 5118 §4.9's
        // addresses mean the IPv4 host).
        let mapped = match ru.host {
            Host::V6(a) if next.is_none() && out_realm == Realm::V4 => a.to_ipv4_mapped(),
            _ => None,
        };
        if let Some(v4) = mapped {
            new_ruri = ru.with_host(&v4.to_string());
        }
        if let Some(k) = &key {
            self.new_server(now, peer, m, k, method);
            if let Some(st) = self.server.get_mut(k) {
                st.out_realm = out_realm;
                st.offer = crate::body::sdp_body(m).present();
            }
            if method == "INVITE" {
                self.reply(now, k, 100, "Trying", "");
            }
        }
        let fwd = Fwd { peer: peer.clone(), key, lh, new_ruri, popped, drop_last_route, dest, targets, out_realm };
        self.forward_media(now, fwd, m, raw);
    }

    /// The SDP of a request being forwarded through the media control
    /// (in order behind the call's commands still running), then the
    /// forwarded request.
    pub(crate) fn forward_media(&mut self, now: Instant, fwd: Fwd, m: &Message, raw: &[u8]) {
        let Start::Request { method, .. } = m.start else { return };
        if let Some(q) = self.media_busy.get_mut(m.call_id()) {
            q.push_back(Work::Request { fwd: Box::new(fwd), raw: raw.to_vec() });
            return;
        }
        let job = match self.plan_request(now, m, method, (fwd.peer.realm, fwd.out_realm), fwd.peer.addr.ip()) {
            Ok(j) => j,
            Err((code, reason)) => return self.refuse_forward(now, &fwd, code, &reason),
        };
        let Some(job) = job else { return self.forward_build(now, fwd, m, raw, None) };
        match self.media_start(now, &job.req) {
            Started::Done(r) => self.forward_after_media(now, fwd, m, raw, job, r),
            Started::Pending(t) => {
                let cid = m.call_id().to_string();
                self.media_busy.insert(cid.clone(), Default::default());
                self.media_inflight
                    .insert(t, (cid, Work::Request { fwd: Box::new(fwd), raw: raw.to_vec() }, Some(job)));
            }
        }
    }

    /// Forwards a request once its offer or answer was answered.
    pub(crate) fn forward_after_media(
        &mut self,
        now: Instant,
        fwd: Fwd,
        m: &Message,
        raw: &[u8],
        job: SdpJob,
        reply: crate::media::Reply,
    ) {
        match self.finish_request(job, reply) {
            Ok(body) => self.forward_build(now, fwd, m, raw, body),
            Err((code, reason)) => self.refuse_forward(now, &fwd, code, &reason),
        }
    }

    /// A request whose media the relay refused gets `code` (unless its
    /// transaction ended meanwhile); a 503 (the relay is out of ports or
    /// the client of its share) says when to try again.
    fn refuse_forward(&mut self, now: Instant, fwd: &Fwd, code: u16, reason: &str) {
        let extra = match code {
            415 => {
                // A body whose SDP cannot be anchored (crate::body).
                self.count_refusal(Refusal::Body, &fwd.peer);
                format!("Accept: {}\r\n", crate::body::ACCEPTED)
            }
            // The media relay is full or the client holds its share of it.
            503 => format!("Retry-After: {}\r\n", crate::state::RETRY_AFTER_SECS),
            _ => String::new(),
        };
        if let Some(k) = &fwd.key {
            if self.server.get(k).is_some_and(|st| st.state == SState::Proceeding) {
                self.reply(now, k, code, reason, &extra);
            }
        }
    }

    /// Builds and sends the forwarded request (§16.6): Via, Record-Route,
    /// Path, Routes, Contact, Max-Forwards, the body.
    pub(crate) fn forward_build(&mut self, now: Instant, fwd: Fwd, m: &Message, raw: &[u8], body: Option<Vec<u8>>) {
        let Start::Request { method, .. } = m.start else { return };
        let Fwd { peer, key, lh, new_ruri, popped, drop_last_route, dest, targets, out_realm } = fwd;
        let peer = &peer;
        if let Some(k) = &key {
            // A transaction that ended while its media command ran (CANCEL)
            // is not forwarded.
            if !self.server.get(k).is_some_and(|st| st.state == SState::Proceeding && !st.cancelled) {
                return;
            }
        }
        let out_peer = Peer { realm: out_realm, transport: dest.transport, addr: dest.addr, conn: None };
        let initial = m.to_tag().is_none();
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
        // The message passed validation: every Route list parses, so its
        // elements are its list elements.
        let route_count = |h: &crate::msg::Header| uri::split_list(&h.value).map_or(0, |l| l.len());
        let total_routes = m.all(Name::Route).map(route_count).sum::<usize>();
        let mut route_seen = 0usize;
        let mut first_via = true;
        for h in &m.headers {
            match h.name {
                Name::Via if first_via => {
                    first_via = false;
                    if let Some((_, v, rest)) = emit::first_via(m) {
                        let mut val = self.with_received(v, peer);
                        for r in rest {
                            val.push_str(", ");
                            val.push_str(r);
                        }
                        b.header(h.raw_name, &val);
                    }
                }
                Name::MaxForwards => {}
                Name::ContentLength => {}
                Name::Route => {
                    let n = route_count(h);
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
        // What the rewriting added (Via, Record-Route, the longer Contact)
        // may not fit the next hop's transport: the caller gets 513 at once
        // instead of a 408 after Timer B (RFC 3261 §21.5.12: the message
        // exceeds what this server can carry on).
        if data.len() > max_forwarded(tp, dest.addr.is_ipv6()) {
            self.count_refusal(Refusal::TooLarge, peer);
            if let Some(k) = &key {
                self.reply(now, k, 513, "Message Too Large (once rewritten for the next hop)", "");
                if method == "INVITE" && initial {
                    self.release_dialog_of(k);
                }
            }
            return;
        }
        self.stats.requests_forwarded += 1;
        match key {
            Some(k) => {
                let ck = client_key(&branch, method);
                let Some((k, st)) = self.server.get_key_value(&k).map(|(k, st)| (k.clone(), st.owner)) else { return };
                if let Some(st) = self.server.get_mut(&*k) {
                    st.client = Some(ck.clone());
                }
                self.start_client(now, branch, method, (out_peer, data), (Some(k), st), targets);
            }
            None => self.send(out_peer, data),
        }
    }
}
