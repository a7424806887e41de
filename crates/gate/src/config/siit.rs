//! `[siit]`: the RFC 7915 stateless translator's table (keys, Jool
//! aliases, the two EAMT syntaxes) read into [`xlat::siit::Config`].

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

use confval::Alias;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;
use xlat::siit::{self, EamHairpinMode, MappingMode, UdpChecksumZero};

use super::{parse_addr, parse_prefix, Error};

/// Every key of the `[siit]` table, in their canonical spelling (Jool's
/// names in [`SIIT_ALIASES`] are not listed).
pub const SIIT_KEYS: &[&str] = &[
    "pool6",
    "mapping",
    "eamt",
    "eam-hairpinning",
    "rfc6791v4-prefix",
    "rfc6791v6-prefix",
    "lowest-ipv6-mtu",
    "amend-udp-checksum-zero",
    "refragment-ipv6-fragments",
    "reset-traffic-class",
    "reset-tos",
    "new-tos",
    "mtu-plateaus",
    "ipv4-mtu",
    "ipv6-mtu",
    "ipv4-address",
    "ipv6-address",
];

/// Jool's names of `[siit]` keys that v6gate spells differently, accepted
/// as equals: first-class synonyms, not deprecated, so no warning (a
/// file may not set both names of one key).
pub const SIIT_ALIASES: &[Alias] = &[
    Alias::Synonym { name: "zeroize-traffic-class", key: "reset-traffic-class", of: "Jool" },
    Alias::Synonym { name: "override-tos", key: "reset-tos", of: "Jool" },
    Alias::Synonym { name: "tos", key: "new-tos", of: "Jool" },
    Alias::Synonym { name: "eam-hairpin-mode", key: "eam-hairpinning", of: "Jool" },
    Alias::Synonym { name: "rfc6791_v4", key: "rfc6791v4-prefix", of: "Jool" },
    Alias::Synonym { name: "rfc6791_v6", key: "rfc6791v6-prefix", of: "Jool" },
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
pub(super) struct SiitToml {
    pool6: Option<Spanned<String>>,
    mapping: Option<MappingToml>,
    #[serde(default)]
    eamt: Vec<EamToml>,
    eam_hairpinning: Option<Choice<EamHairpinMode>>,
    rfc6791v4_prefix: Option<Spanned<String>>,
    rfc6791v6_prefix: Option<Spanned<String>>,
    lowest_ipv6_mtu: Option<u16>,
    amend_udp_checksum_zero: Option<Choice<UdpChecksumZero>>,
    refragment_ipv6_fragments: Option<bool>,
    reset_traffic_class: Option<bool>,
    reset_tos: Option<bool>,
    new_tos: Option<u8>,
    mtu_plateaus: Option<Vec<u16>>,
    ipv4_mtu: Option<u16>,
    ipv6_mtu: Option<u16>,
    ipv4_address: Option<Spanned<String>>,
    ipv6_address: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum MappingToml {
    Rfc6052,
    Ivi,
}

/// One EAMT entry, written either as `{ ipv6 = "...", ipv4 = "..." }` (also
/// with Jool's key names `"ipv6 prefix"` / `"ipv4 prefix"`) or as
/// `["IPV6-PREFIX", "IPV4-PREFIX"]`.
#[derive(Debug)]
struct EamToml {
    ipv6: Spanned<String>,
    ipv4: Spanned<String>,
}

impl<'de> Deserialize<'de> for EamToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EamToml;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"an EAMT entry: { ipv6 = "IPV6-PREFIX", ipv4 = "IPV4-PREFIX" } or ["IPV6-PREFIX", "IPV4-PREFIX"]"#)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EamToml, A::Error> {
                let ipv6 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let ipv4 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let mut n = 2;
                while seq.next_element::<de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                if n != 2 {
                    return Err(de::Error::invalid_length(n, &self));
                }
                Ok(EamToml { ipv6, ipv4 })
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EamToml, A::Error> {
                let (mut ipv6, mut ipv4) = (None, None);
                while let Some(k) = map.next_key::<String>()? {
                    // Jool's JSON spells them "ipv6 prefix" / "ipv4 prefix".
                    let slot = match k.as_str() {
                        "ipv6" | "ipv6 prefix" | "ipv6-prefix" => &mut ipv6,
                        "ipv4" | "ipv4 prefix" | "ipv4-prefix" => &mut ipv4,
                        _ => return Err(de::Error::unknown_field(&k, &["ipv6", "ipv4", "ipv6 prefix", "ipv4 prefix"])),
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom(format_args!("duplicate key `{k}`")));
                    }
                    *slot = Some(map.next_value()?);
                }
                Ok(EamToml {
                    ipv6: ipv6.ok_or_else(|| de::Error::missing_field("ipv6"))?,
                    ipv4: ipv4.ok_or_else(|| de::Error::missing_field("ipv4"))?,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A key that takes `true`/`false` or one of a few words, as Jool's enum
/// keys do (`eam-hairpin-mode`, and `amend-udp-checksum-zero` with v6gate's
/// third choice).
#[derive(Debug)]
struct Choice<T>(T);

trait Choices: Sized + Copy + 'static {
    /// What the key accepts, for the error message.
    const EXPECTING: &'static str;
    /// The words and what they mean.
    const WORDS: &'static [(&'static str, Self)];
    /// What `true` and `false` mean.
    fn from_bool(b: bool) -> Self;
}

impl Choices for EamHairpinMode {
    const EXPECTING: &'static str = r#"true, false, "off", "simple" or "intrinsic""#;
    const WORDS: &'static [(&'static str, Self)] = &[
        ("off", EamHairpinMode::Off),
        ("none", EamHairpinMode::Off),
        ("simple", EamHairpinMode::Simple),
        ("intrinsic", EamHairpinMode::Intrinsic),
    ];
    fn from_bool(b: bool) -> Self {
        if b {
            EamHairpinMode::Intrinsic
        } else {
            EamHairpinMode::Off
        }
    }
}

