//! Teredo interoperability in network namespaces, against Debian's Miredo
//! (`miredo` client, `miredo-server`), through nftables NATs of each kind.
//!
//! Testbed (IPv4 "Internet" router `i` in the middle):
//!
//! ```text
//!  ca 192.168.1.2 -- na [NAT A 198.51.100.7] --+
//!                                              i -- s 192.0.2.10/.11 server, 192.0.2.20 relay -- h 2001:db8:1::2
//!  cb 192.168.2.2 -- nb [NAT B 203.0.113.7] ---+
//! ```
//!
//! Every case checks that pings, UDP datagrams and a TCP stream arrive
//! intact, in both directions where the case says so.

mod tunnel_util;

use tunnel_util::{NatKind, World};

const SERVER: &str = "192.0.2.10";
const HOST: &str = "2001:db8:1::2";
const PORT: u16 = 5000;

/// The namespaces and links; no tunnel software started yet.
fn testbed(nat_a: NatKind, nat_b: Option<NatKind>) -> World {
    let mut w = World::new("v6tt");
    for n in ["i", "s", "h", "na", "ca"] {
        w.add(n);
    }
    w.link("i", "is", "s", "e0");
    w.link("s", "sh", "h", "e0");
    w.link("i", "ia", "na", "o");
    w.link("na", "in", "ca", "e0");
    w.ip("i", "addr add 192.0.2.254/24 dev is");
    w.ip("i", "addr add 198.51.100.254/24 dev ia");
    w.sysctl("i", "net.ipv4.ip_forward", "1");
    for a in ["192.0.2.10/24", "192.0.2.11/24", "192.0.2.20/24"] {
        w.ip("s", &format!("addr add {a} dev e0"));
    }
    w.ip("s", "route add default via 192.0.2.254");
    w.ip("s", "addr add 2001:db8:1::1/64 dev sh nodad");
    w.ip("h", "addr add 2001:db8:1::2/64 dev e0 nodad");
    w.ip("h", "-6 route add default via 2001:db8:1::1");
    w.sysctl("s", "net.ipv6.conf.all.forwarding", "1");
    nat(&mut w, "na", "ca", "198.51.100.7", "192.168.1", nat_a);
    if let Some(kb) = nat_b {
        w.add("nb");
        w.add("cb");
        w.link("i", "ib", "nb", "o");
        w.link("nb", "in", "cb", "e0");
        w.ip("i", "addr add 203.0.113.254/24 dev ib");
        nat(&mut w, "nb", "cb", "203.0.113.7", "192.168.2", kb);
    }
    w
}

fn nat(w: &mut World, n: &str, c: &str, public: &str, lan: &str, kind: NatKind) {
    w.ip(n, &format!("addr add {public}/24 dev o"));
    let gw = format!("{}.254", public.rsplit_once('.').unwrap().0);
    w.ip(n, &format!("route add default via {gw}"));
    w.ip(n, &format!("addr add {lan}.1/24 dev in"));
    w.sysctl(n, "net.ipv4.ip_forward", "1");
    w.ip(c, &format!("addr add {lan}.2/24 dev e0"));
    w.ip(c, &format!("route add default via {lan}.1"));
    w.nft(n, &kind.ruleset(public, &format!("{lan}.2"), PORT));
}

fn v6gate_server_and_relay(w: &mut World) {
    w.v6gate(
        "s",
        "srv",
        "[teredo.server]\nprimary = \"192.0.2.10\"\nsecondary = \"192.0.2.11\"\n\
         [teredo.relay]\nbind = \"192.0.2.20:3544\"\naddress = \"2001:db8:1::1\"\n",
    );
}

fn miredo_client(w: &mut World, ns: &str, tag: &str) -> String {
    w.miredo(
        ns,
        tag,
        &format!("RelayType client\nInterfaceName teredo\nServerAddress {SERVER}\nServerAddress2 192.0.2.11\nBindPort {PORT}\n"),
    );
    w.wait_addr(ns, "teredo", "2001:0:", 30).unwrap_or_else(|| panic!("Miredo did not qualify: {}", w.log(tag)))
}

fn v6gate_client(w: &mut World, ns: &str, tag: &str, lan: &str) -> String {
    w.v6gate(
        ns,
        tag,
        &format!(
            "[teredo.client]\nserver = \"{SERVER}\"\nserver2 = \"192.0.2.11\"\nbind = \"{lan}.2:{PORT}\"\n\
             timeout = \"1s\"\nroutes = [\"::/0\"]\n"
        ),
    );
    w.wait_addr(ns, "v6gate-teredo", "2001:0:", 30)
        .unwrap_or_else(|| panic!("v6gate client did not qualify: {}", w.log(tag)))
}

