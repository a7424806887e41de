//! TUN queues: `/dev/net/tun` opened once per queue with
//! `IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE`, so each worker owns a file
//! descriptor of one device and the kernel spreads packets over the queues
//! by flow hash. Every fd is non-blocking; a worker waits with `poll(2)`,
//! or first spins on it for a while after its last packet ([`Waiter`],
//! `[tun] busy-poll`).
//!
//! The device is not persistent: it disappears (with its addresses and
//! routes) when the last queue is closed, which is how a clean shutdown and
//! a crash both leave nothing behind.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// `struct ifreq` as TUNSETIFF reads it: the name and the flags union member.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// How a worker waits for its queue: `poll(2)` when idle, or — with a
/// busy-poll window — by reading again at once (spinning) until the
/// window since the last packet it handled has passed, and only then
/// `poll(2)`.
///
/// Why: a packet that finds its worker asleep in `poll(2)` pays the
/// wake-up of that thread, and on a virtual machine whose idle vCPU
/// halted, the wake-up of the vCPU (tens of microseconds, more than the
/// translation). A worker that keeps spinning between packets that come
/// closer together than the window pays none of it, at the price of a
/// CPU busy for the window after every packet (a whole core while the
/// traffic keeps coming faster than the window). Each turn of the spin
/// yields the CPU (`sched_yield(2)`), so other runnable threads on it are
/// not starved. Linux's `busy_poll`
/// sysctl does the same for sockets; the TUN `read(2)` path has no such
/// knob, so the worker does it.
#[derive(Debug, Clone)]
pub struct Waiter {
    window: std::time::Duration,
    last: Option<std::time::Instant>,
}

impl Waiter {
    /// A waiter that spins for `window` after each packet (zero: never
    /// spins, always `poll(2)`).
    pub fn new(window: std::time::Duration) -> Self {
        Waiter { window, last: None }
    }

    /// Record that the worker just handled packets.
    #[inline]
    pub fn worked(&mut self) {
        if !self.window.is_zero() {
            self.last = Some(std::time::Instant::now());
        }
    }

    /// True while the worker is within its busy-poll window.
    #[inline]
    pub fn spinning(&self) -> bool {
        self.last.is_some_and(|t| t.elapsed() < self.window)
    }

    /// One turn of the spin: while within the window, yield the CPU once
    /// and return true (the caller reads again at once); past it, close
    /// the window and return false (the caller sleeps in its own poll).
    pub fn spin(&mut self) -> bool {
        if self.spinning() {
            // Yield rather than spin hard: another runnable thread on this
            // CPU (the peer of a veth, a tester, a second engine) runs
            // first, and the spin costs nothing when none is waiting.
            std::thread::yield_now();
            return true;
        }
        self.last = None;
        false
    }

    /// Wait until `q` may be readable: at once (true) while spinning,
    /// else [`TunQueue::wait_readable`] with `timeout_ms`.
    pub fn wait(&mut self, q: &TunQueue, timeout_ms: i32) -> io::Result<bool> {
        if self.spin() {
            return Ok(true);
        }
        q.wait_readable(timeout_ms)
    }
}

/// One queue of a multiqueue TUN device.
#[derive(Debug)]
pub struct TunQueue {
    fd: OwnedFd,
}

/// The interface index of `name`, or `None` when there is no such device.
pub fn if_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// Create the TUN device `name` with `queues` queues, non-blocking or not.
/// Fails when a device of that name already exists (another daemon may own it).
pub fn open_queues(name: &str, queues: usize, nonblocking: bool) -> io::Result<Vec<TunQueue>> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad device name `{name}`")));
    }
    if if_index(name).is_some() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("device {name} already exists (another v6gate running?)"),
        ));
    }
    (0..queues.max(1)).map(|_| open_one(name, nonblocking)).collect()
}

fn open_one(name: &str, nonblocking: bool) -> io::Result<TunQueue> {
    let path = c"/dev/net/tun";
    let flags = libc::O_RDWR | libc::O_CLOEXEC | if nonblocking { libc::O_NONBLOCK } else { 0 };
    // SAFETY: plain open(2) of a constant path.
    let raw = cvt(unsafe { libc::open(path.as_ptr(), flags) })?;
    // SAFETY: `raw` is a freshly opened fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads (and writes back) a `struct ifreq`, which
    // `IfReq` lays out with the same size (40 bytes) and field offsets.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) })?;
    Ok(TunQueue { fd })
}

impl TunQueue {
    /// A second descriptor of the same queue (for the timer thread's writes).
    pub fn try_clone(&self) -> io::Result<TunQueue> {
        Ok(TunQueue { fd: self.fd.try_clone()? })
    }

    /// Switch the queue to non-blocking mode.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        // SAFETY: fcntl on our own fd.
        let fl = cvt(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_GETFL) })?;
        // SAFETY: as above.
        cvt(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
        Ok(())
    }

    /// Read one packet into `buf`; `Ok(None)` when the queue is empty.
    #[inline]
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(n as usize))
    }

    /// Write one packet. A full queue (`EAGAIN`) or a rejected packet is
    /// an error for the caller to count.
    #[inline]
    pub fn send(&self, pkt: &[u8]) -> io::Result<()> {
        // SAFETY: `pkt` is valid for reads of `pkt.len()` bytes.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait until the queue is readable or `timeout_ms` passes.
    /// Returns true when readable.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
        }
        if r > 0 && p.revents & libc::POLLIN == 0 && p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            return Err(io::Error::other(format!("TUN queue poll error (revents {:#x})", p.revents)));
        }
        Ok(r > 0 && p.revents & libc::POLLIN != 0)
    }
}

impl AsFd for TunQueue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for TunQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Pin the calling thread to CPU `cpu` (best effort).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it;
    // sched_setaffinity reads `size_of::<cpu_set_t>()` bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiter_spins_only_within_its_window_after_work() {
        let mut off = Waiter::new(std::time::Duration::ZERO);
        off.worked();
        assert!(!off.spinning(), "a zero window never spins");
        let mut on = Waiter::new(std::time::Duration::from_secs(3600));
        assert!(!on.spinning(), "no packet handled yet: sleep");
        on.worked();
        assert!(on.spinning());
        assert!(on.spin() && on.spinning(), "a turn of the spin keeps the window");
        assert!(!off.spin(), "a zero window sleeps");
    }

    #[test]
    fn ifreq_layout_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(open_queues("", 1, true).is_err());
        assert!(open_queues("a-name-that-is-too-long", 1, true).is_err());
        // `lo` always exists.
        assert_eq!(open_queues("lo", 1, true).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    }
}
