//! SIP messages (RFC 3261 §7, §18.3, §20, §25) as views over the received
//! bytes: the start line, every header line (name, value, and the raw
//! line for copying), and the body. Only what a proxy reads is parsed —
//! Via, From, To, Call-ID, CSeq, Max-Forwards, Content-Length, Contact,
//! Route, Record-Route — the rest is passed through as received.
//!
//! [`Message::parse`] splits a message (datagram or stream) and
//! [`Message::validate`] applies the checks RFC 4475 §3.1.2 expects of an
//! element; a failure carries the status (400, 505, ...) and reason to
//! answer with, or says the message is to be dropped.

use std::borrow::Cow;

use crate::uri::{self, Bad, Host, NameAddr, Uri};

/// The header names the ALG looks at (compact forms folded in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// Via / v
    Via,
    /// From / f
    From,
    /// To / t
    To,
    /// Call-ID / i
    CallId,
    /// CSeq
    CSeq,
    /// Max-Forwards
    MaxForwards,
    /// Contact / m
    Contact,
    /// Content-Length / l
    ContentLength,
    /// Content-Type / c
    ContentType,
    /// Route
    Route,
    /// Record-Route
    RecordRoute,
    /// Path (RFC 3327)
    Path,
    /// Supported / k
    Supported,
    /// Proxy-Require
    ProxyRequire,
    /// Session-Expires / x (RFC 4028)
    SessionExpires,
    /// Anything else.
    Other,
}

impl Name {
    /// Classifies a header name (case-insensitive, compact forms).
    pub fn of(n: &str) -> Name {
        if n.len() == 1 {
            return match n.as_bytes()[0].to_ascii_lowercase() {
                b'v' => Name::Via,
                b'f' => Name::From,
                b't' => Name::To,
                b'i' => Name::CallId,
                b'm' => Name::Contact,
                b'l' => Name::ContentLength,
                b'c' => Name::ContentType,
                b'k' => Name::Supported,
                b'x' => Name::SessionExpires,
                _ => Name::Other,
            };
        }
        const NAMES: [(&str, Name); 14] = [
            ("via", Name::Via),
            ("from", Name::From),
            ("to", Name::To),
            ("call-id", Name::CallId),
            ("cseq", Name::CSeq),
            ("max-forwards", Name::MaxForwards),
            ("contact", Name::Contact),
            ("content-length", Name::ContentLength),
            ("content-type", Name::ContentType),
            ("route", Name::Route),
            ("record-route", Name::RecordRoute),
            ("path", Name::Path),
            ("supported", Name::Supported),
            ("proxy-require", Name::ProxyRequire),
        ];
        if n.eq_ignore_ascii_case("session-expires") {
            return Name::SessionExpires;
        }
        NAMES.iter().find(|(s, _)| s.eq_ignore_ascii_case(n)).map_or(Name::Other, |&(_, k)| k)
    }
}

/// One header line.
#[derive(Debug, Clone)]
pub struct Header<'a> {
    /// Its kind.
    pub name: Name,
    /// The name as written.
    pub raw_name: &'a str,
    /// The value with folding (CRLF + whitespace) replaced by one space,
    /// leading and trailing whitespace removed.
    pub value: Cow<'a, str>,
    /// The whole line(s) as received, without the final line end.
    pub line: &'a str,
}

/// The start line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start<'a> {
    /// Request-Line.
    Request {
        /// Method (case-sensitive, RFC 3261 §7.1).
        method: &'a str,
        /// Request-URI text.
        uri: &'a str,
    },
    /// Status-Line.
    Response {
        /// Status code.
        code: u16,
        /// Reason phrase (may be empty or UTF-8).
        reason: &'a str,
    },
}

