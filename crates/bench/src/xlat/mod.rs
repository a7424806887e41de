//! `v6gate bench xlat`: RFC 8219 (benchmarking IPv6 transition
//! technologies) with the RFC 2544 methods, through the
//! [`lab::topo::BenchTopo`] tester — DUT — tester topology, with a
//! [`crate::tester::FrameTester`] (`--tester`).
//!
//! For each device under test, direction and frame size: throughput (the
//! highest zero-loss rate, binary search, [`crate::harness::search`]), frame loss rate at
//! rates above it, latency (median, 99th, 99.9th percentile) and PDV at
//! the throughput rate, and latency at lower loads. Stateful NAT64 also
//! gets the connection setup rate (new flows per second without loss) and
//! the first-packet latency of new sessions. Traffic is UDP with RFC 4814
//! pseudorandom ports over many flows. The softwires (`v6gate softwire`:
//! the lw4o6 lwAFTR, the DS-Lite AFTR) take and give 4in6 frames on the
//! IPv6 side, and the report judges them against the userspace SIIT
//! translator of the same run (issue #15). See docs/bench-xlat.md.

mod dut;
mod report;
mod trial;

use std::path::PathBuf;

use anyhow::{bail, Result};
use lab::topo::BENCH_PREFIX;
use serde::Serialize;

use crate::harness::guard::RunGuard;
use crate::harness::latency::Latency;
use crate::harness::{cpu, peers};
use crate::report::Outputs;
use crate::tester::{frame, Backend};

pub use dut::{tayga_conf, v6gate_conf};
pub use report::markdown;

/// A device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dut {
    /// No DUT: the two tester ports on one veth (the tester's ceiling).
    Tester,
    /// Linux IPv4 forwarding (IPv4 frames both ways, 20 bytes shorter): the
    /// ceiling of the DUT namespace and its links.
    Kernel,
    /// TAYGA as SIIT (static EAM for the IPv6 host).
    TaygaSiit,
    /// TAYGA as NAT64 (dynamic pool: one IPv4 address per IPv6 host).
    TaygaNat64,
    /// `v6gate run` with `[siit]`.
    V6gateSiit,
    /// `v6gate run` with `[nat64]` (stateful NAT64).
    V6gateNat64,
    /// `v6gate run` with `[siit]` and the XDP fast path (`[xdp]`, native
    /// mode) on the DUT's interfaces `d6` and `d4`.
    V6gateXdpSiit,
    /// `v6gate run` with `[nat64]` and the XDP fast path: established
    /// sessions (created by the warm-up, mirrored before the search) are
    /// translated in XDP.
    V6gateXdpNat64,
    /// `v6gate softwire` with `[lw4o6]`: the lwAFTR (RFC 7596), one
    /// binding for the tester's lwB4 (a shared IPv4 address and a port
    /// set holding every flow's port). 6to4: 4in6 in, IPv4 out; 4to6:
    /// IPv4 in, 4in6 out.
    #[value(name = "v6gate-lw4o6")]
    V6gateLw4o6,
    /// `v6gate-lw4o6` plus `[lw4o6.xdp]` on d6 and d4 (native): the
    /// lwAFTR's XDP fast path (bpf/softwire.bpf.c) decapsulates and
    /// encapsulates the binding's packets; the TUN engine stays the slow
    /// path.
    #[value(name = "v6gate-xdp-lw4o6")]
    V6gateXdpLw4o6,
    /// `v6gate softwire` with `[dslite]`: the DS-Lite AFTR (RFC 6333) and
    /// its NAT44; 4to6 goes to the mappings a 6to4 warm-up created (as
    /// NAT64).
    #[value(name = "v6gate-dslite")]
    V6gateDslite,
    /// `v6gate-dslite` plus `[dslite.xdp]` on d6 and d4 (native): the
    /// AFTR's established NAT44 flows in XDP (bpf/softwire.bpf.c); the TUN
    /// engine stays the slow path. AF_PACKET tester only.
    #[value(name = "v6gate-xdp-dslite")]
    V6gateXdpDslite,
}

