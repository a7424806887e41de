//! Entry point: `xlat::siit::Translator::translate` on arbitrary bytes, with
//! an RFC 6052 + EAMT + RFC 6791 configuration (intrinsic EAM hairpinning),
//! an IVI configuration and two small-MTU configurations (fragmentation,
//! Fragmentation Needed and Packet Too Big; simple hairpinning and dropped
//! zero UDP checksums; an EAMT-only one that fragments IPv6 fragments again).
//! Every emitted packet must at least carry a consistent IP length field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use xlat::siit::{Config, EamHairpinMode, MappingMode, Translator, UdpChecksumZero};
use xlat::{Out, Verdict};

fn translators() -> &'static [Translator; 4] {
    static T: OnceLock<[Translator; 4]> = OnceLock::new();
    T.get_or_init(|| {
        let eam = vec![("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap())];
        [
            Translator::new(Config {
                pool6: Some("2001:db8:100::/40".parse().unwrap()),
                eamt: eam.clone(),
                rfc6791_v4: Some("203.0.113.0/28".parse().unwrap()),
                rfc6791_v6: Some("2001:db8:ee::/96".parse().unwrap()),
                ..Config::default()
            })
            .unwrap(),
            Translator::new(Config {
                pool6: Some("2001:dba::/32".parse().unwrap()),
                mapping: MappingMode::Ivi,
                ..Config::default()
            })
            .unwrap(),
            Translator::new(Config {
                pool6: Some("64:ff9b::/96".parse().unwrap()),
                eamt: eam.clone(),
                ipv4_mtu: 68,
                ipv6_mtu: 1280,
                amend_udp_checksum_zero: UdpChecksumZero::Drop,
                eam_hairpin_mode: EamHairpinMode::Simple,
                ..Config::default()
            })
            .unwrap(),
            Translator::new(Config {
                eamt: eam,
                ipv4_mtu: 576,
                ipv6_mtu: 1280,
                refragment_ipv6_fragments: true,
                ..Config::default()
            })
            .unwrap(),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let mut out = Out::new();
    for t in translators() {
        if t.translate(data, &mut out) == Verdict::Emit {
            assert!(!out.is_empty());
            for (_, p) in out.iter() {
                match p[0] >> 4 {
                    4 => assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len()),
                    6 => assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])) + 40, p.len()),
                    v => panic!("emitted version {v}"),
                }
            }
        } else {
            assert!(out.is_empty());
        }
    }
});
