//! RFC 7915 behaviours as hand-built packet vectors: input bytes →
//! expected bytes, each test named after the clause it checks.
//!
//! Network (see `common::config`): IPv4 hosts 192.0.2.0/24 reached through
//! pool6 2001:db8:100::/40; IPv6 hosts 2001:db8:6::/120 known to IPv4 as
//! 198.51.100.0/24 through the EAMT. The translator's own addresses are
//! 192.0.0.8 (RFC 7600) and its pool6 image 2001:db8:1c0:0:8::.

mod common;
use common::*;
use xlat::siit::{Config, EamHairpinMode, UdpChecksumZero};
use xlat::{DropReason, PacketKind, Verdict};

const H4: &str = "192.0.2.1"; // IPv4 host
const H4_AS6: &str = "2001:db8:1c0:2:1::"; // its RFC 6052 /40 image
const H6: &str = "2001:db8:6::5"; // IPv6 host
const H6_AS4: &str = "198.51.100.5"; // its EAM image
const XLAT6: &str = "2001:db8:1c0:0:8::"; // 192.0.0.8 through pool6

fn v4_to_h6(proto: u8) -> V4 {
    V4 { tos: 0xb8, ..V4::new(proto, H4, H6_AS4) }
}
fn v6_to_h4(next: u8) -> V6 {
    V6 { tc: 0xb8, flow: 0xabcde, ..V6::new(next, H6, H4_AS6) }
}
/// The IPv6 packet expected from `v4_to_h6` (TTL 64 → Hop Limit 63).
fn expect6(next: u8) -> V6 {
    V6 { tc: 0xb8, flow: 0, hop: 63, ..V6::new(next, H4_AS6, H6) }
}
/// The IPv4 packet expected from `v6_to_h4`: Identification from the
/// arena's counter (seed 0), DF clear for packets ≤ 1260 bytes.
fn expect4(proto: u8) -> V4 {
    V4 { tos: 0xb8, id: 0, df: false, ttl: 63, ..V4::new(proto, H6_AS4, H4) }
}

fn t() -> xlat::siit::Translator {
    xlat_with(config())
}

fn drop_reason(t: &xlat::siit::Translator, pkt: &[u8]) -> DropReason {
    match run(t, pkt).0 {
        Verdict::Drop(r) => r,
        Verdict::Emit => panic!("expected a drop"),
    }
}

// ---- §4.1 / §5.1 header translation --------------------------------------

#[test]
fn rfc7915_4_1_udp_header_fields() {
    let input = v4_to_h6(17).udp(1234, 53, b"hello translator");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect6(17).udp(1234, 53, b"hello translator")));
}

#[test]
fn rfc7915_4_1_tcp_header_fields() {
    let input = v4_to_h6(6).tcp(40000, 80, 0x02, b"");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect6(6).tcp(40000, 80, 0x02, b"")));
}

#[test]
fn rfc7915_4_1_other_protocols_pass_through() {
    // GRE (47): the payload is copied unchanged and Next Header = Protocol.
    let input = v4_to_h6(47).build(&[0, 0, 0x08, 0x00, 1, 2, 3, 4]);
    let expected = expect6(47).build(&[], &[0, 0, 0x08, 0x00, 1, 2, 3, 4]);
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
}

#[test]
fn rfc7915_4_1_reset_traffic_class() {
    let t = xlat_with(Config { reset_traffic_class: true, ..config() });
    let input = v4_to_h6(17).udp(1, 2, b"x");
    let expected = V6 { tc: 0, ..expect6(17) }.udp(1, 2, b"x");
    assert_eq!(hex(&one(&t, &input)), hex(&expected));
}

#[test]
fn rfc7915_5_1_udp_header_fields() {
    let input = v6_to_h4(17).udp(53, 1234, b"answer");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect4(17).udp(53, 1234, b"answer")));
}

#[test]
fn rfc7915_5_1_tcp_header_fields() {
    let input = v6_to_h4(6).tcp(80, 40000, 0x12, b"data");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect4(6).tcp(80, 40000, 0x12, b"data")));
}

#[test]
fn rfc7915_5_1_reset_tos_uses_new_tos() {
    let t = xlat_with(Config { reset_tos: true, new_tos: 0x28, ..config() });
    let input = v6_to_h4(17).udp(53, 1234, b"x");
    let expected = V4 { tos: 0x28, ..expect4(17) }.udp(53, 1234, b"x");
    assert_eq!(hex(&one(&t, &input)), hex(&expected));
}

#[test]
fn rfc7915_5_1_df_set_above_1260_bytes() {
    // 1260-byte result: DF clear; 1261: DF set (and Identification 0).
    let small = v6_to_h4(17).udp(1, 2, &vec![7u8; 1260 - 28]);
    let out = one(&t(), &small);
    assert_eq!(out.len(), 1260);
    assert_eq!(out[6] & 0x40, 0, "DF must be clear at 1260 bytes");
    let big = v6_to_h4(17).udp(1, 2, &vec![7u8; 1261 - 28]);
    let out = one(&t(), &big);
    assert_eq!(out.len(), 1261);
    assert_eq!(out[6] & 0x40, 0x40, "DF must be set above 1260 bytes");
    assert_eq!(hex(&out), hex(&V4 { df: true, ..expect4(17) }.udp(1, 2, &vec![7u8; 1261 - 28])));
}

#[test]
fn rfc7915_5_1_extension_headers_skipped() {
    // Hop-by-Hop (PadN) → Destination Options (PadN) → Routing (SL = 0) → UDP.
    let v = V6 { ..v6_to_h4(0) };
    let udp = v.udp_payload(53, 1234, b"ext");
    let mut exts = vec![60, 0, 1, 4, 0, 0, 0, 0];
    exts.extend_from_slice(&[43, 0, 1, 4, 0, 0, 0, 0]);
    exts.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]);
    let input = v.build(&exts, &udp);
    assert_eq!(hex(&one(&t(), &input)), hex(&expect4(17).udp(53, 1234, b"ext")));
}

