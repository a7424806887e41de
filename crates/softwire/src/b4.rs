//! The client side of a softwire: the DS-Lite B4 (RFC 6333 §5), the lwB4
//! (RFC 7596 §5) and the DSTM client host.
//!
//! IPv4 packets from the LAN or the host itself (routed into the TUN
//! device) are encapsulated towards the AFTR; IPv4-in-IPv6 packets from
//! the AFTR to our B4 address are decapsulated and sent on as IPv4.
//!
//! - DS-Lite B4: no NAT here (the AFTR does it); RFC 6333 §5.7: the B4's
//!   own IPv4 address is 192.0.0.2, the source of its ICMP errors.
//! - lwB4: NAPT44 of the LAN into the binding's IPv4 address and port set
//!   (RFC 7596 §5.1), on the same [`Nat44`] as the AFTR (port
//!   preservation when the inside port is in the set). With
//!   [`Napt::host`] (`[b4] host-ports`) the lwB4 is host-integrated: the
//!   host's own IPv4 stack holds the binding's address and uses the ports
//!   of the set within that range, which the NAPT never allocates; the
//!   host's packets (see [`B4::host_packet`]) pass untranslated, as a
//!   DS-Lite B4's do, and the B4's kernel path can carry them.
//! - DSTM host: the leased whole IPv4 address is on the TUN device, so the
//!   host's own packets already carry it; no NAT.
//!
//! Softwire packets from anything but the configured AFTR are dropped
//! (`unknown-softwire`); ICMPv6 errors about our tunnel packets are relayed
//! to the IPv4 sender (RFC 2473 §8).
//!
//! MSS clamping (`mss-clamp`, on by default): the MSS option of every TCP
//! SYN the B4 carries, either way, is lowered to [`mss_max`] (the tunnel
//! MTU less the outer, IPv4 and TCP headers), so that the LAN's bulk TCP
//! fits the tunnel and is never fragmented (RFC 6333 §5.3 leaves the MTU
//! to the B4; fragmentation stays for what still does not fit).

use crate::aftr::protocol;
use crate::endpoint::{Endpoint, EndpointConfig, Received};
use crate::nat44::{Inside, Nat44, Nat44Config, Outside, Ports, SetPorts};
use crate::pkt::{self, End, Kind};
use crate::portset::PsidMap;
use crate::stats::{bump, Action, Counters, Reason};
use arc_swap::ArcSwap;
use core::net::SocketAddrV6;
use core::net::{Ipv4Addr, Ipv6Addr};
use nat64::config::Protocol;
use std::sync::{Arc, Mutex};
use xlat::checksum;
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::ipv6::{self, Ipv6Header, Ipv6Packet};
use xlat::wire::proto;
use xlat::{Out, PacketKind};

/// lwB4 NAPT parameters: the binding this lwB4 holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Napt {
    /// The binding's IPv4 address.
    pub ipv4: Ipv4Addr,
    /// Its port-set parameters.
    pub map: PsidMap,
    /// Its PSID.
    pub psid: u16,
    /// The host's own ports (`[b4] host-ports`), kept from the NAPT.
    pub host: Option<HostPorts>,
}

/// The host's share of an lwB4's port set: the ports of the set in
/// `first..=last` (`[b4] host-ports = "first-last"`). With the default
/// PSID offset a set is 63 (or 2^a − 1) runs of 2^m ports, so a range of
/// port numbers holds runs of the set and gaps between them; the host's
/// stack is confined to it with `net.ipv4.ip_local_port_range = "first
/// last"` and the gaps in `net.ipv4.ip_local_reserved_ports`
/// ([`Napt::host_reserved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPorts {
    /// The first port (one of the set).
    pub first: u16,
    /// The last port (one of the set).
    pub last: u16,
}

impl Napt {
    /// True when `port` is one of the host's: in [`Napt::host`]'s range
    /// and in the binding's port set.
    pub fn host_owns(&self, port: u16) -> bool {
        self.host.is_some_and(|h| (h.first..=h.last).contains(&port) && self.map.allowed(port, self.psid))
    }

