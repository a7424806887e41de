//! # xdp — the v6gate fast path
//!
//! XDP programs in C (`bpf/*.bpf.c`, built by this crate's build.rs with
//! clang) that serve the common case of SIIT, established NAT64 sessions
//! and the TrGW media relay straight from BPF maps, and pass everything
//! else (`XDP_PASS`) to the slow path unchanged, counting why. This crate
//! is the userspace side: the map contract ([`types`]), the conversion
//! from the slow path's configuration ([`config`]) and the loader
//! ([`FastPath`]: load, fill maps, attach through bpf_link, read counters,
//! and `BPF_PROG_TEST_RUN` for the differential test and the cost bench).
//!
//! The BPF programs are loaded with aya (pure Rust; see docs/xdp.md for
//! why). [`xsk`] holds the AF_XDP transmit sockets of the bench's
//! `--tester afxdp`. Unsafe code lives only in [`sys`].
#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod b4;
pub mod config;
pub mod dslite;
mod loader;
pub mod nat64;
pub mod null;
mod portblock;
mod route;
mod single;
pub mod sklookup;
pub mod sockmap;
pub mod softwire;
#[allow(unsafe_code)]
pub mod sys;
pub mod teredo;
pub mod tester;
pub mod trgw;
pub mod types;
pub mod xsk;
pub mod xskgen;

pub use loader::{action, Attachment, FastPath, Limits, Mode, TestResult};
pub use portblock::RingWatch;
pub use route::FibLookup;

use core::fmt;

/// Errors from the fast path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// BPF cannot be used here: the kernel refused to load the object or a
    /// program, or `bpf()` is not available (the message says why).
    Unavailable(String),
    /// A BPF map or program operation failed.
    Bpf(String),
    /// The named map is full: the entry stays on the slow path.
    MapFull(&'static str),
    /// A configuration the fast path cannot use.
    Config(String),
    /// Attaching to or detaching from an interface failed.
    Interface(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(m) => write!(f, "XDP unavailable: {m}"),
            Error::Bpf(m) => write!(f, "BPF: {m}"),
            Error::MapFull(m) => write!(f, "BPF map {m} is full"),
            Error::Config(m) => write!(f, "xdp configuration: {m}"),
            Error::Interface(m) => write!(f, "xdp interface: {m}"),
        }
    }
}

impl std::error::Error for Error {}
