//! Runners: each configured function on its own thread, over its own TUN
//! device (`netsys`, shared with the daemon and the 6to4/Teredo runners):
//! the device gets the function's end-point address and IPv4 prefixes
//! routed into it, every packet read from it goes through the engine, and
//! everything the engine emits is written back for the kernel to route.
//! The kernel must forward (`net.ipv4.ip_forward`, `net.ipv6.conf.all.
//! forwarding`): packets written into a TUN device are received from it.
//!
//! The lwAFTR thread also serves DSTM leases on a UDP socket, watches
//! the binding file and, with `[lw4o6.xdp]`, keeps its XDP fast path's
//! maps equal to the bindings and leases ([`crate::fast`]); the B4 thread in DSTM mode leases its address
//! through the engine and puts it on the device, and with `[b4.kernel]`
//! points its kernel datapath ([`crate::b4k`]) at the AFTR or the lease's TEP.
//! The AFTR thread with `[dslite.xdp]` mirrors its NAT44's carried mappings
//! into its XDP fast path after every packet, before it writes what the
//! engine emitted.
//!
//! [`Softwires::start`] is the standalone entry point (`v6gate softwire`);
//! the daemon integration (phase 2) will hand packets to the same engines
//! from its TUN workers instead.

use crate::aftr::Aftr;
use crate::b4::B4;
use crate::b4k::B4Fast;
use crate::binding::BindingTable;
use crate::config::{B4Mode, B4Table, DsliteTable, Lw4o6Table, SoftwireConfig};
use crate::fast::{AftrFast, BlockPorts, LwaftrFast};
use crate::lease::{self, LeaseServer, Msg};
use crate::lwaftr::Lwaftr;
use crate::nat44::{PoolPorts, Ports};
use crate::stats::Action;
use anyhow::{Context as _, Result};
use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use netsys::IfAddr;
use serde_json::{json, Value};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use xlat::Out;

use netsys::tun::Waiter;
use netsys::wait;
pub use netsys::Device;

/// One running function's shared state.
#[derive(Debug, Default)]
struct Shared {
    status: Mutex<Value>,
    reload: AtomicBool,
    errors: AtomicU64,
}

/// The running functions.
#[derive(Debug)]
pub struct Softwires {
    stop: Arc<AtomicBool>,
    threads: Vec<(String, JoinHandle<()>)>,
    shared: Vec<(String, Arc<Shared>)>,
    config_path: Option<std::path::PathBuf>,
    /// Busy-poll window of every thread's [`Waiter`].
    busy_poll: Duration,
    /// The functions, as the configuration names them (`lw4o6+dstm`, ...).
    pub(crate) names: Vec<&'static str>,
}

fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// How long a softwire thread sleeps at most before its housekeeping
/// (expiry, status, reloads) runs anyway.
const IDLE_MS: u16 = 50;

/// The one place every softwire thread waits for work: its TUN queue
/// readable, or `extra` (the lwAFTR's DSTM lease socket), or [`IDLE_MS`]
/// passing; `ready[0]` is the queue, `ready[1]` the extra. A new
/// session's packets pay this wake-up at every TUN hop (B4 and AFTR);
/// within the busy-poll window after the last packet ([`Waiter`], the
/// daemon's `[tun] busy-poll`) the thread does not sleep but reads again
/// at once (both fds reported ready: they are non-blocking). The loops
/// call nothing else to wait, and [`pump`] then drains the queue.
fn wait_for_packets(dev: &Device, extra: Option<&dyn std::os::fd::AsFd>, ready: &mut [bool], waiter: &mut Waiter) {
    if waiter.spin() {
        ready.iter_mut().for_each(|r| *r = true);
        return;
    }
    let _ = match extra {
        Some(e) => wait(&[&dev.queue, e], IDLE_MS, ready),
        None => wait(&[&dev.queue], IDLE_MS, ready),
    };
}

