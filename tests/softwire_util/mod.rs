//! Shared by the softwire namespace tests (`softwire_netns`,
//! `hardening_softwire`): `v6gate softwire` processes with status files,
//! and the three-namespace testbed.
//!
//! ```text
//!  b4 ns                          aftr ns                            h4 ns
//!  B4 runner (v6gate-b4)   veth   AFTR / lwAFTR runner        veth   198.51.100.1
//!  2001:db8:ff::2/64  ---------- 2001:db8:ff::1/64            ------ 198.51.100.254/24
//!  softwire 2001:db8:1::2         end-point 2001:db8:ffff::1
//! ```
#![allow(dead_code)]

use crate::daemon_util::bin;
use lab::netns::{veth, Netns};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

pub const SERVER: &str = "198.51.100.1";

pub struct Proc {
    child: Option<Child>,
    status: PathBuf,
    log: PathBuf,
}

impl Proc {
    pub fn start(ns: &Netns, dir: &Path, name: &str, config: &str) -> Proc {
        let cfg = dir.join(format!("{name}.toml"));
        std::fs::write(&cfg, config).unwrap();
        let status = dir.join(format!("{name}.json"));
        let log = dir.join(format!("{name}.log"));
        let _ = std::fs::remove_file(&status);
        let child = ns
            .command(&bin())
            .args(["softwire", "--config", cfg.to_str().unwrap(), "--status-file", status.to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let p = Proc { child: Some(child), status, log };
        p.wait_status(|v| !v.as_object().is_none_or(|o| o.is_empty()));
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn status(&self) -> serde_json::Value {
        std::fs::read_to_string(&self.status).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default()
    }

    /// Wait (up to 15 s) until the status file satisfies `pred`.
    pub fn wait_status(&self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        self.wait_status_for(Duration::from_secs(15), pred)
    }

    /// Wait (up to `limit`) until the status file satisfies `pred`.
    pub fn wait_status_for(&self, limit: Duration, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let v = self.status();
            if pred(&v) {
                return v;
            }
            assert!(t0.elapsed() < limit, "status never matched: {v}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child (`ip netns exec` execs v6gate).
        unsafe { libc::kill(self.child.as_ref().unwrap().id() as i32, sig) };
    }

    pub fn stop(mut self) -> String {
        self.signal(libc::SIGTERM);
        let mut c = self.child.take().unwrap();
        let t0 = Instant::now();
        while c.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(10), "did not stop: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(c.wait().unwrap().success(), "{}", self.log());
        self.log()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub struct Bed {
    pub b4: Netns,
    pub aftr: Netns,
    pub h4: Netns,
    pub dir: tempfile::TempDir,
}

pub fn bed() -> Bed {
    assert!(lab::netns::am_root(), "network-namespace tests need root (CI runs as root)");
    let b4 = Netns::unique("sw-b4").unwrap();
    let aftr = Netns::unique("sw-af").unwrap();
    let h4 = Netns::unique("sw-h4").unwrap();
    for ns in [&b4, &aftr, &h4] {
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    }
    veth(&b4, "w6", &aftr, "a6").unwrap();
    veth(&h4, "s4", &aftr, "a4").unwrap();
    b4.ip(&["addr", "add", "2001:db8:ff::2/64", "dev", "w6", "nodad"]).unwrap();
    aftr.ip(&["addr", "add", "2001:db8:ff::1/64", "dev", "a6", "nodad"]).unwrap();
    b4.ip(&["-6", "route", "add", "2001:db8:ffff::/48", "via", "2001:db8:ff::1"]).unwrap();
    aftr.ip(&["-6", "route", "add", "2001:db8:1::/48", "via", "2001:db8:ff::2"]).unwrap();
    h4.ip(&["addr", "add", "198.51.100.1/24", "dev", "s4"]).unwrap();
    aftr.ip(&["addr", "add", "198.51.100.254/24", "dev", "a4"]).unwrap();
    h4.ip(&["route", "add", "default", "via", "198.51.100.254"]).unwrap();
    Bed { b4, aftr, h4, dir: tempfile::tempdir().unwrap() }
}

pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}
