//! The relay's XDP fast path (`[teredo.relay] xdp`): the runner's side of
//! `xdp::teredo`. The relay core stays the one owner of trust (RFC 4380
//! §5.4): this mirrors its trusted peers into the BPF map, removes them
//! when the core no longer trusts them (expiry, eviction, a new mapping),
//! and feeds back what only the fast path saw (the last packet from a
//! peer), so a peer whose traffic is all in XDP does not expire.

use core::net::{Ipv6Addr, SocketAddrV4};
use std::collections::HashMap;

use anyhow::{Context as _, Result};
use xdp::teredo::{TeredoFastPath, TeredoSettings};

use super::relay::Relay;
use crate::config::{RelayXdp, TeredoRelayTable};
use crate::table::Millis;

/// How often the mirror is swept (expiry, refresh from the fast path), ms.
const SWEEP_MS: Millis = 250;
/// A mirrored peer whose last slow-path packet is older than this gets
/// its last-seen time from the fast path's map, ms.
const REFRESH_AFTER_MS: Millis = 5_000;

crate::counters! {
    /// Counters of the mirror.
    MirrorStats {
        /// Peers written into the fast path's map.
        inserted,
        /// Peers removed from it (expired, evicted, untrusted).
        removed,
        /// Times the slow path kept a peer alive from the fast path's last-seen time.
        refreshed,
        /// Peers left on the slow path: the map was full.
        map_full,
        /// Map operations that failed otherwise.
        errors,
    }
}

/// One mirrored peer: its mapping, and the fast path's last-seen time
/// as last read (`seen_ns`, at `read_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    mapped: SocketAddrV4,
    seen_ns: u64,
    read_at: Millis,
}

/// The loaded fast path and the mirror of the relay's trusted peers.
#[derive(Debug)]
pub struct Mirror {
    fp: TeredoFastPath,
    mirrored: HashMap<Ipv6Addr, Entry>,
    last_sweep: Millis,
    /// Counters.
    pub stats: MirrorStats,
}

/// CLOCK_MONOTONIC in ns (bpf_ktime_get_ns's clock).
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64))
        .unwrap_or(0)
}

impl Mirror {
    /// Load the fast path for `t` and attach it as `x` says (in the
    /// caller's network namespace).
    pub fn start(t: &TeredoRelayTable, x: &RelayXdp) -> Result<Mirror> {
        let settings = TeredoSettings {
            relay: t.bind,
            prefix_hi32: t.core.prefix_hi32,
            mtu6: t.tun.mtu,
            max_peers: u32::try_from(t.core.max_peers).unwrap_or(u32::MAX),
        };
        let mut fp = TeredoFastPath::load(settings).context("[teredo.relay] xdp")?;
        for i in &x.interfaces {
            if let Some(a) = fp.attach(i, x.mode).with_context(|| format!("[teredo.relay] xdp-interfaces: {i}"))? {
                tracing::info!("teredo relay: XDP fast path on {} ({:?})", a.iface, a.mode);
            }
            // bpf_fib_lookup refuses to route from an interface that does
            // not forward the family: every packet would pass (pass-fib).
            for (fam, what) in
                [("ipv4", "packets to clients (IPv6 side)"), ("ipv6", "packets from clients (IPv4 side)")]
            {
                let key = format!("/proc/sys/net/{fam}/conf/{i}/forwarding");
                if std::fs::read_to_string(&key).is_ok_and(|v| v.trim() == "0") {
                    tracing::warn!(
                        "teredo relay: {fam} forwarding is off on {i}: if {i} carries {what}, they all take the \
                         slow path (pass-fib); sysctl net.{fam}.conf.{i}.forwarding=1"
                    );
                }
            }
        }
        Ok(Mirror::new(fp))
    }

    /// A mirror into `fp` (loaded, attached or not).
    pub fn new(fp: TeredoFastPath) -> Mirror {
        Mirror { fp, mirrored: HashMap::new(), last_sweep: 0, stats: MirrorStats::default() }
    }

    /// The fast path.
    pub fn fast_path(&self) -> &TeredoFastPath {
        &self.fp
    }

