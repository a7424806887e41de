//! A tunnel function run by `v6gate run` (not `v6gate tunnel`): a 6to4
//! relay (RFC 3056 / RFC 3068 at a configured address) in the gateway
//! namespace of the daemon testbed, with the IPv4 host playing a 6to4 site
//! over raw protocol-41 sockets and the IPv6 host the native side. Checks
//! that packets cross both ways intact, that a spoofed site is dropped, and
//! that `/metrics` (`v6gate_tunnel_*` by function and reason/event) and
//! `/status` show it; that a reload changing the tunnel table is refused
//! (restart to apply) while the relay keeps running; that SIGTERM removes
//! the tunnel's device.

mod daemon_util;

use std::io::Read as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use daemon_util::{in_ns, Lab, H6};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The 6to4 address of the IPv4 host 198.51.100.2.
const SITE: &str = "2002:c633:6402::1";
const CFG: &str = "[sixtofour]\nmode = \"relay\"\naddress = \"198.51.100.1\"\ntun = \"v6g-6to4\"\n";

/// An IPv6 UDP packet with a valid checksum.
fn udp6(src: &str, dst: &str, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let (s, d): (Ipv6Addr, Ipv6Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    let b = etherparse::PacketBuilder::ipv6(s.octets(), d.octets(), 64).udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).unwrap();
    out
}

fn raw41(lab: &Lab) -> Socket {
    let s = in_ns(&lab.h4, || Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(41))).unwrap());
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    s
}

#[test]
fn sixtofour_relay_under_the_daemon_reports_through_metrics_status_and_reload() {
    lab::need_root!();
    let mut lab = Lab::start(CFG);
    let st = lab.status();
    assert!(st["functions"].as_array().unwrap().iter().any(|f| f == "sixtofour"), "{st}");
    assert!(st["device"].is_null(), "no translator: no [tun] device");
    let raw = raw41(&lab);
    let relay = SockAddr::from(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 1), 0));

    // Site -> native: decapsulated by the relay, forwarded to the IPv6 host.
    let host = in_ns(&lab.h6, || UdpSocket::bind("[::]:7300").unwrap());
    host.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let payload: Vec<u8> = (0..600u32).map(|i| (i * 7) as u8).collect();
    let pkt = udp6(SITE, H6, 5000, 7300, &payload);
    let mut got = None;
    let t0 = Instant::now();
    while got.is_none() && t0.elapsed() < Duration::from_secs(10) {
        raw.send_to(&pkt, &relay).unwrap();
        let mut b = [0u8; 2048];
        if let Ok((n, from)) = host.recv_from(&mut b) {
            got = Some((b[..n].to_vec(), from));
        }
    }
    let (data, from) = got.expect("the native host never received the site's packet");
    assert_eq!(data, payload);
    assert_eq!(from.ip().to_string(), SITE);

    // Native -> site: routed into the relay's device, encapsulated to 198.51.100.2.
    let back: Vec<u8> = (0..300u32).map(|i| (i * 3) as u8).collect();
    let mut seen = false;
    let t0 = Instant::now();
    while !seen && t0.elapsed() < Duration::from_secs(10) {
        host.send_to(&back, format!("[{SITE}]:5000")).unwrap();
        let mut b = [0u8; 2048];
        if let Ok(n) = (&raw).read(&mut b) {
            let b = &b[..n];
            let ihl = usize::from(b[0] & 0xf) * 4;
            let inner = &b[ihl..];
            seen = b[9] == 41 && inner.len() >= 48 && inner[48..] == back[..];
        }
    }
    assert!(seen, "the site never received the native host's packet in protocol 41");

    // A spoofed site (inner source embeds 192.0.2.9, outer source is 198.51.100.2): dropped, counted.
    raw.send_to(&udp6("2002:c000:209::1", H6, 5000, 7300, b"spoof"), &relay).unwrap();
    let dropped = r#"v6gate_tunnel_dropped_packets_total{function="sixtofour",reason="spoofed"}"#;
    assert_eq!(lab.wait_metric(dropped, |v| v >= 1), 1, "{}", lab.ctl(&["metrics"]).unwrap());
    let decap = r#"v6gate_tunnel_events_total{function="sixtofour",event="decapsulated"}"#;
    assert!(lab.wait_metric(decap, |v| v >= 1) >= 1);
    let encap = r#"v6gate_tunnel_events_total{function="sixtofour",event="encapsulated"}"#;
    assert!(lab.wait_metric(encap, |v| v >= 1) >= 1);
    assert_eq!(lab.metric(r#"v6gate_tunnel_up{function="sixtofour"}"#), 1);
    // Whatever the kernel itself sends on the new device (MLD, solicitations)
    // is counted as link-scope, never as a loop.
    assert_eq!(lab.metric(r#"v6gate_tunnel_dropped_packets_total{function="sixtofour",reason="loop"}"#), 0);
    let st = lab.status();
    assert!(st["tunnels"]["sixtofour"]["counters"]["drop_spoofed"].as_u64().unwrap() >= 1, "{st}");

    // A reload that changes the tunnel table is refused; the relay keeps running.
    lab.write_config(&CFG.replace("relay\"\n", "relay\"\nttl = 32\n"));
    let e = lab.ctl(&["reload"]).unwrap_err();
    assert!(e.contains("restart v6gate to apply"), "{e}");
    assert_eq!(lab.metric(r#"v6gate_config_reloads_total{result="error"}"#), 1);
    raw.send_to(&pkt, &relay).unwrap();
    let mut b = [0u8; 2048];
    let t0 = Instant::now();
    let mut again = false;
    while !again && t0.elapsed() < Duration::from_secs(10) {
        again = host.recv_from(&mut b).is_ok_and(|(n, _)| b[..n] == payload[..]);
        if !again {
            raw.send_to(&pkt, &relay).unwrap();
        }
    }
    assert!(again, "the relay stopped after a refused reload");

    // SIGTERM: the daemon stops and the tunnel's device is gone.
    let (status, log) = lab.stop();
    assert!(status.success(), "{log}");
    let links = lab.gw.ip(&["-o", "link", "show"]).unwrap();
    assert!(!String::from_utf8_lossy(&links.stdout).contains("v6g-6to4"), "device left behind");
}
