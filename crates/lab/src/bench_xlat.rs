//! `v6gate bench xlat`: RFC 8219 (benchmarking IPv6 transition
//! technologies) with the RFC 2544 methods, through the [`BenchTopo`]
//! tester — DUT — tester topology.
//!
//! For each device under test, direction and frame size: throughput (the
//! highest zero-loss rate, binary search, [`Search`]), frame loss rate at
//! rates above it, latency (median, 99th, 99.9th percentile) and PDV at
//! the throughput rate, and latency at lower loads. Stateful NAT64 also
//! gets the connection setup rate (new flows per second without loss) and
//! the first-packet latency of new sessions. Traffic is UDP with RFC 4814
//! pseudorandom ports over many flows. See docs/bench-xlat.md.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::netns::Netns;
use crate::pkt::{self, Header, Template};
use crate::report::{LinePlot as Plot, Series};
use crate::search::Search;
use crate::tester::{self, Latency, Port, TrialResult, TrialSpec};
use crate::topo::{bench_addr::*, BenchTopo, BENCH_PREFIX};

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
    /// `v6gate run` with [siit].
    V6gateSiit,
    /// `v6gate run` with [nat64] (stateful NAT64).
    V6gateNat64,
}

impl Dut {
    fn name(self) -> &'static str {
        match self {
            Dut::Tester => "tester",
            Dut::Kernel => "kernel",
            Dut::TaygaSiit => "tayga-siit",
            Dut::TaygaNat64 => "tayga-nat64",
            Dut::V6gateSiit => "v6gate-siit",
            Dut::V6gateNat64 => "v6gate-nat64",
        }
    }

    fn stateful(self) -> bool {
        matches!(self, Dut::TaygaNat64 | Dut::V6gateNat64)
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
    /// (TAYGA not installed, ...) are reported as skipped.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tester,kernel,tayga-siit,tayga-nat64,v6gate-siit,v6gate-nat64"
    )]
    pub dut: Vec<Dut>,
    /// IPv6 frame sizes in bytes (RFC 8219; the IPv4 side is 20 bytes shorter).
    #[arg(long, value_delimiter = ',', default_value = "84,512,1280,1518")]
    pub sizes: Vec<usize>,
    /// Directions.
    #[arg(long, value_delimiter = ',', default_value = "6to4,4to6")]
    pub dir: Vec<Dir>,
    /// Number of flows (RFC 4814 pseudorandom source/destination ports).
    #[arg(long, default_value_t = 1024)]
    pub flows: usize,
    /// Trial duration, ms.
    #[arg(long, default_value_t = 2000)]
    pub trial_ms: u64,
    /// How long the receiver waits for stragglers after a trial, ms.
    #[arg(long, default_value_t = 500)]
    pub drain_ms: u64,
    /// A frame later than this counts as lost (a growing queue is a failure), ms.
    #[arg(long, default_value_t = 10)]
    pub late_ms: u64,
    /// Highest rate the search tries, frames/s.
    #[arg(long, default_value_t = 2_000_000.0)]
    pub max_rate: f64,
    /// Search resolution (share of the rate).
    #[arg(long, default_value_t = 0.02)]
    pub resolution: f64,
    /// Trials per search at most.
    #[arg(long, default_value_t = 12)]
    pub max_trials: usize,
    /// Loads above the throughput for the frame loss rate, % of throughput.
    #[arg(long, value_delimiter = ',', default_value = "110,125,150")]
    pub overload: Vec<u32>,
    /// Loads below the throughput for latency by load, % of throughput.
    #[arg(long, value_delimiter = ',', default_value = "10,50,90")]
    pub loads: Vec<u32>,
    /// NAT64: new flows in the first-packet latency test.
    #[arg(long, default_value_t = 2000)]
    pub setup_flows: usize,
    /// NAT64: rate of new flows in the first-packet latency test, flows/s.
    #[arg(long, default_value_t = 1000.0)]
    pub setup_probe_rate: f64,
    /// CPUs the DUT process may run on (taskset list).
    #[arg(long, default_value = "0")]
    pub dut_cpus: String,
    /// CPU of the tester's sending thread.
    #[arg(long, default_value_t = 1)]
    pub tx_cpu: usize,
    /// CPU of the tester's receiving thread.
    #[arg(long, default_value_t = 1)]
    pub rx_cpu: usize,
    /// The v6gate binary the v6gate DUTs run (default: this executable).
    #[arg(long)]
    pub v6gate: Option<PathBuf>,
    /// Extra `[tun]` settings for the v6gate DUTs, as TOML `key = value`
    /// lines (repeatable), e.g. `--v6gate-tun 'io = "poll"'`.
    #[arg(long, value_name = "KEY = VALUE")]
    pub v6gate_tun: Vec<String>,
    /// Namespace name prefix (namespaces PREFIX-t6, PREFIX-dut, PREFIX-t4).
    #[arg(long, default_value = BENCH_PREFIX)]
    pub prefix: String,
    /// Smoke run: sizes 84 and 1518, short trials, coarse search, one
    /// overload and one lower load, 200 new flows.
    #[arg(long)]
    pub quick: bool,
}

