//! The `/metrics` document, written by the `prometheus-client` crate in
//! the OpenMetrics text format (which Prometheus scrapes natively).
//!
//! Every series of earlier versions keeps its name. Added for `rate()`:
//! monotonic `_total` counters of relayed TrGW packets and bytes
//! (`v6gate_trgw_relayed_packets_total{kind}` and
//! `v6gate_trgw_relayed_bytes_total{kind}`, beside the old gauges over the
//! live calls, `v6gate_trgw_packets{kind}` and `v6gate_trgw_bytes{kind}`),
//! `v6gate_build_info{version}`, the standard `process_start_time_seconds`,
//! `process_open_fds` and `process_max_fds`, and the DNS64 counters as one
//! labelled family, `v6gate_dns64_events_total{event}` (the old names
//! `v6gate_dns64_<event>_total` stay). With `[alg]`, the `v6gate_alg_*`
//! families: requests by method, responses by class, the ALG's own
//! responses by code, drops by reason, transactions, dialogs, calls by
//! result, handovers (docs/alg.md lists them). The destination policy:
//! `v6gate_destination_refused_total{plane,reason}` and the own-address
//! list's `v6gate_destination_own_*` (docs/security.md).
//!
//! A snapshot of the daemon's counters is taken into a list of
//! [`Family`] values (pure, testable), then encoded by the crate.

use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::super::stats::{ENGINES, FAMILIES};
use super::super::Daemon;
use xdp::types::{Count, Counter};

/// The Content-Type of the document.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Families are the function contract's ([`function::metrics`]): each
/// function reports its own, and this module encodes them.
pub use function::metrics::{Family, Labels};

#[derive(Debug)]
struct Snapshot(Vec<Family>);

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let ty = if f.counter { MetricType::Counter } else { MetricType::Gauge };
            let mut fam = enc.encode_descriptor(&f.name, f.help, None, ty)?;
            if let [(labels, v)] = &f.samples[..] {
                if labels.is_empty() {
                    // A single sample without labels: `name value`, no `{}`.
                    sample(f.counter, *v, fam)?;
                    continue;
                }
            }
            for (labels, v) in &f.samples {
                sample(f.counter, *v, fam.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// One value: integers as integers, other values as floats.
fn sample(counter: bool, v: f64, m: prometheus_client::encoding::MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
    match (counter, v.fract() == 0.0 && (0.0..9.0e15).contains(&v)) {
        (true, true) => ConstCounter::new(v as u64).encode(m),
        (true, false) => ConstCounter::new(v).encode(m),
        (false, true) => ConstGauge::new(v as i64).encode(m),
        (false, false) => ConstGauge::new(v).encode(m),
    }
}

/// Encodes `families` as OpenMetrics text.
pub fn encode(families: Vec<Family>) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(Snapshot(families)));
    let mut s = String::with_capacity(16 * 1024);
    if prometheus_client::encoding::text::encode(&mut s, &reg).is_err() {
        s.clear();
    }
    s
}

/// The `/metrics` document.
pub fn render(d: &Daemon) -> String {
    encode(families(d))
}

