//! The `[sixtofour]`, `[sixrd]` and `[teredo]` configuration tables.
//!
//! Each is optional; a file may hold any mix (and other tables, which are
//! ignored here). Keys are kebab-case; durations take the one syntax of
//! every v6gate timeout (`"4s"`, `"250ms"`, `"2m"`, bare seconds —
//! [`confval::duration`]); prefixes are [`xlat::addr::IpPrefix`] text.
//! [`TunnelConfig::parse`] checks everything and names the key at fault.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

use function::ConfigError;
use serde::Deserialize;
use xlat::addr::{IpPrefix, Prefix6};
use xlat::tunnel::sixrd::SixrdDomain;
use xlat::tunnel::teredo::{PREFIX_HI32, TEREDO_PORT as SERVER_PORT};
use xlat::tunnel::Ipv4Outer;

use crate::proto41::{Kind, Mode, Proto41Config};
use crate::teredo::client::ClientConfig;
use crate::teredo::relay::RelayConfig;
use crate::teredo::server::ServerConfig;

/// A commented example of the three tables, for `v6gate config example`
/// and docs/tunnels.md.
pub const EXAMPLE_TOML: &str = r#"# [sixtofour]: RFC 3056 6to4 over IPv4 protocol 41 (raw sockets; no `sit`).
# "router": this site's 2002:V4ADDR::/48 to other 6to4 sites directly and to
# native IPv6 through `relay`; "relay": native IPv6 <-> 6to4 sites.
# RFC 7526 deprecated the anycast relay 192.88.99.1: name a relay you run.
[sixtofour]
mode = "router"
address = "192.0.2.1"           # this node's public IPv4 address
relay = "203.0.113.1"           # router mode: relay for native IPv6
# reject-private = true         # RFC 3964: refuse RFC 1918 embedded addresses
# native-only-from-relay = false  # accept native sources only from `relay`
# ttl = 64                      # outer TTL (RFC 4213 3.3)
# tun = "v6gate-6to4"           # the TUN device on the IPv6 side
# mtu = 1480
# routes = ["::/0"]             # routed into the device besides 2002::/16
# addresses = ["2002:c000:201::1/128"]

# [sixrd]: RFC 5969 6rd, the ISP form of 6to4. "ce" (customer edge) or "br"
# (border relay). The delegated prefix is prefix + the low 32-ipv4-mask-len
# bits of the CE's IPv4 address.
# [sixrd]
# mode = "ce"
# prefix = "2001:db8::/32"
# ipv4-mask-len = 8
# address = "10.100.100.1"
# br = "10.0.0.1"               # ce mode: the border relay
# tun = "v6gate-6rd"

# [teredo.*]: RFC 4380 Teredo (with RFC 5991 and RFC 6081), over UDP.
# [teredo.server]
# primary = "192.0.2.10"        # UDP 3544 here and on secondary
# secondary = "192.0.2.11"      # clients assume primary + 1
# client-rate = 20              # packets/s one client address may cost
# global-rate = 20000
# tun = "v6gate-tsrv"           # where Echo Requests of clients go (IPv6 side)
#
# [teredo.relay]
# bind = "192.0.2.20:3544"      # default 0.0.0.0:3544; beside [teredo.server], an address of its own
# address = "2001:db8:ffff::1"  # the relay's IPv6 address (bubble source)
# max-peers = 65536             # trusted peers; a full list refuses new ones, never evicts
# max-untrusted-peers = 16384   # peers waiting for the trust procedure (bubbles)
# untrusted-peers-per-client = 256  # of them, started by one native client (its /64)
# client-prefix-length = 64     # a native client: its IPv6 source's prefix (48-128)
# bubble-rate = 1000            # bubbles a second in all (RFC 4380 5.2.6 also per mapped address)
# server-bubble-rate = 100      # indirect bubbles a second to one server address
# symmetric-nat = true          # RFC 6081: learn mappings of symmetric NATs
# tun = "v6gate-trly"           # 2001::/32 is routed into it
# xdp = "off"                   # "native"/"generic": trusted peers' packets in XDP (needs a specific bind address)
# xdp-interfaces = ["eth0", "eth1"]  # the IPv4 and IPv6 sides
#
# [teredo.client]
# server = "192.0.2.10"
# bind = "0.0.0.0:0"
# refresh = "30s"
# symmetric-nat = true          # RFC 6081 extensions Miredo lacks
# hairpinning = true
# random-ports = 16             # RFC 6081 4: per-peer ports behind a port-preserving symmetric NAT (0: off)
# routes = ["::/0"]
# tun = "v6gate-teredo"
"#;

