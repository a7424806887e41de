//! The Teredo server (RFC 4380 §5.3, RFC 5991): stateless except for rate
//! limits. It listens on UDP 3544 at a primary and a secondary IPv4
//! address and
//!
//! - answers Router Solicitations with a Router Advertisement carrying the
//!   Teredo prefix `2001:0:PRIMARY::/64`, the client's mapped address in the
//!   Origin indication and the solicitation's nonce; a solicitation whose
//!   source has the cone bit is answered from the *other* address (the
//!   cone test), so a restricted NAT drops the answer; a solicitation
//!   sent to the secondary address is answered from it (the restricted /
//!   symmetric test compares the two mappings);
//! - relays bubbles (and small ICMPv6 messages) from a Teredo client or a
//!   relay to a client it serves, adding the Origin indication (the
//!   indirect bubbles of RFC 4380 §5.2.6 / §5.4.1);
//! - sends a client's ICMPv6 Echo Request of the connectivity test
//!   (RFC 4380 §5.2.9) to the IPv6 side.
//!
//! Accepted packets follow RFC 4380 §5.3.1's cases: a Router Solicitation
//! from a link-local source; otherwise a Teredo source must match the
//! packet's outer address and port; a non-Teredo source may only reach a
//! Teredo client of this server. Only bubbles and ICMPv6 pass (ICMPv6 up
//! to `max-icmpv6-payload` bytes, so the server is no open relay). Every
//! drop is counted; per-client and global token buckets bound the load.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use xlat::tunnel::teredo::{self, TeredoAddr, PREFIX_HI32};
use xlat::tunnel::teredo_msg::{self, RaParams};
use xlat::wire::proto;

use super::{is_bubble_with_payload, is_global_v6, parse, Bucket, ParseDrop, TEREDO_MTU, TEREDO_PORT};
use crate::outbox::{Dest, Outbox};
use crate::table::{Millis, Table};

/// Server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Primary IPv4 address (embedded in the clients' addresses).
    pub primary: Ipv4Addr,
    /// Secondary IPv4 address (Miredo and Windows expect primary + 1).
    pub secondary: Ipv4Addr,
    /// The Teredo prefix's first 32 bits (`2001:0000`).
    pub prefix_hi32: u32,
    /// MTU advertised in the Router Advertisement.
    pub mtu: u32,
    /// Packets a second one client IPv4 address may make the server handle (0: no limit).
    pub client_rate: u32,
    /// Burst of `client_rate`.
    pub client_burst: u32,
    /// Packets a second the server handles in all (0: no limit).
    pub global_rate: u32,
    /// Clients tracked for `client_rate` (oldest forgotten first).
    pub max_clients: usize,
    /// Largest ICMPv6 payload relayed (RFC 4380 lets servers relay ICMPv6;
    /// Miredo limits it to 88 bytes to stay no open UDP relay).
    pub max_icmpv6_payload: u16,
}

impl ServerConfig {
    /// Defaults for a server at `primary` / `secondary`.
    pub fn new(primary: Ipv4Addr, secondary: Ipv4Addr) -> Self {
        ServerConfig {
            primary,
            secondary,
            prefix_hi32: PREFIX_HI32,
            mtu: TEREDO_MTU,
            client_rate: 20,
            client_burst: 40,
            global_rate: 20_000,
            max_clients: 65_536,
            max_icmpv6_payload: 88,
        }
    }
}