impl Dut {
    /// The DUT's name in the reports.
    pub fn name(self) -> &'static str {
        match self {
            Dut::Tester => "tester",
            Dut::Kernel => "kernel",
            Dut::TaygaSiit => "tayga-siit",
            Dut::TaygaNat64 => "tayga-nat64",
            Dut::V6gateSiit => "v6gate-siit",
            Dut::V6gateNat64 => "v6gate-nat64",
            Dut::V6gateXdpSiit => "v6gate-xdp-siit",
            Dut::V6gateXdpNat64 => "v6gate-xdp-nat64",
            Dut::V6gateLw4o6 => "v6gate-lw4o6",
            Dut::V6gateXdpLw4o6 => "v6gate-xdp-lw4o6",
            Dut::V6gateDslite => "v6gate-dslite",
            Dut::V6gateXdpDslite => "v6gate-xdp-dslite",
        }
    }

    /// Whether the DUT is a softwire end (`v6gate softwire`): its IPv6
    /// side carries IPv4 in IPv6 (RFC 2473 4in6 frames).
    pub fn softwire(self) -> bool {
        matches!(self, Dut::V6gateLw4o6 | Dut::V6gateXdpLw4o6) || self.dslite()
    }

    /// Whether the DUT is the DS-Lite AFTR (with or without its XDP fast path).
    pub fn dslite(self) -> bool {
        matches!(self, Dut::V6gateDslite | Dut::V6gateXdpDslite)
    }

    /// Whether the DUT is the lwAFTR (with or without its XDP fast path).
    pub fn lw4o6(self) -> bool {
        matches!(self, Dut::V6gateLw4o6 | Dut::V6gateXdpLw4o6)
    }

    /// Whether 4to6 traffic needs the mappings of a 6to4 warm-up (NAT64,
    /// the DS-Lite AFTR's NAT44).
    pub fn maps(self) -> bool {
        self.stateful() || self.dslite()
    }

    /// Whether the DUT keeps per-flow state (NAT64).
    pub fn stateful(self) -> bool {
        matches!(self, Dut::TaygaNat64 | Dut::V6gateNat64 | Dut::V6gateXdpNat64)
    }

    /// Whether the DUT runs the XDP fast path.
    pub fn xdp(self) -> bool {
        matches!(self, Dut::V6gateXdpSiit | Dut::V6gateXdpNat64)
    }

    /// Whether the DUT is `v6gate run` (with or without the fast path).
    pub fn v6gate(self) -> bool {
        matches!(self, Dut::V6gateSiit | Dut::V6gateNat64) || self.xdp()
    }
}

/// Traffic direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Dir {
    /// IPv6 tester port -> DUT -> IPv4 tester port.
    #[value(name = "6to4")]
    #[serde(rename = "6to4")]
    V6ToV4,
    /// IPv4 tester port -> DUT -> IPv6 tester port (NAT64: to the sessions
    /// the 6to4 warm-up created).
    #[value(name = "4to6")]
    #[serde(rename = "4to6")]
    V4ToV6,
}

