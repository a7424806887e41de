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
//! Topology (one trial = a fresh relay process in the same namespaces):
//!
//! ```text
//!  ua6 (IPv6 only)            relay (DUT)                   ua4 (IPv4 only)
//!  2001:db8:6::2 ---veth--- 2001:db8:6::1 | 10.0.4.1 ---veth--- 10.0.4.2
//!                           ng on 127.0.0.1:2223
//! ```

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Parser, ValueEnum};
use lab::netns::{self, Netns};
use serde::Serialize;

use crate::ng::{self, Value};
use crate::report::{self, LinePlot, Series};
use crate::tester::{self, Load, Outcome, Stream};

/// UA and relay addresses.
pub const UA6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 2);
pub const RELAY6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, 1);
pub const UA4: Ipv4Addr = Ipv4Addr::new(10, 0, 4, 2);
pub const RELAY4: Ipv4Addr = Ipv4Addr::new(10, 0, 4, 1);
/// IPv6 addresses of the ua4 side, only in the kernel-forwarding (ceiling) topology.
pub const UA4_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 4, 0, 0, 0, 0, 2);
pub const RELAY_V6_4: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 4, 0, 0, 0, 0, 1);
/// Where the relay listens for ng commands, inside the relay namespace.
pub const NG: &str = "127.0.0.1:2223";

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
    fn label(self) -> &'static str {
        match self {
            Direction::V6v4 => "IPv6->IPv4",
            Direction::V4v6 => "IPv4->IPv6",
            Direction::Both => "both directions",
        }
    }
    fn key(self) -> &'static str {
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
    V6gate,
    Rtpengine,
}

impl RelayKind {
    fn name(self) -> &'static str {
        match self {
            RelayKind::V6gate => "v6gate",
            RelayKind::Rtpengine => "rtpengine",
        }
    }
}

/// `v6gate bench trgw`: G.711 calls through a media relay (the NICI TrGW test).
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// Output directory for results.json, results.md and the SVG plots.
    #[arg(long, default_value = "bench-results/trgw")]
    pub out: PathBuf,
    /// Relays to measure.
    #[arg(long, value_delimiter = ',', default_value = "v6gate,rtpengine")]
    pub relays: Vec<RelayKind>,
    /// The v6gate binary (default: this executable).
    #[arg(long)]
    pub v6gate_bin: Option<PathBuf>,
    /// The rtpengine binary; skipped with a note when it cannot be found.
    #[arg(long, default_value = "rtpengine")]
    pub rtpengine_bin: PathBuf,
    /// Media directions.
    #[arg(long, value_delimiter = ',', default_value = "v6v4,v4v6,both")]
    pub directions: Vec<Direction>,
    /// Numbers of concurrent calls for the curves (Figures 8 and 9).
    #[arg(long, value_delimiter = ',', default_value = "100,250,500,1000,1500,2000")]
    pub calls: Vec<u32>,
    /// Packets per stream (the paper sends 10,000; see --full).
    #[arg(long, default_value_t = 500)]
    pub packets: u32,
    /// Send the paper's 10,000 packets per stream (200 s per trial).
    #[arg(long)]
    pub full: bool,
    /// Packets per stream in the zero-loss search trials (default: --packets).
    #[arg(long)]
    pub search_packets: Option<u32>,
    /// Skip the search for the maximum zero-loss number of calls.
    #[arg(long)]
    pub no_search: bool,
    /// Directions searched (default: v6v4 only, the issue's bar).
    #[arg(long, value_delimiter = ',', default_value = "v6v4")]
    pub search_directions: Vec<Direction>,
    /// First number of calls of the search (doubled until loss, then bisected).
    #[arg(long, default_value_t = 250)]
    pub search_start: u32,
    /// In the search, a failing trial is run again up to this many times
    /// and fails only if every run fails (a one-off hiccup of a shared
    /// machine must not halve the result). Every run is reported.
    #[arg(long, default_value_t = 1)]
    pub confirm: u32,
    /// Upper bound of every search.
    #[arg(long, default_value_t = 8000)]
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
}

/// Parses a taskset-style CPU list ("0", "0-1", "0,2-3").
pub fn parse_cpus(s: &str) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse()?, b.parse()?);
                if a > b {
                    bail!("bad CPU range {part}");
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().with_context(|| format!("bad CPU {part:?}"))?),
        }
    }
    Ok(v)
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
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Result of a search for the maximum zero-loss number of calls.
#[derive(Debug, Clone, Serialize)]
pub struct Search {
    /// The largest number of calls that passed (0 when none did).
    pub max_zero_loss: u32,
    /// The smallest that failed, when one did.
    pub first_failure: Option<u32>,
    /// No failure up to the bound (the relay may do more).
    pub capped_at: Option<u32>,
    pub trials: Vec<Trial>,
}

