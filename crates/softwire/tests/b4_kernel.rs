//! The B4's kernel datapath (`xdp::b4`: tc egress encapsulation, XDP
//! decapsulation) against the userspace B4 engine: differential tests
//! through BPF_PROG_TEST_RUN (root; they fail, never skip, without BPF).
//!
//! A uniquely named namespace (removed on drop, also on panic) holds the
//! B4's TUN device `t0` (the FIB lookup is made as from it) and its
//! uplink `u0` with a default route through a permanent neighbour. The
//! model of the slow path is the engine (`B4::process`) behind the
//! kernel's forwarding step around the TUN device: out of it for what
//! the engine encapsulates (the hop limit decremented), into it for a
//! softwire packet before the engine decapsulates it. An encapsulated or
//! decapsulated frame must be byte-identical to what that path sends; a
//! passed frame must be untouched, and the engine must be the one to
//! answer it (fragments, ICMP, the MTU).
//!
//! The host-integrated lwB4 (`[b4] host-ports`, [`Bed::lw`]): the host's
//! own packets (the binding's address, the host's share of the port set)
//! take the kernel path exactly as the engine sends them untranslated;
//! the NAPT's (other sources, ports outside the host's, the ports of the
//! range that are not the set's) and what the kernel path leaves (ICMP
//! errors, fragments) pass to the engine, counted.

mod xdp_support;

use core::net::{Ipv4Addr, Ipv6Addr};
use lab::netns::Netns;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use softwire::b4::{B4Config, HostPorts, Napt, B4};
use softwire::b4k;
use softwire::endpoint::EndpointConfig;
use softwire::nat44::Nat44Config;
use softwire::portset::PsidMap;
use softwire::Action;
use xdp::b4::{tc_action, B4Counter as C, B4KernelPath};
use xdp::{action, Mode};
use xdp_support::{hex, kernel_forward, v6, V4};
use xlat::{Out, PacketKind};

const B4A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
const AFTR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const OTHER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 9);
const HOST: Ipv4Addr = Ipv4Addr::new(192, 0, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const MAC_UP: [u8; 6] = [2, 0, 0, 0, 6, 1];
const MAC_GW: [u8; 6] = [2, 0, 0, 0, 6, 2];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0x99, 0x99];
/// The lwB4's binding: 203.0.113.1, PSID 1 of length 2 at offset 6 (ports
/// A·1024 + 256 ... A·1024 + 511, A = 1..63); the host owns A = 32..63.
const PUB: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const LAN: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);
const HOST_FIRST: u16 = 32 * 1024 + 256;
const HOST_LAST: u16 = 63 * 1024 + 511;
/// In the set, below the host's range: the NAPT's.
const NAPT_PORT: u16 = 31 * 1024 + 256;

fn lw_napt() -> Napt {
    Napt {
        ipv4: PUB,
        map: PsidMap::new(6, 2).unwrap(),
        psid: 1,
        host: Some(HostPorts { first: HOST_FIRST, last: HOST_LAST }),
    }
}

/// The namespace, the engine and the loaded kernel path.
struct Bed {
    // Field order: the kernel path goes before the namespace.
    kp: B4KernelPath,
    b4: B4,
    up: u32,
    _ns: Netns,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Encapsulated (tc) or decapsulated (XDP): the L3 packet.
    Done(Vec<u8>),
    Passed,
}

impl Bed {
    fn new(encap_limit: Option<u8>) -> Bed {
        Bed::with(encap_limit, true, None)
    }

    /// The host-integrated lwB4 of [`lw_napt`].
    fn lw() -> Bed {
        Bed::with(None, true, Some(lw_napt()))
    }

