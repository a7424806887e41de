//! The admin API's routes (no I/O: testable).
//!
//! | method | path           | answer |
//! |--------|----------------|--------|
//! | GET    | `/metrics`     | Prometheus / OpenMetrics text, names prefixed `v6gate_` (and the standard `process_*`) |
//! | GET    | `/status`      | JSON: version, uptime, config file, functions, counters, table sizes, pool use, descriptors |
//! | GET    | `/sessions`    | JSON list of NAT64 sessions (`?proto=tcp\|udp\|icmp`) |
//! | GET    | `/bib`         | JSON list of NAT64 BIB entries (`?proto=...`) |
//! | POST   | `/bib/add`     | add a static BIB entry: `?proto=tcp&v6=ADDR#PORT&v4=ADDR#PORT` |
//! | POST   | `/bib/remove`  | remove one, same parameters |
//! | POST   | `/reload`      | reload the configuration file, like SIGHUP |
//! | GET    | `/xdp`         | JSON: the XDP fast path: attachments, mirrored state, map sizes, counters |
//!
//! Errors are JSON `{"error":"..."}` with status 400 (bad request), 404
//! (unknown path, or the function is not configured) or 409 (refused);
//! the server adds 401/403 (access), 408/413/431/503 (limits).

use std::sync::atomic::Ordering;

use hyper::Method;
use serde_json::{json, Value};

use super::super::stats::{ENGINES, FAMILIES};
use super::super::Daemon;

/// Split `/path?a=b&c=d` into the path and decoded parameters.
pub fn split_query(url: &str) -> (&str, Vec<(String, String)>) {
    let (path, q) = url.split_once('?').unwrap_or((url, ""));
    let params = q
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    (path, params)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response: status and JSON or text body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: String,
    json: bool,
}

impl Reply {
    /// A JSON answer.
    pub fn json(status: u16, v: Value) -> Reply {
        Reply { status, body: v.to_string(), json: true }
    }
    /// `{"error": msg}`.
    pub fn error(status: u16, msg: impl Into<String>) -> Reply {
        Reply::json(status, json!({ "error": msg.into() }))
    }
    /// The Content-Type of the body.
    pub fn content_type(&self) -> &'static str {
        if self.json {
            "application/json"
        } else {
            super::metrics::CONTENT_TYPE
        }
    }
}

/// Answer one request (no I/O: testable).
pub fn route(d: &Daemon, method: &Method, path: &str, params: &[(String, String)]) -> Reply {
    match (method, path) {
        (&Method::GET, "/metrics") => Reply { status: 200, body: super::metrics::render(d), json: false },
        (&Method::GET, "/status") => Reply::json(200, status(d)),
        (&Method::GET, "/sessions")
        | (&Method::GET, "/bib")
        | (&Method::POST, "/bib/add")
        | (&Method::POST, "/bib/remove") => {
            let eng = d.engines.load();
            let Some(n) = eng.nat64.as_ref() else { return Reply::error(404, "NAT64 is not configured") };
            match nat64_call(d, n, path, params) {
                Ok(v) => Reply::json(200, v),
                Err((code, m)) => Reply::error(code, m),
            }
        }
        (&Method::GET, "/xdp") => match super::super::lock(&d.xdp).as_ref() {
            Some(p) => Reply::json(200, p.status()),
            None => Reply::error(404, "XDP is not configured ([xdp])"),
        },
        (&Method::POST, "/reload") => match d.reload_and_record("admin API") {
            Ok(g) => Reply::json(200, json!({ "generation": g })),
            Err(e) => Reply::error(409, e),
        },
        _ => Reply::error(404, format!("no such endpoint: {method} {path}")),
    }
}

fn param<'a>(params: &'a [(String, String)], k: &str) -> Option<&'a str> {
    params.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
}

