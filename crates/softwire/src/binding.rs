//! The lw4o6 binding table (RFC 7596 §5.1, §6.1): per subscriber, the
//! lwB4's IPv6 address (its softwire end-point), an IPv4 address and a
//! port set (RFC 7597 §5.1 PSID). DSTM leases are bindings of a whole
//! address (PSID length 0).
//!
//! Lookups are O(1) in both directions:
//! - IPv4 → IPv6 ([`BindingTable::lookup4`], every packet from the IPv4
//!   side): the address's PSID parameters (a small map holding only
//!   shared addresses; an address that is absent is a whole-address
//!   binding), then one hash probe on (IPv4 address, PSID). When every
//!   shared address has the same parameters (one lw4o6 domain), the probe
//!   goes out with the PSID they give, together with the address's, not
//!   after it;
//! - IPv6 → binding ([`BindingTable::lookup6`] / [`BindingTable::check`],
//!   every packet from a softwire): one hash probe on the lwB4 address.
//!
//! Both directions use [`crate::flat::FlatMap`] (key and value in one
//! slot: a lookup that misses the caches costs one memory access).
//!
//! Memory: each binding is one slot in each of the two maps (32 bytes for
//! IPv4 → lwB4, 40 for lwB4 → binding), the maps kept at most half full
//! with power-of-two sizes, so 1,000,000 bindings take 2^21 × 72 B ≈
//! 151 MB, i.e. about 151 bytes per binding (between 72 and 144 bytes of
//! slots per binding depending on where the count falls between powers of
//! two; [`BindingTable::memory_bytes`] reports the figure for a loaded
//! table), plus 32 to 64 bytes per shared IPv4 address (one 16-byte slot
//! in a third such map).
//!
//! The table is immutable once built; the lwAFTR swaps in a new one on a
//! reload ([`crate::lwaftr::Lwaftr::replace_bindings`]), so lookups take no
//! lock.
//!
//! ## File format
//!
//! One binding per line, fields separated by blanks; `#` starts a comment:
//!
//! ```text
//! # lwB4 IPv6 address   IPv4 address   PSID  PSID length  [PSID offset]
//! 2001:db8:1::2         192.0.2.1      5     6
//! 2001:db8:1::3         192.0.2.1      6     6            6
//! 2001:db8:1::9         192.0.2.200                       # whole address
//! ```
//!
//! Every binding of one IPv4 address must have the same PSID length and
//! offset; the offset defaults to the configured `psid-offset` (RFC 7597's
//! 6).

use crate::flat::FlatMap;
use crate::portset::PsidMap;
use core::net::{Ipv4Addr, Ipv6Addr};
use std::fmt;

/// One subscriber's binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Binding {
    /// The lwB4's IPv6 address (softwire end-point).
    pub b4: Ipv6Addr,
    /// The subscriber's IPv4 address.
    pub ipv4: Ipv4Addr,
    /// The subscriber's PSID (0 for a whole address).
    pub psid: u16,
    /// The address's port-set parameters.
    pub map: PsidMap,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.map.is_full() {
            write!(f, "{} {}", self.b4, self.ipv4)
        } else {
            write!(f, "{} {} {} {} {}", self.b4, self.ipv4, self.psid, self.map.psid_len(), self.map.offset())
        }
    }
}

/// Why a binding cannot be added, or a file line is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingError(pub String);

impl fmt::Display for BindingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BindingError {}

/// The result of checking a softwire packet's inner source against the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The lwB4 holds this address and port.
    Ok,
    /// The IPv6 source holds no binding.
    NoBinding,
    /// The lwB4 has a binding, but not for this address.
    WrongAddress,
    /// The address matches but the port is outside the lwB4's set.
    PortOutside,
}

#[inline]
fn key(a: Ipv4Addr, psid: u16) -> u64 {
    (u64::from(u32::from(a)) << 16) | u64::from(psid)
}

/// The binding table. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct BindingTable {
    by4: FlatMap<u64, Ipv6Addr>,
    by6: FlatMap<Ipv6Addr, (u64, PsidMap)>,
    shared: FlatMap<u32, (PsidMap, u32)>,
    /// The port-set parameters of every shared address, when they are all
    /// the same (the usual lw4o6 domain): `lookup4` then probes `by4`
    /// without waiting for the address's own entry (see there).
    common: Option<PsidMap>,
    /// Shared addresses per port-set parameters (a few at most).
    maps: Vec<(PsidMap, u32)>,
}

