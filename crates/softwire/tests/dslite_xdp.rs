//! The DS-Lite AFTR's XDP fast path against the AFTR engine: differential
//! tests through BPF_PROG_TEST_RUN (root; they fail, never skip, without
//! BPF), as `lwaftr_xdp.rs` does for the lwAFTR.
//!
//! The engine (`Aftr`) is driven as the runner drives it: each packet it
//! handles is followed by `AftrFast::sync`, so its NAT44's carried
//! mappings reach the session maps before the packet's output would be
//! written. Each frame then goes through `xdp_softwire` and through the
//! model of the slow path (the engine between the kernel's forwarding
//! steps): a forwarded frame must be byte-identical to what that path
//! sends, a passed frame untouched and counted by its reason.

mod xdp_support;

use core::net::{Ipv4Addr, Ipv6Addr};
use nat64::config::Protocol;
use nat64::tcp::TcpState;
use proptest::prelude::*;
use softwire::aftr::{Aftr, AftrConfig};
use softwire::endpoint::EndpointConfig;
use softwire::fast::{AftrFast, BlockPorts, BlockShared};
use softwire::nat44::{Inside, Nat44Config, Outside, PoolPorts};
use softwire::{Action, Reason};
use std::sync::Arc;
use xdp::softwire::{SoftwireCounter as C, SoftwireFastPath};
use xdp_support::*;
use xlat::Out;

const S: u64 = 1_000_000_000;
/// The engine's clock for the differential checks.
const NOW: u64 = S;
const IN1: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 77);
const OUTSIDE_POOL: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const POOL: (Ipv4Addr, u8) = (Ipv4Addr::new(192, 0, 2, 0), 28);

fn aftr_config(quota: u32, max_mappings: usize) -> AftrConfig {
    aftr_config_masked(quota, max_mappings, 128)
}

/// [`aftr_config`] with subscribers of `mask` bits (RFC 7785).
fn aftr_config_masked(quota: u32, max_mappings: usize, mask: u8) -> AftrConfig {
    let mut endpoint = EndpointConfig::new(LOCAL, Ipv4Addr::new(192, 0, 0, 1));
    endpoint.hop_limit = 61;
    AftrConfig {
        endpoint,
        b4_prefixes: vec!["2001:db8:1::/48".parse().unwrap(), "2001:db8:2::/48".parse().unwrap()],
        // Most cases are about one B4's quota and blocks: each B4 address
        // its own subscriber (B4_1 and B4_2 share a /64) unless asked.
        nat: Nat44Config {
            max_ports_per_subscriber: quota,
            max_mappings,
            subscriber_mask: mask,
            log_mappings: false,
            ..Default::default()
        },
        hairpinning: true,
        icmpv6_errors: true,
    }
}

fn pool4() -> Vec<nat64::Pool4Entry> {
    vec![nat64::Pool4Entry {
        prefix: format!("{}/{}", POOL.0, POOL.1).parse().unwrap(),
        ports: (1024, 65535),
        protocols: Protocol::ALL.to_vec(),
    }]
}

/// The namespace, the AFTR engine and its loaded, mirrored fast path.
struct DsBed {
    // Field order: the fast path goes before the namespace.
    fast: AftrFast,
    aftr: Aftr,
    if4: u32,
    if6: u32,
    _ns: lab::netns::Netns,
}

impl DsBed {
    /// B4s from 2001:db8:1::/48 and 2001:db8:2::/48 (B4_1, B4_2, B4_L;
    /// not B4_X), `quota` ports each, maps for `max_sessions`.
    fn new(quota: u32, max_sessions: u32) -> DsBed {
        let (ns, if4, if6) = sides();
        let aftr = Aftr::new(aftr_config(quota, 1 << 20), Box::new(PoolPorts::new(pool4(), 1024)));
        let mut fast = AftrFast::load(&aftr, &[POOL], max_sessions).unwrap_or_else(|e| panic!("{e}"));
        prepare(fast.fast_path_mut(), if4, if6);
        DsBed { fast, aftr, if4, if6, _ns: ns }
    }

    /// The runner's step: the kernel forwards `l3` into the TUN device,
    /// the engine handles it at `now`, the fast path learns what changed.
    fn engine_at(&mut self, l3: &[u8], now: u64) -> Action {
        let mut p = l3.to_vec();
        assert!(kernel_forward(&mut p), "the kernel would not forward it");
        let a = self.aftr.process(&p, now, &mut Out::new());
        self.fast.sync(&self.aftr);
        a
    }

    fn engine(&mut self, l3: &[u8]) -> Action {
        self.engine_at(l3, NOW)
    }

    /// The pool transport address of (b4, proto, addr, port).
    fn outside(&self, sub: Ipv6Addr, proto: Protocol, addr: Ipv4Addr, port: u16) -> Outside {
        self.aftr.nat().lookup_in(&Inside { sub, proto, addr, port }).expect("a mapping")
    }

    fn sessions(&self) -> usize {
        self.fast.fast_path().sessions()
    }
}

impl Differential for DsBed {
    fn fast_path(&self) -> &SoftwireFastPath {
        self.fast.fast_path()
    }

    fn ifs(&self) -> (u32, u32) {
        (self.if4, self.if6)
    }

