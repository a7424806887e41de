//! The mid-call handover of `bench sip` (the mobility paper's mid-call
//! procedure): a UE in the IPv6 realm calls the SIPp callee (which echoes
//! RTP) through the gateway, sends G.711-sized RTP every 20 ms, then moves
//! to a second IPv6 address: from that instant it sends media from the new
//! address and a re-INVITE with the new address in its SDP. SIPp cannot
//! move its media address, hence this small UE of our own.
//!
//! Measured from RTP arrival at the UE (the echo of its own packets): the
//! gap between the last packet at the old address and the first at the
//! new one, when that first packet came relative to the re-INVITE's
//! 200 OK, and the packets lost (in all, and among those sent after the
//! 200 OK).

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use alg::msg::Message;
use anyhow::{anyhow, bail, Context as _, Result};
use lab::netns::Netns;
use serde::Serialize;

use super::ua::{self, host, sdp, transact};
use crate::harness::clock::now_ns;

/// The UE's SIP and RTP ports (on both of its addresses).
const SIP_PORT: u16 = 5064;
const RTP_PORT: u16 = 40000;
/// One packet every 20 ms: G.711 (12-byte RTP header, 160 bytes payload).
const INTERVAL: Duration = Duration::from_millis(20);

/// What a handover measured.
#[derive(Debug, Clone, Serialize)]
pub struct Handover {
    /// RTP packets the UE sent.
    pub sent: u64,
    /// Echoes that came back to the old and to the new address.
    pub echoed_old: u64,
    pub echoed_new: u64,
    /// Re-INVITE sent → its 200 OK received, milliseconds.
    pub reinvite_ms: f64,
    /// Last packet at the old address → first at the new one, milliseconds.
    pub gap_ms: f64,
    /// First packet at the new address, milliseconds after the 200 OK of
    /// the re-INVITE (negative: before it).
    pub first_new_after_ok_ms: f64,
    /// Packets sent and never echoed back.
    pub lost: u64,
    /// Of those, the ones sent after the 200 OK.
    pub lost_after_ok: u64,
}

fn receiver(sock: &UdpSocket, stop: &AtomicBool, got: &Mutex<Vec<(u32, u64)>>) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        if let Ok(n) = sock.recv(&mut buf) {
            if n >= 16 {
                let seq = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]);
                got.lock().unwrap_or_else(|e| e.into_inner()).push((seq, now_ns()));
            }
        }
    }
}

/// One handover through the gateway at `gw` (its IPv6 SIP address) to the
/// callee at `callee`: `old` and `new` are the UE's two addresses in `ua6`
/// (both configured); media runs `hold` before and after the move.
pub fn run(
    ua6: &Netns,
    gw: SocketAddr,
    callee: SocketAddr,
    old: IpAddr,
    new: IpAddr,
    hold: Duration,
) -> Result<Handover> {
    let bind = |ip: IpAddr, port: u16| {
        ua6.run(move || UdpSocket::bind(SocketAddr::new(ip, port)).with_context(|| format!("binding {ip}:{port}")))
    };
    let (sip_old, sip_new) = (bind(old, SIP_PORT)?, bind(new, SIP_PORT)?);
    let (rtp_old, rtp_new) = (bind(old, RTP_PORT)?, bind(new, RTP_PORT)?);
    let call_id = format!("v6gate-bench-handover-{}", std::process::id());
    let callee_uri = format!("sip:uas@{}:{}", host(callee.ip()), callee.port());

    // The call from the old address.
    let (mut d, relay) = ua::call(&sip_old, gw, old, &callee_uri, &call_id, RTP_PORT).context("the call's INVITE")?;

    // Media, the move, media again.
    let stop_rx = AtomicBool::new(false);
    let stop_tx = AtomicBool::new(false);
    let moved = AtomicBool::new(false);
    let (got_old, got_new) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let sent: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let result = std::thread::scope(|s| -> Result<(u64, u64)> {
        s.spawn(|| receiver(&rtp_old, &stop_rx, &got_old));
        s.spawn(|| receiver(&rtp_new, &stop_rx, &got_new));
        let sender = s.spawn(|| {
            let mut pkt = [0u8; 172];
            pkt[0] = 0x80;
            let mut next = Instant::now();
            let mut seq = 0u32;
            while !stop_tx.load(Ordering::Relaxed) {
                pkt[2..4].copy_from_slice(&(seq as u16).to_be_bytes());
                pkt[12..16].copy_from_slice(&seq.to_be_bytes());
                let sock = if moved.load(Ordering::Relaxed) { &rtp_new } else { &rtp_old };
                sent.lock().unwrap_or_else(|e| e.into_inner()).push(now_ns());
                let _ = sock.send_to(&pkt, relay);
                seq += 1;
                next += INTERVAL;
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
            }
        });
        std::thread::sleep(hold);
        let t_move = now_ns();
        moved.store(true, Ordering::Relaxed);
        d.cseq = 2;
        let reinvite = d.request("INVITE", new, "z9hG4bK-ho3", &sdp(new, RTP_PORT, 2));
        let ok2 = transact(&sip_new, gw, &reinvite);
        let t_ok = now_ns();
        if ok2.is_ok() {
            sip_new.send_to(&d.request("ACK", new, "z9hG4bK-ho4", ""), gw)?;
        }
        std::thread::sleep(hold);
        stop_tx.store(true, Ordering::Relaxed);
        let _ = sender.join();
        std::thread::sleep(Duration::from_millis(200));
        stop_rx.store(true, Ordering::Relaxed);
        let ok2 = ok2.context("the re-INVITE")?;
        let code = Message::parse_datagram(&ok2).ok().and_then(|m| m.code());
        if code != Some(200) {
            bail!("the re-INVITE was refused:\n{}", String::from_utf8_lossy(&ok2));
        }
        Ok((t_move, t_ok))
    });
    let (t_move, t_ok) = result?;
    d.cseq = 3;
    transact(&sip_new, gw, &d.request("BYE", new, "z9hG4bK-ho5", "")).context("the BYE")?;

    let sent = sent.into_inner().unwrap_or_else(|e| e.into_inner());
    let (old_rx, new_rx) = (
        got_old.into_inner().unwrap_or_else(|e| e.into_inner()),
        got_new.into_inner().unwrap_or_else(|e| e.into_inner()),
    );
    summarise(&sent, &old_rx, &new_rx, t_move, t_ok)
}

