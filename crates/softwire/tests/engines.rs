//! The softwire engines end to end, packet by packet: a B4 and an AFTR
//! (DS-Lite, RFC 6333), lwB4s and an lwAFTR (RFC 7596), with every
//! emitted packet checked by etherparse (an independent parser: headers,
//! checksums).

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use proptest::prelude::*;
use softwire::aftr::{Aftr, AftrConfig};
use softwire::b4::{B4Config, Napt, B4};
use softwire::binding::{Binding, BindingTable};
use softwire::endpoint::EndpointConfig;
use softwire::lwaftr::{Lwaftr, LwaftrConfig};
use softwire::nat44::{Nat44Config, PoolPorts};
use softwire::portset::PsidMap;
use softwire::{Action, Reason};
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::{Out, PacketKind};

const AFTR: &str = "2001:db8:ffff::1";
const B4A: &str = "2001:db8:1::2";
const B4B: &str = "2001:db8:2::2";
const SERVER: [u8; 4] = [198, 51, 100, 1];
const POOL: [u8; 4] = [203, 0, 113, 1];

fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn udp4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ipv4(src, dst, 64).udp(sport, dport).write(&mut v, payload).unwrap();
    v
}

fn tcp4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, syn: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let b = PacketBuilder::ipv4(src, dst, 64).tcp(sport, dport, 1, 1000);
    if syn { b.syn() } else { b.ack(5) }.write(&mut v, b"").unwrap();
    v
}

fn ping4(src: [u8; 4], dst: [u8; 4], id: u16, reply: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let b = PacketBuilder::ipv4(src, dst, 64);
    if reply { b.icmpv4_echo_reply(id, 1) } else { b.icmpv4_echo_request(id, 1) }.write(&mut v, b"ping").unwrap();
    v
}

fn only(out: &Out) -> Vec<u8> {
    assert_eq!(out.len(), 1, "{out:?}");
    out.get(0).unwrap().1.to_vec()
}

/// Checks every checksum of an IPv4 packet; returns (src, sport, dst, dport).
fn v4_ends(pkt: &[u8]) -> (Ipv4Addr, u16, Ipv4Addr, u16) {
    let s = SlicedPacket::from_ip(pkt).unwrap();
    let Some(NetSlice::Ipv4(ip)) = &s.net else { panic!("not IPv4") };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    let (src, dst) = (h.source, h.destination);
    let (sp, dp) = match &s.transport {
        Some(TransportSlice::Udp(u)) => {
            assert_eq!(u.checksum(), u.to_header().calc_checksum_ipv4_raw(src, dst, u.payload()).unwrap());
            (u.source_port(), u.destination_port())
        }
        Some(TransportSlice::Tcp(t)) => {
            assert_eq!(t.checksum(), t.to_header().calc_checksum_ipv4_raw(src, dst, t.payload()).unwrap());
            (t.source_port(), t.destination_port())
        }
        Some(TransportSlice::Icmpv4(i)) => {
            assert_eq!(i.checksum(), etherparse::Icmpv4Header::with_checksum(i.icmp_type(), i.payload()).checksum);
            match i.icmp_type() {
                etherparse::Icmpv4Type::EchoRequest(e) | etherparse::Icmpv4Type::EchoReply(e) => (e.id, e.id),
                _ => (0, 0),
            }
        }
        _ => panic!("no transport"),
    };
    (src.into(), sp, dst.into(), dp)
}

/// Checks a tunnel packet; returns (src, dst, inner).
fn v6_tunnel(pkt: &[u8]) -> (Ipv6Addr, Ipv6Addr, Vec<u8>) {
    let s = SlicedPacket::from_ip(pkt).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &s.net else { panic!("not IPv6") };
    assert_eq!(ip.payload().ip_number, etherparse::IpNumber::IPV4);
    (ip.header().source_addr(), ip.header().destination_addr(), ip.payload().payload.to_vec())
}

fn ep(local: &str, icmp: [u8; 4]) -> EndpointConfig {
    EndpointConfig::new(a6(local), Ipv4Addr::from(icmp))
}

