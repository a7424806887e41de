//! Route netlink (rtnetlink, RFC 3549) for the few things the daemon does
//! to its own device: link up + MTU, add addresses, add and remove routes.
//! One request at a time, each acknowledged (`NLM_F_ACK`) and its error
//! code returned; no `ip` command is ever run. And the dumps the XDP fast
//! path's route mirror reads: links, routes, neighbours, policy rules
//! ([`Netlink::links`], [`Netlink::routes`], [`Netlink::neighbours`],
//! [`Netlink::rules`]); the host's addresses with their prefix lengths
//! ([`Netlink::addresses`]), and a socket that hears the kernel announce
//! address changes ([`AddrEvents`]), for the destination policy's list of
//! the gateway's own addresses.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;
use crate::IfAddr;
use xlat::addr::IpPrefix;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_GETLINK: u16 = 18;
const RTM_GETADDR: u16 = 22;
const RTM_GETROUTE: u16 = 26;
const RTM_GETNEIGH: u16 = 30;
const RTM_GETRULE: u16 = 34;
const NLM_F_DUMP: u16 = 0x300;
const IFLA_ADDRESS: u16 = 1;
const RTA_GATEWAY: u16 = 5;
const RTA_METRICS: u16 = 8;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RTA_VIA: u16 = 18;
const RTAX_MTU: u16 = 2;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const FRA_TABLE: u16 = 15;
const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const IFLA_MTU: u16 = 4;
const IFLA_TXQLEN: u16 = 13;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
const IN6_ADDR_GEN_MODE_NONE: u8 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_BROADCAST: u16 = 4;
/// Multicast groups of address changes (`RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`).
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;
const IFA_F_NODAD: u8 = 0x02;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const IFF_UP: u32 = 1;

/// A route netlink socket.
#[derive(Debug)]
pub struct Netlink {
    fd: OwnedFd,
    seq: u32,
}

/// A NETLINK_ROUTE socket bound to the multicast `groups` (0: none),
/// with `flags` (e.g. `SOCK_NONBLOCK`) besides `SOCK_CLOEXEC`.
fn route_socket(groups: u32, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let raw = cvt(unsafe {
        libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags, libc::NETLINK_ROUTE)
    })?;
    // SAFETY: fresh fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_nl is plain data; zeroed = let the kernel pick the port id.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = groups;
    // SAFETY: `sa` is a valid sockaddr_nl of the length passed.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// A request under construction: header, fixed part, attributes.
struct Msg(Vec<u8>);

impl Msg {
    fn new(ty: u16, flags: u16, seq: u32) -> Msg {
        let mut v = Vec::with_capacity(128);
        v.extend_from_slice(&0u32.to_ne_bytes()); // length, set in `finish`
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it
        Msg(v)
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    fn attr(&mut self, ty: u16, data: &[u8]) -> &mut Self {
        let len = 4 + data.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(data);
        while self.0.len() & 3 != 0 {
            self.0.push(0);
        }
        self
    }

    fn finish(&mut self) -> &[u8] {
        let len = self.0.len() as u32;
        self.0[..4].copy_from_slice(&len.to_ne_bytes());
        &self.0
    }
}

fn addr_bytes(a: IpAddr) -> (u8, Vec<u8>) {
    match a {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
    }
}

impl Netlink {
    /// Open and bind a NETLINK_ROUTE socket.
    pub fn open() -> io::Result<Netlink> {
        Ok(Netlink { fd: route_socket(0, 0)?, seq: 1 })
    }

