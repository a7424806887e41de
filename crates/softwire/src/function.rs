//! The softwires as a v6gate function ([`function::Function`]): how
//! `v6gate run` and `v6gate softwire` run them, report them and stop
//! them.

use function::metrics::label;
use function::{Family, Function, Reload, ReloadError};

use crate::config::SoftwireConfig;
use crate::run::Softwires;

/// What only a restart applies: everything but what the lwAFTR
/// re-reads on reload (`run::reload_lw4o6`).
fn restart_part(c: &SoftwireConfig) -> SoftwireConfig {
    let mut c = c.clone();
    if let Some(l) = &mut c.lw4o6 {
        l.binding_file = None;
        l.psid_offset = 0;
        if let Some(d) = &mut l.dstm {
            d.lease = crate::lease::LeaseConfig::new(Vec::new(), std::net::Ipv6Addr::UNSPECIFIED);
        }
    }
    c
}

impl Function for Softwires {
    type Config = SoftwireConfig;
    type Status = serde_json::Value;

    fn status_key(&self) -> &'static str {
        "softwires"
    }

    fn names(&self) -> Vec<&'static str> {
        self.names.clone()
    }

    fn plan_reload(&self, cur: &SoftwireConfig, new: &SoftwireConfig) -> Reload {
        // Devices, NAT44 mappings, leases and relayed connections belong
        // to the running functions; the lwAFTR re-reads its bindings
        // (`binding-file`, `psid-offset`) and its DSTM lease settings.
        Reload::unless_changed(&restart_part(cur), &restart_part(new), "[dslite], [lw4o6] or [b4]")
    }

    fn reload(&mut self, _new: &SoftwireConfig) -> Result<(), ReloadError> {
        // The lwAFTR re-reads its binding file (leases kept).
        Softwires::reload(self);
        Ok(())
    }

    fn status(&self) -> serde_json::Value {
        Softwires::status(self)
    }

    fn metrics(&self) -> Vec<Family> {
        families(&Softwires::status(self))
    }

    fn fast_path(&self) -> function::FastPath {
        let status = Softwires::status(self);
        // A function's kernel program is loaded when its status has it.
        let on = |f: &str, k: &str| status.get(f).and_then(|s| s.get(k)).is_some_and(|v| !v.is_null());
        let mut mirrors = Vec::new();
        if on("dslite", "xdp") {
            mirrors.push(function::Mirror {
                maps: &["ds_out", "ds_in", "ds_pool", "ds_b4", "ds_blocks"],
                what: "DS-Lite AFTR NAT44 mappings, its pool4, the B4s and their port blocks",
                program: "softwire.bpf.c",
            });
        }
        if on("lw4o6", "xdp") {
            mirrors.push(function::Mirror {
                maps: &["sw_config", "sw_b4", "sw_v4", "sw_addr"],
                what: "lwAFTR bindings (by B4 and by IPv4 address) and DSTM leases",
                program: "softwire.bpf.c",
            });
        }
        if on("b4", "kernel") {
            mirrors.push(function::Mirror {
                maps: &["b4_config"],
                what: "the B4's tunnel end-points",
                program: "b4.bpf.c",
            });
        }
        function::FastPath { mirrors }
    }

    fn stop(self) -> Option<String> {
        Softwires::stop(self);
        None
    }
}

