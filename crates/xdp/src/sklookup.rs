//! The TrGW's shared-socket media mode: `bpf/sklookup.bpf.c`, a
//! `BPF_PROG_TYPE_SK_LOOKUP` program attached (bpf_link) to the caller's
//! network namespace, steers UDP packets to the media ports the relay
//! allocated onto a few shared sockets held in a SOCKMAP, so the relay
//! needs no socket per port (see docs/trgw.md, "Shared media sockets").
//!
//! The relay inserts a port with [`SkLookup::insert`] when it allocates
//! it and removes it when it frees it: ports not in the map go through the
//! kernel's normal socket lookup, untouched.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::maps::{HashMap, MapData, PerCpuArray, SockMap};
use aya::programs::SkLookup as SkLookupProg;
use aya::{Ebpf, EbpfLoader};

use crate::loader::{chain, map_err};
use crate::types::{SkCounter, SkKey};
use crate::Error;

/// The BPF object built by build.rs from `bpf/sklookup.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sklookup.bpf.o"));

const PORTS: &str = "trgw_sk_ports";
const SOCKS: &str = "trgw_sk_socks";
const COUNTERS: &str = "trgw_sk_counters";
const PROG: &str = "trgw_sk_lookup";

/// Entries one batch call of [`SkLookup::insert_many`] or
/// [`SkLookup::remove_many`] carries (longer slices take several calls).
const BATCH: usize = 16;

/// Map key of one steered port (`struct v6g_sk_key`, [`SkKey`]): the
/// address in network order, IPv4-mapped for IPv4; the port in network
/// order; the family (4 or 6); a zero byte.
pub type PortKey = SkKey;

/// The key of local address `local`.
pub fn port_key(local: SocketAddr) -> PortKey {
    let (addr, family) = match local {
        SocketAddr::V4(a) => (a.ip().to_ipv6_mapped().octets(), 4u8),
        SocketAddr::V6(a) => (a.ip().octets(), 6u8),
    };
    let mut words = [0u32; 4];
    for (w, b) in words.iter_mut().zip(addr.chunks_exact(4)) {
        *w = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    }
    SkKey { addr: words, port_be: local.port().to_be(), family, pad: 0 }
}

/// What the program did, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkCounts {
    /// Packets assigned to a shared socket.
    pub steered: u64,
    /// Packets to an allocated port whose shared socket was missing (they
    /// went on to the normal lookup).
    pub no_socket: u64,
    /// Packets `bpf_sk_assign` refused (they went on to the normal lookup).
    pub assign_failed: u64,
}

/// The loaded and attached program and its maps. Dropping it detaches the
/// program (the bpf_link is closed).
pub struct SkLookup {
    bpf: Ebpf,
    sockets: u32,
}

impl std::fmt::Debug for SkLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkLookup").field("sockets", &self.sockets).finish()
    }
}

