//! The daemon's TOML configuration.
//!
//! One table per function. Today there is `[siit]` (the RFC 7915 stateless
//! translator); later functions (`[nat64]`, `[trgw]`, `[admin]`, ...) are
//! added as further optional tables of [`Config`] without touching the
//! existing ones.
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

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::ops::Range;
use core::str::FromStr;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;
use xlat::addr::{Prefix4, Prefix6};
use xlat::siit::{self, MappingMode, Translator};

/// Every key of the `[siit]` table, in their canonical spelling (aliases
/// such as `rfc6791_v4` are not listed).
pub const SIIT_KEYS: &[&str] = &[
    "pool6",
    "mapping",
    "eamt",
    "eam-hairpinning",
    "rfc6791v4-prefix",
    "rfc6791v6-prefix",
    "lowest-ipv6-mtu",
    "amend-udp-checksum-zero",
    "reset-traffic-class",
    "reset-tos",
    "new-tos",
    "mtu-plateaus",
    "ipv4-mtu",
    "ipv6-mtu",
    "ipv4-address",
    "ipv6-address",
];

/// Top-level tables that configure a translation function (at least one
/// must be present).
pub const TABLES: &[&str] = &["siit", "nat64", "dns64", "trgw"];

/// Top-level tables of the daemon itself (`v6gate run`); all optional.
/// `v6gate translate` ignores them.
pub const DAEMON_TABLES: &[&str] = &["tun", "admin", "daemon"];

/// A parsed configuration file. Every table is optional; [`Config::check`]
/// (run by [`Config::load`]) insists that at least one function is
/// configured and that each configured one can be built.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `[siit]`: the stateless IP/ICMP translator (RFC 7915).
    pub siit: Option<siit::Config>,
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
    /// The file this came from, for error messages.
    origin: Option<PathBuf>,
}

/// The class of a configuration error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not valid TOML.
    Syntax,
    /// A key or table v6gate does not know.
    UnknownKey,
    /// A value of the wrong type, or a required key is missing.
    Type,
    /// A value of the right type that is not acceptable (bad prefix, MTU
    /// below the minimum, inconsistent settings, ...).
    Invalid,
    /// A table the requested function needs is absent.
    Missing,
}

/// A configuration error: which file, where in it, which key, what is wrong.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    file: Option<PathBuf>,
    /// 1-based line and column.
    pos: Option<(usize, usize)>,
    /// Key as the operator wrote it, e.g. `[siit] eamt[1].ipv4`.
    key: Option<String>,
    msg: String,
}

impl Error {
    fn new(kind: ErrorKind, key: Option<String>, msg: impl Into<String>) -> Self {
        Error { kind, file: None, pos: None, key, msg: msg.into() }
    }

    fn at(mut self, text: &str, span: Option<Range<usize>>) -> Self {
        if let Some(s) = span {
            self.pos = Some(line_col(text, s.start));
        }
        self
    }

    fn in_file(mut self, file: Option<&Path>) -> Self {
        if self.file.is_none() {
            self.file = file.map(Path::to_path_buf);
        }
        self
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The key at fault, e.g. `[siit] pool6`, when there is one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// 1-based (line, column) in the file, when known.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.pos
    }

