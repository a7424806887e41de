//! The XDP frame tester (`--tester xdp`): frames generated in the kernel
//! by `BPF_PROG_RUN` in live frames mode and counted in the kernel by an
//! XDP receiver (`bpf/tester.bpf.c`, loaded through `xdp::tester`, the
//! project's one BPF loader). Steps 1, 2 and 4 (`run_trial`) are shared
//! with the AF_XDP tester ([`super::afxdp`]), which sends in step 3 from
//! an AF_XDP socket instead.
//!
//! One trial, on one thread of its own:
//!
//! 1. load the tester (fresh maps: the receiver's bitmap of seen sequence
//!    numbers starts empty) and fill one generator flow per template;
//! 2. enter the receiving namespace and attach the receiver to the
//!    receiving port (native XDP): it judges every test frame as the
//!    [`Tally`] would (first arrival or duplicate, late against the
//!    budget, latency trend per tenth), writes a latency sample every 2^k
//!    frames to a ring buffer, learns each flow's translated source, and
//!    drops the frame;
//! 3. enter the sending namespace, pin to the sending CPU and pace: each
//!    [`Pacer`] wake-up sends the frames due in one `BPF_PROG_RUN` call
//!    (repeat = frames, XDP_TX out of the sending port); the generator
//!    writes each frame's flow headers, CLOCK_MONOTONIC timestamp,
//!    sequence number, flow and magic and fixes the UDP checksum;
//! 4. after the drain period close the receiver (later frames count as
//!    foreign), and read its counters, trend, samples and learned sources.
//!
//! Frames sent into a veth must land on a peer whose NAPI is on: the
//! receiver's own XDP program does that in the ceiling topology; for a
//! DUT, [`FrameTester::prepare_port`] turns GRO on on the DUT's ports
//! (which is how a veth gets NAPI without an XDP program). See
//! docs/bench-xlat.md ("XDP tester").

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context as _, Result};
use lab::netns::Netns;
use xdp::tester::{flow_from_frame, Tester, TesterLimits};
use xdp::types::{TgenConfig, TgenFlow, TrecvConfig, TREND_SLOTS};
use xdp::Mode;

use super::{frame, Counted, FlowLoss, FrameTester, Port, SendStats, Tally, TrialResult, TrialSpec};
use crate::harness::clock::{now_ns, Pacer};
use crate::harness::cpu;

// The payload the generator stamps is the frame format's.
const _: () = assert!(frame::PAYLOAD_LEN == xdp::tester::STAMP_LEN);
const _: () = assert!(frame::MAGIC_HI == xdp::types::TESTER_MAGIC_HI);

/// Most latency samples per trial (the ring holds 16 bytes per sample).
const MAX_SAMPLES: u64 = 1 << 17;
/// Frames per `BPF_PROG_RUN` call at most (a burst; the AF_XDP generator's
/// most per wake-up too), and per kernel batch.
pub(super) const MAX_BURST: u64 = 1024;
const BATCH: u32 = 64;
/// Shortest gap between two generator calls: frames due meanwhile go in
/// one call (a call has a fixed cost of a few microseconds).
pub(super) const MIN_WAKE_NS: u64 = 20_000;

/// The XDP backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct XdpTester;

impl FrameTester for XdpTester {
    fn run_trial(&self, spec: &TrialSpec) -> Result<TrialResult> {
        on_thread(spec, "tester-xdp", |spec| {
            run_trial(spec, |t, setup| {
                anchor(t, &spec.tx)?;
                t.set_generator(setup.cfg)?;
                send(t, spec, setup.cfg.ifindex)
            })
        })
    }

    fn prepare_port(&self, port: &Port) -> Result<()> {
        prepare_port(port)
    }

    fn generator(&self) -> String {
        "xdp (BPF_PROG_RUN live frames; XDP receiver)".into()
    }
}