/// A split message.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    /// The start line.
    pub start: Start<'a>,
    /// The start line as received.
    pub start_line: &'a str,
    /// Headers in order.
    pub headers: Vec<Header<'a>>,
    /// The body (Content-Length bytes; over UDP extra octets are cut,
    /// RFC 3261 §18.3).
    pub body: &'a [u8],
    /// Bytes this message took from the input (stream framing).
    pub len: usize,
    /// A start-line problem found while splitting, reported by
    /// [`Message::validate`].
    start_error: Option<Reject>,
    /// A Content-Length problem found while splitting.
    length_error: Option<Reject>,
    /// Where the From and To tags sit in their header values, found on
    /// the first [`Message::from_tag`] / [`Message::to_tag`] (the proxy
    /// asks for them several times per message; each answer parsed the
    /// whole address).
    tags: [std::cell::OnceCell<Option<std::ops::Range<usize>>>; 2],
}

/// What to do with a message that failed a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The status to answer a request with (400, 505, 513, 416, ...);
    /// 0: drop silently (responses, unframeable input).
    pub status: u16,
    /// Why (the reason phrase of the answer, and the log/counter text).
    pub reason: Cow<'static, str>,
}

impl Reject {
    /// Answer with `status`.
    pub fn answer(status: u16, reason: impl Into<Cow<'static, str>>) -> Reject {
        Reject { status, reason: reason.into() }
    }
    /// Drop.
    pub fn drop(reason: impl Into<Cow<'static, str>>) -> Reject {
        Reject { status: 0, reason: reason.into() }
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(f, "dropped: {}", self.reason)
        } else {
            write!(f, "{} {}", self.status, self.reason)
        }
    }
}

/// Outcome of splitting stream input.
#[derive(Debug)]
pub enum Framing<'a> {
    /// A whole message.
    Message(Message<'a>),
    /// Need more bytes.
    Incomplete,
    /// Only CRLF keep-alives (RFC 5626 §3.5.1): this many bytes.
    KeepAlive(usize),
}

fn bad(r: &'static str) -> Reject {
    Reject::answer(400, r)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

fn unfold(v: &str) -> Cow<'_, str> {
    if memchr::memchr2(b'\r', b'\n', v.as_bytes()).is_none() {
        return Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len());
    let mut ws = false;
    for c in v.chars() {
        if c == '\r' || c == '\n' {
            ws = true;
            continue;
        }
        if ws && (c == ' ' || c == '\t') {
            continue;
        }
        if ws {
            out.push(' ');
            ws = false;
        }
        out.push(c);
    }
    Cow::Owned(out)
}

fn parse_start(line: &str) -> Result<Start<'_>, (Start<'_>, Reject)> {
    if let Some(rest) = line.strip_prefix("SIP/") {
        // Status-Line = SIP-Version SP Status-Code SP Reason-Phrase
        let version_ok = rest.starts_with("2.0 ");
        let r = rest.get(4..).unwrap_or("");
        let (code_s, reason) = r.split_once(' ').unwrap_or((r, ""));
        let code = code_s.parse::<u16>().ok().filter(|c| (100..=699).contains(c) && code_s.len() == 3);
        let dummy = Start::Response { code: code.unwrap_or(0), reason };
        if !version_ok {
            return Err((dummy, Reject::drop("response with an unsupported SIP version")));
        }
        let Some(code) = code else { return Err((dummy, Reject::drop("bad status code"))) };
        return Ok(Start::Response { code, reason });
    }
    // Request-Line = Method SP Request-URI SP SIP-Version (single SPs).
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("");
    let uri = parts.next().unwrap_or("");
    let version = parts.next().unwrap_or("");
    let extra = parts.next().is_some();
    let s = Start::Request { method, uri };
    if !uri::is_token(method) {
        return Err((s, Reject::drop("not a SIP start line")));
    }
    if extra || uri.is_empty() || version.is_empty() {
        return Err((s, bad("Malformed Request-Line")));
    }
    if !version.eq_ignore_ascii_case("SIP/2.0") {
        // Bytes, not a str slice: the version may hold multi-byte UTF-8.
        if version.len() > 4 && version.as_bytes()[..4].eq_ignore_ascii_case(b"SIP/") {
            return Err((s, Reject::answer(505, "Version Not Supported")));
        }
        return Err((s, bad("Malformed Request-Line")));
    }
    Ok(s)
}

