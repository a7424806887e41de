//! Issue #29 D10 against `v6gate tunnel`'s Teredo relay in network
//! namespaces: spoofed floods no longer evict a trusted peer, a native
//! client gets a share of the peers waiting for the trust procedure,
//! rotating the flag bits of a Teredo address no longer buys bubbles to
//! one victim, and a peer trusted from its first bubble is counted.
//!
//! ```text
//!  c ns (the IPv4 Internet)          r ns (v6gate tunnel)                    h ns (native IPv6)
//!  192.0.2.7 client, .8 victim,  --  192.0.2.20:3544 relay   2001:db8:1::1 -- 2001:db8:1::2
//!  .9 a "server"; spoofed sources    2001::/32 into its TUN device
//! ```

mod daemon_util;
mod hardening_util;
mod tunnel_util;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use hardening_util::{raw_ipv4, spoofed, teredo_received as received};
use tunnel_util::World;
use xlat::tunnel::teredo;

const RELAY: &str = "192.0.2.20:3544";
const RELAY6: &str = "2001:db8:1::1";
const HOST: &str = "2001:db8:1::2";
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);

/// The three namespaces, and the relay with `extra` in its table.
fn teredo_of(mapped: SocketAddrV4, flags: u16) -> Ipv6Addr {
    hardening_util::teredo_of(SERVER, mapped, flags)
}

fn bubble_from(src: Ipv6Addr) -> Vec<u8> {
    hardening_util::bubble_from(src, RELAY6.parse().unwrap())
}

fn testbed(extra: &str) -> World {
    let mut w = World::new("v6th");
    for n in ["c", "r", "h"] {
        w.add(n);
    }
    w.link("c", "e0", "r", "r4");
    w.link("r", "r6", "h", "e0");
    for a in ["192.0.2.7/24", "192.0.2.8/24", "192.0.2.9/24"] {
        w.ip("c", &format!("addr add {a} dev e0"));
    }
    w.ip("r", "addr add 192.0.2.20/24 dev r4");
    w.ip("r", &format!("addr add {RELAY6}/64 dev r6 nodad"));
    w.ip("h", &format!("addr add {HOST}/64 dev e0 nodad"));
    w.ip("h", &format!("-6 route add default via {RELAY6}"));
    w.sysctl("r", "net.ipv6.conf.all.forwarding", "1");
    // Spoofed sources arrive on r4: no reverse-path filter in the way.
    w.sysctl("r", "net.ipv4.conf.all.rp_filter", "0");
    w.sysctl("r", "net.ipv4.conf.r4.rp_filter", "0");
    w.v6gate("r", "relay", &format!("[teredo.relay]\nbind = \"{RELAY}\"\naddress = \"{RELAY6}\"\n{extra}"));
    w
}

#[test]
fn a_trusted_peer_survives_floods_and_untrusted_peers_are_shared() {
    lab::need_root!();
    let w = testbed("max-peers = 500\nuntrusted-peers-per-client = 50\n");
    // The legitimate client: trusted from its first bubble (counted).
    let mapped = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 40000);
    let me = teredo_of(mapped, 0);
    let client = w.in_ns("c", || UdpSocket::bind(mapped).unwrap());
    client.send_to(&bubble_from(me), RELAY).unwrap();
    assert_eq!(w.wait_counter("relay", "teredo-relay", "peers_trusted", 10, |v| v >= 1), 1, "{}", w.log("relay"));

    // 5,000 spoofed bubbles, each from the mapping its source embeds.
    w.in_ns("c", || {
        let raw = raw_ipv4();
        for i in 0..5000u32 {
            let from = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 1 + (i % 250) as u8), 1000 + (i / 250) as u16);
            spoofed(&raw, from, RELAY.parse().unwrap(), &bubble_from(teredo_of(from, 0)));
        }
    });
    // 300 new peers from the native host's /64: 50 wait for the trust
    // procedure, the rest are refused (ICMPv6) and counted.
    w.in_ns("h", || {
        let s = UdpSocket::bind("[::]:0").unwrap();
        for i in 0..300u16 {
            let dst = teredo_of(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 1), 2000 + i), 0);
            let _ = s.send_to(b"hello", SocketAddr::new(dst.into(), 9));
        }
    });
    assert_eq!(w.wait_counter("relay", "teredo-relay", "drop_untrusted_share", 10, |v| v >= 250), 250);
    let refused = w.wait_counter("relay", "teredo-relay", "peers_refused", 10, |v| v >= 4501);
    assert_eq!(refused, 4501, "the list holds 500 trusted peers, the first ones: {}", w.status("relay"));
    let s = w.status("relay");
    assert_eq!(s["teredo-relay"]["untrusted_peers"], 50, "{s}");

    // The legitimate peer is still trusted: native traffic goes straight
    // to it (no bubble, no wait), while it keeps talking.
    client.send_to(&bubble_from(me), RELAY).unwrap();
    w.in_ns("h", || {
        let s = UdpSocket::bind("[::]:0").unwrap();
        s.send_to(b"to the trusted peer", SocketAddr::new(me.into(), 9)).unwrap();
    });
    let (data, bubbles) = received(&client, Duration::from_secs(2));
    assert_eq!((data, bubbles), (1, 0), "{}", w.status("relay"));
    assert_eq!(w.counter("relay", "teredo-relay", "peers_trusted"), 500);
}

#[test]
fn rotating_flag_bits_buy_no_bubbles_for_one_victim() {
    lab::need_root!();
    let w = testbed("untrusted-peers-per-client = 5000\nmax-untrusted-peers = 5000\n");
    let victim_addr = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 8), 5000);
    let victim = w.in_ns("c", || UdpSocket::bind(victim_addr).unwrap());
    let server = w.in_ns("c", || UdpSocket::bind(SocketAddrV4::new(SERVER, 3544)).unwrap());
    // 2,000 packets to one victim mapping under 2,000 flag values, over
    // eight seconds: the RFC 4380 budget of one peer is four bubbles, one
    // every 2 s; each flag value was a new peer with a budget of its own.
    let t0 = Instant::now();
    w.in_ns("h", || {
        let s = UdpSocket::bind("[::]:0").unwrap();
        for flags in 0..2000u16 {
            let dst = teredo_of(victim_addr, flags & !teredo::FLAG_CONE);
            let _ = s.send_to(b"x", SocketAddr::new(dst.into(), 9));
            std::thread::sleep(Duration::from_millis(4));
        }
    });
    w.wait_counter("relay", "teredo-relay", "v6_in", 10, |v| v >= 2000);
    let (_, direct) = received(&victim, Duration::from_secs(1));
    let (_, indirect) = received(&server, Duration::from_secs(1));
    assert!(t0.elapsed() < Duration::from_secs(300), "within one RFC 4380 bubble window");
    assert_eq!((direct, indirect), (4, 4), "{}", w.status("relay"));
    assert_eq!(w.counter("relay", "teredo-relay", "bubbles_sent"), 8);
}
