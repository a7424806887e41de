//! RFC 6146 §3.5, packets in from the IPv4 side (4→6): fragment
//! reassembly (§3.4), the IPv4-side BIB lookup and filtering of UDP
//! (§3.5.1), TCP with held unsolicited SYNs (§3.5.2, §3.5.2.2) and ICMP
//! queries (§3.5.3), then the RFC 7915 translation with the IPv6
//! destination port written in.

use crate::config::Protocol;
use crate::state::{lock, refuse, Held, Refusal, SessKey, T4, T6};
use crate::tcp::{self, Side, TcpState};
use crate::tuple::{flow_of, Fixed, Flow, In, NewPort, Via};
use crate::{Nat64, TO_SYN, TO_TRANS};
use std::sync::atomic::Ordering;
use xlat::wire::icmp::{is_error_v4, v4 as icmp4, v6 as icmp6};
use xlat::wire::ipv4::Ipv4Packet;
use xlat::wire::proto;
use xlat::{DropReason, Out, Verdict};

impl Nat64 {
    /// A packet in from the IPv4 side, or (`via`) one this crate rebuilt
    /// from fragments or turned around (hairpinning).
    pub(crate) fn from4(&self, pkt: &[u8], now: u64, out: &mut Out, via: Via<'_>) -> Verdict {
        let ip = match Ipv4Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if !ip.checksum_ok() {
            return Verdict::Drop(DropReason::BadIpv4Checksum);
        }
        if ip.is_fragment() {
            if !matches!(via, Via::Wire) {
                return Verdict::Drop(DropReason::Unsupported);
            }
            let fed = self.reasm.feed_v4(&ip, now);
            return self.on_fragment(fed, |full| self.from4(full, now, out, Via::Reassembled));
        }
        let (src4, dst4) = (ip.src(), ip.dst());
        let l4 = ip.payload();
        if ip.protocol() == proto::ICMP && l4.len() >= 8 && is_error_v4(l4[0]) {
            return self.icmp_error_4to6(pkt, src4, dst4, l4, out, via);
        }
        if !self.pool.contains(dst4) {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        }
        if xlat::addr::is_forbidden_v4(src4) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }
        let Some(y6) = self.p6.embed(src4) else {
            return Verdict::Drop(DropReason::UntranslatableSource);
        };
        let flow = match flow_of(ip.protocol(), l4, false, false) {
            Ok(f) => f,
            Err(r) => return Verdict::Drop(r),
        };
        let t = T4 { addr: dst4, port: flow.dport };
        let y = T4 { addr: src4, port: if flow.p == Protocol::Icmp { 0 } else { flow.sport } };
        let x = match self.state_4to6(flow, t, y, now, pkt, via) {
            Ok(x) => x,
            Err(r) if r.reason == DropReason::SynHeld => return Verdict::Drop(DropReason::SynHeld),
            Err(r) => return self.refuse_v4(r, pkt, out, via),
        };
        let map = Fixed { v4: [src4; 4], v6: [y6, x.addr, y6, x.addr] };
        self.translate_flow(&map, pkt, out, flow.p, NewPort::Dst(x.port), In::Packet, via.pass())
    }

    /// RFC 6146 §3.5.1 / §3.5.2 / §3.5.3, IPv4 side: the IPv6 destination
    /// (X, x) of a packet from `y` to pool4 address `t`.
    fn state_4to6(&self, flow: Flow, t: T4, y: T4, now: u64, pkt: &[u8], via: Via<'_>) -> Result<T6, Refusal> {
        let syn = flow.p == Protocol::Tcp && flow.flags & tcp::SYN != 0;
        // "If the NAT64 does not find a BIB entry ... the packet is
        // discarded" — UDP: "the NAT64 SHOULD send an ICMP Destination
        // Unreachable error message with code 3 (Port Unreachable)".
        let no_bib = match flow.p {
            Protocol::Udp => refuse(DropReason::NoBinding, Some((icmp4::DEST_UNREACH, icmp4::CODE_PORT_UNREACH))),
            _ => refuse(DropReason::NoBinding, None),
        };
        // "... with code 13 (Communication Administratively Prohibited)".
        let prohibited = Some((icmp4::DEST_UNREACH, icmp4::CODE_ADMIN_PROHIBITED));
        let Some(x) = self.owner_of(flow.p, t) else {
            if syn {
                return Err(self.hold_syn(t, y, now, pkt, via));
            }
            return Err(no_bib);
        };
        let key = SessKey { p: flow.p, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        match sh.bib.get(&(flow.p, x)) {
            Some(b) if b.t == t => {}
            _ => {
                drop(sh);
                if syn {
                    return Err(self.hold_syn(t, y, now, pkt, via));
                }
                return Err(no_bib);
            }
        }
        if let Some(s) = sh.sessions.get_mut(&key) {
            let half = !self.fast_learn(&key, s, now) && s.state == Some(TcpState::V6Init);
            let sooner = self.touch(s, Side::V4, flow, now);
            let s = *s;
            if let Some(at) = sooner {
                sh.wheel.insert(at, key);
            }
            if half && s.state == Some(TcpState::Established) {
                // The SYN+ACK came this way: the fast path carries the
                // session in full from now on.
                drop(sh);
                self.fast_opened(&key, &s, now);
            }
            return Ok(x);
        }
        let allowed = !self.cfg.address_dependent_filtering || sh.peers.contains_key(&(flow.p, x, y.addr));
        match flow.p {
            Protocol::Tcp => {
                // CLOSED, not a SYN: translated through the BIB entry, no state.
                if !syn {
                    return Ok(x);
                }
                if self.cfg.drop_externally_initiated_tcp {
                    return Err(refuse(DropReason::ExternallyInitiatedTcp, None));
                }
                if !allowed {
                    drop(sh);
                    return Err(self.hold_syn(t, y, now, pkt, via));
                }
            }
            _ if !allowed => return Err(refuse(DropReason::Filtered, prohibited)),
            _ => {}
        }
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return Err(refuse(DropReason::SessionTableFull, prohibited));
        }
        // A V4 SYN through a BIB entry, allowed by the filter: translated,
        // session in V4 INIT with the transitory lifetime.
        let (state, life) = match flow.p {
            Protocol::Tcp => (Some(TcpState::V4Init), self.to[TO_TRANS]),
            p => (None, self.idle_timeout(p)),
        };
        let sess = self.insert_session(&mut sh, key, t, state, now, now.saturating_add(life));
        drop(sh);
        self.fast_created(&key, &sess, now);
        Ok(x)
    }

    /// RFC 6146 §3.5.2.2: an IPv4 SYN with no way in yet is held for
    /// TCP_INCOMING_SYN; a V6 SYN for the same connection discards it,
    /// otherwise [`Nat64::expire`] answers it with Port Unreachable.
    fn hold_syn(&self, t: T4, y: T4, now: u64, pkt: &[u8], via: Via<'_>) -> Refusal {
        if self.cfg.drop_externally_initiated_tcp {
            return refuse(DropReason::ExternallyInitiatedTcp, None);
        }
        let mut held = lock(&self.held);
        if held.iter().any(|h| h.t == t && h.y == y) {
            return refuse(DropReason::SynHeld, None);
        }
        if held.len() >= self.cfg.max_stored_pkts {
            return refuse(DropReason::Filtered, None);
        }
        let orig6 = match via {
            Via::Hairpin(orig) => Some(orig.to_vec()),
            _ => None,
        };
        held.push(Held { t, y, deadline: now.saturating_add(self.to[TO_SYN]), pkt: pkt.to_vec(), orig6 });
        if self.held_n.fetch_add(1, Ordering::AcqRel) == 0 {
            self.fast_held(true);
        }
        refuse(DropReason::SynHeld, None)
    }

    fn refuse_v4(&self, r: Refusal, pkt: &[u8], out: &mut Out, via: Via<'_>) -> Verdict {
        self.count_refused(r.reason);
        if let (Some((t, c)), Via::Hairpin(orig6)) = (r.icmp, via) {
            // A hairpinned packet's sender is an IPv6 host behind us: the
            // refusal goes to it in ICMPv6 (RFC 7915 §4.2's mapping of the
            // two codes used here), from the translator's own address.
            let code6 = match c {
                icmp4::CODE_ADMIN_PROHIBITED => icmp6::CODE_ADMIN_PROHIBITED,
                _ => icmp6::CODE_PORT_UNREACH,
            };
            out.clear();
            if t == icmp4::DEST_UNREACH && self.xl.icmp6_error(out, orig6, icmp6::DEST_UNREACH, code6, [0; 4]) {
                return Verdict::Emit;
            }
            return Verdict::Drop(r.reason);
        }
        if let Some((t, c)) = r.icmp {
            out.clear();
            // From the address the sender tried to reach (a pool4 address),
            // as the host behind it would answer.
            let src = Ipv4Packet::new_quoted(pkt).ok().map(|ip| ip.dst());
            if self.xl.icmp4_error(out, src, pkt, t, c, [0; 4]) {
                return Verdict::Emit;
            }
        }
        Verdict::Drop(r.reason)
    }
}