    fn slow(&self, l3: &[u8]) -> Option<Vec<u8>> {
        slow_path(l3, |p, out| self.aftr.process(p, NOW, out))
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[test]
fn named_cases_and_mirroring() {
    let mut b = DsBed::new(8, 64);

    // UDP: mirrored when the mapping is created, both directions fast.
    let up = V4::new(17, IN1, HOST);
    let first = sw(B4_1, &up.udp(5000, 53, b"query"));
    b.passes("udp: a new flow", &first, C::PassNoSession);
    assert_eq!(b.engine(&first), Action::Emit);
    assert_eq!(b.sessions(), 1, "mirrored at creation");
    let o = b.outside(B4_1, Protocol::Udp, IN1, 5000);
    let before = b.counter(C::Decap);
    let got = b.fast_ok("udp: the flow's next packet", &first);
    assert_eq!(b.counter(C::Decap), before + 1);
    assert_eq!((&got[12..16], be16(&got[20..])), (&o.addr.octets()[..], o.port), "source: the pool address and port");
    let down = V4::new(17, HOST, o.addr);
    let before = b.counter(C::Encap);
    let got = b.fast_ok("udp: the reply", &down.udp(53, o.port, b"answer"));
    assert_eq!(b.counter(C::Encap), before + 1);
    assert_eq!(&got[24..40], &B4_1.octets(), "to the B4 of the mapping");
    assert_eq!(be16(&got[40 + 22..]), 5000, "destination port: the inside one");
    // Endpoint-independent filtering: the engine lets any remote use a
    // mapping, so the fast path does too, byte for byte.
    b.fast_ok("udp: another remote", &V4::new(17, OTHER, o.addr).udp(9999, o.port, b"x"));
    let mut zero = up.udp(5000, 53, b"no checksum");
    zero[26..28].copy_from_slice(&[0, 0]);
    let got = b.fast_ok("udp: a zero checksum stays zero", &sw(B4_1, &zero));
    assert_eq!(&got[26..28], &[0, 0]);
    b.fast_ok("udp: tos kept, df clear", &sw(B4_1, &V4 { tos: 0xb8, df: false, ..up }.udp(5000, 53, &[7; 300])));

    // TCP: mirrored half-open when the B4's SYN creates the mapping,
    // before the SYN is written: only the outside SYN+ACK is carried.
    let t = V4::new(6, IN1, HOST);
    let syn = sw(B4_1, &t.tcp(40000, 80, 0x02, b""));
    b.passes("tcp: the syn", &syn, C::PassNoSession);
    assert_eq!(b.engine(&syn), Action::Emit);
    assert_eq!(b.sessions(), 2, "half-open at creation");
    let ot = b.outside(B4_1, Protocol::Tcp, IN1, 40000);
    let back = V4::new(6, HOST, ot.addr);
    let synack = back.tcp(80, ot.port, 0x12, b"");
    let ack = sw(B4_1, &t.tcp(40000, 80, 0x10, b""));
    b.passes("tcp half-open: the b4's ack before the syn-ack", &ack, C::PassHalfOpen);
    b.passes("tcp half-open: data from outside", &back.tcp(80, ot.port, 0x18, b"early"), C::PassHalfOpen);
    b.passes("tcp half-open: a plain syn from outside", &back.tcp(80, ot.port, 0x02, b""), C::PassTcpControl);
    b.passes("tcp half-open: syn+ack+rst", &back.tcp(80, ot.port, 0x16, b""), C::PassTcpControl);
    b.passes("tcp half-open: syn+ack+fin", &back.tcp(80, ot.port, 0x13, b""), C::PassTcpControl);
    b.passes("tcp half-open: a retransmitted syn", &syn, C::PassTcpControl);
    assert_eq!(state(&b.aftr, B4_1, 40000), Some(TcpState::V6Init), "passed packets left V6 INIT as it was");
    // The SYN-ACK: byte for byte the engine's (the differential check runs
    // it through the engine too, which reads the fast path's record first).
    let before = b.counter(C::SynAck);
    b.fast_ok("tcp: the syn-ack", &synack);
    assert_eq!(b.counter(C::SynAck), before + 1);
    assert_eq!(state(&b.aftr, B4_1, 40000), Some(TcpState::Established));
    b.fast.sync(&b.aftr);
    assert_eq!(b.sessions(), 2, "carried in full now, the same session");
    b.fast_ok("tcp: the handshake's ack", &ack);
    b.fast_ok("tcp: data out", &sw(B4_1, &t.tcp(40000, 80, 0x18, b"GET /")));
    let got = b.fast_ok("tcp: data in", &back.tcp(80, ot.port, 0x18, b"200 OK"));
    assert_eq!(be16(&got[40 + 22..]), 40000);
    // A TCP ACK padded by Ethernet: trimmed, then encapsulated.
    let pure = back.tcp(80, ot.port, 0x10, b"");
    match b.diff(&pure, 60) {
        Outcome::Forwarded(p) => assert_eq!(p.len(), 40 + pure.len()),
        Outcome::Passed => panic!("padded ACK not taken"),
    }
    let fin = sw(B4_1, &t.tcp(40000, 80, 0x11, b""));
    b.passes("tcp: fin", &fin, C::PassTcpControl);
    b.passes("tcp: rst from outside", &back.tcp(80, ot.port, 0x04, b""), C::PassTcpControl);
    b.passes("tcp: a retransmitted syn-ack", &synack, C::PassTcpControl);
    assert_eq!(b.engine(&fin), Action::Emit);
    assert_eq!(b.sessions(), 2, "V6 FIN RCV: still carried");
    b.fast_ok("tcp: after the fin", &ack);

    // ICMP echo: the identifier is the port.
    let ping = sw(B4_1, &V4::new(1, IN1, HOST).icmp(8, 0, [0, 77, 0, 1], b"ping"));
    b.passes("echo: a new identifier", &ping, C::PassNoSession);
    assert_eq!(b.engine(&ping), Action::Emit);
    let oi = b.outside(B4_1, Protocol::Icmp, IN1, 77);
    b.fast_ok("echo request", &ping);
    let pong = V4::new(1, HOST, oi.addr).icmp(0, 0, [(oi.port >> 8) as u8, oi.port as u8, 0, 1], b"pong");
    b.fast_ok("echo reply", &pong);

    // What the slow path must do, passed and counted.
    let unknown = sw(B4_X, &up.udp(5000, 53, b""));
    b.passes("a B4 outside b4-prefixes", &unknown, C::PassNoSession);
    assert_eq!(b.engine(&unknown), Action::Drop(Reason::UnknownSoftwire));
    b.passes("the same inside from another B4", &sw(B4_2, &up.udp(5000, 53, b"")), C::PassNoSession);
    b.passes("another inside port", &sw(B4_1, &up.udp(5001, 53, b"")), C::PassNoSession);
    b.passes("a pool port without a session", &down.udp(53, o.port ^ 1, b""), C::PassNoSession);
    b.passes(
        "the session's port, another protocol",
        &V4::new(6, HOST, o.addr).tcp(53, o.port, 0x10, b""),
        C::PassNoSession,
    );
    b.passes("not a pool address", &V4::new(17, HOST, OUTSIDE_POOL).udp(53, o.port, b""), C::PassNotOurs);
    b.passes("hairpin", &sw(B4_1, &V4::new(17, IN1, o.addr).udp(5000, o.port, b"")), C::PassHairpin);
    b.passes("inner ttl 1", &sw(B4_1, &V4 { ttl: 1, ..up }.udp(5000, 53, b"")), C::PassTtl);
    b.passes("outer hop limit 1", &v6(B4_1, LOCAL, 1, 4, &up.udp(5000, 53, b"")), C::PassTtl);
    b.passes("ttl 1 from outside", &V4 { ttl: 1, ..down }.udp(53, o.port, b""), C::PassTtl);
    b.passes("inner fragment", &sw(B4_1, &V4 { mf: true, ..up }.udp(5000, 53, &[1; 64])), C::PassFragment);
    b.passes("fragment from outside", &V4 { mf: true, ..down }.udp(53, o.port, &[0; 64]), C::PassFragment);
    b.passes("inner options", &sw(B4_1, &up.build_opts(&[1, 1, 1, 0], &[0; 8])), C::PassOptions);
    let quoted = V4::new(17, HOST, IN1).udp(53, 5000, b"");
    b.passes(
        "icmp error from inside",
        &sw(B4_1, &V4::new(1, IN1, HOST).icmp(3, 3, [0; 4], &quoted[..28])),
        C::PassIcmp,
    );
    let quoted = V4::new(17, o.addr, HOST).udp(o.port, 53, b"");
    b.passes("icmp error from outside", &V4::new(1, HOST, o.addr).icmp(3, 1, [0; 4], &quoted[..28]), C::PassIcmp);
    b.passes("over the tunnel mtu", &down.udp(53, o.port, &vec![0; 1500 - 28]), C::PassTooBig);
    b.passes("gre", &sw(B4_1, &V4::new(47, IN1, HOST).build(&[0; 8])), C::PassProtocol);
    let mut bad = up.udp(5000, 53, b"");
    bad[10] ^= 1;
    b.passes("inner header checksum", &sw(B4_1, &bad), C::PassChecksum);

    // The quota (RFC 6888 REQ-4) refuses a new flow in the engine; the
    // fast path never saw it.
    for p in 0..8 {
        assert_eq!(b.engine(&sw(B4_2, &up.udp(6000 + p, 53, b""))), Action::Emit);
    }
    let over = sw(B4_2, &up.udp(7000, 53, b""));
    assert_eq!(b.engine(&over), Action::Drop(Reason::QuotaExceeded));
    b.passes("over the quota", &over, C::PassNoSession);
    b.fast_ok("the subscriber's other flows", &sw(B4_2, &up.udp(6003, 53, b"")));
}

fn state(aftr: &Aftr, sub: Ipv6Addr, port: u16) -> Option<TcpState> {
    aftr.nat()
        .list(Some(&sub), 1000, 0)
        .into_iter()
        .find(|m| m.inside.port == port && m.tcp.is_some())
        .and_then(|m| m.tcp)
}

/// The SYN+ACK only the fast path saw: the engine learns it from the
/// entries' flag when it next handles the mapping (a packet, the expiry
/// timer) and moves its state machine exactly as that SYN+ACK would have.
#[test]
fn the_engine_learns_the_syn_ack_the_fast_path_carried() {
    let mut b = DsBed::new(64, 64);
    let t = V4::new(6, IN1, HOST);
    let open = |b: &mut DsBed, port: u16| {
        assert_eq!(b.engine(&sw(B4_1, &t.tcp(port, 80, 0x02, b""))), Action::Emit);
        let o = b.outside(B4_1, Protocol::Tcp, IN1, port);
        let synack = V4::new(6, HOST, o.addr).tcp(80, o.port, 0x12, b"");
        assert!(matches!(b.fast(&synack, 0), Outcome::Forwarded(_)), "the syn-ack takes the fast path");
        o
    };
    // 1. Then the handshake's ACK and data take the fast path only; the
    // engine is still in V6 INIT until a FIN comes to it.
    let o1 = open(&mut b, 41000);
    assert_eq!(state(&b.aftr, B4_1, 41000), Some(TcpState::V6Init), "the engine did not see it");
    for (flags, data) in [(0x10, &b""[..]), (0x18, b"GET /")] {
        assert!(matches!(b.fast(&sw(B4_1, &t.tcp(41000, 80, flags, data)), 0), Outcome::Forwarded(_)));
    }
    assert!(matches!(b.fast(&V4::new(6, HOST, o1.addr).tcp(80, o1.port, 0x18, b"200"), 0), Outcome::Forwarded(_)));
    let fin = sw(B4_1, &t.tcp(41000, 80, 0x11, b""));
    b.passes("fin", &fin, C::PassTcpControl);
    assert_eq!(b.engine(&fin), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 41000), Some(TcpState::V6FinRcv), "ESTABLISHED (learnt), then the FIN");
    assert_eq!(b.sessions(), 1, "carried in full through the close");
    // 2. An RST from outside: ESTABLISHED -> TRANS, as after a seen SYN+ACK.
    let o2 = open(&mut b, 41001);
    assert_eq!(b.engine(&V4::new(6, HOST, o2.addr).tcp(80, o2.port, 0x04, b"")), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 41001), Some(TcpState::Trans));
    // 3. Expiry: a mapping the fast path opened lives on as ESTABLISHED
    // (from its last packet there), carried in full; 4. one whose SYN+ACK
    // never came goes at the transitory timeout.
    open(&mut b, 41002);
    assert!(matches!(b.fast(&sw(B4_1, &t.tcp(41002, 80, 0x10, b"")), 0), Outcome::Forwarded(_)));
    assert_eq!(b.engine(&sw(B4_1, &t.tcp(41003, 80, 0x02, b""))), Action::Emit);
    assert_eq!(b.sessions(), 3);
    assert_eq!(b.fast.expire(&b.aftr, NOW + 241 * S), 2, "the half-open one without a syn-ack and the reset one");
    assert_eq!(state(&b.aftr, B4_1, 41002), Some(TcpState::Established));
    assert_eq!(state(&b.aftr, B4_1, 41003), None);
    assert_eq!(state(&b.aftr, B4_1, 41001), None);
    assert_eq!(state(&b.aftr, B4_1, 41000), Some(TcpState::V6FinRcv), "FIN RCV lives on like ESTABLISHED");
    assert_eq!(b.sessions(), 2);
    b.fast_ok("after expiry: data, carried in full", &sw(B4_1, &t.tcp(41002, 80, 0x18, b"more")));
    b.passes("after expiry: a fin", &sw(B4_1, &t.tcp(41002, 80, 0x11, b"")), C::PassTcpControl);
}

