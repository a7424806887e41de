//! Where the relay may send media: the media address policy.
//!
//! An SDP (or rtpproxy) address names where the relay sends a leg's media.
//! Unchecked, a client could make the relay send packets to itself, to the
//! host's loopback services or to a multicast group. So every signalled
//! address, and every source address symmetric latching would learn, is
//! checked against:
//!
//! 1. `[trgw] media-deny`: networks always refused.
//! 2. The built-in classes, refused: loopback (127.0.0.0/8, ::1), "this
//!    network" (0.0.0.0/8 other than 0.0.0.0 itself), multicast
//!    (224.0.0.0/4, ff00::/8), the limited broadcast 255.255.255.255 and
//!    the rest of 240.0.0.0/4, link-local (169.254.0.0/16, fe80::/10) and
//!    the relay's own addresses (its `[trgw]` interface addresses, bound
//!    and advertised, and every address on the host's interfaces).
//!    An entry of `media-allow` lifts a class for the addresses it covers
//!    when it is at least as narrow as the class (`fe80::/10` or narrower
//!    for link-local, `127.0.0.0/8` or narrower for loopback, the address
//!    itself for an own address): a wide entry such as `0.0.0.0/0` never
//!    opens loopback.
//! 3. `[trgw] media-allow`, when not empty: only these networks.
//!
//! The unspecified address itself (`c=IN IP4 0.0.0.0`, `::`) is the old
//! RFC 2543 hold: it sets no destination (nothing is sent until new
//! signalling or latching), so it is accepted and never used as one.
//! IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;

use xlat::addr::IpPrefix;

use crate::config::Config;

/// Why a media address was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 127.0.0.0/8 or ::1.
    Loopback,
    /// 0.0.0.0/8 (other than 0.0.0.0).
    ThisNetwork,
    /// 224.0.0.0/4 or ff00::/8.
    Multicast,
    /// 255.255.255.255 or the rest of 240.0.0.0/4.
    Broadcast,
    /// 169.254.0.0/16 or fe80::/10.
    LinkLocal,
    /// An address of the relay or of its host.
    Own,
    /// Inside `[trgw] media-deny`.
    Denied,
    /// Outside a non-empty `[trgw] media-allow`.
    NotAllowed,
}

impl Refusal {
    /// Stable name (log lines, metric labels, error replies).
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Loopback => "loopback",
            Refusal::ThisNetwork => "this-network",
            Refusal::Multicast => "multicast",
            Refusal::Broadcast => "broadcast",
            Refusal::LinkLocal => "link-local",
            Refusal::Own => "relay-own-address",
            Refusal::Denied => "media-deny",
            Refusal::NotAllowed => "not-in-media-allow",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The built-in class of `ip` and the prefix length of that class.
fn class(ip: IpAddr) -> Option<(Refusal, u8)> {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            if o[0] == 127 {
                Some((Refusal::Loopback, 8))
            } else if o[0] == 0 {
                Some((Refusal::ThisNetwork, 8))
            } else if a.is_multicast() {
                Some((Refusal::Multicast, 4))
            } else if a == Ipv4Addr::BROADCAST {
                Some((Refusal::Broadcast, 32))
            } else if o[0] >= 240 {
                Some((Refusal::Broadcast, 4))
            } else if a.is_link_local() {
                Some((Refusal::LinkLocal, 16))
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            if a == Ipv6Addr::LOCALHOST {
                Some((Refusal::Loopback, 128))
            } else if a.is_multicast() {
                Some((Refusal::Multicast, 8))
            } else if a.segments()[0] & 0xffc0 == 0xfe80 {
                Some((Refusal::LinkLocal, 10))
            } else {
                None
            }
        }
    }
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The media address policy of one relay (see the module documentation).
#[derive(Debug)]
pub struct MediaPolicy {
    allow: Vec<IpPrefix>,
    deny: Vec<IpPrefix>,
    /// The `[trgw]` interface addresses (bound and advertised).
    configured: Vec<IpAddr>,
    /// `configured` plus the host's interface addresses (refreshed).
    own: RwLock<Vec<IpAddr>>,
    /// Media sources latching refused.
    latch_refused: AtomicU64,
}

impl MediaPolicy {
    /// The policy of `cfg`, with the host's addresses read now.
    pub fn new(cfg: &Config) -> Self {
        let mut configured = Vec::new();
        for i in &cfg.interfaces {
            for v6 in [false, true] {
                configured.extend(i.addr(v6));
                configured.extend(i.advertised(v6));
            }
        }
        configured.sort();
        configured.dedup();
        let p = MediaPolicy {
            allow: cfg.media_allow.clone(),
            deny: cfg.media_deny.clone(),
            own: RwLock::new(configured.clone()),
            configured,
            latch_refused: AtomicU64::new(0),
        };
        p.refresh_host_addresses();
        p
    }

    /// A policy without own addresses or lists (tests, fuzzing).
    pub fn permissive_for_tests() -> Self {
        MediaPolicy {
            allow: Vec::new(),
            deny: Vec::new(),
            configured: Vec::new(),
            own: RwLock::new(Vec::new()),
            latch_refused: AtomicU64::new(0),
        }
    }

