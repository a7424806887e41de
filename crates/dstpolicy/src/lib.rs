//! # dstpolicy — where the gateway may send what a client names
//!
//! Every plane that sends where a client says — the IMS-ALG's SIP next
//! hops, the TrGW's SDP media addresses (and the sources symmetric
//! latching learns), the TRT's targets, the DNS64's synthesized answers —
//! asks one [`Policy`] before it sends. The policy refuses, by default:
//!
//! - the built-in classes ([`class`]): unspecified (as a destination),
//!   loopback, "this network" 0.0.0.0/8, link-local (169.254.0.0/16,
//!   fe80::/10), multicast (224.0.0.0/4, ff00::/8), the limited broadcast
//!   255.255.255.255 and the rest of 240.0.0.0/4;
//! - the directed broadcast address of every IPv4 subnet on the host's
//!   interfaces, and the gateway's own addresses: every address on the
//!   host's interfaces, plus the configured ones (listen and advertised
//!   addresses, NAT64 pools) — the [`Gateway`], kept current by a
//!   [`Watch`] that re-reads the host's addresses when the kernel
//!   announces a change (route netlink) and periodically as a backstop;
//! - IPv6 addresses that embed a refused IPv4 address ([`embed`]):
//!   IPv4-mapped and IPv4-compatible, 6to4 (`2002:V4ADDR::/48`), Teredo
//!   (server and obfuscated client address), and the gateway's own
//!   translation prefixes (NAT64/DNS64/SIIT/TRT, RFC 6052 any length, the
//!   well-known 64:ff9b::/96 always), IVI and EAMT entries — each judged
//!   by the IPv4 address it carries, so `64:ff9b::<own IPv4>` is refused
//!   like the own address.
//!
//! Each plane has its own operator lists ([`Lists`]): `deny` entries are
//! always refused; an `allow` entry lifts a class only for the addresses
//! it covers and only when it is at least as narrow as the class (so
//! `0.0.0.0/0` never opens loopback, and an own address is lifted only by
//! itself); a non-empty `allow` list refuses everything outside it.
//!
//! When the own-address list cannot be re-read (descriptors exhausted, a
//! netlink error), the gateway fails closed: until a refresh succeeds,
//! only destinations inside a plane's `allow` list are accepted (and
//! still judged as above against the last list read).
//!
//! Each refusal is counted per plane and [`Reason`] ([`Policy::refused`],
//! the daemon's `v6gate_destination_refused_total{plane,reason}`) and
//! logged at most a few lines per interval per reason ([`RateLog`], which
//! other refusal logs share). The other shared fact of the hardening
//! rules, which client a source address belongs to (its IPv6 /64, or its
//! IPv4 address) for fair shares, is the `budget` crate's `ClientKey`.
//!
//! No unsafe code: the netlink sockets are `netsys`'s.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod class;
pub mod embed;
mod gateway;
mod policy;
pub mod ratelog;
mod watch;

pub use class::Reason;
pub use embed::{Embedding, Embeddings};
pub use gateway::{Gateway, OwnStatus, Spec};
pub use policy::{Lists, Policy, Refusal};
pub use ratelog::RateLog;
pub use watch::{Watch, DEFAULT_BACKSTOP};
