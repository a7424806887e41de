//! The harness every bench runs on:
//!
//! - [`guard`]: a run's namespaces, work directory and child processes are
//!   removed and killed however the run ends (error, panic, Ctrl-C, kill);
//! - [`peers`]: the peers (TAYGA, rtpengine, ...) and v6gate binaries,
//!   found on PATH, with "not installed, row skipped" notes;
//! - [`cpu`]: CPU lists, pinning and real-time scheduling of threads;
//! - [`clock`]: the one clock ([`clock::now_ns`], CLOCK_MONOTONIC, shared
//!   by every namespace) and the pacer that schedules packets on it;
//! - [`latency`]: the one latency summary (HDR histogram: median, p99,
//!   p99.9, max, mean, PDV);
//! - [`fastpath`]: what a v6gate DUT's XDP fast path carried (`v6gate
//!   ctl xdp`: packets per function, passes to the slow path);
//! - [`search`]: trials and the search for the highest zero-loss load
//!   (RFC 2544 §26.1 / RFC 8219 §7.1 binary search, or doubling first).
//!
//! The testers (how packets leave and arrive) are in [`crate::tester`],
//! the reports in [`crate::report`]; the testbeds come from the `lab` crate.

pub mod clock;
pub mod cpu;
pub mod fastpath;
pub mod guard;
pub mod latency;
pub mod peers;
pub mod search;
