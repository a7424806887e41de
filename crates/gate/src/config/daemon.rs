//! The daemon's own tables: `[tun]` (the TUN device and its workers),
//! `[admin]` (the admin HTTP API) and `[daemon]` (logging, ICMP error rate
//! limit). All optional; `v6gate translate` ignores them.

use core::fmt;
use core::net::SocketAddr;
use std::path::PathBuf;

use confval::IoMode;
use serde::Deserialize;
use toml::Spanned;
use xlat::addr::{parse_addr_len, IpPrefix};

use super::{invalid, parse_prefix, Error, ErrorKind};

/// Every key of the `[tun]` table.
pub const TUN_KEYS: &[&str] = &[
    "name",
    "mtu",
    "txqueuelen",
    "queues",
    "io",
    "batch",
    "busy-poll",
    "pin-workers",
    "addresses",
    "auto-routes",
    "routes",
];

/// Every key of the `[admin]` table.
pub const ADMIN_KEYS: &[&str] = &[
    "enabled",
    "listen",
    "token",
    "token-file",
    "token-for-read",
    "hosts",
    "max-connections",
    "max-header-bytes",
    "max-body-bytes",
    "request-timeout",
    "idle-timeout",
];
/// Every key of the `[daemon]` table.
pub const DAEMON_KEYS: &[&str] = &["log-level", "icmp-error-rate", "icmp-error-burst"];

/// Default TUN device name.
pub const DEFAULT_TUN_NAME: &str = "v6gate0";
/// Default admin API address (loopback only).
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9164";
/// Largest number of TUN queues (and workers) accepted.
pub const MAX_QUEUES: usize = 64;

pub use netsys::IfAddr;

/// `[tun]`: the TUN device `v6gate run` creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunConfig {
    /// `name`: device name, at most 15 bytes. Default `v6gate0`.
    pub name: String,
    /// `mtu`: device MTU. Default 1500.
    pub mtu: u32,
    /// `txqueuelen`: packets each TUN queue holds for its worker. Default 1000.
    pub txqueuelen: u32,
    /// `queues`: TUN queues, one worker thread each; 0 = one per CPU core.
    pub queues: usize,
    /// `io`: how workers move packets in and out of their TUN queue:
    /// `"poll"` (default: non-blocking `read(2)` until the queue is empty,
    /// one `write(2)` per packet, `poll(2)` when idle; in the RFC 8219 bench
    /// it has the lower latency, with no second wake-up per read, and the
    /// higher zero-loss rate) or `"uring"` (io_uring: reads kept posted,
    /// writes batched, one system call per batch).
    pub io: IoMode,
    /// `batch`: packets a worker reads per wake-up before writing. Default 64.
    pub batch: usize,
    /// `busy-poll`: with `io = "poll"`, how long a worker keeps reading
    /// its queue (spinning) after its last packet before it sleeps in
    /// `poll(2)`; packets arriving within the window skip the thread's
    /// (and an idle vCPU's) wake-up. Costs a CPU busy for the window after
    /// every packet. Default `"0s"` (off); e.g. `"1ms"` for the lowest
    /// first-packet latency on a core reserved for the worker. The
    /// softwire threads (`[dslite]`, `[lw4o6]`, `[b4]`) of `v6gate run`
    /// wait the same way.
    pub busy_poll: std::time::Duration,
    /// `pin-workers`: pin worker i to CPU i. Default false.
    pub pin_workers: bool,
    /// `addresses`: addresses put on the device. Default none.
    pub addresses: Vec<IfAddr>,
    /// `auto-routes`: route the prefixes the functions translate to into
    /// the device (SIIT pool6 and EAMT IPv4 prefixes). Default true.
    pub auto_routes: bool,
    /// `routes`: further prefixes routed into the device.
    pub routes: Vec<IpPrefix>,
}

impl Default for TunConfig {
    fn default() -> Self {
        TunConfig {
            name: DEFAULT_TUN_NAME.into(),
            mtu: 1500,
            txqueuelen: 1000,
            queues: 0,
            io: IoMode::Poll,
            batch: 64,
            busy_poll: std::time::Duration::ZERO,
            pin_workers: false,
            addresses: Vec::new(),
            auto_routes: true,
            routes: Vec::new(),
        }
    }
}

impl TunConfig {
    /// Number of queues/workers: `queues`, or the number of CPUs when 0.
    pub fn effective_queues(&self) -> usize {
        if self.queues == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_QUEUES)
        } else {
            self.queues
        }
    }
}

