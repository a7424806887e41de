//! Tunnel encapsulations as pure functions over byte buffers.
//!
//! - [`sixto4`] — RFC 3056 6to4 (IPv6 in IPv4, protocol 41) with the RFC 3964
//!   decapsulation checks and the RFC 4213 §3.5 outer-header rules.
//! - [`sixrd`] — RFC 5969 6rd: the 6rd delegated prefix (6to4 is its
//!   special case `2002::/16`, IPv4MaskLen 0) and the §8 decapsulation
//!   checks; the encapsulation is 6to4's.
//! - [`teredo`] — RFC 4380 Teredo (IPv6 in UDP over IPv4): addresses, the
//!   authentication and origin indicators, bubbles, IPv4+UDP framing.
//! - [`teredo_msg`] — Teredo qualification (Router Solicitation and
//!   Advertisement), the Echo of the connectivity test, RFC 6081 trailers.
//! - [`ip4in6`] — RFC 2473 generic packet tunnelling in IPv6 (4in6 for DSTM
//!   and DS-Lite, RFC 6333 §5; 6in6 on decapsulation), including the Tunnel
//!   Encapsulation Limit option and the §7 packet-size rules (and the
//!   RFC 6333 §5.3 variant: fragment the tunnel packet, never the IPv4 one).
//! - [`ip4in6_err`] — RFC 2473 §8: ICMPv6 errors about 4in6 tunnel packets
//!   relayed to the original IPv4 source as ICMPv4 errors.
//!
//! ## Calling conventions (the same in every module)
//!
//! - **Encapsulation** writes into the caller's [`Out`](crate::Out) arena and
//!   returns a [`Verdict`](crate::Verdict), like the translator: each `encap*`
//!   entry point clears `out` first; on `Emit`, `out` holds the tunnel packet(s)
//!   as [`PacketKind::Forward`](crate::PacketKind::Forward) and, for
//!   [`ip4in6`]'s too-big path, an ICMPv4 error as
//!   [`PacketKind::IcmpError`](crate::PacketKind::IcmpError).
//! - **Decapsulation** is zero-copy: `decap`/`parse` return views that borrow
//!   sub-slices of the input, or a [`TunnelError`]. `DropReason::from(err)`
//!   turns an error into the reason for counters and `v6gate translate`.
//! - Small fixed-format writers that have no natural `Out` home (the Teredo UDP
//!   payload, a Teredo bubble) take a `&mut [u8]` and return
//!   `Result<usize, TunnelError>` with the number of bytes written.
//!
//! Nothing here allocates, and no input of any length or content panics.

use crate::wire::WireError;
use crate::DropReason;
use core::fmt;

pub mod ip4in6;
pub mod ip4in6_err;
pub mod sixrd;
pub mod sixto4;
pub mod teredo;
pub mod teredo_msg;

/// Why a tunnel packet could not be encapsulated or decapsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelError {
    /// A header or indicator is shorter than its fixed part or its length fields claim.
    Truncated,
    /// A field is inconsistent (bad version, lengths disagree, bad option TLV, ...).
    Malformed,
    /// The outer IPv4 header checksum does not verify.
    BadIpv4Checksum,
    /// The outer UDP checksum is non-zero and does not verify.
    BadUdpChecksum,
    /// An encapsulation rule was violated; the message names the RFC rule.
    Rule(&'static str),
    /// The packet does not fit: the tunnel packet would exceed `mtu` bytes
    /// (the egress MTU, or 65,535 for the IP length fields).
    TooBig {
        /// The limit that was exceeded, in bytes.
        mtu: usize,
    },
    /// The outer packet is a fragment: reassemble before decapsulating.
    Fragmented,
    /// The caller's output buffer (or the `Out` arena) is too small.
    NoSpace,
}

impl fmt::Display for TunnelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TunnelError::Truncated => f.write_str("truncated tunnel packet"),
            TunnelError::Malformed => f.write_str("malformed tunnel packet"),
            TunnelError::BadIpv4Checksum => f.write_str("outer IPv4 header checksum does not verify"),
            TunnelError::BadUdpChecksum => f.write_str("outer UDP checksum does not verify"),
            TunnelError::Rule(r) => f.write_str(r),
            TunnelError::TooBig { mtu } => write!(f, "tunnel packet exceeds {mtu} bytes"),
            TunnelError::Fragmented => f.write_str("outer packet is a fragment; reassemble before decapsulating"),
            TunnelError::NoSpace => f.write_str("output buffer too small"),
        }
    }
}

impl std::error::Error for TunnelError {}

impl From<WireError> for TunnelError {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Truncated => TunnelError::Truncated,
            WireError::Malformed => TunnelError::Malformed,
        }
    }
}

