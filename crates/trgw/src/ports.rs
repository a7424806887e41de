//! Media port allocation: a free list of even (RTP) ports per bind
//! address; the odd port above each is its RTCP port. O(1) take and
//! release; a port whose bind fails (someone else holds it) goes to the
//! back of the list. In the shared-socket mode no socket is kept per port,
//! but the pair is still bound once the first time it is handed out
//! (`crate::shared::ProbeCache`), so the same rule holds.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// The RTP ports of the range `min..=max`: the even ports whose RTCP port
/// (the odd one above) is in range too.
pub(crate) fn rtp_ports(min: u16, max: u16) -> impl Iterator<Item = u16> {
    (min + (min & 1)..max).step_by(2)
}

/// Free RTP ports per local address.
#[derive(Debug)]
pub struct Ports {
    min: u16,
    max: u16,
    free: HashMap<IpAddr, VecDeque<u16>>,
}

impl Ports {
    /// Ports `min..=max` (RTP = even ports whose RTCP port is in range).
    pub fn new(min: u16, max: u16) -> Self {
        Ports { min, max, free: HashMap::new() }
    }

    fn list(&mut self, addr: IpAddr) -> &mut VecDeque<u16> {
        let (min, max) = (self.min, self.max);
        self.free.entry(addr).or_insert_with(|| rtp_ports(min, max).collect())
    }

    /// Takes a free RTP port on `addr` (its RTCP port is `port + 1`).
    pub fn take(&mut self, addr: IpAddr) -> Option<u16> {
        self.list(addr).pop_front()
    }

    /// Returns a port to the free list.
    pub fn release(&mut self, addr: IpAddr, port: u16) {
        let l = self.list(addr);
        l.push_back(port);
    }

    /// Free RTP ports on `addr`.
    pub fn available(&mut self, addr: IpAddr) -> usize {
        self.list(addr).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_ports_until_exhausted() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        let mut p = Ports::new(30000, 30005);
        assert_eq!(p.take(a), Some(30000));
        assert_eq!(p.take(a), Some(30002));
        assert_eq!(p.take(a), Some(30004));
        assert_eq!(p.take(a), None);
        assert_eq!(p.take(b), Some(30000), "each address has its own ports");
        p.release(a, 30002);
        assert_eq!(p.take(a), Some(30002));
        let mut q = Ports::new(30001, 30004);
        assert_eq!(q.take(a), Some(30002));
        assert_eq!(q.take(a), None, "30004's RTCP port 30005 is out of range");
    }
}
