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
//! The peer list is bounded (least recently used entries evicted,
//! counted) and entries expire 30 s after their last packet.

use core::net::{Ipv6Addr, SocketAddrV4};

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

/// Relay settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The Teredo prefix's first 32 bits.
    pub prefix_hi32: u32,
    /// Source of our bubbles (the relay's IPv6 address; a link-local
    /// address works as well).
    pub address: Ipv6Addr,
    /// Largest peer list.
    pub max_peers: usize,
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
        /// Bubbles received.
        bubbles_received,
        /// Peers trusted after the bubble exchange.
        peers_trusted,
        /// Mappings learnt from a symmetric NAT (RFC 6081).
        mappings_learnt,
        /// Packets released from a queue when the peer became trusted.
        dequeued,
        /// Peers evicted because the list was full.
        peers_evicted,
        /// Peers expired.
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
        /// ICMPv6 Destination Unreachable (address unreachable) sent for
        /// packets to a peer the trust procedure could not reach.
        icmp_unreachable_sent,
        /// ICMPv6 errors not sent: over the rate limit (RFC 4443 §2.4 (f)).
        icmp_rate_limited,
    }
}

#[derive(Debug)]
struct Peer {
    mapped: SocketAddrV4,
    trusted: bool,
    last_rx: Millis,
    last_bubble: Option<Millis>,
    bubbles: u8,
    window_start: Millis,
    queue: Vec<Vec<u8>>,
}

impl Peer {
    fn new(mapped: SocketAddrV4) -> Self {
        Peer { mapped, trusted: false, last_rx: 0, last_bubble: None, bubbles: 0, window_start: 0, queue: Vec::new() }
    }

    fn trusted_at(&self, now: Millis) -> bool {
        self.trusted && now < self.last_rx.saturating_add(PEER_TRUST_MS)
    }

    /// RFC 4380 §5.2.6 bubble budget: `Some(true)` send now, `Some(false)`
    /// wait, `None` the budget is spent.
    fn bubble_due(&mut self, now: Millis) -> Option<bool> {
        if self.bubbles >= BUBBLE_MAX {
            if now < self.window_start.saturating_add(BUBBLE_WINDOW_MS) {
                return None;
            }
            self.bubbles = 0;
        }
        if let Some(t) = self.last_bubble {
            if now < t.saturating_add(BUBBLE_INTERVAL_MS) {
                return Some(false);
            }
        }
        if self.bubbles == 0 {
            self.window_start = now;
        }
        self.bubbles += 1;
        self.last_bubble = Some(now);
        Some(true)
    }
}

/// The Teredo relay core.
#[derive(Debug)]
pub struct Relay {
    cfg: RelayConfig,
    peers: Table<Ipv6Addr, Peer>,
    queued_bytes: usize,
    icmp: Bucket,
    out: Out,
    /// Peers whose trust or mapping changed, for the XDP fast path's
    /// mirror (recorded only when [`Relay::set_mirroring`] asked).
    mirror: Option<Vec<Ipv6Addr>>,
    /// Counters.
    pub stats: RelayStats,
}