    fn with(encap_limit: Option<u8>, mss_clamp: bool, napt: Option<Napt>) -> Bed {
        let ns = Netns::unique("v6b4k").expect("namespace");
        let cmds: &[&[&str]] = &[
            &["link", "set", "lo", "up"],
            &["link", "add", "u0", "address", "02:00:00:00:06:01", "type", "veth", "peer", "name", "u0p"],
            &["link", "set", "u0", "up"],
            &["link", "set", "u0p", "up"],
            &["tuntap", "add", "dev", "t0", "mode", "tun"],
            &["link", "set", "t0", "up"],
            &["-6", "addr", "add", "2001:db8:6::1/64", "dev", "u0", "nodad"],
            &["-6", "neigh", "add", "2001:db8:6::2", "lladdr", "02:00:00:00:06:02", "dev", "u0", "nud", "permanent"],
            &["-6", "route", "add", "default", "via", "2001:db8:6::2", "dev", "u0"],
            &["-6", "route", "add", "2001:db8:2::2/128", "dev", "t0"],
            &["route", "add", "198.51.100.0/24", "dev", "t0"],
        ];
        for c in cmds {
            ns.ip(c).unwrap_or_else(|e| panic!("ip {}: {e:#}", c.join(" ")));
        }
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        ns.enter_thread().expect("enter the namespace");
        let up = xdp::sys::if_index("u0").unwrap();
        let t0 = xdp::sys::if_index("t0").unwrap();
        let mut endpoint = EndpointConfig::new(B4A, HOST);
        endpoint.encap_limit = encap_limit;
        endpoint.hop_limit = 61;
        let cfg = B4Config { endpoint, aftr: AFTR, napt, nat: Nat44Config::default(), mss_clamp };
        let b4 = B4::new(cfg);
        let mut kp = B4KernelPath::load(b4k::settings(&cfg)).unwrap_or_else(|e| panic!("{e}"));
        kp.prepare_test(t0, up, MAC_UP).unwrap();
        kp.set_aftr(Some(AFTR)).unwrap();
        // XDP attached (native) to an idle interface: BPF_PROG_TEST_RUN then
        // skips the XDP dispatcher's RCU wait per call.
        kp.attach_uplink("u0p", Mode::Native).unwrap_or_else(|e| panic!("{e}"));
        Bed { kp, b4, up, _ns: ns }
    }

    fn counter(&self, c: C) -> u64 {
        self.kp.counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1.packets
    }

    /// What the userspace B4 sends for `pkt` read from its TUN device:
    /// its one forwarded packet, or `None` (dropped, fragmented, answered).
    fn engine(&self, pkt: &[u8]) -> Option<Vec<u8>> {
        let mut out = Out::new();
        if self.b4.process(pkt, 0, &mut out) != Action::Emit || out.len() != 1 {
            return None;
        }
        match out.get(0) {
            Some((PacketKind::Forward, p)) => Some(p.to_vec()),
            _ => None,
        }
    }

    /// IPv4 -> softwire: tc over `l3` against the engine.
    fn encap(&self, l3: &[u8]) -> Outcome {
        let mut frame = [MAC_PEER, MAC_UP].concat();
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(l3);
        let r = self.kp.test_run_tc(&frame).unwrap_or_else(|e| panic!("{e}"));
        // The engine's tunnel packet, forwarded by the kernel out of the TUN device.
        let want = self
            .engine(l3)
            .filter(|p| p.first().map(|b| b >> 4) == Some(6))
            .and_then(|mut p| kernel_forward(&mut p).then_some(p));
        match r.action {
            tc_action::OK => {
                assert_eq!(r.frame, frame, "a passed packet is untouched: {}", hex(l3));
                Outcome::Passed
            }
            tc_action::REDIRECT => {
                assert_eq!(r.frame[..6], MAC_GW, "destination MAC: the next hop's");
                assert_eq!(r.frame[6..12], MAC_UP, "source MAC: the uplink's");
                assert_eq!(r.frame[12..14], [0x86, 0xdd]);
                let got = r.frame[14..].to_vec();
                assert_eq!(Some(&got), want.as_ref(), "encapsulated as the engine does: {}", hex(l3));
                Outcome::Done(got)
            }
            a => panic!("unexpected tc verdict {a} for {}", hex(l3)),
        }
    }

    /// Softwire -> IPv4: XDP over `l3` (Ethernet padded to `pad` bytes)
    /// against the kernel's forwarding into the TUN device and the engine.
    fn decap(&self, l3: &[u8], pad: usize, dst_mac: [u8; 6]) -> Outcome {
        let mut frame = [dst_mac, MAC_GW].concat();
        frame.extend_from_slice(&[0x86, 0xdd]);
        frame.extend_from_slice(l3);
        if frame.len() < pad {
            frame.resize(pad, 0);
        }
        let r = self.kp.test_run_xdp(&frame, self.up).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.action, action::PASS, "the decapsulation always passes to the stack");
        if r.frame == frame {
            return Outcome::Passed;
        }
        let mut fwd = l3.to_vec();
        let want = kernel_forward(&mut fwd).then(|| self.engine(&fwd)).flatten();
        assert_eq!(r.frame[..12], frame[..12], "the MAC addresses are kept");
        assert_eq!(r.frame[12..14], [0x08, 0x00], "EtherType IPv4");
        let got = r.frame[14..].to_vec();
        assert_eq!(Some(&got), want.as_ref(), "decapsulated as the engine does: {}", hex(l3));
        Outcome::Done(got)
    }

    fn encap_ok(&self, name: &str, l3: &[u8]) -> Vec<u8> {
        match self.encap(l3) {
            Outcome::Done(p) => p,
            Outcome::Passed => panic!("{name}: expected the kernel path to encapsulate"),
        }
    }

    fn decap_ok(&self, name: &str, l3: &[u8]) -> Vec<u8> {
        match self.decap(l3, 0, MAC_UP) {
            Outcome::Done(p) => p,
            Outcome::Passed => panic!("{name}: expected the kernel path to decapsulate"),
        }
    }

    fn passes(&self, name: &str, r: impl FnOnce(&Bed) -> Outcome, why: C) {
        let before = self.counter(why);
        assert_eq!(r(self), Outcome::Passed, "{name}: expected a pass");
        assert_eq!(self.counter(why), before + 1, "{name}: counted as {}", why.label());
    }
}

