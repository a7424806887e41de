//! The lw4o6 lwAFTR (RFC 7596 §6) — and, with whole-address bindings
//! leased on demand, the DSTM tunnel end-point (TEP).
//!
//! No per-flow state: every packet is checked against the binding table
//! ([`crate::binding`]).
//!
//! - From a softwire (RFC 7596 §6.1): the tunnel packet is reassembled and
//!   decapsulated by the [`Endpoint`]; the inner IPv4 source address and
//!   port (the ICMP query identifier; for an ICMP error, the destination
//!   port of the packet it quotes, which is the lwB4's) must match the
//!   lwB4's binding, else the packet is dropped and counted
//!   (`no-binding`, `wrong-address`, `port-set-violation`) and, with
//!   `icmpv6-errors`, answered with ICMPv6 Destination Unreachable code 5
//!   "source address failed ingress/egress policy" (RFC 7596 §6.1
//!   SHOULD). Inner fragments other than the first carry no port: only
//!   their address is checked.
//! - Hairpinning (RFC 7596 §6.3): an inner packet whose destination is
//!   held by another lwB4 goes straight back into that lwB4's softwire.
//! - From the IPv4 side (RFC 7596 §6.2): the destination address and port
//!   (ICMP query identifier; for an ICMP error, the source port of the
//!   quoted packet, RFC 7596 §8) select the lwB4; fragments for shared
//!   addresses are reassembled first to find the port. No binding: dropped
//!   (`no-subscriber`) and, with `icmpv4-errors`, answered with ICMPv4
//!   host unreachable (3/1, RFC 7596 §6.2 MAY).
//! - ICMPv6 errors about our softwire packets are relayed to the IPv4
//!   source (RFC 2473 §8, by the end-point).
//!
//! The binding table is swapped whole on a reload without a lock on the
//! packet path ([`Lwaftr::replace_bindings`]); DSTM leases live in a
//! second table ([`Lwaftr::set_leases`]) consulted after it.

use crate::binding::{BindingTable, Check};
use crate::endpoint::{Endpoint, EndpointConfig, Received};
use crate::pkt::{self, Kind};
use crate::stats::{bump, Action, Counters, Reason};
use arc_swap::{ArcSwap, Guard};
use core::net::{Ipv4Addr, Ipv6Addr};
use nat64::frag::{Fed, Reassembler};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use xlat::origin;
use xlat::wire::icmp;
use xlat::wire::ipv4::Ipv4Packet;
use xlat::{Out, PacketKind};

/// The lwAFTR's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LwaftrConfig {
    /// The softwire end-point.
    pub endpoint: EndpointConfig,
    /// Hairpin traffic between lwB4s (RFC 7596 §6.3).
    pub hairpinning: bool,
    /// Answer IPv4 packets no lwB4 holds with ICMPv4 3/1.
    pub icmpv4_errors: bool,
    /// Answer softwire packets that fail the binding check with ICMPv6 1/5.
    pub icmpv6_errors: bool,
}

/// The lwAFTR. Thread-safe; see the module documentation.
#[derive(Debug)]
pub struct Lwaftr {
    cfg: LwaftrConfig,
    ep: Endpoint,
    table: ArcSwap<BindingTable>,
    leases: ArcSwap<BindingTable>,
    /// `leases` holds a binding: without DSTM the packet path skips it.
    any_leases: AtomicBool,
    reasm4: Reassembler,
    c: Counters,
}

/// The tables one packet is checked against, loaded once per packet: the
/// binding table and, when any are in force, the DSTM leases.
struct Tables {
    bindings: Guard<Arc<BindingTable>>,
    leases: Option<Guard<Arc<BindingTable>>>,
}

impl Tables {
    fn lookup4(&self, a: Ipv4Addr, port: u16) -> Option<Ipv6Addr> {
        match self.bindings.lookup4(a, port) {
            Some(b) => Some(*b),
            None => self.leases.as_ref().and_then(|l| l.lookup4(a, port).copied()),
        }
    }

    fn check(&self, b4: &Ipv6Addr, src: Ipv4Addr, port: u16) -> Check {
        match (self.bindings.check(b4, src, port), &self.leases) {
            (Check::NoBinding, Some(l)) => l.check(b4, src, port),
            (c, _) => c,
        }
    }
}

