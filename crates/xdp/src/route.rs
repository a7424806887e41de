//! How the fast path finds the egress of a packet it emits: the slow
//! path's own routes and next hops mirrored into maps (`routes4`,
//! `routes6` → `nexthops`), or `bpf_fib_lookup` (optionally cached, and
//! optionally `BPF_FIB_LOOKUP_DIRECT`).
//!
//! The mirrored table is the Katran/Cilium arrangement: userspace owns
//! policy and resolution — the daemon keeps routes and next hops fresh
//! from netlink route and neighbour events — and the program does one
//! longest-prefix match and one array read per packet. A destination the
//! tries do not cover, or a next hop slot that is empty, takes
//! `bpf_fib_lookup` as before, so an incomplete table is never wrong, only
//! slower. See docs/xdp.md ("Forwarding").

use crate::loader::{map_err, FastPath};
use crate::types::{maps, Nexthop, FIB_DIRECT, FIB_TABLE, ROUTES4, ROUTES4_DEFAULT, ROUTES6, ROUTES6_DEFAULT};
use crate::Error;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, MapData, MapError};
use xlat::addr::{Prefix4, Prefix6};

/// How `bpf_fib_lookup` is called for a destination the mirrored routes
/// do not cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FibLookup {
    /// Policy rules, then the table they choose (the kernel's full answer).
    #[default]
    Rules,
    /// `BPF_FIB_LOOKUP_DIRECT`: the main table, no policy rules.
    Main,
    /// `BPF_FIB_LOOKUP_DIRECT | BPF_FIB_LOOKUP_TBID`: this table
    /// (Linux 6.8 and later).
    Table(u32),
}

impl FastPath {
    /// Choose how `bpf_fib_lookup` is called.
    pub fn set_fib_lookup(&mut self, how: FibLookup) -> Result<(), Error> {
        let (flags, table) = match how {
            FibLookup::Rules => (0, 0),
            FibLookup::Main => (FIB_DIRECT, 0),
            FibLookup::Table(t) => (FIB_DIRECT | FIB_TABLE, t),
        };
        self.config.fib_flags = flags;
        self.config.fib_table = table;
        self.write_config()
    }

    /// Set next hop `id` (< `Limits::nexthops`). Its interface must be one
    /// the fast path may send on (attached, or [`FastPath::allow_egress`]).
    pub fn nexthop_set(&mut self, id: u32, nh: Nexthop) -> Result<(), Error> {
        if id >= self.limits.nexthops {
            return Err(Error::Config(format!("next hop {id}: the limit is {}", self.limits.nexthops)));
        }
        if nh.ifindex == 0 || !self.egress.contains(&nh.ifindex) {
            return Err(Error::Config(format!(
                "next hop {id}: interface {} is not an allowed egress (attach it or allow_egress it first)",
                nh.ifindex
            )));
        }
        if nh.mtu < 68 {
            return Err(Error::Config(format!("next hop {id}: MTU {} below 68", nh.mtu)));
        }
        self.write_nexthop(id, Nexthop { pad: [0; 2], ..nh })
    }

    /// Empty next hop `id`: routes pointing at it take `bpf_fib_lookup`.
    pub fn nexthop_clear(&mut self, id: u32) -> Result<(), Error> {
        if id >= self.limits.nexthops {
            return Err(Error::Config(format!("next hop {id}: the limit is {}", self.limits.nexthops)));
        }
        self.write_nexthop(id, Nexthop::default())
    }