/// Splits a header line into (name, value).
fn split_header(line: &str) -> Result<(&str, &str), Reject> {
    let colon = uri::pos(line, b':').ok_or(bad("Malformed header line"))?;
    let name = line[..colon].trim_end_matches([' ', '\t']);
    if !uri::is_token(name) {
        return Err(bad("Malformed header name"));
    }
    Ok((name, &line[colon + 1..]))
}

/// Where `part` (a slice of `whole`) sits in `whole`.
fn span_in(whole: &str, part: &str) -> std::ops::Range<usize> {
    let off = part.as_ptr() as usize - whole.as_ptr() as usize;
    debug_assert!(off + part.len() <= whole.len());
    off..off + part.len()
}

/// The logical lines of a message head: CRLF (or LF) followed by SP/HT
/// continues a line; the line ends are not part of the lines.
struct Lines<'a> {
    head: &'a str,
    /// Where the next line starts.
    s: usize,
    nl: memchr::Memchr<'a>,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        let hb = self.head.as_bytes();
        for i in self.nl.by_ref() {
            if hb.get(i + 1).is_some_and(|&c| c == b' ' || c == b'\t') {
                continue;
            }
            let e = if i > self.s && hb[i - 1] == b'\r' { i - 1 } else { i };
            let line = &self.head[self.s..e];
            self.s = i + 1;
            return Some(line);
        }
        if self.s < hb.len() {
            let e = if hb[hb.len() - 1] == b'\r' { hb.len() - 1 } else { hb.len() };
            let line = &self.head[self.s..e];
            self.s = hb.len();
            return Some(line);
        }
        None
    }
}

