//! SIP URIs (RFC 3261 §19.1, §25.1, IPv6 references per RFC 5118), the
//! `name-addr` / `addr-spec` forms of From, To, Contact, Route,
//! Record-Route and Path (RFC 3261 §20.10), and header parameters.
//!
//! Everything is a view over the caller's text: spans into it, so a proxy
//! can replace one URI and copy the rest of a header byte for byte.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

/// The host part of a URI or a Via sent-by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host<'a> {
    /// An IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 reference (`[2001:db8::1]`).
    V6(Ipv6Addr),
    /// A host name.
    Name(&'a str),
}

impl Host<'_> {
    /// The address when the host is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match *self {
            Host::V4(a) => Some(IpAddr::V4(a)),
            Host::V6(a) => Some(IpAddr::V6(a)),
            Host::Name(_) => None,
        }
    }
}

/// Writes `ip` as a URI host (IPv6 in brackets, RFC 5118 §4.4).
pub fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

/// URI scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `sip:`
    Sip,
    /// `sips:`
    Sips,
    /// `tel:` (RFC 3966)
    Tel,
    /// Anything else (proxied only when a Route names the next hop).
    Other,
}

/// A parsed URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri<'a> {
    /// The whole URI text.
    pub text: &'a str,
    /// Its scheme.
    pub scheme: Scheme,
    /// `user[:password]` of a SIP URI.
    pub user: Option<&'a str>,
    /// Host of a SIP URI (`Name("")` for other schemes).
    pub host: Host<'a>,
    /// Explicit port.
    pub port: Option<u16>,
    /// `;param...` text, with its leading semicolon (may be empty).
    pub params: &'a str,
    /// `?headers` text without the `?`.
    pub headers: Option<&'a str>,
}

/// Why a URI or an address was refused.
pub type Bad = &'static str;

fn is_alpha(b: u8) -> bool {
    b.is_ascii_alphabetic()
}

/// RFC 3261 `token` characters.
pub fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b)
}

/// A non-empty RFC 3261 token.
pub fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_token_char)
}

/// Position of ASCII byte `c` in `s` (memchr: the searches of `str::find`
/// with a `char` were 5 % of the gateway's CPU).
pub(crate) fn pos(s: &str, c: u8) -> Option<usize> {
    debug_assert!(c.is_ascii());
    memchr::memchr(c, s.as_bytes())
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// The address of an IPv6 reference (without its brackets). RFC 3261's
/// ABNF (from RFC 2373) also derives three colons before an embedded IPv4
/// address (`2001:db8:::192.0.2.1`), which RFC 4291 does not; RFC 5118
/// §4.10 asks implementations to tolerate both, reading the extra colon
/// as absent. Only that one position is tolerated: `:::` anywhere else
/// stays an error.
pub fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    if let Ok(a) = s.parse() {
        return Some(a);
    }
    let i = s.find(":::")?;
    let tail = &s[i + 3..];
    tail.parse::<Ipv4Addr>().ok()?;
    format!("{}::{tail}", &s[..i]).parse().ok()
}

/// Parses a host (`[v6]`, v4 or name) and an optional port.
pub fn parse_hostport(s: &str) -> Result<(Host<'_>, Option<u16>), Bad> {
    let (host, rest) = if let Some(r) = s.strip_prefix('[') {
        let end = pos(r, b']').ok_or("unterminated IPv6 reference")?;
        let ip = parse_ipv6(&r[..end]).ok_or("bad IPv6 reference")?;
        (Host::V6(ip), &r[end + 1..])
    } else {
        let end = pos(s, b':').unwrap_or(s.len());
        let h = &s[..end];
        if h.is_empty() {
            return Err("empty host");
        }
        let host = match h.parse::<Ipv4Addr>() {
            Ok(a) => Host::V4(a),
            Err(_) => {
                let ok = h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
                    && h.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
                if !ok {
                    return Err("bad host name");
                }
                Host::Name(h)
            }
        };
        (host, &s[end..])
    };
    let port = match rest {
        "" => None,
        r => {
            let p = r.strip_prefix(':').ok_or("junk after host")?;
            if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err("bad port");
            }
            Some(p.parse::<u16>().map_err(|_| "bad port")?)
        }
    };
    Ok((host, port))
}

