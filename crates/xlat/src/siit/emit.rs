//! Shared emission helpers: writing translated packets (with fragmentation)
//! into the [`Out`] arena, the transport-header rewrite that follows the
//! address change, and RFC 4884 extension handling.

use super::icmp::{map_4to6, map_6to4};
use crate::checksum;
use crate::wire::ipv4::{self, Ipv4Header};
use crate::wire::ipv6::{self, emit_frag, Ipv6Header};
use crate::wire::{be16, proto, put16};
use crate::{DropReason, Out, PacketKind};
use core::net::Ipv6Addr;

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

/// Which way a packet is being translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// RFC 7915 §4.
    FourToSix,
    /// RFC 7915 §5.
    SixToFour,
}

/// The upper-layer rewrite that follows the address change, for the
/// packet itself and for the packet quoted in an ICMP error: TCP and UDP
/// checksums adjusted for the new pseudo-header (RFC 1624; `addr_old` and
/// `addr_new` are the address sums before and after), ICMP echo type and
/// checksum converted — ICMPv6 covers a pseudo-header (`v6` addresses and
/// `icmp_len`, the message length) and ICMPv4 does not. A UDP checksum of
/// zero is left alone (the callers decide about it). Writes that fall
/// outside a quoted, truncated `l4` are skipped by [`Patch::apply`].
pub(crate) fn l4_patch(
    dir: Dir,
    p: u8,
    l4: &[u8],
    (addr_old, addr_new): (u64, u64),
    (s6, d6): (&Ipv6Addr, &Ipv6Addr),
    icmp_len: usize,
) -> Patch {
    let mut patch = Patch::default();
    match p {
        proto::UDP if l4.len() >= 8 && be16(l4, 6) != 0 => {
            patch.push(6, checksum::update_udp(be16(l4, 6), addr_old, addr_new));
        }
        proto::TCP if l4.len() >= 18 => {
            patch.push(16, checksum::update(be16(l4, 16), addr_old, addr_new));
        }
        proto::ICMP | proto::ICMPV6 if l4.len() >= 4 => {
            let mapped = match dir {
                Dir::FourToSix if p == proto::ICMP => map_4to6(l4[0], l4[1], [0; 4]),
                Dir::SixToFour if p == proto::ICMPV6 => map_6to4(l4[0], l4[1], [0; 4]),
                _ => None,
            };
            if let Some(m) = mapped {
                let (w_old, w_new) = (u16::from_be_bytes([l4[0], l4[1]]), u16::from_be_bytes([m.kind, m.code]));
                let pseudo = checksum::pseudo_v6(s6, d6, proto::ICMPV6, icmp_len as u32);
                let (old, new) = match dir {
                    Dir::FourToSix => (u64::from(w_old), u64::from(w_new) + pseudo),
                    Dir::SixToFour => (u64::from(w_old) + pseudo, u64::from(w_new)),
                };
                patch.push(0, w_new);
                patch.push(2, checksum::update(be16(l4, 2), old, new));
            }
        }
        _ => {}
    }
    patch
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
    for (off, chunk, last) in chunks(payload.len(), max_data) {
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
    }
    Ok(())
}

/// Split `len` payload bytes into fragments of at most `max` bytes (a
/// multiple of 8): `(offset, length, is_last)`. An empty payload is one
/// empty fragment.
fn chunks(len: usize, max: usize) -> impl Iterator<Item = (usize, usize, bool)> {
    let n = len.div_ceil(max).max(1);
    (0..n).map(move |i| {
        let off = i * max;
        let chunk = max.min(len - off);
        (off, chunk, off + chunk == len)
    })
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
    for (off, chunk, last) in chunks(payload.len(), max_data) {
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
    }
    Ok(())
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
