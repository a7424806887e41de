//! Packet vectors through the full stateful path: TCP, UDP and ICMP both
//! ways, refusals with their ICMP errors and counters, filtering,
//! hairpinning, static BIB, timeouts with a fake clock, fragments, ICMP
//! errors mapped through the BIB, NAT-PT pool mode and reloads. Every
//! emitted packet is validated with etherparse (`common::check`).

mod support;

use nat64::{Config, Mode, Nat64, Pool4Entry, Protocol, SessionFilter, StaticBib, TcpState};
use support::*;
use xlat::{DropReason, Out, Verdict};

fn stat(n: &Nat64, table: &str, p: &str) -> u64 {
    let s = n.stats();
    let m = match table {
        "sessions" => s.sessions,
        "bib" => s.bib,
        "refused" => s.refused,
        "drops" => s.drops,
        "used" => s.pool4_ports_used,
        _ => unreachable!(),
    };
    m.get(p).copied().unwrap_or(0)
}

/// A v6 UDP flow out and its reply back; returns the allocated port.
fn udp_out_and_back(n: &Nat64, host: &str, sport: u16, now: u64) -> u16 {
    let out = fwd(n, &V6::new(17, host, Y6).udp(sport, 53, b"query"), now);
    assert_eq!(out[0] >> 4, 4);
    assert_eq!(v4src(&out), a4(T4));
    assert_eq!(v4dst(&out), a4(Y4));
    let t = be16(&out, 20);
    assert_eq!(be16(&out, 22), 53);
    assert_eq!(&out[28..], b"query");
    let back = fwd(n, &V4::new(17, Y4, T4).udp(53, t, b"answer"), now);
    assert_eq!(v6src(&back), a6(Y6));
    assert_eq!(v6dst(&back), a6(host));
    assert_eq!(be16(&back, 40), 53);
    assert_eq!(be16(&back, 42), sport);
    assert_eq!(&back[48..], b"answer");
    t
}

#[test]
fn udp_both_ways_endpoint_independent_mapping() {
    let n = nat(cfg());
    let t = udp_out_and_back(&n, H1, 40000, 0);
    assert!(t >= 1024, "RFC 6146 §3.5.1.1: port range class kept");
    assert_eq!(t % 2, 0, "parity kept");
    // Same source to another destination: same mapping (EIM).
    let out = fwd(&n, &V6::new(17, H1, Y6B).udp(40000, 53, b"x"), 0);
    assert_eq!(be16(&out, 20), t);
    // Endpoint-independent filtering: a third party reaches the mapping.
    let back = fwd(&n, &V4::new(17, "203.0.113.9", T4).udp(9, t, b"y"), 0);
    assert_eq!(be16(&back, 42), 40000);
    assert_eq!(stat(&n, "sessions", "udp"), 3);
    assert_eq!(stat(&n, "bib", "udp"), 1);
    let s = n.sessions(&SessionFilter { protocol: Some(Protocol::Udp), ..Default::default() }, 0);
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|i| i.ipv4_src.port() == t && i.ipv6_src.port() == 40000));
}

#[test]
fn udp_to_unmapped_port_is_refused_with_port_unreachable() {
    let n = nat(cfg());
    let e = icmp_err(&n, &V4::new(17, Y4, T4).udp(53, 4444, b"?"), 0);
    assert_eq!((e[20], e[21]), (3, 3), "ICMPv4 Port Unreachable");
    assert_eq!(v4dst(&e), a4(Y4));
    assert_eq!(v4src(&e), a4(T4), "from the address the sender tried");
    assert_eq!(stat(&n, "refused", "no-binding"), 1);
    // Not a pool4 address at all.
    assert_eq!(
        dropped(&n, &V4::new(17, Y4, "192.0.2.99").udp(53, 4444, b"?"), 0),
        DropReason::UntranslatableDestination
    );
    // Outside pool6.
    assert_eq!(
        dropped(&n, &V6::new(17, H1, "2001:db8:65::1").udp(1, 2, b"?"), 0),
        DropReason::UntranslatableDestination
    );
    // Other transport protocols have no state.
    assert_eq!(dropped(&n, &V6::new(132, H1, Y6).build(&[], &[0; 12]), 0), DropReason::UnsupportedProtocol);
}

fn tcp6(flags: u8, sport: u16) -> Vec<u8> {
    V6::new(6, H1, Y6).tcp(sport, 80, flags, b"")
}
fn tcp4(flags: u8, t: u16) -> Vec<u8> {
    V4::new(6, Y4, T4).tcp(80, t, flags, b"")
}
fn tcp_state(n: &Nat64) -> Option<TcpState> {
    let s = n.sessions(&SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() }, 0);
    s.first().and_then(|i| i.state)
}

