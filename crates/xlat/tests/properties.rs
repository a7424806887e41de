//! Property tests: translation round trips keep payload and semantics,
//! every emitted packet is valid according to an independent parser
//! (etherparse), and no input of any shape panics.

mod common;
use common::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::siit::{Config, EamHairpinMode, MappingMode, Translator};
use xlat::{Out, PacketKind, Verdict};

fn cfg() -> Config {
    // No hairpinning: the round trip sends the IPv6 result straight back.
    Config { eam_hairpin_mode: EamHairpinMode::Off, ..config() }
}

#[derive(Debug, Clone)]
enum L4 {
    Udp(u16, u16),
    Tcp(u16, u16, u8),
    Echo(bool, u16, u16),
}

fn l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| L4::Udp(a, b)),
        (any::<u16>(), any::<u16>(), any::<u8>()).prop_map(|(a, b, f)| L4::Tcp(a, b, f)),
        (any::<bool>(), any::<u16>(), any::<u16>()).prop_map(|(r, i, s)| L4::Echo(r, i, s)),
    ]
}

fn v4_packet(h4: u8, h6: u8, tos: u8, ttl: u8, l4: &L4, data: &[u8]) -> Vec<u8> {
    let mut v = V4::new(0, "192.0.2.1", "198.51.100.1");
    v.src = Ipv4Addr::new(192, 0, 2, h4);
    v.dst = Ipv4Addr::new(198, 51, 100, h6);
    v.tos = tos;
    v.ttl = ttl;
    match *l4 {
        L4::Udp(a, b) => V4 { proto: 17, ..v }.udp(a, b, data),
        L4::Tcp(a, b, f) => V4 { proto: 6, ..v }.tcp(a, b, f, data),
        L4::Echo(req, i, s) => {
            let [i0, i1] = i.to_be_bytes();
            let [s0, s1] = s.to_be_bytes();
            V4 { proto: 1, ..v }.icmp(if req { 8 } else { 0 }, 0, [i0, i1, s0, s1], data)
        }
    }
}

fn v6_packet(h6: u8, h4: u8, tc: u8, hop: u8, l4: &L4, data: &[u8]) -> Vec<u8> {
    let src = Ipv6Addr::from(u128::from(a6("2001:db8:6::")) | u128::from(h6));
    let dst = xlat::addr::Rfc6052::new("2001:db8:100::/40".parse().unwrap())
        .unwrap()
        .embed(Ipv4Addr::new(192, 0, 2, h4))
        .unwrap();
    let v = V6 { tc, flow: 0x12345, hop, next: 0, src, dst };
    match *l4 {
        L4::Udp(a, b) => V6 { next: 17, ..v }.udp(a, b, data),
        L4::Tcp(a, b, f) => V6 { next: 6, ..v }.tcp(a, b, f, data),
        L4::Echo(req, i, s) => {
            let [i0, i1] = i.to_be_bytes();
            let [s0, s1] = s.to_be_bytes();
            V6 { next: 58, ..v }.icmp(if req { 128 } else { 129 }, 0, [i0, i1, s0, s1], data)
        }
    }
}

/// Translate expecting exactly one forwarded, valid packet.
fn xlat_one(t: &Translator, out: &mut Out, pkt: &[u8]) -> Vec<u8> {
    assert_eq!(t.translate(pkt, out), Verdict::Emit);
    assert_eq!(out.len(), 1);
    let (kind, p) = out.get(0).unwrap();
    assert_eq!(kind, PacketKind::Forward);
    check(p);
    p.to_vec()
}

