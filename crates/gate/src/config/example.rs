//! `v6gate config example`: the complete commented configuration, built
//! from the `[siit]` and daemon tables in `example.toml` and each function
//! crate's own example, commented out.

/// A complete, commented example configuration: every key with its default
/// and a one-line explanation. It parses (and is tested to).
pub fn example() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = include_str!("example.toml").to_string();
        s.push_str("\n# The tables below are commented out: uncomment and adapt the ones you run.\n\n");
        s.push_str("# ---------------------------------------------------------------------------\n");
        s.push_str(&commented(nat64::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(&commented(dns64::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(&commented(trgw::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(&commented(alg::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(TUNNELS_HEADER);
        s.push('\n');
        s.push_str(&commented(tunnel::config::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(SOFTWIRES_HEADER);
        s.push('\n');
        s.push_str(&commented(softwire::config::EXAMPLE_TOML));
        s.push('\n');
        s.push_str(&commented(trt::config::EXAMPLE_TOML));
        s
    })
}

/// The line in front of the softwire and TRT tables of the example.
const SOFTWIRES_HEADER: &str =
    "# --- Softwires (docs/softwire.md) and the transport relay (docs/trt.md): each on its own TUN device or sockets.";

/// The line in front of the tunnel tables of the example.
pub(crate) const TUNNELS_HEADER: &str =
    "# --- Tunnels (docs/tunnels.md): each on its own TUN device; a [teredo.relay] and a [teredo.client] do not share a node (both route 2001::/32).";

/// `text` with every line that is not already a comment commented out.
fn commented(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    for l in text.lines() {
        if l.is_empty() || l.starts_with('#') {
            out.push_str(l);
        } else {
            out.push_str("# ");
            out.push_str(l);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        AdminConfig, Config, DaemonConfig, TunConfig, ADMIN_KEYS, ALG_KEYS, DAEMON_KEYS, SIIT_KEYS, TUN_KEYS,
    };
    use xlat::siit;

    #[test]
    fn example_parses_and_mentions_every_key() {
        let c = Config::parse(example()).unwrap_or_else(|e| panic!("example does not parse: {e}"));
        c.check().unwrap_or_else(|e| panic!("example is not a valid configuration: {e}"));
        let s = c.siit.expect("example has [siit]");
        // The example states the defaults.
        let d = siit::Config::default();
        assert_eq!(s.eam_hairpin_mode, d.eam_hairpin_mode);
        assert_eq!(s.amend_udp_checksum_zero, d.amend_udp_checksum_zero);
        assert_eq!(s.refragment_ipv6_fragments, d.refragment_ipv6_fragments);
        assert_eq!(s.lowest_ipv6_mtu, d.lowest_ipv6_mtu);
        assert_eq!(s.mtu_plateaus, d.mtu_plateaus);
        assert_eq!(s.ipv4_address, d.ipv4_address);
        assert_eq!((s.ipv4_mtu, s.ipv6_mtu), (d.ipv4_mtu, d.ipv6_mtu));
        for k in SIIT_KEYS {
            assert!(example().lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{k} ="))), "{k}");
        }
    }

    #[test]
    fn example_has_the_alg_table_and_every_key() {
        let text = example();
        assert!(text.contains("\n# [alg]\n"), "the [alg] table is in the example, commented out");
        for k in ALG_KEYS {
            let key = |l: &str| l.trim_start_matches(['#', ' ']).starts_with(&format!("{k} ="));
            let table = |l: &str| l.trim_start_matches(['#', ' ']) == format!("[[alg.{k}]]");
            assert!(text.lines().any(|l| key(l) || table(l)), "{k}");
        }
        // Uncommented, [alg] with the [trgw] above it is a valid configuration.
        let alg = alg::EXAMPLE_TOML.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
        let c = Config::parse(&format!("{}\n{alg}\n", trgw::EXAMPLE_TOML)).unwrap();
        c.check().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.alg.unwrap(), alg::Config::from_toml_file_text(alg::EXAMPLE_TOML).unwrap());
    }

    #[test]
    fn example_has_the_daemon_tables() {
        let c = Config::parse(example()).unwrap();
        assert_eq!(c.tun, TunConfig::default());
        assert_eq!(c.admin, AdminConfig::default());
        assert_eq!(c.daemon, DaemonConfig::default());
        for k in TUN_KEYS.iter().chain(ADMIN_KEYS).chain(DAEMON_KEYS) {
            assert!(example().lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{k} ="))), "{k}");
        }
    }

    #[test]
    fn example_has_the_xdp_table_commented_out() {
        assert!(Config::parse(example()).unwrap().xdp.is_none(), "no fast path unless asked for");
        let block: String = example()
            .lines()
            .skip_while(|l| *l != "# [xdp]")
            .take_while(|l| !l.starts_with("# The tables below"))
            .map(|l| l.trim_start_matches("# "))
            .filter(|l| {
                *l == "[xdp]"
                    || l.split_once(" = ").is_some_and(|(k, _)| {
                        k.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    })
            })
            .map(|l| format!("{l}\n"))
            .collect();
        for k in crate::config::XDP_KEYS {
            assert!(block.contains(&format!("{k} =")), "{k} missing from the [xdp] example: {block}");
        }
        let c = Config::parse(&format!("[siit]\npool6 = \"64:ff9b::/96\"\n{block}")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.xdp.unwrap(),
            crate::config::XdpConfig { interfaces: vec!["eth0".into(), "eth1".into()], ..Default::default() }
        );
    }
}
