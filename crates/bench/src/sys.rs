//! The bench's system calls: the clock, absolute sleeps, real-time
//! scheduling, `AF_PACKET` sockets (senders, receivers and timestamped
//! capture taps) and batched `sendmmsg`/`recvmmsg`. The
//! only `unsafe` code of the crate is here, each block with its SAFETY
//! argument; everything above gets safe functions.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use socket2::SockAddr;

/// Most messages one [`send_batch`] or [`recv_batch`] call handles (their
/// headers live on the stack).
pub const MAX_BATCH: usize = 64;

/// CLOCK_MONOTONIC in nanoseconds: the one clock of every tester (the same
/// in every network namespace of the machine, so a timestamp written by a
/// sender in one namespace is compared with a receiver's in another).
pub fn now_ns() -> u64 {
    xdp::sys::monotonic_ns()
}

/// Sleeps until [`now_ns`] reaches `t` (returns at once when it has).
pub fn sleep_until_ns(t: u64) {
    let ts = libc::timespec { tv_sec: (t / 1_000_000_000) as libc::time_t, tv_nsec: (t % 1_000_000_000) as _ };
    // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// Makes the calling thread SCHED_FIFO at `priority`.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    set_fifo_of(0, priority)
}

/// Makes thread `tid` (0: the calling thread) SCHED_FIFO at `priority`.
pub fn set_fifo_of(tid: i32, priority: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: priority };
    // SAFETY: a plain system call with a valid parameter; a bad tid is an error return.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn setsockopt_int(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, opt, (&v as *const libc::c_int).cast(), size_of::<libc::c_int>() as _)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Opens an `AF_PACKET` raw socket bound to interface `ifname` of the
/// calling thread's namespace. `rx`: receives every incoming frame (not the
/// outgoing ones), with a 64 MiB buffer and a 10 ms receive timeout;
/// otherwise it only sends, bypassing the qdisc.
pub fn packet_socket(ifname: &str, rx: bool) -> io::Result<OwnedFd> {
    let cname = CString::new(ifname).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: a NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {ifname} in this namespace")));
    }
    let proto = if rx { (libc::ETH_P_ALL as u16).to_be() } else { 0 };
    // SAFETY: plain socket(2); the descriptor is owned right below.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto)) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_ll is plain data; all zero is a valid start.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: binds to a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as _)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if rx {
        setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20)
            .or_else(|_| setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 64 << 20))?;
        // Older kernels lack it; outgoing frames are then filtered by the decoder.
        let _ = setsockopt_int(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        let tv = libc::timeval { tv_sec: 0, tv_usec: 10_000 };
        // SAFETY: passes a pointer to a live timeval and its size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as _,
            );
        }
    } else {
        let _ = setsockopt_int(&fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
        let _ = setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 16 << 20);
    }
    Ok(fd)
}

/// CLOCK_REALTIME in nanoseconds: the clock of the kernel's packet
/// timestamps (`SO_TIMESTAMPNS`), for comparing them with user-space
/// times (only there: the testers' clock is [`now_ns`]).
pub fn realtime_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into a valid, writable pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    timespec_ns(&ts)
}

/// A timespec in ns (`time_t` is 32 bits on some targets).
#[allow(clippy::unnecessary_cast)]
fn timespec_ns(ts: &libc::timespec) -> i64 {
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

/// Opens a capture (tap) socket: an `AF_PACKET` raw socket on every
/// interface of the calling thread's namespace, incoming frames and, with
/// `outgoing`, outgoing ones (without, the kernel skips the tap on the
/// way out, and its clone of every transmitted frame), passing
/// only the frames the classic BPF program `filter` accepts, each with its
/// kernel timestamp (`SO_TIMESTAMPNS`: CLOCK_REALTIME, taken when the
/// frame was received, or handed to the taps on its way out). Non-blocking,
/// with a 4 MiB receive buffer. The filter is attached before the socket
/// is bound to every protocol, so no frame slips past it.
pub fn tap_socket(filter: &[libc::sock_filter], outgoing: bool) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) with protocol 0 (receives nothing until bound);
    // the descriptor is owned right below.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh, valid descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len =
        u16::try_from(filter.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    let prog = libc::sock_fprog { len, filter: filter.as_ptr().cast_mut() };
    // SAFETY: passes a pointer to a live sock_fprog over a live instruction
    // slice, and its size; the kernel copies the program.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as _,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    if !outgoing {
        setsockopt_int(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
    }
    setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 4 << 20)
        .or_else(|_| setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20))?;
    // SAFETY: sockaddr_ll is plain data; all zero is a valid start.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    // ifindex 0: every interface.
    // SAFETY: binds to a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as _)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// One frame of a [`tap_socket`]: where and when the kernel saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tapped {
    /// Bytes copied into the buffer (the filter may have cut the frame).
    pub len: usize,
    /// The kernel timestamp, CLOCK_REALTIME ns (0 when none came).
    pub t_ns: i64,
    /// The interface.
    pub ifindex: i32,
    /// Its link type (`ARPHRD_*`).
    pub hatype: u16,
    /// `PACKET_HOST`, `PACKET_OUTGOING`, ...
    pub pkttype: u8,
}

