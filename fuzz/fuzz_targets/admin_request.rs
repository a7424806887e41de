//! Entry point: the admin API's request parsing: the request target (path,
//! query parameters, percent-decoding, transport addresses, protocols) and
//! the access checks over header bytes (Host, Origin, Authorization). Any
//! bytes get a value or an error — never a panic.
#![no_main]

use gate::config::AdminConfig;
use gate::daemon::admin::access::{self, check, host_allowed, origin_allowed, split_host, token_ok};
use gate::daemon::admin::{parse_proto, parse_transport, split_query, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let local = "127.0.0.1:9164".parse().unwrap();
    let limits = Limits::of(&AdminConfig::default());
    // The same bytes as Host, Origin and Authorization headers.
    let r = access::Request {
        method_changes_state: data.first().is_some_and(|b| b & 1 == 1),
        host: Some(data),
        host_count: data.first().map_or(0, |b| usize::from(b >> 6)),
        target_scheme: std::str::from_utf8(data).ok(),
        target_authority: std::str::from_utf8(data).ok(),
        origin: Some(data),
        authorization: Some(data),
        peer: "127.0.0.1".parse().unwrap(),
        local,
    };
    let _ = check(&r, Some("fuzz-token-0123456789"), &limits);
    let _ = token_ok(Some(data), "fuzz-token-0123456789");
    let Ok(url) = std::str::from_utf8(data) else { return };
    if let Some((name, _)) = split_host(url) {
        assert!(url.contains(name));
    }
    let _ = host_allowed(url, local, &[]);
    let _ = origin_allowed(url, local, &[]);
    let (path, params) = split_query(url);
    assert!(url.starts_with(path));
    for (k, v) in &params {
        match k.as_str() {
            "proto" => drop(parse_proto(v)),
            _ => drop(parse_transport(v)),
        }
    }
});
