//! The lwAFTR's XDP fast path against the lwAFTR engine: differential
//! tests through BPF_PROG_TEST_RUN (root; they fail, never skip, without
//! BPF).
//!
//! A uniquely named namespace (removed on drop, also on panic) holds the
//! lwAFTR's IPv4 side `x4` and softwire side `x6`, each with a default
//! route through a permanent neighbour. Each frame goes through
//! `xdp_softwire` and through the model of the slow path: the engine
//! (`Lwaftr::process`) between the kernel's forwarding steps around its
//! TUN device (into it: the TTL or hop limit checked and decremented,
//! `ip_decrease_ttl()`'s checksum update; out of it: the same for what
//! the engine wrote). A forwarded frame must be byte-identical to what
//! that path sends; a passed frame must be untouched. The maps are
//! written by the runner's own mirror (`softwire::fast::LwaftrFast`) from
//! the engine's binding table and DSTM leases, also after a reload and a
//! lease change.

mod xdp_support;

use core::net::{Ipv4Addr, Ipv6Addr};
use proptest::prelude::*;
use softwire::binding::{Binding, BindingTable};
use xdp::softwire::SoftwireCounter as C;
use xdp_support::*;

#[test]
fn named_cases_and_mirroring() {
    lab::need_root!();
    let mut bed = Bed::new(None);
    let b = &bed;
    let up = V4::new(17, SHARED, HOST);
    let p1 = port(1, 5);

    // Softwire -> IPv4: the common case, fast.
    let before = b.counter(C::Decap);
    b.fast_ok("udp from an lwB4 in its port set", &sw(B4_1, &up.udp(p1, 53, b"query")));
    assert_eq!(b.counter(C::Decap), before + 1);
    b.fast_ok("tcp from a whole-address binding", &sw(B4_W, &V4::new(6, WHOLE, HOST).tcp(80, 40000, 0x12, b"")));
    b.fast_ok(
        "icmp echo, identifier in the set",
        &sw(B4_1, &V4::new(1, SHARED, HOST).icmp(8, 0, [(p1 >> 8) as u8, p1 as u8, 0, 1], b"ping")),
    );
    b.fast_ok("tos kept, df clear", &sw(B4_1, &V4 { tos: 0xb8, df: false, ..up }.udp(p1, 53, &[7; 300])));
    b.fast_ok("dstm lease", &sw(B4_L, &V4::new(17, LEASED, HOST).udp(1, 2, b"x")));
    // IPv4 -> softwire.
    let down = V4::new(17, HOST, SHARED);
    let before = b.counter(C::Encap);
    let got = b.fast_ok("udp to the second lwB4's port", &down.udp(53, port(2, 77), b"answer"));
    assert_eq!(b.counter(C::Encap), before + 1);
    assert_eq!(&got[24..40], &B4_2.octets(), "to the lwB4 holding the port");
    assert_eq!(got[7], 60, "the configured hop limit less the kernel's forwarding step");
    let got = b.fast_ok("traffic class from the tos", &V4 { tos: 0xb9, ..down }.udp(53, port(1, 3), b"x"));
    assert_eq!((u32::from_be_bytes([got[0], got[1], got[2], got[3]]) >> 20) & 0xff, 0xb9);
    b.fast_ok("tcp to a whole address", &V4::new(6, HOST, WHOLE).tcp(443, 80, 0x10, b"data"));
    b.fast_ok("echo reply to a whole address", &V4::new(1, HOST, WHOLE).icmp(0, 0, [0, 9, 0, 1], b"pong"));
    b.fast_ok("dstm lease", &V4::new(17, HOST, LEASED).udp(1, 2, b"x"));
    // A TCP ACK padded by Ethernet: trimmed, then encapsulated.
    let ack = V4::new(6, HOST, WHOLE).tcp(443, 80, 0x10, b"");
    match b.diff(&ack, 60) {
        Outcome::Forwarded(p) => assert_eq!(p.len(), 40 + ack.len()),
        Outcome::Passed => panic!("padded ACK not taken"),
    }

    // What the slow path must do, passed and counted.
    b.passes("port outside the set", &sw(B4_1, &up.udp(port(2, 5), 53, b"")), C::PassPolicy);
    b.passes("A = 0 port", &sw(B4_1, &up.udp(80, 53, b"")), C::PassPolicy);
    b.passes("wrong address", &sw(B4_1, &V4::new(17, WHOLE, HOST).udp(p1, 53, b"")), C::PassPolicy);
    b.passes("unknown lwB4", &sw(B4_X, &up.udp(p1, 53, b"")), C::PassNoBinding);
    b.passes("hairpin", &sw(B4_1, &V4::new(17, SHARED, WHOLE).udp(p1, 53, b"")), C::PassHairpin);
    b.passes("hairpin to an unheld port", &sw(B4_1, &V4::new(17, SHARED, SHARED).udp(p1, 80, b"")), C::PassHairpin);
    b.passes("inner ttl 1", &sw(B4_1, &V4 { ttl: 1, ..up }.udp(p1, 53, b"")), C::PassTtl);
    b.passes("outer hop limit 1", &v6(B4_1, LOCAL, 1, 4, &up.udp(p1, 53, b"")), C::PassTtl);
    b.passes("inner fragment", &sw(B4_1, &V4 { mf: true, ..up }.udp(p1, 53, &[1; 64])), C::PassFragment);
    b.passes("inner options", &sw(B4_1, &up.build_opts(&[1, 1, 1, 0], &[0; 8])), C::PassOptions);
    let quoted = V4::new(17, HOST, SHARED).udp(53, p1, b"");
    b.passes("icmp error", &sw(B4_1, &V4::new(1, SHARED, HOST).icmp(3, 3, [0; 4], &quoted[..28])), C::PassIcmp);
    b.passes("gre", &sw(B4_1, &V4::new(47, SHARED, HOST).build(&[0; 8])), C::PassProtocol);
    b.passes("icmpv6 to the end-point", &v6(B4_1, LOCAL, 64, 58, &[128, 0, 0, 0, 0, 1, 0, 1]), C::PassIcmp);
    b.passes("not to the end-point", &v6(B4_1, B4_2, 64, 4, &up.udp(p1, 53, b"")), C::PassNotOurs);
    b.passes("destination option", &v6(B4_1, LOCAL, 64, 60, &[4, 0, 4, 1, 4, 1, 1, 0]), C::PassOptions);
    let mut bad = up.udp(p1, 53, b"");
    bad[10] ^= 1;
    b.passes("inner checksum", &sw(B4_1, &bad), C::PassChecksum);
    b.passes("to an unheld port", &down.udp(53, port(9, 1), b""), C::PassNoBinding);
    b.passes("A = 0 port", &down.udp(53, 1000, b""), C::PassNoBinding);
    b.passes("unbound address", &V4::new(17, HOST, UNBOUND).udp(1, 2, b""), C::PassNotOurs);
    b.passes("ttl 1", &V4 { ttl: 1, ..down }.udp(53, port(1, 3), b""), C::PassTtl);
    b.passes("over the tunnel mtu", &down.udp(53, port(1, 3), &vec![0; 1500 - 28]), C::PassTooBig);
    b.passes("fragment", &V4 { mf: true, ..down }.udp(53, port(1, 3), &[0; 64]), C::PassFragment);
    let quoted = V4::new(17, SHARED, HOST).udp(p1, 53, b"");
    b.passes("icmp error", &V4::new(1, HOST, SHARED).icmp(3, 1, [0; 4], &quoted[..28]), C::PassIcmp);

    // A reload without the second lwB4 and a lease expiry reach the maps.
    bed.lw.replace_bindings(bindings(false));
    bed.lw.set_leases(leases(false));
    let st = bed.fast.refresh(&bed.lw).unwrap().expect("changed tables are mirrored");
    assert!(st.removed >= 2, "{st:?}");
    assert_eq!(bed.fast.refresh(&bed.lw).unwrap(), None, "nothing changed");
    let b = &bed;
    b.passes("reloaded away", &down.udp(53, port(2, 77), b""), C::PassNoBinding);
    b.passes("lease expired", &V4::new(17, HOST, LEASED).udp(1, 2, b"x"), C::PassNotOurs);
    b.passes("lease expired", &sw(B4_L, &V4::new(17, LEASED, HOST).udp(1, 2, b"x")), C::PassNoBinding);
    b.fast_ok("the rest stays", &down.udp(53, port(1, 3), b"x"));
}

