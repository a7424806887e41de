//! Media anchoring through the TrGW, in rtpengine's ng vocabulary: the ALG
//! builds the same `offer` / `answer` / `delete` dictionaries Kamailio's
//! `rtpengine` module sends, and a [`MediaControl`] runs them — in-process
//! on the TrGW's own core ([`InProcess`], [`LocalCore`]: the same handlers
//! as the ng listener, no datagram), or over UDP to one of several remote
//! TrGWs / rtpengines chosen by weight and Call-ID ([`NgClients`]).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use trgw::bencode::{self, Value};

/// Why a media command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaError(pub String);

impl std::fmt::Display for MediaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl MediaError {
    /// The SIP status a request gets when its media cannot be anchored:
    /// 400 for SDP the relay cannot parse, 488 for a media address its
    /// policy refuses, 503 when it ran out of ports or cannot be reached,
    /// 500 otherwise.
    pub fn status(&self) -> (u16, String) {
        if self.0.starts_with("Failed to parse SDP") || self.0.starts_with("No SDP") {
            (400, format!("Bad SDP: {}", self.0.trim_start_matches("Failed to parse SDP: ")))
        } else if self.0.starts_with("Media address") {
            // The TrGW's media address policy (loopback, its own addresses,
            // media-deny, outside media-allow).
            (488, "Not Acceptable Here (media address refused)".into())
        } else if self.0.starts_with("Ran out of ports") || self.0.starts_with("media relay") {
            (503, "Media relay unavailable".into())
        } else {
            (500, format!("Media relay error: {}", self.0))
        }
    }
}

/// Something that runs ng command dictionaries.
pub trait MediaControl: Send {
    /// Runs one command; the reply dictionary (`result: error` is a reply
    /// too; `Err` means no reply).
    fn command(&mut self, req: &Value) -> Result<Value, MediaError>;
}

/// The relay of `v6gate run` / [`trgw::Relay::start`], in-process.
pub struct InProcess(pub std::sync::Arc<trgw::RelayHandle>);

impl MediaControl for InProcess {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        Ok(self.0.ng_command(req))
    }
}

/// A TrGW core without sockets (tests, fuzzing, benchmarks of the
/// signalling path): ports are allocated and SDP rewritten exactly as in
/// the relay, no packet is relayed.
pub struct LocalCore(pub trgw::core::Core);

impl LocalCore {
    /// A socketless core over `cfg`.
    pub fn new(cfg: trgw::Config) -> Self {
        LocalCore(trgw::core::Core::new(cfg, Box::new(trgw::core::NullPlane), Instant::now()))
    }
}

impl MediaControl for LocalCore {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        Ok(trgw::ng::command(&mut self.0, req))
    }
}

/// One remote ng server.
#[derive(Debug, Clone)]
pub struct NgServer {
    /// Its ng address.
    pub addr: SocketAddr,
    /// Relative weight (0: never chosen for new calls).
    pub weight: u32,
    down_until: Option<Instant>,
}

/// Remote TrGWs / rtpengines over the ng protocol. A call's commands all
/// go to the same server: the one with the highest weighted rendezvous
/// score for its Call-ID among those not marked down (a server that does
/// not answer is skipped for [`NgClients::DOWN_FOR`], as Kamailio's
/// rtpengine module disables a dead instance).
pub struct NgClients {
    servers: Vec<NgServer>,
    sock4: Option<UdpSocket>,
    sock6: Option<UdpSocket>,
    timeout: Duration,
    retries: u32,
    cookie: u64,
    /// Commands that got no answer from any server.
    pub failures: u64,
}

