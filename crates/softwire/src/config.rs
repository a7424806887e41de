//! The `[dslite]`, `[lw4o6]` (with `[lw4o6.dstm]`) and `[b4]` tables.
//!
//! Each is optional; a file may hold any mix, and other tables (the
//! daemon's, the tunnels') are ignored here. Keys are kebab-case;
//! durations take the one syntax of every v6gate timeout
//! ([`confval::duration`]); prefixes are [`xlat::addr`] text; `[dslite]
//! pool4` is written like `[nat64] pool4`. [`SoftwireConfig::parse`]
//! checks everything and names the key at fault.

use crate::aftr::AftrConfig;
use crate::b4::{B4Config, HostPorts, Napt};
use crate::endpoint::EndpointConfig;
use crate::lease::LeaseConfig;
use crate::lwaftr::LwaftrConfig;
use crate::nat44::Nat44Config;
use crate::portset::PsidMap;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use function::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use xlat::addr::{IpPrefix, Prefix4, Prefix6};

/// A commented example of the tables (`v6gate config example` material
/// and docs/softwire.md).
pub const EXAMPLE_TOML: &str = r#"# [dslite]: the DS-Lite AFTR (RFC 6333). Softwires from B4s in b4-prefixes
# end on aftr-address (routed into the TUN device); a carrier-grade NAT44
# (RFC 6888) keyed by the softwire maps them onto pool4.
[dslite]
aftr-address = "2001:db8:ffff::1"
b4-prefixes = ["2001:db8::/32"]
pool4 = ["203.0.113.0/28"]          # as [nat64] pool4: "PREFIX" or { prefix, ports, protocols }
# max-ports-per-subscriber = 2048  # RFC 6888 REQ-4 quota, per subscriber:
# subscriber-mask = 56              # the B4's IPv6 prefix of this length (RFC 7785;
#                                   # 48-128; 128: each B4 address on its own)
# max-mappings = 1048576
# hairpinning = true
# log-mappings = true               # "nat44 map ..." lines, target softwire::cgn
# udp-timeout = "5m"
# icmp-timeout = "60s"
# tcp-est-timeout = "2h4m"
# tcp-trans-timeout = "4m"
# mtu = 1500                        # IPv6 path MTU towards the B4s
# mtu-policy = "fragment"           # RFC 6333 5.3; "icmp": RFC 2473 7.2 (DF set: frag needed)
# encap-limit = 4                   # RFC 2473 Tunnel Encapsulation Limit option (unset: none)
# icmp-errors = true                # ICMPv6 1/5 to softwires from unknown prefixes; ICMPv4 3/13
#                                   # (through the softwire) for flows the quota or a full table refuses
# icmp-rate = 1000                  # originated ICMP errors per second
# ipv4-address = "192.0.0.1"        # source of ICMPv4 errors (RFC 6333 5.7)
# tun = "v6gate-aftr"
#
# [dslite.xdp]: the XDP fast path (docs/softwire.md "DS-Lite AFTR fast path"):
# packets of established NAT44 flows translated and de/encapsulated in XDP on
# these interfaces; new flows, TCP SYN/FIN/RST and the rest go through the TUN.
# interfaces = ["eth0", "eth1"]      # the IPv6 (softwire) and IPv4 sides
# mode = "native"                    # "generic", or "off"; native falls back to generic
# max-sessions = 262144              # NAT44 sessions the maps carry at most
# port-block = 256                   # TCP ports per B4 port block (RFC 7422); a B4's SYN
#                                    # creates its mapping in XDP from its blocks; 0: off

# [lw4o6]: the lwAFTR (RFC 7596): no NAT, a binding table of
# (lwB4 IPv6 address, IPv4 address, PSID) loaded from binding-file.
# [lw4o6]
# aftr-address = "2001:db8:ffff::2"
# binding-file = "/etc/v6gate/lw4o6-bindings"  # "B4 IPV4 PSID PSID-LENGTH [OFFSET]" lines
# ipv4-prefixes = ["192.0.2.0/24"]             # routed into the TUN device
# psid-offset = 6
# watch-binding-file = true          # reload the bindings when the file changes
# hairpinning = true
# icmpv4-errors = true               # 3/1 for IPv4 packets no lwB4 holds
# icmpv6-errors = true               # 1/5 for softwire packets outside their binding
# tun = "v6gate-lwaftr"
#
# [lw4o6.dstm]: DSTM, whole IPv4 addresses leased on demand (docs/softwire.md:
# the lease protocol); the leases are whole-address bindings of the lwAFTR.
# pool = ["192.0.2.128/25"]
# listen = "[::]:4739"
# lease-time = "1h"
# lease-file = "/var/lib/v6gate/dstm-leases"
# clients = ["2001:db8::/32"]
# max-requests-per-second = 1000     # from clients holding no lease (renewals never wait on it)
# client-prefix-length = 64          # a client is its IPv6 prefix of this length (48-128)
# max-leases-per-client = 4          # leases one client holds at most (NAK 4 beyond)
# max-requests-per-second-per-client = 10
# lease-file-interval = "1s"         # the lease file is written at most this often (and at exit)
#
# [lw4o6.xdp]: the XDP fast path (docs/softwire.md "XDP fast path"): packets of
# the bindings and leases above decapsulated / encapsulated in XDP on these
# interfaces; everything else still goes through the TUN device.
# interfaces = ["eth0", "eth1"]      # the IPv6 (softwire) and IPv4 sides
# mode = "native"                    # "generic", or "off"; native falls back to generic
# max-bindings = 1048576             # bindings plus leases the maps hold