/// Every tunnel table of a configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TunnelConfig {
    /// `[sixtofour]`.
    pub sixtofour: Option<Proto41Table>,
    /// `[sixrd]`.
    pub sixrd: Option<Proto41Table>,
    /// `[teredo.server]`.
    pub teredo_server: Option<TeredoServerTable>,
    /// `[teredo.relay]`.
    pub teredo_relay: Option<TeredoRelayTable>,
    /// `[teredo.client]`.
    pub teredo_client: Option<TeredoClientTable>,
}

/// A checked `[sixtofour]` or `[sixrd]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Proto41Table {
    /// The core's configuration.
    pub core: Proto41Config,
    /// The TUN device.
    pub tun: TunTable,
}

/// The TUN device of one tunnel function (the one device type of the
/// standalone runners).
pub use netsys::DeviceSpec as TunTable;

/// A checked `[teredo.server]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct TeredoServerTable {
    /// The core's configuration.
    pub core: ServerConfig,
    /// The TUN device (Echo Requests to the IPv6 side).
    pub tun: TunTable,
}

/// A checked `[teredo.relay]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct TeredoRelayTable {
    /// The core's configuration.
    pub core: RelayConfig,
    /// UDP address to bind.
    pub bind: SocketAddrV4,
    /// The TUN device (2001::/32 routed into it).
    pub tun: TunTable,
    /// The XDP fast path for trusted peers (`xdp`, `xdp-interfaces`); `None`: off.
    pub xdp: Option<RelayXdp>,
}

/// The relay's XDP fast path: where to attach and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayXdp {
    /// Native (falling back to generic) or generic.
    pub mode: xdp::Mode,
    /// The interfaces: the IPv4 side(s) the clients' datagrams arrive on
    /// and the IPv6 side(s) packets to 2001::/32 arrive on.
    pub interfaces: Vec<String>,
}

/// A checked `[teredo.client]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct TeredoClientTable {
    /// The core's configuration (its `local` is fixed up with the bound port at start).
    pub core: ClientConfig,
    /// UDP address to bind.
    pub bind: SocketAddrV4,
    /// The TUN device (the Teredo address goes on it).
    pub tun: TunTable,
}

fn d_true() -> bool {
    true
}

#[derive(Debug)]
struct TunToml {
    tun: Option<String>,
    mtu: Option<u32>,
    addresses: Vec<String>,
    routes: Vec<String>,
}

/// `[sixtofour]` as written (typed; checked by [`TunnelConfig::from_toml`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SixToFourToml {
    mode: String,
    address: Ipv4Addr,
    relay: Option<Ipv4Addr>,
    #[serde(default = "d_true")]
    reject_private: bool,
    #[serde(default)]
    native_only_from_relay: bool,
    ttl: Option<u8>,
    tun: Option<String>,
    mtu: Option<u32>,
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
}

/// `[sixrd]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SixRdToml {
    mode: String,
    prefix: String,
    ipv4_mask_len: u8,
    address: Ipv4Addr,
    br: Option<Ipv4Addr>,
    #[serde(default)]
    reject_private: bool,
    ttl: Option<u8>,
    tun: Option<String>,
    mtu: Option<u32>,
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
}

/// `[teredo.server]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerToml {
    primary: Ipv4Addr,
    secondary: Option<Ipv4Addr>,
    mtu: Option<u32>,
    client_rate: Option<u32>,
    client_burst: Option<u32>,
    global_rate: Option<u32>,
    max_clients: Option<usize>,
    max_icmpv6_payload: Option<u16>,
    tun: Option<String>,
}

/// `[teredo.relay]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RelayToml {
    bind: Option<SocketAddrV4>,
    address: Option<Ipv6Addr>,
    max_peers: Option<usize>,
    max_untrusted_peers: Option<usize>,
    untrusted_peers_per_client: Option<usize>,
    client_prefix_length: Option<u8>,
    bubble_rate: Option<u32>,
    server_bubble_rate: Option<u32>,
    queue_per_peer: Option<usize>,
    queue_bytes: Option<usize>,
    #[serde(default)]
    trust_cone: bool,
    #[serde(default = "d_true")]
    symmetric_nat: bool,
    tun: Option<String>,
    mtu: Option<u32>,
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
    xdp: Option<String>,
    #[serde(default)]
    xdp_interfaces: Vec<String>,
}

/// `[teredo.client]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClientToml {
    server: Ipv4Addr,
    server2: Option<Ipv4Addr>,
    bind: Option<SocketAddrV4>,
    #[serde(default)]
    probe_cone: bool,
    #[serde(default, with = "opt_duration")]
    timeout: Option<Duration>,
    retries: Option<u8>,
    #[serde(default, with = "opt_duration")]
    refresh: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    restart_delay: Option<Duration>,
    #[serde(default = "d_true")]
    symmetric_nat: bool,
    #[serde(default = "d_true")]
    hairpinning: bool,
    #[serde(default = "d_true")]
    random_flags: bool,
    max_peers: Option<usize>,
    random_ports: Option<usize>,
    tun: Option<String>,
    mtu: Option<u32>,
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
}

