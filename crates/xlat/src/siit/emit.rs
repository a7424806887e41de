//! Shared emission helpers: writing translated packets (with fragmentation)
//! into the [`Out`] arena, and the ICMP errors the translator originates.

use crate::checksum;
use crate::wire::icmp;
use crate::wire::ipv4::{self, Ipv4Header};
use crate::wire::ipv6::{self, emit_frag, Ipv6Header};
use crate::wire::{proto, put16};
use crate::{DropReason, Out, PacketKind};
use core::net::{Ipv4Addr, Ipv6Addr};

/// RFC 4443 §2.4 (c): ICMPv6 errors carry as much of the invoking packet
/// as fits without exceeding the minimum IPv6 MTU.
pub(crate) const ICMP6_ERROR_MAX: usize = 1280;
/// RFC 1812 §4.3.2.3: ICMPv4 errors carry as much of the original datagram
/// as fits without exceeding 576 bytes.
pub(crate) const ICMP4_ERROR_MAX: usize = 576;
/// Hop Limit / TTL of packets the translator originates.
pub(crate) const ORIGIN_TTL: u8 = 64;

/// Up to two 16-bit writes into the upper-layer header of a translated
/// packet (ICMP type/code, a checksum).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Patch {
    n: usize,
    ops: [(usize, u16); 2],
}

impl Patch {
    #[inline]
    pub(crate) fn push(&mut self, at: usize, v: u16) {
        if self.n < self.ops.len() {
            self.ops[self.n] = (at, v);
            self.n += 1;
        }
    }
    /// Apply the writes that fall inside `b` (a quoted inner packet may be
    /// cut short).
    #[inline]
    pub(crate) fn apply(&self, b: &mut [u8]) {
        for &(at, v) in &self.ops[..self.n] {
            if at + 2 <= b.len() {
                put16(b, at, v);
            }
        }
    }
}

/// Fragment fields carried over into the translated packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FragSpec {
    /// Offset of the first payload byte, in 8-octet units.
    pub offset: u16,
    /// More-fragments flag of the original packet.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// Emit an IPv6 packet carrying `payload`, fragmented when `frag` is given
/// so that no fragment exceeds `mtu` (RFC 7915 §4.1: each fragment gets a
/// Fragment header; M is set on all but the last, which keeps the
/// original MF).
pub(crate) fn emit_v6(
    out: &mut Out,
    mut hdr: Ipv6Header,
    payload: &[u8],
    patch: &Patch,
    frag: Option<FragSpec>,
    mtu: usize,
) -> Result<(), DropReason> {
    let Some(f) = frag else {
        let total = ipv6::HEADER_LEN + payload.len();
        let space = out.space(total).ok_or(DropReason::Unsupported)?;
        hdr.payload_len = payload.len() as u16;
        hdr.emit(space);
        let body = &mut space[ipv6::HEADER_LEN..total];
        body.copy_from_slice(payload);
        patch.apply(body);
        out.commit(total, PacketKind::Forward);
        return Ok(());
    };
    let upper = hdr.next_header;
    hdr.next_header = proto::FRAGMENT;
    let hl = ipv6::HEADER_LEN + ipv6::FRAG_LEN;
    let max_data = (mtu.saturating_sub(hl)) & !7;
    if max_data == 0 {
        return Err(DropReason::Unsupported);
    }
    let mut off = 0;
    loop {
        let chunk = max_data.min(payload.len() - off);
        let last = off + chunk == payload.len();
        let total = hl + chunk;
        let space = out.space(total).ok_or(DropReason::Unsupported)?;
        hdr.payload_len = (ipv6::FRAG_LEN + chunk) as u16;
        hdr.emit(space);
        let fo = f.offset + (off / 8) as u16;
        emit_frag(&mut space[ipv6::HEADER_LEN..hl], upper, fo, !last || f.more, f.ident);
        let body = &mut space[hl..total];
        body.copy_from_slice(&payload[off..off + chunk]);
        if off == 0 {
            patch.apply(body);
        }
        out.commit(total, PacketKind::Forward);
        off += chunk;
        if last {
            return Ok(());
        }
    }
}

