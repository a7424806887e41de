//! The RFC 2544 / RFC 8219 tester: rate-controlled trials of test frames
//! ([`crate::pkt`]) sent from one namespace and received in another.
//!
//! Both ends use `AF_PACKET` sockets on the tester's veth interfaces, so the
//! tester writes whole Ethernet frames (any source address and port, which
//! RFC 4814 flows need) and reads whatever the DUT forwards, with batched
//! `sendmmsg`/`recvmmsg`. The sender bypasses the qdisc. Received frames
//! are addressed to hosts that do not exist in the tester's namespace and
//! forwarding is off there, so the tester's own stack drops them silently
//! (no ICMP back to the DUT).
//!
//! One trial: the receiver thread enters its namespace, opens its socket and
//! reports ready; the sender thread paces frames at the target rate for the
//! trial's duration, cycling through the flows; the receiver keeps reading
//! for a drain period after the last frame and records each frame's
//! one-way latency from the timestamp in its payload.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};

use crate::netns::Netns;
use crate::pkt::{self, Template};

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every namespace).
pub fn now_ns() -> u64 {
    // SAFETY: clock_gettime writes one timespec into the valid pointer.
    let mut ts: libc::timespec = unsafe { zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread to one CPU (best effort: `None` leaves it).
pub fn pin_thread(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        let mut set = nix::sched::CpuSet::new();
        if set.set(cpu).is_ok() {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
}

const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// An `AF_PACKET` raw socket bound to one interface of the calling
/// thread's network namespace.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

fn setsockopt_int(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl PacketSocket {
    /// Opens a socket on `ifname`; `rx` sockets receive every incoming
    /// frame (not the outgoing ones), `tx` sockets receive nothing.
    pub fn open(ifname: &str, rx: bool) -> Result<Self> {
        let cname = std::ffi::CString::new(ifname).context("interface name")?;
        // SAFETY: a NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            bail!("no interface {ifname} in this namespace");
        }
        let proto = if rx { (libc::ETH_P_ALL as u16).to_be() } else { 0 };
        // SAFETY: plain socket(2); the fd is owned right away.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto)) };
        if raw < 0 {
            return Err(io::Error::last_os_error()).context("AF_PACKET socket (needs CAP_NET_RAW)");
        }
        // SAFETY: raw is a fresh, valid descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: binds to a valid sockaddr_ll of the right size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error()).context("bind AF_PACKET socket");
        }
        if rx {
            setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20)
                .or_else(|_| setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 64 << 20))?;
            // Older kernels lack it; outgoing frames are then filtered by the decoder.
            let _ = setsockopt_int(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
            let tv = libc::timeval { tv_sec: 0, tv_usec: 10_000 };
            // SAFETY: passes a pointer to a live timeval and its size.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&tv as *const libc::timeval).cast(),
                    size_of::<libc::timeval>() as libc::socklen_t,
                );
            }
        } else {
            let _ = setsockopt_int(&fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
            let _ = setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20);
        }
        Ok(PacketSocket { fd })
    }

    /// Sends the first `n` frames of `bufs` with one `sendmmsg`; returns how
    /// many the kernel took.
    pub fn send_batch(&self, bufs: &mut [Vec<u8>], n: usize) -> io::Result<usize> {
        let n = n.min(bufs.len());
        let mut h = MmsgHeaders::new(&mut bufs[..n]);
        // SAFETY: every header points at one live iovec over a live buffer.
        let r = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), h.msgs.as_mut_ptr(), n as u32, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Receives up to `bufs.len()` frames; `lens[i]` gets each length.
    /// Returns 0 on timeout.
    pub fn recv_batch(&self, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
        let n = bufs.len().min(lens.len());
        let mut h = MmsgHeaders::new(&mut bufs[..n]);
        // SAFETY: every header points at one live iovec over a live buffer.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                h.msgs.as_mut_ptr(),
                n as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for (l, m) in lens.iter_mut().zip(&h.msgs[..r as usize]) {
            *l = m.msg_len as usize;
        }
        Ok(r as usize)
    }
}