/// `[admin]`: the admin HTTP API (`/metrics`, `/status`, the `v6gate ctl`
/// endpoints), its access control and its limits (docs/security.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `listen`: address and port; `None` when `enabled = false`.
    pub listen: Option<SocketAddr>,
    /// `token`: the bearer token state-changing requests need.
    pub token: Option<String>,
    /// `token-file`: a file whose first line is the token (relative paths
    /// are relative to the configuration file).
    pub token_file: Option<PathBuf>,
    /// `token-for-read`: GET endpoints need the token too. Default false.
    pub token_for_read: bool,
    /// `hosts`: further names the `Host` header may carry (the listen
    /// address, the connection's local address and `localhost` always may).
    pub hosts: Vec<String>,
    /// `max-connections`: connections served at once. Default 64.
    pub max_connections: usize,
    /// `max-header-bytes`: request line and headers. Default 16384.
    pub max_header_bytes: usize,
    /// `max-body-bytes`: request body. Default 65536.
    pub max_body_bytes: usize,
    /// `request-timeout`: seconds to read a request and answer it. Default 10.
    pub request_timeout: u64,
    /// `idle-timeout`: seconds a connection may stay silent. Default 30.
    pub idle_timeout: u64,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: DEFAULT_ADMIN_LISTEN.parse().ok(),
            token: None,
            token_file: None,
            token_for_read: false,
            hosts: Vec::new(),
            max_connections: 64,
            max_header_bytes: 16 * 1024,
            max_body_bytes: 64 * 1024,
            request_timeout: 10,
            idle_timeout: 30,
        }
    }
}

/// Log levels of `[daemon] log-level`.
pub const LOG_LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

/// `[daemon]`: logging and the ICMP error rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// `log-level`: one of [`LOG_LEVELS`]. Default `info`.
    pub log_level: String,
    /// `icmp-error-rate`: ICMP errors the translator originates, per second
    /// (whole daemon; shared evenly by the workers). 0 = unlimited. Default 1000.
    pub icmp_error_rate: u32,
    /// `icmp-error-burst`: bucket depth. Default 100.
    pub icmp_error_burst: u32,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig { log_level: "info".into(), icmp_error_rate: 1000, icmp_error_burst: 100 }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
