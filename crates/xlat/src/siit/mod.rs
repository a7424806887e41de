//! RFC 7915 — IP/ICMP Translation Algorithm (SIIT), both directions.
//!
//! - `v4_to_v6` — RFC 7915 §4 (IPv4 → IPv6)
//! - `v6_to_v4` — RFC 7915 §5 (IPv6 → IPv4)
//! - `icmp` — the ICMPv4 ↔ ICMPv6 type/code and pointer tables (§4.2, §5.2)
//! - `emit` — writing translated packets (and fragments) and the
//!   transport-header rewrite; the ICMP errors the translator originates
//!   come from `crate::origin`
//! - [`amend`] — `amend-udp-checksum-zero` for complete fragment sets
//!
//! [`Translator::translate`] is the single entry point: it looks at the
//! version nibble and runs the matching direction.

pub mod amend;
mod emit;
mod icmp;
mod v4_to_v6;
mod v6_to_v4;

use crate::addr::{Eamt, Ivi, Mapper, Prefix4, Prefix6, PrefixMap, Rfc6052};
use crate::{DropReason, Out, Verdict};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

/// Which address of a packet an [`AddrMap`] is asked to map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Source of the packet being translated.
    Src,
    /// Destination of the packet being translated.
    Dst,
    /// Source of the packet quoted in an ICMP error.
    InnerSrc,
    /// Destination of the packet quoted in an ICMP error.
    InnerDst,
}

/// Where [`Translator::translate_with`] gets its addresses: the hook that
/// lets a stateful translator (NAT64, RFC 6146) reuse the RFC 7915 header,
/// ICMP and checksum machinery with addresses it looked up itself. The
/// translator stays generic over it (monomorphised, no dynamic dispatch).
/// Each call also gets the translator's own configured [`Mapper`], which
/// [`Stateless`] (plain SIIT, what [`Translator::translate`] uses) maps
/// with and a stateful implementation ignores. Returning `None` makes the
/// address untranslatable (for the source of an ICMP error the RFC 6791
/// fallback applies, as in SIIT).
pub trait AddrMap {
    /// RFC 7757 §4.2 EAM hairpinning applies (only for [`Stateless`]).
    const EAM_HAIRPIN: bool = false;
    /// IPv6 → IPv4 for the address in `role`.
    fn map_6to4(&self, siit: &Mapper, role: Role, a: &Ipv6Addr) -> Option<Ipv4Addr>;
    /// IPv4 → IPv6 for the address in `role`.
    fn map_4to6(&self, siit: &Mapper, role: Role, a: Ipv4Addr) -> Option<Ipv6Addr>;
}

/// Stateless SIIT addressing: the configured pool6/EAMT for every address.
/// `translate_with(&Stateless, ..)` is exactly [`Translator::translate`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Stateless;

impl AddrMap for Stateless {
    const EAM_HAIRPIN: bool = true;
    #[inline(always)]
    fn map_6to4(&self, siit: &Mapper, _role: Role, a: &Ipv6Addr) -> Option<Ipv4Addr> {
        siit.v6_to_v4(a)
    }
    #[inline(always)]
    fn map_4to6(&self, siit: &Mapper, _role: Role, a: Ipv4Addr) -> Option<Ipv6Addr> {
        siit.v4_to_v6(a)
    }
}

/// Per-call switches of [`Translator::translate_pass`]: what a stateful
/// caller (NAT64, RFC 6146) knows about a packet that the packet itself
/// does not say. All off is [`Translator::translate_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// IPv6 → IPv4: the packet is a datagram the caller reassembled from
    /// fragments (RFC 6146 §3.4). It is translated as the fragments it came
    /// from would have been (RFC 7915 §5.1: DF clear, so the IPv4 side may
    /// fragment it again to `ipv4-mtu`), never answered with Packet Too
    /// Big, which its sender could not act on.
    pub reassembled: bool,
    /// IPv6 → IPv4: the result is turned around into IPv6 by the caller
    /// (RFC 6146 §3.8 hairpinning) and never reaches the IPv4 link:
    /// `ipv4-mtu` does not apply, and a translated ICMPv6 error keeps up
    /// to 1280 bytes (what the final ICMPv6 error may carry).
    pub hairpin_out: bool,
    /// IPv4 → IPv6: the second pass of a hairpin. The first pass already
    /// decremented the Hop Limit (a hairpinned packet loses one hop, not
    /// two), and no ICMPv4 error is sent back (the source is an IPv6 host
    /// behind this translator; a refusal comes back as [`Verdict::Drop`]
    /// for the caller to answer in IPv6).
    pub hairpin_in: bool,
}