/// `sendmmsg`/`recvmmsg` headers, one iovec per buffer. The iovecs live in
/// their own heap allocation, which moving this struct does not move.
struct MmsgHeaders {
    _iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl MmsgHeaders {
    fn new(bufs: &mut [Vec<u8>]) -> Self {
        let mut iov: Vec<libc::iovec> =
            bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
        // SAFETY: mmsghdr is plain data; zero is valid.
        let mut msgs: Vec<libc::mmsghdr> = (0..bufs.len()).map(|_| unsafe { zeroed() }).collect();
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        MmsgHeaders { _iov: iov, msgs }
    }
}

/// One end of a trial: namespace and interface.
#[derive(Debug, Clone)]
pub struct Port {
    /// Namespace name (`ip netns`).
    pub ns: String,
    /// Interface inside it.
    pub ifname: String,
    /// CPU to pin the thread to.
    pub cpu: Option<usize>,
}

/// What to send in one trial.
#[derive(Debug, Clone)]
pub struct TrialSpec {
    /// Sending end.
    pub tx: Port,
    /// Receiving end.
    pub rx: Port,
    /// One frame template per flow; packets cycle through them.
    pub flows: Arc<Vec<Template>>,
    /// Target rate, frames per second.
    pub rate_pps: f64,
    /// Number of frames to send (the trial's duration is frames / rate).
    pub frames: u64,
    /// How long the receiver keeps reading after the last frame was sent.
    pub drain: Duration,
    /// A frame arriving later than this after it was sent counts as lost.
    pub late: Duration,
    /// Trial id, carried in the magic word.
    pub id: u16,
    /// Record each flow's translated source address and port (NAT64 learning).
    pub learn: bool,
    /// Frames per `sendmmsg`.
    pub batch: usize,
    /// Count only received frames of this IP version (true: IPv6), so a
    /// frame that bypassed the translator is never taken for a translated one.
    pub rx_v6: bool,
}

/// What one trial measured.
#[derive(Debug, Clone, Default)]
pub struct TrialResult {
    /// Frames the sender handed to the kernel.
    pub sent: u64,
    /// Distinct frames received in time.
    pub received: u64,
    /// Frames received later than the `late` limit (counted as lost).
    pub late: u64,
    /// The rate the sender achieved, frames per second.
    pub sent_pps: f64,
    /// One-way latency of every frame received in time, ns, sorted.
    pub latencies: Vec<u32>,
    /// Per flow: the source address and port the receiver saw (with `learn`).
    pub seen_src: Vec<Option<(IpAddr, u16)>>,
    /// Per flow: latency of the flow's first received frame (by sequence), ns.
    pub first_latency: Vec<Option<u32>>,
}

impl TrialResult {
    /// Frames lost (not received, or late).
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Lost frames as a share of frames sent.
    pub fn loss_ratio(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost() as f64 / self.sent as f64
        }
    }
}

/// Runs one trial on two fresh threads (one in each namespace).
pub fn run_trial(spec: &TrialSpec) -> Result<TrialResult> {
    if spec.flows.is_empty() || spec.rate_pps <= 0.0 {
        bail!("a trial needs at least one flow and a positive rate");
    }
    let stop_at = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    let abort = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let rx_spec = spec.clone();
    let (stop2, abort2) = (stop_at.clone(), abort.clone());
    let receiver = std::thread::Builder::new()
        .name("tester-rx".into())
        .spawn(move || receive(&rx_spec, &stop2, &abort2, ready_tx))
        .context("spawn receiver")?;
    match ready_rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let _ = receiver.join();
            return Err(e);
        }
        Err(_) => {
            abort.store(true, Ordering::Relaxed);
            let _ = receiver.join();
            bail!("the receiver did not start");
        }
    }
    let tx_spec = spec.clone();
    let sender = std::thread::Builder::new().name("tester-tx".into()).spawn(move || send(&tx_spec));
    let sent = match sender {
        Ok(h) => h.join().map_err(|_| anyhow!("sender thread panicked")).and_then(|r| r),
        Err(e) => Err(anyhow!("spawn sender: {e}")),
    };
    stop_at.store(now_ns() + spec.drain.as_nanos() as u64, Ordering::Relaxed);
    if sent.is_err() {
        abort.store(true, Ordering::Relaxed);
    }
    let got = receiver.join().map_err(|_| anyhow!("receiver thread panicked"))?;
    let (sent, secs) = sent?;
    let mut res = got?;
    res.sent = sent;
    res.sent_pps = if secs > 0.0 { sent as f64 / secs } else { 0.0 };
    Ok(res)
}

