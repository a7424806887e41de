//! The gateway's one destination policy ([`dstpolicy`]) as `v6gate run`
//! builds it: one [`Gateway`] for the whole process — the host's
//! addresses, kept current by one watcher, plus every address and prefix
//! the configuration gives the gateway — and one [`Policy`] per plane
//! that sends where a client says, each with its own lists:
//!
//! | plane | what it checks | lists |
//! |---|---|---|
//! | `trgw` | SDP / rtpproxy media addresses | `[trgw] media-allow`, `media-deny` |
//! | `trgw-latch` | sources symmetric latching would learn | the same |
//! | `trt` | the IPv4 target a TRT connection or flow names | none |
//! | `dns64` | A records synthesised into AAAA (fails open) | none (`exclude-a` is its own) |
//! | `alg` | SIP next hops: Request-URI, Route, `maddr`, DNS answers, a stateless response's Via | `[alg] next-hop-allow`, `next-hop-deny` |
//!
//! Each plane's refusals are counted in
//! `v6gate_destination_refused_total{plane,reason}`.

use std::sync::{Arc, Mutex};

use dstpolicy::{Gateway, Lists, Policy, Spec, Watch};
use xlat::addr::{IpPrefix, Ivi, Rfc6052};

use crate::config::Config;

/// What the configuration says the gateway is: its configured and
/// advertised addresses (`[trgw]` interfaces, `[alg]` listen and
/// advertised addresses), its NAT64 pool4, and the translation prefixes
/// that lead to an IPv4 address (NAT64, SIIT with its EAMT, DNS64, TRT).
pub fn spec(cfg: &Config) -> Spec {
    let mut s = Spec::default();
    let mut own = |p: IpPrefix| {
        if !s.own.contains(&p) {
            s.own.push(p);
        }
    };
    if let Some(t) = &cfg.trgw {
        trgw::policy::own_addresses(t).into_iter().for_each(&mut own);
    }
    if let Some(a) = &cfg.alg {
        let listen = [a.listen_v6.ip(), a.listen_v4.ip()].into_iter().filter(|ip| !ip.is_unspecified());
        listen.chain(a.advertise_v6).chain(a.advertise_v4).map(IpPrefix::from).for_each(&mut own);
    }
    if let Some(n) = &cfg.nat64 {
        n.pool4.iter().map(|e| IpPrefix::from(e.prefix)).for_each(&mut own);
        if let Ok(p) = Rfc6052::new(n.pool6) {
            s.embeddings.add_rfc6052(p);
        }
    }
    if let Some(x) = &cfg.siit {
        match (x.pool6, x.mapping) {
            (Some(p), xlat::siit::MappingMode::Rfc6052) => {
                Rfc6052::new(p).into_iter().for_each(|p| s.embeddings.add_rfc6052(p))
            }
            (Some(p), xlat::siit::MappingMode::Ivi) => Ivi::new(p).into_iter().for_each(|i| s.embeddings.add_ivi(i)),
            (None, _) => {}
        }
        if let Ok(e) = xlat::addr::Eamt::new(&x.eamt) {
            s.embeddings.add_eamt(e);
        }
    }
    if let Some(d) = &cfg.dns64 {
        d.translation_prefixes().into_iter().flatten().for_each(|p| s.embeddings.add_rfc6052(p));
    }
    if let Some(t) = &cfg.trt {
        s.embeddings.add_rfc6052(t.prefix);
    }
    s
}

/// The process's gateway, its watcher and the planes' policies.
#[derive(Debug)]
pub struct Destinations {
    gateway: Arc<Gateway>,
    _watch: Watch,
    policies: Mutex<Vec<Arc<Policy>>>,
}

impl Destinations {
    /// Reads the host's addresses and starts watching them.
    pub fn start(cfg: &Config) -> anyhow::Result<Destinations> {
        let gateway = Gateway::of_host(spec(cfg));
        let watch = gateway.watch(dstpolicy::DEFAULT_BACKSTOP)?;
        let st = gateway.status();
        tracing::info!(
            host_addresses = st.host_addresses,
            configured = st.configured,
            prefixes = ?st.prefixes.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "destination policy: the gateway's own addresses read"
        );
        Ok(Destinations { gateway, _watch: watch, policies: Mutex::new(Vec::new()) })
    }

    /// The gateway.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// A new policy for `plane` with its `lists`, registered for `/metrics`.
    pub fn policy(&self, plane: &'static str, lists: Lists) -> Arc<Policy> {
        let p = Arc::new(Policy::new(plane, self.gateway.clone(), lists));
        self.register(p.clone());
        p
    }

    /// Registers a plane's policy for `/metrics` (a plane that built its
    /// own over [`Destinations::gateway`]).
    pub fn register(&self, p: Arc<Policy>) {
        function::lock(&self.policies).push(p);
    }

    /// Every registered policy.
    pub fn policies(&self) -> Vec<Arc<Policy>> {
        function::lock(&self.policies).clone()
    }

    /// A reload's configuration: new configured addresses and prefixes.
    pub fn reconfigure(&self, cfg: &Config) {
        self.gateway.reconfigure(spec(cfg));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dstpolicy::Reason;

    #[test]
    fn the_configuration_names_the_gateways_addresses_and_prefixes() {
        let text = r#"
[nat64]
pool6 = "2001:db8:64::/96"
pool4 = ["203.0.113.0/28"]
[siit]
pool6 = "2001:db8:46::/64"
eamt = [{ ipv6 = "2001:db8:ee::/120", ipv4 = "192.0.2.0/24" }]
[trt]
prefix = "2001:db8:7::/96"
[trgw]
[[trgw.interface]]
name = "a"
ipv4 = "192.0.2.1"
advertise-ipv4 = "198.51.100.1"
"#;
        let cfg = Config::parse(text).unwrap();
        let gw = Arc::new(Gateway::new(spec(&cfg)));
        let p = Policy::new("t", gw, Lists::default());
        let reason = |a: &str| p.judge(a.parse().unwrap()).err().map(|r| r.reason);
        for a in [
            "192.0.2.1",
            "198.51.100.1",
            "203.0.113.9",
            "2001:db8:64::203.0.113.9",
            "2001:db8:7::192.0.2.1",
            "2001:db8:46:0:c0:2:100:0",
            "2001:db8:ee::1",
            "64:ff9b::198.51.100.1",
        ] {
            assert_eq!(reason(a), Some(Reason::Own), "{a}");
        }
        assert_eq!(reason("2001:db8:64::192.0.2.50"), None);
        assert_eq!(reason("2001:db8:46:0:c0:2:3200:0"), None);
        assert_eq!(reason("2001:db8:ee::5"), None);
    }
}
