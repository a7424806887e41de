//! The SIP message layer choice, measured (docs/alg.md): what a proxy does
//! to an INVITE — parse, read the headers it needs (top Via branch, From
//! and To tags, CSeq, Call-ID, Max-Forwards), add a Via, decrement
//! Max-Forwards, add Record-Route, write the message again — with this
//! crate's views and with ezk-sip-types (maintained, typed, nom-based).
//! Plus the whole core per call: INVITE (SDP offer) → 200 (answer) → ACK
//! → BYE → 200 through `Alg` with the TrGW core, timers run out.
//!
//! `cargo bench -p alg --bench sip`

use std::time::{Duration, Instant};

use alg::emit::Builder;
use alg::msg::{Message, Name};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

const INVITE: &str = "INVITE sip:bob@192.0.2.50:5060 SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8:6::10]:5060;branch=z9hG4bK776asdhds;rport\r\nMax-Forwards: 70\r\nTo: Bob <sip:bob@biloxi.example.com>\r\nFrom: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\nCall-ID: a84b4c76e66710@pc33.atlanta.example.com\r\nCSeq: 314159 INVITE\r\nContact: <sip:alice@[2001:db8:6::10]:5060>\r\nAllow: INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE\r\nSupported: timer, 100rel\r\nUser-Agent: bench\r\nContent-Type: application/sdp\r\nContent-Length: 179\r\n\r\nv=0\r\no=alice 2890844526 2890844526 IN IP6 2001:db8:6::10\r\ns=-\r\nc=IN IP6 2001:db8:6::10\r\nt=0 0\r\nm=audio 49170 RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n";

fn ours(data: &[u8]) -> Vec<u8> {
    let m = Message::parse_datagram(data).unwrap();
    m.validate().unwrap();
    let via = m.top_via().unwrap();
    let branch = via.branch().unwrap();
    let (ft, tt) = (m.from_tag(), m.to_tag());
    let cseq = m.cseq().unwrap();
    let mf = m.max_forwards().unwrap_or(70);
    black_box((branch, ft, tt, cseq, m.call_id()));
    let mut b = Builder::new("INVITE sip:bob@192.0.2.50:5060 SIP/2.0", data.len() + 200);
    b.header("Via", "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-v6g1-abc");
    b.header("Record-Route", "<sip:192.0.2.1:5060;lr;r2=on>, <sip:[2001:db8::1]:5060;lr;r2=on>");
    for h in &m.headers {
        match h.name {
            Name::MaxForwards | Name::ContentLength => {}
            _ => b.raw(h),
        }
    }
    b.header("Max-Forwards", &(mf - 1).to_string());
    b.finish(m.body)
}

fn ezk(data: &[u8]) -> Vec<u8> {
    use bytes::Bytes;
    use ezk_sip_types::header::typed::{CSeq, CallID, FromTo, MaxForwards, Via};
    use ezk_sip_types::msg::{Line, MessageLine, PullParser};
    use ezk_sip_types::parse::Parse;
    use ezk_sip_types::print::AppendCtx;
    use ezk_sip_types::{Headers, Name as N};
    let src = Bytes::copy_from_slice(data);
    let mut p = PullParser::new(&src, 0);
    let first = p.next().unwrap().unwrap();
    let (_, line) = MessageLine::parse(&src)(std::str::from_utf8(first).unwrap()).unwrap();
    let mut headers = Headers::new();
    for l in &mut p {
        let l = l.unwrap();
        let (_, Line { name, value }) = Line::parse(&src, std::str::from_utf8(l).unwrap()).unwrap();
        headers.insert(name, value);
    }
    let body = src.slice(p.head_end()..);
    let via: Via = headers.get_named().unwrap();
    let from: FromTo = headers.get(N::FROM).unwrap();
    let to: FromTo = headers.get(N::TO).unwrap();
    let cseq: CSeq = headers.get_named().unwrap();
    let cid: CallID = headers.get_named().unwrap();
    let mf: MaxForwards = headers.get_named().unwrap();
    black_box((&via, &from.tag, &to.tag, &cseq, &cid));
    let new_via =
        Via::new("UDP", "192.0.2.1:5060".parse::<ezk_sip_types::host::HostPort>().unwrap(), "z9hG4bK-v6g1-abc");
    headers.insert_named_front(&new_via);
    headers.remove(&N::MAX_FORWARDS);
    headers.insert_named(&MaxForwards(mf.0 - 1));
    headers.insert(N::RECORD_ROUTE, "<sip:192.0.2.1:5060;lr;r2=on>, <sip:[2001:db8::1]:5060;lr;r2=on>");
    let mut out = format!("{}\r\n{}\r\n", line.default_print_ctx(), headers).into_bytes();
    out.extend_from_slice(&body);
    out
}

