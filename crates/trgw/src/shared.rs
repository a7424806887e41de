//! The shared-socket media mode (`[trgw] sockets = "shared"`): the relay
//! holds no socket per media port, so the call count is bounded by the
//! port range and memory, not by RLIMIT_NOFILE.
//!
//! - Receiving: a BPF `sk_lookup` program ([`xdp::sklookup`], attached to
//!   the daemon's network namespace) steers UDP packets to every media
//!   port the relay allocated onto one shared socket per family per worker
//!   (the worker that owns the stream); the worker learns the original
//!   destination (`IP_RECVORIGDSTADDR` / `IPV6_RECVORIGDSTADDR`) and finds
//!   the leg by (local address, local port). Ports the relay has not
//!   allocated are not steered: the kernel's own lookup serves them.
//! - Sending: from raw sockets (`IPPROTO_RAW`, one per family per worker)
//!   with the IP and UDP header written here ([`headers`]), so a packet
//!   leaves from the leg's own local port, as in per-port mode.
//! - Port allocation stays in [`crate::ports`]; a port pair is bound once
//!   and closed ([`probe`]) before it is first handed out, so a port another
//!   program holds is skipped as in per-port mode; a pair found free is not
//!   probed again ([`ProbeCache`], filled for the whole range at startup).
//!   A program binding a port after it was first used would not see its
//!   packets (they are steered first): reserve the media range
//!   (docs/trgw.md).
//!
//! The XDP fast path is unchanged: it relays latched legs from its maps
//! and never needed the sockets.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use nix::sys::socket::{setsockopt, sockopt};
use socket2::{Domain, Protocol, Socket, Type};
use xlat::checksum;

use crate::config::Config;

/// Longest header [`headers`] writes (IPv6 + UDP).
pub(crate) const HDR_MAX: usize = 48;

/// Writes the IP and UDP header of a datagram carrying `payload` from
/// `src` to `dst` into `out` (the UDP checksum computed, RFC 768; IPv4
/// total length, identification and header checksum are the kernel's
/// with `IP_HDRINCL`); returns the header length, or `None` when the
/// families differ or the payload is too long for one datagram.
pub(crate) fn headers(src: SocketAddr, dst: SocketAddr, payload: &[u8], out: &mut [u8; HDR_MAX]) -> Option<usize> {
    let ulen = u16::try_from(payload.len() + 8).ok()?;
    let (ip_len, pseudo) = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            u16::try_from(payload.len() + 28).ok()?;
            out[..20].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out[12..16].copy_from_slice(&s.octets());
            out[16..20].copy_from_slice(&d.octets());
            (20, checksum::pseudo_v4(s, d, 17, ulen))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 0, 17, 64]);
            out[4..6].copy_from_slice(&ulen.to_be_bytes());
            out[8..24].copy_from_slice(&s.octets());
            out[24..40].copy_from_slice(&d.octets());
            (40, checksum::pseudo_v6(&s, &d, 17, u32::from(ulen)))
        }
        _ => return None,
    };
    let u = &mut out[ip_len..ip_len + 8];
    u[0..2].copy_from_slice(&src.port().to_be_bytes());
    u[2..4].copy_from_slice(&dst.port().to_be_bytes());
    u[4..6].copy_from_slice(&ulen.to_be_bytes());
    u[6..8].copy_from_slice(&[0, 0]);
    let c = match checksum::finish(pseudo + checksum::sum(u) + checksum::sum(payload)) {
        0 => 0xffff,
        c => c,
    };
    u[6..8].copy_from_slice(&c.to_be_bytes());
    Some(ip_len + 8)
}

/// A bound UDP socket (non-blocking, close-on-exec, IPv6-only for IPv6;
/// `rcvbuf` 0: the default buffer). Both flags are given to socket(2)
/// itself (socket2 adds `SOCK_CLOEXEC`): an offer in per-port mode opens
/// four of these in the SIP thread, so no fcntl(2) round is spent on them.
pub(crate) fn udp_socket(addr: SocketAddr, rcvbuf: usize) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM.nonblocking(), Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    if rcvbuf > 0 {
        // Room for bursts; the kernel caps it at rmem_max.
        let _ = s.set_recv_buffer_size(rcvbuf);
    }
    s.bind(&addr.into())?;
    Ok(s)
}

/// Checks that the RTP/RTCP port pair `port`, `port + 1` on `addr` is free
/// on the host by binding it once (the sockets are closed at once): the
/// same errors as per-port mode's binds (`EADDRINUSE`: another program
/// holds it; `EADDRNOTAVAIL`: not a host address).
pub(crate) fn probe(addr: IpAddr, port: u16) -> io::Result<()> {
    let _rtp = udp_socket(SocketAddr::new(addr, port), 0)?;
    let _rtcp = udp_socket(SocketAddr::new(addr, port + 1), 0)?;
    Ok(())
}

