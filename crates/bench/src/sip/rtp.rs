//! RTP one-way delay of `bench sip` (the SIP-over-IPv6 paper's Table I):
//! probe calls of the bench's own user agents, made while SIPp runs the
//! setup-time workload, each a caller in `ua6` and a callee in `ua4` that
//! set the call up through the path under test and then both send G.711
//! RTP (172 bytes, every 20 ms) to the media address the other's SDP gave
//! them (the gateway's relay, or the other UA on a direct call). Every
//! packet carries its send time ([`now_ns`], CLOCK_MONOTONIC, which the
//! namespaces share); the receiver records arrival minus send time in an
//! HDR histogram per direction.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{anyhow, Context as _, Result};
use lab::netns::Netns;
use serde::Serialize;

use super::ua;
use crate::harness::clock::{now_ns, sleep_until_ns};
use crate::harness::latency::{Latency, LatencyHistogram};

/// One packet every 20 ms; 12-byte RTP header and 160 bytes of G.711.
const INTERVAL_NS: u64 = 20_000_000;
const PACKET: usize = 172;
/// Marks the probes' packets (in the payload, after the send time).
const MAGIC: &[u8; 4] = b"v6gD";
/// How long a receiver keeps listening after its last packet went out
/// for the other side's (which started later) when some are missing.
const DRAIN_NS: u64 = 1_000_000_000;

/// What the probe calls of one path measured.
#[derive(Debug, Clone, Serialize)]
pub struct RtpDelay {
    /// Probe calls made, and set up.
    pub calls: u64,
    pub set_up: u64,
    /// Packets sent and received, caller → callee and back.
    pub sent_forward: u64,
    pub received_forward: u64,
    pub sent_back: u64,
    pub received_back: u64,
    /// One-way delay of both directions together (the report's figure).
    pub delay: Latency,
    pub forward: Latency,
    pub back: Latency,
    /// Why probe calls failed.
    pub errors: Vec<String>,
}

/// The delays and counts of one direction (or both).
#[derive(Debug, Default)]
pub struct Direction {
    pub hist: LatencyHistogram,
    pub sent: u64,
}

impl RtpDelay {
    /// The figures from the two directions' histograms.
    pub fn from_directions(calls: u64, set_up: u64, fwd: &Direction, back: &Direction, errors: Vec<String>) -> Self {
        let mut both = LatencyHistogram::new();
        both.merge(&fwd.hist);
        both.merge(&back.hist);
        RtpDelay {
            calls,
            set_up,
            sent_forward: fwd.sent,
            received_forward: fwd.hist.count(),
            sent_back: back.sent,
            received_back: back.hist.count(),
            delay: both.summary(),
            forward: fwd.hist.summary(),
            back: back.hist.summary(),
            errors,
        }
    }

    /// Packets lost in both directions together.
    pub fn lost(&self) -> u64 {
        (self.sent_forward + self.sent_back).saturating_sub(self.received_forward + self.received_back)
    }
}

/// Sends `packets` probe packets to `peer` from `sock`, one every 20 ms
/// from `t0`, receiving the other side's (as many) between sends and
/// after the last until all came or [`DRAIN_NS`] passed; returns what it
/// sent and received.
fn talk(sock: &UdpSocket, peer: SocketAddr, t0: u64, packets: u64) -> Direction {
    let mut d = Direction::default();
    let mut pkt = [0u8; PACKET];
    pkt[0] = 0x80;
    pkt[8..12].copy_from_slice(&(u32::from(sock.local_addr().map(|a| a.port()).unwrap_or(0))).to_be_bytes());
    pkt[20..24].copy_from_slice(MAGIC);
    let mut buf = [0u8; 2048];
    let end = t0 + packets.saturating_sub(1) * INTERVAL_NS + DRAIN_NS;
    let mut next = 0u64;
    loop {
        let now = now_ns();
        if next < packets && now >= t0 + next * INTERVAL_NS {
            pkt[2..4].copy_from_slice(&(next as u16).to_be_bytes());
            pkt[4..8].copy_from_slice(&((next * 160) as u32).to_be_bytes());
            pkt[12..20].copy_from_slice(&now_ns().to_be_bytes());
            if sock.send_to(&pkt, peer).is_ok() {
                d.sent += 1;
            }
            next += 1;
            continue;
        }
        if now >= end || (next == packets && d.hist.count() >= packets) {
            break;
        }
        let due = if next < packets { t0 + next * INTERVAL_NS } else { end };
        let wait = Duration::from_nanos(due.saturating_sub(now).max(100_000));
        let _ = sock.set_read_timeout(Some(wait));
        if let Ok(n) = sock.recv(&mut buf) {
            let at = now_ns();
            if n == PACKET && &buf[20..24] == MAGIC {
                let sent = u64::from_be_bytes(buf[12..20].try_into().unwrap_or_default());
                d.hist.record(at.saturating_sub(sent));
            }
        }
    }
    d
}

/// One probe call: the callee's and the caller's sockets, bound in their
/// namespaces on ephemeral ports.
struct Probe {
    caller_sip: UdpSocket,
    caller_rtp: UdpSocket,
    callee_sip: UdpSocket,
    callee_rtp: UdpSocket,
}

/// Where the probe calls run: the two namespaces and addresses, and where
/// the caller sends its requests.
pub struct Paths<'a> {
    pub caller_ns: &'a Netns,
    pub callee_ns: &'a Netns,
    pub caller: IpAddr,
    pub callee: IpAddr,
    /// The gateway; `None`: straight to the callee (the direct calls).
    pub gateway: Option<SocketAddr>,
}

