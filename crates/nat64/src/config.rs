//! The `[nat64]` configuration block. Key names follow Jool where Jool has
//! the same knob (`pool6`, `pool4`, `address-dependent-filtering`,
//! `udp-timeout`, `icmp-timeout`, `tcp-est-timeout`, `tcp-trans-timeout`,
//! `max-stored-pkts`, `drop-externally-initiated-tcp`,
//! `handle-rst-during-fin-rcv`, `source-icmpv6-errors-better`, `bib`).
//!
//! Timeouts take the one duration syntax of the configuration
//! ([`confval::duration`]): `udp-timeout = "5m"`, `"2h4m"`, Jool's
//! `"HH:MM:SS"` text (`"00:05:00"`) or whole seconds (`300`) all work, and
//! [`Config::check`] refuses zero.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use serde::{Deserialize, Deserializer};
use xlat::addr::{Prefix4, Prefix6};

/// RFC 6146 §4: UDP_MIN (2 min) and UDP_DEFAULT (5 min).
pub const UDP_DEFAULT: u64 = 300;
/// RFC 6146 §4: ICMP_DEFAULT (60 s).
pub const ICMP_DEFAULT: u64 = 60;
/// RFC 6146 §4: TCP_EST (2 h 4 min).
pub const TCP_EST: u64 = 7440;
/// RFC 6146 §4: TCP_TRANS (4 min).
pub const TCP_TRANS: u64 = 240;
/// RFC 6146 §4: TCP_INCOMING_SYN (6 s).
pub const TCP_INCOMING_SYN: u64 = 6;
/// RFC 6146 §4: FRAGMENT_MIN (2 s).
pub const FRAGMENT_MIN: u64 = 2;

/// Translation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// RFC 6146 stateful NAT64: IPv6 transport addresses share the pool4
    /// addresses, ports allocated per RFC 6056 algorithm 3.
    #[default]
    Nat64,
    /// NAT-PT pool mode (RFC 2766 behaviour, the Napt-d TrGW model): each
    /// IPv6 host gets a whole pool4 address while it has sessions; ports
    /// are kept.
    Natpt,
}

/// A transport protocol with state in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// UDP (RFC 6146 §3.5.1).
    Udp,
    /// TCP (RFC 6146 §3.5.2).
    Tcp,
    /// ICMP queries, the identifier used as the port (RFC 6146 §3.5.3).
    Icmp,
}

impl Protocol {
    /// All three, in table order.
    pub const ALL: [Protocol; 3] = [Protocol::Udp, Protocol::Tcp, Protocol::Icmp];
    /// Table index.
    #[inline]
    pub fn idx(self) -> usize {
        self as usize
    }
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            Protocol::Tcp => "tcp",
            Protocol::Icmp => "icmp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pool4 entry: a prefix, optionally with a port range and protocols.
/// Written either as `"192.0.2.0/30"` (all ports 1–65535 for UDP/TCP,
/// identifiers 1–65535 for ICMP, all three protocols) or as a table
/// `{ prefix = "192.0.2.1/32", ports = "1024-65535", protocols = ["udp", "tcp"] }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool4Entry {
    /// Addresses.
    pub prefix: Prefix4,
    /// Inclusive port (or ICMP identifier) range.
    pub ports: (u16, u16),
    /// Protocols this entry serves.
    pub protocols: Vec<Protocol>,
}

impl<'de> Deserialize<'de> for Pool4Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        struct Full {
            prefix: String,
            #[serde(default)]
            ports: Option<String>,
            #[serde(default)]
            protocols: Option<Vec<Protocol>>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Short(String),
            Full(Full),
        }
        let full = match Raw::deserialize(d)? {
            Raw::Short(s) => Full { prefix: s, ports: None, protocols: None },
            Raw::Full(f) => f,
        };
        let prefix: Prefix4 = full.prefix.parse().map_err(serde::de::Error::custom)?;
        let ports = match full.ports {
            None => (1, 65535),
            Some(s) => parse_range(&s).map_err(serde::de::Error::custom)?,
        };
        let protocols = full.protocols.unwrap_or_else(|| Protocol::ALL.to_vec());
        Ok(Pool4Entry { prefix, ports, protocols })
    }
}

