//! Forwarding to the upstream resolvers.
//!
//! Each lookup tries the resolvers in order. One try is a UDP exchange from
//! a fresh socket (random source port, random ID, connected so only the
//! resolver's datagrams are read; replies with another ID or question are
//! ignored and counted) bounded by `timeout-ms`; a truncated reply (TC=1)
//! is retried over TCP with its own `timeout-ms`. SERVFAIL, REFUSED and
//! NOTIMP move on to the next resolver; when every resolver gave one of
//! those, the last such reply is the outcome.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::{timeout_at, Instant};

use crate::core::{is_truncated, raw_rcode, Lookup, Upstream};
use crate::stats::Counters;

/// The upstream side: resolver addresses and the per-try timeout.
#[derive(Debug, Clone)]
pub struct Upstreams {
    addrs: Vec<SocketAddr>,
    timeout: Duration,
    counters: Arc<Counters>,
}

/// A random 16-bit query ID (std's per-process random hasher keys).
fn random_id() -> u16 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    h.finish() as u16
}

enum TryError {
    Timeout,
    Io,
}

impl Upstreams {
    /// Resolvers tried in order, each for at most `timeout` (and again for
    /// a TCP retry).
    pub fn new(addrs: Vec<SocketAddr>, timeout: Duration, counters: Arc<Counters>) -> Self {
        Upstreams { addrs, timeout, counters }
    }

    /// Perform one lookup.
    pub async fn exchange(&self, lookup: &Lookup) -> Upstream {
        let mut last_error_reply = None;
        let mut timed_out = false;
        for &addr in &self.addrs {
            let id = random_id();
            let query = lookup.to_bytes(id);
            let mut reply = self.udp(addr, lookup, id, &query).await;
            if let Ok(bytes) = &reply {
                if is_truncated(bytes) {
                    Counters::inc(&self.counters.upstream_tcp_retries);
                    reply = self.tcp(addr, lookup, id, &query).await;
                }
            }
            match reply {
                Ok(bytes) => match raw_rcode(&bytes) {
                    // SERVFAIL, NOTIMP, REFUSED: another resolver may do better.
                    Some(2 | 4 | 5) => last_error_reply = Some(bytes),
                    _ => return Upstream::Reply(bytes),
                },
                Err(TryError::Timeout) => {
                    Counters::inc(&self.counters.upstream_timeouts);
                    timed_out = true;
                }
                Err(TryError::Io) => Counters::inc(&self.counters.upstream_errors),
            }
        }
        match last_error_reply {
            Some(b) => Upstream::Reply(b),
            None if timed_out => Upstream::Timeout,
            None => Upstream::Failed,
        }
    }

    async fn udp(&self, addr: SocketAddr, lookup: &Lookup, id: u16, query: &[u8]) -> Result<Vec<u8>, TryError> {
        let deadline = Instant::now() + self.timeout;
        let local: IpAddr = if addr.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        let sock = UdpSocket::bind((local, 0)).await.map_err(|_| TryError::Io)?;
        sock.connect(addr).await.map_err(|_| TryError::Io)?;
        sock.send(query).await.map_err(|_| TryError::Io)?;
        let mut buf = vec![0u8; 65535];
        loop {
            let n = match timeout_at(deadline, sock.recv(&mut buf)).await {
                Err(_) => return Err(TryError::Timeout),
                Ok(Err(_)) => return Err(TryError::Io),
                Ok(Ok(n)) => n,
            };
            if lookup.matches(id, &buf[..n]) {
                buf.truncate(n);
                return Ok(buf);
            }
            Counters::inc(&self.counters.upstream_mismatched);
        }
    }

    async fn tcp(&self, addr: SocketAddr, lookup: &Lookup, id: u16, query: &[u8]) -> Result<Vec<u8>, TryError> {
        let deadline = Instant::now() + self.timeout;
        let work = async {
            let mut s = TcpStream::connect(addr).await?;
            let len = u16::try_from(query.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
            let mut out = Vec::with_capacity(query.len() + 2);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(query);
            s.write_all(&out).await?;
            // One connection, one query: read until the matching reply.
            loop {
                let n = usize::from(s.read_u16().await?);
                let mut buf = vec![0u8; n];
                s.read_exact(&mut buf).await?;
                if lookup.matches(id, &buf) {
                    return Ok::<_, std::io::Error>(buf);
                }
                Counters::inc(&self.counters.upstream_mismatched);
            }
        };
        match timeout_at(deadline, work).await {
            Err(_) => Err(TryError::Timeout),
            Ok(Err(_)) => Err(TryError::Io),
            Ok(Ok(b)) => Ok(b),
        }
    }
}