#[test]
fn rfc7915_5_1_routing_header_segments_left_nonzero() {
    // Routing header type 0 with Segments Left = 1: Parameter Problem,
    // Code 0, pointer at the Segments Left octet (40 + 3).
    let v = v6_to_h4(43);
    let mut rh = vec![17, 2, 0, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&a6("2001:db8::99").octets());
    let input = v.build(&rh, &v.udp_payload(1, 2, b"x"));
    let (verdict, pkts) = run(&t(), &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V6::new(58, XLAT6, H6).icmp(4, 0, 43u32.to_be_bytes(), &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
}

#[test]
fn rfc7915_4_1_unexpired_source_route_option() {
    // LSRR with pointer 4 (unexpired): Destination Unreachable, Source Route
    // Failed, from the translator's IPv4 address.
    let opts = [1, 131, 7, 4, 192, 0, 2, 99];
    let input = v4_to_h6(17).build_opts(&opts, &udp_raw(1, 2, b""));
    let (verdict, pkts) = run(&t(), &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V4 { id: 0, df: false, ..V4::new(1, "192.0.0.8", H4) }.icmp(3, 5, [0; 4], &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
}

#[test]
fn rfc7915_4_1_other_ipv4_options_ignored() {
    // Record Route (type 7) is not translated: the IPv6 packet is the same
    // as for the option-less packet.
    let rr = [7, 7, 4, 0, 0, 0, 0, 0];
    let v = v4_to_h6(17);
    let with_opts = v.build_opts(&rr, &v.udp(9, 9, b"opt")[20..]);
    assert_eq!(hex(&one(&t(), &with_opts)), hex(&expect6(17).udp(9, 9, b"opt")));
}

// ---- TTL / Hop Limit ------------------------------------------------------

#[test]
fn rfc7915_4_1_ttl_exceeded() {
    let input = V4 { ttl: 1, ..v4_to_h6(17) }.udp(1, 2, b"x");
    let (verdict, pkts) = run(&t(), &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V4 { id: 0, df: false, ..V4::new(1, "192.0.0.8", H4) }.icmp(11, 0, [0; 4], &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
}

#[test]
fn rfc7915_5_1_hop_limit_exceeded() {
    let input = V6 { hop: 1, ..v6_to_h4(17) }.udp(1, 2, b"x");
    let (verdict, pkts) = run(&t(), &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V6::new(58, XLAT6, H6).icmp(3, 0, [0; 4], &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
}

#[test]
fn no_icmp_error_about_an_icmp_error() {
    // An ICMPv4 error whose TTL expires is dropped, not answered.
    let inner = V4::new(17, H6_AS4, H4).udp(1, 2, b"");
    let input = V4 { ttl: 1, ..V4::new(1, "192.0.2.254", H6_AS4) }.icmp(3, 3, [0; 4], &inner);
    assert_eq!(drop_reason(&t(), &input), DropReason::TtlExpired);
}

// ---- Fragmentation --------------------------------------------------------

#[test]
fn rfc7915_4_1_df_clear_small_packet_gets_no_fragment_header() {
    // RFC 8021: no atomic fragments; a DF=0 packet that fits is not changed.
    let input = V4 { df: false, ..v4_to_h6(17) }.udp(1, 2, b"small");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect6(17).udp(1, 2, b"small")));
}

#[test]
fn rfc7915_4_1_df_clear_large_packet_fragmented_to_lowest_ipv6_mtu() {
    let data = (0..1472u32).map(|i| i as u8).collect::<Vec<_>>();
    let input = V4 { df: false, ..v4_to_h6(17) }.udp(5, 6, &data);
    assert_eq!(input.len(), 1500);
    let (verdict, pkts) = run(&t(), &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 2);
    let whole = expect6(17).udp(5, 6, &data);
    let mut reassembled = Vec::new();
    for (i, (kind, p)) in pkts.iter().enumerate() {
        assert_eq!(*kind, PacketKind::Forward);
        assert!(p.len() <= 1280, "fragment {i} is {} bytes", p.len());
        assert_eq!(p[6], 44, "Fragment header");
        let fo = u16::from_be_bytes([p[42], p[43]]);
        assert_eq!(usize::from(fo >> 3) * 8, reassembled.len(), "offset of fragment {i}");
        assert_eq!(fo & 1 == 1, i == 0, "M flag of fragment {i}");
        assert_eq!(&p[44..48], &[0, 0, 0x12, 0x34], "Identification");
        assert_eq!(p[40], 17, "Fragment header Next Header");
        assert_eq!(&p[..4], &whole[..4]);
        assert_eq!(&p[7..40], &whole[7..40], "addresses and hop limit");
        reassembled.extend_from_slice(&p[48..]);
    }
    assert_eq!(hex(&reassembled), hex(&whole[40..]));
    assert_eq!(pkts[0].1.len(), 1280);
}

#[test]
fn rfc7915_4_1_lowest_ipv6_mtu_is_configurable() {
    let t = xlat_with(Config { lowest_ipv6_mtu: 1400, ..config() });
    let input = V4 { df: false, ..v4_to_h6(17) }.udp(5, 6, &[1u8; 1472]);
    let (_, pkts) = run(&t, &input);
    assert_eq!(pkts.len(), 2);
    assert_eq!(pkts[0].1.len(), 48 + ((1400 - 48) & !7));
}

#[test]
fn rfc7915_4_1_df_set_too_big_gets_fragmentation_needed() {
    let t = xlat_with(Config { ipv6_mtu: 1280, ..config() });
    let input = v4_to_h6(17).udp(5, 6, &[1u8; 1300]);
    let (verdict, pkts) = run(&t, &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let p = &pkts[0].1;
    assert_eq!((p[20], p[21]), (3, 4), "Destination Unreachable / Fragmentation Needed");
    assert_eq!(u16::from_be_bytes([p[26], p[27]]), 1260, "next-hop MTU = IPv6 MTU - 20");
    assert_eq!(p.len(), 576, "RFC 1812: as much of the datagram as fits in 576 bytes");
    assert_eq!(&p[28..], &input[..548]);
}

#[test]
fn rfc7915_4_1_fragment_gets_fragment_header() {
    // A first fragment: Identification zero-extended, M copied, offset 0.
    let v = V4 { df: false, mf: true, id: 0xbeef, ..v4_to_h6(17) };
    let mut udp = udp_raw(7, 8, &[3u8; 16]);
    udp[4..6].copy_from_slice(&100u16.to_be_bytes()); // the whole datagram is longer
    udp[6..8].copy_from_slice(&[0x12, 0x34]);
    let out = one(&t(), &v.build(&udp));
    assert_eq!(out[6], 44);
    assert_eq!(&out[40..48], &[17, 0, 0, 1, 0, 0, 0xbe, 0xef]);
    assert_eq!(out.len(), 48 + udp.len());
    // The UDP checksum is adjusted for the new pseudo-header only.
    assert_ne!(&out[54..56], &[0x12, 0x34]);
    // A later fragment: offset copied, payload unchanged.
    let v = V4 { df: false, mf: false, id: 0xbeef, offset: 3, ..v4_to_h6(17) };
    let out = one(&t(), &v.build(&[9u8; 24]));
    assert_eq!(&out[40..48], &[17, 0, 0, 24, 0, 0, 0xbe, 0xef]);
    assert_eq!(&out[48..], &[9u8; 24]);
}

#[test]
fn rfc7915_5_1_1_fragment_header_to_ipv4_fields() {
    let v = v6_to_h4(44);
    let udp = v.udp_payload(53, 1234, &[5u8; 32]);
    let frag = [17, 0, 0, 1, 0xca, 0xfe, 0xba, 0xbe]; // offset 0, M=1
    let out = one(&t(), &v.build(&frag, &udp));
    assert_eq!(u16::from_be_bytes([out[4], out[5]]), 0xbabe, "low 16 bits of the Identification");
    assert_eq!(out[6] & 0xe0, 0x20, "MF set, DF clear");
    assert_eq!(out[9], 17);
    assert_eq!(out.len(), 20 + udp.len());
    // Non-first fragment: offset copied, payload unchanged.
    let frag = [17, 0, 0, 0x20, 0, 0, 0, 7]; // offset 4, M=0
    let out = one(&t(), &v.build(&frag, &[6u8; 40]));
    assert_eq!(u16::from_be_bytes([out[6], out[7]]), 4);
    assert_eq!(&out[20..], &[6u8; 40]);
}

#[test]
fn rfc6946_atomic_fragment_translated_with_df_clear() {
    let v = v6_to_h4(44);
    let udp = v.udp_payload(53, 1234, b"atomic");
    let out = one(&t(), &v.build(&[17, 0, 0, 0, 0, 0, 0x55, 0x66], &udp));
    let expected = V4 { id: 0x5566, df: false, ..expect4(17) }.udp(53, 1234, b"atomic");
    assert_eq!(hex(&out), hex(&expected));
}

#[test]
fn rfc7915_5_1_too_big_for_ipv4_link_gets_packet_too_big() {
    let t = xlat_with(Config { ipv4_mtu: 1400, ..config() });
    let input = v6_to_h4(17).udp(1, 2, &[0u8; 1500]);
    let (verdict, pkts) = run(&t, &input);
    assert_eq!(verdict, Verdict::Emit);
    let p = &pkts[0].1;
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    assert_eq!((p[40], p[41]), (2, 0));
    assert_eq!(u32::from_be_bytes([p[44], p[45], p[46], p[47]]), 1420);
    assert_eq!(p.len(), 1280, "RFC 4443: as much of the packet as fits in 1280 bytes");
}

#[test]
fn rfc7915_1_4_refragment_ipv6_fragments() {
    // DF is clear when a Fragment header is present; with
    // `refragment-ipv6-fragments` the translator fragments it again for an
    // IPv4 link with a small MTU, rather than sending Packet Too Big.
    let t = xlat_with(Config { ipv4_mtu: 576, refragment_ipv6_fragments: true, ..config() });
    let v = v6_to_h4(44);
    let data = (0..1000u32).map(|i| (i * 7) as u8).collect::<Vec<_>>();
    let udp = v.udp_payload(53, 1234, &data);
    let (verdict, pkts) = run(&t, &v.build(&[17, 0, 0, 0, 0, 0, 0, 9], &udp));
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 2);
    let mut reassembled = Vec::new();
    for (i, (_, p)) in pkts.iter().enumerate() {
        assert!(p.len() <= 576);
        let ff = u16::from_be_bytes([p[6], p[7]]);
        assert_eq!(usize::from(ff & 0x1fff) * 8, reassembled.len());
        assert_eq!(ff & 0x2000 != 0, i == 0);
        reassembled.extend_from_slice(&p[20..]);
    }
    let whole = V4 { id: 9, ..expect4(17) }.udp(53, 1234, &data);
    assert_eq!(hex(&reassembled), hex(&whole[20..]));
}

// ---- §4.5 UDP zero checksum -----------------------------------------------

#[test]
fn rfc7915_4_5_zero_udp_checksum_computed() {
    let v = v4_to_h6(17);
    let input = v.build(&udp_raw(1000, 2000, b"no checksum"));
    assert_eq!(hex(&one(&t(), &input)), hex(&expect6(17).udp(1000, 2000, b"no checksum")));
}

#[test]
fn rfc7915_4_5_zero_udp_checksum_fragment_rejected() {
    // §4.5: dropped; §4.4: the sender gets Communication Administratively
    // Prohibited (3/13) quoting the fragment.
    let v = V4 { df: false, mf: true, ..v4_to_h6(17) };
    let input = v.build(&udp_raw(1000, 2000, &[0u8; 64]));
    let (verdict, pkts) = run(&t(), &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V4 { id: 0, df: false, ..V4::new(1, "192.0.0.8", H4) }.icmp(3, 13, [0; 4], &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
    // A later fragment has no UDP header and translates on its own.
    let later = V4 { df: false, offset: 9, ..v4_to_h6(17) }.build(&[0u8; 16]);
    assert_eq!(one(&t(), &later)[6], 44);
}

#[test]
fn rfc7915_4_5_amend_udp_checksum_zero_for_a_complete_fragment_set() {
    use xlat::siit::amend::{amend_udp_checksum_zero, classify, FragClass};
    let data: Vec<u8> = (0..100u8).collect();
    let udp = udp_raw(1000, 2000, &data); // checksum zero
    let first = V4 { df: false, mf: true, id: 42, ..v4_to_h6(17) }.build(&udp[..56]);
    let last = V4 { df: false, mf: false, id: 42, offset: 7, ..v4_to_h6(17) }.build(&udp[56..]);
    assert!(matches!(classify(&first), FragClass::HoldFirst(_)));
    let mut set = vec![first, last];
    amend_udp_checksum_zero(&mut set).unwrap();
    let t = xlat_with(Config { amend_udp_checksum_zero: UdpChecksumZero::Hold, ..config() });
    let mut payload = Vec::new();
    for f in &set {
        let out = one(&t, f);
        assert_eq!(out[6], 44);
        payload.extend_from_slice(&out[48..]);
    }
    let whole = expect6(17).udp(1000, 2000, &data);
    assert_eq!(hex(&payload), hex(&whole[40..]), "the reassembled IPv6 datagram carries the right checksum");
}

#[test]
fn rfc6936_zero_udp_checksum_from_ipv6_stays_zero() {
    // IPv6 allows a zero UDP checksum only for tunnel protocols; in IPv4 it
    // means "no checksum", so it is carried over unchanged rather than
    // "adjusted" into a wrong value.
    let v = v6_to_h4(17);
    let input = v.build(&[], &udp_raw(4789, 4789, b"vxlan-ish"));
    let expected = expect4(17).build(&udp_raw(4789, 4789, b"vxlan-ish"));
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
}

// ---- §4.2 / §5.2 ICMP queries ---------------------------------------------

#[test]
fn rfc7915_4_2_echo_request() {
    let input = v4_to_h6(1).icmp(8, 0, [0x12, 0x34, 0, 1], b"ping payload");
    let expected = expect6(58).icmp(128, 0, [0x12, 0x34, 0, 1], b"ping payload");
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
}

#[test]
fn rfc7915_4_2_echo_reply() {
    let input = v4_to_h6(1).icmp(0, 0, [0x12, 0x34, 0, 1], b"pong");
    let expected = expect6(58).icmp(129, 0, [0x12, 0x34, 0, 1], b"pong");
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
}

#[test]
fn rfc7915_5_2_echo_request_and_reply() {
    let v = v6_to_h4(58);
    let input = v.icmp(128, 0, [0, 7, 0, 9], b"ping6");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect4(1).icmp(8, 0, [0, 7, 0, 9], b"ping6")));
    let input = v.icmp(129, 0, [0, 7, 0, 9], b"pong6");
    assert_eq!(hex(&one(&t(), &input)), hex(&expect4(1).icmp(0, 0, [0, 7, 0, 9], b"pong6")));
}

#[test]
fn rfc7915_4_2_single_hop_icmpv4_dropped() {
    for kind in [5u8, 9, 10, 13, 14, 15, 16, 17, 18] {
        let input = v4_to_h6(1).icmp(kind, 0, [0; 4], &[0; 8]);
        assert_eq!(drop_reason(&t(), &input), DropReason::IcmpUntranslatable, "type {kind}");
    }
}

#[test]
fn rfc7915_5_2_neighbor_discovery_and_mld_dropped() {
    for kind in [130u8, 131, 132, 133, 134, 135, 136, 137] {
        let input = v6_to_h4(58).icmp(kind, 0, [0; 4], &[0; 16]);
        assert_eq!(drop_reason(&t(), &input), DropReason::IcmpUntranslatable, "type {kind}");
    }
}

#[test]
fn fragmented_icmp_dropped_both_ways() {
    let input = V4 { df: false, mf: true, ..v4_to_h6(1) }.icmp(8, 0, [0; 4], &[0; 16]);
    assert_eq!(drop_reason(&t(), &input), DropReason::FragmentedIcmp);
    let v = v6_to_h4(44);
    let icmp = v.icmp_payload(128, 0, [0; 4], &[0; 16]);
    let input = v.build(&[58, 0, 0, 1, 0, 0, 0, 1], &icmp);
    assert_eq!(drop_reason(&t(), &input), DropReason::FragmentedIcmp);
}

// ---- §4.2-§4.3 / §5.2-§5.3 ICMP errors ------------------------------------

/// The packet the IPv6 host sent, as an IPv4 router saw it after translation.
fn quoted_v4() -> Vec<u8> {
    V4 { id: 0, df: false, ttl: 63, ..V4::new(17, H6_AS4, H4) }.udp(5000, 53, b"query")
}
/// The same packet as the IPv6 host sent it (Hop Limit after translation
/// of the quoted TTL, which is copied, not decremented).
fn quoted_v6() -> Vec<u8> {
    V6 { hop: 63, ..V6::new(17, H6, H4_AS6) }.udp(5000, 53, b"query")
}
const ROUTER4: &str = "192.0.2.254";
const ROUTER4_AS6: &str = "2001:db8:1c0:2:fe::";

#[test]
fn rfc7915_4_3_port_unreachable_with_quoted_packet() {
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 3, [0; 4], &quoted_v4());
    let expected = V6 { hop: 63, ..V6::new(58, ROUTER4_AS6, H6) }.icmp(1, 4, [0; 4], &quoted_v6());
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
}

#[test]
fn rfc7915_4_2_time_exceeded_and_protocol_unreachable() {
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(11, 0, [0; 4], &quoted_v4());
    let expected = V6 { hop: 63, ..V6::new(58, ROUTER4_AS6, H6) }.icmp(3, 0, [0; 4], &quoted_v6());
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 2, [0; 4], &quoted_v4());
    let expected = V6 { hop: 63, ..V6::new(58, ROUTER4_AS6, H6) }.icmp(4, 1, [0, 0, 0, 6], &quoted_v6());
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
}

#[test]
fn rfc7915_4_2_parameter_problem_pointer() {
    // Pointer 8 (TTL) → 7 (Hop Limit).
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(12, 0, [8, 0, 0, 0], &quoted_v4());
    let expected = V6 { hop: 63, ..V6::new(58, ROUTER4_AS6, H6) }.icmp(4, 0, [0, 0, 0, 7], &quoted_v6());
    assert_eq!(hex(&one(&t(), &input)), hex(&expected));
    // Pointer 10 (Header Checksum) has no counterpart: dropped.
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(12, 0, [10, 0, 0, 0], &quoted_v4());
    assert_eq!(drop_reason(&t(), &input), DropReason::IcmpUntranslatable);
}

fn ptb6_mtu(t: &xlat::siit::Translator, advertised: u16, quoted: &[u8]) -> u32 {
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 4, [0, 0, (advertised >> 8) as u8, advertised as u8], quoted);
    let out = one(t, &input);
    assert_eq!((out[40], out[41]), (2, 0));
    u32::from_be_bytes([out[44], out[45], out[46], out[47]])
}

#[test]
fn rfc7915_4_2_fragmentation_needed_mtu_arithmetic() {
    let t = t();
    // min(1400 + 20, IPv6 MTU 1500, IPv4 MTU 1500 + 20)
    assert_eq!(ptb6_mtu(&t, 1400, &quoted_v4()), 1420);
    // Capped by the IPv6 link.
    assert_eq!(ptb6_mtu(&t, 1492, &quoted_v4()), 1500);
    // Never below the IPv6 minimum MTU.
    assert_eq!(ptb6_mtu(&t, 576, &quoted_v4()), 1280);
    let t = xlat_with(Config { ipv6_mtu: 9000, ipv4_mtu: 9000, ..config() });
    assert_eq!(ptb6_mtu(&t, 4000, &quoted_v4()), 4020);
}

#[test]
fn rfc7915_4_2_fragmentation_needed_mtu_zero_uses_plateaus() {
    // RFC 1191 plateau below the quoted Total Length: 8166 for a 9000-byte
    // packet, giving 8186 on a 9000-byte IPv6 link.
    let t = xlat_with(Config { ipv6_mtu: 9000, ipv4_mtu: 9000, ..config() });
    let mut q = quoted_v4();
    q[2..4].copy_from_slice(&9000u16.to_be_bytes());
    // Keep the quoted header checksum honest (not required, but realistic).
    assert_eq!(ptb6_mtu(&t, 0, &q), 8186);
    q[2..4].copy_from_slice(&1500u16.to_be_bytes());
    assert_eq!(ptb6_mtu(&t, 0, &q), 1512);
}

#[test]
fn rfc7915_5_2_packet_too_big_to_fragmentation_needed() {
    // A router on the IPv6 side (with an EAM image) reports that the IPv4
    // host's translated packet was too big.
    let router = "2001:db8:6::fe";
    let q = V6 { hop: 63, ..V6::new(17, H4_AS6, H6) }.udp(53, 5000, b"reply");
    let input = V6::new(58, router, H4_AS6).icmp(2, 0, 1400u32.to_be_bytes(), &q);
    let out = one(&t(), &input);
    assert_eq!(&out[12..16], &[198, 51, 100, 254]);
    assert_eq!((out[20], out[21]), (3, 4));
    assert_eq!(u16::from_be_bytes([out[26], out[27]]), 1380, "1400 - 20");
    assert_eq!(out[6] & 0x40, 0, "translated errors go out with DF clear");
    let inner = V4 { id: 0, df: false, ttl: 63, ..V4::new(17, H4, H6_AS4) }.udp(53, 5000, b"reply");
    assert_eq!(hex(&out[28..]), hex(&inner));
}

#[test]
fn rfc7915_5_2_packet_too_big_quoting_fragment_subtracts_28() {
    let router = "2001:db8:6::fe";
    let v = V6 { hop: 63, ..V6::new(44, H4_AS6, H6) };
    let q = v.build(&[17, 0, 0, 1, 0, 0, 0, 5], &v.udp_payload(53, 5000, &[0; 40]));
    let input = V6::new(58, router, H4_AS6).icmp(2, 0, 1400u32.to_be_bytes(), &q);
    let out = one(&t(), &input);
    assert_eq!(u16::from_be_bytes([out[26], out[27]]), 1372);
}

#[test]
fn rfc7915_5_3_error_translated_and_truncated_to_576() {
    let router = "2001:db8:6::fe";
    let q = V6 { hop: 63, ..V6::new(17, H4_AS6, H6) }.udp(53, 5000, &[1u8; 1100]);
    let input = V6::new(58, router, H4_AS6).icmp(1, 4, [0; 4], &q);
    let out = one(&t(), &input);
    assert_eq!(out.len(), 576);
    assert_eq!((out[20], out[21]), (3, 3));
    // The quoted IPv4 header keeps the original lengths.
    assert_eq!(u16::from_be_bytes([out[30], out[31]]), 20 + 8 + 1100);
}

#[test]
fn rfc7915_4_3_error_truncated_to_1280() {
    let q = V4 { id: 0, df: false, ttl: 63, ..V4::new(17, H6_AS4, H4) }.udp(5000, 53, &[2u8; 1400]);
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 3, [0; 4], &q);
    let out = one(&t(), &input);
    assert_eq!(out.len(), 1280);
    assert_eq!(u16::from_be_bytes([out[52], out[53]]), 8 + 1400, "quoted payload length kept");
}

#[test]
fn rfc6791_untranslatable_icmpv6_error_source() {
    let stranger = "2001:db8:ffff::1"; // neither pool6 nor EAMT
    let q = V6 { hop: 63, ..V6::new(17, H4_AS6, H6) }.udp(53, 5000, b"r");
    let input = V6::new(58, stranger, H4_AS6).icmp(3, 0, [0; 4], &q);
    let out = one(&t(), &input);
    assert_eq!(&out[12..16], &[192, 0, 0, 8], "no pool: the translator's own address");
    let t = xlat_with(Config { rfc6791_v4: Some("203.0.113.0/28".parse().unwrap()), ..config() });
    let out = one(&t, &input);
    assert_eq!(&out[12..15], &[203, 0, 113]);
    assert!(out[15] < 16);
    // Stable: the same router always gets the same address.
    assert_eq!(out, one(&t, &input));
    // A non-error from the same source is untranslatable.
    let input = V6::new(17, stranger, H4_AS6).udp(1, 2, b"");
    assert_eq!(drop_reason(&t, &input), DropReason::UntranslatableSource);
}

#[test]
fn rfc6791_untranslatable_icmpv4_error_source() {
    // Only EAMT: an IPv4 router outside it has no IPv6 image.
    let cfg = Config {
        pool6: None,
        eamt: vec![
            ("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap()),
            ("2001:db8:4::/120".parse().unwrap(), "192.0.2.0/24".parse().unwrap()),
        ],
        ipv6_address: Some(a6("2001:db8:ff::1")),
        rfc6791_v6: Some("2001:db8:ee::/96".parse().unwrap()),
        ..Config::default()
    };
    let t = xlat_with(cfg);
    let q = V4 { ttl: 63, ..V4::new(17, H6_AS4, H4) }.udp(1, 2, b"");
    let input = V4::new(1, "203.0.113.9", H6_AS4).icmp(11, 0, [0; 4], &q);
    let out = one(&t, &input);
    assert_eq!(&out[8..24], &a6("2001:db8:ee::203.0.113.9").octets());
}

#[test]
fn rfc6791_without_pool_uses_the_translators_own_address() {
    // Traceroute through the well-known prefix: a router with a private
    // address answers Time Exceeded. It has no IPv6 image (RFC 6052 §3.1),
    // so the error comes from the translator's own IPv6 address.
    let cfg = Config { pool6: Some("64:ff9b::/96".parse().unwrap()), ..config() };
    let t = xlat_with(cfg);
    let q = V4 { ttl: 1, ..V4::new(17, H6_AS4, "9.9.9.9") }.udp(33434, 33434, b"");
    let input = V4::new(1, "10.1.1.1", H6_AS4).icmp(11, 0, [0; 4], &q);
    let out = one(&t, &input);
    assert_eq!(&out[8..24], &a6("64:ff9b::192.0.0.8").octets());
    assert_eq!((out[40], out[41]), (3, 0));
}

#[test]
fn rfc7915_5_1_extension_header_after_fragment_header_rejected() {
    // §5.1 Total Length: a Fragment header whose Next Header is an
    // extension header (except ESP, including AH) SHOULD be dropped; §5.4:
    // the sender gets Communication Administratively Prohibited (1/1)
    // quoting the packet. Atomic fragments included.
    let v = v6_to_h4(44);
    let udp = v.udp_payload(53, 1234, &[0; 16]);
    for (next, m_flag) in [(60u8, 1u8), (60, 0), (0, 1), (43, 0), (51, 1)] {
        let mut exts = vec![next, 0, 0, m_flag, 0, 0, 0, 3];
        exts.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        let input = v.build(&exts, &udp);
        let (verdict, pkts) = run(&t(), &input);
        assert_eq!(verdict, Verdict::Emit, "next header {next}");
        assert_eq!(pkts[0].0, PacketKind::IcmpError);
        let expected = V6::new(58, XLAT6, H6).icmp(1, 1, [0; 4], &input);
        assert_eq!(hex(&pkts[0].1), hex(&expected), "next header {next}");
    }
    // ESP (50) after the Fragment header is the upper layer: translated.
    let exts = [50, 0, 0, 0, 0, 0, 0, 3];
    let out = one(&t(), &v.build(&exts, &[0xaa; 24]));
    assert_eq!(out[9], 50);
    // An ICMPv6 message is never answered with an ICMPv6 error.
    let icmp = v.icmp_payload(128, 0, [0; 4], &[0; 8]);
    let mut exts = vec![60, 0, 0, 0, 0, 0, 0, 3];
    exts.extend_from_slice(&[58, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(drop_reason(&t(), &v.build(&exts, &icmp)), DropReason::ExtensionAfterFragment);
}

#[test]
fn rfc7915_4_1_illegal_source_of_an_icmpv4_error_is_translated() {
    // A UDP packet from 127.0.0.1 is dropped; an ICMPv4 error from it is
    // translated "for the purpose of trouble shooting" (§4.1).
    let input = V4::new(17, "127.0.0.1", H6_AS4).udp(1, 2, b"");
    assert_eq!(drop_reason(&t(), &input), DropReason::ForbiddenAddress);
    let input = V4::new(1, "127.0.0.1", H6_AS4).icmp(3, 3, [0; 4], &quoted_v4());
    let out = one(&t(), &input);
    assert_eq!(&out[8..24], &a6("2001:db8:17f:0:1::").octets(), "127.0.0.1 through pool6");
    assert_eq!((out[40], out[41]), (1, 4));
}

#[test]
fn rfc7915_4_3_icmp_error_in_error_dropped() {
    let inner_err = V4::new(1, H6_AS4, H4).icmp(3, 1, [0; 4], &[0; 28]);
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 3, [0; 4], &inner_err);
    assert_eq!(drop_reason(&t(), &input), DropReason::IcmpErrorInError);
}

#[test]
fn icmp_error_with_bad_checksum_dropped() {
    let mut input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 3, [0; 4], &quoted_v4());
    let n = input.len();
    input[n - 1] ^= 0xff;
    assert_eq!(drop_reason(&t(), &input), DropReason::BadChecksum);
}

#[test]
fn rfc4884_extension_carried_over_both_ways() {
    // ICMPv4 Time Exceeded with a 128-byte original datagram field (length
    // attribute 32 words) and an 8-byte extension structure.
    let mut orig = quoted_v4();
    orig.resize(128, 0);
    let ext = [0x20, 0, 0xaa, 0xbb, 0, 8, 1, 1];
    let mut body = orig.clone();
    body.extend_from_slice(&ext);
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(11, 0, [0, 32, 0, 0], &body);
    let out = one(&t(), &input);
    let msg = &out[40..];
    let len6 = usize::from(msg[4]) * 8;
    assert!(len6 >= 128);
    assert_eq!(&msg[8 + len6..], &ext, "extension follows the padded datagram");
    // And back again, ICMPv6 → ICMPv4.
    let router = "2001:db8:6::fe";
    let mut q6 = V6 { hop: 63, ..V6::new(17, H4_AS6, H6) }.udp(53, 5000, b"reply");
    q6.resize(128, 0);
    let mut body = q6.clone();
    body.extend_from_slice(&ext);
    let input = V6::new(58, router, H4_AS6).icmp(3, 0, [16, 0, 0, 0], &body);
    let out = one(&t(), &input);
    let msg = &out[20..];
    let len4 = usize::from(msg[5]) * 4;
    assert!(len4 >= 128);
    assert_eq!(&msg[8 + len4..], &ext);
}

// ---- Address rules ----------------------------------------------------------

#[test]
fn untranslatable_and_forbidden_addresses_dropped() {
    let t = t();
    let input = V4::new(17, H4, "127.0.0.1").udp(1, 2, b"");
    assert_eq!(drop_reason(&t, &input), DropReason::ForbiddenAddress);
    let input = V4::new(17, H4, "224.0.0.5").udp(1, 2, b"");
    assert_eq!(drop_reason(&t, &input), DropReason::ForbiddenAddress);
    let input = V6::new(17, H6, "ff02::1").udp(1, 2, b"");
    assert_eq!(drop_reason(&t, &input), DropReason::ForbiddenAddress);
    let input = V6::new(17, H6, "2001:db8:ffff::1").udp(1, 2, b"");
    assert_eq!(drop_reason(&t, &input), DropReason::UntranslatableDestination);
}

#[test]
fn well_known_prefix_refuses_non_global_ipv4() {
    // RFC 6052 §3.1: 64:ff9b::/96 must not carry private addresses.
    let cfg = Config { pool6: Some("64:ff9b::/96".parse().unwrap()), ..config() };
    let t = xlat_with(cfg);
    let input = V4::new(17, "10.1.2.3", H6_AS4).udp(1, 2, b"");
    assert_eq!(drop_reason(&t, &input), DropReason::UntranslatableSource);
    let input = V4::new(17, "9.9.9.9", H6_AS4).udp(1, 2, b"");
    let out = one(&t, &input);
    assert_eq!(&out[8..24], &a6("64:ff9b::9.9.9.9").octets());
}

#[test]
fn rfc7757_eam_takes_precedence_and_hairpins() {
    // IPv6 host 2001:db8:6::5 talks to 198.51.100.7 (another IPv6 host known
    // through the EAMT) via its pool6 image: the translator hairpins it back
    // to IPv6 with the source in pool6 form (RFC 7757 §4.2).
    let dst = "2001:db8:1c6:3364:7::"; // pool6 image of 198.51.100.7
    let input = V6::new(17, H6, dst).udp(1111, 2222, b"hairpin");
    let out = one(&t(), &input);
    let expected = V6 { hop: 63, ..V6::new(17, "2001:db8:1c6:3364:5::", "2001:db8:6::7") }.udp(1111, 2222, b"hairpin");
    assert_eq!(hex(&out), hex(&expected));
    let t2 = xlat_with(Config { eam_hairpin_mode: EamHairpinMode::Off, ..config() });
    let out = one(&t2, &input);
    assert_eq!(out[0] >> 4, 4, "without hairpinning the IPv4 packet leaves");
    // Addressed to the EAM IPv6 address itself: not a hairpin, plain SIIT.
    let input = V6::new(17, "2001:db8:1c0:2:1::", "2001:db8:6::7").udp(1, 2, b"direct");
    let out = one(&t(), &input);
    assert_eq!(out[0] >> 4, 4);
    assert_eq!(&out[16..20], &[198, 51, 100, 7]);
}

// ---- Malformed input ----------------------------------------------------------

#[test]
fn malformed_input_counted_as_drops() {
    let t = t();
    assert_eq!(drop_reason(&t, &[]), DropReason::UnknownVersion);
    assert_eq!(drop_reason(&t, &[0x55; 40]), DropReason::UnknownVersion);
    assert_eq!(drop_reason(&t, &[0x45, 0, 0]), DropReason::Truncated);
    let mut bad = v4_to_h6(17).udp(1, 2, b"x");
    bad[10] ^= 1;
    assert_eq!(drop_reason(&t, &bad), DropReason::BadIpv4Checksum);
    let good = v6_to_h4(17).udp(1, 2, b"xyz");
    assert_eq!(drop_reason(&t, &good[..45]), DropReason::Truncated);
    let short_udp = v4_to_h6(17).build(&[0, 1, 0, 2]);
    assert_eq!(drop_reason(&t, &short_udp), DropReason::Truncated);
    // Fragments that reach past 65,535 bytes (offset 8190 × 8 + 40 bytes).
    let v = V4 { df: false, offset: 8190, ..v4_to_h6(17) };
    assert_eq!(drop_reason(&t, &v.build(&[0; 40])), DropReason::Malformed);
    let v = v6_to_h4(44);
    let big = v.build(&[17, 0, 0xff, 0xf0, 0, 0, 0, 1], &[0; 40]); // offset 8190
    assert_eq!(drop_reason(&t, &big), DropReason::Malformed);
}

// ---- Issue #10: conformance regressions ---------------------------------------

/// The IPv4 host's packet to the IPv6 host, as quoted by a router that
/// could not deliver it, with `n` bytes of UDP data.
fn quoted_v4_big(n: usize) -> Vec<u8> {
    V4 { id: 0, df: false, ttl: 63, ..V4::new(17, H6_AS4, H4) }.udp(5000, 53, &vec![2u8; n])
}
/// The same packet as the IPv6 host sent it.
fn quoted_v6_big(n: usize) -> Vec<u8> {
    V6 { hop: 63, ..V6::new(17, H6, H4_AS6) }.udp(5000, 53, &vec![2u8; n])
}

#[test]
fn rfc4443_2_4_c_icmpv4_error_with_df_larger_than_ipv6_mtu_is_truncated_not_refused() {
    // RFC 7915 §4.3 translates the error; RFC 4443 §2.4(c) caps the ICMPv6
    // error at 1280 bytes, so it always fits the IPv6 link: the MTU check
    // for data (DF set and too big → Fragmentation Needed) does not apply,
    // and an error is never answered with an error (RFC 1812 §4.3.2.7).
    let t = xlat_with(Config { ipv6_mtu: 1280, ..config() });
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(3, 3, [0; 4], &quoted_v4_big(1400));
    assert!(input[6] & 0x40 != 0, "DF set");
    assert!(input.len() + 20 > 1280, "bigger than the IPv6 MTU once translated");
    let out = one(&t, &input);
    let expected = V6 { hop: 63, ..V6::new(58, ROUTER4_AS6, H6) }.icmp(1, 4, [0; 4], &quoted_v6_big(1400)[..1232]);
    assert_eq!(out.len(), 1280);
    assert_eq!(hex(&out), hex(&expected));
}

#[test]
fn rfc4884_extension_kept_when_a_large_icmpv4_error_is_truncated() {
    // Time Exceeded with a 1000-byte original datagram field (Length 250
    // words) and a 300-byte extension structure, DF set, 1348 bytes once
    // translated: the datagram is cut so that the extension survives
    // intact after it, on an 8-byte boundary, and the ICMPv6 Length
    // attribute (64-bit words) says where it starts (RFC 4884 §4.1, §5).
    let t = xlat_with(Config { ipv6_mtu: 1280, ..config() });
    let orig = quoted_v4_big(1000 - 28);
    let mut ext = vec![0x20, 0, 0, 0];
    ext.extend((0..296u32).map(|i| i as u8));
    let mut body = orig.clone();
    body.extend_from_slice(&ext);
    let input = V4::new(1, ROUTER4, H6_AS4).icmp(11, 0, [0, 250, 0, 0], &body);
    let out = one(&t, &input);
    // 1280 - 40 - 8 = 1232 bytes of body; 1232 - 300 rounded down to 8 = 928.
    assert_eq!(out.len(), 48 + 928 + 300);
    let msg = &out[40..];
    assert_eq!((msg[0], msg[1]), (3, 0));
    assert_eq!(usize::from(msg[4]) * 8, 928, "Length attribute");
    assert_eq!(&msg[8..8 + 928], &quoted_v6_big(1000 - 28)[..928], "datagram cut, not the extension");
    assert_eq!(&msg[8 + 928..], &ext[..], "extension intact");
}

#[test]
fn rfc7915_5_3_icmpv6_error_larger_than_ipv4_mtu_is_truncated_not_refused() {
    // An ICMPv6 error of 1500 bytes (some routers quote more than RFC 4443
    // allows) would give a 1460-byte IPv4 packet with DF set, more than the
    // 1400-byte IPv4 link: it is truncated to the RFC 1812 §4.3.2.3 576
    // bytes instead of being answered with Packet Too Big or dropped.
    let t = xlat_with(Config { ipv4_mtu: 1400, ..config() });
    let router = "2001:db8:6::fe";
    let q = V6 { hop: 63, ..V6::new(17, H4_AS6, H6) }.udp(53, 5000, &[1u8; 1500 - 96]);
    let input = V6::new(58, router, H4_AS6).icmp(1, 4, [0; 4], &q);
    assert_eq!(input.len(), 1500);
    let out = one(&t, &input);
    // The quoted packet is 1480 bytes in IPv4: DF set, as its sender's
    // translator set it (§5.1).
    let inner = V4 { id: 0, df: true, ttl: 63, ..V4::new(17, H4, H6_AS4) }.udp(53, 5000, &[1u8; 1500 - 96]);
    let expected =
        V4 { id: 0, df: false, ttl: 63, ..V4::new(1, "198.51.100.254", H4) }.icmp(3, 3, [0; 4], &inner[..548]);
    assert_eq!(out.len(), 576);
    assert_eq!(hex(&out), hex(&expected));
}

#[test]
fn rfc7915_4_1_df_set_fragment_too_big_gets_fragmentation_needed() {
    // A first fragment with DF and MF set: its translation carries a
    // Fragment header (48 bytes of headers instead of 20), 1288 bytes, more
    // than the 1280-byte IPv6 link. DF forbids fragmenting it again, so the
    // sender gets Fragmentation Needed with the IPv6 MTU less 28.
    let t = xlat_with(Config { ipv6_mtu: 1280, ..config() });
    let v = V4 { df: true, mf: true, id: 0x4242, ..v4_to_h6(17) };
    let mut udp = udp_raw(7, 8, &[3u8; 1232]);
    udp[4..6].copy_from_slice(&4000u16.to_be_bytes());
    udp[6..8].copy_from_slice(&[0x12, 0x34]);
    let input = v.build(&udp);
    let (verdict, pkts) = run(&t, &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V4 { id: 0, df: false, ..V4::new(1, "192.0.0.8", H4) }.icmp(3, 4, [0, 0, 0x04, 0xe4], &input[..548]);
    assert_eq!(hex(&pkts[0].1), hex(&expected), "MTU 1252 = 1280 - 28");
    // A later fragment with DF set is dropped without an error (RFC 1122
    // §3.2.2: no ICMP error about a non-initial fragment).
    let later = V4 { df: true, mf: true, offset: 200, ..v4_to_h6(17) }.build(&[0u8; 1240]);
    assert_eq!(drop_reason(&t, &later), DropReason::TooBig);
}

#[test]
fn rfc7915_4_1_df_set_fragment_that_fits_is_not_fragmented_again() {
    // DF set: the fragment is translated whole even though it is bigger
    // than lowest-ipv6-mtu (which applies to DF=0 packets only).
    let v = V4 { df: true, mf: true, id: 0x4242, ..v4_to_h6(17) };
    let input = v.build(&[5u8; 1400]);
    let out = one(&t(), &input);
    assert_eq!(out.len(), 48 + 1400);
    assert_eq!(&out[40..48], &[17, 0, 0, 1, 0, 0, 0x42, 0x42]);
}

#[test]
fn rfc7757_4_2_icmpv6_error_about_a_hairpinned_packet_is_hairpinned() {
    // H6 (EAM 198.51.100.5) sent to 198.51.100.7 through pool6; the
    // translator hairpinned it to 2001:db8:6::7 with the source in pool6
    // form. That host answers Port Unreachable to the pool6 form of
    // 198.51.100.5: the error goes back to H6 in IPv6, from the address H6
    // sent to and quoting H6's packet as H6 sent it (RFC 7757 §4.2, as
    // Jool's intrinsic mode does).
    let (a_pool6, b, b_pool6) = ("2001:db8:1c6:3364:5::", "2001:db8:6::7", "2001:db8:1c6:3364:7::");
    let seen_by_b = V6 { hop: 63, ..V6::new(17, a_pool6, b) }.udp(1111, 2222, b"hairpin");
    let input = V6::new(58, b, a_pool6).icmp(1, 4, [0; 4], &seen_by_b);
    let out = one(&t(), &input);
    let sent_by_a = V6 { hop: 63, ..V6::new(17, H6, b_pool6) }.udp(1111, 2222, b"hairpin");
    let expected = V6 { hop: 63, ..V6::new(58, b_pool6, H6) }.icmp(1, 4, [0; 4], &sent_by_a);
    assert_eq!(hex(&out), hex(&expected));
    // A router between the translator and that host (2001:db8:6::fe, EAM
    // 198.51.100.254) reporting Time Exceeded keeps its own address.
    let input = V6::new(58, "2001:db8:6::fe", a_pool6).icmp(3, 0, [0; 4], &seen_by_b);
    let out = one(&t(), &input);
    let expected = V6 { hop: 63, ..V6::new(58, "2001:db8:6::fe", H6) }.icmp(3, 0, [0; 4], &sent_by_a);
    assert_eq!(hex(&out), hex(&expected));
}

#[test]
fn rfc7757_4_2_hairpinned_packet_is_not_held_to_the_ipv4_mtu() {
    // A hairpinned packet is turned around inside the translator and never
    // reaches the IPv4 link, so ipv4-mtu (here 1280) does not apply: a
    // 1400-byte packet from H6 to 198.51.100.7's pool6 image arrives whole.
    let t = xlat_with(Config { ipv4_mtu: 1280, ..config() });
    let dst = "2001:db8:1c6:3364:7::";
    let data = vec![0x5a; 1352];
    let input = V6::new(17, H6, dst).udp(1111, 2222, &data);
    assert_eq!(input.len(), 1400);
    let out = one(&t, &input);
    let expected = V6 { hop: 63, ..V6::new(17, "2001:db8:1c6:3364:5::", "2001:db8:6::7") }.udp(1111, 2222, &data);
    assert_eq!(hex(&out), hex(&expected));
    // Too big for the IPv6 link it leaves on (RFC 4443 §3.2): Packet Too
    // Big with ipv6-mtu, from the translator, about the packet as sent.
    let t = xlat_with(Config { ipv6_mtu: 1300, ..config() });
    let (v, pkts) = run(&t, &input);
    assert_eq!(v, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let ptb = &pkts[0].1;
    assert_eq!((ptb[40], ptb[41]), (2, 0));
    assert_eq!(&ptb[44..48], &1300u32.to_be_bytes());
    assert_eq!(&ptb[8..24], &a6(XLAT6).octets());
    assert_eq!(&ptb[24..40], &a6(H6).octets());
    assert_eq!(&ptb[48..88], &input[..40]);
}

#[test]
fn rfc7757_eamt_only_translator_needs_no_ipv6_address() {
    // No pool6, no rfc6791v6-prefix, no ipv6-address: the translator still
    // runs, and the ICMPv6 errors it originates come from the documented
    // default 64:ff9b:1::c000:8 (192.0.0.8 after the RFC 8215 local-use
    // prefix).
    let cfg = Config {
        pool6: None,
        eamt: vec![
            ("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap()),
            ("2001:db8:4::/120".parse().unwrap(), "192.0.2.0/24".parse().unwrap()),
        ],
        ..Config::default()
    };
    let t = xlat::siit::Translator::new(cfg).expect("an EAMT-only configuration is valid");
    assert_eq!(t.ipv6_address(), a6("64:ff9b:1::c000:8"));
    let input = V6 { hop: 1, ..V6::new(17, H6, "2001:db8:4::1") }.udp(1, 2, b"x");
    let (verdict, pkts) = run(&t, &input);
    assert_eq!(verdict, Verdict::Emit);
    let expected = V6::new(58, "64:ff9b:1::c000:8", H6).icmp(3, 0, [0; 4], &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
}

#[test]
fn rfc7915_1_4_oversize_ipv6_fragment_gets_packet_too_big_by_default() {
    // An IPv6 first fragment whose IPv4 translation (1480 bytes) exceeds
    // the 1400-byte IPv4 link: by default (as Jool) the sender gets Packet
    // Too Big with the IPv4 MTU + 20, rather than IPv4 fragments.
    let t = xlat_with(Config { ipv4_mtu: 1400, ..config() });
    let v = v6_to_h4(44);
    let udp = v.udp_payload(53, 1234, &[9u8; 1452]);
    let input = v.build(&[17, 0, 0, 1, 0, 0, 0, 9], &udp);
    let (verdict, pkts) = run(&t, &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V6::new(58, XLAT6, H6).icmp(2, 0, 1420u32.to_be_bytes(), &input[..1232]);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
    // A later fragment is dropped without an error.
    let input = v.build(&[17, 0, 0x05, 0xa8, 0, 0, 0, 9], &[0u8; 1452]);
    assert_eq!(drop_reason(&t, &input), DropReason::TooBig);
}

#[test]
fn rfc7915_4_5_zero_udp_checksum_dropped_when_configured() {
    // §4.5: the translator SHOULD be configurable to drop zero-checksum UDP
    // instead of computing the checksum; Jool's `amend-udp-checksum-zero =
    // false` drops it and, §4.4, answers 3/13 (Communication
    // Administratively Prohibited), quoting it.
    let t = xlat_with(Config { amend_udp_checksum_zero: UdpChecksumZero::Drop, ..config() });
    let input = v4_to_h6(17).build(&udp_raw(1000, 2000, b"no checksum"));
    let (verdict, pkts) = run(&t, &input);
    assert_eq!(verdict, Verdict::Emit);
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, PacketKind::IcmpError);
    let expected = V4 { id: 0, df: false, ..V4::new(1, "192.0.0.8", H4) }.icmp(3, 13, [0; 4], &input);
    assert_eq!(hex(&pkts[0].1), hex(&expected));
    // A UDP datagram with a checksum is translated as always.
    let input = v4_to_h6(17).udp(1000, 2000, b"checksum");
    assert_eq!(hex(&one(&t, &input)), hex(&expect6(17).udp(1000, 2000, b"checksum")));
    // Jool's `true` (the default here): the checksum is computed.
    let t = xlat_with(Config { amend_udp_checksum_zero: UdpChecksumZero::Compute, ..config() });
    let input = v4_to_h6(17).build(&udp_raw(1000, 2000, b"no checksum"));
    assert_eq!(hex(&one(&t, &input)), hex(&expect6(17).udp(1000, 2000, b"no checksum")));
}

#[test]
fn rfc7757_4_2_1_simple_hairpinning() {
    // Simple mode: the translator does not turn the packet around itself;
    // the IPv4 packet for 198.51.100.7 leaves, the IPv4 network routes it
    // back, and its second translation maps the EAM source with pool6 only
    // (the TTL drops once per pass).
    let t = xlat_with(Config { eam_hairpin_mode: EamHairpinMode::Simple, ..config() });
    let (a_pool6, b, b_pool6) = ("2001:db8:1c6:3364:5::", "2001:db8:6::7", "2001:db8:1c6:3364:7::");
    let input = V6::new(17, H6, b_pool6).udp(1111, 2222, b"hairpin");
    let v4 = one(&t, &input);
    let expected4 = V4 { id: 0, df: false, ttl: 63, ..V4::new(17, H6_AS4, "198.51.100.7") }.udp(1111, 2222, b"hairpin");
    assert_eq!(hex(&v4), hex(&expected4));
    let back = one(&t, &v4);
    let seen_by_b = V6 { hop: 62, ..V6::new(17, a_pool6, b) }.udp(1111, 2222, b"hairpin");
    assert_eq!(hex(&back), hex(&seen_by_b));
    // Its Port Unreachable takes the same two trips and reaches H6 from
    // the address H6 sent to, quoting H6's packet with the destination H6
    // used.
    let err6 = V6::new(58, b, a_pool6).icmp(1, 4, [0; 4], &seen_by_b);
    let err4 = one(&t, &err6);
    assert_eq!(err4[0] >> 4, 4);
    let back = one(&t, &err4);
    let sent_by_a = V6 { hop: 62, ..V6::new(17, H6, b_pool6) }.udp(1111, 2222, b"hairpin");
    let expected = V6 { hop: 62, ..V6::new(58, b_pool6, H6) }.icmp(1, 4, [0; 4], &sent_by_a);
    assert_eq!(hex(&back), hex(&expected));
    // Traffic from the IPv4 Internet is unaffected.
    let input = v4_to_h6(17).udp(1, 2, b"x");
    assert_eq!(hex(&one(&t, &input)), hex(&expect6(17).udp(1, 2, b"x")));
}

#[test]
fn rfc4884_extension_kept_when_an_icmpv6_error_is_cut_to_576() {
    // ICMPv6 Destination Unreachable with a 1000-byte original datagram
    // field (Length 125 64-bit words) and a 100-byte extension: the ICMPv4
    // error is cut to 576 bytes by shortening the datagram (to 448 bytes, a
    // multiple of 4), the extension follows intact and the ICMPv4 Length
    // attribute (32-bit words, octet 5) says where (RFC 4884 §4.1, §5).
    let router = "2001:db8:6::fe";
    let q = V6 { hop: 63, ..V6::new(17, H4_AS6, H6) }.udp(53, 5000, &[4u8; 1000 - 48]);
    let mut ext = vec![0x20, 0, 0, 0];
    ext.extend((0..96u32).map(|i| (i * 3) as u8));
    let mut body = q.clone();
    body.extend_from_slice(&ext);
    let input = V6::new(58, router, H4_AS6).icmp(1, 4, [125, 0, 0, 0], &body);
    let out = one(&t(), &input);
    assert_eq!(out.len(), 576);
    let msg = &out[20..];
    assert_eq!((msg[0], msg[1]), (3, 3));
    assert_eq!(usize::from(msg[5]) * 4, 448, "Length attribute");
    let inner = V4 { id: 0, df: false, ttl: 63, ..V4::new(17, H4, H6_AS4) }.udp(53, 5000, &[4u8; 1000 - 48]);
    assert_eq!(hex(&msg[8..8 + 448]), hex(&inner[..448]), "datagram cut, not the extension");
    assert_eq!(&msg[8 + 448..], &ext[..], "extension intact");
}
