//! The Teredo relay's XDP fast path against the relay core: differential
//! tests through BPF_PROG_TEST_RUN (root; they fail, never skip, without
//! BPF).
//!
//! A uniquely named namespace (removed on drop, also on panic) holds the
//! relay's IPv4 side `x4` (192.0.2.1, default route through a permanent
//! neighbour) and IPv6 side `x6` (2001:db8:6::1, the same). Each frame
//! goes through `xdp_teredo` and through the model of the slow path: the
//! relay core (`Relay::on_udp` / `on_v6`) between the kernel's forwarding
//! (hop limit minus one, into or out of the TUN device) and the relay's
//! UDP socket (Linux's header for an unconnected socket: TOS 0, DF,
//! Identification 0, TTL 64, UDP checksum). A forwarded frame must be
//! byte-identical to what that path sends; a passed frame must be
//! untouched, and counted under its reason. The peer entries are written
//! by the runner's own mirror (`teredo::fast::Mirror`) from the core's
//! trust changes.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use etherparse::{IpNumber, Ipv4Header, PacketBuilder, UdpHeader};
use lab::netns::Netns;
use proptest::prelude::*;
use tunnel::teredo::fast::Mirror;
use tunnel::teredo::relay::{Relay, RelayConfig};
use tunnel::teredo::TeredoAddr;
use tunnel::{Dest, Outbox};
use xdp::teredo::{TeredoCounter, TeredoFastPath, TeredoSettings};
use xdp::{action, Mode};

const RELAY4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const MAPPED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 40000);
const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const RELAY6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 1);
const MAC_X4: [u8; 6] = [2, 0, 0, 0, 4, 1];
const MAC_GW4: [u8; 6] = [2, 0, 0, 0, 4, 2];
const MAC_X6: [u8; 6] = [2, 0, 0, 0, 6, 1];
const MAC_GW6: [u8; 6] = [2, 0, 0, 0, 6, 2];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0x99, 0x99];
/// The Teredo MTU of the test relay's TUN device.
const MTU6: u32 = 1400;

fn client() -> Ipv6Addr {
    TeredoAddr { server: SERVER, flags: 0, mapped: MAPPED }.to_ipv6()
}

/// The namespace, the loaded fast path and the relay core with its mirror.
struct Bed {
    // Field order: the fast path goes before the namespace.
    mirror: Mirror,
    core: Relay,
    if4: u32,
    if6: u32,
    now: u64,
    _ns: Netns,
}

