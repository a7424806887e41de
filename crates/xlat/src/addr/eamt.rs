//! RFC 7757 — Explicit Address Mappings for Stateless IP/ICMP Translation.
//!
//! An Explicit Address Mapping (EAM) pairs an IPv4 prefix with an IPv6
//! prefix. Translating an address replaces the matching prefix with the
//! other one and copies the suffix bits (RFC 7757 §3.2–§3.3):
//!
//! - The IPv4 suffix (`32 - len4` bits) must not be longer than the IPv6
//!   suffix (`128 - len6` bits); an EAM breaking this is rejected.
//! - IPv4 → IPv6: the IPv4 suffix bits go immediately after the IPv6
//!   prefix; any remaining IPv6 suffix bits are zero. For example with
//!   192.0.2.128/26 ↔ 2001:db8:dddd::/64, 192.0.2.152 → 2001:db8:dddd:0:6000::
//!   (RFC 7757 Appendix B).
//! - IPv6 → IPv4: the `32 - len4` bits right after the IPv6 prefix are
//!   appended to the IPv4 prefix; the rest of the IPv6 suffix is ignored.
//! - Lookups are longest-prefix match on the side being translated
//!   (RFC 7757 §3.3), so overlapping EAMs are allowed (§5: e.g. an IVI-style
//!   0.0.0.0/0 ↔ 2001:db8:ff00::/40 next to 198.51.100.64 ↔ 2001:db8::abcd).
//!   Two EAMs with an identical IPv4 prefix or an identical IPv6 prefix
//!   would make translation ambiguous and are rejected.
//!
//! The table keeps, per family, one level per distinct prefix length,
//! longest first; each level maps the masked network to an entry (a sorted
//! vector for a handful of entries, a hash map with an integer hasher
//! beyond). A lookup is therefore O(#distinct lengths) and an empty table
//! costs one length check. Lookups never allocate and never panic.

use super::{AddrError, Prefix4, Prefix6};
use core::hash::{BuildHasherDefault, Hash, Hasher};
use core::net::{Ipv4Addr, Ipv6Addr};
use std::collections::HashMap;

/// Levels with at most this many entries use a sorted vector and binary
/// search instead of a hash map.
const SMALL_LEVEL: usize = 16;

/// Hasher for integer keys (the keys come from the operator's configuration,
/// so hash flooding is not a concern; lookups of attacker-chosen addresses
/// never insert).
#[derive(Debug, Default, Clone, Copy)]
struct IntHasher(u64);

impl IntHasher {
    #[inline]
    fn mix(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

impl Hasher for IntHasher {
    /// One multiply and a fold: the high bits (hashbrown's control byte)
    /// and the low bits (its bucket index) both depend on every key bit.
    /// Keys are operator-configured prefixes, not attacker input, so no
    /// keyed hash is needed.
    #[inline]
    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 32)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.mix(u64::from(b));
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.0 ^= u64::from(n);
    }
    #[inline]
    fn write_u128(&mut self, n: u128) {
        self.0 ^= (n as u64) ^ ((n >> 64) as u64).rotate_left(29);
    }
}

type IntMap<K> = HashMap<K, u32, BuildHasherDefault<IntHasher>>;

/// The networks of one prefix length, mapped to entry indices.
#[derive(Debug, Clone)]
enum Bucket<K: Eq + Hash> {
    /// Sorted by network.
    Small(Vec<(K, u32)>),
    Hashed(IntMap<K>),
}

impl<K: Copy + Ord + Hash> Bucket<K> {
    fn build(mut items: Vec<(K, u32)>) -> Self {
        if items.len() <= SMALL_LEVEL {
            items.sort_unstable_by_key(|&(k, _)| k);
            Bucket::Small(items)
        } else {
            Bucket::Hashed(items.into_iter().collect())
        }
    }

    #[inline]
    fn get(&self, key: K) -> Option<u32> {
        match self {
            Bucket::Small(v) => v.binary_search_by_key(&key, |&(k, _)| k).ok().and_then(|i| v.get(i)).map(|&(_, e)| e),
            Bucket::Hashed(m) => m.get(&key).copied(),
        }
    }
}

/// All prefixes of one length on one side of the table.
#[derive(Debug, Clone)]
struct Level<K: Eq + Hash> {
    mask: K,
    bucket: Bucket<K>,
}