impl<'a> Uri<'a> {
    /// Parses an absolute URI; SIP and SIPS URIs in full.
    pub fn parse(text: &'a str) -> Result<Uri<'a>, Bad> {
        let colon = pos(text, b':').ok_or("URI without a scheme")?;
        let scheme_s = &text[..colon];
        let sb = scheme_s.as_bytes();
        if sb.is_empty() || !is_alpha(sb[0]) || !sb.iter().all(|&b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
            return Err("bad URI scheme");
        }
        if text.bytes().any(|b| is_ws(b) || b < 0x21 || b == 0x7f || b == b'<' || b == b'>' || b == b'"') {
            return Err("bad character in URI");
        }
        let scheme = if scheme_s.eq_ignore_ascii_case("sip") {
            Scheme::Sip
        } else if scheme_s.eq_ignore_ascii_case("sips") {
            Scheme::Sips
        } else if scheme_s.eq_ignore_ascii_case("tel") {
            Scheme::Tel
        } else {
            Scheme::Other
        };
        let rest = &text[colon + 1..];
        if rest.is_empty() {
            return Err("empty URI");
        }
        if !matches!(scheme, Scheme::Sip | Scheme::Sips) {
            return Ok(Uri { text, scheme, user: None, host: Host::Name(""), port: None, params: "", headers: None });
        }
        // userinfo ends at the first '@' (user and password cannot hold an
        // unescaped one); the user part may itself hold ';', '?' and '/'.
        let (user, hostpart) = match pos(rest, b'@') {
            Some(at) => {
                if at == 0 {
                    return Err("empty user part");
                }
                (Some(&rest[..at]), &rest[at + 1..])
            }
            None => (None, rest),
        };
        let (before_q, headers) = match pos(hostpart, b'?') {
            Some(q) => (&hostpart[..q], Some(&hostpart[q + 1..])),
            None => (hostpart, None),
        };
        // IPv6 references contain ':' but never ';'.
        let semi = pos(before_q, b';').unwrap_or(before_q.len());
        let (hp, params) = before_q.split_at(semi);
        let (host, port) = parse_hostport(hp)?;
        check_uri_params(params)?;
        Ok(Uri { text, scheme, user, host, port, params, headers })
    }

    /// A URI parameter: `Some(None)` for a flag, `Some(Some(v))` for a value.
    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        find_param(self.params, name)
    }

    /// The `transport` parameter, lowercase compared.
    pub fn transport(&self) -> Option<&'a str> {
        self.param("transport").flatten()
    }

    /// The URI with its host replaced by `host` (scheme, user part, port,
    /// parameters and headers as written).
    pub fn with_host(&self, host: &str) -> String {
        let scheme = &self.text[..pos(self.text, b':').unwrap_or(0)];
        let mut s = String::with_capacity(self.text.len() + host.len());
        s.push_str(scheme);
        s.push(':');
        if let Some(u) = self.user {
            s.push_str(u);
            s.push('@');
        }
        s.push_str(host);
        if let Some(p) = self.port {
            s.push(':');
            s.push_str(&p.to_string());
        }
        s.push_str(self.params);
        if let Some(h) = self.headers {
            s.push('?');
            s.push_str(h);
        }
        s
    }
}

fn check_uri_params(params: &str) -> Result<(), Bad> {
    if params.is_empty() {
        return Ok(());
    }
    // Every parameter has a name: no ";;", ";=" or trailing ";".
    let b = params.as_bytes();
    for i in memchr::memchr_iter(b';', b) {
        if matches!(b.get(i + 1), None | Some(b';' | b'=')) {
            return Err("empty URI parameter");
        }
    }
    Ok(())
}

/// Finds `name` in `;a=b;c` style text (names compared case-insensitively,
/// whitespace around `;` and `=` allowed as in header parameters).
pub fn find_param<'a>(params: &'a str, name: &str) -> Option<Option<&'a str>> {
    let trim = |p: &'a str| p.trim_matches(|c: char| c.is_ascii_whitespace());
    let mut rest = params;
    loop {
        let (p, more) = match pos(rest, b';') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let p = trim(p);
        if !p.is_empty() {
            let (k, v) = match pos(p, b'=') {
                Some(i) => (p[..i].trim_end(), Some(p[i + 1..].trim_start())),
                None => (p, None),
            };
            if k.eq_ignore_ascii_case(name) {
                return Some(v);
            }
        }
        rest = more?;
    }
}

