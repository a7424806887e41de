//! Responses (RFC 3261 §16.7, §17.1): client transaction state, the ACK
//! for non-2xx finals, forwarding through the server transaction (or
//! statelessly for a 2xx retransmitted after it ended), Contact and SDP.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{ContactMode, Transport};
use crate::emit::{self, Builder};
use crate::msg::{Message, Name, Start, Via};
use crate::pending::Work;
use crate::proxy::{client_key, encode_contact, fnv1a, Alg, ENC_PREFIX, FNV_OFFSET};
use crate::realm::Realm;
use crate::request::max_forwarded;
use crate::stats::Refusal;
use crate::txn::*;
use crate::uri::{self, Uri};

impl Alg {
    pub(crate) fn on_response(&mut self, now: Instant, peer: &Peer, m: &Message, raw: &[u8]) {
        let Some(via) = m.top_via() else { return };
        let Some((_, cseq_m)) = m.cseq() else { return };
        let code = m.code().unwrap_or(0);
        let branch = via.branch().unwrap_or("").to_string();
        let ck = client_key(&branch, cseq_m);
        let Some(c) = self.client.get_mut(&ck) else {
            // §16.7 step 1: no transaction: forward statelessly when the top
            // Via is ours (2xx retransmissions after the transaction ended).
            if self.is_us(&via.host, via.port) {
                self.forward_response_stateless(now, m, raw);
            } else {
                self.stats.stray_responses += 1;
            }
            return;
        };
        let _ = peer;
        let t = self.timers_cfg;
        let tref = TimerRef::Client;
        let id = c.id;
        let reliable = c.peer.transport.reliable();
        match (c.invite, c.state, code) {
            (true, CState::Calling | CState::Proceeding, 100..=199) => {
                c.state = CState::Proceeding;
                if code > 100 {
                    c.c_at = now + t.c();
                }
                let cancel = std::mem::take(&mut c.cancel_pending);
                // No more retransmissions of the INVITE.
                self.client_compact(&ck);
                if cancel {
                    self.send_cancel(now, &ck);
                }
                if code > 100 {
                    self.relay_response(now, &ck, m, raw);
                }
            }
            (true, CState::Calling | CState::Proceeding | CState::Accepted, 200..=299) => {
                // A retransmission is byte-identical.
                let h = fnv1a(FNV_OFFSET, raw);
                if c.first_2xx == Some(h) {
                    // The callee retransmits its 2xx until the ACK: the one
                    // already built goes again (no second media answer).
                    let sk = c.server.clone();
                    let sent = sk.as_ref().and_then(|k| self.server.get(&**k)).filter(|s| s.state == SState::Accepted);
                    if let Some((p, d)) = sent.and_then(|s| Some((s.peer.clone(), Self::last_response(s)?))) {
                        self.stats.responses_forwarded += 1;
                        self.send(p, d);
                        return;
                    }
                }
                c.first_2xx.get_or_insert(h);
                if c.state != CState::Accepted {
                    c.state = CState::Accepted;
                    self.schedule(now + t.t64(), TimerKind::M, tref, id);
                }
                self.client_compact(&ck);
                self.relay_response(now, &ck, m, raw);
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
                self.client_compact(&ck);
                self.relay_response(now, &ck, m, raw);
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
                    self.relay_response(now, &ck, m, raw);
                }
            }
            (false, CState::Calling | CState::Proceeding, 200..=699) => {
                c.state = CState::Completed;
                let k = if reliable { Duration::ZERO } else { t.t4 };
                self.schedule(now + k, TimerKind::K, tref, id);
                self.client_compact(&ck);
                self.relay_response(now, &ck, m, raw);
            }
            _ => self.stats.retransmissions_absorbed += 1,
        }
    }

    /// The server transaction a response of client `ck` goes to, when it
    /// may still take it: (server key, method, in realm, out realm, the
    /// request had an offer, initial INVITE).
    fn relay_target(&self, ck: &str, code: u16) -> Option<(Arc<ServerKey>, String, Realm, Realm, bool, bool)> {
        let c = self.client.get(ck)?;
        let sk = c.server.clone()?;
        let st = self.server.get(&*sk)?;
        if st.state != SState::Proceeding && !(st.state == SState::Accepted && (200..300).contains(&code)) {
            return None;
        }
        Some((sk, c.method.clone(), st.in_realm, st.out_realm, st.offer, st.initial_invite))
    }

    /// Forwards a response to the server transaction of client `ck` (its
    /// SDP through the media control first, in the call's order).
    pub(crate) fn relay_response(&mut self, now: Instant, ck: &str, m: &Message, raw: &[u8]) {
        let code = m.code().unwrap_or(0);
        let Some((_, method, in_realm, out_realm, offer, _)) = self.relay_target(ck, code) else { return };
        if let Some(q) = self.media_busy.get_mut(m.call_id()) {
            q.push_back(Work::Response { ck: ck.to_string(), raw: raw.to_vec() });
            return;
        }
        let plan = self.plan_response(m, &method, out_realm, in_realm, offer);
        let work = || Work::Response { ck: ck.to_string(), raw: raw.to_vec() };
        if let Some(body) = self.response_media(now, plan, work) {
            self.relay_response_send(now, ck, m, body);
        }
    }

    /// Sends a relayed response (with its new body) and does what it
    /// means for the dialog.
    pub(crate) fn relay_response_send(&mut self, now: Instant, ck: &str, m: &Message, body: Option<Vec<u8>>) {
        let code = m.code().unwrap_or(0);
        let Some((sk, method, in_realm, out_realm, _, initial)) = self.relay_target(ck, code) else { return };
        let data = self.build_response(m, in_realm, out_realm, &method, body.as_deref());
        let Some(back) = self.server.get(&*sk).map(|s| s.peer.clone()) else { return };
        if data.len() > max_forwarded(back.transport, back.addr.is_ipv6()) {
            // Grown past what the way back carries (a longer Contact): a
            // final answer becomes the ALG's own 502, a provisional is left out.
            self.count_refusal(Refusal::TooLarge, &back);
            if code >= 200 {
                self.reply(now, &sk, 502, "Bad Gateway (response too large once rewritten)", "");
                if method == "INVITE" && initial {
                    self.release_dialog_of(&sk);
                }
            }
            return;
        }
        self.stats.responses_forwarded += 1;
        self.server_send(now, &sk, code, data.clone(), Last::Relayed(data));
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

    /// Where a response without a transaction goes (its second Via, with
    /// `received`/`rport`): (peer, its realm, the method).
    fn stateless_target(&self, m: &Message) -> Option<(Peer, String)> {
        let vias = m.vias();
        let next = vias.get(1).and_then(|v| Via::parse(v).ok())?;
        let host =
            match next.param("received").flatten().and_then(|r| r.trim_matches(['[', ']']).parse::<IpAddr>().ok()) {
                Some(ip) => ip,
                None => next.host.ip()?,
            };
        let host = match host {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(host, IpAddr::V4),
            v4 => v4,
        };
        let port = next.param("rport").flatten().and_then(|p| p.parse().ok()).or(next.port).unwrap_or(5060);
        let tp = Transport::from_token(next.transport).unwrap_or_default();
        let method = m.cseq().map(|c| c.1.to_string()).unwrap_or_default();
        Some((Peer { realm: Realm::of(host), transport: tp, addr: SocketAddr::new(host, port), conn: None }, method))
    }

    pub(crate) fn forward_response_stateless(&mut self, now: Instant, m: &Message, raw: &[u8]) {
        let Some((peer, method)) = self.stateless_target(m) else {
            self.stats.stray_responses += 1;
            return;
        };
        // The next Via is the sender's word: it goes through the same
        // checks as a request's next hop.
        if let Err(why) = self.destination_check(peer.addr) {
            self.count_refusal(why, &peer);
            return;
        }
        if !((200..300).contains(&m.code().unwrap_or(0)) && method == "INVITE") {
            return self.stateless_send(m, None);
        }
        if let Some(q) = self.media_busy.get_mut(m.call_id()) {
            q.push_back(Work::Stateless { raw: raw.to_vec() });
            return;
        }
        let plan = self.plan_response(m, &method, peer.realm.other(), peer.realm, true);
        if let Some(body) = self.response_media(now, plan, || Work::Stateless { raw: raw.to_vec() }) {
            self.stateless_send(m, body);
        }
    }

    /// Sends a response without a transaction to its next Via.
    pub(crate) fn stateless_send(&mut self, m: &Message, body: Option<Vec<u8>>) {
        let Some((peer, method)) = self.stateless_target(m) else { return };
        let data = self.build_response(m, peer.realm, peer.realm.other(), &method, body.as_deref());
        self.stats.responses_forwarded += 1;
        self.send(peer, data);
    }

    /// A response with our Via removed, Contact made reachable from
    /// `to_realm` (or restored for REGISTER), and the new body.
    pub(crate) fn build_response(
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
}

/// The ACK for a non-2xx final response (RFC 3261 §17.1.1.3): the
/// request's Request-URI, top Via, From, Call-ID, CSeq number and Route,
/// the response's To.
fn build_ack(request: &[u8], resp: &Message) -> Option<Vec<u8>> {
    let req = Message::parse_datagram(request).ok()?;
    let Start::Request { uri: ruri, .. } = req.start else { return None };
    let mut b = Builder::new(&format!("ACK {ruri} SIP/2.0"), 512);
    let (_, v, _) = emit::first_via(&req)?;
    b.header("Via", v);
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
