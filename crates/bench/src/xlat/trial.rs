//! The measurements of `bench xlat`: frame templates per DUT and
//! direction, trials on the frame tester, throughput search, loss above
//! and latency below the throughput, NAT64 session setup.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lab::topo::bench_addr::*;
use lab::topo::BenchTopo;

use super::dut::{AFTR6, DSLITE_HOST4, LW_PSID, LW_PSID_LEN, LW_PSID_OFFSET};
use super::{dut, Ctx, Dir, Dut, DutReport, LoadResult, Point, SearchTrial, Setup, SetupProbe};
use crate::harness::cpu;
use crate::harness::fastpath::FastPath;
use crate::harness::guard::Proc;
use crate::harness::latency::us;
use crate::harness::search::{Found, Judged, Search};
use crate::tester::frame::{self, Header, Template, Tunnel6};
use crate::tester::{Port, TrialResult, TrialSpec, RATE_TOLERANCE};

static TRIAL_ID: AtomicU16 = AtomicU16::new(1);

/// The emulated IPv6 host for new-session tests: `2001:db8:46::<tag>:<n>`.
fn host6(tag: u16, n: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, tag, n)
}

/// Frame templates and ports for one direction.
struct Streams {
    tx: Port,
    rx: Port,
    flows: Arc<Vec<Template>>,
    sent_size: usize,
    rx_v6: bool,
}

fn ports(topo: &BenchTopo, ctx: &Ctx, dir: Dir) -> (Port, Port) {
    let p6 = Port { ns: topo.t6.name().to_owned(), ifname: "t6".into(), cpus: vec![] };
    let p4 = Port { ns: topo.t4.name().to_owned(), ifname: "t4".into(), cpus: vec![] };
    let (tx, rx) = (vec![ctx.a.tx_cpu], vec![ctx.a.rx_cpu]);
    match dir {
        Dir::V6ToV4 => (Port { cpus: tx, ..p6 }, Port { cpus: rx, ..p4 }),
        Dir::V4ToV6 => (Port { cpus: tx, ..p4 }, Port { cpus: rx, ..p6 }),
    }
}

/// The headers of each flow for `dut` and `dir`. `nat` maps flow i to the
/// IPv4 source address and port the NAT64 gave it (4to6 through NAT64).
fn headers(dut: Dut, dir: Dir, flow_ports: &[(u16, u16)], nat: Option<&[Option<(IpAddr, u16)>]>) -> Vec<Header> {
    let v6_out = |sport, dport| Header {
        dst_mac: D6_MAC,
        src_mac: T6_MAC,
        src: IpAddr::V6(HOST6),
        dst: IpAddr::V6(in_pool6(HOST4)),
        sport,
        dport,
    };
    let v4_in = |dst: IpAddr, sport, dport| Header {
        dst_mac: D4_MAC,
        src_mac: T4_MAC,
        src: IpAddr::V4(HOST4),
        dst,
        sport,
        dport,
    };
    let mut out = Vec::with_capacity(flow_ports.len());
    for (i, &(sp, dp)) in flow_ports.iter().enumerate() {
        let h = match (dut, dir) {
            (Dut::Tester, Dir::V6ToV4) => Header { dst_mac: T4_MAC, ..v6_out(sp, dp) },
            (Dut::Tester, Dir::V4ToV6) => Header { dst_mac: D6_MAC, ..v4_in(IpAddr::V4(HOST6_AS_V4), dp, sp) },
            // The kernel forwards the host's IPv4 packets; the lwB4 sends
            // them (its binding's address) inside 4in6 ([`tunnel`]).
            (Dut::Kernel | Dut::V6gateLw4o6 | Dut::V6gateXdpLw4o6, Dir::V6ToV4) => {
                Header { src: IpAddr::V4(HOST6_AS_V4), dst: IpAddr::V4(HOST4), ..v6_out(sp, dp) }
            }
            (Dut::V6gateDslite | Dut::V6gateXdpDslite, Dir::V6ToV4) => {
                Header { src: IpAddr::V4(DSLITE_HOST4), dst: IpAddr::V4(HOST4), ..v6_out(sp, dp) }
            }
            (
                Dut::Kernel
                | Dut::TaygaSiit
                | Dut::V6gateSiit
                | Dut::V6gateXdpSiit
                | Dut::V6gateLw4o6
                | Dut::V6gateXdpLw4o6,
                Dir::V4ToV6,
            ) => v4_in(IpAddr::V4(HOST6_AS_V4), dp, sp),
            (_, Dir::V6ToV4) => v6_out(sp, dp),
            (_, Dir::V4ToV6) => match nat.and_then(|m| m.get(i).copied().flatten()) {
                Some((addr, port)) => v4_in(addr, dp, port),
                None => continue,
            },
        };
        out.push(h);
    }
    out
}

/// Whether the frames this DUT and direction send are IPv6 (4in6 included).
fn sends_v6(dut: Dut, dir: Dir) -> bool {
    dir == Dir::V6ToV4 && dut != Dut::Kernel
}

