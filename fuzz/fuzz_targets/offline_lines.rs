//! Entry point: the `v6gate translate` line reader (hex decoding, the
//! JSON writer, the amend-udp-checksum-zero fragment holder, the stateful
//! NAT64 across lines and the `@advance` / `@set` directives) on arbitrary
//! input. Every non-blank, non-comment line gets exactly one JSON line.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// SIIT (holding zero-checksum UDP fragments) and a stateful NAT64 with
/// the daemon's dispatch, both reachable from fuzzed packets and @set.
const CONFIG: &str = r#"
[siit]
pool6 = "64:ff9b:1::/96"
eamt = [["2001:db8:6::/120", "192.0.2.0/24"]]
amend-udp-checksum-zero = "hold"
[nat64]
pool6 = "64:ff9b::/96"
pool4 = ["203.0.113.0/30"]
max-sessions = 64
max-bib = 64
shards = 1
"#;

fuzz_target!(|data: &[u8]| {
    let mut x = gate::offline::Offline::parse(CONFIG).expect("the fuzz configuration is valid");
    let mut out = Vec::new();
    gate::offline::translate_lines(&mut x, data, &mut out, None).expect("writing to memory cannot fail");
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
