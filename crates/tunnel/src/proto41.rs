//! 6to4 (RFC 3056, RFC 3068, RFC 3964) and 6rd (RFC 5969): IPv6 carried in
//! IPv4 protocol 41 between a site and the IPv4 addresses its prefix
//! embeds. One core serves both, since 6to4 is 6rd with the prefix
//! `2002::/16` and IPv4MaskLen 0 ([`SixrdDomain::sixto4`]):
//!
//! - [`Mode::Site`] — a 6to4 router or 6rd customer edge (CE): packets of
//!   its site to other sites go straight to the IPv4 address the
//!   destination embeds; packets to native IPv6 go to the configured relay
//!   (6to4) or border relay (6rd BR). RFC 7526 deprecated the 6to4 relay
//!   anycast address 192.88.99.1 (RFC 3068), so there is no default relay:
//!   the operator names one.
//! - [`Mode::Relay`] — a 6to4 relay router or 6rd BR: native IPv6 to sites
//!   and sites to native IPv6, never site to site.
//!
//! Checks, each dropped packet counted by reason ([`Proto41Stats`]):
//! the RFC 3964 §5.1 / RFC 5969 §8 address checks on decapsulation (inner
//! source embeds the outer source — spoofing; forbidden, private, multicast
//! and broadcast embedded addresses), the RFC 6324 loop checks (an outer
//! destination that is this node itself; a relay asked to carry
//! site-to-site traffic; a site asked to forward what is not its own),
//! packets for another local address.
//!
//! I/O-free: the runner passes packets in and sends what the [`Outbox`]
//! holds ([`Dest::Tun`] for IPv6, [`Dest::Raw4`] for IPv4 protocol 41).

use core::net::Ipv4Addr;

use nat64::frag::{Fed, Reassembler};

use xlat::addr::Prefix6;
use xlat::tunnel::sixrd::{self, SixrdDomain, SixrdPolicy};
use xlat::tunnel::sixto4::{self, DecapPolicy};
use xlat::tunnel::{Ipv4Outer, TunnelError};
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::ipv6::Ipv6Packet;
use xlat::{Out, Verdict};

use crate::outbox::{Dest, Outbox};
use crate::table::Millis;

/// How long a partly reassembled outer datagram is kept (RFC 4213 §3.6
/// leaves reassembly to the IPv4 layer; the nat64 reassembler's 2 s
/// FRAGMENT_MIN is too short for a slow link, RFC 791's 15 s too long for
/// a relay's memory).
pub const FRAGMENT_TIMEOUT_MS: Millis = 5_000;
/// Outer datagrams in reassembly at once.
pub const FRAGMENT_SETS: usize = 256;
/// Bytes held for reassembly at once.
pub const FRAGMENT_BYTES: usize = 4 << 20;

/// Which end of the tunnel this node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// 6to4 router / 6rd CE.
    Site,
    /// 6to4 relay router / 6rd BR.
    Relay,
}

/// Which mechanism: the address rules differ slightly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// RFC 3056 6to4 (RFC 3964 rules: RFC 1918 addresses refused by default).
    SixToFour,
    /// RFC 5969 6rd (private IPv4 allowed; native sources only from the BR).
    SixRd,
}

/// A configured protocol-41 tunnel end point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proto41Config {
    /// 6to4 or 6rd.
    pub kind: Kind,
    /// Site or relay.
    pub mode: Mode,
    /// The domain (6to4: [`SixrdDomain::sixto4`]).
    pub domain: SixrdDomain,
    /// This node's IPv4 address (outer source; the address it receives on).
    pub local_v4: Ipv4Addr,
    /// Site mode: the relay (6to4) or BR (6rd) for native IPv6 destinations.
    pub relay: Option<Ipv4Addr>,
    /// Refuse RFC 1918 outer sources and embedded addresses (RFC 3964 §5.1).
    pub reject_private: bool,
    /// Site mode, 6to4: accept native IPv6 sources only from `relay`
    /// (false: from any relay, as return traffic takes whichever relay is
    /// nearest the native host). 6rd always requires the BR (RFC 5969 §8).
    pub native_only_from_relay: bool,
    /// Outer IPv4 header settings (RFC 4213 §3.5).
    pub outer: Ipv4Outer,
}

