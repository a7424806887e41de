//! `v6gate bench tunnel`: the tunnel experiments of two seed papers, run
//! against v6gate and Miredo in one run.
//!
//! - The mobility paper's Table I (NICI-Teredo against Miredo and 6WIND):
//!   the latency a Teredo relay adds, IPv6 to IPv4 (native host to Teredo
//!   client) and IPv4 to IPv6, for 64-, 512- and 1280-byte IPv6 packets;
//!   here median and 99th percentile over the direct path (the same
//!   namespaces, plain IPv4 UDP forwarded by the kernel, same sizes), one
//!   packet in flight at a time as the paper sends them; and the relay's
//!   zero-loss throughput (RFC 2544 §26.1 search, IPv4 to IPv6).
//! - The 6to4 bar: the 6to4 relay's zero-loss throughput (site to
//!   native IPv6, 512-byte IPv6 packets in protocol 41) against v6gate's
//!   userspace SIIT translator (`v6gate run`, one TUN queue) in the same run
//!   and testbed (IPv4 to IPv6, 512-byte IPv6 packets out).
//! - The SIP-over-IPv6 paper's 6to4 and Teredo rows: the one-way delay of
//!   a G.711 RTP stream (160-byte payload every 20 ms) through each tunnel
//!   (mean, median, standard deviation as the paper's Table I).
//!
//! Testbed: `c` (the tester's Teredo client at 192.0.2.2:40000 with its
//! "server" socket at 192.0.2.3:3544, or a 6to4 site at 192.0.2.2), `d`
//! (the device under test at 192.0.2.1, native IPv6 2001:db8:1::1) and `h`
//! (the native IPv6 host 2001:db8:1::2, also 198.51.100.2 for the direct
//! path). The tester plays the Teredo client itself: it answers the
//! relay's indirect bubble with a direct one (the RFC 4380 §5.4 trust
//! procedure), then keeps the peer entry alive. Timestamps are
//! CLOCK_MONOTONIC in the payload (shared by every namespace).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use lab::netns::{veth, Netns};
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use xlat::tunnel::teredo::{self, TeredoAddr};

use crate::harness::clock::{now_ns, Pacer};
use crate::harness::guard::{Proc, RunGuard};
use crate::harness::latency::{us, Latency, LatencyHistogram};
use crate::harness::peers;
use crate::harness::search::{Judged, Search};
use crate::report::{markdown_table, Align, LinePlot, Outputs, Series};
use crate::tester::{fell_behind, SendStats};

/// Arguments of `v6gate bench tunnel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output directory for results.json, results.md and the SVG plots.
    #[arg(long, default_value = "bench-results/tunnel")]
    pub out: PathBuf,
    /// The v6gate binary (default: this executable).
    #[arg(long)]
    pub v6gate_bin: Option<PathBuf>,
    /// The Miredo binary (relay mode); its rows are skipped with a note when missing.
    #[arg(long, default_value = "miredo")]
    pub miredo_bin: PathBuf,
    /// IPv6 packet sizes of the latency table.
    #[arg(long, value_delimiter = ',', default_value = "64,512,1280")]
    pub sizes: Vec<usize>,
    /// Latency samples per size and direction (the paper sends 10,000).
    /// `--quick`: 200.
    #[arg(long, default_value_t = 2000, default_value_if("quick", "true", "200"))]
    pub packets: u32,
    /// RTP packets per one-way-delay row (20 ms apart). `--quick`: 50.
    #[arg(long, default_value_t = 500, default_value_if("quick", "true", "50"))]
    pub rtp_packets: u32,
    /// Seconds per zero-loss trial. `--quick`: 0.5.
    #[arg(long, default_value_t = 3.0, default_value_if("quick", "true", "0.5"))]
    pub trial_secs: f64,
    /// Highest rate tried by the zero-loss search, packets/s. Each device's
    /// search first offers it in one calibration trial: what the tester
    /// sent there is its ceiling, where the search starts.
    #[arg(long, default_value_t = 400_000.0)]
    pub max_rate: f64,
    /// Trials per zero-loss search at most. `--quick`: 6.
    #[arg(long, default_value_t = 14, default_value_if("quick", "true", "6"))]
    pub max_trials: usize,
    /// Skip the zero-loss search.
    #[arg(long)]
    pub no_search: bool,
    /// A short functional run (200 samples, 50 RTP packets, 0.5 s trials,
    /// 6 search trials): for development on a shared machine, not for
    /// figures. Options given on the command line keep their values.
    #[arg(long)]
    pub quick: bool,
}

/// One device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dut {
    /// v6gate's Teredo relay.
    V6gate,
    /// v6gate's Teredo relay with its XDP fast path for trusted peers
    /// (`xdp = "native"` on the relay's two interfaces).
    V6gateXdp,
    /// Miredo in relay mode (RelayType cone).
    Miredo,
    /// v6gate's 6to4 relay.
    V6gate6to4,
    /// v6gate's userspace SIIT translator (`v6gate run`, one TUN queue):
    /// the 6to4 relay's comparison bar.
    V6gateSiit,
}

impl Dut {
    fn label(self) -> &'static str {
        match self {
            Dut::V6gate => "v6gate Teredo relay",
            Dut::V6gateXdp => "v6gate Teredo relay (XDP)",
            Dut::Miredo => "Miredo Teredo relay",
            Dut::V6gate6to4 => "v6gate 6to4 relay",
            Dut::V6gateSiit => "v6gate SIIT (userspace)",
        }
    }

    fn is_teredo(self) -> bool {
        matches!(self, Dut::V6gate | Dut::V6gateXdp | Dut::Miredo)
    }
}