impl Relay {
    /// A relay for `cfg`.
    pub fn new(cfg: RelayConfig) -> Self {
        let peers = Table::new(cfg.max_peers, PEER_TRUST_MS);
        Relay {
            cfg,
            peers,
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
        self.peers.get(peer, now).filter(|p| p.trusted_at(now)).map(|p| p.mapped)
    }

    /// When the last packet from `peer` arrived (on the slow path or as
    /// [`Relay::seen`] reported).
    pub fn last_rx(&self, peer: &Ipv6Addr, now: Millis) -> Option<Millis> {
        self.peers.get(peer, now).map(|p| p.last_rx)
    }

    /// A packet from trusted `peer` arrived at `at` on another path (the
    /// XDP fast path decapsulated it): the peer stays trusted and listed
    /// as if the relay had seen it.
    pub fn seen(&mut self, peer: &Ipv6Addr, at: Millis, now: Millis) {
        let Some(p) = self.peers.get_mut(peer, now) else { return };
        if !p.trusted || at <= p.last_rx || at > now {
            return;
        }
        p.last_rx = at;
        self.peers.touch(peer, at);
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.cfg
    }

    /// Peers in the list.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// Expire idle peers (and their queues).
    pub fn tick(&mut self, now: Millis) {
        let before = self.peers.len();
        self.stats.peers_expired += self.peers.expire(now) as u64;
        if self.peers.len() != before {
            self.recount_queue();
        }
    }

    fn recount_queue(&mut self) {
        self.queued_bytes = self.peers.iter(u64::MAX / 2).flat_map(|(_, p)| p.queue.iter()).map(Vec::len).sum();
    }

    fn is_teredo(&self, a: &Ipv6Addr) -> bool {
        (u128::from(*a) >> 96) as u32 == self.cfg.prefix_hi32
    }

    /// An IPv6 packet from the IPv6 side, for a Teredo client.
    pub fn on_v6(&mut self, pkt: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.v6_in += 1;
        let Ok(p) = Ipv6Packet::new(pkt) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let pkt = p.as_bytes();
        let dst = p.dst();
        if crate::is_link_scope(&p.src(), &dst) {
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
        if let Some(peer) = self.peers.get_mut(&dst, now) {
            if peer.trusted_at(now) {
                let to = peer.mapped;
                ob.push(Dest::Udp { sock: 0, to }, pkt);
                self.stats.to_clients += 1;
                return;
            }
        } else {
            if self.peers.insert(dst, Peer::new(t.mapped), now).is_some() {
                self.stats.peers_evicted += 1;
                self.recount_queue();
            }
        }
        let cone = self.cfg.trust_cone && t.is_cone();
        let (qmax, budget) = (self.cfg.queue_per_peer, self.cfg.queue_bytes);
        let Some(peer) = self.peers.get_mut(&dst, now) else { return };
        if cone {
            peer.trusted = true;
            peer.last_rx = now;
            ob.push(Dest::Udp { sock: 0, to: peer.mapped }, pkt);
            self.stats.to_clients += 1;
            self.trust_changed(dst);
            return;
        }
        if peer.queue.len() >= qmax || self.queued_bytes + pkt.len() > budget {
            self.stats.drop_queue_full += 1;
        } else {
            peer.queue.push(pkt.to_vec());
            self.queued_bytes += pkt.len();
        }
        match peer.bubble_due(now) {
            Some(true) => {
                let server = SocketAddrV4::new(t.server, TEREDO_PORT);
                let mapped = peer.mapped;
                let src = self.cfg.address;
                for to in [server, mapped] {
                    ob.push_with(Dest::Udp { sock: 0, to }, 40, |b| bubble_payload(src, dst, b));
                    self.stats.bubbles_sent += 1;
                }
            }
            Some(false) => {}
            None => {
                // RFC 4380 §5.4.1 (the client's §5.2.6 bubble rules): four
                // bubbles unanswered, the peer is unreachable; its queued
                // packets are dropped and their sources told so (RFC 4443
                // §3.1 code 3, address unreachable), rate-limited.
                let queued = std::mem::take(&mut peer.queue);
                self.stats.drop_unreachable += queued.len() as u64;
                self.queued_bytes -= queued.iter().map(Vec::len).sum::<usize>();
                for q in &queued {
                    self.unreachable(q, now, ob);
                }
            }
        }
    }

    /// An ICMPv6 Destination Unreachable (address unreachable) about
    /// `invoking` to the IPv6 side, within the rate limit.
    fn unreachable(&mut self, invoking: &[u8], now: Millis, ob: &mut Outbox) {
        if !self.icmp.take(ICMP_RATE, ICMP_BURST, now) {
            self.stats.icmp_rate_limited += 1;
            return;
        }
        if xlat::tunnel::icmp6_error(&mut self.out, self.cfg.address, invoking, 1, 3) {
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
        let mut changed = false;
        let accepted = match self.peers.get_mut(&src, now) {
            Some(peer) if peer.mapped == from || matches => {
                let newly = !peer.trusted;
                changed = newly || peer.mapped != from;
                peer.mapped = from;
                peer.trusted = true;
                peer.last_rx = now;
                self.stats.peers_trusted += u64::from(newly);
                true
            }
            Some(peer) if self.cfg.symmetric_nat && bubble && peer.last_bubble.is_some() && !peer.queue.is_empty() => {
                // RFC 6081 Symmetric NAT Support: the client's NAT gave its
                // bubble to us another port than the one its address embeds.
                if from.ip() != peer.mapped.ip() {
                    false
                } else {
                    peer.mapped = from;
                    peer.trusted = true;
                    peer.last_rx = now;
                    changed = true;
                    self.stats.mappings_learnt += 1;
                    self.stats.peers_trusted += 1;
                    true
                }
            }
            Some(_) => false,
            None if matches => {
                let mut peer = Peer::new(from);
                peer.trusted = true;
                peer.last_rx = now;
                changed = true;
                if self.peers.insert(src, peer, now).is_some() {
                    self.stats.peers_evicted += 1;
                    self.recount_queue();
                }
                true
            }
            None => false,
        };
        if !accepted {
            self.stats.drop_spoofed += 1;
            return;
        }
        if changed {
            self.trust_changed(src);
        }
        self.peers.touch(&src, now);
        if let Some(peer) = self.peers.get_mut(&src, now) {
            if !peer.queue.is_empty() {
                let to = peer.mapped;
                for q in peer.queue.drain(..) {
                    self.queued_bytes -= q.len();
                    ob.push(Dest::Udp { sock: 0, to }, &q);
                    self.stats.dequeued += 1;
                    self.stats.to_clients += 1;
                }
            }
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
        assert_eq!(r.stats.peers_evicted, 450);
        r.tick(500 + PEER_TRUST_MS);
        assert_eq!(r.peers(), 0);
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