/// `eam-hairpin-mode` (Jool's key): how IPv6 traffic addressed through
/// `pool6` to an IPv4 address of the EAMT, i.e. to another IPv6 node
/// behind this translator, is handled (RFC 7757 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EamHairpinMode {
    /// No hairpinning: the IPv4 result leaves as it is.
    Off,
    /// RFC 7757 §4.2.1: the translator does not turn the packet around
    /// itself (the IPv4 network routes it back); every IPv4 → IPv6
    /// translation maps an EAMT source with `pool6` only (for an ICMP
    /// error: when the source is the quoted packet's destination) and the
    /// destination of a quoted packet with `pool6` only.
    Simple,
    /// RFC 7757 §4.2.2: the translator turns such packets (and ICMPv6
    /// errors sent to such addresses) around itself, and only those get
    /// the `pool6`-only rules above. The default, as in Jool.
    #[default]
    Intrinsic,
}

/// `amend-udp-checksum-zero`: what happens to an IPv4 UDP datagram whose
/// checksum is zero (RFC 7915 §4.5: the translator SHOULD offer dropping
/// it or computing the checksum). A first fragment of such a datagram is
/// dropped and answered with ICMPv4 3/13 in every mode of the translator
/// itself (it sees one fragment at a time); [`UdpChecksumZero::Hold`]
/// asks the caller to hold complete fragment sets and amend them first
/// (see [`amend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpChecksumZero {
    /// Jool's `false`: drop the datagram and answer with ICMPv4
    /// Destination Unreachable / Communication Administratively
    /// Prohibited (3/13, RFC 7915 §4.4).
    Drop,
    /// Jool's `true`: compute the checksum of unfragmented datagrams.
    #[default]
    Compute,
    /// As `Compute`, and the offline translator and the daemon hold the
    /// fragments of a zero-checksum datagram until it is complete, write
    /// the checksum into the first one and translate each fragment.
    Hold,
}

/// The source of ICMPv6 errors when nothing else gives one (no
/// `ipv6-address`, `ipv4-address` has no IPv6 form through the EAMT or
/// `pool6`, no `rfc6791v6-prefix`): 192.0.0.8, the RFC 7600 IPv4 dummy
/// address, after the RFC 8215 local-use translation prefix.
pub const DEFAULT_IPV6_ADDRESS: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0xc000, 8);

/// Which algorithmic mapping `pool6` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MappingMode {
    /// RFC 6052: `pool6` is the translation prefix.
    #[default]
    Rfc6052,
    /// RFC 6219 IVI: `pool6` is the ISP's prefix; the IVI prefix is it
    /// followed by an all-ones octet.
    Ivi,
}

