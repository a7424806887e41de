//! The UDP stream tester (`bench trgw`): paced G.711 [`probe`] streams sent
//! with `sendmmsg` from a few UDP sockets per side (each message's
//! destination in its own `msg_name`), received with `recvmmsg` over epoll
//! on the other side and judged per packet by the shared [`Tally`].
//!
//! Packet `seq` of stream `s` is index `seq * streams + s` of the trial:
//! the schedule of each side is one [`Pacer`] over its streams, round by
//! round, so the streams are phase-spread evenly over the packetisation
//! interval (the second side offset by half a slot).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context as _, Result};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use socket2::SockAddr;

use super::probe::{self, Probe};
use super::{Outcome, SendStats, Tally};
use crate::harness::clock::{now_ns, Pacer};
use crate::harness::cpu;
use crate::sys;

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
    /// The streams.
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

/// Sets a socket's receive and send buffers past the sysctl limits (root;
/// best effort).
pub fn big_buffers(sock: &UdpSocket, bytes: usize) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(sock, sockopt::RcvBufForce, &bytes);
    let _ = setsockopt(sock, sockopt::SndBufForce, &bytes);
}

/// Runs the load: one sender thread per sending side and one receiver
/// thread per receiving side, all pinned to `load.cpus`. `socks[side]`
/// are that side's sockets (already bound inside its namespace).
pub fn run(socks: &[Vec<UdpSocket>; 2], load: &Load) -> Result<Outcome> {
    let n = load.streams.len();
    if n == 0 || load.packets == 0 {
        bail!("nothing to send");
    }
    for s in socks.iter().flatten() {
        s.set_nonblocking(true)?;
    }
    // Everyone starts at the same instant, far enough ahead for the threads to be ready.
    let t0 = now_ns() + 100_000_000;
    let stop_at = AtomicU64::new(u64::MAX);
    let total = n as u64 * u64::from(load.packets);
    let sides = |rx: bool| (0..2).filter(move |side| load.streams.iter().any(|s| (s.tx_side != *side) == rx));
    let (tx, rx) = std::thread::scope(|sc| {
        let stop_at = &stop_at;
        let rx: Vec<_> =
            sides(true).map(|side| sc.spawn(move || receiver(&socks[side], side, load, total, stop_at))).collect();
        let tx: Vec<_> = sides(false).map(|side| sc.spawn(move || sender(&socks[side], side, load, t0))).collect();
        let tx: Vec<Result<SendStats>> =
            tx.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("sender thread panicked"))).collect();
        // Stragglers: a budget and some more after the last packet.
        stop_at.store(now_ns() + load.budget_ns + 300_000_000, Ordering::Relaxed);
        let rx: Vec<Result<Tally>> =
            rx.into_iter().map(|h| h.join().unwrap_or_else(|_| bail!("receiver thread panicked"))).collect();
        (tx, rx)
    });
    let mut sent = SendStats::default();
    for t in tx {
        sent.merge(&t?);
    }
    let mut tally = Tally::new(total, load.budget_ns);
    for r in rx {
        tally.merge(&r?);
    }
    Ok(tally.outcome(&sent, n))
}

fn sender(socks: &[UdpSocket], side: usize, load: &Load, t0: u64) -> Result<SendStats> {
    cpu::setup_thread(&load.cpus, load.realtime)?;
    let mine: Vec<(u64, &Stream)> =
        load.streams.iter().enumerate().filter(|(_, s)| s.tx_side == side).map(|(i, s)| (i as u64, s)).collect();
    let m = mine.len() as u64;
    let addrs: Vec<SockAddr> = mine.iter().map(|(_, s)| SockAddr::from(s.dst)).collect();
    let interval = load.interval_ns as f64 / m.max(1) as f64;
    let start = t0 + side as u64 * (interval / 2.0) as u64;
    let mut pacer = Pacer::new(start, interval, m * u64::from(load.packets)).min_wake(250_000);
    let batch = load.batch.clamp(1, sys::MAX_BATCH);
    let mut bufs = vec![[0u8; probe::LEN]; batch * socks.len()];
    let mut pending: Vec<Vec<usize>> = vec![Vec::with_capacity(batch); socks.len()]; // indices into `mine`
    let mut st = SendStats::default();
    while let Some(due) = pacer.wait() {
        for _ in 0..due {
            let e = pacer.next();
            let k = (e % m) as usize;
            let sock = mine[k].1.tx_sock;
            let slot = sock * batch + pending[sock].len();
            let now = now_ns();
            st.lag.record(now.saturating_sub(pacer.due_at(e)));
            Probe { stream: mine[k].0 as u32, seq: (e / m) as u32, sent_ns: now }.write(&mut bufs[slot]);
            pending[sock].push(k);
            pacer.advance(1);
            if pending[sock].len() == batch {
                flush(&socks[sock], &bufs[sock * batch..], &mut pending[sock], &addrs, &mut st);
            }
        }
        for (sock, p) in pending.iter_mut().enumerate() {
            flush(&socks[sock], &bufs[sock * batch..], p, &addrs, &mut st);
        }
    }
    st.secs = (now_ns().saturating_sub(start)) as f64 / 1e9;
    Ok(st)
}

