//! The `[dns64]` configuration table.
//!
//! Keys are kebab-case; unknown keys are errors. Values are kept as text in
//! [`Config`] (so the table deserialises from any serde format and prints
//! back unchanged) and validated by [`Config::check`], whose errors name the
//! key at fault, e.g. `dns64.prefix: prefix length /72 not allowed (allowed:
//! 32, 40, 48, 56, 64, 96)`.

use core::fmt;
use core::net::{IpAddr, Ipv6Addr, SocketAddr};
use core::time::Duration;

use serde::{Deserialize, Serialize};
use xlat::addr::{IpPrefix, Prefix4, Prefix6, Rfc6052};

/// Default `listen`: loopback only, so a gateway never becomes an open
/// resolver by accident; operators list the client-facing addresses.
pub const DEFAULT_LISTEN: &[&str] = &["[::1]:53", "127.0.0.1:53"];
/// Default `prefix`: the Well-Known Prefix (RFC 6052 §2.1, RFC 6147 §5.2).
pub const DEFAULT_PREFIX: &str = "64:ff9b::/96";
/// Default `timeout` (per upstream try).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Default `exclude-aaaa` (RFC 6147 §5.1.4: IPv4-mapped addresses).
pub const DEFAULT_EXCLUDE_AAAA: &[&str] = &["::ffff:0:0/96"];
/// Default `exclude-a`: IPv4 addresses an IPv6-only client can never reach
/// through a NAT64 ("this network", loopback, link-local, multicast,
/// reserved and limited broadcast).
pub const DEFAULT_EXCLUDE_A: &[&str] = &["0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/3"];
/// Default `allow`: loopback, RFC 1918, RFC 6598 shared space, ULA and
/// link-local. Global client prefixes must be added by the operator.
pub const DEFAULT_ALLOW: &[&str] = &[
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
];

/// Default `cache-entries`: answers kept (0 turns the cache off).
pub const DEFAULT_CACHE_ENTRIES: usize = 10_000;
/// Default `cache-bytes`: memory the cached answers may take.
pub const DEFAULT_CACHE_BYTES: usize = 8 << 20;
/// Default `cache-max-ttl`: no answer is kept longer (RFC 8767 §4
/// suggests a day as a cap for positive answers).
pub const DEFAULT_CACHE_MAX_TTL: Duration = Duration::from_secs(86_400);
/// Default `cache-max-negative-ttl`: RFC 2308 §5 recommends one to three
/// hours as the upper bound of negative caching.
pub const DEFAULT_CACHE_MAX_NEGATIVE_TTL: Duration = Duration::from_secs(3 * 3600);

/// Accepted `timeout` range.
pub const TIMEOUT_RANGE: core::ops::RangeInclusive<Duration> = Duration::from_millis(10)..=Duration::from_secs(30);
/// Old spellings still accepted, each with a deprecation warning:
/// `timeout-ms` (a bare integer under it counts milliseconds) is `timeout`.
pub const ALIASES: &[confval::Alias] = &[confval::Alias::Duration { old: "timeout-ms", new: "timeout", unit: "ms" }];
/// At most this many upstream resolvers.
pub const MAX_UPSTREAMS: usize = 8;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The `[dns64]` table. See `docs/dns64.md` and [`EXAMPLE_TOML`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// Socket addresses to serve on, UDP and TCP each.
    pub listen: Vec<String>,
    /// RFC 6052 prefix used for synthesis and PTR answers.
    pub prefix: String,
    /// Upstream recursive resolvers (`ADDR` or `ADDR:PORT`, `[V6]:PORT`),
    /// tried in order. Required.
    pub upstream: Vec<String>,
    /// Time to wait for one upstream try (UDP, and again for a TCP retry),
    /// in the duration syntax of [`confval::duration`].
    #[serde(with = "confval::duration")]
    pub timeout: Duration,
    /// IPv6 prefixes whose AAAA records are treated as absent (RFC 6147 §5.1.4).
    pub exclude_aaaa: Vec<String>,
    /// IPv4 prefixes whose A records are never synthesised into AAAA.
    pub exclude_a: Vec<String>,
    /// Client prefixes allowed to query; others get REFUSED.
    pub allow: Vec<String>,
    /// RFC 6147 §5.2: IPv4 ranges synthesised under a prefix of their own
    /// (`[[dns64.prefixes]]`), tried in order; addresses in none of them
    /// use `prefix`.
    pub prefixes: Vec<RangePrefix>,
    /// Upstream answers kept in the cache (RFC 2308); 0 turns it off.
    pub cache_entries: usize,
    /// Bytes the cached answers may take.
    pub cache_bytes: usize,
    /// Longest time a positive answer is kept (its TTL counts if shorter).
    #[serde(with = "confval::duration")]
    pub cache_max_ttl: Duration,
    /// Longest time a negative answer (NXDOMAIN, NODATA) is kept (its
    /// SOA's TTL and MINIMUM count if shorter, RFC 2308 §5).
    #[serde(with = "confval::duration")]
    pub cache_max_negative_ttl: Duration,
}

