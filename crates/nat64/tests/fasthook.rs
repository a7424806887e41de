//! A fast path told of sessions as they are created (`Nat64::set_fast_hook`)
//! and asked what it recorded of half-open ones: what is mirrored when, and
//! that a session whose IPv4 SYN+ACK the fast path carried ends up in the
//! same state with the same lifetime as on a translator that saw every
//! packet itself (a FIN, the expiry timer, `refresh`).

mod support;

use nat64::{FastHook, Nat64, Protocol, SessionFilter, SessionInfo, TcpState};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use support::*;

/// One `mirror` call: protocol, IPv6 host port, state, half-open.
type Mirrored = (Protocol, u16, Option<TcpState>, bool);

/// Records every `mirror` call; answers `syn_ack` from `carried`
/// (IPv6 host port → when the fast path forwarded the SYN+ACK).
#[derive(Debug, Default)]
struct Hook {
    mirrored: Mutex<Vec<Mirrored>>,
    carried: Mutex<HashMap<u16, u64>>,
    asked: Mutex<u32>,
}

impl FastHook for Hook {
    fn mirror(&self, s: &SessionInfo, half_open: bool) {
        self.mirrored.lock().unwrap().push((s.protocol, s.ipv6_src.port(), s.state, half_open));
    }
    fn syn_ack(&self, s: &SessionInfo) -> Option<u64> {
        *self.asked.lock().unwrap() += 1;
        assert_eq!(s.state, Some(TcpState::V6Init), "only half-open sessions are asked");
        self.carried.lock().unwrap().get(&s.ipv6_src.port()).copied()
    }
}

fn hooked(c: nat64::Config) -> (Nat64, Arc<Hook>) {
    let n = nat(c);
    let h = Arc::new(Hook::default());
    n.set_fast_hook(Some(h.clone()));
    (n, h)
}

fn short() -> nat64::Config {
    let mut c = cfg();
    c.tcp_trans_timeout = nat64::config::Secs(4);
    c.tcp_est_timeout = nat64::config::Secs(100);
    c
}

fn tcp6(flags: u8, sport: u16) -> Vec<u8> {
    V6::new(6, H1, Y6).tcp(sport, 80, flags, b"")
}
fn tcp4(flags: u8, t: u16) -> Vec<u8> {
    V4::new(6, Y4, T4).tcp(80, t, flags, b"")
}

/// The TCP sessions as listed at `now` (state and remaining lifetime).
fn tcp(n: &Nat64, now: u64) -> Vec<(u16, Option<TcpState>, u64)> {
    let f = SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() };
    n.sessions(&f, now).iter().map(|s| (s.ipv6_src.port(), s.state, s.expires_in_ms)).collect()
}

#[test]
fn sessions_mirrored_at_creation() {
    let (n, h) = hooked(cfg());
    fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 0);
    fwd(&n, &V6::new(58, H1, Y6).icmp(128, 0, [0, 7, 0, 1], b"ping"), 0);
    let out = fwd(&n, &tcp6(SYN, 5555), 0);
    let t = be16(&out, 20);
    let m = h.mirrored.lock().unwrap().clone();
    assert_eq!(
        m,
        [
            (Protocol::Udp, 40000, None, false),
            (Protocol::Icmp, 7, None, false),
            (Protocol::Tcp, 5555, Some(TcpState::V6Init), true),
        ],
        "UDP and ICMP echo in full, TCP half-open, each while its first packet was handled"
    );
    // Packets of existing sessions mirror nothing more; the SYN+ACK that
    // comes this way (not carried by the fast path) opens the session in
    // full at once.
    fwd(&n, &V4::new(17, Y4, T4).udp(53, be16(&fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 0), 20), b"a"), 0);
    fwd(&n, &tcp4(SYN | ACK, t), S);
    assert_eq!(h.mirrored.lock().unwrap()[3..], [(Protocol::Tcp, 5555, Some(TcpState::Established), false)]);
    assert_eq!(*h.asked.lock().unwrap(), 1, "the SYN+ACK asked the fast path first");
    // An IPv4 SYN through a static BIB entry (V4 INIT) is not mirrored.
    let mut c = cfg();
    c.bib.push(nat64::StaticBib {
        protocol: Protocol::Tcp,
        ipv6: "[2001:db8::9]:80".parse().unwrap(),
        ipv4: "192.0.2.1:80".parse().unwrap(),
    });
    let (n2, h2) = hooked(c);
    fwd(&n2, &V4::new(6, Y4, T4).tcp(3333, 80, SYN, b""), 0);
    assert!(h2.mirrored.lock().unwrap().is_empty(), "V4 INIT stays on the slow path");
}

