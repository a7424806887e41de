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
