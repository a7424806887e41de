//! Address mapping between IPv4 and IPv6.
//!
//! - [`rfc6052`] — IPv4-embedded IPv6 addresses (RFC 6052), the well-known
//!   prefix 64:ff9b::/96 (RFC 6052 §3.1) and the local-use 64:ff9b:1::/48
//!   (RFC 8215).
//! - [`ivi`] — the CERNET IVI format (RFC 6219).
//! - [`eamt`] — Explicit Address Mapping Table (RFC 7757).
//! - [`Mapper`] — what the translator calls: EAMT first, then the prefix.
//!
//! [`Prefix4`], [`Prefix6`] and [`IpPrefix`] (either family) are the
//! workspace's one CIDR prefix type: pools, EAMT entries, routes and
//! access lists all use them, so parsing rules and error messages are the
//! same in every table.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

pub mod eamt;
pub mod ivi;
pub mod rfc6052;

pub use eamt::Eamt;
pub use ivi::Ivi;
pub use rfc6052::Rfc6052;

/// Errors from building prefixes and mapping tables. The messages are meant
/// for an operator reading a configuration error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddrError {
    /// Text is not `ADDRESS/LENGTH` of the right family.
    Syntax(String),
    /// Prefix length out of range for the family or the mechanism.
    BadLength { len: u8, allowed: &'static str },
    /// Bits set beyond the prefix length.
    HostBitsSet(String),
    /// Mechanism-specific rule (message says which).
    Rule(String),
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrError::Syntax(s) => write!(f, "`{s}` is not an ADDRESS/LENGTH prefix"),
            AddrError::BadLength { len, allowed } => write!(f, "prefix length /{len} not allowed (allowed: {allowed})"),
            AddrError::HostBitsSet(s) => write!(f, "`{s}` has bits set beyond its prefix length"),
            AddrError::Rule(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for AddrError {}

/// An IPv4 prefix with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix4 {
    addr: Ipv4Addr,
    len: u8,
}

/// An IPv6 prefix with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix6 {
    addr: Ipv6Addr,
    len: u8,
}

#[inline]
fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

#[inline]
fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

// `len` is the prefix length in bits, not a collection size.
#[allow(clippy::len_without_is_empty)]
impl Prefix4 {
    /// A prefix; fails when `len > 32` or host bits are set.
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Self, AddrError> {
        if len > 32 {
            return Err(AddrError::BadLength { len, allowed: "0..=32" });
        }
        if u32::from(addr) & !mask32(len) != 0 {
            return Err(AddrError::HostBitsSet(format!("{addr}/{len}")));
        }
        Ok(Prefix4 { addr, len })
    }
    /// The prefix of length `len` holding `addr` (host bits cleared);
    /// fails when `len > 32`.
    pub fn truncated(addr: Ipv4Addr, len: u8) -> Result<Self, AddrError> {
        if len > 32 {
            return Err(AddrError::BadLength { len, allowed: "0..=32" });
        }
        Ok(Prefix4 { addr: Ipv4Addr::from(u32::from(addr) & mask32(len)), len })
    }
    /// Network address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }
    /// Prefix length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }
    /// Netmask as an integer.
    pub fn mask(&self) -> u32 {
        mask32(self.len)
    }
    /// True when `a` lies inside the prefix.
    #[inline]
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & self.mask() == u32::from(self.addr)
    }
    /// Number of addresses (2^(32-len)), saturating at u32::MAX + 1 as u64.
    pub fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.len))
    }
    /// The `i`-th address in the prefix (wrapping inside it).
    pub fn nth(&self, i: u64) -> Ipv4Addr {
        let off = (i % self.size()) as u32;
        Ipv4Addr::from(u32::from(self.addr) | off)
    }
}

