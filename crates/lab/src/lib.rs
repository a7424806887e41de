//! # lab — network-namespace testbeds and the translation benchmark
//!
//! - [`netns`]: named network namespaces that are always removed, veth
//!   pairs, commands and threads inside a namespace.
//! - [`topo`]: the testbeds — the papers' IPv6-only host / gateway /
//!   IPv4-only host lab ([`topo::Lab`]) and the RFC 8219 tester / DUT /
//!   tester topology ([`topo::BenchTopo`]).
//! - [`cli`]: `v6gate lab up|down|run|status|serve|client`.
//! - [`services`]: the lab's demo services (authoritative DNS, HTTP, UDP
//!   echo) and the matching clients.
//! - [`bench_xlat`]: `v6gate bench xlat` (RFC 8219 / RFC 2544), built on
//!   [`pkt`] (test frames), [`tester`] (AF_PACKET trials), [`search`]
//!   (binary search for the zero-loss rate) and [`report`] (latency histograms, Markdown tables, SVG line plots, shared with `v6gate bench trgw`).
//!
//! Namespaces are created with `ip netns` (iproute2) so that operators can
//! inspect them with the usual tools (`ip netns exec ...`).
#![warn(missing_debug_implementations)]

pub mod bench_xlat;
pub mod cli;
pub mod netns;
pub mod pkt;
pub mod report;
pub mod search;
pub mod services;
pub mod tester;
pub mod topo;