impl Args {
    /// Applies `--quick`.
    pub fn effective(&self) -> Args {
        let mut a = self.clone();
        if a.quick {
            if a.sizes == [84, 512, 1280, 1518] {
                a.sizes = vec![84, 1518];
            }
            a.trial_ms = a.trial_ms.min(500);
            a.drain_ms = a.drain_ms.min(200);
            a.resolution = a.resolution.max(0.05);
            a.max_trials = a.max_trials.min(8);
            a.overload = vec![125];
            a.loads = vec![50];
            a.setup_flows = a.setup_flows.min(200);
            a.flows = a.flows.min(256);
        }
        a
    }
}

/// One (DUT, direction, frame size) measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Direction.
    pub dir: Dir,
    /// IPv6 frame size (the label); the IPv4 frames are 20 bytes shorter.
    pub frame_size: usize,
    /// Size of the frames the tester sent.
    pub sent_frame_size: usize,
    /// Flows actually used.
    pub flows: usize,
    /// Throughput: highest zero-loss rate, frames/s.
    pub throughput_fps: f64,
    /// The same in Mbit/s of sent frames (FCS included, RFC 2544).
    pub throughput_mbps: f64,
    /// Search trials (rate, passed).
    pub search: Vec<(f64, bool)>,
    /// Frame loss rate above the throughput.
    pub loss: Vec<LoadResult>,
    /// Latency at the throughput rate.
    pub latency: Option<Latency>,
    /// Latency at lower loads.
    pub by_load: Vec<LoadResult>,
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
}

/// NAT64 session-setup results.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    /// Highest rate of new flows (one frame each) without loss, flows/s.
    pub setup_rate_fps: f64,
    /// Search trials.
    pub search: Vec<(f64, bool)>,
    /// Latency of the first frame of new sessions (at `probe_rate`).
    pub first_packet: Latency,
    /// Latency of the same flows' next frame (sessions established).
    pub established: Latency,
    /// Rate of the first-packet probe, flows/s.
    pub probe_rate: f64,
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

static TRIAL_ID: AtomicU16 = AtomicU16::new(1);

/// Runs the benchmark and writes the results into `args.out`.
pub fn run(args: &Args) -> Result<Report> {
    let a = args.effective();
    if !nix::unistd::geteuid().is_root() {
        bail!("v6gate bench xlat builds network namespaces: run it as root");
    }
    for &s in &a.sizes {
        if s < pkt::min_frame(true) || s > 1518 {
            bail!("frame size {s}: RFC 8219 IPv6 frame sizes run from 84 to 1518 bytes");
        }
    }
    let v6gate = match &a.v6gate {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating this executable")?,
    };
    let mut report = Report {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: crate::netns::run("uname", &["-r"])
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default(),
        params: format!("{a:?}"),
        duts: Vec::new(),
    };
    // The tester's ceiling per (direction, size), once measured, caps the
    // other DUTs' searches: no DUT can forward more than the tester sends.
    let mut ceiling: Vec<(Dir, usize, f64)> = Vec::new();
    for &dut in &a.dut {
        eprintln!("bench xlat: {} ...", dut.name());
        let r = match availability(dut, &v6gate) {
            Some(why) => DutReport { dut: dut.name(), status: format!("skipped: {why}"), points: vec![], setup: None },
            None => bench_dut(dut, &a, &v6gate, &ceiling),
        };
        if dut == Dut::Tester {
            ceiling = r.points.iter().map(|p| (p.dir, p.frame_size, p.throughput_fps)).collect();
        }
        eprintln!("bench xlat: {}: {}", dut.name(), r.status);
        report.duts.push(r);
    }
    crate::netns::cleanup(&format!("{}-", a.prefix));
    // The generated DUT configurations and logs (kept while a DUT runs).
    let _ = std::fs::remove_dir_all(format!("/run/{}", a.prefix));
    write_outputs(&report, &a.out)?;
    Ok(report)
}

