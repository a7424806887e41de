//! The Teredo relay (RFC 4380 §5.4): a router between native IPv6 (the
//! runner routes `2001::/32` into it) and Teredo clients over UDP.
//!
//! IPv6 to a client (§5.4.1): a peer that sent us a packet from the
//! mapping its address embeds within the last 30 s is trusted and gets the
//! packet straight away. Otherwise the packet is queued (bounded per peer
//! and in all) and the trust procedure starts: a bubble to the client's
//! server, which hands it to the client with our address in the Origin
//! indication, and a direct bubble to the client's mapping (opening our
//! side if we are behind a NAT); the client answers with a direct bubble,
//! which makes it trusted and releases the queue. Bubbles are limited as
//! RFC 4380 §5.2.6 says (one per 2 s, four per 300 s).
//!
//! From a client (§5.4.2): the IPv6 source must be a Teredo address whose
//! mapping is the outer address and port, or that of a trusted peer
//! entry. With the RFC 6081 Symmetric NAT Support extension, a bubble
//! from another port of the client's address answering our bubbles is
//! accepted and its mapping learnt: that is how a client behind a
//! symmetric NAT reaches native IPv6. Bubbles end there; other packets go
//! to the IPv6 side, never to another Teredo client (a relay does not
//! relay Teredo to Teredo).
//!
//! ## Budgets (issue #29)
//!
//! Anyone can make the relay hold state and send bubbles, so:
//!
//! - **Two peer lists.** Trusted peers (`max-peers`) and peers waiting
//!   for the trust procedure (`max-untrusted-peers`) are kept apart, and
//!   neither list evicts: a full list refuses the new peer (counted; a
//!   packet that would have started the trust procedure is answered with
//!   ICMPv6 Destination Unreachable, administratively prohibited,
//!   rate-limited), so no flood of new or spoofed peers ever takes a
//!   trusted peer's place. Entries expire 30 s after their last packet.
//! - **A share of the untrusted list per client**: the native IPv6
//!   source that started the trust procedure, its prefix of
//!   `client-prefix-length` bits (a /64), holds at most
//!   `untrusted-peers-per-client` of them.
//! - **Bubbles limited by where they go**, not by the peer's address:
//!   the RFC 4380 §5.2.6 budget (one per 2 s, four per 300 s) is kept per
//!   mapped IPv4 address and port, whatever flags the Teredo address
//!   carries (rotating them no longer yields new bubbles to one victim);
//!   indirect bubbles to one server address are limited to
//!   `server-bubble-rate` a second, and all bubbles to `bubble-rate`.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use budget::{ClientKey, FairShare, RateTable};
use xlat::tunnel::teredo::{self, TeredoAddr, PREFIX_HI32};
use xlat::wire::ipv6::Ipv6Packet;
use xlat::Out;

use super::{
    bubble_payload, is_bubble_with_payload, is_global_v6, parse, Bucket, ParseDrop, BUBBLE_INTERVAL_MS, BUBBLE_MAX,
    BUBBLE_WINDOW_MS, PEER_TRUST_MS, TEREDO_PORT,
};
use crate::outbox::{Dest, Outbox};
use crate::table::{Millis, Table};

/// ICMPv6 errors the relay sends a second (RFC 4443 §2.4 (f): a token
/// bucket; the same order as Linux's default `icmp_ratelimit`).
pub const ICMP_RATE: u32 = 100;
/// The bucket's depth.
pub const ICMP_BURST: u32 = 10;
/// Server addresses whose indirect-bubble rate is tracked at once.
const SERVER_BUCKETS: usize = 4096;

/// Relay settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The Teredo prefix's first 32 bits.
    pub prefix_hi32: u32,
    /// Source of our bubbles (the relay's IPv6 address; a link-local
    /// address works as well).
    pub address: Ipv6Addr,
    /// Trusted peers at most.
    pub max_peers: usize,
    /// Peers waiting for the trust procedure at most.
    pub max_untrusted: usize,
    /// Untrusted peers one native client (its prefix) may start at most.
    pub untrusted_per_client: usize,
    /// A native client is its IPv6 source's prefix of this length.
    pub client_prefix_len: u8,
    /// Bubbles a second at most, all destinations together (0: no limit).
    pub bubble_rate: u32,
    /// Indirect bubbles a second at most to one server address (0: no limit).
    pub server_bubble_rate: u32,
    /// Packets queued for one untrusted peer.
    pub queue_per_peer: usize,
    /// Bytes queued for all untrusted peers together.
    pub queue_bytes: usize,
    /// Send straight to peers whose address has the cone bit (RFC 4380
    /// §5.4.1). Off by default: RFC 5991 clients no longer set it reliably.
    pub trust_cone: bool,
    /// RFC 6081 Symmetric NAT Support: learn a peer's mapping from a
    /// bubble answering ours that comes from another port.
    pub symmetric_nat: bool,
}

impl RelayConfig {
    /// Defaults with bubble source `address`.
    pub fn new(address: Ipv6Addr) -> Self {
        RelayConfig {
            prefix_hi32: PREFIX_HI32,
            address,
            max_peers: 65_536,
            max_untrusted: 16_384,
            untrusted_per_client: 256,
            client_prefix_len: budget::DEFAULT_V6_PREFIX,
            bubble_rate: 1000,
            server_bubble_rate: 100,
            queue_per_peer: 16,
            queue_bytes: 4 << 20,
            trust_cone: false,
            symmetric_nat: true,
        }
    }
}