# [b4]: the client side, on a TUN device: "ds-lite" (B4), "lw4o6" (lwB4, NAPT
# of the LAN into the binding's port set) or "dstm" (a host leasing an address).
# [b4]
# mode = "ds-lite"
# address = "2001:db8:1::2"          # this B4's softwire end-point (routed into the TUN)
# aftr = "2001:db8:ffff::1"
# routes = ["0.0.0.0/0"]             # IPv4 routed into the softwire
# ipv4-address = "192.0.2.1"         # lw4o6: the binding
# psid = 5
# psid-length = 6
# psid-offset = 6
# host-ports = "49232-64607"         # lw4o6: the host's own share of the port set (kept from
#                                    # the NAPT; the host stack uses the binding's address, which
#                                    # goes on the device; docs/softwire.md "Host-integrated lwB4")
# lease-server = "[2001:db8:ffff::2]:4739"   # dstm
# host-address = "192.0.0.2"         # an IPv4 address for this host's own sockets (RFC 6333 5.7)
# mtu = 1500                         # IPv6 path MTU towards the AFTR (the tunnel MTU)
# tun-mtu = 9000                     # the TUN device's MTU: at least mtu (it carries the softwire too)
# mss-clamp = true                   # lower TCP SYNs' MSS both ways to fit the tunnel (mtu - 80)
# tun = "v6gate-b4"
#
# [b4.kernel]: the kernel datapath of a ds-lite B4, a dstm host or an lw4o6 lwB4 with
# host-ports (the host's own traffic; docs/softwire.md "B4 kernel path"): tc egress on the
# TUN device encapsulates, XDP on the uplink decapsulates; what the engine must do
# (the NAPT, fragments, ICMP errors, MTU) still goes to it.
# interfaces = ["eth0"]              # the uplink(s) towards the AFTR
# mode = "native"                    # "generic", or "off"; native falls back to generic
"#;

/// Common tunnel knobs of a table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct TunnelToml {
    #[serde(default = "d_mtu")]
    mtu: u16,
    #[serde(default = "d_policy")]
    mtu_policy: String,
    encap_limit: Option<u8>,
    #[serde(default = "d_hop")]
    hop_limit: u8,
    #[serde(default = "d_rate")]
    icmp_rate: u32,
    #[serde(default = "d_reasm", deserialize_with = "confval::duration::deserialize")]
    reassembly_timeout: Duration,
    #[serde(default = "d_sets")]
    max_reassembly_sets: usize,
    tun: Option<String>,
    #[serde(default = "d_tun_mtu")]
    tun_mtu: u32,
}

fn d_mtu() -> u16 {
    1500
}
fn d_policy() -> String {
    "fragment".into()
}
fn d_hop() -> u8 {
    64
}
fn d_rate() -> u32 {
    1000
}
fn d_reasm() -> Duration {
    Duration::from_secs(2)
}
fn d_sets() -> usize {
    1024
}
fn d_tun_mtu() -> u32 {
    9000
}
fn d_true() -> bool {
    true
}
fn d_offset() -> u8 {
    crate::portset::DEFAULT_OFFSET
}

/// `[dslite]` as written (typed; checked by [`SoftwireConfig::from_toml`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DsliteToml {
    aftr_address: Ipv6Addr,
    b4_prefixes: Vec<String>,
    pool4: Vec<nat64::Pool4Entry>,
    #[serde(default = "d_quota")]
    max_ports_per_subscriber: u32,
    #[serde(default = "d_subscriber_mask")]
    subscriber_mask: u8,
    #[serde(default = "d_maps")]
    max_mappings: usize,
    #[serde(default = "d_probes")]
    max_port_probes: u32,
    #[serde(default = "d_true")]
    hairpinning: bool,
    #[serde(default = "d_true")]
    log_mappings: bool,
    #[serde(default = "d_udp", deserialize_with = "confval::duration::deserialize")]
    udp_timeout: Duration,
    #[serde(default = "d_icmp", deserialize_with = "confval::duration::deserialize")]
    icmp_timeout: Duration,
    #[serde(default = "d_est", deserialize_with = "confval::duration::deserialize")]
    tcp_est_timeout: Duration,
    #[serde(default = "d_trans", deserialize_with = "confval::duration::deserialize")]
    tcp_trans_timeout: Duration,
    #[serde(default = "d_true")]
    icmp_errors: bool,
    #[serde(default = "d_aftr4")]
    ipv4_address: Ipv4Addr,
    xdp: Option<DsXdpToml>,
    #[serde(flatten)]
    tunnel: TunnelToml,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DsXdpToml {
    #[serde(default)]
    interfaces: Vec<String>,
    mode: Option<String>,
    #[serde(default = "d_max_sessions")]
    max_sessions: u32,
    #[serde(default = "d_port_block")]
    port_block: u16,
}

fn d_port_block() -> u16 {
    256
}

fn d_max_sessions() -> u32 {
    1 << 18
}

fn d_quota() -> u32 {
    2048
}
fn d_subscriber_mask() -> u8 {
    crate::nat44::DEFAULT_SUBSCRIBER_MASK
}
fn d_maps() -> usize {
    1 << 20
}
fn d_probes() -> u32 {
    1024
}
fn d_udp() -> Duration {
    Duration::from_secs(300)
}
fn d_icmp() -> Duration {
    Duration::from_secs(60)
}
fn d_est() -> Duration {
    Duration::from_secs(7440)
}
fn d_trans() -> Duration {
    Duration::from_secs(240)
}
fn d_aftr4() -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 0, 1)
}
fn d_b44() -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 0, 2)
}

/// `[lw4o6]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Lw4o6Toml {
    aftr_address: Ipv6Addr,
    binding_file: Option<PathBuf>,
    #[serde(default)]
    ipv4_prefixes: Vec<String>,
    #[serde(default = "d_offset")]
    psid_offset: u8,
    #[serde(default = "d_true")]
    watch_binding_file: bool,
    #[serde(default = "d_true")]
    hairpinning: bool,
    #[serde(default = "d_true")]
    icmpv4_errors: bool,
    #[serde(default = "d_true")]
    icmpv6_errors: bool,
    #[serde(default = "d_aftr4")]
    ipv4_address: Ipv4Addr,
    dstm: Option<DstmToml>,
    xdp: Option<SwXdpToml>,
    #[serde(flatten)]
    tunnel: TunnelToml,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SwXdpToml {
    #[serde(default)]
    interfaces: Vec<String>,
    mode: Option<String>,
    #[serde(default = "d_max_bindings")]
    max_bindings: u32,
}