#[allow(clippy::len_without_is_empty)]
impl Prefix6 {
    /// A prefix; fails when `len > 128` or host bits are set.
    pub fn new(addr: Ipv6Addr, len: u8) -> Result<Self, AddrError> {
        if len > 128 {
            return Err(AddrError::BadLength { len, allowed: "0..=128" });
        }
        if u128::from(addr) & !mask128(len) != 0 {
            return Err(AddrError::HostBitsSet(format!("{addr}/{len}")));
        }
        Ok(Prefix6 { addr, len })
    }
    /// The prefix of length `len` holding `addr` (host bits cleared);
    /// fails when `len > 128`.
    pub fn truncated(addr: Ipv6Addr, len: u8) -> Result<Self, AddrError> {
        if len > 128 {
            return Err(AddrError::BadLength { len, allowed: "0..=128" });
        }
        Ok(Prefix6 { addr: Ipv6Addr::from(u128::from(addr) & mask128(len)), len })
    }
    /// Network address.
    pub fn addr(&self) -> Ipv6Addr {
        self.addr
    }
    /// Prefix length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }
    /// Netmask as an integer.
    pub fn mask(&self) -> u128 {
        mask128(self.len)
    }
    /// True when `a` lies inside the prefix.
    #[inline]
    pub fn contains(&self, a: &Ipv6Addr) -> bool {
        u128::from(*a) & self.mask() == u128::from(self.addr)
    }
}

/// `ADDRESS/LENGTH`, or a bare address meaning a host prefix of `max` bits:
/// the address text and the length. Spaces around either part are allowed.
fn split_prefix(s: &str, max: u8) -> Result<(&str, u8), AddrError> {
    let Some((a, l)) = s.trim().split_once('/') else {
        return Ok((s.trim(), max));
    };
    let l = l.trim();
    if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) || l.len() > 3 {
        return Err(AddrError::Syntax(s.to_string()));
    }
    let len = l.parse().map_err(|_| AddrError::Syntax(s.to_string()))?;
    Ok((a.trim(), len))
}

/// The address and length of `s` (see [`split_prefix`]), not yet checked
/// against the family's maximum length or for host bits.
fn parse_parts<A: FromStr>(s: &str, max: u8) -> Result<(A, u8), AddrError> {
    let (a, len) = split_prefix(s, max)?;
    let addr = a.parse::<A>().map_err(|_| AddrError::Syntax(s.to_string()))?;
    Ok((addr, len))
}

/// `ADDRESS/LENGTH` of either family, host bits allowed (an interface
/// address such as `192.0.2.1/24`), or a bare address with the family's
/// full length. Fails on bad syntax or a length too long for the family.
pub fn parse_addr_len(s: &str) -> Result<(IpAddr, u8), AddrError> {
    let (a, len) = parse_parts::<IpAddr>(s, if s.contains(':') { 128 } else { 32 })?;
    match a {
        IpAddr::V4(_) if len > 32 => Err(AddrError::BadLength { len, allowed: "0..=32" }),
        _ if len > 128 => Err(AddrError::BadLength { len, allowed: "0..=128" }),
        _ => Ok((a, len)),
    }
}

impl FromStr for Prefix4 {
    type Err = AddrError;
    /// `192.0.2.0/24`; a bare address means /32.
    fn from_str(s: &str) -> Result<Self, AddrError> {
        let (addr, len) = parse_parts(s, 32)?;
        Prefix4::new(addr, len)
    }
}

impl FromStr for Prefix6 {
    type Err = AddrError;
    /// `2001:db8::/32`; a bare address means /128.
    fn from_str(s: &str) -> Result<Self, AddrError> {
        let (addr, len) = parse_parts(s, 128)?;
        Prefix6::new(addr, len)
    }
}

impl fmt::Display for Prefix4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An IPv4 or an IPv6 prefix: a route, an access-list entry. Written
/// `ADDRESS/LENGTH` (an address with a `:` is IPv6), a bare address being a
/// host prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPrefix {
    /// IPv4.
    V4(Prefix4),
    /// IPv6.
    V6(Prefix6),
}