    /// The problem, without file, position or key.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "config error in {}: ", p.display())?,
            None => f.write_str("config error: ")?,
        }
        if let Some((l, c)) = self.pos {
            write!(f, "line {l}, column {c}: ")?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

/// 1-based line and column (in characters) of byte offset `at`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let mut at = at;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
struct SiitToml {
    pool6: Option<Spanned<String>>,
    mapping: Option<MappingToml>,
    #[serde(default)]
    eamt: Vec<EamToml>,
    eam_hairpinning: Option<bool>,
    #[serde(alias = "rfc6791_v4")]
    rfc6791v4_prefix: Option<Spanned<String>>,
    #[serde(alias = "rfc6791_v6")]
    rfc6791v6_prefix: Option<Spanned<String>>,
    lowest_ipv6_mtu: Option<u16>,
    amend_udp_checksum_zero: Option<bool>,
    reset_traffic_class: Option<bool>,
    reset_tos: Option<bool>,
    new_tos: Option<u8>,
    mtu_plateaus: Option<Vec<u16>>,
    ipv4_mtu: Option<u16>,
    ipv6_mtu: Option<u16>,
    ipv4_address: Option<Spanned<String>>,
    ipv6_address: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum MappingToml {
    Rfc6052,
    Ivi,
}

/// One EAMT entry, written either as `{ ipv6 = "...", ipv4 = "..." }` (also
/// with Jool's key names `"ipv6 prefix"` / `"ipv4 prefix"`) or as
/// `["IPV6-PREFIX", "IPV4-PREFIX"]`.
#[derive(Debug)]
struct EamToml {
    ipv6: Spanned<String>,
    ipv4: Spanned<String>,
}

impl<'de> Deserialize<'de> for EamToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = EamToml;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"an EAMT entry: { ipv6 = "IPV6-PREFIX", ipv4 = "IPV4-PREFIX" } or ["IPV6-PREFIX", "IPV4-PREFIX"]"#)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EamToml, A::Error> {
                let ipv6 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let ipv4 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let mut n = 2;
                while seq.next_element::<de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                if n != 2 {
                    return Err(de::Error::invalid_length(n, &self));
                }
                Ok(EamToml { ipv6, ipv4 })
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EamToml, A::Error> {
                let (mut ipv6, mut ipv4) = (None, None);
                while let Some(k) = map.next_key::<String>()? {
                    // Jool's JSON spells them "ipv6 prefix" / "ipv4 prefix".
                    let slot = match k.as_str() {
                        "ipv6" | "ipv6 prefix" | "ipv6-prefix" => &mut ipv6,
                        "ipv4" | "ipv4 prefix" | "ipv4-prefix" => &mut ipv4,
                        _ => return Err(de::Error::unknown_field(&k, &["ipv6", "ipv4", "ipv6 prefix", "ipv4 prefix"])),
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom(format_args!("duplicate key `{k}`")));
                    }
                    *slot = Some(map.next_value()?);
                }
                Ok(EamToml {
                    ipv6: ipv6.ok_or_else(|| de::Error::missing_field("ipv6"))?,
                    ipv4: ipv4.ok_or_else(|| de::Error::missing_field("ipv4"))?,
                })
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------

/// Render a serde path (`siit.eamt.1.ipv4`) the way an operator reads it
/// (`[siit] eamt[1].ipv4`), skipping the `Spanned` wrapper's private keys.
fn render_path(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut segs = path.iter().filter(|s| !matches!(s, Segment::Map { key } if key.starts_with("$__")));
    let table = match segs.next()? {
        Segment::Map { key } => key.clone(),
        _ => return None,
    };
    let mut out = format!("[{table}]");
    let mut first = true;
    for s in segs {
        match s {
            Segment::Map { key } if first => {
                out.push(' ');
                out.push_str(key);
            }
            Segment::Map { key } => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
        first = false;
    }
    Some(out)
}

/// Turn a deserialisation error into one that names the key.
fn classify(text: &str, err: serde_path_to_error::Error<toml::de::Error>) -> Error {
    let key = render_path(err.path());
    let inner = err.into_inner();
    // serde says "field"; a TOML user says "key". Keep serde's list of
    // what is allowed, it is the most useful part.
    let msg = inner
        .message()
        .trim()
        .replace('\n', "; ")
        .replace("missing field `", "missing key `")
        .replace("duplicate field `", "duplicate key `");
    let e = if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
        let expected = tail.trim_start_matches(',').trim();
        let expected = if expected.is_empty() { String::new() } else { format!(" ({expected})") };
        // The path usually ends with the unknown key itself already; at the
        // top level it is nothing but the unknown name.
        let full = match key {
            Some(k) if k == format!("[{name}]") => None,
            Some(k) if k.ends_with(&format!(" {name}")) || k.ends_with(&format!(".{name}")) => Some(k),
            Some(k) if k.contains(' ') => Some(format!("{k}.{name}")),
            Some(k) => Some(format!("{k} {name}")),
            None => None,
        };
        match full {
            Some(k) => Error::new(ErrorKind::UnknownKey, Some(k), format!("unknown key{expected}")),
            _ => {
                let mut m = format!("unknown top-level table or key{expected}");
                if SIIT_KEYS.contains(&name) {
                    m.push_str(&format!("; `{name}` belongs in the [siit] table: add a `[siit]` header above it"));
                }
                Error::new(ErrorKind::UnknownKey, Some(name.to_string()), m)
            }
        }
    } else {
        Error::new(ErrorKind::Type, key, msg)
    };
    e.at(text, inner.span())
}

fn parse_prefix6(text: &str, key: &str, v: &Spanned<String>) -> Result<Prefix6, Error> {
    Prefix6::from_str(v.get_ref())
        .map_err(|e| Error::new(ErrorKind::Invalid, Some(key.to_string()), e.to_string()).at(text, Some(v.span())))
}

fn parse_prefix4(text: &str, key: &str, v: &Spanned<String>) -> Result<Prefix4, Error> {
    Prefix4::from_str(v.get_ref())
        .map_err(|e| Error::new(ErrorKind::Invalid, Some(key.to_string()), e.to_string()).at(text, Some(v.span())))
}

fn parse_addr<A: FromStr>(text: &str, key: &str, v: &Spanned<String>, family: &str) -> Result<A, Error> {
    A::from_str(v.get_ref().trim()).map_err(|_| {
        Error::new(ErrorKind::Invalid, Some(key.to_string()), format!("`{}` is not an {family} address", v.get_ref()))
            .at(text, Some(v.span()))
    })
}

fn siit_from_toml(text: &str, t: SiitToml) -> Result<siit::Config, Error> {
    let mut c = siit::Config::default();
    if let Some(p) = &t.pool6 {
        c.pool6 = Some(parse_prefix6(text, "[siit] pool6", p)?);
    }
    if let Some(m) = t.mapping {
        c.mapping = match m {
            MappingToml::Rfc6052 => MappingMode::Rfc6052,
            MappingToml::Ivi => MappingMode::Ivi,
        };
    }
    for (i, e) in t.eamt.iter().enumerate() {
        let p6 = parse_prefix6(text, &format!("[siit] eamt[{i}].ipv6"), &e.ipv6)?;
        let p4 = parse_prefix4(text, &format!("[siit] eamt[{i}].ipv4"), &e.ipv4)?;
        c.eamt.push((p6, p4));
    }
    if let Some(v) = &t.rfc6791v4_prefix {
        c.rfc6791_v4 = Some(parse_prefix4(text, "[siit] rfc6791v4-prefix", v)?);
    }
    if let Some(v) = &t.rfc6791v6_prefix {
        c.rfc6791_v6 = Some(parse_prefix6(text, "[siit] rfc6791v6-prefix", v)?);
    }
    if let Some(v) = &t.ipv4_address {
        c.ipv4_address = parse_addr::<Ipv4Addr>(text, "[siit] ipv4-address", v, "IPv4")?;
    }
    if let Some(v) = &t.ipv6_address {
        c.ipv6_address = Some(parse_addr::<Ipv6Addr>(text, "[siit] ipv6-address", v, "IPv6")?);
    }
    let set = |dst: &mut bool, v: Option<bool>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    set(&mut c.eam_hairpinning, t.eam_hairpinning);
    set(&mut c.amend_udp_checksum_zero, t.amend_udp_checksum_zero);
    set(&mut c.reset_traffic_class, t.reset_traffic_class);
    set(&mut c.reset_tos, t.reset_tos);
    if let Some(v) = t.new_tos {
        c.new_tos = v;
    }
    if let Some(v) = t.lowest_ipv6_mtu {
        c.lowest_ipv6_mtu = v;
    }
    if let Some(v) = t.mtu_plateaus {
        c.mtu_plateaus = v;
    }
    if let Some(v) = t.ipv4_mtu {
        c.ipv4_mtu = v;
    }
    if let Some(v) = t.ipv6_mtu {
        c.ipv6_mtu = v;
    }
    Ok(c)
}

impl Config {
    /// Parse TOML text: syntax, key names, types, prefixes and addresses.
    /// Does not build the engines; see [`Config::check`].
    pub fn parse(text: &str) -> Result<Config, Error> {
        let de = toml::Deserializer::parse(text).map_err(|e| {
            Error::new(ErrorKind::Syntax, None, e.message().trim().replace('\n', "; ")).at(text, e.span())
        })?;
        let file: FileToml = serde_path_to_error::deserialize(de).map_err(|e| classify(text, e))?;
        let siit = file.siit.map(|t| siit_from_toml(text, t)).transpose()?;
        let tun = file.tun.map(|t| tun_from_toml(text, t)).transpose()?.unwrap_or_default();
        let admin = file.admin.map(|t| admin_from_toml(text, t)).transpose()?.unwrap_or_default();
        let daemon = file.daemon.map(|t| daemon_from_toml(text, t)).transpose()?.unwrap_or_default();
        Ok(Config { siit, nat64: file.nat64, dns64: file.dns64, trgw: file.trgw, tun, admin, daemon, origin: None })
    }

    /// Read, parse and [`check`](Config::check) a configuration file.
    /// Errors name the file.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::new(ErrorKind::Io, None, format!("cannot read: {e}")).in_file(Some(path)))?;
        let mut cfg = Config::parse(&text).map_err(|e| e.in_file(Some(path)))?;
        cfg.origin = Some(path.to_path_buf());
        cfg.check()?;
        Ok(cfg)
    }

    /// Validate what [`parse`](Config::parse) cannot: at least one function
    /// is configured, and every configured one can be built.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(t) = &self.trgw {
            t.check().map_err(|m| Error::new(ErrorKind::Invalid, None, m).in_file(self.origin.as_deref()))?;
        }
        if self.siit.is_none() && self.nat64.is_none() && self.dns64.is_none() && self.trgw.is_none() {
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
        if let Some(d) = &self.dns64 {
            d.check().map_err(|e| {
                Error::new(ErrorKind::Invalid, Some(format!("[dns64] {}", e.key)), e.message)
                    .in_file(self.origin.as_deref())
            })?;
        }
        crate::validate::check(self)
            .map_err(|(key, msg)| Error::new(ErrorKind::Invalid, Some(key), msg).in_file(self.origin.as_deref()))
    }

    /// The RFC 7915 header settings NAT64 uses: those of `[siit]` when it is
    /// configured (MTUs, TOS, `ipv4-address`, ...), else the defaults.
    pub fn nat64_xlat_config(&self) -> siit::Config {
        self.siit.clone().unwrap_or_default()
    }

    /// Build the stateful translator from `[nat64]` (and the header
    /// settings of [`Config::nat64_xlat_config`]).
    pub fn nat64_translator(&self) -> Result<nat64::Nat64, Error> {
        let Some(c) = &self.nat64 else {
            return Err(
                Error::new(ErrorKind::Missing, Some("[nat64]".into()), "table missing").in_file(self.origin.as_deref())
            );
        };
        nat64::Nat64::with_xlat(c.clone(), self.nat64_xlat_config()).map_err(|e| self.nat64_error(e))
    }

    /// A `nat64` crate error as a configuration error naming `[nat64] key`.
    pub fn nat64_error(&self, e: nat64::Error) -> Error {
        match e {
            nat64::Error::Config(c) => {
                let key = c
                    .key
                    .strip_prefix("nat64.")
                    .map_or_else(|| format!("[siit] {}", c.key), |k| format!("[nat64] {k}"));
                Error::new(ErrorKind::Invalid, Some(key), c.msg)
            }
            nat64::Error::Bib(m) => Error::new(ErrorKind::Invalid, Some("[nat64] bib".into()), m),
        }
        .in_file(self.origin.as_deref())
    }

    /// Build the stateless translator from `[siit]`.
    pub fn siit_translator(&self) -> Result<Translator, Error> {
        let Some(c) = &self.siit else {
            return Err(Error::new(
                ErrorKind::Missing,
                Some("[siit]".into()),
                "table missing: the translator needs it",
            )
            .in_file(self.origin.as_deref()));
        };
        Translator::new(c.clone()).map_err(|e| {
            Error::new(ErrorKind::Invalid, Some(format!("[siit] {}", e.key)), e.msg).in_file(self.origin.as_deref())
        })
    }
}

