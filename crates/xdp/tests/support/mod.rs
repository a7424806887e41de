//! Test support for the XDP differential tests and the cost bench: a
//! uniquely named network namespace the calling thread enters, with two
//! veth pairs (an IPv4 side `x4` and an IPv6 side `x6`), default routes
//! through a static (permanent) neighbour on each side and forwarding on,
//! so every `bpf_fib_lookup` of a translated packet succeeds; the loaded
//! [`FastPath`]; and the comparison of one BPF_PROG_TEST_RUN against the
//! Rust core. The namespace is removed when [`Net`] drops (also on panic).
#![allow(dead_code)]

use lab::netns::Netns;
use xdp::types::progs;
use xdp::types::Nexthop;
use xdp::{action, FastPath, FibLookup, Limits, Mode};

/// MAC addresses of the test network.
pub const MAC_X4: [u8; 6] = [0x02, 0, 0, 0, 0x04, 0x01];
pub const MAC_GW4: [u8; 6] = [0x02, 0, 0, 0, 0x04, 0x02];
pub const MAC_X6: [u8; 6] = [0x02, 0, 0, 0, 0x06, 0x01];
pub const MAC_GW6: [u8; 6] = [0x02, 0, 0, 0, 0x06, 0x02];
/// Source MAC of the frames fed in.
pub const MAC_PEER: [u8; 6] = [0x02, 0, 0, 0, 0x99, 0x99];

/// The namespace, its interfaces and the loaded fast path.
pub struct Net {
    // Field order: the fast path is unloaded before the namespace goes.
    pub fp: FastPath,
    pub if4: u32,
    pub if6: u32,
    pub ns: Netns,
}

impl Net {
    /// Build the namespace, enter it on this thread and load the fast path.
    /// Panics with the reason when that is impossible: these tests must
    /// not pass without BPF.
    pub fn new(prefix: &str) -> Net {
        let ns = Netns::unique(prefix).expect("create a network namespace");
        let cmds: &[&[&str]] = &[
            &["link", "set", "lo", "up"],
            &["link", "add", "x4", "address", "02:00:00:00:04:01", "type", "veth", "peer", "name", "x4p"],
            &["link", "add", "x6", "address", "02:00:00:00:06:01", "type", "veth", "peer", "name", "x6p"],
            &["link", "add", "xa", "type", "veth", "peer", "name", "xb"],
            &["link", "set", "xa", "up"],
            &["link", "set", "xb", "up"],
            &["link", "set", "x4", "up"],
            &["link", "set", "x4p", "up"],
            &["link", "set", "x6", "up"],
            &["link", "set", "x6p", "up"],
            &["addr", "add", "100.64.4.1/24", "dev", "x4"],
            &["-6", "addr", "add", "fd00:6::1/64", "dev", "x6", "nodad"],
            &["neigh", "add", "100.64.4.2", "lladdr", "02:00:00:00:04:02", "dev", "x4", "nud", "permanent"],
            &["-6", "neigh", "add", "fd00:6::2", "lladdr", "02:00:00:00:06:02", "dev", "x6", "nud", "permanent"],
            &["route", "add", "default", "via", "100.64.4.2", "dev", "x4"],
            &["-6", "route", "add", "default", "via", "fd00:6::2", "dev", "x6"],
        ];
        for c in cmds {
            ns.ip(c).unwrap_or_else(|e| panic!("ip {}: {e:#}", c.join(" ")));
        }
        ns.sysctl("net.ipv4.ip_forward", "1").expect("ip_forward");
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").expect("ipv6 forwarding");
        ns.enter_thread().expect("enter the namespace");
        let if4 = xdp::sys::if_index("x4").expect("x4 ifindex");
        let if6 = xdp::sys::if_index("x6").expect("x6 ifindex");
        let mut fp = FastPath::load(Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        fp.allow_egress(if4).expect("tx_ports x4");
        fp.allow_egress(if6).expect("tx_ports x6");
        // Every BPF_PROG_TEST_RUN of an XDP program adds it to the kernel's
        // XDP dispatcher and removes it again, waiting for an RCU grace
        // period each time (milliseconds) unless the program is already
        // there: keep each one attached (native, through bpf_link) to an
        // idle interface. This also exercises attach and detach.
        for (iface, prog) in [("x4p", progs::SIIT), ("x6p", progs::NAT64), ("xa", progs::TRGW), ("xb", progs::GATE)] {
            let a = fp.attach_program(iface, Mode::Native, prog).unwrap_or_else(|e| panic!("{e}"));
            let a = a.expect("attached");
            assert_eq!((a.mode, a.program), (Mode::Native, prog), "native XDP on veth");
        }
        Net { fp, if4, if6, ns }
    }

    /// The interface an L3 packet arrives on: IPv4 on x4, IPv6 on x6.
    pub fn ingress(&self, l3: &[u8]) -> u32 {
        if l3.first().map(|b| b >> 4) == Some(6) {
            self.if6
        } else {
            self.if4
        }
    }
}

/// How the fast path finds the egress in a test or bench run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// `bpf_fib_lookup` called this way, behind a FIB cache of this many ms (0: none).
    Fib(FibLookup, u32),
    /// The test network's two default routes mirrored into routes4/routes6
    /// and nexthops (what the daemon would mirror from the kernel).
    Routes,
}