impl<'a> Message<'a> {
    /// Splits one message from `buf`. `stream`: TCP framing (Content-Length
    /// required, trailing bytes belong to the next message); otherwise a
    /// datagram (octets past Content-Length are discarded).
    pub fn parse(buf: &'a [u8], stream: bool) -> Result<Framing<'a>, Reject> {
        // Leading CRLFs are ignored (RFC 3261 §7.5) and are keep-alives.
        if buf.is_empty() {
            return if stream { Ok(Framing::Incomplete) } else { Err(Reject::drop("empty datagram")) };
        }
        let lead = buf.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
        if lead == buf.len() {
            return Ok(Framing::KeepAlive(lead));
        }
        if stream && lead > 0 {
            return Ok(Framing::KeepAlive(lead));
        }
        let rest = &buf[lead..];
        let (head_end, body_start) = match find(rest, b"\r\n\r\n") {
            Some(i) => (i, i + 4),
            None => match find(rest, b"\n\n") {
                Some(i) => (i, i + 2),
                None if stream => return Ok(Framing::Incomplete),
                // A datagram whose head does not end: RFC 4475 §3.1.2.15's
                // message has no blank line; treat the end as the head end.
                None => (rest.len(), rest.len()),
            },
        };
        let head = std::str::from_utf8(&rest[..head_end]).map_err(|_| Reject::drop("head is not UTF-8"))?;
        let mut lines = Lines { head, s: 0, nl: memchr::memchr_iter(b'\n', head.as_bytes()) };
        let start_line = lines.next().unwrap_or("");
        let (start, start_error) = match parse_start(start_line) {
            Ok(s) => (s, None),
            Err((s, r)) => (s, Some(r)),
        };
        let mut headers = Vec::with_capacity(16);
        for line in lines {
            let (raw_name, v) = match split_header(line) {
                Ok(x) => x,
                Err(r) => {
                    // Keep what we have so a 400 can still be built.
                    return Ok(Framing::Message(Message {
                        start,
                        start_line,
                        headers,
                        body: &[],
                        len: buf.len(),
                        start_error: Some(start_error.unwrap_or(r)),
                        length_error: None,
                        tags: Default::default(),
                    }));
                }
            };
            let v = v.trim_matches(|c: char| c.is_ascii_whitespace());
            headers.push(Header { name: Name::of(raw_name), raw_name, value: unfold(v), line });
        }
        // Body framing.
        let avail = &rest[body_start.min(rest.len())..];
        let mut length_error = None;
        let mut cl: Option<usize> = None;
        for h in headers.iter().filter(|h| h.name == Name::ContentLength) {
            let v = h.value.as_ref();
            if cl.is_some() {
                length_error = Some(bad("Duplicate Content-Length"));
            } else if v.is_empty() || v.len() > 9 || !v.bytes().all(|b| b.is_ascii_digit()) {
                length_error = Some(bad("Bad Content-Length"));
                cl = Some(0);
            } else {
                cl = v.parse().ok();
            }
        }
        let body_len = match cl {
            Some(n) if n <= avail.len() => n,
            Some(n) if stream => {
                if n > crate::MAX_MESSAGE {
                    return Err(Reject::drop("Content-Length beyond the message size limit"));
                }
                return Ok(Framing::Incomplete);
            }
            Some(_) => {
                length_error = Some(bad("Content-Length larger than the message"));
                avail.len()
            }
            None if stream => 0,
            None => avail.len(),
        };
        let len = lead + body_start.min(rest.len()) + body_len;
        Ok(Framing::Message(Message {
            start,
            start_line,
            headers,
            body: &avail[..body_len],
            len,
            start_error,
            length_error,
            tags: Default::default(),
        }))
    }

    /// Parses a whole datagram.
    pub fn parse_datagram(buf: &'a [u8]) -> Result<Message<'a>, Reject> {
        match Message::parse(buf, false)? {
            Framing::Message(m) => Ok(m),
            Framing::KeepAlive(_) | Framing::Incomplete => Err(Reject::drop("keep-alive")),
        }
    }

    /// True for a request.
    pub fn is_request(&self) -> bool {
        matches!(self.start, Start::Request { .. })
    }

    /// The method (requests).
    pub fn method(&self) -> Option<&'a str> {
        match self.start {
            Start::Request { method, .. } => Some(method),
            Start::Response { .. } => None,
        }
    }

    /// The status code (responses).
    pub fn code(&self) -> Option<u16> {
        match self.start {
            Start::Response { code, .. } => Some(code),
            Start::Request { .. } => None,
        }
    }

    /// The first header of a kind.
    pub fn header(&self, n: Name) -> Option<&str> {
        self.headers.iter().find(|h| h.name == n).map(|h| h.value.as_ref())
    }

    /// All headers of a kind.
    pub fn all(&self, n: Name) -> impl Iterator<Item = &Header<'a>> {
        self.headers.iter().filter(move |h| h.name == n)
    }

