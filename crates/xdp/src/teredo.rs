//! The Teredo relay fast path (`bpf/teredo.bpf.c`, its map types in
//! [`crate::types`]): its
//! own BPF object and maps, loaded by the relay's runner (crates/tunnel)
//! when its `xdp` key asks for it.
//!
//! The slow path (the relay core) keeps the trust procedure and writes a
//! peer here when it trusts it ([`TeredoFastPath::peer_insert`]), removes
//! it on expiry, and reads [`TeredoFastPath::peer_last_seen`] to keep a
//! peer whose packets only the fast path saw alive. Same loader pattern as
//! [`crate::FastPath`]: aya, attach through bpf_link (native with a
//! generic fallback), detach on drop.

use crate::loader::{found, map_err};
use crate::single::{Names, Single};
use crate::types::Count;
use crate::{Attachment, Error, Mode, TestResult};
use aya::maps::{Array, MapData, MapError};
use aya::EbpfLoader;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// The BPF object built by build.rs from `bpf/teredo.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/teredo.bpf.o"));

/// The program (attached to both sides).
pub const PROGRAM: &str = "xdp_teredo";
const CONFIG: &str = "teredo_config";
const PEERS: &str = "teredo_peers";
const COUNTERS: &str = "teredo_counters";
const TX: &str = "teredo_tx";
const IFMAC: &str = "teredo_ifmac";

use crate::types::TD_F_ON;
pub use crate::types::{TdConfig, TdPeer, TeredoCounter};

/// What the fast path needs of the relay's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeredoSettings {
    /// The relay's UDP socket (a specific address: the fast path writes it
    /// as the source of what it encapsulates).
    pub relay: SocketAddrV4,
    /// The Teredo prefix's first 32 bits.
    pub prefix_hi32: u32,
    /// The relay TUN device's MTU: larger IPv6 packets pass (the kernel
    /// answers them with Packet Too Big).
    pub mtu6: u32,
    /// Peer entries (the relay's max-peers).
    pub max_peers: u32,
}

/// The loaded Teredo fast path. Dropping it detaches every attachment.
pub struct TeredoFastPath {
    obj: Single,
    settings: TeredoSettings,
}

impl std::fmt::Debug for TeredoFastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeredoFastPath")
            .field("settings", &self.settings)
            .field("attached", &self.obj.attachments())
            .finish()
    }
}

fn bpf_err(map: &'static str) -> impl Fn(MapError) -> Error {
    move |e| Error::Bpf(format!("map {map}: {e}"))
}

/// The kernel's default TTL for a socket that sets none
/// (`net.ipv4.ip_default_ttl` of the caller's namespace; 64 when unreadable).
fn default_ttl() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_default_ttl")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|t| (1..=255).contains(t))
        .unwrap_or(64)
}

impl TeredoFastPath {
    /// Load the program and create its maps for `settings`.
    pub fn load(settings: TeredoSettings) -> Result<TeredoFastPath, Error> {
        if settings.relay.ip().is_unspecified() || settings.relay.port() == 0 {
            return Err(Error::Config(format!(
                "the Teredo fast path needs the relay bound to a specific IPv4 address and port, not {}",
                settings.relay
            )));
        }
        let names =
            Names { object: "the Teredo BPF object", program: PROGRAM, tx: TX, ifmac: IFMAC, counters: COUNTERS };
        let obj = Single::load(EbpfLoader::new().map_max_entries(PEERS, settings.max_peers.max(1)), OBJECT, names)?;
        let mut fp = TeredoFastPath { obj, settings };
        let cfg = TdConfig {
            relay_addr: u32::from(*settings.relay.ip()).to_be(),
            relay_port: settings.relay.port().to_be(),
            flags: TD_F_ON,
            prefix_hi32: settings.prefix_hi32,
            mtu6: settings.mtu6,
            ttl: default_ttl(),
            pad: 0,
        };
        let mut a: Array<&mut MapData, TdConfig> =
            Array::try_from(fp.map_mut(CONFIG)?).map_err(|e| Error::Bpf(format!("map {CONFIG}: {e}")))?;
        a.set(0, cfg, 0).map_err(bpf_err(CONFIG))?;
        Ok(fp)
    }

