//! The `[alg]` table (serde; the daemon embeds it as it is).

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;
use xlat::addr::IpPrefix;

/// Example `[alg]` block for `v6gate config example`.
pub const EXAMPLE_TOML: &str = r#"# [alg]: the IMS-ALG, a SIP/SDP gateway between the IPv6 and the IPv4 realm
# (an RFC 3261 stateful proxy that anchors each call's media in the TrGW).
# A reload (SIGHUP) applies routes, limits, timers and the Contact mode to
# new requests; listeners, advertised addresses, tcp and the media keys
# need a restart (live calls use them).
[alg]
# SIP on the IPv6 realm and on the IPv4 realm, UDP and TCP on each.
listen-v6 = "[2001:db8::1]:5060"
listen-v4 = "192.0.2.1:5060"
# advertise-v4 = "198.51.100.1"     # written in Via/Record-Route/Contact/Path instead (1:1 NAT)
# advertise-v6 = "2001:db8::1"
tcp = true
contact = "rewrite"        # or "keep": rely on Record-Route alone
media = "in-process"       # the [trgw] relay of this process; or "ng" (the [[alg.ng]] servers)
media-v6-interface = "v6"  # [[trgw.interface]] names used for each realm
media-v4-interface = "v4"
max-message = 65535        # bytes; larger requests get 513, others are dropped
dialog-timeout = "2h"     # a dialog without an in-dialog request for this long is released (Session-Expires shortens it)
t1 = "500ms"               # RFC 3261 T1 (T2 = 4 s, T4 = 5 s)
# Budgets (docs/security.md): each has a global cap, and one client (its IPv6
# prefix of client-prefix-length bits, or its IPv4 address) may hold
# client-share percent of it. Full: new requests get 503 with Retry-After;
# nothing held is evicted. With one upstream proxy sending every call, raise
# client-share (100: the global caps only).
client-prefix-length = 64  # a client is its IPv6 prefix of this length (48-128)
client-share = 25          # percent of every budget below one client may hold
rate-limit = 500           # requests per second per client (burst twice that); 0: off
max-transactions = 100000  # live server transactions
max-state-bytes = 268435456  # bytes of transactions and dialogs (256 MiB)
max-parked-bytes = 16777216  # bytes of requests waiting for DNS (16 MiB)
max-dns-lookups = 256      # DNS lookups in flight
dns-timeout = "5s"         # a lookup (NAPTR, SRV, A/AAAA) that takes longer fails: 504
# dns-servers = ["[2001:db8::53]:53"]  # default: the nameservers of /etc/resolv.conf
max-connections = 1024     # SIP TCP connections accepted (both realms); more are refused
max-outbound-connections = 256  # SIP TCP connections the ALG opens to next hops
tcp-idle-timeout = "2m"    # a TCP connection without a message (or CRLF keep-alive) is closed
tcp-message-timeout = "10s"  # a message's bytes must all arrive within this of its first
# Where requests may go (docs/security.md, the destination policy): loopback,
# link-local, multicast, broadcast, the gateway's own addresses (and IPv6
# addresses embedding them) are refused with 403; an entry of next-hop-allow
# at least as narrow as the class lifts it, and a non-empty next-hop-allow
# refuses everything outside it. next-hop-deny is always refused.
# next-hop-allow = []
# next-hop-deny = []

# Domain routes, checked before DNS (longest suffix wins):
# [[alg.route]]
# domain = "ipv4.example"
# next-hop = "192.0.2.10:5060"
# transport = "udp"

# With media = "ng": remote TrGWs or rtpengines, chosen by weight per call:
# [[alg.ng]]
# addr = "127.0.0.1:2223"
# weight = 1
"#;

/// A list of prefixes; host bits are accepted and cleared.
fn de_prefixes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpPrefix>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    v.iter().map(|s| IpPrefix::parse_truncating(s).map_err(serde::de::Error::custom)).collect()
}

