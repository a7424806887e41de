//! RFC 3263 server location over the system resolver (hickory): NAPTR
//! (`SIP+D2U` / `SIP+D2T`), then SRV (`_sip._udp` / `_sip._tcp`), then
//! AAAA/A, with a TTL-bounded cache. Lookups run in the background: a miss
//! answers [`Resolution::Pending`] and wakes the runner when done.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;
use tokio::sync::Notify;

use crate::config::Transport;
use crate::realm::{Resolution, Resolver, Target};

type Key = (String, Option<u16>, Option<Transport>);

#[derive(Debug, Clone)]
enum Entry {
    Pending,
    Done(Instant, Resolution),
}

/// The runner's resolver.
pub struct HickoryResolver {
    inner: Arc<TokioResolver>,
    cache: Arc<Mutex<HashMap<Key, Entry>>>,
    wake: Arc<Notify>,
}

/// How long answers (and failures) are kept at most.
const MAX_TTL: Duration = Duration::from_secs(300);
const NEG_TTL: Duration = Duration::from_secs(30);

/// One NAPTR record's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naptr {
    /// Order.
    pub order: u16,
    /// Preference.
    pub preference: u16,
    /// Flags (`s` for SRV).
    pub flags: String,
    /// Service (`SIP+D2U`, ...).
    pub service: String,
    /// Replacement (the SRV name).
    pub replacement: String,
}

/// RFC 3263 §4.1: the NAPTR records usable for SIP over UDP/TCP, in order
/// (order, then preference), as (transport, SRV name).
pub fn naptr_choices(mut recs: Vec<Naptr>) -> Vec<(Transport, String)> {
    recs.sort_by_key(|r| (r.order, r.preference));
    recs.into_iter()
        .filter(|r| r.flags.eq_ignore_ascii_case("s"))
        .filter_map(|r| {
            let t = if r.service.eq_ignore_ascii_case("SIP+D2U") {
                Transport::Udp
            } else if r.service.eq_ignore_ascii_case("SIP+D2T") {
                Transport::Tcp
            } else {
                return None;
            };
            Some((t, r.replacement.trim_end_matches('.').to_string()))
        })
        .collect()
}

/// RFC 2782 order: priority ascending, heavier weight first within a
/// priority (deterministic instead of the weighted lottery).
pub fn srv_order(mut recs: Vec<(u16, u16, u16, String)>) -> Vec<(u16, String)> {
    recs.sort_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
    recs.into_iter().filter(|r| r.3 != ".").map(|r| (r.2, r.3.trim_end_matches('.').to_string())).collect()
}

impl HickoryResolver {
    /// Uses /etc/resolv.conf.
    pub fn new(wake: Arc<Notify>) -> Result<Self, String> {
        let r = TokioResolver::builder_tokio().map_err(|e| e.to_string())?.build();
        Ok(HickoryResolver { inner: Arc::new(r), cache: Arc::default(), wake })
    }
}

async fn ips(r: &TokioResolver, host: &str) -> Vec<IpAddr> {
    match r.lookup_ip(host).await {
        Ok(l) => l.iter().collect(),
        Err(_) => Vec::new(),
    }
}

async fn srv(r: &TokioResolver, name: &str, t: Transport) -> Vec<Target> {
    let Ok(l) = r.srv_lookup(name).await else { return Vec::new() };
    let recs = l.iter().map(|s| (s.priority(), s.weight(), s.port(), s.target().to_utf8())).collect();
    let mut out = Vec::new();
    for (port, host) in srv_order(recs) {
        for ip in ips(r, &host).await {
            out.push(Target { addr: SocketAddr::new(ip, port), transport: t });
        }
    }
    out
}