/// Emit an IPv4 packet carrying `payload`. When it exceeds `mtu` (the
/// caller has checked DF is clear) it is fragmented as an IPv4 router
/// would (RFC 791), keeping the original offset and MF.
pub(crate) fn emit_v4(
    out: &mut Out,
    mut hdr: Ipv4Header,
    payload: &[u8],
    patch: &Patch,
    mtu: usize,
) -> Result<(), DropReason> {
    let hl = ipv4::HEADER_LEN;
    if hl + payload.len() <= mtu {
        let total = hl + payload.len();
        let space = out.space(total).ok_or(DropReason::Unsupported)?;
        hdr.total_len = total as u16;
        hdr.emit(space);
        let body = &mut space[hl..total];
        body.copy_from_slice(payload);
        patch.apply(body);
        out.commit(total, PacketKind::Forward);
        return Ok(());
    }
    let max_data = (mtu.saturating_sub(hl)) & !7;
    if max_data == 0 || hdr.df {
        return Err(DropReason::TooBig);
    }
    let (base, more) = (hdr.frag_offset, hdr.mf);
    let mut off = 0;
    loop {
        let chunk = max_data.min(payload.len() - off);
        let last = off + chunk == payload.len();
        let total = hl + chunk;
        let space = out.space(total).ok_or(DropReason::Unsupported)?;
        hdr.total_len = total as u16;
        hdr.frag_offset = base + (off / 8) as u16;
        hdr.mf = !last || more;
        hdr.emit(space);
        let body = &mut space[hl..total];
        body.copy_from_slice(&payload[off..off + chunk]);
        if off == 0 {
            patch.apply(body);
        }
        out.commit(total, PacketKind::Forward);
        off += chunk;
        if last {
            return Ok(());
        }
    }
}

/// Originate an ICMPv4 error about `invoking` (an IPv4 packet) from
/// `src`, back to the invoking packet's source.
pub(crate) fn icmp4_error(out: &mut Out, src: Ipv4Addr, invoking: &[u8], kind: u8, code: u8, rest: [u8; 4]) {
    let Ok(ip) = ipv4::Ipv4Packet::new_quoted(invoking) else { return };
    let hl = ipv4::HEADER_LEN + icmp::HEADER_LEN;
    let quote = &ip.as_bytes()[..ip.as_bytes().len().min(ICMP4_ERROR_MAX - hl)];
    let total = hl + quote.len();
    let ident = out.take_ident();
    let Some(space) = out.space(total) else { return };
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
}

/// Originate an ICMPv6 error about `invoking` (an IPv6 packet) from `src`.
pub(crate) fn icmp6_error(out: &mut Out, src: Ipv6Addr, invoking: &[u8], kind: u8, code: u8, rest: [u8; 4]) {
    let Ok(ip) = ipv6::Ipv6Packet::new_quoted(invoking) else { return };
    let hl = ipv6::HEADER_LEN + icmp::HEADER_LEN;
    let quote = &ip.as_bytes()[..ip.as_bytes().len().min(ICMP6_ERROR_MAX - hl)];
    let total = hl + quote.len();
    let Some(space) = out.space(total) else { return };
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
}

/// ICMPv6 checksum of `msg` (checksum field zeroed) with its pseudo-header.
#[inline]
pub(crate) fn icmp6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> u16 {
    checksum::finish(checksum::pseudo_v6(src, dst, proto::ICMPV6, msg.len() as u32) + checksum::sum(msg))
}

/// RFC 4884 §4: the ICMP Length attribute splits an error body into the
/// original datagram and an extension structure. `len_bytes` is the
/// attribute times its unit. Returns `(original, extension)`; `None` when
/// the attribute points past the body.
pub(crate) fn split_4884(body: &[u8], len_bytes: usize) -> Option<(&[u8], &[u8])> {
    if len_bytes == 0 {
        return Some((body, &[]));
    }
    if len_bytes > body.len() {
        return None;
    }
    Some(body.split_at(len_bytes))
}

/// RFC 4884 §4.1: after translating the original datagram into `buf[..n]`,
/// append the extension `ext` if it fits within `cap`, padding the
/// datagram with zeros to a multiple of `unit` and at least 128 bytes.
/// Returns the new body length and the Length attribute (0 when the
/// extension was dropped).
pub(crate) fn append_4884(buf: &mut [u8], n: usize, ext: &[u8], unit: usize, cap: usize) -> (usize, u8) {
    if ext.is_empty() {
        return (n, 0);
    }
    let mut padded = n.div_ceil(unit) * unit;
    padded = padded.max(128);
    if padded / unit > 255 || padded + ext.len() > cap || padded + ext.len() > buf.len() {
        return (n, 0);
    }
    buf[n..padded].fill(0);
    buf[padded..padded + ext.len()].copy_from_slice(ext);
    (padded + ext.len(), (padded / unit) as u8)
}