/// How Contact is made reachable from the other realm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContactMode {
    /// Contact becomes a URI at the ALG's address in the outgoing realm,
    /// the original URI carried in its user part and restored when a
    /// request comes back to it.
    #[default]
    Rewrite,
    /// Contact passes through; in-dialog requests reach the ALG through
    /// its Record-Route entries.
    Keep,
}

/// Where media is anchored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MediaMode {
    /// The TrGW of this process.
    #[default]
    InProcess,
    /// Remote ng servers (`[[alg.ng]]`).
    Ng,
    /// No media anchoring (signalling only; for tests and same-family use).
    None,
}

/// A transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// UDP.
    #[default]
    Udp,
    /// TCP.
    Tcp,
}

impl Transport {
    /// The Via / URI token.
    pub fn token(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        }
    }
    /// Reliable (no retransmissions).
    pub fn reliable(self) -> bool {
        self == Transport::Tcp
    }
    /// From a Via or URI `transport` token.
    pub fn from_token(t: &str) -> Option<Transport> {
        if t.eq_ignore_ascii_case("udp") {
            Some(Transport::Udp)
        } else if t.eq_ignore_ascii_case("tcp") {
            Some(Transport::Tcp)
        } else {
            None
        }
    }
}

/// A domain route.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Route {
    /// The domain (and its subdomains).
    pub domain: String,
    /// Where requests for it go.
    pub next_hop: SocketAddr,
    /// Over which transport.
    #[serde(default)]
    pub transport: Transport,
}

/// A remote ng server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NgServer {
    /// Its address.
    pub addr: SocketAddr,
    /// Relative weight.
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// `[alg]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// IPv6 realm listener.
    pub listen_v6: SocketAddr,
    /// IPv4 realm listener.
    pub listen_v4: SocketAddr,
    /// Address written for the IPv6 side.
    pub advertise_v6: Option<IpAddr>,
    /// Address written for the IPv4 side.
    pub advertise_v4: Option<IpAddr>,
    /// Listen on TCP too.
    pub tcp: bool,
    /// Contact handling.
    pub contact: ContactMode,
    /// Media anchoring.
    pub media: MediaMode,
    /// TrGW interface for the IPv6 realm.
    pub media_v6_interface: Option<String>,
    /// TrGW interface for the IPv4 realm.
    pub media_v4_interface: Option<String>,
    /// Largest message accepted.
    pub max_message: usize,
    /// Requests per second per client (0: no limit).
    pub rate_limit: u32,
    /// Idle dialog lifetime (`dialog-timeout`, the duration syntax of
    /// [`confval::duration`]; whole seconds).
    #[serde(rename = "dialog-timeout", deserialize_with = "confval::duration::secs")]
    pub dialog_timeout_secs: u64,
    /// RFC 3261 T1 (`t1`, a duration).
    #[serde(with = "confval::duration")]
    pub t1: std::time::Duration,
    /// Most live server transactions.
    pub max_transactions: usize,
    /// Most open TCP connections accepted (both realms).
    pub max_connections: usize,
    /// Most TCP connections the ALG opens to next hops.
    pub max_outbound_connections: usize,
    /// The prefix length that makes one IPv6 client (48..=128).
    pub client_prefix_length: u8,
    /// Percent of every budget one client may hold (1..=100).
    pub client_share: u8,
    /// Bytes of transactions and dialogs.
    pub max_state_bytes: usize,
    /// Bytes of requests waiting for DNS.
    pub max_parked_bytes: usize,
    /// DNS lookups in flight.
    pub max_dns_lookups: usize,
    /// How long one lookup may take (`dns-timeout`, a duration).
    #[serde(with = "confval::duration")]
    pub dns_timeout: std::time::Duration,
    /// Nameservers (empty: those of /etc/resolv.conf).
    pub dns_servers: Vec<SocketAddr>,
    /// A TCP connection without a message for this long is closed.
    #[serde(with = "confval::duration")]
    pub tcp_idle_timeout: std::time::Duration,
    /// A message's bytes must all arrive within this of its first.
    #[serde(with = "confval::duration")]
    pub tcp_message_timeout: std::time::Duration,
    /// Next hops allowed (see the destination policy).
    #[serde(deserialize_with = "de_prefixes")]
    pub next_hop_allow: Vec<IpPrefix>,
    /// Next hops refused.
    #[serde(deserialize_with = "de_prefixes")]
    pub next_hop_deny: Vec<IpPrefix>,
    /// Domain routes.
    pub route: Vec<Route>,
    /// Remote ng servers.
    pub ng: Vec<NgServer>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen_v6: "[::1]:5060".parse().expect("literal"),
            listen_v4: "127.0.0.1:5060".parse().expect("literal"),
            advertise_v6: None,
            advertise_v4: None,
            tcp: true,
            contact: ContactMode::Rewrite,
            media: MediaMode::InProcess,
            media_v6_interface: None,
            media_v4_interface: None,
            max_message: crate::MAX_MESSAGE,
            rate_limit: 500,
            dialog_timeout_secs: 7200,
            t1: std::time::Duration::from_millis(500),
            max_transactions: 100_000,
            max_connections: 1024,
            max_outbound_connections: 256,
            client_prefix_length: 64,
            client_share: 25,
            max_state_bytes: 256 << 20,
            max_parked_bytes: 16 << 20,
            max_dns_lookups: 256,
            dns_timeout: std::time::Duration::from_secs(5),
            dns_servers: Vec::new(),
            tcp_idle_timeout: std::time::Duration::from_secs(120),
            tcp_message_timeout: std::time::Duration::from_secs(10),
            next_hop_allow: Vec::new(),
            next_hop_deny: Vec::new(),
            route: Vec::new(),
            ng: Vec::new(),
        }
    }
}