/// The close of a carried TCP flow: FIN and RST go to the engine, whose
/// state machine steps without taking the session out of the maps; the
/// ACKs and data around them stay on the fast path byte for byte, and the
/// session leaves the maps when the engine expires it, 240 s after the
/// second FIN whatever the fast path forwarded since.
#[test]
fn the_close_stays_carried() {
    let mut b = DsBed::new(64, 64);
    let t = V4::new(6, IN1, HOST);
    let open = |b: &mut DsBed, port: u16| {
        assert_eq!(b.engine(&sw(B4_1, &t.tcp(port, 80, 0x02, b""))), Action::Emit);
        let o = b.outside(B4_1, Protocol::Tcp, IN1, port);
        b.fast_ok("the syn-ack", &V4::new(6, HOST, o.addr).tcp(80, o.port, 0x12, b""));
        b.fast.sync(&b.aftr);
        b.fast_ok("the handshake's ack", &sw(B4_1, &t.tcp(port, 80, 0x10, b"")));
        (V4::new(6, HOST, o.addr), o.port)
    };
    // 1. The B4 closes first.
    let (back, op) = open(&mut b, 42000);
    let fin = sw(B4_1, &t.tcp(42000, 80, 0x11, b""));
    b.passes("fin from the b4", &fin, C::PassTcpControl);
    assert_eq!(b.engine(&fin), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 42000), Some(TcpState::V6FinRcv));
    assert_eq!(b.sessions(), 1, "still carried");
    b.fast_ok("v6 fin rcv: the ack of the fin", &back.tcp(80, op, 0x10, b""));
    b.fast_ok("v6 fin rcv: data from outside", &back.tcp(80, op, 0x18, b"rest"));
    b.fast_ok("v6 fin rcv: the b4's ack", &sw(B4_1, &t.tcp(42000, 80, 0x10, b"")));
    let rst = back.tcp(80, op, 0x04, b"");
    b.passes("v6 fin rcv: rst from outside", &rst, C::PassTcpControl);
    assert_eq!(b.engine(&rst), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 42000), Some(TcpState::V6FinRcv), "an RST during FIN RCV changes nothing");
    let fin2 = back.tcp(80, op, 0x11, b"");
    b.passes("the second fin", &fin2, C::PassTcpControl);
    assert_eq!(b.engine(&fin2), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 42000), Some(TcpState::V4FinV6FinRcv));
    let last = sw(B4_1, &t.tcp(42000, 80, 0x10, b""));
    b.fast_ok("the last ack", &last);
    b.passes("a retransmitted second fin", &fin2, C::PassTcpControl);
    // 2. The server closes first.
    let (back, op) = open(&mut b, 42001);
    let fin = back.tcp(80, op, 0x11, b"");
    b.passes("fin from outside", &fin, C::PassTcpControl);
    assert_eq!(b.engine(&fin), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 42001), Some(TcpState::V4FinRcv));
    b.fast_ok("v4 fin rcv: the b4's ack", &sw(B4_1, &t.tcp(42001, 80, 0x10, b"")));
    b.fast_ok("v4 fin rcv: data from the b4", &sw(B4_1, &t.tcp(42001, 80, 0x18, b"bye")));
    let fin2 = sw(B4_1, &t.tcp(42001, 80, 0x11, b""));
    b.passes("the b4's fin", &fin2, C::PassTcpControl);
    assert_eq!(b.engine(&fin2), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 42001), Some(TcpState::V4FinV6FinRcv));
    b.fast_ok("the last ack from outside", &back.tcp(80, op, 0x10, b""));
    assert_eq!(b.sessions(), 2);
    // 3. Expiry: the carried ACKs do not extend V4 FIN + V6 FIN RCV; both
    // go at the transitory timeout after their second FIN, and the maps follow.
    let created = b.aftr.nat().created.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(b.fast.expire(&b.aftr, NOW + 239 * S), 0);
    assert_eq!(b.sessions(), 2);
    assert_eq!(b.fast.expire(&b.aftr, NOW + 241 * S), 2);
    assert_eq!(b.sessions(), 0);
    assert!(b.aftr.nat().is_empty());
    assert_eq!(b.aftr.nat().expired.load(std::sync::atomic::Ordering::Relaxed), created);
    b.passes("after expiry: the last ack again", &last, C::PassNoSession);
}

