//! Which client a source address belongs to, for fair shares of a table:
//! its IPv6 prefix (a /64 by default: one subscriber's LAN, RFC 6177 —
//! one host holds a whole /64, so counting per address would let it walk
//! around any per-client cap), or its IPv4 address. IPv4-mapped IPv6
//! addresses (a dual-stack socket's IPv4 peers) are IPv4 clients.

use std::net::{IpAddr, Ipv6Addr};

/// The default IPv6 client prefix length.
pub const DEFAULT_V6_LEN: u8 = 64;
/// The shortest IPv6 client prefix length a configuration may set.
pub const MIN_V6_LEN: u8 = 48;
/// The longest (one address per client).
pub const MAX_V6_LEN: u8 = 128;

/// Checks a configured IPv6 client prefix length (48 ..= 128).
pub fn check_v6_len(len: u8) -> Result<(), String> {
    if (MIN_V6_LEN..=MAX_V6_LEN).contains(&len) {
        Ok(())
    } else {
        Err(format!("{len} is not an IPv6 client prefix length ({MIN_V6_LEN} to {MAX_V6_LEN})"))
    }
}

/// The client `ip` belongs to: the IPv6 address with the bits past
/// `v6_len` cleared, or the IPv4 address (also for an IPv4-mapped one).
pub fn key(ip: IpAddr, v6_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let len = u32::from(v6_len.min(128));
                let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn clients_are_prefixes_or_ipv4_addresses() {
        assert_eq!(key(ip("2001:db8:1:2:aaaa::1"), 64), ip("2001:db8:1:2::"));
        assert_eq!(key(ip("2001:db8:1:2:bbbb::9"), 64), key(ip("2001:db8:1:2::1"), 64));
        assert_ne!(key(ip("2001:db8:1:3::1"), 64), key(ip("2001:db8:1:2::1"), 64));
        assert_eq!(key(ip("2001:db8:1:2ff::1"), 48), ip("2001:db8:1::"));
        assert_eq!(key(ip("2001:db8::7"), 128), ip("2001:db8::7"));
        assert_eq!(key(ip("192.0.2.7"), 64), ip("192.0.2.7"));
        assert_eq!(key(ip("::ffff:192.0.2.7"), 64), ip("192.0.2.7"));
    }

    #[test]
    fn lengths_are_checked() {
        assert!(check_v6_len(64).is_ok() && check_v6_len(48).is_ok() && check_v6_len(128).is_ok());
        assert!(check_v6_len(47).unwrap_err().contains("48 to 128"));
        assert!(check_v6_len(129).is_err());
    }
}
