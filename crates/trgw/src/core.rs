//! The session state both control protocols drive: calls (by Call-ID),
//! their media streams, each with two legs (A faces the first offerer, B
//! the answerer), port allocation, and the idle timeout. Sockets and
//! packet I/O sit behind [`Plane`], so the whole control path runs (and is
//! fuzzed) without sockets.
//!
//! Budgets: a client (the offer's `received from` / SIP source, else its
//! media address; an IPv6 /64 or an IPv4 address, [`budget::ClientKey`];
//! an offer with neither, a hold without a source, counts in one shared
//! unknown client `::`) holds at most `client-streams` streams, the port range bounds them all;
//! an offer over the client's share is refused ([`CoreError::ClientLimit`])
//! and nothing established is ever evicted. A call stays *early* until
//! media has flowed both ways: early calls are kept `early-timeout`
//! (longer than SIP's Timer C) after their last signalling or packet, so a
//! callee that rings for minutes still finds its media; then the idle
//! `timeout` applies.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use budget::ClientKey;
use socket2::Socket;

use crate::config::{Config, Latching};
use crate::policy::MediaPolicy;
use crate::ports::Ports;
use crate::table::{RelayKey, RelayValue, StreamStats};
use dstpolicy::Refusal;

/// What sockets and workers do for the core.
pub trait Plane: Send {
    /// Binds the RTP socket `addr:port` and the RTCP socket `addr:port+1`.
    /// `Ok([None, None])` is fine for a plane without sockets (and the
    /// shared-socket mode, which only checks the pair is free).
    fn bind(&mut self, addr: IpAddr, port: u16) -> io::Result<[Option<Socket>; 2]>;
    /// Starts relaying stream `id` (slots `id*4..id*4+4`, see
    /// [`crate::table`]); `peers[k]` is the far end of slot k.
    fn install(&mut self, id: u32, sockets: [Option<Socket>; 4], locals: [SocketAddr; 4], init: StreamInit);
    /// New signalled far ends (resets latching).
    fn set_peers(&mut self, id: u32, peers: [Option<SocketAddr>; 4]);
    /// Stops relaying stream `id` and closes its sockets.
    ///
    /// These calls do not wait for the data path: a plane applies them in
    /// order, and before it relays any datagram that arrived after them.
    fn remove(&mut self, id: u32);
}

/// What a worker needs to relay a stream.
#[derive(Debug, Clone)]
pub struct StreamInit {
    /// Far end of each slot, when known.
    pub peers: [Option<SocketAddr>; 4],
    /// Shared counters.
    pub stats: Arc<StreamStats>,
    /// RTP payload type -> clock rate from the SDP.
    pub clock: Vec<(u8, u32)>,
    /// Latching mode.
    pub latching: Latching,
    /// Where media may go: a source symmetric latching would learn must
    /// pass it too.
    pub policy: Arc<MediaPolicy>,
}

/// A plane without sockets (tests, fuzzing).
#[derive(Debug, Default)]
pub struct NullPlane;

impl Plane for NullPlane {
    fn bind(&mut self, _: IpAddr, _: u16) -> io::Result<[Option<Socket>; 2]> {
        Ok([None, None])
    }
    fn install(&mut self, _: u32, _: [Option<Socket>; 4], _: [SocketAddr; 4], _: StreamInit) {}
    fn set_peers(&mut self, _: u32, _: [Option<SocketAddr>; 4]) {}
    fn remove(&mut self, _: u32) {}
}

/// A control-level failure, reported as an error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// No free port pair on an address (the port range is used up).
    NoPorts(IpAddr),
    /// The process ran out of file descriptors (EMFILE/ENFILE) opening
    /// media sockets on an address; `limit` is RLIMIT_NOFILE when known.
    Descriptors {
        /// The address being bound.
        addr: IpAddr,
        /// The soft descriptor limit.
        limit: Option<u64>,
    },
    /// A `[trgw]` interface address is not on this host (EADDRNOTAVAIL).
    AddressNotOnHost(IpAddr),
    /// Binding a media socket failed for another reason.
    Bind(IpAddr, String),
    /// A signalled media address the destination policy refuses.
    Refused {
        /// The address.
        addr: IpAddr,
        /// Why.
        reason: Refusal,
    },
    /// The offer's client already holds its share of the relay's streams
    /// (`client-streams`).
    ClientLimit {
        /// The client (an IPv6 prefix or an IPv4 address).
        client: ClientKey,
        /// Its share.
        limit: usize,
    },
    /// Unknown Call-ID (or tags).
    UnknownCall,
    /// A request that cannot be served (bad interface, family, ...).
    Invalid(String),
}

impl std::fmt::Display for CoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoreError::NoPorts(a) => write!(f, "Ran out of ports on {a}"),
            CoreError::Descriptors { addr, limit: Some(l) } => write!(
                f,
                "Too many open files: the process limit of {l} descriptors (RLIMIT_NOFILE) is reached; cannot open media sockets on {addr}"
            ),
            CoreError::Descriptors { addr, limit: None } => {
                write!(f, "Too many open files: cannot open media sockets on {addr}")
            }
            CoreError::AddressNotOnHost(a) => write!(
                f,
                "Address {a} is not on this host (EADDRNOTAVAIL): check the [trgw] interface addresses"
            ),
            CoreError::Bind(a, e) => write!(f, "Cannot open a media socket on {a}: {e}"),
            CoreError::Refused { addr, reason } => {
                write!(f, "Media address {addr} refused ({reason}): see [trgw] media-allow / media-deny")
            }
            CoreError::ClientLimit { client, limit } => write!(
                f,
                "Media relay busy for this client: {client} holds its {limit} streams ([trgw] client-streams)"
            ),
            CoreError::UnknownCall => f.write_str("Unknown call-id"),
            CoreError::Invalid(m) => f.write_str(m),
        }
    }
}

/// The soft RLIMIT_NOFILE, for error messages.
fn nofile_limit() -> Option<u64> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok().map(|(soft, _)| soft)
}

