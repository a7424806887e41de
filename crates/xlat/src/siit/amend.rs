//! RFC 7915 §4.5 — amending a zero UDP checksum of a fragmented IPv4
//! datagram (`amend-udp-checksum-zero`).
//!
//! A stateless translator sees one fragment at a time and cannot compute a
//! checksum that covers the whole datagram, so by default such fragments
//! are dropped. When the caller holds every fragment of the datagram (the
//! offline translator over its input, the daemon's reassembly buffer), it
//! can call [`amend_udp_checksum_zero`] to write the IPv4 UDP checksum into
//! the first fragment; each fragment then translates normally and keeps
//! its original boundaries.

use crate::checksum;
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::l4::UdpHeader;
use crate::wire::{proto, put16};
use crate::DropReason;

/// Identity of the datagram a fragment belongs to (RFC 791: source,
/// destination, protocol, identification).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragKey {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Protocol.
    pub proto: u8,
    /// Identification.
    pub ident: u16,
}

/// What a fragment needs when amending is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragClass {
    /// Not an IPv4 UDP fragment with a zero checksum, nor a later fragment
    /// of one: translate it as it is.
    Translate,
    /// The first fragment of a UDP datagram whose checksum is zero: hold
    /// it (and the later fragments with the same key) until complete.
    HoldFirst(FragKey),
    /// A non-first UDP fragment: hold it if its key is being held.
    Later(FragKey),
}

/// Classify an IPv4 packet for amending.
pub fn classify(pkt: &[u8]) -> FragClass {
    let Ok(ip) = Ipv4Packet::new(pkt) else { return FragClass::Translate };
    if ip.protocol() != proto::UDP || !ip.is_fragment() {
        return FragClass::Translate;
    }
    let key = FragKey { src: ip.src().octets(), dst: ip.dst().octets(), proto: proto::UDP, ident: ip.ident() };
    if ip.frag_offset() != 0 {
        return FragClass::Later(key);
    }
    match UdpHeader::new(ip.payload()) {
        Ok(u) if u.checksum() == 0 => FragClass::HoldFirst(key),
        _ => FragClass::Translate,
    }
}

/// True when `frags` (IPv4 fragments of one datagram, any order) cover the
/// whole datagram: offsets contiguous from 0 and a last fragment with MF
/// clear.
pub fn is_complete<T: AsRef<[u8]>>(frags: &[T]) -> bool {
    datagram_len(frags).is_some()
}

fn datagram_len<T: AsRef<[u8]>>(frags: &[T]) -> Option<usize> {
    let mut spans: Vec<(usize, usize, bool)> = Vec::with_capacity(frags.len());
    for f in frags {
        let ip = Ipv4Packet::new(f.as_ref()).ok()?;
        let off = usize::from(ip.frag_offset()) * 8;
        spans.push((off, off + ip.payload().len(), ip.more_frags()));
    }
    spans.sort_unstable();
    let mut end = 0;
    for &(start, stop, more) in &spans {
        if start != end {
            return None;
        }
        end = stop;
        if !more {
            return Some(end);
        }
    }
    None
}

/// Compute the UDP checksum of the complete datagram held in `frags` and
/// write it into the first fragment (offset 0), fixing nothing else (the
/// IPv4 header checksum does not cover the payload). Fails when the set is
/// incomplete or inconsistent.
pub fn amend_udp_checksum_zero(frags: &mut [Vec<u8>]) -> Result<(), DropReason> {
    let total = datagram_len(frags).ok_or(DropReason::UdpChecksumZeroFragment)?;
    let mut acc = 0u64;
    let mut first = None;
    for (i, f) in frags.iter().enumerate() {
        let ip = Ipv4Packet::new(f).map_err(DropReason::from)?;
        let off = usize::from(ip.frag_offset()) * 8;
        let pl = ip.payload();
        if off == 0 {
            let udp = UdpHeader::new(pl).map_err(DropReason::from)?;
            if usize::from(udp.length()) != total {
                return Err(DropReason::Malformed);
            }
            acc += checksum::pseudo_v4(ip.src(), ip.dst(), proto::UDP, udp.length());
            first = Some((i, ip.header_len()));
        }
        // Every fragment but the last carries a multiple of 8 bytes, so all
        // start on an even byte and their sums simply add up.
        acc += checksum::sum(pl);
    }
    let (i, hl) = first.ok_or(DropReason::Malformed)?;
    let c = match checksum::finish(acc) {
        0 => 0xffff,
        c => c,
    };
    put16(&mut frags[i][hl..], 6, c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::Ipv4Header;
    use core::net::Ipv4Addr;

    fn frag(offset8: u16, mf: bool, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 20 + payload.len()];
        Ipv4Header {
            tos: 0,
            total_len: (20 + payload.len()) as u16,
            ident: 77,
            df: false,
            mf,
            frag_offset: offset8,
            ttl: 64,
            protocol: 17,
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(198, 51, 100, 2),
        }
        .emit(&mut b);
        b[20..].copy_from_slice(payload);
        b
    }

    #[test]
    fn amends_a_complete_zero_checksum_datagram() {
        let data: Vec<u8> = (0..40u8).collect();
        let mut udp = vec![0x04, 0xd2, 0x00, 0x35, 0, 48, 0, 0];
        udp.extend_from_slice(&data);
        let whole = udp.clone();
        let mut frags = vec![frag(3, false, &udp[24..]), frag(0, true, &udp[..24])];
        assert_eq!(
            classify(&frags[1]),
            FragClass::HoldFirst(FragKey { src: [192, 0, 2, 1], dst: [198, 51, 100, 2], proto: 17, ident: 77 })
        );
        assert!(matches!(classify(&frags[0]), FragClass::Later(_)));
        assert!(is_complete(&frags));
        assert!(!is_complete(&frags[..1]));
        amend_udp_checksum_zero(&mut frags).unwrap();
        // Reference: the checksum of the unfragmented datagram.
        let mut pseudo = vec![192, 0, 2, 1, 198, 51, 100, 2, 0, 17, 0, 48];
        pseudo.extend_from_slice(&whole);
        let expect = checksum::finish(checksum::sum(&pseudo));
        assert_eq!(u16::from_be_bytes([frags[1][26], frags[1][27]]), expect);
    }

    #[test]
    fn refuses_incomplete_or_inconsistent_sets() {
        let udp = [0u8; 24];
        let mut gap = vec![frag(0, true, &udp[..8]), frag(2, false, &udp[..8])];
        assert_eq!(amend_udp_checksum_zero(&mut gap), Err(DropReason::UdpChecksumZeroFragment));
        let mut bad_len = vec![frag(0, true, &[0, 1, 0, 2, 0, 99, 0, 0]), frag(1, false, &udp[..8])];
        assert_eq!(amend_udp_checksum_zero(&mut bad_len), Err(DropReason::Malformed));
    }
}
