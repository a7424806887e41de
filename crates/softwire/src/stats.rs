//! Outcomes and counters shared by every softwire engine: each packet is
//! emitted or dropped for a [`Reason`] with a stable kebab-case name (the
//! metric label and the status file key), and every drop is counted.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use xlat::tunnel::TunnelError;
use xlat::DropReason;

macro_rules! reasons {
    ($( $(#[$m:meta])* $name:ident = $s:literal, )*) => {
        /// Why a softwire engine dropped a packet.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason { $( $(#[$m])* $name, )* }

        impl Reason {
            /// Every reason.
            pub const ALL: &'static [Reason] = &[ $( Reason::$name, )* ];
            /// Stable name.
            pub const fn as_str(self) -> &'static str {
                match self { $( Reason::$name => $s, )* }
            }
        }
    };
}

reasons! {
    /// Not IPv4 or IPv6, or a header the packet plane refused (truncated,
    /// malformed, bad IPv4 header checksum).
    Malformed = "malformed",
    /// An IPv6 packet to an address that is not this end-point's.
    NotForUs = "not-for-us",
    /// An IPv6 packet for us that is not IPv4-in-IPv6 (nor an ICMPv6
    /// error about one of our tunnel packets); or breaks an RFC 2473 rule.
    NotTunnel = "not-tunnel",
    /// DS-Lite: a softwire from an IPv6 source outside `b4-prefixes`.
    UnknownSoftwire = "unknown-softwire",
    /// lw4o6 / DSTM: the IPv6 source holds no binding (RFC 7596 §6.1).
    NoBinding = "no-binding",
    /// lw4o6: the inner IPv4 source is not the lwB4's address.
    WrongAddress = "wrong-address",
    /// lw4o6: the inner source port (or ICMP identifier) is outside the
    /// lwB4's port set (RFC 7596 §6.1).
    PortSetViolation = "port-set-violation",
    /// An IPv4 packet for an address or port no subscriber holds.
    NoSubscriber = "no-subscriber",
    /// NAT44: an IPv4 packet for a pool address with no mapping.
    NoMapping = "no-mapping",
    /// NAT44: the subscriber holds `max-ports-per-subscriber` ports (RFC 6888 REQ-4).
    QuotaExceeded = "quota-exceeded",
    /// NAT44: no pool port left.
    PoolExhausted = "pool-exhausted",
    /// NAT44: `max-mappings` reached.
    TableFull = "table-full",
    /// A transport protocol the NAT or port-set check cannot handle
    /// (other than TCP, UDP, ICMP), or an ICMP type it does not relay.
    UnsupportedProtocol = "unsupported-protocol",
    /// A fragment held for reassembly (not lost).
    FragmentHeld = "fragment-held",
    /// A fragment refused by the reassembly limits or inconsistent.
    FragmentLimit = "fragment-limit",
    /// Larger than the tunnel MTU and no error may be sent.
    TooBig = "too-big",
    /// Hairpinning is off and the destination is another subscriber.
    HairpinOff = "hairpin-off",
    /// An ICMPv6 error about a tunnel packet, relayed to the IPv4 source
    /// (RFC 2473 §8), or consumed (Packet Too Big without DF).
    IcmpRelayed = "icmp-relayed",
    /// An ICMP error the engine may not answer or translate.
    IcmpDropped = "icmp-dropped",
    /// An IPv4 packet the engine does not route (B4: not from the LAN).
    NoRoute = "no-route",
}

impl From<TunnelError> for Reason {
    fn from(e: TunnelError) -> Self {
        match e {
            TunnelError::Rule(_) => Reason::NotTunnel,
            TunnelError::TooBig { .. } | TunnelError::NoSpace => Reason::TooBig,
            TunnelError::Fragmented => Reason::FragmentLimit,
            _ => Reason::Malformed,
        }
    }
}

impl From<DropReason> for Reason {
    fn from(d: DropReason) -> Self {
        match d {
            DropReason::TooBig => Reason::TooBig,
            DropReason::TunnelRule => Reason::NotTunnel,
            _ => Reason::Malformed,
        }
    }
}

/// What an engine did with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `Out` holds packets to send (forwarded, encapsulated, ICMP errors).
    Emit,
    /// Dropped for this reason (an ICMP error about it may still be in `Out`).
    Drop(Reason),
}

