//! Inner IPv4 packets as the softwire engines see them: the transport
//! identifiers a port-set check or a NAT44 mapping needs (RFC 7596 §8,
//! RFC 6888 via RFC 4787/5382/5508: the ICMP query identifier stands for
//! a port, an ICMP error is judged by the packet it quotes), and NAT44
//! rewriting of an address and port with RFC 1624 incremental checksum
//! updates (IPv4 header, TCP/UDP pseudo-header, ICMP, and inside ICMP
//! errors the quoted packet and the ICMP checksum that covers it).

use crate::stats::Reason;
use core::net::Ipv4Addr;
use xlat::checksum;
use xlat::wire::icmp;
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::proto;

#[inline]
fn get16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

#[inline]
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// The transport identity of an IPv4 packet (or of the packet an ICMP
/// error quotes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    /// IP protocol (TCP, UDP or ICMP).
    pub proto: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port; for an ICMP query, its identifier.
    pub sport: u16,
    /// Destination port; for an ICMP query, its identifier.
    pub dport: u16,
}

/// What kind of IPv4 packet it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TCP (with its flags) or UDP, unfragmented.
    Transport {
        /// TCP flags (0 for UDP).
        flags: u8,
    },
    /// An ICMP echo request (true) or reply.
    Echo(bool),
    /// An ICMP error; `quoted` is the packet it is about.
    IcmpError {
        /// The quoted packet's identity.
        quoted: Ends,
    },
    /// A fragment: reassemble before looking at ports.
    Fragment,
}

/// [`Ends`] and [`Kind`] of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Identity (ports valid unless `kind` is `Fragment`).
    pub ends: Ends,
    /// Kind.
    pub kind: Kind,
}

