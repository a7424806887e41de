//! Entry point: the admin API's request-target parsing (path, query
//! parameters, percent-decoding, transport addresses, protocols). Any
//! bytes get a value or an error — never a panic.
#![no_main]

use gate::daemon::admin::{parse_proto, parse_transport, split_query};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(url) = std::str::from_utf8(data) else { return };
    let (path, params) = split_query(url);
    assert!(url.starts_with(path));
    for (k, v) in &params {
        match k.as_str() {
            "proto" => drop(parse_proto(v)),
            _ => drop(parse_transport(v)),
        }
    }
});
