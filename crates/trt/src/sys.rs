//! The relay's system calls that the safe wrappers (std, socket2, nix) do
//! not cover: `IPV6_TRANSPARENT` (nix 0.29 has only the IPv4 option), and
//! zero-copy moves with `splice(2)` through a pipe (nix's safe wrapper),
//! blocking or not.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

use crate::tcp::Idle;

/// `IPV6_TRANSPARENT` from `<linux/in6.h>`.
const IPV6_TRANSPARENT: libc::c_int = 75;

/// Let `s` accept traffic tproxy hands it for foreign addresses and bind to
/// them (CAP_NET_ADMIN).
pub fn set_ipv6_transparent(s: &impl AsRawFd) -> io::Result<()> {
    set_int(s, libc::IPPROTO_IPV6, IPV6_TRANSPARENT, 1)
}

/// Make the connect of the TCP socket `s` hold its handshake's last ACK
/// for the first bytes sent (`TCP_DEFER_ACCEPT` on a connecting socket:
/// the kernel then delays that ACK as it does with a write pending, for at
/// most its delayed-ACK maximum, 200 ms): the server's accept and the
/// first bytes come in one segment. [`send_ack`] sends it alone.
pub fn hold_handshake_ack(s: &impl AsRawFd) -> io::Result<()> {
    set_int(s, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, 1)
}

/// Send the ACK that the connected TCP socket `s` holds, now
/// (`TCP_QUICKACK`: a scheduled ACK is pushed out).
pub fn send_ack(s: &impl AsRawFd) -> io::Result<()> {
    set_int(s, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
}

/// `setsockopt` of an int option.
fn set_int(s: &impl AsRawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt with a valid fd, level, option and a pointer to a
    // c_int that lives across the call, with its exact size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
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
pub const CHUNK: usize = 1 << 20;

impl Pipe {
    /// A new pipe (close-on-exec) for the blocking [`Pipe::copy`].
    pub fn new() -> io::Result<Pipe> {
        Pipe::with_flags(OFlag::O_CLOEXEC)
    }

    /// A new non-blocking pipe (close-on-exec) for [`Pipe::fill`] and
    /// [`Pipe::drain`].
    pub fn nonblocking() -> io::Result<Pipe> {
        Pipe::with_flags(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
    }

    fn with_flags(flags: OFlag) -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(flags)?;
        // Best effort: an unprivileged process is capped by /proc/sys/fs/pipe-max-size.
        let _ = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(CHUNK as libc::c_int));
        Ok(Pipe { r, w })
    }

    /// Move everything from `from` to `to` through the pipe, without
    /// copying through user space, until `from` reaches end of file.
    /// Returns the bytes moved. Blocking sockets; with `idle`, sockets
    /// whose receive and send timeouts are set ([`Idle::arm`]): a splice
    /// that times out asks `idle` whether the pair (both directions, which
    /// share it) moved a byte within its timeout, and gives up with
    /// `TimedOut` when it did not.
    pub fn copy(&self, from: &impl AsFd, to: &impl AsFd, idle: Option<&Idle>) -> io::Result<u64> {
        let mut total = 0u64;
        let timed_out = |e: nix::errno::Errno| -> io::Result<()> {
            match idle {
                Some(i) if e == nix::errno::Errno::EAGAIN && !i.expired() => Ok(()),
                Some(_) if e == nix::errno::Errno::EAGAIN => Err(io::ErrorKind::TimedOut.into()),
                _ => Err(e.into()),
            }
        };
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
                Err(e) => {
                    timed_out(e)?;
                    continue;
                }
            };
            let mut left = n;
            while left > 0 {
                // No SPLICE_F_MORE (see `drain`).
                match splice(&self.r, None, to, None, left, SpliceFFlags::SPLICE_F_MOVE) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(m) => left -= m,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => timed_out(e)?,
                }
            }
            if let Some(i) = idle {
                i.touch();
            }
            total += n as u64;
        }
    }

    /// One splice from the non-blocking socket `from` into the pipe, at
    /// most `max` bytes: the bytes moved, 0 at end of file, `WouldBlock`
    /// when `from` has nothing (or the pipe is full).
    pub fn fill(&self, from: &impl AsFd, max: usize) -> io::Result<usize> {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        Ok(splice(from, None, &self.w, None, max, flags)?)
    }

    /// One splice of at most `len` bytes from the pipe to the non-blocking
    /// socket `to`: the bytes moved, `WouldBlock` when `to` has no room
    /// (or the pipe is empty). No
    /// `SPLICE_F_MORE`: towards a socket it is `MSG_MORE`, which corks a
    /// small write (one byte of a request) for 200 ms.
    pub fn drain(&self, to: &impl AsFd, len: usize) -> io::Result<usize> {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        Ok(splice(&self.r, None, to, None, len, flags)?)
    }
}

/// Run the socket's data-ready callback now (`SO_RCVLOWAT` = 1 calls
/// `tcp_data_ready`): bytes that were queued before the socket entered the
/// sockhash go through its verdict program instead of waiting for the
/// next segment.
pub fn kick(s: &impl AsRawFd) -> io::Result<()> {
    set_int(s, libc::SOL_SOCKET, libc::SO_RCVLOWAT, 1)
}

/// Bytes handed to the TCP socket `s` for sending so far, up to a constant
/// (the SYN may be counted): acknowledged bytes plus the send queue. Read
/// in that order, a concurrent acknowledgement can only make the sum
/// smaller, never larger than the truth.
pub fn sent_total(s: &impl AsRawFd) -> io::Result<u64> {
    // SAFETY: tcp_info is plain integers; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt with a valid fd, writing at most `len` bytes into
    // `info`, which lives across the call; `len` is updated by the kernel.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < core::mem::offset_of!(libc::tcp_info, tcpi_bytes_acked) + 8 {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_INFO has no tcpi_bytes_acked (kernel < 4.1)"));
    }
    let mut outq: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (= TIOCOUTQ) writes one c_int through the pointer,
    // which points at a live c_int.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut outq as *mut libc::c_int) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info.tcpi_bytes_acked + outq.max(0) as u64)
}

/// Set the TCP congestion control of `s` (`TCP_CONGESTION`). A listening
/// socket's is inherited by the connections it accepts.
pub fn set_congestion(s: &impl AsFd, name: &str) -> io::Result<()> {
    socket2::SockRef::from(s).set_tcp_congestion(name.as_bytes())
}

/// The TCP congestion control of `s` (`TCP_CONGESTION`; the kernel pads
/// the name with NULs).
pub fn congestion(s: &impl AsFd) -> io::Result<String> {
    let name = socket2::SockRef::from(s).tcp_congestion()?;
    let n = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..n]).into_owned())
}

/// The congestion controls of this process's TCP sockets connected to
/// `peer` (tests: the relay's sockets are the loop's own).
#[cfg(test)]
pub fn congestion_of_peers(peer: std::net::SocketAddr) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").into_iter().flatten().flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        // SAFETY: the descriptor is only read through (getpeername,
        // getsockopt), never closed here; one closed meanwhile by another
        // thread makes the calls fail.
        let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let s = socket2::SockRef::from(&b);
        if s.peer_addr().ok().and_then(|a| a.as_socket()) == Some(peer) {
            if let Ok(cc) = congestion(&b) {
                found.push(cc);
            }
        }
    }
    found
}