/// One latency cell of Table I.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// IPv6 packet size.
    pub size: usize,
    /// "v6v4" (native host to Teredo client) or "v4v6".
    pub direction: &'static str,
    /// Through the relay.
    pub relay: Latency,
    /// The direct path (kernel forwarding, same size).
    pub direct: Latency,
    /// Median the relay adds (ns; 0 when below the direct path).
    pub added_p50_ns: u64,
    /// 99th percentile the relay adds.
    pub added_p99_ns: u64,
    /// Packets sent that never arrived.
    pub lost: u64,
}

/// The one-way delay of an RTP stream (the SIP paper's Table I).
#[derive(Debug, Clone, Serialize)]
pub struct Rtp {
    /// Packets received.
    pub received: u64,
    /// Packets sent.
    pub sent: u64,
    /// Mean, ns.
    pub mean_ns: u64,
    /// Median, ns.
    pub median_ns: u64,
    /// Standard deviation, ns.
    pub std_ns: u64,
    /// Full summary.
    pub latency: Latency,
}

/// Everything measured for one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceResult {
    /// Which.
    pub dut: Dut,
    /// Version string, when known.
    pub version: Option<String>,
    /// Table I cells (Teredo relays).
    pub cells: Vec<Cell>,
    /// Highest rate without loss, IPv4 to IPv6, 512-byte packets (packets/s).
    pub zero_loss_pps: Option<f64>,
    /// The tester's ceiling for this device (its calibration trial's
    /// achieved rate, or `--max-rate` when it kept up): the search's start.
    pub ceiling_pps: Option<f64>,
    /// The figure is the tester's bound, not the device's (TESTER-BOUND).
    pub tester_bound: bool,
    /// Every search trial, the calibration first.
    pub trials: Vec<Trial>,
    /// RTP one-way delay through the tunnel.
    pub rtp: Option<Rtp>,
    /// Why the device was skipped or failed.
    pub error: Option<String>,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Kernel, CPUs.
    pub machine: String,
    /// The run's parameters.
    pub quick: bool,
    /// Samples per latency cell.
    pub packets: u32,
    /// Results.
    pub devices: Vec<DeviceResult>,
}

const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 40000);
const FAKE_SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
const DUT4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const HOST4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const HOST_PORT: u16 = 9000;
/// The IPv4 address SIIT maps to the native host (EAMT), and the prefix
/// the tester's IPv4 source is translated with.
const HOST_EAM4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 100);
/// RFC 8215 local-use prefix: the well-known 64:ff9b::/96 may not carry
/// the tester's documentation-range IPv4 address (RFC 6052 §3.1).
const SIIT_POOL6: &str = "64:ff9b:1::/96";
/// The TUN device of the SIIT translator under test.
const SIIT_DEV: &str = "v6gb-siit";
const MAGIC: u32 = 0x5636_544e;

fn teredo_addr() -> Ipv6Addr {
    TeredoAddr { server: FAKE_SERVER, flags: 0, mapped: CLIENT }.to_ipv6()
}

/// An IPv6/UDP packet of `size` bytes from `src` to `dst`, payload carrying magic, seq, timestamp.
fn v6_udp(src: Ipv6Addr, dst: Ipv6Addr, size: usize, seq: u32, ts: u64) -> Vec<u8> {
    let size = size.max(40 + 8 + 16);
    let plen = (size - 40) as u16;
    let mut b = vec![0u8; size];
    b[0] = 0x60;
    b[4..6].copy_from_slice(&plen.to_be_bytes());
    b[6] = 17;
    b[7] = 64;
    b[8..24].copy_from_slice(&src.octets());
    b[24..40].copy_from_slice(&dst.octets());
    b[40..42].copy_from_slice(&HOST_PORT.to_be_bytes());
    b[42..44].copy_from_slice(&HOST_PORT.to_be_bytes());
    b[44..46].copy_from_slice(&plen.to_be_bytes());
    stamp(&mut b[48..], seq, ts);
    let acc = xlat::checksum::pseudo_v6(&src, &dst, 17, u32::from(plen)) + xlat::checksum::sum(&b[40..]);
    let c = match xlat::checksum::finish(acc) {
        0 => 0xffff,
        c => c,
    };
    b[46..48].copy_from_slice(&c.to_be_bytes());
    b
}

