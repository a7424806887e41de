//! RFC 6146 §3.4 (determining the incoming tuple) and §3.6 (computing
//! the outgoing tuple): the transport identity of a packet, and the fixed
//! address map that hands the outgoing addresses to the RFC 7915
//! translator in `xlat`.

use crate::config::Protocol;
use crate::rewrite::{self, Ports};
use crate::Nat64;
use core::net::{Ipv4Addr, Ipv6Addr};
use xlat::addr::Mapper;
use xlat::siit::{AddrMap, Pass, Role};
use xlat::wire::icmp::{v4 as icmp4, v6 as icmp6};
use xlat::wire::proto;
use xlat::{DropReason, Out, PacketKind, Verdict};

/// Addresses for one translation, by role (see [`AddrMap`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed {
    pub(crate) v4: [Ipv4Addr; 4],
    pub(crate) v6: [Ipv6Addr; 4],
}

#[inline]
pub(crate) fn role_idx(r: Role) -> usize {
    match r {
        Role::Src => 0,
        Role::Dst => 1,
        Role::InnerSrc => 2,
        Role::InnerDst => 3,
    }
}

impl AddrMap for Fixed {
    #[inline]
    fn map_6to4(&self, _siit: &Mapper, role: Role, _a: &Ipv6Addr) -> Option<Ipv4Addr> {
        Some(self.v4[role_idx(role)])
    }
    #[inline]
    fn map_4to6(&self, _siit: &Mapper, role: Role, _a: Ipv4Addr) -> Option<Ipv6Addr> {
        Some(self.v6[role_idx(role)])
    }
}

/// Transport identity of a packet: protocol, ports (or ICMP id), TCP flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flow {
    pub(crate) p: Protocol,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    pub(crate) flags: u8,
}

/// Ports / identifier of an upper-layer header. A packet quoted in an ICMP
/// error may be cut after its first 8 bytes (RFC 792), which still hold
/// the ports and the echo identifier.
pub(crate) fn flow_of(upper: u8, l4: &[u8], v6: bool, quoted: bool) -> Result<Flow, DropReason> {
    match upper {
        proto::UDP | proto::TCP => {
            let min = match (quoted, upper) {
                (true, _) => 8,
                (false, proto::UDP) => 8,
                (false, _) => 20,
            };
            if l4.len() < min {
                return Err(DropReason::Truncated);
            }
            let p = if upper == proto::UDP { Protocol::Udp } else { Protocol::Tcp };
            let flags = if upper == proto::TCP && l4.len() > 13 { l4[13] } else { 0 };
            Ok(Flow { p, sport: u16::from_be_bytes([l4[0], l4[1]]), dport: u16::from_be_bytes([l4[2], l4[3]]), flags })
        }
        proto::ICMP | proto::ICMPV6 if (upper == proto::ICMPV6) == v6 => {
            if l4.len() < 8 {
                return Err(DropReason::Truncated);
            }
            let echo = if v6 {
                matches!(l4[0], icmp6::ECHO_REQUEST | icmp6::ECHO_REPLY)
            } else {
                matches!(l4[0], icmp4::ECHO_REQUEST | icmp4::ECHO_REPLY)
            };
            if !echo {
                return Err(DropReason::IcmpUntranslatable);
            }
            let id = u16::from_be_bytes([l4[4], l4[5]]);
            Ok(Flow { p: Protocol::Icmp, sport: id, dport: id, flags: 0 })
        }
        _ => Err(DropReason::UnsupportedProtocol),
    }
}

/// The port of the outgoing tuple that changes (RFC 6146 §3.6): the
/// source or the destination port; for ICMP queries, the identifier.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NewPort {
    /// The source port becomes this.
    Src(u16),
    /// The destination port becomes this.
    Dst(u16),
}

/// Where a packet handed to the IPv4 side (`from4`) comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Via<'a> {
    /// The IPv4 network.
    Wire,
    /// A datagram this crate reassembled from IPv4 fragments.
    Reassembled,
    /// The second pass of a hairpin (RFC 6146 §3.8): the IPv6 packet that
    /// came in, which refusals and errors are about.
    Hairpin(&'a [u8]),
}

impl Via<'_> {
    /// The switches of the RFC 7915 pass for a packet from here.
    pub(crate) fn pass(self) -> Pass {
        Pass { hairpin_in: matches!(self, Via::Hairpin(_)), ..Pass::default() }
    }
}

/// Which packet the flow's ports are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum In {
    /// The packet itself.
    Packet,
    /// The packet quoted by an ICMP error.
    Quoted,
}

impl Nat64 {
    /// RFC 6146 §3.7: translate `pkt` with the addresses of `map` (RFC 7915,
    /// in `xlat`, with the switches of `pass`), then write the new port of
    /// the `p` flow into every forwarded packet (checksums updated; ICMP
    /// errors for the sender are left as they are).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn translate_flow(
        &self,
        map: &Fixed,
        pkt: &[u8],
        out: &mut Out,
        p: Protocol,
        port: NewPort,
        at: In,
        pass: Pass,
    ) -> Verdict {
        let v = self.xl.translate_pass(map, pkt, out, pass);
        if v != Verdict::Emit {
            return v;
        }
        let ports = match (p, port) {
            (Protocol::Icmp, NewPort::Src(n) | NewPort::Dst(n)) => Ports { id: Some(n), ..Ports::default() },
            (_, NewPort::Src(n)) => Ports { src: Some(n), ..Ports::default() },
            (_, NewPort::Dst(n)) => Ports { dst: Some(n), ..Ports::default() },
        };
        for i in 0..out.len() {
            if let Some((PacketKind::Forward, b)) = out.get_mut(i) {
                match at {
                    In::Packet => rewrite::outer(b, ports),
                    In::Quoted => rewrite::inner(b, ports),
                }
            }
        }
        Verdict::Emit
    }
}
