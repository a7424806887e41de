//! The admin HTTP API (tiny_http, one thread; loopback by default).
//!
//! | method | path           | answer |
//! |--------|----------------|--------|
//! | GET    | `/metrics`     | Prometheus text format, every name prefixed `v6gate_` |
//! | GET    | `/status`      | JSON: version, uptime, config file, functions, counters, table sizes, pool use |
//! | GET    | `/sessions`    | JSON list of NAT64 sessions (`?proto=tcp\|udp\|icmp`) |
//! | GET    | `/bib`         | JSON list of NAT64 BIB entries (`?proto=...`) |
//! | POST   | `/bib/add`     | add a static BIB entry: `?proto=tcp&v6=ADDR#PORT&v4=ADDR#PORT` |
//! | POST   | `/bib/remove`  | remove one, same parameters |
//! | POST   | `/reload`      | reload the configuration file, like SIGHUP |
//!
//! Errors are JSON `{"error":"..."}` with status 400 (bad request), 404
//! (unknown path, or the function is not configured) or 409 (refused).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::{json, Value};
use tiny_http::{Header, Method, Request, Response, Server};

use super::stats::{ENGINES, FAMILIES};
use super::Daemon;

/// The running admin server.
pub struct Admin {
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("addr", &self.server.server_addr().to_ip()).finish()
    }
}

impl Admin {
    /// Listen on `addr` and serve `daemon`.
    pub fn start(addr: SocketAddr, daemon: Arc<Daemon>) -> anyhow::Result<Admin> {
        let server = Arc::new(Server::http(addr).map_err(|e| anyhow::anyhow!("{e}"))?);
        let s = server.clone();
        let thread = std::thread::Builder::new().name("v6gate-admin".into()).spawn(move || {
            for req in s.incoming_requests() {
                serve(&daemon, req);
            }
        })?;
        Ok(Admin { server, thread: Some(thread) })
    }

