//! Entry point: what the bench testers and the ng client decode from the
//! network: RTP probe packets, test frames coming back from a DUT, ng
//! replies (cookie + the relay's bencode), SDP bodies.
#![no_main]

use bench::ng::parse_message;
use bench::ng::sdp_audio_addr;
use bench::tester::frame;
use bench::tester::probe::Probe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(p) = Probe::parse(data) {
        let mut b = [0u8; bench::tester::probe::LEN];
        p.write(&mut b);
        assert_eq!(Probe::parse(&b), Some(p));
    }
    if let Some(rx) = frame::decode(data) {
        assert_eq!(rx.magic & 0xffff_0000, frame::MAGIC_HI);
    }
    if let Ok((_, v)) = parse_message(data) {
        assert_eq!(trgw::bencode::decode(&v.encode()).ok(), Some(v.clone()));
        let _ = v.to_json();
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = sdp_audio_addr(s);
    }
});
