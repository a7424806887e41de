//! The XDP fast path's mirrored routes and next hops (`routes4`,
//! `routes6` → `nexthops`, see `xdp::route` and docs/xdp.md,
//! "Forwarding"), kept in line with the kernel by a periodic resync: every
//! [`ROUTE_SYNC`] the daemon dumps links, routes, neighbours and policy
//! rules over route netlink and brings the maps in line with them.
//!
//! What is mirrored answers exactly as the kernel would, or not at all:
//!
//! - a main-table unicast route through a gateway whose neighbour entry
//!   is usable (REACHABLE, STALE, DELAY, PROBE, PERMANENT), out of an
//!   interface the fast path may send on, single path, no TOS or source
//!   prefix: its prefix → a next hop (interface, gateway MAC, the
//!   interface's MAC, the route's MTU or the interface's);
//! - on a directly connected prefix, each usable neighbour whose own
//!   longest match is that prefix: a host route → its next hop;
//! - every other route of the local, main and default tables (local
//!   addresses, connected prefixes, blackholes, multipath, other
//!   interfaces, unresolved gateways): its prefix → next hop 0, which is
//!   always empty, so those destinations take `bpf_fib_lookup` (a longer
//!   prefix than a mirrored one is never shadowed by it);
//! - a family with policy rules beyond the standard three (local, main,
//!   default) is not mirrored at all (everything takes the FIB), and
//!   neither is a family with more routes than the trie holds (counted).
//!
//! A change reaches the fast path within one resync period; until then a
//! packet may still leave by the previous next hop (the same window the
//! FIB cache has). An incomplete mirror is never wrong, only slower.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use netsys::netlink::{Link, Neighbour, Route, Rule, NUD_USABLE};
use serde_json::{json, Value};
use xlat::addr::IpPrefix;

/// How often the route mirror is resynced from the kernel.
pub const ROUTE_SYNC: Duration = Duration::from_secs(1);

const RT_TABLE_DEFAULT: u32 = 253;
const RT_TABLE_MAIN: u32 = 254;
const RT_TABLE_LOCAL: u32 = 255;
const RTN_UNICAST: u8 = 1;
const FR_ACT_TO_TBL: u8 = 1;

/// A resolved next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hop {
    /// Egress interface.
    pub ifindex: u32,
    /// The neighbour's MAC.
    pub dmac: [u8; 6],
    /// The egress interface's MAC.
    pub smac: [u8; 6],
    /// Largest L3 packet the route takes.
    pub mtu: u16,
}

/// What the kernel's tables say one family's mirror should be: prefix →
/// next hop (None: take the FIB).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Want {
    /// Prefix → next hop.
    pub routes: HashMap<IpPrefix, Option<Hop>>,
    /// Policy rules beyond the standard ones: nothing is mirrored.
    pub policy: bool,
}

/// One family's wanted mirror from the kernel's dumps. `egress`: the
/// interfaces the fast path may send on.
pub fn want(links: &[Link], routes: &[Route], neighbours: &[Neighbour], rules: &[Rule], egress: &HashSet<u32>) -> Want {
    let policy = rules
        .iter()
        .any(|r| r.action != FR_ACT_TO_TBL || ![RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_DEFAULT].contains(&r.table));
    if policy {
        return Want { routes: HashMap::new(), policy };
    }
    let link: HashMap<u32, &Link> = links.iter().map(|l| (l.index, l)).collect();
    let neigh: HashMap<(u32, IpAddr), [u8; 6]> = neighbours
        .iter()
        .filter(|n| n.state & NUD_USABLE != 0)
        .filter_map(|n| Some(((n.ifindex, n.addr), n.mac?)))
        .collect();
    let hop = |oif: u32, mac: [u8; 6], mtu: Option<u32>| -> Option<Hop> {
        if !egress.contains(&oif) {
            return None;
        }
        let l = link.get(&oif)?;
        let mtu = mtu.unwrap_or(l.mtu).min(u32::from(u16::MAX));
        (mtu >= 68).then_some(Hop { ifindex: oif, dmac: mac, smac: l.mac?, mtu: mtu as u16 })
    };
    let mut out: HashMap<IpPrefix, Option<Hop>> = HashMap::new();
    let mut connected: Vec<(IpPrefix, u32, Option<u32>)> = Vec::new();
    let mut main: Vec<IpPrefix> = Vec::new();
    for r in routes {
        if ![RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_DEFAULT].contains(&r.table) {
            continue;
        }
        let simple = r.table == RT_TABLE_MAIN && r.kind == RTN_UNICAST && !r.complex && r.tos == 0 && r.src_len == 0;
        if r.table == RT_TABLE_MAIN {
            main.push(r.dst);
        }
        let h = match (simple, r.oif, r.gateway) {
            (true, Some(oif), Some(gw)) => neigh.get(&(oif, gw)).and_then(|&mac| hop(oif, mac, r.mtu)),
            (true, Some(oif), None) => {
                connected.push((r.dst, oif, r.mtu));
                None
            }
            _ => None,
        };
        put(&mut out, r.dst, h);
    }
    // On-link destinations: a host route for each usable neighbour whose
    // longest main-table match is the connected prefix it sits on.
    for (&(ifindex, addr), &mac) in &neigh {
        let Some(&(p, _, mtu)) = connected.iter().find(|c| c.1 == ifindex && c.0.contains(addr)) else { continue };
        let longest = main.iter().filter(|m| m.contains(addr)).map(|m| m.len()).max();
        if longest != Some(p.len()) {
            continue;
        }
        let host = IpPrefix::new(addr, if addr.is_ipv4() { 32 } else { 128 }).expect("a host prefix");
        if let Some(h) = hop(ifindex, mac, mtu) {
            put(&mut out, host, Some(h));
        }
    }
    Want { routes: out, policy }
}

