//! RFC 7597 §5.1 port sets: the Port Set ID (PSID) algorithm that lw4o6
//! (RFC 7596 §5.1) and MAP-E share.
//!
//! A 16-bit port is read as three fields, most significant first:
//!
//! ```text
//!  0                   1
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
//! +-----------+-----------+-------+
//! |     A     |   PSID    |   M   |
//! +-----------+-----------+-------+
//! |<-- a --->|<--- k --->|<- m ->|
//! ```
//!
//! `a` is the PSID offset, `k` the PSID length and `m = 16 − a − k`. A
//! subscriber owns every port whose PSID field equals its PSID, except the
//! ports where A = 0 (RFC 7597 §5.1: with the default offset 6 these are
//! 0–1023, the system ports, which no subscriber gets). A PSID length of 0
//! is a whole IPv4 address (DSTM, RFC 7596 §5.1 "full IPv4 address"): every
//! port belongs to the one subscriber.

use core::fmt;

/// The port-set parameters shared by every subscriber of one IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PsidMap {
    offset: u8,
    len: u8,
}

/// The PSID offset RFC 7597 §5.1 recommends (ports 0–1023 excluded).
pub const DEFAULT_OFFSET: u8 = 6;

/// A port-set parameter error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSetError(pub String);

impl fmt::Display for PortSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PortSetError {}

impl PsidMap {
    /// A whole address: PSID length 0.
    pub const FULL: PsidMap = PsidMap { offset: 0, len: 0 };

    /// `offset` (a) and `len` (k): a + k ≤ 16.
    pub fn new(offset: u8, len: u8) -> Result<Self, PortSetError> {
        if u16::from(offset) + u16::from(len) > 16 {
            return Err(PortSetError(format!("psid offset {offset} + psid length {len} exceed 16 bits")));
        }
        if len == 0 {
            return Ok(PsidMap::FULL);
        }
        Ok(PsidMap { offset, len })
    }

    /// PSID offset (a).
    #[inline]
    pub fn offset(&self) -> u8 {
        self.offset
    }

    /// PSID length (k).
    #[inline]
    pub fn psid_len(&self) -> u8 {
        self.len
    }

    /// True for a whole address (k = 0).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == 0
    }

    /// m, the bits after the PSID.
    #[inline]
    fn m(&self) -> u8 {
        16 - self.offset - self.len
    }

    /// The number of distinct PSIDs (2^k).
    #[inline]
    pub fn psids(&self) -> u32 {
        1u32 << self.len
    }

    /// The PSID field of `port`.
    #[inline]
    pub fn psid(&self, port: u16) -> u16 {
        if self.len == 0 {
            return 0;
        }
        ((u32::from(port) >> self.m()) & ((1u32 << self.len) - 1)) as u16
    }

    /// True when `port` belongs to the subscriber holding `psid`.
    #[inline]
    pub fn allowed(&self, port: u16, psid: u16) -> bool {
        if self.len == 0 {
            return true;
        }
        // A = 0 is nobody's (RFC 7597 §5.1) when there is an A field.
        (self.offset == 0 || port >> (16 - self.offset) != 0) && self.psid(port) == psid
    }

    /// Ports in one subscriber's set: (2^a − 1) · 2^m, or 2^m when a = 0.
    pub fn set_size(&self) -> u32 {
        if self.len == 0 {
            return 65536;
        }
        let a_values = if self.offset == 0 { 1 } else { (1u32 << self.offset) - 1 };
        a_values << self.m()
    }

    /// The ports of `psid`'s set as contiguous ranges `(first, last)`, in
    /// increasing order: one range of 2^m ports per value of A.
    pub fn ranges(&self, psid: u16) -> impl Iterator<Item = (u16, u16)> + '_ {
        let (a_lo, a_hi) =
            if self.len == 0 || self.offset == 0 { (0u32, 0u32) } else { (1, (1u32 << self.offset) - 1) };
        let m = if self.len == 0 { 16 } else { self.m() };
        let psid = u32::from(psid);
        let shift_a = 16 - u32::from(self.offset);
        (a_lo..=a_hi).map(move |a| {
            let base = if self.len == 0 { 0 } else { (a << shift_a) | (psid << m) };
            (base as u16, (base + (1u32 << m) - 1) as u16)
        })
    }

    /// The `i`-th port of `psid`'s set (`i < set_size()`).
    pub fn nth(&self, psid: u16, i: u32) -> u16 {
        if self.len == 0 {
            return i as u16;
        }
        let m = self.m();
        let a = if self.offset == 0 { 0 } else { 1 + (i >> m) };
        ((a << (16 - self.offset)) | (u32::from(psid) << m) | (i & ((1 << m) - 1))) as u16
    }
}

impl fmt::Display for PsidMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "psid-length {} offset {}", self.len, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc7597_appendix_b_example_1() {
        // RFC 7597 Appendix B example: a = 6, k = 8 (m = 2); PSID 0x34.
        let p = PsidMap::new(6, 8).unwrap();
        assert_eq!(p.set_size(), 63 * 4);
        let r: Vec<_> = p.ranges(0x34).take(3).collect();
        // A = 1: 0b000001 00110100 00 = 0x04d0
        assert_eq!(r, vec![(0x04d0, 0x04d3), (0x08d0, 0x08d3), (0x0cd0, 0x0cd3)]);
        assert_eq!(p.ranges(0x34).last(), Some((0xfcd0, 0xfcd3)));
        assert!(p.allowed(0x04d1, 0x34));
        assert!(!p.allowed(0x04d1, 0x35));
        // A = 0 (ports 0..1023) belongs to nobody.
        assert!(!p.allowed(0x00d0, 0x34));
        assert_eq!(p.psid(0x08d2), 0x34);
    }

    #[test]
    fn full_address_and_offset_zero() {
        let f = PsidMap::new(6, 0).unwrap();
        assert!(f.is_full());
        assert!(f.allowed(0, 0) && f.allowed(65535, 0));
        assert_eq!(f.set_size(), 65536);
        assert_eq!(f.ranges(0).collect::<Vec<_>>(), vec![(0, 65535)]);
        // a = 0, k = 4: sixteen contiguous blocks of 4096 ports.
        let z = PsidMap::new(0, 4).unwrap();
        assert_eq!(z.ranges(3).collect::<Vec<_>>(), vec![(0x3000, 0x3fff)]);
        assert!(z.allowed(0x3000, 3) && !z.allowed(0x2fff, 3));
        assert!(PsidMap::new(10, 7).is_err());
    }

    proptest! {
        #[test]
        fn nth_enumerates_exactly_the_allowed_ports(a in 0u8..=8, k in 1u8..=8, psid_seed in any::<u16>()) {
            let p = PsidMap::new(a, k).unwrap();
            let psid = psid_seed % (1 << k);
            let mut listed = Vec::new();
            for i in 0..p.set_size() {
                let port = p.nth(psid, i);
                prop_assert!(p.allowed(port, psid), "port {} of psid {}", port, psid);
                listed.push(port);
            }
            let allowed = (0..=u16::MAX).filter(|&x| p.allowed(x, psid)).count();
            prop_assert_eq!(allowed as u32, p.set_size());
            listed.dedup();
            prop_assert_eq!(listed.len() as u32, p.set_size());
            let from_ranges: u32 = p.ranges(psid).map(|(lo, hi)| u32::from(hi - lo) + 1).sum();
            prop_assert_eq!(from_ranges, p.set_size());
        }
    }
}
