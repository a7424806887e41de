//! `v6gate bench trgw`: the NICI TrGW experiment (Lin 2008, Figures 8 and
//! 9) in network namespaces. N concurrent G.711 calls (a 12-byte RTP
//! header and a 160-byte payload every 20 ms) are set up through the relay with the
//! ng protocol (offer from the IPv6 side, answer from the IPv4 side), then
//! every stream sends `--packets` probes IPv6->IPv4, IPv4->IPv6 or both.
//! The receivers count loss (missing, or later than the 20 ms jitter
//! budget) and latency from the send time in each payload. The same tester
//! runs against every relay (v6gate, rtpengine in userspace mode) and
//! against kernel IPv6 forwarding (no relay), which is the tester's own
//! ceiling. Output: JSON, a Markdown table, SVG plots like Figures 8 and 9.
//!
//! Topology: [`lab::topo::RelayTopo`] (one trial = a fresh relay process
//! in the same namespaces).

mod relay;
mod report;
pub mod xdp;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Parser, ValueEnum};
use lab::netns::Netns;
use lab::topo::relay_addr::*;
use lab::topo::RelayTopo;
use serde::Serialize;

use crate::harness::fastpath::{ctl_xdp, FastPath};
use crate::harness::guard::{Proc, RunGuard};
use crate::harness::latency::us;
use crate::harness::search::{Judged, Start};
use crate::harness::{cpu, peers};
use crate::ng;
use crate::report::Outputs;
use crate::tester::udp::{self, Load, Stream};
use crate::tester::{probe, FlowLoss, Outcome};

pub use relay::{rtpengine_args, sdp, v6gate_config, wait_for_ng, with_trgw_opts};
pub use report::{markdown, zero_loss};

/// Media direction of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// IPv6 UA -> relay -> IPv4 UA.
    V6v4,
    /// IPv4 UA -> relay -> IPv6 UA.
    V4v6,
    /// Both at once (2 streams per call).
    Both,
}

impl Direction {
    /// "IPv6->IPv4", ...
    pub fn label(self) -> &'static str {
        match self {
            Direction::V6v4 => "IPv6->IPv4",
            Direction::V4v6 => "IPv4->IPv6",
            Direction::Both => "both directions",
        }
    }
    /// "v6v4", ... (file names).
    pub fn key(self) -> &'static str {
        match self {
            Direction::V6v4 => "v6v4",
            Direction::V4v6 => "v4v6",
            Direction::Both => "both",
        }
    }
}

/// A relay under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelayKind {
    /// `v6gate trgw` (userspace).
    V6gate,
    /// `v6gate run` with `[trgw]` and the XDP fast path (`[xdp]`, native
    /// mode) on the relay's interfaces: the first packets of each stream
    /// latch on the slow path, later ones are relayed in XDP.
    V6gateXdp,
    /// rtpengine in userspace mode.
    Rtpengine,
}

impl RelayKind {
    /// The relay's name in the reports.
    pub fn name(self) -> &'static str {
        match self {
            RelayKind::V6gate => "v6gate",
            RelayKind::V6gateXdp => "v6gate-xdp",
            RelayKind::Rtpengine => "rtpengine",
        }
    }
}

/// The media tester of `bench trgw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TesterKind {
    /// UDP sockets (`sendmmsg`/`recvmmsg`): every direction, including
    /// `both`; its own ceiling is a few thousand calls.
    #[default]
    Udp,
    /// RTP frames from the XDP generator (`BPF_PROG_RUN` live frames),
    /// counted by an XDP receiver: hundreds of thousands of packets/s,
    /// one direction per trial (v6v4, v4v6). Needs native XDP on veth.
    Xdp,
}