/// Add `p` → `h`; two routes to one prefix (metrics, TOS, tables) that
/// disagree leave it to the FIB.
fn put(out: &mut HashMap<IpPrefix, Option<Hop>>, p: IpPrefix, h: Option<Hop>) {
    match out.get(&p) {
        Some(old) if *old != h => {
            out.insert(p, None);
        }
        Some(_) => {}
        None => {
            out.insert(p, h);
        }
    }
}

/// The mirror's state: what is in the maps.
#[derive(Debug, Default)]
pub struct RouteMirror {
    /// Next hop → its id (1.., id 0 is the empty one).
    hops: HashMap<Hop, u32>,
    /// Mirrored prefix → next-hop id.
    routes: HashMap<IpPrefix, u32>,
    /// Families (0: IPv4, 1: IPv6) not mirrored because of policy rules.
    policy: [bool; 2],
    /// Families not mirrored because their routes do not fit the trie.
    too_many: [bool; 2],
    /// Resyncs that found more routes or next hops than the maps hold.
    pub overflow: u64,
    /// Resyncs done, and the last one's error.
    pub syncs: u64,
    pub last_error: Option<String>,
}

fn fam(p: &IpPrefix) -> usize {
    usize::from(matches!(p, IpPrefix::V6(_)))
}

impl RouteMirror {
    /// Bring the maps in line with `want` (\[IPv4, IPv6\]). New next hops
    /// first, then routes added or re-pointed, then routes gone, then the
    /// next hops no route uses: a packet sees either the old or the new
    /// answer for its destination.
    pub fn apply(&mut self, fp: &mut xdp::FastPath, want: [Want; 2]) -> Result<(), xdp::Error> {
        let limits = fp.limits();
        let mut wanted: HashMap<IpPrefix, Option<Hop>> = HashMap::new();
        let mut overflow = false;
        for (i, w) in want.into_iter().enumerate() {
            self.policy[i] = w.policy;
            self.too_many[i] = w.routes.len() > limits.routes as usize;
            if self.too_many[i] {
                overflow = true;
                continue;
            }
            wanted.extend(w.routes);
        }
        // Next hops: keep the ids of those still used, give new ones the
        // lowest free ids; beyond the map, the route takes the FIB.
        let used: HashSet<Hop> = wanted.values().flatten().copied().collect();
        let mut free: Vec<u32> = (1..limits.nexthops).filter(|id| !self.hops.values().any(|v| v == id)).rev().collect();
        let mut new_hops: Vec<Hop> = used.iter().filter(|h| !self.hops.contains_key(h)).copied().collect();
        new_hops.sort();
        for h in new_hops {
            let Some(id) = free.pop() else {
                overflow = true;
                break;
            };
            let nh = xdp::types::Nexthop { ifindex: h.ifindex, mtu: h.mtu, dmac: h.dmac, smac: h.smac, pad: [0; 2] };
            match fp.nexthop_set(id, nh) {
                Ok(()) => {
                    self.hops.insert(h, id);
                }
                // An interface no longer allowed (a reload): that route
                // takes the FIB.
                Err(xdp::Error::Config(e)) => tracing::debug!("xdp routes: {e}"),
                Err(e) => return Err(e),
            }
        }
        for (p, h) in &wanted {
            let id = h.and_then(|h| self.hops.get(&h).copied()).unwrap_or(0);
            if self.routes.get(p) == Some(&id) {
                continue;
            }
            let r = match *p {
                IpPrefix::V4(p4) => fp.route4_insert(p4, id),
                IpPrefix::V6(p6) => fp.route6_insert(p6, id),
            };
            match r {
                Ok(()) => {
                    self.routes.insert(*p, id);
                }
                Err(xdp::Error::MapFull(_)) => {
                    // Cannot happen after the count check, unless the map
                    // is smaller than it says; leave the family to the FIB.
                    overflow = true;
                    self.too_many[fam(p)] = true;
                }
                Err(e) => return Err(e),
            }
        }
        let gone: Vec<IpPrefix> =
            self.routes.keys().filter(|p| !wanted.contains_key(p) || self.too_many[fam(p)]).copied().collect();
        for p in gone {
            match p {
                IpPrefix::V4(p4) => fp.route4_remove(p4)?,
                IpPrefix::V6(p6) => fp.route6_remove(p6)?,
            };
            self.routes.remove(&p);
        }
        let in_use: HashSet<u32> = self.routes.values().copied().collect();
        let stale: Vec<(Hop, u32)> =
            self.hops.iter().filter(|(_, id)| !in_use.contains(id)).map(|(h, id)| (*h, *id)).collect();
        for (h, id) in stale {
            fp.nexthop_clear(id)?;
            self.hops.remove(&h);
        }
        if overflow {
            if self.overflow == 0 {
                tracing::warn!(
                    "xdp: the kernel's routes or next hops do not fit the fast path's maps ({} routes per family, {} next hops): the rest takes bpf_fib_lookup",
                    limits.routes,
                    limits.nexthops - 1
                );
            }
            self.overflow += 1;
        }
        Ok(())
    }

