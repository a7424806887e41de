//! 6to4 (RFC 3056, relay per RFC 3068 at a configured address as RFC 7526
//! asks) and 6rd (RFC 5969) in network namespaces: two sites reach each
//! other directly and native IPv6 through the relay / BR, both ways
//! (ping, UDP and TCP, payloads checked); spoofed sources and loops sent
//! from a raw socket are dropped and counted.
//!
//! ```text
//!  a 192.0.2.1  --+
//!  b 198.51.100.2 -- i (IPv4 router) -- r 203.0.113.1 (relay / BR) -- h 2001:db8:1::2
//! ```

mod tunnel_util;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tunnel_util::World;

const HOST: &str = "2001:db8:1::2";

fn testbed(a: &str, b: &str, r: &str) -> World {
    let mut w = World::new("v6t4");
    for n in ["i", "a", "b", "r", "h"] {
        w.add(n);
    }
    for (n, ifc) in [("a", "ia"), ("b", "ib"), ("r", "ir")] {
        w.link("i", ifc, n, "e0");
    }
    w.link("r", "rh", "h", "e0");
    w.sysctl("i", "net.ipv4.ip_forward", "1");
    for (n, ifc, addr) in [("a", "ia", a), ("b", "ib", b), ("r", "ir", r)] {
        let net = addr.rsplit_once('.').unwrap().0;
        w.ip("i", &format!("addr add {net}.254/24 dev {ifc}"));
        w.ip(n, &format!("addr add {addr}/24 dev e0"));
        w.ip(n, &format!("route add default via {net}.254"));
    }
    w.ip("r", "addr add 2001:db8:1::1/64 dev rh nodad");
    w.ip("h", "addr add 2001:db8:1::2/64 dev e0 nodad");
    w.ip("h", "-6 route add default via 2001:db8:1::1");
    w.sysctl("r", "net.ipv6.conf.all.forwarding", "1");
    w
}

fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    b.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0]);
    b
}

/// Send `inner` in IPv4 protocol 41 from namespace `ns` to `dst` (the
/// kernel builds the outer header with the namespace's own source).
fn send41(w: &World, ns: &str, dst: Ipv4Addr, inner: &[u8]) {
    w.in_ns(ns, || {
        let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(41))).unwrap();
        s.send_to(inner, &SockAddr::from(SocketAddrV4::new(dst, 0))).unwrap();
    });
}

fn both_ways(w: &World, x: &str, xa: &str, y: &str, ya: &str, port: u16) {
    assert!(w.ping(x, ya, 3), "{x} -> {y} ping");
    assert!(w.ping(y, xa, 3), "{y} -> {x} ping");
    assert_eq!(w.udp_echo(y, x, ya, port, 20, 1200), 20, "{x} -> {y} UDP");
    assert_eq!(w.udp_echo(x, y, xa, port + 1, 20, 1200), 20, "{y} -> {x} UDP");
    assert!(w.tcp_echo(y, x, ya, port + 2, 300_000), "{x} -> {y} TCP");
}

