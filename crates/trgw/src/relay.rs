//! Running the relay: workers, control listeners (ng over UDP, rtpproxy
//! over UDP and a Unix stream socket) and the idle-timeout sweeper.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::RawFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{Config, IoMode};
use crate::core::{Core, PacketTotals, Plane, StreamInit, Totals};
use crate::table::{RelayKey, RelayValue};
use crate::uring::UringWorker;
use crate::worker::{Cmd, Worker, WorkerCtl};

/// The plane with real sockets and workers.
struct SocketPlane {
    workers: Vec<WorkerCtl>,
}

fn bind_one(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    s.set_cloexec(true)?;
    // Room for bursts; the kernel caps it at rmem_max.
    let _ = s.set_recv_buffer_size(1 << 20);
    s.bind(&addr.into())?;
    Ok(s)
}

impl Plane for SocketPlane {
    fn bind(&mut self, addr: IpAddr, port: u16) -> io::Result<[Option<Socket>; 2]> {
        let rtp = bind_one(SocketAddr::new(addr, port))?;
        let rtcp = bind_one(SocketAddr::new(addr, port + 1))?;
        Ok([Some(rtp), Some(rtcp)])
    }

    fn install(&mut self, id: u32, sockets: [Option<Socket>; 4], locals: [SocketAddr; 4], init: StreamInit) {
        let w = &self.workers[id as usize % self.workers.len()];
        w.send(Cmd::Install { id, sockets: Box::new(sockets), locals, init });
    }

    fn set_peers(&mut self, id: u32, peers: [Option<SocketAddr>; 4]) {
        let w = &self.workers[id as usize % self.workers.len()];
        w.send(Cmd::SetPeers { id, peers });
    }

    fn remove(&mut self, id: u32) {
        let w = &self.workers[id as usize % self.workers.len()];
        w.send(Cmd::Remove { id });
    }

    fn sync(&mut self) {
        for w in &self.workers {
            w.sync();
        }
    }
}

/// Entry point: [`Relay::start`].
#[derive(Debug)]
pub struct Relay;

/// A running relay. Dropping it stops it too.
#[derive(Debug)]
pub struct RelayHandle {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    core: Arc<Mutex<Core>>,
    ng: Option<SocketAddr>,
    rtpproxy_udp: Option<SocketAddr>,
    unix_path: Option<PathBuf>,
    io: IoMode,
}

/// A snapshot of the relay's counters (for Prometheus / `v6gate ctl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Live calls.
    pub calls: u64,
    /// Live media streams.
    pub streams: u64,
    /// Global counters (calls created/deleted/timed out, port exhaustion,
    /// control errors and denials).
    pub totals: Totals,
    /// Packet counters summed over the live calls.
    pub packets: PacketTotals,
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Relay {
    /// Starts workers and control listeners. Listener addresses with port 0
    /// get an ephemeral port: see [`RelayHandle::ng_addr`].
    pub fn start(cfg: Config) -> Result<RelayHandle> {
        cfg.check().map_err(anyhow::Error::msg)?;
        raise_fd_limit();
        let epoch = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let n = cfg.worker_count();
        let mut threads = Vec::new();
        let mut ctls = Vec::new();
        let mut io = cfg.io;
        for i in 0..n {
            let (tx, rx) = mpsc::channel();
            let st = stop.clone();
            let name = format!("trgw-w{i}");
            // The ring is created on the worker's own thread (io_uring's
            // single-issuer mode wants the creator to be the submitter);
            // the thread reports its eventfd and engine, or the error.
            let (rtx, rrx) = mpsc::sync_channel::<io::Result<(RawFd, IoMode)>>(1);
            let want = cfg.io;
            let nw = n as u32;
            threads.push(std::thread::Builder::new().name(name).spawn(move || {
                let rx = if want == IoMode::Uring {
                    match UringWorker::new(rx, nw, epoch) {
                        Ok((w, efd)) => {
                            let _ = rtx.send(Ok((efd, IoMode::Uring)));
                            return w.run(st);
                        }
                        Err((e, rx)) => {
                            tracing::warn!(error = %e, "io_uring unavailable, using epoll");
                            rx
                        }
                    }
                } else {
                    rx
                };
                match Worker::new(rx, nw, epoch) {
                    Ok((w, efd)) => {
                        let _ = rtx.send(Ok((efd, IoMode::Poll)));
                        w.run(st);
                    }
                    Err(e) => {
                        let _ = rtx.send(Err(e));
                    }
                }
            })?);
            let (efd, got) = match rrx.recv() {
                Ok(Ok(x)) => x,
                failed => {
                    // Stop the workers already running before reporting.
                    stop.store(true, Relaxed);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(match failed {
                        Ok(Err(e)) => anyhow::Error::new(e).context("creating a relay worker"),
                        _ => anyhow::anyhow!("a relay worker died while starting"),
                    });
                }
            };
            io = got;
            ctls.push(WorkerCtl { tx, efd });
        }
        let mut handle = RelayHandle {
            stop: stop.clone(),
            threads,
            core: Arc::new(Mutex::new(Core::new(cfg.clone(), Box::new(SocketPlane { workers: ctls }), epoch))),
            ng: None,
            rtpproxy_udp: None,
            unix_path: None,
            io,
        };
        tracing::info!(workers = n, io = ?io, "relay workers started");
        let allow = Arc::new(cfg.clone());
        if let Some(a) = cfg.ng {
            let sock = UdpSocket::bind(a).with_context(|| format!("binding the ng listener on {a}"))?;
            handle.ng = Some(sock.local_addr()?);
            handle.spawn_udp("trgw-ng", sock, allow.clone(), crate::ng::handle)?;
            tracing::info!(addr = ?handle.ng, "rtpengine ng control listening");
        }
        if let Some(a) = cfg.rtpproxy_udp {
            let sock = UdpSocket::bind(a).with_context(|| format!("binding the rtpproxy listener on {a}"))?;
            handle.rtpproxy_udp = Some(sock.local_addr()?);
            handle.spawn_udp("trgw-rtpp", sock, allow.clone(), |core, m| crate::rtpproxy::handle(core, m, true))?;
            tracing::info!(addr = ?handle.rtpproxy_udp, "rtpproxy control listening (UDP)");
        }
        if let Some(p) = &cfg.rtpproxy_unix {
            let _ = std::fs::remove_file(p);
            let l = UnixListener::bind(p).with_context(|| format!("binding the rtpproxy socket {}", p.display()))?;
            l.set_nonblocking(true)?;
            handle.unix_path = Some(p.clone());
            let (core, stop) = (handle.core.clone(), stop.clone());
            handle.threads.push(std::thread::Builder::new().name("trgw-rtpp-unix".into()).spawn(move || {
                unix_loop(&l, &core, &stop);
            })?);
            tracing::info!(path = %p.display(), "rtpproxy control listening (Unix)");
        }
        // Idle sweeper.
        let (core, st) = (handle.core.clone(), stop.clone());
        let tick = Duration::from_millis((cfg.timeout_secs * 1000 / 4).clamp(100, 1000));
        handle.threads.push(std::thread::Builder::new().name("trgw-timer".into()).spawn(move || {
            while !st.load(Relaxed) {
                std::thread::sleep(tick);
                let gone = lock(&core).expire(Instant::now());
                for c in gone {
                    tracing::info!(call_id = %c, "media timeout: call torn down");
                }
            }
        })?);
        Ok(handle)
    }
}

