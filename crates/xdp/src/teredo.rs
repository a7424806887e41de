//! The Teredo relay fast path (`bpf/teredo.bpf.c`, `bpf/teredo.h`): its
//! own BPF object and maps, loaded by the relay's runner (crates/tunnel)
//! when its `xdp` key asks for it.
//!
//! The slow path (the relay core) keeps the trust procedure and writes a
//! peer here when it trusts it ([`TeredoFastPath::peer_insert`]), removes
//! it on expiry, and reads [`TeredoFastPath::peer_last_seen`] to keep a
//! peer whose packets only the fast path saw alive. Same loader pattern as
//! [`crate::FastPath`]: aya, attach through bpf_link (native with a
//! generic fallback), detach on drop.

use crate::loader::{attach_link, chain, map_err, per_cpu_sum, test_run_once};
use crate::types::Count;
use crate::{Attachment, Error, Mode, TestResult};
use aya::maps::{Array, DevMapHash, HashMap, MapData, MapError, PerCpuArray};
use aya::programs::Xdp;
use aya::{Ebpf, EbpfLoader};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::collections::BTreeSet;

/// The BPF object built by build.rs from `bpf/teredo.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/teredo.bpf.o"));

/// The program (attached to both sides).
pub const PROGRAM: &str = "xdp_teredo";
const CONFIG: &str = "teredo_config";
const PEERS: &str = "teredo_peers";
const COUNTERS: &str = "teredo_counters";
const TX: &str = "teredo_tx";
const IFMAC: &str = "teredo_ifmac";