fn from_aftr(inner: &[u8]) -> Vec<u8> {
    v6(AFTR, B4A, 64, 4, inner)
}

/// A TCP segment (checksum field arbitrary: the clamp updates whatever is
/// there) with `opts` after the 20-byte header and data offset `doff`
/// words (`None`: the header and the options).
fn tcp_opts(v: &V4, flags: u8, opts: &[u8], doff: Option<u8>) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[12] = doff.unwrap_or(((20 + opts.len()) / 4) as u8) << 4;
    t[13] = flags;
    t[16..18].copy_from_slice(&[0x9a, 0xbc]);
    t.extend_from_slice(opts);
    v.build(&t)
}

/// The MSS option value `at` bytes into the TCP header of IPv4 packet `p`.
fn mss_at(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[20 + at], p[21 + at]])
}

#[test]
fn named_cases() {
    lab::need_root!();
    let mut bed = Bed::new(None);
    let b = &bed;
    let out = V4::new(17, HOST, SERVER);

    // IPv4 -> softwire.
    let before = b.counter(C::Encap);
    let got = b.encap_ok("udp", &out.udp(40000, 53, b"query"));
    assert_eq!(b.counter(C::Encap), before + 1);
    assert_eq!(got[6], 4, "IPv4-in-IPv6");
    assert_eq!(got[7], 60, "the configured hop limit less the kernel's forwarding step");
    assert_eq!(&got[8..24], &B4A.octets());
    assert_eq!(&got[24..40], &AFTR.octets());
    b.encap_ok("tcp syn", &V4::new(6, HOST, SERVER).tcp(40000, 80, 0x02, b""));
    b.encap_ok("icmp echo", &V4::new(1, HOST, SERVER).icmp(8, 0, [0, 1, 0, 1], b"ping"));
    let got = b.encap_ok("traffic class from the tos", &V4 { tos: 0xb9, ..out }.udp(1, 2, b"x"));
    assert_eq!((u32::from_be_bytes([got[0], got[1], got[2], got[3]]) >> 20) & 0xff, 0xb9);
    b.encap_ok("an inner fragment goes whole", &V4 { mf: true, ..out }.udp(1, 2, &[1; 64]));
    b.encap_ok("inner ttl 1 (not ours to check)", &V4 { ttl: 1, ..out }.udp(1, 2, b""));
    b.encap_ok("gre", &V4::new(47, HOST, SERVER).build(&[0; 8]));
    b.encap_ok("largest that fits", &out.udp(1, 2, &vec![0; 1500 - 40 - 28]));

    b.passes("over the tunnel mtu", |b| b.encap(&out.udp(1, 2, &vec![0; 1500 - 40 - 27])), C::PassTooBig);
    let mut bad = out.udp(1, 2, b"");
    bad[10] ^= 1;
    b.passes("header checksum", |b| b.encap(&bad), C::PassChecksum);
    b.passes("options", |b| b.encap(&out.build_opts(&[1, 1, 1, 0], &[0; 8])), C::PassOptions);
    let mut short = out.udp(1, 2, b"abc");
    short.pop();
    b.passes("truncated", |b| b.encap(&short), C::PassMalformed);
    b.passes(
        "ipv6 (the engine's lease traffic)",
        |b| {
            let mut frame = [MAC_PEER, MAC_UP].concat();
            frame.extend_from_slice(&[0x86, 0xdd]);
            frame.extend_from_slice(&from_aftr(&out.udp(1, 2, b"")));
            let r = b.kp.test_run_tc(&frame).unwrap();
            assert_eq!((r.action, &r.frame), (tc_action::OK, &frame));
            Outcome::Passed
        },
        C::PassNotIp,
    );

    // Softwire -> IPv4.
    let back = V4::new(17, SERVER, HOST);
    let before = b.counter(C::Decap);
    let got = b.decap_ok("udp", &from_aftr(&back.udp(53, 40000, b"answer")));
    assert_eq!(b.counter(C::Decap), before + 1);
    assert_eq!(got, back.udp(53, 40000, b"answer"), "the inner packet unchanged");
    b.decap_ok("tcp", &from_aftr(&V4::new(6, SERVER, HOST).tcp(80, 40000, 0x12, b"")));
    b.decap_ok("inner fragment (the stack reassembles)", &from_aftr(&V4 { mf: true, ..back }.udp(1, 2, &[3; 40])));
    let ack = from_aftr(&V4::new(6, SERVER, HOST).tcp(80, 40000, 0x10, b""));
    match b.decap(&ack, 100, MAC_UP) {
        Outcome::Done(p) => assert_eq!(p.len(), ack.len() - 40, "Ethernet padding trimmed"),
        Outcome::Passed => panic!("padded ACK not taken"),
    }

    let inner = back.udp(53, 40000, b"");
    b.passes("another source", |b| b.decap(&v6(OTHER, B4A, 64, 4, &inner), 0, MAC_UP), C::PassUnknownAftr);
    b.passes("not to the b4", |b| b.decap(&v6(AFTR, OTHER, 64, 4, &inner), 0, MAC_UP), C::PassNotOurs);
    b.passes("hop limit 1", |b| b.decap(&v6(AFTR, B4A, 1, 4, &inner), 0, MAC_UP), C::PassTtl);
    b.passes(
        "outer fragment",
        |b| b.decap(&v6(AFTR, B4A, 64, 44, &[4, 0, 0, 1, 0, 0, 0, 1]), 0, MAC_UP),
        C::PassFragment,
    );
    b.passes("icmpv6", |b| b.decap(&v6(AFTR, B4A, 64, 58, &[128, 0, 0, 0, 0, 1, 0, 1]), 0, MAC_UP), C::PassIcmp);
    b.passes(
        "encapsulation limit option",
        |b| b.decap(&v6(AFTR, B4A, 64, 60, &[4, 0, 4, 1, 4, 1, 1, 0]), 0, MAC_UP),
        C::PassOptions,
    );
    let mut bad = inner.clone();
    bad[10] ^= 1;
    b.passes("inner checksum", |b| b.decap(&from_aftr(&bad), 0, MAC_UP), C::PassChecksum);
    let mut long = from_aftr(&inner);
    long.push(0);
    long[5] += 1;
    b.passes("trailing bytes after the inner packet", |b| b.decap(&long, 0, MAC_UP), C::PassMalformed);
    b.passes("other host", |b| b.decap(&from_aftr(&inner), 0, [2, 0, 0, 0, 0, 7]), C::PassOtherHost);
    b.passes("multicast", |b| b.decap(&from_aftr(&inner), 0, [0x33, 0x33, 0, 0, 0, 1]), C::PassOtherHost);

    // A DSTM host without a lease: everything to the engine.
    bed.kp.set_aftr(None).unwrap();
    let b = &bed;
    b.passes("no lease, out", |b| b.encap(&out.udp(1, 2, b"")), C::PassDisabled);
    b.passes("no lease, in", |b| b.decap(&from_aftr(&inner), 0, MAC_UP), C::PassDisabled);
    // A lease naming another TEP.
    bed.kp.set_aftr(Some(OTHER)).unwrap();
    bed.b4.set_aftr(OTHER);
    let got = bed.encap_ok("to the new tep", &out.udp(1, 2, b""));
    assert_eq!(&got[24..40], &OTHER.octets());
    bed.passes("from the old aftr", |b| b.decap(&from_aftr(&inner), 0, MAC_UP), C::PassUnknownAftr);
}

