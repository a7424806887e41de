//! `v6gate run`: the daemon.
//!
//! Start-up: load and check the configuration, build the engines, create
//! the multiqueue TUN device (one queue per worker), bring it up with its
//! MTU, addresses and routes over netlink, start one worker thread per
//! queue, the admin API and the timer thread, then wait for signals:
//!
//! - `SIGHUP`: reload. The file is read, checked and every engine built
//!   before anything changes; then MTU, new addresses and routes and a
//!   DNS64 restart are applied (each taken back if a later step fails);
//!   only then are old addresses and routes removed, the log level applied
//!   and the engines swapped atomically (workers pick up the new ones at
//!   their next batch). A bad file, or one that changes `[tun] name`,
//!   `queues`, `io`, `batch`, `busy-poll`, `pin-workers` or `[admin]`, is rejected: the
//!   error is logged, counted (`v6gate_config_reloads_total{result="error"}`)
//!   and shown in `/status`, and the old configuration keeps running.
//! - `SIGINT`/`SIGTERM`: stop the workers, remove the routes, close the
//!   queues (which removes the device).
//!
//! `POST /reload` (`v6gate ctl reload`) is the same reload, counted and
//! recorded in `/status` `reloads.last_error` the same way.
//!
//! A file without `[siit]`, `[nat64]` and `[dns64]` (only `[trgw]`,
//! `[alg]` or tunnels) runs without the translators' TUN device: the relay,
//! the ALG, the tunnels, the admin API and SIGHUP reload (which refuses a
//! file that adds a function needing the device).
//!
//! The tunnels (`[sixtofour]`, `[sixrd]`, `[teredo.*]`) run as
//! `tunnel::Tunnels`: one thread per function with its own TUN device and
//! sockets, started after the translators and stopped before them; their
//! counters are in `/metrics` (`v6gate_tunnel_*`) and `/status`
//! (`tunnels`). A reload that changes a tunnel table is refused (restart to
//! apply), as for `[trgw]`.
//!
//! The softwires (`[dslite]`, `[lw4o6]`, `[b4]`, crate `softwire`) and the
//! transport relay (`[trt]`, crate `trt`) run as in `v6gate softwire` and
//! `v6gate trt`: their own threads, devices and sockets, started with the
//! tunnels, their state in `/status` (`softwires`, `trt`) and `/metrics`
//! (`v6gate_softwire_*`, `v6gate_trt_*`). A reload that changes one of
//! their tables is refused (restart to apply); an accepted reload makes
//! the lwAFTR re-read its binding file (leases kept).
//!
//! `[alg]` runs the IMS-ALG (crate `alg`) on its own thread, its media in
//! the `[trgw]` relay of this process (`media = "in-process"`) or in remote
//! ng servers. A reload applies its routes, limits, timers and Contact mode
//! to the running ALG (new requests; live calls untouched); a change of
//! its listeners, advertised addresses, `tcp`, media keys or ng servers,
//! or adding/removing the table, is refused ("restart v6gate to apply"),
//! as is any change of `[trgw]`.
//!
//! Signals and logging belong to the binary (`src/main.rs`): it hands
//! [`run`] the signals it caught ([`Signal`]) and a function that applies
//! `[daemon] log-level`.

pub mod admin;
pub mod bibfile;
pub mod ctl;
pub mod engine;
pub mod fastpath;
pub mod functions;
pub mod notify;
pub mod stats;
pub mod worker;
pub mod xdproutes;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context as _};
use arc_swap::ArcSwap;

use crate::config::Config;
use crate::sys::netlink::Netlink;
use crate::sys::tun;
use confval::IoMode;
use engine::{routes_for, Engines};
use stats::{Totals, WorkerStats};
use xlat::addr::IpPrefix;

/// `v6gate run` arguments.
// The doc comments are `--help` text: `[table]` names a TOML table, not an item.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Configuration file (TOML): [siit], [nat64], [dns64], [trgw], [alg], the
    /// tunnels [sixtofour], [sixrd], [teredo.*] (the
    /// file `v6gate translate` and `config check` read) plus the optional
    /// daemon tables [tun], [admin] and [daemon].
    #[arg(short, long, value_name = "FILE", default_value = crate::config::DEFAULT_PATH)]
    pub config: PathBuf,
}

/// What the binary tells the daemon: reload (SIGHUP), or stop
/// (SIGINT/SIGTERM); the standalone commands' runner takes the same.
pub use function::runner::Signal;

