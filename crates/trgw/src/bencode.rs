//! Bencode (the BitTorrent encoding rtpengine's ng protocol uses): integers
//! `i42e`, byte strings `4:spam`, lists `l...e`, dictionaries `d...e`.
//!
//! The decoder is strict about syntax and bounded (nesting depth, element
//! count) so hostile control messages cost little; dictionaries keep their
//! order (rtpengine does not sort keys either).

use std::fmt;

/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 32;
/// Most elements (all levels) accepted in one message.
pub const MAX_ITEMS: usize = 10_000;

/// A bencode value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `i<n>e`
    Int(i64),
    /// `<len>:<bytes>`
    Bytes(Vec<u8>),
    /// `l...e`
    List(Vec<Value>),
    /// `d...e`, keys in message order.
    Dict(Vec<(Vec<u8>, Value)>),
}

/// Why a message is not bencode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset of the problem.
    pub at: usize,
    /// What is wrong.
    pub what: &'static str,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bencode: {} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for DecodeError {}

impl Value {
    /// A byte-string value from text.
    pub fn str(s: &str) -> Value {
        Value::Bytes(s.as_bytes().to_vec())
    }

    /// The bytes of a string value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// A string value as UTF-8 text (lossy for bad UTF-8 is not done: None).
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// An integer, or a string holding a decimal integer.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bytes(_) => self.as_str().and_then(|s| s.trim().parse().ok()),
            _ => None,
        }
    }

    /// List items.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// Dictionary lookup (first match).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(d) => d.iter().find(|(k, _)| k == key.as_bytes()).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Value::Int(i) => {
                out.push(b'i');
                out.extend_from_slice(i.to_string().as_bytes());
                out.push(b'e');
            }
            Value::Bytes(b) => {
                out.extend_from_slice(b.len().to_string().as_bytes());
                out.push(b':');
                out.extend_from_slice(b);
            }
            Value::List(l) => {
                out.push(b'l');
                for v in l {
                    v.encode_into(out);
                }
                out.push(b'e');
            }
            Value::Dict(d) => {
                out.push(b'd');
                for (k, v) in d {
                    out.extend_from_slice(k.len().to_string().as_bytes());
                    out.push(b':');
                    out.extend_from_slice(k);
                    v.encode_into(out);
                }
                out.push(b'e');
            }
        }
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode_into(&mut v);
        v
    }

    /// Converts to JSON (byte strings as UTF-8 text, lossy).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Bytes(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
            Value::List(l) => serde_json::Value::Array(l.iter().map(Value::to_json).collect()),
            Value::Dict(d) => serde_json::Value::Object(
                d.iter().map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.to_json())).collect(),
            ),
        }
    }

    /// Converts from JSON: strings to byte strings, integers to integers,
    /// booleans to 1/0, null to an empty string, other numbers to text.
    pub fn from_json(j: &serde_json::Value) -> Value {
        match j {
            serde_json::Value::Null => Value::Bytes(Vec::new()),
            serde_json::Value::Bool(b) => Value::Int(i64::from(*b)),
            serde_json::Value::Number(n) => n.as_i64().map_or_else(|| Value::str(&n.to_string()), Value::Int),
            serde_json::Value::String(s) => Value::str(s),
            serde_json::Value::Array(a) => Value::List(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => {
                Value::Dict(o.iter().map(|(k, v)| (k.as_bytes().to_vec(), Value::from_json(v))).collect())
            }
        }
    }
}

/// Decodes exactly one value filling all of `buf`.
pub fn decode(buf: &[u8]) -> Result<Value, DecodeError> {
    let mut p = Parser { buf, pos: 0, items: 0 };
    let v = p.value(0)?;
    if p.pos != buf.len() {
        return Err(DecodeError { at: p.pos, what: "trailing bytes after the value" });
    }
    Ok(v)
}

struct Parser<'a> {
    buf: &'a [u8],
    pos: usize,
    items: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError { at: self.pos, what }
    }

    fn peek(&self) -> Result<u8, DecodeError> {
        self.buf.get(self.pos).copied().ok_or_else(|| self.err("unexpected end"))
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        self.items += 1;
        if self.items > MAX_ITEMS {
            return Err(self.err("too many elements"));
        }
        match self.peek()? {
            b'i' => {
                self.pos += 1;
                let end = self.find(b'e')?;
                let digits = &self.buf[self.pos..end];
                let ok = match digits {
                    [] | [b'-'] => false,
                    [b'-', b'0', ..] => false,
                    [b'0', _, ..] => false,
                    [b'-', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
                    d => d.iter().all(u8::is_ascii_digit),
                };
                if !ok {
                    return Err(self.err("bad integer"));
                }
                let n = std::str::from_utf8(digits)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| self.err("integer out of range"))?;
                self.pos = end + 1;
                Ok(Value::Int(n))
            }
            b'0'..=b'9' => Ok(Value::Bytes(self.bytes()?)),
            b'l' => {
                self.pos += 1;
                let mut l = Vec::new();
                while self.peek()? != b'e' {
                    l.push(self.value(depth + 1)?);
                }
                self.pos += 1;
                Ok(Value::List(l))
            }
            b'd' => {
                self.pos += 1;
                let mut d = Vec::new();
                while self.peek()? != b'e' {
                    if !self.peek()?.is_ascii_digit() {
                        return Err(self.err("dictionary key is not a string"));
                    }
                    let k = self.bytes()?;
                    let v = self.value(depth + 1)?;
                    d.push((k, v));
                }
                self.pos += 1;
                Ok(Value::Dict(d))
            }
            _ => Err(self.err("not a bencode value")),
        }
    }

    fn find(&self, c: u8) -> Result<usize, DecodeError> {
        self.buf[self.pos..].iter().position(|&b| b == c).map(|i| self.pos + i).ok_or_else(|| self.err("unterminated"))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let colon = self.find(b':')?;
        let digits = &self.buf[self.pos..colon];
        if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
            return Err(self.err("bad string length"));
        }
        let len: usize = digits.iter().fold(0, |a, &d| a * 10 + usize::from(d - b'0'));
        let start = colon + 1;
        let end = start.checked_add(len).filter(|&e| e <= self.buf.len()).ok_or_else(|| self.err("string past end"))?;
        self.pos = end;
        Ok(self.buf[start..end].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_ng_ping() {
        let v = decode(b"d7:command4:pinge").unwrap();
        assert_eq!(v.get("command").and_then(Value::as_str), Some("ping"));
        assert_eq!(v.encode(), b"d7:command4:pinge");
    }

    #[test]
    fn decodes_nested() {
        let v = decode(b"d5:flagsl13:trust-addresse7:replacel6:origine3:numi-12ee").unwrap();
        assert_eq!(v.get("num"), Some(&Value::Int(-12)));
        let f = v.get("flags").and_then(Value::as_list).unwrap();
        assert_eq!(f[0].as_str(), Some("trust-address"));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            &b""[..],
            b"i",
            b"i-0e",
            b"i03e",
            b"ie",
            b"5:abc",
            b"d3:keye",
            b"di1ei2ee",
            b"l",
            b"x",
            b"i1ei2e",
            b"99999999999:a",
            b"i99999999999999999999e",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "l".repeat(MAX_DEPTH + 2) + &"e".repeat(MAX_DEPTH + 2);
        assert!(decode(deep.as_bytes()).is_err());
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::Bytes),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::List),
                proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..8), inner), 0..8)
                    .prop_map(Value::Dict),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip(v in arb_value()) {
            prop_assert_eq!(decode(&v.encode()).unwrap(), v);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&b);
        }
    }
}
