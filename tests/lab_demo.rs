//! End to end through the `v6gate` binary: `v6gate lab run` builds the lab
//! with v6gate as the gateway, and from the IPv6-only host the demo's steps
//! work — DNS64 synthesises the IPv4-only server's AAAA record, TCP and UDP
//! reach it through NAT64 (it sees a pool4 address), ping works both ways
//! through SIIT. Then the gateway is killed (a crash) and `v6gate lab down`
//! still removes everything. Needs root; uses its own namespace prefix.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_v6gate");

fn v6gate(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run v6gate")
}

fn ok(args: &[&str]) -> String {
    let o = v6gate(args);
    assert!(
        o.status.success(),
        "v6gate {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = v6gate(&["lab", "down", "--prefix", &self.0]);
    }
}

#[test]
fn lab_run_dns64_nat64_siit_and_down_after_a_crash() {
    lab::need_root!();
    let prefix = format!("v6ld-{}", std::process::id());
    let _down = Down(prefix.clone());
    let p = prefix.as_str();
    let out = ok(&["lab", "run", "--prefix", p, "--gateway", "v6gate"]);
    assert!(out.contains("gateway: v6gate"), "{out}");
    let env = std::fs::read_to_string(format!("/run/{p}/lab.env")).unwrap();
    assert!(env.contains("LAB_HAS_NAT64=stateful") && env.contains("LAB_HAS_DNS64=yes"), "{env}");

    let aaaa = ok(&["lab", "--prefix", p, "client", "dns", "server.lab.example."]);
    assert_eq!(aaaa.trim(), "server.lab.example. AAAA 2001:db8:64::c633:6402");
    let page = ok(&["lab", "--prefix", p, "client", "tcp", "2001:db8:64::c633:6402"]);
    assert!(page.contains("your address as seen here: 203.0.113."), "NAT64 pool4 source: {page}");
    let echo = ok(&["lab", "--prefix", p, "client", "udp", "2001:db8:64::c633:6402", "--msg", "x1"]);
    assert_eq!(echo.trim(), "echo from [2001:db8:64::c633:6402]:7: x1");
    // SIIT through the EAMT, both ways.
    ok(&["lab", "--prefix", p, "exec", "h6", "--", "ping", "-c1", "-W2", "2001:db8:4::2"]);
    ok(&["lab", "--prefix", p, "exec", "h4", "--", "ping", "-c1", "-W2", "192.0.2.2"]);
    let page = ok(&["lab", "--prefix", p, "client", "tcp", "2001:db8:4::2"]);
    assert!(page.contains("your address as seen here: 192.0.2.2:"), "SIIT source: {page}");

    // The status lists the gateway; kill it hard (a crash), then down.
    let status = ok(&["lab", "status", "--prefix", p]);
    let pid: i32 = status
        .lines()
        .find(|l| l.contains(" run --config "))
        .and_then(|l| l.trim().strip_prefix("pid ")?.split(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("gateway process in status: {status}"));
    assert_eq!(kill9(pid), 0);
    let down = ok(&["lab", "down", "--prefix", p]);
    assert!(down.contains(&format!("{p}-gw")), "{down}");
    for n in ["h6", "gw", "h4"] {
        assert!(!std::path::Path::new(&format!("/run/netns/{p}-{n}")).exists(), "{n} left behind");
    }
    assert_eq!(v6gate(&["lab", "status", "--prefix", p]).status.code(), Some(3), "status: no lab");
}

fn kill9(pid: i32) -> i32 {
    Command::new("kill").args(["-9", &pid.to_string()]).status().map_or(1, |s| s.code().unwrap_or(1))
}