#[test]
fn encapsulation_limit_option_as_the_engine_writes_it() {
    lab::need_root!();
    let b = Bed::new(Some(4));
    let got = b.fast_ok("with the limit option", &V4::new(17, HOST, SHARED).udp(53, port(1, 3), b"x"));
    assert_eq!(got[6], 60, "Destination Options first");
    b.fast_ok("decapsulation unchanged", &sw(B4_1, &V4::new(17, SHARED, HOST).udp(port(1, 5), 53, b"q")));
}

/// Generated packets, valid and mutated: the fast path never sends
/// anything the slow path would not send byte for byte.
#[test]
fn generated_packets_never_differ() {
    lab::need_root!();
    let b = Bed::new(None);
    let b4s = [B4_1, B4_2, B4_W, B4_L, B4_X];
    let v4s = [SHARED, WHOLE, LEASED, UNBOUND, HOST];
    let pkt = (
        any::<bool>(),
        0usize..5,
        0usize..5,
        prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(47u8)],
        any::<u16>(),
        any::<u16>(),
        any::<u8>(),
        prop_oneof![Just(64u8), Just(1u8), Just(2u8), any::<u8>()],
        any::<bool>(),
        0usize..200,
    );
    let (fast, total) = b.generated(2000, pkt, |(up, bi, vi, proto, sp, dp, tos, ttl, df, len)| {
        let payload = vec![0x3c; len];
        let v = if up {
            V4 { tos, ttl, df, ..V4::new(proto, v4s[vi], HOST) }
        } else {
            V4 { tos, ttl, df, ..V4::new(proto, HOST, v4s[vi]) }
        };
        let inner = match proto {
            6 => v.tcp(sp, dp, 0x18, &payload),
            17 => v.udp(sp, dp, &payload),
            1 => v.icmp(if sp & 1 == 0 { 8 } else { 0 }, 0, [(dp >> 8) as u8, dp as u8, 0, 1], &payload),
            _ => v.build(&payload),
        };
        if up {
            sw(b4s[bi], &inner)
        } else {
            inner
        }
    });
    // The generator is built so that many packets are valid and bound.
    assert!(fast * 20 > total, "only {fast} of {total} generated packets took the fast path");
}

