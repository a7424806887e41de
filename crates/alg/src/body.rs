//! Where a message's SDP is (issue #29 item 4): the whole body
//! (`application/sdp`), or one part of a `multipart/*` body (RFC 2046
//! §5.1, RFC 5621: SIP-I's ISUP beside SDP, an SDP with a resource list).
//! A multipart body's SDP is anchored like a plain one: the part's content
//! is rewritten and the body put back together around it. What the ALG
//! cannot anchor — two SDP parts, a nested multipart, a part with its own
//! Content-Length or Content-Encoding, a body whose delimiters do not
//! parse — is never passed on unchecked: a request gets `415` with
//! `Accept`, a response loses its body.

use std::ops::Range;

use crate::msg::Message;

/// The content types a request's body may have when its media is anchored
/// (the `Accept` of a `415`).
pub const ACCEPTED: &str = "application/sdp, multipart/mixed, multipart/alternative, multipart/related";

/// Where a message's SDP is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdpBody {
    /// No SDP.
    None,
    /// The whole body.
    Whole,
    /// The content of one part of a multipart body (a range of the body).
    Part(Range<usize>),
    /// SDP the ALG cannot anchor (why).
    Unsupported(&'static str),
}

impl SdpBody {
    /// There is SDP (anchored or not).
    pub fn present(&self) -> bool {
        !matches!(self, SdpBody::None)
    }
}

fn is_sdp_type(t: &str) -> bool {
    t.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/sdp")
}

fn is_multipart(t: &str) -> bool {
    // Bytes, not a str slice: a header value may hold any UTF-8 (fuzz).
    t.trim_start().as_bytes().get(..10).is_some_and(|p| p.eq_ignore_ascii_case(b"multipart/"))
}

/// The SDP of `m`.
pub fn sdp_body(m: &Message) -> SdpBody {
    if m.body.is_empty() {
        return SdpBody::None;
    }
    let Some(ct) = m.header(crate::msg::Name::ContentType) else { return SdpBody::None };
    if is_sdp_type(ct) {
        return SdpBody::Whole;
    }
    if !is_multipart(ct) {
        return SdpBody::None;
    }
    let params = ct.find(';').map_or("", |i| &ct[i..]);
    let Some(b) = crate::uri::find_param(params, "boundary").flatten() else {
        return SdpBody::Unsupported("multipart body without a boundary");
    };
    let b = b.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(b);
    match multipart_sdp(m.body, b) {
        Ok(Some(r)) => SdpBody::Part(r),
        Ok(None) => SdpBody::None,
        Err(why) => SdpBody::Unsupported(why),
    }
}

/// The content range of the one `application/sdp` part of a multipart
/// body with delimiter `boundary` (RFC 2046 §5.1.1), None without one.
pub fn multipart_sdp(body: &[u8], boundary: &str) -> Result<Option<Range<usize>>, &'static str> {
    if boundary.is_empty() || boundary.len() > 70 {
        return Err("bad multipart boundary");
    }
    let delim = format!("--{boundary}");
    let d = delim.as_bytes();
    // Delimiter lines: at the start of the body or after a line end.
    let mut at = Vec::new();
    let mut i = 0;
    while let Some(off) = memchr::memmem::find(&body[i..], d) {
        let p = i + off;
        if p == 0 || body[p - 1] == b'\n' {
            at.push(p);
        }
        i = p + d.len();
    }
    let mut found = None;
    let mut closed = false;
    for (k, &start) in at.iter().enumerate() {
        if body[start + d.len()..].starts_with(b"--") {
            closed = true;
            break;
        }
        let Some(&next) = at.get(k + 1) else { break };
        // The part begins after the delimiter line's end and ends before
        // the line end that precedes the next delimiter.
        let line_end =
            memchr::memchr(b'\n', &body[start..next]).map(|x| start + x + 1).ok_or("bad multipart delimiter")?;
        let end = if body[..next].ends_with(b"\r\n") { next - 2 } else { next - 1 };
        if end < line_end {
            return Err("bad multipart part");
        }
        let part = &body[line_end..end];
        let (head, content) = match memchr::memmem::find(part, b"\r\n\r\n") {
            Some(h) => (&part[..h], h + 4),
            None if part.starts_with(b"\r\n") => (&part[..0], 2),
            None => return Err("multipart part without a header end"),
        };
        let head = std::str::from_utf8(head).map_err(|_| "multipart part head is not UTF-8")?;
        let mut ctype = "text/plain";
        for l in head.split("\r\n") {
            let Some((n, v)) = l.split_once(':') else { continue };
            let n = n.trim();
            if n.eq_ignore_ascii_case("content-type") {
                ctype = v.trim();
            } else if n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("content-encoding") {
                return Err("multipart part with its own Content-Length or Content-Encoding");
            }
        }
        if is_multipart(ctype) {
            return Err("nested multipart body");
        }
        if is_sdp_type(ctype) {
            if found.is_some() {
                return Err("more than one SDP part");
            }
            found = Some(line_end + content..end);
        }
    }
    if !closed {
        return Err("multipart body without its closing delimiter");
    }
    Ok(found)
}

