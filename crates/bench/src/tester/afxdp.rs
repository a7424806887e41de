//! The AF_XDP frame tester (`--tester afxdp`; also `--tester xdp` where the
//! kernel refuses `BPF_PROG_RUN` with live frames): the XDP tester's
//! frames sent from an AF_XDP socket instead of generated in the kernel,
//! and counted by the same XDP receiver (`bpf/tester.bpf.c`'s `xdp_trecv`,
//! attached as for `--tester xdp`, see [`super::xdp`]).
//!
//! The generator (`xdp::xskgen`) binds an AF_XDP socket to queue 0 of the
//! sending port — copy mode on veth (no zero-copy there; the report says
//! which mode ran) — with one UMEM filled once with the trial's first
//! template frame. Each [`Pacer`](crate::harness::clock::Pacer) wake-up
//! stamps the frames due in their slots, `CHUNK` at a time, exactly as
//! `xdp_tgen` would (the flow's header bytes, RTP header, CLOCK_MONOTONIC
//! timestamp, sequence number, flow index, magic, UDP checksum:
//! `xdp::tester::Stamper`), publishes each chunk in the TX ring and wakes
//! the kernel with `sendto` (in copy mode one call sends up to 256 frames,
//! `XDP_MAX_TX_SKB_BUDGET`), until the ring is empty. A slot is
//! reused once the kernel completes it: no page pool or allocation per
//! call on the tester's side, so an overloaded device under test cannot
//! leave the generator slow afterwards (the live-frames generator's page
//! pools can, docs/bench-trgw.md).
//!
//! Frames sent = the descriptors the kernel took from the TX ring; frames
//! still queued when the trial's time is up are not sent (the shortfall
//! shows in the achieved rate).

use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use xdp::tester::Stamper;
use xdp::xskgen::Generator;

use super::xdp::{on_thread, prepare_port, run_trial, Schedule, Setup, MAX_BURST, MIN_WAKE_NS};
use super::{FrameTester, Port, SendStats, TrialResult, TrialSpec};
use crate::harness::clock::now_ns;

/// Frames stamped and handed to the kernel per `sendto`: each chunk's
/// frames carry the time the chunk was written, and the kernel sends them
/// in that call (in copy mode about half a microsecond each here), so a
/// frame's timestamp is at most a chunk's sending time early.
const CHUNK: u32 = 64;

/// The AF_XDP backend.
#[derive(Debug, Default)]
pub struct AfXdpTester {
    /// Why it runs in place of the live-frames generator (`--tester xdp`
    /// on a kernel that refuses live frames).
    fallback: Option<String>,
    /// The socket's mode and budget in the last trial (for the report).
    socket: Arc<Mutex<Option<String>>>,
}

impl AfXdpTester {
    /// The AF_XDP tester standing in for the live-frames one, because `why`.
    pub fn fallback(why: String) -> AfXdpTester {
        AfXdpTester { fallback: Some(why), ..AfXdpTester::default() }
    }
}

impl FrameTester for AfXdpTester {
    fn run_trial(&self, spec: &TrialSpec) -> Result<TrialResult> {
        let socket = self.socket.clone();
        on_thread(spec, "tester-afxdp", move |spec| run_trial(spec, |_, setup| send(spec, setup, &socket)))
    }

    fn prepare_port(&self, port: &Port) -> Result<()> {
        prepare_port(port)
    }

    fn generator(&self) -> String {
        let parts: Vec<String> = [
            self.fallback.clone(),
            self.socket.lock().ok().and_then(|s| s.clone()).map(|s| format!("AF_XDP {s}")),
            Some("XDP receiver".into()),
        ]
        .into_iter()
        .flatten()
        .collect();
        format!("afxdp ({})", parts.join("; "))
    }
}

/// A queue discipline on `port` (a veth): with one, a veth whose peer's
/// ring is full stops its queue and answers the AF_XDP socket's transmit
/// with "busy" (the socket's `sendto` then returns `EAGAIN` and the frame
/// stays in the TX ring) instead of dropping the frame, as it does with
/// the default `noqueue` (Linux 6.16 and later; older kernels drop
/// either way). The generator's frames bypass the queue itself.
fn backpressure(port: &Port) -> Result<()> {
    lab::netns::Netns::attach(&port.ns)
        .exec("tc", &["qdisc", "replace", "dev", &port.ifname, "root", "pfifo", "limit", "1000"])
        .with_context(|| format!("a queue discipline on {} in {} (tc)", port.ifname, port.ns))?;
    Ok(())
}

/// Paces the trial's frames: each wake-up queues the frames due (stamped
/// in their slots) and wakes the kernel until it has taken them all.
fn send(spec: &TrialSpec, setup: &Setup, socket: &Mutex<Option<String>>) -> Result<SendStats> {
    if spec.backpressure {
        backpressure(&spec.tx)?;
    }
    let frame0 = spec.flows[0].bytes();
    let stamper = Stamper::new(&setup.cfg, &setup.flows, frame0.len())?;
    let mut g = Generator::open(setup.cfg.ifindex, frame0, stamper)?;
    if let Ok(mut s) = socket.lock() {
        *s = Some(g.socket().describe());
    }
    let mut s = Schedule::of(spec, MIN_WAKE_NS);
    let end = s.end;
    let mut st = SendStats::default();
    while let Some(due) = s.pacer.wait() {
        let n = due.min(MAX_BURST) as u32;
        let i = s.pacer.next();
        // The first frame of a burst is the latest against its schedule.
        st.lag.record(now_ns().saturating_sub(s.pacer.due_at(i)));
        let mut done = 0;
        while done < n && now_ns() <= end {
            let k = g.send((n - done).min(CHUNK))?;
            done += k;
            if k == 0 {
                // The TX ring or the slots are full: the kernel catches up
                // in the next sendto.
                std::thread::yield_now();
            }
        }
        g.flush(end)?;
        s.pacer.advance(u64::from(done));
    }
    g.flush(end)?;
    st.sent = g.sent();
    st.secs = s.secs(st.sent);
    Ok(st)
}