/// The port pairs found free once (per address): a pair is probed the
/// first time it is handed out, not on every allocation. A probe cost the
/// SIP thread two socket(), bind() and close() per call leg (about a tenth
/// of its time at 2,000 calls/s). The contract is the one shared mode had
/// already: the media range is the TrGW's (reserve it, docs/trgw.md), so a
/// pair free once stays free for us; a pair another program held fails its
/// probe, is not remembered and is probed again when its turn comes back.
#[derive(Debug, Default)]
pub(crate) struct ProbeCache {
    free: HashMap<IpAddr, Vec<u64>>,
}

impl ProbeCache {
    /// Ok when the pair at `port` on `addr` was found free before or is
    /// free now ([`probe`]'s errors otherwise).
    pub(crate) fn check(&mut self, addr: IpAddr, port: u16) -> io::Result<()> {
        let bits = self.free.entry(addr).or_insert_with(|| vec![0; 1024]);
        let (word, bit) = (usize::from(port / 64), 1u64 << (port % 64));
        if bits[word] & bit != 0 {
            return Ok(());
        }
        probe(addr, port)?;
        bits[word] |= bit;
        Ok(())
    }

    /// Probes every pair of the media range on every interface address
    /// once, at startup, so the first pass through the range (the port
    /// list hands each pair out once before any comes back) costs the
    /// offers no probe either. Returns (pairs found free, pairs probed).
    pub(crate) fn warm(&mut self, cfg: &Config) -> (usize, usize) {
        let (mut free, mut probed) = (0, 0);
        let addrs = cfg.interfaces.iter().flat_map(|i| [i.addr(false), i.addr(true)]).flatten();
        for addr in addrs {
            for port in crate::ports::rtp_ports(cfg.port_min, cfg.port_max) {
                probed += 1;
                free += usize::from(self.check(addr, port).is_ok());
            }
        }
        (free, probed)
    }
}

/// One worker's shared sockets.
pub(crate) struct SharedSockets {
    /// Receives the steered IPv4 media ports.
    pub rx4: Socket,
    /// Receives the steered IPv6 media ports.
    pub rx6: Socket,
    /// Sends IPv4 media (IPPROTO_RAW, header included).
    pub raw4: Socket,
    /// Sends IPv6 media (IPPROTO_RAW, header included).
    pub raw6: Socket,
}

impl SharedSockets {
    /// Opens them: the receive sockets on the wildcard address and an
    /// ephemeral port (steering does not need the media ports bound),
    /// reporting their original destination.
    pub fn open() -> io::Result<SharedSockets> {
        let rx4 = udp_socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), 8 << 20)?;
        setsockopt(&rx4, sockopt::Ipv4OrigDstAddr, &true)?;
        let rx6 = udp_socket(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)), 8 << 20)?;
        setsockopt(&rx6, sockopt::Ipv6OrigDstAddr, &true)?;
        let raw = |d: Domain| -> io::Result<Socket> {
            let s = Socket::new(d, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)))?;
            if d == Domain::IPV6 {
                s.set_header_included_v6(true)?;
            } else {
                s.set_header_included_v4(true)?;
            }
            s.set_nonblocking(true)?;
            s.set_cloexec(true)?;
            Ok(s)
        };
        Ok(SharedSockets { rx4, rx6, raw4: raw(Domain::IPV4)?, raw6: raw(Domain::IPV6)? })
    }
}

/// The control side's steering: the sk_lookup program and which ports of
/// which stream it steers.
pub(crate) struct Steer {
    sk: xdp::sklookup::SkLookup,
    locals: HashMap<u32, [SocketAddr; 4]>,
    workers: u32,
}

impl std::fmt::Debug for Steer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steer").field("streams", &self.locals.len()).field("workers", &self.workers).finish()
    }
}

/// Index of worker `w`'s shared socket of a family in the socket map.
fn socket_index(worker: u32, v6: bool) -> u32 {
    worker * 2 + u32::from(v6)
}

/// Ports the steering map must hold: every media port of every address.
fn port_capacity(cfg: &Config) -> u32 {
    let addrs =
        cfg.interfaces.iter().map(|i| usize::from(i.ipv4.is_some()) + usize::from(i.ipv6.is_some())).sum::<usize>();
    let range = usize::from(cfg.port_max.saturating_sub(cfg.port_min)) + 1;
    u32::try_from((addrs.max(1) * range).min(1 << 22)).unwrap_or(1 << 22)
}