/// The outer IPv6 header of the frames this DUT and direction send: a
/// softwire's 6to4 frames are 4in6 from the tester's B4 ([`HOST6`]) to
/// the softwire's end-point.
fn tunnel(dut: Dut, dir: Dir) -> Option<Tunnel6> {
    (dut.softwire() && dir == Dir::V6ToV4).then_some(Tunnel6 { src: HOST6, dst: AFTR6 })
}

/// The frames of `hdrs` for this DUT and direction at the frame size label
/// `size`, and their size: the same payload in every DUT, so IPv4 frames
/// are 20 bytes shorter and 4in6 frames 20 bytes longer than `size`.
fn templates(dut: Dut, dir: Dir, size: usize, hdrs: &[Header]) -> Result<(Vec<Template>, usize)> {
    let outer = tunnel(dut, dir);
    let sent_size = match outer {
        Some(_) => size + 20,
        None if sends_v6(dut, dir) => size,
        None => size - 20,
    };
    let flows = hdrs
        .iter()
        .map(|h| match outer {
            Some(t) => Template::new_4in6(h, t, sent_size),
            None => Template::new(h, sent_size),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if flows.is_empty() {
        bail!("no flows to send");
    }
    Ok((flows, sent_size))
}

/// lw4o6: `n` flows (at most the port set's 4,032) of RFC 4814 ports, each
/// source port moved into the lwB4's port set (its PSID field set to
/// [`LW_PSID`]; the A field, non-zero above port 1023, kept) and distinct.
fn lw4o6_ports(n: usize) -> Vec<(u16, u16)> {
    let m = 16 - LW_PSID_OFFSET - LW_PSID_LEN;
    let field = ((1u16 << LW_PSID_LEN) - 1) << m;
    let mut used = vec![false; 65536];
    frame::rfc4814_ports(usize::MAX, 4814)
        .into_iter()
        .filter_map(|(sp, dp)| {
            let sp = (sp & !field) | (LW_PSID << m);
            (!std::mem::replace(&mut used[usize::from(sp)], true)).then_some((sp, dp))
        })
        .take(n)
        .collect()
}

/// The (source, destination) UDP ports of `n` flows for `dut`: RFC 4814
/// pseudorandom ports, the lwAFTR's inside its one binding's port set.
fn flow_ports(dut: Dut, n: usize) -> Vec<(u16, u16)> {
    match dut {
        Dut::V6gateLw4o6 | Dut::V6gateXdpLw4o6 => lw4o6_ports(n),
        _ => frame::rfc4814_ports(n, 4814),
    }
}

fn streams(topo: &BenchTopo, ctx: &Ctx, dut: Dut, dir: Dir, size: usize, hdrs: &[Header]) -> Result<Streams> {
    let (flows, sent_size) = templates(dut, dir, size, hdrs)?;
    let (tx, rx) = ports(topo, ctx, dir);
    // What arrives: IPv6 after a translator in 4to6 (4in6 after a
    // softwire), IPv4 after one in 6to4; unchanged without a translator.
    let translates = !matches!(dut, Dut::Tester | Dut::Kernel);
    let rx_v6 = if translates { dir == Dir::V4ToV6 } else { sends_v6(dut, dir) };
    Ok(Streams { tx, rx, flows: Arc::new(flows), sent_size, rx_v6 })
}

fn trial(ctx: &Ctx, s: &Streams, rate: f64, ms: u64, learn: bool) -> Result<TrialResult> {
    let frames = ((rate * ms as f64 / 1000.0).round() as u64).max(1);
    trial_frames(ctx, s, rate, frames, learn)
}

fn trial_frames(ctx: &Ctx, s: &Streams, rate: f64, frames: u64, learn: bool) -> Result<TrialResult> {
    if threaded_napi(ctx) {
        // Placed before every trial: an XDP attach can renew the threads.
        cpu::pin_napi(&DUT_PORTS, &ctx.dut_cpus, ctx.a.realtime.then_some(cpu::RT_PRIORITY + 1))?;
    }
    let spec = TrialSpec {
        tx: s.tx.clone(),
        rx: s.rx.clone(),
        flows: s.flows.clone(),
        rate_pps: rate,
        frames,
        drain: Duration::from_millis(ctx.a.drain_ms),
        late: Duration::from_millis(ctx.a.late_ms),
        id: TRIAL_ID.fetch_add(1, Ordering::Relaxed),
        learn,
        batch: 32,
        rx_v6: s.rx_v6,
        rtp: false,
        per_flow: false,
        min_wake: None,
        overrun: None,
        realtime: ctx.a.realtime,
    };
    let r = ctx.tester.run_trial(&spec)?;
    if std::env::var_os("V6GATE_BENCH_DEBUG").is_some() {
        let o = &r.outcome;
        eprintln!(
            "  trial {}: rate {rate:.0} sent {} ({:.0}/s) received {} late {} p50 {} us p99 {} us",
            spec.id,
            o.sent,
            o.sent_pps,
            o.on_time,
            o.late,
            us(o.latency.p50_ns),
            us(o.latency.p99_ns)
        );
    }
    Ok(r)
}

/// How a trial at `rate` is judged: TESTER-BOUND when the tester fell
/// behind (its achieved rate or send lag, [`crate::tester::Outcome::tester_bound`]),
/// else a pass with no frame lost or late.
fn judge(r: &TrialResult, rate: f64, late_ns: u64) -> (Judged, Option<String>) {
    let why = r.outcome.tester_bound(rate, late_ns);
    let j = match &why {
        Some(_) => Judged::TesterBound,
        None => Judged::of(r.outcome.lost() == 0),
    };
    (j, why)
}

/// The tester's reach for one direction and frame size: where the other
/// DUTs' searches start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Reach {
    dir: Dir,
    size: usize,
    /// Frames/s.
    fps: f64,
    /// Whether `fps` is the tester's own limit (false: `--max-rate`, which
    /// the tester reached).
    tester: bool,
}

impl Reach {
    /// The reach the tester's own row measured: its zero-loss rate (its
    /// calibrated ceiling when it found none).
    pub(super) fn of(p: &Point) -> Option<Reach> {
        let fps = if p.throughput_fps > 0.0 { p.throughput_fps } else { p.ceiling_fps };
        (fps > 0.0).then_some(Reach { dir: p.dir, size: p.frame_size, fps, tester: !p.capped })
    }

    fn find(all: &[Reach], dir: Dir, size: usize) -> Option<Reach> {
        all.iter().find(|c| c.dir == dir && c.size == size).copied()
    }
}

/// The calibration of the tester's own row: one trial offering
/// `--max-rate`; what the tester achieved is its ceiling (`--max-rate`
/// itself when it kept up).
fn calibrate(ctx: &Ctx, s: &Streams, dir: Dir, size: usize) -> Result<Reach> {
    let max = ctx.a.max_rate;
    let sent = trial(ctx, s, max, ctx.a.trial_ms, false)?.outcome.sent_pps;
    let tester = sent < (1.0 - RATE_TOLERANCE) * max;
    eprintln!("bench xlat: tester {} {size}: calibration: offered {max:.0} fps, sent {sent:.0} fps", dir.name());
    Ok(Reach { dir, size, fps: if tester { sent } else { max }, tester })
}

/// A search's trials as the report lists them.
fn tried(f: &Found<Kept>) -> Vec<SearchTrial> {
    f.trials
        .iter()
        .map(|t| SearchTrial {
            rate_fps: t.load,
            passed: t.passed(),
            tester_bound: t.result.0.clone(),
            sent_fps: t.result.1,
            lost: t.result.2,
        })
        .collect()
}

/// What the report keeps of a search trial: why the tester fell behind
/// (if it did), the rate it achieved and the frames lost.
type Kept = (Option<String>, f64, u64);

/// Runs a search of `trial_at` (a trial at a rate) with the judgement of
/// [`judge`] (`late_ns`: the late budget); returns the search and whether
/// its figure is the tester's.
fn search(
    search: Search,
    reach: Reach,
    late_ns: u64,
    mut trial_at: impl FnMut(f64) -> Result<TrialResult>,
) -> Result<(Found<Kept>, bool)> {
    let found = search.run(|rate| {
        let r = trial_at(rate)?;
        let (j, why) = judge(&r, rate, late_ns);
        Ok((j, (why, r.outcome.sent_pps, r.outcome.lost())))
    })?;
    // The DUT carried the tester's whole reach: that is the tester's figure too.
    let bound = found.bound_by_tester() || (found.capped() && reach.tester);
    Ok((found, bound))
}

/// The report's note on a tester-bound figure: where the tester's reach
/// ended and why.
fn tester_bound_note(dir: Dir, size: usize, f: &Found<Kept>) -> String {
    let at = f.tester_bound.and_then(|r| f.trials.iter().find(|t| t.load == r));
    let why = match at.and_then(|t| Some((t.load, t.result.0.as_deref()?))) {
        Some((rate, w)) => format!("at {rate:.0} fps the tester {w}"),
        None => "no loss up to the tester's ceiling".to_string(),
    };
    format!("{} {size}: TESTER-BOUND ({why}): the figure is the tester's, not the DUT's", dir.name())
}

/// One point; `notes` gets [`tester_bound_note`]'s.
fn measure_point(
    ctx: &Ctx,
    s: &Streams,
    (dut, dir, size, reach): (Dut, Dir, usize, Option<Reach>),
    proc_: &mut Option<Proc>,
    notes: &mut Vec<String>,
) -> Result<Point> {
    let a = ctx.a;
    let alive = |p: &mut Option<Proc>| p.as_mut().map_or(Ok(()), Proc::alive);
    // Warm-up (RFC 2544 §23 learning frames): every flow once, slowly.
    trial(ctx, s, 20_000.0, (s.flows.len() as u64 * 2 * 1000 / 20_000).max(50), false)?;
    let reach = match reach {
        Some(r) => r,
        None => calibrate(ctx, s, dir, size)?,
    };
    let max = reach.fps.min(a.max_rate);
    let plan = Search { confirm: a.confirm, ..Search::rfc2544(max, a.resolution, a.max_trials) };
    let (found, tester_bound) = search(plan, reach, a.late_ms * 1_000_000, |rate| {
        alive(proc_)?;
        trial(ctx, s, rate, a.trial_ms, false)
    })?;
    alive(proc_)?;
    if tester_bound {
        notes.push(tester_bound_note(dir, size, &found));
    }
    let tput = found.best;
    let mut p = Point {
        dir,
        frame_size: size,
        sent_frame_size: s.sent_size,
        flows: s.flows.len(),
        throughput_fps: tput,
        throughput_mbps: tput * s.sent_size as f64 * 8.0 / 1e6,
        ceiling_fps: max,
        tester_bound,
        capped: found.capped() && !reach.tester,
        search: tried(&found),
        loss: vec![],
        latency: None,
        by_load: vec![],
    };
    if tput <= 0.0 {
        return Ok(p);
    }
    let at = |pct: u32| -> Result<LoadResult> {
        let rate = tput * f64::from(pct) / 100.0;
        let r = trial(ctx, s, rate, a.trial_ms, false)?;
        let (_, tester_bound) = judge(&r, rate, a.late_ms * 1_000_000);
        let o = r.outcome;
        Ok(LoadResult { load_pct: pct, rate_fps: rate, loss_ratio: o.loss_rate, latency: o.latency, tester_bound })
    };
    // The tester's own row: nothing above its ceiling can be offered.
    if dut != Dut::Tester {
        for &pct in &a.overload {
            p.loss.push(at(pct)?);
        }
    }
    let full = at(100)?;
    p.latency = Some(full.latency);
    for &pct in &a.loads {
        p.by_load.push(at(pct)?);
    }
    p.by_load.push(full);
    Ok(p)
}

/// NAT64 (and the DS-Lite AFTR's NAT44) 4to6 needs sessions: send every
/// flow 6to4 and learn the IPv4 address and port the DUT mapped it to.
/// How many times the 6to4 warm-up of a mapping DUT is tried before its
/// direction fails.
const WARM_UP_TRIES: usize = 3;

fn learn_nat(ctx: &Ctx, topo: &BenchTopo, dut: Dut, flow_ports: &[(u16, u16)]) -> Result<Vec<Option<(IpAddr, u16)>>> {
    let hdrs = headers(dut, Dir::V6ToV4, flow_ports, None);
    let s = streams(topo, ctx, dut, Dir::V6ToV4, 84, &hdrs)?;
    let ms = (flow_ports.len() as u64 * 3 * 1000 / 20_000).max(100);
    Ok(trial(ctx, &s, 20_000.0, ms, true)?.seen_src)
}

fn new_flow_streams(ctx: &Ctx, topo: &BenchTopo, tag: u16, n: usize) -> Result<Streams> {
    let per_addr = 64512usize;
    let ports = frame::rfc4814_ports(n.min(per_addr), 4814 + u64::from(tag));
    let hdrs: Vec<Header> = (0..n)
        .map(|i| {
            let (sp, dp) = ports[i % ports.len()];
            Header {
                dst_mac: D6_MAC,
                src_mac: T6_MAC,
                src: IpAddr::V6(host6(tag, 1 + (i / per_addr) as u16)),
                dst: IpAddr::V6(in_pool6(HOST4)),
                sport: sp,
                dport: dp,
            }
        })
        .collect();
    streams(topo, ctx, Dut::V6gateNat64, Dir::V6ToV4, 84, &hdrs)
}

/// Sends every template exactly once at `rate` (a trial of `flows` frames).
fn once_each(ctx: &Ctx, s: &Streams, rate: f64) -> Result<TrialResult> {
    trial_frames(ctx, s, rate, s.flows.len() as u64, false)
}

/// The highest rate of new sessions the tester's search tries.
const SETUP_MAX_FPS: f64 = 1_000_000.0;

fn measure_setup(ctx: &Ctx, dut: Dut, ceiling: &[Reach]) -> Result<Setup> {
    let a = ctx.a;
    let alive = |p: &mut Option<Proc>| p.as_mut().map_or(Ok(()), Proc::alive);
    // First-packet latency: new flows at each probe rate, then the same
    // flows again at that rate (established), so the two compare in the
    // same conditions; once per busy-poll window, each a fresh DUT.
    let windows: Vec<Option<String>> = if dut.name().starts_with("v6gate") {
        a.setup_busy_poll
            .iter()
            .map(|w| confval::duration::parse(w).map(|d| Some(confval::duration::format(d))))
            .collect::<Result<_, _>>()
            .context("--setup-busy-poll")?
    } else {
        vec![None]
    };
    if windows.is_empty() {
        bail!("--setup-busy-poll: no window to probe");
    }
    let mut probes = Vec::new();
    let mut setup = None;
    for w in windows {
        let topo = BenchTopo::create(&a.prefix, false)?;
        prepare_ports(ctx, dut, &topo)?;
        let extra: Vec<String> = w.iter().map(|w| format!("busy-poll = \"{w}\"")).collect();
        let mut proc_ = dut::start_with(ctx, dut, &topo, &extra)?;
        for (i, &rate) in a.setup_probe_rate.iter().enumerate() {
            let probe = new_flow_streams(ctx, &topo, 1 + i as u16, a.setup_flows)?;
            let first = once_each(ctx, &probe, rate)?;
            let again = once_each(ctx, &probe, rate)?;
            alive(&mut proc_)?;
            probes.push(SetupProbe {
                busy_poll: w.clone().unwrap_or_else(|| "-".into()),
                rate,
                first_packet: first.outcome.latency,
                established: again.outcome.latency,
            });
        }
        if setup.is_some() {
            continue;
        }
        // Setup rate, with the first window (the default daemon): each
        // trial sends fresh flows (a new IPv6 source prefix tag). It starts
        // at the tester's ceiling for 84-byte frames 6to4 (at most 1 M/s).
        let reach = Reach::find(ceiling, Dir::V6ToV4, 84).filter(|r| r.fps <= SETUP_MAX_FPS).unwrap_or(Reach {
            dir: Dir::V6ToV4,
            size: 84,
            fps: a.max_rate.min(SETUP_MAX_FPS),
            tester: false,
        });
        let mut tag = 100u16;
        let plan = Search::rfc2544(reach.fps.min(a.max_rate), a.resolution, a.max_trials);
        let (found, tester_bound) = search(plan, reach, a.late_ms * 1_000_000, |rate| {
            alive(&mut proc_)?;
            tag += 1;
            // At most 131,072 new sessions per trial (a shorter trial at
            // high rates): the templates stay small and a dozen trials stay
            // within the DUT's session table.
            let n = ((rate * a.trial_ms as f64 / 1000.0) as usize).clamp(1, 1 << 17);
            let s = new_flow_streams(ctx, &topo, tag, n)?;
            once_each(ctx, &s, rate)
        })?;
        setup = Some(Setup { setup_rate_fps: found.best, tester_bound, search: tried(&found), probes: vec![] });
    }
    let mut setup = setup.unwrap_or(Setup { setup_rate_fps: 0.0, tester_bound: false, search: vec![], probes: vec![] });
    setup.probes = probes;
    Ok(setup)
}

/// The counter of the XDP DUT's fast path for `dir`.
fn fast_function(dut: Dut, dir: Dir) -> &'static str {
    match (dut.stateful(), dir) {
        (false, Dir::V6ToV4) => "siit-6to4",
        (false, Dir::V4ToV6) => "siit-4to6",
        (true, Dir::V6ToV4) => "nat64-6to4",
        (true, Dir::V4ToV6) => "nat64-4to6",
    }
}