impl Config {
    /// Parses a whole file's `[alg]` table (other tables are ignored).
    pub fn from_toml_file_text(text: &str) -> Result<Config, String> {
        #[derive(Deserialize)]
        struct File {
            alg: Option<toml::Value>,
        }
        let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let v = f.alg.ok_or("no [alg] table")?;
        let c: Config = v.try_into().map_err(|e: toml::de::Error| format!("[alg]: {e}"))?;
        c.check()?;
        Ok(c)
    }

    /// Consistency checks.
    pub fn check(&self) -> Result<(), String> {
        if !self.listen_v6.is_ipv6() {
            return Err("[alg] listen-v6 must be an IPv6 address".into());
        }
        if !self.listen_v4.is_ipv4() {
            return Err("[alg] listen-v4 must be an IPv4 address".into());
        }
        if self.advertise_v6.is_some_and(|a| !a.is_ipv6()) {
            return Err("[alg] advertise-v6 must be an IPv6 address".into());
        }
        if self.advertise_v4.is_some_and(|a| !a.is_ipv4()) {
            return Err("[alg] advertise-v4 must be an IPv4 address".into());
        }
        if !(1024..=crate::MAX_MESSAGE).contains(&self.max_message) {
            return Err(format!("[alg] max-message must be 1024..={}", crate::MAX_MESSAGE));
        }
        if self.dialog_timeout_secs == 0 {
            return Err("[alg] dialog-timeout must be at least 1s".into());
        }
        if self.t1.is_zero() || self.t1 > std::time::Duration::from_secs(10) {
            return Err("[alg] t1 must be between 1ms and 10s".into());
        }
        if self.max_transactions == 0 {
            return Err("[alg] max-transactions must be > 0".into());
        }
        if self.max_connections == 0 {
            return Err("[alg] max-connections must be > 0".into());
        }
        if self.max_outbound_connections == 0 {
            return Err("[alg] max-outbound-connections must be > 0".into());
        }
        budget::check_prefix_len(self.client_prefix_length).map_err(|e| format!("[alg] client-prefix-length {e}"))?;
        if !(1..=100).contains(&self.client_share) {
            return Err("[alg] client-share must be a percentage, 1..=100".into());
        }
        if self.max_state_bytes < 1 << 20 {
            return Err("[alg] max-state-bytes must be at least 1048576 (1 MiB)".into());
        }
        if self.max_parked_bytes < crate::MAX_MESSAGE {
            return Err(format!("[alg] max-parked-bytes must be at least {} (one message)", crate::MAX_MESSAGE));
        }
        if self.max_dns_lookups == 0 {
            return Err("[alg] max-dns-lookups must be > 0".into());
        }
        let secs = std::time::Duration::from_secs;
        if self.dns_timeout < std::time::Duration::from_millis(100) || self.dns_timeout > secs(60) {
            return Err("[alg] dns-timeout must be between 100ms and 60s".into());
        }
        if self.tcp_idle_timeout < secs(1) {
            return Err("[alg] tcp-idle-timeout must be at least 1s".into());
        }
        if self.tcp_message_timeout < std::time::Duration::from_millis(100) || self.tcp_message_timeout > secs(300) {
            return Err("[alg] tcp-message-timeout must be between 100ms and 300s".into());
        }
        if self.media == MediaMode::Ng && self.ng.is_empty() {
            return Err("[alg] media = \"ng\" needs at least one [[alg.ng]] server".into());
        }
        for r in &self.route {
            if r.domain.is_empty() || r.domain.starts_with('.') {
                return Err(format!("[alg] route domain `{}` is not a domain", r.domain));
            }
        }
        Ok(())
    }