/// Turns NAPI on on a DUT port a generator sends into (GRO on): a veth
/// takes XDP frames only into a peer with NAPI, and the receive work of
/// every frame then runs in the port's NAPI poll (see the module docs).
pub(crate) fn prepare_port(port: &Port) -> Result<()> {
    let (ns, ifname) = (port.ns.clone(), port.ifname.clone());
    lab::netns::in_netns(&Netns::attach(&ns), move || {
        xdp::sys::set_gro(&ifname, true).with_context(|| format!("GRO on {ifname} in {ns} (NAPI for XDP frames)"))
    })
}

/// Runs `trial` on a thread of its own named `name` (it enters the
/// trial's namespaces).
pub(super) fn on_thread(
    spec: &TrialSpec,
    name: &str,
    trial: impl FnOnce(&TrialSpec) -> Result<TrialResult> + Send + 'static,
) -> Result<TrialResult> {
    let spec = spec.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || trial(&spec))
        .with_context(|| format!("spawn the {name} thread"))?
        .join()
        .map_err(|_| anyhow!("the {name} thread panicked"))?
}

/// The sample interval (a power of two) that keeps a trial's samples
/// within [`MAX_SAMPLES`].
fn sample_shift(frames: u64) -> u8 {
    let mut k = 0u8;
    while (frames >> k) > MAX_SAMPLES && k < 31 {
        k += 1;
    }
    k
}

/// What a generator needs of a trial: the generator's settings (for the
/// sending port, in the sending namespace) and the flows in order.
pub(super) struct Setup {
    pub cfg: TgenConfig,
    pub flows: Vec<TgenFlow>,
}

