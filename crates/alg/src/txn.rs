//! RFC 3261 §17 transaction state (with RFC 6026's Accepted state for
//! INVITE 2xx), the timers, and what the core keeps per transaction.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Transport;
use crate::realm::Realm;
use crate::shares::ClientKey;

/// Where a message came from or goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The realm (which listener).
    pub realm: Realm,
    /// Transport.
    pub transport: Transport,
    /// Remote address.
    pub addr: std::net::SocketAddr,
    /// The stream connection it arrived on (TCP), if any.
    pub conn: Option<u64>,
}

/// Server transaction key (RFC 3261 §17.2.3): branch, sent-by, and the
/// method (ACK counts as INVITE).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerKey {
    /// Branch (or the RFC 2543 fallback identity).
    pub branch: String,
    /// sent-by of the top Via.
    pub sent_by: String,
    /// Method (INVITE for ACK).
    pub method: String,
}

/// Server transaction states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SState {
    /// Request received, no final response yet.
    Proceeding,
    /// Final non-2xx sent (INVITE: waiting for ACK) / final sent (non-INVITE).
    Completed,
    /// ACK received (INVITE).
    Confirmed,
    /// 2xx sent (INVITE, RFC 6026).
    Accepted,
}

/// Client transaction states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CState {
    /// INVITE sent / non-INVITE sent.
    Calling,
    /// Provisional received.
    Proceeding,
    /// Final non-2xx received (INVITE) / final received (non-INVITE).
    Completed,
    /// 2xx received (INVITE, RFC 6026).
    Accepted,
}

impl ServerKey {
    /// Bytes it holds.
    pub fn footprint(&self) -> u64 {
        (std::mem::size_of::<ServerKey>() + self.branch.len() + self.sent_by.len() + self.method.len()) as u64
    }
}

/// The last response a server transaction sent, kept to send again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Last {
    /// One the ALG wrote itself: written again from the transaction's
    /// response headers when needed (no second copy of its Via lines).
    Local {
        /// Status code.
        code: u16,
        /// Reason phrase.
        reason: String,
        /// Extra header lines (each ending in CRLF).
        extra: String,
    },
    /// One relayed from the next hop, as sent.
    Relayed(Vec<u8>),
}

impl Last {
    fn footprint(&self) -> usize {
        match self {
            Last::Local { reason, extra, .. } => reason.len() + extra.len(),
            Last::Relayed(d) => d.capacity(),
        }
    }
}

/// Fixed cost of one table entry beyond its own fields (hash table slot,
/// id index, allocation headers), in the byte budget.
pub const ENTRY_OVERHEAD: u64 = 128;

/// A server transaction.
#[derive(Debug)]
pub struct ServerTxn {
    /// Unique id (timers carry it).
    pub id: u64,
    /// INVITE transaction.
    pub invite: bool,
    /// State.
    pub state: SState,
    /// Where responses go.
    pub peer: Peer,
    /// The last response sent (retransmitted on request retransmissions
    /// and by Timer G).
    pub last: Option<Last>,
    /// The client transaction it forwarded to (its key).
    pub client: Option<String>,
    /// The headers a locally generated response copies (Via lines with
    /// `received`, From, To, Call-ID, CSeq).
    pub resp_headers: String,
    /// To tag for local responses.
    pub to_tag: String,
    /// Timer G interval.
    pub g: Duration,
    /// Call-ID (media and dialog cleanup).
    pub call_id: String,
    /// An initial (out-of-dialog) INVITE.
    pub initial_invite: bool,
    /// CANCEL received before the forwarded INVITE got an answer.
    pub cancelled: bool,
    /// Realm it arrived in.
    pub in_realm: Realm,
    /// Realm it went out to.
    pub out_realm: Realm,
    /// The request carried an SDP offer.
    pub offer: bool,
    /// The method.
    pub method: String,
    /// The client whose budgets it counts against.
    pub owner: ClientKey,
    /// Bytes charged to the owner for it.
    pub bytes: u64,
}

