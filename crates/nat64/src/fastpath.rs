//! For a fast path that translates established sessions outside this
//! crate (the XDP programs of `crates/xdp`): refreshing a session's
//! lifetime from the time the fast path last used it, so that a session
//! carried only by the fast path does not expire here (the slow path's
//! tables stay the truth: sessions are created, moved through the TCP
//! state machine and expired here).

use crate::config::Protocol;
use crate::state::{lock, SessKey, T4, T6};
use crate::tcp::TcpState;
use crate::{Nat64, SessionInfo, TO_EST};

impl Nat64 {
    /// A packet of session `s` (as [`Nat64::sessions`] lists it) was
    /// translated elsewhere at `seen` (this translator's clock, the `now`
    /// of [`Nat64::translate`]): extend its lifetime as a packet that does
    /// not change the TCP state would, i.e. the UDP or ICMP idle timeout,
    /// or the established timeout for a TCP session in ESTABLISHED (other
    /// TCP states keep theirs: their packets go through [`Nat64::translate`]).
    /// Never shortens a lifetime. Returns false when the session is gone.
    pub fn refresh(&self, s: &SessionInfo, seen: u64) -> bool {
        let y_port = if s.protocol == Protocol::Icmp { 0 } else { s.ipv4_dst.port() };
        let key = SessKey {
            p: s.protocol,
            x: T6 { addr: *s.ipv6_src.ip(), port: s.ipv6_src.port() },
            y: T4 { addr: *s.ipv4_dst.ip(), port: y_port },
        };
        let mut sh = lock(&self.shards[self.shard_of6(&key.x.addr)]);
        let Some(sess) = sh.sessions.get_mut(&key) else { return false };
        let life = match sess.state {
            None => self.idle_timeout(key.p),
            Some(TcpState::Established) => self.to[TO_EST],
            Some(_) => return true,
        };
        sess.expires = sess.expires.max(seen.saturating_add(life));
        true
    }
}
