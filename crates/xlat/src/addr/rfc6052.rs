//! RFC 6052 — IPv6 Addressing of IPv4/IPv6 Translators.
//!
//! Implements the IPv4-embedded IPv6 address format of RFC 6052 §2.2 for
//! the six allowed prefix lengths, the Well-Known Prefix `64:ff9b::/96` with
//! its restriction to global IPv4 addresses (RFC 6052 §3.1), and accepts the
//! local-use prefix `64:ff9b:1::/48` (RFC 8215) as an ordinary
//! Network-Specific Prefix without that restriction.
//!
//! Layout (RFC 6052 §2.2, Figure 1); `u` is bits 64–71, always zero:
//!
//! ```text
//! +--+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
//! |PL| 0-------------32--40--48--56--64--72--80--88--96--104---------|
//! +--+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
//! |32|     prefix    |v4(32)         | u | suffix                    |
//! |40|     prefix        |v4(24)     | u |(8)| suffix                |
//! |48|     prefix            |v4(16) | u | (16)  | suffix            |
//! |56|     prefix                |(8)| u |  v4(24)   | suffix        |
//! |64|     prefix                    | u |   v4(32)      | suffix    |
//! |96|     prefix                                    |    v4(32)     |
//! +--+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
//! ```
//!
//! Everything works on `u128`/`u32` integers with per-prefix shift constants
//! computed once in [`Rfc6052::new`]; [`Rfc6052::embed`] and
//! [`Rfc6052::extract`] are branch-light, allocation-free and cannot panic.

use super::{AddrError, Prefix6};
use core::net::{Ipv4Addr, Ipv6Addr};

/// The prefix lengths RFC 6052 §2.2 allows, as text for error messages.
pub const ALLOWED_LENGTHS: &str = "32, 40, 48, 56, 64, 96";

/// The Well-Known Prefix `64:ff9b::/96` as an integer (RFC 6052 §2.1).
const WKP_BITS: u128 = 0x0064_ff9b_0000_0000_0000_0000_0000_0000;

/// Bits 64–71 of an IPv6 address (the "u" octet, RFC 6052 §2.2).
const U_OCTET_MASK: u128 = 0xff << 56;

/// The Well-Known Prefix `64:ff9b::/96` (RFC 6052 §2.1).
pub fn wkp() -> Prefix6 {
    // A constant /96 whose low 32 bits are zero: `Prefix6::new` cannot fail,
    // so this does not depend on any input.
    Prefix6::new(Ipv6Addr::from(WKP_BITS), 96).expect("64:ff9b::/96 is a valid prefix")
}

/// True when `a` is globally reachable according to the IANA IPv4
/// Special-Purpose Address Registry (RFC 6890, updated by RFC 8190).
///
/// These blocks have "Globally Reachable = False" and make this return
/// `false`:
///
/// | Block              | Name                           | RFC            |
/// |--------------------|--------------------------------|----------------|
/// | 0.0.0.0/8          | "This network"                 | RFC 791 §3.2   |
/// | 10.0.0.0/8         | Private-Use                    | RFC 1918       |
/// | 100.64.0.0/10      | Shared Address Space           | RFC 6598       |
/// | 127.0.0.0/8        | Loopback                       | RFC 1122 §3.2.1.3 |
/// | 169.254.0.0/16     | Link Local                     | RFC 3927       |
/// | 172.16.0.0/12      | Private-Use                    | RFC 1918       |
/// | 192.0.0.0/24       | IETF Protocol Assignments ¹    | RFC 6890 §2.1  |
/// | 192.0.2.0/24       | Documentation (TEST-NET-1)     | RFC 5737       |
/// | 192.168.0.0/16     | Private-Use                    | RFC 1918       |
/// | 198.18.0.0/15      | Benchmarking                   | RFC 2544       |
/// | 198.51.100.0/24    | Documentation (TEST-NET-2)     | RFC 5737       |
/// | 203.0.113.0/24     | Documentation (TEST-NET-3)     | RFC 5737       |
/// | 240.0.0.0/4        | Reserved                       | RFC 1112 §4    |
/// | 255.255.255.255/32 | Limited Broadcast              | RFC 919, RFC 8190 |
///
/// ¹ except 192.0.0.9/32 (Port Control Protocol anycast, RFC 7723) and
/// 192.0.0.10/32 (TURN anycast, RFC 8155), which the registry marks
/// globally reachable.
///
/// Registry entries marked globally reachable (or N/A) stay global here:
/// 192.31.196.0/24 (AS112, RFC 7535), 192.52.193.0/24 (AMT, RFC 7450),
/// 192.88.99.0/24 (deprecated 6to4 relay anycast, RFC 7526) and
/// 192.175.48.0/24 (AS112 direct delegation, RFC 7534). Multicast
/// (224.0.0.0/4) is not in the special-purpose registry; the translator
/// refuses it separately (`addr::is_forbidden_v4`).
#[inline]
pub fn is_global_v4(a: Ipv4Addr) -> bool {
    let v = u32::from(a);
    let [o0, o1, o2, _] = a.octets();
    match o0 {
        0 | 10 | 127 => false,
        100 => (o1 & 0xc0) != 64, // 100.64.0.0/10
        169 => o1 != 254,         // 169.254.0.0/16
        172 => (o1 & 0xf0) != 16, // 172.16.0.0/12
        192 => match (o1, o2) {
            (0, 0) => v == 0xc000_0009 || v == 0xc000_000a, // 192.0.0.0/24 but .9, .10
            (0, 2) => false,                                // 192.0.2.0/24
            (168, _) => false,                              // 192.168.0.0/16
            _ => true,
        },
        198 => !((o1 & 0xfe) == 18 || (o1 == 51 && o2 == 100)), // 198.18/15, 198.51.100/24
        203 => !(o1 == 0 && o2 == 113),                         // 203.0.113.0/24
        240..=255 => false,                                     // 240/4 incl. 255.255.255.255
        _ => true,
    }
}

