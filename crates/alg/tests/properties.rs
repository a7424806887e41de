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

/// The plain byte-by-byte definition of splitting a list on the commas
/// outside quoted strings and angle brackets (the parser jumps between the
/// interesting bytes with memchr instead).
fn split_list_reference(v: &str) -> Result<Vec<std::ops::Range<usize>>, ()> {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i, mut angle) = (0, 0, false);
    while i < b.len() {
        match b[i] {
            b'"' => {
                // A quoted string: backslash escapes one byte (not a line
                // end), a quote ends it.
                let mut j = i + 1;
                loop {
                    match b.get(j) {
                        None => return Err(()),
                        Some(b'\\') if matches!(b.get(j + 1), None | Some(b'\r' | b'\n')) => return Err(()),
                        Some(b'\\') => j += 2,
                        Some(b'"') => break,
                        Some(_) => j += 1,
                    }
                }
                i = j + 1;
                continue;
            }
            b'<' if !angle => angle = true,
            b'>' if angle => angle = false,
            b',' if !angle => {
                out.push(start..i);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if angle {
        return Err(());
    }
    out.push(start..b.len());
    Ok(out)
}

/// `;a=b;c` parameters, the plain way (split, trim, compare).
fn find_param_reference<'a>(params: &'a str, name: &str) -> Option<Option<&'a str>> {
    params.split(';').map(|p| p.trim_matches(|c: char| c.is_ascii_whitespace())).filter(|p| !p.is_empty()).find_map(
        |p| {
            let (k, v) = match p.split_once('=') {
                Some((k, v)) => (k.trim_end(), Some(v.trim_start())),
                None => (p, None),
            };
            k.eq_ignore_ascii_case(name).then_some(v)
        },
    )
}

proptest! {
    #[test]
    fn split_list_agrees_with_the_byte_loop(v in "[a-c,<>\"\\\\; \r\n]{0,40}") {
        prop_assert_eq!(alg::uri::split_list(&v).ok(), split_list_reference(&v).ok());
    }

    #[test]
    fn find_param_agrees_with_split_and_trim(p in "[ab=; \t]{0,24}", name in "[abAB]{1,2}") {
        prop_assert_eq!(alg::uri::find_param(&p, &name), find_param_reference(&p, &name));
    }

    /// Request-URIs with parameters: accepted exactly when every parameter
    /// has a name.
    #[test]
    fn uri_params_need_names(params in "[;=ab]{0,10}") {
        let uri = format!("sip:u@h;x{params}");
        let named = format!(";x{params}").split(';').skip(1).all(|p| !p.split('=').next().unwrap_or("").is_empty());
        prop_assert_eq!(alg::uri::Uri::parse(&uri).is_ok(), named);
    }
}