/// What goes around a rewritten SDP: the body's bytes before and after
/// the SDP part (None: the SDP is the whole body).
pub fn frame_of(body: &[u8], sdp: &SdpBody) -> Option<(Vec<u8>, Vec<u8>)> {
    match sdp {
        SdpBody::Part(r) => Some((body[..r.start].to_vec(), body[r.end..].to_vec())),
        _ => None,
    }
}

/// The body with `sdp` in the frame (as it is without one).
pub fn splice(frame: Option<&(Vec<u8>, Vec<u8>)>, sdp: Vec<u8>) -> Vec<u8> {
    match frame {
        None => sdp,
        Some((a, b)) => {
            let mut out = Vec::with_capacity(a.len() + sdp.len() + b.len());
            out.extend_from_slice(a);
            out.extend_from_slice(&sdp);
            out.extend_from_slice(b);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Content-Type with a multibyte character across byte 10 is no
    /// multipart type, not a panic (fuzz: sip_message).
    #[test]
    fn a_multibyte_content_type_is_no_multipart() {
        assert!(!is_multipart("nt-Type: \u{19e}@[200tion/sdp"));
        assert!(!is_multipart("ƞƞƞƞƞƞ"));
        assert!(is_multipart("  Multipart/mixed; boundary=x"));
    }

    fn msg(ct: &str, body: &str) -> Vec<u8> {
        format!("INVITE sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    const SDP: &str =
        "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";

    /// RFC 5621 §3's form: SDP beside another part (here ISUP, as SIP-I).
    fn sip_i(sdp: &str) -> String {
        format!("--unique-boundary-1\r\nContent-Type: application/SDP\r\n\r\n{sdp}\r\n--unique-boundary-1\r\nContent-Type: application/ISUP;version=nxv3\r\nContent-Disposition: signal;handling=optional\r\n\r\n\x01\x00\x49\x00\x00\x03\x02\x00\r\n--unique-boundary-1--\r\n")
    }

    #[test]
    fn plain_and_multipart_sdp_are_found() {
        let raw = msg("application/sdp", SDP);
        let m = Message::parse_datagram(&raw).unwrap();
        assert_eq!(sdp_body(&m), SdpBody::Whole);
        let raw = msg("multipart/mixed;boundary=unique-boundary-1", &sip_i(SDP));
        let m = Message::parse_datagram(&raw).unwrap();
        let SdpBody::Part(r) = sdp_body(&m) else { panic!("{:?}", sdp_body(&m)) };
        assert_eq!(&m.body[r.clone()], SDP.as_bytes());
        // Spliced back around a new SDP, the rest is byte for byte.
        let frame = frame_of(m.body, &SdpBody::Part(r));
        let new = splice(frame.as_ref(), b"v=0\r\nX\r\n".to_vec());
        assert_eq!(String::from_utf8_lossy(&new), sip_i("v=0\r\nX\r\n"));
        // Quoted boundary, no SDP part: nothing to anchor.
        let body = "--b 1\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b 1--\r\n";
        let raw = msg("multipart/mixed; boundary=\"b 1\"", body);
        assert_eq!(sdp_body(&Message::parse_datagram(&raw).unwrap()), SdpBody::None);
        let raw = msg("text/plain", "c=IN IP4 127.0.0.1");
        assert_eq!(sdp_body(&Message::parse_datagram(&raw).unwrap()), SdpBody::None);
    }

    #[test]
    fn what_cannot_be_anchored_is_unsupported() {
        let two = format!("--x\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--x\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--x--\r\n");
        let nested = "--x\r\nContent-Type: multipart/mixed;boundary=y\r\n\r\n--y\r\nContent-Type: application/sdp\r\n\r\nv=0\r\n--y--\r\n--x--\r\n";
        let unclosed = format!("--x\r\nContent-Type: application/sdp\r\n\r\n{SDP}");
        let own_len = format!("--x\r\nContent-Type: application/sdp\r\nContent-Length: 3\r\n\r\n{SDP}\r\n--x--\r\n");
        for (ct, body) in [
            ("multipart/mixed;boundary=x", two.as_str()),
            ("multipart/mixed;boundary=x", nested),
            ("multipart/mixed;boundary=x", unclosed.as_str()),
            ("multipart/mixed;boundary=x", own_len.as_str()),
            ("multipart/mixed", "--x\r\n"),
        ] {
            let raw = msg(ct, body);
            let m = Message::parse_datagram(&raw).unwrap();
            assert!(matches!(sdp_body(&m), SdpBody::Unsupported(_)), "{body:?}: {:?}", sdp_body(&m));
        }
    }
}