/// `v6gate bench xlat` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Directory for results.json, results.md and the SVG plots.
    #[arg(long, default_value = "bench-results/xlat")]
    pub out: PathBuf,
    /// Devices under test, in order (comma-separated). Unavailable ones
    /// (TAYGA not installed, ...) are reported as skipped. The tester's
    /// own ceiling (`tester`) is always measured, first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tester,kernel,tayga-siit,tayga-nat64,v6gate-siit,v6gate-nat64,v6gate-xdp-siit,v6gate-xdp-nat64,v6gate-lw4o6,v6gate-dslite"
    )]
    pub dut: Vec<Dut>,
    /// IPv6 frame sizes in bytes (RFC 8219; the IPv4 side is 20 bytes
    /// shorter, the softwires' 4in6 frames 20 bytes longer: the same
    /// payload in every DUT). `--quick`: 84,1518.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "84,512,1280,1518",
        default_value_if("quick", "true", "84,1518")
    )]
    pub sizes: Vec<usize>,
    /// Directions.
    #[arg(long, value_delimiter = ',', default_value = "6to4,4to6")]
    pub dir: Vec<Dir>,
    /// Number of flows (RFC 4814 pseudorandom source/destination ports).
    /// `--quick`: 256.
    #[arg(long, default_value_t = 1024, default_value_if("quick", "true", "256"))]
    pub flows: usize,
    /// Trial duration, ms. `--quick`: 300.
    #[arg(long, default_value_t = 2000, default_value_if("quick", "true", "300"))]
    pub trial_ms: u64,
    /// How long the receiver waits for stragglers after a trial, ms.
    /// `--quick`: 100.
    #[arg(long, default_value_t = 500, default_value_if("quick", "true", "100"))]
    pub drain_ms: u64,
    /// A frame later than this counts as lost (a growing queue is a failure), ms.
    #[arg(long, default_value_t = 10)]
    pub late_ms: u64,
    /// Highest rate any search tries, frames/s. Each (direction, frame
    /// size) of the tester's own row first offers this rate in one
    /// calibration trial: what the tester achieved there is its ceiling,
    /// where every search of the run starts (RFC 2544: the first trial
    /// at the maximum the tester can offer, then binary search).
    #[arg(long, default_value_t = 2_000_000.0)]
    pub max_rate: f64,
    /// Search resolution (share of the rate). `--quick`: 0.05.
    #[arg(long, default_value_t = 0.02, default_value_if("quick", "true", "0.05"))]
    pub resolution: f64,
    /// Trials per search at most (confirmations included). `--quick`: 8.
    #[arg(long, default_value_t = 12, default_value_if("quick", "true", "8"))]
    pub max_trials: usize,
    /// Throughput search: run a trial that did not pass again up to this
    /// many times; a rate passes when any run passes, and fails the DUT
    /// only when a run lost frames the tester offered (every run is kept
    /// in the report's search list). One transient loss high in a binary
    /// search otherwise sets the figure far below what the DUT carries.
    /// 0: RFC 2544 as written (one trial per rate). `--quick`: 0 (its 8
    /// trials then reach down to 1/128 of the tester's ceiling).
    #[arg(long, default_value_t = 1, default_value_if("quick", "true", "0"))]
    pub confirm: u32,
    /// Loads above the throughput for the frame loss rate, % of
    /// throughput (not for the tester's own row: it cannot offer more than
    /// its ceiling). `--quick`: 125.
    #[arg(long, value_delimiter = ',', default_value = "110,125,150", default_value_if("quick", "true", "125"))]
    pub overload: Vec<u32>,
    /// Loads below the throughput for latency by load, % of throughput.
    /// `--quick`: 50.
    #[arg(long, value_delimiter = ',', default_value = "10,50,90", default_value_if("quick", "true", "50"))]
    pub loads: Vec<u32>,
    /// NAT64: new flows in the first-packet latency test. `--quick`: 200.
    #[arg(long, default_value_t = 2000, default_value_if("quick", "true", "200"))]
    pub setup_flows: usize,
    /// NAT64: rates of new flows in the first-packet latency test,
    /// flows/s; each rate probes fresh flows, then the same flows again
    /// (established) at the same rate. The low rate shows an idle DUT
    /// woken by every packet; the higher one a DUT kept busy, like the
    /// latency-by-load points.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub setup_probe_rate: Vec<f64>,
    /// v6gate NAT64: the `[tun] busy-poll` windows the first-packet
    /// probes run with, one DUT start each (`0s`: the default daemon,
    /// whose idle worker is woken by every packet; `1ms`: a worker that
    /// spins between packets, see docs/daemon.md). The setup-rate search
    /// runs with the first.
    #[arg(long, value_delimiter = ',', default_value = "0s,1ms")]
    pub setup_busy_poll: Vec<String>,
    /// Stateful DUTs: measure only the session setup (first-packet
    /// latency and setup rate), no throughput, loss or latency points;
    /// other DUTs are skipped. For short targeted runs.
    #[arg(long)]
    pub setup_only: bool,
    /// CPUs the DUT process may run on (taskset list).
    #[arg(long, default_value = "0")]
    pub dut_cpus: String,
    /// CPU of the tester's sending thread.
    #[arg(long, default_value_t = 1)]
    pub tx_cpu: usize,
    /// CPU of the tester's receiving thread.
    #[arg(long, default_value_t = 1)]
    pub rx_cpu: usize,
    /// The tester backend that sends and receives the frames: `af-packet`
    /// (sockets) or `xdp` (BPF_PROG_RUN live frames and an XDP counting
    /// receiver, in the kernel; see docs/bench-xlat.md). Both send and
    /// receive the softwire DUTs' 4in6 frames.
    #[arg(long, value_enum, default_value = "af-packet")]
    pub tester: Backend,
    /// Threaded NAPI (and GRO) on the DUT's ports `d6`/`d4` for every DUT
    /// of the run, their kernel threads on `--dut-cpus`, so that the DUT's
    /// receive path (its XDP program, kernel forwarding, the way into a TUN
    /// translator) runs on the DUT's CPU instead of in the softirq of the
    /// tester's sending CPU. EXPERIMENTAL, off by default: with `--tester
    /// xdp` the generator collapses (docs/bench-xlat.md).
    #[arg(long)]
    pub threaded_napi: bool,
    /// With `--tester xdp`: the generator thread, the DUT process (`chrt
    /// -f 10`, every DUT alike) and, with `--threaded-napi`, the DUT ports'
    /// NAPI threads (priority 11) run SCHED_FIFO, so that other work on a
    /// shared machine cannot take their CPUs (the kernel keeps 5 % for
    /// everything else: sched_rt_runtime_us).
    #[arg(long)]
    pub realtime: bool,
    /// The v6gate binary the v6gate DUTs run (default: this executable).
    #[arg(long, alias = "v6gate-bin")]
    pub v6gate: Option<PathBuf>,
    /// Extra `[tun]` settings for the v6gate DUTs, as TOML `key = value`
    /// lines (repeatable), e.g. `--v6gate-tun 'io = "poll"'`. The softwire
    /// DUTs take only `busy-poll` (as `v6gate softwire --busy-poll`).
    #[arg(long, value_name = "KEY = VALUE")]
    pub v6gate_tun: Vec<String>,
    /// Namespace name prefix (namespaces PREFIX-t6, PREFIX-dut, PREFIX-t4).
    #[arg(long, default_value = BENCH_PREFIX)]
    pub prefix: String,
    /// Smoke run (under 5 minutes on a 2-CPU machine): sizes 84 and 1518,
    /// 256 flows, 300 ms trials, a 5 % search of at most 8 trials without
    /// confirmation, one
    /// overload and one lower load, 200 new flows. Options given on the
    /// command line keep their values.
    #[arg(long)]
    pub quick: bool,
}

