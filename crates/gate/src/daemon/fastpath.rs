//! The daemon's side of the XDP fast path (`[xdp]`, crate `xdp`).
//!
//! Start-up loads the BPF programs with the configured map sizes, mirrors
//! the `[siit]` configuration into the maps, allows the egress interfaces
//! and only then attaches the combined program to each interface through a
//! bpf_link (so a crash of the daemon detaches it). `native` falls back to
//! generic with a warning where the driver cannot. A reload mirrors the new
//! configuration and attaches/detaches what changed; stopping detaches
//! everything. The programs pass what they do not handle to the kernel's
//! stack, i.e. to the TUN device and the slow path, as before.
//!
//! NAT64: the translator tells the plane of every session it may carry
//! from its first packet while that packet is handled, before it is
//! written out ([`nat64::FastHook`], set by the daemon from
//! [`FastPlane::nat64_hook`]): UDP and ICMP echo in full, a TCP session
//! its IPv6 SYN created half-open (only the IPv4 side's SYN+ACK is carried,
//! and recorded in the entries; the translator reads that whenever it next
//! handles the session and steps it to ESTABLISHED as if it had seen it).
//! Every half second (and right after sessions expire) the timer thread
//! calls [`FastPlane::sync_nat64`]: it adopts what the hook mirrored
//! (and lets the translator learn the SYN+ACKs carried since, through
//! [`nat64::Nat64::refresh`]), and
//! sessions that may take the fast path (UDP, ICMP echo, TCP from
//! ESTABLISHED through the close — their FIN and RST pass —, a half-open
//! one the hook mirrored; not hairpinned ones) are mirrored into
//! `nat64_sessions` (two entries each), the others removed; before a
//! mirrored session is due, the time the fast path last used it is read
//! back and the session refreshed ([`nat64::Nat64::refresh`]), so a session
//! carried only by the fast path does not expire. TCP SYN, FIN and RST
//! (but a half-open session's SYN+ACK) always go to the slow path, whose
//! state machine stays the truth. A full map leaves the overflow on the
//! slow path, counted.
//!
//! TrGW: every quarter second [`FastPlane::sync_trgw`] (thread
//! `v6gate-xdp`) adds what the fast path relayed on each mirrored relay
//! socket to the relay's own per-slot counters (so `query`, `list`, the
//! metrics and the idle timeout see it), then mirrors every relay socket
//! that has latched its far end (latching stays on the slow path: the
//! first packet) into `trgw_relay`, and removes the others.
//!
//! Routes: with `mirror-routes` (the default), every second
//! [`FastPlane::sync_routes`] (thread `v6gate-xdp-routes`) brings the
//! mirrored routes and next hops in line with the kernel's
//! ([`super::xdproutes`]).

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::config::{Config, XdpConfig};

/// One NAT64 session as mirrored: protocol, X:x, Y':y, T:t, Y:y.
type NatKey = (nat64::Protocol, SocketAddrV6, SocketAddrV6, SocketAddrV4, SocketAddrV4);

/// A mirrored session: how the slow path lists it, its two map keys and
/// the last fast-path time already applied (CLOCK_MONOTONIC ns).
struct Mirrored {
    info: nat64::SessionInfo,
    keys: [xdp::types::FlowKey; 2],
    seen: u64,
}

fn nat_key(s: &nat64::SessionInfo) -> NatKey {
    (s.protocol, s.ipv6_src, s.ipv6_dst, s.ipv4_src, s.ipv4_dst)
}

/// Session `s` in the contract's form.
fn xdp_session(s: &nat64::SessionInfo, half_open: bool) -> xdp::nat64::Session {
    let l4 = match s.protocol {
        nat64::Protocol::Udp => xdp::nat64::L4::Udp,
        nat64::Protocol::Tcp => xdp::nat64::L4::Tcp,
        nat64::Protocol::Icmp => xdp::nat64::L4::Icmp,
    };
    xdp::nat64::Session { l4, x: s.ipv6_src, y6: s.ipv6_dst, t: s.ipv4_src, y: s.ipv4_dst, half_open }
}

/// The NAT64 side of the mirror.
#[derive(Default)]
struct NatMirror {
    on: bool,
    pool4: Vec<xlat::addr::Prefix4>,
    mirrored: HashMap<NatKey, Mirrored>,
    /// Sessions refused by a full map (each counted once).
    overflow: HashSet<NatKey>,
    map_full: u64,
    /// The translator's hook, once asked for ([`FastPlane::nat64_hook`]).
    hook: Option<Arc<NatHook>>,
    /// NAT-PT mode: what the program creates sessions with.
    natpt: Option<xdp::nat64::NatptConfig>,
}