/// `[[dns64.prefixes]]`: an RFC 6052 prefix for some IPv4 ranges
/// (RFC 6147 §5.2), e.g. `{ prefix = "64:ff9b:1::/96", ipv4 = ["10.0.0.0/8"] }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RangePrefix {
    /// RFC 6052 prefix (the matching NAT64's pool6).
    pub prefix: String,
    /// IPv4 prefixes synthesised under it.
    pub ipv4: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: strings(DEFAULT_LISTEN),
            prefix: DEFAULT_PREFIX.to_string(),
            upstream: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            exclude_aaaa: strings(DEFAULT_EXCLUDE_AAAA),
            exclude_a: strings(DEFAULT_EXCLUDE_A),
            allow: strings(DEFAULT_ALLOW),
            prefixes: Vec::new(),
            cache_entries: DEFAULT_CACHE_ENTRIES,
            cache_bytes: DEFAULT_CACHE_BYTES,
            cache_max_ttl: DEFAULT_CACHE_MAX_TTL,
            cache_max_negative_ttl: DEFAULT_CACHE_MAX_NEGATIVE_TTL,
        }
    }
}

/// A configuration error: the key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Key inside `[dns64]`, e.g. `prefix` or `upstream`.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dns64.{}: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError { key, message: message.into() }
}

/// Parse `ADDR`, `ADDR:PORT` or `[V6ADDR]:PORT`; a bare address gets `port`.
pub fn parse_socket_addr(s: &str, port: u16) -> Result<SocketAddr, String> {
    let t = s.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(a) = t.parse::<IpAddr>() {
        return Ok(SocketAddr::new(a, port));
    }
    if let Some(inner) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        if let Ok(a) = inner.parse::<Ipv6Addr>() {
            return Ok(SocketAddr::new(IpAddr::V6(a), port));
        }
    }
    Err(format!("`{s}` is not ADDRESS, ADDRESS:PORT or [IPV6]:PORT"))
}

/// What the synthesis core needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// For addresses in none of `ranges`.
    pub prefix: Rfc6052,
    /// RFC 6147 §5.2: (prefix, its IPv4 ranges), in order.
    pub ranges: Vec<(Rfc6052, Vec<Prefix4>)>,
    pub exclude_aaaa: Vec<Prefix6>,
    pub exclude_a: Vec<Prefix4>,
    pub allow: Vec<IpPrefix>,
}

impl Policy {
    /// The prefix `a` is synthesised under.
    pub(crate) fn prefix_for(&self, a: core::net::Ipv4Addr) -> &Rfc6052 {
        self.ranges.iter().find(|(_, r)| r.iter().any(|p| p.contains(a))).map_or(&self.prefix, |(p, _)| p)
    }

    /// The IPv4 address a synthesised AAAA address stands for (any of
    /// the prefixes, when it maps back to the same prefix).
    pub(crate) fn extract(&self, a: &core::net::Ipv6Addr) -> Option<core::net::Ipv4Addr> {
        self.ranges
            .iter()
            .map(|(p, _)| p)
            .chain([&self.prefix])
            .filter_map(|p| p.extract(a).map(|v4| (p, v4)))
            .find(|(p, v4)| self.prefix_for(*v4).prefix() == p.prefix())
            .map(|(_, v4)| v4)
    }
}

