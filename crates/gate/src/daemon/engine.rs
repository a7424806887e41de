//! The translation engines a configuration builds, and which one handles a
//! packet.
//!
//! Dispatch, when several functions are configured: NAT64 owns IPv6
//! packets whose destination is in its pool6 and IPv4 packets whose
//! destination is in its pool4; SIIT handles everything else. With one
//! function configured, it gets every packet.
//!
//! An [`Engines`] is immutable once built (the NAT64 state tables inside
//! are shared and thread-safe); reload builds a complete new one and swaps
//! it in atomically (see `daemon::Daemon::reload`).

use core::net::{IpAddr, Ipv6Addr};
use std::collections::BTreeSet;
use std::sync::Arc;

use xlat::addr::{IpPrefix, Ivi, Prefix4, Prefix6};
use xlat::siit::{MappingMode, Translator, UdpChecksumZero};
use xlat::{Out, Verdict};

use crate::config::{Config, Error, ErrorKind};

/// Which engine handled a packet (index into [`super::stats::ENGINES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// Stateless SIIT (RFC 7915).
    Siit = 0,
    /// Stateful NAT64 (RFC 6146) or NAT-PT.
    Nat64 = 1,
}

/// Everything a worker needs to translate, built from one configuration.
#[derive(Debug)]
pub struct Engines {
    /// `[siit]`.
    pub siit: Option<Translator>,
    /// `[nat64]`.
    pub nat64: Option<Arc<nat64::Nat64>>,
    /// NAT64 pool6 and pool4 prefixes, for dispatch.
    nat64_pool6: Option<Prefix6>,
    nat64_pool4: Vec<Prefix4>,
    /// Configuration generation (1 = as started, +1 per successful reload).
    pub generation: u64,
    /// ICMP errors each worker may originate per second (0 = unlimited).
    pub icmp_rate: u64,
    /// Each worker's token-bucket depth.
    pub icmp_burst: u64,
    /// `[siit] amend-udp-checksum-zero = "hold"`: workers hold zero-checksum UDP
    /// fragment sets (all fragments of a datagram reach the same queue:
    /// the TUN hashes fragments on their addresses only).
    pub amend: bool,
}

impl Engines {
    /// Build every engine `cfg` configures, for `workers` workers.
    /// `generation` is stored as given. With `prev`, NAT64 state (BIB,
    /// sessions, the static entries added at run time) is carried over
    /// ([`nat64::Nat64::reconfigure`]); added entries the new
    /// configuration cannot hold are logged.
    pub fn build(
        cfg: &Config,
        generation: u64,
        workers: usize,
        prev: Option<&Engines>,
        now_ns: u64,
    ) -> Result<Engines, Error> {
        cfg.check()?;
        let siit = match &cfg.siit {
            Some(_) => Some(cfg.siit_translator()?),
            None => None,
        };
        let nat = match (&cfg.nat64, prev.and_then(|p| p.nat64.as_ref())) {
            (Some(n), Some(old)) => {
                let next =
                    old.reconfigure(n.clone(), cfg.nat64_xlat_config(), now_ns).map_err(|e| cfg.nat64_error(e))?;
                for (e, why) in next.bib_lost() {
                    tracing::warn!(
                        "nat64: static BIB entry {} {} <-> {} (added with `v6gate ctl bib add`) dropped by the reload: {why}",
                        e.protocol,
                        e.ipv6,
                        e.ipv4
                    );
                }
                Some(Arc::new(next))
            }
            (Some(_), None) => Some(Arc::new(cfg.nat64_translator()?)),
            (None, _) => None,
        };
        let w = workers.max(1) as u64;
        let rate = u64::from(cfg.daemon.icmp_error_rate);
        Ok(Engines {
            amend: cfg.siit.as_ref().is_some_and(|s| s.amend_udp_checksum_zero == UdpChecksumZero::Hold),
            siit,
            nat64_pool6: cfg.nat64.as_ref().map(|n| n.pool6),
            nat64_pool4: cfg.nat64.as_ref().map(|n| n.pool4.iter().map(|e| e.prefix).collect()).unwrap_or_default(),
            nat64: nat,
            generation,
            icmp_rate: rate.div_ceil(w),
            icmp_burst: u64::from(cfg.daemon.icmp_error_burst).div_ceil(w),
        })
    }

