//! Message framing on a SIP stream (RFC 3261 §18.3: the head ends at the
//! first empty line, the body is Content-Length bytes; CRLF keep-alives
//! between messages, RFC 5626 §3.5.1). The bytes of a message arrive in
//! any pieces: each byte is looked at once for the end of the head, the
//! head once for its Content-Length, and the whole message is split off
//! when its last byte is in — a client trickling a message byte by byte
//! costs the ALG the same as one sending it at once (issue #29 D5; the
//! earlier framing parsed the whole buffer again on every read). The
//! message itself is parsed and checked by the core.

/// Why a stream cannot be framed (the connection is closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// No end of head within the size limit, or a message over it.
    TooLarge,
    /// A Content-Length that is not a number.
    BadLength,
}

impl std::fmt::Display for FramingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FramingError::TooLarge => "message over the size limit",
            FramingError::BadLength => "bad Content-Length",
        })
    }
}

/// One stream's bytes not yet handed on.
#[derive(Debug, Default)]
pub struct StreamFramer {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for the end of the head.
    scanned: usize,
    /// The current message's whole length, once its head is in.
    need: Option<usize>,
}

/// Capacity kept for an idle stream (a larger buffer is given back once
/// empty).
const IDLE_CAPACITY: usize = 4096;

impl StreamFramer {
    /// The buffer to read into (with room for `more` bytes).
    pub fn read_target(&mut self, more: usize) -> &mut Vec<u8> {
        self.buf.reserve(more);
        &mut self.buf
    }

    /// Appends received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes of an unfinished message are held.
    pub fn in_message(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message (keep-alives skipped: `Ok(None)` after them
    /// when nothing else is complete), at most `max` bytes.
    pub fn next_message(&mut self, max: usize) -> Result<Option<Vec<u8>>, FramingError> {
        let need = match self.need {
            Some(n) => n,
            None => {
                let lead = self.buf.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
                if lead > 0 {
                    self.buf.drain(..lead);
                    self.scanned = 0;
                }
                let from = self.scanned.saturating_sub(2);
                let Some(end) = head_end(&self.buf, from) else {
                    self.scanned = self.buf.len();
                    if self.buf.len() > max {
                        return Err(FramingError::TooLarge);
                    }
                    self.shrink();
                    return Ok(None);
                };
                let total = end.checked_add(content_length(&self.buf[..end])?).ok_or(FramingError::TooLarge)?;
                if total > max {
                    return Err(FramingError::TooLarge);
                }
                self.need = Some(total);
                total
            }
        };
        if self.buf.len() < need {
            return Ok(None);
        }
        let rest = self.buf.split_off(need);
        let msg = std::mem::replace(&mut self.buf, rest);
        self.need = None;
        self.scanned = 0;
        Ok(Some(msg))
    }

    fn shrink(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > IDLE_CAPACITY {
            self.buf = Vec::new();
        }
    }
}

/// Where the head ends (past its empty line), searching from `from`: the
/// first LF followed by CRLF or LF.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(off) = memchr::memchr(b'\n', &buf[i..]) {
        let nl = i + off;
        match (buf.get(nl + 1), buf.get(nl + 2)) {
            (Some(b'\n'), _) => return Some(nl + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(nl + 3),
            (Some(b'\r'), None) | (None, _) => return None,
            _ => i = nl + 1,
        }
    }
    None
}

/// The Content-Length of a head (`l` is its compact form; none: 0). Only
/// the first counts here; the core refuses a message with two.
fn content_length(head: &[u8]) -> Result<usize, FramingError> {
    for line in head.split(|&b| b == b'\n').skip(1) {
        let Some(colon) = memchr::memchr(b':', line) else { continue };
        let name = line[..colon].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"l") {
            let v = line[colon + 1..].trim_ascii();
            if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
                return Err(FramingError::BadLength);
            }
            return std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).ok_or(FramingError::BadLength);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &[u8] =
        b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: 3\r\n\r\nabc\r\n\r\nOPTIONS sip:a@b SIP/2.0\r\nl: 0\r\n\r\n";

    #[test]
    fn messages_come_out_whole_however_the_bytes_arrive() {
        for piece in [1, 2, 3, 7, TWO.len()] {
            let mut f = StreamFramer::default();
            let mut out = Vec::new();
            for c in TWO.chunks(piece) {
                f.push(c);
                while let Some(m) = f.next_message(65_535).unwrap() {
                    out.push(m);
                }
            }
            assert_eq!(out.len(), 2, "pieces of {piece}");
            assert!(out[0].ends_with(b"\r\n\r\nabc"));
            assert!(out[1].starts_with(b"OPTIONS") && out[1].ends_with(b"l: 0\r\n\r\n"), "keep-alive skipped");
            assert!(!f.in_message());
        }
        // LF-only heads are framed too.
        let mut f = StreamFramer::default();
        f.push(b"OPTIONS sip:a@b SIP/2.0\nl: 2\n\nhi");
        assert_eq!(f.next_message(100).unwrap().unwrap(), b"OPTIONS sip:a@b SIP/2.0\nl: 2\n\nhi");
    }

    #[test]
    fn a_trickled_head_is_searched_from_where_the_search_stopped() {
        let mut f = StreamFramer::default();
        f.push(b"INVITE sip:a@b SIP/2.0\r\n");
        for i in 0..1000 {
            f.push(b"X-Pad: y\r\n");
            assert_eq!(f.next_message(1 << 20).unwrap(), None);
            assert_eq!(f.scanned, 24 + 10 * (i + 1), "the next search starts at the new bytes");
        }
        f.push(b"\r");
        assert_eq!(f.next_message(1 << 20).unwrap(), None, "CR of the empty line alone");
        f.push(b"\n");
        assert_eq!(f.next_message(1 << 20).unwrap().map(|m| m.len()), Some(24 + 10_000 + 2));
    }

    #[test]
    fn limits_and_bad_lengths_close_the_stream() {
        let mut f = StreamFramer::default();
        f.push(&[b'a'; 200]);
        assert_eq!(f.next_message(100), Err(FramingError::TooLarge), "no end of head within the limit");
        let mut f = StreamFramer::default();
        f.push(b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: 500\r\n\r\n");
        assert_eq!(f.next_message(100), Err(FramingError::TooLarge), "declared body over the limit");
        let mut f = StreamFramer::default();
        f.push(b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: x1\r\n\r\n");
        assert_eq!(f.next_message(1000), Err(FramingError::BadLength));
        let mut f = StreamFramer::default();
        f.push(b"\r\n\r\n");
        assert_eq!(f.next_message(10), Ok(None));
        assert!(!f.in_message(), "only keep-alives");
    }
}