impl Lwaftr {
    /// An lwAFTR with `table`.
    pub fn new(cfg: LwaftrConfig, table: BindingTable) -> Self {
        let e = cfg.endpoint;
        Lwaftr {
            ep: Endpoint::new(e),
            table: ArcSwap::from_pointee(table),
            leases: ArcSwap::from_pointee(BindingTable::new()),
            any_leases: AtomicBool::new(false),
            reasm4: Reassembler::new(e.reassembly_timeout_ns, e.max_reassembly_sets, e.max_reassembly_bytes),
            c: Counters::default(),
            cfg,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &LwaftrConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.c
    }

    /// The binding table in force.
    pub fn bindings(&self) -> Arc<BindingTable> {
        self.table.load_full()
    }

    /// Put a new binding table in force (a reload); packets in flight
    /// finish with the old one.
    pub fn replace_bindings(&self, t: BindingTable) {
        self.table.store(Arc::new(t));
    }

    /// Put the DSTM leases (whole-address bindings) in force.
    pub fn set_leases(&self, t: BindingTable) {
        let any = !t.is_empty();
        self.leases.store(Arc::new(t));
        self.any_leases.store(any, Ordering::Release);
    }

    /// Leases in force.
    pub fn leases(&self) -> Arc<BindingTable> {
        self.leases.load_full()
    }

    /// Drop reassembly state whose time ran out.
    pub fn expire(&self, now: u64) {
        self.ep.expire(now);
        self.reasm4.expire(now);
    }

    /// The lwB4 holding (`a`, `port`).
    pub fn lookup4(&self, a: Ipv4Addr, port: u16) -> Option<Ipv6Addr> {
        self.tables().lookup4(a, port)
    }

    fn tables(&self) -> Tables {
        Tables {
            bindings: self.table.load(),
            leases: self.any_leases.load(Ordering::Acquire).then(|| self.leases.load()),
        }
    }

    /// Handle one packet from the TUN device: IPv6 (softwires) or IPv4.
    /// Clears `out` first; on [`Action::Emit`] `out` holds what to send.
    pub fn process(&self, pkt: &[u8], now: u64, out: &mut Out) -> Action {
        self.c.dispatch(
            pkt,
            out,
            |out| self.ep.receive(pkt, now, out, &self.c, |r, out| self.on_softwire(r, now, out)),
            |out| self.on_ipv4(pkt, now, out),
        )
    }

    fn on_softwire(&self, r: Received<'_>, now: u64, out: &mut Out) -> Action {
        let Ok(p) = Ipv4Packet::new(r.inner) else { return Action::Drop(Reason::Malformed) };
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
        // RFC 7596 §8: the identifier of a query, the quoted destination port of an error.
        let (src_port, dst_port) = match f.kind {
            Kind::Transport { .. } | Kind::Echo(_) => (Some(f.ends.sport), Some(f.ends.dport)),
            Kind::IcmpError { quoted } => (Some(quoted.dport), Some(quoted.sport)),
            Kind::Fragment => (None, None),
        };
        let t = self.tables();
        let verdict = match src_port {
            Some(port) => t.check(&r.remote, p.src(), port),
            None => match t.check(&r.remote, p.src(), 0) {
                Check::PortOutside => Check::Ok,
                c => c,
            },
        };
        let reason = match verdict {
            Check::Ok => None,
            Check::NoBinding => Some(Reason::NoBinding),
            Check::WrongAddress => Some(Reason::WrongAddress),
            Check::PortOutside => Some(Reason::PortSetViolation),
        };
        if let Some(reason) = reason {
            if self.cfg.icmpv6_errors
                && self.ep.may_send_error(now, &self.c)
                && origin::icmp6_error(
                    out,
                    self.cfg.endpoint.local,
                    r.outer,
                    icmp::v6::DEST_UNREACH,
                    5, // RFC 4443 §3.1: source address failed ingress/egress policy
                    [0; 4],
                )
            {
                bump(&self.c.icmp_sent);
            }
            return Action::Drop(reason);
        }
        // RFC 7596 §6.3: hairpinning to another lwB4.
        if let Some(port) = dst_port {
            if let Some(b4) = t.lookup4(p.dst(), port) {
                if !self.cfg.hairpinning {
                    return Action::Drop(Reason::HairpinOff);
                }
                let a = self.ep.send(r.inner, b4, out, &self.c);
                if a == Action::Emit {
                    bump(&self.c.hairpinned);
                }
                return a;
            }
        }
        if !out.push(PacketKind::Forward, r.inner) {
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
        let f = match pkt::flow(&p) {
            Ok(f) => f,
            Err(reason) => return Action::Drop(reason),
        };
        let t = self.tables();
        let port = match f.kind {
            Kind::Transport { .. } | Kind::Echo(_) => f.ends.dport,
            Kind::IcmpError { quoted } => quoted.sport,
            Kind::Fragment => {
                if t.bindings.map_of(p.dst()).is_full() {
                    0
                } else {
                    // A shared address: the port is in the first fragment only.
                    return match self.reasm4.feed_v4(&p, now) {
                        Fed::Held => Action::Drop(Reason::FragmentHeld),
                        Fed::Refused => Action::Drop(Reason::FragmentLimit),
                        Fed::Done(full) => {
                            bump(&self.c.reassembled);
                            self.on_ipv4(&full, now, out)
                        }
                    };
                }
            }
        };
        match t.lookup4(p.dst(), port) {
            Some(b4) => self.ep.send(p.as_bytes(), b4, out, &self.c),
            None => {
                if self.cfg.icmpv4_errors
                    && pkt::may_answer(&p)
                    && self.ep.may_send_error(now, &self.c)
                    && origin::icmp4_error(
                        out,
                        self.cfg.endpoint.icmp4_src,
                        p.as_bytes(),
                        icmp::v4::DEST_UNREACH,
                        icmp::v4::CODE_HOST_UNREACH,
                        [0; 4],
                    )
                {
                    bump(&self.c.icmp_sent);
                }
                Action::Drop(Reason::NoSubscriber)
            }
        }
    }
}
