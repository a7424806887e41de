//! The tproxy plumbing (`setup = "auto"`): an nftables table whose
//! prerouting rule hands the relay prefix's TCP and UDP to the relay's
//! transparent sockets (`tproxy`, built into this kernel: no module to
//! load), and policy routing that delivers marked packets locally:
//!
//! ```text
//! table ip6 v6gate_trt {
//!     chain prerouting {
//!         type filter hook prerouting priority mangle; policy accept;
//!         ip6 daddr PREFIX meta l4proto tcp meta mark set MARK tproxy to :TCP-PORT accept
//!         ip6 daddr PREFIX meta l4proto udp meta mark set MARK tproxy to :UDP-PORT accept
//!     }
//! }
//! ip -6 rule add fwmark MARK lookup TABLE
//! ip -6 route add local ::/0 dev lo table TABLE
//! ```
//!
//! The same commands, run by hand, are the `setup = "none"` recipe.
//! [`Plumbing`] removes all of it when dropped.

use crate::config::TrtConfig;
use anyhow::{bail, Context as _, Result};
use std::io::Write as _;
use std::process::{Command, Stdio};

/// The nftables table's name.
pub const TABLE: &str = "v6gate_trt";

/// The nftables script for `c`.
pub fn nft_script(c: &TrtConfig) -> String {
    let p = c.prefix.prefix();
    format!(
        "table ip6 {TABLE} {{\n  chain prerouting {{\n    type filter hook prerouting priority mangle; policy accept;\n    \
         ip6 daddr {p} meta l4proto tcp meta mark set {m} tproxy to :{t} accept\n    \
         ip6 daddr {p} meta l4proto udp meta mark set {m} tproxy to :{u} accept\n  }}\n}}\n",
        m = c.fwmark,
        t = c.tcp_port,
        u = c.udp_port,
    )
}

fn run(cmd: &str, args: &[&str], stdin: Option<&str>) -> Result<()> {
    let mut c = Command::new(cmd)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cmd} (is it installed?)"))?;
    if let (Some(text), Some(mut i)) = (stdin, c.stdin.take()) {
        i.write_all(text.as_bytes())?;
    }
    let out = c.wait_with_output()?;
    if !out.status.success() {
        bail!("`{cmd} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The installed plumbing; removed on drop.
#[derive(Debug)]
pub struct Plumbing {
    mark: String,
    table: String,
}

impl Plumbing {
    /// Install it (replacing a stale table of ours).
    pub fn install(c: &TrtConfig) -> Result<Plumbing> {
        let _ = run("nft", &["delete", "table", "ip6", TABLE], None);
        let p = Plumbing { mark: c.fwmark.to_string(), table: c.table.to_string() };
        p.remove_routing();
        run("nft", &["-f", "-"], Some(&nft_script(c))).context("installing the tproxy rule")?;
        run("ip", &["-6", "rule", "add", "fwmark", &p.mark, "lookup", &p.table], None)?;
        run("ip", &["-6", "route", "add", "local", "::/0", "dev", "lo", "table", &p.table], None)?;
        Ok(p)
    }

    fn remove_routing(&self) {
        while run("ip", &["-6", "rule", "del", "fwmark", &self.mark, "lookup", &self.table], None).is_ok() {}
        let _ = run("ip", &["-6", "route", "flush", "table", &self.table], None);
    }
}

impl Drop for Plumbing {
    fn drop(&mut self) {
        let _ = run("nft", &["delete", "table", "ip6", TABLE], None);
        self.remove_routing();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_names_prefix_ports_and_mark() {
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\ntcp-port = 81\nudp-port = 82\nfwmark = 7\n")
            .unwrap()
            .unwrap();
        let s = nft_script(&c);
        assert!(s.contains("ip6 daddr 64:ff9b:1::/96 meta l4proto tcp meta mark set 7 tproxy to :81 accept"), "{s}");
        assert!(s.contains("meta l4proto udp meta mark set 7 tproxy to :82 accept"), "{s}");
        assert!(s.starts_with("table ip6 v6gate_trt {"));
    }
}
