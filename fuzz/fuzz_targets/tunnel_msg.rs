//! Entry points: the Teredo control messages and RFC 6081 trailers
//! (`xlat::tunnel::teredo_msg`) and the 6rd decapsulation checks
//! (`xlat::tunnel::sixrd`). Trailers that check must iterate to their end;
//! a decapsulated 6rd packet must re-encapsulate and decapsulate the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use xlat::tunnel::sixrd::{self, SixrdDomain, SixrdPolicy};
use xlat::tunnel::{sixto4, teredo, teredo_msg};
use xlat::wire::ipv6::Ipv6Packet;
use xlat::{Out, Verdict};

fuzz_target!(|data: &[u8]| {
    if teredo_msg::check_trailers(data).is_ok() {
        let mut used = 0;
        for t in teredo_msg::trailers(data) {
            let mut buf = [0u8; 64];
            match teredo_msg::write_trailer(&t, &mut buf, 0) {
                // A rewritten trailer is never longer than the one read
                // (alternate-address lists are cut to MAX_ALT_ADDRS).
                Ok(n) => used += n,
                Err(_) => {
                    assert!(matches!(t, teredo_msg::Trailer::Unknown(_)));
                    break;
                }
            }
        }
        assert!(used <= data.len());
    }
    if let Ok(p) = teredo::parse(data) {
        let v = p.ipv6_packet();
        let _ = (teredo_msg::parse_router_advertisement(&v), teredo_msg::parse_echo(&v));
        let _ = teredo_msg::is_router_solicitation(&v);
        let _ = teredo_msg::trailers(p.trailers).count();
    }
    if let Ok(v) = Ipv6Packet::new(data) {
        let _ = teredo_msg::parse_router_advertisement(&v);
        let _ = teredo_msg::parse_echo(&v);
    }
    let dom = SixrdDomain::new("2001:db8::/32".parse().unwrap(), 8, Ipv4Addr::new(10, 0, 0, 1)).unwrap();
    for pol in [
        SixrdPolicy { br: Some(Ipv4Addr::new(10, 0, 0, 1)), allow_native_dst: false, reject_private: false },
        SixrdPolicy { br: None, allow_native_dst: true, reject_private: false },
    ] {
        if let Ok(d) = sixrd::decap(data, &dom, &pol) {
            let inner = d.inner.to_vec();
            let mut out = Out::new();
            if sixto4::encap_to(&inner, d.outer_src, d.outer_dst, &Default::default(), &mut out) == Verdict::Emit {
                let again = sixrd::decap(out.get(0).unwrap().1, &dom, &pol).map(|d| d.inner.to_vec());
                assert_eq!(again.ok(), Some(inner));
            }
        }
    }
});
