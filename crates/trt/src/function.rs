//! The relay as a v6gate function ([`function::Function`]): how `v6gate
//! run` and `v6gate trt` run it, report it and stop it.

use function::{Family, Function};

use crate::config::TrtConfig;
use crate::{Relay, Snapshot};

impl Snapshot {
    /// Every counter with its name (the `/status` key), in order.
    pub fn pairs(&self) -> [(&'static str, u64); 29] {
        [
            ("tcp_relayed", self.tcp_relayed),
            ("tcp_active", self.tcp_active),
            ("tcp_refused", self.tcp_refused),
            ("tcp_refused_client", self.tcp_refused_client),
            ("tcp_refused_connecting", self.tcp_refused_connecting),
            ("tcp_idle_closed", self.tcp_idle_closed),
            ("tcp_no_server", self.tcp_no_server),
            ("tcp_connect_failed", self.tcp_connect_failed),
            ("tcp_errors", self.tcp_errors),
            ("tcp_preconnects", self.tcp_preconnects),
            ("tcp_preconnect_claimed", self.tcp_preconnect_claimed),
            ("tcp_preconnect_expired", self.tcp_preconnect_expired),
            ("tcp_preconnect_refused", self.tcp_preconnect_refused),
            ("tcp_ack_alone", self.tcp_ack_alone),
            ("tcp_fin_deferred", self.tcp_fin_deferred),
            ("tcp_fin_late", self.tcp_fin_late),
            ("bytes_up", self.bytes_up),
            ("bytes_down", self.bytes_down),
            ("udp_in", self.udp_in),
            ("udp_out", self.udp_out),
            ("udp_flows", self.udp_flows),
            ("udp_flows_created", self.udp_flows_created),
            ("udp_flows_expired", self.udp_flows_expired),
            ("udp_refused", self.udp_refused),
            ("udp_refused_client", self.udp_refused_client),
            ("udp_icmp_sent", self.udp_icmp_sent),
            ("udp_icmp_suppressed", self.udp_icmp_suppressed),
            ("udp_no_server", self.udp_no_server),
            ("udp_errors", self.udp_errors),
        ]
    }

    /// `v6gate_trt_events{event}` (counters) and `v6gate_trt_active{kind}`
    /// (what the relay holds now).
    pub fn families(&self) -> Vec<Family> {
        let mut events = Family::counter(
            "v6gate_trt_events",
            "Transport relay counters: connections relayed, refused, failed; bytes; UDP datagrams and flows (docs/trt.md), by event.",
        );
        let mut active =
            Family::gauge("v6gate_trt_active", "TCP connections and UDP flows the transport relay holds now, by kind.");
        for (k, n) in self.pairs() {
            match k {
                "tcp_active" => active = active.with(vec![("kind", "tcp-connections".into())], n as f64),
                "udp_flows" => active = active.with(vec![("kind", "udp-flows".into())], n as f64),
                k => events = events.with(vec![("event", function::metrics::label(k))], n as f64),
            }
        }
        vec![events, active]
    }
}

impl Function for Relay {
    type Config = TrtConfig;
    type Status = Snapshot;

    fn status_key(&self) -> &'static str {
        "trt"
    }

    fn names(&self) -> Vec<&'static str> {
        vec!["trt"]
    }

    // Reload: the default (any change of [trt] needs a restart: the
    // listeners, the tproxy rules and the relayed connections belong to
    // the running relay).

    fn status(&self) -> Snapshot {
        self.counters().snapshot()
    }

    fn metrics(&self) -> Vec<Family> {
        self.status().families()
    }

    fn stop(self) -> Option<String> {
        let s = self.counters().snapshot();
        Relay::stop(self);
        Some(format!("trt: {} connection(s) relayed, {} UDP flow(s)", s.tcp_relayed, s.udp_flows_created))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_key_is_a_counter_and_the_live_ones_are_gauges() {
        let s = Snapshot { tcp_relayed: 3, tcp_active: 2, udp_flows: 5, tcp_fin_late: 1, ..Snapshot::default() };
        // The pairs name every field of the status, so a new counter
        // cannot be missing from /metrics.
        let v = serde_json::to_value(&s).unwrap_or_default();
        let keys: Vec<&str> = s.pairs().iter().map(|(k, _)| *k).collect();
        let mut want: Vec<&str> = v.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
        let mut got = keys.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        for (k, n) in s.pairs() {
            assert_eq!(v.get(k).and_then(serde_json::Value::as_u64), Some(n), "{k}");
        }
        let f = s.families();
        assert_eq!(f[0].name, "v6gate_trt_events");
        assert_eq!(f[0].value(&[("event", "tcp-relayed")]), Some(3.0));
        assert_eq!(f[0].value(&[("event", "tcp-fin-late")]), Some(1.0));
        assert_eq!(f[0].value(&[("event", "tcp-active")]), None);
        assert_eq!(f[1].value(&[("kind", "tcp-connections")]), Some(2.0));
        assert_eq!(f[1].value(&[("kind", "udp-flows")]), Some(5.0));
        assert_eq!(f[0].samples.len() + f[1].samples.len(), 29);
    }
}
