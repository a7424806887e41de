//! RFC 6219 — The China Education and Research Network (CERNET) IVI
//! Translation Design and Deployment for the IPv4/IPv6 Coexistence and
//! Transition.
//!
//! An ISP with IPv6 prefix `P/n` reserves the subnet `P:FF/(n+8)` (the ISP
//! prefix followed by an all-ones octet, RFC 6219 §5.1) and embeds IPv4
//! addresses under it with the RFC 6052 §2.2 layout (the u octet, bits
//! 64–71, stays zero). `n + 8` must therefore be an RFC 6052 length, so
//! `n` ∈ {24, 32, 40, 48, 56, 88}. Example (RFC 6219, the IVI paper):
//! ISP prefix 2001:dba::/32 gives IVI prefix 2001:dba:ff00::/40, and
//! 202.38.97.205 ↔ 2001:dba:ffca:2661:cd::.
//!
//! The mapping is [`Rfc6052`] with the IVI prefix, minus the Well-Known
//! Prefix rule of RFC 6052 §3.1 (which can never apply anyway: an IVI
//! prefix ends in an all-ones octet and `64:ff9b::/96` does not).

use super::{AddrError, Prefix6, Rfc6052};
use core::net::{Ipv4Addr, Ipv6Addr};

/// The ISP prefix lengths IVI allows, as text for error messages.
pub const ALLOWED_ISP_LENGTHS: &str =
    "24, 32, 40, 48, 56, 88 (so that the IVI prefix is /32, /40, /48, /56, /64 or /96)";

/// IVI mapping under an ISP prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ivi {
    isp: Prefix6,
    /// The RFC 6052 mapping under the IVI prefix (`isp` + 0xff octet).
    inner: Rfc6052,
}

impl Ivi {
    /// Build from the ISP's IPv6 prefix (e.g. 2001:dba::/32).
    pub fn new(isp: Prefix6) -> Result<Self, AddrError> {
        let n = isp.len();
        if !matches!(n, 24 | 32 | 40 | 48 | 56 | 88) {
            return Err(AddrError::BadLength { len: n, allowed: ALLOWED_ISP_LENGTHS });
        }
        // Bits n..n+8 all ones: 0xff ending at bit n+7, i.e. shifted by
        // 128 - (n + 8) = 120 - n (n <= 88, so the shift is 32..=96).
        let bits = u128::from(isp.addr()) | (0xffu128 << (120 - u32::from(n)));
        let ivi = Prefix6::new(Ipv6Addr::from(bits), n + 8)?;
        let inner = Rfc6052::new(ivi).map_err(|e| match e {
            AddrError::Rule(m) => AddrError::Rule(format!("IVI ISP prefix {isp}: {m}")),
            other => other,
        })?;
        Ok(Ivi { isp, inner })
    }

    /// The ISP prefix this mapping was built from.
    pub fn isp_prefix(&self) -> Prefix6 {
        self.isp
    }

    /// The IVI prefix: the ISP prefix followed by an all-ones octet.
    pub fn ivi_prefix(&self) -> Prefix6 {
        self.inner.prefix()
    }

    /// IPv4 → IVI IPv6. Every IPv4 address maps (no WKP rule); `Option`
    /// keeps the signature uniform with [`Rfc6052::embed`].
    #[inline]
    pub fn embed(&self, v4: Ipv4Addr) -> Option<Ipv6Addr> {
        Some(self.inner.embed_unrestricted(v4))
    }