crate::counters! {
    /// Counters of the Teredo server.
    ServerStats {
        /// UDP datagrams received (both addresses).
        received,
        /// Router Solicitations answered.
        router_advertisements,
        /// ... of which cone tests answered from the other address.
        cone_tests,
        /// ... of which received on the secondary address.
        secondary_solicitations,
        /// Bubbles and ICMPv6 relayed over UDP to a client (with Origin indication).
        relayed_to_client,
        /// Echo Requests (and small ICMPv6) sent to the IPv6 side.
        sent_to_ipv6,
        /// Dropped: an indicator or the IPv6 packet cut short.
        drop_truncated,
        /// Dropped: bad indicator (wrong authentication lengths, unknown type, order), not IPv6, bad trailers.
        drop_malformed,
        /// Dropped: an Origin indication in a packet from a client (only servers add them).
        drop_bad_origin,
        /// Dropped: Next Header 59 with a payload.
        drop_bubble_with_payload,
        /// Dropped: neither a bubble nor ICMPv6 (RFC 4380 §5.3.1 case 2).
        drop_not_allowed,
        /// Dropped: ICMPv6 larger than max-icmpv6-payload.
        drop_too_big,
        /// Dropped: the outer source is not a global IPv4 address.
        drop_not_global,
        /// Dropped: Teredo source whose mapping is not the outer address and port.
        drop_spoofed,
        /// Dropped: non-Teredo source to a destination that is not our client.
        drop_not_our_client,
        /// Dropped: destination not global unicast.
        drop_bad_destination,
        /// Dropped: from our own address and port (a loop).
        drop_loop,
        /// Dropped: over the per-client or global rate.
        drop_rate_limited,
    }
}

/// The Teredo server core.
#[derive(Debug)]
pub struct Server {
    cfg: ServerConfig,
    link_local: Ipv6Addr,
    clients: Table<Ipv4Addr, Bucket>,
    global: Bucket,
    /// Counters.
    pub stats: ServerStats,
}

/// How long an idle client's rate state is kept.
const CLIENT_STATE_MS: Millis = 60_000;