/// One trial with the XDP receiver, on the calling thread: load the tester,
/// attach and open the receiver in the receiving namespace, enter the
/// sending namespace (pinned, SCHED_FIFO with `--realtime`), let `generate`
/// send the trial's frames, close the receiver after the drain and turn
/// what it counted into the trial's result.
pub(super) fn run_trial(
    spec: &TrialSpec,
    generate: impl FnOnce(&mut Tester, &Setup) -> Result<SendStats>,
) -> Result<TrialResult> {
    if spec.flows.is_empty() || spec.rate_pps <= 0.0 {
        bail!("a trial needs at least one flow and a positive rate");
    }
    let flows = flows(&spec.flows, spec.rtp)?;
    let (udp_off, layout) = (flows[0].1, flows[0].2);
    if flows.iter().any(|f| (f.1, f.2) != (udp_off, layout)) {
        bail!("the XDP tester sends frames of one layout per trial");
    }
    // The bytes before the ones the generator writes are the first
    // template's in every frame.
    let head = &spec.flows[0].bytes()[..layout.head()];
    if spec.flows.iter().any(|t| &t.bytes()[..layout.head()] != head) {
        bail!("the XDP tester's 4in6 frames share their MACs and outer IPv6 version, class and flow label");
    }
    let nflows = u32::try_from(spec.flows.len()).context("too many flows")?;
    let shift = sample_shift(spec.frames);
    let mut t = Tester::load(TesterLimits {
        frames: spec.frames,
        flows: nflows,
        sample_ring: ((spec.frames >> shift) + 1).saturating_mul(16).min(1 << 26) as u32,
    })?;
    let flows: Vec<TgenFlow> = flows.iter().map(|f| f.0).collect();
    t.set_flows(&flows)?;
    let magic = frame::MAGIC_HI | u32::from(spec.id);

    // The receiver, in the receiving namespace.
    Netns::attach(&spec.rx.ns).enter_thread()?;
    t.attach_receiver(&spec.rx.ifname, Mode::Native)
        .with_context(|| format!("XDP receiver on {} in {}", spec.rx.ifname, spec.rx.ns))?;
    receiver_napi(spec)?;
    let total = u32::try_from(spec.frames).context("too many frames for one trial")?;
    let rx = TrecvConfig {
        budget_ns: spec.late.as_nanos() as u64,
        magic,
        total,
        nflows: if spec.learn { nflows } else { 0 },
        sample_shift: shift,
        rx_v6: u8::from(spec.rx_v6),
        learn: u8::from(spec.learn),
        rtp: u8::from(spec.rtp),
    };
    t.set_receiver(rx)?;

    // The generator, in the sending namespace.
    Netns::attach(&spec.tx.ns).enter_thread()?;
    cpu::setup_thread(&spec.tx.cpus, spec.realtime)?;
    let ifindex = xdp::sys::if_index(&spec.tx.ifname)
        .ok_or_else(|| anyhow!("no interface {} in {}", spec.tx.ifname, spec.tx.ns))?;
    let cfg = TgenConfig { nflows, magic, udp_off, v6: layout.code(), rtp: u8::from(spec.rtp), ifindex };
    let sent = generate(&mut t, &Setup { cfg, flows });
    // Close the receiver at the end of the drain, also when sending failed.
    std::thread::sleep(spec.drain);
    t.set_receiver(TrecvConfig { total: 0, ..rx })?;
    let sent = sent?;
    let c = t.counts()?;
    let counted = Counted { received: c.received, late: c.late, dup: c.dup, foreign: c.foreign, trend: t.trend()? };
    debug_assert_eq!(counted.trend.len(), TREND_SLOTS as usize);
    let mut samples = Vec::with_capacity(c.sampled as usize);
    t.drain_samples(|s| samples.push(u64::from(s.lat_ns)))?;
    let tally = Tally::counted(spec.frames, rx.budget_ns, &counted, samples);
    let seen_src = if spec.learn {
        (0..nflows)
            .map(|i| {
                Ok(t.learned(i)?.map(|l| {
                    let a = if l.v6 == 1 {
                        IpAddr::from(l.addr)
                    } else {
                        IpAddr::from([l.addr[0], l.addr[1], l.addr[2], l.addr[3]])
                    };
                    (a, u16::from_be(l.port_be))
                }))
            })
            .collect::<Result<Vec<_>, xdp::Error>>()?
    } else {
        Vec::new()
    };
    // Over the frames sent: a generator that fell behind stops at the
    // trial's end (its shortfall shows in the achieved rate), and what it
    // never sent is not the device's loss.
    let flow_loss = match spec.per_flow {
        true => Some(FlowLoss::from_bitmap(&t.seen()?, sent.sent, spec.flows.len())),
        false => None,
    };
    t.detach_receiver()?;
    Ok(TrialResult { outcome: tally.outcome(&sent, spec.flows.len()), seen_src, flow_loss })
}

/// With receiving CPUs of its own (`--rx-cpu` other than `--tx-cpu`), the
/// receiving port's NAPI poll — where the XDP receiver runs — goes to a
/// kernel thread on them (threaded NAPI) instead of the softirq of the
/// CPU that transmitted into the port. With `--realtime` the thread runs
/// SCHED_FIFO above the DUT's NAPI threads (`--threaded-napi`, one
/// priority below): threads of one FIFO priority on one CPU do not take
/// turns, and a DUT port busy with the offered load would starve the
/// receiver's. Called after the receiver is attached (which gives the
/// port its NAPI); its threads are made anew with each attachment.
fn receiver_napi(spec: &TrialSpec) -> Result<()> {
    if spec.rx.cpus.is_empty() || spec.rx.cpus == spec.tx.cpus {
        return Ok(());
    }
    cpu::threaded_napi(&Netns::attach(&spec.rx.ns), &spec.rx.ifname)?;
    let fifo = spec.realtime.then_some(cpu::RT_PRIORITY + 2);
    if cpu::pin_napi(&[spec.rx.ifname.as_str()], &spec.rx.cpus, fifo)? == 0 {
        bail!("threaded NAPI on {}: no napi/{}-* kernel thread to place", spec.rx.ifname, spec.rx.ifname);
    }
    Ok(())
}