/// `v6gate bench trgw`: G.711 calls through a media relay (the NICI TrGW test).
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// Output directory for results.json, results.md and the SVG plots.
    #[arg(long, default_value = "bench-results/trgw")]
    pub out: PathBuf,
    /// Relays to measure, in this order. The XDP relay comes first by
    /// default: with `--tester xdp` an overloaded userspace relay leaves
    /// the generator slow for minutes after (docs/bench-trgw.md), which
    /// must not bound the rows after it.
    #[arg(long, value_delimiter = ',', default_value = "v6gate-xdp,v6gate,rtpengine")]
    pub relays: Vec<RelayKind>,
    /// The v6gate binary (default: this executable).
    #[arg(long, alias = "v6gate")]
    pub v6gate_bin: Option<PathBuf>,
    /// The rtpengine binary; skipped with a note when it cannot be found.
    #[arg(long, default_value = "rtpengine")]
    pub rtpengine_bin: PathBuf,
    /// Media directions. `--tester xdp`: v6v4,v4v6 (one direction per
    /// trial).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "v6v4,v4v6,both",
        default_value_if("tester", "xdp", "v6v4,v4v6")
    )]
    pub directions: Vec<Direction>,
    /// Numbers of concurrent calls for the curves (Figures 8 and 9).
    /// `--quick`: 50,200; `--tester xdp`: 1000,5000,10000,15000.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,250,500,1000,1500,2000",
        default_value_ifs([("quick", "true", Some("50,200")), ("tester", "xdp", Some("1000,5000,10000,15000"))])
    )]
    pub calls: Vec<u32>,
    /// Packets per stream (the paper sends 10,000; see --full). `--quick`: 100.
    #[arg(
        long,
        default_value_t = 500,
        default_value_ifs([("full", "true", Some("10000")), ("quick", "true", Some("100"))])
    )]
    pub packets: u32,
    /// Send the paper's 10,000 packets per stream (200 s per trial).
    #[arg(long)]
    pub full: bool,
    /// Packets per stream in the zero-loss search trials (default:
    /// --packets; `--quick`: 50).
    #[arg(long, default_value_if("quick", "true", "50"))]
    pub search_packets: Option<u32>,
    /// Skip the search for the maximum zero-loss number of calls.
    #[arg(long)]
    pub no_search: bool,
    /// Directions searched (default: v6v4 only, the issue's bar).
    #[arg(long, value_delimiter = ',', default_value = "v6v4")]
    pub search_directions: Vec<Direction>,
    /// First number of calls of the search, doubled until a trial does not
    /// pass, then bisected. Default: with the socket tester, the search
    /// starts at the tester's measured ceiling and bisects below it (the
    /// kernel row first offers `--max-calls` in one calibration trial; what
    /// the tester achieved there, in calls, is its ceiling); with `--tester
    /// xdp`, doubling from 1000.
    #[arg(long)]
    pub search_start: Option<u32>,
    /// In the search, a failing trial is run again up to this many times
    /// and fails only if every run fails (a one-off hiccup of a shared
    /// machine must not halve the result). Every run is reported.
    #[arg(long, default_value_t = 1)]
    pub confirm: u32,
    /// Upper bound of every search (`--tester xdp`: 32000).
    #[arg(long, default_value_t = 8000, default_value_if("tester", "xdp", "32000"))]
    pub max_calls: u32,
    /// Skip the tester-ceiling measurement (kernel forwarding, no relay).
    #[arg(long)]
    pub no_ceiling: bool,
    /// CPUs of the tester threads (taskset list, e.g. "0").
    #[arg(long, default_value = "0")]
    pub tester_cpus: String,
    /// CPUs of the relay under test (taskset list, e.g. "1" or "0-1").
    #[arg(long, default_value = "1")]
    pub relay_cpus: String,
    /// Worker threads asked of each relay (default: number of relay CPUs).
    #[arg(long)]
    pub relay_threads: Option<usize>,
    /// UDP sockets per UA side (calls are spread over them round-robin).
    #[arg(long, default_value_t = 16)]
    pub sockets: usize,
    /// Messages per sendmmsg call.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Jitter budget in milliseconds: a later packet counts as lost.
    #[arg(long, default_value_t = 20)]
    pub budget_ms: u64,
    /// Run the relay and the tester threads with SCHED_FIFO priority 10
    /// (relay under `chrt -f 10`, the same for every relay), so that other
    /// work on a shared machine cannot take their CPUs. The kernel keeps 5 %
    /// for everything else (sched_rt_runtime_us).
    #[arg(long)]
    pub realtime: bool,
    /// Keep the relays' logs in the output directory.
    #[arg(long)]
    pub keep_logs: bool,
    /// Smoke run (under 5 minutes on a 2-CPU machine): curves at 50 and
    /// 200 calls of 100 packets per stream, searches of 50 packets per
    /// stream. Options given on the command line keep their values.
    #[arg(long)]
    pub quick: bool,
    /// The media tester: `udp` (sockets) or `xdp` (RTP frames generated
    /// and counted in XDP, for relays beyond the socket tester's few
    /// thousand calls). With `xdp` and the defaults left alone: directions
    /// v6v4,v4v6, calls 1000,5000,10000,15000, search from 1000 up to
    /// 32000 calls.
    #[arg(long, value_enum, default_value_t = TesterKind::Udp)]
    pub tester: TesterKind,
    /// With `--tester xdp`: threaded NAPI on the relay's ports `r6`/`r4`,
    /// their kernel threads on the relay CPUs (SCHED_FIFO above the relay
    /// with `--realtime`), so that a userspace relay's receive path is
    /// charged to the relay's CPU instead of the generator's softirq.
    /// EXPERIMENTAL: in its first quiet run the kernel-forwarding ceiling
    /// fell from 17,500 to under 1,125 calls (the generator fell behind),
    /// so it is off by default (docs/bench-trgw.md).
    #[arg(long)]
    pub threaded_napi: bool,
    /// With `--tester xdp`: Receive Packet Steering on the relay's ports
    /// `r6`/`r4` to the relay CPUs, so that the receive work after the
    /// veth's NAPI poll (kernel forwarding, a userspace relay's UDP socket
    /// delivery) runs on the relay's CPU instead of in the generator's
    /// softirq; the NAPI poll itself (GRO, the XDP relay's program) stays
    /// with the generator. EXPERIMENTAL: in its first quiet run the
    /// generator fell behind at once (ceiling 5,000 / 23 calls), so it is
    /// off by default (docs/bench-trgw.md).
    #[arg(long, conflicts_with = "threaded_napi")]
    pub rps: bool,
    /// An extra `key=value` for the `[trgw]` section of both v6gate
    /// relays' configuration (repeatable; the value is TOML, a bare word
    /// is taken as a string), e.g. `--v6gate-trgw-opt sockets=shared`.
    /// rtpengine is not affected.
    #[arg(long = "v6gate-trgw-opt", value_name = "KEY=VALUE")]
    pub v6gate_trgw_opts: Vec<String>,
}

