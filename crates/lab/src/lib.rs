//! # lab — network-namespace testbeds
//!
//! The building blocks every testbed needs: named network namespaces that
//! are always removed ([`netns::Netns`]), veth pairs between them, running a
//! command inside one, and moving the calling thread into one (so a tester
//! can open sockets in a namespace without a child process).
//!
//! Used by `v6gate lab`, `v6gate bench` and the integration tests in
//! `tests/`. Namespaces are created with `ip netns` (iproute2) so that
//! operators can inspect them with the usual tools (`ip netns exec ...`).
#![warn(missing_debug_implementations)]

pub mod netns;
