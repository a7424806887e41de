//! The lab scenario in network namespaces: an IPv6-only client in its own
//! namespace asks the DNS64 in the gateway namespace, over a veth link,
//! for the AAAA of an IPv4-only name, and gets the synthesised address.

mod common;

use common::*;
use dns64::Server;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use lab::netns::{veth, Netns};

#[test]
fn ipv6_only_client_in_another_namespace() {
    lab::need_root!();
    let gw = Netns::unique("d64g").unwrap();
    let cl = Netns::unique("d64c").unwrap();
    veth(&gw, "d64gw", &cl, "d64cl").unwrap();
    gw.ip(&["link", "set", "lo", "up"]).unwrap();
    gw.ip(&["addr", "add", "2001:db8:64::1/64", "dev", "d64gw", "nodad"]).unwrap();
    cl.ip(&["addr", "add", "2001:db8:64::2/64", "dev", "d64cl", "nodad"]).unwrap();
    std::thread::scope(|s| {
        // Upstream and DNS64 live in the gateway namespace (threads they
        // spawn inherit it).
        let (up, srv) = s
            .spawn(|| {
                gw.enter_thread().unwrap();
                let up = Fake::start(Mode::Normal);
                let mut cfg = config(&[up.addr], 2000);
                cfg.listen = vec!["[2001:db8:64::1]:53".into()];
                cfg.allow = vec!["2001:db8:64::/64".into()];
                let srv = Server::start(&cfg).unwrap();
                (up, srv)
            })
            .join()
            .unwrap();
        let server = srv.local_addrs()[0];
        let cl = &cl;
        // Over UDP, then TCP (two pipelined queries), from the client namespace.
        let (over_udp, over_tcp) = s
            .spawn(move || {
                cl.enter_thread().unwrap();
                (udp(server, "v4only.test.", RecordType::AAAA), tcp(server, "v4only.test.", RecordType::AAAA))
            })
            .join()
            .unwrap();
        assert_eq!(over_udp.response_code(), ResponseCode::NoError);
        assert_eq!(aaaa_addrs(&over_udp), ["64:ff9b:1::c633:640a"]);
        assert_eq!(aaaa_addrs(&over_tcp), ["64:ff9b:1::c633:640a"]);
        let st = srv.stats();
        assert_eq!((st.synthesized, st.refused), (3, 0));
        srv.stop();
        drop(up);
    });
}