/// One element of an address header (From, To, Contact, Route, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAddr<'a> {
    /// The element's text (trimmed).
    pub text: &'a str,
    /// The display name as written (quotes included), if any.
    pub display: Option<&'a str>,
    /// The URI.
    pub uri: &'a str,
    /// Where the URI sits in `text`.
    pub uri_span: Range<usize>,
    /// Written as `<uri>`.
    pub bracketed: bool,
    /// Header parameters after the address, with the leading `;` (may be
    /// empty).
    pub params: &'a str,
}

impl<'a> NameAddr<'a> {
    /// A header parameter (`tag`, `expires`, ...).
    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        find_param(self.params, name)
    }

    /// The `tag` parameter.
    pub fn tag(&self) -> Option<&'a str> {
        self.param("tag").flatten()
    }
}

/// Length of a quoted string starting at `s[0] == '"'`, quotes included.
fn quoted_len(s: &[u8]) -> Result<usize, Bad> {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' => {
                if i + 1 >= s.len() || s[i + 1] == b'\r' || s[i + 1] == b'\n' {
                    return Err("bad quoted pair");
                }
                i += 2;
            }
            b'"' => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err("unterminated quoted string")
}

/// Splits a header value on the commas that separate list elements
/// (outside quoted strings and angle brackets); returns each element's
/// byte range, untrimmed.
pub fn split_list(v: &str) -> Result<Vec<Range<usize>>, Bad> {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i, mut angle) = (0, 0, false);
    // Jump between the bytes that matter: quotes anywhere, '>' inside
    // angle brackets, '<' and ',' outside them.
    loop {
        let next =
            if angle { memchr::memchr2(b'"', b'>', &b[i..]) } else { memchr::memchr3(b'"', b'<', b',', &b[i..]) };
        let Some(off) = next else { break };
        i += off;
        match b[i] {
            b'"' => {
                i += quoted_len(&b[i..])?;
                continue;
            }
            b'<' => angle = true,
            b'>' => angle = false,
            _ => {
                out.push(start..i);
                start = i + 1;
            }
        }
        i += 1;
    }
    if angle {
        return Err("unterminated <");
    }
    out.push(start..b.len());
    Ok(out)
}

/// Validates `;name[=value]` header parameters (LWS allowed around `;`
/// and `=`; values are tokens, hosts or quoted strings).
pub fn check_header_params(p: &str) -> Result<(), Bad> {
    let b = p.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && is_ws(b[*i]) {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return Ok(());
        }
        if b[i] != b';' {
            return Err("junk in header parameters");
        }
        i += 1;
        skip_ws(&mut i);
        let s = i;
        while i < b.len() && is_token_char(b[i]) {
            i += 1;
        }
        if i == s {
            return Err("empty header parameter");
        }
        skip_ws(&mut i);
        if i < b.len() && b[i] == b'=' {
            i += 1;
            skip_ws(&mut i);
            if i < b.len() && b[i] == b'"' {
                i += quoted_len(&b[i..])?;
            } else {
                let s = i;
                while i < b.len() && (is_token_char(b[i]) || b"[]:".contains(&b[i])) {
                    i += 1;
                }
                if i == s {
                    return Err("empty parameter value");
                }
            }
        }
    }
}

