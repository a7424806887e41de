//! Shared by the lwAFTR and DS-Lite AFTR XDP differential tests
//! (`tests/lwaftr_xdp.rs`, `tests/dslite_xdp.rs`) and the cost bench
//! (`benches/xdp_cost.rs`): the namespace with the loaded, mirrored fast
//! path next to the engine, the model of the slow path (the engine
//! between the kernel's forwarding steps, [`slow_path`]), the checks of
//! [`Differential`] and the packet builders.
#![allow(dead_code)]

use core::cell::Cell;
use core::net::{Ipv4Addr, Ipv6Addr};
use lab::netns::Netns;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use softwire::binding::{Binding, BindingTable};
use softwire::endpoint::EndpointConfig;
use softwire::fast::LwaftrFast;
use softwire::lwaftr::{Lwaftr, LwaftrConfig};
use softwire::portset::PsidMap;
use softwire::Action;
use xdp::softwire::{SoftwireCounter as C, SoftwireFastPath};
use xdp::{action, Mode};
use xlat::{Out, PacketKind};

pub const LOCAL: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
pub const B4_1: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
pub const B4_2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
pub const B4_W: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 9);
pub const B4_L: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);
pub const B4_X: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1);
pub const SHARED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const WHOLE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);
pub const LEASED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
pub const UNBOUND: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);
pub const HOST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
pub const MAC_X4: [u8; 6] = [2, 0, 0, 0, 4, 1];
pub const MAC_GW4: [u8; 6] = [2, 0, 0, 0, 4, 2];
pub const MAC_X6: [u8; 6] = [2, 0, 0, 0, 6, 1];
pub const MAC_GW6: [u8; 6] = [2, 0, 0, 0, 6, 2];
pub const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0x99, 0x99];

pub fn map6() -> PsidMap {
    PsidMap::new(6, 6).unwrap()
}

pub fn bindings(with_b4_2: bool) -> BindingTable {
    let mut t = BindingTable::new();
    t.insert(Binding { b4: B4_1, ipv4: SHARED, psid: 1, map: map6() }).unwrap();
    if with_b4_2 {
        t.insert(Binding { b4: B4_2, ipv4: SHARED, psid: 2, map: map6() }).unwrap();
    }
    t.insert(Binding { b4: B4_W, ipv4: WHOLE, psid: 0, map: PsidMap::FULL }).unwrap();
    t
}

pub fn leases(on: bool) -> BindingTable {
    let mut t = BindingTable::new();
    if on {
        t.insert(Binding { b4: B4_L, ipv4: LEASED, psid: 0, map: PsidMap::FULL }).unwrap();
    }
    t
}

/// The namespace, the engine and its loaded, mirrored fast path.
pub struct Bed {
    // Field order: the fast path goes before the namespace.
    pub fast: LwaftrFast,
    pub lw: Lwaftr,
    pub if4: u32,
    pub if6: u32,
    _ns: Netns,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Forwarded(Vec<u8>),
    Passed,
}

impl Bed {
    pub fn new(encap_limit: Option<u8>) -> Bed {
        Bed::with(encap_limit, 64)
    }

    /// As [`Bed::new`], the maps sized for `max_bindings`.
    pub fn with(encap_limit: Option<u8>, max_bindings: u32) -> Bed {
        let (ns, if4, if6) = sides();
        let mut endpoint = EndpointConfig::new(LOCAL, Ipv4Addr::new(192, 0, 0, 1));
        endpoint.encap_limit = encap_limit;
        endpoint.hop_limit = 61;
        let cfg = LwaftrConfig { endpoint, hairpinning: true, icmpv4_errors: true, icmpv6_errors: true };
        let lw = Lwaftr::new(cfg, bindings(true));
        lw.set_leases(leases(true));
        let mut fast = LwaftrFast::load(&lw, max_bindings).unwrap_or_else(|e| panic!("{e}"));
        prepare(fast.fast_path_mut(), if4, if6);
        Bed { fast, lw, if4, if6, _ns: ns }
    }
}

impl Differential for Bed {
    fn fast_path(&self) -> &SoftwireFastPath {
        self.fast.fast_path()
    }

    fn ifs(&self) -> (u32, u32) {
        (self.if4, self.if6)
    }

    fn slow(&self, l3: &[u8]) -> Option<Vec<u8>> {
        slow_path(l3, |p, out| self.lw.process(p, 1_000_000_000, out))
    }
}

/// A uniquely named namespace (entered by this thread) with the IPv4
/// side `x4` and the softwire side `x6`, each with a default route
/// through a permanent neighbour; their interface indexes.
pub fn sides() -> (Netns, u32, u32) {
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
    (ns, if4, if6)
}

/// Let `fp` send through both sides and accept their MACs, and attach it
/// (native) to the idle `x4p`: BPF_PROG_TEST_RUN then skips the XDP
/// dispatcher's RCU wait per call.
pub fn prepare(fp: &mut SoftwireFastPath, if4: u32, if6: u32) {
    fp.allow_egress(if4).unwrap();
    fp.allow_egress(if6).unwrap();
    fp.set_interface_mac(if4, MAC_X4).unwrap();
    fp.set_interface_mac(if6, MAC_X6).unwrap();
    fp.attach("x4p", Mode::Native).unwrap_or_else(|e| panic!("{e}"));
}