impl ServerTxn {
    /// Bytes it holds with its key.
    pub fn footprint(&self, key: &ServerKey) -> u64 {
        let own = std::mem::size_of::<ServerTxn>()
            + self.last.as_ref().map_or(0, Last::footprint)
            + 64 // the client transaction's key, set after it is charged
            + self.resp_headers.len()
            + self.to_tag.len()
            + self.call_id.len()
            + self.method.len();
        own as u64 + key.footprint() + ENTRY_OVERHEAD
    }
}

/// A client transaction.
#[derive(Debug)]
pub struct ClientTxn {
    /// Unique id (timers carry it).
    pub id: u64,
    /// INVITE transaction.
    pub invite: bool,
    /// State.
    pub state: CState,
    /// The request as sent (retransmissions, ACK and CANCEL are built from
    /// it).
    pub request: Vec<u8>,
    /// Destination.
    pub peer: Peer,
    /// The server transaction it serves (None: our own CANCEL).
    pub server: Option<Arc<ServerKey>>,
    /// Our branch.
    pub branch: String,
    /// Timer A/E interval.
    pub interval: Duration,
    /// A CANCEL waits for the first provisional (RFC 3261 §9.1).
    pub cancel_pending: bool,
    /// When Timer C is due (a provisional moves it without setting
    /// another timer: the one set fires and sets itself again).
    pub c_at: std::time::Instant,
    /// We sent a CANCEL for it: with no final response 64 × T1 later it
    /// ends (RFC 3261 §9.1) instead of waiting forever.
    pub cancel_sent: bool,
    /// FNV hash of the first 2xx relayed (INVITE): a byte-identical
    /// retransmission is answered with the response already built, not
    /// a second media answer.
    pub first_2xx: Option<u64>,
    /// The ACK sent for a non-2xx final (retransmitted on response
    /// retransmissions).
    pub ack: Option<Vec<u8>>,
    /// Method.
    pub method: String,
    /// Further destinations of the same realm to try when this one never
    /// answers (RFC 3263 §4.3).
    pub alternates: Vec<crate::realm::Target>,
    /// The client whose budgets it counts against.
    pub owner: ClientKey,
    /// Bytes charged to the owner for it.
    pub bytes: u64,
    /// `request` holds only what CANCEL and ACK are built from.
    pub compact: bool,
}

impl ClientTxn {
    /// Bytes it holds with its key (`key_len`).
    pub fn footprint(&self, key_len: usize) -> u64 {
        let own = std::mem::size_of::<ClientTxn>()
            + self.request.capacity()
            + self.ack.as_ref().map_or(0, Vec::capacity)
            + self.branch.len()
            + self.method.len()
            + 2 * key_len
            + self.alternates.capacity() * std::mem::size_of::<crate::realm::Target>();
        own as u64 + ENTRY_OVERHEAD
    }
}

/// Timer kinds (RFC 3261 §17 Table 4, plus C and RFC 6026's L/M, and the
/// dialog lifetime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    /// INVITE request retransmit.
    A,
    /// INVITE transaction timeout.
    B,
    /// Proxy INVITE transaction timeout (RFC 3261 §16.6 step 11).
    C,
    /// Wait for response retransmits (INVITE client).
    D,
    /// Non-INVITE request retransmit.
    E,
    /// Non-INVITE transaction timeout.
    F,
    /// INVITE response retransmit.
    G,
    /// Wait for ACK.
    H,
    /// Wait for ACK retransmits.
    I,
    /// Wait for non-INVITE request retransmits.
    J,
    /// Wait for response retransmits (non-INVITE client).
    K,
    /// Accepted server INVITE (RFC 6026).
    L,
    /// Accepted client INVITE (RFC 6026).
    M,
    /// Dialog lifetime check.
    Dialog,
    /// A DNS lookup's requests wait no longer.
    Lookup,
}

/// What a timer refers to: the table whose entry has the timer's id (a
/// timer holds no key of its own, so one that outlives its entry holds
/// a few bytes, not the entry's Call-ID or branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerRef {
    /// A server transaction.
    Server,
    /// A client transaction.
    Client,
    /// A dialog.
    Dialog,
    /// Requests parked for a DNS lookup.
    Lookup,
}