/// Every family of the daemon, from its counters now.
pub fn families(d: &Daemon) -> Vec<Family> {
    let t = d.totals();
    let eng = d.engines.load();
    let mut v = vec![
        Family::gauge("v6gate_info", "Version of the running daemon.").with(vec![("version", VERSION.into())], 1),
        Family::gauge("v6gate_build_info", "Build of the running daemon (always 1).")
            .with(vec![("version", VERSION.into()), ("name", "v6gate".into())], 1),
        Family::gauge("v6gate_uptime_seconds", "Seconds since the daemon started.")
            .one(d.started.elapsed().as_secs_f64()),
        Family::gauge("process_start_time_seconds", "Start time of the process since the Unix epoch in seconds.")
            .one(d.started_unix),
        Family::gauge("v6gate_workers", "Worker threads (one per TUN queue).").one(d.workers() as f64),
        Family::gauge("v6gate_config_generation", "Configuration generation (1 at start, +1 per reload).")
            .one(eng.generation as f64),
        Family::counter("v6gate_config_reloads", "Configuration reloads, by result.")
            .by("result", [("ok", d.reloads_ok.load(Relaxed)), ("error", d.reloads_failed.load(Relaxed))]),
    ];
    if let Some(n) = crate::limits::open_fds() {
        v.push(Family::gauge("process_open_fds", "Number of open file descriptors.").one(n as f64));
    }
    if let Some(l) = crate::limits::nofile() {
        v.push(Family::gauge("process_max_fds", "Maximum number of open file descriptors.").one(l.soft as f64));
    }
    let mut packets =
        Family::counter("v6gate_packets", "Packets read from (rx) and written to (tx) the TUN device, by family.");
    let mut bytes =
        Family::counter("v6gate_bytes", "Bytes read from (rx) and written to (tx) the TUN device, by family.");
    for (dir, p, b) in [("rx", t.rx_packets, t.rx_bytes), ("tx", t.tx_packets, t.tx_bytes)] {
        for (i, f) in FAMILIES.iter().enumerate() {
            let l = || vec![("direction", dir.to_string()), ("family", f.to_string())];
            packets = packets.with(l(), p[i] as f64);
            bytes = bytes.with(l(), b[i] as f64);
        }
    }
    v.push(packets);
    v.push(bytes);
    v.push(
        Family::counter("v6gate_engine_packets", "Packets handled, by engine.")
            .by("engine", ENGINES.iter().zip(t.engine_packets)),
    );
    v.push(
        Family::counter("v6gate_drops", "Packets dropped, by reason.")
            .by("reason", t.drops.iter().chain(t.daemon_drops.iter().filter(|x| x.0 != "icmp-rate-limited")).copied()),
    );
    let limited = t.daemon_drops.iter().find(|x| x.0 == "icmp-rate-limited").map_or(0, |x| x.1);
    v.push(
        Family::counter(
            "v6gate_icmp_errors",
            "ICMP errors the translator originated, sent or suppressed by the rate limit.",
        )
        .by("result", [("sent", t.icmp_errors_sent), ("rate-limited", limited)]),
    );
    v.push(
        Family::counter("v6gate_admin_refused", "Admin API connections and requests refused, by reason.")
            .by("reason", d.admin_stats.refusals()),
    );
    v.push(
        Family::counter("v6gate_admin_requests", "Admin API requests received.")
            .one(d.admin_stats.requests.load(Relaxed) as f64),
    );
    v.push(
        Family::gauge("v6gate_admin_connections", "Admin API connections open now.")
            .one(d.admin_stats.open.load(Relaxed) as f64),
    );
    if let Some(n) = eng.nat64.as_ref() {
        nat64(&mut v, &n.stats());
    }
    if let Some((st, (entries, bytes))) = super::super::lock(&d.dns64).as_ref().map(|x| (x.stats(), x.cache_usage())) {
        let pairs = st.pairs();
        for (k, val) in &pairs {
            v.push(Family::counter(format!("v6gate_dns64_{k}"), "DNS64 counter (see docs/dns64.md).").one(*val as f64));
        }
        v.push(
            Family::counter("v6gate_dns64_events", "DNS64 counters, by event (see docs/dns64.md).").by("event", pairs),
        );
        v.push(dns64_cache(&st));
        v.push(Family::gauge("v6gate_dns64_cache_entries", "DNS64 cached upstream answers now.").one(entries as f64));
        v.push(Family::gauge("v6gate_dns64_cache_bytes", "Bytes the DNS64 cache holds now.").one(bytes as f64));
    }
    if let Some(r) = d.trgw.as_ref() {
        trgw(&mut v, &r.stats());
    }
    if let Some(p) = super::super::lock(&d.xdp).as_ref() {
        xdp(&mut v, &p.attachments(), p.counters().as_deref());
        let mut mirrored = Vec::new();
        let mut full = Vec::new();
        if p.mirrors_nat64() {
            let (m, _, f) = p.nat64_mirror();
            mirrored.push(("nat64-sessions", m as u64));
            full.push(("nat64-sessions", f));
        }
        if p.mirrors_trgw() {
            let (m, _, f) = p.trgw_mirror();
            mirrored.push(("trgw-relays", m as u64));
            full.push(("trgw-relays", f));
        }
        if !mirrored.is_empty() {
            v.push(
                Family::gauge("v6gate_xdp_mirrored", "Entries the daemon mirrors into the XDP fast path, by table.")
                    .by("table", mirrored),
            );
            v.push(
                Family::counter(
                    "v6gate_xdp_map_full",
                    "Entries a full XDP map refused (they stay on the slow path), by map.",
                )
                .by("map", full),
            );
        }
    }
    // The functions that run through the contract report their own.
    v.extend(function::lock(&d.registry).metrics());
    if let Some(a) = d.alg.as_ref() {
        alg(&mut v, &a.snapshot());
    }
    destinations(&mut v, &d.destinations);
    v
}

