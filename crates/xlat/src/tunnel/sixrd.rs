//! 6rd — RFC 5969 "IPv6 Rapid Deployment on IPv4 Infrastructures".
//!
//! Implements:
//! - RFC 5969 §4: the 6rd delegated prefix: the operator's 6rd prefix
//!   (`n` bits) followed by the low `32 - o` bits of the CE's IPv4 address,
//!   where `o` (IPv4MaskLen) high bits are common to every CE of the domain
//!   — [`SixrdDomain`]. 6to4 is the special case `2002::/16`, `o = 0`
//!   ([`SixrdDomain::sixto4`]).
//! - RFC 5969 §7.1 / §8: encapsulation is 6to4's ([`super::sixto4::encap_to`]
//!   with the outer destination from [`SixrdDomain::v4_of`] or the BR);
//!   decapsulation checks ([`decap`]) that an inner source inside the domain
//!   embeds the outer IPv4 source (the spoofing check of §8), that an inner
//!   source outside the domain comes only from the BR (CE side), and that
//!   an inner destination inside the domain embeds the outer destination.
//!
//! The domain's IPv4 addresses are often private (RFC 1918) inside an ISP,
//! so unlike 6to4 they are not refused; 0/8, 127/8 and 224/3 still are
//! (RFC 3964 §5.1, which RFC 5969 §12 points to).

use super::sixto4::{is_forbidden_v4, outer41, Decapped};
use super::TunnelError;
use crate::addr::{AddrError, Prefix6};
use core::net::{Ipv4Addr, Ipv6Addr};

/// One 6rd domain: the 6rd prefix, IPv4MaskLen and the common high bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SixrdDomain {
    prefix: Prefix6,
    v4_mask_len: u8,
    /// The `v4_mask_len` high bits every CE address shares (others zero).
    v4_common: u32,
}

fn v4_mask(o: u8) -> u32 {
    if o == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(o))
    }
}

impl SixrdDomain {
    /// A 6rd domain from the 6rd prefix, IPv4MaskLen and any IPv4 address
    /// of the domain (the BR's or a CE's: only its `v4_mask_len` high bits
    /// are kept). RFC 5969 §7: the 6rd delegated prefix
    /// (`prefix.len() + 32 - v4_mask_len` bits) must leave room for a /64
    /// subnet, so it may be at most 64 bits long.
    pub fn new(prefix: Prefix6, v4_mask_len: u8, any_v4: Ipv4Addr) -> Result<Self, AddrError> {
        if v4_mask_len > 32 {
            return Err(AddrError::BadLength { len: v4_mask_len, allowed: "0..=32 (IPv4MaskLen)" });
        }
        let delegated = u32::from(prefix.len()) + 32 - u32::from(v4_mask_len);
        if delegated > 64 {
            return Err(AddrError::Rule(format!(
                "RFC 5969 §7: the 6rd delegated prefix would be /{delegated} ({prefix} + {} IPv4 bits); \
                 it must be /64 or shorter: shorten the 6rd prefix or raise ipv4-mask-len",
                32 - v4_mask_len
            )));
        }
        Ok(SixrdDomain { prefix, v4_mask_len, v4_common: u32::from(any_v4) & v4_mask(v4_mask_len) })
    }

    /// 6to4 (RFC 3056) as a 6rd domain: `2002::/16`, IPv4MaskLen 0.
    pub fn sixto4() -> Self {
        SixrdDomain { prefix: super::sixto4::prefix(), v4_mask_len: 0, v4_common: 0 }
    }

    /// The 6rd prefix.
    pub fn prefix(&self) -> Prefix6 {
        self.prefix
    }

    /// IPv4MaskLen: high IPv4 bits common to the domain (not embedded).
    pub fn v4_mask_len(&self) -> u8 {
        self.v4_mask_len
    }

    /// Length of a CE's 6rd delegated prefix.
    pub fn delegated_len(&self) -> u8 {
        self.prefix.len() + 32 - self.v4_mask_len
    }

    /// True when `v4` belongs to the domain (its high bits are the common ones).
    pub fn has_v4(&self, v4: Ipv4Addr) -> bool {
        u32::from(v4) & v4_mask(self.v4_mask_len) == self.v4_common
    }

    /// True for an IPv6 address inside the 6rd prefix.
    #[inline]
    pub fn contains(&self, a: &Ipv6Addr) -> bool {
        self.prefix.contains(a)
    }

    /// The CE IPv4 address a 6rd address embeds (RFC 5969 §4); `None`
    /// outside the 6rd prefix.
    #[inline]
    pub fn v4_of(&self, a: &Ipv6Addr) -> Option<Ipv4Addr> {
        if !self.prefix.contains(a) {
            return None;
        }
        let bits = 32 - u32::from(self.v4_mask_len);
        if bits == 0 {
            return Some(Ipv4Addr::from(self.v4_common));
        }
        let shift = 128 - u32::from(self.prefix.len()) - bits;
        let low = ((u128::from(*a) >> shift) as u32) & (u32::MAX >> (32 - bits));
        Some(Ipv4Addr::from(self.v4_common | low))
    }