    /// Send `msg` (its sequence number set here) and hand every answer
    /// carrying that sequence number to `on` (message type, payload) until
    /// `on` returns a result.
    fn exchange<T>(&mut self, msg: &mut Msg, mut on: impl FnMut(u16, &[u8]) -> Option<io::Result<T>>) -> io::Result<T> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        msg.0[8..12].copy_from_slice(&seq.to_ne_bytes());
        let b = msg.finish();
        // SAFETY: `b` is valid for `b.len()` bytes; the destination
        // (port 0, the kernel) is the socket's default.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), b.as_ptr().cast(), b.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 32768];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut p = &buf[..n as usize];
            while p.len() >= 16 {
                let len = u32::from_ne_bytes([p[0], p[1], p[2], p[3]]) as usize;
                let ty = u16::from_ne_bytes([p[4], p[5]]);
                let rseq = u32::from_ne_bytes([p[8], p[9], p[10], p[11]]);
                if len < 16 || len > p.len() {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "malformed netlink reply"));
                }
                if rseq == seq {
                    if let Some(r) = on(ty, &p[16..len]) {
                        return r;
                    }
                }
                p = &p[((len + 3) & !3).min(p.len())..];
            }
        }
    }

    /// Send one request and wait for its acknowledgement.
    fn call(&mut self, msg: &mut Msg) -> io::Result<()> {
        self.exchange(msg, |ty, m| (ty == NLMSG_ERROR).then(|| error_code(m)).flatten())
    }

    /// Bring link `index` up with `mtu` and `txqueuelen` (the length of
    /// each TUN queue's ring). Before that, switch IPv6 address
    /// generation off (`IN6_ADDR_GEN_MODE_NONE`): no link-local address, so
    /// the kernel sends no router or multicast listener solicitations into
    /// the translator.
    pub fn link_up(&mut self, index: u32, mtu: u32, txqueuelen: u32) -> io::Result<()> {
        let mut inner = Vec::new();
        inner.extend_from_slice(&5u16.to_ne_bytes());
        inner.extend_from_slice(&IFLA_INET6_ADDR_GEN_MODE.to_ne_bytes());
        inner.extend_from_slice(&[IN6_ADDR_GEN_MODE_NONE, 0, 0, 0]);
        let mut af = Vec::new();
        af.extend_from_slice(&((4 + inner.len()) as u16).to_ne_bytes());
        af.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        af.extend_from_slice(&inner);
        let mut m = Msg::new(RTM_NEWLINK, 0, 0);
        // struct ifinfomsg: family, pad, type, index, flags, change
        m.bytes(&[libc::AF_UNSPEC as u8, 0, 0, 0])
            .bytes(&(index as i32).to_ne_bytes())
            .bytes(&[0; 8])
            .attr(IFLA_AF_SPEC, &af);
        // Best effort: kernels without IPv6 on the device refuse it, and
        // the device works without it.
        if let Err(e) = self.call(&mut m) {
            tracing::debug!("cannot switch IPv6 address generation off: {e}");
        }
        let mut m = Msg::new(RTM_NEWLINK, 0, 0);
        m.bytes(&[libc::AF_UNSPEC as u8, 0, 0, 0])
            .bytes(&(index as i32).to_ne_bytes())
            .bytes(&IFF_UP.to_ne_bytes())
            .bytes(&IFF_UP.to_ne_bytes())
            .attr(IFLA_MTU, &mtu.to_ne_bytes())
            .attr(IFLA_TXQLEN, &txqueuelen.to_ne_bytes());
        self.call(&mut m)
    }

    /// Add (or keep) address `a` on link `index`.
    pub fn add_address(&mut self, index: u32, a: IfAddr) -> io::Result<()> {
        let (family, bytes) = addr_bytes(a.addr);
        let mut m = Msg::new(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, 0);
        // struct ifaddrmsg: family, prefixlen, flags, scope, index
        m.bytes(&[family, a.len, IFA_F_NODAD, RT_SCOPE_UNIVERSE])
            .bytes(&index.to_ne_bytes())
            .attr(IFA_LOCAL, &bytes)
            .attr(IFA_ADDRESS, &bytes);
        self.call(&mut m)
    }

    /// Remove address `a` from link `index`.
    pub fn del_address(&mut self, index: u32, a: IfAddr) -> io::Result<()> {
        let (family, bytes) = addr_bytes(a.addr);
        let mut m = Msg::new(RTM_DELADDR, 0, 0);
        m.bytes(&[family, a.len, 0, RT_SCOPE_UNIVERSE]).bytes(&index.to_ne_bytes()).attr(IFA_LOCAL, &bytes);
        self.call(&mut m)
    }

    fn route(&mut self, ty: u16, flags: u16, index: u32, p: IpPrefix) -> io::Result<()> {
        let (family, dst, len, scope) = match p {
            IpPrefix::V4(p) => (libc::AF_INET as u8, p.addr().octets().to_vec(), p.len(), RT_SCOPE_LINK),
            IpPrefix::V6(p) => (libc::AF_INET6 as u8, p.addr().octets().to_vec(), p.len(), RT_SCOPE_UNIVERSE),
        };
        let mut m = Msg::new(ty, flags, 0);
        // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
        m.bytes(&[family, len, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC, scope, RTN_UNICAST])
            .bytes(&0u32.to_ne_bytes())
            .attr(RTA_DST, &dst)
            .attr(RTA_OIF, &index.to_ne_bytes());
        self.call(&mut m)
    }

    /// Route `p` into link `index` (replacing an existing route to `p`).
    pub fn add_route(&mut self, index: u32, p: IpPrefix) -> io::Result<()> {
        self.route(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, index, p)
    }

    /// Remove the route to `p` through link `index`.
    pub fn del_route(&mut self, index: u32, p: IpPrefix) -> io::Result<()> {
        self.route(RTM_DELROUTE, 0, index, p)
    }
}