/// One EAM, precompiled to integers.
#[derive(Debug, Clone, Copy)]
struct Compiled {
    /// IPv4 network.
    net4: u32,
    /// Mask of the IPv4 suffix (`!mask4`).
    suffix4: u32,
    /// IPv6 network.
    net6: u128,
    /// Where the IPv4 suffix sits in the IPv6 address: `(128 - len6) -
    /// (32 - len4)`, clamped to 127 (only reached when the IPv4 suffix is
    /// empty, where any shift of zero gives zero).
    shift: u32,
}

impl Compiled {
    #[inline]
    fn v4_to_v6(&self, a: u32) -> Ipv6Addr {
        Ipv6Addr::from(self.net6 | (u128::from(a & self.suffix4) << self.shift))
    }
    #[inline]
    fn v6_to_v4(&self, a: u128) -> Ipv4Addr {
        // The masked value is < 2^32, so the cast is lossless.
        Ipv4Addr::from(self.net4 | ((a >> self.shift) as u32 & self.suffix4))
    }
}

/// The Explicit Address Mapping Table.
#[derive(Debug, Clone, Default)]
pub struct Eamt {
    /// As configured, for display.
    entries: Vec<(Prefix6, Prefix4)>,
    /// Same order as `entries`.
    compiled: Vec<Compiled>,
    /// IPv4 side, longest prefix length first.
    levels4: Vec<Level<u32>>,
    /// IPv6 side, longest prefix length first.
    levels6: Vec<Level<u128>>,
    /// Lowest and highest IPv4 address any entry covers: a lookup outside
    /// is a miss without touching the levels.
    span4: (u32, u32),
    /// The same for IPv6.
    span6: (u128, u128),
}

fn describe(i: usize, e: &(Prefix6, Prefix4)) -> String {
    format!("EAM #{} ({} <-> {})", i + 1, e.1, e.0)
}

/// Group `(len, network, index)` by length into levels, longest first.
fn build_levels<K: Copy + Ord + Hash>(mut items: Vec<(u8, K, u32)>, mask: impl Fn(u8) -> K) -> Vec<Level<K>> {
    items.sort_unstable_by_key(|x| core::cmp::Reverse(x.0));
    let mut levels = Vec::new();
    let mut rest = items.as_slice();
    while let Some(&(len, _, _)) = rest.first() {
        let n = rest.iter().take_while(|x| x.0 == len).count();
        let (group, tail) = rest.split_at(n);
        levels.push(Level { mask: mask(len), bucket: Bucket::build(group.iter().map(|&(_, k, i)| (k, i)).collect()) });
        rest = tail;
    }
    levels
}

