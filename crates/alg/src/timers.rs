//! Timers (RFC 3261 §17 Table 4, Timer C, RFC 6026 L/M, dialog
//! lifetimes) and the RFC 3263 §4.3 failover to the next destination.

use std::time::Instant;

use crate::proxy::{client_key, reason_of, Alg};
use crate::txn::*;

impl Alg {
    /// Runs expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.clock = now;
        if let Some(m) = self.media.as_deref_mut() {
            if m.poll_timeout().is_some_and(|t| t <= now) {
                m.handle_timeout(now);
                self.media_completions(now);
            }
        }
        while let Some(t) = self.timers.pop_due(now) {
            self.fire(now, t);
        }
    }

    pub(crate) fn fire(&mut self, now: Instant, t: Timer) {
        let tc = self.timers_cfg;
        match t.whose {
            TimerRef::Dialog => self.dialog_timer(now, t.id),
            TimerRef::Lookup => self.lookup_timer(now, t.id),
            TimerRef::Client => {
                let Some(ck) = self.client_key_of(t.id) else { return };
                let Some(c) = self.client.get_mut(&ck) else { return };
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
                        if let Some(c) = self.client_remove(&ck) {
                            self.failover(now, c);
                        }
                    }
                    (TimerKind::B, CState::Calling) | (TimerKind::F, CState::Calling | CState::Proceeding) => {
                        self.client_timed_out(now, &ck)
                    }
                    // A CANCELled INVITE the callee never ended (RFC 3261 §9.1).
                    (TimerKind::B, CState::Proceeding) if c.cancel_sent => self.client_timed_out(now, &ck),
                    // Reset by a provisional since it was set: due later.
                    (TimerKind::C, CState::Proceeding) if c.c_at > now => {
                        let (at, id) = (c.c_at, c.id);
                        self.schedule(at, TimerKind::C, t.whose, id);
                    }
                    (TimerKind::C, CState::Proceeding) => self.send_cancel(now, &ck),
                    (TimerKind::C, CState::Calling) => {}
                    (TimerKind::D, CState::Completed)
                    | (TimerKind::K, CState::Completed)
                    | (TimerKind::M, CState::Accepted) => {
                        self.client_remove(&ck);
                    }
                    _ => {}
                }
            }
            TimerRef::Server => {
                if let Some(key) = self.server_key_of(t.id) {
                    self.server_timer(now, &key, t)
                }
            }
        }
    }

    /// A client transaction that got no (final) answer ends: its server
    /// transaction gets 408 (487 when the caller had CANCELled), and the
    /// dialog of a failed initial INVITE or BYE goes with its media.
    fn client_timed_out(&mut self, now: Instant, ck: &str) {
        self.stats.timeouts += 1;
        let Some(c) = self.client_remove(ck) else { return };
        tracing::debug!(method = %c.method, to = %c.peer.addr, "client transaction timed out");
        if let Some(sk) = c.server {
            let (bye, initial, cancelled) = self
                .server
                .get(&sk)
                .map(|s| (s.method == "BYE", s.initial_invite, s.cancelled))
                .unwrap_or((false, false, false));
            let code = if cancelled { 487 } else { 408 };
            self.reply(now, &sk, code, reason_of(code), "");
            if initial {
                self.release_dialog_of(&sk);
            }
            if bye {
                let cid = self.server.get(&sk).map(|s| s.call_id.clone()).unwrap_or_default();
                self.release_dialog(&cid, "BYE timeout");
            }
        }
    }

    fn server_timer(&mut self, now: Instant, key: &ServerKey, t: Timer) {
        let tc = self.timers_cfg;
        let Some(s) = self.server.get_mut(key) else { return };
        match (t.kind, s.state) {
            (TimerKind::G, SState::Completed) => {
                s.g = (s.g * 2).min(tc.t2);
                let (p, g, id) = (s.peer.clone(), s.g, s.id);
                let d = Self::last_response(s);
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
                let Some(s) = self.server_remove(key) else { return };
                // The client side ends by its own timers. A 2xx the caller
                // never ACKed (it gave up): the call is over, its media goes
                // now, not at the dialog timeout.
                if t.kind == TimerKind::L
                    && s.initial_invite
                    && self.dialogs.get(s.call_id.as_str()).is_some_and(|d| !d.acked)
                {
                    self.release_dialog(&s.call_id, "no ACK for the 2xx");
                }
            }
            _ => {}
        }
    }
}

impl Alg {
    /// RFC 3263 §4.3: a destination that never answered is replaced by the
    /// next one of the same realm, in a new client transaction (new branch,
    /// same loop-detection hash).
    pub(crate) fn failover(&mut self, now: Instant, mut c: ClientTxn) {
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
            if let Some(st) = self.server.get_mut(&**sk) {
                st.client = Some(ck.clone());
            }
        }
        let method = c.method.clone();
        let alternates = std::mem::take(&mut c.alternates);
        self.start_client(now, branch, &method, (peer, data), (c.server.take(), c.owner), alternates);
    }
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
