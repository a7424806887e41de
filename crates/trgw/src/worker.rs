//! Relay workers: one thread per core, each owning the sockets of the
//! streams given to it (stream id modulo the worker count). A worker waits
//! on one epoll set for all its sockets (up to 1024 ready sockets per
//! wakeup), reads every ready socket with one `recvmmsg` (up to 32
//! datagrams) and writes them out of the other leg's socket with one
//! `sendmmsg`. The epoll data word is the slot index, so finding a
//! packet's stream is one array access.
//!
//! Control changes arrive over a channel and an eventfd in the same epoll
//! set, so a worker never takes a lock per packet.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use socket2::Socket;

use crate::config::Latching;
use crate::core::StreamInit;
use crate::rtp::{parse_rtp, static_clock_rate, RtpRx};

const BATCH: usize = 32;
const BUF: usize = 2048;
const EVENTS: usize = 1024;
const WAKE: u64 = u64::MAX;

pub(crate) enum Cmd {
    Install {
        id: u32,
        sockets: Box<[Option<Socket>; 4]>,
        locals: [SocketAddr; 4],
        init: StreamInit,
    },
    SetPeers {
        id: u32,
        peers: [Option<SocketAddr>; 4],
    },
    Remove {
        id: u32,
    },
    /// Answered once every earlier command is applied.
    Sync(std::sync::mpsc::SyncSender<()>),
}

/// The control side's handle on one worker.
pub(crate) struct WorkerCtl {
    pub tx: Sender<Cmd>,
    pub efd: RawFd,
}

impl WorkerCtl {
    /// Waits (at most a second) until the worker applied every command
    /// sent before, so a control reply is never ahead of the data path.
    pub fn sync(&self) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(Cmd::Sync(tx));
        let _ = rx.recv_timeout(std::time::Duration::from_secs(1));
    }

    pub fn send(&self, c: Cmd) {
        if self.tx.send(c).is_ok() {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes from a valid u64 to an eventfd.
            unsafe { libc::write(self.efd, (&one as *const u64).cast(), 8) };
        }
    }
}

pub(crate) struct Slot {
    pub sock: Socket,
    pub local: SocketAddr,
    pub peer: Option<SocketAddr>,
    pub latched: Option<SocketAddr>,
    pub rx: RtpRx,
    pub init: Arc<StreamInit>,
    pub k: usize,
}

pub(crate) struct Worker {
    epfd: RawFd,
    efd: RawFd,
    rx: Receiver<Cmd>,
    nworkers: u32,
    slots: Vec<Option<Slot>>,
    epoch: Instant,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A `sockaddr_storage` for a socket address; returns its length.
pub(crate) fn to_storage(a: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    // SAFETY: sockaddr_storage is large enough and suitably aligned for
    // both sockaddr_in and sockaddr_in6.
    unsafe {
        match a {
            SocketAddr::V4(v4) => {
                let s = &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = v4.port().to_be();
                s.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) };
                size_of::<libc::sockaddr_in>() as libc::socklen_t
            }
            SocketAddr::V6(v6) => {
                let s = &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = v6.port().to_be();
                s.sin6_flowinfo = 0;
                s.sin6_addr = libc::in6_addr { s6_addr: v6.ip().octets() };
                s.sin6_scope_id = v6.scope_id();
                size_of::<libc::sockaddr_in6>() as libc::socklen_t
            }
        }
    }
}

pub(crate) fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the family field says which structure the kernel wrote.
    unsafe {
        match i32::from(s.ss_family) {
            libc::AF_INET => {
                let a = &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port))))
            }
            libc::AF_INET6 => {
                let a = &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), 0, a.sin6_scope_id)))
            }
            _ => None,
        }
    }
}

