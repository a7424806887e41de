//! Media anchoring through the TrGW, in rtpengine's ng vocabulary: the ALG
//! issues typed `offer` / `answer` / `delete` [`Command`]s, and a
//! [`MediaControl`] runs them — in-process on the TrGW's own core
//! ([`InProcess`], [`LocalCore`]: the typed entries of [`trgw::ng`] that
//! the ng listener's dictionaries also end in, no dictionary, no
//! datagram), or over UDP to one of several remote TrGWs / rtpengines
//! chosen by weight and Call-ID ([`NgClients`]), as the same dictionaries
//! Kamailio's `rtpengine` module sends ([`SdpCommand::to_value`]).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use trgw::bencode::Value;

/// Why a media command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaError(pub String);

impl std::fmt::Display for MediaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl MediaError {
    /// The SIP status a request gets when its media cannot be anchored:
    /// 400 for SDP the relay cannot parse, 488 for a media address its
    /// policy refuses, 503 when it ran out of ports, refuses the client
    /// more streams (its share) or cannot be reached, 500 otherwise.
    pub fn status(&self) -> (u16, String) {
        if self.0.starts_with("Failed to parse SDP") || self.0.starts_with("No SDP") {
            (400, format!("Bad SDP: {}", self.0.trim_start_matches("Failed to parse SDP: ")))
        } else if self.0.starts_with("Media address") {
            // The TrGW's media address policy (loopback, its own addresses,
            // media-deny, outside media-allow).
            (488, "Not Acceptable Here (media address refused)".into())
        } else if self.0.starts_with("Ran out of ports")
            || self.0.starts_with("media relay")
            || self.0.starts_with("Media relay busy")
        {
            (503, "Media relay unavailable".into())
        } else {
            (500, format!("Media relay error: {}", self.0))
        }
    }
}

/// What a [`Command`] got: the rewritten SDP of an offer or answer
/// (nothing for a delete), or why it failed (an error reply's reason, or
/// no reply).
pub type Reply = Result<Vec<u8>, MediaError>;

/// How a command started: answered at once (in-process backends), or
/// waiting for a remote server's reply (reported later by
/// [`MediaControl::poll_done`] with this ticket).
#[derive(Debug)]
pub enum Started {
    /// The reply (or why there is none).
    Done(Reply),
    /// A ticket for [`MediaControl::poll_done`].
    Pending(u64),
}

/// A media command of the ALG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An offer or answer.
    Sdp(Box<SdpRequest>),
    /// Deletes the media session of an ng Call-ID.
    Delete(String),
}

impl Command {
    /// Runs it on `m` to its end.
    pub fn run<M: MediaControl + ?Sized>(&self, m: &mut M) -> Reply {
        match self {
            Command::Sdp(r) => m.sdp(&r.as_command()),
            Command::Delete(id) => m.delete(id).map(|()| Vec::new()),
        }
    }

    /// The ng dictionary.
    pub fn to_value(&self) -> Value {
        match self {
            Command::Sdp(r) => r.as_command().to_value(),
            Command::Delete(id) => delete_command(id),
        }
    }

    /// The reply of an ng reply dictionary.
    pub fn reply_of(&self, reply: Result<Value, MediaError>) -> Reply {
        match self {
            Command::Sdp(_) => sdp_of(reply),
            Command::Delete(_) => ok_reply_of(reply).map(|()| Vec::new()),
        }
    }

    /// Its ng Call-ID.
    pub fn call_id(&self) -> &str {
        match self {
            Command::Sdp(r) => &r.call_id,
            Command::Delete(id) => id,
        }
    }
}

