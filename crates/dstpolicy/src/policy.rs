//! One plane's destination policy: the gateway's classes and own
//! addresses, the plane's own allow and deny lists, its refusal counters
//! and its rate-limited refusal log.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use xlat::addr::IpPrefix;

use crate::class::{class, Reason};
use crate::embed::Embedding;
use crate::gateway::Gateway;
use crate::ratelog::RateLog;

/// A plane's operator lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lists {
    /// Lifts a built-in class or an own address for the addresses an
    /// entry covers when the entry is at least as narrow as the class (the
    /// address itself for an own or directed broadcast address); when not
    /// empty, every destination outside it is refused.
    pub allow: Vec<IpPrefix>,
    /// Always refused.
    pub deny: Vec<IpPrefix>,
}

/// A refused destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The address as the client named it.
    pub addr: IpAddr,
    /// Why.
    pub reason: Reason,
    /// The IPv4 address it carries that was refused, and how.
    pub via: Option<(Embedding, Ipv4Addr)>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            None => write!(f, "{}", self.reason),
            Some((how, v4)) => write!(f, "{}: it carries {v4} ({how})", self.reason),
        }
    }
}

/// Where one plane may send (see the crate docs).
#[derive(Debug)]
pub struct Policy {
    plane: &'static str,
    gateway: Arc<Gateway>,
    lists: Lists,
    counts: [AtomicU64; Reason::ALL.len()],
    log: RateLog<Reason>,
    fail_closed: bool,
}

impl Policy {
    /// The policy of `plane` (its metric label: `trgw`, `alg`, `trt`,
    /// ...) over `gateway` with the plane's `lists`.
    pub fn new(plane: &'static str, gateway: Arc<Gateway>, lists: Lists) -> Self {
        Policy { plane, gateway, lists, counts: Default::default(), log: RateLog::default(), fail_closed: true }
    }

    /// A policy that judges against the last own-address list read even
    /// while it cannot be re-read, instead of failing closed: for a plane
    /// whose refusal does more harm than the destination (DNS64 answers:
    /// failing closed would answer every name without an AAAA).
    pub fn failing_open(mut self) -> Self {
        self.fail_closed = false;
        self
    }

