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
//!   preservation when the inside port is in the set).
//! - DSTM host: the leased whole IPv4 address is on the TUN device, so the
//!   host's own packets already carry it; no NAT.
//!
//! Softwire packets from anything but the configured AFTR are dropped
//! (`unknown-softwire`); ICMPv6 errors about our tunnel packets are relayed
//! to the IPv4 sender (RFC 2473 §8).

use crate::aftr::protocol;
use crate::endpoint::{Endpoint, EndpointConfig, Received};
use crate::nat44::{Inside, Nat44, Nat44Config, Outside, SetPorts};
use crate::pkt::{self, End, Kind};
use crate::portset::PsidMap;
use crate::stats::{bump, Action, Counters, Reason};
use arc_swap::ArcSwap;
use core::net::{Ipv4Addr, Ipv6Addr};
use nat64::config::Protocol;
use std::sync::Arc;
use xlat::wire::ipv4::Ipv4Packet;
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
}

/// A B4.
#[derive(Debug)]
pub struct B4 {
    cfg: B4Config,
    ep: Endpoint,
    aftr: ArcSwap<Ipv6Addr>,
    nat: Option<Nat44>,
    c: Counters,
}

impl B4 {
    /// A B4.
    pub fn new(cfg: B4Config) -> Self {
        let nat = cfg.napt.map(|n| Nat44::new(cfg.nat, Box::new(SetPorts::new(n.ipv4, n.map, n.psid))));
        B4 { ep: Endpoint::new(cfg.endpoint), aftr: ArcSwap::from_pointee(cfg.aftr), nat, c: Counters::default(), cfg }
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

    /// Expire NAPT mappings and reassembly state.
    pub fn expire(&self, now: u64) -> usize {
        self.ep.expire(now);
        self.nat.as_ref().map_or(0, |n| n.expire(now))
    }

    /// Handle one packet from the TUN device.
    pub fn process(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        out.clear();
        let a = match pkt.first().map(|b| b >> 4) {
            Some(6) => {
                bump(&self.c.in6);
                self.ep.receive(pkt, now, out, &self.c, |r, out| self.from_aftr(r, now, out))
            }
            Some(4) => {
                bump(&self.c.in4);
                self.from_lan(pkt, now, out)
            }
            _ => Action::Drop(Reason::Malformed),
        };
        self.c.account(a)
    }

    fn from_lan(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        let Ok(p) = Ipv4Packet::new(pkt) else { return Action::Drop(Reason::Malformed) };
        if !p.checksum_ok() {
            return Action::Drop(Reason::Malformed);
        }
        let aftr = self.aftr();
        let Some(nat) = &self.nat else { return self.ep.send(p.as_bytes(), aftr, out, &self.c) };
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
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
            Ok(()) => self.ep.send(&buf, aftr, out, &self.c),
            Err(reason) => Action::Drop(reason),
        };
        out.put_scratch(buf);
        a
    }

    fn from_aftr(&self, r: Received<'_>, now: u64, out: &mut Out) -> Action {
        if r.remote != self.aftr() {
            return Action::Drop(Reason::UnknownSoftwire);
        }
        let Some(nat) = &self.nat else {
            if !out.push(PacketKind::Forward, r.inner) {
                return Action::Drop(Reason::TooBig);
            }
            bump(&self.c.decapsulated);
            return Action::Emit;
        };
        let Ok(p) = Ipv4Packet::new(r.inner) else { return Action::Drop(Reason::Malformed) };
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
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