/// `v6gate_destination_*`: refusals by plane and reason, and the state of
/// the own-address list.
fn destinations(v: &mut Vec<Family>, d: &crate::destinations::Destinations) {
    let mut refused = Family::counter(
        "v6gate_destination_refused",
        "Destinations a client named that the destination policy refused, by plane and reason.",
    );
    for p in d.policies() {
        for (r, n) in p.refused() {
            refused =
                refused.with(vec![("plane", p.plane().to_string()), ("reason", r.as_str().to_string())], n as f64);
        }
    }
    v.push(refused);
    let st = d.gateway().status();
    v.push(
        Family::gauge("v6gate_destination_own_addresses", "The gateway's own addresses the policy knows, by source.")
            .by(
                "source",
                [
                    ("host", st.host_addresses as u64),
                    ("directed-broadcast", st.broadcasts as u64),
                    ("configured", st.configured as u64),
                ],
            ),
    );
    v.push(
        Family::counter("v6gate_destination_own_refreshes", "Readings of the host's addresses, by result.")
            .by("result", [("ok", st.refreshes), ("error", st.failures)]),
    );
    v.push(
        Family::gauge(
            "v6gate_destination_own_stale",
            "1 while the host's addresses cannot be read (only allow-listed destinations pass).",
        )
        .one(u8::from(st.stale)),
    );
}

