//! `bench trgw --tester xdp` (and `afxdp`): a trial's media as RTP frames
//! from the XDP tester (`tester::xdp`, `bpf/tester.bpf.c`; or its AF_XDP
//! generator, `tester::afxdp`) instead of UDP sockets.
//!
//! The calls are set up over ng exactly as for the socket tester, with
//! the UA sockets' addresses in the SDP; then:
//!
//! 1. **Warm-up (latching).** Every stream sends one RTP probe from its UA
//!    socket to the relay's leg (paced, about 30,000 packets/s): the relay
//!    latches on the UA's address and port and resolves the far UA's
//!    neighbour; the XDP relay mirrors the latched streams into its fast
//!    path meanwhile (a quarter second at most, waited for).
//! 2. **Media.** One frame template per stream (Ethernet from the sending
//!    UA's interface to the relay's, IPv6 or IPv4, UDP from the UA
//!    socket's address and port to the relay's leg, 172 bytes of RTP: the
//!    paper's 234- and 214-byte frames) and the XDP generator sends them
//!    round-robin at N × 50 frames/s: stream `i`'s packets go every 20 ms,
//!    the streams evenly phase-spread over the interval. Each frame gets
//!    its RTP header in the kernel (SSRC per stream, the stream's own
//!    sequence number and timestamp) and the tester's stamp after it.
//! 3. **Counting.** The XDP receiver on the far UA's interface judges every
//!    frame (first arrival, duplicate, late against the budget), samples
//!    one-way latencies, and drops the frame before the UA's socket; its
//!    bitmap of first arrivals gives the loss per stream afterwards
//!    (aggregate counters in the kernel, exact per-stream loss from the
//!    bitmap: frame `seq` is stream `seq % N`'s packet `seq / N`).
//!
//! One direction per trial: `both` needs two generators at once and is
//! not measured by this tester (the socket tester does it).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use lab::netns::Netns;
use lab::topo::RelayTopo;

use super::Direction;
use crate::harness::cpu;
use crate::tester::frame::{Header, Template, ETH_LEN, FCS_LEN, UDP_LEN};
use crate::tester::{probe, FlowLoss, FrameTester, Outcome, Port, TrialSpec};

/// Media streams one trial can carry: the generator's flow index is 16 bits.
pub const MAX_STREAMS: usize = u16::MAX as usize;

/// Warm-up pace: probes per burst and the pause between bursts.
const WARM_BURST: usize = 64;
const WARM_PAUSE: Duration = Duration::from_millis(2);
/// Time the XDP relay takes at most to mirror a latched stream into its
/// fast path (docs/xdp.md), and room.
const MIRROR_WAIT: Duration = Duration::from_millis(300);

/// Shortest gap between two generator calls. A call has a fixed cost of
/// several microseconds (a `BPF_PROG_RUN` with its page pool); at 20 µs
/// (the frame tester's default) 650,000 frames/s would take 50,000 calls a
/// second. Every 100 µs the frames due go in one call (65 at 650,000/s);
/// each frame is timestamped when it is generated, so the burst adds to
/// the measured latency only the queueing it causes downstream.
const MIN_WAKE: Duration = Duration::from_micros(100);

static TRIAL_ID: AtomicU16 = AtomicU16::new(1);

/// G.711 packetisation: one packet per stream every 20 ms.
pub const PACKET_INTERVAL_NS: u64 = 20_000_000;

/// The generator's rate for `streams` streams: each stream's packets
/// [`PACKET_INTERVAL_NS`] apart. Frames go round-robin over the streams
/// (frame `seq` is stream `seq % streams`'s packet `seq / streams`) and the
/// pacer spaces frames evenly, so stream `i` sends at
/// `i * 20 ms / streams + k * 20 ms`: evenly phase-spread.
pub fn rate_pps(streams: usize) -> f64 {
    streams as f64 * 1e9 / PACKET_INTERVAL_NS as f64
}