/// Something that runs ng command dictionaries. In-process backends
/// answer [`MediaControl::start`] at once (the default methods); remote
/// ones are I/O-free state machines like the core: they queue datagrams
/// ([`MediaControl::poll_transmit`]), take replies
/// ([`MediaControl::handle_datagram`]) and timers, and report finished
/// commands ([`MediaControl::poll_done`]), so one slow server never
/// stalls the ALG.
pub trait MediaControl: Send {
    /// Runs one ng command dictionary to its end; the reply dictionary
    /// (`result: error` is a reply too; `Err` means no reply).
    fn command(&mut self, req: &Value) -> Result<Value, MediaError>;
    /// Runs an offer or answer to its end; the rewritten SDP. The default
    /// goes through its ng dictionary ([`MediaControl::command`]);
    /// in-process controls call the TrGW with typed arguments.
    fn sdp(&mut self, cmd: &SdpCommand) -> Result<Vec<u8>, MediaError> {
        sdp_of(self.command(&cmd.to_value()))
    }
    /// Deletes the media session of ng Call-ID `call_id` (Ok also when it
    /// was already gone); the default goes through the ng dictionary.
    fn delete(&mut self, call_id: &str) -> Result<(), MediaError> {
        ok_reply_of(self.command(&delete_command(call_id)))
    }
    /// Starts a command.
    fn start(&mut self, _now: Instant, cmd: &Command) -> Started {
        Started::Done(cmd.run(self))
    }
    /// A finished command: its ticket and reply.
    fn poll_done(&mut self) -> Option<(u64, Reply)> {
        None
    }
    /// A datagram to send: (server, bytes).
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        None
    }
    /// A datagram from a server.
    fn handle_datagram(&mut self, _now: Instant, _from: SocketAddr, _data: &[u8]) {}
    /// When [`MediaControl::handle_timeout`] must next run.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Retransmissions, failover, giving up.
    fn handle_timeout(&mut self, _now: Instant) {}
    /// Replies that matched no command (late, after its timeout).
    fn late_replies(&self) -> u64 {
        0
    }
}

/// The relay of `v6gate run` / [`trgw::Relay::start`], in-process.
pub struct InProcess(pub std::sync::Arc<trgw::RelayHandle>);

impl MediaControl for InProcess {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        Ok(self.0.ng_command(req))
    }
    fn sdp(&mut self, cmd: &SdpCommand) -> Result<Vec<u8>, MediaError> {
        self.0.offer_answer(&cmd.signal()).map_err(MediaError)
    }
    fn delete(&mut self, call_id: &str) -> Result<(), MediaError> {
        self.0.delete_call(call_id, None).map_err(MediaError)
    }
}

/// A TrGW core without sockets (tests, fuzzing, benchmarks of the
/// signalling path): ports are allocated and SDP rewritten exactly as in
/// the relay, no packet is relayed.
pub struct LocalCore(pub trgw::core::Core);

impl LocalCore {
    /// A socketless core over `cfg`.
    pub fn new(cfg: trgw::Config) -> Self {
        LocalCore(trgw::core::Core::new(cfg, Box::new(trgw::core::NullPlane), Instant::now()))
    }
}

impl MediaControl for LocalCore {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        Ok(trgw::ng::command(&mut self.0, req))
    }
    fn sdp(&mut self, cmd: &SdpCommand) -> Result<Vec<u8>, MediaError> {
        trgw::ng::offer_answer(&mut self.0, &cmd.signal()).map_err(MediaError)
    }
    fn delete(&mut self, call_id: &str) -> Result<(), MediaError> {
        trgw::ng::delete_call(&mut self.0, call_id, None).map(|_| ()).map_err(MediaError)
    }
}

/// One remote ng server.
#[derive(Debug, Clone)]
pub struct NgServer {
    /// Its ng address.
    pub addr: SocketAddr,
    /// Relative weight (0: never chosen for new calls).
    pub weight: u32,
    down_until: Option<Instant>,
}

/// A command waiting for its reply.
#[derive(Debug)]
struct InFlight {
    /// Servers still to try, in order (the current one first).
    order: Vec<usize>,
    /// Tries left on the current server.
    tries: u32,
    /// The cookie of the current attempt.
    cookie: Vec<u8>,
    /// `cookie SP bencode`, as sent.
    msg: Vec<u8>,
    /// When the current try times out.
    deadline: Instant,
    /// A delete (its reply carries no SDP).
    delete: bool,
}

