//! Where the ALG may send a request (issue #29 D2): every destination a
//! request would go to — an IP literal (`maddr`, a Route, an IPv4-mapped
//! literal included), a domain route, each address DNS gave, the next
//! Via of a response forwarded without a transaction — is checked before
//! anything is sent. One of the ALG's own listeners is a loop (`482`);
//! the rest is the gateway's one destination policy ([`dstpolicy`], plane
//! `alg`): loopback, unspecified, link-local, multicast, broadcast
//! (limited and directed), the gateway's own addresses and the IPv6
//! addresses that embed them, and `next-hop-deny`, refused (`403`) unless
//! `next-hop-allow` lifts them.

use std::net::{IpAddr, SocketAddr};

use crate::proxy::Alg;
use crate::realm::Target;
use crate::stats::Refusal;

impl Alg {
    /// True when `addr` is one of the ALG's own listeners (either realm,
    /// listen or advertised address, same port).
    pub(crate) fn is_listener(&self, addr: SocketAddr) -> bool {
        let ip = match addr.ip() {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr.ip(), IpAddr::V4),
            v => v,
        };
        [self.cfg.listen_v6, self.cfg.listen_v4].iter().any(|l| {
            let adv = self.cfg.advertised(l.is_ipv6());
            addr.port() == l.port() && (ip == l.ip() || ip == adv)
        })
    }

    /// The destinations a request may go to, in order (those refused are
    /// left out); the first refusal when none is left.
    pub(crate) fn screen_next_hops(&mut self, targets: Vec<Target>) -> Result<Vec<Target>, Refusal> {
        let mut refused = None;
        let ok: Vec<Target> = targets
            .into_iter()
            .filter(|t| match self.next_hop_check(t) {
                Ok(()) => true,
                Err(r) => {
                    refused.get_or_insert(r);
                    false
                }
            })
            .collect();
        match refused {
            Some(r) if ok.is_empty() => Err(r),
            _ => Ok(ok),
        }
    }

    /// Whether the ALG may send to `addr` (a refusal by the policy is
    /// counted and logged there).
    pub(crate) fn destination_check(&self, addr: SocketAddr) -> Result<(), Refusal> {
        if self.is_listener(addr) {
            return Err(Refusal::OwnListener);
        }
        match &self.policy {
            Some(p) => p.check(addr.ip()).map_err(|_| Refusal::NextHop),
            None => Ok(()),
        }
    }

    fn next_hop_check(&self, t: &Target) -> Result<(), Refusal> {
        self.destination_check(t.addr)
    }
}
