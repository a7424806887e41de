//! The comparison paper's own session-initiation measure (its §3 and
//! Table 1: "from receipt of the first packet to it being sent on the
//! external interface"), taken beside the client-side session time.
//!
//! For each session, t0 is its first packet (the client's SYN) leaving the
//! client namespace's stack: the first outgoing capture on any interface
//! of the client namespace (the veth c0, or a TUN B4's device, so that the
//! B4's own work counts as DSTM's client-side work counted in the paper;
//! the `-b4k` rows' tc program redirects the packet from the TUN device to
//! c0 before the TUN device's taps, so theirs is c0). t1 is that SYN's
//! first arrival, as IPv4, in the server namespace (s0). The initiation is
//! t1 − t0: for native IPv4 the router's forwarding, for TRT the relay's
//! accept and its own SYN to the server, for NAT64 the translation of the
//! first packet, for socat its accept and connect.
//!
//! The timestamps are the kernel's (`SO_TIMESTAMPNS` on `AF_PACKET` tap
//! sockets, one in the client and one in the server namespace of each
//! testbed, opened for the session blocks only). A classic BPF filter
//! passes only TCP SYNs without ACK from or to the session port, in IPv4,
//! IPv6 or IPv4-in-IPv6 (next header 4) on Ethernet, or raw IP on a TUN
//! device ([`syn_filter`]). Taps on the gateway's interfaces would miss the
//! packets its XDP programs redirect; the server's veth s0 receives those
//! through its normal receive path (the redirect into g1 lands in s0's
//! NAPI ring, then the stack, whose taps see it), so the `-xdp` rows are
//! measured the same way.
//!
//! Pairing ([`pair`]): sessions run one after the other, and each one's
//! client-side window (before `connect()`, after `close()`, CLOCK_REALTIME
//! as the timestamps) holds its own SYNs on both sides and no other
//! session's. A session is paired only when its window holds exactly one
//! SYN on the first client interface and exactly one IPv4 SYN in the server
//! namespace; anything else (a retransmission, a missing capture, a failed
//! session, a block whose tap dropped frames, t1 before t0) is counted as
//! unmatched, never paired. The taps are drained after each block, not per
//! session: the timed path only reads the clock twice more per session
//! (outside its timed interval). What the taps cost the packets, on both
//! testbeds alike: the filter on every frame of the two namespaces, a
//! clone of every frame the client namespace sends (the kernel clones a
//! transmitted frame for its taps before their filters run; the server
//! tap ignores outgoing frames) and of every SYN passed, and a receive
//! timestamp on every packet of the machine (any timestamping socket turns
//! them on), while the session blocks run.

use std::os::fd::{AsFd, OwnedFd};

use anyhow::{Context as _, Result};
use lab::netns::Netns;
use serde::Serialize;

use crate::harness::latency::LatencyHistogram;
use crate::sys;

/// One session's window: CLOCK_REALTIME ns before its `connect()` and
/// after its `close()`, and whether it completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub start_ns: i64,
    pub end_ns: i64,
    pub ok: bool,
}

/// One captured SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Capture {
    /// Kernel timestamp, CLOCK_REALTIME ns.
    pub t_ns: i64,
    pub ifindex: i32,
    /// Leaving the namespace's stack (`PACKET_OUTGOING`), not arriving.
    pub outgoing: bool,
    /// The outer packet is IPv4 (not IPv6, nor IPv4 in IPv6).
    pub ipv4: bool,
    /// Captured on a raw-IP device (a TUN device: `ARPHRD_NONE`).
    pub raw_ip: bool,
}

/// Sessions without an initiation time, by reason, and captures that
/// belonged to no session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    /// Sessions that failed (their captures set aside).
    pub failed: u64,
    /// No client SYN captured in the session's window.
    pub no_client_syn: u64,
    /// No IPv4 SYN captured in the server namespace in its window.
    pub no_server_syn: u64,
    /// More than one SYN on the first client interface or in the server
    /// namespace (a retransmission, by the client or by the gateway).
    pub repeated_syn: u64,
    /// The server's SYN stamped before the client's (clock step).
    pub out_of_order: u64,
    /// Sessions of a block in which a tap dropped frames (its buffer
    /// full): none of them is paired.
    pub tap_drops: u64,
    /// Captured SYNs of a side's direction (leaving the client namespace,
    /// arriving in the server namespace as IPv4) outside every session's
    /// window (not sessions: not in [`Unmatched::sessions`]). The other
    /// captures are no session's first packet and are left out: a TUN
    /// B4 writes its encapsulated SYN back into its TUN device, an
    /// incoming frame there, before the kernel sends it on c0.
    pub stray_captures: u64,
}