impl Proto41Config {
    /// Site mode: this site's delegated prefix (6to4: `2002:V4ADDR::/48`).
    pub fn site_prefix(&self) -> Option<Prefix6> {
        self.domain.delegated_prefix(self.local_v4)
    }
}

crate::counters! {
    /// Counters of one protocol-41 core.
    Proto41Stats {
        /// IPv6 packets read from the IPv6 side.
        v6_in,
        /// IPv4 protocol-41 packets read from the raw socket.
        v4_in,
        /// Packets encapsulated and sent over IPv4.
        encapsulated,
        /// Packets decapsulated and sent to the IPv6 side.
        decapsulated,
        /// Dropped: not a well-formed packet (IPv4 or IPv6 header, lengths).
        drop_malformed,
        /// Dropped: outer IPv4 header checksum wrong.
        drop_bad_checksum,
        /// Outer IPv4 fragments taken in for reassembly.
        fragments_in,
        /// Datagrams reassembled from outer IPv4 fragments and decapsulated.
        reassembled,
        /// Dropped: an outer fragment refused by the reassembler (a bound
        /// reached, overlap, inconsistent lengths).
        drop_fragment,
        /// Dropped: partly reassembled datagrams whose time ran out.
        drop_fragment_timeout,
        /// Dropped: link-local or multicast on the IPv6 side (MLD reports,
        /// router and neighbour solicitations the kernel sends on the device).
        drop_link_scope,
        /// Dropped: the inner source embeds another IPv4 address than the outer source (spoofing).
        drop_spoofed,
        /// Dropped: an embedded or outer address is forbidden (0/8, 127/8, multicast, broadcast, private when refused).
        drop_forbidden,
        /// Dropped: the packet would loop (to ourselves, site-to-site through a relay, back to the IPv6 side).
        drop_loop,
        /// Dropped: a native IPv6 source from a sender that is not the relay/BR.
        drop_native_source,
        /// Dropped: native IPv6 destination and no relay configured.
        drop_no_relay,
        /// Dropped: a site's packet whose source is outside the site prefix.
        drop_not_our_source,
        /// Dropped: an inner destination outside this site's prefix.
        drop_not_our_destination,
        /// Dropped: outer IPv4 destination is another local address.
        drop_not_local,
        /// Dropped: another RFC rule (the message is logged at debug level).
        drop_rule,
        /// Dropped: the tunnel packet would exceed 65,535 bytes.
        drop_too_big,
    }
}

/// The 6to4 / 6rd core.
#[derive(Debug)]
pub struct Proto41 {
    cfg: Proto41Config,
    site: Option<Prefix6>,
    out: Out,
    reasm: Reassembler,
    /// Counters.
    pub stats: Proto41Stats,
}

impl Proto41 {
    /// A core for `cfg`.
    pub fn new(cfg: Proto41Config) -> Self {
        let site = if cfg.mode == Mode::Site { cfg.site_prefix() } else { None };
        let reasm = Reassembler::new(FRAGMENT_TIMEOUT_MS * 1_000_000, FRAGMENT_SETS, FRAGMENT_BYTES);
        Proto41 { cfg, site, out: Out::new(), reasm, stats: Proto41Stats::default() }
    }

    /// The configuration.
    pub fn config(&self) -> &Proto41Config {
        &self.cfg
    }

