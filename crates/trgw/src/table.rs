//! The flat relay table shared by the control plane and the workers.
//!
//! Every media stream has an id (`u32`, reused after deletion) and four
//! relay sockets, its *slots*: `slot = stream * 4 + k` with
//!
//! | k | socket                         | packets go out of |
//! |---|--------------------------------|-------------------|
//! | 0 | leg A RTP (faces the offerer)  | slot k^2 = 2      |
//! | 1 | leg A RTCP                     | 3                 |
//! | 2 | leg B RTP (faces the answerer) | 0                 |
//! | 3 | leg B RTCP                     | 1                 |
//!
//! A worker finds a slot from the epoll data word (the slot number) in
//! O(1); no per-packet search over sessions exists.
//!
//! [`RelayKey`] -> [`RelayValue`] pairs ([`crate::core::Core::relay_table`])
//! are a flat view of the same table for tests and status: the local
//! address and port a packet arrives on, which local address/port it is
//! sent from, to whom, and which counters slot it bumps (`stats_index` =
//! slot number). They are not the XDP fast path's map: `trgw_relay` holds
//! `xdp::types::RelayKey` -> `xdp::types::RelayValue` (`struct
//! v6g_relay_key` -> `struct v6g_relay`, generated from crates/xdp's
//! contract), written from [`crate::core::FastLeg`] by `xdp::trgw::Leg::entry`
//! with the latched far end and the precomputed checksum sums as well.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters of one relay socket (one direction of one leg).
#[derive(Debug, Default)]
pub struct SlotStats {
    /// Packets received and relayed.
    pub packets: AtomicU64,
    /// Bytes received and relayed (UDP payload).
    pub bytes: AtomicU64,
    /// Packets dropped (unexpected source in strict mode, no peer yet,
    /// send error, family mismatch).
    pub dropped: AtomicU64,
    /// RTP packets lost (sequence gaps, RFC 3550 A.3).
    pub lost: AtomicU64,
    /// Interarrival jitter (RFC 3550 A.8), RTP clock units.
    pub jitter: AtomicU32,
    /// Time of the last packet, ns since the relay's epoch (0: none).
    pub last_ns: AtomicU64,
    /// The address packets were last latched from (symmetric latching).
    pub latched: Mutex<Option<SocketAddr>>,
}

/// Counters of the four slots of a stream.
#[derive(Debug, Default)]
pub struct StreamStats {
    /// Indexed by k (see the module documentation).
    pub slots: [SlotStats; 4],
}

impl StreamStats {
    /// Latest packet time over all slots.
    pub fn last_ns(&self) -> u64 {
        self.slots.iter().map(|s| s.last_ns.load(Relaxed)).max().unwrap_or(0)
    }
}

/// Where a packet arrives. IPv4 addresses are stored IPv4-mapped
/// (`::ffff:a.b.c.d`), ports in network byte order.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RelayKey {
    /// Local address, IPv6 or IPv4-mapped.
    pub addr: [u8; 16],
    /// Local UDP port, big endian.
    pub port_be: u16,
    /// 4 or 6.
    pub family: u8,
    /// Zero.
    pub pad: u8,
}

/// How to forward it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayValue {
    /// Local address to send from (IPv6 or IPv4-mapped).
    pub src_addr: [u8; 16],
    /// Far end's address (IPv6 or IPv4-mapped).
    pub dst_addr: [u8; 16],
    /// Local port to send from, big endian.
    pub src_port_be: u16,
    /// Far end's port, big endian.
    pub dst_port_be: u16,
    /// Family of the egress side, 4 or 6.
    pub family: u8,
    /// Bit 0: strict latching (drop packets from other sources).
    pub flags: u8,
    /// Zero.
    pub pad: u16,
    /// Counters slot (stream * 4 + k).
    pub stats_index: u32,
}

fn mapped(ip: IpAddr) -> ([u8; 16], u8) {
    match ip {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped().octets(), 4),
        IpAddr::V6(v6) => (v6.octets(), 6),
    }
}

impl RelayKey {
    /// Key for a local socket address.
    pub fn new(local: SocketAddr) -> Self {
        let (addr, family) = mapped(local.ip());
        RelayKey { addr, port_be: local.port().to_be(), family, pad: 0 }
    }
}

impl RelayValue {
    /// Value: send from `src` to `dst`, counting in `stats_index`.
    pub fn new(src: SocketAddr, dst: SocketAddr, strict: bool, stats_index: u32) -> Self {
        let (src_addr, family) = mapped(src.ip());
        let (dst_addr, _) = mapped(dst.ip());
        RelayValue {
            src_addr,
            dst_addr,
            src_port_be: src.port().to_be(),
            dst_port_be: dst.port().to_be(),
            family,
            flags: u8::from(strict),
            pad: 0,
            stats_index,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_layout_is_fixed() {
        assert_eq!(std::mem::size_of::<RelayKey>(), 20);
        assert_eq!(std::mem::size_of::<RelayValue>(), 44);
        let k = RelayKey::new("192.0.2.1:30000".parse().unwrap());
        assert_eq!(&k.addr[10..], &[0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(u16::from_be(k.port_be), 30000);
        assert_eq!(k.family, 4);
    }
}
