//! RFC 6146 §3.5, packets in from the IPv6 side (6→4): fragment
//! reassembly (§3.4), filtering and the IPv6-side BIB and session
//! handling of UDP (§3.5.1), TCP (§3.5.2) and ICMP queries (§3.5.3), then
//! the RFC 7915 translation with the pool4 source port written in.

use crate::config::{Mode, Protocol};
use crate::state::{lock, refuse, Refusal, SessKey, T4, T6};
use crate::tcp::{self, Side, TcpState};
use crate::tuple::{flow_of, Fixed, Flow, In, NewPort};
use crate::{Nat64, TO_TRANS};
use std::sync::atomic::Ordering;
use xlat::siit::Pass;
use xlat::wire::icmp::{is_error_v6, v6 as icmp6};
use xlat::wire::ipv6::Ipv6Packet;
use xlat::wire::proto;
use xlat::{DropReason, Out, Verdict};

impl Nat64 {
    /// A packet in from the IPv6 side. `reassembled`: a datagram this
    /// crate just rebuilt from fragments.
    pub(crate) fn from6(&self, pkt: &[u8], now: u64, out: &mut Out, reassembled: bool) -> Verdict {
        let ip = match Ipv6Packet::new(pkt) {
            Ok(p) => p,
            Err(e) => return Verdict::Drop(e.into()),
        };
        let chain = match ip.walk() {
            Ok(c) => c,
            Err(e) => return Verdict::Drop(e.into()),
        };
        // RFC 6146 §3.4: reassemble fragments before looking at state.
        if let Some(f) = chain.frag.filter(|f| !f.is_atomic()) {
            if reassembled || chain.segments_left_at.is_some() || xlat::wire::ipv6::is_extension_header(f.next) {
                // Let RFC 7915 refuse what it refuses (Segments Left,
                // extension after fragment), statelessly.
                return self.xl.translate(pkt, out);
            }
            let fed = self.reasm.feed_v6(&ip, f, now);
            return self.on_fragment(fed, |full| self.from6(full, now, out, true));
        }
        let (src6, dst6) = (ip.src(), ip.dst());
        // A source inside pool6 is one of our own translations coming back.
        if self.cfg.pool6.contains(&src6) {
            return Verdict::Drop(DropReason::HairpinLoop);
        }
        let Some(y) = self.p6.extract(&dst6) else {
            return Verdict::Drop(DropReason::UntranslatableDestination);
        };
        if xlat::addr::is_forbidden_v6(&src6) || xlat::addr::is_forbidden_v4(y) {
            return Verdict::Drop(DropReason::ForbiddenAddress);
        }
        let l4 = &pkt[chain.upper_at.min(pkt.len())..];
        // RFC 6146 §3.8 hairpinning: the destination is one of our own
        // pool4 addresses, so the IPv4 result comes straight back in; it
        // never reaches the IPv4 link.
        let hairpin = self.pool.contains(y);
        let pass = Pass { reassembled, hairpin_out: hairpin, ..Pass::default() };
        if chain.upper == proto::ICMPV6 && l4.len() >= 8 && is_error_v6(l4[0]) {
            let v = self.icmp_error_6to4(pkt, y, l4, out, pass);
            return if hairpin && v == Verdict::Emit { self.hairpin(pkt, now, out) } else { v };
        }
        let flow = match flow_of(chain.upper, l4, true, false) {
            Ok(f) => f,
            Err(r) => return Verdict::Drop(r),
        };
        let x = T6 { addr: src6, port: flow.sport };
        let yt = T4 { addr: y, port: if flow.p == Protocol::Icmp { 0 } else { flow.dport } };
        let t = match self.state_6to4(flow, x, yt, now) {
            Ok(t) => t,
            Err(r) => return self.refuse_v6(r, pkt, out),
        };
        let map = Fixed { v4: [t.addr, y, t.addr, y], v6: [src6; 4] };
        let v = self.translate_flow(&map, pkt, out, flow.p, NewPort::Src(t.port), In::Packet, pass);
        if hairpin && v == Verdict::Emit {
            return self.hairpin(pkt, now, out);
        }
        v
    }