fn aftr(quota: u32) -> Aftr {
    Aftr::new(
        AftrConfig {
            endpoint: ep(AFTR, [192, 0, 0, 1]),
            b4_prefixes: vec!["2001:db8::/40".parse().unwrap()],
            nat: Nat44Config { max_ports_per_subscriber: quota, log_mappings: false, ..Default::default() },
            hairpinning: true,
            icmpv6_errors: true,
        },
        Box::new(PoolPorts::new(
            vec![nat64::Pool4Entry {
                prefix: "203.0.113.1/32".parse().unwrap(),
                ports: (1024, 65535),
                protocols: nat64::Protocol::ALL.to_vec(),
            }],
            1024,
        )),
    )
}

fn b4(local: &str, napt: Option<Napt>) -> B4 {
    B4::new(B4Config {
        endpoint: ep(local, [192, 0, 0, 2]),
        aftr: a6(AFTR),
        napt,
        nat: Nat44Config { log_mappings: false, ..Default::default() },
        mss_clamp: true,
    })
}

#[test]
fn dslite_udp_round_trip_through_b4_and_aftr() {
    let (b, a) = (b4(B4A, None), aftr(100));
    let mut out = Out::new();
    let lan = udp4([192, 168, 1, 2], 5000, SERVER, 53, b"query");
    assert_eq!(b.process(&lan, 0, &mut out), Action::Emit);
    let (src, dst, inner) = v6_tunnel(&only(&out));
    assert_eq!((src, dst, &inner[..]), (a6(B4A), a6(AFTR), &lan[..]), "RFC 6333: the IPv4 packet unaltered");
    let tp = only(&out);
    assert_eq!(a.process(&tp, 0, &mut out), Action::Emit);
    let wan = only(&out);
    let (s, sp, d, dp) = v4_ends(&wan);
    assert_eq!((s, d, dp), (Ipv4Addr::from(POOL), Ipv4Addr::from(SERVER), 53));
    // The answer comes back through the mapping to the B4 and the LAN host.
    let answer = udp4(SERVER, 53, POOL, sp, b"answer");
    assert_eq!(a.process(&answer, 1, &mut out), Action::Emit);
    let (src, dst, inner) = v6_tunnel(&only(&out));
    assert_eq!((src, dst), (a6(AFTR), a6(B4A)));
    assert_eq!(v4_ends(&inner), (Ipv4Addr::from(SERVER), 53, Ipv4Addr::new(192, 168, 1, 2), 5000));
    let tp = only(&out);
    assert_eq!(b.process(&tp, 1, &mut out), Action::Emit);
    assert_eq!(only(&out), inner);
    let c = a.counters().snapshot();
    assert_eq!((c.in6, c.in4, c.decapsulated, c.encapsulated), (1, 1, 1, 1));
    assert_eq!(a.nat().len(), 1);
}

#[test]
fn dslite_overlapping_private_addresses_and_hairpinning() {
    let (ba, bb, a) = (b4(B4A, None), b4(B4B, None), aftr(100));
    let mut out = Out::new();
    // Both B4s' hosts use 192.168.1.2:5000.
    let mut mapped = Vec::new();
    for b in [&ba, &bb] {
        b.process(&udp4([192, 168, 1, 2], 5000, SERVER, 53, b"q"), 0, &mut out);
        let tp = only(&out);
        assert_eq!(a.process(&tp, 0, &mut out), Action::Emit);
        mapped.push(v4_ends(&only(&out)).1);
    }
    assert_ne!(mapped[0], mapped[1]);
    // Host behind A sends to B's public mapping: hairpinned into B's softwire.
    ba.process(&udp4([192, 168, 1, 2], 5000, POOL, mapped[1], b"hi"), 1, &mut out);
    let tp = only(&out);
    assert_eq!(a.process(&tp, 1, &mut out), Action::Emit);
    let (src, dst, inner) = v6_tunnel(&only(&out));
    assert_eq!((src, dst), (a6(AFTR), a6(B4B)));
    assert_eq!(v4_ends(&inner), (Ipv4Addr::from(POOL), mapped[0], Ipv4Addr::new(192, 168, 1, 2), 5000));
    assert_eq!(a.counters().snapshot().hairpinned, 1);
}