#[test]
fn expiry_follows_the_fast_path_and_removes_sessions() {
    let mut b = DsBed::new(64, 64);
    let up = V4::new(17, IN1, HOST);
    let used = sw(B4_1, &up.udp(5000, 53, b"a"));
    let idle = sw(B4_1, &up.udp(5001, 53, b"b"));
    assert_eq!(b.engine_at(&used, S), Action::Emit);
    assert_eq!(b.engine_at(&idle, S), Action::Emit);
    assert_eq!(b.sessions(), 2);
    // Only the fast path carries `used` from now on; its last-seen time
    // keeps the mapping past the UDP timeout (300 s after the engine saw it).
    b.fast_ok("used", &used);
    assert_eq!(b.fast.expire(&b.aftr, 302 * S), 1, "the idle mapping expired");
    assert_eq!(b.sessions(), 1, "and left the maps");
    b.fast_ok("the used mapping lives on", &used);
    b.passes("the idle one is the slow path's", &idle, C::PassNoSession);
    // Without the fast path's word it expires, and the maps follow.
    assert_eq!(b.aftr.expire(100_000 * S), 1);
    assert_eq!(b.fast.sync(&b.aftr), 1, "one change: down");
    assert_eq!(b.sessions(), 0);
    b.passes("expired", &used, C::PassNoSession);
    assert!(b.aftr.nat().is_empty());
}

#[test]
fn full_maps_leave_flows_on_the_slow_path() {
    let mut b = DsBed::new(64, 2);
    let up = V4::new(17, IN1, HOST);
    for p in 0..3 {
        assert_eq!(b.engine(&sw(B4_1, &up.udp(5000 + p, 53, b""))), Action::Emit);
    }
    assert_eq!(b.sessions(), 2);
    assert_eq!(b.fast.refused_full(), 1, "counted");
    b.fast_ok("a mirrored flow", &sw(B4_1, &up.udp(5000, 53, b"")));
    b.passes("the flow the maps had no room for", &sw(B4_1, &up.udp(5002, 53, b"")), C::PassNoSession);
    assert_eq!(b.fast.status()["refused_full"], 1);
}

/// Generated packets around live sessions, valid and mutated: the fast
/// path never sends anything the slow path would not send byte for byte.
#[test]
fn generated_packets_never_differ() {
    let mut b = DsBed::new(64, 64);
    let t = V4::new(6, IN1, HOST);
    for l3 in [
        sw(B4_1, &V4::new(17, IN1, HOST).udp(5000, 53, b"")),
        sw(B4_2, &V4::new(17, IN1, HOST).udp(5000, 53, b"")),
        sw(B4_1, &V4::new(1, IN1, HOST).icmp(8, 0, [0, 77, 0, 1], b"")),
        sw(B4_1, &t.tcp(40000, 80, 0x02, b"")),
        sw(B4_2, &t.tcp(40001, 80, 0x02, b"")),
        sw(B4_1, &t.tcp(40002, 80, 0x02, b"")),
        sw(B4_2, &t.tcp(40003, 80, 0x02, b"")),
    ] {
        assert_eq!(b.engine(&l3), Action::Emit);
    }
    for (sub, port) in [(B4_1, 40000), (B4_1, 40002), (B4_2, 40003)] {
        let o = b.outside(sub, Protocol::Tcp, IN1, port);
        assert_eq!(b.engine(&V4::new(6, HOST, o.addr).tcp(80, o.port, 0x12, b"")), Action::Emit);
    }
    // Closing: 40002 in V4 FIN + V6 FIN RCV, 40003 in V6 FIN RCV.
    let o = b.outside(B4_1, Protocol::Tcp, IN1, 40002);
    assert_eq!(b.engine(&V4::new(6, HOST, o.addr).tcp(80, o.port, 0x11, b"")), Action::Emit);
    assert_eq!(b.engine(&sw(B4_1, &t.tcp(40002, 80, 0x11, b""))), Action::Emit);
    assert_eq!(b.engine(&sw(B4_2, &t.tcp(40003, 80, 0x11, b""))), Action::Emit);
    assert_eq!(state(&b.aftr, B4_1, 40002), Some(TcpState::V4FinV6FinRcv));
    assert_eq!(state(&b.aftr, B4_2, 40003), Some(TcpState::V6FinRcv));
    // (b4, proto, inside port, outside) of each session.
    let sessions: Vec<(Ipv6Addr, u8, u16, Outside)> = [
        (B4_1, Protocol::Udp, 5000),
        (B4_2, Protocol::Udp, 5000),
        (B4_1, Protocol::Icmp, 77),
        (B4_1, Protocol::Tcp, 40000),
        (B4_2, Protocol::Tcp, 40001),
        (B4_1, Protocol::Tcp, 40002),
        (B4_2, Protocol::Tcp, 40003),
    ]
    .iter()
    .map(|&(s, p, port)| {
        let n = match p {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Icmp => 1,
        };
        (s, n, port, b.outside(s, p, IN1, port))
    })
    .collect();
    assert_eq!(b.sessions(), 7, "40001 half-open, 40002 and 40003 closing");
    let b = b;
    let pkt = (
        any::<bool>(),
        0usize..7,
        prop_oneof![Just(0u16), Just(0), Just(1), any::<u16>()],
        prop_oneof![Just(0x10u8), Just(0x18), Just(0x02), Just(0x11), Just(0x04), Just(0x12)],
        any::<bool>(),
        any::<u8>(),
        prop_oneof![Just(64u8), Just(1u8), Just(2u8), any::<u8>()],
        any::<bool>(),
        0usize..200,
    );
    let (fast, total) = b.generated(2000, pkt, |(up, si, skew, flags, stranger, tos, ttl, df, len)| {
        let (b4, proto, inside, o) = sessions[si];
        let payload = vec![0x3c; len];
        let b4 = if stranger { B4_X } else { b4 };
        if up {
            let v = V4 { tos, ttl, df, ..V4::new(proto, IN1, HOST) };
            let p = inside ^ skew;
            let inner = match proto {
                6 => v.tcp(p, 80, flags, &payload),
                17 => v.udp(p, 53, &payload),
                _ => v.icmp(if flags & 1 == 0 { 8 } else { 0 }, 0, [(p >> 8) as u8, p as u8, 0, 1], &payload),
            };
            sw(b4, &inner)
        } else {
            let v = V4 { tos, ttl, df, ..V4::new(proto, HOST, o.addr) };
            let p = o.port ^ skew;
            match proto {
                6 => v.tcp(80, p, flags, &payload),
                17 => v.udp(53, p, &payload),
                _ => v.icmp(if flags & 1 == 0 { 0 } else { 8 }, 0, [(p >> 8) as u8, p as u8, 0, 1], &payload),
            }
        }
    });
    assert!(fast * 10 > total, "only {fast} of {total} generated packets took the fast path");
}

