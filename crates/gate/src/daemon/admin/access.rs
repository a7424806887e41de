//! Who may use the admin API: the `Host` and `Origin` checks and the
//! bearer token (pure functions over header bytes: fuzzed as
//! `admin_request`).
//!
//! - Exactly one `Host` (RFC 9112 §3.2: none, or more than one, is a
//!   `400`), naming this server: `localhost`, a loopback literal, the
//!   address the connection came in on, or a name of `[admin] hosts`; with
//!   a port, the port the connection came in on. A browser tricked by DNS
//!   rebinding sends the attacker's name: refused (`403`). A request
//!   target in absolute form (`GET http://name/status`) must name this
//!   server the same way, with the `http` scheme (it is what a proxy would
//!   act on: RFC 9112 §3.2.2).
//! - `Origin`, when present, must be `http://` + such a host: a page of
//!   another site (which a browser marks with its own origin) is refused.
//! - `POST` (every state-changing endpoint) needs
//!   `Authorization: Bearer <token>` when `[admin] token`/`token-file` is
//!   set; with no token set it is accepted from loopback peers only.
//! - With `[admin] token-for-read`, `GET` needs the token too.

use std::net::{IpAddr, SocketAddr};

use super::Limits;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No `Host` header.
    NoHost,
    /// More than one `Host` header.
    DuplicateHost,
    /// `Host` names another server.
    Host,
    /// An absolute-form request target names another server (or scheme).
    Target,
    /// `Origin` is another site.
    Origin,
    /// Missing or wrong bearer token.
    Token,
    /// A state-changing request from a non-loopback peer with no token set.
    RemoteWithoutToken,
}

impl Denied {
    /// HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Denied::NoHost | Denied::DuplicateHost => 400,
            Denied::Token => 401,
            _ => 403,
        }
    }

    /// The error text.
    pub fn message(self) -> &'static str {
        match self {
            Denied::NoHost => "a Host header is required (RFC 9112 3.2)",
            Denied::DuplicateHost => "more than one Host header (RFC 9112 3.2)",
            Denied::Host => "the Host header does not name this server ([admin] hosts lists further names)",
            Denied::Target => "the request target names another server: this is not a proxy",
            Denied::Origin => "cross-origin requests are refused (the Origin header is not this server)",
            Denied::Token => "missing or wrong token: send Authorization: Bearer <[admin] token>",
            Denied::RemoteWithoutToken => {
                "state-changing requests from other hosts need [admin] token or token-file to be set"
            }
        }
    }
}

/// What the checks look at.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// POST: the request changes state.
    pub method_changes_state: bool,
    /// The `Host` header (the first, when there are several).
    pub host: Option<&'a [u8]>,
    /// How many `Host` headers the request has (exactly one is accepted).
    pub host_count: usize,
    /// The scheme of an absolute-form request target (`http` of
    /// `GET http://name/path`).
    pub target_scheme: Option<&'a str>,
    /// The authority of an absolute-form (or authority-form) request target.
    pub target_authority: Option<&'a str>,
    /// The `Origin` header.
    pub origin: Option<&'a [u8]>,
    /// The `Authorization` header.
    pub authorization: Option<&'a [u8]>,
    /// The peer's address.
    pub peer: IpAddr,
    /// The address the connection came in on.
    pub local: SocketAddr,
}

/// Splits `name[:port]` / `[v6]:port`; None when malformed.
pub fn split_host(h: &str) -> Option<(&str, Option<u16>)> {
    let h = h.trim();
    if h.is_empty() {
        return None;
    }
    if let Some(rest) = h.strip_prefix('[') {
        let (addr, tail) = rest.split_once(']')?;
        let port = match tail {
            "" => None,
            t => Some(t.strip_prefix(':')?.parse().ok()?),
        };
        return Some((addr, port));
    }
    match h.rsplit_once(':') {
        Some((n, p)) if !n.contains(':') => Some((n, Some(p.parse().ok()?))),
        Some(_) => None, // a bare IPv6 literal without brackets
        None => Some((h, None)),
    }
}

