//! The DS-Lite AFTR (RFC 6333 §6): IPv4-in-IPv6 softwires from B4s in the
//! configured prefixes, terminated on one end-point address, and a
//! carrier-grade NAT44 whose subscriber key is the softwire's IPv6 source
//! plus the inner 5-tuple (RFC 6333 §6.6), so that every B4 may use the
//! same private addresses.
//!
//! - From a softwire: the B4 must be in `b4-prefixes` (else `unknown-
//!   softwire`, optionally answered with ICMPv6 1/5); inner fragments are
//!   reassembled (the ports are in the first); the inner source is mapped
//!   ([`Nat44::outbound`]) and the packet leaves as IPv4. A destination
//!   that is itself a pool transport address is hairpinned (RFC 6888
//!   REQ-9): both ends are translated and the packet goes back into the
//!   other subscriber's softwire. ICMP errors from inside are translated
//!   through the mapping of the packet they quote.
//! - From the IPv4 side: packets to a pool transport address with a
//!   mapping are translated back and encapsulated towards the B4 (RFC 6333
//!   §5.3 MTU handling by the end-point); ICMP errors follow the mapping of
//!   the packet they quote. Anything else is `no-mapping`.
//! - ICMPv6 errors about softwire packets are relayed to the IPv4 source
//!   (RFC 2473 §8).

use crate::endpoint::{Endpoint, EndpointConfig, Received};
use crate::nat44::{Inside, Nat44, Nat44Config, Outside, Ports, Seen};
use crate::pkt::{self, End, Kind};
use crate::stats::{bump, Action, Counters, Reason};
use core::net::Ipv6Addr;
use nat64::config::Protocol;
use nat64::frag::{Fed, Reassembler};
use xlat::addr::Prefix6;
use xlat::origin;
use xlat::wire::icmp;
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::proto;
use xlat::{Out, PacketKind};

/// The AFTR's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AftrConfig {
    /// The softwire end-point.
    pub endpoint: EndpointConfig,
    /// Prefixes B4 addresses may come from.
    pub b4_prefixes: Vec<Prefix6>,
    /// The NAT's limits and timers.
    pub nat: Nat44Config,
    /// Hairpin traffic between subscribers.
    pub hairpinning: bool,
    /// Answer softwires from unknown prefixes with ICMPv6 1/5, and flows
    /// the NAT refuses (quota, table, pool) with ICMPv4 3/13 through the
    /// softwire (`[dslite] icmp-errors`).
    pub icmpv6_errors: bool,
}

/// The protocol of a NAT44 mapping.
pub(crate) fn protocol(p: u8) -> Option<Protocol> {
    match p {
        proto::TCP => Some(Protocol::Tcp),
        proto::UDP => Some(Protocol::Udp),
        proto::ICMP => Some(Protocol::Icmp),
        _ => None,
    }
}

/// The AFTR.
#[derive(Debug)]
pub struct Aftr {
    cfg: AftrConfig,
    ep: Endpoint,
    nat: Nat44,
    reasm4: Reassembler,
    c: Counters,
}