#[allow(clippy::len_without_is_empty)]
impl IpPrefix {
    /// A prefix; fails when the length is too long for the family or host
    /// bits are set.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, AddrError> {
        match addr {
            IpAddr::V4(a) => Prefix4::new(a, len).map(IpPrefix::V4),
            IpAddr::V6(a) => Prefix6::new(a, len).map(IpPrefix::V6),
        }
    }
    /// The prefix of length `len` holding `addr` (host bits cleared).
    pub fn truncated(addr: IpAddr, len: u8) -> Result<Self, AddrError> {
        match addr {
            IpAddr::V4(a) => Prefix4::truncated(a, len).map(IpPrefix::V4),
            IpAddr::V6(a) => Prefix6::truncated(a, len).map(IpPrefix::V6),
        }
    }
    /// Parse like [`FromStr`], but accept host bits and clear them
    /// (`10.1.2.3/16` is `10.1.0.0/16`): for lists where an operator
    /// writes a host's address with its network's length.
    pub fn parse_truncating(s: &str) -> Result<Self, AddrError> {
        let (a, len) = parse_addr_len(s)?;
        IpPrefix::truncated(a, len)
    }
    /// Network address.
    pub fn addr(&self) -> IpAddr {
        match self {
            IpPrefix::V4(p) => IpAddr::V4(p.addr()),
            IpPrefix::V6(p) => IpAddr::V6(p.addr()),
        }
    }
    /// Prefix length in bits.
    pub fn len(&self) -> u8 {
        match self {
            IpPrefix::V4(p) => p.len(),
            IpPrefix::V6(p) => p.len(),
        }
    }
    /// True when `a` lies inside the prefix. An IPv4-mapped IPv6 address
    /// (`::ffff:192.0.2.1`, how a dual-stack socket reports an IPv4 peer)
    /// also matches the IPv4 prefixes that hold the address it carries.
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self, a) {
            (IpPrefix::V4(p), IpAddr::V4(a)) => p.contains(a),
            (IpPrefix::V6(p), IpAddr::V6(a)) => p.contains(&a),
            (IpPrefix::V4(p), IpAddr::V6(a)) => a.to_ipv4_mapped().is_some_and(|a| p.contains(a)),
            (IpPrefix::V6(_), IpAddr::V4(_)) => false,
        }
    }
}

impl From<Prefix4> for IpPrefix {
    fn from(p: Prefix4) -> Self {
        IpPrefix::V4(p)
    }
}

impl From<Prefix6> for IpPrefix {
    fn from(p: Prefix6) -> Self {
        IpPrefix::V6(p)
    }
}

/// The host prefix of an address (`/32` or `/128`).
impl From<IpAddr> for IpPrefix {
    fn from(a: IpAddr) -> Self {
        match a {
            IpAddr::V4(a) => IpPrefix::V4(Prefix4 { addr: a, len: 32 }),
            IpAddr::V6(a) => IpPrefix::V6(Prefix6 { addr: a, len: 128 }),
        }
    }
}

impl FromStr for IpPrefix {
    type Err = AddrError;
    /// `192.0.2.0/24` or `2001:db8::/32`; a bare address is a host prefix.
    fn from_str(s: &str) -> Result<Self, AddrError> {
        if s.contains(':') {
            s.parse().map(IpPrefix::V6)
        } else {
            s.parse().map(IpPrefix::V4)
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpPrefix::V4(p) => p.fmt(f),
            IpPrefix::V6(p) => p.fmt(f),
        }
    }
}

/// IPv4 addresses SIIT never translates (RFC 7915 §4.1 leaves the policy to
/// the implementation; these can never be valid unicast endpoints across a
/// translator): 0.0.0.0/8, 127.0.0.0/8, 224.0.0.0/3 (multicast, class E and
/// limited broadcast).
#[inline]
pub fn is_forbidden_v4(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || o >= 224
}

