//! `[xdp]`: the XDP fast path of `v6gate run` (crate `xdp`, docs/xdp.md).
//!
//! ```toml
//! [xdp]
//! interfaces = ["eth0", "eth1"]   # attach the fast path here
//! mode = "native"                 # native | generic | off
//! egress = []                     # further interfaces it may forward out of
//! eamt-entries = 4096             # size of each EAMT trie
//! nat64-sessions = 16384          # NAT64 sessions mirrored at most
//! trgw-streams = 4096             # TrGW media streams mirrored at most
//! fib-cache-ms = 0                # reuse FIB answers this long (0: never)
//! mirror-routes = true            # keep the kernel's routes and next hops in the maps
//! routes = 4096                   # routes mirrored at most, each family
//! ```
//!
//! The daemon mirrors the `[siit]` configuration (pool6, EAMT, MTUs and
//! TOS settings) into the fast path's maps; packets the fast path does not
//! handle go up the kernel's stack to the TUN device as before.

use serde::Deserialize;
use toml::Spanned;

use super::daemon::ranged;
use super::{invalid, Error, ErrorKind};

/// Every key of the `[xdp]` table.
pub const XDP_KEYS: &[&str] = &[
    "interfaces",
    "mode",
    "egress",
    "eamt-entries",
    "nat64-sessions",
    "trgw-streams",
    "fib-cache-ms",
    "mirror-routes",
    "routes",
];

/// Largest `routes` accepted (each family's LPM trie).
pub const MAX_ROUTES: u32 = 1 << 20;

/// Next hops the route mirror may use (the map holds one more: id 0, the
/// empty one, which sends a destination to `bpf_fib_lookup`).
pub const NEXTHOPS: u32 = 256;

/// Largest `nat64-sessions` accepted (two map entries each).
pub const MAX_NAT64_SESSIONS: u32 = 1 << 22;

/// Largest `trgw-streams` accepted (four relay entries and counter slots each).
pub const MAX_TRGW_STREAMS: u32 = 1 << 20;

/// Largest `eamt-entries` accepted (each entry sits in two LPM tries).
pub const MAX_EAMT_ENTRIES: u32 = 1 << 20;

/// Largest number of interfaces (`interfaces` and `egress` together): the
/// size of the fast path's redirect map.
pub const MAX_XDP_INTERFACES: usize = 64;

/// `[xdp]`: where and how the fast path runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// `interfaces`: attach the fast path to these interfaces (the
    /// gateway's real interfaces, where translated traffic arrives).
    pub interfaces: Vec<String>,
    /// `mode`: `native` (in the driver; falls back to generic with a
    /// warning where the driver cannot), `generic` or `off`. Default native.
    pub mode: xdp::Mode,
    /// `egress`: further interfaces the fast path may forward out of
    /// (every attached interface may be used already).
    pub egress: Vec<String>,
    /// `eamt-entries`: entries of each EAMT trie (the `[siit] eamt` must
    /// fit). Default 4096.
    pub eamt_entries: u32,
    /// `nat64-sessions`: established NAT64 sessions the fast path carries
    /// at most (two map entries each); sessions beyond stay on the slow
    /// path, counted. Default 16384.
    pub nat64_sessions: u32,
    /// `trgw-streams`: TrGW media streams the fast path relays at most:
    /// streams whose id is beyond stay on the slow path, counted (four
    /// relay entries and counter slots each). Default 4096.
    pub trgw_streams: u32,
    /// `fib-cache-ms`: reuse a FIB lookup's answer this many milliseconds
    /// (0..=60000; 0, the default, looks up every packet).
    pub fib_cache_ms: u32,
    /// `mirror-routes`: keep the kernel's routes and resolved next hops
    /// for the egress interfaces in the fast path's maps (one trie lookup
    /// per packet instead of `bpf_fib_lookup`), resynced every second.
    /// Default true.
    pub mirror_routes: bool,
    /// `routes`: routes mirrored at most, each family; a family with more
    /// is left to `bpf_fib_lookup`, counted. Default 4096.
    pub routes: u32,
    /// `nat64-port-block`: NAT64 (NAPT) mode, ports per block of the
    /// per-host TCP port blocks from which the fast path creates a host's
    /// TCP sessions at its SYN (1..=256; 0: off, every SYN takes the slow
    /// path). Default 256.
    pub nat64_port_block: u16,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            interfaces: Vec::new(),
            mode: xdp::Mode::Native,
            egress: Vec::new(),
            eamt_entries: xdp::Limits::default().eamt,
            nat64_sessions: 16_384,
            trgw_streams: 4096,
            fib_cache_ms: 0,
            mirror_routes: true,
            routes: 4096,
            nat64_port_block: 256,
        }
    }
}