/// One (DUT, direction, frame size) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Direction.
    pub dir: Dir,
    /// IPv6 frame size (the label); the IPv4 frames are 20 bytes shorter,
    /// the 4in6 frames 20 bytes longer (the same payload).
    pub frame_size: usize,
    /// Size of the frames the tester sent.
    pub sent_frame_size: usize,
    /// Flows actually used.
    pub flows: usize,
    /// Throughput: highest zero-loss rate, frames/s.
    pub throughput_fps: f64,
    /// The same in Mbit/s of sent frames (FCS included, RFC 2544).
    pub throughput_mbps: f64,
    /// Where the search started: the tester's ceiling for this direction
    /// and size (its calibration trial's achieved rate for the tester's
    /// own row, the tester row's throughput for the others), or
    /// `--max-rate` when the tester reaches it.
    pub ceiling_fps: f64,
    /// The figure is the tester's bound, not the DUT's: the search ended
    /// below a rate the tester could not offer, or the DUT carried the
    /// tester's whole ceiling without loss (TESTER-BOUND).
    pub tester_bound: bool,
    /// No loss up to `--max-rate`, which the tester could offer: the DUT
    /// may carry more.
    pub capped: bool,
    /// Every search trial in order.
    pub search: Vec<SearchTrial>,
    /// Frame loss rate above the throughput.
    pub loss: Vec<LoadResult>,
    /// Latency at the throughput rate.
    pub latency: Option<Latency>,
    /// Latency at lower loads.
    pub by_load: Vec<LoadResult>,
}