    /// A header by its full name (case-insensitive), e.g. `Content-Type`.
    pub fn header_named(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|h| h.raw_name.eq_ignore_ascii_case(name)).map(|h| h.value.as_ref())
    }

    /// Call-ID.
    pub fn call_id(&self) -> &str {
        self.header(Name::CallId).unwrap_or("")
    }

    /// CSeq number and method.
    pub fn cseq(&self) -> Option<(u32, &str)> {
        let v = self.header(Name::CSeq)?;
        let mut it = v.split_ascii_whitespace();
        let n = it.next()?.parse::<u32>().ok()?;
        let m = it.next()?;
        Some((n, m))
    }

    /// The tag of the first header `n` (From or To), when its address
    /// parses; remembered in `tags[i]`.
    fn tag(&self, n: Name, i: usize) -> Option<&str> {
        let v = self.header(n)?;
        let span = self.tags[i].get_or_init(|| Some(span_in(v, uri::parse_name_addr(v).ok()?.tag()?)));
        span.clone().map(|r| &v[r])
    }

    /// The From tag.
    pub fn from_tag(&self) -> Option<&str> {
        self.tag(Name::From, 0)
    }

    /// The To tag.
    pub fn to_tag(&self) -> Option<&str> {
        self.tag(Name::To, 1)
    }

    /// The topmost Via value.
    pub fn top_via(&self) -> Option<Via<'_>> {
        let v = self.header(Name::Via)?;
        let first = uri::split_list(v).ok()?.into_iter().next()?;
        Via::parse(&v[first]).ok()
    }

    /// Every Via value, top first.
    pub fn vias(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for h in self.all(Name::Via) {
            let v = h.value.as_ref();
            if let Ok(l) = uri::split_list(v) {
                out.extend(l.into_iter().map(|r| v[r].trim()));
            }
        }
        out
    }

    /// The Content-Type (without parameters), lowercase compared by callers.
    pub fn content_type(&self) -> Option<&str> {
        self.header(Name::ContentType).map(|v| v.split(';').next().unwrap_or("").trim())
    }

    /// True when the body is SDP.
    pub fn has_sdp(&self) -> bool {
        !self.body.is_empty() && self.content_type().is_some_and(|t| t.eq_ignore_ascii_case("application/sdp"))
    }

    /// Max-Forwards, when present and valid.
    pub fn max_forwards(&self) -> Option<u32> {
        self.header(Name::MaxForwards).and_then(|v| v.parse().ok())
    }

    /// The checks of RFC 3261 §8.2, §16.3 step 1 and RFC 4475 §3.1.2: a
    /// request that fails gets the returned status, a response is dropped.
    pub fn validate(&self) -> Result<(), Reject> {
        let req = self.is_request();
        let fix = |r: Reject| if req { r } else { Reject::drop(r.reason) };
        if let Some(e) = &self.start_error {
            return Err(fix(e.clone()));
        }
        for (n, what) in [
            (Name::To, "To"),
            (Name::From, "From"),
            (Name::CallId, "Call-ID"),
            (Name::CSeq, "CSeq"),
            (Name::Via, "Via"),
        ] {
            let c = self.all(n).count();
            if c == 0 {
                return Err(fix(Reject::answer(400, format!("Missing {what} header"))));
            }
            if c > 1 && n != Name::Via {
                return Err(fix(Reject::answer(400, format!("Duplicate {what} header"))));
            }
        }
        if let Some(e) = &self.length_error {
            return Err(fix(e.clone()));
        }
        // CSeq = 1*DIGIT LWS Method; the number is below 2**31.
        let cseq = self.header(Name::CSeq).unwrap_or("");
        let mut it = cseq.split_ascii_whitespace();
        let (num, m) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        if num.is_empty()
            || num.len() > 10
            || !num.bytes().all(|b| b.is_ascii_digit())
            || num.parse::<u64>().map_or(true, |n| n >= 1 << 31)
            || !uri::is_token(m)
            || it.next().is_some()
        {
            return Err(fix(bad("Bad CSeq")));
        }
        if let Start::Request { method, uri: ruri } = self.start {
            if m != method {
                return Err(bad("CSeq method does not match the Request-Line"));
            }
            let u = Uri::parse(ruri).map_err(|e| Reject::answer(400, format!("Bad Request-URI: {e}")))?;
            if u.headers.is_some() {
                return Err(bad("Request-URI with headers"));
            }
        }
        if let Some(mf) = self.header(Name::MaxForwards) {
            if mf.is_empty() || !mf.bytes().all(|b| b.is_ascii_digit()) || mf.parse::<u32>().map_or(true, |n| n > 255) {
                return Err(fix(bad("Bad Max-Forwards")));
            }
        }
        let cid = self.call_id();
        if cid.is_empty() || cid.bytes().any(|b| b <= b' ') {
            return Err(fix(bad("Bad Call-ID")));
        }
        for h in self.all(Name::Via) {
            for r in uri::split_list(&h.value).map_err(|e| fix(Reject::answer(400, format!("Bad Via: {e}"))))? {
                Via::parse(&h.value[r]).map_err(|e| fix(Reject::answer(400, format!("Bad Via: {e}"))))?;
            }
        }
        for (n, what, i) in [(Name::To, "To", 1), (Name::From, "From", 0)] {
            let v = self.header(n).unwrap_or("");
            let a = uri::parse_name_addr(v).map_err(|e| fix(Reject::answer(400, format!("Bad {what}: {e}"))))?;
            // The tag is known now: from_tag / to_tag need not parse again.
            let _ = self.tags[i].set(a.tag().map(|t| span_in(v, t)));
        }
        for (n, what) in [(Name::Contact, "Contact"), (Name::Route, "Route"), (Name::RecordRoute, "Record-Route")] {
            for h in self.all(n) {
                if n == Name::Contact && h.value.trim() == "*" {
                    continue;
                }
                uri::check_name_addr_list(&h.value)
                    .map_err(|e| fix(Reject::answer(400, format!("Bad {what}: {e}"))))?;
            }
        }
        Ok(())
    }
}

