//! # bench — every v6gate benchmark and tester
//!
//! The papers' experiments, run in network namespaces on one machine
//! (testbeds from the `lab` crate) against v6gate and the peers operators
//! use today, with the tester's own ceiling measured in the same run:
//!
//! - [`xlat`]: `v6gate bench xlat`, RFC 8219 / RFC 2544 translation
//!   benchmarks (SIIT, NAT64) against TAYGA and kernel forwarding.
//! - [`trgw`]: `v6gate bench trgw`, the NICI TrGW experiment (G.711 RTP
//!   streams through a media relay set up by the ng protocol; loss and
//!   latency against concurrent calls; maximum zero-loss calls).
//! - [`transition`]: `v6gate bench transition`, the NAT-PT / TRT / DSTM
//!   comparison paper's throughput, session initiation and delay for
//!   native IPv4, NAT64, NAT-PT, TRT, DS-Lite, lw4o6, DSTM and socat.
//!
//! - [`sip`]: `v6gate bench sip`, the SIP-over-IPv6 paper's call setup
//!   time through v6gate's IMS-ALG+TrGW and Kamailio+rtpengine (SIPp
//!   calls, IPv6 caller, IPv4 callee), the highest call rate with no
//!   failed call, and a mid-call handover's media gap.
//! - [`tunnel`]: `v6gate bench tunnel`, the mobility paper's Teredo relay
//!   latency (Table I) and zero-loss throughput against Miredo, and the
//!   SIP-over-IPv6 paper's RTP one-way delay through 6to4 and Teredo.
//!
//! All run on one harness ([`harness`]: run guard, peers, CPU placement,
//! clock and pacing, latency summary, zero-loss search), one set of
//! testers ([`tester`]: the shared per-packet judgement and the backends
//! that move packets) and one report module ([`report`]: output
//! directory, JSON, Markdown, SVG). [`ng`] is a small rtpengine ng client
//! on the relay's own bencode, also used by the Kamailio interop test.
//!
//! Unsafe code (clock, batched socket calls, `AF_PACKET`) is confined to
//! [`sys`].
#![warn(missing_debug_implementations)]
#![deny(unsafe_code)]

/// A bench's arguments (its `clap::Args`, flattened into `v6gate bench
/// NAME`) parsed from `argv`, the program's name first: for tests and
/// tools that build a run from words.
pub fn parse_args<T: clap::Args>(argv: &[&str]) -> T {
    #[derive(clap::Parser)]
    struct W<T: clap::Args> {
        #[command(flatten)]
        a: T,
    }
    <W<T> as clap::Parser>::parse_from(argv).a
}

pub mod harness;
pub mod ng;
pub mod report;
pub mod sip;
pub mod sys;
pub mod tester;
pub mod transition;
pub mod trgw;
pub mod tunnel;
pub mod xlat;
