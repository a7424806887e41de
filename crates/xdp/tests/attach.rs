//! Attaching and detaching through bpf_link: native, generic, off, errors,
//! and that a detached interface really has no XDP program (`ip link`).

mod support;

use support::Net;
use xdp::{Error, Mode};

fn xdp_shown(net: &Net, iface: &str) -> String {
    let out = net.ns.ip(&["-d", "link", "show", iface]).expect("ip link show");
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    s.lines().filter(|l| l.contains("xdp") || l.contains("prog/")).collect::<Vec<_>>().join("\n")
}

#[test]
fn attach_modes_and_detach() {
    lab::need_root!();
    let mut net = Net::new("xdp-attach");
    assert!(xdp_shown(&net, "x4").is_empty(), "no program before");
    let a = net.fp.attach("x4", Mode::Generic).unwrap().expect("attached");
    assert_eq!((a.mode, a.ifindex, a.fallback.clone()), (Mode::Generic, net.if4, None));
    assert!(xdp_shown(&net, "x4").contains("xdpgeneric"), "generic program shown: {}", xdp_shown(&net, "x4"));
    assert!(matches!(net.fp.attach("x4", Mode::Native), Err(Error::Interface(_))), "twice");
    let a = net.fp.attach("x6", Mode::Native).unwrap().expect("attached");
    assert_eq!(a.mode, Mode::Native, "veth takes native XDP");
    assert!(net.fp.attach("lo", Mode::Off).unwrap().is_none(), "off attaches nothing");
    assert!(xdp_shown(&net, "lo").is_empty());
    assert!(matches!(net.fp.attach("no-such-if", Mode::Native), Err(Error::Interface(_))));
    assert!(matches!(net.fp.attach_program("x6p", Mode::Native, "xdp_nope"), Err(Error::Config(_))));
    assert!(net.fp.detach("x4").unwrap());
    assert!(!net.fp.detach("x4").unwrap(), "already detached");
    assert!(xdp_shown(&net, "x4").is_empty(), "program gone after detach: {}", xdp_shown(&net, "x4"));
    // Native on an interface without driver support falls back to generic.
    let a = net.fp.attach("lo", Mode::Native).unwrap().expect("attached");
    assert_eq!(a.mode, Mode::Generic, "loopback has no native XDP: generic");
    assert!(a.fallback.is_some(), "the reason is kept");
    net.fp.detach_all().unwrap();
    assert!(net.fp.attachments().is_empty());
    for i in ["x6", "lo"] {
        assert!(xdp_shown(&net, i).is_empty(), "{i}: {}", xdp_shown(&net, i));
    }
}

/// Every mirrored table is bounded: a full one refuses the entry with
/// `MapFull` (that flow stays on the slow path) and keeps the others.
#[test]
fn bounded_maps() {
    lab::need_root!();
    let limits = xdp::Limits { nat64_sessions: 2, trgw_relays: 1, eamt: 1, ..xdp::Limits::default() };
    let mut fp = xdp::FastPath::load(limits).unwrap_or_else(|e| panic!("{e}"));
    let s = |port: u16| xdp::nat64::Session {
        l4: xdp::nat64::L4::Udp,
        x: format!("[2001:db8::1]:{port}").parse().unwrap(),
        y6: "[64:ff9b::c633:6407]:53".parse().unwrap(),
        t: format!("192.0.2.1:{port}").parse().unwrap(),
        y: "198.51.100.7:53".parse().unwrap(),
        half_open: false,
    };
    for (k, v) in s(1000).entries() {
        fp.nat64_insert(&k, &v).unwrap();
    }
    let [(k, v), _] = s(1001).entries();
    assert_eq!(fp.nat64_insert(&k, &v), Err(Error::MapFull("nat64_sessions")));
    let [(k0, _), _] = s(1000).entries();
    assert!(fp.nat64_get(&k0).unwrap().is_some(), "the entries already there stay");
    let leg = |port: u16| xdp::trgw::Leg {
        local: format!("192.0.2.1:{port}").parse().unwrap(),
        latched: "198.51.100.7:5004".parse().unwrap(),
        out_local: "[2001:db8::1]:30000".parse().unwrap(),
        out_peer: Some("[2001:db8::9]:4000".parse().unwrap()),
        stats_index: 0,
    };
    let (k, v) = leg(30002).entry().unwrap();
    fp.relay_insert(&k, &v).unwrap();
    let (k, v) = leg(30004).entry().unwrap();
    assert_eq!(fp.relay_insert(&k, &v), Err(Error::MapFull("trgw_relay")));
    let (k, mut v) = leg(30002).entry().unwrap();
    v.stats_index = xdp::Limits::default().trgw_stats;
    assert!(matches!(fp.relay_insert(&k, &v), Err(Error::Config(_))), "stats index beyond trgw-stats");
    let cfg = xlat::siit::Config {
        pool6: Some("64:ff9b::/96".parse().unwrap()),
        eamt: vec![
            ("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap()),
            ("2001:db8:7::/120".parse().unwrap(), "203.0.113.0/24".parse().unwrap()),
        ],
        ..Default::default()
    };
    assert!(matches!(fp.set_siit(&cfg), Err(Error::Config(_))), "EAMT beyond the limit");
    assert!(matches!(xdp::FastPath::load(xdp::Limits { eamt: 0, ..limits }), Err(Error::Config(_))));
}
