//! The TrGW's shared-socket steering (`bpf/sklookup.bpf.c`,
//! `crate::sklookup`), and the ingress-MAC value of the single-program
//! objects (`for_us` in `bpf/helpers.h`).

use super::{first_line, tiles, CType, Contract, Field};

contract! {
    /// The key of `trgw_sk_ports` (value: a `u32` index into
    /// `trgw_sk_socks`): a local UDP address the relay allocated.
    pub struct SkKey / "v6g_sk_key" {
        /// The local address in network order (as the sk_lookup context's
        /// `local_ip6` words), IPv4 as IPv4-mapped (`::ffff:a.b.c.d`).
        pub addr: [u32; 4],
        /// The local port, network order.
        pub port_be: u16,
        /// 4 or 6.
        pub family: u8,
        /// Zero.
        pub pad: u8,
    }
}

counters! {
    /// The sk_lookup program's counters (per CPU, `trgw_sk_counters`, a `u64` each).
    pub enum SkCounter / "SK_COUNTERS" {
        /// Packets assigned to a shared socket.
        Steered = "SK_STEERED", "steered";
        /// Packets to an allocated port whose shared socket was missing.
        NoSocket = "SK_NO_SOCKET", "no-socket";
        /// Packets `bpf_sk_assign` refused.
        AssignFailed = "SK_ASSIGN_FAILED", "assign-failed";
    }
}

contract! {
    /// The value of the single-program objects' `*_ifmac` hash maps (key:
    /// an attached interface's index): its MAC address.
    pub struct IfMac / "v6g_ifmac" {
        /// The MAC address.
        pub addr: [u8; 6],
        /// Zero.
        pub pad: u16,
    }
}
