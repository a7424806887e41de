//! SIP over TCP for the runner (issue #29 D5): the connection budgets and
//! one task per connection.
//!
//! - Connections accepted (both realms) are at most `max-connections`, and
//!   one client (an IPv6 prefix or an IPv4 address) at most its
//!   `client-share` of them; the ones the ALG opens to next hops have
//!   their own `max-outbound-connections`, so clients holding every
//!   accepted slot cannot stop calls from going out.
//! - A connection with no message, keep-alive or write for
//!   `tcp-idle-timeout` is closed; a message whose bytes are not all in
//!   `tcp-message-timeout` after its first is closed too (a slow head or
//!   body holds nothing for long).
//! - Framing costs each byte once ([`crate::stream`]), and a connection
//!   holds a small buffer while idle.
//!
//! Every refusal and close is counted ([`crate::stats::TCP_REFUSALS`],
//! [`crate::stats::TCP_CLOSES`]) and logged at most a few lines per 10 s.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::Config;
use crate::realm::Realm;
use crate::shares::{ClientKey, Shares};
use crate::stats::{TCP_CLOSES, TCP_REFUSALS};
use crate::stream::StreamFramer;
use dstpolicy::RateLog;

/// What a connection holds: an accepted connection's client slot, or an
/// outbound slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Accepted from this client.
    Inbound(ClientKey),
    /// Opened by the ALG.
    Outbound,
}

#[derive(Debug)]
struct State {
    inbound: Shares,
    outbound: usize,
    outbound_limit: usize,
    prefix: u8,
    idle: Duration,
    message: Duration,
    refused: [u64; TCP_REFUSALS.len()],
    closed: [u64; TCP_CLOSES.len()],
    /// Log lines by reason (a TCP_REFUSALS or TCP_CLOSES label).
    log: RateLog<&'static str>,
}

/// The TCP budgets, shared by the accept loops, the connection tasks, the
/// runner's outbound connections and the handle (a reload changes them).
#[derive(Debug)]
pub struct Conns(Mutex<State>);

/// What [`Conns::snapshot`] reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ConnCounts {
    /// Accepted connections open.
    pub inbound: usize,
    /// Their budget (clients holding some, one client's share).
    pub inbound_use: crate::state::Usage,
    /// Their cap.
    pub inbound_limit: usize,
    /// Connections the ALG opened, open.
    pub outbound: usize,
    /// Their cap.
    pub outbound_limit: usize,
    /// Refused, by [`TCP_REFUSALS`].
    pub refused: [u64; TCP_REFUSALS.len()],
    /// Closed by the ALG, by [`TCP_CLOSES`].
    pub closed: [u64; TCP_CLOSES.len()],
}