    /// Names of the packet functions enabled, for `/status`.
    pub fn functions(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.siit.is_some() {
            v.push("siit");
        }
        if let Some(n) = &self.nat64 {
            v.push(match n.config().mode {
                nat64::Mode::Nat64 => "nat64",
                nat64::Mode::Natpt => "natpt",
            });
        }
        v
    }

    /// The engine that owns `pkt` (see the module documentation).
    #[inline]
    pub fn owner(&self, pkt: &[u8]) -> EngineKind {
        if self.nat64.is_none() {
            return EngineKind::Siit;
        }
        if self.siit.is_none() {
            return EngineKind::Nat64;
        }
        let mine = match pkt.first().map(|b| b >> 4) {
            Some(6) if pkt.len() >= 40 => {
                let mut d = [0u8; 16];
                d.copy_from_slice(&pkt[24..40]);
                self.nat64_pool6.is_some_and(|p| p.contains(&d.into()))
            }
            Some(4) if pkt.len() >= 20 => {
                let d = core::net::Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
                self.nat64_pool4.iter().any(|p| p.contains(d))
            }
            _ => false,
        };
        if mine {
            EngineKind::Nat64
        } else {
            EngineKind::Siit
        }
    }

    /// Translate `pkt` with engine `kind`; `now_ns` is the daemon's
    /// monotonic clock (for the stateful engines).
    #[inline]
    pub fn translate_with(&self, kind: EngineKind, pkt: &[u8], now_ns: u64, out: &mut Out) -> Verdict {
        match (kind, &self.siit, &self.nat64) {
            (EngineKind::Siit, Some(t), _) => t.translate(pkt, out),
            (EngineKind::Nat64, _, Some(n)) => n.translate(pkt, now_ns, out),
            _ => {
                out.clear();
                Verdict::Drop(xlat::DropReason::Unsupported)
            }
        }
    }
}

/// The routes `[tun] auto-routes` adds: SIIT pool6 (the IVI prefix with
/// `mapping = "ivi"`), the IPv4 prefixes of the EAMT, NAT64 pool6 and
/// pool4; then `[tun] routes`. De-duplicated, in that order.
pub fn routes_for(cfg: &Config) -> Vec<IpPrefix> {
    let mut set = BTreeSet::new();
    let mut v: Vec<IpPrefix> = Vec::new();
    if cfg.tun.auto_routes {
        if let Some(s) = &cfg.siit {
            if let Some(p) = s.pool6 {
                let p: Prefix6 = match s.mapping {
                    MappingMode::Rfc6052 => p,
                    MappingMode::Ivi => Ivi::new(p).map(|i| i.ivi_prefix()).unwrap_or(p),
                };
                v.push(IpPrefix::V6(p));
            }
            for (_, p4) in &s.eamt {
                v.push(IpPrefix::V4(*p4));
            }
        }
        if let Some(n) = &cfg.nat64 {
            v.push(IpPrefix::V6(n.pool6));
            for e in &n.pool4 {
                v.push(IpPrefix::V4(e.prefix));
            }
        }
    }
    v.extend(cfg.tun.routes.iter().copied());
    v.retain(|p| set.insert(p.to_string()));
    v
}

/// Building each engine from its table. [`Config::check`] builds them too,
/// so a configuration that checks is one the daemon can run.
impl Config {
    /// The RFC 7915 header settings NAT64 uses: those of `[siit]` when it is
    /// configured (MTUs, TOS, `ipv4-address`, ...), else the defaults.
    /// `amend-udp-checksum-zero` is SIIT's only, as in Jool: a NAT64
    /// reassembles and always computes a zero UDP checksum (RFC 6146 §3.4).
    pub fn nat64_xlat_config(&self) -> xlat::siit::Config {
        let c = self.siit.clone().unwrap_or_default();
        xlat::siit::Config { amend_udp_checksum_zero: UdpChecksumZero::Compute, ..c }
    }