/// An RFC 6052 translation prefix (/32, /40, /48, /56, /64 or /96).
///
/// The address is handled as two 64-bit halves: for every length but 96
/// the IPv4 bits before the u octet end the upper half and the rest start
/// the lower half right after the u octet, so embedding and extraction are
/// a few 64-bit shifts and masks with constants fixed at construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc6052 {
    prefix: Prefix6,
    /// Prefix network as an integer.
    bits: u128,
    /// Prefix mask as an integer.
    mask: u128,
    /// IPv4 bits that go after the u octet (0 for /32 and /96).
    lo_bits: u32,
    /// Mask of the IPv4 bits that end the upper half (before the u octet).
    hi_mask: u64,
    /// Mask of the IPv4 bits that go after the u octet.
    lo_mask: u64,
    /// Shift that places those bits right after the u octet in the lower half.
    lo_shift: u32,
    /// /96: the IPv4 address is the last 32 bits.
    is96: bool,
    /// True for the Well-Known Prefix (RFC 6052 §3.1 restriction applies).
    wkp: bool,
}

/// RFC 6052 §2.2: bits 64–71 must be zero. Only checked for lengths below
/// 96; for those it is implied by [`Prefix6`]'s no-host-bits invariant, so
/// this is a defensive check.
fn check_u_octet(prefix: &Prefix6) -> Result<(), AddrError> {
    if prefix.len() < 96 && u128::from(prefix.addr()) & U_OCTET_MASK != 0 {
        return Err(AddrError::Rule(format!(
            "RFC 6052 prefix {prefix}: bits 64-71 (the \"u\" octet) must be zero (RFC 6052 §2.2)"
        )));
    }
    Ok(())
}