/// The running daemon's shared state (read by the admin API).
pub struct Daemon {
    /// The configuration file.
    pub config_path: PathBuf,
    /// The configuration in force.
    pub config: Mutex<Config>,
    /// The engines in force.
    pub engines: Arc<ArcSwap<Engines>>,
    /// One per worker.
    pub stats: Vec<Arc<WorkerStats>>,
    /// The timer thread's (ICMP errors it sends for NAT64 expiry).
    pub timer_stats: Arc<WorkerStats>,
    /// Start time.
    pub started: Instant,
    /// Start time, seconds since the Unix epoch.
    pub started_unix: f64,
    /// TUN device name and index (None: no packet function, no device).
    pub device: Option<(String, u32)>,
    /// Routes the daemon added.
    pub routes: Mutex<Vec<IpPrefix>>,
    /// Successful reloads.
    pub reloads_ok: AtomicU64,
    /// Rejected reloads.
    pub reloads_failed: AtomicU64,
    /// The last reload error.
    pub last_reload_error: Mutex<Option<String>>,
    /// The DNS64 server, when `[dns64]` is configured.
    pub dns64: Mutex<Option<dns64::Server>>,
    /// The TrGW media relay, when `[trgw]` is configured.
    pub trgw: Option<Arc<trgw::RelayHandle>>,
    /// The XDP fast path, when `[xdp]` is configured.
    pub xdp: Arc<Mutex<Option<fastpath::FastPlane>>>,
    /// The functions on the function contract (tunnels, softwires, TRT:
    /// [`functions`]), in start order.
    pub registry: Mutex<functions::Functions>,
    /// The IMS-ALG, when `[alg]` is configured.
    pub alg: Option<alg::runner::AlgHandle>,
    /// The destination policy: the gateway's own addresses (watched) and
    /// the planes' policies ([`crate::destinations`]).
    pub destinations: crate::destinations::Destinations,
    /// The DNS64 plane's policy, for a DNS64 (re)started by a reload.
    dns64_destinations: Arc<dstpolicy::Policy>,
    /// Admin server counters.
    pub admin_stats: Arc<admin::AdminStats>,
    /// Descriptors the configuration may need ([`crate::limits::needed`]).
    pub fds_needed: u64,
    admin_token: Mutex<Option<String>>,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").field("config_path", &self.config_path).field("device", &self.device).finish()
    }
}

use function::lock;

impl Daemon {
    /// Counters of all workers, summed.
    pub fn totals(&self) -> Totals {
        Totals::sum(self.stats.iter().map(|s| &**s).chain([&*self.timer_stats]))
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.stats.len()
    }

    /// The admin token in force (`[admin] token` / `token-file`).
    pub fn admin_token(&self) -> Option<String> {
        lock(&self.admin_token).clone()
    }

    /// [`Daemon::reload`], counted (`v6gate_config_reloads_total`), logged
    /// and recorded in `/status` (`reloads.last_error`): every reload path
    /// (SIGHUP, the admin API) goes through here, between `RELOADING=1`
    /// and `READY=1` to systemd ([`notify`]).
    pub fn reload_and_record(&self, source: &str) -> Result<u64, String> {
        notify::reloading();
        let outcome = self.reload_and_count(source);
        notify::ready(&match &outcome {
            Ok(g) => format!("running: reloaded {} (generation {g}, {source})", self.config_path.display()),
            Err(e) => format!("running: reload rejected ({source}), the old configuration stays: {e}"),
        });
        outcome
    }

