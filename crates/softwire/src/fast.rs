//! The lwAFTR's XDP fast path (`xdp::softwire`, `bpf/softwire.bpf.c`):
//! loading it for an lwAFTR and keeping its maps equal to the engine's
//! binding table and DSTM leases.
//!
//! The engine stays the slow path and the truth: the fast path serves
//! only packets of a binding it mirrors and passes everything else up to
//! the kernel, which routes it into the TUN device as without XDP.
//! [`LwaftrFast::refresh`] is cheap when nothing changed (two pointer
//! comparisons), so the runner calls it after every batch of packets: a
//! reload or a lease grant or expiry reaches the maps within one loop
//! turn, and only the entries that changed are written.

use crate::binding::BindingTable;
use crate::lwaftr::{Lwaftr, LwaftrConfig};
use std::sync::Arc;
use xdp::softwire::{Bound, SoftwireCounter, SoftwireFastPath, SoftwireSettings, SyncStats};
use xdp::Mode;

/// The bindings of `t` as the fast path mirrors them.
pub fn bounds(t: &BindingTable) -> Vec<Bound> {
    t.iter()
        .map(|b| Bound { b4: b.b4, ipv4: b.ipv4, psid: b.psid, psid_len: b.map.psid_len(), offset: b.map.offset() })
        .collect()
}

/// The fast path's settings for an lwAFTR with `cfg`, room for
/// `max_bindings` bindings and leases.
pub fn settings(cfg: &LwaftrConfig, max_bindings: u32) -> SoftwireSettings {
    let e = cfg.endpoint;
    SoftwireSettings {
        local: e.local,
        hop_limit: e.hop_limit,
        encap_limit: e.encap_limit,
        mtu: e.mtu,
        copy_tos: e.copy_tos,
        max_bindings,
    }
}

/// An lwAFTR's loaded fast path and what of the engine's tables it mirrors.
#[derive(Debug)]
pub struct LwaftrFast {
    fp: SoftwireFastPath,
    seen: Option<(Arc<BindingTable>, Arc<BindingTable>)>,
    last_error: Option<String>,
}

impl LwaftrFast {
    /// Load the fast path for `lw`'s configuration (maps sized for
    /// `max_bindings`) and mirror its tables. Nothing is attached yet.
    pub fn load(lw: &Lwaftr, max_bindings: u32) -> Result<LwaftrFast, xdp::Error> {
        let fp = SoftwireFastPath::load(settings(lw.config(), max_bindings))?;
        let mut f = LwaftrFast { fp, seen: None, last_error: None };
        f.refresh(lw)?;
        Ok(f)
    }

    /// Attach to `iface` in `mode` (`Mode::Off`: nothing).
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<(), xdp::Error> {
        self.fp.attach(iface, mode).map(|_| ())
    }

    /// The loaded program and its maps.
    pub fn fast_path(&self) -> &SoftwireFastPath {
        &self.fp
    }

    /// The loaded program and its maps (tests allow egress interfaces).
    pub fn fast_path_mut(&mut self) -> &mut SoftwireFastPath {
        &mut self.fp
    }

    /// Mirror `lw`'s binding table and leases when either changed since
    /// the last call. `Ok(None)`: nothing to do. On an error (a full map)
    /// the maps hold a consistent subset (the rest takes the slow path),
    /// the status shows the error, and the next change tries again.
    pub fn refresh(&mut self, lw: &Lwaftr) -> Result<Option<SyncStats>, xdp::Error> {
        let (b, l) = (lw.bindings(), lw.leases());
        if let Some((sb, sl)) = &self.seen {
            if Arc::ptr_eq(sb, &b) && Arc::ptr_eq(sl, &l) {
                return Ok(None);
            }
        }
        match self.fp.sync(&bounds(&b), &bounds(&l)) {
            Ok(st) => {
                self.seen = Some((b, l));
                self.last_error = None;
                Ok(Some(st))
            }
            Err(e) => {
                self.seen = Some((b, l));
                self.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The status: attachments, mirrored bindings, counters by label.
    pub fn status(&self) -> serde_json::Value {
        let counters: serde_json::Map<String, serde_json::Value> = self
            .fp
            .counters()
            .map(|v| {
                v.into_iter()
                    .filter(|(_, c)| c.packets > 0)
                    .map(|(k, c): (SoftwireCounter, _)| (k.label().to_owned(), serde_json::json!(c.packets)))
                    .collect()
            })
            .unwrap_or_default();
        serde_json::json!({
            "attached": self.fp.attachments().iter().map(|a| serde_json::json!({
                "iface": a.iface, "mode": format!("{:?}", a.mode).to_lowercase(),
            })).collect::<Vec<_>>(),
            "bindings": self.fp.bindings(),
            "counters": counters,
            "last_error": self.last_error,
        })
    }
}
