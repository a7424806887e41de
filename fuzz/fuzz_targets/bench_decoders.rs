//! Entry point: what the bench tester and its ng client decode from the
//! network: RTP probe packets, ng replies (cookie + bencode), SDP bodies.
#![no_main]

use bench::ng::{parse_message, sdp_audio_addr, Value};
use bench::probe::Probe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(p) = Probe::parse(data) {
        let mut b = [0u8; bench::probe::LEN];
        p.write(&mut b);
        assert_eq!(Probe::parse(&b), Some(p));
    }
    if let Ok((_, v)) = parse_message(data) {
        let mut out = Vec::new();
        v.encode(&mut out);
        assert_eq!(Value::decode(&out).ok(), Some(v.clone()));
        let _ = v.to_string();
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = sdp_audio_addr(s);
    }
});
