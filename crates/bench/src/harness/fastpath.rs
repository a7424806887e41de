//! The XDP fast path of a v6gate DUT as the benches read it: `v6gate ctl
//! xdp` in the DUT's namespace, and its counters summed up (packets the
//! fast path handled, passes to the slow path by reason), so a report
//! shows which path carried a row's traffic.

use anyhow::{Context as _, Result};
use lab::netns::Netns;
use serde::Serialize;

/// The counters (`v6gate ctl xdp`, `counters`) of what the fast path
/// handles itself; every other counter is a pass to the slow path.
const FAST: [&str; 5] = ["siit-6to4", "siit-4to6", "nat64-6to4", "nat64-4to6", "trgw"];

/// `v6gate ctl --admin ADMIN xdp` in `ns`, parsed.
pub fn ctl_xdp(ns: &Netns, v6gate: &str, admin: &str) -> Result<serde_json::Value> {
    let out = ns.exec(v6gate, &["ctl", "--admin", admin, "xdp"])?;
    serde_json::from_slice(&out.stdout).context("`v6gate ctl xdp` printed no JSON")
}

/// Packets of one fast-path function against the passes to the slow path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FastPath {
    /// The counter read (`siit-6to4`, ..., `trgw`).
    pub function: String,
    /// Its packets.
    pub packets: u64,
    /// Packets passed to the slow path, every reason.
    pub passed: u64,
    /// The passes by reason (non-zero ones).
    pub passes: Vec<(String, u64)>,
}

impl FastPath {
    /// From `ctl xdp`'s `counters` object, for `function`.
    pub fn of(counters: &serde_json::Value, function: &str) -> FastPath {
        let packets = |c: &serde_json::Value| c["packets"].as_u64().unwrap_or(0);
        let passes: Vec<(String, u64)> = counters
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(label, c)| packets(c) > 0 && !FAST.contains(&label.as_str()))
            .map(|(label, c)| (label.clone(), packets(c)))
            .collect();
        FastPath {
            function: function.to_owned(),
            packets: packets(&counters[function]),
            passed: passes.iter().map(|p| p.1).sum(),
            passes,
        }
    }
}

impl std::fmt::Display for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} packets on the fast path ({}), {} passed to the slow path",
            self.packets, self.function, self.passed
        )?;
        if !self.passes.is_empty() {
            let why: Vec<String> = self.passes.iter().map(|(l, n)| format!("{l} {n}")).collect();
            write!(f, " ({})", why.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_function_and_the_passes() {
        let c = serde_json::json!({
            "nat64-6to4": { "packets": 1000, "bytes": 84000 },
            "nat64-4to6": { "packets": 7, "bytes": 1 },
            "no-match": { "packets": 3, "bytes": 1 },
            "udp-checksum": { "packets": 2, "bytes": 1 },
            "ttl": { "packets": 0, "bytes": 0 },
        });
        let f = FastPath::of(&c, "nat64-6to4");
        assert_eq!((f.packets, f.passed), (1000, 5));
        assert_eq!(
            f.to_string(),
            "1000 packets on the fast path (nat64-6to4), 5 passed to the slow path (no-match 3, udp-checksum 2)"
        );
        let none = FastPath::of(&serde_json::json!({}), "trgw");
        assert_eq!(none.to_string(), "0 packets on the fast path (trgw), 0 passed to the slow path");
    }
}
