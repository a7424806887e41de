//! IPv6 addresses that carry an IPv4 address: sending to one reaches (or
//! is translated towards) the IPv4 address inside, so the policy judges
//! that IPv4 address too.
//!
//! - IPv4-compatible `::a.b.c.d` (RFC 4291 §2.5.5.1, deprecated);
//! - 6to4 `2002:V4ADDR::/48` (RFC 3056 §2): the relay router's IPv4 address;
//! - Teredo `2001:0::/32` (RFC 4380 §4): the server's IPv4 address and the
//!   client's mapped address, stored complemented ("obfuscated");
//! - the gateway's translation prefixes (RFC 6052 §2.2 at any of its
//!   lengths 32, 40, 48, 56, 64, 96: NAT64, SIIT, DNS64 and TRT), the
//!   well-known prefix 64:ff9b::/96 always (an embedded non-global IPv4
//!   address is never valid under it, RFC 6052 §3.1), IVI prefixes
//!   (RFC 6219) and EAMT entries (RFC 7757).
//!
//! IPv4-mapped addresses (`::ffff:a.b.c.d`) are not listed here: they are
//! how a dual-stack socket names an IPv4 peer, so the policy judges them
//! as the IPv4 address outright ([`crate::Policy`]).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use xlat::addr::{Eamt, Ivi, Prefix6, Rfc6052};
use xlat::tunnel::{sixto4, teredo};

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:a.b.c.d`.
    Mapped,
    /// `::a.b.c.d`.
    Compatible,
    /// `2002:V4ADDR::/48`.
    SixToFour,
    /// A Teredo address's server.
    TeredoServer,
    /// A Teredo address's (obfuscated) client address.
    TeredoClient,
    /// A translation prefix (RFC 6052).
    Rfc6052(Prefix6),
    /// An IVI prefix (RFC 6219).
    Ivi(Prefix6),
    /// An EAMT entry (RFC 7757).
    Eamt,
}

impl fmt::Display for Embedding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Embedding::Mapped => f.write_str("IPv4-mapped"),
            Embedding::Compatible => f.write_str("IPv4-compatible"),
            Embedding::SixToFour => f.write_str("6to4"),
            Embedding::TeredoServer => f.write_str("Teredo server"),
            Embedding::TeredoClient => f.write_str("Teredo client"),
            Embedding::Rfc6052(p) => write!(f, "translation prefix {p}"),
            Embedding::Ivi(p) => write!(f, "IVI prefix {p}"),
            Embedding::Eamt => f.write_str("EAMT"),
        }
    }
}

/// The embeddings the policy looks through: the fixed ones (compatible,
/// 6to4, Teredo, the well-known prefix) and the gateway's configured
/// translation prefixes, IVI prefixes and EAMTs.
#[derive(Debug, Clone)]
pub struct Embeddings {
    rfc6052: Vec<Rfc6052>,
    ivi: Vec<Ivi>,
    eamt: Vec<Eamt>,
}

impl Default for Embeddings {
    fn default() -> Self {
        Embeddings::new()
    }
}

impl Embeddings {
    /// The fixed embeddings and the well-known prefix 64:ff9b::/96.
    pub fn new() -> Self {
        let wkp = Rfc6052::new(xlat::addr::rfc6052::wkp()).into_iter().collect();
        Embeddings { rfc6052: wkp, ivi: Vec::new(), eamt: Vec::new() }
    }

    /// Adds a translation prefix (NAT64 `pool6`, SIIT `pool6`, a DNS64
    /// prefix, the TRT prefix); one already listed is not added twice.
    pub fn add_rfc6052(&mut self, p: Rfc6052) {
        if !self.rfc6052.iter().any(|q| q.prefix() == p.prefix()) {
            self.rfc6052.push(p);
        }
    }

    /// Adds an IVI mapping.
    pub fn add_ivi(&mut self, i: Ivi) {
        if !self.ivi.iter().any(|q| q.ivi_prefix() == i.ivi_prefix()) {
            self.ivi.push(i);
        }
    }

    /// Adds an EAMT (non-empty ones only).
    pub fn add_eamt(&mut self, e: Eamt) {
        if !e.is_empty() {
            self.eamt.push(e);
        }
    }

    /// The translation and IVI prefixes looked through (for `/status`).
    pub fn prefixes(&self) -> Vec<Prefix6> {
        self.rfc6052.iter().map(Rfc6052::prefix).chain(self.ivi.iter().map(Ivi::ivi_prefix)).collect()
    }

    /// Calls `f` with every IPv4 address `a` carries and how, stopping at
    /// the first error.
    pub fn each<E>(&self, a: &Ipv6Addr, mut f: impl FnMut(Embedding, Ipv4Addr) -> Result<(), E>) -> Result<(), E> {
        let v = u128::from(*a);
        if v >> 32 == 0 && v > 1 {
            f(Embedding::Compatible, Ipv4Addr::from(v as u32))?;
        }
        if let Some(v4) = sixto4::v4_of(a) {
            f(Embedding::SixToFour, v4)?;
        }
        if let Some(t) = teredo::TeredoAddr::from_ipv6(a) {
            f(Embedding::TeredoServer, t.server)?;
            f(Embedding::TeredoClient, *t.mapped.ip())?;
        }
        for p in &self.rfc6052 {
            if let Some(v4) = p.extract_unrestricted(a) {
                f(Embedding::Rfc6052(p.prefix()), v4)?;
            }
        }
        for i in &self.ivi {
            if let Some(v4) = i.extract(a) {
                f(Embedding::Ivi(i.ivi_prefix()), v4)?;
            }
        }
        for e in &self.eamt {
            if let Some(v4) = e.v6_to_v4(a) {
                f(Embedding::Eamt, v4)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(e: &Embeddings, a: &str) -> Vec<(Embedding, Ipv4Addr)> {
        let mut v = Vec::new();
        e.each::<()>(&a.parse().unwrap(), |k, a| {
            v.push((k, a));
            Ok(())
        })
        .unwrap();
        v
    }

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn p6(s: &str) -> Prefix6 {
        s.parse().unwrap()
    }

    #[test]
    fn fixed_embeddings() {
        let e = Embeddings::new();
        assert_eq!(all(&e, "::192.0.2.1"), [(Embedding::Compatible, v4("192.0.2.1"))]);
        assert!(all(&e, "::").is_empty() && all(&e, "::1").is_empty());
        assert_eq!(all(&e, "2002:c000:0201:5::9"), [(Embedding::SixToFour, v4("192.0.2.1"))]);
        // RFC 4380 §4's example: server 65.54.227.120, client 192.0.2.45:40000
        // (stored as 3fff:fffe:3fff:ffd2 complemented).
        assert_eq!(
            all(&e, "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            [(Embedding::TeredoServer, v4("65.54.227.120")), (Embedding::TeredoClient, v4("192.0.2.45"))]
        );
        // The well-known prefix, even for addresses it may not carry.
        let wkp = Embedding::Rfc6052(p6("64:ff9b::/96"));
        assert_eq!(all(&e, "64:ff9b::7f00:1"), [(wkp, v4("127.0.0.1"))]);
        assert_eq!(all(&e, "64:ff9b::c000:201"), [(wkp, v4("192.0.2.1"))]);
        assert!(all(&e, "2001:db8::c000:201").is_empty());
        assert!(all(&e, "::ffff:192.0.2.1").is_empty(), "mapped addresses are the policy's business");
    }

    /// RFC 6052 §2.4's table: 192.0.2.33 under each prefix length.
    #[test]
    fn rfc6052_every_length() {
        for (p, a) in xlat::testvec::RFC6052_2_4 {
            let mut e = Embeddings::new();
            e.add_rfc6052(Rfc6052::new(p6(p)).unwrap());
            e.add_rfc6052(Rfc6052::new(p6(p)).unwrap());
            assert_eq!(all(&e, a), [(Embedding::Rfc6052(p6(p)), xlat::testvec::RFC6052_2_4_IPV4)], "{p}");
            assert_eq!(e.prefixes().len(), 2, "{p}: added once, beside the well-known prefix");
        }
    }

    #[test]
    fn ivi_and_eamt() {
        let mut e = Embeddings::new();
        e.add_ivi(Ivi::new(p6("2001:dba::/32")).unwrap());
        let entries = [(p6("2001:db8:ee::/120"), "198.51.100.0/24".parse().unwrap())];
        e.add_eamt(Eamt::new(&entries).unwrap());
        e.add_eamt(Eamt::new(&[]).unwrap());
        assert_eq!(
            all(&e, "2001:dba:ffca:2661:cd::"),
            [(Embedding::Ivi(p6("2001:dba:ff00::/40")), v4("202.38.97.205"))]
        );
        assert_eq!(all(&e, "2001:db8:ee::7"), [(Embedding::Eamt, v4("198.51.100.7"))]);
    }

    #[test]
    fn each_stops_at_the_first_error() {
        let e = Embeddings::new();
        let mut seen = 0;
        let r = e.each(&"2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().unwrap(), |_, _| {
            seen += 1;
            Err(())
        });
        assert_eq!((r, seen), (Err(()), 1));
    }
}