/// The ports (or ICMP query identifier) of the transport header at the
/// start of `l4`, for protocol `p`; `None` for other protocols, ICMP
/// errors and headers cut before the ports.
fn ports(p: u8, l4: &[u8]) -> Option<(u16, u16)> {
    match p {
        proto::TCP | proto::UDP => Some((get16(l4, 0)?, get16(l4, 2)?)),
        proto::ICMP => match *l4.first()? {
            icmp::v4::ECHO_REQUEST | icmp::v4::ECHO_REPLY => {
                let id = get16(l4, 4)?;
                Some((id, id))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Classify a checked IPv4 packet.
pub fn flow(p: &Ipv4Packet<'_>) -> Result<Flow, Reason> {
    let mut ends = Ends { proto: p.protocol(), src: p.src(), dst: p.dst(), sport: 0, dport: 0 };
    if p.is_fragment() {
        return Ok(Flow { ends, kind: Kind::Fragment });
    }
    let l4 = p.payload();
    let kind = match p.protocol() {
        proto::TCP => {
            if l4.len() < 20 {
                return Err(Reason::Malformed);
            }
            Kind::Transport { flags: l4[13] }
        }
        proto::UDP => {
            if l4.len() < 8 {
                return Err(Reason::Malformed);
            }
            Kind::Transport { flags: 0 }
        }
        proto::ICMP => {
            let t = *l4.first().ok_or(Reason::Malformed)?;
            if l4.len() < icmp::HEADER_LEN {
                return Err(Reason::Malformed);
            }
            match t {
                icmp::v4::ECHO_REQUEST => Kind::Echo(true),
                icmp::v4::ECHO_REPLY => Kind::Echo(false),
                icmp::v4::DEST_UNREACH | icmp::v4::TIME_EXCEEDED | icmp::v4::PARAM_PROBLEM => {
                    let q = Ipv4Packet::new_quoted(&l4[icmp::HEADER_LEN..]).map_err(|_| Reason::IcmpDropped)?;
                    if q.frag_offset() != 0 {
                        return Err(Reason::IcmpDropped);
                    }
                    let (s, d) = ports(q.protocol(), q.payload()).ok_or(Reason::IcmpDropped)?;
                    // RFC 1812 §4.3.2.7: never an error about an error.
                    if q.protocol() == proto::ICMP && q.payload().first().is_some_and(|&t| icmp::is_error_v4(t)) {
                        return Err(Reason::IcmpDropped);
                    }
                    Kind::IcmpError {
                        quoted: Ends { proto: q.protocol(), src: q.src(), dst: q.dst(), sport: s, dport: d },
                    }
                }
                _ => return Err(Reason::UnsupportedProtocol),
            }
        }
        _ => return Err(Reason::UnsupportedProtocol),
    };
    let (s, d) = match kind {
        Kind::IcmpError { .. } => (0, 0),
        _ => ports(p.protocol(), l4).ok_or(Reason::Malformed)?,
    };
    ends.sport = s;
    ends.dport = d;
    Ok(Flow { ends, kind })
}

/// RFC 1812 §4.3.2.7: may an ICMPv4 error be sent about `p`? Not about
/// an ICMP error, a fragment other than the first, or a packet from a
/// source that is not a unicast host or to a multicast/broadcast address.
pub fn may_answer(p: &Ipv4Packet<'_>) -> bool {
    let bad = |a: Ipv4Addr| {
        let o = a.octets()[0];
        o == 0 || o == 127 || o >= 224
    };
    if p.frag_offset() != 0 || bad(p.src()) || p.dst().octets()[0] >= 224 || p.dst().is_broadcast() {
        return false;
    }
    !(p.protocol() == proto::ICMP && p.payload().first().is_some_and(|&t| icmp::is_error_v4(t)))
}

/// Which end of a packet to rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The source address and port.
    Src,
    /// The destination address and port.
    Dst,
}

#[inline]
fn sum_addr(b: &[u8], at: usize) -> u64 {
    checksum::sum(&b[at..at + 4])
}

/// Rewrite `end` of the IPv4 packet `pkt` (possibly a quote cut short) to
/// (`addr`, `port`): the address and the header checksum, and when the
/// transport header is there, the port (the identifier of an ICMP query)
/// and the transport checksum. `port = None` changes only the address
/// (the outer header of an ICMP error). A UDP zero checksum stays zero.
pub fn rewrite(pkt: &mut [u8], end: End, addr: Ipv4Addr, port: Option<u16>) {
    if pkt.len() < 20 {
        return;
    }
    let hl = usize::from(pkt[0] & 0x0f) * 4;
    if hl < 20 || pkt.len() < hl {
        return;
    }
    let at = if end == End::Src { 12 } else { 16 };
    let old_a = sum_addr(pkt, at);
    pkt[at..at + 4].copy_from_slice(&addr.octets());
    let new_a = sum_addr(pkt, at);
    if let Some(c) = get16(pkt, 10) {
        put16(pkt, 10, checksum::update(c, old_a, new_a));
    }
    let first = get16(pkt, 6).is_some_and(|f| f & 0x1fff == 0);
    let p = pkt[9];
    let l4 = &mut pkt[hl..];
    match p {
        proto::TCP | proto::UDP if first => {
            let pat = if end == End::Src { 0 } else { 2 };
            let ck = if p == proto::TCP { 16 } else { 6 };
            let (mut old, mut new) = (old_a, new_a);
            if let (Some(np), Some(op)) = (port, get16(l4, pat)) {
                put16(l4, pat, np);
                old += u64::from(op);
                new += u64::from(np);
            }
            if let Some(c) = get16(l4, ck) {
                if p == proto::UDP {
                    if c != 0 {
                        put16(l4, ck, checksum::update_udp(c, old, new));
                    }
                } else {
                    put16(l4, ck, checksum::update(c, old, new));
                }
            }
        }
        proto::ICMP if first => {
            let is_query = matches!(l4.first(), Some(&icmp::v4::ECHO_REQUEST) | Some(&icmp::v4::ECHO_REPLY));
            if let (true, Some(np), Some(op), Some(c)) = (is_query, port, get16(l4, 4), get16(l4, 2)) {
                put16(l4, 4, np);
                put16(l4, 2, checksum::update(c, u64::from(op), u64::from(np)));
            }
        }
        _ => {}
    }
}

/// Rewrite an ICMPv4 error: the outer `outer_end` address to `outer`, and
/// the quoted packet's `quoted_end` to (`addr`, `port`); the ICMP checksum
/// follows the quote's changes. (Inbound to a subscriber: outer Dst and
/// quoted Src; outbound from one: outer Src and quoted Dst.)
pub fn rewrite_icmp_error(pkt: &mut [u8], outer_end: End, outer: Ipv4Addr, quoted_end: End, addr: Ipv4Addr, port: u16) {
    if pkt.len() < 20 {
        return;
    }
    rewrite(pkt, outer_end, outer, None);
    let hl = usize::from(pkt[0] & 0x0f) * 4;
    let Some(msg) = pkt.get_mut(hl..) else { return };
    if msg.len() < icmp::HEADER_LEN {
        return;
    }
    let (head, quote) = msg.split_at_mut(icmp::HEADER_LEN);
    // The quote starts at an even offset of the message: its words line up.
    let before = checksum::sum(quote);
    rewrite(quote, quoted_end, addr, Some(port));
    let after = checksum::sum(quote);
    if let Some(c) = get16(head, 2) {
        put16(head, 2, checksum::update(c, before, after));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

    fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ipv4(src, dst, 64).udp(sport, dport).write(&mut v, b"hello world").unwrap();
        v
    }

    fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ipv4(src, dst, 64).tcp(sport, dport, 7, 1000).syn().write(&mut v, b"x").unwrap();
        v
    }

    fn echo(src: [u8; 4], dst: [u8; 4], id: u16) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ipv4(src, dst, 64).icmpv4_echo_request(id, 1).write(&mut v, b"ping").unwrap();
        v
    }

    /// etherparse verifies every checksum of the rewritten packet.
    fn verify(pkt: &[u8]) {
        let s = SlicedPacket::from_ip(pkt).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &s.net else { panic!() };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        let src = h.source;
        let dst = h.destination;
        match &s.transport {
            Some(TransportSlice::Udp(u)) => {
                let want = u.to_header().calc_checksum_ipv4_raw(src, dst, u.payload()).unwrap();
                assert_eq!(u.checksum(), want);
            }
            Some(TransportSlice::Tcp(t)) => {
                let want = t.to_header().calc_checksum_ipv4_raw(src, dst, t.payload()).unwrap();
                assert_eq!(t.checksum(), want);
            }
            Some(TransportSlice::Icmpv4(i)) => {
                let want = etherparse::Icmpv4Header::with_checksum(i.icmp_type(), i.payload()).checksum;
                assert_eq!(i.checksum(), want);
            }
            _ => panic!("no transport"),
        }
    }

    #[test]
    fn classify_and_rewrite_udp_tcp_echo() {
        let mut u = udp([192, 168, 1, 2], 5000, [198, 51, 100, 1], 53);
        let f = flow(&Ipv4Packet::new(&u).unwrap()).unwrap();
        assert_eq!((f.ends.sport, f.ends.dport, f.kind), (5000, 53, Kind::Transport { flags: 0 }));
        rewrite(&mut u, End::Src, Ipv4Addr::new(203, 0, 113, 9), Some(40000));
        verify(&u);
        let f = flow(&Ipv4Packet::new(&u).unwrap()).unwrap();
        assert_eq!((f.ends.src, f.ends.sport), (Ipv4Addr::new(203, 0, 113, 9), 40000));

        let mut t = tcp([198, 51, 100, 1], 80, [203, 0, 113, 9], 40001);
        assert_eq!(flow(&Ipv4Packet::new(&t).unwrap()).unwrap().kind, Kind::Transport { flags: 0x02 });
        rewrite(&mut t, End::Dst, Ipv4Addr::new(192, 168, 1, 2), Some(1234));
        verify(&t);
        assert_eq!(flow(&Ipv4Packet::new(&t).unwrap()).unwrap().ends.dport, 1234);

        let mut e = echo([192, 168, 1, 2], [198, 51, 100, 1], 77);
        let f = flow(&Ipv4Packet::new(&e).unwrap()).unwrap();
        assert_eq!((f.ends.sport, f.kind), (77, Kind::Echo(true)));
        rewrite(&mut e, End::Src, Ipv4Addr::new(203, 0, 113, 9), Some(5555));
        verify(&e);
        assert_eq!(flow(&Ipv4Packet::new(&e).unwrap()).unwrap().ends.sport, 5555);
    }

    #[test]
    fn udp_zero_checksum_stays_zero() {
        let mut u = udp([192, 168, 1, 2], 5000, [198, 51, 100, 1], 53);
        u[26] = 0;
        u[27] = 0;
        rewrite(&mut u, End::Src, Ipv4Addr::new(203, 0, 113, 9), Some(40000));
        assert_eq!(&u[26..28], &[0, 0]);
    }

    #[test]
    fn icmp_error_rewritten_inbound() {
        // The subscriber's UDP packet after NAT, then a router's port unreachable about it.
        let sent = udp([203, 0, 113, 9], 40000, [198, 51, 100, 1], 53);
        let mut err = Vec::new();
        PacketBuilder::ipv4([198, 51, 100, 1], [203, 0, 113, 9], 64)
            .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::Port))
            .write(&mut err, &sent)
            .unwrap();
        let f = flow(&Ipv4Packet::new(&err).unwrap()).unwrap();
        let Kind::IcmpError { quoted } = f.kind else { panic!() };
        assert_eq!((quoted.src, quoted.sport, quoted.dport), (Ipv4Addr::new(203, 0, 113, 9), 40000, 53));
        rewrite_icmp_error(
            &mut err,
            End::Dst,
            Ipv4Addr::new(192, 168, 1, 2),
            End::Src,
            Ipv4Addr::new(192, 168, 1, 2),
            5000,
        );
        verify(&err);
        let q = &err[28..];
        assert_eq!(q, &udp([192, 168, 1, 2], 5000, [198, 51, 100, 1], 53)[..]);
    }

    #[test]
    fn refusals() {
        let mut u = udp([192, 168, 1, 2], 5000, [198, 51, 100, 1], 53);
        u[9] = 47; // GRE
        let c = checksum::finish(checksum::sum(&{
            let mut h = u[..20].to_vec();
            h[10] = 0;
            h[11] = 0;
            h
        }));
        u[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(flow(&Ipv4Packet::new(&u).unwrap()), Err(Reason::UnsupportedProtocol));
        let mut frag = udp([192, 168, 1, 2], 5000, [198, 51, 100, 1], 53);
        frag[6] = 0x20; // MF
        assert_eq!(flow(&Ipv4Packet::new(&frag).unwrap()).unwrap().kind, Kind::Fragment);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), port in proptest::prelude::any::<u16>()) {
            let mut d = data.clone();
            if let Ok(p) = Ipv4Packet::new(&data) {
                let _ = flow(&p);
            }
            rewrite(&mut d, End::Src, Ipv4Addr::new(1, 2, 3, 4), Some(port));
            let mut d2 = data.clone();
            if d2.len() >= 20 {
                rewrite_icmp_error(&mut d2, End::Dst, Ipv4Addr::new(1, 2, 3, 4), End::Src, Ipv4Addr::new(5, 6, 7, 8), port);
            }
        }
    }
}
