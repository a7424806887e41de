//! The core's tables and what they cost. Every transaction and dialog is
//! inserted and removed here, so its bytes are charged to its owner's
//! budgets ([`crate::shares`]) when it is made, moved when it grows or
//! shrinks, and given back exactly once when it goes; timers find their
//! entry by id ([`crate::txn::TimerRef`]), so a timer that outlives its
//! entry holds none of its bytes. New requests are admitted against the
//! budgets before any work is done for them, and refused with `503` and
//! `Retry-After` when a budget is full.

use std::sync::Arc;

use crate::config::Config;
use crate::dialog::Dialog;
use crate::msg::Message;
use crate::proxy::Alg;
use crate::shares::{ClientKey, Full, Shares};
use crate::stats::{local_code_index, Refusal};
use crate::txn::{ClientTxn, Last, Peer, ServerKey, ServerTxn};

/// The budgets the core keeps (the runner keeps the TCP connections', the
/// resolver the lookups').
#[derive(Debug, Clone)]
pub struct Budgets {
    /// Live server transactions (`max-transactions`).
    pub transactions: Shares,
    /// Bytes of transactions and dialogs (`max-state-bytes`).
    pub state: Shares,
    /// Bytes of requests waiting for DNS (`max-parked-bytes`).
    pub parked: Shares,
}

impl Budgets {
    /// The budgets of `cfg`.
    pub fn new(cfg: &Config) -> Budgets {
        let p = cfg.client_share;
        Budgets {
            transactions: Shares::new(cfg.max_transactions as u64, p),
            state: Shares::new(cfg.max_state_bytes as u64, p),
            parked: Shares::new(cfg.max_parked_bytes as u64, p),
        }
    }

    /// New caps from a reload (what is held stays).
    pub fn reconfigure(&mut self, cfg: &Config) {
        let p = cfg.client_share;
        self.transactions.set_limits(cfg.max_transactions as u64, p);
        self.state.set_limits(cfg.max_state_bytes as u64, p);
        self.parked.set_limits(cfg.max_parked_bytes as u64, p);
    }
}

/// One budget's use: held now, the cap, one client's share.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Held now.
    pub used: u64,
    /// The global cap.
    pub limit: u64,
    /// One client's share.
    pub share: u64,
    /// Clients holding something.
    pub clients: usize,
}

impl From<&Shares> for Usage {
    fn from(s: &Shares) -> Usage {
        Usage { used: s.used(), limit: s.limit(), share: s.share(), clients: s.clients() }
    }
}

/// The budgets' use (`/status`, `/metrics`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BudgetUse {
    /// Live server transactions.
    pub transactions: Usage,
    /// Bytes of transactions and dialogs.
    pub state_bytes: Usage,
    /// Bytes of requests parked for DNS.
    pub parked_bytes: Usage,
    /// DNS lookups in flight (used, limit).
    pub dns_lookups: (usize, usize),
}

/// What admitting a new request of `len` bytes may cost at most: its
/// server transaction (the response headers copy its Via lines) and the
/// client transaction holding the forwarded copy.
pub(crate) fn admission_estimate(len: usize) -> u64 {
    (2 * len + 2048) as u64
}

/// How long a client refused for a full budget is asked to wait.
pub(crate) const RETRY_AFTER_SECS: u32 = 5;

impl Alg {
    /// The client an address belongs to.
    pub(crate) fn owner_of(&self, ip: std::net::IpAddr) -> ClientKey {
        ClientKey::of(ip, self.cfg.client_prefix_length)
    }

    /// Whether a new transaction for a request of `len` bytes from `owner`
    /// fits the budgets.
    pub(crate) fn admit(&self, owner: ClientKey, len: usize) -> Result<(), Refusal> {
        let b = &self.budgets;
        let on = |f: Full, global: Refusal| if f == Full::Global { global } else { Refusal::ClientShare };
        b.transactions.check(owner, 1).map_err(|f| on(f, Refusal::Transactions))?;
        b.state.check(owner, admission_estimate(len)).map_err(|f| on(f, Refusal::StateBytes))
    }

    /// Counts a refusal and writes its rate-limited log line (a next hop
    /// the destination policy refused is logged by the policy).
    pub(crate) fn count_refusal(&mut self, why: Refusal, peer: &Peer) {
        self.stats.refused[why.index()] += 1;
        if why == Refusal::NextHop {
            return;
        }
        if let Some(suppressed) = self.logs.admit(why, self.clock) {
            let owner = self.owner_of(peer.addr.ip());
            tracing::warn!(suppressed, client = %owner, from = %peer.addr, reason = why.label(), "SIP request refused");
        }
    }

    /// Answers a request refused for a full budget: `503` with
    /// `Retry-After`, without a transaction (a retransmission is refused
    /// again, at no cost).
    pub(crate) fn refuse_overloaded(&mut self, m: &Message, peer: &Peer, why: Refusal) {
        self.count_refusal(why, peer);
        if m.method() == Some("ACK") {
            return;
        }
        let rh = self.resp_headers(m, peer);
        let extra = format!("Retry-After: {RETRY_AFTER_SECS}\r\n");
        let tag = format!("{:x}", crate::proxy::hash(&[m.call_id(), "v6gate"]));
        let r = Self::local_response(&rh, 503, "Service Unavailable", Some(&tag), &extra);
        self.stats.local_responses[local_code_index(503)] += 1;
        self.send(peer.clone(), r);
    }