fn h64(data: &[u8], seed: u64) -> u64 {
    // FNV-1a then a 64-bit finaliser: stable across runs and builds.
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl NgClients {
    /// How long a server that did not answer is skipped.
    pub const DOWN_FOR: Duration = Duration::from_secs(30);

    /// Clients for `servers` (address, weight); `timeout` per try.
    pub fn new(servers: &[(SocketAddr, u32)], timeout: Duration, retries: u32) -> std::io::Result<Self> {
        let need4 = servers.iter().any(|s| s.0.is_ipv4());
        let need6 = servers.iter().any(|s| s.0.is_ipv6());
        let mk = |a: &str| -> std::io::Result<UdpSocket> {
            let s = UdpSocket::bind(a)?;
            s.set_read_timeout(Some(timeout))?;
            Ok(s)
        };
        Ok(NgClients {
            servers: servers.iter().map(|&(addr, weight)| NgServer { addr, weight, down_until: None }).collect(),
            sock4: if need4 { Some(mk("0.0.0.0:0")?) } else { None },
            sock6: if need6 { Some(mk("[::]:0")?) } else { None },
            timeout,
            retries,
            cookie: u64::from(std::process::id()) << 32,
            failures: 0,
        })
    }

    /// Servers in the order they are tried for `call_id`.
    pub fn order(&self, call_id: &[u8], now: Instant) -> Vec<usize> {
        let mut v: Vec<(f64, usize)> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.weight > 0)
            .map(|(i, s)| {
                let u = (h64(call_id, i as u64) >> 11) as f64 / (1u64 << 53) as f64;
                let u = u.max(f64::MIN_POSITIVE);
                let mut score = -f64::from(s.weight) / u.ln();
                if s.down_until.is_some_and(|t| t > now) {
                    score -= 1e18;
                }
                (score, i)
            })
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0));
        v.into_iter().map(|x| x.1).collect()
    }

    fn exchange(&mut self, idx: usize, req: &Value) -> Option<Value> {
        let addr = self.servers[idx].addr;
        let sock = if addr.is_ipv4() { self.sock4.as_ref()? } else { self.sock6.as_ref()? };
        self.cookie += 1;
        let cookie = format!("alg{:x}", self.cookie);
        let mut msg = cookie.clone().into_bytes();
        msg.push(b' ');
        req.encode_into(&mut msg);
        let mut buf = vec![0u8; 65_536];
        for _ in 0..=self.retries {
            if sock.send_to(&msg, addr).is_err() {
                continue;
            }
            let deadline = Instant::now() + self.timeout;
            while Instant::now() < deadline {
                let Ok((n, from)) = sock.recv_from(&mut buf) else { break };
                let r = &buf[..n];
                if from != addr || !r.starts_with(cookie.as_bytes()) || r.get(cookie.len()) != Some(&b' ') {
                    continue; // a late reply to an earlier command
                }
                return bencode::decode(&r[cookie.len() + 1..]).ok();
            }
        }
        None
    }
}

impl MediaControl for NgClients {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        let now = Instant::now();
        let cid = req.get("call-id").and_then(Value::as_bytes).unwrap_or(b"").to_vec();
        for idx in self.order(&cid, now) {
            if let Some(v) = self.exchange(idx, req) {
                self.servers[idx].down_until = None;
                return Ok(v);
            }
            tracing::warn!(server = %self.servers[idx].addr, "ng server did not answer; skipping it for 30 s");
            self.servers[idx].down_until = Some(now + Self::DOWN_FOR);
        }
        self.failures += 1;
        Err(MediaError("media relay did not answer".into()))
    }
}

/// One side of a media session: the TrGW interface name (None: the first
/// with the family) and the family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// TrGW interface name.
    pub iface: Option<String>,
    /// IPv6 realm.
    pub v6: bool,
}

fn s(v: &str) -> Value {
    Value::str(v)
}

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(pairs.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect())
}

/// An offer or answer: who sends SDP to whom.
#[derive(Debug, Clone, Copy)]
pub struct SdpCommand<'a> {
    /// `offer` (else `answer`).
    pub offer: bool,
    /// The ng Call-ID.
    pub call_id: &'a str,
    /// The offerer's tag.
    pub from_tag: &'a str,
    /// The answerer's tag (answers).
    pub to_tag: Option<&'a str>,
    /// The SDP as the sender wrote it.
    pub sdp: &'a [u8],
    /// The sender's side.
    pub from: &'a Side,
    /// The receiver's side.
    pub to: &'a Side,
}