/// Configure forwarding as `how` says (replacing the previous setting).
pub fn set_forwarding(net: &mut Net, how: &Fwd) {
    let fp = &mut net.fp;
    let _ = fp.route4_remove("0.0.0.0/0".parse().unwrap());
    let _ = fp.route6_remove("::/0".parse().unwrap());
    match *how {
        Fwd::Fib(l, ms) => {
            fp.set_fib_lookup(l).unwrap();
            fp.set_fib_cache(ms).unwrap();
        }
        Fwd::Routes => {
            fp.set_fib_lookup(FibLookup::Rules).unwrap();
            fp.set_fib_cache(0).unwrap();
            fp.nexthop_set(0, Nexthop { ifindex: net.if4, mtu: 1500, dmac: MAC_GW4, smac: MAC_X4, pad: [0; 2] })
                .unwrap();
            fp.nexthop_set(1, Nexthop { ifindex: net.if6, mtu: 1500, dmac: MAC_GW6, smac: MAC_X6, pad: [0; 2] })
                .unwrap();
            fp.route4_insert("0.0.0.0/0".parse().unwrap(), 0).unwrap();
            fp.route6_insert("::/0".parse().unwrap(), 1).unwrap();
        }
    }
}

/// An Ethernet frame around `l3` as a peer sends it to our `x4`/`x6`.
pub fn frame(l3: &[u8]) -> Vec<u8> {
    let v6 = l3.first().map(|b| b >> 4) == Some(6);
    let mut f = Vec::with_capacity(14 + l3.len());
    f.extend_from_slice(if v6 { &MAC_X6 } else { &MAC_X4 });
    f.extend_from_slice(&MAC_PEER);
    f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    f.extend_from_slice(l3);
    f
}

/// What the fast path did with one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// XDP_PASS with the frame unchanged.
    Passed,
    /// Forwarded: this L3 packet (Ethernet header already checked).
    Forwarded(Vec<u8>),
}

/// Run `prog` over `frame` and check the result's form: a pass leaves the
/// frame byte for byte as it was; a forward (XDP_TX back out of the
/// ingress interface, XDP_REDIRECT out of the other) carries the FIB's
/// MAC addresses and the right EtherType. Panics otherwise.
pub fn run(net: &Net, prog: &str, frame: &[u8], ingress: u32) -> Outcome {
    let r = net.fp.test_run(prog, frame, ingress, 1).unwrap_or_else(|e| panic!("{e}"));
    match r.action {
        action::PASS => {
            assert_eq!(hex(&r.frame), hex(frame), "XDP_PASS must leave the frame unchanged");
            Outcome::Passed
        }
        action::TX | action::REDIRECT => {
            assert!(r.frame.len() >= 14 + 20, "forwarded frame too short: {}", hex(&r.frame));
            let l3 = r.frame[14..].to_vec();
            let v6 = l3[0] >> 4 == 6;
            let (dmac, smac, et, egress) =
                if v6 { (MAC_GW6, MAC_X6, [0x86, 0xdd], net.if6) } else { (MAC_GW4, MAC_X4, [0x08, 0x00], net.if4) };
            assert_eq!(r.frame[0..6], dmac, "destination MAC: the FIB's neighbour");
            assert_eq!(r.frame[6..12], smac, "source MAC: the egress interface");
            assert_eq!(r.frame[12..14], et, "EtherType");
            let want = if egress == ingress { action::TX } else { action::REDIRECT };
            assert_eq!(r.action, want, "XDP_TX when egress is the ingress interface, else XDP_REDIRECT");
            Outcome::Forwarded(l3)
        }
        a => panic!("unexpected XDP action {a} for frame {}", hex(frame)),
    }
}

/// Hex dump for assertion messages.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The IPv4 Identification the fast path chose, for seeding the core's
/// generator (RFC 7915 §5.1 leaves the value to the translator): the
/// output's own value when it is IPv4 with DF clear, else 0.
pub fn ident_of(l3: &[u8]) -> u16 {
    if l3.len() >= 20 && l3[0] >> 4 == 4 && l3[6] & 0x40 == 0 {
        u16::from_be_bytes([l3[4], l3[5]])
    } else {
        0
    }
}