impl BindingTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table with room for `n` bindings.
    pub fn with_capacity(n: usize) -> Self {
        BindingTable {
            by4: FlatMap::with_capacity(n),
            by6: FlatMap::with_capacity(n),
            shared: FlatMap::default(),
            common: None,
            maps: Vec::new(),
        }
    }

    /// Bindings held.
    pub fn len(&self) -> usize {
        self.by6.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.by6.is_empty()
    }

    /// Bytes the two maps and the PSID map take (their allocated capacity).
    pub fn memory_bytes(&self) -> usize {
        self.by4.memory_bytes() + self.by6.memory_bytes() + self.shared.memory_bytes()
    }

    /// The port-set parameters of `a` (a whole-address map when no shared
    /// binding uses it).
    #[inline]
    pub fn map_of(&self, a: Ipv4Addr) -> PsidMap {
        self.shared.get(&u32::from(a)).map_or(PsidMap::FULL, |s| s.0)
    }

    /// Count one more (`d` = 1) or one fewer (−1) shared address with
    /// port-set parameters `m`, and keep `common` true to them.
    fn count_map(&mut self, m: PsidMap, d: i32) {
        match self.maps.iter().position(|e| e.0 == m) {
            Some(i) => {
                self.maps[i].1 = self.maps[i].1.saturating_add_signed(d);
                if self.maps[i].1 == 0 {
                    self.maps.swap_remove(i);
                }
            }
            None if d > 0 => self.maps.push((m, d as u32)),
            None => {}
        }
        self.common = match self.maps.as_slice() {
            [(m, _)] => Some(*m),
            _ => None,
        };
    }

    /// Add a binding. Refused: a PSID outside the length, another binding
    /// for the same lwB4 or the same (address, PSID), port-set parameters
    /// that differ from the address's other bindings, a whole-address
    /// binding on a shared address or the reverse.
    pub fn insert(&mut self, b: Binding) -> Result<(), BindingError> {
        if u32::from(b.psid) >= b.map.psids() {
            return Err(BindingError(format!("psid {} does not fit psid-length {}", b.psid, b.map.psid_len())));
        }
        if self.by6.contains_key(&b.b4) {
            return Err(BindingError(format!("{} already has a binding", b.b4)));
        }
        let a = u32::from(b.ipv4);
        let current = self.shared.get(&a).map(|s| s.0);
        match current {
            Some(m) if m != b.map => {
                return Err(BindingError(format!(
                    "{}: {} differs from this address's other bindings ({m})",
                    b.ipv4, b.map
                )))
            }
            None if !b.map.is_full() && self.by4.contains_key(&key(b.ipv4, 0)) => {
                return Err(BindingError(format!("{} is bound as a whole address", b.ipv4)))
            }
            None if b.map.is_full() && self.by4.contains_key(&key(b.ipv4, 0)) => {
                return Err(BindingError(format!("{} is already bound", b.ipv4)))
            }
            _ => {}
        }
        let k = key(b.ipv4, b.psid);
        if self.by4.contains_key(&k) {
            return Err(BindingError(format!("{} psid {} is already bound", b.ipv4, b.psid)));
        }
        self.by4.insert(k, b.b4);
        self.by6.insert(b.b4, (k, b.map));
        if !b.map.is_full() {
            match self.shared.get(&a) {
                Some(&(m, n)) => {
                    self.shared.insert(a, (m, n + 1));
                }
                None => {
                    self.shared.insert(a, (b.map, 1));
                    self.count_map(b.map, 1);
                }
            }
        }
        Ok(())
    }

    /// Remove the binding of lwB4 `b4`.
    pub fn remove(&mut self, b4: &Ipv6Addr) -> Option<Binding> {
        let (k, map) = self.by6.remove(b4)?;
        self.by4.remove(&k);
        let b = Binding { b4: *b4, ipv4: Ipv4Addr::from((k >> 16) as u32), psid: k as u16, map };
        if !map.is_full() {
            let a = u32::from(b.ipv4);
            match self.shared.get(&a) {
                Some(&(m, 1)) => {
                    self.shared.remove(&a);
                    self.count_map(m, -1);
                }
                Some(&(m, n)) => {
                    self.shared.insert(a, (m, n - 1));
                }
                None => {}
            }
        }
        Some(b)
    }

    /// The lwB4 that owns transport address (`a`, `port`) (RFC 7596 §6.2:
    /// the lwAFTR's IPv4 → IPv6 lookup). `None` when nobody does, including
    /// the A = 0 ports of a shared address.
    #[inline]
    pub fn lookup4(&self, a: Ipv4Addr, port: u16) -> Option<&Ipv6Addr> {
        if let Some(m) = self.common {
            // Every shared address has the parameters `m`: probe `by4`
            // with the PSID they give before the address's own entry says
            // whether it is shared. Neither load waits for the other, so
            // with a million bindings (both of them cache misses) the
            // lookup costs about one miss, not two in a row. A whole
            // address (not in `shared`) takes the way below.
            let psid = m.psid(port);
            let hit = self.by4.get(&key(a, psid));
            if self.shared.contains_key(&u32::from(a)) {
                return hit.filter(|_| m.allowed(port, psid));
            }
        }
        let map = self.map_of(a);
        let psid = map.psid(port);
        if !map.allowed(port, psid) {
            return None;
        }
        self.by4.get(&key(a, psid))
    }

    /// The binding of lwB4 `b4`.
    #[inline]
    pub fn lookup6(&self, b4: &Ipv6Addr) -> Option<Binding> {
        let &(k, map) = self.by6.get(b4)?;
        Some(Binding { b4: *b4, ipv4: Ipv4Addr::from((k >> 16) as u32), psid: k as u16, map })
    }

    /// RFC 7596 §6.1: may lwB4 `b4` send from (`src`, `port`)?
    #[inline]
    pub fn check(&self, b4: &Ipv6Addr, src: Ipv4Addr, port: u16) -> Check {
        let Some(&(k, map)) = self.by6.get(b4) else { return Check::NoBinding };
        if (k >> 16) as u32 != u32::from(src) {
            return Check::WrongAddress;
        }
        if map.allowed(port, k as u16) {
            Check::Ok
        } else {
            Check::PortOutside
        }
    }

    /// Every binding (unordered).
    pub fn iter(&self) -> impl Iterator<Item = Binding> + '_ {
        self.by6.iter().map(|(b4, &(k, map))| Binding {
            b4: *b4,
            ipv4: Ipv4Addr::from((k >> 16) as u32),
            psid: k as u16,
            map,
        })
    }

    /// Parse the file format (module docs); `offset` is the default PSID
    /// offset. Errors name the line.
    pub fn parse(text: &str, offset: u8) -> Result<BindingTable, BindingError> {
        let lines = text.lines().filter(|l| !l.trim_start().starts_with('#')).count();
        let mut t = BindingTable::with_capacity(lines);
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            if line.trim().is_empty() {
                continue;
            }
            let b = parse_line(line, offset).map_err(|e| BindingError(format!("line {}: {e}", i + 1)))?;
            t.insert(b).map_err(|e| BindingError(format!("line {}: {e}", i + 1)))?;
        }
        Ok(t)
    }

    /// Read and parse a binding file.
    pub fn load(path: &std::path::Path, offset: u8) -> Result<BindingTable, BindingError> {
        let text = std::fs::read_to_string(path).map_err(|e| BindingError(format!("{}: {e}", path.display())))?;
        Self::parse(&text, offset).map_err(|e| BindingError(format!("{}: {e}", path.display())))
    }
}