/// The AFTR with port blocks: a B4's SYN creates its mapping in XDP. The
/// slow path of the differential check drains the created mappings first,
/// as the runner does before every packet.
struct BlockBed {
    fast: AftrFast,
    aftr: Aftr,
    blocks: Arc<BlockShared>,
    if4: u32,
    if6: u32,
    _ns: lab::netns::Netns,
}

impl BlockBed {
    /// Blocks of `size` ports, `quota` ports per B4, `max_mappings`.
    fn new(size: u16, quota: u32, max_mappings: usize) -> BlockBed {
        BlockBed::masked(size, quota, max_mappings, 128)
    }

    /// [`BlockBed::new`] with subscribers of `mask` bits (RFC 7785).
    fn masked(size: u16, quota: u32, max_mappings: usize, mask: u8) -> BlockBed {
        let (ns, if4, if6) = sides();
        let (ports, blocks) = BlockPorts::new(pool4(), 1024, size, quota, mask);
        let aftr = Aftr::new(aftr_config_masked(quota, max_mappings, mask), Box::new(ports));
        let mut fast =
            AftrFast::load_with(&aftr, &[POOL], 1024, Some(blocks.clone())).unwrap_or_else(|e| panic!("{e}"));
        prepare(fast.fast_path_mut(), if4, if6);
        BlockBed { fast, aftr, blocks, if4, if6, _ns: ns }
    }

    /// The runner's step (drain, handle, sync).
    fn engine_at(&mut self, l3: &[u8], now: u64) -> Action {
        let mut p = l3.to_vec();
        assert!(kernel_forward(&mut p), "the kernel would not forward it");
        self.drain(now);
        let a = self.aftr.process(&p, now, &mut Out::new());
        self.fast.sync(&self.aftr);
        a
    }

    fn engine(&mut self, l3: &[u8]) -> Action {
        self.engine_at(l3, NOW)
    }

    fn drain(&self, now: u64) -> usize {
        self.fast.drain(&self.aftr, now)
    }

    fn outside(&self, sub: Ipv6Addr, port: u16) -> Option<Outside> {
        self.aftr.nat().lookup_in(&Inside { sub, proto: Protocol::Tcp, addr: IN1, port })
    }

    fn sessions(&self) -> usize {
        self.fast.fast_path().sessions()
    }

    /// Ports in use in `sub`'s blocks.
    fn in_blocks(&self, sub: Ipv6Addr) -> u32 {
        self.blocks.blocks_of(&sub).iter().map(|b| b.2).sum()
    }
}

impl Differential for BlockBed {
    fn fast_path(&self) -> &SoftwireFastPath {
        self.fast.fast_path()
    }

    fn ifs(&self) -> (u32, u32) {
        (self.if4, self.if6)
    }

    fn slow(&self, l3: &[u8]) -> Option<Vec<u8>> {
        self.drain(NOW);
        slow_path(l3, |p, out| self.aftr.process(p, NOW, out))
    }
}

/// A B4's SYN creates its mapping in XDP from the B4's port block: the
/// SYN leaves byte for byte as the engine sends it with that port, and
/// once the event is drained the engine's table holds what its own SYN
/// would have made (V6 INIT, the transitory lifetime, the quota count).
#[test]
fn a_syn_creates_its_mapping_in_xdp() {
    let mut b = BlockBed::new(4, 8, 1 << 20);
    let t = V4::new(6, IN1, HOST);
    let syn = |p: u16| sw(B4_1, &t.tcp(p, 80, 0x02, b""));
    // The B4's first SYN: no block yet; the engine grants one.
    b.passes("a B4 without blocks", &syn(50000), C::PassNoBlock);
    assert_eq!(b.engine(&syn(50000)), Action::Emit);
    let o0 = b.outside(B4_1, 50000).expect("the engine's mapping");
    let blocks = b.blocks.blocks_of(&B4_1);
    assert_eq!(blocks.len(), 1, "one block granted");
    let (addr, base, used) = blocks[0];
    assert_eq!((o0.addr, used), (addr, 1), "the engine's port is the block's");
    assert!((base..base + 4).contains(&o0.port));
    assert_eq!(base % 4, 0, "blocks are aligned");

    // The next SYN: created in XDP (forwarded; the differential check
    // drains the event into the engine first, whose own output for the
    // SYN — a retransmission now — carries the same port).
    let created = b.counter(C::Created);
    let got = b.fast_ok("a syn from a B4 with a block", &syn(50001));
    assert_eq!(b.counter(C::Created), created + 1);
    let o1 = b.outside(B4_1, 50001).expect("entered into the engine");
    assert_eq!(&got[12..16], &o1.addr.octets()[..]);
    assert_eq!(be16(&got[20..]), o1.port);
    assert!((base..base + 4).contains(&o1.port) && o1.port != o0.port);
    assert_eq!(b.in_blocks(B4_1), 2);
    // Without the differential's second translation: a fresh SYN, drained
    // explicitly, against a mapping the engine made itself at the same time.
    let created = b.counter(C::Created);
    assert!(matches!(b.fast(&syn(50002), 0), Outcome::Forwarded(_)));
    assert_eq!(b.counter(C::Created), created + 1);
    assert_eq!(b.aftr.nat().lookup_in(&inside(B4_1, 50002)), None, "not yet drained");
    assert_eq!(b.drain(NOW), 1);
    let list = b.aftr.nat().list(Some(&B4_1), 100, NOW);
    let xdp = list.iter().find(|m| m.inside.port == 50002).expect("listed");
    let own = list.iter().find(|m| m.inside.port == 50000).expect("listed");
    assert_eq!(xdp.tcp, Some(TcpState::V6Init));
    assert_eq!(xdp.tcp, own.tcp, "the same state as the engine's own SYN made");
    assert!(own.expires_in_s - xdp.expires_in_s <= 1, "the transitory lifetime from the SYN's time");
    assert_eq!(b.aftr.nat().ports_of(&B4_1), 3, "counted against the quota");
    assert_eq!(b.aftr.nat().created.load(std::sync::atomic::Ordering::Relaxed), 3);
    assert_eq!(b.sessions(), 3, "all three carried (half-open)");
    // Its SYN+ACK and the rest of the handshake take the fast path as for
    // a mapping the engine made.
    let o2 = b.outside(B4_1, 50002).unwrap();
    b.fast_ok("the syn-ack", &V4::new(6, HOST, o2.addr).tcp(80, o2.port, 0x12, b""));
    assert_eq!(state(&b.aftr, B4_1, 50002), Some(TcpState::Established));
    b.fast.sync(&b.aftr);
    b.fast_ok("the handshake's ack", &sw(B4_1, &t.tcp(50002, 80, 0x10, b"")));
    b.passes("a retransmitted syn: the engine's", &syn(50002), C::PassTcpControl);

    // Block exhaustion: the fourth port, then the engine grants a second
    // block (quota 8 = two blocks of 4), then XDP fills it.
    b.fast_ok("the block's last port", &syn(50003));
    b.passes("the block is full", &syn(50004), C::PassBlockFull);
    assert_eq!(b.engine(&syn(50004)), Action::Emit);
    assert_eq!(b.blocks.blocks_of(&B4_1).len(), 2, "a second block");
    for p in 50005..50008 {
        b.fast_ok("from the second block", &syn(p));
    }
    b.passes("both blocks full", &syn(50008), C::PassBlockFull);
    assert_eq!(b.engine(&syn(50008)), Action::Drop(Reason::QuotaExceeded));
    assert_eq!(b.aftr.nat().ports_of(&B4_1), 8);
    assert_eq!(b.in_blocks(B4_1), 8);
    // Other protocols keep the pool's ports.
    let up = sw(B4_1, &V4::new(17, IN1, HOST).udp(5000, 53, b""));
    b.passes("udp is the engine's", &up, C::PassNoSession);

    // Expiry gives the ports back: all but the established one go at the
    // transitory timeout; the bits are cleared.
    b.fast.expire(&b.aftr, NOW + 241 * S);
    assert_eq!(b.aftr.nat().ports_of(&B4_1), 1, "the established mapping lives on");
    assert_eq!(b.in_blocks(B4_1), 1, "the expired mappings' bits are clear");
    b.fast_ok("a port freed by expiry is taken again", &syn(50100));
    // Then the last one goes (ESTABLISHED ages to TRANS first; without
    // the fast path's word, whose last-seen time is this machine's clock):
    // the blocks are retired in that turn and given back in the next.
    b.aftr.expire(NOW + 100_000 * S);
    b.aftr.expire(NOW + 200_000 * S);
    b.fast.sync(&b.aftr);
    assert!(b.aftr.nat().is_empty());
    assert_eq!(b.blocks.blocks_of(&B4_1).len(), 0);
    assert_eq!(b.blocks.counts(), (2, 2, 0), "retired, not yet given back");
    b.aftr.expire(NOW + 200_001 * S);
    assert_eq!(b.blocks.counts(), (0, 2, 2), "two blocks granted and given back");
    assert_eq!(b.aftr.nat().usage(Protocol::Tcp).1, 0, "the pool has every port back");
    b.passes("no blocks again", &syn(50200), C::PassNoBlock);
}