    /// The plane's name.
    pub fn plane(&self) -> &'static str {
        self.plane
    }

    /// The gateway judged against.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The plane's lists.
    pub fn lists(&self) -> &Lists {
        &self.lists
    }

    fn allowed(&self, ip: IpAddr) -> bool {
        self.lists.allow.iter().any(|p| p.contains(ip))
    }

    /// An allow entry at least `min_len` long covers `ip`.
    fn lifted(&self, ip: IpAddr, min_len: u8) -> bool {
        self.lists.allow.iter().any(|p| p.len() >= min_len && p.contains(ip))
    }

    /// The deny list, the classes, the gateway's own and directed
    /// broadcast addresses, for one address (not looked through).
    fn judge_one(&self, ip: IpAddr) -> Result<(), Reason> {
        if self.lists.deny.iter().any(|p| p.contains(ip)) {
            return Err(Reason::Denied);
        }
        if let Some((r, len)) = class(ip) {
            return if self.lifted(ip, len) { Ok(()) } else { Err(r) };
        }
        let full = if ip.is_ipv4() { 32 } else { 128 };
        if self.gateway.is_own(ip) && !self.lifted(ip, full) {
            return Err(Reason::Own);
        }
        if let IpAddr::V4(a) = ip {
            if self.gateway.is_directed_broadcast(a) && !self.lifted(ip, full) {
                return Err(Reason::DirectedBroadcast);
            }
        }
        Ok(())
    }

    /// Whether the plane may send to `ip`, without counting or logging.
    pub fn judge(&self, ip: IpAddr) -> Result<(), Refusal> {
        let refuse = |reason, via| Err(Refusal { addr: ip, reason, via });
        if self.fail_closed && self.gateway.stale() && !self.allowed(ip) {
            return refuse(Reason::OwnUnknown, None);
        }
        if let IpAddr::V6(a) = ip {
            if let Some(v4) = a.to_ipv4_mapped() {
                // How a dual-stack socket names an IPv4 peer: the IPv4
                // address, judged whole.
                return self.judge(IpAddr::V4(v4)).map_err(|r| Refusal {
                    addr: ip,
                    via: r.via.or(Some((Embedding::Mapped, v4))),
                    ..r
                });
            }
        }
        if let Err(reason) = self.judge_one(ip) {
            return refuse(reason, None);
        }
        if let IpAddr::V6(a) = ip {
            self.gateway.spec().embeddings.each(&a, |how, v4| {
                self.judge_one(IpAddr::V4(v4)).map_err(|reason| Refusal { addr: ip, reason, via: Some((how, v4)) })
            })?;
        }
        if !self.lists.allow.is_empty() && !self.allowed(ip) {
            return refuse(Reason::NotAllowed, None);
        }
        Ok(())
    }

    /// [`Policy::judge`], with a refusal counted and logged (at most a
    /// few lines per interval per reason, with the number suppressed).
    pub fn check(&self, ip: IpAddr) -> Result<(), Refusal> {
        let r = self.judge(ip);
        if let Err(e) = &r {
            self.counts[e.reason.index()].fetch_add(1, Relaxed);
            if let Some(suppressed) = self.log.admit(e.reason, Instant::now()) {
                tracing::warn!(plane = self.plane, destination = %ip, reason = %e, suppressed, "destination refused");
            }
        }
        r
    }

    /// Refusals since start, for every reason (zeros included).
    pub fn refused(&self) -> Vec<(Reason, u64)> {
        Reason::ALL.iter().map(|&r| (r, self.counts[r.index()].load(Relaxed))).collect()
    }

    /// Refusals since start, all reasons.
    pub fn refused_total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::Embeddings;
    use crate::gateway::tests::addr;
    use crate::gateway::Spec;
    use xlat::addr::{Eamt, Ivi, Rfc6052};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn prefixes(l: &[&str]) -> Vec<IpPrefix> {
        l.iter().map(|s| IpPrefix::parse_truncating(s).unwrap()).collect()
    }

    /// A gateway with 192.0.2.1/24 and 2001:db8:1::1/64 on its interfaces,
    /// 198.51.100.1 advertised, NAT64 pool4 203.0.113.0/28, NAT64 prefix
    /// 2001:db8:64::/96, TRT prefix 2001:db8:7::/64 (RFC 6052 /64), IVI
    /// under 2001:dba::/32 and one EAMT entry.
    fn gateway() -> Arc<Gateway> {
        let mut e = Embeddings::new();
        e.add_rfc6052(Rfc6052::new("2001:db8:64::/96".parse().unwrap()).unwrap());
        e.add_rfc6052(Rfc6052::new("2001:db8:7::/64".parse().unwrap()).unwrap());
        e.add_ivi(Ivi::new("2001:dba::/32".parse().unwrap()).unwrap());
        e.add_eamt(Eamt::new(&[("2001:db8:ee::/120".parse().unwrap(), "192.0.2.0/24".parse().unwrap())]).unwrap());
        let g = Gateway::new(Spec { own: prefixes(&["198.51.100.1", "203.0.113.0/28"]), embeddings: e });
        g.apply(Ok(vec![addr("192.0.2.1", 24), addr("2001:db8:1::1", 64), addr("127.0.0.1", 8)]));
        Arc::new(g)
    }

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy::new("test", gateway(), Lists { allow: prefixes(allow), deny: prefixes(deny) })
    }

    fn reason(p: &Policy, a: &str) -> Option<Reason> {
        p.judge(ip(a)).err().map(|r| r.reason)
    }

    #[test]
    fn classes_own_and_directed_broadcast_are_refused() {
        let p = policy(&[], &[]);
        for (a, r) in [
            ("0.0.0.0", Reason::Unspecified),
            ("::", Reason::Unspecified),
            ("127.0.0.1", Reason::Loopback),
            ("127.0.0.2", Reason::Loopback),
            ("::1", Reason::Loopback),
            ("0.1.2.3", Reason::ThisNetwork),
            ("169.254.1.1", Reason::LinkLocal),
            ("fe80::1", Reason::LinkLocal),
            ("224.0.0.1", Reason::Multicast),
            ("ff02::1", Reason::Multicast),
            ("255.255.255.255", Reason::Broadcast),
            ("250.1.1.1", Reason::Broadcast),
            ("192.0.2.255", Reason::DirectedBroadcast),
            ("192.0.2.1", Reason::Own),
            ("2001:db8:1::1", Reason::Own),
            ("198.51.100.1", Reason::Own),
            ("203.0.113.9", Reason::Own),
        ] {
            assert_eq!(reason(&p, a), Some(r), "{a}");
        }
        for a in ["192.0.2.50", "198.51.100.2", "203.0.113.16", "2001:db8:1::2", "10.0.0.1", "2001:db8:9::1"] {
            assert_eq!(p.judge(ip(a)), Ok(()), "{a}");
        }
    }

    #[test]
    fn embedded_addresses_are_judged_by_the_ipv4_address_they_carry() {
        let p = policy(&[], &[]);
        for (a, r, how) in [
            ("::ffff:127.0.0.1", Reason::Loopback, "IPv4-mapped"),
            ("::ffff:192.0.2.1", Reason::Own, "IPv4-mapped"),
            ("::192.0.2.1", Reason::Own, "IPv4-compatible"),
            ("::127.0.0.1", Reason::Loopback, "IPv4-compatible"),
            ("64:ff9b::192.0.2.1", Reason::Own, "translation prefix 64:ff9b::/96"),
            ("64:ff9b::127.0.0.1", Reason::Loopback, "translation prefix 64:ff9b::/96"),
            ("64:ff9b::192.0.2.255", Reason::DirectedBroadcast, "translation prefix 64:ff9b::/96"),
            ("2001:db8:64::203.0.113.1", Reason::Own, "translation prefix 2001:db8:64::/96"),
            ("2001:db8:64::169.254.0.1", Reason::LinkLocal, "translation prefix 2001:db8:64::/96"),
            ("2001:db8:7:0:c6:3364:100::", Reason::Own, "translation prefix 2001:db8:7::/64"),
            ("2002:c000:201::1", Reason::Own, "6to4"),
            ("2002:7f00:1::1", Reason::Loopback, "6to4"),
            ("2002:c000:2ff::1", Reason::DirectedBroadcast, "6to4"),
            ("2001:dba:ffc0:2:1::", Reason::Own, "IVI prefix 2001:dba:ff00::/40"),
            ("2001:db8:ee::1", Reason::Own, "EAMT"),
        ] {
            let e = p.judge(ip(a)).expect_err(a);
            assert_eq!(e.reason, r, "{a}");
            assert!(e.to_string().contains(how), "{a}: {e}");
            assert_eq!(e.addr, ip(a));
        }
        // Good IPv4 addresses inside the same embeddings pass.
        for a in
            ["::ffff:192.0.2.50", "64:ff9b::8.8.8.8", "2001:db8:64::192.0.2.50", "2002:808:808::1", "2001:db8:ee::32"]
        {
            assert_eq!(p.judge(ip(a)), Ok(()), "{a}");
        }
    }

    /// RFC 6052 §2.2: the own address 192.0.2.1 under every prefix length.
    #[test]
    fn translation_prefixes_of_every_length() {
        for (len, embedded) in [
            (32, "2001:db8:c000:201::"),
            (40, "2001:db8:1c0:2:1::"),
            (48, "2001:db8:1:c000:2:100::"),
            (56, "2001:db8:1:c0:0:201::"),
            (64, "2001:db8:1:2:c0:2:100:0"),
            (96, "2001:db8:1:2:3:4:c000:201"),
        ] {
            let prefix = match len {
                32 => "2001:db8::/32",
                40 => "2001:db8:100::/40",
                48 => "2001:db8:1::/48",
                56 => "2001:db8:1::/56",
                64 => "2001:db8:1:2::/64",
                _ => "2001:db8:1:2:3:4::/96",
            };
            let mut e = Embeddings::new();
            e.add_rfc6052(Rfc6052::new(prefix.parse().unwrap()).unwrap());
            let g = Gateway::new(Spec { own: Vec::new(), embeddings: e });
            g.apply(Ok(vec![addr("192.0.2.1", 24)]));
            let p = Policy::new("test", Arc::new(g), Lists::default());
            let r = p.judge(ip(embedded)).expect_err(embedded);
            assert_eq!(r.reason, Reason::Own, "/{len}");
            assert_eq!(r.via.map(|v| v.1), Some("192.0.2.1".parse().unwrap()), "/{len}");
        }
    }

    #[test]
    fn teredo_server_and_obfuscated_client_are_both_judged() {
        let p = policy(&[], &[]);
        // Server 192.0.2.1 (own), client 203.0.113.200 (fine).
        let server_own = "2001:0:c000:201:8000:63bf:3400:8c37";
        let e = p.judge(ip(server_own)).unwrap_err();
        assert_eq!((e.reason, e.via.map(|v| v.0)), (Reason::Own, Some(Embedding::TeredoServer)));
        // Server 65.54.227.120 (fine), client 127.0.0.1 stored complemented (80ff:fffe).
        let client_loopback = "2001:0:4136:e378:8000:63bf:80ff:fffe";
        let e = p.judge(ip(client_loopback)).unwrap_err();
        assert_eq!(
            (e.reason, e.via),
            (Reason::Loopback, Some((Embedding::TeredoClient, "127.0.0.1".parse().unwrap())))
        );
        // RFC 4380's example (server 65.54.227.120, client 192.0.2.45) is
        // the own /24's neighbour, not own: fine.
        assert_eq!(p.judge(ip("2001:0:4136:e378:8000:63bf:3fff:fdd2")), Ok(()));
    }

    #[test]
    fn deny_allow_and_the_narrowness_rule() {
        let p = policy(&["203.0.113.128/25", "fe80::/10", "0.0.0.0/0", "192.0.2.255/32"], &["198.18.0.0/15"]);
        assert_eq!(reason(&p, "198.18.0.1"), Some(Reason::Denied));
        assert_eq!(reason(&p, "64:ff9b::198.18.0.1"), Some(Reason::Denied), "a deny entry holds inside embeddings");
        assert_eq!(p.judge(ip("fe80::5")), Ok(()), "link-local listed on purpose");
        assert_eq!(reason(&p, "127.0.0.1"), Some(Reason::Loopback), "0.0.0.0/0 does not open loopback");
        assert_eq!(reason(&p, "192.0.2.1"), Some(Reason::Own), "nor the gateway's addresses");
        assert_eq!(p.judge(ip("192.0.2.255")), Ok(()), "a directed broadcast listed alone");
        assert_eq!(reason(&p, "2001:db8:9::1"), Some(Reason::NotAllowed));
        let narrow = policy(&["192.0.2.1/32", "127.0.0.0/8", "2001:db8::/32"], &[]);
        assert_eq!(narrow.judge(ip("192.0.2.1")), Ok(()), "an own address listed alone");
        assert_eq!(narrow.judge(ip("127.0.0.5")), Ok(()));
        assert_eq!(reason(&narrow, "198.51.100.1"), Some(Reason::Own));
        assert_eq!(narrow.judge(ip("2001:db8:64::192.0.2.1")), Ok(()), "the embedded own address is lifted too");
        assert_eq!(reason(&narrow, "203.0.113.99"), Some(Reason::NotAllowed));
        // A wider entry than the class does not lift it.
        let wide = policy(&["127.0.0.0/7", "fe80::/9"], &[]);
        assert_eq!(reason(&wide, "127.0.0.1"), Some(Reason::Loopback));
        assert_eq!(reason(&wide, "fe80::1"), Some(Reason::LinkLocal));
    }

    #[test]
    fn fails_closed_while_the_own_addresses_cannot_be_read() {
        let g = gateway();
        let open = Policy::new("open", g.clone(), Lists::default());
        let listed = Policy::new("listed", g.clone(), Lists { allow: prefixes(&["192.0.2.0/24"]), deny: Vec::new() });
        g.apply(Err(std::io::Error::other("Too many open files")));
        assert_eq!(reason(&open, "192.0.2.50"), Some(Reason::OwnUnknown));
        assert_eq!(reason(&open, "2001:db8:9::1"), Some(Reason::OwnUnknown));
        assert_eq!(listed.judge(ip("192.0.2.50")), Ok(()), "explicitly allowed");
        assert_eq!(reason(&listed, "192.0.2.1"), Some(Reason::Own), "still judged against the last list");
        assert_eq!(reason(&listed, "198.51.100.9"), Some(Reason::OwnUnknown));
        let lenient = Policy::new("lenient", g.clone(), Lists::default()).failing_open();
        assert_eq!(lenient.judge(ip("192.0.2.50")), Ok(()), "judged against the last list");
        assert_eq!(reason(&lenient, "192.0.2.1"), Some(Reason::Own));
        g.apply(Ok(vec![addr("192.0.2.1", 24)]));
        assert_eq!(open.judge(ip("192.0.2.50")), Ok(()));
    }

    #[test]
    fn refusals_are_counted_by_reason() {
        let p = policy(&[], &[]);
        assert!(p.check(ip("127.0.0.1")).is_err());
        assert!(p.check(ip("64:ff9b::127.0.0.1")).is_err());
        assert!(p.check(ip("192.0.2.1")).is_err());
        assert!(p.check(ip("192.0.2.50")).is_ok());
        assert!(p.judge(ip("127.0.0.1")).is_err(), "judge does not count");
        let counts = p.refused();
        assert_eq!(counts.len(), Reason::ALL.len());
        assert_eq!(counts[Reason::Loopback.index()], (Reason::Loopback, 2));
        assert_eq!(counts[Reason::Own.index()], (Reason::Own, 1));
        assert_eq!(p.refused_total(), 3);
        assert_eq!(p.plane(), "test");
    }
}