/// Ping, UDP and TCP between client namespace `c` (address `ca`) and the
/// native host, both directions.
fn native_both_ways(w: &World, c: &str, ca: &str) {
    assert!(w.ping_until(c, HOST, 20), "client -> native: no echo");
    assert!(w.ping(c, HOST, 3), "client -> native ping");
    assert!(w.ping(c, HOST, 3), "client -> native ping");
    assert!(w.ping("h", ca, 3), "native -> client ping");
    assert_eq!(w.udp_echo("h", c, HOST, 7001, 20, 1000), 20, "client -> native UDP");
    assert_eq!(w.udp_echo(c, "h", ca, 7002, 20, 1000), 20, "native -> client UDP");
    assert!(w.tcp_echo("h", c, HOST, 7003, 200_000), "client -> native TCP");
    assert!(w.tcp_echo(c, "h", ca, 7004, 200_000), "native -> client TCP");
}

#[test]
fn miredo_client_through_v6gate_server_and_relay_behind_each_nat() {
    lab::need_root_and_programs!("miredo", "nft");
    for kind in [NatKind::FullCone, NatKind::Restricted, NatKind::PortRestricted] {
        let mut w = testbed(kind, None);
        v6gate_server_and_relay(&mut w);
        let ca = miredo_client(&mut w, "ca", "miredo");
        native_both_ways(&w, "ca", &ca);
        // The status file is rewritten every half second: wait for the
        // counters to catch up with the traffic just sent.
        assert!(w.wait_counter("srv", "teredo-server", "router_advertisements", 5, |v| v >= 1) >= 1, "{kind:?}");
        assert!(w.wait_counter("srv", "teredo-relay", "peers_trusted", 5, |v| v >= 1) >= 1, "{kind:?}");
        assert!(w.wait_counter("srv", "teredo-relay", "to_ipv6", 5, |v| v >= 20) >= 20, "{kind:?} {}", w.status("srv"));
    }
}

#[test]
fn v6gate_client_qualifies_against_miredo_server() {
    lab::need_root_and_programs!("miredo-server", "nft");
    let mut w = testbed(NatKind::PortRestricted, None);
    w.miredo_server("s", "mserver", "ServerBindAddress 192.0.2.10\nServerBindAddress2 192.0.2.11\n");
    w.v6gate("s", "relay", "[teredo.relay]\nbind = \"192.0.2.20:3544\"\naddress = \"2001:db8:1::1\"\n");
    let ca = v6gate_client(&mut w, "ca", "client", "192.168.1");
    let st = w.wait_status("client", |s| !s["teredo-client"]["nat"].is_null());
    assert_eq!(st["teredo-client"]["nat"], "restricted", "{st}");
    assert_eq!(st["teredo-client"]["mapping"], format!("198.51.100.7:{PORT}"));
    native_both_ways(&w, "ca", &ca);
    assert!(w.wait_counter("client", "teredo-client", "pings_sent", 5, |v| v >= 1) >= 1);
    assert!(w.wait_counter("client", "teredo-client", "peers_trusted", 5, |v| v >= 1) >= 1);
}

#[test]
fn miredo_and_v6gate_clients_behind_different_nats_reach_each_other() {
    lab::need_root_and_programs!("miredo", "nft");
    let mut w = testbed(NatKind::PortRestricted, Some(NatKind::Restricted));
    v6gate_server_and_relay(&mut w);
    let a = miredo_client(&mut w, "ca", "miredo");
    let b = v6gate_client(&mut w, "cb", "client", "192.168.2");
    assert!(w.ping_until("cb", &a, 20), "v6gate -> Miredo");
    assert!(w.ping("cb", &a, 3));
    assert!(w.ping("ca", &b, 3), "Miredo -> v6gate");
    assert_eq!(w.udp_echo("ca", "cb", &a, 7011, 20, 1000), 20, "v6gate -> Miredo UDP");
    assert_eq!(w.udp_echo("cb", "ca", &b, 7012, 20, 1000), 20, "Miredo -> v6gate UDP");
    assert!(w.tcp_echo("ca", "cb", &a, 7013, 100_000), "v6gate -> Miredo TCP");
    assert!(w.wait_counter("client", "teredo-client", "bubbles_sent", 5, |v| v >= 1) >= 1);
}