    fn reload_and_count(&self, source: &str) -> Result<u64, String> {
        match self.reload() {
            Ok(g) => {
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                // The registry's functions apply what the plan accepted
                // (the lwAFTR re-reads its binding file).
                // (Locks in the order reload takes them: config, registry.)
                let cfg = lock(&self.config);
                if let Err(e) = lock(&self.registry).reload(&cfg) {
                    tracing::warn!("reload: {e}");
                }
                drop(cfg);
                *lock(&self.last_reload_error) = None;
                tracing::info!("reloaded {} (generation {g}, {source})", self.config_path.display());
                Ok(g)
            }
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!("reload rejected ({source}), the old configuration stays: {e}");
                *lock(&self.last_reload_error) = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Re-read the configuration file and apply it, or leave everything as
    /// it is and return why not.
    pub fn reload(&self) -> Result<u64, String> {
        let new = Config::load(&self.config_path).map_err(|e| e.to_string())?;
        for w in new.warnings() {
            tracing::warn!("reload: {w}");
        }
        let mut cur = lock(&self.config);
        let without_token = |a: &crate::config::AdminConfig| {
            let mut a = a.clone();
            a.token = None;
            a.token_file = None;
            a
        };
        if without_token(&new.admin) != without_token(&cur.admin) {
            return Err("[admin] changed: restart v6gate to apply (only token and token-file apply on reload)".into());
        }
        if new.trgw != cur.trgw {
            // Live calls hold sockets and ports of the old interfaces.
            return Err("[trgw] changed: restart v6gate to apply".into());
        }
        if let Some(why) = lock(&self.xdp).as_ref().and_then(|p| p.restart_needed(&new)) {
            return Err(why);
        }
        if let function::Reload::NeedsRestart(why) = lock(&self.registry).plan_reload(&cur, &new) {
            return Err(why);
        }
        crate::config::alg::reload(cur.alg.as_ref(), new.alg.as_ref())?;
        let token = crate::validate::admin_token(&new)?;
        let Some((_, idx)) = self.device.clone() else {
            // No TUN device: only [trgw], [alg] or tunnels ran at start.
            if new.siit.is_some() || new.nat64.is_some() || new.dns64.is_some() {
                return Err(
                    "[siit], [nat64] or [dns64] added: v6gate runs without a TUN device (only [trgw], [alg] or tunnels were configured at start); restart v6gate to apply".into(),
                );
            }
            let old = self.engines.load_full();
            let generation = old.generation + 1;
            let engines = Engines::build(&new, generation, 0, Some(&old), 0).map_err(|e| e.to_string())?;
            self.reload_xdp(&cur, &new)?;
            self.reconfigure_alg(&new)?;
            (self.set_log_level)(&new.daemon.log_level);
            hook_nat64(&self.xdp, &engines, self.started);
            self.engines.store(Arc::new(engines));
            *lock(&self.admin_token) = token;
            self.destinations.reconfigure(&new);
            *cur = new;
            return Ok(generation);
        };
        if new.tun.name != cur.tun.name {
            return Err(format!("[tun] name changed ({} -> {}): restart v6gate to apply", cur.tun.name, new.tun.name));
        }
        if new.tun.effective_queues() != self.workers() {
            return Err(format!(
                "[tun] queues changed ({} -> {}): restart v6gate to apply",
                self.workers(),
                new.tun.effective_queues()
            ));
        }
        if (new.tun.io, new.tun.batch, new.tun.busy_poll, new.tun.pin_workers)
            != (cur.tun.io, cur.tun.batch, cur.tun.busy_poll, cur.tun.pin_workers)
        {
            return Err("[tun] io, batch, busy-poll or pin-workers changed: restart v6gate to apply".into());
        }
        let old = self.engines.load_full();
        let generation = old.generation + 1;
        let now_ns = self.started.elapsed().as_nanos() as u64;
        let engines =
            Engines::build(&new, generation, self.workers(), Some(&old), now_ns).map_err(|e| e.to_string())?;
        // Side effects from here on; each step that can fail is undone if a
        // later one fails, so a rejected reload leaves the old state.
        let mut nl = Netlink::open().map_err(|e| format!("netlink: {e}"))?;
        self.reload_xdp(&cur, &new)?;
        let mut have = lock(&self.routes);
        let want = routes_for(&new);
        let mut undo = Undo::default();
        let applied = (|| -> Result<(), String> {
            if (new.tun.mtu, new.tun.txqueuelen) != (cur.tun.mtu, cur.tun.txqueuelen) {
                nl.link_up(idx, new.tun.mtu, new.tun.txqueuelen)
                    .map_err(|e| format!("setting MTU {} / txqueuelen {}: {e}", new.tun.mtu, new.tun.txqueuelen))?;
                undo.link = Some((cur.tun.mtu, cur.tun.txqueuelen));
            }
            for a in new.tun.addresses.iter().filter(|a| !cur.tun.addresses.contains(a)) {
                nl.add_address(idx, *a).map_err(|e| format!("adding address {a}: {e}"))?;
                undo.addresses.push(*a);
            }
            for r in want.iter().filter(|r| !have.contains(r)) {
                nl.add_route(idx, *r).map_err(|e| format!("adding route {r}: {e}"))?;
                undo.routes.push(*r);
            }
            if new.dns64 != cur.dns64 {
                self.restart_dns64(cur.dns64.as_ref(), new.dns64.as_ref())?;
            }
            Ok(())
        })();
        let applied = applied.and_then(|()| self.reconfigure_alg(&new));
        if let Err(e) = applied {
            if let Err(e2) = self.reload_xdp(&new, &cur) {
                tracing::error!("reload rollback: xdp: {e2}");
            }
            let removed_address = !undo.addresses.is_empty();
            undo.run(&mut nl, idx);
            if removed_address {
                reassert_routes(&mut nl, idx, &have);
            }
            return Err(e);
        }
        // Committed: remove what the new file no longer has (best effort).
        for a in cur.tun.addresses.iter().filter(|a| !new.tun.addresses.contains(a)) {
            if let Err(e) = nl.del_address(idx, *a) {
                tracing::warn!("removing address {a}: {e}");
            }
        }
        for r in have.iter().filter(|r| !want.contains(r)) {
            if let Err(e) = nl.del_route(idx, *r) {
                tracing::warn!("removing route {r}: {e}");
            }
        }
        if cur.tun.addresses.iter().any(|a| !new.tun.addresses.contains(a)) {
            reassert_routes(&mut nl, idx, &want);
        }
        *have = want;
        (self.set_log_level)(&new.daemon.log_level);
        hook_nat64(&self.xdp, &engines, self.started);
        self.engines.store(Arc::new(engines));
        *lock(&self.admin_token) = token;
        self.destinations.reconfigure(&new);
        *cur = new;
        drop(cur);
        // Logged when it fails; the reload itself succeeded.
        let _ = self.sync_bib_file();
        Ok(generation)
    }
}

impl Daemon {
    /// Bring the fast path from `cur`'s `[xdp]` to `new`'s: load it when
    /// added, detach and unload it when removed, else mirror and re-attach
    /// ([`fastpath::FastPlane::apply`]). On failure the fast path is put
    /// back as `cur` had it (or, failing that, everything passes to the
    /// slow path) and the error returned.
    fn reload_xdp(&self, cur: &Config, new: &Config) -> Result<(), String> {
        let mut slot = lock(&self.xdp);
        match (slot.as_mut(), &new.xdp) {
            (None, None) => Ok(()),
            (Some(_), None) => {
                if let Some(mut p) = slot.take() {
                    p.stop();
                }
                Ok(())
            }
            (None, Some(_)) => {
                *slot = fastpath::FastPlane::start(new)?;
                Ok(())
            }
            (Some(p), Some(_)) => match p.apply(new) {
                Ok(()) => Ok(()),
                Err(e) => {
                    if let Err(e2) = p.apply(cur) {
                        tracing::error!("xdp: cannot restore the previous fast path ({e2}): fast path off");
                        if let Some(mut p) = slot.take() {
                            p.stop();
                        }
                    }
                    Err(e)
                }
            },
        }
    }
}

/// Add `routes` again (idempotent): removing a device's last IPv4 address
/// makes the kernel flush the device's IPv4 routes.
fn reassert_routes(nl: &mut Netlink, idx: u32, routes: &[IpPrefix]) {
    for r in routes {
        if let Err(e) = nl.add_route(idx, *r) {
            tracing::warn!("re-adding route {r}: {e}");
        }
    }
}

/// What a reload added so far, to take back if a later step fails.
#[derive(Default)]
struct Undo {
    link: Option<(u32, u32)>,
    addresses: Vec<crate::config::IfAddr>,
    routes: Vec<IpPrefix>,
}

impl Undo {
    fn run(self, nl: &mut Netlink, idx: u32) {
        for r in self.routes {
            if let Err(e) = nl.del_route(idx, r) {
                tracing::warn!("reload rollback: removing route {r}: {e}");
            }
        }
        for a in self.addresses {
            if let Err(e) = nl.del_address(idx, a) {
                tracing::warn!("reload rollback: removing address {a}: {e}");
            }
        }
        if let Some((mtu, qlen)) = self.link {
            if let Err(e) = nl.link_up(idx, mtu, qlen) {
                tracing::warn!("reload rollback: restoring MTU {mtu}: {e}");
            }
        }
    }
}

impl Daemon {
    /// Rewrite `[nat64] bib-file` with the static BIB entries added at run
    /// time (after `bib add` / `bib remove` and reloads). The error, also
    /// logged, when it cannot be written.
    pub fn sync_bib_file(&self) -> Result<(), String> {
        let path = lock(&self.config).nat64.as_ref().and_then(|n| n.bib_file.clone());
        let eng = self.engines.load();
        let (Some(path), Some(n)) = (path, eng.nat64.as_ref()) else { return Ok(()) };
        bibfile::sync(n, std::path::Path::new(&path)).inspect_err(|e| tracing::warn!("nat64 bib-file: {e}"))
    }

    /// Hands a reloaded `[alg]` to the running ALG (the last step of a
    /// reload that can fail: the checks ran before).
    fn reconfigure_alg(&self, new: &Config) -> Result<(), String> {
        match (&self.alg, &new.alg) {
            (Some(h), Some(c)) => h.reconfigure(c.clone()),
            _ => Ok(()),
        }
    }

    /// Functions running: the packet engines, then DNS64.
    pub fn functions(&self) -> Vec<&'static str> {
        let mut f = self.engines.load().functions();
        if lock(&self.dns64).is_some() {
            f.push("dns64");
        }
        if self.trgw.is_some() {
            f.push("trgw");
        }
        f.extend(lock(&self.registry).names());
        if self.alg.is_some() {
            f.push("alg");
        }
        f
    }

    /// Apply a changed `[dns64]`: a running server takes the new table
    /// without going down ([`dns64::Server::reconfigure`]: queries keep
    /// being answered, a failure changes nothing); otherwise the server is
    /// started or stopped. When a new one cannot start (e.g. its address is
    /// taken), the old one is started again and the error returned.
    fn restart_dns64(&self, old: Option<&dns64::Config>, new: Option<&dns64::Config>) -> Result<(), String> {
        let mut slot = lock(&self.dns64);
        if let (Some(s), Some(n)) = (slot.as_ref(), new) {
            s.reconfigure(n).map_err(|e| format!("[dns64]: {e}"))?;
            tracing::info!("dns64: reconfigured, serving on {:?}", s.local_addrs());
            return Ok(());
        }
        if let Some(s) = slot.take() {
            s.stop();
        }
        let Some(n) = new else { return Ok(()) };
        match dns64::Server::start_with(n, Some(self.dns64_destinations.clone())) {
            Ok(s) => {
                tracing::info!("dns64: serving on {:?}", s.local_addrs());
                *slot = Some(s);
                Ok(())
            }
            Err(e) => {
                if let Some(o) = old {
                    match dns64::Server::start_with(o, Some(self.dns64_destinations.clone())) {
                        Ok(s) => *slot = Some(s),
                        Err(e2) => tracing::error!("dns64: cannot restart the old server either: {e2}"),
                    }
                }
                Err(format!("[dns64]: cannot start: {e}"))
            }
        }
    }
}

/// CLOCK_MONOTONIC minus `epoch.elapsed()`, in nanoseconds: what turns the
/// fast path's timestamps into the translator's clock.
/// Give the NAT64 translator of `eng` the fast path's hook (sessions
/// mirrored as they are created), or take it away when the plane does not
/// mirror NAT64 sessions.
fn hook_nat64(xdp: &Mutex<Option<fastpath::FastPlane>>, eng: &Engines, epoch: Instant) {
    let Some(n) = &eng.nat64 else { return };
    let hook = lock(xdp).as_mut().and_then(|p| p.nat64_hook(mono_minus_epoch(epoch)));
    n.set_fast_hook(hook);
    if let Some(p) = lock(xdp).as_ref() {
        p.natpt_hosts(n);
    }
}

fn mono_minus_epoch(epoch: Instant) -> u64 {
    let now = epoch.elapsed().as_nanos() as u64;
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64))
        .saturating_sub(now)
}

