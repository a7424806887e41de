//! Entry point: rtpproxy command handling (UDP form with cookies and Unix
//! form without) against one session state, no sockets. Input: up to 8
//! commands separated by newlines. Every command gets a one-line reply.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use trgw::core::{Core, NullPlane};

fuzz_target!(|data: &[u8]| {
    let mut cfg = trgw::Config::from_toml_file_text(trgw::EXAMPLE_TOML).expect("example config");
    cfg.rtpproxy_internal = Some("v4".into());
    cfg.rtpproxy_external = Some("v6".into());
    let mut core = Core::new(cfg, Box::new(NullPlane), Instant::now());
    for (i, cmd) in data.split(|&b| b == b'\n').take(8).enumerate() {
        if let Some(r) = trgw::rtpproxy::handle(&mut core, cmd, i % 2 == 0) {
            assert_eq!(r.last(), Some(&b'\n'));
        }
    }
});