/// Packet and drop counters of one engine.
#[derive(Debug)]
pub struct Counters {
    /// Packets in from the IPv6 (softwire) side.
    pub in6: AtomicU64,
    /// Packets in from the IPv4 side.
    pub in4: AtomicU64,
    /// Packets decapsulated and sent on as IPv4.
    pub decapsulated: AtomicU64,
    /// Packets encapsulated into a softwire.
    pub encapsulated: AtomicU64,
    /// Packets hairpinned from one subscriber to another.
    pub hairpinned: AtomicU64,
    /// ICMP errors this engine originated.
    pub icmp_sent: AtomicU64,
    /// ICMP errors not sent because of the rate limit.
    pub icmp_rate_limited: AtomicU64,
    /// Tunnel packets reassembled.
    pub reassembled: AtomicU64,
    /// B4: TCP SYNs whose MSS option was lowered to fit the tunnel.
    pub mss_clamped: AtomicU64,
    /// B4: TCP SYNs whose options did not parse (sent on untouched).
    pub mss_unparsed: AtomicU64,
    drops: Box<[AtomicU64]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            in6: AtomicU64::new(0),
            in4: AtomicU64::new(0),
            decapsulated: AtomicU64::new(0),
            encapsulated: AtomicU64::new(0),
            hairpinned: AtomicU64::new(0),
            icmp_sent: AtomicU64::new(0),
            icmp_rate_limited: AtomicU64::new(0),
            reassembled: AtomicU64::new(0),
            mss_clamped: AtomicU64::new(0),
            mss_unparsed: AtomicU64::new(0),
            drops: Reason::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// A point-in-time copy of [`Counters`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// See [`Counters::in6`].
    pub in6: u64,
    /// See [`Counters::in4`].
    pub in4: u64,
    /// See [`Counters::decapsulated`].
    pub decapsulated: u64,
    /// See [`Counters::encapsulated`].
    pub encapsulated: u64,
    /// See [`Counters::hairpinned`].
    pub hairpinned: u64,
    /// See [`Counters::icmp_sent`].
    pub icmp_sent: u64,
    /// See [`Counters::icmp_rate_limited`].
    pub icmp_rate_limited: u64,
    /// See [`Counters::reassembled`].
    pub reassembled: u64,
    /// See [`Counters::mss_clamped`].
    pub mss_clamped: u64,
    /// See [`Counters::mss_unparsed`].
    pub mss_unparsed: u64,
    /// Drops by reason name (only reasons that happened).
    pub drops: std::collections::BTreeMap<&'static str, u64>,
}

impl Snapshot {
    /// Drops counted for `r`.
    pub fn drop(&self, r: Reason) -> u64 {
        self.drops.get(r.as_str()).copied().unwrap_or(0)
    }
}

#[inline]
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// Count a drop.
    #[inline]
    pub fn count(&self, r: Reason) {
        let i = Reason::ALL.iter().position(|x| *x == r).unwrap_or(0);
        bump(&self.drops[i]);
    }

    /// Count what `a` says (drops only).
    #[inline]
    pub fn account(&self, a: Action) -> Action {
        if let Action::Drop(r) = a {
            self.count(r);
        }
        a
    }

    /// One packet from a TUN device, by IP version: clears `out`, counts
    /// the arrival per family, hands IPv6 (the softwire side) to `on6` and
    /// IPv4 to `on4`, anything else is malformed; the drop the outcome
    /// names is counted. The `process` of every engine.
    #[inline]
    pub(crate) fn dispatch(
        &self,
        pkt: &[u8],
        out: &mut xlat::Out,
        on6: impl FnOnce(&mut xlat::Out) -> Action,
        on4: impl FnOnce(&mut xlat::Out) -> Action,
    ) -> Action {
        out.clear();
        let a = match pkt.first().map(|b| b >> 4) {
            Some(6) => {
                bump(&self.in6);
                on6(out)
            }
            Some(4) => {
                bump(&self.in4);
                on4(out)
            }
            _ => Action::Drop(Reason::Malformed),
        };
        self.account(a)
    }

    /// A copy.
    pub fn snapshot(&self) -> Snapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            in6: g(&self.in6),
            in4: g(&self.in4),
            decapsulated: g(&self.decapsulated),
            encapsulated: g(&self.encapsulated),
            hairpinned: g(&self.hairpinned),
            icmp_sent: g(&self.icmp_sent),
            icmp_rate_limited: g(&self.icmp_rate_limited),
            reassembled: g(&self.reassembled),
            mss_clamped: g(&self.mss_clamped),
            mss_unparsed: g(&self.mss_unparsed),
            drops: Reason::ALL
                .iter()
                .zip(self.drops.iter())
                .filter(|(_, c)| g(c) > 0)
                .map(|(r, c)| (r.as_str(), g(c)))
                .collect(),
        }
    }
}

/// A token bucket for the ICMP errors an engine originates (RFC 4443
/// §2.4 (f), RFC 1812 §4.3.2.8): `rate` per second, bursts of `rate`.
#[derive(Debug)]
pub struct IcmpLimiter {
    rate: u64,
    state: std::sync::Mutex<(u64, u64)>,
}

impl IcmpLimiter {
    /// `rate` errors per second; 0 sends none.
    pub fn new(rate: u32) -> Self {
        IcmpLimiter { rate: u64::from(rate), state: std::sync::Mutex::new((u64::from(rate), 0)) }
    }

    /// Take a token at time `now` (ns).
    pub fn allow(&self, now: u64) -> bool {
        if self.rate == 0 {
            return false;
        }
        let mut g = function::lock(&self.state);
        let (tokens, last) = &mut *g;
        let add = now.saturating_sub(*last).saturating_mul(self.rate) / 1_000_000_000;
        if add > 0 {
            *tokens = (*tokens + add).min(self.rate);
            *last = now;
        }
        if *tokens > 0 {
            *tokens -= 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_unique_and_counted() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert!(seen.insert(r.as_str()));
        }
        let c = Counters::default();
        c.count(Reason::PortSetViolation);
        c.account(Action::Drop(Reason::PortSetViolation));
        c.account(Action::Emit);
        let s = c.snapshot();
        assert_eq!(s.drop(Reason::PortSetViolation), 2);
        assert_eq!(s.drops.len(), 1);
    }

    #[test]
    fn limiter_refills() {
        let l = IcmpLimiter::new(2);
        assert!(l.allow(0) && l.allow(0));
        assert!(!l.allow(1));
        assert!(l.allow(1_000_000_000));
        assert!(!IcmpLimiter::new(0).allow(5));
    }
}
