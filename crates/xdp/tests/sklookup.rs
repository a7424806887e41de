//! The TrGW's sk_lookup program (`bpf/sklookup.bpf.c`) in a fresh network
//! namespace: a UDP packet to a steered (address, port) that no socket is
//! bound to reaches the shared socket of the index it is steered to, per
//! family; unsteered ports, other addresses and removed ports are left to
//! the kernel's normal lookup; the counters say what happened; dropping
//! the handle detaches the program.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use lab::netns::Netns;
use xdp::sklookup::{SkCounts, SkLookup};

fn sock(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    s
}

/// The payload `to` gets if `from` sends it `msg`.
fn got(from: &UdpSocket, dst: SocketAddr, to: &UdpSocket, msg: &[u8]) -> Option<Vec<u8>> {
    from.send_to(msg, dst).unwrap();
    let mut buf = [0u8; 64];
    to.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec())
}

/// Runs `f` on a thread in a fresh namespace holding 192.0.2.1 and
/// 2001:db8::1 on its loopback (removed afterwards, also on a failure).
fn in_netns(name: &str, f: impl FnOnce() + Send + 'static) {
    let ns = Netns::unique(name).expect("namespace");
    ns.ip(&["addr", "add", "192.0.2.1/32", "dev", "lo"]).unwrap();
    ns.ip(&["addr", "add", "2001:db8::1/128", "dev", "lo", "nodad"]).unwrap();
    let ns = std::sync::Arc::new(ns);
    let ns2 = ns.clone();
    let r = std::thread::spawn(move || {
        ns2.enter_thread().unwrap();
        f();
    })
    .join();
    drop(ns);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn steers_allocated_ports_to_the_shared_sockets_and_nothing_else() {
    lab::need_root!();
    in_netns("sklk", || {
        let mut sk = SkLookup::attach(16, 4).unwrap_or_else(|e| panic!("{e}"));
        // Shared sockets on ephemeral ports, as the relay binds them.
        let (s4a, s4b, s6) = (sock("0.0.0.0:0"), sock("0.0.0.0:0"), sock("[::]:0"));
        sk.set_socket(0, &s4a).unwrap();
        sk.set_socket(2, &s4b).unwrap();
        sk.set_socket(1, &s6).unwrap();
        assert!(sk.set_socket(4, &s4a).is_err(), "index beyond the map");
        let c4 = sock("192.0.2.1:0");
        let c6 = sock("[2001:db8::1]:0");
        let (p4, p4b, p6): (SocketAddr, SocketAddr, SocketAddr) = (
            "192.0.2.1:30000".parse().unwrap(),
            "192.0.2.1:30001".parse().unwrap(),
            "[2001:db8::1]:30000".parse().unwrap(),
        );

        assert_eq!(got(&c4, p4, &s4a, b"before"), None, "nothing steered before insert");
        sk.insert(p4, 0).unwrap();
        sk.insert(p4b, 2).unwrap();
        sk.insert(p6, 1).unwrap();
        assert_eq!(sk.get(p4).unwrap(), Some(0));
        assert_eq!(got(&c4, p4, &s4a, b"rtp4").as_deref(), Some(&b"rtp4"[..]));
        assert_eq!(got(&c4, p4b, &s4b, b"rtcp4").as_deref(), Some(&b"rtcp4"[..]), "each port to its index");
        assert_eq!(got(&c6, p6, &s6, b"rtp6").as_deref(), Some(&b"rtp6"[..]));
        // Same port, other address; other port, same address: not steered.
        assert_eq!(got(&c4, "127.0.0.1:30000".parse().unwrap(), &s4a, b"x"), None);
        assert_eq!(got(&c4, "192.0.2.1:30002".parse().unwrap(), &s4a, b"x"), None);
        // A socket bound to a steered port loses to the steering (the
        // reason the media range should be reserved for the relay).
        let squatter = sock("192.0.2.1:30000");
        assert_eq!(got(&c4, p4, &s4a, b"steered first").as_deref(), Some(&b"steered first"[..]));
        drop(squatter);
        assert_eq!(sk.counters().unwrap(), SkCounts { steered: 4, no_socket: 0, assign_failed: 0 });

        // A steered port whose socket index is empty goes on to the normal
        // lookup and is counted.
        sk.insert("192.0.2.1:30004".parse().unwrap(), 3).unwrap();
        let bound = sock("192.0.2.1:30004");
        assert_eq!(got(&c4, "192.0.2.1:30004".parse().unwrap(), &bound, b"own").as_deref(), Some(&b"own"[..]));
        assert_eq!(sk.counters().unwrap().no_socket, 1);

        assert!(sk.remove(p4).unwrap());
        assert!(!sk.remove(p4).unwrap(), "already removed");
        assert_eq!(sk.get(p4).unwrap(), None);
        assert_eq!(got(&c4, p4, &s4a, b"after"), None, "not steered after remove");
        drop(sk);
        assert_eq!(got(&c6, p6, &s6, b"detached"), None, "detached with the handle");
    });
}

/// The batch calls agree with the one-by-one ones: many ports (more than
/// one batch, both families) inserted at once are each looked up at their
/// index and steered; a batch removal that names ports never steered skips
/// them, removes the rest and counts only those.
#[test]
fn batch_insert_and_remove_agree_with_lookups() {
    lab::need_root!();
    in_netns("sklkb", || {
        let mut sk = SkLookup::attach(128, 4).unwrap_or_else(|e| panic!("{e}"));
        let (s4, s6) = (sock("0.0.0.0:0"), sock("[::]:0"));
        sk.set_socket(2, &s4).unwrap();
        sk.set_socket(3, &s6).unwrap();
        let entries: Vec<(SocketAddr, u32)> = (0..40u16)
            .map(|i| {
                let a: SocketAddr = if i % 2 == 0 {
                    format!("192.0.2.1:{}", 31000 + i)
                } else {
                    format!("[2001:db8::1]:{}", 31000 + i)
                }
                .parse()
                .unwrap();
                (a, if a.is_ipv6() { 3 } else { 2 })
            })
            .collect();
        sk.insert_many(&entries).unwrap();
        for &(a, idx) in &entries {
            assert_eq!(sk.get(a).unwrap(), Some(idx), "{a} looked up at its index");
        }
        assert_eq!(sk.get("192.0.2.1:31040".parse().unwrap()).unwrap(), None, "one past the batch");
        let c4 = sock("192.0.2.1:0");
        let c6 = sock("[2001:db8::1]:0");
        assert_eq!(got(&c4, entries[38].0, &s4, b"b4").as_deref(), Some(&b"b4"[..]));
        assert_eq!(got(&c6, entries[39].0, &s6, b"b6").as_deref(), Some(&b"b6"[..]));
        // Re-inserting replaces: the same ports steered to another index.
        sk.insert_many(&[(entries[0].0, 0)]).unwrap();
        assert_eq!(sk.get(entries[0].0).unwrap(), Some(0));

        // Remove the first 30 plus three never steered, interleaved.
        let mut gone: Vec<SocketAddr> = entries[..30].iter().map(|e| e.0).collect();
        gone.insert(0, "192.0.2.1:9".parse().unwrap());
        gone.insert(17, "[2001:db8::1]:9".parse().unwrap());
        gone.push("192.0.2.1:10".parse().unwrap());
        assert_eq!(sk.remove_many(&gone).unwrap(), 30, "only the steered ports count");
        for (i, &(a, idx)) in entries.iter().enumerate() {
            let want = if i < 30 { None } else { Some(idx) };
            assert_eq!(sk.get(a).unwrap(), want, "{a} after the batch removal");
        }
        assert_eq!(got(&c4, entries[0].0, &s4, b"gone"), None, "not steered after remove_many");
        assert_eq!(sk.remove_many(&gone).unwrap(), 0, "nothing left to remove");
        assert_eq!(sk.remove_many(&[]).unwrap(), 0);
        sk.insert_many(&[]).unwrap();
    });
}
