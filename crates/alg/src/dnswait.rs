//! Requests waiting for DNS (issue #29 D1). A request whose next hop is a
//! host name the resolver has not answered yet is parked under its lookup,
//! charged to its client's share of `max-parked-bytes`; a retransmission
//! of a parked request is absorbed (not parked twice). When the lookup
//! finishes, only the requests waiting for that name run again, with the
//! answer, and not through the rate limiter (they passed it when they
//! came). A lookup that never finishes gives its requests `504` after
//! `dns-timeout` plus a second, whatever the resolver does.

use std::time::{Duration, Instant};

use crate::msg::Message;
use crate::proxy::Alg;
use crate::realm::{LookupKey, Resolution};
use crate::stats::Refusal;
use crate::txn::{Peer, ServerKey, TimerKind, TimerRef};

/// One parked request.
#[derive(Debug)]
pub(crate) struct Parked {
    peer: Peer,
    data: Vec<u8>,
    bytes: u64,
}

/// The requests waiting for one lookup.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// Its deadline timer's id.
    id: u64,
    reqs: Vec<Parked>,
    /// The server transactions they will make (a retransmission is found
    /// without a scan).
    keys: std::collections::HashSet<ServerKey, foldhash::fast::RandomState>,
}

/// What a parked request costs beyond its bytes.
const PARKED_OVERHEAD: u64 = 256;

impl Alg {
    /// Parks a request (`key`: its server transaction to be; None for an
    /// ACK) until `lookup` finishes, or refuses it with 503 when the
    /// parked requests' budget (or the client's share of it) is full.
    pub(crate) fn park(
        &mut self,
        now: Instant,
        peer: &Peer,
        m: &Message,
        raw: &[u8],
        key: Option<&ServerKey>,
        lookup: LookupKey,
    ) {
        if let (Some(k), Some(w)) = (key, self.parked.get(&lookup)) {
            if w.keys.contains(k) {
                self.stats.retransmissions_absorbed += 1;
                return;
            }
        }
        let owner = self.owner_of(peer.addr.ip());
        let bytes = raw.len() as u64 + key.map_or(0, ServerKey::footprint) + PARKED_OVERHEAD;
        if self.budgets.parked.take(owner, bytes).is_err() {
            self.refuse_overloaded(m, peer, Refusal::Parked);
            return;
        }
        self.stats.parked += 1;
        self.parked_count += 1;
        let p = Parked { peer: peer.clone(), data: raw.to_vec(), bytes };
        if !self.parked.contains_key(&lookup) {
            let id = self.id();
            let at = now + self.cfg.dns_timeout + Duration::from_secs(1);
            self.schedule(at, TimerKind::Lookup, TimerRef::Lookup, id);
            self.parked_ids.insert(id, lookup.clone());
            self.parked.insert(lookup.clone(), Waiting { id, reqs: Vec::new(), keys: Default::default() });
        }
        if let Some(w) = self.parked.get_mut(&lookup) {
            w.reqs.push(p);
            if let Some(k) = key {
                w.keys.insert(k.clone());
            }
        }
    }

    /// The requests of a lookup leave the parking, their bytes given back.
    fn unpark(&mut self, lookup: &LookupKey) -> Vec<Parked> {
        let Some(w) = self.parked.remove(lookup) else { return Vec::new() };
        self.parked_ids.remove(&w.id);
        self.parked_count -= w.reqs.len();
        for p in &w.reqs {
            let owner = self.owner_of(p.peer.addr.ip());
            self.budgets.parked.give_back(owner, p.bytes);
        }
        w.reqs
    }

    /// Runs the requests whose lookups finished (the runner calls this
    /// when its resolver has answers), each with its lookup's answer.
    pub fn dns_completed(&mut self, now: Instant) {
        self.clock = now;
        while let Some((lookup, res)) = self.resolver.poll_done() {
            let reqs = self.unpark(&lookup);
            if reqs.is_empty() {
                continue;
            }
            self.answer = Some((lookup, res));
            for p in reqs {
                // Parsed and checked when it came: it parses again.
                if let Ok(m) = Message::parse_datagram(&p.data) {
                    self.on_request(now, &p.peer, &m, &p.data);
                }
            }
            self.answer = None;
        }
    }

    /// A lookup's deadline: whatever still waits for it gets 504.
    pub(crate) fn lookup_timer(&mut self, now: Instant, id: u64) {
        let Some(lookup) = self.parked_ids.get(&id).cloned() else { return };
        let reqs = self.unpark(&lookup);
        self.answer = Some((lookup, Resolution::TimedOut));
        for p in reqs {
            if let Ok(m) = Message::parse_datagram(&p.data) {
                self.on_request(now, &p.peer, &m, &p.data);
            }
        }
        self.answer = None;
    }
}