    /// The 6rd delegated prefix of the CE with IPv4 address `v4`; `None`
    /// when `v4` is not in the domain.
    pub fn delegated_prefix(&self, v4: Ipv4Addr) -> Option<Prefix6> {
        if !self.has_v4(v4) {
            return None;
        }
        let bits = 32 - u32::from(self.v4_mask_len);
        let low = u128::from(u32::from(v4) & (u32::MAX.checked_shr(32 - bits).unwrap_or(0)));
        let shift = 128 - u32::from(self.prefix.len()) - bits;
        let a = u128::from(self.prefix.addr()) | low.checked_shl(shift).unwrap_or(0);
        Prefix6::new(Ipv6Addr::from(a), self.delegated_len()).ok()
    }
}

/// Who may send what into a 6rd (or 6to4) tunnel end point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SixrdPolicy {
    /// The BR's IPv4 address: the only sender allowed to carry inner sources
    /// outside the domain (CE side, RFC 5969 §8). `None` on a BR, which
    /// accepts no native sources at all.
    pub br: Option<Ipv4Addr>,
    /// Accept inner destinations outside the domain (a BR forwards to native
    /// IPv6; a CE only receives for its own delegated prefix).
    pub allow_native_dst: bool,
    /// Refuse RFC 1918 outer sources and embedded addresses (on for 6to4,
    /// RFC 3964 §5.1; off for a 6rd domain on private IPv4).
    pub reject_private: bool,
}

