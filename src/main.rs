//! `v6gate`: the command-line front end. Thin: parsing arguments,
//! reporting errors, and the two things only a binary may do (DESIGN.md):
//! install the logger (tracing, level from `[daemon] log-level` or
//! `RUST_LOG`) and catch signals; the work is in the `gate`, `trgw` and
//! `xlat` crates.

// The doc comments of the argument types below are `--help` text: `[siit]`
// names a TOML table and `<reason>` a placeholder, not rustdoc links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use gate::config::Config;
use gate::offline;

/// IPv4/IPv6 transition gateway: the offline RFC 7915 translator
/// (`translate`), the daemon (`run`, `ctl`) with SIIT, stateful NAT64 /
/// NAT-PT, DNS64, the IMS TrGW media relay (rtpengine ng and rtpproxy
/// control) and the IMS-ALG (a SIP/SDP gateway between an IPv6 and an
/// IPv4 realm), the tunnels (`tunnel`: 6to4, 6rd, Teredo server, relay and
/// client), the softwires (`softwire`: DS-Lite AFTR, lw4o6 lwAFTR, DSTM,
/// B4), the RFC 3142 transport relay translator (`trt`), the
/// network-namespace lab (`lab`) and benchmarks against TAYGA, rtpengine,
/// Kamailio, Miredo, socat and kernel forwarding (`bench`).
#[derive(Debug, Parser)]
#[command(name = "v6gate", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Translate packets offline with the [siit] translator (RFC 7915)
    /// and/or a stateful [nat64] (RFC 6146), as the daemon would.
    ///
    /// Reads one hex-encoded IPv4 or IPv6 packet per line on stdin and
    /// writes one JSON line per packet on stdout:
    /// {"out":[{"hex":"...","kind":"forward"}],"drop":null} or
    /// {"out":[],"drop":"<reason>"}. Blank lines and lines starting with
    /// '#' are skipped; a line that is not hex gets "drop":"bad-hex".
    /// With amend-udp-checksum-zero = "hold", zero-checksum UDP fragments are held
    /// ("drop":"held") until their datagram is complete.
    ///
    /// With [nat64], one NAT64 keeps its sessions across all lines; its
    /// clock starts at 0 and moves only on a directive line:
    /// "@advance SECONDS" (e.g. @advance 6, @advance 250ms) moves it and
    /// runs expiry, answering with the packets expiry emits in the same
    /// {"out":[...],"drop":null} shape; "@set KEY VALUE" (e.g. @set
    /// nat64.udp-timeout 10s, @set ipv4-mtu 1400) changes one [nat64] or
    /// [siit] setting as a reload does, keeping sessions. A directive that
    /// cannot be carried out changes nothing and gets
    /// {"out":[],"drop":"bad-directive","error":"..."}; the run goes on.
    ///
    /// With --pcap-in/--pcap-out, translates a pcap file instead; the clock
    /// then follows the capture's timestamps from its first packet.
    Translate(TranslateArgs),
    /// Print an example configuration or check a configuration file.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Run the gateway daemon (SIIT, NAT64/NAT-PT, DNS64, TrGW media relay,
    /// IMS-ALG, tunnels, softwires, TRT).
    ///
    /// Creates the multiqueue TUN device of [tun], its addresses and routes
    /// (netlink), translates live traffic with one worker per queue, runs
    /// DNS64, the [trgw] media relay, the [alg] SIP gateway (its media in
    /// the [trgw] relay of this process, or in remote ng servers) and the
    /// tunnels ([sixtofour], [sixrd], [teredo.*], each on its own TUN
    /// device), the softwires ([dslite], [lw4o6], [b4], each on its own TUN
    /// device) and the transport relay ([trt]), and serves the admin API
    /// ([admin], 127.0.0.1:9164 by default). A file without [siit], [nat64]
    /// and [dns64] runs the rest without the translators' TUN device.
    /// SIGHUP reloads the configuration (a bad file is rejected, logged and
    /// the old one stays; [alg] routes, limits and timers apply at once,
    /// its listeners and media keys and any [trgw], tunnel, softwire or
    /// [trt] change need a restart; the lwAFTR re-reads its binding file);
    /// SIGINT/SIGTERM stop it and remove the device.
    /// Needs root (CAP_NET_ADMIN). See docs/daemon.md and docs/alg.md.
    Run(gate::daemon::RunArgs),
    /// Query or steer a running daemon through its admin API.
    ///
    /// Status, Prometheus metrics, NAT64 sessions, BIB list/add/remove,
    /// reload. Run it in the daemon's network namespace.
    Ctl(gate::daemon::ctl::CtlArgs),
    /// Run the softwires alone (as `v6gate run` does with the same tables), in the foreground: the DS-Lite AFTR
    /// ([dslite], RFC 6333, with an RFC 6888 NAT44), the lw4o6 lwAFTR
    /// ([lw4o6], RFC 7596, bindings from a file, reloadable) with DSTM
    /// address leases ([lw4o6.dstm]), and the B4 / lwB4 / DSTM client
    /// ([b4]), each on its own TUN device.
    ///
    /// SIGHUP re-reads the file: the lwAFTR's bindings and DSTM lease
    /// settings apply (leases are kept), any other change is refused
    /// (restart to apply); SIGINT/SIGTERM stop and remove the devices.
    /// Needs root (CAP_NET_ADMIN) and IP forwarding. See docs/softwire.md.
    Softwire(softwire::cli::Args),
    /// Run the RFC 3142 transport relay translator ([trt]) alone (as
    /// `v6gate run` does with the same table), in the foreground: IPv6 clients reach IPv4 servers at PREFIX::IPv4 (the
    /// DNS64 prefix), TCP terminated and spliced, UDP flows relayed; static
    /// mappings for IPv4-initiated traffic. Sets up an nftables tproxy rule
    /// and policy routing (setup = "auto"), removed at exit. SIGHUP
    /// re-reads the file (a changed [trt] is refused: restart to apply);
    /// SIGINT/SIGTERM stop. Needs root. See docs/trt.md.
    Trt(trt::cli::Args),
    /// Run the [trgw] media relay (IPv4/IPv6 RTP relay driven by the
    /// rtpengine ng and rtpproxy protocols) in the foreground until
    /// SIGINT/SIGTERM.
    Trgw(trgw::cli::Args),
    /// Run the tunnels in the foreground until SIGINT/SIGTERM (SIGHUP
    /// re-reads the file; a changed table is refused: restart to apply): 6to4
    /// ([sixtofour], router or relay), 6rd ([sixrd], CE or BR) and Teredo
    /// ([teredo.server], [teredo.relay], [teredo.client]), each on its own
    /// TUN device, over raw protocol-41 and UDP sockets, with a JSON status
    /// file. `v6gate run` runs the same tables with the admin API and
    /// metrics. See docs/tunnels.md.
    Tunnel(tunnel::cli::Args),
    /// Network-namespace testbed: IPv6-only host, gateway, IPv4-only host.
    Lab(lab::cli::LabArgs),
    /// Print the shell completion script for SHELL on stdout.
    ///
    /// E.g. `v6gate completions bash > /etc/bash_completion.d/v6gate`. The
    /// Debian package installs those of bash, zsh and fish.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages into DIR: v6gate.1 and one per subcommand
    /// (v6gate-run.1, v6gate-config-check.1, ...).
    Manpages {
        /// Directory to write them to (created if missing).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// Benchmarks in network namespaces (needs root), with peers side by
    /// side; results as JSON, Markdown and SVG.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Report what this host offers that v6gate, its tests and its benches
    /// use, each with what its absence disables: native and generic XDP on
    /// veth, BPF_PROG_TEST_RUN, live frames, AF_XDP, sk_lookup, sockmap,
    /// io_uring, TUN, network namespaces, raw sockets (protocols 41 and
    /// 4), PM QoS, the descriptor limit, the cpuidle driver, the kernel,
    /// the CPUs and the peers (TAYGA, rtpengine, Kamailio, SIPp, Miredo,
    /// socat, nft) with their versions.
    ///
    /// The kernel features are tried, not guessed: in a throwaway network
    /// namespace (removed afterwards), which needs root; without root they
    /// are reported unknown. Exits 0 whatever it finds. See docs/doctor.md.
    Doctor {
        /// Print the report as one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// SIIT / NAT64 throughput, loss, latency and PDV (RFC 8219), NAT64
    /// session setup; v6gate against TAYGA, kernel forwarding and the
    /// tester's own ceiling.
    Xlat(Box<bench::xlat::Args>),
    /// The NICI TrGW test: N concurrent G.711 calls through a media relay
    /// (v6gate and rtpengine), set up by the ng protocol; loss and latency
    /// against calls, maximum zero-loss calls; JSON, Markdown and SVG.
    Trgw(Box<bench::trgw::Args>),
    /// Tunnels: the Teredo relay's added latency for 64/512/1280-byte
    /// packets each way and its zero-loss throughput, v6gate against Miredo
    /// (the mobility paper's Table I), and the RTP one-way delay through
    /// 6to4 and Teredo (the SIP-over-IPv6 paper); JSON, Markdown and SVG.
    Tunnel(Box<bench::tunnel::Args>),
    /// The NAT-PT / TRT / DSTM comparison paper: TCP throughput, session
    /// initiation and round-trip delay through native IPv4, NAT64, NAT-PT,
    /// TRT, DS-Lite, lw4o6, DSTM and socat, one testbed each; JSON,
    /// Markdown (the paper's Table 1) and SVG. See docs/bench-transition.md.
    Transition(Box<bench::transition::Args>),
    /// The IMS-ALG: call setup time (INVITE sent → ACK received, p50/p80/
    /// p99 and what the gateway adds over a direct IPv6 call) with SIPp
    /// calls from an IPv6 caller to an IPv4 callee through v6gate's
    /// ALG+TrGW and Kamailio+rtpengine, the highest call rate with no
    /// failed call, and a mid-call handover's media gap; JSON, Markdown
    /// and SVG.
    Sip(Box<bench::sip::Args>),
}

#[derive(Debug, Args)]
struct TranslateArgs {
    /// Configuration file (TOML) with a [siit] and/or a [nat64] table.
    #[arg(short, long, value_name = "FILE")]
    config: PathBuf,
    /// Read packets from this pcap file (link type RAW, IPV4, IPV6,
    /// Ethernet or Linux SLL) instead of hex lines on stdin.
    #[arg(long, value_name = "FILE")]
    pcap_in: Option<PathBuf>,
    /// Write the translated packets to this pcap file (link type RAW,
    /// input timestamps). Required with --pcap-in.
    #[arg(long, value_name = "FILE")]
    pcap_out: Option<PathBuf>,
    /// Also print a one-line human-readable summary of every input and
    /// output packet on stderr.
    #[arg(long)]
    explain: bool,
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print a complete, commented example configuration.
    Example,
    /// Check a configuration file: prints "ok" (and on stderr a warning for
    /// each deprecated spelling it uses), or the error on stderr and exits
    /// with 78 (EX_CONFIG), as every command does with a bad configuration.
    Check {
        /// Configuration file (TOML).
        #[arg(short, long, value_name = "FILE", default_value = gate::config::DEFAULT_PATH)]
        config: PathBuf,
    },
}

fn translate(a: &TranslateArgs) -> anyhow::Result<()> {
    match (&a.pcap_in, &a.pcap_out) {
        (Some(_), None) => bail!("--pcap-in needs --pcap-out FILE, the pcap file to write the translated packets to"),
        (None, Some(_)) => bail!("--pcap-out needs --pcap-in FILE, the pcap file to read packets from"),
        _ => {}
    }
    let cfg = Config::load(&a.config)?;
    for w in cfg.warnings() {
        eprintln!("v6gate: {w}");
    }
    // The text again, for @set (which edits it and parses it anew).
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("cannot read {}", a.config.display()))?;
    let mut x = offline::Offline::new(cfg, &text)?;
    let mut stderr = io::stderr();
    let explain: Option<&mut dyn Write> = if a.explain { Some(&mut stderr) } else { None };
    if let (Some(i), Some(o)) = (&a.pcap_in, &a.pcap_out) {
        let stats = offline::translate_pcap_files(&mut x, i, o, explain)?;
        eprintln!("v6gate translate: {}: {}", o.display(), stats.summary("non-IP frames"));
    } else {
        let stats = offline::translate_lines(&mut x, io::stdin().lock(), io::stdout().lock(), explain)
            .context("translating stdin")?;
        if stats.bad_directives > 0 {
            eprintln!(
                "v6gate translate: {} directive line(s) refused (\"drop\":\"bad-directive\", see their \"error\")",
                stats.bad_directives
            );
        }
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Translate(a) => translate(&a)?,
        Cmd::Run(a) => run_daemon(&a)?,
        Cmd::Ctl(a) => gate::daemon::ctl::run(&a)?,
        Cmd::Trgw(a) => run_trgw(&a)?,
        Cmd::Tunnel(a) => {
            standalone(|| tunnel::cli::load(&a), tunnel::Tunnels::start, |t| tunnel::cli::write_status(&a, t))?
        }
        Cmd::Softwire(a) => standalone(
            || softwire::cli::load(&a.config),
            |c| softwire::run::Softwires::start_with(c, Some(a.config.clone()), a.busy_poll),
            |s| softwire::cli::write_status(&a.status_file, s),
        )?,
        Cmd::Trt(a) => {
            standalone(|| trt::cli::load(&a.config), trt::Relay::start, |r| trt::cli::write_status(&a.status_file, r))?
        }
        Cmd::Config(ConfigCmd::Example) => print(gate::config::example().as_bytes())?,
        Cmd::Lab(a) => return lab::cli::run(&a),
        Cmd::Bench(BenchCmd::Xlat(a)) => {
            bench::xlat::run(&a)?;
        }
        Cmd::Bench(BenchCmd::Trgw(a)) => {
            bench::trgw::run(*a)?;
        }
        Cmd::Bench(BenchCmd::Tunnel(a)) => {
            bench::tunnel::run(&a)?;
        }
        Cmd::Bench(BenchCmd::Transition(a)) => {
            bench::transition::run(&a)?;
        }
        Cmd::Bench(BenchCmd::Sip(a)) => {
            bench::sip::run(&a)?;
        }
        Cmd::Config(ConfigCmd::Check { config }) => {
            let c = Config::load(&config)?;
            for w in c.warnings() {
                eprintln!("v6gate: {w}");
            }
            for w in gate::validate::warnings(&c) {
                eprintln!("v6gate: config warning in {}: {w}", config.display());
            }
            println!("ok");
        }
        Cmd::Doctor { json } => {
            let r = bench::doctor::probe();
            if json {
                print(r.json().context("writing the report as JSON")?.as_bytes())?;
            } else {
                print(r.text().as_bytes())?;
            }
        }
        Cmd::Completions { shell } => {
            // Into memory first: the generator panics when a write fails.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "v6gate", &mut script);
            print(&script)?;
        }
        Cmd::Manpages { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(Cli::command(), &dir)
                .with_context(|| format!("writing the man pages into {}", dir.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The process's logger while it runs ([`init_logging`]): its level can
/// change; dropping it writes out the lines still queued for stderr and
/// says how many were dropped.
struct Logging {
    set_level: std::sync::Arc<dyn Fn(&str) + Send + Sync>,
    stderr: Option<(tracing_appender::non_blocking::WorkerGuard, tracing_appender::non_blocking::ErrorCounter)>,
}

impl Logging {
    /// What changes the level (unless `RUST_LOG` set it).
    fn level_setter(&self) -> Box<dyn Fn(&str) + Send + Sync> {
        let f = self.set_level.clone();
        Box::new(move |level: &str| f(level))
    }
}

impl Drop for Logging {
    fn drop(&mut self) {
        if let Some((guard, dropped)) = self.stderr.take() {
            drop(guard);
            let n = dropped.dropped_lines();
            if n > 0 {
                eprintln!("v6gate: {n} log lines dropped (stderr could not keep up)");
            }
        }
    }
}

/// Installs the one logger of the process: tracing, filtered by `RUST_LOG`
/// when set, else by `level` (changed later by [`Logging::level_setter`], on
/// start and reload, to `[daemon] log-level`). It writes to the systemd
/// journal (native protocol: priority, fields, `SYSLOG_IDENTIFIER=v6gate`)
/// when stderr is the journal stream systemd connected, else to stderr.
/// Records of the `log` crate (dependencies that use it) are forwarded.
///
/// Lines for stderr are written by a thread of their own: a thread that
/// logs (the SIP thread logs per call, and runs the in-process TrGW's
/// per-call lines) never waits for the file or pipe behind stderr, which
/// can block for milliseconds under I/O load. When that thread falls
/// 128,000 lines behind, lines are dropped and counted (reported at exit)
/// rather than stall the caller.
fn init_logging(level: &str) -> Logging {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::{fmt, reload, EnvFilter, Registry};
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = EnvFilter::try_new(from_env.as_deref().unwrap_or(level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::<EnvFilter, Registry>::new(filter);
    // Syslog's levels: info is Informational (6), debug Debug (7); the
    // crate's default moves each one up (info as Notice).
    let journald = stderr_is_journal().then(tracing_journald::layer).and_then(Result::ok).map(|l| {
        use tracing_journald::{Priority, PriorityMappings};
        l.with_priority_mappings(PriorityMappings {
            info: Priority::Informational,
            debug: Priority::Debug,
            trace: Priority::Debug,
            ..PriorityMappings::new()
        })
    });
    let mut queue = None;
    let stderr = journald.is_none().then(|| {
        let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
            .lossy(true)
            .thread_name("v6gate-log")
            .finish(io::stderr());
        queue = Some((guard, writer.error_counter()));
        fmt::layer().with_writer(writer).with_ansi(std::io::IsTerminal::is_terminal(&io::stderr()))
    });
    let subscriber = tracing_subscriber::registry().with(filter).with(journald).with(stderr);
    if tracing::subscriber::set_global_default(subscriber).is_ok() {
        // Every `log` record goes to tracing, which filters it.
        let _ = tracing_log::LogTracer::builder().with_max_level(log::LevelFilter::Trace).init();
    }
    let set_level = std::sync::Arc::new(move |level: &str| {
        if from_env.is_none() {
            if let Ok(f) = EnvFilter::try_new(level) {
                let _ = handle.reload(f);
            }
        }
    });
    Logging { set_level, stderr: queue }
}

/// Whether stderr is the journal stream systemd connected: `JOURNAL_STREAM`
/// holds its `device:inode` (systemd.exec(5)), checked against stderr
/// itself so a child whose stderr was redirected logs to stderr.
fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let Some(v) = std::env::var("JOURNAL_STREAM").ok() else { return false };
    let Some((dev, ino)) = v.split_once(':') else { return false };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else { return false };
    let Ok(fd) = io::stderr().as_fd().try_clone_to_owned() else { return false };
    std::fs::File::from(fd).metadata().is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// SIGHUP, SIGINT and SIGTERM, caught from now on (so one arriving while
/// the daemon starts waits for it instead of killing it half set up).
fn catch_signals() -> anyhow::Result<signal_hook::iterator::Signals> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM]).context("installing signal handlers")
}

fn run_daemon(a: &gate::daemon::RunArgs) -> anyhow::Result<()> {
    let mut signals = catch_signals()?;
    let log = init_logging("info");
    let mut events = signals.forever().map(to_signal);
    gate::daemon::run(a, &mut events, log.level_setter())
}

/// A standalone command (`v6gate trt`, `softwire`, `tunnel`): one function
/// on the contract, run by the one runner ([`function::runner`]) with the
/// daemon's signal idiom: SIGHUP re-reads its table and applies it when
/// the function can (else says why and keeps the old one), SIGINT/SIGTERM
/// stop it. `load` reads and checks its table (a bad one exits 78),
/// `report` writes its status file.
fn standalone<F: function::Function>(
    load: impl Fn() -> anyhow::Result<F::Config>,
    start: impl FnOnce(&F::Config) -> anyhow::Result<F>,
    report: impl FnMut(&F),
) -> anyhow::Result<()> {
    let mut signals = catch_signals()?;
    let _log = init_logging("info");
    let cfg = load().map_err(|e| ConfigError(format!("{e:#}")))?;
    let f = start(&cfg)?;
    tracing::info!("running: {}", f.names().join(", "));
    let mut next = |wait: std::time::Duration| {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(s) = signals.pending().next() {
                return Some(to_signal(s));
            }
            if t0.elapsed() >= wait {
                return None;
            }
            std::thread::sleep(wait.min(std::time::Duration::from_millis(20)));
        }
    };
    let load = || load().map_err(|e| format!("{e:#}"));
    if let Some(line) = function::runner::run(f, cfg, load, report, &mut next, |l| tracing::info!("{l}")) {
        tracing::info!("{line}");
    }
    Ok(())
}

/// SIGHUP reloads; SIGINT and SIGTERM stop.
fn to_signal(s: i32) -> function::runner::Signal {
    if s == signal_hook::consts::SIGHUP {
        function::runner::Signal::Reload
    } else {
        function::runner::Signal::Stop(s)
    }
}

/// `v6gate trgw`: the relay alone until SIGINT/SIGTERM.
fn run_trgw(a: &trgw::cli::Args) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    let _log = init_logging("info");
    let cfg = trgw::cli::load(a).map_err(|e| ConfigError(format!("{e:#}")))?;
    match gate::limits::raise(gate::limits::trgw_needed(&cfg)) {
        Ok(r) => {
            if let Some(w) = r.warning() {
                tracing::warn!("{w}");
            }
        }
        Err(e) => tracing::warn!("{e}"),
    }
    let relay = trgw::Relay::start(cfg)?;
    tracing::info!(ng = ?relay.ng_addr(), rtpproxy = ?relay.rtpproxy_udp_addr(), "trgw running");
    let sig = signals.forever().next().unwrap_or(SIGTERM);
    tracing::info!(signal = sig, "stopping");
    let s = relay.stats();
    relay.stop();
    tracing::info!(calls_created = s.totals.calls_created, timed_out = s.totals.calls_timed_out, "trgw stopped");
    Ok(())
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is not an
/// error.
fn print(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

/// Exit status of a command whose configuration is wrong or unreadable:
/// sysexits.h's EX_CONFIG, which the systemd unit does not restart on
/// (`RestartPreventExitStatus=78`).
const EX_CONFIG: u8 = 78;

/// A configuration error from a crate without `gate::config::Error` (the
/// `[trgw]` table read alone by `v6gate trgw`).
#[derive(Debug)]
struct ConfigError(String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Whether `e` is (or was caused by) a configuration error.
fn is_config_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<gate::config::Error>() || c.is::<ConfigError>())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // `{:#}` puts the whole context chain on one line.
            let msg = format!("{e:#}").replace('\n', " ");
            if msg.starts_with("config error") {
                eprintln!("v6gate: {msg}");
            } else {
                eprintln!("v6gate: error: {msg}");
            }
            if is_config_error(&e) {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
