//! The lwAFTR fast path (`bpf/softwire.bpf.c`, its map types in
//! [`crate::types`]): its own
//! BPF object and maps, loaded by the lw4o6 runner (crates/softwire) when
//! its `xdp` key asks for it. DSTM's tunnel end-point is the lwAFTR with
//! whole-address leases, so it takes the same path.
//!
//! The slow path (the lwAFTR engine) keeps the binding table and the
//! leases; [`SoftwireFastPath::sync`] mirrors them into the maps (on load,
//! reload and every lease grant or expiry), writing only what changed.
//! Same loader pattern as [`crate::teredo`]: aya, attach through bpf_link
//! (native with a generic fallback), detach on drop.
//!
//! The DS-Lite AFTR loads the same object with [`SoftwireSettings::dslite`]
//! set: its NAT44 sessions instead of bindings ([`crate::dslite`]).

use crate::loader::{found, map_err};
use crate::single::{Names, Single};
use crate::types::Count;
use crate::{Attachment, Error, Mode, TestResult};
use aya::maps::{Array, MapData};
use aya::{EbpfLoader, Pod};
use core::net::{Ipv4Addr, Ipv6Addr};
use std::collections::HashMap as Map;
use std::hash::Hash;

/// The BPF object built by build.rs from `bpf/softwire.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/softwire.bpf.o"));

/// The program (attached to both sides).
pub const PROGRAM: &str = "xdp_softwire";
const CONFIG: &str = "sw_config";
const B4: &str = "sw_b4";
const V4: &str = "sw_v4";
const ADDR: &str = "sw_addr";
const COUNTERS: &str = "sw_counters";
const TX: &str = "sw_tx";
const IFMAC: &str = "sw_ifmac";
pub(crate) const DS_OUT: &str = "ds_out";
pub(crate) const DS_IN: &str = "ds_in";
pub(crate) const DS_POOL: &str = "ds_pool";
pub(crate) const DS_B4: &str = "ds_b4";
pub(crate) const DS_BLOCKS: &str = "ds_blocks";
pub(crate) const DS_STATE: &str = "ds_state";
pub(crate) const DS_EVENTS: &str = "ds_events";

pub use crate::types::{SoftwireCounter, SwAddr, SwBinding, SwConfig, SwV4Key};
use crate::types::{SW_F_COPY_TOS, SW_F_DSLITE, SW_F_DS_CREATE, SW_F_ENCAP_LIMIT, SW_F_ON};

/// What the fast path needs of the lwAFTR's end-point configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftwireSettings {
    /// The softwire address.
    pub local: Ipv6Addr,
    /// Tunnel hop limit.
    pub hop_limit: u8,
    /// Tunnel Encapsulation Limit option, if any.
    pub encap_limit: Option<u8>,
    /// Tunnel MTU (the slow path fragments above it; 1280 at least).
    pub mtu: u16,
    /// Traffic Class from the inner TOS.
    pub copy_tos: bool,
    /// Entries of each binding map: bindings plus leases at most.
    pub max_bindings: u32,
    /// The DS-Lite AFTR: NAT44 sessions, not bindings.
    pub dslite: bool,
    /// DS-Lite: sessions the maps hold at most (one entry each way).
    pub max_sessions: u32,
    /// DS-Lite: port-block slots (`ds_blocks`); not 0: a B4's TCP SYN
    /// creates its mapping in the program with a port of its blocks.
    pub port_blocks: u32,
}

/// One binding or lease as the fast path mirrors it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bound {
    /// The lwB4's IPv6 address.
    pub b4: Ipv6Addr,
    /// Its IPv4 address.
    pub ipv4: Ipv4Addr,
    /// Its PSID (0 for a whole address).
    pub psid: u16,
    /// PSID length (0 for a whole address).
    pub psid_len: u8,
    /// PSID offset.
    pub offset: u8,
}

/// What one [`SoftwireFastPath::sync`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Map entries written (new or changed).
    pub written: usize,
    /// Map entries deleted.
    pub removed: usize,
    /// Bindings (and leases) now on the fast path.
    pub bindings: usize,
}

/// The three maps' contents, as mirrored.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Mirror {
    b4: Map<[u8; 16], SwBinding>,
    v4: Map<SwV4Key, [u8; 16]>,
    addr: Map<u32, SwAddr>,
}

impl Mirror {
    /// What the maps must hold for `bindings` and then `leases` (the
    /// slow path consults the leases only where the bindings have
    /// nothing: a lease whose lwB4 or address a binding uses is not
    /// mirrored, so its packets take the slow path). Every address either
    /// holds is in `addr` (hairpinning and the IPv4 side look there first).
    fn of(bindings: &[Bound], leases: &[Bound]) -> Mirror {
        let mut m = Mirror::default();
        for b in bindings {
            m.put(b);
        }
        for l in leases {
            let a = u32::from(l.ipv4).to_be();
            if m.b4.contains_key(&l.b4.octets()) || m.addr.contains_key(&a) {
                m.addr.entry(a).or_default();
                continue;
            }
            m.put(l);
        }
        m
    }