/// A link's index, MTU and hardware address (`RTM_GETLINK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// MTU.
    pub mtu: u32,
    /// Ethernet address (None for links without a 6-byte one).
    pub mac: Option<[u8; 6]>,
}

/// One route (`RTM_GETROUTE`), as far as a forwarding decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix.
    pub dst: IpPrefix,
    /// Routing table (`RTA_TABLE`, or the header's when absent).
    pub table: u32,
    /// `rtm_type`: 1 unicast, 2 local, 3 broadcast, 6 blackhole, 7
    /// unreachable, 8 prohibit, ...
    pub kind: u8,
    /// Output interface (`RTA_OIF`).
    pub oif: Option<u32>,
    /// Gateway (`RTA_GATEWAY`); None for a directly connected prefix.
    pub gateway: Option<IpAddr>,
    /// Anything a single next hop does not describe (`RTA_MULTIPATH`,
    /// `RTA_VIA`: a gateway of the other family).
    pub complex: bool,
    /// Route MTU (`RTAX_MTU` metric), when set.
    pub mtu: Option<u32>,
    /// TOS the route is restricted to (0: any).
    pub tos: u8,
    /// Source prefix length (a source-specific IPv6 route when not 0).
    pub src_len: u8,
}

/// One neighbour entry (`RTM_GETNEIGH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Interface index.
    pub ifindex: u32,
    /// The neighbour's IP address.
    pub addr: IpAddr,
    /// Its link-layer address, when known and 6 bytes long.
    pub mac: Option<[u8; 6]>,
    /// `NUD_*` state bits.
    pub state: u16,
}

/// `NUD_*` states whose link-layer address the kernel forwards with
/// (`NUD_VALID` less `NUD_NOARP`): REACHABLE, STALE, DELAY, PROBE, PERMANENT.
pub const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;

/// One policy routing rule (`RTM_GETRULE`): its table and action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// Table looked up (`FRA_TABLE`, or the header's).
    pub table: u32,
    /// `FR_ACT_*`: 1 look up the table, ...
    pub action: u8,
}

/// The result an `NLMSG_ERROR` payload carries (None: too short).
fn error_code(m: &[u8]) -> Option<io::Result<()>> {
    let code = i32::from_ne_bytes(m.get(..4)?.try_into().ok()?);
    Some(if code == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-code)) })
}

