//! The Internet checksum: RFC 1071 (computation) and RFC 1624 (incremental
//! update).
//!
//! Sums are carried as unfolded `u64` accumulators of big-endian words so
//! that partial sums over several pieces (pseudo-header, header, payload)
//! can be added cheaply; [`fold`] reduces to 16 bits and [`finish`]
//! complements. A checksum field `c` verifies when the sum over the whole
//! covered data, `c` included, folds to `0xffff`.

use core::net::{Ipv4Addr, Ipv6Addr};

/// Ones'-complement partial sum of `data` taken as big-endian 16-bit words
/// (an odd trailing byte is padded with zero, RFC 1071 §4.1).
#[inline]
pub fn sum(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Split so the u64 accumulator cannot overflow for any packet size.
        acc += (w >> 32) + (w & 0xffff_ffff);
    }
    let mut rest = chunks.remainder();
    while rest.len() >= 2 {
        acc += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let [b] = rest {
        acc += u64::from(*b) << 8;
    }
    acc
}

/// Fold an accumulator to 16 bits with end-around carry (not complemented).
#[inline]
pub fn fold(acc: u64) -> u16 {
    // Branch-free: 64 → 33 → 18 → 17 → 16 bits, end-around carry each time.
    let x = (acc & 0xffff_ffff) + (acc >> 32);
    let x = (x & 0xffff) + (x >> 16);
    let x = (x & 0xffff) + (x >> 16);
    let x = (x & 0xffff) + (x >> 16);
    x as u16
}

/// Final checksum value to store: the complement of the folded sum.
#[inline]
pub fn finish(acc: u64) -> u16 {
    !fold(acc)
}

/// Sum of an IPv4 address as two 16-bit words.
#[inline]
pub fn sum_v4(a: Ipv4Addr) -> u64 {
    u64::from(u32::from(a) >> 16) + u64::from(u32::from(a) & 0xffff)
}

/// Sum of an IPv6 address as eight 16-bit words.
#[inline]
pub fn sum_v6(a: &Ipv6Addr) -> u64 {
    let v = u128::from(*a);
    let hi = (v >> 64) as u64;
    let lo = v as u64;
    (hi >> 32) + (hi & 0xffff_ffff) + (lo >> 32) + (lo & 0xffff_ffff)
}

/// IPv4 pseudo-header sum (RFC 768 / RFC 793): addresses, protocol, length.
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> u64 {
    sum_v4(src) + sum_v4(dst) + u64::from(proto) + u64::from(len)
}

/// IPv6 pseudo-header sum (RFC 8200 §8.1): addresses, upper-layer length,
/// next header.
#[inline]
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next: u8, len: u32) -> u64 {
    sum_v6(src) + sum_v6(dst) + u64::from(len >> 16) + u64::from(len & 0xffff) + u64::from(next)
}

/// RFC 1624 eqn. 3: the new checksum after the covered data's sum changed
/// from `old` to `new` (both unfolded accumulators): `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update(csum: u16, old: u64, new: u64) -> u16 {
    let acc = u64::from(!csum) + u64::from(!fold(old)) + u64::from(fold(new));
    !fold(acc)
}

/// Adjust a UDP checksum: like [`update`], but a transmitted UDP checksum is
/// never zero (RFC 768: a computed zero is sent as all ones).
#[inline]
pub fn update_udp(csum: u16, old: u64, new: u64) -> u16 {
    match update(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

/// True when `data` (checksum field included) sums to all ones.
#[inline]
pub fn verifies(acc: u64) -> bool {
    fold(acc) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reference: RFC 1071 straight from its definition, 16 bits at a time.
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from(c[0]) << 8 };
            acc += u32::from(w);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(finish(sum(&data)), !0xddf2);
    }

    #[test]
    fn fold_edge_values() {
        let slow = |mut a: u64| {
            while a >> 16 != 0 {
                a = (a & 0xffff) + (a >> 16);
            }
            a as u16
        };
        for a in [0, 0xffff, 0x1_0000, 0x1_ffff, 0x2_fffe, 0xffff_ffff, 0x1_0000_ffff, u64::MAX, u64::MAX - 1, 1 << 63]
        {
            assert_eq!(fold(a), slow(a), "{a:#x}");
        }
    }

    #[test]
    fn ipv4_header_example() {
        // A well-known IPv4 header with checksum b861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        assert_eq!(finish(sum(&h)), 0xb861);
    }

    proptest! {
        #[test]
        fn fold_matches_the_loop(acc in any::<u64>()) {
            let mut a = acc;
            while a >> 16 != 0 {
                a = (a & 0xffff) + (a >> 16);
            }
            prop_assert_eq!(fold(acc), a as u16);
        }

        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(finish(sum(&data)), reference(&data));
        }

        #[test]
        fn incremental_equals_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 4..200),
            at in 0usize..100, new in any::<u16>(),
        ) {
            let at = (at % (data.len() / 2 - 1)) * 2 + 2; // keep words 0..2 for the checksum
            data[0] = 0; data[1] = 0;
            let c = finish(sum(&data));
            data[0..2].copy_from_slice(&c.to_be_bytes());
            let old_word = u64::from(u16::from_be_bytes([data[at], data[at + 1]]));
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            let c2 = update(c, old_word, u64::from(new));
            data[0..2].copy_from_slice(&c2.to_be_bytes());
            prop_assert!(verifies(sum(&data)));
        }

        #[test]
        fn pseudo_headers_match_byte_layout(s in any::<u128>(), d in any::<u128>(), len in any::<u16>()) {
            let (s6, d6) = (Ipv6Addr::from(s), Ipv6Addr::from(d));
            let mut b = Vec::new();
            b.extend_from_slice(&s6.octets()); b.extend_from_slice(&d6.octets());
            b.extend_from_slice(&u32::from(len).to_be_bytes()); b.extend_from_slice(&[0, 0, 0, 17]);
            prop_assert_eq!(fold(pseudo_v6(&s6, &d6, 17, u32::from(len))), fold(sum(&b)));
            let (s4, d4) = (Ipv4Addr::from(s as u32), Ipv4Addr::from(d as u32));
            let mut b = Vec::new();
            b.extend_from_slice(&s4.octets()); b.extend_from_slice(&d4.octets());
            b.extend_from_slice(&[0, 6]); b.extend_from_slice(&len.to_be_bytes());
            prop_assert_eq!(fold(pseudo_v4(s4, d4, 6, len)), fold(sum(&b)));
        }
    }
}