#[test]
fn tcp_lifecycle_both_ways() {
    let mut c = cfg();
    c.tcp_trans_timeout = nat64::config::Secs(4);
    c.tcp_est_timeout = nat64::config::Secs(100);
    let n = nat(c);
    // A non-SYN with no session and no BIB entry is dropped (CLOSED).
    assert_eq!(dropped(&n, &tcp6(ACK, 5555), 0), DropReason::NoSession);
    assert_eq!(dropped(&n, &tcp4(ACK, 5555), 0), DropReason::NoBinding);
    // A source inside pool6 would loop.
    assert_eq!(dropped(&n, &V6::new(6, Y6B, Y6).tcp(1, 80, SYN, b""), 0), DropReason::HairpinLoop);
    let out = fwd(&n, &tcp6(SYN, 5555), 0);
    let t = be16(&out, 20);
    assert_eq!(out[20 + 13], SYN);
    assert_eq!(tcp_state(&n), Some(TcpState::V6Init));
    let back = fwd(&n, &tcp4(SYN | ACK, t), S);
    assert_eq!(be16(&back, 42), 5555);
    assert_eq!(tcp_state(&n), Some(TcpState::Established));
    fwd(&n, &tcp6(ACK, 5555), S);
    fwd(&n, &tcp6(FIN | ACK, 5555), 2 * S);
    assert_eq!(tcp_state(&n), Some(TcpState::V6FinRcv));
    fwd(&n, &tcp4(FIN | ACK, t), 2 * S);
    assert_eq!(tcp_state(&n), Some(TcpState::V4FinV6FinRcv));
    fwd(&n, &tcp6(ACK, 5555), 2 * S);
    // TRANS lifetime (4 s) from the second FIN.
    let e = n.expire(5 * S);
    assert_eq!(e.sessions, 0);
    let e = n.expire(6 * S + 1);
    assert_eq!(e.sessions, 1);
    assert_eq!(stat(&n, "sessions", "tcp"), 0);
    assert_eq!(stat(&n, "bib", "tcp"), 0);
    assert_eq!(stat(&n, "used", "tcp"), 0, "port given back to pool4");
    assert_eq!(n.stats().sessions_expired["tcp"], 1);
}

/// A close after the expiry timer has already rescheduled the session at
/// its established deadline: the transitory lifetime from the second FIN
/// is what counts (RFC 6146 §3.5.2.2), not the later deadline the timer
/// held (the lifetime shortened, so the timer is moved up).
#[test]
fn tcp_close_after_a_long_established_phase_expires_at_trans() {
    let mut c = cfg();
    c.tcp_trans_timeout = nat64::config::Secs(4);
    c.tcp_est_timeout = nat64::config::Secs(100);
    let n = nat(c);
    let t = be16(&fwd(&n, &tcp6(SYN, 6100), 0), 20);
    fwd(&n, &tcp4(SYN | ACK, t), 0);
    // The timer passes the opening's deadline: rescheduled at 100 s.
    assert_eq!(n.expire(5 * S).sessions, 0);
    fwd(&n, &tcp6(FIN | ACK, 6100), 10 * S);
    fwd(&n, &tcp4(FIN | ACK, t), 10 * S);
    assert_eq!(tcp_state(&n), Some(TcpState::V4FinV6FinRcv));
    assert_eq!(n.expire(13 * S).sessions, 0);
    assert_eq!(n.expire(15 * S).sessions, 1, "gone 4 s after the second FIN");
    assert_eq!(stat(&n, "used", "tcp"), 0, "port given back to pool4");
}

#[test]
fn tcp_rst_and_established_timeout_go_to_trans() {
    let mut c = cfg();
    c.tcp_trans_timeout = nat64::config::Secs(4);
    c.tcp_est_timeout = nat64::config::Secs(10);
    let n = nat(c);
    let t = be16(&fwd(&n, &tcp6(SYN, 6000), 0), 20);
    fwd(&n, &tcp4(SYN | ACK, t), 0);
    assert_eq!(tcp_state(&n), Some(TcpState::Established));
    // Established lifetime ends: TRANS, not deleted.
    let e = n.expire(11 * S);
    assert_eq!((e.sessions, e.to_trans), (0, 1));
    assert_eq!(tcp_state(&n), Some(TcpState::Trans));
    // Traffic revives it.
    fwd(&n, &tcp6(ACK, 6000), 12 * S);
    assert_eq!(tcp_state(&n), Some(TcpState::Established));
    fwd(&n, &tcp4(RST, t), 13 * S);
    assert_eq!(tcp_state(&n), Some(TcpState::Trans));
    assert_eq!(n.expire(18 * S).sessions, 1);
}

#[test]
fn static_bib_lets_ipv4_open_tcp() {
    let mut c = cfg();
    c.bib.push(StaticBib {
        protocol: Protocol::Tcp,
        ipv6: "[2001:db8::10]:80".parse().unwrap(),
        ipv4: "192.0.2.1:8080".parse().unwrap(),
    });
    let n = nat(c);
    let b = n.bib();
    assert_eq!(b.len(), 1);
    assert!(b[0].is_static);
    let syn = V4::new(6, Y4, T4).tcp(33000, 8080, SYN, b"");
    let out = fwd(&n, &syn, 0);
    assert_eq!(v6dst(&out), a6("2001:db8::10"));
    assert_eq!(be16(&out, 42), 80);
    assert_eq!(v6src(&out), a6(Y6));
    assert_eq!(tcp_state(&n), Some(TcpState::V4Init));
    let reply = fwd(&n, &V6::new(6, "2001:db8::10", Y6).tcp(80, 33000, SYN | ACK, b""), 0);
    assert_eq!(be16(&reply, 20), 8080);
    assert_eq!(tcp_state(&n), Some(TcpState::Established));
    // The static entry outlives its sessions.
    n.expire(10_000 * S);
    assert_eq!(n.bib().len(), 1);
    // IPv4-initiated ping to an IPv6 server through a static ICMP entry.
    let e = StaticBib {
        protocol: Protocol::Icmp,
        ipv6: "[2001:db8::10]:77".parse().unwrap(),
        ipv4: "192.0.2.1:7777".parse().unwrap(),
    };
    n.bib_add(e).unwrap();
    let ping = fwd(&n, &V4::new(1, Y4, T4).icmp(8, 0, [0x1e, 0x61, 0, 9], b"hello"), 0);
    assert_eq!(ping[40], 128);
    assert_eq!(be16(&ping, 44), 77);
    assert_eq!(v6dst(&ping), a6("2001:db8::10"));
    let pong = fwd(&n, &V6::new(58, "2001:db8::10", Y6).icmp(129, 0, [0, 77, 0, 9], b"hello"), 0);
    assert_eq!(pong[20], 0);
    assert_eq!(be16(&pong, 24), 7777);
    n.bib_remove(e).unwrap();
    // Runtime add/remove.
    let e = StaticBib {
        protocol: Protocol::Udp,
        ipv6: "[2001:db8::11]:53".parse().unwrap(),
        ipv4: "192.0.2.1:53".parse().unwrap(),
    };
    n.bib_add(e).unwrap();
    assert!(n.bib_add(StaticBib { ipv6: "[2001:db8::12]:53".parse().unwrap(), ..e }).is_err(), "in use");
    assert!(n.bib_add(StaticBib { ipv4: "192.0.2.9:53".parse().unwrap(), ..e }).is_err(), "not pool4");
    fwd(&n, &V4::new(17, Y4, T4).udp(1000, 53, b"q"), 0);
    n.bib_remove(e).unwrap();
    assert!(n.bib_remove(e).is_err());
    assert_eq!(n.bib().len(), 1);
    assert_eq!(stat(&n, "sessions", "udp"), 0);
}