    /// Remove everything mirrored (mirroring turned off).
    pub fn clear(&mut self, fp: &mut xdp::FastPath) {
        for (p, _) in self.routes.drain() {
            let _ = match p {
                IpPrefix::V4(p4) => fp.route4_remove(p4),
                IpPrefix::V6(p6) => fp.route6_remove(p6),
            };
        }
        for (_, id) in self.hops.drain() {
            let _ = fp.nexthop_clear(id);
        }
    }

    /// For `GET /xdp`.
    pub fn status(&self) -> Value {
        let count = |f: usize| self.routes.keys().filter(|p| fam(p) == f).count();
        let via = |f: usize| self.routes.iter().filter(|(p, id)| fam(p) == f && **id != 0).count();
        let mut hops: Vec<(&Hop, &u32)> = self.hops.iter().collect();
        hops.sort_by_key(|(_, id)| **id);
        let mac = |m: &[u8; 6]| m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
        json!({
            "routes4": count(0),
            "routes4_with_next_hop": via(0),
            "routes6": count(1),
            "routes6_with_next_hop": via(1),
            "policy_rules": { "ipv4": self.policy[0], "ipv6": self.policy[1] },
            "too_many": { "ipv4": self.too_many[0], "ipv6": self.too_many[1] },
            "next_hops": hops.iter().map(|(h, id)| json!({
                "id": id, "ifindex": h.ifindex, "mac": mac(&h.dmac), "source_mac": mac(&h.smac), "mtu": h.mtu,
            })).collect::<Vec<_>>(),
            "overflow": self.overflow,
            "syncs": self.syncs,
            "last_error": self.last_error,
        })
    }
}

/// The kernel's tables for both families (dumped without holding any lock).
pub struct Dump {
    links: Vec<Link>,
    fams: [(Vec<Route>, Vec<Neighbour>, Vec<Rule>); 2],
}

impl Dump {
    /// Dump links, then routes, neighbours and rules of each family.
    pub fn read(nl: &mut netsys::netlink::Netlink) -> std::io::Result<Dump> {
        let links = nl.links()?;
        let mut one = |f: i32| -> std::io::Result<(Vec<Route>, Vec<Neighbour>, Vec<Rule>)> {
            Ok((nl.routes(f as u8)?, nl.neighbours(f as u8)?, nl.rules(f as u8)?))
        };
        let fams = [one(libc::AF_INET)?, one(libc::AF_INET6)?];
        Ok(Dump { links, fams })
    }

    /// What the mirror should hold, for the interfaces in `egress`.
    pub fn want(&self, egress: &HashSet<u32>) -> [Want; 2] {
        let w = |i: usize| {
            let (r, n, ru) = &self.fams[i];
            want(&self.links, r, n, ru, egress)
        };
        [w(0), w(1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x22];
    const H_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x33];
    const MY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x11];