/// The cache limits, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheLimits {
    pub entries: usize,
    pub bytes: usize,
    pub max_ttl: u32,
    pub max_negative_ttl: u32,
}

/// Everything the server needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub listen: Vec<SocketAddr>,
    pub upstream: Vec<SocketAddr>,
    pub timeout: Duration,
    pub cache: CacheLimits,
}

fn list<T>(
    key: &'static str,
    items: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, ConfigError> {
    items.iter().map(|s| parse(s).map_err(|m| err(key, m))).collect()
}

impl Config {
    /// Validate every key; the error names the first key at fault.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.settings().map(|_| ())
    }

    /// Upper bound on the time from a client's query to our answer: every
    /// query needs at most two upstream lookups (AAAA then A, or the
    /// in-addr.arpa PTR), each trying every upstream once for `timeout`.
    /// The server answers SERVFAIL when it is reached.
    pub fn answer_bound(&self) -> Duration {
        let n = self.upstream.len().clamp(1, MAX_UPSTREAMS) as u64;
        self.timeout.clamp(*TIMEOUT_RANGE.start(), *TIMEOUT_RANGE.end()) * (2 * n as u32)
    }

    /// The translation prefixes answers are synthesised under (`prefix`
    /// and those of `[[dns64.prefixes]]`), for the gateway's destination
    /// policy (an address under one of them reaches the IPv4 address it
    /// carries).
    pub fn translation_prefixes(&self) -> Result<Vec<Rfc6052>, ConfigError> {
        let p = self.policy()?;
        Ok(std::iter::once(p.prefix).chain(p.ranges.into_iter().map(|(p, _)| p)).collect())
    }

    pub(crate) fn policy(&self) -> Result<Policy, ConfigError> {
        let p6: Prefix6 = self.prefix.parse().map_err(|e| err("prefix", format!("{e}")))?;
        let prefix = Rfc6052::new(p6).map_err(|e| err("prefix", format!("{e}")))?;
        let exclude_aaaa =
            list("exclude-aaaa", &self.exclude_aaaa, |s| s.parse::<Prefix6>().map_err(|e| e.to_string()))?;
        let exclude_a = list("exclude-a", &self.exclude_a, |s| s.parse::<Prefix4>().map_err(|e| e.to_string()))?;
        let allow = list("allow", &self.allow, |s| s.parse::<IpPrefix>().map_err(|e| e.to_string()))?;
        let mut ranges = Vec::with_capacity(self.prefixes.len());
        for (i, r) in self.prefixes.iter().enumerate() {
            let at = |m: String| err("prefixes", format!("entry {}: {m}", i + 1));
            let p6: Prefix6 = r.prefix.parse().map_err(|e| at(format!("prefix: {e}")))?;
            let p = Rfc6052::new(p6).map_err(|e| at(format!("prefix: {e}")))?;
            if r.ipv4.is_empty() {
                return Err(at("ipv4 lists no IPv4 prefix (the default `prefix` covers everything else)".into()));
            }
            let v4 = r
                .ipv4
                .iter()
                .map(|s| s.parse::<Prefix4>().map_err(|e| at(format!("ipv4: {e}"))))
                .collect::<Result<Vec<_>, _>>()?;
            ranges.push((p, v4));
        }
        Ok(Policy { prefix, ranges, exclude_aaaa, exclude_a, allow })
    }

    pub(crate) fn cache_limits(&self) -> Result<CacheLimits, ConfigError> {
        let secs = |key: &'static str, d: Duration| {
            if d.is_zero() {
                return Err(err(key, "must be at least 1s (set cache-entries = 0 to turn the cache off)"));
            }
            Ok(u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1))
        };
        if self.cache_entries > 0 && self.cache_bytes < 4096 {
            return Err(err("cache-bytes", format!("{} is below 4096", self.cache_bytes)));
        }
        Ok(CacheLimits {
            entries: self.cache_entries,
            bytes: self.cache_bytes,
            max_ttl: secs("cache-max-ttl", self.cache_max_ttl)?,
            max_negative_ttl: secs("cache-max-negative-ttl", self.cache_max_negative_ttl)?,
        })
    }

    pub(crate) fn settings(&self) -> Result<Settings, ConfigError> {
        self.policy()?;
        if self.listen.is_empty() {
            return Err(err("listen", "at least one address is required"));
        }
        let listen = list("listen", &self.listen, |s| {
            let a = parse_socket_addr(s, 53)?;
            Ok(a)
        })?;
        if self.upstream.is_empty() {
            return Err(err("upstream", "at least one resolver address is required, e.g. upstream = [\"192.0.2.53\"]"));
        }
        if self.upstream.len() > MAX_UPSTREAMS {
            return Err(err("upstream", format!("at most {MAX_UPSTREAMS} resolvers")));
        }
        let upstream = list("upstream", &self.upstream, |s| {
            let a = parse_socket_addr(s, 53)?;
            if a.port() == 0 || a.ip().is_unspecified() || a.ip().is_multicast() {
                return Err(format!("`{s}` is not a usable resolver address"));
            }
            Ok(a)
        })?;
        if !TIMEOUT_RANGE.contains(&self.timeout) {
            let show = confval::duration::format;
            return Err(err(
                "timeout",
                format!(
                    "{} is out of range ({}..={})",
                    show(self.timeout),
                    show(*TIMEOUT_RANGE.start()),
                    show(*TIMEOUT_RANGE.end())
                ),
            ));
        }
        Ok(Settings { listen, upstream, timeout: self.timeout, cache: self.cache_limits()? })
    }
}