/// Ethernet frame size (RFC 2544, FCS included) of an RTP probe of this
/// IP version: 238 bytes for IPv6, 218 for IPv4 (234 and 214 on the veth).
pub fn rtp_frame_size(v6: bool) -> usize {
    ETH_LEN + if v6 { 40 } else { 20 } + UDP_LEN + probe::LEN + FCS_LEN
}

/// One stream of a trial: the UA socket it latched from and the relay's leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpStream {
    /// Source: the sending UA socket's address and port.
    pub src: SocketAddr,
    /// Destination: the relay's leg for that UA (or the far UA, with kernel forwarding).
    pub dst: SocketAddr,
}

/// One frame template per stream (the generator fills the RTP header and
/// the stamp per frame).
pub fn templates(src_mac: [u8; 6], dst_mac: [u8; 6], streams: &[RtpStream]) -> Result<Vec<Template>> {
    streams
        .iter()
        .map(|s| {
            let h =
                Header { dst_mac, src_mac, src: s.src.ip(), dst: s.dst.ip(), sport: s.src.port(), dport: s.dst.port() };
            Template::new(&h, rtp_frame_size(s.src.is_ipv6())).map_err(|e| anyhow!("RTP frame {s:?}: {e}"))
        })
        .collect()
}

/// The MAC address of `dev` in `ns` (`ip -br link`).
pub(super) fn mac(ns: &Netns, dev: &str) -> Result<[u8; 6]> {
    let out = ns.ip(&["-br", "link", "show", "dev", dev])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = text.split_whitespace().nth(2).ok_or_else(|| anyhow!("no MAC address of {dev}: {text}"))?;
    parse_mac(field).ok_or_else(|| anyhow!("{dev}: not a MAC address: {field}"))
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// The relay namespace's ports.
const RELAY_PORTS: [&str; 2] = ["r6", "r4"];

/// Where the receive work of the relay namespace's ports runs with the
/// XDP tester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ingress {
    /// In the softirq of the CPU that transmitted into the port (the
    /// generator's, for the port facing the sending UA).
    Softirq,
    /// Threaded NAPI, the threads on the relay CPUs (`--threaded-napi`).
    Threaded,
    /// The NAPI poll in the softirq, the rest steered to the relay CPUs
    /// (`--rps`).
    Rps,
}

impl Ingress {
    pub(super) fn of(a: &super::Args) -> Ingress {
        match (a.tester, a.threaded_napi, a.rps) {
            (t, true, _) if t.frames() => Ingress::Threaded,
            (t, false, true) if t.frames() => Ingress::Rps,
            _ => Ingress::Softirq,
        }
    }
}

/// Readies a topology for the XDP tester: NAPI (GRO) on the relay
/// namespace's ports, so that frames the generator transmits into them
/// land (the receiver's own program does that on the UA ports), and the
/// `ingress` placement on the relay CPUs ([`cpu::threaded_napi`], whose
/// threads [`media`] places before each trial, or [`cpu::rps`]).
pub(super) fn prepare(topo: &RelayTopo, ingress: Ingress, relay_cpus: &[usize]) -> Result<()> {
    for dev in RELAY_PORTS {
        crate::tester::xdp::prepare_port(&Port { ns: topo.relay.name().into(), ifname: dev.into(), cpus: vec![] })?;
        match ingress {
            Ingress::Softirq => {}
            Ingress::Threaded => cpu::threaded_napi(&topo.relay, dev)?,
            Ingress::Rps => cpu::rps(&topo.relay, dev, relay_cpus)?,
        }
    }
    Ok(())
}

/// Step 1: one probe per stream from its UA socket (`socks[i]` sends
/// stream `i`), paced; then the wait for the XDP relay's mirroring.
fn warm_up(socks: &[&UdpSocket], streams: &[RtpStream], xdp_relay: bool) -> Result<()> {
    let mut buf = [0u8; probe::LEN];
    for (i, (s, st)) in socks.iter().zip(streams).enumerate() {
        probe::Probe { stream: i as u32, seq: 0, sent_ns: 0 }.write(&mut buf);
        s.send_to(&buf, st.dst).with_context(|| format!("warm-up packet of stream {i} to {}", st.dst))?;
        if (i + 1) % WARM_BURST == 0 {
            std::thread::sleep(WARM_PAUSE);
        }
    }
    if xdp_relay {
        std::thread::sleep(MIRROR_WAIT);
    }
    Ok(())
}

