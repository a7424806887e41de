//! Just enough SDP (RFC 4566) to relay media: the origin, the session and
//! media connection addresses, media ports, `a=rtcp` (RFC 3605),
//! `a=rtcp-mux` (RFC 5761), `a=rtpmap` clock rates and the ICE attributes
//! (RFC 8839) a relay removes. Everything else is passed through untouched,
//! line by line. The output uses CRLF line ends, as rtpengine writes them.

use std::fmt;
use std::net::IpAddr;

/// Largest SDP body accepted.
pub const MAX_SDP: usize = 65_535;
/// Most media sections accepted.
pub const MAX_MEDIA: usize = 32;

/// Why an SDP body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdpError(pub String);

impl fmt::Display for SdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SDP: {}", self.0)
    }
}

impl std::error::Error for SdpError {}

fn err<T>(m: impl Into<String>) -> Result<T, SdpError> {
    Err(SdpError(m.into()))
}

/// One `m=` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    /// `audio`, `video`, ...
    pub kind: String,
    /// Port of the `m=` line (0: disabled stream).
    pub port: u16,
    /// Transport protocol, e.g. `RTP/AVP`.
    pub proto: String,
    /// Formats (payload types for RTP).
    pub fmts: Vec<String>,
    /// The section's own `c=` address.
    pub conn: Option<IpAddr>,
    /// `a=rtcp:` port and optional address.
    pub rtcp: Option<(u16, Option<IpAddr>)>,
    /// `a=rtcp-mux` present.
    pub rtcp_mux: bool,
    /// `a=rtpmap` payload type -> clock rate.
    pub rtpmap: Vec<(u8, u32)>,
    /// Line index of the `m=` line.
    line: usize,
    /// One past the last line of the section.
    end: usize,
}

/// A parsed SDP body.
#[derive(Debug, Clone, Eq)]
pub struct Sdp {
    /// The body (one allocation; the lines are ranges of it).
    text: String,
    /// Its non-empty lines, without line ends.
    lines: Vec<std::ops::Range<usize>>,
    /// `o=` address.
    pub origin: Option<IpAddr>,
    /// Session-level `c=` address.
    pub conn: Option<IpAddr>,
    /// Media sections in order.
    pub media: Vec<Media>,
}

/// What to write for one media section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaRewrite {
    /// Address to advertise.
    pub addr: IpAddr,
    /// RTP port (RTCP is `port + 1`).
    pub port: u16,
}

/// Rewrite options.
#[derive(Debug, Clone, Default)]
pub struct Rewrite {
    /// Per media section (same order); None leaves the section as it is.
    pub media: Vec<Option<MediaRewrite>>,
    /// Replace the `o=` address too (rtpengine `replace: origin`).
    pub origin: bool,
    /// Remove ICE attributes (rtpengine `ICE: remove`).
    pub remove_ice: bool,
}

/// `[addr]` without its brackets (`None` for anything else, `[]` too).
fn unbracket(s: &str) -> Option<&str> {
    s.strip_prefix('[').and_then(|a| a.strip_suffix(']')).filter(|a| !a.is_empty())
}

fn parse_conn(v: &str) -> Result<IpAddr, SdpError> {
    // "IN IP4 192.0.2.1[/ttl[/n]]"
    let mut it = v.split_ascii_whitespace();
    let (Some("IN"), Some(fam), Some(addr), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return err(format!("bad connection data `{v}`"));
    };
    let addr = addr.split('/').next().unwrap_or("");
    // `IP6 [2001:db8::2]` is not RFC 4566, but SIPp's stock scenarios
    // write it and rtpengine takes it: accepted, written back without
    // the brackets.
    let bare = match fam {
        "IP6" => unbracket(addr).unwrap_or(addr),
        _ => addr,
    };
    let ip: IpAddr = bare.parse().map_err(|_| SdpError(format!("bad connection address `{addr}`")))?;
    match (fam, ip) {
        ("IP4", IpAddr::V4(_)) | ("IP6", IpAddr::V6(_)) => Ok(ip),
        _ => err(format!("address family `{fam}` does not match `{addr}`")),
    }
}

fn fam(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IP4"
    } else {
        "IP6"
    }
}