fn d_max_bindings() -> u32 {
    1 << 20
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DstmToml {
    pool: Vec<String>,
    #[serde(default = "d_listen")]
    listen: SocketAddr,
    #[serde(default = "d_lease", deserialize_with = "confval::duration::deserialize")]
    lease_time: Duration,
    lease_file: Option<PathBuf>,
    #[serde(default)]
    clients: Vec<String>,
    #[serde(default = "d_rate")]
    max_requests_per_second: u32,
    #[serde(default = "d_client_prefix")]
    client_prefix_length: u8,
    #[serde(default = "d_leases_per_client")]
    max_leases_per_client: usize,
    #[serde(default = "d_client_rate")]
    max_requests_per_second_per_client: u32,
    #[serde(default = "d_file_interval", deserialize_with = "confval::duration::deserialize")]
    lease_file_interval: Duration,
}

fn d_client_prefix() -> u8 {
    budget::DEFAULT_V6_PREFIX
}
fn d_leases_per_client() -> usize {
    crate::lease::DEFAULT_MAX_LEASES_PER_CLIENT
}
fn d_client_rate() -> u32 {
    crate::lease::DEFAULT_CLIENT_REQUESTS_PER_SEC
}
fn d_file_interval() -> Duration {
    Duration::from_millis(crate::lease::DEFAULT_FILE_INTERVAL_MS)
}

fn d_listen() -> SocketAddr {
    SocketAddr::from((Ipv6Addr::UNSPECIFIED, crate::lease::DEFAULT_PORT))
}
fn d_lease() -> Duration {
    Duration::from_secs(3600)
}

/// `[b4]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct B4Toml {
    mode: String,
    address: Ipv6Addr,
    aftr: Option<Ipv6Addr>,
    #[serde(default = "d_routes")]
    routes: Vec<String>,
    ipv4_address: Option<Ipv4Addr>,
    psid: Option<u16>,
    psid_length: Option<u8>,
    #[serde(default = "d_offset")]
    psid_offset: u8,
    #[serde(default = "d_true")]
    nat: bool,
    host_ports: Option<String>,
    lease_server: Option<SocketAddr>,
    host_address: Option<Ipv4Addr>,
    #[serde(default = "d_b44")]
    icmp_address: Ipv4Addr,
    #[serde(default = "d_true")]
    mss_clamp: bool,
    kernel: Option<B4KernelToml>,
    #[serde(flatten)]
    tunnel: TunnelToml,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct B4KernelToml {
    #[serde(default)]
    interfaces: Vec<String>,
    mode: Option<String>,
}

fn d_routes() -> Vec<String> {
    vec!["0.0.0.0/0".into()]
}

/// Every softwire table of a file, as written: what `v6gate run`'s
/// configuration deserialises (typed: serde's errors carry the key and
/// the line) and [`SoftwireConfig::from_toml`] checks.
#[derive(Debug, Default, Deserialize)]
pub struct SoftwireTables {
    /// `[dslite]`.
    pub dslite: Option<DsliteToml>,
    /// `[lw4o6]` (with `[lw4o6.dstm]`, `[lw4o6.xdp]`).
    pub lw4o6: Option<Lw4o6Toml>,
    /// `[b4]` (with `[b4.kernel]`).
    pub b4: Option<B4Toml>,
}

/// The TUN device of one function (the one device type of the standalone
/// runners).
pub use netsys::DeviceSpec as TunTable;

/// A checked `[dslite]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DsliteTable {
    /// The engine's configuration.
    pub aftr: AftrConfig,
    /// pool4.
    pub pool4: Vec<nat64::Pool4Entry>,
    /// Port probes per address.
    pub max_port_probes: u32,
    /// The XDP fast path (`[dslite.xdp]`); `None`: off.
    pub xdp: Option<DsXdp>,
    /// TUN device.
    pub tun: TunTable,
}

/// A checked `[dslite.xdp]`: where to attach the AFTR's fast path and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DsXdp {
    /// Native (falling back to generic) or generic.
    pub mode: xdp::Mode,
    /// The softwire (IPv6) and IPv4 side interfaces.
    pub interfaces: Vec<String>,
    /// NAT44 sessions the maps carry at most.
    pub max_sessions: u32,
    /// TCP ports per B4 port block; not 0: a B4's SYN creates its
    /// mapping in the fast path with a port of its blocks.
    pub port_block: u16,
}

/// A checked `[lw4o6.dstm]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DstmTable {
    /// The lease server's configuration.
    pub lease: LeaseConfig,
    /// UDP address it listens on.
    pub listen: SocketAddr,
}

/// A checked `[lw4o6]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lw4o6Table {
    /// The engine's configuration.
    pub lwaftr: LwaftrConfig,
    /// The binding file.
    pub binding_file: Option<PathBuf>,
    /// Default PSID offset of the file.
    pub psid_offset: u8,
    /// Watch the file and reload on change.
    pub watch: bool,
    /// DSTM.
    pub dstm: Option<DstmTable>,
    /// The XDP fast path (`[lw4o6.xdp]`); `None`: off.
    pub xdp: Option<SwXdp>,
    /// TUN device.
    pub tun: TunTable,
}

/// A checked `[lw4o6.xdp]`: where to attach the lwAFTR's fast path and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwXdp {
    /// Native (falling back to generic) or generic.
    pub mode: xdp::Mode,
    /// The softwire (IPv6) and IPv4 side interfaces.
    pub interfaces: Vec<String>,
    /// Bindings plus leases the maps hold at most.
    pub max_bindings: u32,
}

/// `[lw4o6.xdp]`: mode "native" (the default: an operator who names
/// interfaces wants the fast path there, in the driver when it can),
/// "generic" or "off"; interfaces needed unless off.
fn sw_xdp(t: Option<SwXdpToml>) -> Result<Option<SwXdp>, ConfigError> {
    let Some(t) = t else { return Ok(None) };
    let Some(mode) = xdp_mode("lw4o6.xdp", t.mode.as_deref(), &t.interfaces)? else { return Ok(None) };
    if t.max_bindings == 0 {
        return Err(err("lw4o6.xdp", "max-bindings", "at least 1"));
    }
    Ok(Some(SwXdp { mode, interfaces: t.interfaces, max_bindings: t.max_bindings }))
}

/// `[dslite.xdp]`: as `[lw4o6.xdp]`, with max-sessions.
fn ds_xdp(t: Option<DsXdpToml>) -> Result<Option<DsXdp>, ConfigError> {
    let Some(t) = t else { return Ok(None) };
    let Some(mode) = xdp_mode("dslite.xdp", t.mode.as_deref(), &t.interfaces)? else { return Ok(None) };
    if t.max_sessions == 0 {
        return Err(err("dslite.xdp", "max-sessions", "at least 1"));
    }
    if t.port_block > xdp::dslite::PB_MAX_PORTS {
        return Err(err("dslite.xdp", "port-block", "at most 256 (0: off)"));
    }
    Ok(Some(DsXdp { mode, interfaces: t.interfaces, max_sessions: t.max_sessions, port_block: t.port_block }))
}

