//! The daemon's few system interfaces that need `unsafe`: the TUN device
//! ([`tun`]) and route netlink ([`netlink`]). Everything here is a thin,
//! audited wrapper over one or two libc calls with checked lengths; the
//! rest of the crate stays safe (`#![deny(unsafe_code)]` in `lib.rs`, lifted
//! for this module only).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod netlink;
pub mod tun;
pub mod uring;

use std::io;

/// `Err(last_os_error)` when a libc call returned a negative value.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
