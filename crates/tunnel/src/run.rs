//! Runners: each configured function gets one thread that owns its TUN
//! device and sockets, waits on them with `poll(2)`, feeds the core and
//! sends what the core returns.
//!
//! Why threads and not tokio: a function has two or three file
//! descriptors and one core that must not be shared (no locks on the
//! packet path); a blocking `poll` loop per function is the shortest path
//! from a packet to its answer (the relay latency is what `v6gate bench
//! tunnel` measures), needs no runtime in the daemon and is how the
//! daemon's TUN workers already run. The cores are I/O-free, so a
//! different runner (the daemon's shared worker, XDP) can drive them later.
//!
//! [`Tunnels::start`] is the standalone entry point (`v6gate tunnel`, the
//! tests); the devices and sockets are created before it returns, so a
//! configuration that cannot run fails there.

use core::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context as _, Result};
use netsys::IfAddr;

use crate::config::{Proto41Table, TeredoClientTable, TeredoRelayTable, TeredoServerTable, TunnelConfig};
use crate::outbox::{Dest, Outbox};
use crate::proto41::{Kind, Proto41};
use crate::sys::{self, Device, Raw41};
use crate::teredo::client::{Client, ClientEvent};
use crate::teredo::fast::Mirror;
use crate::teredo::relay::Relay;
use crate::teredo::server::Server;
use crate::teredo::Rng;

/// Packets read from one descriptor before looking at the others.
const BATCH: usize = 64;
/// Largest packet.
const BUF: usize = 65_536;
/// How often the loop wakes without traffic (timers, stop flag), ms.
const IDLE_MS: u16 = 100;
/// How often the published status is refreshed, ms.
const STATUS_MS: u64 = 250;

crate::counters! {
    /// I/O counters of one runner.
    IoStats {
        /// Sends the kernel refused (full queue, no route, ...).
        send_errors,
        /// Receive errors other than "nothing to read".
        recv_errors,
    }
}

/// One function's numbers, as its status last published them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionCounters {
    /// The function (`sixtofour`, `sixrd`, `teredo-server`, `teredo-relay`, `teredo-client`).
    pub function: &'static str,
    /// The core's counters (`drop_*` are drops by reason), by name.
    pub counters: Vec<(String, u64)>,
    /// The runner's I/O error counters.
    pub io: Vec<(String, u64)>,
    /// Table sizes now (`peers`, `clients_tracked`, `fragment_sets`).
    pub gauges: Vec<(String, u64)>,
}

/// One running function.
#[derive(Debug)]
struct Handle {
    name: &'static str,
    thread: Option<JoinHandle<()>>,
    status: Arc<Mutex<serde_json::Value>>,
}

/// The running tunnel functions of one configuration.
#[derive(Debug)]
pub struct Tunnels {
    stop: Arc<AtomicBool>,
    handles: Vec<Handle>,
}

struct Ctx {
    stop: Arc<AtomicBool>,
    status: Arc<Mutex<serde_json::Value>>,
    epoch: Instant,
}

impl Ctx {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

fn send_all(ob: &mut Outbox, dev: &Device, raw: Option<&Raw41>, udp: &[&UdpSocket], io: &mut IoStats) {
    for (d, b) in ob.iter() {
        let r = match d {
            Dest::Tun => dev.queue.send(b),
            Dest::Raw4(dst) => raw.map_or(Ok(()), |r| r.send(b, dst)),
            Dest::Udp { sock, to } => match udp.get(usize::from(sock)) {
                Some(s) => s.send_to(b, to).map(|_| ()),
                None => Ok(()),
            },
        };
        if let Err(e) = r {
            io.send_errors += 1;
            tracing::debug!("send to {d:?}: {e}");
        }
    }
    ob.clear();
}

/// Read up to [`BATCH`] packets with `recv` and hand each to `each`
/// (which feeds the core and sends what it queued).
fn drain<T>(
    buf: &mut [u8],
    io: &mut IoStats,
    mut recv: impl FnMut(&mut [u8]) -> std::io::Result<Option<(usize, T)>>,
    mut each: impl FnMut(&[u8], T, &mut IoStats),
) {
    for _ in 0..BATCH {
        match recv(buf) {
            Ok(Some((n, t))) => each(&buf[..n], t, io),
            Ok(None) => break,
            Err(_) => {
                io.recv_errors += 1;
                break;
            }
        }
    }
}

fn tun_recv(dev: &Device) -> impl FnMut(&mut [u8]) -> std::io::Result<Option<(usize, ())>> + '_ {
    |b| dev.queue.recv(b).map(|o| o.map(|n| (n, ())))
}