mod opt_duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct W(#[serde(deserialize_with = "confval::duration::deserialize")] Duration);
        Option::<W>::deserialize(d).map(|o| o.map(|w| w.0))
    }
}

/// `[teredo.*]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeredoToml {
    server: Option<ServerToml>,
    relay: Option<RelayToml>,
    client: Option<ClientToml>,
}

/// Every tunnel table of a file, as written: what `v6gate run`'s
/// configuration deserialises (typed, so serde's errors carry the key and
/// the line) and [`TunnelConfig::from_toml`] checks.
#[derive(Debug, Default, Deserialize)]
pub struct TunnelTables {
    /// `[sixtofour]`.
    pub sixtofour: Option<SixToFourToml>,
    /// `[sixrd]`.
    pub sixrd: Option<SixRdToml>,
    /// `[teredo.*]`.
    pub teredo: Option<TeredoToml>,
}

/// An unacceptable value of `key` (`[table] key`).
fn bad(key: impl Into<String>, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError::invalid(key, msg.to_string())
}

/// A 6rd domain the prefix and mask length cannot make.
fn sixrd_error(e: xlat::addr::AddrError) -> ConfigError {
    match e {
        xlat::addr::AddrError::BadLength { .. } => bad("[sixrd] ipv4-mask-len", e),
        e => bad("[sixrd] prefix", e),
    }
}

/// `xdp` ("off", the default; "native"; "generic") and `xdp-interfaces`
/// of `[teredo.relay]`.
fn relay_xdp(mode: Option<&str>, interfaces: Vec<String>, bind: SocketAddrV4) -> Result<Option<RelayXdp>, ConfigError> {
    let mode: xdp::Mode = match mode {
        None => xdp::Mode::Off,
        Some(m) => m.parse().map_err(|e| bad("[teredo.relay] xdp", e))?,
    };
    if mode == xdp::Mode::Off {
        if !interfaces.is_empty() {
            return Err(bad(
                "[teredo.relay] xdp-interfaces",
                "set, but xdp is off (set xdp = \"native\" or \"generic\")",
            ));
        }
        return Ok(None);
    }
    if interfaces.is_empty() {
        return Err(bad("[teredo.relay] xdp-interfaces", "name the IPv4 and IPv6 interfaces to attach to"));
    }
    if let Some(i) = interfaces.iter().find(|i| i.is_empty() || i.len() > 15) {
        return Err(bad("[teredo.relay] xdp-interfaces", format!("`{i}` must be 1-15 bytes (a Linux interface name)")));
    }
    if bind.ip().is_unspecified() {
        return Err(bad(
            "[teredo.relay] bind",
            format!(
                "the XDP fast path writes the relay's address as the source of what it \
                 encapsulates: bind a specific IPv4 address, not {bind}"
            ),
        ));
    }
    Ok(Some(RelayXdp { mode, interfaces }))
}

fn tun_table(
    t: TunToml,
    table: &str,
    default_name: &str,
    default_mtu: u32,
    auto: &[IpPrefix],
) -> Result<TunTable, ConfigError> {
    let name = t.tun.unwrap_or_else(|| default_name.to_string());
    if name.is_empty() || name.len() > 15 {
        return Err(bad(format!("[{table}] tun"), format!("`{name}` must be 1-15 bytes (a Linux interface name)")));
    }
    let mtu = t.mtu.unwrap_or(default_mtu);
    if !(1280..=65535).contains(&mtu) {
        return Err(bad(format!("[{table}] mtu"), format!("{mtu} is outside 1280..=65535")));
    }
    let mut addresses = Vec::new();
    for a in &t.addresses {
        let (addr, len) = xlat::addr::parse_addr_len(a)
            .or_else(|_| a.parse::<core::net::IpAddr>().map(|ip| (ip, if ip.is_ipv4() { 32 } else { 128 })))
            .map_err(|e| bad(format!("[{table}] addresses"), format!("`{a}`: {e}")))?;
        addresses.push((addr, len));
    }
    let mut routes = auto.to_vec();
    for r in &t.routes {
        routes.push(r.parse::<IpPrefix>().map_err(|e| bad(format!("[{table}] routes"), format!("`{r}`: {e}")))?);
    }
    Ok(TunTable { name, mtu, addresses, routes })
}

fn outer(ttl: Option<u8>, table: &str) -> Result<Ipv4Outer, ConfigError> {
    let ttl = ttl.unwrap_or(64);
    if ttl == 0 {
        return Err(bad(format!("[{table}] ttl"), "must be 1..=255"));
    }
    Ok(Ipv4Outer { ttl, ..Ipv4Outer::default() })
}