/// One trial's result.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub calls: u32,
    pub packets: u32,
    pub passed: bool,
    /// Seconds spent setting up the calls over ng (not part of the media test).
    pub setup_s: f64,
    /// CPU seconds the relay used per wall second during the media phase.
    pub relay_cpu: Option<f64>,
    /// The XDP relay: packets relayed on the fast path and passed to the
    /// slow path during the trial (the first packets of each stream latch
    /// on the slow path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPath>,
    /// The XDP tester: loss per media stream (from its receiver's bitmap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_loss: Option<FlowLoss>,
    /// Packets the tester did not send in the trial's time (it fell
    /// behind by more than a budget: tester-bound).
    pub unsent: u64,
    /// Why the tester fell behind, when it did (TESTER-BOUND: unsent
    /// packets, a send rate short of the offered one, or send lag above
    /// the jitter budget). Such a trial is neither a pass nor a failure of
    /// the relay: the relay was not offered the load.
    pub tester_bound: Option<String>,
    /// Why no media ran: the relay could not set up the calls (e.g. out
    /// of descriptors or ports). The trial counts as failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Result of a search for the maximum zero-loss number of calls.
#[derive(Debug, Clone, Serialize)]
pub struct Search {
    /// The largest number of calls that passed (0 when none did).
    pub max_zero_loss: u32,
    /// The smallest above it the device failed, when one did.
    pub first_failure: Option<u32>,
    /// No failure up to the bound, which the tester could offer (the
    /// relay may do more).
    pub capped_at: Option<u32>,
    /// The figure is the tester's bound, not the device's (TESTER-BOUND):
    /// the search ended below a load the tester could not offer, or the
    /// device carried the tester's whole measured ceiling.
    pub tester_bound: bool,
    /// Where the search started (calls).
    pub started_at: u32,
    pub trials: Vec<Trial>,
}

/// The tester's ceiling measured before the kernel row's search.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// What the tester sent, in calls (`--max-calls` when it kept up).
    pub ceiling_calls: u32,
    /// Whether the tester fell behind at `--max-calls` (the ceiling is
    /// its own limit).
    pub tester_bound: bool,
    /// The calibration trial (offering `--max-calls`).
    pub trial: Trial,
}

/// One device in one direction.
#[derive(Debug, Clone, Serialize)]
pub struct DirResult {
    pub direction: Direction,
    /// The curve (the report's lines come from these trials).
    pub points: Vec<Trial>,
    pub search: Option<Search>,
    /// The kernel row: the tester's ceiling, where its search started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    pub error: Option<String>,
}

/// One device.
#[derive(Debug, Clone, Serialize)]
pub struct Device {
    pub name: String,
    pub version: Option<String>,
    pub skipped: Option<String>,
    pub directions: Vec<DirResult>,
}

/// Everything a run produces (results.json).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub test: &'static str,
    pub frame_bytes: FrameBytes,
    pub packets: u32,
    pub search_packets: u32,
    pub interval_ms: u64,
    pub budget_ms: u64,
    pub tester_cpus: String,
    pub relay_cpus: String,
    pub relay_threads: usize,
    pub realtime: bool,
    pub tester: TesterKind,
    pub sockets_per_side: usize,
    pub batch: usize,
    pub online_cpus: usize,
    pub kernel: String,
    /// Kernel IPv6 forwarding with no relay: the tester's own ceiling.
    pub ceiling: Option<Device>,
    pub relays: Vec<Device>,
    pub notes: Vec<String>,
    /// The run's namespace name prefix (`v6gate-bt-PID-N`; all removed at
    /// the end).
    #[serde(skip)]
    pub namespace_prefix: String,
}

/// Ethernet frame sizes of the probes (the paper's 214 and 234 bytes).
#[derive(Debug, Clone, Serialize)]
pub struct FrameBytes {
    pub ipv4: usize,
    pub ipv6: usize,
}

fn ua_sockets(ns: &Netns, ip: IpAddr, k: usize) -> Result<Vec<UdpSocket>> {
    ns.run(|| {
        (0..k)
            .map(|_| {
                let s =
                    UdpSocket::bind(SocketAddr::new(ip, 0)).with_context(|| format!("binding a UA socket on {ip}"))?;
                udp::big_buffers(&s, 8 << 20);
                Ok(s)
            })
            .collect()
    })
}

/// What every part of a run needs.
struct Ctx<'a> {
    args: &'a Args,
    tester_cpus: Vec<usize>,
    relay_cpus: Vec<usize>,
    relay_threads: usize,
    work: &'a Path,
    v6gate_bin: PathBuf,
}

fn streams_for(dir: Direction, dst: &[(SocketAddr, SocketAddr)], k: usize) -> Vec<Stream> {
    let mut v = Vec::new();
    for (i, (to6, to4)) in dst.iter().enumerate() {
        if dir != Direction::V4v6 {
            v.push(Stream { tx_side: 0, tx_sock: i % k, dst: *to6 });
        }
        if dir != Direction::V6v4 {
            v.push(Stream { tx_side: 1, tx_sock: i % k, dst: *to4 });
        }
    }
    v
}

fn local_ports(s: &[UdpSocket]) -> Result<Vec<u16>> {
    s.iter().map(|s| Ok(s.local_addr()?.port())).collect()
}

/// The device under test: a relay (its kind and binary) or, with `None`,
/// kernel forwarding (the tester's ceiling).
type Relay<'a> = Option<(RelayKind, &'a Path)>;

