//! ICMPv4 ↔ ICMPv6 type, code and pointer mapping: RFC 7915 §4.2
//! (ICMPv4 → ICMPv6) and §5.2 (ICMPv6 → ICMPv4).

use crate::wire::icmp::{v4, v6};

/// What the 4 bytes after the checksum become in the translated message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rest {
    /// Echo: identifier and sequence number are copied.
    Copy,
    /// Error with an unused word (and an RFC 4884 length octet, handled
    /// by the caller).
    Unused,
    /// Packet Too Big / Fragmentation Needed: the MTU is recomputed.
    Mtu,
    /// Parameter Problem with this translated pointer.
    Pointer(u8),
}

/// A translated ICMP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub kind: u8,
    pub code: u8,
    pub rest: Rest,
}

const fn m(kind: u8, code: u8, rest: Rest) -> Option<Mapped> {
    Some(Mapped { kind, code, rest })
}

/// RFC 7915 §4.2, Figure 3: IPv4 header byte → IPv6 header byte for
/// Parameter Problem pointers. `None` where the IPv4 field has no IPv6
/// counterpart (the message is then dropped).
pub(crate) fn pointer_4to6(p: u8) -> Option<u8> {
    match p {
        0 => Some(0),
        1 => Some(1),
        2 | 3 => Some(4),
        8 => Some(7),
        9 => Some(6),
        12..=15 => Some(8),
        16..=19 => Some(24),
        _ => None,
    }
}

/// RFC 7915 §5.2, Figure 6: IPv6 header byte → IPv4 header byte.
pub(crate) fn pointer_6to4(p: u32) -> Option<u8> {
    match p {
        0 => Some(0),
        1 => Some(1),
        4 | 5 => Some(2),
        6 => Some(9),
        7 => Some(8),
        8..=23 => Some(12),
        24..=39 => Some(16),
        _ => None,
    }
}

/// RFC 7915 §4.2: ICMPv4 type/code → ICMPv6. `rest` is bytes 4..8 of the
/// ICMPv4 header (for the Parameter Problem pointer). `None` means
/// "silently drop".
pub(crate) fn map_4to6(kind: u8, code: u8, rest: [u8; 4]) -> Option<Mapped> {
    match kind {
        // Echo and Echo Reply (Type 8 and Type 0): Adjust the Type values to
        // 128 and 129, respectively.
        v4::ECHO_REQUEST => m(v6::ECHO_REQUEST, 0, Rest::Copy),
        v4::ECHO_REPLY => m(v6::ECHO_REPLY, 0, Rest::Copy),
        // Destination Unreachable (Type 3).
        v4::DEST_UNREACH => match code {
            // Net/Host Unreachable; Source Route Failed; Destination
            // Network/Host Unknown; Source Host Isolated; Network/Host
            // Unreachable for TOS: Type 1, Code 0 (No route to destination).
            0 | 1 | 5 | 6 | 7 | 8 | 11 | 12 => m(v6::DEST_UNREACH, 0, Rest::Unused),
            // Protocol Unreachable: Type 4, Code 1, pointer to Next Header.
            2 => m(v6::PARAM_PROBLEM, 1, Rest::Pointer(6)),
            // Port Unreachable: Type 1, Code 4.
            3 => m(v6::DEST_UNREACH, 4, Rest::Unused),
            // Fragmentation Needed and DF was Set: Packet Too Big.
            4 => m(v6::PACKET_TOO_BIG, 0, Rest::Mtu),
            // Network/Host administratively prohibited; Communication
            // Administratively Prohibited; Precedence cutoff in effect:
            // Type 1, Code 1.
            9 | 10 | 13 | 15 => m(v6::DEST_UNREACH, 1, Rest::Unused),
            // Host Precedence Violation (14) and unknown codes: drop.
            _ => None,
        },
        // Time Exceeded (Type 11): Type 3, Code unchanged.
        v4::TIME_EXCEEDED => m(v6::TIME_EXCEEDED, code, Rest::Unused),
        // Parameter Problem (Type 12).
        v4::PARAM_PROBLEM => match code {
            // Pointer indicates the error; Bad Length: Type 4, Code 0,
            // pointer translated per Figure 3.
            0 | 2 => pointer_4to6(rest[0]).and_then(|p| m(v6::PARAM_PROBLEM, 0, Rest::Pointer(p))),
            // Missing a Required Option, and anything else: drop.
            _ => None,
        },
        // Information Request/Reply, Timestamp, Address Mask, Router
        // Advertisement/Solicitation, Redirect, Source Quench and unknown
        // types: single-hop or obsoleted, silently drop.
        _ => None,
    }
}

