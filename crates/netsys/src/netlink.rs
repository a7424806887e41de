//! Route netlink (rtnetlink, RFC 3549) for the few things the daemon does
//! to its own device: link up + MTU, add addresses, add and remove routes.
//! One request at a time, each acknowledged (`NLM_F_ACK`) and its error
//! code returned; no `ip` command is ever run.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;
use crate::IfAddr;
use xlat::addr::IpPrefix;

const NLMSG_ERROR: u16 = 2;
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
        // SAFETY: plain socket(2).
        let raw =
            cvt(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) })?;
        // SAFETY: fresh fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; zeroed = let the kernel pick the port id.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `sa` is a valid sockaddr_nl of the length passed.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        Ok(Netlink { fd, seq: 1 })
    }

    /// Send one request and wait for its acknowledgement.
    fn call(&mut self, msg: &mut Msg) -> io::Result<()> {
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
        let mut buf = [0u8; 8192];
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
                if ty == NLMSG_ERROR && rseq == seq && len >= 20 {
                    let code = i32::from_ne_bytes([p[16], p[17], p[18], p[19]]);
                    return if code == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-code)) };
                }
                p = &p[((len + 3) & !3).min(p.len())..];
            }
        }
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
}