/// An idle veth pair in the sending namespace to anchor the generator on
/// (see `Tester::anchor_generator`); created once, it goes with the namespace.
const ANCHOR: (&str, &str) = ("v6gtg0", "v6gtg1");

fn anchor(t: &mut Tester, port: &Port) -> Result<()> {
    if xdp::sys::if_index(ANCHOR.0).is_none() {
        let ns = Netns::attach(&port.ns);
        ns.ip(&["link", "add", ANCHOR.0, "type", "veth", "peer", "name", ANCHOR.1])?;
        ns.ip(&["link", "set", ANCHOR.0, "up"])?;
        ns.ip(&["link", "set", ANCHOR.1, "up"])?;
    }
    t.anchor_generator(ANCHOR.0).with_context(|| format!("anchoring the generator on {} in {}", ANCHOR.0, port.ns))?;
    Ok(())
}

type Flow = (xdp::types::TgenFlow, u16, xdp::tester::Layout);

fn flows(templates: &Arc<Vec<frame::Template>>, rtp: bool) -> Result<Vec<Flow>> {
    templates.iter().map(|tpl| flow_from_frame(tpl.bytes(), rtp).map_err(|e| anyhow!("{e}"))).collect()
}

/// A trial's schedule: `spec.frames` at `spec.rate_pps` from `t0` (now),
/// wake-ups at least `spec.min_wake` apart (or the backend's default),
/// sending stopped at `end`, `spec.overrun` (default 1 ms) past the
/// schedule's end.
pub(super) struct Schedule {
    pub pacer: Pacer,
    pub t0: u64,
    pub ns_per_frame: f64,
    pub end: u64,
}

impl Schedule {
    /// The schedule of `spec`, `min_wake_ns` apart unless `spec.min_wake` says.
    pub(super) fn of(spec: &TrialSpec, min_wake_ns: u64) -> Schedule {
        let ns_per_frame = 1e9 / spec.rate_pps;
        let t0 = now_ns();
        let end =
            t0 + (spec.frames as f64 * ns_per_frame) as u64 + spec.overrun.map_or(1_000_000, |d| d.as_nanos() as u64);
        let pacer = Pacer::new(t0, ns_per_frame, spec.frames)
            .min_wake(spec.min_wake.map_or(min_wake_ns, |d| d.as_nanos() as u64))
            .spin(50_000)
            .deadline(end);
        Schedule { pacer, t0, ns_per_frame, end }
    }

    /// The send statistics' duration: from the start to now, at least
    /// the schedule's length for the frames sent.
    pub(super) fn secs(&self, sent: u64) -> f64 {
        ((now_ns() - self.t0) as f64 / 1e9).max(sent as f64 * self.ns_per_frame / 1e9)
    }
}

/// Paces the trial's frames: each wake-up sends the frames due in one call.
fn send(t: &Tester, spec: &TrialSpec, ifindex: u32) -> Result<SendStats> {
    let frame0 = spec.flows[0].bytes();
    let mut s = Schedule::of(spec, MIN_WAKE_NS);
    let mut st = SendStats::default();
    while let Some(due) = s.pacer.wait() {
        let n = due.min(MAX_BURST);
        let i = s.pacer.next();
        // The first frame of a burst is the latest against its schedule.
        st.lag.record(now_ns().saturating_sub(s.pacer.due_at(i)));
        if !t.generate(frame0, ifindex, n as u32, BATCH)? {
            // The kernel had no room (a DUT slower than the rate): the
            // frames it built count as sent and, not arriving, as lost.
            st.errors += n;
        }
        s.pacer.advance(n);
    }
    st.sent = t.generated()?;
    st.secs = s.secs(st.sent);
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_stay_bounded() {
        assert_eq!(sample_shift(1000), 0);
        assert_eq!(sample_shift(MAX_SAMPLES), 0);
        assert_eq!(sample_shift(MAX_SAMPLES + 1), 1);
        assert!((4_000_000u64 >> sample_shift(4_000_000)) <= MAX_SAMPLES);
    }
}
