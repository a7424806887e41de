//! The softwire XDP fast path (`xdp::softwire`, `bpf/softwire.bpf.c`):
//! loading it for an lwAFTR and keeping its maps equal to the engine's
//! binding table and DSTM leases ([`LwaftrFast`]), or for the DS-Lite
//! AFTR and keeping its session maps equal to the NAT44's carried
//! mappings ([`AftrFast`]).
//!
//! The engine stays the slow path and the truth: the fast path serves
//! only packets of a binding it mirrors and passes everything else up to
//! the kernel, which routes it into the TUN device as without XDP.
//! [`LwaftrFast::refresh`] is cheap when nothing changed (two pointer
//! comparisons), so the runner calls it after every batch of packets: a
//! reload or a lease grant or expiry reaches the maps within one loop
//! turn, and only the entries that changed are written.

use crate::aftr::{Aftr, AftrConfig};
use crate::binding::BindingTable;
use crate::endpoint::EndpointConfig;
use crate::lwaftr::{Lwaftr, LwaftrConfig};
use crate::nat44::{Change, Inside, Outside, Seen};
use core::net::{Ipv4Addr, SocketAddrV4};
use nat64::config::Protocol;
use std::sync::Arc;
use xdp::dslite::{Nat44Session, SessionSeen};
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
    endpoint_settings(&cfg.endpoint, max_bindings, None)
}

/// The fast path's settings for a DS-Lite AFTR with `cfg`, room for
/// `max_sessions` NAT44 sessions.
pub fn aftr_settings(cfg: &AftrConfig, max_sessions: u32) -> SoftwireSettings {
    endpoint_settings(&cfg.endpoint, 1, Some(max_sessions))
}

fn endpoint_settings(e: &EndpointConfig, max_bindings: u32, sessions: Option<u32>) -> SoftwireSettings {
    SoftwireSettings {
        local: e.local,
        hop_limit: e.hop_limit,
        encap_limit: e.encap_limit,
        mtu: e.mtu,
        copy_tos: e.copy_tos,
        max_bindings,
        dslite: sessions.is_some(),
        max_sessions: sessions.unwrap_or(0),
    }
}

/// The attachments and the non-zero counters (by `label`) of an XDP
/// object, for a status: the softwire fast path's and the B4 kernel
/// path's.
pub(crate) fn xdp_status<C>(
    attachments: &[xdp::Attachment],
    counters: Result<Vec<(C, xdp::types::Count)>, xdp::Error>,
    label: fn(C) -> &'static str,
) -> (serde_json::Value, serde_json::Value) {
    let counters: serde_json::Map<String, serde_json::Value> = counters
        .map(|v| {
            v.into_iter()
                .filter(|(_, c)| c.packets > 0)
                .map(|(k, c)| (label(k).to_owned(), serde_json::json!(c.packets)))
                .collect()
        })
        .unwrap_or_default();
    let attached = attachments
        .iter()
        .map(|a| serde_json::json!({"iface": a.iface, "mode": format!("{:?}", a.mode).to_lowercase()}))
        .collect::<Vec<_>>();
    (serde_json::json!(attached), serde_json::Value::Object(counters))
}

