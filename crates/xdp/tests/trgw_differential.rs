//! The TrGW differential test: relay legs mirrored into `trgw_relay`,
//! datagrams run through the XDP program with BPF_PROG_TEST_RUN and
//! through a model of the slow path. The slow path relays with UDP
//! sockets (crates/trgw), so its "core" is what Linux does: receive the
//! datagram on the relay socket (IPv4 header and UDP checksum verified,
//! a zero IPv4 UDP checksum accepted), and send its payload unchanged from
//! the other leg's socket to the other far end, with a header of the
//! kernel's making (TTL/Hop Limit 64, TOS/Traffic Class 0, IPv4 DF set and
//! Identification 0 on an unconnected socket, the UDP checksum computed
//! afresh). The one field the fast path cannot reproduce is the IPv6 flow
//! label Linux derives from a flow hash (`net.ipv6.auto_flowlabels`); the
//! fast path sends 0 and the model says 0 (docs/xdp.md). Each result is
//! XDP_PASS with the frame unchanged, or byte-identical to the model.

#[path = "../../xlat/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use proptest::prelude::*;
use std::net::{IpAddr, SocketAddr};
use support::{frame, hex, run, set_forwarding, Fwd, Net, Outcome};
use xdp::trgw::Leg;
use xdp::types::progs;

/// The slow path's output for `l3` arriving on `leg`, or why it has none.
fn model(leg: &Leg, l3: &[u8]) -> Result<Vec<u8>, String> {
    let sp = SlicedPacket::from_ip(l3).map_err(|e| format!("kernel drops it: {e}"))?;
    let (src, dst): (IpAddr, IpAddr) = match &sp.net {
        Some(NetSlice::Ipv4(v4)) => {
            let h = v4.header();
            if h.to_header().calc_header_checksum() != h.header_checksum() {
                return Err("bad IPv4 header checksum".into());
            }
            if h.is_fragmenting_payload() {
                return Err("a fragment (reassembled first)".into());
            }
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()))
        }
        Some(NetSlice::Ipv6(v6)) => (IpAddr::V6(v6.header().source_addr()), IpAddr::V6(v6.header().destination_addr())),
        _ => return Err("not IP".into()),
    };
    let Some(TransportSlice::Udp(u)) = &sp.transport else { return Err("not UDP".into()) };
    if SocketAddr::new(dst, u.destination_port()) != leg.local {
        return Err("not for the relay socket".into());
    }
    if SocketAddr::new(src, u.source_port()) != leg.latched {
        return Err("not from the latched peer".into());
    }
    let payload = u.payload();
    if usize::from(u.length()) != 8 + payload.len() {
        return Err("UDP length".into());
    }
    let ok = match (&sp.net, src, dst) {
        (Some(NetSlice::Ipv4(_)), IpAddr::V4(s), IpAddr::V4(d)) => {
            u.checksum() == 0
                || u.to_header().calc_checksum_ipv4_raw(s.octets(), d.octets(), payload).ok() == Some(u.checksum())
        }
        (Some(NetSlice::Ipv6(_)), IpAddr::V6(s), IpAddr::V6(d)) => {
            u.to_header().calc_checksum_ipv6_raw(s.octets(), d.octets(), payload).ok() == Some(u.checksum())
        }
        _ => false,
    };
    if !ok {
        return Err("UDP checksum".into());
    }
    let out_peer = leg.out_peer.ok_or("no far end on the other leg")?;
    let (sport, dport) = (leg.out_local.port(), out_peer.port());
    Ok(match (leg.out_local.ip(), out_peer.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            V4 { tos: 0, id: 0, df: true, mf: false, offset: 0, ttl: 64, proto: 17, src: s, dst: d }
                .udp(sport, dport, payload)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            V6 { tc: 0, flow: 0, hop: 64, next: 17, src: s, dst: d }.udp(sport, dport, payload)
        }
        _ => return Err("mixed families".into()),
    })
}