impl Choices for UdpChecksumZero {
    const EXPECTING: &'static str = r#"true, false, "drop", "compute" or "hold""#;
    const WORDS: &'static [(&'static str, Self)] =
        &[("drop", UdpChecksumZero::Drop), ("compute", UdpChecksumZero::Compute), ("hold", UdpChecksumZero::Hold)];
    fn from_bool(b: bool) -> Self {
        if b {
            UdpChecksumZero::Compute
        } else {
            UdpChecksumZero::Drop
        }
    }
}

impl<'de, T: Choices> Deserialize<'de> for Choice<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(core::marker::PhantomData<T>);
        impl<'de, T: Choices> Visitor<'de> for V<T> {
            type Value = Choice<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Choice<T>, E> {
                Ok(Choice(T::from_bool(b)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Choice<T>, E> {
                match T::WORDS.iter().find(|(w, _)| *w == v) {
                    Some(&(_, c)) => Ok(Choice(c)),
                    None => Err(de::Error::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V(core::marker::PhantomData))
    }
}

pub(super) fn siit_from_toml(text: &str, t: SiitToml) -> Result<siit::Config, Error> {
    let mut c = siit::Config::default();
    if let Some(p) = &t.pool6 {
        c.pool6 = Some(parse_prefix(text, "[siit] pool6", p)?);
    }
    if let Some(m) = t.mapping {
        c.mapping = match m {
            MappingToml::Rfc6052 => MappingMode::Rfc6052,
            MappingToml::Ivi => MappingMode::Ivi,
        };
    }
    for (i, e) in t.eamt.iter().enumerate() {
        let p6 = parse_prefix(text, &format!("[siit] eamt[{i}].ipv6"), &e.ipv6)?;
        let p4 = parse_prefix(text, &format!("[siit] eamt[{i}].ipv4"), &e.ipv4)?;
        c.eamt.push((p6, p4));
    }
    if let Some(v) = &t.rfc6791v4_prefix {
        c.rfc6791_v4 = Some(parse_prefix(text, "[siit] rfc6791v4-prefix", v)?);
    }
    if let Some(v) = &t.rfc6791v6_prefix {
        c.rfc6791_v6 = Some(parse_prefix(text, "[siit] rfc6791v6-prefix", v)?);
    }
    if let Some(v) = &t.ipv4_address {
        c.ipv4_address = parse_addr::<Ipv4Addr>(text, "[siit] ipv4-address", v, "IPv4")?;
    }
    if let Some(v) = &t.ipv6_address {
        c.ipv6_address = Some(parse_addr::<Ipv6Addr>(text, "[siit] ipv6-address", v, "IPv6")?);
    }
    let set = |dst: &mut bool, v: Option<bool>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    if let Some(Choice(m)) = t.eam_hairpinning {
        c.eam_hairpin_mode = m;
    }
    if let Some(Choice(m)) = t.amend_udp_checksum_zero {
        c.amend_udp_checksum_zero = m;
    }
    set(&mut c.refragment_ipv6_fragments, t.refragment_ipv6_fragments);
    set(&mut c.reset_traffic_class, t.reset_traffic_class);
    set(&mut c.reset_tos, t.reset_tos);
    if let Some(v) = t.new_tos {
        c.new_tos = v;
    }
    if let Some(v) = t.lowest_ipv6_mtu {
        c.lowest_ipv6_mtu = v;
    }
    if let Some(v) = t.mtu_plateaus {
        c.mtu_plateaus = v;
    }
    if let Some(v) = t.ipv4_mtu {
        c.ipv4_mtu = v;
    }
    if let Some(v) = t.ipv6_mtu {
        c.ipv6_mtu = v;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::assert_names;
    use crate::config::{Config, ErrorKind};
    use xlat::addr::{Prefix4, Prefix6};

    #[test]
    fn defaults_come_from_xlat() {
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n").unwrap().siit.unwrap();
        let d = siit::Config::default();
        assert_eq!(c.pool6, Some("64:ff9b:1::/96".parse().unwrap()));
        assert_eq!(c.mapping, MappingMode::Rfc6052);
        assert!(c.eamt.is_empty());
        assert_eq!(c.eam_hairpin_mode, EamHairpinMode::Intrinsic);
        assert_eq!(c.rfc6791_v4, None);
        assert_eq!(c.rfc6791_v6, None);
        assert_eq!(c.lowest_ipv6_mtu, 1280);
        assert_eq!(c.amend_udp_checksum_zero, UdpChecksumZero::Compute);
        assert!(!c.refragment_ipv6_fragments);
        assert!(!c.reset_traffic_class);
        assert!(!c.reset_tos);
        assert_eq!(c.new_tos, 0);
        assert_eq!(c.mtu_plateaus, d.mtu_plateaus);
        assert_eq!((c.ipv4_mtu, c.ipv6_mtu), (1500, 1500));
        assert_eq!(c.ipv4_address, Ipv4Addr::new(192, 0, 0, 8));
        assert_eq!(c.ipv6_address, None);
    }

    #[test]
    fn every_key_is_read() {
        let c = Config::parse(
            r#"
            [siit]
            pool6 = "2001:db8:100::/40"
            mapping = "ivi"
            eamt = [{ ipv6 = "2001:db8:6::/120", ipv4 = "192.0.2.0/24" }]
            eam-hairpinning = false
            rfc6791v4-prefix = "198.51.100.0/30"
            rfc6791v6-prefix = "2001:db8:ffff::/64"
            lowest-ipv6-mtu = 1400
            amend-udp-checksum-zero = "hold"
            refragment-ipv6-fragments = true
            reset-traffic-class = true
            reset-tos = true
            new-tos = 32
            mtu-plateaus = [1500, 1280, 576]
            ipv4-mtu = 1400
            ipv6-mtu = 9000
            ipv4-address = "203.0.113.1"
            ipv6-address = "2001:db8::1"
            "#,
        )
        .unwrap()
        .siit
        .unwrap();
        assert_eq!(c.mapping, MappingMode::Ivi);
        assert_eq!(c.eamt.len(), 1);
        assert_eq!(c.eam_hairpin_mode, EamHairpinMode::Off);
        assert_eq!(c.rfc6791_v4, Some("198.51.100.0/30".parse().unwrap()));
        assert_eq!(c.rfc6791_v6, Some("2001:db8:ffff::/64".parse().unwrap()));
        assert_eq!(c.lowest_ipv6_mtu, 1400);
        assert_eq!(c.amend_udp_checksum_zero, UdpChecksumZero::Hold);
        assert!(c.refragment_ipv6_fragments && c.reset_traffic_class && c.reset_tos);
        assert_eq!(c.new_tos, 32);
        assert_eq!(c.mtu_plateaus, vec![1500, 1280, 576]);
        assert_eq!((c.ipv4_mtu, c.ipv6_mtu), (1400, 9000));
        assert_eq!(c.ipv4_address, Ipv4Addr::new(203, 0, 113, 1));
        assert_eq!(c.ipv6_address, Some("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn jool_choice_keys() {
        let siit =
            |kv: &str| Config::parse(&format!("[siit]\npool6 = \"64:ff9b::/96\"\n{kv}\n")).unwrap().siit.unwrap();
        // Jool's eam-hairpin-mode, also under v6gate's eam-hairpinning.
        for (v, m) in [
            ("\"off\"", EamHairpinMode::Off),
            ("\"none\"", EamHairpinMode::Off),
            ("\"simple\"", EamHairpinMode::Simple),
            ("\"intrinsic\"", EamHairpinMode::Intrinsic),
            ("true", EamHairpinMode::Intrinsic),
            ("false", EamHairpinMode::Off),
        ] {
            assert_eq!(siit(&format!("eam-hairpin-mode = {v}")).eam_hairpin_mode, m, "{v}");
            assert_eq!(siit(&format!("eam-hairpinning = {v}")).eam_hairpin_mode, m, "{v}");
        }
        // Jool's amend-udp-checksum-zero true/false, and v6gate's "hold".
        for (v, m) in [
            ("false", UdpChecksumZero::Drop),
            ("true", UdpChecksumZero::Compute),
            ("\"drop\"", UdpChecksumZero::Drop),
            ("\"compute\"", UdpChecksumZero::Compute),
            ("\"hold\"", UdpChecksumZero::Hold),
        ] {
            assert_eq!(siit(&format!("amend-udp-checksum-zero = {v}")).amend_udp_checksum_zero, m, "{v}");
        }
        let base = "[siit]\npool6 = \"64:ff9b::/96\"\n";
        let e = assert_names(&format!("{base}eam-hairpin-mode = \"sometimes\"\n"), "[siit] eam-hairpin-mode");
        assert!(e.to_string().contains(r#""off", "simple" or "intrinsic""#), "{e}");
        assert_names(&format!("{base}amend-udp-checksum-zero = 1\n"), "[siit] amend-udp-checksum-zero");
        let e = Config::parse(&format!("{base}eam-hairpinning = true\neam-hairpin-mode = \"simple\"\n")).unwrap_err();
        assert!(e.to_string().contains("is Jool's name of `eam-hairpinning`, which is set too"), "{e}");
    }

    #[test]
    fn jool_underscore_aliases() {
        let c = Config::parse("[siit]\nrfc6791_v4 = \"192.0.2.0/30\"\nrfc6791_v6 = \"2001:db8::/64\"\n")
            .unwrap()
            .siit
            .unwrap();
        assert_eq!(c.rfc6791_v4, Some("192.0.2.0/30".parse().unwrap()));
        assert_eq!(c.rfc6791_v6, Some("2001:db8::/64".parse().unwrap()));
    }

    #[test]
    fn both_eamt_syntaxes() {
        let tables = Config::parse(
            r#"[siit]
            eamt = [
                { ipv6 = "2001:db8:6::/120", ipv4 = "192.0.2.0/24" },
                { ipv4 = "198.51.100.7", ipv6 = "2001:db8:7::7" },
            ]"#,
        )
        .unwrap();
        let pairs = Config::parse(
            r#"[siit]
            eamt = [["2001:db8:6::/120", "192.0.2.0/24"], ["2001:db8:7::7", "198.51.100.7"]]"#,
        )
        .unwrap();
        let want: Vec<(Prefix6, Prefix4)> = vec![
            ("2001:db8:6::/120".parse().unwrap(), "192.0.2.0/24".parse().unwrap()),
            ("2001:db8:7::7/128".parse().unwrap(), "198.51.100.7/32".parse().unwrap()),
        ];
        assert_eq!(tables.siit.unwrap().eamt, want);
        assert_eq!(pairs.siit.unwrap().eamt, want);
        // Array-of-tables form works too.
        let aot =
            Config::parse("[siit]\n[[siit.eamt]]\nipv6 = \"2001:db8:6::/120\"\nipv4 = \"192.0.2.0/24\"\n").unwrap();
        assert_eq!(aot.siit.unwrap().eamt, want[..1]);
        // Jool's key names.
        let jool = Config::parse(
            "[siit]\neamt = [{ \"ipv6 prefix\" = \"2001:db8:6::/120\", \"ipv4 prefix\" = \"192.0.2.0/24\" }]\n",
        )
        .unwrap();
        assert_eq!(jool.siit.unwrap().eamt, want[..1]);
    }

    #[test]
    fn bad_prefix_is_named() {
        let e = assert_names("[siit]\npool6 = \"2001:db8::1/32\"\n", "[siit] pool6");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert!(e.to_string().contains("bits set beyond its prefix length"), "{e}");
        assert_eq!(e.position(), Some((2, 9)));
        assert_names("[siit]\npool6 = \"192.0.2.0/24\"\n", "[siit] pool6");
        assert_names(
            "[siit]\npool6 = \"64:ff9b::/96\"\nrfc6791v4-prefix = \"192.0.2.0/33\"\n",
            "[siit] rfc6791v4-prefix",
        );
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nrfc6791_v6 = \"nope\"\n", "[siit] rfc6791_v6");
        assert_names("[siit]\neamt = [[\"2001:db8::/120\", \"192.0.2.1/24\"]]\n", "[siit] eamt[0].ipv4");
        assert_names(
            "[siit]\neamt = [{ ipv6 = \"2001:db8::1/120\", ipv4 = \"192.0.2.0/24\" }]\n",
            "[siit] eamt[0].ipv6",
        );
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nipv4-address = \"192.0.2\"\n", "[siit] ipv4-address");
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nipv6-address = \"192.0.2.1\"\n", "[siit] ipv6-address");
    }

    #[test]
    fn translator_errors_are_named() {
        // These are rejected by xlat's `Translator::new`, which names the key.
        let base = "[siit]\npool6 = \"64:ff9b:1::/96\"\nipv6-address = \"2001:db8::8\"\n";
        let e = assert_names(&format!("{base}lowest-ipv6-mtu = 1000\n"), "[siit] lowest-ipv6-mtu");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_names(&format!("{base}ipv6-mtu = 1000\n"), "[siit] ipv6-mtu");
        assert_names(&format!("{base}ipv4-mtu = 60\n"), "[siit] ipv4-mtu");
        assert_names(&format!("{base}mtu-plateaus = []\n"), "[siit] mtu-plateaus");
        assert_names("[siit]\nmapping = \"ivi\"\n", "[siit] pool6");
        assert_names("[siit]\nipv6-address = \"2001:db8::8\"\n", "[siit] pool6");
    }

    #[test]
    fn jool_header_names_are_synonyms() {
        let base = "[siit]\npool6 = \"64:ff9b::/96\"\n";
        let c =
            Config::parse(&format!("{base}zeroize-traffic-class = true\noverride-tos = true\ntos = 184\n")).unwrap();
        assert!(c.warnings().is_empty(), "Jool's names are not deprecated: {:?}", c.warnings());
        let s = c.siit.unwrap();
        assert!(s.reset_traffic_class && s.reset_tos);
        assert_eq!(s.new_tos, 184);
        // Both names of one key: an error naming Jool's, where it is.
        let e = assert_names(&format!("{base}new-tos = 1\ntos = 2\n"), "[siit] tos");
        assert!(e.to_string().contains("is Jool's name of `new-tos`, which is set too"), "{e}");
        assert_eq!(e.position(), Some((4, 1)));
        // A bad value under Jool's name is reported as written, where it was written.
        let e = assert_names(&format!("{base}tos = 300\n"), "[siit] tos");
        assert_eq!(e.position(), Some((3, 7)));
        let e = assert_names(&format!("{base}override-tos = \"yes\"\n"), "[siit] override-tos");
        assert_eq!(e.kind(), ErrorKind::Type);
    }
}