/// Sends the pending probes of one socket: `bufs[i]` to `addrs[pending[i]]`.
/// A message the kernel refuses (full buffer, an ICMP error reported here)
/// is skipped and counted: it was "sent" by the schedule and shows up as
/// missing, so a tester failure is loss, never a silent gap.
fn flush(
    sock: &UdpSocket,
    bufs: &[[u8; probe::LEN]],
    pending: &mut Vec<usize>,
    addrs: &[SockAddr],
    st: &mut SendStats,
) {
    if pending.is_empty() {
        return;
    }
    let to: Vec<&SockAddr> = pending.iter().map(|&k| &addrs[k]).collect();
    let mut done = 0usize;
    while done < to.len() {
        match sys::send_batch(sock.as_fd(), &bufs[done..to.len()], Some(&to[done..])) {
            Ok(k) => done += k.max(1),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {
                done += 1;
                st.errors += 1;
            }
        }
    }
    st.sent += to.len() as u64;
    pending.clear();
}

fn receiver(socks: &[UdpSocket], side: usize, load: &Load, total: u64, stop_at: &AtomicU64) -> Result<Tally> {
    cpu::setup_thread(&load.cpus, load.realtime)?;
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("epoll_create1")?;
    for (i, s) in socks.iter().enumerate() {
        ep.add(s, EpollEvent::new(EpollFlags::EPOLLIN, i as u64)).context("epoll_ctl")?;
    }
    let mut bufs = vec![[0u8; 256]; sys::MAX_BATCH];
    let mut lens = [0usize; sys::MAX_BATCH];
    let mut events = vec![EpollEvent::empty(); socks.len().max(1)];
    let mut tally = Tally::new(total, load.budget_ns);
    let (n, packets) = (load.streams.len() as u64, load.packets);
    while now_ns() < stop_at.load(Ordering::Relaxed) {
        let nev = match ep.wait(&mut events, EpollTimeout::from(10u8)) {
            Ok(k) => k,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e).context("epoll_wait"),
        };
        for ev in &events[..nev] {
            let Some(sock) = socks.get(ev.data() as usize) else { continue };
            loop {
                let r = sys::recv_batch(sock.as_fd(), &mut bufs, &mut lens, false).context("recvmmsg")?;
                let now = now_ns();
                for (b, &len) in bufs.iter().zip(&lens).take(r) {
                    match Probe::parse(&b[..len.min(b.len())]) {
                        Some(p)
                            if p.seq < packets
                                && load.streams.get(p.stream as usize).is_some_and(|s| s.tx_side != side) =>
                        {
                            tally.record(u64::from(p.seq) * n + u64::from(p.stream), p.sent_ns, now);
                        }
                        _ => tally.foreign(),
                    }
                }
                if r < sys::MAX_BATCH {
                    break;
                }
            }
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap())
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
        assert_eq!(out.latency.samples, 120);
    }

    #[test]
    fn both_directions_at_once() {
        let (a, b) = pair();
        let (dst_a, dst_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let load = Load {
            streams: vec![
                Stream { tx_side: 0, tx_sock: 0, dst: dst_b },
                Stream { tx_side: 1, tx_sock: 0, dst: dst_a },
                Stream { tx_side: 0, tx_sock: 0, dst: dst_b },
            ],
            packets: 10,
            interval_ns: 1_000_000,
            budget_ns: 2_000_000_000,
            batch: 8,
            cpus: vec![],
            realtime: false,
        };
        let out = run(&[vec![a], vec![b]], &load).unwrap();
        assert_eq!((out.sent, out.on_time, out.foreign), (30, 30, 0), "{out:?}");
        assert!(out.passes());
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
