//! Entry point: rtpengine ng message handling end to end without sockets
//! (cookie, bencode or JSON, every command, SDP rewrite, session state).
//! Input: up to 8 messages separated by NUL bytes, run against one state,
//! so offers, answers, queries and deletes of the same call interact.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use trgw::core::{Core, NullPlane};

fuzz_target!(|data: &[u8]| {
    let cfg = trgw::Config::from_toml_file_text(trgw::EXAMPLE_TOML).expect("example config");
    let mut core = Core::new(cfg, Box::new(NullPlane), Instant::now());
    for msg in data.split(|&b| b == 0).take(8) {
        if let Some(r) = trgw::ng::handle(&mut core, msg) {
            let sp = msg.iter().position(|&b| b == b' ').expect("a reply needs a cookie");
            assert!(r.starts_with(&msg[..=sp]), "reply echoes the cookie");
        }
    }
    let _ = core.relay_table();
    let second = Duration::from_secs(1);
    core.expire_after(Instant::now() + Duration::from_secs(3600), second, second);
    assert_eq!(core.call_count(), 0);
});
