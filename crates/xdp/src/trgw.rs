//! TrGW relay legs in the contract's form: the `trgw_relay` entry that
//! mirrors one latched relay socket of `crates/trgw` (slot k of a stream:
//! packets arriving on it from its latched far end leave through slot
//! k ^ 2, see `trgw::table`).

use crate::types::{RelayKey, RelayValue, RELAY_OUT_KNOWN};
use crate::Error;
use core::net::{IpAddr, SocketAddr};
use xlat::checksum;

const IPPROTO_UDP: u8 = 17;

fn addr16(a: IpAddr) -> ([u8; 16], u8) {
    match a {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped().octets(), 4),
        IpAddr::V6(v6) => (v6.octets(), 6),
    }
}

/// The one's-complement sum of an address as it sits in its IP header.
fn addr_sum(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v4) => checksum::sum_v4(v4),
        IpAddr::V6(v6) => checksum::sum_v6(&v6),
    }
}

/// The header sums the program would otherwise compute per packet:
/// (`in_pseudo`, `csum_delta`, `ip_sum`), host order (see `RelayValue`).
fn sums(local: SocketAddr, latched: SocketAddr, out_local: SocketAddr, out_peer: SocketAddr) -> (u16, u16, u16) {
    let udp = u64::from(IPPROTO_UDP);
    let in_pseudo = checksum::fold(addr_sum(latched.ip()) + addr_sum(local.ip()) + udp);
    let old = addr_sum(latched.ip()) + addr_sum(local.ip()) + u64::from(latched.port()) + u64::from(local.port());
    let new =
        addr_sum(out_local.ip()) + addr_sum(out_peer.ip()) + u64::from(out_local.port()) + u64::from(out_peer.port());
    let delta = checksum::fold(u64::from(!checksum::fold(old)) + u64::from(checksum::fold(new)));
    // As Linux sends on an unconnected UDP socket: version 4, IHL 5, TOS 0,
    // Identification 0, DF, TTL 64 (RELAY_TTL in bpf/trgw.h), UDP.
    let ip_sum = match (out_local.ip(), out_peer.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            checksum::fold(0x4500 + 0x4000 + (64 << 8 | udp) + checksum::sum_v4(s) + checksum::sum_v4(d))
        }
        _ => 0,
    };
    (in_pseudo, delta, ip_sum)
}

/// One relay leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leg {
    /// Our relay socket packets arrive on.
    pub local: SocketAddr,
    /// The far end latched on it (the only source the fast path accepts).
    pub latched: SocketAddr,
    /// Our socket on the other leg (the new source).
    pub out_local: SocketAddr,
    /// The other leg's far end (the new destination); `None` while unknown.
    pub out_peer: Option<SocketAddr>,
    /// Counters slot (stream * 4 + k, as `trgw::table`).
    pub stats_index: u32,
}

impl Leg {
    /// The map entry. Fails when the families of a leg disagree.
    pub fn entry(&self) -> Result<(RelayKey, RelayValue), Error> {
        let (addr, family) = addr16(self.local.ip());
        let (peer, pf) = addr16(self.latched.ip());
        let (out_src, of) = addr16(self.out_local.ip());
        if pf != family {
            return Err(Error::Config(format!(
                "relay leg {}: latched {} of the other family",
                self.local, self.latched
            )));
        }
        let (out_dst, out_dport, flags, (in_pseudo, delta, ip_sum)) = match self.out_peer {
            Some(p) => {
                let (d, df) = addr16(p.ip());
                if df != of {
                    return Err(Error::Config(format!(
                        "relay leg {}: far end {p} of the other family",
                        self.out_local
                    )));
                }
                (d, p.port(), RELAY_OUT_KNOWN, sums(self.local, self.latched, self.out_local, p))
            }
            None => ([0; 16], 0, 0, (0, 0, 0)),
        };
        Ok((
            RelayKey { addr, port_be: self.local.port().to_be(), family, pad: 0 },
            RelayValue {
                peer,
                out_src,
                out_dst,
                peer_port_be: self.latched.port().to_be(),
                out_sport_be: self.out_local.port().to_be(),
                out_dport_be: out_dport.to_be(),
                out_family: of,
                flags,
                stats_index: self.stats_index,
                in_pseudo_be: in_pseudo.to_be(),
                csum_delta_be: delta.to_be(),
                ip_sum_be: ip_sum.to_be(),
                pad: [0; 2],
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_layout_and_families() {
        let leg = Leg {
            local: "[2001:db8::1]:30000".parse().unwrap(),
            latched: "[2001:db8::99]:4000".parse().unwrap(),
            out_local: "192.0.2.1:30002".parse().unwrap(),
            out_peer: Some("198.51.100.7:5004".parse().unwrap()),
            stats_index: 6,
        };
        let (k, v) = leg.entry().unwrap();
        assert_eq!((k.family, u16::from_be(k.port_be)), (6, 30000));
        assert_eq!(v.out_family, 4);
        assert_eq!(&v.out_dst[10..], &[0xff, 0xff, 198, 51, 100, 7]);
        assert_eq!((u16::from_be(v.out_sport_be), u16::from_be(v.out_dport_be)), (30002, 5004));
        assert_eq!(v.flags, RELAY_OUT_KNOWN);
        let bad = Leg { latched: "192.0.2.9:1".parse().unwrap(), ..leg };
        assert!(bad.entry().is_err());
        let unknown = Leg { out_peer: None, ..leg };
        assert_eq!(unknown.entry().unwrap().1.flags, 0);
    }

    /// The program's per-packet use of the precomputed sums gives what
    /// the full RFC 1624 update and a fresh IPv4 header checksum give.
    #[test]
    fn precomputed_sums_match_the_full_computation() {
        let leg = Leg {
            local: "192.0.2.1:30002".parse().unwrap(),
            latched: "198.51.100.7:5004".parse().unwrap(),
            out_local: "192.0.2.1:30010".parse().unwrap(),
            out_peer: Some("203.0.113.9:7000".parse().unwrap()),
            stats_index: 8,
        };
        let (_, v) = leg.entry().unwrap();
        let (s, d) = ("198.51.100.7".parse().unwrap(), "192.0.2.1".parse().unwrap());
        let (s2, d2) = ("192.0.2.1".parse().unwrap(), "203.0.113.9".parse().unwrap());
        for csum in [0x0001u16, 0x1234, 0xfffe, 0xffff, 0x8000] {
            let old = checksum::pseudo_v4(s, d, 17, 0) + 5004 + 30002;
            let new = checksum::pseudo_v4(s2, d2, 17, 0) + 30010 + 7000;
            let want = checksum::update_udp(csum, old, new);
            let got = match !checksum::fold(u64::from(!csum) + u64::from(u16::from_be(v.csum_delta_be))) {
                0 => 0xffff,
                c => c,
            };
            assert_eq!(got, want, "checksum {csum:#06x}");
        }
        // The pseudo-header used to verify: addresses and protocol.
        assert_eq!(u16::from_be(v.in_pseudo_be), checksum::fold(checksum::pseudo_v4(s, d, 17, 0)));
        // The IPv4 header: the sum plus Total Length, complemented, is the
        // checksum of the header Linux sends.
        let total = 20 + 8 + 172u16;
        let mut h = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 203, 0, 113, 9];
        h[2..4].copy_from_slice(&total.to_be_bytes());
        let fresh = checksum::finish(checksum::sum(&h));
        assert_eq!(!checksum::fold(u64::from(u16::from_be(v.ip_sum_be)) + u64::from(total)), fresh);
    }
}