/// RFC 6888 REQ-4 with port blocks (RFC 7422): a B4's free block ports
/// count against its quota, because XDP takes them without the engine.
/// UDP and ICMP mappings fill only the room beside them, and a new block is
/// granted only when the whole of it fits; so whatever XDP creates, the
/// B4 never holds more than its quota.
#[test]
fn block_ports_count_against_the_quota() {
    let mut b = BlockBed::new(4, 8, 1 << 20);
    let t = V4::new(6, IN1, HOST);
    let syn = |p: u16| sw(B4_1, &t.tcp(p, 80, 0x02, b""));
    let udp = |p: u16| sw(B4_1, &V4::new(17, IN1, HOST).udp(p, 53, b""));
    assert_eq!(b.engine(&syn(40000)), Action::Emit, "the first SYN: a block of 4 granted");
    assert_eq!((b.blocks.blocks_of(&B4_1).len(), b.in_blocks(B4_1)), (1, 1));
    // 1 mapping + 3 free block ports: room for 4 UDP mappings, no more.
    for p in 5000..5004 {
        assert_eq!(b.engine(&udp(p)), Action::Emit, "udp {p}");
    }
    assert_eq!(b.engine(&udp(5004)), Action::Drop(Reason::QuotaExceeded), "the blocks' free ports are the B4's");
    // XDP still has the block's three ports, and only those.
    for p in 40001..40004 {
        b.fast_ok("from the block", &syn(p));
    }
    b.passes("the block is full", &syn(40004), C::PassBlockFull);
    assert_eq!(b.engine(&syn(40004)), Action::Drop(Reason::QuotaExceeded), "no second block: no room for it");
    assert_eq!(b.blocks.blocks_of(&B4_1).len(), 1);
    b.drain(NOW);
    assert_eq!(b.aftr.nat().ports_of(&B4_1), 8, "exactly the quota");

    // A quota smaller than a block: no block at all, the pool's ports up to the quota.
    let mut b = BlockBed::new(4, 3, 1 << 20);
    for p in 40000..40003 {
        assert_eq!(b.engine(&syn(p)), Action::Emit);
    }
    assert!(b.blocks.blocks_of(&B4_1).is_empty(), "a block of 4 does not fit a quota of 3");
    b.passes("no blocks", &syn(40003), C::PassNoBlock);
    assert_eq!(b.engine(&syn(40003)), Action::Drop(Reason::QuotaExceeded));
}

/// Issue #29 D8 on the fast path: the quota is the subscriber's prefix
/// (RFC 7785), blocks included. B4_1, B4_2 and B4_W are addresses of one
/// /64: the first two get a block each (quota 8 = two blocks of 4), the
/// third none, and XDP creates no mapping beyond the prefix's quota
/// whichever address sends the SYN.
#[test]
fn addresses_of_one_prefix_share_the_quota_and_its_blocks() {
    let mut b = BlockBed::masked(4, 8, 1 << 20, 64);
    let t = V4::new(6, IN1, HOST);
    let syn = |b4: Ipv6Addr, p: u16| sw(b4, &t.tcp(p, 80, 0x02, b""));
    assert_eq!(b.engine(&syn(B4_1, 41000)), Action::Emit, "a block for B4_1");
    assert_eq!(b.engine(&syn(B4_2, 42000)), Action::Emit, "a block for B4_2: 4 + 4 fit the quota");
    assert_eq!((b.blocks.blocks_of(&B4_1).len(), b.blocks.blocks_of(&B4_2).len()), (1, 1));
    assert_eq!(b.engine(&syn(B4_W, 43000)), Action::Drop(Reason::QuotaExceeded), "the prefix's quota is held");
    assert!(b.blocks.blocks_of(&B4_W).is_empty());
    b.passes("B4_W has no block", &syn(B4_W, 43001), C::PassNoBlock);
    for p in 41001..41004 {
        b.fast_ok("B4_1's block", &syn(B4_1, p));
    }
    for p in 42001..42004 {
        b.fast_ok("B4_2's block", &syn(B4_2, p));
    }
    b.passes("B4_1's block is full", &syn(B4_1, 41004), C::PassBlockFull);
    assert_eq!(b.engine(&syn(B4_1, 41004)), Action::Drop(Reason::QuotaExceeded));
    b.drain(NOW);
    assert_eq!(b.aftr.nat().ports_of(&B4_W), 8, "exactly the quota, for the whole prefix");
    assert_eq!(b.aftr.nat().len(), 8);
    // Everything expires and the blocks go back (retired, then returned):
    // the prefix's quota is whole again, for any of its addresses.
    b.aftr.expire(NOW + 241 * S);
    b.aftr.expire(NOW + 242 * S);
    b.fast.sync(&b.aftr);
    assert!(b.aftr.nat().is_empty());
    assert_eq!(b.blocks.counts().0, 0, "every block given back");
    assert_eq!(b.engine_at(&syn(B4_W, 43002), NOW + 243 * S), Action::Emit, "a block for B4_W now");
    assert_eq!(b.blocks.blocks_of(&B4_W).len(), 1);
}