/// Decapsulate a 6rd packet (RFC 5969 §7.1 and §8) of `domain`. Zero-copy.
///
/// After the checks every protocol-41 decapsulation makes (see
/// [`super::sixto4::decap`]): an inner source inside the domain must embed
/// the outer IPv4 source; one outside the domain is accepted only from
/// `policy.br`; an inner destination inside the domain must embed the
/// outer IPv4 destination; one outside it only when
/// `policy.allow_native_dst`.
pub fn decap<'a>(outer_v4: &'a [u8], domain: &SixrdDomain, policy: &SixrdPolicy) -> Result<Decapped<'a>, TunnelError> {
    let (d, inner) = outer41(outer_v4, policy.reject_private)?;
    let (src6, dst6) = (inner.src(), inner.dst());
    match domain.v4_of(&src6) {
        Some(v4) if is_forbidden_v4(v4, policy.reject_private) => {
            return Err(TunnelError::Rule("RFC 5969 §8: inner source embeds a forbidden IPv4 address"));
        }
        Some(v4) if v4 != d.outer_src => {
            return Err(TunnelError::Rule("RFC 5969 §8: inner source does not embed the outer IPv4 source"));
        }
        Some(_) => {}
        None if policy.br == Some(d.outer_src) => {}
        None => {
            return Err(TunnelError::Rule("RFC 5969 §8: inner source outside the 6rd domain and not from the BR"));
        }
    }
    match domain.v4_of(&dst6) {
        Some(v4) if v4 != d.outer_dst => {
            return Err(TunnelError::Rule(
                "RFC 5969 §7.1: inner destination does not embed the outer IPv4 destination",
            ));
        }
        Some(_) => {}
        None if policy.allow_native_dst => {}
        None => return Err(TunnelError::Rule("RFC 5969 §7.1: a CE accepts only its own 6rd delegated prefix")),
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum;
    use crate::tunnel::sixto4;
    use crate::wire::ipv6::Ipv6Header;
    use crate::wire::proto;
    use proptest::prelude::*;

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut b = vec![0u8; 44];
        Ipv6Header { traffic_class: 0, flow_label: 0, payload_len: 4, next_header: proto::UDP, hop_limit: 9, src, dst }
            .emit(&mut b);
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

    /// RFC 5969 §4 example shape: 6rd prefix 2001:db8::/32, IPv4MaskLen 8
    /// in 10.0.0.0/8, so a CE at 10.100.100.1 gets 2001:db8:6464:100::/56.
    fn domain() -> SixrdDomain {
        SixrdDomain::new("2001:db8::/32".parse().unwrap(), 8, Ipv4Addr::new(10, 1, 1, 1)).unwrap()
    }

    #[test]
    fn rfc5969_section4_delegated_prefix() {
        let d = domain();
        assert_eq!(d.delegated_len(), 56);
        let ce = Ipv4Addr::new(10, 100, 100, 1);
        assert_eq!(d.delegated_prefix(ce).unwrap().to_string(), "2001:db8:6464:100::/56");
        assert_eq!(d.v4_of(&a6("2001:db8:6464:1ff:abcd::1")), Some(ce));
        assert_eq!(d.v4_of(&a6("2001:db9::1")), None);
        assert!(d.delegated_prefix(Ipv4Addr::new(11, 0, 0, 1)).is_none(), "outside 10/8");
        // IPv4MaskLen 0: all 32 bits embedded; /32 + 32 = /64.
        let full = SixrdDomain::new("2001:db8::/32".parse().unwrap(), 0, Ipv4Addr::UNSPECIFIED).unwrap();
        assert_eq!(full.delegated_prefix(Ipv4Addr::new(192, 0, 2, 1)).unwrap().to_string(), "2001:db8:c000:201::/64");
        assert_eq!(full.v4_of(&a6("2001:db8:c000:201::9")), Some(Ipv4Addr::new(192, 0, 2, 1)));
        // IPv4MaskLen 32: nothing embedded, every address is the one CE.
        let one = SixrdDomain::new("2001:db8:1::/48".parse().unwrap(), 32, Ipv4Addr::new(10, 0, 0, 1)).unwrap();
        assert_eq!(one.delegated_len(), 48);
        assert_eq!(one.v4_of(&a6("2001:db8:1::1")), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(one.delegated_prefix(Ipv4Addr::new(10, 0, 0, 1)).unwrap().to_string(), "2001:db8:1::/48");
    }

    #[test]
    fn rfc5969_section7_delegated_prefix_length_limit() {
        let e = SixrdDomain::new("2001:db8::/48".parse().unwrap(), 8, Ipv4Addr::new(10, 0, 0, 0)).unwrap_err();
        assert!(e.to_string().contains("/72"), "{e}");
        assert!(SixrdDomain::new("2001:db8::/32".parse().unwrap(), 33, Ipv4Addr::UNSPECIFIED).is_err());
    }

    #[test]
    fn sixto4_is_a_6rd_domain() {
        let d = SixrdDomain::sixto4();
        let v4a = Ipv4Addr::new(192, 0, 2, 1);
        assert_eq!(d.delegated_prefix(v4a), Some(sixto4::prefix_for(v4a)));
        assert_eq!(d.v4_of(&a6("2002:c000:201::1")), sixto4::v4_of(&a6("2002:c000:201::1")));
    }

    #[test]
    fn rfc5969_section8_decap_checks() {
        let d = domain();
        let ce1 = Ipv4Addr::new(10, 100, 100, 1);
        let ce2 = Ipv4Addr::new(10, 7, 7, 7);
        let br = Ipv4Addr::new(10, 0, 0, 1);
        let p1 = d.delegated_prefix(ce1).unwrap().addr();
        let p2 = d.delegated_prefix(ce2).unwrap().addr();
        let ce_pol = SixrdPolicy { br: Some(br), allow_native_dst: false, reject_private: false };
        let br_pol = SixrdPolicy { br: None, allow_native_dst: true, reject_private: false };
        // CE to CE, direct: accepted at the CE.
        let pkt = v4(ce2, ce1, &v6(p2, p1));
        assert_eq!(decap(&pkt, &d, &ce_pol).unwrap().inner, &v6(p2, p1)[..]);
        // Spoofed source: claims CE2's prefix, sent from CE1's address.
        let pkt = v4(ce1, ce2, &v6(p2, p1));
        assert!(matches!(decap(&pkt, &d, &ce_pol), Err(TunnelError::Rule(m)) if m.contains("§8")));
        // Native source: only from the BR.
        let native = a6("2001:db9::1");
        assert!(decap(&v4(br, ce1, &v6(native, p1)), &d, &ce_pol).is_ok());
        assert!(decap(&v4(ce2, ce1, &v6(native, p1)), &d, &ce_pol).is_err());
        // At the BR: native sources refused, native destinations accepted.
        assert!(decap(&v4(ce1, br, &v6(native, p1)), &d, &br_pol).is_err());
        assert!(decap(&v4(ce1, br, &v6(p1, native)), &d, &br_pol).is_ok());
        assert!(decap(&v4(ce1, br, &v6(p1, native)), &d, &ce_pol).is_err(), "a CE is no relay");
        // Inner destination embedding another CE than the outer destination.
        assert!(decap(&v4(ce2, ce1, &v6(p2, p2)), &d, &ce_pol).is_err());
        // Forbidden outer source.
        assert!(decap(&v4(Ipv4Addr::LOCALHOST, ce1, &v6(p2, p1)), &d, &ce_pol).is_err());
    }

    proptest! {
        #[test]
        fn embed_round_trip(plen in 8u8..=32, o in 0u8..=32, v in any::<u32>(), iid in any::<u64>()) {
            prop_assume!(u32::from(plen) + 32 - u32::from(o) <= 64);
            let p = Prefix6::truncated(a6("2001:db8:ffff:ffff::"), plen).unwrap();
            let d = SixrdDomain::new(p, o, Ipv4Addr::from(v)).unwrap();
            let dp = d.delegated_prefix(Ipv4Addr::from(v)).unwrap();
            let host = Ipv6Addr::from(u128::from(dp.addr()) | u128::from(iid));
            prop_assert_eq!(d.v4_of(&host), Some(Ipv4Addr::from(v)));
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..120)) {
            let pol = SixrdPolicy { br: Some(Ipv4Addr::new(10, 0, 0, 1)), allow_native_dst: true, reject_private: false };
            let _ = decap(&data, &domain(), &pol);
        }
    }
}