    fn put(&mut self, peer: Ipv6Addr, mapped: SocketAddrV4, now: Millis) {
        if self.mirrored.get(&peer).is_some_and(|e| e.mapped == mapped) {
            return;
        }
        match self.fp.peer_insert(peer, mapped) {
            Ok(()) => {
                self.mirrored.insert(peer, Entry { mapped, seen_ns: 0, read_at: now });
                self.stats.inserted += 1;
            }
            Err(xdp::Error::MapFull(_)) => {
                // A stale mapping must not stay behind the new one.
                self.drop_peer(peer);
                self.stats.map_full += 1;
            }
            Err(e) => {
                self.drop_peer(peer);
                self.stats.errors += 1;
                tracing::debug!("teredo relay: mirroring {peer}: {e}");
            }
        }
    }

    fn drop_peer(&mut self, peer: Ipv6Addr) {
        if self.mirrored.remove(&peer).is_some() {
            match self.fp.peer_remove(peer) {
                Ok(_) => self.stats.removed += 1,
                Err(e) => {
                    self.stats.errors += 1;
                    tracing::warn!("teredo relay: removing {peer} from the XDP map: {e}");
                }
            }
        }
    }

    /// Apply the core's trust changes; every `SWEEP_MS` (250 ms), refresh peers
    /// the fast path kept busy and remove those the core no longer trusts.
    /// Call before the core's `tick`.
    pub fn sync(&mut self, core: &mut Relay, now: Millis) {
        for peer in core.take_trust_changes() {
            match core.trusted_mapping(&peer, now) {
                Some(m) => self.put(peer, m, now),
                None => self.drop_peer(peer),
            }
        }
        if now < self.last_sweep + SWEEP_MS {
            return;
        }
        self.last_sweep = now;
        let mono = monotonic_ns();
        let peers: Vec<(Ipv6Addr, Entry)> = self.mirrored.iter().map(|(a, e)| (*a, *e)).collect();
        for (peer, e) in peers {
            if core.last_rx(&peer, now).is_some_and(|t| now.saturating_sub(t) >= REFRESH_AFTER_MS) {
                self.refresh(core, peer, e, now, mono);
            }
            match core.trusted_mapping(&peer, now) {
                Some(m) if m == e.mapped => {}
                Some(m) => self.put(peer, m, now),
                None => self.drop_peer(peer),
            }
        }
    }

    /// When the fast path's last-seen time of `peer` moved since it was
    /// last read, the peer sent something in between: tell the core when
    /// (from the age of the time stamp, kept within that interval).
    fn refresh(&mut self, core: &mut Relay, peer: Ipv6Addr, e: Entry, now: Millis, mono: u64) {
        let Ok(Some(ts)) = self.fp.peer_last_seen(peer) else { return };
        if ts <= e.seen_ns {
            return;
        }
        let at = now.saturating_sub(mono.saturating_sub(ts) / 1_000_000).max(e.read_at).min(now);
        if let Some(m) = self.mirrored.get_mut(&peer) {
            m.seen_ns = ts;
            m.read_at = now;
        }
        if core.last_rx(&peer, now).is_some_and(|t| at > t) {
            core.seen(&peer, at, now);
            self.stats.refreshed += 1;
        }
    }

    /// Peers in the fast path's map.
    pub fn peers(&self) -> usize {
        self.mirrored.len()
    }

    /// The fast path's counters (packets), as `xdp_<label>` names.
    pub fn counters(&self) -> Vec<(String, u64)> {
        match self.fp.counters() {
            Ok(v) => v.into_iter().map(|(c, n)| (format!("xdp_{}", c.label().replace('-', "_")), n.packets)).collect(),
            Err(e) => {
                tracing::debug!("teredo relay: reading the XDP counters: {e}");
                Vec::new()
            }
        }
    }

    /// Status: attachments, mirror counters.
    pub fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "attachments": self.fp.attachments().iter().map(|a| serde_json::json!({
                "iface": a.iface, "mode": format!("{:?}", a.mode).to_lowercase(), "fallback": a.fallback,
            })).collect::<Vec<_>>(),
            "peers": self.peers(),
            "mirror": self.stats,
        })
    }
}