#[test]
fn unsolicited_syn_is_held_then_answered_or_dropped_by_simultaneous_open() {
    let n = nat(cfg());
    // No BIB entry: held for 6 s, then Port Unreachable.
    let icmp = &held_syn_error(&n, &tcp4(SYN, 7000));
    assert_eq!((icmp[20], icmp[21]), (3, 3));
    assert_eq!(v4dst(icmp), a4(Y4));
    assert_eq!(v4src(icmp), a4(T4));
    assert_eq!(n.stats().held_syns, 0);

    // With a BIB entry and endpoint-independent filtering, a V4 SYN from
    // any peer opens a session in V4 INIT at once.
    let t = be16(&fwd(&n, &tcp6(SYN, 7200), 10 * S), 20);
    let out = fwd(&n, &V4::new(6, Y4B, T4).tcp(80, t, SYN, b""), 10 * S);
    assert_eq!(be16(&out, 42), 7200);
    assert_eq!(n.stats().held_syns, 0);
    let s = n.sessions(&SessionFilter { ipv4: Some(a4(Y4B)), ..Default::default() }, 10 * S);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].state, Some(TcpState::V4Init));
    // Its V4 INIT lifetime is tcp-trans-timeout (240 s).
    n.expire(200 * S);
    assert_eq!(n.sessions(&SessionFilter { ipv4: Some(a4(Y4B)), ..Default::default() }, 200 * S).len(), 1);
    n.expire(251 * S);
    assert!(n.sessions(&SessionFilter { ipv4: Some(a4(Y4B)), ..Default::default() }, 251 * S).is_empty());
}

#[test]
fn held_syn_discarded_when_v6_syn_opens_the_connection() {
    let mut c = cfg();
    c.address_dependent_filtering = true;
    let n = nat(c);
    let t = be16(&fwd(&n, &V6::new(6, H1, Y6B).tcp(7300, 80, SYN, b""), 0), 20);
    // ADF: a SYN from Y4 (no session with it) is held, not translated.
    assert_eq!(dropped(&n, &tcp4(SYN, t), 0), DropReason::SynHeld);
    assert_eq!(n.stats().held_syns, 1);
    // The IPv6 host opens towards Y4: simultaneous open, held SYN discarded.
    fwd(&n, &tcp6(SYN, 7300), S);
    assert_eq!(n.stats().held_syns, 0);
    assert!(n.expire(10 * S).icmp.is_empty());
}

#[test]
fn drop_externally_initiated_tcp() {
    let mut c = cfg();
    c.drop_externally_initiated_tcp = true;
    c.bib.push(StaticBib {
        protocol: Protocol::Tcp,
        ipv6: "[2001:db8::10]:80".parse().unwrap(),
        ipv4: "192.0.2.1:8080".parse().unwrap(),
    });
    let n = nat(c);
    let syn = V4::new(6, Y4, T4).tcp(33000, 8080, SYN, b"");
    assert_eq!(dropped(&n, &syn, 0), DropReason::ExternallyInitiatedTcp);
    assert_eq!(dropped(&n, &tcp4(SYN, 9999), 0), DropReason::ExternallyInitiatedTcp);
    assert_eq!(stat(&n, "refused", "externally-initiated-tcp"), 2);
}

#[test]
fn icmp_echo_both_ways() {
    let n = nat(cfg());
    let req = V6::new(58, H1, Y6).icmp(128, 0, [0x12, 0x34, 0, 1], b"ping");
    let out = fwd(&n, &req, 0);
    assert_eq!((out[20], out[21]), (8, 0));
    let id = be16(&out, 24);
    assert_eq!(be16(&out, 26), 1, "sequence kept");
    let reply = V4::new(1, Y4, T4).icmp(0, 0, [(id >> 8) as u8, id as u8, 0, 1], b"ping");
    let back = fwd(&n, &reply, 0);
    assert_eq!(back[40], 129);
    assert_eq!(be16(&back, 44), 0x1234, "identifier restored");
    assert_eq!(v6dst(&back), a6(H1));
    assert_eq!(stat(&n, "sessions", "icmp"), 1);
    // An echo reply to an unknown identifier is dropped without an error.
    let stray = V4::new(1, Y4, T4).icmp(0, 0, [0x77, 0x77, 0, 1], b"");
    assert_eq!(dropped(&n, &stray, 0), DropReason::NoBinding);
    // ICMP timeout (60 s default).
    assert_eq!(n.expire(59 * S).sessions, 0);
    assert_eq!(n.expire(61 * S).sessions, 1);
}