/// One device in one direction.
#[derive(Debug, Clone, Serialize)]
pub struct DirResult {
    pub direction: Direction,
    pub points: Vec<Trial>,
    pub search: Option<Search>,
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
    pub sockets_per_side: usize,
    pub batch: usize,
    pub online_cpus: usize,
    pub kernel: String,
    /// Kernel IPv6 forwarding with no relay: the tester's own ceiling.
    pub ceiling: Option<Device>,
    pub relays: Vec<Device>,
    pub notes: Vec<String>,
}

/// Ethernet frame sizes of the probes (the paper's 214 and 234 bytes).
#[derive(Debug, Clone, Serialize)]
pub struct FrameBytes {
    pub ipv4: usize,
    pub ipv6: usize,
}

/// The three namespaces of a run.
#[derive(Debug)]
pub struct Topology {
    pub ua6: Netns,
    pub relay: Netns,
    pub ua4: Netns,
    /// Kernel-forwarding variant: ua4 also has IPv6 and the relay routes it.
    pub kernel: bool,
}

impl Topology {
    /// Builds ua6 (IPv6 only) -- relay -- ua4 (IPv4 only). With `kernel`,
    /// ua4 gets an IPv6 address too and the relay namespace forwards IPv6
    /// (the tester-ceiling path).
    pub fn build(kernel: bool) -> Result<Topology> {
        let tag = if kernel { "tbk" } else { "tbr" };
        let ua6 = Netns::unique(&format!("v6b-{tag}-ua6"))?;
        let relay = Netns::unique(&format!("v6b-{tag}-relay"))?;
        let ua4 = Netns::unique(&format!("v6b-{tag}-ua4"))?;
        // No duplicate address detection (link-local addresses included):
        // neighbour discovery must work from the first packet.
        for ns in [&ua6, &relay, &ua4] {
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        }
        let id = std::process::id() % 100_000;
        let (u6, r6, u4, r4) =
            (format!("{tag}{id}u6"), format!("{tag}{id}r6"), format!("{tag}{id}u4"), format!("{tag}{id}r4"));
        netns::veth(&ua6, &u6, &relay, &r6)?;
        netns::veth(&ua4, &u4, &relay, &r4)?;
        ua6.ip(&["-6", "addr", "add", &format!("{UA6}/64"), "dev", &u6, "nodad"])?;
        relay.ip(&["-6", "addr", "add", &format!("{RELAY6}/64"), "dev", &r6, "nodad"])?;
        ua6.ip(&["-6", "route", "add", "default", "via", &RELAY6.to_string()])?;
        relay.ip(&["addr", "add", &format!("{RELAY4}/24"), "dev", &r4])?;
        ua4.ip(&["addr", "add", &format!("{UA4}/24"), "dev", &u4])?;
        ua4.ip(&["route", "add", "default", "via", &RELAY4.to_string()])?;
        if kernel {
            ua4.ip(&["-6", "addr", "add", &format!("{UA4_V6}/64"), "dev", &u4, "nodad"])?;
            relay.ip(&["-6", "addr", "add", &format!("{RELAY_V6_4}/64"), "dev", &r4, "nodad"])?;
            ua4.ip(&["-6", "route", "add", "default", "via", &RELAY_V6_4.to_string()])?;
            relay.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        } else {
            ua4.sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        }
        // Resolve the neighbours before the first trial.
        ua6.exec("ping", &["-6", "-c1", "-W2", &RELAY6.to_string()]).context("ua6 cannot reach the relay")?;
        ua4.exec("ping", &["-4", "-c1", "-W2", &RELAY4.to_string()]).context("ua4 cannot reach the relay")?;
        if kernel {
            ua6.exec("ping", &["-6", "-c1", "-W2", &UA4_V6.to_string()]).context("ua6 cannot reach ua4 over IPv6")?;
        }
        Ok(Topology { ua6, relay, ua4, kernel })
    }
}

/// Runs `f` on a thread inside `ns` (sockets it opens belong there).
pub fn in_netns<T: Send>(ns: &Netns, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter_thread()?;
            f()
        })
        .join()
        .map_err(|_| anyhow!("thread inside {} panicked", ns.name()))?
    })
}

fn ua_sockets(ns: &Netns, ip: IpAddr, k: usize) -> Result<Vec<UdpSocket>> {
    in_netns(ns, || {
        (0..k)
            .map(|_| {
                let s =
                    UdpSocket::bind(SocketAddr::new(ip, 0)).with_context(|| format!("binding a UA socket on {ip}"))?;
                tester::big_buffers(&s, 8 << 20);
                Ok(s)
            })
            .collect()
    })
}

/// A relay process, killed on drop.
#[derive(Debug)]
struct RelayProc {
    child: Child,
    log: PathBuf,
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RelayProc {
    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
    fn cpu_ticks(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the name.
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    }
}

struct Ctx<'a> {
    args: &'a Args,
    tester_cpus: Vec<usize>,
    relay_threads: usize,
    work: PathBuf,
    v6gate_bin: PathBuf,
}