impl Config {
    /// The file [`Config::load`] read, if any.
    pub fn origin(&self) -> Option<&Path> {
        self.origin.as_deref()
    }
}

// ---------------------------------------------------------------------------
// Daemon tables: [tun], [admin], [daemon].

/// Every key of the `[tun]` table.
pub const TUN_KEYS: &[&str] =
    &["name", "mtu", "txqueuelen", "queues", "io", "batch", "pin-workers", "addresses", "auto-routes", "routes"];

/// How workers move packets in and out of their TUN queue (`[tun] io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// io_uring: reads kept posted, writes batched, one system call per batch.
    Uring,
    /// Non-blocking `read(2)` until the queue is empty, one `write(2)` per
    /// packet, `poll(2)` when idle. The default: in the RFC 8219 bench it has
    /// the lower latency (no second wake-up per read) and the higher
    /// zero-loss rate.
    #[default]
    Poll,
}
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

/// An IP prefix of either family (a route destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPrefix {
    /// IPv4.
    V4(Prefix4),
    /// IPv6.
    V6(Prefix6),
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpPrefix::V4(p) => write!(f, "{}/{}", p.addr(), p.len()),
            IpPrefix::V6(p) => write!(f, "{}/{}", p.addr(), p.len()),
        }
    }
}