/// What [`media`] needs of the trial.
pub(super) struct Media<'a> {
    /// The frame tester (`xdp` or `afxdp`).
    pub tester: &'a dyn FrameTester,
    pub topo: &'a RelayTopo,
    pub dir: Direction,
    /// Per call: (relay leg for ua6 to send to, relay leg for ua4 to send to).
    pub dst: &'a [(SocketAddr, SocketAddr)],
    /// The UA sockets of each side (ua6, ua4); call `i` uses socket `i % k`.
    pub socks: [&'a [UdpSocket]; 2],
    pub packets: u32,
    pub budget_ms: u64,
    pub tester_cpus: &'a [usize],
    /// Threaded NAPI on the relay's ports (see [`prepare`]): its threads go
    /// on these CPUs.
    pub napi_cpus: Option<&'a [usize]>,
    /// The relay is the XDP one (wait for its mirroring after the warm-up).
    pub xdp_relay: bool,
    /// The generator thread under SCHED_FIFO (`--realtime`).
    pub realtime: bool,
}

/// The sending and receiving side of a direction: (tx namespace, tx
/// interface, the relay's interface facing it, rx namespace, rx
/// interface, socket side index).
fn sides(
    topo: &RelayTopo,
    dir: Direction,
) -> Result<(&Netns, &'static str, &'static str, &Netns, &'static str, usize)> {
    match dir {
        Direction::V6v4 => Ok((&topo.ua6, "u6", "r6", &topo.ua4, "u4", 0)),
        Direction::V4v6 => Ok((&topo.ua4, "u4", "r4", &topo.ua6, "u6", 1)),
        Direction::Both => {
            bail!("the XDP tester sends one direction per trial (v6v4 or v4v6); `both` is measured by --tester udp")
        }
    }
}

