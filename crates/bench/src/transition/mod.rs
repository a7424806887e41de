//! `v6gate bench transition`: the NAT-PT / TRT / DSTM comparison paper's
//! measurements — TCP throughput (its Fig. 7), session initiation (its
//! Table 1) and round-trip delay — for every transition mechanism v6gate
//! has, against native IPv4 forwarding and socat as a plain user-level
//! relay, in one run, through the same three namespaces:
//!
//! ```text
//!  client ns  -- veth --  gateway ns  -- veth --  server ns
//!  (IPv6-only, or a B4)   (the mechanism)          198.51.100.1 (IPv4-only)
//! ```
//!
//! Mechanisms: `ipv4` (kernel forwarding, the ceiling), `nat64` and
//! `natpt` (`v6gate run`), `nat64-xdp` and `natpt-xdp` (the same with
//! the gateway's XDP fast path on g0/g1), `trt` (`v6gate trt`, spliced by its epoll
//! loop), `trt-threads` (the same with `copy = "splice-threads"`) and
//! `trt-sockmap` (with `copy = "sockmap"`),
//! `dslite`, `lw4o6`,
//! `dstm` (`v6gate softwire` on both sides), `lw4o6-xdp` and `dstm-xdp`
//! (the lwAFTR's XDP fast path), `dslite-b4k`, `dstm-b4k`,
//! `dstm-xdp-b4k`, `lw4o6-b4k` and `lw4o6-xdp-b4k` (the B4's kernel
//! datapath, [`Mech::b4_kernel`]; the lwB4's for its host's own traffic),
//! `socat` (a socat TCP/UDP relay on the gateway). Each gets a fresh testbed,
//! and a native-IPv4 testbed (the `ipv4` row's shape, its own namespaces)
//! stays up beside them for the whole run: the baseline.
//!
//! - Throughput: one TCP connection writing for `--seconds`, bytes counted
//!   at the server, per 100 ms (the series is plotted); `--bulk-runs`
//!   such transfers one after the other, the median is the figure (one
//!   transfer swings by ±15 % on a 2-core VM) and every run is kept.
//! - Session initiation: `--sessions` times, a new TCP connection, one
//!   byte each way, closed; the time from `connect()` to the echoed byte
//!   (and `connect()` alone). The paper measured the device from a flow's
//!   first packet to its leaving; a client-side first exchange includes
//!   what every mechanism adds to a new flow (a relay's second handshake,
//!   a NAT's new mapping, an encapsulation), so "added over IPv4" is the
//!   median difference from native IPv4.
//! - The paper's own initiation measure beside it, for every row and its
//!   interleaved native sessions alike: each session's SYN from leaving
//!   the client namespace's stack to its first arrival (IPv4) in the
//!   server namespace, kernel timestamps of capture taps in both
//!   namespaces, opened for the session blocks only and drained after
//!   each block (`initiation` in the JSON, with `initiation_added_ns` and
//!   the unmatched sessions by reason; method in the `initiation`
//!   module's doc and docs/bench-transition.md).
//! - Round-trip delay: `--pings` sequential 64-byte UDP echoes.
//!
//! **The paired baseline.** On a shared 2-core VM the session medians
//! drift by tens of µs from one minute to the next, more than most
//! mechanisms add, so a row compared with an `ipv4` row measured minutes
//! earlier measures when it ran. Each row's sessions (and echoes) are
//! therefore split into `--session-blocks` blocks, and each block on the
//! row's testbed is paired with a block of as many on the native testbed,
//! the pairs in ABBA order (row first, then native first, ...) so that
//! neither side always runs first or right after the other's. The row's
//! "added over IPv4" is its median minus the median of *its own*
//! interleaved native sessions (the same for `connect()` and the round
//! trip, whose echoes keep one UDP flow per side across the blocks); both
//! medians are reported, and each block pair's in the JSON. The standalone `ipv4` row stays, the
//! ceiling of throughput, and its own paired figure shows what two native
//! testbeds differ by (the method's noise floor).
//!
//! What else differs between the two testbeds, and is left so: the
//! client's thread (a new thread per block, entered into the bed's client
//! namespace, on whichever CPU the scheduler gives it, for both sides
//! alike), the
//! server threads (one set per bed, the same code; idle ones wake every
//! 100 ms), and the mechanism's processes, which stay up, idle, during
//! the native blocks (with `--busy-poll` they stop spinning 1 ms after
//! the last packet). Nothing new is pinned.
//!
//! Each run's namespaces are named `v6tr<pid>-` ([`run_prefix`]): the
//! baseline's `n-c`, `n-g`, `n-s`, the row's `m-c`, `m-g`, `m-s`. After a
//! row only the row's are removed, and the run's guard removes only the
//! run's, so two runs at once leave each other alone.
//!
//! See docs/bench-transition.md.

mod initiation;
mod report;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use lab::gateconf;
use lab::netns::{veth, Netns};
use serde::Serialize;

use crate::harness::guard::{Proc, RunGuard};
use crate::harness::latency::{Latency, LatencyHistogram};
use crate::harness::peers;
use crate::report::Outputs;

pub use initiation::Unmatched;
pub use report::markdown;

/// What every run's namespace names start with; a run's own prefix is
/// [`run_prefix`] of its process id.
pub const PREFIX: &str = "v6tr";

/// The namespace-name prefix of the run of process `pid`
/// (`v6tr<pid>-`): the run's guard and its per-row cleanup remove only
/// namespaces with this prefix, so concurrent runs leave each other alone.
/// The native-IPv4 baseline testbed's namespaces follow it with `n-`, the
/// row's testbed with `m-`.
pub fn run_prefix(pid: u32) -> String {
    format!("{PREFIX}{pid}-")
}

/// A mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mech {
    /// Native IPv4, kernel forwarding (the ceiling).
    Ipv4,
    /// Stateful NAT64 (`v6gate run`, `[nat64]`).
    Nat64,
    /// NAT-PT pool mode (`[nat64] mode = "natpt"`).
    Natpt,
    /// NAT64 with the gateway's XDP fast path (`[xdp]` on g0 and g1:
    /// sessions mirrored from their first packet, TCP half-open at the
    /// SYN so that the server's SYN+ACK is carried).
    Nat64Xdp,
    /// NAT-PT pool mode with the gateway's XDP fast path, as `nat64-xdp`.
    NatptXdp,
    /// The RFC 3142 transport relay (`v6gate trt`, spliced by its epoll loop).
    Trt,
    /// The same relay with `copy = "splice-threads"` (two splice threads
    /// per connection).
    TrtThreads,
    /// The same relay with `copy = "sockmap"` (bytes moved by its BPF
    /// sockhash stream verdict).
    TrtSockmap,
    /// DS-Lite: B4 and AFTR (`v6gate softwire`).
    Dslite,
    /// lw4o6: lwB4 and lwAFTR.
    Lw4o6,
    /// DSTM: a leased address over the lwAFTR.
    Dstm,
    /// lw4o6 with the lwAFTR's XDP fast path (`[lw4o6.xdp]` on the
    /// gateway's g0 and g1); the lwB4 stays on its TUN device.
    Lw4o6Xdp,
    /// DSTM with the lwAFTR's XDP fast path (the lease mirrored into it);
    /// the DSTM client stays on its TUN device.
    DstmXdp,
    /// DS-Lite with the AFTR's XDP fast path (`[dslite.xdp]` on g0 and
    /// g1: established NAT44 flows); the B4 stays on its TUN device.
    DsliteXdp,
    /// DS-Lite with the B4's kernel datapath (`[b4.kernel]`: tc egress
    /// encapsulation on its TUN device, XDP decapsulation on c0); the
    /// AFTR stays on its TUN engine.
    DsliteB4k,
    /// DS-Lite with both ends in the kernel: the AFTR's XDP fast path and
    /// the B4's kernel datapath.
    DsliteXdpB4k,
    /// DSTM with the host's kernel datapath (`[b4.kernel]`); the TEP
    /// (lwAFTR) stays on its TUN engine.
    DstmB4k,
    /// DSTM with both ends in the kernel: the TEP's XDP fast path and the
    /// host's kernel datapath.
    DstmXdpB4k,
    /// lw4o6 with the host-integrated lwB4's kernel datapath (`[b4]
    /// host-ports`, `[b4.kernel]`): the client is the lwB4 host itself,
    /// its IPv4 address the binding's, its local ports confined to the
    /// host's share of the port set; the lwAFTR stays on its TUN engine.
    Lw4o6B4k,
    /// lw4o6 with both ends in the kernel: the lwAFTR's XDP fast path and
    /// the host-integrated lwB4's kernel datapath.
    Lw4o6XdpB4k,
    /// socat on the gateway, a plain user-level TCP/UDP relay.
    Socat,
}