/// An interface address with its prefix length (host bits may be set),
/// e.g. `192.0.2.1/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length (32/128 when written without one).
    pub len: u8,
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

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
    /// `io`: `"uring"` (default) or `"poll"`.
    pub io: IoMode,
    /// `batch`: packets a worker reads per wake-up before writing. Default 64.
    pub batch: usize,
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
struct TunToml {
    name: Option<Spanned<String>>,
    mtu: Option<u32>,
    txqueuelen: Option<u32>,
    queues: Option<usize>,
    io: Option<Spanned<String>>,
    batch: Option<usize>,
    pin_workers: Option<bool>,
    addresses: Option<Vec<Spanned<String>>>,
    auto_routes: Option<bool>,
    routes: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
struct AdminToml {
    enabled: Option<bool>,
    listen: Option<Spanned<String>>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    token_for_read: Option<bool>,
    hosts: Option<Vec<String>>,
    max_connections: Option<usize>,
    max_header_bytes: Option<usize>,
    max_body_bytes: Option<usize>,
    request_timeout: Option<u64>,
    idle_timeout: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
struct DaemonToml {
    log_level: Option<Spanned<String>>,
    icmp_error_rate: Option<u32>,
    icmp_error_burst: Option<u32>,
}

fn invalid(text: &str, key: &str, span: Range<usize>, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Invalid, Some(key.to_string()), msg).at(text, Some(span))
}

/// Parse `ADDR/LEN` (host bits allowed) or a bare address.
fn parse_ifaddr(text: &str, key: &str, v: &Spanned<String>) -> Result<IfAddr, Error> {
    let s = v.get_ref().trim();
    let bad = || invalid(text, key, v.span(), format!("`{s}` is not an address with an optional /length"));
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l.parse::<u8>().ok().filter(|&n| n <= max).ok_or_else(bad)?,
        None => max,
    };
    Ok(IfAddr { addr, len })
}

