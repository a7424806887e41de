//! The relay's system calls that the safe wrappers (std, socket2, nix) do
//! not cover: `IPV6_TRANSPARENT` (nix 0.29 has only the IPv4 option), and
//! zero-copy moves with `splice(2)` through a pipe (nix's safe wrapper).
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

/// `IPV6_TRANSPARENT` from `<linux/in6.h>`.
const IPV6_TRANSPARENT: libc::c_int = 75;

/// Let `s` accept traffic tproxy hands it for foreign addresses and bind to
/// them (CAP_NET_ADMIN).
pub fn set_ipv6_transparent(s: &impl AsRawFd) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid fd, level, option and a pointer to a
    // c_int that lives across the call, with its exact size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IPV6,
            IPV6_TRANSPARENT,
            (&one as *const libc::c_int).cast(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A pipe for splicing.
#[derive(Debug)]
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

/// Bytes moved per splice call; the pipe is grown to hold them (the
/// default 64 KiB pipe halves the throughput of a fast path).
const CHUNK: usize = 1 << 20;

impl Pipe {
    /// A new pipe (close-on-exec).
    pub fn new() -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        // Best effort: an unprivileged process is capped by /proc/sys/fs/pipe-max-size.
        let _ = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(CHUNK as libc::c_int));
        Ok(Pipe { r, w })
    }

    /// Move everything from `from` to `to` through the pipe, without
    /// copying through user space, until `from` reaches end of file.
    /// Returns the bytes moved. Blocking sockets.
    pub fn copy(&self, from: &impl AsFd, to: &impl AsFd) -> io::Result<u64> {
        let mut total = 0u64;
        loop {
            let n = match splice(
                from,
                None,
                &self.w,
                None,
                CHUNK,
                SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_MORE,
            ) {
                Ok(0) => return Ok(total),
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut left = n;
            while left > 0 {
                // No SPLICE_F_MORE here: towards a socket it is MSG_MORE,
                // which corks a small write (one byte of a request) for 200 ms.
                match splice(&self.r, None, to, None, left, SpliceFFlags::SPLICE_F_MOVE) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(m) => left -= m,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            total += n as u64;
        }
    }
}
