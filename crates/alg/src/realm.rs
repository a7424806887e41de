//! Which realm a request goes to, and where exactly (RFC 3263 §4): an IP
//! literal decides by itself; a host name first meets the configured
//! domain routes (longest suffix wins), then DNS through a [`Resolver`] —
//! a trait, so the core stays free of I/O: the runner's resolver answers
//! from its cache or says [`Resolution::Pending`] and looks the name up in
//! the background; the core parks the request and runs it again with the
//! answer once the resolver reports it ([`crate::Alg::dns_completed`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use crate::config::{Route, Transport};
use crate::shares::ClientKey;
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

/// What one DNS lookup asks: a host name (lowercase), and the port and
/// transport the URI gave (RFC 3263 §4.1/§4.2 skip NAPTR or SRV with them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LookupKey {
    /// The name, lowercase.
    pub host: String,
    /// The URI's port.
    pub port: Option<u16>,
    /// The URI's transport.
    pub transport: Option<Transport>,
}

impl LookupKey {
    /// The key for `host` with the URI's `port` and `transport`.
    pub fn new(host: &str, port: Option<u16>, transport: Option<Transport>) -> LookupKey {
        LookupKey { host: host.to_ascii_lowercase(), port, transport }
    }
}

/// A lookup's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Destinations in the order to try.
    Ready(Vec<Target>),
    /// Being looked up: the answer comes from [`Resolver::poll_done`].
    Pending,
    /// The name has no usable address (the reason): `404`.
    Failed(String),
    /// No answer within the lookup's deadline, or the servers failed:
    /// `504` (RFC 3261 §21.5.5: no timely answer from a server the
    /// proxy needed).
    TimedOut,
    /// Too many lookups in flight (all of them, or the client's share):
    /// `503` with Retry-After.
    Busy,
}

/// DNS for the core (RFC 3263 NAPTR → SRV → AAAA/A behind it).
pub trait Resolver: Send {
    /// Destinations for `key`, on behalf of `client` (whose share of the
    /// lookups in flight a new lookup counts against).
    fn resolve(&mut self, client: ClientKey, key: &LookupKey, now: Instant) -> Resolution;
    /// A lookup that finished (never `Pending`), once.
    fn poll_done(&mut self) -> Option<(LookupKey, Resolution)> {
        None
    }
    /// New limits from a reload (lookups in flight, client share, timeout).
    fn reconfigure(&mut self, _cfg: &crate::Config) {}
    /// (lookups in flight, their cap).
    fn in_flight(&self) -> (usize, usize) {
        (0, 0)
    }
}

/// A fixed table (tests, and setups without DNS). Unknown names fail.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    /// Name (lowercase) → destinations.
    pub names: HashMap<String, Vec<Target>>,
    /// Names answered `Pending` until [`StaticResolver::release`].
    pub pending: Vec<String>,
    /// Names whose lookup never finishes in time (`TimedOut` once released).
    pub silent: Vec<String>,
    /// Lookups that [`StaticResolver::release`] finished.
    done: std::collections::VecDeque<(LookupKey, Resolution)>,
    /// Keys asked while pending (what `release` finishes).
    asked: Vec<LookupKey>,
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
    /// Ends a [`StaticResolver::hold`]: the lookups asked for `name`
    /// finish with its table entry.
    pub fn release(&mut self, name: &str) {
        let n = name.to_ascii_lowercase();
        self.pending.retain(|p| *p != n);
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.asked).into_iter().partition(|k| k.host == n);
        self.asked = rest;
        for k in mine {
            let r = if self.silent.contains(&n) { Resolution::TimedOut } else { self.lookup(&k) };
            self.done.push_back((k, r));
        }
    }
    fn lookup(&self, key: &LookupKey) -> Resolution {
        match self.names.get(&key.host) {
            Some(t) => Resolution::Ready(
                t.iter()
                    .map(|t| Target {
                        addr: SocketAddr::new(t.addr.ip(), key.port.unwrap_or(t.addr.port())),
                        transport: key.transport.unwrap_or(t.transport),
                    })
                    .collect(),
            ),
            None => Resolution::Failed(format!("no address for {}", key.host)),
        }
    }
}