/// The attributes after a fixed header of `fixed` bytes in message `m`
/// (payload, without the netlink header): (type, data).
fn attrs(m: &[u8], fixed: usize) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut p = m.get(fixed..).unwrap_or(&[]);
    while p.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([p[0], p[1]]));
        let ty = u16::from_ne_bytes([p[2], p[3]]) & 0x3fff; // without NLA_F_NESTED / NET_BYTEORDER
        if len < 4 || len > p.len() {
            break;
        }
        out.push((ty, &p[4..len]));
        p = &p[((len + 3) & !3).min(p.len())..];
    }
    out
}

fn u32_of(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

fn ip_of(family: u8, b: &[u8]) -> Option<IpAddr> {
    match (i32::from(family), b.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        (libc::AF_INET6, 16) => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

fn mac_of(b: &[u8]) -> Option<[u8; 6]> {
    <[u8; 6]>::try_from(b).ok()
}

/// Parse an `RTM_NEWLINK` payload.
pub fn parse_link(m: &[u8]) -> Option<Link> {
    // struct ifinfomsg: family, pad, type(2), index(4), flags(4), change(4)
    let index = u32_of(m.get(4..8)?)?;
    let mut l = Link { index, mtu: 0, mac: None };
    for (ty, d) in attrs(m, 16) {
        match ty {
            IFLA_MTU => l.mtu = u32_of(d)?,
            IFLA_ADDRESS => l.mac = mac_of(d),
            _ => {}
        }
    }
    Some(l)
}

/// Parse an `RTM_NEWROUTE` payload; None for a malformed one.
pub fn parse_route(m: &[u8]) -> Option<Route> {
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags(4)
    let h = m.get(..12)?;
    let (family, dst_len) = (h[0], h[1]);
    let mut r = Route {
        dst: IpPrefix::new(
            if i32::from(family) == libc::AF_INET { IpAddr::from([0u8; 4]) } else { IpAddr::from([0u8; 16]) },
            0,
        )
        .ok()?,
        table: u32::from(h[4]),
        kind: h[7],
        oif: None,
        gateway: None,
        complex: false,
        mtu: None,
        tos: h[3],
        src_len: h[2],
    };
    if i32::from(family) != libc::AF_INET && i32::from(family) != libc::AF_INET6 {
        return None;
    }
    for (ty, d) in attrs(m, 12) {
        match ty {
            RTA_DST => r.dst = IpPrefix::truncated(ip_of(family, d)?, dst_len).ok()?,
            RTA_OIF => r.oif = u32_of(d),
            RTA_GATEWAY => r.gateway = Some(ip_of(family, d)?),
            RTA_TABLE => r.table = u32_of(d)?,
            RTA_MULTIPATH | RTA_VIA => r.complex = true,
            RTA_METRICS => {
                for (mt, md) in attrs(d, 0) {
                    if mt == RTAX_MTU {
                        r.mtu = u32_of(md).filter(|&v| v > 0);
                    }
                }
            }
            _ => {}
        }
    }
    Some(r)
}

/// Parse an `RTM_NEWNEIGH` payload.
pub fn parse_neighbour(m: &[u8]) -> Option<Neighbour> {
    // struct ndmsg: family, pad(3), ifindex(4), state(2), flags, type
    let h = m.get(..12)?;
    let family = h[0];
    let ifindex = u32_of(&h[4..8])?;
    let state = u16::from_ne_bytes([h[8], h[9]]);
    let (mut addr, mut mac) = (None, None);
    for (ty, d) in attrs(m, 12) {
        match ty {
            NDA_DST => addr = ip_of(family, d),
            NDA_LLADDR => mac = mac_of(d),
            _ => {}
        }
    }
    Some(Neighbour { ifindex, addr: addr?, mac, state })
}

/// Parse an `RTM_NEWRULE` payload.
pub fn parse_rule(m: &[u8]) -> Option<Rule> {
    // struct fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action, flags(4)
    let h = m.get(..12)?;
    let mut r = Rule { family: h[0], table: u32::from(h[4]), action: h[7] };
    for (ty, d) in attrs(m, 12) {
        if ty == FRA_TABLE {
            r.table = u32_of(d)?;
        }
    }
    Some(r)
}

/// One address of an interface (`RTM_NEWADDR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// Interface index.
    pub ifindex: u32,
    /// The local address and its prefix length (`IFA_LOCAL`, else
    /// `IFA_ADDRESS`: on a point-to-point IPv4 link `IFA_ADDRESS` is the
    /// peer's).
    pub local: IfAddr,
    /// The IPv4 broadcast address the kernel holds for it (`IFA_BROADCAST`).
    pub broadcast: Option<IpAddr>,
}

/// Parse an `RTM_NEWADDR` payload; None for a malformed one or one
/// without an address.
pub fn parse_address(m: &[u8]) -> Option<Address> {
    // struct ifaddrmsg: family, prefixlen, flags, scope, index(4)
    let h = m.get(..8)?;
    let (family, len) = (h[0], h[1]);
    let ifindex = u32_of(&h[4..8])?;
    let (mut local, mut address, mut broadcast) = (None, None, None);
    for (ty, d) in attrs(m, 8) {
        match ty {
            IFA_LOCAL => local = ip_of(family, d),
            IFA_ADDRESS => address = ip_of(family, d),
            IFA_BROADCAST => broadcast = ip_of(family, d),
            _ => {}
        }
    }
    let addr = local.or(address)?;
    let full = if addr.is_ipv4() { 32 } else { 128 };
    if len > full {
        return None;
    }
    Some(Address { ifindex, local: IfAddr { addr, len }, broadcast })
}

impl Netlink {
    /// Dump every object of request `ty` for `family` (the fixed header
    /// `fixed`, family first): the payloads of the kernel's answers.
    fn dump(&mut self, ty: u16, fixed: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        let mut m = Msg::new(ty, NLM_F_DUMP, 0);
        // A dump is answered by its messages and NLMSG_DONE, not by an ack.
        m.0[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        m.bytes(fixed);
        let mut out = Vec::new();
        self.exchange(&mut m, |mty, p| match mty {
            NLMSG_DONE => Some(Ok(())),
            NLMSG_ERROR => Some(error_code(p).unwrap_or(Ok(()))),
            _ => {
                out.push(p.to_vec());
                None
            }
        })?;
        Ok(out)
    }

    /// Every link.
    pub fn links(&mut self) -> io::Result<Vec<Link>> {
        let fixed = [[libc::AF_UNSPEC as u8, 0, 0, 0], [0; 4], [0; 4], [0; 4]].concat();
        Ok(self.dump(RTM_GETLINK, &fixed)?.iter().filter_map(|m| parse_link(m)).collect())
    }

    /// Every route of `family` (`AF_INET` or `AF_INET6`), all tables.
    pub fn routes(&mut self, family: u8) -> io::Result<Vec<Route>> {
        let fixed = [family, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        Ok(self.dump(RTM_GETROUTE, &fixed)?.iter().filter_map(|m| parse_route(m)).collect())
    }

    /// Every neighbour entry of `family`.
    pub fn neighbours(&mut self, family: u8) -> io::Result<Vec<Neighbour>> {
        let fixed = [family, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        Ok(self.dump(RTM_GETNEIGH, &fixed)?.iter().filter_map(|m| parse_neighbour(m)).collect())
    }

    /// Every policy routing rule of `family`.
    pub fn rules(&mut self, family: u8) -> io::Result<Vec<Rule>> {
        let fixed = [family, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        Ok(self.dump(RTM_GETRULE, &fixed)?.iter().filter_map(|m| parse_rule(m)).collect())
    }

    /// Every address of every interface, both families.
    pub fn addresses(&mut self) -> io::Result<Vec<Address>> {
        let fixed = [libc::AF_UNSPEC as u8, 0, 0, 0, 0, 0, 0, 0];
        Ok(self.dump(RTM_GETADDR, &fixed)?.iter().filter_map(|m| parse_address(m)).collect())
    }
}

/// A route netlink socket that hears the kernel announce every address
/// added or removed (IPv4 and IPv6), to re-read the list when it changes.
#[derive(Debug)]
pub struct AddrEvents {
    fd: OwnedFd,
}

impl AddrEvents {
    /// Open a non-blocking socket joined to the address groups.
    pub fn open() -> io::Result<AddrEvents> {
        Ok(AddrEvents { fd: route_socket(RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR, libc::SOCK_NONBLOCK)? })
    }

    /// Wait up to `timeout` for announcements and read all that are
    /// queued: true when an address changed (or the kernel dropped
    /// announcements, `ENOBUFS`: something may have changed unheard).
    pub fn wait(&mut self, timeout: std::time::Duration) -> io::Result<bool> {
        use std::os::fd::AsFd;
        let mut fds = [nix::poll::PollFd::new(self.fd.as_fd(), nix::poll::PollFlags::POLLIN)];
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let mut changed = false;
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(changed),
                    Some(libc::EINTR) => continue,
                    Some(libc::ENOBUFS) => changed = true,
                    _ => return Err(e),
                }
                continue;
            }
            let mut p = &buf[..n as usize];
            while p.len() >= 16 {
                let len = u32::from_ne_bytes([p[0], p[1], p[2], p[3]]) as usize;
                let ty = u16::from_ne_bytes([p[4], p[5]]);
                if len < 16 || len > p.len() {
                    break;
                }
                changed |= ty == RTM_NEWADDR || ty == RTM_DELADDR;
                p = &p[((len + 3) & !3).min(p.len())..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_padded_and_sized() {
        let mut m = Msg::new(RTM_NEWROUTE, NLM_F_CREATE, 7);
        m.bytes(&[1, 2, 3, 4]).attr(RTA_DST, &[10, 0, 0]);
        let b = m.finish().to_vec();
        assert_eq!(b.len(), 16 + 4 + 8);
        assert_eq!(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize, b.len());
        assert_eq!(u16::from_ne_bytes([b[20], b[21]]), 7, "attribute length excludes padding");
    }

    /// An `RTM_NEWROUTE` payload: rtmsg then attributes (the Msg builder
    /// minus its 16-byte netlink header).
    fn route_msg(family: u8, dst_len: u8, ty: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = Msg::new(RTM_NEWROUTE, 0, 0);
        m.bytes(&[family, dst_len, 0, 0, RT_TABLE_MAIN, 3, 0, ty]).bytes(&0u32.to_ne_bytes());
        for (t, d) in attrs {
            m.attr(*t, d);
        }
        m.finish()[16..].to_vec()
    }

    #[test]
    fn route_dumps_parse() {
        let mtu = [8u16.to_ne_bytes(), RTAX_MTU.to_ne_bytes()].concat();
        let mtu = [mtu, 1400u32.to_ne_bytes().to_vec()].concat();
        let m = route_msg(
            libc::AF_INET as u8,
            24,
            RTN_UNICAST,
            &[
                (RTA_DST, &[10, 1, 2, 0]),
                (RTA_OIF, &7u32.to_ne_bytes()),
                (RTA_GATEWAY, &[10, 0, 0, 1]),
                (RTA_METRICS, &mtu),
            ],
        );
        let r = parse_route(&m).unwrap();
        assert_eq!(r.dst.to_string(), "10.1.2.0/24");
        assert_eq!((r.table, r.kind, r.oif, r.mtu, r.complex), (254, 1, Some(7), Some(1400), false));
        assert_eq!(r.gateway, Some("10.0.0.1".parse().unwrap()));
        // The default route has no RTA_DST; a multipath one is complex.
        let r = parse_route(&route_msg(libc::AF_INET6 as u8, 0, RTN_UNICAST, &[(RTA_MULTIPATH, &[0; 8])])).unwrap();
        assert_eq!((r.dst.to_string().as_str(), r.complex, r.gateway), ("::/0", true, None));
        // Truncated or of another family: nothing.
        assert!(parse_route(&m[..8]).is_none());
        assert!(parse_route(&route_msg(7, 0, RTN_UNICAST, &[])).is_none());
        // An attribute running past the end is ignored, not read beyond.
        let mut bad = m.clone();
        bad[12] = 0xff;
        assert!(parse_route(&bad).is_some());
    }

    #[test]
    fn neighbour_and_link_dumps_parse() {
        let mut m = Msg::new(0, 0, 0);
        m.bytes(&[libc::AF_INET6 as u8, 0, 0, 0])
            .bytes(&3u32.to_ne_bytes())
            .bytes(&0x02u16.to_ne_bytes())
            .bytes(&[0, 1]);
        m.attr(NDA_DST, &[0xfd, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]).attr(NDA_LLADDR, &[2, 0, 0, 0, 6, 2]);
        let n = parse_neighbour(&m.finish()[16..]).unwrap();
        assert_eq!((n.ifindex, n.state, n.mac), (3, 2, Some([2, 0, 0, 0, 6, 2])));
        assert_eq!(n.addr, "fd00:6::2".parse::<IpAddr>().unwrap());
        assert!(n.state & NUD_USABLE != 0);
        let mut m = Msg::new(0, 0, 0);
        m.bytes(&[0, 0, 1, 0]).bytes(&9u32.to_ne_bytes()).bytes(&[0; 8]);
        m.attr(IFLA_MTU, &1280u32.to_ne_bytes()).attr(IFLA_ADDRESS, &[2, 0, 0, 0, 4, 1]);
        assert_eq!(parse_link(&m.finish()[16..]), Some(Link { index: 9, mtu: 1280, mac: Some([2, 0, 0, 0, 4, 1]) }));
    }

    fn addr_msg(family: u8, len: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = Msg::new(RTM_NEWADDR, 0, 0);
        m.bytes(&[family, len, 0, 0]).bytes(&4u32.to_ne_bytes());
        for (t, d) in attrs {
            m.attr(*t, d);
        }
        m.finish()[16..].to_vec()
    }

    #[test]
    fn address_dumps_parse() {
        let v4 = libc::AF_INET as u8;
        // IFA_LOCAL is the address; IFA_ADDRESS the peer of a point-to-point link.
        let m = addr_msg(
            v4,
            24,
            &[(IFA_ADDRESS, &[10, 9, 9, 9]), (IFA_LOCAL, &[10, 1, 2, 3]), (IFA_BROADCAST, &[10, 1, 2, 255])],
        );
        let a = parse_address(&m).unwrap();
        assert_eq!((a.ifindex, a.local.to_string()), (4, "10.1.2.3/24".to_string()));
        assert_eq!(a.broadcast, Some("10.1.2.255".parse().unwrap()));
        // IPv6: IFA_ADDRESS only.
        let m = addr_msg(
            libc::AF_INET6 as u8,
            64,
            &[(IFA_ADDRESS, &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])],
        );
        assert_eq!(parse_address(&m).unwrap().local.to_string(), "2001:db8::1/64");
        // No address, a prefix length past the family's, a short header: nothing.
        assert!(parse_address(&addr_msg(v4, 24, &[])).is_none());
        assert!(parse_address(&addr_msg(v4, 33, &[(IFA_LOCAL, &[10, 1, 2, 3])])).is_none());
        assert!(parse_address(&m[..6]).is_none());
        // An address of the wrong length for its family is not read.
        assert!(parse_address(&addr_msg(v4, 24, &[(IFA_LOCAL, &[10, 1, 2])])).is_none());
    }
}