#[test]
fn hairpinned_sessions_are_not_mirrored() {
    let (n, h) = hooked(cfg());
    let t = be16(&fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 0), 20);
    h.mirrored.lock().unwrap().clear();
    // H2 -> pool6 + T4 (192.0.2.1 = c000:201): hairpinned back to H1.
    let back = fwd(&n, &V6::new(17, H2, "2001:db8:64::c000:201").udp(41000, t, b"h"), 0);
    assert_eq!(v6dst(&back), a6(H1));
    let m = h.mirrored.lock().unwrap().clone();
    assert!(m.is_empty(), "no hairpinned session on the fast path: {m:?}");
}

/// One translator with the fast path carrying the SYN+ACK at `S`, one
/// seeing it itself at `S`: after `then` (packets at `at`) both list the
/// same TCP session.
fn twins(then: &[(Vec<u8>, bool)], at: u64) {
    let (fast, h) = hooked(short());
    let slow = nat(short());
    let t = be16(&fwd(&fast, &tcp6(SYN, 5555), 0), 20);
    assert_eq!(be16(&fwd(&slow, &tcp6(SYN, 5555), 0), 20), t);
    fwd(&slow, &tcp4(SYN | ACK, t), S);
    h.carried.lock().unwrap().insert(5555, S);
    assert_eq!(tcp(&fast, S)[0].1, Some(TcpState::V6Init), "nothing learnt before it handles the session");
    for (p, from4) in then {
        let p = if *from4 { tcp4(p[0], t) } else { tcp6(p[0], 5555) };
        fwd(&fast, &p, at);
        fwd(&slow, &p, at);
    }
    assert_eq!(tcp(&fast, at), tcp(&slow, at));
}

#[test]
fn syn_ack_carried_is_learnt_at_the_next_packet() {
    // The IPv6 host's FIN: ESTABLISHED first (learnt), then V6 FIN RCV.
    twins(&[(vec![FIN | ACK], false)], 3 * S);
    // The server's FIN, then the host's: V4 FIN + V6 FIN RCV, transitory.
    twins(&[(vec![FIN | ACK], true), (vec![FIN | ACK], false)], 3 * S);
    // An RST: TRANS.
    twins(&[(vec![RST], false)], 3 * S);
}

#[test]
fn syn_ack_carried_is_learnt_at_expiry_and_refresh() {
    let (n, h) = hooked(short());
    let t = be16(&fwd(&n, &tcp6(SYN, 5555), 0), 20);
    assert_ne!(t, 0);
    // Not carried: the half-open session dies at the transitory timeout.
    let ex = n.expire(5 * S);
    assert_eq!((ex.sessions, tcp(&n, 5 * S).len()), (1, 0));
    // Carried at 1 s: ESTABLISHED, 100 s from then, not deleted at 5 s.
    fwd(&n, &tcp6(SYN, 6666), 10 * S);
    h.carried.lock().unwrap().insert(6666, 11 * S);
    let ex = n.expire(15 * S);
    assert_eq!(ex.sessions, 0);
    assert_eq!(tcp(&n, 15 * S), [(6666, Some(TcpState::Established), 96_000)]);
    // refresh() learns too.
    fwd(&n, &tcp6(SYN, 7777), 20 * S);
    h.carried.lock().unwrap().insert(7777, 21 * S);
    let f = SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() };
    let s = n.sessions(&f, 21 * S).into_iter().find(|s| s.ipv6_src.port() == 7777).unwrap();
    assert!(n.refresh(&s, 22 * S));
    let got: Vec<_> = tcp(&n, 22 * S).into_iter().filter(|s| s.0 == 7777).collect();
    assert_eq!(got, [(7777, Some(TcpState::Established), 100_000)], "learnt at 21 s, used at 22 s");
}

