//! The tunnels as a v6gate function ([`function::Function`]): how
//! `v6gate run` and `v6gate tunnel` run them, report them and stop them.

use function::metrics::label;
use function::{Family, Function, Reload};

use crate::config::TunnelConfig;
use crate::run::{FunctionCounters, Tunnels};

impl Function for Tunnels {
    type Config = TunnelConfig;
    type Status = serde_json::Value;

    fn status_key(&self) -> &'static str {
        "tunnels"
    }

    fn names(&self) -> Vec<&'static str> {
        self.functions()
    }

    fn plan_reload(&self, cur: &TunnelConfig, new: &TunnelConfig) -> Reload {
        // Devices, sockets, peer lists and qualified addresses belong to
        // the running functions.
        Reload::unless_changed(cur, new, "[sixtofour], [sixrd] or [teredo.*]")
    }

    fn status(&self) -> serde_json::Value {
        Tunnels::status(self)
    }

    fn metrics(&self) -> Vec<Family> {
        families(&self.counters())
    }

    fn fast_path(&self) -> function::FastPath {
        // The Teredo relay's XDP program (`[teredo.relay.xdp]`) serves
        // trusted peers from its maps.
        let status = Tunnels::status(self);
        let relay_xdp = status.get("teredo-relay").and_then(|s| s.get("xdp")).is_some_and(|v| !v.is_null());
        let mirrors = if relay_xdp {
            vec![function::Mirror {
                maps: &["teredo_config", "teredo_peers"],
                what: "the Teredo relay's trusted peers",
                program: "teredo.bpf.c",
            }]
        } else {
            Vec::new()
        };
        function::FastPath { mirrors }
    }

    fn stop(mut self) -> Option<String> {
        // Joins the threads; closing the devices removes them and their routes.
        Tunnels::stop(&mut self);
        None
    }
}

/// `v6gate_tunnel_*`: every tunnel function's counters, by function and
/// reason (drops) or event (the rest); `drop_spoofed` becomes
/// `reason="spoofed"`, `bubbles_sent` `event="bubbles-sent"`.
pub fn families(fns: &[FunctionCounters]) -> Vec<Family> {
    let mut up = Family::gauge("v6gate_tunnel_up", "Tunnel functions running (1 each), by function.");
    let mut drops =
        Family::counter("v6gate_tunnel_dropped_packets", "Packets a tunnel function dropped, by function and reason.");
    let mut events = Family::counter("v6gate_tunnel_events", "Tunnel function counters other than drops (packets in and out, bubbles, peers trusted, ...), by function and event.");
    let mut io = Family::counter(
        "v6gate_tunnel_io_errors",
        "Socket and device errors of a tunnel function, by function and kind.",
    );
    let mut tables = Family::gauge(
        "v6gate_tunnel_table_entries",
        "Entries in a tunnel function's tables now, by function and table.",
    );
    for f in fns {
        let func = || ("function", f.function.to_string());
        up = up.with(vec![func()], 1);
        for (k, n) in &f.counters {
            match k.strip_prefix("drop_") {
                Some(r) => drops = drops.with(vec![func(), ("reason", label(r))], *n as f64),
                None => events = events.with(vec![func(), ("event", label(k))], *n as f64),
            }
        }
        for (k, n) in &f.io {
            io = io.with(vec![func(), ("kind", label(k))], *n as f64);
        }
        for (k, n) in &f.gauges {
            tables = tables.with(vec![func(), ("table", label(k))], *n as f64);
        }
    }
    vec![up, drops, events, io, tables]
}