/// One line of the binding file.
pub fn parse_line(line: &str, default_offset: u8) -> Result<Binding, BindingError> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let bad = |what: &str, v: &str| BindingError(format!("bad {what} `{v}`"));
    if !(f.len() == 2 || f.len() == 4 || f.len() == 5) {
        return Err(BindingError(format!(
            "expected `B4-IPV6 IPV4 [PSID PSID-LENGTH [OFFSET]]`, found {} fields",
            f.len()
        )));
    }
    let b4: Ipv6Addr = f[0].parse().map_err(|_| bad("IPv6 address", f[0]))?;
    let ipv4: Ipv4Addr = f[1].parse().map_err(|_| bad("IPv4 address", f[1]))?;
    let (psid, map) = if f.len() == 2 {
        (0, PsidMap::FULL)
    } else {
        let psid: u16 = f[2].parse().map_err(|_| bad("PSID", f[2]))?;
        let len: u8 = f[3].parse().map_err(|_| bad("PSID length", f[3]))?;
        let off: u8 = match f.get(4) {
            Some(o) => o.parse().map_err(|_| bad("PSID offset", o))?,
            None => default_offset,
        };
        (psid, PsidMap::new(off, len).map_err(|e| BindingError(e.0))?)
    };
    if b4.is_unspecified() || b4.is_multicast() || b4.is_loopback() {
        return Err(bad("lwB4 address", f[0]));
    }
    if xlat::addr::is_forbidden_v4(ipv4) {
        return Err(bad("IPv4 address", f[1]));
    }
    Ok(Binding { b4, ipv4, psid, map })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(b4: &str, v4: &str, psid: u16, len: u8) -> Binding {
        Binding { b4: b4.parse().unwrap(), ipv4: v4.parse().unwrap(), psid, map: PsidMap::new(6, len).unwrap() }
    }

    #[test]
    fn lookups_both_ways() {
        let mut t = BindingTable::new();
        t.insert(b("2001:db8::1", "192.0.2.1", 1, 6)).unwrap();
        t.insert(b("2001:db8::2", "192.0.2.1", 2, 6)).unwrap();
        t.insert(b("2001:db8::3", "192.0.2.9", 0, 0)).unwrap();
        let m = PsidMap::new(6, 6).unwrap();
        let p1 = m.nth(1, 0);
        let p2 = m.nth(2, 100);
        assert_eq!(t.lookup4("192.0.2.1".parse().unwrap(), p1), Some(&"2001:db8::1".parse().unwrap()));
        assert_eq!(t.lookup4("192.0.2.1".parse().unwrap(), p2), Some(&"2001:db8::2".parse().unwrap()));
        assert_eq!(t.lookup4("192.0.2.1".parse().unwrap(), 80), None, "A = 0 ports are nobody's");
        assert_eq!(t.lookup4("192.0.2.1".parse().unwrap(), m.nth(3, 0)), None);
        assert_eq!(t.lookup4("192.0.2.9".parse().unwrap(), 80), Some(&"2001:db8::3".parse().unwrap()));
        assert_eq!(t.lookup4("192.0.2.10".parse().unwrap(), 80), None);
        let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(t.check(&a, "192.0.2.1".parse().unwrap(), p1), Check::Ok);
        assert_eq!(t.check(&a, "192.0.2.1".parse().unwrap(), p2), Check::PortOutside);
        assert_eq!(t.check(&a, "192.0.2.2".parse().unwrap(), p1), Check::WrongAddress);
        assert_eq!(t.check(&"2001:db8::77".parse().unwrap(), "192.0.2.1".parse().unwrap(), p1), Check::NoBinding);
        assert_eq!(t.lookup6(&a).unwrap().psid, 1);
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(&a).unwrap().psid, 1);
        assert_eq!(t.lookup4("192.0.2.1".parse().unwrap(), p1), None);
        assert_eq!(t.check(&a, "192.0.2.1".parse().unwrap(), p1), Check::NoBinding);
        assert_eq!(t.len(), 2);
    }

    proptest::proptest! {
        /// `lookup4` equals a scan of every binding, whether every shared
        /// address has the same port-set parameters (the probe goes out
        /// early) or not, through inserts and removals that change which.
        #[test]
        fn lookup4_equals_a_scan(
            ops in proptest::collection::vec((0u8..16, 0u16..16, 0u8..3, proptest::prelude::any::<bool>()), 1..60),
            probes in proptest::collection::vec((0u8..16, proptest::prelude::any::<u16>()), 64),
        ) {
            // Parameters: 0 a whole address, 1 and 2 two shared maps.
            let maps = [PsidMap::new(6, 0).unwrap(), PsidMap::new(6, 4).unwrap(), PsidMap::new(4, 3).unwrap()];
            let mut t = BindingTable::new();
            let mut all: Vec<Binding> = Vec::new();
            for (i, (addr, psid, m, remove)) in ops.into_iter().enumerate() {
                let map = maps[m as usize];
                let b4 = Ipv6Addr::from((0x2001_0db8u128 << 96) | i as u128);
                let ipv4 = Ipv4Addr::new(192, 0, 2, addr);
                let psid = if map.is_full() { 0 } else { psid % map.psids() as u16 };
                if t.insert(Binding { b4, ipv4, psid, map }).is_ok() {
                    all.push(Binding { b4, ipv4, psid, map });
                }
                if remove && !all.is_empty() {
                    let gone = all.remove(i % all.len());
                    proptest::prop_assert!(t.remove(&gone.b4).is_some());
                }
            }
            for (addr, port) in probes {
                let a = Ipv4Addr::new(192, 0, 2, addr);
                let want = all
                    .iter()
                    .find(|b| b.ipv4 == a && b.map.allowed(port, b.psid) && b.map.psid(port) == b.psid)
                    .map(|b| b.b4);
                proptest::prop_assert_eq!(t.lookup4(a, port).copied(), want, "{} port {}", a, port);
            }
        }
    }

    #[test]
    fn conflicts_refused() {
        let mut t = BindingTable::new();
        t.insert(b("2001:db8::1", "192.0.2.1", 1, 6)).unwrap();
        assert!(t.insert(b("2001:db8::1", "192.0.2.2", 1, 6)).is_err(), "one binding per lwB4");
        assert!(t.insert(b("2001:db8::2", "192.0.2.1", 1, 6)).is_err(), "same PSID twice");
        assert!(t.insert(b("2001:db8::2", "192.0.2.1", 2, 5)).is_err(), "different PSID length on one address");
        assert!(t.insert(b("2001:db8::2", "192.0.2.1", 0, 0)).is_err(), "whole address on a shared one");
        assert!(t.insert(b("2001:db8::2", "192.0.2.1", 64, 6)).is_err(), "PSID wider than its length");
        t.insert(b("2001:db8::5", "192.0.2.5", 0, 0)).unwrap();
        assert!(t.insert(b("2001:db8::6", "192.0.2.5", 1, 6)).is_err(), "shared on a whole address");
        assert!(t.insert(b("2001:db8::6", "192.0.2.5", 0, 0)).is_err());
    }

    #[test]
    fn file_format() {
        let text =
            "# comment\n2001:db8::1 192.0.2.1 5 6\n\n2001:db8::2 192.0.2.1 6 6 6 # trailing\n2001:db8::9 192.0.2.200\n";
        let t = BindingTable::parse(text, 6).unwrap();
        assert_eq!(t.len(), 3);
        let b = t.lookup6(&"2001:db8::9".parse().unwrap()).unwrap();
        assert!(b.map.is_full());
        assert_eq!(b.to_string(), "2001:db8::9 192.0.2.200");
        assert_eq!(t.lookup6(&"2001:db8::1".parse().unwrap()).unwrap().to_string(), "2001:db8::1 192.0.2.1 5 6 6");
        for (text, want) in [
            ("2001:db8::1 192.0.2.1 5\n", "line 1: expected"),
            ("x 192.0.2.1\n", "line 1: bad IPv6 address `x`"),
            ("\n2001:db8::1 300.0.2.1\n", "line 2: bad IPv4 address"),
            ("2001:db8::1 192.0.2.1 5 12 6\n", "exceed 16 bits"),
            ("2001:db8::1 127.0.0.1\n", "bad IPv4 address"),
            ("ff02::1 192.0.2.1\n", "bad lwB4 address"),
            ("2001:db8::1 192.0.2.1\n2001:db8::1 192.0.2.2\n", "line 2: 2001:db8::1 already has a binding"),
        ] {
            let e = BindingTable::parse(text, 6).unwrap_err().0;
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn million_bindings_memory_is_bounded() {
        let mut t = BindingTable::with_capacity(1 << 16);
        let m = PsidMap::new(6, 6).unwrap();
        for i in 0..(1u32 << 16) {
            let b4 = Ipv6Addr::from((0x2001_0db8u128 << 96) | u128::from(i));
            t.insert(Binding { b4, ipv4: Ipv4Addr::from(0x0a00_0000 + (i >> 6)), psid: (i & 63) as u16, map: m })
                .unwrap();
        }
        assert_eq!(t.len(), 1 << 16);
        // 72 to 144 bytes of slots per binding (2^k slots, at most half full), plus the PSID map.
        let per = t.memory_bytes() / t.len();
        assert!((72..=200).contains(&per), "{per} bytes per binding");
    }
}