fn stamp(p: &mut [u8], seq: u32, ts: u64) {
    p[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    p[4..8].copy_from_slice(&seq.to_be_bytes());
    p[8..16].copy_from_slice(&ts.to_be_bytes());
}

fn read_stamp(p: &[u8]) -> Option<(u32, u64)> {
    if p.len() < 16 || p[0..4] != MAGIC.to_be_bytes() {
        return None;
    }
    Some((u32::from_be_bytes(p[4..8].try_into().ok()?), u64::from_be_bytes(p[8..16].try_into().ok()?)))
}

fn in_ns<T: Send>(ns: &Netns, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    ns.run(f)
}

fn udp_in(ns: &Netns, addr: SocketAddr) -> Result<UdpSocket> {
    in_ns(ns, || {
        let s = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
        crate::tester::udp::big_buffers(&s, 8 << 20);
        Ok(s)
    })
}

struct Bed {
    c: Netns,
    d: Netns,
    h: Netns,
    procs: Vec<Proc>,
}

fn testbed(prefix: &str, tag: &str) -> Result<Bed> {
    let c = Netns::create(&format!("{prefix}-{tag}c"))?;
    let d = Netns::create(&format!("{prefix}-{tag}d"))?;
    let h = Netns::create(&format!("{prefix}-{tag}h"))?;
    for n in [&c, &d, &h] {
        n.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
        n.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
    }
    veth(&c, "e0", &d, "dc")?;
    veth(&d, "dh", &h, "e0")?;
    c.ip(&["addr", "add", "192.0.2.2/24", "dev", "e0"])?;
    c.ip(&["addr", "add", "192.0.2.3/24", "dev", "e0"])?;
    c.ip(&["route", "add", "default", "via", "192.0.2.1"])?;
    d.ip(&["addr", "add", "192.0.2.1/24", "dev", "dc"])?;
    d.ip(&["addr", "add", "198.51.100.1/24", "dev", "dh"])?;
    d.ip(&["addr", "add", "2001:db8:1::1/64", "dev", "dh", "nodad"])?;
    h.ip(&["addr", "add", "198.51.100.2/24", "dev", "e0"])?;
    h.ip(&["addr", "add", "2001:db8:1::2/64", "dev", "e0", "nodad"])?;
    h.ip(&["route", "add", "default", "via", "198.51.100.1"])?;
    h.ip(&["-6", "route", "add", "default", "via", "2001:db8:1::1"])?;
    d.sysctl("net.ipv4.ip_forward", "1")?;
    d.sysctl("net.ipv6.conf.all.forwarding", "1")?;
    Ok(Bed { c, d, h, procs: Vec::new() })
}

fn start_dut(bed: &mut Bed, dut: Dut, bins: &(PathBuf, Option<PathBuf>), work: &Path) -> Result<()> {
    match dut {
        Dut::V6gate | Dut::V6gateXdp | Dut::V6gate6to4 => {
            let cfg = work.join(format!("{dut:?}.toml"));
            let relay = "[teredo.relay]\nbind = \"192.0.2.1:3544\"\naddress = \"2001:db8:1::1\"\nmax-peers = 1024\n";
            let text = match dut {
                Dut::V6gate => relay.to_string(),
                Dut::V6gateXdp => {
                    xdp_testbed(bed)?;
                    format!("{relay}xdp = \"native\"\nxdp-interfaces = [\"dc\", \"dh\"]\n")
                }
                _ => "[sixtofour]\nmode = \"relay\"\naddress = \"192.0.2.1\"\nreject-private = false\n".to_string(),
            };
            std::fs::write(&cfg, text)?;
            let mut cmd = bed.d.command(bins.0.to_str().unwrap_or("v6gate"));
            cmd.args(["tunnel", "--config"]).arg(&cfg);
            bed.procs.push(Proc::spawn("v6gate tunnel", cmd, Some(&work.join(format!("{dut:?}.log"))))?);
            let dev = if dut == Dut::V6gate6to4 { "v6gate-6to4" } else { "v6gate-trly" };
            wait_dev(&bed.d, dev)?;
        }
        Dut::V6gateSiit => {
            let cfg = work.join("siit.toml");
            std::fs::write(&cfg, siit_config()?)?;
            let mut cmd = bed.d.command(bins.0.to_str().unwrap_or("v6gate"));
            cmd.args(["run", "--config"]).arg(&cfg);
            bed.procs.push(Proc::spawn("v6gate run", cmd, Some(&work.join("siit.log")))?);
            wait_dev(&bed.d, SIIT_DEV)?;
        }
        Dut::Miredo => {
            let bin = bins.1.as_ref().context("miredo not installed")?;
            let conf = work.join("miredo.conf");
            std::fs::write(&conf, "RelayType cone\nInterfaceName mrelay\nBindAddress 192.0.2.1\nBindPort 3544\n")?;
            let mut cmd = bed.d.command(bin.to_str().unwrap_or("miredo"));
            cmd.args(["-f", "-c"]).arg(&conf).arg("-p").arg(work.join("miredo.pid"));
            bed.procs.push(Proc::spawn("miredo", cmd, Some(&work.join("miredo.log")))?);
            wait_dev(&bed.d, "mrelay")?;
            bed.d.ip(&["link", "set", "mrelay", "up"])?;
            bed.d.ip(&["-6", "route", "replace", "2001::/32", "dev", "mrelay"])?;
        }
    }
    Ok(())
}

/// What the XDP relay needs of the veth testbed: NAPI (GRO) at the peers
/// of the interfaces it redirects into (c's and h's `e0`), and complete
/// checksums from the senders' sockets (transmit checksum offload off on
/// c's and h's `e0`: a veth otherwise hands over CHECKSUM_PARTIAL
/// datagrams, which the fast path passes). Real NICs need neither.
fn xdp_testbed(bed: &Bed) -> Result<()> {
    for ns in [&bed.c, &bed.h] {
        ns.run(|| {
            xdp::sys::set_gro("e0", true).context("GRO on e0")?;
            xdp::sys::set_tx_checksum("e0", false).context("tx checksum offload off on e0")?;
            Ok(())
        })?;
    }
    Ok(())
}

/// `v6gate run`'s configuration for the SIIT comparison: pool6 for the
/// tester's IPv4 address, the native host behind an EAM, one TUN queue
/// (one thread, as each tunnel function has), no admin API.
fn siit_config() -> Result<String> {
    lab::gateconf::V6gate {
        header: vec!["v6gate bench tunnel: the userspace SIIT translator the 6to4 relay is compared with".into()],
        siit: Some(lab::gateconf::Siit {
            pool6: Some(SIIT_POOL6.into()),
            eamt: vec![lab::gateconf::Eam::new(format!("{HOST6}/128"), format!("{HOST_EAM4}/32"))],
            ..Default::default()
        }),
        tun: Some(lab::gateconf::Tun { name: SIIT_DEV.into(), queues: Some(1), ..Default::default() }),
        admin: Some(lab::gateconf::Admin { enabled: Some(false), listen: None }),
        ..Default::default()
    }
    .render()
}

fn wait_dev(ns: &Netns, dev: &str) -> Result<()> {
    let t0 = Instant::now();
    while ns.ip(&["link", "show", dev]).is_err() {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("{dev} did not appear");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The tester's Teredo client: its socket, its server socket, and the
/// trust procedure with the relay.
struct Client {
    sock: UdpSocket,
    server: UdpSocket,
    relay: SocketAddrV4,
}

impl Client {
    fn open(c: &Netns) -> Result<Client> {
        let sock = udp_in(c, SocketAddr::V4(CLIENT))?;
        let server = udp_in(c, SocketAddr::V4(SocketAddrV4::new(FAKE_SERVER, 3544)))?;
        server.set_nonblocking(true)?;
        Ok(Client { sock, server, relay: SocketAddrV4::new(DUT4, 3544) })
    }

    /// Answer an indirect bubble the relay sent to our "server" with a
    /// direct bubble (RFC 4380 §5.2.3), or just refresh the peer entry.
    fn bubble(&self) {
        let mut b = [0u8; 2048];
        let mut dst = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x8000, 0xffff, 0xffff, 0xfffd);
        while let Ok((n, _)) = self.server.recv_from(&mut b) {
            if let Ok(p) = teredo::parse(&b[..n]) {
                dst = p.ipv6_packet().src();
            }
        }
        let mut bb = [0u8; 40];
        if teredo::bubble(teredo_addr(), dst, &mut bb).is_ok() {
            let _ = self.sock.send_to(&bb, self.relay);
        }
    }

    /// Make the relay trust us: the host sends until a packet reaches us.
    fn trust(&self, host: &UdpSocket) -> Result<()> {
        self.sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let to = SocketAddr::new(teredo_addr().into(), HOST_PORT);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            host.send_to(b"hello", to)?;
            std::thread::sleep(Duration::from_millis(50));
            self.bubble();
            let mut b = [0u8; 2048];
            if let Ok((n, _)) = self.sock.recv_from(&mut b) {
                if teredo::parse(&b[..n]).is_ok_and(|p| !p.is_bubble()) {
                    return Ok(());
                }
            }
        }
        bail!("the relay never trusted the tester's client")
    }
}

fn hist_of(samples: &[u64]) -> Latency {
    let mut h = LatencyHistogram::new();
    for s in samples {
        h.record(*s);
    }
    h.summary()
}

/// One packet in flight at a time: `send(seq, ts)` sends; `recv()` returns
/// a stamp when one arrives within 100 ms.
fn ping_pong(
    n: u32,
    mut send: impl FnMut(u32, u64) -> Result<()>,
    mut recv: impl FnMut() -> Option<(u32, u64)>,
    keepalive: impl Fn(),
) -> Result<(Vec<u64>, u64)> {
    let mut samples = Vec::with_capacity(n as usize);
    let (mut lost, mut next_keepalive) = (0, 0);
    for seq in 0..n {
        if seq == next_keepalive {
            keepalive();
            next_keepalive += 500;
        }
        send(seq, now_ns())?;
        let deadline = now_ns() + 100_000_000;
        loop {
            match recv() {
                Some((s, ts)) if s == seq => {
                    samples.push(now_ns().saturating_sub(ts));
                    break;
                }
                Some(_) => {}
                None if now_ns() > deadline => {
                    lost += 1;
                    break;
                }
                None => {}
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok((samples, lost))
}

fn recv_stamp(s: &UdpSocket, offset: usize) -> Option<(u32, u64)> {
    let mut b = [0u8; 2048];
    let (n, _) = s.recv_from(&mut b).ok()?;
    read_stamp(b.get(offset..n)?)
}

fn table_one(bed: &Bed, n: u32, sizes: &[usize]) -> Result<Vec<Cell>> {
    let client = Client::open(&bed.c)?;
    let host6 = udp_in(&bed.h, SocketAddr::new(HOST6.into(), HOST_PORT))?;
    let host4 = udp_in(&bed.h, SocketAddr::new(HOST4.into(), HOST_PORT))?;
    let direct_c = udp_in(&bed.c, SocketAddr::new(Ipv4Addr::new(192, 0, 2, 2).into(), HOST_PORT))?;
    for s in [&client.sock, &host6, &host4, &direct_c] {
        s.set_read_timeout(Some(Duration::from_millis(5)))?;
    }
    client.trust(&host6)?;
    client.sock.set_read_timeout(Some(Duration::from_millis(5)))?;
    let mut cells = Vec::new();
    let t = teredo_addr();
    for &size in sizes {
        // IPv4 to IPv6: the client's Teredo packet to the host.
        let (relay, lost) = ping_pong(
            n,
            |seq, ts| Ok(client.sock.send_to(&v6_udp(t, HOST6, size, seq, ts), client.relay).map(|_| ())?),
            || recv_stamp(&host6, 0),
            || client.bubble(),
        )?;
        let payload = size.saturating_sub(28).max(16);
        let (direct, _) = ping_pong(
            n,
            |seq, ts| {
                let mut p = vec![0u8; payload];
                stamp(&mut p, seq, ts);
                Ok(direct_c.send_to(&p, SocketAddr::new(HOST4.into(), HOST_PORT)).map(|_| ())?)
            },
            || recv_stamp(&host4, 0),
            || {},
        )?;
        cells.push(cell(size, "v4v6", &relay, &direct, lost));
        // IPv6 to IPv4: the host's UDP datagram to the client's Teredo address.
        let v6payload = size.saturating_sub(48).max(16);
        let (relay, lost) = ping_pong(
            n,
            |seq, ts| {
                let mut p = vec![0u8; v6payload];
                stamp(&mut p, seq, ts);
                Ok(host6.send_to(&p, SocketAddr::new(t.into(), HOST_PORT)).map(|_| ())?)
            },
            || recv_stamp(&client.sock, 48),
            || client.bubble(),
        )?;
        let (direct, _) = ping_pong(
            n,
            |seq, ts| {
                let mut p = vec![0u8; payload];
                stamp(&mut p, seq, ts);
                Ok(host4.send_to(&p, SocketAddr::new(Ipv4Addr::new(192, 0, 2, 2).into(), HOST_PORT)).map(|_| ())?)
            },
            || recv_stamp(&direct_c, 0),
            || {},
        )?;
        cells.push(cell(size, "v6v4", &relay, &direct, lost));
    }
    Ok(cells)
}

fn cell(size: usize, direction: &'static str, relay: &[u64], direct: &[u64], lost: u64) -> Cell {
    let (r, d) = (hist_of(relay), hist_of(direct));
    Cell {
        size,
        direction,
        relay: r,
        direct: d,
        added_p50_ns: r.p50_ns.saturating_sub(d.p50_ns),
        added_p99_ns: r.p99_ns.saturating_sub(d.p99_ns),
        lost,
    }
}

/// One zero-loss trial (IPv4 to IPv6, 512-byte packets, from the tester's
/// client).
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    /// Offered rate, packets/s.
    pub rate: f64,
    /// Every packet arrived and the tester kept up.
    pub passed: bool,
    /// Packets received.
    pub received: u64,
    /// Packets sent.
    pub sent: u64,
    /// The rate the tester achieved, packets/s.
    pub sent_pps: f64,
    /// Why the tester fell behind, when it did (TESTER-BOUND: neither a
    /// pass nor a failure of the device).
    pub tester_bound: Option<String>,
    /// The calibration trial (offering `--max-rate`), not a search trial.
    pub calibration: bool,
}

/// The search's results: the zero-loss rate (if any), the tester's
/// ceiling, whether the figure is the tester's, every trial.
type Searched = (Option<f64>, f64, bool, Vec<Trial>);

/// A throughput trial's lag budget: a sender later than this against its
/// schedule (p99) offered bursts, not the rate (the xlat bench's late
/// budget).
const LAG_BUDGET_NS: u64 = 10_000_000;

/// A 512-byte IPv6/UDP packet from `src` to the native host's throughput port.
fn v6_probe(src: Ipv6Addr) -> Vec<u8> {
    let mut pkt = v6_udp(src, HOST6, 512, 0, 0);
    pkt[42..44].copy_from_slice(&(HOST_PORT + 1).to_be_bytes());
    pkt[40..42].copy_from_slice(&(HOST_PORT + 1).to_be_bytes());
    // Fix the checksum once for the new ports (the stamp is not checked by the receiver).
    pkt[46] = 0;
    pkt[47] = 0;
    let acc = xlat::checksum::pseudo_v6(&src, &HOST6, 17, 472) + xlat::checksum::sum(&pkt[40..]);
    let c = xlat::checksum::finish(acc);
    pkt[46..48].copy_from_slice(&if c == 0 { 0xffffu16 } else { c }.to_be_bytes());
    pkt
}

/// The zero-loss search towards the native host's throughput port,
/// 512-byte IPv6 packets arriving there: Teredo from the tester's client,
/// 6to4 from its site over protocol 41, or IPv4 translated by SIIT.
/// The search starts at the tester's ceiling with this device, measured
/// first by a calibration trial offering `search.max`.
fn throughput(bed: &Bed, dut: Dut, secs: f64, search: Search) -> Result<Searched> {
    let host6 = udp_in(&bed.h, SocketAddr::new(HOST6.into(), HOST_PORT + 1))?;
    host6.set_read_timeout(Some(Duration::from_millis(20)))?;
    let mut keepalive: Box<dyn FnMut()> = Box::new(|| {});
    let mut send: Box<dyn FnMut()> = match dut {
        Dut::V6gate | Dut::V6gateXdp | Dut::Miredo => {
            let client = std::sync::Arc::new(Client::open(&bed.c)?);
            let trust_host = udp_in(&bed.h, SocketAddr::new(HOST6.into(), HOST_PORT))?;
            client.trust(&trust_host)?;
            let pkt = v6_probe(teredo_addr());
            let c2 = client.clone();
            keepalive = Box::new(move || c2.bubble());
            Box::new(move || {
                let _ = client.sock.send_to(&pkt, client.relay);
            })
        }
        Dut::V6gate6to4 => {
            let site = xlat::tunnel::sixto4::addr(Ipv4Addr::new(192, 0, 2, 2), 0, 1);
            let raw = bed.c.run(|| Ok(Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(41)))?))?;
            let to = SockAddr::from(SocketAddrV4::new(DUT4, 0));
            let pkt = v6_probe(site);
            Box::new(move || {
                let _ = raw.send_to(&pkt, &to);
            })
        }
        Dut::V6gateSiit => {
            // 20 + 8 + 464 bytes of IPv4 become 40 + 8 + 464 of IPv6.
            let sock = udp_in(&bed.c, SocketAddr::new(Ipv4Addr::new(192, 0, 2, 2).into(), HOST_PORT + 1))?;
            let to = SocketAddr::new(HOST_EAM4.into(), HOST_PORT + 1);
            let payload = vec![0x5au8; 464];
            Box::new(move || {
                let _ = sock.send_to(&payload, to);
            })
        }
    };
    let mut trials = Vec::new();
    let mut run = |rate: f64, calibration: bool| -> Result<Trial> {
        keepalive();
        let total = (rate * secs).max(1.0) as u64;
        let (received, sent) = std::thread::scope(|s| -> Result<(u64, SendStats)> {
            let rx = s.spawn(|| {
                let mut got = 0u64;
                let mut b = [0u8; 2048];
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs_f64(secs + 0.5) && got < total {
                    if host6.recv_from(&mut b).is_ok() {
                        got += 1;
                    }
                }
                got
            });
            // A sender that cannot keep up stops at the trial's end (its
            // shortfall shows in the achieved rate) instead of running long.
            let interval = 1e9 / rate;
            let t0 = now_ns();
            let mut pacer = Pacer::new(t0, interval, total).spin(50_000).deadline(t0 + (secs * 1e9) as u64 + 1_000_000);
            let mut st = SendStats::default();
            while let Some(due) = pacer.wait() {
                for _ in 0..due {
                    st.lag.record(now_ns().saturating_sub(pacer.due_at(pacer.next())));
                    send();
                    pacer.advance(1);
                }
            }
            st.sent = pacer.next();
            st.secs = ((now_ns() - t0) as f64 / 1e9).max(st.sent as f64 * interval / 1e9);
            Ok((rx.join().unwrap_or(0), st))
        })?;
        let sent_pps = if sent.secs > 0.0 { sent.sent as f64 / sent.secs } else { 0.0 };
        let tester_bound = fell_behind(sent_pps, sent.lag.summary().p99_ns, rate, LAG_BUDGET_NS);
        let passed = tester_bound.is_none() && received >= total;
        Ok(Trial { rate, passed, received, sent: sent.sent, sent_pps, tester_bound, calibration })
    };
    // The tester's ceiling with this device: what it sent offering the maximum.
    let cal = run(search.max, true)?;
    let tester_max = cal.tester_bound.is_some();
    let max = if tester_max { cal.sent_pps.min(search.max) } else { search.max };
    eprintln!("    tester ceiling: offered {:.0}, sent {:.0} packets/s", cal.rate, cal.sent_pps);
    trials.push(cal);
    let found = Search { max, ..search }.run(|rate| {
        let t = run(rate, false)?;
        let j = match (&t.tester_bound, t.passed) {
            (Some(_), _) => Judged::TesterBound,
            (None, p) => Judged::of(p),
        };
        trials.push(t);
        Ok((j, ()))
    })?;
    let bound = found.bound_by_tester() || (found.capped() && tester_max);
    Ok(((found.best > 0.0).then_some(found.best), max, bound, trials))
}

/// G.711 RTP (12 + 160 bytes) every 20 ms through the tunnel, client to host.
fn rtp(bed: &Bed, dut: Dut, n: u32) -> Result<Rtp> {
    let host6 = udp_in(&bed.h, SocketAddr::new(HOST6.into(), HOST_PORT))?;
    host6.set_read_timeout(Some(Duration::from_millis(5)))?;
    let size = 40 + 8 + 12 + 160;
    let mut samples = Vec::new();
    let mut sent = 0u64;
    let mut pacer = Pacer::new(now_ns(), 20e6, u64::from(n));
    let drain = |samples: &mut Vec<u64>| {
        while let Some((_, ts)) = recv_stamp(&host6, 0) {
            samples.push(now_ns().saturating_sub(ts));
        }
    };
    match dut {
        Dut::V6gate6to4 => {
            let site = xlat::tunnel::sixto4::addr(Ipv4Addr::new(192, 0, 2, 2), 0, 1);
            let raw = bed.c.run(|| Ok(Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(41)))?))?;
            let to = SockAddr::from(SocketAddrV4::new(DUT4, 0));
            while pacer.wait().is_some() {
                raw.send_to(&v6_udp(site, HOST6, size, sent as u32, now_ns()), &to)?;
                pacer.advance(1);
                sent += 1;
                drain(&mut samples);
            }
        }
        _ => {
            let client = Client::open(&bed.c)?;
            client.trust(&host6)?;
            let t = teredo_addr();
            let (mut i, mut next_keepalive) = (0u32, 0u32);
            while pacer.wait().is_some() {
                if i == next_keepalive {
                    client.bubble();
                    next_keepalive += 100;
                }
                client.sock.send_to(&v6_udp(t, HOST6, size, i, now_ns()), client.relay)?;
                pacer.advance(1);
                sent += 1;
                i += 1;
                drain(&mut samples);
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    drain(&mut samples);
    let mean = samples.iter().sum::<u64>() / samples.len().max(1) as u64;
    let var = samples.iter().map(|s| (*s as f64 - mean as f64).powi(2)).sum::<f64>() / samples.len().max(1) as f64;
    let lat = hist_of(&samples);
    Ok(Rtp {
        received: samples.len() as u64,
        sent,
        mean_ns: mean,
        median_ns: lat.p50_ns,
        std_ns: var.sqrt() as u64,
        latency: lat,
    })
}

fn machine() -> String {
    format!("Linux {}, {} CPUs", crate::report::kernel_release(), crate::report::online_cpus())
}

/// Runs the bench and writes the results; returns the report.
pub fn run(args: &Args) -> Result<Report> {
    if !nix::unistd::geteuid().is_root() {
        bail!("v6gate bench tunnel needs root (network namespaces)");
    }
    let (packets, rtp_packets, secs, trials) = (args.packets, args.rtp_packets, args.trial_secs, args.max_trials);
    let v6gate = peers::v6gate(args.v6gate_bin.as_deref())?;
    let miredo = peers::find(&args.miredo_bin);
    let mut out = Outputs::create(&args.out)?;
    let prefix = format!("v6gate-btn-{}", std::process::id());
    let guard = RunGuard::new(&prefix, std::env::temp_dir().join(&prefix))?;
    let bins = (v6gate.clone(), miredo.clone());
    let mut devices = Vec::new();
    for (i, dut) in [Dut::V6gate, Dut::V6gateXdp, Dut::Miredo, Dut::V6gate6to4, Dut::V6gateSiit].into_iter().enumerate()
    {
        let version = match dut {
            Dut::Miredo => miredo.as_deref().and_then(|b| {
                Command::new(b)
                    .arg("-V")
                    .output()
                    .ok()
                    .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").to_string())
            }),
            _ => peers::version(&v6gate),
        };
        let mut r = DeviceResult {
            dut,
            version,
            cells: vec![],
            zero_loss_pps: None,
            ceiling_pps: None,
            tester_bound: false,
            trials: vec![],
            rtp: None,
            error: None,
        };
        if dut == Dut::Miredo && miredo.is_none() {
            r.error = Some(format!("{} not installed: row skipped", args.miredo_bin.display()));
            eprintln!("  {}: skipped (not installed)", dut.label());
            devices.push(r);
            continue;
        }
        eprintln!("  {}", dut.label());
        let res = (|| -> Result<()> {
            let mut bed = testbed(guard.ns_prefix(), &format!("{i}"))?;
            start_dut(&mut bed, dut, &bins, guard.work())?;
            std::thread::sleep(Duration::from_millis(300));
            if dut.is_teredo() {
                r.cells = table_one(&bed, packets, &args.sizes)?;
            }
            if !args.no_search {
                let (best, ceiling, bound, tr) =
                    throughput(&bed, dut, secs, Search::rfc2544(args.max_rate, 0.05, trials))?;
                r.zero_loss_pps = best;
                r.ceiling_pps = Some(ceiling);
                r.tester_bound = bound;
                r.trials = tr;
            }
            if dut != Dut::V6gateSiit {
                r.rtp = Some(rtp(&bed, dut, rtp_packets)?);
            }
            for p in &mut bed.procs {
                p.alive()?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            eprintln!("  {}: error: {e:#}", dut.label());
            r.error = Some(format!("{e:#}"));
        }
        devices.push(r);
    }
    let report = Report { machine: machine(), quick: args.quick, packets, devices };
    out.json("results.json", &report)?;
    out.text("results.md", &markdown(&report))?;
    out.svg("table1-latency.svg", &plot(&report))?;
    drop(guard);
    eprintln!("bench tunnel: {}", out.summary());
    Ok(report)
}

/// The latency bar: each v6gate relay's added median over Miredo's, per
/// cell (bar: <= 0.5 at every size and direction).
fn latency_ratios(r: &Report) -> String {
    let Some(m) = r.devices.iter().find(|d| d.dut == Dut::Miredo && !d.cells.is_empty()) else { return String::new() };
    let mut s = String::from("\nAdded median latency / Miredo's, per cell (bar: <= 0.5 everywhere):\n\n");
    for d in r.devices.iter().filter(|d| matches!(d.dut, Dut::V6gate | Dut::V6gateXdp) && !d.cells.is_empty()) {
        let cells: Vec<String> = d
            .cells
            .iter()
            .filter_map(|c| {
                let mc = m.cells.iter().find(|x| x.size == c.size && x.direction == c.direction)?;
                let v = if mc.added_p50_ns == 0 {
                    "-".into()
                } else {
                    format!("{:.2}", c.added_p50_ns as f64 / mc.added_p50_ns as f64)
                };
                Some(format!("{} {} B {v}", c.direction, c.size))
            })
            .collect();
        s.push_str(&format!("- {}: {}\n", d.dut.label(), cells.join(", ")));
    }
    s
}

fn plot(r: &Report) -> LinePlot {
    let mut series = Vec::new();
    for d in r.devices.iter().filter(|d| !d.cells.is_empty()) {
        for dir in ["v6v4", "v4v6"] {
            series.push(Series {
                name: format!("{} {dir}", d.dut.label()),
                points: d
                    .cells
                    .iter()
                    .filter(|c| c.direction == dir)
                    .map(|c| (c.size as f64, c.added_p50_ns as f64 / 1e3))
                    .collect(),
            });
        }
    }
    LinePlot {
        title: "Teredo relay added latency (median over the direct path)".into(),
        x_label: "IPv6 packet size (bytes)".into(),
        y_label: "added latency (µs)".into(),
        series,
    }
}

/// The Markdown tables: Table I, the zero-loss rates, the RTP rows.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "# v6gate bench tunnel\n\n{}{}\n\n",
        r.machine,
        if r.quick { ", --quick (functional run, not figures)" } else { "" }
    );
    s.push_str(&format!(
        "## Teredo relay added latency (the mobility paper's Table I), {} samples a cell\n\n",
        r.packets
    ));
    let mut rows = Vec::new();
    for d in &r.devices {
        for c in &d.cells {
            rows.push(vec![
                d.dut.label().to_string(),
                c.direction.into(),
                c.size.to_string(),
                us(c.added_p50_ns),
                us(c.added_p99_ns),
                us(c.relay.p50_ns),
                us(c.direct.p50_ns),
                c.lost.to_string(),
            ]);
        }
    }
    s.push_str(&markdown_table(
        &[
            ("relay", Align::Left),
            ("direction", Align::Left),
            ("bytes", Align::Right),
            ("added median (µs)", Align::Right),
            ("added p99 (µs)", Align::Right),
            ("relay median (µs)", Align::Right),
            ("direct median (µs)", Align::Right),
            ("lost", Align::Right),
        ],
        &rows,
    ));
    s.push_str("\n## Zero-loss throughput, IPv4 side to IPv6 side, 512-byte IPv6 packets, one thread each\n\n");
    let rows: Vec<Vec<String>> = r
        .devices
        .iter()
        .map(|d| {
            vec![
                d.dut.label().into(),
                d.zero_loss_pps.map_or("-".into(), |p| format!("{p:.0}")),
                d.ceiling_pps.map_or("-".into(), |p| format!("{p:.0}")),
                if d.tester_bound { "TESTER-BOUND".into() } else { String::new() },
                d.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            ("device", Align::Left),
            ("packets/s", Align::Right),
            ("tester ceiling", Align::Right),
            ("bound", Align::Left),
            ("note", Align::Left),
        ],
        &rows,
    ));
    s.push_str(
        "\nEach search starts at the tester's ceiling with that device (a calibration trial offering --max-rate: \
         what the tester sent). TESTER-BOUND: the search ended below a rate the tester could not offer (it sent \
         under 98 % of the rate, or its send lag p99 passed 10 ms), or the device carried the whole ceiling: the \
         figure is the tester's, not the device's.\n",
    );
    let pps = |dut: Dut| r.devices.iter().find(|d| d.dut == dut).and_then(|d| d.zero_loss_pps);
    let bound = |dut: Dut| r.devices.iter().any(|d| d.dut == dut && d.tester_bound);
    // A ratio of tester-bound figures says nothing about the devices.
    let ratio = |a: Dut, b: Dut| match (pps(a), pps(b)) {
        (Some(x), Some(y)) if y > 0.0 && (bound(a) || bound(b)) => format!("{:.2} (TESTER-BOUND: not judged)", x / y),
        (Some(x), Some(y)) if y > 0.0 => format!("{:.2}", x / y),
        _ => "-".into(),
    };
    s.push_str(&format!(
        "\nRatios in this run: 6to4 relay / userspace SIIT = {} (bar: >= 1); v6gate Teredo relay / Miredo = {} (bar: >= 3); \
         v6gate Teredo relay (XDP) / Miredo = {}.\n",
        ratio(Dut::V6gate6to4, Dut::V6gateSiit),
        ratio(Dut::V6gate, Dut::Miredo),
        ratio(Dut::V6gateXdp, Dut::Miredo)
    ));
    s.push_str(&latency_ratios(r));
    s.push_str("\n## RTP one-way delay through the tunnel (the SIP-over-IPv6 paper's Table I rows)\n\n");
    let rows: Vec<Vec<String>> = r
        .devices
        .iter()
        .filter_map(|d| {
            d.rtp.as_ref().map(|t| {
                vec![
                    d.dut.label().into(),
                    format!("{:.3}", t.mean_ns as f64 / 1e6),
                    format!("{:.3}", t.median_ns as f64 / 1e6),
                    format!("{:.3}", t.std_ns as f64 / 1e6),
                    format!("{}/{}", t.received, t.sent),
                ]
            })
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            ("tunnel", Align::Left),
            ("mean (ms)", Align::Right),
            ("median (ms)", Align::Right),
            ("std (ms)", Align::Right),
            ("received", Align::Right),
        ],
        &rows,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_shrinks_the_run_and_given_options_win() {
        let parse = |argv: &[&str]| crate::parse_args::<Args>(argv);
        let q = parse(&["x", "--quick"]);
        assert_eq!((q.packets, q.rtp_packets, q.trial_secs, q.max_trials), (200, 50, 0.5, 6));
        let g = parse(&["x", "--quick", "--max-trials", "14", "--packets", "2000"]);
        assert_eq!((g.packets, g.rtp_packets, g.max_trials), (2000, 50, 14), "given values win");
        let f = parse(&["x"]);
        assert_eq!((f.packets, f.rtp_packets, f.trial_secs, f.max_trials), (2000, 500, 3.0, 14));
    }

    #[test]
    fn probe_packets_carry_their_stamp_and_a_valid_checksum() {
        let p = v6_udp(teredo_addr(), HOST6, 512, 7, 123_456);
        assert_eq!(p.len(), 512);
        assert_eq!(read_stamp(&p[48..]), Some((7, 123_456)));
        let e = etherparse::SlicedPacket::from_ip(&p).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = e.transport else { panic!("not UDP") };
        let ip = etherparse::Ipv6HeaderSlice::from_slice(&p).unwrap().to_header();
        assert_eq!(u.to_header().calc_checksum_ipv6(&ip, u.payload()).unwrap(), u.checksum());
        assert_eq!(read_stamp(&[0; 8]), None);
        assert_eq!(v6_udp(teredo_addr(), HOST6, 10, 0, 0).len(), 64, "never below the stamp");
    }
}
