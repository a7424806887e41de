//! Round trips: base64url contact encoding, and every message the builder
//! writes parses back to the same start line, headers and body.

use alg::emit::Builder;
use alg::msg::Message;
use alg::uri::{b64url_decode, b64url_encode};
use proptest::prelude::*;

proptest! {
    #[test]
    fn b64url_round_trips(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let e = b64url_encode(&data);
        prop_assert!(e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        prop_assert_eq!(b64url_decode(&e).unwrap(), data);
    }

    #[test]
    fn built_messages_parse_back(
        names in proptest::collection::vec("[A-Za-z][A-Za-z0-9-]{0,12}", 0..10),
        values in proptest::collection::vec("[ -~]{0,40}", 10),
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut b = Builder::new("MESSAGE sip:a@[2001:db8::1] SIP/2.0", 256);
        let mut want = Vec::new();
        for (n, v) in names.iter().zip(&values) {
            if n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("l") {
                continue;
            }
            let v = v.trim();
            b.header(n, v);
            want.push((n.clone(), v.to_string()));
        }
        let data = b.finish(&body);
        let m = Message::parse_datagram(&data).unwrap();
        prop_assert_eq!(m.method(), Some("MESSAGE"));
        prop_assert_eq!(m.body, &body[..]);
        let got: Vec<(String, String)> = m.headers.iter().filter(|h| h.name != alg::msg::Name::ContentLength).map(|h| (h.raw_name.to_string(), h.value.to_string())).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_datagrams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(m) = Message::parse_datagram(&data) {
            let _ = m.validate();
            let _ = (m.top_via(), m.from_tag(), m.cseq(), m.vias());
        }
    }
}
