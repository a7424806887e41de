//! Batched datagram I/O of the shared-socket media mode
//! (`[trgw] sockets = "shared"`, see `crate::shared`): one `recvmmsg` on a
//! shared socket reads up to [`BATCH`] datagrams with their original
//! destination (the `IP_ORIGDSTADDR` / `IPV6_ORIGDSTADDR` control message,
//! so the leg is known); each is then queued with an IP and UDP header
//! built in front of its payload and sent from a raw socket of its family
//! (`IPPROTO_RAW`: the header is ours), runs of one family per `sendmmsg`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::mmsg::{Mmsg, BATCH};
use super::{to_storage, zeroed};
use crate::shared::{headers, HDR_MAX};

const EMPTY_IOV: libc::iovec = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };

/// The receive batch and the raw-send queue of one worker's shared sockets.
pub(crate) struct SharedMmsg {
    rx: Mmsg,
    hdrs: Vec<[u8; HDR_MAX]>,
    dsts: Vec<libc::sockaddr_storage>,
    oiov: Vec<[libc::iovec; 2]>,
    omsgs: Vec<libc::mmsghdr>,
    /// Per queued datagram: IPv6 or not, and the received datagram it is.
    ofam: Vec<(bool, usize)>,
    queued: usize,
}

impl SharedMmsg {
    pub fn new() -> SharedMmsg {
        SharedMmsg {
            rx: Mmsg::new(),
            hdrs: vec![[0u8; HDR_MAX]; BATCH],
            dsts: (0..BATCH).map(|_| zeroed()).collect(),
            oiov: vec![[EMPTY_IOV; 2]; BATCH],
            omsgs: (0..BATCH).map(|_| zeroed()).collect(),
            ofam: vec![(false, 0); BATCH],
            queued: 0,
        }
    }

    /// Reads what `fd` (non-blocking, with `IP(V6)_RECVORIGDSTADDR` on)
    /// has, up to [`BATCH`] datagrams; returns how many (0 when none or on
    /// error). Forgets what was queued.
    pub fn recv(&mut self, fd: RawFd) -> usize {
        self.queued = 0;
        self.rx.recv_with_dst(fd)
    }

    /// Datagram `i` of the last [`recv`](SharedMmsg::recv): its bytes, its
    /// source, its original destination and whether it was truncated.
    pub fn datagram(&self, i: usize) -> (&[u8], Option<SocketAddr>, Option<SocketAddr>, bool) {
        let (p, src, truncated) = self.rx.datagram(i);
        (p, src, self.rx.orig_dst(i), truncated)
    }

    /// Queues datagram `i` of the last receive to leave from `src` to
    /// `dst` (same family); false when the header cannot be built.
    pub fn queue(&mut self, i: usize, src: SocketAddr, dst: SocketAddr) -> bool {
        let n = self.queued;
        if i >= self.rx.received() || n >= BATCH {
            return false;
        }
        let (payload, _, _) = self.rx.datagram(i);
        let Some(hlen) = headers(src, dst, payload, &mut self.hdrs[n]) else { return false };
        // Raw sockets take the destination without a port.
        let dlen = to_storage(SocketAddr::new(dst.ip(), 0), &mut self.dsts[n]);
        self.oiov[n] =
            [libc::iovec { iov_base: self.hdrs[n].as_mut_ptr().cast(), iov_len: hlen }, self.rx.payload_iov(i)];
        let h = &mut self.omsgs[n].msg_hdr;
        h.msg_name = (&mut self.dsts[n] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = dlen;
        h.msg_iov = self.oiov[n].as_mut_ptr();
        h.msg_iovlen = 2;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_flags = 0;
        self.ofam[n] = (dst.is_ipv6(), i);
        self.queued += 1;
        true
    }

    /// Sends every queued datagram, IPv4 ones from `raw4` and IPv6 ones
    /// from `raw6`; a datagram the kernel refuses is skipped. Returns the
    /// received-datagram indices (bit i for datagram i) that failed.
    pub fn send(&mut self, raw4: RawFd, raw6: RawFd) -> u64 {
        let mut failed = 0u64;
        let mut sent = 0usize;
        while sent < self.queued {
            let v6 = self.ofam[sent].0;
            let end = (sent..self.queued).find(|&j| self.ofam[j].0 != v6).unwrap_or(self.queued);
            let fd = if v6 { raw6 } else { raw4 };
            // SAFETY: headers sent..end point at live header buffers,
            // payload buffers, iovecs and addresses of this struct (set by
            // `queue`); `end - sent` headers are passed.
            let r = unsafe { libc::sendmmsg(fd, self.omsgs[sent..end].as_mut_ptr(), (end - sent) as u32, 0) };
            if r <= 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                failed |= 1 << self.ofam[sent].1;
                sent += 1;
                continue;
            }
            sent += r as usize;
        }
        self.queued = 0;
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::SharedSockets;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// Needs root (raw sockets): a datagram to the shared socket is read
    /// with its original destination, then sent on from a raw socket with
    /// another source port; the receiving kernel accepts it (so the UDP
    /// checksum is right) and sees the source we wrote.
    #[test]
    fn original_destination_in_and_our_header_out() {
        lab::need_root!();
        let s = SharedSockets::open().expect("shared sockets (tests run as root)");
        let mut m = SharedMmsg::new();
        for (rx, lo) in [(&s.rx4, "127.0.0.1"), (&s.rx6, "::1")] {
            let Ok(peer) = UdpSocket::bind((lo, 0)) else { continue }; // no ::1 here
            peer.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
            let port = rx.local_addr().unwrap().as_socket().unwrap().port();
            let to = SocketAddr::new(lo.parse().unwrap(), port);
            assert_eq!(m.recv(rx.as_raw_fd()), 0, "nothing yet");
            peer.send_to(b"odd-length rtp", to).unwrap();
            peer.send_to(b"two", to).unwrap();
            let mut got = 0;
            for _ in 0..100 {
                got = m.recv(rx.as_raw_fd());
                if got > 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(got >= 1);
            let (p, src, dst, trunc) = m.datagram(0);
            assert_eq!(
                (p, src, dst, trunc),
                (&b"odd-length rtp"[..], Some(peer.local_addr().unwrap()), Some(to), false)
            );
            // Out "from" port 40000 of the same address.
            let from = SocketAddr::new(lo.parse().unwrap(), 40000);
            assert!(m.queue(0, from, peer.local_addr().unwrap()));
            let other: SocketAddr = if lo == "::1" { "192.0.2.9:9" } else { "[2001:db8::9]:9" }.parse().unwrap();
            assert!(!m.queue(0, from, other), "mixed families refused");
            assert_eq!(m.send(s.raw4.as_raw_fd(), s.raw6.as_raw_fd()), 0);
            let mut buf = [0u8; 64];
            let (n, a) = peer.recv_from(&mut buf).expect("the raw-sent datagram arrives (checksum verified)");
            assert_eq!((&buf[..n], a), (&b"odd-length rtp"[..], from));
            assert_eq!(m.datagram(99).0.len(), 0, "past what was received");
        }
    }
}