fn have(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why a DUT cannot run here (`None`: it can).
fn availability(dut: Dut, v6gate: &Path) -> Option<String> {
    match dut {
        Dut::Tester | Dut::Kernel => None,
        Dut::TaygaSiit | Dut::TaygaNat64 => (!have("tayga")).then(|| "tayga is not installed".into()),
        Dut::V6gateSiit | Dut::V6gateNat64 => {
            let help = std::process::Command::new(v6gate).args(["run", "--help"]).output();
            match help {
                Ok(o) if o.status.success() => {
                    let example = gate_example(v6gate);
                    let example = String::from_utf8_lossy(&example);
                    let has_nat64 = example.lines().any(|l| l.trim_start_matches(['#', ' ']).starts_with("[nat64]"));
                    if dut == Dut::V6gateNat64 && !has_nat64 {
                        Some("this v6gate has no [nat64]".into())
                    } else {
                        None
                    }
                }
                _ => Some(format!("{} has no `run` subcommand (daemon not built in)", v6gate.display())),
            }
        }
    }
}

fn gate_example(v6gate: &Path) -> Vec<u8> {
    std::process::Command::new(v6gate).args(["config", "example"]).output().map(|o| o.stdout).unwrap_or_default()
}

/// A running DUT process, killed on drop.
struct DutProc {
    child: Option<Child>,
    what: &'static str,
}

impl DutProc {
    fn alive(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            if let Some(st) = c.try_wait()? {
                bail!("{} exited during the test ({st})", self.what);
            }
        }
        Ok(())
    }
}

impl Drop for DutProc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn taskset(ns: &Netns, cpus: &str, cmd: &str) -> std::process::Command {
    let mut c = ns.command("taskset");
    c.args(["-c", cpus, cmd]);
    c
}