    fn put(&mut self, b: &Bound) {
        let a = u32::from(b.ipv4).to_be();
        let full = b.psid_len == 0;
        let (psid, len, offset) = if full { (0, 0, 0) } else { (b.psid, b.psid_len, b.offset) };
        self.b4.insert(b.b4.octets(), SwBinding { ipv4: a, psid, psid_len: len, offset });
        self.v4.insert(SwV4Key { ipv4: a, psid, pad: 0 }, b.b4.octets());
        self.addr.insert(a, SwAddr { psid_len: len, offset, pad: 0 });
    }
}

/// The loaded lwAFTR fast path. Dropping it detaches every attachment.
pub struct SoftwireFastPath {
    pub(crate) obj: Single,
    settings: SoftwireSettings,
    mirror: Mirror,
    pub(crate) sessions: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for SoftwireFastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftwireFastPath")
            .field("settings", &self.settings)
            .field("attached", &self.obj.attachments())
            .field("bindings", &self.mirror.b4.len())
            .finish()
    }
}

/// Removes from map `name` (whose contents `cur` tracks) the keys `want`
/// lacks.
fn drop_absent<K: Pod + Eq + Hash, V: Pod>(
    obj: &mut Single,
    name: &'static str,
    cur: &mut Map<K, V>,
    want: &Map<K, V>,
    st: &mut SyncStats,
) -> Result<(), Error> {
    let mut m = obj.hash_mut::<K, V>(name)?;
    let drop: Vec<K> = cur.keys().filter(|k| !want.contains_key(*k)).copied().collect();
    for k in drop {
        found(name, m.remove(&k))?;
        cur.remove(&k);
        st.removed += 1;
    }
    Ok(())
}

/// Writes into map `name` (whose contents `cur` tracks) the entries of
/// `want` that differ.
fn write_changed<K: Pod + Eq + Hash, V: Pod + PartialEq>(
    obj: &mut Single,
    name: &'static str,
    cur: &mut Map<K, V>,
    want: &Map<K, V>,
    st: &mut SyncStats,
) -> Result<(), Error> {
    let mut m = obj.hash_mut::<K, V>(name)?;
    for (k, v) in want {
        if cur.get(k) != Some(v) {
            m.insert(k, v, 0).map_err(|e| map_err(name, e))?;
            cur.insert(*k, *v);
            st.written += 1;
        }
    }
    Ok(())
}

impl SoftwireFastPath {
    /// Load the program and create its maps for `settings`.
    pub fn load(settings: SoftwireSettings) -> Result<SoftwireFastPath, Error> {
        let n = settings.max_bindings.max(1);
        let names =
            Names { object: "the softwire BPF object", program: PROGRAM, tx: TX, ifmac: IFMAC, counters: COUNTERS };
        let mut loader = EbpfLoader::new();
        let s = if settings.dslite { settings.max_sessions.max(1) } else { 1 };
        loader.map_max_entries(B4, n).map_max_entries(V4, n).map_max_entries(ADDR, n);
        loader.map_max_entries(DS_OUT, s).map_max_entries(DS_IN, s);
        if settings.dslite && settings.port_blocks > 0 {
            loader.map_max_entries(DS_BLOCKS, settings.port_blocks);
        }
        let obj = Single::load(&mut loader, OBJECT, names)?;
        let mut fp = SoftwireFastPath { obj, settings, mirror: Mirror::default(), sessions: Default::default() };
        let mut flags = SW_F_ON;
        if settings.dslite {
            flags |= SW_F_DSLITE;
            if settings.port_blocks > 0 {
                flags |= SW_F_DS_CREATE;
            }
        }
        if settings.copy_tos {
            flags |= SW_F_COPY_TOS;
        }
        if settings.encap_limit.is_some() {
            flags |= SW_F_ENCAP_LIMIT;
        }
        let cfg = SwConfig {
            local: settings.local.octets(),
            flags,
            mtu: settings.mtu.max(1280),
            hop_limit: settings.hop_limit,
            encap_limit: settings.encap_limit.unwrap_or(0),
        };
        let mut a: Array<&mut MapData, SwConfig> =
            Array::try_from(fp.map_mut(CONFIG)?).map_err(|e| Error::Bpf(format!("map {CONFIG}: {e}")))?;
        a.set(0, cfg, 0).map_err(|e| map_err(CONFIG, e))?;
        Ok(fp)
    }

    /// The settings in force.
    pub fn settings(&self) -> &SoftwireSettings {
        &self.settings
    }

    fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, Error> {
        self.obj.map_mut(name)
    }

    /// Bindings (and leases) on the fast path.
    pub fn bindings(&self) -> usize {
        self.mirror.b4.len()
    }

    /// Mirror `bindings` and `leases` (see the module documentation):
    /// only the entries that changed are written or deleted. On
    /// [`Error::MapFull`] the maps hold a consistent subset (an address is
    /// written before the bindings that use it, removed after them): what
    /// is missing takes the slow path.
    pub fn sync(&mut self, bindings: &[Bound], leases: &[Bound]) -> Result<SyncStats, Error> {
        let want = Mirror::of(bindings, leases);
        let mut st = SyncStats::default();
        let mut old = std::mem::take(&mut self.mirror);
        let r = self.apply(&mut old, &want, &mut st);
        self.mirror = old;
        st.bindings = self.mirror.b4.len();
        r.map(|()| st)
    }

