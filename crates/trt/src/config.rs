//! The `[trt]` table.

use core::net::SocketAddr;
use serde::Deserialize;
use std::time::Duration;
use xlat::addr::{Prefix6, Rfc6052};

/// A commented example (docs/trt.md).
pub const EXAMPLE_TOML: &str = r#"# [trt]: the RFC 3142 transport relay translator. IPv6 clients reach IPv4
# servers at PREFIX::IPv4 (the prefix DNS64 synthesises with); the relay
# terminates each TCP connection and opens one to the IPv4 server, and
# relays UDP flows. Needs nftables tproxy (built into this kernel) and
# CAP_NET_ADMIN.
[trt]
prefix = "64:ff9b:1::/96"       # any RFC 6052 length
# tcp-port = 7040                # where tproxy delivers the relay prefix's TCP
# udp-port = 7040                # and UDP
# max-connections = 1024         # relayed TCP connections at most, per listener (more are reset, counted)
# max-connections-per-client = 128   # of them, from one client (an IPv6 /64, an IPv4 address)
# max-connecting-per-client = 32     # of those, still connecting to their server
# tcp-idle-timeout = "10m"       # a relayed connection with no byte either way is reset
# max-udp-flows = 4096
# max-udp-flows-per-client = 256 # beyond: the datagram is refused with ICMP (administratively prohibited)
# client-prefix-length = 64      # an IPv6 client: its prefix of this length (48-128)
# connect-timeout = "5s"         # the IPv4 side's connect (the client is reset)
# copy = "splice"                # TCP bytes: "splice" (non-blocking splice(2) through a pipe
#                                # per direction, moved by the listener's epoll loop: no
#                                # thread per connection), "splice-threads" (two threads per
#                                # connection with blocking splice), or "sockmap" (moved in
#                                # the kernel by a BPF stream verdict; no flow control of its
#                                # own: docs/trt.md; spliced where the kernel has no sockmap)
# busy-poll = "0s"               # e.g. "1ms": the TCP loops keep polling (yielding the CPU)
#                                # this long after their last event instead of sleeping
# open-spin = "100us"            # the TCP loop polls (yielding the CPU) instead of sleeping
#                                # for at most this long after a new pair, a pre-connect, and
#                                # a server's answer passed on (the FINs, the next session);
#                                # at most twice this of a CPU per session; "0s": off
# preconnect = 0                 # e.g. 64: start the IPv4 connect at the client's SYN (a raw
#                                # socket sees SYNs to the prefix; CAP_NET_RAW), at most this
#                                # many waiting for their accept; unclaimed ones are reset
#                                # after 2 s (servers see them: opt-in; docs/trt.md)
# ack-with-data = false          # true, copy "splice": the connection to the server holds its
#                                # handshake's last ACK and sends it with the client's first
#                                # bytes (the server's accept finds the request there; it
#                                # wakes once); alone after open-spin when the client has
#                                # sent nothing yet. Off: plain TCP (docs/trt.md)
# close-delay = "0s"             # e.g. "1ms", copy "splice": a FIN is passed on, and a
#                                # finished pair closed, when no session is being opened
#                                # (after an answer reached its client, before the loop
#                                # sleeps), at the latest this long after it came in (at most
#                                # 100ms); opt-in: it gained nothing traced (docs/trt.md)
# cpu-latency = "0us"            # unset (default): none. Hold a PM QoS CPU latency request
#                                # (/dev/cpu_dma_latency, machine-wide, while the relay runs):
#                                # idle CPUs wake within this (0: they poll instead of halting).
#                                # A session wakes client, relay and server in turn; on a VM
#                                # a halted vCPU's wake-up costs tens of µs (docs/trt.md).
#                                # Costs power; at most 1s; needs root
# congestion-control = "cubic"   # TCP congestion control of the relay's own sockets (both
#                                # legs); unset: the system's (net.ipv4.tcp_congestion_control).
#                                # With BBR there, "cubic" or "reno" made the relay's bulk
#                                # copy faster on a 2-core host (docs/trt.md, Limits)
# udp-timeout = "1m"             # an idle UDP flow is forgotten
# setup = "auto"                 # nftables tproxy rule and policy routing added and removed
#                                # by the relay; "none": the operator's (docs/trt.md)
# fwmark = 9331                  # mark and routing table of the "auto" setup
# table = 9331
#
# IPv4-initiated connections: static mappings from an IPv4 socket address
# of this host to an IPv6 server.
# [[trt.static]]
# listen = "198.51.100.254:8080"
# to = "[2001:db8:1::80]:80"
# proto = "tcp"                  # or "udp"
"#;