impl Server {
    /// A server for `cfg`.
    pub fn new(cfg: ServerConfig) -> Self {
        let link_local = teredo_msg::server_link_local(cfg.primary);
        let clients = Table::new(cfg.max_clients, CLIENT_STATE_MS);
        let global = Bucket::full(cfg.global_rate.max(1), 0);
        Server { cfg, link_local, clients, global, stats: ServerStats::default() }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// Clients whose rate state is held.
    pub fn tracked_clients(&self) -> usize {
        self.clients.len()
    }

    /// Forget idle clients' rate state.
    pub fn tick(&mut self, now: Millis) {
        self.clients.expire(now);
    }

    fn rate_ok(&mut self, ip: Ipv4Addr, now: Millis) -> bool {
        let (rate, burst) = (self.cfg.client_rate, self.cfg.client_burst);
        if !self.global.take(self.cfg.global_rate, self.cfg.global_rate.max(1), now) {
            return false;
        }
        if rate == 0 {
            return true;
        }
        if let Some(b) = self.clients.get_mut(&ip, now) {
            let ok = b.take(rate, burst, now);
            self.clients.touch(&ip, now);
            return ok;
        }
        let mut b = Bucket::full(burst, now);
        let ok = b.take(rate, burst, now);
        self.clients.insert(ip, b, now);
        ok
    }

    /// A UDP datagram received on socket `sock` (0 primary, 1 secondary).
    pub fn on_udp(&mut self, sock: u8, from: SocketAddrV4, payload: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.received += 1;
        let p = match parse(payload) {
            Ok(p) => p,
            Err(ParseDrop::Truncated) => return self.stats.drop_truncated += 1,
            Err(ParseDrop::Malformed) => return self.stats.drop_malformed += 1,
        };
        if p.origin.is_some() {
            self.stats.drop_bad_origin += 1;
            return;
        }
        let v = p.ipv6_packet();
        let (src, dst) = (v.src(), v.dst());
        // Case 2: only bubbles and ICMPv6.
        if is_bubble_with_payload(&p) {
            self.stats.drop_bubble_with_payload += 1;
            return;
        }
        if !p.is_bubble() && v.next_header() != proto::ICMPV6 {
            self.stats.drop_not_allowed += 1;
            return;
        }
        // Case 3: a global IPv4 source.
        if !teredo::is_global_v4(*from.ip()) {
            self.stats.drop_not_global += 1;
            return;
        }
        if (*from.ip() == self.cfg.primary || *from.ip() == self.cfg.secondary) && from.port() == TEREDO_PORT {
            self.stats.drop_loop += 1;
            return;
        }
        if !self.rate_ok(*from.ip(), now) {
            self.stats.drop_rate_limited += 1;
            return;
        }
        // Case 4: a Router Solicitation.
        if teredo_msg::is_router_solicitation(&v) {
            let cone = teredo_msg::ll_is_cone(&src);
            let out_sock = if cone { sock ^ 1 } else { sock };
            let params = RaParams {
                src: self.link_local,
                dst: src,
                prefix_hi32: self.cfg.prefix_hi32,
                server: self.cfg.primary,
                mtu: self.cfg.mtu,
            };
            let nonce = p.auth.map(|a| a.nonce);
            if ob.push_with(Dest::Udp { sock: out_sock, to: from }, 160, |b| {
                teredo_msg::router_advertisement(&params, nonce, from, b).ok()
            }) {
                self.stats.router_advertisements += 1;
                self.stats.cone_tests += u64::from(cone);
                self.stats.secondary_solicitations += u64::from(sock == 1);
            }
            return;
        }
        let is_ours = |a: &Ipv6Addr| {
            TeredoAddr::from_ipv6(a).is_some_and(|t| t.server == self.cfg.primary)
                && (u128::from(*a) >> 96) as u32 == self.cfg.prefix_hi32
        };
        let src_teredo = (u128::from(src) >> 96) as u32 == self.cfg.prefix_hi32;
        if src_teredo {
            // Case 5: the Teredo source must be the sender's mapping.
            if !teredo::source_matches(from, &src) {
                self.stats.drop_spoofed += 1;
                return;
            }
        } else if !is_ours(&dst) {
            // Case 6: a non-Teredo source may only reach our clients.
            self.stats.drop_not_our_client += 1;
            return;
        }
        if dst == teredo_msg::ALL_ROUTERS || dst == self.link_local || !is_global_v6(&dst) {
            self.stats.drop_bad_destination += 1;
            return;
        }
        if !p.is_bubble() && v.payload_len() > self.cfg.max_icmpv6_payload {
            self.stats.drop_too_big += 1;
            return;
        }
        if (u128::from(dst) >> 96) as u32 != self.cfg.prefix_hi32 {
            // The connectivity test's Echo Request to a native IPv6 node.
            ob.push(Dest::Tun, p.ipv6);
            self.stats.sent_to_ipv6 += 1;
            return;
        }
        let Some(t) = TeredoAddr::from_ipv6(&dst) else { return };
        if !teredo::is_global_v4(*t.mapped.ip()) || t.mapped.port() == 0 {
            self.stats.drop_bad_destination += 1;
            return;
        }
        // RFC 4380 §5.3.1: forwarded from the primary address, with an
        // Origin indication when the destination is our client.
        // RFC 6081 trailers (Alternate Address for hairpinning, Random
        // Port) travel on with the packet: they are for the peer.
        let origin = (t.server == self.cfg.primary).then_some(from);
        let tr = p.trailers;
        if ob.push_with(Dest::Udp { sock: 0, to: t.mapped }, p.ipv6.len() + 8 + tr.len(), |b| {
            let n = teredo::encap_udp_payload(None, origin, p.ipv6, b).ok()?;
            b.get_mut(n..n + tr.len())?.copy_from_slice(tr);
            Some(n + tr.len())
        }) {
            self.stats.relayed_to_client += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use xlat::tunnel::teredo::FLAG_CONE;
    use xlat::tunnel::teredo_msg::{RS_SRC_CONE, RS_SRC_RESTRICTED};
    use xlat::wire::ipv6::Ipv6Packet;

    const P: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const S: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

    fn server() -> Server {
        Server::new(ServerConfig::new(P, S))
    }

    fn rs(cone: bool) -> Vec<u8> {
        let mut b = [0u8; 128];
        let n = teredo_msg::router_solicitation(cone, [7; 8], &mut b).unwrap();
        b[..n].to_vec()
    }

    fn client_addr(mapped: &str) -> Ipv6Addr {
        TeredoAddr { server: P, flags: 0, mapped: sa(mapped) }.to_ipv6()
    }

    #[test]
    fn rfc4380_5_3_1_qualification_answers() {
        let mut s = server();
        let mut ob = Outbox::new();
        let nat = sa("198.51.100.7:40000");
        // Restricted probe to the primary: answered from the primary.
        s.on_udp(0, nat, &rs(false), 0, &mut ob);
        let (d, b) = ob.iter().next().unwrap();
        assert_eq!(d, Dest::Udp { sock: 0, to: nat });
        let p = teredo::parse(b).unwrap();
        assert_eq!(p.auth.unwrap().nonce, [7; 8], "nonce echoed");
        assert_eq!(p.origin, Some(nat), "mapping in the Origin indication");
        let v = p.ipv6_packet();
        assert_eq!(v.dst(), RS_SRC_RESTRICTED);
        let ra = teredo_msg::parse_router_advertisement(&v).unwrap();
        assert_eq!(ra.prefix, "2001:0:c000:201::".parse::<Ipv6Addr>().unwrap());
        // Cone probe: answered from the other address.
        ob.clear();
        s.on_udp(0, nat, &rs(true), 0, &mut ob);
        let (d, b) = ob.iter().next().unwrap();
        assert_eq!(d, Dest::Udp { sock: 1, to: nat });
        assert_eq!(teredo::parse(b).unwrap().ipv6_packet().dst(), RS_SRC_CONE);
        // Probe to the secondary: answered from the secondary.
        ob.clear();
        s.on_udp(1, nat, &rs(false), 0, &mut ob);
        assert_eq!(ob.iter().next().unwrap().0, Dest::Udp { sock: 1, to: nat });
        assert_eq!((s.stats.router_advertisements, s.stats.cone_tests, s.stats.secondary_solicitations), (3, 1, 1));
    }

    #[test]
    fn rfc6081_4_and_7_trailers_are_relayed_with_the_indirect_bubble() {
        use xlat::tunnel::teredo_msg::{self, Trailer};
        let mut s = server();
        let mut ob = Outbox::new();
        let dst = client_addr("198.51.100.7:40000");
        let from = sa("203.0.113.9:6000");
        let src = client_addr("203.0.113.9:6000");
        let mut pl = v6(src, dst, proto::NONE, &[]);
        let n = pl.len();
        pl.resize(n + 16, 0);
        let n = teredo_msg::write_trailer(&Trailer::RandomPort(41234), &mut pl, n).unwrap();
        pl.truncate(n);
        s.on_udp(0, from, &pl, 0, &mut ob);
        let (_, b) = ob.iter().next().unwrap();
        let p = teredo::parse(b).unwrap();
        assert_eq!(p.origin, Some(from));
        let got: Vec<_> = teredo_msg::trailers(p.trailers).collect();
        assert_eq!(got, vec![Trailer::RandomPort(41234)]);
    }

    #[test]
    fn rfc4380_5_3_1_indirect_bubble_gets_origin_indication() {
        let mut s = server();
        let mut ob = Outbox::new();
        let client = client_addr("198.51.100.7:40000");
        let relay = sa("203.0.113.5:3544");
        // A relay (non-Teredo source) bubbles our client.
        let bubble = v6("2001:db8::77".parse().unwrap(), client, proto::NONE, &[]);
        s.on_udp(0, relay, &bubble, 0, &mut ob);
        let (d, b) = ob.iter().next().unwrap();
        assert_eq!(d, Dest::Udp { sock: 0, to: sa("198.51.100.7:40000") });
        let p = teredo::parse(b).unwrap();
        assert_eq!(p.origin, Some(relay));
        assert!(p.is_bubble());
        // A client bubbles another client of ours (Teredo source matching its mapping).
        ob.clear();
        let peer = client_addr("203.0.113.9:5000");
        s.on_udp(0, sa("203.0.113.9:5000"), &v6(peer, client, proto::NONE, &[]), 0, &mut ob);
        assert_eq!(teredo::parse(ob.iter().next().unwrap().1).unwrap().origin, Some(sa("203.0.113.9:5000")));
        // A client's Echo Request to a native node goes to the IPv6 side.
        ob.clear();
        let mut e = [0u8; 128];
        let n = teredo_msg::echo_request(peer, "2001:db8::1".parse().unwrap(), 21, 1, 1, &[0; 8], &mut e).unwrap();
        s.on_udp(0, sa("203.0.113.9:5000"), &e[..n], 0, &mut ob);
        assert_eq!(ob.iter().next().unwrap(), (Dest::Tun, &e[..n]));
        assert_eq!((s.stats.relayed_to_client, s.stats.sent_to_ipv6), (2, 1));
    }

    #[test]
    fn bad_input_is_dropped_and_counted() {
        let mut s = server();
        let mut ob = Outbox::new();
        let from = sa("198.51.100.7:40000");
        let client = client_addr("198.51.100.7:40000");
        // Truncated IPv6; authentication indicator whose lengths overrun the packet.
        s.on_udp(0, from, &rs(false)[..30], 0, &mut ob);
        s.on_udp(0, from, &[0, 1, 200, 200, 1, 2, 3], 0, &mut ob);
        assert_eq!(s.stats.drop_truncated, 2);
        // Unknown indicator type; bad trailer.
        let mut bad = vec![0, 9, 0, 0];
        bad.extend_from_slice(&rs(false)[13..]);
        s.on_udp(0, from, &bad, 0, &mut ob);
        let mut tr = rs(false);
        tr.extend_from_slice(&[1, 9]);
        s.on_udp(0, from, &tr, 0, &mut ob);
        assert_eq!(s.stats.drop_malformed, 2);
        // Origin indication from a client.
        let mut o = vec![0, 0, 1, 1, 1, 1, 1, 1];
        o.extend_from_slice(&rs(false)[13..]);
        s.on_udp(0, from, &o, 0, &mut ob);
        assert_eq!(s.stats.drop_bad_origin, 1);
        // Bubble with payload; UDP (not allowed through a server).
        s.on_udp(0, from, &v6(client, client_addr("203.0.113.9:5"), proto::NONE, &[1, 2, 3]), 0, &mut ob);
        s.on_udp(0, from, &v6(client, client_addr("203.0.113.9:5"), proto::UDP, &[0; 8]), 0, &mut ob);
        assert_eq!((s.stats.drop_bubble_with_payload, s.stats.drop_not_allowed), (1, 1));
        // Spoofed Teredo source; private sender; a non-Teredo source to someone else's client.
        s.on_udp(0, sa("198.51.100.8:40000"), &v6(client, client_addr("203.0.113.9:5"), proto::NONE, &[]), 0, &mut ob);
        s.on_udp(0, sa("10.0.0.1:5"), &rs(false), 0, &mut ob);
        let other = TeredoAddr { server: Ipv4Addr::new(203, 0, 113, 200), flags: FLAG_CONE, mapped: from }.to_ipv6();
        s.on_udp(0, sa("203.0.113.5:3544"), &v6("2001:db8::7".parse().unwrap(), other, proto::NONE, &[]), 0, &mut ob);
        assert_eq!((s.stats.drop_spoofed, s.stats.drop_not_global, s.stats.drop_not_our_client), (1, 1, 1));
        // Big ICMPv6; our own address as sender (loop).
        s.on_udp(0, from, &v6(client, "2001:db8::1".parse().unwrap(), proto::ICMPV6, &[0; 200]), 0, &mut ob);
        s.on_udp(0, SocketAddrV4::new(S, 3544), &rs(false), 0, &mut ob);
        assert_eq!((s.stats.drop_too_big, s.stats.drop_loop), (1, 1));
        assert!(ob.is_empty(), "nothing went out");
        assert!(Ipv6Packet::new(&rs(false)[13..]).is_ok());
    }

    #[test]
    fn solicitation_floods_are_rate_limited_per_client_and_bounded() {
        let mut s =
            Server::new(ServerConfig { client_rate: 5, client_burst: 5, max_clients: 100, ..ServerConfig::new(P, S) });
        let mut ob = Outbox::new();
        for _ in 0..50 {
            s.on_udp(0, sa("198.51.100.7:1"), &rs(false), 0, &mut ob);
        }
        assert_eq!((s.stats.router_advertisements, s.stats.drop_rate_limited), (5, 45));
        // One second later five more.
        for _ in 0..10 {
            s.on_udp(0, sa("198.51.100.7:1"), &rs(false), 1000, &mut ob);
        }
        assert_eq!(s.stats.router_advertisements, 10);
        // Many sources: the rate table stays bounded and expires.
        for i in 0..1000u32 {
            s.on_udp(0, SocketAddrV4::new(Ipv4Addr::from(0xc633_6400 + i), 1), &rs(false), 2000, &mut ob);
        }
        assert!(s.tracked_clients() <= 100);
        s.tick(2000 + CLIENT_STATE_MS);
        assert_eq!(s.tracked_clients(), 0);
    }
}