/// IPv6 addresses SIIT never translates: unspecified, loopback, multicast
/// (ff00::/8) and IPv4-mapped (::ffff:0:0/96).
#[inline]
pub fn is_forbidden_v6(a: &Ipv6Addr) -> bool {
    let v = u128::from(*a);
    v == 0 || v == 1 || (v >> 120) == 0xff || (v >> 32) == 0xffff
}

/// Which IPv4↔IPv6 algorithm fills in addresses not covered by the EAMT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixMap {
    /// No prefix: only EAMT entries translate.
    None,
    /// RFC 6052 with the configured `pool6`.
    Rfc6052(Rfc6052),
    /// RFC 6219 IVI under the ISP's prefix.
    Ivi(Ivi),
}

/// The complete address mapper of a stateless translator: EAMT first
/// (RFC 7757 §3.3: an EAM match takes precedence), then the prefix map.
#[derive(Debug, Clone)]
pub struct Mapper {
    /// Explicit address mappings.
    pub eamt: Eamt,
    /// Algorithmic mapping for everything else.
    pub prefix: PrefixMap,
}

impl Mapper {
    /// IPv4 → IPv6. `None` when untranslatable.
    #[inline]
    pub fn v4_to_v6(&self, a: Ipv4Addr) -> Option<Ipv6Addr> {
        // The emptiness test keeps the common pool6-only case free of a call.
        if !self.eamt.is_empty() {
            if let Some(v6) = self.eamt.v4_to_v6(a) {
                return Some(v6);
            }
        }
        self.v4_to_v6_prefix_only(a)
    }

    /// IPv4 → IPv6 with the prefix map only, skipping the EAMT (used for
    /// the source address of hairpinned packets, RFC 7757 §4.2).
    #[inline]
    pub fn v4_to_v6_prefix_only(&self, a: Ipv4Addr) -> Option<Ipv6Addr> {
        match &self.prefix {
            PrefixMap::None => None,
            PrefixMap::Rfc6052(p) => p.embed(a),
            PrefixMap::Ivi(p) => p.embed(a),
        }
    }