/// `tcp`, `udp` or `icmp`.
pub fn parse_proto(s: &str) -> Result<nat64::Protocol, String> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok(nat64::Protocol::Tcp),
        "udp" => Ok(nat64::Protocol::Udp),
        "icmp" => Ok(nat64::Protocol::Icmp),
        _ => Err(format!("`{s}` is not tcp, udp or icmp")),
    }
}

/// `ADDR#PORT` (Jool's notation) or `ADDR:PORT` / `[V6]:PORT`.
pub fn parse_transport(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Some((a, p)) = s.rsplit_once('#') {
        let ip: std::net::IpAddr =
            a.trim_matches(['[', ']']).parse().map_err(|_| format!("`{a}` is not an address"))?;
        let port: u16 = p.parse().map_err(|_| format!("`{p}` is not a port"))?;
        return Ok(std::net::SocketAddr::new(ip, port));
    }
    s.parse().map_err(|_| format!("`{s}` is not ADDRESS#PORT"))
}

fn nat64_call(d: &Daemon, n: &nat64::Nat64, path: &str, params: &[(String, String)]) -> Result<Value, (u16, String)> {
    let bad = |m: String| (400u16, m);
    let proto = param(params, "proto").filter(|p| !p.is_empty()).map(parse_proto).transpose().map_err(bad)?;
    match path {
        "/sessions" => {
            let limit = match param(params, "limit") {
                Some(l) => l.parse().map_err(|_| bad(format!("limit `{l}` is not a number")))?,
                None => 0,
            };
            let f = nat64::SessionFilter { protocol: proto, limit, ..Default::default() };
            let now = d.started.elapsed().as_nanos() as u64;
            Ok(serde_json::to_value(n.sessions(&f, now)).unwrap_or(Value::Null))
        }
        "/bib" => {
            let v: Vec<_> = n.bib().into_iter().filter(|b| !matches!(proto, Some(p) if p != b.protocol)).collect();
            Ok(serde_json::to_value(v).unwrap_or(Value::Null))
        }
        _ => {
            let protocol = proto.ok_or_else(|| bad("proto is required".into()))?;
            let v6 = parse_transport(param(params, "v6").unwrap_or("")).map_err(bad)?;
            let v4 = parse_transport(param(params, "v4").unwrap_or("")).map_err(bad)?;
            let (std::net::SocketAddr::V6(ipv6), std::net::SocketAddr::V4(ipv4)) = (v6, v4) else {
                return Err(bad("v6 must be an IPv6 and v4 an IPv4 transport address".into()));
            };
            let e = nat64::StaticBib { protocol, ipv6, ipv4 };
            let r = if path == "/bib/add" { n.bib_add(e) } else { n.bib_remove(e) };
            r.map_err(|e| (409, e.to_string()))?;
            tracing::info!(
                "nat64: static BIB entry {protocol} {ipv6} <-> {ipv4} {}",
                if path == "/bib/add" { "added" } else { "removed" }
            );
            // Kept across reloads by the NAT64 (Nat64::reconfigure carries
            // the entries added at run time); across restarts by bib-file.
            match d.sync_bib_file() {
                Ok(()) => Ok(json!({ "ok": true })),
                Err(e) => Ok(json!({ "ok": true, "warning": format!("not saved: {e}") })),
            }
        }
    }
}