impl Rfc6052 {
    /// Validate and build.
    ///
    /// Accepts prefix lengths 32, 40, 48, 56, 64 and 96 only (RFC 6052 §2.2).
    pub fn new(prefix: Prefix6) -> Result<Self, AddrError> {
        let len = prefix.len();
        // lo_bits = IPv4 bits placed after the u octet.
        let lo_bits = match len {
            32 => 0,
            40 => 8,
            48 => 16,
            56 => 24,
            64 => 32,
            96 => 0,
            _ => return Err(AddrError::BadLength { len, allowed: ALLOWED_LENGTHS }),
        };
        check_u_octet(&prefix)?;
        let bits = u128::from(prefix.addr());
        let is96 = len == 96;
        let hi_width = if is96 { 0 } else { 32 - lo_bits };
        Ok(Rfc6052 {
            prefix,
            bits,
            mask: prefix.mask(),
            lo_bits,
            hi_mask: (1u64 << hi_width) - 1,
            lo_mask: (1u64 << lo_bits) - 1,
            // The low part starts at bit 72, i.e. bit 8 of the lower half:
            // its last bit is 7 + lo_bits, shift 63 - (7 + lo_bits).
            lo_shift: 56 - lo_bits,
            is96,
            wkp: is96 && bits == WKP_BITS,
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> Prefix6 {
        self.prefix
    }

    /// True when the prefix is the Well-Known Prefix `64:ff9b::/96`, for
    /// which only global IPv4 addresses translate (RFC 6052 §3.1).
    pub fn is_wkp(&self) -> bool {
        self.wkp
    }

    /// IPv4 → IPv4-embedded IPv6; `None` when not allowed (WKP rule).
    #[inline]
    pub fn embed(&self, v4: Ipv4Addr) -> Option<Ipv6Addr> {
        if self.wkp && !is_global_v4(v4) {
            return None;
        }
        Some(self.embed_unrestricted(v4))
    }

    /// IPv4-embedded IPv6 → IPv4; `None` when `v6` is outside the prefix
    /// (or, under the WKP, when the embedded address is not global).
    #[inline]
    pub fn extract(&self, v6: &Ipv6Addr) -> Option<Ipv4Addr> {
        let v4 = self.extract_unrestricted(v6)?;
        if self.wkp && !is_global_v4(v4) {
            return None;
        }
        Some(v4)
    }

    /// [`Rfc6052::embed`] without the Well-Known Prefix rule (for IVI,
    /// RFC 6219, which uses the same layout).
    #[inline]
    pub(super) fn embed_unrestricted(&self, v4: Ipv4Addr) -> Ipv6Addr {
        let v = u64::from(u32::from(v4));
        if self.is96 {
            return Ipv6Addr::from(self.bits | u128::from(v));
        }
        // lo_bits <= 32 and lo_shift <= 56: every shift is below 64.
        let hi = v >> self.lo_bits;
        let lo = (v & self.lo_mask) << self.lo_shift;
        Ipv6Addr::from(self.bits | (u128::from(hi) << 64) | u128::from(lo))
    }

    /// [`Rfc6052::extract`] without the Well-Known Prefix rule (IVI, and
    /// the destination policy, which judges whatever IPv4 address a
    /// client's IPv6 address carries). The u octet and the suffix are
    /// ignored.
    #[inline]
    pub fn extract_unrestricted(&self, v6: &Ipv6Addr) -> Option<Ipv4Addr> {
        let a = u128::from(*v6);
        if a & self.mask != self.bits {
            return None;
        }
        if self.is96 {
            return Some(Ipv4Addr::from(a as u32));
        }
        let (upper, lower) = ((a >> 64) as u64, a as u64);
        let hi = upper & self.hi_mask;
        let lo = (lower >> self.lo_shift) & self.lo_mask;
        // hi < 2^(32 - lo_bits) and lo < 2^lo_bits: the result fits in 32 bits.
        Some(Ipv4Addr::from(((hi << self.lo_bits) | lo) as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p6(s: &str) -> Prefix6 {
        s.parse().unwrap()
    }
    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// RFC 6052 §2.4, the example table (IPv4 192.0.2.33).
    #[test]
    fn rfc6052_section_2_4_examples() {
        let a = crate::testvec::RFC6052_2_4_IPV4;
        for (prefix, want) in crate::testvec::RFC6052_2_4 {
            let m = Rfc6052::new(p6(prefix)).unwrap();
            assert!(!m.is_wkp());
            assert_eq!(m.embed(a), Some(v6(want)), "{prefix}");
            assert_eq!(m.extract(&v6(want)), Some(a), "{prefix}");
        }
    }

    /// RFC 6052 §2.4 lists 64:ff9b::192.0.2.33 for the WKP, but 192.0.2.0/24
    /// is documentation space: §3.1 forbids it under the WKP.
    #[test]
    fn wkp_refuses_non_global() {
        let m = Rfc6052::new(wkp()).unwrap();
        assert!(m.is_wkp());
        assert_eq!(m.prefix(), p6("64:ff9b::/96"));
        assert_eq!(m.embed(v4("192.0.2.33")), None);
        assert_eq!(m.extract(&v6("64:ff9b::192.0.2.33")), None);
        assert_eq!(m.embed(v4("10.0.0.1")), None);
        assert_eq!(m.extract(&v6("64:ff9b::10.0.0.1")), None);
        // A global address (a.root-servers.net) translates both ways.
        let g = v4("198.41.0.4");
        assert_eq!(m.embed(g), Some(v6("64:ff9b::198.41.0.4")));
        assert_eq!(m.extract(&v6("64:ff9b::198.41.0.4")), Some(g));
        // Outside the prefix.
        assert_eq!(m.extract(&v6("64:ff9c::198.41.0.4")), None);
    }

    /// RFC 8215: 64:ff9b:1::/48 is a Network-Specific Prefix, no global-only
    /// rule; at /48 the u octet is skipped.
    #[test]
    fn local_use_prefix_has_no_wkp_restriction() {
        let m = Rfc6052::new(p6("64:ff9b:1::/48")).unwrap();
        assert!(!m.is_wkp());
        let a = v4("10.0.0.1");
        let want = v6("64:ff9b:1:a00:0:100::");
        assert_eq!(m.embed(a), Some(want));
        assert_eq!(m.extract(&want), Some(a));
        // The same address is refused under the WKP.
        assert_eq!(Rfc6052::new(wkp()).unwrap().embed(a), None);
    }

    #[test]
    fn other_96_is_not_wkp() {
        let m = Rfc6052::new(p6("64:ff9b:0:0:0:1::/96")).unwrap();
        assert!(!m.is_wkp());
        assert_eq!(m.embed(v4("10.0.0.1")), Some(v6("64:ff9b::1:a00:1")));
    }

    #[test]
    fn bad_lengths_rejected() {
        for len in [0u8, 8, 16, 24, 31, 33, 63, 65, 72, 80, 88, 95, 97, 112, 120, 128] {
            let p = Prefix6::new(Ipv6Addr::UNSPECIFIED, len).unwrap();
            assert_eq!(Rfc6052::new(p), Err(AddrError::BadLength { len, allowed: "32, 40, 48, 56, 64, 96" }), "/{len}");
        }
    }

    #[test]
    fn u_octet_rule() {
        // Prefix6 keeps host bits zero, so every accepted length below 96
        // passes; the check itself rejects a nonzero u octet.
        for s in ["2001:db8::/32", "2001:dba:ff00::/40", "2001:db8:ffff:ff00::/56", "2001:db8:1:2::/64"] {
            assert!(check_u_octet(&p6(s)).is_ok(), "{s}");
        }
        let bad = p6("2001:db8:0:0:100::/72");
        let err = check_u_octet(&bad).unwrap_err();
        assert!(matches!(&err, AddrError::Rule(m) if m.contains("u\" octet") && m.contains("/72")));
        // /72 is not an RFC 6052 length anyway.
        assert!(matches!(Rfc6052::new(bad), Err(AddrError::BadLength { len: 72, .. })));
    }

    #[test]
    fn extract_ignores_u_octet_and_suffix() {
        let m = Rfc6052::new(p6("2001:db8:122::/48")).unwrap();
        assert_eq!(m.extract(&v6("2001:db8:122:c000:ff02:21ff:ffff:ffff")), Some(v4("192.0.2.33")));
        let m = Rfc6052::new(p6("2001:db8::/32")).unwrap();
        assert_eq!(m.extract(&v6("2001:db8:c000:221:ffff::1")), Some(v4("192.0.2.33")));
        assert_eq!(m.extract(&v6("2001:db9:c000:221::")), None);
    }

    #[test]
    fn global_ranges() {
        let non_global = [
            "0.0.0.0",
            "0.255.255.255",
            "10.1.2.3",
            "100.64.0.0",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.0",
            "192.0.0.8",
            "192.0.0.170",
            "192.0.0.255",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "240.0.0.1",
            "255.255.255.255",
        ];
        for a in non_global {
            assert!(!is_global_v4(v4(a)), "{a} should be non-global");
        }
        let global = [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.0.9",
            "192.0.0.10",
            "192.0.1.1",
            "192.0.3.1",
            "192.88.99.1",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.41.0.4",
            "198.51.101.1",
            "203.0.112.1",
            "224.0.0.1",
            "239.255.255.255",
        ];
        for a in global {
            assert!(is_global_v4(v4(a)), "{a} should be global");
        }
    }

    fn valid_prefix() -> impl Strategy<Value = Prefix6> {
        (prop::sample::select(vec![32u8, 40, 48, 56, 64, 96]), any::<u128>()).prop_map(|(len, bits)| {
            let mut v = bits & (u128::MAX << (128 - u32::from(len)));
            if len < 96 {
                v &= !U_OCTET_MASK;
            }
            Prefix6::new(Ipv6Addr::from(v), len).unwrap()
        })
    }

    proptest! {
        #[test]
        fn extract_inverts_embed(prefix in valid_prefix(), a in any::<u32>()) {
            let m = Rfc6052::new(prefix).unwrap();
            let a = Ipv4Addr::from(a);
            let e = m.embed(a).unwrap();
            prop_assert!(prefix.contains(&e));
            prop_assert_eq!(u128::from(e) & U_OCTET_MASK & !prefix.mask(), 0);
            prop_assert_eq!(m.extract(&e), Some(a));
        }

        #[test]
        fn wkp_round_trip_for_globals(a in any::<u32>()) {
            let m = Rfc6052::new(wkp()).unwrap();
            let a = Ipv4Addr::from(a);
            match m.embed(a) {
                Some(e) => {
                    prop_assert!(is_global_v4(a));
                    prop_assert_eq!(m.extract(&e), Some(a));
                }
                None => prop_assert!(!is_global_v4(a)),
            }
        }

        #[test]
        fn extract_never_panics(prefix in valid_prefix(), a in any::<u128>()) {
            let m = Rfc6052::new(prefix).unwrap();
            let a = Ipv6Addr::from(a);
            if let Some(x) = m.extract(&a) {
                prop_assert!(prefix.contains(&a));
                prop_assert_eq!(m.extract(&m.embed(x).unwrap()), Some(x));
            }
        }
    }
}