/// Every 100 ms: NAT64 expiry; the ICMP errors it returns (held SYNs
/// nobody answered) are written to the TUN. Every half second, and right
/// after sessions expire, the XDP fast path's NAT64 mirror is synced
/// (before expiry: sessions the fast path used live on).
fn timer(
    q: &tun::TunQueue,
    engines: &ArcSwap<Engines>,
    shutdown: &AtomicBool,
    st: &WorkerStats,
    epoch: Instant,
    xdp: &Mutex<Option<fastpath::FastPlane>>,
) {
    let mut tick = 0u32;
    while !shutdown.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let eng = engines.load();
        let Some(n) = &eng.nat64 else { continue };
        tick = tick.wrapping_add(1);
        let sync = |xdp: &Mutex<Option<fastpath::FastPlane>>| {
            if let Some(p) = lock(xdp).as_mut().filter(|p| p.mirrors_nat64()) {
                p.sync_nat64(n, epoch.elapsed().as_nanos() as u64, mono_minus_epoch(epoch));
            }
        };
        if tick.is_multiple_of(fastpath::NAT64_SYNC_TICKS) {
            sync(xdp);
        }
        let ex = n.expire(epoch.elapsed().as_nanos() as u64);
        if ex.sessions > 0 || ex.to_trans > 0 {
            sync(xdp);
        }
        for p in &ex.icmp {
            match q.send(p) {
                Ok(()) => {
                    stats::bump(&st.icmp_errors_sent, 1);
                    let f = worker::family(p);
                    stats::bump(&st.tx_packets[f], 1);
                    stats::bump(&st.tx_bytes[f], p.len() as u64);
                }
                Err(e) => {
                    st.daemon_drop(stats::DaemonDrop::WriteError);
                    tracing::debug!("timer: TUN write failed: {e}");
                }
            }
        }
    }
}