impl XdpConfig {
    /// The fast path's map sizes (without `mirror-routes`, the route and
    /// next-hop maps get one entry each).
    pub fn limits(&self) -> xdp::Limits {
        xdp::Limits {
            eamt: self.eamt_entries,
            nat64_sessions: self.nat64_sessions.saturating_mul(2),
            trgw_relays: self.trgw_streams.saturating_mul(4),
            trgw_stats: self.trgw_streams.saturating_mul(4),
            tx_ports: MAX_XDP_INTERFACES as u32,
            routes: if self.mirror_routes { self.routes } else { 1 },
            nexthops: if self.mirror_routes { NEXTHOPS + 1 } else { 1 },
            ..xdp::Limits::default()
        }
    }

    /// Whether anything is to be attached.
    pub fn active(&self) -> bool {
        self.mode != xdp::Mode::Off && !self.interfaces.is_empty()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a table")]
pub(super) struct XdpToml {
    interfaces: Option<Vec<Spanned<String>>>,
    mode: Option<Spanned<String>>,
    egress: Option<Vec<Spanned<String>>>,
    eamt_entries: Option<u32>,
    nat64_sessions: Option<u32>,
    trgw_streams: Option<u32>,
    fib_cache_ms: Option<u32>,
    mirror_routes: Option<bool>,
    routes: Option<u32>,
    nat64_port_block: Option<u16>,
}

fn ifname(text: &str, key: &str, v: &Spanned<String>) -> Result<String, Error> {
    let s = v.get_ref();
    if s.is_empty() || s.len() > 15 || s.contains(['/', '%']) || s.chars().any(|c| c.is_whitespace()) {
        return Err(invalid(text, key, v.span(), format!("`{s}` is not an interface name (1-15 bytes)")));
    }
    Ok(s.clone())
}

pub(super) fn xdp_from_toml(text: &str, t: XdpToml) -> Result<XdpConfig, Error> {
    let mut c = XdpConfig::default();
    if let Some(m) = &t.mode {
        c.mode = m.get_ref().parse().map_err(|_| {
            invalid(
                text,
                "[xdp] mode",
                m.span(),
                format!("`{}` is not \"native\", \"generic\" or \"off\"", m.get_ref()),
            )
        })?;
    }
    let mut seen = Vec::new();
    for (what, list, out) in [("interfaces", &t.interfaces, &mut c.interfaces), ("egress", &t.egress, &mut c.egress)] {
        for (i, v) in list.iter().flatten().enumerate() {
            let key = format!("[xdp] {what}[{i}]");
            let n = ifname(text, &key, v)?;
            if seen.contains(&n) {
                return Err(invalid(text, &key, v.span(), format!("`{n}` is named twice")));
            }
            seen.push(n.clone());
            out.push(n);
        }
    }
    if seen.len() > MAX_XDP_INTERFACES {
        return Err(Error::new(
            ErrorKind::Invalid,
            Some("[xdp] interfaces".into()),
            format!("{} interfaces with egress: at most {MAX_XDP_INTERFACES}", seen.len()),
        ));
    }
    if c.mode != xdp::Mode::Off && c.interfaces.is_empty() {
        return Err(Error::new(
            ErrorKind::Invalid,
            Some("[xdp] interfaces".into()),
            "name at least one interface to attach to (or set mode = \"off\")",
        ));
    }
    if let Some(n) = t.eamt_entries {
        c.eamt_entries = ranged("[xdp] eamt-entries", n, 1, MAX_EAMT_ENTRIES)?;
    }
    if let Some(n) = t.nat64_sessions {
        c.nat64_sessions = ranged("[xdp] nat64-sessions", n, 1, MAX_NAT64_SESSIONS)?;
    }
    if let Some(n) = t.trgw_streams {
        c.trgw_streams = ranged("[xdp] trgw-streams", n, 1, MAX_TRGW_STREAMS)?;
    }
    if let Some(ms) = t.fib_cache_ms {
        c.fib_cache_ms = ranged("[xdp] fib-cache-ms", ms, 0, 60_000)?;
    }
    if let Some(b) = t.mirror_routes {
        c.mirror_routes = b;
    }
    if let Some(n) = t.routes {
        c.routes = ranged("[xdp] routes", n, 1, MAX_ROUTES)?;
    }
    if let Some(n) = t.nat64_port_block {
        c.nat64_port_block = ranged("[xdp] nat64-port-block", n, 0, nat64::MAX_BLOCK_PORTS)?;
    }
    Ok(c)
}

/// What `[xdp]` needs of the rest of the file: the EAMT fits its trie.
pub(super) fn check(x: &XdpConfig, siit: Option<&xlat::siit::Config>) -> Result<(), Error> {
    let n = siit.map_or(0, |s| s.eamt.len());
    if n > x.eamt_entries as usize {
        return Err(Error::new(
            ErrorKind::Invalid,
            Some("[xdp] eamt-entries".into()),
            format!("the [siit] EAMT has {n} entries, more than eamt-entries = {}", x.eamt_entries),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::tests::assert_names;
    use crate::config::Config;

    const SIIT: &str = "[siit]\npool6 = \"64:ff9b:1::/96\"\neamt = [[\"2001:db8::/127\", \"192.0.2.0/31\"]]\n";

    #[test]
    fn xdp_table_defaults_and_parse() {
        let c = Config::parse(SIIT).unwrap();
        assert!(c.xdp.is_none());
        let c = Config::parse(&format!(
            "{SIIT}[xdp]\ninterfaces = [\"eth0\", \"eth1\"]\nmode = \"generic\"\negress = [\"eth2\"]\neamt-entries = 8\nnat64-sessions = 3\ntrgw-streams = 2\nfib-cache-ms = 50\n"
        ))
        .unwrap();
        c.check().unwrap();
        let x = c.xdp.unwrap();
        assert_eq!(x.interfaces, ["eth0", "eth1"]);
        assert_eq!((x.mode, x.egress.as_slice()), (xdp::Mode::Generic, &["eth2".to_string()][..]));
        assert_eq!((x.eamt_entries, x.fib_cache_ms), (8, 50));
        assert!(x.active());
        assert_eq!((x.limits().eamt, x.limits().nat64_sessions), (8, 6));
        assert_eq!((x.limits().trgw_relays, x.limits().trgw_stats), (8, 8));
        assert!(x.mirror_routes, "on by default");
        assert_eq!(x.nat64_port_block, 256, "on by default");
        let c = Config::parse(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nnat64-port-block = 0\n")).unwrap();
        assert_eq!(c.xdp.unwrap().nat64_port_block, 0, "0: off");
        assert_eq!((x.limits().routes, x.limits().nexthops), (4096, 257));
        let c =
            Config::parse(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nmirror-routes = false\nroutes = 9\n")).unwrap();
        let x = c.xdp.unwrap();
        assert!(!x.mirror_routes);
        assert_eq!((x.limits().routes, x.limits().nexthops), (1, 1), "off: one entry each");
        let c = Config::parse(&format!("{SIIT}[xdp]\ninterfaces = [\"eth0\"]\n")).unwrap();
        assert_eq!(c.xdp.as_ref().unwrap().mode, xdp::Mode::Native);
        let c = Config::parse(&format!("{SIIT}[xdp]\nmode = \"off\"\n")).unwrap();
        assert!(!c.xdp.unwrap().active());
    }

    #[test]
    fn xdp_table_errors_are_named() {
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"eth0\"]\nmode = \"fast\"\n"), "[xdp] mode");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = []\n"), "[xdp] interfaces");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"a-very-long-name-x\"]\n"), "[xdp] interfaces[0]");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\negress = [\"e\"]\n"), "[xdp] egress[0]");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\neamt-entries = 0\n"), "[xdp] eamt-entries");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nfib-cache-ms = 60001\n"), "[xdp] fib-cache-ms");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nnat64-sessions = 0\n"), "[xdp] nat64-sessions");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\ntrgw-streams = 0\n"), "[xdp] trgw-streams");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nqueues = 1\n"), "[xdp] queues");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nroutes = 0\n"), "[xdp] routes");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nnat64-port-block = 257\n"), "[xdp] nat64-port-block");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nnat64-port-block = -1\n"), "[xdp] nat64-port-block");
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [\"e\"]\nmirror-routes = 1\n"), "[xdp] mirror-routes");
        let many: Vec<String> = (0..65).map(|i| format!("\"e{i}\"")).collect();
        assert_names(&format!("{SIIT}[xdp]\ninterfaces = [{}]\n", many.join(",")), "[xdp] interfaces");
        // The EAMT must fit the trie.
        let two = SIIT.replace("]]\n", "], [\"2001:db8:1::/128\", \"192.0.2.9\"]]\n");
        let e = assert_names(&format!("{two}[xdp]\ninterfaces = [\"e\"]\neamt-entries = 1\n"), "[xdp] eamt-entries");
        assert!(e.to_string().contains("2 entries"), "{e}");
        Config::parse(&format!("{two}[xdp]\ninterfaces = [\"e\"]\neamt-entries = 2\n")).unwrap().check().unwrap();
    }
}