/// The differential check; the model relays through whichever mirrored
/// leg the datagram is addressed to.
fn diff(net: &Net, leg: &Leg, l3: &[u8]) -> Outcome {
    let o = run(net, progs::TRGW, &frame(l3), net.ingress(l3));
    if let Outcome::Forwarded(got) = &o {
        let want = std::iter::once(*leg)
            .chain(legs().into_iter().map(|(_, l)| l))
            .map(|l| model(&l, l3))
            .find(|r| r.is_ok())
            .unwrap_or_else(|| model(leg, l3))
            .unwrap_or_else(|e| panic!("fast path relayed what the slow path does not: {e}\ninput {}", hex(l3)));
        assert_eq!(hex(got), hex(&want), "fast path and slow path differ for input {}", hex(l3));
        check(got);
    }
    o
}

/// The four directions: (leg, a datagram from its latched peer).
fn legs() -> Vec<(&'static str, Leg)> {
    let l = |local: &str, latched: &str, out_local: &str, out_peer: &str, i| Leg {
        local: local.parse().unwrap(),
        latched: latched.parse().unwrap(),
        out_local: out_local.parse().unwrap(),
        out_peer: Some(out_peer.parse().unwrap()),
        stats_index: i,
    };
    vec![
        ("6to4", l("[2001:db8:6::1]:30000", "[2001:db8:6::99]:4000", "192.0.2.1:30002", "198.51.100.7:5004", 0)),
        ("4to6", l("192.0.2.1:30002", "198.51.100.7:5004", "[2001:db8:6::1]:30000", "[2001:db8:6::99]:4000", 2)),
        (
            "6to6",
            l("[2001:db8:6::1]:30004", "[2001:db8:6::98]:4002", "[2001:db8:6::1]:30006", "[2001:db8:7::5]:6000", 4),
        ),
        ("4to4", l("192.0.2.1:30008", "198.51.100.8:5006", "192.0.2.1:30010", "203.0.113.9:7000", 8)),
    ]
}

fn datagram(leg: &Leg, payload: &[u8], ttl: u8, tos: u8) -> Vec<u8> {
    match (leg.latched.ip(), leg.local.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => V4 { tos, ttl, ..V4::new(17, &s.to_string(), &d.to_string()) }.udp(
            leg.latched.port(),
            leg.local.port(),
            payload,
        ),
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            V6 { tc: tos, hop: ttl, flow: 0x12345, ..V6::new(17, &s.to_string(), &d.to_string()) }.udp(
                leg.latched.port(),
                leg.local.port(),
                payload,
            )
        }
        _ => unreachable!(),
    }
}

/// A G.711 RTP packet: 12-byte header and 160 bytes of audio.
fn rtp(seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 160).to_be_bytes());
    p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    p.extend(std::iter::repeat_n(0xd5, 160));
    p
}