/// The `/status` document.
pub fn status(d: &Daemon) -> Value {
    let t = d.totals();
    let eng = d.engines.load();
    let fam = |a: [u64; 2]| json!({ FAMILIES[0]: a[0], FAMILIES[1]: a[1] });
    let drops: serde_json::Map<String, Value> =
        t.drops.iter().chain(&t.daemon_drops).filter(|x| x.1 > 0).map(|(k, v)| ((*k).to_string(), json!(v))).collect();
    let last_err = super::super::lock(&d.last_reload_error).clone();
    let mut doc = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": d.started.elapsed().as_secs_f64(),
        "config_file": d.config_path.display().to_string(),
        "config_generation": eng.generation,
        "functions": d.functions(),
        "nat64": eng.nat64.as_ref().map(|n| serde_json::to_value(n.stats()).unwrap_or(Value::Null)),
        "dns64": super::super::lock(&d.dns64).as_ref().map(|s| serde_json::to_value(s.stats()).unwrap_or(Value::Null)),
        "device": d.device.as_ref().map(|(name, index)| json!({ "name": name, "index": index, "workers": d.workers() })),
        "trgw": d.trgw.as_ref().map(|r| trgw_status(&r.stats())),
        "destinations": destinations_status(&d.destinations),
        "xdp": super::super::lock(&d.xdp).as_ref().map(|p| {
            json!({ "interfaces": p.attachments().into_iter().map(|(i, m)| json!({ "name": i, "mode": m })).collect::<Vec<_>>() })
        }),
        "alg": d.alg.as_ref().map(|a| alg_status(&a.config(), &a.snapshot())),
        "descriptors": descriptors(d),
        "admin": admin_status(d),
        "routes": super::super::lock(&d.routes).iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        "reloads": {
            "ok": d.reloads_ok.load(Ordering::Relaxed),
            "error": d.reloads_failed.load(Ordering::Relaxed),
            "last_error": last_err,
        },
        "counters": {
            "rx_packets": fam(t.rx_packets),
            "rx_bytes": fam(t.rx_bytes),
            "tx_packets": fam(t.tx_packets),
            "tx_bytes": fam(t.tx_bytes),
            "engine_packets": { ENGINES[0]: t.engine_packets[0], ENGINES[1]: t.engine_packets[1] },
            "icmp_errors_sent": t.icmp_errors_sent,
            "drops": drops,
        },
    });
    // The functions on the contract: each under its own key (`tunnels`,
    // `softwires`, `trt`; null when not running), and the maps their fast
    // paths fill.
    let registry = super::super::lock(&d.registry);
    if let Value::Object(o) = &mut doc {
        for (key, st) in registry.status() {
            o.insert(key.to_string(), st.unwrap_or(Value::Null));
        }
        let fast: serde_json::Map<String, Value> = registry
            .fast_paths()
            .into_iter()
            .filter(|(_, f)| !f.mirrors.is_empty())
            .map(|(k, f)| (k.to_string(), serde_json::to_value(&f.mirrors).unwrap_or(Value::Null)))
            .collect();
        o.insert("fast_paths".into(), Value::Object(fast));
    }
    doc
}

/// How close the process is to its descriptor limit.
fn descriptors(d: &Daemon) -> Value {
    let lim = crate::limits::nofile();
    json!({
        "open": crate::limits::open_fds(),
        "limit": lim.map(|l| l.soft),
        "hard_limit": lim.map(|l| l.hard),
        "needed": d.fds_needed,
    })
}

fn admin_status(d: &Daemon) -> Value {
    let s = &d.admin_stats;
    let refused: serde_json::Map<String, Value> =
        s.refusals().into_iter().filter(|x| x.1 > 0).map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({
        "connections_open": s.open.load(Ordering::Relaxed),
        "connections_accepted": s.accepted.load(Ordering::Relaxed),
        "requests": s.requests.load(Ordering::Relaxed),
        "refused": refused,
        "token_set": d.admin_token().is_some(),
    })
}

/// Only the non-zero entries of (label, value) pairs.
fn nonzero<K: ToString>(pairs: impl IntoIterator<Item = (K, u64)>) -> serde_json::Map<String, Value> {
    pairs.into_iter().filter(|x| x.1 > 0).map(|(k, v)| (k.to_string(), json!(v))).collect()
}

