//! NAT64's port-block memory over the XDP fast path: the translator's
//! [`nat64::PortBlockMem`] (the trait is nat64's) implemented on the
//! program's `n64_blocks` and `n64_hosts` ([`xdp::nat64::Natpt`]). It lives
//! here, where both crates meet, so that `xdp` depends on no state crate
//! (as crates/softwire's `B4Blocks` does for the DS-Lite AFTR).

use nat64::PortBlockMem;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use xdp::nat64::Natpt;

/// `n64_blocks` as the block book's memory.
#[derive(Debug)]
struct N64Blocks(Arc<Natpt>);

impl PortBlockMem for N64Blocks {
    fn size(&self) -> u16 {
        self.0.block_size()
    }
    fn slots(&self) -> u32 {
        self.0.block_slots()
    }
    fn write(&self, slot: u32, addr: Ipv4Addr, base: u16, size: u16) {
        self.0.block_write(slot, addr, base, size)
    }
    fn take(&self, slot: u32, size: u16, hint: u32) -> Option<u16> {
        self.0.block_take(slot, size, hint)
    }
    fn give(&self, slot: u32, i: u16) {
        self.0.block_give(slot, i)
    }
    fn in_use(&self, slot: u32) -> u32 {
        self.0.block_in_use(slot)
    }
    fn list(&self, x: Ipv6Addr, slots: &[u32]) {
        self.0.list_blocks(x, slots)
    }
}

/// The port blocks of `pt` for the translator; `None` when it has none
/// (block size 0: NAT64 session creation in XDP is off).
pub(crate) fn n64(pt: &Arc<Natpt>) -> Option<Arc<dyn PortBlockMem>> {
    (pt.block_size() > 0).then(|| Arc::new(N64Blocks(pt.clone())) as Arc<dyn PortBlockMem>)
}