/// Receives one frame of a [`tap_socket`] into `buf` without blocking;
/// `None` when none is queued.
pub fn tap_recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<Tapped>> {
    // SAFETY: sockaddr_ll is plain data; all zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // Room for one cmsg of a timespec (8-byte aligned).
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_ll>() as _;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    // SAFETY: the header points at a live address, iovec over a live
    // writable buffer and control buffer, all outliving the call.
    let r = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let mut t_ns = 0;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled,
    // bounded by msg_controllen; the timespec is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                t_ns = timespec_ns(&ts);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some(Tapped {
        len: r as usize,
        t_ns,
        ifindex: sll.sll_ifindex,
        hatype: sll.sll_hatype,
        pkttype: sll.sll_pkttype,
    }))
}

/// The frames a [`tap_socket`] dropped (its buffer full) since the last
/// call (`PACKET_STATISTICS`, which the kernel resets on every read).
pub fn tap_drops(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: tpacket_stats is plain data; all zero is valid.
    let mut st: libc::tpacket_stats = unsafe { zeroed() };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live, writable tpacket_stats and its size.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.tp_drops)
}

/// One `sendmmsg` of `bufs[..n]` (at most [`MAX_BATCH`]); `to[i]`, when
/// given, is the destination of `bufs[i]` (unconnected sockets). Returns
/// how many messages the kernel took (at least one) or the error of the
/// first.
pub fn send_batch<B: AsRef<[u8]>>(fd: BorrowedFd<'_>, bufs: &[B], to: Option<&[&SockAddr]>) -> io::Result<usize> {
    let n = bufs.len().min(MAX_BATCH).min(to.map_or(usize::MAX, <[_]>::len));
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain data; all zero is valid.
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    for i in 0..n {
        let b = bufs[i].as_ref();
        // sendmmsg only reads through iov_base.
        iov[i] = libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() };
        msgs[i].msg_hdr.msg_iov = &mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        if let Some(to) = to {
            msgs[i].msg_hdr.msg_name = to[i].as_ptr() as *mut libc::c_void;
            msgs[i].msg_hdr.msg_namelen = to[i].len();
        }
    }
    // SAFETY: the first `n` headers point at live iovecs over live buffers
    // and at live addresses, all outliving the call.
    let r = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// One `recvmmsg` into `bufs` (at most [`MAX_BATCH`]); `lens[i]` gets each
/// message's length. `wait`: block for the first message (up to the
/// socket's receive timeout); otherwise never block. Returns 0 when
/// nothing came (timeout, would block, interrupted).
pub fn recv_batch<B: AsMut<[u8]>>(
    fd: BorrowedFd<'_>,
    bufs: &mut [B],
    lens: &mut [usize],
    wait: bool,
) -> io::Result<usize> {
    let n = bufs.len().min(lens.len()).min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: iovec and mmsghdr are plain data; all zero is valid.
    let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
    for (i, b) in bufs[..n].iter_mut().enumerate() {
        let b = b.as_mut();
        iov[i] = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() };
        msgs[i].msg_hdr.msg_iov = &mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
    // SAFETY: the first `n` headers point at live iovecs over live,
    // writable buffers that outlive the call.
    let r =
        unsafe { libc::recvmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, flags, std::ptr::null_mut()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    for (l, m) in lens.iter_mut().zip(&msgs[..r as usize]) {
        *l = m.msg_len as usize;
    }
    Ok(r as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn clock_moves_forward_and_sleeps_until() {
        let a = now_ns();
        sleep_until_ns(a + 2_000_000);
        assert!(now_ns() >= a + 2_000_000);
        sleep_until_ns(0); // in the past: returns at once
    }

    #[test]
    fn batches_go_to_their_destinations_and_come_back_with_lengths() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx1 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx2 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (a1, a2) = (SockAddr::from(rx1.local_addr().unwrap()), SockAddr::from(rx2.local_addr().unwrap()));
        let bufs: [&[u8]; 3] = [b"one", b"three", b"four"];
        let n = send_batch(tx.as_fd(), &bufs, Some(&[&a1, &a2, &a1])).unwrap();
        assert_eq!(n, 3);
        rx1.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let mut got = vec![[0u8; 16]; 4];
        let mut lens = [0usize; 4];
        let mut total = 0;
        let mut seen = Vec::new();
        while total < 2 {
            let k = recv_batch(rx1.as_fd(), &mut got, &mut lens, true).unwrap();
            assert!(k > 0, "timed out");
            seen.extend(got[..k].iter().zip(&lens).map(|(b, &l)| b[..l].to_vec()));
            total += k;
        }
        assert_eq!(seen, vec![b"one".to_vec(), b"four".to_vec()]);
        rx2.set_nonblocking(true).unwrap();
        let k = recv_batch(rx2.as_fd(), &mut got, &mut lens, false).unwrap();
        assert_eq!((k, &got[0][..lens[0]]), (1, &b"three"[..]));
        assert_eq!(recv_batch(rx2.as_fd(), &mut got, &mut lens, false).unwrap(), 0, "nothing more: no blocking");
    }

    #[test]
    fn packet_socket_needs_an_existing_interface() {
        let e = packet_socket("no-such-if0", true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
