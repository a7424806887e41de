//! The translation engines a configuration builds, and which one handles a
//! packet.
//!
//! Dispatch, when several functions are configured: NAT64 owns IPv6
//! packets whose destination is in its pool6 and IPv4 packets whose
//! destination is in its pool4; SIIT handles everything else. With one
//! function configured, it gets every packet.
//!
//! An [`Engines`] is immutable once built; reload builds a complete new one
//! and swaps it in atomically (see `daemon::run`).

use std::collections::BTreeSet;

use xlat::addr::{Ivi, Prefix6};
use xlat::siit::{MappingMode, Translator};
use xlat::{Out, Verdict};

use crate::config::{Config, Error, IpPrefix};

/// Which engine handled a packet (index into [`super::stats::ENGINES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    /// Stateless SIIT (RFC 7915).
    Siit = 0,
    /// Stateful NAT64 (RFC 6146).
    Nat64 = 1,
}

/// Everything a worker needs to translate, built from one configuration.
#[derive(Debug)]
pub struct Engines {
    /// `[siit]`.
    pub siit: Option<Translator>,
    /// Configuration generation (1 = as started, +1 per successful reload).
    pub generation: u64,
    /// ICMP errors each worker may originate per second (0 = unlimited).
    pub icmp_rate: u64,
    /// Each worker's token-bucket depth.
    pub icmp_burst: u64,
    /// `[siit] amend-udp-checksum-zero`: workers hold zero-checksum UDP
    /// fragment sets (all fragments of a datagram reach the same queue:
    /// the TUN hashes fragments on their addresses only).
    pub amend: bool,
}

impl Engines {
    /// Build every engine `cfg` configures, for `workers` workers.
    /// `generation` is stored as given.
    pub fn build(cfg: &Config, generation: u64, workers: usize) -> Result<Engines, Error> {
        cfg.check()?;
        let siit = match &cfg.siit {
            Some(_) => Some(cfg.siit_translator()?),
            None => None,
        };
        let w = workers.max(1) as u64;
        let rate = u64::from(cfg.daemon.icmp_error_rate);
        Ok(Engines {
            amend: cfg.siit.as_ref().is_some_and(|s| s.amend_udp_checksum_zero),
            siit,
            generation,
            icmp_rate: rate.div_ceil(w),
            icmp_burst: u64::from(cfg.daemon.icmp_error_burst).div_ceil(w),
        })
    }

    /// Names of the functions enabled, for `/status`.
    pub fn functions(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.siit.is_some() {
            v.push("siit");
        }
        v
    }

    /// The engine that owns `pkt` (see the module documentation).
    #[inline]
    pub fn owner(&self, _pkt: &[u8]) -> EngineKind {
        EngineKind::Siit
    }

    /// Translate `pkt` with engine `kind`; `now_ns` is the daemon's
    /// monotonic clock (for the stateful engines).
    #[inline]
    pub fn translate_with(&self, kind: EngineKind, pkt: &[u8], _now_ns: u64, out: &mut Out) -> Verdict {
        match (kind, &self.siit) {
            (EngineKind::Siit, Some(t)) => t.translate(pkt, out),
            _ => {
                out.clear();
                Verdict::Drop(xlat::DropReason::Unsupported)
            }
        }
    }
}

/// The routes `[tun] auto-routes` adds: SIIT pool6 (the IVI prefix with
/// `mapping = "ivi"`) and the IPv4 prefixes of the EAMT; then `[tun] routes`.
/// Sorted and de-duplicated.
pub fn routes_for(cfg: &Config) -> Vec<IpPrefix> {
    let mut set = BTreeSet::new();
    let key = |p: &IpPrefix| p.to_string();
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
    }
    v.extend(cfg.tun.routes.iter().copied());
    v.retain(|p| set.insert(key(p)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_routes_cover_pool6_and_eamt_v4() {
        let c = Config::parse(
            r#"[siit]
            pool6 = "64:ff9b:1::/96"
            eamt = [["2001:db8:6::/120", "192.0.2.0/24"]]
            [tun]
            routes = ["198.51.100.0/24", "192.0.2.0/24"]"#,
        )
        .unwrap();
        let r: Vec<String> = routes_for(&c).iter().map(|p| p.to_string()).collect();
        assert_eq!(r, ["64:ff9b:1::/96", "192.0.2.0/24", "198.51.100.0/24"]);
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[tun]\nauto-routes = false\n").unwrap();
        assert!(routes_for(&c).is_empty());
    }

    #[test]
    fn siit_engine_translates() {
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n").unwrap();
        let e = Engines::build(&c, 1, 2).unwrap();
        assert_eq!(e.functions(), ["siit"]);
        assert_eq!((e.icmp_rate, e.icmp_burst), (500, 50));
        let mut out = Out::new();
        assert_eq!(e.owner(&[0x45]), EngineKind::Siit);
        let v = e.translate_with(EngineKind::Siit, &[0x45], 0, &mut out);
        assert_eq!(v, Verdict::Drop(xlat::DropReason::Truncated));
    }
}
