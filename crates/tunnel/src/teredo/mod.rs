//! Teredo (RFC 4380, updated by RFC 5991 and extended by RFC 6081): the
//! [`server`], the [`relay`] and the [`client`], each an I/O-free core.
//!
//! Shared here: the RFC constants, the token bucket of rate limits, a small
//! deterministic random generator (seeded by the runner) and the checks of
//! a received Teredo UDP payload that every role makes.

use core::net::{Ipv6Addr, SocketAddrV4};

use xlat::tunnel::teredo::{self, TeredoPacket};
use xlat::tunnel::TunnelError;
use xlat::wire::proto;

use crate::table::Millis;

pub mod client;
pub mod fast;
pub mod relay;
pub mod server;

pub use xlat::tunnel::teredo::{TeredoAddr, TEREDO_PORT};

/// RFC 4380 §5.2.7 / §5.4: a peer entry is trusted for 30 s after the last
/// packet received from it.
pub const PEER_TRUST_MS: Millis = 30_000;
/// RFC 4380 §5.2.6: at most one bubble every 2 s to a peer ...
pub const BUBBLE_INTERVAL_MS: Millis = 2_000;
/// ... and at most 4 in 300 s.
pub const BUBBLE_MAX: u8 = 4;
/// The window of [`BUBBLE_MAX`].
pub const BUBBLE_WINDOW_MS: Millis = 300_000;
/// RFC 4380 §5.2.7: the default refresh interval of a client's NAT mapping.
pub const REFRESH_MS: Millis = 30_000;
/// RFC 4380 §5.2: the Teredo interface MTU.
pub const TEREDO_MTU: u32 = 1280;

/// A token bucket (`rate` tokens a second, at most `burst`), the one of
/// every v6gate rate limit.
pub use budget::Bucket;

/// xorshift64*: nonces and random flag bits; seeded from the OS by the
/// runner, fixed in tests.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced).
    pub fn new(seed: u64) -> Self {
        Rng(if seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { seed })
    }

    /// A generator seeded from the operating system.
    pub fn from_os() -> Self {
        let mut b = [0u8; 8];
        // A failing getrandom leaves zeroes, replaced by the fixed seed
        // mixed with the time: nonces then are only unpredictable enough
        // for a lab, which the log says.
        if getrandom::fill(&mut b).is_err() {
            tracing::warn!("getrandom failed: Teredo nonces fall back to a time-seeded generator");
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            b = (t.as_nanos() as u64).to_ne_bytes();
        }
        Rng::new(u64::from_ne_bytes(b))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Eight random bytes.
    pub fn nonce(&mut self) -> [u8; 8] {
        self.next_u64().to_ne_bytes()
    }
}

/// A bubble (RFC 4380 §2.8) written as a UDP payload: 40 bytes.
pub fn bubble_payload(src: Ipv6Addr, dst: Ipv6Addr, buf: &mut [u8]) -> Option<usize> {
    teredo::bubble(src, dst, buf).ok()
}

/// True for an IPv6 packet with Next Header 59 and a payload: not a
/// bubble, not anything a Teredo node relays ("bubble with payload").
pub fn is_bubble_with_payload(p: &TeredoPacket<'_>) -> bool {
    let v = p.ipv6_packet();
    v.next_header() == proto::NONE && v.payload_len() > 0
}

/// Link-local (fe80::/10).
pub fn is_link_local(a: &Ipv6Addr) -> bool {
    (u128::from(*a) >> 118) == 0x3fa
}

/// A unicast IPv6 destination a Teredo node may forward to: not
/// unspecified, loopback, link-local or multicast (RFC 4291 §2.4).
pub fn is_global_v6(a: &Ipv6Addr) -> bool {
    let v = u128::from(*a);
    !(v == 0 || v == 1 || is_link_local(a) || (v >> 120) == 0xff)
}

/// Parse-failure reasons, for the counters of every role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseDrop {
    /// An indicator or the IPv6 packet was cut short.
    Truncated,
    /// Bad indicator type or order, wrong lengths, not IPv6, bad trailers.
    Malformed,
}

/// Parse a Teredo UDP payload, classifying a failure.
pub fn parse(payload: &[u8]) -> Result<TeredoPacket<'_>, ParseDrop> {
    teredo::parse(payload).map_err(|e| match e {
        TunnelError::Truncated => ParseDrop::Truncated,
        _ => ParseDrop::Malformed,
    })
}

/// The peer's Teredo mapping as the peer's address embeds it.
pub fn embedded_mapping(a: &Ipv6Addr) -> Option<SocketAddrV4> {
    TeredoAddr::from_ipv6(a).map(|t| t.mapped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_from_a_seed() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.nonce(), b.nonce());
        assert_ne!(a.next_u64(), a.next_u64());
    }

    #[test]
    fn address_classes() {
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(!is_global_v6(&"fe80::1".parse().unwrap()));
        assert!(!is_global_v6(&"ff02::2".parse().unwrap()));
        assert!(!is_global_v6(&"::1".parse().unwrap()));
        assert!(is_global_v6(&"2001:db8::1".parse().unwrap()));
    }
}