/// The translator's [`nat64::FastHook`]: mirrors a session into
/// `nat64_sessions` on a handle of its own while the packet that created
/// it is handled (the worker threads call it), and reads back whether the
/// program carried a half-open session's SYN+ACK. What it mirrored waits in
/// `adopted` for the next [`FastPlane::sync_nat64`].
#[derive(Debug)]
pub struct NatHook {
    map: Mutex<xdp::nat64::Nat64Sessions>,
    /// CLOCK_MONOTONIC minus the translator's clock, ns.
    mono_minus_now: u64,
    adopted: Mutex<Vec<(nat64::SessionInfo, [xdp::types::FlowKey; 2])>>,
    /// Sessions the full map refused here.
    map_full: AtomicU64,
    /// NAT-PT, and NAT64 with port blocks: the maps of sessions created
    /// in XDP (None: not loaded).
    natpt: Option<Arc<xdp::nat64::Natpt>>,
    /// NAT-PT sessions created in XDP that the translator took over.
    natpt_adopted: AtomicU64,
    /// ... and that it refused (their entries removed).
    natpt_refused: AtomicU64,
    /// FINs carried in XDP that the translator stepped its sessions with.
    fins: AtomicU64,
}

impl nat64::FastHook for NatHook {
    fn mirror(&self, s: &nat64::SessionInfo, half_open: bool) {
        let sess = xdp_session(s, half_open);
        let r = super::lock(&self.map).insert(&sess);
        match r {
            Ok(()) => {
                let [(k6, _), (k4, _)] = sess.entries();
                super::lock(&self.adopted).push((s.clone(), [k6, k4]));
            }
            Err(xdp::Error::MapFull(_)) => {
                self.map_full.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!("xdp: mirroring a new NAT64 session: {e}"),
        }
    }

    fn host(&self, x: std::net::Ipv6Addr, t: Option<std::net::Ipv4Addr>) {
        if let Some(pt) = &self.natpt {
            if let Err(e) = pt.set_host(x, t) {
                tracing::debug!("xdp: NAT-PT host {x}: {e}");
            }
        }
    }

    fn held(&self, present: bool) {
        if let Some(pt) = &self.natpt {
            if let Err(e) = pt.set_held(present) {
                tracing::warn!("xdp: NAT-PT held-SYN flag: {e}");
            }
        }
    }

    fn created(&self, adopt: &mut dyn FnMut(&nat64::Created) -> bool) {
        let Some(pt) = &self.natpt else { return };
        pt.drain(|m| {
            let s = m.session;
            let at = m.ns.saturating_sub(self.mono_minus_now);
            let fin = match m.kind {
                xdp::nat64::MadeKind::Created => None,
                xdp::nat64::MadeKind::Fin6 => Some(nat64::tcp::Side::V6),
                xdp::nat64::MadeKind::Fin4 => Some(nat64::tcp::Side::V4),
            };
            let c = nat64::Created {
                protocol: nat64::Protocol::Tcp,
                x: s.x,
                y: s.y,
                t: *s.t.ip(),
                port: s.t.port(),
                fin,
                at,
            };
            if fin.is_some() {
                // A FIN carried: the translator steps the session (gone: its entries go).
                self.fins.fetch_add(1, Ordering::Relaxed);
                return adopt(&c);
            }
            if !adopt(&c) {
                self.natpt_refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("xdp: NAT-PT session {} -> {} created in XDP refused", s.x, s.y);
                return false;
            }
            self.natpt_adopted.fetch_add(1, Ordering::Relaxed);
            tracing::trace!("nat64: session TCP {} -> {} as {} (created in XDP)", s.x, s.y, s.t);
            // Tracked by the sync as a session the hook mirrored half-open.
            let info = nat64::SessionInfo {
                protocol: nat64::Protocol::Tcp,
                ipv6_src: s.x,
                ipv6_dst: s.y6,
                ipv4_src: s.t,
                ipv4_dst: s.y,
                state: Some(nat64::TcpState::V6Init),
                expires_in_ms: 0,
                age_ms: 0,
            };
            let [(k6, _), (k4, _)] = s.entries();
            super::lock(&self.adopted).push((info, [k6, k4]));
            true
        });
    }

    fn port_blocks(&self) -> Option<Arc<dyn nat64::PortBlockMem>> {
        crate::xdp_blocks::n64(self.natpt.as_ref()?)
    }

    fn bib(&self, x: std::net::SocketAddrV6, t: Option<std::net::SocketAddrV4>) {
        if let Some(pt) = &self.natpt {
            if let Err(e) = pt.set_bib(x, t) {
                // A mapping the program cannot see: it creates no more (EIM).
                tracing::warn!("xdp: NAT64 TCP mapping of {x}: {e}; sessions no longer created in XDP");
            }
        }
    }

    fn syn_ack(&self, s: &nat64::SessionInfo) -> Option<u64> {
        match super::lock(&self.map).seen(&xdp_session(s, true)) {
            Ok(Some(seen)) if seen.syn_ack => Some(seen.last_seen_ns.saturating_sub(self.mono_minus_now)),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!("xdp: reading a NAT64 session: {e}");
                None
            }
        }
    }
}