#[test]
fn refresh_through_the_close() {
    let n = nat(short());
    let t = be16(&fwd(&n, &tcp6(SYN, 5555), 0), 20);
    fwd(&n, &tcp4(SYN | ACK, t), 0);
    fwd(&n, &tcp6(FIN | ACK, 5555), 0);
    let f = SessionFilter { protocol: Some(Protocol::Tcp), ..Default::default() };
    let s = n.sessions(&f, 0).remove(0);
    assert_eq!(s.state, Some(TcpState::V6FinRcv));
    assert!(n.refresh(&s, 50 * S));
    assert_eq!(tcp(&n, 50 * S), [(5555, Some(TcpState::V6FinRcv), 100_000)], "FIN RCV: the established lifetime");
    fwd(&n, &tcp4(FIN | ACK, t), 60 * S);
    let s = n.sessions(&f, 60 * S).remove(0);
    assert!(n.refresh(&s, 62 * S));
    assert_eq!(
        tcp(&n, 62 * S),
        [(5555, Some(TcpState::V4FinV6FinRcv), 2_000)],
        "V4 FIN + V6 FIN RCV: the transitory lifetime from the second FIN, whatever follows"
    );
}

// ---- NAT-PT sessions created by the fast path (Nat64::adopt) ----

fn natpt() -> nat64::Config {
    let mut c = short();
    c.mode = nat64::Mode::Natpt;
    c.pool4 = vec![nat64::Pool4Entry {
        // One address: the twin binds the host to the same one.
        prefix: "192.0.2.1/32".parse().unwrap(),
        ports: (1, 65535),
        protocols: Protocol::ALL.to_vec(),
    }];
    c
}

/// A fast path that created the sessions in `made` (handed over at the
/// next `created` call) and records the host bindings and held flag.
#[derive(Debug, Default)]
struct PtHook {
    made: Mutex<Vec<nat64::Created>>,
    refused: Mutex<Vec<nat64::Created>>,
    hosts: Mutex<HashMap<std::net::Ipv6Addr, std::net::Ipv4Addr>>,
    held: Mutex<Vec<bool>>,
}

impl FastHook for PtHook {
    fn mirror(&self, _: &SessionInfo, _: bool) {}
    fn syn_ack(&self, _: &SessionInfo) -> Option<u64> {
        None
    }
    fn host(&self, x: std::net::Ipv6Addr, t: Option<std::net::Ipv4Addr>) {
        let mut h = self.hosts.lock().unwrap();
        match t {
            Some(t) => h.insert(x, t),
            None => h.remove(&x),
        };
    }
    fn held(&self, present: bool) {
        self.held.lock().unwrap().push(present);
    }
    fn created(&self, adopt: &mut dyn FnMut(&nat64::Created) -> bool) {
        let made = std::mem::take(&mut *self.made.lock().unwrap());
        for c in made {
            if !adopt(&c) {
                self.refused.lock().unwrap().push(c);
            }
        }
    }
}

fn created(sport: u16, t: &str, at: u64) -> nat64::Created {
    nat64::Created {
        protocol: Protocol::Tcp,
        x: std::net::SocketAddrV6::new(a6(H1), sport, 0, 0),
        y: std::net::SocketAddrV4::new(a4(Y4), 80),
        t: a4(t),
        port: sport,
        fin: None,
        at,
    }
}

/// Everything a listing shows of a translator: sessions (with lifetimes),
/// BIB entries, the counters of sessions and hosts.
fn table(n: &Nat64, now: u64) -> String {
    let st = n.stats();
    format!(
        "{:?}\n{:?}\nsessions {:?} bib {:?} hosts {} created {:?} used {}",
        n.sessions(&SessionFilter::default(), now),
        n.bib(),
        st.sessions,
        st.bib,
        st.natpt_hosts,
        st.sessions_created,
        st.pool4_addresses,
    )
}

