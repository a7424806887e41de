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
//!
//! In the shared-socket mode (`crate::shared`) the slots have no socket:
//! the worker's two shared sockets (one per family) are in the epoll set
//! instead, and a datagram's slot is found by its original destination
//! (one hash lookup); it leaves from a raw socket with the out slot's
//! local address and port as its source.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use socket2::Socket;

use crate::config::Latching;
use crate::core::StreamInit;
use crate::rtp::{parse_rtp, static_clock_rate, RtpRx};
use crate::shared::SharedSockets;
use crate::sys::epoll::{Epoll, EventFd, Events};
use crate::sys::mmsg::Mmsg;
use crate::sys::shared::SharedMmsg;

const EVENTS: usize = 1024;
const WAKE: u64 = u64::MAX;
/// Epoll data words of the shared sockets (shared-socket mode).
const SHARED4: u64 = u64::MAX - 1;
const SHARED6: u64 = u64::MAX - 2;

pub(crate) enum Cmd {
    Install { id: u32, sockets: Box<[Option<Socket>; 4]>, locals: [SocketAddr; 4], init: StreamInit },
    SetPeers { id: u32, peers: [Option<SocketAddr>; 4] },
    Remove { id: u32 },
}

/// The control side's handle on one worker.
pub(crate) struct WorkerCtl {
    pub tx: Sender<Cmd>,
    pub efd: Arc<EventFd>,
}

impl WorkerCtl {
    pub fn send(&self, c: Cmd) {
        if self.tx.send(c).is_ok() {
            self.efd.signal();
        }
    }
}

pub(crate) struct Slot {
    /// The slot's own socket (None in the shared-socket mode).
    pub sock: Option<Socket>,
    pub local: SocketAddr,
    pub peer: Option<SocketAddr>,
    pub latched: Option<SocketAddr>,
    pub rx: RtpRx,
    pub init: Arc<StreamInit>,
    pub k: usize,
}

pub(crate) struct Worker {
    epoll: Epoll,
    efd: Arc<EventFd>,
    rx: Receiver<Cmd>,
    nworkers: u32,
    slots: Vec<Option<Slot>>,
    epoch: Instant,
    shared: Option<Shared>,
}

/// A worker's part of the shared-socket mode.
pub(crate) struct Shared {
    socks: SharedSockets,
    /// Slot index of each local address and port this worker serves.
    by_local: HashMap<SocketAddr, usize>,
    io: SharedMmsg,
    /// Datagrams on a shared socket for no slot of this worker (a port
    /// just freed, or sent to the shared socket's own port).
    unmatched: Arc<AtomicU64>,
}

impl Shared {
    pub fn new(socks: SharedSockets, unmatched: Arc<AtomicU64>) -> Shared {
        Shared { socks, by_local: HashMap::new(), io: SharedMmsg::new(), unmatched }
    }
}