impl Resolver for StaticResolver {
    fn resolve(&mut self, _: ClientKey, key: &LookupKey, _: Instant) -> Resolution {
        if self.pending.contains(&key.host) {
            if !self.asked.contains(key) {
                self.asked.push(key.clone());
            }
            return Resolution::Pending;
        }
        self.lookup(key)
    }
    fn poll_done(&mut self) -> Option<(LookupKey, Resolution)> {
        self.done.pop_front()
    }
}

/// A resolver shared with its owner (tests release held names).
impl<R: Resolver> Resolver for std::sync::Arc<std::sync::Mutex<R>> {
    fn resolve(&mut self, client: ClientKey, key: &LookupKey, now: Instant) -> Resolution {
        function::lock(self).resolve(client, key, now)
    }
    fn poll_done(&mut self) -> Option<(LookupKey, Resolution)> {
        function::lock(self).poll_done()
    }
    fn reconfigure(&mut self, cfg: &crate::Config) {
        function::lock(self).reconfigure(cfg)
    }
    fn in_flight(&self) -> (usize, usize) {
        function::lock(self).in_flight()
    }
}

/// Where a next-hop URI leads before DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// An IP literal or a domain route: these destinations.
    Ready(Vec<Target>),
    /// A name for DNS.
    Lookup(LookupKey),
    /// Unusable (the reason): `404`.
    Failed(String),
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

/// Destinations for a next-hop URI: a literal or a domain route, or the
/// DNS lookup it needs.
pub fn locate(uri: &Uri, routes: &[Route]) -> Located {
    if !matches!(uri.scheme, Scheme::Sip | Scheme::Sips) {
        return Located::Failed("not a SIP URI".into());
    }
    let transport = match uri.transport() {
        Some(t) => match Transport::from_token(t) {
            Some(t) => Some(t),
            None => return Located::Failed(format!("unsupported transport {t}")),
        },
        None if uri.scheme == Scheme::Sips => return Located::Failed("sips needs TLS (not supported yet)".into()),
        None => None,
    };
    // maddr overrides the host (RFC 3261 §19.1.1).
    let maddr = uri.param("maddr").flatten();
    let host = match maddr {
        Some(m) => match crate::uri::parse_hostport(m) {
            Ok((h, _)) => h,
            Err(e) => return Located::Failed(format!("bad maddr: {e}")),
        },
        None => uri.host,
    };
    match host {
        Host::V4(_) | Host::V6(_) => {
            let Some(ip) = host.ip() else { return Located::Failed("no address".into()) };
            let ip = match ip {
                IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                v4 => v4,
            };
            Located::Ready(vec![Target {
                addr: SocketAddr::new(ip, uri.port.unwrap_or(5060)),
                transport: transport.unwrap_or_default(),
            }])
        }
        Host::Name(name) => match domain_route(routes, name) {
            Some(r) => Located::Ready(vec![Target { addr: r.next_hop, transport: r.transport }]),
            None => Located::Lookup(LookupKey::new(name, uri.port, transport)),
        },
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
        let c = ClientKey::V4(std::net::Ipv4Addr::LOCALHOST);
        let t = |u: &str, r: &mut StaticResolver| match locate(&Uri::parse(u).unwrap(), &routes) {
            Located::Ready(v) => Resolution::Ready(v),
            Located::Failed(e) => Resolution::Failed(e),
            Located::Lookup(k) => r.resolve(c, &k, now),
        };
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
        assert_eq!(t("sip:V6.example:5099", &mut r), Resolution::Pending);
        assert_eq!(r.poll_done(), None);
        r.release("v6.example");
        let (k, Resolution::Ready(v)) = r.poll_done().unwrap() else { panic!() };
        assert_eq!((k.host.as_str(), k.port, v[0].addr.port()), ("v6.example", None, 5062));
        let (k, Resolution::Ready(v)) = r.poll_done().unwrap() else { panic!() };
        assert_eq!((k.port, v[0].addr.port()), (Some(5099), 5099), "the URI's port");
        assert_eq!(r.poll_done(), None);
        assert!(matches!(t("sip:x@h;transport=sctp", &mut r), Resolution::Failed(_)));
        let Resolution::Ready(v) = t("sip:x@h.example;maddr=192.0.2.99", &mut r) else { panic!() };
        assert_eq!(v[0].addr.ip(), "192.0.2.99".parse::<IpAddr>().unwrap());
    }
}