/// The mode of an XDP table (`None`: off) and its interfaces checked.
fn xdp_mode(table: &str, mode: Option<&str>, interfaces: &[String]) -> Result<Option<xdp::Mode>, ConfigError> {
    let mode: xdp::Mode = match mode {
        None => xdp::Mode::Native,
        Some(m) => m.parse().map_err(|e| err(table, "mode", e))?,
    };
    if mode == xdp::Mode::Off {
        return Ok(None);
    }
    if interfaces.is_empty() {
        return Err(err(table, "interfaces", "name the softwire (IPv6) and IPv4 interfaces to attach to"));
    }
    if let Some(i) = interfaces.iter().find(|i| i.is_empty() || i.len() > 15) {
        return Err(err(table, "interfaces", format!("`{i}` must be 1-15 bytes (a Linux interface name)")));
    }
    Ok(Some(mode))
}

/// `[b4] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum B4Mode {
    /// DS-Lite B4.
    DsLite,
    /// lwB4.
    Lw4o6,
    /// DSTM host.
    Dstm,
}

/// A checked `[b4]`.
#[derive(Debug, Clone, PartialEq)]
pub struct B4Table {
    /// Mode.
    pub mode: B4Mode,
    /// The engine's configuration (for DSTM, `aftr` is replaced by the lease's TEP).
    pub b4: B4Config,
    /// DSTM: the lease server.
    pub lease_server: Option<SocketAddr>,
    /// lw4o6 without `nat`: the binding's address goes on the device.
    pub ipv4_address: Option<Ipv4Addr>,
    /// The kernel datapath (`[b4.kernel]`); `None`: off.
    pub kernel: Option<B4Kernel>,
    /// TUN device.
    pub tun: TunTable,
}

/// A checked `[b4.kernel]`: the kernel datapath of a DS-Lite B4 or a
/// DSTM host (tc egress on the TUN device, XDP on the uplinks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct B4Kernel {
    /// XDP mode on the uplinks: native (falling back to generic) or generic.
    pub mode: xdp::Mode,
    /// The uplinks: where softwire packets arrive and tunnel packets leave.
    pub interfaces: Vec<String>,
}

/// `[b4.kernel]`: mode "native" (the default, as `[lw4o6.xdp]`),
/// "generic" or "off"; interfaces needed unless off; for the lwB4 only
/// with `host-ports` (its NAPT stays on the TUN engine: the kernel path
/// carries the host's own traffic).
fn b4_kernel(mode: B4Mode, host: bool, t: Option<B4KernelToml>) -> Result<Option<B4Kernel>, ConfigError> {
    let Some(t) = t else { return Ok(None) };
    let m: xdp::Mode = match t.mode.as_deref() {
        None => xdp::Mode::Native,
        Some(m) => m.parse().map_err(|e| err("b4.kernel", "mode", e))?,
    };
    if m == xdp::Mode::Off {
        return Ok(None);
    }
    if mode == B4Mode::Lw4o6 && !host {
        return Err(err(
            "b4.kernel",
            "mode",
            "the lwB4's NAPT has no kernel path: give the host's own stack a share of the port set with \
             [b4] host-ports (the kernel path carries that traffic), or use ds-lite or dstm",
        ));
    }
    if t.interfaces.is_empty() {
        return Err(err("b4.kernel", "interfaces", "name the uplink(s) towards the AFTR"));
    }
    if let Some(i) = t.interfaces.iter().find(|i| i.is_empty() || i.len() > 15) {
        return Err(err("b4.kernel", "interfaces", format!("`{i}` must be 1-15 bytes (a Linux interface name)")));
    }
    Ok(Some(B4Kernel { mode: m, interfaces: t.interfaces }))
}

/// Every softwire table of a configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SoftwireConfig {
    /// `[dslite]`.
    pub dslite: Option<DsliteTable>,
    /// `[lw4o6]`.
    pub lw4o6: Option<Lw4o6Table>,
    /// `[b4]`.
    pub b4: Option<B4Table>,
}

fn err(table: &str, key: &str, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError::invalid(format!("[{table}] {key}"), msg.to_string())
}

fn prefixes6(table: &str, key: &str, v: &[String]) -> Result<Vec<Prefix6>, ConfigError> {
    v.iter().map(|s| s.parse::<Prefix6>().map_err(|e| err(table, key, format!("`{s}`: {e}")))).collect()
}

fn prefixes4(table: &str, key: &str, v: &[String]) -> Result<Vec<Prefix4>, ConfigError> {
    v.iter().map(|s| s.parse::<Prefix4>().map_err(|e| err(table, key, format!("`{s}`: {e}")))).collect()
}

fn endpoint(table: &str, local: Ipv6Addr, icmp4: Ipv4Addr, t: &TunnelToml) -> Result<EndpointConfig, ConfigError> {
    if t.mtu < 1280 {
        return Err(err(table, "mtu", format!("{} is below the IPv6 minimum 1280", t.mtu)));
    }
    let fragment_df = match t.mtu_policy.as_str() {
        "fragment" => true,
        "icmp" => false,
        o => return Err(err(table, "mtu-policy", format!("`{o}`: expected \"fragment\" or \"icmp\""))),
    };
    if local.is_unspecified() || local.is_multicast() || local.is_loopback() {
        return Err(err(table, "address", format!("{local} cannot be a softwire end-point")));
    }
    Ok(EndpointConfig {
        local,
        hop_limit: t.hop_limit.max(1),
        encap_limit: t.encap_limit,
        mtu: t.mtu,
        fragment_df,
        icmp4_src: icmp4,
        copy_tos: true,
        reassembly_timeout_ns: t.reassembly_timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
        max_reassembly_sets: t.max_reassembly_sets,
        max_reassembly_bytes: t.max_reassembly_sets.saturating_mul(8192),
        icmp_rate: t.icmp_rate,
    })
}