/// RFC 6081 Symmetric NAT Support. Behind a symmetric NAT (a new port for
/// every destination) the v6gate client qualifies and says so; its relay
/// and its peers learn the mapping the NAT gave them from the bubbles that
/// answer theirs. Miredo, as the peer behind the restricted NAT, drops
/// those bubbles (their source embeds another port), so a Miredo peer
/// cannot be reached from behind a symmetric NAT.
#[test]
fn symmetric_nat_what_v6gate_does_that_miredo_cannot() {
    lab::need_root_and_programs!("miredo", "nft");
    let mut w = testbed(NatKind::Symmetric, Some(NatKind::Restricted));
    v6gate_server_and_relay(&mut w);
    let a = v6gate_client(&mut w, "ca", "client", "192.168.1");
    let st = w.wait_status("client", |s| !s["teredo-client"]["nat"].is_null());
    assert_eq!(st["teredo-client"]["nat"], "symmetric", "{st}");
    native_both_ways(&w, "ca", &a);
    assert!(w.wait_counter("srv", "teredo-relay", "mappings_learnt", 5, |v| v >= 1) >= 1, "relay learnt the mapping");
    // A v6gate peer behind the restricted NAT: both ways.
    let b = v6gate_client(&mut w, "cb", "peer", "192.168.2");
    assert!(
        w.ping_until("ca", &b, 20),
        "symmetric -> restricted\nA: {}\nB: {}",
        w.status("client")["teredo-client"],
        w.status("peer")["teredo-client"]
    );
    assert!(w.ping("ca", &b, 3));
    assert!(w.ping("cb", &a, 3), "restricted -> symmetric");
    assert_eq!(w.udp_echo("cb", "ca", &b, 7021, 20, 1000), 20);
    assert!(w.wait_counter("peer", "teredo-client", "mappings_learnt", 5, |v| v >= 1) >= 1);
    drop(w);

    // The same with Miredo as the peer behind the restricted NAT: no way through.
    let mut w = testbed(NatKind::Symmetric, Some(NatKind::Restricted));
    v6gate_server_and_relay(&mut w);
    let _a = v6gate_client(&mut w, "ca", "client", "192.168.1");
    let b = miredo_client(&mut w, "cb", "miredo");
    assert!(!w.ping_until("ca", &b, 12), "Miredo accepted a symmetric NAT's mapping after all");
    assert!(w.wait_counter("client", "teredo-client", "bubbles_sent", 5, |v| v >= 2) >= 2, "the v6gate client did try");
}

/// The relay's XDP fast path (`[teredo.relay] xdp`, attached natively to
/// its IPv4 side `e0` and IPv6 side `sh`): a Miredo client behind a NAT
/// still qualifies and becomes trusted through the slow path (RFC 4380
/// §5.4: bubbles, the relay core), then its UDP and TCP traffic with the
/// native host goes through XDP both ways (decapsulated and encapsulated
/// there), while ICMPv6 (the pings) stays on the slow path.
#[test]
fn miredo_client_reaches_native_ipv6_through_the_xdp_relay() {
    lab::need_root_and_programs!("miredo", "nft");
    let mut w = testbed(NatKind::PortRestricted, None);
    // veth: an interface XDP redirects into needs NAPI at its peer (GRO
    // on); senders from local sockets hand over checksums not yet computed
    // unless transmit checksum offload is off (docs/xdp.md, "Checksums").
    w.in_ns("i", || xdp::sys::set_gro("is", true)).unwrap();
    w.in_ns("h", || xdp::sys::set_gro("e0", true).and_then(|()| xdp::sys::set_tx_checksum("e0", false))).unwrap();
    w.in_ns("ca", || xdp::sys::set_tx_checksum("e0", false)).unwrap();
    // The encapsulation's bpf_fib_lookup (IPv4, from the IPv6 side) needs
    // IPv4 forwarding on the interface it is made from (docs/tunnels.md).
    w.sysctl("s", "net.ipv4.conf.sh.forwarding", "1");
    w.v6gate(
        "s",
        "srv",
        "[teredo.server]\nprimary = \"192.0.2.10\"\nsecondary = \"192.0.2.11\"\n\
         [teredo.relay]\nbind = \"192.0.2.20:3544\"\naddress = \"2001:db8:1::1\"\n\
         xdp = \"native\"\nxdp-interfaces = [\"e0\", \"sh\"]\n",
    );
    let st = w.wait_status("srv", |s| s["teredo-relay"]["xdp"]["attachments"].as_array().is_some_and(|a| a.len() == 2));
    assert_eq!(st["teredo-relay"]["xdp"]["attachments"][0]["mode"], "native", "{st}");
    let ca = miredo_client(&mut w, "ca", "miredo");
    native_both_ways(&w, "ca", &ca);
    let relay = |name: &str, min: u64| w.wait_counter("srv", "teredo-relay", name, 5, |v| v >= min);
    assert!(relay("peers_trusted", 1) >= 1, "the slow path ran the trust procedure");
    assert!(relay("xdp_decap", 20) >= 20, "client -> native in XDP: {}", w.status("srv"));
    assert!(relay("xdp_encap", 20) >= 20, "native -> client in XDP: {}", w.status("srv"));
    assert!(relay("xdp_pass_icmp", 1) >= 1, "pings on the slow path");
    assert!(relay("to_ipv6", 1) >= 1, "the slow path forwarded too (pings, the first packets)");
}