    /// The runs of the set within [`Napt::host`]'s range, clipped to it,
    /// in increasing order (none without a host range).
    fn host_runs(&self) -> impl Iterator<Item = (u16, u16)> + '_ {
        let (first, last) = self.host.map_or((1, 0), |h| (h.first, h.last));
        self.map.ranges(self.psid).map(move |(lo, hi)| (lo.max(first), hi.min(last))).filter(|(lo, hi)| lo <= hi)
    }

    /// The host's ports, in increasing order.
    pub fn host_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.host_runs().flat_map(|(lo, hi)| lo..=hi)
    }

    /// `net.ipv4.ip_local_reserved_ports` for the host: the ports in
    /// [`Napt::host`]'s range that are not the set's, as comma-separated
    /// ranges ("" when there are none, or no host range).
    pub fn host_reserved(&self) -> String {
        let Some(h) = self.host else { return String::new() };
        let mut gaps = Vec::new();
        let mut next = u32::from(h.first);
        for (lo, hi) in self.host_runs() {
            if u32::from(lo) > next {
                gaps.push(span(next, u32::from(lo) - 1));
            }
            next = u32::from(hi) + 1;
        }
        if next <= u32::from(h.last) {
            gaps.push(span(next, u32::from(h.last)));
        }
        gaps.join(",")
    }
}

fn span(lo: u32, hi: u32) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    }
}

/// The lwB4 NAPT's ports: the binding's set less the host's (held from
/// the start, never given out, never released).
#[derive(Debug)]
struct LanPorts {
    set: SetPorts,
    napt: Napt,
    host: u64,
}

impl LanPorts {
    fn new(napt: Napt) -> Self {
        let set = SetPorts::new(napt.ipv4, napt.map, napt.psid);
        let mut host = 0;
        for port in napt.host_ports() {
            for p in [Protocol::Tcp, Protocol::Udp, Protocol::Icmp] {
                // Port preservation: a free port of the set is given as it is.
                let got = set.alloc(p, &Ipv6Addr::UNSPECIFIED, port, Ipv4Addr::UNSPECIFIED);
                debug_assert_eq!(got, Some((napt.ipv4, port)));
            }
            host += 1;
        }
        LanPorts { set, napt, host }
    }
}

impl Ports for LanPorts {
    fn alloc(&self, p: Protocol, sub: &Ipv6Addr, port: u16, dst: Ipv4Addr) -> Option<(Ipv4Addr, u16)> {
        self.set.alloc(p, sub, port, dst)
    }
    fn release(&self, p: Protocol, a: Ipv4Addr, port: u16) {
        if !self.napt.host_owns(port) {
            self.set.release(p, a, port)
        }
    }
    fn contains(&self, a: Ipv4Addr) -> bool {
        self.set.contains(a)
    }
    fn usage(&self, p: Protocol) -> (u64, u64) {
        let (size, used) = self.set.usage(p);
        (size - self.host, used - self.host)
    }
}

/// The B4's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct B4Config {
    /// Our end-point (`local` is the B4 address).
    pub endpoint: EndpointConfig,
    /// The AFTR's end-point address.
    pub aftr: Ipv6Addr,
    /// lwB4: translate the LAN into this binding.
    pub napt: Option<Napt>,
    /// The NAPT's timers and limits.
    pub nat: Nat44Config,
    /// Lower the MSS option of TCP SYNs both ways to [`mss_max`].
    pub mss_clamp: bool,
}

/// The largest TCP MSS whose segments fit the tunnel of `e` unfragmented:
/// the tunnel MTU less the outer header (40 bytes, 48 with the Tunnel
/// Encapsulation Limit option), a 20-byte IPv4 and a 20-byte TCP header
/// (what the MSS option counts, RFC 9293 §3.7.1).
pub fn mss_max(e: &EndpointConfig) -> u16 {
    let outer = if e.encap_limit.is_some() { 48 } else { 40 };
    e.mtu.saturating_sub(outer + 40)
}

/// What [`clamp_mss`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mss {
    /// Not a whole TCP segment with SYN set, or no MSS option: untouched.
    NotApplicable,
    /// The MSS option was at most the clamp: untouched.
    Fits,
    /// The MSS option was lowered to the clamp, the checksum updated.
    Clamped,
    /// A SYN whose TCP header or options do not parse: untouched.
    Unparsed,
}

