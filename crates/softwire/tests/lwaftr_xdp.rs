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

use core::net::{Ipv4Addr, Ipv6Addr};
use lab::netns::{am_root, Netns};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use softwire::binding::{Binding, BindingTable};
use softwire::endpoint::EndpointConfig;
use softwire::fast::LwaftrFast;
use softwire::lwaftr::{Lwaftr, LwaftrConfig};
use softwire::portset::PsidMap;
use softwire::Action;
use xdp::softwire::SoftwireCounter as C;
use xdp::{action, Mode};
use xlat::{Out, PacketKind};

const LOCAL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const B4_1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
const B4_2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const B4_W: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 9);
const B4_L: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);
const B4_X: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1);
const SHARED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const WHOLE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);
const LEASED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const UNBOUND: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);
const HOST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
const MAC_X4: [u8; 6] = [2, 0, 0, 0, 4, 1];
const MAC_GW4: [u8; 6] = [2, 0, 0, 0, 4, 2];
const MAC_X6: [u8; 6] = [2, 0, 0, 0, 6, 1];
const MAC_GW6: [u8; 6] = [2, 0, 0, 0, 6, 2];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0x99, 0x99];

fn map6() -> PsidMap {
    PsidMap::new(6, 6).unwrap()
}

fn bindings(with_b4_2: bool) -> BindingTable {
    let mut t = BindingTable::new();
    t.insert(Binding { b4: B4_1, ipv4: SHARED, psid: 1, map: map6() }).unwrap();
    if with_b4_2 {
        t.insert(Binding { b4: B4_2, ipv4: SHARED, psid: 2, map: map6() }).unwrap();
    }
    t.insert(Binding { b4: B4_W, ipv4: WHOLE, psid: 0, map: PsidMap::FULL }).unwrap();
    t
}

fn leases(on: bool) -> BindingTable {
    let mut t = BindingTable::new();
    if on {
        t.insert(Binding { b4: B4_L, ipv4: LEASED, psid: 0, map: PsidMap::FULL }).unwrap();
    }
    t
}

/// The namespace, the engine and its loaded, mirrored fast path.
struct Bed {
    // Field order: the fast path goes before the namespace.
    fast: LwaftrFast,
    lw: Lwaftr,
    if4: u32,
    if6: u32,
    _ns: Netns,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Forwarded(Vec<u8>),
    Passed,
}

