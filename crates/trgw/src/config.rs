//! The `[trgw]` configuration table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

pub use confval::IoMode;
use serde::Deserialize;
use xlat::addr::IpPrefix;

/// A commented `[trgw]` block for `v6gate config example`.
pub const EXAMPLE_TOML: &str = r#"# [trgw]: the IMS transition gateway media relay (RTP/RTCP between IPv4 and
# IPv6), driven by rtpengine's ng protocol or the rtpproxy protocol (Kamailio's
# `rtpengine` and `rtpproxy` modules work unchanged).
[trgw]
# UDP ports for media, on every interface address: RTP even, RTCP odd.
port-min = 30000
port-max = 40000
# Tear down calls whose media has been idle this long ("90s", "2m", or whole
# seconds; the older key timeout-secs is still accepted).
timeout = "1m"
# A call without media both ways yet (ringing, early media) is kept this
# long after its last signalling or packet: longer than SIP's Timer C
# (3 min; the IMS-ALG releases an unanswered dialog after 201 s).
# early-timeout = "4m"
# Media streams one client may hold: the offer's `received from` (SIP
# source) or else its media address, an IPv6 prefix of client-prefix-v6
# bits or an IPv4 address. More are refused (ng error, rtpproxy E71, the
# ALG's 503 + Retry-After); established calls are never evicted.
# client-streams = 256
# client-prefix-v6 = 64
# "symmetric": learn the far end from its first packet (NAT friendly);
# "strict": only accept packets from the signalled address.
latching = "symmetric"
# Control listeners. rtpengine ng (bencode or JSON over UDP) and rtpproxy.
ng = "127.0.0.1:2223"
rtpproxy-udp = "127.0.0.1:22222"
# rtpproxy-unix = "/run/v6gate/rtpproxy.sock"
# Who may send control commands (CIDRs). Default: loopback only.
allow = ["127.0.0.0/8", "::1/128"]
# Relay worker threads; default: one per core.
# workers = 2
# Packet I/O: "uring" (default: io_uring, falls back to "poll" when the
# kernel refuses) or "poll" (epoll, recvmmsg/sendmmsg per ready socket).
# ("io-uring" and "epoll" are older spellings, still accepted.)
# io = "uring"
# Media sockets: "per-port" (default: two UDP sockets per leg, four per
# call, so RLIMIT_NOFILE bounds the calls) or "shared" (a BPF sk_lookup
# program steers the media ports to two sockets per worker and raw sockets
# send; the calls are bounded by the port range and memory; needs
# CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW and Linux >= 5.9; see docs/trgw.md).
# sockets = "per-port"
# Where media may be sent (docs/security.md): loopback, multicast,
# broadcast, link-local, 0.0.0.0/8 and the relay's and host's own addresses
# are always refused, unless an entry of media-allow at least as narrow as
# that class names them. media-deny refuses networks; a non-empty
# media-allow refuses everything outside it.
# media-allow = []
# media-deny = []
# ng reply cache (retransmissions get the cached reply): bounds.
# ng-cache-entries = 10000
# ng-cache-bytes = 16777216
# rtpproxy Unix socket: connections served at once, and the read/write
# timeout of each.
# control-connections = 64
# control-timeout = "5s"
# rtpproxy bridging (U/L modifiers e and i): which interface is which.
# rtpproxy-internal = "v4"
# rtpproxy-external = "v6"

# Named media interfaces (rtpengine's "direction" names them). Without a
# direction the first one with the needed family is used. Each has an IPv4
# and/or an IPv6 address to bind, and may
# advertise another address in SDP (behind 1:1 NAT).
[[trgw.interface]]
name = "v6"
ipv6 = "2001:db8::1"
[[trgw.interface]]
name = "v4"
ipv4 = "192.0.2.1"
# advertise-ipv4 = "198.51.100.1"
"#;

/// How the far end of a leg is learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Latching {
    /// Learn the far end from its first packet (and re-learn after new
    /// signalling), as rtpengine does.
    #[default]
    Symmetric,
    /// Only packets from the signalled address are relayed; others are
    /// dropped and counted.
    Strict,
}