/// The slow path's bound (1,000,000 bindings) fits the fast path: mirrored
/// whole, the last one served, then a reload that drops half of them
/// written as deletions only.
#[test]
fn a_million_bindings_are_mirrored() {
    lab::need_root!();
    const N: u32 = 1_000_000;
    let mut bed = Bed::with(None, 1 << 20);
    let m = map6();
    let b4 = |i: u32| Ipv6Addr::from((0x2001_0db8_0009u128 << 80) | u128::from(i));
    let v4 = |i: u32| Ipv4Addr::from(0x0b00_0000 + (i >> 6));
    let table = |n: u32| {
        let mut t = BindingTable::with_capacity(n as usize);
        for i in 0..n {
            t.insert(Binding { b4: b4(i), ipv4: v4(i), psid: (i & 63) as u16, map: m }).unwrap();
        }
        t
    };
    bed.lw.replace_bindings(table(N));
    bed.lw.set_leases(leases(false));
    let st = bed.fast.refresh(&bed.lw).unwrap().expect("mirrored");
    assert_eq!(st.bindings, N as usize, "{st:?}");
    let last = N - 1;
    let p = m.nth((last & 63) as u16, 7);
    bed.fast_ok("the millionth binding, softwire side", &sw(b4(last), &V4::new(17, v4(last), HOST).udp(p, 53, b"x")));
    let got = bed.fast_ok("the millionth binding, IPv4 side", &V4::new(17, HOST, v4(last)).udp(53, p, b"x"));
    assert_eq!(&got[24..40], &b4(last).octets());
    bed.lw.replace_bindings(table(N / 2));
    let st = bed.fast.refresh(&bed.lw).unwrap().expect("mirrored");
    assert_eq!((st.bindings, st.written), (N as usize / 2, 0), "{st:?}");
    bed.passes("reloaded away", &V4::new(17, HOST, v4(last)).udp(53, p, b"x"), C::PassNotOurs);
}