impl Mech {
    /// The B4 (DS-Lite B4, DSTM host) runs its kernel datapath
    /// (`[b4.kernel]` on c0): a flag of the row, orthogonal to the
    /// gateway's variant.
    pub fn b4_kernel(self) -> bool {
        matches!(
            self,
            Mech::DsliteB4k
                | Mech::DsliteXdpB4k
                | Mech::DstmB4k
                | Mech::DstmXdpB4k
                | Mech::Lw4o6B4k
                | Mech::Lw4o6XdpB4k
        )
    }

    /// Name in the reports.
    pub fn name(self) -> &'static str {
        match self {
            Mech::Ipv4 => "ipv4",
            Mech::Nat64 => "nat64",
            Mech::Natpt => "natpt",
            Mech::Nat64Xdp => "nat64-xdp",
            Mech::NatptXdp => "natpt-xdp",
            Mech::Trt => "trt",
            Mech::TrtThreads => "trt-threads",
            Mech::TrtSockmap => "trt-sockmap",
            Mech::Dslite => "dslite",
            Mech::Lw4o6 => "lw4o6",
            Mech::Dstm => "dstm",
            Mech::Lw4o6Xdp => "lw4o6-xdp",
            Mech::DstmXdp => "dstm-xdp",
            Mech::DsliteXdp => "dslite-xdp",
            Mech::DsliteB4k => "dslite-b4k",
            Mech::DsliteXdpB4k => "dslite-xdp-b4k",
            Mech::DstmB4k => "dstm-b4k",
            Mech::DstmXdpB4k => "dstm-xdp-b4k",
            Mech::Lw4o6B4k => "lw4o6-b4k",
            Mech::Lw4o6XdpB4k => "lw4o6-xdp-b4k",
            Mech::Socat => "socat",
        }
    }
}

/// `v6gate bench transition` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Directory for results.json, results.md and the SVG plots.
    #[arg(long, default_value = "bench-results/transition")]
    pub out: PathBuf,
    /// Mechanisms, in order (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ipv4,nat64,natpt,trt,trt-threads,trt-sockmap,dslite,lw4o6,dstm,socat"
    )]
    pub mech: Vec<Mech>,
    /// Seconds of bulk TCP per transfer. `--quick`: 1.
    #[arg(long, default_value_t = 5, default_value_if("quick", "true", "1"))]
    pub seconds: u64,
    /// Bulk TCP transfers per mechanism, one after the other; the median
    /// is the throughput figure. `--quick`: 1.
    #[arg(
        long,
        default_value_t = 3,
        default_value_if("quick", "true", "1"),
        value_parser = clap::value_parser!(u32).range(1..=99)
    )]
    pub bulk_runs: u32,
    /// New TCP sessions timed per mechanism (and as many on the native
    /// baseline, interleaved with them). `--quick`: 100.
    #[arg(long, default_value_t = 2000, default_value_if("quick", "true", "100"))]
    pub sessions: usize,
    /// UDP echoes timed per mechanism (and as many on the native
    /// baseline, interleaved with them). `--quick`: 100.
    #[arg(long, default_value_t = 2000, default_value_if("quick", "true", "100"))]
    pub pings: usize,
    /// Blocks the sessions (and the echoes) of a row are split into: each
    /// block on the row's testbed is paired with as many on the native-IPv4
    /// baseline testbed (up for the whole run), pairs in ABBA order; the
    /// row's "added over IPv4" is its median minus the median of its own
    /// baseline blocks.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub session_blocks: u32,
    /// A short functional run: 1 s, one bulk transfer, 100 sessions, 100
    /// pings. Options given on the command line keep their values.
    #[arg(long)]
    pub quick: bool,
    /// The v6gate binary (default: this one).
    #[arg(long)]
    pub v6gate: Option<PathBuf>,
    /// `[tun] busy-poll` of the v6gate TUN engines (NAT64, NAT-PT, the
    /// softwires and their B4s: `--busy-poll` of `v6gate softwire`) and
    /// `[trt] busy-poll` of the transport relay's TCP loops: "0s"
    /// (default) is the default daemon, whose threads sleep and are woken
    /// by each packet; e.g. "1ms" keeps them spinning between packets
    /// (docs/daemon.md, docs/trt.md).
    #[arg(long, default_value = "0s")]
    pub busy_poll: String,
    /// `[trt] preconnect` of the transport relay (`trt`, `trt-threads`,
    /// `trt-sockmap`): 0 (default) connects to the server at accept; e.g.
    /// 64 starts the connect at the client's SYN (docs/trt.md).
    #[arg(long, default_value_t = 0)]
    pub trt_preconnect: usize,
    /// `[trt] open-spin` of the transport relay: how long its loop polls
    /// for a new session's answer instead of sleeping ("0s": off;
    /// docs/trt.md).
    #[arg(long, default_value = "100us")]
    pub trt_open_spin: String,
    /// `[trt] ack-with-data` of the transport relay (`trt`): whether its
    /// connection to the server sends the handshake's last ACK with the
    /// client's first bytes or at once (default, plain TCP; docs/trt.md).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub trt_ack_with_data: bool,
    /// `[trt] congestion-control` of the transport relay: the TCP
    /// congestion control of its own sockets, e.g. "cubic"; unset
    /// (default): the system's, `net.ipv4.tcp_congestion_control`, which
    /// the clients and servers of every testbed use too (docs/trt.md).
    #[arg(long)]
    pub trt_congestion_control: Option<String>,
    /// `[trt] close-delay` of the transport relay (`trt`): how long its
    /// loop may put off a FIN's pass-on and a finished pair's close to a
    /// moment between sessions ("0s", default: at once; docs/trt.md).
    #[arg(long, default_value = "0s")]
    pub trt_close_delay: String,
    /// `[trt] cpu-latency` of the transport relay (`trt`): the PM QoS CPU
    /// latency limit it holds while it runs, machine-wide, so the native
    /// blocks interleaved with its row run under it too (e.g. "0us": idle
    /// CPUs poll; unset, default: none; docs/trt.md).
    #[arg(long)]
    pub trt_cpu_latency: Option<String>,
}

