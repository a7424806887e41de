//! Entry points: the tunnel cores (`tunnel` crate) fed a sequence of
//! hostile packets and clock ticks: the Teredo server, relay and client
//! (UDP and IPv6 side) and the 6to4 / 6rd cores (outer fragments included).
//! Nothing may panic, and the relay's and client's peer lists and the
//! reassembly buffers stay within their bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, SocketAddrV4};
use tunnel::proto41::{Kind, Mode, Proto41, Proto41Config};
use tunnel::teredo::client::{Client, ClientConfig};
use tunnel::teredo::relay::{Relay, RelayConfig};
use tunnel::teredo::server::{Server, ServerConfig};
use tunnel::teredo::Rng;
use tunnel::Outbox;
use xlat::tunnel::sixrd::SixrdDomain;

fuzz_target!(|data: &[u8]| {
    let mut server = Server::new(ServerConfig::new(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)));
    let mut relay = Relay::new(RelayConfig { max_peers: 4, ..RelayConfig::new("2001:db8::1".parse().unwrap()) });
    let mut client =
        Client::new(ClientConfig { max_peers: 4, ..ClientConfig::new(Ipv4Addr::new(192, 0, 2, 1), "192.168.1.2:5000".parse().unwrap()) }, Rng::new(1));
    let p41 = |kind, mode, domain| {
        Proto41::new(Proto41Config {
            kind,
            mode,
            domain,
            local_v4: Ipv4Addr::new(192, 0, 2, 9),
            relay: Some(Ipv4Addr::new(203, 0, 113, 1)),
            reject_private: kind == Kind::SixToFour,
            native_only_from_relay: false,
            outer: Default::default(),
        })
    };
    let rd = SixrdDomain::new("2001:db8::/32".parse().unwrap(), 0, Ipv4Addr::UNSPECIFIED).unwrap();
    let mut cores = [
        p41(Kind::SixToFour, Mode::Site, SixrdDomain::sixto4()),
        p41(Kind::SixToFour, Mode::Relay, SixrdDomain::sixto4()),
        p41(Kind::SixRd, Mode::Site, rd),
        p41(Kind::SixRd, Mode::Relay, rd),
    ];
    let mut ob = Outbox::new();
    client.start(0, &mut ob);
    let mut now = 0u64;
    // Records: [op, port_hi, port_lo, len, bytes...].
    let mut rest = data;
    while rest.len() >= 4 {
        let (op, port, len) = (rest[0], u16::from_be_bytes([rest[1], rest[2]]), usize::from(rest[3]));
        let body = &rest[4..(4 + len).min(rest.len())];
        rest = &rest[(4 + len).min(rest.len())..];
        let from = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, op), port);
        now += u64::from(op) * 37;
        ob.clear();
        match op % 8 {
            0 => server.on_udp(op & 1, from, body, now, &mut ob),
            1 => relay.on_udp(from, body, now, &mut ob),
            2 => relay.on_v6(body, now, &mut ob),
            3 => client.on_udp(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1 + (op & 1)), 3544), body, now, &mut ob),
            4 => client.on_udp(from, body, now, &mut ob),
            5 => client.on_v6(body, now, &mut ob),
            6 => cores[usize::from(op >> 3) % 4].from_v4(body, now, &mut ob),
            _ => cores[usize::from(op >> 3) % 4].from_v6(body, &mut ob),
        }
        client.tick(now, &mut ob);
        relay.tick(now);
        server.tick(now);
        for c in &mut cores {
            c.tick(now);
            assert!(c.fragment_sets() <= tunnel::proto41::FRAGMENT_SETS);
        }
        assert!(relay.peers() <= 4);
        assert!(client.peers() <= 4);
    }
});