/// `calls` probe calls of `secs` seconds of media each, the i-th starting
/// `i * spread / calls` after the call; returns their figures.
pub fn run(p: &Paths, calls: u64, secs: u64, spread: Duration, tag: &str) -> Result<RtpDelay> {
    let bind = |ns: &Netns, ip: IpAddr| {
        ns.run(move || UdpSocket::bind(SocketAddr::new(ip, 0)).with_context(|| format!("binding {ip}")))
    };
    let mut probes = Vec::new();
    for _ in 0..calls {
        probes.push(Probe {
            caller_sip: bind(p.caller_ns, p.caller)?,
            caller_rtp: bind(p.caller_ns, p.caller)?,
            callee_sip: bind(p.callee_ns, p.callee)?,
            callee_rtp: bind(p.callee_ns, p.callee)?,
        });
    }
    let packets = secs * 1_000_000_000 / INTERVAL_NS;
    let t_start = now_ns();
    let step = spread.as_nanos() as u64 / calls.max(1);
    let results: Vec<Result<(Direction, Direction)>> = std::thread::scope(|s| {
        let handles: Vec<_> = probes
            .iter()
            .enumerate()
            .map(|(i, pr)| {
                let start = t_start + i as u64 * step;
                let callee = s.spawn(move || -> Result<Direction> {
                    let rtp = pr.callee_rtp.local_addr()?.port();
                    let offer = ua::answer(&pr.callee_sip, p.callee, rtp, spread + Duration::from_secs(10))
                        .context("callee")?;
                    let d = talk(&pr.callee_rtp, offer, now_ns(), packets);
                    ua::await_bye(&pr.callee_sip, Duration::from_secs(10)).context("callee")?;
                    Ok(d)
                });
                let caller = s.spawn(move || -> Result<Direction> {
                    sleep_until_ns(start);
                    let to = pr.callee_sip.local_addr()?;
                    let hop = p.gateway.unwrap_or(to);
                    let uri = format!("sip:probe@{}:{}", ua::host(to.ip()), to.port());
                    let call_id = format!("v6gate-bench-rtp-{tag}-{}-{i}", std::process::id());
                    let rtp = pr.caller_rtp.local_addr()?.port();
                    let (mut dlg, answer) =
                        ua::call(&pr.caller_sip, hop, p.caller, &uri, &call_id, rtp).context("caller")?;
                    let d = talk(&pr.caller_rtp, answer, now_ns(), packets);
                    dlg.cseq = 2;
                    let bye = dlg.request("BYE", p.caller, &format!("z9hG4bK-{call_id}-3"), "");
                    ua::transact(&pr.caller_sip, hop, &bye).context("caller's BYE")?;
                    Ok(d)
                });
                (caller, callee)
            })
            .collect();
        handles
            .into_iter()
            .map(|(caller, callee)| {
                let join = |h: std::thread::ScopedJoinHandle<'_, Result<Direction>>| {
                    h.join().map_err(|_| anyhow!("a probe thread panicked"))?
                };
                let (a, b) = (join(caller), join(callee));
                Ok((a?, b?))
            })
            .collect()
    });
    let (mut fwd, mut back) = (Direction::default(), Direction::default());
    let mut errors = Vec::new();
    let mut set_up = 0;
    for r in results {
        match r {
            // The caller's receiver saw the callee's packets and the other way round.
            Ok((caller, callee)) => {
                set_up += 1;
                fwd.sent += caller.sent;
                fwd.hist.merge(&callee.hist);
                back.sent += callee.sent;
                back.hist.merge(&caller.hist);
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if set_up == 0 {
        return Err(anyhow!("no probe call worked: {}", errors.join("; ")));
    }
    Ok(RtpDelay::from_directions(calls, set_up, &fwd, &back, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_both_directions() {
        let ms = 1_000_000u64;
        let mut fwd = Direction { sent: 4, ..Default::default() };
        for d in [1, 2, 3] {
            fwd.hist.record(d * ms);
        }
        let mut back = Direction { sent: 4, ..Default::default() };
        for d in [5, 5, 5, 5] {
            back.hist.record(d * ms);
        }
        let r = RtpDelay::from_directions(2, 2, &fwd, &back, vec![]);
        assert_eq!((r.sent_forward, r.received_forward, r.sent_back, r.received_back, r.lost()), (4, 3, 4, 4, 1));
        let near = |a: u64, b: u64| (a as f64 - b as f64).abs() <= b as f64 * 0.002;
        // Both: 1, 2, 3, 5, 5, 5, 5 ms: mean 26/7, median 5, deviation 1.58 ms.
        assert_eq!(r.delay.samples, 7);
        assert!(near(r.delay.mean_ns, 26 * ms / 7) && near(r.delay.p50_ns, 5 * ms), "{:?}", r.delay);
        assert!(near(r.delay.stdev_ns, 1_577_908), "{:?}", r.delay);
        assert!(near(r.forward.p50_ns, 2 * ms) && near(r.back.mean_ns, 5 * ms) && r.back.stdev_ns == 0, "{r:?}");
    }

    #[test]
    fn two_endpoints_measure_each_others_packets() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let t0 = now_ns();
        let (da, db) = std::thread::scope(|s| {
            let h = s.spawn(|| talk(&b, aa, t0, 5));
            (talk(&a, ba, t0, 5), h.join().unwrap())
        });
        assert_eq!((da.sent, db.sent), (5, 5));
        assert_eq!((da.hist.count(), db.hist.count()), (5, 5), "loopback loses nothing");
        // A stray datagram is not a sample.
        a.send_to(b"not a probe", ba).unwrap();
        let d = talk(&b, aa, now_ns(), 0);
        assert_eq!((d.sent, d.hist.count()), (0, 0));
    }
}
