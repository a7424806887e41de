//! The `AF_PACKET` frame tester: rate-controlled trials of [`frame`]
//! templates sent from one namespace and received in another.
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
//! for a drain period after the last frame and judges each frame by the
//! timestamp, sequence number and trial id in its payload.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use lab::netns::Netns;

use super::frame;
use super::{FrameTester, Port, SendStats, Tally, TrialResult, TrialSpec, Verdict};
use crate::harness::clock::{now_ns, Pacer};
use crate::harness::cpu;
use crate::sys;

/// The `AF_PACKET` backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct AfPacket;

impl FrameTester for AfPacket {
    fn run_trial(&self, spec: &TrialSpec) -> Result<TrialResult> {
        run_trial(spec)
    }

    fn generator(&self) -> String {
        "af-packet (AF_PACKET sockets, sendmmsg/recvmmsg)".into()
    }
}

/// Runs one trial on two fresh threads (one in each namespace).
pub fn run_trial(spec: &TrialSpec) -> Result<TrialResult> {
    if spec.flows.is_empty() || spec.rate_pps <= 0.0 {
        bail!("a trial needs at least one flow and a positive rate");
    }
    if spec.rtp || spec.per_flow {
        bail!("the AF_PACKET tester sends no RTP frames and keeps no per-flow loss (the XDP tester does)");
    }
    let stop_at = Arc::new(AtomicU64::new(u64::MAX));
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
    let sent = sent?;
    let (tally, seen_src) = got?;
    Ok(TrialResult { outcome: tally.outcome(&sent, spec.flows.len()), seen_src, flow_loss: None })
}

fn enter(port: &Port, rx: bool) -> Result<OwnedFd> {
    Netns::attach(&port.ns).enter_thread()?;
    cpu::pin_thread(&port.cpus)?;
    sys::packet_socket(&port.ifname, rx)
        .with_context(|| format!("AF_PACKET socket on {} in {} (needs CAP_NET_RAW)", port.ifname, port.ns))
}

fn send(spec: &TrialSpec) -> Result<SendStats> {
    let sock = enter(&spec.tx, false)?;
    let flows = &spec.flows;
    let batch = spec.batch.clamp(1, sys::MAX_BATCH);
    let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; flows[0].len()]).collect();
    let magic = frame::MAGIC_HI | u32::from(spec.id);
    let ns_per_frame = 1e9 / spec.rate_pps;
    let t0 = now_ns();
    // A sender that cannot keep up stops at the trial's end anyway (its
    // shortfall shows in the achieved rate) instead of running long.
    let mut pacer = Pacer::new(t0, ns_per_frame, spec.frames)
        .spin(50_000)
        .deadline(t0 + (spec.frames as f64 * ns_per_frame) as u64 + 1_000_000);
    let mut st = SendStats::default();
    let mut flow = 0usize;
    while let Some(due) = pacer.wait() {
        let n = (due as usize).min(batch);
        let i = pacer.next();
        let ts = now_ns();
        for (k, b) in bufs[..n].iter_mut().enumerate() {
            let t = &flows[flow];
            if b.len() != t.len() {
                b.resize(t.len(), 0);
            }
            t.stamp(b, ts, (i + k as u64) as u32, flow as u16, magic);
            st.lag.record(ts.saturating_sub(pacer.due_at(i + k as u64)));
            flow = (flow + 1) % flows.len();
        }
        let mut done = 0;
        while done < n {
            match sys::send_batch(sock.as_fd(), &bufs[done..n], None) {
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                Err(e) => return Err(e).context("sendmmsg"),
            }
        }
        pacer.advance(n as u64);
    }
    st.sent = pacer.next();
    // The last frame's slot ends one interval after it was sent.
    st.secs = ((now_ns() - t0) as f64 / 1e9).max(st.sent as f64 * ns_per_frame / 1e9);
    Ok(st)
}

type Received = (Tally, Vec<Option<(std::net::IpAddr, u16)>>);

fn receive(
    spec: &TrialSpec,
    stop_at: &AtomicU64,
    abort: &AtomicBool,
    ready: mpsc::Sender<Result<()>>,
) -> Result<Received> {
    let sock = match enter(&spec.rx, true) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send(Err(e));
            bail!("{msg}");
        }
    };
    let _ = ready.send(Ok(()));
    let magic = frame::MAGIC_HI | u32::from(spec.id);
    let nflows = spec.flows.len();
    let mut tally = Tally::new(spec.frames, spec.late.as_nanos() as u64);
    let mut seen_src = if spec.learn { vec![None; nflows] } else { Vec::new() };
    let mut first_seq: Vec<u32> = if spec.learn { vec![u32::MAX; nflows] } else { Vec::new() };
    let mut bufs: Vec<Vec<u8>> = (0..sys::MAX_BATCH).map(|_| vec![0u8; 2048]).collect();
    let mut lens = [0usize; sys::MAX_BATCH];
    while !abort.load(Ordering::Relaxed) && now_ns() <= stop_at.load(Ordering::Relaxed) {
        let n = sys::recv_batch(sock.as_fd(), &mut bufs, &mut lens, true).context("recvmmsg")?;
        let now = now_ns();
        for (b, &l) in bufs[..n].iter().zip(&lens[..n]) {
            let rx = match frame::decode(&b[..l.min(b.len())]) {
                Some(rx) if rx.magic == magic && rx.outer_v6() == spec.rx_v6 => rx,
                // Not a test frame of this trial (or one that bypassed the
                // translator): another trial's straggler, the DUT's own traffic.
                _ => {
                    tally.foreign();
                    continue;
                }
            };
            if let Verdict::OnTime(_) = tally.record(u64::from(rx.seq), rx.ts_ns, now) {
                let f = usize::from(rx.flow);
                if spec.learn && f < nflows && rx.seq < first_seq[f] {
                    first_seq[f] = rx.seq;
                    seen_src[f] = Some((rx.src, rx.sport));
                }
            }
        }
    }
    Ok((tally, seen_src))
}
