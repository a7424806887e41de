//! `v6gate ctl`: a small client of the admin HTTP API (plain HTTP/1.0 over
//! a TCP connection; the daemon's admin address, 127.0.0.1:9164 by default).
//! Prints the JSON the daemon answers (pretty-printed), or the metrics text.
//!
//! The token (`Authorization: Bearer`) comes from `--token-file`, else the
//! `V6GATE_ADMIN_TOKEN` environment variable, else the `[admin] token` or
//! `token-file` of the configuration given with `--config`, or of
//! `/etc/v6gate/v6gate.toml` when that exists (which also gives the admin
//! address when `--admin` is not set).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};

use crate::config::DEFAULT_ADMIN_LISTEN;

/// `v6gate ctl` arguments.
// The doc comments are `--help` text: `[table]` names a TOML table, not an item.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Admin API address of the daemon ([admin] listen; default the one of
    /// --config, else 127.0.0.1:9164).
    #[arg(long, value_name = "ADDR:PORT", global = true)]
    pub admin: Option<SocketAddr>,
    /// The daemon's configuration file: its [admin] listen address and
    /// token (or token-file) are used [default: /etc/v6gate/v6gate.toml,
    /// when it exists].
    #[arg(short, long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// A file whose first line is the admin token (overrides
    /// V6GATE_ADMIN_TOKEN and --config).
    #[arg(long, value_name = "FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

/// `v6gate ctl` commands.
#[derive(Debug, Subcommand)]
pub enum CtlCmd {
    /// Print the daemon's status (JSON): version, uptime, functions, counters, tables.
    Status,
    /// Print the Prometheus metrics.
    Metrics,
    /// List NAT64 sessions (JSON).
    Sessions {
        /// Only this protocol: tcp, udp or icmp.
        #[arg(long)]
        proto: Option<String>,
    },
    /// NAT64 binding information base.
    #[command(subcommand)]
    Bib(BibCmd),
    /// Reload the configuration file (like SIGHUP); prints the error when
    /// the new file is rejected.
    Reload,
    /// Print the XDP fast path's state (JSON): attachments and their mode,
    /// the mirrored SIIT configuration, map sizes, counters.
    Xdp,
}

/// `v6gate ctl bib` commands.
#[derive(Debug, Subcommand)]
pub enum BibCmd {
    /// List BIB entries (JSON).
    List {
        /// Only this protocol: tcp, udp or icmp.
        #[arg(long)]
        proto: Option<String>,
    },
    /// Add a static entry: two transport addresses, one IPv4 and one IPv6,
    /// in either order, written ADDR#PORT (the ICMP identifier for icmp),
    /// e.g. `v6gate ctl bib add --proto tcp 192.0.2.1#8080 2001:db8::6#80`.
    Add {
        /// tcp, udp or icmp.
        #[arg(long)]
        proto: String,
        /// First transport address.
        a: String,
        /// Second transport address.
        b: String,
    },
    /// Remove a static entry (same arguments as add).
    Remove {
        /// tcp, udp or icmp.
        #[arg(long)]
        proto: String,
        /// First transport address.
        a: String,
        /// Second transport address.
        b: String,
    },
}

