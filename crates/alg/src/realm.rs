//! Which realm a request goes to, and where exactly (RFC 3263 §4): an IP
//! literal decides by itself; a host name first meets the configured
//! domain routes (longest suffix wins), then DNS through a [`Resolver`] —
//! a trait, so the core stays free of I/O: the runner's resolver answers
//! from its cache or says [`Resolution::Pending`] and looks the name up in
//! the background; the core parks the request and runs it again once the
//! runner reports the answer ([`crate::Alg::retry_parked`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use crate::config::{Route, Transport};
use crate::uri::{Host, Scheme, Uri};

/// The two sides of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Realm {
    /// The IPv6 realm.
    V6,
    /// The IPv4 realm.
    V4,
}

impl Realm {
    /// The realm of an address (IPv4-mapped IPv6 counts as IPv4).
    pub fn of(ip: IpAddr) -> Realm {
        match ip {
            IpAddr::V4(_) => Realm::V4,
            IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => Realm::V4,
            IpAddr::V6(_) => Realm::V6,
        }
    }
    /// True for the IPv6 realm.
    pub fn v6(self) -> bool {
        self == Realm::V6
    }
    /// The other realm.
    pub fn other(self) -> Realm {
        match self {
            Realm::V6 => Realm::V4,
            Realm::V4 => Realm::V6,
        }
    }
}

/// Where to send a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Destination.
    pub addr: SocketAddr,
    /// Transport.
    pub transport: Transport,
}

/// A lookup's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Destinations in the order to try.
    Ready(Vec<Target>),
    /// Being looked up; try again after the runner says so.
    Pending,
    /// No address (the reason).
    Failed(String),
}

/// DNS for the core (RFC 3263 NAPTR → SRV → AAAA/A behind it).
pub trait Resolver: Send {
    /// Destinations for `host` (`port`/`transport` when the URI gave
    /// them; `sips` for SIPS URIs).
    fn resolve(&mut self, host: &str, port: Option<u16>, transport: Option<Transport>, now: Instant) -> Resolution;
}

/// A fixed table (tests, and setups without DNS). Unknown names fail.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    /// Name (lowercase) → destinations.
    pub names: HashMap<String, Vec<Target>>,
    /// Names answered `Pending` until [`StaticResolver::release`].
    pub pending: Vec<String>,
}

impl StaticResolver {
    /// Adds a name.
    pub fn add(&mut self, name: &str, addr: SocketAddr, transport: Transport) {
        self.names.entry(name.to_ascii_lowercase()).or_default().push(Target { addr, transport });
    }
    /// Makes `name` answer Pending (a slow lookup).
    pub fn hold(&mut self, name: &str) {
        self.pending.push(name.to_ascii_lowercase());
    }
    /// Ends a [`StaticResolver::hold`].
    pub fn release(&mut self, name: &str) {
        self.pending.retain(|n| n != &name.to_ascii_lowercase());
    }
}

impl Resolver for StaticResolver {
    fn resolve(&mut self, host: &str, port: Option<u16>, transport: Option<Transport>, _: Instant) -> Resolution {
        let h = host.to_ascii_lowercase();
        if self.pending.contains(&h) {
            return Resolution::Pending;
        }
        match self.names.get(&h) {
            Some(t) => Resolution::Ready(
                t.iter()
                    .map(|t| Target {
                        addr: SocketAddr::new(t.addr.ip(), port.unwrap_or(t.addr.port())),
                        transport: transport.unwrap_or(t.transport),
                    })
                    .collect(),
            ),
            None => Resolution::Failed(format!("no address for {host}")),
        }
    }
}

/// The route for `host` among `routes` (the domain itself or a subdomain;
/// the longest matching domain wins).
pub fn domain_route<'r>(routes: &'r [Route], host: &str) -> Option<&'r Route> {
    routes
        .iter()
        .filter(|r| {
            let d = r.domain.as_str();
            host.len() >= d.len()
                && host[host.len() - d.len()..].eq_ignore_ascii_case(d)
                && (host.len() == d.len() || host.as_bytes()[host.len() - d.len() - 1] == b'.')
        })
        .max_by_key(|r| r.domain.len())
}

