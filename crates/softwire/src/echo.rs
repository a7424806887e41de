//! Echo replies from a softwire end-point's own IPv6 address, so that an
//! operator can ping the AFTR / lwAFTR / B4 end-point through the TUN
//! device that carries it (the kernel does not own the address).

use xlat::checksum;
use xlat::wire::icmp;
use xlat::wire::ipv6::{self, Ipv6Header, Ipv6Packet};
use xlat::wire::proto;
use xlat::{Out, PacketKind};

/// Answer an ICMPv6 Echo Request (`pkt`, unfragmented, no extension
/// headers) with an Echo Reply appended to `out`. False when it is not one
/// or its checksum is wrong.
pub fn reply6(pkt: &[u8], out: &mut Out) -> bool {
    let Ok(ip) = Ipv6Packet::new(pkt) else { return false };
    if ip.next_header() != proto::ICMPV6 {
        return false;
    }
    let msg = &ip.as_bytes()[ipv6::HEADER_LEN..];
    if msg.len() < icmp::HEADER_LEN || msg[0] != icmp::v6::ECHO_REQUEST {
        return false;
    }
    let sum = checksum::pseudo_v6(&ip.src(), &ip.dst(), proto::ICMPV6, msg.len() as u32) + checksum::sum(msg);
    if !checksum::verifies(sum) {
        return false;
    }
    let mut reply = vec![0u8; ipv6::HEADER_LEN + msg.len()];
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        payload_len: msg.len() as u16,
        next_header: proto::ICMPV6,
        hop_limit: 64,
        src: ip.dst(),
        dst: ip.src(),
    }
    .emit(&mut reply);
    let m = &mut reply[ipv6::HEADER_LEN..];
    m.copy_from_slice(msg);
    m[0] = icmp::v6::ECHO_REPLY;
    m[2] = 0;
    m[3] = 0;
    let c =
        checksum::finish(checksum::pseudo_v6(&ip.dst(), &ip.src(), proto::ICMPV6, m.len() as u32) + checksum::sum(m));
    m[2..4].copy_from_slice(&c.to_be_bytes());
    out.push(PacketKind::Forward, &reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_reply_verifies() {
        let mut req = Vec::new();
        etherparse::PacketBuilder::ipv6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            64,
        )
        .icmpv6_echo_request(9, 3)
        .write(&mut req, b"abc")
        .unwrap();
        let mut out = Out::new();
        assert!(reply6(&req, &mut out));
        let (_, r) = out.get(0).unwrap();
        let s = etherparse::SlicedPacket::from_ip(r).unwrap();
        let Some(etherparse::TransportSlice::Icmpv6(i)) = s.transport else { panic!() };
        assert_eq!(i.icmp_type(), etherparse::Icmpv6Type::EchoReply(etherparse::IcmpEchoHeader { id: 9, seq: 3 }));
        let Some(etherparse::NetSlice::Ipv6(ip)) = s.net else { panic!() };
        let h = ip.header();
        assert_eq!(
            i.checksum(),
            etherparse::Icmpv6Header::with_checksum(i.icmp_type(), h.source(), h.destination(), i.payload())
                .unwrap()
                .checksum
        );
        let mut bad = req.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(!reply6(&bad, &mut out));
    }
}