/// One Via value (RFC 3261 §20.42).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via<'a> {
    /// `UDP`, `TCP`, `TLS`, `SCTP`, ...
    pub transport: &'a str,
    /// sent-by host.
    pub host: Host<'a>,
    /// sent-by port.
    pub port: Option<u16>,
    /// `;params` text.
    pub params: &'a str,
}

impl<'a> Via<'a> {
    /// Parses `SIP / 2.0 / UDP host:port ;params` (LWS allowed around `/`).
    pub fn parse(v: &'a str) -> Result<Via<'a>, Bad> {
        let mut parts = v.splitn(3, '/');
        let name = parts.next().unwrap_or("").trim();
        let ver = parts.next().ok_or("bad sent-protocol")?.trim();
        let rest = parts.next().ok_or("bad sent-protocol")?.trim_start();
        if !name.eq_ignore_ascii_case("SIP") || ver != "2.0" {
            return Err("unsupported Via protocol");
        }
        let tend = rest.find(|c: char| !uri::is_token_char(c as u8) || !c.is_ascii()).unwrap_or(rest.len());
        let transport = &rest[..tend];
        if transport.is_empty() {
            return Err("missing transport");
        }
        let after = rest[tend..].trim_start();
        if after.len() == rest[tend..].len() {
            return Err("missing sent-by");
        }
        let send = after.find(|c: char| c == ';' || c.is_ascii_whitespace()).unwrap_or(after.len());
        let (host, port) = uri::parse_hostport(&after[..send])?;
        let params = after[send..].trim_end();
        uri::check_header_params(params)?;
        Ok(Via { transport, host, port, params })
    }

    /// A parameter (`branch`, `received`, `rport`, ...).
    pub fn param(&self, name: &str) -> Option<Option<&'a str>> {
        uri::find_param(self.params, name)
    }

    /// The branch.
    pub fn branch(&self) -> Option<&'a str> {
        self.param("branch").flatten()
    }
}

