//! A small client for rtpengine's "ng" control protocol: a cookie, a space
//! and a bencoded dictionary per UDP datagram, the reply echoing the
//! cookie. Enough for the bench (ping, offer, answer, delete, query, list)
//! and for tests that inspect a relay; not a full implementation. The
//! bencode and SDP parsers are the relay's own (`trgw::bencode`,
//! `trgw::sdp`).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
pub use trgw::bencode::Value;

/// A dictionary from string keys, in the order given.
pub fn dict<const N: usize>(items: [(&str, Value); N]) -> Value {
    Value::Dict(items.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect())
}

/// A list of strings.
pub fn list(items: &[&str]) -> Value {
    Value::List(items.iter().map(|s| Value::str(s)).collect())
}

/// Splits an ng datagram into cookie and decoded dictionary.
pub fn parse_message(buf: &[u8]) -> Result<(&[u8], Value)> {
    let sp = buf.iter().position(|&c| c == b' ').ok_or_else(|| anyhow!("ng message without a cookie"))?;
    Ok((&buf[..sp], trgw::bencode::decode(&buf[sp + 1..])?))
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
        msg.encode_into(&mut out);
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
        let r = self.request(&dict([("command", Value::str("ping"))]))?;
        match r.get("result").and_then(Value::as_str) {
            Some("pong") => Ok(()),
            other => bail!("ping answered {other:?}"),
        }
    }
}

/// The media address of an SDP body's first media section when it is
/// audio: its `c=` address (or the session's) and its port.
pub fn sdp_audio_addr(sdp: &str) -> Option<SocketAddr> {
    let sdp = trgw::sdp::Sdp::parse(sdp.as_bytes()).ok()?;
    let m = sdp.media.first().filter(|m| m.kind == "audio")?;
    Some(SocketAddr::new(sdp.media_addr(0)?, m.port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_relays_bencode() {
        let v = dict([
            ("command", Value::str("offer")),
            ("flags", list(&["trust-address", "x"])),
            ("n", Value::Int(-42)),
            ("sub", dict([("a", Value::Int(1))])),
        ]);
        assert_eq!(v.encode(), b"d7:command5:offer5:flagsl13:trust-address1:xe1:ni-42e3:subd1:ai1eee".to_vec());
        assert_eq!(trgw::bencode::decode(&v.encode()).unwrap(), v);
        assert_eq!(v.get("sub").and_then(|s| s.get("a")).and_then(Value::as_int), Some(1));
    }

    #[test]
    fn ng_message_split() {
        let (c, v) = parse_message(b"abc_1 d6:result4:ponge").unwrap();
        assert_eq!(c, b"abc_1");
        assert_eq!(v.get("result").and_then(Value::as_str), Some("pong"));
        assert!(parse_message(b"nocookie").is_err());
        assert!(parse_message(b"c d7:command").is_err(), "bad bencode after the cookie");
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
