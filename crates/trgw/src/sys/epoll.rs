//! An epoll set and an eventfd, as owned descriptors.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, zeroed};

/// An epoll set; each registered descriptor carries a `u64` the wait
/// returns.
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall creating a new descriptor.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: data };
        // SAFETY: a valid epoll descriptor and a live event structure.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) }).map(|_| ())
    }

    /// Watches `fd` for input; its events carry `data`.
    pub fn add(&self, fd: RawFd, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, data)
    }

    /// Stops watching `fd`.
    pub fn del(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0)
    }

    /// Waits up to `timeout_ms` for input; returns the data words of the
    /// ready descriptors (at most `events.capacity()`).
    pub fn wait<'a>(&self, events: &'a mut Events, timeout_ms: i32) -> io::Result<impl Iterator<Item = u64> + 'a> {
        let max = i32::try_from(events.0.len()).unwrap_or(i32::MAX);
        // SAFETY: `events` holds `max` writable entries.
        let n = cvt(unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.0.as_mut_ptr(), max, timeout_ms) })?;
        Ok(events.0[..n as usize].iter().map(|e| e.u64))
    }
}

/// Room for the events of one wait.
#[derive(Debug)]
pub(crate) struct Events(Vec<libc::epoll_event>);

impl Events {
    pub fn with_capacity(n: usize) -> Events {
        Events((0..n.max(1)).map(|_| zeroed()).collect())
    }
}

/// A non-blocking eventfd: one side signals, the other drains.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall creating a new descriptor.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the descriptor readable (wakes a waiting worker).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets it to not readable.
    pub fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our eventfd.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_wakes_the_epoll_set() {
        let ep = Epoll::new().unwrap();
        let efd = EventFd::new().unwrap();
        ep.add(efd.as_raw_fd(), 42).unwrap();
        let mut ev = Events::with_capacity(4);
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 0, "nothing yet");
        efd.signal();
        assert_eq!(ep.wait(&mut ev, 1000).unwrap().collect::<Vec<_>>(), [42]);
        efd.drain();
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 0, "drained");
        ep.del(efd.as_raw_fd()).unwrap();
        efd.signal();
        assert_eq!(ep.wait(&mut ev, 0).unwrap().count(), 0, "no longer watched");
        assert!(ep.del(efd.as_raw_fd()).is_err());
    }
}