fn parse_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("`{s}` is not a port range LOW-HIGH (e.g. \"1024-65535\")");
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (s.trim(), s.trim()),
    };
    let lo: u16 = a.parse().map_err(|_| bad())?;
    let hi: u16 = b.parse().map_err(|_| bad())?;
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// A static BIB entry (`[[nat64.bib]]`), so IPv4 hosts can reach an IPv6
/// server: `{ protocol = "tcp", ipv6 = "[2001:db8::10]:80", ipv4 = "192.0.2.1:8080" }`.
/// For ICMP the "port" is the echo identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StaticBib {
    /// Protocol.
    pub protocol: Protocol,
    /// IPv6 transport address of the server.
    pub ipv6: SocketAddrV6,
    /// IPv4 transport address it is reached at (must be in pool4).
    pub ipv4: SocketAddrV4,
}

/// The longest timeout a `[nat64]` timer key takes: 30 days.
pub const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

/// A timeout in whole seconds, written in the one duration syntax of the
/// configuration ([`confval::duration`]: `300`, `"5m"`, `"2h4m"`, Jool's
/// `"HH:MM:SS"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secs(pub u64);

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        confval::duration::secs(d).map(Secs)
    }
}

fn de_prefix6<'de, D: Deserializer<'de>>(d: D) -> Result<Prefix6, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

fn default_pool6() -> Prefix6 {
    Prefix6::new(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96).expect("well-known prefix")
}

/// The `[nat64]` block. See `docs/nat64.md` for every key.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Config {
    /// RFC 6052 prefix IPv6 hosts reach IPv4 hosts through.
    #[serde(default = "default_pool6", deserialize_with = "de_prefix6")]
    pub pool6: Prefix6,
    /// IPv4 addresses (and port ranges) the translator owns.
    #[serde(default)]
    pub pool4: Vec<Pool4Entry>,
    /// `nat64` or `natpt`.
    #[serde(default)]
    pub mode: Mode,
    /// RFC 4787 address-dependent filtering instead of endpoint-independent.
    #[serde(default)]
    pub address_dependent_filtering: bool,
    /// UDP session lifetime, seconds.
    #[serde(default = "udp_d")]
    pub udp_timeout: Secs,
    /// ICMP query session lifetime, seconds.
    #[serde(default = "icmp_d")]
    pub icmp_timeout: Secs,
    /// Established TCP session lifetime, seconds.
    #[serde(default = "est_d")]
    pub tcp_est_timeout: Secs,
    /// Transitory TCP session lifetime, seconds.
    #[serde(default = "trans_d")]
    pub tcp_trans_timeout: Secs,
    /// How long an unsolicited IPv4 SYN is held (RFC 6146 §3.5.2.2,
    /// TCP_INCOMING_SYN), seconds.
    #[serde(default = "syn_d")]
    pub tcp_incoming_syn_timeout: Secs,
    /// Hard limit on sessions (all protocols together).
    #[serde(default = "max_sessions_d")]
    pub max_sessions: usize,
    /// Hard limit on BIB entries (all protocols together, static ones included).
    #[serde(default = "max_bib_d")]
    pub max_bib: usize,
    /// Unsolicited IPv4 SYNs held at once (Jool `max-stored-pkts`).
    #[serde(default = "max_stored_d")]
    pub max_stored_pkts: usize,
    /// Drop IPv4-initiated TCP instead of holding the SYN (Jool name).
    #[serde(default)]
    pub drop_externally_initiated_tcp: bool,
    /// An RST in V4 FIN RCV / V6 FIN RCV moves the session to TRANS (Jool name).
    #[serde(default)]
    pub handle_rst_during_fin_rcv: bool,
    /// Source of an ICMPv6 error translated from an ICMPv4 error (Jool's
    /// name and default): `true`, the ICMPv4 error's own source under
    /// pool6, so a router on the way shows as itself in a traceroute;
    /// `false`, RFC 6146 §3.6's outgoing tuple: the quoted packet's
    /// destination under pool6, as if the far host had sent every error.
    #[serde(default = "true_d")]
    pub source_icmpv6_errors_better: bool,
    /// Ports probed per pool4 address before giving up (RFC 6056 algorithm 3 bound).
    #[serde(default = "probes_d")]
    pub max_port_probes: u32,
    /// Lock shards of the state tables (0 = 16). NAT-PT mode uses one.
    #[serde(default)]
    pub shards: usize,
    /// How long fragments wait for the rest of their datagram, seconds (RFC 6146 §3.4: at least 2).
    #[serde(default = "frag_d")]
    pub fragment_timeout: Secs,
    /// Datagrams being reassembled at once.
    #[serde(default = "frag_sets_d")]
    pub max_fragment_sets: usize,
    /// Bytes held for reassembly at once.
    #[serde(default = "frag_bytes_d")]
    pub max_fragment_bytes: usize,
    /// Reserve the tables to `max-sessions` / `max-bib` at start, so they
    /// never grow (rehash) on the packet path.
    #[serde(default)]
    pub preallocate_tables: bool,
    /// Static BIB entries.
    #[serde(default)]
    pub bib: Vec<StaticBib>,
    /// `v6gate run`: a file keeping the static BIB entries added at run
    /// time (`v6gate ctl bib add`) across restarts. Read at start-up,
    /// rewritten after every change. Not used by this crate itself.
    #[serde(default)]
    pub bib_file: Option<String>,
}