    /// Stop serving.
    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

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
pub struct Reply {
    status: u16,
    body: String,
    json: bool,
}

impl Reply {
    fn json(status: u16, v: Value) -> Reply {
        Reply { status, body: v.to_string(), json: true }
    }
    fn error(status: u16, msg: impl Into<String>) -> Reply {
        Reply::json(status, json!({ "error": msg.into() }))
    }
}

fn serve(d: &Daemon, req: Request) {
    let (path, params) = split_query(req.url());
    let r = route(d, req.method(), path, &params);
    let ctype = if r.json { "application/json" } else { "text/plain; version=0.0.4" };
    let mut resp = Response::from_string(r.body).with_status_code(r.status);
    if let Ok(h) = Header::from_bytes("Content-Type", ctype) {
        resp = resp.with_header(h);
    }
    let _ = req.respond(resp);
}

/// Answer one request (no I/O: testable).
pub fn route(d: &Daemon, method: &Method, path: &str, params: &[(String, String)]) -> Reply {
    match (method, path) {
        (Method::Get, "/metrics") => Reply { status: 200, body: metrics(d), json: false },
        (Method::Get, "/status") => Reply::json(200, status(d)),
        (Method::Get, "/sessions")
        | (Method::Get, "/bib")
        | (Method::Post, "/bib/add")
        | (Method::Post, "/bib/remove") => {
            let eng = d.engines.load();
            let Some(n) = eng.nat64.as_ref() else { return Reply::error(404, "NAT64 is not configured") };
            match nat64_call(d, n, path, params) {
                Ok(v) => Reply::json(200, v),
                Err((code, m)) => Reply::error(code, m),
            }
        }
        (Method::Post, "/reload") => match d.reload() {
            Ok(g) => {
                d.reloads_ok.fetch_add(1, Ordering::Relaxed);
                log::info!("reloaded {} (generation {g}, admin API)", d.config_path.display());
                Reply::json(200, json!({ "generation": g }))
            }
            Err(e) => {
                d.reloads_failed.fetch_add(1, Ordering::Relaxed);
                log::error!("reload rejected, the old configuration stays: {e}");
                Reply::error(409, e)
            }
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
            log::info!(
                "nat64: static BIB entry {protocol} {ipv6} <-> {ipv4} {}",
                if path == "/bib/add" { "added" } else { "removed" }
            );
            Ok(json!({ "ok": true }))
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
    let last_err = super::lock(&d.last_reload_error).clone();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": d.started.elapsed().as_secs_f64(),
        "config_file": d.config_path.display().to_string(),
        "config_generation": eng.generation,
        "functions": d.functions(),
        "nat64": eng.nat64.as_ref().map(|n| serde_json::to_value(n.stats()).unwrap_or(Value::Null)),
        "dns64": super::lock(&d.dns64).as_ref().map(|s| serde_json::to_value(s.stats()).unwrap_or(Value::Null)),
        "device": { "name": d.device.0, "index": d.device.1, "workers": d.workers() },
        "routes": super::lock(&d.routes).iter().map(|r| r.to_string()).collect::<Vec<_>>(),
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
    })
}

/// The `/metrics` document (Prometheus text exposition format 0.0.4).
pub fn metrics(d: &Daemon) -> String {
    let t = d.totals();
    let eng = d.engines.load();
    let mut s = String::with_capacity(8192);
    let head = |s: &mut String, name: &str, ty: &str, help: &str| {
        let _ = writeln!(s, "# HELP v6gate_{name} {help}\n# TYPE v6gate_{name} {ty}");
    };
    head(&mut s, "info", "gauge", "Version of the running daemon.");
    let _ = writeln!(s, "v6gate_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
    head(&mut s, "uptime_seconds", "gauge", "Seconds since the daemon started.");
    let _ = writeln!(s, "v6gate_uptime_seconds {:.3}", d.started.elapsed().as_secs_f64());
    head(&mut s, "workers", "gauge", "Worker threads (one per TUN queue).");
    let _ = writeln!(s, "v6gate_workers {}", d.workers());
    head(&mut s, "config_generation", "gauge", "Configuration generation (1 at start, +1 per reload).");
    let _ = writeln!(s, "v6gate_config_generation {}", eng.generation);
    head(&mut s, "config_reloads_total", "counter", "Configuration reloads, by result.");
    let _ = writeln!(s, "v6gate_config_reloads_total{{result=\"ok\"}} {}", d.reloads_ok.load(Ordering::Relaxed));
    let _ = writeln!(s, "v6gate_config_reloads_total{{result=\"error\"}} {}", d.reloads_failed.load(Ordering::Relaxed));
    head(&mut s, "packets_total", "counter", "Packets read from (rx) and written to (tx) the TUN device, by family.");
    for (dir, a) in [("rx", t.rx_packets), ("tx", t.tx_packets)] {
        for (f, v) in FAMILIES.iter().zip(a) {
            let _ = writeln!(s, "v6gate_packets_total{{direction=\"{dir}\",family=\"{f}\"}} {v}");
        }
    }
    head(&mut s, "bytes_total", "counter", "Bytes read from (rx) and written to (tx) the TUN device, by family.");
    for (dir, a) in [("rx", t.rx_bytes), ("tx", t.tx_bytes)] {
        for (f, v) in FAMILIES.iter().zip(a) {
            let _ = writeln!(s, "v6gate_bytes_total{{direction=\"{dir}\",family=\"{f}\"}} {v}");
        }
    }
    head(&mut s, "engine_packets_total", "counter", "Packets handled, by engine.");
    for (e, v) in ENGINES.iter().zip(t.engine_packets) {
        let _ = writeln!(s, "v6gate_engine_packets_total{{engine=\"{e}\"}} {v}");
    }
    head(&mut s, "drops_total", "counter", "Packets dropped, by reason.");
    for (r, v) in t.drops.iter().chain(t.daemon_drops.iter().filter(|x| x.0 != "icmp-rate-limited")) {
        let _ = writeln!(s, "v6gate_drops_total{{reason=\"{r}\"}} {v}");
    }
    head(
        &mut s,
        "icmp_errors_total",
        "counter",
        "ICMP errors the translator originated, sent or suppressed by the rate limit.",
    );
    let limited = t.daemon_drops.iter().find(|x| x.0 == "icmp-rate-limited").map_or(0, |x| x.1);
    let _ = writeln!(s, "v6gate_icmp_errors_total{{result=\"sent\"}} {}", t.icmp_errors_sent);
    let _ = writeln!(s, "v6gate_icmp_errors_total{{result=\"rate-limited\"}} {limited}");
    if let Some(n) = eng.nat64.as_ref() {
        nat64_metrics(&mut s, &n.stats(), head);
    }
    if let Some(st) = super::lock(&d.dns64).as_ref().map(|x| x.stats()) {
        if let Ok(Value::Object(m)) = serde_json::to_value(st) {
            for (k, v) in m {
                let name = format!("dns64_{k}_total");
                head(&mut s, &name, "counter", "DNS64 counter (see docs/dns64.md).");
                let _ = writeln!(s, "v6gate_{name} {}", v.as_u64().unwrap_or(0));
            }
        }
    }
    s
}

fn nat64_metrics(s: &mut String, st: &nat64::Stats, head: impl Fn(&mut String, &str, &str, &str)) {
    let by = |s: &mut String,
              name: &str,
              ty: &str,
              help: &str,
              label: &str,
              m: &std::collections::BTreeMap<&'static str, u64>| {
        head(s, name, ty, help);
        for (k, v) in m {
            let _ = writeln!(s, "v6gate_{name}{{{label}=\"{k}\"}} {v}");
        }
    };
    by(s, "nat64_sessions", "gauge", "NAT64 sessions now, by protocol.", "proto", &st.sessions);
    by(s, "nat64_bib_entries", "gauge", "NAT64 BIB entries now, by protocol.", "proto", &st.bib);
    by(
        s,
        "nat64_sessions_created_total",
        "counter",
        "NAT64 sessions created, by protocol.",
        "proto",
        &st.sessions_created,
    );
    by(
        s,
        "nat64_sessions_expired_total",
        "counter",
        "NAT64 sessions expired, by protocol.",
        "proto",
        &st.sessions_expired,
    );
    by(s, "nat64_pool4_ports", "gauge", "pool4 ports (ICMP identifiers) per protocol.", "proto", &st.pool4_ports);
    by(
        s,
        "nat64_pool4_ports_used",
        "gauge",
        "pool4 ports (ICMP identifiers) in use, per protocol.",
        "proto",
        &st.pool4_ports_used,
    );
    by(
        s,
        "nat64_refused_total",
        "counter",
        "New NAT64 flows refused (an ICMP error may have been sent), by reason.",
        "reason",
        &st.refused,
    );
    for (name, ty, help, v) in [
        ("nat64_pool4_addresses", "gauge", "pool4 addresses.", st.pool4_addresses),
        ("nat64_natpt_hosts", "gauge", "NAT-PT: IPv6 hosts holding a pool4 address.", st.natpt_hosts),
        ("nat64_held_syns", "gauge", "Unsolicited IPv4 SYNs held now.", st.held_syns),
        (
            "nat64_held_syns_expired_total",
            "counter",
            "Held SYNs answered with ICMP Port Unreachable.",
            st.held_syns_expired,
        ),
        ("nat64_fragment_sets", "gauge", "Datagrams in reassembly now.", st.fragment_sets),
        ("nat64_reassembled_total", "counter", "Datagrams reassembled.", st.reassembled),
        ("nat64_fragment_sets_expired_total", "counter", "Reassemblies given up.", st.fragment_sets_expired),
        ("nat64_hairpinned_total", "counter", "Packets hairpinned (RFC 6146 §3.8).", st.hairpinned),
    ] {
        head(s, name, ty, help);
        let _ = writeln!(s, "v6gate_{name} {v}");
    }
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