async fn locate(r: &TokioResolver, host: &str, port: Option<u16>, transport: Option<Transport>) -> Resolution {
    // §4.1/§4.2: an explicit port or transport skips NAPTR (and a port SRV).
    if let Some(p) = port {
        let t = transport.unwrap_or_default();
        let v: Vec<Target> =
            ips(r, host).await.into_iter().map(|ip| Target { addr: SocketAddr::new(ip, p), transport: t }).collect();
        return if v.is_empty() { Resolution::Failed(format!("no address for {host}")) } else { Resolution::Ready(v) };
    }
    if transport.is_none() {
        if let Ok(l) = r.lookup(host, RecordType::NAPTR).await {
            let recs = l
                .iter()
                .filter_map(|d| match d {
                    RData::NAPTR(n) => Some(Naptr {
                        order: n.order(),
                        preference: n.preference(),
                        flags: String::from_utf8_lossy(n.flags()).into_owned(),
                        service: String::from_utf8_lossy(n.services()).into_owned(),
                        replacement: n.replacement().to_utf8(),
                    }),
                    _ => None,
                })
                .collect();
            for (t, name) in naptr_choices(recs) {
                let v = srv(r, &name, t).await;
                if !v.is_empty() {
                    return Resolution::Ready(v);
                }
            }
        }
    }
    let ts: Vec<Transport> = match transport {
        Some(t) => vec![t],
        None => vec![Transport::Udp, Transport::Tcp],
    };
    for t in ts {
        let name = format!("_sip._{}.{host}", if t == Transport::Udp { "udp" } else { "tcp" });
        let v = srv(r, &name, t).await;
        if !v.is_empty() {
            return Resolution::Ready(v);
        }
    }
    let t = transport.unwrap_or_default();
    let v: Vec<Target> =
        ips(r, host).await.into_iter().map(|ip| Target { addr: SocketAddr::new(ip, 5060), transport: t }).collect();
    if v.is_empty() {
        Resolution::Failed(format!("no address for {host}"))
    } else {
        Resolution::Ready(v)
    }
}

impl Resolver for HickoryResolver {
    fn resolve(&mut self, host: &str, port: Option<u16>, transport: Option<Transport>, now: Instant) -> Resolution {
        let key: Key = (host.to_ascii_lowercase(), port, transport);
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match cache.get(&key) {
            Some(Entry::Done(exp, r)) if *exp > now => return r.clone(),
            Some(Entry::Pending) => return Resolution::Pending,
            _ => {}
        }
        if cache.len() > 10_000 {
            cache.retain(|_, e| matches!(e, Entry::Done(exp, _) if *exp > now));
        }
        cache.insert(key.clone(), Entry::Pending);
        drop(cache);
        let (inner, cache, wake) = (self.inner.clone(), self.cache.clone(), self.wake.clone());
        tokio::spawn(async move {
            let r = tokio::time::timeout(Duration::from_secs(8), locate(&inner, &key.0, key.1, key.2))
                .await
                .unwrap_or_else(|_| Resolution::Failed("DNS timeout".into()));
            let ttl = if matches!(r, Resolution::Ready(_)) { MAX_TTL } else { NEG_TTL };
            cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key, Entry::Done(Instant::now() + ttl, r));
            wake.notify_one();
        });
        Resolution::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3263_4_1_naptr_selection() {
        let n = |o, p, f: &str, s: &str, r: &str| Naptr {
            order: o,
            preference: p,
            flags: f.into(),
            service: s.into(),
            replacement: r.into(),
        };
        let v = naptr_choices(vec![
            n(50, 50, "s", "SIPS+D2T", "_sips._tcp.example.com."),
            n(90, 50, "s", "SIP+D2T", "_sip._tcp.example.com."),
            n(100, 50, "s", "SIP+D2U", "_sip._udp.example.com."),
            n(10, 10, "u", "SIP+D2U", "!regexp!"),
        ]);
        assert_eq!(
            v,
            [
                (Transport::Tcp, "_sip._tcp.example.com".to_string()),
                (Transport::Udp, "_sip._udp.example.com".to_string())
            ]
        );
    }

    #[test]
    fn rfc2782_srv_order() {
        let v = srv_order(vec![
            (20, 0, 5062, "c.example.".into()),
            (10, 1, 5060, "b.example.".into()),
            (10, 5, 5061, "a.example.".into()),
            (0, 0, 0, ".".into()),
        ]);
        assert_eq!(
            v,
            [(5061, "a.example".to_string()), (5060, "b.example".to_string()), (5062, "c.example".to_string())]
        );
    }
}
