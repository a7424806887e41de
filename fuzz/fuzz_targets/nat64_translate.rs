//! Entry point: `nat64::Nat64::translate` on arbitrary packet sequences
//! with a fake clock. Input: records of [time step (1 byte, ×100 ms)]
//! [length (2 bytes, big endian)] [packet]. Two small translators (NAT64
//! with address-dependent filtering and a 16-port pool, NAT-PT with two
//! addresses) see every record; `expire` runs as the clock moves.
//! Invariants: Emit means packets with consistent IP lengths, Drop means
//! none; the tables never exceed their limits; the pool4 ports in use
//! never exceed the BIB entries holding them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nat64::{Config, Nat64};
use xlat::{Out, Verdict};

fn translators() -> [Nat64; 2] {
    let a: Config = toml::from_str(
        r#"
        pool6 = "2001:db8:64::/96"
        pool4 = [{ prefix = "192.0.2.1/32", ports = "2000-2015" }]
        address-dependent-filtering = true
        udp-timeout = 2
        icmp-timeout = 1
        tcp-est-timeout = 3
        tcp-trans-timeout = 2
        tcp-incoming-syn-timeout = 1
        max-sessions = 8
        max-bib = 6
        max-stored-pkts = 2
        max-fragment-sets = 2
        max-fragment-bytes = 3000
        shards = 2
        [[bib]]
        protocol = "udp"
        ipv6 = "[2001:db8::10]:53"
        ipv4 = "192.0.2.1:2015"
        "#,
    )
    .unwrap();
    let mut b = a.clone();
    b.mode = nat64::Mode::Natpt;
    b.bib.clear();
    b.pool4 = vec![toml::from_str::<Wrap>("p = \"192.0.2.0/31\"").unwrap().p];
    [Nat64::new(a).unwrap(), Nat64::new(b).unwrap()]
}

#[derive(serde::Deserialize)]
struct Wrap {
    p: nat64::Pool4Entry,
}

fuzz_target!(|data: &[u8]| {
    let nats = translators();
    let mut out = Out::new();
    let mut now = 0u64;
    let mut at = 0;
    while at + 3 <= data.len() {
        now += u64::from(data[at]) * 100_000_000;
        let len = usize::from(u16::from_be_bytes([data[at + 1], data[at + 2]]));
        let pkt = &data[at + 3..(at + 3 + len).min(data.len())];
        at += 3 + len;
        for n in &nats {
            if data[at.saturating_sub(1).min(data.len() - 1)] & 1 == 0 {
                let _ = n.expire(now);
            }
            match n.translate(pkt, now, &mut out) {
                Verdict::Emit => {
                    assert!(!out.is_empty());
                    for (_, p) in out.iter() {
                        match p[0] >> 4 {
                            4 => assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len()),
                            6 => assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])) + 40, p.len()),
                            v => panic!("emitted version {v}"),
                        }
                    }
                }
                Verdict::Drop(_) => assert!(out.is_empty()),
            }
            let s = n.stats();
            assert!(s.sessions.values().sum::<u64>() <= 8);
            assert!(s.bib.values().sum::<u64>() <= 6);
            assert!(s.pool4_ports_used.values().sum::<u64>() <= s.bib.values().sum::<u64>());
        }
    }
    for n in &nats {
        // Established-like TCP sessions go to TRANS first, then expire.
        let _ = n.expire(now + 1_000_000_000_000);
        let _ = n.expire(now + 2_000_000_000_000);
        let s = n.stats();
        assert_eq!(s.sessions.values().sum::<u64>(), 0);
        assert_eq!(s.natpt_hosts, 0);
    }
});