fn true_d() -> bool {
    true
}
fn udp_d() -> Secs {
    Secs(UDP_DEFAULT)
}
fn icmp_d() -> Secs {
    Secs(ICMP_DEFAULT)
}
fn est_d() -> Secs {
    Secs(TCP_EST)
}
fn trans_d() -> Secs {
    Secs(TCP_TRANS)
}
fn syn_d() -> Secs {
    Secs(TCP_INCOMING_SYN)
}
fn frag_d() -> Secs {
    Secs(FRAGMENT_MIN)
}
fn max_sessions_d() -> usize {
    1 << 20
}
fn max_bib_d() -> usize {
    1 << 20
}
fn max_stored_d() -> usize {
    10
}
fn probes_d() -> u32 {
    1024
}
fn frag_sets_d() -> usize {
    1024
}
fn frag_bytes_d() -> usize {
    4 << 20
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pool6: default_pool6(),
            pool4: Vec::new(),
            mode: Mode::Nat64,
            address_dependent_filtering: false,
            udp_timeout: udp_d(),
            icmp_timeout: icmp_d(),
            tcp_est_timeout: est_d(),
            tcp_trans_timeout: trans_d(),
            tcp_incoming_syn_timeout: syn_d(),
            max_sessions: max_sessions_d(),
            max_bib: max_bib_d(),
            max_stored_pkts: max_stored_d(),
            drop_externally_initiated_tcp: false,
            handle_rst_during_fin_rcv: false,
            source_icmpv6_errors_better: true,
            max_port_probes: probes_d(),
            shards: 0,
            fragment_timeout: frag_d(),
            max_fragment_sets: frag_sets_d(),
            max_fragment_bytes: frag_bytes_d(),
            preallocate_tables: false,
            bib: Vec::new(),
            bib_file: None,
        }
    }
}

/// A configuration error naming the key at fault (`nat64.pool4`, ...): the
/// packet plane's error type, so `[siit]` and `[nat64]` errors read alike.
pub use xlat::siit::ConfigError;

fn err(key: &'static str, msg: impl fmt::Display) -> ConfigError {
    ConfigError { key, msg: msg.to_string() }
}

/// Largest pool4 (addresses × protocols) accepted: the port bitmaps cost
/// 8 KiB per address and protocol.
pub const MAX_POOL4_ADDRESSES: u64 = 4096;

