//! Entry point: the SIP message views (datagram and stream framing, the
//! runner's incremental stream framer), validation, every header accessor
//! the ALG uses and where a body's SDP is (multipart). Nothing panics; a
//! message that validates has the five required headers readable; the
//! framer hands on only whole messages within its limit, whatever the
//! pieces the bytes come in; an SDP part lies within the body.
#![no_main]

use alg::msg::{addresses, Framing, Message, Name};
use alg::uri::Uri;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    for _ in 0..64 {
        match Message::parse(rest, true) {
            Ok(Framing::Message(m)) => {
                assert!(m.len > 0 && m.len <= rest.len());
                rest = &rest[m.len..];
            }
            Ok(Framing::KeepAlive(n)) => {
                assert!(n > 0 && n <= rest.len());
                rest = &rest[n..];
            }
            _ => break,
        }
        if rest.is_empty() {
            break;
        }
    }
    // The runner's framer, fed in pieces of 1..=16 bytes.
    let mut f = alg::stream::StreamFramer::default();
    let (mut out, mut at, step) = (0usize, 0usize, 1 + data.first().map_or(0, |b| usize::from(b % 16)));
    while at < data.len() {
        f.push(&data[at..(at + step).min(data.len())]);
        at += step;
        match f.next_message(4096) {
            Ok(Some(msg)) => {
                assert!(!msg.is_empty() && msg.len() <= 4096);
                out += msg.len();
                assert!(out <= data.len());
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
    let Ok(m) = Message::parse_datagram(data) else { return };
    if let alg::body::SdpBody::Part(r) = alg::body::sdp_body(&m) {
        assert!(r.start <= r.end && r.end <= m.body.len());
    }
    let ok = m.validate().is_ok();
    let _ = (m.top_via(), m.from_tag(), m.to_tag(), m.cseq(), m.vias(), m.max_forwards(), m.has_sdp());
    for n in [Name::Contact, Name::Route, Name::RecordRoute, Name::Path] {
        for h in m.all(n) {
            for a in addresses(&h.value) {
                let _ = Uri::parse(a.uri);
                let _ = a.tag();
            }
        }
    }
    if ok {
        assert!(m.cseq().is_some() && m.top_via().is_some() && !m.call_id().is_empty());
        if let alg::msg::Start::Request { uri, .. } = m.start {
            assert!(Uri::parse(uri).is_ok());
        }
    }
});