/// Sessions due within this many nanoseconds get their fast-path use read
/// back at each sync (twice the sync period).
const REFRESH_WINDOW_NS: u64 = 1_000_000_000;

/// How often the timer thread syncs the NAT64 mirror, in its 100 ms ticks.
pub const NAT64_SYNC_TICKS: u32 = 5;

/// How often the TrGW mirror and counters are synced.
pub const TRGW_SYNC: std::time::Duration = std::time::Duration::from_millis(250);

/// The TrGW side of the mirror: slot → (leg, its counts already merged).
#[derive(Default)]
struct RelayMirror {
    on: bool,
    mirrored: HashMap<u32, (trgw::core::FastLeg, xdp::types::RelayKey, xdp::types::Count)>,
    /// Legs refused by a full map or beyond the counter slots (each once).
    overflow: HashSet<u32>,
    map_full: u64,
}

/// The loaded fast path and what it mirrors.
pub struct FastPlane {
    cfg: XdpConfig,
    /// None with `mode = "off"`: nothing loaded, nothing attached.
    fp: Option<xdp::FastPath>,
    /// `[siit]` mirrored: (pool6 as written, EAMT entries).
    siit: Option<(Option<String>, usize)>,
    /// Interfaces attached: name → the mode asked for.
    asked: Vec<(String, xdp::Mode)>,
    /// `egress` interfaces allowed: name → index.
    egress: Vec<(String, u32)>,
    nat: NatMirror,
    relay: RelayMirror,
    /// With `mirror-routes`: the mirrored routes and next hops.
    routes: Option<super::xdproutes::RouteMirror>,
}

impl std::fmt::Debug for FastPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPlane").field("cfg", &self.cfg).field("fp", &self.fp).finish()
    }
}

impl FastPlane {
    /// The fast path of `cfg` (None when it has no `[xdp]`): loaded,
    /// mirrored and attached. Any failure is an error naming what failed;
    /// nothing stays attached then.
    pub fn start(cfg: &Config) -> Result<Option<FastPlane>, String> {
        let Some(x) = &cfg.xdp else { return Ok(None) };
        let mut p = FastPlane {
            cfg: x.clone(),
            fp: None,
            siit: None,
            asked: Vec::new(),
            egress: Vec::new(),
            nat: NatMirror::default(),
            relay: RelayMirror::default(),
            routes: None,
        };
        if x.mode == xdp::Mode::Off {
            tracing::info!("xdp: mode off, the slow path does everything");
            return Ok(Some(p));
        }
        p.fp = Some(
            xdp::FastPath::load(x.limits())
                .map_err(|e| format!("[xdp]: {e} (set [xdp] mode = \"off\" to run without the fast path)"))?,
        );
        p.apply(cfg)?;
        if x.mirror_routes {
            p.routes = Some(super::xdproutes::RouteMirror::default());
        }
        warn_without_forwarding();
        Ok(Some(p))
    }

    /// Whether a reload from this plane's configuration to `new` needs a
    /// restart (map sizes are fixed at load; `off` ↔ on loads or unloads).
    pub fn restart_needed(&self, new: &Config) -> Option<String> {
        let n = new.xdp.as_ref()?;
        if (n.mode == xdp::Mode::Off) != (self.cfg.mode == xdp::Mode::Off) {
            return Some("[xdp] mode changed to or from \"off\": restart v6gate to apply".into());
        }
        if n.limits() != self.cfg.limits() {
            return Some(
                "[xdp] eamt-entries, nat64-sessions, trgw-streams, mirror-routes or routes changed (map sizes are fixed at start): restart v6gate to apply"
                    .into(),
            );
        }
        None
    }