#[test]
fn encapsulation_limit_option_as_the_engine_writes_it() {
    lab::need_root!();
    let b = Bed::new(Some(4));
    let got = b.encap_ok("with the limit option", &V4::new(17, HOST, SERVER).udp(1, 2, b"x"));
    assert_eq!(got[6], 60, "Destination Options first");
    assert_eq!(got.len(), 48 + 29);
    b.passes(
        "over the tunnel mtu with the option",
        |b| b.encap(&V4::new(17, HOST, SERVER).udp(1, 2, &vec![0; 1500 - 48 - 27])),
        C::PassTooBig,
    );
}

/// TCP MSS clamping (`mss-clamp`): SYNs both ways lowered to the tunnel's
/// 1420 (1500 - 40 - 20 - 20) byte for byte as the engine does; what the
/// clamp leaves alone encapsulated or decapsulated untouched; SYNs whose
/// options do not parse passed to the engine, which sends them on
/// untouched and counts them.
#[test]
fn mss_clamping_as_the_engine_does() {
    lab::need_root!();
    let b = Bed::new(None);
    let out = V4::new(6, HOST, SERVER);
    let back = V4::new(6, SERVER, HOST);
    let engine = |f: fn(&softwire::stats::Snapshot) -> u64| f(&b.b4.counters().snapshot());

    let (k0, e0) = (b.counter(C::MssClamped), engine(|s| s.mss_clamped));
    let syn = tcp_opts(&out, 0x02, &[2, 4, 0x23, 0x28, 1, 3, 3, 7, 4, 2, 0, 0], None);
    let got = b.encap_ok("syn, mss 9000", &syn);
    assert_eq!(mss_at(&got[40..], 22), 1420);
    assert_eq!(&got[40 + 44..], &syn[44..], "the options after the MSS untouched");
    let got = b.decap_ok("syn-ack, mss 1460", &from_aftr(&tcp_opts(&back, 0x12, &[1, 1, 4, 2, 2, 4, 5, 0xb4], None)));
    assert_eq!(mss_at(&got, 26), 1420);
    let got = b.encap_ok("1421", &tcp_opts(&out, 0x02, &[2, 4, 0x05, 0x8d], None));
    assert_eq!(mss_at(&got[40..], 22), 1420);
    assert_eq!(b.counter(C::MssClamped), k0 + 3, "counted by the kernel path");
    // The engine's model ran on every packet too (the reference output).
    assert_eq!(engine(|s| s.mss_clamped), e0 + 3);

    let same = |name: &str, l3: Vec<u8>, outbound: bool| {
        let k = b.counter(C::MssClamped);
        let got = if outbound { b.encap_ok(name, &l3)[40..].to_vec() } else { b.decap_ok(name, &from_aftr(&l3)) };
        assert_eq!(got, l3, "{name}: untouched");
        assert_eq!(b.counter(C::MssClamped), k, "{name}: not counted as clamped");
    };
    same("exactly 1420", tcp_opts(&out, 0x02, &[2, 4, 0x05, 0x8c], None), true);
    same("smaller", tcp_opts(&back, 0x12, &[2, 4, 0x02, 0x18], None), false);
    same("no mss option", tcp_opts(&out, 0x02, &[1, 1, 4, 2], None), true);
    same("no options", tcp_opts(&back, 0x12, &[], None), false);
    same("not a syn", tcp_opts(&out, 0x10, &[2, 4, 0x23, 0x28], None), true);
    same("after the end of list", tcp_opts(&out, 0x02, &[0, 0, 0, 0, 2, 4, 0x23, 0x28], None), true);
    same("a fragment", V4 { mf: true, ..out }.build(&tcp_opts(&out, 0x02, &[2, 4, 0x23, 0x28], None)[20..]), true);

    let e1 = engine(|s| s.mss_unparsed);
    let bad: [(&str, Vec<u8>); 6] = [
        ("option length 0", tcp_opts(&out, 0x02, &[3, 0, 0, 0, 2, 4, 0x23, 0x28], None)),
        ("option length 1", tcp_opts(&out, 0x02, &[3, 1, 0, 0, 2, 4, 0x23, 0x28], None)),
        ("option past the header", tcp_opts(&out, 0x02, &[1, 1, 1, 8, 2, 4, 0x23, 0x28], None)),
        ("mss of length 3", tcp_opts(&out, 0x02, &[2, 3, 0x23, 0x28], None)),
        ("data offset past the packet", tcp_opts(&out, 0x02, &[2, 4, 0x23, 0x28], Some(7))),
        ("data offset below 5", tcp_opts(&out, 0x02, &[2, 4, 0x23, 0x28], Some(4))),
    ];
    for (name, l3) in &bad {
        b.passes(name, |b| b.encap(l3), C::PassTcpOptions);
        // The engine sends it on untouched.
        assert_eq!(b.engine(l3).map(|p| p[40..].to_vec()).as_ref(), Some(l3), "{name}");
        b.passes(name, |b| b.decap(&from_aftr(l3), 0, MAC_UP), C::PassTcpOptions);
    }
    // The engine saw each twice: the model of the tc run, and the check above.
    assert_eq!(engine(|s| s.mss_unparsed), e1 + 2 * bad.len() as u64);

    // With the limit option, 8 bytes less; with mss-clamp off, nothing.
    let b = Bed::with(Some(4), true, None);
    let got = b.encap_ok("limit option", &tcp_opts(&out, 0x02, &[2, 4, 0x23, 0x28], None));
    assert_eq!(mss_at(&got[48..], 22), 1412);
    let b = Bed::with(None, false, None);
    let syn = tcp_opts(&out, 0x02, &[2, 4, 0x23, 0x28], None);
    assert_eq!(&b.encap_ok("clamp off", &syn)[40..], &syn[..]);
    let bad = tcp_opts(&out, 0x02, &[3, 0, 0, 0], None);
    assert_eq!(&b.encap_ok("clamp off, options not looked at", &bad)[40..], &bad[..]);
    assert_eq!(b.counter(C::MssClamped), 0);
}