fn publish(ctx: &Ctx, last: &mut u64, now: u64, f: impl FnOnce() -> serde_json::Value) {
    if now >= *last + STATUS_MS {
        *last = now;
        if let Ok(mut s) = ctx.status.lock() {
            *s = f();
        }
    }
}

fn run_proto41(ctx: Ctx, mut core: Proto41, dev: Device, raw: Raw41) {
    let mut buf = vec![0u8; BUF];
    let mut ob = Outbox::new();
    let mut io = IoStats::default();
    let mut ready = [false; 2];
    let mut last = 0;
    while !ctx.stop.load(Ordering::Relaxed) {
        if let Err(e) = sys::wait(&[&dev.queue as &dyn AsFd, &raw], IDLE_MS, &mut ready) {
            tracing::error!("{}: poll: {e}", dev.name);
            break;
        }
        if ready[0] {
            drain(&mut buf, &mut io, tun_recv(&dev), |p, (), io| {
                core.from_v6(p, &mut ob);
                send_all(&mut ob, &dev, Some(&raw), &[], io);
            });
        }
        let now = ctx.now();
        if ready[1] {
            drain(
                &mut buf,
                &mut io,
                |b| raw.recv(b).map(|o| o.map(|n| (n, ()))),
                |p, (), io| {
                    core.from_v4(p, now, &mut ob);
                    send_all(&mut ob, &dev, Some(&raw), &[], io);
                },
            );
        }
        core.tick(now);
        publish(
            &ctx,
            &mut last,
            now,
            || serde_json::json!({ "counters": core.stats, "io": io, "fragment_sets": core.fragment_sets() }),
        );
    }
    publish(
        &ctx,
        &mut 0,
        u64::MAX / 2,
        || serde_json::json!({ "counters": core.stats, "io": io, "fragment_sets": core.fragment_sets() }),
    );
}

fn run_server(ctx: Ctx, mut core: Server, dev: Device, socks: [UdpSocket; 2]) {
    let mut buf = vec![0u8; BUF];
    let mut ob = Outbox::new();
    let mut io = IoStats::default();
    let mut ready = [false; 3];
    let mut last = 0;
    let refs = [&socks[0], &socks[1]];
    while !ctx.stop.load(Ordering::Relaxed) {
        if let Err(e) = sys::wait(&[&socks[0] as &dyn AsFd, &socks[1], &dev.queue], IDLE_MS, &mut ready) {
            tracing::error!("teredo server: poll: {e}");
            break;
        }
        let now = ctx.now();
        for (i, s) in socks.iter().enumerate() {
            if !ready[i] {
                continue;
            }
            drain(
                &mut buf,
                &mut io,
                |b| sys::udp_recv(s, b),
                |p, from, io| {
                    core.on_udp(i as u8, from, p, now, &mut ob);
                    send_all(&mut ob, &dev, None, &refs, io);
                },
            );
        }
        if ready[2] {
            // Nothing is routed into the server's device; drain whatever the kernel sends.
            while let Ok(Some(_)) = dev.queue.recv(&mut buf) {}
        }
        core.tick(now);
        publish(
            &ctx,
            &mut last,
            now,
            || serde_json::json!({ "counters": core.stats, "io": io, "clients_tracked": core.tracked_clients() }),
        );
    }
}

