//! Entry points: the softwire engines (DS-Lite AFTR, lwAFTR with a DSTM
//! lease, B4 and a host-integrated lwB4) fed arbitrary packets, raw and as the inner packet
//! of a well-formed softwire, with a clock that moves; and the RFC 2473 §8
//! ICMPv6 relay. Nothing may panic, and every emitted tunnel packet must
//! decapsulate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softwire::aftr::{Aftr, AftrConfig};
use softwire::b4::{B4Config, HostPorts, Napt, B4};
use softwire::binding::{Binding, BindingTable};
use softwire::endpoint::EndpointConfig;
use softwire::lwaftr::{Lwaftr, LwaftrConfig};
use softwire::nat44::{Nat44Config, PoolPorts};
use softwire::portset::PsidMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;
use xlat::{Out, PacketKind};

struct Engines {
    aftr: Aftr,
    lw: Lwaftr,
    b4: B4,
    lwb4: B4,
}

const AFTR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
const B4A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);

fn engines() -> &'static Engines {
    static E: OnceLock<Engines> = OnceLock::new();
    E.get_or_init(|| {
        let ep = |l| EndpointConfig { mtu: 1280, ..EndpointConfig::new(l, Ipv4Addr::new(192, 0, 0, 1)) };
        let pool = PoolPorts::new(
            vec![nat64::Pool4Entry {
                prefix: "203.0.113.0/30".parse().unwrap(),
                ports: (1024, 1100),
                protocols: nat64::Protocol::ALL.to_vec(),
            }],
            16,
        );
        let nat = Nat44Config { max_mappings: 256, max_ports_per_subscriber: 8, log_mappings: false, ..Default::default() };
        let aftr = Aftr::new(
            AftrConfig {
                endpoint: ep(AFTR),
                b4_prefixes: vec!["2001:db8::/32".parse().unwrap()],
                nat,
                hairpinning: true,
                icmpv6_errors: true,
            },
            Box::new(pool),
        );
        let map = PsidMap::new(6, 6).unwrap();
        let mut t = BindingTable::new();
        t.insert(Binding { b4: B4A, ipv4: Ipv4Addr::new(192, 0, 2, 1), psid: 1, map }).unwrap();
        let lw = Lwaftr::new(LwaftrConfig { endpoint: ep(AFTR), hairpinning: true, icmpv4_errors: true, icmpv6_errors: true }, t);
        let mut leases = BindingTable::new();
        leases.insert(Binding { b4: Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 7), ipv4: Ipv4Addr::new(192, 0, 2, 77), psid: 0, map: PsidMap::FULL }).unwrap();
        lw.set_leases(leases);
        let b4 = B4::new(B4Config { endpoint: ep(B4A), aftr: AFTR, napt: None, nat, mss_clamp: true });
        let lwb4 = B4::new(B4Config {
            endpoint: ep(B4A),
            aftr: AFTR,
            // Host-integrated: the host holds A = 48..63 of the set.
            napt: Some(Napt {
                ipv4: Ipv4Addr::new(192, 0, 2, 1),
                map,
                psid: 1,
                host: Some(HostPorts { first: 48 * 1024 + 16, last: 63 * 1024 + 31 }),
            }),
            nat,
            mss_clamp: true,
        });
        Engines { aftr, lw, b4, lwb4 }
    })
}

fuzz_target!(|data: &[u8]| {
    let e = engines();
    let now = u64::from(data.first().copied().unwrap_or(0)) * 1_000_000_000;
    let mut out = Out::new();
    // Raw, and inside a well-formed softwire header from B4A to the AFTR.
    let mut sw = vec![0u8; 40];
    xlat::wire::ipv6::Ipv6Header {
        traffic_class: 0,
        flow_label: 0,
        payload_len: data.len().min(65535) as u16,
        next_header: 4,
        hop_limit: 64,
        src: B4A,
        dst: AFTR,
    }
    .emit(&mut sw);
    sw.extend_from_slice(&data[..data.len().min(65535)]);
    for p in [data, &sw[..]] {
        for (i, eng) in [0, 1, 2, 3].iter().enumerate() {
            let _ = match eng {
                0 => e.aftr.process(p, now, &mut out),
                1 => e.lw.process(p, now, &mut out),
                2 => e.b4.process(p, now, &mut out),
                _ => e.lwb4.process(p, now, &mut out),
            };
            for (k, pkt) in out.iter() {
                if k == PacketKind::Forward && pkt.first().map(|b| b >> 4) == Some(6) && pkt.get(6) == Some(&4) {
                    assert!(xlat::tunnel::ip4in6::decap(pkt).is_ok(), "engine {i} emitted a bad tunnel packet");
                }
            }
        }
    }
    let _ = xlat::tunnel::ip4in6_err::relay_error(data, Ipv4Addr::new(192, 0, 0, 1), 40, &mut out);
    e.aftr.expire(now);
    e.lwb4.expire(now);
});