#[test]
fn pool_exhaustion_refuses_new_flows_only() {
    let mut c = cfg();
    c.pool4 = vec![Pool4Entry {
        prefix: "192.0.2.1/32".parse().unwrap(),
        ports: (2000, 2001),
        protocols: vec![Protocol::Udp],
    }];
    let n = nat(c);
    let t1 = udp_out_and_back(&n, H1, 1111, 0);
    let t2 = udp_out_and_back(&n, H2, 2222, 0);
    assert_ne!(t1, t2);
    let e = icmp_err(&n, &V6::new(17, H1, Y6).udp(3333, 53, b"new"), 0);
    assert_eq!((e[40], e[41]), (1, 3), "ICMPv6 Address Unreachable (RFC 6146 §3.5.1.1)");
    assert_eq!(v6dst(&e), a6(H1));
    assert_eq!(stat(&n, "refused", "pool4-exhausted"), 1);
    // Existing flows keep working.
    assert_eq!(udp_out_and_back(&n, H1, 1111, 0), t1);
    assert_eq!(udp_out_and_back(&n, H2, 2222, 0), t2);
    // TCP is not served by this pool.
    assert_eq!(icmp_err(&n, &tcp6(SYN, 1), 0)[40], 1);
    // After expiry, the ports come back.
    n.expire(301 * S);
    udp_out_and_back(&n, H1, 3333, 302 * S);
}

#[test]
fn table_limits_refuse_with_counter() {
    let mut c = cfg();
    c.max_sessions = 2;
    let n = nat(c);
    udp_out_and_back(&n, H1, 1, 0);
    fwd(&n, &V6::new(17, H1, Y6B).udp(1, 53, b"x"), 0);
    let e = icmp_err(&n, &V6::new(17, H2, Y6).udp(1, 53, b"x"), 0);
    assert_eq!((e[40], e[41]), (1, 3));
    assert_eq!(stat(&n, "refused", "session-table-full"), 1);
    // From the IPv4 side too: a new peer to an existing mapping.
    let t = be16(&fwd(&n, &V6::new(17, H1, Y6).udp(1, 53, b"x"), 0), 20);
    let e = icmp_err(&n, &V4::new(17, "203.0.113.5", T4).udp(7, t, b"x"), 0);
    assert_eq!((e[20], e[21]), (3, 13));
    assert_eq!(stat(&n, "refused", "session-table-full"), 2);
    assert_eq!(stat(&n, "sessions", "udp"), 2);

    let mut c = cfg();
    c.max_bib = 1;
    let n = nat(c);
    udp_out_and_back(&n, H1, 1, 0);
    icmp_err(&n, &V6::new(17, H1, Y6).udp(2, 53, b"x"), 0);
    assert_eq!(stat(&n, "refused", "bib-full"), 1);
    assert_eq!(stat(&n, "sessions", "udp"), 1, "no session leaked by the refusal");
    udp_out_and_back(&n, H1, 1, 0);
}

#[test]
fn address_dependent_filtering() {
    let mut c = cfg();
    c.address_dependent_filtering = true;
    let n = nat(c);
    let t = udp_out_and_back(&n, H1, 4000, 0);
    // Same address, another port: allowed (address-dependent, not port).
    let back = fwd(&n, &V4::new(17, Y4, T4).udp(54, t, b"ok"), 0);
    assert_eq!(be16(&back, 42), 4000);
    // Another address: Communication Administratively Prohibited.
    let e = icmp_err(&n, &V4::new(17, Y4B, T4).udp(53, t, b"no"), 0);
    assert_eq!((e[20], e[21]), (3, 13));
    assert_eq!(stat(&n, "refused", "filtered"), 1);
}

#[test]
fn hairpinning_between_two_ipv6_hosts() {
    let mut c = cfg();
    c.bib.push(StaticBib {
        protocol: Protocol::Udp,
        ipv6: "[2001:db8::2]:7000".parse().unwrap(),
        ipv4: "192.0.2.1:7000".parse().unwrap(),
    });
    let n = nat(c);
    // H1 reaches H2 at its pool4 address, via pool6.
    let to = "2001:db8:64::c000:201";
    let out = fwd(&n, &V6::new(17, H1, to).udp(5000, 7000, b"hi"), 0);
    assert_eq!(out[0] >> 4, 6);
    assert_eq!(v6dst(&out), a6(H2));
    assert_eq!(be16(&out, 42), 7000);
    assert_eq!(v6src(&out), a6(to), "source is H1's pool4 address under pool6");
    let t1 = be16(&out, 40);
    assert_eq!(&out[48..], b"hi");
    // H2 answers to what it saw; the answer hairpins back to H1.
    let back = fwd(&n, &V6::new(17, H2, to).udp(7000, t1, b"yo"), 0);
    assert_eq!(v6dst(&back), a6(H1));
    assert_eq!(be16(&back, 42), 5000);
    assert_eq!(n.stats().hairpinned, 2);
}