/// Remote TrGWs / rtpengines over the ng protocol, without I/O of its
/// own: the runner sends what [`MediaControl::poll_transmit`] gives and
/// hands back what arrives. A call's commands all go to the same server:
/// the one with the highest weighted rendezvous score for its Call-ID
/// among those not marked down (a server that does not answer is skipped
/// for [`NgClients::DOWN_FOR`], as Kamailio's rtpengine module disables a
/// dead instance). Each try waits `timeout`, each server gets `retries`
/// more tries with the same cookie (the server's reply cache answers a
/// repeat), then the next server is tried; a command no server answers
/// fails with "media relay did not answer".
pub struct NgClients {
    servers: Vec<NgServer>,
    timeout: Duration,
    retries: u32,
    cookie: u64,
    next_ticket: u64,
    inflight: std::collections::HashMap<u64, InFlight>,
    by_cookie: std::collections::HashMap<Vec<u8>, u64>,
    out: std::collections::VecDeque<(SocketAddr, Vec<u8>)>,
    /// Finished commands: ticket, reply, whether it was a delete.
    done: std::collections::VecDeque<(u64, Result<Value, MediaError>, bool)>,
    late: u64,
    /// Commands that got no answer from any server.
    pub failures: u64,
}

fn h64(data: &[u8], seed: u64) -> u64 {
    // FNV-1a then a 64-bit finaliser: stable across runs and builds.
    let mut h = crate::proxy::fnv1a(crate::proxy::FNV_OFFSET ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), data);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl NgClients {
    /// How long a server that did not answer is skipped.
    pub const DOWN_FOR: Duration = Duration::from_secs(30);

    /// Clients for `servers` (address, weight); `timeout` per try, `retries`
    /// more tries per server.
    pub fn new(servers: &[(SocketAddr, u32)], timeout: Duration, retries: u32) -> std::io::Result<Self> {
        Ok(NgClients {
            servers: servers.iter().map(|&(addr, weight)| NgServer { addr, weight, down_until: None }).collect(),
            timeout,
            retries,
            cookie: u64::from(std::process::id()) << 32,
            next_ticket: 1,
            inflight: Default::default(),
            by_cookie: Default::default(),
            out: Default::default(),
            done: Default::default(),
            late: 0,
            failures: 0,
        })
    }

    /// Servers in the order they are tried for `call_id`.
    pub fn order(&self, call_id: &[u8], now: Instant) -> Vec<usize> {
        let mut v: Vec<(f64, usize)> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.weight > 0)
            .map(|(i, s)| {
                let u = (h64(call_id, i as u64) >> 11) as f64 / (1u64 << 53) as f64;
                let u = u.max(f64::MIN_POSITIVE);
                let mut score = -f64::from(s.weight) / u.ln();
                if s.down_until.is_some_and(|t| t > now) {
                    score -= 1e18;
                }
                (score, i)
            })
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0));
        v.into_iter().map(|x| x.1).collect()
    }

    /// Commands waiting for a reply.
    pub fn pending(&self) -> usize {
        self.inflight.len()
    }

    /// Sends the command `req` to the first server of `f.order` with a new
    /// cookie.
    fn send_to_current(&mut self, ticket: u64, now: Instant, req_bytes: &[u8]) {
        let Some(f) = self.inflight.get_mut(&ticket) else { return };
        let Some(&idx) = f.order.first() else { return };
        self.cookie += 1;
        let cookie = format!("alg{:x}", self.cookie).into_bytes();
        let mut msg = cookie.clone();
        msg.push(b' ');
        msg.extend_from_slice(req_bytes);
        self.by_cookie.remove(&f.cookie);
        self.by_cookie.insert(cookie.clone(), ticket);
        f.cookie = cookie;
        f.msg = msg.clone();
        f.tries = self.retries;
        f.deadline = now + self.timeout;
        self.out.push_back((self.servers[idx].addr, msg));
    }

    /// Runs one command to its end over a socket of its own (blocking):
    /// for callers outside a runner.
    fn blocking(&mut self, req: &Value) -> Result<Value, MediaError> {
        let err = |e: std::io::Error| MediaError(format!("media relay: {e}"));
        let s4 = std::net::UdpSocket::bind("0.0.0.0:0").ok();
        let s6 = std::net::UdpSocket::bind("[::]:0").ok();
        let Started::Pending(ticket) = self.start_value(Instant::now(), req, false) else {
            return Err(MediaError("media relay: no server".into()));
        };
        let mut buf = vec![0u8; 65_536];
        loop {
            while let Some((to, d)) = self.poll_transmit() {
                let s = if to.is_ipv4() { s4.as_ref() } else { s6.as_ref() };
                if let Some(s) = s {
                    let _ = s.send_to(&d, to);
                }
            }
            if let Some(i) = self.done.iter().position(|(t, _, _)| *t == ticket) {
                return self.done.remove(i).map(|x| x.1).unwrap_or(Err(MediaError("lost".into())));
            }
            let wait = self.poll_timeout().map_or(self.timeout, |t| t.saturating_duration_since(Instant::now()));
            let wait = wait.max(Duration::from_millis(1)).min(Duration::from_millis(20));
            let mut got = false;
            for s in [s4.as_ref(), s6.as_ref()].into_iter().flatten() {
                s.set_read_timeout(Some(wait / 2)).map_err(err)?;
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    self.handle_datagram(Instant::now(), from, &buf[..n]);
                    got = true;
                }
            }
            if !got {
                self.handle_timeout(Instant::now());
            }
        }
    }
}

