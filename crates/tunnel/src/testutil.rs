//! Packet and address helpers the tunnel cores' unit tests share.

use core::net::{Ipv6Addr, SocketAddrV4};
use xlat::wire::ipv6::Ipv6Header;

/// `"1.2.3.4:5"` as a socket address.
pub fn sa(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

/// An IPv6 address from text.
pub fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// An IPv6 packet from `src` to `dst` with next header `nh` and `payload`.
pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        payload_len: payload.len() as u16,
        next_header: nh,
        hop_limit: 64,
        src,
        dst,
    }
    .emit(&mut b);
    b.extend_from_slice(payload);
    b
}