fn ms(d: Option<Duration>, default: u64) -> u64 {
    d.map_or(default, |d| d.as_millis() as u64)
}

fn teredo_prefix(hi32: u32) -> Prefix6 {
    Prefix6::new(Ipv6Addr::from(u128::from(hi32) << 96), 32).expect("a /32 has no host bits")
}

impl TunnelConfig {
    /// Every configured function: (table, TUN device).
    pub fn devices(&self) -> Vec<(&'static str, &TunTable)> {
        let mut v = Vec::new();
        if let Some(t) = &self.sixtofour {
            v.push(("sixtofour", &t.tun));
        }
        if let Some(t) = &self.sixrd {
            v.push(("sixrd", &t.tun));
        }
        if let Some(t) = &self.teredo_server {
            v.push(("teredo.server", &t.tun));
        }
        if let Some(t) = &self.teredo_relay {
            v.push(("teredo.relay", &t.tun));
        }
        if let Some(t) = &self.teredo_client {
            v.push(("teredo.client", &t.tun));
        }
        v
    }

    /// The IPv6 prefixes each function owns (what it routes into its
    /// device because the prefix is the tunnel's: 2002::/16, the 6rd
    /// prefix, the Teredo prefix), keyed `[table] key`. Other functions
    /// (SIIT, NAT64, another tunnel) must not claim them.
    pub fn owned_v6(&self) -> Vec<(String, Prefix6)> {
        let mut v = Vec::new();
        if let Some(t) = &self.sixtofour {
            v.push(("[sixtofour] (2002::/16)".to_string(), t.core.domain.prefix()));
        }
        if let Some(t) = &self.sixrd {
            v.push(("[sixrd] prefix".to_string(), t.core.domain.prefix()));
        }
        if let Some(t) = &self.teredo_relay {
            v.push(("[teredo.relay] (the Teredo prefix)".to_string(), teredo_prefix(t.core.prefix_hi32)));
        }
        if let Some(t) = &self.teredo_client {
            v.push(("[teredo.client] (the Teredo prefix)".to_string(), teredo_prefix(t.core.prefix_hi32)));
        }
        v
    }

    /// The IPv4 addresses the functions send and receive on, keyed
    /// `[table] key` (unspecified bind addresses left out).
    pub fn local_v4(&self) -> Vec<(String, Ipv4Addr)> {
        let mut v = Vec::new();
        if let Some(t) = &self.sixtofour {
            v.push(("[sixtofour] address".to_string(), t.core.local_v4));
        }
        if let Some(t) = &self.sixrd {
            v.push(("[sixrd] address".to_string(), t.core.local_v4));
        }
        if let Some(t) = &self.teredo_server {
            v.push(("[teredo.server] primary".to_string(), t.core.primary));
            v.push(("[teredo.server] secondary".to_string(), t.core.secondary));
        }
        if let Some(t) = &self.teredo_relay {
            v.push(("[teredo.relay] bind".to_string(), *t.bind.ip()));
        }
        if let Some(t) = &self.teredo_client {
            v.push(("[teredo.client] bind".to_string(), *t.bind.ip()));
        }
        v.retain(|(_, a)| !a.is_unspecified());
        v
    }