/// Destinations for a next-hop URI: literal, domain route or DNS.
pub fn targets(uri: &Uri, routes: &[Route], resolver: &mut dyn Resolver, now: Instant) -> Resolution {
    if !matches!(uri.scheme, Scheme::Sip | Scheme::Sips) {
        return Resolution::Failed("not a SIP URI".into());
    }
    let transport = match uri.transport() {
        Some(t) => match Transport::from_token(t) {
            Some(t) => Some(t),
            None => return Resolution::Failed(format!("unsupported transport {t}")),
        },
        None if uri.scheme == Scheme::Sips => return Resolution::Failed("sips needs TLS (not supported yet)".into()),
        None => None,
    };
    // maddr overrides the host (RFC 3261 §19.1.1).
    let maddr = uri.param("maddr").flatten();
    let host = match maddr {
        Some(m) => match crate::uri::parse_hostport(m) {
            Ok((h, _)) => h,
            Err(e) => return Resolution::Failed(format!("bad maddr: {e}")),
        },
        None => uri.host,
    };
    match host {
        Host::V4(_) | Host::V6(_) => {
            let ip = host.ip().expect("literal");
            let ip = match ip {
                IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                v4 => v4,
            };
            Resolution::Ready(vec![Target {
                addr: SocketAddr::new(ip, uri.port.unwrap_or(5060)),
                transport: transport.unwrap_or_default(),
            }])
        }
        Host::Name(name) => {
            if let Some(r) = domain_route(routes, name) {
                return Resolution::Ready(vec![Target { addr: r.next_hop, transport: r.transport }]);
            }
            resolver.resolve(name, uri.port, transport, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(d: &str, hop: &str) -> Route {
        Route { domain: d.into(), next_hop: hop.parse().unwrap(), transport: Transport::Udp }
    }

    #[test]
    fn literals_routes_and_dns() {
        let routes = [route("ipv4.example", "192.0.2.10:5060"), route("deep.ipv4.example", "192.0.2.11:5070")];
        let mut r = StaticResolver::default();
        r.add("v6.example", "[2001:db8::5]:5062".parse().unwrap(), Transport::Tcp);
        let now = Instant::now();
        let t = |u: &str, r: &mut StaticResolver| targets(&Uri::parse(u).unwrap(), &routes, r, now);
        assert_eq!(
            t("sip:bob@[2001:db8::7]", &mut r),
            Resolution::Ready(vec![Target { addr: "[2001:db8::7]:5060".parse().unwrap(), transport: Transport::Udp }])
        );
        assert_eq!(
            t("sip:bob@192.0.2.7:5080;transport=tcp", &mut r),
            Resolution::Ready(vec![Target { addr: "192.0.2.7:5080".parse().unwrap(), transport: Transport::Tcp }])
        );
        // IPv4-mapped literal goes to the IPv4 realm.
        let Resolution::Ready(v) = t("sip:[::ffff:192.0.2.9]", &mut r) else { panic!() };
        assert_eq!(Realm::of(v[0].addr.ip()), Realm::V4);
        let Resolution::Ready(v) = t("sip:x@a.deep.ipv4.example", &mut r) else { panic!() };
        assert_eq!(v[0].addr.port(), 5070, "longest suffix wins");
        let Resolution::Ready(v) = t("sip:x@IPv4.Example", &mut r) else { panic!() };
        assert_eq!(v[0].addr.port(), 5060);
        assert!(matches!(t("sip:x@notipv4.example", &mut r), Resolution::Failed(_)));
        let Resolution::Ready(v) = t("sip:v6.example", &mut r) else { panic!() };
        assert_eq!(v[0], Target { addr: "[2001:db8::5]:5062".parse().unwrap(), transport: Transport::Tcp });
        r.hold("v6.example");
        assert_eq!(t("sip:v6.example", &mut r), Resolution::Pending);
        assert!(matches!(t("sip:x@h;transport=sctp", &mut r), Resolution::Failed(_)));
        let Resolution::Ready(v) = t("sip:x@h.example;maddr=192.0.2.99", &mut r) else { panic!() };
        assert_eq!(v[0].addr.ip(), "192.0.2.99".parse::<IpAddr>().unwrap());
    }
}
