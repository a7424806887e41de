//! The configurations the testbeds and the benches generate for the
//! gateways they start: one typed builder for v6gate ([`V6gate`], rendered
//! as TOML with the daemon's key names) and one for TAYGA ([`Tayga`]), so
//! `v6gate lab run`, `v6gate bench xlat`, `v6gate bench trgw` and the
//! integration tests name every key in one place. The unit tests parse
//! what they render with the daemon's own parser (`gate::config`).
//!
//! Also [`Features`]: what a given v6gate binary offers (`run`, `[nat64]`,
//! `[dns64]`), asked of the binary itself.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result};
use serde::Serialize;

/// A v6gate configuration file. Tables left `None` are not written.
#[derive(Debug, Clone, Default)]
pub struct V6gate {
    /// Comment lines at the top of the file (without `# `).
    pub header: Vec<String>,
    /// `[siit]`.
    pub siit: Option<Siit>,
    /// `[nat64]`.
    pub nat64: Option<Nat64>,
    /// `[dns64]`.
    pub dns64: Option<Dns64>,
    /// `[tun]`.
    pub tun: Option<Tun>,
    /// `[admin]`.
    pub admin: Option<Admin>,
    /// `[trgw]`.
    pub trgw: Option<Trgw>,
    /// `[alg]`.
    pub alg: Option<Alg>,
    /// `[xdp]`.
    pub xdp: Option<Xdp>,
    /// Comment lines written above a table, by table name (`"siit"`, ...).
    pub comments: Vec<(&'static str, String)>,
}

/// `[siit]`: stateless translation (RFC 7915).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Siit {
    /// RFC 6052 translation prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool6: Option<String>,
    /// The translator's own IPv4 address (ICMP errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4_address: Option<Ipv4Addr>,
    /// The translator's own IPv6 address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_address: Option<Ipv6Addr>,
    /// Explicit address mappings (RFC 7757).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub eamt: Vec<Eam>,
}

/// One EAMT entry.
#[derive(Debug, Clone, Serialize)]
pub struct Eam {
    /// IPv6 prefix, e.g. `2001:db8::1/128`.
    pub ipv6: String,
    /// IPv4 prefix of the same size.
    pub ipv4: String,
}

impl Eam {
    /// The entry `ipv6 <-> ipv4` (prefixes in text form).
    pub fn new(ipv6: impl ToString, ipv4: impl ToString) -> Self {
        Eam { ipv6: ipv6.to_string(), ipv4: ipv4.to_string() }
    }
}

/// `[nat64]`: stateful NAT64 (RFC 6146).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Nat64 {
    /// RFC 6052 prefix.
    pub pool6: String,
    /// IPv4 pool prefixes.
    pub pool4: Vec<String>,
    /// Session table limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u64>,
    /// BIB limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bib: Option<u64>,
    /// `"nat64"` (default) or `"natpt"` (NAT-PT pool mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `[dns64]` (RFC 6147).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Dns64 {
    /// Listen addresses (`[addr]:port`).
    pub listen: Vec<String>,
    /// Upstream resolvers.
    pub upstream: Vec<String>,
    /// Synthesis prefix.
    pub prefix: String,
    /// Client prefixes allowed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

/// `[tun]`: the daemon's TUN device.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Tun {
    /// Device name.
    pub name: String,
    /// Queues (one worker each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queues: Option<usize>,
    /// Whether the daemon adds the routes of its prefixes itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_routes: Option<bool>,
    /// Further keys as given (e.g. `bench xlat --v6gate-tun 'io = "poll"'`).
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl Tun {
    /// Adds `key = value` TOML lines to the table; an error names the bad line.
    pub fn with_lines(mut self, lines: &[String]) -> Result<Self> {
        for l in lines {
            let t: toml::Table =
                toml::from_str(l).with_context(|| format!("`{l}` is not a TOML `key = value` line"))?;
            self.extra.extend(t);
        }
        Ok(self)
    }
}