/// The DUT namespace's ports.
const DUT_PORTS: [&str; 2] = ["d6", "d4"];

/// Whether the DUT's ports run threaded NAPI on the DUT's CPUs
/// (`--threaded-napi`, either tester).
fn threaded_napi(ctx: &Ctx) -> bool {
    ctx.a.threaded_napi
}

/// Lets the tester prepare the DUT's ports it sends into (the XDP tester
/// turns on the veth NAPI its frames need), and with `--threaded-napi`
/// turns on GRO (a veth's NAPI without an XDP program) and threaded NAPI
/// there ([`cpu::threaded_napi`]; [`trial_frames`] places the threads):
/// the same for every DUT of the run.
fn prepare_ports(ctx: &Ctx, dut: Dut, topo: &BenchTopo) -> Result<()> {
    if dut == Dut::Tester {
        return Ok(());
    }
    for ifname in DUT_PORTS {
        ctx.tester.prepare_port(&Port { ns: topo.dut.name().to_owned(), ifname: ifname.into(), cpus: vec![] })?;
        if threaded_napi(ctx) {
            topo.dut.run(|| {
                xdp::sys::set_gro(ifname, true).with_context(|| format!("GRO on {ifname} (NAPI for threaded NAPI)"))
            })?;
            cpu::threaded_napi(&topo.dut, ifname)?;
        }
    }
    Ok(())
}