#[test]
fn natpt_created_session_adopted_as_its_syn() {
    let (twin, _) = hooked(natpt());
    let n = nat(natpt());
    let h = Arc::new(PtHook::default());
    n.set_fast_hook(Some(h.clone()));
    // Host H1 gets its address from a first session (UDP), told to the hook.
    fwd(&twin, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 0);
    fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 0);
    let t = *h.hosts.lock().unwrap().get(&a6(H1)).expect("binding told to the hook");
    // The twin sees the SYN at 1 s; the fast path created it at 1 s and
    // the translator takes it over with its next packet (at 3 s).
    let out = fwd(&twin, &tcp6(SYN, 5555), S);
    assert_eq!(v4src(&out), t, "the twin translated to the binding's address");
    h.made.lock().unwrap().push(created(5555, &t.to_string(), S));
    fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q2"), 3 * S);
    fwd(&twin, &V6::new(17, H1, Y6).udp(40000, 53, b"q2"), 3 * S);
    assert!(h.refused.lock().unwrap().is_empty());
    assert_eq!(table(&n, 3 * S), table(&twin, 3 * S), "adopted as the SYN would have entered it");
    assert_eq!(tcp(&n, 3 * S), [(5555, Some(TcpState::V6Init), 2_000)], "transitory lifetime from creation");
    // Its answer and the rest of the handshake then go as on the twin.
    let synack = V4::new(6, Y4, &t.to_string()).tcp(80, 5555, SYN | ACK, b"");
    for (pkt, at) in [(synack, 4 * S), (tcp6(ACK, 5555), 4 * S)] {
        assert_eq!(fwd(&n, &pkt, at), fwd(&twin, &pkt, at));
    }
    assert_eq!(table(&n, 5 * S), table(&twin, 5 * S));
    // Handed over again (a duplicate): the session stays as it is.
    h.made.lock().unwrap().push(created(5555, &t.to_string(), 5 * S));
    n.expire(5 * S);
    twin.expire(5 * S);
    assert!(h.refused.lock().unwrap().is_empty());
    assert_eq!(table(&n, 5 * S), table(&twin, 5 * S), "an existing session is left as it is");
}

#[test]
fn natpt_adoption_claims_the_address_again_or_refuses() {
    let n = nat(natpt());
    let h = Arc::new(PtHook::default());
    n.set_fast_hook(Some(h.clone()));
    // The host's only session expired before the event was drained: its
    // address went back to the pool (the hook was told) and is free.
    fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 0);
    let t = *h.hosts.lock().unwrap().get(&a6(H1)).unwrap();
    n.expire(1_000 * S);
    assert!(h.hosts.lock().unwrap().is_empty(), "address given back, told");
    h.made.lock().unwrap().push(created(6000, &t.to_string(), 1_000 * S));
    n.expire(1_000 * S);
    assert!(h.refused.lock().unwrap().is_empty(), "claimed again");
    assert_eq!(h.hosts.lock().unwrap().get(&a6(H1)), Some(&t), "binding mirrored again");
    assert_eq!(n.stats().natpt_hosts, 1);
    assert_eq!(tcp(&n, 1_000 * S), [(6000, Some(TcpState::V6Init), 4_000)]);
    // Another host's event for an address held by H1: refused, nothing made.
    let other =
        nat64::Created { x: std::net::SocketAddrV6::new(a6(H2), 7000, 0, 0), ..created(7000, &t.to_string(), 0) };
    h.made.lock().unwrap().push(other);
    n.expire(1_000 * S);
    assert_eq!(h.refused.lock().unwrap().as_slice(), [other]);
    assert_eq!(n.stats().natpt_hosts, 1);
    assert_eq!(n.sessions(&SessionFilter::default(), 1_000 * S).len(), 1);
}

#[test]
fn natpt_adoption_refused_at_the_table_limit() {
    let mut c = natpt();
    c.max_sessions = 1;
    let n = nat(c);
    let h = Arc::new(PtHook::default());
    n.set_fast_hook(Some(h.clone()));
    fwd(&n, &tcp6(SYN, 5555), 0);
    let t = h.hosts.lock().unwrap()[&a6(H1)];
    let e = created(5556, &t.to_string(), 0);
    h.made.lock().unwrap().push(e);
    n.expire(0);
    assert_eq!(h.refused.lock().unwrap().as_slice(), [e], "over max-sessions: the fast path removes it");
    assert_eq!(n.sessions(&SessionFilter::default(), 0).len(), 1);
    assert!(n.stats().refused.values().sum::<u64>() == 1, "{:?}", n.stats().refused);
}

