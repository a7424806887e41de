//! Entry points: the tunnel encapsulators (RFC 3056 6to4, RFC 4380
//! Teredo, RFC 2473 4in6 with and without an MTU rule) on arbitrary inner
//! bytes. Whatever they accept must decapsulate back to the same inner
//! packet (or, for oversized 4in6 input, yield fragments / an ICMP error).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use xlat::tunnel::{ip4in6, sixto4, teredo};
use xlat::{Out, PacketKind, Verdict};

fuzz_target!(|data: &[u8]| {
    let mut out = Out::new();
    let (v4a, v4b) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 2));
    if sixto4::encap_to(data, v4a, v4b, &Default::default(), &mut out) == Verdict::Emit {
        let (_, pkt) = out.get(0).unwrap();
        let policy = sixto4::DecapPolicy { reject_private: false, strict_dst: false, ..Default::default() };
        if let Ok(d) = sixto4::decap(pkt, &policy) {
            assert_eq!(d.inner, data.get(..d.inner.len()).unwrap());
        }
    }
    let (s, d) = (SocketAddrV4::new(v4a, 3544), SocketAddrV4::new(v4b, 40000));
    if teredo::encap(data, s, d, Some(s), &mut out) == Verdict::Emit {
        let (_, pkt) = out.get(0).unwrap();
        let (_, _, p) = teredo::decap(pkt).expect("own Teredo packet must decapsulate");
        assert_eq!(p.origin, Some(s));
        assert_eq!(p.ipv6, data.get(..p.ipv6.len()).unwrap());
    }
    let (a6, b6): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
    for limit in [None, Some(4)] {
        if ip4in6::encap(data, a6, b6, 64, limit, true, &mut out) == Verdict::Emit {
            let (kind, pkt) = out.get(0).unwrap();
            assert_eq!(kind, PacketKind::Forward);
            let d = ip4in6::decap(pkt).expect("own 4in6 packet must decapsulate");
            assert_eq!(d.encap_limit, limit);
        }
    }
    let t = ip4in6::Tunnel { src: a6, dst: b6, hop_limit: 64, encap_limit: None, traffic_class_from_inner: false };
    let rule = ip4in6::MtuRule { mtu: 1280, icmp_src: Ipv4Addr::new(192, 0, 0, 2), frag_ident: 7, fragment_df: false };
    if ip4in6::encap_tunnel(data, &t, Some(&rule), &mut out) == Verdict::Emit {
        for (_, p) in out.iter() {
            assert!(p.len() <= 1280);
        }
    }
});