/// `[admin]`: the admin API.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Admin {
    /// `false` turns the API off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Listen address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// `[trgw]`: the media relay.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Trgw {
    /// ng control listen address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ng: Option<String>,
    /// rtpproxy control listen address (UDP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtpproxy_udp: Option<String>,
    /// rtpproxy bridging: the external realm's interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtpproxy_external: Option<String>,
    /// rtpproxy bridging: the internal realm's interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtpproxy_internal: Option<String>,
    /// Lowest media port.
    pub port_min: u16,
    /// Highest media port.
    pub port_max: u16,
    /// Worker threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// `"per-port"` (a socket per media port) or `"shared"` (sk_lookup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets: Option<String>,
    /// Media interfaces.
    pub interface: Vec<TrgwInterface>,
}

/// One `[[trgw.interface]]`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrgwInterface {
    /// Name (the ng `direction` / rtpproxy realm).
    pub name: String,
    /// IPv4 media address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    /// IPv6 media address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
}

/// `[alg]`: the IMS-ALG (SIP/SDP gateway between the realms).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Alg {
    /// SIP listener in the IPv6 realm (`[addr]:port`).
    pub listen_v6: String,
    /// SIP listener in the IPv4 realm.
    pub listen_v4: String,
    /// TCP too (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<bool>,
    /// `in-process` (default), `ng` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<String>,
    /// `[[trgw.interface]]` for the IPv6 realm's media.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_v6_interface: Option<String>,
    /// `[[trgw.interface]]` for the IPv4 realm's media.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_v4_interface: Option<String>,
    /// Requests per second per source (0: off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    /// RFC 3261 T1 (a duration, e.g. `"50ms"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t1: Option<String>,
    /// Most live transactions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_transactions: Option<usize>,
    /// Percent of every ALG budget one client may hold (1-100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_share: Option<u8>,
    /// Bytes of transactions and dialogs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_state_bytes: Option<u64>,
    /// Domain routes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub route: Vec<AlgRoute>,
    /// Remote ng servers (`media = "ng"`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ng: Vec<AlgNg>,
}

/// One `[[alg.route]]`.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct AlgRoute {
    /// The domain (and its subdomains).
    pub domain: String,
    /// Where its requests go (`addr:port`).
    pub next_hop: String,
    /// `udp` (default) or `tcp`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

/// One `[[alg.ng]]`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AlgNg {
    /// The server's ng address.
    pub addr: String,
    /// Relative weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// `[xdp]`: the XDP fast path.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Xdp {
    /// Interfaces the fast path is attached to.
    pub interfaces: Vec<String>,
    /// `native`, `generic` or `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Established NAT64 sessions the fast path carries at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nat64_sessions: Option<u32>,
    /// TrGW media streams the fast path relays at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trgw_streams: Option<u32>,
}

impl V6gate {
    /// Adds a comment above `table` (several lines allowed).
    pub fn comment(mut self, table: &'static str, text: &str) -> Self {
        self.comments.push((table, text.to_owned()));
        self
    }

    /// The file as TOML: the header, then each table with its comment
    /// (keys in the order of the structs' fields).
    pub fn render(&self) -> Result<String> {
        fn one<T: Serialize>(name: &str, t: &Option<T>) -> Result<Option<String>> {
            let Some(t) = t else { return Ok(None) };
            let table = std::collections::BTreeMap::from([(name, t)]);
            Ok(Some(toml::to_string(&table).with_context(|| format!("rendering [{name}]"))?))
        }
        let tables = [
            ("siit", one("siit", &self.siit)?),
            ("nat64", one("nat64", &self.nat64)?),
            ("dns64", one("dns64", &self.dns64)?),
            ("tun", one("tun", &self.tun)?),
            ("admin", one("admin", &self.admin)?),
            ("trgw", one("trgw", &self.trgw)?),
            ("alg", one("alg", &self.alg)?),
            ("xdp", one("xdp", &self.xdp)?),
        ];
        let mut out = String::new();
        for l in &self.header {
            out += &format!("# {l}\n");
        }
        for (name, text) in tables {
            let Some(text) = text else { continue };
            if !out.is_empty() {
                out.push('\n');
            }
            for (_, c) in self.comments.iter().filter(|(t, _)| *t == name) {
                for l in c.lines() {
                    out += if l.is_empty() { "#\n".to_owned() } else { format!("# {l}\n") }.as_str();
                }
            }
            out += &text;
        }
        Ok(out)
    }
}