/// Read everything the device has, through `f`, writing what it emits.
/// Returns the number of packets read.
fn pump(
    dev: &Device,
    buf: &mut [u8],
    out: &mut Out,
    shared: &Shared,
    mut f: impl FnMut(&[u8], &mut Out) -> Action,
) -> usize {
    let mut n = 0;
    while n < 256 {
        match dev.queue.recv(buf) {
            Ok(Some(len)) => {
                n += 1;
                let _ = f(&buf[..len], out);
                for (_, p) in out.iter() {
                    if dev.queue.send(p).is_err() {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(None) => break,
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    n
}

impl Softwires {
    /// Open the devices and start a thread per function. `config_path` is
    /// re-read on [`Softwires::reload`].
    pub fn start(cfg: &SoftwireConfig, config_path: Option<std::path::PathBuf>) -> Result<Softwires> {
        Softwires::start_with(cfg, config_path, Duration::ZERO)
    }

    /// [`Softwires::start`] with a busy-poll window: after handling
    /// packets each thread keeps reading its TUN queue for `busy_poll`
    /// before it sleeps in `poll(2)` (the daemon's `[tun] busy-poll`;
    /// zero: never spins).
    pub fn start_with(
        cfg: &SoftwireConfig,
        config_path: Option<std::path::PathBuf>,
        busy_poll: Duration,
    ) -> Result<Softwires> {
        let stop = Arc::new(AtomicBool::new(false));
        let names = cfg.functions();
        let mut s =
            Softwires { stop: stop.clone(), threads: Vec::new(), shared: Vec::new(), config_path, busy_poll, names };
        if let Some(t) = &cfg.dslite {
            s.spawn_dslite(t.clone())?;
        }
        if let Some(t) = &cfg.lw4o6 {
            s.spawn_lw4o6(t.clone())?;
        }
        if let Some(t) = &cfg.b4 {
            s.spawn_b4(t.clone())?;
        }
        Ok(s)
    }

    fn add(&mut self, name: &str, shared: Arc<Shared>, h: JoinHandle<()>) {
        self.shared.push((name.to_string(), shared));
        self.threads.push((name.to_string(), h));
    }

    /// Names of the running functions.
    pub fn functions(&self) -> Vec<String> {
        self.shared.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Every function's counters and state as JSON.
    pub fn status(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (n, s) in &self.shared {
            let mut v = function::lock(&s.status).clone();
            if let Value::Object(o) = &mut v {
                o.insert("io_errors".into(), json!(s.errors.load(Ordering::Relaxed)));
            }
            m.insert(n.clone(), v);
        }
        Value::Object(m)
    }

    /// Ask every function to reload: the lwAFTR re-reads its binding file
    /// and its `[lw4o6.dstm]` settings (leases are kept).
    pub fn reload(&self) {
        for (_, s) in &self.shared {
            s.reload.store(true, Ordering::Relaxed);
        }
    }

    /// Stop every thread and remove the devices.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, h) in self.threads {
            let _ = h.join();
        }
    }

    fn spawn_dslite(&mut self, t: DsliteTable) -> Result<()> {
        let dev = Device::open(&t.tun)?;
        let (ports, blocks): (Box<dyn Ports>, _) = match &t.xdp {
            Some(x) if x.port_block > 0 => {
                let q = t.aftr.nat.max_ports_per_subscriber;
                let m = t.aftr.nat.subscriber_mask;
                let (p, b) = BlockPorts::new(t.pool4.clone(), t.max_port_probes, x.port_block, q, m);
                (Box::new(p), Some(b))
            }
            _ => (Box::new(PoolPorts::new(t.pool4.clone(), t.max_port_probes)), None),
        };
        let aftr = Aftr::new(t.aftr.clone(), ports);
        let mut fast = match &t.xdp {
            Some(x) => {
                let pool: Vec<(Ipv4Addr, u8)> = t.pool4.iter().map(|e| (e.prefix.addr(), e.prefix.len())).collect();
                let mut f = AftrFast::load_with(&aftr, &pool, x.max_sessions, blocks).context("[dslite.xdp]")?;
                for i in &x.interfaces {
                    f.attach(i, x.mode).with_context(|| format!("[dslite.xdp] interfaces: {i}"))?;
                }
                tracing::info!(interfaces = ?x.interfaces, "dslite XDP fast path attached");
                Some(f)
            }
            None => None,
        };
        let shared = Arc::new(Shared::default());
        let (stop, sh, busy) = (self.stop.clone(), shared.clone(), self.busy_poll);
        let h = std::thread::Builder::new().name("sw-dslite".into()).spawn(move || {
            let start = Instant::now();
            let mut waiter = Waiter::new(busy);
            let mut buf = vec![0u8; 65536];
            let mut out = Out::new();
            let mut ready = [false];
            let mut last = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                wait_for_packets(&dev, None, &mut ready, &mut waiter);
                let now = start.elapsed().as_nanos() as u64;
                // The fast path learns of a mapping before the packet that made it carriable leaves.
                // Mappings the fast path created are entered before any packet is handled.
                if let Some(f) = &mut fast {
                    f.drain(&aftr, now);
                }
                let handle = |p: &[u8], o: &mut Out| {
                    if let Some(f) = &mut fast {
                        f.drain(&aftr, now);
                    }
                    let a = aftr.process(p, now, o);
                    if let Some(f) = &mut fast {
                        f.sync(&aftr);
                    }
                    a
                };
                if pump(&dev, &mut buf, &mut out, &sh, handle) > 0 {
                    waiter.worked();
                }
                if last.elapsed() >= Duration::from_millis(200) {
                    last = Instant::now();
                    match &mut fast {
                        Some(f) => f.expire(&aftr, now),
                        None => aftr.expire(now),
                    };
                    let n = aftr.nat();
                    let usage: Vec<Value> = nat64::Protocol::ALL
                        .iter()
                        .map(|p| {
                            let (total, used) = n.usage(*p);
                            json!({"proto": format!("{p:?}").to_lowercase(), "ports": total, "used": used})
                        })
                        .collect();
                    *function::lock(&sh.status) = json!({
                        "device": dev.name,
                        "xdp": fast.as_ref().map(|f| f.status()),
                        "counters": aftr.counters().snapshot(),
                        "mappings": n.len(),
                        "mappings_created": n.created.load(Ordering::Relaxed),
                        "mappings_expired": n.expired.load(Ordering::Relaxed),
                        "pool4": usage,
                    });
                }
            }
        })?;
        self.add("dslite", shared, h);
        Ok(())
    }

    fn spawn_lw4o6(&mut self, t: Lw4o6Table) -> Result<()> {
        let table = match &t.binding_file {
            Some(f) => {
                BindingTable::load(f, t.psid_offset).map_err(|e| anyhow::anyhow!("[lw4o6] binding-file: {e}"))?
            }
            None => BindingTable::new(),
        };
        let mut leases = match &t.dstm {
            Some(d) => {
                let mut s = LeaseServer::new(d.lease.clone());
                let (kept, skipped) =
                    s.load(now_unix_ms() / 1000).with_context(|| "[lw4o6.dstm] lease-file: reading the leases")?;
                tracing::info!(kept, skipped, "DSTM leases restored");
                let sock = UdpSocket::bind(d.listen).with_context(|| format!("[lw4o6.dstm] listen {}", d.listen))?;
                sock.set_nonblocking(true)?;
                Some((s, sock))
            }
            None => None,
        };
        let dev = Device::open(&t.tun)?;
        let lw = Lwaftr::new(t.lwaftr, table);
        if let Some((s, _)) = &leases {
            lw.set_leases(s.table());
        }
        let mut fast = match &t.xdp {
            Some(x) => {
                let mut f = LwaftrFast::load(&lw, x.max_bindings).context("[lw4o6.xdp]")?;
                for i in &x.interfaces {
                    f.attach(i, x.mode).with_context(|| format!("[lw4o6.xdp] interfaces: {i}"))?;
                }
                tracing::info!(interfaces = ?x.interfaces, bindings = f.fast_path().bindings(), "lw4o6 XDP fast path attached");
                Some(f)
            }
            None => None,
        };
        let shared = Arc::new(Shared::default());
        let (stop, sh, path, busy) = (self.stop.clone(), shared.clone(), self.config_path.clone(), self.busy_poll);
        let mut t = t;
        let h = std::thread::Builder::new().name("sw-lw4o6".into()).spawn(move || {
            let start = Instant::now();
            let mut waiter = Waiter::new(busy);
            let mut buf = vec![0u8; 65536];
            let mut out = Out::new();
            let mut ready = [false, false];
            let mut last = Instant::now();
            let mtime = |t: &Lw4o6Table| {
                t.binding_file.as_ref().and_then(|f| std::fs::metadata(f).ok()).and_then(|m| m.modified().ok())
            };
            let mut seen = mtime(&t);
            let (mut reloads, mut reload_errors) = (0u64, 0u64);
            let mut last_error = String::new();
            while !stop.load(Ordering::Relaxed) {
                match &leases {
                    Some((_, sock)) => wait_for_packets(&dev, Some(sock), &mut ready, &mut waiter),
                    None => wait_for_packets(&dev, None, &mut ready[..1], &mut waiter),
                }
                let now = start.elapsed().as_nanos() as u64;
                if pump(&dev, &mut buf, &mut out, &sh, |p, o| lw.process(p, now, o)) > 0 {
                    waiter.worked();
                }
                if let Some((srv, sock)) = &mut leases {
                    let mut changed = false;
                    let mut mbuf = [0u8; 512];
                    while let Ok((n, from)) = sock.recv_from(&mut mbuf) {
                        let SocketAddr::V6(from6) = from else { continue };
                        let (reply, ch) = srv.handle(*from6.ip(), &mbuf[..n], now_unix_ms());
                        changed |= ch;
                        if let Some(r) = reply {
                            let _ = sock.send_to(&r, from);
                        }
                    }
                    if changed {
                        // The bindings follow at once; the file at most once per lease-file-interval.
                        lw.set_leases(srv.table());
                        if let Some(f) = &mut fast {
                            if let Err(e) = f.refresh(&lw) {
                                tracing::warn!("lw4o6 XDP fast path: {e}; the rest stays on the slow path");
                            }
                        }
                    }
                }
                let due_reload = sh.reload.swap(false, Ordering::Relaxed);
                if last.elapsed() >= Duration::from_millis(200) || due_reload {
                    last = Instant::now();
                    lw.expire(now);
                    if let Some((srv, _)) = &mut leases {
                        if !srv.expire(now_unix_ms() / 1000).is_empty() {
                            lw.set_leases(srv.table());
                        }
                        if let Err(e) = srv.save_if_due(now_unix_ms()) {
                            tracing::warn!("DSTM lease file: {e}");
                        }
                    }
                    // Reload: the configuration file's [lw4o6] (bindings and DSTM), or a changed binding file.
                    let file_changed = t.watch && mtime(&t) != seen;
                    if due_reload || file_changed {
                        match reload_lw4o6(&path, &mut t, &lw, &mut leases) {
                            Ok(n) => {
                                reloads += 1;
                                tracing::info!(bindings = n, "lw4o6 bindings reloaded");
                            }
                            Err(e) => {
                                reload_errors += 1;
                                last_error = e.to_string();
                                tracing::warn!("lw4o6 reload refused, the old bindings stay: {e}");
                            }
                        }
                        seen = mtime(&t);
                    }
                    if let Some(f) = &mut fast {
                        // A reload or a lease change: the maps follow within this turn.
                        if let Err(e) = f.refresh(&lw) {
                            tracing::warn!("lw4o6 XDP fast path: {e}; the rest stays on the slow path");
                        }
                    }
                    let b = lw.bindings();
                    *function::lock(&sh.status) = json!({
                        "device": dev.name,
                        "xdp": fast.as_ref().map(|f| f.status()),
                        "counters": lw.counters().snapshot(),
                        "bindings": b.len(),
                        "binding_bytes": b.memory_bytes(),
                        "leases": lw.leases().len(),
                        "dstm": leases.as_ref().map(|(s, _)| json!({"stats": s.stats, "free": s.free()})),
                        "reloads": reloads,
                        "reload_errors": reload_errors,
                        "last_reload_error": last_error,
                    });
                }
            }
            // Stopping: the leases as they are now.
            if let Some((srv, _)) = &mut leases {
                if let Err(e) = srv.save() {
                    tracing::warn!("DSTM lease file: {e}");
                }
            }
        })?;
        self.add("lw4o6", shared, h);
        Ok(())
    }

    fn spawn_b4(&mut self, t: B4Table) -> Result<()> {
        let dev = Device::open(&t.tun)?;
        let b4 = B4::new(t.b4);
        if let Some(n) = &t.b4.napt {
            crate::b4k::check_local_ports(n);
        }
        let host_ports = crate::b4k::host_ports_status(t.b4.napt.as_ref());
        let mut kernel = match &t.kernel {
            Some(k) => {
                let mut f = B4Fast::start(&t.b4, &dev.name, k)?;
                f.set_aftr(Some(b4.aftr()));
                tracing::info!(tun = %dev.name, uplinks = ?k.interfaces, "B4 kernel path attached");
                Some(f)
            }
            None => None,
        };
        if let Some(SocketAddr::V6(s)) = t.lease_server {
            b4.set_lease_server(s);
        } else if t.lease_server.is_some() {
            anyhow::bail!("[b4] lease-server must be an IPv6 socket address");
        }
        let shared = Arc::new(Shared::default());
        let (stop, sh, busy) = (self.stop.clone(), shared.clone(), self.busy_poll);
        let h = std::thread::Builder::new().name("sw-b4".into()).spawn(move || {
            let start = Instant::now();
            let mut waiter = Waiter::new(busy);
            let mut buf = vec![0u8; 65536];
            let mut out = Out::new();
            let mut ready = [false];
            let mut last = Instant::now();
            // DSTM client state.
            let mut lease: Option<(Ipv4Addr, Instant, u32)> = None;
            let mut asked = Instant::now() - Duration::from_secs(10);
            let mut xid = std::process::id();
            let mut lease_error = String::new();
            while !stop.load(Ordering::Relaxed) {
                wait_for_packets(&dev, None, &mut ready, &mut waiter);
                let now = start.elapsed().as_nanos() as u64;
                if pump(&dev, &mut buf, &mut out, &sh, |p, o| b4.process(p, now, o)) > 0 {
                    waiter.worked();
                }
                if t.mode == B4Mode::Dstm {
                    if let Some((m, _)) = b4.take_lease_reply() {
                        match m {
                            Msg::Ack { ipv4, secs, tep } if secs > 0 => {
                                if lease.map(|l| l.0) != Some(ipv4) {
                                    match dev.set_address(lease.map(|l| v4(l.0)), Some(v4(ipv4))) {
                                        Ok(()) => tracing::info!(%ipv4, %tep, secs, "DSTM lease"),
                                        Err(e) => lease_error = e.to_string(),
                                    }
                                }
                                b4.set_aftr(tep);
                                if let Some(k) = &mut kernel {
                                    k.set_aftr(Some(tep));
                                }
                                lease = Some((ipv4, Instant::now(), secs));
                            }
                            Msg::Nak(r) => {
                                lease_error = format!("NAK {r}");
                                if let Some(k) = &mut kernel {
                                    k.set_aftr(None);
                                }
                                if let Some(l) = lease.take() {
                                    let _ = dev.set_address(Some(v4(l.0)), None);
                                }
                            }
                            _ => {}
                        }
                    }
                    // Ask every second until leased; renew at half the lease.
                    let due = match lease {
                        None => asked.elapsed() >= Duration::from_secs(1),
                        Some((_, at, secs)) => {
                            at.elapsed() >= Duration::from_secs(u64::from(secs / 2).max(1))
                                && asked.elapsed() >= Duration::from_secs(1)
                        }
                    };
                    if due {
                        xid = xid.wrapping_add(1);
                        let msg = match lease {
                            None => lease::encode(Msg::Request, xid),
                            Some((a, _, _)) => lease::encode(Msg::Renew(a), xid),
                        };
                        if let Some(p) = b4.lease_packet(&msg) {
                            if dev.queue.send(&p).is_err() {
                                sh.errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        asked = Instant::now();
                    }
                }
                if last.elapsed() >= Duration::from_millis(200) {
                    last = Instant::now();
                    b4.expire(now);
                    *function::lock(&sh.status) = json!({
                        "device": dev.name,
                        "aftr": b4.aftr().to_string(),
                        "kernel": kernel.as_ref().map(|k| k.status()),
                        "host_ports": host_ports,
                        "counters": b4.counters().snapshot(),
                        "mappings": b4.nat().map_or(0, |n| n.len()),
                        "lease": lease.map(|l| json!({"ipv4": l.0.to_string(), "secs": l.2})),
                        "lease_error": lease_error,
                    });
                }
            }
            if let Some((a, _, _)) = lease {
                if let Some(p) = b4.lease_packet(&lease::encode(Msg::Release(a), xid.wrapping_add(1))) {
                    let _ = dev.queue.send(&p);
                }
            }
        })?;
        self.add("b4", shared, h);
        Ok(())
    }
}

/// Re-read the configuration file's `[lw4o6]` (when it has one) and the
/// binding file; put the new bindings in force and carry the DSTM leases
/// into a new lease server. Nothing changes when anything fails.
fn reload_lw4o6(
    path: &Option<std::path::PathBuf>,
    t: &mut Lw4o6Table,
    lw: &Lwaftr,
    leases: &mut Option<(LeaseServer, UdpSocket)>,
) -> Result<usize> {
    let mut new_t = t.clone();
    if let Some(p) = path {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let cfg = SoftwireConfig::parse(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
        new_t = cfg.lw4o6.context("[lw4o6] is gone from the configuration; restart to remove it")?;
    }
    let table = match &new_t.binding_file {
        Some(f) => BindingTable::load(f, new_t.psid_offset).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => BindingTable::new(),
    };
    let n = table.len();
    if let Some(d) = &new_t.dstm {
        if let Some((old, sock)) = leases.take() {
            // The leases carried over are written with the next turn's file write.
            let mut s = LeaseServer::new(d.lease.clone());
            s.adopt(&old);
            lw.set_leases(s.table());
            *leases = Some((s, sock));
        }
    }
    lw.replace_bindings(table);
    *t = new_t;
    Ok(n)
}

/// `a`/32, a DSTM lease on the host's device.
fn v4(a: Ipv4Addr) -> IfAddr {
    IfAddr { addr: IpAddr::V4(a), len: 32 }
}
