//! The Teredo client (RFC 4380 §5.2, RFC 5991, RFC 6081).
//!
//! **Qualification** (§5.2.1): an optional cone test (a solicitation with
//! the cone bit, answered from the server's other address: only a cone NAT
//! lets that through), then a solicitation to the primary address (its
//! answer gives the Teredo prefix and, in the Origin indication, our
//! mapping) and one to the secondary address: the same mapping means a
//! restricted NAT, another one a symmetric NAT. RFC 4380 gives up on a
//! symmetric NAT (as Miredo does); with the RFC 6081 Symmetric NAT Support
//! extension the client qualifies anyway, with the primary's mapping, and
//! lets peers learn the mapping its NAT gives them. It also notes whether
//! the NAT preserved the local port (RFC 6081 port-preserving NATs).
//! The address is `2001:0:SERVER:FLAGS:~port:~addr` with the cone bit and
//! RFC 5991's random flag bits.
//!
//! **Refresh** (§5.2.7): a solicitation every 30 s keeps the mapping; an
//! answer with another mapping changes the address; three unanswered ones
//! take the interface down and qualification starts again.
//!
//! **Peers** (§5.2.4–§5.2.6, §5.2.9): a Teredo peer is trusted once a
//! packet came from the mapping its address embeds (or, RFC 6081, from the
//! mapping its NAT gave it, or from an alternate address it announced);
//! until then packets wait in a bounded queue while bubbles go directly to
//! the peer (opening our NAT) and through its server (which adds our
//! address as Origin indication so the peer answers directly). A native
//! IPv6 peer is reached through the Teredo relay nearest to it: an Echo
//! Request goes out through our server, and the relay whose address the
//! reply comes from is used from then on (the direct IPv6 connectivity
//! test). An indirect bubble from the server gets a direct bubble back to
//! its origin (that is how relays and peers open our NAT).
//!
//! **Hairpinning** (RFC 6081): two clients behind the same NAT (same
//! mapped address) cannot always reach each other's mapping; their
//! bubbles carry an Alternate Address trailer with the local address, and
//! each answers a bubble with one to the addresses the other announced.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use xlat::tunnel::teredo::{self, TeredoAddr, TeredoPacket, FLAG_CONE, PREFIX_HI32};
use xlat::tunnel::teredo_msg::{self, Trailer, MAX_ALT_ADDRS, RS_SRC_CONE, RS_SRC_RESTRICTED};
use xlat::wire::ipv6::Ipv6Packet;

use super::{
    is_bubble_with_payload, is_global_v6, is_link_local, parse, ParseDrop, Rng, BUBBLE_INTERVAL_MS, BUBBLE_MAX,
    BUBBLE_WINDOW_MS, PEER_TRUST_MS, REFRESH_MS, TEREDO_PORT,
};
use crate::outbox::{Dest, Outbox};
use crate::table::{Millis, Table};

/// Client settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The server's primary IPv4 address.
    pub server: Ipv4Addr,
    /// The server's secondary IPv4 address (usually primary + 1).
    pub server2: Ipv4Addr,
    /// The Teredo prefix's first 32 bits accepted in advertisements.
    pub prefix_hi32: u32,
    /// Our local UDP address (port-preservation check, hairpinning).
    pub local: SocketAddrV4,
    /// Run the cone test first (RFC 4380). RFC 5991 clients leave the cone
    /// bit clear, which is the default.
    pub probe_cone: bool,
    /// Wait for an answer to a solicitation.
    pub timeout: Millis,
    /// Solicitations before a probe is given up.
    pub retries: u8,
    /// Refresh interval once qualified.
    pub refresh: Millis,
    /// Pause after a failed qualification.
    pub restart_delay: Millis,
    /// RFC 6081 Symmetric NAT Support.
    pub symmetric_nat: bool,
    /// RFC 6081 Hairpinning.
    pub hairpinning: bool,
    /// RFC 5991 random bits in the address flags.
    pub random_flags: bool,
    /// Largest peer list.
    pub max_peers: usize,
    /// Packets queued for one untrusted peer.
    pub queue_per_peer: usize,
    /// RFC 6081 §4 (port-preserving symmetric NAT): at most this many
    /// peers at once get a random local port of their own (0: off).
    pub random_ports: usize,
}

impl ClientConfig {
    /// Defaults for server `server` (secondary `server + 1`) and local address `local`.
    pub fn new(server: Ipv4Addr, local: SocketAddrV4) -> Self {
        ClientConfig {
            server,
            server2: Ipv4Addr::from(u32::from(server).wrapping_add(1)),
            prefix_hi32: PREFIX_HI32,
            local,
            probe_cone: false,
            timeout: 4_000,
            retries: 3,
            refresh: REFRESH_MS,
            restart_delay: 30_000,
            symmetric_nat: true,
            hairpinning: true,
            random_flags: true,
            max_peers: 4096,
            queue_per_peer: 16,
            random_ports: 16,
        }
    }
}

/// The NAT type qualification found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NatType {
    /// Answers from the server's other address pass (full cone).
    Cone,
    /// Same mapping towards both server addresses (address or port restricted).
    Restricted,
    /// Another mapping towards each destination.
    Symmetric,
}

/// What the runner must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// Qualified (or the address changed): configure `addr` on the interface.
    Up {
        /// Our Teredo address.
        addr: Ipv6Addr,
        /// The link MTU the server advertised.
        mtu: u16,
        /// The NAT type found.
        nat: NatType,
    },
    /// Lost the server: remove the address.
    Down,
    /// RFC 6081 §4: open a UDP socket on our local address and `port`;
    /// packets for `Dest::Udp { sock, .. }` leave through it. If it cannot
    /// be bound, call [`Client::port_failed`].
    OpenPort {
        /// The index the outbox uses for it (1 and up; 0 is the main socket).
        sock: u8,
        /// The random local port.
        port: u16,
    },
    /// Close the socket `sock` (its peer is gone).
    ClosePort {
        /// As in `OpenPort`.
        sock: u8,
    },
}