fn inside(sub: Ipv6Addr, port: u16) -> Inside {
    Inside { sub, proto: Protocol::Tcp, addr: IN1, port }
}

/// The same inside tuple from XDP and from the engine (a SYN the engine
/// handled before it drained the event): one outside per inside, the
/// engine's; the program's entries of the other go and its port is given
/// back. And the table limit: XDP stops creating at max-mappings.
#[test]
fn races_and_the_table_limit() {
    let mut b = BlockBed::new(8, 64, 4);
    let t = V4::new(6, IN1, HOST);
    let syn = |p: u16| sw(B4_2, &t.tcp(p, 80, 0x02, b""));
    assert_eq!(b.engine(&syn(51000)), Action::Emit);
    assert!(matches!(b.fast(&syn(51001), 0), Outcome::Forwarded(_)));
    let mut p = syn(51001);
    assert!(kernel_forward(&mut p));
    // The engine handles the same SYN without draining first.
    assert_eq!(b.aftr.process(&p, NOW, &mut Out::new()), Action::Emit);
    b.fast.sync(&b.aftr);
    let mine = b.outside(B4_2, 51001).unwrap();
    assert_eq!(b.in_blocks(B4_2), 3, "three ports taken: the engine's two, the program's one");
    assert_eq!(b.drain(NOW), 0, "the event not entered");
    assert_eq!(b.fast.created(), (0, 1), "a conflict");
    assert_eq!(b.in_blocks(B4_2), 2, "the program's port given back");
    assert_eq!(b.outside(B4_2, 51001), Some(mine), "the engine's mapping stays");
    b.fast_ok("the engine's mapping is the carried one", &V4::new(6, HOST, mine.addr).tcp(80, mine.port, 0x12, b""));
    // The table limit (4): two mappings, two more from XDP, then the engine's.
    b.fast_ok("third", &syn(51002));
    b.fast_ok("fourth", &syn(51003));
    assert_eq!(b.aftr.nat().len(), 4);
    b.passes("the table is full", &syn(51004), C::PassTableFull);
    assert_eq!(b.engine(&syn(51004)), Action::Drop(Reason::TableFull));
}

/// Generated SYNs and mutated packets from B4s with blocks: whatever the
/// program creates and forwards is what the engine sends with that port.
#[test]
fn generated_syns_never_differ() {
    let mut b = BlockBed::new(16, 64, 1 << 20);
    let t = V4::new(6, IN1, HOST);
    for sub in [B4_1, B4_2] {
        assert_eq!(b.engine(&sw(sub, &t.tcp(1, 80, 0x02, b""))), Action::Emit);
    }
    let b = b;
    let pkt = (
        any::<bool>(),
        1000u16..1100,
        prop_oneof![Just(0x02u8), Just(0x02), Just(0x12), any::<u8>()],
        any::<u8>(),
        0usize..40,
    );
    let (fast, total) = b.generated(600, pkt, |(second, port, flags, ttl, len)| {
        let v = V4 { ttl: ttl.max(1), ..t };
        sw(if second { B4_2 } else { B4_1 }, &v.tcp(port, 80, flags, &vec![1; len]))
    });
    assert!(fast * 40 > total, "only {fast} of {total} generated packets took the fast path");
    assert_eq!(b.fast.created().1, 0, "no conflicts");
    b.drain(NOW);
    let n = b.aftr.nat().len() as u32;
    assert_eq!(b.in_blocks(B4_1) + b.in_blocks(B4_2), n, "every TCP mapping holds one block port");
}

/// (state, seconds left at `now`) of `sub`'s TCP mapping of inside `port`.
fn life(aftr: &Aftr, sub: Ipv6Addr, port: u16, now: u64) -> Option<(TcpState, u64)> {
    let m = aftr.nat().list(Some(&sub), 1000, now).into_iter().find(|m| m.inside.port == port && m.tcp.is_some())?;
    Some((m.tcp?, m.expires_in_s))
}

/// The kernel's forwarding, then the engine at `now` (a twin without a fast path).
fn twin_sees(twin: &Aftr, l3: &[u8], now: u64) -> Action {
    let mut p = l3.to_vec();
    assert!(kernel_forward(&mut p), "the kernel would not forward it");
    twin.process(&p, now, &mut Out::new())
}

fn ds_session(sub: Ipv6Addr, port: u16, o: Outside) -> xdp::dslite::Nat44Session {
    xdp::dslite::Nat44Session {
        b4: sub,
        proto: 6,
        inside: std::net::SocketAddrV4::new(IN1, port),
        outside: std::net::SocketAddrV4::new(o.addr, o.port),
        half_open: false,
    }
}