#[test]
fn sixtofour_sites_reach_each_other_and_native_ipv6_through_the_relay() {
    lab::need_root!();
    let mut w = testbed("192.0.2.1", "198.51.100.2", "203.0.113.1");
    let site = |addr: &str, me: &str| {
        format!("[sixtofour]\nmode = \"router\"\naddress = \"{addr}\"\nrelay = \"203.0.113.1\"\naddresses = [\"{me}/128\"]\nroutes = [\"::/0\"]\n")
    };
    w.v6gate("a", "a", &site("192.0.2.1", "2002:c000:201::1"));
    w.v6gate("b", "b", &site("198.51.100.2", "2002:c633:6402::1"));
    w.v6gate("r", "r", "[sixtofour]\nmode = \"relay\"\naddress = \"203.0.113.1\"\n");
    both_ways(&w, "a", "2002:c000:201::1", "b", "2002:c633:6402::1", 7100);
    both_ways(&w, "a", "2002:c000:201::1", "h", HOST, 7110);
    assert!(w.wait_counter("a", "sixtofour", "encapsulated", 5, |v| v >= 40) >= 40);
    assert!(w.wait_counter("r", "sixtofour", "decapsulated", 3, |v| v >= 20) >= 20);

    // Spoofed: B claims to be site A (inner source 2002:c000:201::9 from 198.51.100.2).
    let (sa, sb) = ("2002:c000:201::9".parse().unwrap(), "2002:c633:6402::1".parse().unwrap());
    let to_b = |src, dst| v6(src, dst);
    send41(&w, "a", "198.51.100.2".parse().unwrap(), &to_b("2002:cb00:7101::5".parse().unwrap(), sb));
    send41(&w, "r", "198.51.100.2".parse().unwrap(), &to_b(sa, sb));
    assert!(w.wait_counter("b", "sixtofour", "drop_spoofed", 3, |v| v >= 2) >= 2);
    // Private and broadcast embedded addresses.
    send41(&w, "a", "198.51.100.2".parse().unwrap(), &to_b("2002:a00:1::1".parse().unwrap(), sb));
    send41(&w, "a", "198.51.100.2".parse().unwrap(), &to_b("2002:ffff:ffff::1".parse().unwrap(), sb));
    assert!(w.wait_counter("b", "sixtofour", "drop_forbidden", 3, |v| v >= 2) >= 2);
    // A loop through the relay: site to site via 203.0.113.1.
    send41(&w, "a", "203.0.113.1".parse().unwrap(), &v6("2002:c000:201::1".parse().unwrap(), sb));
    assert!(w.wait_counter("r", "sixtofour", "drop_loop", 3, |v| v >= 1) >= 1);
    // Garbage.
    send41(&w, "a", "198.51.100.2".parse().unwrap(), &[0x60, 1, 2, 3]);
    assert!(w.wait_counter("b", "sixtofour", "drop_malformed", 3, |v| v >= 1) >= 1);
    // Still working.
    assert!(w.ping("a", "2002:c633:6402::1", 2));
}

#[test]
fn sixrd_ces_reach_each_other_and_native_ipv6_through_the_br() {
    lab::need_root!();
    // 6rd prefix 3fff::/32 (RFC 9637 documentation space), IPv4MaskLen 0:
    // every CE gets a /64, 3fff:0:V4ADDR::/64.
    let mut w = testbed("192.0.2.1", "198.51.100.2", "203.0.113.1");
    let ce = |addr: &str, me: &str| {
        format!(
            "[sixrd]\nmode = \"ce\"\nprefix = \"3fff::/32\"\nipv4-mask-len = 0\naddress = \"{addr}\"\nbr = \"203.0.113.1\"\n\
             addresses = [\"{me}/128\"]\nroutes = [\"::/0\"]\n"
        )
    };
    // CE prefixes: 3fff:0:c000:201::/64 and 3fff:0:c633:6402::/64.
    w.v6gate("a", "a", &ce("192.0.2.1", "3fff:0:c000:201::1"));
    w.v6gate("b", "b", &ce("198.51.100.2", "3fff:0:c633:6402::1"));
    w.v6gate(
        "r",
        "r",
        "[sixrd]\nmode = \"br\"\nprefix = \"3fff::/32\"\nipv4-mask-len = 0\naddress = \"203.0.113.1\"\n",
    );
    both_ways(&w, "a", "3fff:0:c000:201::1", "b", "3fff:0:c633:6402::1", 7200);
    both_ways(&w, "a", "3fff:0:c000:201::1", "h", HOST, 7210);
    // A native source from a CE (not the BR) is refused at the other CE (RFC 5969 §8).
    send41(
        &w,
        "a",
        "198.51.100.2".parse().unwrap(),
        &v6("2001:db8:77::1".parse().unwrap(), "3fff:0:c633:6402::1".parse().unwrap()),
    );
    assert!(w.wait_counter("b", "sixrd", "drop_native_source", 3, |v| v >= 1) >= 1);
    // Spoofed 6rd source at the BR.
    send41(&w, "a", "203.0.113.1".parse().unwrap(), &v6("3fff:0:c633:6402::7".parse().unwrap(), HOST.parse().unwrap()));
    assert!(w.wait_counter("r", "sixrd", "drop_spoofed", 3, |v| v >= 1) >= 1);
}