    fn route(dst: &str, table: u32, kind: u8, oif: u32, gw: Option<&str>) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            table,
            kind,
            oif: Some(oif),
            gateway: gw.map(|g| g.parse().unwrap()),
            complex: false,
            mtu: None,
            tos: 0,
            src_len: 0,
        }
    }

    fn neigh(ifindex: u32, addr: &str, mac: [u8; 6], state: u16) -> Neighbour {
        Neighbour { ifindex, addr: addr.parse().unwrap(), mac: Some(mac), state }
    }

    fn links() -> Vec<Link> {
        vec![Link { index: 2, mtu: 1500, mac: Some(MY_MAC) }, Link { index: 3, mtu: 9000, mac: Some(MY_MAC) }]
    }

    const STD_RULES: [Rule; 3] = [
        Rule { family: 2, table: 255, action: 1 },
        Rule { family: 2, table: 254, action: 1 },
        Rule { family: 2, table: 253, action: 1 },
    ];

    fn hop(ifindex: u32, dmac: [u8; 6], mtu: u16) -> Option<Hop> {
        Some(Hop { ifindex, dmac, smac: MY_MAC, mtu })
    }

    #[test]
    fn gateways_neighbours_and_what_takes_the_fib() {
        let mut mtu_route = route("10.9.0.0/16", 254, 1, 2, Some("192.0.2.1"));
        mtu_route.mtu = Some(1400);
        let routes = vec![
            route("0.0.0.0/0", 254, 1, 2, Some("192.0.2.1")),
            route("192.0.2.0/24", 254, 1, 2, None),
            route("192.0.2.128/25", 254, 1, 2, Some("192.0.2.1")),
            route("10.0.0.0/8", 254, 1, 3, Some("198.51.100.1")), // unresolved gateway
            route("10.1.0.0/16", 254, 6, 2, None),                // blackhole
            route("172.16.0.0/12", 254, 1, 9, Some("192.0.2.1")), // not an egress
            mtu_route,
            route("192.0.2.7/32", 255, 2, 2, None), // our own address
        ];
        let neighbours = vec![
            neigh(2, "192.0.2.1", GW_MAC, 0x02),
            neigh(2, "192.0.2.50", H_MAC, 0x04),    // stale: usable
            neigh(2, "192.0.2.51", H_MAC, 0x20),    // failed
            neigh(2, "192.0.2.200", H_MAC, 0x80),   // under the /25 route: not on-link
            neigh(3, "198.51.100.1", GW_MAC, 0x01), // incomplete
        ];
        let egress: HashSet<u32> = [2, 3].into();
        let w = want(&links(), &routes, &neighbours, &STD_RULES, &egress);
        assert!(!w.policy);
        let get = |p: &str| *w.routes.get(&p.parse::<IpPrefix>().unwrap()).unwrap_or_else(|| panic!("{p}"));
        assert_eq!(get("0.0.0.0/0"), hop(2, GW_MAC, 1500));
        assert_eq!(get("10.9.0.0/16"), hop(2, GW_MAC, 1400), "the route's MTU");
        assert_eq!(get("192.0.2.128/25"), hop(2, GW_MAC, 1500));
        for fib in ["192.0.2.0/24", "10.0.0.0/8", "10.1.0.0/16", "172.16.0.0/12", "192.0.2.7/32"] {
            assert_eq!(get(fib), None, "{fib} takes the FIB");
        }
        assert_eq!(get("192.0.2.1/32"), hop(2, GW_MAC, 1500), "the gateway is on-link too");
        assert_eq!(get("192.0.2.50/32"), hop(2, H_MAC, 1500));
        assert!(!w.routes.contains_key(&"192.0.2.51/32".parse().unwrap()), "failed neighbour");
        assert!(!w.routes.contains_key(&"192.0.2.200/32".parse().unwrap()), "a longer route covers it");
        assert_eq!(w.routes.len(), 10);

        // Two routes to one prefix that disagree: the FIB.
        let mut two = routes.clone();
        two.push(route("0.0.0.0/0", 254, 1, 2, Some("192.0.2.50")));
        assert_eq!(want(&links(), &two, &neighbours, &STD_RULES, &egress).routes[&"0.0.0.0/0".parse().unwrap()], None);
        // A policy rule: nothing mirrored.
        let mut rules = STD_RULES.to_vec();
        rules.push(Rule { family: 2, table: 100, action: 1 });
        let w = want(&links(), &routes, &neighbours, &rules, &egress);
        assert!(w.policy && w.routes.is_empty());
        // Interface 2 not an egress: only FIB entries.
        let w = want(&links(), &routes, &neighbours, &STD_RULES, &[3].into());
        assert!(w.routes.values().all(|h| h.is_none()));
    }
}
