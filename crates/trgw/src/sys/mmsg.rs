//! Batched datagram I/O: one `recvmmsg` fills up to [`BATCH`] reusable
//! buffers; datagrams are then queued, each to its destination, and one
//! `sendmmsg` (repeated past a failing datagram) sends them straight from
//! the same buffers.

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::{from_storage, to_storage, zeroed};

/// Datagrams per system call.
pub(crate) const BATCH: usize = 32;
/// Largest datagram kept whole; longer ones are reported truncated.
pub(crate) const BUF: usize = 2048;

/// The buffers and C structures of one worker's batches.
pub(crate) struct Mmsg {
    bufs: Vec<[u8; BUF]>,
    names: Vec<libc::sockaddr_storage>,
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
        self.queued = 0;
        self.got = 0;
        for i in 0..BATCH {
            self.iov[i] = libc::iovec { iov_base: self.bufs[i].as_mut_ptr().cast(), iov_len: BUF };
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
        // SAFETY: every header points at this struct's buffers, names and
        // iovecs, which live (and do not move: their vectors never grow)
        // for the call; BATCH headers are passed.
        let got = unsafe {
            libc::recvmmsg(fd, self.msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        self.got = usize::try_from(got).unwrap_or(0);
        self.got
    }

    /// Datagram `i` of the last [`recv`](Mmsg::recv): its bytes, its source
    /// and whether it was longer than [`BUF`] (truncated).
    pub fn datagram(&self, i: usize) -> (&[u8], Option<SocketAddr>, bool) {
        if i >= self.got {
            return (&[], None, false);
        }
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(BUF);
        let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        (&self.bufs[i][..len], from_storage(&self.names[i]), truncated)
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
