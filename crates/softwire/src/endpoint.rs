//! The softwire core: one IPv4-in-IPv6 tunnel end-point (RFC 2473) as
//! every engine uses it — the AFTR, the lwAFTR and the B4 alike.
//!
//! - Receiving ([`Endpoint::receive`]): IPv6 packets to our end-point
//!   address are reassembled when fragmented (RFC 6333 §5.3 / §6.3: the
//!   tunnel exit point reassembles; limits from nat64's reassembler),
//!   ICMPv6 errors about our own tunnel packets are relayed to the
//!   original IPv4 source (RFC 2473 §8, `xlat::tunnel::ip4in6_err`), and
//!   the rest is decapsulated (RFC 2473 §3.3) and handed to the engine.
//! - Sending ([`Endpoint::send`]): encapsulation (RFC 2473 §3.1) with the
//!   Tunnel Encapsulation Limit option when configured (§4.1.1), and the
//!   tunnel MTU rule: by default RFC 6333 §5.3 (the IPv4 packet is never
//!   refused for its size; the IPv6 packet is fragmented at `mtu`), or
//!   RFC 2473 §7.2 (DF set: ICMPv4 "fragmentation needed").

use crate::stats::{bump, Action, Counters, IcmpLimiter, Reason};
use core::net::{Ipv4Addr, Ipv6Addr};
use nat64::frag::{Fed, Reassembler};
use std::sync::atomic::{AtomicU32, Ordering};
use xlat::tunnel::ip4in6::{self, Family, MtuRule, Tunnel};
use xlat::tunnel::ip4in6_err;
use xlat::wire::icmp;
use xlat::wire::ipv6::Ipv6Packet;
use xlat::wire::proto;
use xlat::{Out, PacketKind, Verdict};

/// The parameters of one end-point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Our softwire address (the IPv6 source of what we send, the
    /// destination of what we accept).
    pub local: Ipv6Addr,
    /// Hop limit of tunnel packets (RFC 2473 §6.3).
    pub hop_limit: u8,
    /// Tunnel Encapsulation Limit option value, if any (RFC 2473 §4.1.1).
    pub encap_limit: Option<u8>,
    /// The IPv6 path MTU to the far end-points: tunnel packets larger than
    /// this are fragmented (at least 1280).
    pub mtu: u16,
    /// RFC 6333 §5.3 (true, the default): fragment the tunnel packet even
    /// when the IPv4 packet has DF; false: RFC 2473 §7.2.
    pub fragment_df: bool,
    /// Source of the ICMPv4 errors this end-point sends (RFC 6333 §5.7:
    /// 192.0.0.1 on an AFTR, 192.0.0.2 on a B4).
    pub icmp4_src: Ipv4Addr,
    /// Copy the IPv4 TOS into the tunnel Traffic Class (RFC 2473 §6.4).
    pub copy_tos: bool,
    /// Reassembly: how long a fragmented tunnel packet may wait (ns).
    pub reassembly_timeout_ns: u64,
    /// Reassembly: datagrams in progress at most.
    pub max_reassembly_sets: usize,
    /// Reassembly: bytes held at most.
    pub max_reassembly_bytes: usize,
    /// ICMP errors originated per second at most.
    pub icmp_rate: u32,
}

impl EndpointConfig {
    /// Defaults around `local`: hop limit 64, no encapsulation limit, MTU
    /// 1500, RFC 6333 fragmentation, errors from `icmp4_src`.
    pub fn new(local: Ipv6Addr, icmp4_src: Ipv4Addr) -> Self {
        EndpointConfig {
            local,
            hop_limit: 64,
            encap_limit: None,
            mtu: 1500,
            fragment_df: true,
            icmp4_src,
            copy_tos: true,
            reassembly_timeout_ns: 2_000_000_000,
            max_reassembly_sets: 1024,
            max_reassembly_bytes: 4 << 20,
            icmp_rate: 1000,
        }
    }
}

/// One end-point. Thread-safe.
#[derive(Debug)]
pub struct Endpoint {
    cfg: EndpointConfig,
    reasm: Reassembler,
    ident: AtomicU32,
    limiter: IcmpLimiter,
}

/// A decapsulated IPv4 packet and the softwire it came through.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// The far end-point (the B4, or for a B4 the AFTR).
    pub remote: Ipv6Addr,
    /// The IPv4 packet (header checksum verified).
    pub inner: &'a [u8],
    /// The whole tunnel packet (reassembled when it came in fragments),
    /// for an ICMPv6 error about it.
    pub outer: &'a [u8],
}