/// `v6gate_xdp_*`: attachments, packets and bytes the fast path forwarded
/// per function and direction, and passes to the slow path by reason.
fn xdp(v: &mut Vec<Family>, attached: &[(String, &'static str)], counters: Option<&[(Counter, Count)]>) {
    let mut a = Family::gauge("v6gate_xdp_attached", "XDP fast path attachments (1 per interface), by mode in force.");
    for (i, m) in attached {
        a = a.with(vec![("interface", i.clone()), ("mode", m.to_string())], 1);
    }
    v.push(a);
    let Some(counters) = counters else { return };
    let mut packets = Family::counter(
        "v6gate_xdp_fast_path_packets",
        "Packets the XDP fast path translated or relayed, by function and direction.",
    );
    let mut bytes = Family::counter(
        "v6gate_xdp_fast_path_bytes",
        "Bytes (L3 as received; TrGW: UDP payload) the XDP fast path forwarded, by function and direction.",
    );
    let mut passes =
        Family::counter("v6gate_xdp_passes", "Packets the XDP fast path passed to the slow path, by reason.");
    for (c, n) in counters {
        if super::super::fastpath::is_pass(*c) {
            passes = passes.with(vec![("reason", c.label().to_string())], n.packets as f64);
            continue;
        }
        let (function, direction) = c.label().split_once('-').unwrap_or((c.label(), "relay"));
        let l = || vec![("function", function.to_string()), ("direction", direction.to_string())];
        packets = packets.with(l(), n.packets as f64);
        bytes = bytes.with(l(), n.bytes as f64);
    }
    v.push(packets);
    v.push(bytes);
    v.push(passes);
}

/// The DNS64 cache's counters as one family labelled by `event` (`hit`,
/// `miss`, `insert`, `eviction`, `expired`; docs/dns64.md, Cache).
fn dns64_cache(st: &dns64::Stats) -> Family {
    Family::counter("v6gate_dns64_cache", "DNS64 cache lookups and changes, by event (see docs/dns64.md).").by(
        "event",
        [
            ("hit", st.cache_hits),
            ("miss", st.cache_misses),
            ("insert", st.cache_inserts),
            ("eviction", st.cache_evictions),
            ("expired", st.cache_expired),
        ],
    )
}

fn alg(v: &mut Vec<Family>, s: &alg::runner::Snapshot) {
    let st = &s.stats;
    let (server, client, dialogs, parked) = s.tables;
    v.push(
        Family::counter("v6gate_alg_requests", "SIP requests the ALG received, by method.")
            .by("method", st.by_method()),
    );
    v.push(
        Family::counter("v6gate_alg_responses", "SIP responses the ALG received, by status class.")
            .by("class", st.by_class()),
    );
    v.push(
        Family::counter("v6gate_alg_forwarded", "SIP messages the ALG forwarded (first transmissions), by kind.")
            .by("kind", [("request", st.requests_forwarded), ("response", st.responses_forwarded)]),
    );
    v.push(
        Family::counter("v6gate_alg_local_responses", "SIP responses the ALG wrote itself, by status code.")
            .by("code", st.by_local_code()),
    );
    v.push(
        Family::counter("v6gate_alg_drops", "SIP messages the ALG dropped unanswered, by reason.")
            .by("reason", st.drops()),
    );
    v.push(
        Family::counter(
            "v6gate_alg_retransmissions",
            "SIP retransmissions absorbed (answered from a transaction) and sent (Timers A, E, G).",
        )
        .by("kind", [("absorbed", st.retransmissions_absorbed), ("sent", st.retransmissions_sent)]),
    );
    v.push(Family::counter("v6gate_alg_events", "ALG events, by kind (see docs/alg.md).").by(
        "event",
        [
            ("malformed-answered", st.malformed_answered),
            ("loop", st.loops),
            ("too-many-hops", st.too_many_hops),
            ("unroutable", st.unroutable),
            ("timeout", st.timeouts),
            ("failover", st.failovers),
            ("parked-for-dns", st.parked),
            ("media-error", st.media_errors),
            ("sdp-dropped", st.sdp_dropped),
            ("media-late-reply", st.media_late_replies),
        ],
    ));
    v.push(
        Family::gauge("v6gate_alg_transactions", "Live SIP transactions, by kind.")
            .by("kind", [("server", server as u64), ("client", client as u64)]),
    );
    v.push(Family::gauge("v6gate_alg_dialogs", "Live dialogs (early and confirmed).").one(dialogs as f64));
    v.push(Family::counter("v6gate_alg_dialogs", "Dialogs, by event.").by(
        "event",
        [("created", st.dialogs_created), ("released", st.dialogs_released), ("timed-out", st.dialogs_timed_out)],
    ));
    v.push(Family::counter("v6gate_alg_calls", "Initial INVITEs, by how they ended.").by(
        "result",
        [("answered", st.calls_answered), ("failed", st.calls_failed), ("cancelled", st.calls_cancelled)],
    ));
    v.push(
        Family::counter(
            "v6gate_alg_handovers",
            "Media re-pointed by a re-INVITE/UPDATE from a new address (mobility).",
        )
        .one(st.handovers as f64),
    );
    v.push(Family::gauge("v6gate_alg_parked", "Requests waiting for DNS now.").one(parked as f64));
    v.push(Family::gauge("v6gate_alg_tcp_connections", "SIP TCP connections open now.").one(s.tcp_connections as f64));
    v.push(
        Family::gauge("v6gate_alg_media_pending", "Media commands waiting for a remote ng server now.")
            .one(st.media_pending as f64),
    );
    v.push(
        Family::counter(
            "v6gate_alg_refused",
            "SIP requests the ALG refused with an answer of its own (503 full budgets, 504 DNS timeout, 403 next hop, 482 own listener, 513 too large, 415 body), by reason.",
        )
        .by("reason", st.by_refusal()),
    );
    v.push(
        Family::counter("v6gate_alg_tcp_refused", "SIP TCP connections refused or not opened, by reason.")
            .by("reason", alg::stats::TCP_REFUSALS.into_iter().zip(st.tcp_refused)),
    );
    v.push(
        Family::counter("v6gate_alg_tcp_closed", "SIP TCP connections the ALG closed, by reason.")
            .by("reason", alg::stats::TCP_CLOSES.into_iter().zip(st.tcp_closed)),
    );
    let budgets = s.budgets();
    v.push(
        Family::gauge(
            "v6gate_alg_budget_used",
            "What each ALG budget holds now (entries, bytes or connections), by budget.",
        )
        .by("budget", budgets.iter().map(|(k, u)| (*k, u.used))),
    );
    v.push(
        Family::gauge("v6gate_alg_budget_limit", "Each ALG budget's global cap, by budget.")
            .by("budget", budgets.iter().map(|(k, u)| (*k, u.limit))),
    );
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn trgw(v: &mut Vec<Family>, st: &trgw::RelayStats) {
    let (t, p, r) = (&st.totals, &st.packets, &st.relayed);
    v.push(Family::gauge("v6gate_trgw_calls", "TrGW calls now.").one(st.calls as f64));
    v.push(Family::gauge("v6gate_trgw_streams", "TrGW media streams now.").one(st.streams as f64));
    v.push(Family::counter("v6gate_trgw_calls", "TrGW calls, by event.").by(
        "event",
        [
            ("created", t.calls_created),
            ("deleted", t.calls_deleted),
            ("timed-out", t.calls_timed_out),
            ("timed-out-early", t.early_timed_out),
        ],
    ));
    v.push(Family::gauge("v6gate_trgw_clients", "TrGW clients holding media streams now.").one(st.clients as f64));
    v.push(Family::counter("v6gate_trgw_control_errors", "TrGW control commands refused, by reason.").by(
        "reason",
        [
            ("error-reply", t.control_errors),
            ("not-allowed", t.control_denied),
            ("ports-exhausted", t.port_exhausted),
            ("no-descriptors", t.descriptors_exhausted),
            ("address-not-on-host", t.address_unavailable),
            ("media-address-refused", t.media_refused),
            ("client-streams", t.client_limited),
            ("reply-too-large", t.replies_too_large),
            ("reply-send-failed", t.control_send_errors),
            ("connection-limit", t.control_connections_refused),
            ("connection-timeout", t.control_timeouts),
            ("accept-error", t.control_accept_errors),
        ],
    ));
    v.push(
        Family::gauge(
            "v6gate_trgw_packets",
            "Packets of the live TrGW calls, by kind (dropped: received, not relayed).",
        )
        .by("kind", [("rtp", p.rtp_packets), ("rtcp", p.rtcp_packets), ("dropped", p.dropped)]),
    );
    v.push(
        Family::gauge("v6gate_trgw_bytes", "Bytes relayed by the live TrGW calls, by kind.")
            .by("kind", [("rtp", p.rtp_bytes), ("rtcp", p.rtcp_bytes)]),
    );
    v.push(
        Family::counter(
            "v6gate_trgw_relayed_packets",
            "Packets the TrGW relayed since start (ended calls included), by kind.",
        )
        .by("kind", [("rtp", r.rtp_packets), ("rtcp", r.rtcp_packets)]),
    );
    v.push(
        Family::counter(
            "v6gate_trgw_relayed_bytes",
            "Bytes the TrGW relayed since start (ended calls included), by kind.",
        )
        .by("kind", [("rtp", r.rtp_bytes), ("rtcp", r.rtcp_bytes)]),
    );
    v.push(
        Family::counter(
            "v6gate_trgw_dropped_packets",
            "Media packets received and not relayed since start, by reason.",
        )
        .by(
            "reason",
            [
                ("stream", r.dropped.saturating_sub(st.latch_refused)),
                ("latch-refused", st.latch_refused),
                ("no-leg", st.shared.map_or(0, |s| s.unmatched)),
            ],
        ),
    );
    if let Some(sh) = &st.shared {
        v.push(
            Family::counter(
                "v6gate_trgw_shared_steered_packets",
                "Media packets the sk_lookup program steered to a shared socket ([trgw] sockets = \"shared\"), by outcome.",
            )
            .by("outcome", [("steered", sh.steered), ("failed", sh.steer_failed)]),
        );
    }
    let c = &st.ng_cache;
    v.push(
        Family::gauge("v6gate_trgw_ng_cache_entries", "ng replies cached for retransmissions.").one(c.entries as f64),
    );
    v.push(Family::gauge("v6gate_trgw_ng_cache_bytes", "Bytes of ng replies cached.").one(c.bytes as f64));
    v.push(
        Family::counter("v6gate_trgw_ng_cache_evicted", "ng replies evicted early (a cache bound was reached).")
            .one(c.evicted as f64),
    );
}

fn nat64(v: &mut Vec<Family>, st: &nat64::Stats) {
    v.push(
        Family::gauge("v6gate_nat64_sessions", "NAT64 sessions now, by protocol.")
            .by("proto", st.sessions.iter().map(|(k, n)| (k, *n))),
    );
    v.push(
        Family::gauge("v6gate_nat64_bib_entries", "NAT64 BIB entries now, by protocol.")
            .by("proto", st.bib.iter().map(|(k, n)| (k, *n))),
    );
    v.push(
        Family::counter("v6gate_nat64_sessions_created", "NAT64 sessions created, by protocol.")
            .by("proto", st.sessions_created.iter().map(|(k, n)| (k, *n))),
    );
    v.push(
        Family::counter("v6gate_nat64_sessions_expired", "NAT64 sessions expired, by protocol.")
            .by("proto", st.sessions_expired.iter().map(|(k, n)| (k, *n))),
    );
    v.push(
        Family::gauge("v6gate_nat64_pool4_ports", "pool4 ports (ICMP identifiers) per protocol.")
            .by("proto", st.pool4_ports.iter().map(|(k, n)| (k, *n))),
    );
    v.push(
        Family::gauge("v6gate_nat64_pool4_ports_used", "pool4 ports (ICMP identifiers) in use, per protocol.")
            .by("proto", st.pool4_ports_used.iter().map(|(k, n)| (k, *n))),
    );
    v.push(
        Family::counter(
            "v6gate_nat64_refused",
            "New NAT64 flows refused (an ICMP error may have been sent), by reason.",
        )
        .by("reason", st.refused.iter().map(|(k, n)| (k, *n))),
    );
    v.push(Family::gauge("v6gate_nat64_pool4_addresses", "pool4 addresses.").one(st.pool4_addresses as f64));
    v.push(
        Family::gauge("v6gate_nat64_natpt_hosts", "NAT-PT: IPv6 hosts holding a pool4 address.")
            .one(st.natpt_hosts as f64),
    );
    v.push(Family::gauge("v6gate_nat64_held_syns", "Unsolicited IPv4 SYNs held now.").one(st.held_syns as f64));
    v.push(
        Family::counter("v6gate_nat64_held_syns_expired", "Held SYNs answered with ICMP Port Unreachable.")
            .one(st.held_syns_expired as f64),
    );
    v.push(Family::gauge("v6gate_nat64_fragment_sets", "Datagrams in reassembly now.").one(st.fragment_sets as f64));
    v.push(Family::counter("v6gate_nat64_reassembled", "Datagrams reassembled.").one(st.reassembled as f64));
    v.push(
        Family::counter("v6gate_nat64_fragment_sets_expired", "Reassemblies given up.")
            .one(st.fragment_sets_expired as f64),
    );
    v.push(Family::counter("v6gate_nat64_hairpinned", "Packets hairpinned (RFC 6146 §3.8).").one(st.hairpinned as f64));
    let b = &st.port_blocks;
    v.push(
        Family::gauge("v6gate_nat64_port_blocks", "NAT64 with XDP: per-host TCP port blocks held now.")
            .one(b.held as f64),
    );
    v.push(
        Family::counter("v6gate_nat64_port_blocks_granted", "NAT64 with XDP: port blocks granted to hosts.")
            .one(b.granted as f64),
    );
    v.push(
        Family::counter("v6gate_nat64_port_blocks_returned", "NAT64 with XDP: port blocks given back to the pool.")
            .one(b.returned as f64),
    );
    v.push(
        Family::counter(
            "v6gate_nat64_port_block_conflicts",
            "NAT64 with XDP: sessions created in XDP whose host port had another mapping first (that one stayed).",
        )
        .one(b.conflicts as f64),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns64_cache_counters_are_one_family_by_event() {
        let st = dns64::Stats { cache_hits: 5, cache_misses: 2, cache_evictions: 1, ..Default::default() };
        let s = encode(vec![dns64_cache(&st)]);
        assert!(s.contains("# TYPE v6gate_dns64_cache counter\n"), "{s}");
        assert!(s.contains("v6gate_dns64_cache_total{event=\"hit\"} 5\n"), "{s}");
        assert!(s.contains("v6gate_dns64_cache_total{event=\"miss\"} 2\n"), "{s}");
        assert!(s.contains("v6gate_dns64_cache_total{event=\"eviction\"} 1\n"), "{s}");
        assert!(s.contains("v6gate_dns64_cache_total{event=\"expired\"} 0\n"), "{s}");
    }

    #[test]
    fn counters_get_total_gauges_do_not_and_labels_are_kept() {
        let s = encode(vec![
            Family::counter("v6gate_drops", "Drops.").by("reason", [("truncated", 3u64), ("bad-checksum", 0)]),
            Family::gauge("v6gate_trgw_calls", "Calls.").one(2.0),
            Family::gauge("v6gate_uptime_seconds", "Up.").one(1.5),
            Family::counter("v6gate_trgw_calls", "Calls by event.").by("event", [("created", 7u64)]),
        ]);
        assert!(s.contains("# TYPE v6gate_drops counter\n"), "{s}");
        assert!(s.contains("v6gate_drops_total{reason=\"truncated\"} 3\n"), "{s}");
        assert!(s.contains("v6gate_drops_total{reason=\"bad-checksum\"} 0\n"), "{s}");
        assert!(s.contains("v6gate_trgw_calls 2\n"), "{s}");
        assert!(s.contains("v6gate_uptime_seconds 1.5\n"), "{s}");
        assert!(s.contains("v6gate_trgw_calls_total{event=\"created\"} 7\n"), "{s}");
        assert!(s.ends_with("# EOF\n"), "{s}");
    }

    #[test]
    fn xdp_families() {
        let mut v = Vec::new();
        let c = [
            (Counter::Siit64, Count { packets: 3, bytes: 300 }),
            (Counter::Trgw, Count { packets: 1, bytes: 172 }),
            (Counter::PassFib, Count { packets: 2, bytes: 0 }),
        ];
        xdp(&mut v, &[("eth0".into(), "generic")], Some(&c));
        let s = encode(v);
        assert!(s.contains("v6gate_xdp_attached{interface=\"eth0\",mode=\"generic\"} 1\n"), "{s}");
        assert!(s.contains("v6gate_xdp_fast_path_packets_total{function=\"siit\",direction=\"6to4\"} 3\n"), "{s}");
        assert!(s.contains("v6gate_xdp_fast_path_bytes_total{function=\"siit\",direction=\"6to4\"} 300\n"), "{s}");
        assert!(s.contains("v6gate_xdp_fast_path_packets_total{function=\"trgw\",direction=\"relay\"} 1\n"), "{s}");
        assert!(s.contains("v6gate_xdp_passes_total{reason=\"fib\"} 2\n"), "{s}");
        let mut v = Vec::new();
        xdp(&mut v, &[], None);
        assert_eq!(v.len(), 1, "without counters only the attachments");
    }

    #[test]
    fn softwire_fast_paths_by_function_path_and_counter() {
        let status = serde_json::json!({
            "dslite": {
                "counters": {"decapsulated": 9, "drops": {"unknown-prefix": 1}},
                "mappings": 4,
                "xdp": {
                    "attached": [{"iface": "g1", "mode": "native"}],
                    "sessions": 4,
                    "refused_full": 0,
                    "counters": {"decap": 7, "created": 3, "pass-no-block": 1},
                    "port_blocks": {"size": 256, "held": 2, "granted": 5, "returned": 3, "created": 3,
                        "conflicts": 0, "fins": 6, "fins_stale": 1},
                },
            },
            "b4": {
                "counters": {"encapsulated": 2},
                "kernel": {"uplinks": [{"iface": "c0", "mode": "native"}], "counters": {"encap": 11, "pass-napt": 4}},
            },
        });
        let mut v = Vec::new();
        v.extend(softwire::function::families(&status));
        let s = encode(v);
        let has = |line: &str| assert!(s.contains(&format!("{line}\n")), "{line} missing in\n{s}");
        has("v6gate_softwire_fast_path_packets_total{function=\"dslite\",path=\"xdp\",counter=\"decap\"} 7");
        has("v6gate_softwire_fast_path_packets_total{function=\"dslite\",path=\"xdp\",counter=\"created\"} 3");
        has("v6gate_softwire_fast_path_passes_total{function=\"dslite\",path=\"xdp\",reason=\"no-block\"} 1");
        has("v6gate_softwire_fast_path_attached{function=\"dslite\",path=\"xdp\",interface=\"g1\"} 1");
        has("v6gate_softwire_port_blocks{function=\"dslite\"} 2");
        has("v6gate_softwire_port_block_events_total{function=\"dslite\",event=\"granted\"} 5");
        has("v6gate_softwire_port_block_events_total{function=\"dslite\",event=\"fins-stale\"} 1");
        has("v6gate_softwire_fast_path_packets_total{function=\"b4\",path=\"kernel\",counter=\"encap\"} 11");
        has("v6gate_softwire_fast_path_passes_total{function=\"b4\",path=\"kernel\",reason=\"napt\"} 4");
        has("v6gate_softwire_fast_path_attached{function=\"b4\",path=\"kernel\",interface=\"c0\"} 1");
        has("v6gate_softwire_events_total{function=\"dslite\",event=\"decapsulated\"} 9");
        has("v6gate_softwire_dropped_packets_total{function=\"dslite\",reason=\"unknown-prefix\"} 1");
        has("v6gate_softwire_table_entries{function=\"dslite\",table=\"xdp-sessions\"} 4");
        has("v6gate_softwire_events_total{function=\"dslite\",event=\"xdp-map-full\"} 0");
        assert!(!s.contains("function=\"b4\",event=\"granted\""), "no port blocks without them:\n{s}");
    }

    /// Issue #29 D9: the DSTM lease server's counters were in `/status`
    /// only.
    #[test]
    fn dstm_counters_are_metrics() {
        let stats = softwire::lease::LeaseStats {
            granted: 3,
            share_exceeded: 122,
            rate_limited: 7,
            file_writes: 2,
            ..Default::default()
        };
        let status = serde_json::json!({"lw4o6": {"leases": 3, "dstm": {"stats": stats, "free": 5}}});
        let mut v = Vec::new();
        v.extend(softwire::function::families(&status));
        let s = encode(v);
        let has = |line: &str| assert!(s.contains(&format!("{line}\n")), "{line} missing in\n{s}");
        has("v6gate_softwire_dstm_messages_total{function=\"lw4o6\",event=\"granted\"} 3");
        has("v6gate_softwire_dstm_messages_total{function=\"lw4o6\",event=\"file-writes\"} 2");
        has("v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"share-exceeded\"} 122");
        has("v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"rate-limited\"} 7");
        has("v6gate_softwire_dstm_refusals_total{function=\"lw4o6\",reason=\"client-rate-limited\"} 0");
        has("v6gate_softwire_table_entries{function=\"lw4o6\",table=\"dstm-free\"} 5");
        has("v6gate_softwire_table_entries{function=\"lw4o6\",table=\"leases\"} 3");
    }

    #[test]
    fn tunnel_counters_by_function_and_reason() {
        let f = tunnel::run::FunctionCounters {
            function: "sixtofour",
            counters: vec![("decapsulated".into(), 5), ("drop_spoofed".into(), 2), ("drop_link_scope".into(), 1)],
            io: vec![("send_errors".into(), 0)],
            gauges: vec![("fragment_sets".into(), 3)],
        };
        let mut v = Vec::new();
        v.extend(tunnel::function::families(&[f]));
        let s = encode(v);
        assert!(s.contains("v6gate_tunnel_up{function=\"sixtofour\"} 1\n"), "{s}");
        assert!(
            s.contains("v6gate_tunnel_dropped_packets_total{function=\"sixtofour\",reason=\"spoofed\"} 2\n"),
            "{s}"
        );
        assert!(
            s.contains("v6gate_tunnel_dropped_packets_total{function=\"sixtofour\",reason=\"link-scope\"} 1\n"),
            "{s}"
        );
        assert!(s.contains("v6gate_tunnel_events_total{function=\"sixtofour\",event=\"decapsulated\"} 5\n"), "{s}");
        assert!(s.contains("v6gate_tunnel_io_errors_total{function=\"sixtofour\",kind=\"send-errors\"} 0\n"), "{s}");
        assert!(s.contains("v6gate_tunnel_table_entries{function=\"sixtofour\",table=\"fragment-sets\"} 3\n"), "{s}");
    }
}