#[test]
fn dslite_refusals_are_counted() {
    let a = aftr(2);
    let stranger = b4("2001:db9::2", None);
    let mut out = Out::new();
    stranger.process(&udp4([10, 0, 0, 1], 1, SERVER, 53, b"x"), 0, &mut out);
    let tp = only(&out);
    assert_eq!(a.process(&tp, 0, &mut out), Action::Drop(Reason::UnknownSoftwire));
    // ICMPv6 1/5 back to the stranger.
    let (k, e) = out.get(0).unwrap();
    assert_eq!(k, PacketKind::IcmpError);
    let s = SlicedPacket::from_ip(e).unwrap();
    let Some(TransportSlice::Icmpv6(i)) = s.transport else { panic!() };
    assert_eq!(
        i.icmp_type(),
        etherparse::Icmpv6Type::DestinationUnreachable(
            etherparse::icmpv6::DestUnreachableCode::SourceAddressFailedPolicy
        )
    );
    // Quota of two ports; the third flow is refused with ICMPv4 3/13
    // (administratively prohibited) from 192.0.0.1, back through the
    // softwire, quoting the flow's first packet.
    let b = b4(B4A, None);
    for port in [1, 2, 3] {
        let sent = udp4([10, 0, 0, 1], port, SERVER, 53, b"x");
        b.process(&sent, 0, &mut out);
        let tp = only(&out);
        let r = a.process(&tp, 0, &mut out);
        assert_eq!(r, if port < 3 { Action::Emit } else { Action::Drop(Reason::QuotaExceeded) });
        if port == 3 {
            let (src, dst, inner) = v6_tunnel(&only(&out));
            assert_eq!((src, dst), (a6(AFTR), a6(B4A)));
            let s = SlicedPacket::from_ip(&inner).unwrap();
            let Some(NetSlice::Ipv4(ip)) = &s.net else { panic!("not IPv4") };
            assert_eq!((ip.header().source(), ip.header().destination()), ([192, 0, 0, 1], [10, 0, 0, 1]));
            let Some(TransportSlice::Icmpv4(i)) = &s.transport else { panic!("not ICMP") };
            assert_eq!(
                i.icmp_type(),
                etherparse::Icmpv4Type::DestinationUnreachable(
                    etherparse::icmpv4::DestUnreachableHeader::FilterProhibited
                )
            );
            assert_eq!(i.checksum(), etherparse::Icmpv4Header::with_checksum(i.icmp_type(), i.payload()).checksum);
            assert_eq!(&i.payload()[..20], &sent[..20], "the refused packet's header, quoted");
        }
    }
    // TCP without SYN opens nothing; IPv4 to an unmapped port is refused.
    b.process(&tcp4([10, 0, 0, 1], 9, SERVER, 80, false), 0, &mut out);
    let tp = only(&out);
    assert_eq!(a.process(&tp, 0, &mut out), Action::Drop(Reason::NoMapping));
    assert_eq!(a.process(&udp4(SERVER, 53, POOL, 4444, b"x"), 0, &mut out), Action::Drop(Reason::NoMapping));
    assert_eq!(
        a.process(&udp4(SERVER, 53, [203, 0, 113, 9], 4444, b"x"), 0, &mut out),
        Action::Drop(Reason::NoSubscriber)
    );
    // Garbage.
    assert_eq!(a.process(&[0x60, 0, 0], 0, &mut out), Action::Drop(Reason::Malformed));
    let mut bad = tp.clone();
    bad[24] ^= 0xff; // destination no longer the AFTR
    assert_eq!(a.process(&bad, 0, &mut out), Action::Drop(Reason::NotForUs));
    let s = a.counters().snapshot();
    for r in [Reason::UnknownSoftwire, Reason::QuotaExceeded, Reason::NoSubscriber, Reason::NotForUs, Reason::Malformed]
    {
        assert_eq!(s.drop(r), 1, "{r:?}");
    }
    assert_eq!(s.drop(Reason::NoMapping), 2);
}