/// The commented `[dns64]` block for `v6gate config example`. Every key is
/// shown with its default, except `upstream`, which has none.
pub const EXAMPLE_TOML: &str = r#"# ---------------------------------------------------------------------------
# [dns64] — DNS64 resolver front end, RFC 6147. Answers AAAA queries for
# IPv4-only names with AAAA records synthesised from their A records under
# `prefix` (RFC 6052), so IPv6-only clients reach them through NAT64. Real AAAA
# records pass through; other queries are forwarded unchanged.
[dns64]

# Addresses to serve DNS on (UDP and TCP on each). The default is loopback
# only; list the addresses your IPv6-only clients use.
listen = ["[::1]:53", "127.0.0.1:53"]

# Recursive resolvers to forward to, tried in order (ADDRESS, ADDRESS:PORT or
# [IPV6]:PORT; port 53 by default). Required.
# upstream = ["192.0.2.53", "[2001:db8::53]:53"]

# RFC 6052 prefix for synthesis (lengths 32, 40, 48, 56, 64 or 96); must be
# the NAT64's pool6. The well-known prefix 64:ff9b::/96 only carries global
# IPv4 addresses (RFC 6052 §3.1): A records with private addresses are not
# synthesised under it. Use a network-specific prefix such as
# 64:ff9b:1::/96 (RFC 8215) to reach private IPv4 servers.
prefix = "64:ff9b::/96"

# Time to wait for each upstream try (10ms..=30s). A client gets an answer,
# or SERVFAIL, within 2 x (number of upstreams) x timeout.
timeout = "1500ms"

# AAAA records inside these prefixes are treated as absent (RFC 6147 §5.1.4);
# when only such records exist the AAAA is synthesised from the A records.
exclude-aaaa = ["::ffff:0:0/96"]

# A records inside these IPv4 prefixes are never synthesised into AAAA.
exclude-a = ["0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/3"]