/// What the slow path sends for `l3`: the kernel forwards it into the
/// TUN device, the engine (`process`) handles it, the kernel forwards its
/// single output. None when that is not exactly one forwarded packet.
pub fn slow_path(l3: &[u8], process: impl FnOnce(&[u8], &mut Out) -> Action) -> Option<Vec<u8>> {
    let mut p = l3.to_vec();
    if !kernel_forward(&mut p) {
        return None;
    }
    let mut out = Out::new();
    if process(&p, &mut out) != Action::Emit {
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

/// A loaded fast path next to its engine: the differential checks.
pub trait Differential {
    /// The fast path under test.
    fn fast_path(&self) -> &SoftwireFastPath;
    /// (IPv4 side, softwire side) interface indexes.
    fn ifs(&self) -> (u32, u32);
    /// What the slow path sends for `l3` ([`slow_path`]).
    fn slow(&self, l3: &[u8]) -> Option<Vec<u8>>;

    fn counter(&self, c: C) -> u64 {
        self.fast_path().counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1.packets
    }

    /// The fast path over `l3` (padded to `pad` bytes of frame), checked
    /// for what a pass and a forward must look like.
    fn fast(&self, l3: &[u8], pad: usize) -> Outcome {
        let (frame, ingress) = self.frame(l3, pad);
        let r = self.fast_path().test_run(&frame, ingress, 1).unwrap_or_else(|e| panic!("{e}"));
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

    /// `l3` in an Ethernet frame to the interface of its side (padded to
    /// `pad` bytes), and that interface's index.
    fn frame(&self, l3: &[u8], pad: usize) -> (Vec<u8>, u32) {
        let v6 = l3.first().map(|b| b >> 4) == Some(6);
        let (if4, if6) = self.ifs();
        let (ingress, mac, et) = if v6 { (if6, MAC_X6, 0x86dd) } else { (if4, MAC_X4, 0x0800) };
        let mut frame = Vec::new();
        frame.extend_from_slice(&mac);
        frame.extend_from_slice(&MAC_PEER);
        frame.extend_from_slice(&u16::to_be_bytes(et));
        frame.extend_from_slice(l3);
        if frame.len() < pad {
            frame.resize(pad, 0);
        }
        (frame, ingress)
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

    /// `cases` packets built by `build` from `strategy`'s values, each
    /// maybe with one byte mutated, through [`Differential::diff`].
    /// Returns (forwarded, total).
    fn generated<S: Strategy>(&self, cases: u32, strategy: S, build: impl Fn(S::Value) -> Vec<u8>) -> (u32, u32)
    where
        Self: Sized,
    {
        let mut runner = TestRunner::new(PtConfig { cases, ..PtConfig::default() });
        let (fast, total) = (Cell::new(0u32), Cell::new(0u32));
        let mutation = proptest::option::of((any::<usize>(), any::<u8>()));
        runner
            .run(&(strategy, mutation), |(v, mutate)| {
                let mut l3 = build(v);
                if let Some((at, x)) = mutate {
                    let i = at % l3.len();
                    l3[i] ^= x;
                }
                total.set(total.get() + 1);
                if matches!(self.diff(&l3, 0), Outcome::Forwarded(_)) {
                    fast.set(fast.get() + 1);
                }
                Ok(())
            })
            .unwrap();
        (fast.get(), total.get())
    }
}

/// The kernel's forwarding step: header checks, TTL / hop limit, and
/// `ip_decrease_ttl()` (its checksum arithmetic, byte for byte).
pub fn kernel_forward(p: &mut [u8]) -> bool {
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

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn sum16(b: &[u8]) -> u32 {
    b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum()
}

pub fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[derive(Debug, Clone, Copy)]
pub struct V4 {
    pub tos: u8,
    pub ttl: u8,
    pub proto: u8,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub df: bool,
    pub mf: bool,
}

impl V4 {
    pub fn new(proto: u8, src: Ipv4Addr, dst: Ipv4Addr) -> V4 {
        V4 { tos: 0, ttl: 64, proto, src, dst, df: true, mf: false }
    }

    pub fn build_opts(&self, opts: &[u8], l4: &[u8]) -> Vec<u8> {
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

    pub fn build(&self, l4: &[u8]) -> Vec<u8> {
        self.build_opts(&[], l4)
    }

    pub fn udp(&self, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0x5a, 0xa5]);
        u.extend_from_slice(payload);
        self.build(&u)
    }

    pub fn tcp(&self, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags;
        t[16..18].copy_from_slice(&[0x12, 0x34]);
        t.extend_from_slice(payload);
        self.build(&t)
    }

    pub fn icmp(&self, ty: u8, code: u8, rest: [u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut m = vec![ty, code, 0, 0];
        m.extend_from_slice(&rest);
        m.extend_from_slice(payload);
        let c = !fold(sum16(&m));
        m[2..4].copy_from_slice(&c.to_be_bytes());
        self.build(&m)
    }
}

/// A tunnel packet from `src` to `dst` carrying `inner` with next header `nh`.
pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, nh: u8, inner: &[u8]) -> Vec<u8> {
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

pub fn sw(src: Ipv6Addr, inner: &[u8]) -> Vec<u8> {
    v6(src, LOCAL, 64, 4, inner)
}

pub fn port(psid: u16, i: u32) -> u16 {
    map6().nth(psid, i)
}
