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
    /// DSTM: the lease server, and the last answer from it.
    lease_server: Mutex<Option<SocketAddrV6>>,
    lease_reply: Mutex<Option<(crate::lease::Msg, u32)>>,
}

impl B4 {
    /// A B4.
    pub fn new(cfg: B4Config) -> Self {
        let nat = cfg.napt.map(|n| Nat44::new(cfg.nat, Box::new(SetPorts::new(n.ipv4, n.map, n.psid))));
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
        *self.lease_server.lock().unwrap_or_else(|e| e.into_inner()) = Some(server);
    }

    /// An IPv6/UDP packet carrying lease message `msg` from our softwire
    /// address to the lease server (to write into the TUN device).
    pub fn lease_packet(&self, msg: &[u8]) -> Option<Vec<u8>> {
        let server = (*self.lease_server.lock().unwrap_or_else(|e| e.into_inner()))?;
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
        self.lease_reply.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// A lease answer from our lease server? (UDP from its address and
    /// port to our softwire address.)
    fn lease_answer(&self, pkt: &[u8]) -> bool {
        let Some(server) = *self.lease_server.lock().unwrap_or_else(|e| e.into_inner()) else { return false };
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
            *self.lease_reply.lock().unwrap_or_else(|e| e.into_inner()) = Some(m);
        }
        true
    }

    /// Expire NAPT mappings and reassembly state.
    pub fn expire(&self, now: u64) -> usize {
        self.ep.expire(now);
        self.nat.as_ref().map_or(0, |n| n.expire(now))
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

    fn on_aftr(&self, r: Received<'_>, now: u64, out: &mut Out) -> Action {
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