fn parse_ipprefix(text: &str, key: &str, v: &Spanned<String>) -> Result<IpPrefix, Error> {
    if v.get_ref().contains(':') {
        parse_prefix6(text, key, v).map(IpPrefix::V6)
    } else {
        parse_prefix4(text, key, v).map(IpPrefix::V4)
    }
}

/// `v` when it is within `lo..=hi`, else an error naming `key`.
fn ranged<T: PartialOrd + fmt::Display>(key: &str, v: T, lo: T, hi: T) -> Result<T, Error> {
    if v < lo || v > hi {
        return Err(Error::new(ErrorKind::Invalid, Some(key.to_string()), format!("{v} is outside {lo}..={hi}")));
    }
    Ok(v)
}

fn tun_from_toml(text: &str, t: TunToml) -> Result<TunConfig, Error> {
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
        c.io = match io.get_ref().as_str() {
            "uring" => IoMode::Uring,
            "poll" => IoMode::Poll,
            other => {
                return Err(invalid(text, "[tun] io", io.span(), format!("`{other}` is not \"uring\" or \"poll\"")))
            }
        };
    }
    if let Some(b) = t.batch {
        c.batch = ranged("[tun] batch", b, 1, 1024)?;
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
        c.routes.push(parse_ipprefix(text, &format!("[tun] routes[{i}]"), r)?);
    }
    Ok(c)
}