/// Every measurement of one DUT; an error ends the DUT with `error: ...`.
pub(super) fn bench_dut(ctx: &Ctx, dut: Dut, ceiling: &[Reach]) -> DutReport {
    let a = ctx.a;
    let mut rep = DutReport { dut: dut.name(), status: "ok".into(), points: vec![], setup: None, notes: vec![] };
    if threaded_napi(ctx) && dut != Dut::Tester {
        rep.notes.push(format!(
            "threaded NAPI: the receive work of d6/d4 (XDP program, forwarding, the way into a TUN) ran in kernel \
             threads on the DUT's CPU(s) {}, not in the softirq of the tester's sending CPU",
            ctx.a.dut_cpus
        ));
    }
    let res = (|| -> Result<()> {
        let flow_ports = flow_ports(dut, a.flows);
        let dirs: &[Dir] = if a.setup_only { &[] } else { &a.dir };
        for &dir in dirs {
            // A fresh topology and DUT per direction (NAT64 state from the
            // other direction does not carry over).
            let topo = BenchTopo::create(&a.prefix, dut == Dut::Tester)?;
            prepare_ports(ctx, dut, &topo)?;
            let mut proc_ = dut::start(ctx, dut, &topo)?;
            // NAT64 and DS-Lite 4to6 need the mappings first; the XDP DUT
            // measures established flows both ways: every session created
            // (6to4) and mirrored into the fast path before the search.
            let nat = if dut.maps() && (dir == Dir::V4ToV6 || dut.xdp()) {
                // A DUT whose engine is not taking packets yet when the
                // warm-up starts (seen once for the XDP DS-Lite AFTR's
                // fresh 4to6 DUT) creates nothing: the warm-up is tried
                // again, at most WARM_UP_TRIES times, and the retry noted.
                let mut m = learn_nat(ctx, &topo, dut, &flow_ports)?;
                let mut tries = 1;
                while m.iter().all(Option::is_none) && tries < WARM_UP_TRIES {
                    std::thread::sleep(Duration::from_millis(500));
                    m = learn_nat(ctx, &topo, dut, &flow_ports)?;
                    tries += 1;
                }
                let learned = m.iter().flatten().count();
                if learned == 0 {
                    bail!("no mapping was created by the 6to4 warm-up ({tries} tries)");
                }
                if tries > 1 {
                    rep.notes
                        .push(format!("{}: the 6to4 warm-up created mappings only at its try {tries}", dir.name()));
                }
                if let Some(p) = proc_.as_mut().filter(|_| dut.xdp()) {
                    dut::wait_xdp(ctx, &topo.dut, p, &format!("carrying the {learned} sessions"), |x| {
                        x["nat64"]["sessions_mirrored"].as_u64().is_some_and(|n| n >= learned as u64)
                    })?;
                }
                (dir == Dir::V4ToV6).then_some(m)
            } else {
                None
            };
            let hdrs = headers(dut, dir, &flow_ports, nat.as_deref());
            for &size in &a.sizes {
                let s = streams(&topo, ctx, dut, dir, size, &hdrs)?;
                // The tester's own row calibrates; the others start at its reach.
                let reach = Reach::find(ceiling, dir, size).filter(|_| dut != Dut::Tester);
                let n = rep.notes.len();
                let p = measure_point(ctx, &s, (dut, dir, size, reach), &mut proc_, &mut rep.notes)?;
                for note in &rep.notes[n..] {
                    eprintln!("bench xlat: {} {note}", dut.name());
                }
                eprintln!(
                    "bench xlat: {} {} {size}: {:.0} fps{}, p50 {} us",
                    dut.name(),
                    dir.name(),
                    p.throughput_fps,
                    if p.tester_bound { " (TESTER-BOUND)" } else { "" },
                    p.latency.map_or(0, |l| l.p50_ns / 1000)
                );
                rep.points.push(p);
            }
            if matches!(dut, Dut::V6gateXdpLw4o6 | Dut::V6gateXdpDslite) {
                let note = format!("{}: {}", dir.name(), dut::softwire_xdp_note(ctx));
                eprintln!("bench xlat: {} {note}", dut.name());
                rep.notes.push(note);
            }
            if let Some(p) = proc_.as_mut().filter(|_| dut.xdp()) {
                let x = dut::wait_xdp(ctx, &topo.dut, p, "answering", |_| true)?;
                let note = format!("{}: {}", dir.name(), FastPath::of(&x["counters"], fast_function(dut, dir)));
                eprintln!("bench xlat: {} {note}", dut.name());
                rep.notes.push(note);
            }
        }
        // The first packet of a session always takes the slow path: the
        // XDP DUT's session setup is v6gate-nat64's.
        if dut.stateful() && !dut.xdp() {
            rep.setup = Some(measure_setup(ctx, dut, ceiling)?);
        }
        Ok(())
    })();
    if let Err(e) = res {
        rep.status = format!("error: {e:#}");
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_per_dut_and_direction() {
        let ports = [(40000u16, 53u16), (40001, 54)];
        let h = headers(Dut::TaygaSiit, Dir::V6ToV4, &ports, None);
        assert_eq!(h[0].dst.to_string(), "2001:db8:64::cb00:710a");
        assert_eq!((h[1].sport, h[1].dport), (40001, 54));
        let h = headers(Dut::V6gateSiit, Dir::V4ToV6, &ports, None);
        assert_eq!((h[0].src, h[0].dst), (IpAddr::V4(HOST4), IpAddr::V4(HOST6_AS_V4)));
        assert_eq!((h[0].sport, h[0].dport), (53, 40000), "replies go back to the flow's source port");
        let k = headers(Dut::Kernel, Dir::V6ToV4, &ports, None);
        assert!(k[0].src.is_ipv4() && k[0].dst.is_ipv4());
        // NAT64 4to6: only flows with a learned mapping, to the mapped address and port.
        let m = [None, Some((IpAddr::V4("203.0.113.129".parse().unwrap()), 2000))];
        let n = headers(Dut::V6gateNat64, Dir::V4ToV6, &ports, Some(&m));
        assert_eq!(n.len(), 1);
        assert_eq!((n[0].dst.to_string().as_str(), n[0].sport, n[0].dport), ("203.0.113.129", 54, 2000));
        assert_eq!(host6(7, 1).to_string(), "2001:db8:46::7:1");
    }

    #[test]
    fn softwire_headers_and_frames() {
        let ports = [(40000u16, 53u16), (40001, 54)];
        // lw4o6 6to4: the lwB4's address and port inside 4in6 from the B4 to the lwAFTR.
        let h = headers(Dut::V6gateLw4o6, Dir::V6ToV4, &ports, None);
        assert_eq!((h[0].src, h[0].dst), (IpAddr::V4(HOST6_AS_V4), IpAddr::V4(HOST4)));
        assert_eq!((h[0].dst_mac, h[0].src_mac), (D6_MAC, T6_MAC), "sent on the IPv6 link");
        let (t, size) = templates(Dut::V6gateLw4o6, Dir::V6ToV4, 84, &h).unwrap();
        assert_eq!((size, t[0].len()), (104, 100), "the same payload as an 84-byte IPv6 frame");
        let mut b = vec![0u8; t[1].len()];
        t[1].stamp(&mut b, 5, 6, 1, frame::MAGIC_HI | 2);
        let rx = frame::decode(&b).unwrap();
        assert_eq!(rx.tunnel, Some(Tunnel6 { src: HOST6, dst: AFTR6 }));
        assert_eq!((rx.src, rx.sport, rx.dport), (IpAddr::V4(HOST6_AS_V4), 40001, 54));
        // lw4o6 4to6: plain IPv4 to the lwB4's address and port.
        let h = headers(Dut::V6gateLw4o6, Dir::V4ToV6, &ports, None);
        assert_eq!((h[0].dst, h[0].sport, h[0].dport), (IpAddr::V4(HOST6_AS_V4), 53, 40000));
        let (t, size) = templates(Dut::V6gateLw4o6, Dir::V4ToV6, 84, &h).unwrap();
        assert_eq!((size, frame::decode(&stamped(&t[0])).unwrap().tunnel), (64, None));
        // DS-Lite 6to4: the host behind the B4; 4to6 only to learned mappings.
        let h = headers(Dut::V6gateDslite, Dir::V6ToV4, &ports, None);
        assert_eq!(h[0].src, IpAddr::V4(DSLITE_HOST4));
        assert_eq!(templates(Dut::V6gateDslite, Dir::V6ToV4, 1518, &h).unwrap().1, 1538);
        let m = [Some((IpAddr::V4("203.0.113.130".parse().unwrap()), 3000)), None];
        let n = headers(Dut::V6gateDslite, Dir::V4ToV6, &ports, Some(&m));
        assert_eq!((n.len(), n[0].dport), (1, 3000));
        assert!(headers(Dut::V6gateDslite, Dir::V4ToV6, &ports, None).is_empty());
        // Other DUTs send no 4in6.
        let h = headers(Dut::V6gateSiit, Dir::V6ToV4, &ports, None);
        let (t, size) = templates(Dut::V6gateSiit, Dir::V6ToV4, 84, &h).unwrap();
        assert_eq!((size, frame::decode(&stamped(&t[0])).unwrap().tunnel), (84, None));
        assert!(tunnel(Dut::Kernel, Dir::V6ToV4).is_none() && tunnel(Dut::V6gateDslite, Dir::V4ToV6).is_none());
    }

    fn stamped(t: &Template) -> Vec<u8> {
        let mut b = vec![0u8; t.len()];
        t.stamp(&mut b, 1, 0, 0, frame::MAGIC_HI | 1);
        b
    }

    #[test]
    fn lw4o6_flows_use_the_binding_s_ports() {
        // The lwAFTR's own binding table, loaded from the bench's file.
        let table = softwire::binding::BindingTable::parse(&dut::lw4o6_bindings(), LW_PSID_OFFSET).unwrap();
        let p = flow_ports(Dut::V6gateLw4o6, 1024);
        assert_eq!(p.len(), 1024);
        for &(sp, dp) in &p {
            assert_eq!(table.lookup4(HOST6_AS_V4, sp), Some(&HOST6), "port {sp} is the lwB4's");
            assert!((1..=49151).contains(&dp));
        }
        assert_eq!(table.lookup4(HOST6_AS_V4, 1024), None, "PSID 0's port is nobody's");
        let all = lw4o6_ports(100_000);
        assert_eq!(all.len(), 4032, "every port of the set, once");
        let mut s: Vec<u16> = all.iter().map(|x| x.0).collect();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), 4032);
        assert_eq!(flow_ports(Dut::V6gateSiit, 10), frame::rfc4814_ports(10, 4814));
        assert_eq!(p, lw4o6_ports(1024), "reproducible");
    }

    /// A fake trial: a tester that sends at most `reach` frames/s and a
    /// DUT that loses frames above `carries`.
    fn fake(reach: f64, carries: f64) -> impl FnMut(f64) -> Result<TrialResult> {
        move |rate| {
            let lost = u64::from(rate > carries);
            let outcome = crate::tester::Outcome { sent_pps: rate.min(reach), missing: lost, ..Default::default() };
            Ok(TrialResult { outcome, ..Default::default() })
        }
    }

    #[test]
    fn a_slow_tester_gives_a_nonzero_tester_bound_figure() {
        // The tester achieved 260 k in its calibration and sends 250 k at
        // most: no trial above that passes or fails the DUT.
        let reach = Reach { dir: Dir::V6ToV4, size: 84, fps: 260_000.0, tester: true };
        let plan = Search { confirm: 1, ..Search::rfc2544(260_000.0, 0.05, 8) };
        let (f, bound) = search(plan, reach, 10_000_000, fake(250_000.0, 1e9)).unwrap();
        // Within the tolerance of what the tester sent, never above it.
        assert!(f.best >= 240_000.0 && f.best <= 250_000.0 / (1.0 - RATE_TOLERANCE), "{}", f.best);
        assert!(bound && f.first_failure.is_none());
        let listed = tried(&f);
        assert_eq!(listed.len(), f.trials.len());
        for t in &listed {
            assert_eq!(t.tester_bound.is_some(), 250_000.0 < (1.0 - RATE_TOLERANCE) * t.rate_fps, "{t:?}");
            assert!(!(t.passed && t.tester_bound.is_some()), "a tester-bound trial never passes: {t:?}");
        }
        let n = tester_bound_note(Dir::V6ToV4, 84, &f);
        assert!(
            n.starts_with("6to4 84: TESTER-BOUND (at 260000 fps the tester sent 250000 of 260000 packets/s offered"),
            "{n}"
        );
        // A DUT that loses below the tester's reach: its own figure.
        let (f, bound) = search(plan, reach, 10_000_000, fake(250_000.0, 100_000.0)).unwrap();
        assert!(!bound && f.best <= 100_000.0 && f.best > 90_000.0, "{}", f.best);
        // The DUT carries the whole reach: the tester's figure; at a
        // --max-rate the tester reached, not the tester's.
        let (f, bound) = search(plan, reach, 10_000_000, fake(1e9, 1e9)).unwrap();
        assert!(bound && f.capped() && f.trials.len() == 1);
        let (_, bound) = search(plan, Reach { tester: false, ..reach }, 10_000_000, fake(1e9, 1e9)).unwrap();
        assert!(!bound, "bounded by --max-rate, not by the tester");
        assert_eq!(
            tester_bound_note(Dir::V4ToV6, 84, &f),
            "4to6 84: TESTER-BOUND (no loss up to the tester's ceiling): the figure is the tester's, not the DUT's"
        );
    }

    #[test]
    fn the_tester_s_row_gives_the_reach() {
        let mut p = super::super::report::tests::point(Dir::V4ToV6, 0.0);
        p.ceiling_fps = 250_000.0;
        assert_eq!(Reach::of(&p), Some(Reach { dir: Dir::V4ToV6, size: 84, fps: 250_000.0, tester: true }));
        p.throughput_fps = 240_000.0;
        p.capped = true;
        assert_eq!(Reach::of(&p).map(|r| (r.fps, r.tester)), Some((240_000.0, false)));
        p.ceiling_fps = 0.0;
        p.throughput_fps = 0.0;
        assert_eq!(Reach::of(&p), None);
        assert_eq!(
            Reach::find(&[Reach::of(&super::super::report::tests::point(Dir::V6ToV4, 5.0)).unwrap()], Dir::V6ToV4, 84)
                .map(|r| r.fps),
            Some(5.0)
        );
    }

    #[test]
    fn fast_function_per_dut_and_direction() {
        assert_eq!(fast_function(Dut::V6gateXdpNat64, Dir::V6ToV4), "nat64-6to4");
        assert_eq!(fast_function(Dut::V6gateXdpSiit, Dir::V4ToV6), "siit-4to6");
    }
}