impl SdpCommand<'_> {
    /// The ng dictionary (as Kamailio's rtpengine module writes it).
    pub fn to_value(&self) -> Value {
        let mut p = vec![
            ("command", s(if self.offer { "offer" } else { "answer" })),
            ("call-id", s(self.call_id)),
            ("from-tag", s(self.from_tag)),
            ("sdp", Value::Bytes(self.sdp.to_vec())),
            ("flags", Value::List(vec![s("trust-address")])),
            ("replace", Value::List(vec![s("origin"), s("session-connection")])),
            ("ICE", s("remove")),
            ("address family", s(if self.to.v6 { "IP6" } else { "IP4" })),
        ];
        if let Some(t) = self.to_tag {
            p.push(("to-tag", s(t)));
        }
        if let (Some(a), Some(b)) = (&self.from.iface, &self.to.iface) {
            p.push(("direction", Value::List(vec![s(a), s(b)])));
        }
        dict(p)
    }

    /// Runs it; the rewritten SDP.
    pub fn run(&self, m: &mut dyn MediaControl) -> Result<Vec<u8>, MediaError> {
        let r = ok_reply(m.command(&self.to_value())?)?;
        r.get("sdp").and_then(Value::as_bytes).map(<[u8]>::to_vec).ok_or(MediaError("reply without SDP".into()))
    }
}

fn ok_reply(r: Value) -> Result<Value, MediaError> {
    match r.get("result").and_then(Value::as_str) {
        Some("ok") => Ok(r),
        _ => Err(MediaError(r.get("error-reason").and_then(Value::as_str).unwrap_or("error").to_string())),
    }
}

/// Deletes a media session (Ok also when it was already gone).
pub fn delete(m: &mut dyn MediaControl, call_id: &str) -> Result<(), MediaError> {
    ok_reply(m.command(&dict(vec![("command", s("delete")), ("call-id", s(call_id))]))?).map(|_| ())
}

/// A control shared with its owner (tests look at the TrGW's tables).
impl<M: MediaControl> MediaControl for std::sync::Arc<std::sync::Mutex<M>> {
    fn command(&mut self, req: &Value) -> Result<Value, MediaError> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).command(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_rendezvous_is_sticky_and_follows_weights() {
        let servers: Vec<(SocketAddr, u32)> =
            vec![("127.0.0.1:1".parse().unwrap(), 1), ("127.0.0.1:2".parse().unwrap(), 3)];
        let c = NgClients::new(&servers, Duration::from_millis(10), 0).unwrap();
        let now = Instant::now();
        let mut firsts = [0u32; 2];
        for i in 0..4000 {
            let id = format!("call-{i}");
            let o = c.order(id.as_bytes(), now);
            assert_eq!(o, c.order(id.as_bytes(), now), "same call, same server");
            firsts[o[0]] += 1;
        }
        // Weight 3 vs 1: about 75 % of the calls on the second server.
        assert!((2700..3300).contains(&firsts[1]), "{firsts:?}");
    }

    #[test]
    fn a_dead_server_fails_over() {
        // A socket that never answers, then a fake ng server that does.
        let dead = UdpSocket::bind("127.0.0.1:0").unwrap();
        let live = UdpSocket::bind("127.0.0.1:0").unwrap();
        let live_addr = live.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut b = [0u8; 2048];
            let (n, from) = live.recv_from(&mut b).unwrap();
            let sp = b[..n].iter().position(|&c| c == b' ').unwrap();
            let mut r = b[..sp].to_vec();
            r.extend_from_slice(b" d6:result4:ponge");
            live.send_to(&r, from).unwrap();
        });
        let mut c = NgClients::new(&[(dead.local_addr().unwrap(), 1000), (live_addr, 1)], Duration::from_millis(50), 0)
            .unwrap();
        let r = c.command(&dict(vec![("command", s("ping")), ("call-id", s("x"))])).unwrap();
        assert_eq!(r.get("result").and_then(Value::as_str), Some("pong"));
        t.join().unwrap();
        // The dead one is now skipped first.
        assert_eq!(c.order(b"x", Instant::now())[0], 1);
    }
}