    /// IPv6 → IPv4. `None` when untranslatable.
    #[inline]
    pub fn v6_to_v4(&self, a: &Ipv6Addr) -> Option<Ipv4Addr> {
        if !self.eamt.is_empty() {
            if let Some(v4) = self.eamt.v6_to_v4(a) {
                return Some(v4);
            }
        }
        match &self.prefix {
            PrefixMap::None => None,
            PrefixMap::Rfc6052(p) => p.extract(a),
            PrefixMap::Ivi(p) => p.extract(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_prefixes() {
        let p: Prefix6 = "2001:db8::/32".parse().unwrap();
        assert_eq!(p.len(), 32);
        assert!(p.contains(&"2001:db8::1".parse().unwrap()));
        assert!(!p.contains(&"2001:db9::1".parse().unwrap()));
        assert!(matches!("2001:db8::1/32".parse::<Prefix6>(), Err(AddrError::HostBitsSet(_))));
        assert!(matches!("2001:db8::/129".parse::<Prefix6>(), Err(AddrError::BadLength { .. })));
        assert!(matches!("2001:db8::/".parse::<Prefix6>(), Err(AddrError::Syntax(_))));
        assert!(matches!("192.0.2.0/24".parse::<Prefix6>(), Err(AddrError::Syntax(_))));
        let p: Prefix4 = "192.0.2.0/24".parse().unwrap();
        assert!(p.contains("192.0.2.77".parse().unwrap()));
        assert_eq!(p.nth(300), "192.0.2.44".parse::<Ipv4Addr>().unwrap());
        assert_eq!("10.0.0.1".parse::<Prefix4>().unwrap().len(), 32);
        assert!(matches!("10.0.0.1/8".parse::<Prefix4>(), Err(AddrError::HostBitsSet(_))));
        assert!(matches!("10.0.0.0/+8".parse::<Prefix4>(), Err(AddrError::Syntax(_))));
        assert_eq!(" 10.0.0.0 / 8 ".parse::<Prefix4>().unwrap().len(), 8);
    }

    #[test]
    fn ip_prefix_either_family() {
        let p: IpPrefix = "198.51.100.0/24".parse().unwrap();
        assert_eq!(p, IpPrefix::V4("198.51.100.0/24".parse().unwrap()));
        assert_eq!(p.to_string(), "198.51.100.0/24");
        assert_eq!((p.addr(), p.len()), ("198.51.100.0".parse().unwrap(), 24));
        let p: IpPrefix = "2001:db8:46::/64".parse().unwrap();
        assert_eq!(p.to_string(), "2001:db8:46::/64");
        assert_eq!("2001:db8::1".parse::<IpPrefix>().unwrap().len(), 128);
        assert_eq!("192.0.2.1".parse::<IpPrefix>().unwrap().len(), 32);
        assert!(matches!("192.0.2.1/24".parse::<IpPrefix>(), Err(AddrError::HostBitsSet(_))));
        assert!(matches!("10.0.0.0/40".parse::<IpPrefix>(), Err(AddrError::BadLength { .. })));
        assert!(matches!("2001:db8::/129".parse::<IpPrefix>(), Err(AddrError::BadLength { .. })));
        assert!(matches!("nope".parse::<IpPrefix>(), Err(AddrError::Syntax(_))));
        assert!(matches!("10.0.0.0/".parse::<IpPrefix>(), Err(AddrError::Syntax(_))));
        let t = IpPrefix::parse_truncating("10.1.2.3/16").unwrap();
        assert_eq!(t.to_string(), "10.1.0.0/16");
        assert_eq!(IpPrefix::parse_truncating("2001:db8::5/32").unwrap().to_string(), "2001:db8::/32");
        assert!(matches!(IpPrefix::parse_truncating("10.0.0.0/33"), Err(AddrError::BadLength { .. })));
        assert_eq!(IpPrefix::parse_truncating("0.0.0.0/0").unwrap().len(), 0);
        assert_eq!(parse_addr_len("192.0.2.1/24").unwrap(), ("192.0.2.1".parse().unwrap(), 24));
        assert_eq!(parse_addr_len("2001:db8::1").unwrap(), ("2001:db8::1".parse().unwrap(), 128));
        assert!(matches!(parse_addr_len("192.0.2.1/33"), Err(AddrError::BadLength { .. })));
        assert!(matches!(parse_addr_len("2001:db8::1/129"), Err(AddrError::BadLength { .. })));
        assert!(matches!(parse_addr_len("192.0.2.1/x"), Err(AddrError::Syntax(_))));
    }

    #[test]
    fn ip_prefix_matches_mapped_addresses_as_ipv4() {
        let n: IpPrefix = "10.0.0.0/8".parse().unwrap();
        assert!(n.contains("10.1.2.3".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!n.contains("::ffff:11.1.2.3".parse().unwrap()));
        assert!(!n.contains("2001:db8::1".parse().unwrap()));
        let n: IpPrefix = "fc00::/7".parse().unwrap();
        assert!(n.contains("fd00::1".parse().unwrap()));
        assert!(!n.contains(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        // An IPv6 prefix over the mapped range still matches as IPv6.
        let m: IpPrefix = "::ffff:0:0/96".parse().unwrap();
        assert!(m.contains("::ffff:10.1.2.3".parse().unwrap()));
        let all: IpPrefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn forbidden() {
        for a in ["0.1.2.3", "127.0.0.1", "224.0.0.1", "240.0.0.1", "255.255.255.255"] {
            assert!(is_forbidden_v4(a.parse().unwrap()), "{a}");
        }
        assert!(!is_forbidden_v4("192.0.2.1".parse().unwrap()));
        for a in ["::", "::1", "ff02::1", "::ffff:192.0.2.1"] {
            assert!(is_forbidden_v6(&a.parse().unwrap()), "{a}");
        }
        assert!(!is_forbidden_v6(&"64:ff9b::192.0.2.1".parse().unwrap()));
    }
}