impl Config {
    /// Validate. Every error names its key.
    pub fn check(&self) -> Result<(), ConfigError> {
        match self.pool6.len() {
            32 | 40 | 48 | 56 | 64 | 96 => {}
            l => {
                return Err(err(
                    "nat64.pool6",
                    format!("/{l} is not an RFC 6052 prefix length (32, 40, 48, 56, 64, 96)"),
                ))
            }
        }
        if self.pool4.is_empty() {
            return Err(err("nat64.pool4", "empty: the translator needs at least one IPv4 address"));
        }
        let mut total = 0u64;
        for (i, e) in self.pool4.iter().enumerate() {
            if e.protocols.is_empty() {
                return Err(err("nat64.pool4", format!("entry {} ({}) lists no protocols", i + 1, e.prefix)));
            }
            if xlat::addr::is_forbidden_v4(e.prefix.addr()) {
                return Err(err("nat64.pool4", format!("{} is not a unicast range", e.prefix)));
            }
            total += e.prefix.size() * e.protocols.len() as u64;
            for f in &self.pool4[..i] {
                let overlap = e.prefix.contains(f.prefix.addr()) || f.prefix.contains(e.prefix.addr());
                if overlap && e.protocols.iter().any(|p| f.protocols.contains(p)) {
                    return Err(err(
                        "nat64.pool4",
                        format!(
                            "{} and {} overlap for the same protocol; list each address once per protocol",
                            e.prefix, f.prefix
                        ),
                    ));
                }
            }
        }
        if total > MAX_POOL4_ADDRESSES * 3 {
            return Err(err("nat64.pool4", format!("more than {MAX_POOL4_ADDRESSES} addresses")));
        }
        let in_range = |key, v: Secs, m: u64| {
            if v.0 < m {
                Err(err(key, format!("{} s is below the minimum of {m} s", v.0)))
            } else if v.0 > MAX_TIMEOUT_SECS {
                // The timers count nanoseconds in a u64: a bound far below
                // its overflow (584 years) and far above any real timer.
                Err(err(key, format!("{} s is above the maximum of {MAX_TIMEOUT_SECS} s (30 days)", v.0)))
            } else {
                Ok(())
            }
        };
        // RFC 6146 §3.5.1 UDP_MIN is 2 minutes and §3.5.2 TCP_EST ≥ 2 h 4 min,
        // TCP_TRANS ≥ 4 min, but shortened timers are how timeouts are
        // tested, so only zero is refused here; docs/nat64.md says which
        // values are RFC-compliant.
        in_range("nat64.udp-timeout", self.udp_timeout, 1)?;
        in_range("nat64.icmp-timeout", self.icmp_timeout, 1)?;
        in_range("nat64.tcp-est-timeout", self.tcp_est_timeout, 1)?;
        in_range("nat64.tcp-trans-timeout", self.tcp_trans_timeout, 1)?;
        in_range("nat64.tcp-incoming-syn-timeout", self.tcp_incoming_syn_timeout, 1)?;
        in_range("nat64.fragment-timeout", self.fragment_timeout, 1)?;
        if self.max_sessions == 0 {
            return Err(err("nat64.max-sessions", "must be at least 1"));
        }
        if self.max_bib == 0 {
            return Err(err("nat64.max-bib", "must be at least 1"));
        }
        if self.max_port_probes == 0 {
            return Err(err("nat64.max-port-probes", "must be at least 1"));
        }
        if self.shards > 1024 {
            return Err(err("nat64.shards", "at most 1024"));
        }
        if self.bib.len() > self.max_bib {
            return Err(err("nat64.bib", "more static entries than max-bib"));
        }
        for b in &self.bib {
            self.check_static(b).map_err(|m| err("nat64.bib", m))?;
        }
        Ok(())
    }

    /// Whether a static entry fits this configuration (its IPv4 side in
    /// pool4 for its protocol and port range).
    pub(crate) fn check_static(&self, b: &StaticBib) -> Result<(), String> {
        let v4 = *b.ipv4.ip();
        let fits = self.pool4.iter().any(|e| {
            e.prefix.contains(v4)
                && e.protocols.contains(&b.protocol)
                && (e.ports.0..=e.ports.1).contains(&b.ipv4.port())
        });
        if !fits {
            return Err(format!("{} {} is not in pool4 for {}", b.protocol, b.ipv4, b.protocol));
        }
        if self.mode == Mode::Natpt && b.ipv4.port() != b.ipv6.port() {
            return Err(format!("NAT-PT mode keeps ports: {} and {} differ", b.ipv6, b.ipv4));
        }
        if xlat::addr::is_forbidden_v6(b.ipv6.ip()) {
            return Err(format!("{} is not a unicast address", b.ipv6.ip()));
        }
        Ok(())
    }

    /// Number of table shards in force.
    pub fn shard_count(&self) -> usize {
        if self.mode == Mode::Natpt {
            1
        } else if self.shards == 0 {
            16
        } else {
            self.shards
        }
    }

