//! Why a destination is refused, and the built-in classes refused by
//! default (whatever the gateway's addresses).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a destination was refused: a built-in class, the gateway itself,
/// an operator list, or an own-address list that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// 0.0.0.0 or `::` (no destination at all).
    Unspecified,
    /// 127.0.0.0/8 or ::1.
    Loopback,
    /// 0.0.0.0/8 other than 0.0.0.0 ("this network", RFC 1122).
    ThisNetwork,
    /// 169.254.0.0/16 or fe80::/10.
    LinkLocal,
    /// 224.0.0.0/4 or ff00::/8.
    Multicast,
    /// 255.255.255.255 or the rest of 240.0.0.0/4.
    Broadcast,
    /// The broadcast address of an IPv4 subnet on the host's interfaces.
    DirectedBroadcast,
    /// An address of the gateway (the host's interfaces, configured and
    /// advertised addresses, NAT64 pools).
    Own,
    /// Inside the plane's deny list.
    Denied,
    /// Outside the plane's non-empty allow list.
    NotAllowed,
    /// The own-address list could not be re-read: only allow-listed
    /// destinations pass until it can (fail closed).
    OwnUnknown,
}

impl Reason {
    /// Every reason, in [`Reason::index`] order.
    pub const ALL: [Reason; 11] = [
        Reason::Unspecified,
        Reason::Loopback,
        Reason::ThisNetwork,
        Reason::LinkLocal,
        Reason::Multicast,
        Reason::Broadcast,
        Reason::DirectedBroadcast,
        Reason::Own,
        Reason::Denied,
        Reason::NotAllowed,
        Reason::OwnUnknown,
    ];

    /// Stable name: metric label, log field, error text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Unspecified => "unspecified",
            Reason::Loopback => "loopback",
            Reason::ThisNetwork => "this-network",
            Reason::LinkLocal => "link-local",
            Reason::Multicast => "multicast",
            Reason::Broadcast => "broadcast",
            Reason::DirectedBroadcast => "directed-broadcast",
            Reason::Own => "own-address",
            Reason::Denied => "deny-list",
            Reason::NotAllowed => "not-in-allow-list",
            Reason::OwnUnknown => "own-addresses-unknown",
        }
    }

    /// Position in [`Reason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The built-in class of `ip` and the prefix length of that class (an
/// allow entry must be at least that long to lift it). IPv4-mapped IPv6
/// addresses are not looked through here ([`crate::embed`] does).
pub fn class(ip: IpAddr) -> Option<(Reason, u8)> {
    match ip {
        IpAddr::V4(a) => class_v4(a),
        IpAddr::V6(a) => class_v6(a),
    }
}

fn class_v4(a: Ipv4Addr) -> Option<(Reason, u8)> {
    let o = a.octets();
    if a.is_unspecified() {
        Some((Reason::Unspecified, 32))
    } else if o[0] == 0 {
        Some((Reason::ThisNetwork, 8))
    } else if o[0] == 127 {
        Some((Reason::Loopback, 8))
    } else if a.is_link_local() {
        Some((Reason::LinkLocal, 16))
    } else if a.is_multicast() {
        Some((Reason::Multicast, 4))
    } else if a == Ipv4Addr::BROADCAST {
        Some((Reason::Broadcast, 32))
    } else if o[0] >= 240 {
        Some((Reason::Broadcast, 4))
    } else {
        None
    }
}

fn class_v6(a: Ipv6Addr) -> Option<(Reason, u8)> {
    if a.is_unspecified() {
        Some((Reason::Unspecified, 128))
    } else if a == Ipv6Addr::LOCALHOST {
        Some((Reason::Loopback, 128))
    } else if a.segments()[0] & 0xffc0 == 0xfe80 {
        Some((Reason::LinkLocal, 10))
    } else if a.is_multicast() {
        Some((Reason::Multicast, 8))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_with_its_length() {
        for (a, want) in [
            ("0.0.0.0", Some((Reason::Unspecified, 32))),
            ("0.1.2.3", Some((Reason::ThisNetwork, 8))),
            ("127.0.0.1", Some((Reason::Loopback, 8))),
            ("127.255.0.9", Some((Reason::Loopback, 8))),
            ("169.254.1.1", Some((Reason::LinkLocal, 16))),
            ("224.0.0.1", Some((Reason::Multicast, 4))),
            ("239.255.255.250", Some((Reason::Multicast, 4))),
            ("255.255.255.255", Some((Reason::Broadcast, 32))),
            ("240.0.0.1", Some((Reason::Broadcast, 4))),
            ("::", Some((Reason::Unspecified, 128))),
            ("::1", Some((Reason::Loopback, 128))),
            ("fe80::1", Some((Reason::LinkLocal, 10))),
            ("febf::1", Some((Reason::LinkLocal, 10))),
            ("ff02::1", Some((Reason::Multicast, 8))),
            ("192.0.2.1", None),
            ("10.0.0.1", None),
            ("100.64.0.1", None),
            ("169.253.255.255", None),
            ("223.255.255.255", None),
            ("2001:db8::1", None),
            ("fec0::1", None),
            ("::2", None),
        ] {
            assert_eq!(class(a.parse().unwrap()), want, "{a}");
        }
    }

    #[test]
    fn names_are_distinct_and_indexed_in_order() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(Reason::ALL.iter().filter(|o| o.as_str() == r.as_str()).count(), 1, "{r}");
        }
    }
}
