//! RFC 6146 §3.5.2.2 and §3.5 session lifetimes: expiry of sessions (TCP
//! established-like ones through TRANS, RFC 6146 §3.5.2.2 state machine),
//! of the BIB entries they held, of held unsolicited IPv4 SYNs (answered
//! with Port Unreachable, in ICMPv6 for a hairpinned one) and of stale
//! fragment sets (§3.4).

use crate::state::lock;
use crate::tcp;
use crate::{Nat64, TO_TRANS};
use std::sync::atomic::Ordering;
use xlat::wire::icmp::{v4 as icmp4, v6 as icmp6};
use xlat::Out;

/// What [`Nat64::expire`] did and what it has to send.
#[derive(Debug, Default)]
pub struct Expired {
    /// Sessions deleted.
    pub sessions: usize,
    /// TCP sessions moved to TRANS.
    pub to_trans: usize,
    /// ICMP errors to send, complete IP packets: ICMPv4 Port Unreachable
    /// to the IPv4 side for held SYNs nobody answered (RFC 6146
    /// §3.5.2.2), ICMPv6 Port Unreachable from the translator's own
    /// address for such SYNs that were hairpinned (RFC 6146 §3.8).
    pub icmp: Vec<Vec<u8>>,
}

impl Nat64 {
    /// Expire what is due at `now`: sessions (TCP established-like ones
    /// move to TRANS first), their BIB entries when they were the last
    /// session of a dynamic entry (and in NAT-PT mode the host's address
    /// with its last entry), held SYNs (answered with ICMPv4 Port
    /// Unreachable, returned in [`Expired::icmp`]) and stale fragments.
    /// Call it every 100 ms–1 s; cost is proportional to what is due.
    pub fn expire(&self, now: u64) -> Expired {
        // Sessions a fast path created count from when it did.
        self.fast_drain();
        let mut rep = Expired::default();
        let mut due = Vec::new();
        for s in self.shards.iter() {
            let mut sh = lock(s);
            due.clear();
            sh.wheel.advance(now, |_, k| due.push(k));
            for k in &due {
                let Some(mut sess) = sh.sessions.get(k).copied() else { continue };
                // A half-open session whose SYN+ACK a fast path carried
                // is ESTABLISHED (crate::fastpath).
                if sess.expires <= now {
                    self.fast_learn(k, &mut sess, now);
                }
                // Each lifetime counts from the end of the previous one, not
                // from when expiry noticed it: one call at `now` does what
                // a timer ticking all along would have done.
                let gone = loop {
                    if sess.expires > now {
                        break false;
                    }
                    match sess.state.and_then(tcp::on_timeout) {
                        Some(next) => {
                            sess.state = Some(next);
                            sess.expires = sess.expires.saturating_add(self.to[TO_TRANS]);
                            rep.to_trans += 1;
                        }
                        None => break true,
                    }
                };
                if !gone {
                    if let Some(s) = sh.sessions.get_mut(k) {
                        s.state = sess.state;
                        s.expires = sess.expires;
                    }
                    sh.wheel.insert(sess.expires, *k);
                    continue;
                }
                if self.session_drop(&mut sh, k) {
                    self.c.expired[k.p.idx()].fetch_add(1, Ordering::Relaxed);
                    rep.sessions += 1;
                }
            }
        }
        if self.held_n.load(Ordering::Acquire) > 0 {
            let mut held = lock(&self.held);
            let mut i = 0;
            let mut out = Out::new();
            while i < held.len() {
                if held[i].deadline <= now {
                    let h = held.swap_remove(i);
                    self.held_n.fetch_sub(1, Ordering::AcqRel);
                    self.c.held_expired.fetch_add(1, Ordering::Relaxed);
                    out.clear();
                    let sent = match &h.orig6 {
                        Some(orig6) => {
                            self.xl.icmp6_error(&mut out, orig6, icmp6::DEST_UNREACH, icmp6::CODE_PORT_UNREACH, [0; 4])
                        }
                        None => self.xl.icmp4_error(
                            &mut out,
                            Some(h.t.addr),
                            &h.pkt,
                            icmp4::DEST_UNREACH,
                            icmp4::CODE_PORT_UNREACH,
                            [0; 4],
                        ),
                    };
                    if sent {
                        if let Some((_, b)) = out.get(0) {
                            rep.icmp.push(b.to_vec());
                        }
                    }
                } else {
                    i += 1;
                }
            }
            if held.is_empty() {
                self.fast_held(false);
            }
        }
        self.blocks_maintain();
        let f = self.reasm.expire(now);
        self.c.frag_expired.fetch_add(f as u64, Ordering::Relaxed);
        rep
    }
}