/// The attachments and the non-zero counters of `fp`, for a status.
fn fast_path_status(fp: &SoftwireFastPath) -> (serde_json::Value, serde_json::Value) {
    xdp_status(fp.attachments(), fp.counters(), SoftwireCounter::label)
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
        let (attached, counters) = fast_path_status(&self.fp);
        serde_json::json!({
            "attached": attached,
            "bindings": self.fp.bindings(),
            "counters": counters,
            "last_error": self.last_error,
        })
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_coarse_ns()`.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64))
}

fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Icmp => 1,
    }
}

/// The fast path's form of the mapping `k` ↔ `o` (`half_open`: TCP in
/// V6 INIT, [`Change::HalfOpen`]).
pub fn session(k: &Inside, o: &Outside, half_open: bool) -> Nat44Session {
    Nat44Session {
        b4: k.sub,
        proto: proto_number(k.proto),
        inside: SocketAddrV4::new(k.addr, k.port),
        outside: SocketAddrV4::new(o.addr, o.port),
        half_open,
    }
}

/// What the fast path recorded (`r`), on the engine's clock: `now` there
/// is `mono` on CLOCK_MONOTONIC.
fn engine_seen(r: Result<Option<SessionSeen>, xdp::Error>, now: u64, mono: u64) -> Option<Seen> {
    let s = r.ok()??;
    let last_ns = Some(s.last_seen_ns).filter(|t| *t > 0).map(|t| now.saturating_sub(mono.saturating_sub(t)));
    Some(Seen { last_ns, syn_ack: s.syn_ack })
}

/// The DS-Lite AFTR's loaded fast path. It turns the NAT44's
/// [`Change`]s into session entries: the runner calls [`AftrFast::sync`]
/// after each packet the engine handled and before it writes what the
/// engine emitted, so the session is in the maps when the next packet of
/// the flow arrives (UDP: the reply to the first packet; TCP: the
/// server's SYN-ACK to the B4's SYN that created the mapping, half-open).
/// The NAT44 gets a probe on the session maps ([`Nat44::set_probe`]) to
/// read, whenever it handles a half-open mapping's packet, whether the
/// fast path carried its SYN-ACK.
///
/// [`Nat44::set_probe`]: crate::nat44::Nat44::set_probe
#[derive(Debug)]
pub struct AftrFast {
    fp: SoftwireFastPath,
    changes: Vec<Change>,
    full: u64,
    errors: u64,
    last_error: Option<String>,
}

impl AftrFast {
    /// Load the fast path for `aftr` (maps for `max_sessions` sessions,
    /// `pool` the pool4 prefixes as (address, length)), turn the NAT44's
    /// mirroring on and mirror what is carriable already. Nothing is
    /// attached yet.
    pub fn load(aftr: &Aftr, pool: &[(Ipv4Addr, u8)], max_sessions: u32) -> Result<AftrFast, xdp::Error> {
        let mut fp = SoftwireFastPath::load(aftr_settings(aftr.config(), max_sessions))?;
        fp.set_pool(pool)?;
        let probe = fp.session_probe()?;
        let mut f = AftrFast { fp, changes: Vec::new(), full: 0, errors: 0, last_error: None };
        aftr.nat().set_probe(Some(Box::new(move |k, o, now| {
            engine_seen(probe.seen(&session(k, o, false)), now, monotonic_ns())
        })));
        aftr.nat().set_mirror(true);
        f.sync(aftr);
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

    /// Apply the NAT44's changes since the last call, oldest first. A
    /// session the full maps refuse stays on the slow path (counted).
    /// Returns how many changes were applied.
    pub fn sync(&mut self, aftr: &Aftr) -> usize {
        aftr.nat().take_changes(&mut self.changes);
        let n = self.changes.len();
        for c in self.changes.drain(..) {
            let r = match c {
                Change::Up(k, o) => self.fp.session_insert(&session(&k, &o, false)),
                Change::HalfOpen(k, o) => self.fp.session_insert(&session(&k, &o, true)),
                Change::Opened(k, o) => self.fp.session_update(&session(&k, &o, false)).map(|_| ()),
                Change::Down(k, o) => self.fp.session_remove(&session(&k, &o, false)).map(|_| ()),
            };
            match r {
                Ok(()) => {}
                Err(xdp::Error::MapFull(_)) => self.full += 1,
                Err(e) => {
                    self.errors += 1;
                    self.last_error = Some(e.to_string());
                }
            }
        }
        n
    }

    /// Expire `aftr`'s mappings at `now` (the engine's clock), a mapping
    /// the fast path carried living on from its last packet there; then
    /// the maps follow.
    pub fn expire(&mut self, aftr: &Aftr, now: u64) -> usize {
        let mono = monotonic_ns();
        let fp = &self.fp;
        let n = aftr.expire_with(now, |k, o| engine_seen(fp.session_seen(&session(k, o, false)), now, mono));
        self.sync(aftr);
        n
    }

    /// Sessions the full maps refused so far.
    pub fn refused_full(&self) -> u64 {
        self.full
    }

    /// The status: attachments, sessions carried, counters by label.
    pub fn status(&self) -> serde_json::Value {
        let (attached, counters) = fast_path_status(&self.fp);
        serde_json::json!({
            "attached": attached,
            "sessions": self.fp.sessions(),
            "max_sessions": self.fp.settings().max_sessions,
            "refused_full": self.full,
            "errors": self.errors,
            "counters": counters,
            "last_error": self.last_error,
        })
    }
}