fn admin_from_toml(text: &str, t: AdminToml) -> Result<AdminConfig, Error> {
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
        c.request_timeout = ranged("[admin] request-timeout", v, 1, 3600)?;
    }
    if let Some(v) = t.idle_timeout {
        c.idle_timeout = ranged("[admin] idle-timeout", v, 1, 86_400)?;
    }
    Ok(c)
}

fn daemon_from_toml(text: &str, t: DaemonToml) -> Result<DaemonConfig, Error> {
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

/// A complete, commented example configuration: every key with its default
/// and a one-line explanation. It parses (and is tested to).
pub fn example() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = include_str!("example.toml").to_string();
        s.push_str("\n# The tables below are commented out: uncomment and adapt the ones you run.\n\n");
        s.push_str("# ---------------------------------------------------------------------------\n");
        s.push_str(&commented(nat64::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(&commented(dns64::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(&commented(trgw::EXAMPLE_TOML));
        s
    })
}

/// `text` with every line that is not already a comment commented out.
fn commented(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    for l in text.lines() {
        if l.is_empty() || l.starts_with('#') {
            out.push_str(l);
        } else {
            out.push_str("# ");
            out.push_str(l);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> Error {
        match Config::parse(text).and_then(|c| c.check().map(|()| c)) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        }
    }

    fn assert_names(text: &str, key: &str) -> Error {
        let e = err(text);
        let s = e.to_string();
        assert!(s.contains(key), "`{key}` not named in: {s}");
        assert!(!s.contains('\n'), "multi-line error: {s}");
        e
    }

    #[test]
    fn defaults_come_from_xlat() {
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n").unwrap().siit.unwrap();
        let d = siit::Config::default();
        assert_eq!(c.pool6, Some("64:ff9b:1::/96".parse().unwrap()));
        assert_eq!(c.mapping, MappingMode::Rfc6052);
        assert!(c.eamt.is_empty());
        assert!(c.eam_hairpinning);
        assert_eq!(c.rfc6791_v4, None);
        assert_eq!(c.rfc6791_v6, None);
        assert_eq!(c.lowest_ipv6_mtu, 1280);
        assert!(!c.amend_udp_checksum_zero);
        assert!(!c.reset_traffic_class);
        assert!(!c.reset_tos);
        assert_eq!(c.new_tos, 0);
        assert_eq!(c.mtu_plateaus, d.mtu_plateaus);
        assert_eq!((c.ipv4_mtu, c.ipv6_mtu), (1500, 1500));
        assert_eq!(c.ipv4_address, Ipv4Addr::new(192, 0, 0, 8));
        assert_eq!(c.ipv6_address, None);
    }

    #[test]
    fn every_key_is_read() {
        let c = Config::parse(
            r#"
            [siit]
            pool6 = "2001:db8:100::/40"
            mapping = "ivi"
            eamt = [{ ipv6 = "2001:db8:6::/120", ipv4 = "192.0.2.0/24" }]
            eam-hairpinning = false
            rfc6791v4-prefix = "198.51.100.0/30"
            rfc6791v6-prefix = "2001:db8:ffff::/64"
            lowest-ipv6-mtu = 1400
            amend-udp-checksum-zero = true
            reset-traffic-class = true
            reset-tos = true
            new-tos = 32
            mtu-plateaus = [1500, 1280, 576]
            ipv4-mtu = 1400
            ipv6-mtu = 9000
            ipv4-address = "203.0.113.1"
            ipv6-address = "2001:db8::1"
            "#,
        )
        .unwrap()
        .siit
        .unwrap();
        assert_eq!(c.mapping, MappingMode::Ivi);
        assert_eq!(c.eamt.len(), 1);
        assert!(!c.eam_hairpinning);
        assert_eq!(c.rfc6791_v4, Some("198.51.100.0/30".parse().unwrap()));
        assert_eq!(c.rfc6791_v6, Some("2001:db8:ffff::/64".parse().unwrap()));
        assert_eq!(c.lowest_ipv6_mtu, 1400);
        assert!(c.amend_udp_checksum_zero && c.reset_traffic_class && c.reset_tos);
        assert_eq!(c.new_tos, 32);
        assert_eq!(c.mtu_plateaus, vec![1500, 1280, 576]);
        assert_eq!((c.ipv4_mtu, c.ipv6_mtu), (1400, 9000));
        assert_eq!(c.ipv4_address, Ipv4Addr::new(203, 0, 113, 1));
        assert_eq!(c.ipv6_address, Some("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn jool_underscore_aliases() {
        let c = Config::parse("[siit]\nrfc6791_v4 = \"192.0.2.0/30\"\nrfc6791_v6 = \"2001:db8::/64\"\n")
            .unwrap()
            .siit
            .unwrap();
        assert_eq!(c.rfc6791_v4, Some("192.0.2.0/30".parse().unwrap()));
        assert_eq!(c.rfc6791_v6, Some("2001:db8::/64".parse().unwrap()));
    }

    #[test]
    fn both_eamt_syntaxes() {
        let tables = Config::parse(
            r#"[siit]
            eamt = [
                { ipv6 = "2001:db8:6::/120", ipv4 = "192.0.2.0/24" },
                { ipv4 = "198.51.100.7", ipv6 = "2001:db8:7::7" },
            ]"#,
        )
        .unwrap();
        let pairs = Config::parse(
            r#"[siit]
            eamt = [["2001:db8:6::/120", "192.0.2.0/24"], ["2001:db8:7::7", "198.51.100.7"]]"#,
        )
        .unwrap();
        let want: Vec<(Prefix6, Prefix4)> = vec![
            ("2001:db8:6::/120".parse().unwrap(), "192.0.2.0/24".parse().unwrap()),
            ("2001:db8:7::7/128".parse().unwrap(), "198.51.100.7/32".parse().unwrap()),
        ];
        assert_eq!(tables.siit.unwrap().eamt, want);
        assert_eq!(pairs.siit.unwrap().eamt, want);
        // Array-of-tables form works too.
        let aot =
            Config::parse("[siit]\n[[siit.eamt]]\nipv6 = \"2001:db8:6::/120\"\nipv4 = \"192.0.2.0/24\"\n").unwrap();
        assert_eq!(aot.siit.unwrap().eamt, want[..1]);
        // Jool's key names.
        let jool = Config::parse(
            "[siit]\neamt = [{ \"ipv6 prefix\" = \"2001:db8:6::/120\", \"ipv4 prefix\" = \"192.0.2.0/24\" }]\n",
        )
        .unwrap();
        assert_eq!(jool.siit.unwrap().eamt, want[..1]);
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
    fn bad_prefix_is_named() {
        let e = assert_names("[siit]\npool6 = \"2001:db8::1/32\"\n", "[siit] pool6");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert!(e.to_string().contains("bits set beyond its prefix length"), "{e}");
        assert_eq!(e.position(), Some((2, 9)));
        assert_names("[siit]\npool6 = \"192.0.2.0/24\"\n", "[siit] pool6");
        assert_names(
            "[siit]\npool6 = \"64:ff9b::/96\"\nrfc6791v4-prefix = \"192.0.2.0/33\"\n",
            "[siit] rfc6791v4-prefix",
        );
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nrfc6791_v6 = \"nope\"\n", "[siit] rfc6791v6-prefix");
        assert_names("[siit]\neamt = [[\"2001:db8::/120\", \"192.0.2.1/24\"]]\n", "[siit] eamt[0].ipv4");
        assert_names(
            "[siit]\neamt = [{ ipv6 = \"2001:db8::1/120\", ipv4 = \"192.0.2.0/24\" }]\n",
            "[siit] eamt[0].ipv6",
        );
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nipv4-address = \"192.0.2\"\n", "[siit] ipv4-address");
        assert_names("[siit]\npool6 = \"64:ff9b::/96\"\nipv6-address = \"192.0.2.1\"\n", "[siit] ipv6-address");
    }

    #[test]
    fn translator_errors_are_named() {
        // These are rejected by xlat's `Translator::new`, which names the key.
        let base = "[siit]\npool6 = \"64:ff9b:1::/96\"\nipv6-address = \"2001:db8::8\"\n";
        let e = assert_names(&format!("{base}lowest-ipv6-mtu = 1000\n"), "[siit] lowest-ipv6-mtu");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_names(&format!("{base}ipv6-mtu = 1000\n"), "[siit] ipv6-mtu");
        assert_names(&format!("{base}ipv4-mtu = 60\n"), "[siit] ipv4-mtu");
        assert_names(&format!("{base}mtu-plateaus = []\n"), "[siit] mtu-plateaus");
        assert_names("[siit]\nmapping = \"ivi\"\n", "[siit] pool6");
        assert_names("[siit]\nipv6-address = \"2001:db8::8\"\n", "[siit] pool6");
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
    fn example_parses_and_mentions_every_key() {
        let c = Config::parse(example()).unwrap_or_else(|e| panic!("example does not parse: {e}"));
        c.check().unwrap_or_else(|e| panic!("example is not a valid configuration: {e}"));
        let s = c.siit.expect("example has [siit]");
        // The example states the defaults.
        let d = siit::Config::default();
        assert_eq!(s.eam_hairpinning, d.eam_hairpinning);
        assert_eq!(s.lowest_ipv6_mtu, d.lowest_ipv6_mtu);
        assert_eq!(s.mtu_plateaus, d.mtu_plateaus);
        assert_eq!(s.ipv4_address, d.ipv4_address);
        assert_eq!((s.ipv4_mtu, s.ipv6_mtu), (d.ipv4_mtu, d.ipv6_mtu));
        for k in SIIT_KEYS {
            assert!(example().lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{k} ="))), "{k}");
        }
    }

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
        assert_names(&format!("{base}[tun]\nio = \"epoll\"\n"), "[tun] io");
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

    #[test]
    fn example_has_the_daemon_tables() {
        let c = Config::parse(example()).unwrap();
        assert_eq!(c.tun, TunConfig::default());
        assert_eq!(c.admin, AdminConfig::default());
        assert_eq!(c.daemon, DaemonConfig::default());
        for k in TUN_KEYS.iter().chain(ADMIN_KEYS).chain(DAEMON_KEYS) {
            assert!(example().lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{k} ="))), "{k}");
        }
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
            .map(|l| {
                let body = l.trim_start_matches(['#', ' ']);
                let key =
                    body.split_once(" = ").is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '-'));
                let table = body.starts_with('[') && body.ends_with(']') && !body.contains(' ');
                if key || table {
                    format!("{body}\n")
                } else {
                    "\n".to_string()
                }
            })
            .collect();
        let d: Config = Config::parse(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
        assert!(d.dns64.is_some());
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

    #[test]
    fn line_col_counts_chars() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
        assert_eq!(line_col("x", 99), (1, 2));
    }
}