/// Translator configuration. Field names follow Jool's where Jool has the
/// same knob; the TOML layer in `gate` maps the kebab-case keys onto these.
#[derive(Debug, Clone)]
pub struct Config {
    /// `pool6`: RFC 6052 prefix (or, with `mapping = ivi`, the ISP prefix).
    pub pool6: Option<Prefix6>,
    /// `mapping`.
    pub mapping: MappingMode,
    /// `eamt`: (IPv6 prefix, IPv4 prefix) pairs.
    pub eamt: Vec<(Prefix6, Prefix4)>,
    /// `eam-hairpin-mode` (alias `eam-hairpinning`, where `true` is
    /// intrinsic and `false` off): RFC 7757 §4.2. Default intrinsic.
    pub eam_hairpin_mode: EamHairpinMode,
    /// `rfc6791v4-prefix`: sources for ICMPv4 errors translated from ICMPv6
    /// errors whose source is untranslatable (RFC 6791).
    pub rfc6791_v4: Option<Prefix4>,
    /// `rfc6791v6-prefix`: same for the IPv4 → IPv6 direction.
    pub rfc6791_v6: Option<Prefix6>,
    /// `lowest-ipv6-mtu`: DF=0 IPv4 packets that would exceed this are
    /// fragmented (RFC 7915 §4.1). Default 1280.
    pub lowest_ipv6_mtu: u16,
    /// `amend-udp-checksum-zero`: RFC 7915 §4.5. Default compute.
    pub amend_udp_checksum_zero: UdpChecksumZero,
    /// `refragment-ipv6-fragments`: an IPv6 packet with a Fragment header
    /// whose IPv4 translation exceeds `ipv4-mtu` is fragmented again in
    /// IPv4 (true) or answered with Packet Too Big (false, the default, as
    /// Jool). RFC 7915 §1.4 allows either.
    pub refragment_ipv6_fragments: bool,
    /// `reset-traffic-class`: IPv4→IPv6 Traffic Class set to 0 instead of TOS.
    pub reset_traffic_class: bool,
    /// `reset-tos`: IPv6→IPv4 TOS set to `new-tos` instead of Traffic Class.
    pub reset_tos: bool,
    /// `new-tos`.
    pub new_tos: u8,
    /// `mtu-plateaus`: RFC 1191 plateaus for ICMPv4 Frag Needed with MTU 0.
    pub mtu_plateaus: Vec<u16>,
    /// `ipv4-mtu`: MTU of the IPv4 egress link. Default 1500.
    pub ipv4_mtu: u16,
    /// `ipv6-mtu`: MTU of the IPv6 egress link. Default 1500.
    pub ipv6_mtu: u16,
    /// `ipv4-address`: source of ICMPv4 errors the translator originates.
    /// Default 192.0.0.8, the IPv4 dummy address (RFC 7600).
    pub ipv4_address: Ipv4Addr,
    /// `ipv6-address`: source of ICMPv6 errors the translator originates.
    /// Default: `ipv4-address` mapped through `pool6`/EAMT, else
    /// `rfc6791v6-prefix`'s first address, else [`DEFAULT_IPV6_ADDRESS`]
    /// (see [`Translator::ipv6_address_is_fallback`]).
    pub ipv6_address: Option<Ipv6Addr>,
}

/// RFC 1191 §7 table of plateaus (the ones ≥ 68 that are still plausible).
pub const DEFAULT_MTU_PLATEAUS: [u16; 11] = [65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68];

impl Default for Config {
    fn default() -> Self {
        Config {
            pool6: None,
            mapping: MappingMode::Rfc6052,
            eamt: Vec::new(),
            eam_hairpin_mode: EamHairpinMode::Intrinsic,
            rfc6791_v4: None,
            rfc6791_v6: None,
            lowest_ipv6_mtu: 1280,
            amend_udp_checksum_zero: UdpChecksumZero::Compute,
            refragment_ipv6_fragments: false,
            reset_traffic_class: false,
            reset_tos: false,
            new_tos: 0,
            mtu_plateaus: DEFAULT_MTU_PLATEAUS.to_vec(),
            ipv4_mtu: 1500,
            ipv6_mtu: 1500,
            ipv4_address: Ipv4Addr::new(192, 0, 0, 8),
            ipv6_address: None,
        }
    }
}

/// A configuration the translator cannot run with. `key` names the
/// configuration key at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The offending key, in its TOML spelling.
    pub key: &'static str,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.msg)
    }
}

impl std::error::Error for ConfigError {}

fn cfg_err(key: &'static str, msg: impl fmt::Display) -> ConfigError {
    ConfigError { key, msg: msg.to_string() }
}

/// A configured stateless translator. Immutable after construction, so one
/// instance is shared by every worker; each worker owns its [`Out`].
#[derive(Debug, Clone)]
pub struct Translator {
    pub(crate) map: Mapper,
    pub(crate) cfg: Config,
    pub(crate) ipv6_address: Ipv6Addr,
    /// `ipv6_address` is [`DEFAULT_IPV6_ADDRESS`] because nothing else gave one.
    ipv6_fallback: bool,
    /// RFC 7757 §4.2.1 simple hairpinning is in force (mode simple, an
    /// EAMT and a pool6 to hairpin through).
    pub(crate) simple_hairpin: bool,
    /// RFC 7757 §4.2.2 intrinsic hairpinning is in force.
    pub(crate) intrinsic_hairpin: bool,
}

