//! From the slow path's configuration to the map contract: the RFC 7915
//! knobs of `xlat::siit::Config` as a [`Xlat`], `pool6` and the EAMT as
//! [`Config`] fields and trie entries.

use crate::types::{
    Config, Eam, Xlat, XLAT_EAM_HAIRPIN, XLAT_EAM_SIMPLE, XLAT_HAVE_EAMT, XLAT_ON, XLAT_POOL6_WKP, XLAT_RESET_TC,
    XLAT_RESET_TOS,
};
use crate::Error;
use xlat::addr::{Prefix4, Prefix6, Rfc6052};
use xlat::siit::{Config as SiitConfig, EamHairpinMode, MappingMode, Translator};

/// The RFC 7915 knobs of `cfg` (MTUs, TOS/Traffic Class), with the
/// function turned on.
pub fn xlat_params(cfg: &SiitConfig) -> Xlat {
    let mut flags = XLAT_ON;
    if cfg.reset_traffic_class {
        flags |= XLAT_RESET_TC;
    }
    if cfg.reset_tos {
        flags |= XLAT_RESET_TOS;
    }
    Xlat {
        flags,
        new_tos: cfg.new_tos,
        ipv4_mtu: cfg.ipv4_mtu,
        ipv6_mtu: cfg.ipv6_mtu,
        frag_mtu: cfg.lowest_ipv6_mtu.min(cfg.ipv6_mtu),
    }
}

/// One EAMT entry in the trie value form (RFC 7757 §3.2: the IPv4 suffix
/// goes right after the IPv6 prefix).
pub fn eam(p6: Prefix6, p4: Prefix4) -> Eam {
    let s4 = 32 - u32::from(p4.len());
    let s6 = 128 - u32::from(p6.len());
    Eam {
        net6: p6.addr().octets(),
        net4: p4.addr().octets(),
        len4: p4.len(),
        len6: p6.len(),
        shift: s6.saturating_sub(s4).min(127) as u8,
        pad: 0,
    }
}

/// One EAMT entry: its prefixes (the trie keys) and the trie value.
pub type EamEntry = (Prefix6, Prefix4, Eam);

/// The SIIT part of the fast-path configuration: `config` with its
/// `pool6`/`siit` fields set (other fields kept) and the EAMT entries.
///
/// The configuration is validated as the slow path validates it. With
/// `mapping = "ivi"` (RFC 6219) no prefix is given to the fast path: only
/// EAMT addresses are translated there and everything else passes.
pub fn siit(base: Config, cfg: &SiitConfig) -> Result<(Config, Vec<EamEntry>), Error> {
    Translator::new(cfg.clone()).map_err(|e| Error::Config(e.to_string()))?;
    let mut c = base;
    c.siit = xlat_params(cfg);
    c.pool6 = [0; 16];
    c.pool6_len = 0;
    if let (Some(p), MappingMode::Rfc6052) = (cfg.pool6, cfg.mapping) {
        let m = Rfc6052::new(p).map_err(|e| Error::Config(format!("pool6: {e}")))?;
        c.pool6 = p.addr().octets();
        c.pool6_len = p.len();
        if m.is_wkp() {
            c.siit.flags |= XLAT_POOL6_WKP;
        }
    }
    if !cfg.eamt.is_empty() {
        c.siit.flags |= XLAT_HAVE_EAMT;
        // The hairpin rules apply when there is a prefix besides the EAMT
        // (as in xlat; with IVI the fast path has no prefix, and the
        // packets concerned pass for want of a mapping).
        if cfg.pool6.is_some() {
            match cfg.eam_hairpin_mode {
                EamHairpinMode::Off => {}
                EamHairpinMode::Simple => c.siit.flags |= XLAT_EAM_SIMPLE,
                EamHairpinMode::Intrinsic => c.siit.flags |= XLAT_EAM_HAIRPIN,
            }
        }
    }
    let (lo4, hi4, lo6, hi6) = eam_span(&cfg.eamt);
    c.eam4_lo = lo4.to_be_bytes();
    c.eam4_hi = hi4.to_be_bytes();
    c.eam6_lo = lo6.to_be_bytes();
    c.eam6_hi = hi6.to_be_bytes();
    let eamt = cfg.eamt.iter().map(|&(p6, p4)| (p6, p4, eam(p6, p4))).collect();
    Ok((c, eamt))
}