impl Unmatched {
    /// Sessions without an initiation time.
    pub fn sessions(&self) -> u64 {
        self.failed + self.no_client_syn + self.no_server_syn + self.repeated_syn + self.out_of_order + self.tap_drops
    }

    fn add(&mut self, o: &Unmatched) {
        self.failed += o.failed;
        self.no_client_syn += o.no_client_syn;
        self.no_server_syn += o.no_server_syn;
        self.repeated_syn += o.repeated_syn;
        self.out_of_order += o.out_of_order;
        self.tap_drops += o.tap_drops;
        self.stray_captures += o.stray_captures;
    }
}

/// One side's initiation samples.
#[derive(Debug, Clone, Default)]
pub(super) struct Initiation {
    pub hist: LatencyHistogram,
    pub unmatched: Unmatched,
    /// Timed sessions whose t0 was taken on a TUN device (a TUN B4's).
    pub t0_on_tun: u64,
    /// Session windows of the current block, not yet paired.
    pub windows: Vec<Window>,
}

impl Initiation {
    /// Adds every sample and count of `o` (not its pending windows).
    pub fn merge(&mut self, o: &Initiation) {
        self.hist.merge(&o.hist);
        self.unmatched.add(&o.unmatched);
        self.t0_on_tun += o.t0_on_tun;
    }
}

/// Pairs the client and server SYNs of `windows` (serial sessions, in
/// order), recording each paired session's t1 − t0 into `into`; `dropped`:
/// a tap lost frames during these sessions, none is paired.
pub(super) fn pair(windows: &[Window], client: &[Capture], server: &[Capture], dropped: bool, into: &mut Initiation) {
    let mut c: Vec<Capture> = client.iter().filter(|k| k.outgoing).copied().collect();
    let mut s: Vec<Capture> = server.iter().filter(|k| !k.outgoing && k.ipv4).copied().collect();
    let u = &mut into.unmatched;
    c.sort_by_key(|k| k.t_ns);
    s.sort_by_key(|k| k.t_ns);
    let within = |v: &[Capture], w: &Window| {
        let a = v.partition_point(|k| k.t_ns < w.start_ns);
        let b = v.partition_point(|k| k.t_ns <= w.end_ns);
        a..b.max(a)
    };
    let mut claimed = 0usize;
    for w in windows {
        let (cw, sw) = (&c[within(&c, w)], &s[within(&s, w)]);
        claimed += cw.len() + sw.len();
        if !w.ok {
            u.failed += 1;
            continue;
        }
        if dropped {
            u.tap_drops += 1;
            continue;
        }
        let Some(first) = cw.first() else {
            u.no_client_syn += 1;
            continue;
        };
        if sw.is_empty() {
            u.no_server_syn += 1;
            continue;
        }
        if sw.len() > 1 || cw.iter().filter(|k| k.ifindex == first.ifindex).count() > 1 {
            u.repeated_syn += 1;
            continue;
        }
        match u64::try_from(sw[0].t_ns - first.t_ns) {
            Ok(d) => {
                into.hist.record(d);
                into.t0_on_tun += u64::from(first.raw_ip);
            }
            Err(_) => u.out_of_order += 1,
        }
    }
    // Windows never overlap (serial sessions): every capture is claimed
    // at most once.
    u.stray_captures += (c.len() + s.len()).saturating_sub(claimed) as u64;
}

const ETH_HLEN: u32 = 14;
const IPV6_HLEN: u32 = 40;
/// What the filter keeps of a frame: link, IPv6 and IPv4 headers and the
/// TCP ports and flags, whatever the options.
const SNAPLEN: u32 = 256;

/// A jump target of the filter's assembler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum L {
    Next,
    Accept,
    Reject,
    Eth,
    Raw,
    V6(u32),
    V4(u32),
    Tcp,
    Flags,
}

/// One instruction with symbolic jumps: (code, jt, jf, k); an
/// unconditional jump's target is `jt`.
type Ins = (u16, L, L, u32);