# Clients allowed to query (IPv4 and IPv6 prefixes); others get REFUSED. An
# open resolver is abused for amplification: add your client prefixes rather
# than "::/0".
allow = ["127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "::1/128", "fc00::/7", "fe80::/10"]

# Cache of upstream answers (RFC 2308: positive and negative answers, kept
# for their TTL, which counts down in the answers given from it; errors are
# not kept). Bounded by entries and bytes, least recently used first out.
# Zero entries turn it off.
cache-entries = 10000
cache-bytes = 8388608
cache-max-ttl = "1d"
cache-max-negative-ttl = "3h"

# RFC 6147 §5.2: IPv4 ranges synthesised under a prefix of their own (each
# the pool6 of the NAT64 that serves them), tried in order; addresses in
# none of them use `prefix` above.
# [[dns64.prefixes]]
# prefix = "64:ff9b:1::/96"
# ipv4 = ["10.0.0.0/8", "192.168.0.0/16"]
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Config, String> {
        #[derive(Deserialize)]
        struct File {
            dns64: Config,
        }
        toml::from_str::<File>(s).map(|f| f.dns64).map_err(|e| e.to_string())
    }

    #[test]
    fn example_parses_to_defaults_plus_upstream() {
        let cfg = parse(EXAMPLE_TOML).unwrap();
        assert_eq!(cfg, Config::default());
        // The example's only missing key is `upstream`.
        assert_eq!(cfg.check().unwrap_err().key, "upstream");
        let text = EXAMPLE_TOML.replace("# upstream = ", "upstream = ");
        let cfg = parse(&text).unwrap();
        cfg.check().unwrap();
        let s = cfg.settings().unwrap();
        assert_eq!(s.upstream, vec!["192.0.2.53:53".parse().unwrap(), "[2001:db8::53]:53".parse().unwrap()]);
        assert_eq!(s.listen.len(), 2);
        assert_eq!(cfg.answer_bound(), Duration::from_millis(6000));
    }

    #[test]
    fn errors_name_the_key() {
        let base = "[dns64]\nupstream = [\"127.0.0.1:5353\"]\n";
        assert!(parse(&format!("{base}nonsense = 1\n")).unwrap_err().contains("nonsense"));
        let cases = [
            ("prefix = \"64:ff9b::/72\"", "prefix", "/72"),
            ("prefix = \"64:ff9b::1/96\"", "prefix", "bits set"),
            ("exclude-aaaa = [\"::ffff:0:0\"]", "", ""),
            ("exclude-aaaa = [\"10.0.0.0/8\"]", "exclude-aaaa", "10.0.0.0/8"),
            ("exclude-a = [\"::/0\"]", "exclude-a", "::/0"),
            ("allow = [\"10.0.0.1/8\"]", "allow", "bits set"),
            ("listen = []", "listen", "at least one"),
            ("listen = [\"localhost:53\"]", "listen", "localhost"),
            ("timeout = \"5ms\"", "timeout", "5ms is out of range (10ms..=30s)"),
            ("timeout = 31", "timeout", "31s is out of range"),
        ];
        for (line, key, text) in cases {
            let cfg = parse(&format!("{base}{line}\n")).unwrap();
            match cfg.check() {
                Ok(()) => assert_eq!(key, "", "{line} should fail"),
                Err(e) => {
                    assert_eq!(e.key, key, "{line}");
                    assert!(e.to_string().starts_with(&format!("dns64.{key}: ")), "{e}");
                    assert!(e.to_string().contains(text), "{e}");
                }
            }
        }
        let cfg = parse("[dns64]\nupstream = [\"0.0.0.0\"]\n").unwrap();
        assert_eq!(cfg.check().unwrap_err().key, "upstream");
    }

    #[test]
    fn timeout_ms_is_an_alias_counting_milliseconds() {
        let mut doc = toml::de::DeTable::parse("[dns64]\ntimeout-ms = 2000\n").unwrap();
        let d = confval::alias::apply(doc.get_mut(), "dns64", ALIASES).unwrap();
        assert_eq!(d[0].to_string(), "[dns64] timeout-ms = 2000 is deprecated: write timeout = \"2s\"");
        #[derive(Deserialize)]
        struct File {
            dns64: Config,
        }
        let c = File::deserialize(toml::de::Deserializer::from(doc)).unwrap().dns64;
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(parse("[dns64]\ntimeout = \"2s\"\n").unwrap().timeout, Duration::from_secs(2));
        assert_eq!(parse("[dns64]\ntimeout = 2\n").unwrap().timeout, Duration::from_secs(2));
    }

    #[test]
    fn socket_addrs() {
        assert_eq!(parse_socket_addr("192.0.2.1", 53).unwrap(), "192.0.2.1:53".parse().unwrap());
        assert_eq!(parse_socket_addr("2001:db8::1", 53).unwrap(), "[2001:db8::1]:53".parse().unwrap());
        assert_eq!(parse_socket_addr("[2001:db8::1]", 53).unwrap(), "[2001:db8::1]:53".parse().unwrap());
        assert_eq!(parse_socket_addr("[::1]:5353", 53).unwrap(), "[::1]:5353".parse().unwrap());
        assert!(parse_socket_addr("host:53", 53).is_err());
    }
}