pub(super) struct TunToml {
    name: Option<Spanned<String>>,
    mtu: Option<u32>,
    txqueuelen: Option<u32>,
    queues: Option<usize>,
    io: Option<Spanned<String>>,
    batch: Option<usize>,
    #[serde(default, with = "opt_duration")]
    busy_poll: Option<std::time::Duration>,
    pin_workers: Option<bool>,
    addresses: Option<Vec<Spanned<String>>>,
    auto_routes: Option<bool>,
    routes: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
pub(super) struct AdminToml {
    enabled: Option<bool>,
    listen: Option<Spanned<String>>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    token_for_read: Option<bool>,
    hosts: Option<Vec<String>>,
    max_connections: Option<usize>,
    max_header_bytes: Option<usize>,
    max_body_bytes: Option<usize>,
    #[serde(default, deserialize_with = "opt_secs")]
    request_timeout: Option<u64>,
    #[serde(default, deserialize_with = "opt_secs")]
    idle_timeout: Option<u64>,
}

/// The longest `[tun] busy-poll` window (beyond it the worker would
/// rather be told to spin for ever: pin it and use a large window).
const MAX_BUSY_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// An optional [`std::time::Duration`] in the syntax of [`confval::duration`].
mod opt_duration {
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<std::time::Duration>, D::Error> {
        confval::duration::deserialize(d).map(Some)
    }
}

/// An optional duration in the syntax of [`confval::duration`], in seconds.
fn opt_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    confval::duration::secs(d).map(Some)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
pub(super) struct DaemonToml {
    log_level: Option<Spanned<String>>,
    icmp_error_rate: Option<u32>,
    icmp_error_burst: Option<u32>,
}

/// Parse `ADDR/LEN` (host bits allowed) or a bare address.
fn parse_ifaddr(text: &str, key: &str, v: &Spanned<String>) -> Result<IfAddr, Error> {
    let (addr, len) = parse_addr_len(v.get_ref()).map_err(|_| {
        invalid(text, key, v.span(), format!("`{}` is not an address with an optional /length", v.get_ref().trim()))
    })?;
    Ok(IfAddr { addr, len })
}

/// `v` when it is within `lo..=hi`, else an error naming `key`.
pub(super) fn ranged<T: PartialOrd + fmt::Display>(key: &str, v: T, lo: T, hi: T) -> Result<T, Error> {
    if v < lo || v > hi {
        return Err(Error::new(ErrorKind::Invalid, Some(key.to_string()), format!("{v} is outside {lo}..={hi}")));
    }
    Ok(v)
}

pub(super) fn tun_from_toml(text: &str, t: TunToml) -> Result<TunConfig, Error> {
    let mut c = TunConfig::default();
    if let Some(n) = &t.name {
        let s = n.get_ref();
        if s.is_empty() || s.len() > 15 || s.contains(['/', '%']) || s.chars().any(|c| c.is_whitespace()) {
            return Err(invalid(
                text,
                "[tun] name",
                n.span(),
                format!("`{s}` is not a device name (1-15 bytes, no '/', '%' or spaces)"),
            ));
        }
        c.name = s.clone();
    }
    if let Some(m) = t.mtu {
        c.mtu = ranged("[tun] mtu", m, 1280, 65535)?;
    }
    if let Some(q) = t.txqueuelen {
        c.txqueuelen = ranged("[tun] txqueuelen", q, 1, 1_000_000)?;
    }
    if let Some(q) = t.queues {
        c.queues = ranged("[tun] queues", q, 0, MAX_QUEUES)?;
    }
    if let Some(io) = &t.io {
        c.io = io.get_ref().parse().map_err(|m| invalid(text, "[tun] io", io.span(), m))?;
    }
    if let Some(b) = t.batch {
        c.batch = ranged("[tun] batch", b, 1, 1024)?;
    }
    if let Some(d) = t.busy_poll {
        if d > MAX_BUSY_POLL {
            return Err(Error::new(
                ErrorKind::Invalid,
                Some("[tun] busy-poll".into()),
                format!("{} is above {}", confval::duration::format(d), confval::duration::format(MAX_BUSY_POLL)),
            ));
        }
        c.busy_poll = d;
    }
    if let Some(p) = t.pin_workers {
        c.pin_workers = p;
    }
    if let Some(r) = t.auto_routes {
        c.auto_routes = r;
    }
    for (i, a) in t.addresses.iter().flatten().enumerate() {
        c.addresses.push(parse_ifaddr(text, &format!("[tun] addresses[{i}]"), a)?);
    }
    for (i, r) in t.routes.iter().flatten().enumerate() {
        c.routes.push(parse_prefix(text, &format!("[tun] routes[{i}]"), r)?);
    }
    Ok(c)
}

pub(super) fn admin_from_toml(text: &str, t: AdminToml) -> Result<AdminConfig, Error> {
    let mut c = AdminConfig::default();
    if let Some(l) = &t.listen {
        let s = l.get_ref().trim();
        c.listen = Some(s.parse().map_err(|_| {
            invalid(
                text,
                "[admin] listen",
                l.span(),
                format!("`{s}` is not ADDRESS:PORT (e.g. 127.0.0.1:9164 or [::1]:9164)"),
            )
        })?);
    }
    if t.enabled == Some(false) {
        c.listen = None;
    }
    c.token = t.token;
    c.token_file = t.token_file;
    c.token_for_read = t.token_for_read.unwrap_or(false);
    c.hosts = t.hosts.unwrap_or_default();
    if let Some(v) = t.max_connections {
        c.max_connections = ranged("[admin] max-connections", v, 1, 10_000)?;
    }
    if let Some(v) = t.max_header_bytes {
        c.max_header_bytes = ranged("[admin] max-header-bytes", v, 8192, 1 << 20)?;
    }
    if let Some(v) = t.max_body_bytes {
        c.max_body_bytes = ranged("[admin] max-body-bytes", v, 0, 16 << 20)?;
    }
    if let Some(v) = t.request_timeout {
        c.request_timeout = ranged("[admin] request-timeout (seconds)", v, 1, 3600)?;
    }
    if let Some(v) = t.idle_timeout {
        c.idle_timeout = ranged("[admin] idle-timeout (seconds)", v, 1, 86_400)?;
    }
    Ok(c)
}

pub(super) fn daemon_from_toml(text: &str, t: DaemonToml) -> Result<DaemonConfig, Error> {
    let mut c = DaemonConfig::default();
    if let Some(l) = &t.log_level {
        let s = l.get_ref().to_ascii_lowercase();
        if !LOG_LEVELS.contains(&s.as_str()) {
            return Err(invalid(
                text,
                "[daemon] log-level",
                l.span(),
                format!("`{}` is not one of {}", l.get_ref(), LOG_LEVELS.join(", ")),
            ));
        }
        c.log_level = s;
    }
    if let Some(r) = t.icmp_error_rate {
        c.icmp_error_rate = r;
    }
    if let Some(b) = t.icmp_error_burst {
        if b == 0 {
            return Err(Error::new(ErrorKind::Invalid, Some("[daemon] icmp-error-burst".into()), "must be at least 1"));
        }
        c.icmp_error_burst = b;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_names, err};
    use crate::config::{Config, ErrorKind};

    #[test]
    fn daemon_tables_default_and_parse() {
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n").unwrap();
        assert_eq!(c.tun, TunConfig::default());
        assert_eq!(c.admin.listen, Some("127.0.0.1:9164".parse().unwrap()));
        assert_eq!(c.daemon, DaemonConfig::default());
        let c = Config::parse(
            r#"
            [siit]
            pool6 = "64:ff9b:1::/96"
            [tun]
            name = "xl0"
            mtu = 9000
            queues = 2
            io = "poll"
            batch = 16
            busy-poll = "250us"
            pin-workers = true
            addresses = ["192.0.2.1/24", "2001:db8::1"]
            auto-routes = false
            routes = ["198.51.100.0/24", "2001:db8:46::/64"]
            [admin]
            listen = "[::1]:9999"
            [daemon]
            log-level = "DEBUG"
            icmp-error-rate = 0
            icmp-error-burst = 5
            "#,
        )
        .unwrap();
        assert_eq!(c.tun.name, "xl0");
        assert_eq!((c.tun.mtu, c.tun.queues, c.tun.batch), (9000, 2, 16));
        assert_eq!(c.tun.io, IoMode::Poll);
        assert_eq!(c.tun.busy_poll, std::time::Duration::from_micros(250));
        assert!(c.tun.pin_workers && !c.tun.auto_routes);
        assert_eq!(c.tun.addresses[0].to_string(), "192.0.2.1/24");
        assert_eq!(c.tun.addresses[1].to_string(), "2001:db8::1/128");
        assert_eq!(c.tun.routes[0].to_string(), "198.51.100.0/24");
        assert_eq!(c.tun.routes[1].to_string(), "2001:db8:46::/64");
        assert_eq!(c.admin.listen, Some("[::1]:9999".parse().unwrap()));
        assert_eq!(c.daemon.log_level, "debug");
        assert_eq!((c.daemon.icmp_error_rate, c.daemon.icmp_error_burst), (0, 5));
        let off = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[admin]\nenabled = false\n").unwrap();
        assert_eq!(off.admin.listen, None);
    }

    #[test]
    fn daemon_table_errors_are_named() {
        let base = "[siit]\npool6 = \"64:ff9b:1::/96\"\n";
        assert_names(&format!("{base}[tun]\nname = \"a-very-long-name-x\"\n"), "[tun] name");
        assert_names(&format!("{base}[tun]\nmtu = 100\n"), "[tun] mtu");
        assert_names(&format!("{base}[tun]\ntxqueuelen = 0\n"), "[tun] txqueuelen");
        assert_names(&format!("{base}[tun]\nqueues = 1000\n"), "[tun] queues");
        assert_names(&format!("{base}[tun]\nbatch = 0\n"), "[tun] batch");
        assert_names(&format!("{base}[tun]\nbusy-poll = \"2s\"\n"), "[tun] busy-poll");
        assert_names(&format!("{base}[tun]\nbusy-poll = \"fast\"\n"), "busy-poll");
        let e = assert_names(&format!("{base}[tun]\nio = \"fast\"\n"), "[tun] io");
        assert!(e.to_string().ends_with("`fast` is not \"uring\" or \"poll\""), "{e}");
        assert_names(&format!("{base}[tun]\naddresses = [\"192.0.2.1/33\"]\n"), "[tun] addresses[0]");
        assert_names(&format!("{base}[tun]\nroutes = [\"192.0.2.1/24\"]\n"), "[tun] routes[0]");
        assert_names(&format!("{base}[tun]\nqueue = 1\n"), "[tun] queue");
        assert_names(&format!("{base}[admin]\nlisten = \"localhost\"\n"), "[admin] listen");
        assert_names(&format!("{base}[daemon]\nlog-level = \"loud\"\n"), "[daemon] log-level");
        assert_names(&format!("{base}[daemon]\nicmp-error-burst = 0\n"), "[daemon] icmp-error-burst");
        // Daemon tables alone configure no function.
        let e = err("[tun]\nname = \"x\"\n");
        assert_eq!(e.kind(), ErrorKind::Missing);
    }
}
