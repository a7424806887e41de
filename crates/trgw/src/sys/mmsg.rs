//! Batched datagram I/O: one `recvmmsg` fills up to [`BATCH`] reusable
//! buffers; datagrams are then queued, each to its destination, and one
//! `sendmmsg` (repeated past a failing datagram) sends them straight from
//! the same buffers. The shared-socket mode reads the same way with each
//! datagram's original destination ([`Mmsg::recv_with_dst`]).

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::{from_storage, to_storage, zeroed};

/// Datagrams per system call.
pub(crate) const BATCH: usize = 32;
/// Largest datagram kept whole; longer ones are reported truncated.
pub(crate) const BUF: usize = 2048;

/// Room for the control messages of one datagram (one sockaddr_in6 with
/// its cmsghdr is 48 bytes); u64 for the alignment cmsghdr needs.
const CTRL_WORDS: usize = 16;

/// The buffers and C structures of one worker's batches.
pub(crate) struct Mmsg {
    bufs: Vec<[u8; BUF]>,
    names: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CTRL_WORDS]>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Datagrams the last `recv` got.
    got: usize,
    dsts: Vec<libc::sockaddr_storage>,
    oiov: Vec<libc::iovec>,
    omsgs: Vec<libc::mmsghdr>,
    /// Datagrams queued for the next `send`.
    queued: usize,
}

const EMPTY_IOV: libc::iovec = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };

impl Mmsg {
    pub fn new() -> Mmsg {
        Mmsg {
            bufs: vec![[0u8; BUF]; BATCH],
            names: (0..BATCH).map(|_| zeroed()).collect(),
            ctrl: vec![[0u64; CTRL_WORDS]; BATCH],
            iov: vec![EMPTY_IOV; BATCH],
            msgs: (0..BATCH).map(|_| zeroed()).collect(),
            got: 0,
            dsts: (0..BATCH).map(|_| zeroed()).collect(),
            oiov: vec![EMPTY_IOV; BATCH],
            omsgs: (0..BATCH).map(|_| zeroed()).collect(),
            queued: 0,
        }
    }

    /// Reads what `fd` (non-blocking) has, up to [`BATCH`] datagrams;
    /// returns how many (0 when none or on error). Forgets what was queued.
    pub fn recv(&mut self, fd: RawFd) -> usize {
        self.recv_batch(fd, false)
    }

    /// As [`recv`](Mmsg::recv), with each datagram's original destination
    /// ([`orig_dst`](Mmsg::orig_dst); `fd` has `IP_RECVORIGDSTADDR` or
    /// `IPV6_RECVORIGDSTADDR` on).
    pub fn recv_with_dst(&mut self, fd: RawFd) -> usize {
        self.recv_batch(fd, true)
    }