/// One trial: fresh relay (or kernel forwarding), `n` calls, media, result.
fn trial(ctx: &Ctx, topo: &RelayTopo, relay: Relay, dir: Direction, n: u32, packets: u32) -> Result<Trial> {
    let k = ctx.args.sockets.clamp(1, n.max(1) as usize);
    let ua4_ip = if topo.kernel { IpAddr::V6(UA4_V6) } else { IpAddr::V4(UA4) };
    let s6 = ua_sockets(&topo.ua6, IpAddr::V6(UA6), k)?;
    let s4 = ua_sockets(&topo.ua4, ua4_ip, k)?;
    let (p6, p4) = (local_ports(&s6)?, local_ports(&s4)?);
    let setup_start = Instant::now();
    let (mut proc_, dst) = match relay {
        Some((kind, bin)) => {
            let mut p = relay::start(ctx, topo, kind, bin, &format!("{}-{n}", dir.key()))?;
            let mut client = topo.relay.run(|| ng::Client::connect(NG.parse()?))?;
            let dst = match relay::setup_calls(&mut client, n, &p6, &p4) {
                Ok(d) => d,
                // A relay that refuses calls but runs on: a failed trial
                // with a note (the search goes on below), not an error.
                Err(e) if p.alive().is_ok() => {
                    let note = format!("the relay could not set up {n} calls: {e:#}");
                    return Ok(Trial::not_run(n, packets, setup_start.elapsed().as_secs_f64(), note));
                }
                Err(e) => return Err(anyhow!("{e:#}\nrelay log:\n{}", p.log_tail())),
            };
            p.alive()?;
            (Some(p), dst)
        }
        None => {
            let dst = (0..n as usize)
                .map(|i| (SocketAddr::new(ua4_ip, p4[i % k]), SocketAddr::new(IpAddr::V6(UA6), p6[i % k])))
                .collect();
            (None, dst)
        }
    };
    let setup_s = setup_start.elapsed().as_secs_f64();
    let load = Load {
        streams: streams_for(dir, &dst, k),
        packets,
        interval_ns: 20_000_000,
        budget_ns: ctx.args.budget_ms * 1_000_000,
        batch: ctx.args.batch,
        cpus: ctx.tester_cpus.clone(),
        realtime: ctx.args.realtime,
    };
    let cpu0 = proc_.as_ref().and_then(Proc::cpu_seconds);
    let t = Instant::now();
    let (outcome, stream_loss) = match ctx.args.tester {
        TesterKind::Udp => (udp::run(&[s6, s4], &load)?, None),
        TesterKind::Xdp => {
            let (o, l) = xdp::media(&xdp::Media {
                topo,
                dir,
                dst: &dst,
                socks: [&s6, &s4],
                packets,
                budget_ms: ctx.args.budget_ms,
                tester_cpus: &ctx.tester_cpus,
                napi_cpus: (xdp::Ingress::of(ctx.args) == xdp::Ingress::Threaded).then_some(ctx.relay_cpus.as_slice()),
                xdp_relay: matches!(relay, Some((RelayKind::V6gateXdp, _))),
                realtime: ctx.args.realtime,
            })?;
            (o, Some(l))
        }
    };
    let wall = t.elapsed().as_secs_f64();
    let cpu1 = proc_.as_ref().and_then(Proc::cpu_seconds);
    let relay_cpu = cpu0.zip(cpu1).map(|(a, b)| (b - a).max(0.0) / wall);
    if let Some(p) = &mut proc_ {
        p.alive().context("during the trial")?;
    }
    let fast_path = match relay {
        Some((RelayKind::V6gateXdp, bin)) => {
            let x = ctl_xdp(&topo.relay, &bin.to_string_lossy(), relay::XDP_ADMIN)?;
            Some(FastPath::of(&x["counters"], "trgw"))
        }
        _ => None,
    };
    let unsent = (outcome.streams as u64 * u64::from(packets)).saturating_sub(outcome.sent);
    let tester_bound = tester_bound(&outcome, unsent, ctx.args.budget_ms * 1_000_000);
    Ok(Trial {
        calls: n,
        packets,
        passed: outcome.passes() && tester_bound.is_none(),
        setup_s,
        relay_cpu,
        fast_path,
        stream_loss,
        unsent,
        tester_bound,
        note: None,
        outcome,
    })
}

/// Packets per second one stream offers (G.711: one every 20 ms).
const STREAM_PPS: f64 = 50.0;

/// Why the tester fell behind in a trial (TESTER-BOUND), if it did:
/// `unsent` packets never sent in the trial's time, or the outcome's
/// rate shortfall or send lag against the `budget_ns` jitter budget
/// ([`Outcome::tester_bound`]).
fn tester_bound(o: &Outcome, unsent: u64, budget_ns: u64) -> Option<String> {
    let lagged = o.tester_bound(o.streams as f64 * STREAM_PPS, budget_ns);
    let unsent = (unsent > 0).then(|| format!("{unsent} of {} packets not sent in the trial's time", unsent + o.sent));
    match (unsent, lagged) {
        (Some(u), Some(l)) => Some(format!("{u}; {l}")),
        (u, l) => u.or(l),
    }
}

impl Trial {
    /// A trial whose media did not run (`note` says why): failed.
    fn not_run(calls: u32, packets: u32, setup_s: f64, note: String) -> Trial {
        Trial {
            calls,
            packets,
            passed: false,
            setup_s,
            relay_cpu: None,
            fast_path: None,
            stream_loss: None,
            unsent: 0,
            tester_bound: None,
            note: Some(note),
            outcome: Outcome::default(),
        }
    }
}