#[test]
fn dslite_ping_and_icmp_errors_follow_the_mapping() {
    let (b, a) = (b4(B4A, None), aftr(100));
    let mut out = Out::new();
    b.process(&ping4([192, 168, 1, 2], SERVER, 42, false), 0, &mut out);
    let tp = only(&out);
    a.process(&tp, 0, &mut out);
    let (_, id, _, _) = v4_ends(&only(&out));
    a.process(&ping4(SERVER, POOL, id, true), 0, &mut out);
    let (_, _, inner) = v6_tunnel(&only(&out));
    assert_eq!(v4_ends(&inner), (Ipv4Addr::from(SERVER), 42, Ipv4Addr::new(192, 168, 1, 2), 42));
    // A UDP flow, then a port unreachable about it from the server.
    b.process(&udp4([192, 168, 1, 2], 7000, SERVER, 9, b"x"), 0, &mut out);
    let tp = only(&out);
    a.process(&tp, 0, &mut out);
    let sent = only(&out);
    let mut err = Vec::new();
    PacketBuilder::ipv4(SERVER, POOL, 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::Port))
        .write(&mut err, &sent)
        .unwrap();
    assert_eq!(a.process(&err, 0, &mut out), Action::Emit);
    let (_, _, inner) = v6_tunnel(&only(&out));
    v4_ends(&inner);
    // The quoted packet is the host's original, as it sent it.
    assert_eq!(&inner[28..], &udp4([192, 168, 1, 2], 7000, SERVER, 9, b"x")[..]);
}

#[test]
fn rfc6333_5_3_fragmented_softwire_reassembled_at_the_aftr() {
    let b = B4::new(B4Config {
        endpoint: EndpointConfig { mtu: 1280, ..ep(B4A, [192, 0, 0, 2]) },
        aftr: a6(AFTR),
        napt: None,
        nat: Nat44Config::default(),
        mss_clamp: true,
    });
    let a = aftr(100);
    let mut out = Out::new();
    let big = udp4([192, 168, 1, 2], 5000, SERVER, 53, &[7u8; 1400]);
    assert_eq!(b.process(&big, 0, &mut out), Action::Emit);
    let frags: Vec<Vec<u8>> = out.iter().map(|(_, p)| p.to_vec()).collect();
    assert_eq!(frags.len(), 2);
    assert!(frags.iter().all(|f| f.len() <= 1280));
    assert_eq!(a.process(&frags[0], 0, &mut out), Action::Drop(Reason::FragmentHeld));
    assert_eq!(a.process(&frags[1], 0, &mut out), Action::Emit);
    let wan = only(&out);
    assert_eq!(wan.len(), big.len());
    assert_eq!(v4_ends(&wan).2, Ipv4Addr::from(SERVER));
    assert_eq!(a.counters().snapshot().reassembled, 1);
}

#[test]
fn rfc2473_8_packet_too_big_relayed_to_the_server() {
    let a = aftr(100);
    let b = b4(B4A, None);
    let mut out = Out::new();
    b.process(&udp4([192, 168, 1, 2], 5000, SERVER, 53, b"q"), 0, &mut out);
    let tp = only(&out);
    a.process(&tp, 0, &mut out);
    let sp = v4_ends(&only(&out)).1;
    let mut big = udp4(SERVER, 53, POOL, sp, &[1u8; 1400]);
    big[6] |= 0x40; // DF
    let c = {
        big[10] = 0;
        big[11] = 0;
        xlat::checksum::finish(xlat::checksum::sum(&big[..20]))
    };
    big[10..12].copy_from_slice(&c.to_be_bytes());
    a.process(&big, 0, &mut out);
    let tunnel_pkt = only(&out);
    // A router on the way to the B4 says 1300.
    let mut ptb = Vec::new();
    PacketBuilder::ipv6([0x20, 1, 0xd, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], a6(AFTR).octets(), 64)
        .icmpv6(etherparse::Icmpv6Type::PacketTooBig { mtu: 1300 })
        .write(&mut ptb, &tunnel_pkt[..1232])
        .unwrap();
    assert_eq!(a.process(&ptb, 0, &mut out), Action::Emit);
    let e = only(&out);
    let s = SlicedPacket::from_ip(&e).unwrap();
    let Some(TransportSlice::Icmpv4(i)) = s.transport else { panic!() };
    assert_eq!(
        i.icmp_type(),
        etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1260 }
        )
    );
    let Some(NetSlice::Ipv4(ip)) = s.net else { panic!() };
    assert_eq!(ip.header().destination(), SERVER);
}