impl Bed {
    fn new() -> Bed {
        let ns = Netns::unique("v6tx").expect("namespace");
        let cmds: &[&[&str]] = &[
            &["link", "set", "lo", "up"],
            &["link", "add", "x4", "address", "02:00:00:00:04:01", "type", "veth", "peer", "name", "x4p"],
            &["link", "add", "x6", "address", "02:00:00:00:06:01", "type", "veth", "peer", "name", "x6p"],
            &["link", "set", "x4", "up"],
            &["link", "set", "x4p", "up"],
            &["link", "set", "x6", "up"],
            &["link", "set", "x6p", "up"],
            &["addr", "add", "192.0.2.1/24", "dev", "x4"],
            &["-6", "addr", "add", "2001:db8:6::1/64", "dev", "x6", "nodad"],
            &["neigh", "add", "192.0.2.2", "lladdr", "02:00:00:00:04:02", "dev", "x4", "nud", "permanent"],
            &["-6", "neigh", "add", "2001:db8:6::2", "lladdr", "02:00:00:00:06:02", "dev", "x6", "nud", "permanent"],
            &["route", "add", "default", "via", "192.0.2.2", "dev", "x4"],
            &["-6", "route", "add", "default", "via", "2001:db8:6::2", "dev", "x6"],
        ];
        for c in cmds {
            ns.ip(c).unwrap_or_else(|e| panic!("ip {}: {e:#}", c.join(" ")));
        }
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        ns.enter_thread().expect("enter the namespace");
        let if4 = xdp::sys::if_index("x4").unwrap();
        let if6 = xdp::sys::if_index("x6").unwrap();
        let mut fp = TeredoFastPath::load(TeredoSettings {
            relay: SocketAddrV4::new(RELAY4, 3544),
            prefix_hi32: 0x2001_0000,
            mtu6: MTU6,
            max_peers: 64,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        fp.allow_egress(if4).unwrap();
        fp.allow_egress(if6).unwrap();
        fp.set_interface_mac(if4, MAC_X4).unwrap();
        fp.set_interface_mac(if6, MAC_X6).unwrap();
        // Attached (native) to an idle interface: BPF_PROG_TEST_RUN then
        // skips the XDP dispatcher's RCU wait per call.
        let a = fp.attach("x4p", Mode::Native).unwrap_or_else(|e| panic!("{e}")).expect("attached");
        assert_eq!(a.mode, Mode::Native, "native XDP on veth");
        let mut core = Relay::new(RelayConfig::new(RELAY6));
        core.set_mirroring(true);
        Bed { mirror: Mirror::new(fp), core, if4, if6, now: 1000, _ns: ns }
    }

    fn counter(&self, c: TeredoCounter) -> u64 {
        self.mirror.fast_path().counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1.packets
    }

    /// The client sends `pkt` from `from`; the relay core trusts it (the
    /// RFC 4380 §5.4.2 rule: its source embeds `from`); the mirror writes it.
    fn trust(&mut self) {
        let mut ob = Outbox::new();
        let p = v6_udp(client(), HOST, 64, &[1; 16]);
        self.core.on_udp(MAPPED, &p, self.now, &mut ob);
        assert_eq!(ob.iter().next().map(|(d, _)| d), Some(Dest::Tun), "the core forwards the first packet");
        self.mirror.sync(&mut self.core, self.now);
        assert_eq!(self.mirror.fast_path().peer_get(client()).unwrap().map(|(m, _)| m), Some(MAPPED));
    }

    /// What the slow path sends for a datagram from `from` (the IPv6
    /// packet the kernel forwards out of the TUN device), or None.
    fn slow_decap(&mut self, from: SocketAddrV4, payload: &[u8]) -> Option<Vec<u8>> {
        let mut ob = Outbox::new();
        self.core.on_udp(from, payload, self.now, &mut ob);
        let out: Vec<_> = ob.iter().filter(|(d, _)| *d == Dest::Tun).map(|(_, b)| b.to_vec()).collect();
        assert!(out.len() <= 1);
        out.into_iter().next().map(|mut p| {
            p[7] -= 1; // the kernel forwards it out of the TUN device
            p
        })
    }

    /// What the slow path sends for `pkt` from the IPv6 side: the UDP
    /// datagram the relay's socket sends, as Linux writes it.
    fn slow_encap(&mut self, pkt: &[u8]) -> Option<Vec<u8>> {
        let mut p = pkt.to_vec();
        p[7] -= 1; // the kernel forwards it into the TUN device
        let mut ob = Outbox::new();
        self.core.on_v6(&p, self.now, &mut ob);
        let out: Vec<_> = ob.iter().map(|(d, b)| (d, b.to_vec())).collect();
        assert!(out.len() <= 1, "{out:?}");
        out.into_iter().next().map(|(d, b)| {
            let Dest::Udp { to, .. } = d else { panic!("{d:?}") };
            linux_udp(SocketAddrV4::new(RELAY4, 3544), to, &b)
        })
    }

    /// The fast path's verdict: `Some(l3)` forwarded (Ethernet header
    /// checked), `None` passed unchanged.
    fn fast(&self, frame: &[u8], ingress: u32) -> Option<Vec<u8>> {
        let r = self.mirror.fast_path().test_run(frame, ingress, 1).unwrap_or_else(|e| panic!("{e}"));
        match r.action {
            action::PASS => {
                assert_eq!(hex(&r.frame), hex(frame), "XDP_PASS leaves the frame unchanged");
                None
            }
            action::REDIRECT => {
                let v6 = r.frame[12..14] == [0x86, 0xdd];
                let (d, s) = if v6 { (MAC_GW6, MAC_X6) } else { (MAC_GW4, MAC_X4) };
                assert_eq!((r.frame[0..6].to_vec(), r.frame[6..12].to_vec()), (d.to_vec(), s.to_vec()), "FIB MACs");
                assert_eq!(v6, ingress == self.if4, "out of the other side");
                Some(r.frame[14..].to_vec())
            }
            a => panic!("unexpected XDP action {a}"),
        }
    }

    /// One datagram from `from` through both paths: they must agree.
    fn decap_both(&mut self, from: SocketAddrV4, payload: &[u8]) -> bool {
        let f = eth(MAC_X4, 0x0800, &linux_udp(from, SocketAddrV4::new(RELAY4, 3544), payload));
        self.check_decap(from, payload, &f)
    }

    fn check_decap(&mut self, from: SocketAddrV4, payload: &[u8], frame: &[u8]) -> bool {
        let fast = self.fast(frame, self.if4);
        if let Some(got) = &fast {
            let want = self.slow_decap(from, payload);
            assert_eq!(want.as_deref().map(hex), Some(hex(got)), "fast path differs from the relay core");
        }
        fast.is_some()
    }

    /// One IPv6 packet from the native side through both paths.
    fn encap_both(&mut self, pkt: &[u8]) -> bool {
        let f = eth(MAC_X6, 0x86dd, pkt);
        let fast = self.fast(&f, self.if6);
        if let Some(got) = &fast {
            let want = self.slow_encap(pkt);
            assert_eq!(want.as_deref().map(hex), Some(hex(got)), "fast path differs from the relay core");
        }
        fast.is_some()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn eth(dst: [u8; 6], et: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&MAC_PEER);
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

/// A UDP datagram as Linux sends it from an unconnected socket: TOS 0,
/// DF, Identification 0, TTL 64, the UDP checksum.
fn linux_udp(from: SocketAddrV4, to: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let mut ip =
        Ipv4Header::new((8 + payload.len()) as u16, 64, IpNumber::UDP, from.ip().octets(), to.ip().octets()).unwrap();
    ip.dont_fragment = true;
    ip.identification = 0;
    ip.header_checksum = ip.calc_header_checksum();
    let udp = UdpHeader::with_ipv4_checksum(from.port(), to.port(), &ip, payload).unwrap();
    let mut b = ip.to_bytes().to_vec();
    b.extend_from_slice(&udp.to_bytes());
    b.extend_from_slice(payload);
    b
}

fn v6_udp(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    PacketBuilder::ipv6(src.octets(), dst.octets(), hop).udp(9000, 9001).write(&mut b, payload).unwrap();
    b
}

/// An IPv6 packet with Next Header `nh` and `payload` as it is.
fn v6_raw(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, hop: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0x60, 0, 0, 0];
    b.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    b.extend_from_slice(&[nh, hop]);
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    b.extend_from_slice(payload);
    b
}

#[test]
fn rfc4380_5_4_trusted_peer_takes_the_fast_path_byte_for_byte() {
    lab::need_root!();
    let mut bed = Bed::new();
    // Untrusted: both directions pass (and the slow path starts the trust procedure).
    let p = v6_udp(HOST, client(), 64, &[7; 100]);
    assert!(!bed.encap_both(&p));
    assert_eq!(bed.counter(TeredoCounter::PassUntrusted), 1);
    bed.trust();
    // Sizes around the blocks of the checksum loop, UDP, TCP-like and
    // other payloads, both directions, traffic class and flow label kept.
    let mut n = 0;
    for size in [0usize, 1, 2, 3, 7, 63, 64, 65, 127, 128, 129, 200, 511, 512, 1000, 1232, MTU6 as usize - 40] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        for nh in [17u8, 6, 50] {
            let mut up = v6_raw(client(), HOST, nh, 64, &payload);
            up[1] = 0xab; // traffic class and flow label bits
            up[3] = 0x42;
            assert!(bed.decap_both(MAPPED, &up), "decap {size} {nh}");
            let mut down = v6_raw(HOST, client(), nh, 3, &payload);
            down[2] = 0x5c;
            assert!(bed.encap_both(&down), "encap {size} {nh}");
            n += 1;
        }
    }
    assert_eq!(bed.counter(TeredoCounter::Decap), n);
    assert_eq!(bed.counter(TeredoCounter::Encap), n);
    // A datagram sent without a UDP checksum (RFC 768) is accepted as the kernel does.
    let up = v6_udp(client(), HOST, 64, &[5; 33]);
    let mut d = linux_udp(MAPPED, SocketAddrV4::new(RELAY4, 3544), &up);
    d[26] = 0;
    d[27] = 0;
    assert!(bed.check_decap(MAPPED, &up, &eth(MAC_X4, 0x0800, &d)));
}

#[test]
fn everything_unusual_passes_to_the_slow_path_counted_by_reason() {
    lab::need_root!();
    use TeredoCounter as C;
    let mut bed = Bed::new();
    bed.trust();
    let relay = SocketAddrV4::new(RELAY4, 3544);
    let up = v6_udp(client(), HOST, 64, &[1; 40]);
    let down = v6_udp(HOST, client(), 64, &[1; 40]);
    let v4 = |from: SocketAddrV4, payload: &[u8]| eth(MAC_X4, 0x0800, &linux_udp(from, relay, payload));
    let mut cases: Vec<(C, Vec<u8>, bool)> = Vec::new();
    // The IPv4 side.
    cases.push((C::PassSpoofed, v4(SocketAddrV4::new(*MAPPED.ip(), 40001), &up), true));
    let mut bubble = [0u8; 40];
    xlat::tunnel::teredo::bubble(client(), RELAY6, &mut bubble).unwrap();
    cases.push((C::PassBubble, v4(MAPPED, &bubble), true));
    let mut origin = vec![0, 0, 0x63, 0xbf, 0xff, 0xff, 0xff, 0xf5];
    origin.extend_from_slice(&up);
    cases.push((C::PassIndicator, v4(MAPPED, &origin), true));
    let mut auth = vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    auth.extend_from_slice(&up);
    cases.push((C::PassIndicator, v4(MAPPED, &auth), true));
    cases.push((C::PassIcmp, v4(MAPPED, &v6_raw(client(), HOST, 58, 64, &[128, 0, 0, 0, 0, 1, 0, 1])), true));
    cases.push((C::PassHopLimit, v4(MAPPED, &v6_udp(client(), HOST, 1, &[1; 8])), true));
    cases.push((C::PassAddress, v4(MAPPED, &v6_udp(client(), client(), 64, &[1; 8])), true));
    cases.push((C::PassAddress, v4(MAPPED, &v6_udp(client(), "ff02::1".parse().unwrap(), 64, &[1; 8])), true));
    cases.push((C::PassFragment, v4(MAPPED, &v6_raw(client(), HOST, 44, 64, &[17, 0, 0, 1, 0, 0, 0, 1])), true));
    let mut bad = v4(MAPPED, &up);
    let n = bad.len();
    bad[n - 1] ^= 0x55;
    cases.push((C::PassChecksum, bad, true));
    let mut badip = v4(MAPPED, &up);
    badip[14 + 8] = 63; // TTL changed, header checksum not
    cases.push((C::PassChecksum, badip, true));
    let mut frag = v4(MAPPED, &up);
    frag[14 + 6] |= 0x20; // MF
    cases.push((C::PassFragment, frag, true));
    let mut opts = linux_udp(MAPPED, relay, &up);
    opts.splice(20..20, [1u8, 1, 1, 0]); // four bytes of NOP/EOL options
    opts[0] = 0x46;
    cases.push((C::PassIpv4Options, eth(MAC_X4, 0x0800, &opts), true));
    let mut trailing = v4(MAPPED, &up);
    trailing.extend_from_slice(&[0; 6]);
    cases.push((C::PassMalformed, trailing, true));
    cases.push((C::PassNotTeredo, eth(MAC_X4, 0x0800, &linux_udp(MAPPED, SocketAddrV4::new(RELAY4, 3545), &up)), true));
    let other = TeredoAddr { server: SERVER, flags: 0, mapped: "198.51.100.8:1".parse().unwrap() }.to_ipv6();
    cases.push((C::PassUntrusted, v4("198.51.100.8:1".parse().unwrap(), &v6_udp(other, HOST, 64, &[1; 8])), true));
    cases.push((C::PassNotIp, eth(MAC_X4, 0x0806, &[0; 28]), true));
    let mut other_host = v4(MAPPED, &up);
    other_host[5] ^= 0x10;
    cases.push((C::PassOtherHost, other_host, true));
    let mut broadcast = v4(MAPPED, &up);
    broadcast[..6].copy_from_slice(&[0xff; 6]);
    cases.push((C::PassOtherHost, broadcast, true));
    // The IPv6 side.
    let v6 = |p: &[u8]| eth(MAC_X6, 0x86dd, p);
    cases.push((C::PassNotTeredo, v6(&v6_udp(HOST, "2001:db8:9::1".parse().unwrap(), 64, &[1; 8])), false));
    cases.push((C::PassIcmp, v6(&v6_raw(HOST, client(), 58, 64, &[129, 0, 0, 0, 0, 1, 0, 1])), false));
    cases.push((C::PassHopLimit, v6(&v6_udp(HOST, client(), 1, &[1; 8])), false));
    cases.push((C::PassTooBig, v6(&v6_udp(HOST, client(), 64, &vec![0; MTU6 as usize - 40 - 8 + 1])), false));
    cases.push((C::PassAddress, v6(&v6_udp("fe80::1".parse().unwrap(), client(), 64, &[1; 8])), false));
    cases.push((C::PassBubble, v6(&v6_raw(HOST, client(), 59, 64, &[])), false));
    cases.push((C::PassOtherHost, eth([2, 0, 0, 0, 6, 9], 0x86dd, &down), false));
    cases.push((C::PassFragment, v6(&v6_raw(HOST, client(), 44, 64, &[17, 0, 0, 1, 0, 0, 0, 1])), false));
    let mut short = v6(&down);
    short.truncate(14 + 30);
    cases.push((C::PassMalformed, short, false));
    let other6 = TeredoAddr { server: SERVER, flags: 0, mapped: "198.51.100.9:9".parse().unwrap() }.to_ipv6();
    cases.push((C::PassUntrusted, v6(&v6_udp(HOST, other6, 64, &[1; 8])), false));
    for (reason, frame, from_v4) in &cases {
        let before = bed.counter(*reason);
        let ingress = if *from_v4 { bed.if4 } else { bed.if6 };
        assert_eq!(bed.fast(frame, ingress), None, "{reason:?} must pass: {}", hex(frame));
        assert_eq!(bed.counter(*reason), before + 1, "{reason:?} counted");
    }
    assert_eq!((bed.counter(C::Decap), bed.counter(C::Encap)), (0, 0));
    // The relay core refuses the spoofed one too (RFC 4380 §5.4.2), and
    // the fast path still forwards the real peer.
    assert_eq!(bed.slow_decap(SocketAddrV4::new(*MAPPED.ip(), 40001), &up), None);
    assert!(bed.decap_both(MAPPED, &up));
    assert!(bed.encap_both(&down));
}

#[test]
fn rfc4380_5_4_trust_lapses_unless_the_fast_path_saw_the_peer() {
    lab::need_root!();
    let mut bed = Bed::new();
    bed.trust();
    let up = v6_udp(client(), HOST, 64, &[3; 24]);
    let down = v6_udp(HOST, client(), 64, &[3; 24]);
    // 20 s later the peer sends through the fast path only; the mirror
    // carries its last-seen time back to the core at its next sweep.
    bed.now += 20_000;
    assert!(bed
        .fast(&eth(MAC_X4, 0x0800, &linux_udp(MAPPED, SocketAddrV4::new(RELAY4, 3544), &up)), bed.if4)
        .is_some());
    assert!(bed.mirror.fast_path().peer_last_seen(client()).unwrap().is_some());
    bed.now += 5_000;
    bed.mirror.sync(&mut bed.core, bed.now);
    assert_eq!(bed.mirror.stats.refreshed, 1);
    // 35 s after the slow path last saw it, still trusted (the fast path saw it at 20 s).
    bed.now += 10_000;
    bed.mirror.sync(&mut bed.core, bed.now);
    bed.core.tick(bed.now);
    assert_eq!(bed.core.trusted_mapping(&client(), bed.now), Some(MAPPED));
    assert!(bed.encap_both(&down));
    // 30 s of silence: expired in the core, removed from the map, the
    // fast path passes (and the slow path starts the trust procedure again).
    bed.now += 31_000;
    bed.mirror.sync(&mut bed.core, bed.now);
    bed.core.tick(bed.now);
    assert_eq!(bed.mirror.fast_path().peer_get(client()).unwrap(), None);
    assert_eq!(bed.mirror.peers(), 0);
    assert!(!bed.encap_both(&down));
    assert_eq!(bed.counter(TeredoCounter::PassUntrusted), 1);
}

/// Generated packets of a trusted peer, and the same mutated: the fast
/// path either passes them untouched or sends exactly what the relay core
/// and the kernel would. One namespace for every case (a runner by hand:
/// the `proptest!` macro would build one per case).
#[test]
fn generated_and_mutated_packets_agree() {
    lab::need_root!();
    use proptest::test_runner::{Config, TestRunner};
    let bed = std::cell::RefCell::new(Bed::new());
    bed.borrow_mut().trust();
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..1300),
        prop_oneof![Just(17u8), Just(6), Just(58), Just(59), Just(44), any::<u8>()],
        any::<u8>(),
        proptest::option::of((0usize..1400, any::<u8>())),
    );
    let mut runner = TestRunner::new(Config { cases: 256, ..Config::default() });
    runner
        .run(&strategy, |(payload, nh, hop, flip)| {
            let mut bed = bed.borrow_mut();
            // Keep the peer trusted whatever the case did to the core's clock.
            bed.now += 10;
            let mut up = v6_raw(client(), HOST, nh, hop, &payload);
            let mut down = v6_raw(HOST, client(), nh, hop, &payload);
            if let Some((at, x)) = flip {
                let i = at % up.len();
                up[i] ^= x;
                down[i] ^= x;
            }
            let plain = flip.is_none_or(|(_, x)| x == 0) && !matches!(nh, 58 | 59 | 44) && hop > 1;
            let fwd = bed.decap_both(MAPPED, &up);
            if plain {
                prop_assert!(fwd, "a plain packet of a trusted peer takes the fast path");
            }
            let fwd = bed.encap_both(&down);
            if plain && down.len() <= MTU6 as usize {
                prop_assert!(fwd);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
