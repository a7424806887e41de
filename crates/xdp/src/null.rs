//! The do-nothing XDP program of `bench xlat`'s `null-xdp` DUT
//! (`bpf/null.bpf.c`): attached to two ports, it redirects every frame out
//! of the other one unchanged. What it forwards is the path's physical
//! limit (veth in, one XDP program, a devmap redirect, veth out), against
//! which the fast path's figures read as fractions.

use crate::loader::{attach_link, chain, load_xdp, xdp_mut};
use crate::{Error, Mode};
use aya::maps::DevMapHash;
use aya::programs::xdp::XdpLinkId;
use aya::{Ebpf, EbpfLoader};

/// The BPF object built by build.rs from `bpf/null.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/null.bpf.o"));

const PROG: &str = "xdp_null";
const PEER: &str = "null_peer";

/// The null program attached to a pair of ports (detached on drop).
pub struct NullRedirect {
    bpf: Ebpf,
    links: Vec<XdpLinkId>,
    modes: Vec<Mode>,
}

impl std::fmt::Debug for NullRedirect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NullRedirect").field("modes", &self.modes).finish()
    }
}

impl NullRedirect {
    /// Loads the program and attaches it to `a` and `b` (interfaces of the
    /// calling thread's namespace; native XDP, generic where the driver
    /// has none), each port's frames redirected out of the other.
    pub fn attach(a: &str, b: &str) -> Result<NullRedirect, Error> {
        let index = |i: &str| crate::sys::if_index(i).ok_or_else(|| Error::Interface(format!("no interface {i}")));
        let (ia, ib) = (index(a)?, index(b)?);
        let mut bpf = EbpfLoader::new()
            .load(OBJECT)
            .map_err(|e| Error::Unavailable(format!("loading the null object: {}", chain(&e))))?;
        {
            let map = bpf.map_mut(PEER).ok_or_else(|| Error::Bpf(format!("map {PEER} missing from the object")))?;
            let mut peers = DevMapHash::try_from(map).map_err(|e| Error::Bpf(format!("map {PEER}: {e}")))?;
            for (from, to) in [(ia, ib), (ib, ia)] {
                peers.insert(from, to, None, 0).map_err(|e| Error::Bpf(format!("map {PEER}: {e}")))?;
            }
        }
        load_xdp(&mut bpf, PROG)?;
        let mut r = NullRedirect { bpf, links: Vec::new(), modes: Vec::new() };
        for (iface, ifindex) in [(a, ia), (b, ib)] {
            let (link, mode, _) = attach_link(xdp_mut(&mut r.bpf, PROG)?, iface, ifindex, Mode::Native)?;
            r.links.push(link);
            r.modes.push(mode);
        }
        Ok(r)
    }

    /// The attach mode of each port, in the order given.
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }
}

impl Drop for NullRedirect {
    fn drop(&mut self) {
        for link in std::mem::take(&mut self.links) {
            if let Ok(p) = xdp_mut(&mut self.bpf, PROG) {
                // An interface already gone took its link with it.
                let _ = p.detach(link);
            }
        }
    }
}
