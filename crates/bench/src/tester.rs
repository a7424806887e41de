//! The TrGW load engine: paced G.711 probe streams sent with `sendmmsg`
//! from a few UDP sockets per side (the destination of each message in its
//! own `msg_name`), received with `recvmmsg` on the other side, and judged
//! per packet (missing, duplicate, later than the jitter budget, latency).
//!
//! The only `unsafe` of the crate is here: the `sendmmsg`/`recvmmsg`/epoll
//! calls, over buffers owned by the calling function for the call's length.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;
use socket2::SockAddr;

use crate::probe::{self, Probe};
use crate::report::{Histogram, Summary};

/// Nanoseconds on CLOCK_MONOTONIC, the clock shared by every namespace.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_until_ns(t: u64) {
    let ts = libc::timespec { tv_sec: (t / 1_000_000_000) as libc::time_t, tv_nsec: (t % 1_000_000_000) as _ };
    // SAFETY: `ts` is valid; a null remainder is allowed with TIMER_ABSTIME.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// Pins the calling thread to `cpus` (no-op when empty).
pub fn pin_thread(cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).context("cpu index")?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).context("sched_setaffinity")?;
    Ok(())
}

/// Pins the calling thread to `load.cpus` and, when asked, makes it
/// SCHED_FIFO priority 10.
fn setup_thread(load: &Load) -> Result<()> {
    pin_thread(&load.cpus)?;
    if load.realtime {
        let p = libc::sched_param { sched_priority: 10 };
        // SAFETY: plain syscall on the calling thread with a valid param.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
            return Err(std::io::Error::last_os_error()).context("SCHED_FIFO for a tester thread");
        }
    }
    Ok(())
}

/// One RTP stream of a trial.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Side that sends (0 = ua6, 1 = ua4); the other side receives.
    pub tx_side: usize,
    /// Index of the sending socket on that side.
    pub tx_sock: usize,
    /// Where the packets go (the relay's address for this call and side).
    pub dst: SocketAddr,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct Load {
    pub streams: Vec<Stream>,
    /// Packets per stream.
    pub packets: u32,
    /// Packetisation interval (20 ms).
    pub interval_ns: u64,
    /// A packet later than this is lost (the jitter budget).
    pub budget_ns: u64,
    /// Messages per `sendmmsg`.
    pub batch: usize,
    /// CPUs for the tester's threads.
    pub cpus: Vec<usize>,
    /// Run the tester's threads with SCHED_FIFO priority 10.
    pub realtime: bool,
}

/// What came back.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub streams: usize,
    pub sent: u64,
    /// Received within the budget, each counted once.
    pub on_time: u64,
    /// Received, but later than the budget (counted as lost).
    pub late: u64,
    /// Never received.
    pub missing: u64,
    pub duplicates: u64,
    /// Datagrams that were not one of this trial's probes.
    pub foreign: u64,
    /// (missing + late) / sent.
    pub loss_rate: f64,
    /// Latency of the packets received within the budget.
    pub latency: Summary,
    /// Mean latency (µs) of all received packets, per tenth of the trial
    /// (by sequence number): a rising queue shows as a rising trend.
    pub trend_us: Vec<f64>,
    /// The last tenth's mean is more than a quarter budget above the first's.
    pub rising_queue: bool,
    /// How late the sender handed packets to the kernel, against the
    /// schedule: large values mean the tester itself fell behind.
    pub send_lag: Summary,
    pub send_errors: u64,
}

impl Outcome {
    /// Zero loss (nothing missing, nothing late) and no rising queue.
    pub fn passes(&self) -> bool {
        self.sent > 0 && self.missing == 0 && self.late == 0 && !self.rising_queue
    }
}

struct RxStats {
    hist: Histogram,
    late: u64,
    dup: u64,
    foreign: u64,
    trend: [(f64, u64); 10],
}

