//! RFC 6146 §3.4: fragments are reassembled before the state tables see
//! them (the transport header, hence the session, is in the first
//! fragment only, and fragments may arrive out of order). Resources are
//! bounded: at most `max-fragment-sets` datagrams and `max-fragment-bytes`
//! bytes are held, each for at most `fragment-timeout` (FRAGMENT_MIN is
//! 2 s); a fragment that would exceed a limit is dropped and counted.
//! An IPv6 datagram is rebuilt as RFC 8200 §4.5 says: the Per-Fragment
//! headers of the first fragment (the IPv6 header and the extension
//! headers in front of the Fragment header: Hop-by-Hop, Destination
//! Options, Routing) are kept, the last one's Next Header set to the
//! Fragment header's, followed by the fragmentable part. RFC 7915 §5.1
//! then ignores them when translating (a Routing header with Segments
//! Left is never reassembled: it is refused statelessly), but ICMP errors
//! about the datagram quote it as its sender built it.

use std::sync::Mutex;
use xlat::checksum;
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::ipv6::{self, Ipv6Packet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    v6: bool,
    src: u128,
    dst: u128,
    proto: u8,
    ident: u32,
}

#[derive(Debug)]
struct Partial {
    /// The first fragment's header (IPv4 header with options / IPv6
    /// Per-Fragment headers).
    header: Vec<u8>,
    /// IPv6: offset in `header` of the Next Header field that named the
    /// Fragment header.
    nh_at: usize,
    pieces: Vec<(usize, Vec<u8>)>,
    total: Option<usize>,
    bytes: usize,
    deadline: u64,
}

/// The reassembly buffer.
#[derive(Debug)]
pub struct Reassembler {
    inner: Mutex<Inner>,
    timeout_ns: u64,
    max_sets: usize,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    sets: crate::Map<Key, Partial>,
    bytes: usize,
}

/// What became of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed {
    /// Held until the rest arrives.
    Held,
    /// The datagram is complete: here it is, unfragmented.
    Done(Vec<u8>),
    /// Refused: a limit was hit or the fragment is inconsistent.
    Refused,
}

const MAX_DATAGRAM: usize = 65535;