/// Steps 1 to 3 of one trial: the outcome and the loss per stream.
pub(super) fn media(m: &Media) -> Result<(Outcome, FlowLoss)> {
    let (tx_ns, tx_if, peer_if, rx_ns, rx_if, side) = sides(m.topo, m.dir)?;
    let socks = m.socks[side];
    if socks.is_empty() || m.dst.is_empty() {
        bail!("a trial needs at least one call");
    }
    if m.dst.len() > MAX_STREAMS {
        bail!("{} streams: the XDP tester carries at most {MAX_STREAMS} per trial", m.dst.len());
    }
    let streams: Vec<RtpStream> = m
        .dst
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Ok(RtpStream { src: socks[i % socks.len()].local_addr()?, dst: if side == 0 { d.0 } else { d.1 } })
        })
        .collect::<Result<_>>()?;
    let by_stream: Vec<&UdpSocket> = (0..streams.len()).map(|i| &socks[i % socks.len()]).collect();
    warm_up(&by_stream, &streams, m.xdp_relay)?;
    if let Some(cpus) = m.napi_cpus {
        let fifo = m.realtime.then_some(cpu::RT_PRIORITY + 1);
        if cpu::pin_napi(&RELAY_PORTS, cpus, fifo)? == 0 {
            bail!("threaded NAPI: no napi/r6-* or napi/r4-* kernel thread to place (run without --threaded-napi)");
        }
    }
    let flows = templates(mac(tx_ns, tx_if)?, mac(&m.topo.relay, peer_if)?, &streams)?;
    let n = streams.len() as u64;
    let budget = Duration::from_millis(m.budget_ms);
    let spec = TrialSpec {
        tx: Port { ns: tx_ns.name().into(), ifname: tx_if.into(), cpus: m.tester_cpus.to_vec() },
        rx: Port { ns: rx_ns.name().into(), ifname: rx_if.into(), cpus: vec![] },
        flows: Arc::new(flows),
        rate_pps: rate_pps(streams.len()),
        frames: n * u64::from(m.packets),
        drain: budget + Duration::from_millis(100),
        late: budget,
        id: TRIAL_ID.fetch_add(1, Ordering::Relaxed),
        learn: false,
        batch: 64,
        // What arrives: IPv6 at ua6; at ua4 IPv4 through a relay, IPv6
        // with kernel forwarding (the ceiling's ua4 has IPv6).
        rx_v6: side == 1 || m.topo.kernel,
        rtp: true,
        per_flow: true,
        min_wake: Some(MIN_WAKE),
        // A generator held up for up to a budget still sends every frame
        // (each is judged by its own send time); beyond, the trial is
        // tester-bound and fails (`Trial::unsent`).
        overrun: Some(budget),
        realtime: m.realtime,
        backpressure: false,
    };
    let t = Instant::now();
    let r = m.tester.run_trial(&spec)?;
    let loss = r.flow_loss.ok_or_else(|| anyhow!("the XDP tester kept no per-stream loss"))?;
    if std::env::var_os("V6GATE_BENCH_DEBUG").is_some() {
        eprintln!("  xdp trial {}: {} frames in {:.1} s, {loss:?}", spec.id, spec.frames, t.elapsed().as_secs_f64());
    }
    Ok((r.outcome, loss))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use xdp::tester::{flow_from_frame, RTP_HEADER_LEN, STAMP_LEN};
    use xdp::types::RTP_SSRC_BASE;
    use xlat::checksum::{sum, verifies};

    fn v6(a: u16, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 6, 0, 0, 0, 0, a)), port)
    }

    fn v4(a: u8, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 4, a)), port)
    }

    /// The UDP checksum over the pseudo-header verifies.
    fn udp_ok(f: &[u8], udp: usize, pseudo_addrs: std::ops::Range<usize>) -> bool {
        let ulen = u16::from_be_bytes([f[udp + 4], f[udp + 5]]);
        verifies(sum(&f[pseudo_addrs]) + 17 + u64::from(ulen) + sum(&f[udp..udp + usize::from(ulen)]))
    }

    /// What the generator does to a frame in RTP mode (bpf/tester.bpf.c):
    /// the RTP header from the packet number, the stamp, the checksum
    /// from the flow's base sum plus the written words.
    fn generate(tpl: &Template, seq: u32, nflows: u32, ts: u64, magic: u32) -> Vec<u8> {
        let (flow, udp, _) = flow_from_frame(tpl.bytes(), true).unwrap();
        let udp = usize::from(udp);
        let mut f = tpl.bytes().to_vec();
        let (k, n) = (seq % nflows, seq / nflows);
        let mut w = Vec::new();
        w.extend_from_slice(&[0x80, 0]);
        w.extend_from_slice(&(n as u16).to_be_bytes());
        w.extend_from_slice(&n.wrapping_mul(160).to_be_bytes()); // RTP timestamps wrap mod 2^32
        w.extend_from_slice(&(RTP_SSRC_BASE + k).to_be_bytes());
        w.extend_from_slice(&ts.to_be_bytes());
        w.extend_from_slice(&seq.to_be_bytes());
        w.extend_from_slice(&(k as u16).to_be_bytes());
        w.extend_from_slice(&magic.to_be_bytes());
        f[udp + 8..udp + 8 + w.len()].copy_from_slice(&w);
        let c = xlat::checksum::finish(flow.base_sum + sum(&w));
        f[udp + 6..udp + 8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        f
    }

    #[test]
    fn rtp_frames_are_the_papers_sizes_with_valid_checksums() {
        let streams =
            [RtpStream { src: v6(2, 40000), dst: v6(1, 20002) }, RtpStream { src: v4(2, 40002), dst: v4(1, 30000) }];
        let t = templates([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1], &streams).unwrap();
        assert_eq!((t[0].len(), t[1].len()), (234, 214), "the paper's frames");
        assert_eq!(&t[0].bytes()[0..12], &[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        // IPv4 header checksum, addresses and ports as given.
        let f4 = t[1].bytes();
        assert!(verifies(sum(&f4[14..34])), "IPv4 header checksum");
        assert_eq!(&f4[26..34], &[10, 0, 4, 2, 10, 0, 4, 1]);
        assert_eq!((u16::from_be_bytes([f4[34], f4[35]]), u16::from_be_bytes([f4[36], f4[37]])), (40002, 30000));
        assert_eq!(u16::from_be_bytes([f4[38], f4[39]]) as usize, 8 + probe::LEN);
        let f6 = t[0].bytes();
        assert_eq!(u16::from_be_bytes([f6[18], f6[19]]) as usize, 8 + probe::LEN, "IPv6 payload length");
        // Frames as the generator stamps them: valid UDP checksums, RTP
        // fields a receiver parses (probe::Probe-like header checks).
        let magic = xdp::types::TESTER_MAGIC_HI | 3;
        for seq in [0u32, 1, 2, 3, 131_071, 131_072 * 2 + 1, u32::MAX - 1] {
            for (tpl, udp, addrs) in [(&t[0], 54usize, 22..54), (&t[1], 34, 26..34)] {
                let f = generate(tpl, seq, 2, 0x0123_4567_89ab_cdef ^ u64::from(seq), magic);
                assert!(udp_ok(&f, udp, addrs.clone()), "UDP checksum, seq {seq}");
                let rtp = &f[udp + 8..udp + 8 + RTP_HEADER_LEN];
                assert_eq!(rtp[0] >> 6, 2, "RTP version 2");
                assert_eq!(rtp[1], 0, "PT 0 (PCMU), no marker");
                assert_eq!(u16::from_be_bytes([rtp[2], rtp[3]]), (seq / 2) as u16, "the stream's own sequence");
                assert_eq!(u32::from_be_bytes(rtp[4..8].try_into().unwrap()), (seq / 2).wrapping_mul(160), "timestamp");
                assert_eq!(u32::from_be_bytes(rtp[8..12].try_into().unwrap()), RTP_SSRC_BASE + seq % 2);
                let st = &f[udp + 8 + RTP_HEADER_LEN..udp + 8 + RTP_HEADER_LEN + STAMP_LEN];
                let rx = crate::tester::frame::decode(&{
                    // The frame decoder reads the stamp right after UDP: shift it there.
                    let mut g = f.clone();
                    g[udp + 8..udp + 8 + STAMP_LEN].copy_from_slice(st);
                    g
                })
                .expect("a tester stamp");
                assert_eq!((rx.seq, rx.flow, rx.magic), (seq, (seq % 2) as u16, magic));
            }
        }
    }

    #[test]
    fn each_stream_every_20_ms_evenly_spread() {
        use crate::harness::clock::Pacer;
        for n in [1usize, 3, 1000, 13_001] {
            let p = Pacer::new(0, 1e9 / rate_pps(n), (n * 5) as u64);
            let at = |seq: usize| p.due_at(seq as u64) as i64;
            for i in [0, n / 2, n - 1] {
                // Stream i's first packet: its phase within the interval.
                let phase = (i as u128 * PACKET_INTERVAL_NS as u128 / n as u128) as i64;
                assert!((at(i) - phase).abs() <= 1, "n {n} stream {i}: {} vs {phase}", at(i));
                for k in 1..5 {
                    let gap = at(k * n + i) - at((k - 1) * n + i);
                    assert!((gap - PACKET_INTERVAL_NS as i64).abs() <= 1, "n {n} stream {i} packet {k}: {gap} ns");
                }
            }
        }
        assert_eq!(rate_pps(13_000), 650_000.0, "13,000 calls one way: 650,000 packets/s");
    }

    #[test]
    fn sides_and_macs() {
        assert_eq!(parse_mac("be:4e:00:0a:ff:01"), Some([0xbe, 0x4e, 0, 0x0a, 0xff, 1]));
        for bad in ["", "be:4e:00:0a:ff", "be:4e:00:0a:ff:01:02", "zz:4e:00:0a:ff:01"] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
        assert_eq!((rtp_frame_size(true), rtp_frame_size(false)), (238, 218));
    }
}