#[test]
fn udp_timeout_with_fake_clock() {
    let mut c = cfg();
    c.udp_timeout = nat64::config::Secs(2);
    let n = nat(c);
    let t = udp_out_and_back(&n, H1, 4000, 0);
    // Refreshed by traffic at 1.5 s: alive at 3 s, gone after 3.5 s.
    fwd(&n, &V4::new(17, Y4, T4).udp(53, t, b"r"), 3 * S / 2);
    assert_eq!(n.expire(3 * S).sessions, 0);
    assert_eq!(n.expire(4 * S).sessions, 1);
    assert_eq!(stat(&n, "bib", "udp"), 0);
    icmp_err(&n, &V4::new(17, Y4, T4).udp(53, t, b"late"), 4 * S);
}

fn v4_frags(ident: u16, sport: u16, dport: u16, data: &[u8]) -> Vec<Vec<u8>> {
    // Build the whole datagram, then cut its payload in two.
    let whole = V4 { df: false, id: ident, ..V4::new(17, Y4, T4) }.udp(sport, dport, data);
    let payload = &whole[20..];
    let cut = 16;
    let mut a = V4 { df: false, mf: true, id: ident, ..V4::new(17, Y4, T4) };
    let f1 = a.build(&payload[..cut]);
    a.mf = false;
    a.offset = (cut / 8) as u16;
    let f2 = a.build(&payload[cut..]);
    vec![f1, f2]
}

#[test]
fn fragments_are_reassembled_both_ways() {
    let n = nat(cfg());
    let t = udp_out_and_back(&n, H1, 4000, 0);
    let data: Vec<u8> = (0..100u8).collect();
    let frags = v4_frags(77, 53, t, &data);
    // Out of order.
    assert_eq!(dropped(&n, &frags[1], 0), DropReason::FragmentHeld);
    let back = fwd(&n, &frags[0], 0);
    assert_eq!(be16(&back, 42), 4000);
    assert_eq!(&back[48..], &data[..]);
    assert_eq!(n.stats().reassembled, 1);

    // IPv6 fragments.
    let whole = V6::new(17, H1, Y6).udp_payload(4000, 53, &data);
    let mk = |off: usize, more: bool, chunk: &[u8]| {
        let fo = ((off / 8) as u16) << 3 | u16::from(more);
        let mut fh = vec![17, 0];
        fh.extend_from_slice(&fo.to_be_bytes());
        fh.extend_from_slice(&0xabcdu32.to_be_bytes());
        V6::new(44, H1, Y6).build(&fh, chunk)
    };
    assert_eq!(dropped(&n, &mk(0, true, &whole[..32]), 0), DropReason::FragmentHeld);
    let out = fwd(&n, &mk(32, false, &whole[32..]), 0);
    assert_eq!(be16(&out, 20), t);
    assert_eq!(&out[28..], &data[..]);
    // Stale fragments are given up.
    assert_eq!(dropped(&n, &mk(0, true, &whole[..32]), 0), DropReason::FragmentHeld);
    n.expire(3 * S);
    assert_eq!(n.stats().fragment_sets, 0);
    assert_eq!(n.stats().fragment_sets_expired, 1);
}

#[test]
fn icmp_errors_are_mapped_through_the_bib() {
    let n = nat(cfg());
    let out = fwd(&n, &V6::new(17, H1, Y6).udp(4000, 53, b"query"), 0);
    let t = be16(&out, 20);
    // A router on the IPv4 side says Host Unreachable about that packet.
    let quoted = &out[..];
    let err4 = V4::new(1, "203.0.113.1", T4).icmp(3, 1, [0; 4], quoted);
    let e6 = fwd(&n, &err4, 0);
    assert_eq!((e6[40], e6[41]), (1, 0));
    assert_eq!(v6dst(&e6), a6(H1));
    assert_eq!(v6src(&e6), a6("2001:db8:64::cb00:7101"));
    let inner = &e6[48..];
    assert_eq!(v6src(inner), a6(H1));
    assert_eq!(v6dst(inner), a6(Y6));
    assert_eq!(be16(inner, 40), 4000, "quoted source port back to x");
    // The IPv6 host answers a packet from Y with Port Unreachable.
    let from_y = fwd(&n, &V4::new(17, Y4, T4).udp(53, t, b"resp"), 0);
    let err6 = V6::new(58, H1, Y6).icmp(1, 4, [0; 4], &from_y);
    let e4 = fwd(&n, &err6, 0);
    assert_eq!((e4[20], e4[21]), (3, 3));
    assert_eq!(v4src(&e4), a4(T4));
    assert_eq!(v4dst(&e4), a4(Y4));
    let inner = &e4[28..];
    assert_eq!(v4src(inner), a4(Y4));
    assert_eq!(v4dst(inner), a4(T4));
    assert_eq!(be16(inner, 22), t, "quoted destination port back to t");
    // An old router quotes only 8 bytes of a TCP header (RFC 792).
    let syn = fwd(&n, &tcp6(SYN, 6100), 0);
    let ts = be16(&syn, 20);
    let err4 = V4::new(1, "203.0.113.1", T4).icmp(11, 0, [0; 4], &syn[..28]);
    let e6 = fwd(&n, &err4, 0);
    assert_eq!((e6[40], e6[41]), (3, 0), "Time Exceeded");
    assert_eq!(be16(&e6[48..], 40), 6100);
    assert_ne!(ts, 0);
    // An error about a flow we do not know is dropped.
    let stray = V4::new(17, T4, Y4).udp(9, 53, b"");
    let err = V4::new(1, "203.0.113.1", T4).icmp(3, 1, [0; 4], &stray);
    assert_eq!(dropped(&n, &err, 0), DropReason::IcmpInnerUntranslatable);
}