/// The FINs of a carried TCP mapping are carried (both directions, each
/// recorded in both entries and told by a ring event); the engine, which
/// never saw them, drains the events and ends with the table of a twin
/// engine that saw every packet itself: the same state, the same lifetime
/// left, and the mapping (its block port) goes 240 s after the second FIN.
#[test]
fn fins_are_carried_and_the_engine_learns_them() {
    let mut b = BlockBed::new(16, 64, 1 << 20);
    let twin = Aftr::new(aftr_config(64, 1 << 20), Box::new(PoolPorts::new(pool4(), 1024)));
    let t = V4::new(6, IN1, HOST);
    let up = |p: u16, f: u8| sw(B4_1, &t.tcp(p, 80, f, b""));
    let down = |o: Outside, f: u8| V4::new(6, HOST, o.addr).tcp(80, o.port, f, b"");
    let carried = |b: &BlockBed, l3: &[u8]| assert!(matches!(b.fast(l3, 0), Outcome::Forwarded(_)), "carried");
    // The B4's block: the engine's own first SYN (the twin's too).
    assert_eq!(b.engine(&up(52000, 0x02)), Action::Emit);
    assert_eq!(twin_sees(&twin, &up(52000, 0x02), NOW), Action::Emit);
    // 52001: the B4 closes first; 52002: the server does. The SYN is
    // created in XDP, the SYN+ACK and the ACK carried.
    let mut outs = Vec::new();
    for p in [52001, 52002] {
        carried(&b, &up(p, 0x02));
        assert_eq!(twin_sees(&twin, &up(p, 0x02), NOW), Action::Emit);
        b.drain(NOW);
        let (o, ot) = (b.outside(B4_1, p).unwrap(), twin.nat().lookup_in(&inside(B4_1, p)).unwrap());
        carried(&b, &down(o, 0x12));
        assert_eq!(twin_sees(&twin, &down(ot, 0x12), NOW), Action::Emit);
        carried(&b, &up(p, 0x10));
        assert_eq!(twin_sees(&twin, &up(p, 0x10), NOW), Action::Emit);
        outs.push((p, o, ot));
    }
    let (fin1, fin2) = (NOW + 10 * S, NOW + 20 * S);
    let fins = b.counter(C::Fin);
    for (i, &(p, o, ot)) in outs.iter().enumerate() {
        // The first FIN: from the B4 for 52001, from outside for 52002.
        let (mine, theirs) = if i == 0 { (up(p, 0x11), up(p, 0x11)) } else { (down(o, 0x11), down(ot, 0x11)) };
        carried(&b, &mine);
        let seen = b.fast.fast_path().session_seen(&ds_session(B4_1, p, o)).unwrap().expect("carried");
        assert_eq!((seen.fin_v6, seen.fin_v4), (i == 0, i == 1), "recorded in the entries");
        assert_eq!(state(&b.aftr, B4_1, p), Some(TcpState::V6Init), "the engine not told yet");
        assert_eq!(twin_sees(&twin, &theirs, fin1), Action::Emit);
    }
    assert_eq!(b.counter(C::Fin), fins + 2);
    assert_eq!(b.drain(fin1), 2, "two FINs stepped");
    b.fast.sync(&b.aftr);
    for &(p, o, ot) in &outs {
        // The last ACK, then the second FIN the other way.
        let (mine, theirs) = if p == 52001 { (down(o, 0x11), down(ot, 0x11)) } else { (up(p, 0x11), up(p, 0x11)) };
        carried(&b, &mine);
        assert_eq!(twin_sees(&twin, &theirs, fin2), Action::Emit);
    }
    assert_eq!(b.counter(C::Fin), fins + 4);
    assert_eq!(b.drain(fin2), 2);
    b.fast.sync(&b.aftr);
    for &(p, o, ot) in &outs {
        let (mine, theirs) = if p == 52001 { (up(p, 0x10), up(p, 0x10)) } else { (down(o, 0x10), down(ot, 0x10)) };
        carried(&b, &mine);
        assert_eq!(twin_sees(&twin, &theirs, fin2 + S), Action::Emit);
    }
    let at = fin2 + 100 * S;
    for (p, _, _) in &outs {
        let (mine, theirs) = (life(&b.aftr, B4_1, *p, at).unwrap(), life(&twin, B4_1, *p, at).unwrap());
        assert_eq!(mine.0, TcpState::V4FinV6FinRcv);
        assert_eq!(mine.0, theirs.0, "the twin's state");
        assert!(theirs.1.abs_diff(mine.1) <= 1, "the twin's lifetime left: {mine:?} vs {theirs:?}");
    }
    // The expiry frees the ports 240 s after the second FIN.
    let held = b.in_blocks(B4_1);
    assert_eq!(b.fast.expire(&b.aftr, fin2 + 239 * S), 1, "52000 (half-open since NOW)");
    assert_eq!(twin.expire(fin2 + 239 * S), 1);
    assert_eq!(b.fast.expire(&b.aftr, fin2 + 241 * S), 2, "the two closed ones");
    assert_eq!(twin.expire(fin2 + 241 * S), 2);
    assert_eq!(b.in_blocks(B4_1), held - 3, "their block bits are clear");
    assert!(b.aftr.nat().is_empty() && twin.nat().is_empty());
    assert_eq!(b.fast.fins(), (4, 0));
}

/// Each carried FIN leaves byte for byte as the engine sends it; FINs of
/// half-open mappings and FINs with RST or SYN stay the engine's; a full
/// ring passes the FIN (counted) and the engine, draining, catches up.
#[test]
fn fins_byte_identical_and_what_passes() {
    let mut b = BlockBed::new(16, 64, 1 << 20);
    let t = V4::new(6, IN1, HOST);
    let up = |p: u16, f: u8| sw(B4_1, &t.tcp(p, 80, f, b""));
    let down = |o: Outside, f: u8| V4::new(6, HOST, o.addr).tcp(80, o.port, f, b"");
    assert_eq!(b.engine(&up(53000, 0x02)), Action::Emit);
    let open = |b: &mut BlockBed, p: u16| {
        b.fast_ok("syn", &up(p, 0x02));
        let o = b.outside(B4_1, p).unwrap();
        b.fast_ok("syn+ack", &down(o, 0x12));
        b.fast.sync(&b.aftr);
        o
    };
    let o = open(&mut b, 53001);
    b.passes("fin+rst from the b4", &up(53001, 0x15), C::PassTcpControl);
    b.passes("fin+syn from outside", &down(o, 0x13), C::PassTcpControl);
    b.passes("rst from outside", &down(o, 0x04), C::PassTcpControl);
    b.fast_ok("fin from the b4", &up(53001, 0x11));
    b.fast_ok("fin with data from outside", &V4::new(6, HOST, o.addr).tcp(80, o.port, 0x19, b"tail"));
    assert_eq!(state(&b.aftr, B4_1, 53001), Some(TcpState::V4FinV6FinRcv));
    // Half-open (no SYN+ACK yet): the FIN is the engine's.
    b.fast_ok("syn", &up(53002, 0x02));
    let o2 = b.outside(B4_1, 53002).unwrap();
    b.passes("fin of a half-open mapping", &up(53002, 0x11), C::PassTcpControl);
    b.passes("fin from outside, half-open", &down(o2, 0x11), C::PassTcpControl);
    // A full ring: carried FINs pile up undrained until one passes.
    let o3 = open(&mut b, 53003);
    let full = b.counter(C::PassRingFull);
    let fin = down(o3, 0x11);
    let mut n = 0u64;
    while matches!(b.fast(&fin, 0), Outcome::Forwarded(_)) {
        n += 1;
        assert!(n < 100_000, "the ring never fills");
    }
    assert_eq!(b.counter(C::PassRingFull), full + 1, "the passed FIN is counted");
    assert_eq!(b.drain(NOW) as u64, n, "every carried FIN stepped");
    assert_eq!(state(&b.aftr, B4_1, 53003), Some(TcpState::V4FinRcv));
    b.fast_ok("room again", &up(53003, 0x11));
    assert_eq!(state(&b.aftr, B4_1, 53003), Some(TcpState::V4FinV6FinRcv));
}

/// Generated flag combinations, valid and mutated, both ways around
/// established mappings whose FINs are carried: never a byte of
/// difference from the engine's output.
#[test]
fn generated_fins_never_differ() {
    let mut b = BlockBed::new(16, 64, 1 << 20);
    let t = V4::new(6, IN1, HOST);
    assert_eq!(b.engine(&sw(B4_1, &t.tcp(54000, 80, 0x02, b""))), Action::Emit);
    let mut outs = Vec::new();
    for p in [54001, 54002, 54003] {
        b.fast_ok("syn", &sw(B4_1, &t.tcp(p, 80, 0x02, b"")));
        let o = b.outside(B4_1, p).unwrap();
        b.fast_ok("syn+ack", &V4::new(6, HOST, o.addr).tcp(80, o.port, 0x12, b""));
        outs.push((p, o));
    }
    b.fast.sync(&b.aftr);
    let fins = b.counter(C::Fin);
    let b = b;
    let pkt = (
        any::<bool>(),
        0usize..3,
        prop_oneof![Just(0x11u8), Just(0x01), Just(0x19), Just(0x15), Just(0x13), Just(0x10), any::<u8>()],
        any::<u8>(),
        0usize..40,
    );
    let (fast, total) = b.generated(600, pkt, |(from_b4, i, flags, ttl, len)| {
        let (p, o) = outs[i];
        if from_b4 {
            sw(B4_1, &V4 { ttl: ttl.max(1), ..t }.tcp(p, 80, flags, &vec![2; len]))
        } else {
            V4 { ttl: ttl.max(1), ..V4::new(6, HOST, o.addr) }.tcp(80, o.port, flags, &vec![3; len])
        }
    });
    assert!(fast * 10 > total, "only {fast} of {total} generated packets took the fast path");
    assert!(b.counter(C::Fin) > fins, "FINs were carried");
}