/// A TAYGA configuration file (`tayga.conf`).
#[derive(Debug, Clone)]
pub struct Tayga {
    /// Comment at the top.
    pub header: Option<String>,
    /// TUN device TAYGA creates (`tun-device`).
    pub tun_device: String,
    /// TAYGA's own IPv4 address (`ipv4-addr`).
    pub ipv4_addr: Ipv4Addr,
    /// RFC 6052 prefix (`prefix`).
    pub prefix: String,
    /// Static mappings (`map IPV4 IPV6`).
    pub maps: Vec<(Ipv4Addr, Ipv6Addr)>,
    /// Dynamic pool (`dynamic-pool`), for TAYGA's stateless NAT64.
    pub dynamic_pool: Option<String>,
}

impl Tayga {
    /// The file's text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Some(h) = &self.header {
            s += &format!("# {h}\n");
        }
        s += &format!("tun-device {}\nipv4-addr {}\nprefix {}\n", self.tun_device, self.ipv4_addr, self.prefix);
        for (v4, v6) in &self.maps {
            s += &format!("map {v4} {v6}\n");
        }
        if let Some(p) = &self.dynamic_pool {
            s += &format!("dynamic-pool {p}\n");
        }
        s
    }
}

/// Whether the v6gate binary at `v6gate` has the subcommand `name` (its
/// `--help` runs and succeeds).
pub fn has_subcommand(v6gate: &Path, name: &str) -> bool {
    Command::new(v6gate)
        .args([name, "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What a v6gate binary offers, asked of the binary itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    /// It has `v6gate run` (the daemon).
    pub run: bool,
    /// Its example configuration shows `[nat64]`.
    pub nat64: bool,
    /// Its example configuration shows `[dns64]`.
    pub dns64: bool,
    /// Its example configuration shows `[alg]`.
    pub alg: bool,
    /// Its example configuration shows `[xdp]` (the XDP fast path).
    pub xdp: bool,
}

impl Features {
    /// Runs `v6gate run --help` and `v6gate config example`.
    pub fn of(v6gate: &Path) -> Features {
        let run = has_subcommand(v6gate, "run");
        let ex = Command::new(v6gate).args(["config", "example"]).output().map(|o| o.stdout).unwrap_or_default();
        Features::from_example(run, &String::from_utf8_lossy(&ex))
    }

    /// From the example configuration's text (the tables show, commented
    /// out or not).
    pub fn from_example(run: bool, example: &str) -> Features {
        let has = |t: &str| example.lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(t));
        Features { run, nat64: has("[nat64]"), dns64: has("[dns64]"), alg: has("[alg]"), xdp: has("[xdp]") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> V6gate {
        V6gate {
            header: vec!["generated".into()],
            siit: Some(Siit {
                pool6: Some("2001:db8:64::/96".into()),
                ipv4_address: Some(Ipv4Addr::new(192, 0, 2, 1)),
                ipv6_address: None,
                eamt: vec![Eam::new("2001:db8:6::2/128", "192.0.2.2/32")],
            }),
            nat64: Some(Nat64 {
                pool6: "2001:db8:64::/96".into(),
                pool4: vec!["203.0.113.0/28".into()],
                max_sessions: Some(1000),
                max_bib: None,
                mode: Some("natpt".into()),
            }),
            tun: Some(Tun { name: "xlat0".into(), queues: Some(2), ..Default::default() }),
            admin: Some(Admin { enabled: Some(false), listen: None }),
            ..Default::default()
        }
        .comment("siit", "stateless\n\nsecond paragraph")
    }

    #[test]
    fn renders_tables_in_order_with_comments() {
        let s = full().render().unwrap();
        assert!(s.starts_with("# generated\n\n# stateless\n#\n# second paragraph\n[siit]\n"), "{s}");
        let (siit, nat64, tun) = (s.find("[siit]").unwrap(), s.find("[nat64]").unwrap(), s.find("[tun]").unwrap());
        assert!(siit < nat64 && nat64 < tun, "{s}");
        assert!(s.contains("ipv4-address = \"192.0.2.1\"") && s.contains("max-sessions = 1000"), "{s}");
        assert!(!s.contains("max-bib") && !s.contains("[dns64]") && !s.contains("[trgw]"), "{s}");
    }

    #[test]
    fn the_daemon_parses_what_is_rendered() {
        let mut c = full();
        c.tun = Some(c.tun.unwrap().with_lines(&["io = \"poll\"".into()]).unwrap());
        let text = c.render().unwrap();
        assert!(text.contains("io = \"poll\""), "{text}");
        gate::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let trgw = V6gate {
            trgw: Some(Trgw {
                ng: Some("127.0.0.1:2223".into()),
                port_min: 20000,
                port_max: 20999,
                workers: Some(1),
                sockets: Some("shared".into()),
                interface: vec![TrgwInterface {
                    name: "pub".into(),
                    ipv4: Some(Ipv4Addr::new(10, 0, 4, 1)),
                    ipv6: Some("2001:db8:6::1".parse().unwrap()),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = trgw.render().unwrap();
        assert!(text.contains("[[trgw.interface]]") && text.contains("port-min = 20000"), "{text}");
        assert!(text.contains("sockets = \"shared\""), "{text}");
        gate::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let alg = V6gate {
            alg: Some(Alg {
                listen_v6: "[2001:db8:6::1]:5060".into(),
                listen_v4: "10.0.4.1:5060".into(),
                media_v6_interface: Some("pub".into()),
                media_v4_interface: Some("pub".into()),
                t1: Some("50ms".into()),
                route: vec![AlgRoute { domain: "ipv4.test".into(), next_hop: "10.0.4.2:5060".into(), transport: None }],
                ..Default::default()
            }),
            ..trgw
        };
        let text = alg.render().unwrap();
        assert!(text.contains("[alg]") && text.contains("[[alg.route]]") && text.contains("next-hop = "), "{text}");
        let c = gate::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        c.check().unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c.alg.unwrap().t1, std::time::Duration::from_millis(50));
        let xdp = V6gate {
            xdp: Some(Xdp {
                interfaces: vec!["d6".into(), "d4".into()],
                mode: Some("native".into()),
                nat64_sessions: Some(65536),
                trgw_streams: None,
            }),
            ..alg
        };
        let text = xdp.render().unwrap();
        let c = gate::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let x = c.xdp.unwrap_or_else(|| panic!("no [xdp] in\n{text}"));
        assert_eq!((x.interfaces, x.nat64_sessions), (vec!["d6".to_string(), "d4".to_string()], 65536), "{text}");
        assert!(text.find("[trgw]").unwrap() < text.find("[xdp]").unwrap() && !text.contains("trgw-streams"), "{text}");
    }

    #[test]
    fn bad_extra_tun_lines_are_named() {
        let e = Tun::default().with_lines(&["io = ".into()]).unwrap_err();
        assert!(format!("{e:#}").contains("`io = `"), "{e:#}");
    }

    #[test]
    fn tayga_lines() {
        let t = Tayga {
            header: Some("h".into()),
            tun_device: "nat64".into(),
            ipv4_addr: Ipv4Addr::new(192, 0, 2, 1),
            prefix: "2001:db8:64::/96".into(),
            maps: vec![(Ipv4Addr::new(192, 0, 2, 2), "2001:db8:6::2".parse().unwrap())],
            dynamic_pool: Some("203.0.113.0/28".into()),
        };
        assert_eq!(
            t.render(),
            "# h\ntun-device nat64\nipv4-addr 192.0.2.1\nprefix 2001:db8:64::/96\nmap 192.0.2.2 2001:db8:6::2\n\
             dynamic-pool 203.0.113.0/28\n"
        );
    }

    #[test]
    fn features_from_the_example() {
        let f = Features::from_example(true, "[siit]\n# [nat64]\n#pool6 = 1\n# [alg]\n");
        assert_eq!(f, Features { run: true, nat64: true, dns64: false, alg: true, xdp: false });
        assert!(Features::from_example(true, "# [xdp]\n").xdp);
    }
}