/// The figures from the send times (index = sequence number) and the
/// arrivals (sequence number, time) at each address.
fn summarise(sent: &[u64], old: &[(u32, u64)], new: &[(u32, u64)], t_move: u64, t_ok: u64) -> Result<Handover> {
    let last_old = old.iter().map(|x| x.1).max().ok_or_else(|| anyhow!("no media came back before the move"))?;
    let first_new = new.iter().map(|x| x.1).min().ok_or_else(|| anyhow!("no media came back after the move"))?;
    let echoed: HashSet<u32> = old.iter().chain(new).map(|x| x.0).collect();
    let lost = (0..sent.len() as u32).filter(|s| !echoed.contains(s)).count() as u64;
    let lost_after_ok =
        sent.iter().enumerate().filter(|(s, t)| **t > t_ok && !echoed.contains(&(*s as u32))).count() as u64;
    let ms = |a: u64, b: u64| (a as f64 - b as f64) / 1e6;
    Ok(Handover {
        sent: sent.len() as u64,
        echoed_old: old.len() as u64,
        echoed_new: new.len() as u64,
        reinvite_ms: ms(t_ok, t_move),
        gap_ms: ms(first_new, last_old),
        first_new_after_ok_ms: ms(first_new, t_ok),
        lost,
        lost_after_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_from_send_and_arrival_times() {
        // Packets every 20 ms (in ns); 0..=4 come back at the old address,
        // 5 and 6 are lost in the move, 7.. come back at the new one. The
        // 200 OK arrives at 130 ms; packet 6 (sent at 120 ms) is lost
        // before it, nothing after.
        let ms = 1_000_000u64;
        let sent: Vec<u64> = (0..12).map(|i| i * 20 * ms).collect();
        let old: Vec<(u32, u64)> = (0..5).map(|i| (i, u64::from(i) * 20 * ms + ms)).collect();
        let new: Vec<(u32, u64)> = (7..12).map(|i| (i, u64::from(i) * 20 * ms + ms)).collect();
        let h = summarise(&sent, &old, &new, 95 * ms, 130 * ms).unwrap();
        assert_eq!((h.sent, h.echoed_old, h.echoed_new, h.lost, h.lost_after_ok), (12, 5, 5, 2, 0));
        assert!((h.gap_ms - 60.0).abs() < 1e-9, "81 ms at the old address, 141 at the new: {h:?}");
        assert!((h.first_new_after_ok_ms - 11.0).abs() < 1e-9 && (h.reinvite_ms - 35.0).abs() < 1e-9, "{h:?}");
        // A packet sent after the 200 OK and never echoed counts.
        let h = summarise(&sent, &old, &new[1..], 95 * ms, 130 * ms).unwrap();
        assert_eq!((h.lost, h.lost_after_ok), (3, 1));
        assert!(summarise(&sent, &[], &new, 0, 0).is_err(), "no media before the move is an error, not a zero gap");
    }
}