impl Bed {
    fn new(encap_limit: Option<u8>) -> Bed {
        assert!(am_root(), "the XDP tests need root (BPF_PROG_TEST_RUN, network namespaces); CI runs as root");
        let ns = Netns::unique("v6sw").expect("namespace");
        let cmds: &[&[&str]] = &[
            &["link", "set", "lo", "up"],
            &["link", "add", "x4", "address", "02:00:00:00:04:01", "type", "veth", "peer", "name", "x4p"],
            &["link", "add", "x6", "address", "02:00:00:00:06:01", "type", "veth", "peer", "name", "x6p"],
            &["link", "set", "x4", "up"],
            &["link", "set", "x4p", "up"],
            &["link", "set", "x6", "up"],
            &["link", "set", "x6p", "up"],
            &["addr", "add", "198.51.100.1/24", "dev", "x4"],
            &["-6", "addr", "add", "2001:db8:6::1/64", "dev", "x6", "nodad"],
            &["neigh", "add", "198.51.100.2", "lladdr", "02:00:00:00:04:02", "dev", "x4", "nud", "permanent"],
            &["-6", "neigh", "add", "2001:db8:6::2", "lladdr", "02:00:00:00:06:02", "dev", "x6", "nud", "permanent"],
            &["route", "add", "default", "via", "198.51.100.2", "dev", "x4"],
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
        let mut endpoint = EndpointConfig::new(LOCAL, Ipv4Addr::new(192, 0, 0, 1));
        endpoint.encap_limit = encap_limit;
        endpoint.hop_limit = 61;
        let cfg = LwaftrConfig { endpoint, hairpinning: true, icmpv4_errors: true, icmpv6_errors: true };
        let lw = Lwaftr::new(cfg, bindings(true));
        lw.set_leases(leases(true));
        let mut fast = LwaftrFast::load(&lw, 64).unwrap_or_else(|e| panic!("{e}"));
        let fp = fast.fast_path_mut();
        fp.allow_egress(if4).unwrap();
        fp.allow_egress(if6).unwrap();
        fp.set_interface_mac(if4, MAC_X4).unwrap();
        fp.set_interface_mac(if6, MAC_X6).unwrap();
        // Attached (native) to an idle interface: BPF_PROG_TEST_RUN then
        // skips the XDP dispatcher's RCU wait per call.
        fast.attach("x4p", Mode::Native).unwrap_or_else(|e| panic!("{e}"));
        Bed { fast, lw, if4, if6, _ns: ns }
    }

    fn counter(&self, c: C) -> u64 {
        self.fast.fast_path().counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1.packets
    }

    /// The fast path over `l3` (padded to `pad` bytes of frame), checked
    /// for what a pass and a forward must look like.
    fn fast(&self, l3: &[u8], pad: usize) -> Outcome {
        let v6 = l3.first().map(|b| b >> 4) == Some(6);
        let (ingress, mac, et) = if v6 { (self.if6, MAC_X6, 0x86dd) } else { (self.if4, MAC_X4, 0x0800) };
        let mut frame = Vec::new();
        frame.extend_from_slice(&mac);
        frame.extend_from_slice(&MAC_PEER);
        frame.extend_from_slice(&u16::to_be_bytes(et));
        frame.extend_from_slice(l3);
        if frame.len() < pad {
            frame.resize(pad, 0);
        }
        let r = self.fast.fast_path().test_run(&frame, ingress, 1).unwrap_or_else(|e| panic!("{e}"));
        match r.action {
            action::PASS => {
                assert_eq!(r.frame, frame, "a passed frame is untouched");
                Outcome::Passed
            }
            action::REDIRECT | action::TX => {
                let (gw, me, et) =
                    if r.frame[12..14] == [0x08, 0x00] { (MAC_GW4, MAC_X4, 4) } else { (MAC_GW6, MAC_X6, 6) };
                assert_eq!(r.frame[..6], gw, "destination MAC: the next hop's");
                assert_eq!(r.frame[6..12], me, "source MAC: the egress interface's");
                assert_eq!(r.frame[14] >> 4, et, "EtherType agrees with the IP version");
                Outcome::Forwarded(r.frame[14..].to_vec())
            }
            a => panic!("unexpected XDP action {a} for {}", hex(l3)),
        }
    }

    /// What the slow path sends for `l3`: the kernel forwards it into the
    /// TUN device, the engine handles it, the kernel forwards its single
    /// output. None when that is not exactly one forwarded packet.
    fn slow(&self, l3: &[u8]) -> Option<Vec<u8>> {
        let mut p = l3.to_vec();
        if !kernel_forward(&mut p) {
            return None;
        }
        let mut out = Out::new();
        if self.lw.process(&p, 1_000_000_000, &mut out) != Action::Emit {
            return None;
        }
        let pkts: Vec<_> = out.iter().map(|(k, b)| (k, b.to_vec())).collect();
        match pkts.as_slice() {
            [(PacketKind::Forward, q)] => {
                let mut q = q.clone();
                kernel_forward(&mut q).then_some(q)
            }
            _ => None,
        }
    }

    /// The differential check of one packet.
    fn diff(&self, l3: &[u8], pad: usize) -> Outcome {
        let o = self.fast(l3, pad);
        if let Outcome::Forwarded(got) = &o {
            let want =
                self.slow(l3).unwrap_or_else(|| panic!("fast path forwarded what the slow path does not: {}", hex(l3)));
            assert_eq!(hex(got), hex(&want), "fast and slow path differ for {}", hex(l3));
        }
        o
    }

    fn fast_ok(&self, name: &str, l3: &[u8]) -> Vec<u8> {
        match self.diff(l3, 0) {
            Outcome::Forwarded(p) => p,
            Outcome::Passed => panic!("{name}: expected the fast path to take it"),
        }
    }

    fn passes(&self, name: &str, l3: &[u8], why: C) {
        let before = self.counter(why);
        assert_eq!(self.diff(l3, 0), Outcome::Passed, "{name}: expected a pass");
        assert_eq!(self.counter(why), before + 1, "{name}: counted as {}", why.label());
    }
}

/// The kernel's forwarding step: header checks, TTL / hop limit, and
/// `ip_decrease_ttl()` (its checksum arithmetic, byte for byte).
fn kernel_forward(p: &mut [u8]) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            let ihl = usize::from(p[0] & 15) * 4;
            if ihl < 20 || p.len() < ihl || !xlat::checksum::verifies(xlat::checksum::sum(&p[..ihl])) || p[8] <= 1 {
                return false;
            }
            let c = u32::from(u16::from_ne_bytes([p[10], p[11]])) + u32::from(u16::from_ne_bytes([1, 0]));
            let c = c + u32::from(c >= 0xffff);
            p[10..12].copy_from_slice(&(c as u16).to_ne_bytes());
            p[8] -= 1;
            true
        }
        Some(6) if p.len() >= 40 => {
            if p[7] <= 1 {
                return false;
            }
            p[7] -= 1;
            true
        }
        _ => false,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[derive(Debug, Clone, Copy)]
