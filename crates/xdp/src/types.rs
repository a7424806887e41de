//! The contract between the BPF programs (`bpf/*.bpf.c`) and userspace:
//! every map key and value as a `#[repr(C)]` struct, and every constant
//! the programs use (flags, sizes, counter indices). This file and its
//! submodules are the one home of these facts:
//!
//! - `build.rs` includes this file and generates `v6gate_abi.h`, which
//!   every BPF object includes: each struct's C declaration, followed by a
//!   `_Static_assert` of its size and of every field's offset and size
//!   (`__builtin_offsetof`, against `core::mem::offset_of!` here); each
//!   constant and counter index as a `#define`. No C header declares a
//!   contract struct or copies a constant by hand;
//! - a struct with implicit padding does not compile (`contract!`'s
//!   const assert), which the `aya::Pod` impls in `sys` rely on.
//!
//! To add a map type, flag or counter: declare it here with `contract!`,
//! `constants!` or `counters!` and list a new struct in [`STRUCTS`] (a
//! new constant group in [`CONSTANTS`], a new counter set in
//! [`COUNTER_SETS`]); docs/xdp.md tells the rest.
//!
//! This file has no dependencies (build.rs compiles it as a module).
//! Addresses are in network byte order; an IPv4 address in a 16-byte field
//! is IPv4-mapped (`::ffff:a.b.c.d`). Ports named `*_be` hold the
//! network-order value (`port.to_be()`). MTUs and lengths are host order.

/// Defines a `#[repr(C)]` contract struct and its layout description
/// (`FIELDS`: name, offset, size, from `core::mem::offset_of!`), from which
/// `build.rs` writes the C declaration and its static asserts. A struct
/// with implicit padding does not compile (the kernel would see bytes we
/// never wrote).
macro_rules! contract {
    ($(#[$m:meta])* pub struct $name:ident / $cname:literal { $( $(#[doc = $fd:literal])* pub $f:ident : $t:ty, )* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name { $( $(#[doc = $fd])* pub $f: $t, )* }

        impl $name {
            /// The C name of the struct (`struct <C_NAME>` in the generated `v6gate_abi.h`).
            pub const C_NAME: &'static str = $cname;
            /// (field, offset, size) in declaration order.
            pub const FIELDS: &'static [Field] = &[
                $( (stringify!($f), core::mem::offset_of!($name, $f), core::mem::size_of::<$t>()), )*
            ];
        }

        impl Contract for $name {
            const C_NAME: &'static str = $cname;
            const FIELDS: &'static [Field] = $name::FIELDS;
            fn c_fields() -> Vec<(String, &'static str)> {
                vec![$( (<$t as CType>::c_decl(stringify!($f)), first_line(&[$($fd),*])), )*]
            }
        }

        impl CType for $name {
            fn c_decl(name: &str) -> String {
                format!("struct {} {name}", $cname)
            }
        }

        const _: () = assert!(
            tiles($name::FIELDS, core::mem::size_of::<$name>()),
            concat!("struct ", $cname, ": implicit padding (add explicit pad fields)")
        );
    };
}