/// One mechanism's results.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MechResult {
    /// Mechanism name.
    pub mech: String,
    /// Why it was not measured, if it was not.
    pub skipped: Option<String>,
    /// Bulk TCP, Mbit/s (server side, first to last byte): the median of
    /// `throughput_runs_mbps`.
    pub throughput_mbps: f64,
    /// Every bulk transfer's Mbit/s, in the order run.
    pub throughput_runs_mbps: Vec<f64>,
    /// Mbit/s per 100 ms, of the median transfer.
    pub series_mbps: Vec<f64>,
    /// `connect()` to the echoed first byte.
    pub session: Latency,
    /// `connect()` alone.
    pub connect: Latency,
    /// The paper's session initiation: the client's SYN leaving the
    /// client namespace to its first arrival in the server namespace,
    /// kernel timestamps (see the module doc of `initiation`).
    pub initiation: Latency,
    /// Sessions without an initiation time, by reason.
    pub initiation_unmatched: Unmatched,
    /// Timed sessions whose t0 was taken on a TUN device (a TUN B4's),
    /// not on the client's veth.
    pub initiation_t0_on_tun: u64,
    /// UDP round trip.
    pub rtt: Latency,
    /// Sessions that failed.
    pub session_failures: u64,
    /// Echoes lost.
    pub ping_losses: u64,
    /// The native-IPv4 baseline measured in blocks interleaved with this
    /// row's sessions and echoes (`None`: not measured).
    pub baseline: Option<Baseline>,
    /// `session` median minus `baseline.session` median, ns: the row's
    /// "added over IPv4" (`None` without samples on either side).
    pub session_added_ns: Option<i64>,
    /// `connect` median minus `baseline.connect` median, ns.
    pub connect_added_ns: Option<i64>,
    /// `initiation` median minus `baseline.initiation` median, ns.
    pub initiation_added_ns: Option<i64>,
    /// `rtt` median minus `baseline.rtt` median, ns.
    pub rtt_added_ns: Option<i64>,
    /// The session median of each block pair, `[row, native]` in ns, in
    /// the order run (even pairs ran the row's block first, odd ones the
    /// native block first): how the two sides drifted together.
    pub session_block_p50_ns: Vec<[u64; 2]>,
    /// The same for the UDP round trip.
    pub rtt_block_p50_ns: Vec<[u64; 2]>,
    /// CPU seconds the mechanism's own processes used.
    pub cpu_s: Option<f64>,
    /// The `-xdp` rows: the lwAFTR's XDP fast path counters at the end
    /// (packets decapsulated, encapsulated, passed by reason), so that a
    /// row carried by the slow path shows as such.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_counters: Option<serde_json::Value>,
    /// The `-b4k` rows: the B4's kernel datapath counters at the end
    /// (encapsulated, decapsulated, passed to its TUN engine by reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b4_kernel_counters: Option<serde_json::Value>,
}

/// A row's native-IPv4 baseline: the sessions and echoes on the native
/// testbed that were interleaved with the row's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Baseline {
    /// `connect()` to the echoed first byte.
    pub session: Latency,
    /// `connect()` alone.
    pub connect: Latency,
    /// The paper's session initiation (as [`MechResult::initiation`]).
    pub initiation: Latency,
    /// Sessions without an initiation time, by reason.
    pub initiation_unmatched: Unmatched,
    /// Sessions that failed.
    pub session_failures: u64,
    /// UDP round trip.
    pub rtt: Latency,
    /// Echoes lost.
    pub ping_losses: u64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seconds of bulk TCP per transfer.
    pub seconds: u64,
    /// Bulk transfers per mechanism (the median is the figure).
    pub bulk_runs: u32,
    /// Sessions per mechanism.
    pub sessions: usize,
    /// Echoes per mechanism.
    pub pings: usize,
    /// `--session-blocks`: block pairs the sessions and echoes of a row
    /// are split into (fewer when there are fewer sessions).
    pub session_blocks: u32,
    /// The namespace-name prefix of the run.
    pub ns_prefix: String,
    /// CPUs online.
    pub cpus: usize,
    /// Kernel.
    pub kernel: String,
    /// Load average at the start (the machine may be shared).
    pub loadavg: String,
    /// `--busy-poll` of the v6gate TUN engines and the TRT relay.
    pub busy_poll: String,
    /// `--trt-preconnect` of the TRT relay.
    pub trt_preconnect: usize,
    /// `--trt-open-spin` of the TRT relay.
    pub trt_open_spin: String,
    /// `--trt-ack-with-data` of the TRT relay.
    pub trt_ack_with_data: bool,
    /// `--trt-congestion-control` of the TRT relay (`None`: the system's).
    pub trt_congestion_control: Option<String>,
    /// `--trt-close-delay` of the TRT relay.
    pub trt_close_delay: String,
    /// `--trt-cpu-latency` of the TRT relay (`None`: none held).
    pub trt_cpu_latency: Option<String>,
    /// The machine's cpuidle driver (`/sys/devices/system/cpu/cpuidle/
    /// current_driver`; "none": idle CPUs halt) and its PM QoS CPU latency
    /// limit at the start, in µs (2,000,000,000: no request held).
    pub cpuidle: String,
    /// The system's TCP congestion control (`net.ipv4.tcp_congestion_control`
    /// of the host, which new namespaces inherit): every testbed's client
    /// and server use it.
    pub tcp_congestion_control: String,
    /// Results in order.
    pub results: Vec<MechResult>,
}

const SERVER: &str = "198.51.100.1";
const PREFIX6: &str = "64:ff9b:1::c633:6401";
const PORT_BULK: u16 = 5001;
const PORT_SESSION: u16 = 5002;
const PORT_ECHO: u16 = 5003;

/// The testbed of one mechanism.
struct Bed {
    c: Netns,
    _g: Netns,
    s: Netns,
    procs: Vec<Proc>,
    stop: Arc<AtomicBool>,
    servers: Vec<std::thread::JoinHandle<()>>,
    bulk_rx: std::sync::mpsc::Receiver<Vec<u64>>,
    target: std::net::IpAddr,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.servers.drain(..) {
            let _ = h.join();
        }
        self.procs.clear();
    }
}

fn ns(prefix: &str, name: &str) -> Result<Netns> {
    let n = Netns::create(&format!("{prefix}{name}"))?;
    n.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
    n.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
    n.sysctl("net.ipv4.ip_forward", "1")?;
    n.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    Ok(n)
}

/// Block until `l` has a connection to accept, or 100 ms pass.
fn wait_readable(l: &TcpListener) {
    use std::os::fd::AsFd;
    let mut p = [nix::poll::PollFd::new(l.as_fd(), nix::poll::PollFlags::POLLIN)];
    let _ = nix::poll::poll(&mut p, nix::poll::PollTimeout::from(100u16));
}

/// The server threads and the channel of their bulk-sink byte counts.
type Servers = (Vec<std::thread::JoinHandle<()>>, std::sync::mpsc::Receiver<Vec<u64>>);

/// Server threads in the server namespace: bulk sink (bytes per 100 ms
/// sent back on a channel), one-byte ping-pong, UDP echo.
fn servers(s: &Netns, stop: &Arc<AtomicBool>) -> Result<Servers> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let mut hs = Vec::new();
    let name = s.name().to_string();
    let (st, r) = (stop.clone(), ready_tx.clone());
    let n = name.clone();
    hs.push(std::thread::spawn(move || {
        if Netns::attach(&n).enter_thread().is_err() {
            return;
        }
        let Ok(l) = TcpListener::bind(("0.0.0.0", PORT_BULK)) else { return };
        let _ = l.set_nonblocking(true);
        let _ = r.send(());
        while !st.load(Ordering::Relaxed) {
            let Ok((mut c, _)) = l.accept() else {
                wait_readable(&l);
                continue;
            };
            let _ = c.set_nonblocking(false);
            let _ = c.set_read_timeout(Some(Duration::from_millis(100)));
            let mut buf = vec![0u8; 1 << 18];
            let mut slots = Vec::new();
            let mut t0: Option<Instant> = None;
            loop {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => {
                        let t = *t0.get_or_insert_with(Instant::now);
                        let i = (t.elapsed().as_millis() / 100) as usize;
                        if slots.len() <= i {
                            slots.resize(i + 1, 0u64);
                        }
                        slots[i] += k as u64;
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        if st.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(slots);
        }
    }));
    let (st, r) = (stop.clone(), ready_tx.clone());
    let n = name.clone();
    hs.push(std::thread::spawn(move || {
        if Netns::attach(&n).enter_thread().is_err() {
            return;
        }
        let Ok(l) = TcpListener::bind(("0.0.0.0", PORT_SESSION)) else { return };
        let _ = l.set_nonblocking(true);
        let _ = r.send(());
        while !st.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut c, _)) => {
                    let _ = c.set_nonblocking(false);
                    let _ = c.set_nodelay(true);
                    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut b = [0u8; 1];
                    if c.read_exact(&mut b).is_ok() {
                        let _ = c.write_all(&b);
                    }
                }
                // Wait for the next connection without adding a polling delay.
                Err(_) => wait_readable(&l),
            }
        }
    }));
    let (st, r) = (stop.clone(), ready_tx);
    hs.push(std::thread::spawn(move || {
        if Netns::attach(&name).enter_thread().is_err() {
            return;
        }
        let Ok(u) = UdpSocket::bind(("0.0.0.0", PORT_ECHO)) else { return };
        let _ = u.set_read_timeout(Some(Duration::from_millis(100)));
        let _ = r.send(());
        let mut b = [0u8; 2048];
        while !st.load(Ordering::Relaxed) {
            if let Ok((k, from)) = u.recv_from(&mut b) {
                let _ = u.send_to(&b[..k], from);
            }
        }
    }));
    for _ in 0..3 {
        ready_rx.recv_timeout(Duration::from_secs(5)).context("server threads did not start")?;
    }
    Ok((hs, rx))
}