/// The `[trgw]` configuration given to `v6gate trgw --config`: one media
/// interface with both families (as rtpengine gets), ng on [`NG`].
pub fn v6gate_config(v4: Ipv4Addr, v6: Ipv6Addr, ports: (u16, u16), workers: usize) -> String {
    format!(
        "# v6gate bench trgw: relay between the ua6 and ua4 namespaces\n[trgw]\nng = \"{NG}\"\n\
         port-min = {}\nport-max = {}\nworkers = {workers}\n\n[[trgw.interface]]\nname = \"pub\"\n\
         ipv4 = \"{v4}\"\nipv6 = \"{v6}\"\n",
        ports.0, ports.1
    )
}

fn start_relay(ctx: &Ctx, topo: &Topology, kind: RelayKind, tag: &str) -> Result<RelayProc> {
    let log = ctx.work.join(format!("{}-{tag}.log", kind.name()));
    let logf = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = if ctx.args.realtime {
        let mut c = topo.relay.command("chrt");
        c.args(["-f", "10", "taskset"]);
        c
    } else {
        topo.relay.command("taskset")
    };
    cmd.arg("-c").arg(&ctx.args.relay_cpus);
    match kind {
        RelayKind::V6gate => {
            let cfg = ctx.work.join("v6gate-trgw.toml");
            std::fs::write(&cfg, v6gate_config(RELAY4, RELAY6, (20000, 59999), ctx.relay_threads))?;
            cmd.arg(&ctx.v6gate_bin).arg("trgw").arg("--config").arg(&cfg);
        }
        RelayKind::Rtpengine => {
            cmd.arg(&ctx.args.rtpengine_bin).args([
                "--config-file=none",
                "--foreground",
                "--table=-1",
                &format!("--interface={RELAY4}"),
                &format!("--interface={RELAY6}"),
                &format!("--listen-ng={NG}"),
                "--port-min=20000",
                "--port-max=59999",
                &format!("--num-threads={}", ctx.relay_threads),
                "--log-stderr",
                "--log-level=4",
                "--delete-delay=0",
            ]);
        }
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("starting {}", kind.name()))?;
    let mut p = RelayProc { child, log };
    // Wait for ng to answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    let server: SocketAddr = NG.parse()?;
    let mut client = in_netns(&topo.relay, || ng::Client::connect(server))?;
    client.timeout = Duration::from_millis(200);
    loop {
        if let Ok(Some(st)) = p.child.try_wait() {
            bail!("{} exited ({st}) at start:\n{}", kind.name(), p.log_tail());
        }
        if client.ping().is_ok() {
            return Ok(p);
        }
        if Instant::now() > deadline {
            bail!("{} did not answer ng ping on {NG} within 10 s:\n{}", kind.name(), p.log_tail());
        }
        std::thread::sleep(tester::POLL);
    }
}

/// A realistic offer/answer SDP body for one G.711 call leg.
pub fn sdp(ip: IpAddr, port: u16, sess: u64) -> String {
    let fam = if ip.is_ipv4() { "IP4" } else { "IP6" };
    format!(
        "v=0\r\no=- {sess} 1 IN {fam} {ip}\r\ns=v6gate-bench\r\nc=IN {fam} {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n\
         a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=ptime:20\r\na=sendrecv\r\n"
    )
}

fn reply_addr(reply: &Value, want_v4: bool, what: &str) -> Result<SocketAddr> {
    let sdp =
        reply.get("sdp").and_then(Value::as_str).ok_or_else(|| anyhow!("{what}: reply without sdp: {reply:?}"))?;
    let a = ng::sdp_audio_addr(sdp).ok_or_else(|| anyhow!("{what}: no audio address in the relay's SDP:\n{sdp}"))?;
    if a.is_ipv4() != want_v4 {
        bail!(
            "{what}: the relay's SDP has {} but the other side is IPv{}:\n{sdp}",
            a.ip(),
            if want_v4 { 4 } else { 6 }
        );
    }
    Ok(a)
}