fn same_family(a: IpAddr, b: SocketAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

impl Worker {
    pub fn new(rx: Receiver<Cmd>, nworkers: u32, epoch: Instant) -> io::Result<(Worker, RawFd)> {
        // SAFETY: plain syscalls creating new descriptors.
        let epfd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        let efd = match cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }) {
            Ok(f) => f,
            Err(e) => {
                unsafe { libc::close(epfd) };
                return Err(e);
            }
        };
        let w = Worker { epfd, efd, rx, nworkers, slots: Vec::new(), epoch };
        w.ctl(libc::EPOLL_CTL_ADD, efd, WAKE)?;
        Ok((w, efd))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: data };
        // SAFETY: valid epoll fd and event pointer.
        cvt(unsafe { libc::epoll_ctl(self.epfd, op, fd, &mut ev) }).map(|_| ())
    }

    fn base(&self, id: u32) -> usize {
        base_of(id, self.nworkers)
    }

    fn apply(&mut self, c: Cmd) {
        match c {
            Cmd::Install { id, sockets, locals, init } => {
                let base = self.base(id);
                grow(&mut self.slots, base);
                for (k, slot) in Slot::for_stream(*sockets, locals, init) {
                    if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, slot.sock.as_raw_fd(), (base + k) as u64) {
                        tracing::error!(error = %e, "epoll_ctl add failed");
                    }
                    self.slots[base + k] = Some(slot);
                }
            }
            Cmd::SetPeers { id, peers } => {
                let base = self.base(id);
                for (k, p) in peers.iter().enumerate() {
                    if let Some(Some(s)) = self.slots.get_mut(base + k) {
                        s.set_peer(*p);
                    }
                }
            }
            Cmd::Remove { id } => {
                let base = self.base(id);
                for k in 0..4 {
                    if let Some(slot) = self.slots.get_mut(base + k).and_then(Option::take) {
                        let _ = self.ctl(libc::EPOLL_CTL_DEL, slot.sock.as_raw_fd(), 0);
                    }
                }
            }
            Cmd::Sync(tx) => {
                let _ = tx.send(());
            }
        }
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) {
        // SAFETY: zeroed epoll_event/mmsghdr/sockaddr_storage are valid
        // initial values for these plain C structures.
        let mut events: Vec<libc::epoll_event> = vec![unsafe { zeroed() }; EVENTS];
        let mut bufs = vec![[0u8; BUF]; BATCH];
        let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { zeroed() }; BATCH];
        let mut dsts: Vec<libc::sockaddr_storage> = vec![unsafe { zeroed() }; BATCH];
        let mut iov: Vec<libc::iovec> = vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; BATCH];
        let mut oiov: Vec<libc::iovec> = vec![libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; BATCH];
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; BATCH];
        let mut omsgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; BATCH];
        while !stop.load(Relaxed) {
            // SAFETY: events has EVENTS entries.
            let n = unsafe { libc::epoll_wait(self.epfd, events.as_mut_ptr(), EVENTS as i32, 200) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %e, "epoll_wait failed; worker stops");
                break;
            }
            let now_ns = self.epoch.elapsed().as_nanos() as u64;
            for ev in &events[..n as usize] {
                let data = ev.u64;
                if data == WAKE {
                    let mut v = 0u64;
                    // SAFETY: reading 8 bytes into a u64 from our eventfd.
                    unsafe { libc::read(self.efd, (&mut v as *mut u64).cast(), 8) };
                    while let Ok(c) = self.rx.try_recv() {
                        self.apply(c);
                    }
                    continue;
                }
                let idx = data as usize;
                let Some(Some(slot)) = self.slots.get(idx) else { continue };
                let fd = slot.sock.as_raw_fd();
                for i in 0..BATCH {
                    iov[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr().cast(), iov_len: BUF };
                    msgs[i].msg_hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
                    msgs[i].msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
                    msgs[i].msg_hdr.msg_iov = &mut iov[i];
                    msgs[i].msg_hdr.msg_iovlen = 1;
                    msgs[i].msg_hdr.msg_control = std::ptr::null_mut();
                    msgs[i].msg_hdr.msg_controllen = 0;
                    msgs[i].msg_hdr.msg_flags = 0;
                    msgs[i].msg_len = 0;
                }
                // SAFETY: msgs/iov/bufs/names are live for the call.
                let got = unsafe {
                    libc::recvmmsg(fd, msgs.as_mut_ptr(), BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
                };
                if got <= 0 {
                    continue;
                }
                let got = got as usize;
                self.relay(idx, got, now_ns, &mut bufs, &names, &msgs, &mut dsts, &mut oiov, &mut omsgs);
            }
        }
        // SAFETY: closing our own descriptors once.
        unsafe {
            libc::close(self.epfd);
            libc::close(self.efd);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn relay(
        &mut self,
        idx: usize,
        got: usize,
        now_ns: u64,
        bufs: &mut [[u8; BUF]],
        names: &[libc::sockaddr_storage],
        msgs: &[libc::mmsghdr],
        dsts: &mut [libc::sockaddr_storage],
        oiov: &mut [libc::iovec],
        omsgs: &mut [libc::mmsghdr],
    ) {
        let out_idx = idx ^ 2;
        let (out_fd, out_dst, out_local) = match self.slots.get(out_idx) {
            Some(Some(o)) => (o.sock.as_raw_fd(), o.latched.or(o.peer), Some(o.local.ip())),
            _ => (-1, None, None),
        };
        let Some(Some(slot)) = self.slots.get_mut(idx) else { return };
        let mut nout = 0usize;
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        for i in 0..got {
            let len = msgs[i].msg_len as usize;
            let src = from_storage(&names[i]);
            if msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || src.is_none() {
                dropped += 1;
                continue;
            }
            let src = src.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            if !ingress(slot, src, &bufs[i][..len], now_ns) {
                dropped += 1;
                continue;
            }
            let (Some(dst), Some(lip)) = (out_dst, out_local) else {
                dropped += 1;
                continue;
            };
            if !same_family(lip, dst) {
                dropped += 1;
                continue;
            }
            let dlen = to_storage(dst, &mut dsts[nout]);
            oiov[nout] = libc::iovec { iov_base: bufs[i].as_mut_ptr().cast(), iov_len: len };
            let h = &mut omsgs[nout].msg_hdr;
            h.msg_name = (&mut dsts[nout] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = dlen;
            h.msg_iov = &mut oiov[nout];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            bytes += len as u64;
            nout += 1;
        }
        let st = &slot.init.stats.slots[slot.k];
        if slot.k & 1 == 0 {
            st.lost.store(slot.rx.lost(), Relaxed);
            st.jitter.store(slot.rx.jitter(), Relaxed);
        }
        st.last_ns.store(now_ns.max(1), Relaxed);
        // Count before sending, so a reader that saw the packet arrive sees
        // it counted; failures are taken back below.
        st.packets.fetch_add(nout as u64, Relaxed);
        st.bytes.fetch_add(bytes, Relaxed);
        let mut failed_bytes = 0u64;
        let mut sent = 0usize;
        let mut send_fail = 0u64;
        while sent < nout {
            // SAFETY: omsgs[sent..nout] point at live buffers and addresses.
            let r = unsafe { libc::sendmmsg(out_fd, omsgs[sent..].as_mut_ptr(), (nout - sent) as u32, 0) };
            if r <= 0 {
                // Skip the datagram that failed and count it.
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                send_fail += 1;
                failed_bytes += oiov[sent].iov_len as u64;
                sent += 1;
                continue;
            }
            sent += r as usize;
        }
        if send_fail > 0 {
            st.packets.fetch_sub(send_fail, Relaxed);
            st.bytes.fetch_sub(failed_bytes, Relaxed);
            dropped += send_fail;
        }
        if dropped > 0 {
            st.dropped.fetch_add(dropped, Relaxed);
        }
    }
}

/// First slot of stream `id` in its worker's table (the worker holds
/// every `nworkers`-th stream, four slots each).
pub(crate) fn base_of(id: u32, nworkers: u32) -> usize {
    (id / nworkers) as usize * 4
}

/// Makes room for the four slots from `base`.
pub(crate) fn grow<T>(slots: &mut Vec<Option<T>>, base: usize) {
    if slots.len() < base + 4 {
        slots.resize_with(base + 4, || None);
    }
}

impl Slot {
    /// The slots of a new stream: (k, slot) for every socket given.
    pub fn for_stream(
        sockets: [Option<Socket>; 4],
        locals: [SocketAddr; 4],
        init: StreamInit,
    ) -> impl Iterator<Item = (usize, Slot)> {
        let init = Arc::new(init);
        sockets.into_iter().enumerate().filter_map(move |(k, s)| {
            s.map(|sock| {
                let slot = Slot {
                    sock,
                    local: locals[k],
                    peer: init.peers[k],
                    latched: None,
                    rx: RtpRx::default(),
                    init: init.clone(),
                    k,
                };
                (k, slot)
            })
        })
    }

    /// A new signalled far end; forgets what was latched.
    pub fn set_peer(&mut self, p: Option<SocketAddr>) {
        if self.peer != p {
            self.peer = p;
            self.latched = None;
            if let Ok(mut g) = self.init.stats.slots[self.k].latched.lock() {
                *g = None;
            }
        }
    }
}

/// Latching and RTP statistics for one received datagram; false when it
/// must be dropped (strict latching, a foreign source after latching, or a
/// first source the media address policy refuses).
pub(crate) fn ingress(slot: &mut Slot, src: SocketAddr, pkt: &[u8], now_ns: u64) -> bool {
    let st = &slot.init.stats.slots[slot.k];
    if slot.init.latching == Latching::Strict {
        if slot.peer != Some(src) {
            return false;
        }
    } else {
        match slot.latched {
            // A new source is learnt only if media may be sent to it: a
            // packet from a forbidden source must not redirect the other
            // leg's media (the same policy as signalled addresses).
            None if !slot.init.policy.check_latch(src.ip()) => return false,
            None => {
                slot.latched = Some(src);
                if let Ok(mut g) = st.latched.lock() {
                    *g = Some(src);
                }
                if slot.peer.is_some_and(|p| p != src) {
                    tracing::debug!(%src, signalled = ?slot.peer, "latched to a new source (NAT)");
                }
            }
            Some(l) if l == src => {}
            Some(_) => return false,
        }
    }
    if slot.k & 1 == 0 {
        if let Some((pt, seq, ts, ssrc)) = parse_rtp(pkt) {
            let rate =
                slot.init.clock.iter().find(|(p, _)| *p == pt).map_or_else(|| static_clock_rate(pt), |(_, r)| *r);
            let arrival = (u128::from(now_ns) * u128::from(rate) / 1_000_000_000) as u32;
            slot.rx.packet(seq, ts, ssrc, arrival);
        }
    }
    true
}