/// Generated TCP segments with options, SYN or not, both ways: random
/// option bytes, MSS values around the clamp, data offsets, mutations.
#[test]
fn generated_syns_never_differ() {
    lab::need_root!();
    let b = Bed::new(None);
    let seg = (
        any::<bool>(),
        prop_oneof![Just(0x02u8), Just(0x12u8), Just(0x10u8), any::<u8>()],
        proptest::collection::vec(
            prop_oneof![
                (1400u16..1500).prop_map(|m| vec![2u8, 4, (m >> 8) as u8, m as u8]),
                any::<u16>().prop_map(|m| vec![2u8, 4, (m >> 8) as u8, m as u8]),
                Just(vec![1u8]),
                Just(vec![0u8]),
                Just(vec![4u8, 2]),
                Just(vec![3u8, 3, 7]),
                proptest::collection::vec(any::<u8>(), 1..6),
            ],
            0..8,
        ),
        proptest::option::of(0u8..16),
        proptest::option::of((any::<usize>(), any::<u8>())),
    );
    let mut runner = TestRunner::new(PtConfig { cases: 2000, ..PtConfig::default() });
    let (done, clamped) = (core::cell::Cell::new(0u32), core::cell::Cell::new(0u64));
    let k0 = b.counter(C::MssClamped);
    runner
        .run(&seg, |(outbound, flags, parts, doff, mutate)| {
            let mut opts: Vec<u8> = parts.concat();
            opts.truncate(40);
            while !opts.len().is_multiple_of(4) {
                opts.push(1);
            }
            let v = if outbound { V4::new(6, HOST, SERVER) } else { V4::new(6, SERVER, HOST) };
            let mut l3 = tcp_opts(&v, flags, &opts, doff);
            if let Some((at, x)) = mutate {
                // Mutate the TCP header or its options (the IPv4 header is
                // the other test's).
                let i = 20 + at % (l3.len() - 20);
                l3[i] ^= x;
            }
            let r = if outbound { b.encap(&l3) } else { b.decap(&from_aftr(&l3), 0, MAC_UP) };
            if matches!(r, Outcome::Done(_)) {
                done.set(done.get() + 1);
            }
            clamped.set(b.counter(C::MssClamped) - k0);
            Ok(())
        })
        .unwrap();
    assert!(done.get() > 1000, "only {} of 2000 generated segments took the kernel path", done.get());
    assert!(clamped.get() > 100, "only {} generated SYNs were clamped", clamped.get());
}