    /// Mirror `cfg` and bring the attachments in line with its `[xdp]`:
    /// SIIT state first (turned off while its tables change), egress, then
    /// detach what is gone or changed mode and attach what is new.
    pub fn apply(&mut self, cfg: &Config) -> Result<(), String> {
        let Some(x) = &cfg.xdp else { return Err("[xdp] missing".into()) };
        let Some(fp) = self.fp.as_mut() else {
            self.cfg = x.clone();
            return Ok(());
        };
        match &cfg.siit {
            Some(s) => {
                fp.set_siit(s).map_err(|e| format!("[xdp]: mirroring [siit]: {e}"))?;
                self.siit = Some((s.pool6.map(|p| p.to_string()), s.eamt.len()));
            }
            None => {
                fp.siit_off().map_err(|e| format!("[xdp]: {e}"))?;
                self.siit = None;
            }
        }
        match &cfg.nat64 {
            Some(n) => {
                fp.set_nat64(&cfg.nat64_xlat_config()).map_err(|e| format!("[xdp]: NAT64: {e}"))?;
                self.nat.on = true;
                self.nat.pool4 = n.pool4.iter().map(|p| p.prefix).collect();
                self.nat.natpt = Some(xdp::nat64::NatptConfig {
                    pool6: n.pool6,
                    pool4: self.nat.pool4.clone(),
                    limit: n.max_sessions as u64,
                    port_block: (n.mode == nat64::Mode::Nat64).then_some(x.nat64_port_block),
                });
            }
            None => {
                fp.nat64_off().map_err(|e| format!("[xdp]: {e}"))?;
                self.nat.on = false;
                self.nat.natpt = None;
                if let Some(pt) = self.nat.hook.as_ref().and_then(|h| h.natpt.as_ref()) {
                    let _ = pt.configure(None);
                }
                let adopted = self.nat.hook.take().map(|h| std::mem::take(&mut *super::lock(&h.adopted)));
                let keys = adopted.into_iter().flatten().map(|(_, k)| k);
                for k in self.nat.mirrored.drain().map(|(_, m)| m.keys).chain(keys).flatten() {
                    let _ = fp.nat64_remove(&k);
                }
                self.nat.overflow.clear();
            }
        }
        self.relay.on = cfg.trgw.is_some();
        fp.set_trgw(self.relay.on).map_err(|e| format!("[xdp]: {e}"))?;
        fp.set_fib_cache(x.fib_cache_ms).map_err(|e| format!("[xdp]: {e}"))?;
        // Egress: the attached interfaces (added by attach) and `egress`.
        for (name, idx) in std::mem::take(&mut self.egress) {
            if !x.egress.contains(&name) && !fp.attachments().iter().any(|a| a.ifindex == idx) {
                fp.deny_egress(idx).map_err(|e| format!("[xdp] egress {name}: {e}"))?;
            }
        }
        for name in &x.egress {
            let idx = xdp::sys::if_index(name).ok_or_else(|| format!("[xdp] egress: no interface {name}"))?;
            fp.allow_egress(idx).map_err(|e| format!("[xdp] egress {name}: {e}"))?;
            self.egress.push((name.clone(), idx));
        }
        // Detach what the new file no longer has, or wants in another mode.
        let keep: Vec<(String, xdp::Mode)> = x.interfaces.iter().map(|i| (i.clone(), x.mode)).collect();
        for (name, mode) in std::mem::take(&mut self.asked) {
            if keep.contains(&(name.clone(), mode)) {
                self.asked.push((name, mode));
                continue;
            }
            let idx = fp.attachments().iter().find(|a| a.iface == name).map(|a| a.ifindex);
            fp.detach(&name).map_err(|e| format!("[xdp] {e}"))?;
            if let Some(idx) = idx.filter(|i| !self.egress.iter().any(|e| e.1 == *i)) {
                fp.deny_egress(idx).map_err(|e| format!("[xdp] {name}: {e}"))?;
            }
            tracing::info!("xdp: detached from {name}");
        }
        for (name, mode) in keep {
            if self.asked.iter().any(|a| a.0 == name) {
                continue;
            }
            let a = fp.attach(&name, mode).map_err(|e| format!("[xdp] {e}"))?;
            if let Some(a) = a {
                tracing::info!(
                    "xdp: attached {} to {name} (index {}) in {} mode",
                    a.program,
                    a.ifindex,
                    mode_name(a.mode)
                );
            }
            self.asked.push((name, mode));
        }
        self.cfg = x.clone();
        Ok(())
    }