    fn count(&mut self, e: TunnelError) {
        let s = &mut self.stats;
        match e {
            TunnelError::Truncated | TunnelError::Malformed | TunnelError::BadUdpChecksum => s.drop_malformed += 1,
            TunnelError::BadIpv4Checksum => s.drop_bad_checksum += 1,
            TunnelError::Fragmented => s.drop_fragment += 1,
            TunnelError::TooBig { .. } | TunnelError::NoSpace => s.drop_too_big += 1,
            TunnelError::Rule(m) if m.contains("does not embed the outer IPv4 source") => s.drop_spoofed += 1,
            TunnelError::Rule(m) if m.contains("forbidden") => s.drop_forbidden += 1,
            TunnelError::Rule(m) if m.contains("native inner source") || m.contains("not from the BR") => {
                s.drop_native_source += 1
            }
            TunnelError::Rule(m) if m.contains("only a relay router") || m.contains("a CE accepts only") => {
                s.drop_not_our_destination += 1
            }
            TunnelError::Rule(m) => {
                tracing::debug!("protocol 41: dropped: {m}");
                s.drop_rule += 1
            }
        }
    }

    /// An IPv6 packet from the IPv6 side (routed into the tunnel).
    pub fn from_v6(&mut self, pkt: &[u8], ob: &mut Outbox) {
        self.stats.v6_in += 1;
        let p = match Ipv6Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return self.count(e.into()),
        };
        let (src, dst) = (p.src(), p.dst());
        if crate::is_link_scope(&src, &dst) {
            // Not tunnel traffic: what the kernel itself sends on the device.
            self.stats.drop_link_scope += 1;
            return;
        }
        let d = &self.cfg.domain;
        if let Some(site) = self.site {
            // RFC 3964 §5.1 / RFC 6324 §3.2.3: a site encapsulates only its own packets.
            if !site.contains(&src) {
                self.stats.drop_not_our_source += 1;
                return;
            }
        } else if d.contains(&src) {
            // RFC 3964 §5.3 / RFC 6324 §3.2.4: a relay carries native <-> site only.
            self.stats.drop_loop += 1;
            return;
        }
        let outer_dst = match d.v4_of(&dst) {
            Some(v4) if v4 == self.cfg.local_v4 => {
                // RFC 6324 §3.2.1: the destination embeds our own address.
                self.stats.drop_loop += 1;
                return;
            }
            Some(v4) if sixto4::is_forbidden_v4(v4, self.cfg.reject_private) => {
                self.stats.drop_forbidden += 1;
                return;
            }
            Some(v4) => v4,
            None if self.cfg.mode == Mode::Relay => {
                // Native IPv6 destination routed into a relay: it would go
                // straight back to the IPv6 side.
                self.stats.drop_loop += 1;
                return;
            }
            None => match self.cfg.relay {
                Some(r) => r,
                None => {
                    self.stats.drop_no_relay += 1;
                    return;
                }
            },
        };
        match sixto4::encap_to(pkt, self.cfg.local_v4, outer_dst, &self.cfg.outer, &mut self.out) {
            Verdict::Emit => {
                if let Some((_, b)) = self.out.get(0) {
                    ob.push(Dest::Raw4(outer_dst), b);
                    self.stats.encapsulated += 1;
                }
            }
            Verdict::Drop(_) => self.stats.drop_too_big += 1,
        }
    }

    /// Partly reassembled outer datagrams.
    pub fn fragment_sets(&self) -> usize {
        self.reasm.sets()
    }

    /// Expire outer datagrams whose reassembly timed out.
    pub fn tick(&mut self, now: Millis) {
        self.stats.drop_fragment_timeout += self.reasm.expire(now.saturating_mul(1_000_000)) as u64;
    }

    /// An IPv4 protocol-41 packet from the raw socket at `now`. Outer
    /// fragments are reassembled first (bounded: [`FRAGMENT_SETS`],
    /// [`FRAGMENT_BYTES`], [`FRAGMENT_TIMEOUT_MS`]), since a tunnel end
    /// point is the IPv4 destination (RFC 4213 §3.6, RFC 791).
    pub fn from_v4(&mut self, pkt: &[u8], now: Millis, ob: &mut Outbox) {
        self.stats.v4_in += 1;
        if let Ok(ip) = Ipv4Packet::new(pkt) {
            if ip.is_fragment()
                && ip.protocol() == xlat::wire::proto::IPV6
                && ip.checksum_ok()
                && ip.dst() == self.cfg.local_v4
            {
                self.stats.fragments_in += 1;
                match self.reasm.feed_v4(&ip, now.saturating_mul(1_000_000)) {
                    Fed::Held => {}
                    Fed::Refused => self.stats.drop_fragment += 1,
                    Fed::Done(full) => {
                        self.stats.reassembled += 1;
                        self.decap(&full, ob);
                    }
                }
                return;
            }
        }
        self.decap(pkt, ob);
    }

    fn decap(&mut self, pkt: &[u8], ob: &mut Outbox) {
        let relay = self.cfg.mode == Mode::Relay;
        let r = match self.cfg.kind {
            Kind::SixToFour => sixto4::decap(
                pkt,
                &DecapPolicy {
                    reject_private: self.cfg.reject_private,
                    // A relay checks site-to-site itself (a loop), below.
                    strict_dst: !relay,
                    allow_native_src: !relay,
                    allow_native_dst: relay,
                },
            ),
            Kind::SixRd => sixrd::decap(
                pkt,
                &self.cfg.domain,
                &SixrdPolicy {
                    br: if relay { None } else { self.cfg.relay },
                    allow_native_dst: relay,
                    reject_private: self.cfg.reject_private,
                },
            ),
        };
        let d = match r {
            Ok(d) => d,
            Err(e) => return self.count(e),
        };
        if d.outer_dst != self.cfg.local_v4 {
            self.stats.drop_not_local += 1;
            return;
        }
        let inner = match Ipv6Packet::new(d.inner) {
            Ok(p) => p,
            Err(e) => return self.count(e.into()),
        };
        let (src, dst) = (inner.src(), inner.dst());
        let dom = &self.cfg.domain;
        if relay {
            if dom.contains(&dst) {
                // RFC 3964 §5.3 / RFC 6324: site to site through a relay.
                self.stats.drop_loop += 1;
                return;
            }
        } else {
            if !self.site.is_some_and(|s| s.contains(&dst)) {
                self.stats.drop_not_our_destination += 1;
                return;
            }
            if !dom.contains(&src)
                && self.cfg.kind == Kind::SixToFour
                && self.cfg.native_only_from_relay
                && self.cfg.relay != Some(d.outer_src)
            {
                self.stats.drop_native_source += 1;
                return;
            }
        }
        ob.push(Dest::Tun, d.inner);
        self.stats.decapsulated += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv6Addr;
    use xlat::checksum;
    use xlat::wire::ipv6::Ipv6Header;
    use xlat::wire::proto;

    const SITE_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const SITE_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
    const RELAY: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        Ipv6Header {
            traffic_class: 0,
            flow_label: 0,
            payload_len: 8,
            next_header: proto::UDP,
            hop_limit: 64,
            src,
            dst,
        }
        .emit(&mut b);
        b[40..48].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4]);
        b
    }

    fn v4(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let tl = (20 + payload.len()) as u16;
        let mut b = vec![0x45, 0, (tl >> 8) as u8, tl as u8, 0, 0, 0, 0, 64, 41, 0, 0];
        b.extend_from_slice(&src.octets());
        b.extend_from_slice(&dst.octets());
        let c = checksum::finish(checksum::sum(&b));
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b.extend_from_slice(payload);
        b
    }

    fn cfg(kind: Kind, mode: Mode, local: Ipv4Addr, domain: SixrdDomain) -> Proto41Config {
        Proto41Config {
            kind,
            mode,
            domain,
            local_v4: local,
            relay: Some(RELAY),
            reject_private: kind == Kind::SixToFour,
            native_only_from_relay: false,
            outer: Ipv4Outer::default(),
        }
    }

    fn only(ob: &Outbox) -> (Dest, Vec<u8>) {
        assert_eq!(ob.len(), 1, "one packet expected");
        let (d, b) = ob.iter().next().unwrap();
        (d, b.to_vec())
    }

    #[test]
    fn rfc3056_router_site_to_site_and_to_relay() {
        let mut r = Proto41::new(cfg(Kind::SixToFour, Mode::Site, SITE_A, SixrdDomain::sixto4()));
        let a = sixto4::addr(SITE_A, 1, 1);
        let b = sixto4::addr(SITE_B, 2, 2);
        let mut ob = Outbox::new();
        // Site to site: straight to the embedded address.
        let inner = v6(a, b);
        r.from_v6(&inner, &mut ob);
        let (d, pkt) = only(&ob);
        assert_eq!(d, Dest::Raw4(SITE_B));
        let dec = sixto4::decap(&pkt, &DecapPolicy::default()).unwrap();
        assert_eq!((dec.outer_src, dec.outer_dst, dec.inner), (SITE_A, SITE_B, &inner[..]));
        // Native destination: to the configured relay (RFC 7526: no anycast default).
        ob.clear();
        r.from_v6(&v6(a, a6("2001:db8::1")), &mut ob);
        assert_eq!(only(&ob).0, Dest::Raw4(RELAY));
        // Without a relay: counted drop.
        let mut norelay = Proto41::new(Proto41Config {
            relay: None,
            ..cfg(Kind::SixToFour, Mode::Site, SITE_A, SixrdDomain::sixto4())
        });
        ob.clear();
        norelay.from_v6(&v6(a, a6("2001:db8::1")), &mut ob);
        assert!(ob.is_empty());
        assert_eq!(norelay.stats.drop_no_relay, 1);
        // Decapsulation: from site B to us; from the relay with a native source.
        ob.clear();
        r.from_v4(&v4(SITE_B, SITE_A, &v6(b, a)), 0, &mut ob);
        assert_eq!(only(&ob), (Dest::Tun, v6(b, a)));
        ob.clear();
        r.from_v4(&v4(RELAY, SITE_A, &v6(a6("2001:db8::1"), a)), 0, &mut ob);
        assert_eq!(only(&ob).0, Dest::Tun);
        assert_eq!((r.stats.encapsulated, r.stats.decapsulated), (2, 2));
    }

    #[test]
    fn rfc3964_spoofed_forbidden_and_foreign_packets_are_counted() {
        let mut r = Proto41::new(cfg(Kind::SixToFour, Mode::Site, SITE_A, SixrdDomain::sixto4()));
        let a = sixto4::addr(SITE_A, 0, 1);
        let mut ob = Outbox::new();
        // Inner source claims site B but comes from 203.0.113.9.
        r.from_v4(&v4(Ipv4Addr::new(203, 0, 113, 9), SITE_A, &v6(sixto4::addr(SITE_B, 0, 1), a)), 0, &mut ob);
        assert_eq!(r.stats.drop_spoofed, 1);
        // Embedded private address (RFC 1918, refused for 6to4 by default).
        let p = Ipv4Addr::new(10, 1, 1, 1);
        r.from_v4(&v4(p, SITE_A, &v6(sixto4::addr(p, 0, 1), a)), 0, &mut ob);
        assert_eq!(r.stats.drop_forbidden, 1);
        // Encapsulating towards an embedded broadcast / multicast address.
        r.from_v6(&v6(a, sixto4::addr(Ipv4Addr::BROADCAST, 0, 1)), &mut ob);
        r.from_v6(&v6(a, sixto4::addr(Ipv4Addr::new(224, 0, 0, 5), 0, 1)), &mut ob);
        assert_eq!(r.stats.drop_forbidden, 3);
        // A source from outside the site.
        r.from_v6(&v6(sixto4::addr(SITE_B, 0, 1), a6("2001:db8::1")), &mut ob);
        assert_eq!(r.stats.drop_not_our_source, 1);
        // For another site (would make us an open relay), for another local address.
        r.from_v4(&v4(SITE_B, SITE_A, &v6(sixto4::addr(SITE_B, 0, 1), a6("2001:db8::9"))), 0, &mut ob);
        assert_eq!(r.stats.drop_not_our_destination, 1);
        let other = Ipv4Addr::new(192, 0, 2, 99);
        r.from_v4(&v4(SITE_B, other, &v6(sixto4::addr(SITE_B, 0, 1), sixto4::addr(other, 0, 1))), 0, &mut ob);
        assert_eq!(r.stats.drop_not_local, 1);
        // Garbage and a bad checksum.
        r.from_v4(&[0x45, 0, 0], 0, &mut ob);
        let mut bad = v4(SITE_B, SITE_A, &v6(sixto4::addr(SITE_B, 0, 1), a));
        bad[10] ^= 0xff;
        r.from_v4(&bad, 0, &mut ob);
        r.from_v6(&[0x60, 0], &mut ob);
        assert_eq!((r.stats.drop_malformed, r.stats.drop_bad_checksum), (2, 1));
        assert!(ob.is_empty(), "nothing was forwarded");
        // Only native sources from the relay, when asked.
        let mut strict = Proto41::new(Proto41Config {
            native_only_from_relay: true,
            ..cfg(Kind::SixToFour, Mode::Site, SITE_A, SixrdDomain::sixto4())
        });
        strict.from_v4(&v4(SITE_B, SITE_A, &v6(a6("2001:db8::1"), a)), 0, &mut ob);
        assert_eq!(strict.stats.drop_native_source, 1);
    }

    #[test]
    fn rfc6324_loops_are_dropped() {
        let mut relay = Proto41::new(cfg(Kind::SixToFour, Mode::Relay, RELAY, SixrdDomain::sixto4()));
        let mut ob = Outbox::new();
        let a = sixto4::addr(SITE_A, 0, 1);
        let b = sixto4::addr(SITE_B, 0, 1);
        // Native to site: fine.
        relay.from_v6(&v6(a6("2001:db8::1"), a), &mut ob);
        assert_eq!(only(&ob).0, Dest::Raw4(SITE_A));
        // Destination embedding the relay's own address.
        relay.from_v6(&v6(a6("2001:db8::1"), sixto4::addr(RELAY, 0, 1)), &mut ob);
        // Site-to-site through the relay, both directions.
        relay.from_v6(&v6(a, b), &mut ob);
        relay.from_v4(&v4(SITE_A, RELAY, &v6(a, b)), 0, &mut ob);
        // Native destination routed into the relay (back to the IPv6 side).
        relay.from_v6(&v6(a6("2001:db8::1"), a6("2001:db8::2")), &mut ob);
        assert_eq!(relay.stats.drop_loop, 4);
        // Site to native through the relay: decapsulated.
        ob.clear();
        relay.from_v4(&v4(SITE_A, RELAY, &v6(a, a6("2001:db8::1"))), 0, &mut ob);
        assert_eq!(only(&ob), (Dest::Tun, v6(a, a6("2001:db8::1"))));
        // A relay accepts no native sources from sites.
        relay.from_v4(&v4(SITE_A, RELAY, &v6(a6("2001:db8::5"), a6("2001:db8::1"))), 0, &mut ob);
        assert_eq!(relay.stats.drop_native_source, 1);
    }

    #[test]
    fn rfc5969_ce_and_br() {
        let br_v4 = Ipv4Addr::new(10, 0, 0, 1);
        let ce1 = Ipv4Addr::new(10, 100, 100, 1);
        let ce2 = Ipv4Addr::new(10, 7, 7, 7);
        let dom = SixrdDomain::new("2001:db8::/32".parse().unwrap(), 8, br_v4).unwrap();
        let mut ce = Proto41::new(Proto41Config { relay: Some(br_v4), ..cfg(Kind::SixRd, Mode::Site, ce1, dom) });
        let mut br = Proto41::new(cfg(Kind::SixRd, Mode::Relay, br_v4, dom));
        assert_eq!(ce.config().site_prefix().unwrap().to_string(), "2001:db8:6464:100::/56");
        let h1 = dom.delegated_prefix(ce1).unwrap().addr();
        let h2 = Ipv6Addr::from(u128::from(dom.delegated_prefix(ce2).unwrap().addr()) | 5);
        let native = a6("2001:db9::1");
        let mut ob = Outbox::new();
        // CE to CE direct; CE to native via the BR; BR decapsulates to native.
        ce.from_v6(&v6(h1, h2), &mut ob);
        assert_eq!(only(&ob).0, Dest::Raw4(ce2));
        ob.clear();
        ce.from_v6(&v6(h1, native), &mut ob);
        let (d, pkt) = only(&ob);
        assert_eq!(d, Dest::Raw4(br_v4));
        ob.clear();
        br.from_v4(&pkt, 0, &mut ob);
        assert_eq!(only(&ob), (Dest::Tun, v6(h1, native)));
        // BR: native to CE; the CE accepts it because it comes from the BR.
        ob.clear();
        br.from_v6(&v6(native, h1), &mut ob);
        let (d, pkt) = only(&ob);
        assert_eq!(d, Dest::Raw4(ce1));
        ob.clear();
        ce.from_v4(&pkt, 0, &mut ob);
        assert_eq!(only(&ob), (Dest::Tun, v6(native, h1)));
        // A native source from another CE is refused (RFC 5969 §8).
        ob.clear();
        ce.from_v4(&v4(ce2, ce1, &v6(native, h1)), 0, &mut ob);
        assert!(ob.is_empty());
        assert_eq!(ce.stats.drop_native_source, 1);
        // Spoofed 6rd source at the BR.
        br.from_v4(&v4(ce2, br_v4, &v6(h1, native)), 0, &mut ob);
        assert_eq!(br.stats.drop_spoofed, 1);
    }

    /// Split an IPv4 packet (20-byte header) into fragments carrying
    /// `sizes` payload bytes each (the last takes the rest).
    fn fragments(pkt: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
        let payload = &pkt[20..];
        let mut out = Vec::new();
        let mut off = 0usize;
        for (i, &n) in sizes.iter().chain([&usize::MAX]).enumerate() {
            let end = off.saturating_add(n).min(payload.len());
            let last = end == payload.len();
            let mut f = pkt[..20].to_vec();
            f.extend_from_slice(&payload[off..end]);
            let tl = f.len() as u16;
            f[2..4].copy_from_slice(&tl.to_be_bytes());
            let fo = (off / 8) as u16 | if last { 0 } else { 0x2000 };
            f[6..8].copy_from_slice(&fo.to_be_bytes());
            f[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
            f[10..12].copy_from_slice(&[0, 0]);
            let c = checksum::finish(checksum::sum(&f[..20]));
            f[10..12].copy_from_slice(&c.to_be_bytes());
            out.push(f);
            off = end;
            if last || i > 64 {
                break;
            }
        }
        out
    }

    #[test]
    fn rfc4213_3_6_outer_fragments_are_reassembled_then_decapsulated() {
        let mut r = Proto41::new(cfg(Kind::SixToFour, Mode::Site, SITE_A, SixrdDomain::sixto4()));
        let (a, b) = (sixto4::addr(SITE_A, 0, 1), sixto4::addr(SITE_B, 0, 1));
        let mut inner = v6(b, a);
        inner.extend_from_slice(&[7u8; 200]);
        let pl = (inner.len() - 40) as u16;
        inner[4..6].copy_from_slice(&pl.to_be_bytes());
        let whole = v4(SITE_B, SITE_A, &inner);
        let frags = fragments(&whole, &[96, 64]);
        assert_eq!(frags.len(), 3);
        let mut ob = Outbox::new();
        // Out of order: last, first, middle.
        for i in [2, 0, 1] {
            r.from_v4(&frags[i], 10, &mut ob);
        }
        assert_eq!(only(&ob), (Dest::Tun, inner.clone()));
        assert_eq!((r.stats.fragments_in, r.stats.reassembled, r.stats.decapsulated), (3, 1, 1));
        assert_eq!(r.fragment_sets(), 0);
        // Overlapping fragments poison the datagram: refused and counted.
        ob.clear();
        r.from_v4(&frags[0], 20, &mut ob);
        r.from_v4(&fragments(&whole, &[88])[0], 20, &mut ob);
        assert!(ob.is_empty());
        assert_eq!(r.stats.drop_fragment, 1);
        // An incomplete datagram expires after FRAGMENT_TIMEOUT_MS (counted).
        r.from_v4(&frags[1], 30, &mut ob);
        assert_eq!(r.fragment_sets(), 1);
        r.tick(30 + FRAGMENT_TIMEOUT_MS - 1);
        assert_eq!(r.fragment_sets(), 1);
        r.tick(30 + FRAGMENT_TIMEOUT_MS + 1);
        assert_eq!((r.fragment_sets(), r.stats.drop_fragment_timeout), (0, 1));
        // The reassembled packet still passes every decapsulation check.
        let spoof = fragments(&v4(SITE_B, SITE_A, &v6(sixto4::addr(RELAY, 0, 1), a)), &[16]);
        for f in &spoof {
            r.from_v4(f, 40, &mut ob);
        }
        assert!(ob.is_empty());
        assert_eq!(r.stats.drop_spoofed, 1);
    }

    #[test]
    fn rfc4213_3_6_reassembly_is_bounded() {
        let mut r = Proto41::new(cfg(Kind::SixToFour, Mode::Site, SITE_A, SixrdDomain::sixto4()));
        let a = sixto4::addr(SITE_A, 0, 1);
        let mut ob = Outbox::new();
        // FRAGMENT_SETS first fragments of distinct datagrams are held; one more is refused.
        for i in 0..=FRAGMENT_SETS {
            let mut f = fragments(&v4(SITE_B, SITE_A, &v6(sixto4::addr(SITE_B, 0, 1), a)), &[16]).remove(0);
            f[4..6].copy_from_slice(&(i as u16).to_be_bytes());
            f[10..12].copy_from_slice(&[0, 0]);
            let c = checksum::finish(checksum::sum(&f[..20]));
            f[10..12].copy_from_slice(&c.to_be_bytes());
            r.from_v4(&f, 0, &mut ob);
        }
        assert_eq!(r.fragment_sets(), FRAGMENT_SETS);
        assert_eq!(r.stats.drop_fragment, 1);
        assert!(ob.is_empty());
    }

    #[test]
    fn rfc4291_2_5_6_link_local_and_multicast_from_the_device_are_link_scope() {
        let mut ob = Outbox::new();
        for mode in [Mode::Site, Mode::Relay] {
            let mut r = Proto41::new(cfg(Kind::SixToFour, mode, SITE_A, SixrdDomain::sixto4()));
            // An MLDv2 report (fe80:: to ff02::16), a router solicitation
            // from :: to ff02::2, a link-local unicast.
            r.from_v6(&v6(a6("fe80::1"), a6("ff02::16")), &mut ob);
            r.from_v6(&v6(Ipv6Addr::UNSPECIFIED, a6("ff02::2")), &mut ob);
            r.from_v6(&v6(a6("fe80::1"), sixto4::addr(SITE_B, 0, 1)), &mut ob);
            assert!(ob.is_empty());
            assert_eq!(r.stats.drop_link_scope, 3, "{mode:?}");
            assert_eq!((r.stats.drop_not_our_source, r.stats.drop_loop), (0, 0), "{mode:?}: not misclassified");
        }
    }
}