/// One trial of a search.
#[derive(Debug, Clone, Serialize)]
pub struct SearchTrial {
    /// Offered rate, frames/s.
    pub rate_fps: f64,
    /// The DUT carried it (no frame lost or late, the tester kept up).
    pub passed: bool,
    /// Why the tester fell behind, when it did (TESTER-BOUND: neither a
    /// pass nor a failure of the DUT).
    pub tester_bound: Option<String>,
    /// The rate the tester achieved, frames/s.
    pub sent_fps: f64,
    /// Frames lost (missing or late).
    pub lost: u64,
}

/// A trial at a share of the throughput.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    /// % of throughput.
    pub load_pct: u32,
    /// Offered rate, frames/s.
    pub rate_fps: f64,
    /// Share of frames lost (late ones included).
    pub loss_ratio: f64,
    /// Latency of the frames received.
    pub latency: Latency,
    /// Why the tester fell behind, when it did (the loss is then partly
    /// the tester's).
    pub tester_bound: Option<String>,
}

/// NAT64 session-setup results.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    /// Highest rate of new flows (one frame each) without loss, flows/s.
    pub setup_rate_fps: f64,
    /// The figure is the tester's bound (as [`Point::tester_bound`]).
    pub tester_bound: bool,
    /// Search trials.
    pub search: Vec<SearchTrial>,
    /// First-packet latency, one probe per `--setup-probe-rate`.
    pub probes: Vec<SetupProbe>,
}

/// New flows at one rate, then the same flows again: the first packet of
/// a session against an established one, in the same conditions.
#[derive(Debug, Clone, Serialize)]
pub struct SetupProbe {
    /// The DUT's `[tun] busy-poll` window in this probe (v6gate).
    pub busy_poll: String,
    /// Rate of the probe, flows/s.
    pub rate: f64,
    /// Latency of the first frame of new sessions.
    pub first_packet: Latency,
    /// Latency of the same flows' next frame (sessions established).
    pub established: Latency,
}

/// Results for one DUT.
#[derive(Debug, Clone, Serialize)]
pub struct DutReport {
    /// DUT name.
    pub dut: &'static str,
    /// "ok", "skipped: why" or "error: what".
    pub status: String,
    /// Measurements.
    pub points: Vec<Point>,
    /// NAT64 session setup.
    pub setup: Option<Setup>,
    /// What the run observed besides the figures (the XDP DUTs: packets
    /// on the fast path and passes to the slow path, per direction).
    pub notes: Vec<String>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Online CPUs.
    pub cpus: usize,
    /// `uname -r`.
    pub kernel: String,
    /// Parameters (the command line, effective).
    pub params: String,
    /// Per DUT.
    pub duts: Vec<DutReport>,
}

impl Dir {
    /// "6to4" or "4to6".
    pub fn name(self) -> &'static str {
        match self {
            Dir::V6ToV4 => "6to4",
            Dir::V4ToV6 => "4to6",
        }
    }
}

/// What every part of a run needs.
struct Ctx<'a> {
    a: &'a Args,
    v6gate: PathBuf,
    work: &'a std::path::Path,
    tester: &'a dyn crate::tester::FrameTester,
    dut_cpus: Vec<usize>,
}