impl Reassembler {
    pub fn new(timeout_ns: u64, max_sets: usize, max_bytes: usize) -> Self {
        Reassembler { inner: Mutex::new(Inner::default()), timeout_ns, max_sets, max_bytes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        function::lock(&self.inner)
    }

    /// Datagrams in progress.
    pub fn sets(&self) -> usize {
        self.lock().sets.len()
    }

    /// Feed an IPv4 fragment.
    pub fn feed_v4(&self, ip: &Ipv4Packet<'_>, now: u64) -> Fed {
        let key = Key {
            v6: false,
            src: u128::from(u32::from(ip.src())),
            dst: u128::from(u32::from(ip.dst())),
            proto: ip.protocol(),
            ident: u32::from(ip.ident()),
        };
        let off = usize::from(ip.frag_offset()) * 8;
        let hdr = if off == 0 { Some((ip.header(), 0)) } else { None };
        self.feed(key, hdr, off, ip.payload(), !ip.more_frags(), now, false)
    }

    /// Feed an IPv6 fragment (`frag_at`: offset of its Fragment header).
    pub fn feed_v6(&self, ip: &Ipv6Packet<'_>, f: ipv6::FragHeader, now: u64) -> Fed {
        let key = Key { v6: true, src: u128::from(ip.src()), dst: u128::from(ip.dst()), proto: f.next, ident: f.ident };
        let b = ip.as_bytes();
        let data_at = f.at + ipv6::FRAG_LEN;
        if b.len() < data_at {
            return Fed::Refused;
        }
        let off = usize::from(f.offset) * 8;
        let hdr = if off == 0 {
            match next_header_field(b, f.at) {
                Some(nh_at) => Some((&b[..f.at], nh_at)),
                None => return Fed::Refused,
            }
        } else {
            None
        };
        self.feed(key, hdr, off, &b[data_at..], !f.more, now, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn feed(
        &self,
        key: Key,
        hdr: Option<(&[u8], usize)>,
        off: usize,
        data: &[u8],
        last: bool,
        now: u64,
        v6: bool,
    ) -> Fed {
        // The rebuilt datagram must fit its length field: IPv4's Total
        // Length, IPv6's Payload Length (which counts the Per-Fragment
        // extension headers too).
        let ext = hdr.map_or(0, |(h, _)| if v6 { h.len() - ipv6::HEADER_LEN } else { 0 });
        if ext + off + data.len() > MAX_DATAGRAM || (!last && !data.len().is_multiple_of(8)) {
            return Fed::Refused;
        }
        let mut g = self.lock();
        let inner = &mut *g;
        if !inner.sets.contains_key(&key) && inner.sets.len() >= self.max_sets {
            return Fed::Refused;
        }
        if inner.bytes + data.len() > self.max_bytes {
            return Fed::Refused;
        }
        let timeout = self.timeout_ns;
        let p = inner.sets.entry(key).or_insert_with(|| Partial {
            header: Vec::new(),
            nh_at: 0,
            pieces: Vec::new(),
            total: None,
            bytes: 0,
            deadline: now.saturating_add(timeout),
        });
        // Overlapping fragments (RFC 5722 for IPv6) poison the datagram.
        let end = off + data.len();
        let overlap = p.pieces.iter().any(|(o, d)| off < o + d.len() && *o < end);
        let bad_total = last && (p.total.is_some_and(|t| t != end) || p.pieces.iter().any(|(o, d)| o + d.len() > end));
        let past_total = p.total.is_some_and(|t| end > t);
        if overlap || bad_total || past_total {
            let freed = p.bytes;
            inner.sets.remove(&key);
            inner.bytes -= freed;
            return Fed::Refused;
        }
        if let Some((h, nh_at)) = hdr {
            p.header = h.to_vec();
            p.nh_at = nh_at;
        }
        if last {
            p.total = Some(end);
        }
        p.pieces.push((off, data.to_vec()));
        p.bytes += data.len();
        inner.bytes += data.len();
        let Some(total) = p.total else { return Fed::Held };
        if p.header.is_empty() || p.pieces.iter().map(|(_, d)| d.len()).sum::<usize>() != total {
            return Fed::Held;
        }
        let Some(p) = inner.sets.remove(&key) else { return Fed::Held };
        inner.bytes -= p.bytes;
        drop(g);
        if v6 && p.header.len() - ipv6::HEADER_LEN + total > MAX_DATAGRAM {
            return Fed::Refused;
        }
        Fed::Done(build(p, total, v6, key.proto))
    }

    /// Drop datagrams whose time ran out. Returns how many.
    pub fn expire(&self, now: u64) -> usize {
        let mut g = self.lock();
        let inner = &mut *g;
        let before = inner.sets.len();
        let mut freed = 0;
        inner.sets.retain(|_, p| {
            let keep = p.deadline > now;
            if !keep {
                freed += p.bytes;
            }
            keep
        });
        inner.bytes -= freed;
        before - inner.sets.len()
    }
}

fn build(mut p: Partial, total: usize, v6: bool, proto: u8) -> Vec<u8> {
    p.pieces.sort_by_key(|(o, _)| *o);
    let hl = p.header.len();
    let mut out = Vec::with_capacity(hl + total);
    out.extend_from_slice(&p.header);
    for (_, d) in &p.pieces {
        out.extend_from_slice(d);
    }
    if v6 {
        // RFC 8200 §4.5: Payload Length covers the Per-Fragment extension
        // headers and the fragmentable part; the Next Header that named
        // the Fragment header now names what the Fragment header carried.
        out[4..6].copy_from_slice(&((hl - ipv6::HEADER_LEN + total) as u16).to_be_bytes());
        out[p.nh_at] = proto;
    } else {
        let len = (hl + total).min(MAX_DATAGRAM) as u16;
        out[2..4].copy_from_slice(&len.to_be_bytes());
        // Keep DF, clear MF and the offset.
        out[6] &= 0x40;
        out[7] = 0;
        out[10] = 0;
        out[11] = 0;
        let c = checksum::finish(checksum::sum(&out[..hl]));
        out[10..12].copy_from_slice(&c.to_be_bytes());
    }
    out
}

/// The offset of the Next Header field that names the header at `frag_at`
/// (the Fragment header): the IPv6 header's, or that of the extension
/// header just in front of it. `None` when the chain does not lead there.
fn next_header_field(b: &[u8], frag_at: usize) -> Option<usize> {
    let (mut nh_at, mut off) = (6, ipv6::HEADER_LEN);
    while off < frag_at {
        let len = (usize::from(*b.get(off + 1)?) + 1) * 8;
        nh_at = off;
        off += len;
    }
    (off == frag_at).then_some(nh_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_frag(ident: u16, off8: u16, more: bool, data: &[u8]) -> Vec<u8> {
        let mut h =
            vec![0x45, 0, 0, 0, (ident >> 8) as u8, ident as u8, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 192, 0, 2, 1];
        let fo = off8 | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&fo.to_be_bytes());
        let len = (20 + data.len()) as u16;
        h[2..4].copy_from_slice(&len.to_be_bytes());
        let c = checksum::finish(checksum::sum(&h));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(data);
        h
    }

    #[test]
    fn out_of_order_v4_reassembly() {
        let r = Reassembler::new(2_000_000_000, 4, 1 << 20);
        let a = v4_frag(7, 0, true, &[1; 16]);
        let b = v4_frag(7, 2, true, &[2; 16]);
        let c = v4_frag(7, 4, false, &[3; 5]);
        let feed = |p: &Vec<u8>| r.feed_v4(&Ipv4Packet::new(p).unwrap(), 0);
        assert_eq!(feed(&c), Fed::Held);
        assert_eq!(feed(&a), Fed::Held);
        let Fed::Done(full) = feed(&b) else { panic!("not complete") };
        let ip = Ipv4Packet::new(&full).unwrap();
        assert!(ip.checksum_ok());
        assert!(!ip.is_fragment());
        assert_eq!(ip.payload().len(), 37);
        assert_eq!(&ip.payload()[16..32], &[2; 16]);
        assert_eq!(r.sets(), 0);
    }

    /// RFC 8200 §4.5: an original packet with Per-Fragment headers
    /// (Hop-by-Hop, Destination Options) is cut into fragments that each
    /// carry them in front of the Fragment header; reassembly gives back
    /// the original packet, byte for byte.
    #[test]
    fn rfc8200_4_5_per_fragment_headers_are_kept() {
        let hbh = [60u8, 0, 1, 4, 0, 0, 0, 0]; // next: Destination Options; PadN
        let dst = [17u8, 0, 1, 4, 0, 0, 0, 0]; // next: UDP; PadN
        let upper: Vec<u8> = (0..40u8).collect();
        let fixed = |plen: usize, next: u8| {
            let mut h = vec![0x60, 0, 0, 0, 0, 0, next, 64];
            h[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
            h.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0x64, 0, 0, 0, 0, 0, 0, 0xc6, 0x33, 0x64, 7]);
            h
        };
        let mut original = fixed(16 + upper.len(), 0);
        original.extend_from_slice(&hbh);
        original.extend_from_slice(&dst);
        original.extend_from_slice(&upper);
        let frag = |off8: u16, more: bool, piece: &[u8]| {
            let mut p = fixed(16 + 8 + piece.len(), 0);
            p.extend_from_slice(&hbh);
            p.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // DstOpts, next: Fragment
            let fo = (off8 << 3) | u16::from(more);
            p.extend_from_slice(&[17, 0, (fo >> 8) as u8, fo as u8, 0, 0, 0x12, 0x34]);
            p.extend_from_slice(piece);
            p
        };
        let r = Reassembler::new(2_000_000_000, 4, 1 << 20);
        let feed = |p: &Vec<u8>| {
            let ip = Ipv6Packet::new(p).unwrap();
            let f = ip.walk().unwrap().frag.unwrap();
            r.feed_v6(&ip, f, 0)
        };
        assert_eq!(feed(&frag(3, false, &upper[24..])), Fed::Held);
        let Fed::Done(full) = feed(&frag(0, true, &upper[..24])) else { panic!("not complete") };
        assert_eq!(full, original);
    }

    #[test]
    fn limits_overlaps_and_timeout() {
        let r = Reassembler::new(10, 1, 40);
        let feed = |p: &Vec<u8>, now| r.feed_v4(&Ipv4Packet::new(p).unwrap(), now);
        assert_eq!(feed(&v4_frag(1, 0, true, &[0; 16]), 0), Fed::Held);
        // A second datagram exceeds max-fragment-sets.
        assert_eq!(feed(&v4_frag(2, 0, true, &[0; 16]), 0), Fed::Refused);
        // Overlap poisons the first.
        assert_eq!(feed(&v4_frag(1, 1, true, &[0; 16]), 0), Fed::Refused);
        assert_eq!(r.sets(), 0);
        assert_eq!(feed(&v4_frag(3, 0, true, &[0; 32]), 0), Fed::Held);
        // Byte limit.
        assert_eq!(feed(&v4_frag(3, 4, true, &[0; 16]), 0), Fed::Refused);
        assert_eq!(r.expire(5), 0);
        assert_eq!(r.expire(10), 1);
        assert_eq!(r.sets(), 0);
        // Non-last fragment whose size is not a multiple of 8.
        assert_eq!(feed(&v4_frag(4, 0, true, &[0; 5]), 0), Fed::Refused);
    }
}