fn alg_status(cfg: &alg::Config, s: &alg::runner::Snapshot) -> Value {
    let st = &s.stats;
    let (server, client, dialogs, parked) = s.tables;
    json!({
        "listen_v6": cfg.listen_v6.to_string(),
        "listen_v4": cfg.listen_v4.to_string(),
        "tcp": cfg.tcp,
        "media": format!("{:?}", cfg.media).to_ascii_lowercase(),
        "routes": cfg.route.len(),
        "transactions": { "server": server, "client": client },
        "dialogs": dialogs,
        "parked": parked,
        "tcp_connections": s.tcp_connections,
        "media_pending": st.media_pending,
        "calls": { "answered": st.calls_answered, "failed": st.calls_failed, "cancelled": st.calls_cancelled },
        "dialogs_total": { "created": st.dialogs_created, "released": st.dialogs_released, "timed_out": st.dialogs_timed_out },
        "handovers": st.handovers,
        "requests": nonzero(st.by_method()),
        "responses": nonzero(st.by_class()),
        "forwarded": { "requests": st.requests_forwarded, "responses": st.responses_forwarded },
        "local_responses": nonzero(st.by_local_code()),
        "drops": nonzero(st.drops()),
        "refused": nonzero(st.by_refusal()),
        "tcp_refused": nonzero(alg::stats::TCP_REFUSALS.into_iter().zip(st.tcp_refused)),
        "tcp_closed": nonzero(alg::stats::TCP_CLOSES.into_iter().zip(st.tcp_closed)),
        "budgets": s.budgets().iter().map(|(k, u)| (k.to_string(), json!({
            "used": u.used, "limit": u.limit, "client_share": u.share, "clients": u.clients,
        }))).collect::<serde_json::Map<String, Value>>(),
    })
}

fn destinations_status(d: &crate::destinations::Destinations) -> Value {
    let st = d.gateway().status();
    let mut refused = serde_json::Map::new();
    for p in d.policies() {
        let by: serde_json::Map<String, Value> =
            p.refused().into_iter().filter(|(_, n)| *n > 0).map(|(r, n)| (r.as_str().to_string(), json!(n))).collect();
        refused.insert(p.plane().to_string(), Value::Object(by));
    }
    json!({
        "own": {
            "host_addresses": st.host_addresses,
            "directed_broadcasts": st.broadcasts,
            "configured": st.configured,
            "stale": st.stale,
            "refreshes": st.refreshes,
            "failures": st.failures,
        },
        "prefixes": st.prefixes.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "refused": refused,
    })
}

fn trgw_status(st: &trgw::RelayStats) -> Value {
    let t = &st.totals;
    json!({
        "calls": st.calls,
        "streams": st.streams,
        "calls_created": t.calls_created,
        "calls_deleted": t.calls_deleted,
        "calls_timed_out": t.calls_timed_out,
        "calls_timed_out_early": t.early_timed_out,
        "clients": st.clients,
        "refused": {
            "ports-exhausted": t.port_exhausted,
            "no-descriptors": t.descriptors_exhausted,
            "address-not-on-host": t.address_unavailable,
            "media-address": t.media_refused,
            "client-streams": t.client_limited,
            "reply-too-large": t.replies_too_large,
            "not-allowed": t.control_denied,
        },
        "latch_refused": st.latch_refused,
        "shared_sockets": st.shared.map(|s| json!({
            "steered": s.steered,
            "steer_failed": s.steer_failed,
            "no_leg": s.unmatched,
        })),
        "ng_cache": { "entries": st.ng_cache.entries, "bytes": st.ng_cache.bytes, "evicted": st.ng_cache.evicted },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_is_split_and_decoded() {
        let (p, q) = split_query("/bib/add?proto=tcp&v6=2001%3Adb8%3A%3A1%2380&v4=192.0.2.1%2380&x");
        assert_eq!(p, "/bib/add");
        assert_eq!(q[0], ("proto".into(), "tcp".into()));
        assert_eq!(q[1], ("v6".into(), "2001:db8::1#80".into()));
        assert_eq!(q[2], ("v4".into(), "192.0.2.1#80".into()));
        assert_eq!(q[3], ("x".into(), "".into()));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("a%"), "a%");
    }
}
