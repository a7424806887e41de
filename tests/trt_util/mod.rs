//! Shared by the TRT namespace tests (`trt_netns`, `hardening_trt`): an
//! IPv6-only client namespace, the relay (`v6gate trt`) and an IPv4-only
//! server namespace.
//!
//! ```text
//!  h6 ns                      gw ns (v6gate trt)                   h4 ns
//!  2001:db8:1::2/64  ------  2001:db8:1::1/64  198.51.100.254/24 ------ 198.51.100.1/24
//!  64:ff9b:1::/96 via gw
//! ```
#![allow(dead_code)]

use crate::daemon_util::bin;
use lab::netns::{veth, Netns};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// 198.51.100.1 behind the relay prefix.
pub const SERVER6: &str = "64:ff9b:1::c633:6401";

pub struct Bed {
    pub h6: Netns,
    pub gw: Netns,
    pub h4: Netns,
    pub dir: tempfile::TempDir,
    pub relay: Option<Child>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.relay.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Bed {
    pub fn status(&self) -> serde_json::Value {
        std::fs::read_to_string(self.dir.path().join("trt.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    }

    pub fn wait_status(&self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let v = self.status();
            if pred(&v["trt"]) {
                return v;
            }
            assert!(t0.elapsed() < Duration::from_secs(15), "status never matched: {v}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("trt.log")).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        let c = self.relay.as_mut().unwrap();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while c.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(10), "relay did not stop: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        self.relay = None;
    }
}

pub fn bed(extra: &str) -> Bed {
    let b = spawn_bed(extra);
    b.wait_status(|v| v.is_object());
    b
}

/// The namespaces and the relay started with `extra` in its `[trt]`,
/// without waiting for it.
pub fn spawn_bed(extra: &str) -> Bed {
    assert!(lab::netns::am_root(), "network-namespace tests need root (CI runs as root)");
    let h6 = Netns::unique("trt-h6").unwrap();
    let gw = Netns::unique("trt-gw").unwrap();
    let h4 = Netns::unique("trt-h4").unwrap();
    for ns in [&h6, &gw, &h4] {
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
    }
    veth(&h6, "c6", &gw, "g6").unwrap();
    veth(&h4, "s4", &gw, "g4").unwrap();
    h6.ip(&["addr", "add", "2001:db8:1::2/64", "dev", "c6", "nodad"]).unwrap();
    gw.ip(&["addr", "add", "2001:db8:1::1/64", "dev", "g6", "nodad"]).unwrap();
    h6.ip(&["-6", "route", "add", "64:ff9b:1::/96", "via", "2001:db8:1::1"]).unwrap();
    h4.ip(&["addr", "add", "198.51.100.1/24", "dev", "s4"]).unwrap();
    gw.ip(&["addr", "add", "198.51.100.254/24", "dev", "g4"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("trt.toml");
    std::fs::write(&cfg, format!("[trt]\nprefix = \"64:ff9b:1::/96\"\n{extra}")).unwrap();
    let relay = gw
        .command(&bin())
        .args([
            "trt",
            "--config",
            cfg.to_str().unwrap(),
            "--status-file",
            dir.path().join("trt.json").to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("trt.log")).unwrap())
        .spawn()
        .unwrap();
    Bed { h6, gw, h4, dir, relay: Some(relay) }
}

pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}