impl Eamt {
    /// Build from (IPv6 prefix, IPv4 prefix) pairs.
    ///
    /// Fails (naming the entry) when an IPv4 suffix is longer than its IPv6
    /// suffix (RFC 7757 §3.2), and (naming both entries) when two entries
    /// share an identical IPv4 or IPv6 prefix.
    pub fn new(entries: &[(Prefix6, Prefix4)]) -> Result<Self, AddrError> {
        if entries.len() > u32::MAX as usize {
            return Err(AddrError::Rule(format!("EAMT: too many entries ({})", entries.len())));
        }
        let mut seen4: HashMap<Prefix4, usize> = HashMap::with_capacity(entries.len());
        let mut seen6: HashMap<Prefix6, usize> = HashMap::with_capacity(entries.len());
        let mut compiled = Vec::with_capacity(entries.len());
        let mut items4 = Vec::with_capacity(entries.len());
        let mut items6 = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let (p6, p4) = *e;
            let s4 = 32 - u32::from(p4.len());
            let s6 = 128 - u32::from(p6.len());
            if s4 > s6 {
                return Err(AddrError::Rule(format!(
                    "{}: the IPv4 suffix ({s4} bits) is longer than the IPv6 suffix ({s6} bits); \
                     RFC 7757 requires the IPv6 suffix to be at least as long",
                    describe(i, e)
                )));
            }
            if let Some(&j) = seen4.get(&p4) {
                return Err(AddrError::Rule(format!(
                    "{} has the same IPv4 prefix {p4} as {}",
                    describe(i, e),
                    describe(j, &entries[j])
                )));
            }
            if let Some(&j) = seen6.get(&p6) {
                return Err(AddrError::Rule(format!(
                    "{} has the same IPv6 prefix {p6} as {}",
                    describe(i, e),
                    describe(j, &entries[j])
                )));
            }
            seen4.insert(p4, i);
            seen6.insert(p6, i);
            let net4 = u32::from(p4.addr());
            let net6 = u128::from(p6.addr());
            compiled.push(Compiled { net4, suffix4: !p4.mask(), net6, shift: (s6 - s4).min(127) });
            items4.push((p4.len(), net4, i as u32));
            items6.push((p6.len(), net6, i as u32));
        }
        let span4 = entries.iter().fold((u32::MAX, 0), |(lo, hi), (_, p4)| {
            let net = u32::from(p4.addr());
            (lo.min(net), hi.max(net | !p4.mask()))
        });
        let span6 = entries.iter().fold((u128::MAX, 0), |(lo, hi), (p6, _)| {
            let net = u128::from(p6.addr());
            (lo.min(net), hi.max(net | !p6.mask()))
        });
        Ok(Eamt {
            entries: entries.to_vec(),
            compiled,
            span4,
            span6,
            levels4: build_levels(items4, |l| Prefix4::new(Ipv4Addr::UNSPECIFIED, l).map_or(0, |p| p.mask())),
            levels6: build_levels(items6, |l| Prefix6::new(Ipv6Addr::UNSPECIFIED, l).map_or(0, |p| p.mask())),
        })
    }

    /// True when the table is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries as configured, in their original order.
    pub fn entries(&self) -> &[(Prefix6, Prefix4)] {
        &self.entries
    }

    /// Index (into [`Eamt::entries`]) of the entry whose IPv4 prefix is the
    /// longest match for `a`.
    #[inline]
    pub fn lookup_v4(&self, a: Ipv4Addr) -> Option<usize> {
        let a = u32::from(a);
        if a < self.span4.0 || a > self.span4.1 {
            return None;
        }
        self.levels4.iter().find_map(|l| l.bucket.get(a & l.mask)).map(|i| i as usize)
    }

    /// Index (into [`Eamt::entries`]) of the entry whose IPv6 prefix is the
    /// longest match for `a`.
    #[inline]
    pub fn lookup_v6(&self, a: &Ipv6Addr) -> Option<usize> {
        let a = u128::from(*a);
        if a < self.span6.0 || a > self.span6.1 {
            return None;
        }
        self.levels6.iter().find_map(|l| l.bucket.get(a & l.mask)).map(|i| i as usize)
    }

    /// Longest-prefix match on the IPv4 side.
    #[inline]
    pub fn v4_to_v6(&self, a: Ipv4Addr) -> Option<Ipv6Addr> {
        let i = self.lookup_v4(a)?;
        self.compiled.get(i).map(|c| c.v4_to_v6(u32::from(a)))
    }

    /// Longest-prefix match on the IPv6 side.
    #[inline]
    pub fn v6_to_v4(&self, a: &Ipv6Addr) -> Option<Ipv4Addr> {
        let i = self.lookup_v6(a)?;
        self.compiled.get(i).map(|c| c.v6_to_v4(u128::from(*a)))
    }

    /// True when `a` is covered by an entry's IPv4 prefix (hairpin test).
    #[inline]
    pub fn contains_v4(&self, a: Ipv4Addr) -> bool {
        self.lookup_v4(a).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }
    fn eamt(rows: &[(&str, &str)]) -> Result<Eamt, AddrError> {
        let e: Vec<(Prefix6, Prefix4)> =
            rows.iter().map(|(a4, a6)| (a6.parse().unwrap(), a4.parse().unwrap())).collect();
        Eamt::new(&e)
    }
    /// Both directions.
    fn both(t: &Eamt, a4: &str, a6: &str) {
        assert_eq!(t.v4_to_v6(v4(a4)), Some(v6(a6)), "{a4} -> {a6}");
        assert_eq!(t.v6_to_v4(&v6(a6)), Some(v4(a4)), "{a6} -> {a4}");
    }

    #[test]
    fn empty_table() {
        let t = Eamt::default();
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        assert_eq!(t.v4_to_v6(v4("192.0.2.1")), None);
        assert_eq!(t.v6_to_v4(&v6("2001:db8::1")), None);
        assert!(!t.contains_v4(v4("0.0.0.0")));
        let t = Eamt::new(&[]).unwrap();
        assert!(t.is_empty());
    }

    /// RFC 7757 Appendix B examples.
    #[test]
    fn rfc7757_appendix_b() {
        let t = eamt(&[
            ("192.0.2.1", "2001:db8:aaaa::"),
            ("192.0.2.2/32", "2001:db8:bbbb::b/128"),
            ("192.0.2.16/28", "2001:db8:cccc::/124"),
            ("192.0.2.128/26", "2001:db8:dddd::/64"),
            ("192.0.2.192/29", "2001:db8:eeee:8::/62"),
            ("192.0.2.224/31", "64:ff9b::/127"),
        ])
        .unwrap();
        assert_eq!(t.len(), 6);
        both(&t, "192.0.2.1", "2001:db8:aaaa::");
        both(&t, "192.0.2.2", "2001:db8:bbbb::b");
        both(&t, "192.0.2.16", "2001:db8:cccc::");
        both(&t, "192.0.2.24", "2001:db8:cccc::8");
        both(&t, "192.0.2.31", "2001:db8:cccc::f");
        both(&t, "192.0.2.128", "2001:db8:dddd::");
        both(&t, "192.0.2.152", "2001:db8:dddd:0:6000::");
        both(&t, "192.0.2.183", "2001:db8:dddd:0:dc00::");
        both(&t, "192.0.2.191", "2001:db8:dddd:0:fc00::");
        both(&t, "192.0.2.195", "2001:db8:eeee:9:8000::");
        both(&t, "192.0.2.225", "64:ff9b::1");
        // IPv6 → IPv4 ignores the IPv6 suffix bits beyond the IPv4 suffix.
        assert_eq!(t.v6_to_v4(&v6("2001:db8:dddd:0:6000:beef::1")), Some(v4("192.0.2.152")));
        // Untranslatable.
        assert_eq!(t.v4_to_v6(v4("192.0.2.3")), None);
        assert_eq!(t.v4_to_v6(v4("192.0.2.226")), None);
        assert_eq!(t.v6_to_v4(&v6("2001:db8:aaaa::1")), None);
        assert_eq!(t.v6_to_v4(&v6("2001:db8:cccc::10")), None);
        assert_eq!(t.v6_to_v4(&v6("64:ff9b::2")), None);
        assert!(t.contains_v4(v4("192.0.2.130")));
        assert!(!t.contains_v4(v4("192.0.2.64")));
    }

    /// The Jool-documentation style table: bit-level prefix replacement.
    #[test]
    fn prefix_suffix_copy() {
        let t = eamt(&[
            ("192.0.2.1/32", "2001:db8:aaaa::5/128"),
            ("198.51.100.0/24", "2001:db8:bbbb::/120"),
            ("203.0.113.8/29", "2001:db8:cccc::/125"),
        ])
        .unwrap();
        both(&t, "192.0.2.1", "2001:db8:aaaa::5");
        both(&t, "198.51.100.0", "2001:db8:bbbb::");
        both(&t, "198.51.100.254", "2001:db8:bbbb::fe");
        both(&t, "198.51.100.255", "2001:db8:bbbb::ff");
        both(&t, "203.0.113.8", "2001:db8:cccc::");
        both(&t, "203.0.113.9", "2001:db8:cccc::1");
        both(&t, "203.0.113.15", "2001:db8:cccc::7");
        assert_eq!(t.v4_to_v6(v4("203.0.113.16")), None);
        assert_eq!(t.v6_to_v4(&v6("2001:db8:bbbb::100")), None);
        assert_eq!(t.entries()[1].1, "198.51.100.0/24".parse().unwrap());
    }

    /// RFC 7757 §5: overlapping EAMs, longest prefix match on each side.
    #[test]
    fn rfc7757_overlapping_ivi() {
        let t = eamt(&[("0.0.0.0/0", "2001:db8:ff00::/40"), ("198.51.100.64", "2001:db8::abcd")]).unwrap();
        assert_eq!(t.v6_to_v4(&v6("2001:db8:ffc6:3364:4000::")), Some(v4("198.51.100.64")));
        assert_eq!(t.v4_to_v6(v4("198.51.100.64")), Some(v6("2001:db8::abcd")));
        assert_eq!(t.v6_to_v4(&v6("2001:db8::abcd")), Some(v4("198.51.100.64")));
        both(&t, "198.51.100.65", "2001:db8:ffc6:3364:4100::");
        assert!(t.contains_v4(v4("8.8.8.8")));
    }

    #[test]
    fn lpm_nested_entries_both_directions() {
        let t = eamt(&[("198.51.100.0/24", "2001:db8:1::/120"), ("198.51.100.7/32", "2001:db8:2::7/128")]).unwrap();
        both(&t, "198.51.100.7", "2001:db8:2::7");
        both(&t, "198.51.100.8", "2001:db8:1::8");
        // 2001:db8:1::7 still maps through the /24 (RFC 7757 allows the
        // asymmetry).
        assert_eq!(t.v6_to_v4(&v6("2001:db8:1::7")), Some(v4("198.51.100.7")));
        // IPv6 side nested: a /128 inside a /120.
        let t = eamt(&[("198.51.100.0/24", "2001:db8:1::/120"), ("203.0.113.1/32", "2001:db8:1::42/128")]).unwrap();
        both(&t, "203.0.113.1", "2001:db8:1::42");
        both(&t, "198.51.100.41", "2001:db8:1::29");
        assert_eq!(t.v4_to_v6(v4("198.51.100.66")), Some(v6("2001:db8:1::42")));
        // Order of configuration does not matter.
        let t = eamt(&[("198.51.100.7/32", "2001:db8:2::7/128"), ("198.51.100.0/24", "2001:db8:1::/120")]).unwrap();
        both(&t, "198.51.100.7", "2001:db8:2::7");
        both(&t, "198.51.100.8", "2001:db8:1::8");
    }

    #[test]
    fn suffix_length_rule() {
        // IPv4 suffix 8 bits, IPv6 suffix 4 bits: rejected, entry named.
        let err = eamt(&[("192.0.2.1", "2001:db8::1"), ("5.0.0.0/24", "5::/124")]).unwrap_err();
        match err {
            AddrError::Rule(m) => {
                assert!(m.contains("EAM #2") && m.contains("5.0.0.0/24") && m.contains("5::/124"), "{m}");
                assert!(m.contains("suffix"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        // Longer IPv6 suffix is fine; IPv4 /32 onto IPv6 /0 too.
        let t = eamt(&[("5.0.0.0/28", "5::/120"), ("6.0.0.1/32", "::/0")]).unwrap();
        both(&t, "5.0.0.15", "5::f0");
        both(&t, "6.0.0.1", "::");
        assert_eq!(t.v6_to_v4(&v6("ffff::1")), Some(v4("6.0.0.1")));
        // Whole IPv4 space onto a /96.
        let t = eamt(&[("0.0.0.0/0", "2001:db8::/96")]).unwrap();
        both(&t, "255.255.255.255", "2001:db8::ffff:ffff");
        both(&t, "0.0.0.0", "2001:db8::");
    }

    #[test]
    fn duplicates_rejected() {
        let err = eamt(&[("198.51.100.8", "2001:db8::1"), ("198.51.100.9", "2001:db8::1")]).unwrap_err();
        match err {
            AddrError::Rule(m) => {
                assert!(
                    m.contains("EAM #2") && m.contains("EAM #1") && m.contains("IPv6 prefix 2001:db8::1/128"),
                    "{m}"
                );
            }
            other => panic!("{other:?}"),
        }
        let err = eamt(&[("1.0.0.4/30", "1::c/126"), ("1.0.0.4/30", "1::/126")]).unwrap_err();
        assert!(
            matches!(&err, AddrError::Rule(m) if m.contains("IPv4 prefix 1.0.0.4/30") && m.contains("#1")),
            "{err}"
        );
        // Exact duplicate entry.
        assert!(eamt(&[("1.0.0.4/30", "1::c/126"), ("1.0.0.4/30", "1::c/126")]).is_err());
        // Same network, different length: allowed (overlap, not identical).
        assert!(eamt(&[("1.0.0.4/30", "1::c/126"), ("1.0.0.4/31", "3::c/127")]).is_ok());
        assert!(eamt(&[("1.0.0.4/30", "1::c/126"), ("3.0.0.12/31", "1::c/127")]).is_ok());
    }

    #[test]
    fn many_entries_use_hashed_levels() {
        // 300 /32 ↔ /128 entries plus a covering /24 ↔ /120.
        let mut rows: Vec<(Prefix6, Prefix4)> = (0..300u32)
            .map(|i| {
                let a4 = Ipv4Addr::from(0x0a00_0000 + i);
                let a6 = Ipv6Addr::from(0x2001_0db8_0000_0000_0000_0000_0000_0000u128 + u128::from(i) * 3);
                (Prefix6::new(a6, 128).unwrap(), Prefix4::new(a4, 32).unwrap())
            })
            .collect();
        rows.push(("2001:db8:ffff::/120".parse().unwrap(), "10.0.1.0/24".parse().unwrap()));
        let t = Eamt::new(&rows).unwrap();
        assert!(matches!(t.levels4[0].bucket, Bucket::Hashed(_)));
        for (p6, p4) in &rows[..300] {
            assert_eq!(t.v4_to_v6(p4.addr()), Some(p6.addr()));
            assert_eq!(t.v6_to_v4(&p6.addr()), Some(p4.addr()));
        }
        // 10.0.1.44 (i = 300) is not a /32 entry: falls to the /24.
        assert_eq!(t.v4_to_v6(v4("10.0.1.44")), Some(v6("2001:db8:ffff::2c")));
        assert_eq!(t.v4_to_v6(v4("10.0.2.0")), None);
        assert_eq!(t.v6_to_v4(&v6("2001:db8::1")), None);
    }

    fn entry() -> impl Strategy<Value = (Prefix6, Prefix4)> {
        (0u8..=32, any::<u32>(), any::<u128>(), any::<u8>()).prop_map(|(l4, a4, a6, extra)| {
            let s4 = 32 - u32::from(l4);
            // IPv6 suffix at least s4 bits: l6 in 0..=128 - s4.
            let max_l6 = 128 - s4;
            let l6 = (u32::from(extra) * (max_l6 + 1) / 256) as u8;
            let m4 = if l4 == 0 { 0 } else { u32::MAX << (32 - u32::from(l4)) };
            let m6 = if l6 == 0 { 0 } else { u128::MAX << (128 - u32::from(l6)) };
            (Prefix6::new(Ipv6Addr::from(a6 & m6), l6).unwrap(), Prefix4::new(Ipv4Addr::from(a4 & m4), l4).unwrap())
        })
    }

    proptest! {
        #[test]
        fn round_trip_inside_entry(e in entry(), host in any::<u32>()) {
            let (p6, p4) = e;
            let t = Eamt::new(&[e]).unwrap();
            let a = Ipv4Addr::from(u32::from(p4.addr()) | (host & !p4.mask()));
            let x = t.v4_to_v6(a).unwrap();
            prop_assert!(p6.contains(&x));
            prop_assert_eq!(t.v6_to_v4(&x), Some(a));
            prop_assert!(t.contains_v4(a));
        }

        #[test]
        fn lookups_never_panic(es in proptest::collection::vec(entry(), 0..40), a4 in any::<u32>(), a6 in any::<u128>()) {
            // Random tables may contain duplicates; those are rejected.
            if let Ok(t) = Eamt::new(&es) {
                let a4 = Ipv4Addr::from(a4);
                let a6 = Ipv6Addr::from(a6);
                if let Some(x) = t.v4_to_v6(a4) {
                    let i = t.lookup_v4(a4).unwrap();
                    prop_assert!(t.entries()[i].0.contains(&x));
                    // Longest match: no covering entry is longer.
                    prop_assert!(t.entries().iter().all(|(_, p4)| !p4.contains(a4) || p4.len() <= t.entries()[i].1.len()));
                } else {
                    prop_assert!(t.entries().iter().all(|(_, p4)| !p4.contains(a4)));
                }
                match t.lookup_v6(&a6) {
                    Some(i) => {
                        prop_assert!(t.entries()[i].0.contains(&a6));
                        prop_assert!(t.entries().iter().all(|(p6, _)| !p6.contains(&a6) || p6.len() <= t.entries()[i].0.len()));
                        prop_assert!(t.entries()[i].1.contains(t.v6_to_v4(&a6).unwrap()));
                    }
                    None => prop_assert!(t.v6_to_v4(&a6).is_none()),
                }
            }
        }
    }
}