fn v6gate(bin: &Path, ns: &Netns, work: &Path, name: &str, sub: &str, config: &str, busy_poll: &str) -> Result<Proc> {
    let cfg = work.join(format!("{name}.toml"));
    std::fs::write(&cfg, config)?;
    let mut c = ns.command(&bin.to_string_lossy());
    c.args([sub, "--config"]).arg(&cfg);
    if sub != "run" {
        c.arg("--status-file").arg(work.join(format!("{name}.json")));
    }
    if sub == "softwire" {
        c.args(["--busy-poll", busy_poll]);
    }
    c.env("RUST_LOG", "warn");
    Proc::spawn(&format!("v6gate {sub} ({name})"), c, Some(&work.join(format!("{name}.log"))))
}

fn socat(ns: &Netns, work: &Path, args: &[&str]) -> Result<Proc> {
    let mut c = ns.command("socat");
    c.args(args);
    Proc::spawn("socat", c, Some(&work.join(format!("socat-{}.log", args[0].replace([':', ',', '[', ']'], "_")))))
}

/// The (lw)AFTR's XDP counters from its status file (the `-xdp` rows).
fn xdp_counters(m: Mech, work: &Path) -> Option<serde_json::Value> {
    let (name, function) = match m {
        Mech::Lw4o6Xdp | Mech::Lw4o6XdpB4k => ("lwaftr", "lw4o6"),
        Mech::DstmXdp | Mech::DstmXdpB4k => ("tep", "lw4o6"),
        Mech::DsliteXdp | Mech::DsliteXdpB4k => ("aftr", "dslite"),
        _ => return None,
    };
    Some(status(work, name)?[function]["xdp"]["counters"].clone())
}