/// Integer constants shared with C: each `pub const` is declared here
/// once and written into `v6gate_abi.h` as `#define <C name> <value>`.
/// `constants! { GROUP; /// doc  pub const NAME: type = value => "C_NAME"; ... }`
/// also defines `GROUP`, the (C name, value) list build.rs reads.
macro_rules! constants {
    ($(#[$gm:meta])* $group:ident; $( $(#[$m:meta])* pub const $name:ident : $t:ty = $v:expr => $c:literal; )*) => {
        $( $(#[$m])* pub const $name: $t = $v; )*
        $(#[$gm])*
        pub const $group: &[(&str, u64)] = &[ $( ($c, $name as u64), )* ];
    };
}

/// An enum of one BPF object's counter indices (the index of a per-CPU
/// array of [`Count`]), each with its C name (`#define <C name> <index>`
/// in `v6gate_abi.h`) and the label status, metrics and docs use. The
/// indices are the declaration order; `$count` names the number of
/// counters in C (the array's `max_entries`).
macro_rules! counters {
    ($(#[$em:meta])* pub enum $name:ident / $count:literal { $( $(#[$m:meta])* $v:ident = $c:literal, $label:literal; )* }) => {
        $(#[$em])*
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $( $(#[$m])* $v, )* }

        impl $name {
            /// Every counter, in index order.
            pub const ALL: &'static [$name] = &[ $( $name::$v, )* ];
            /// The C name of the number of counters.
            pub const C_COUNT: &'static str = $count;
            /// The C constant (`#define <C_NAME> <index>`).
            pub const fn c_name(self) -> &'static str {
                match self { $( $name::$v => $c, )* }
            }
            /// The counter's name in status, metrics and docs.
            pub const fn label(self) -> &'static str {
                match self { $( $name::$v => $label, )* }
            }
            /// (C name, index) of every counter, for build.rs.
            pub const C_DEFINES: &'static [(&'static str, u32)] = &[ $( ($c, $name::$v as u32), )* ];
        }
    };
}

/// (field name, offset, size) of one struct field.
pub type Field = (&'static str, usize, usize);

/// A contract struct as build.rs sees it.
pub trait Contract: Sized {
    /// `struct <C_NAME>`.
    const C_NAME: &'static str;
    /// (field, offset, size) in declaration order.
    const FIELDS: &'static [Field];
    /// Each field's C declaration (`__u8 addr[16]`) and the first line of
    /// its documentation.
    fn c_fields() -> Vec<(String, &'static str)>;
}

/// The C spelling of a field's type.
pub trait CType {
    /// The declaration of `name` with this type (`__u16 port_be`, `__u8 addr[16]`).
    fn c_decl(name: &str) -> String;
}

macro_rules! c_int {
    ($($t:ty => $c:literal),*) => {
        $(impl CType for $t {
            fn c_decl(name: &str) -> String {
                format!(concat!($c, " {}"), name)
            }
        })*
    };
}
c_int!(u8 => "__u8", u16 => "__u16", u32 => "__u32", u64 => "__u64");

impl<T: CType, const N: usize> CType for [T; N] {
    fn c_decl(name: &str) -> String {
        T::c_decl(&format!("{name}[{N}]"))
    }
}

/// The first line of a doc comment, trimmed (a C comment in the header).
fn first_line(doc: &[&'static str]) -> &'static str {
    doc.first().map_or("", |l| l.trim())
}

/// Whether `fields` tile `size` bytes exactly: no hole, no tail padding.
const fn tiles(fields: &[Field], size: usize) -> bool {
    let mut at = 0;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].1 != at {
            return false;
        }
        at += fields[i].2;
        i += 1;
    }
    at == size
}

/// One contract struct for build.rs: C name, size, fields, declarations.
#[derive(Clone, Copy)]
pub struct StructDesc {
    /// `struct <c_name>`.
    pub c_name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// (field, offset, size).
    pub fields: &'static [Field],
    /// The fields' C declarations and doc lines.
    pub c_fields: fn() -> Vec<(String, &'static str)>,
}

impl core::fmt::Debug for StructDesc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StructDesc").field("c_name", &self.c_name).field("size", &self.size).finish()
    }
}

/// The [`StructDesc`] of `T`.
pub const fn desc<T: Contract>() -> StructDesc {
    StructDesc { c_name: T::C_NAME, size: core::mem::size_of::<T>(), fields: T::FIELDS, c_fields: T::c_fields }
}

#[path = "types/b4.rs"]
mod b4;
#[path = "types/portblock.rs"]
mod portblock;
#[path = "types/sklookup.rs"]
mod sklookup;
#[path = "types/softwire.rs"]
mod softwire;
#[path = "types/teredo.rs"]
mod teredo;
pub use b4::*;
pub use portblock::*;
pub use sklookup::*;
pub use softwire::*;
pub use teredo::*;

contract! {
    /// RFC 7915 translation knobs of one function (SIIT or NAT64): the
    /// subset of `xlat::siit::Config` the fast path needs.
    pub struct Xlat / "v6g_xlat" {
        /// `XLAT_*` flags.
        pub flags: u8,
        /// `new-tos` (used with [`XLAT_RESET_TOS`]).
        pub new_tos: u8,
        /// `ipv4-mtu`: larger IPv4 results go to the slow path.
        pub ipv4_mtu: u16,
        /// `ipv6-mtu`: larger IPv6 results go to the slow path.
        pub ipv6_mtu: u16,
        /// min(`lowest-ipv6-mtu`, `ipv6-mtu`): DF-clear IPv4 packets whose
        /// IPv6 form is larger are fragmented by the slow path.
        pub frag_mtu: u16,
    }
}

contract! {
    /// The single entry of the `config` array map.
    pub struct Config / "v6g_config" {
        /// SIIT `pool6` network (RFC 6052); unused when `pool6_len` is 0.
        pub pool6: [u8; 16],
        /// `pool6` length: 0 (no pool6), 32, 40, 48, 56, 64 or 96.
        pub pool6_len: u8,
        /// `TRGW_*` flags.
        pub trgw_flags: u8,
        /// Zero.
        pub pad: [u8; 2],
        /// SIIT knobs.
        pub siit: Xlat,
        /// NAT64 knobs (its translator's settings; addresses come from the
        /// sessions).
        pub nat64: Xlat,
        /// Lifetime of a `fib_cache` entry in milliseconds; 0 = no cache
        /// (a `bpf_fib_lookup` per packet).
        pub fib_cache_ms: u32,
        /// `FIB_*` flags: how `bpf_fib_lookup` is called.
        pub fib_flags: u8,
        /// `ROUTES_*` flags: which route tries hold entries.
        pub route_flags: u8,
        /// Zero.
        pub pad2: [u8; 2],
        /// Routing table of the lookup with [`FIB_TABLE`] (e.g. 254, main).
        pub fib_table: u32,
        /// Lowest IPv4 address any EAMT entry covers (network order): the
        /// programs skip the trie for addresses outside the span, as
        /// `xlat::addr::Eamt` does.
        pub eam4_lo: [u8; 4],
        /// Highest IPv4 address any EAMT entry covers.
        pub eam4_hi: [u8; 4],
        /// Lowest IPv6 address any EAMT entry covers.
        pub eam6_lo: [u8; 16],
        /// Highest IPv6 address any EAMT entry covers.
        pub eam6_hi: [u8; 16],
        /// With [`ROUTES4_DEFAULT`]: the next hop of the only IPv4 route,
        /// 0.0.0.0/0 (the trie is not searched).
        pub default_nh4: u32,
        /// With [`ROUTES6_DEFAULT`]: the next hop of the only IPv6 route, ::/0.
        pub default_nh6: u32,
    }
}

contract! {
    /// A next hop the slow path resolved (route and neighbour): the value
    /// of the `nexthops` array, which the `routes4`/`routes6` tries point
    /// into. The daemon keeps it fresh from netlink route and neighbour
    /// events; a packet whose route or next hop is missing here takes
    /// `bpf_fib_lookup`.
    pub struct Nexthop / "v6g_nexthop" {
        /// Egress interface; 0 = unused slot (the trie entry is ignored).
        pub ifindex: u32,
        /// Largest L3 packet the route takes (the route's or the
        /// interface's MTU); larger ones pass (too-big).
        pub mtu: u16,
        /// Next hop's MAC (the gateway's, or the destination's on-link).
        pub dmac: [u8; 6],
        /// The egress interface's MAC.
        pub smac: [u8; 6],
        /// Zero.
        pub pad: [u8; 2],
    }
}

contract! {
    /// Key of the per-CPU LRU `fib_cache`: every input of the
    /// `bpf_fib_lookup` of a packet to be sent, so a hit answers exactly
    /// what the lookup answered, as long as routes and neighbours did not
    /// change during the entry's lifetime.
    pub struct FibKey / "v6g_fib_key" {
        /// Ingress interface.
        pub ifindex: u32,
        /// 4 or 6.
        pub family: u8,
        /// L4 protocol.
        pub proto: u8,
        /// TOS or Traffic Class.
        pub tos: u8,
        /// Zero.
        pub pad: u8,
        /// Source port, network order (0 for ICMP).
        pub sport_be: u16,
        /// Destination port, network order (0 for ICMP).
        pub dport_be: u16,
        /// Source address (IPv4 in the first 4 bytes).
        pub src: [u8; 16],
        /// Destination address (IPv4 in the first 4 bytes).
        pub dst: [u8; 16],
    }
}

contract! {
    /// Value of `fib_cache`.
    pub struct FibValue / "v6g_fib" {
        /// `bpf_ktime_get_coarse_ns()` after which the entry is looked up again.
        pub expires_ns: u64,
        /// Egress interface.
        pub ifindex: u32,
        /// The largest packet the lookup accepted (its MTU check): larger
        /// ones are looked up again.
        pub ok_len: u16,
        /// Next hop's MAC.
        pub dmac: [u8; 6],
        /// Egress interface's MAC.
        pub smac: [u8; 6],
        /// Zero.
        pub pad: [u8; 6],
    }
}

contract! {
    /// Key of the `eamt4` LPM trie (RFC 7757, IPv4 side).
    pub struct LpmKey4 / "v6g_lpm4" {
        /// Prefix length in bits (the LPM trie's key header).
        pub prefixlen: u32,
        /// IPv4 network.
        pub addr: [u8; 4],
    }
}

contract! {
    /// Key of the `eamt6` LPM trie (RFC 7757, IPv6 side).
    pub struct LpmKey6 / "v6g_lpm6" {
        /// Prefix length in bits.
        pub prefixlen: u32,
        /// IPv6 network.
        pub addr: [u8; 16],
    }
}

contract! {
    /// One Explicit Address Mapping, the value of both EAMT tries.
    pub struct Eam / "v6g_eam" {
        /// IPv6 network.
        pub net6: [u8; 16],
        /// IPv4 network.
        pub net4: [u8; 4],
        /// IPv4 prefix length.
        pub len4: u8,
        /// IPv6 prefix length.
        pub len6: u8,
        /// Bit position of the IPv4 suffix in the IPv6 address:
        /// (128 - len6) - (32 - len4), at most 127.
        pub shift: u8,
        /// Zero.
        pub pad: u8,
    }
}

contract! {
    /// Key of the `nat64_sessions` hash map: the 5-tuple of a packet in
    /// one direction. For ICMP echo the "port" of the IPv6 host's side is
    /// the identifier and the other port is 0: IPv6 → IPv4 keys have
    /// `sport_be` = identifier, IPv4 → IPv6 keys `dport_be` = identifier.
    pub struct FlowKey / "v6g_flow" {
        /// Source address (IPv4-mapped for IPv4).
        pub src: [u8; 16],
        /// Destination address (IPv4-mapped for IPv4).
        pub dst: [u8; 16],
        /// Source port, network order.
        pub sport_be: u16,
        /// Destination port, network order.
        pub dport_be: u16,
        /// 4 or 6: the family of this packet.
        pub family: u8,
        /// 6 (TCP), 17 (UDP), 1 (ICMP, IPv4 side) or 58 (ICMPv6, IPv6 side).
        pub proto: u8,
        /// Zero.
        pub pad: [u8; 2],
    }
}

contract! {
    /// Value of the `nat64_sessions` map: the translated addresses of a
    /// packet matching the key, the one port the translation changes, and
    /// when the fast path last used the entry. As in `nat64`, IPv6 → IPv4
    /// rewrites the source port (to the pool4 port t) and IPv4 → IPv6 the
    /// destination port (to the IPv6 host's port x); for ICMP echo the
    /// identifier is rewritten instead, both ways.
    pub struct Nat64Value / "v6g_nat64" {
        /// New source (IPv4-mapped for IPv4).
        pub src: [u8; 16],
        /// New destination (IPv4-mapped for IPv4).
        pub dst: [u8; 16],
        /// New port of the IPv6 host's side (source port t for IPv6 →
        /// IPv4, destination port x for IPv4 → IPv6, or the ICMP echo
        /// identifier), network order.
        pub port_be: u16,
        /// Zero.
        pub pad: [u8; 2],
        /// `NAT64_F_*` flags: [`NAT64_F_HALF_OPEN`] written by the slow
        /// path, [`NAT64_F_SYN_ACK`] set by the program (an atomic OR).
        pub flags: u32,
        /// `bpf_ktime_get_coarse_ns()` (CLOCK_MONOTONIC_COARSE: the
        /// monotonic clock at tick resolution) of the last packet the fast
        /// path translated with this entry; 0 until then. The slow path
        /// reads it before expiring the session.
        pub last_seen_ns: u64,
    }
}

contract! {
    /// Key of the `trgw_relay` hash map: where a media packet arrives
    /// (same layout as `trgw::table::RelayKey`).
    pub struct RelayKey / "v6g_relay_key" {
        /// Local relay address (IPv4-mapped for IPv4).
        pub addr: [u8; 16],
        /// Local relay port, network order.
        pub port_be: u16,
        /// 4 or 6.
        pub family: u8,
        /// Zero.
        pub pad: u8,
    }
}

contract! {
    /// Value of the `trgw_relay` map: the latched far end this leg accepts
    /// packets from, and the other leg to send them out of.
    pub struct RelayValue / "v6g_relay" {
        /// Latched source (far end of this leg), IPv4-mapped for IPv4.
        pub peer: [u8; 16],
        /// Our address on the other leg (the new source).
        pub out_src: [u8; 16],
        /// The other leg's far end (the new destination).
        pub out_dst: [u8; 16],
        /// Latched source port, network order.
        pub peer_port_be: u16,
        /// New source port, network order.
        pub out_sport_be: u16,
        /// New destination port, network order.
        pub out_dport_be: u16,
        /// Family of the other leg, 4 or 6.
        pub out_family: u8,
        /// `RELAY_*` flags.
        pub flags: u8,
        /// Index into `trgw_stats` (stream * 4 + slot, as `trgw::table`).
        pub stats_index: u32,
        /// Precomputed by the slow path (`trgw::Leg::entry`), so the
        /// program does no per-leg checksum work: the folded one's-complement
        /// sum of the arriving datagram's pseudo-header without its length
        /// (latched source, local address, protocol 17), network order.
        pub in_pseudo_be: u16,
        /// The RFC 1624 change of the UDP checksum from this leg to the
        /// other: `fold(!fold(old) + fold(new))` of the pseudo-header
        /// addresses and the ports (the length is the same on both legs),
        /// network order. `HC' = !fold(!HC + delta)`.
        pub csum_delta_be: u16,
        /// IPv4 other leg: the folded sum of the new IPv4 header's words
        /// except Total Length and the checksum (version/IHL, DF, TTL 64,
        /// protocol 17, addresses), network order; the program adds Total
        /// Length and complements. 0 for an IPv6 other leg.
        pub ip_sum_be: u16,
        /// Zero.
        pub pad: [u8; 2],
    }
}

contract! {
    /// A packet and byte counter: the value of the per-CPU `counters` and
    /// `trgw_stats` arrays.
    pub struct Count / "v6g_count" {
        /// Packets.
        pub packets: u64,
        /// Bytes (L3 length of the packet as received; for TrGW the UDP
        /// payload, as the slow path counts).
        pub bytes: u64,
    }
}

// ---- The XDP tester (bpf/tester.bpf.c, crates/bench `--tester xdp`) ----

contract! {
    /// The generator's settings (`tgen_config[0]`).
    pub struct TgenConfig / "v6g_tgen_config" {
        /// Frames cycle through `tgen_flows[0..nflows)`.
        pub nflows: u32,
        /// `TESTER_MAGIC_HI | trial id`, written into every frame.
        pub magic: u32,
        /// Offset of the UDP header in the frame.
        pub udp_off: u16,
        /// The frame layout: 1: IPv6 (64 header bytes copied per frame,
        /// from byte 0), 0: IPv4 (44), [`TGEN_4IN6`]: 4in6, RFC 2473 (the
        /// 64 bytes from [`TGEN_4IN6_OFF`]: outer addresses, inner IPv4 and
        /// UDP headers; the bytes before are the template's).
        pub v6: u8,
        /// 1: RTP frames (`bench trgw`): a 12-byte RTP header right after
        /// the UDP header (V=2, PT 0, SSRC `RTP_SSRC_BASE + flow`,
        /// sequence number and timestamp from the flow's packet number
        /// `seq / nflows`), the stamp after it. 0: the stamp right after
        /// the UDP header.
        pub rtp: u8,
        /// The sending port: frames of any other interface pass untouched
        /// (the generator is also attached to an idle interface, see
        /// `xdp::tester::Tester::anchor_generator`).
        pub ifindex: u32,
    }
}

contract! {
    /// One flow of the generator (`tgen_flows[i]`).
    pub struct TgenFlow / "v6g_tgen_flow" {
        /// The frame's first 64 bytes (two halves; 4in6: the 64 from
        /// [`TGEN_4IN6_OFF`]): headers, then zero payload.
        pub hdr: [[u8; 32]; 2],
        /// Unfolded one's-complement sum (host-order 16-bit words, as
        /// `xlat::checksum::sum`) of the UDP pseudo-header and datagram
        /// with the checksum and the stamp fields zero.
        pub base_sum: u64,
    }
}

contract! {
    /// The generator's state (`tgen_state[0]`).
    pub struct TgenState / "v6g_tgen_state" {
        /// Frames generated: the next frame's sequence number.
        pub seq: u64,
    }
}

contract! {
    /// The receiver's settings (`trecv_config[0]`).
    pub struct TrecvConfig / "v6g_trecv_config" {
        /// A frame later than this after its timestamp is late.
        pub budget_ns: u64,
        /// The trial's magic.
        pub magic: u32,
        /// Sequence numbers `0..total` belong to the trial; 0 closes the
        /// receiver (everything foreign).
        pub total: u32,
        /// Learn the source of flows `0..nflows`.
        pub nflows: u32,
        /// A latency sample every `2^sample_shift` sequence numbers.
        pub sample_shift: u8,
        /// 1: count only IPv6 frames, 0: only IPv4.
        pub rx_v6: u8,
        /// 1: record each flow's first source address and port.
        pub learn: u8,
        /// 1: the stamp follows a 12-byte RTP header (see `TgenConfig::rtp`).
        pub rtp: u8,
    }
}

contract! {
    /// The receiver's counters (per CPU, `trecv_counts[0]`).
    pub struct TrecvCounts / "v6g_trecv_counts" {
        /// First arrivals (on time or late).
        pub received: u64,
        /// First arrivals later than the budget.
        pub late: u64,
        /// Frames seen before.
        pub dup: u64,
        /// Test frames not of this trial, out of range, of the other IP
        /// version, or after the receiver closed.
        pub foreign: u64,
        /// Latency samples written to `trecv_samples`.
        pub sampled: u64,
        /// Samples the ring buffer had no room for.
        pub sample_lost: u64,
    }
}

contract! {
    /// Latency sum and count of one tenth of a trial (per CPU, `trecv_trend`).
    pub struct TrecvTrend / "v6g_trecv_trend" {
        /// Sum of the latencies, ns.
        pub sum_ns: u64,
        /// Frames.
        pub count: u64,
    }
}

contract! {
    /// One latency sample in the `trecv_samples` ring buffer.
    pub struct TrecvSample / "v6g_trecv_sample" {
        /// Sequence number.
        pub seq: u32,
        /// One-way latency, ns (at most the budget).
        pub lat_ns: u32,
    }
}

contract! {
    /// The source of a flow's first frame (`trecv_learned[flow]`).
    pub struct TrecvLearned / "v6g_trecv_learned" {
        /// Sequence number + 1 of that frame; 0: none arrived.
        pub seq1: u32,
        /// UDP source port, network order.
        pub port_be: u16,
        /// 1: IPv6 source, 0: IPv4 (in the first 4 bytes of `addr`).
        pub v6: u8,
        /// Zero.
        pub pad: u8,
        /// Source address.
        pub addr: [u8; 16],
    }
}

constants! {
    /// The tester's constants.
    TESTER_CONSTANTS;
    /// Upper 16 bits of the tester's magic word (the lower 16: the trial id).
    pub const TESTER_MAGIC_HI: u32 = 0x7636_0000 => "V6G_TESTER_MAGIC_HI";
    /// Slots of the receiver's latency trend (tenths of a trial).
    pub const TREND_SLOTS: u32 = 10 => "V6G_TREND_SLOTS";
    /// RTP frames of the tester: the SSRC of flow `i` is `RTP_SSRC_BASE + i`.
    pub const RTP_SSRC_BASE: u32 = 0x5647_0000 => "V6G_RTP_SSRC_BASE";
    /// RTP frames of the tester: bytes of the RTP header before the stamp.
    pub const RTP_HEADER_LEN: u32 = 12 => "V6G_RTP_HEADER_LEN";
    /// [`TgenConfig::v6`] of 4in6 frames (IPv4 UDP in an outer IPv6 header).
    pub const TGEN_4IN6: u8 = 2 => "V6G_TGEN_4IN6";
    /// 4in6 frames: where the 64 bytes the generator writes per flow start
    /// (the outer IPv6 header's payload length: Ethernet 14 + 4).
    pub const TGEN_4IN6_OFF: u32 = 18 => "V6G_TGEN_4IN6_OFF";
}

/// The tester's maps and programs.
pub mod tester {
    /// `ARRAY[1]` of [`super::TgenConfig`].
    pub const TGEN_CONFIG: &str = "tgen_config";
    /// `ARRAY` of [`super::TgenFlow`].
    pub const TGEN_FLOWS: &str = "tgen_flows";
    /// `ARRAY[1]` of [`super::TgenState`].
    pub const TGEN_STATE: &str = "tgen_state";
    /// `ARRAY[1]` of [`super::TrecvConfig`].
    pub const TRECV_CONFIG: &str = "trecv_config";
    /// `PERCPU_ARRAY[1]` of [`super::TrecvCounts`].
    pub const TRECV_COUNTS: &str = "trecv_counts";
    /// `PERCPU_ARRAY[TREND_SLOTS]` of [`super::TrecvTrend`].
    pub const TRECV_TREND: &str = "trecv_trend";
    /// `ARRAY` of u64: one bit per sequence number.
    pub const TRECV_SEEN: &str = "trecv_seen";
    /// `RINGBUF` of [`super::TrecvSample`].
    pub const TRECV_SAMPLES: &str = "trecv_samples";
    /// `ARRAY` of [`super::TrecvLearned`], by flow.
    pub const TRECV_LEARNED: &str = "trecv_learned";
    /// The generator program (BPF_PROG_RUN, live frames).
    pub const PROG_TGEN: &str = "xdp_tgen";
    /// The counting receiver program.
    pub const PROG_TRECV: &str = "xdp_trecv";
    /// The live frames probe (drops its frame).
    pub const PROG_TPROBE: &str = "xdp_tprobe";
}

contract! {
    /// Value of the two-entry `natpt_make` array: what the program checks
    /// before it creates a NAT-PT session from an IPv6 host's SYN. Entry 0
    /// is the program's (`n`: sessions it created, an atomic add; the rest
    /// zero); entry 1 is the translator's (`n`: its session count less the
    /// creations it has drained, so that the two `n` add up to the table's
    /// size; `limit`, `flags`, `pool6`).
    pub struct NatptMake / "v6g_natpt_make" {
        /// Sessions (see above).
        pub n: u64,
        /// The session table limit (`max-sessions`).
        pub limit: u64,
        /// `NATPT_MAKE_*` flags.
        pub flags: u32,
        /// The NAT64 `pool6` /96 prefix (its first 12 bytes).
        pub pool6: [u8; 12],
    }
}

contract! {
    /// Value of the `natpt_hosts` hash map (key: the IPv6 host's address,
    /// 16 bytes): the pool4 address the host holds in NAT-PT mode.
    pub struct NatptHost / "v6g_natpt_host" {
        /// The IPv4 address, network order.
        pub addr: [u8; 4],
    }
}

contract! {
    /// A record of the `natpt_events` ring buffer: a session the program
    /// created (X:x → Y:y, translated to T:t → Y:y), at `ns`.
    pub struct NatptEvent / "v6g_natpt_event" {
        /// The IPv6 host X.
        pub x: [u8; 16],
        /// The IPv4 peer Y (network order).
        pub y: [u8; 4],
        /// The host's pool4 address T (network order).
        pub t: [u8; 4],
        /// x, network order.
        pub sport_be: u16,
        /// y, network order.
        pub dport_be: u16,
        /// 6 (TCP).
        pub proto: u8,
        /// What happened: [`NATPT_EV_CREATED`], [`NATPT_EV_FIN6`],
        /// [`NATPT_EV_FIN4`].
        pub kind: u8,
        /// The pool4 port t, network order (NAT-PT: x; NAT64: the block
        /// port taken).
        pub tport_be: u16,
        /// `bpf_ktime_get_coarse_ns()` when it was created.
        pub ns: u64,
    }
}

contract! {
    /// Value of `n64_hosts` (key: the IPv6 host's address, 16 bytes):
    /// NAT64 (NAPT) mode, the host's TCP port blocks.
    pub struct N64Host / "v6g_n64_host" {
        /// Slot + 1 in `n64_blocks` of each block, 0: none (the rest 0 too).
        pub slot: [u32; 8],
    }
}

contract! {
    /// Key of `n64_bib`: an IPv6 host's TCP transport address (X, x).
    pub struct N64BibKey / "v6g_n64_bib_key" {
        /// X.
        pub x: [u8; 16],
        /// x, network order.
        pub port_be: u16,
        /// Zero.
        pub pad: [u8; 2],
    }
}

contract! {
    /// Value of `n64_bib`: the TCP BIB entry's pool4 transport address.
    pub struct N64Bib / "v6g_n64_bib" {
        /// T, network order.
        pub t: [u8; 4],
        /// t, network order.
        pub port_be: u16,
        /// Zero.
        pub pad: [u8; 2],
    }
}

constants! {
    /// The fast path's flags and sizes.
    FASTPATH_CONSTANTS;
    /// Blocks a host lists in `n64_hosts` at most.
    pub const N64_BLOCKS: usize = 8 => "V6G_N64_BLOCKS";
    /// Slots of `n64_blocks` (`max_entries` in `bpf/nat64.h`).
    pub const N64_BLOCK_SLOTS: u32 = 16_384 => "V6G_N64_BLOCK_SLOTS";
    /// [`Xlat::flags`]: the function is on.
    pub const XLAT_ON: u8 = 1 << 0 => "V6G_XLAT_ON";
    /// `reset-traffic-class`: IPv4 → IPv6 Traffic Class 0.
    pub const XLAT_RESET_TC: u8 = 1 << 1 => "V6G_XLAT_RESET_TC";
    /// `reset-tos`: IPv6 → IPv4 TOS = `new-tos`.
    pub const XLAT_RESET_TOS: u8 = 1 << 2 => "V6G_XLAT_RESET_TOS";
    /// SIIT: `eam-hairpin-mode = intrinsic` with pool6 and an EAMT (RFC 7757
    /// §4.2.2): IPv6 packets through pool6 to an EAMT IPv4 address are turned
    /// around by the slow path, so they pass.
    pub const XLAT_EAM_HAIRPIN: u8 = 1 << 3 => "V6G_XLAT_EAM_HAIRPIN";
    /// SIIT: the EAMT is not empty (skips both trie lookups when it is).
    pub const XLAT_HAVE_EAMT: u8 = 1 << 4 => "V6G_XLAT_HAVE_EAMT";
    /// SIIT: `pool6` is the Well-Known Prefix 64:ff9b::/96 (RFC 6052 §3.1:
    /// only global IPv4 addresses translate).
    pub const XLAT_POOL6_WKP: u8 = 1 << 5 => "V6G_XLAT_POOL6_WKP";
    /// SIIT: `eam-hairpin-mode = simple` with pool6 and an EAMT (RFC 7757
    /// §4.2.1): IPv4 → IPv6 sources are mapped with pool6 only.
    pub const XLAT_EAM_SIMPLE: u8 = 1 << 6 => "V6G_XLAT_EAM_SIMPLE";
    /// [`Config::fib_flags`]: `BPF_FIB_LOOKUP_DIRECT`: skip the policy
    /// rules, look up the main table (or [`Config::fib_table`] with [`FIB_TABLE`]).
    pub const FIB_DIRECT: u8 = 1 << 0 => "V6G_FIB_DIRECT";
    /// [`Config::fib_flags`]: with [`FIB_DIRECT`], look up table
    /// [`Config::fib_table`] (`BPF_FIB_LOOKUP_TBID`, Linux 6.8).
    pub const FIB_TABLE: u8 = 1 << 1 => "V6G_FIB_TABLE";
    /// [`Config::route_flags`]: `routes4` has entries.
    pub const ROUTES4: u8 = 1 << 0 => "V6G_ROUTES4";
    /// [`Config::route_flags`]: `routes6` has entries.
    pub const ROUTES6: u8 = 1 << 1 => "V6G_ROUTES6";
    /// [`Config::route_flags`]: the only IPv4 route is the default route,
    /// through [`Config::default_nh4`].
    pub const ROUTES4_DEFAULT: u8 = 1 << 2 => "V6G_ROUTES4_DEFAULT";
    /// [`Config::route_flags`]: the only IPv6 route is the default route,
    /// through [`Config::default_nh6`].
    pub const ROUTES6_DEFAULT: u8 = 1 << 3 => "V6G_ROUTES6_DEFAULT";
    /// [`Config::trgw_flags`]: the TrGW fast path is on.
    pub const TRGW_ON: u8 = 1 << 0 => "V6G_TRGW_ON";
    /// [`RelayValue::flags`]: the other leg's far end is known (latched or
    /// signalled); without it packets go to the slow path.
    pub const RELAY_OUT_KNOWN: u8 = 1 << 0 => "V6G_RELAY_OUT_KNOWN";
    /// [`Nat64Value::flags`]: a TCP session in V6 INIT (its IPv6 SYN created
    /// it): only the IPv4 side's SYN+ACK is carried, and recorded.
    pub const NAT64_F_HALF_OPEN: u32 = 1 << 0 => "V6G_NAT64_F_HALF_OPEN";
    /// [`Nat64Value::flags`]: the program carried that SYN+ACK (set in both
    /// entries of the session); the entries are carried in full from then on.
    pub const NAT64_F_SYN_ACK: u32 = 1 << 1 => "V6G_NAT64_F_SYN_ACK";
    /// [`NatptMake::flags`]: the program creates NAT-PT sessions (NAT-PT
    /// mode, a /96 `pool6`, the translator draining `natpt_events`).
    pub const NATPT_MAKE_ON: u32 = 1 << 0 => "V6G_NATPT_MAKE_ON";
    /// [`NatptMake::flags`]: the translator holds IPv4 SYNs (RFC 6146
    /// §3.5.2.2): a new TCP session may have to discard one, which only the
    /// slow path does.
    pub const NATPT_MAKE_HELD: u32 = 1 << 1 => "V6G_NATPT_MAKE_HELD";
    /// [`NatptEvent::kind`]: the program created the session.
    pub const NATPT_EV_CREATED: u8 = 0 => "V6G_NATPT_EV_CREATED";
    /// [`NatptEvent::kind`]: the program carried a FIN (no SYN or RST) of the
    /// session from its IPv6 side, at `ns`.
    pub const NATPT_EV_FIN6: u8 = 1 => "V6G_NATPT_EV_FIN6";
    /// [`NatptEvent::kind`]: ... from its IPv4 side.
    pub const NATPT_EV_FIN4: u8 = 2 => "V6G_NATPT_EV_FIN4";
    /// [`NatptMake::flags`]: NAT64 (NAPT) mode: the port comes from the
    /// host's blocks (`n64_hosts`, `n64_blocks`), the mapping is checked and
    /// recorded in `n64_bib`.
    pub const NATPT_MAKE_NAPT: u32 = 1 << 2 => "V6G_NATPT_MAKE_NAPT";
}

/// Map names in the BPF object.
pub mod maps {
    /// `ARRAY[1]` of [`super::Config`].
    pub const CONFIG: &str = "config";
    /// `LPM_TRIE` [`super::LpmKey4`] → [`super::Eam`].
    pub const EAMT4: &str = "eamt4";
    /// `LPM_TRIE` [`super::LpmKey6`] → [`super::Eam`].
    pub const EAMT6: &str = "eamt6";
    /// `HASH` [`super::FlowKey`] → [`super::Nat64Value`].
    pub const NAT64_SESSIONS: &str = "nat64_sessions";
    /// `HASH` IPv6 host address (16 bytes) → [`super::NatptHost`].
    pub const NATPT_HOSTS: &str = "natpt_hosts";
    /// `LPM_TRIE` [`super::LpmKey4`] → `u8`: the NAT64 pool4 (NAT-PT:
    /// hairpinned destinations stay on the slow path).
    pub const NATPT_POOL4: &str = "natpt_pool4";
    /// `ARRAY[2]` of [`super::NatptMake`].
    pub const NATPT_MAKE: &str = "natpt_make";
    /// `RINGBUF` of [`super::NatptEvent`].
    pub const NATPT_EVENTS: &str = "natpt_events";
    /// `HASH` IPv6 host address (16 bytes) → [`super::N64Host`].
    pub const N64_HOSTS: &str = "n64_hosts";
    /// `ARRAY` (`BPF_F_MMAPABLE`) of `struct pb_block` (`bpf/portblock.h`).
    pub const N64_BLOCKS: &str = "n64_blocks";
    /// `HASH` [`super::N64BibKey`] → [`super::N64Bib`].
    pub const N64_BIB: &str = "n64_bib";
    /// `HASH` [`super::RelayKey`] → [`super::RelayValue`].
    pub const TRGW_RELAY: &str = "trgw_relay";
    /// `PERCPU_ARRAY` of [`super::Count`], indexed by `RelayValue::stats_index`.
    pub const TRGW_STATS: &str = "trgw_stats";
    /// `PERCPU_ARRAY` of [`super::Count`], indexed by [`super::Counter`].
    pub const COUNTERS: &str = "counters";
    /// `LRU_PERCPU_HASH` [`super::FibKey`] → [`super::FibValue`].
    pub const FIB_CACHE: &str = "fib_cache";
    /// `DEVMAP_HASH` ifindex → ifindex: the interfaces the fast path may
    /// redirect to.
    pub const TX_PORTS: &str = "tx_ports";
    /// `LPM_TRIE` [`super::LpmKey4`] (destination prefix) → next-hop id.
    pub const ROUTES4: &str = "routes4";
    /// `LPM_TRIE` [`super::LpmKey6`] (destination prefix) → next-hop id.
    pub const ROUTES6: &str = "routes6";
    /// `ARRAY` next-hop id → [`super::Nexthop`].
    pub const NEXTHOPS: &str = "nexthops";
}

/// Program names (ELF section functions) in the BPF object.
pub mod progs {
    /// SIIT only.
    pub const SIIT: &str = "xdp_siit";
    /// NAT64 established sessions only.
    pub const NAT64: &str = "xdp_nat64";
    /// TrGW media relay only.
    pub const TRGW: &str = "xdp_trgw";
    /// Everything the configuration turns on: TrGW, then NAT64, then SIIT.
    pub const GATE: &str = "xdp_gate";
}

counters! {
    /// Index into the per-CPU `counters` array: packets the fast path
    /// handled, per function and direction, and packets it passed to
    /// the slow path, per reason.
    pub enum Counter / "V6G_COUNTERS" {
        /// SIIT IPv4 → IPv6 translated and forwarded.
        Siit46 = "V6G_C_SIIT_46", "siit-4to6";
        /// SIIT IPv6 → IPv4 translated and forwarded.
        Siit64 = "V6G_C_SIIT_64", "siit-6to4";
        /// NAT64 IPv6 → IPv4 (established session).
        Nat6464 = "V6G_C_NAT64_64", "nat64-6to4";
        /// NAT64 IPv4 → IPv6 (established session).
        Nat6446 = "V6G_C_NAT64_46", "nat64-4to6";
        /// TrGW media packets relayed.
        Trgw = "V6G_C_TRGW", "trgw";
        /// Pass: not IPv4/IPv6 over Ethernet (VLAN tags, ARP, ...).
        PassNotIp = "V6G_P_NOT_IP", "not-ip";
        /// Pass: lengths inconsistent or headers cut short.
        PassMalformed = "V6G_P_MALFORMED", "malformed";
        /// Pass: IPv4 header checksum does not verify.
        PassIpv4Checksum = "V6G_P_IPV4_CHECKSUM", "ipv4-checksum";
        /// Pass: IPv4 options.
        PassIpv4Options = "V6G_P_IPV4_OPTIONS", "ipv4-options";
        /// Pass: IPv6 extension headers.
        PassIpv6Extension = "V6G_P_IPV6_EXT", "ipv6-extension";
        /// Pass: a fragment.
        PassFragment = "V6G_P_FRAGMENT", "fragment";
        /// Pass: a transport the fast path does not handle.
        PassProtocol = "V6G_P_PROTOCOL", "protocol";
        /// Pass: ICMP other than echo request/reply (errors, ND, ...).
        PassIcmp = "V6G_P_ICMP", "icmp";
        /// Pass: UDP with a zero checksum.
        PassUdpZeroChecksum = "V6G_P_UDP_ZERO_CSUM", "udp-zero-checksum";
        /// Pass: TrGW datagram whose UDP checksum does not verify (the slow
        /// path's socket discards it).
        PassUdpChecksum = "V6G_P_UDP_CSUM", "udp-checksum";
        /// Pass: TTL / Hop Limit would expire (the slow path sends Time Exceeded).
        PassTtl = "V6G_P_TTL", "ttl";
        /// Pass: nothing to do here (no mapping, no session, no relay entry).
        PassNoMatch = "V6G_P_NO_MATCH", "no-match";
        /// Pass: an address the translator never translates, or an EAM hairpin.
        PassAddress = "V6G_P_ADDRESS", "address";
        /// Pass: larger than an MTU: needs fragmentation or an ICMP error.
        PassTooBig = "V6G_P_TOO_BIG", "too-big";
        /// Pass: TCP SYN, FIN or RST (the slow path's state machine decides).
        PassTcpControl = "V6G_P_TCP_CONTROL", "tcp-control";
        /// Pass: TrGW packet from a source other than the latched one.
        PassNotLatched = "V6G_P_NOT_LATCHED", "not-latched";
        /// Pass: the FIB lookup failed (no route, no neighbour entry, ...).
        PassFib = "V6G_P_FIB", "fib";
        /// Pass: the egress interface is not in `tx_ports`.
        PassEgress = "V6G_P_EGRESS", "egress";
        /// Pass: the packet could not be resized (bpf_xdp_adjust_*).
        PassAdjust = "V6G_P_ADJUST", "adjust";
        /// NAT64 IPv4 → IPv6: the SYN+ACK of a half-open TCP session, carried
        /// and recorded (also counted in `nat64-4to6`).
        Nat64SynAck = "V6G_C_NAT64_SYN_ACK", "nat64-syn-ack";
        /// Pass: a packet of a half-open NAT64 TCP session other than its
        /// IPv4 side's SYN+ACK (the slow path translates it in V6 INIT).
        PassHalfOpen = "V6G_P_HALF_OPEN", "half-open";
        /// NAT-PT: a session created from the IPv6 host's SYN (also counted
        /// in `nat64-6to4` when translated).
        NatptMade = "V6G_C_NATPT_MADE", "natpt-created";
        /// NAT-PT: another CPU or the slow path created the same session
        /// first; translated with its entry.
        NatptRace = "V6G_C_NATPT_RACE", "natpt-race";
        /// Pass: NAT-PT SYN of a host that holds no mirrored address.
        PassNatptNoHost = "V6G_P_NATPT_NO_HOST", "natpt-no-host";
        /// Pass: NAT-PT SYN from pool6 (a loop) or to one of our pool4
        /// addresses (hairpinning stays on the slow path).
        PassNatptHairpin = "V6G_P_NATPT_HAIRPIN", "natpt-hairpin";
        /// Pass: NAT-PT SYN from or to an address never translated.
        PassNatptForbidden = "V6G_P_NATPT_FORBIDDEN", "natpt-forbidden";
        /// Pass: NAT-PT SYN with the session table at its limit.
        PassNatptTableFull = "V6G_P_NATPT_TABLE_FULL", "natpt-table-full";
        /// Pass: NAT-PT SYN while the translator holds IPv4 SYNs.
        PassNatptHeld = "V6G_P_NATPT_HELD", "natpt-held";
        /// Pass: NAT-PT SYN with the event ring buffer full (nothing created).
        PassNatptRingFull = "V6G_P_NATPT_RING_FULL", "natpt-ring-full";
        /// Pass: NAT-PT SYN whose entries could not be inserted (a stale
        /// IPv4-side entry, or the map full).
        PassNatptInsert = "V6G_P_NATPT_INSERT", "natpt-insert";
        /// NAT64 (NAPT): a session created from the IPv6 host's SYN with a
        /// port of its blocks (also counted in `nat64-6to4`).
        Nat64Made = "V6G_C_NAT64_MADE", "nat64-created";
        /// Pass: NAT64 SYN of a host without port blocks (its first SYN: the
        /// translator grants one).
        PassNat64NoBlock = "V6G_P_NAT64_NO_BLOCK", "nat64-no-block";
        /// Pass: NAT64 SYN whose host's blocks are all in use.
        PassNat64BlockFull = "V6G_P_NAT64_BLOCK_FULL", "nat64-block-full";
        /// Pass: NAT64 SYN from a port below 1024 (no block port keeps its
        /// range class).
        PassNat64LowPort = "V6G_P_NAT64_LOW_PORT", "nat64-low-port";
        /// Pass: NAT64 SYN from a host port that has a TCP mapping already
        /// (endpoint-independent mapping: the translator uses it).
        PassNat64Bib = "V6G_P_NAT64_BIB", "nat64-bib";
        /// NAT64 / NAT-PT: a TCP FIN (no SYN or RST) of a session carried in
        /// full, forwarded and told to the translator on `natpt_events` (with
        /// session creation on; also counted in `nat64-6to4`/`nat64-4to6`).
        Nat64Fin = "V6G_C_NAT64_FIN", "nat64-fin";
    }
}

constants! {
    /// The fast path's counter array.
    COUNTER_CONSTANTS;
    /// Number of counters (`max_entries` of `counters`).
    pub const COUNTER_MAX: u32 = Counter::ALL.len() as u32 => "V6G_COUNTER_MAX";
}

/// Every contract struct, in the order C declares them (a struct before
/// the structs that hold it).
pub const STRUCTS: &[StructDesc] = &[
    desc::<Xlat>(),
    desc::<Config>(),
    desc::<LpmKey4>(),
    desc::<LpmKey6>(),
    desc::<Eam>(),
    desc::<FlowKey>(),
    desc::<Nat64Value>(),
    desc::<RelayKey>(),
    desc::<RelayValue>(),
    desc::<Count>(),
    desc::<FibKey>(),
    desc::<FibValue>(),
    desc::<Nexthop>(),
    desc::<NatptMake>(),
    desc::<NatptHost>(),
    desc::<NatptEvent>(),
    desc::<N64Host>(),
    desc::<N64BibKey>(),
    desc::<N64Bib>(),
    desc::<TgenConfig>(),
    desc::<TgenFlow>(),
    desc::<TgenState>(),
    desc::<TrecvConfig>(),
    desc::<TrecvCounts>(),
    desc::<TrecvTrend>(),
    desc::<TrecvSample>(),
    desc::<TrecvLearned>(),
    desc::<PbBlock>(),
    desc::<SwConfig>(),
    desc::<SwBinding>(),
    desc::<SwV4Key>(),
    desc::<SwAddr>(),
    desc::<DsOutKey>(),
    desc::<DsOutVal>(),
    desc::<DsInKey>(),
    desc::<DsInVal>(),
    desc::<DsPoolKey>(),
    desc::<DsB4Key>(),
    desc::<DsB4Val>(),
    desc::<DsEvent>(),
    desc::<DsState>(),
    desc::<TdConfig>(),
    desc::<TdPeer>(),
    desc::<B4Config>(),
    desc::<IfMac>(),
    desc::<SkKey>(),
];

/// Every group of integer constants shared with C.
pub const CONSTANTS: &[&[(&str, u64)]] = &[
    FASTPATH_CONSTANTS,
    COUNTER_CONSTANTS,
    TESTER_CONSTANTS,
    PORTBLOCK_CONSTANTS,
    SOFTWIRE_CONSTANTS,
    TEREDO_CONSTANTS,
    B4_CONSTANTS,
];

/// Every counter set: (C name of the count, (C name, index) of each).
pub const COUNTER_SETS: &[(&str, &[(&str, u32)])] = &[
    (Counter::C_COUNT, Counter::C_DEFINES),
    (SoftwireCounter::C_COUNT, SoftwireCounter::C_DEFINES),
    (TeredoCounter::C_COUNT, TeredoCounter::C_DEFINES),
    (B4Counter::C_COUNT, B4Counter::C_DEFINES),
    (SkCounter::C_COUNT, SkCounter::C_DEFINES),
];

/// `v6gate_abi.h`, which build.rs writes into OUT_DIR and every BPF
/// object includes: the constants and counter indices as `#define`s, then
/// each contract struct's declaration followed by static asserts of its
/// size and of each field's offset and size, so a C declaration that does
/// not match this file's layout fails the build.
pub fn abi_header() -> String {
    use core::fmt::Write as _;
    let mut h = String::new();
    h.push_str("/* Generated by crates/xdp/build.rs from crates/xdp/src/types.rs (and types/). Do not edit:\n");
    h.push_str(" * declare a map type, flag or counter there (docs/xdp.md, \"The contract\"). */\n");
    h.push_str("#ifndef V6GATE_ABI_H\n#define V6GATE_ABI_H\n\n#include <linux/types.h>\n\n");
    for group in CONSTANTS {
        for (name, v) in group.iter() {
            let _ = writeln!(h, "#define {name} {v}");
        }
        h.push('\n');
    }
    for (count, defines) in COUNTER_SETS {
        for (name, i) in defines.iter() {
            let _ = writeln!(h, "#define {name} {i}");
        }
        let _ = writeln!(h, "#define {count} {}\n", defines.len());
    }
    for s in STRUCTS {
        let c = s.c_name;
        let _ = writeln!(h, "struct {c} {{");
        for (decl, doc) in (s.c_fields)() {
            if doc.is_empty() {
                let _ = writeln!(h, "\t{decl};");
            } else {
                let _ = writeln!(h, "\t{decl}; /* {} */", doc.replace("*/", "* /"));
            }
        }
        h.push_str("};\n");
        let _ = writeln!(
            h,
            "_Static_assert(sizeof(struct {c}) == {}, \"struct {c}: size differs from types.rs\");",
            s.size
        );
        for (f, off, size) in s.fields {
            let _ = writeln!(
                h,
                "_Static_assert(__builtin_offsetof(struct {c}, {f}) == {off}, \"struct {c}.{f}: offset differs from types.rs\");"
            );
            let _ = writeln!(
                h,
                "_Static_assert(sizeof(((struct {c} *)0)->{f}) == {size}, \"struct {c}.{f}: size differs from types.rs\");"
            );
        }
        h.push('\n');
    }
    h.push_str("#endif\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fixed_by_the_contract() {
        let sizes: &[(&str, usize)] = &[
            ("v6g_config", 96),
            ("v6g_nexthop", 20),
            ("v6g_fib_key", 44),
            ("v6g_fib", 32),
            ("v6g_flow", 40),
            ("v6g_nat64", 48),
            ("v6g_natpt_make", 32),
            ("v6g_natpt_event", 40),
            ("v6g_relay_key", 20),
            // 60 bytes and the per-leg sums (three u16 and padding).
            ("v6g_relay", 68),
            ("v6g_eam", 24),
            ("pb_block", 40),
            ("sw_config", 24),
            ("sw_binding", 8),
            ("sw_v4key", 8),
            ("sw_addr", 4),
            ("ds_out_key", 24),
            ("ds_out_val", 24),
            ("ds_in_key", 8),
            ("ds_in_val", 40),
            ("ds_pool_key", 8),
            ("ds_b4_key", 20),
            ("ds_b4_val", 32),
            ("ds_event", 48),
            ("ds_state", 32),
            ("td_config", 24),
            ("td_peer", 16),
            ("b4_config", 64),
            ("v6g_ifmac", 8),
            ("v6g_sk_key", 20),
        ];
        for (name, size) in sizes {
            let s = STRUCTS.iter().find(|s| s.c_name == *name).unwrap_or_else(|| panic!("{name} not in STRUCTS"));
            assert_eq!(s.size, *size, "struct {name}");
        }
        assert_eq!(COUNTER_MAX as usize, Counter::ALL.len());
    }

    /// Every C name is defined once: no two structs, constants or counters
    /// share one (a second `#define` would silently win or fail in C).
    #[test]
    fn c_names_are_unique() {
        let mut names: Vec<&str> = STRUCTS.iter().map(|s| s.c_name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "struct names");
        let mut defs: Vec<&str> = CONSTANTS.iter().flat_map(|g| g.iter().map(|(n, _)| *n)).collect();
        for (count, set) in COUNTER_SETS {
            defs.push(count);
            defs.extend(set.iter().map(|(n, _)| *n));
        }
        defs.sort_unstable();
        let n = defs.len();
        defs.dedup();
        assert_eq!(defs.len(), n, "#define names");
    }

    /// Each counter set is dense from 0 with unique labels, and its C
    /// names carry its object's prefix.
    #[test]
    fn counter_sets_are_dense_and_labelled_once() {
        type Names<C> = (fn(C) -> u32, fn(C) -> &'static str, fn(C) -> &'static str);
        fn check<C: Copy>(all: &[C], (index, c_name, label): Names<C>, prefix: &[&str]) {
            let mut labels = Vec::new();
            for (i, c) in all.iter().enumerate() {
                assert_eq!(index(*c) as usize, i, "{}", c_name(*c));
                assert!(prefix.iter().any(|p| c_name(*c).starts_with(p)), "{}", c_name(*c));
                labels.push(label(*c));
            }
            labels.sort_unstable();
            labels.dedup();
            assert_eq!(labels.len(), all.len(), "labels are unique");
        }
        check(Counter::ALL, (|c| c as u32, Counter::c_name, Counter::label), &["V6G_C_", "V6G_P_"]);
        check(
            SoftwireCounter::ALL,
            (|c| c as u32, SoftwireCounter::c_name, SoftwireCounter::label),
            &["SW_C_", "SW_P_"],
        );
        check(TeredoCounter::ALL, (|c| c as u32, TeredoCounter::c_name, TeredoCounter::label), &["TD_C_", "TD_P_"]);
        check(B4Counter::ALL, (|c| c as u32, B4Counter::c_name, B4Counter::label), &["B4_C_", "B4_P_"]);
        check(SkCounter::ALL, (|c| c as u32, SkCounter::c_name, SkCounter::label), &["SK_"]);
    }

    /// The generated header: a counter's `#define` is its enum value, a
    /// flag's its Rust value; structs are declared with their fields in
    /// order, each followed by its asserts, a held struct before its holder.
    #[test]
    fn header_defines_what_rust_declares() {
        let h = abi_header();
        for (line, why) in [
            ("#define SW_P_FIB 15\n", "SoftwireCounter::PassFib"),
            ("#define SW_C_FIN 29\n#define SW_COUNTERS 30\n", "the last softwire counter and the count"),
            ("#define TD_P_OTHER_HOST 19\n#define TD_COUNTERS 20\n", "TeredoCounter"),
            ("#define B4_P_HOST_OTHER 20\n#define B4_COUNTERS 21\n", "B4Counter"),
            ("#define SK_STEERED 0\n", "SkCounter"),
            ("#define V6G_C_NAT64_FIN 40\n", "Counter::Nat64Fin"),
            ("#define V6G_COUNTER_MAX 41\n", "COUNTER_MAX"),
            ("#define DS_F_FIN_V4 16\n", "DS_F_FIN_V4"),
            ("#define SW_F_DS_CREATE 16\n", "SW_F_DS_CREATE"),
            ("#define B4_F_HOST 8\n", "B4_F_HOST"),
            ("#define PB_MAX_PORTS 256\n", "PB_MAX_PORTS"),
            ("#define V6G_XLAT_EAM_SIMPLE 64\n", "XLAT_EAM_SIMPLE"),
            ("struct ds_b4_val {\n\t__u32 slot[8];", "an array field"),
            ("struct v6g_tgen_flow {\n\t__u8 hdr[2][32];", "a nested array"),
            ("\tstruct v6g_xlat siit;", "a nested struct"),
            (
                "_Static_assert(__builtin_offsetof(struct ds_state, limit) == 24,",
                "ds_state.limit's offset (once a raw word(24))",
            ),
            ("_Static_assert(sizeof(struct v6g_sk_key) == 20,", "a struct's size"),
        ] {
            assert!(h.contains(line), "{why}: {line:?} missing from the header:\n{h}");
        }
        assert_eq!(SoftwireCounter::PassFib as u32, 15);
        assert_eq!(SoftwireCounter::PassFib.c_name(), "SW_P_FIB");
        assert_eq!(TeredoCounter::PassUntrusted.label(), "pass-untrusted");
        let pos = |needle: &str| h.find(needle).unwrap_or_else(|| panic!("{needle} missing"));
        assert!(pos("struct v6g_xlat {") < pos("struct v6g_config {"), "a held struct comes first");
        for s in STRUCTS {
            let decl = format!("struct {} {{\n", s.c_name);
            let at = pos(&decl);
            let body = &h[at..at + h[at..].find("};").unwrap_or(0)];
            let mut last = 0;
            for (f, _, _) in s.fields {
                let i = [format!(" {f};"), format!(" {f}[")]
                    .iter()
                    .filter_map(|d| body.find(d.as_str()))
                    .min()
                    .unwrap_or_else(|| panic!("{}.{f} not declared", s.c_name));
                assert!(i > last, "{}.{f} out of order", s.c_name);
                last = i;
            }
        }
    }
}