impl Conns {
    /// The budgets of `cfg`.
    pub fn new(cfg: &Config) -> Conns {
        Conns(Mutex::new(State {
            inbound: Shares::new(cfg.max_connections as u64, cfg.client_share),
            outbound: 0,
            outbound_limit: cfg.max_outbound_connections,
            prefix: cfg.client_prefix_length,
            idle: cfg.tcp_idle_timeout,
            message: cfg.tcp_message_timeout,
            refused: Default::default(),
            closed: Default::default(),
            log: RateLog::default(),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        function::lock(&self.0)
    }

    /// New limits and timeouts (connections open stay).
    pub fn reconfigure(&self, cfg: &Config) {
        let mut s = self.state();
        s.inbound.set_limits(cfg.max_connections as u64, cfg.client_share);
        s.outbound_limit = cfg.max_outbound_connections;
        s.prefix = cfg.client_prefix_length;
        s.idle = cfg.tcp_idle_timeout;
        s.message = cfg.tcp_message_timeout;
    }

    /// A slot for a connection accepted from `from`, or None (counted).
    pub(crate) fn take_inbound(&self, from: SocketAddr) -> Option<Slot> {
        let mut s = self.state();
        let c = ClientKey::of(from.ip(), s.prefix);
        match s.inbound.take(c, 1) {
            Ok(()) => Some(Slot::Inbound(c)),
            Err(f) => {
                let i = if f == crate::shares::Full::Global { 0 } else { 1 };
                s.refused[i] += 1;
                if let Some(suppressed) = s.log.admit(TCP_REFUSALS[i], std::time::Instant::now()) {
                    tracing::warn!(suppressed, client = %c, reason = TCP_REFUSALS[i], "SIP TCP connection refused");
                }
                None
            }
        }
    }

    /// A slot for a connection the ALG opens, or None (counted).
    pub(crate) fn take_outbound(&self, to: SocketAddr) -> Option<Slot> {
        let mut s = self.state();
        if s.outbound >= s.outbound_limit {
            s.refused[2] += 1;
            if let Some(suppressed) = s.log.admit(TCP_REFUSALS[2], std::time::Instant::now()) {
                tracing::warn!(suppressed, %to, reason = TCP_REFUSALS[2], "SIP TCP connection not opened");
            }
            return None;
        }
        s.outbound += 1;
        Some(Slot::Outbound)
    }

    /// Gives a slot back.
    pub(crate) fn give_back(&self, slot: Slot) {
        let mut s = self.state();
        match slot {
            Slot::Inbound(c) => s.inbound.give_back(c, 1),
            Slot::Outbound => s.outbound = s.outbound.saturating_sub(1),
        }
    }

    fn closed(&self, why: usize, peer: SocketAddr) {
        let mut s = self.state();
        s.closed[why] += 1;
        if let Some(suppressed) = s.log.admit(TCP_CLOSES[why], std::time::Instant::now()) {
            tracing::info!(suppressed, %peer, reason = TCP_CLOSES[why], "SIP TCP connection closed");
        }
    }

    fn timeouts(&self) -> (Duration, Duration) {
        let s = self.state();
        (s.idle, s.message)
    }

    /// Connections open, caps, refusals and closes.
    pub fn snapshot(&self) -> ConnCounts {
        let s = self.state();
        ConnCounts {
            inbound: s.inbound.used() as usize,
            inbound_use: (&s.inbound).into(),
            inbound_limit: s.inbound.limit() as usize,
            outbound: s.outbound,
            outbound_limit: s.outbound_limit,
            refused: s.refused,
            closed: s.closed,
        }
    }
}

/// What a connection task tells the runner.
pub(crate) enum Event {
    /// A framed message.
    Msg { realm: Realm, conn: u64, addr: SocketAddr, data: Vec<u8> },
    /// The connection is up; what to send on it goes to `tx`.
    Connected { conn: u64, addr: SocketAddr, tx: mpsc::Sender<Vec<u8>> },
    /// It ended.
    Closed { conn: u64 },
    /// An outbound connection could not be made.
    ConnectFailed { addr: SocketAddr },
}

static CONN_IDS: AtomicU64 = AtomicU64::new(1);

/// Runs one TCP connection holding `slot` (given back when it ends):
/// messages framed (at most `max` bytes) go to `events`.
pub(crate) fn spawn_conn(
    stream: TcpStream,
    (addr, realm): (SocketAddr, Realm),
    events: mpsc::Sender<Event>,
    max: usize,
    conns: Arc<Conns>,
    slot: Slot,
) {
    let conn = CONN_IDS.fetch_add(1, Relaxed);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(256);
    tokio::spawn(async move {
        let (mut rd, mut wr) = stream.into_split();
        if events.send(Event::Connected { conn, addr, tx }).await.is_err() {
            conns.give_back(slot);
            return;
        }
        // Writes count as activity: a connection the ALG sends on is not idle.
        let base = Instant::now();
        let wrote = Arc::new(AtomicU64::new(0));
        let w = wrote.clone();
        let writer = tokio::spawn(async move {
            while let Some(d) = rx.recv().await {
                if wr.write_all(&d).await.is_err() {
                    break;
                }
                w.store(base.elapsed().as_millis() as u64, Relaxed);
            }
        });
        let mut framer = StreamFramer::default();
        let mut last = Instant::now();
        let mut started: Option<Instant> = None;
        let close = 'conn: loop {
            let (idle, message) = conns.timeouts();
            let last_any = last.max(base + Duration::from_millis(wrote.load(Relaxed)));
            let deadline = match started {
                Some(s) => s + message,
                None => last_any + idle,
            };
            tokio::select! {
                r = rd.read_buf(framer.read_target(4096)) => match r {
                    Ok(0) | Err(_) => break None,
                    Ok(_) => {}
                },
                _ = tokio::time::sleep_until(deadline) => {
                    if started.is_some() {
                        break Some(1);
                    }
                    let wrote_at = base + Duration::from_millis(wrote.load(Relaxed));
                    if wrote_at + idle > Instant::now() {
                        continue;
                    }
                    break Some(0);
                }
            }
            let now = Instant::now();
            last = now;
            let mut completed = false;
            loop {
                match framer.next_message(max) {
                    Ok(Some(data)) => {
                        completed = true;
                        if events.send(Event::Msg { realm, conn, addr, data }).await.is_err() {
                            break 'conn None;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(%addr, reason = %e, "unframeable SIP TCP input; closing");
                        break 'conn Some(2);
                    }
                }
            }
            // The message still held began in this read when one ended in
            // it (a busy stream rarely ends a read between messages).
            started = match (framer.in_message(), completed) {
                (false, _) => None,
                (true, true) => Some(now),
                (true, false) => started.or(Some(now)),
            };
        };
        writer.abort();
        conns.give_back(slot);
        if let Some(why) = close {
            conns.closed(why, addr);
        }
        let _ = events.send(Event::Closed { conn }).await;
    });
}