    /// The settings in force.
    pub fn settings(&self) -> &TeredoSettings {
        &self.settings
    }

    fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, Error> {
        self.obj.map_mut(name)
    }

    /// Let the program send through `ifindex` (attach does it for each
    /// interface attached to; tests use it alone with BPF_PROG_TEST_RUN).
    pub fn allow_egress(&mut self, ifindex: u32) -> Result<(), Error> {
        self.obj.allow_egress(ifindex)
    }

    /// Accept frames on `ifindex` only when addressed to `mac` (attach
    /// records each interface's own; without an entry any unicast
    /// destination is accepted).
    pub fn set_interface_mac(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<(), Error> {
        self.obj.set_interface_mac(ifindex, mac)
    }

    /// Attach to `iface` (of the caller's network namespace), record its
    /// MAC address and allow it as an egress. `Mode::Off` attaches nothing
    /// and returns `None`.
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<Option<&Attachment>, Error> {
        self.obj.attach(iface, mode)
    }

    /// Detach from `iface`; false when it was not attached.
    pub fn detach(&mut self, iface: &str) -> Result<bool, Error> {
        self.obj.detach(iface)
    }

    /// Detach from every interface.
    pub fn detach_all(&mut self) -> Result<(), Error> {
        self.obj.detach_all()
    }

    /// The attachments in force.
    pub fn attachments(&self) -> &[Attachment] {
        self.obj.attachments()
    }

    /// Trust `peer` (a Teredo address) at `mapped`: its packets from that
    /// mapping, and packets to it, take the fast path. Replaces an entry
    /// (its last-seen time restarts). [`Error::MapFull`] when the map is full.
    pub fn peer_insert(&mut self, peer: Ipv6Addr, mapped: SocketAddrV4) -> Result<(), Error> {
        let mut m = self.obj.hash_mut::<[u8; 16], TdPeer>(PEERS)?;
        let v = TdPeer { addr: u32::from(*mapped.ip()).to_be(), port: mapped.port().to_be(), pad: 0, last_seen_ns: 0 };
        m.insert(peer.octets(), v, 0).map_err(|e| map_err(PEERS, e))
    }

    /// Remove `peer`; false when absent.
    pub fn peer_remove(&mut self, peer: Ipv6Addr) -> Result<bool, Error> {
        let mut m = self.obj.hash_mut::<[u8; 16], TdPeer>(PEERS)?;
        Ok(found(PEERS, m.remove(&peer.octets()))?.is_some())
    }

    /// `peer`'s mapping and last-seen time (CLOCK_MONOTONIC ns, 0 when the
    /// fast path has decapsulated nothing from it), or `None` when absent.
    pub fn peer_get(&self, peer: Ipv6Addr) -> Result<Option<(SocketAddrV4, u64)>, Error> {
        let m = self.obj.hash::<[u8; 16], TdPeer>(PEERS)?;
        Ok(found(PEERS, m.get(&peer.octets(), 0))?
            .map(|v| (SocketAddrV4::new(Ipv4Addr::from(u32::from_be(v.addr)), u16::from_be(v.port)), v.last_seen_ns)))
    }

    /// `peer`'s last-seen time ([`Self::peer_get`]); `None` when absent or never seen.
    pub fn peer_last_seen(&self, peer: Ipv6Addr) -> Result<Option<u64>, Error> {
        Ok(self.peer_get(peer)?.map(|(_, t)| t).filter(|t| *t != 0))
    }

    /// The counters summed over CPUs, in [`TeredoCounter::ALL`] order.
    pub fn counters(&self) -> Result<Vec<(TeredoCounter, Count)>, Error> {
        self.obj.counters(TeredoCounter::ALL, |c| c as u32)
    }

    /// The program over `frame` with `BPF_PROG_TEST_RUN`, as received on
    /// `ingress_ifindex` (not live: nothing is sent).
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32, repeat: u32) -> Result<TestResult, Error> {
        self.obj.test_run(frame, ingress_ifindex, repeat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_bind_is_refused_before_loading() {
        let s = TeredoSettings {
            relay: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 3544),
            prefix_hi32: 0x2001_0000,
            mtu6: 1500,
            max_peers: 16,
        };
        assert!(matches!(TeredoFastPath::load(s), Err(Error::Config(_))));
    }
}
