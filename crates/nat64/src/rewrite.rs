//! Port and ICMP identifier rewriting in packets the RFC 7915 translator
//! has emitted (addresses already translated), with RFC 1624 incremental
//! checksum updates: the transport checksum of the packet, and for ICMP
//! errors the quoted packet's ports, its transport checksum and the outer
//! ICMP checksum that covers them.

use xlat::checksum;
use xlat::wire::proto;

/// New ports for one packet. For ICMP echo the identifier is `id`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ports {
    pub src: Option<u16>,
    pub dst: Option<u16>,
    pub id: Option<u16>,
}

#[inline]
fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// (header length, upper protocol, is first fragment) of an emitted packet.
fn layout(pkt: &[u8]) -> Option<(usize, u8, bool)> {
    match pkt.first()? >> 4 {
        4 if pkt.len() >= 20 => {
            let hl = usize::from(pkt[0] & 0x0f) * 4;
            let first = get16(pkt, 6) & 0x1fff == 0;
            Some((hl, pkt[9], first))
        }
        6 if pkt.len() >= 40 => {
            if pkt[6] == proto::FRAGMENT {
                if pkt.len() < 48 {
                    return None;
                }
                Some((48, pkt[40], get16(pkt, 42) >> 3 == 0))
            } else {
                Some((40, pkt[6], true))
            }
        }
        _ => None,
    }
}

/// Rewrite one transport header in `l4` (possibly cut short, as in a
/// quoted packet). Returns the (old, new) sums of the 16-bit words changed,
/// for the checksum of an enclosing ICMP error.
fn l4(p: u8, l4: &mut [u8], ports: Ports) -> (u64, u64) {
    let (mut old, mut new) = (0u64, 0u64);
    let ck_at = match p {
        proto::UDP => 6,
        proto::TCP => 16,
        _ => 2,
    };
    let mut changes: [(usize, u16); 2] = [(usize::MAX, 0); 2];
    match p {
        proto::UDP | proto::TCP => {
            if let Some(v) = ports.src {
                changes[0] = (0, v);
            }
            if let Some(v) = ports.dst {
                changes[1] = (2, v);
            }
        }
        proto::ICMP | proto::ICMPV6 => {
            // Echo request/reply of either family: identifier at 4.
            if l4.len() >= 2 && matches!(l4[0], 0 | 8 | 128 | 129) {
                if let Some(v) = ports.id {
                    changes[0] = (4, v);
                }
            }
        }
        _ => return (0, 0),
    }
    let (mut w_old, mut w_new) = (0u64, 0u64);
    for &(at, v) in &changes {
        if at != usize::MAX && l4.len() >= at + 2 {
            let o = get16(l4, at);
            w_old += u64::from(o);
            w_new += u64::from(v);
            put16(l4, at, v);
        }
    }
    old += w_old;
    new += w_new;
    if l4.len() >= ck_at + 2 {
        let ck = get16(l4, ck_at);
        let nck = match p {
            proto::UDP if ck == 0 => 0,
            proto::UDP => checksum::update_udp(ck, w_old, w_new),
            _ => checksum::update(ck, w_old, w_new),
        };
        old += u64::from(ck);
        new += u64::from(nck);
        put16(l4, ck_at, nck);
    }
    (old, new)
}

/// Rewrite the ports of a translated packet (only its first fragment
/// carries them).
pub(crate) fn outer(pkt: &mut [u8], ports: Ports) {
    let Some((hl, p, first)) = layout(pkt) else { return };
    if !first || pkt.len() < hl {
        return;
    }
    l4(p, &mut pkt[hl..], ports);
}

/// Rewrite the ports of the packet quoted in a translated ICMP error, and
/// fix the error's own checksum.
pub(crate) fn inner(pkt: &mut [u8], ports: Ports) {
    let Some((hl, p, _)) = layout(pkt) else { return };
    if !matches!(p, proto::ICMP | proto::ICMPV6) || pkt.len() < hl + 8 {
        return;
    }
    let (icmp, quoted) = pkt[hl..].split_at_mut(8);
    let Some((qhl, qp, first)) = layout(quoted) else { return };
    if !first || quoted.len() < qhl {
        return;
    }
    let (old, new) = l4(qp, &mut quoted[qhl..], ports);
    // The changed words sit at even offsets of the ICMP message (8 + 20 or
    // 8 + 40/48 + even), so the sums apply to its checksum directly.
    let ck = get16(icmp, 2);
    put16(icmp, 2, checksum::update(ck, old, new));
}
