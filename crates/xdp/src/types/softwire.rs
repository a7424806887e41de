//! The lwAFTR / DSTM / DS-Lite AFTR fast path (`bpf/softwire.bpf.c`,
//! `crate::softwire`, `crate::dslite`).

use super::{first_line, tiles, CType, Contract, Field};

contract! {
    /// The one entry of `sw_config`.
    pub struct SwConfig / "sw_config" {
        /// The softwire address, as on the wire.
        pub local: [u8; 16],
        /// `SW_F_*`.
        pub flags: u32,
        /// Largest tunnel packet (the slow path's mtu, >= 1280).
        pub mtu: u16,
        /// Tunnel hop limit.
        pub hop_limit: u8,
        /// Tunnel Encapsulation Limit (with [`SW_F_ENCAP_LIMIT`]).
        pub encap_limit: u8,
    }
}

contract! {
    /// The value of `sw_b4` (key: an lwB4's IPv6 address, 16 bytes): its binding.
    pub struct SwBinding / "sw_binding" {
        /// IPv4 address, network order.
        pub ipv4: u32,
        /// PSID, host order (0 for a whole address).
        pub psid: u16,
        /// PSID length k (0: a whole address).
        pub psid_len: u8,
        /// PSID offset a.
        pub offset: u8,
    }
}

contract! {
    /// The key of `sw_v4` (value: the lwB4's IPv6 address, 16 bytes).
    pub struct SwV4Key / "sw_v4key" {
        /// IPv4 address, network order.
        pub ipv4: u32,
        /// PSID, host order.
        pub psid: u16,
        /// Zero.
        pub pad: u16,
    }
}

contract! {
    /// The value of `sw_addr` (key: every IPv4 address a binding or lease
    /// holds, network order): its port-set parameters.
    pub struct SwAddr / "sw_addr" {
        /// PSID length (0: a whole address).
        pub psid_len: u8,
        /// PSID offset.
        pub offset: u8,
        /// Zero.
        pub pad: u16,
    }
}

contract! {
    /// The key of `ds_out` (softwire → IPv4): the B4 and the inner source.
    pub struct DsOutKey / "ds_out_key" {
        /// The B4's IPv6 address, as on the wire.
        pub b4: [u8; 16],
        /// Inner source address, network order.
        pub addr: u32,
        /// Inner source port (ICMP echo identifier), network order.
        pub port: u16,
        /// IP protocol: 6, 17 or 1.
        pub proto: u8,
        /// Zero.
        pub pad: u8,
    }
}

contract! {
    /// The value of `ds_out`.
    pub struct DsOutVal / "ds_out_val" {
        /// Pool address, network order.
        pub addr: u32,
        /// Pool port, network order.
        pub port: u16,
        /// Zero.
        pub pad: u16,
        /// `DS_F_*`.
        pub flags: u32,
        /// Zero.
        pub pad2: u32,
        /// `bpf_ktime_get_coarse_ns()` of the last packet forwarded (0: none).
        pub last_seen_ns: u64,
    }
}

contract! {
    /// The key of `ds_in` (IPv4 → softwire): the pool transport address.
    pub struct DsInKey / "ds_in_key" {
        /// Pool address, network order.
        pub addr: u32,
        /// Pool port, network order.
        pub port: u16,
        /// IP protocol.
        pub proto: u8,
        /// Zero.
        pub pad: u8,
    }
}

contract! {
    /// The value of `ds_in`.
    pub struct DsInVal / "ds_in_val" {
        /// The B4's IPv6 address.
        pub b4: [u8; 16],
        /// Inner address, network order.
        pub addr: u32,
        /// Inner port, network order.
        pub port: u16,
        /// Zero.
        pub pad: u16,
        /// `DS_F_*`.
        pub flags: u32,
        /// Zero.
        pub pad2: u32,
        /// `bpf_ktime_get_coarse_ns()` of the last packet forwarded (0: none).
        pub last_seen_ns: u64,
    }
}

contract! {
    /// The key of the `ds_pool` LPM trie (the pool4 prefixes; userspace
    /// writes it as aya's `lpm_trie::Key<[u8; 4]>`, the same layout).
    pub struct DsPoolKey / "ds_pool_key" {
        /// Prefix length in bits.
        pub prefixlen: u32,
        /// Network, network order.
        pub addr: u32,
    }
}

contract! {
    /// The key of `ds_b4`: a B4 and a protocol.
    pub struct DsB4Key / "ds_b4_key" {
        /// The B4's IPv6 address, as on the wire.
        pub b4: [u8; 16],
        /// IP protocol.
        pub proto: u8,
        /// Zero.
        pub pad: [u8; 3],
    }
}