crate::counters! {
    /// Counters of the Teredo relay.
    RelayStats {
        /// IPv6 packets from the IPv6 side.
        v6_in,
        /// UDP datagrams from Teredo clients.
        udp_in,
        /// Packets sent to trusted clients over UDP.
        to_clients,
        /// Packets sent to the IPv6 side.
        to_ipv6,
        /// Bubbles sent (indirect and direct count as one each).
        bubbles_sent,
        /// Bubbles not sent: over `bubble-rate` or a server's `server-bubble-rate`.
        bubbles_limited,
        /// Bubbles received.
        bubbles_received,
        /// Peers trusted: after the bubble exchange, or from their first packet.
        peers_trusted,
        /// Mappings learnt from a symmetric NAT (RFC 6081).
        mappings_learnt,
        /// Packets released from a queue when the peer became trusted.
        dequeued,
        /// Peers not kept as trusted: `max-peers` trusted peers were held
        /// (their packet was still handled).
        peers_refused,
        /// Peers expired (trusted or waiting).
        peers_expired,
        /// Dropped: malformed or truncated Teredo or IPv6 packet.
        drop_malformed,
        /// Dropped: link-local or multicast from the IPv6 side (MLD, router
        /// and neighbour solicitations the kernel sends on the device).
        drop_link_scope,
        /// Dropped: an Origin indication in a client's packet.
        drop_bad_origin,
        /// Dropped: Next Header 59 with a payload.
        drop_bubble_with_payload,
        /// Dropped: IPv6 destination not a Teredo address (misrouted into the relay).
        drop_not_teredo_destination,
        /// Dropped: a client packet whose source is not a Teredo address.
        drop_not_teredo_source,
        /// Dropped: destination not global unicast, or a non-global mapping or server.
        drop_bad_destination,
        /// Dropped: Teredo source whose mapping is neither the outer address nor a trusted peer's.
        drop_spoofed,
        /// Dropped: Teredo to Teredo through the relay.
        drop_teredo_to_teredo,
        /// Dropped: the peer's queue or the relay's queue budget was full.
        drop_queue_full,
        /// Dropped: the peer never answered four bubbles (unreachable).
        drop_unreachable,
        /// Dropped: no trust procedure started, `max-untrusted-peers` were waiting.
        drop_untrusted_full,
        /// Dropped: no trust procedure started, the sender's client held
        /// `untrusted-peers-per-client`.
        drop_untrusted_share,
        /// ICMPv6 Destination Unreachable sent: address unreachable for
        /// packets to a peer the trust procedure could not reach, or
        /// administratively prohibited for packets the untrusted list refused.
        icmp_unreachable_sent,
        /// ICMPv6 errors not sent: over the rate limit (RFC 4443 §2.4 (f)).
        icmp_rate_limited,
    }
}

/// A peer, trusted or waiting for the trust procedure.
#[derive(Debug)]
struct Peer {
    mapped: SocketAddrV4,
    trusted: bool,
    last_rx: Millis,
    /// A bubble was sent to it (RFC 6081: a bubble from another port may answer it).
    bubbled: bool,
    queue: Vec<Vec<u8>>,
    /// The native client whose packet started its trust procedure.
    owner: Option<ClientKey>,
}

impl Peer {
    fn new(mapped: SocketAddrV4) -> Self {
        Peer { mapped, trusted: false, last_rx: 0, bubbled: false, queue: Vec::new(), owner: None }
    }

    fn trusted_at(&self, now: Millis) -> bool {
        self.trusted && now < self.last_rx.saturating_add(PEER_TRUST_MS)
    }
}

/// The RFC 4380 §5.2.6 bubble budget of one destination (a mapped
/// address and port).
#[derive(Debug, Default, Clone, Copy)]
struct BubbleBudget {
    last: Option<Millis>,
    count: u8,
    window_start: Millis,
}

impl BubbleBudget {
    /// `Some(true)` send now, `Some(false)` wait, `None` the budget is spent.
    fn due(&mut self, now: Millis) -> Option<bool> {
        if self.count >= BUBBLE_MAX {
            if now < self.window_start.saturating_add(BUBBLE_WINDOW_MS) {
                return None;
            }
            self.count = 0;
        }
        if let Some(t) = self.last {
            if now < t.saturating_add(BUBBLE_INTERVAL_MS) {
                return Some(false);
            }
        }
        if self.count == 0 {
            self.window_start = now;
        }
        self.count += 1;
        self.last = Some(now);
        Some(true)
    }
}

/// The Teredo relay core.
#[derive(Debug)]
pub struct Relay {
    cfg: RelayConfig,
    /// Trusted peers: never evicted, refused when full.
    trusted: Table<Ipv6Addr, Peer>,
    /// Peers waiting for the trust procedure, and each client's share.
    pending: Table<Ipv6Addr, Peer>,
    share: FairShare<ClientKey>,
    /// The bubble budget of each mapped address and port.
    budgets: Table<SocketAddrV4, BubbleBudget>,
    /// Indirect bubbles per server address, and all bubbles.
    servers: RateTable<Ipv4Addr>,
    bubbles: Bucket,
    queued_bytes: usize,
    icmp: Bucket,
    out: Out,
    /// Peers whose trust or mapping changed, for the XDP fast path's
    /// mirror (recorded only when [`Relay::set_mirroring`] asked).
    mirror: Option<Vec<Ipv6Addr>>,
    /// Counters.
    pub stats: RelayStats,
}

/// The trust procedure's outcome for a peer's first packet from the IPv6 side.
enum Admit {
    Waiting,
    Refused,
}

impl Relay {
    /// A relay for `cfg`.
    pub fn new(cfg: RelayConfig) -> Self {
        let untrusted = cfg.max_untrusted.max(1);
        Relay {
            trusted: Table::new(cfg.max_peers, PEER_TRUST_MS),
            // The share refuses first: the table never has to evict.
            pending: Table::new(untrusted + 1, PEER_TRUST_MS),
            share: FairShare::new(untrusted, cfg.untrusted_per_client),
            budgets: Table::new(untrusted, BUBBLE_WINDOW_MS),
            servers: RateTable::new(cfg.server_bubble_rate, cfg.server_bubble_rate, SERVER_BUCKETS),
            bubbles: Bucket::full(cfg.bubble_rate, 0),
            cfg,
            queued_bytes: 0,
            icmp: Bucket::full(ICMP_BURST, 0),
            out: Out::new(),
            mirror: None,
            stats: RelayStats::default(),
        }
    }

    /// Record the peers whose trust or mapping changes (for
    /// [`Relay::take_trust_changes`]): the XDP fast path mirrors trusted
    /// peers.
    pub fn set_mirroring(&mut self, on: bool) {
        self.mirror = on.then(Vec::new);
    }