/// The MSS option of the TCP SYN in IPv4 packet `pkt` (its header already
/// checked), lowered to `max` when it is larger, the TCP checksum updated
/// incrementally (RFC 1624). Only whole segments (not fragments); the
/// options are walked as RFC 9293 §3.2 lays them out (end of list,
/// no-operation, kind-length-value), the first MSS option (kind 2,
/// length 4) is the one; a length below 2 or past the header, an MSS
/// option of another length, or a data offset outside the packet leaves
/// the packet untouched ([`Mss::Unparsed`]). The B4's kernel path
/// (bpf/b4.bpf.c) does the same, byte for byte.
pub fn clamp_mss(pkt: &mut [u8], max: u16) -> Mss {
    let Some(&vihl) = pkt.first() else { return Mss::NotApplicable };
    let ihl = usize::from(vihl & 0x0f) * 4;
    let len = pkt.len();
    if len < 20 || pkt[9] != proto::TCP || u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0 || len < ihl + 20 {
        return Mss::NotApplicable;
    }
    let tcp = &mut pkt[ihl..];
    if tcp[13] & 0x02 == 0 {
        return Mss::NotApplicable;
    }
    let optend = usize::from(tcp[12] >> 4) * 4;
    if optend < 20 || optend > tcp.len() {
        return Mss::Unparsed;
    }
    let mut pos = 20;
    while pos < optend {
        match tcp[pos] {
            0 => return Mss::NotApplicable,
            1 => pos += 1,
            kind => {
                if pos + 2 > optend {
                    return Mss::Unparsed;
                }
                let l = usize::from(tcp[pos + 1]);
                if l < 2 || pos + l > optend {
                    return Mss::Unparsed;
                }
                if kind == 2 {
                    if l != 4 {
                        return Mss::Unparsed;
                    }
                    let old = u16::from_be_bytes([tcp[pos + 2], tcp[pos + 3]]);
                    if old <= max {
                        return Mss::Fits;
                    }
                    tcp[pos + 2..pos + 4].copy_from_slice(&max.to_be_bytes());
                    let c = u16::from_be_bytes([tcp[16], tcp[17]]);
                    let c = checksum::update(c, u64::from(old), u64::from(max));
                    tcp[16..18].copy_from_slice(&c.to_be_bytes());
                    return Mss::Clamped;
                }
                pos += l;
            }
        }
    }
    Mss::NotApplicable
}

/// A B4.
#[derive(Debug)]
pub struct B4 {
    cfg: B4Config,
    ep: Endpoint,
    aftr: ArcSwap<Ipv6Addr>,
    nat: Option<Nat44>,
    c: Counters,
    /// DSTM: the lease server, and the last answer from it.
    lease_server: Mutex<Option<SocketAddrV6>>,
    lease_reply: Mutex<Option<(crate::lease::Msg, u32)>>,
}