#[test]
fn natpt_held_syns_told() {
    let n = nat(natpt());
    let h = Arc::new(PtHook::default());
    n.set_fast_hook(Some(h.clone()));
    fwd(&n, &tcp6(SYN, 5555), 0);
    let t = h.hosts.lock().unwrap()[&a6(H1)];
    // An unsolicited IPv4 SYN to the host's address is held; it expires.
    let syn4 = V4::new(6, Y4B, &t.to_string()).tcp(80, 9999, SYN, b"");
    let _ = run(&n, &syn4, 0);
    assert_eq!(h.held.lock().unwrap().as_slice(), [true]);
    n.expire(10 * S);
    assert_eq!(h.held.lock().unwrap().as_slice(), [true, false]);
}

/// NAT64 (NAPT): a fast path sharing port blocks (heap memory), creating
/// the sessions in `made`, recording the TCP BIB entries it is told.
#[derive(Debug)]
struct BlockHook {
    mem: Arc<nat64::HeapBlocks>,
    made: Mutex<Vec<nat64::Created>>,
    refused: Mutex<Vec<nat64::Created>>,
    bibs: Mutex<HashMap<std::net::SocketAddrV6, std::net::SocketAddrV4>>,
}

impl FastHook for BlockHook {
    fn mirror(&self, _: &SessionInfo, _: bool) {}
    fn syn_ack(&self, _: &SessionInfo) -> Option<u64> {
        None
    }
    fn created(&self, adopt: &mut dyn FnMut(&nat64::Created) -> bool) {
        let made = std::mem::take(&mut *self.made.lock().unwrap());
        for c in made {
            if !adopt(&c) {
                self.refused.lock().unwrap().push(c);
            }
        }
    }
    fn port_blocks(&self) -> Option<Arc<dyn nat64::PortBlockMem>> {
        Some(self.mem.clone())
    }
    fn bib(&self, x: std::net::SocketAddrV6, t: Option<std::net::SocketAddrV4>) {
        let mut b = self.bibs.lock().unwrap();
        match t {
            Some(t) => b.insert(x, t),
            None => b.remove(&x),
        };
    }
}

/// A NAPT translator whose pool4 is one address with TCP ports `ports`,
/// with blocks of `size` ports.
fn blocked(ports: (u16, u16), size: u16, c: nat64::Config) -> (Nat64, Arc<BlockHook>) {
    let mut c = c;
    c.pool4 =
        vec![nat64::Pool4Entry { prefix: "192.0.2.1/32".parse().unwrap(), ports, protocols: Protocol::ALL.to_vec() }];
    let n = nat(c);
    let h = Arc::new(BlockHook {
        mem: Arc::new(nat64::HeapBlocks::new(size, 16)),
        made: Mutex::default(),
        refused: Mutex::default(),
        bibs: Mutex::default(),
    });
    n.set_fast_hook(Some(h.clone()));
    (n, h)
}

fn sport4(p: &[u8]) -> u16 {
    be16(p, 20)
}

/// A translator with blocks and its twin on a pool of one block (`ports`,
/// blocks of `size`: both grant the same), after H1:5000's SYN on both
/// (the port it took, the same on both).
fn block_twins(ports: (u16, u16), size: u16) -> (Nat64, Arc<BlockHook>, Nat64, u16) {
    let (n, h) = blocked(ports, size, short());
    let (twin, _) = blocked(ports, size, short());
    let t = sport4(&fwd(&n, &tcp6(SYN, 5000), 0));
    assert_eq!(sport4(&fwd(&twin, &tcp6(SYN, 5000), 0)), t);
    (n, h, twin, t)
}

