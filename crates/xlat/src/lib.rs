//! # xlat — the v6gate packet plane
//!
//! Pure functions over byte buffers: parse, translate, encapsulate,
//! decapsulate, checksum. No I/O, no clocks, no locks and no allocation per
//! packet (the caller owns a reusable [`Out`] arena). Every entry point
//! returns a [`Verdict`]: emit the packets now in `Out` (translated packets
//! and/or an ICMP error back to the sender), or drop for a [`DropReason`].
//! No input of any length or content may panic; the fuzz targets in
//! `fuzz/` hold us to that.
//!
//! Modules, one per mechanism:
//! - [`checksum`] — Internet checksum (RFC 1071) and incremental update (RFC 1624)
//! - [`wire`] — zero-copy header views for IPv4, IPv6 (+ extension headers), UDP, TCP, ICMPv4, ICMPv6
//! - [`addr`] — RFC 6052, RFC 6219 (IVI), RFC 7757 (EAMT) and RFC 6791 address mapping
//! - [`siit`] — RFC 7915 stateless IP/ICMP translation, both directions
//! - [`tunnel`] — RFC 3056 6to4, RFC 4380 Teredo and RFC 2473 4in6 encapsulation
//! - [`origin`] — ICMPv4/ICMPv6 errors the packet plane (or a stateful layer
//!   above it, e.g. a softwire end-point) originates itself
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod addr;
pub mod checksum;
pub mod origin;
mod out;
pub mod siit;
#[cfg(any(test, feature = "testvec"))]
pub mod testvec;
pub mod tunnel;
pub mod wire;

pub use out::{DropReason, Out, PacketKind, Verdict};