/// Runs the load: one sender thread per sending side and one receiver
/// thread per receiving side, all pinned to `load.cpus`. `socks[side]`
/// are that side's sockets (already bound inside its namespace).
pub fn run(socks: &[Vec<UdpSocket>; 2], load: &Load) -> Result<Outcome> {
    let n = load.streams.len();
    if n == 0 || load.packets == 0 {
        bail!("nothing to send");
    }
    for s in &socks[..] {
        for k in s {
            k.set_nonblocking(true)?;
        }
    }
    // Everyone starts at the same instant, far enough ahead for the threads to be ready.
    let t0 = now_ns() + 100_000_000;
    let t_end = t0 + u64::from(load.packets) * load.interval_ns + load.budget_ns + 300_000_000;
    let seen: Vec<AtomicU64Bits> = (0..n).map(|_| AtomicU64Bits::new(load.packets as usize)).collect();
    let rx_sides: Vec<usize> = (0..2).filter(|side| load.streams.iter().any(|s| s.tx_side != *side)).collect();
    let tx_sides: Vec<usize> = (0..2).filter(|side| load.streams.iter().any(|s| s.tx_side == *side)).collect();
    let (tx, rx) = std::thread::scope(|sc| {
        let rx: Vec<_> = rx_sides
            .iter()
            .map(|&side| {
                let seen = &seen;
                sc.spawn(move || receiver(&socks[side], side, load, seen, t_end))
            })
            .collect();
        let tx: Vec<_> = tx_sides.iter().map(|&side| sc.spawn(move || sender(&socks[side], side, load, t0))).collect();
        let tx: Vec<Result<(u64, Histogram, u64)>> =
            tx.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("sender thread panicked"))).collect();
        let rx: Vec<Result<RxStats>> =
            rx.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("receiver thread panicked"))).collect();
        (tx, rx)
    });
    let (mut sent, mut lag, mut send_errors) = (0, Histogram::new(1_000_000_000), 0);
    for t in tx {
        let (s, l, e) = t?;
        sent += s;
        lag.merge(&l);
        send_errors += e;
    }
    let mut hist = Histogram::new(load.budget_ns + 1);
    let (mut late, mut dup, mut foreign) = (0, 0, 0);
    let mut trend = [(0.0f64, 0u64); 10];
    for r in rx {
        let r = r?;
        hist.merge(&r.hist);
        late += r.late;
        dup += r.dup;
        foreign += r.foreign;
        for (a, b) in trend.iter_mut().zip(r.trend) {
            a.0 += b.0;
            a.1 += b.1;
        }
    }
    let received: u64 = seen.iter().map(|s| s.count()).sum();
    let on_time = hist.count();
    let missing = sent.saturating_sub(received);
    let trend_us: Vec<f64> = trend.iter().map(|(s, c)| if *c == 0 { 0.0 } else { s / *c as f64 / 1e3 }).collect();
    let rising_queue =
        trend[0].1 > 0 && trend[9].1 > 0 && trend_us[9] - trend_us[0] > load.budget_ns as f64 / 4.0 / 1e3;
    Ok(Outcome {
        streams: n,
        sent,
        on_time,
        late,
        missing,
        duplicates: dup,
        foreign,
        loss_rate: if sent == 0 { 0.0 } else { (missing + late) as f64 / sent as f64 },
        latency: hist.summary(),
        trend_us,
        rising_queue,
        send_lag: lag.summary(),
        send_errors,
    })
}

/// A fixed-size bitset with atomic set-and-test, one per stream, shared by
/// the receivers (a stream is received on one side only, but this keeps
/// the bookkeeping simple and race-free).
struct AtomicU64Bits {
    words: Vec<AtomicU64>,
}

impl AtomicU64Bits {
    fn new(bits: usize) -> Self {
        AtomicU64Bits { words: (0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect() }
    }
    /// Sets bit `i`; true when it was already set.
    fn test_and_set(&self, i: usize) -> bool {
        let m = 1u64 << (i % 64);
        self.words[i / 64].fetch_or(m, Ordering::Relaxed) & m != 0
    }
    fn count(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.load(Ordering::Relaxed).count_ones())).sum()
    }
}

