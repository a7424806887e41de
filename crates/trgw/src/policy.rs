//! Where the relay may send media: the gateway's one destination policy
//! ([`dstpolicy`]) with the `[trgw]` lists.
//!
//! An SDP (or rtpproxy) address names where the relay sends a leg's media.
//! Unchecked, a client could make the relay send packets to itself, to the
//! host's loopback services, to a multicast group or a subnet's broadcast
//! address, or to itself through its own NAT64 (`c=` `64:ff9b::<own IPv4>`).
//! So every signalled address (plane `trgw`), and every source address
//! symmetric latching would learn (plane `trgw-latch`), is checked against
//! the destination policy with `[trgw] media-deny` and `media-allow` as
//! the plane's lists: the built-in classes, the gateway's own and directed
//! broadcast addresses and the IPv6 addresses that embed them are refused
//! unless an entry of `media-allow` at least as narrow as the class names
//! them (`0.0.0.0/0` never opens loopback); a non-empty `media-allow`
//! refuses everything outside it (see the `dstpolicy` crate).
//!
//! The unspecified address itself (`c=IN IP4 0.0.0.0`, `::`) is the old
//! RFC 2543 hold: it sets no destination (nothing is sent until new
//! signalling or latching), so the core accepts it and never uses it as
//! one. IPv4-mapped IPv6 addresses are judged as the IPv4 address they
//! carry.

use std::net::IpAddr;
use std::sync::Arc;

use dstpolicy::{Gateway, Lists, Policy, Refusal, Spec};
use xlat::addr::IpPrefix;

use crate::config::Config;

pub use dstpolicy::Reason;

/// The relay's two uses of the destination policy.
#[derive(Debug, Clone)]
pub struct MediaPolicy {
    signalled: Arc<Policy>,
    latching: Arc<Policy>,
}

/// The `[trgw]` interface addresses (bound and advertised) as own
/// addresses of the gateway.
pub fn own_addresses(cfg: &Config) -> Vec<IpPrefix> {
    let mut own: Vec<IpPrefix> = Vec::new();
    for i in &cfg.interfaces {
        for v6 in [false, true] {
            for a in i.addr(v6).into_iter().chain(i.advertised(v6)) {
                let p = IpPrefix::from(a);
                if !own.contains(&p) {
                    own.push(p);
                }
            }
        }
    }
    own
}

impl MediaPolicy {
    /// The policy of `cfg` over `gateway` (the daemon's, shared by every
    /// plane).
    pub fn new(cfg: &Config, gateway: Arc<Gateway>) -> Self {
        let lists = Lists { allow: cfg.media_allow.clone(), deny: cfg.media_deny.clone() };
        MediaPolicy {
            signalled: Arc::new(Policy::new("trgw", gateway.clone(), lists.clone())),
            latching: Arc::new(Policy::new("trgw-latch", gateway, lists)),
        }
    }

    /// The policy of `cfg` alone (`v6gate trgw`): the `[trgw]` interface
    /// addresses and the host's, read now ([`Gateway::of_host`]; the
    /// relay keeps them current).
    pub fn standalone(cfg: &Config) -> Self {
        MediaPolicy::new(cfg, Gateway::of_host(Spec { own: own_addresses(cfg), ..Spec::default() }))
    }

    /// A policy of `cfg` that knows only the `[trgw]` addresses, not the
    /// host's (tests, fuzzing).
    pub fn without_host(cfg: &Config) -> Self {
        MediaPolicy::new(cfg, Arc::new(Gateway::new(Spec { own: own_addresses(cfg), ..Spec::default() })))
    }

    /// A policy without own addresses or lists (tests, fuzzing).
    pub fn permissive_for_tests() -> Self {
        MediaPolicy::without_host(&Config::default())
    }

    /// The gateway judged against.
    pub fn gateway(&self) -> &Arc<Gateway> {
        self.signalled.gateway()
    }

    /// Whether media may be sent to a signalled `ip` (counted and logged
    /// when refused). The unspecified address is the caller's business
    /// (hold: no destination at all).
    pub fn check(&self, ip: IpAddr) -> Result<(), Refusal> {
        self.signalled.check(ip)
    }

    /// Whether symmetric latching may learn source `ip` (counted and
    /// logged when refused).
    pub fn check_latch(&self, ip: IpAddr) -> bool {
        self.latching.check(ip).is_ok()
    }

    /// Packets whose source latching refused, since start.
    pub fn latch_refused(&self) -> u64 {
        self.latching.refused_total()
    }

    /// The two policies (signalled media, latching), for their counters.
    pub fn policies(&self) -> [&Arc<Policy>; 2] {
        [&self.signalled, &self.latching]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Interface;

    fn policy(allow: &[&str], deny: &[&str]) -> MediaPolicy {
        let mut cfg = Config {
            interfaces: vec![Interface::new(
                "a",
                Some("192.0.2.1".parse().unwrap()),
                Some("2001:db8::1".parse().unwrap()),
            )],
            ..Config::default()
        };
        cfg.interfaces[0].advertise_ipv4 = Some("198.51.100.1".parse().unwrap());
        cfg.media_allow = allow.iter().map(|s| IpPrefix::parse_truncating(s).unwrap()).collect();
        cfg.media_deny = deny.iter().map(|s| IpPrefix::parse_truncating(s).unwrap()).collect();
        MediaPolicy::without_host(&cfg)
    }

    fn reason(p: &MediaPolicy, s: &str) -> Option<Reason> {
        p.check(s.parse().unwrap()).err().map(|r| r.reason)
    }

    #[test]
    fn relay_addresses_classes_and_embeddings_are_refused() {
        let p = policy(&[], &[]);
        for (a, r) in [
            ("127.0.0.1", Reason::Loopback),
            ("::ffff:127.0.0.1", Reason::Loopback),
            ("224.0.0.1", Reason::Multicast),
            ("255.255.255.255", Reason::Broadcast),
            ("fe80::1", Reason::LinkLocal),
            ("192.0.2.1", Reason::Own),
            ("198.51.100.1", Reason::Own),
            ("2001:db8::1", Reason::Own),
            ("64:ff9b::192.0.2.1", Reason::Own),
            ("64:ff9b::198.51.100.1", Reason::Own),
        ] {
            assert_eq!(reason(&p, a), Some(r), "{a}");
        }
        for a in ["192.0.2.50", "2001:db8:6::10", "::ffff:203.0.113.9", "64:ff9b::203.0.113.9"] {
            assert_eq!(reason(&p, a), None, "{a}");
        }
        assert_eq!(p.policies()[0].refused_total(), 10);
    }

    #[test]
    fn media_lists_are_the_planes_lists() {
        let p = policy(&["203.0.113.0/24", "192.0.2.1/32"], &["203.0.113.128/25"]);
        assert_eq!(reason(&p, "203.0.113.5"), None);
        assert_eq!(reason(&p, "203.0.113.200"), Some(Reason::Denied));
        assert_eq!(reason(&p, "192.0.2.1"), None, "an own address listed alone");
        assert_eq!(reason(&p, "10.0.0.1"), Some(Reason::NotAllowed));
    }

    #[test]
    fn latch_refusals_are_counted_apart() {
        let p = policy(&[], &[]);
        assert!(!p.check_latch("127.0.0.1".parse().unwrap()));
        assert!(p.check_latch("203.0.113.1".parse().unwrap()));
        assert_eq!(p.latch_refused(), 1);
        assert_eq!(p.policies()[0].refused_total(), 0);
        assert_eq!(p.policies()[1].plane(), "trgw-latch");
    }
}