/// Parses one address element (`name-addr` or `addr-spec`, then params).
pub fn parse_name_addr(text: &str) -> Result<NameAddr<'_>, Bad> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let off = t.as_ptr() as usize - text.as_ptr() as usize;
    let _ = off;
    let b = t.as_bytes();
    if b.is_empty() {
        return Err("empty address");
    }
    // Display name: a quoted string or tokens separated by LWS, then '<'.
    let lt = {
        let mut i = 0;
        let mut found = None;
        while i < b.len() {
            match b[i] {
                b'"' => i += quoted_len(&b[i..])?,
                b'<' => {
                    found = Some(i);
                    break;
                }
                b';' | b',' | b'>' => break,
                _ => i += 1,
            }
        }
        found
    };
    if let Some(lt) = lt {
        let disp = t[..lt].trim_end_matches(|c: char| c.is_ascii_whitespace());
        let display = if disp.is_empty() {
            None
        } else if disp.starts_with('"') {
            if quoted_len(disp.as_bytes())? != disp.len() {
                return Err("junk after display name");
            }
            Some(disp)
        } else {
            if !disp.split(|c: char| c.is_ascii_whitespace()).filter(|w| !w.is_empty()).all(is_token) {
                return Err("display name is not a token list");
            }
            Some(disp)
        };
        let gt = pos(&t[lt..], b'>').ok_or("unterminated <")? + lt;
        let uri = &t[lt + 1..gt];
        Uri::parse(uri)?;
        let params = &t[gt + 1..];
        check_header_params(params)?;
        Ok(NameAddr { text: t, display, uri, uri_span: lt + 1..gt, bracketed: true, params })
    } else {
        // addr-spec: the URI runs to the first ';' or whitespace; it may
        // not contain '?' or ',' (RFC 3261 §20).
        let end = t.find(|c: char| c == ';' || c.is_ascii_whitespace()).unwrap_or(t.len());
        let uri = &t[..end];
        if memchr::memchr2(b'?', b',', uri.as_bytes()).is_some() {
            return Err("URI with headers must be in <>");
        }
        Uri::parse(uri)?;
        let params = &t[end..];
        check_header_params(params)?;
        Ok(NameAddr { text: t, display: None, uri, uri_span: 0..end, bracketed: false, params })
    }
}

/// Checks every element of a comma-separated list of addresses as
/// [`parse_name_addr_list`] would (same first error), keeping nothing.
pub fn check_name_addr_list(v: &str) -> Result<(), Bad> {
    split_list(v)?.into_iter().try_for_each(|r| parse_name_addr(&v[r]).map(drop))
}

/// Parses a comma-separated list of addresses.
pub fn parse_name_addr_list(v: &str) -> Result<Vec<NameAddr<'_>>, Bad> {
    split_list(v)?.into_iter().map(|r| parse_name_addr(&v[r])).collect()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url without padding (RFC 4648 §5): the characters are all
/// `unreserved` in a SIP user part.
pub fn b64url_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        let chars = c.len() + 1;
        for k in 0..chars {
            out.push(B64[((n >> (18 - 6 * k)) & 63) as usize] as char);
        }
    }
    out
}