/// One media stream of a request.
#[derive(Debug, Clone, Default)]
pub struct MediaReq {
    /// Media kind (`audio`).
    pub kind: String,
    /// Transport (`RTP/AVP`).
    pub proto: String,
    /// The sender's address (None: on hold / unknown; `family_v6` then
    /// says which family to allocate).
    pub addr: Option<IpAddr>,
    /// Family when `addr` is None.
    pub family_v6: bool,
    /// The sender's RTP port.
    pub port: u16,
    /// The sender's RTCP endpoint, when signalled (`a=rtcp`).
    pub rtcp: Option<SocketAddr>,
    /// RTCP multiplexed on the RTP port.
    pub rtcp_mux: bool,
    /// Payload type clock rates.
    pub clock: Vec<(u8, u32)>,
}

/// Options of an offer/answer.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Interface of the sender's leg (ng `direction[0]`).
    pub from_iface: Option<String>,
    /// Interface of the other leg (ng `direction[1]`).
    pub to_iface: Option<String>,
    /// Family of the other leg (ng `address family`): Some(true) = IPv6.
    pub to_v6: Option<bool>,
    /// Who the offer came from (ng `received from`, the ALG's SIP source),
    /// for the client's share; None: the offer's media address.
    pub client: Option<IpAddr>,
}

/// A local media endpoint to advertise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// Address for SDP / replies.
    pub addr: IpAddr,
    /// RTP port (RTCP = port + 1).
    pub port: u16,
}

#[derive(Debug, Clone)]
struct Leg {
    bind: IpAddr,
    adv: IpAddr,
    port: u16,
}

/// A relayed media stream.
#[derive(Debug)]
pub struct Stream {
    /// Stream id (slots id*4..id*4+4).
    pub id: u32,
    /// Media kind.
    pub kind: String,
    /// Transport protocol.
    pub proto: String,
    legs: [Leg; 2],
    /// Signalled far end per slot.
    pub peers: [Option<SocketAddr>; 4],
    /// Counters.
    pub stats: Arc<StreamStats>,
    /// The client whose share it counts in.
    client: ClientKey,
}

impl Stream {
    /// Local socket address of slot k.
    pub fn local(&self, k: usize) -> SocketAddr {
        let l = &self.legs[(k >> 1) & 1];
        SocketAddr::new(l.bind, l.port + (k & 1) as u16)
    }

    /// Advertised endpoint of leg 0 (A) or 1 (B).
    pub fn advert(&self, leg: usize) -> Advert {
        let l = &self.legs[leg & 1];
        Advert { addr: l.adv, port: l.port }
    }
}

/// A call: one Call-ID, the offerer's tag (leg A), the answerer's (leg B).
#[derive(Debug)]
pub struct Call {
    /// Call-ID.
    pub call_id: String,
    /// Tag of the side leg A faces.
    pub from_tag: String,
    /// Tag of the side leg B faces, once known.
    pub to_tag: Option<String>,
    /// Unix time of creation.
    pub created_unix: u64,
    /// Unix time of the last offer/answer.
    pub last_signal_unix: u64,
    last_signal: Instant,
    /// Streams by media index.
    pub media: Vec<Option<Stream>>,
    /// The client whose share its streams count in (`::/len`: unknown).
    pub client: ClientKey,
}

impl Call {
    /// Whether media has flowed both ways (from the offerer's side and
    /// from the answerer's) on some stream: the call is established; until
    /// then it is early.
    pub fn two_way(&self) -> bool {
        let got = |s: &Stream, k: usize| s.stats.slots[k].packets.load(Relaxed) > 0;
        self.media.iter().flatten().any(|s| (got(s, 0) || got(s, 1)) && (got(s, 2) || got(s, 3)))
    }

    /// Latest activity (signal or packet); packet times are relative to
    /// `epoch`.
    pub fn last_activity(&self, epoch: Instant) -> Instant {
        let pkt = self.media.iter().flatten().map(|s| s.stats.last_ns()).max().unwrap_or(0);
        let pkt = epoch + Duration::from_nanos(pkt);
        pkt.max(self.last_signal)
    }
}

/// Global counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Calls created.
    pub calls_created: u64,
    /// Calls deleted by command.
    pub calls_deleted: u64,
    /// Calls torn down after idling past the timeout (early ones included).
    pub calls_timed_out: u64,
    /// Early calls (no media both ways yet) torn down after `early-timeout`.
    pub early_timed_out: u64,
    /// Offers refused because their client held `client-streams` streams.
    pub client_limited: u64,
    /// Streams created.
    pub streams_created: u64,
    /// Allocation failures for lack of ports.
    pub port_exhausted: u64,
    /// Allocation failures for lack of file descriptors.
    pub descriptors_exhausted: u64,
    /// Allocation failures because an interface address is not on the host.
    pub address_unavailable: u64,
    /// Offers and answers refused by the media address policy.
    pub media_refused: u64,
    /// ng replies too large for a datagram (an error was sent instead).
    pub replies_too_large: u64,
    /// Control replies the socket refused to send.
    pub control_send_errors: u64,
    /// rtpproxy Unix connections closed at once: `control-connections` reached.
    pub control_connections_refused: u64,
    /// rtpproxy Unix connections closed by the read or write timeout.
    pub control_timeouts: u64,
    /// Failed accepts on the rtpproxy Unix socket (e.g. out of descriptors).
    pub control_accept_errors: u64,
    /// Control commands answered with an error.
    pub control_errors: u64,
    /// Control messages dropped from clients not on the allow-list.
    pub control_denied: u64,
}

/// Packet totals over the live calls.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PacketTotals {
    /// RTP packets relayed.
    pub rtp_packets: u64,
    /// RTP bytes relayed.
    pub rtp_bytes: u64,
    /// RTCP packets relayed.
    pub rtcp_packets: u64,
    /// RTCP bytes relayed.
    pub rtcp_bytes: u64,
    /// Packets dropped.
    pub dropped: u64,
}