/// How the media ports are served by sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SocketMode {
    /// One UDP socket per media port: four descriptors per call.
    #[default]
    PerPort,
    /// A BPF `sk_lookup` program steers every allocated media port to a
    /// few shared sockets (one per family per worker); the slow path sends
    /// from raw sockets. Descriptors stay flat whatever the call count.
    Shared,
}

/// One named media interface.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Interface {
    /// Name used by ng `direction` and the rtpproxy bridging keys.
    pub name: String,
    /// IPv4 address to bind media sockets on.
    pub ipv4: Option<Ipv4Addr>,
    /// IPv6 address to bind media sockets on.
    pub ipv6: Option<Ipv6Addr>,
    /// Address written into SDP instead of `ipv4`.
    pub advertise_ipv4: Option<Ipv4Addr>,
    /// Address written into SDP instead of `ipv6`.
    pub advertise_ipv6: Option<Ipv6Addr>,
}

impl Interface {
    /// An interface with these addresses and no advertised ones.
    pub fn new(name: &str, ipv4: Option<Ipv4Addr>, ipv6: Option<Ipv6Addr>) -> Self {
        Interface { name: name.to_string(), ipv4, ipv6, advertise_ipv4: None, advertise_ipv6: None }
    }

    /// The bind address of a family, when the interface has one.
    pub fn addr(&self, v6: bool) -> Option<IpAddr> {
        if v6 {
            self.ipv6.map(IpAddr::V6)
        } else {
            self.ipv4.map(IpAddr::V4)
        }
    }

    /// The address to put into SDP for a bind address of this interface.
    pub fn advertised(&self, v6: bool) -> Option<IpAddr> {
        if v6 {
            self.advertise_ipv6.map(IpAddr::V6).or_else(|| self.addr(true))
        } else {
            self.advertise_ipv4.map(IpAddr::V4).or_else(|| self.addr(false))
        }
    }
}

/// `allow`: a list of prefixes ([`IpPrefix`]); host bits are accepted and
/// cleared (`10.1.2.3/16` is `10.1.0.0/16`).
fn de_allow<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpPrefix>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    v.iter().map(|s| IpPrefix::parse_truncating(s).map_err(serde::de::Error::custom)).collect()
}

