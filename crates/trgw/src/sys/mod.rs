//! The relay's system calls that need `unsafe`, each a thin wrapper with a
//! `SAFETY:` comment; the rest of the crate is safe code
//! (`#![deny(unsafe_code)]` in `lib.rs`, lifted for this module only).
//!
//! - [`epoll`]: the epoll set and the eventfd that wakes a worker (nix's
//!   safe wrappers, kept here with the rest of the relay's system calls);
//! - [`mmsg`]: batched `recvmmsg`/`sendmmsg` over reusable buffers;
//! - [`shared`]: the same for the shared-socket media mode (original
//!   destinations in, raw sockets with our IP/UDP header out);
//! - [`uring`]: the io_uring engine (a provided-buffer ring shared with
//!   the kernel, multishot receives and zero-copy sends);
//! - socket address conversions to and from `sockaddr_storage`.
#![deny(clippy::undocumented_unsafe_blocks)]

pub(crate) mod epoll;
pub(crate) mod mmsg;
pub(crate) mod shared;
pub(crate) mod uring;

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// An all-zero C structure (`sockaddr_storage`, `msghdr`, `epoll_event`,
/// `mmsghdr`): for these plain structs of integers and pointers, zero is a
/// valid value.
pub(crate) fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `Zeroable` is implemented only for C structs of integers and
    // raw pointers, for which the all-zero bit pattern is valid.
    unsafe { std::mem::zeroed() }
}

/// C structures whose all-zero value is valid.
pub(crate) trait Zeroable {}
impl Zeroable for libc::sockaddr_storage {}
impl Zeroable for libc::msghdr {}
impl Zeroable for libc::mmsghdr {}

/// Writes `a` into `out`; returns the length of the address written.
pub(crate) fn to_storage(a: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large enough and suitably aligned
            // for a sockaddr_in.
            let s = unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large enough and suitably aligned
            // for a sockaddr_in6.
            let s = unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_flowinfo = 0;
            s.sin6_addr = libc::in6_addr { s6_addr: v6.ip().octets() };
            s.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The socket address in `s`, if its family is IPv4 or IPv6.
pub(crate) fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family field says the kernel wrote a sockaddr_in,
            // which fits in and is aligned by sockaddr_storage.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for a sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), 0, a.sin6_scope_id)))
        }
        _ => None,
    }
}

/// The socket address in the first `bytes.len()` bytes of a
/// `sockaddr_storage` (e.g. the name part of an io_uring `RecvMsgOut`).
pub(crate) fn from_bytes(bytes: &[u8]) -> Option<SocketAddr> {
    let mut ss: libc::sockaddr_storage = zeroed();
    let n = bytes.len().min(size_of::<libc::sockaddr_storage>());
    // SAFETY: copies at most sizeof(sockaddr_storage) bytes into it.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut ss as *mut libc::sockaddr_storage).cast(), n) };
    from_storage(&ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_sockaddr_storage() {
        for a in ["192.0.2.7:5004", "[2001:db8::7]:5006", "[fe80::1%3]:40000", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut ss = zeroed();
            let len = to_storage(a, &mut ss);
            let want = if a.is_ipv4() { size_of::<libc::sockaddr_in>() } else { size_of::<libc::sockaddr_in6>() };
            assert_eq!(len as usize, want);
            assert_eq!(from_storage(&ss), Some(a));
            // SAFETY: viewing `len` initialised bytes of the storage.
            let bytes = unsafe {
                std::slice::from_raw_parts((&ss as *const libc::sockaddr_storage).cast::<u8>(), len as usize)
            };
            assert_eq!(from_bytes(bytes), Some(a));
        }
        assert_eq!(from_storage(&zeroed()), None, "AF_UNSPEC");
        assert_eq!(from_bytes(&[]), None);
    }
}