    fn write_nexthop(&mut self, id: u32, nh: Nexthop) -> Result<(), Error> {
        let mut a: Array<&mut MapData, Nexthop> = Array::try_from(self.map_mut(maps::NEXTHOPS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::NEXTHOPS)))?;
        a.set(id, nh, 0).map_err(|e| map_err(maps::NEXTHOPS, e))
    }

    /// Route IPv4 destinations in `dst` through next hop `id`.
    pub fn route4_insert(&mut self, dst: Prefix4, id: u32) -> Result<(), Error> {
        self.check_nexthop_id(id)?;
        let mut t: LpmTrie<&mut MapData, [u8; 4], u32> = LpmTrie::try_from(self.map_mut(maps::ROUTES4)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::ROUTES4)))?;
        t.insert(&Key::new(u32::from(dst.len()), dst.addr().octets()), id, 0).map_err(|e| map_err(maps::ROUTES4, e))?;
        self.routes4.insert((dst.addr().octets(), dst.len()), id);
        self.set_route_flags()
    }

    /// Route IPv6 destinations in `dst` through next hop `id`.
    pub fn route6_insert(&mut self, dst: Prefix6, id: u32) -> Result<(), Error> {
        self.check_nexthop_id(id)?;
        let mut t: LpmTrie<&mut MapData, [u8; 16], u32> = LpmTrie::try_from(self.map_mut(maps::ROUTES6)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::ROUTES6)))?;
        t.insert(&Key::new(u32::from(dst.len()), dst.addr().octets()), id, 0).map_err(|e| map_err(maps::ROUTES6, e))?;
        self.routes6.insert((dst.addr().octets(), dst.len()), id);
        self.set_route_flags()
    }

    /// Remove an IPv4 route; false when there was none.
    pub fn route4_remove(&mut self, dst: Prefix4) -> Result<bool, Error> {
        let mut t: LpmTrie<&mut MapData, [u8; 4], u32> = LpmTrie::try_from(self.map_mut(maps::ROUTES4)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::ROUTES4)))?;
        let found = absent_ok(t.remove(&Key::new(u32::from(dst.len()), dst.addr().octets())), maps::ROUTES4)?;
        self.routes4.remove(&(dst.addr().octets(), dst.len()));
        self.set_route_flags()?;
        Ok(found)
    }

    /// Remove an IPv6 route; false when there was none.
    pub fn route6_remove(&mut self, dst: Prefix6) -> Result<bool, Error> {
        let mut t: LpmTrie<&mut MapData, [u8; 16], u32> = LpmTrie::try_from(self.map_mut(maps::ROUTES6)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", maps::ROUTES6)))?;
        let found = absent_ok(t.remove(&Key::new(u32::from(dst.len()), dst.addr().octets())), maps::ROUTES6)?;
        self.routes6.remove(&(dst.addr().octets(), dst.len()));
        self.set_route_flags()?;
        Ok(found)
    }

    fn check_nexthop_id(&self, id: u32) -> Result<(), Error> {
        if id >= self.limits.nexthops {
            return Err(Error::Config(format!("next hop {id}: the limit is {}", self.limits.nexthops)));
        }
        Ok(())
    }

    /// The programs skip a trie that has no entries, and search none when
    /// the only route is the default route (its next hop is in the
    /// configuration: the common gateway case costs no trie lookup).
    fn set_route_flags(&mut self) -> Result<(), Error> {
        let (mut f, mut nh4, mut nh6) = (0, 0, 0);
        if let Some((&(_, len), &id)) = self.routes4.iter().next() {
            f |= ROUTES4;
            if self.routes4.len() == 1 && len == 0 {
                f |= ROUTES4_DEFAULT;
                nh4 = id;
            }
        }
        if let Some((&(_, len), &id)) = self.routes6.iter().next() {
            f |= ROUTES6;
            if self.routes6.len() == 1 && len == 0 {
                f |= ROUTES6_DEFAULT;
                nh6 = id;
            }
        }
        if (f, nh4, nh6) != (self.config.route_flags, self.config.default_nh4, self.config.default_nh6) {
            self.config.route_flags = f;
            self.config.default_nh4 = nh4;
            self.config.default_nh6 = nh6;
            self.write_config()?;
        }
        Ok(())
    }
}

fn absent_ok(r: Result<(), MapError>, map: &'static str) -> Result<bool, Error> {
    match r {
        Ok(()) => Ok(true),
        Err(MapError::KeyNotFound) => Ok(false),
        Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(map_err(map, e)),
    }
}