    fn recv_batch(&mut self, fd: RawFd, control: bool) -> usize {
        self.queued = 0;
        self.got = 0;
        for i in 0..BATCH {
            self.iov[i] = libc::iovec { iov_base: self.bufs[i].as_mut_ptr().cast(), iov_len: BUF };
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            if control {
                h.msg_control = self.ctrl[i].as_mut_ptr().cast();
                h.msg_controllen = CTRL_WORDS * 8;
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            h.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
        // SAFETY: every header points at this struct's buffers, names,
        // control buffers and iovecs, which live (and do not move: their
        // vectors never grow) for the call; BATCH headers are passed.
        let got = unsafe {
            libc::recvmmsg(fd, self.msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        self.got = usize::try_from(got).unwrap_or(0);
        self.got
    }

    /// Datagram `i` of the last [`recv`](Mmsg::recv): its bytes, its source
    /// and whether it was longer than [`BUF`] (truncated) or its control
    /// data did not fit.
    pub fn datagram(&self, i: usize) -> (&[u8], Option<SocketAddr>, bool) {
        if i >= self.got {
            return (&[], None, false);
        }
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(BUF);
        let truncated = m.msg_hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
        (&self.bufs[i][..len], from_storage(&self.names[i]), truncated)
    }

    /// The original destination of datagram `i` of the last
    /// [`recv_with_dst`](Mmsg::recv_with_dst) (None after a plain `recv`).
    pub fn orig_dst(&self, i: usize) -> Option<SocketAddr> {
        (i < self.got).then(|| orig_dst(&self.msgs[i].msg_hdr)).flatten()
    }

    /// Datagrams the last receive got.
    pub(super) fn received(&self) -> usize {
        self.got
    }

    /// An iovec over the bytes of datagram `i` of the last receive (for a
    /// send that puts a header before them); valid until the next receive.
    pub(super) fn payload_iov(&mut self, i: usize) -> libc::iovec {
        if i >= self.got {
            return EMPTY_IOV;
        }
        let len = (self.msgs[i].msg_len as usize).min(BUF);
        libc::iovec { iov_base: self.bufs[i].as_mut_ptr().cast(), iov_len: len }
    }

    /// Queues datagram `i` of the last receive to be sent to `dst`.
    pub fn queue(&mut self, i: usize, dst: SocketAddr) {
        if i >= self.got || self.queued >= BATCH {
            return;
        }
        let n = self.queued;
        let len = (self.msgs[i].msg_len as usize).min(BUF);
        let dlen = to_storage(dst, &mut self.dsts[n]);
        self.oiov[n] = libc::iovec { iov_base: self.bufs[i].as_mut_ptr().cast(), iov_len: len };
        let h = &mut self.omsgs[n].msg_hdr;
        h.msg_name = (&mut self.dsts[n] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = dlen;
        h.msg_iov = &mut self.oiov[n];
        h.msg_iovlen = 1;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_flags = 0;
        self.queued += 1;
    }

    /// Sends every queued datagram out of `fd`; a datagram the kernel
    /// refuses is skipped. Returns (datagrams, bytes) that failed.
    pub fn send(&mut self, fd: RawFd) -> (u64, u64) {
        let (mut sent, mut failed, mut failed_bytes) = (0usize, 0u64, 0u64);
        while sent < self.queued {
            // SAFETY: headers sent..queued point at live buffers, iovecs
            // and addresses of this struct (set by `queue`).
            let r = unsafe { libc::sendmmsg(fd, self.omsgs[sent..].as_mut_ptr(), (self.queued - sent) as u32, 0) };
            if r <= 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                failed += 1;
                failed_bytes += self.oiov[sent].iov_len as u64;
                sent += 1;
                continue;
            }
            sent += r as usize;
        }
        self.queued = 0;
        (failed, failed_bytes)
    }
}

/// The `IP_ORIGDSTADDR` / `IPV6_ORIGDSTADDR` address of a received message.
fn orig_dst(h: &libc::msghdr) -> Option<SocketAddr> {
    // SAFETY: `h` is a header recvmmsg filled: msg_control and
    // msg_controllen describe the initialised control data of a buffer of
    // this struct; CMSG_FIRSTHDR/NXTHDR stay within it.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !c.is_null() {
        // SAFETY: `c` is a non-null cmsghdr within the control buffer.
        let cm = unsafe { &*c };
        let want = match (cm.cmsg_level, cm.cmsg_type) {
            (libc::SOL_IP, libc::IP_ORIGDSTADDR) => Some(size_of::<libc::sockaddr_in>()),
            (libc::SOL_IPV6, libc::IPV6_ORIGDSTADDR) => Some(size_of::<libc::sockaddr_in6>()),
            _ => None,
        };
        if let Some(n) = want {
            // SAFETY: CMSG_LEN is a pure size computation.
            let have = cm.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            if have < n {
                return None;
            }
            let mut ss: libc::sockaddr_storage = zeroed();
            // SAFETY: the data of this cmsg holds at least `n` bytes (checked
            // above), and `n` fits in a sockaddr_storage.
            unsafe {
                std::ptr::copy_nonoverlapping(libc::CMSG_DATA(c), (&mut ss as *mut libc::sockaddr_storage).cast(), n)
            };
            return from_storage(&ss);
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        c = unsafe { libc::CMSG_NXTHDR(h, c) };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn receives_a_batch_and_sends_it_on_from_the_same_buffers() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let relay = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        relay.set_nonblocking(true).unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        let mut m = Mmsg::new();
        assert_eq!(m.recv(relay.as_raw_fd()), 0, "nothing to read");
        for p in [&b"one"[..], b"two", &[7u8; 3000]] {
            a.send_to(p, relay.local_addr().unwrap()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(m.recv(relay.as_raw_fd()), 3);
        let (d, src, trunc) = m.datagram(0);
        assert_eq!((d, src, trunc), (&b"one"[..], Some(a.local_addr().unwrap()), false));
        let (d, _, trunc) = m.datagram(2);
        assert!(trunc && d.len() == BUF, "the 3000-byte datagram is reported truncated");
        assert_eq!(m.datagram(3).0.len(), 0, "past what was received");
        m.queue(1, b.local_addr().unwrap());
        m.queue(0, b.local_addr().unwrap());
        assert_eq!(m.send(relay.as_raw_fd()), (0, 0));
        let mut buf = [0u8; 64];
        for want in [&b"two"[..], b"one"] {
            let (n, from) = b.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (want, relay.local_addr().unwrap()));
        }
        // A destination of the other family fails and is counted.
        m.recv(relay.as_raw_fd());
        a.send_to(b"x", relay.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(m.recv(relay.as_raw_fd()), 1);
        m.queue(0, "[2001:db8::1]:9".parse().unwrap());
        assert_eq!(m.send(relay.as_raw_fd()), (1, 1));
    }
}