fn enter(port: &Port) -> Result<()> {
    let ns = Netns::attach(&port.ns);
    ns.enter_thread()?;
    pin_thread(port.cpu);
    Ok(())
}

/// Sender: returns (frames sent, seconds it took).
fn send(spec: &TrialSpec) -> Result<(u64, f64)> {
    enter(&spec.tx)?;
    let sock = PacketSocket::open(&spec.tx.ifname, false)?;
    let flows = &spec.flows;
    let len = flows[0].len();
    let batch = spec.batch.max(1);
    let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; len]).collect();
    let magic = pkt::MAGIC_HI | u32::from(spec.id);
    let ns_per_frame = 1e9 / spec.rate_pps;
    let t0 = now_ns();
    // A sender that cannot keep up stops at the trial's end anyway (its
    // shortfall shows in the achieved rate) instead of running long.
    let deadline = t0 + (spec.frames as f64 * ns_per_frame) as u64 + 1_000_000;
    let mut i: u64 = 0;
    let mut flow = 0usize;
    while i < spec.frames {
        let now = now_ns();
        if now > deadline {
            break;
        }
        // Frames due by now (the next one always, so the first goes at t0).
        let due = (((now - t0) as f64 / ns_per_frame) as u64 + 1).min(spec.frames);
        if due <= i {
            let wait = ((i as f64 * ns_per_frame) as u64 + t0).saturating_sub(now);
            if wait > 60_000 {
                std::thread::sleep(Duration::from_nanos(wait - 50_000));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let n = ((due - i) as usize).min(batch);
        let ts = now_ns();
        for (k, b) in bufs[..n].iter_mut().enumerate() {
            let t = &flows[flow];
            if b.len() != t.len() {
                b.resize(t.len(), 0);
            }
            t.stamp(b, ts, (i + k as u64) as u32, flow as u16, magic);
            flow += 1;
            if flow == flows.len() {
                flow = 0;
            }
        }
        let mut done = 0;
        while done < n {
            match sock.send_batch(&mut bufs[done..], n - done) {
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                Err(e) => return Err(e).context("sendmmsg"),
            }
        }
        i += n as u64;
    }
    let secs = (now_ns() - t0) as f64 / 1e9;
    // The last frame's slot ends one interval after it was sent.
    Ok((i, secs.max(i as f64 * ns_per_frame / 1e9)))
}

fn receive(
    spec: &TrialSpec,
    stop_at: &std::sync::atomic::AtomicU64,
    abort: &AtomicBool,
    ready: mpsc::Sender<Result<()>>,
) -> Result<TrialResult> {
    let sock = match enter(&spec.rx).and_then(|()| PacketSocket::open(&spec.rx.ifname, true)) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!("{msg}");
        }
    };
    let _ = ready.send(Ok(()));
    let magic = pkt::MAGIC_HI | u32::from(spec.id);
    let late_ns = spec.late.as_nanos() as u64;
    let nflows = spec.flows.len();
    let mut seen = vec![0u64; (spec.frames as usize).div_ceil(64)];
    let mut res = TrialResult {
        latencies: Vec::with_capacity(spec.frames.min(20_000_000) as usize),
        seen_src: if spec.learn { vec![None; nflows] } else { Vec::new() },
        first_latency: vec![None; nflows],
        ..Default::default()
    };
    let mut first_seq: Vec<u32> = vec![u32::MAX; nflows];
    const B: usize = 64;
    let mut bufs: Vec<Vec<u8>> = (0..B).map(|_| vec![0u8; 2048]).collect();
    let mut lens = [0usize; B];
    loop {
        if abort.load(Ordering::Relaxed) || now_ns() > stop_at.load(Ordering::Relaxed) {
            break;
        }
        let n = sock.recv_batch(&mut bufs, &mut lens).context("recvmmsg")?;
        let now = now_ns();
        for (b, &l) in bufs[..n].iter().zip(&lens[..n]) {
            let Some(rx) = pkt::decode(&b[..l.min(b.len())]) else { continue };
            if rx.magic != magic || u64::from(rx.seq) >= spec.frames || rx.src.is_ipv6() != spec.rx_v6 {
                continue;
            }
            let (w, bit) = (rx.seq as usize / 64, 1u64 << (rx.seq % 64));
            if seen[w] & bit != 0 {
                continue; // duplicate
            }
            seen[w] |= bit;
            let lat = now.saturating_sub(rx.ts_ns);
            if lat > late_ns {
                res.late += 1;
                continue;
            }
            res.received += 1;
            let lat32 = lat.min(u64::from(u32::MAX)) as u32;
            res.latencies.push(lat32);
            let f = usize::from(rx.flow);
            if f < nflows && rx.seq < first_seq[f] {
                first_seq[f] = rx.seq;
                res.first_latency[f] = Some(lat32);
                if spec.learn {
                    res.seen_src[f] = Some((rx.src, rx.sport));
                }
            }
        }
    }
    res.latencies.sort_unstable();
    Ok(res)
}

