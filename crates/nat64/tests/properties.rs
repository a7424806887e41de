//! Property tests: any UDP/TCP/ICMP flow from any IPv6 host goes out and
//! its reply comes back with the original addresses, ports (or identifier)
//! and payload; every emitted packet validates with etherparse.

#[path = "../../xlat/tests/common/mod.rs"]
mod common;

use common::{check, V4, V6};
use nat64::{Config, Nat64};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::{Out, PacketKind, Verdict};

fn nat(natpt: bool) -> Nat64 {
    let mut c: Config = toml::from_str(
        r#"
        pool6 = "2001:db8:64::/96"
        pool4 = ["192.0.2.0/30"]
        "#,
    )
    .unwrap();
    if natpt {
        c.mode = nat64::Mode::Natpt;
    }
    Nat64::new(c).unwrap()
}

fn one(n: &Nat64, p: &[u8]) -> Vec<u8> {
    let mut out = Out::new();
    assert_eq!(n.translate(p, 0, &mut out), Verdict::Emit);
    assert_eq!(out.len(), 1);
    let (k, b) = out.get(0).unwrap();
    assert_eq!(k, PacketKind::Forward);
    check(b);
    b.to_vec()
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn flow_round_trip(
        host in any::<u64>(),
        y in 0x0101_0101u32..0xdf00_0000,
        sport in 1u16..,
        dport in 1u16..,
        proto in 0usize..3,
        natpt in any::<bool>(),
        data in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let n = nat(natpt);
        let h6 = Ipv6Addr::from((0x2001_0db8_0000_0000u128 << 64) | u128::from(host.max(2)));
        let y4 = Ipv4Addr::from(y);
        prop_assume!(!xlat::addr::is_forbidden_v4(y4) && (y >> 8 != 0xc00002));
        let y6 = Ipv6Addr::from((0x2001_0db8_0064u128 << 80) | u128::from(y));
        let (hs, ys) = (h6.to_string(), y6.to_string());
        let (p, out6) = match proto {
            0 => (17, V6::new(17, &hs, &ys).udp(sport, dport, &data)),
            1 => (6, V6::new(6, &hs, &ys).tcp(sport, dport, 0x02, &data)),
            _ => (58, V6::new(58, &hs, &ys).icmp(128, 0, [(sport >> 8) as u8, sport as u8, 0, 7], &data)),
        };
        let v4 = one(&n, &out6);
        prop_assert_eq!(&v4[16..20], &y4.octets()[..]);
        let t4 = Ipv4Addr::new(v4[12], v4[13], v4[14], v4[15]);
        let t = be16(&v4, 20 + if p == 58 { 4 } else { 0 });
        if natpt && p != 58 {
            prop_assert_eq!(t, sport, "NAT-PT keeps ports");
        }
        let (ys4, ts) = (y4.to_string(), t4.to_string());
        let back = match p {
            17 => V4::new(17, &ys4, &ts).udp(dport, t, &data),
            6 => V4::new(6, &ys4, &ts).tcp(dport, t, 0x12, &data),
            _ => V4::new(1, &ys4, &ts).icmp(0, 0, [(t >> 8) as u8, t as u8, 0, 7], &data),
        };
        let b6 = one(&n, &back);
        prop_assert_eq!(&b6[24..40], &h6.octets()[..]);
        prop_assert_eq!(&b6[8..24], &y6.octets()[..]);
        if p == 58 {
            prop_assert_eq!(be16(&b6, 44), sport);
            prop_assert_eq!(&b6[48..], &data[..]);
        } else {
            prop_assert_eq!(be16(&b6, 40), dport);
            prop_assert_eq!(be16(&b6, 42), sport);
            let hl = if p == 17 { 8 } else { 20 };
            prop_assert_eq!(&b6[40 + hl..], &data[..]);
        }
    }
}