    /// The first key whose change needs a restart (None: `new` can be
    /// applied to a running ALG by [`crate::runner::AlgHandle::reconfigure`]
    /// without touching a call). Listeners, advertised addresses and TCP
    /// are in the Via, Record-Route and Contact headers of live dialogs;
    /// the media backend, its interfaces and its ng servers hold the live
    /// calls' sessions (a call's ng server is chosen from the server list,
    /// so changing the list would send its later commands elsewhere); the
    /// nameservers are the resolver's sockets; the next-hop lists are the
    /// destination policy's, made at start.
    /// Everything else (routes, limits, timers, Contact mode) applies to
    /// new requests at once.
    pub fn restart_needed(&self, new: &Config) -> Option<&'static str> {
        let keys: [(&'static str, bool); 12] = [
            ("listen-v6", self.listen_v6 != new.listen_v6),
            ("listen-v4", self.listen_v4 != new.listen_v4),
            ("advertise-v6", self.advertise_v6 != new.advertise_v6),
            ("advertise-v4", self.advertise_v4 != new.advertise_v4),
            ("tcp", self.tcp != new.tcp),
            ("media", self.media != new.media),
            ("media-v6-interface", self.media_v6_interface != new.media_v6_interface),
            ("media-v4-interface", self.media_v4_interface != new.media_v4_interface),
            ("ng", self.ng != new.ng),
            ("dns-servers", self.dns_servers != new.dns_servers),
            ("next-hop-allow", self.next_hop_allow != new.next_hop_allow),
            ("next-hop-deny", self.next_hop_deny != new.next_hop_deny),
        ];
        keys.into_iter().find(|k| k.1).map(|k| k.0)
    }

    /// The destination policy's lists of the plane `alg`.
    pub fn next_hop_lists(&self) -> dstpolicy::Lists {
        dstpolicy::Lists { allow: self.next_hop_allow.clone(), deny: self.next_hop_deny.clone() }
    }

    /// What the ALG's configuration says the gateway is: its listen and
    /// advertised addresses (a standalone ALG's destination policy; the
    /// daemon's knows the other functions' addresses and prefixes too).
    pub fn gateway_spec(&self) -> dstpolicy::Spec {
        let mut own: Vec<IpPrefix> = Vec::new();
        for v6 in [true, false] {
            let listen = if v6 { self.listen_v6.ip() } else { self.listen_v4.ip() };
            for ip in [listen, self.advertised(v6)] {
                if ip.is_unspecified() {
                    continue;
                }
                let len = if ip.is_ipv4() { 32 } else { 128 };
                if let Ok(p) = IpPrefix::truncated(ip, len) {
                    if !own.contains(&p) {
                        own.push(p);
                    }
                }
            }
        }
        dstpolicy::Spec { own, embeddings: Default::default() }
    }