impl From<TunnelError> for DropReason {
    fn from(e: TunnelError) -> Self {
        match e {
            TunnelError::Truncated => DropReason::Truncated,
            TunnelError::Malformed | TunnelError::BadUdpChecksum => DropReason::Malformed,
            TunnelError::BadIpv4Checksum => DropReason::BadIpv4Checksum,
            TunnelError::Rule(_) => DropReason::TunnelRule,
            TunnelError::TooBig { .. } | TunnelError::NoSpace => DropReason::TooBig,
            TunnelError::Fragmented => DropReason::Unsupported,
        }
    }
}

/// How to build the outer IPv4 header of an IPv6-in-IPv4 tunnel packet
/// (6to4 and Teredo), after RFC 4213 §3.5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Outer {
    /// Outer TTL. RFC 4213 §3.3: the IPv4 "default TTL" (64) by default.
    pub ttl: u8,
    /// Set Don't Fragment. RFC 4213 §3.2: set when the tunnel does dynamic
    /// path-MTU determination, clear for a static 1280-byte tunnel MTU
    /// (the default here).
    pub df: bool,
    /// Copy the inner IPv6 Traffic Class into the outer TOS octet. RFC 4213
    /// §3.5 says TOS is 0 "unless otherwise specified" (see RFC 2983 for the
    /// Diffserv choices and RFC 6040 for ECN); off by default.
    pub copy_traffic_class: bool,
}

impl Default for Ipv4Outer {
    fn default() -> Self {
        Ipv4Outer { ttl: 64, df: false, copy_traffic_class: false }
    }
}

impl Ipv4Outer {
    /// The outer IPv4 header of a tunnel packet of `total_len` bytes
    /// carrying `inner`.
    pub(crate) fn header(
        &self,
        inner: &crate::wire::ipv6::Ipv6Packet<'_>,
        protocol: u8,
        (src, dst): (core::net::Ipv4Addr, core::net::Ipv4Addr),
        total_len: u16,
        ident: u16,
    ) -> crate::wire::ipv4::Ipv4Header {
        crate::wire::ipv4::Ipv4Header {
            tos: if self.copy_traffic_class { inner.traffic_class() } else { 0 },
            total_len,
            ident,
            df: self.df,
            mf: false,
            frag_offset: 0,
            ttl: self.ttl,
            protocol,
            src,
            dst,
        }
    }
}

/// Originate an ICMPv6 error about `invoking` from a tunnel end point's
/// address `src` (RFC 4443: Hop Limit 64, as much of the invoking packet as
/// fits in 1280 bytes), into `out` (cleared first). Returns false, emitting
/// nothing, when RFC 4443 §2.4 (e) forbids an error: the invoking packet is
/// itself an ICMPv6 error (or too short to tell), its destination is
/// multicast, or its source is unspecified or multicast. Rate limiting
/// (§2.4 (f)) is the caller's: it owns the clock.
pub fn icmp6_error(out: &mut crate::Out, src: core::net::Ipv6Addr, invoking: &[u8], kind: u8, code: u8) -> bool {
    out.clear();
    let Ok(ip) = crate::wire::ipv6::Ipv6Packet::new(invoking) else { return false };
    if ip.dst().is_multicast() || ip.src().is_multicast() || ip.src().is_unspecified() {
        return false;
    }
    if ip.next_header() == crate::wire::proto::ICMPV6 {
        match ip.as_bytes().get(crate::wire::ipv6::HEADER_LEN) {
            Some(&t) if !crate::wire::icmp::is_error_v6(t) => {}
            _ => return false,
        }
    }
    crate::origin::icmp6_error(out, src, invoking, kind, code, [0; 4])
}

/// Helper for `Verdict`-style entry points: the error as a drop verdict.
#[inline]
pub(crate) fn drop_verdict(e: TunnelError) -> crate::Verdict {
    crate::Verdict::Drop(e.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_drop_reasons_and_display() {
        assert_eq!(DropReason::from(TunnelError::Truncated), DropReason::Truncated);
        assert_eq!(DropReason::from(TunnelError::Malformed), DropReason::Malformed);
        assert_eq!(DropReason::from(TunnelError::BadUdpChecksum), DropReason::Malformed);
        assert_eq!(DropReason::from(TunnelError::BadIpv4Checksum), DropReason::BadIpv4Checksum);
        assert_eq!(DropReason::from(TunnelError::Rule("RFC 3056 §8")), DropReason::TunnelRule);
        assert_eq!(DropReason::from(TunnelError::TooBig { mtu: 1280 }), DropReason::TooBig);
        assert_eq!(DropReason::from(TunnelError::NoSpace), DropReason::TooBig);
        assert_eq!(DropReason::from(TunnelError::Fragmented), DropReason::Unsupported);
        assert_eq!(TunnelError::Rule("RFC 4380 §5.2.3: x").to_string(), "RFC 4380 §5.2.3: x");
        assert_eq!(TunnelError::TooBig { mtu: 1280 }.to_string(), "tunnel packet exceeds 1280 bytes");
        assert_eq!(TunnelError::from(WireError::Truncated), TunnelError::Truncated);
    }
}