    /// RFC 6146 §3.5.1 / §3.5.2 / §3.5.3, IPv6 side: find or create the BIB
    /// entry and session for `x` → `y`; returns the IPv4 source (T, t).
    fn state_6to4(&self, flow: Flow, x: T6, y: T4, now: u64) -> Result<T4, Refusal> {
        let key = SessKey { p: flow.p, x, y };
        let mut sh = lock(&self.shards[self.shard_of6(&x.addr)]);
        if let Some(s) = sh.sessions.get_mut(&key) {
            self.fast_learn(&key, s, now);
            let sooner = self.touch(s, Side::V6, flow, now);
            let t = s.t;
            if let Some(at) = sooner {
                sh.wheel.insert(at, key);
            }
            return Ok(t);
        }
        // CLOSED: only a V6 SYN opens a TCP session; another segment is
        // translated through an existing BIB entry without creating state,
        // and dropped when there is none.
        if flow.p == Protocol::Tcp && flow.flags & tcp::SYN == 0 {
            return match sh.bib.get(&(flow.p, x)) {
                Some(b) => Ok(b.t),
                None => Err(refuse(DropReason::NoSession, None)),
            };
        }
        // RFC 6146 §3.5.1.1: when no transport address or BIB entry can be
        // had, "the NAT64 SHOULD send an ICMPv6 Destination Unreachable
        // error message with Code 3 (Address Unreachable)".
        let unreach = Some((icmp6::DEST_UNREACH, icmp6::CODE_ADDR_UNREACH));
        if self.n_sess.fetch_add(1, Ordering::AcqRel) >= self.cfg.max_sessions {
            self.n_sess.fetch_sub(1, Ordering::AcqRel);
            return Err(refuse(DropReason::SessionTableFull, unreach));
        }
        // RFC 6146 §3.5.2.2 simultaneous open (RFC 5382 REQ-2): a new TCP
        // mapping keeps the host's own port when it is free, on the
        // address a held SYN from this peer was sent to or else on the
        // host's paired address, so an IPv4 peer that opens towards the
        // port it expects meets the IPv6 host's SYN. NAT-PT keeps every
        // port on the host's own address: nothing to look up.
        let new_tcp = self.cfg.mode == Mode::Nat64 && flow.p == Protocol::Tcp && !sh.bib.contains_key(&(flow.p, x));
        let keep = new_tcp.then(|| self.port_to_keep(x, y)).flatten();
        let t = match self.bib_get_or_create(&mut sh, flow.p, x, y.addr, keep) {
            Ok(t) => t,
            Err(r) => {
                self.n_sess.fetch_sub(1, Ordering::AcqRel);
                return Err(refuse(r, unreach));
            }
        };
        let (state, life) = match flow.p {
            Protocol::Tcp => (Some(TcpState::V6Init), self.to[TO_TRANS]),
            p => (None, self.idle_timeout(p)),
        };
        let sess = self.insert_session(&mut sh, key, t, state, now, now.saturating_add(life));
        drop(sh);
        // A fast path carries it from its first packet's answer on.
        self.fast_created(&key, &sess, now);
        // Simultaneous open: a held V4 SYN for this connection is discarded.
        if flow.p == Protocol::Tcp && self.held_n.load(Ordering::Acquire) > 0 {
            let mut held = lock(&self.held);
            let before = held.len();
            held.retain(|h| !(h.t == t && h.y == y));
            self.held_n.fetch_sub(before - held.len(), Ordering::AcqRel);
            if held.is_empty() && before > 0 {
                self.fast_held(false);
            }
        }
        Ok(t)
    }

    /// The pool4 transport address a new TCP mapping of `x` towards `y`
    /// should keep if free: x's port on the address a held SYN from `y`
    /// to that port was sent to, else on x's paired address; with port
    /// blocks (crate::blocks) only the former (the block ports serve the
    /// rest, as they do for the sessions a fast path creates).
    fn port_to_keep(&self, x: T6, y: T4) -> Option<T4> {
        if self.held_n.load(Ordering::Acquire) > 0 {
            if let Some(h) = lock(&self.held).iter().find(|h| h.y == y && h.t.port == x.port) {
                return Some(h.t);
            }
        }
        if x.port >= 1024 && self.blocks_on() {
            return None;
        }
        Some(T4 { addr: self.pool.paired(Protocol::Tcp, &x.addr).unwrap_or(y.addr), port: x.port })
    }

    /// Answer a refused packet with the ICMP error RFC 6146 names, or drop.
    fn refuse_v6(&self, r: Refusal, pkt: &[u8], out: &mut Out) -> Verdict {
        self.count_refused(r.reason);
        if let Some((t, c)) = r.icmp {
            out.clear();
            if self.xl.icmp6_error(out, pkt, t, c, [0; 4]) {
                return Verdict::Emit;
            }
        }
        Verdict::Drop(r.reason)
    }
}