/// `struct td_config`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TdConfig {
    /// The relay's IPv4 address, network order.
    pub relay_addr: u32,
    /// Its UDP port, network order.
    pub relay_port: u16,
    /// `TD_F_ON`.
    pub flags: u16,
    /// The Teredo prefix's first 32 bits.
    pub prefix_hi32: u32,
    /// Largest IPv6 packet to a client (the relay TUN's MTU).
    pub mtu6: u32,
    /// Outer TTL.
    pub ttl: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct td_peer`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TdPeer {
    /// Mapped IPv4 address, network order.
    pub addr: u32,
    /// Mapped port, network order.
    pub port: u16,
    /// Zero.
    pub pad: u16,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) of the last packet
    /// decapsulated from the peer; 0 when none yet.
    pub last_seen_ns: u64,
}

/// `struct td_mac`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TdMac {
    /// The MAC address.
    pub addr: [u8; 6],
    /// Zero.
    pub pad: u16,
}

const _: () = assert!(core::mem::size_of::<TdMac>() == 8);
const _: () = assert!(core::mem::size_of::<TdConfig>() == 24);
const _: () = assert!(core::mem::size_of::<TdPeer>() == 16);

const TD_F_ON: u16 = 1;

macro_rules! reasons {
    ($($(#[$m:meta])* $v:ident = $i:expr, $label:expr;)*) => {
        /// The fast path's counters (`TD_C_*`, `TD_P_*` in bpf/teredo.h).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u32)]
        pub enum TeredoCounter { $($(#[$m])* $v = $i,)* }
        impl TeredoCounter {
            /// Every counter, in index order.
            pub const ALL: &'static [TeredoCounter] = &[$(TeredoCounter::$v,)*];
            /// The counter's name in status, metrics and docs.
            pub fn label(self) -> &'static str {
                match self { $(TeredoCounter::$v => $label,)* }
            }
        }
    };
}

reasons! {
    /// IPv4 to IPv6: decapsulated and forwarded.
    Decap = 0, "decap";
    /// IPv6 to IPv4: encapsulated and forwarded.
    Encap = 1, "encap";
    /// Passed: neither IPv4 nor IPv6.
    PassNotIp = 2, "pass-not-ip";
    /// Passed: not UDP to the relay, or not to the Teredo prefix.
    PassNotTeredo = 3, "pass-not-teredo";
    /// Passed: truncated, lengths disagree, trailing bytes.
    PassMalformed = 4, "pass-malformed";
    /// Passed: outer IPv4 options.
    PassIpv4Options = 5, "pass-ipv4-options";
    /// Passed: outer IPv4 fragment or inner Fragment header.
    PassFragment = 6, "pass-fragment";
    /// Passed: origin indication or authentication header.
    PassIndicator = 7, "pass-indicator";
    /// Passed: a bubble (Next Header 59).
    PassBubble = 8, "pass-bubble";
    /// Passed: no trusted-peer entry.
    PassUntrusted = 9, "pass-untrusted";
    /// Passed: a trusted peer's address from another mapping.
    PassSpoofed = 10, "pass-spoofed";
    /// Passed: IPv4 header or UDP checksum does not verify.
    PassChecksum = 11, "pass-checksum";
    /// Passed: ICMPv6.
    PassIcmp = 12, "pass-icmp";
    /// Passed: hop limit 1 or 0.
    PassHopLimit = 13, "pass-hop-limit";
    /// Passed: over the Teredo MTU or the egress MTU.
    PassTooBig = 14, "pass-too-big";
    /// Passed: Teredo to Teredo, non-global destination, link-scope source.
    PassAddress = 15, "pass-address";
    /// Passed: no route or neighbour.
    PassFib = 16, "pass-fib";
    /// Passed: the egress interface is not one the fast path is attached to.
    PassEgress = 17, "pass-egress";
    /// Passed: no configuration.
    PassDisabled = 18, "pass-disabled";
    /// Passed: the Ethernet destination is not the interface's (or is multicast).
    PassOtherHost = 19, "pass-other-host";
}

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
    bpf: Ebpf,
    settings: TeredoSettings,
    attached: Vec<Attachment>,
    egress: BTreeSet<u32>,
}

impl std::fmt::Debug for TeredoFastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeredoFastPath").field("settings", &self.settings).field("attached", &self.attached).finish()
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
        let mut bpf = EbpfLoader::new()
            .map_max_entries(PEERS, settings.max_peers.max(1))
            .load(OBJECT)
            .map_err(|e| Error::Unavailable(format!("loading the Teredo BPF object: {}", chain(&e))))?;
        let p: &mut Xdp = bpf
            .program_mut(PROGRAM)
            .ok_or_else(|| Error::Bpf(format!("program {PROGRAM} missing from the object")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {PROGRAM}: {e}")))?;
        p.load().map_err(|e| Error::Unavailable(format!("loading program {PROGRAM}: {}", chain(&e))))?;
        let mut fp = TeredoFastPath { bpf, settings, attached: Vec::new(), egress: BTreeSet::new() };
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
        self.bpf.map_mut(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    fn map(&self, name: &'static str) -> Result<&aya::maps::Map, Error> {
        self.bpf.map(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    fn xdp_mut(&mut self) -> Result<&mut Xdp, Error> {
        self.bpf
            .program_mut(PROGRAM)
            .ok_or_else(|| Error::Bpf(format!("program {PROGRAM} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {PROGRAM}: {e}")))
    }

    /// Let the program send through `ifindex` (attach does it for each
    /// interface attached to; tests use it alone with BPF_PROG_TEST_RUN).
    pub fn allow_egress(&mut self, ifindex: u32) -> Result<(), Error> {
        let mut m: DevMapHash<&mut MapData> =
            DevMapHash::try_from(self.map_mut(TX)?).map_err(|e| Error::Bpf(format!("map {TX}: {e}")))?;
        m.insert(ifindex, ifindex, None, 0).map_err(|e| match e {
            aya::maps::xdp::XdpMapError::MapError(e) => map_err(TX, e),
            e => Error::Bpf(format!("map {TX}: {e}")),
        })?;
        self.egress.insert(ifindex);
        Ok(())
    }

    /// Accept frames on `ifindex` only when addressed to `mac` (attach
    /// records each interface's own; without an entry any unicast
    /// destination is accepted).
    pub fn set_interface_mac(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<(), Error> {
        let mut m: HashMap<&mut MapData, u32, TdMac> =
            HashMap::try_from(self.map_mut(IFMAC)?).map_err(|e| Error::Bpf(format!("map {IFMAC}: {e}")))?;
        m.insert(ifindex, TdMac { addr: mac, pad: 0 }, 0).map_err(|e| map_err(IFMAC, e))
    }

    /// Attach to `iface` (of the caller's network namespace), record its
    /// MAC address and allow it as an egress. `Mode::Off` attaches nothing
    /// and returns `None`.
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<Option<&Attachment>, Error> {
        if mode == Mode::Off {
            return Ok(None);
        }
        let ifindex =
            crate::sys::if_index(iface).ok_or_else(|| Error::Interface(format!("{iface}: no such interface")))?;
        if self.attached.iter().any(|a| a.ifindex == ifindex) {
            return Err(Error::Interface(format!("{iface}: already attached")));
        }
        let (link, used, fallback) = attach_link(self.xdp_mut()?, iface, ifindex, mode)?;
        self.attached.push(Attachment {
            iface: iface.to_owned(),
            ifindex,
            program: PROGRAM,
            mode: used,
            fallback,
            link,
        });
        let mac = interface_mac(iface);
        if let Err(e) = mac.and_then(|m| self.set_interface_mac(ifindex, m)).and_then(|()| self.allow_egress(ifindex)) {
            let _ = self.detach(iface);
            return Err(e);
        }
        Ok(self.attached.last())
    }

    /// Detach from `iface`; false when it was not attached.
    pub fn detach(&mut self, iface: &str) -> Result<bool, Error> {
        let Some(i) = self.attached.iter().position(|a| a.iface == iface) else { return Ok(false) };
        let a = self.attached.remove(i);
        self.xdp_mut()?
            .detach(a.link)
            .map_err(|e| Error::Interface(format!("{iface}: detach failed: {}", chain(&e))))?;
        Ok(true)
    }

    /// Detach from every interface.
    pub fn detach_all(&mut self) -> Result<(), Error> {
        let names: Vec<String> = self.attached.iter().map(|a| a.iface.clone()).collect();
        for n in names {
            self.detach(&n)?;
        }
        Ok(())
    }

    /// The attachments in force.
    pub fn attachments(&self) -> &[Attachment] {
        &self.attached
    }

    /// Trust `peer` (a Teredo address) at `mapped`: its packets from that
    /// mapping, and packets to it, take the fast path. Replaces an entry
    /// (its last-seen time restarts). [`Error::MapFull`] when the map is full.
    pub fn peer_insert(&mut self, peer: Ipv6Addr, mapped: SocketAddrV4) -> Result<(), Error> {
        let mut m: HashMap<&mut MapData, [u8; 16], TdPeer> =
            HashMap::try_from(self.map_mut(PEERS)?).map_err(|e| Error::Bpf(format!("map {PEERS}: {e}")))?;
        let v = TdPeer { addr: u32::from(*mapped.ip()).to_be(), port: mapped.port().to_be(), pad: 0, last_seen_ns: 0 };
        m.insert(peer.octets(), v, 0).map_err(|e| map_err(PEERS, e))
    }

    /// Remove `peer`; false when absent.
    pub fn peer_remove(&mut self, peer: Ipv6Addr) -> Result<bool, Error> {
        let mut m: HashMap<&mut MapData, [u8; 16], TdPeer> =
            HashMap::try_from(self.map_mut(PEERS)?).map_err(|e| Error::Bpf(format!("map {PEERS}: {e}")))?;
        match m.remove(&peer.octets()) {
            Ok(()) => Ok(true),
            Err(MapError::KeyNotFound) => Ok(false),
            Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(map_err(PEERS, e)),
        }
    }

    /// `peer`'s mapping and last-seen time (CLOCK_MONOTONIC ns, 0 when the
    /// fast path has decapsulated nothing from it), or `None` when absent.
    pub fn peer_get(&self, peer: Ipv6Addr) -> Result<Option<(SocketAddrV4, u64)>, Error> {
        let m: HashMap<&MapData, [u8; 16], TdPeer> =
            HashMap::try_from(self.map(PEERS)?).map_err(|e| Error::Bpf(format!("map {PEERS}: {e}")))?;
        match m.get(&peer.octets(), 0) {
            Ok(v) => Ok(Some((
                SocketAddrV4::new(Ipv4Addr::from(u32::from_be(v.addr)), u16::from_be(v.port)),
                v.last_seen_ns,
            ))),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(map_err(PEERS, e)),
        }
    }

    /// `peer`'s last-seen time ([`Self::peer_get`]); `None` when absent or never seen.
    pub fn peer_last_seen(&self, peer: Ipv6Addr) -> Result<Option<u64>, Error> {
        Ok(self.peer_get(peer)?.map(|(_, t)| t).filter(|t| *t != 0))
    }

    /// The counters summed over CPUs, in [`TeredoCounter::ALL`] order.
    pub fn counters(&self) -> Result<Vec<(TeredoCounter, Count)>, Error> {
        let a: PerCpuArray<&MapData, Count> =
            PerCpuArray::try_from(self.map(COUNTERS)?).map_err(|e| Error::Bpf(format!("map {COUNTERS}: {e}")))?;
        let mut out = Vec::with_capacity(TeredoCounter::ALL.len());
        for &c in TeredoCounter::ALL {
            let v = a.get(&(c as u32), 0).map_err(|e| map_err(COUNTERS, e))?;
            out.push((c, per_cpu_sum(&v)));
        }
        Ok(out)
    }

    /// The program over `frame` with `BPF_PROG_TEST_RUN`, as received on
    /// `ingress_ifindex` (not live: nothing is sent).
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32, repeat: u32) -> Result<TestResult, Error> {
        let p: &Xdp = self
            .bpf
            .program(PROGRAM)
            .ok_or_else(|| Error::Bpf(format!("program {PROGRAM} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {PROGRAM}: {e}")))?;
        test_run_once(p, frame, ingress_ifindex, repeat)
    }
}

/// `iface`'s MAC address.
fn interface_mac(iface: &str) -> Result<[u8; 6], Error> {
    crate::sys::if_mac(iface).map_err(|e| Error::Interface(format!("{iface}: its MAC address: {e}")))
}

impl Drop for TeredoFastPath {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_dense_and_labelled_once() {
        for (i, c) in TeredoCounter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        let mut labels: Vec<_> = TeredoCounter::ALL.iter().map(|c| c.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), TeredoCounter::ALL.len());
        // bpf/teredo.h's TD_COUNTERS.
        assert_eq!(TeredoCounter::ALL.len(), 20);
    }

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
