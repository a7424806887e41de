//! The `[trt]` table.

use core::net::SocketAddr;
use function::ConfigError;
use serde::Deserialize;
use std::time::Duration;
use toml::Spanned;
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
#[derive(Debug, Clone, PartialEq)]
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
    proto: Spanned<String>,
}

/// A duration in the syntax of [`confval::duration`], on its own.
#[derive(Debug, Clone, Copy, Deserialize)]
struct DurationToml(#[serde(deserialize_with = "confval::duration::deserialize")] Duration);

/// `[trt]` as written: typed, each value that is checked further kept
/// with its span, so its error names the key and the line
/// ([`TrtConfig::from_toml`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TrtToml {
    prefix: Spanned<String>,
    #[serde(default = "d_port")]
    tcp_port: Spanned<u16>,
    #[serde(default = "d_port")]
    udp_port: Spanned<u16>,
    #[serde(default = "d_conns")]
    max_connections: Spanned<usize>,
    #[serde(default = "d_flows")]
    max_udp_flows: usize,
    #[serde(default = "d_client_prefix")]
    client_prefix_length: Spanned<u8>,
    #[serde(default = "d_conns_per_client")]
    max_connections_per_client: Spanned<usize>,
    #[serde(default = "d_connecting_per_client")]
    max_connecting_per_client: Spanned<usize>,
    #[serde(default = "d_tcp_idle")]
    tcp_idle_timeout: Spanned<DurationToml>,
    #[serde(default = "d_flows_per_client")]
    max_udp_flows_per_client: Spanned<usize>,
    #[serde(default = "d_connect", deserialize_with = "confval::duration::deserialize")]
    connect_timeout: Duration,
    #[serde(default = "d_udp", deserialize_with = "confval::duration::deserialize")]
    udp_timeout: Duration,
    #[serde(default = "d_setup")]
    setup: Spanned<String>,
    #[serde(default = "d_copy")]
    copy: Spanned<String>,
    #[serde(default)]
    busy_poll: Option<Spanned<DurationToml>>,
    #[serde(default = "d_zero")]
    preconnect: Spanned<usize>,
    #[serde(default = "d_open_spin")]
    open_spin: Spanned<DurationToml>,
    #[serde(default)]
    ack_with_data: bool,
    #[serde(default)]
    congestion_control: Option<Spanned<String>>,
    #[serde(default)]
    cpu_latency: Option<Spanned<DurationToml>>,
    #[serde(default = "d_close_delay")]
    close_delay: Spanned<DurationToml>,
    #[serde(default = "d_mark")]
    fwmark: Spanned<u32>,
    #[serde(default = "d_mark")]
    table: Spanned<u32>,
    #[serde(default, rename = "static")]
    statics: Vec<Spanned<StaticToml>>,
}

/// An unacceptable value of `[trt] key`, pointing at it (a default has
/// no place in the file: the error names the key only).
fn bad<T>(key: &str, v: &Spanned<T>, msg: impl Into<String>) -> ConfigError {
    let e = ConfigError::invalid(format!("[trt] {key}"), msg);
    if v.span().is_empty() {
        e
    } else {
        e.spanned(v.span())
    }
}

/// The optional duration `[trt] key`, at most `max`.
fn optional_duration(
    key: &str,
    v: &Option<Spanned<DurationToml>>,
    max: Duration,
) -> Result<Option<Duration>, ConfigError> {
    let Some(v) = v else { return Ok(None) };
    let d = v.get_ref().0;
    if d > max {
        return Err(bad(
            key,
            v,
            format!("{} is above {}", confval::duration::format(d), confval::duration::format(max)),
        ));
    }
    Ok(Some(d))
}