/// RFC 7915 §5.2: ICMPv6 type/code → ICMPv4. `rest` is bytes 4..8.
pub(crate) fn map_6to4(kind: u8, code: u8, rest: [u8; 4]) -> Option<Mapped> {
    match kind {
        // Echo Request and Echo Reply (Type 128 and 129): Type 8 and 0.
        v6::ECHO_REQUEST => m(v4::ECHO_REQUEST, 0, Rest::Copy),
        v6::ECHO_REPLY => m(v4::ECHO_REPLY, 0, Rest::Copy),
        // Destination Unreachable (Type 1).
        v6::DEST_UNREACH => match code {
            // No route, beyond scope of source address, address
            // unreachable: Type 3, Code 1 (Host unreachable).
            0 | 2 | 3 => m(v4::DEST_UNREACH, 1, Rest::Unused),
            // Communication administratively prohibited: Type 3, Code 10.
            1 => m(v4::DEST_UNREACH, 10, Rest::Unused),
            // Port unreachable: Type 3, Code 3.
            4 => m(v4::DEST_UNREACH, 3, Rest::Unused),
            _ => None,
        },
        // Packet Too Big (Type 2): Type 3, Code 4, MTU adjusted.
        v6::PACKET_TOO_BIG => m(v4::DEST_UNREACH, 4, Rest::Mtu),
        // Time Exceeded (Type 3): Type 11, Code unchanged.
        v6::TIME_EXCEEDED => m(v4::TIME_EXCEEDED, code, Rest::Unused),
        // Parameter Problem (Type 4).
        v6::PARAM_PROBLEM => match code {
            // Erroneous header field: Type 12, Code 0, pointer per Figure 6.
            0 => pointer_6to4(u32::from_be_bytes(rest)).and_then(|p| m(v4::PARAM_PROBLEM, 0, Rest::Pointer(p))),
            // Unrecognized Next Header: Type 3, Code 2 (Protocol unreachable).
            1 => m(v4::DEST_UNREACH, 2, Rest::Unused),
            // Unrecognized IPv6 option and unknown codes: drop.
            _ => None,
        },
        // MLD, Neighbor Discovery and other informational or unknown
        // types: single-hop, silently drop.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7915_4_2_dest_unreach_codes() {
        let du = |c| map_4to6(3, c, [0; 4]).map(|m| (m.kind, m.code));
        for c in [0, 1, 5, 6, 7, 8, 11, 12] {
            assert_eq!(du(c), Some((1, 0)), "code {c}");
        }
        assert_eq!(du(2), Some((4, 1)));
        assert_eq!(map_4to6(3, 2, [0; 4]).unwrap().rest, Rest::Pointer(6));
        assert_eq!(du(3), Some((1, 4)));
        assert_eq!(du(4), Some((2, 0)));
        for c in [9, 10, 13, 15] {
            assert_eq!(du(c), Some((1, 1)), "code {c}");
        }
        assert_eq!(du(14), None);
        assert_eq!(du(16), None);
    }

    #[test]
    fn rfc7915_4_2_single_hop_and_obsolete_types_dropped() {
        for t in [4, 5, 9, 10, 13, 14, 15, 16, 17, 18, 42] {
            assert_eq!(map_4to6(t, 0, [0; 4]), None, "type {t}");
        }
    }

    #[test]
    fn rfc7915_4_2_parameter_problem_pointers() {
        let pp = |p| map_4to6(12, 0, [p, 0, 0, 0]).map(|m| m.rest);
        let table = [(0, 0), (1, 1), (2, 4), (3, 4), (8, 7), (9, 6), (12, 8), (15, 8), (16, 24), (19, 24)];
        for (p4, p6) in table {
            assert_eq!(pp(p4), Some(Rest::Pointer(p6)), "pointer {p4}");
        }
        for p4 in [4, 5, 6, 7, 10, 11, 20, 255] {
            assert_eq!(pp(p4), None, "pointer {p4}");
        }
        assert_eq!(map_4to6(12, 1, [0; 4]), None);
        assert_eq!(map_4to6(12, 2, [9, 0, 0, 0]).unwrap().rest, Rest::Pointer(6));
    }

    #[test]
    fn rfc7915_5_2_mappings() {
        let f = |t, c| map_6to4(t, c, [0; 4]).map(|m| (m.kind, m.code));
        assert_eq!(f(128, 0), Some((8, 0)));
        assert_eq!(f(129, 0), Some((0, 0)));
        assert_eq!(f(1, 0), Some((3, 1)));
        assert_eq!(f(1, 1), Some((3, 10)));
        assert_eq!(f(1, 2), Some((3, 1)));
        assert_eq!(f(1, 3), Some((3, 1)));
        assert_eq!(f(1, 4), Some((3, 3)));
        assert_eq!(f(1, 5), None);
        assert_eq!(f(2, 0), Some((3, 4)));
        assert_eq!(f(3, 1), Some((11, 1)));
        assert_eq!(f(4, 1), Some((3, 2)));
        assert_eq!(f(4, 2), None);
        for t in [130, 131, 132, 133, 134, 135, 136, 137, 143, 200] {
            assert_eq!(f(t, 0), None, "type {t}");
        }
        let pp = |p: u32| map_6to4(4, 0, p.to_be_bytes()).map(|m| m.rest);
        let table = [(0, 0), (1, 1), (4, 2), (5, 2), (6, 9), (7, 8), (8, 12), (23, 12), (24, 16), (39, 16)];
        for (p6, p4) in table {
            assert_eq!(pp(p6), Some(Rest::Pointer(p4)), "pointer {p6}");
        }
        for p6 in [2, 3, 40, 1000] {
            assert_eq!(pp(p6), None, "pointer {p6}");
        }
    }
}