/// `v6gate_softwire_*` from the softwires' status (`softwire::run::Softwires::status`):
/// per function, its drops by reason, its other packet counters and its
/// table sizes (`mappings`, `bindings`, `leases`, ...; `*_created` and
/// `*_expired` are counters).
pub fn families(status: &serde_json::Value) -> Vec<Family> {
    let mut up = Family::gauge("v6gate_softwire_up", "Softwire functions running (1 each), by function.");
    let mut drops = Family::counter(
        "v6gate_softwire_dropped_packets",
        "Packets a softwire function dropped, by function and reason (docs/softwire.md).",
    );
    let mut events = Family::counter(
        "v6gate_softwire_events",
        "Softwire packet counters other than drops (in, decapsulated, encapsulated, ICMP sent, ...) and table entries created or expired, by function and event.",
    );
    let mut tables = Family::gauge(
        "v6gate_softwire_table_entries",
        "Entries in a softwire function's tables now, by function and table.",
    );
    let mut io = Family::counter("v6gate_softwire_io_errors", "Device errors of a softwire function, by function.");
    let mut fast = Family::counter(
        "v6gate_softwire_fast_path_packets",
        "Packets a softwire function's kernel fast path (path xdp: the lwAFTR's or AFTR's XDP program; kernel: the B4's tc/XDP programs) forwarded, by function, path and counter (docs/softwire.md).",
    );
    let mut passes = Family::counter(
        "v6gate_softwire_fast_path_passes",
        "Packets a softwire function's kernel fast path passed to its engine, by function, path and reason (docs/softwire.md).",
    );
    let mut attached = Family::gauge(
        "v6gate_softwire_fast_path_attached",
        "Softwire fast path attachments (1 each), by function, path and interface.",
    );
    let mut blocks = Family::gauge(
        "v6gate_softwire_port_blocks",
        "DS-Lite AFTR XDP port blocks (`[dslite.xdp] port-block`): blocks held by B4s now, by function.",
    );
    let mut block_events = Family::counter(
        "v6gate_softwire_port_block_events",
        "DS-Lite AFTR XDP port blocks and the mappings and FINs XDP made with them, by function and event (granted, returned, created, conflicts, fins, fins-stale).",
    );
    let mut dstm = Family::counter(
        "v6gate_softwire_dstm_messages",
        "DSTM lease server: messages and lease events (received, malformed, granted, renewed, released, expired, file-writes, file-errors), by function and event (docs/softwire.md).",
    );
    let mut dstm_refused = Family::counter(
        "v6gate_softwire_dstm_refusals",
        "DSTM lease server NAKs by function and reason: exhausted, no-lease, refused (source outside clients), rate-limited, client-rate-limited, share-exceeded (docs/softwire.md).",
    );
    for (func, st) in status.as_object().into_iter().flatten() {
        let f = || ("function", func.clone());
        for path in ["xdp", "kernel"] {
            let Some(fp) = st.get(path).and_then(|p| p.as_object()) else { continue };
            let l = |k: &'static str, x: String| vec![f(), ("path", path.to_string()), (k, x)];
            for (c, n) in fp.get("counters").and_then(|c| c.as_object()).into_iter().flatten() {
                let x = n.as_f64().unwrap_or(0.0);
                match c.strip_prefix("pass-") {
                    Some(r) => passes = passes.with(l("reason", r.to_string()), x),
                    None => fast = fast.with(l("counter", c.clone()), x),
                }
            }
            let ifaces = fp.get("attached").or_else(|| fp.get("uplinks")).and_then(|a| a.as_array());
            for a in ifaces.into_iter().flatten() {
                if let Some(i) = a.get("iface").and_then(|i| i.as_str()) {
                    attached = attached.with(l("interface", i.to_string()), 1);
                }
            }
            // What the program's maps mirror now (`xdp-sessions`, `xdp-bindings`).
            for t in ["sessions", "bindings"] {
                if let Some(x) = fp.get(t).and_then(|n| n.as_f64()) {
                    tables = tables.with(vec![f(), ("table", format!("{path}-{t}"))], x);
                }
            }
            if let Some(x) = fp.get("refused_full").and_then(|n| n.as_f64()) {
                events = events.with(vec![f(), ("event", format!("{path}-map-full"))], x);
            }
            if let Some(b) = fp.get("port_blocks").and_then(|b| b.as_object()) {
                blocks = blocks.with(vec![f()], b.get("held").and_then(|n| n.as_f64()).unwrap_or(0.0));
                for e in ["granted", "returned", "created", "conflicts", "fins", "fins_stale"] {
                    let x = b.get(e).and_then(|n| n.as_f64()).unwrap_or(0.0);
                    block_events = block_events.with(vec![f(), ("event", label(e))], x);
                }
            }
        }
        if let Some(d) = st.get("dstm").and_then(|d| d.as_object()) {
            const NAKS: [&str; 6] =
                ["exhausted", "no_lease", "refused", "rate_limited", "client_rate_limited", "share_exceeded"];
            for (k, n) in d.get("stats").and_then(|s| s.as_object()).into_iter().flatten() {
                let x = n.as_f64().unwrap_or(0.0);
                if NAKS.contains(&k.as_str()) {
                    dstm_refused = dstm_refused.with(vec![f(), ("reason", label(k))], x);
                } else {
                    dstm = dstm.with(vec![f(), ("event", label(k))], x);
                }
            }
            if let Some(x) = d.get("free").and_then(|n| n.as_f64()) {
                tables = tables.with(vec![f(), ("table", "dstm-free".to_string())], x);
            }
        }
        up = up.with(vec![f()], 1);
        for (k, n) in st.as_object().into_iter().flatten() {
            match (k.as_str(), n) {
                ("counters", serde_json::Value::Object(c)) => {
                    for (ck, cn) in c {
                        if ck == "drops" {
                            for (r, dn) in cn.as_object().into_iter().flatten() {
                                drops = drops.with(vec![f(), ("reason", r.clone())], dn.as_f64().unwrap_or(0.0));
                            }
                        } else if let Some(x) = cn.as_f64() {
                            events = events.with(vec![f(), ("event", label(ck))], x);
                        }
                    }
                }
                ("io_errors", n) => io = io.with(vec![f()], n.as_f64().unwrap_or(0.0)),
                (k, n) if n.is_number() => {
                    let x = n.as_f64().unwrap_or(0.0);
                    if k.ends_with("_created") || k.ends_with("_expired") {
                        events = events.with(vec![f(), ("event", label(k))], x);
                    } else {
                        tables = tables.with(vec![f(), ("table", label(k))], x);
                    }
                }
                _ => {}
            }
        }
    }
    vec![up, drops, events, tables, io, fast, passes, attached, blocks, block_events, dstm, dstm_refused]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> SoftwireConfig {
        SoftwireConfig::parse(t).unwrap_or_else(|e| panic!("{t}: {e}"))
    }

    #[test]
    fn a_reload_applies_what_the_lwaftr_rereads_and_refuses_the_rest() {
        let base =
            "[lw4o6]\naftr-address = \"2001:db8::1\"\nbinding-file = \"/a\"\n[lw4o6.dstm]\npool = [\"192.0.2.0/29\"]\n";
        let cur = parse(base);
        // The binding file and the lease settings are re-read live.
        let new = parse(&format!("{}lease-time = \"5m\"\n", base.replace("/a", "/b")));
        assert_ne!(cur, new);
        assert_eq!(restart_part(&cur), restart_part(&new));
        // The DSTM pool is routed into the device: a restart.
        let pool = parse(&base.replace("192.0.2.0/29", "192.0.2.8/29"));
        assert_ne!(restart_part(&cur), restart_part(&pool));
        // So does the end-point address.
        let moved = parse(&base.replace("2001:db8::1", "2001:db8::2"));
        assert_ne!(restart_part(&cur), restart_part(&moved));
        // So does a DSTM server added or removed.
        let no_dstm = parse("[lw4o6]\naftr-address = \"2001:db8::1\"\nbinding-file = \"/a\"\n");
        assert_ne!(restart_part(&cur), restart_part(&no_dstm));
    }
}