#[test]
fn napt_blocks_granted_taken_given_back_and_retired() {
    let (n, h) = blocked((1000, 65535), 4, short());
    let mut ports = Vec::new();
    for i in 0..4 {
        ports.push(sport4(&fwd(&n, &tcp6(SYN, 5000 + i), 0)));
    }
    let b = n.blocks_of(&a6(H1));
    assert_eq!(b.len(), 1, "one block of 4 for 4 sessions");
    let (addr, base, used) = b[0];
    assert_eq!((addr, used), (a4(T4), 4));
    assert!(base >= 1024 && base % 4 == 0, "aligned, above the well-known ports: {base}");
    ports.sort();
    assert_eq!(ports, (base..base + 4).collect::<Vec<_>>());
    assert_eq!(h.mem.listed(&a6(H1)).len(), 1, "listed for the fast path");
    assert_eq!(h.bibs.lock().unwrap().len(), 4, "each TCP BIB entry told");
    // A second block when the first is full; at most MAX_BLOCKS_PER_HOST.
    let mut extra = Vec::new();
    for i in 4..(4 * nat64::MAX_BLOCKS_PER_HOST as u16 + 1) {
        extra.push(sport4(&fwd(&n, &tcp6(SYN, 5000 + i), 0)));
    }
    let blocks = n.blocks_of(&a6(H1));
    assert_eq!(blocks.len(), nat64::MAX_BLOCKS_PER_HOST);
    let last = *extra.last().unwrap();
    assert!(!blocks.iter().any(|(_, b, _)| (*b..*b + 4).contains(&last)), "beyond the blocks: a pool port");
    let held = 4 * nat64::MAX_BLOCKS_PER_HOST as u64;
    assert_eq!(n.stats().pool4_ports_used["tcp"], held + 1, "every block port claimed in the pool, plus the pool port");
    // A low source port keeps its range class: never a block port.
    let low = sport4(&fwd(&n, &tcp6(SYN, 800), 0));
    assert!(low < 1024, "{low}");
    // All sessions expire: the ports go back, the host's blocks are
    // unlisted at once and given back to the pool one turn later.
    n.expire(10_000 * S);
    assert!(h.mem.listed(&a6(H1)).is_empty());
    assert!(h.bibs.lock().unwrap().is_empty(), "each BIB entry's end told");
    assert_eq!(n.stats().pool4_ports_used["tcp"], held, "retired blocks still held");
    n.expire(10_001 * S);
    assert_eq!(n.stats().pool4_ports_used["tcp"], 0);
    let st = n.port_blocks();
    assert_eq!((st.size, st.held, st.granted, st.returned), (4, 0, 8, 8));
}

#[test]
fn napt_created_session_adopted_as_its_syn() {
    // One block of two ports: the second port is the only choice of both.
    let (n, h, twin, a) = block_twins((1024, 1025), 2);
    // The fast path takes the other port for 5001's SYN at 1 s.
    let slot = h.mem.listed(&a6(H1))[0];
    let i = nat64::PortBlockMem::take(&*h.mem, slot, 2, 0).expect("a free port");
    let port = 1024 + i;
    assert_ne!(port, a);
    h.made.lock().unwrap().push(nat64::Created { port, ..created(5001, T4, S) });
    let out = fwd(&twin, &tcp6(SYN, 5001), S);
    assert_eq!(sport4(&out), port, "the twin's SYN took the same port");
    fwd(&n, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 3 * S);
    fwd(&twin, &V6::new(17, H1, Y6).udp(40000, 53, b"q"), 3 * S);
    assert!(h.refused.lock().unwrap().is_empty());
    assert_eq!(table(&n, 3 * S), table(&twin, 3 * S), "adopted as the SYN would have entered it");
    assert_eq!(h.bibs.lock().unwrap().len(), 1, "the fast path's own BIB entry is not told back");
    let synack = V4::new(6, Y4, T4).tcp(80, port, SYN | ACK, b"");
    for (pkt, at) in [(synack, 4 * S), (tcp6(ACK, 5001), 4 * S), (tcp6(FIN | ACK, 5001), 5 * S)] {
        assert_eq!(fwd(&n, &pkt, at), fwd(&twin, &pkt, at));
    }
    assert_eq!(table(&n, 5 * S), table(&twin, 5 * S));
    // Expiry gives the block port back to the bitmap.
    n.expire(10_000 * S);
    assert_eq!(nat64::PortBlockMem::in_use(&*h.mem, slot), 0);
}

