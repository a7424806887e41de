//! The daemon's TOML configuration.
//!
//! One optional table per function: `[siit]` (read here, module `siit`),
//! `[nat64]`, `[dns64]`, `[trgw]` and `[alg]` (each read by its own crate;
//! `[alg]`'s checks in module `alg`), the tunnels `[sixtofour]`, `[sixrd]`
//! and `[teredo.*]`, the TRT's `[trt]` and
//! the softwires' `[dslite]`, `[lw4o6]`, `[b4]` (typed tables of their
//! crates, checked there into [`tunnel::TunnelConfig`],
//! [`trt::config::TrtConfig`] and [`softwire::config::SoftwireConfig`],
//! the types the standalone commands use), and the
//! daemon's own `[tun]`, `[admin]` and `[daemon]` (module `daemon`). This
//! module holds the file-level [`Config`], its errors (with line and
//! column) and the parse entry points; `example` builds the text of
//! `v6gate config example`. Building the engines from a checked
//! configuration is the daemon's job (`daemon::engine`).
//!
//! Keys are kebab-case and follow Jool's names where Jool has the same knob,
//! so operators can carry settings over. Parsing is strict: unknown keys,
//! wrong types and invalid prefixes are errors, and every error names the
//! file, the line and column when known, and the key at fault, e.g.
//!
//! ```text
//! config error in /etc/v6gate.toml: line 2, column 9: [siit] pool6: `2001:db8::1/32` has bits set beyond its prefix length
//! ```
//!
//! Defaults come from [`xlat::siit::Config::default`], so the packet plane
//! and this file cannot disagree about them.

pub mod alg;
mod daemon;
mod example;
mod siit;
mod xdp;

pub use alg::ALG_KEYS;
pub use daemon::{
    AdminConfig, DaemonConfig, IfAddr, TunConfig, ADMIN_KEYS, DAEMON_KEYS, DEFAULT_ADMIN_LISTEN, DEFAULT_TUN_NAME,
    LOG_LEVELS, MAX_QUEUES, TUN_KEYS,
};
pub use example::example;
pub use siit::{SIIT_ALIASES, SIIT_KEYS};
pub use xdp::{XdpConfig, MAX_EAMT_ENTRIES, MAX_NAT64_SESSIONS, MAX_TRGW_STREAMS, MAX_XDP_INTERFACES, XDP_KEYS};

use core::fmt;
use core::ops::Range;
use core::str::FromStr;
use std::path::{Path, PathBuf};

use confval::{Alias, IoMode};
use serde::Deserialize;
use toml::Spanned;
use xlat::addr::AddrError;

use daemon::{AdminToml, DaemonToml, TunToml};
use siit::SiitToml;
use xdp::XdpToml;

/// Where `v6gate run`, `v6gate ctl` and `v6gate config check` look for
/// the configuration when `--config` is not given (the Debian package
/// installs `v6gate config example` there).
pub const DEFAULT_PATH: &str = "/etc/v6gate/v6gate.toml";

/// Top-level tables that configure a translation function (at least one
/// must be present).
pub const TABLES: &[&str] =
    &["siit", "nat64", "dns64", "trgw", "alg", "sixtofour", "sixrd", "teredo", "dslite", "lw4o6", "b4", "trt"];

/// Top-level tables of the daemon itself (`v6gate run`); all optional.
/// `v6gate translate` ignores them.
pub const DAEMON_TABLES: &[&str] = &["tun", "admin", "daemon", "xdp"];

