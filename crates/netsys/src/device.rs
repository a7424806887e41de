//! One TUN device as the standalone runners use it (the tunnels, the
//! softwires): created with a single queue, brought up with its MTU, its
//! addresses and the prefixes routed into it; and the wait on a device
//! and sockets at once ([`wait`]).

use crate::netlink::Netlink;
use crate::tun::{self, TunQueue};
use crate::IfAddr;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;
use xlat::addr::IpPrefix;

/// What a device should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Device name.
    pub name: String,
    /// MTU.
    pub mtu: u32,
    /// Addresses to put on it.
    pub addresses: Vec<(IpAddr, u8)>,
    /// Prefixes routed into it.
    pub routes: Vec<IpPrefix>,
}

/// A TUN device: its queue, index and name.
#[derive(Debug)]
pub struct Device {
    /// The queue.
    pub queue: TunQueue,
    /// Interface index.
    pub index: u32,
    /// Name.
    pub name: String,
}

/// `e` with `what` in front of its message, its kind kept.
fn ctx(e: io::Error, what: impl FnOnce() -> String) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", what()))
}

impl Device {
    /// Create `t.name`, bring it up with `t.mtu`, add `t.addresses` and
    /// `t.routes`. Errors say which step failed.
    pub fn open(t: &DeviceSpec) -> io::Result<Device> {
        let mut q =
            tun::open_queues(&t.name, 1, true).map_err(|e| ctx(e, || format!("creating TUN device {}", t.name)))?;
        let queue = q.pop().ok_or_else(|| io::Error::other(format!("TUN device {}: no queue", t.name)))?;
        let index =
            tun::if_index(&t.name).ok_or_else(|| io::Error::other(format!("TUN device {} vanished", t.name)))?;
        let mut nl = Netlink::open().map_err(|e| ctx(e, || "opening route netlink".into()))?;
        nl.link_up(index, t.mtu, 1000).map_err(|e| ctx(e, || format!("bringing {} up", t.name)))?;
        for &(addr, len) in &t.addresses {
            nl.add_address(index, IfAddr { addr, len })
                .map_err(|e| ctx(e, || format!("adding {addr}/{len} to {}", t.name)))?;
        }
        for r in &t.routes {
            nl.add_route(index, *r).map_err(|e| ctx(e, || format!("routing {r} into {}", t.name)))?;
        }
        Ok(Device { queue, index, name: t.name.clone() })
    }

    /// Replace the address `old` (if any; a failure to remove it is
    /// ignored, it may be gone already) with `new` (if any).
    pub fn set_address(&self, old: Option<IfAddr>, new: Option<IfAddr>) -> io::Result<()> {
        let mut nl = Netlink::open()?;
        if let Some(o) = old {
            let _ = nl.del_address(self.index, o);
        }
        if let Some(n) = new {
            nl.add_address(self.index, n).map_err(|e| ctx(e, || format!("adding {n} to {}", self.name)))?;
        }
        Ok(())
    }
}

/// Wait until one of `fds` is readable or `timeout_ms` passes; `ready[i]`
/// says whether `fds[i]` is (readable, or in error or hung up, so that a
/// read reports it). An interrupted wait returns with nothing ready.
pub fn wait(fds: &[&dyn AsFd], timeout_ms: u16, ready: &mut [bool]) -> io::Result<()> {
    let mut p: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f.as_fd(), PollFlags::POLLIN)).collect();
    ready.iter_mut().for_each(|r| *r = false);
    match poll(&mut p, PollTimeout::from(timeout_ms)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    for (i, pf) in p.iter().enumerate() {
        if let (Some(r), Some(ev)) = (ready.get_mut(i), pf.revents()) {
            *r = ev.intersects(PollFlags::POLLIN | PollFlags::POLLERR | PollFlags::POLLHUP);
        }
    }
    Ok(())
}