/// The relay's published status: its counters (with the XDP fast path's
/// as `xdp_*` when it runs), I/O errors, peers (all, and those waiting for
/// the trust procedure).
fn relay_status(core: &Relay, io: &IoStats, fast: Option<&Mirror>) -> serde_json::Value {
    let mut counters = serde_json::to_value(&core.stats).unwrap_or_default();
    if let (Some(m), Some(c)) = (fast, counters.as_object_mut()) {
        for (k, v) in m.counters() {
            c.insert(k, v.into());
        }
    }
    let mut v = serde_json::json!({
        "counters": counters,
        "io": io,
        "peers": core.peers(),
        "untrusted_peers": core.untrusted_peers(),
    });
    if let (Some(m), Some(o)) = (fast, v.as_object_mut()) {
        o.insert("xdp".into(), m.status());
        o.insert("xdp_peers".into(), (m.peers() as u64).into());
    }
    v
}

fn run_relay(ctx: Ctx, mut core: Relay, dev: Device, sock: UdpSocket, mut fast: Option<Mirror>) {
    let mut buf = vec![0u8; BUF];
    let mut ob = Outbox::new();
    let mut io = IoStats::default();
    let mut ready = [false; 2];
    let mut last = 0;
    while !ctx.stop.load(Ordering::Relaxed) {
        if let Err(e) = sys::wait(&[&dev.queue as &dyn AsFd, &sock], IDLE_MS, &mut ready) {
            tracing::error!("teredo relay: poll: {e}");
            break;
        }
        let now = ctx.now();
        if ready[0] {
            drain(&mut buf, &mut io, tun_recv(&dev), |p, (), io| {
                core.on_v6(p, now, &mut ob);
                send_all(&mut ob, &dev, None, &[&sock], io);
            });
        }
        if ready[1] {
            drain(
                &mut buf,
                &mut io,
                |b| sys::udp_recv(&sock, b),
                |p, from, io| {
                    core.on_udp(from, p, now, &mut ob);
                    send_all(&mut ob, &dev, None, &[&sock], io);
                },
            );
        }
        if let Some(m) = &mut fast {
            m.sync(&mut core, now);
        }
        core.tick(now);
        publish(&ctx, &mut last, now, || relay_status(&core, &io, fast.as_ref()));
    }
    // Detach before the device goes (the drop order would do it too).
    drop(fast);
}