/// Runs the benchmark and writes the results into `args.out`.
pub fn run(args: &Args) -> Result<Report> {
    let a = args;
    if !nix::unistd::geteuid().is_root() {
        bail!("v6gate bench xlat builds network namespaces: run it as root");
    }
    for &s in &a.sizes {
        if s < frame::min_frame(true) || s > 1518 {
            bail!("frame size {s}: RFC 8219 IPv6 frame sizes run from 84 to 1518 bytes");
        }
    }
    if a.realtime && a.tester != Backend::Xdp {
        bail!("--realtime runs with --tester xdp only");
    }
    let dut_cpus = cpu::parse_cpus(&a.dut_cpus)?;
    if dut_cpus.is_empty() {
        bail!("--dut-cpus is empty");
    }
    let v6gate = peers::v6gate(a.v6gate.as_deref())?;
    // Created first: an output directory that cannot be written fails the
    // run before it starts, not after it.
    let mut out = Outputs::create(&a.out)?;
    // The namespaces, the generated DUT configurations and logs go with
    // the guard, however the run ends.
    let guard = RunGuard::new(&format!("{}-", a.prefix), PathBuf::from(format!("/run/{}", a.prefix)))?;
    let tester = a.tester.tester();
    let ctx = Ctx { a, v6gate, work: guard.work(), tester: tester.as_ref(), dut_cpus };
    let mut report = Report {
        cpus: crate::report::online_cpus(),
        kernel: crate::report::kernel_release(),
        params: format!("{a:?}"),
        duts: Vec::new(),
    };
    // The tester's ceiling per (direction, size), once measured, is where
    // the other DUTs' searches start: no DUT can forward more than the
    // tester sends. Every run measures it first (DESIGN.md, measurement
    // rules).
    let mut duts = a.dut.clone();
    if !duts.contains(&Dut::Tester) {
        eprintln!("bench xlat: measuring the tester's own ceiling first (dut `tester`)");
    }
    duts.retain(|d| *d != Dut::Tester);
    duts.insert(0, Dut::Tester);
    let mut ceiling: Vec<trial::Reach> = Vec::new();
    for &dut in &duts {
        eprintln!("bench xlat: {} ...", dut.name());
        let why = if a.setup_only && !dut.stateful() {
            Some("--setup-only measures stateful DUTs only".to_string())
        } else {
            dut::availability(dut, &ctx.v6gate)
        };
        let r = match why {
            Some(why) => DutReport {
                dut: dut.name(),
                status: format!("skipped: {why}"),
                points: vec![],
                setup: None,
                notes: vec![],
            },
            None => trial::bench_dut(&ctx, dut, &ceiling),
        };
        if dut == Dut::Tester {
            ceiling = r.points.iter().filter_map(trial::Reach::of).collect();
        }
        eprintln!("bench xlat: {}: {}", dut.name(), r.status);
        report.duts.push(r);
    }
    drop(guard);
    report::write(&report, &mut out)?;
    eprintln!("bench xlat: {}", out.summary());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_shrinks_the_run_and_given_options_win() {
        use clap::ValueEnum;
        let parse = |argv: &[&str]| crate::parse_args::<Args>(argv);
        let a = parse(&["x", "--quick"]);
        assert_eq!(a.sizes, vec![84, 1518]);
        assert_eq!((a.trial_ms, a.drain_ms, a.max_trials, a.flows, a.setup_flows), (300, 100, 8, 256, 200));
        assert_eq!(a.confirm, 0);
        assert_eq!((a.overload.as_slice(), a.loads.as_slice(), a.resolution), (&[125][..], &[50][..], 0.05));
        assert_eq!(a.tester, Backend::AfPacket);
        // Options given on the command line override --quick's defaults.
        let g = parse(&["x", "--quick", "--max-trials", "12", "--sizes", "512", "--trial-ms", "2000"]);
        assert_eq!((g.max_trials, g.sizes.as_slice(), g.trial_ms), (12, &[512][..], 2000));
        assert_eq!((g.drain_ms, g.flows), (100, 256), "the others keep --quick's");
        let g = parse(&["x", "--max-trials", "3", "--quick"]);
        assert_eq!(g.max_trials, 3, "in any order");
        let full = parse(&["x", "--v6gate-bin", "/x/v6gate"]);
        assert_eq!(full.sizes, vec![84, 512, 1280, 1518]);
        assert_eq!(full.dir, vec![Dir::V6ToV4, Dir::V4ToV6]);
        assert_eq!((full.trial_ms, full.max_trials, full.flows, full.resolution), (2000, 12, 1024, 0.02));
        assert_eq!(full.v6gate.as_deref(), Some(std::path::Path::new("/x/v6gate")), "--v6gate-bin is an alias");
        assert_eq!(
            &full.dut[full.dut.len() - 2..],
            [Dut::V6gateLw4o6, Dut::V6gateDslite],
            "softwires in the default run"
        );
        for d in Dut::value_variants() {
            let v = d.to_possible_value().unwrap();
            assert_eq!(v.get_name(), d.name(), "--dut value and report name agree");
            assert_eq!(serde_json::to_value(d).unwrap(), d.name(), "JSON name agrees");
        }
    }
}