/// A parsed configuration file. Every table is optional; [`Config::check`]
/// (run by [`Config::load`]) insists that at least one function is
/// configured and that each configured one can be built.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `[siit]`: the stateless IP/ICMP translator (RFC 7915).
    pub siit: Option<xlat::siit::Config>,
    /// `[nat64]`: stateful NAT64 (RFC 6146) or NAT-PT pool mode, crate `nat64`.
    pub nat64: Option<nat64::Config>,
    /// `[dns64]`: the DNS64 resolver front end (RFC 6147), crate `dns64`.
    pub dns64: Option<dns64::Config>,
    /// `[tun]`: the daemon's TUN device (defaults when the table is absent).
    pub tun: TunConfig,
    /// `[admin]`: the admin HTTP API.
    pub admin: AdminConfig,
    /// `[daemon]`: logging and rate limits.
    pub daemon: DaemonConfig,
    /// `[trgw]`: the media relay (see the `trgw` crate).
    pub trgw: Option<trgw::Config>,
    /// `[xdp]`: the XDP fast path (absent: none).
    pub xdp: Option<XdpConfig>,
    /// `[sixtofour]`, `[sixrd]`, `[teredo.*]`: the tunnels (see the
    /// `tunnel` crate); each runs on its own TUN device and sockets.
    pub tunnels: tunnel::TunnelConfig,
    /// `[alg]`: the IMS-ALG, the SIP/SDP gateway between the realms (see
    /// the `alg` crate).
    pub alg: Option<::alg::Config>,
    /// `[dslite]`, `[lw4o6]` (with `[lw4o6.dstm]`), `[b4]`: the softwires
    /// (see the `softwire` crate); each runs on its own TUN device.
    pub softwires: softwire::config::SoftwireConfig,
    /// `[trt]`: the RFC 3142 transport relay translator (crate `trt`).
    pub trt: Option<trt::config::TrtConfig>,
    /// The file this came from, for error messages.
    origin: Option<PathBuf>,
    /// Deprecated spellings found (see [`Config::warnings`]).
    warnings: Vec<Warning>,
}

use function::config::{line_col, write_where};
/// The configuration error (file, line, column, key) is the function
/// contract's, so every function crate's table checks return the same
/// type ([`function::config`]).
pub use function::config::{Error, ErrorKind};

/// A deprecated spelling the configuration still accepts (an old key
/// name or value, see [`confval::alias`]): where it is and what to write
/// instead. Printed by `v6gate config check`, logged by `v6gate run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    file: Option<PathBuf>,
    /// 1-based line and column.
    pos: Option<(usize, usize)>,
    msg: String,
}

impl Warning {
    /// 1-based (line, column) in the file, when known.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.pos
    }

    /// What is deprecated and what to write instead.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_where(f, "warning", self.file.as_deref(), self.pos)?;
        f.write_str(&self.msg)
    }
}