/// Whether `host` (a `Host` header value or an origin's host part) names
/// this server reached at `local`.
pub fn host_allowed(host: &str, local: SocketAddr, extra: &[String]) -> bool {
    let Some((name, port)) = split_host(host) else { return false };
    if port.is_some_and(|p| p != local.port()) {
        return false;
    }
    let name = name.trim_end_matches('.');
    if name.eq_ignore_ascii_case("localhost") || extra.iter().any(|e| e.eq_ignore_ascii_case(name)) {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip == local.ip(),
        Err(_) => false,
    }
}

/// Whether an `Origin` header is this server.
pub fn origin_allowed(origin: &str, local: SocketAddr, extra: &[String]) -> bool {
    match origin.trim().strip_prefix("http://") {
        Some(h) => {
            // With no port, http:// means port 80.
            let with_port = match split_host(h) {
                Some((_, Some(_))) => h.to_string(),
                Some((n, None)) if n.contains(':') => format!("[{n}]:80"),
                Some((n, None)) => format!("{n}:80"),
                None => return false,
            };
            host_allowed(&with_port, local, extra)
        }
        None => false,
    }
}

/// Compares in time independent of where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `authorization` carries `token`.
pub fn token_ok(authorization: Option<&[u8]>, token: &str) -> bool {
    let Some(a) = authorization else { return false };
    let Some(rest) = a.strip_prefix(b"Bearer ").or_else(|| a.strip_prefix(b"bearer ")) else { return false };
    same(rest.trim_ascii(), token.as_bytes())
}