impl B4 {
    /// A B4.
    pub fn new(cfg: B4Config) -> Self {
        let nat = cfg.napt.map(|n| Nat44::new(cfg.nat, Box::new(LanPorts::new(n))));
        B4 {
            ep: Endpoint::new(cfg.endpoint),
            aftr: ArcSwap::from_pointee(cfg.aftr),
            nat,
            c: Counters::default(),
            lease_server: Mutex::new(None),
            lease_reply: Mutex::new(None),
            cfg,
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.c
    }

    /// The NAPT (lwB4).
    pub fn nat(&self) -> Option<&Nat44> {
        self.nat.as_ref()
    }

    /// The AFTR in use.
    pub fn aftr(&self) -> Ipv6Addr {
        **self.aftr.load()
    }

    /// Use another AFTR (a DSTM lease names its tunnel end-point).
    pub fn set_aftr(&self, a: Ipv6Addr) {
        self.aftr.store(Arc::new(a));
    }

    /// DSTM: talk to the lease server at `server` from our softwire
    /// address (the B4 address is routed into the TUN device, not local, so
    /// lease messages go through the engine: [`B4::lease_packet`] builds
    /// them, [`B4::take_lease_reply`] returns the answers).
    pub fn set_lease_server(&self, server: SocketAddrV6) {
        *function::lock(&self.lease_server) = Some(server);
    }

    /// An IPv6/UDP packet carrying lease message `msg` from our softwire
    /// address to the lease server (to write into the TUN device).
    pub fn lease_packet(&self, msg: &[u8]) -> Option<Vec<u8>> {
        let server = (*function::lock(&self.lease_server))?;
        let src = self.cfg.endpoint.local;
        let dst = *server.ip();
        let ulen = 8 + msg.len();
        let mut p = vec![0u8; ipv6::HEADER_LEN + ulen];
        Ipv6Header {
            traffic_class: 0,
            flow_label: 0,
            payload_len: ulen as u16,
            next_header: proto::UDP,
            hop_limit: 64,
            src,
            dst,
        }
        .emit(&mut p);
        let u = &mut p[ipv6::HEADER_LEN..];
        u[0..2].copy_from_slice(&server.port().to_be_bytes());
        u[2..4].copy_from_slice(&server.port().to_be_bytes());
        u[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
        u[8..].copy_from_slice(msg);
        let c = checksum::finish(checksum::pseudo_v6(&src, &dst, proto::UDP, ulen as u32) + checksum::sum(u));
        u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        Some(p)
    }

    /// The last lease answer received, if any (taken).
    pub fn take_lease_reply(&self) -> Option<(crate::lease::Msg, u32)> {
        function::lock(&self.lease_reply).take()
    }

    /// A lease answer from our lease server? (UDP from its address and
    /// port to our softwire address.)
    fn lease_answer(&self, pkt: &[u8]) -> bool {
        let Some(server) = *function::lock(&self.lease_server) else { return false };
        let Ok(ip) = Ipv6Packet::new(pkt) else { return false };
        if ip.next_header() != proto::UDP || ip.src() != *server.ip() || ip.dst() != self.cfg.endpoint.local {
            return false;
        }
        let u = &ip.as_bytes()[ipv6::HEADER_LEN..];
        if u.len() < 8 || u16::from_be_bytes([u[0], u[1]]) != server.port() {
            return false;
        }
        let sum = checksum::pseudo_v6(&ip.src(), &ip.dst(), proto::UDP, u.len() as u32) + checksum::sum(u);
        if let Some(m) = crate::lease::decode(&u[8..]).filter(|_| checksum::verifies(sum)) {
            *function::lock(&self.lease_reply) = Some(m);
        }
        true
    }

    /// Expire NAPT mappings and reassembly state.
    pub fn expire(&self, now: u64) -> usize {
        self.ep.expire(now);
        self.nat.as_ref().map_or(0, |n| n.expire(now))
    }

    /// The host-integrated lwB4 ([`Napt::host`]): is IPv4 packet `p`
    /// (its header checked) the host's own, to pass untranslated? The
    /// binding's address (`egress`: the source, else the destination), not
    /// a fragment, and a TCP header (20 bytes), a UDP header (8) or an ICMP
    /// echo request or reply (8) whose port (`egress`: the source port,
    /// else the destination port; echo: the identifier) is the host's
    /// ([`Napt::host_owns`]). The kernel path (bpf/b4.bpf.c, `not_host`)
    /// decides the same, byte for byte; what it leaves (ICMP errors about
    /// the host's packets, [`B4::process`] relays them untranslated too)
    /// reaches the engine.
    pub fn host_packet(&self, p: &Ipv4Packet<'_>, egress: bool) -> bool {
        let Some(n) = self.cfg.napt.filter(|n| n.host.is_some()) else { return false };
        if (if egress { p.src() } else { p.dst() }) != n.ipv4 || p.is_fragment() {
            return false;
        }
        let l4 = p.payload();
        let at = |i: usize| l4.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let port = match p.protocol() {
            proto::TCP if l4.len() >= 20 => at(if egress { 0 } else { 2 }),
            proto::UDP if l4.len() >= 8 => at(if egress { 0 } else { 2 }),
            // Echo reply (0) and request (8): the identifier.
            proto::ICMP if l4.len() >= 8 && matches!(l4[0], 0 | 8) => at(4),
            _ => None,
        };
        port.is_some_and(|x| n.host_owns(x))
    }

    /// An ICMP error about one of the host's packets (egress: from the
    /// host's address about a packet to one of its ports; else to the
    /// host's address about a packet from one of them): relayed untranslated.
    fn host_error(&self, p: &Ipv4Packet<'_>, f: &pkt::Flow, egress: bool) -> bool {
        let (Some(n), Kind::IcmpError { quoted }) = (self.cfg.napt, f.kind) else { return false };
        if egress {
            p.src() == n.ipv4 && quoted.dst == n.ipv4 && n.host_owns(quoted.dport)
        } else {
            p.dst() == n.ipv4 && quoted.src == n.ipv4 && n.host_owns(quoted.sport)
        }
    }

    /// Might IPv4 packet `pkt` be a TCP SYN to clamp? (A cheap look
    /// before copying it: TCP, the SYN flag.)
    fn may_clamp(&self, pkt: &[u8]) -> bool {
        let ihl = usize::from(pkt.first().map_or(0, |b| b & 0x0f)) * 4;
        self.cfg.mss_clamp && pkt.len() > ihl + 13 && pkt[9] == proto::TCP && pkt[ihl + 13] & 0x02 != 0
    }

    /// [`clamp_mss`] when `mss-clamp` is on, counted.
    fn clamp(&self, pkt: &mut [u8]) {
        if !self.cfg.mss_clamp {
            return;
        }
        match clamp_mss(pkt, mss_max(&self.cfg.endpoint)) {
            Mss::Clamped => bump(&self.c.mss_clamped),
            Mss::Unparsed => bump(&self.c.mss_unparsed),
            Mss::NotApplicable | Mss::Fits => {}
        }
    }

    /// `f` of `pkt` as it leaves the B4 unchanged otherwise (no NAPT):
    /// a TCP SYN to clamp is copied into the scratch buffer and clamped
    /// first, anything else handed over as it is.
    fn clamped<R>(&self, pkt: &[u8], out: &mut Out, f: impl FnOnce(&[u8], &mut Out) -> R) -> R {
        if !self.may_clamp(pkt) {
            return f(pkt, out);
        }
        let mut buf = out.take_scratch();
        buf.clear();
        buf.extend_from_slice(pkt);
        self.clamp(&mut buf);
        let r = f(&buf, out);
        out.put_scratch(buf);
        r
    }

    /// Handle one packet from the TUN device.
    pub fn process(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        self.c.dispatch(
            pkt,
            out,
            |out| {
                if self.lease_answer(pkt) {
                    return Action::Emit;
                }
                self.ep.receive(pkt, now, out, &self.c, |r, out| self.on_aftr(r, now, out))
            },
            |out| self.on_lan(pkt, now, out),
        )
    }

    fn on_lan(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        let Ok(p) = Ipv4Packet::new(pkt) else { return Action::Drop(Reason::Malformed) };
        if !p.checksum_ok() {
            return Action::Drop(Reason::Malformed);
        }
        let aftr = self.aftr();
        let send = |out: &mut Out| self.clamped(p.as_bytes(), out, |pkt, out| self.ep.send(pkt, aftr, out, &self.c));
        let Some(nat) = &self.nat else { return send(out) };
        if self.host_packet(&p, true) {
            return send(out);
        }
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
        if self.host_error(&p, &f, true) {
            return send(out);
        }
        let sub = self.cfg.endpoint.local;
        let mut buf = out.take_scratch();
        buf.clear();
        buf.extend_from_slice(p.as_bytes());
        let r = match f.kind {
            Kind::Fragment => Err(Reason::UnsupportedProtocol),
            Kind::IcmpError { quoted } => protocol(quoted.proto)
                .and_then(|pr| nat.lookup_in(&Inside { sub, proto: pr, addr: quoted.dst, port: quoted.dport }))
                .map(|o| pkt::rewrite_icmp_error(&mut buf, End::Src, o.addr, End::Dst, o.addr, o.port))
                .ok_or(Reason::NoMapping),
            _ => match protocol(f.ends.proto) {
                None => Err(Reason::UnsupportedProtocol),
                Some(pr) => {
                    let flags = match f.kind {
                        Kind::Transport { flags } if pr == Protocol::Tcp => Some(flags),
                        _ => None,
                    };
                    let k = Inside { sub, proto: pr, addr: f.ends.src, port: f.ends.sport };
                    nat.outbound(k, f.ends.dst, flags, now)
                        .map(|o| pkt::rewrite(&mut buf, End::Src, o.addr, Some(o.port)))
                }
            },
        };
        let a = match r {
            Ok(()) => {
                self.clamp(&mut buf);
                self.ep.send(&buf, aftr, out, &self.c)
            }
            Err(reason) => Action::Drop(reason),
        };
        out.put_scratch(buf);
        a
    }

    fn on_aftr(&self, r: Received<'_>, now: u64, out: &mut Out) -> Action {
        if r.remote != self.aftr() {
            return Action::Drop(Reason::UnknownSoftwire);
        }
        let forward = |out: &mut Out| {
            if !self.clamped(r.inner, out, |pkt, out| out.push(PacketKind::Forward, pkt)) {
                return Action::Drop(Reason::TooBig);
            }
            bump(&self.c.decapsulated);
            Action::Emit
        };
        let Some(nat) = &self.nat else { return forward(out) };
        let Ok(p) = Ipv4Packet::new(r.inner) else { return Action::Drop(Reason::Malformed) };
        if self.host_packet(&p, false) {
            return forward(out);
        }
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
        if self.host_error(&p, &f, false) {
            return forward(out);
        }
        let mut buf = out.take_scratch();
        buf.clear();
        buf.extend_from_slice(r.inner);
        let res = match f.kind {
            Kind::Fragment => Err(Reason::UnsupportedProtocol),
            Kind::IcmpError { quoted } => protocol(quoted.proto)
                .and_then(|pr| nat.lookup_out(&Outside { proto: pr, addr: quoted.src, port: quoted.sport }))
                .map(|k| pkt::rewrite_icmp_error(&mut buf, End::Dst, k.addr, End::Src, k.addr, k.port))
                .ok_or(Reason::NoMapping),
            _ => match protocol(f.ends.proto) {
                None => Err(Reason::UnsupportedProtocol),
                Some(pr) => {
                    let flags = match f.kind {
                        Kind::Transport { flags } if pr == Protocol::Tcp => Some(flags),
                        _ => None,
                    };
                    nat.inbound(Outside { proto: pr, addr: f.ends.dst, port: f.ends.dport }, flags, now)
                        .map(|k| pkt::rewrite(&mut buf, End::Dst, k.addr, Some(k.port)))
                }
            },
        };
        if res.is_ok() {
            self.clamp(&mut buf);
        }
        let a = match res {
            Ok(()) if out.push(PacketKind::Forward, &buf) => {
                bump(&self.c.decapsulated);
                Action::Emit
            }
            Ok(()) => Action::Drop(Reason::TooBig),
            Err(reason) => Action::Drop(reason),
        };
        out.put_scratch(buf);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    /// A TCP segment with real checksums: `flags` 0x02 SYN, 0x12 SYN-ACK,
    /// 0x10 ACK; `opts` a multiple of 4 bytes.
    fn tcp(flags: u8, opts: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        let b = PacketBuilder::ipv4([192, 0, 0, 2], [198, 51, 100, 1], 64).tcp(40000, 80, 7, 1000);
        let b = if flags & 0x02 != 0 { b.syn() } else { b };
        let b = if flags & 0x10 != 0 { b.ack(9) } else { b };
        b.options_raw(opts).unwrap().write(&mut v, b"").unwrap();
        v
    }

    fn tcp_checksum_ok(p: &[u8]) -> bool {
        let ip = Ipv4Packet::new(p).unwrap();
        let t = &p[20..];
        checksum::verifies(checksum::pseudo_v4(ip.src(), ip.dst(), proto::TCP, t.len() as u16) + checksum::sum(t))
    }

    fn mss_of(p: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([p[20 + at], p[21 + at]])
    }

    fn host_napt(first: u16, last: u16) -> Napt {
        // PSID 1 of length 6 at offset 6: ports A·1024 + 16 ... A·1024 + 31.
        Napt {
            ipv4: Ipv4Addr::new(192, 0, 2, 1),
            map: PsidMap::new(6, 6).unwrap(),
            psid: 1,
            host: Some(HostPorts { first, last }),
        }
    }

    #[test]
    fn host_ports_and_the_sysctl_that_confines_the_host() {
        let n = host_napt(48 * 1024 + 16, 50 * 1024 + 31);
        let ports: Vec<u16> = n.host_ports().collect();
        assert_eq!(ports.len(), 48);
        assert_eq!((ports[0], ports[15], ports[16], ports[47]), (49168, 49183, 50192, 51231));
        assert!(ports.iter().all(|&p| n.host_owns(p)));
        assert!(!n.host_owns(49167) && !n.host_owns(49184) && !n.host_owns(51232));
        assert!(!n.host_owns(47 * 1024 + 16), "the set's, not the host's");
        assert_eq!(n.host_reserved(), "49184-50191,50208-51215");
        // A range ending in a gap, and one run of one port.
        let n = host_napt(48 * 1024 + 16, 48 * 1024 + 16);
        assert_eq!((n.host_ports().count(), n.host_reserved()), (1, String::new()));
        let n = Napt { host: None, ..n };
        assert_eq!((n.host_ports().count(), n.host_reserved(), n.host_owns(49168)), (0, String::new(), false));
    }

    #[test]
    fn the_napt_never_gives_out_the_hosts_ports() {
        let n = host_napt(48 * 1024 + 16, 63 * 1024 + 31);
        let host = n.host_ports().count() as u64;
        let p = LanPorts::new(n);
        let size = u64::from(n.map.set_size());
        assert_eq!(p.usage(Protocol::Udp), (size - host, 0));
        let mut got = Vec::new();
        // Every inside port asked for, host ports first (port preservation would keep them).
        for port in n.host_ports().chain(0..=u16::MAX) {
            match p.alloc(Protocol::Udp, &Ipv6Addr::LOCALHOST, port, Ipv4Addr::new(198, 51, 100, 1)) {
                Some((_, x)) => got.push(x),
                None => break,
            }
        }
        assert_eq!(got.len() as u64, size - host, "the NAPT's share, no more");
        assert!(got.iter().all(|&x| n.map.allowed(x, 1) && !n.host_owns(x)));
        assert_eq!(p.usage(Protocol::Udp), (size - host, size - host));
        // Giving back a host port frees nothing for the NAPT.
        p.release(Protocol::Udp, n.ipv4, 49168);
        assert_eq!(p.alloc(Protocol::Udp, &Ipv6Addr::LOCALHOST, 49168, Ipv4Addr::LOCALHOST), None);
        p.release(Protocol::Udp, n.ipv4, got[0]);
        assert_eq!(p.alloc(Protocol::Udp, &Ipv6Addr::LOCALHOST, 49168, Ipv4Addr::LOCALHOST), Some((n.ipv4, got[0])));
    }

    #[test]
    fn the_hosts_packets_pass_untranslated_and_the_lans_are_translated() {
        let endpoint = EndpointConfig::new("2001:db8:1::2".parse().unwrap(), Ipv4Addr::new(192, 0, 0, 2));
        let aftr: Ipv6Addr = "2001:db8:ffff::1".parse().unwrap();
        let napt = host_napt(48 * 1024 + 16, 63 * 1024 + 31);
        let b = B4::new(B4Config { endpoint, aftr, napt: Some(napt), nat: Nat44Config::default(), mss_clamp: true });
        let mut out = Out::new();
        let udp = |src: [u8; 4], sport: u16| {
            let mut v = Vec::new();
            PacketBuilder::ipv4(src, [198, 51, 100, 1], 64).udp(sport, 53).write(&mut v, b"q").unwrap();
            v
        };
        let host = udp([192, 0, 2, 1], 49168);
        assert_eq!(b.process(&host, 0, &mut out), Action::Emit);
        assert_eq!(&out.get(0).unwrap().1[40..], &host[..], "the host's: untranslated");
        assert_eq!(b.nat().unwrap().len(), 0, "no mapping");
        for (src, sport) in [([192, 0, 2, 1], 47 * 1024 + 16), ([192, 168, 1, 2], 49168)] {
            assert_eq!(b.process(&udp(src, sport), 0, &mut out), Action::Emit);
            let p = &out.get(0).unwrap().1[40..];
            let mapped = u16::from_be_bytes([p[20], p[21]]);
            assert_eq!(&p[12..16], &[192, 0, 2, 1]);
            assert!(napt.map.allowed(mapped, 1) && !napt.host_owns(mapped), "{src:?}:{sport} -> {mapped}");
        }
        assert_eq!(b.nat().unwrap().len(), 2);
    }

    #[test]
    fn mss_max_is_the_tunnel_mtu_less_the_headers() {
        let mut e = EndpointConfig::new(Ipv6Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
        assert_eq!(mss_max(&e), 1500 - 40 - 20 - 20);
        e.encap_limit = Some(4);
        assert_eq!(mss_max(&e), 1500 - 48 - 20 - 20);
        e.mtu = 1280;
        assert_eq!(mss_max(&e), 1280 - 88);
    }

    #[test]
    fn a_syn_over_the_clamp_is_lowered_and_its_checksum_stays_valid() {
        for (flags, opts, at) in [
            (0x02, vec![2, 4, 0x23, 0x28], 22),                         // MSS 9000 alone
            (0x12, vec![2, 4, 0x05, 0xb4, 1, 3, 3, 7], 22),             // SYN-ACK, options after MSS
            (0x02, vec![1, 1, 4, 2, 1, 3, 3, 7, 2, 4, 0xff, 0xff], 30), // MSS after others
            (0x02, vec![2, 4, 0x05, 0x8d, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0], 22), // 1421
        ] {
            let before = tcp(flags, &opts);
            assert!(tcp_checksum_ok(&before));
            let mut p = before.clone();
            assert_eq!(clamp_mss(&mut p, 1420), Mss::Clamped, "{opts:?}");
            assert_eq!(mss_of(&p, at), 1420);
            assert!(tcp_checksum_ok(&p), "checksum updated: {opts:?}");
            // Only the MSS value and the checksum changed.
            let changed: Vec<usize> = (0..p.len()).filter(|&i| p[i] != before[i]).collect();
            assert!(changed.iter().all(|&i| [36, 37, 20 + at, 21 + at].contains(&i)), "{changed:?}");
            assert_eq!(clamp_mss(&mut p, 1420), Mss::Fits, "idempotent");
        }
    }

    #[test]
    fn what_the_clamp_leaves_alone() {
        let untouched = |p: Vec<u8>, want: Mss| {
            let mut q = p.clone();
            assert_eq!(clamp_mss(&mut q, 1420), want, "{p:?}");
            assert_eq!(q, p);
        };
        untouched(tcp(0x02, &[2, 4, 0x05, 0x8c]), Mss::Fits); // exactly 1420
        untouched(tcp(0x02, &[2, 4, 0x02, 0x18]), Mss::Fits); // 536
        untouched(tcp(0x02, &[1, 1, 4, 2]), Mss::NotApplicable); // no MSS option
        untouched(tcp(0x02, &[]), Mss::NotApplicable);
        untouched(tcp(0x10, &[2, 4, 0x23, 0x28]), Mss::NotApplicable); // not a SYN
        untouched(tcp(0x02, &[0, 0, 0, 0, 2, 4, 0x23, 0x28]), Mss::NotApplicable); // after the end of list
                                                                                   // Bad option lengths, an MSS option of another length, data offsets.
        untouched(tcp(0x02, &[3, 0, 0, 0, 2, 4, 0x23, 0x28]), Mss::Unparsed);
        untouched(tcp(0x02, &[3, 1, 0, 0, 2, 4, 0x23, 0x28]), Mss::Unparsed);
        untouched(tcp(0x02, &[1, 1, 1, 8, 2, 4, 0x23, 0x28]), Mss::Unparsed);
        untouched(tcp(0x02, &[2, 3, 0x23, 0x28]), Mss::Unparsed);
        untouched(tcp(0x02, &[1, 1, 1, 2]), Mss::Unparsed); // kind 2 at the last byte
        let mut p = tcp(0x02, &[2, 4, 0x23, 0x28]);
        p[32] = 0x70; // data offset 28 bytes, 24 there
        untouched(p.clone(), Mss::Unparsed);
        p[32] = 0x40; // below 20
        untouched(p, Mss::Unparsed);
        // Not whole: a fragment; not TCP; too short for a TCP header.
        let mut p = tcp(0x02, &[2, 4, 0x23, 0x28]);
        p[6] = 0x20;
        untouched(p, Mss::NotApplicable);
        let mut p = tcp(0x02, &[2, 4, 0x23, 0x28]);
        p[9] = proto::UDP;
        untouched(p, Mss::NotApplicable);
        untouched(tcp(0x02, &[])[..30].to_vec(), Mss::NotApplicable);
        untouched(vec![], Mss::NotApplicable);
    }

    #[test]
    fn the_b4_clamps_both_ways_and_counts() {
        let endpoint = EndpointConfig::new("2001:db8:1::2".parse().unwrap(), Ipv4Addr::new(192, 0, 0, 2));
        let aftr: Ipv6Addr = "2001:db8:ffff::1".parse().unwrap();
        let cfg = |mss_clamp| B4Config { endpoint, aftr, napt: None, nat: Nat44Config::default(), mss_clamp };
        let syn = tcp(0x02, &[2, 4, 0x23, 0x28]);
        let mut out = Out::new();
        for on in [true, false] {
            let b = B4::new(cfg(on));
            assert_eq!(b.process(&syn, 0, &mut out), Action::Emit);
            let (_, p) = out.get(0).unwrap();
            assert_eq!(mss_of(&p[40..], 22), if on { 1420 } else { 9000 });
            // The SYN-ACK back through the softwire.
            let mut back = tcp(0x12, &[2, 4, 0x23, 0x28]);
            back[12..16].copy_from_slice(&[198, 51, 100, 1]);
            back[16..20].copy_from_slice(&[192, 0, 0, 2]);
            let mut sa = vec![0u8; ipv6::HEADER_LEN];
            Ipv6Header {
                traffic_class: 0,
                flow_label: 0,
                payload_len: back.len() as u16,
                next_header: 4,
                hop_limit: 64,
                src: aftr,
                dst: endpoint.local,
            }
            .emit(&mut sa);
            sa.extend_from_slice(&back);
            assert_eq!(b.process(&sa, 0, &mut out), Action::Emit);
            let (_, p) = out.get(0).unwrap();
            assert_eq!(mss_of(p, 22), if on { 1420 } else { 9000 });
            let bad = tcp(0x02, &[3, 0, 0, 0]);
            assert_eq!(b.process(&bad, 0, &mut out), Action::Emit);
            assert_eq!(&out.get(0).unwrap().1[40..], &bad[..], "sent on untouched");
            let c = b.counters().snapshot();
            assert_eq!((c.mss_clamped, c.mss_unparsed), if on { (2, 1) } else { (0, 0) });
        }
    }
}