    /// `ipv4` addresses of pool4, flattened (for the daemon's routes).
    pub fn pool4_addresses(&self) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> =
            self.pool4.iter().flat_map(|e| (0..e.prefix.size()).map(move |i| e.prefix.nth(i))).collect();
        v.sort();
        v.dedup();
        v
    }
}

/// Every key of the `[nat64]` table.
pub const KEYS: &[&str] = &[
    "pool6",
    "pool4",
    "mode",
    "address-dependent-filtering",
    "udp-timeout",
    "icmp-timeout",
    "tcp-est-timeout",
    "tcp-trans-timeout",
    "tcp-incoming-syn-timeout",
    "max-sessions",
    "max-bib",
    "max-stored-pkts",
    "drop-externally-initiated-tcp",
    "handle-rst-during-fin-rcv",
    "source-icmpv6-errors-better",
    "max-port-probes",
    "shards",
    "fragment-timeout",
    "max-fragment-sets",
    "max-fragment-bytes",
    "preallocate-tables",
    "bib",
    "bib-file",
];

/// A commented `[nat64]` block for `v6gate config example`.
pub const EXAMPLE_TOML: &str = r#"# Stateful NAT64 (RFC 6146) or NAT-PT pool mode. See docs/nat64.md.
[nat64]
# "nat64": IPv6 hosts share pool4 addresses, ports allocated per RFC 6056
# algorithm 3. "natpt": each IPv6 host gets a whole pool4 address while it
# has sessions (RFC 2766 behaviour; read the RFC 4966 caveats first).
mode = "nat64"
# RFC 6052 prefix the IPv6 side uses to reach IPv4 hosts (DNS64 synthesises it).
pool6 = "64:ff9b::/96"
# IPv4 addresses owned by the translator. A bare prefix means all ports and
# all protocols; a table restricts ports (or ICMP identifiers) and protocols.
pool4 = [
    "192.0.2.0/31",
    { prefix = "192.0.2.2/32", ports = "1024-65535", protocols = ["udp", "tcp", "icmp"] },
]
# false: endpoint-independent filtering; true: an IPv4 packet passes only if
# the IPv6 host already has a session with that IPv4 address (RFC 4787).
address-dependent-filtering = false
# Session lifetimes (RFC 6146 §4 defaults): durations such as "5m", "2h4m",
# "90s", Jool's "HH:MM:SS", or whole seconds.
udp-timeout = "5m"
icmp-timeout = "1m"
tcp-est-timeout = "2h4m"
tcp-trans-timeout = "4m"
tcp-incoming-syn-timeout = "6s"
# Hard limits: when full, new flows are refused (ICMP error + counter);
# existing flows keep working.
max-sessions = 1048576
max-bib = 1048576
# Unsolicited IPv4 SYNs held for tcp-incoming-syn-timeout (RFC 6146 §3.5.2.2).
max-stored-pkts = 10
drop-externally-initiated-tcp = false
handle-rst-during-fin-rcv = false
# Source of ICMPv6 errors translated from ICMPv4 errors: true, the router
# that sent the error (under pool6), as Jool; false, the far host the
# quoted packet was sent to (RFC 6146 §3.6).
source-icmpv6-errors-better = true
# Ports probed per pool4 address before a new mapping is refused.
max-port-probes = 1024
# Lock shards of the state tables (0 = 16; NAT-PT mode always uses 1).
shards = 0
# Fragment reassembly (RFC 6146 §3.4).
fragment-timeout = "2s"
max-fragment-sets = 1024
max-fragment-bytes = 4194304

# Reserve the tables to max-sessions / max-bib at start (memory for
# latency: no table growth on the packet path).
preallocate-tables = false

# v6gate run: keep the static BIB entries added with `v6gate ctl bib add`
# across restarts in this file (read at start-up, rewritten on every
# change). Without it they live until the daemon stops (reloads keep them).
# bib-file = "/var/lib/v6gate/nat64-bib.toml"

# Static BIB entries: IPv4 hosts reach an IPv6 server at a pool4 address.
[[nat64.bib]]
protocol = "tcp"
ipv6 = "[2001:db8::10]:80"
ipv4 = "192.0.2.2:8080"
"#;