    /// Checks across the tunnel tables: one device per function, no
    /// prefix owned twice.
    fn check_across(&self) -> Result<(), ConfigError> {
        let devs = self.devices();
        for (i, (t, d)) in devs.iter().enumerate() {
            if let Some((t2, _)) = devs[..i].iter().find(|(_, d2)| d2.name == d.name) {
                return Err(bad(
                    format!("[{t}] tun"),
                    format!("`{}` is also [{t2}]'s device; each function needs its own (set `tun`)", d.name),
                ));
            }
        }
        if let (Some(srv), Some(r)) = (&self.teredo_server, &self.teredo_relay) {
            let servers = [srv.core.primary, srv.core.secondary];
            if r.bind.port() == SERVER_PORT && (r.bind.ip().is_unspecified() || servers.contains(r.bind.ip())) {
                return Err(bad(
                    "[teredo.relay] bind",
                    format!(
                        "{} shares UDP port {SERVER_PORT} with [teredo.server] (primary {}, secondary {}): the \
                         server's socket would take the answers of the relay's peers and no peer would ever be \
                         trusted; bind the relay to an address of its own, e.g. \"192.0.2.20:3544\", or another port",
                        r.bind, servers[0], servers[1]
                    ),
                ));
            }
        }
        let owned = self.owned_v6();
        for (i, (k, p)) in owned.iter().enumerate() {
            if let Some((k2, q)) = owned[..i].iter().find(|(_, q)| q.contains(&p.addr()) || p.contains(&q.addr())) {
                return Err(bad(
                    k.clone(),
                    format!(
                        "{p} overlaps {k2} {q}: two tunnel functions cannot both route one prefix into their devices"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// True when no tunnel table is present.
    pub fn is_empty(&self) -> bool {
        self.sixtofour.is_none()
            && self.sixrd.is_none()
            && self.teredo_server.is_none()
            && self.teredo_relay.is_none()
            && self.teredo_client.is_none()
    }

    /// Parse and check the tunnel tables of a TOML document (other tables
    /// are not read). The error names the table, the key and, for a value
    /// of the wrong type, the line.
    pub fn parse(text: &str) -> Result<TunnelConfig, ConfigError> {
        let f = TunnelTables {
            sixtofour: function::config::parse_table(text, "sixtofour")?,
            sixrd: function::config::parse_table(text, "sixrd")?,
            teredo: function::config::parse_table(text, "teredo")?,
        };
        TunnelConfig::from_toml(f).map_err(|e| e.at(text, None))
    }

    /// Check the tunnel tables as deserialised (the one path of `v6gate
    /// run` and `v6gate tunnel`); the error names the table and key.
    pub fn from_toml(f: TunnelTables) -> Result<TunnelConfig, ConfigError> {
        let mut c = TunnelConfig::default();
        if let Some(t) = f.sixtofour {
            let mode = match t.mode.as_str() {
                "router" | "site" => Mode::Site,
                "relay" => Mode::Relay,
                m => return Err(bad("[sixtofour] mode", format!("`{m}` is not \"router\" or \"relay\""))),
            };
            if xlat::tunnel::sixto4::is_forbidden_v4(t.address, t.reject_private) {
                return Err(bad(
                    "[sixtofour] address",
                    format!("{} cannot be a 6to4 end point (RFC 3964 5.1)", t.address),
                ));
            }
            if mode == Mode::Relay && t.relay.is_some() {
                return Err(bad("[sixtofour] relay", "only a router uses a relay"));
            }
            let domain = SixrdDomain::sixto4();
            let core = Proto41Config {
                kind: Kind::SixToFour,
                mode,
                domain,
                local_v4: t.address,
                relay: t.relay,
                reject_private: t.reject_private,
                native_only_from_relay: t.native_only_from_relay,
                outer: outer(t.ttl, "sixtofour")?,
            };
            let tun = tun_table(
                TunToml { tun: t.tun, mtu: t.mtu, addresses: t.addresses, routes: t.routes },
                "sixtofour",
                "v6gate-6to4",
                1480,
                &[IpPrefix::V6(domain.prefix())],
            )?;
            c.sixtofour = Some(Proto41Table { core, tun });
        }
        if let Some(t) = f.sixrd {
            let mode = match t.mode.as_str() {
                "ce" | "site" => Mode::Site,
                "br" | "relay" => Mode::Relay,
                m => return Err(bad("[sixrd] mode", format!("`{m}` is not \"ce\" or \"br\""))),
            };
            let prefix: Prefix6 =
                t.prefix.parse().map_err(|e| bad("[sixrd] prefix", format!("`{}`: {e}", t.prefix)))?;
            let domain = SixrdDomain::new(prefix, t.ipv4_mask_len, t.address).map_err(sixrd_error)?;
            if mode == Mode::Site && t.br.is_none() {
                return Err(bad("[sixrd] br", "a CE needs the border relay's IPv4 address"));
            }
            if let Some(br) = t.br {
                if mode == Mode::Relay {
                    return Err(bad("[sixrd] br", "set only in ce mode"));
                }
                let _ = br;
            }
            let core = Proto41Config {
                kind: Kind::SixRd,
                mode,
                domain,
                local_v4: t.address,
                relay: t.br,
                reject_private: t.reject_private,
                native_only_from_relay: true,
                outer: outer(t.ttl, "sixrd")?,
            };
            let tun = tun_table(
                TunToml { tun: t.tun, mtu: t.mtu, addresses: t.addresses, routes: t.routes },
                "sixrd",
                "v6gate-6rd",
                1480,
                &[IpPrefix::V6(prefix)],
            )?;
            c.sixrd = Some(Proto41Table { core, tun });
        }
        if let Some(t) = f.teredo {
            if let Some(s) = t.server {
                let secondary = s.secondary.unwrap_or(Ipv4Addr::from(u32::from(s.primary).wrapping_add(1)));
                for (k, a) in [("primary", s.primary), ("secondary", secondary)] {
                    if !xlat::tunnel::teredo::is_global_v4(a) {
                        return Err(bad(
                            format!("[teredo.server] {k}"),
                            format!("{a} is not a global IPv4 address (clients refuse it)"),
                        ));
                    }
                }
                if secondary == s.primary {
                    return Err(bad("[teredo.server] secondary", "must differ from primary (the NAT tests need two)"));
                }
                let mut core = ServerConfig::new(s.primary, secondary);
                core.mtu = s.mtu.unwrap_or(core.mtu);
                if !(1280..=65535).contains(&core.mtu) {
                    return Err(bad("[teredo.server] mtu", format!("{} is outside 1280..=65535", core.mtu)));
                }
                core.client_rate = s.client_rate.unwrap_or(core.client_rate);
                core.client_burst = s.client_burst.unwrap_or(core.client_burst.max(core.client_rate));
                core.global_rate = s.global_rate.unwrap_or(core.global_rate);
                core.max_clients = s.max_clients.unwrap_or(core.max_clients).max(1);
                core.max_icmpv6_payload = s.max_icmpv6_payload.unwrap_or(core.max_icmpv6_payload);
                let tun = tun_table(
                    TunToml { tun: s.tun, mtu: None, addresses: vec![], routes: vec![] },
                    "teredo.server",
                    "v6gate-tsrv",
                    1500,
                    &[],
                )?;
                c.teredo_server = Some(TeredoServerTable { core, tun });
            }
            if let Some(r) = t.relay {
                let address = r.address.unwrap_or(Ipv6Addr::new(0xfe80, 0, 0, 0, 0x8000, 0xffff, 0xffff, 0xfffd));
                let mut core = RelayConfig::new(address);
                core.max_peers = r.max_peers.unwrap_or(core.max_peers).max(1);
                core.max_untrusted = r.max_untrusted_peers.unwrap_or(core.max_untrusted).max(1);
                core.untrusted_per_client = r.untrusted_peers_per_client.unwrap_or(core.untrusted_per_client).max(1);
                if let Some(len) = r.client_prefix_length {
                    core.client_prefix_len =
                        budget::check_prefix_len(len).map_err(|e| bad("[teredo.relay] client-prefix-length", e))?;
                }
                core.bubble_rate = r.bubble_rate.unwrap_or(core.bubble_rate);
                core.server_bubble_rate = r.server_bubble_rate.unwrap_or(core.server_bubble_rate);
                core.queue_per_peer = r.queue_per_peer.unwrap_or(core.queue_per_peer);
                core.queue_bytes = r.queue_bytes.unwrap_or(core.queue_bytes);
                core.trust_cone = r.trust_cone;
                core.symmetric_nat = r.symmetric_nat;
                let teredo = IpPrefix::V6(teredo_prefix(PREFIX_HI32));
                let mut tun = tun_table(
                    TunToml { tun: r.tun, mtu: r.mtu, addresses: r.addresses, routes: r.routes },
                    "teredo.relay",
                    "v6gate-trly",
                    1500,
                    &[teredo],
                )?;
                if r.address.is_some() && !tun.addresses.iter().any(|(a, _)| *a == core::net::IpAddr::V6(address)) {
                    tun.addresses.push((core::net::IpAddr::V6(address), 128));
                }
                let bind = r.bind.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 3544));
                let xdp = relay_xdp(r.xdp.as_deref(), r.xdp_interfaces, bind)?;
                c.teredo_relay = Some(TeredoRelayTable { core, bind, tun, xdp });
            }
            if let Some(cl) = t.client {
                let bind = cl.bind.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
                let mut core = ClientConfig::new(cl.server, bind);
                core.server2 = cl.server2.unwrap_or(core.server2);
                core.probe_cone = cl.probe_cone;
                core.timeout = ms(cl.timeout, core.timeout).max(100);
                core.retries = cl.retries.unwrap_or(core.retries).max(1);
                core.refresh = ms(cl.refresh, core.refresh).max(1000);
                core.restart_delay = ms(cl.restart_delay, core.restart_delay).max(1000);
                core.symmetric_nat = cl.symmetric_nat;
                core.hairpinning = cl.hairpinning;
                core.random_flags = cl.random_flags;
                core.max_peers = cl.max_peers.unwrap_or(core.max_peers).max(1);
                if let Some(n) = cl.random_ports {
                    if n > 254 {
                        return Err(bad("[teredo.client] random-ports", format!("{n} is more than 254")));
                    }
                    core.random_ports = n;
                }
                let tun = tun_table(
                    TunToml { tun: cl.tun, mtu: cl.mtu, addresses: cl.addresses, routes: cl.routes },
                    "teredo.client",
                    "v6gate-teredo",
                    1280,
                    &[],
                )?;
                c.teredo_client = Some(TeredoClientTable { core, bind, tun });
            }
        }
        c.check_across()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_parses() {
        let c = TunnelConfig::parse(EXAMPLE_TOML).unwrap();
        let s = c.sixtofour.unwrap();
        assert_eq!((s.core.mode, s.core.relay), (Mode::Site, Some(Ipv4Addr::new(203, 0, 113, 1))));
        assert_eq!(s.tun.routes, vec!["2002::/16".parse().unwrap()]);
        assert!(c.sixrd.is_none() && c.teredo_client.is_none());
    }

    /// Issue #32: a relay on the server's UDP port at the server's address
    /// (or at 0.0.0.0, its default) loses its peers' answers to the server
    /// socket; the configuration says so instead of starting both.
    #[test]
    fn a_relay_beside_a_server_needs_an_address_of_its_own() {
        let cfg = |bind: &str| {
            let b = if bind.is_empty() { String::new() } else { format!("bind = \"{bind}\"") };
            format!("[teredo.server]\nprimary = \"192.0.2.10\"\n[teredo.relay]\naddress = \"2001:db8:ffff::1\"\n{b}\n")
        };
        for bad in ["", "0.0.0.0:3544", "192.0.2.10:3544", "192.0.2.11:3544"] {
            let e = TunnelConfig::parse(&cfg(bad)).unwrap_err();
            assert_eq!(e.key(), Some("[teredo.relay] bind"), "{bad}: {e}");
            assert!(e.to_string().contains("shares UDP port 3544"), "{bad}: {e}");
        }
        for good in ["192.0.2.20:3544", "192.0.2.10:3545", "0.0.0.0:4000"] {
            let c = TunnelConfig::parse(&cfg(good)).unwrap();
            assert_eq!(c.teredo_relay.unwrap().bind, good.parse().unwrap());
        }
        // Alone, the relay keeps its default.
        let alone = TunnelConfig::parse("[teredo.relay]\naddress = \"2001:db8:ffff::1\"\n").unwrap();
        assert_eq!(alone.teredo_relay.unwrap().bind, "0.0.0.0:3544".parse().unwrap());
    }

    #[test]
    fn every_table() {
        let c = TunnelConfig::parse(
            r#"
            [sixrd]
            mode = "ce"
            prefix = "2001:db8::/32"
            ipv4-mask-len = 8
            address = "10.100.100.1"
            br = "10.0.0.1"
            routes = ["::/0"]
            [teredo.server]
            primary = "192.0.2.10"
            client-rate = 5
            [teredo.relay]
            address = "2001:db8:ffff::1"
            bind = "192.0.2.20:3544"
            "#,
        )
        .unwrap();
        let cl = TunnelConfig::parse(
            r#"
            [teredo.client]
            server = "192.0.2.10"
            refresh = "10s"
            timeout = "500ms"
            routes = ["::/0"]
            "#,
        )
        .unwrap();
        let r = c.sixrd.unwrap();
        assert_eq!(r.core.site_prefix().unwrap().to_string(), "2001:db8:6464:100::/56");
        assert_eq!(r.tun.routes.len(), 2);
        let s = c.teredo_server.unwrap();
        assert_eq!((s.core.secondary, s.core.client_rate), (Ipv4Addr::new(192, 0, 2, 11), 5));
        let rl = c.teredo_relay.unwrap();
        assert_eq!(rl.tun.routes, vec!["2001::/32".parse().unwrap()]);
        assert_eq!(rl.tun.addresses, vec![("2001:db8:ffff::1".parse().unwrap(), 128)]);
        let cl = cl.teredo_client.unwrap();
        assert_eq!((cl.core.refresh, cl.core.timeout, cl.core.server2), (10_000, 500, Ipv4Addr::new(192, 0, 2, 11)));
    }

    #[test]
    fn errors_name_the_key() {
        for (text, want) in [
            ("[sixtofour]\nmode = \"bridge\"\naddress = \"192.0.2.1\"", "[sixtofour] mode"),
            ("[sixtofour]\nmode = \"router\"\naddress = \"10.0.0.1\"", "[sixtofour] address"),
            ("[sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\nrelay = \"192.0.2.2\"", "[sixtofour] relay"),
            ("[sixtofour]\nmode = \"router\"\naddress = \"192.0.2.1\"\nbogus = 1", "bogus"),
            ("[sixrd]\nmode = \"ce\"\nprefix = \"2001:db8::/48\"\nipv4-mask-len = 8\naddress = \"10.0.0.1\"\nbr = \"10.0.0.2\"", "/72"),
            ("[sixrd]\nmode = \"ce\"\nprefix = \"2001:db8::/32\"\nipv4-mask-len = 8\naddress = \"10.0.0.1\"", "[sixrd] br"),
            ("[teredo.server]\nprimary = \"10.0.0.1\"", "[teredo.server] primary"),
            ("[teredo.client]\nserver = \"192.0.2.1\"\nrefresh = \"soon\"", "refresh"),
            ("[teredo.client]\nserver = \"192.0.2.1\"\ntun = \"a-name-that-is-too-long\"", "[teredo.client] tun"),
            ("[teredo.relay]\nroutes = [\"nope\"]", "[teredo.relay] routes"),
        ] {
            let e = TunnelConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        assert!(TunnelConfig::parse("[siit]\npool6 = \"64:ff9b::/96\"").unwrap().is_empty());
        // Across tables: one device per function, one owner per prefix.
        let two = "[sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\ntun = \"t0\"\n\
                   [teredo.relay]\ntun = \"t0\"\n";
        assert!(TunnelConfig::parse(two)
            .unwrap_err()
            .to_string()
            .contains("[teredo.relay] tun: `t0` is also [sixtofour]'s device"));
        let both = "[sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\n\
                    [sixrd]\nmode = \"br\"\nprefix = \"2002:100::/24\"\nipv4-mask-len = 0\naddress = \"192.0.2.1\"\n";
        let e = TunnelConfig::parse(both).unwrap_err().to_string();
        assert!(e.contains("[sixrd] prefix") && e.contains("2002::/16"), "{e}");
        // A value of the wrong type: key and line.
        let e = TunnelConfig::parse("[sixtofour]\nmode = \"router\"\naddress = 7\n").unwrap_err();
        assert_eq!((e.key(), e.position()), (Some("[sixtofour] address"), Some((3, 11))), "{e}");
        // A check after the types: the key.
        let e = TunnelConfig::parse("[sixrd]\nmode = \"ce\"\nprefix = \"2001:db8::/32\"\nipv4-mask-len = 33\naddress = \"10.0.0.1\"\nbr = \"10.0.0.2\"").unwrap_err();
        assert_eq!(e.key(), Some("[sixrd] ipv4-mask-len"), "{e}");
    }

    #[test]
    fn relay_budgets_have_defaults_and_are_checked() {
        let r = TunnelConfig::parse("[teredo.relay]\n").unwrap().teredo_relay.unwrap().core;
        assert_eq!(
            (
                r.max_peers,
                r.max_untrusted,
                r.untrusted_per_client,
                r.client_prefix_len,
                r.bubble_rate,
                r.server_bubble_rate
            ),
            (65_536, 16_384, 256, 64, 1000, 100)
        );
        let r = TunnelConfig::parse(
            "[teredo.relay]\nmax-untrusted-peers = 10\nuntrusted-peers-per-client = 2\nclient-prefix-length = 56\nbubble-rate = 5\nserver-bubble-rate = 1\n",
        )
        .unwrap()
        .teredo_relay
        .unwrap()
        .core;
        assert_eq!(
            (r.max_untrusted, r.untrusted_per_client, r.client_prefix_len, r.bubble_rate, r.server_bubble_rate),
            (10, 2, 56, 5, 1)
        );
        let e = TunnelConfig::parse("[teredo.relay]\nclient-prefix-length = 129\n").unwrap_err().to_string();
        assert!(e.contains("[teredo.relay] client-prefix-length: 129"), "{e}");
    }

    #[test]
    fn relay_xdp_is_off_by_default_and_checked() {
        let r = TunnelConfig::parse("[teredo.relay]\n").unwrap().teredo_relay.unwrap();
        assert_eq!(r.xdp, None);
        let on =
            "[teredo.relay]\nbind = \"192.0.2.1:3544\"\nxdp = \"generic\"\nxdp-interfaces = [\"eth0\", \"eth1\"]\n";
        let r = TunnelConfig::parse(on).unwrap().teredo_relay.unwrap();
        assert_eq!(r.xdp, Some(RelayXdp { mode: xdp::Mode::Generic, interfaces: vec!["eth0".into(), "eth1".into()] }));
        let off = "[teredo.relay]\nxdp = \"off\"\n";
        assert_eq!(TunnelConfig::parse(off).unwrap().teredo_relay.unwrap().xdp, None);
        for (text, want) in [
            ("[teredo.relay]\nbind = \"192.0.2.1:3544\"\nxdp = \"fast\"\nxdp-interfaces = [\"e0\"]", "[teredo.relay] xdp"),
            ("[teredo.relay]\nbind = \"192.0.2.1:3544\"\nxdp = \"native\"", "[teredo.relay] xdp-interfaces"),
            ("[teredo.relay]\nxdp-interfaces = [\"e0\"]", "xdp is off"),
            ("[teredo.relay]\nxdp = \"native\"\nxdp-interfaces = [\"e0\"]", "[teredo.relay] bind"),
            (
                "[teredo.relay]\nbind = \"192.0.2.1:3544\"\nxdp = \"native\"\nxdp-interfaces = [\"an-interface-name-too-long\"]",
                "1-15 bytes",
            ),
        ] {
            let e = TunnelConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