    /// Build the stateful translator from `[nat64]` (and the header
    /// settings of [`Config::nat64_xlat_config`]).
    pub fn nat64_translator(&self) -> Result<nat64::Nat64, Error> {
        let Some(c) = &self.nat64 else {
            return Err(Error::new(ErrorKind::Missing, Some("[nat64]".into()), "table missing").in_file(self.origin()));
        };
        nat64::Nat64::with_xlat(c.clone(), self.nat64_xlat_config()).map_err(|e| self.nat64_error(e))
    }

    /// A `nat64` crate error as a configuration error naming `[nat64] key`.
    pub fn nat64_error(&self, e: nat64::Error) -> Error {
        match e {
            nat64::Error::Config(c) => {
                let key = c
                    .key
                    .strip_prefix("nat64.")
                    .map_or_else(|| format!("[siit] {}", c.key), |k| format!("[nat64] {k}"));
                Error::new(ErrorKind::Invalid, Some(key), c.msg)
            }
            nat64::Error::Bib(m) => Error::new(ErrorKind::Invalid, Some("[nat64] bib".into()), m),
        }
        .in_file(self.origin())
    }

    /// Build the stateless translator from `[siit]`.
    pub fn siit_translator(&self) -> Result<Translator, Error> {
        let Some(c) = &self.siit else {
            return Err(Error::new(
                ErrorKind::Missing,
                Some("[siit]".into()),
                "table missing: the translator needs it",
            )
            .in_file(self.origin()));
        };
        let build = |c: xlat::siit::Config| {
            Translator::new(c).map_err(|e| {
                Error::new(ErrorKind::Invalid, Some(format!("[siit] {}", e.key)), e.msg).in_file(self.origin())
            })
        };
        let t = build(c.clone())?;
        // Nothing in [siit] gives the source of the ICMPv6 errors the
        // translator sends: use the TUN device's own IPv6 address, as Jool
        // uses its interface's, before the packet plane's fixed default.
        match self.tun.addresses.iter().find_map(|a| own_ipv6(a.addr)) {
            Some(a) if t.ipv6_address_is_fallback() => build(xlat::siit::Config { ipv6_address: Some(a), ..c.clone() }),
            _ => Ok(t),
        }
    }
}