impl NgClients {
    /// Sends the dictionary `req` (a `delete` when `delete`).
    fn start_value(&mut self, now: Instant, req: &Value, delete: bool) -> Started {
        let cid = req.get("call-id").and_then(Value::as_bytes).unwrap_or(b"");
        let order = self.order(cid, now);
        if order.is_empty() {
            self.failures += 1;
            return Started::Done(Err(MediaError("media relay: no server with a weight".into())));
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.inflight
            .insert(ticket, InFlight { order, tries: 0, cookie: Vec::new(), msg: Vec::new(), deadline: now, delete });
        let mut body = Vec::with_capacity(512);
        req.encode_into(&mut body);
        self.send_to_current(ticket, now, &body);
        Started::Pending(ticket)
    }
}

impl MediaControl for NgClients {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        self.blocking(req)
    }

    fn start(&mut self, now: Instant, cmd: &Command) -> Started {
        self.start_value(now, &cmd.to_value(), matches!(cmd, Command::Delete(_)))
    }

    fn poll_done(&mut self) -> Option<(u64, Reply)> {
        let (ticket, r, delete) = self.done.pop_front()?;
        let r = if delete { ok_reply_of(r).map(|()| Vec::new()) } else { sdp_of(r) };
        Some((ticket, r))
    }

    fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.out.pop_front()
    }

    fn handle_datagram(&mut self, _now: Instant, from: SocketAddr, data: &[u8]) {
        let Some(sp) = data.iter().position(|&c| c == b' ') else {
            self.late += 1;
            return;
        };
        let Some(ticket) = self.by_cookie.get(&data[..sp]).copied() else {
            self.late += 1; // a late reply to a command that moved on
            return;
        };
        let Some(f) = self.inflight.get(&ticket) else { return };
        let idx = f.order[0];
        if self.servers[idx].addr != from {
            self.late += 1;
            return;
        }
        let f = self.inflight.remove(&ticket).expect("present");
        self.by_cookie.remove(&f.cookie);
        self.servers[idx].down_until = None;
        let r = trgw::bencode::decode(&data[sp + 1..]).map_err(|e| MediaError(format!("media relay: bad reply: {e}")));
        self.done.push_back((ticket, r, f.delete));
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inflight.values().map(|f| f.deadline).min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u64> = self.inflight.iter().filter(|(_, f)| f.deadline <= now).map(|(t, _)| *t).collect();
        for ticket in due {
            let Some(f) = self.inflight.get_mut(&ticket) else { continue };
            if f.tries > 0 {
                // Same cookie: the server answers a repeat from its cache.
                f.tries -= 1;
                f.deadline = now + self.timeout;
                let to = self.servers[f.order[0]].addr;
                self.out.push_back((to, f.msg.clone()));
                continue;
            }
            let dead = f.order.remove(0);
            tracing::warn!(server = %self.servers[dead].addr, "ng server did not answer; skipping it for 30 s");
            self.servers[dead].down_until = Some(now + Self::DOWN_FOR);
            if f.order.is_empty() {
                let f = self.inflight.remove(&ticket).expect("present");
                self.by_cookie.remove(&f.cookie);
                self.failures += 1;
                self.done.push_back((ticket, Err(MediaError("media relay did not answer".into())), f.delete));
            } else {
                let body = f.msg[f.cookie.len() + 1..].to_vec();
                self.send_to_current(ticket, now, &body);
            }
        }
    }

    fn late_replies(&self) -> u64 {
        self.late
    }
}

