//! Budgets per client (issue #29): every table a client can grow in the
//! ALG — transactions and dialogs (bytes and count), requests parked for
//! DNS (bytes), DNS lookups in flight, TCP connections — has a global cap
//! and a fair share per client. A client is a [`ClientKey`] of the shared
//! `budget` crate: an IPv6 prefix (`/64` by default, `client-prefix-length`,
//! /48–/128) or an IPv4 address, so one host with many addresses of its
//! /64 is one client. The share is `client-share` percent of each cap. A
//! full budget refuses new work (the caller answers with SIP's own 503 +
//! Retry-After); nothing held is evicted to make room.
//!
//! [`Shares`] is `budget::FairShare` with amounts: a transaction is
//! charged its bytes, and what it holds may grow or shrink while it lives.

use std::collections::HashMap;

pub use budget::ClientKey;

/// Why a budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The global cap would be passed.
    Global,
    /// The client's share would be passed.
    Client,
}

/// One budget: a global cap and a per-client share of it, in units (bytes,
/// entries, connections). Only clients holding something are remembered,
/// so the map is bounded by what the budget holds.
#[derive(Debug, Clone)]
pub struct Shares {
    limit: u64,
    share: u64,
    used: u64,
    by_client: HashMap<ClientKey, u64, foldhash::fast::RandomState>,
}

/// The share of `limit` one client may hold: `percent` of it (at least 1).
pub fn share_of(limit: u64, percent: u8) -> u64 {
    (limit.saturating_mul(u64::from(percent.min(100))) / 100).max(1)
}

impl Shares {
    /// A budget of `limit` units, `percent` of them per client.
    pub fn new(limit: u64, percent: u8) -> Shares {
        Shares { limit, share: share_of(limit, percent), used: 0, by_client: HashMap::default() }
    }

    /// New caps (a reload); what is held stays held.
    pub fn set_limits(&mut self, limit: u64, percent: u8) {
        self.limit = limit;
        self.share = share_of(limit, percent);
    }

    /// Whether `n` more units for `c` stay within both caps.
    pub fn check(&self, c: ClientKey, n: u64) -> Result<(), Full> {
        if self.used.saturating_add(n) > self.limit {
            return Err(Full::Global);
        }
        if self.held_by(c).saturating_add(n) > self.share {
            return Err(Full::Client);
        }
        Ok(())
    }

    /// Takes `n` units for `c` when both caps allow it.
    pub fn take(&mut self, c: ClientKey, n: u64) -> Result<(), Full> {
        self.check(c, n)?;
        self.charge(c, n);
        Ok(())
    }

    /// Takes `n` units for `c` whatever the caps say (state that grows after
    /// it was admitted, e.g. a transaction's final response); new work is
    /// refused until it is given back.
    pub fn charge(&mut self, c: ClientKey, n: u64) {
        if n == 0 {
            return;
        }
        self.used = self.used.saturating_add(n);
        *self.by_client.entry(c).or_insert(0) += n;
    }

    /// Gives back `n` units of `c`.
    pub fn give_back(&mut self, c: ClientKey, n: u64) {
        if n == 0 {
            return;
        }
        self.used = self.used.saturating_sub(n);
        if let Some(h) = self.by_client.get_mut(&c) {
            *h = h.saturating_sub(n);
            if *h == 0 {
                self.by_client.remove(&c);
            }
        }
    }

    /// Moves `c`'s charge from `old` to `new` units.
    pub fn recharge(&mut self, c: ClientKey, old: u64, new: u64) {
        if new > old {
            self.charge(c, new - old);
        } else {
            self.give_back(c, old - new);
        }
    }

    /// Units held now.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The global cap.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// One client's share.
    pub fn share(&self) -> u64 {
        self.share
    }

    /// Units `c` holds.
    pub fn held_by(&self, c: ClientKey) -> u64 {
        self.by_client.get(&c).copied().unwrap_or(0)
    }

    /// Clients holding something.
    pub fn clients(&self) -> usize {
        self.by_client.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_client_holds_at_most_its_share_and_all_at_most_the_cap() {
        let c = |i: u8| ClientKey::V4(Ipv4Addr::new(192, 0, 2, i));
        let mut s = Shares::new(100, 25);
        assert_eq!(s.share(), 25);
        assert_eq!(s.take(c(1), 20), Ok(()));
        assert_eq!(s.take(c(1), 6), Err(Full::Client), "26 > 25");
        assert_eq!(s.take(c(1), 5), Ok(()));
        for i in 2..=4 {
            assert_eq!(s.take(c(i), 25), Ok(()));
        }
        assert_eq!(s.used(), 100);
        assert_eq!(s.take(c(5), 1), Err(Full::Global));
        s.give_back(c(2), 25);
        assert_eq!(s.clients(), 3, "a client holding nothing is forgotten");
        assert_eq!(s.take(c(5), 1), Ok(()));
        // Charged beyond the caps: held, new work refused until given back.
        s.charge(c(5), 50);
        assert_eq!((s.used(), s.held_by(c(5))), (126, 51));
        assert_eq!(s.check(c(6), 1), Err(Full::Global));
        s.recharge(c(5), 51, 1);
        assert_eq!((s.used(), s.held_by(c(5))), (76, 1));
        // A reload changes the caps, not what is held.
        s.set_limits(1000, 100);
        assert_eq!((s.limit(), s.share(), s.used()), (1000, 1000, 76));
        assert_eq!(share_of(3, 10), 1, "a share is at least one unit");
    }
}
