//! Entry point: the zero-copy header views and the IPv6 extension-header
//! walk, strict and quoted (ICMP-error) constructors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xlat::wire::icmp::IcmpMessage;
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::ipv6::Ipv6Packet;
use xlat::wire::l4::{TcpHeader, UdpHeader};

fuzz_target!(|data: &[u8]| {
    for p in [Ipv4Packet::new(data), Ipv4Packet::new_quoted(data)].into_iter().flatten() {
        let _ = (p.src(), p.dst(), p.ttl(), p.tos(), p.checksum_ok(), p.is_fragment(), p.unexpired_source_route());
        assert!(p.header_len() <= p.as_bytes().len());
        let pl = p.payload();
        let _ = (UdpHeader::new(pl).map(|u| u.checksum()), TcpHeader::new(pl).map(|t| t.flags()));
        let _ = IcmpMessage::new(pl).map(|m| (m.kind(), m.rest(), m.body().len()));
    }
    for p in [Ipv6Packet::new(data), Ipv6Packet::new_quoted(data)].into_iter().flatten() {
        let _ = (p.src(), p.dst(), p.flow_label(), p.traffic_class());
        if let Ok(c) = p.walk() {
            assert!(c.upper_at <= p.as_bytes().len());
            if let Some(at) = c.segments_left_at {
                assert!(at < c.upper_at);
            }
        }
    }
});