/// A default value: no span in the file.
fn unspanned<T>(v: T) -> Spanned<T> {
    Spanned::new(0..0, v)
}
fn d_tcp() -> Spanned<String> {
    unspanned("tcp".into())
}
fn d_port() -> Spanned<u16> {
    unspanned(7040)
}
fn d_conns() -> Spanned<usize> {
    unspanned(1024)
}
fn d_zero() -> Spanned<usize> {
    unspanned(0)
}
fn d_flows() -> usize {
    4096
}
fn d_client_prefix() -> Spanned<u8> {
    unspanned(Budgets::default().client_prefix_len)
}
fn d_conns_per_client() -> Spanned<usize> {
    unspanned(Budgets::default().connections_per_client)
}
fn d_connecting_per_client() -> Spanned<usize> {
    unspanned(Budgets::default().connecting_per_client)
}
fn d_tcp_idle() -> Spanned<DurationToml> {
    unspanned(DurationToml(Budgets::default().tcp_idle_timeout))
}
fn d_flows_per_client() -> Spanned<usize> {
    unspanned(Budgets::default().udp_flows_per_client)
}
fn d_connect() -> Duration {
    Duration::from_secs(5)
}
fn d_udp() -> Duration {
    Duration::from_secs(60)
}
fn d_open_spin() -> Spanned<DurationToml> {
    unspanned(DurationToml(Duration::from_micros(100)))
}
fn d_close_delay() -> Spanned<DurationToml> {
    unspanned(DurationToml(Duration::ZERO))
}
fn d_setup() -> Spanned<String> {
    unspanned("auto".into())
}
fn d_copy() -> Spanned<String> {
    unspanned("splice".into())
}
fn d_mark() -> Spanned<u32> {
    unspanned(9331)
}

impl TrtConfig {
    /// The `[trt]` table of a TOML file, if any, checked; errors name
    /// the key, the line and the column.
    pub fn parse(text: &str) -> Result<Option<TrtConfig>, ConfigError> {
        function::config::parse_table::<TrtToml>(text, "trt")?
            .map(TrtConfig::from_toml)
            .transpose()
            .map_err(|e| e.at(text, None))
    }