fn lw_table() -> BindingTable {
    let map = PsidMap::new(6, 6).unwrap();
    let mut t = BindingTable::new();
    t.insert(Binding { b4: a6(B4A), ipv4: Ipv4Addr::new(192, 0, 2, 1), psid: 1, map }).unwrap();
    t.insert(Binding { b4: a6(B4B), ipv4: Ipv4Addr::new(192, 0, 2, 1), psid: 2, map }).unwrap();
    t
}

fn lwaftr() -> Lwaftr {
    Lwaftr::new(
        LwaftrConfig {
            endpoint: ep(AFTR, [192, 0, 0, 1]),
            hairpinning: true,
            icmpv4_errors: true,
            icmpv6_errors: true,
        },
        lw_table(),
    )
}

fn lwb4(local: &str, psid: u16) -> B4 {
    b4(local, Some(Napt { ipv4: Ipv4Addr::new(192, 0, 2, 1), map: PsidMap::new(6, 6).unwrap(), psid, host: None }))
}

#[test]
fn lw4o6_napt_round_trip_and_port_set() {
    let (b, l) = (lwb4(B4A, 1), lwaftr());
    let map = PsidMap::new(6, 6).unwrap();
    let mut out = Out::new();
    assert_eq!(b.process(&tcp4([192, 168, 1, 9], 33333, SERVER, 80, true), 0, &mut out), Action::Emit);
    let tp = only(&out);
    let (_, _, inner) = v6_tunnel(&tp);
    let (s, sp, _, _) = v4_ends(&inner);
    assert_eq!(s, Ipv4Addr::new(192, 0, 2, 1));
    assert!(map.allowed(sp, 1), "the lwB4 maps into its port set: {sp}");
    assert_eq!(l.process(&tp, 0, &mut out), Action::Emit);
    assert_eq!(only(&out), inner, "no NAT at the lwAFTR");
    let mut back = Vec::new();
    PacketBuilder::ipv4(SERVER, [192, 0, 2, 1], 64).tcp(80, sp, 9, 1000).syn().ack(2).write(&mut back, b"").unwrap();
    assert_eq!(l.process(&back, 0, &mut out), Action::Emit);
    let tp = only(&out);
    assert_eq!(v6_tunnel(&tp).1, a6(B4A));
    assert_eq!(b.process(&tp, 0, &mut out), Action::Emit);
    assert_eq!(v4_ends(&only(&out)), (Ipv4Addr::from(SERVER), 80, Ipv4Addr::new(192, 168, 1, 9), 33333));
    // The other subscriber's port is not ours: the lwAFTR sends it to B4B.
    let theirs = map.nth(2, 5);
    l.process(&udp4(SERVER, 53, [192, 0, 2, 1], theirs, b"x"), 0, &mut out);
    assert_eq!(v6_tunnel(&only(&out)).1, a6(B4B));
    // Nobody's port (A = 0) and an unbound address.
    assert_eq!(l.process(&udp4(SERVER, 53, [192, 0, 2, 1], 80, b"x"), 0, &mut out), Action::Drop(Reason::NoSubscriber));
    assert_eq!(out.get(0).map(|(k, _)| k), Some(PacketKind::IcmpError), "RFC 7596 §6.2: ICMPv4 3/1");
}

/// The lwB4 of a `[b4]` table with `psid-length` `len` (PSID 1), as
/// `v6gate softwire` builds it from its configuration.
fn lwb4_from_config(len: u8) -> B4 {
    let text = format!(
        "[b4]\nmode = \"lw4o6\"\naddress = \"{B4A}\"\naftr = \"{AFTR}\"\nipv4-address = \"192.0.2.1\"\n\
         psid = 1\npsid-length = {len}\n"
    );
    B4::new(softwire::config::SoftwireConfig::parse(&text).unwrap().b4.unwrap().b4)
}