/// The `[trgw]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Named media interfaces; the first is the default.
    #[serde(default, rename = "interface")]
    pub interfaces: Vec<Interface>,
    /// Lowest media port (inclusive).
    #[serde(default = "d_port_min")]
    pub port_min: u16,
    /// Highest media port (inclusive).
    #[serde(default = "d_port_max")]
    pub port_max: u16,
    /// Idle timeout of a call's media, in seconds (key `timeout`, in the
    /// duration syntax of [`confval::duration`]; whole seconds).
    #[serde(default = "d_timeout", rename = "timeout", deserialize_with = "confval::duration::secs")]
    pub timeout_secs: u64,
    /// How long a call without media both ways is kept after its last
    /// signalling or packet, in seconds (key `early-timeout`).
    #[serde(default = "d_early_timeout", rename = "early-timeout", deserialize_with = "confval::duration::secs")]
    pub early_timeout_secs: u64,
    /// Streams one client may hold.
    #[serde(default = "d_client_streams")]
    pub client_streams: usize,
    /// IPv6 clients are prefixes of this length (48-128).
    #[serde(default = "d_client_prefix_v6")]
    pub client_prefix_v6: u8,
    /// Latching mode.
    #[serde(default)]
    pub latching: Latching,
    /// rtpengine ng listener (UDP).
    #[serde(default = "d_ng")]
    pub ng: Option<SocketAddr>,
    /// rtpproxy UDP listener.
    #[serde(default = "d_rtpproxy")]
    pub rtpproxy_udp: Option<SocketAddr>,
    /// rtpproxy Unix stream socket path.
    #[serde(default)]
    pub rtpproxy_unix: Option<PathBuf>,
    /// Control clients allowed (CIDRs). Default loopback only.
    #[serde(default = "d_allow", deserialize_with = "de_allow")]
    pub allow: Vec<IpPrefix>,
    /// Relay worker threads (default: number of cores).
    #[serde(default)]
    pub workers: Option<usize>,
    /// Packet I/O engine: io_uring (multishot receives into a
    /// provided-buffer ring, batched sends) or readiness (epoll and
    /// `recvmmsg`/`sendmmsg` per ready socket).
    #[serde(default = "d_io")]
    pub io: IoMode,
    /// Media sockets: per port (default) or shared through BPF sk_lookup.
    #[serde(default)]
    pub sockets: SocketMode,
    /// rtpproxy bridging: the interface the `i` modifier names.
    #[serde(default)]
    pub rtpproxy_internal: Option<String>,
    /// rtpproxy bridging: the interface the `e` modifier names.
    #[serde(default)]
    pub rtpproxy_external: Option<String>,
    /// Networks media may be sent to (empty: any not refused otherwise);
    /// see [`crate::policy`].
    #[serde(default, deserialize_with = "de_allow")]
    pub media_allow: Vec<IpPrefix>,
    /// Networks media is never sent to.
    #[serde(default, deserialize_with = "de_allow")]
    pub media_deny: Vec<IpPrefix>,
    /// Most ng replies cached for retransmissions.
    #[serde(default = "d_cache_entries")]
    pub ng_cache_entries: usize,
    /// Most bytes of ng replies cached.
    #[serde(default = "d_cache_bytes")]
    pub ng_cache_bytes: usize,
    /// rtpproxy Unix socket connections served at once.
    #[serde(default = "d_control_connections")]
    pub control_connections: usize,
    /// Read and write timeout of an rtpproxy Unix socket connection, in
    /// seconds (key `control-timeout`, in the duration syntax of
    /// [`confval::duration`]).
    #[serde(default = "d_control_timeout", rename = "control-timeout", deserialize_with = "confval::duration::secs")]
    pub control_timeout_secs: u64,
}

fn d_cache_entries() -> usize {
    crate::cookie_cache::DEFAULT_MAX_ENTRIES
}
fn d_cache_bytes() -> usize {
    crate::cookie_cache::DEFAULT_MAX_BYTES
}
fn d_control_connections() -> usize {
    64
}
fn d_control_timeout() -> u64 {
    5
}

fn d_io() -> IoMode {
    IoMode::Uring
}
fn d_port_min() -> u16 {
    30000
}
fn d_port_max() -> u16 {
    40000
}
fn d_timeout() -> u64 {
    60
}
/// Default `early-timeout`: past SIP's Timer C (more than 3 minutes) and
/// the IMS-ALG's early-dialog lifetime (Timer C + 20 s = 201 s).
pub const DEFAULT_EARLY_TIMEOUT_SECS: u64 = 240;
fn d_early_timeout() -> u64 {
    DEFAULT_EARLY_TIMEOUT_SECS
}
/// Default `client-streams`.
pub const DEFAULT_CLIENT_STREAMS: usize = 256;
fn d_client_streams() -> usize {
    DEFAULT_CLIENT_STREAMS
}
fn d_client_prefix_v6() -> u8 {
    budget::DEFAULT_V6_PREFIX
}
fn d_ng() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 2223)))
}
fn d_rtpproxy() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 22222)))
}
fn d_allow() -> Vec<IpPrefix> {
    ["127.0.0.0/8", "::1/128"].iter().filter_map(|s| s.parse().ok()).collect()
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interfaces: Vec::new(),
            port_min: d_port_min(),
            port_max: d_port_max(),
            timeout_secs: d_timeout(),
            early_timeout_secs: d_early_timeout(),
            client_streams: d_client_streams(),
            client_prefix_v6: d_client_prefix_v6(),
            latching: Latching::Symmetric,
            ng: d_ng(),
            rtpproxy_udp: d_rtpproxy(),
            rtpproxy_unix: None,
            allow: d_allow(),
            workers: None,
            io: d_io(),
            sockets: SocketMode::PerPort,
            rtpproxy_internal: None,
            rtpproxy_external: None,
            media_allow: Vec::new(),
            media_deny: Vec::new(),
            ng_cache_entries: d_cache_entries(),
            ng_cache_bytes: d_cache_bytes(),
            control_connections: d_control_connections(),
            control_timeout_secs: d_control_timeout(),
        }
    }
}