fn sender(socks: &[UdpSocket], side: usize, load: &Load, t0: u64) -> Result<(u64, Histogram, u64)> {
    setup_thread(load)?;
    let mine: Vec<(u32, &Stream)> =
        load.streams.iter().enumerate().filter(|(_, s)| s.tx_side == side).map(|(i, s)| (i as u32, s)).collect();
    let m = mine.len() as u64;
    let addrs: Vec<SockAddr> = mine.iter().map(|(_, s)| SockAddr::from(s.dst)).collect();
    // Phase spread: stream k of this side starts k/m of an interval in;
    // the second side is offset by half a slot so the sides interleave.
    let phase: Vec<u64> =
        (0..m).map(|k| (k * load.interval_ns + side as u64 * load.interval_ns / 2) / m.max(1)).collect();
    let batch = load.batch.clamp(1, 64);
    let mut bufs = vec![[0u8; probe::LEN]; batch * socks.len()];
    let mut pending: Vec<Vec<usize>> = vec![Vec::with_capacity(batch); socks.len()]; // indices into `mine`
    let mut lag = Histogram::new(1_000_000_000);
    let (mut sent, mut errors) = (0u64, 0u64);
    let total = m * u64::from(load.packets);
    let mut e = 0u64; // next event: round e / m, stream e % m
    let due = |e: u64| t0 + (e / m) * load.interval_ns + phase[(e % m) as usize];
    let min_sleep = 250_000u64;
    let mut last_wake = 0u64;
    while e < total {
        let next = due(e);
        sleep_until_ns(next.max(last_wake + min_sleep));
        last_wake = now_ns();
        while e < total && due(e) <= now_ns() {
            let k = (e % m) as usize;
            let sock = mine[k].1.tx_sock;
            let slot = sock * batch + pending[sock].len();
            let now = now_ns();
            lag.record(now.saturating_sub(due(e)));
            Probe { stream: mine[k].0, seq: (e / m) as u32, sent_ns: now }.write(&mut bufs[slot]);
            pending[sock].push(k);
            e += 1;
            if pending[sock].len() == batch {
                let (s, er) = flush(&socks[sock], &bufs[sock * batch..], &pending[sock], &addrs);
                sent += s;
                errors += er;
                pending[sock].clear();
            }
        }
        for (sock, p) in pending.iter_mut().enumerate() {
            if !p.is_empty() {
                let (s, er) = flush(&socks[sock], &bufs[sock * batch..], p, &addrs);
                sent += s;
                errors += er;
                p.clear();
            }
        }
    }
    // Packets the kernel refused were still "sent" by the schedule: count
    // them as sent (they show up as missing), so a tester failure is loss.
    Ok((sent + errors, lag, errors))
}

/// `sendmmsg` of `bufs[i]` to `addrs[idx[i]]`; returns (sent, failed).
fn flush(sock: &UdpSocket, bufs: &[[u8; probe::LEN]], idx: &[usize], addrs: &[SockAddr]) -> (u64, u64) {
    let mut iov: Vec<libc::iovec> = idx
        .iter()
        .enumerate()
        .map(|(i, _)| libc::iovec { iov_base: bufs[i].as_ptr() as *mut _, iov_len: probe::LEN })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = idx
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            // SAFETY: an all-zero msghdr is a valid empty header.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_name = addrs[k].as_ptr() as *mut _;
            h.msg_namelen = addrs[k].len();
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            libc::mmsghdr { msg_hdr: h, msg_len: 0 }
        })
        .collect();
    let mut done = 0usize;
    let mut failed = 0u64;
    while done < msgs.len() {
        // SAFETY: msgs[done..] point at iovecs, buffers and addresses that
        // outlive the call.
        let r = unsafe {
            libc::sendmmsg(sock.as_raw_fd(), msgs[done..].as_mut_ptr(), (msgs.len() - done) as libc::c_uint, 0)
        };
        if r > 0 {
            done += r as usize;
        } else {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Full socket buffer or an ICMP error reported here: skip one.
            done += 1;
            failed += 1;
        }
    }
    (done as u64 - failed, failed)
}

