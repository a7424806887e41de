//! v6gate TrGW: the IMS transition gateway media relay.
//!
//! RTP and RTCP are relayed between two legs per media stream, each leg on
//! its own local port, whatever the address families of the two sides
//! (IPv6 <-> IPv4 is the point, per the NICI-TrGW study). Sessions are set
//! up by rtpengine's ng protocol ([`ng`]) or the rtpproxy protocol
//! ([`rtpproxy`]), so Kamailio's `rtpengine` and `rtpproxy` modules drive it
//! unchanged. [`Relay::start`] runs it: one worker thread per core does the
//! packet I/O, looking streams up in O(1) from the flat [`table`].
//!
//! Unsafe code (epoll, batched socket calls, the io_uring memory shared
//! with the kernel) is confined to the private `sys` module.
#![deny(unsafe_code)]

pub mod bencode;
pub mod cli;
pub mod config;
pub mod cookie_cache;
pub mod core;
pub mod ng;
pub mod policy;
pub mod ports;
pub mod relay;
pub mod rtp;
pub mod rtpproxy;
pub mod sdp;
mod shared;
#[allow(unsafe_code)]
mod sys;
pub mod table;
mod uring;
mod worker;

pub use crate::config::{Config, IoMode, Latching, SocketMode, EXAMPLE_TOML};
pub use crate::relay::{Relay, RelayHandle, RelayStats, SharedStats};