/// The lowest and highest IPv4 and IPv6 address the EAMT covers (an
/// empty span, lo > hi, when it has no entry).
fn eam_span(eamt: &[(Prefix6, Prefix4)]) -> (u32, u32, u128, u128) {
    let mut s = (u32::MAX, 0u32, u128::MAX, 0u128);
    for (p6, p4) in eamt {
        let a4 = u32::from(p4.addr());
        let m4 = u32::MAX.checked_shr(u32::from(p4.len())).unwrap_or(0);
        let a6 = u128::from(p6.addr());
        let m6 = u128::MAX.checked_shr(u32::from(p6.len())).unwrap_or(0);
        s.0 = s.0.min(a4);
        s.1 = s.1.max(a4 | m4);
        s.2 = s.2.min(a6);
        s.3 = s.3.max(a6 | m6);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7757_appendix_b_shift() {
        // 192.0.2.128/26 <-> 2001:db8:dddd::/64: 6 suffix bits go right
        // after the /64, i.e. at bit position 64 - 6 = 58 from the right.
        let e = eam("2001:db8:dddd::/64".parse().unwrap(), "192.0.2.128/26".parse().unwrap());
        assert_eq!(e.shift, 58);
        assert_eq!((e.len4, e.len6), (26, 64));
        // An IPv4 /32 has no suffix; the shift is whatever is left.
        let e = eam("2001:db8::1/128".parse().unwrap(), "198.51.100.1/32".parse().unwrap());
        assert_eq!(e.shift, 0);
    }

    #[test]
    fn pool6_flags_and_mtus() {
        let cfg = SiitConfig {
            pool6: Some("64:ff9b::/96".parse().unwrap()),
            lowest_ipv6_mtu: 1400,
            ipv6_mtu: 1350,
            reset_tos: true,
            new_tos: 0x20,
            ..SiitConfig::default()
        };
        let (c, eamt) = siit(Config::default(), &cfg).unwrap();
        assert!(eamt.is_empty());
        assert_eq!(c.pool6_len, 96);
        assert_eq!(c.siit.flags, XLAT_ON | XLAT_RESET_TOS | XLAT_POOL6_WKP);
        assert_eq!((c.siit.new_tos, c.siit.frag_mtu, c.siit.ipv6_mtu), (0x20, 1350, 1350));
    }

    #[test]
    fn invalid_config_is_refused() {
        let cfg = SiitConfig { pool6: Some("2001:db8::/33".parse().unwrap()), ..SiitConfig::default() };
        assert!(matches!(siit(Config::default(), &cfg), Err(Error::Config(_))));
    }

    #[test]
    fn eam_span_covers_every_entry_whatever_the_length() {
        let e = |a: &str, b: &str| (a.parse::<Prefix6>().unwrap(), b.parse::<Prefix4>().unwrap());
        let (lo4, hi4, lo6, hi6) =
            eam_span(&[e("2001:db8::1/128", "198.51.100.1/32"), e("2001:db8:6::/120", "192.0.2.0/24")]);
        assert_eq!((lo4, hi4), (u32::from_be_bytes([192, 0, 2, 0]), u32::from_be_bytes([198, 51, 100, 1])));
        assert_eq!(lo6, u128::from("2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap()));
        assert_eq!(hi6, u128::from("2001:db8:6::ff".parse::<std::net::Ipv6Addr>().unwrap()));
        let (lo4, hi4, lo6, hi6) = eam_span(&[e("::/0", "0.0.0.0/0")]);
        assert_eq!((lo4, hi4, lo6, hi6), (0, u32::MAX, 0, u128::MAX));
        let (lo4, hi4, _, _) = eam_span(&[]);
        assert!(lo4 > hi4, "empty span");
    }

    #[test]
    fn ivi_gives_no_prefix() {
        let cfg = SiitConfig {
            pool6: Some("2001:db8::/32".parse().unwrap()),
            mapping: MappingMode::Ivi,
            eamt: vec![("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap())],
            ..SiitConfig::default()
        };
        let (c, eamt) = siit(Config::default(), &cfg).unwrap();
        assert_eq!((c.eam4_lo, c.eam4_hi), ([198, 51, 100, 0], [198, 51, 100, 255]));
        assert_eq!(std::net::Ipv6Addr::from(c.eam6_lo), "2001:db8:6::".parse::<std::net::Ipv6Addr>().unwrap());
        assert_eq!(std::net::Ipv6Addr::from(c.eam6_hi), "2001:db8:6::ff".parse::<std::net::Ipv6Addr>().unwrap());
        assert_eq!(c.pool6_len, 0);
        assert_eq!(eamt.len(), 1);
        assert_eq!(c.siit.flags & (XLAT_HAVE_EAMT | XLAT_EAM_HAIRPIN), XLAT_HAVE_EAMT | XLAT_EAM_HAIRPIN);
    }
}