/// Inverse of [`b64url_encode`]; None on a bad character or length.
pub fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| B64.iter().position(|&x| x == c).map(|p| p as u32);
    let b = s.as_bytes();
    if b.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() * 3 / 4);
    for c in b.chunks(4) {
        let mut n = 0u32;
        for (k, &ch) in c.iter().enumerate() {
            n |= val(ch)? << (18 - 6 * k);
        }
        for k in 0..c.len() - 1 {
            out.push((n >> (16 - 8 * k)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3261_19_1_3_uri_examples() {
        let u = Uri::parse("sip:alice:secretword@atlanta.com;transport=tcp").unwrap();
        assert_eq!(u.user, Some("alice:secretword"));
        assert_eq!(u.host, Host::Name("atlanta.com"));
        assert_eq!(u.transport(), Some("tcp"));
        let u = Uri::parse("sips:alice@atlanta.com?subject=project%20x&priority=urgent").unwrap();
        assert_eq!(u.scheme, Scheme::Sips);
        assert_eq!(u.headers, Some("subject=project%20x&priority=urgent"));
        let u = Uri::parse("sip:+1-212-555-1212:1234@gateway.com;user=phone").unwrap();
        assert_eq!(u.param("user"), Some(Some("phone")));
        let u = Uri::parse("sip:alice;day=tuesday@atlanta.com").unwrap();
        assert_eq!(u.user, Some("alice;day=tuesday"));
        let u = Uri::parse("sip:atlanta.com;method=REGISTER?to=alice%40atlanta.com").unwrap();
        assert_eq!(u.user, None);
        assert_eq!(u.param("method"), Some(Some("REGISTER")));
        assert_eq!(Uri::parse("sip:192.0.2.4:5070").unwrap().port, Some(5070));
    }

    #[test]
    fn rfc5118_ipv6_references() {
        // §4.3: the port is inside the brackets, so it is part of the address.
        let u = Uri::parse("sip:[2001:db8::10:5070]").unwrap();
        assert_eq!(u.host, Host::V6("2001:db8::10:5070".parse().unwrap()));
        assert_eq!(u.port, None);
        // §4.4: port outside.
        let u = Uri::parse("sip:user@[2001:db8::10]:5070;transport=udp").unwrap();
        assert_eq!((u.host, u.port), (Host::V6("2001:db8::10".parse().unwrap()), Some(5070)));
        // §4.9: IPv4-mapped IPv6.
        let u = Uri::parse("sip:[::ffff:192.0.2.10]").unwrap();
        assert_eq!(u.host.ip(), Some("::ffff:192.0.2.10".parse().unwrap()));
        // §4.2: an IPv6 address without brackets is not a host.
        assert!(Uri::parse("sip:user@2001:db8::10").is_err());
        assert!(Uri::parse("sip:[2001:db8::10").is_err());
        // §4.10: RFC 3261's ABNF bug (three colons before an embedded IPv4
        // address) is tolerated as the address without the extra colon.
        let want = Host::V6("2001:db8::192.0.2.1".parse().unwrap());
        assert_eq!(Uri::parse("sip:user@[2001:db8:::192.0.2.1]").unwrap().host, want);
        assert_eq!(Uri::parse("sip:user@[2001:db8::192.0.2.1]:5070").unwrap().host, want);
        assert_eq!(parse_ipv6(":::192.0.2.1"), "::192.0.2.1".parse().ok());
        // Only there: elsewhere three colons stay an error.
        for bad in ["2001:db8:::10", "2001:db8::1:::192.0.2.1", "::::192.0.2.1", "2001:db8:::192.0.2"] {
            assert_eq!(parse_ipv6(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_host_is_replaced_and_the_rest_kept() {
        let u = Uri::parse("sip:svc;x=1@[::ffff:198.51.100.2]:5062;transport=udp;lr?h=v").unwrap();
        assert_eq!(u.with_host("198.51.100.2"), "sip:svc;x=1@198.51.100.2:5062;transport=udp;lr?h=v");
        let u = Uri::parse("SIPS:[::ffff:192.0.2.1]").unwrap();
        assert_eq!(u.with_host("192.0.2.1"), "SIPS:192.0.2.1");
    }

    #[test]
    fn name_addr_forms() {
        let a = parse_name_addr(" \"J Rosenberg \\\\\\\"\"       <sip:jdrosen@example.com>\r\n  ;\r\n  tag = 98asjd8")
            .unwrap();
        assert_eq!(a.uri, "sip:jdrosen@example.com");
        assert_eq!(a.tag(), Some("98asjd8"));
        let a = parse_name_addr("sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n").unwrap();
        assert!(!a.bracketed);
        assert_eq!(a.tag(), Some("1918181833n"));
        let a = parse_name_addr("caller<sip:caller@example.com>;tag=323").unwrap();
        assert_eq!(a.display, Some("caller"));
        assert!(parse_name_addr("\"Mr. J. User <sip:j.user@example.com>").is_err());
        assert!(parse_name_addr("\"Watson, Thomas\" < sip:t.watson@example.org >").is_err());
        assert!(parse_name_addr("Bell, Alexander <sip:a.g.bell@example.com>;tag=43").is_err());
        assert!(parse_name_addr("\"Joe\" <sip:joe@example.org>;;;;").is_err());
        assert!(parse_name_addr("sip:user@example.com?Route=%3Csip:sip.example.com%3E").is_err());
        let l = parse_name_addr_list("<sip:a@x;lr>, \"b,c\" <sip:b@y>;q=0.5 ,sip:c@z").unwrap();
        assert_eq!(l.iter().map(|a| a.uri).collect::<Vec<_>>(), ["sip:a@x;lr", "sip:b@y", "sip:c@z"]);
    }

    #[test]
    fn b64url_round_trip() {
        for s in ["", "a", "ab", "abc", "sip:alice@[2001:db8::1]:5062;transport=tcp"] {
            let e = b64url_encode(s.as_bytes());
            assert!(e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            assert_eq!(b64url_decode(&e).unwrap(), s.as_bytes());
        }
        assert_eq!(b64url_encode(b"\xfb\xff"), "-_8");
        assert!(b64url_decode("a").is_none());
        assert!(b64url_decode("a*bc").is_none());
    }
}