/// The gateway's XDP counters (the `nat64-xdp` and `natpt-xdp` rows):
/// GET /xdp of `v6gate run`'s admin API in the gateway's namespace, the
/// non-zero counters as label → packets.
fn gate_xdp_counters(m: Mech, bed: &Bed) -> Option<serde_json::Value> {
    if !matches!(m, Mech::Nat64Xdp | Mech::NatptXdp) {
        return None;
    }
    let body = bed
        ._g
        .run(|| {
            let mut t = TcpStream::connect("127.0.0.1:9164")?;
            t.set_read_timeout(Some(Duration::from_secs(5)))?;
            t.write_all(b"GET /xdp HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut text = String::new();
            t.read_to_string(&mut text)?;
            Ok(text)
        })
        .ok()?;
    let json: serde_json::Value = serde_json::from_str(body.split("\r\n\r\n").nth(1)?).ok()?;
    let nonzero: serde_json::Map<String, serde_json::Value> = json["counters"]
        .as_object()?
        .iter()
        .filter_map(|(k, v)| v["packets"].as_u64().filter(|p| *p > 0).map(|p| (k.clone(), p.into())))
        .collect();
    Some(nonzero.into())
}

/// The B4's kernel datapath counters from its status file (the `-b4k` rows).
fn b4_kernel_counters(m: Mech, work: &Path) -> Option<serde_json::Value> {
    let name = match m {
        Mech::DsliteB4k | Mech::DsliteXdpB4k => "b4",
        Mech::DstmB4k | Mech::DstmXdpB4k => "dstm-b4",
        Mech::Lw4o6B4k | Mech::Lw4o6XdpB4k => "lwb4",
        _ => return None,
    };
    Some(status(work, name)?["b4"]["kernel"]["counters"].clone())
}

/// The status file of v6gate softwire `name`, once its counters are fresh.
fn status(work: &Path, name: &str) -> Option<serde_json::Value> {
    // The status file is rewritten every 100 ms, its counters every 200 ms.
    std::thread::sleep(Duration::from_millis(500));
    let text = std::fs::read_to_string(work.join(format!("{name}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// The host's ports of the `lw4o6-b4k` rows (`[b4] host-ports`): A = 32..63
/// of PSID 1 (length 2, offset 6).
const LWB4_HOST_PORTS: (u16, u16) = (32 * 1024 + 256, 63 * 1024 + 511);

/// `net.ipv4.ip_local_reserved_ports` of the `lw4o6-b4k` rows' client:
/// the ports of [`LWB4_HOST_PORTS`] that are not the binding's.
fn lwb4_reserved() -> String {
    let map = softwire::portset::PsidMap::new(6, 2).expect("psid length 2 at offset 6");
    let host = softwire::b4::HostPorts { first: LWB4_HOST_PORTS.0, last: LWB4_HOST_PORTS.1 };
    softwire::b4::Napt { ipv4: core::net::Ipv4Addr::UNSPECIFIED, map, psid: 1, host: Some(host) }.host_reserved()
}

/// The `[b4.kernel]` table of the `-b4k` rows (empty for the others): the
/// B4's kernel datapath with c0 as its uplink.
fn b4_kernel(m: Mech) -> &'static str {
    if m.b4_kernel() {
        "[b4.kernel]\ninterfaces = [\"c0\"]\nmode = \"native\"\n"
    } else {
        ""
    }
}

/// The `[lw4o6.xdp]` or `[dslite.xdp]` table of the `-xdp` rows (empty
/// for the others): the (lw)AFTR's fast path on the gateway's g0
/// (softwires) and g1 (IPv4).
/// What the veth testbed needs of the senders (as for the Teredo relay's
/// fast path; real NICs need neither): NAPI (GRO on) at c0/s0, which take
/// the redirects into g0/g1, and complete checksums (transmit checksum
/// offload off on c0/s0: a veth otherwise hands over CHECKSUM_PARTIAL
/// segments, whose checksum the kernel completes on the way into the
/// lwAFTR's TUN device but XDP cannot).
fn sw_xdp(m: Mech, c: &Netns, s: &Netns) -> Result<&'static str> {
    let table = match m {
        Mech::Lw4o6Xdp | Mech::DstmXdp | Mech::DstmXdpB4k | Mech::Lw4o6XdpB4k => {
            "[lw4o6.xdp]\ninterfaces = [\"g0\", \"g1\"]\nmode = \"native\"\n"
        }
        Mech::DsliteXdp | Mech::DsliteXdpB4k => "[dslite.xdp]\ninterfaces = [\"g0\", \"g1\"]\nmode = \"native\"\n",
        // `v6gate run`'s [xdp] (written by the row itself).
        Mech::Nat64Xdp | Mech::NatptXdp => "[xdp]",
        // V6GATE_BENCH_NATIVE_HOSTS=xdp: the native beds' c0/s0 set as the -xdp rows' (A/B).
        Mech::Ipv4 if std::env::var("V6GATE_BENCH_NATIVE_HOSTS").is_ok_and(|v| v == "xdp") => "",
        _ => return Ok(""),
    };
    // Throwaway A/B knobs (issue #15): V6GATE_BENCH_HOST_NAPI="c0=gro|none|<xdp object>,s0=..."
    // chooses how each end host's veth gets NAPI (default gro); V6GATE_BENCH_HOST_TXCSUM=on
    // leaves their transmit checksum offload on.
    let napi = std::env::var("V6GATE_BENCH_HOST_NAPI").unwrap_or_default();
    let tx_on = std::env::var("V6GATE_BENCH_HOST_TXCSUM").is_ok_and(|v| v == "on");
    for (ns, dev) in [(c, "c0"), (s, "s0")] {
        let how =
            napi.split(',').find_map(|kv| kv.strip_prefix(dev).and_then(|r| r.strip_prefix('='))).unwrap_or("gro");
        match how {
            "gro" => ns.run(|| xdp::sys::set_gro(dev, true).with_context(|| format!("GRO on {dev}")))?,
            "none" => {}
            obj => {
                ns.ip(&["link", "set", "dev", dev, "xdpdrv", "obj", obj, "sec", "xdp"])?;
            }
        }
        ns.run(|| xdp::sys::set_tx_checksum(dev, tx_on).with_context(|| format!("tx checksum offload on {dev}")))?;
    }
    Ok(table)
}

/// The TRT relay's options of the run (its `[trt]` keys of the same names).
#[derive(Debug, Clone, Copy)]
struct TrtOpts<'a> {
    preconnect: usize,
    open_spin: &'a str,
    ack_with_data: bool,
    congestion_control: Option<&'a str>,
    close_delay: &'a str,
    cpu_latency: Option<&'a str>,
}

/// The testbed of `m`, its namespaces named `<prefix>c`, `<prefix>g`
/// and `<prefix>s`.
fn build(m: Mech, prefix: &str, bin: &Path, work: &Path, busy_poll: &str, trt: TrtOpts) -> Result<Bed> {
    let v6gate = |ns: &Netns, name: &str, sub: &str, config: &str| v6gate(bin, ns, work, name, sub, config, busy_poll);
    let c = ns(prefix, "c")?;
    let g = ns(prefix, "g")?;
    let s = ns(prefix, "s")?;
    veth(&c, "c0", &g, "g0")?;
    veth(&g, "g1", &s, "s0")?;
    c.ip(&["addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad"])?;
    g.ip(&["addr", "add", "2001:db8:1::1/64", "dev", "g0", "nodad"])?;
    c.ip(&["-6", "route", "add", "default", "via", "2001:db8:1::1"])?;
    g.ip(&["addr", "add", "198.51.100.254/24", "dev", "g1"])?;
    s.ip(&["addr", "add", "198.51.100.1/24", "dev", "s0"])?;
    s.ip(&["route", "add", "default", "via", "198.51.100.254"])?;
    let mut procs = Vec::new();
    let v6target: std::net::IpAddr = PREFIX6.parse()?;
    let v4target: std::net::IpAddr = SERVER.parse()?;
    let b4_routes = |g: &Netns| -> Result<()> {
        g.ip(&["-6", "route", "add", "2001:db8:2::/48", "via", "2001:db8:1::2"]).map(|_| ())
    };
    let target = match m {
        Mech::Ipv4 => {
            c.ip(&["addr", "add", "10.0.1.2/24", "dev", "c0"])?;
            g.ip(&["addr", "add", "10.0.1.1/24", "dev", "g0"])?;
            c.ip(&["route", "add", "default", "via", "10.0.1.1"])?;
            sw_xdp(m, &c, &s)?;
            v4target
        }
        Mech::Nat64 | Mech::Natpt | Mech::Nat64Xdp | Mech::NatptXdp => {
            let plain = sw_xdp(m, &c, &s)?.is_empty();
            let cfg = gateconf::V6gate {
                nat64: Some(gateconf::Nat64 {
                    pool6: "64:ff9b:1::/96".into(),
                    pool4: vec!["203.0.113.0/28".into()],
                    mode: matches!(m, Mech::Natpt | Mech::NatptXdp).then(|| "natpt".to_string()),
                    ..Default::default()
                }),
                // The -xdp rows: the fast path on g0/g1, its counters
                // read back through the admin API (GET /xdp) at the end.
                xdp: (!plain).then(|| gateconf::Xdp {
                    interfaces: vec!["g0".into(), "g1".into()],
                    mode: Some("native".into()),
                    ..Default::default()
                }),
                tun: Some(
                    gateconf::Tun { name: "v6gate0".into(), queues: Some(1), ..Default::default() }
                        .with_lines(&[format!("busy-poll = \"{busy_poll}\"")])?,
                ),
                admin: Some(gateconf::Admin { enabled: Some(!plain), listen: None }),
                ..Default::default()
            }
            .render()?;
            procs.push(v6gate(&g, m.name(), "run", &cfg)?);
            v6target
        }
        Mech::Trt | Mech::TrtThreads | Mech::TrtSockmap => {
            let copy = match m {
                Mech::TrtThreads => "splice-threads",
                Mech::TrtSockmap => "sockmap",
                _ => "splice",
            };
            let mut cfg = format!(
                "[trt]\nprefix = \"64:ff9b:1::/96\"\ncopy = \"{copy}\"\nbusy-poll = \"{busy_poll}\"\npreconnect = {}\n\
                 open-spin = \"{}\"\nack-with-data = {}\nclose-delay = \"{}\"\n",
                trt.preconnect, trt.open_spin, trt.ack_with_data, trt.close_delay
            );
            if let Some(cc) = trt.congestion_control {
                cfg.push_str(&format!("congestion-control = \"{cc}\"\n"));
            }
            if let Some(l) = trt.cpu_latency {
                cfg.push_str(&format!("cpu-latency = \"{l}\"\n"));
            }
            procs.push(v6gate(&g, m.name(), "trt", &cfg)?);
            v6target
        }
        Mech::Socat => {
            let b = format!("TCP6-LISTEN:{PORT_BULK},bind=[2001:db8:1::1],fork,reuseaddr");
            procs.push(socat(&g, work, &[&b, &format!("TCP4:{SERVER}:{PORT_BULK}")])?);
            let s2 = format!("TCP6-LISTEN:{PORT_SESSION},bind=[2001:db8:1::1],fork,reuseaddr,backlog=1024");
            procs.push(socat(&g, work, &[&s2, &format!("TCP4:{SERVER}:{PORT_SESSION},nodelay")])?);
            let u = format!("UDP6-LISTEN:{PORT_ECHO},bind=[2001:db8:1::1],fork,reuseaddr");
            procs.push(socat(&g, work, &["-T", "5", &u, &format!("UDP4:{SERVER}:{PORT_ECHO}")])?);
            "2001:db8:1::1".parse()?
        }
        Mech::Dslite | Mech::DsliteXdp | Mech::DsliteB4k | Mech::DsliteXdpB4k => {
            b4_routes(&g)?;
            let aftr = format!("[dslite]\naftr-address = \"2001:db8:ffff::1\"\nb4-prefixes = [\"2001:db8:2::/48\"]\npool4 = [\"203.0.113.1/32\"]\nlog-mappings = false\nmax-ports-per-subscriber = 65536\n{}", sw_xdp(m, &c, &s)?);
            procs.push(v6gate(&g, "aftr", "softwire", &aftr)?);
            let b4 = format!("[b4]\nmode = \"ds-lite\"\naddress = \"2001:db8:2::2\"\naftr = \"2001:db8:ffff::1\"\nhost-address = \"192.0.0.2\"\nroutes = [\"198.51.100.0/24\"]\n{}", b4_kernel(m));
            procs.push(v6gate(&c, "b4", "softwire", &b4)?);
            v4target
        }
        Mech::Lw4o6 | Mech::Lw4o6Xdp => {
            b4_routes(&g)?;
            let bindings = work.join("bindings");
            // PSID length 2: a quarter of the ports (15,360 above the
            // excluded 0-1023) for the lwB4's NAPT, so that --sessions
            // (2,000) new connections in quick succession, with their
            // mappings kept for the TCP timers, do not exhaust the set (with
            // length 6, 1,008 ports, 120 of 2,000 sessions failed).
            std::fs::write(&bindings, "2001:db8:2::2 203.0.113.1 1 2\n")?;
            let lw = format!("[lw4o6]\naftr-address = \"2001:db8:ffff::1\"\nbinding-file = \"{}\"\nipv4-prefixes = [\"203.0.113.0/24\"]\n{}", bindings.display(), sw_xdp(m, &c, &s)?);
            procs.push(v6gate(&g, "lwaftr", "softwire", &lw)?);
            let b4 = "[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8:2::2\"\naftr = \"2001:db8:ffff::1\"\nipv4-address = \"203.0.113.1\"\npsid = 1\npsid-length = 2\nhost-address = \"192.168.1.2\"\nroutes = [\"198.51.100.0/24\"]\n";
            procs.push(v6gate(&c, "lwb4", "softwire", b4)?);
            v4target
        }
        Mech::Lw4o6B4k | Mech::Lw4o6XdpB4k => {
            b4_routes(&g)?;
            let bindings = work.join("bindings");
            // The binding of the lw4o6 rows; the host holds A = 32..63 of
            // its set (8,192 ports), the NAPT keeps A = 1..31.
            std::fs::write(&bindings, "2001:db8:2::2 203.0.113.1 1 2\n")?;
            let lw = format!("[lw4o6]\naftr-address = \"2001:db8:ffff::1\"\nbinding-file = \"{}\"\nipv4-prefixes = [\"203.0.113.0/24\"]\n{}", bindings.display(), sw_xdp(m, &c, &s)?);
            procs.push(v6gate(&g, "lwaftr", "softwire", &lw)?);
            let (first, last) = LWB4_HOST_PORTS;
            // The client is the lwB4 host: its sockets take the binding's
            // address (on the TUN device) and its own ports only.
            c.sysctl("net.ipv4.ip_local_port_range", &format!("{first} {last}"))?;
            c.sysctl("net.ipv4.ip_local_reserved_ports", &lwb4_reserved())?;
            let b4 = format!("[b4]\nmode = \"lw4o6\"\naddress = \"2001:db8:2::2\"\naftr = \"2001:db8:ffff::1\"\nipv4-address = \"203.0.113.1\"\npsid = 1\npsid-length = 2\nhost-ports = \"{first}-{last}\"\nroutes = [\"198.51.100.0/24\"]\n{}", b4_kernel(m));
            procs.push(v6gate(&c, "lwb4", "softwire", &b4)?);
            v4target
        }
        Mech::Dstm | Mech::DstmXdp | Mech::DstmB4k | Mech::DstmXdpB4k => {
            b4_routes(&g)?;
            let tep = format!(
                "[lw4o6]\naftr-address = \"2001:db8:ffff::1\"\n[lw4o6.dstm]\npool = [\"203.0.113.0/29\"]\nlisten = \"[2001:db8:1::1]:4739\"\nlease-file = \"{}\"\n{}",
                work.join("leases").display(),
                sw_xdp(m, &c, &s)?
            );
            procs.push(v6gate(&g, "tep", "softwire", &tep)?);
            std::thread::sleep(Duration::from_millis(300));
            let b4 = format!("[b4]\nmode = \"dstm\"\naddress = \"2001:db8:2::2\"\nlease-server = \"[2001:db8:1::1]:4739\"\nroutes = [\"198.51.100.0/24\"]\n{}", b4_kernel(m));
            procs.push(v6gate(&c, "dstm-b4", "softwire", &b4)?);
            v4target
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (servers, bulk_rx) = servers(&s, &stop)?;
    let bed = Bed { c, _g: g, s, procs, stop, servers, bulk_rx, target };
    // Ready when a UDP echo comes back (a DSTM lease, the devices, the relay).
    let t0 = Instant::now();
    loop {
        let ok = bed.c.run(|| {
            let u = UdpSocket::bind(if bed.target.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?;
            u.set_read_timeout(Some(Duration::from_millis(200)))?;
            u.connect(SocketAddr::new(bed.target, PORT_ECHO))?;
            u.send(b"ready?")?;
            let mut b = [0u8; 16];
            Ok(u.recv(&mut b).is_ok())
        });
        if matches!(ok, Ok(true)) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            let logs: Vec<String> = bed.procs.iter().map(|p| p.log_note()).collect();
            bail!("{} never became ready: {}", m.name(), logs.join(" | "));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(bed)
}

/// Which testbed runs a block of the paired measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The row's (the mechanism's) testbed.
    Row = 0,
    /// The native-IPv4 baseline testbed, up for the whole run.
    Native = 1,
}

/// The run order of `total` sessions (or echoes) on each side, split into
/// `blocks` block pairs: `(side, count)` per block. The blocks differ in
/// size by one at most; the pairs alternate which side goes first (ABBA:
/// row, native, native, row, row, ...), so that neither side always runs
/// right after the other one's, nor always first. At most `total` pairs
/// (no empty blocks); nothing for `total` 0.
fn schedule(total: usize, blocks: usize) -> Vec<(Side, usize)> {
    let b = blocks.clamp(1, total.max(1));
    let mut v = Vec::with_capacity(2 * b);
    for i in 0..b {
        let n = total / b + usize::from(i < total % b);
        if n == 0 {
            continue;
        }
        let pair = if i % 2 == 0 { [Side::Row, Side::Native] } else { [Side::Native, Side::Row] };
        v.extend(pair.map(|s| (s, n)));
    }
    v
}

/// `row`'s median minus `base`'s, ns; `None` when either has no sample.
fn added(row: &Latency, base: &Latency) -> Option<i64> {
    (row.samples > 0 && base.samples > 0).then(|| row.p50_ns as i64 - base.p50_ns as i64)
}

/// The samples of one side of the paired measurements.
#[derive(Default)]
struct Samples {
    session: LatencyHistogram,
    connect: LatencyHistogram,
    session_failures: u64,
    /// The paper's initiation: samples, unmatched sessions, and the
    /// session windows of the block not yet paired.
    init: initiation::Initiation,
    rtt: LatencyHistogram,
    ping_losses: u64,
    /// The side's one UDP flow, kept across its blocks (the echoes time
    /// an established flow, not a new NAT or NAPT mapping per block), and
    /// its next sequence number.
    udp: Option<UdpSocket>,
    seq: u64,
}

impl Samples {
    /// `n` new TCP sessions to `target` from namespace `c`: connect, one
    /// byte each way, close.
    fn sessions(&mut self, c: &Netns, target: std::net::IpAddr, n: usize) -> Result<()> {
        c.run(|| {
            for _ in 0..n {
                // The session's window for the initiation's captures
                // (outside the timed interval).
                let start_ns = crate::sys::realtime_ns();
                let t0 = Instant::now();
                let once = || -> std::io::Result<Duration> {
                    let mut s =
                        TcpStream::connect_timeout(&SocketAddr::new(target, PORT_SESSION), Duration::from_secs(2))?;
                    let tc = t0.elapsed();
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(Duration::from_secs(2)))?;
                    s.write_all(b"x")?;
                    let mut b = [0u8; 1];
                    s.read_exact(&mut b)?;
                    Ok(tc)
                };
                let r = once();
                match r {
                    Ok(tc) => {
                        self.session.record(t0.elapsed().as_nanos() as u64);
                        self.connect.record(tc.as_nanos() as u64);
                    }
                    Err(_) => self.session_failures += 1,
                }
                let end_ns = crate::sys::realtime_ns();
                self.init.windows.push(initiation::Window { start_ns, end_ns, ok: r.is_ok() });
            }
            Ok(())
        })
    }

    /// `n` sequential 64-byte UDP echoes to `target` from namespace `c`,
    /// on the side's UDP socket (opened at its first block).
    fn pings(&mut self, c: &Netns, target: std::net::IpAddr, n: usize) -> Result<()> {
        c.run(|| {
            let u = match self.udp.take() {
                Some(u) => u,
                None => {
                    let u = UdpSocket::bind(if target.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?;
                    u.set_read_timeout(Some(Duration::from_millis(500)))?;
                    u.connect(SocketAddr::new(target, PORT_ECHO))?;
                    u
                }
            };
            let u = self.udp.insert(u);
            let mut b = [0u8; 64];
            let first = self.seq;
            self.seq += n as u64;
            for i in first..self.seq {
                let mut msg = [0u8; 64];
                msg[..8].copy_from_slice(&i.to_be_bytes());
                let t0 = Instant::now();
                u.send(&msg)?;
                loop {
                    match u.recv(&mut b) {
                        Ok(_) if b[..8] == msg[..8] => {
                            self.rtt.record(t0.elapsed().as_nanos() as u64);
                            break;
                        }
                        Ok(_) => continue,
                        Err(_) => {
                            self.ping_losses += 1;
                            break;
                        }
                    }
                }
            }
            Ok(())
        })
    }

    fn baseline(&self) -> Baseline {
        Baseline {
            session: self.session.summary(),
            connect: self.connect.summary(),
            initiation: self.init.hist.summary(),
            initiation_unmatched: self.init.unmatched,
            session_failures: self.session_failures,
            rtt: self.rtt.summary(),
            ping_losses: self.ping_losses,
        }
    }
}

impl Samples {
    /// Adds every sample of `o`.
    fn merge(&mut self, o: &Samples) {
        self.session.merge(&o.session);
        self.connect.merge(&o.connect);
        self.session_failures += o.session_failures;
        self.init.merge(&o.init);
        self.rtt.merge(&o.rtt);
        self.ping_losses += o.ping_losses;
    }
}

/// Runs `f` on each side's bed, in the order of `sched`, into the side's
/// samples; returns the median of `pick` of each block pair, `[row,
/// native]`.
fn paired(
    sched: &[(Side, usize)],
    (row, native): (&Bed, &Bed),
    (rs, ns): (&mut Samples, &mut Samples),
    f: impl Fn(&mut Samples, Side, &Netns, std::net::IpAddr, usize) -> Result<()>,
    pick: impl Fn(&Samples) -> &LatencyHistogram,
) -> Result<Vec<[u64; 2]>> {
    let mut pairs = vec![[0u64; 2]; sched.len() / 2];
    for (i, &(side, n)) in sched.iter().enumerate() {
        let (bed, into, k) = match side {
            Side::Row => (row, &mut *rs, 0),
            Side::Native => (native, &mut *ns, 1),
        };
        // The block's samples apart, the side's UDP flow carried on.
        let mut block = Samples { udp: into.udp.take(), seq: into.seq, ..Default::default() };
        let r = f(&mut block, side, &bed.c, bed.target, n);
        (into.udp, into.seq) = (block.udp.take(), block.seq);
        r?;
        if let Some(p) = pairs.get_mut(i / 2) {
            p[k] = pick(&block).quantile(0.5);
        }
        into.merge(&block);
    }
    Ok(pairs)
}

/// Bulk TCP, then the sessions and the echoes paired with the native
/// baseline `native` (see the module doc).
fn measure(bed: &Bed, native: &Bed, a: &Args) -> Result<MechResult> {
    let (seconds, sessions, pings) = (a.seconds, a.sessions, a.pings);
    let target = bed.target;
    let mut r = MechResult::default();
    // Bulk TCP: `bulk_runs` transfers, the median one is the figure.
    let runs = a.bulk_runs.max(1);
    let mut transfers = Vec::new();
    for _ in 0..runs {
        bed.c.run(|| {
            let mut s = TcpStream::connect_timeout(&SocketAddr::new(target, PORT_BULK), Duration::from_secs(5))?;
            let buf = vec![0x5au8; 1 << 16];
            let end = Instant::now() + Duration::from_secs(seconds);
            while Instant::now() < end {
                s.write_all(&buf)?;
            }
            Ok(())
        })?;
        let slots = bed.bulk_rx.recv_timeout(Duration::from_secs(10)).context("the bulk sink reported nothing")?;
        let total: u64 = slots.iter().sum();
        let secs = (slots.len().max(1) as f64) / 10.0;
        transfers.push((total as f64 * 8.0 / secs / 1e6, slots));
    }
    r.throughput_runs_mbps = transfers.iter().map(|t| t.0).collect();
    let (mbps, slots) = median_transfer(transfers);
    r.throughput_mbps = mbps;
    r.series_mbps = slots.iter().map(|b| *b as f64 * 8.0 / 0.1 / 1e6).collect();
    // Session initiation and round-trip delay, each in blocks alternating
    // between this row's bed and the native one.
    let (mut row, mut base) = (Samples::default(), Samples::default());
    let blocks = a.session_blocks as usize;
    // The initiation's taps, for the session blocks only (each side's
    // drained after each of its blocks).
    let taps = initiation::Taps::open(&bed.c, &bed.s, PORT_SESSION)
        .and_then(|t| Ok([t, initiation::Taps::open(&native.c, &native.s, PORT_SESSION)?]))
        .map_err(|e| eprintln!("  no initiation captures: {e:#}"))
        .ok();
    let sessions_then_drain = |s: &mut Samples, side: Side, c: &Netns, t: std::net::IpAddr, n: usize| {
        s.sessions(c, t, n)?;
        match &taps {
            Some(taps) => taps[side as usize].drain(&mut s.init),
            None => Ok(()),
        }
    };
    r.session_block_p50_ns =
        paired(&schedule(sessions, blocks), (bed, native), (&mut row, &mut base), sessions_then_drain, |s| &s.session)?;
    drop(taps);
    r.rtt_block_p50_ns = paired(
        &schedule(pings, blocks),
        (bed, native),
        (&mut row, &mut base),
        |s, _, c, t, n| s.pings(c, t, n),
        |s| &s.rtt,
    )?;
    let b = base.baseline();
    r.session = row.session.summary();
    r.connect = row.connect.summary();
    r.initiation = row.init.hist.summary();
    r.initiation_unmatched = row.init.unmatched;
    r.initiation_t0_on_tun = row.init.t0_on_tun;
    r.session_failures = row.session_failures;
    r.rtt = row.rtt.summary();
    r.ping_losses = row.ping_losses;
    r.session_added_ns = added(&r.session, &b.session);
    r.connect_added_ns = added(&r.connect, &b.connect);
    r.initiation_added_ns = added(&r.initiation, &b.initiation);
    r.rtt_added_ns = added(&r.rtt, &b.rtt);
    r.baseline = Some(b);
    let cpu: f64 = bed.procs.iter().filter_map(|p| p.cpu_seconds()).sum();
    r.cpu_s = (!bed.procs.is_empty()).then_some(cpu);
    Ok(r)
}

/// The transfer of median throughput (the lower middle one of an even
/// count) among `(Mbit/s, per-100-ms bytes)`; (0, nothing) for none.
fn median_transfer(mut t: Vec<(f64, Vec<u64>)>) -> (f64, Vec<u64>) {
    if t.is_empty() {
        return (0.0, Vec::new());
    }
    t.sort_by(|a, b| a.0.total_cmp(&b.0));
    t.swap_remove((t.len() - 1) / 2)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run the bench: the native-IPv4 baseline testbed for the whole run and,
/// beside it, every mechanism in order on a testbed of its own.
pub fn run(a: &Args) -> Result<Report> {
    if !lab::netns::am_root() {
        bail!("bench transition needs root (network namespaces, TUN devices, tproxy)");
    }
    let bin = peers::v6gate(a.v6gate.as_deref())?;
    confval::duration::parse(&a.busy_poll).map_err(|e| anyhow::anyhow!("--busy-poll: {e}"))?;
    confval::duration::parse(&a.trt_open_spin).map_err(|e| anyhow::anyhow!("--trt-open-spin: {e}"))?;
    if let Some(l) = &a.trt_cpu_latency {
        confval::duration::parse(l).map_err(|e| anyhow::anyhow!("--trt-cpu-latency: {e}"))?;
    }
    let cpuidle = format!(
        "{}, limit {} µs",
        std::fs::read_to_string("/sys/devices/system/cpu/cpuidle/current_driver")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "none".into()),
        netsys::cpu_latency::current().map_or("?".into(), |d| d.as_micros().to_string())
    );
    let out = Outputs::create(&a.out)?;
    let prefix = run_prefix(std::process::id());
    let guard =
        RunGuard::new(&prefix, std::env::temp_dir().join(format!("v6gate-bench-transition-{}", std::process::id())))?;
    let trt = TrtOpts {
        preconnect: a.trt_preconnect,
        open_spin: &a.trt_open_spin,
        ack_with_data: a.trt_ack_with_data,
        congestion_control: a.trt_congestion_control.as_deref(),
        close_delay: &a.trt_close_delay,
        cpu_latency: a.trt_cpu_latency.as_deref(),
    };
    let native_work = guard.work().join("native");
    std::fs::create_dir_all(&native_work)?;
    let native = build(Mech::Ipv4, &format!("{prefix}n-"), &bin, &native_work, &a.busy_poll, trt)
        .context("the native-IPv4 baseline testbed")?;
    let row_prefix = format!("{prefix}m-");
    let mut results = Vec::new();
    let load = loadavg();
    for &m in &a.mech {
        eprintln!("bench transition: {} ...", m.name());
        let work = guard.work().join(m.name());
        std::fs::create_dir_all(&work)?;
        if m == Mech::Socat && peers::find(Path::new("socat")).is_none() {
            results.push(MechResult {
                mech: m.name().into(),
                skipped: Some("socat is not installed".into()),
                ..Default::default()
            });
            continue;
        }
        let r = build(m, &row_prefix, &bin, &work, &a.busy_poll, trt).and_then(|bed| {
            let r = measure(&bed, &native, a);
            let x = xdp_counters(m, &work).or_else(|| gate_xdp_counters(m, &bed));
            let k = b4_kernel_counters(m, &work);
            drop(bed);
            r.map(|r| MechResult { xdp_counters: x, b4_kernel_counters: k, ..r })
        });
        // Only this row's namespaces: the baseline stays up.
        lab::netns::cleanup(&row_prefix);
        match r {
            Ok(mut r) => {
                r.mech = m.name().into();
                let us = |v: Option<i64>| v.map_or("?".into(), |v| format!("{:+.1}", v as f64 / 1e3));
                eprintln!(
                    "  {:.0} Mbit/s, session p50 {:.1} µs ({} over the interleaved native), RTT p50 {:.1} µs",
                    r.throughput_mbps,
                    r.session.p50_ns as f64 / 1e3,
                    us(r.session_added_ns),
                    r.rtt.p50_ns as f64 / 1e3
                );
                eprintln!(
                    "  initiation (the paper's: client SYN out to server SYN in) p50 {:.1} µs ({} over the \
                     interleaved native), {} of {} sessions unmatched",
                    r.initiation.p50_ns as f64 / 1e3,
                    us(r.initiation_added_ns),
                    r.initiation_unmatched.sessions(),
                    r.initiation.samples + r.initiation_unmatched.sessions()
                );
                if let Some(x) = &r.xdp_counters {
                    eprintln!("  XDP fast path counters {x}");
                }
                if let Some(x) = &r.b4_kernel_counters {
                    eprintln!("  B4 kernel path counters {x}");
                }
                results.push(r);
            }
            Err(e) => {
                eprintln!("  failed: {e:#}");
                results.push(MechResult {
                    mech: m.name().into(),
                    skipped: Some(format!("{e:#}")),
                    ..Default::default()
                });
            }
        }
    }
    drop(native);
    let (seconds, sessions, pings) = (a.seconds, a.sessions, a.pings);
    let rep = Report {
        seconds,
        bulk_runs: a.bulk_runs,
        sessions,
        pings,
        session_blocks: a.session_blocks.min(sessions.max(1).try_into().unwrap_or(u32::MAX)),
        ns_prefix: prefix,
        cpus: crate::report::online_cpus(),
        kernel: crate::report::kernel_release(),
        loadavg: load,
        busy_poll: a.busy_poll.clone(),
        trt_preconnect: a.trt_preconnect,
        trt_open_spin: a.trt_open_spin.clone(),
        trt_ack_with_data: a.trt_ack_with_data,
        trt_congestion_control: a.trt_congestion_control.clone(),
        trt_close_delay: a.trt_close_delay.clone(),
        trt_cpu_latency: a.trt_cpu_latency.clone(),
        cpuidle,
        tcp_congestion_control: std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        results,
    };
    report::write(&rep, out)?;
    drop(guard);
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_shrinks_the_run_and_given_options_win() {
        let parse = |argv: &[&str]| crate::parse_args::<Args>(argv);
        let q = parse(&["x", "--quick"]);
        assert_eq!((q.seconds, q.bulk_runs, q.sessions, q.pings), (1, 1, 100, 100));
        let g = parse(&["x", "--quick", "--sessions", "2000", "--bulk-runs", "3"]);
        assert_eq!((g.seconds, g.bulk_runs, g.sessions, g.pings), (1, 3, 2000, 100), "given values win");
        let f = parse(&["x"]);
        assert_eq!((f.seconds, f.bulk_runs, f.sessions, f.pings), (5, 3, 2000, 2000));
    }

    #[test]
    fn the_median_transfer_is_the_figure() {
        let t = |v: f64| (v, vec![v as u64]);
        assert_eq!(median_transfer(vec![t(9.0), t(3.0), t(5.0)]), (5.0, vec![5]));
        assert_eq!(median_transfer(vec![t(4.0), t(1.0)]), (1.0, vec![1]));
        assert_eq!(median_transfer(vec![t(7.0)]), (7.0, vec![7]));
        assert_eq!(median_transfer(vec![]), (0.0, vec![]));
    }

    /// Sides in order, and the per-side totals of a schedule.
    fn sides(s: &[(Side, usize)]) -> (String, usize, usize) {
        let order = s.iter().map(|(side, _)| if *side == Side::Row { 'R' } else { 'N' }).collect();
        let total = |w: Side| s.iter().filter(|(side, _)| *side == w).map(|(_, n)| n).sum();
        (order, total(Side::Row), total(Side::Native))
    }

    #[test]
    fn blocks_alternate_abba_and_split_the_count_evenly() {
        let s = schedule(2000, 20);
        assert_eq!(sides(&s), ("RNNR".repeat(10), 2000, 2000));
        assert!(s.iter().all(|&(_, n)| n == 100));
        // 10 in 4 blocks: 3, 3, 2, 2, each on both sides.
        let s = schedule(10, 4);
        assert_eq!(s.iter().map(|b| b.1).collect::<Vec<_>>(), [3, 3, 3, 3, 2, 2, 2, 2]);
        assert_eq!(sides(&s), ("RNNRRNNR".into(), 10, 10));
        // Odd number of pairs: the row goes first in one more pair.
        assert_eq!(sides(&schedule(100, 3)), ("RNNRRN".into(), 100, 100));
        // More blocks than sessions: one session per block, none empty.
        let s = schedule(3, 20);
        assert_eq!(
            s,
            [(Side::Row, 1), (Side::Native, 1), (Side::Native, 1), (Side::Row, 1), (Side::Row, 1), (Side::Native, 1)]
        );
        assert_eq!(schedule(7, 1), [(Side::Row, 7), (Side::Native, 7)]);
        assert!(schedule(0, 20).is_empty());
        assert!(schedule(5, 0).iter().all(|&(_, n)| n == 5), "0 blocks is one block");
    }

    #[test]
    fn added_is_the_difference_of_the_medians() {
        let l = |samples, p50_ns| Latency { samples, p50_ns, min_ns: 1, max_ns: 10_000_000, ..Default::default() };
        assert_eq!(added(&l(100, 150_300), &l(100, 120_100)), Some(30_200));
        assert_eq!(added(&l(100, 90_000), &l(100, 120_000)), Some(-30_000), "below the baseline stays negative");
        assert_eq!(added(&l(0, 0), &l(100, 120_000)), None, "no row samples");
        assert_eq!(added(&l(100, 90_000), &l(0, 0)), None, "no baseline samples");
    }

    #[test]
    fn run_prefixes_do_not_match_each_other() {
        let (a, b) = (run_prefix(12), run_prefix(123));
        assert_eq!(a, "v6tr12-");
        assert!(!b.starts_with(&a) && !a.starts_with(&b));
        assert!(!a.starts_with("v6tr-"), "the cleanup of an older binary (every `v6tr-`) leaves it alone");
    }
}