    /// IVI IPv6 → IPv4; `None` outside the IVI prefix.
    #[inline]
    pub fn extract(&self, v6: &Ipv6Addr) -> Option<Ipv4Addr> {
        self.inner.extract_unrestricted(v6)
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

    /// The IVI paper / RFC 6219 example: 2001:dba::/32, 202.38.97.205.
    #[test]
    fn ivi_paper_example() {
        let m = Ivi::new(p6("2001:dba::/32")).unwrap();
        assert_eq!(m.isp_prefix(), p6("2001:dba::/32"));
        assert_eq!(m.ivi_prefix(), p6("2001:dba:ff00::/40"));
        assert_eq!(m.embed(v4("202.38.97.205")), Some(v6("2001:dba:ffca:2661:cd::")));
        assert_eq!(m.extract(&v6("2001:dba:ffca:2661:cd::")), Some(v4("202.38.97.205")));
    }

    #[test]
    fn outside_ivi_prefix() {
        let m = Ivi::new(p6("2001:dba::/32")).unwrap();
        assert_eq!(m.extract(&v6("2001:dba:fe00::")), None);
        assert_eq!(m.extract(&v6("2001:dba::1")), None);
        assert_eq!(m.extract(&v6("2001:dbb:ffca:2661:cd::")), None);
    }

    #[test]
    fn no_wkp_rule() {
        // Non-global addresses translate under IVI.
        let m = Ivi::new(p6("2001:dba::/32")).unwrap();
        let a = v4("10.0.0.1");
        let e = m.embed(a).unwrap();
        assert_eq!(m.extract(&e), Some(a));
    }

    #[test]
    fn every_allowed_length() {
        let cases = [
            ("2001:d00::/24", "2001:dff::/32"),
            ("2001:dba::/32", "2001:dba:ff00::/40"),
            ("2001:dba:100::/40", "2001:dba:1ff::/48"),
            ("2001:dba:1::/48", "2001:dba:1:ff00::/56"),
            ("2001:dba:1:200::/56", "2001:dba:1:2ff::/64"),
            ("2001:dba:1:2:0:100::/88", "2001:dba:1:2:0:1ff::/96"),
        ];
        for (isp, ivi) in cases {
            let m = Ivi::new(p6(isp)).unwrap();
            assert_eq!(m.ivi_prefix(), p6(ivi), "{isp}");
            let a = v4("192.0.2.33");
            assert_eq!(m.extract(&m.embed(a).unwrap()), Some(a), "{isp}");
        }
        // /96 IVI prefix: plain RFC 6052 /96 layout.
        let m = Ivi::new(p6("2001:dba:1:2:0:100::/88")).unwrap();
        assert_eq!(m.embed(v4("192.0.2.33")), Some(v6("2001:dba:1:2:0:1ff:c000:221")));
    }

    #[test]
    fn bad_isp_lengths_rejected() {
        for len in [0u8, 16, 23, 25, 31, 33, 64, 72, 80, 87, 89, 96, 128] {
            let p = Prefix6::new(Ipv6Addr::UNSPECIFIED, len).unwrap();
            let err = Ivi::new(p).unwrap_err();
            assert!(
                matches!(err, AddrError::BadLength { len: l, allowed } if l == len && allowed.contains("24, 32")),
                "/{len}"
            );
            assert!(err.to_string().contains("not allowed"), "{err}");
        }
    }

    fn isp_prefix() -> impl Strategy<Value = Prefix6> {
        (prop::sample::select(vec![24u8, 32, 40, 48, 56, 88]), any::<u128>()).prop_map(|(len, bits)| {
            let v = bits & (u128::MAX << (128 - u32::from(len)));
            Prefix6::new(Ipv6Addr::from(v), len).unwrap()
        })
    }

    proptest! {
        #[test]
        fn round_trip(isp in isp_prefix(), a in any::<u32>()) {
            let m = Ivi::new(isp).unwrap();
            let a = Ipv4Addr::from(a);
            let e = m.embed(a).unwrap();
            prop_assert!(m.ivi_prefix().contains(&e));
            prop_assert!(isp.contains(&e));
            prop_assert_eq!(m.extract(&e), Some(a));
        }

        #[test]
        fn extract_only_inside(isp in isp_prefix(), a in any::<u128>()) {
            let m = Ivi::new(isp).unwrap();
            let a = Ipv6Addr::from(a);
            prop_assert_eq!(m.extract(&a).is_some(), m.ivi_prefix().contains(&a));
        }
    }
}