fn receiver(socks: &[UdpSocket], side: usize, load: &Load, seen: &[AtomicU64Bits], t_end: u64) -> Result<RxStats> {
    setup_thread(load)?;
    // SAFETY: plain syscall; the fd is closed below.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error()).context("epoll_create1");
    }
    let ep = EpollFd(ep);
    for (i, s) in socks.iter().enumerate() {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
        // SAFETY: valid epoll fd, socket fd and event.
        if unsafe { libc::epoll_ctl(ep.0, libc::EPOLL_CTL_ADD, s.as_raw_fd(), &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error()).context("epoll_ctl");
        }
    }
    const B: usize = 64;
    let mut bufs = vec![[0u8; 256]; B];
    let mut iov: Vec<libc::iovec> =
        bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr() as *mut _, iov_len: b.len() }).collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: an all-zero msghdr is a valid empty header.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = v;
            h.msg_iovlen = 1;
            libc::mmsghdr { msg_hdr: h, msg_len: 0 }
        })
        .collect();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; socks.len().max(1)];
    let mut st =
        RxStats { hist: Histogram::new(load.budget_ns + 1), late: 0, dup: 0, foreign: 0, trend: [(0.0, 0); 10] };
    let packets = load.packets as usize;
    while now_ns() < t_end {
        // SAFETY: `events` is writable for its length.
        let nev = unsafe { libc::epoll_wait(ep.0, events.as_mut_ptr(), events.len() as i32, 10) };
        for ev in events.iter().take(nev.max(0) as usize) {
            let Some(sock) = socks.get(ev.u64 as usize) else { continue };
            loop {
                // SAFETY: msgs point at iovecs over `bufs`, all alive and
                // writable; MSG_DONTWAIT never blocks.
                let r = unsafe {
                    libc::recvmmsg(
                        sock.as_raw_fd(),
                        msgs.as_mut_ptr(),
                        B as libc::c_uint,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                    )
                };
                if r <= 0 {
                    break;
                }
                let now = now_ns();
                for (m, buf) in msgs.iter().zip(&bufs).take(r as usize) {
                    let len = (m.msg_len as usize).min(buf.len());
                    let p = match Probe::parse(&buf[..len]) {
                        Some(p) => p,
                        None => {
                            st.foreign += 1;
                            continue;
                        }
                    };
                    let (s, q) = (p.stream as usize, p.seq as usize);
                    match load.streams.get(s) {
                        Some(spec) if spec.tx_side != side && q < packets => {}
                        _ => {
                            st.foreign += 1;
                            continue;
                        }
                    }
                    if seen[s].test_and_set(q) {
                        st.dup += 1;
                        continue;
                    }
                    let lat = now.saturating_sub(p.sent_ns);
                    let t = &mut st.trend[q * 10 / packets];
                    t.0 += lat as f64;
                    t.1 += 1;
                    if lat > load.budget_ns {
                        st.late += 1;
                    } else {
                        st.hist.record(lat);
                    }
                }
                if (r as usize) < B {
                    break;
                }
            }
        }
    }
    Ok(st)
}

struct EpollFd(i32);
impl Drop for EpollFd {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.0) };
    }
}

/// Sets a socket's receive and send buffers past the sysctl limits (root).
pub fn big_buffers(sock: &UdpSocket, bytes: i32) {
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: valid fd and a pointer to an int of the given size.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &bytes as *const i32 as *const _,
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
    }
}

/// A short wait used while polling for a relay to come up.
pub const POLL: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        (a, b)
    }

    #[test]
    fn loopback_load_is_all_on_time() {
        let (a, b) = pair();
        let (c, d) = pair();
        let dst_b = b.local_addr().unwrap();
        let dst_d = d.local_addr().unwrap();
        let load = Load {
            streams: (0..6)
                .map(|i| Stream { tx_side: 0, tx_sock: i % 2, dst: if i % 2 == 0 { dst_b } else { dst_d } })
                .collect(),
            packets: 20,
            interval_ns: 2_000_000,
            budget_ns: 2_000_000_000, // generous: a loaded CI machine must not flake
            batch: 4,
            cpus: vec![],
            realtime: false,
        };
        let out = run(&[vec![a, c], vec![b, d]], &load).unwrap();
        assert_eq!(out.sent, 120);
        assert_eq!(out.on_time, 120, "{out:?}");
        assert_eq!((out.missing, out.late, out.duplicates, out.foreign), (0, 0, 0, 0));
        assert!(out.passes());
        assert_eq!(out.latency.count, 120);
    }

    #[test]
    fn unanswered_streams_count_as_missing_and_foreign_packets_are_counted() {
        let (a, b) = pair();
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap(); // nobody reads it
        let dst = sink.local_addr().unwrap();
        // A stranger's datagram arrives at the receiving side.
        UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"hello", b.local_addr().unwrap()).unwrap();
        let load = Load {
            streams: vec![Stream { tx_side: 0, tx_sock: 0, dst }],
            packets: 5,
            interval_ns: 1_000_000,
            budget_ns: 20_000_000,
            batch: 8,
            cpus: vec![],
            realtime: false,
        };
        let out = run(&[vec![a], vec![b]], &load).unwrap();
        assert_eq!(out.sent, 5);
        assert_eq!(out.missing, 5);
        assert_eq!(out.foreign, 1);
        assert_eq!(out.loss_rate, 1.0);
        assert!(!out.passes());
    }
}
