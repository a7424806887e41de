//! # lab — network-namespace testbeds
//!
//! - [`netns`]: named network namespaces that are always removed, veth
//!   pairs, commands and threads inside a namespace.
//! - [`topo`]: the testbeds — the papers' IPv6-only host / gateway /
//!   IPv4-only host lab ([`topo::Lab`]), the RFC 8219 tester / DUT /
//!   tester topology ([`topo::BenchTopo`]) and the IPv6 UA / media relay /
//!   IPv4 UA topology ([`topo::RelayTopo`]).
//! - [`gateconf`]: the v6gate and TAYGA configurations the testbeds and
//!   the benches generate, and what a v6gate binary offers.
//! - [`cli`]: `v6gate lab up|down|run|status|serve|client`.
//! - [`services`]: the lab's demo services (authoritative DNS, HTTP, UDP
//!   echo) and the matching clients.
//! - [`testenv`]: what a test may do here (root, peers, the test tier of
//!   `make check` / `make test`) and the one `SKIPPED` line of a test that
//!   does not run its body.
//!
//! The benchmarks and their testers live in the `bench` crate, which
//! builds on these testbeds (never the other way round).
//!
//! Namespaces are created with `ip netns` (iproute2) so that operators can
//! inspect them with the usual tools (`ip netns exec ...`).
#![warn(missing_debug_implementations)]
#![deny(unsafe_code)]

pub mod cli;
pub mod gateconf;
pub mod netns;
pub mod services;
pub mod testenv;
pub mod topo;
