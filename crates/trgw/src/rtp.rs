//! Per-stream RTP reception statistics: packet loss from sequence numbers
//! (RFC 3550 A.1/A.3) and interarrival jitter (RFC 3550 A.8).

/// Clock rate of a static payload type (RFC 3551 table 4); 8000 for the
/// unknown and dynamic ones unless the SDP says otherwise.
pub fn static_clock_rate(pt: u8) -> u32 {
    match pt {
        10 | 11 => 44_100,
        6 => 16_000,
        16 => 11_025,
        17 => 22_050,
        14 | 25 | 26 | 28 | 31 | 32 | 33 | 34 => 90_000,
        _ => 8_000,
    }
}

/// Sequence numbers this far ahead are a restart, not loss (RFC 3550 A.1).
const MAX_DROPOUT: u16 = 3000;
/// Sequence numbers this far behind are misordered/duplicates.
const MAX_MISORDER: u16 = 100;

/// Receiver state for one RTP source on one leg.
#[derive(Debug, Clone, Default)]
pub struct RtpRx {
    started: bool,
    base_seq: u32,
    max_seq: u16,
    cycles: u32,
    received: u64,
    /// Transit time of the previous packet, in RTP clock units.
    transit: u32,
    /// Jitter scaled by 16 (RFC 3550 A.8).
    jitter16: u32,
    ssrc: u32,
}

impl RtpRx {
    /// Accounts one RTP packet: `seq`, `ts` and `ssrc` from its header,
    /// `arrival` in units of its clock rate (any epoch, wrapping).
    pub fn packet(&mut self, seq: u16, ts: u32, ssrc: u32, arrival: u32) {
        if !self.started || ssrc != self.ssrc {
            *self = RtpRx {
                started: true,
                base_seq: u32::from(seq),
                max_seq: seq,
                ssrc,
                received: 1,
                transit: arrival.wrapping_sub(ts),
                ..RtpRx::default()
            };
            return;
        }
        let delta = seq.wrapping_sub(self.max_seq);
        if delta == 0 {
            return; // duplicate
        }
        if delta < MAX_DROPOUT {
            if seq < self.max_seq {
                self.cycles += 1;
            }
            self.max_seq = seq;
        } else if delta <= u16::MAX - MAX_MISORDER {
            // A big jump: treat as a restart of the sequence.
            self.base_seq = u32::from(seq);
            self.max_seq = seq;
            self.cycles = 0;
            self.received = 0;
        }
        // else: late (misordered) packet: counted, no jitter
        self.received += 1;
        let transit = arrival.wrapping_sub(ts);
        let d = transit.wrapping_sub(self.transit) as i32;
        self.transit = transit;
        let d = d.unsigned_abs();
        // J += (|D| - J) / 16, kept scaled by 16.
        self.jitter16 = self.jitter16.wrapping_add(d).wrapping_sub((self.jitter16 + 8) >> 4);
    }

    /// Packets expected from the sequence numbers seen.
    pub fn expected(&self) -> u64 {
        if !self.started {
            return 0;
        }
        let ext = (u64::from(self.cycles) << 16) | u64::from(self.max_seq);
        (ext + 1).saturating_sub(u64::from(self.base_seq))
    }

    /// Cumulative packets lost (never negative).
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }

    /// Interarrival jitter in RTP clock units.
    pub fn jitter(&self) -> u32 {
        self.jitter16 >> 4
    }
}

/// The RTP fields the statistics need, when `pkt` looks like RTP version 2
/// (and not RTCP, RFC 5761 section 4).
pub fn parse_rtp(pkt: &[u8]) -> Option<(u8, u16, u32, u32)> {
    if pkt.len() < 12 || pkt[0] >> 6 != 2 || is_rtcp(pkt) {
        return None;
    }
    let pt = pkt[1] & 0x7f;
    let seq = u16::from_be_bytes([pkt[2], pkt[3]]);
    let ts = u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]);
    let ssrc = u32::from_be_bytes([pkt[8], pkt[9], pkt[10], pkt[11]]);
    Some((pt, seq, ts, ssrc))
}

/// RTCP packet types 192-223 share the RTP payload-type byte (RFC 5761 4).
pub fn is_rtcp(pkt: &[u8]) -> bool {
    pkt.len() >= 2 && pkt[0] >> 6 == 2 && (192..=223).contains(&pkt[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_loss_in_order() {
        let mut r = RtpRx::default();
        for i in 0..100u16 {
            r.packet(65500u16.wrapping_add(i), u32::from(i) * 160, 7, u32::from(i) * 160 + 1000);
        }
        assert_eq!(r.expected(), 100);
        assert_eq!(r.lost(), 0);
        assert_eq!(r.jitter(), 0, "constant transit means no jitter");
    }

    #[test]
    fn gaps_are_loss() {
        let mut r = RtpRx::default();
        for i in (0..100u16).filter(|i| i % 10 != 3) {
            r.packet(i, u32::from(i) * 160, 7, u32::from(i) * 160);
        }
        assert_eq!(r.expected(), 100);
        assert_eq!(r.lost(), 10);
    }

    #[test]
    fn jitter_vector() {
        // Transit alternates by 80 units: D = 80 every packet after the
        // first, so J converges towards 80 (J_n = J_{n-1} + (80 - J_{n-1})/16).
        let mut r = RtpRx::default();
        let mut j = 0f64;
        for i in 0..200u32 {
            let arrival = i * 160 + if i % 2 == 0 { 0 } else { 80 };
            r.packet(i as u16, i * 160, 1, arrival);
            if i > 0 {
                j += (80.0 - j) / 16.0;
            }
        }
        assert!((i64::from(r.jitter()) - j as i64).abs() <= 1, "{} vs {j}", r.jitter());
        assert!(r.jitter() >= 78);
    }

    #[test]
    fn duplicates_and_ssrc_change() {
        let mut r = RtpRx::default();
        r.packet(10, 0, 1, 0);
        r.packet(10, 0, 1, 0);
        r.packet(11, 160, 1, 160);
        assert_eq!((r.expected(), r.lost()), (2, 0));
        r.packet(500, 0, 2, 0);
        assert_eq!((r.expected(), r.lost()), (1, 0));
    }

    #[test]
    fn rtp_rtcp_classification() {
        let mut p = [0u8; 12];
        p[0] = 0x80;
        p[1] = 8;
        assert_eq!(parse_rtp(&p).map(|x| x.0), Some(8));
        p[1] = 200;
        assert!(is_rtcp(&p) && parse_rtp(&p).is_none());
        assert!(parse_rtp(&p[..5]).is_none());
        assert_eq!(static_clock_rate(0), 8000);
        assert_eq!(static_clock_rate(10), 44100);
    }
}
