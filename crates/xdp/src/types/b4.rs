//! The B4s' kernel datapath (`bpf/b4.bpf.c`, `crate::b4`).

use super::{first_line, tiles, CType, Contract, Field};

contract! {
    /// The one entry of `b4_config`.
    pub struct B4Config / "b4_config" {
        /// The B4's softwire address, as on the wire.
        pub local: [u8; 16],
        /// The AFTR (DSTM: the lease's TEP), as on the wire.
        pub aftr: [u8; 16],
        /// `B4_F_*`.
        pub flags: u32,
        /// Largest tunnel packet (the engine's mtu, >= 1280).
        pub mtu: u16,
        /// Tunnel hop limit.
        pub hop_limit: u8,
        /// Tunnel Encapsulation Limit (with [`B4_F_ENCAP_LIMIT`]).
        pub encap_limit: u8,
        /// Bytes before the IPv4 header at the tc hook: 0 on the TUN device; 14 under BPF_PROG_TEST_RUN.
        pub l2len: u32,
        /// The TUN device: the FIB lookup is made as from it.
        pub tun_ifindex: u32,
        /// TCP SYNs: the largest MSS option let through both ways (0: no clamping).
        pub mss_max: u16,
        /// Zero.
        pub pad: u16,
        /// With [`B4_F_HOST`]: the binding's IPv4 address, as on the wire.
        pub host_addr: [u8; 4],
        /// The host's ports: those of the port set within `[host_first, host_last]`.
        pub host_first: u16,
        /// See `host_first`.
        pub host_last: u16,
        /// The binding's PSID (RFC 7597 §5.1).
        pub psid: u16,
        /// PSID offset (a).
        pub psid_offset: u8,
        /// PSID length (k; 0: the whole address).
        pub psid_len: u8,
    }
}

constants! {
    /// The B4 object's flags.
    B4_CONSTANTS;
    /// [`B4Config::flags`]: an AFTR to talk to (DSTM: a lease held).
    pub const B4_F_ON: u32 = 1 << 0 => "B4_F_ON";
    /// [`B4Config::flags`]: Traffic Class = inner TOS (RFC 2473 §6.4).
    pub const B4_F_COPY_TOS: u32 = 1 << 1 => "B4_F_COPY_TOS";
    /// [`B4Config::flags`]: a Tunnel Encapsulation Limit option (RFC 2473 §4.1.1).
    pub const B4_F_ENCAP_LIMIT: u32 = 1 << 2 => "B4_F_ENCAP_LIMIT";
    /// [`B4Config::flags`]: the lwB4: the host's own ports only (the `host_*` fields).
    pub const B4_F_HOST: u32 = 1 << 3 => "B4_F_HOST";
}

counters! {
    /// The B4 kernel path's counters (per CPU, `b4_counters`): what it did,
    /// and why it passed a packet to the TUN engine (the slow path).
    pub enum B4Counter / "B4_COUNTERS" {
        /// IPv4 to softwire: encapsulated and redirected to the uplink.
        Encap = "B4_C_ENCAP", "encap";
        /// Softwire to IPv4: decapsulated and passed to the stack.
        Decap = "B4_C_DECAP", "decap";
        /// Passed: tc: not IPv4; XDP: not IPv6.
        PassNotIp = "B4_P_NOT_IP", "pass-not-ip";
        /// Passed: not to the B4 address, or not IPv4-in-IPv6.
        PassNotOurs = "B4_P_NOT_OURS", "pass-not-ours";
        /// Passed: truncated, lengths disagree, trailing bytes.
        PassMalformed = "B4_P_MALFORMED", "pass-malformed";
        /// Passed: IPv4 options or IPv6 extension headers.
        PassOptions = "B4_P_OPTIONS", "pass-options";
        /// Passed: an outer (IPv6) fragment (the engine reassembles).
        PassFragment = "B4_P_FRAGMENT", "pass-fragment";
        /// Passed: ICMPv6 to the B4 address (errors are relayed, RFC 2473 §8).
        PassIcmp = "B4_P_ICMP", "pass-icmp";
        /// Passed: hop limit 1 or 0.
        PassTtl = "B4_P_TTL", "pass-ttl";
        /// Passed: over the tunnel MTU (the engine fragments) or the egress MTU.
        PassTooBig = "B4_P_TOO_BIG", "pass-too-big";
        /// Passed: a GSO packet that is not TCP, or whose segments do not fit the tunnel MTU.
        PassGso = "B4_P_GSO", "pass-gso";
        /// Passed: the IPv4 header checksum does not verify.
        PassChecksum = "B4_P_CHECKSUM", "pass-checksum";
        /// Passed: no route or neighbour towards the AFTR.
        PassFib = "B4_P_FIB", "pass-fib";
        /// Passed: the route leaves through an interface not attached.
        PassEgress = "B4_P_EGRESS", "pass-egress";
        /// Passed: no AFTR (a DSTM host without a lease).
        PassDisabled = "B4_P_DISABLED", "pass-disabled";
        /// Passed: the Ethernet destination is not the interface's (or is multicast).
        PassOtherHost = "B4_P_OTHER_HOST", "pass-other-host";
        /// Passed: a softwire packet from another address than the AFTR.
        PassUnknownAftr = "B4_P_UNKNOWN_AFTR", "pass-unknown-aftr";
        /// A TCP SYN's MSS option lowered to the clamp (also counted `encap` or `decap`).
        MssClamped = "B4_C_MSS_CLAMPED", "mss-clamped";
        /// Passed: a TCP SYN whose header or options do not parse (the engine
        /// leaves it untouched and counts it).
        PassTcpOptions = "B4_P_TCP_OPTIONS", "pass-tcp-options";
        /// Passed (lwB4): not the host's address and port: the NAPT's.
        PassNapt = "B4_P_NAPT", "pass-napt";
        /// Passed (lwB4): the host's address, but an inner fragment, an ICMP
        /// error, another protocol or a truncated transport header.
        PassHostOther = "B4_P_HOST_OTHER", "pass-host-other";
    }
}