/// One side of a media session: the TrGW interface name (None: the first
/// with the family) and the family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// TrGW interface name.
    pub iface: Option<String>,
    /// IPv6 realm.
    pub v6: bool,
}

fn s(v: &str) -> Value {
    Value::str(v)
}

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(pairs.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect())
}

/// An offer or answer: who sends SDP to whom.
#[derive(Debug, Clone, Copy)]
pub struct SdpCommand<'a> {
    /// `offer` (else `answer`).
    pub offer: bool,
    /// The ng Call-ID.
    pub call_id: &'a str,
    /// The offerer's tag.
    pub from_tag: &'a str,
    /// The answerer's tag (answers).
    pub to_tag: Option<&'a str>,
    /// The SDP as the sender wrote it.
    pub sdp: &'a [u8],
    /// The sender's side.
    pub from: &'a Side,
    /// The receiver's side.
    pub to: &'a Side,
    /// The SIP source of the request that carried it (ng `received
    /// from`): the client whose share of the relay's streams a new call
    /// counts in.
    pub client: Option<IpAddr>,
}

/// [`SdpCommand`] with what it borrows owned: a command that waits in a
/// queue or for a remote server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdpRequest {
    /// `offer` (else `answer`).
    pub offer: bool,
    /// The ng Call-ID.
    pub call_id: String,
    /// The offerer's tag.
    pub from_tag: String,
    /// The answerer's tag (answers).
    pub to_tag: Option<String>,
    /// The SDP as the sender wrote it.
    pub sdp: Vec<u8>,
    /// The sender's side.
    pub from: Side,
    /// The receiver's side.
    pub to: Side,
    /// The SIP source of the request that carried it.
    pub client: Option<IpAddr>,
}

impl SdpRequest {
    /// The command it holds.
    pub fn as_command(&self) -> SdpCommand<'_> {
        SdpCommand {
            offer: self.offer,
            call_id: &self.call_id,
            from_tag: &self.from_tag,
            to_tag: self.to_tag.as_deref(),
            sdp: &self.sdp,
            from: &self.from,
            to: &self.to,
            client: self.client,
        }
    }
}

