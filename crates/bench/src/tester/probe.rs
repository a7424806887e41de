//! The RTP probe packet of the TrGW tester: a 12-byte RTP header (version
//! 2, payload type 0 = PCMU/G.711) and a 160-byte payload (20 ms of G.711
//! at 8 kHz) that carries the send time, the stream id and the sequence
//! number, so the receiver can measure loss and latency per packet. With
//! UDP and IP it makes the paper's 214-byte IPv4 and 234-byte IPv6 frames.

/// RTP header length.
pub const RTP_HEADER: usize = 12;
/// G.711 payload for 20 ms.
pub const PAYLOAD: usize = 160;
/// UDP payload length of every probe.
pub const LEN: usize = RTP_HEADER + PAYLOAD;
/// Marks a probe (first payload bytes).
pub const MAGIC: [u8; 4] = *b"V6GB";

/// What a probe carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Stream index in the trial.
    pub stream: u32,
    /// Packet number within the stream (0-based).
    pub seq: u32,
    /// CLOCK_MONOTONIC nanoseconds when the packet was handed to the kernel.
    pub sent_ns: u64,
}

impl Probe {
    /// Writes the probe into `buf` (at least [`LEN`] bytes; the payload
    /// past the probe fields is left as it is, so callers zero it once).
    pub fn write(&self, buf: &mut [u8]) {
        let buf = &mut buf[..LEN];
        buf[0] = 0x80; // V=2, no padding, no extension, no CSRC
        buf[1] = 0; // M=0, PT=0 (PCMU)
        buf[2..4].copy_from_slice(&(self.seq as u16).to_be_bytes());
        buf[4..8].copy_from_slice(&self.seq.wrapping_mul(PAYLOAD as u32).to_be_bytes());
        buf[8..12].copy_from_slice(&self.stream.wrapping_add(0x5647_0000).to_be_bytes()); // SSRC
        let p = &mut buf[RTP_HEADER..];
        p[0..4].copy_from_slice(&MAGIC);
        p[4..8].copy_from_slice(&self.stream.to_be_bytes());
        p[8..12].copy_from_slice(&self.seq.to_be_bytes());
        p[12..20].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// Decodes a received datagram; `None` unless it is a whole probe with
    /// an RTP version 2 header and a consistent SSRC and sequence number.
    pub fn parse(buf: &[u8]) -> Option<Probe> {
        if buf.len() != LEN || buf[0] >> 6 != 2 {
            return None;
        }
        let p = &buf[RTP_HEADER..];
        if p[0..4] != MAGIC {
            return None;
        }
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let stream = be32(&p[4..8]);
        let seq = be32(&p[8..12]);
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&p[12..20]);
        if be32(&buf[8..12]) != stream.wrapping_add(0x5647_0000) || u16::from_be_bytes([buf[2], buf[3]]) != seq as u16 {
            return None;
        }
        Some(Probe { stream, seq, sent_ns: u64::from_be_bytes(ts) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rtp_header() {
        let p = Probe { stream: 70_000, seq: 65_537, sent_ns: 0x0102_0304_0506_0708 };
        let mut b = [0u8; LEN];
        p.write(&mut b);
        assert_eq!(b[0], 0x80);
        assert_eq!(b[1], 0);
        assert_eq!(&b[2..4], &1u16.to_be_bytes());
        assert_eq!(&b[4..8], &(65_537u32 * 160).to_be_bytes());
        assert_eq!(Probe::parse(&b), Some(p));
    }

    #[test]
    fn rejects_foreign_and_damaged_packets() {
        let p = Probe { stream: 3, seq: 9, sent_ns: 1 };
        let mut b = [0u8; LEN];
        p.write(&mut b);
        assert_eq!(Probe::parse(&b[..LEN - 1]), None);
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(Probe::parse(&long), None);
        for (i, v) in [(0, 0x40), (12, b'X'), (11, 0xff), (3, 0xff)] {
            let mut c = b;
            c[i] = v;
            assert_eq!(Probe::parse(&c), None, "byte {i}");
        }
        assert_eq!(Probe::parse(&[]), None);
    }
}
