//! Entry points: the lw4o6 binding file, the DSTM lease protocol (decode,
//! and the server answering arbitrary datagrams), the [dslite]/[lw4o6]/
//! [b4] and [trt] configuration tables, and the port-set arithmetic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softwire::binding::BindingTable;
use softwire::lease::{self, LeaseConfig, LeaseServer};
use std::net::Ipv6Addr;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(t) = BindingTable::parse(&text, 6) {
        for b in t.iter() {
            assert_eq!(t.lookup6(&b.b4), Some(b));
        }
    }
    if let Some((m, xid)) = lease::decode(data) {
        assert_eq!(lease::decode(&lease::encode(m, xid)), Some((m, xid)));
    }
    let mut s = LeaseServer::new(LeaseConfig {
        lease_secs: 60,
        max_requests_per_sec: 1000,
        ..LeaseConfig::new(vec!["192.0.2.0/29".parse().unwrap()], Ipv6Addr::LOCALHOST)
    });
    for (i, chunk) in data.chunks(16).enumerate() {
        let from = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16);
        let _ = s.handle(from, chunk, i as u64 * 100);
        let _ = s.handle(from, &lease::encode(lease::Msg::Request, i as u32), i as u64 * 100);
    }
    assert!(s.len() + s.free() <= 6);
    let _ = softwire::config::SoftwireConfig::parse(&text);
    let _ = trt::config::TrtConfig::parse(&text);
    if data.len() >= 4 {
        if let Ok(m) = softwire::portset::PsidMap::new(data[0] % 17, data[1] % 17) {
            let port = u16::from_be_bytes([data[2], data[3]]);
            let psid = m.psid(port);
            if m.allowed(port, psid) {
                assert!(m.ranges(psid).any(|(lo, hi)| lo <= port && port <= hi));
            }
        }
    }
});