/// Parses every element of an address-list header value.
pub fn addresses(v: &str) -> Vec<NameAddr<'_>> {
    uri::parse_name_addr_list(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3261_7_3_1_folding_and_compact_names() {
        let m = Message::parse_datagram(
            b"OPTIONS sip:a@b SIP/2.0\r\nv: SIP/2.0/UDP h;branch=z9hG4bK1\r\nSubject: I know you're there,\r\n   pick up the phone\r\n\tand talk to me!\r\nf: <sip:x@y>;tag=1\r\nt: sip:a@b\r\ni: c1\r\nCSeq: 1 OPTIONS\r\nl: 0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(m.header_named("subject"), Some("I know you're there, pick up the phone and talk to me!"));
        assert_eq!(m.header(Name::CallId), Some("c1"));
        assert_eq!(m.top_via().unwrap().branch(), Some("z9hG4bK1"));
        assert_eq!(m.from_tag(), Some("1"));
        m.validate().unwrap();
    }

    /// The tags are found once and give the same answer every time, also
    /// for a folded header (whose value is a copy) and a broken address.
    #[test]
    fn tags_are_remembered_and_stay_right() {
        let m = Message::parse_datagram(
            b"BYE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: \"A, B\" <sip:x@[2001:db8::1]>;tag=f1\r\nTo: <sip:a@b>\r\n ;tag=t9;x=1\r\nCall-ID: c1\r\nCSeq: 2 BYE\r\nl: 0\r\n\r\n",
        )
        .unwrap();
        for _ in 0..2 {
            assert_eq!(m.from_tag(), Some("f1"));
            assert_eq!(m.to_tag(), Some("t9"), "folded To");
        }
        let c = m.clone();
        assert_eq!((c.from_tag(), c.to_tag()), (Some("f1"), Some("t9")));
        // Validation finds them too; asked afterwards they agree.
        m.validate().unwrap();
        assert_eq!((m.from_tag(), m.to_tag()), (Some("f1"), Some("t9")));
        let fresh = Message::parse_datagram(
            b"BYE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:x@y>;tag=f2\r\nTo: <sip:a@b>\r\nCall-ID: c1\r\nCSeq: 2 BYE\r\nl: 0\r\n\r\n",
        )
        .unwrap();
        fresh.validate().unwrap();
        assert_eq!((fresh.from_tag(), fresh.to_tag()), (Some("f2"), None), "tags as validation found them");
        let m =
            Message::parse_datagram(b"BYE sip:a@b SIP/2.0\r\nFrom: <sip:x@y;tag=f1\r\nTo: sip:a@b\r\n\r\n").unwrap();
        for _ in 0..2 {
            assert_eq!(m.from_tag(), None, "an unterminated address has no tag");
            assert_eq!(m.to_tag(), None, "no tag parameter");
        }
    }

    #[test]
    fn via_with_lws_and_ipv6() {
        let v = Via::parse("SIP  /   2.0 /UDP    192.0.2.2;branch=390skdjuw").unwrap();
        assert_eq!((v.transport, v.host), ("UDP", Host::V4("192.0.2.2".parse().unwrap())));
        let v = Via::parse("SIP/2.0/TCP [2001:db8::9:1]:5061;branch=z9hG4bKa;received=2001:db8::9:255").unwrap();
        assert_eq!(v.port, Some(5061));
        assert_eq!(v.param("received"), Some(Some("2001:db8::9:255")));
        assert!(Via::parse("SIP/2.0/UDP 192.0.2.15;;,;,,").is_err());
        assert!(Via::parse("SIP/7.0/UDP c.example.com").is_err());
    }

    /// RFC 3261 §21.5.6: a request whose version is not SIP/2.0 gets 505;
    /// a version field holding multi-byte UTF-8 is a malformed line, not a
    /// panic (found by the sip_message fuzz target).
    #[test]
    fn rfc3261_21_5_6_version_not_supported_and_non_ascii_versions() {
        let m = Message::parse_datagram(b"OPTIONS sip:a@b SIP/7.0\r\nl: 0\r\n\r\n").unwrap();
        assert_eq!(m.validate().unwrap_err().status, 505);
        let m = Message::parse_datagram("OPTIONS sip:a@b SIP\u{52e}/2.0\r\nl: 0\r\n\r\n".as_bytes()).unwrap();
        assert_eq!(m.validate().unwrap_err().status, 400);
        let m =
            Message::parse_datagram("OPTIONS sip:a@b \0O\x0c\u{52e}{RinginSI/2.0\r\nl: 0\r\n\r\n".as_bytes()).unwrap();
        assert_eq!(m.validate().unwrap_err().status, 400);
    }

    #[test]
    fn stream_framing() {
        let two = b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: 3\r\n\r\nabcOPTIONS sip:a@b SIP/2.0\r\nl: 0\r\n\r\n";
        let Framing::Message(m) = Message::parse(two, true).unwrap() else { panic!() };
        assert_eq!(m.body, b"abc");
        let Framing::Message(m2) = Message::parse(&two[m.len..], true).unwrap() else { panic!() };
        assert_eq!(m.len + m2.len, two.len());
        assert!(matches!(Message::parse(b"OPTIONS sip:a@b SIP/2.0\r\nl: 9\r\n\r\nabc", true), Ok(Framing::Incomplete)));
        assert!(matches!(Message::parse(b"\r\n\r\n", true), Ok(Framing::KeepAlive(4))));
    }
}