impl Translator {
    /// Validate `cfg` and build a translator.
    pub fn new(cfg: Config) -> Result<Self, ConfigError> {
        let prefix = match (cfg.pool6, cfg.mapping) {
            (None, MappingMode::Ivi) => return Err(cfg_err("pool6", "mapping = \"ivi\" needs pool6 (the ISP prefix)")),
            (None, MappingMode::Rfc6052) => PrefixMap::None,
            (Some(p), MappingMode::Rfc6052) => PrefixMap::Rfc6052(Rfc6052::new(p).map_err(|e| cfg_err("pool6", e))?),
            (Some(p), MappingMode::Ivi) => PrefixMap::Ivi(Ivi::new(p).map_err(|e| cfg_err("pool6", e))?),
        };
        if matches!(prefix, PrefixMap::None) && cfg.eamt.is_empty() {
            return Err(cfg_err("pool6", "neither pool6 nor eamt is set: nothing can be translated"));
        }
        let eamt = Eamt::new(&cfg.eamt).map_err(|e| cfg_err("eamt", e))?;
        if cfg.lowest_ipv6_mtu < 1280 {
            return Err(cfg_err(
                "lowest-ipv6-mtu",
                format!("{} is below the IPv6 minimum MTU 1280", cfg.lowest_ipv6_mtu),
            ));
        }
        if cfg.ipv6_mtu < 1280 {
            return Err(cfg_err("ipv6-mtu", format!("{} is below the IPv6 minimum MTU 1280", cfg.ipv6_mtu)));
        }
        if cfg.ipv4_mtu < 68 {
            return Err(cfg_err("ipv4-mtu", format!("{} is below the IPv4 minimum MTU 68", cfg.ipv4_mtu)));
        }
        if cfg.mtu_plateaus.is_empty() {
            return Err(cfg_err("mtu-plateaus", "must not be empty"));
        }
        let map = Mapper { eamt, prefix };
        // The translator's own IPv6 source: ipv4-address through the EAMT or
        // pool6. The well-known prefix refuses non-global IPv4 addresses
        // such as 192.0.0.8 for hosts (RFC 6052 §3.1), but this is the
        // translator's own address, so the plain /96 concatenation is used.
        let wkp_self = match &map.prefix {
            PrefixMap::Rfc6052(p) if p.is_wkp() => {
                Some(Ipv6Addr::from(u128::from(p.prefix().addr()) | u128::from(u32::from(cfg.ipv4_address))))
            }
            _ => None,
        };
        // Else the first address of the RFC 6791 pool, else (an EAMT-only
        // deployment whose EAMT does not hold ipv4-address) the documented
        // default; the daemon offers its TUN device's address first, as
        // Jool falls back to its interface addresses.
        let derived = cfg.ipv6_address.or_else(|| map.v4_to_v6(cfg.ipv4_address)).or(wkp_self);
        let derived = derived.or(cfg.rfc6791_v6.map(|p| p.addr()));
        let (ipv6_address, ipv6_fallback) = match derived {
            Some(a) => (a, false),
            None => (DEFAULT_IPV6_ADDRESS, true),
        };
        let has_prefix = !matches!(map.prefix, PrefixMap::None);
        let hairpin_possible = has_prefix && !map.eamt.is_empty();
        let simple_hairpin = hairpin_possible && cfg.eam_hairpin_mode == EamHairpinMode::Simple;
        let intrinsic_hairpin = hairpin_possible && cfg.eam_hairpin_mode == EamHairpinMode::Intrinsic;
        let mut cfg = cfg;
        cfg.mtu_plateaus.sort_unstable_by(|a, b| b.cmp(a));
        Ok(Translator { map, cfg, ipv6_address, ipv6_fallback, simple_hairpin, intrinsic_hairpin })
    }

    /// RFC 7915 §4.1 Traffic Class: the IPv4 TOS, or 0 with `reset-traffic-class`.
    #[inline]
    pub(crate) fn traffic_class_for(&self, tos: u8) -> u8 {
        if self.cfg.reset_traffic_class {
            0
        } else {
            tos
        }
    }