fn natpt_cfg() -> Config {
    let mut c = cfg();
    c.mode = Mode::Natpt;
    c.pool4 = vec![Pool4Entry {
        prefix: "192.0.2.0/31".parse().unwrap(),
        ports: (1, 65535),
        protocols: Protocol::ALL.to_vec(),
    }];
    c
}

#[test]
fn natpt_gives_each_host_a_whole_address_and_keeps_ports() {
    let n = nat(natpt_cfg());
    let o1 = fwd(&n, &V6::new(17, H1, Y6).udp(5060, 5060, b"a"), 0);
    let o2 = fwd(&n, &V6::new(17, H2, Y6).udp(5060, 5060, b"b"), 0);
    assert_eq!(be16(&o1, 20), 5060, "port kept");
    assert_eq!(be16(&o2, 20), 5060);
    assert_ne!(v4src(&o1), v4src(&o2), "one address per host");
    // The same host keeps its address for every flow and protocol.
    let o3 = fwd(&n, &V6::new(6, H1, Y6B).tcp(40000, 80, SYN, b""), 0);
    assert_eq!(v4src(&o3), v4src(&o1));
    assert_eq!(be16(&o3, 20), 40000);
    // Replies come back by address.
    let back = fwd(&n, &V4::new(17, Y4, &v4src(&o2).to_string()).udp(5060, 5060, b"r"), 0);
    assert_eq!(v6dst(&back), a6(H2));
    // A third host finds the pool empty.
    let e = icmp_err(&n, &V6::new(17, "2001:db8::3", Y6).udp(1, 2, b"c"), 0);
    assert_eq!((e[40], e[41]), (1, 3));
    assert_eq!(stat(&n, "refused", "pool4-exhausted"), 1);
    assert_eq!(n.stats().natpt_hosts, 2);
    // When H2's sessions end, its address goes back to the pool.
    fwd(&n, &V6::new(17, H1, Y6).udp(5060, 5060, b"keep"), 200 * S);
    n.expire(301 * S);
    assert_eq!(n.stats().natpt_hosts, 1);
    let o4 = fwd(&n, &V6::new(17, "2001:db8::3", Y6).udp(1, 2, b"c"), 302 * S);
    assert_eq!(v4src(&o4), v4src(&o2));
}

/// NAT-PT has no simultaneous-open port keeping of its own: a new TCP
/// mapping takes the host's address with the host's port, even when an
/// unsolicited SYN from the same peer to that port waits on another pool4
/// address (NAT64 mode would open the mapping there).
#[test]
fn natpt_tcp_keeps_the_hosts_address_when_a_syn_is_held_elsewhere() {
    let n = nat(natpt_cfg());
    let mine = v4src(&fwd(&n, &V6::new(17, H1, Y6).udp(5060, 5060, b"a"), 0));
    let other = if mine == a4("192.0.2.0") { "192.0.2.1" } else { "192.0.2.0" };
    assert_eq!(dropped(&n, &V4::new(6, Y4, other).tcp(80, 7300, SYN, b""), 0), DropReason::SynHeld);
    assert_eq!(n.stats().held_syns, 1);
    let o = fwd(&n, &tcp6(SYN, 7300), S);
    assert_eq!((v4src(&o), be16(&o, 20)), (mine, 7300));
    assert_eq!(n.stats().natpt_hosts, 1);
    // The SYN held on the other address is still answered at its deadline.
    assert_eq!(n.expire(10 * S).icmp.len(), 1);
}

#[test]
fn reload_keeps_sessions_whose_address_stays() {
    let n = nat(cfg());
    let t = udp_out_and_back(&n, H1, 4000, 0);
    let mut c2 = cfg();
    c2.pool4.push(Pool4Entry {
        prefix: "192.0.2.2/32".parse().unwrap(),
        ports: (1, 65535),
        protocols: Protocol::ALL.to_vec(),
    });
    let n2 = n.reconfigure(c2.clone(), xlat::siit::Config::default(), S).unwrap();
    assert_eq!(stat(&n2, "sessions", "udp"), 1);
    // A reload with room for no session carries no BIB entry either.
    let mut tight = c2.clone();
    tight.max_sessions = 1;
    fwd(&n2, &V6::new(17, H1, Y6B).udp(4000, 53, b"second"), S);
    fwd(&n2, &V6::new(17, H2, Y6B).udp(4000, 53, b"other host"), S);
    let n_tight = n2.reconfigure(tight, xlat::siit::Config::default(), S).unwrap();
    assert_eq!(stat(&n_tight, "sessions", "udp"), 1);
    assert_eq!(stat(&n_tight, "bib", "udp"), 1, "the BIB entry without a session is not kept");
    assert_eq!(stat(&n_tight, "used", "udp"), 1);
    let back = fwd(&n2, &V4::new(17, Y4, T4).udp(53, t, b"again"), S);
    assert_eq!(be16(&back, 42), 4000);
    assert_eq!(udp_out_and_back(&n2, H1, 4000, S), t);
    // A reload that drops the address drops the state.
    let mut c3 = cfg();
    c3.pool4 = vec![Pool4Entry {
        prefix: "192.0.2.3/32".parse().unwrap(),
        ports: (1, 65535),
        protocols: Protocol::ALL.to_vec(),
    }];
    let n3 = n2.reconfigure(c3, xlat::siit::Config::default(), S).unwrap();
    assert_eq!(stat(&n3, "sessions", "udp"), 0);
    assert_eq!(n3.bib().len(), 0);
}

