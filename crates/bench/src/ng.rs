//! A small client for rtpengine's "ng" control protocol: a cookie, a space
//! and a bencoded dictionary per UDP datagram, the reply echoing the
//! cookie. Enough for the bench (ping, offer, answer, delete, query, list)
//! and for tests that inspect a relay; not a full implementation.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};

/// A bencode value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Dict(BTreeMap<Vec<u8>, Value>),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Bytes(s.as_bytes().to_vec())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Bytes(s.into_bytes())
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}
impl From<Vec<&str>> for Value {
    fn from(v: Vec<&str>) -> Self {
        Value::List(v.into_iter().map(Value::from).collect())
    }
}

/// A dictionary from string keys.
pub fn dict<const N: usize>(items: [(&str, Value); N]) -> Value {
    Value::Dict(items.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect())
}

impl Value {
    /// Appends the bencoding of `self` to `out` (keys sorted, as bencode wants).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Int(i) => out.extend_from_slice(format!("i{i}e").as_bytes()),
            Value::Bytes(b) => {
                out.extend_from_slice(format!("{}:", b.len()).as_bytes());
                out.extend_from_slice(b);
            }
            Value::List(l) => {
                out.push(b'l');
                l.iter().for_each(|v| v.encode(out));
                out.push(b'e');
            }
            Value::Dict(d) => {
                out.push(b'd');
                for (k, v) in d {
                    Value::Bytes(k.clone()).encode(out);
                    v.encode(out);
                }
                out.push(b'e');
            }
        }
    }

    /// Decodes exactly one value filling all of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Value> {
        let (v, rest) = decode_at(buf, 0)?;
        if !rest.is_empty() {
            bail!("{} bytes after the bencoded value", rest.len());
        }
        Ok(v)
    }

    /// The value under `key` when `self` is a dictionary.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(d) => d.get(key.as_bytes()),
            _ => None,
        }
    }

    /// The bytes as UTF-8 text when `self` is a byte string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The integer, also when sent as a decimal string.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bytes(_) => self.as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// `dict[a][b]...` by a path of keys.
    pub fn path(&self, keys: &[&str]) -> Option<&Value> {
        keys.iter().try_fold(self, |v, k| v.get(k))
    }
}

/// JSON-like text, byte strings shown as (lossy) UTF-8: for logs.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(i) => write!(f, "{i}"),
            Value::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::List(l) => {
                f.write_str("[")?;
                for (i, v) in l.iter().enumerate() {
                    write!(f, "{}{v}", if i > 0 { ", " } else { "" })?;
                }
                f.write_str("]")
            }
            Value::Dict(d) => {
                f.write_str("{")?;
                for (i, (k, v)) in d.iter().enumerate() {
                    write!(f, "{}{:?}: {v}", if i > 0 { ", " } else { "" }, String::from_utf8_lossy(k))?;
                }
                f.write_str("}")
            }
        }
    }
}

const MAX_DEPTH: usize = 32;

fn decode_at(buf: &[u8], depth: usize) -> Result<(Value, &[u8])> {
    if depth > MAX_DEPTH {
        bail!("bencode nested deeper than {MAX_DEPTH}");
    }
    let (&first, rest) = buf.split_first().ok_or_else(|| anyhow!("bencode ends early"))?;
    match first {
        b'i' => {
            let end = rest.iter().position(|&c| c == b'e').ok_or_else(|| anyhow!("unterminated integer"))?;
            let s = std::str::from_utf8(&rest[..end]).map_err(|_| anyhow!("integer is not ASCII"))?;
            let i = s.parse::<i64>().map_err(|_| anyhow!("bad integer {s:?}"))?;
            Ok((Value::Int(i), &rest[end + 1..]))
        }
        b'l' => {
            let mut items = Vec::new();
            let mut rest = rest;
            loop {
                match rest.first() {
                    Some(b'e') => return Ok((Value::List(items), &rest[1..])),
                    Some(_) => {
                        let (v, r) = decode_at(rest, depth + 1)?;
                        items.push(v);
                        rest = r;
                    }
                    None => bail!("unterminated list"),
                }
            }
        }
        b'd' => {
            let mut items = BTreeMap::new();
            let mut rest = rest;
            loop {
                match rest.first() {
                    Some(b'e') => return Ok((Value::Dict(items), &rest[1..])),
                    Some(_) => {
                        let (k, r) = decode_at(rest, depth + 1)?;
                        let Value::Bytes(k) = k else { bail!("dictionary key is not a string") };
                        let (v, r) = decode_at(r, depth + 1)?;
                        items.insert(k, v);
                        rest = r;
                    }
                    None => bail!("unterminated dictionary"),
                }
            }
        }
        b'0'..=b'9' => {
            let colon = buf.iter().position(|&c| c == b':').ok_or_else(|| anyhow!("string length without ':'"))?;
            let n: usize = std::str::from_utf8(&buf[..colon])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| anyhow!("bad string length"))?;
            let body = &buf[colon + 1..];
            if body.len() < n {
                bail!("string of {n} bytes with only {} left", body.len());
            }
            Ok((Value::Bytes(body[..n].to_vec()), &body[n..]))
        }
        c => bail!("unexpected byte 0x{c:02x} in bencode"),
    }
}

/// Splits an ng datagram into cookie and decoded dictionary.
pub fn parse_message(buf: &[u8]) -> Result<(&[u8], Value)> {
    let sp = buf.iter().position(|&c| c == b' ').ok_or_else(|| anyhow!("ng message without a cookie"))?;
    Ok((&buf[..sp], Value::decode(&buf[sp + 1..])?))
}

/// An ng client on a connected UDP socket.
#[derive(Debug)]
pub struct Client {
    sock: UdpSocket,
    next: u64,
    prefix: String,
    /// Timeout per attempt; three attempts.
    pub timeout: Duration,
}