fn wait_for_link(ns: &Netns, dev: &str, child: &mut Child) -> Result<()> {
    for _ in 0..100 {
        if ns.ip(&["link", "show", dev]).is_ok() {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("the DUT exited before creating {dev} ({st})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the DUT did not create {dev} within 5 s")
}

fn route_translated(ns: &Netns, nat64: bool) -> Result<()> {
    ns.ip(&["link", "set", TUN, "up"])?;
    ns.ip(&["-6", "route", "replace", POOL6, "dev", TUN])?;
    ns.ip(&["route", "replace", if nat64 { POOL4 } else { SIIT4 }, "dev", TUN])?;
    Ok(())
}

/// The TAYGA configuration for the bench (SIIT: a static map for the IPv6
/// host; NAT64: a dynamic pool).
pub fn tayga_conf(nat64: bool) -> String {
    let mut s = format!("tun-device {TUN}\nipv4-addr {XLAT4}\nprefix {POOL6}\n");
    if nat64 {
        let _ = writeln!(s, "dynamic-pool {POOL4}");
    } else {
        let _ = writeln!(s, "map {HOST6_AS_V4} {HOST6}");
    }
    s
}

/// The v6gate configuration for the bench DUT.
pub fn v6gate_conf(nat64: bool, queues: usize, tun_extra: &[String]) -> String {
    let mut s = String::new();
    if nat64 {
        // Room for the session-setup trials' sessions (they are not reused).
        let _ = write!(
            s,
            "[nat64]\npool6 = \"{POOL6}\"\npool4 = [\"{POOL4}\"]\nmax-sessions = 4194304\nmax-bib = 4194304\n\n"
        );
    } else {
        let _ = write!(
            s,
            "[siit]\npool6 = \"{POOL6}\"\nipv4-address = \"{XLAT4}\"\neamt = [{{ ipv6 = \"{HOST6}/128\", ipv4 = \"{HOST6_AS_V4}/32\" }}]\n\n"
        );
    }
    let _ = write!(s, "[tun]\nname = \"{TUN}\"\nqueues = {queues}\n");
    for l in tun_extra {
        let _ = writeln!(s, "{l}");
    }
    let _ = write!(s, "\n[admin]\nenabled = false\n");
    s
}

fn start_dut(dut: Dut, topo: &BenchTopo, a: &Args, v6gate: &Path, work: &Path) -> Result<DutProc> {
    let ns = &topo.dut;
    let none = DutProc { child: None, what: dut.name() };
    match dut {
        Dut::Tester => Ok(none),
        Dut::Kernel => {
            ns.ip(&["route", "add", SIIT4, "via", &T6_V4.to_string(), "dev", "d6"])?;
            Ok(none)
        }
        Dut::TaygaSiit | Dut::TaygaNat64 => {
            let conf = work.join("tayga.conf");
            std::fs::write(&conf, tayga_conf(dut.stateful()))?;
            let conf = conf.to_string_lossy().into_owned();
            ns.exec("tayga", &["--mktun", "-c", &conf])?;
            route_translated(ns, dut.stateful())?;
            let child = taskset(ns, &a.dut_cpus, "tayga")
                .args(["-c", &conf, "--nodetach"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting tayga")?;
            std::thread::sleep(Duration::from_millis(300));
            let mut p = DutProc { child: Some(child), what: "tayga" };
            p.alive()?;
            Ok(p)
        }
        Dut::V6gateSiit | Dut::V6gateNat64 => {
            let queues = cpu_count(&a.dut_cpus);
            let conf = work.join("v6gate.toml");
            std::fs::write(&conf, v6gate_conf(dut.stateful(), queues, &a.v6gate_tun))?;
            let log = std::fs::File::create(work.join("v6gate.log"))?;
            let mut child = taskset(ns, &a.dut_cpus, &v6gate.to_string_lossy())
                .args(["run", "--config", &conf.to_string_lossy()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting v6gate run")?;
            if let Err(e) = wait_for_link(ns, TUN, &mut child) {
                let _ = child.kill();
                let logtxt = std::fs::read_to_string(work.join("v6gate.log")).unwrap_or_default();
                bail!("{e:#}; v6gate log: {}", logtxt.trim());
            }
            route_translated(ns, dut.stateful())?;
            Ok(DutProc { child: Some(child), what: "v6gate" })
        }
    }
}

/// Number of CPUs in a taskset list such as "0", "0-1" or "0,2".
pub fn cpu_count(list: &str) -> usize {
    let n: usize = list
        .split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        })
        .sum();
    n.max(1)
}

/// The emulated IPv6 host for new-session tests: `2001:db8:46::<tag>:<n>`.
fn host6(tag: u16, n: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x46, 0, 0, 0, tag, n)
}

fn pool6(v4: std::net::Ipv4Addr) -> Ipv6Addr {
    let o = v4.octets();
    Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([o[2], o[3]]))
}

/// Frame templates and ports for one direction.
struct Streams {
    tx: Port,
    rx: Port,
    flows: Arc<Vec<Template>>,
    sent_size: usize,
    rx_v6: bool,
}

fn ports(topo: &BenchTopo, a: &Args, dir: Dir) -> (Port, Port) {
    let p6 = Port { ns: topo.t6.name().to_owned(), ifname: "t6".into(), cpu: None };
    let p4 = Port { ns: topo.t4.name().to_owned(), ifname: "t4".into(), cpu: None };
    match dir {
        Dir::V6ToV4 => (Port { cpu: Some(a.tx_cpu), ..p6 }, Port { cpu: Some(a.rx_cpu), ..p4 }),
        Dir::V4ToV6 => (Port { cpu: Some(a.tx_cpu), ..p4 }, Port { cpu: Some(a.rx_cpu), ..p6 }),
    }
}

/// The headers of each flow for `dut` and `dir`. `nat` maps flow i to the
/// IPv4 source address and port the NAT64 gave it (4to6 through NAT64).
fn headers(dut: Dut, dir: Dir, flow_ports: &[(u16, u16)], nat: Option<&[Option<(IpAddr, u16)>]>) -> Vec<Header> {
    let v6_out = |sport, dport| Header {
        dst_mac: D6_MAC,
        src_mac: T6_MAC,
        src: IpAddr::V6(HOST6),
        dst: IpAddr::V6(pool6(HOST4)),
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
            (Dut::Kernel, Dir::V6ToV4) => {
                Header { src: IpAddr::V4(HOST6_AS_V4), dst: IpAddr::V4(HOST4), ..v6_out(sp, dp) }
            }
            (Dut::Kernel, Dir::V4ToV6) | (Dut::TaygaSiit | Dut::V6gateSiit, Dir::V4ToV6) => {
                v4_in(IpAddr::V4(HOST6_AS_V4), dp, sp)
            }
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

/// Whether the frames this DUT and direction send are IPv6.
fn sends_v6(dut: Dut, dir: Dir) -> bool {
    dir == Dir::V6ToV4 && dut != Dut::Kernel
}

fn streams(topo: &BenchTopo, a: &Args, dut: Dut, dir: Dir, size: usize, hdrs: &[Header]) -> Result<Streams> {
    let sent_size = if sends_v6(dut, dir) { size } else { size - 20 };
    let flows = hdrs.iter().map(|h| Template::new(h, sent_size)).collect::<Result<Vec<_>, _>>()?;
    if flows.is_empty() {
        bail!("no flows to send");
    }
    let (tx, rx) = ports(topo, a, dir);
    // What arrives: IPv6 after a translator in 4to6, IPv4 after one in 6to4;
    // unchanged without a translator.
    let translates = !matches!(dut, Dut::Tester | Dut::Kernel);
    let rx_v6 = if translates { dir == Dir::V4ToV6 } else { sends_v6(dut, dir) };
    Ok(Streams { tx, rx, flows: Arc::new(flows), sent_size, rx_v6 })
}

fn trial(s: &Streams, a: &Args, rate: f64, ms: u64, learn: bool) -> Result<TrialResult> {
    let frames = ((rate * ms as f64 / 1000.0).round() as u64).max(1);
    trial_frames(s, a, rate, frames, learn)
}

fn trial_frames(s: &Streams, a: &Args, rate: f64, frames: u64, learn: bool) -> Result<TrialResult> {
    let spec = TrialSpec {
        tx: s.tx.clone(),
        rx: s.rx.clone(),
        flows: s.flows.clone(),
        rate_pps: rate,
        frames,
        drain: Duration::from_millis(a.drain_ms),
        late: Duration::from_millis(a.late_ms),
        id: TRIAL_ID.fetch_add(1, Ordering::Relaxed),
        learn,
        batch: 32,
        rx_v6: s.rx_v6,
    };
    let r = tester::run_trial(&spec)?;
    if std::env::var_os("V6GATE_BENCH_DEBUG").is_some() {
        eprintln!(
            "  trial {}: rate {rate:.0} sent {} ({:.0}/s) received {} late {} p50 {} us p99 {} us",
            spec.id,
            r.sent,
            r.sent_pps,
            r.received,
            r.late,
            tester::percentile(&r.latencies, 0.5) / 1000,
            tester::percentile(&r.latencies, 0.99) / 1000
        );
    }
    Ok(r)
}

/// A trial passes with no frame lost or late, at (nearly) the offered rate
/// (a tester that cannot keep up fails the trial: its ceiling shows).
fn passed(r: &TrialResult, rate: f64) -> bool {
    r.lost() == 0 && r.sent_pps >= 0.95 * rate
}

fn measure_point(s: &Streams, a: &Args, dir: Dir, size: usize, max: f64, proc_: &mut DutProc) -> Result<Point> {
    // Warm-up (RFC 2544 §23 learning frames): every flow once, slowly.
    trial(s, a, 20_000.0, (s.flows.len() as u64 * 2 * 1000 / 20_000).max(50), false)?;
    let search = Search { max, resolution: a.resolution, max_trials: a.max_trials };
    let found = search.run(|rate| {
        proc_.alive()?;
        let r = trial(s, a, rate, a.trial_ms, false)?;
        Ok(passed(&r, rate))
    })?;
    proc_.alive()?;
    let tput = found.rate;
    let mut p = Point {
        dir,
        frame_size: size,
        sent_frame_size: s.sent_size,
        flows: s.flows.len(),
        throughput_fps: tput,
        throughput_mbps: tput * s.sent_size as f64 * 8.0 / 1e6,
        search: found.trials,
        loss: vec![],
        latency: None,
        by_load: vec![],
    };
    if tput <= 0.0 {
        return Ok(p);
    }
    let at = |pct: u32| -> Result<LoadResult> {
        let rate = tput * f64::from(pct) / 100.0;
        let r = trial(s, a, rate, a.trial_ms, false)?;
        Ok(LoadResult { load_pct: pct, rate_fps: rate, loss_ratio: r.loss_ratio(), latency: Latency::of(&r.latencies) })
    };
    for &pct in &a.overload {
        p.loss.push(at(pct)?);
    }
    let full = at(100)?;
    p.latency = Some(full.latency);
    for &pct in &a.loads {
        p.by_load.push(at(pct)?);
    }
    p.by_load.push(full);
    Ok(p)
}

/// NAT64 4to6 needs sessions: send every flow 6to4 and learn the IPv4
/// address and port the DUT mapped it to.
fn learn_nat(topo: &BenchTopo, a: &Args, dut: Dut, flow_ports: &[(u16, u16)]) -> Result<Vec<Option<(IpAddr, u16)>>> {
    let hdrs = headers(dut, Dir::V6ToV4, flow_ports, None);
    let s = streams(topo, a, dut, Dir::V6ToV4, 84, &hdrs)?;
    let ms = (flow_ports.len() as u64 * 3 * 1000 / 20_000).max(100);
    let r = trial(&s, a, 20_000.0, ms, true)?;
    Ok(r.seen_src)
}

fn new_flow_streams(topo: &BenchTopo, a: &Args, tag: u16, n: usize) -> Result<Streams> {
    let per_addr = 64512usize;
    let ports = pkt::rfc4814_ports(n.min(per_addr), 4814 + u64::from(tag));
    let hdrs: Vec<Header> = (0..n)
        .map(|i| {
            let (sp, dp) = ports[i % ports.len()];
            Header {
                dst_mac: D6_MAC,
                src_mac: T6_MAC,
                src: IpAddr::V6(host6(tag, 1 + (i / per_addr) as u16)),
                dst: IpAddr::V6(pool6(HOST4)),
                sport: sp,
                dport: dp,
            }
        })
        .collect();
    streams(topo, a, Dut::V6gateNat64, Dir::V6ToV4, 84, &hdrs)
}

/// Sends every template exactly once at `rate` (a trial of `flows` frames).
fn once_each(s: &Streams, a: &Args, rate: f64) -> Result<TrialResult> {
    trial_frames(s, a, rate, s.flows.len() as u64, false)
}

fn measure_setup(topo: &BenchTopo, a: &Args, proc_: &mut DutProc) -> Result<Setup> {
    // First-packet latency: new flows at a low rate, then the same flows again.
    let probe = new_flow_streams(topo, a, 1, a.setup_flows)?;
    let first = once_each(&probe, a, a.setup_probe_rate)?;
    let again = once_each(&probe, a, a.setup_probe_rate)?;
    proc_.alive()?;
    // Setup rate: each trial sends fresh flows (a new IPv6 source prefix tag).
    let mut tag = 100u16;
    let search = Search { max: a.max_rate.min(1_000_000.0), resolution: a.resolution, max_trials: a.max_trials };
    let found = search.run(|rate| {
        proc_.alive()?;
        tag += 1;
        // At most 131,072 new sessions per trial (a shorter trial at high
        // rates): the templates stay small and a dozen trials stay within
        // the DUT's session table.
        let n = ((rate * a.trial_ms as f64 / 1000.0) as usize).clamp(1, 1 << 17);
        let s = new_flow_streams(topo, a, tag, n)?;
        let r = once_each(&s, a, rate)?;
        Ok(passed(&r, rate))
    })?;
    Ok(Setup {
        setup_rate_fps: found.rate,
        search: found.trials,
        first_packet: Latency::of(&first.latencies),
        established: Latency::of(&again.latencies),
        probe_rate: a.setup_probe_rate,
    })
}

fn bench_dut(dut: Dut, a: &Args, v6gate: &Path, ceiling: &[(Dir, usize, f64)]) -> DutReport {
    let mut rep = DutReport { dut: dut.name(), status: "ok".into(), points: vec![], setup: None };
    let res = (|| -> Result<()> {
        let work = PathBuf::from(format!("/run/{}", a.prefix));
        std::fs::create_dir_all(&work)?;
        let flow_ports = pkt::rfc4814_ports(a.flows, 4814);
        for &dir in &a.dir {
            // A fresh topology and DUT per direction (NAT64 state from the
            // other direction does not carry over).
            let topo = BenchTopo::create(&a.prefix, dut == Dut::Tester)?;
            let mut proc_ = start_dut(dut, &topo, a, v6gate, &work)?;
            let nat = if dut.stateful() && dir == Dir::V4ToV6 {
                let m = learn_nat(&topo, a, dut, &flow_ports)?;
                if m.iter().all(Option::is_none) {
                    bail!("no NAT64 session was created by the 6to4 warm-up");
                }
                Some(m)
            } else {
                None
            };
            let hdrs = headers(dut, dir, &flow_ports, nat.as_deref());
            for &size in &a.sizes {
                let s = streams(&topo, a, dut, dir, size, &hdrs)?;
                let max = ceiling
                    .iter()
                    .find(|c| c.0 == dir && c.1 == size && c.2 > 0.0)
                    .map_or(a.max_rate, |c| c.2.min(a.max_rate));
                let p = measure_point(&s, a, dir, size, max, &mut proc_)?;
                eprintln!(
                    "bench xlat: {} {:?} {size}: {:.0} fps, p50 {} us",
                    dut.name(),
                    dir,
                    p.throughput_fps,
                    p.latency.map_or(0, |l| l.p50_ns / 1000)
                );
                rep.points.push(p);
            }
        }
        if dut.stateful() {
            let topo = BenchTopo::create(&a.prefix, false)?;
            let mut proc_ = start_dut(dut, &topo, a, v6gate, &work)?;
            rep.setup = Some(measure_setup(&topo, a, &mut proc_)?);
        }
        Ok(())
    })();
    if let Err(e) = res {
        rep.status = format!("error: {e:#}");
    }
    rep
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

/// The Markdown table of a report.
pub fn markdown(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# v6gate bench xlat (RFC 8219 / RFC 2544)\n");
    let _ = writeln!(o, "{} CPUs, kernel {}. Parameters: `{}`\n", r.cpus, r.kernel, r.params);
    let _ = writeln!(
        o,
        "| DUT | dir | frame | throughput (fps) | Mbit/s | loss above (load: loss) | lat p50 (us) | p99 | p99.9 | PDV (us) |"
    );
    let _ = writeln!(o, "|---|---|---:|---:|---:|---|---:|---:|---:|---:|");
    for d in &r.duts {
        if d.points.is_empty() {
            let _ = writeln!(o, "| {} | | | {} | | | | | | |", d.dut, d.status);
            continue;
        }
        for p in &d.points {
            let loss: Vec<String> =
                p.loss.iter().map(|l| format!("{}%: {:.2}%", l.load_pct, l.loss_ratio * 100.0)).collect();
            let l = p.latency.unwrap_or_default();
            let dir = match p.dir {
                Dir::V6ToV4 => "6to4",
                Dir::V4ToV6 => "4to6",
            };
            let _ = writeln!(
                o,
                "| {} | {dir} | {} | {:.0} | {:.1} | {} | {} | {} | {} | {} |",
                d.dut,
                p.frame_size,
                p.throughput_fps,
                p.throughput_mbps,
                loss.join(", "),
                us(l.p50_ns),
                us(l.p99_ns),
                us(l.p999_ns),
                us(l.pdv_ns)
            );
        }
        if !d.status.starts_with("ok") {
            let _ = writeln!(o, "| {} | | | {} | | | | | | |", d.dut, d.status);
        }
    }
    let setups: Vec<&DutReport> = r.duts.iter().filter(|d| d.setup.is_some()).collect();
    if !setups.is_empty() {
        let _ = writeln!(o, "\n## NAT64 session setup\n");
        let _ = writeln!(
            o,
            "| DUT | setup rate (new flows/s) | first packet p50 (us) | p99 | established p50 (us) | p99 |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
        for d in setups {
            if let Some(s) = &d.setup {
                let _ = writeln!(
                    o,
                    "| {} | {:.0} | {} | {} | {} | {} |",
                    d.dut,
                    s.setup_rate_fps,
                    us(s.first_packet.p50_ns),
                    us(s.first_packet.p99_ns),
                    us(s.established.p50_ns),
                    us(s.established.p99_ns)
                );
            }
        }
    }
    o
}

fn write_outputs(r: &Report, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(out.join("results.md"), markdown(r))?;
    for dir in [Dir::V6ToV4, Dir::V4ToV6] {
        let dname = if dir == Dir::V6ToV4 { "6to4" } else { "4to6" };
        let series: Vec<Series> = r
            .duts
            .iter()
            .map(|d| Series {
                name: d.dut.into(),
                points: d
                    .points
                    .iter()
                    .filter(|p| p.dir == dir)
                    .map(|p| (p.frame_size as f64, p.throughput_fps / 1e6))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let plot = Plot {
            title: format!("Zero-loss throughput, {dname}"),
            x_label: "IPv6 frame size (bytes)".into(),
            y_label: "Mframes/s".into(),
            series,
        };
        std::fs::write(out.join(format!("throughput-{dname}.svg")), plot.to_svg())?;
        let smallest = r.duts.iter().flat_map(|d| d.points.iter()).map(|p| p.frame_size).min().unwrap_or(84);
        let series: Vec<Series> = r
            .duts
            .iter()
            .filter_map(|d| {
                let p = d.points.iter().find(|p| p.dir == dir && p.frame_size == smallest)?;
                let mut pts: Vec<(f64, f64)> =
                    p.by_load.iter().map(|l| (f64::from(l.load_pct), l.latency.p50_ns as f64 / 1000.0)).collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                Some(Series { name: d.dut.into(), points: pts })
            })
            .collect();
        let plot = Plot {
            title: format!("Median latency by load, {dname}, {smallest}-byte frames"),
            x_label: "load (% of the DUT's throughput)".into(),
            y_label: "median latency (us)".into(),
            series,
        };
        std::fs::write(out.join(format!("latency-{dname}.svg")), plot.to_svg())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_count("0"), 1);
        assert_eq!(cpu_count("0-1"), 2);
        assert_eq!(cpu_count("0,2-4"), 4);
        assert_eq!(cpu_count("x"), 1);
    }

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
    }

    #[test]
    fn configs_name_the_bench_addresses() {
        let t = tayga_conf(false);
        assert!(t.contains("map 192.0.2.130 2001:db8:46::10") && t.contains("prefix 2001:db8:64::/96"));
        assert!(tayga_conf(true).contains("dynamic-pool 203.0.113.128/25"));
        let v = v6gate_conf(false, 1, &["io = \"poll\"".to_string()]);
        assert!(v.contains("[siit]") && v.contains("name = \"xlat0\"") && v.contains("queues = 1\nio = \"poll\"\n"));
    }

    #[test]
    fn quick_shrinks_the_run() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct W {
            #[command(flatten)]
            a: Args,
        }
        let a = W::parse_from(["x", "--quick"]).a.effective();
        assert_eq!(a.sizes, vec![84, 1518]);
        assert!(a.trial_ms <= 500 && a.max_trials <= 8);
        let full = W::parse_from(["x"]).a.effective();
        assert_eq!(full.sizes, vec![84, 512, 1280, 1518]);
        assert_eq!(full.dir, vec![Dir::V6ToV4, Dir::V4ToV6]);
    }

    #[test]
    fn markdown_lists_every_dut() {
        let r = Report {
            cpus: 2,
            kernel: "k".into(),
            params: "p".into(),
            duts: vec![
                DutReport {
                    dut: "tayga-siit",
                    status: "skipped: tayga is not installed".into(),
                    points: vec![],
                    setup: None,
                },
                DutReport {
                    dut: "kernel",
                    status: "ok".into(),
                    points: vec![Point {
                        dir: Dir::V6ToV4,
                        frame_size: 84,
                        sent_frame_size: 64,
                        flows: 2,
                        throughput_fps: 1000.0,
                        throughput_mbps: 0.512,
                        search: vec![],
                        loss: vec![],
                        latency: Some(Latency { p50_ns: 12_345, ..Default::default() }),
                        by_load: vec![],
                    }],
                    setup: None,
                },
            ],
        };
        let md = markdown(&r);
        assert!(md.contains("| tayga-siit | | | skipped: tayga is not installed"));
        assert!(md.contains("| kernel | 6to4 | 84 | 1000 | 0.5 |  | 12.3 |"));
    }
}