    /// Bring the NAT64 mirror in line with `n`'s sessions at `now` (the
    /// translator's clock), refreshing the sessions due soon that the fast
    /// path used. `mono_minus_now` is CLOCK_MONOTONIC minus `now` (the
    /// fast path stamps its use with the monotonic clock).
    pub fn sync_nat64(&mut self, n: &nat64::Nat64, now: u64, mono_minus_now: u64) {
        let Some(fp) = self.fp.as_mut() else { return };
        if !self.nat.on {
            return;
        }
        // What the translator's hook mirrored since the last sync, in the
        // order it did (a half-open session opened later replaces itself).
        if let Some(h) = &self.nat.hook {
            let adopted = std::mem::take(&mut *super::lock(&h.adopted));
            for (info, keys) in adopted {
                let k = nat_key(&info);
                self.nat.overflow.remove(&k);
                let seen = self.nat.mirrored.get(&k).map_or(0, |m| m.seen);
                self.nat.mirrored.insert(k, Mirrored { info, keys, seen });
            }
            self.nat.map_full += h.map_full.swap(0, Ordering::Relaxed);
        }
        let list = n.sessions(&nat64::SessionFilter::default(), now);
        if let Some(pt) = self.nat.hook.as_ref().and_then(|h| h.natpt.as_ref()) {
            if let Err(e) = pt.set_sessions(list.len() as u64) {
                tracing::warn!("xdp: NAT-PT session count: {e}");
            }
        }
        let mut want: HashMap<NatKey, nat64::SessionInfo> = HashMap::with_capacity(list.len());
        for s in list {
            use nat64::TcpState::*;
            let k = nat_key(&s);
            let eligible = match s.state {
                None | Some(Established | V4FinRcv | V6FinRcv | V4FinV6FinRcv) => true,
                // Half-open: only as the hook mirrored it.
                Some(V6Init) => self.nat.mirrored.contains_key(&k),
                Some(_) => false,
            };
            // Hairpinned sessions (the peer is one of our pool4 addresses)
            // stay on the slow path (RFC 6146 §3.8).
            if eligible && !self.nat.pool4.iter().any(|p| p.contains(*s.ipv4_dst.ip())) {
                want.insert(k, s);
            }
        }
        // Fast-path use of the sessions due soon, and of the half-open ones
        // (the translator learns a carried SYN+ACK from the refresh).
        for (k, m) in self.nat.mirrored.iter_mut() {
            let due = want.get(k).is_none_or(|s| {
                s.state == Some(nat64::TcpState::V6Init)
                    || s.expires_in_ms.saturating_mul(1_000_000) <= REFRESH_WINDOW_NS
            });
            if !due {
                continue;
            }
            let mut seen = 0;
            for fk in &m.keys {
                if let Ok(Some(v)) = fp.nat64_get(fk) {
                    seen = seen.max(v.last_seen_ns);
                }
            }
            if seen > m.seen {
                m.seen = seen;
                n.refresh(&m.info, seen.saturating_sub(mono_minus_now));
            }
        }
        // Gone, or no longer established: back to the slow path alone.
        self.nat.mirrored.retain(|k, m| {
            if want.contains_key(k) {
                return true;
            }
            for fk in &m.keys {
                if let Err(e) = fp.nat64_remove(fk) {
                    tracing::warn!("xdp: removing a NAT64 session: {e}");
                }
            }
            false
        });
        self.nat.overflow.retain(|k| want.contains_key(k));
        for (k, s) in want {
            if self.nat.mirrored.contains_key(&k) || self.nat.overflow.contains(&k) {
                continue;
            }
            let [(k6, v6), (k4, v4)] = xdp_session(&s, false).entries();
            let r = fp.nat64_insert(&k6, &v6).and_then(|()| {
                fp.nat64_insert(&k4, &v4).inspect_err(|_| {
                    let _ = fp.nat64_remove(&k6);
                })
            });
            match r {
                Ok(()) => {
                    self.nat.mirrored.insert(k, Mirrored { info: s, keys: [k6, k4], seen: 0 });
                }
                Err(xdp::Error::MapFull(_)) => {
                    self.nat.overflow.insert(k);
                    self.nat.map_full += 1;
                }
                Err(e) => {
                    tracing::warn!("xdp: mirroring a NAT64 session: {e}");
                    break;
                }
            }
        }
    }

