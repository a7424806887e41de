//! Entry points: the tunnel parsers and decapsulators (RFC 3056 6to4,
//! RFC 4380 Teredo, RFC 2473 4in6/6in6), and re-encapsulation of whatever
//! they accept (the inner packet must round-trip through encap → decap).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, SocketAddrV4};
use xlat::tunnel::{ip4in6, sixto4, teredo};
use xlat::{Out, Verdict};

fuzz_target!(|data: &[u8]| {
    let mut out = Out::new();
    for policy in [
        sixto4::DecapPolicy::default(),
        sixto4::DecapPolicy { reject_private: false, strict_dst: false, ..Default::default() },
    ] {
        if let Ok(d) = sixto4::decap(data, &policy) {
            let inner = d.inner.to_vec();
            if sixto4::encap_to(&inner, d.outer_src, d.outer_dst, &Default::default(), &mut out) == Verdict::Emit {
                let (_, pkt) = out.get(0).unwrap();
                let again = sixto4::decap(
                    pkt,
                    &sixto4::DecapPolicy { reject_private: false, strict_dst: false, ..Default::default() },
                );
                assert_eq!(again.map(|d| d.inner.to_vec()).ok(), Some(inner));
            }
        }
    }
    if let Ok(p) = teredo::parse(data) {
        let _ = (p.is_bubble(), p.ipv6_packet().src());
    }
    if let Ok((src, dst, p)) = teredo::decap(data) {
        let inner = p.ipv6.to_vec();
        let s = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), src.port());
        if teredo::encap(&inner, s, dst, p.origin, &mut out) == Verdict::Emit {
            let (_, pkt) = out.get(0).unwrap();
            let (_, _, back) = teredo::decap(pkt).expect("own Teredo packet must decapsulate");
            assert_eq!(back.ipv6, &inner[..]);
            assert_eq!(back.origin, p.origin);
        }
    }
    if let Ok(d) = ip4in6::decap(data) {
        let _ = (d.src, d.dst, d.encap_limit, d.family);
    }
});