/// The other spellings each table accepts (old ones, deprecated, and
/// Jool's names), by table.
fn aliases(table: &str) -> Vec<&'static Alias> {
    match table {
        "siit" => siit::SIIT_ALIASES.iter().collect(),
        "tun" => IoMode::ALIASES.iter().collect(),
        "trgw" => trgw::config::aliases().collect(),
        "dns64" => dns64::config::ALIASES.iter().collect(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// The TOML shape. Values that need validation beyond their TOML type are
// kept as `Spanned<String>` so errors can point at them.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table of v6gate configuration")]
struct FileToml {
    siit: Option<SiitToml>,
    nat64: Option<nat64::Config>,
    dns64: Option<dns64::Config>,
    tun: Option<TunToml>,
    admin: Option<AdminToml>,
    daemon: Option<DaemonToml>,
    trgw: Option<trgw::Config>,
    xdp: Option<XdpToml>,
    // The tunnel tables: typed here, checked by `tunnel::TunnelConfig::from_toml`.
    sixtofour: Option<tunnel::config::SixToFourToml>,
    sixrd: Option<tunnel::config::SixRdToml>,
    teredo: Option<tunnel::config::TeredoToml>,
    alg: Option<::alg::Config>,
    // The softwire and TRT tables: typed here, checked by their crates
    // (`SoftwireConfig::from_toml`, `TrtConfig::from_toml`).
    dslite: Option<softwire::config::DsliteToml>,
    lw4o6: Option<softwire::config::Lw4o6Toml>,
    b4: Option<softwire::config::B4Toml>,
    trt: Option<trt::config::TrtToml>,
}

// ---------------------------------------------------------------------------

/// Turn a deserialisation error into one that names the key
/// ([`function::config::from_serde`]); a top-level `[siit]` key written
/// above every table gets a hint.
fn classify(text: &str, err: serde_path_to_error::Error<toml::de::Error>) -> Error {
    function::config::from_serde(text, err, |name| {
        SIIT_KEYS
            .contains(&name)
            .then(|| format!("; `{name}` belongs in the [siit] table: add a `[siit]` header above it"))
    })
}

/// A prefix ([`xlat::addr::Prefix4`], `Prefix6` or `IpPrefix`); errors name
/// `key` and point at the value.
fn parse_prefix<P: FromStr<Err = AddrError>>(text: &str, key: &str, v: &Spanned<String>) -> Result<P, Error> {
    P::from_str(v.get_ref()).map_err(|e| invalid(text, key, v.span(), e.to_string()))
}

fn parse_addr<A: FromStr>(text: &str, key: &str, v: &Spanned<String>, family: &str) -> Result<A, Error> {
    A::from_str(v.get_ref().trim()).map_err(|_| {
        Error::new(ErrorKind::Invalid, Some(key.to_string()), format!("`{}` is not an {family} address", v.get_ref()))
            .at(text, Some(v.span()))
    })
}

fn invalid(text: &str, key: &str, span: Range<usize>, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Invalid, Some(key.to_string()), msg).at(text, Some(span))
}

impl Config {
    /// The tunnel tables, when the file has one (the function registry's
    /// view, [`crate::daemon::functions`]).
    pub fn configured_tunnels(&self) -> Option<&tunnel::TunnelConfig> {
        (!self.tunnels.is_empty()).then_some(&self.tunnels)
    }

    /// The softwire tables, when the file has one.
    pub fn configured_softwires(&self) -> Option<&softwire::config::SoftwireConfig> {
        (!self.softwires.is_empty()).then_some(&self.softwires)
    }

    /// Parse TOML text: syntax, key names, types, prefixes and addresses.
    /// Does not build the engines; see [`Config::check`].
    pub fn parse(text: &str) -> Result<Config, Error> {
        let mut doc = toml::de::DeTable::parse(text).map_err(|e| {
            Error::new(ErrorKind::Syntax, None, e.message().trim().replace('\n', "; ")).at(text, e.span())
        })?;
        let mut warnings = Vec::new();
        // Errors name a key as the operator wrote it (Jool's name or ours).
        let mut written = Vec::new();
        for table in TABLES.iter().chain(DAEMON_TABLES) {
            written.extend(
                confval::alias::synonyms_written(doc.get_ref(), table, aliases(table))
                    .into_iter()
                    .map(|(key, name)| (format!("[{table}] {key}"), format!("[{table}] {name}"))),
            );
            let found = confval::alias::apply(doc.get_mut(), table, aliases(table))
                .map_err(|e| Error::new(ErrorKind::Invalid, Some(e.key), e.msg).at(text, Some(e.span)))?;
            warnings.extend(found.into_iter().map(|d| Warning {
                file: None,
                pos: Some(line_col(text, d.span.start)),
                msg: d.to_string(),
            }));
        }
        let de = toml::Deserializer::from(doc);
        let build = || -> Result<Config, Error> {
            let file: FileToml = serde_path_to_error::deserialize(de).map_err(|e| classify(text, e))?;
            let siit = file.siit.map(|t| siit::siit_from_toml(text, t)).transpose()?;
            let tun = file.tun.map(|t| daemon::tun_from_toml(text, t)).transpose()?.unwrap_or_default();
            let admin = file.admin.map(|t| daemon::admin_from_toml(text, t)).transpose()?.unwrap_or_default();
            let daemon = file.daemon.map(|t| daemon::daemon_from_toml(text, t)).transpose()?.unwrap_or_default();
            let xdp = file.xdp.map(|t| xdp::xdp_from_toml(text, t)).transpose()?;
            let tables =
                tunnel::config::TunnelTables { sixtofour: file.sixtofour, sixrd: file.sixrd, teredo: file.teredo };
            let tunnels = tunnel::TunnelConfig::from_toml(tables).map_err(|e| e.at(text, None))?;
            let tables = softwire::config::SoftwireTables { dslite: file.dslite, lw4o6: file.lw4o6, b4: file.b4 };
            let softwires = softwire::config::SoftwireConfig::from_toml(tables).map_err(|e| e.at(text, None))?;
            let trt = file.trt.map(trt::config::TrtConfig::from_toml).transpose().map_err(|e| e.at(text, None))?;
            Ok(Config {
                tunnels,
                softwires,
                trt,
                siit,
                nat64: file.nat64,
                dns64: file.dns64,
                trgw: file.trgw,
                alg: file.alg,
                tun,
                admin,
                daemon,
                xdp,
                origin: None,
                warnings,
            })
        };
        build().map_err(|e| e.named_as_written(&written))
    }

    /// Read, parse and [`check`](Config::check) a configuration file.
    /// Errors name the file.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::new(ErrorKind::Io, None, format!("cannot read: {e}")).in_file(Some(path)))?;
        let mut cfg = Config::parse(&text).map_err(|e| e.in_file(Some(path)))?;
        cfg.origin = Some(path.to_path_buf());
        for w in &mut cfg.warnings {
            w.file = cfg.origin.clone();
        }
        cfg.check()?;
        Ok(cfg)
    }

    /// Validate what [`parse`](Config::parse) cannot: at least one function
    /// is configured, and every configured one can be built.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(t) = &self.trgw {
            t.check().map_err(|m| Error::new(ErrorKind::Invalid, None, m).in_file(self.origin.as_deref()))?;
        }
        if let Some(a) = &self.alg {
            alg::check(a).map_err(|e| e.in_file(self.origin.as_deref()))?;
        }
        if self.siit.is_none()
            && self.nat64.is_none()
            && self.dns64.is_none()
            && self.trgw.is_none()
            && self.tunnels.is_empty()
            && self.alg.is_none()
            && self.softwires.is_empty()
            && self.trt.is_none()
        {
            let tables: Vec<String> = TABLES.iter().map(|t| format!("[{t}]")).collect();
            return Err(Error::new(
                ErrorKind::Missing,
                None,
                format!("nothing is configured: expected at least one of {}", tables.join(", ")),
            )
            .in_file(self.origin.as_deref()));
        }
        if self.siit.is_some() {
            self.siit_translator()?;
        }
        if self.nat64.is_some() {
            self.nat64_translator()?;
        }
        if let Some(x) = &self.xdp {
            xdp::check(x, self.siit.as_ref()).map_err(|e| e.in_file(self.origin.as_deref()))?;
        }
        if let Some(d) = &self.dns64 {
            d.check().map_err(|e| {
                Error::new(ErrorKind::Invalid, Some(format!("[dns64] {}", e.key)), e.message)
                    .in_file(self.origin.as_deref())
            })?;
        }
        crate::validate::check(self)
            .map_err(|(key, msg)| Error::new(ErrorKind::Invalid, Some(key), msg).in_file(self.origin.as_deref()))
    }

    /// The file [`Config::load`] read, if any.
    pub fn origin(&self) -> Option<&Path> {
        self.origin.as_deref()
    }

    /// Deprecated spellings the file uses, in the order of the tables.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn err(text: &str) -> Error {
        match Config::parse(text).and_then(|c| c.check().map(|()| c)) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        }
    }

    pub(super) fn assert_names(text: &str, key: &str) -> Error {
        let e = err(text);
        let s = e.to_string();
        assert!(s.contains(key), "`{key}` not named in: {s}");
        assert!(!s.contains('\n'), "multi-line error: {s}");
        e
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let e = err("[siit]\npool6 = \"64:ff9b::/96\"\nmapping = \n");
        assert_eq!(e.kind(), ErrorKind::Syntax);
        assert_eq!(e.position().map(|p| p.0), Some(3));
        assert!(e.to_string().contains("line 3, column"), "{e}");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = assert_names("[siit]\npool6 = \"64:ff9b::/96\"\npool7 = 1\n", "[siit] pool7");
        assert_eq!(e.kind(), ErrorKind::UnknownKey);
        assert_eq!(e.position().map(|p| p.0), Some(3), "{e}");
        assert!(e.to_string().contains("pool6"), "should list the valid keys: {e}");
        let e = assert_names("[nat46]\nx = 1\n", "nat46: unknown top-level table");
        assert_eq!(e.kind(), ErrorKind::UnknownKey);
        let e = assert_names("pool6 = \"64:ff9b::/96\"\n", "pool6: unknown top-level");
        assert!(e.to_string().contains("add a `[siit]` header"), "{e}");
        let e =
            assert_names("[siit]\neamt = [{ ipv6 = \"2001:db8::/128\", ipv4 = \"192.0.2.1\", ipv5 = 1 }]\n", "ipv5");
        assert!(e.to_string().contains("[siit] eamt[0]"), "{e}");
    }

    #[test]
    fn wrong_type_is_named() {
        let e =
            assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nlowest-ipv6-mtu = \"1280\"\n", "[siit] lowest-ipv6-mtu");
        assert_eq!(e.kind(), ErrorKind::Type);
        assert_eq!(e.position().map(|p| p.0), Some(3), "{e}");
        assert_names("[siit]\npool6 = 64\n", "[siit] pool6");
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nipv4-mtu = 70000\n", "[siit] ipv4-mtu");
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nnew-tos = -1\n", "[siit] new-tos");
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nmapping = \"nat64\"\n", "[siit] mapping");
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nmtu-plateaus = [1500, \"x\"]\n", "[siit] mtu-plateaus[1]");
        assert_names("[siit]\neam-hairpinning = \"yes\"\n", "[siit] eam-hairpinning");
        assert_names("[siit]\neamt = [[\"2001:db8::/128\"]]\n", "[siit] eamt[0]");
        assert_names("[siit]\neamt = [{ ipv6 = \"2001:db8::/128\" }]\n", "ipv4");
        assert_names("[siit]\neamt = \"2001:db8::/128 192.0.2.1\"\n", "[siit] eamt");
        assert_names("siit = 1\n", "[siit]");
    }

    #[test]
    fn empty_file_is_an_error() {
        let e = err("# nothing\n");
        assert_eq!(e.kind(), ErrorKind::Missing);
        assert!(e.to_string().contains("[siit]"), "{e}");
        let e = Config::default().siit_translator().unwrap_err();
        assert_eq!(e.key(), Some("[siit]"));
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.toml");
        std::fs::write(&p, "[siit]\npool6 = \"2001:db8::1/32\"\n").unwrap();
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.starts_with(&format!("config error in {}: line 2, column 9: [siit] pool6: ", p.display())), "{e}");
        let e = Config::load(&dir.path().join("missing.toml")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(e.to_string().contains("missing.toml"), "{e}");
    }

    #[test]
    fn deprecated_spellings_warn_with_file_and_position() {
        let trgw = "[trgw]\nio = \"epoll\"\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n";
        let c = Config::parse(&format!("[tun]\nio = \"io-uring\"\n{trgw}")).unwrap();
        assert_eq!(c.tun.io, IoMode::Uring);
        assert_eq!(c.trgw.as_ref().unwrap().io, IoMode::Poll);
        let w: Vec<String> = c.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(
            w,
            [
                "config warning: line 4, column 6: [trgw] io = \"epoll\" is deprecated: write io = \"poll\"",
                "config warning: line 2, column 6: [tun] io = \"io-uring\" is deprecated: write io = \"uring\"",
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.toml");
        std::fs::write(&p, trgw).unwrap();
        let c = Config::load(&p).unwrap();
        assert_eq!(c.warnings().len(), 1);
        assert_eq!(c.warnings()[0].position(), Some((2, 6)));
        assert!(c.warnings()[0].to_string().starts_with(&format!("config warning in {}: line 2", p.display())));
        let c = Config::parse("[dns64]\nupstream = [\"192.0.2.53\"]\ntimeout-ms = 800\n").unwrap();
        assert_eq!(c.dns64.unwrap().timeout, std::time::Duration::from_millis(800));
        assert_eq!(
            c.warnings[0].to_string(),
            "config warning: line 3, column 1: [dns64] timeout-ms = 800 is deprecated: write timeout = \"800ms\""
        );
        let e =
            assert_names("[dns64]\nupstream = [\"192.0.2.53\"]\ntimeout = 1\ntimeout-ms = 800\n", "[dns64] timeout-ms");
        assert_eq!(e.position(), Some((4, 1)));
        // The current spellings raise none.
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[tun]\nio = \"uring\"\n").unwrap();
        assert!(c.warnings().is_empty());
    }

    #[test]
    fn dns64_table_is_read_and_checked() {
        let c = Config::parse("[dns64]\nupstream = [\"192.0.2.53\"]\nprefix = \"64:ff9b:1::/96\"\n").unwrap();
        c.check().unwrap();
        let d = c.dns64.unwrap();
        assert_eq!(d.upstream, ["192.0.2.53"]);
        assert_eq!(d.prefix, "64:ff9b:1::/96");
        assert_names("[dns64]\nupstream = [\"192.0.2.53\"]\nprefix = \"nope\"\n", "[dns64] prefix");
        assert_names("[dns64]\nupstream = []\n", "[dns64] upstream");
        assert_names("[dns64]\nupstream = [\"192.0.2.53\"]\nbogus = 1\n", "[dns64] bogus");
        // The example carries the [dns64] table, commented out.
        assert!(example().contains("# [dns64]"));
        let uncommented: String = example()
            .lines()
            .skip_while(|l| !l.starts_with("# [dns64]"))
            .take_while(|l| !l.starts_with(crate::config::example::TUNNELS_HEADER))
            .map(|l| {
                let body = l.trim_start_matches(['#', ' ']);
                let key = body
                    .split_once(" = ")
                    .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
                let table = body.starts_with('[') && body.ends_with(']') && !body.contains(' ');
                if key || table {
                    format!("{body}\n")
                } else {
                    "\n".to_string()
                }
            })
            .collect();
        let d: Config = Config::parse(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
        let d64 = d.dns64.as_ref().unwrap();
        assert_eq!(d64.prefixes.len(), 1, "the example's [[dns64.prefixes]]");
        assert_eq!(d64.cache_entries, dns64::config::DEFAULT_CACHE_ENTRIES);
        // ... and so does the [trgw] table that follows it.
        assert!(d.trgw.as_ref().is_some_and(|t| !t.interfaces.is_empty()), "{uncommented}");
    }

    #[test]
    fn nat64_table_is_read_and_checked() {
        let c =
            Config::parse("[nat64]\npool6 = \"64:ff9b::/96\"\npool4 = [\"192.0.2.1/32\"]\nudp-timeout = 2\n").unwrap();
        c.check().unwrap();
        let n = c.nat64.as_ref().unwrap();
        assert_eq!(n.udp_timeout.0, 2);
        assert_eq!(c.nat64_translator().unwrap().config().pool4.len(), 1);
        assert_names("[nat64]\npool4 = []\n", "[nat64] pool4");
        assert_names("[nat64]\npool4 = [\"192.0.2.1/32\"]\nmax-sessions = 0\n", "[nat64] max-sessions");
        assert_names("[nat64]\npool4 = [\"192.0.2.1/32\"]\nbogus = 0\n", "[nat64] bogus");
        // The header settings come from [siit]: its errors name [siit].
        assert_names(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\nipv6-mtu = 1000\n[nat64]\npool4 = [\"192.0.2.1/32\"]\n",
            "[siit] ipv6-mtu",
        );
        assert!(example().contains("# [nat64]"));
    }
}