/// Entries added at run time (`v6gate ctl bib add`) stay across reloads
/// with their sessions, before dynamic entries could take their port;
/// configured entries come from the new file; an added entry the new
/// configuration cannot hold is reported, not kept.
#[test]
fn reload_keeps_bib_entries_added_at_run_time() {
    use nat64::BibOrigin;
    let mut c = cfg();
    c.bib.push(StaticBib {
        protocol: Protocol::Tcp,
        ipv6: "[2001:db8::10]:80".parse().unwrap(),
        ipv4: "192.0.2.1:8080".parse().unwrap(),
    });
    let n = nat(c.clone());
    let added = StaticBib {
        protocol: Protocol::Udp,
        ipv6: "[2001:db8::11]:53".parse().unwrap(),
        ipv4: "192.0.2.1:53".parse().unwrap(),
    };
    n.bib_add(added).unwrap();
    assert_eq!(n.added_bib(), vec![added]);
    // An IPv4 client opens a session through it.
    let back = fwd(&n, &V4::new(17, Y4, T4).udp(3333, 53, b"q"), 0);
    assert_eq!(v6dst(&back), a6("2001:db8::11"));
    let n2 = n.reconfigure(c.clone(), xlat::siit::Config::default(), S).unwrap();
    assert_eq!(n2.added_bib(), vec![added], "kept across the reload");
    assert!(n2.bib_lost().is_empty());
    let origins: Vec<(u16, BibOrigin)> = n2.bib().iter().map(|b| (b.ipv4.port(), b.origin)).collect();
    assert!(origins.contains(&(53, BibOrigin::Added)) && origins.contains(&(8080, BibOrigin::Config)), "{origins:?}");
    assert_eq!(stat(&n2, "sessions", "udp"), 1, "with its session");
    // Even when pool6 changes (dynamic state does not survive that).
    let mut c3 = c.clone();
    c3.pool6 = "2001:db8:65::/96".parse().unwrap();
    let n3 = n2.reconfigure(c3, xlat::siit::Config::default(), 2 * S).unwrap();
    assert_eq!(n3.added_bib(), vec![added]);
    assert_eq!(stat(&n3, "sessions", "udp"), 0);
    // Removed, it is gone for good; a configuration without room for it
    // reports it.
    let mut c4 = c.clone();
    c4.pool4[0].protocols = vec![Protocol::Tcp];
    let n4 = n2.reconfigure(c4, xlat::siit::Config::default(), 2 * S).unwrap();
    assert!(n4.added_bib().is_empty());
    assert_eq!(n4.bib_lost().len(), 1);
    assert_eq!(n4.bib_lost()[0].0, added);
    assert!(n4.bib_lost()[0].1.contains("not in pool4"), "{}", n4.bib_lost()[0].1);
    n2.bib_remove(added).unwrap();
    let n5 = n2.reconfigure(c, xlat::siit::Config::default(), 2 * S).unwrap();
    assert!(n5.added_bib().is_empty() && n5.bib_lost().is_empty());
}

