//! Not a benchmark (that is `v6gate bench xlat`): a manual, `#[ignore]`d
//! measurement aid for the daemon's I/O modes. It floods UDP 6->4 through
//! SIIT for 3 s and prints the CPU time the translator process used per
//! packet that entered its device (user + system, so including the kernel
//! work of the TUN writes), for TAYGA and for v6gate with `io = "uring"`
//! and `io = "poll"`, 1 queue each. Run it as root against a release build:
//!
//! ```sh
//! cargo build --release && V6GATE_BIN=target/release/v6gate \
//!   cargo test --test daemon_cpu_per_packet -- --ignored --nocapture
//! ```

mod daemon_util;
use daemon_util::*;
use std::time::{Duration, Instant};

fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn send(lab: &Lab) -> u64 {
    let h6 = &lab.h6;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|k| {
                s.spawn(move || {
                    h6.enter_thread().unwrap();
                    let sock = std::net::UdpSocket::bind("[::]:0").unwrap();
                    let payload = [0u8; 18];
                    let dsts: Vec<std::net::SocketAddr> = (0..64u16)
                        .map(|p| format!("[2001:db8:64::c633:6402]:{}", 9000 + p + 100 * k).parse().unwrap())
                        .collect();
                    let t0 = Instant::now();
                    let mut n = 0u64;
                    while t0.elapsed() < Duration::from_secs(3) {
                        for d in &dsts {
                            let _ = sock.send_to(&payload, d);
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    })
}

fn link_pkts(lab: &Lab, dev: &str) -> (u64, u64) {
    let o = String::from_utf8_lossy(&lab.gw.ip(&["-s", "link", "show", dev]).unwrap().stdout).into_owned();
    let l: Vec<&str> = o.lines().collect();
    let rx: u64 = l[3].split_whitespace().nth(1).unwrap().parse().unwrap();
    let tx: u64 = l[5].split_whitespace().nth(1).unwrap().parse().unwrap();
    (rx, tx)
}

fn v6gate(io: &str) {
    let cfg = format!("[siit]\npool6 = \"2001:db8:64::/96\"\neamt = [[\"2001:db8:1::2\", \"192.0.2.2\"]]\n[tun]\nqueues = 1\nio = \"{io}\"\n");
    let lab = Lab::start(&cfg);
    // h4 must not answer with port unreachables (they would come back through).
    lab.h4.exec("sysctl", &["-qw", "net.ipv4.icmp_ratelimit=1000000000"]).unwrap();
    let pid = lab.daemon.as_ref().unwrap().id();
    let (_, t0) = link_pkts(&lab, "v6gate0");
    let c0 = cpu_ticks(pid);
    let sent = send(&lab);
    std::thread::sleep(Duration::from_millis(300));
    let (_, t1) = link_pkts(&lab, "v6gate0");
    let cpu = (cpu_ticks(pid) - c0) as f64 / 100.0;
    let n = t1 - t0;
    assert!(n > 0, "nothing reached the daemon");
    eprintln!(
        "RATE v6gate io={io}: sent {sent}, into device {n}, cpu {cpu:.2} s => {:.2} us/packet",
        cpu * 1e6 / n as f64
    );
}

fn tayga() {
    let lab = Lab::start("[siit]\npool6 = \"2001:db8:64::/96\"\n[tun]\nname = \"unused0\"\nauto-routes = false\n");
    lab.h4.exec("sysctl", &["-qw", "net.ipv4.icmp_ratelimit=1000000000"]).unwrap();
    let conf = lab.dir.path().join("tayga.conf");
    std::fs::write(&conf, format!("tun-device tayga0\nipv4-addr 192.0.2.1\nipv6-addr 2001:db8:1::100\nprefix 2001:db8:64::/96\nmap 192.0.2.2 2001:db8:1::2\ndata-dir {}\n", lab.dir.path().display())).unwrap();
    let c = conf.to_string_lossy().to_string();
    lab.gw.exec("tayga", &["-c", &c, "--mktun"]).unwrap();
    lab.gw.ip(&["link", "set", "tayga0", "up"]).unwrap();
    lab.gw.ip(&["route", "add", "2001:db8:64::/96", "dev", "tayga0"]).unwrap();
    lab.gw.ip(&["route", "add", "192.0.2.0/24", "dev", "tayga0"]).unwrap();
    let mut child = lab
        .gw
        .command("tayga")
        .args(["-c", &c, "-d"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(ping(&lab.h6, "2001:db8:64::c633:6402", &[]).0);
    let pid = child.id();
    let (_, t0) = link_pkts(&lab, "tayga0");
    let c0 = cpu_ticks(pid);
    let sent = send(&lab);
    std::thread::sleep(Duration::from_millis(300));
    let (_, t1) = link_pkts(&lab, "tayga0");
    let cpu = (cpu_ticks(pid) - c0) as f64 / 100.0;
    let n = t1 - t0;
    assert!(n > 0, "nothing reached TAYGA");
    eprintln!("RATE tayga: sent {sent}, into device {n}, cpu {cpu:.2} s => {:.2} us/packet", cpu * 1e6 / n as f64);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
#[ignore]
fn cpu_per_packet_tayga_uring_poll() {
    lab::need_root_and_programs!("tayga");
    for _ in 0..2 {
        tayga();
        v6gate("uring");
        v6gate("poll");
    }
}