fn tun(
    table: &str,
    t: &TunnelToml,
    default: &str,
    routes: Vec<IpPrefix>,
    addresses: Vec<(core::net::IpAddr, u8)>,
) -> Result<TunTable, ConfigError> {
    let name = t.tun.clone().unwrap_or_else(|| default.to_string());
    if name.is_empty() || name.len() > 15 || name.contains('/') {
        return Err(err(table, "tun", format!("`{name}` is not a valid interface name (1 to 15 characters)")));
    }
    Ok(TunTable { name, mtu: t.tun_mtu.clamp(1280, 65535), routes, addresses })
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

impl SoftwireConfig {
    /// True when no table is present.
    pub fn is_empty(&self) -> bool {
        self.dslite.is_none() && self.lw4o6.is_none() && self.b4.is_none()
    }

    /// The function names present, for logs.
    pub fn functions(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.dslite.is_some() {
            v.push("dslite");
        }
        if let Some(l) = &self.lw4o6 {
            v.push(if l.dstm.is_some() { "lw4o6+dstm" } else { "lw4o6" });
        }
        if self.b4.is_some() {
            v.push("b4");
        }
        v
    }

    /// Parse and check the softwire tables of a TOML file (other tables
    /// are not read). The error names the table, the key and, for a value
    /// of the wrong type, the line.
    pub fn parse(text: &str) -> Result<SoftwireConfig, ConfigError> {
        let f = SoftwireTables {
            dslite: function::config::parse_table(text, "dslite")?,
            lw4o6: function::config::parse_table(text, "lw4o6")?,
            b4: function::config::parse_table(text, "b4")?,
        };
        SoftwireConfig::from_toml(f).map_err(|e| e.at(text, None))
    }

    /// Check the softwire tables as deserialised (the one path of `v6gate
    /// run` and `v6gate softwire`); the error names the table and key.
    pub fn from_toml(f: SoftwireTables) -> Result<SoftwireConfig, ConfigError> {
        let mut cfg = SoftwireConfig::default();
        if let Some(t) = f.dslite {
            cfg.dslite = Some(dslite(t)?);
        }
        if let Some(t) = f.lw4o6 {
            cfg.lw4o6 = Some(lw4o6(t)?);
        }
        if let Some(t) = f.b4 {
            cfg.b4 = Some(b4(t)?);
        }
        Ok(cfg)
    }
}

fn dslite(t: DsliteToml) -> Result<DsliteTable, ConfigError> {
    let b4_prefixes = prefixes6("dslite", "b4-prefixes", &t.b4_prefixes)?;
    if b4_prefixes.is_empty() {
        return Err(err("dslite", "b4-prefixes", "at least one prefix"));
    }
    if t.pool4.is_empty() {
        return Err(err("dslite", "pool4", "at least one entry"));
    }
    if t.max_ports_per_subscriber == 0 {
        return Err(err("dslite", "max-ports-per-subscriber", "must be at least 1"));
    }
    if t.udp_timeout < Duration::from_secs(120) {
        return Err(err("dslite", "udp-timeout", "RFC 4787 REQ-5: at least 2 minutes"));
    }
    let subscriber_mask =
        budget::check_prefix_len(t.subscriber_mask).map_err(|e| err("dslite", "subscriber-mask", e))?;
    let endpoint = endpoint("dslite", t.aftr_address, t.ipv4_address, &t.tunnel)?;
    let mut routes: Vec<IpPrefix> = t.pool4.iter().map(|e| IpPrefix::V4(e.prefix)).collect();
    routes.push(IpPrefix::V6(Prefix6::new(t.aftr_address, 128).map_err(|e| err("dslite", "aftr-address", e))?));
    Ok(DsliteTable {
        aftr: AftrConfig {
            endpoint,
            b4_prefixes,
            nat: Nat44Config {
                max_mappings: t.max_mappings,
                max_ports_per_subscriber: t.max_ports_per_subscriber,
                subscriber_mask,
                udp_timeout_ns: ns(t.udp_timeout),
                icmp_timeout_ns: ns(t.icmp_timeout),
                tcp_est_timeout_ns: ns(t.tcp_est_timeout),
                tcp_trans_timeout_ns: ns(t.tcp_trans_timeout),
                log_mappings: t.log_mappings,
            },
            hairpinning: t.hairpinning,
            icmpv6_errors: t.icmp_errors,
        },
        pool4: t.pool4,
        max_port_probes: t.max_port_probes.max(1),
        xdp: ds_xdp(t.xdp)?,
        tun: tun("dslite", &t.tunnel, "v6gate-aftr", routes, vec![])?,
    })
}

fn lw4o6(t: Lw4o6Toml) -> Result<Lw4o6Table, ConfigError> {
    if t.psid_offset > 16 {
        return Err(err("lw4o6", "psid-offset", "at most 16"));
    }
    let v4 = prefixes4("lw4o6", "ipv4-prefixes", &t.ipv4_prefixes)?;
    let endpoint = endpoint("lw4o6", t.aftr_address, t.ipv4_address, &t.tunnel)?;
    let mut routes: Vec<IpPrefix> = v4.into_iter().map(IpPrefix::V4).collect();
    routes.push(IpPrefix::V6(Prefix6::new(t.aftr_address, 128).map_err(|e| err("lw4o6", "aftr-address", e))?));
    let dstm = match t.dstm {
        None => None,
        Some(d) => {
            let pool = prefixes4("lw4o6.dstm", "pool", &d.pool)?;
            if pool.is_empty() {
                return Err(err("lw4o6.dstm", "pool", "at least one prefix"));
            }
            if d.lease_time < Duration::from_secs(10) {
                return Err(err("lw4o6.dstm", "lease-time", "at least 10 seconds"));
            }
            routes.extend(pool.iter().map(|p| IpPrefix::V4(*p)));
            let client_prefix_len = budget::check_prefix_len(d.client_prefix_length)
                .map_err(|e| err("lw4o6.dstm", "client-prefix-length", e))?;
            if d.max_leases_per_client == 0 {
                return Err(err("lw4o6.dstm", "max-leases-per-client", "at least 1"));
            }
            if d.lease_file_interval > Duration::from_secs(60) {
                return Err(err(
                    "lw4o6.dstm",
                    "lease-file-interval",
                    "at most 60 seconds (leases changed since are lost in a crash)",
                ));
            }
            Some(DstmTable {
                lease: LeaseConfig {
                    pool,
                    clients: prefixes6("lw4o6.dstm", "clients", &d.clients)?,
                    lease_secs: d.lease_time.as_secs().min(u64::from(u32::MAX)) as u32,
                    tep: t.aftr_address,
                    file: d.lease_file,
                    max_requests_per_sec: d.max_requests_per_second,
                    client_prefix_len,
                    max_leases_per_client: d.max_leases_per_client,
                    client_requests_per_sec: d.max_requests_per_second_per_client,
                    file_interval_ms: d.lease_file_interval.as_millis().min(u128::from(u64::MAX)) as u64,
                },
                listen: d.listen,
            })
        }
    };
    if t.binding_file.is_none() && dstm.is_none() {
        return Err(err("lw4o6", "binding-file", "needed (or a [lw4o6.dstm] table)"));
    }
    Ok(Lw4o6Table {
        lwaftr: LwaftrConfig {
            endpoint,
            hairpinning: t.hairpinning,
            icmpv4_errors: t.icmpv4_errors,
            icmpv6_errors: t.icmpv6_errors,
        },
        binding_file: t.binding_file,
        psid_offset: t.psid_offset,
        watch: t.watch_binding_file,
        dstm,
        xdp: sw_xdp(t.xdp)?,
        tun: tun("lw4o6", &t.tunnel, "v6gate-lwaftr", routes, vec![])?,
    })
}

fn b4(t: B4Toml) -> Result<B4Table, ConfigError> {
    let mode = match t.mode.as_str() {
        "ds-lite" => B4Mode::DsLite,
        "lw4o6" => B4Mode::Lw4o6,
        "dstm" => B4Mode::Dstm,
        o => return Err(err("b4", "mode", format!("`{o}`: expected \"ds-lite\", \"lw4o6\" or \"dstm\""))),
    };
    let endpoint = endpoint("b4", t.address, t.icmp_address, &t.tunnel)?;
    let mut routes: Vec<IpPrefix> = Vec::new();
    for r in &t.routes {
        routes.push(IpPrefix::V4(r.parse().map_err(|e| err("b4", "routes", format!("`{r}`: {e}")))?));
    }
    routes.push(IpPrefix::V6(Prefix6::new(t.address, 128).map_err(|e| err("b4", "address", e))?));
    let aftr = match (mode, t.aftr) {
        (B4Mode::Dstm, a) => a.unwrap_or(Ipv6Addr::UNSPECIFIED),
        (_, Some(a)) => a,
        (_, None) => return Err(err("b4", "aftr", "needed in this mode")),
    };
    let mut addresses = Vec::new();
    if let Some(h) = t.host_address {
        addresses.push((core::net::IpAddr::V4(h), 32));
    }
    let mut napt = None;
    let mut ipv4_address = None;
    if mode == B4Mode::Lw4o6 {
        let ipv4 = t.ipv4_address.ok_or_else(|| err("b4", "ipv4-address", "needed for lw4o6"))?;
        let len = t.psid_length.ok_or_else(|| err("b4", "psid-length", "needed for lw4o6"))?;
        let map = PsidMap::new(t.psid_offset, len).map_err(|e| err("b4", "psid-length", e))?;
        let psid = t.psid.unwrap_or(0);
        if u32::from(psid) >= map.psids() {
            return Err(err("b4", "psid", format!("{psid} does not fit psid-length {len}")));
        }
        if t.nat {
            let host = match &t.host_ports {
                None => None,
                Some(r) => {
                    // The host's stack holds the binding's address.
                    addresses.push((core::net::IpAddr::V4(ipv4), 32));
                    ipv4_address = Some(ipv4);
                    Some(host_ports(r, map, psid)?)
                }
            };
            napt = Some(Napt { ipv4, map, psid, host });
        } else if t.host_ports.is_some() {
            return Err(err(
                "b4",
                "host-ports",
                "needs nat = true: without the NAPT the host owns the whole port set (the binding's address \
                 is on the device)",
            ));
        } else {
            addresses.push((core::net::IpAddr::V4(ipv4), 32));
            ipv4_address = Some(ipv4);
        }
    }
    if t.tunnel.tun_mtu < u32::from(t.tunnel.mtu) {
        return Err(err(
            "b4",
            "tun-mtu",
            format!(
                "{} is below mtu {}: the device carries the softwire's IPv6 packets too, and the kernel would \
                 answer the AFTR's full-size ones with Packet Too Big (mss-clamp keeps TCP within the tunnel)",
                t.tunnel.tun_mtu, t.tunnel.mtu
            ),
        ));
    }
    if mode == B4Mode::Dstm && t.lease_server.is_none() {
        return Err(err("b4", "lease-server", "needed for dstm"));
    }
    if mode != B4Mode::Lw4o6 && t.host_ports.is_some() {
        return Err(err("b4", "host-ports", "lw4o6 only (the lwB4's port set)"));
    }
    // The lwB4's NAPT has one subscriber (the whole LAN, keyed by the
    // lwB4's address): its limit is its port set, one per protocol, not
    // the AFTR's per-subscriber quota (RFC 6888 REQ-4, 2048 by default),
    // which would refuse new flows with most of the set free.
    let quota = napt.map_or(Nat44Config::default().max_ports_per_subscriber, |n| n.map.set_size().saturating_mul(3));
    let nat = Nat44Config { max_ports_per_subscriber: quota, log_mappings: false, ..Nat44Config::default() };
    Ok(B4Table {
        mode,
        b4: B4Config { endpoint, aftr, napt, nat, mss_clamp: t.mss_clamp },
        lease_server: t.lease_server,
        ipv4_address,
        kernel: b4_kernel(mode, napt.is_some_and(|n| n.host.is_some()), t.kernel)?,
        tun: tun("b4", &t.tunnel, "v6gate-b4", routes, addresses)?,
    })
}

/// `[b4] host-ports = "FIRST-LAST"`: the host's share of the lwB4's port
/// set, the set's ports in FIRST..=LAST. Both ends must be ports of the set
/// (the range then says exactly where the host's ports start and end), and
/// the NAPT must keep at least one port.
fn host_ports(r: &str, map: PsidMap, psid: u16) -> Result<HostPorts, ConfigError> {
    let bad = |why: String| err("b4", "host-ports", format!("`{r}`: {why}"));
    let (a, b) = r.split_once('-').ok_or_else(|| bad("expected \"FIRST-LAST\"".into()))?;
    let port = |x: &str| x.trim().parse::<u16>().map_err(|e| bad(format!("`{}`: {e}", x.trim())));
    let (first, last) = (port(a)?, port(b)?);
    if first > last {
        return Err(bad("the first port is above the last".into()));
    }
    let set: Vec<(u16, u16)> = map.ranges(psid).collect();
    for p in [first, last] {
        if !map.allowed(p, psid) {
            let near = set.iter().map(|(lo, hi)| format!("{lo}-{hi}")).take(4).collect::<Vec<_>>().join(", ");
            return Err(bad(format!("{p} is not in the port set of psid {psid} ({map}: {near}, ...)")));
        }
    }
    let h = HostPorts { first, last };
    let host = Napt { ipv4: Ipv4Addr::UNSPECIFIED, map, psid, host: Some(h) }.host_ports().count() as u32;
    if host >= map.set_size() {
        return Err(bad(format!("leaves the NAPT none of the set's {} ports", map.set_size())));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_parses() {
        let text = EXAMPLE_TOML.replace("# [lw4o6]\n# aftr", "[lw4o6]\naftr").replace("# binding-file", "binding-file");
        let c = SoftwireConfig::parse(&text).unwrap();
        let d = c.dslite.unwrap();
        assert_eq!((d.aftr.nat.max_ports_per_subscriber, d.aftr.nat.subscriber_mask), (2048, 56));
        assert!(d.aftr.endpoint.fragment_df);
        assert_eq!(d.tun.routes.len(), 2);
        assert!(c.lw4o6.is_some());
        assert!(SoftwireConfig::parse("[nat64]\npool6 = \"64:ff9b::/96\"\n").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_key() {
        for (text, want) in [
            ("[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = []\npool4 = [\"192.0.2.0/24\"]\n", "[dslite] b4-prefixes"),
            ("[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"192.0.2.0/24\"]\nmtu = 1000\n", "[dslite] mtu"),
            ("[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"192.0.2.0/24\"]\nbogus = 1\n", "bogus"),
            ("[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"192.0.2.0/24\"]\nudp-timeout = \"30s\"\n", "udp-timeout"),
            ("[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"192.0.2.0/24\"]\nmtu-policy = \"x\"\n", "mtu-policy"),
            ("[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"192.0.2.0/24\"]\nsubscriber-mask = 32\n", "[dslite] subscriber-mask: 32"),
            ("[lw4o6]\naftr-address = \"2001:db8::1\"\n", "[lw4o6] binding-file"),
            ("[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\n", "[b4] ipv4-address"),
            ("[lw4o6]\naftr-address = \"2001:db8::1\"\nbinding-file = \"/b\"\n[lw4o6.xdp]\n", "[lw4o6.xdp] interfaces"),
            ("[lw4o6]\naftr-address = \"2001:db8::1\"\nbinding-file = \"/b\"\n[lw4o6.xdp]\ninterfaces = [\"a\"]\nmode = \"fast\"\n", "[lw4o6.xdp] mode"),
            ("[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\nipv4-address = \"192.0.2.1\"\npsid-length = 6\npsid = 64\n", "[b4] psid"),
            ("[b4]\nmode = \"x\"\naddress = \"2001:db8::2\"\n", "[b4] mode"),
            ("[b4]\nmode = \"dstm\"\naddress = \"2001:db8::2\"\n", "lease-server"),
            ("[b4]\nmode = \"ds-lite\"\naddress = \"::\"\naftr = \"2001:db8::1\"\n", "[b4] address"),
            ("[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\ntun = \"much-too-long-a-name\"\n", "tun"),
        ] {
            let e = SoftwireConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}\n=> {e}");
        }
    }

    #[test]
    fn dstm_budgets_have_defaults_and_are_checked() {
        let base = "[lw4o6]\naftr-address = \"2001:db8::1\"\n[lw4o6.dstm]\npool = [\"192.0.2.0/29\"]\n";
        let l = SoftwireConfig::parse(base).unwrap().lw4o6.unwrap().dstm.unwrap().lease;
        assert_eq!(
            (l.client_prefix_len, l.max_leases_per_client, l.client_requests_per_sec, l.file_interval_ms),
            (64, 4, 10, 1000)
        );
        let l = SoftwireConfig::parse(&format!(
            "{base}client-prefix-length = 56\nmax-leases-per-client = 1\nmax-requests-per-second-per-client = 2\nlease-file-interval = \"250ms\"\n"
        ))
        .unwrap()
        .lw4o6
        .unwrap()
        .dstm
        .unwrap()
        .lease;
        assert_eq!(
            (l.client_prefix_len, l.max_leases_per_client, l.client_requests_per_sec, l.file_interval_ms),
            (56, 1, 2, 250)
        );
        for (extra, want) in [
            ("client-prefix-length = 40\n", "[lw4o6.dstm] client-prefix-length: 40"),
            ("max-leases-per-client = 0\n", "[lw4o6.dstm] max-leases-per-client"),
            ("lease-file-interval = \"5m\"\n", "[lw4o6.dstm] lease-file-interval"),
        ] {
            let e = SoftwireConfig::parse(&format!("{base}{extra}")).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
    }

    #[test]
    fn b4_modes() {
        let c = SoftwireConfig::parse(
            "[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\nipv4-address = \"192.0.2.1\"\npsid = 5\npsid-length = 6\n",
        )
        .unwrap();
        let b = c.b4.unwrap();
        assert_eq!(b.b4.napt.unwrap().psid, 5);
        assert_eq!(b.tun.routes[0].to_string(), "0.0.0.0/0");
        let c = SoftwireConfig::parse(
            "[b4]\nmode = \"dstm\"\naddress = \"2001:db8::2\"\nlease-server = \"[2001:db8::1]:4739\"\nroutes = [\"198.51.100.0/24\"]\n",
        )
        .unwrap();
        assert_eq!(c.b4.unwrap().mode, B4Mode::Dstm);
    }

    #[test]
    fn b4_mss_clamp_is_on_and_the_tun_mtu_carries_the_tunnel() {
        let base = "[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\n";
        let b = |extra: &str| SoftwireConfig::parse(&format!("{base}{extra}"));
        let d = b("").unwrap().b4.unwrap();
        assert_eq!((d.tun.mtu, d.b4.mss_clamp, crate::b4::mss_max(&d.b4.endpoint)), (9000, true, 1420));
        assert!(!b("mss-clamp = false\n").unwrap().b4.unwrap().b4.mss_clamp);
        assert_eq!(b("tun-mtu = 1500\n").unwrap().b4.unwrap().tun.mtu, 1500);
        let e = b("tun-mtu = 1460\n").unwrap_err().to_string();
        assert!(e.contains("[b4] tun-mtu") && e.contains("Packet Too Big"), "{e}");
    }

    #[test]
    fn b4_kernel_is_off_unless_asked_and_not_for_the_lwb4() {
        let base = "[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\n";
        assert_eq!(SoftwireConfig::parse(base).unwrap().b4.unwrap().kernel, None);
        let c = SoftwireConfig::parse(&format!("{base}[b4.kernel]\ninterfaces = [\"eth0\"]\n")).unwrap();
        assert_eq!(c.b4.unwrap().kernel, Some(B4Kernel { mode: xdp::Mode::Native, interfaces: vec!["eth0".into()] }));
        let c = SoftwireConfig::parse(&format!("{base}[b4.kernel]\nmode = \"off\"\n")).unwrap();
        assert_eq!(c.b4.unwrap().kernel, None);
        let e = SoftwireConfig::parse(&format!("{base}[b4.kernel]\n")).unwrap_err().to_string();
        assert!(e.contains("[b4.kernel] interfaces"), "{e}");
        let e = SoftwireConfig::parse(&format!("{base}[b4.kernel]\ninterfaces = [\"eth0\"]\nmode = \"x\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("[b4.kernel] mode"), "{e}");
        let lw = "[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\nipv4-address = \"192.0.2.1\"\npsid-length = 6\n";
        let e = SoftwireConfig::parse(&format!("{lw}[b4.kernel]\ninterfaces = [\"eth0\"]\n")).unwrap_err().to_string();
        assert!(e.contains("lwB4") && e.contains("host-ports"), "{e}");
        // With the host's share of the port set: the host's traffic.
        let c = SoftwireConfig::parse(&format!(
            "{lw}psid = 1\nhost-ports = \"{}-{}\"\n[b4.kernel]\ninterfaces = [\"eth0\"]\n",
            32 * 1024 + 16,
            63 * 1024 + 31
        ))
        .unwrap();
        assert!(c.b4.unwrap().kernel.is_some());
    }

    #[test]
    fn b4_host_ports() {
        // PSID 1 of length 6 at offset 6: ports A·1024 + 16 ... A·1024 + 31.
        let lw = "[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\nipv4-address = \"192.0.2.1\"\npsid = 1\npsid-length = 6\n";
        let b = |extra: &str| SoftwireConfig::parse(&format!("{lw}{extra}")).map(|c| c.b4.unwrap());
        let t = b("host-ports = \"49168-64543\"\n").unwrap();
        let n = t.b4.napt.unwrap();
        assert_eq!(n.host, Some(HostPorts { first: 49168, last: 64543 }));
        assert_eq!(n.host_ports().count(), 16 * 16, "A = 48..63, 16 ports each");
        assert_eq!(t.ipv4_address, Some(Ipv4Addr::new(192, 0, 2, 1)), "the host holds the binding's address");
        assert!(t.tun.addresses.contains(&(core::net::IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 32)));
        assert!(b("").unwrap().b4.napt.unwrap().host.is_none(), "off unless asked");
        for (extra, want) in [
            ("host-ports = \"49152-64543\"\n", "49152 is not in the port set"),
            ("host-ports = \"49168-65535\"\n", "65535 is not in the port set"),
            ("host-ports = \"64543-49168\"\n", "above the last"),
            ("host-ports = \"49168\"\n", "FIRST-LAST"),
            ("host-ports = \"x-64543\"\n", "`x`"),
            ("host-ports = \"1040-64543\"\n", "leaves the NAPT none"),
            ("host-ports = \"49168-64543\"\nnat = false\n", "needs nat = true"),
        ] {
            let e = b(extra).unwrap_err().to_string();
            assert!(e.contains("[b4] host-ports") && e.contains(want), "{extra}: {e}");
        }
        let e = SoftwireConfig::parse(
            "[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8::2\"\naftr = \"2001:db8::1\"\nhost-ports = \"1-2\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("[b4] host-ports") && e.contains("lw4o6 only"), "{e}");
    }

    #[test]
    fn dslite_xdp_is_off_until_interfaces_are_named() {
        let base =
            "[dslite]\naftr-address = \"2001:db8::1\"\nb4-prefixes = [\"2001:db8::/32\"]\npool4 = [\"192.0.2.0/24\"]\n";
        assert_eq!(SoftwireConfig::parse(base).unwrap().dslite.unwrap().xdp, None, "no table: off");
        let c = SoftwireConfig::parse(&format!("{base}[dslite.xdp]\ninterfaces = [\"d6\", \"d4\"]\n")).unwrap();
        let x = c.dslite.unwrap().xdp.unwrap();
        assert_eq!((x.mode, x.interfaces.len(), x.max_sessions), (xdp::Mode::Native, 2, 1 << 18));
        let c = SoftwireConfig::parse(&format!("{base}[dslite.xdp]\nmode = \"off\"\n")).unwrap();
        assert_eq!(c.dslite.unwrap().xdp, None);
        for (extra, want) in [
            ("[dslite.xdp]\n", "[dslite.xdp] interfaces"),
            ("[dslite.xdp]\ninterfaces = [\"a\"]\nmax-sessions = 0\n", "[dslite.xdp] max-sessions"),
            ("[dslite.xdp]\ninterfaces = [\"a\"]\nmode = \"fast\"\n", "[dslite.xdp] mode"),
        ] {
            let e = SoftwireConfig::parse(&format!("{base}{extra}")).unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }

    #[test]
    fn lw4o6_xdp_defaults_to_native_on_the_named_interfaces() {
        let base = "[lw4o6]\naftr-address = \"2001:db8::1\"\nbinding-file = \"/b\"\n";
        assert_eq!(SoftwireConfig::parse(base).unwrap().lw4o6.unwrap().xdp, None, "no table: off");
        let c = SoftwireConfig::parse(&format!("{base}[lw4o6.xdp]\ninterfaces = [\"d6\", \"d4\"]\n")).unwrap();
        let x = c.lw4o6.unwrap().xdp.unwrap();
        assert_eq!((x.mode, x.interfaces.len(), x.max_bindings), (xdp::Mode::Native, 2, 1 << 20));
        let c = SoftwireConfig::parse(&format!("{base}[lw4o6.xdp]\nmode = \"off\"\n")).unwrap();
        assert_eq!(c.lw4o6.unwrap().xdp, None);
    }
}