/// Old spellings of `[trgw]` keys and values still accepted, each with a
/// deprecation warning (see [`confval::alias`]).
pub fn aliases() -> impl Iterator<Item = &'static confval::Alias> {
    const OWN: &[confval::Alias] = &[confval::Alias::Duration { old: "timeout-secs", new: "timeout", unit: "s" }];
    OWN.iter().chain(IoMode::ALIASES)
}

impl Config {
    /// Parses a TOML document holding a `[trgw]` table (other tables are
    /// ignored), then [`Config::check`]s it. Deprecated spellings are
    /// accepted; [`Config::parse_toml`] also returns them.
    pub fn from_toml_file_text(text: &str) -> Result<Config, String> {
        Config::parse_toml(text).map(|(c, _)| c)
    }

    /// As [`Config::from_toml_file_text`], with the deprecated spellings
    /// found (to print or log).
    pub fn parse_toml(text: &str) -> Result<(Config, Vec<confval::Deprecation>), String> {
        #[derive(Deserialize)]
        struct File {
            trgw: Option<Config>,
        }
        let flat = |e: &dyn std::fmt::Display| format!("[trgw]: {}", e.to_string().trim().replace('\n', " "));
        let mut doc = toml::de::DeTable::parse(text).map_err(|e| flat(&e))?;
        let found = confval::alias::apply(doc.get_mut(), "trgw", aliases()).map_err(|e| e.to_string())?;
        let f = File::deserialize(toml::de::Deserializer::from(doc)).map_err(|mut e| {
            e.set_input(Some(text));
            flat(&e)
        })?;
        let c = f.trgw.ok_or_else(|| "no [trgw] table in the configuration".to_string())?;
        c.check()?;
        Ok((c, found))
    }

