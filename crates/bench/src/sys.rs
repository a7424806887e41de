//! The bench's system calls: the clock, absolute sleeps, real-time
//! scheduling, `AF_PACKET` sockets and batched `sendmmsg`/`recvmmsg`. The
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
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into a valid, writable pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