/// The classic BPF program of the taps: accepts (the first [`SNAPLEN`]
/// bytes of) TCP SYNs without ACK whose source or destination port is
/// `port`, carried in IPv4, IPv6 (TCP the first next header) or IPv4 in
/// IPv6 (next header 4), on Ethernet (`ARPHRD_ETHER`: a veth) or as raw
/// IP (`ARPHRD_NONE`: a TUN device, no link header); rejects everything
/// else, IPv4 fragments after the first included.
pub(super) fn syn_filter(port: u16) -> Vec<libc::sock_filter> {
    use L::*;
    let (ld, ldh, ldb) = (BPF_LD | BPF_W | BPF_ABS, BPF_LD | BPF_H | BPF_ABS, BPF_LD | BPF_B | BPF_ABS);
    let jeq = BPF_JMP | BPF_JEQ | BPF_K;
    let ad = |k: i32| (libc::SKF_AD_OFF + k) as u32;
    let mut blocks: Vec<(L, Vec<Ins>)> = vec![
        (
            Next,
            vec![
                (ld, Next, Next, ad(libc::SKF_AD_HATYPE)),
                (jeq, Eth, Next, u32::from(libc::ARPHRD_ETHER)),
                (jeq, Raw, Reject, u32::from(libc::ARPHRD_NONE)),
            ],
        ),
        (
            Eth,
            vec![
                (ldh, Next, Next, 12),
                (jeq, V4(ETH_HLEN), Next, libc::ETH_P_IP as u32),
                (jeq, V6(ETH_HLEN), Reject, libc::ETH_P_IPV6 as u32),
            ],
        ),
        (
            Raw,
            vec![
                (ldb, Next, Next, 0),
                (BPF_ALU | BPF_AND | BPF_K, Next, Next, 0xf0),
                (jeq, V4(0), Next, 0x40),
                (jeq, V6(0), Reject, 0x60),
            ],
        ),
    ];
    for at in [0, ETH_HLEN] {
        blocks.push((
            V6(at),
            vec![
                (ldb, Next, Next, at + 6),
                (jeq, Next, V6(u32::MAX), libc::IPPROTO_TCP as u32),
                (BPF_LDX | BPF_IMM, Next, Next, at + IPV6_HLEN),
                (BPF_JMP | BPF_JA, Tcp, Next, 0),
            ],
        ));
        // Not TCP: IPv4 in IPv6?
        blocks.push((V6(u32::MAX), vec![(jeq, V4(at + IPV6_HLEN), Reject, libc::IPPROTO_IPIP as u32)]));
    }
    for at in [0, ETH_HLEN, IPV6_HLEN, ETH_HLEN + IPV6_HLEN] {
        blocks.push((
            V4(at),
            vec![
                (ldb, Next, Next, at + 9),
                (jeq, Next, Reject, libc::IPPROTO_TCP as u32),
                (ldh, Next, Next, at + 6),
                (BPF_JMP | BPF_JSET | BPF_K, Reject, Next, 0x1fff),
                (BPF_LDX | BPF_B | BPF_MSH, Next, Next, at),
                (BPF_MISC | BPF_TXA, Next, Next, 0),
                (BPF_ALU | BPF_ADD | BPF_K, Next, Next, at),
                (BPF_MISC | BPF_TAX, Next, Next, 0),
                (BPF_JMP | BPF_JA, Tcp, Next, 0),
            ],
        ));
    }
    blocks.push((
        Tcp,
        vec![
            (BPF_LD | BPF_H | BPF_IND, Next, Next, 0),
            (jeq, Flags, Next, u32::from(port)),
            (BPF_LD | BPF_H | BPF_IND, Next, Next, 2),
            (jeq, Flags, Reject, u32::from(port)),
        ],
    ));
    blocks.push((
        Flags,
        vec![
            (BPF_LD | BPF_B | BPF_IND, Next, Next, 13),
            (BPF_ALU | BPF_AND | BPF_K, Next, Next, 0x12),
            (jeq, Accept, Reject, 0x02),
        ],
    ));
    blocks.push((Accept, vec![(BPF_RET | BPF_K, Next, Next, SNAPLEN)]));
    blocks.push((Reject, vec![(BPF_RET | BPF_K, Next, Next, 0)]));
    assemble(&blocks)
}