fn enc(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// Which of two transport addresses is the IPv6 one: `(v6, v4)`.
fn order(a: &str, b: &str) -> anyhow::Result<(String, String)> {
    let is6 = |s: &str| s.split('#').next().is_some_and(|h| h.contains(':'));
    for s in [a, b] {
        if !s.contains('#') {
            bail!("`{s}` is not ADDRESS#PORT");
        }
    }
    match (is6(a), is6(b)) {
        (true, false) => Ok((a.into(), b.into())),
        (false, true) => Ok((b.into(), a.into())),
        _ => bail!("need one IPv6 and one IPv4 transport address, got `{a}` and `{b}`"),
    }
}

/// Environment variable holding the admin token.
pub const TOKEN_ENV: &str = "V6GATE_ADMIN_TOKEN";

/// The admin address and token `ctl` uses (see the module documentation).
pub fn target(args: &CtlArgs) -> anyhow::Result<(SocketAddr, Option<String>)> {
    let default_path = std::path::Path::new(crate::config::DEFAULT_PATH);
    let path = args.config.as_deref().or_else(|| default_path.exists().then_some(default_path));
    let cfg = match path {
        Some(p) => Some(crate::config::Config::load(p)?),
        None => None,
    };
    let default: SocketAddr = DEFAULT_ADMIN_LISTEN.parse().context("default admin address")?;
    let admin = args.admin.or_else(|| cfg.as_ref().and_then(|c| c.admin.listen)).unwrap_or(default);
    let token = if let Some(f) = &args.token_file {
        let t = std::fs::read_to_string(f).with_context(|| format!("reading the token file {}", f.display()))?;
        Some(t.lines().next().unwrap_or("").trim().to_string()).filter(|t| !t.is_empty())
    } else if let Some(t) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.trim().is_empty()) {
        Some(t.trim().to_string())
    } else if let Some(c) = &cfg {
        crate::validate::admin_token(c).map_err(|e| anyhow::anyhow!("[admin] token-file: {e}"))?
    } else {
        None
    };
    Ok((admin, token))
}

/// One HTTP request to the admin API: (status, body).
pub fn request(admin: SocketAddr, method: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(3))
        .with_context(|| format!("cannot reach the v6gate admin API at {admin} (is `v6gate run` up? see --admin)"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {admin}\r\n{auth}Content-Length: 0\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).context("reading the admin API's answer")?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("malformed HTTP answer")?;
    Ok((status, body.to_string()))
}

/// Run one `v6gate ctl` command, printing the answer on stdout.
pub fn run(args: &CtlArgs) -> anyhow::Result<()> {
    let q = |proto: &Option<String>| proto.as_ref().map_or(String::new(), |p| format!("?proto={}", enc(p)));
    let (method, path) = match &args.cmd {
        CtlCmd::Status => ("GET", "/status".to_string()),
        CtlCmd::Metrics => ("GET", "/metrics".to_string()),
        CtlCmd::Sessions { proto } => ("GET", format!("/sessions{}", q(proto))),
        CtlCmd::Bib(BibCmd::List { proto }) => ("GET", format!("/bib{}", q(proto))),
        CtlCmd::Bib(BibCmd::Add { proto, a, b }) | CtlCmd::Bib(BibCmd::Remove { proto, a, b }) => {
            let (v6, v4) = order(a, b)?;
            let op = if matches!(&args.cmd, CtlCmd::Bib(BibCmd::Add { .. })) { "add" } else { "remove" };
            ("POST", format!("/bib/{op}?proto={}&v6={}&v4={}", enc(proto), enc(&v6), enc(&v4)))
        }
        CtlCmd::Reload => ("POST", "/reload".to_string()),
        CtlCmd::Xdp => ("GET", "/xdp".to_string()),
    };
    let (admin, token) = target(args)?;
    let (status, body) = request(admin, method, &path, token.as_deref())?;
    let shown = match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(v) if !matches!(args.cmd, CtlCmd::Metrics) => serde_json::to_string_pretty(&v).unwrap_or(body.clone()),
        _ => body.clone(),
    };
    if !(200..300).contains(&status) {
        let msg = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or(body);
        bail!("{msg} (HTTP {status})");
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", shown.trim_end())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_addresses_in_either_order() {
        assert_eq!(
            order("192.0.2.1#80", "2001:db8::1#8080").unwrap(),
            ("2001:db8::1#8080".into(), "192.0.2.1#80".into())
        );
        assert_eq!(order("2001:db8::1#1", "192.0.2.1#2").unwrap().0, "2001:db8::1#1");
        assert!(order("192.0.2.1#80", "192.0.2.2#80").is_err());
        assert!(order("192.0.2.1", "2001:db8::1#80").is_err());
        assert_eq!(enc("2001:db8::1#80"), "2001%3Adb8%3A%3A1%2380");
    }
}