    /// RFC 7915 §5.1 Type of Service: the IPv6 Traffic Class, or `new-tos`
    /// with `reset-tos`.
    #[inline]
    pub(crate) fn tos_for(&self, traffic_class: u8) -> u8 {
        if self.cfg.reset_tos {
            self.cfg.new_tos
        } else {
            traffic_class
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The address mapper.
    pub fn mapper(&self) -> &Mapper {
        &self.map
    }

    /// Translate one L3 packet (IPv4 or IPv6 header first). Clears `out`
    /// first; on [`Verdict::Emit`] `out` holds the packets to send.
    pub fn translate(&self, pkt: &[u8], out: &mut Out) -> Verdict {
        out.clear();
        match pkt.first().map(|b| b >> 4) {
            Some(4) => self.v4_to_v6(&Stateless, pkt, out, false),
            Some(6) => self.v6_to_v4(&Stateless, pkt, out, Pass::default()),
            _ => Verdict::Drop(DropReason::UnknownVersion),
        }
    }

    /// Translate one L3 packet like [`Translator::translate`], but with
    /// the addresses (outer and, in ICMP errors, quoted) supplied by `map`
    /// instead of the configured pool6/EAMT; everything else (header
    /// fields, ICMP type/code and pointer tables, RFC 4884, MTU and
    /// fragmentation rules, checksums, originated ICMP errors) is RFC 7915
    /// as configured. Transport ports and ICMP identifiers are left as they
    /// are: a stateful caller rewrites them in the emitted packets with
    /// [`crate::checksum::update`]. EAM hairpinning is off unless `M` asks
    /// for it.
    pub fn translate_with<M: AddrMap>(&self, map: &M, pkt: &[u8], out: &mut Out) -> Verdict {
        self.translate_pass(map, pkt, out, Pass::default())
    }

    /// [`Translator::translate_with`] with the per-call switches of
    /// `pass` (a stateful translator's reassembled datagrams and hairpins).
    pub fn translate_pass<M: AddrMap>(&self, map: &M, pkt: &[u8], out: &mut Out, pass: Pass) -> Verdict {
        out.clear();
        match pkt.first().map(|b| b >> 4) {
            Some(4) => self.v4_to_v6(map, pkt, out, pass.hairpin_in),
            Some(6) => self.v6_to_v4(map, pkt, out, pass),
            _ => Verdict::Drop(DropReason::UnknownVersion),
        }
    }

    /// Originate an ICMPv4 error about `invoking` (an IPv4 packet) from
    /// `src` (`None`: `ipv4-address`) back to its source (RFC 792, RFC 1812
    /// §4.3.2: TTL 64, at most 576 bytes), as the translator does for its
    /// own refusals; for a stateful translator's refusals (RFC 6146 §3.5).
    /// Returns false when nothing was emitted. The caller checks that an
    /// error may be sent at all.
    pub fn icmp4_error(
        &self,
        out: &mut Out,
        src: Option<Ipv4Addr>,
        invoking: &[u8],
        kind: u8,
        code: u8,
        rest: [u8; 4],
    ) -> bool {
        crate::origin::icmp4_error(out, src.unwrap_or(self.cfg.ipv4_address), invoking, kind, code, rest)
    }

    /// Originate an ICMPv6 error about `invoking` (an IPv6 packet) from
    /// the translator's IPv6 address (RFC 4443). See [`Self::icmp4_error`].
    pub fn icmp6_error(&self, out: &mut Out, invoking: &[u8], kind: u8, code: u8, rest: [u8; 4]) -> bool {
        crate::origin::icmp6_error(out, self.ipv6_address, invoking, kind, code, rest)
    }

    /// The translator's own IPv6 address (`ipv6-address` or derived).
    pub fn ipv6_address(&self) -> Ipv6Addr {
        self.ipv6_address
    }

    /// True when [`Self::ipv6_address`] is [`DEFAULT_IPV6_ADDRESS`] because
    /// the configuration gives none (no `ipv6-address`, `ipv4-address`
    /// not translatable, no `rfc6791v6-prefix`): a caller with an
    /// interface address of its own may set `ipv6-address` to it.
    pub fn ipv6_address_is_fallback(&self) -> bool {
        self.ipv6_fallback
    }
}