/// How the tproxy plumbing is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// The relay adds the nftables table, the rule and the route, and
    /// removes them when it stops.
    Auto,
    /// The operator did.
    None,
}

/// How the TCP bytes are moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    /// `"splice"` (the default): non-blocking `splice(2)` through a pipe
    /// per direction, driven by the listener's epoll loop (no thread per
    /// connection); the receiving leg's window follows the sending leg.
    Splice,
    /// `"splice-threads"`: blocking `splice(2)` through a pipe, two
    /// threads per connection (the copy before the loop did it).
    SpliceThreads,
    /// A BPF sockhash with a stream verdict redirects each socket's bytes
    /// to its peer in the kernel; `Splice` where it cannot be loaded.
    Sockmap,
}

/// A static mapping for IPv4-initiated traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticMap {
    /// IPv4 socket address to listen on.
    pub listen: SocketAddr,
    /// IPv6 server.
    pub to: SocketAddr,
    /// UDP (true) or TCP.
    pub udp: bool,
}

/// What one client may hold of the relay, and for how long (issue #29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// An IPv6 client is its prefix of this length (an IPv4 client its address).
    pub client_prefix_len: u8,
    /// TCP connections (connecting and relayed) of one client at most.
    pub connections_per_client: usize,
    /// TCP connections of one client still connecting to their server at most.
    pub connecting_per_client: usize,
    /// A relayed TCP connection with no byte either way this long is reset.
    pub tcp_idle_timeout: Duration,
    /// UDP flows of one client at most.
    pub udp_flows_per_client: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            client_prefix_len: budget::DEFAULT_V6_PREFIX,
            connections_per_client: 128,
            connecting_per_client: 32,
            tcp_idle_timeout: Duration::from_secs(600),
            udp_flows_per_client: 256,
        }
    }
}

impl Budgets {
    /// The client of peer address `a`.
    pub fn client(&self, a: std::net::IpAddr) -> budget::ClientKey {
        budget::ClientKey::of(a, self.client_prefix_len)
    }
}