contract! {
    /// The value of `ds_b4`: the B4's blocks' slots in `ds_blocks`.
    pub struct DsB4Val / "ds_b4_val" {
        /// Slot + 1 of each block, 0: none (the rest is 0 too).
        pub slot: [u32; DS_BLOCKS],
    }
}

contract! {
    /// A record of the `ds_events` ring buffer: a mapping the program
    /// created ([`DS_EV_CREATED`]) or a TCP FIN it carried ([`DS_EV_FIN`]).
    pub struct DsEvent / "ds_event" {
        /// The B4's IPv6 address.
        pub b4: [u8; 16],
        /// Inner source address, network order.
        pub addr: u32,
        /// Pool address, network order.
        pub out_addr: u32,
        /// Inner source port, network order.
        pub port: u16,
        /// Pool port, network order.
        pub out_port: u16,
        /// IP protocol.
        pub proto: u8,
        /// `DS_EV_*`.
        pub kind: u8,
        /// A FIN: 1 from the IPv4 side, 0 from the B4.
        pub from_v4: u8,
        /// A FIN: the segment's TCP flags.
        pub tcp_flags: u8,
        /// A mapping created: the block the port came from (its `ds_blocks` index).
        pub slot: u32,
        /// Zero.
        pub pad: u32,
        /// `bpf_ktime_get_coarse_ns()` at creation / when the FIN was carried.
        pub ns: u64,
    }
}

contract! {
    /// The one entry of `ds_state` (`BPF_F_MMAPABLE`): the table limit. The
    /// program adds 1 to `created` (atomic) per mapping it creates; the
    /// slow path writes the rest. A mapping is created in the program only
    /// while engine_len + (created - drained) < limit.
    pub struct DsState / "ds_state" {
        /// Mappings the program created.
        pub created: u64,
        /// Events the slow path consumed.
        pub drained: u64,
        /// Mappings in the slow path's table (those included).
        pub engine_len: u64,
        /// The slow path's max-mappings.
        pub limit: u64,
    }
}

constants! {
    /// The softwire object's flags and sizes.
    SOFTWIRE_CONSTANTS;
    /// [`SwConfig::flags`]: on.
    pub const SW_F_ON: u32 = 1 << 0 => "SW_F_ON";
    /// [`SwConfig::flags`]: Traffic Class = inner TOS (RFC 2473 §6.4).
    pub const SW_F_COPY_TOS: u32 = 1 << 1 => "SW_F_COPY_TOS";
    /// [`SwConfig::flags`]: a Tunnel Encapsulation Limit option (RFC 2473 §4.1.1).
    pub const SW_F_ENCAP_LIMIT: u32 = 1 << 2 => "SW_F_ENCAP_LIMIT";
    /// [`SwConfig::flags`]: the DS-Lite AFTR: NAT44 sessions (`ds_*`), not bindings.
    pub const SW_F_DSLITE: u32 = 1 << 3 => "SW_F_DSLITE";
    /// [`SwConfig::flags`]: DS-Lite: a B4's TCP SYN creates its mapping in the program (`ds_b4`).
    pub const SW_F_DS_CREATE: u32 = 1 << 4 => "SW_F_DS_CREATE";
    /// `DS_F_*` (in [`DsOutVal::flags`], [`DsInVal::flags`]): slow path: TCP in V6 INIT, only the outside SYN+ACK may pass.
    pub const DS_F_HALF_OPEN: u32 = 1 << 0 => "DS_F_HALF_OPEN";
    /// Fast path: it forwarded that SYN+ACK (the slow path reads it).
    pub const DS_F_SYN_ACK: u32 = 1 << 1 => "DS_F_SYN_ACK";
    /// Fast path: it created the mapping (a B4's SYN, [`DsEvent`]).
    pub const DS_F_XDP: u32 = 1 << 2 => "DS_F_XDP";
    /// Fast path: it carried a FIN from the B4 (a [`DS_EV_FIN`] event).
    pub const DS_F_FIN_V6: u32 = 1 << 3 => "DS_F_FIN_V6";
    /// Fast path: it carried a FIN from the IPv4 side (a [`DS_EV_FIN`] event).
    pub const DS_F_FIN_V4: u32 = 1 << 4 => "DS_F_FIN_V4";
    /// [`DsEvent::kind`]: a mapping the program created.
    pub const DS_EV_CREATED: u8 = 0 => "DS_EV_CREATED";
    /// [`DsEvent::kind`]: a TCP FIN the program carried.
    pub const DS_EV_FIN: u8 = 1 => "DS_EV_FIN";
    /// Port blocks per B4 and protocol at most ([`DsB4Val::slot`]).
    pub const DS_BLOCKS: usize = 8 => "DS_BLOCKS";
}