    /// Check `[trt]` as deserialised (the one path of `v6gate run` and
    /// `v6gate trt`). The error carries the key and the value's span.
    pub fn from_toml(t: TrtToml) -> Result<TrtConfig, ConfigError> {
        let p: Prefix6 = t
            .prefix
            .get_ref()
            .parse()
            .map_err(|e| bad("prefix", &t.prefix, format!("`{}`: {e}", t.prefix.get_ref())))?;
        let prefix = Rfc6052::new(p).map_err(|e| bad("prefix", &t.prefix, e.to_string()))?;
        let setup = match t.setup.get_ref().as_str() {
            "auto" => Setup::Auto,
            "none" => Setup::None,
            o => return Err(bad("setup", &t.setup, format!("`{o}`: expected \"auto\" or \"none\""))),
        };
        let copy = match t.copy.get_ref().as_str() {
            "sockmap" => CopyMode::Sockmap,
            "splice" => CopyMode::Splice,
            "splice-threads" => CopyMode::SpliceThreads,
            o => {
                return Err(bad(
                    "copy",
                    &t.copy,
                    format!("`{o}`: expected \"splice\", \"splice-threads\" or \"sockmap\""),
                ))
            }
        };
        for (key, port) in [("tcp-port", &t.tcp_port), ("udp-port", &t.udp_port)] {
            if *port.get_ref() == 0 {
                return Err(bad(key, port, "0 is not a port"));
            }
        }
        let busy_poll = optional_duration("busy-poll", &t.busy_poll, Duration::from_secs(1))?.unwrap_or_default();
        let cpu_latency = optional_duration("cpu-latency", &t.cpu_latency, Duration::from_secs(1))?;
        let congestion_control = match &t.congestion_control {
            None => None,
            // The kernel's names: at most 15 bytes (TCP_CA_NAME_MAX 16 with
            // the NUL); whether it has one is checked when the relay starts.
            Some(cc)
                if !cc.get_ref().is_empty()
                    && cc.get_ref().len() < 16
                    && cc.get_ref().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                Some(cc.get_ref().clone())
            }
            Some(cc) => {
                return Err(bad(
                    "congestion-control",
                    cc,
                    format!(
                        "`{}`: expected the name of a kernel TCP congestion control (1-15 of a-z, 0-9, _ and -), e.g. \"cubic\"",
                        cc.get_ref()
                    ),
                ))
            }
        };
        for (key, v, max) in [
            ("open-spin", &t.open_spin, Duration::from_millis(10)),
            ("close-delay", &t.close_delay, Duration::from_millis(100)),
        ] {
            if v.get_ref().0 > max {
                let (d, max) = (confval::duration::format(v.get_ref().0), confval::duration::format(max));
                return Err(bad(key, v, format!("{d} is above {max}")));
            }
        }
        let max_connections = *t.max_connections.get_ref();
        if *t.preconnect.get_ref() > max_connections {
            let msg = format!("{} is above max-connections ({max_connections})", t.preconnect.get_ref());
            return Err(bad("preconnect", &t.preconnect, msg));
        }
        if max_connections == 0 {
            return Err(bad("max-connections", &t.max_connections, "at least 1"));
        }
        let client_prefix_len = budget::check_prefix_len(*t.client_prefix_length.get_ref())
            .map_err(|e| bad("client-prefix-length", &t.client_prefix_length, e.to_string()))?;
        for (key, v) in [
            ("max-connections-per-client", &t.max_connections_per_client),
            ("max-connecting-per-client", &t.max_connecting_per_client),
            ("max-udp-flows-per-client", &t.max_udp_flows_per_client),
        ] {
            if *v.get_ref() == 0 {
                return Err(bad(key, v, "at least 1"));
            }
        }
        let idle = t.tcp_idle_timeout.get_ref().0;
        if idle < Duration::from_secs(10) || idle > Duration::from_secs(86_400) {
            let msg = format!("{} is not between 10s and 24h", confval::duration::format(idle));
            return Err(bad("tcp-idle-timeout", &t.tcp_idle_timeout, msg));
        }
        let budgets = Budgets {
            client_prefix_len,
            connections_per_client: *t.max_connections_per_client.get_ref(),
            connecting_per_client: *t.max_connecting_per_client.get_ref(),
            tcp_idle_timeout: idle,
            udp_flows_per_client: *t.max_udp_flows_per_client.get_ref(),
        };
        if *t.fwmark.get_ref() == 0 {
            return Err(bad("fwmark", &t.fwmark, "0 marks nothing: a non-zero mark"));
        }
        if matches!(*t.table.get_ref(), 0 | 253..=255) {
            return Err(bad("table", &t.table, "non-zero, and not the kernel's main/default/local tables"));
        }
        let mut statics = Vec::new();
        for s in &t.statics {
            let st = s.get_ref();
            let udp = match st.proto.get_ref().as_str() {
                "tcp" => false,
                "udp" => true,
                o => return Err(bad("static.proto", &st.proto, format!("`{o}`: expected \"tcp\" or \"udp\""))),
            };
            if !st.listen.is_ipv4() || !st.to.is_ipv6() {
                return Err(bad("static", s, format!("listen {} must be IPv4 and to {} IPv6", st.listen, st.to)));
            }
            statics.push(StaticMap { listen: st.listen, to: st.to, udp });
        }
        Ok(TrtConfig {
            prefix,
            tcp_port: *t.tcp_port.get_ref(),
            udp_port: *t.udp_port.get_ref(),
            max_connections,
            max_udp_flows: t.max_udp_flows.max(1),
            budgets,
            connect_timeout: t.connect_timeout.max(Duration::from_millis(100)),
            udp_timeout: t.udp_timeout.max(Duration::from_secs(1)),
            setup,
            copy,
            busy_poll,
            preconnect: *t.preconnect.get_ref(),
            open_spin: t.open_spin.get_ref().0,
            ack_with_data: t.ack_with_data,
            congestion_control,
            cpu_latency,
            close_delay: t.close_delay.get_ref().0,
            fwmark: *t.fwmark.get_ref(),
            table: *t.table.get_ref(),
            statics,
        })
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
            let e = TrtConfig::parse(t).unwrap_err().to_string();
            assert!(e.contains(want), "{t} => {e}");
        }
    }
}
