//! Entry point: the route netlink dump parsers the XDP route mirror reads
//! (links, routes, neighbours, policy rules: `netsys::netlink::parse_*`).
//! Any bytes get a value or None — never a panic, never a read past the
//! message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netsys::netlink::{parse_link, parse_neighbour, parse_route, parse_rule};

fuzz_target!(|data: &[u8]| {
    if let Some(r) = parse_route(data) {
        // A prefix of the family the header names, host bits cleared.
        assert!(r.dst.len() <= 128);
        assert!(r.dst.contains(r.dst.addr()));
    }
    let _ = parse_neighbour(data);
    let _ = parse_link(data);
    let _ = parse_rule(data);
});