/// An address of the translator's own that can source its ICMPv6 errors:
/// IPv6, unicast, neither unspecified, loopback nor link-local.
fn own_ipv6(a: IpAddr) -> Option<Ipv6Addr> {
    match a {
        IpAddr::V6(v6) if !v6.is_unspecified() && !v6.is_loopback() && !v6.is_multicast() => {
            (v6.segments()[0] & 0xffc0 != 0xfe80).then_some(v6)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_routes_cover_pool6_eamt_v4_and_nat64_pools() {
        let c = Config::parse(
            r#"[siit]
            pool6 = "64:ff9b:1::/96"
            eamt = [["2001:db8:6::/120", "192.0.2.0/24"]]
            [nat64]
            pool6 = "64:ff9b::/96"
            pool4 = ["203.0.113.0/30"]
            [tun]
            routes = ["198.51.100.0/24", "192.0.2.0/24"]"#,
        )
        .unwrap();
        let r: Vec<String> = routes_for(&c).iter().map(|p| p.to_string()).collect();
        assert_eq!(r, ["64:ff9b:1::/96", "192.0.2.0/24", "64:ff9b::/96", "203.0.113.0/30", "198.51.100.0/24"]);
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[tun]\nauto-routes = false\n").unwrap();
        assert!(routes_for(&c).is_empty());
    }

    #[test]
    fn siit_engine_translates() {
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n").unwrap();
        let e = Engines::build(&c, 1, 2, None, 0).unwrap();
        assert_eq!(e.functions(), ["siit"]);
        assert_eq!((e.icmp_rate, e.icmp_burst), (500, 50));
        let mut out = Out::new();
        assert_eq!(e.owner(&[0x45]), EngineKind::Siit);
        let v = e.translate_with(EngineKind::Siit, &[0x45], 0, &mut out);
        assert_eq!(v, Verdict::Drop(xlat::DropReason::Truncated));
    }

    fn v6_to(dst: &str) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[24..40].copy_from_slice(&dst.parse::<core::net::Ipv6Addr>().unwrap().octets());
        p
    }

    fn v4_to(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn dispatch_by_nat64_pools() {
        let both = Config::parse(
            r#"[siit]
            pool6 = "64:ff9b:1::/96"
            [nat64]
            pool6 = "64:ff9b::/96"
            pool4 = ["203.0.113.0/30"]"#,
        )
        .unwrap();
        let e = Engines::build(&both, 1, 1, None, 0).unwrap();
        assert_eq!(e.functions(), ["siit", "nat64"]);
        assert_eq!(e.owner(&v6_to("64:ff9b::198.51.100.1")), EngineKind::Nat64);
        assert_eq!(e.owner(&v6_to("64:ff9b:1::198.51.100.1")), EngineKind::Siit);
        assert_eq!(e.owner(&v4_to([203, 0, 113, 2])), EngineKind::Nat64);
        assert_eq!(e.owner(&v4_to([203, 0, 113, 4])), EngineKind::Siit);
        assert_eq!(e.owner(&[0x60]), EngineKind::Siit, "too short to tell: SIIT drops it");
        let only = Config::parse("[nat64]\npool4 = [\"203.0.113.0/30\"]\n").unwrap();
        let e = Engines::build(&only, 1, 1, None, 0).unwrap();
        assert_eq!(e.owner(&v4_to([198, 51, 100, 1])), EngineKind::Nat64);
        let mut out = Out::new();
        assert!(matches!(e.translate_with(EngineKind::Siit, &v4_to([1, 2, 3, 4]), 0, &mut out), Verdict::Drop(_)));
        // Rebuilding from a previous generation carries the NAT64 state.
        let e2 = Engines::build(&only, 2, 1, Some(&e), 0).unwrap();
        assert_eq!(e2.generation, 2);
        assert!(e2.nat64.is_some());
    }

    #[test]
    fn eamt_only_icmpv6_errors_come_from_the_tun_address() {
        // No pool6, no rfc6791v6-prefix, no ipv6-address: the first usable
        // IPv6 address of [tun] (as Jool uses its interface's), else the
        // packet plane's documented default.
        let siit = "[siit]\neamt = [[\"2001:db8:6::/120\", \"198.51.100.0/24\"]]\n";
        let t = Config::parse(siit).unwrap().siit_translator().unwrap();
        assert_eq!(t.ipv6_address(), xlat::siit::DEFAULT_IPV6_ADDRESS);
        let tun = "[tun]\naddresses = [\"192.0.2.1/24\", \"fe80::1/64\", \"2001:db8:ff::1/64\"]\n";
        let t = Config::parse(&format!("{siit}{tun}")).unwrap().siit_translator().unwrap();
        assert_eq!(t.ipv6_address(), "2001:db8:ff::1".parse::<Ipv6Addr>().unwrap());
        // Anything [siit] gives comes first.
        let own = format!("{siit}rfc6791v6-prefix = \"2001:db8:ee::/96\"\n{tun}");
        let t = Config::parse(&own).unwrap().siit_translator().unwrap();
        assert_eq!(t.ipv6_address(), "2001:db8:ee::".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn nat64_takes_siit_header_settings_but_not_amend_udp_checksum_zero() {
        let c = Config::parse(
            "[siit]\npool6 = \"64:ff9b:1::/96\"\namend-udp-checksum-zero = false\nipv4-mtu = 1400\n\
             [nat64]\npool4 = [\"192.0.2.1/32\"]\n",
        )
        .unwrap();
        let x = c.nat64_xlat_config();
        assert_eq!((x.amend_udp_checksum_zero, x.ipv4_mtu), (UdpChecksumZero::Compute, 1400));
    }
}