#[test]
fn relay_all_four_directions() {
    lab::need_root!();
    let mut net = Net::new("xdp-trgw");
    net.fp.set_trgw(true).unwrap();
    for (_, leg) in legs() {
        let (k, v) = leg.entry().unwrap();
        net.fp.relay_insert(&k, &v).unwrap();
    }
    for (name, leg) in legs() {
        for seq in 0..3 {
            let o = diff(&net, &leg, &datagram(&leg, &rtp(seq), 60, 0xb8));
            assert!(matches!(o, Outcome::Forwarded(_)), "{name}: RTP not relayed");
        }
        // RTCP-sized and odd-length payloads take the same path.
        assert!(matches!(diff(&net, &leg, &datagram(&leg, &[7u8; 77], 1, 0),), Outcome::Forwarded(_)), "{name}: odd");
        // Not from the latched peer: the slow path decides (and may latch).
        let mut other = leg;
        other.latched.set_port(leg.latched.port() + 1);
        assert_eq!(diff(&net, &leg, &datagram(&other, &rtp(9), 60, 0)), Outcome::Passed, "{name}: other source");
        // A bad checksum: the socket would discard it; the fast path passes it.
        let mut bad = datagram(&leg, &rtp(10), 60, 0);
        let n = bad.len();
        bad[n - 1] ^= 0x40;
        assert_eq!(diff(&net, &leg, &bad), Outcome::Passed, "{name}: bad checksum");
        let st = net.fp.relay_stats(leg.stats_index).unwrap();
        assert_eq!((st.packets, st.bytes), (4, 3 * 172 + 77), "{name}: per-stream counters");
    }
    // A leg whose other far end is unknown, and no relay entry at all.
    let (_, leg) = legs().remove(0);
    let (k, v) = Leg { out_peer: None, ..leg }.entry().unwrap();
    net.fp.relay_insert(&k, &v).unwrap();
    assert_eq!(diff(&net, &leg, &datagram(&leg, &rtp(1), 60, 0)), Outcome::Passed, "other far end unknown");
    assert!(net.fp.relay_remove(&k).unwrap());
    assert_eq!(diff(&net, &leg, &datagram(&leg, &rtp(1), 60, 0)), Outcome::Passed, "removed");
    let c = net.fp.counter_map().unwrap();
    assert_eq!(c["trgw"].packets, 16, "{c:?}");
    assert_eq!(c["not-latched"].packets, 5, "{c:?}");
    assert_eq!(c["udp-checksum"].packets, 4, "{c:?}");
    // Off: everything passes.
    net.fp.set_trgw(false).unwrap();
    let (_, leg) = legs().remove(1);
    assert_eq!(diff(&net, &leg, &datagram(&leg, &rtp(1), 60, 0)), Outcome::Passed, "TrGW off");
}

#[test]
fn generated_and_mutated_datagrams() {
    lab::need_root!();
    let mut net = Net::new("xdp-trgw-prop");
    generated(&mut net, 400);
}

/// The same with the test network's routes and next hops mirrored (the
/// program's cheap forwarding, no `bpf_fib_lookup`): same packets, the
/// next hop's MACs (`run` checks them).
#[test]
fn generated_with_mirrored_routes() {
    lab::need_root!();
    let mut net = Net::new("xdp-trgw-routes");
    set_forwarding(&mut net, &Fwd::Routes);
    generated(&mut net, 200);
    assert!(net.fp.counter_map().unwrap()["trgw"].packets > 0);
}

/// Every leg mirrored, then `cases` generated datagrams (which must be
/// relayed exactly when they fit the MTU) and as many mutated ones.
fn generated(net: &mut Net, cases: u32) {
    net.fp.set_trgw(true).unwrap();
    let all = legs();
    for (_, leg) in &all {
        let (k, v) = leg.entry().unwrap();
        net.fp.relay_insert(&k, &v).unwrap();
    }
    let net = &*net;
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases, ..ProptestConfig::default() });
    runner
        .run(
            &(0usize..4, prop::collection::vec(any::<u8>(), 0..1400), 1u8..=255, any::<u8>()),
            |(i, data, ttl, tos)| {
                let leg = &all[i].1;
                let l3 = datagram(leg, &data, ttl, tos);
                let out_len =
                    l3.len() + usize::from(leg.out_local.is_ipv6()) * 20 - usize::from(leg.local.is_ipv6()) * 20;
                let o = diff(net, leg, &l3);
                prop_assert_eq!(matches!(o, Outcome::Forwarded(_)), out_len <= 1500, "relay choice for {}", hex(&l3));
                Ok(())
            },
        )
        .unwrap();
    let mutate =
        (0usize..4, prop::collection::vec((0usize..80, any::<u8>()), 1..4), prop::collection::vec(any::<u8>(), 0..100));
    runner
        .run(&mutate, |(i, flips, data)| {
            let leg = &all[i].1;
            let mut l3 = datagram(leg, &data, 64, 0);
            for (at, x) in flips {
                let at = at % l3.len();
                l3[at] ^= x | 1;
            }
            diff(net, leg, &l3);
            Ok(())
        })
        .unwrap();
}