    /// Checks consistency; the error names the key at fault.
    pub fn check(&self) -> Result<(), String> {
        if self.interfaces.is_empty() {
            return Err(
                "[trgw] interface: at least one [[trgw.interface]] with an ipv4 or ipv6 address is needed".into()
            );
        }
        for (i, ifc) in self.interfaces.iter().enumerate() {
            if ifc.name.is_empty() || ifc.name.len() > 64 || ifc.name.contains(char::is_whitespace) {
                return Err(format!(
                    "[trgw] interface[{i}].name: `{}` must be 1-64 characters without spaces",
                    ifc.name
                ));
            }
            if ifc.ipv4.is_none() && ifc.ipv6.is_none() {
                return Err(format!("[trgw] interface[{i}] `{}`: needs ipv4 and/or ipv6", ifc.name));
            }
            if ifc.advertise_ipv4.is_some() && ifc.ipv4.is_none() {
                return Err(format!("[trgw] interface[{i}].advertise-ipv4: set without ipv4"));
            }
            if ifc.advertise_ipv6.is_some() && ifc.ipv6.is_none() {
                return Err(format!("[trgw] interface[{i}].advertise-ipv6: set without ipv6"));
            }
            if self.interfaces[..i].iter().any(|o| o.name == ifc.name) {
                return Err(format!("[trgw] interface[{i}].name: duplicate name `{}`", ifc.name));
            }
        }
        if self.port_min < 1024 || !self.port_min.is_multiple_of(2) {
            return Err(format!("[trgw] port-min: {} must be even and at least 1024", self.port_min));
        }
        if self.port_max < self.port_min.saturating_add(3) {
            return Err(format!(
                "[trgw] port-max: {} leaves no room for two RTP/RTCP pairs above port-min {}",
                self.port_max, self.port_min
            ));
        }
        if self.timeout_secs == 0 {
            return Err("[trgw] timeout: must be at least 1s".into());
        }
        if self.early_timeout_secs == 0 {
            return Err("[trgw] early-timeout: must be at least 1s".into());
        }
        if self.client_streams == 0 {
            return Err("[trgw] client-streams: must be at least 1".into());
        }
        budget::check_prefix_len(self.client_prefix_v6).map_err(|e| format!("[trgw] client-prefix-v6: {e}"))?;
        if self.workers == Some(0) || self.workers.is_some_and(|w| w > 256) {
            return Err("[trgw] workers: must be 1-256".into());
        }
        if self.ng.is_none() && self.rtpproxy_udp.is_none() && self.rtpproxy_unix.is_none() {
            return Err("[trgw]: no control listener (ng, rtpproxy-udp, rtpproxy-unix)".into());
        }
        for (k, v) in [("rtpproxy-internal", &self.rtpproxy_internal), ("rtpproxy-external", &self.rtpproxy_external)] {
            if let Some(n) = v {
                if !self.interfaces.iter().any(|i| &i.name == n) {
                    return Err(format!("[trgw] {k}: no interface named `{n}`"));
                }
            }
        }
        if self.control_connections == 0 || self.control_connections > 10_000 {
            return Err("[trgw] control-connections: must be 1-10000".into());
        }
        if self.control_timeout_secs == 0 || self.control_timeout_secs > 3600 {
            return Err("[trgw] control-timeout: must be 1s-1h".into());
        }
        if self.ng_cache_bytes > 1 << 30 {
            return Err("[trgw] ng-cache-bytes: at most 1073741824 (1 GiB)".into());
        }
        if self.rtpproxy_internal.is_some() != self.rtpproxy_external.is_some() {
            return Err("[trgw] rtpproxy-internal and rtpproxy-external go together".into());
        }
        Ok(())
    }

    /// Index of the interface called `name`.
    pub fn interface_index(&self, name: &str) -> Option<usize> {
        self.interfaces.iter().position(|i| i.name == name)
    }

