//! Shared by the packet-vector tests of the stateful path: the usual
//! translator (pool6 2001:db8:64::/96, pool4 192.0.2.1), running one
//! packet through it with every emitted packet validated by etherparse
//! (`common::check`), and field readers.
#![allow(dead_code)]

#[path = "../../../xlat/tests/common/mod.rs"]
pub mod common;

pub use common::{check, V4, V6};
use nat64::{Config, Nat64};
use std::net::{Ipv4Addr, Ipv6Addr};
use xlat::{DropReason, Out, PacketKind, Verdict};

pub const S: u64 = 1_000_000_000;
pub const H1: &str = "2001:db8::1";
pub const H2: &str = "2001:db8::2";
/// 198.51.100.7 under pool6 2001:db8:64::/96.
pub const Y6: &str = "2001:db8:64::c633:6407";
pub const Y4: &str = "198.51.100.7";
pub const Y4B: &str = "198.51.100.8";
pub const Y6B: &str = "2001:db8:64::c633:6408";
pub const T4: &str = "192.0.2.1";

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const FIN: u8 = 0x01;
pub const RST: u8 = 0x04;

pub fn cfg() -> Config {
    let mut c: Config = toml::from_str(
        r#"
        pool6 = "2001:db8:64::/96"
        pool4 = ["192.0.2.1/32"]
        "#,
    )
    .unwrap();
    c.shards = 4;
    c
}

pub fn nat(c: Config) -> Nat64 {
    Nat64::new(c).expect("valid config")
}

/// Translate; validate every emitted packet; return the packets.
pub fn run(n: &Nat64, pkt: &[u8], now: u64) -> (Verdict, Vec<(PacketKind, Vec<u8>)>) {
    let mut out = Out::new();
    let v = n.translate(pkt, now, &mut out);
    let pkts: Vec<_> = out.iter().map(|(k, p)| (k, p.to_vec())).collect();
    for (_, p) in &pkts {
        check(p);
    }
    match v {
        Verdict::Emit => assert!(!pkts.is_empty()),
        Verdict::Drop(_) => assert!(pkts.is_empty()),
    }
    (v, pkts)
}

pub fn fwd(n: &Nat64, pkt: &[u8], now: u64) -> Vec<u8> {
    let (v, p) = run(n, pkt, now);
    assert_eq!(v, Verdict::Emit, "expected a translation");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, PacketKind::Forward);
    p[0].1.clone()
}

pub fn icmp_err(n: &Nat64, pkt: &[u8], now: u64) -> Vec<u8> {
    let (v, p) = run(n, pkt, now);
    assert_eq!(v, Verdict::Emit, "expected an ICMP error");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, PacketKind::IcmpError);
    p[0].1.clone()
}

pub fn dropped(n: &Nat64, pkt: &[u8], now: u64) -> DropReason {
    match run(n, pkt, now).0 {
        Verdict::Drop(r) => r,
        Verdict::Emit => panic!("expected a drop"),
    }
}

pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
pub fn v4src(p: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(p[12], p[13], p[14], p[15])
}
pub fn v4dst(p: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(p[16], p[17], p[18], p[19])
}
pub fn v6src(p: &[u8]) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).unwrap())
}
pub fn v6dst(p: &[u8]) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).unwrap())
}
pub fn a4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
pub fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// RFC 6146 §3.5.2.2: `syn` (at time 0) is held; nothing comes of it at
/// 5 s, and at 6 s (TCP_INCOMING_SYN) expiry emits one ICMP error,
/// returned (validated).
pub fn held_syn_error(n: &Nat64, syn: &[u8]) -> Vec<u8> {
    assert_eq!(dropped(n, syn, 0), DropReason::SynHeld);
    assert_eq!(n.stats().held_syns, 1);
    assert!(n.expire(5 * S).icmp.is_empty());
    let e = n.expire(6 * S);
    assert_eq!(e.icmp.len(), 1);
    check(&e.icmp[0]);
    assert_eq!(n.stats().held_syns, 0);
    e.icmp[0].clone()
}