#[test]
fn napt_conflict_keeps_the_translators_mapping() {
    let (n, h) = blocked((1024, 1031), 4, short());
    let a = sport4(&fwd(&n, &tcp6(SYN, 5000), 0));
    let slot = h.mem.listed(&a6(H1))[0];
    let i = nat64::PortBlockMem::take(&*h.mem, slot, 4, 3).unwrap();
    let before = nat64::PortBlockMem::in_use(&*h.mem, slot);
    // The fast path made another mapping of 5000 (towards Y4B) meanwhile.
    let c = nat64::Created {
        y: std::net::SocketAddrV4::new(a4(Y4B), 80),
        port: n.blocks_of(&a6(H1))[0].1 + i,
        ..created(5000, T4, S)
    };
    h.made.lock().unwrap().push(c);
    n.expire(S);
    assert_eq!(h.refused.lock().unwrap().as_slice(), [c]);
    assert_eq!(nat64::PortBlockMem::in_use(&*h.mem, slot), before - 1, "its port given back");
    let x = std::net::SocketAddrV6::new(a6(H1), 5000, 0, 0);
    assert_eq!(h.bibs.lock().unwrap().get(&x).map(|t| t.port()), Some(a), "the mapping in force told");
    assert_eq!(n.port_blocks().conflicts, 1);
    // EIM: the slow path's next SYN from 5000 to Y4B uses the same mapping.
    let out = fwd(&n, &V6::new(6, H1, Y6B).tcp(5000, 80, SYN, b""), 2 * S);
    assert_eq!(sport4(&out), a);
}

#[test]
fn napt_adoption_refused_at_the_limit_gives_the_port_back() {
    let mut c = short();
    c.max_sessions = 1;
    let (n, h) = blocked((1024, 1031), 4, c);
    fwd(&n, &tcp6(SYN, 5000), 0);
    let slot = h.mem.listed(&a6(H1))[0];
    let i = nat64::PortBlockMem::take(&*h.mem, slot, 4, 2).unwrap();
    let c = nat64::Created { port: n.blocks_of(&a6(H1))[0].1 + i, ..created(5001, T4, S) };
    h.made.lock().unwrap().push(c);
    n.expire(S);
    assert_eq!(h.refused.lock().unwrap().as_slice(), [c]);
    assert_eq!(nat64::PortBlockMem::in_use(&*h.mem, slot), 1);
    assert_eq!(n.stats().bib["tcp"], 1, "its BIB entry undone");
    assert_eq!(h.bibs.lock().unwrap().len(), 1, "and told gone");
}

#[test]
fn carried_fins_step_the_session_as_on_a_twin() {
    let (n, h, twin, t) = block_twins((1024, 1027), 4);
    for (pkt, at) in [(tcp4(SYN | ACK, t), S), (tcp6(ACK, 5000), S)] {
        assert_eq!(fwd(&n, &pkt, at), fwd(&twin, &pkt, at));
    }
    // The fast path carried the IPv4 side's FIN at 2 s, the IPv6 side's
    // at 5 s; each told before the next packet or expiry turn.
    let fin = |side, at| nat64::Created { port: t, fin: Some(side), ..created(5000, T4, at) };
    h.made.lock().unwrap().push(fin(nat64::tcp::Side::V4, 2 * S));
    fwd(&twin, &tcp4(FIN | ACK, t), 2 * S);
    n.expire(3 * S);
    twin.expire(3 * S);
    assert_eq!(tcp(&n, 3 * S), tcp(&twin, 3 * S));
    assert_eq!(tcp(&n, 3 * S)[0].1, Some(TcpState::V4FinRcv));
    h.made.lock().unwrap().push(fin(nat64::tcp::Side::V6, 5 * S));
    fwd(&twin, &tcp6(FIN | ACK, 5000), 5 * S);
    n.expire(6 * S);
    twin.expire(6 * S);
    assert_eq!(tcp(&n, 6 * S), [(5000, Some(TcpState::V4FinV6FinRcv), 3_000)], "transitory from the FIN's time");
    assert_eq!(table(&n, 6 * S), table(&twin, 6 * S));
    assert!(h.refused.lock().unwrap().is_empty());
    // A FIN of a session gone meanwhile: refused (its entries go).
    let gone = nat64::Created { port: t, fin: Some(nat64::tcp::Side::V6), ..created(5999, T4, 6 * S) };
    h.made.lock().unwrap().push(gone);
    n.expire(6 * S);
    assert_eq!(h.refused.lock().unwrap().as_slice(), [gone]);
}
