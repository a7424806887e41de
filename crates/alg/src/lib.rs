//! v6gate IMS-ALG: a SIP/SDP application-level gateway between an IPv6 and
//! an IPv4 realm (3GPP TS 23.228 IMS-ALG, the NICI TrGW paper's "ALG"
//! and the SIP-over-IPv6 paper's "proxying" scenario). It is an RFC 3261
//! stateful proxy listening in both realms: it stays in the path (Via,
//! double Record-Route per RFC 5658), forwards each request into the
//! realm of its target (IP literal, domain route, or RFC 3263 DNS), makes
//! Contact reachable from the other realm, and anchors media in the TrGW
//! (rewriting SDP `c=`, `m=`, `o=`, `a=rtcp`), including mid-call
//! handover when a terminal moves.
//!
//! Layers: [`msg`] / [`uri`] (views over the bytes), [`proxy::Alg`] (the
//! deterministic core: datagrams and time in, datagrams and timers out),
//! [`media`] (ng commands, in-process or remote), [`realm`] (routing),
//! [`runner`] (tokio UDP/TCP sockets) and [`cli`] (standalone entry).
#![forbid(unsafe_code)]

pub mod body;
pub mod cli;
pub mod config;
pub mod dialog;
pub mod dns;
mod dnswait;
pub mod emit;
pub mod media;
pub mod msg;
mod nexthop;
mod pending;
pub mod proxy;
pub mod realm;
mod request;
mod response;
pub mod runner;
pub mod shares;
pub mod state;
pub mod stats;
pub mod stream;
pub mod tcp;
mod timers;
pub mod txn;
pub mod uri;

pub use crate::config::{Config, Transport, EXAMPLE_TOML};
pub use crate::proxy::{Alg, Incoming, Transmit};
pub use crate::realm::Realm;
pub use crate::stats::Stats;
pub use crate::txn::Peer;

/// Largest SIP message (a UDP datagram's payload, RFC 3261 §18.1.1).
pub const MAX_MESSAGE: usize = 65_535;