/// Generated packets, valid and mutated, both directions: the kernel path
/// never sends anything the engine would not send byte for byte.
#[test]
fn generated_packets_never_differ() {
    lab::need_root!();
    let b = Bed::new(None);
    let pkt = (
        any::<bool>(),
        prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(47u8)],
        any::<u16>(),
        any::<u16>(),
        any::<u8>(),
        prop_oneof![Just(64u8), Just(1u8), Just(2u8), any::<u8>()],
        any::<bool>(),
        prop_oneof![0usize..200, 1400usize..1480],
        proptest::option::of((any::<usize>(), any::<u8>())),
        0usize..3,
    );
    let mut runner = TestRunner::new(PtConfig { cases: 2000, ..PtConfig::default() });
    let (done, total) = (core::cell::Cell::new(0u32), core::cell::Cell::new(0u32));
    runner
        .run(&pkt, |(outbound, proto, sp, dp, tos, ttl, df, len, mutate, src)| {
            let payload = vec![0x3c; len];
            let v = if outbound {
                V4 { tos, ttl, df, ..V4::new(proto, HOST, SERVER) }
            } else {
                V4 { tos, ttl, df, ..V4::new(proto, SERVER, HOST) }
            };
            let inner = match proto {
                6 => v.tcp(sp, dp, 0x18, &payload),
                17 => v.udp(sp, dp, &payload),
                1 => v.icmp(if sp & 1 == 0 { 8 } else { 0 }, 0, [(dp >> 8) as u8, dp as u8, 0, 1], &payload),
                _ => v.build(&payload),
            };
            let mut l3 = if outbound { inner } else { v6([AFTR, OTHER, B4A][src], B4A, ttl, 4, &inner) };
            if let Some((at, x)) = mutate {
                let i = at % l3.len();
                l3[i] ^= x;
            }
            total.set(total.get() + 1);
            let r = if outbound { b.encap(&l3) } else { b.decap(&l3, 0, MAC_UP) };
            if matches!(r, Outcome::Done(_)) {
                done.set(done.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    let (done, total) = (done.get(), total.get());
    assert!(done * 5 > total, "only {done} of {total} generated packets took the kernel path");
}

/// The host-integrated lwB4: the host's own packets (the binding's
/// address, the ports of the set in the host's range: the range's edges,
/// TCP, UDP, ICMP echo) both ways in the kernel, byte for byte as the
/// engine sends them untranslated; the NAPT's and what needs the engine
/// passed and counted.
#[test]
fn lwb4_host_ports() {
    lab::need_root!();
    let b = Bed::lw();
    let out = V4::new(17, PUB, SERVER);
    let back = V4::new(17, SERVER, PUB);
    let before = b.counter(C::Encap);
    for port in [HOST_FIRST, HOST_FIRST + 255, 40 * 1024 + 300, HOST_LAST] {
        let l3 = out.udp(port, 53, b"query");
        let got = b.encap_ok(&format!("udp from {port}"), &l3);
        assert_eq!(&got[40..], &l3[..], "untranslated");
        let l3 = back.udp(53, port, b"answer");
        assert_eq!(b.decap_ok(&format!("udp to {port}"), &from_aftr(&l3)), l3, "untranslated");
    }
    assert_eq!(b.counter(C::Encap), before + 4);
    let syn = tcp_opts(&V4::new(6, PUB, SERVER), 0x02, &[2, 4, 0x23, 0x28], None);
    let mut syn = syn;
    syn[20..22].copy_from_slice(&HOST_LAST.to_be_bytes());
    assert_eq!(mss_at(&b.encap_ok("tcp syn, clamped", &syn)[40..], 22), 1420);
    b.decap_ok("tcp syn-ack", &from_aftr(&V4::new(6, SERVER, PUB).tcp(80, HOST_FIRST, 0x12, b"")));
    let echo = |ty, id: u16, v: &V4| v.icmp(ty, 0, [(id >> 8) as u8, id as u8, 0, 7], b"ping");
    b.encap_ok("echo request", &echo(8, HOST_FIRST, &V4::new(1, PUB, SERVER)));
    b.decap_ok("echo reply", &from_aftr(&echo(0, HOST_FIRST, &V4::new(1, SERVER, PUB))));
    b.decap_ok("echo request to the host", &from_aftr(&echo(8, HOST_LAST, &V4::new(1, SERVER, PUB))));
    b.encap_ok("its reply", &echo(0, HOST_LAST, &V4::new(1, PUB, SERVER)));

    // The NAPT's: outside the host's range, in the range but not the set's,
    // another source or destination (the LAN), and the edges' neighbours.
    for port in [NAPT_PORT, HOST_FIRST - 1, HOST_FIRST + 256, HOST_LAST + 1, 1024 + 256, 80] {
        b.passes(&format!("udp from {port}"), |b| b.encap(&out.udp(port, 53, b"")), C::PassNapt);
        b.passes(&format!("udp to {port}"), |b| b.decap(&from_aftr(&back.udp(53, port, b"")), 0, MAC_UP), C::PassNapt);
    }
    b.passes("echo, the NAPT's id", |b| b.encap(&echo(8, NAPT_PORT, &V4::new(1, PUB, SERVER))), C::PassNapt);
    b.passes("from the lan", |b| b.encap(&V4::new(17, LAN, SERVER).udp(HOST_FIRST, 53, b"")), C::PassNapt);
    b.passes(
        "to the lan",
        |b| b.decap(&from_aftr(&V4::new(17, SERVER, LAN).udp(53, HOST_FIRST, b"")), 0, MAC_UP),
        C::PassNapt,
    );
    // The LAN's flow from a host port is translated into the NAPT's ports.
    let lan = b.engine(&V4::new(17, LAN, SERVER).udp(HOST_FIRST, 53, b"")).expect("the NAPT sends it");
    let mapped = u16::from_be_bytes([lan[60], lan[61]]);
    assert_eq!(&lan[52..56], &PUB.octets());
    assert!(lw_napt().map.allowed(mapped, 1) && !lw_napt().host_owns(mapped), "mapped to {mapped}");

    // The host's address, but for the engine.
    b.passes("a fragment", |b| b.encap(&V4 { mf: true, ..out }.udp(HOST_FIRST, 53, &[1; 32])), C::PassHostOther);
    b.passes("gre", |b| b.encap(&V4::new(47, PUB, SERVER).build(&[0; 8])), C::PassHostOther);
    b.passes("a truncated udp header", |b| b.encap(&V4::new(17, PUB, SERVER).build(&[0x81, 0, 0])), C::PassHostOther);
    b.passes(
        "a truncated tcp header",
        |b| b.encap(&V4::new(6, PUB, SERVER).build(&[0x81, 0, 0, 53, 0, 0, 0, 0])),
        C::PassHostOther,
    );
    // ICMP errors about the host's packets: the engine relays them untranslated.
    let quoted = back.udp(53, HOST_FIRST, b"");
    let err_out = V4::new(1, PUB, SERVER).icmp(3, 3, [0; 4], &quoted[..28]);
    b.passes("port unreachable from the host", |b| b.encap(&err_out), C::PassHostOther);
    assert_eq!(b.engine(&err_out).map(|p| p[40..].to_vec()), Some(err_out.clone()), "relayed untranslated");
    let quoted = out.udp(HOST_LAST, 53, b"");
    let err_in = V4::new(1, SERVER, PUB).icmp(3, 3, [0; 4], &quoted[..28]);
    b.passes("port unreachable to the host", |b| b.decap(&from_aftr(&err_in), 0, MAC_UP), C::PassHostOther);
    let mut fwd = from_aftr(&err_in);
    assert!(kernel_forward(&mut fwd));
    assert_eq!(b.engine(&fwd), Some(err_in), "relayed untranslated");
}

/// Generated and mutated packets for the host-integrated lwB4, ports
/// around the edges of the host's range and of the set's runs, sources
/// and destinations the binding's, the LAN's or another: the kernel path
/// never sends anything the engine would not send byte for byte, and
/// takes the host's own.
#[test]
fn lwb4_generated_packets_never_differ() {
    lab::need_root!();
    let b = Bed::lw();
    let port = prop_oneof![
        prop_oneof![
            Just(HOST_FIRST),
            Just(HOST_FIRST - 1),
            Just(HOST_FIRST + 255),
            Just(HOST_FIRST + 256),
            Just(HOST_LAST),
            Just(HOST_LAST + 1),
            Just(NAPT_PORT),
        ],
        // Anywhere in the host's range, in the set or not.
        (32u16..64, 0u16..1024).prop_map(|(a, m)| a * 1024 + m),
        any::<u16>(),
    ];
    let pkt = (
        any::<bool>(),
        prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(47u8)],
        port,
        any::<u16>(),
        prop_oneof![3 => Just(PUB), 1 => Just(LAN), 1 => Just(Ipv4Addr::new(203, 0, 113, 2))],
        prop_oneof![Just(0u8), Just(8u8), Just(3u8), any::<u8>()],
        prop_oneof![0usize..200, 1400usize..1480],
        proptest::option::weighted(0.3, (any::<usize>(), any::<u8>())),
    );
    let mut runner = TestRunner::new(PtConfig { cases: 2000, ..PtConfig::default() });
    let (done, total) = (core::cell::Cell::new(0u32), core::cell::Cell::new(0u32));
    runner
        .run(&pkt, |(outbound, proto, hp, other, addr, icmp_type, len, mutate)| {
            let payload = vec![0x5a; len];
            let v = if outbound { V4::new(proto, addr, SERVER) } else { V4::new(proto, SERVER, addr) };
            let (sp, dp) = if outbound { (hp, other) } else { (other, hp) };
            let inner = match proto {
                6 => v.tcp(sp, dp, 0x18, &payload),
                17 => v.udp(sp, dp, &payload),
                1 => v.icmp(icmp_type, 0, [(hp >> 8) as u8, hp as u8, 0, 1], &payload),
                _ => v.build(&payload),
            };
            let mut l3 = if outbound { inner } else { from_aftr(&inner) };
            if let Some((at, x)) = mutate {
                let i = at % l3.len();
                l3[i] ^= x;
            }
            total.set(total.get() + 1);
            let r = if outbound { b.encap(&l3) } else { b.decap(&l3, 0, MAC_UP) };
            if matches!(r, Outcome::Done(_)) {
                done.set(done.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    let (done, total) = (done.get(), total.get());
    assert!(done * 20 > total, "only {done} of {total} generated packets took the kernel path");
    assert!(b.counter(C::PassNapt) * 10 > u64::from(total), "the NAPT's packets were generated and passed");
}