/// The search for the maximum zero-loss number of calls: the first trial
/// at the bound `max` (the tester's ceiling; `start`: doubling from there
/// instead), then bisection to 5 % (or 10 calls); a trial that does not
/// pass is confirmed. `tester_max`: `max` is the tester's own reach (a
/// device that carries it is tester-bound).
fn search(
    run: impl FnMut(u32) -> Result<Trial>,
    (start, max, tester_max): (Option<u32>, u32, bool),
    confirm: u32,
    log: &mut dyn FnMut(&Trial),
) -> Result<Search> {
    let mut run = run;
    let max = max.max(1);
    let s = crate::harness::search::Search {
        max: f64::from(max),
        start: start.map_or(Start::Max, |n| Start::Doubling(f64::from(n.max(1)))),
        resolution: 0.05,
        min_step: 10.0,
        max_trials: usize::MAX,
        confirm,
        granularity: 1.0,
    };
    let found = s.run(|n| {
        let t = run(n as u32)?;
        log(&t);
        let judged = match (&t.tester_bound, t.passed) {
            (Some(_), _) => Judged::TesterBound,
            (None, passed) => Judged::of(passed),
        };
        if !t.passed && confirm > 0 {
            eprintln!("  {} calls did not pass (a load is judged by up to {} runs)", t.calls, confirm + 1);
        }
        Ok((judged, t))
    })?;
    Ok(Search {
        max_zero_loss: found.best as u32,
        first_failure: found.first_failure.map(|f| f as u32),
        capped_at: (found.capped() && !tester_max).then_some(max),
        tester_bound: found.bound_by_tester() || (found.capped() && tester_max),
        started_at: found.trials.first().map_or(max, |t| t.load as u32),
        trials: found.trials.into_iter().map(|t| t.result).collect(),
    })
}

fn print_trial(who: &str, dir: Direction, t: &Trial) {
    if let Some(n) = &t.note {
        eprintln!("  {who:<9} {:<15} {:>5} calls: not run: {n}  [fail]", dir.label(), t.calls);
        return;
    }
    let o = &t.outcome;
    let l = &o.latency;
    eprintln!(
        "  {who:<9} {:<15} {:>5} calls: loss {:>8.4}% (missing {}, late {}), latency avg {} p50 {} p99 {} p99.9 {} µs{}{} send-lag p99 {} µs{}",
        dir.label(),
        t.calls,
        o.loss_rate * 100.0,
        o.missing,
        o.late,
        us(l.mean_ns),
        us(l.p50_ns),
        us(l.p99_ns),
        us(l.p999_ns),
        if o.rising_queue { ", RISING QUEUE" } else { "" },
        t.relay_cpu.map(|c| format!(", relay CPU {:.0}%", c * 100.0)).unwrap_or_default(),
        us(o.send_lag.p99_ns),
        match (t.passed, &t.tester_bound) {
            (true, _) => "",
            (false, None) => "  [fail]",
            (false, Some(_)) => "  [TESTER-BOUND]",
        },
    );
    if let Some(why) = &t.tester_bound {
        eprintln!(
            "  {who:<9} {:<15} {:>5} calls: TESTER-BOUND: {why} ({:.0} packets/s sent)",
            dir.label(),
            t.calls,
            o.sent_pps
        );
    }
    if let Some(f) = &t.fast_path {
        eprintln!("  {who:<9} {:<15} {:>5} calls: {f}", dir.label(), t.calls);
    }
    if let Some(l) = t.stream_loss.as_ref().filter(|l| l.with_loss > 0) {
        eprintln!(
            "  {who:<9} {:<15} {:>5} calls: {} of {} streams lost packets (worst: stream {} missed {})",
            dir.label(),
            t.calls,
            l.with_loss,
            l.flows,
            l.worst_flow.unwrap_or(0),
            l.worst_missing
        );
    }
}

/// How far a device's searches go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reach {
    /// The tester's own row (kernel forwarding): each direction first
    /// measures the tester's ceiling ([`calibrate`]) and searches below it.
    Calibrate,
    /// Up to this many calls; whether that is the tester's measured
    /// ceiling (a relay that carries it is tester-bound) or a bound.
    Up(u32, bool),
}

/// Packets per stream of a calibration trial (0.5 s).
const CALIBRATION_PACKETS: u32 = 25;

/// The tester's ceiling in `dir`, in calls: one short trial through kernel
/// forwarding offering `--max-calls`; what the tester sent there, in
/// calls (`--max-calls` itself when it kept up). Returns the calls,
/// whether they are the tester's limit, and the trial.
fn calibrate(ctx: &Ctx, topo: &RelayTopo, dir: Direction) -> Result<(u32, bool, Trial)> {
    let max = ctx.args.max_calls.max(1);
    let t = trial(ctx, topo, None, dir, max, CALIBRATION_PACKETS)?;
    let per_call = if dir == Direction::Both { 2.0 } else { 1.0 };
    let calls = (t.outcome.sent_pps / STREAM_PPS / per_call).floor().clamp(1.0, f64::from(max)) as u32;
    Ok(match t.tester_bound {
        Some(_) => (calls, true, t),
        None => (max, false, t),
    })
}