    /// Adds a server transaction, charged to its owner.
    pub(crate) fn server_insert(&mut self, key: ServerKey, mut st: ServerTxn) -> Arc<ServerKey> {
        st.bytes = st.footprint(&key);
        self.budgets.transactions.charge(st.owner, 1);
        self.budgets.state.charge(st.owner, st.bytes);
        let key = Arc::new(key);
        self.server_ids.insert(st.id, key.clone());
        if let Some(old) = self.server.insert(key.clone(), st) {
            self.server_uncharge(&old);
        }
        key
    }

    fn server_uncharge(&mut self, st: &ServerTxn) {
        self.server_ids.remove(&st.id);
        self.budgets.transactions.give_back(st.owner, 1);
        self.budgets.state.give_back(st.owner, st.bytes);
    }

    /// Removes a server transaction and gives back what it held.
    pub(crate) fn server_remove(&mut self, key: &ServerKey) -> Option<ServerTxn> {
        let st = self.server.remove(key)?;
        self.server_uncharge(&st);
        Some(st)
    }

    /// Records the last response of a server transaction (its bytes move
    /// with it).
    pub(crate) fn server_set_last(&mut self, key: &ServerKey, last: Last) {
        let Some(k) = self.server.get_key_value(key).map(|(k, _)| k.clone()) else { return };
        let Some(st) = self.server.get_mut(key) else { return };
        st.last = Some(last);
        let (old, new) = (st.bytes, st.footprint(&k));
        st.bytes = new;
        let owner = st.owner;
        self.budgets.state.recharge(owner, old, new);
    }

    /// The server transaction a timer id names.
    pub(crate) fn server_key_of(&self, id: u64) -> Option<Arc<ServerKey>> {
        self.server_ids.get(&id).cloned()
    }

    /// Adds a client transaction, charged to its owner.
    pub(crate) fn client_insert(&mut self, ck: String, mut c: ClientTxn) {
        c.bytes = c.footprint(ck.len());
        self.budgets.state.charge(c.owner, c.bytes);
        self.client_ids.insert(c.id, ck.clone());
        if let Some(old) = self.client.insert(ck, c) {
            self.client_ids.remove(&old.id);
            self.budgets.state.give_back(old.owner, old.bytes);
        }
    }

    /// Removes a client transaction and gives back what it held.
    pub(crate) fn client_remove(&mut self, ck: &str) -> Option<ClientTxn> {
        let c = self.client.remove(ck)?;
        self.client_ids.remove(&c.id);
        self.budgets.state.give_back(c.owner, c.bytes);
        Some(c)
    }

    /// Moves a client transaction's charge to what it holds now.
    pub(crate) fn client_recharge(&mut self, ck: &str) {
        let Some(c) = self.client.get_mut(ck) else { return };
        let (old, new) = (c.bytes, c.footprint(ck.len()));
        c.bytes = new;
        let owner = c.owner;
        self.budgets.state.recharge(owner, old, new);
    }

    /// A client transaction whose request is no longer retransmitted (and
    /// cannot fail over) keeps only what its CANCEL and ACK need.
    pub(crate) fn client_compact(&mut self, ck: &str) {
        let Some(c) = self.client.get_mut(ck) else { return };
        if c.compact {
            return;
        }
        if let Some(s) = crate::request::skeleton(&c.request) {
            c.request = s;
        }
        c.compact = true;
        c.alternates = Vec::new();
        self.client_recharge(ck);
    }

    /// The client transaction a timer id names.
    pub(crate) fn client_key_of(&self, id: u64) -> Option<String> {
        self.client_ids.get(&id).cloned()
    }

    /// Adds a dialog, charged to its owner.
    pub(crate) fn dialog_insert(&mut self, call_id: &str, mut d: Dialog) {
        d.bytes = d.footprint(call_id.len());
        self.budgets.state.charge(d.owner, d.bytes);
        let k: Arc<str> = Arc::from(call_id);
        self.dialog_ids.insert(d.id, k.clone());
        if let Some(old) = self.dialogs.insert(k, d) {
            self.dialog_ids.remove(&old.id);
            self.budgets.state.give_back(old.owner, old.bytes);
        }
    }

    /// Removes a dialog and gives back what it held.
    pub(crate) fn dialog_remove(&mut self, call_id: &str) -> Option<Dialog> {
        let d = self.dialogs.remove(call_id)?;
        self.dialog_ids.remove(&d.id);
        self.budgets.state.give_back(d.owner, d.bytes);
        Some(d)
    }

    /// The dialog (Call-ID) a timer id names.
    pub(crate) fn dialog_key_of(&self, id: u64) -> Option<Arc<str>> {
        self.dialog_ids.get(&id).cloned()
    }

    /// The budgets (what they hold, their caps).
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// The budgets' use.
    pub fn budget_use(&self) -> BudgetUse {
        BudgetUse {
            transactions: (&self.budgets.transactions).into(),
            state_bytes: (&self.budgets.state).into(),
            parked_bytes: (&self.budgets.parked).into(),
            dns_lookups: self.resolver.in_flight(),
        }
    }
}