impl Endpoint {
    /// An end-point.
    pub fn new(cfg: EndpointConfig) -> Self {
        Endpoint {
            reasm: Reassembler::new(cfg.reassembly_timeout_ns, cfg.max_reassembly_sets, cfg.max_reassembly_bytes),
            ident: AtomicU32::new(std::process::id().wrapping_mul(2_654_435_761)),
            limiter: IcmpLimiter::new(cfg.icmp_rate),
            cfg,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    /// Datagrams waiting for their fragments.
    pub fn reassembling(&self) -> usize {
        self.reasm.sets()
    }

    /// Drop fragments whose time ran out.
    pub fn expire(&self, now: u64) -> usize {
        self.reasm.expire(now)
    }

    /// Tunnel header length of what we send (40 or 48).
    pub fn header_len(&self) -> usize {
        self.tunnel(Ipv6Addr::UNSPECIFIED).header_len()
    }

    fn tunnel(&self, remote: Ipv6Addr) -> Tunnel {
        Tunnel {
            src: self.cfg.local,
            dst: remote,
            hop_limit: self.cfg.hop_limit,
            encap_limit: self.cfg.encap_limit,
            traffic_class_from_inner: self.cfg.copy_tos,
        }
    }

    /// Take an ICMP error token (counted when refused).
    pub fn may_send_error(&self, now: u64, c: &Counters) -> bool {
        if self.limiter.allow(now) {
            true
        } else {
            bump(&c.icmp_rate_limited);
            false
        }
    }

    /// Handle an IPv6 packet arriving for this end-point; `engine` gets each
    /// decapsulated IPv4 packet (with `out` cleared) and decides.
    pub fn receive(
        &self,
        pkt: &[u8],
        now: u64,
        out: &mut Out,
        c: &Counters,
        engine: impl FnOnce(Received<'_>, &mut Out) -> Action,
    ) -> Action {
        out.clear();
        let Ok(ip) = Ipv6Packet::new(pkt) else { return Action::Drop(Reason::Malformed) };
        if ip.dst() != self.cfg.local {
            return Action::Drop(Reason::NotForUs);
        }
        let Ok(chain) = ip.walk() else { return Action::Drop(Reason::Malformed) };
        if chain.upper == proto::ICMPV6 && chain.frag.is_none() {
            return self.icmp6(pkt, ip.as_bytes().get(chain.upper_at).copied(), now, out, c);
        }
        if let Some(f) = chain.frag.filter(|f| !f.is_atomic()) {
            return match self.reasm.feed_v6(&ip, f, now) {
                Fed::Held => Action::Drop(Reason::FragmentHeld),
                Fed::Refused => Action::Drop(Reason::FragmentLimit),
                Fed::Done(full) => {
                    bump(&c.reassembled);
                    match ip4in6::decap(&full) {
                        Ok(d) if d.family == Family::Ipv4 => {
                            engine(Received { remote: d.src, inner: d.inner, outer: &full }, out)
                        }
                        Ok(_) => Action::Drop(Reason::NotTunnel),
                        Err(e) => Action::Drop(e.into()),
                    }
                }
            };
        }
        match ip4in6::decap(ip.as_bytes()) {
            Ok(d) if d.family == Family::Ipv4 => {
                engine(Received { remote: d.src, inner: d.inner, outer: ip.as_bytes() }, out)
            }
            Ok(_) => Action::Drop(Reason::NotTunnel),
            Err(e) => Action::Drop(e.into()),
        }
    }

    /// ICMPv6 to our end-point: errors about our tunnel packets are relayed
    /// (RFC 2473 §8); echo requests are answered (the end-point address is
    /// pingable); the rest is not ours.
    fn icmp6(&self, pkt: &[u8], kind: Option<u8>, now: u64, out: &mut Out, c: &Counters) -> Action {
        match kind {
            Some(t) if icmp::is_error_v6(t) => {
                match ip4in6_err::relay_error(pkt, self.cfg.icmp4_src, self.header_len(), out) {
                    Ok(r) if r.tunnel_src == self.cfg.local => {
                        if r.sent && self.may_send_error(now, c) {
                            bump(&c.icmp_sent);
                            Action::Emit
                        } else {
                            out.clear();
                            Action::Drop(Reason::IcmpRelayed)
                        }
                    }
                    Ok(_) => {
                        out.clear();
                        Action::Drop(Reason::NotTunnel)
                    }
                    Err(e) => Action::Drop(e.into()),
                }
            }
            Some(icmp::v6::ECHO_REQUEST) => {
                if crate::echo::reply6(pkt, out) {
                    Action::Emit
                } else {
                    Action::Drop(Reason::Malformed)
                }
            }
            _ => Action::Drop(Reason::NotTunnel),
        }
    }

    /// Encapsulate `inner` (a checked IPv4 packet) towards `remote`,
    /// appending to `out` (what was there stays). Counts `encapsulated`.
    pub fn send(&self, inner: &[u8], remote: Ipv6Addr, out: &mut Out, c: &Counters) -> Action {
        let rule = MtuRule {
            mtu: self.cfg.mtu,
            icmp_src: self.cfg.icmp4_src,
            frag_ident: self.ident.fetch_add(1, Ordering::Relaxed),
            fragment_df: self.cfg.fragment_df,
        };
        let before = out.len();
        match ip4in6::encap_tunnel_append(inner, &self.tunnel(remote), Some(&rule), out) {
            Verdict::Emit => {
                let mut forwarded = false;
                for i in before..out.len() {
                    match out.get(i) {
                        Some((PacketKind::IcmpError, _)) => bump(&c.icmp_sent),
                        _ => forwarded = true,
                    }
                }
                if forwarded {
                    bump(&c.encapsulated);
                }
                Action::Emit
            }
            Verdict::Drop(r) => Action::Drop(r.into()),
        }
    }
}