counters! {
    /// The softwire fast path's counters (per CPU, `sw_counters`): what it
    /// did, and why it passed.
    pub enum SoftwireCounter / "SW_COUNTERS" {
        /// Softwire to IPv4: decapsulated and forwarded.
        Decap = "SW_C_DECAP", "decap";
        /// IPv4 to softwire: encapsulated and forwarded.
        Encap = "SW_C_ENCAP", "encap";
        /// Passed: neither IPv4 nor IPv6.
        PassNotIp = "SW_P_NOT_IP", "pass-not-ip";
        /// Passed: IPv6 not IPv4-in-IPv6 to the softwire address, IPv4 to an address no binding holds.
        PassNotOurs = "SW_P_NOT_OURS", "pass-not-ours";
        /// Passed: truncated, lengths disagree, trailing bytes.
        PassMalformed = "SW_P_MALFORMED", "pass-malformed";
        /// Passed: IPv4 options or IPv6 extension headers.
        PassOptions = "SW_P_OPTIONS", "pass-options";
        /// Passed: an IPv4 or IPv6 fragment.
        PassFragment = "SW_P_FRAGMENT", "pass-fragment";
        /// Passed: ICMP other than echo (errors: RFC 7596 §8), ICMPv6.
        PassIcmp = "SW_P_ICMP", "pass-icmp";
        /// Passed: neither TCP, UDP nor ICMP.
        PassProtocol = "SW_P_PROTOCOL", "pass-protocol";
        /// Passed: TTL or hop limit 1 or 0 (the kernel answers Time Exceeded).
        PassTtl = "SW_P_TTL", "pass-ttl";
        /// Passed: over the tunnel MTU or the egress MTU.
        PassTooBig = "SW_P_TOO_BIG", "pass-too-big";
        /// Passed: unknown lwB4, or no lwB4 holds the address and port.
        PassNoBinding = "SW_P_NO_BINDING", "pass-no-binding";
        /// Passed: wrong IPv4 address or port outside the lwB4's set (RFC 7596 §6.1).
        PassPolicy = "SW_P_POLICY", "pass-policy";
        /// Passed: to an address an lwB4 holds (hairpinning, RFC 7596 §6.3).
        PassHairpin = "SW_P_HAIRPIN", "pass-hairpin";
        /// Passed: the IPv4 header checksum does not verify.
        PassChecksum = "SW_P_CHECKSUM", "pass-checksum";
        /// Passed: no route or neighbour.
        PassFib = "SW_P_FIB", "pass-fib";
        /// Passed: the egress interface is not one the fast path is attached to.
        PassEgress = "SW_P_EGRESS", "pass-egress";
        /// Passed: no configuration.
        PassDisabled = "SW_P_DISABLED", "pass-disabled";
        /// Passed: the Ethernet destination is not the interface's (or is multicast).
        PassOtherHost = "SW_P_OTHER_HOST", "pass-other-host";
        /// Passed (DS-Lite): no mirrored NAT44 session (a new flow, an unknown B4, a pool port without one).
        PassNoSession = "SW_P_NO_SESSION", "pass-no-session";
        /// Passed (DS-Lite): TCP SYN, FIN or RST (the slow path's state machine).
        PassTcpControl = "SW_P_TCP_CONTROL", "pass-tcp-control";
        /// Passed (DS-Lite): a TCP mapping in V6 INIT, not its outside SYN+ACK.
        PassHalfOpen = "SW_P_HALF_OPEN", "pass-half-open";
        /// DS-Lite: an outside SYN+ACK carried to a half-open mapping (also in `encap`).
        SynAck = "SW_C_SYN_ACK", "syn-ack";
        /// DS-Lite: a mapping created by a B4's SYN (the SYN also in `decap`).
        Created = "SW_C_CREATED", "created";
        /// Passed (DS-Lite): a SYN from a B4 without port blocks (the slow path grants them).
        PassNoBlock = "SW_P_NO_BLOCK", "pass-no-block";
        /// Passed (DS-Lite): a SYN whose B4's port blocks are all in use.
        PassBlockFull = "SW_P_BLOCK_FULL", "pass-block-full";
        /// Passed (DS-Lite): a SYN while the NAT44 holds max-mappings.
        PassTableFull = "SW_P_TABLE_FULL", "pass-table-full";
        /// Passed (DS-Lite): a SYN or a FIN while the event ring has no room (the slow path lags).
        PassRingFull = "SW_P_RING_FULL", "pass-ring-full";
        /// Passed (DS-Lite): a SYN whose mapping another CPU created first.
        PassRace = "SW_P_RACE", "pass-race";
        /// DS-Lite: a TCP FIN carried, the slow path told by a ring event (also in `decap` / `encap`).
        Fin = "SW_C_FIN", "fin";
    }
}