/// A scheduled timer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timer {
    /// When.
    pub at: Instant,
    /// Sequence (ties).
    pub seq: u64,
    /// Kind.
    pub kind: TimerKind,
    /// Whose.
    pub whose: TimerRef,
    /// The id of the entry it was set for (stale timers find none).
    pub id: u64,
}

/// The pending timers, earliest first (ties in the order they were set).
///
/// A binary heap of small entries (when, sequence, slot) over a slab that
/// holds the timers themselves: at thousands of calls per second the
/// transactions' timers number in the hundreds of thousands (Timer J and
/// D keep them 32 s), and a heap of whole timers, each with its key
/// strings, moved about 120 bytes per level of every push and pop.
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, u64, u32)>>,
    slab: Vec<Option<Timer>>,
    free: Vec<u32>,
}

impl TimerQueue {
    /// Sets a timer.
    pub fn push(&mut self, t: Timer) {
        let key = (t.at, t.seq);
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(t);
                s
            }
            None => {
                self.slab.push(Some(t));
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(std::cmp::Reverse((key.0, key.1, slot)));
    }

    /// When the earliest timer is due.
    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.0 .0)
    }

    /// The earliest timer when it is due at `now`, taken off the queue.
    pub fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let &std::cmp::Reverse((at, _, slot)) = self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        self.free.push(slot);
        self.slab[slot as usize].take()
    }

    /// Timers set and not yet taken.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// No timer set.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// The RFC 3261 timer base values.
#[derive(Debug, Clone, Copy)]
pub struct Timers {
    /// T1 (RTT estimate).
    pub t1: Duration,
    /// T2 (maximum retransmit interval for non-INVITE / responses).
    pub t2: Duration,
    /// T4 (maximum time a message stays in the network).
    pub t4: Duration,
}

impl Timers {
    /// From T1 (T2 = 4 s, T4 = 5 s, as RFC 3261 recommends).
    pub fn new(t1: Duration) -> Timers {
        Timers { t1, t2: Duration::from_secs(4), t4: Duration::from_secs(5) }
    }
    /// 64 × T1 (Timers B, F, H, J, L, M).
    pub fn t64(&self) -> Duration {
        self.t1 * 64
    }
    /// Timer C (more than 3 minutes).
    pub fn c(&self) -> Duration {
        Duration::from_secs(181)
    }
    /// Timer D (at least 32 s over UDP).
    pub fn d(&self) -> Duration {
        Duration::from_secs(32).max(self.t64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(at: Instant, seq: u64, cid: &str) -> Timer {
        Timer { at, seq, kind: TimerKind::C, whose: TimerRef::Dialog, id: cid.len() as u64 }
    }

    #[test]
    fn timers_come_due_earliest_first_ties_in_setting_order() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut q = TimerQueue::default();
        assert_eq!((q.next_at(), q.pop_due(ms(1000))), (None, None));
        q.push(timer(ms(30), 1, "c"));
        q.push(timer(ms(10), 2, "a"));
        q.push(timer(ms(30), 3, "d"));
        q.push(timer(ms(20), 4, "b"));
        assert_eq!((q.len(), q.next_at()), (4, Some(ms(10))));
        assert!(q.pop_due(ms(9)).is_none(), "nothing due yet");
        let due: Vec<u64> = std::iter::from_fn(|| q.pop_due(ms(20))).map(|t| t.seq).collect();
        assert_eq!(due, [2, 4]);
        // A slot freed by a due timer is reused; the order still holds.
        q.push(timer(ms(25), 5, "e"));
        let t = q.pop_due(ms(100)).unwrap();
        assert_eq!((t.seq, t.whose), (5, TimerRef::Dialog));
        let rest: Vec<u64> = std::iter::from_fn(|| q.pop_due(ms(100))).map(|t| t.seq).collect();
        assert_eq!(rest, [1, 3], "equal times in the order they were set");
        assert!(q.is_empty());
    }
}