    /// The translator's hook ([`nat64::Nat64::set_fast_hook`]): None when
    /// NAT64 sessions are not mirrored. `mono_minus_now` is CLOCK_MONOTONIC
    /// minus the translator's clock. One hook per plane.
    pub fn nat64_hook(&mut self, mono_minus_now: u64) -> Option<Arc<dyn nat64::FastHook>> {
        if !self.mirrors_nat64() {
            return None;
        }
        if self.nat.hook.is_none() {
            let map = match self.fp.as_ref()?.nat64_sessions() {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("xdp: NAT64 sessions mirrored every sync only: {e}");
                    return None;
                }
            };
            let natpt = match self.fp.as_ref()?.natpt() {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    tracing::warn!("xdp: NAT-PT sessions are not created in XDP: {e}");
                    None
                }
            };
            self.nat.hook = Some(Arc::new(NatHook {
                map: Mutex::new(map),
                mono_minus_now,
                adopted: Mutex::new(Vec::new()),
                map_full: AtomicU64::new(0),
                natpt,
                natpt_adopted: AtomicU64::new(0),
                natpt_refused: AtomicU64::new(0),
                fins: AtomicU64::new(0),
            }));
        }
        if let Some(pt) = self.nat.hook.as_ref().and_then(|h| h.natpt.as_ref()) {
            if let Err(e) = pt.configure(self.nat.natpt.as_ref()) {
                tracing::warn!("xdp: NAT-PT sessions are not created in XDP: {e}");
            }
        }
        self.nat.hook.clone().map(|h| h as Arc<dyn nat64::FastHook>)
    }

    /// NAT-PT: mirror the host bindings `n` holds now (NAT64: its TCP BIB
    /// entries) and whether it holds
    /// IPv4 SYNs (changes from now on are told through the hook). Call
    /// after the hook is set.
    pub fn natpt_hosts(&self, n: &nat64::Nat64) {
        let Some(pt) = self.nat.hook.as_ref().and_then(|h| h.natpt.as_ref()) else { return };
        if self.nat.natpt.is_none() {
            return;
        }
        // Raised only (a store emptied meanwhile lowers it at its next
        // change; lowering here could undo a raise that came in between).
        if n.stats().held_syns > 0 {
            if let Err(e) = pt.set_held(true) {
                tracing::warn!("xdp: NAT-PT held-SYN flag: {e}");
            }
        }
        for (x, t) in n.natpt_hosts() {
            if let Err(e) = pt.set_host(x, Some(t)) {
                tracing::warn!("xdp: NAT-PT host {x}: {e}");
                break;
            }
        }
        // NAT64: the TCP mappings that exist (EIM: the program makes no other).
        if n.config().mode == nat64::Mode::Nat64 {
            for b in n.bib().into_iter().filter(|b| b.protocol == nat64::Protocol::Tcp) {
                if let Err(e) = pt.set_bib(b.ipv6, Some(b.ipv4)) {
                    tracing::warn!("xdp: NAT64 TCP mapping of {}: {e}; sessions not created in XDP", b.ipv6);
                    break;
                }
            }
        }
    }

    /// Merge the fast path's per-slot counts into the relay's, then bring
    /// the relay mirror in line with the latched relay sockets of `r`.
    pub fn sync_trgw(&mut self, r: &trgw::RelayHandle) {
        let Some(fp) = self.fp.as_mut() else { return };
        if !self.relay.on {
            return;
        }
        let mut deltas = Vec::new();
        for (slot, (_, _, last)) in self.relay.mirrored.iter_mut() {
            let Ok(now) = fp.relay_stats(*slot) else { continue };
            let (dp, db) = (now.packets.wrapping_sub(last.packets), now.bytes.wrapping_sub(last.bytes));
            if dp > 0 || db > 0 {
                deltas.push((*slot, dp, db));
            }
            *last = now;
        }
        r.add_fast_counts(&deltas);
        let want: HashMap<u32, trgw::core::FastLeg> = r.fast_legs().into_iter().map(|l| (l.slot, l)).collect();
        self.relay.mirrored.retain(|slot, (leg, key, _)| {
            if want.get(slot) == Some(leg) {
                return true;
            }
            if let Err(e) = fp.relay_remove(key) {
                tracing::warn!("xdp: removing relay leg {}: {e}", leg.local);
            }
            false
        });
        self.relay.overflow.retain(|slot| want.contains_key(slot));
        for (slot, leg) in want {
            if self.relay.mirrored.contains_key(&slot) || self.relay.overflow.contains(&slot) {
                continue;
            }
            let entry = xdp::trgw::Leg {
                local: leg.local,
                latched: leg.latched,
                out_local: leg.out_local,
                out_peer: leg.out_peer,
                stats_index: slot,
            }
            .entry();
            let r = entry.and_then(|(k, v)| fp.relay_insert(&k, &v).map(|()| k));
            match r {
                Ok(key) => {
                    let base = fp.relay_stats(slot).unwrap_or_default();
                    self.relay.mirrored.insert(slot, (leg, key, base));
                }
                Err(xdp::Error::MapFull(_)) | Err(xdp::Error::Config(_)) => {
                    self.relay.overflow.insert(slot);
                    self.relay.map_full += 1;
                }
                Err(e) => {
                    tracing::warn!("xdp: mirroring relay leg {}: {e}", leg.local);
                    break;
                }
            }
        }
    }

    /// Whether routes and next hops are mirrored (`mirror-routes`).
    pub fn mirrors_routes(&self) -> bool {
        self.fp.is_some() && self.routes.is_some()
    }

    /// Bring the mirrored routes and next hops in line with the kernel's
    /// tables `dump` (read by the caller without the plane's lock), for
    /// the interfaces the fast path may send on now.
    pub fn sync_routes(&mut self, dump: std::io::Result<super::xdproutes::Dump>) {
        let (Some(fp), Some(m)) = (self.fp.as_mut(), self.routes.as_mut()) else { return };
        m.syncs += 1;
        let r = dump.map_err(|e| format!("route netlink: {e}")).and_then(|d| {
            let egress: HashSet<u32> = fp.egress().collect();
            m.apply(fp, d.want(&egress)).map_err(|e| e.to_string())
        });
        match r {
            Ok(()) => m.last_error = None,
            Err(e) => {
                if m.last_error.as_ref() != Some(&e) {
                    tracing::warn!("xdp: mirroring routes: {e}");
                }
                m.last_error = Some(e);
            }
        }
    }

    /// (mirrored relay legs, legs refused now, refusals since start).
    pub fn trgw_mirror(&self) -> (usize, usize, u64) {
        (self.relay.mirrored.len(), self.relay.overflow.len(), self.relay.map_full)
    }

    /// Whether TrGW relay legs are mirrored.
    pub fn mirrors_trgw(&self) -> bool {
        self.fp.is_some() && self.relay.on
    }

    /// (mirrored NAT64 sessions, sessions refused by a full map now,
    /// refusals since start).
    pub fn nat64_mirror(&self) -> (usize, usize, u64) {
        (self.nat.mirrored.len(), self.nat.overflow.len(), self.nat.map_full)
    }

    /// Whether NAT64 sessions are mirrored.
    pub fn mirrors_nat64(&self) -> bool {
        self.fp.is_some() && self.nat.on
    }

    /// Detach from every interface (the programs unload with the plane).
    pub fn stop(&mut self) {
        if let Some(fp) = self.fp.as_mut() {
            let n = fp.attachments().len();
            match fp.detach_all() {
                Ok(()) => tracing::info!("xdp: detached from {n} interface(s)"),
                Err(e) => tracing::warn!("xdp: {e}"),
            }
        }
        self.asked.clear();
    }

    /// The fast path's counters summed over CPUs (None: not loaded).
    pub fn counters(&self) -> Option<Vec<(xdp::types::Counter, xdp::types::Count)>> {
        match self.fp.as_ref()?.counters() {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!("xdp counters: {e}");
                None
            }
        }
    }

    /// (interface, mode in force) of every attachment.
    pub fn attachments(&self) -> Vec<(String, &'static str)> {
        self.fp
            .as_ref()
            .map_or_else(Vec::new, |fp| fp.attachments().iter().map(|a| (a.iface.clone(), mode_name(a.mode))).collect())
    }

    /// The mirrored state, for `GET /xdp` (`v6gate ctl xdp`).
    pub fn status(&self) -> Value {
        let Some(fp) = self.fp.as_ref() else {
            return json!({ "mode": "off", "loaded": false, "interfaces": [] });
        };
        let interfaces: Vec<Value> = fp
            .attachments()
            .iter()
            .map(|a| {
                json!({
                    "name": a.iface,
                    "index": a.ifindex,
                    "program": a.program,
                    "mode": mode_name(a.mode),
                    "native_fallback": a.fallback,
                })
            })
            .collect();
        let counters: serde_json::Map<String, Value> = self
            .counters()
            .unwrap_or_default()
            .into_iter()
            .map(|(c, v)| (c.label().to_string(), json!({ "packets": v.packets, "bytes": v.bytes })))
            .collect();
        let l = fp.limits();
        json!({
            "mode": mode_name(self.cfg.mode),
            "loaded": true,
            "interfaces": interfaces,
            "egress": fp.egress().collect::<Vec<_>>(),
            "fib_cache_ms": self.cfg.fib_cache_ms,
            "limits": { "eamt_entries": l.eamt, "tx_ports": l.tx_ports, "fib_cache": l.fib_cache },
            "siit": self.siit.as_ref().map(|(pool6, eamt)| json!({ "pool6": pool6, "eamt_entries": eamt })),
            "nat64": self.nat.on.then(|| {
                let (m, o, f) = self.nat64_mirror();
                let pt = self.nat.hook.as_ref().filter(|h| h.natpt.is_some() && self.nat.natpt.is_some()).map(|h| {
                    json!({
                        "adopted": h.natpt_adopted.load(Ordering::Relaxed),
                        "refused": h.natpt_refused.load(Ordering::Relaxed),
                        "fins": h.fins.load(Ordering::Relaxed),
                    })
                });
                json!({
                    "sessions_mirrored": m, "sessions_overflow": o, "map_full": f, "limit": l.nat64_sessions / 2,
                    "natpt_created": pt,
                })
            }),
            "trgw": self.relay.on.then(|| {
                let (m, o, f) = self.trgw_mirror();
                json!({ "legs_mirrored": m, "legs_overflow": o, "map_full": f, "limit": l.trgw_relays })
            }),
            "routes": self.routes.as_ref().map_or_else(
                || json!({ "mirror": false }),
                |m| {
                    let mut v = m.status();
                    v["mirror"] = json!(true);
                    v["limit"] = json!(l.routes);
                    v
                },
            ),
            "counters": counters,
        })
    }
}