    /// The peers that became trusted or changed mapping since the last
    /// call (a peer may appear more than once). Look each up with
    /// [`Relay::trusted_mapping`]; expiry is found by sweeping.
    pub fn take_trust_changes(&mut self) -> Vec<Ipv6Addr> {
        self.mirror.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn trust_changed(&mut self, peer: Ipv6Addr) {
        if let Some(m) = &mut self.mirror {
            m.push(peer);
        }
    }

    /// The mapping of `peer` while it is trusted at `now` (RFC 4380 §5.4:
    /// packets to it go straight out, packets from that mapping are accepted).
    pub fn trusted_mapping(&self, peer: &Ipv6Addr, now: Millis) -> Option<SocketAddrV4> {
        self.trusted.get(peer, now).filter(|p| p.trusted_at(now)).map(|p| p.mapped)
    }

    /// When the last packet from `peer` arrived (on the slow path or as
    /// [`Relay::seen`] reported).
    pub fn last_rx(&self, peer: &Ipv6Addr, now: Millis) -> Option<Millis> {
        self.trusted.get(peer, now).or_else(|| self.pending.get(peer, now)).map(|p| p.last_rx)
    }

    /// A packet from trusted `peer` arrived at `at` on another path (the
    /// XDP fast path decapsulated it): the peer stays trusted and listed
    /// as if the relay had seen it.
    pub fn seen(&mut self, peer: &Ipv6Addr, at: Millis, now: Millis) {
        let Some(p) = self.trusted.get_mut(peer, now) else { return };
        if !p.trusted || at <= p.last_rx || at > now {
            return;
        }
        p.last_rx = at;
        self.trusted.touch(peer, at);
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    /// Peers in the lists (trusted and waiting).
    pub fn peers(&self) -> usize {
        self.trusted.len() + self.pending.len()
    }

    /// Peers waiting for the trust procedure.
    pub fn untrusted_peers(&self) -> usize {
        self.pending.len()
    }

    /// Expire idle peers (and their queues).
    pub fn tick(&mut self, now: Millis) {
        let mut gone = self.trusted.expire(now) as u64;
        let (share, queued) = (&mut self.share, &mut self.queued_bytes);
        gone += self.pending.expire_with(now, |_, p| forget(share, queued, &p)) as u64;
        self.stats.peers_expired += gone;
        self.budgets.expire(now);
    }

    fn is_teredo(&self, a: &Ipv6Addr) -> bool {
        (u128::from(*a) >> 96) as u32 == self.cfg.prefix_hi32
    }

    /// Take `peer` off the untrusted list (its share and queued bytes given back).
    fn take_pending(&mut self, peer: &Ipv6Addr) -> Option<Peer> {
        let p = self.pending.remove(peer)?;
        forget(&mut self.share, &mut self.queued_bytes, &p);
        Some(p)
    }

    /// Make `p` (mapping known, trusted at `now`) a trusted peer; its queue
    /// goes out to its mapping. A full trusted list refuses to keep it
    /// (counted); the packets still go.
    fn trust(&mut self, addr: Ipv6Addr, mut p: Peer, now: Millis, ob: &mut Outbox) {
        p.trusted = true;
        p.last_rx = now;
        p.owner = None;
        let to = p.mapped;
        for q in p.queue.drain(..) {
            ob.push(Dest::Udp { sock: 0, to }, &q);
            self.stats.dequeued += 1;
            self.stats.to_clients += 1;
        }
        match self.trusted.try_insert(addr, p, now) {
            Ok(()) => {
                self.stats.peers_trusted += 1;
                self.trust_changed(addr);
            }
            Err(_) => self.stats.peers_refused += 1,
        }
    }

    /// A new peer `dst` for a packet from native `src`: on the untrusted
    /// list within the limits, or refused.
    fn admit(&mut self, src: Ipv6Addr, dst: Ipv6Addr, mapped: SocketAddrV4, now: Millis) -> Admit {
        let owner = ClientKey::v6(src, self.cfg.client_prefix_len);
        if !self.share.has_room(&owner) {
            // Expired entries still hold their share until collected.
            self.tick(now);
        }
        match self.share.try_acquire(&owner) {
            Ok(()) => {
                let mut p = Peer::new(mapped);
                p.owner = Some(owner);
                if let Err(p) = self.pending.try_insert(dst, p, now) {
                    // Cannot happen (the share's cap is below the table's); refuse all the same.
                    self.share.release(&owner);
                    drop(p);
                    self.stats.drop_untrusted_full += 1;
                    return Admit::Refused;
                }
                Admit::Waiting
            }
            Err(budget::Refusal::Full) => {
                self.stats.drop_untrusted_full += 1;
                Admit::Refused
            }
            Err(budget::Refusal::ClientShare) => {
                self.stats.drop_untrusted_share += 1;
                Admit::Refused
            }
        }
    }

    /// One bubble to `to` (indirect: to a server), within the global rate
    /// and, for servers, the server's.
    fn bubble(&mut self, to: SocketAddrV4, indirect: bool, dst: Ipv6Addr, now: Millis, ob: &mut Outbox) {
        if indirect && !self.servers.take(to.ip(), now) {
            self.stats.bubbles_limited += 1;
            return;
        }
        if !self.bubbles.take(self.cfg.bubble_rate, self.cfg.bubble_rate, now) {
            self.stats.bubbles_limited += 1;
            return;
        }
        let src = self.cfg.address;
        ob.push_with(Dest::Udp { sock: 0, to }, 40, |b| bubble_payload(src, dst, b));
        self.stats.bubbles_sent += 1;
    }

    /// An IPv6 packet from the IPv6 side, for a Teredo client.
    pub fn on_v6(&mut self, pkt: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.v6_in += 1;
        let Ok(p) = Ipv6Packet::new(pkt) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let pkt = p.as_bytes();
        let (src, dst) = (p.src(), p.dst());
        if crate::is_link_scope(&src, &dst) {
            self.stats.drop_link_scope += 1;
            return;
        }
        if !self.is_teredo(&dst) {
            self.stats.drop_not_teredo_destination += 1;
            return;
        }
        let Some(t) = TeredoAddr::from_ipv6(&dst) else { return };
        if !teredo::is_global_v4(t.server) || !teredo::is_global_v4(*t.mapped.ip()) || t.mapped.port() == 0 {
            self.stats.drop_bad_destination += 1;
            return;
        }
        if let Some(peer) = self.trusted.get(&dst, now) {
            if peer.trusted_at(now) {
                ob.push(Dest::Udp { sock: 0, to: peer.mapped }, pkt);
                self.stats.to_clients += 1;
                return;
            }
            // Trust lapsed: the trust procedure again.
            self.trusted.remove(&dst);
        }
        if self.pending.get(&dst, now).is_none() {
            if let Admit::Refused = self.admit(src, dst, t.mapped, now) {
                // RFC 4443 §3.1 code 1: administratively prohibited (a limit, not the peer).
                self.unreachable(pkt, 1, now, ob);
                return;
            }
        }
        if self.cfg.trust_cone && t.is_cone() {
            if let Some(mut peer) = self.take_pending(&dst) {
                peer.queue.push(pkt.to_vec());
                self.trust(dst, peer, now, ob);
            }
            return;
        }
        let (qmax, budget) = (self.cfg.queue_per_peer, self.cfg.queue_bytes);
        let Some(peer) = self.pending.get_mut(&dst, now) else { return };
        if peer.queue.len() >= qmax || self.queued_bytes + pkt.len() > budget {
            self.stats.drop_queue_full += 1;
        } else {
            peer.queue.push(pkt.to_vec());
            self.queued_bytes += pkt.len();
        }
        let mapped = peer.mapped;
        // The RFC 4380 §5.2.6 budget of the destination, whatever flags name it.
        let due = match self.budgets.get_mut(&mapped, now) {
            Some(b) => b.due(now),
            None => {
                let mut b = BubbleBudget::default();
                let d = b.due(now);
                self.budgets.insert(mapped, b, now);
                d
            }
        };
        match due {
            Some(true) => {
                if let Some(peer) = self.pending.get_mut(&dst, now) {
                    peer.bubbled = true;
                }
                self.bubble(SocketAddrV4::new(t.server, TEREDO_PORT), true, dst, now, ob);
                self.bubble(mapped, false, dst, now, ob);
            }
            Some(false) => {}
            None => {
                // RFC 4380 §5.4.1 (the client's §5.2.6 bubble rules): four
                // bubbles unanswered, the peer is unreachable; its queued
                // packets are dropped and their sources told so (RFC 4443
                // §3.1 code 3, address unreachable), rate-limited.
                let queued = self.pending.get_mut(&dst, now).map(|p| std::mem::take(&mut p.queue)).unwrap_or_default();
                self.stats.drop_unreachable += queued.len() as u64;
                self.queued_bytes -= queued.iter().map(Vec::len).sum::<usize>();
                for q in &queued {
                    self.unreachable(q, 3, now, ob);
                }
            }
        }
    }

    /// An ICMPv6 Destination Unreachable (`code`) about `invoking` to the
    /// IPv6 side, within the rate limit.
    fn unreachable(&mut self, invoking: &[u8], code: u8, now: Millis, ob: &mut Outbox) {
        if !self.icmp.take(ICMP_RATE, ICMP_BURST, now) {
            self.stats.icmp_rate_limited += 1;
            return;
        }
        if xlat::tunnel::icmp6_error(&mut self.out, self.cfg.address, invoking, 1, code) {
            if let Some((_, b)) = self.out.get(0) {
                ob.push(Dest::Tun, b);
                self.stats.icmp_unreachable_sent += 1;
            }
        }
    }

    /// A UDP datagram from a Teredo client.
    pub fn on_udp(&mut self, from: SocketAddrV4, payload: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.udp_in += 1;
        let p = match parse(payload) {
            Ok(p) => p,
            Err(ParseDrop::Truncated | ParseDrop::Malformed) => return self.stats.drop_malformed += 1,
        };
        if p.origin.is_some() {
            self.stats.drop_bad_origin += 1;
            return;
        }
        if is_bubble_with_payload(&p) {
            self.stats.drop_bubble_with_payload += 1;
            return;
        }
        let v = p.ipv6_packet();
        let (src, dst) = (v.src(), v.dst());
        if !self.is_teredo(&src) {
            self.stats.drop_not_teredo_source += 1;
            return;
        }
        let bubble = p.is_bubble();
        let matches = teredo::source_matches(from, &src);
        let accepted = if let Some(peer) = self.trusted.get_mut(&src, now) {
            if peer.mapped == from || matches {
                let changed = !peer.trusted_at(now) || peer.mapped != from;
                peer.mapped = from;
                peer.trusted = true;
                peer.last_rx = now;
                self.trusted.touch(&src, now);
                if changed {
                    self.trust_changed(src);
                }
                true
            } else {
                false
            }
        } else if let Some(peer) = self.pending.get(&src, now) {
            let learn = self.cfg.symmetric_nat
                && bubble
                && peer.bubbled
                && !peer.queue.is_empty()
                && from.ip() == peer.mapped.ip();
            if peer.mapped == from || matches || learn {
                if peer.mapped != from && !matches {
                    // RFC 6081 Symmetric NAT Support: the client's NAT gave its
                    // bubble to us another port than the one its address embeds.
                    self.stats.mappings_learnt += 1;
                }
                if let Some(mut peer) = self.take_pending(&src) {
                    peer.mapped = from;
                    self.trust(src, peer, now, ob);
                }
                true
            } else {
                false
            }
        } else if matches {
            // A new peer trusted from its first packet, while there is room.
            self.trust(src, Peer::new(from), now, ob);
            true
        } else {
            false
        };
        if !accepted {
            self.stats.drop_spoofed += 1;
            return;
        }
        if bubble {
            self.stats.bubbles_received += 1;
            return;
        }
        if self.is_teredo(&dst) {
            self.stats.drop_teredo_to_teredo += 1;
            return;
        }
        if !is_global_v6(&dst) {
            self.stats.drop_bad_destination += 1;
            return;
        }
        ob.push(Dest::Tun, p.ipv6);
        self.stats.to_ipv6 += 1;
    }
}

/// An untrusted peer leaves: its client's share and its queued bytes go back.
fn forget(share: &mut FairShare<ClientKey>, queued: &mut usize, p: &Peer) {
    if let Some(o) = &p.owner {
        share.release(o);
    }
    *queued -= p.queue.iter().map(Vec::len).sum::<usize>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use core::net::Ipv4Addr;
    use xlat::tunnel::teredo::FLAG_CONE;
    use xlat::wire::proto;

    const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    fn client(mapped: &str, flags: u16) -> Ipv6Addr {
        TeredoAddr { server: SERVER, flags, mapped: sa(mapped) }.to_ipv6()
    }

    fn relay() -> Relay {
        Relay::new(RelayConfig::new(a6("2001:db8:ffff::1")))
    }

    #[test]
    fn rfc4380_5_4_1_trust_procedure_queues_then_releases() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let host = a6("2001:db8::1");
        let data = v6(host, c, proto::UDP, &[1, 2, 3, 4, 5, 6, 7, 8]);
        r.on_v6(&data, 0, &mut ob);
        // Indirect bubble to the server, direct bubble to the mapping; the packet waits.
        let sent: Vec<_> = ob.iter().map(|(d, b)| (d, b.to_vec())).collect();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].0, Dest::Udp { sock: 0, to: sa("192.0.2.1:3544") });
        assert_eq!(sent[1].0, Dest::Udp { sock: 0, to: sa("198.51.100.7:40000") });
        let b = teredo::parse(&sent[0].1).unwrap();
        assert!(b.is_bubble());
        assert_eq!((b.ipv6_packet().src(), b.ipv6_packet().dst()), (a6("2001:db8:ffff::1"), c));
        // A second packet within 2 s: queued, no bubble.
        ob.clear();
        r.on_v6(&data, 500, &mut ob);
        assert!(ob.is_empty());
        // The client's direct bubble: trusted, both packets released.
        let mut bb = [0u8; 40];
        teredo::bubble(c, a6("2001:db8:ffff::1"), &mut bb).unwrap();
        r.on_udp(sa("198.51.100.7:40000"), &bb, 1000, &mut ob);
        let sent: Vec<_> = ob.iter().collect();
        assert_eq!(sent.len(), 2);
        assert!(sent.iter().all(|(d, b)| *d == Dest::Udp { sock: 0, to: sa("198.51.100.7:40000") } && *b == &data[..]));
        // Now trusted: straight through.
        ob.clear();
        r.on_v6(&data, 2000, &mut ob);
        assert_eq!(ob.len(), 1);
        assert_eq!((r.stats.peers_trusted, r.stats.dequeued, r.stats.bubbles_sent), (1, 2, 2));
        // After 30 s without a packet from it, trust lapses.
        ob.clear();
        r.on_v6(&data, 1000 + PEER_TRUST_MS + 1, &mut ob);
        assert!(ob.iter().all(|(_, b)| teredo::parse(b).unwrap().is_bubble()));
    }

    #[test]
    fn trust_changes_are_reported_for_the_fast_path_and_seen_keeps_a_peer() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let host = a6("2001:db8::1");
        // Off by default: nothing recorded.
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, host, proto::UDP, &[9; 8]), 0, &mut ob);
        assert!(r.take_trust_changes().is_empty());
        let mut r = relay();
        r.set_mirroring(true);
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, host, proto::UDP, &[9; 8]), 0, &mut ob);
        assert_eq!(r.take_trust_changes(), vec![c]);
        assert_eq!(r.trusted_mapping(&c, 0), Some(sa("198.51.100.7:40000")));
        // Another packet of the same peer changes nothing.
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, host, proto::UDP, &[9; 8]), 10, &mut ob);
        assert!(r.take_trust_changes().is_empty());
        // Seen on the fast path at 25 s: still trusted at 50 s, not at 56 s.
        r.seen(&c, 25_000, 25_100);
        assert_eq!(r.last_rx(&c, 25_100), Some(25_000));
        r.tick(50_000);
        assert_eq!(r.trusted_mapping(&c, 50_000), Some(sa("198.51.100.7:40000")));
        r.tick(56_000);
        assert_eq!(r.trusted_mapping(&c, 56_000), None);
        // A time in the future or before the last packet is ignored.
        let mut r = relay();
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, host, proto::UDP, &[9; 8]), 1_000, &mut ob);
        r.seen(&c, 9_000, 2_000);
        r.seen(&c, 500, 2_000);
        assert_eq!(r.last_rx(&c, 2_000), Some(1_000));
    }

    #[test]
    fn rfc4380_5_4_2_client_to_native() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let host = a6("2001:db8::1");
        let up = v6(c, host, proto::UDP, &[9; 8]);
        r.on_udp(sa("198.51.100.7:40000"), &up, 0, &mut ob);
        assert_eq!(ob.iter().next().unwrap(), (Dest::Tun, &up[..]));
        // The return path is trusted already.
        ob.clear();
        r.on_v6(&v6(host, c, proto::UDP, &[1; 8]), 10, &mut ob);
        assert_eq!(ob.iter().next().unwrap().0, Dest::Udp { sock: 0, to: sa("198.51.100.7:40000") });
        // Spoofed source mapping; non-Teredo source; Teredo to Teredo.
        r.on_udp(sa("198.51.100.8:40000"), &v6(client("198.51.100.9:1", 0), host, proto::UDP, &[0; 8]), 20, &mut ob);
        r.on_udp(sa("198.51.100.8:40000"), &v6(a6("2001:db8::5"), host, proto::UDP, &[0; 8]), 20, &mut ob);
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, client("203.0.113.1:5", 0), proto::UDP, &[0; 8]), 20, &mut ob);
        assert_eq!((r.stats.drop_spoofed, r.stats.drop_not_teredo_source, r.stats.drop_teredo_to_teredo), (1, 1, 1));
    }

    #[test]
    fn rfc6081_symmetric_nat_mapping_is_learnt_from_an_answering_bubble() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        r.on_v6(&v6(a6("2001:db8::1"), c, proto::UDP, &[0; 8]), 0, &mut ob);
        ob.clear();
        let mut bb = [0u8; 40];
        teredo::bubble(c, a6("2001:db8:ffff::1"), &mut bb).unwrap();
        // From another address: refused. From another port of the same address: learnt.
        r.on_udp(sa("198.51.100.99:41234"), &bb, 100, &mut ob);
        assert_eq!(r.stats.drop_spoofed, 1);
        r.on_udp(sa("198.51.100.7:41234"), &bb, 100, &mut ob);
        assert_eq!(r.stats.mappings_learnt, 1);
        assert_eq!(ob.iter().next().unwrap().0, Dest::Udp { sock: 0, to: sa("198.51.100.7:41234") });
        // Off: refused.
        let mut strict = Relay::new(RelayConfig { symmetric_nat: false, ..RelayConfig::new(a6("2001:db8:ffff::1")) });
        strict.on_v6(&v6(a6("2001:db8::1"), c, proto::UDP, &[0; 8]), 0, &mut ob);
        strict.on_udp(sa("198.51.100.7:41234"), &bb, 100, &mut ob);
        assert_eq!(strict.stats.drop_spoofed, 1);
    }

    #[test]
    fn bubbles_are_limited_and_queues_bounded() {
        let mut r = Relay::new(RelayConfig { queue_per_peer: 3, ..RelayConfig::new(a6("2001:db8:ffff::1")) });
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let d = v6(a6("2001:db8::1"), c, proto::UDP, &[0; 8]);
        for i in 0..10u64 {
            r.on_v6(&d, i * 100, &mut ob);
        }
        assert_eq!(r.stats.drop_queue_full, 7);
        // Bubble pairs at 0, 2 s, 4 s, 6 s; then the budget is spent.
        for t in [2_000u64, 4_000, 6_000, 8_000, 10_000] {
            r.on_v6(&d, t, &mut ob);
        }
        assert_eq!(r.stats.bubbles_sent, 8);
        assert!(r.stats.drop_unreachable > 0);
        // Cone peers go straight through when asked to trust the cone bit.
        let mut cone = Relay::new(RelayConfig { trust_cone: true, ..RelayConfig::new(a6("2001:db8:ffff::1")) });
        ob.clear();
        cone.on_v6(&v6(a6("2001:db8::1"), client("198.51.100.7:1", FLAG_CONE), proto::UDP, &[0; 8]), 0, &mut ob);
        assert_eq!(ob.len(), 1);
        assert_eq!(cone.stats.to_clients, 1);
    }

    #[test]
    fn rfc4380_5_4_1_unreachable_peer_gets_icmpv6_address_unreachable() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let host = a6("2001:db8::1");
        let d = v6(host, c, proto::UDP, &[5; 8]);
        // Four bubble pairs (0, 2, 4, 6 s), nobody answers.
        for t in [0u64, 2_000, 4_000, 6_000] {
            r.on_v6(&d, t, &mut ob);
        }
        assert!(ob.iter().all(|(d, _)| d != Dest::Tun), "no error while the trust procedure runs");
        assert_eq!(r.stats.icmp_unreachable_sent, 0);
        // The fifth attempt finds the budget spent: the four queued packets
        // and this one are dropped, each answered with Destination
        // Unreachable, code 3 (address unreachable), from the relay.
        ob.clear();
        r.on_v6(&d, 8_000, &mut ob);
        let errs: Vec<_> = ob.iter().filter(|(d, _)| *d == Dest::Tun).map(|(_, b)| b.to_vec()).collect();
        assert_eq!(errs.len(), 5);
        assert_eq!(r.stats.drop_unreachable, 5);
        assert_eq!(r.stats.icmp_unreachable_sent, 5);
        let e = Ipv6Packet::new(&errs[0]).unwrap();
        assert_eq!((e.src(), e.dst(), e.next_header()), (a6("2001:db8:ffff::1"), host, proto::ICMPV6));
        assert_eq!(&errs[0][40..42], &[1, 3]);
        assert_eq!(&errs[0][48..], &d[..], "the invoking packet is quoted whole");
        assert!(xlat::tunnel::teredo_msg::icmp6_verifies(&e), "checksum");
        // RFC 4443 §2.4 (e): never an error about an ICMPv6 error.
        let mut quoted_err = vec![1u8, 3, 0, 0, 0, 0, 0, 0];
        quoted_err.extend_from_slice(&d);
        ob.clear();
        r.on_v6(&v6(host, c, proto::ICMPV6, &quoted_err), 8_100, &mut ob);
        assert!(ob.is_empty());
        assert_eq!(r.stats.icmp_unreachable_sent, 5);
    }

    #[test]
    fn rfc4443_2_4_f_relay_icmpv6_errors_are_rate_limited() {
        let mut r = Relay::new(RelayConfig { queue_per_peer: 1000, ..RelayConfig::new(a6("2001:db8:ffff::1")) });
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let d = v6(a6("2001:db8::1"), c, proto::UDP, &[5; 8]);
        for t in [0u64, 2_000, 4_000, 6_000] {
            r.on_v6(&d, t, &mut ob);
        }
        // 100 packets within the same millisecond after the budget is spent.
        for _ in 0..100 {
            r.on_v6(&d, 8_000, &mut ob);
        }
        assert_eq!(r.stats.icmp_unreachable_sent, u64::from(ICMP_BURST));
        assert_eq!(r.stats.icmp_rate_limited, 104 - u64::from(ICMP_BURST));
        // A second later the bucket has refilled (to its depth).
        r.on_v6(&d, 9_000, &mut ob);
        assert_eq!(r.stats.icmp_unreachable_sent, u64::from(ICMP_BURST) + 1);
    }

    #[test]
    fn rfc4291_2_5_6_link_local_and_mld_from_the_device_are_link_scope() {
        let mut r = relay();
        let mut ob = Outbox::new();
        r.on_v6(&v6(a6("fe80::1"), a6("ff02::16"), proto::HOPOPT, &[0; 8]), 0, &mut ob);
        r.on_v6(&v6(a6("fe80::1"), client("198.51.100.7:40000", 0), proto::UDP, &[0; 8]), 0, &mut ob);
        assert!(ob.is_empty());
        assert_eq!((r.stats.drop_link_scope, r.stats.drop_not_teredo_destination, r.peers()), (2, 0, 0));
    }

    #[test]
    fn peer_list_is_bounded_and_expires() {
        let mut r = Relay::new(RelayConfig { max_peers: 50, ..RelayConfig::new(a6("2001:db8:ffff::1")) });
        let mut ob = Outbox::new();
        for i in 0..500u32 {
            let m = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 1000 + i as u16);
            let c = TeredoAddr { server: SERVER, flags: 0, mapped: m }.to_ipv6();
            r.on_udp(m, &v6(c, a6("2001:db8::1"), proto::UDP, &[0; 8]), u64::from(i), &mut ob);
        }
        assert_eq!(r.peers(), 50);
        assert_eq!((r.stats.peers_trusted, r.stats.peers_refused), (50, 450), "the first 50 kept, none evicted");
        assert_eq!(r.stats.to_ipv6, 500, "refused peers' packets are still relayed");
        let first = TeredoAddr { server: SERVER, flags: 0, mapped: sa("198.51.100.7:1000") }.to_ipv6();
        assert_eq!(r.trusted_mapping(&first, 500), Some(sa("198.51.100.7:1000")));
        r.tick(500 + PEER_TRUST_MS);
        assert_eq!(r.peers(), 0);
    }

    /// Issue #29 D10: 70,000 spoofed packets (new untrusted peers from the
    /// IPv6 side, new "trusted" ones from spoofed UDP sources) evicted
    /// trusted peers. Neither list evicts: a trusted peer stays, the
    /// flood is refused and counted, and the untrusted list stays within
    /// its cap.
    #[test]
    fn a_flood_of_new_peers_never_evicts_a_trusted_one() {
        let cfg = RelayConfig {
            max_peers: 100,
            max_untrusted: 40,
            queue_per_peer: 1,
            ..RelayConfig::new(a6("2001:db8:ffff::1"))
        };
        let mut r = Relay::new(cfg);
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, a6("2001:db8::1"), proto::UDP, &[9; 8]), 0, &mut ob);
        assert_eq!(r.trusted_mapping(&c, 0), Some(sa("198.51.100.7:40000")));
        let mut bb = [0u8; 40];
        for i in 0..70_000u32 {
            let now = 1 + u64::from(i) / 10; // 7 s
            let m = SocketAddrV4::new(Ipv4Addr::from(0xc633_6500 | (i / 60_000)), 1 + (i % 60_000) as u16);
            let victim = TeredoAddr { server: SERVER, flags: 0, mapped: m }.to_ipv6();
            if i % 2 == 0 {
                // From native sources of many prefixes, to new Teredo peers.
                let src = Ipv6Addr::from(0x2001_0db8_0000_0000u128 << 64 | u128::from(i) << 64 | 1);
                r.on_v6(&v6(src, victim, proto::UDP, &[0; 8]), now, &mut ob);
            } else {
                // Spoofed bubbles whose outer source matches.
                teredo::bubble(victim, a6("2001:db8:ffff::1"), &mut bb).unwrap();
                r.on_udp(m, &bb, now, &mut ob);
            }
            ob.clear();
        }
        let now = 7_001;
        assert_eq!(r.trusted_mapping(&c, now), Some(sa("198.51.100.7:40000")), "still trusted, still listed");
        assert!(r.untrusted_peers() <= 40, "{}", r.untrusted_peers());
        assert!(r.peers() <= 140);
        assert_eq!(r.stats.peers_trusted, 100, "the legitimate peer and 99 of the flood");
        assert_eq!(r.stats.peers_refused, 35_000 - 99);
        assert_eq!(r.stats.drop_untrusted_full, 35_000 - 40, "{:?}", r.stats);
        assert!(r.stats.icmp_unreachable_sent > 0 && r.stats.icmp_rate_limited > 0);
        // The trusted peer's traffic goes straight out.
        r.on_v6(&v6(a6("2001:db8::1"), c, proto::UDP, &[1; 8]), now, &mut ob);
        assert_eq!(ob.iter().next().map(|(d, _)| d), Some(Dest::Udp { sock: 0, to: sa("198.51.100.7:40000") }));
    }

    /// Issue #29 D10: rotating the 16 flag bits of a Teredo address made
    /// each a new peer with a new bubble budget: 20,000 packets in, 40,000
    /// bubbles out to one victim. The RFC 4380 §5.2.6 budget is the
    /// destination's (mapped address and port): four direct bubbles per
    /// 300 s; and indirect bubbles to one server address are limited too.
    #[test]
    fn rotating_flags_buys_no_bubbles_for_one_destination() {
        let cfg = RelayConfig {
            untrusted_per_client: 100_000,
            max_untrusted: 100_000,
            ..RelayConfig::new(a6("2001:db8:ffff::1"))
        };
        let mut r = Relay::new(cfg);
        let mut ob = Outbox::new();
        let mut to_victim = 0;
        let mut to_server = 0;
        for i in 0..20_000u32 {
            let flags = (i % 65_536) as u16 & !xlat::tunnel::teredo::FLAG_CONE;
            let dst = TeredoAddr { server: SERVER, flags, mapped: sa("203.0.113.9:5000") }.to_ipv6();
            // 20 s at 1000 packets a second.
            r.on_v6(&v6(a6("2001:db8::1"), dst, proto::UDP, &[0; 8]), u64::from(i), &mut ob);
            for (d, _) in ob.iter() {
                match d {
                    Dest::Udp { to, .. } if to == sa("203.0.113.9:5000") => to_victim += 1,
                    Dest::Udp { to, .. } if to == sa("192.0.2.1:3544") => to_server += 1,
                    _ => {}
                }
            }
            ob.clear();
        }
        assert_eq!(to_victim, 4, "the RFC budget of the destination");
        assert_eq!(to_server, 4, "indirect bubbles go with the direct ones");
        assert_eq!(r.stats.bubbles_sent, 8);
        // Another destination behind the same server gets its own budget,
        // within the server's rate (100 a second by default).
        let mut served = 0;
        for port in 1..=300u16 {
            let dst =
                TeredoAddr { server: SERVER, flags: 0, mapped: SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 9), port) }
                    .to_ipv6();
            r.on_v6(&v6(a6("2001:db8::2"), dst, proto::UDP, &[0; 8]), 30_000, &mut ob);
            served += ob.iter().filter(|(d, _)| *d == Dest::Udp { sock: 0, to: sa("192.0.2.1:3544") }).count();
            ob.clear();
        }
        assert_eq!(served, 100, "one server address: its rate");
        assert_eq!(r.stats.bubbles_limited, 200);
    }

    #[test]
    fn the_global_bubble_rate_holds() {
        let cfg = RelayConfig { bubble_rate: 10, ..RelayConfig::new(a6("2001:db8:ffff::1")) };
        let mut r = Relay::new(cfg);
        let mut ob = Outbox::new();
        for i in 0..50u8 {
            let server = Ipv4Addr::new(192, 0, 2, 1 + i);
            let dst =
                TeredoAddr { server, flags: 0, mapped: SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, i), 7) }.to_ipv6();
            r.on_v6(&v6(a6("2001:db8::1"), dst, proto::UDP, &[0; 8]), 0, &mut ob);
        }
        assert_eq!((r.stats.bubbles_sent, r.stats.bubbles_limited), (10, 90));
    }

    /// A native client (its /64) starts at most its share of trust
    /// procedures; the rest are refused with ICMPv6 1/1 and counted;
    /// another client is not affected; expiry gives the share back.
    #[test]
    fn a_native_client_gets_its_share_of_untrusted_peers() {
        let cfg = RelayConfig { untrusted_per_client: 5, ..RelayConfig::new(a6("2001:db8:ffff::1")) };
        let mut r = Relay::new(cfg);
        let mut ob = Outbox::new();
        let dst = |port: u16| {
            TeredoAddr { server: SERVER, flags: 0, mapped: SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 1), port) }
                .to_ipv6()
        };
        for i in 0..8u16 {
            // Eight addresses of one /64.
            let src = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 1, i);
            r.on_v6(&v6(src, dst(100 + i), proto::UDP, &[0; 8]), 0, &mut ob);
        }
        assert_eq!((r.untrusted_peers(), r.stats.drop_untrusted_share), (5, 3));
        let errs: Vec<_> = ob.iter().filter(|(d, _)| *d == Dest::Tun).map(|(_, b)| b.to_vec()).collect();
        assert_eq!(errs.len(), 3);
        assert_eq!(&errs[0][40..42], &[1, 1], "administratively prohibited");
        ob.clear();
        r.on_v6(&v6(a6("2001:db8:8::1"), dst(200), proto::UDP, &[0; 8]), 0, &mut ob);
        assert_eq!(r.untrusted_peers(), 6);
        r.on_v6(
            &v6(Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 1, 99), dst(300), proto::UDP, &[0; 8]),
            PEER_TRUST_MS,
            &mut ob,
        );
        assert_eq!(r.stats.drop_untrusted_share, 3, "the expired entries gave their share back");
    }

    /// Issue #29 D10: a peer trusted from its first packet (a bubble whose
    /// outer source matches) was not counted in `peers_trusted`.
    #[test]
    fn a_peer_trusted_from_its_first_bubble_is_counted() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        let mut bb = [0u8; 40];
        teredo::bubble(c, a6("2001:db8:ffff::1"), &mut bb).unwrap();
        r.on_udp(sa("198.51.100.7:40000"), &bb, 0, &mut ob);
        assert_eq!((r.stats.peers_trusted, r.stats.bubbles_received), (1, 1));
        assert_eq!(r.trusted_mapping(&c, 0), Some(sa("198.51.100.7:40000")));
        r.on_udp(sa("198.51.100.7:40000"), &bb, 10, &mut ob);
        assert_eq!(r.stats.peers_trusted, 1, "once");
    }

    #[test]
    fn bad_input_is_dropped_and_counted() {
        let mut r = relay();
        let mut ob = Outbox::new();
        let c = client("198.51.100.7:40000", 0);
        r.on_udp(sa("198.51.100.7:40000"), &[0x60, 0, 0], 0, &mut ob);
        r.on_udp(sa("198.51.100.7:40000"), &[0, 1, 9, 9, 0], 0, &mut ob);
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, a6("2001:db8::1"), proto::NONE, &[1]), 0, &mut ob);
        let mut o = vec![0, 0, 1, 1, 1, 1, 1, 1];
        o.extend_from_slice(&v6(c, a6("2001:db8::1"), proto::UDP, &[0; 8]));
        r.on_udp(sa("198.51.100.7:40000"), &o, 0, &mut ob);
        r.on_v6(&v6(a6("2001:db8::1"), a6("2001:db8::2"), proto::UDP, &[]), 0, &mut ob);
        let private = TeredoAddr { server: SERVER, flags: 0, mapped: sa("10.0.0.1:5") }.to_ipv6();
        r.on_v6(&v6(a6("2001:db8::1"), private, proto::UDP, &[]), 0, &mut ob);
        r.on_udp(sa("198.51.100.7:40000"), &v6(c, a6("ff02::1"), proto::UDP, &[]), 0, &mut ob);
        let s = &r.stats;
        assert_eq!(
            (
                s.drop_malformed,
                s.drop_bubble_with_payload,
                s.drop_bad_origin,
                s.drop_not_teredo_destination,
                s.drop_bad_destination
            ),
            (2, 1, 1, 1, 2)
        );
        assert!(ob.is_empty());
    }
}
