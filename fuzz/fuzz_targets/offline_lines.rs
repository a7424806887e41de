//! Entry point: the `v6gate translate` line reader (hex decoding, the
//! JSON writer, the amend-udp-checksum-zero fragment holder) on arbitrary
//! input. Every non-blank, non-comment line gets exactly one JSON line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use xlat::siit::{Config, Translator, UdpChecksumZero};

fn translator() -> &'static Translator {
    static T: OnceLock<Translator> = OnceLock::new();
    T.get_or_init(|| {
        Translator::new(Config {
            pool6: Some("64:ff9b:1::/96".parse().unwrap()),
            eamt: vec![("2001:db8:6::/120".parse().unwrap(), "192.0.2.0/24".parse().unwrap())],
            amend_udp_checksum_zero: UdpChecksumZero::Hold,
            ..Config::default()
        })
        .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    gate::offline::translate_lines(translator(), data, &mut out, None).expect("writing to memory cannot fail");
    let expected = data
        .split(|&b| b == b'\n')
        .filter(|l| {
            let t = l.trim_ascii();
            !t.is_empty() && t[0] != b'#'
        })
        .count();
    let text = std::str::from_utf8(&out).expect("output is UTF-8");
    assert_eq!(text.lines().count(), expected);
    assert!(text.lines().all(|l| l.starts_with("{\"out\":[") && l.ends_with('}')));
});