impl SdpCommand<'_> {
    /// The owned form.
    pub fn to_request(&self) -> SdpRequest {
        SdpRequest {
            offer: self.offer,
            call_id: self.call_id.to_string(),
            from_tag: self.from_tag.to_string(),
            to_tag: self.to_tag.map(str::to_string),
            sdp: self.sdp.to_vec(),
            from: self.from.clone(),
            to: self.to.clone(),
            client: self.client,
        }
    }

    /// The interfaces of the `direction` pair: the sender's (None: left
    /// to the relay) and the receiver's; None without both interfaces
    /// configured (no `direction` at all).
    fn direction(&self) -> Option<(&str, &str)> {
        let (Some(a), Some(b)) = (&self.from.iface, &self.to.iface) else { return None };
        // A stream of the other family than the sender's realm (RFC
        // 5118 §4.8: IPv4 and IPv6 streams in one SDP) can only be
        // received on an interface of its family: the sender's side
        // is then left to the relay, which picks one per stream.
        let a = if has_family(self.sdp, !self.from.v6) { "" } else { a };
        Some((a, b))
    }

    /// The typed form of [`SdpCommand::to_value`], for an in-process
    /// TrGW: the same request, without a dictionary.
    pub fn signal(&self) -> trgw::ng::Signal<'_> {
        let dir = self.direction();
        trgw::ng::Signal {
            offer: self.offer,
            call_id: self.call_id,
            from_tag: self.from_tag,
            to_tag: self.to_tag,
            sdp: self.sdp,
            from_iface: dir.and_then(|d| iface(d.0)),
            to_iface: dir.and_then(|d| iface(d.1)),
            to_v6: Some(self.to.v6),
            // `trust-address`: the SDP's own addresses.
            media_addr: None,
            replace_origin: true,
            remove_ice: true,
            client: self.client,
        }
    }

    /// The ng dictionary (as Kamailio's rtpengine module writes it).
    pub fn to_value(&self) -> Value {
        let mut p = vec![
            ("command", s(if self.offer { "offer" } else { "answer" })),
            ("call-id", s(self.call_id)),
            ("from-tag", s(self.from_tag)),
            ("sdp", Value::Bytes(self.sdp.to_vec())),
            ("flags", Value::List(vec![s("trust-address")])),
            ("replace", Value::List(vec![s("origin"), s("session-connection")])),
            ("ICE", s("remove")),
            ("address family", s(if self.to.v6 { "IP6" } else { "IP4" })),
        ];
        if let Some(t) = self.to_tag {
            p.push(("to-tag", s(t)));
        }
        if let Some((a, b)) = self.direction() {
            p.push(("direction", Value::List(vec![s(a), s(b)])));
        }
        if let Some(c) = self.client {
            let fam = if c.is_ipv6() { "IP6" } else { "IP4" };
            p.push(("received from", Value::List(vec![s(fam), s(&c.to_string())])));
        }
        dict(p)
    }

    /// Runs it to its end; the rewritten SDP.
    pub fn run(&self, m: &mut dyn MediaControl) -> Result<Vec<u8>, MediaError> {
        m.sdp(self)
    }
}

/// A `direction` entry as the ng listener reads it: empty and
/// `round-robin-calls` leave the interface to the relay.
fn iface(s: &str) -> Option<&str> {
    Some(s).filter(|s| !s.is_empty() && *s != "round-robin-calls")
}

/// Whether an SDP has a connection line (`c=IN IP6` with `v6`, else
/// `c=IN IP4`).
fn has_family(sdp: &[u8], v6: bool) -> bool {
    let want: &[u8] = if v6 { b"c=IN IP6 " } else { b"c=IN IP4 " };
    sdp.split(|&b| b == b'\n').any(|l| l.len() >= want.len() && l[..want.len()].eq_ignore_ascii_case(want))
}

/// The rewritten SDP of an offer's or answer's reply.
pub fn sdp_of(reply: Result<Value, MediaError>) -> Result<Vec<u8>, MediaError> {
    let r = ok_reply(reply?)?;
    r.get("sdp").and_then(Value::as_bytes).map(<[u8]>::to_vec).ok_or(MediaError("reply without SDP".into()))
}

/// The `delete` command for a media session.
pub fn delete_command(call_id: &str) -> Value {
    dict(vec![("command", s("delete")), ("call-id", s(call_id))])
}

fn ok_reply(r: Value) -> Result<Value, MediaError> {
    match r.get("result").and_then(Value::as_str) {
        Some("ok") => Ok(r),
        _ => Err(MediaError(r.get("error-reason").and_then(Value::as_str).unwrap_or("error").to_string())),
    }
}

fn ok_reply_of(r: Result<Value, MediaError>) -> Result<(), MediaError> {
    ok_reply(r?).map(|_| ())
}

/// Deletes a media session (Ok also when it was already gone).
pub fn delete(m: &mut dyn MediaControl, call_id: &str) -> Result<(), MediaError> {
    m.delete(call_id)
}