/// Every stream holds four sockets: lift the soft descriptor limit to the
/// hard one (rtpengine does the same), so thousands of calls fit.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: get/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) != 0 {
                tracing::warn!(soft = lim.rlim_cur, "cannot raise the open-file limit");
            }
        }
    }
}

fn unix_loop(l: &UnixListener, core: &Mutex<Core>, stop: &AtomicBool) {
    while !stop.load(Relaxed) {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = vec![0u8; 65536];
                let n = match s.read(&mut buf) {
                    Ok(n) => n,
                    Err(_) => continue,
                };
                let mut out = Vec::new();
                for line in buf[..n].split(|&b| b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
                    if let Some(r) = crate::rtpproxy::handle(&mut lock(core), line, false) {
                        out.extend_from_slice(&r);
                    }
                }
                let _ = s.write_all(&out);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                tracing::warn!(error = %e, "rtpproxy unix accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

impl RelayHandle {
    fn spawn_udp(
        &mut self,
        name: &str,
        sock: UdpSocket,
        cfg: Arc<Config>,
        f: fn(&mut Core, &[u8]) -> Option<Vec<u8>>,
    ) -> Result<()> {
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let (core, stop) = (self.core.clone(), self.stop.clone());
        self.threads.push(std::thread::Builder::new().name(name.into()).spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Relaxed) {
                let (n, from) = match sock.recv_from(&mut buf) {
                    Ok(x) => x,
                    Err(_) => continue,
                };
                if !cfg.allowed(from.ip()) {
                    lock(&core).totals.control_denied += 1;
                    tracing::warn!(%from, "control message from a client not on the allow-list dropped");
                    continue;
                }
                let reply = f(&mut lock(&core), &buf[..n]);
                if let Some(r) = reply {
                    let _ = sock.send_to(&r, from);
                }
            }
        })?);
        Ok(())
    }

    /// The packet I/O engine the workers use (io_uring falls back to epoll
    /// when the kernel refuses it).
    pub fn io_mode(&self) -> IoMode {
        self.io
    }

    /// The ng listener's address (with the real port when 0 was asked).
    pub fn ng_addr(&self) -> Option<SocketAddr> {
        self.ng
    }

    /// The rtpproxy UDP listener's address.
    pub fn rtpproxy_udp_addr(&self) -> Option<SocketAddr> {
        self.rtpproxy_udp
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RelayStats {
        let c = lock(&self.core);
        RelayStats {
            calls: c.call_count() as u64,
            streams: c.stream_count() as u64,
            totals: c.totals,
            packets: c.packet_totals(),
        }
    }

    /// The relay table as XDP map entries (see [`crate::table`]).
    pub fn relay_table(&self) -> Vec<(RelayKey, RelayValue)> {
        lock(&self.core).relay_table()
    }

    /// Stops every thread and closes every socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(p) = self.unix_path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}
