//! The epoll set and the eventfd that wakes a worker, over nix's safe
//! wrappers (owned descriptors, closed on drop).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering::AcqRel, Ordering::Acquire};

use nix::sys::epoll::{Epoll as NixEpoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd as NixEventFd};

/// An epoll set; each registered descriptor carries a `u64` the wait
/// returns.
#[derive(Debug)]
pub(crate) struct Epoll(NixEpoll);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        Ok(Epoll(NixEpoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?))
    }

    /// Watches `fd` for input; its events carry `data`.
    pub fn add(&self, fd: impl AsFd, data: u64) -> io::Result<()> {
        Ok(self.0.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, data))?)
    }

    /// Stops watching `fd`.
    pub fn del(&self, fd: impl AsFd) -> io::Result<()> {
        Ok(self.0.delete(fd)?)
    }

    /// Waits up to `timeout_ms` for input; returns the data words of the
    /// ready descriptors (at most the capacity of `events`).
    pub fn wait<'a>(&self, events: &'a mut Events, timeout_ms: u16) -> io::Result<impl Iterator<Item = u64> + 'a> {
        let n = self.0.wait(&mut events.0, timeout_ms)?;
        Ok(events.0[..n].iter().map(EpollEvent::data))
    }
}

/// Room for the events of one wait.
#[derive(Debug)]
pub(crate) struct Events(Vec<EpollEvent>);

impl Events {
    pub fn with_capacity(n: usize) -> Events {
        Events(vec![EpollEvent::empty(); n.max(1)])
    }
}

/// A non-blocking eventfd: one side signals, the other drains.
///
/// Signals coalesce: while one is outstanding (raised and not yet
/// drained) another one writes nothing, so a burst of control commands
/// costs one `write(2)` and one wakeup. [`EventFd::raised`] lets the
/// waiting side see an outstanding signal without a system call.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: NixEventFd,
    raised: AtomicBool,
}

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        let fd = NixEventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        Ok(EventFd { fd, raised: AtomicBool::new(false) })
    }

    /// Makes the descriptor readable (wakes a waiting worker), unless a
    /// signal is already outstanding. Whatever the signaller published
    /// before (a command on a channel) is visible to the side that drains.
    pub fn signal(&self) {
        if !self.raised.swap(true, AcqRel) {
            let _ = self.fd.write(1);
        }
    }

    /// Whether a signal is outstanding.
    pub fn raised(&self) -> bool {
        self.raised.load(Acquire)
    }

    /// Resets it to not readable. The flag is cleared after the read, so a
    /// signal arriving in between either is seen by the caller's next
    /// look at its channel (it published before raising) or writes again.
    pub fn drain(&self) {
        let _ = self.fd.read();
        self.raised.swap(false, AcqRel);
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_wakes_the_epoll_set() {
        let ep = Epoll::new().unwrap();
        let efd = EventFd::new().unwrap();
        ep.add(&efd, 42).unwrap();
        let mut ev = Events::with_capacity(4);
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 0, "nothing yet");
        assert!(!efd.raised());
        efd.signal();
        efd.signal();
        assert!(efd.raised(), "a signal is outstanding");
        assert_eq!(ep.wait(&mut ev, 1000).unwrap().collect::<Vec<_>>(), [42]);
        efd.drain();
        assert!(!efd.raised());
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 0, "drained: both signals were one");
        efd.signal();
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 1, "a signal after the drain wakes again");
        efd.drain();
        ep.del(&efd).unwrap();
        efd.signal();
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 0, "no longer watched");
        assert!(ep.del(&efd).is_err());
    }
}