#[test]
fn concurrent_workers_share_the_tables() {
    let n = std::sync::Arc::new(nat(cfg()));
    let threads: Vec<_> = (0..4u16)
        .map(|w| {
            let n = n.clone();
            std::thread::spawn(move || {
                let mut out = Out::new();
                for i in 0..200u16 {
                    let host = format!("2001:db8::{:x}", w * 1000 + i + 1);
                    let pkt = V6::new(17, &host, Y6).udp(1000 + i, 53, b"x");
                    assert_eq!(n.translate(&pkt, 0, &mut out), Verdict::Emit);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(stat(&n, "sessions", "udp"), 800);
    assert_eq!(stat(&n, "bib", "udp"), 800);
    assert_eq!(stat(&n, "used", "udp"), 800);
    let mut ports: Vec<u16> = n.bib().iter().map(|b| b.ipv4.port()).collect();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 800, "no transport address handed out twice");
}

#[test]
fn config_keys_and_errors() {
    #[derive(serde::Deserialize)]
    struct Doc {
        nat64: Config,
    }
    let c = toml::from_str::<Doc>(nat64::EXAMPLE_TOML).unwrap().nat64;
    c.check().unwrap();
    assert_eq!(c.tcp_est_timeout.0, 7440);
    assert_eq!(c.bib.len(), 1);
    assert_eq!(c.pool4.len(), 2);
    Nat64::new(c).unwrap();
    let err = |s: &str| -> String {
        match toml::from_str::<Config>(s) {
            Err(e) => e.to_string(),
            Ok(c) => c.check().unwrap_err().to_string(),
        }
    };
    assert!(err("pool4 = []").contains("nat64.pool4"));
    assert!(err("pool4 = [\"192.0.2.1\"]\nudp-timeout = \"1:99:00\"").contains("below 60"));
    // One duration syntax: units, Jool's clock form and whole seconds.
    let t = |v: &str| {
        toml::from_str::<Config>(&format!("pool4 = [\"192.0.2.1\"]\nudp-timeout = {v}")).map(|c| c.udp_timeout.0)
    };
    assert_eq!(t("\"2h4m\"").unwrap(), 7440);
    assert_eq!(t("\"02:04:00\"").unwrap(), 7440);
    assert_eq!(t("7440").unwrap(), 7440);
    assert_eq!(t("\"7440\"").unwrap(), 7440);
    assert!(err("pool4 = [\"192.0.2.1\"]\nudp-timeout = \"5 min\"").contains("unknown unit `min`"));
    assert!(err("pool4 = [\"192.0.2.1\"]\nudp-timeout = \"1500ms\"").contains("whole number of seconds"));
    assert!(err("pool4 = [\"192.0.2.1\"]\nudp-timeout = 0").contains("nat64.udp-timeout"));
    // A timer beyond 30 days is refused (its nanoseconds overflowed a u64
    // in the timers at 584 years: a panic the offline_lines fuzz target found).
    toml::from_str::<Config>("pool4 = [\"192.0.2.1\"]\nudp-timeout = 2592000").unwrap().check().unwrap();
    let big = err("pool4 = [\"192.0.2.1\"]\ntcp-est-timeout = 100000000000000");
    assert!(big.contains("nat64.tcp-est-timeout") && big.contains("above the maximum"), "{big}");
    let unknown = err("pool4 = [\"192.0.2.1\"]\nbogus = 1");
    assert!(unknown.contains("bogus"));
    // nat64::config::KEYS is the table's key list, every key in the example.
    let mut listed: Vec<&str> = unknown.split('`').skip(3).step_by(2).collect();
    let mut keys = nat64::config::KEYS.to_vec();
    listed.sort_unstable();
    keys.sort_unstable();
    assert_eq!(listed, keys, "{unknown}");
    for k in nat64::config::KEYS {
        let written = |l: &str| {
            let l = l.trim_start_matches("# ");
            l.starts_with(&format!("{k} =")) || l == format!("[[nat64.{k}]]")
        };
        assert!(nat64::EXAMPLE_TOML.lines().any(written), "{k} is not in the example");
    }
    assert!(err("pool4 = [\"192.0.2.0/31\", \"192.0.2.1\"]").contains("overlap"));
    assert!(err("pool4 = [{ prefix = \"192.0.2.1\", ports = \"9-2\" }]").contains("port range"));
    assert!(err("pool4 = [\"192.0.2.1\"]\npool6 = \"2001:db8::/33\"").contains("nat64.pool6"));
    assert!(err("pool4 = [\"192.0.2.1\"]\nmax-sessions = 0").contains("nat64.max-sessions"));
    let bad_bib =
        "pool4 = [\"192.0.2.1\"]\n[[bib]]\nprotocol = \"tcp\"\nipv6 = \"[2001:db8::1]:1\"\nipv4 = \"192.0.2.2:1\"";
    assert!(err(bad_bib).contains("nat64.bib"));
}

/// A session carried by a fast path (XDP) elsewhere: `refresh` from the
/// time it was last used there keeps it alive, never shortens it, and
/// leaves TCP sessions outside ESTABLISHED to the state machine.
#[test]
fn fast_path_refresh_keeps_used_sessions() {
    let mut c = cfg();
    c.udp_timeout = nat64::config::Secs(2);
    c.tcp_est_timeout = nat64::config::Secs(10);
    c.tcp_trans_timeout = nat64::config::Secs(4);
    let n = nat(c);
    udp_out_and_back(&n, H1, 4000, 0);
    let udp = n.sessions(&SessionFilter { protocol: Some(Protocol::Udp), ..Default::default() }, 0);
    assert_eq!(udp.len(), 1);
    // Used on the fast path at 1.5 s: it lives until 3.5 s, not 2 s.
    assert!(n.refresh(&udp[0], 3 * S / 2));
    assert_eq!(n.expire(2 * S + 1).sessions, 0, "refreshed: still there after 2 s");
    assert!(n.refresh(&udp[0], S), "an older time does not shorten it");
    assert_eq!(n.expire(3 * S).sessions, 0);
    assert_eq!(n.expire(3 * S + S / 2 + 1).sessions, 1, "expires 2 s after its last use");
    assert!(!n.refresh(&udp[0], 4 * S), "gone");

    // TCP: ESTABLISHED gets the established lifetime from the fast path's time.
    let out = fwd(&n, &tcp6(SYN, 5555), 10 * S);
    let t = be16(&out, 20);
    fwd(&n, &tcp4(SYN | ACK, t), 10 * S);
    let tcp = n.sessions(&SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() }, 10 * S);
    assert_eq!(tcp[0].state, Some(TcpState::Established));
    assert!(n.refresh(&tcp[0], 15 * S));
    assert_eq!(n.expire(21 * S).to_trans, 0, "established until 25 s");
    // After a FIN (which the fast path passes), the state machine decides:
    // in V6 FIN RCV a packet other than FIN or RST restarts the
    // established lifetime, as here; after the second FIN nothing does.
    fwd(&n, &tcp6(FIN | ACK, 5555), 22 * S);
    assert!(n.refresh(&tcp[0], 24 * S), "still there");
    let left = n.sessions(&SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() }, 24 * S);
    assert_eq!((left[0].state, left[0].expires_in_ms), (Some(TcpState::V6FinRcv), 10_000), "{:?}", left[0]);
    fwd(&n, &tcp4(FIN | ACK, t), 25 * S);
    assert!(n.refresh(&tcp[0], 28 * S), "still there");
    let left = n.sessions(&SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() }, 25 * S);
    assert!(left[0].expires_in_ms <= 4_000, "not extended after the second FIN: {:?}", left[0]);
    // ICMP echo sessions refresh with their idle timeout too.
    let icmp = V6::new(58, H2, Y6).icmp(128, 0, [0, 7, 0, 1], b"ping");
    fwd(&n, &icmp, 30 * S);
    let s = n.sessions(&SessionFilter { protocol: Some(Protocol::Icmp), ..Default::default() }, 30 * S);
    assert!(n.refresh(&s[0], 100 * S));
    let s2 = n.sessions(&SessionFilter { protocol: Some(Protocol::Icmp), ..Default::default() }, 100 * S);
    assert!(s2[0].expires_in_ms > 0, "alive after the original lifetime: {:?}", s2[0]);
}
