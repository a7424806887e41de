//! ICMP errors the packet plane originates itself (as a router would):
//! RFC 792 / RFC 1812 §4.3.2 for ICMPv4, RFC 4443 §2.4 for ICMPv6. Used by
//! the translator (Time Exceeded, Fragmentation Needed, Packet Too Big,
//! Parameter Problem...) and the tunnels (RFC 2473 §7.2).

use crate::checksum;
use crate::wire::icmp;
use crate::wire::ipv4::{self, Ipv4Header};
use crate::wire::ipv6::{self, Ipv6Header};
use crate::wire::{proto, put16};
use crate::{Out, PacketKind};
use core::net::{Ipv4Addr, Ipv6Addr};

/// RFC 4443 §2.4 (c): ICMPv6 errors carry as much of the invoking packet
/// as fits without exceeding the minimum IPv6 MTU.
pub const ICMP6_ERROR_MAX: usize = 1280;
/// RFC 1812 §4.3.2.3: ICMPv4 errors carry as much of the original datagram
/// as fits without exceeding 576 bytes.
pub const ICMP4_ERROR_MAX: usize = 576;
/// Hop Limit / TTL of packets the packet plane originates.
pub(crate) const ORIGIN_TTL: u8 = 64;

/// Originate an ICMPv4 error about `invoking` (an IPv4 packet) from
/// `src`, back to the invoking packet's source: TOS 0, TTL 64, DF clear,
/// as much of the invoking packet as fits in 576 bytes. Returns false
/// (emitting nothing) when `invoking` has no IPv4 header or `out` is full.
/// The caller has checked that an error may be sent (RFC 1812 §4.3.2.7).
pub fn icmp4_error(out: &mut Out, src: Ipv4Addr, invoking: &[u8], kind: u8, code: u8, rest: [u8; 4]) -> bool {
    let Ok(ip) = ipv4::Ipv4Packet::new_quoted(invoking) else { return false };
    let hl = ipv4::HEADER_LEN + icmp::HEADER_LEN;
    let quote = &ip.as_bytes()[..ip.as_bytes().len().min(ICMP4_ERROR_MAX - hl)];
    let total = hl + quote.len();
    let ident = out.take_ident();
    let Some(space) = out.space(total) else { return false };
    Ipv4Header {
        tos: 0,
        total_len: total as u16,
        ident,
        df: false,
        mf: false,
        frag_offset: 0,
        ttl: ORIGIN_TTL,
        protocol: proto::ICMP,
        src,
        dst: ip.src(),
    }
    .emit(space);
    let msg = &mut space[ipv4::HEADER_LEN..total];
    msg[0] = kind;
    msg[1] = code;
    put16(msg, 2, 0);
    msg[4..8].copy_from_slice(&rest);
    msg[8..].copy_from_slice(quote);
    let c = checksum::finish(checksum::sum(msg));
    put16(msg, 2, c);
    out.commit(total, PacketKind::IcmpError);
    true
}

/// Originate an ICMPv6 error about `invoking` (an IPv6 packet) from `src`:
/// Hop Limit 64, as much of the invoking packet as fits in 1280 bytes.
pub fn icmp6_error(out: &mut Out, src: Ipv6Addr, invoking: &[u8], kind: u8, code: u8, rest: [u8; 4]) -> bool {
    let Ok(ip) = ipv6::Ipv6Packet::new_quoted(invoking) else { return false };
    let hl = ipv6::HEADER_LEN + icmp::HEADER_LEN;
    let quote = &ip.as_bytes()[..ip.as_bytes().len().min(ICMP6_ERROR_MAX - hl)];
    let total = hl + quote.len();
    let Some(space) = out.space(total) else { return false };
    let dst = ip.src();
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        payload_len: (total - ipv6::HEADER_LEN) as u16,
        next_header: proto::ICMPV6,
        hop_limit: ORIGIN_TTL,
        src,
        dst,
    }
    .emit(space);
    let msg = &mut space[ipv6::HEADER_LEN..total];
    msg[0] = kind;
    msg[1] = code;
    put16(msg, 2, 0);
    msg[4..8].copy_from_slice(&rest);
    msg[8..].copy_from_slice(quote);
    let c = icmp6_checksum(&src, &dst, msg);
    put16(msg, 2, c);
    out.commit(total, PacketKind::IcmpError);
    true
}

/// ICMPv6 checksum of `msg` (checksum field zeroed) with its pseudo-header.
#[inline]
pub(crate) fn icmp6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> u16 {
    checksum::finish(checksum::pseudo_v6(src, dst, proto::ICMPV6, msg.len() as u32) + checksum::sum(msg))
}