/// Latency summary of one trial (ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Smallest latency.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest latency.
    pub max_ns: u64,
    /// Packet delay variation (RFC 8219 §7.3.1 after RFC 5481): the 99.9th
    /// percentile of one-way delay minus the minimum.
    pub pdv_ns: u64,
    /// Number of samples.
    pub samples: u64,
}

/// Nearest-rank percentile (`q` in 0..=1) of sorted samples.
pub fn percentile(sorted: &[u32], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    u64::from(sorted[rank.clamp(1, sorted.len()) - 1])
}

impl Latency {
    /// Summarises sorted samples.
    pub fn of(sorted: &[u32]) -> Self {
        let p999 = percentile(sorted, 0.999);
        let min = sorted.first().map_or(0, |&v| u64::from(v));
        Latency {
            min_ns: min,
            p50_ns: percentile(sorted, 0.5),
            p99_ns: percentile(sorted, 0.99),
            p999_ns: p999,
            max_ns: sorted.last().map_or(0, |&v| u64::from(v)),
            pdv_ns: p999.saturating_sub(min),
            samples: sorted.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u32> = (1..=1000).collect();
        assert_eq!(percentile(&v, 0.5), 500);
        assert_eq!(percentile(&v, 0.99), 990);
        assert_eq!(percentile(&v, 0.999), 999);
        assert_eq!(percentile(&v, 1.0), 1000);
        assert_eq!(percentile(&[], 0.5), 0);
        let l = Latency::of(&v);
        assert_eq!((l.min_ns, l.max_ns, l.pdv_ns, l.samples), (1, 1000, 998, 1000));
        assert!(l.p50_ns <= l.p99_ns && l.p99_ns <= l.p999_ns);
    }

    #[test]
    fn loss_ratio_counts_unreceived_frames() {
        let r = TrialResult { sent: 200, received: 150, ..Default::default() };
        assert_eq!(r.lost(), 50);
        assert!((r.loss_ratio() - 0.25).abs() < 1e-12);
        assert_eq!(TrialResult::default().loss_ratio(), 0.0);
    }
}