impl Aftr {
    /// An AFTR whose NAT takes external ports from `ports`.
    pub fn new(cfg: AftrConfig, ports: Box<dyn Ports>) -> Self {
        let e = cfg.endpoint;
        Aftr {
            ep: Endpoint::new(e),
            nat: Nat44::new(cfg.nat, ports),
            reasm4: Reassembler::new(e.reassembly_timeout_ns, e.max_reassembly_sets, e.max_reassembly_bytes),
            c: Counters::default(),
            cfg,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &AftrConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.c
    }

    /// The NAT.
    pub fn nat(&self) -> &Nat44 {
        &self.nat
    }

    /// Expire mappings and reassembly state.
    pub fn expire(&self, now: u64) -> usize {
        self.expire_with(now, |_, _| None)
    }

    /// [`Aftr::expire`], asking a fast path what it recorded of a
    /// mapping that is due ([`Nat44::expire_with`]).
    pub fn expire_with(&self, now: u64, seen: impl FnMut(&Inside, &Outside) -> Option<Seen>) -> usize {
        self.ep.expire(now);
        self.reasm4.expire(now);
        self.nat.expire_with(now, seen)
    }

    /// Handle one packet from the TUN device.
    pub fn process(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        self.c.dispatch(
            pkt,
            out,
            |out| self.ep.receive(pkt, now, out, &self.c, |r, out| self.on_softwire(r, now, out)),
            |out| self.on_ipv4(pkt, now, out),
        )
    }

    fn on_softwire(&self, r: Received<'_>, now: u64, out: &mut Out) -> Action {
        if !self.cfg.b4_prefixes.iter().any(|p| p.contains(&r.remote)) {
            if self.cfg.icmpv6_errors
                && self.ep.may_send_error(now, &self.c)
                && origin::icmp6_error(out, self.cfg.endpoint.local, r.outer, icmp::v6::DEST_UNREACH, 5, [0; 4])
            {
                bump(&self.c.icmp_sent);
            }
            return Action::Drop(Reason::UnknownSoftwire);
        }
        let Ok(p) = Ipv4Packet::new(r.inner) else { return Action::Drop(Reason::Malformed) };
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
        if f.kind == Kind::Fragment {
            return match self.reasm4.feed_v4(&p, now) {
                Fed::Held => Action::Drop(Reason::FragmentHeld),
                Fed::Refused => Action::Drop(Reason::FragmentLimit),
                Fed::Done(full) => {
                    bump(&self.c.reassembled);
                    self.on_softwire(Received { inner: &full, ..r }, now, out)
                }
            };
        }
        let mut buf = out.take_scratch();
        buf.clear();
        buf.extend_from_slice(r.inner);
        let a = self.outbound(r.remote, f, &mut buf, now, out);
        out.put_scratch(buf);
        a
    }

    /// Translate a packet from subscriber `sub` (in `buf`) and emit it.
    fn outbound(&self, sub: Ipv6Addr, f: pkt::Flow, buf: &mut [u8], now: u64, out: &mut Out) -> Action {
        if let Kind::IcmpError { quoted } = f.kind {
            // An error about a packet the subscriber received: its destination is the inside.
            let Some(p) = protocol(quoted.proto) else { return Action::Drop(Reason::UnsupportedProtocol) };
            let k = Inside { sub, proto: p, addr: quoted.dst, port: quoted.dport };
            let Some(o) = self.nat.lookup_in(&k) else { return Action::Drop(Reason::NoMapping) };
            pkt::rewrite_icmp_error(buf, End::Src, o.addr, End::Dst, o.addr, o.port);
            return self.emit4(buf, now, out);
        }
        let Some(p) = protocol(f.ends.proto) else { return Action::Drop(Reason::UnsupportedProtocol) };
        let flags = match f.kind {
            Kind::Transport { flags } if p == Protocol::Tcp => Some(flags),
            _ => None,
        };
        let k = Inside { sub, proto: p, addr: f.ends.src, port: f.ends.sport };
        let o = match self.nat.outbound(k, f.ends.dst, flags, now) {
            Ok(o) => o,
            Err(reason) => {
                if matches!(reason, Reason::QuotaExceeded | Reason::TableFull | Reason::PoolExhausted) {
                    self.refuse(buf, sub, now, out);
                }
                return Action::Drop(reason);
            }
        };
        pkt::rewrite(buf, End::Src, o.addr, Some(o.port));
        self.emit4(buf, now, out)
    }

    /// A new flow the NAT refused (the subscriber's quota, a full table or
    /// pool): the protocol's own answer, ICMPv4 Destination Unreachable,
    /// administratively prohibited (RFC 1812 §5.2.7.1), from the AFTR's
    /// IPv4 address (RFC 6333 §5.7) to the inner source, through its
    /// softwire; rate-limited with the end-point's other errors.
    fn refuse(&self, inner: &[u8], sub: Ipv6Addr, now: u64, out: &mut Out) {
        if !self.cfg.icmpv6_errors || !self.ep.may_send_error(now, &self.c) {
            return;
        }
        let mut err = Out::new();
        let (kind, code) = (icmp::v4::DEST_UNREACH, icmp::v4::CODE_ADMIN_PROHIBITED);
        if !origin::icmp4_error(&mut err, self.cfg.endpoint.icmp4_src, inner, kind, code, [0; 4]) {
            return;
        }
        if let Some((_, e)) = err.get(0) {
            if self.ep.send(e, sub, out, &self.c) == Action::Emit {
                bump(&self.c.icmp_sent);
            }
        }
    }

    /// A translated packet from inside: out to the IPv4 side, or hairpinned.
    fn emit4(&self, buf: &mut [u8], now: u64, out: &mut Out) -> Action {
        let Ok(p) = Ipv4Packet::new(buf) else { return Action::Drop(Reason::Malformed) };
        if self.nat.is_external(p.dst()) {
            if !self.cfg.hairpinning {
                return Action::Drop(Reason::HairpinOff);
            }
            let a = self.on_ipv4(buf, now, out);
            if a == Action::Emit {
                bump(&self.c.hairpinned);
            }
            return a;
        }
        if !out.push(PacketKind::Forward, buf) {
            return Action::Drop(Reason::TooBig);
        }
        bump(&self.c.decapsulated);
        Action::Emit
    }

    fn on_ipv4(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        let Ok(p) = Ipv4Packet::new(pkt) else { return Action::Drop(Reason::Malformed) };
        if !p.checksum_ok() {
            return Action::Drop(Reason::Malformed);
        }
        if !self.nat.is_external(p.dst()) {
            return Action::Drop(Reason::NoSubscriber);
        }
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
        if f.kind == Kind::Fragment {
            return match self.reasm4.feed_v4(&p, now) {
                Fed::Held => Action::Drop(Reason::FragmentHeld),
                Fed::Refused => Action::Drop(Reason::FragmentLimit),
                Fed::Done(full) => {
                    bump(&self.c.reassembled);
                    self.on_ipv4(&full, now, out)
                }
            };
        }
        let mut buf = out.take_scratch();
        buf.clear();
        buf.extend_from_slice(p.as_bytes());
        let a = self.inbound(f, &mut buf, now, out);
        out.put_scratch(buf);
        a
    }

    /// Translate a packet for a pool transport address (in `buf`) back to
    /// its subscriber and encapsulate it.
    fn inbound(&self, f: pkt::Flow, buf: &mut [u8], now: u64, out: &mut Out) -> Action {
        let sub = if let Kind::IcmpError { quoted } = f.kind {
            // About a packet a subscriber sent: its source is the outside.
            let Some(pr) = protocol(quoted.proto) else { return Action::Drop(Reason::UnsupportedProtocol) };
            let o = Outside { proto: pr, addr: quoted.src, port: quoted.sport };
            let Some(k) = self.nat.lookup_out(&o) else { return Action::Drop(Reason::NoMapping) };
            pkt::rewrite_icmp_error(buf, End::Dst, k.addr, End::Src, k.addr, k.port);
            k.sub
        } else {
            let Some(pr) = protocol(f.ends.proto) else { return Action::Drop(Reason::UnsupportedProtocol) };
            let flags = match f.kind {
                Kind::Transport { flags } if pr == Protocol::Tcp => Some(flags),
                _ => None,
            };
            let o = Outside { proto: pr, addr: f.ends.dst, port: f.ends.dport };
            let k = match self.nat.inbound(o, flags, now) {
                Ok(k) => k,
                Err(reason) => return Action::Drop(reason),
            };
            pkt::rewrite(buf, End::Dst, k.addr, Some(k.port));
            k.sub
        };
        self.ep.send(buf, sub, out, &self.c)
    }
}
