//! The client an address belongs to.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The default IPv6 client: a /64 (one host or one LAN, whatever
/// addresses of it it uses).
pub const DEFAULT_V6_PREFIX: u8 = 64;
/// The widest IPv6 client a configuration may name (a site's /48).
pub const MIN_V6_PREFIX: u8 = 48;
/// The narrowest: one address.
pub const MAX_V6_PREFIX: u8 = 128;

/// A prefix length a configuration names for IPv6 clients, checked:
/// [`MIN_V6_PREFIX`] to [`MAX_V6_PREFIX`]; the error says so.
pub fn check_prefix_len(len: u8) -> Result<u8, String> {
    if (MIN_V6_PREFIX..=MAX_V6_PREFIX).contains(&len) {
        Ok(len)
    } else {
        Err(format!("{len}: a client prefix length from {MIN_V6_PREFIX} to {MAX_V6_PREFIX}"))
    }
}

/// A client: an IPv6 prefix (the address with the bits past its length
/// cleared) or an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientKey {
    /// An IPv4 address (or an IPv4-mapped IPv6 one).
    V4(Ipv4Addr),
    /// An IPv6 prefix.
    V6 {
        /// The prefix (host bits zero).
        prefix: Ipv6Addr,
        /// Its length (0..=128).
        len: u8,
    },
}

impl ClientKey {
    /// The client of `a`: its IPv4 address, or its IPv6 prefix of length
    /// `v6_prefix_len` (clamped to 128). An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`, as a dual-stack socket reports IPv4 peers) is
    /// its IPv4 address.
    pub fn of(a: IpAddr, v6_prefix_len: u8) -> ClientKey {
        match a {
            IpAddr::V4(v4) => ClientKey::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4),
                None => ClientKey::v6(v6, v6_prefix_len),
            },
        }
    }

    /// The IPv6 prefix of `a` of length `len` (clamped to 128), mapped
    /// addresses included (for tables whose clients are IPv6 only).
    pub fn v6(a: Ipv6Addr, len: u8) -> ClientKey {
        let len = len.min(128);
        ClientKey::V6 { prefix: mask(a, len), len }
    }

    /// The IPv6 prefix as an address (host bits zero); `None` for IPv4.
    pub fn v6_prefix(&self) -> Option<Ipv6Addr> {
        match self {
            ClientKey::V6 { prefix, .. } => Some(*prefix),
            ClientKey::V4(_) => None,
        }
    }
}

/// `a` with the bits past `len` cleared.
pub(crate) fn mask(a: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(a);
    let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len.min(128))) };
    Ipv6Addr::from(bits & m)
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientKey::V4(a) => write!(f, "{a}"),
            ClientKey::V6 { prefix, len } => write!(f, "{prefix}/{len}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_of_one_prefix_are_one_client() {
        let k = |s: &str, len| ClientKey::of(IpAddr::V6(a6(s)), len);
        assert_eq!(k("2001:db8:1:2::1", 64), k("2001:db8:1:2:ffff:1:2:3", 64));
        assert_ne!(k("2001:db8:1:2::1", 64), k("2001:db8:1:3::1", 64));
        assert_eq!(k("2001:db8:1:2::1", 56), k("2001:db8:1:ff::1", 56));
        assert_ne!(k("2001:db8:1:2::1", 128), k("2001:db8:1:2::2", 128));
        assert_eq!(k("2001:db8:1:2::1", 64).to_string(), "2001:db8:1:2::/64");
        assert_eq!(k("2001:db8::1", 200), ClientKey::V6 { prefix: a6("2001:db8::1"), len: 128 }, "clamped");
        assert_eq!(k("2001:db8:1:2::1", 0).v6_prefix(), Some(Ipv6Addr::UNSPECIFIED));
    }

    #[test]
    fn ipv4_and_mapped_addresses_are_their_ipv4_address() {
        let v4 = ClientKey::of("192.0.2.7".parse().unwrap(), 64);
        assert_eq!(v4, ClientKey::V4(Ipv4Addr::new(192, 0, 2, 7)));
        assert_eq!(ClientKey::of("::ffff:192.0.2.7".parse().unwrap(), 64), v4);
        assert_ne!(ClientKey::of("192.0.2.8".parse().unwrap(), 64), v4);
        assert_eq!(v4.to_string(), "192.0.2.7");
        assert_eq!(v4.v6_prefix(), None);
        // `v6` keeps the mapped address an IPv6 prefix.
        assert!(matches!(ClientKey::v6(a6("::ffff:192.0.2.7"), 96), ClientKey::V6 { len: 96, .. }));
    }

    #[test]
    fn prefix_lengths_are_checked() {
        assert_eq!(check_prefix_len(64), Ok(64));
        assert_eq!(check_prefix_len(48), Ok(48));
        assert_eq!(check_prefix_len(128), Ok(128));
        for bad in [0, 47, 129, 255] {
            let e = check_prefix_len(bad).unwrap_err();
            assert!(e.contains("48 to 128"), "{e}");
        }
    }

    proptest! {
        #[test]
        fn a_prefix_contains_its_addresses(bits in any::<u128>(), len in 0u8..=128) {
            let a = Ipv6Addr::from(bits);
            let ClientKey::V6 { prefix, len: l } = ClientKey::v6(a, len) else { unreachable!() };
            prop_assert_eq!(l, len);
            let shift = 128 - u32::from(len);
            let same = |x: u128, y: u128| if shift == 128 { true } else { x >> shift == y >> shift };
            prop_assert!(same(u128::from(prefix), bits));
            prop_assert_eq!(u128::from(prefix) & !(u128::MAX.checked_shl(shift).unwrap_or(0)), 0);
        }
    }
}