impl Steer {
    /// Loads and attaches the sk_lookup program in this thread's network
    /// namespace and puts every worker's shared sockets in its map.
    pub fn attach(cfg: &Config, sockets: &[SharedSockets]) -> anyhow::Result<Steer> {
        let workers = sockets.len() as u32;
        let mut sk = xdp::sklookup::SkLookup::attach(port_capacity(cfg), (workers * 2).max(1))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for (w, s) in sockets.iter().enumerate() {
            sk.set_socket(socket_index(w as u32, false), &s.rx4).map_err(|e| anyhow::anyhow!("{e}"))?;
            sk.set_socket(socket_index(w as u32, true), &s.rx6).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(Steer { sk, locals: HashMap::new(), workers })
    }

    /// Steers stream `id`'s four local ports to its worker (one `bpf(2)`
    /// call for the four).
    pub fn add(&mut self, id: u32, locals: [SocketAddr; 4]) {
        let w = id % self.workers;
        let entries = locals.map(|l| (l, socket_index(w, l.is_ipv6())));
        if let Err(e) = self.sk.insert_many(&entries) {
            // The map holds every port of the range: this is not expected.
            tracing::error!(stream = id, error = %e, "sk_lookup: cannot steer media ports; their packets are not relayed");
        }
        self.locals.insert(id, locals);
    }

    /// Stops steering stream `id`'s ports (one `bpf(2)` call).
    pub fn remove(&mut self, id: u32) {
        let Some(locals) = self.locals.remove(&id) else { return };
        match self.sk.remove_many(&locals) {
            Ok(n) if n == locals.len() => {}
            Ok(n) => tracing::warn!(stream = id, steered = n, "sk_lookup: some media ports were not steered"),
            Err(e) => tracing::warn!(stream = id, error = %e, "sk_lookup: cannot stop steering media ports"),
        }
    }

    /// What the program did (steered packets and misses).
    pub fn counts(&self) -> Option<xdp::sklookup::SkCounts> {
        self.sk.counters().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify(hdr: &[u8], ip_len: usize, payload: &[u8], pseudo: u64) {
        let udp = &hdr[ip_len..];
        assert!(checksum::verifies(pseudo + checksum::sum(udp) + checksum::sum(payload)), "UDP checksum verifies");
    }

    /// RFC 768: the UDP header and checksum over the pseudo-header, for
    /// IPv4 and IPv6 (RFC 8200 §8.1), as a receiver checks them.
    #[test]
    fn rfc768_headers_verify_for_both_families() {
        let payload = b"\x80\x00\x00\x01rtp-payload-odd";
        let mut out = [0u8; HDR_MAX];
        let (s, d): (SocketAddr, SocketAddr) =
            ("192.0.2.1:30000".parse().unwrap(), "198.51.100.7:5004".parse().unwrap());
        assert_eq!(headers(s, d, payload, &mut out), Some(28));
        assert_eq!(out[0], 0x45);
        assert_eq!(out[9], 17, "protocol UDP");
        assert_eq!(&out[12..16], &[192, 0, 2, 1]);
        assert_eq!(&out[16..20], &[198, 51, 100, 7]);
        assert_eq!(&out[20..24], &[0x75, 0x30, 0x13, 0x8c], "ports");
        assert_eq!(u16::from_be_bytes([out[24], out[25]]) as usize, payload.len() + 8);
        let ulen = (payload.len() + 8) as u16;
        verify(&out[..28], 20, payload, checksum::pseudo_v4([192, 0, 2, 1].into(), [198, 51, 100, 7].into(), 17, ulen));

        let (s, d): (SocketAddr, SocketAddr) =
            ("[2001:db8::1]:30002".parse().unwrap(), "[2001:db8:1::9]:6000".parse().unwrap());
        assert_eq!(headers(s, d, payload, &mut out), Some(48));
        assert_eq!(out[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([out[4], out[5]]), ulen, "payload length");
        assert_eq!((out[6], out[7]), (17, 64));
        let (si, di) = ("2001:db8::1".parse().unwrap(), "2001:db8:1::9".parse().unwrap());
        verify(&out[..48], 40, payload, checksum::pseudo_v6(&si, &di, 17, u32::from(ulen)));
        assert_eq!(&out[40..42], &30002u16.to_be_bytes());
    }

    /// The media sockets are non-blocking (a worker never blocks on one)
    /// and bound where asked; a probe leaves the pair free again.
    #[test]
    fn media_sockets_are_nonblocking_and_probes_release_the_pair() {
        let s = udp_socket("127.0.0.1:0".parse().unwrap(), 1 << 16).unwrap();
        let mut buf = [std::mem::MaybeUninit::uninit(); 16];
        assert_eq!(s.recv(&mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        let port = s.local_addr().unwrap().as_socket().unwrap().port();
        let lo: IpAddr = Ipv4Addr::LOCALHOST.into();
        assert_eq!(probe(lo, port).unwrap_err().kind(), io::ErrorKind::AddrInUse, "a held port is busy");
        drop(s);
        if port < u16::MAX && probe(lo, port).is_ok() {
            assert!(probe(lo, port).is_ok(), "the probe closed its sockets: the pair is free again");
        }
    }

    #[test]
    fn mixed_families_and_oversize_payloads_are_refused() {
        let mut out = [0u8; HDR_MAX];
        let v4: SocketAddr = "192.0.2.1:30000".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:30000".parse().unwrap();
        assert_eq!(headers(v4, v6, b"x", &mut out), None);
        assert_eq!(headers(v6, v4, b"x", &mut out), None);
        assert_eq!(headers(v4, v4, &vec![0u8; 65_508], &mut out), None, "IPv4 total length over 65535");
        assert_eq!(headers(v6, v6, &vec![0u8; 65_528], &mut out), None, "UDP length over 65535");
        assert_eq!(headers(v4, v4, &vec![0u8; 65_507], &mut out), Some(28));
    }

    proptest::proptest! {
        /// The checksum is never sent as zero (RFC 768) and always verifies.
        #[test]
        fn checksums_verify(payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), sp in 1u16.., dp in 1u16..) {
            let mut out = [0u8; HDR_MAX];
            let s = SocketAddr::new("2001:db8::1".parse().unwrap(), sp);
            let d = SocketAddr::new("64:ff9b::c000:201".parse().unwrap(), dp);
            let n = headers(s, d, &payload, &mut out).unwrap();
            proptest::prop_assert_ne!(&out[46..48], &[0, 0]);
            let (si, di) = ("2001:db8::1".parse().unwrap(), "64:ff9b::c000:201".parse().unwrap());
            let pseudo = checksum::pseudo_v6(&si, &di, 17, (payload.len() + 8) as u32);
            proptest::prop_assert!(checksum::verifies(pseudo + checksum::sum(&out[40..n]) + checksum::sum(&payload)));
        }
    }

    #[test]
    fn probing_skips_ports_in_use() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = held.local_addr().unwrap().port();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let e = probe(lo, p).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
        if p > 1 {
            let e = probe(lo, p - 1).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "its RTCP port is held");
        }
        // The probe keeps nothing bound.
        let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if probe(lo, free).is_ok() {
            std::net::UdpSocket::bind(("127.0.0.1", free)).expect("a probed port is free again");
        }
    }

    #[test]
    fn a_pair_is_probed_until_found_free_then_remembered() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = held.local_addr().unwrap().port();
        let mut c = ProbeCache::default();
        assert_eq!(c.check(lo, p).unwrap_err().kind(), io::ErrorKind::AddrInUse);
        drop(held);
        // Free now: the failure was not remembered (an RTCP neighbour some
        // other test holds may still fail it: then nothing more to check).
        if c.check(lo, p).is_ok() {
            // Remembered: no second probe, even with the port taken since
            // (the documented contract: the range is the TrGW's).
            let _again = std::net::UdpSocket::bind(("127.0.0.1", p)).unwrap();
            assert!(c.check(lo, p).is_ok(), "a pair found free is not probed again");
            assert!(probe(lo, p).is_err(), "while a real probe would fail");
        }
    }

    #[test]
    fn warming_remembers_the_free_pairs_of_the_range() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = held.local_addr().unwrap().port();
        let (min, max) = (p.saturating_sub(4) & !1, p.saturating_add(5).min(u16::MAX - 1));
        let mut cfg = Config { port_min: min, port_max: max, ..Config::default() };
        cfg.interfaces = vec![crate::config::Interface::new("lo", Some(Ipv4Addr::LOCALHOST), None)];
        let mut c = ProbeCache::default();
        let (free, probed) = c.warm(&cfg);
        assert_eq!(probed, ((min..max).step_by(2)).count());
        assert!(free < probed, "the pair with the held port is not free");
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert!(c.check(lo, p & !1).is_err(), "and is probed again when asked for");
    }

    #[test]
    fn port_capacity_covers_every_address_and_port() {
        let c = Config {
            port_min: 30000,
            port_max: 30009,
            interfaces: vec![
                crate::config::Interface::new("a", Some([192, 0, 2, 1].into()), Some("2001:db8::1".parse().unwrap())),
                crate::config::Interface::new("b", Some([192, 0, 2, 2].into()), None),
            ],
            ..Config::default()
        };
        assert_eq!(port_capacity(&c), 30);
        assert_eq!((socket_index(0, false), socket_index(0, true), socket_index(3, true)), (0, 1, 7));
    }
}