crate::counters! {
    /// Counters of the Teredo client.
    ClientStats {
        /// Router Solicitations sent.
        solicitations,
        /// Router Advertisements accepted.
        advertisements,
        /// Qualifications completed.
        qualified,
        /// Addresses lost (server silent).
        lost,
        /// Packets from the interface.
        v6_in,
        /// UDP datagrams received.
        udp_in,
        /// Packets sent to peers and relays.
        sent,
        /// Packets delivered to the interface.
        delivered,
        /// Bubbles sent.
        bubbles_sent,
        /// Bubbles received.
        bubbles_received,
        /// Echo Requests of the connectivity test sent.
        pings_sent,
        /// Peers trusted.
        peers_trusted,
        /// Mappings learnt from a peer behind a symmetric NAT (RFC 6081).
        mappings_learnt,
        /// Peers reached at an alternate (local) address (RFC 6081 hairpinning).
        hairpinned,
        /// Direct bubbles sent to the port a peer announced in a Random Port
        /// trailer (RFC 6081 §4, a peer behind a port-preserving symmetric NAT).
        random_port_bubbles,
        /// Random local ports opened for a peer (RFC 6081 §4, we are behind a
        /// port-preserving symmetric NAT).
        random_ports_opened,
        /// Peers evicted because the list was full.
        peers_evicted,
        /// Dropped: malformed or truncated Teredo packet.
        drop_malformed,
        /// Dropped: link-local or multicast from the IPv6 side (MLD, router
        /// and neighbour solicitations the kernel sends on the device).
        drop_link_scope,
        /// Dropped: not qualified yet.
        drop_not_qualified,
        /// Dropped: advertisement without our nonce, with a failed confirmation, or wrong.
        drop_bad_advertisement,
        /// Dropped: a packet from the interface not from our Teredo address.
        drop_not_our_source,
        /// Dropped: a received packet not for our address.
        drop_not_for_us,
        /// Dropped: Next Header 59 with a payload.
        drop_bubble_with_payload,
        /// Dropped: source neither trusted nor matching its mapping.
        drop_untrusted,
        /// Dropped: destination not global unicast.
        drop_bad_destination,
        /// Dropped: queue full.
        drop_queue_full,
        /// Dropped: the peer never answered (bubbles or pings spent).
        drop_unreachable,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Cone,
    Primary,
    Secondary,
    Refresh,
}

#[derive(Debug, Clone, Copy)]
struct Qualified {
    addr: TeredoAddr,
    mtu: u16,
    nat: NatType,
}

#[derive(Debug, Default)]
struct Peer {
    mapped: Option<SocketAddrV4>,
    trusted: bool,
    last_rx: Millis,
    last_tx: Option<Millis>,
    tries: u8,
    window_start: Millis,
    ping: Option<(u16, u16, [u8; 8])>,
    alt: Vec<SocketAddrV4>,
    queue: Vec<Vec<u8>>,
}

impl Peer {
    fn trusted_at(&self, now: Millis) -> bool {
        self.trusted && self.mapped.is_some() && now < self.last_rx.saturating_add(PEER_TRUST_MS)
    }

    fn due(&mut self, now: Millis) -> Option<bool> {
        if self.tries >= BUBBLE_MAX {
            if now < self.window_start.saturating_add(BUBBLE_WINDOW_MS) {
                return None;
            }
            self.tries = 0;
        }
        if self.last_tx.is_some_and(|t| now < t.saturating_add(BUBBLE_INTERVAL_MS)) {
            return Some(false);
        }
        if self.tries == 0 {
            self.window_start = now;
        }
        self.tries += 1;
        self.last_tx = Some(now);
        Some(true)
    }
}

/// The Teredo client core.
#[derive(Debug)]
pub struct Client {
    cfg: ClientConfig,
    rng: Rng,
    probe: Probe,
    tries: u8,
    deadline: Millis,
    nonce: [u8; 8],
    cone: bool,
    first: Option<(SocketAddrV4, u16)>,
    current: Option<Qualified>,
    flags_random: u16,
    peers: Table<Ipv6Addr, Peer>,
    events: Vec<ClientEvent>,
    /// RFC 6081 §4 random ports: slot `i` is socket `i + 1`, held by a peer.
    ports: Vec<Option<(Ipv6Addr, u16)>>,
    /// Counters.
    pub stats: ClientStats,
}

/// RFC 5991: the flag bits that are random (`CRAAAAUG AAAAAAAA`, A bits).
const RANDOM_FLAG_BITS: u16 = 0x3cff;
/// Hop limit of the connectivity test's Echo Request.
const PING_HOP_LIMIT: u8 = 64;

impl Client {
    /// A client for `cfg`, random numbers from `rng`. Call [`Client::start`].
    pub fn new(cfg: ClientConfig, mut rng: Rng) -> Self {
        let ports = vec![None; cfg.random_ports.min(usize::from(u8::MAX))];
        let flags_random = if cfg.random_flags { rng.next_u64() as u16 & RANDOM_FLAG_BITS } else { 0 };
        let peers = Table::new(cfg.max_peers, PEER_TRUST_MS);
        Client {
            cfg,
            rng,
            probe: Probe::Cone,
            tries: 0,
            deadline: 0,
            nonce: [0; 8],
            cone: false,
            first: None,
            current: None,
            flags_random,
            peers,
            events: Vec::new(),
            ports,

            stats: ClientStats::default(),
        }
    }

    /// Our Teredo address, when qualified.
    pub fn address(&self) -> Option<Ipv6Addr> {
        self.current.map(|q| q.addr.to_ipv6())
    }

    /// The NAT type, when qualified.
    pub fn nat(&self) -> Option<NatType> {
        self.current.map(|q| q.nat)
    }

    /// The mapping the server sees, when qualified.
    pub fn mapping(&self) -> Option<SocketAddrV4> {
        self.current.map(|q| q.addr.mapped)
    }

    /// True when the NAT kept our local port (RFC 6081 port-preserving NAT).
    pub fn port_preserving(&self) -> bool {
        self.current.is_some_and(|q| q.addr.mapped.port() == self.cfg.local.port())
    }

    /// The socket a peer is reached through: its random port's (RFC 6081
    /// §4) or the main one (0).
    fn sock_for(&self, peer: &Ipv6Addr) -> u8 {
        self.ports.iter().position(|s| s.is_some_and(|(a, _)| a == *peer)).map_or(0, |i| i as u8 + 1)
    }

    /// RFC 6081 §4: behind a port-preserving symmetric NAT, a peer gets a
    /// random local port of its own, which the NAT keeps, so the peer can
    /// answer the port we announce. Returns it when one was opened.
    fn open_random_port(&mut self, peer: Ipv6Addr) -> Option<u16> {
        if !self.cfg.symmetric_nat || self.nat() != Some(NatType::Symmetric) || !self.port_preserving() {
            return None;
        }
        if self.sock_for(&peer) != 0 {
            return self.ports.iter().flatten().find(|(a, _)| *a == peer).map(|(_, p)| *p);
        }
        let slot = self.ports.iter().position(Option::is_none)?;
        let port = 49_152 + (self.rng.next_u64() % 16_384) as u16;
        self.ports[slot] = Some((peer, port));
        self.events.push(ClientEvent::OpenPort { sock: slot as u8 + 1, port });
        self.stats.random_ports_opened += 1;
        Some(port)
    }

    /// The runner could not open socket `sock`: its peer goes through the main socket.
    pub fn port_failed(&mut self, sock: u8) {
        if let Some(s) = usize::from(sock).checked_sub(1).and_then(|i| self.ports.get_mut(i)) {
            *s = None;
        }
    }

    /// Close the random ports of peers that are gone (or all of them).
    fn close_random_ports(&mut self, now: Millis, all: bool) {
        for i in 0..self.ports.len() {
            if let Some((a, _)) = self.ports[i] {
                if all || self.peers.get(&a, now).is_none() {
                    self.ports[i] = None;
                    self.events.push(ClientEvent::ClosePort { sock: i as u8 + 1 });
                }
            }
        }
    }

    /// Random local ports open now (RFC 6081 §4).
    pub fn random_ports(&self) -> usize {
        self.ports.iter().flatten().count()
    }

    /// Peers in the list.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// Events since the last call.
    pub fn take_events(&mut self) -> Vec<ClientEvent> {
        std::mem::take(&mut self.events)
    }

    /// When [`Client::tick`] wants to run next.
    pub fn next_timer(&self) -> Millis {
        self.deadline
    }

    /// Start (or restart) qualification.
    pub fn start(&mut self, now: Millis, ob: &mut Outbox) {
        self.probe = if self.cfg.probe_cone { Probe::Cone } else { Probe::Primary };
        self.tries = 0;
        self.first = None;
        self.solicit(now, ob);
    }

    fn solicit(&mut self, now: Millis, ob: &mut Outbox) {
        self.nonce = self.rng.nonce();
        self.cone = match self.probe {
            Probe::Cone => true,
            Probe::Refresh => self.current.is_some_and(|q| q.nat == NatType::Cone),
            _ => false,
        };
        let to = if self.probe == Probe::Secondary { self.cfg.server2 } else { self.cfg.server };
        let (cone, nonce) = (self.cone, self.nonce);
        if ob.push_with(Dest::Udp { sock: 0, to: SocketAddrV4::new(to, TEREDO_PORT) }, 64, |b| {
            teredo_msg::router_solicitation(cone, nonce, b).ok()
        }) {
            self.stats.solicitations += 1;
        }
        self.tries += 1;
        self.deadline = now + self.cfg.timeout;
    }

    fn qualify(&mut self, mapped: SocketAddrV4, mtu: u16, nat: NatType) {
        let flags = if nat == NatType::Cone { FLAG_CONE } else { 0 } | self.flags_random;
        let addr = TeredoAddr { server: self.cfg.server, flags, mapped };
        let changed = self.current.is_none_or(|q| q.addr != addr || q.mtu != mtu);
        self.current = Some(Qualified { addr, mtu, nat });
        if changed {
            self.peers.clear();
            self.stats.qualified += 1;
            self.events.push(ClientEvent::Up { addr: addr.to_ipv6(), mtu, nat });
            tracing::info!(
                "teredo client: qualified, address {}, NAT {nat:?}{}",
                addr.to_ipv6(),
                if mapped.port() == self.cfg.local.port() { " (port-preserving)" } else { "" }
            );
        }
    }

    /// Timers: solicitation retries and refreshes, bubble retries.
    pub fn tick(&mut self, now: Millis, ob: &mut Outbox) {
        self.peers.expire(now);
        self.close_random_ports(now, false);
        self.retry_bubbles(now, ob);
        if now < self.deadline {
            return;
        }
        match self.probe {
            Probe::Refresh if self.tries == 0 => self.solicit(now, ob),
            _ if self.tries < self.cfg.retries => self.solicit(now, ob),
            Probe::Cone => {
                self.probe = Probe::Primary;
                self.tries = 0;
                self.solicit(now, ob);
            }
            Probe::Secondary if self.cfg.symmetric_nat => {
                // No answer from the secondary address: qualify on the primary's.
                if let Some((m, mtu)) = self.first {
                    self.probe = Probe::Refresh;
                    self.tries = 0;
                    self.deadline = now + self.cfg.refresh;
                    self.qualify(m, mtu, NatType::Restricted);
                    return;
                }
                self.fail(now);
            }
            Probe::Refresh => {
                tracing::warn!("teredo client: server silent, address lost");
                self.current = None;
                self.stats.lost += 1;
                self.events.push(ClientEvent::Down);
                self.close_random_ports(now, true);
                self.start(now, ob);
            }
            _ => self.fail(now),
        }
    }

    fn fail(&mut self, now: Millis) {
        tracing::info!("teredo client: no answer from server {}, retrying later", self.cfg.server);
        self.probe = if self.cfg.probe_cone { Probe::Cone } else { Probe::Primary };
        self.tries = 0;
        self.deadline = now + self.cfg.restart_delay;
    }

    fn on_advertisement(&mut self, from: SocketAddrV4, p: &TeredoPacket<'_>, now: Millis, ob: &mut Outbox) -> bool {
        let v = p.ipv6_packet();
        let Some(ra) = teredo_msg::parse_router_advertisement(&v) else { return false };
        let ok = p.auth.is_some_and(|a| a.nonce == self.nonce && a.confirmation == 0)
            && v.dst() == if self.cone { RS_SRC_CONE } else { RS_SRC_RESTRICTED }
            && (u128::from(ra.prefix) >> 96) as u32 == self.cfg.prefix_hi32
            && Ipv4Addr::from((u128::from(ra.prefix) >> 64) as u32) == self.cfg.server
            && p.origin.is_some_and(|o| teredo::is_global_v4(*o.ip()));
        if !ok {
            self.stats.drop_bad_advertisement += 1;
            return true;
        }
        let _ = from;
        let (mapped, mtu) = (p.origin.unwrap_or(self.cfg.local), ra.mtu.unwrap_or(1280));
        self.stats.advertisements += 1;
        self.nonce = self.rng.nonce(); // one answer per solicitation
        match self.probe {
            Probe::Cone => {
                self.probe = Probe::Refresh;
                self.qualify(mapped, mtu, NatType::Cone);
            }
            Probe::Primary => {
                self.first = Some((mapped, mtu));
                self.probe = Probe::Secondary;
                self.tries = 0;
                self.solicit(now, ob);
                return true;
            }
            Probe::Secondary => {
                let (m1, mtu1) = self.first.unwrap_or((mapped, mtu));
                if m1 == mapped {
                    self.probe = Probe::Refresh;
                    self.qualify(m1, mtu1, NatType::Restricted);
                } else if self.cfg.symmetric_nat {
                    self.probe = Probe::Refresh;
                    self.qualify(m1, mtu1, NatType::Symmetric);
                } else {
                    tracing::warn!("teredo client: symmetric NAT ({m1} vs {mapped}) and the RFC 6081 extension is off");
                    self.fail(now);
                    return true;
                }
            }
            Probe::Refresh => {
                let nat = self.current.map_or(NatType::Restricted, |q| q.nat);
                self.qualify(mapped, mtu, nat);
            }
        }
        self.tries = 0;
        self.deadline = now + self.cfg.refresh;
        true
    }

    fn our_addr(&self) -> Option<Ipv6Addr> {
        self.address()
    }

    fn bubble_to(&mut self, to: SocketAddrV4, dst: Ipv6Addr, alt: bool, ob: &mut Outbox) {
        let Some(src) = self.our_addr() else { return };
        let local = self.cfg.local;
        let hairpin = alt && self.cfg.hairpinning;
        let sock = self.sock_for(&dst);
        if ob.push_with(Dest::Udp { sock, to }, 40 + 2 + 2 + 6 * MAX_ALT_ADDRS, |b| {
            let mut n = teredo::bubble(src, dst, b).ok()?;
            if hairpin {
                let mut list = [0u8; 6 * MAX_ALT_ADDRS];
                let k = teredo_msg::alt_addrs_bytes(&[local], &mut list);
                n = teredo_msg::write_trailer(&teredo_msg::alt_addrs(&list[..k]), b, n).ok()?;
            }
            Some(n)
        }) {
            self.stats.bubbles_sent += 1;
        }
    }

    fn same_nat(&self, peer: &Ipv6Addr) -> bool {
        match (self.mapping(), TeredoAddr::from_ipv6(peer)) {
            (Some(m), Some(t)) => m.ip() == t.mapped.ip(),
            _ => false,
        }
    }

    /// Send the bubbles (Teredo peer) or the Echo Request (native peer) of
    /// the trust procedure for `dst`, if the budget allows.
    fn probe_peer(&mut self, dst: Ipv6Addr, now: Millis, ob: &mut Outbox) {
        let Some(me) = self.our_addr() else { return };
        let teredo_dst = (u128::from(dst) >> 96) as u32 == self.cfg.prefix_hi32;
        let hairpin = teredo_dst && self.same_nat(&dst);
        let (due, alt, ping) = {
            let Some(peer) = self.peers.get_mut(&dst, now) else { return };
            let due = peer.due(now);
            if due.is_none() {
                self.stats.drop_unreachable += peer.queue.len() as u64;
                peer.queue.clear();
            }
            if due == Some(true) && !teredo_dst {
                let p = (self.rng.next_u64() as u16, peer.tries as u16, self.rng.nonce());
                peer.ping = Some(p);
            }
            (due, peer.alt.clone(), peer.ping)
        };
        if due != Some(true) {
            return;
        }
        if teredo_dst {
            let Some(t) = TeredoAddr::from_ipv6(&dst) else { return };
            let random = if hairpin { None } else { self.open_random_port(dst) };
            self.bubble_to(t.mapped, dst, hairpin, ob);
            let server = SocketAddrV4::new(t.server, TEREDO_PORT);
            match random {
                // RFC 6081 §4: the indirect bubble goes from the main socket
                // (the server knows that mapping) and names the random port.
                Some(port) => {
                    if ob.push_with(Dest::Udp { sock: 0, to: server }, 40 + 8, |b| {
                        let n = teredo::bubble(me, dst, b).ok()?;
                        teredo_msg::write_trailer(&Trailer::RandomPort(port), b, n).ok()
                    }) {
                        self.stats.bubbles_sent += 1;
                    }
                }
                None => self.bubble_to(server, dst, hairpin, ob),
            }
            for a in alt {
                self.bubble_to(a, dst, true, ob);
            }
        } else if let Some((id, seq, nonce)) = ping {
            let server = SocketAddrV4::new(self.cfg.server, TEREDO_PORT);
            if ob.push_with(Dest::Udp { sock: 0, to: server }, 64, |b| {
                teredo_msg::echo_request(me, dst, PING_HOP_LIMIT, id, seq, &nonce, b).ok()
            }) {
                self.stats.pings_sent += 1;
            }
        }
    }

    fn retry_bubbles(&mut self, now: Millis, ob: &mut Outbox) {
        let pending: Vec<Ipv6Addr> = self
            .peers
            .iter(now)
            .filter(|(_, p)| !p.queue.is_empty() && !p.trusted_at(now))
            .map(|(k, _)| *k)
            .take(64)
            .collect();
        for d in pending {
            self.probe_peer(d, now, ob);
        }
    }

    fn peer_entry(&mut self, a: Ipv6Addr, now: Millis) -> &mut Peer {
        if self.peers.get(&a, now).is_none() && self.peers.insert(a, Peer::default(), now).is_some() {
            self.stats.peers_evicted += 1;
        }
        self.peers.touch(&a, now);
        self.peers.get_mut(&a, now).expect("just inserted")
    }

    /// An IPv6 packet from the Teredo interface.
    pub fn on_v6(&mut self, pkt: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.v6_in += 1;
        let Ok(p) = Ipv6Packet::new(pkt) else {
            self.stats.drop_malformed += 1;
            return;
        };
        if crate::is_link_scope(&p.src(), &p.dst()) {
            self.stats.drop_link_scope += 1;
            return;
        }
        let Some(me) = self.our_addr() else {
            self.stats.drop_not_qualified += 1;
            return;
        };
        let pkt = p.as_bytes();
        if p.src() != me {
            self.stats.drop_not_our_source += 1;
            return;
        }
        let dst = p.dst();
        if !is_global_v6(&dst) || dst == me {
            self.stats.drop_bad_destination += 1;
            return;
        }
        if let Some(t) = TeredoAddr::from_ipv6(&dst) {
            if (u128::from(dst) >> 96) as u32 == self.cfg.prefix_hi32
                && (!teredo::is_global_v4(t.server) || !teredo::is_global_v4(*t.mapped.ip()))
            {
                self.stats.drop_bad_destination += 1;
                return;
            }
        }
        let qmax = self.cfg.queue_per_peer;
        let peer = self.peer_entry(dst, now);
        if peer.trusted_at(now) {
            if let Some(to) = peer.mapped {
                let sock = self.sock_for(&dst);
                ob.push(Dest::Udp { sock, to }, pkt);
                self.stats.sent += 1;
                return;
            }
        }
        if peer.queue.len() >= qmax {
            self.stats.drop_queue_full += 1;
        } else {
            peer.queue.push(pkt.to_vec());
        }
        self.probe_peer(dst, now, ob);
    }

    fn trust(&mut self, peer_addr: Ipv6Addr, to: SocketAddrV4, now: Millis, ob: &mut Outbox) {
        let peer = self.peer_entry(peer_addr, now);
        let newly = !peer.trusted || peer.mapped != Some(to);
        peer.trusted = true;
        peer.mapped = Some(to);
        peer.last_rx = now;
        peer.tries = 0;
        peer.last_tx = None;
        peer.ping = None;
        let q = std::mem::take(&mut peer.queue);
        self.stats.peers_trusted += u64::from(newly);
        let sock = self.sock_for(&peer_addr);
        for pkt in q {
            ob.push(Dest::Udp { sock, to }, &pkt);
            self.stats.sent += 1;
        }
    }

    /// A UDP datagram received on our socket.
    pub fn on_udp(&mut self, from: SocketAddrV4, payload: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.udp_in += 1;
        let p = match parse(payload) {
            Ok(p) => p,
            Err(ParseDrop::Truncated | ParseDrop::Malformed) => return self.stats.drop_malformed += 1,
        };
        let from_server =
            (*from.ip() == self.cfg.server || *from.ip() == self.cfg.server2) && from.port() == TEREDO_PORT;
        if from_server && p.auth.is_some() && self.on_advertisement(from, &p, now, ob) {
            return;
        }
        let Some(me) = self.our_addr() else {
            self.stats.drop_not_qualified += 1;
            return;
        };
        if is_bubble_with_payload(&p) {
            self.stats.drop_bubble_with_payload += 1;
            return;
        }
        let v = p.ipv6_packet();
        let (src, dst) = (v.src(), v.dst());
        let bubble = p.is_bubble();
        let alt: Vec<SocketAddrV4> = teredo_msg::trailers(p.trailers)
            .filter_map(|t| match t {
                Trailer::AltAddrs(a) => Some(a.iter().collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .filter(|a| a.port() != 0)
            .collect();
        // RFC 6081 §4: a peer behind a port-preserving symmetric NAT names
        // the (random, per-peer) local port it talks to us from; its NAT
        // keeps that port, so a direct bubble there reaches it.
        let random_ports: Vec<u16> = teredo_msg::trailers(p.trailers)
            .filter_map(|t| match t {
                Trailer::RandomPort(port) if port != 0 => Some(port),
                _ => None,
            })
            .collect();
        if from_server {
            // RFC 4380 §5.2.3: an indirect bubble (or packet) relayed by our
            // server; answer its origin with a direct bubble.
            if let Some(origin) = p.origin {
                if bubble {
                    self.stats.bubbles_received += 1;
                    let hairpin = self.cfg.hairpinning && (!alt.is_empty() || self.same_nat(&src));
                    if !alt.is_empty() && self.cfg.hairpinning {
                        let peer = self.peer_entry(src, now);
                        peer.alt = alt.clone();
                    }
                    {
                        let peer = self.peer_entry(src, now);
                        peer.last_tx = Some(now);
                    }
                    self.bubble_to(origin, src, hairpin, ob);
                    for a in alt {
                        self.bubble_to(a, src, true, ob);
                    }
                    if self.cfg.symmetric_nat {
                        for port in random_ports.into_iter().filter(|&p| p != origin.port()) {
                            self.bubble_to(SocketAddrV4::new(*origin.ip(), port), src, hairpin, ob);
                            self.stats.random_port_bubbles += 1;
                        }
                    }
                    return;
                }
            }
        }
        if dst != me && !(bubble && is_link_local(&dst)) {
            self.stats.drop_not_for_us += 1;
            return;
        }
        let teredo_src = (u128::from(src) >> 96) as u32 == self.cfg.prefix_hi32;
        let known = self.peers.get(&src, now).map(|p| (p.trusted_at(now), p.mapped, p.ping, p.last_tx, p.alt.clone()));
        let accepted = match known {
            Some((true, Some(m), _, _, _)) if m == from => true,
            _ if teredo_src && teredo::source_matches(from, &src) => {
                self.trust(src, from, now, ob);
                true
            }
            Some((_, _, _, _, alts)) if teredo_src && alts.contains(&from) => {
                self.stats.hairpinned += 1;
                self.trust(src, from, now, ob);
                true
            }
            Some((_, _, _, Some(_), _))
                if teredo_src
                    && bubble
                    && self.cfg.symmetric_nat
                    && teredo::TeredoAddr::from_ipv6(&src).is_some_and(|t| t.mapped.ip() == from.ip()) =>
            {
                // RFC 6081 Symmetric NAT Support: the peer's NAT gave it
                // another port towards us; learn it, and answer there so
                // the peer trusts us in turn.
                self.stats.mappings_learnt += 1;
                self.trust(src, from, now, ob);
                self.bubble_to(from, src, false, ob);
                true
            }
            Some((_, _, Some((id, seq, nonce)), _, _)) if !teredo_src => {
                // RFC 4380 §5.2.9: the reply to our connectivity test names
                // the relay serving this native peer.
                let ok = teredo_msg::parse_echo(&v)
                    .is_some_and(|e| e.reply && e.id == id && e.seq == seq && e.payload == nonce);
                if ok {
                    self.trust(src, from, now, ob);
                    self.stats.udp_in += 0;
                    return;
                }
                false
            }
            _ => false,
        };
        if !accepted {
            self.stats.drop_untrusted += 1;
            if !teredo_src && !bubble {
                // A native peer through a relay we do not know (yet): test it.
                let _ = self.peer_entry(src, now);
                self.probe_peer(src, now, ob);
            }
            return;
        }
        if let Some(peer) = self.peers.get_mut(&src, now) {
            peer.last_rx = now;
            if !alt.is_empty() && self.cfg.hairpinning {
                peer.alt = alt;
            }
        }
        self.peers.touch(&src, now);
        if bubble {
            self.stats.bubbles_received += 1;
            return;
        }
        ob.push(Dest::Tun, p.ipv6);
        self.stats.delivered += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::server::{Server, ServerConfig};
    use super::*;
    use crate::testutil::*;
    use xlat::wire::proto;

    const SRV: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const SRV2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

    /// A NAT in the test: how the server sees the client towards each server address.
    #[derive(Clone, Copy)]
    enum Nat {
        Cone,
        Restricted,
        Symmetric,
    }

    /// Drive one client against one server through a simulated NAT until
    /// it qualifies (or `limit` ms pass).
    fn qualify(cfg: ClientConfig, nat: Nat, limit: Millis) -> (Client, Millis) {
        let mut c = Client::new(cfg, Rng::new(42));
        let mut s = Server::new(ServerConfig::new(SRV, SRV2));
        let (mut ob, mut sob) = (Outbox::new(), Outbox::new());
        let mut now = 0;
        c.start(now, &mut ob);
        while now < limit && c.address().is_none() {
            let sends: Vec<_> = ob.iter().map(|(d, b)| (d, b.to_vec())).collect();
            ob.clear();
            for (d, b) in sends {
                let Dest::Udp { to, .. } = d else { continue };
                let sock = u8::from(*to.ip() == SRV2);
                let mapped = match nat {
                    Nat::Symmetric if sock == 1 => sa("198.51.100.7:50001"),
                    _ => sa("198.51.100.7:50000"),
                };
                sob.clear();
                s.on_udp(sock, mapped, &b, now, &mut sob);
                for (sd, sb) in sob.iter() {
                    let Dest::Udp { sock: out, .. } = sd else { continue };
                    // A restricted NAT drops answers from an address it did not send to.
                    let passes = match nat {
                        Nat::Cone => true,
                        _ => out == sock,
                    };
                    if passes {
                        let src = SocketAddrV4::new(if out == 1 { SRV2 } else { SRV }, TEREDO_PORT);
                        c.on_udp(src, sb, now, &mut ob);
                    }
                }
            }
            now += 500;
            c.tick(now, &mut ob);
        }
        (c, now)
    }

    #[test]
    fn rfc4380_5_2_1_qualification_behind_each_nat() {
        let local = sa("192.168.1.2:50000");
        let (c, _) = qualify(ClientConfig { probe_cone: true, ..ClientConfig::new(SRV, local) }, Nat::Cone, 60_000);
        assert_eq!(c.nat(), Some(NatType::Cone));
        let t = TeredoAddr::from_ipv6(&c.address().unwrap()).unwrap();
        assert!(t.is_cone());
        assert_eq!((t.server, t.mapped), (SRV, sa("198.51.100.7:50000")));
        assert!(c.port_preserving());
        // Restricted: the cone probe times out, then both mappings agree.
        let (c, t_restricted) =
            qualify(ClientConfig { probe_cone: true, ..ClientConfig::new(SRV, local) }, Nat::Restricted, 60_000);
        assert_eq!(c.nat(), Some(NatType::Restricted));
        assert!(!TeredoAddr::from_ipv6(&c.address().unwrap()).unwrap().is_cone());
        assert!(t_restricted >= 12_000, "three cone probes of 4 s first");
        // Without the cone probe (the RFC 5991 default) it is quick.
        let (c, t) = qualify(ClientConfig::new(SRV, local), Nat::Restricted, 60_000);
        assert_eq!(c.nat(), Some(NatType::Restricted));
        assert!(t < 2_000);
        // Symmetric: RFC 6081 qualifies with the primary's mapping; plain RFC 4380 does not.
        let (c, _) = qualify(ClientConfig::new(SRV, local), Nat::Symmetric, 60_000);
        assert_eq!(c.nat(), Some(NatType::Symmetric));
        assert_eq!(c.mapping(), Some(sa("198.51.100.7:50000")));
        let (c, _) =
            qualify(ClientConfig { symmetric_nat: false, ..ClientConfig::new(SRV, local) }, Nat::Symmetric, 60_000);
        assert_eq!(c.address(), None);
        assert!(c.stats.advertisements >= 2);
    }

    #[test]
    fn rfc5991_random_flag_bits_and_events() {
        let (mut c, _) = qualify(ClientConfig::new(SRV, sa("192.168.1.2:4000")), Nat::Restricted, 60_000);
        let t = TeredoAddr::from_ipv6(&c.address().unwrap()).unwrap();
        assert_eq!(t.flags & !RANDOM_FLAG_BITS, 0, "only C and the A bits may be set");
        assert_ne!(t.flags & RANDOM_FLAG_BITS, 0, "seeded generator sets some random bits");
        assert!(!c.port_preserving());
        let ev = c.take_events();
        assert!(matches!(ev.as_slice(), [ClientEvent::Up { mtu: 1280, nat: NatType::Restricted, .. }]));
    }

    #[test]
    fn advertisements_without_our_nonce_are_refused() {
        let mut c = Client::new(ClientConfig::new(SRV, sa("192.168.1.2:4000")), Rng::new(1));
        let mut ob = Outbox::new();
        c.start(0, &mut ob);
        let mut s = Server::new(ServerConfig::new(SRV, SRV2));
        let mut sob = Outbox::new();
        // A forged RA with another nonce.
        let mut forged = [0u8; 128];
        let n = teredo_msg::router_solicitation(false, [0xee; 8], &mut forged).unwrap();
        s.on_udp(0, sa("198.51.100.7:1"), &forged[..n], 0, &mut sob);
        c.on_udp(sa("192.0.2.1:3544"), sob.iter().next().unwrap().1, 0, &mut ob);
        assert_eq!(c.stats.drop_bad_advertisement, 1);
        assert_eq!(c.address(), None);
    }

    fn qualified(mapped: &str, nat: NatType) -> Client {
        let mut c = Client::new(ClientConfig::new(SRV, sa("192.168.1.2:50000")), Rng::new(3));
        c.qualify(sa(mapped), 1280, nat);
        c.probe = Probe::Refresh;
        c.deadline = 30_000;
        c.take_events();
        c
    }

    #[test]
    fn rfc4291_2_5_6_link_local_and_mld_from_the_device_are_link_scope() {
        let mut ob = Outbox::new();
        // Before and after qualification: the kernel's MLD reports and
        // router solicitations are counted apart, not as "not qualified".
        let mut fresh = Client::new(ClientConfig::new(SRV, sa("192.168.1.2:4000")), Rng::new(1));
        fresh.on_v6(&v6(a6("fe80::1"), a6("ff02::16"), proto::HOPOPT, &[0; 8]), 0, &mut ob);
        assert_eq!((fresh.stats.drop_link_scope, fresh.stats.drop_not_qualified), (1, 0));
        let mut c = qualified("198.51.100.7:50000", NatType::Restricted);
        let me = c.address().unwrap();
        c.on_v6(&v6(a6("fe80::1"), a6("ff02::2"), proto::ICMPV6, &[133, 0, 0, 0, 0, 0, 0, 0]), 0, &mut ob);
        c.on_v6(&v6(me, a6("ff02::1"), proto::UDP, &[0; 8]), 0, &mut ob);
        assert!(ob.is_empty());
        assert_eq!((c.stats.drop_link_scope, c.stats.drop_not_our_source, c.stats.drop_bad_destination), (2, 0, 0));
    }

    #[test]
    fn rfc4380_5_2_9_native_peer_through_the_relay_the_echo_names() {
        let mut c = qualified("198.51.100.7:50000", NatType::Restricted);
        let me = c.address().unwrap();
        let host = a6("2001:db8::1");
        let mut ob = Outbox::new();
        let data = v6(me, host, proto::UDP, &[5; 8]);
        c.on_v6(&data, 0, &mut ob);
        // The Echo Request goes to our server.
        let (d, req) = ob.iter().next().map(|(d, b)| (d, b.to_vec())).unwrap();
        assert_eq!(d, Dest::Udp { sock: 0, to: sa("192.0.2.1:3544") });
        let e = teredo_msg::parse_echo(&Ipv6Packet::new(&req).unwrap()).unwrap();
        assert!(!e.reply);
        // The host's reply arrives through relay 203.0.113.5:3544.
        let mut rep = [0u8; 128];
        let n = teredo_msg::echo_request(host, me, 64, e.id, e.seq, e.payload, &mut rep).unwrap();
        rep[40] = teredo_msg::ECHO_REPLY;
        rep[42] = 0;
        rep[43] = 0;
        let ck = teredo_msg::icmp6_checksum(&host, &me, &rep[40..n]);
        rep[42..44].copy_from_slice(&ck.to_be_bytes());
        ob.clear();
        c.on_udp(sa("203.0.113.5:3544"), &rep[..n], 100, &mut ob);
        // The queued packet goes to that relay, and later ones too.
        assert_eq!(ob.iter().next().unwrap(), (Dest::Udp { sock: 0, to: sa("203.0.113.5:3544") }, &data[..]));
        ob.clear();
        c.on_v6(&data, 200, &mut ob);
        assert_eq!(ob.iter().next().unwrap().0, Dest::Udp { sock: 0, to: sa("203.0.113.5:3544") });
        // The host's traffic through that relay is delivered.
        ob.clear();
        let down = v6(host, me, proto::UDP, &[6; 8]);
        c.on_udp(sa("203.0.113.5:3544"), &down, 300, &mut ob);
        assert_eq!(ob.iter().next().unwrap(), (Dest::Tun, &down[..]));
        // The same host through another relay is not trusted: a new test starts.
        ob.clear();
        c.on_udp(sa("203.0.113.6:3544"), &down, 400, &mut ob);
        assert_eq!(c.stats.drop_untrusted, 1);
    }

    #[test]
    fn indirect_bubble_is_answered_directly_and_opens_the_peer() {
        let mut c = qualified("198.51.100.7:50000", NatType::Restricted);
        let me = c.address().unwrap();
        let mut ob = Outbox::new();
        let relay_ll = a6("2001:db8:ffff::1");
        let mut bb = vec![0u8; 48];
        let n = teredo::encap_udp_payload(
            None,
            Some(sa("203.0.113.5:3544")),
            &{
                let mut b = [0u8; 40];
                teredo::bubble(relay_ll, me, &mut b).unwrap();
                b
            },
            &mut bb,
        )
        .unwrap();
        c.on_udp(sa("192.0.2.1:3544"), &bb[..n], 0, &mut ob);
        let (d, b) = ob.iter().next().unwrap();
        assert_eq!(d, Dest::Udp { sock: 0, to: sa("203.0.113.5:3544") });
        let p = teredo::parse(b).unwrap();
        assert!(p.is_bubble());
        assert_eq!((p.ipv6_packet().src(), p.ipv6_packet().dst()), (me, relay_ll));
    }

    #[test]
    fn rfc6081_4_random_port_trailer_gets_a_direct_bubble_there_and_the_answer_is_trusted() {
        let mut c = qualified("198.51.100.7:50000", NatType::Restricted);
        let me = c.address().unwrap();
        // A peer behind a port-preserving symmetric NAT: its address embeds
        // the mapping its NAT gave towards its server (port 6000); towards
        // us it talks from the random port 41234 it announces.
        let peer = TeredoAddr { server: SRV, flags: 0, mapped: sa("203.0.113.9:6000") }.to_ipv6();
        let mut bubble = [0u8; 40];
        teredo::bubble(peer, me, &mut bubble).unwrap();
        let mut pl = vec![0u8; 64];
        let n = teredo::encap_udp_payload(None, Some(sa("203.0.113.9:6000")), &bubble, &mut pl).unwrap();
        let n = teredo_msg::write_trailer(&Trailer::RandomPort(41234), &mut pl, n).unwrap();
        let mut ob = Outbox::new();
        c.on_udp(sa("192.0.2.1:3544"), &pl[..n], 0, &mut ob);
        let to: Vec<_> = ob.iter().map(|(d, _)| d).collect();
        assert_eq!(
            to,
            vec![Dest::Udp { sock: 0, to: sa("203.0.113.9:6000") }, Dest::Udp { sock: 0, to: sa("203.0.113.9:41234") }]
        );
        assert_eq!(c.stats.random_port_bubbles, 1);
        // The peer's direct bubble from the random port makes it trusted
        // (its mapping towards us learnt), and data follows there.
        ob.clear();
        c.on_udp(sa("203.0.113.9:41234"), &bubble, 100, &mut ob);
        assert_eq!(c.stats.mappings_learnt, 1);
        ob.clear();
        let data = v6(me, peer, proto::UDP, &[1; 8]);
        c.on_v6(&data, 200, &mut ob);
        assert_eq!(ob.iter().next(), Some((Dest::Udp { sock: 0, to: sa("203.0.113.9:41234") }, &data[..])));
        // Without the RFC 6081 extensions the trailer is ignored.
        let mut plain = Client::new(
            ClientConfig { symmetric_nat: false, ..ClientConfig::new(SRV, sa("192.168.1.2:50000")) },
            Rng::new(3),
        );
        plain.qualify(sa("198.51.100.7:50000"), 1280, NatType::Restricted);
        ob.clear();
        plain.on_udp(sa("192.0.2.1:3544"), &pl[..n], 0, &mut ob);
        assert_eq!(ob.len(), 1);
    }

    #[test]
    fn rfc6081_4_port_preserving_symmetric_nat_talks_to_each_peer_from_a_random_port() {
        // Behind a port-preserving symmetric NAT (mapping port = local port 50000).
        let mut c = qualified("198.51.100.7:50000", NatType::Symmetric);
        assert!(c.port_preserving());
        let me = c.address().unwrap();
        let peer = TeredoAddr { server: SRV, flags: 0, mapped: sa("203.0.113.9:6000") }.to_ipv6();
        let data = v6(me, peer, proto::UDP, &[4; 8]);
        let mut ob = Outbox::new();
        c.on_v6(&data, 0, &mut ob);
        let ev = c.take_events();
        let [ClientEvent::OpenPort { sock: 1, port }] = ev[..] else { panic!("{ev:?}") };
        assert!(port >= 49_152);
        // The direct bubble leaves through the new socket; the indirect one
        // through the main socket, naming the port in a Random Port trailer.
        let sent: Vec<_> = ob.iter().map(|(d, b)| (d, b.to_vec())).collect();
        assert_eq!(sent[0].0, Dest::Udp { sock: 1, to: sa("203.0.113.9:6000") });
        assert_eq!(sent[1].0, Dest::Udp { sock: 0, to: sa("192.0.2.1:3544") });
        let ind = teredo::parse(&sent[1].1).unwrap();
        assert!(ind.is_bubble());
        assert_eq!(teredo_msg::trailers(ind.trailers).collect::<Vec<_>>(), vec![Trailer::RandomPort(port)]);
        // The peer's direct bubble (to our public address, that port) trusts it;
        // the queued packet goes out through the peer's socket.
        let mut bubble = [0u8; 40];
        teredo::bubble(peer, me, &mut bubble).unwrap();
        ob.clear();
        c.on_udp(sa("203.0.113.9:6000"), &bubble, 100, &mut ob);
        assert_eq!(ob.iter().next(), Some((Dest::Udp { sock: 1, to: sa("203.0.113.9:6000") }, &data[..])));
        // A second peer gets a second socket; a socket that cannot be bound
        // sends its peer back to the main socket.
        let peer2 = TeredoAddr { server: SRV, flags: 0, mapped: sa("203.0.113.10:7000") }.to_ipv6();
        ob.clear();
        c.on_v6(&v6(me, peer2, proto::UDP, &[5; 8]), 200, &mut ob);
        assert!(matches!(c.take_events()[..], [ClientEvent::OpenPort { sock: 2, .. }]));
        c.port_failed(2);
        assert_eq!(c.random_ports(), 1);
        // Peers expire: their sockets close.
        c.tick(200 + PEER_TRUST_MS * 10, &mut ob);
        assert!(c.take_events().contains(&ClientEvent::ClosePort { sock: 1 }));
        assert_eq!((c.random_ports(), c.stats.random_ports_opened), (0, 2));
        // Behind a restricted NAT (or without the extension): the main socket only.
        let mut r = qualified("198.51.100.7:50000", NatType::Restricted);
        r.on_v6(&v6(r.address().unwrap(), peer, proto::UDP, &[4; 8]), 0, &mut ob);
        assert!(r.take_events().is_empty());
    }

    #[test]
    fn two_clients_trust_each_other_through_bubbles() {
        let mut a = qualified("198.51.100.7:50000", NatType::Restricted);
        let mut b = qualified("203.0.113.9:6000", NatType::Restricted);
        let (aa, ba) = (a.address().unwrap(), b.address().unwrap());
        let mut ob = Outbox::new();
        let data = v6(aa, ba, proto::UDP, &[7; 8]);
        a.on_v6(&data, 0, &mut ob);
        // Direct bubble to B's mapping, indirect one to B's server.
        let dests: Vec<_> = ob.iter().map(|(d, _)| d).collect();
        assert_eq!(
            dests,
            vec![Dest::Udp { sock: 0, to: sa("203.0.113.9:6000") }, Dest::Udp { sock: 0, to: sa("192.0.2.1:3544") }]
        );
        // B gets A's direct bubble (its NAT let it through after B's own bubble).
        let bubble = ob.iter().next().unwrap().1.to_vec();
        let mut ob2 = Outbox::new();
        b.on_udp(sa("198.51.100.7:50000"), &bubble, 10, &mut ob2);
        assert_eq!(b.stats.peers_trusted, 1);
        // B's answer reaches A: trusted, queue released.
        let mut bub = [0u8; 40];
        teredo::bubble(ba, aa, &mut bub).unwrap();
        ob.clear();
        a.on_udp(sa("203.0.113.9:6000"), &bub, 20, &mut ob);
        assert_eq!(ob.iter().next().unwrap(), (Dest::Udp { sock: 0, to: sa("203.0.113.9:6000") }, &data[..]));
        // Data from B is delivered; data from a forged mapping is not.
        ob.clear();
        let back = v6(ba, aa, proto::UDP, &[8; 8]);
        a.on_udp(sa("203.0.113.9:6000"), &back, 30, &mut ob);
        a.on_udp(sa("203.0.113.9:6001"), &back, 30, &mut ob);
        assert_eq!(ob.len(), 1);
        assert_eq!(a.stats.drop_untrusted, 1);
    }

    #[test]
    fn rfc6081_symmetric_peer_mapping_and_hairpin_alternate_address() {
        let mut b = qualified("203.0.113.9:6000", NatType::Restricted);
        let ba = b.address().unwrap();
        let a = TeredoAddr { server: SRV, flags: 0, mapped: sa("198.51.100.7:50000") }.to_ipv6();
        let mut ob = Outbox::new();
        // B answered A's indirect bubble (so B expects A), then A's direct
        // bubble arrives from another port of A's NAT.
        let mut ind = [0u8; 48];
        let mut inner = [0u8; 40];
        teredo::bubble(a, ba, &mut inner).unwrap();
        let n = teredo::encap_udp_payload(None, Some(sa("198.51.100.7:50000")), &inner, &mut ind).unwrap();
        b.on_udp(sa("192.0.2.1:3544"), &ind[..n], 0, &mut ob);
        ob.clear();
        b.on_udp(sa("198.51.100.7:50077"), &inner, 10, &mut ob);
        assert_eq!(b.stats.mappings_learnt, 1);
        let (d, bb) = ob.iter().next().unwrap();
        assert_eq!(d, Dest::Udp { sock: 0, to: sa("198.51.100.7:50077") }, "answered at the learnt mapping");
        assert!(teredo::parse(bb).unwrap().is_bubble());
        ob.clear();
        b.on_v6(&v6(ba, a, proto::UDP, &[1; 8]), 20, &mut ob);
        assert_eq!(ob.iter().next().unwrap().0, Dest::Udp { sock: 0, to: sa("198.51.100.7:50077") });

        // Hairpinning: C shares B's public address; its bubbles carry C's local address.
        let c_addr = TeredoAddr { server: SRV, flags: 0, mapped: sa("203.0.113.9:7000") }.to_ipv6();
        let mut cb = [0u8; 80];
        let mut k = teredo::bubble(c_addr, ba, &mut cb).unwrap();
        let mut list = [0u8; 6 * MAX_ALT_ADDRS];
        let m = teredo_msg::alt_addrs_bytes(&[sa("192.168.1.3:7000")], &mut list);
        k = teredo_msg::write_trailer(&teredo_msg::alt_addrs(&list[..m]), &mut cb, k).unwrap();
        let mut via = [0u8; 128];
        let n = teredo::encap_udp_payload(None, Some(sa("203.0.113.9:7000")), &cb[..40], &mut via).unwrap();
        via[n..n + k - 40].copy_from_slice(&cb[40..k]);
        ob.clear();
        b.on_udp(sa("192.0.2.1:3544"), &via[..n + k - 40], 30, &mut ob);
        let dests: Vec<_> = ob.iter().map(|(d, _)| d).collect();
        assert!(dests.contains(&Dest::Udp { sock: 0, to: sa("192.168.1.3:7000") }), "bubble to the alternate address");
        // C's direct bubble from its local address: trusted there.
        b.on_udp(sa("192.168.1.3:7000"), &cb[..k], 40, &mut ob);
        assert_eq!(b.stats.hairpinned, 1);
        ob.clear();
        b.on_v6(&v6(ba, c_addr, proto::UDP, &[1; 8]), 50, &mut ob);
        assert_eq!(ob.iter().next().unwrap().0, Dest::Udp { sock: 0, to: sa("192.168.1.3:7000") });
    }

    #[test]
    fn refresh_and_loss() {
        let (mut c, t0) = qualify(ClientConfig::new(SRV, sa("192.168.1.2:4000")), Nat::Restricted, 60_000);
        c.take_events();
        let mut ob = Outbox::new();
        // The refresh goes out at the deadline; unanswered three times, the address is lost.
        let mut now = t0;
        let mut down = false;
        for _ in 0..200 {
            now += 1000;
            c.tick(now, &mut ob);
            if c.take_events().contains(&ClientEvent::Down) {
                down = true;
                break;
            }
        }
        assert!(down);
        assert_eq!(c.address(), None);
        assert!(c.stats.solicitations >= 5);
    }

    #[test]
    fn bad_input_is_dropped_and_counted() {
        let mut c = qualified("198.51.100.7:50000", NatType::Restricted);
        let me = c.address().unwrap();
        let mut ob = Outbox::new();
        c.on_udp(sa("203.0.113.5:3544"), &[0, 0, 1], 0, &mut ob);
        c.on_udp(sa("203.0.113.5:3544"), &v6(a6("2001:db8::1"), me, proto::NONE, &[1, 2]), 0, &mut ob);
        c.on_udp(sa("203.0.113.5:3544"), &v6(a6("2001:db8::1"), a6("2001:db8::2"), proto::UDP, &[]), 0, &mut ob);
        c.on_v6(&v6(a6("2001:db8::9"), a6("2001:db8::1"), proto::UDP, &[]), 0, &mut ob);
        c.on_v6(&v6(me, a6("fe80::5"), proto::UDP, &[]), 0, &mut ob);
        let s = &c.stats;
        assert_eq!(
            (
                s.drop_malformed,
                s.drop_bubble_with_payload,
                s.drop_not_for_us,
                s.drop_not_our_source,
                s.drop_bad_destination
            ),
            (1, 1, 1, 1, 1)
        );
        let mut fresh = Client::new(ClientConfig::new(SRV, sa("192.168.1.2:4000")), Rng::new(1));
        fresh.on_v6(&v6(me, a6("2001:db8::1"), proto::UDP, &[]), 0, &mut ob);
        assert_eq!(fresh.stats.drop_not_qualified, 1);
    }
}
