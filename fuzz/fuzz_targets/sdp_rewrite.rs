//! Entry point: the SDP parser and rewriter. Any body parses or is
//! refused with an error; a parsed body rewrites to one that parses again
//! with the same number of media sections and the new ports.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trgw::sdp::{MediaRewrite, Rewrite, Sdp};

fuzz_target!(|data: &[u8]| {
    let Ok(sdp) = Sdp::parse(data) else { return };
    let addr = if data.len() % 2 == 0 { "192.0.2.1".parse().unwrap() } else { "2001:db8::1".parse().unwrap() };
    let rw = Rewrite {
        media: sdp.media.iter().enumerate().map(|(i, m)| (m.port != 0).then_some(MediaRewrite { addr, port: 30000 + 2 * i as u16 })).collect(),
        origin: data.len() % 3 == 0,
        remove_ice: data.len() % 5 == 0,
    };
    let out = sdp.rewrite(&rw);
    let again = Sdp::parse(out.as_bytes()).expect("a rewritten body parses");
    assert_eq!(again.media.len(), sdp.media.len());
    for (i, m) in again.media.iter().enumerate() {
        if let Some(r) = rw.media[i] {
            assert_eq!(m.port, r.port);
            assert_eq!(again.media_addr(i), Some(addr));
        }
    }
});