/// Every check, in order: Host, the request target, Origin, token.
pub fn check(r: &Request<'_>, token: Option<&str>, limits: &Limits) -> Result<(), Denied> {
    let host = match (r.host, r.host_count) {
        (_, 2..) => return Err(Denied::DuplicateHost),
        (Some(h), _) => h,
        (None, _) => return Err(Denied::NoHost),
    };
    if !std::str::from_utf8(host).is_ok_and(|h| host_allowed(h, r.local, &limits.hosts)) {
        return Err(Denied::Host);
    }
    if r.target_scheme.is_some_and(|s| !s.eq_ignore_ascii_case("http")) {
        return Err(Denied::Target);
    }
    if let Some(a) = r.target_authority {
        // http:// without a port means port 80, as for Origin.
        let with_port = match split_host(a) {
            Some((_, Some(_))) => a.to_string(),
            Some((n, None)) if n.contains(':') => format!("[{n}]:80"),
            Some((n, None)) => format!("{n}:80"),
            None => return Err(Denied::Target),
        };
        if a.contains('@') || !host_allowed(&with_port, r.local, &limits.hosts) {
            return Err(Denied::Target);
        }
    }
    if let Some(o) = r.origin {
        let ok = std::str::from_utf8(o).is_ok_and(|o| origin_allowed(o, r.local, &limits.hosts));
        if !ok {
            return Err(Denied::Origin);
        }
    }
    let needs_token = r.method_changes_state || limits.token_for_read;
    match token {
        Some(t) if needs_token && !token_ok(r.authorization, t) => Err(Denied::Token),
        None if r.method_changes_state && !r.peer.is_loopback() => Err(Denied::RemoteWithoutToken),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AdminConfig;

    fn limits() -> Limits {
        let mut l = Limits::of(&AdminConfig::default());
        l.hosts = vec!["gw1.example.net".into()];
        l
    }

    fn req<'a>(post: bool, host: Option<&'a str>, origin: Option<&'a str>, auth: Option<&'a str>) -> Request<'a> {
        Request {
            method_changes_state: post,
            host: Some(host.unwrap_or("localhost:9164").as_bytes()),
            host_count: 1,
            target_scheme: None,
            target_authority: None,
            origin: origin.map(str::as_bytes),
            authorization: auth.map(str::as_bytes),
            peer: "127.0.0.1".parse().unwrap(),
            local: "127.0.0.1:9164".parse().unwrap(),
        }
    }

    #[test]
    fn host_names_this_server_only() {
        let l: SocketAddr = "192.0.2.1:9164".parse().unwrap();
        let extra = vec!["gw1.example.net".to_string()];
        for h in [
            "localhost",
            "localhost:9164",
            "127.0.0.1:9164",
            "[::1]:9164",
            "192.0.2.1:9164",
            "GW1.example.net.",
            "[::1]",
        ] {
            assert!(host_allowed(h, l, &extra), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:9164",
            "localhost:80",
            "192.0.2.2:9164",
            "",
            "[::1",
            "::1",
            "localhost:x",
            "[::1]x",
        ] {
            assert!(!host_allowed(h, l, &extra), "{h}");
        }
    }

    #[test]
    fn origin_must_be_this_server() {
        let l: SocketAddr = "127.0.0.1:9164".parse().unwrap();
        assert!(origin_allowed("http://127.0.0.1:9164", l, &[]));
        assert!(origin_allowed("http://localhost:9164", l, &[]));
        for o in ["null", "http://evil.example:9164", "https://127.0.0.1:9164", "http://localhost", "file://"] {
            assert!(!origin_allowed(o, l, &[]), "{o}");
        }
        let l80: SocketAddr = "127.0.0.1:80".parse().unwrap();
        assert!(origin_allowed("http://localhost", l80, &[]));
    }

    /// Issue #29: a duplicate Host, a request without one, and an
    /// absolute-form target naming a foreign host were accepted.
    #[test]
    fn exactly_one_host_and_no_foreign_target() {
        let l = limits();
        let base = req(false, Some("localhost:9164"), None, None);
        assert_eq!(check(&base, None, &l), Ok(()));
        let none = Request { host: None, host_count: 0, ..base.clone() };
        assert_eq!(check(&none, None, &l), Err(Denied::NoHost));
        assert_eq!(Denied::NoHost.status(), 400);
        let two = Request { host_count: 2, ..base.clone() };
        assert_eq!(check(&two, None, &l), Err(Denied::DuplicateHost));
        assert_eq!(Denied::DuplicateHost.status(), 400);
        let target = |scheme: &'static str, auth: &'static str| Request {
            target_scheme: Some(scheme),
            target_authority: Some(auth),
            ..base.clone()
        };
        for (scheme, auth) in [("http", "127.0.0.1:9164"), ("http", "localhost:9164"), ("HTTP", "gw1.example.net:9164")]
        {
            assert_eq!(check(&target(scheme, auth), None, &l), Ok(()), "{scheme}://{auth}");
        }
        for (scheme, auth) in [
            ("http", "evil.example"),
            ("http", "evil.example:9164"),
            ("http", "localhost"),
            ("http", "192.0.2.9:9164"),
            ("http", "user@localhost:9164"),
            ("https", "localhost:9164"),
            ("http", ""),
        ] {
            assert_eq!(check(&target(scheme, auth), None, &l), Err(Denied::Target), "{scheme}://{auth}");
        }
        let authority_form = Request { target_authority: Some("evil.example:443"), ..base.clone() };
        assert_eq!(check(&authority_form, None, &l), Err(Denied::Target));
        assert_eq!(Denied::Target.status(), 403);
    }

    #[test]
    fn token_and_loopback_rules() {
        let l = limits();
        let tok = Some("s3cret-s3cret-s3cret");
        assert_eq!(check(&req(false, Some("localhost:9164"), None, None), tok, &l), Ok(()), "GET needs no token");
        assert_eq!(check(&req(true, Some("localhost:9164"), None, None), tok, &l), Err(Denied::Token));
        assert_eq!(check(&req(true, None, None, Some("Bearer nope")), tok, &l), Err(Denied::Token));
        assert_eq!(check(&req(true, None, None, Some("Bearer s3cret-s3cret-s3cret")), tok, &l), Ok(()));
        assert_eq!(
            check(&req(true, Some("evil.example"), None, Some("Bearer s3cret-s3cret-s3cret")), tok, &l),
            Err(Denied::Host)
        );
        assert_eq!(
            check(&req(true, None, Some("http://evil.example"), Some("Bearer s3cret-s3cret-s3cret")), tok, &l),
            Err(Denied::Origin)
        );
        // No token: POST from loopback only.
        assert_eq!(check(&req(true, None, None, None), None, &l), Ok(()));
        let mut remote = req(true, None, None, None);
        remote.peer = "192.0.2.9".parse().unwrap();
        assert_eq!(check(&remote, None, &l), Err(Denied::RemoteWithoutToken));
        // token-for-read.
        let mut lr = l.clone();
        lr.token_for_read = true;
        assert_eq!(check(&req(false, None, None, None), tok, &lr), Err(Denied::Token));
        assert_eq!(check(&req(false, None, None, Some("Bearer s3cret-s3cret-s3cret")), tok, &lr), Ok(()));
    }
}