/// Lays out `blocks` in order and resolves their jumps. `V6(u32::MAX)`
/// (the "not TCP" continuation of an IPv6 block) is the block right
/// after the `V6` block that names it.
fn assemble(blocks: &[(L, Vec<Ins>)]) -> Vec<libc::sock_filter> {
    let mut at = Vec::with_capacity(blocks.len());
    let mut n = 0usize;
    for (label, ins) in blocks {
        at.push((*label, n));
        n += ins.len();
    }
    let mut out = Vec::with_capacity(n);
    for (bi, (_, ins)) in blocks.iter().enumerate() {
        for (code, jt, jf, k) in ins {
            let pc = out.len();
            let to = |l: L| -> usize {
                match l {
                    L::Next => pc + 1,
                    L::V6(u32::MAX) => at[bi + 1].1,
                    _ => at.iter().find(|(x, _)| *x == l).map(|(_, p)| *p).expect("jump to a block of the program"),
                }
            };
            let rel = |l: L| u8::try_from(to(l) - pc - 1).expect("forward jump within 255 instructions");
            let ins = if *code == BPF_JMP | BPF_JA {
                libc::sock_filter { code: *code, jt: 0, jf: 0, k: (to(*jt) - pc - 1) as u32 }
            } else if *code & 0x07 == BPF_JMP {
                libc::sock_filter { code: *code, jt: rel(*jt), jf: rel(*jf), k: *k }
            } else {
                libc::sock_filter { code: *code, jt: 0, jf: 0, k: *k }
            };
            out.push(ins);
        }
    }
    out
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD: u16 = 0x00;
const BPF_LDX: u16 = 0x01;
const BPF_ALU: u16 = 0x04;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_MISC: u16 = 0x07;
const BPF_W: u16 = 0x00;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_IMM: u16 = 0x00;
const BPF_ABS: u16 = 0x20;
const BPF_IND: u16 = 0x40;
const BPF_MSH: u16 = 0xa0;
const BPF_ADD: u16 = 0x00;
const BPF_AND: u16 = 0x50;
const BPF_JA: u16 = 0x00;
const BPF_JEQ: u16 = 0x10;
const BPF_JSET: u16 = 0x40;
const BPF_K: u16 = 0x00;
const BPF_TAX: u16 = 0x00;
const BPF_TXA: u16 = 0x80;

/// Whether a captured frame's outer packet is IPv4, from its link type
/// and first bytes.
fn outer_ipv4(hatype: u16, frame: &[u8]) -> bool {
    match hatype {
        libc::ARPHRD_ETHER => frame.get(12..14) == Some(&(libc::ETH_P_IP as u16).to_be_bytes()[..]),
        libc::ARPHRD_NONE => frame.first().is_some_and(|b| b >> 4 == 4),
        _ => false,
    }
}

/// The two taps of one testbed: its client and its server namespace.
#[derive(Debug)]
pub(super) struct Taps {
    client: OwnedFd,
    server: OwnedFd,
}

impl Taps {
    /// Opens the taps of the testbed whose client namespace is `c` and
    /// server namespace `s`, for SYNs from or to `port`.
    pub fn open(c: &Netns, s: &Netns, port: u16) -> Result<Taps> {
        let f = syn_filter(port);
        let open = |ns: &Netns, outgoing: bool| {
            ns.run(|| sys::tap_socket(&f, outgoing).with_context(|| format!("capture socket in {}", ns.name())))
        };
        // The server side needs the incoming SYNs only.
        Ok(Taps { client: open(c, true)?, server: open(s, false)? })
    }

    /// Drains both taps and pairs their SYNs with `into`'s pending
    /// windows (the block just run), which it clears.
    pub fn drain(&self, into: &mut Initiation) -> Result<()> {
        let (client, cd) = read_all(&self.client)?;
        let (server, sd) = read_all(&self.server)?;
        let windows = std::mem::take(&mut into.windows);
        pair(&windows, &client, &server, cd + sd > 0, into);
        Ok(())
    }
}

/// Every queued capture of `fd`, and the frames it dropped since the
/// last drain.
fn read_all(fd: &OwnedFd) -> Result<(Vec<Capture>, u32)> {
    let mut buf = [0u8; SNAPLEN as usize];
    let mut v = Vec::new();
    while let Some(t) = sys::tap_recv(fd.as_fd(), &mut buf).context("reading a capture socket")? {
        v.push(Capture {
            t_ns: t.t_ns,
            ifindex: t.ifindex,
            outgoing: t.pkttype == libc::PACKET_OUTGOING,
            ipv4: outer_ipv4(t.hatype, &buf[..t.len.min(buf.len())]),
            raw_ip: t.hatype == libc::ARPHRD_NONE,
        });
    }
    // After the reads: drops counted up to the last frame read.
    let drops = sys::tap_drops(fd.as_fd()).context("capture socket statistics")?;
    Ok((v, drops))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic BPF interpreter for the instructions [`syn_filter`]
    /// uses, with the kernel's rules (a load past the end returns 0);
    /// `hatype` answers the link-type load.
    fn run(prog: &[libc::sock_filter], pkt: &[u8], hatype: u16) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let load = |off: u32, size: usize| -> Option<u32> {
            let off = off as usize;
            let b = pkt.get(off..off.checked_add(size)?)?;
            Some(b.iter().fold(0u32, |v, &byte| (v << 8) | u32::from(byte)))
        };
        loop {
            let i = prog[pc];
            pc += 1;
            let size = match i.code & 0x18 {
                BPF_W => 4,
                BPF_H => 2,
                _ => 1,
            };
            match i.code & 0x07 {
                BPF_LD => {
                    let v = match i.code & 0xe0 {
                        BPF_ABS if i.k == (libc::SKF_AD_OFF + libc::SKF_AD_HATYPE) as u32 => Some(u32::from(hatype)),
                        BPF_ABS => load(i.k, size),
                        BPF_IND => load(x.wrapping_add(i.k), size),
                        m => panic!("load mode {m:#x}"),
                    };
                    match v {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                BPF_LDX => match i.code & 0xe0 {
                    BPF_IMM => x = i.k,
                    BPF_MSH => match load(i.k, 1) {
                        Some(v) => x = (v & 0xf) * 4,
                        None => return 0,
                    },
                    m => panic!("ldx mode {m:#x}"),
                },
                BPF_ALU => match i.code & 0xf0 {
                    BPF_ADD => a = a.wrapping_add(i.k),
                    BPF_AND => a &= i.k,
                    o => panic!("alu {o:#x}"),
                },
                BPF_MISC => match i.code & 0xf8 {
                    BPF_TAX => x = a,
                    BPF_TXA => a = x,
                    o => panic!("misc {o:#x}"),
                },
                BPF_JMP => {
                    let taken = match i.code & 0xf0 {
                        BPF_JA => {
                            pc += i.k as usize;
                            continue;
                        }
                        BPF_JEQ => a == i.k,
                        BPF_JSET => a & i.k != 0,
                        o => panic!("jump {o:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                BPF_RET => return i.k,
                c => panic!("class {c:#x}"),
            }
        }
    }

    const PORT: u16 = 5002;
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;

    /// A TCP header from `sport` to `dport` with `flags`.
    fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = flags;
        t
    }

    /// An IPv4 packet (header with `options` bytes of options) of protocol
    /// `proto` around `payload`.
    fn ipv4(proto: u8, options: usize, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 20 + options];
        h[0] = 0x40 | ((20 + options) / 4) as u8;
        h[9] = proto;
        h[12..16].copy_from_slice(&[192, 0, 0, 2]);
        h[16..20].copy_from_slice(&[198, 51, 100, 1]);
        h.extend_from_slice(payload);
        h
    }

    fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        h[6] = next;
        h[7] = 64;
        h.extend_from_slice(payload);
        h
    }

    fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn passes(frame: &[u8], hatype: u16) -> bool {
        run(&syn_filter(PORT), frame, hatype) > 0
    }

    #[test]
    fn the_filter_passes_syns_of_the_port_in_every_encapsulation() {
        let syn = tcp(40000, PORT, SYN);
        let v4 = ipv4(6, 0, &syn);
        assert!(passes(&eth(0x0800, &v4), libc::ARPHRD_ETHER), "IPv4 SYN on Ethernet");
        assert!(passes(&eth(0x0800, &ipv4(6, 12, &syn)), libc::ARPHRD_ETHER), "IPv4 with options");
        assert!(passes(&eth(0x86dd, &ipv6(6, &syn)), libc::ARPHRD_ETHER), "IPv6 SYN on Ethernet");
        assert!(passes(&eth(0x86dd, &ipv6(4, &v4)), libc::ARPHRD_ETHER), "4in6 SYN on Ethernet");
        assert!(passes(&eth(0x86dd, &ipv6(4, &ipv4(6, 8, &syn))), libc::ARPHRD_ETHER), "4in6, inner options");
        assert!(passes(&v4, libc::ARPHRD_NONE), "raw IPv4 SYN on a TUN device");
        assert!(passes(&ipv6(6, &syn), libc::ARPHRD_NONE), "raw IPv6 SYN on a TUN device");
        assert!(passes(&ipv6(4, &v4), libc::ARPHRD_NONE), "raw 4in6 SYN on a TUN device");
        // From the port (a SYN the server's side would send) passes too.
        assert!(passes(&eth(0x0800, &ipv4(6, 0, &tcp(PORT, 40000, SYN))), libc::ARPHRD_ETHER));
        // What it keeps.
        assert_eq!(run(&syn_filter(PORT), &v4, libc::ARPHRD_NONE), SNAPLEN);
    }

    #[test]
    fn the_filter_rejects_everything_else() {
        let v4 = |t: Vec<u8>| eth(0x0800, &ipv4(6, 0, &t));
        assert!(!passes(&v4(tcp(PORT, 40000, SYN | ACK)), libc::ARPHRD_ETHER), "SYN-ACK");
        assert!(!passes(&eth(0x86dd, &ipv6(6, &tcp(PORT, 40000, SYN | ACK))), libc::ARPHRD_ETHER), "IPv6 SYN-ACK");
        assert!(
            !passes(&eth(0x86dd, &ipv6(4, &ipv4(6, 0, &tcp(PORT, 1, SYN | ACK)))), libc::ARPHRD_ETHER),
            "4in6 SYN-ACK"
        );
        assert!(!passes(&v4(tcp(40000, PORT, ACK)), libc::ARPHRD_ETHER), "ACK");
        assert!(!passes(&v4(tcp(40000, 5001, SYN)), libc::ARPHRD_ETHER), "another port");
        assert!(!passes(&eth(0x0800, &ipv4(17, 0, &tcp(40000, PORT, SYN))), libc::ARPHRD_ETHER), "UDP");
        let mut frag = ipv4(6, 0, &tcp(40000, PORT, SYN));
        frag[6..8].copy_from_slice(&185u16.to_be_bytes());
        assert!(!passes(&eth(0x0800, &frag), libc::ARPHRD_ETHER), "a later fragment");
        assert!(!passes(&eth(0x86dd, &ipv6(0, &tcp(40000, PORT, SYN))), libc::ARPHRD_ETHER), "IPv6 extension header");
        assert!(!passes(&eth(0x0806, &[0u8; 28]), libc::ARPHRD_ETHER), "ARP");
        // A raw IP packet read as Ethernet, and an Ethernet frame as raw IP.
        assert!(!passes(&ipv4(6, 0, &tcp(40000, PORT, SYN)), libc::ARPHRD_ETHER));
        assert!(!passes(&v4(tcp(40000, PORT, SYN)), libc::ARPHRD_NONE));
        assert!(!passes(&v4(tcp(40000, PORT, SYN)), libc::ARPHRD_LOOPBACK), "other link types");
        // Truncated: the flags beyond the end.
        let t = v4(tcp(40000, PORT, SYN));
        assert!(!passes(&t[..t.len() - 8], libc::ARPHRD_ETHER), "truncated");
        assert!(!passes(&[], libc::ARPHRD_NONE), "empty");
    }

    #[test]
    fn outer_ipv4_is_read_from_the_link_type() {
        let v4 = ipv4(6, 0, &tcp(1, PORT, SYN));
        assert!(outer_ipv4(libc::ARPHRD_ETHER, &eth(0x0800, &v4)));
        assert!(!outer_ipv4(libc::ARPHRD_ETHER, &eth(0x86dd, &ipv6(4, &v4))), "4in6 is not IPv4");
        assert!(outer_ipv4(libc::ARPHRD_NONE, &v4));
        assert!(!outer_ipv4(libc::ARPHRD_NONE, &ipv6(6, &tcp(1, PORT, SYN))));
        assert!(!outer_ipv4(libc::ARPHRD_ETHER, &[]));
    }

    fn w(start_ns: i64, end_ns: i64) -> Window {
        Window { start_ns, end_ns, ok: true }
    }

    /// A client capture (outgoing) on interface `ifindex` (4: a TUN device).
    fn cl(t_ns: i64, ifindex: i32) -> Capture {
        Capture { t_ns, ifindex, outgoing: true, ipv4: false, raw_ip: ifindex == 4 }
    }

    /// A server capture (incoming IPv4).
    fn sv(t_ns: i64) -> Capture {
        Capture { t_ns, ifindex: 2, outgoing: false, ipv4: true, raw_ip: false }
    }

    fn paired(windows: &[Window], client: &[Capture], server: &[Capture], dropped: bool) -> (Vec<u64>, Unmatched) {
        let mut i = Initiation::default();
        pair(windows, client, server, dropped, &mut i);
        let s = i.hist.summary();
        (if s.samples > 0 { vec![s.min_ns, s.max_ns] } else { Vec::new() }, i.unmatched)
    }

    #[test]
    fn serial_sessions_pair_in_their_windows_whatever_the_capture_order() {
        // Three sessions; captures handed over out of order.
        let ws = [w(1_000, 2_000), w(3_000, 4_000), w(5_000, 6_000)];
        let c = [cl(5_100, 3), cl(1_100, 3), cl(3_050, 3)];
        let s = [sv(3_070), sv(5_400), sv(1_105)];
        let (v, u) = paired(&ws, &c, &s, false);
        assert_eq!(v, [5, 300], "1,105 − 1,100 the smallest, 5,400 − 5,100 the largest");
        assert_eq!(u, Unmatched::default());
        let mut i = Initiation::default();
        pair(&ws, &c, &s, false, &mut i);
        assert_eq!(i.hist.count(), 3);
        assert!(i.hist.quantile(0.5).abs_diff(20) <= 1, "the middle one: 3,070 − 3,050");
    }

    #[test]
    fn the_first_client_interface_is_t0_and_a_b4s_second_copy_is_not_a_retransmission() {
        // A TUN B4: the SYN on its TUN device (4), then encapsulated on c0 (3).
        let (v, u) = paired(&[w(0, 1_000)], &[cl(130, 3), cl(100, 4)], &[sv(400)], false);
        assert_eq!((v, u), (vec![300, 300], Unmatched::default()));
        let mut i = Initiation::default();
        pair(
            &[w(0, 1_000), w(2_000, 3_000)],
            &[cl(130, 3), cl(100, 4), cl(2_100, 3)],
            &[sv(400), sv(2_200)],
            false,
            &mut i,
        );
        assert_eq!(
            (i.hist.count(), i.t0_on_tun),
            (2, 1),
            "the first session's t0 on the TUN device, the second's on c0"
        );
    }

    #[test]
    fn anything_but_one_syn_per_side_is_unmatched_never_paired() {
        // Session 1: the client's SYN retransmitted (twice on c0, and on the TUN device).
        // Session 2: no server capture. Session 3: no client capture.
        // Session 4: the gateway's SYN to the server retransmitted.
        // Session 5: failed. Session 6: the server's stamp before the client's.
        // Session 7: paired.
        let ws = [
            w(0, 999),
            w(1_000, 1_999),
            w(2_000, 2_999),
            w(3_000, 3_999),
            Window { start_ns: 4_000, end_ns: 4_999, ok: false },
            w(5_000, 5_999),
            w(6_000, 6_999),
        ];
        let c = [
            cl(10, 4),
            cl(20, 3),
            cl(510, 4),
            cl(520, 3),
            cl(1_010, 3),
            cl(3_010, 3),
            cl(4_010, 3),
            cl(5_500, 3),
            cl(6_010, 3),
        ];
        let s = [sv(600), sv(2_400), sv(3_100), sv(3_900), sv(4_100), sv(5_400), sv(6_042)];
        let (v, u) = paired(&ws, &c, &s, false);
        assert_eq!(v, [32, 32], "only the last session");
        assert_eq!(
            u,
            Unmatched {
                failed: 1,
                no_client_syn: 1,
                no_server_syn: 1,
                repeated_syn: 2,
                out_of_order: 1,
                tap_drops: 0,
                stray_captures: 0
            }
        );
        assert_eq!(u.sessions(), 6);
    }

    #[test]
    fn strays_are_counted_and_drops_unpair_the_block() {
        // A capture between the windows and one after them; an incoming one
        // on the client side (a TUN B4's own write of the encapsulated SYN)
        // and an IPv6 one on the server side are left out.
        let ws = [w(1_000, 2_000), w(3_000, 4_000)];
        let mut incoming = cl(1_200, 3);
        incoming.outgoing = false;
        let mut v6 = sv(1_300);
        v6.ipv4 = false;
        let c = [cl(1_100, 3), cl(2_500, 3), cl(3_100, 3), incoming];
        let s = [sv(1_150), v6, sv(3_200), sv(9_000)];
        let (v, u) = paired(&ws, &c, &s, false);
        assert_eq!(v, [50, 100]);
        assert_eq!(u.stray_captures, 2);
        assert_eq!(u.sessions(), 0);
        // The same with a tap that dropped frames: nothing paired.
        let (v, u) = paired(&ws, &c, &s, true);
        assert!(v.is_empty());
        assert_eq!((u.tap_drops, u.sessions()), (2, 2));
    }

    /// The taps in real namespaces: the kernel takes the filter, stamps
    /// the client's outgoing SYN and the server's incoming one, and each
    /// session pairs.
    #[test]
    fn taps_in_two_namespaces_time_each_session() {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        lab::need_root!();
        let prefix = lab::netns::unique_name("v6ti");
        let c = Netns::create(&format!("{prefix}c")).unwrap();
        let s = Netns::create(&format!("{prefix}s")).unwrap();
        lab::netns::veth(&c, "c0", &s, "s0").unwrap();
        c.ip(&["addr", "add", "10.9.0.1/24", "dev", "c0"]).unwrap();
        s.ip(&["addr", "add", "10.9.0.2/24", "dev", "s0"]).unwrap();
        let l = s.run(|| Ok(TcpListener::bind(("10.9.0.2", PORT))?)).unwrap();
        // A listener on another port: its SYNs are not captured.
        let other = s.run(|| Ok(TcpListener::bind(("10.9.0.2", PORT + 1))?)).unwrap();
        let server = std::thread::spawn(move || loop {
            let (mut k, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            k.read_exact(&mut b).unwrap();
            if &b == b"q" {
                break;
            }
            k.write_all(&b).unwrap();
        });
        let taps = Taps::open(&c, &s, PORT).unwrap();
        // One session: connect, a byte each way, close, its window.
        let session = |init: &mut Initiation| -> std::io::Result<()> {
            let start_ns = sys::realtime_ns();
            let mut k = TcpStream::connect(("10.9.0.2", PORT))?;
            k.write_all(b"x")?;
            k.read_exact(&mut [0u8; 1])?;
            drop(k);
            init.windows.push(Window { start_ns, end_ns: sys::realtime_ns(), ok: true });
            Ok(())
        };
        // The kernel turns its packet timestamps on in a deferred work item
        // after the first timestamping socket opens (net_enable_timestamp);
        // until it has run, an outgoing SYN carries TCP's monotonic
        // departure time and pairs with no window. Sessions until one pairs.
        let mut warm = Initiation::default();
        for attempt in 0.. {
            c.run(|| Ok(session(&mut warm)?)).unwrap();
            taps.drain(&mut warm).unwrap();
            if warm.hist.count() > 0 {
                break;
            }
            assert!(attempt < 100, "no session paired in 100 tries: {:?}", warm.unmatched);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let mut init = Initiation::default();
        c.run(|| {
            let _ = TcpStream::connect(("10.9.0.2", PORT + 1))?;
            for _ in 0..3 {
                session(&mut init)?;
            }
            Ok(())
        })
        .unwrap();
        drop(other);
        taps.drain(&mut init).unwrap();
        assert_eq!(init.unmatched, Unmatched::default());
        assert_eq!(init.hist.count(), 3);
        let l = init.hist.summary();
        assert!(l.min_ns > 0 && l.max_ns < 1_000_000_000, "{l:?}");
        assert!(init.windows.is_empty(), "the windows are paired once");
        // Drained: nothing left for a next block.
        taps.drain(&mut init).unwrap();
        assert_eq!((init.hist.count(), init.unmatched), (3, Unmatched::default()));
        c.run(|| Ok(TcpStream::connect(("10.9.0.2", PORT))?.write_all(b"q")?)).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn merging_adds_samples_and_counts() {
        let mut a = Initiation::default();
        pair(&[w(0, 10)], &[cl(1, 3)], &[sv(5)], false, &mut a);
        let mut b = Initiation::default();
        pair(&[w(0, 10), w(20, 30)], &[cl(1, 3)], &[sv(5), sv(25)], false, &mut b);
        a.merge(&b);
        assert_eq!((a.hist.count(), a.unmatched.no_client_syn), (2, 1));
    }
}
