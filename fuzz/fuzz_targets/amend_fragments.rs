//! Entry point: `siit::amend` (fragment classification, completeness and
//! the zero-checksum amendment) on arbitrary fragment sets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xlat::siit::amend::{amend_udp_checksum_zero, classify, is_complete};

fuzz_target!(|data: &[u8]| {
    // Split the input into up to 8 "fragments" at 0xfe bytes.
    let mut frags: Vec<Vec<u8>> = data.split(|&b| b == 0xfe).take(8).map(|s| s.to_vec()).collect();
    for f in &frags {
        let _ = classify(f);
    }
    let complete = is_complete(&frags);
    if amend_udp_checksum_zero(&mut frags).is_ok() {
        assert!(complete);
    }
});