impl PacketTotals {
    fn add(&mut self, o: &PacketTotals) {
        self.rtp_packets += o.rtp_packets;
        self.rtp_bytes += o.rtp_bytes;
        self.rtcp_packets += o.rtcp_packets;
        self.rtcp_bytes += o.rtcp_bytes;
        self.dropped += o.dropped;
    }
}

fn stream_totals(s: &Stream) -> PacketTotals {
    let mut t = PacketTotals::default();
    for (k, st) in s.stats.slots.iter().enumerate() {
        let (p, b) = (st.packets.load(Relaxed), st.bytes.load(Relaxed));
        if k & 1 == 0 {
            t.rtp_packets += p;
            t.rtp_bytes += b;
        } else {
            t.rtcp_packets += p;
            t.rtcp_bytes += b;
        }
        t.dropped += st.dropped.load(Relaxed);
    }
    t
}

/// The session state.
pub struct Core {
    cfg: Config,
    ports: Ports,
    plane: Box<dyn Plane>,
    calls: HashMap<String, Call>,
    free_ids: Vec<u32>,
    next_id: u32,
    /// Counters.
    pub totals: Totals,
    epoch: Instant,
    policy: Arc<MediaPolicy>,
    /// Packet counters of the streams already gone.
    retired: PacketTotals,
    /// Streams held per client.
    clients: HashMap<ClientKey, usize>,
    /// Refusal lines (ports exhausted, control clients denied): a few per
    /// 10 s each, however many refusals (issue #29 D12).
    pub(crate) warn_log: dstpolicy::RateLog<&'static str>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("calls", &self.calls.len()).field("totals", &self.totals).finish()
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Core {
    /// A core over `plane`; packet times are relative to `epoch`. The
    /// media address policy is built from `cfg` and the host's addresses,
    /// read once ([`MediaPolicy::standalone`]).
    pub fn new(cfg: Config, plane: Box<dyn Plane>, epoch: Instant) -> Self {
        let policy = Arc::new(MediaPolicy::standalone(&cfg));
        Core::with_policy(cfg, plane, epoch, policy)
    }

    /// [`Core::new`] with a given media address policy.
    pub fn with_policy(cfg: Config, plane: Box<dyn Plane>, epoch: Instant, policy: Arc<MediaPolicy>) -> Self {
        let ports = Ports::new(cfg.port_min, cfg.port_max);
        Core {
            cfg,
            ports,
            plane,
            calls: HashMap::new(),
            free_ids: Vec::new(),
            next_id: 0,
            totals: Totals::default(),
            epoch,
            policy,
            retired: PacketTotals::default(),
            clients: HashMap::new(),
            warn_log: dstpolicy::RateLog::default(),
        }
    }

    /// Streams held by the share of the client `client` belongs to ([`ClientKey::of`]).
    pub fn client_streams(&self, client: IpAddr) -> usize {
        self.clients.get(&ClientKey::of(client, self.cfg.client_prefix_v6)).copied().unwrap_or(0)
    }

    /// Number of clients holding streams.
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// The media address policy.
    pub fn policy(&self) -> &Arc<MediaPolicy> {
        &self.policy
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A live call.
    pub fn call(&self, call_id: &str) -> Option<&Call> {
        self.calls.get(call_id)
    }

    /// Live Call-IDs (at most `limit`).
    pub fn list(&self, limit: usize) -> Vec<String> {
        let mut v: Vec<String> = self.calls.keys().take(limit).cloned().collect();
        v.sort();
        v
    }

    /// Number of live calls.
    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// Number of live streams.
    pub fn stream_count(&self) -> usize {
        self.calls.values().map(|c| c.media.iter().flatten().count()).sum()
    }

    /// The relay's time base for `last_ns` counters.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Sums packet counters over live calls.
    pub fn packet_totals(&self) -> PacketTotals {
        let mut t = PacketTotals::default();
        for s in self.calls.values().flat_map(|c| c.media.iter().flatten()) {
            t.add(&stream_totals(s));
        }
        t
    }

    /// Packet counters since start: ended calls included (monotonic).
    pub fn relayed_totals(&self) -> PacketTotals {
        let mut t = self.packet_totals();
        t.add(&self.retired);
        t
    }

    /// The relay table as XDP map entries (see [`crate::table`]).
    pub fn relay_table(&self) -> Vec<(RelayKey, RelayValue)> {
        let strict = self.cfg.latching == Latching::Strict;
        let mut out = Vec::new();
        for s in self.calls.values().flat_map(|c| c.media.iter().flatten()) {
            for k in 0..4 {
                let out_k = k ^ 2;
                let latched = s.stats.slots[out_k].latched.lock().ok().and_then(|g| *g);
                if let Some(dst) = latched.or(s.peers[out_k]) {
                    out.push((
                        RelayKey::new(s.local(k)),
                        RelayValue::new(s.local(out_k), dst, strict, s.id * 4 + k as u32),
                    ));
                }
            }
        }
        out
    }

    fn pick_iface(&self, name: Option<&str>, v6: bool) -> Result<(IpAddr, IpAddr), CoreError> {
        let fam = if v6 { "IPv6" } else { "IPv4" };
        let ifc = match name {
            Some(n) => {
                let i = self
                    .cfg
                    .interfaces
                    .iter()
                    .find(|i| i.name == n)
                    .ok_or_else(|| CoreError::Invalid(format!("Unknown interface '{n}'")))?;
                if i.addr(v6).is_none() {
                    return Err(CoreError::Invalid(format!("Interface '{n}' has no {fam} address")));
                }
                i
            }
            None => self
                .cfg
                .interfaces
                .iter()
                .find(|i| i.addr(v6).is_some())
                .ok_or_else(|| CoreError::Invalid(format!("No interface with an {fam} address")))?,
        };
        match (ifc.addr(v6), ifc.advertised(v6)) {
            (Some(b), Some(a)) => Ok((b, a)),
            _ => Err(CoreError::Invalid(format!("No {fam} address"))),
        }
    }

    fn alloc_leg(&mut self, bind: IpAddr, adv: IpAddr) -> Result<(Leg, [Option<Socket>; 2]), CoreError> {
        for _ in 0..32 {
            let Some(port) = self.ports.take(bind) else { break };
            match self.plane.bind(bind, port) {
                Ok(s) => return Ok((Leg { bind, adv, port }, s)),
                Err(e) => {
                    self.ports.release(bind, port);
                    match e.raw_os_error() {
                        Some(libc::EMFILE) | Some(libc::ENFILE) => {
                            self.totals.descriptors_exhausted += 1;
                            let err = CoreError::Descriptors { addr: bind, limit: nofile_limit() };
                            tracing::warn!(%bind, "{err}");
                            return Err(err);
                        }
                        Some(libc::EADDRNOTAVAIL) => {
                            self.totals.address_unavailable += 1;
                            let err = CoreError::AddressNotOnHost(bind);
                            tracing::warn!(%bind, "{err}");
                            return Err(err);
                        }
                        Some(libc::EADDRINUSE) => {
                            tracing::debug!(%bind, port, "port pair busy, trying another");
                        }
                        _ => {
                            tracing::warn!(%bind, port, error = %e, "cannot open a media socket");
                            return Err(CoreError::Bind(bind, e.to_string()));
                        }
                    }
                }
            }
        }
        self.totals.port_exhausted += 1;
        if let Some(suppressed) = self.warn_log.admit("ports-exhausted", Instant::now()) {
            tracing::warn!(%bind, suppressed, "no free media port pair");
        }
        Err(CoreError::NoPorts(bind))
    }

    fn release_leg(&mut self, l: &Leg) {
        self.ports.release(l.bind, l.port);
    }

    fn new_stream(
        &mut self,
        req: &MediaReq,
        side_a: (IpAddr, IpAddr),
        side_b: (IpAddr, IpAddr),
        client: ClientKey,
    ) -> Result<Stream, CoreError> {
        let limit = self.cfg.client_streams;
        if self.clients.get(&client).copied().unwrap_or(0) >= limit {
            self.totals.client_limited += 1;
            return Err(CoreError::ClientLimit { client, limit });
        }
        let (la, sa) = self.alloc_leg(side_a.0, side_a.1)?;
        let (lb, sb) = match self.alloc_leg(side_b.0, side_b.1) {
            Ok(x) => x,
            Err(e) => {
                self.release_leg(&la);
                return Err(e);
            }
        };
        let id = self.free_ids.pop().unwrap_or_else(|| {
            self.next_id += 1;
            self.next_id - 1
        });
        let [a0, a1] = sa;
        let [b0, b1] = sb;
        let stream = Stream {
            id,
            kind: req.kind.clone(),
            proto: req.proto.clone(),
            legs: [la, lb],
            peers: [None; 4],
            stats: Arc::new(StreamStats::default()),
            client,
        };
        let locals = [stream.local(0), stream.local(1), stream.local(2), stream.local(3)];
        let init = StreamInit {
            peers: [None; 4],
            stats: stream.stats.clone(),
            clock: req.clock.clone(),
            latching: self.cfg.latching,
            policy: self.policy.clone(),
        };
        self.plane.install(id, [a0, a1, b0, b1], locals, init);
        self.totals.streams_created += 1;
        *self.clients.entry(client).or_insert(0) += 1;
        Ok(stream)
    }

    fn drop_stream(&mut self, s: Stream) {
        if let Some(n) = self.clients.get_mut(&s.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.clients.remove(&s.client);
            }
        }
        self.retired.add(&stream_totals(&s));
        self.plane.remove(s.id);
        for l in &s.legs {
            self.ports.release(l.bind, l.port);
        }
        self.free_ids.push(s.id);
    }

    /// Offer (`offer` = true) or answer for a call: records the sender's
    /// media endpoints and returns, per media index, the local endpoint
    /// the other side must send to (None for disabled streams).
    pub fn signal(
        &mut self,
        offer: bool,
        call_id: &str,
        from_tag: &str,
        to_tag: Option<&str>,
        media: &[Option<MediaReq>],
        place: &Placement,
    ) -> Result<Vec<Option<Advert>>, CoreError> {
        if call_id.is_empty() {
            return Err(CoreError::Invalid("No call-id in message".into()));
        }
        if !offer && !self.calls.contains_key(call_id) {
            return Err(CoreError::UnknownCall);
        }
        // Every address media would be sent to passes the policy before
        // anything changes (0.0.0.0 / :: is hold: no destination).
        for m in media.iter().flatten() {
            for a in m.addr.into_iter().chain(m.rtcp.map(|r| r.ip())).filter(|a| !a.is_unspecified()) {
                if let Err(reason) = self.policy.check(a) {
                    // The policy logged it (rate-limited).
                    self.totals.media_refused += 1;
                    tracing::debug!(call_id, addr = %a, %reason, "media address refused");
                    return Err(CoreError::Refused { addr: a, reason });
                }
            }
        }
        let now = Instant::now();
        let created_now = !self.calls.contains_key(call_id);
        if created_now {
            // The client: who sent the offer, else where its media comes
            // from, else (a hold without a source) the unknown client.
            let first_addr = media.iter().flatten().filter_map(|m| m.addr).find(|a| !a.is_unspecified());
            let client = ClientKey::of(
                place.client.or(first_addr).unwrap_or(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)),
                self.cfg.client_prefix_v6,
            );
            self.calls.insert(
                call_id.to_string(),
                Call {
                    call_id: call_id.to_string(),
                    from_tag: from_tag.to_string(),
                    to_tag: None,
                    created_unix: unix_now(),
                    last_signal_unix: unix_now(),
                    last_signal: now,
                    media: Vec::new(),
                    client,
                },
            );
        }
        // Which leg faces the sender of this SDP?
        let (call_from, call_to) = {
            let c = &self.calls[call_id];
            (c.from_tag.clone(), c.to_tag.clone())
        };
        let sender_leg = if offer {
            if from_tag == call_from || call_to.is_none() && from_tag.is_empty() {
                0
            } else if call_to.as_deref() == Some(from_tag) {
                1
            } else {
                // A new offerer tag on a known call (e.g. a retransmitted
                // INVITE with another branch): it faces leg A.
                0
            }
        } else {
            // The answer comes from the side opposite the offerer (from-tag).
            let answerer = to_tag.unwrap_or("");
            if call_to.is_none() && from_tag == call_from {
                if let Some(c) = self.calls.get_mut(call_id) {
                    c.to_tag = Some(answerer.to_string());
                }
                1
            } else if from_tag == call_from {
                1
            } else if call_to.as_deref() == Some(from_tag) || answerer == call_from {
                0
            } else {
                1
            }
        };
        let mut out = Vec::with_capacity(media.len());
        let mut result = Ok(());
        for (i, m) in media.iter().enumerate() {
            let Some(m) = m else {
                out.push(None);
                continue;
            };
            let exists = self.calls[call_id].media.get(i).is_some_and(Option::is_some);
            if !exists {
                if !offer {
                    result = Err(CoreError::Invalid(format!("Answer for unknown media stream {}", i + 1)));
                    break;
                }
                let v6 = m.addr.map_or(m.family_v6, |a| a.is_ipv6());
                let sender = match self.pick_iface(place.from_iface.as_deref(), v6) {
                    Ok(x) => x,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
                let other_v6 = place.to_v6.unwrap_or(v6);
                let other = match self.pick_iface(place.to_iface.as_deref(), other_v6) {
                    Ok(x) => x,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
                let (a, b) = if sender_leg == 0 { (sender, other) } else { (other, sender) };
                let client = self.calls[call_id].client;
                match self.new_stream(m, a, b, client) {
                    Ok(s) => match self.calls.get_mut(call_id) {
                        Some(c) => {
                            if c.media.len() <= i {
                                c.media.resize_with(i + 1, || None);
                            }
                            c.media[i] = Some(s);
                        }
                        None => self.drop_stream(s),
                    },
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            let Some(s) = self.calls.get_mut(call_id).and_then(|c| c.media.get_mut(i)).and_then(Option::as_mut) else {
                out.push(None);
                continue;
            };
            let rtp = m.addr.filter(|a| !a.is_unspecified() && m.port != 0).map(|a| SocketAddr::new(a, m.port));
            let rtcp = if m.rtcp_mux {
                rtp
            } else {
                m.rtcp.or_else(|| rtp.map(|r| SocketAddr::new(r.ip(), r.port().wrapping_add(1))))
            };
            let base = sender_leg * 2;
            s.peers[base] = rtp;
            s.peers[base + 1] = rtcp;
            let peers = s.peers;
            let id = s.id;
            let adv = s.advert(sender_leg ^ 1);
            self.plane.set_peers(id, peers);
            out.push(Some(adv));
        }
        if let Some(c) = self.calls.get_mut(call_id) {
            c.last_signal = now;
            c.last_signal_unix = unix_now();
        }
        if let Err(e) = result {
            // A new call whose offer failed leaves nothing behind.
            if created_now {
                if let Some(mut c) = self.calls.remove(call_id) {
                    for st in c.media.iter_mut().filter_map(Option::take) {
                        self.drop_stream(st);
                    }
                }
            }
            return Err(e);
        }
        if created_now {
            self.totals.calls_created += 1;
            tracing::debug!(call_id, "new call");
        }
        Ok(out)
    }

    /// Deletes a call. With a tag, only when the tag belongs to the call.
    pub fn delete(&mut self, call_id: &str, tag: Option<&str>) -> Result<Call, CoreError> {
        let c = self.calls.get(call_id).ok_or(CoreError::UnknownCall)?;
        if let Some(t) = tag.filter(|t| !t.is_empty()) {
            if c.from_tag != t && c.to_tag.as_deref() != Some(t) {
                return Err(CoreError::UnknownCall);
            }
        }
        let mut c = self.calls.remove(call_id).ok_or(CoreError::UnknownCall)?;
        for s in c.media.iter_mut().filter_map(Option::take) {
            self.drop_stream_keep_stats(s);
        }
        self.totals.calls_deleted += 1;
        tracing::debug!(call_id, "call deleted");
        Ok(c)
    }

    fn drop_stream_keep_stats(&mut self, s: Stream) {
        self.drop_stream(s);
    }

    /// Tears down calls idle past their timeout (`timeout`, or
    /// `early-timeout` for a call without media both ways yet); returns
    /// their Call-IDs.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let timeout = Duration::from_secs(self.cfg.timeout_secs);
        let early = Duration::from_secs(self.cfg.early_timeout_secs).max(timeout);
        self.expire_after(now, timeout, early)
    }

    /// [`Core::expire`] with explicit timeouts (established, early).
    pub fn expire_after(&mut self, now: Instant, timeout: Duration, early: Duration) -> Vec<String> {
        let epoch = self.epoch;
        let idle: Vec<(String, bool)> = self
            .calls
            .values()
            .filter_map(|c| {
                let two_way = c.two_way();
                let limit = if two_way { timeout } else { early };
                (now.saturating_duration_since(c.last_activity(epoch)) > limit).then(|| (c.call_id.clone(), two_way))
            })
            .collect();
        for (id, two_way) in &idle {
            if let Some(mut c) = self.calls.remove(id) {
                let t = self.packet_summary(&c);
                for s in c.media.iter_mut().filter_map(Option::take) {
                    self.drop_stream(s);
                }
                self.totals.calls_timed_out += 1;
                if *two_way {
                    tracing::info!(call_id = %id, packets = t.0, bytes = t.1, "call timed out (no media)");
                } else {
                    self.totals.early_timed_out += 1;
                    tracing::info!(call_id = %id, packets = t.0, bytes = t.1, "early call timed out (no media both ways)");
                }
            }
        }
        idle.into_iter().map(|(id, _)| id).collect()
    }

    fn packet_summary(&self, c: &Call) -> (u64, u64) {
        let mut p = (0, 0);
        for s in c.media.iter().flatten() {
            for st in &s.stats.slots {
                p.0 += st.packets.load(Relaxed);
                p.1 += st.bytes.load(Relaxed);
            }
        }
        p
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use crate::config::{Config, Interface};

    pub fn config() -> Config {
        Config {
            interfaces: vec![Interface::new("v6", None, Some("2001:db8::1".parse().unwrap())), {
                let mut v4 = Interface::new("v4", Some("192.0.2.1".parse().unwrap()), None);
                v4.advertise_ipv4 = Some("198.51.100.1".parse().unwrap());
                v4
            }],
            port_min: 30000,
            port_max: 30007,
            ..Config::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dstpolicy::Reason;
    use tests_support::config as test_config;

    fn req(addr: &str, port: u16) -> Option<MediaReq> {
        Some(MediaReq { addr: Some(addr.parse().unwrap()), port, ..MediaReq::default() })
    }

    #[test]
    fn offer_answer_delete() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        let a = c.signal(true, "c1", "ft", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
        assert_eq!(a, [Some(Advert { addr: "198.51.100.1".parse().unwrap(), port: 30000 })]);
        let b = c.signal(false, "c1", "ft", Some("tt"), &[req("192.0.2.50", 9000)], &Placement::default()).unwrap();
        assert_eq!(b, [Some(Advert { addr: "2001:db8::1".parse().unwrap(), port: 30000 })]);
        let s = c.call("c1").unwrap().media[0].as_ref().unwrap();
        assert_eq!(s.peers[0], Some("[2001:db8:6::10]:9002".parse().unwrap()));
        assert_eq!(s.peers[1], Some("[2001:db8:6::10]:9003".parse().unwrap()));
        assert_eq!(s.peers[2], Some("192.0.2.50:9000".parse().unwrap()));
        assert_eq!(c.relay_table().len(), 4);
        // Re-offer from the callee keeps the ports and updates leg B.
        let r = c.signal(true, "c1", "tt", None, &[req("192.0.2.51", 9100)], &Placement::default()).unwrap();
        assert_eq!(r[0].unwrap().port, 30000);
        assert_eq!(c.call("c1").unwrap().media[0].as_ref().unwrap().peers[2], Some("192.0.2.51:9100".parse().unwrap()));
        assert_eq!(c.delete("c1", Some("nope")).unwrap_err(), CoreError::UnknownCall);
        c.delete("c1", Some("ft")).unwrap();
        assert!(c.call("c1").is_none());
        assert_eq!(c.delete("c1", None).unwrap_err(), CoreError::UnknownCall);
    }

    #[test]
    fn port_exhaustion_is_an_error_and_counted() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        for i in 0..4 {
            c.signal(true, &format!("c{i}"), "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
        }
        let e = c.signal(true, "c9", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap_err();
        assert!(matches!(e, CoreError::NoPorts(_)));
        assert_eq!(c.totals.port_exhausted, 1);
        assert!(c.call("c9").is_none(), "failed offer leaves no call");
        c.delete("c0", None).unwrap();
        c.signal(true, "c9", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
    }

    /// Counts the WARN events while it is the default subscriber.
    struct Warnings(std::sync::atomic::AtomicUsize);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            if *e.metadata().level() == tracing::Level::WARN {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Issue #29 D12, found again by the soak: offers refused for want of
    /// ports wrote one warning each (50 a second while the soak's control
    /// clients held every port); now a few per 10 s, every refusal counted.
    #[test]
    fn port_exhaustion_writes_a_few_lines_not_one_per_refusal() {
        let warnings = std::sync::Arc::new(Warnings(0.into()));
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        tracing::subscriber::with_default(warnings.clone(), || {
            for i in 0..4 {
                c.signal(true, &format!("c{i}"), "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
            }
            for i in 0..500 {
                let e = c.signal(true, &format!("x{i}"), "t", None, &[req("2001:db8:6::10", 9002)], &place);
                assert!(matches!(e, Err(CoreError::NoPorts(_))), "{e:?}");
            }
        });
        assert_eq!(c.totals.port_exhausted, 500);
        let lines = warnings.0.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1..=10).contains(&lines), "{lines} warnings for 500 refusals");
    }

    #[test]
    fn a_new_call_failing_on_its_second_stream_is_removed_whole() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        // Four RTP ports on the IPv4 address: three single-stream calls use three.
        for i in 0..3 {
            c.signal(true, &format!("c{i}"), "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
        }
        let two = [req("2001:db8:6::10", 9002), req("2001:db8:6::10", 9004)];
        assert!(c.signal(true, "big", "t", None, &two, &place).is_err());
        assert!(c.call("big").is_none());
        assert_eq!(c.stream_count(), 3, "the first stream's ports went back");
        c.signal(true, "c3", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
    }

    #[test]
    fn errors() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        assert_eq!(
            c.signal(false, "x", "a", Some("b"), &[req("192.0.2.1", 1)], &Placement::default()).unwrap_err(),
            CoreError::UnknownCall
        );
        let bad = Placement { to_iface: Some("nope".into()), ..Placement::default() };
        assert!(c.signal(true, "x", "a", None, &[req("192.0.2.1", 1)], &bad).is_err());
        let bad = Placement { to_iface: Some("v6".into()), to_v6: Some(false), ..Placement::default() };
        assert!(c.signal(true, "x", "a", None, &[req("192.0.2.1", 1)], &bad).is_err());
    }

    #[test]
    fn refused_media_addresses_create_nothing_and_are_counted() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        for (addr, reason) in [
            ("127.0.0.1", Reason::Loopback),
            ("::1", Reason::Loopback),
            ("224.0.0.5", Reason::Multicast),
            ("fe80::1", Reason::LinkLocal),
            ("2001:db8::1", Reason::Own),
            ("198.51.100.1", Reason::Own),
        ] {
            let e = c.signal(true, "bad", "t", None, &[req(addr, 5555)], &place).unwrap_err();
            let CoreError::Refused { addr: a, reason: r } = e else { panic!("{addr}: {e:?}") };
            assert_eq!((a, r.reason), (addr.parse().unwrap(), reason), "{addr}");
        }
        // An a=rtcp address is checked too.
        let mut m = req("192.0.2.50", 4000);
        m.as_mut().unwrap().rtcp = Some("127.0.0.1:5555".parse().unwrap());
        assert!(matches!(c.signal(true, "bad", "t", None, &[m], &place), Err(CoreError::Refused { .. })));
        assert!(c.call("bad").is_none());
        assert_eq!(c.totals.media_refused, 7);
        assert_eq!(c.totals.calls_created, 0, "refused offers are not created calls");
        // Hold (0.0.0.0) is no destination, not a refusal.
        c.signal(true, "hold", "t", None, &[req("0.0.0.0", 4000)], &place).unwrap();
        assert_eq!(c.call("hold").unwrap().media[0].as_ref().unwrap().peers[0], None);
        assert_eq!(c.totals.calls_created, 1);
    }

    /// A plane whose binds fail with one OS error.
    struct FailPlane(i32);

    impl Plane for FailPlane {
        fn bind(&mut self, _: IpAddr, _: u16) -> io::Result<[Option<Socket>; 2]> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn install(&mut self, _: u32, _: [Option<Socket>; 4], _: [SocketAddr; 4], _: StreamInit) {}
        fn set_peers(&mut self, _: u32, _: [Option<SocketAddr>; 4]) {}
        fn remove(&mut self, _: u32) {}
    }

    #[test]
    fn resource_errors_are_named_for_what_they_are() {
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        let mut c = Core::new(test_config(), Box::new(FailPlane(libc::EMFILE)), Instant::now());
        let e = c.signal(true, "c", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap_err();
        assert!(matches!(e, CoreError::Descriptors { .. }), "{e:?}");
        assert!(e.to_string().starts_with("Too many open files"), "{e}");
        assert_eq!((c.totals.descriptors_exhausted, c.totals.port_exhausted), (1, 0));
        let mut c = Core::new(test_config(), Box::new(FailPlane(libc::EADDRNOTAVAIL)), Instant::now());
        let e = c.signal(true, "c", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap_err();
        assert_eq!(e, CoreError::AddressNotOnHost("2001:db8::1".parse().unwrap()));
        assert!(e.to_string().contains("not on this host"), "{e}");
        assert_eq!((c.totals.address_unavailable, c.totals.port_exhausted), (1, 0));
        // A busy port is retried, then the range is reported as used up.
        let mut c = Core::new(test_config(), Box::new(FailPlane(libc::EADDRINUSE)), Instant::now());
        let e = c.signal(true, "c", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap_err();
        assert!(matches!(e, CoreError::NoPorts(_)), "{e:?}");
        assert_eq!(c.totals.calls_created, 0);
    }

    #[test]
    fn idle_calls_expire() {
        let t0 = Instant::now();
        let mut c = Core::new(test_config(), Box::new(NullPlane), t0);
        c.signal(true, "c1", "t", None, &[req("192.0.2.9", 4000)], &Placement::default()).unwrap();
        let (five, six) = (Duration::from_secs(5), Duration::from_secs(6));
        assert!(c.expire_after(Instant::now(), five, five).is_empty());
        let gone = c.expire_after(Instant::now() + six, five, five);
        assert_eq!(gone, ["c1"]);
        assert_eq!((c.totals.calls_timed_out, c.totals.early_timed_out), (1, 1));
        assert_eq!(c.call_count(), 0);
    }

    /// Packets on slot k of call `id`'s first stream.
    fn packets(c: &Core, id: &str, k: usize) {
        let s = c.call(id).unwrap().media[0].as_ref().unwrap();
        s.stats.slots[k].packets.fetch_add(1, Relaxed);
    }

    /// D7: a call that rings past the idle timeout keeps its media until
    /// the early timeout; once media flows both ways the idle timeout
    /// applies.
    #[test]
    fn early_calls_are_kept_until_the_early_timeout() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        for id in ["ringing", "early-media", "talking"] {
            c.signal(true, id, "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
        }
        // Early media from the callee only: still early.
        packets(&c, "early-media", 2);
        packets(&c, "talking", 0);
        packets(&c, "talking", 3);
        assert!(c.call("talking").unwrap().two_way() && !c.call("early-media").unwrap().two_way());
        let (idle, early) = (Duration::from_secs(60), Duration::from_secs(240));
        let gone = c.expire_after(Instant::now() + Duration::from_secs(61), idle, early);
        assert_eq!(gone, ["talking"], "only the established call idled out");
        let mut gone = c.expire_after(Instant::now() + Duration::from_secs(241), idle, early);
        gone.sort();
        assert_eq!(gone, ["early-media", "ringing"]);
        assert_eq!((c.totals.calls_timed_out, c.totals.early_timed_out), (3, 2));
        // expire() takes the configured timeouts, the early one never below the idle one.
        let mut cfg = test_config();
        (cfg.timeout_secs, cfg.early_timeout_secs) = (60, 10);
        let mut c = Core::new(cfg, Box::new(NullPlane), Instant::now());
        c.signal(true, "x", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap();
        assert!(c.expire(Instant::now() + Duration::from_secs(30)).is_empty());
    }

    /// D6: a client holds at most `client-streams` streams; others still
    /// get theirs, and the share comes back when its calls go.
    #[test]
    fn each_client_holds_at_most_its_share() {
        let mut cfg = test_config();
        (cfg.port_max, cfg.client_streams) = (30039, 3);
        let mut c = Core::new(cfg, Box::new(NullPlane), Instant::now());
        let from = |a: &str| Placement { to_v6: Some(false), client: Some(a.parse().unwrap()), ..Placement::default() };
        // One /64, many addresses: one client.
        for i in 0..3 {
            let p = from(&format!("2001:db8:6::{i:x}"));
            c.signal(true, &format!("flood{i}"), "t", None, &[req("2001:db8:6::10", 9002)], &p).unwrap();
        }
        let e =
            c.signal(true, "flood9", "t", None, &[req("2001:db8:6::10", 9002)], &from("2001:db8:6::99")).unwrap_err();
        assert_eq!(e, CoreError::ClientLimit { client: ClientKey::of("2001:db8:6::".parse().unwrap(), 64), limit: 3 });
        assert!(e.to_string().starts_with("Media relay busy"), "{e}");
        assert_eq!(c.totals.client_limited, 1);
        assert!(c.call("flood9").is_none());
        // Another /64 and an IPv4 client are served.
        c.signal(true, "other6", "t", None, &[req("2001:db8:6::10", 9002)], &from("2001:db8:7::1")).unwrap();
        c.signal(true, "other4", "t", None, &[req("2001:db8:6::10", 9002)], &from("192.0.2.77")).unwrap();
        // Without a signalling source, the media address is the client.
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        c.signal(true, "media-keyed", "t", None, &[req("2001:db8:6::10", 9002)], &place).unwrap_err();
        c.signal(true, "media-keyed", "t", None, &[req("2001:db8:8::10", 9002)], &place).unwrap();
        assert_eq!(c.client_streams("2001:db8:6::1234".parse().unwrap()), 3);
        assert_eq!(c.client_count(), 4);
        // Holds without a source share one unknown client.
        for i in 0..3 {
            c.signal(true, &format!("hold{i}"), "t", None, &[req("0.0.0.0", 9002)], &place).unwrap();
        }
        let e = c.signal(true, "hold9", "t", None, &[req("::", 9002)], &place).unwrap_err();
        assert_eq!(e, CoreError::ClientLimit { client: ClientKey::of("::".parse().unwrap(), 64), limit: 3 });
        for i in 0..3 {
            c.delete(&format!("hold{i}"), None).unwrap();
        }
        // A re-offer on a call already held needs no new stream: accepted.
        c.signal(true, "flood0", "t", None, &[req("2001:db8:6::11", 9004)], &from("2001:db8:6::1")).unwrap();
        c.delete("flood0", None).unwrap();
        c.signal(true, "flood9", "t", None, &[req("2001:db8:6::10", 9002)], &from("2001:db8:6::99")).unwrap();
        assert_eq!(c.client_streams("2001:db8:6::1".parse().unwrap()), 3);
    }

    /// D4: an address that carries the relay's own IPv4 address through a
    /// NAT64 prefix is the relay's own address.
    #[test]
    fn own_addresses_behind_a_nat64_prefix_are_refused() {
        let mut c = Core::new(test_config(), Box::new(NullPlane), Instant::now());
        let place = Placement { to_v6: Some(false), ..Placement::default() };
        for a in ["64:ff9b::192.0.2.1", "64:ff9b::198.51.100.1", "64:ff9b::127.0.0.1"] {
            let e = c.signal(true, "d4", "t", None, &[req(a, 5555)], &place).unwrap_err();
            assert!(matches!(e, CoreError::Refused { .. }), "{a}: {e:?}");
            assert!(e.to_string().contains("64:ff9b::/96"), "{e}");
        }
        c.signal(true, "fine", "t", None, &[req("64:ff9b::203.0.113.9", 5555)], &place).unwrap();
    }
}

/// One latched relay socket as a fast path (XDP) mirrors it: packets that
/// arrive on `local` from `latched` leave from `out_local` to `out_peer`
/// (`None` while the other leg's far end is unknown), counted in `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastLeg {
    /// Our relay socket packets arrive on (slot k).
    pub local: SocketAddr,
    /// The far end latched on it (the first packet, on the slow path).
    pub latched: SocketAddr,
    /// Our socket on the other leg (slot k ^ 2).
    pub out_local: SocketAddr,
    /// Where the slow path would send: the other slot's latched far end,
    /// else its signalled one.
    pub out_peer: Option<SocketAddr>,
    /// Counters slot (stream * 4 + k).
    pub slot: u32,
}

impl Core {
    /// Every relay socket that has latched its far end, as a fast path
    /// mirrors it (symmetric latching only: with strict latching the
    /// signalled address is the only source, latched the same way).
    pub fn fast_legs(&self) -> Vec<FastLeg> {
        let mut out = Vec::new();
        for s in self.calls.values().flat_map(|c| c.media.iter().flatten()) {
            for k in 0..4 {
                let latched = s.stats.slots[k].latched.lock().ok().and_then(|g| *g);
                let Some(latched) = latched else { continue };
                let o = k ^ 2;
                let out_peer = s.stats.slots[o].latched.lock().ok().and_then(|g| *g).or(s.peers[o]);
                out.push(FastLeg {
                    local: s.local(k),
                    latched,
                    out_local: s.local(o),
                    out_peer,
                    slot: s.id * 4 + k as u32,
                });
            }
        }
        out
    }

    /// Add what a fast path relayed — (slot, packets, bytes) since the
    /// last call — to the slots' own counters, so `query`, `list`, the
    /// totals and the idle timeout see it; a slot with packets gets "now"
    /// as its last-packet time. Slots of streams gone are ignored.
    pub fn add_fast_counts(&self, counts: &[(u32, u64, u64)]) {
        if counts.is_empty() {
            return;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let by_id: HashMap<u32, &Stream> =
            self.calls.values().flat_map(|c| c.media.iter().flatten()).map(|s| (s.id, s)).collect();
        for &(slot, packets, bytes) in counts {
            let Some(s) = by_id.get(&(slot / 4)) else { continue };
            let st = &s.stats.slots[(slot % 4) as usize];
            st.packets.fetch_add(packets, Relaxed);
            st.bytes.fetch_add(bytes, Relaxed);
            if packets > 0 {
                st.last_ns.fetch_max(now, Relaxed);
            }
        }
    }
}