fn is_ice(attr: &str) -> bool {
    let name = attr.split(':').next().unwrap_or("");
    matches!(
        name,
        "candidate"
            | "ice-ufrag"
            | "ice-pwd"
            | "ice-options"
            | "ice-lite"
            | "ice-mismatch"
            | "remote-candidates"
            | "end-of-candidates"
    )
}

impl PartialEq for Sdp {
    fn eq(&self, o: &Sdp) -> bool {
        self.origin == o.origin
            && self.conn == o.conn
            && self.media == o.media
            && self.lines.len() == o.lines.len()
            && self.all_lines().eq(o.all_lines())
    }
}

impl Sdp {
    fn line(&self, i: usize) -> &str {
        &self.text[self.lines[i].clone()]
    }

    fn all_lines(&self) -> impl Iterator<Item = &str> {
        (0..self.lines.len()).map(|i| self.line(i))
    }

    /// Parses a body. Hostile or broken input is an error, never a panic.
    pub fn parse(body: &[u8]) -> Result<Sdp, SdpError> {
        if body.len() > MAX_SDP {
            return err("body too large");
        }
        let text = std::str::from_utf8(body).map_err(|_| SdpError("not UTF-8".into()))?;
        let mut lines: Vec<std::ops::Range<usize>> = Vec::with_capacity(16);
        let mut at = 0;
        for l in text.split('\n') {
            let start = at;
            at += l.len() + 1;
            let l = l.strip_suffix('\r').unwrap_or(l);
            if !l.is_empty() {
                lines.push(start..start + l.len());
            }
        }
        if lines.first().map(|r| &text[r.clone()]) != Some("v=0") {
            return err("does not start with v=0");
        }
        let mut sdp = Sdp { text: String::new(), lines: Vec::new(), origin: None, conn: None, media: Vec::new() };
        for (i, l) in lines.iter().map(|r| &text[r.clone()]).enumerate() {
            let b = l.as_bytes();
            if b.len() < 2 || b[1] != b'=' || !b[0].is_ascii_lowercase() {
                return err(format!("line {} is not `x=value`", i + 1));
            }
            if l.chars().any(|c| c.is_control() && c != '\t') {
                return err(format!("line {} has control characters", i + 1));
            }
            let v = &l[2..];
            match b[0] {
                b'm' => {
                    if sdp.media.len() >= MAX_MEDIA {
                        return err("too many media sections");
                    }
                    if let Some(m) = sdp.media.last_mut() {
                        m.end = i;
                    }
                    let mut it = v.split_ascii_whitespace();
                    let (Some(kind), Some(port), Some(proto)) = (it.next(), it.next(), it.next()) else {
                        return err(format!("bad media line `{l}`"));
                    };
                    // "port/count" is allowed by RFC 4566; relay only the first.
                    let port: u16 = port
                        .split('/')
                        .next()
                        .and_then(|p| p.parse().ok())
                        .ok_or_else(|| SdpError(format!("bad media port in `{l}`")))?;
                    sdp.media.push(Media {
                        kind: kind.to_string(),
                        port,
                        proto: proto.to_string(),
                        fmts: it.map(str::to_string).collect(),
                        conn: None,
                        rtcp: None,
                        rtcp_mux: false,
                        rtpmap: Vec::new(),
                        line: i,
                        end: lines.len(),
                    });
                }
                b'c' => {
                    let ip = parse_conn(v)?;
                    match sdp.media.last_mut() {
                        Some(m) => m.conn = Some(ip),
                        None => sdp.conn = Some(ip),
                    }
                }
                b'o' if sdp.media.is_empty() => {
                    let f: Vec<&str> = v.split_ascii_whitespace().collect();
                    if f.len() != 6 {
                        return err("bad origin line");
                    }
                    sdp.origin = parse_conn(&f[3..].join(" ")).ok();
                }
                b'a' => {
                    if let Some(m) = sdp.media.last_mut() {
                        if let Some(r) = v.strip_prefix("rtcp:") {
                            let mut it = r.split_ascii_whitespace();
                            let port: u16 = it
                                .next()
                                .and_then(|p| p.parse().ok())
                                .ok_or_else(|| SdpError(format!("bad a=rtcp `{l}`")))?;
                            let rest: Vec<&str> = it.collect();
                            let addr = if rest.is_empty() { None } else { Some(parse_conn(&rest.join(" "))?) };
                            m.rtcp = Some((port, addr));
                        } else if v == "rtcp-mux" {
                            m.rtcp_mux = true;
                        } else if let Some(r) = v.strip_prefix("rtpmap:") {
                            let mut it = r.split_ascii_whitespace();
                            if let (Some(pt), Some(enc)) = (it.next(), it.next()) {
                                let rate = enc.split('/').nth(1).and_then(|r| r.parse::<u32>().ok());
                                if let (Ok(pt), Some(rate)) = (pt.parse::<u8>(), rate) {
                                    if pt < 128 && rate > 0 {
                                        m.rtpmap.push((pt, rate));
                                    }
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for (n, m) in sdp.media.iter().enumerate() {
            if m.port != 0 && m.conn.is_none() && sdp.conn.is_none() {
                return err(format!("media section {} has no connection address", n + 1));
            }
        }
        sdp.text = text.to_string();
        sdp.lines = lines;
        Ok(sdp)
    }

    /// The address media section `i` is sent from/to.
    pub fn media_addr(&self, i: usize) -> Option<IpAddr> {
        self.media.get(i).and_then(|m| m.conn.or(self.conn))
    }

    /// Writes the body with addresses and ports replaced.
    pub fn rewrite(&self, rw: &Rewrite) -> String {
        let mut out = String::with_capacity(self.lines.iter().map(|l| l.len() + 2).sum::<usize>() + 64);
        let lines: Vec<&str> = self.all_lines().collect();
        let first_media = self.media.first().map_or(self.lines.len(), |m| m.line);
        // The session c= takes the first rewritten media address.
        let session_addr = rw.media.iter().flatten().next().map(|r| r.addr);
        let push = |out: &mut String, l: &str| {
            // A bracketed IPv6 address (accepted by the parser) goes out
            // in the RFC 4566 form.
            // Only a whole token `[addr]` loses its brackets: a lone `[`
            // elsewhere stays, so the line keeps its fields.
            if (l.starts_with("c=") || l.starts_with("o=") || l.starts_with("a=rtcp:")) && l.contains('[') {
                let mut rest = l;
                while !rest.is_empty() {
                    let end = rest.find(' ').map_or(rest.len(), |i| i + 1);
                    let (tok, tail) = rest.split_at(end);
                    let word = tok.trim_end_matches(' ');
                    match unbracket(word) {
                        Some(addr) => {
                            out.push_str(addr);
                            out.push_str(&tok[word.len()..]);
                        }
                        _ => out.push_str(tok),
                    }
                    rest = tail;
                }
            } else {
                out.push_str(l);
            }
            out.push_str("\r\n");
        };
        for &l in &lines[..first_media] {
            if l.starts_with("c=") {
                if let Some(a) = session_addr {
                    push(&mut out, &format!("c=IN {} {a}", fam(a)));
                    continue;
                }
            }
            if l.starts_with("o=") && rw.origin {
                if let Some(a) = session_addr {
                    let f: Vec<&str> = l[2..].split_ascii_whitespace().collect();
                    if f.len() == 6 {
                        push(&mut out, &format!("o={} {} {} IN {} {a}", f[0], f[1], f[2], fam(a)));
                        continue;
                    }
                }
            }
            if rw.remove_ice && l.starts_with("a=") && is_ice(&l[2..]) {
                continue;
            }
            push(&mut out, l);
        }
        for (n, m) in self.media.iter().enumerate() {
            let r = rw.media.get(n).copied().flatten();
            let mut wrote_rtcp = false;
            for &l in &lines[m.line..m.end] {
                if rw.remove_ice && l.starts_with("a=") && is_ice(&l[2..]) {
                    continue;
                }
                let Some(r) = r else {
                    push(&mut out, l);
                    continue;
                };
                if let Some(rest) = l.strip_prefix("m=") {
                    // Same tokens as the parser saw: kind, port, the rest.
                    let mut f: Vec<&str> = rest.split_ascii_whitespace().collect();
                    let port = r.port.to_string();
                    if f.len() > 1 {
                        f[1] = &port;
                    }
                    push(&mut out, &format!("m={}", f.join(" ")));
                    if m.conn.is_none() && self.conn.is_some() && session_addr != Some(r.addr) {
                        push(&mut out, &format!("c=IN {} {}", fam(r.addr), r.addr));
                    }
                } else if l.starts_with("c=") {
                    push(&mut out, &format!("c=IN {} {}", fam(r.addr), r.addr));
                } else if l.starts_with("a=rtcp:") {
                    if !m.rtcp_mux {
                        push(&mut out, &format!("a=rtcp:{}", r.port.wrapping_add(1)));
                    } else {
                        push(&mut out, &format!("a=rtcp:{}", r.port));
                    }
                    wrote_rtcp = true;
                } else {
                    push(&mut out, l);
                }
            }
            if let (Some(r), false, false) = (r, wrote_rtcp, m.rtcp_mux) {
                push(&mut out, &format!("a=rtcp:{}", r.port.wrapping_add(1)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFER6: &str = "v=0\r\n\
o=- 1545997027 1 IN IP6 2001:db8:6::10\r\n\
s=tester\r\n\
c=IN IP6 2001:db8:6::10\r\n\
t=0 0\r\n\
m=audio 9002 RTP/AVP 0 8 101\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=candidate:1 1 UDP 2130706431 2001:db8:6::10 9002 typ host\r\n\
a=ice-ufrag:abcd\r\n\
a=ice-pwd:0123456789abcdef01234567\r\n\
a=sendrecv\r\n";

    /// Issue #32: `c=IN IP6 [2001:db8::2]` (SIPp's stock scenarios) is
    /// read as the address and written back without brackets.
    #[test]
    fn bracketed_ipv6_connection_addresses_are_accepted_and_written_plain() {
        let body = "v=0\r\no=- 1 1 IN IP6 [2001:db8::2]\r\ns=-\r\nc=IN IP6 [2001:db8::2]\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\nm=video 0 RTP/AVP 96\r\nc=IN IP6 [2001:db8::3]\r\n";
        let s = Sdp::parse(body.as_bytes()).unwrap();
        assert_eq!(s.conn, Some("2001:db8::2".parse().unwrap()));
        assert_eq!(s.origin, Some("2001:db8::2".parse().unwrap()));
        let rw = Rewrite {
            media: vec![Some(MediaRewrite { addr: "192.0.2.1".parse().unwrap(), port: 30000 }), None],
            origin: false,
            remove_ice: false,
        };
        let out = s.rewrite(&rw);
        assert!(!out.contains('['), "{out}");
        // A lone bracket that is no address keeps the line's fields (fuzz).
        let odd = Sdp::parse(b"v=0\r\no=- 1 [ IN IP6 ::1\r\n").unwrap();
        let again = odd.rewrite(&Rewrite { media: vec![], origin: false, remove_ice: false });
        assert!(again.contains("o=- 1 [ IN IP6 ::1\r\n"), "{again}");
        Sdp::parse(again.as_bytes()).unwrap();
        assert!(out.contains("o=- 1 1 IN IP6 2001:db8::2\r\n") && out.contains("c=IN IP6 2001:db8::3\r\n"), "{out}");
        assert!(Sdp::parse(b"v=0\r\nc=IN IP4 [192.0.2.1]\r\n").is_err(), "only IPv6 in brackets");
    }

    #[test]
    fn parses_offer() {
        let s = Sdp::parse(OFFER6.as_bytes()).unwrap();
        assert_eq!(s.conn, Some("2001:db8:6::10".parse().unwrap()));
        assert_eq!(s.origin, Some("2001:db8:6::10".parse().unwrap()));
        assert_eq!(s.media.len(), 1);
        assert_eq!(s.media[0].port, 9002);
        assert_eq!(s.media[0].fmts, ["0", "8", "101"]);
        assert_eq!(s.media[0].rtpmap, [(101, 8000)]);
        assert_eq!(s.media_addr(0), Some("2001:db8:6::10".parse().unwrap()));
    }

    #[test]
    fn rewrites_like_rtpengine() {
        let s = Sdp::parse(OFFER6.as_bytes()).unwrap();
        let rw = Rewrite {
            media: vec![Some(MediaRewrite { addr: "192.0.2.1".parse().unwrap(), port: 30000 })],
            origin: true,
            remove_ice: true,
        };
        let want = "v=0\r\n\
o=- 1545997027 1 IN IP4 192.0.2.1\r\n\
s=tester\r\n\
c=IN IP4 192.0.2.1\r\n\
t=0 0\r\n\
m=audio 30000 RTP/AVP 0 8 101\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=sendrecv\r\n\
a=rtcp:30001\r\n";
        assert_eq!(s.rewrite(&rw), want);
        // Without origin/ICE flags those lines stay.
        let rw2 = Rewrite { origin: false, remove_ice: false, ..rw };
        let out = s.rewrite(&rw2);
        assert!(out.contains("o=- 1545997027 1 IN IP6 2001:db8:6::10\r\n"));
        assert!(out.contains("a=ice-ufrag:abcd\r\n"));
        assert!(out.contains("c=IN IP4 192.0.2.1\r\n"));
    }

    #[test]
    fn media_level_connection_and_rtcp() {
        let body = "v=0\no=- 1 1 IN IP4 10.0.0.1\ns=-\nt=0 0\nm=audio 4000 RTP/AVP 8\nc=IN IP4 10.0.0.2\na=rtcp:4005 IN IP4 10.0.0.3\nm=video 0 RTP/AVP 96\n";
        let s = Sdp::parse(body.as_bytes()).unwrap();
        assert_eq!(s.media[0].rtcp, Some((4005, Some("10.0.0.3".parse().unwrap()))));
        assert_eq!(s.media_addr(0), Some("10.0.0.2".parse().unwrap()));
        let rw = Rewrite {
            media: vec![Some(MediaRewrite { addr: "2001:db8::1".parse().unwrap(), port: 30010 }), None],
            ..Rewrite::default()
        };
        let out = s.rewrite(&rw);
        assert_eq!(
            out,
            "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 30010 RTP/AVP 8\r\nc=IN IP6 2001:db8::1\r\na=rtcp:30011\r\nm=video 0 RTP/AVP 96\r\n"
        );
    }

    #[test]
    fn rtcp_mux_gets_no_rtcp_port() {
        let body = "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\na=rtcp-mux\r\n";
        let s = Sdp::parse(body.as_bytes()).unwrap();
        assert!(s.media[0].rtcp_mux);
        let rw = Rewrite {
            media: vec![Some(MediaRewrite { addr: "10.9.9.9".parse().unwrap(), port: 30000 })],
            ..Rewrite::default()
        };
        let out = s.rewrite(&rw);
        assert!(!out.contains("a=rtcp:"), "{out}");
        assert!(out.contains("m=audio 30000 RTP/AVP 0\r\n"));
    }

    #[test]
    fn odd_spacing_in_media_lines() {
        // Found by the sdp_rewrite fuzz target: a leading space shifted the
        // rewritten port into the media kind.
        let body = "v=0\r\nc=IN IP4 192.0.2.50\r\nm=audio 900 RTP/AVP 0\r\nm= 2 2 IN ITP/AVP 96\r\n";
        let s = Sdp::parse(body.as_bytes()).unwrap();
        let a = "192.0.2.1".parse().unwrap();
        let rw = Rewrite {
            media: vec![Some(MediaRewrite { addr: a, port: 30000 }), Some(MediaRewrite { addr: a, port: 30002 })],
            ..Rewrite::default()
        };
        let again = Sdp::parse(s.rewrite(&rw).as_bytes()).unwrap();
        assert_eq!(again.media[1].port, 30002);
        assert_eq!(again.media[1].kind, "2");
    }

    #[test]
    fn hostile_sdp_is_an_error() {
        for bad in [
            "",
            "x",
            "v=1\r\n",
            "v=0\r\nc=IN IP4 999.1.1.1\r\n",
            "v=0\r\nc=IN IP6 10.0.0.1\r\n",
            "v=0\r\nm=audio 70000 RTP/AVP 0\r\nc=IN IP4 1.2.3.4\r\n",
            "v=0\r\nm=audio 4000 RTP/AVP 0\r\n",
            "v=0\r\nm=audio\r\n",
            "v=0\r\nbad line\r\n",
            "v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP 0\r\na=rtcp:x\r\n",
            "v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP 0\r\na=rtcp:5 IN IP4\r\n",
        ] {
            assert!(Sdp::parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let many = format!("v=0\r\nc=IN IP4 1.2.3.4\r\n{}", "m=audio 4000 RTP/AVP 0\r\n".repeat(MAX_MEDIA + 1));
        assert!(Sdp::parse(many.as_bytes()).is_err());
        assert!(Sdp::parse(&[b'v', b'=', b'0', b'\n', 0xff]).is_err());
    }
}
