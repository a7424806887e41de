//! Network-namespace tests of the lab: `up`/`down` are idempotent and
//! survive a crashed run, and the lab carries traffic through TAYGA (when
//! installed). The bench's own namespace tests are in crates/bench/tests.
//!
//! Each test uses its own namespace prefix (`netns::unique_name`) and
//! removes its namespaces, also when it fails (`PrefixGuard`).

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::Duration;

use lab::netns::{self, unique_name, Netns, PrefixGuard};
use lab::topo::{lab_addr, Lab};

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn lab_up_is_idempotent_and_down_removes_everything_even_after_a_crash() {
    lab::need_root!();
    let prefix = unique_name("v6lt");
    let _guard = PrefixGuard(prefix.clone());
    let lab = Lab::new(&prefix);
    lab.up().unwrap();
    assert!(lab.is_up());
    // Up again over a running lab: rebuilt, not an error.
    lab.up().unwrap();
    assert!(lab.is_up());
    // The links and routes work: both hosts reach the gateway.
    let h6 = Netns::attach(&lab.h6());
    let h4 = Netns::attach(&lab.h4());
    h6.exec("ping", &["-c1", "-W2", &lab_addr::GW6.to_string()]).unwrap();
    h4.exec("ping", &["-c1", "-W2", &lab_addr::GW4.to_string()]).unwrap();
    // h4 is IPv4-only.
    let v6 = h4.exec("cat", &["/proc/sys/net/ipv6/conf/all/disable_ipv6"]).unwrap();
    assert_eq!(String::from_utf8_lossy(&v6.stdout).trim(), "1");

    // A "crashed" run: a process left inside the gateway namespace and a
    // stray namespace of the lab. `up` clears both and rebuilds.
    let mut orphan = Netns::attach(&lab.gw()).command("sleep").arg("60").spawn().unwrap();
    assert!(wait_until(|| !Netns::attach(&lab.gw()).pids().is_empty()));
    let stray = format!("{prefix}-stray");
    Netns::create(&stray).unwrap().keep();
    lab.up().unwrap();
    assert!(!netns::exists(&stray), "up removes leftovers of a crashed run");
    assert!(!orphan.wait().unwrap().success(), "the old gateway process was killed");
    assert!(Netns::attach(&lab.gw()).pids().is_empty());

    // Down: everything gone, twice is fine.
    let mut sleeper = Netns::attach(&lab.h6()).command("sleep").arg("60").spawn().unwrap();
    assert!(wait_until(|| !Netns::attach(&lab.h6()).pids().is_empty()));
    let gone = lab.down();
    assert_eq!(gone.len(), 3, "{gone:?}");
    assert!(!lab.is_up());
    for n in [lab.h6(), lab.gw(), lab.h4()] {
        assert!(!netns::exists(&n), "{n} left behind");
    }
    assert!(!sleeper.wait().unwrap().success(), "processes in the lab are killed");
    assert!(lab.down().is_empty());
}

#[test]
fn lab_with_tayga_carries_tcp_udp_and_ping_both_ways() {
    lab::need_root_and_programs!("tayga");
    let prefix = unique_name("v6lg");
    let _guard = PrefixGuard(prefix.clone());
    let lab = Lab::new(&prefix);
    lab.up().unwrap();
    let work = std::env::temp_dir().join(&prefix);
    std::fs::create_dir_all(&work).unwrap();
    lab::cli::start_gateway(&lab, lab::cli::Gateway::Tayga, std::path::Path::new("unused"), &work).unwrap();

    // The demo services on h4, on threads inside its namespace.
    let (tx, rx) = std::sync::mpsc::channel();
    let h4name = lab.h4();
    std::thread::spawn(move || {
        Netns::attach(&h4name).enter_thread().unwrap();
        let http = TcpListener::bind("0.0.0.0:80").unwrap();
        let echo = UdpSocket::bind("0.0.0.0:7").unwrap();
        tx.send(()).unwrap();
        std::thread::spawn(move || lab::services::serve_echo(echo));
        let _ = lab::services::serve_http(http);
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();

    // The client on h6, through the NAT64 prefix.
    let h6name = lab.h6();
    let (page, echo) = std::thread::spawn(move || {
        Netns::attach(&h6name).enter_thread().unwrap();
        let server = lab_addr::in_pool6(lab_addr::H4);
        let page = lab::services::http_get(SocketAddr::new(server.into(), 80)).unwrap();
        let echo = lab::services::udp_echo(SocketAddr::new(server.into(), 7), "hi").unwrap();
        (page, echo)
    })
    .join()
    .unwrap();
    assert!(page.starts_with("HTTP/1.0 200 OK"), "{page}");
    assert!(page.contains(&format!("seen here: {}:", lab_addr::H6_AS_V4)), "{page}");
    assert_eq!(echo.0, "hi");
    // SIIT: ping both ways.
    Netns::attach(&lab.h6()).exec("ping", &["-c1", "-W2", &lab_addr::in_pool6(lab_addr::H4).to_string()]).unwrap();
    Netns::attach(&lab.h4()).exec("ping", &["-c1", "-W2", &lab_addr::H6_AS_V4.to_string()]).unwrap();
    assert_eq!(lab.down().len(), 3);
    let _ = std::fs::remove_dir_all(&work);
}