    /// Re-reads the host's interface addresses (the relay's sweeper calls
    /// this periodically: addresses come and go).
    pub fn refresh_host_addresses(&self) {
        let mut own = self.configured.clone();
        match nix::ifaddrs::getifaddrs() {
            Ok(list) => {
                for ifa in list {
                    let Some(a) = ifa.address else { continue };
                    if let Some(s) = a.as_sockaddr_in() {
                        own.push(IpAddr::V4(s.ip()));
                    } else if let Some(s) = a.as_sockaddr_in6() {
                        own.push(IpAddr::V6(s.ip()));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the host's addresses; only [trgw] interface addresses count as own")
            }
        }
        own.sort();
        own.dedup();
        if let Ok(mut g) = self.own.write() {
            *g = own;
        }
    }

    fn allowed_by(&self, ip: IpAddr, min_len: u8) -> bool {
        self.allow.iter().any(|c| c.len() >= min_len && c.contains(ip))
    }

    /// Whether media may be sent to `ip`. The unspecified address is the
    /// caller's business (hold: no destination at all).
    pub fn check(&self, ip: IpAddr) -> Result<(), Refusal> {
        let ip = canonical(ip);
        if self.deny.iter().any(|c| c.contains(ip)) {
            return Err(Refusal::Denied);
        }
        if let Some((r, len)) = class(ip) {
            return if self.allowed_by(ip, len) { Ok(()) } else { Err(r) };
        }
        let own = self.own.read().map(|g| g.contains(&ip)).unwrap_or(false);
        if own {
            let full = if ip.is_ipv4() { 32 } else { 128 };
            return if self.allowed_by(ip, full) { Ok(()) } else { Err(Refusal::Own) };
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|c| c.contains(ip)) {
            return Err(Refusal::NotAllowed);
        }
        Ok(())
    }

    /// [`MediaPolicy::check`] for a source symmetric latching would learn;
    /// refusals are counted ([`MediaPolicy::latch_refused`]).
    pub fn check_latch(&self, ip: IpAddr) -> bool {
        match self.check(ip) {
            Ok(()) => true,
            Err(r) => {
                if self.latch_refused.fetch_add(1, Relaxed).is_multiple_of(1000) {
                    tracing::warn!(source = %ip, reason = %r, "media source refused by the media address policy (not latched)");
                }
                false
            }
        }
    }

    /// Packets whose source latching refused, since start.
    pub fn latch_refused(&self) -> u64 {
        self.latch_refused.load(Relaxed)
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
        MediaPolicy::new(&cfg)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn builtin_classes_are_refused() {
        let p = policy(&[], &[]);
        for (a, r) in [
            ("127.0.0.1", Refusal::Loopback),
            ("127.200.0.9", Refusal::Loopback),
            ("::1", Refusal::Loopback),
            ("::ffff:127.0.0.1", Refusal::Loopback),
            ("0.1.2.3", Refusal::ThisNetwork),
            ("224.0.0.1", Refusal::Multicast),
            ("239.255.255.250", Refusal::Multicast),
            ("ff02::1", Refusal::Multicast),
            ("255.255.255.255", Refusal::Broadcast),
            ("250.1.1.1", Refusal::Broadcast),
            ("169.254.1.1", Refusal::LinkLocal),
            ("fe80::1", Refusal::LinkLocal),
            ("192.0.2.1", Refusal::Own),
            ("198.51.100.1", Refusal::Own),
            ("2001:db8::1", Refusal::Own),
        ] {
            assert_eq!(p.check(ip(a)), Err(r), "{a}");
        }
        for a in ["192.0.2.50", "2001:db8:6::10", "203.0.113.9", "::ffff:203.0.113.9"] {
            assert_eq!(p.check(ip(a)), Ok(()), "{a}");
        }
    }

    #[test]
    fn host_addresses_are_own() {
        let p = policy(&[], &[]);
        // Every host has a loopback address; its other addresses depend on
        // the machine, so check one that getifaddrs reports, if any.
        let host = nix::ifaddrs::getifaddrs()
            .unwrap()
            .filter_map(|i| i.address.and_then(|a| a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip()))))
            .find(|a| class(*a).is_none());
        if let Some(h) = host {
            assert_eq!(p.check(h), Err(Refusal::Own), "{h}");
        }
    }

    #[test]
    fn deny_and_allow_lists() {
        let p = policy(&["203.0.113.0/24", "fe80::/10", "0.0.0.0/0"], &["203.0.113.128/25"]);
        assert_eq!(p.check(ip("203.0.113.5")), Ok(()));
        assert_eq!(p.check(ip("203.0.113.200")), Err(Refusal::Denied));
        assert_eq!(p.check(ip("fe80::5")), Ok(()), "link-local listed on purpose");
        assert_eq!(p.check(ip("127.0.0.1")), Err(Refusal::Loopback), "0.0.0.0/0 does not open loopback");
        assert_eq!(p.check(ip("2001:db8:9::1")), Err(Refusal::NotAllowed));
        let narrow = policy(&["192.0.2.1/32", "127.0.0.0/8"], &[]);
        assert_eq!(narrow.check(ip("192.0.2.1")), Ok(()), "an own address listed alone");
        assert_eq!(narrow.check(ip("127.0.0.5")), Ok(()));
        assert_eq!(narrow.check(ip("198.51.100.1")), Err(Refusal::Own));
    }

    #[test]
    fn latch_refusals_are_counted() {
        let p = policy(&[], &[]);
        assert!(!p.check_latch(ip("127.0.0.1")));
        assert!(p.check_latch(ip("203.0.113.1")));
        assert_eq!(p.latch_refused(), 1);
    }
}
