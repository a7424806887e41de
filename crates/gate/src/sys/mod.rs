//! The daemon's few system interfaces that need `unsafe`: the TUN device
//! ([`tun`]) and route netlink ([`netlink`]), shared with the tunnel
//! runners and so kept in the `netsys` crate, and io_uring ([`uring`]).
//! Everything here is a thin, audited wrapper over one or two libc calls
//! with checked lengths; the rest of the crate stays safe
//! (`#![deny(unsafe_code)]` in `lib.rs`, lifted for this module only).
#![deny(clippy::undocumented_unsafe_blocks)]

pub use netsys::{netlink, tun};
pub mod uring;
