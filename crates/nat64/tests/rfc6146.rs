//! RFC 6146 (with RFC 7915 through the shared translator, RFC 8200 §4.5
//! and RFC 5382) as packet vectors, each test named after the clause it
//! checks: hairpinning (§3.8) as one router hop, its refusals and errors
//! answered in IPv6, sizes; simultaneous open (§3.5.2.2); reassembly
//! (§3.4); the source of translated ICMPv6 errors (§3.6 and Jool's
//! `source-icmpv6-errors-better`). Every emitted packet is validated with
//! etherparse (`common::check`).

mod support;

use nat64::{Config, Nat64, Protocol, StaticBib, TcpState};
use support::*;
use xlat::{DropReason, PacketKind, Verdict};

/// The pool4 address, 192.0.2.1, in its pool6 form.
const T6: &str = "2001:db8:64::c000:201";

/// H2 serves UDP port 7000 at 192.0.2.1:7000 (static BIB entry), so H1
/// reaches it through the NAT64 at 2001:db8:64::c000:201 port 7000.
fn hairpin_cfg() -> Config {
    let mut c = cfg();
    c.bib.push(StaticBib {
        protocol: Protocol::Udp,
        ipv6: "[2001:db8::2]:7000".parse().unwrap(),
        ipv4: "192.0.2.1:7000".parse().unwrap(),
    });
    c
}