struct V4 {
    tos: u8,
    ttl: u8,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    df: bool,
    mf: bool,
}

impl V4 {
    fn new(proto: u8, src: Ipv4Addr, dst: Ipv4Addr) -> V4 {
        V4 { tos: 0, ttl: 64, proto, src, dst, df: true, mf: false }
    }

    fn build_opts(&self, opts: &[u8], l4: &[u8]) -> Vec<u8> {
        let hl = 20 + opts.len();
        let mut p = vec![0u8; hl];
        p[0] = 0x40 | (hl / 4) as u8;
        p[1] = self.tos;
        p[2..4].copy_from_slice(&((hl + l4.len()) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[6] = if self.df { 0x40 } else { 0 } | if self.mf { 0x20 } else { 0 };
        p[8] = self.ttl;
        p[9] = self.proto;
        p[12..16].copy_from_slice(&self.src.octets());
        p[16..20].copy_from_slice(&self.dst.octets());
        p[20..].copy_from_slice(opts);
        let c = !fold(sum16(&p));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(l4);
        p
    }

    fn build(&self, l4: &[u8]) -> Vec<u8> {
        self.build_opts(&[], l4)
    }

    fn udp(&self, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0x5a, 0xa5]);
        u.extend_from_slice(payload);
        self.build(&u)
    }

    fn tcp(&self, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        t[16..18].copy_from_slice(&[0x12, 0x34]);
        t.extend_from_slice(payload);
        self.build(&t)
    }

    fn icmp(&self, ty: u8, code: u8, rest: [u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut m = vec![ty, code, 0, 0];
        m.extend_from_slice(&rest);
        m.extend_from_slice(payload);
        let c = !fold(sum16(&m));
        m[2..4].copy_from_slice(&c.to_be_bytes());
        self.build(&m)
    }
}

/// A tunnel packet from `src` to `dst` carrying `inner` with next header `nh`.
fn v6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, nh: u8, inner: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&(inner.len() as u16).to_be_bytes());
    p[6] = nh;
    p[7] = hop;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p.extend_from_slice(inner);
    p
}

fn sw(src: Ipv6Addr, inner: &[u8]) -> Vec<u8> {
    v6(src, LOCAL, 64, 4, inner)
}

fn port(psid: u16, i: u32) -> u16 {
    map6().nth(psid, i)
}

#[test]
fn named_cases_and_mirroring() {
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
    let b = Bed::new(Some(4));
    let got = b.fast_ok("with the limit option", &V4::new(17, HOST, SHARED).udp(53, port(1, 3), b"x"));
    assert_eq!(got[6], 60, "Destination Options first");
    b.fast_ok("decapsulation unchanged", &sw(B4_1, &V4::new(17, SHARED, HOST).udp(port(1, 5), 53, b"q")));
}

/// Generated packets, valid and mutated: the fast path never sends
/// anything the slow path would not send byte for byte.
#[test]
fn generated_packets_never_differ() {
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
        proptest::option::of((any::<usize>(), any::<u8>())),
    );
    let mut runner = TestRunner::new(PtConfig { cases: 2000, ..PtConfig::default() });
    let (fast, total) = (core::cell::Cell::new(0u32), core::cell::Cell::new(0u32));
    runner
        .run(&pkt, |(up, bi, vi, proto, sp, dp, tos, ttl, df, len, mutate)| {
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
            let mut l3 = if up { sw(b4s[bi], &inner) } else { inner };
            if let Some((at, x)) = mutate {
                let i = at % l3.len();
                l3[i] ^= x;
            }
            total.set(total.get() + 1);
            if matches!(b.diff(&l3, 0), Outcome::Forwarded(_)) {
                fast.set(fast.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // The generator is built so that many packets are valid and bound.
    let (fast, total) = (fast.get(), total.get());
    assert!(fast * 20 > total, "only {fast} of {total} generated packets took the fast path");
}