/// Sets up `n` calls; returns per call (relay address for ua6 to send to,
/// relay address for ua4 to send to).
fn setup_calls(client: &mut ng::Client, n: u32, p6: &[u16], p4: &[u16]) -> Result<Vec<(SocketAddr, SocketAddr)>> {
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let call_id = format!("v6gate-bench-{}-{i}", std::process::id());
        let offer = ng::dict([
            ("command", "offer".into()),
            ("call-id", call_id.clone().into()),
            ("from-tag", format!("ua6-{i}").into()),
            ("sdp", sdp(IpAddr::V6(UA6), p6[i % p6.len()], i as u64).into()),
            ("address family", "IP4".into()),
            ("replace", vec!["origin", "session-connection"].into()),
            ("ICE", "remove".into()),
        ]);
        let r = client.request(&offer).with_context(|| format!("ng offer of call {i}"))?;
        let to_ua4 = reply_addr(&r, true, "offer")?; // where ua4 sends
        let answer = ng::dict([
            ("command", "answer".into()),
            ("call-id", call_id.into()),
            ("from-tag", format!("ua6-{i}").into()),
            ("to-tag", format!("ua4-{i}").into()),
            ("sdp", sdp(IpAddr::V4(UA4), p4[i % p4.len()], i as u64).into()),
            ("address family", "IP6".into()),
            ("replace", vec!["origin", "session-connection"].into()),
            ("ICE", "remove".into()),
        ]);
        let r = client.request(&answer).with_context(|| format!("ng answer of call {i}"))?;
        let to_ua6 = reply_addr(&r, false, "answer")?; // where ua6 sends
        out.push((to_ua6, to_ua4));
    }
    Ok(out)
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