fn measure_device(ctx: &Ctx, topo: &RelayTopo, relay: Relay, name: &str, reach: Reach) -> Vec<DirResult> {
    let a = ctx.args;
    let spackets = a.search_packets.unwrap_or(a.packets);
    let mut out = Vec::new();
    for &dir in &a.directions {
        let mut r = DirResult { direction: dir, points: Vec::new(), search: None, calibration: None, error: None };
        let res: Result<()> = (|| {
            let want_search = !a.no_search && (relay.is_none() || a.search_directions.contains(&dir));
            if relay.is_some() || !want_search {
                for &n in &a.calls {
                    let t = trial(ctx, topo, relay, dir, n, a.packets)?;
                    print_trial(name, dir, &t);
                    r.points.push(t);
                }
            }
            if want_search {
                let (max, tester_max) = match reach {
                    Reach::Up(max, tester) => (max, tester),
                    Reach::Calibrate => {
                        let (calls, tester, t) = calibrate(ctx, topo, dir)?;
                        eprintln!(
                            "  {name:<9} {:<15} tester ceiling: {calls} calls (offered {}, sent {:.0} packets/s)",
                            dir.label(),
                            t.calls,
                            t.outcome.sent_pps
                        );
                        r.calibration = Some(Calibration { ceiling_calls: calls, tester_bound: tester, trial: t });
                        (calls, tester)
                    }
                };
                // The socket tester starts at the ceiling (RFC 2544); the
                // XDP tester's relays double from 1000 (an overloaded
                // userspace relay leaves its generator slow, see --relays).
                let start = a.search_start.or((a.tester == TesterKind::Xdp && relay.is_some()).then_some(1000));
                let s = search(
                    |n| trial(ctx, topo, relay, dir, n, spackets),
                    (start, max, tester_max),
                    a.confirm,
                    &mut |t| print_trial(name, dir, t),
                )?;
                eprintln!(
                    "  {name:<9} {:<15} max zero-loss calls: {}{}{}",
                    dir.label(),
                    s.max_zero_loss,
                    s.capped_at.map(|c| format!(" (no loss up to the bound {c})")).unwrap_or_default(),
                    if s.tester_bound { " (TESTER-BOUND: the tester's figure, not the device's)" } else { "" }
                );
                r.search = Some(s);
            }
            Ok(())
        })();
        if let Err(e) = res {
            eprintln!("  {name}: {}: error: {e:#}", dir.label());
            r.error = Some(format!("{e:#}"));
        }
        out.push(r);
    }
    out
}