fn run_client(ctx: Ctx, mut core: Client, dev: Device, sock: UdpSocket, local_ip: Ipv4Addr) {
    let mut buf = vec![0u8; BUF];
    let mut ob = Outbox::new();
    let mut io = IoStats::default();
    let mut last = 0;
    let mut addr: Option<IfAddr> = None;
    // RFC 6081 §4 random ports: `extra[i]` is the outbox's socket `i + 1`.
    let mut extra: Vec<Option<UdpSocket>> = Vec::new();
    core.start(ctx.now(), &mut ob);
    send_all(&mut ob, &dev, None, &[&sock], &mut io);
    while !ctx.stop.load(Ordering::Relaxed) {
        let mut ready = vec![false; 2 + extra.iter().flatten().count()];
        {
            let mut fds: Vec<&dyn AsFd> = vec![&dev.queue, &sock];
            fds.extend(extra.iter().flatten().map(|s| s as &dyn AsFd));
            let wait = core.next_timer().saturating_sub(ctx.now()).min(u64::from(IDLE_MS)) as u16;
            if let Err(e) = sys::wait(&fds, wait, &mut ready) {
                tracing::error!("teredo client: poll: {e}");
                break;
            }
        }
        let now = ctx.now();
        // Feed the core a batch from each ready descriptor, then act on its
        // events (which may open the socket its packets leave through), then send.
        {
            let open: Vec<&UdpSocket> = std::iter::once(&sock).chain(extra.iter().flatten()).collect();
            for (s, _) in open.iter().zip(&ready[1..]).filter(|(_, r)| **r) {
                drain(&mut buf, &mut io, |b| sys::udp_recv(s, b), |p, from, _| core.on_udp(from, p, now, &mut ob));
            }
        }
        if ready[0] {
            drain(&mut buf, &mut io, tun_recv(&dev), |p, (), _| core.on_v6(p, now, &mut ob));
        }
        core.tick(now, &mut ob);
        for ev in core.take_events() {
            let new = match ev {
                ClientEvent::Up { addr: a, .. } => Some(IfAddr { addr: IpAddr::V6(a), len: 32 }),
                ClientEvent::Down => None,
                ClientEvent::OpenPort { sock: k, port } => {
                    let i = usize::from(k).saturating_sub(1);
                    if extra.len() <= i {
                        extra.resize_with(i + 1, || None);
                    }
                    match sys::udp(SocketAddrV4::new(local_ip, port)) {
                        Ok(s) => extra[i] = Some(s),
                        Err(e) => {
                            tracing::debug!("teredo client: random port {port}: {e:#}");
                            core.port_failed(k);
                        }
                    }
                    continue;
                }
                ClientEvent::ClosePort { sock: k } => {
                    if let Some(s) = extra.get_mut(usize::from(k).saturating_sub(1)) {
                        *s = None;
                    }
                    continue;
                }
            };
            if let Err(e) = dev.set_address(addr, new) {
                tracing::error!("teredo client: {e:#}");
            }
            addr = new;
        }
        // Outbox socket k: 0 the main one, else its random port's (a slot
        // that could not be opened falls back to the main socket).
        let socks: Vec<&UdpSocket> =
            std::iter::once(&sock).chain(extra.iter().map(|s| s.as_ref().unwrap_or(&sock))).collect();
        send_all(&mut ob, &dev, None, &socks, &mut io);
        publish(&ctx, &mut last, now, || {
            serde_json::json!({
                "counters": core.stats,
                "io": io,
                "address": core.address(),
                "nat": core.nat(),
                "mapping": core.mapping().map(|m| m.to_string()),
                "port_preserving": core.port_preserving(),
                "peers": core.peers(),
                "random_ports": core.random_ports(),
            })
        });
    }
}

impl Tunnels {
    /// Create every configured function's device and sockets, then start
    /// its thread. Nothing is left running when this fails.
    pub fn start(cfg: &TunnelConfig) -> Result<Tunnels> {
        let mut t = Tunnels { stop: Arc::new(AtomicBool::new(false)), handles: Vec::new() };
        let r = t.start_all(cfg);
        if let Err(e) = r {
            t.stop();
            return Err(e);
        }
        Ok(t)
    }

    fn spawn(&mut self, name: &'static str, f: impl FnOnce(Ctx) + Send + 'static) -> Result<()> {
        let status = Arc::new(Mutex::new(serde_json::json!({})));
        let ctx = Ctx { stop: self.stop.clone(), status: status.clone(), epoch: Instant::now() };
        let thread = std::thread::Builder::new()
            .name(format!("v6gate-{name}"))
            .spawn(move || f(ctx))
            .with_context(|| format!("starting the {name} thread"))?;
        self.handles.push(Handle { name, thread: Some(thread), status });
        Ok(())
    }

