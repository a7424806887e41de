//! # bench — v6gate's benchmarks
//!
//! The papers' experiments, run in network namespaces on one machine
//! against v6gate and the peers operators use today, with the tester's own
//! ceiling measured in the same run:
//!
//! - [`trgw`]: `v6gate bench trgw`, the NICI TrGW experiment (G.711 RTP
//!   streams through a media relay set up by the ng protocol; loss and
//!   latency against concurrent calls; maximum zero-loss calls).
//! - [`report`]: shared by every bench: latency histograms and percentiles,
//!   JSON and Markdown helpers, SVG line plots.
//! - [`ng`]: a small rtpengine ng-protocol client (bencode over UDP), also
//!   used by the Kamailio interop test to query the relay.
//! - [`probe`]: the RTP probe packet the TrGW tester sends and decodes.
#![warn(missing_debug_implementations)]

pub mod ng;
pub mod probe;
pub use lab::report;
mod tester;
pub mod trgw;
