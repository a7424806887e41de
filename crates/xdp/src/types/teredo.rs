//! The Teredo relay fast path (`bpf/teredo.bpf.c`, `crate::teredo`).

use super::{first_line, tiles, CType, Contract, Field};

contract! {
    /// The one entry of `teredo_config`. Addresses and ports in network order.
    pub struct TdConfig / "td_config" {
        /// The relay's IPv4 address (its UDP socket's), network order.
        pub relay_addr: u32,
        /// Its UDP port (3544), network order.
        pub relay_port: u16,
        /// `TD_F_*`.
        pub flags: u16,
        /// The Teredo prefix's first 32 bits, host order.
        pub prefix_hi32: u32,
        /// Largest IPv6 packet to a client: the relay TUN's MTU.
        pub mtu6: u32,
        /// Outer TTL (the kernel's default for the relay's socket).
        pub ttl: u32,
        /// Zero.
        pub pad: u32,
    }
}

contract! {
    /// The value of `teredo_peers` (key: a trusted peer's Teredo address,
    /// 16 bytes as on the wire): its mapping, written by the slow path when
    /// the RFC 4380 §5.4 trust procedure completes, deleted on expiry.
    pub struct TdPeer / "td_peer" {
        /// Mapped IPv4 address, network order.
        pub addr: u32,
        /// Mapped UDP port, network order.
        pub port: u16,
        /// Zero.
        pub pad: u16,
        /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) of the last packet decapsulated from it; 0: none yet.
        pub last_seen_ns: u64,
    }
}

constants! {
    /// The Teredo object's flags.
    TEREDO_CONSTANTS;
    /// [`TdConfig::flags`]: on.
    pub const TD_F_ON: u16 = 1 << 0 => "TD_F_ON";
}

counters! {
    /// The Teredo fast path's counters (per CPU, `teredo_counters`): what
    /// it did, and why it passed.
    pub enum TeredoCounter / "TD_COUNTERS" {
        /// IPv4 to IPv6: decapsulated and forwarded.
        Decap = "TD_C_DECAP", "decap";
        /// IPv6 to IPv4: encapsulated and forwarded.
        Encap = "TD_C_ENCAP", "encap";
        /// Passed: neither IPv4 nor IPv6.
        PassNotIp = "TD_P_NOT_IP", "pass-not-ip";
        /// Passed: not UDP to the relay, or not to the Teredo prefix.
        PassNotTeredo = "TD_P_NOT_TEREDO", "pass-not-teredo";
        /// Passed: truncated, lengths disagree, trailing bytes.
        PassMalformed = "TD_P_MALFORMED", "pass-malformed";
        /// Passed: outer IPv4 options.
        PassIpv4Options = "TD_P_IPV4_OPTIONS", "pass-ipv4-options";
        /// Passed: outer IPv4 fragment or inner Fragment header.
        PassFragment = "TD_P_FRAGMENT", "pass-fragment";
        /// Passed: origin indication or authentication header.
        PassIndicator = "TD_P_INDICATOR", "pass-indicator";
        /// Passed: a bubble (Next Header 59).
        PassBubble = "TD_P_BUBBLE", "pass-bubble";
        /// Passed: no trusted-peer entry (or a non-Teredo source).
        PassUntrusted = "TD_P_UNTRUSTED", "pass-untrusted";
        /// Passed: a trusted peer's address from another mapping.
        PassSpoofed = "TD_P_SPOOFED", "pass-spoofed";
        /// Passed: IPv4 header or UDP checksum does not verify.
        PassChecksum = "TD_P_CHECKSUM", "pass-checksum";
        /// Passed: ICMPv6 (the trust procedure's echo test, errors).
        PassIcmp = "TD_P_ICMP", "pass-icmp";
        /// Passed: hop limit 1 or 0 (the kernel answers Time Exceeded).
        PassHopLimit = "TD_P_HOP_LIMIT", "pass-hop-limit";
        /// Passed: over the Teredo MTU or the egress MTU.
        PassTooBig = "TD_P_TOO_BIG", "pass-too-big";
        /// Passed: Teredo to Teredo, non-global destination, link-scope source.
        PassAddress = "TD_P_ADDRESS", "pass-address";
        /// Passed: no route or neighbour.
        PassFib = "TD_P_FIB", "pass-fib";
        /// Passed: the egress interface is not one the fast path is attached to.
        PassEgress = "TD_P_EGRESS", "pass-egress";
        /// Passed: no configuration.
        PassDisabled = "TD_P_DISABLED", "pass-disabled";
        /// Passed: the Ethernet destination is not the interface's (or is multicast).
        PassOtherHost = "TD_P_OTHER_HOST", "pass-other-host";
    }
}