/// A control shared with its owner (tests look at the TrGW's tables).
impl<M: MediaControl> MediaControl for std::sync::Arc<std::sync::Mutex<M>> {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        function::lock(self).command(req)
    }
    fn sdp(&mut self, cmd: &SdpCommand) -> Result<Vec<u8>, MediaError> {
        function::lock(self).sdp(cmd)
    }
    fn delete(&mut self, call_id: &str) -> Result<(), MediaError> {
        function::lock(self).delete(call_id)
    }
    fn start(&mut self, now: Instant, cmd: &Command) -> Started {
        function::lock(self).start(now, cmd)
    }
    fn poll_done(&mut self) -> Option<(u64, Reply)> {
        function::lock(self).poll_done()
    }
    fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        function::lock(self).poll_transmit()
    }
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        function::lock(self).handle_datagram(now, from, data)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        function::lock(self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        function::lock(self).handle_timeout(now)
    }
    fn late_replies(&self) -> u64 {
        function::lock(self).late_replies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_leaves_the_sender_interface_to_the_relay_for_mixed_families() {
        let (v6, v4) = (Side { iface: Some("v6".into()), v6: true }, Side { iface: Some("v4".into()), v6: false });
        let dir = |sdp: &str| {
            let c = SdpCommand {
                offer: true,
                call_id: "c",
                from_tag: "f",
                to_tag: None,
                sdp: sdp.as_bytes(),
                from: &v6,
                to: &v4,
                client: None,
            };
            let v = c.to_value();
            let Value::Dict(d) = v else { panic!() };
            let l = d.iter().find(|(k, _)| k == b"direction").map(|(_, v)| v.clone());
            match l {
                Some(Value::List(l)) => l.iter().map(|x| x.as_bytes().unwrap().to_vec()).collect::<Vec<_>>(),
                _ => panic!("a direction"),
            }
        };
        let v6only = "v=0\r\nc=IN IP6 2001:db8::1\r\nm=audio 1 RTP/AVP 0\r\n";
        assert_eq!(dir(v6only), [b"v6".to_vec(), b"v4".to_vec()]);
        // RFC 5118 §4.8: one stream on IPv4 in an offer from the IPv6 realm.
        let mixed =
            "v=0\r\nm=audio 1 RTP/AVP 0\r\nc=IN IP4 192.0.2.1\r\nm=video 2 RTP/AVP 0\r\nc=IN IP6 2001:db8::1\r\n";
        assert_eq!(dir(mixed), [b"".to_vec(), b"v4".to_vec()]);
    }

    #[test]
    fn weighted_rendezvous_is_sticky_and_follows_weights() {
        let servers: Vec<(SocketAddr, u32)> =
            vec![("127.0.0.1:1".parse().unwrap(), 1), ("127.0.0.1:2".parse().unwrap(), 3)];
        let c = NgClients::new(&servers, Duration::from_millis(10), 0).unwrap();
        let now = Instant::now();
        let mut firsts = [0u32; 2];
        for i in 0..4000 {
            let id = format!("call-{i}");
            let o = c.order(id.as_bytes(), now);
            assert_eq!(o, c.order(id.as_bytes(), now), "same call, same server");
            firsts[o[0]] += 1;
        }
        // Weight 3 vs 1: about 75 % of the calls on the second server.
        assert!((2700..3300).contains(&firsts[1]), "{firsts:?}");
    }

    use std::net::UdpSocket;

    #[test]
    fn a_dead_server_fails_over() {
        // A socket that never answers, then a fake ng server that does.
        let dead = UdpSocket::bind("127.0.0.1:0").unwrap();
        let live = UdpSocket::bind("127.0.0.1:0").unwrap();
        let live_addr = live.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut b = [0u8; 2048];
            let (n, from) = live.recv_from(&mut b).unwrap();
            let sp = b[..n].iter().position(|&c| c == b' ').unwrap();
            let mut r = b[..sp].to_vec();
            r.extend_from_slice(b" d6:result4:ponge");
            live.send_to(&r, from).unwrap();
        });
        let mut c = NgClients::new(&[(dead.local_addr().unwrap(), 1000), (live_addr, 1)], Duration::from_millis(50), 0)
            .unwrap();
        let r = c.command(&dict(vec![("command", s("ping")), ("call-id", s("x"))])).unwrap();
        assert_eq!(r.get("result").and_then(Value::as_str), Some("pong"));
        t.join().unwrap();
        // The dead one is now skipped first.
        assert_eq!(c.order(b"x", Instant::now())[0], 1);
    }
}