    /// The address written for a realm.
    pub fn advertised(&self, v6: bool) -> IpAddr {
        if v6 {
            self.advertise_v6.unwrap_or(self.listen_v6.ip())
        } else {
            self.advertise_v4.unwrap_or(self.listen_v4.ip())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_parses_and_checks() {
        let mut text = EXAMPLE_TOML.to_string();
        text = text
            .replace("# [[alg.route]]", "[[alg.route]]")
            .replace("# domain = ", "domain = ")
            .replace("# next-hop", "next-hop");
        text = text.replace("# transport = \"udp\"", "transport = \"udp\"");
        let c = Config::from_toml_file_text(&text).unwrap();
        assert_eq!(c.listen_v6, "[2001:db8::1]:5060".parse().unwrap());
        assert_eq!(c.route[0].next_hop, "192.0.2.10:5060".parse().unwrap());
        assert_eq!(c.media_v4_interface.as_deref(), Some("v4"));
    }

    #[test]
    fn what_a_reload_may_change() {
        let a = Config::default();
        let mut b = a.clone();
        b.rate_limit = 10;
        b.route.push(Route {
            domain: "x.example".into(),
            next_hop: "192.0.2.9:5060".parse().unwrap(),
            transport: Transport::Udp,
        });
        b.t1 = std::time::Duration::from_millis(100);
        b.contact = ContactMode::Keep;
        b.max_connections = 5;
        assert_eq!(a.restart_needed(&b), None);
        b.listen_v4 = "192.0.2.1:5060".parse().unwrap();
        assert_eq!(a.restart_needed(&b), Some("listen-v4"));
        let mut c = a.clone();
        c.ng.push(NgServer { addr: "127.0.0.1:2223".parse().unwrap(), weight: 1 });
        assert_eq!(a.restart_needed(&c), Some("ng"));
    }

    #[test]
    fn bad_configs_are_refused() {
        for (t, want) in [
            ("[alg]\nlisten-v6 = \"1.2.3.4:5060\"\n", "listen-v6"),
            ("[alg]\nbogus = 1\n", "unknown field"),
            ("[alg]\nmedia = \"ng\"\n", "[[alg.ng]]"),
            ("[alg]\nmax-message = 10\n", "max-message"),
            ("[alg]\nt1 = \"0s\"\n", "t1"),
            ("[alg]\nt1 = \"1.5s\"\n", "t1"),
            ("[alg]\ndialog-timeout = 0\n", "dialog-timeout"),
            ("[alg]\nmax-connections = 0\n", "max-connections"),
            ("[alg]\nclient-prefix-length = 32\n", "client-prefix-length"),
            ("[alg]\nclient-share = 0\n", "client-share"),
            ("[alg]\nclient-share = 101\n", "client-share"),
            ("[alg]\nmax-state-bytes = 1000\n", "max-state-bytes"),
            ("[alg]\nmax-parked-bytes = 1000\n", "max-parked-bytes"),
            ("[alg]\nmax-dns-lookups = 0\n", "max-dns-lookups"),
            ("[alg]\ndns-timeout = \"10ms\"\n", "dns-timeout"),
            ("[alg]\ntcp-idle-timeout = \"0s\"\n", "tcp-idle-timeout"),
            ("[alg]\ntcp-message-timeout = \"1h\"\n", "tcp-message-timeout"),
            ("[alg]\nmax-outbound-connections = 0\n", "max-outbound-connections"),
            ("[x]\n", "no [alg]"),
        ] {
            let e = Config::from_toml_file_text(t).unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
    }
}