/// One trial: fresh relay (or kernel forwarding), `n` calls, media, result.
fn trial(ctx: &Ctx, topo: &Topology, relay: Option<RelayKind>, dir: Direction, n: u32, packets: u32) -> Result<Trial> {
    let k = ctx.args.sockets.clamp(1, n.max(1) as usize);
    let ua4_ip = if topo.kernel { IpAddr::V6(UA4_V6) } else { IpAddr::V4(UA4) };
    let s6 = ua_sockets(&topo.ua6, IpAddr::V6(UA6), k)?;
    let s4 = ua_sockets(&topo.ua4, ua4_ip, k)?;
    let (p6, p4) = (local_ports(&s6)?, local_ports(&s4)?);
    let setup_start = Instant::now();
    let (proc_, dst) = match relay {
        Some(kind) => {
            let p = start_relay(ctx, topo, kind, &format!("{}-{n}", dir.key()))?;
            let server: SocketAddr = NG.parse()?;
            let mut client = in_netns(&topo.relay, || ng::Client::connect(server))?;
            let dst =
                setup_calls(&mut client, n, &p6, &p4).map_err(|e| anyhow!("{e:#}\nrelay log:\n{}", p.log_tail()))?;
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
    let cpu0 = proc_.as_ref().and_then(RelayProc::cpu_ticks);
    let t = Instant::now();
    let outcome = tester::run(&[s6, s4], &load)?;
    let wall = t.elapsed().as_secs_f64();
    let cpu1 = proc_.as_ref().and_then(RelayProc::cpu_ticks);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let relay_cpu = cpu0.zip(cpu1).map(|(a, b)| (b.saturating_sub(a)) as f64 / hz / wall);
    if let Some(mut p) = proc_ {
        if let Ok(Some(st)) = p.child.try_wait() {
            bail!("relay exited during the trial ({st}):\n{}", p.log_tail());
        }
    }
    Ok(Trial { calls: n, packets, passed: outcome.passes(), setup_s, relay_cpu, outcome })
}

fn search(
    mut run: impl FnMut(u32) -> Result<Trial>,
    start: u32,
    max: u32,
    confirm: u32,
    log: &mut dyn FnMut(&Trial),
) -> Result<Search> {
    let mut trials = Vec::new();
    // Runs N; a failure is repeated up to `confirm` times and stands only
    // when every run fails. Every run is kept.
    let mut judge = |n: u32, trials: &mut Vec<Trial>| -> Result<bool> {
        for attempt in 0..=confirm {
            let t = run(n)?;
            log(&t);
            let pass = t.passed;
            trials.push(t);
            if pass {
                return Ok(true);
            }
            if attempt < confirm {
                eprintln!("  {n} calls failed: running it again (--confirm)");
            }
        }
        Ok(false)
    };
    let (mut lo, mut hi) = (0u32, None::<u32>);
    let mut n = start.clamp(1, max.max(1));
    loop {
        if judge(n, &mut trials)? {
            lo = n;
            if n >= max {
                break;
            }
            n = (n.saturating_mul(2)).min(max);
        } else {
            hi = Some(n);
            break;
        }
    }
    if let Some(mut h) = hi {
        while h - lo > (lo / 20).max(10) {
            let mid = lo + (h - lo) / 2;
            if judge(mid, &mut trials)? {
                lo = mid;
            } else {
                h = mid;
            }
        }
        hi = Some(h);
    }
    Ok(Search { max_zero_loss: lo, first_failure: hi, capped_at: if hi.is_none() { Some(max) } else { None }, trials })
}

fn print_trial(who: &str, dir: Direction, t: &Trial) {
    let o = &t.outcome;
    eprintln!(
        "  {who:<9} {:<15} {:>5} calls: loss {:>8.4}% (missing {}, late {}), latency avg {:.0} p50 {:.0} p99 {:.0} p99.9 {:.0} µs{}{} send-lag p99 {:.0} µs{}",
        dir.label(),
        t.calls,
        o.loss_rate * 100.0,
        o.missing,
        o.late,
        o.latency.mean_us,
        o.latency.p50_us,
        o.latency.p99_us,
        o.latency.p999_us,
        if o.rising_queue { ", RISING QUEUE" } else { "" },
        t.relay_cpu.map(|c| format!(", relay CPU {:.0}%", c * 100.0)).unwrap_or_default(),
        o.send_lag.p99_us,
        if t.passed { "" } else { "  [fail]" },
    );
}

fn measure_device(ctx: &Ctx, topo: &Topology, relay: Option<RelayKind>, name: &str, max_calls: u32) -> Vec<DirResult> {
    let a = ctx.args;
    let packets = if a.full { 10_000 } else { a.packets };
    let spackets = a.search_packets.unwrap_or(packets);
    let mut out = Vec::new();
    for &dir in &a.directions {
        let mut r = DirResult { direction: dir, points: Vec::new(), search: None, error: None };
        let res: Result<()> = (|| {
            let want_search = !a.no_search && (relay.is_none() || a.search_directions.contains(&dir));
            if relay.is_some() || !want_search {
                for &n in &a.calls {
                    let t = trial(ctx, topo, relay, dir, n, packets)?;
                    print_trial(name, dir, &t);
                    r.points.push(t);
                }
            }
            if want_search {
                let s = search(
                    |n| trial(ctx, topo, relay, dir, n, spackets),
                    a.search_start,
                    max_calls,
                    a.confirm,
                    &mut |t| print_trial(name, dir, t),
                )?;
                eprintln!(
                    "  {name:<9} {:<15} max zero-loss calls: {}{}",
                    dir.label(),
                    s.max_zero_loss,
                    s.capped_at.map(|c| format!(" (no loss up to the bound {c})")).unwrap_or_default()
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

fn version_of(kind: RelayKind, ctx: &Ctx) -> Option<String> {
    let (bin, arg) = match kind {
        RelayKind::V6gate => (ctx.v6gate_bin.clone(), "--version"),
        RelayKind::Rtpengine => (ctx.args.rtpengine_bin.clone(), "--version"),
    };
    let o = std::process::Command::new(bin).arg(arg).output().ok()?;
    let s = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    s.lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
}

fn find_in_path(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return bin.exists().then(|| bin.to_path_buf());
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(bin)).find(|p| p.exists())
}

/// Runs the bench and writes the results; returns the report.
pub fn run(args: Args) -> Result<Report> {
    if !nix::unistd::geteuid().is_root() {
        bail!("v6gate bench trgw needs root (network namespaces)");
    }
    let tester_cpus = parse_cpus(&args.tester_cpus)?;
    let relay_cpus = parse_cpus(&args.relay_cpus)?;
    if relay_cpus.is_empty() {
        bail!("--relay-cpus is empty");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let work = std::env::temp_dir().join(format!("v6gate-bench-trgw-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    /// Removes the work directory (relay configs and logs) however the run ends.
    struct RemoveDir(PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _remove_work = RemoveDir(work.clone());
    let v6gate_bin = match &args.v6gate_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the v6gate binary")?,
    };
    let relay_threads = args.relay_threads.unwrap_or(relay_cpus.len());
    let ctx = Ctx { args: &args, tester_cpus, relay_threads, work: work.clone(), v6gate_bin };
    netns::cleanup(&format!("v6b-tbr-ua6-{}-", std::process::id()));
    let mut notes = vec![format!(
        "CPU arrangement: tester threads on CPU(s) {}, relay process on CPU(s) {} (taskset), {} relay worker thread(s); \
         kernel softirq work for the veth links runs on whichever CPU sends.{}",
        args.tester_cpus,
        args.relay_cpus,
        relay_threads,
        if args.realtime { " Relay and tester threads ran with SCHED_FIFO priority 10." } else { "" }
    )];
    let packets = if args.full { 10_000 } else { args.packets };
    eprintln!(
        "v6gate bench trgw: {packets} packets per stream, tester on CPU {}, relay on CPU {}",
        args.tester_cpus, args.relay_cpus
    );

    let mut max_for_relays = args.max_calls;
    let ceiling = if args.no_ceiling {
        None
    } else {
        eprintln!("tester ceiling (kernel IPv6 forwarding, no relay):");
        let topo = Topology::build(true)?;
        let dirs = measure_device(&ctx, &topo, None, "kernel", args.max_calls);
        if let Some(c) = dirs.iter().find(|d| d.direction == Direction::V6v4).and_then(|d| d.search.as_ref()) {
            if c.capped_at.is_none() && c.max_zero_loss > 0 {
                max_for_relays = c.max_zero_loss;
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
            RelayKind::V6gate => Some(ctx.v6gate_bin.clone()),
            RelayKind::Rtpengine => find_in_path(&args.rtpengine_bin),
        };
        let Some(_) = bin else {
            let note = format!("{name} skipped: {} not found", args.rtpengine_bin.display());
            eprintln!("{note}");
            notes.push(note.clone());
            relays.push(Device { name: name.into(), version: None, skipped: Some(note), directions: vec![] });
            continue;
        };
        eprintln!("{name}:");
        let topo = Topology::build(false)?;
        let dirs = measure_device(&ctx, &topo, Some(kind), name, max_for_relays);
        relays.push(Device { name: name.into(), version: version_of(kind, &ctx), skipped: None, directions: dirs });
    }

    let report = Report {
        test: "NICI TrGW (Lin 2008): G.711 RTP, 20 ms, N concurrent calls through the relay, set up by ng offer/answer",
        frame_bytes: FrameBytes { ipv4: 14 + 20 + 8 + crate::probe::LEN, ipv6: 14 + 40 + 8 + crate::probe::LEN },
        packets,
        search_packets: args.search_packets.unwrap_or(packets),
        interval_ms: 20,
        budget_ms: args.budget_ms,
        tester_cpus: args.tester_cpus.clone(),
        relay_cpus: args.relay_cpus.clone(),
        relay_threads,
        realtime: args.realtime,
        sockets_per_side: args.sockets,
        batch: args.batch,
        online_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned(),
        ceiling,
        relays,
        notes,
    };
    write_outputs(&args.out, &report)?;
    if args.keep_logs {
        for e in std::fs::read_dir(&work)?.flatten() {
            let _ = std::fs::copy(e.path(), args.out.join(e.file_name()));
        }
    }
    eprintln!("wrote {}/results.json, results.md and fig8/fig9 SVG plots", args.out.display());
    Ok(report)
}

/// Every trial of a device in a direction (curve points and search), by
/// number of calls; for equal N the later trial wins.
fn all_trials(d: &DirResult) -> Vec<&Trial> {
    let mut v: Vec<&Trial> = d.points.iter().chain(d.search.iter().flat_map(|s| s.trials.iter())).collect();
    v.sort_by_key(|t| t.calls);
    let mut out: Vec<&Trial> = Vec::new();
    for t in v {
        match out.last_mut() {
            Some(l) if l.calls == t.calls => *l = t,
            _ => out.push(t),
        }
    }
    out
}

fn devices(r: &Report) -> Vec<&Device> {
    r.ceiling.iter().chain(r.relays.iter()).collect()
}

fn max_cell(s: &Search) -> String {
    match s.capped_at {
        Some(c) => format!(">= {c}"),
        None => s.max_zero_loss.to_string(),
    }
}

/// Markdown summary of a report.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# v6gate bench trgw\n\n{}.\n", r.test);
    let _ = writeln!(
        s,
        "G.711: RTP header + 160-byte payload every {} ms ({}-byte IPv4 / {}-byte IPv6 frames), {} packets per stream \
         ({} in search trials); a packet later than {} ms counts as lost. Tester CPUs: {}; relay CPUs: {} \
         ({} relay threads); {} online CPUs; kernel {}.\n",
        r.interval_ms,
        r.frame_bytes.ipv4,
        r.frame_bytes.ipv6,
        r.packets,
        r.search_packets,
        r.budget_ms,
        r.tester_cpus,
        r.relay_cpus,
        r.relay_threads,
        r.online_cpus,
        r.kernel
    );
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    let _ = writeln!(s, "\n## Maximum zero-loss concurrent calls\n");
    let devs = devices(r);
    let dirs: Vec<Direction> = {
        let mut d: Vec<Direction> = devs.iter().flat_map(|d| d.directions.iter().map(|x| x.direction)).collect();
        d.sort();
        d.dedup();
        d
    };
    let mut rows = Vec::new();
    for d in &devs {
        let mut row = vec![d.name.clone()];
        for dir in &dirs {
            let cell = d
                .directions
                .iter()
                .find(|x| x.direction == *dir)
                .map(|x| match (&x.search, &x.error) {
                    (_, Some(_)) => "error".to_owned(),
                    (Some(s), None) => max_cell(s),
                    (None, None) => "-".to_owned(),
                })
                .unwrap_or_else(|| d.skipped.clone().map(|_| "skipped".into()).unwrap_or("-".into()));
            row.push(cell);
        }
        rows.push(row);
    }
    let mut headers = vec!["device"];
    headers.extend(dirs.iter().map(|d| d.label()));
    s.push_str(&report::markdown_table(&headers, &rows));
    if let (Some(a), Some(b)) = (zero_loss(r, "v6gate", Direction::V6v4), zero_loss(r, "rtpengine", Direction::V6v4)) {
        if b > 0 {
            let _ = writeln!(s, "\nv6gate / rtpengine (IPv6->IPv4): {:.2}x", f64::from(a) / f64::from(b));
        }
    }
    // The issue's second bar: average latency at 1,000 calls.
    let at_1000 = |dev: &str| {
        let d = r.relays.iter().find(|d| d.name == dev)?;
        let x = d.directions.iter().find(|x| x.direction == Direction::V6v4)?;
        all_trials(x).into_iter().find(|t| t.calls == 1000).map(|t| t.outcome.latency.mean_us)
    };
    if let (Some(a), Some(b)) = (at_1000("v6gate"), at_1000("rtpengine")) {
        let _ = writeln!(s, "\nAverage latency at 1,000 calls (IPv6->IPv4): v6gate {a:.1} µs, rtpengine {b:.1} µs.");
    }
    for dir in &dirs {
        let _ = writeln!(s, "\n## {}\n", dir.label());
        let mut rows = Vec::new();
        for d in &devs {
            for x in d.directions.iter().filter(|x| x.direction == *dir) {
                for t in all_trials(x) {
                    let o = &t.outcome;
                    rows.push(vec![
                        d.name.clone(),
                        t.calls.to_string(),
                        format!("{:.4}", o.loss_rate * 100.0),
                        o.missing.to_string(),
                        o.late.to_string(),
                        format!("{:.1}", o.latency.mean_us),
                        format!("{:.0}", o.latency.p50_us),
                        format!("{:.0}", o.latency.p99_us),
                        format!("{:.0}", o.latency.p999_us),
                        if o.rising_queue { "yes" } else { "no" }.into(),
                        t.relay_cpu.map(|c| format!("{:.0}", c * 100.0)).unwrap_or("-".into()),
                        format!("{:.0}", o.send_lag.p99_us),
                    ]);
                }
                if let Some(e) = &x.error {
                    rows.push(vec![d.name.clone(), format!("error: {}", e.lines().next().unwrap_or(""))]);
                }
            }
        }
        s.push_str(&report::markdown_table(
            &[
                "device",
                "calls",
                "loss %",
                "missing",
                "late",
                "avg µs",
                "p50 µs",
                "p99 µs",
                "p99.9 µs",
                "rising queue",
                "relay CPU %",
                "tester send lag p99 µs",
            ],
            &rows,
        ));
    }
    s
}

/// The maximum zero-loss calls found for `device` in `dir`, if searched.
pub fn zero_loss(r: &Report, device: &str, dir: Direction) -> Option<u32> {
    r.relays
        .iter()
        .find(|d| d.name == device)?
        .directions
        .iter()
        .find(|x| x.direction == dir)?
        .search
        .as_ref()
        .map(|s| s.max_zero_loss)
}

fn write_outputs(out: &Path, r: &Report) -> Result<()> {
    report::write_json(&out.join("results.json"), r)?;
    std::fs::write(out.join("results.md"), markdown(r))?;
    let devs = devices(r);
    let mut dirs: Vec<Direction> = devs.iter().flat_map(|d| d.directions.iter().map(|x| x.direction)).collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        let series = |f: &dyn Fn(&Trial) -> f64| -> Vec<Series> {
            devs.iter()
                .filter_map(|d| {
                    let x = d.directions.iter().find(|x| x.direction == dir)?;
                    let points: Vec<(f64, f64)> = all_trials(x).iter().map(|t| (f64::from(t.calls), f(t))).collect();
                    (!points.is_empty()).then(|| Series { name: d.name.clone(), points })
                })
                .collect()
        };
        let loss = LinePlot {
            title: format!("Packet loss rate, {} (cf. NICI TrGW Fig. 8)", dir.label()),
            x_label: "concurrent calls".into(),
            y_label: "packet loss rate (%)".into(),
            series: series(&|t| t.outcome.loss_rate * 100.0),
        };
        let lat = LinePlot {
            title: format!("Average latency, {} (cf. NICI TrGW Fig. 9)", dir.label()),
            x_label: "concurrent calls".into(),
            y_label: "average latency (µs)".into(),
            series: series(&|t| t.outcome.latency.mean_us),
        };
        std::fs::write(out.join(format!("fig8-loss-{}.svg", dir.key())), loss.to_svg())?;
        std::fs::write(out.join(format!("fig9-latency-{}.svg", dir.key())), lat.to_svg())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpus("0").unwrap(), vec![0]);
        assert_eq!(parse_cpus("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpus("2-1").is_err());
        assert!(parse_cpus("x").is_err());
    }

    #[test]
    fn sdp_is_parsed_back() {
        let s = sdp(IpAddr::V6(UA6), 4000, 7);
        assert_eq!(ng::sdp_audio_addr(&s), Some(SocketAddr::new(IpAddr::V6(UA6), 4000)));
        assert!(s.contains("c=IN IP6 2001:db8:6::2\r\n"));
    }

    fn fake_trial(calls: u32, pass: bool) -> Result<Trial> {
        let o = Outcome {
            streams: calls as usize,
            sent: 1,
            on_time: u64::from(pass),
            late: 0,
            missing: u64::from(!pass),
            duplicates: 0,
            foreign: 0,
            loss_rate: 0.0,
            latency: Default::default(),
            trend_us: vec![],
            rising_queue: false,
            send_lag: Default::default(),
            send_errors: 0,
        };
        Ok(Trial { calls, packets: 1, passed: o.passes(), setup_s: 0.0, relay_cpu: None, outcome: o })
    }

    #[test]
    fn search_finds_the_threshold() {
        let s = search(|n| fake_trial(n, n <= 1234), 250, 8000, 0, &mut |_| {}).unwrap();
        assert!(s.max_zero_loss <= 1234 && s.max_zero_loss >= 1234 - 1234 / 20 - 10, "{}", s.max_zero_loss);
        let f = s.first_failure.unwrap();
        assert!(f > 1234 && f - s.max_zero_loss <= (s.max_zero_loss / 20).max(10));
        assert_eq!(s.capped_at, None);
        let capped = search(|n| fake_trial(n, true), 250, 1000, 0, &mut |_| {}).unwrap();
        assert_eq!((capped.max_zero_loss, capped.capped_at), (1000, Some(1000)));
        let none = search(|n| fake_trial(n, false), 250, 1000, 0, &mut |_| {}).unwrap();
        assert_eq!(none.max_zero_loss, 0);
        // A one-off failure at 500 is run again and passes; the failure is kept.
        let mut seen500 = 0;
        let flaky = search(
            |n| {
                if n == 500 {
                    seen500 += 1;
                }
                fake_trial(n, n <= 1000 && !(n == 500 && seen500 == 1))
            },
            250,
            1000,
            1,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!((flaky.max_zero_loss, flaky.capped_at), (1000, Some(1000)));
        assert_eq!(flaky.trials.iter().filter(|t| t.calls == 500).count(), 2);
        // With every rerun failing too, the failure stands.
        let hard = search(|n| fake_trial(n, n < 500), 250, 1000, 2, &mut |_| {}).unwrap();
        let f = hard.first_failure.unwrap();
        assert!(f >= 500, "{f}");
        assert_eq!(hard.trials.iter().filter(|t| t.calls == f).count(), 3, "a failure is run 1 + 2 times");
        assert!(hard.max_zero_loss < 500 && hard.max_zero_loss >= 250);
        assert!(none.first_failure.unwrap() <= 10);
    }

    fn device(name: &str, max: u32, avg_us: f64) -> Device {
        let mut t = fake_trial(1000, true).unwrap();
        t.outcome.latency.mean_us = avg_us;
        let search = Search {
            max_zero_loss: max,
            first_failure: Some(max + 10),
            capped_at: None,
            trials: vec![fake_trial(max, true).unwrap()],
        };
        Device {
            name: name.into(),
            version: None,
            skipped: None,
            directions: vec![DirResult {
                direction: Direction::V6v4,
                points: vec![t],
                search: Some(search),
                error: None,
            }],
        }
    }

    #[test]
    fn report_states_the_bars_and_writes_plots() {
        let r = Report {
            test: "t",
            frame_bytes: FrameBytes { ipv4: 214, ipv6: 234 },
            packets: 1,
            search_packets: 1,
            interval_ms: 20,
            budget_ms: 20,
            tester_cpus: "0".into(),
            relay_cpus: "1".into(),
            relay_threads: 1,
            realtime: false,
            sockets_per_side: 1,
            batch: 1,
            online_cpus: 2,
            kernel: "k".into(),
            ceiling: None,
            relays: vec![device("v6gate", 3000, 50.0), device("rtpengine", 1500, 80.0)],
            notes: vec![],
        };
        assert_eq!(r.frame_bytes.ipv4, 14 + 20 + 8 + crate::probe::LEN);
        assert_eq!(r.frame_bytes.ipv6, 14 + 40 + 8 + crate::probe::LEN);
        let md = markdown(&r);
        assert!(md.contains("| v6gate | 3000 |"), "{md}");
        assert!(md.contains("v6gate / rtpengine (IPv6->IPv4): 2.00x"), "{md}");
        assert!(md.contains("v6gate 50.0 µs, rtpengine 80.0 µs"), "{md}");
        let dir = std::env::temp_dir().join(lab::netns::unique_name("v6gate-bench-report"));
        std::fs::create_dir_all(&dir).unwrap();
        write_outputs(&dir, &r).unwrap();
        let svg = std::fs::read_to_string(dir.join("fig8-loss-v6v4.svg")).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(dir.join("fig9-latency-v6v4.svg").exists() && dir.join("results.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