/// Translated packets (every emitted one is a forward).
fn fwd_all(n: &Nat64, pkt: &[u8], now: u64) -> Vec<Vec<u8>> {
    let (v, p) = run(n, pkt, now);
    assert_eq!(v, Verdict::Emit, "expected a translation");
    assert!(p.iter().all(|(k, _)| *k == PacketKind::Forward), "{:?}", p.iter().map(|x| x.0).collect::<Vec<_>>());
    p.into_iter().map(|(_, b)| b).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// IPv6 fragments of `upper` (an upper-layer header and its data) from
/// `src` to `dst`: pieces of at most `piece` bytes (a multiple of 8),
/// `exts` (a Destination Options header whose Next Header names the
/// Fragment header, or nothing) in front of each Fragment header.
fn frags6(src: &str, dst: &str, next: u8, exts: &[u8], upper: &[u8], piece: usize) -> Vec<Vec<u8>> {
    let first_next = if exts.is_empty() { 44 } else { 60 };
    let mut v = Vec::new();
    for (i, chunk) in upper.chunks(piece).enumerate() {
        let off = i * piece;
        let more = off + chunk.len() < upper.len();
        let fo = ((off / 8) as u16) << 3 | u16::from(more);
        let mut h = exts.to_vec();
        h.extend_from_slice(&[next, 0]);
        h.extend_from_slice(&fo.to_be_bytes());
        h.extend_from_slice(&0x5eed_u32.to_be_bytes());
        v.push(V6::new(first_next, src, dst).build(&h, chunk));
    }
    v
}

/// Fragments put back together from (offset, data) pieces (no hole).
fn join(mut parts: Vec<(usize, &[u8])>) -> Vec<u8> {
    parts.sort_by_key(|p| p.0);
    let mut out = Vec::new();
    for (off, d) in parts {
        assert_eq!(off, out.len(), "fragments leave no hole");
        out.extend_from_slice(d);
    }
    out
}

/// The payload of IPv4 fragments put back together.
fn join4(frags: &[Vec<u8>]) -> Vec<u8> {
    join(frags.iter().map(|f| ((usize::from(be16(f, 6)) & 0x1fff) * 8, &f[usize::from(f[0] & 0xf) * 4..])).collect())
}

/// The fragmentable part of IPv6 fragments (plain Fragment header right
/// after the fixed header) put back together.
fn join6(frags: &[Vec<u8>]) -> Vec<u8> {
    join(
        frags
            .iter()
            .map(|f| {
                assert_eq!(f[6], 44, "a Fragment header");
                ((usize::from(be16(f, 42)) >> 3) * 8, &f[48..])
            })
            .collect(),
    )
}

// ---- §3.8 hairpinning ------------------------------------------------------

/// RFC 6146 §3.8 with RFC 7915 §5.1/§4.1: the NAT64 is one router on the
/// way from H1 to H2, so the hairpinned packet arrives with the Hop Limit
/// decremented once (63 from 64), not twice.
#[test]
fn rfc6146_3_8_hairpinned_packet_loses_one_hop() {
    let n = nat(hairpin_cfg());
    let out = fwd(&n, &V6::new(17, H1, T6).udp(5000, 7000, b"hairpin"), 0);
    let t1 = be16(&out, 40);
    let expected = V6 { hop: 63, ..V6::new(17, T6, H2) }.udp(t1, 7000, b"hairpin");
    assert_eq!(hex(&out), hex(&expected));
    // Hop Limit 1: Time Exceeded from the first pass, back to H1.
    let e = icmp_err(&n, &V6 { hop: 1, ..V6::new(17, H1, T6) }.udp(5000, 7000, b"x"), 0);
    assert_eq!((e[40], e[41]), (3, 0));
    assert_eq!(v6dst(&e), a6(H1));
}

/// RFC 6146 §3.5.2.2 and §3.8: a hairpinned SYN to a pool4 port nobody
/// holds is stored like any unsolicited SYN; when it expires unanswered
/// its sender, an IPv6 host, gets ICMPv6 Port Unreachable (RFC 7915 §4.2's
/// mapping of ICMPv4 3/3) from the NAT64's own address, about the SYN it
/// sent, instead of an ICMPv4 error to our own pool4 address.
#[test]
fn rfc6146_3_8_hairpinned_syn_expiring_unanswered_gets_icmpv6_from_the_nat64() {
    let n = nat(cfg());
    let syn = V6::new(6, H1, T6).tcp(5001, 9999, SYN, b"");
    let icmp = &held_syn_error(&n, &syn);
    assert_eq!(icmp[0] >> 4, 6, "ICMPv6, not ICMPv4 to a pool4 address");
    assert_eq!((icmp[40], icmp[41]), (1, 4));
    assert_eq!(v6src(icmp), n.translator().ipv6_address());
    assert_eq!(v6src(icmp), a6("2001:db8:64::c000:8"), "192.0.0.8 under pool6");
    assert_eq!(v6dst(icmp), a6(H1));
    assert_eq!(&icmp[48..], &syn[..], "quotes the SYN as H1 sent it");
}

/// RFC 6146 §3.8: refusals of the hairpin's IPv4 pass go back to the IPv6
/// sender in ICMPv6 (RFC 6146 §3.5.1: UDP to a pool4 port without a BIB
/// entry, Port Unreachable).
#[test]
fn rfc6146_3_8_hairpinned_udp_to_an_unmapped_port_is_refused_in_icmpv6() {
    let n = nat(cfg());
    let pkt = V6::new(17, H1, T6).udp(5002, 9999, b"nobody");
    let e = icmp_err(&n, &pkt, 0);
    assert_eq!((e[40], e[41]), (1, 4));
    assert_eq!(v6src(&e), n.translator().ipv6_address());
    assert_eq!(v6dst(&e), a6(H1));
    assert_eq!(&e[48..], &pkt[..]);
}

/// RFC 6146 §3.8 with RFC 7915 §4.2/§5.2: H2 answers a hairpinned packet
/// with an ICMPv6 error to H1's pool6 form; the NAT64 hairpins the error
/// too, so H1 gets it in IPv6, from the address it sent to, quoting its
/// own packet as it sent it (as Jool and the SIIT intrinsic mode do).
#[test]
fn rfc6146_3_8_icmpv6_errors_about_hairpinned_packets_are_hairpinned_back() {
    let n = nat(hairpin_cfg());
    let seen_by_h2 = fwd(&n, &V6::new(17, H1, T6).udp(5000, 7000, b"hairpin"), 0);
    let err = V6::new(58, H2, T6).icmp(1, 4, [0; 4], &seen_by_h2);
    let back = fwd(&n, &err, 0);
    let sent_by_h1 = V6 { hop: 63, ..V6::new(17, H1, T6) }.udp(5000, 7000, b"hairpin");
    let expected = V6 { hop: 63, ..V6::new(58, T6, H1) }.icmp(1, 4, [0; 4], &sent_by_h1);
    assert_eq!(hex(&back), hex(&expected));
    assert_eq!(n.stats().hairpinned, 2);
}

/// RFC 6146 §3.8: the hairpinned packet never reaches the IPv4 link, so
/// `ipv4-mtu` (1280 here) does not apply: a 1400-byte packet arrives
/// whole. One too big for `ipv6-mtu` gets Packet Too Big (RFC 4443 §3.2)
/// with that MTU from the NAT64.
#[test]
fn rfc6146_3_8_hairpinned_packet_is_not_held_to_the_ipv4_mtu() {
    let xcfg = xlat::siit::Config { ipv4_mtu: 1280, ..Default::default() };
    let n = Nat64::with_xlat(hairpin_cfg(), xcfg).unwrap();
    let data = vec![0x5a; 1352];
    let pkt = V6::new(17, H1, T6).udp(5000, 7000, &data);
    assert_eq!(pkt.len(), 1400);
    let out = fwd(&n, &pkt, 0);
    let expected = V6 { hop: 63, ..V6::new(17, T6, H2) }.udp(be16(&out, 40), 7000, &data);
    assert_eq!(hex(&out), hex(&expected));

    let xcfg = xlat::siit::Config { ipv6_mtu: 1300, ..Default::default() };
    let n = Nat64::with_xlat(hairpin_cfg(), xcfg).unwrap();
    let e = icmp_err(&n, &pkt, 0);
    assert_eq!((e[40], e[41]), (2, 0));
    assert_eq!(be16(&e, 46), 1300);
    assert_eq!(v6src(&e), n.translator().ipv6_address());
    assert_eq!(v6dst(&e), a6(H1));
}

/// RFC 6146 §3.4 and §3.8: a fragmented datagram is reassembled, turned
/// around and fragmented again for the IPv6 side (RFC 7915 §4.1: DF is
/// clear, as on the fragments it came in), not dropped.
#[test]
fn rfc6146_3_8_hairpinned_datagram_needing_fragmentation_is_fragmented() {
    let n = nat(hairpin_cfg());
    let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    let upper = V6::new(17, H1, T6).udp_payload(5000, 7000, &data);
    let frags = frags6(H1, T6, 17, &[], &upper, 1232);
    assert_eq!(frags.len(), 3);
    for f in &frags[..2] {
        assert_eq!(dropped(&n, f, 0), DropReason::FragmentHeld);
    }
    let out = fwd_all(&n, &frags[2], 0);
    assert!(out.len() >= 3, "{} packets", out.len());
    for f in &out {
        assert!(f.len() <= 1280, "{} bytes", f.len());
        assert_eq!((v6src(f), v6dst(f)), (a6(T6), a6(H2)));
        assert_eq!(f[7], 63);
    }
    let whole = join6(&out);
    let t1 = be16(&whole, 0);
    assert_eq!(whole, V6::new(17, T6, H2).udp_payload(t1, 7000, &data));
}

// ---- §3.4 fragments --------------------------------------------------------

/// RFC 6146 §3.4 with RFC 7915 §5.1: a datagram the NAT64 reassembled is
/// translated as the fragments it came in would be (DF clear) and
/// fragmented for the IPv4 link; a Packet Too Big would ask its sender for
/// something it already did.
#[test]
fn rfc6146_3_4_reassembled_datagram_is_fragmented_for_the_ipv4_link() {
    let n = nat(cfg());
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let upper = V6::new(17, H1, Y6).udp_payload(4000, 53, &data);
    let frags = frags6(H1, Y6, 17, &[], &upper, 1232);
    for f in &frags[..frags.len() - 1] {
        assert_eq!(dropped(&n, f, 0), DropReason::FragmentHeld);
    }
    let out = fwd_all(&n, &frags[frags.len() - 1], 0);
    assert!(out.len() >= 3);
    for (i, f) in out.iter().enumerate() {
        assert!(f.len() <= 1500, "{} bytes", f.len());
        assert_eq!(f[6] & 0x40, 0, "DF clear");
        assert_eq!(f[6] & 0x20 != 0, i + 1 < out.len(), "MF on all but the last");
        assert_eq!(&f[16..20], &a4(Y4).octets());
    }
    let whole = join4(&out);
    assert_eq!(be16(&whole, 2), 53);
    assert_eq!(&whole[8..], &data[..]);
}

/// RFC 8200 §4.5: the reassembled datagram keeps the Per-Fragment
/// extension headers of the first fragment. An ICMPv6 error about it
/// (here Address Unreachable, the session table being full, RFC 6146
/// §3.5.1.1) quotes the datagram as its sender built it, Destination
/// Options header included.
#[test]
fn rfc8200_4_5_extension_headers_before_the_fragment_header_are_kept() {
    let mut c = cfg();
    c.max_sessions = 1;
    let n = nat(c);
    fwd(&n, &V6::new(17, H2, Y6).udp(1, 53, b"first"), 0);
    let data = vec![0x42u8; 100];
    let upper = V6::new(17, H1, Y6).udp_payload(4000, 53, &data);
    let dstopts = [44u8, 0, 1, 4, 0, 0, 0, 0]; // next: Fragment; PadN
    let frags = frags6(H1, Y6, 17, &dstopts, &upper, 64);
    assert_eq!(dropped(&n, &frags[0], 0), DropReason::FragmentHeld);
    let e = icmp_err(&n, &frags[1], 0);
    assert_eq!((e[40], e[41]), (1, 3));
    let mut original = V6::new(60, H1, Y6).build(&[17, 0, 1, 4, 0, 0, 0, 0], &upper);
    original.truncate(1280 - 48);
    assert_eq!(hex(&e[48..]), hex(&original));
}

// ---- §3.5.2.2 simultaneous open --------------------------------------------

/// RFC 6146 §3.5.2.2 (an unsolicited V4 SYN is stored; "if during this
/// interval the NAT64 receives and translates an outbound SYN for the
/// connection the stored inbound SYN MUST be dropped") with RFC 5382
/// REQ-2 (simultaneous open) and port preservation: the IPv6 host's SYN
/// from port 7400 maps to pool4 port 7400, the port the IPv4 peer opened
/// towards, so the peer's retransmitted SYN completes the connection.
#[test]
fn rfc6146_3_5_2_2_simultaneous_open_keeps_the_source_port() {
    let n = nat(cfg());
    let syn4 = V4::new(6, Y4, T4).tcp(80, 7400, SYN, b"");
    assert_eq!(dropped(&n, &syn4, 0), DropReason::SynHeld);
    let out = fwd(&n, &V6::new(6, H1, Y6).tcp(7400, 80, SYN, b""), S);
    assert_eq!(be16(&out, 20), 7400, "source port kept");
    assert_eq!(n.stats().held_syns, 0, "the stored SYN is dropped");
    let back = fwd(&n, &V4::new(6, Y4, T4).tcp(80, 7400, SYN | ACK, b""), 2 * S);
    assert_eq!(be16(&back, 42), 7400);
    let s = n.sessions(&Default::default(), 2 * S);
    assert_eq!(s[0].state, Some(TcpState::Established));
    assert!(n.expire(10 * S).icmp.is_empty(), "no Port Unreachable for the dropped SYN");
    // Whichever SYN comes first: a new TCP mapping keeps a free port ...
    let out = fwd(&n, &V6::new(6, H1, Y6).tcp(7500, 80, SYN, b""), 0);
    assert_eq!(be16(&out, 20), 7500);
    // ... and gets another when the port is taken.
    let out = fwd(&n, &V6::new(6, H2, Y6).tcp(7500, 80, SYN, b""), 0);
    assert_ne!(be16(&out, 20), 7500);
}

// ---- §3.6 / source-icmpv6-errors-better -----------------------------------

/// The source of an ICMPv6 error translated from an ICMPv4 error: with
/// `source-icmpv6-errors-better` (the default, as Jool's), the router that
/// sent it, under pool6; without, RFC 6146 §3.6's outgoing tuple, the
/// quoted packet's destination Y' (as if Y had sent it).
#[test]
fn rfc6146_3_6_source_of_translated_icmpv6_errors() {
    let router = "203.0.113.1";
    for (better, src) in [(true, "2001:db8:64::cb00:7101"), (false, Y6)] {
        let mut c = cfg();
        c.source_icmpv6_errors_better = better;
        let n = nat(c);
        let out = fwd(&n, &V6::new(17, H1, Y6).udp(4000, 53, b"q"), 0);
        let err4 = V4::new(1, router, T4).icmp(11, 0, [0; 4], &out);
        let e6 = fwd(&n, &err4, 0);
        assert_eq!((e6[40], e6[41]), (3, 0));
        assert_eq!(v6src(&e6), a6(src), "source-icmpv6-errors-better = {better}");
        assert_eq!(v6dst(&e6), a6(H1));
    }
    let c: Config = toml::from_str("pool4 = [\"192.0.2.1/32\"]\nsource-icmpv6-errors-better = false\n").unwrap();
    assert!(!c.source_icmpv6_errors_better);
    assert!(Config::default().source_icmpv6_errors_better);
}

// ---- §3.5.2.2 lifetimes ----------------------------------------------------

/// RFC 6146 §3.5.2.2: an established session whose TCP_EST lifetime runs
/// out moves to TRANS for TCP_TRANS, then goes. Each lifetime counts from
/// the end of the one before, however late expiry runs: one call after
/// both have passed removes the session (the offline translator's
/// `@advance` and a delayed timer see what a timer ticking all along saw).
#[test]
fn rfc6146_3_5_2_2_each_lifetime_counts_from_the_previous_deadline() {
    let n = nat(cfg());
    let out = fwd(&n, &V6::new(6, H1, Y6).tcp(7600, 80, SYN, b""), 0);
    fwd(&n, &V4::new(6, Y4, T4).tcp(80, be16(&out, 20), SYN | ACK, b""), 0);
    let s = n.sessions(&Default::default(), 0);
    assert_eq!(s[0].state, Some(TcpState::Established));
    let e = n.expire((7440 + 240) * S);
    assert_eq!((e.to_trans, e.sessions), (1, 1));
    assert!(n.sessions(&Default::default(), (7440 + 240) * S).is_empty());
    assert_eq!(n.stats().bib.get("tcp"), Some(&0));
}