/// A checked `[trt]`.
#[derive(Debug, Clone)]
pub struct TrtConfig {
    /// The relay prefix.
    pub prefix: Rfc6052,
    /// tproxy port for TCP.
    pub tcp_port: u16,
    /// tproxy port for UDP.
    pub udp_port: u16,
    /// TCP connections at most (per listener).
    pub max_connections: usize,
    /// UDP flows at most.
    pub max_udp_flows: usize,
    /// Per-client budgets and the idle timeout.
    pub budgets: Budgets,
    /// IPv4 connect timeout.
    pub connect_timeout: Duration,
    /// UDP idle timeout.
    pub udp_timeout: Duration,
    /// Plumbing.
    pub setup: Setup,
    /// How TCP bytes are moved.
    pub copy: CopyMode,
    /// Busy-poll window of the TCP loops (zero: they sleep in `epoll_wait`).
    pub busy_poll: Duration,
    /// Pre-connects waiting for their accept at most (zero: no pre-connect).
    pub preconnect: usize,
    /// How long the TCP loop polls around a session's opening (zero: never).
    pub open_spin: Duration,
    /// The server's handshake ACK goes with the client's first bytes (`copy = "splice"`).
    pub ack_with_data: bool,
    /// TCP congestion control of the relay's sockets (`None`: the system's).
    pub congestion_control: Option<String>,
    /// The PM QoS CPU latency limit the relay holds while it runs (`None`:
    /// none; [`netsys::cpu_latency`]).
    pub cpu_latency: Option<Duration>,
    /// How long the TCP loop may put off a FIN's pass-on and a finished
    /// pair's close while sessions open (zero: at once).
    pub close_delay: Duration,
    /// fwmark and table of the auto setup.
    pub fwmark: u32,
    /// Routing table of the auto setup.
    pub table: u32,
    /// Static mappings.
    pub statics: Vec<StaticMap>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StaticToml {
    listen: SocketAddr,
    to: SocketAddr,
    #[serde(default = "d_tcp")]
    proto: String,
}

fn d_tcp() -> String {
    "tcp".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct TrtToml {
    prefix: String,
    #[serde(default = "d_port")]
    tcp_port: u16,
    #[serde(default = "d_port")]
    udp_port: u16,
    #[serde(default = "d_conns")]
    max_connections: usize,
    #[serde(default = "d_flows")]
    max_udp_flows: usize,
    #[serde(default = "d_client_prefix")]
    client_prefix_length: u8,
    #[serde(default = "d_conns_per_client")]
    max_connections_per_client: usize,
    #[serde(default = "d_connecting_per_client")]
    max_connecting_per_client: usize,
    #[serde(default = "d_tcp_idle", deserialize_with = "confval::duration::deserialize")]
    tcp_idle_timeout: Duration,
    #[serde(default = "d_flows_per_client")]
    max_udp_flows_per_client: usize,
    #[serde(default = "d_connect", deserialize_with = "confval::duration::deserialize")]
    connect_timeout: Duration,
    #[serde(default = "d_udp", deserialize_with = "confval::duration::deserialize")]
    udp_timeout: Duration,
    #[serde(default = "d_setup")]
    setup: String,
    #[serde(default = "d_copy")]
    copy: String,
    #[serde(default)]
    busy_poll: Option<toml::Value>,
    #[serde(default)]
    preconnect: usize,
    #[serde(default = "d_open_spin", deserialize_with = "confval::duration::deserialize")]
    open_spin: Duration,
    #[serde(default)]
    ack_with_data: Option<toml::Value>,
    #[serde(default)]
    congestion_control: Option<toml::Value>,
    #[serde(default)]
    cpu_latency: Option<toml::Value>,
    #[serde(default = "d_close_delay", deserialize_with = "confval::duration::deserialize")]
    close_delay: Duration,
    #[serde(default = "d_mark")]
    fwmark: u32,
    #[serde(default = "d_mark")]
    table: u32,
    #[serde(default, rename = "static")]
    statics: Vec<StaticToml>,
}

/// A duration in the syntax of [`confval::duration`], on its own.
#[derive(Deserialize)]
struct DurationToml(#[serde(deserialize_with = "confval::duration::deserialize")] Duration);

/// The optional duration key `[trt] key`, at most `max`.
fn optional_duration(key: &str, v: &Option<toml::Value>, max: Duration) -> Result<Option<Duration>, String> {
    let Some(v) = v else { return Ok(None) };
    let d: DurationToml = v.clone().try_into().map_err(|e: toml::de::Error| format!("[trt] {key}: {}", e.message()))?;
    if d.0 > max {
        return Err(format!(
            "[trt] {key}: {} is above {}",
            confval::duration::format(d.0),
            confval::duration::format(max)
        ));
    }
    Ok(Some(d.0))
}

fn d_port() -> u16 {
    7040
}
fn d_conns() -> usize {
    1024
}
fn d_flows() -> usize {
    4096
}
fn d_client_prefix() -> u8 {
    Budgets::default().client_prefix_len
}
fn d_conns_per_client() -> usize {
    Budgets::default().connections_per_client
}
fn d_connecting_per_client() -> usize {
    Budgets::default().connecting_per_client
}
fn d_tcp_idle() -> Duration {
    Budgets::default().tcp_idle_timeout
}
fn d_flows_per_client() -> usize {
    Budgets::default().udp_flows_per_client
}
fn d_connect() -> Duration {
    Duration::from_secs(5)
}
fn d_udp() -> Duration {
    Duration::from_secs(60)
}
fn d_open_spin() -> Duration {
    Duration::from_micros(100)
}
fn d_close_delay() -> Duration {
    Duration::ZERO
}
fn d_setup() -> String {
    "auto".into()
}
fn d_copy() -> String {
    "splice".into()
}
fn d_mark() -> u32 {
    9331
}

#[derive(Debug, Deserialize)]
struct FileToml {
    trt: Option<toml::Value>,
    #[serde(flatten)]
    _rest: toml::Table,
}

impl TrtConfig {
    /// The `[trt]` table of a TOML file, if any, checked.
    pub fn parse(text: &str) -> Result<Option<TrtConfig>, String> {
        let f: FileToml = toml::from_str(text).map_err(|e| e.to_string().trim().replace('\n', " "))?;
        let Some(v) = f.trt else { return Ok(None) };
        let t: TrtToml = v.try_into().map_err(|e: toml::de::Error| format!("[trt] {}", e.message()))?;
        let p: Prefix6 = t.prefix.parse().map_err(|e| format!("[trt] prefix: `{}`: {e}", t.prefix))?;
        let prefix = Rfc6052::new(p).map_err(|e| format!("[trt] prefix: {e}"))?;
        let setup = match t.setup.as_str() {
            "auto" => Setup::Auto,
            "none" => Setup::None,
            o => return Err(format!("[trt] setup: `{o}`: expected \"auto\" or \"none\"")),
        };
        let copy = match t.copy.as_str() {
            "sockmap" => CopyMode::Sockmap,
            "splice" => CopyMode::Splice,
            "splice-threads" => CopyMode::SpliceThreads,
            o => return Err(format!("[trt] copy: `{o}`: expected \"splice\", \"splice-threads\" or \"sockmap\"")),
        };
        if t.tcp_port == 0 || t.udp_port == 0 {
            return Err("[trt] tcp-port, udp-port: 0 is not a port".into());
        }
        let busy_poll = optional_duration("busy-poll", &t.busy_poll, Duration::from_secs(1))?.unwrap_or_default();
        let cpu_latency = optional_duration("cpu-latency", &t.cpu_latency, Duration::from_secs(1))?;
        let ack_with_data = match &t.ack_with_data {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(v) => return Err(format!("[trt] ack-with-data: `{v}`: expected true or false")),
        };
        let congestion_control = match &t.congestion_control {
            None => None,
            // The kernel's names: at most 15 bytes (TCP_CA_NAME_MAX 16 with
            // the NUL); whether it has one is checked when the relay starts.
            Some(toml::Value::String(cc))
                if !cc.is_empty()
                    && cc.len() < 16
                    && cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                Some(cc.clone())
            }
            Some(v) => {
                return Err(format!(
                    "[trt] congestion-control: `{v}`: expected the name of a kernel TCP congestion control (1-15 of a-z, 0-9, _ and -), e.g. \"cubic\""
                ))
            }
        };
        if t.open_spin > Duration::from_millis(10) {
            return Err(format!("[trt] open-spin: {} is above 10ms", confval::duration::format(t.open_spin)));
        }
        if t.close_delay > Duration::from_millis(100) {
            return Err(format!("[trt] close-delay: {} is above 100ms", confval::duration::format(t.close_delay)));
        }
        if t.preconnect > t.max_connections {
            return Err(format!("[trt] preconnect: {} is above max-connections ({})", t.preconnect, t.max_connections));
        }
        if t.max_connections == 0 {
            return Err("[trt] max-connections: at least 1".into());
        }
        let client_prefix_len =
            budget::check_prefix_len(t.client_prefix_length).map_err(|e| format!("[trt] client-prefix-length: {e}"))?;
        for (key, v) in [
            ("max-connections-per-client", t.max_connections_per_client),
            ("max-connecting-per-client", t.max_connecting_per_client),
            ("max-udp-flows-per-client", t.max_udp_flows_per_client),
        ] {
            if v == 0 {
                return Err(format!("[trt] {key}: at least 1"));
            }
        }
        if t.tcp_idle_timeout < Duration::from_secs(10) || t.tcp_idle_timeout > Duration::from_secs(86_400) {
            return Err(format!(
                "[trt] tcp-idle-timeout: {} is not between 10s and 24h",
                confval::duration::format(t.tcp_idle_timeout)
            ));
        }
        let budgets = Budgets {
            client_prefix_len,
            connections_per_client: t.max_connections_per_client,
            connecting_per_client: t.max_connecting_per_client,
            tcp_idle_timeout: t.tcp_idle_timeout,
            udp_flows_per_client: t.max_udp_flows_per_client,
        };
        if t.fwmark == 0 || t.table == 0 || t.table == 253 || t.table == 254 || t.table == 255 {
            return Err("[trt] fwmark, table: non-zero, and not the kernel's main/default/local tables".into());
        }
        let mut statics = Vec::new();
        for s in t.statics {
            let udp = match s.proto.as_str() {
                "tcp" => false,
                "udp" => true,
                o => return Err(format!("[trt] static proto: `{o}`: expected \"tcp\" or \"udp\"")),
            };
            if !s.listen.is_ipv4() || !s.to.is_ipv6() {
                return Err(format!("[trt] static: listen {} must be IPv4 and to {} IPv6", s.listen, s.to));
            }
            statics.push(StaticMap { listen: s.listen, to: s.to, udp });
        }
        Ok(Some(TrtConfig {
            prefix,
            tcp_port: t.tcp_port,
            udp_port: t.udp_port,
            max_connections: t.max_connections,
            max_udp_flows: t.max_udp_flows.max(1),
            budgets,
            connect_timeout: t.connect_timeout.max(Duration::from_millis(100)),
            udp_timeout: t.udp_timeout.max(Duration::from_secs(1)),
            setup,
            copy,
            busy_poll,
            preconnect: t.preconnect,
            open_spin: t.open_spin,
            ack_with_data,
            congestion_control,
            cpu_latency,
            close_delay: t.close_delay,
            fwmark: t.fwmark,
            table: t.table,
            statics,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_and_errors() {
        let c = TrtConfig::parse(EXAMPLE_TOML).unwrap().unwrap();
        assert_eq!((c.tcp_port, c.setup, c.max_connections, c.copy), (7040, Setup::Auto, 1024, CopyMode::Splice));
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\ncopy = \"sockmap\"\n").unwrap().unwrap();
        assert_eq!(c.copy, CopyMode::Sockmap);
        assert_eq!((c.busy_poll, c.preconnect, c.open_spin), (Duration::ZERO, 0, Duration::from_micros(100)));
        assert!(!c.ack_with_data);
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\nack-with-data = true\n").unwrap().unwrap();
        assert!(c.ack_with_data);
        assert_eq!((c.congestion_control, c.cpu_latency), (None, None));
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\ncpu-latency = \"0us\"\n").unwrap().unwrap();
        assert_eq!(c.cpu_latency, Some(Duration::ZERO));
        let c =
            TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\ncongestion-control = \"reno\"\n").unwrap().unwrap();
        assert_eq!(c.congestion_control.as_deref(), Some("reno"));
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\nopen-spin = \"0s\"\n").unwrap().unwrap();
        assert_eq!((c.open_spin, c.close_delay), (Duration::ZERO, Duration::ZERO));
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\nclose-delay = \"1ms\"\n").unwrap().unwrap();
        assert_eq!(c.close_delay, Duration::from_millis(1));
        let c = TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\npreconnect = 64\n").unwrap().unwrap();
        assert_eq!(c.preconnect, 64);
        let c =
            TrtConfig::parse("[trt]\nprefix = \"64:ff9b:1::/96\"\ncopy = \"splice-threads\"\nbusy-poll = \"1ms\"\n")
                .unwrap()
                .unwrap();
        assert_eq!((c.copy, c.busy_poll), (CopyMode::SpliceThreads, Duration::from_millis(1)));
        assert_eq!(c.prefix.extract(&"64:ff9b:1::c633:6401".parse().unwrap()), Some("198.51.100.1".parse().unwrap()));
        assert!(TrtConfig::parse("[nat64]\n").unwrap().is_none());
        assert_eq!(c.budgets, Budgets::default());
        let c = TrtConfig::parse(
            "[trt]\nprefix = \"64:ff9b:1::/96\"\nclient-prefix-length = 56\nmax-connections-per-client = 2\nmax-connecting-per-client = 1\ntcp-idle-timeout = \"30s\"\nmax-udp-flows-per-client = 3\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.budgets,
            Budgets {
                client_prefix_len: 56,
                connections_per_client: 2,
                connecting_per_client: 1,
                tcp_idle_timeout: Duration::from_secs(30),
                udp_flows_per_client: 3
            }
        );
        for (t, want) in [
            ("[trt]\nprefix = \"64:ff9b:1::/95\"\n", "[trt] prefix"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nsetup = \"x\"\n", "setup"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nbogus = 1\n", "bogus"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ncopy = \"memcpy\"\n", "[trt] copy"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ntable = 254\n", "table"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nbusy-poll = \"2s\"\n", "[trt] busy-poll"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nbusy-poll = \"soon\"\n", "busy-poll"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nmax-connections = 8\npreconnect = 9\n", "[trt] preconnect"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nopen-spin = \"20ms\"\n", "[trt] open-spin"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nclose-delay = \"1s\"\n", "[trt] close-delay"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nack-with-data = 1\n", "ack-with-data"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ncpu-latency = \"2s\"\n", "cpu-latency: 2s is above 1s"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ncpu-latency = 5\n", "cpu-latency"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ncongestion-control = \"\"\n", "[trt] congestion-control"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ncongestion-control = \"a b\"\n", "[trt] congestion-control"),
            (
                "[trt]\nprefix = \"64:ff9b:1::/96\"\ncongestion-control = \"abcdefghijklmnop\"\n",
                "[trt] congestion-control",
            ),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ncongestion-control = 3\n", "congestion-control"),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\nclient-prefix-length = 32\n", "[trt] client-prefix-length: 32"),
            (
                "[trt]\nprefix = \"64:ff9b:1::/96\"\nmax-connections-per-client = 0\n",
                "[trt] max-connections-per-client",
            ),
            ("[trt]\nprefix = \"64:ff9b:1::/96\"\ntcp-idle-timeout = \"1s\"\n", "[trt] tcp-idle-timeout"),
            (
                "[trt]\nprefix = \"64:ff9b:1::/96\"\n[[trt.static]]\nlisten = \"[::1]:80\"\nto = \"[::1]:80\"\n",
                "must be IPv4",
            ),
        ] {
            let e = TrtConfig::parse(t).unwrap_err();
            assert!(e.contains(want), "{t} => {e}");
        }
    }
}