    /// Bring the maps (whose contents `cur` tracks) to `want`: removals
    /// of bindings first, so no binding outlives its address; addresses
    /// written before the bindings that use them, removed after them.
    fn apply(&mut self, cur: &mut Mirror, want: &Mirror, st: &mut SyncStats) -> Result<(), Error> {
        drop_absent(&mut self.obj, B4, &mut cur.b4, &want.b4, st)?;
        drop_absent(&mut self.obj, V4, &mut cur.v4, &want.v4, st)?;
        write_changed(&mut self.obj, ADDR, &mut cur.addr, &want.addr, st)?;
        write_changed(&mut self.obj, V4, &mut cur.v4, &want.v4, st)?;
        write_changed(&mut self.obj, B4, &mut cur.b4, &want.b4, st)?;
        drop_absent(&mut self.obj, ADDR, &mut cur.addr, &want.addr, st)
    }

    /// The lwB4 the fast path holds for `b4`, as mirrored (read back from
    /// the map: `None` when absent).
    pub fn binding_of(&self, b4: Ipv6Addr) -> Result<Option<SwBinding>, Error> {
        let m = self.obj.hash::<[u8; 16], SwBinding>(B4)?;
        found(B4, m.get(&b4.octets(), 0))
    }

    /// Let the program send through `ifindex` (attach does it for each
    /// interface attached to; tests use it alone with BPF_PROG_TEST_RUN).
    pub fn allow_egress(&mut self, ifindex: u32) -> Result<(), Error> {
        self.obj.allow_egress(ifindex)
    }

    /// Accept frames on `ifindex` only when addressed to `mac` (attach
    /// records each interface's own; without an entry any unicast
    /// destination is accepted).
    pub fn set_interface_mac(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<(), Error> {
        self.obj.set_interface_mac(ifindex, mac)
    }

    /// Attach to `iface` (of the caller's network namespace), record its
    /// MAC address and allow it as an egress. `Mode::Off` attaches nothing
    /// and returns `None`.
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<Option<&Attachment>, Error> {
        self.obj.attach(iface, mode)
    }

    /// Detach from `iface`; false when it was not attached.
    pub fn detach(&mut self, iface: &str) -> Result<bool, Error> {
        self.obj.detach(iface)
    }

    /// Detach from every interface.
    pub fn detach_all(&mut self) -> Result<(), Error> {
        self.obj.detach_all()
    }

    /// The attachments in force.
    pub fn attachments(&self) -> &[Attachment] {
        self.obj.attachments()
    }

    /// The counters summed over CPUs, in [`SoftwireCounter::ALL`] order.
    pub fn counters(&self) -> Result<Vec<(SoftwireCounter, Count)>, Error> {
        self.obj.counters(SoftwireCounter::ALL, |c| c as u32)
    }

    /// The program over `frame` with `BPF_PROG_TEST_RUN`, as received on
    /// `ingress_ifindex` (not live: nothing is sent).
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32, repeat: u32) -> Result<TestResult, Error> {
        self.obj.test_run(frame, ingress_ifindex, repeat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(b4: &str, v4: &str, psid: u16, len: u8) -> Bound {
        Bound { b4: b4.parse().unwrap(), ipv4: v4.parse().unwrap(), psid, psid_len: len, offset: 6 }
    }

    #[test]
    fn leases_never_shadow_bindings() {
        let bindings = [bound("2001:db8::1", "192.0.2.1", 1, 6), bound("2001:db8::2", "192.0.2.9", 0, 0)];
        let leases = [
            bound("2001:db8::1", "192.0.2.50", 0, 0), // the lwB4 holds a binding: the binding decides
            bound("2001:db8::3", "192.0.2.1", 0, 0),  // a bound address: the binding decides
            bound("2001:db8::4", "192.0.2.51", 0, 0), // neither: mirrored
        ];
        let m = Mirror::of(&bindings, &leases);
        assert_eq!(m.b4.len(), 3);
        assert_eq!(m.b4[&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets()].psid, 1);
        assert!(!m.b4.contains_key(&"2001:db8::3".parse::<Ipv6Addr>().unwrap().octets()));
        let a = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap()).to_be();
        assert_eq!(m.addr[&a("192.0.2.1")], SwAddr { psid_len: 6, offset: 6, pad: 0 });
        // Every address a lease holds is known, mirrored or not (hairpinning passes).
        assert!(m.addr.contains_key(&a("192.0.2.50")));
        assert!(!m.v4.contains_key(&SwV4Key { ipv4: a("192.0.2.50"), psid: 0, pad: 0 }));
        assert_eq!(
            m.v4[&SwV4Key { ipv4: a("192.0.2.51"), psid: 0, pad: 0 }],
            "2001:db8::4".parse::<Ipv6Addr>().unwrap().octets()
        );
    }
}
