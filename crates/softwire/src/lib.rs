//! # softwire — DSTM and its heirs
//!
//! IPv4 over IPv6 softwires from one core (RFC 2473 4in6, [`endpoint`]):
//!
//! - [`aftr`]: the DS-Lite AFTR (RFC 6333) — softwires from any B4 in the
//!   configured prefixes, a carrier-grade NAT44 keyed by the softwire
//!   ([`nat44`], RFC 6888);
//! - [`lwaftr`]: the lw4o6 lwAFTR (RFC 7596) — no NAT state, a binding
//!   table of (lwB4 IPv6 address, IPv4 address, port set) ([`binding`],
//!   [`portset`]), reloadable at run time;
//! - DSTM: the lwAFTR with whole-address bindings leased on demand by the
//!   lease server ([`lease`]);
//! - [`b4`]: the client side — the DS-Lite B4, the lwB4 (NAPT into its port
//!   set) and the DSTM client.
//!
//! [`fast`] mirrors the lwAFTR's bindings and leases into its XDP fast
//! path (crates/xdp, `bpf/softwire.bpf.c`).
//!
//! The engines are I/O-free (`process(packet, now, out)`, the `nat64`
//! pattern); [`run`] drives them over TUN devices and [`cli`] is
//! `v6gate softwire`.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod aftr;
pub mod b4;
pub mod b4k;
pub mod binding;
pub mod cli;
pub mod config;
pub mod echo;
pub mod endpoint;
pub mod fast;
pub mod flat;
pub mod function;
pub mod lease;
pub mod lwaftr;
pub mod nat44;
pub mod pkt;
pub mod portset;
pub mod run;
pub mod stats;

pub use stats::{Action, Counters, Reason, Snapshot};