/// Issue #15: the lwB4's NAPT (one subscriber: its LAN) is limited by its
/// port set, not by the AFTR's per-subscriber quota (2048 by default),
/// which refused every new flow after 2,000 TCP sessions and 48 UDP flows.
#[test]
fn lw4o6_b4_napt_is_limited_by_its_port_set_not_a_quota() {
    // PSID length 2: 15,360 ports per protocol.
    let b = lwb4_from_config(2);
    let mut out = Out::new();
    for i in 0..2000u16 {
        assert_eq!(
            b.process(&tcp4([192, 168, 1, 9], 20000 + i, SERVER, 80, true), 0, &mut out),
            Action::Emit,
            "TCP {i}"
        );
    }
    for i in 0..100u16 {
        let a = b.process(&udp4([192, 168, 1, 9], 40000 + i, SERVER, 5003, b"x"), 0, &mut out);
        assert_eq!(a, Action::Emit, "UDP flow {i} after 2,000 TCP sessions");
    }
    // PSID length 6: 1,008 ports per protocol; the set, then nothing.
    let b = lwb4_from_config(6);
    let map = PsidMap::new(6, 6).unwrap();
    for i in 0..1008u16 {
        assert_eq!(
            b.process(&udp4([192, 168, 1, 9], 20000 + i, SERVER, 5003, b"x"), 0, &mut out),
            Action::Emit,
            "UDP {i}"
        );
        let (_, _, inner) = v6_tunnel(&only(&out));
        assert!(map.allowed(v4_ends(&inner).1, 1));
    }
    let a = b.process(&udp4([192, 168, 1, 9], 30000, SERVER, 5003, b"x"), 0, &mut out);
    assert_eq!(a, Action::Drop(Reason::PoolExhausted), "the set is full");
    // Each protocol has its own set.
    assert_eq!(b.process(&tcp4([192, 168, 1, 9], 30000, SERVER, 80, true), 0, &mut out), Action::Emit);
}

/// A softwire packet from `b4` carrying `inner` (what a misbehaving lwB4 sends).
fn raw_softwire(b4: &str, inner: &[u8]) -> Vec<u8> {
    let mut out = Out::new();
    xlat::tunnel::ip4in6::encap(inner, a6(b4), a6(AFTR), 64, None, false, &mut out);
    only(&out)
}

#[test]
fn rfc7596_6_1_port_set_violations_dropped_counted_and_answered() {
    let l = lwaftr();
    let map = PsidMap::new(6, 6).unwrap();
    let mut out = Out::new();
    let mine = map.nth(1, 3);
    let theirs = map.nth(2, 3);
    let ok = raw_softwire(B4A, &udp4([192, 0, 2, 1], mine, SERVER, 53, b"x"));
    assert_eq!(l.process(&ok, 0, &mut out), Action::Emit);
    let bad_port = raw_softwire(B4A, &udp4([192, 0, 2, 1], theirs, SERVER, 53, b"x"));
    assert_eq!(l.process(&bad_port, 0, &mut out), Action::Drop(Reason::PortSetViolation));
    let s = SlicedPacket::from_ip(out.get(0).unwrap().1).unwrap();
    let Some(TransportSlice::Icmpv6(i)) = s.transport else { panic!("ICMPv6 1/5 expected") };
    assert_eq!(
        i.icmp_type(),
        etherparse::Icmpv6Type::DestinationUnreachable(
            etherparse::icmpv6::DestUnreachableCode::SourceAddressFailedPolicy
        )
    );
    let wrong_addr = raw_softwire(B4A, &udp4([192, 0, 2, 2], mine, SERVER, 53, b"x"));
    assert_eq!(l.process(&wrong_addr, 0, &mut out), Action::Drop(Reason::WrongAddress));
    let stranger = raw_softwire("2001:db8:9::9", &udp4([192, 0, 2, 1], mine, SERVER, 53, b"x"));
    assert_eq!(l.process(&stranger, 0, &mut out), Action::Drop(Reason::NoBinding));
    // ICMP: an echo identifier outside the set, an error quoting our port.
    let ping = raw_softwire(B4A, &ping4([192, 0, 2, 1], SERVER, theirs, false));
    assert_eq!(l.process(&ping, 0, &mut out), Action::Drop(Reason::PortSetViolation));
    let ping = raw_softwire(B4A, &ping4([192, 0, 2, 1], SERVER, mine, false));
    assert_eq!(l.process(&ping, 0, &mut out), Action::Emit);
    let s = l.counters().snapshot();
    assert_eq!((s.drop(Reason::PortSetViolation), s.drop(Reason::WrongAddress), s.drop(Reason::NoBinding)), (2, 1, 1));
}

