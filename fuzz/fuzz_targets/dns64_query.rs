//! Entry point: the DNS64 core (RFC 6147) with arbitrary bytes as the
//! client's query and as the upstream replies. Layout: byte 0 picks the
//! prefix length and transport; then length-prefixed chunks (u16 big
//! endian): the client query, then one upstream reply per lookup (a
//! missing chunk is a timeout). Every outcome is a reply or a counted
//! drop, never a panic, and no query takes more than two lookups.
#![no_main]

use std::sync::Arc;

use dns64::{Action, Config, Core, Upstream};
use libfuzzer_sys::fuzz_target;

const PREFIXES: [&str; 6] = [
    "2001:db8::/32",
    "2001:db8:100::/40",
    "2001:db8:122::/48",
    "2001:db8:122:300::/56",
    "2001:db8:122:344::/64",
    "64:ff9b::/96",
];

fn chunks(mut d: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if d.len() < 2 {
            return None;
        }
        let n = usize::from(u16::from_be_bytes([d[0], d[1]])).min(d.len() - 2);
        let (c, rest) = d[2..].split_at(n);
        d = rest;
        Some(c)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let cfg = Config { prefix: PREFIXES[usize::from(sel) % 6].into(), ..Config::default() };
    let core = Core::new(&cfg, Arc::default()).expect("valid configuration");
    let tcp = sel & 0x80 != 0;
    let mut parts = chunks(rest);
    let Some(query) = parts.next() else { return };
    let mut action = core.query("::1".parse().unwrap(), query, tcp);
    let mut lookups = 0;
    loop {
        match action {
            Action::Reply(b) => {
                assert!(b.len() >= 12, "a reply has a header");
                assert!(b[2] & 0x80 != 0, "a reply is a response");
                if query.len() >= 2 {
                    assert_eq!(b[..2], query[..2], "a reply keeps the query's ID");
                }
                if !tcp {
                    assert!(b.len() <= dns64::core::MAX_UDP_ANSWER);
                }
                break;
            }
            Action::Drop => break,
            Action::Lookup(task) => {
                lookups += 1;
                assert!(lookups <= 2, "at most two lookups per query");
                let _ = task.lookup().to_bytes(1);
                let outcome = match parts.next() {
                    Some(r) => Upstream::Reply(r.to_vec()),
                    None => Upstream::Timeout,
                };
                action = core.upstream(task, outcome);
            }
        }
    }
    let _ = core.counters().snapshot();
});