impl Client {
    /// A client for the relay at `server`, from an ephemeral port.
    pub fn connect(server: SocketAddr) -> Result<Client> {
        let bind: SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse()?;
        let sock = UdpSocket::bind(bind).context("binding the ng client socket")?;
        sock.connect(server).with_context(|| format!("connecting to ng server {server}"))?;
        Ok(Client { sock, next: 0, prefix: format!("{}_", std::process::id()), timeout: Duration::from_secs(2) })
    }

    /// Sends `msg` and returns the reply dictionary (retrying on timeout).
    /// Fails when the reply says `result: error`.
    pub fn request(&mut self, msg: &Value) -> Result<Value> {
        // Cookies must be unique across clients too: rtpengine answers a
        // repeated cookie from its cache (it takes it for a retransmission).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cookie = format!("{}{}", self.prefix, self.next);
        let mut out = cookie.clone().into_bytes();
        out.push(b' ');
        msg.encode(&mut out);
        self.sock.set_read_timeout(Some(self.timeout))?;
        let mut buf = vec![0u8; 65536];
        for _attempt in 0..3 {
            self.sock.send(&out).context("sending ng request")?;
            loop {
                match self.sock.recv(&mut buf) {
                    Ok(n) => {
                        let (c, v) = parse_message(&buf[..n]).context("undecodable ng reply")?;
                        if c != cookie.as_bytes() {
                            continue; // a late reply to an earlier attempt
                        }
                        if v.get("result").and_then(Value::as_str) == Some("error") {
                            let reason = v.get("error-reason").and_then(Value::as_str).unwrap_or("(no reason)");
                            bail!("ng error: {reason}");
                        }
                        return Ok(v);
                    }
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        break
                    }
                    Err(e) => return Err(e).context("receiving ng reply"),
                }
            }
        }
        bail!("no ng reply after 3 attempts")
    }

    /// `ping`; Ok when the relay answers `pong`.
    pub fn ping(&mut self) -> Result<()> {
        let r = self.request(&dict([("command", "ping".into())]))?;
        match r.get("result").and_then(Value::as_str) {
            Some("pong") => Ok(()),
            other => bail!("ping answered {other:?}"),
        }
    }
}

/// The media address of the first `m=audio` line of an SDP body: the
/// media-level `c=` line when there is one, else the session-level one.
pub fn sdp_audio_addr(sdp: &str) -> Option<SocketAddr> {
    let mut session_c = None;
    let mut media_c = None;
    let mut port = None;
    for line in sdp.lines().map(str::trim_end) {
        if let Some(c) = line.strip_prefix("c=") {
            let mut it = c.split_whitespace();
            let (_net, _fam, addr) = (it.next()?, it.next()?, it.next()?);
            let ip = addr.split('/').next()?.parse().ok()?;
            if port.is_some() {
                media_c.get_or_insert(ip);
            } else {
                session_c = Some(ip);
            }
        } else if let Some(m) = line.strip_prefix("m=") {
            if port.is_some() {
                break; // only the first media section
            }
            let mut it = m.split_whitespace();
            if it.next()? == "audio" {
                port = it.next()?.split('/').next()?.parse::<u16>().ok();
            }
        }
    }
    Some(SocketAddr::new(media_c.or(session_c)?, port?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bencode_round_trip() {
        let v = dict([
            ("command", "offer".into()),
            ("flags", vec!["trust-address", "x"].into()),
            ("n", Value::Int(-42)),
            ("sub", dict([("a", Value::Int(1))])),
        ]);
        let mut b = Vec::new();
        v.encode(&mut b);
        assert_eq!(b, b"d7:command5:offer5:flagsl13:trust-address1:xe1:ni-42e3:subd1:ai1eee".to_vec());
        assert_eq!(Value::decode(&b).unwrap(), v);
        assert_eq!(v.path(&["sub", "a"]).and_then(Value::as_int), Some(1));
        assert_eq!(
            v.to_string(),
            r#"{"command": "offer", "flags": ["trust-address", "x"], "n": -42, "sub": {"a": 1}}"#
        );
    }

    #[test]
    fn bencode_rejects_garbage() {
        for bad in [&b""[..], b"i12", b"5:abc", b"l", b"d1:ae", b"di1ei2ee", b"x", b"i1ei2e", b"99999999999999999999:"]
        {
            assert!(Value::decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "l".repeat(100) + &"e".repeat(100);
        assert!(Value::decode(deep.as_bytes()).is_err());
    }

    #[test]
    fn ng_message_split() {
        let (c, v) = parse_message(b"abc_1 d6:result4:ponge").unwrap();
        assert_eq!(c, b"abc_1");
        assert_eq!(v.get("result").and_then(Value::as_str), Some("pong"));
        assert!(parse_message(b"nocookie").is_err());
    }

    #[test]
    fn sdp_media_address() {
        let sdp = "v=0\r\no=- 1 1 IN IP4 10.0.0.9\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=audio 30000 RTP/AVP 0\r\n";
        assert_eq!(sdp_audio_addr(sdp), Some("10.0.0.1:30000".parse().unwrap()));
        let sdp6 = "v=0\nc=IN IP4 10.0.0.1\nm=audio 4000 RTP/AVP 0\nc=IN IP6 2001:db8::1\nm=audio 5000 RTP/AVP 0\n";
        assert_eq!(sdp_audio_addr(sdp6), Some("[2001:db8::1]:4000".parse().unwrap()));
        assert_eq!(sdp_audio_addr("v=0\nm=audio 1 RTP/AVP 0\n"), None);
        assert_eq!(sdp_audio_addr("c=IN IP4 1.2.3.4\nm=video 1 RTP/AVP 0\n"), None);
    }
}