#[test]
fn lw4o6_hairpinning_and_reload() {
    let l = lwaftr();
    let map = PsidMap::new(6, 6).unwrap();
    let mut out = Out::new();
    let pkt = raw_softwire(B4A, &udp4([192, 0, 2, 1], map.nth(1, 0), [192, 0, 2, 1], map.nth(2, 0), b"x"));
    assert_eq!(l.process(&pkt, 0, &mut out), Action::Emit);
    let (src, dst, _) = v6_tunnel(&only(&out));
    assert_eq!((src, dst), (a6(AFTR), a6(B4B)));
    // A reload that moves B4B to PSID 3: the old port is nobody's now.
    let mut t = BindingTable::new();
    t.insert(Binding { b4: a6(B4A), ipv4: Ipv4Addr::new(192, 0, 2, 1), psid: 1, map }).unwrap();
    t.insert(Binding { b4: a6(B4B), ipv4: Ipv4Addr::new(192, 0, 2, 1), psid: 3, map }).unwrap();
    l.replace_bindings(t);
    assert_eq!(
        l.process(&udp4(SERVER, 1, [192, 0, 2, 1], map.nth(2, 0), b"x"), 0, &mut out),
        Action::Drop(Reason::NoSubscriber)
    );
    l.process(&udp4(SERVER, 1, [192, 0, 2, 1], map.nth(3, 0), b"x"), 0, &mut out);
    assert_eq!(v6_tunnel(&only(&out)).1, a6(B4B));
    // DSTM leases are consulted after the static table.
    let mut leases = BindingTable::new();
    leases
        .insert(Binding { b4: a6("2001:db8:7::7"), ipv4: Ipv4Addr::new(192, 0, 2, 77), psid: 0, map: PsidMap::FULL })
        .unwrap();
    l.set_leases(leases);
    l.process(&udp4(SERVER, 1, [192, 0, 2, 77], 80, b"x"), 0, &mut out);
    assert_eq!(v6_tunnel(&only(&out)).1, a6("2001:db8:7::7"));
    let from_lease = raw_softwire("2001:db8:7::7", &udp4([192, 0, 2, 77], 80, SERVER, 1, b"x"));
    assert_eq!(l.process(&from_lease, 0, &mut out), Action::Emit);
    // The last lease released: neither direction reaches the old holder.
    l.set_leases(BindingTable::new());
    assert_eq!(l.process(&from_lease, 0, &mut out), Action::Drop(Reason::NoBinding));
    assert_eq!(l.process(&udp4(SERVER, 1, [192, 0, 2, 77], 80, b"x"), 0, &mut out), Action::Drop(Reason::NoSubscriber));
    assert_eq!(l.lookup4(Ipv4Addr::new(192, 0, 2, 77), 80), None);
}

#[test]
fn aftr_endpoint_answers_ping() {
    let a = aftr(1);
    let mut req = Vec::new();
    PacketBuilder::ipv6(a6(B4A).octets(), a6(AFTR).octets(), 64)
        .icmpv6_echo_request(1, 1)
        .write(&mut req, b"x")
        .unwrap();
    let mut out = Out::new();
    assert_eq!(a.process(&req, 0, &mut out), Action::Emit);
    let r = only(&out);
    let s = SlicedPacket::from_ip(&r).unwrap();
    let Some(TransportSlice::Icmpv6(i)) = s.transport else { panic!() };
    assert!(matches!(i.icmp_type(), etherparse::Icmpv6Type::EchoReply(_)));
}

proptest! {
    #[test]
    fn hostile_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400), v6 in any::<bool>()) {
        let (a, l, b, lb) = (aftr(4), lwaftr(), b4(B4A, None), lwb4(B4A, 1));
        let mut out = Out::new();
        let mut pkt = data.clone();
        if let Some(f) = pkt.first_mut() {
            *f = (*f & 0x0f) | if v6 { 0x60 } else { 0x45 };
        }
        // Arbitrary bytes as the inner packet of a well-formed softwire header.
        let mut sw = Vec::new();
        PacketBuilder::ipv6(a6(B4A).octets(), a6(AFTR).octets(), 64).write(&mut sw, etherparse::IpNumber(4), &pkt).unwrap();
        for p in [&data, &pkt, &sw] {
            let _ = a.process(p, 0, &mut out);
            let _ = l.process(p, 0, &mut out);
            let _ = b.process(p, 0, &mut out);
            let _ = lb.process(p, 0, &mut out);
        }
    }
}
