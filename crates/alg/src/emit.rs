//! Writing messages: the start line, header lines (copied as received or
//! rewritten) and a fresh Content-Length for the (possibly rewritten) body.

use crate::msg::{Header, Message, Name};
use crate::uri::{self, NameAddr};

/// A message being written.
#[derive(Debug)]
pub struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    /// Starts with a start line.
    pub fn new(start: &str, capacity: usize) -> Builder {
        let mut buf = Vec::with_capacity(capacity);
        buf.extend_from_slice(start.as_bytes());
        buf.extend_from_slice(b"\r\n");
        Builder { buf }
    }

    /// `Name: value`.
    pub fn header(&mut self, name: &str, value: &str) {
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A header line as received.
    pub fn raw(&mut self, h: &Header) {
        self.buf.extend_from_slice(h.line.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// Content-Length, the blank line and the body.
    pub fn finish(mut self, body: &[u8]) -> Vec<u8> {
        self.buf.extend_from_slice(b"Content-Length: ");
        self.buf.extend_from_slice(body.len().to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n\r\n");
        self.buf.extend_from_slice(body);
        self.buf
    }
}

/// `addr` with its URI replaced (display name and parameters kept).
pub fn replace_uri(a: &NameAddr, new_uri: &str) -> String {
    let mut s = String::with_capacity(a.text.len() + new_uri.len());
    if let Some(d) = a.display {
        s.push_str(d);
        s.push(' ');
    }
    s.push('<');
    s.push_str(new_uri);
    s.push('>');
    s.push_str(a.params);
    s
}

/// Writes the address headers of kind `n` of `m` after dropping the first
/// `skip` elements (Route popping), joined back per header line.
pub fn write_list_skipping(b: &mut Builder, h: &Header, skip: &mut usize) {
    if *skip == 0 {
        b.raw(h);
        return;
    }
    let v = h.value.as_ref();
    let Ok(parts) = uri::split_list(v) else {
        b.raw(h);
        return;
    };
    let rest: Vec<&str> = parts
        .into_iter()
        .filter(|_| {
            if *skip > 0 {
                *skip -= 1;
                false
            } else {
                true
            }
        })
        .map(|r| v[r].trim())
        .collect();
    if !rest.is_empty() {
        b.header(h.raw_name, &rest.join(", "));
    }
}

/// Rewrites every element of a Contact-like header with `f` (None keeps
/// the element as it is); `*` passes through.
pub fn map_addresses(h: &Header, f: &mut dyn FnMut(&NameAddr) -> Option<String>) -> Option<String> {
    let v = h.value.as_ref();
    if v.trim() == "*" {
        return None;
    }
    let list = uri::parse_name_addr_list(v).ok()?;
    // Built only once an element changes (most headers keep all of theirs).
    let mut out: Option<String> = None;
    for (i, a) in list.iter().enumerate() {
        match (f(a), &mut out) {
            (Some(s), None) => {
                let mut o = String::with_capacity(v.len() + s.len());
                for b in &list[..i] {
                    o.push_str(b.text);
                    o.push_str(", ");
                }
                o.push_str(&s);
                out = Some(o);
            }
            (Some(s), Some(o)) => {
                o.push_str(", ");
                o.push_str(&s);
            }
            (None, Some(o)) => {
                o.push_str(", ");
                o.push_str(a.text);
            }
            (None, None) => {}
        }
    }
    out
}

/// The first Via value of `m` and the rest of the Via header it sits in.
pub fn first_via<'m>(m: &'m Message) -> Option<(usize, &'m str, Vec<&'m str>)> {
    let idx = m.headers.iter().position(|h| h.name == Name::Via)?;
    let v = m.headers[idx].value.as_ref();
    let parts = uri::split_list(v).ok()?;
    let mut it = parts.into_iter().map(|r| v[r].trim());
    let first = it.next()?;
    Some((idx, first, it.collect()))
}
