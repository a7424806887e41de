//! The lab's parsers of untrusted bytes: the bench tester's frame decoder
//! (`lab::pkt::decode`, every frame the DUT sends back) and the lab's
//! authoritative DNS responder (`lab::services::Zone::answer`). Neither may
//! panic; a decoded frame re-encodes to the same payload fields.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(rx) = lab::pkt::decode(data) {
        assert_eq!(rx.magic & 0xffff_0000, lab::pkt::MAGIC_HI);
    }
    let _ = lab::services::Zone::lab().answer(data);
});