    fn start_all(&mut self, cfg: &TunnelConfig) -> Result<()> {
        for (name, t) in [("sixtofour", &cfg.sixtofour), ("sixrd", &cfg.sixrd)] {
            if let Some(Proto41Table { core, tun }) = t {
                let dev = Device::open(tun).with_context(|| format!("[{name}]"))?;
                let raw = Raw41::open(core.local_v4).with_context(|| format!("[{name}]"))?;
                let core = Proto41::new(core.clone());
                let kind = if core.config().kind == Kind::SixToFour { "6to4" } else { "6rd" };
                tracing::info!(
                    "{kind} {:?} on {} ({}), IPv4 {}",
                    core.config().mode,
                    dev.name,
                    dev.index,
                    core.config().local_v4
                );
                self.spawn(name, move |ctx| run_proto41(ctx, core, dev, raw))?;
            }
        }
        if let Some(TeredoServerTable { core, tun }) = &cfg.teredo_server {
            let dev = Device::open(tun).context("[teredo.server]")?;
            let a = sys::udp(SocketAddrV4::new(core.primary, crate::teredo::TEREDO_PORT))
                .context("[teredo.server] primary")?;
            let b = sys::udp(SocketAddrV4::new(core.secondary, crate::teredo::TEREDO_PORT))
                .context("[teredo.server] secondary")?;
            let server = Server::new(core.clone());
            tracing::info!("teredo server on {}:3544 and {}:3544", core.primary, core.secondary);
            self.spawn("teredo-server", move |ctx| run_server(ctx, server, dev, [a, b]))?;
        }
        if let Some(t @ TeredoRelayTable { core, bind, tun, xdp }) = &cfg.teredo_relay {
            let dev = Device::open(tun).context("[teredo.relay]")?;
            let s = sys::udp(*bind).context("[teredo.relay] bind")?;
            let mut relay = Relay::new(core.clone());
            let fast = match xdp {
                Some(x) => Some(Mirror::start(t, x)?),
                None => None,
            };
            relay.set_mirroring(fast.is_some());
            tracing::info!("teredo relay on {bind}, 2001::/32 into {}", dev.name);
            self.spawn("teredo-relay", move |ctx| run_relay(ctx, relay, dev, s, fast))?;
        }
        if let Some(TeredoClientTable { core, bind, tun }) = &cfg.teredo_client {
            let dev = Device::open(tun).context("[teredo.client]")?;
            let s = sys::udp(*bind).context("[teredo.client] bind")?;
            let port = s.local_addr().map(|a| a.port()).unwrap_or(bind.port());
            let ip = if bind.ip().is_unspecified() {
                sys::source_towards(core.server).unwrap_or(*bind.ip())
            } else {
                *bind.ip()
            };
            let mut c = core.clone();
            c.local = SocketAddrV4::new(ip, port);
            let client = Client::new(c, Rng::from_os());
            tracing::info!("teredo client on {ip}:{port}, server {}", core.server);
            self.spawn("teredo-client", move |ctx| run_client(ctx, client, dev, s, ip))?;
        }
        Ok(())
    }

    /// Each function's counters and state, as JSON.
    pub fn status(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for h in &self.handles {
            let v = h.status.lock().map(|s| s.clone()).unwrap_or_default();
            m.insert(h.name.to_string(), v);
        }
        serde_json::Value::Object(m)
    }

    /// Each function's numbers from its last published status (refreshed
    /// every 250 ms by its thread): for `/metrics`.
    pub fn counters(&self) -> Vec<FunctionCounters> {
        fn nums(v: Option<&serde_json::Value>) -> Vec<(String, u64)> {
            v.and_then(|v| v.as_object())
                .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect())
                .unwrap_or_default()
        }
        self.handles
            .iter()
            .map(|h| {
                let s = h.status.lock().map(|s| s.clone()).unwrap_or_default();
                FunctionCounters {
                    function: h.name,
                    counters: nums(s.get("counters")),
                    io: nums(s.get("io")),
                    gauges: nums(Some(&s)),
                }
            })
            .collect()
    }

    /// Names of the running functions.
    pub fn functions(&self) -> Vec<&'static str> {
        self.handles.iter().map(|h| h.name).collect()
    }

    /// Stop every thread and close the devices (which removes them).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in &mut self.handles {
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Tunnels {
    fn drop(&mut self) {
        self.stop();
    }
}
