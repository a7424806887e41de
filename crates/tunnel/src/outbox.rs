//! What a core asks its runner to send: packets with a destination, kept
//! in one reusable buffer (no allocation per packet once warm).

use core::net::{Ipv4Addr, SocketAddrV4};

/// Where a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// An IPv6 packet for the IPv6 side (the TUN device).
    Tun,
    /// A complete IPv4 packet (header included) for the protocol-41 raw
    /// socket, to this IPv4 destination.
    Raw4(Ipv4Addr),
    /// A UDP payload, sent from the core's socket number `sock` (Teredo
    /// server: 0 primary, 1 secondary; client and relay: 0) to `to`.
    Udp {
        /// Which of the core's sockets sends it.
        sock: u8,
        /// Destination address and port.
        to: SocketAddrV4,
    },
}

/// Packets to send, in order.
#[derive(Debug, Default)]
pub struct Outbox {
    buf: Vec<u8>,
    items: Vec<(Dest, usize, usize)>,
}

impl Outbox {
    /// An empty outbox.
    pub fn new() -> Self {
        Outbox { buf: Vec::with_capacity(4096), items: Vec::with_capacity(8) }
    }

    /// Forget every packet (keeping the memory).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.items.clear();
    }

    /// Number of packets.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Queue a copy of `bytes` for `d`.
    pub fn push(&mut self, d: Dest, bytes: &[u8]) {
        let at = self.buf.len();
        self.buf.extend_from_slice(bytes);
        self.items.push((d, at, bytes.len()));
    }

    /// Queue a packet written in place by `f` into at most `max` bytes;
    /// `f` returns the length written, or `None` to queue nothing.
    pub fn push_with(&mut self, d: Dest, max: usize, f: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let at = self.buf.len();
        self.buf.resize(at + max, 0);
        match f(&mut self.buf[at..]) {
            Some(n) if n <= max => {
                self.buf.truncate(at + n);
                self.items.push((d, at, n));
                true
            }
            _ => {
                self.buf.truncate(at);
                false
            }
        }
    }

    /// The packets in order.
    pub fn iter(&self) -> impl Iterator<Item = (Dest, &[u8])> + '_ {
        self.items.iter().map(|&(d, at, n)| (d, &self.buf[at..at + n]))
    }
}

/// Declare a counters struct: named `u64` fields, `Default`, `Serialize`,
/// and `pairs()` listing `(name, value)` for metrics and status.
#[macro_export]
macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $( $(#[$fm:meta])* $field:ident ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
        pub struct $name { $( $(#[$fm])* pub $field: u64, )* }

        impl $name {
            /// `(name, value)` of every counter, in declaration order.
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$( (stringify!($field), self.$field), )*]
            }

            /// Add another set of counters into this one.
            pub fn add(&mut self, o: &Self) {
                $( self.$field += o.$field; )*
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_keep_order_and_bytes() {
        let mut o = Outbox::new();
        o.push(Dest::Tun, &[1, 2, 3]);
        assert!(o.push_with(Dest::Raw4(Ipv4Addr::LOCALHOST), 10, |b| {
            b[..2].copy_from_slice(&[9, 9]);
            Some(2)
        }));
        assert!(!o.push_with(Dest::Tun, 10, |_| None));
        assert!(!o.push_with(Dest::Tun, 4, |_| Some(5)), "a writer claiming more than max is refused");
        let v: Vec<_> = o.iter().collect();
        assert_eq!(v, vec![(Dest::Tun, &[1u8, 2, 3][..]), (Dest::Raw4(Ipv4Addr::LOCALHOST), &[9u8, 9][..])]);
        o.clear();
        assert!(o.is_empty());
    }
}