impl Drop for FastPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How a mode is written in the configuration.
pub fn mode_name(m: xdp::Mode) -> &'static str {
    match m {
        xdp::Mode::Native => "native",
        xdp::Mode::Generic => "generic",
        xdp::Mode::Off => "off",
    }
}

/// Fast-path counters are forwards (`siit-4to6`, ...) or passes to the
/// slow path (by reason).
pub fn is_pass(c: xdp::types::Counter) -> bool {
    c.c_name().starts_with("V6G_P_")
}

/// `bpf_fib_lookup` answers only where the ingress device forwards the
/// family looked up (BPF_FIB_LKUP_RET_FWD_DISABLED otherwise): say so at
/// start, since every packet would then pass to the slow path (counted as
/// reason `fib`) and the fast path would look attached but idle.
fn warn_without_forwarding() {
    for (family, path) in
        [("IPv4", "/proc/sys/net/ipv4/conf/all/forwarding"), ("IPv6", "/proc/sys/net/ipv6/conf/all/forwarding")]
    {
        if std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "0") {
            tracing::warn!(
                "xdp: {family} forwarding is off ({path} = 0): the fast path's FIB lookups for {family} fail and those packets take the slow path (passes, reason \"fib\"); enable forwarding to use the fast path"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_off_loads_nothing_and_reload_rules() {
        let c = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[xdp]\nmode = \"off\"\n").unwrap();
        let p = FastPlane::start(&c).unwrap().expect("a plane");
        assert!(p.fp.is_none());
        assert_eq!(p.status()["loaded"], json!(false));
        assert!(p.counters().is_none());
        let on = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n[xdp]\ninterfaces = [\"lo\"]\n").unwrap();
        assert!(p.restart_needed(&on).is_some(), "off -> native needs a restart");
        assert!(p.restart_needed(&c).is_none());
        let none = Config::parse("[siit]\npool6 = \"64:ff9b:1::/96\"\n").unwrap();
        assert!(FastPlane::start(&none).unwrap().is_none());
    }

    #[test]
    fn counter_kinds() {
        use xdp::types::Counter;
        assert!(!is_pass(Counter::Siit46) && !is_pass(Counter::Trgw));
        assert!(is_pass(Counter::PassFib) && is_pass(Counter::PassNoMatch));
        assert_eq!(mode_name(xdp::Mode::Generic), "generic");
    }
}