/// Run the daemon until `signals` yields [`Signal::Stop`]. The binary
/// owns signals and logging: it catches SIGHUP/SIGINT/SIGTERM before
/// calling this (so none is lost during start-up) and passes a function
/// that applies `[daemon] log-level`.
pub fn run(
    args: &RunArgs,
    signals: &mut dyn Iterator<Item = Signal>,
    set_log_level: Box<dyn Fn(&str) + Send + Sync>,
) -> anyhow::Result<()> {
    let cfg = Config::load(&args.config)?;
    set_log_level(&cfg.daemon.log_level);
    crate::sys::keep_heap();
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    for w in crate::validate::warnings(&cfg) {
        tracing::warn!("{w}");
    }
    let fds_needed = crate::limits::needed(&cfg);
    match crate::limits::raise(fds_needed) {
        Ok(r) => {
            if let Some(w) = r.warning() {
                tracing::warn!("{w}");
            } else if r.soft != r.before.soft {
                tracing::info!("open-file limit raised from {} to {} (needed {})", r.before.soft, r.soft, r.needed);
            }
        }
        Err(e) => tracing::warn!("{e}"),
    }
    let token = crate::validate::admin_token(&cfg).map_err(|e| anyhow::anyhow!("[admin] token-file: {e}"))?;
    let needs_tun = cfg.siit.is_some() || cfg.nat64.is_some() || cfg.dns64.is_some();
    let n = if needs_tun { cfg.tun.effective_queues() } else { 0 };
    let engines = Engines::build(&cfg, 1, n, None, 0)?;
    if let (Some(nat), Some(path)) = (&engines.nat64, cfg.nat64.as_ref().and_then(|c| c.bib_file.as_deref())) {
        let (added, refused) = bibfile::restore(nat, std::path::Path::new(path));
        for r in &refused {
            tracing::warn!("nat64 bib-file: {r}");
        }
        if added > 0 {
            tracing::info!(
                "nat64: {added} static BIB entr{} restored from {path}",
                if added == 1 { "y" } else { "ies" }
            );
        }
    }

    let name = cfg.tun.name.clone();
    let io = cfg.tun.io;
    let mut tun_parts = None;
    let routes = if needs_tun { routes_for(&cfg) } else { Vec::new() };
    if needs_tun {
        let queues =
            tun::open_queues(&name, n, io == IoMode::Poll).with_context(|| format!("creating TUN device {name}"))?;
        let Some(idx) = tun::if_index(&name) else { bail!("TUN device {name} vanished") };
        let mut nl = Netlink::open().context("opening a route netlink socket")?;
        nl.link_up(idx, cfg.tun.mtu, cfg.tun.txqueuelen)
            .with_context(|| format!("bringing {name} up with MTU {}", cfg.tun.mtu))?;
        for a in &cfg.tun.addresses {
            nl.add_address(idx, *a).with_context(|| format!("adding address {a} to {name}"))?;
        }
        for r in &routes {
            nl.add_route(idx, *r).with_context(|| format!("adding route {r} into {name}"))?;
        }
        tun_parts = Some((queues, idx, nl));
    }

    // The fast path last: what it passes goes to the slow path set up above.
    let fast = fastpath::FastPlane::start(&cfg).map_err(|e| anyhow::anyhow!(e))?;

    let shutdown = Arc::new(AtomicBool::new(false));
    let engines = Arc::new(ArcSwap::from_pointee(engines));
    let stats: Vec<Arc<WorkerStats>> = (0..n).map(|_| Arc::new(WorkerStats::default())).collect();
    let epoch = Instant::now();
    let started_unix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let pin = cfg.tun.pin_workers;
    let batch = cfg.tun.batch;
    let busy_poll = cfg.tun.busy_poll;
    let admin_addr = cfg.admin.listen;
    let admin_limits = admin::Limits::of(&cfg.admin);
    // One gateway for every plane that sends where a client says.
    let destinations =
        crate::destinations::Destinations::start(&cfg).context("starting the destination policy (route netlink)")?;
    let dns64_destinations = {
        let p = dstpolicy::Policy::new("dns64", destinations.gateway().clone(), dstpolicy::Lists::default());
        let p = Arc::new(p.failing_open());
        destinations.register(p.clone());
        p
    };
    let dns = match &cfg.dns64 {
        Some(d) => {
            let s = dns64::Server::start_with(d, Some(dns64_destinations.clone()))
                .map_err(|e| anyhow::anyhow!("[dns64]: cannot start: {e}"))?;
            tracing::info!("dns64: serving on {:?}", s.local_addrs());
            Some(s)
        }
        None => None,
    };
    let relay = match &cfg.trgw {
        Some(t) => {
            let policy = trgw::policy::MediaPolicy::new(t, destinations.gateway().clone());
            policy.policies().into_iter().for_each(|p| destinations.register(p.clone()));
            let r = trgw::Relay::start_with(t.clone(), policy).context("[trgw]: cannot start the media relay")?;
            tracing::info!("trgw: ng control on {:?}, rtpproxy on {:?}", r.ng_addr(), r.rtpproxy_udp_addr());
            Some(Arc::new(r))
        }
        None => None,
    };
    let alg = match &cfg.alg {
        Some(a) => {
            // Next hops through the process's one policy (plane `alg`).
            let policy = destinations.policy("alg", a.next_hop_lists());
            let s = alg::cli::serve_with_policy(a.clone(), relay.clone(), Some(policy))
                .context("[alg]: cannot start the IMS-ALG")?;
            tracing::info!(
                "alg: SIP on {} and {} (UDP{}), media {:?}",
                s.alg.udp_v6,
                s.alg.udp_v4,
                if a.tcp { " and TCP" } else { "" },
                a.media
            );
            Some(s.alg)
        }
        None => None,
    };
    // `[tun] busy-poll` applies to the softwire threads' devices too.
    let env = function::Env { config_path: Some(args.config.clone()), busy_poll: cfg.tun.busy_poll };
    let registry = functions::start(&cfg, &env, &destinations)?;
    if !registry.is_empty() {
        tracing::info!("functions on the contract: {}", registry.names().join(", "));
    }
    let timer_stats = Arc::new(WorkerStats::default());
    let daemon = Arc::new(Daemon {
        config_path: args.config.clone(),
        config: Mutex::new(cfg),
        engines: engines.clone(),
        stats: stats.clone(),
        timer_stats: timer_stats.clone(),
        started: epoch,
        started_unix,
        device: tun_parts.as_ref().map(|(_, idx, _)| (name.clone(), *idx)),
        routes: Mutex::new(routes),
        reloads_ok: AtomicU64::new(0),
        reloads_failed: AtomicU64::new(0),
        last_reload_error: Mutex::new(None),
        dns64: Mutex::new(dns),
        trgw: relay,
        xdp: Arc::new(Mutex::new(fast)),
        registry: Mutex::new(registry),
        alg,
        destinations,
        dns64_destinations,
        admin_stats: Arc::new(admin::AdminStats::default()),
        fds_needed,
        admin_token: Mutex::new(token),
        set_log_level,
    });
    hook_nat64(&daemon.xdp, &daemon.engines.load(), epoch);

    let mut threads = Vec::new();
    let mut nl_idx = None;
    if let Some((queues, idx, nl)) = tun_parts {
        nl_idx = Some((nl, idx));
        let timer_queue = queues.first().map(|q| q.try_clone()).transpose().context("duplicating a TUN queue")?;
        for (id, (queue, st)) in queues.into_iter().zip(stats).enumerate() {
            let w = worker::Worker {
                id,
                queue,
                io,
                stats: st,
                engines: engines.clone(),
                shutdown: shutdown.clone(),
                batch,
                busy_poll,
                epoch,
            };
            let t = std::thread::Builder::new().name(format!("v6gate-w{id}")).spawn(move || {
                if pin {
                    if let Err(e) = tun::pin_to_cpu(id) {
                        tracing::warn!("worker {id}: cannot pin to CPU {id}: {e}");
                    }
                }
                w.run()
            })?;
            threads.push(t);
        }
        if let Some(q) = timer_queue {
            let (engines, shutdown, st, xdp) = (engines.clone(), shutdown.clone(), timer_stats, daemon.xdp.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("v6gate-timer".into())
                    .spawn(move || timer(&q, &engines, &shutdown, &st, epoch, &xdp))?,
            );
        }
    }

    if daemon.trgw.is_some() && lock(&daemon.xdp).as_ref().is_some_and(|p| p.mirrors_trgw()) {
        let (d, shutdown) = (daemon.clone(), shutdown.clone());
        threads.push(std::thread::Builder::new().name("v6gate-xdp".into()).spawn(move || {
            while !shutdown.load(Ordering::Relaxed) {
                std::thread::sleep(fastpath::TRGW_SYNC);
                if let (Some(r), Some(p)) = (d.trgw.as_ref(), lock(&d.xdp).as_mut()) {
                    p.sync_trgw(r);
                }
            }
        })?);
    }

    if lock(&daemon.xdp).as_ref().is_some_and(|p| p.mirrors_routes()) {
        let (d, shutdown) = (daemon.clone(), shutdown.clone());
        threads.push(std::thread::Builder::new().name("v6gate-xdp-routes".into()).spawn(move || {
            let mut nl = netsys::netlink::Netlink::open();
            while !shutdown.load(Ordering::Relaxed) {
                // Dumped without the lock; applied under it.
                let dump = match nl.as_mut() {
                    Ok(nl) => xdproutes::Dump::read(nl),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
                if let Some(p) = lock(&d.xdp).as_mut() {
                    p.sync_routes(dump);
                }
                let t0 = std::time::Instant::now();
                while t0.elapsed() < xdproutes::ROUTE_SYNC && !shutdown.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
        })?);
    }

    let admin = match admin_addr {
        Some(a) => {
            Some(admin::Admin::start(a, admin_limits, daemon.clone()).with_context(|| format!("admin API on {a}"))?)
        }
        None => None,
    };

    let running = format!(
        "running: {}, {n} worker(s), functions {}, admin {}",
        daemon
            .device
            .as_ref()
            .map_or("no TUN device".to_string(), |(name, idx)| format!("device {name} (index {idx})")),
        daemon.functions().join("+"),
        admin_addr.map_or("disabled".to_string(), |a| format!("http://{a}"))
    );
    tracing::info!("{running}");
    notify::ready(&running);
    for sig in signals {
        match sig {
            Signal::Reload => {
                let _ = daemon.reload_and_record("SIGHUP");
            }
            Signal::Stop(n) => {
                tracing::info!("signal {n}: stopping");
                notify::stopping();
                break;
            }
        }
    }

    // Detach first: from here on the slow path stops.
    if let Some(mut p) = lock(&daemon.xdp).take() {
        p.stop();
    }
    shutdown.store(true, Ordering::Relaxed);
    if let Some(a) = admin {
        a.stop();
    }
    if let Some(d) = lock(&daemon.dns64).take() {
        d.stop();
    }
    if let Some(a) = daemon.alg.as_ref() {
        let s = a.snapshot();
        tracing::info!(
            "alg: {} call(s) answered, {} failed, {} cancelled, {} dialog(s) live at stop",
            s.stats.calls_answered,
            s.stats.calls_failed,
            s.stats.calls_cancelled,
            s.tables.2
        );
    }
    if let Some(r) = daemon.trgw.as_ref() {
        let s = r.stats();
        tracing::info!(
            "trgw: {} call(s) created, {} timed out, {} live at stop",
            s.totals.calls_created,
            s.totals.calls_timed_out,
            s.calls
        );
    }
    // The registry's functions, the last started first: threads joined,
    // devices closed (which removes them and their routes), the TRT's
    // listeners closed and its auto setup's rules and routes removed.
    for line in lock(&daemon.registry).stop() {
        tracing::info!("{line}");
    }
    // The ALG and the relay stop when the last reference to the daemon
    // goes (their handles stop their threads on drop; the ALG holds a
    // reference to the relay, so the relay outlives it).
    for t in threads {
        let _ = t.join();
    }
    if let Some((mut nl, idx)) = nl_idx {
        for r in lock(&daemon.routes).iter() {
            if let Err(e) = nl.del_route(idx, *r) {
                tracing::debug!("removing route {r}: {e}");
            }
        }
        // The queues were moved into the workers and closed when they ended:
        // the device goes with the last one (give the kernel a moment).
        for _ in 0..100 {
            if tun::if_index(&name).is_none() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    tracing::info!("stopped");
    Ok(())
}