/// Transport bytes with the checksum field blanked (the checksum is
/// checked separately by `check`; ones'-complement has two zeros).
fn l4_sans_checksum(proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut b = l4.to_vec();
    let at = match proto {
        17 => 6,
        6 => 16,
        _ => 2,
    };
    b[at] = 0;
    b[at + 1] = 0;
    if proto == 1 || proto == 58 {
        b[0] = 0; // ICMP type differs between the families
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn v4_v6_v4_round_trip(h4 in 1u8..255, h6 in 1u8..255, tos: u8, ttl in 3u8..=255, l4 in l4(),
                           data in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let t = Translator::new(cfg()).unwrap();
        let mut out = Out::new();
        let orig = v4_packet(h4, h6, tos, ttl, &l4, &data);
        let six = xlat_one(&t, &mut out, &orig);
        prop_assert_eq!(six[7], ttl - 1);
        prop_assert_eq!(six.len(), orig.len() + 20);
        let back = xlat_one(&t, &mut out, &six);
        // Same addresses, protocol, TOS, payload; TTL down by two routers.
        prop_assert_eq!(&back[12..20], &orig[12..20]);
        prop_assert_eq!(back[9], orig[9]);
        prop_assert_eq!(back[1], orig[1]);
        prop_assert_eq!(back[8], ttl - 2);
        prop_assert_eq!(back.len(), orig.len());
        prop_assert_eq!(l4_sans_checksum(orig[9], &back[20..]), l4_sans_checksum(orig[9], &orig[20..]));
        prop_assert_eq!(back[20], orig[20]); // ICMP type restored too
    }

    #[test]
    fn v6_v4_v6_round_trip(h6 in 1u8..255, h4 in 1u8..255, tc: u8, hop in 3u8..=255, l4 in l4(),
                           data in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let t = Translator::new(cfg()).unwrap();
        let mut out = Out::new();
        let orig = v6_packet(h6, h4, tc, hop, &l4, &data);
        let four = xlat_one(&t, &mut out, &orig);
        let back = xlat_one(&t, &mut out, &four);
        prop_assert_eq!(&back[8..40], &orig[8..40]);
        prop_assert_eq!(back[6], orig[6]);
        prop_assert_eq!(back[7], hop - 2);
        // Traffic class survives; the flow label does not (RFC 7915 §4.1).
        prop_assert_eq!((back[0], back[1] & 0xf0), (orig[0], orig[1] & 0xf0));
        prop_assert_eq!(&back[1..4], &[orig[1] & 0xf0, 0, 0][..]);
        prop_assert_eq!(back.len(), orig.len());
        prop_assert_eq!(l4_sans_checksum(orig[6], &back[40..]), l4_sans_checksum(orig[6], &orig[40..]));
        prop_assert_eq!(back[40], orig[40]);
    }

    #[test]
    fn fragmentation_preserves_the_datagram(len in 1500usize..4000, tcp: bool, mtu in 1280u16..1500) {
        // DF=0 IPv4 → IPv6 fragments → each back to IPv4: the reassembled
        // IPv4 payload equals the original. (ICMP is excluded: fragmented
        // ICMPv6 cannot be translated statelessly.)
        let l4 = if tcp { L4::Tcp(1, 2, 0x18) } else { L4::Udp(3, 4) };
        let t = Translator::new(Config { lowest_ipv6_mtu: mtu, ..cfg() }).unwrap();
        let mut out = Out::new();
        let data = vec![0x5au8; len];
        let mut orig = v4_packet(1, 2, 0, 64, &l4, &data);
        orig[6] &= !0x40; // clear DF
        let c = { orig[10] = 0; orig[11] = 0; csum(&[&orig[..20]]) };
        orig[10..12].copy_from_slice(&c.to_be_bytes());
        prop_assert_eq!(t.translate(&orig, &mut out), Verdict::Emit);
        let frags: Vec<Vec<u8>> = out.iter().map(|(_, p)| p.to_vec()).collect();
        prop_assert!(frags.len() >= 2);
        let mut payload = vec![0u8; orig.len() - 20];
        let mut seen = 0;
        let mut back_out = Out::new();
        for f in &frags {
            check(f);
            prop_assert!(f.len() <= usize::from(mtu));
            let b = xlat_one(&t, &mut back_out, f);
            let off = usize::from(u16::from_be_bytes([b[6], b[7]]) & 0x1fff) * 8;
            payload[off..off + b.len() - 20].copy_from_slice(&b[20..]);
            seen += b.len() - 20;
        }
        prop_assert_eq!(seen, payload.len());
        prop_assert_eq!(l4_sans_checksum(orig[9], &payload), l4_sans_checksum(orig[9], &orig[20..]));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let t = Translator::new(cfg()).unwrap();
        let mut out = Out::new();
        let v = t.translate(&data, &mut out);
        if v == Verdict::Emit { for (_, p) in out.iter() { check_ip(p); } }
    }

    #[test]
    fn mutated_packets_never_panic_and_emit_well_formed_ip(
        l4 in l4(), six: bool, data in proptest::collection::vec(any::<u8>(), 0..300),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(), ivi: bool,
    ) {
        let c = if ivi {
            Config { pool6: Some("2001:db8::/32".parse().unwrap()), mapping: MappingMode::Ivi, ..cfg() }
        } else { cfg() };
        let t = Translator::new(c).unwrap();
        let mut out = Out::new();
        let mut pkt = if six { v6_packet(3, 4, 0, 64, &l4, &data) } else { v4_packet(3, 4, 0, 64, &l4, &data) };
        for (at, x) in flips { let n = pkt.len(); pkt[at % n] ^= x; }
        let n = pkt.len();
        pkt.truncate(cut % (n + 1));
        if t.translate(&pkt, &mut out) == Verdict::Emit {
            for (_, p) in out.iter() { check_ip(p); }
        }
    }

    #[test]
    fn icmp_errors_quoting_random_packets_stay_valid(l4 in l4(), data in proptest::collection::vec(any::<u8>(), 0..1500),
                                                   code in 0u8..16, kind in prop::sample::select(vec![3u8, 11, 12])) {
        let t = Translator::new(cfg()).unwrap();
        let mut out = Out::new();
        let mut quoted = v4_packet(7, 9, 0, 63, &l4, &data);
        // The quoted packet goes from the IPv6 host's image to the IPv4 host.
        quoted[12..16].copy_from_slice(&[198, 51, 100, 9]);
        quoted[16..20].copy_from_slice(&[192, 0, 2, 7]);
        let err = V4::new(1, "192.0.2.254", "198.51.100.9").icmp(kind, code, [8, 0, 0, 0], &quoted[..quoted.len().min(548)]);
        if t.translate(&err, &mut out) == Verdict::Emit {
            for (_, p) in out.iter() { check(p); prop_assert!(p.len() <= 1280); }
        }
    }
}