impl SkLookup {
    /// Loads the program with room for `ports` steered ports and `sockets`
    /// shared sockets, and attaches it to the calling thread's network
    /// namespace. [`Error::Unavailable`] names the kernel's reason when
    /// that is impossible (sk_lookup needs Linux >= 5.9, CAP_BPF and
    /// CAP_NET_ADMIN).
    pub fn attach(ports: u32, sockets: u32) -> Result<SkLookup, Error> {
        if ports == 0 || sockets == 0 {
            return Err(Error::Config("sk_lookup: room for at least one port and one socket is needed".into()));
        }
        let mut bpf = EbpfLoader::new()
            .map_max_entries(PORTS, ports)
            .map_max_entries(SOCKS, sockets)
            .load(OBJECT)
            .map_err(|e| Error::Unavailable(format!("loading the sk_lookup object: {}", chain(&e))))?;
        let netns = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(|e| Error::Unavailable(format!("opening this thread's network namespace: {e}")))?;
        let p: &mut SkLookupProg = bpf
            .program_mut(PROG)
            .ok_or_else(|| Error::Bpf(format!("program {PROG} missing from the object")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {PROG}: {e}")))?;
        p.load().map_err(|e| Error::Unavailable(format!("loading program {PROG}: {}", chain(&e))))?;
        p.attach(netns)
            .map_err(|e| Error::Unavailable(format!("attaching {PROG} to the network namespace: {}", chain(&e))))?;
        Ok(SkLookup { bpf, sockets })
    }

    fn ports(&mut self) -> Result<HashMap<&mut MapData, PortKey, u32>, Error> {
        let m = self.bpf.map_mut(PORTS).ok_or(Error::Bpf(format!("map {PORTS} missing")))?;
        HashMap::try_from(m).map_err(|e| map_err(PORTS, e))
    }

    /// Puts `sock` (a bound, unconnected UDP socket) at `index` of the
    /// socket map: ports inserted with that index are steered to it.
    pub fn set_socket(&mut self, index: u32, sock: &impl AsRawFd) -> Result<(), Error> {
        if index >= self.sockets {
            return Err(Error::Config(format!("sk_lookup: socket index {index} beyond {}", self.sockets)));
        }
        let m = self.bpf.map_mut(SOCKS).ok_or(Error::Bpf(format!("map {SOCKS} missing")))?;
        let mut socks: SockMap<&mut MapData> = SockMap::try_from(m).map_err(|e| map_err(SOCKS, e))?;
        socks.set(index, sock, 0).map_err(|e| map_err(SOCKS, e))
    }

    /// Steers UDP packets to `local` to the socket at `index`.
    pub fn insert(&mut self, local: SocketAddr, index: u32) -> Result<(), Error> {
        self.ports()?.insert(port_key(local), index, 0).map_err(|e| map_err(PORTS, e))
    }

    /// Stops steering `local`; false when it was not steered.
    pub fn remove(&mut self, local: SocketAddr) -> Result<bool, Error> {
        match self.ports()?.remove(&port_key(local)) {
            Ok(()) => Ok(true),
            Err(aya::maps::MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(map_err(PORTS, e)),
        }
    }

    /// The ports map's descriptor, for the batch calls.
    fn ports_fd(&self) -> Result<BorrowedFd<'_>, Error> {
        match self.bpf.map(PORTS) {
            Some(aya::maps::Map::HashMap(m)) => Ok(m.fd().as_fd()),
            Some(_) => Err(Error::Bpf(format!("map {PORTS} is not a hash map"))),
            None => Err(Error::Bpf(format!("map {PORTS} missing"))),
        }
    }

    /// Steers each `(local, index)` of `entries` as [`SkLookup::insert`]
    /// does, with one `bpf(2)` call (`BPF_MAP_UPDATE_BATCH`) for them all.
    /// On an error the entries before the failing one are steered.
    pub fn insert_many(&mut self, entries: &[(SocketAddr, u32)]) -> Result<(), Error> {
        let mut keys = [SkKey::default(); BATCH];
        let mut values = [0u32; BATCH];
        for chunk in entries.chunks(BATCH) {
            for (i, &(local, index)) in chunk.iter().enumerate() {
                keys[i] = port_key(local);
                values[i] = index;
            }
            let n = chunk.len();
            crate::sys::map_update_batch(self.ports_fd()?, &keys[..n], &values[..n]).map_err(|(done, e)| {
                Error::Bpf(format!("map {PORTS}: batch update failed after {done} of {n}: {e}"))
            })?;
        }
        Ok(())
    }

    /// Stops steering every port of `locals` with one `bpf(2)` call
    /// (`BPF_MAP_DELETE_BATCH`) when all are steered; returns how many
    /// were (ports not steered are skipped, as [`SkLookup::remove`] does).
    pub fn remove_many(&mut self, locals: &[SocketAddr]) -> Result<usize, Error> {
        let mut keys = [SkKey::default(); BATCH];
        let mut removed = 0;
        for chunk in locals.chunks(BATCH) {
            for (k, &l) in keys.iter_mut().zip(chunk) {
                *k = port_key(l);
            }
            removed += crate::sys::map_delete_batch(self.ports_fd()?, &keys[..chunk.len()])
                .map_err(|e| Error::Bpf(format!("map {PORTS}: batch delete failed: {e}")))?;
        }
        Ok(removed)
    }

    /// Where `local` is steered to, if it is.
    pub fn get(&self, local: SocketAddr) -> Result<Option<u32>, Error> {
        let m = self.bpf.map(PORTS).ok_or(Error::Bpf(format!("map {PORTS} missing")))?;
        let ports: HashMap<&MapData, PortKey, u32> = HashMap::try_from(m).map_err(|e| map_err(PORTS, e))?;
        match ports.get(&port_key(local), 0) {
            Ok(i) => Ok(Some(i)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(PORTS, e)),
        }
    }

    /// The program's counters, summed over CPUs.
    pub fn counters(&self) -> Result<SkCounts, Error> {
        let m = self.bpf.map(COUNTERS).ok_or(Error::Bpf(format!("map {COUNTERS} missing")))?;
        let a: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(m).map_err(|e| map_err(COUNTERS, e))?;
        let sum = |c: SkCounter| -> Result<u64, Error> {
            Ok(a.get(&(c as u32), 0).map_err(|e| map_err(COUNTERS, e))?.iter().sum())
        };
        Ok(SkCounts {
            steered: sum(SkCounter::Steered)?,
            no_socket: sum(SkCounter::NoSocket)?,
            assign_failed: sum(SkCounter::AssignFailed)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's bytes as the kernel sees them (`struct v6g_sk_key`).
    fn bytes(k: &PortKey) -> Vec<u8> {
        let mut v: Vec<u8> = k.addr.iter().flat_map(|w| w.to_ne_bytes()).collect();
        v.extend(k.port_be.to_ne_bytes());
        v.extend([k.family, k.pad]);
        v
    }

    #[test]
    fn keys_match_the_c_layout() {
        let k = bytes(&port_key("192.0.2.1:30000".parse().unwrap()));
        assert_eq!(&k[..16], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(&k[16..], &[0x75, 0x30, 4, 0], "port big endian, family 4, zero pad");
        let k = bytes(&port_key("[2001:db8::1]:30001".parse().unwrap()));
        assert_eq!(k[0..2], [0x20, 0x01]);
        assert_eq!(k[15], 1);
        assert_eq!(&k[16..], &[0x75, 0x31, 6, 0]);
        assert_ne!(
            port_key("[::ffff:192.0.2.1]:30000".parse().unwrap()),
            port_key("192.0.2.1:30000".parse().unwrap()),
            "an IPv4-mapped IPv6 address is not the IPv4 address"
        );
    }
}