/// Runs the bench and writes the results; returns the report.
pub fn run(args: Args) -> Result<Report> {
    if !nix::unistd::geteuid().is_root() {
        bail!("v6gate bench trgw needs root (network namespaces)");
    }
    let tester_cpus = cpu::parse_cpus(&args.tester_cpus)?;
    let relay_cpus = cpu::parse_cpus(&args.relay_cpus)?;
    if relay_cpus.is_empty() {
        bail!("--relay-cpus is empty");
    }
    let v6gate_bin = peers::v6gate(args.v6gate_bin.as_deref())?;
    // A bad --v6gate-trgw-opt fails the run before it starts.
    relay::with_trgw_opts(&relay::v6gate_config(RELAY4, RELAY6, relay::PORTS, 1)?, &args.v6gate_trgw_opts)?;
    let (nofile, nofile_note) = relay::raise_nofile()?;
    // Created first: an output directory that cannot be written fails the
    // run before it starts, not after it.
    let mut out = Outputs::create(&args.out)?;
    // The namespaces and the relays' configurations and logs go with the
    // guard, however the run ends.
    // Unique per run, also between runs of one process (tests run side by side).
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run_id = format!("{}-{}", std::process::id(), RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let prefix = format!("v6gate-bt-{run_id}");
    let guard = RunGuard::new(&format!("{prefix}-"), std::env::temp_dir().join(format!("v6gate-bench-trgw-{run_id}")))?;
    let relay_threads = args.relay_threads.unwrap_or(relay_cpus.len());
    let ctx =
        Ctx { args: &args, tester_cpus, relay_cpus: relay_cpus.clone(), relay_threads, work: guard.work(), v6gate_bin };
    let mut notes = vec![format!(
        "CPU arrangement: tester threads on CPU(s) {}, relay process on CPU(s) {} (taskset), {} relay worker thread(s); \
         kernel softirq work for the veth links runs on whichever CPU sends.{}",
        args.tester_cpus,
        args.relay_cpus,
        relay_threads,
        if args.realtime { " Relay and tester threads ran with SCHED_FIFO priority 10." } else { "" }
    )];
    let ingress = xdp::Ingress::of(&args);
    if ingress == xdp::Ingress::Rps {
        notes.push(format!(
            "XDP tester: the relay namespace's ports r6/r4 steered their receive work (RPS) to the relay CPU(s) {}: \
             kernel forwarding and a userspace relay's socket delivery ran on the DUT's CPU; the veth NAPI poll \
             (GRO, and the XDP relay's program) ran in the generator's softirq.",
            args.relay_cpus
        ));
    }
    if ingress == xdp::Ingress::Threaded {
        notes.push(format!(
            "XDP tester: the relay namespace's ports r6/r4 ran threaded NAPI, their kernel threads on the relay CPU(s) {}{}: \
             the receive work of every row (kernel forwarding, the XDP program, a userspace relay's socket delivery) \
             ran on the DUT's CPU, not in the generator's softirq.",
            args.relay_cpus,
            if args.realtime { " at SCHED_FIFO priority 11" } else { "" }
        ));
    }
    notes.push(format!("Relays started with RLIMIT_NOFILE {nofile} (four media sockets per call)."));
    if let Some(n) = nofile_note {
        eprintln!("{n}");
        notes.push(n);
    }
    eprintln!(
        "v6gate bench trgw: {} packets per stream, tester on CPU {}, relay on CPU {}",
        args.packets, args.tester_cpus, args.relay_cpus
    );

    let mut relay_reach = Reach::Up(args.max_calls, false);
    let ceiling = if args.no_ceiling {
        None
    } else {
        eprintln!("tester ceiling (kernel IPv6 forwarding, no relay):");
        let topo = RelayTopo::build(&format!("{prefix}-k"), true)?;
        if args.tester == TesterKind::Xdp {
            xdp::prepare(&topo, ingress, &ctx.relay_cpus)?;
        }
        let dirs = measure_device(&ctx, &topo, None, "kernel", Reach::Calibrate);
        if args.tester == TesterKind::Xdp {
            notes.push(
                "XDP tester: the kernel-forwarding row is the path's ceiling without a relay process, not a bound on \
                 the relays: kernel forwarding costs more per packet than the XDP relay's fast path (both run in the \
                 relay namespace's receive work), so relay searches go up to --max-calls."
                    .into(),
            );
        } else if let Some(c) = dirs.iter().find(|d| d.direction == Direction::V6v4).and_then(|d| d.search.as_ref()) {
            if c.capped_at.is_none() && c.max_zero_loss > 0 {
                relay_reach = Reach::Up(c.max_zero_loss, true);
                notes.push(format!(
                    "Relay searches are bounded by the tester ceiling ({} calls): a relay that reaches it is tester-bound.",
                    c.max_zero_loss
                ));
            }
        }
        Some(Device {
            name: "kernel forwarding (tester ceiling)".into(),
            version: None,
            skipped: None,
            directions: dirs,
        })
    };

    let mut relays = Vec::new();
    for &kind in &args.relays {
        let name = kind.name();
        let bin = match kind {
            RelayKind::V6gate => Ok(ctx.v6gate_bin.clone()),
            RelayKind::V6gateXdp => relay::xdp_availability(&ctx.v6gate_bin).map(|()| ctx.v6gate_bin.clone()),
            RelayKind::Rtpengine => peers::require("rtpengine", &args.rtpengine_bin),
        };
        let bin = match bin {
            Ok(b) => b,
            Err(why) => {
                let note = format!("{name} skipped: {why}");
                eprintln!("{note}");
                notes.push(note.clone());
                relays.push(Device { name: name.into(), version: None, skipped: Some(note), directions: vec![] });
                continue;
            }
        };
        eprintln!("{name}:");
        let topo = RelayTopo::build(&format!("{prefix}-r"), false)?;
        if kind == RelayKind::V6gateXdp {
            relay::prepare_xdp(&topo)?;
        }
        if args.tester == TesterKind::Xdp {
            xdp::prepare(&topo, ingress, &ctx.relay_cpus)?;
        }
        let dirs = measure_device(&ctx, &topo, Some((kind, &bin)), name, relay_reach);
        relays.push(Device { name: name.into(), version: peers::version(&bin), skipped: None, directions: dirs });
    }

    let report = Report {
        test: "NICI TrGW (Lin 2008): G.711 RTP, 20 ms, N concurrent calls through the relay, set up by ng offer/answer",
        frame_bytes: FrameBytes { ipv4: 14 + 20 + 8 + probe::LEN, ipv6: 14 + 40 + 8 + probe::LEN },
        packets: args.packets,
        search_packets: args.search_packets.unwrap_or(args.packets),
        interval_ms: 20,
        budget_ms: args.budget_ms,
        tester_cpus: args.tester_cpus.clone(),
        relay_cpus: args.relay_cpus.clone(),
        relay_threads,
        realtime: args.realtime,
        tester: args.tester,
        sockets_per_side: args.sockets,
        batch: args.batch,
        online_cpus: crate::report::online_cpus(),
        kernel: crate::report::kernel_release(),
        ceiling,
        relays,
        notes,
        namespace_prefix: prefix.clone(),
    };
    report::write(&report, &mut out)?;
    if args.keep_logs {
        for e in std::fs::read_dir(guard.work())?.flatten() {
            let _ = std::fs::copy(e.path(), args.out.join(e.file_name()));
        }
    }
    eprintln!("{}", out.summary());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn fake_trial(calls: u32, pass: bool) -> Trial {
        let o = Outcome {
            streams: calls as usize,
            sent: 1,
            on_time: u64::from(pass),
            missing: u64::from(!pass),
            ..Default::default()
        };
        Trial {
            calls,
            packets: 1,
            passed: o.passes(),
            setup_s: 0.0,
            relay_cpu: None,
            fast_path: None,
            stream_loss: None,
            unsent: 0,
            tester_bound: None,
            note: None,
            outcome: o,
        }
    }

    /// A fake trial of a tester that offers at most `reach` calls and a
    /// relay that carries `carries`.
    fn fake(reach: u32, carries: u32) -> impl FnMut(u32) -> Result<Trial> {
        move |n| {
            let mut t = fake_trial(n, n <= carries);
            if n > reach {
                t.passed = false;
                t.tester_bound = Some("send lag p99 3400.0 ms above the 20.0 ms budget".into());
            }
            Ok(t)
        }
    }

    #[test]
    fn search_finds_the_threshold_in_calls() {
        let s = search(|n| Ok(fake_trial(n, n <= 1234)), (Some(250), 8000, false), 0, &mut |_| {}).unwrap();
        assert!(s.max_zero_loss <= 1234 && s.max_zero_loss >= 1234 - 1234 / 20 - 10, "{}", s.max_zero_loss);
        let f = s.first_failure.unwrap();
        assert!(f > 1234 && f - s.max_zero_loss <= (f / 20).max(10));
        assert_eq!((s.capped_at, s.tester_bound, s.started_at), (None, false, 250));
        assert_eq!(s.trials.iter().map(|t| t.calls).take(4).collect::<Vec<_>>(), [250, 500, 1000, 2000]);
        let capped = search(|n| Ok(fake_trial(n, true)), (Some(250), 1000, false), 0, &mut |_| {}).unwrap();
        assert_eq!((capped.max_zero_loss, capped.capped_at, capped.tester_bound), (1000, Some(1000), false));
        let mut logged = 0;
        let none = search(|n| Ok(fake_trial(n, false)), (Some(250), 1000, false), 1, &mut |_| logged += 1).unwrap();
        assert_eq!(none.max_zero_loss, 0);
        assert_eq!(logged, none.trials.len(), "every run is logged and kept");
    }

    #[test]
    fn the_search_starts_at_the_ceiling_and_never_passes_a_lagging_tester() {
        // The tester's calibration found 3,200 calls; it keeps up to 3,000.
        let s = search(fake(3000, 8000), (None, 3200, true), 1, &mut |_| {}).unwrap();
        assert_eq!(s.started_at, 3200, "RFC 2544: the first trial at the tester's ceiling");
        assert!(s.max_zero_loss <= 3000 && s.max_zero_loss >= 2850, "{}", s.max_zero_loss);
        assert_eq!((s.first_failure, s.capped_at, s.tester_bound), (None, None, true));
        assert!(s.trials.iter().all(|t| !(t.passed && t.tester_bound.is_some())));
        assert!(s.trials.iter().filter(|t| t.calls > 3000).all(|t| t.tester_bound.is_some()));
        // A relay that fails below the tester's reach: its own figure.
        let r = search(fake(3000, 1200), (None, 3200, true), 0, &mut |_| {}).unwrap();
        assert!(!r.tester_bound && r.first_failure.is_some_and(|f| f > 1200) && r.max_zero_loss <= 1200);
        // A relay that carries the whole ceiling: the tester's figure.
        let c = search(fake(9000, 9000), (None, 3200, true), 0, &mut |_| {}).unwrap();
        assert_eq!((c.max_zero_loss, c.capped_at, c.tester_bound, c.trials.len()), (3200, None, true, 1));
    }

    #[test]
    fn a_trial_is_tester_bound_when_the_tester_lagged_or_did_not_send() {
        let o = |sent_pps: f64, lag_ms: u64| Outcome {
            streams: 4000,
            sent: 4000 * 25,
            sent_pps,
            send_lag: crate::harness::latency::Latency { p99_ns: lag_ms * 1_000_000, ..Default::default() },
            ..Default::default()
        };
        assert_eq!(tester_bound(&o(200_000.0, 1), 0, 20_000_000), None);
        // The issue's kernel "ceiling": 4,000 calls passed with 3.4 s of lag.
        let lag = tester_bound(&o(199_000.0, 3400), 0, 20_000_000).unwrap();
        assert_eq!(lag, "send lag p99 3400.0 ms above the 20.0 ms budget");
        let short = tester_bound(&o(150_000.0, 1), 0, 20_000_000).unwrap();
        assert!(short.starts_with("sent 150000 of 200000 packets/s offered"), "{short}");
        let unsent = tester_bound(&o(200_000.0, 1), 1234, 20_000_000).unwrap();
        assert_eq!(unsent, "1234 of 101234 packets not sent in the trial's time");
    }

    #[test]
    fn quick_and_full_and_given_options_win() {
        let a = Args::parse_from(["x", "--quick", "--v6gate", "/x/v6gate"]);
        assert_eq!(
            (a.calls.as_slice(), a.packets, a.search_packets, a.no_search),
            (&[50, 200][..], 100, Some(50), false)
        );
        assert_eq!(a.v6gate_bin.as_deref(), Some(Path::new("/x/v6gate")), "--v6gate is an alias");
        let f = Args::parse_from(["x", "--full", "--calls", "10"]);
        assert_eq!((f.calls.as_slice(), f.packets, f.no_search, f.search_packets), (&[10][..], 10_000, false, None));
        let x = Args::parse_from(["x", "--tester", "xdp"]);
        assert_eq!(x.directions, [Direction::V6v4, Direction::V4v6], "one direction per XDP trial");
        assert_eq!(
            (x.calls.as_slice(), x.search_start, x.max_calls),
            (&[1000, 5000, 10_000, 15_000][..], None, 32_000)
        );
        let xq = Args::parse_from(["x", "--tester", "xdp", "--quick", "--max-calls", "500"]);
        assert_eq!((xq.calls.as_slice(), xq.max_calls), (&[50, 200][..], 500), "given values stay");
        let q = Args::parse_from(["x", "--quick", "--packets", "500", "--search-packets", "200", "--calls", "1000"]);
        assert_eq!(
            (q.packets, q.search_packets, q.calls.as_slice()),
            (500, Some(200), &[1000][..]),
            "given values win"
        );
        let d = Args::parse_from(["x"]);
        assert_eq!((d.tester, d.search_start, d.max_calls, d.packets), (TesterKind::Udp, None, 8000, 500));
        assert_eq!(d.calls, [100, 250, 500, 1000, 1500, 2000]);
    }
}