fn same_family(a: IpAddr, b: SocketAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

impl Worker {
    pub fn new(
        rx: Receiver<Cmd>,
        nworkers: u32,
        epoch: Instant,
        shared: Option<Shared>,
    ) -> io::Result<(Worker, Arc<EventFd>)> {
        let epoll = Epoll::new()?;
        let efd = Arc::new(EventFd::new()?);
        epoll.add(&*efd, WAKE)?;
        if let Some(sh) = &shared {
            epoll.add(&sh.socks.rx4, SHARED4)?;
            epoll.add(&sh.socks.rx6, SHARED6)?;
        }
        Ok((Worker { epoll, efd: efd.clone(), rx, nworkers, slots: Vec::new(), epoch, shared }, efd))
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
                    if let Some(sock) = &slot.sock {
                        if let Err(e) = self.epoll.add(sock, (base + k) as u64) {
                            tracing::error!(error = %e, "epoll_ctl add failed");
                        }
                    } else if let Some(sh) = &mut self.shared {
                        sh.by_local.insert(slot.local, base + k);
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
                        if let Some(sock) = &slot.sock {
                            let _ = self.epoll.del(sock);
                        } else if let Some(sh) = &mut self.shared {
                            sh.by_local.remove(&slot.local);
                        }
                    }
                }
            }
        }
    }

    /// Applies every queued control command.
    ///
    /// The control side does not wait for a worker to apply its commands
    /// (no round trip per offer, answer or delete): instead a worker
    /// applies what is queued before it relays datagrams it read while a
    /// signal was outstanding. A datagram that a SIP message carrying the
    /// new relay address provoked arrives after that message was sent,
    /// hence after the command was queued, so it is relayed with the
    /// stream's new state.
    fn take_commands(&mut self) {
        self.efd.drain();
        while let Ok(c) = self.rx.try_recv() {
            self.apply(c);
        }
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) {
        let mut events = Events::with_capacity(EVENTS);
        let mut ready = Vec::with_capacity(EVENTS);
        let mut io = Mmsg::new();
        while !stop.load(Relaxed) {
            ready.clear();
            match self.epoll.wait(&mut events, 200) {
                Ok(r) => ready.extend(r),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!(error = %e, "epoll_wait failed; worker stops");
                    break;
                }
            }
            let now_ns = self.epoch.elapsed().as_nanos() as u64;
            for &data in &ready {
                if data == WAKE {
                    self.take_commands();
                    continue;
                }
                if data == SHARED4 || data == SHARED6 {
                    self.relay_shared(data == SHARED6, now_ns);
                    continue;
                }
                let idx = data as usize;
                let Some(Some(Slot { sock: Some(sock), init, .. })) = self.slots.get(idx) else { continue };
                let got = io.recv(sock.as_raw_fd());
                if got > 0 && self.efd.raised() {
                    // Commands sent before these datagrams arrived (the
                    // peers of an answer just signalled) apply first.
                    let stream = Arc::as_ptr(init);
                    self.take_commands();
                    let same = matches!(self.slots.get(idx), Some(Some(s)) if Arc::as_ptr(&s.init) == stream);
                    if !same {
                        continue; // the stream was removed meanwhile
                    }
                }
                if got > 0 {
                    self.relay(idx, got, now_ns, &mut io);
                }
            }
        }
    }

    /// Relays the `got` datagrams `io` holds from slot `idx` out of the
    /// other leg's socket.
    fn relay(&mut self, idx: usize, got: usize, now_ns: u64, io: &mut Mmsg) {
        let out_idx = idx ^ 2;
        let (out_fd, out_dst, out_local) = match self.slots.get(out_idx) {
            Some(Some(o)) => (o.sock.as_ref().map_or(-1, AsRawFd::as_raw_fd), o.latched.or(o.peer), Some(o.local.ip())),
            _ => (-1, None, None),
        };
        let Some(Some(slot)) = self.slots.get_mut(idx) else { return };
        let mut nout = 0u64;
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        for i in 0..got {
            let (pkt, src, truncated) = io.datagram(i);
            let len = pkt.len() as u64;
            let Some(src) = src.filter(|_| !truncated) else {
                dropped += 1;
                continue;
            };
            if !ingress(slot, src, pkt, now_ns) {
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
            io.queue(i, dst);
            bytes += len;
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
        st.packets.fetch_add(nout, Relaxed);
        st.bytes.fetch_add(bytes, Relaxed);
        let (send_fail, failed_bytes) = if nout > 0 { io.send(out_fd) } else { (0, 0) };
        if send_fail > 0 {
            st.packets.fetch_sub(send_fail, Relaxed);
            st.bytes.fetch_sub(failed_bytes, Relaxed);
            dropped += send_fail;
        }
        if dropped > 0 {
            st.dropped.fetch_add(dropped, Relaxed);
        }
    }

    /// Shared-socket mode: reads a batch from the shared socket of a
    /// family, finds each datagram's slot by its original destination and
    /// sends it on from the out slot's local address and port.
    fn relay_shared(&mut self, v6: bool, now_ns: u64) {
        let Some(sh) = &self.shared else { return };
        let fd = if v6 { sh.socks.rx6.as_raw_fd() } else { sh.socks.rx4.as_raw_fd() };
        // A few batches while full ones come (the socket is shared by many
        // calls), then back to epoll (level-triggered) so the other
        // sockets and the control channel get their turn.
        for _ in 0..SHARED_BATCHES {
            let got = match &mut self.shared {
                Some(sh) => sh.io.recv(fd),
                None => return,
            };
            if got > 0 && self.efd.raised() {
                // As per port: queued commands first (`take_commands`).
                self.take_commands();
            }
            let Some(sh) = &mut self.shared else { return };
            // Per received datagram: (slot, relayed?, bytes) for the counters.
            let mut outcome: [(usize, bool, u64); crate::sys::mmsg::BATCH] = [(usize::MAX, false, 0); _];
            let mut unmatched = 0u64;
            for (i, out) in outcome.iter_mut().enumerate().take(got) {
                let (pkt, src, dst, truncated) = sh.io.datagram(i);
                let len = pkt.len() as u64;
                let idx = dst.and_then(|d| sh.by_local.get(&d).copied());
                let (Some(idx), Some(src)) = (idx, src) else {
                    unmatched += 1;
                    continue;
                };
                let Some(Some(slot)) = self.slots.get_mut(idx) else {
                    unmatched += 1;
                    continue;
                };
                // Counted on its slot: dropped unless relayed below (a
                // truncated datagram too, as per port).
                *out = (idx, false, len);
                if truncated || !ingress(slot, src, pkt, now_ns) {
                    continue;
                }
                let Some(Some(o)) = self.slots.get(idx ^ 2) else { continue };
                let Some(dst) = o.latched.or(o.peer) else { continue };
                out.1 = same_family(o.local.ip(), dst) && sh.io.queue(i, o.local, dst);
            }
            if unmatched > 0 {
                sh.unmatched.fetch_add(unmatched, Relaxed);
            }
            // Count before sending (as `relay`); failures are taken back.
            for &(idx, sent, len) in outcome.iter().take(got) {
                let Some(Some(slot)) = self.slots.get(idx) else { continue };
                let st = &slot.init.stats.slots[slot.k];
                if slot.k & 1 == 0 {
                    st.lost.store(slot.rx.lost(), Relaxed);
                    st.jitter.store(slot.rx.jitter(), Relaxed);
                }
                st.last_ns.store(now_ns.max(1), Relaxed);
                if sent {
                    st.packets.fetch_add(1, Relaxed);
                    st.bytes.fetch_add(len, Relaxed);
                } else {
                    st.dropped.fetch_add(1, Relaxed);
                }
            }
            let failed = sh.io.send(sh.socks.raw4.as_raw_fd(), sh.socks.raw6.as_raw_fd());
            for (i, &(idx, _, len)) in outcome.iter().enumerate().take(got) {
                if failed & (1 << i) == 0 {
                    continue;
                }
                let Some(Some(slot)) = self.slots.get(idx) else { continue };
                let st = &slot.init.stats.slots[slot.k];
                st.packets.fetch_sub(1, Relaxed);
                st.bytes.fetch_sub(len, Relaxed);
                st.dropped.fetch_add(1, Relaxed);
            }
            if got < crate::sys::mmsg::BATCH {
                break;
            }
        }
    }
}

/// Batches read from a shared socket per readiness event at most.
const SHARED_BATCHES: usize = 8;

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
    /// The slots of a new stream: (k, slot) for k in 0..4.
    pub fn for_stream(
        sockets: [Option<Socket>; 4],
        locals: [SocketAddr; 4],
        init: StreamInit,
    ) -> impl Iterator<Item = (usize, Slot)> {
        let init = Arc::new(init);
        // Per-port mode gives four sockets, the shared mode none: a slot
        // per k either way.
        sockets.into_iter().enumerate().map(move |(k, sock)| {
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