fn call_cycle(c: &mut Criterion) {
    use alg::media::LocalCore;
    use alg::realm::StaticResolver;
    use alg::{Alg, Config, Incoming, Peer, Realm, Transport};
    let trgw_cfg = trgw::Config {
        interfaces: vec![
            trgw::config::Interface::new("v6", None, Some("2001:db8::1".parse().unwrap())),
            trgw::config::Interface::new("v4", Some("192.0.2.1".parse().unwrap()), None),
        ],
        port_min: 20000,
        port_max: 60000,
        ..trgw::Config::default()
    };
    let cfg = Config {
        listen_v6: "[2001:db8::1]:5060".parse().unwrap(),
        listen_v4: "192.0.2.1:5060".parse().unwrap(),
        rate_limit: 0,
        ..Config::default()
    };
    let mut alg = Alg::new(cfg, Box::new(StaticResolver::default()), Some(Box::new(LocalCore::new(trgw_cfg))));
    let p6 = Peer {
        realm: Realm::V6,
        transport: Transport::Udp,
        addr: "[2001:db8:6::10]:5060".parse().unwrap(),
        conn: None,
    };
    let p4 = Peer { realm: Realm::V4, transport: Transport::Udp, addr: "192.0.2.50:5060".parse().unwrap(), conn: None };
    let mut now = Instant::now();
    let mut n = 0u64;
    let sdp4 = "v=0\r\no=- 1 1 IN IP4 192.0.2.50\r\ns=-\r\nc=IN IP4 192.0.2.50\r\nt=0 0\r\nm=audio 5000 RTP/AVP 0\r\n";
    c.bench_function("core/call_cycle_invite_200_ack_bye_200", |b| {
        b.iter(|| {
            n += 1;
            let inv = INVITE.replace("a84b4c76e66710", &format!("c{n}")).replace("z9hG4bK776asdhds", &format!("z9hG4bKi{n}"));
            alg.handle(now, Incoming { peer: &p6, data: inv.as_bytes() });
            let mut fwd = Vec::new();
            while let Some(t) = alg.poll_transmit() {
                if t.peer.realm == Realm::V4 {
                    fwd = t.data;
                }
            }
            let m = Message::parse_datagram(&fwd).unwrap();
            let mut r = String::from("SIP/2.0 200 OK\r\n");
            for h in &m.headers {
                match h.name {
                    Name::Via | Name::RecordRoute | Name::From | Name::CallId | Name::CSeq => {
                        r.push_str(h.line);
                        r.push_str("\r\n");
                    }
                    Name::To => {
                        r.push_str(h.line);
                        r.push_str(";tag=b\r\n");
                    }
                    _ => {}
                }
            }
            r.push_str(&format!("Contact: <sip:bob@192.0.2.50>\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp4}", sdp4.len()));
            alg.handle(now, Incoming { peer: &p4, data: r.as_bytes() });
            while alg.poll_transmit().is_some() {}
            let cid = format!("c{n}@pc33.atlanta.example.com");
            let ack = format!("ACK sip:bob@192.0.2.50 SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8:6::10]:5060;branch=z9hG4bKa{n}\r\nRoute: <sip:[2001:db8::1]:5060;lr;r2=on>, <sip:192.0.2.1:5060;lr;r2=on>\r\nMax-Forwards: 70\r\nFrom: <sip:alice@atlanta.example.com>;tag=1928301774\r\nTo: <sip:bob@biloxi.example.com>;tag=b\r\nCall-ID: {cid}\r\nCSeq: 314159 ACK\r\nContent-Length: 0\r\n\r\n");
            alg.handle(now, Incoming { peer: &p6, data: ack.as_bytes() });
            let bye = ack.replace("ACK sip", "BYE sip").replace("CSeq: 314159 ACK", "CSeq: 314160 BYE").replace(&format!("z9hG4bKa{n}"), &format!("z9hG4bKb{n}"));
            alg.handle(now, Incoming { peer: &p6, data: bye.as_bytes() });
            let mut fwd = Vec::new();
            while let Some(t) = alg.poll_transmit() {
                if t.peer.realm == Realm::V4 {
                    fwd = t.data;
                }
            }
            let m = Message::parse_datagram(&fwd).unwrap();
            let mut r = String::from("SIP/2.0 200 OK\r\n");
            for h in &m.headers {
                if matches!(h.name, Name::Via | Name::From | Name::To | Name::CallId | Name::CSeq) {
                    r.push_str(h.line);
                    r.push_str("\r\n");
                }
            }
            r.push_str("Content-Length: 0\r\n\r\n");
            alg.handle(now, Incoming { peer: &p4, data: r.as_bytes() });
            while alg.poll_transmit().is_some() {}
            if n.is_multiple_of(1000) {
                now += Duration::from_secs(40);
                alg.handle_timeout(now);
                while alg.poll_transmit().is_some() {}
            }
        })
    });
    assert!(alg.stats.dialogs_released >= n - 1, "every call released: {:?}", alg.stats);
}

fn parsers(c: &mut Criterion) {
    let data = INVITE.as_bytes();
    // Both produce a message with the same headers.
    let a = String::from_utf8(ours(data)).unwrap();
    let b = String::from_utf8(ezk(data)).unwrap();
    assert!(a.contains("Max-Forwards: 69") && b.to_ascii_lowercase().contains("max-forwards: 69"), "{a}\n{b}");
    c.bench_function("invite_parse_rewrite_serialize/v6gate_views", |b| b.iter(|| ours(black_box(data))));
    c.bench_function("invite_parse_rewrite_serialize/ezk_sip_types", |b| b.iter(|| ezk(black_box(data))));
    c.bench_function("invite_parse_validate/v6gate_views", |b| {
        b.iter(|| {
            let m = Message::parse_datagram(black_box(data)).unwrap();
            m.validate().unwrap();
            m.headers.len()
        })
    });
}

criterion_group!(benches, parsers, call_cycle);
criterion_main!(benches);
