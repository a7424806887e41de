//! The lab's parser of untrusted bytes: its authoritative DNS responder
//! (`lab::services::Zone::answer`) may not panic. (The bench tester's frame
//! decoder, once here, is fuzzed by `bench_decoders` with the other bench
//! decoders.)
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lab::services::Zone::lab().answer(data);
});
