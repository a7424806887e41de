//! # netsys — TUN devices and route netlink
//!
//! The few system interfaces that need `unsafe` and that more than one
//! crate drives: the TUN device ([`tun`]: multiqueue `/dev/net/tun`
//! queues) and route netlink ([`netlink`]: link up, addresses, routes),
//! and one device set up from them ([`device`]); and the CPU wake-up
//! latency request of the PM QoS device ([`cpu_latency`], safe code).
//! The daemon (`gate`), the tunnel runners (`tunnel`), the softwire
//! runners (`softwire`) and the TRT relay (`trt`) use them, so they live
//! here once. Everything is a thin, audited wrapper over one or
//! two libc calls with checked lengths; every `unsafe` block carries a
//! SAFETY comment.
//!
//! The whole crate is a `sys` module in the workspace's sense (unsafe code
//! only in `sys` modules): it is the one crate that does not say
//! `#![deny(unsafe_code)]`, and it holds nothing but these wrappers, so
//! its callers (`gate::sys` re-exports it, `tunnel::sys` uses it) stay
//! safe code.
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_debug_implementations)]

pub mod cpu_latency;
pub mod device;
pub mod netlink;
pub mod tun;

pub use device::{wait, Device, DeviceSpec};

use core::fmt;
use std::io;
use std::net::IpAddr;

/// `Err(last_os_error)` when a libc call returned a negative value.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An interface address with its prefix length (host bits may be set),
/// e.g. `192.0.2.1/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length (32/128 when written without one).
    pub len: u8,
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}
