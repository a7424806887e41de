//! Entry point: the TOML configuration parser and validator behind
//! `v6gate translate --config` and `v6gate config check`. Any text gets a
//! configuration or an error that says what is wrong — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match gate::config::Config::parse(text) {
        Ok(cfg) => {
            if cfg.check().is_ok() {
                if cfg.siit.is_some() {
                    cfg.siit_translator().expect("a checked configuration builds");
                }
                if cfg.nat64.is_some() {
                    cfg.nat64_translator().expect("a checked configuration builds");
                }
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