    /// Number of relay workers to run.
    pub fn worker_count(&self) -> usize {
        self.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Whether a control client may talk to us.
    pub fn allowed(&self, ip: IpAddr) -> bool {
        self.allow.iter().any(|c| c.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_parses_and_checks() {
        let c = Config::from_toml_file_text(EXAMPLE_TOML).unwrap();
        assert_eq!(c.interfaces.len(), 2);
        assert_eq!(c.port_min, 30000);
        assert_eq!(c.ng, Some("127.0.0.1:2223".parse().unwrap()));
        assert_eq!(c.latching, Latching::Symmetric);
    }

    #[test]
    fn errors_name_the_key() {
        let bad = |t: &str, key: &str| {
            let e = Config::from_toml_file_text(t).unwrap_err();
            assert!(e.contains(key), "{e} should mention {key}");
        };
        bad("[trgw]\n", "interface");
        bad("[trgw]\n[[trgw.interface]]\nname = \"a\"\n", "needs ipv4");
        bad("[trgw]\nport-min = 31\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "port-min");
        bad("[trgw]\nbogus = 1\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "bogus");
        bad("[trgw]\nallow = [\"10.0.0.0/40\"]\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "prefix");
        bad("[trgw]\nlatching = \"loose\"\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "latching");
        bad("[trgw]\ntimeout = 0\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "timeout");
        bad("[trgw]\ntimeout-secs = 0\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "timeout: must be");
        bad("[trgw]\ntimeout = \"1500ms\"\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "whole number");
        bad(
            "[trgw]\ntimeout = 5\ntimeout-secs = 5\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n",
            "[trgw] timeout-secs: is the old name of `timeout`",
        );
        bad("[trgw]\nrtpproxy-internal = \"x\"\n[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n", "internal");
        bad("[siit]\n", "no [trgw]");
        let ifc = "[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n";
        bad(&format!("[trgw]\nclient-streams = 0\n{ifc}"), "client-streams");
        bad(
            &format!("[trgw]\nclient-prefix-v6 = 32\n{ifc}"),
            "client-prefix-v6: 32: a client prefix length from 48 to 128",
        );
        bad(&format!("[trgw]\nearly-timeout = 0\n{ifc}"), "early-timeout");
    }

    #[test]
    fn socket_modes() {
        let ifc = "[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n";
        let m = |line: &str| Config::from_toml_file_text(&format!("[trgw]\n{line}\n{ifc}")).map(|c| c.sockets);
        assert_eq!(m(""), Ok(SocketMode::PerPort), "per-port is the default");
        assert_eq!(m("sockets = \"per-port\""), Ok(SocketMode::PerPort));
        assert_eq!(m("sockets = \"shared\""), Ok(SocketMode::Shared));
        let e = m("sockets = \"pooled\"").unwrap_err();
        assert!(e.contains("sockets") || e.contains("per-port"), "{e}");
    }

    #[test]
    fn timeout_spellings() {
        let ifc = "[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n";
        let t =
            |line: &str| Config::parse_toml(&format!("[trgw]\n{line}\n{ifc}")).map(|(c, d)| (c.timeout_secs, d.len()));
        assert_eq!(t("timeout = \"2m\""), Ok((120, 0)));
        assert_eq!(t("timeout = 90"), Ok((90, 0)));
        assert_eq!(t("timeout-secs = 90"), Ok((90, 1)));
        assert_eq!(Config::default().timeout_secs, 60);
        assert_eq!(t("early-timeout = \"5m\"").map(|_| ()), Ok(()));
        let c =
            Config::from_toml_file_text(&format!("[trgw]\nearly-timeout = \"5m\"\nclient-streams = 9\n{ifc}")).unwrap();
        assert_eq!((c.early_timeout_secs, c.client_streams, c.client_prefix_v6), (300, 9, 64));
        assert_eq!(Config::default().early_timeout_secs, 240);
    }

    #[test]
    fn io_spellings() {
        let ifc = "[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n";
        let io = |v: &str| Config::parse_toml(&format!("[trgw]\nio = \"{v}\"\n{ifc}"));
        let (c, d) = io("uring").unwrap();
        assert_eq!((c.io, d.len()), (IoMode::Uring, 0));
        let (c, d) = io("poll").unwrap();
        assert_eq!((c.io, d.len()), (IoMode::Poll, 0));
        let (c, d) = io("epoll").unwrap();
        assert_eq!(c.io, IoMode::Poll);
        assert_eq!(d[0].to_string(), "[trgw] io = \"epoll\" is deprecated: write io = \"poll\"");
        let (c, d) = io("io-uring").unwrap();
        assert_eq!((c.io, d.len()), (IoMode::Uring, 1));
        let e = io("fast").unwrap_err();
        assert!(e.contains("`fast` is not \"uring\" or \"poll\""), "{e}");
        assert_eq!(Config::default().io, IoMode::Uring);
    }

    #[test]
    fn allow_list_contains() {
        let c = Config::default();
        assert!(c.allowed("127.0.0.1".parse().unwrap()) && c.allowed("::1".parse().unwrap()));
        assert!(!c.allowed("10.1.2.3".parse().unwrap()));
        let ifc = "[[trgw.interface]]\nname = \"a\"\nipv4 = \"192.0.2.1\"\n";
        let c = Config::from_toml_file_text(&format!("[trgw]\nallow = [\"10.1.2.3/16\", \"2001:db8::/32\"]\n{ifc}"))
            .unwrap();
        assert_eq!(c.allow[0].to_string(), "10.1.0.0/16", "host bits are cleared");
        assert!(c.allowed("10.1.2.3".parse().unwrap()));
        assert!(c.allowed("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.allowed("10.2.0.1".parse().unwrap()));
        assert!(c.allowed("2001:db8::5".parse().unwrap()));
        assert!(!c.allowed("127.0.0.1".parse().unwrap()));
    }
}
