//! Call flows through the ALG core with a scripted UA in each realm and
//! the TrGW core behind it: SDP rewriting, Record-Route, Contact, media
//! allocated and released, timers; tables empty after every scenario.

mod common;

use std::time::Duration;

use alg::msg::Name;
use common::*;

const ALICE: &str = "<sip:alice@[2001:db8:6::10]>;tag=alice1";

struct Call {
    invite_out: Vec<u8>,
    ok6: Vec<u8>,
}

/// INVITE (offer) 6 -> 4, 180, 200 (answer), ACK; returns what the UAs saw.
fn setup(lab: &mut Lab, cid: &str) -> Call {
    let out = lab.send(UA6, &invite6(cid, &sdp("2001:db8:6::10", 4000)));
    assert_eq!(code(&one(&out, UA6).data), 100);
    let inv = one(&out, UA4).data.clone();
    let out = lab.send(UA4, &respond(&inv, 180, "Ringing", Some("bob1"), Some("sip:bob@192.0.2.50"), ""));
    assert_eq!(code(&one(&out, UA6).data), 180);
    let out =
        lab.send(UA4, &respond(&inv, 200, "OK", Some("bob1"), Some("sip:bob@192.0.2.50"), &sdp("192.0.2.50", 5000)));
    let ok6 = one(&out, UA6).data.clone();
    assert_eq!(code(&ok6), 200);
    // ACK: route set = Record-Route reversed, target = Contact.
    let mut rs = record_route(&ok6);
    rs.reverse();
    let ack = in_dialog(
        "ACK",
        &contact_uri(&ok6),
        &rs,
        UA6,
        &format!("z9hG4bK-ack-{cid}"),
        ALICE,
        "<sip:bob@192.0.2.50>;tag=bob1",
        cid,
        1,
        None,
        "",
    );
    let out = lab.send(UA6, &ack);
    let a = one(&out, UA4);
    assert_eq!(request_uri(&a.data), "sip:bob@192.0.2.50", "the ACK reaches the callee's real Contact");
    assert!(header(&a.data, Name::Route).is_none(), "both ALG routes popped: {}", text(a));
    Call { invite_out: inv, ok6 }
}

fn bye_from_callee(lab: &mut Lab, c: &Call, cid: &str) {
    let rs = record_route(&c.invite_out);
    let bye = in_dialog(
        "BYE",
        &contact_uri(&c.invite_out),
        &rs,
        UA4,
        &format!("z9hG4bK-bye-{cid}"),
        "<sip:bob@192.0.2.50>;tag=bob1",
        ALICE,
        cid,
        1,
        None,
        "",
    );
    let out = lab.send(UA4, &bye);
    let b6 = one(&out, UA6).data.clone();
    assert_eq!(request_uri(&b6), format!("sip:alice@{UA6}"));
    let out = lab.send(UA6, &respond(&b6, 200, "OK", None, None, ""));
    assert_eq!(code(&one(&out, UA4).data), 200);
}

#[test]
fn call_from_the_ipv6_realm_to_the_ipv4_realm() {
    let mut lab = Lab::new();
    let out = lab.send(UA6, &invite6("c1", &sdp("2001:db8:6::10", 4000)));
    let inv = text(one(&out, UA4));
    // Via: ours on top, in the IPv4 realm; the UA's keeps received/rport.
    assert!(inv.contains("Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-v6g"), "{inv}");
    // RFC 5658 double Record-Route: IPv4 side first, then the IPv6 side.
    assert_eq!(record_route(inv.as_bytes()), ["sip:192.0.2.1:5060;lr;r2=on", "sip:[2001:db8::1]:5060;lr;r2=on"]);
    assert_eq!(header(inv.as_bytes(), Name::MaxForwards).as_deref(), Some("69"));
    // Contact reachable from the IPv4 realm.
    let c = contact_uri(inv.as_bytes());
    assert!(c.starts_with("sip:alg-") && c.ends_with("@192.0.2.1:5060"), "{c}");
    // SDP: c=, o= and m= of the relay's IPv4 leg, a=rtcp added.
    let b = body(inv.as_bytes());
    assert!(b.contains("c=IN IP4 198.51.100.1\r\n") && b.contains("o=- 1 1 IN IP4 198.51.100.1\r\n"), "{b}");
    assert!(b.contains("m=audio 30000 RTP/AVP 0 8\r\n") && b.contains("a=rtcp:30001\r\n"), "{b}");
    assert!(!b.contains("2001:db8:6::10"));
    assert_eq!(lab.media_calls(), 1);
    let out = lab.send(
        UA4,
        &respond(inv.as_bytes(), 200, "OK", Some("bob1"), Some("sip:bob@192.0.2.50"), &sdp("192.0.2.50", 5000)),
    );
    let ok = text(one(&out, UA6));
    assert_eq!(ok.matches("Via:").count(), 1, "our Via removed: {ok}");
    let b = body(ok.as_bytes());
    assert!(b.contains("c=IN IP6 2001:db8::1\r\n") && b.contains("m=audio 30000 RTP/AVP 0 8\r\n"), "{b}");
    let c = contact_uri(ok.as_bytes());
    assert!(c.ends_with("@[2001:db8::1]:5060"), "{c}");
    let s = lab.trgw.lock().unwrap();
    let st = s.0.call("c1").unwrap().media[0].as_ref().unwrap();
    assert_eq!(st.peers[0], Some("[2001:db8:6::10]:4000".parse().unwrap()));
    assert_eq!(st.peers[2], Some("192.0.2.50:5000".parse().unwrap()));
}

#[test]
fn full_call_and_bye_release_everything() {
    let mut lab = Lab::new();
    let c = setup(&mut lab, "c2");
    assert_eq!(lab.media_calls(), 1);
    assert_eq!(lab.alg.stats.dialogs_created, 1);
    bye_from_callee(&mut lab, &c, "c2");
    assert_eq!(lab.media_calls(), 0, "media released on BYE");
    assert_eq!(lab.alg.stats.dialogs_released, 1);
    let _ = c.ok6;
    lab.assert_empty();
}

#[test]
fn reinvite_handover_repoints_media_without_teardown() {
    for (new_addr, label) in [("2001:db8:7::20", "native IPv6"), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo")] {
        let mut lab = Lab::new();
        let c = setup(&mut lab, "h1");
        let mut rs = record_route(&c.ok6);
        rs.reverse();
        let new_ua = format!("[{new_addr}]:5060");
        let re = in_dialog(
            "INVITE",
            &contact_uri(&c.ok6),
            &rs,
            &new_ua,
            "z9hG4bK-re1",
            ALICE,
            "<sip:bob@192.0.2.50>;tag=bob1",
            "h1",
            2,
            Some(&format!("sip:alice@{new_ua}")),
            &sdp(new_addr, 4100),
        );
        let out = lab.send(&new_ua, &re);
        assert_eq!(code(&one(&out, &new_ua).data), 100);
        let re4 = one(&out, UA4).data.clone();
        let b = body(&re4);
        assert!(
            b.contains("c=IN IP4 198.51.100.1\r\n") && b.contains("m=audio 30000 "),
            "{label}: same relay port for the callee: {b}"
        );
        {
            let s = lab.trgw.lock().unwrap();
            let st = s.0.call("h1").unwrap().media[0].as_ref().unwrap();
            assert_eq!(st.peers[0], Some(format!("[{new_addr}]:4100").parse().unwrap()), "{label}: leg re-pointed");
        }
        let out = lab.send(UA4, &respond(&re4, 200, "OK", None, Some("sip:bob@192.0.2.50"), &sdp("192.0.2.50", 5000)));
        let ok = one(&out, &new_ua);
        assert!(body(&ok.data).contains("c=IN IP6 2001:db8::1\r\n"));
        assert_eq!(lab.media_calls(), 1, "{label}: call kept");
        assert_eq!(lab.alg.stats.handovers, 1);
        bye_from_callee(&mut lab, &c, "h1");
        let _ = lab.advance(Duration::from_secs(1));
        assert_eq!(lab.media_calls(), 0);
    }
}

#[test]
fn handover_to_an_ipv4_address_moves_to_a_new_relay_session() {
    let mut lab = Lab::new();
    let c = setup(&mut lab, "h4");
    let mut rs = record_route(&c.ok6);
    rs.reverse();
    // The UE now offers IPv4 media (dual-stack, moved to an IPv4 network).
    let re = in_dialog(
        "INVITE",
        &contact_uri(&c.ok6),
        &rs,
        UA6,
        "z9hG4bK-re4",
        ALICE,
        "<sip:bob@192.0.2.50>;tag=bob1",
        "h4",
        2,
        None,
        &sdp("198.51.100.7", 4200),
    );
    let out = lab.send(UA6, &re);
    let re4 = one(&out, UA4).data.clone();
    assert_eq!(lab.media_calls(), 2, "make before break");
    let out = lab.send(UA4, &respond(&re4, 200, "OK", None, None, &sdp("192.0.2.50", 5000)));
    // The UE offered IPv4 media, so its leg of the relay is IPv4 now.
    assert!(body(&one(&out, UA6).data).contains("c=IN IP4 198.51.100.1"));
    assert_eq!(lab.media_calls(), 1, "the old session goes once the re-offer is answered");
    {
        let s = lab.trgw.lock().unwrap();
        let id = s.0.list(10)[0].clone();
        let st = s.0.call(&id).unwrap().media[0].as_ref().unwrap();
        assert_eq!(st.peers[0], Some("198.51.100.7:4200".parse().unwrap()));
        assert!(st.local(0).is_ipv4(), "the UE's leg is now IPv4");
    }
    bye_from_callee(&mut lab, &c, "h4");
    lab.assert_empty();
}

#[test]
fn cancel_before_answer_releases_media() {
    let mut lab = Lab::new();
    let inv6 = invite6("cx", &sdp("2001:db8:6::10", 4000));
    let out = lab.send(UA6, &inv6);
    let inv = one(&out, UA4).data.clone();
    let out = lab.send(UA4, &respond(&inv, 180, "Ringing", Some("bob1"), None, ""));
    assert_eq!(code(&one(&out, UA6).data), 180);
    let out = lab.send(UA6, &cancel_of(&inv6));
    assert_eq!(code(&one(&out, UA6).data), 200, "CANCEL answered hop by hop");
    let c4 = one(&out, UA4);
    assert!(text(c4).starts_with("CANCEL sip:bob@192.0.2.50:5060 SIP/2.0"));
    let out = lab.send(UA4, &respond(&c4.data, 200, "OK", Some("bob1"), None, ""));
    assert!(out.is_empty(), "our CANCEL's 200 is ours");
    let out = lab.send(UA4, &respond(&inv, 487, "Request Terminated", Some("bob1"), None, ""));
    assert!(text(one(&out, UA4)).starts_with("ACK sip:bob@192.0.2.50:5060"), "hop-by-hop ACK for 487");
    let r6 = one(&out, UA6);
    assert_eq!(code(&r6.data), 487);
    assert_eq!(lab.media_calls(), 0, "media released");
    // The UA's ACK is absorbed by the server transaction.
    let ack = in_dialog(
        "ACK",
        &format!("sip:bob@{UA4}"),
        &[],
        UA6,
        "z9hG4bK-inv-cx",
        ALICE,
        "<sip:bob@192.0.2.50>;tag=bob1",
        "cx",
        1,
        None,
        "",
    );
    assert!(lab.send(UA6, &ack).is_empty());
    lab.assert_empty();
}

#[test]
fn failure_response_releases_media_and_is_acked() {
    let mut lab = Lab::new();
    let out = lab.send(UA6, &invite6("f1", &sdp("2001:db8:6::10", 4000)));
    let inv = one(&out, UA4).data.clone();
    let busy = respond(&inv, 486, "Busy Here", Some("bob1"), None, "");
    let out = lab.send(UA4, &busy);
    assert_eq!(code(&one(&out, UA6).data), 486);
    assert_eq!(lab.media_calls(), 0);
    // A retransmitted 486 gets our ACK again, and is not forwarded twice.
    let out = lab.send(UA4, &busy);
    assert_eq!(out.len(), 1);
    assert!(text(&out[0]).starts_with("ACK "));
    // Without the UA's ACK, Timer G retransmits the 486 (T1, 2T1, ...).
    let out = lab.advance(Duration::from_millis(1600));
    assert!(to(&out, UA6).len() >= 2, "Timer G retransmissions");
    lab.assert_empty();
}

#[test]
fn no_answer_times_out_with_408_after_retransmissions() {
    let mut lab = Lab::new();
    let out = lab.send(UA6, &invite6("t1", &sdp("2001:db8:6::10", 4000)));
    assert_eq!(to(&out, UA4).len(), 1);
    let out = lab.advance(Duration::from_secs(40));
    // Timer A: 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s -> six retransmissions.
    assert_eq!(to(&out, UA4).len(), 6);
    let r = to(&out, UA6);
    assert_eq!(code(&r.last().unwrap().data), 408);
    assert_eq!(lab.alg.stats.timeouts, 1);
    assert_eq!(lab.media_calls(), 0);
    lab.assert_empty();
}

#[test]
fn offer_in_the_200_answer_in_the_ack() {
    let mut lab = Lab::new();
    let out = lab.send(UA6, &invite6("lo", ""));
    let inv = one(&out, UA4).data.clone();
    assert!(body(&inv).is_empty());
    let out =
        lab.send(UA4, &respond(&inv, 200, "OK", Some("bob1"), Some("sip:bob@192.0.2.50"), &sdp("192.0.2.50", 5000)));
    let ok6 = one(&out, UA6).data.clone();
    assert!(body(&ok6).contains("c=IN IP6 2001:db8::1"), "the callee's offer, rewritten");
    let mut rs = record_route(&ok6);
    rs.reverse();
    let ack = in_dialog(
        "ACK",
        &contact_uri(&ok6),
        &rs,
        UA6,
        "z9hG4bK-lack",
        ALICE,
        "<sip:bob@192.0.2.50>;tag=bob1",
        "lo",
        1,
        None,
        &sdp("2001:db8:6::10", 4000),
    );
    let out = lab.send(UA6, &ack);
    let a4 = one(&out, UA4);
    assert!(body(&a4.data).contains("c=IN IP4 198.51.100.1"), "answer rewritten: {}", text(a4));
    let s = lab.trgw.lock().unwrap();
    let st = s.0.call("lo").unwrap().media[0].as_ref().unwrap();
    assert!(st.peers.iter().flatten().any(|p| *p == "[2001:db8:6::10]:4000".parse().unwrap()));
    assert!(st.peers.iter().flatten().any(|p| *p == "192.0.2.50:5000".parse().unwrap()));
}

#[test]
fn early_media_in_183() {
    let mut lab = Lab::new();
    let out = lab.send(UA6, &invite6("em", &sdp("2001:db8:6::10", 4000)));
    let inv = one(&out, UA4).data.clone();
    let out = lab.send(UA4, &respond(&inv, 183, "Session Progress", Some("bob1"), None, &sdp("192.0.2.50", 5000)));
    let p = one(&out, UA6);
    assert!(body(&p.data).contains("c=IN IP6 2001:db8::1\r\n"));
    let out = lab.send(UA4, &respond(&inv, 603, "Decline", Some("bob1"), None, ""));
    assert_eq!(code(&one(&out, UA6).data), 603);
    lab.assert_empty();
}

#[test]
fn register_gets_path_and_an_incoming_call_reaches_the_registered_ue() {
    let mut cfg = alg_config();
    cfg.route.push(alg::config::Route {
        domain: "ims.example".into(),
        next_hop: "192.0.2.60:5060".parse().unwrap(),
        transport: alg::Transport::Udp,
    });
    let mut lab = Lab::with(cfg, Default::default());
    let reg = with_body(&format!("REGISTER sip:ims.example SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-reg1\r\nMax-Forwards: 70\r\nFrom: <sip:alice@ims.example>;tag=r1\r\nTo: <sip:alice@ims.example>\r\nCall-ID: reg1\r\nCSeq: 1 REGISTER\r\nSupported: path\r\nContact: <sip:alice@{UA6}>;expires=600\r\n"), "");
    let out = lab.send(UA6, &reg);
    let r4 = one(&out, "192.0.2.60:5060").data.clone();
    assert_eq!(header(&r4, Name::Path).as_deref(), Some("<sip:192.0.2.1:5060;lr>"));
    let registered = contact_uri(&r4);
    assert!(registered.ends_with("@192.0.2.1:5060"), "{registered}");
    // The registrar echoes the binding; the UE sees its own Contact back.
    let ok = respond(&r4, 200, "OK", Some("reg"), Some(&registered), "");
    let out = lab.send("192.0.2.60:5060", &ok);
    assert_eq!(contact_uri(&one(&out, UA6).data), format!("sip:alice@{UA6}"));
    // An INVITE from the IPv4 core to the registered contact, via Path.
    let inv = with_body(&format!("INVITE {registered} SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.60:5060;branch=z9hG4bK-in1\r\nMax-Forwards: 69\r\nRoute: <sip:192.0.2.1:5060;lr>\r\nFrom: <sip:carol@ims.example>;tag=c1\r\nTo: <sip:alice@ims.example>\r\nCall-ID: in1\r\nCSeq: 1 INVITE\r\nContact: <sip:carol@192.0.2.61>\r\n"), &sdp("192.0.2.61", 6000));
    let out = lab.send("192.0.2.60:5060", &inv);
    let i6 = one(&out, UA6);
    assert_eq!(request_uri(&i6.data), format!("sip:alice@{UA6}"));
    assert!(body(&i6.data).contains("c=IN IP6 2001:db8::1"));
    assert_eq!(record_route(&i6.data)[0], "sip:[2001:db8::1]:5060;lr;r2=on");
    let out = lab.send(UA6, &respond(&i6.data, 480, "Temporarily Unavailable", Some("a1"), None, ""));
    assert_eq!(code(&one(&out, "192.0.2.60:5060").data), 480);
    lab.assert_empty();
}

#[test]
fn retransmissions_are_absorbed_and_answered_from_state() {
    let mut lab = Lab::new();
    let inv6 = invite6("rt", &sdp("2001:db8:6::10", 4000));
    let out = lab.send(UA6, &inv6);
    assert_eq!(out.len(), 2);
    // Retransmitted INVITE: the last provisional again, nothing forwarded.
    let out = lab.send(UA6, &inv6);
    assert_eq!(out.len(), 1);
    assert_eq!(code(&out[0].data), 100);
    assert_eq!(lab.alg.stats.retransmissions_absorbed, 1);
    assert_eq!(lab.media_calls(), 1);
}

#[test]
fn max_forwards_zero_and_loops() {
    let mut lab = Lab::new();
    let inv = String::from_utf8(invite6("mf", "")).unwrap().replace("Max-Forwards: 70", "Max-Forwards: 0");
    let out = lab.send(UA6, inv.as_bytes());
    assert_eq!(code(&one(&out, UA6).data), 483);
    // A request that comes back to us unchanged is a loop (482).
    let mut lab = Lab::new();
    let out = lab.send(UA6, &invite6("lp", ""));
    let fwd = one(&out, UA4).data.clone();
    let out = lab.send(UA4, &fwd);
    assert_eq!(code(&one(&out, UA4).data), 482);
    assert_eq!(lab.alg.stats.loops, 1);
}

#[test]
fn session_timeout_releases_a_silent_dialog() {
    let mut cfg = alg_config();
    cfg.dialog_timeout_secs = 60;
    let mut lab = Lab::with(cfg, Default::default());
    let _c = setup(&mut lab, "st");
    assert_eq!(lab.media_calls(), 1);
    lab.advance(Duration::from_secs(61));
    assert_eq!(lab.media_calls(), 0);
    assert_eq!(lab.alg.stats.dialogs_timed_out, 1);
    lab.assert_empty();
}

#[test]
fn bad_sdp_gets_400_and_leaves_nothing() {
    let mut lab = Lab::new();
    let no_c = "v=0\r\no=- 1 1 IN IP6 2001:db8:6::10\r\ns=-\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";
    let out = lab.send(UA6, &invite6("b1", no_c));
    let r = to(&out, UA6).pop().unwrap();
    assert!(text(r).starts_with("SIP/2.0 400 Bad SDP"), "{}", text(r));
    let weird = "v=0\r\no=- 1 1 IN IP6 2001:db8:6::10\r\ns=-\r\nc=IN ATM 1.2.3\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";
    let out = lab.send(UA6, &invite6("b2", weird));
    assert!(text(to(&out, UA6).pop().unwrap()).starts_with("SIP/2.0 400 Bad SDP"));
    assert!(to(&out, UA4).is_empty());
    assert_eq!(lab.media_calls(), 0);
    lab.assert_empty();
}

#[test]
fn floods_are_rate_limited_per_source() {
    let mut cfg = alg_config();
    cfg.rate_limit = 10;
    let mut lab = Lab::with(cfg, Default::default());
    let mut answered = 0;
    for i in 0..100 {
        let m = format!("OPTIONS sip:[2001:db8::1]:5060 SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-o{i}\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: o{i}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n");
        answered += lab.send(UA6, m.as_bytes()).len();
    }
    assert_eq!(answered, 20, "burst of twice the rate");
    assert_eq!(lab.alg.stats.rate_limited, 80);
    // Another source is not affected.
    let m = format!("OPTIONS sip:192.0.2.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP {UA4};branch=z9hG4bK-x\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(code(&one(&lab.send(UA4, m.as_bytes()), UA4).data), 200);
    lab.assert_empty();
}

#[test]
fn update_from_the_callee_and_other_methods_are_proxied() {
    let mut lab = Lab::new();
    let c = setup(&mut lab, "up");
    // UPDATE with a new offer from the callee (IPv4 realm) towards alice.
    let rs = record_route(&c.invite_out);
    let upd = in_dialog(
        "UPDATE",
        &contact_uri(&c.invite_out),
        &rs,
        UA4,
        "z9hG4bK-up1",
        "<sip:bob@192.0.2.50>;tag=bob1",
        ALICE,
        "up",
        2,
        Some("sip:bob@192.0.2.50"),
        &sdp("192.0.2.51", 5100),
    );
    let out = lab.send(UA4, &upd);
    let u6 = one(&out, UA6).data.clone();
    assert!(body(&u6).contains("c=IN IP6 2001:db8::1\r\n") && body(&u6).contains("m=audio 30000 "), "{}", body(&u6));
    {
        let s = lab.trgw.lock().unwrap();
        assert_eq!(
            s.0.call("up").unwrap().media[0].as_ref().unwrap().peers[2],
            Some("192.0.2.51:5100".parse().unwrap())
        );
    }
    let out =
        lab.send(UA6, &respond(&u6, 200, "OK", None, Some(&format!("sip:alice@{UA6}")), &sdp("2001:db8:6::10", 4000)));
    let ok4 = one(&out, UA4);
    assert!(body(&ok4.data).contains("c=IN IP4 198.51.100.1\r\n"));
    // INFO and MESSAGE in the dialog pass without SDP handling.
    let info = in_dialog(
        "INFO",
        &contact_uri(&c.invite_out),
        &rs,
        UA4,
        "z9hG4bK-info",
        "<sip:bob@192.0.2.50>;tag=bob1",
        ALICE,
        "up",
        3,
        None,
        "",
    );
    let out = lab.send(UA4, &info);
    assert!(text(one(&out, UA6)).starts_with(&format!("INFO sip:alice@{UA6} SIP/2.0")));
    // An out-of-dialog MESSAGE from the IPv4 realm to an IPv6 literal.
    let msg = with_body(&format!("MESSAGE sip:alice@{UA6} SIP/2.0\r\nVia: SIP/2.0/UDP {UA4};branch=z9hG4bK-msg\r\nMax-Forwards: 70\r\nFrom: <sip:bob@192.0.2.50>;tag=m1\r\nTo: <sip:alice@[2001:db8:6::10]>\r\nCall-ID: msg1\r\nCSeq: 1 MESSAGE\r\n"), "");
    let out = lab.send(UA4, &msg);
    let m6 = one(&out, UA6);
    assert!(text(m6).contains("Via: SIP/2.0/UDP [2001:db8::1]:5060;branch="));
    assert!(record_route(&m6.data).is_empty(), "no Record-Route for MESSAGE");
    bye_from_callee(&mut lab, &c, "up");
    let out = lab.send(UA6, &respond(&m6.data, 200, "OK", Some("x"), None, ""));
    assert_eq!(code(&one(&out, UA4).data), 200);
    lab.assert_empty();
}

#[test]
fn malformed_input_is_answered_or_dropped_and_counted() {
    let mut lab = Lab::new();
    // Broken header line in a request that still has what a 400 needs.
    let m = format!("OPTIONS sip:bob@{UA4} SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-m1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: m1\r\nCSeq: 1 OPTIONS\r\nthis line has no colon\r\nContent-Length: 0\r\n\r\n");
    let out = lab.send(UA6, m.as_bytes());
    assert!(text(one(&out, UA6)).starts_with("SIP/2.0 400 Malformed header line"));
    // Garbage, a bad start line without headers, binary: dropped.
    for junk in [&b"\x00\x01\x02garbage"[..], b"HELLO\r\n\r\n", b"SIP/2.0 abc\r\n\r\n", &[0xff; 100]] {
        assert!(lab.send(UA6, junk).is_empty());
    }
    assert_eq!(lab.alg.stats.malformed_dropped, 4);
    assert_eq!(lab.alg.stats.malformed_answered, 1);
    // Oversized: 513 when the head is readable.
    let big = format!("OPTIONS sip:bob@{UA4} SIP/2.0\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-big\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: big\r\nCSeq: 1 OPTIONS\r\nX-Pad: {}\r\nContent-Length: 0\r\n\r\n", "x".repeat(70_000));
    let out = lab.send(UA6, big.as_bytes());
    assert!(text(one(&out, UA6)).starts_with("SIP/2.0 513 "));
    assert_eq!(lab.alg.stats.oversized, 1);
    // A stray response (not ours) is dropped and counted.
    let stray = format!("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP {UA6};branch=z9hG4bK-zz\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: s\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n");
    assert!(lab.send(UA4, stray.as_bytes()).is_empty());
    assert_eq!(lab.alg.stats.stray_responses, 1);
    lab.assert_empty();
}

#[test]
fn a_destination_that_never_answers_is_replaced_by_the_next_one() {
    let mut r = alg::realm::StaticResolver::default();
    r.add("pool.example", "192.0.2.70:5060".parse().unwrap(), alg::Transport::Udp);
    r.add("pool.example", "192.0.2.71:5060".parse().unwrap(), alg::Transport::Udp);
    let mut lab = Lab::with(alg_config(), r);
    let inv = String::from_utf8(invite6("fo", &sdp("2001:db8:6::10", 4000)))
        .unwrap()
        .replace(&format!("INVITE sip:bob@{UA4}"), "INVITE sip:bob@pool.example");
    let out = lab.send(UA6, inv.as_bytes());
    assert_eq!(to(&out, "192.0.2.70:5060").len(), 1);
    // 64*T1 without any answer: the same INVITE (new branch) to the next one.
    let out = lab.advance(Duration::from_millis(32_100));
    let second = to(&out, "192.0.2.71:5060");
    assert_eq!(second.len(), 1, "failed over");
    assert!(to(&out, UA6).is_empty(), "no 408 while another destination is left");
    assert_eq!(lab.alg.stats.failovers, 1);
    let fwd = second[0].data.clone();
    assert!(body(&fwd).contains("c=IN IP4 198.51.100.1"), "same rewritten SDP");
    let out = lab.send(
        "192.0.2.71:5060",
        &respond(&fwd, 200, "OK", Some("b"), Some("sip:bob@192.0.2.71"), &sdp("192.0.2.71", 5000)),
    );
    assert_eq!(code(&one(&out, UA6).data), 200);
    // Both failed: 408.
    let mut r = alg::realm::StaticResolver::default();
    r.add("pool.example", "192.0.2.70:5060".parse().unwrap(), alg::Transport::Udp);
    r.add("pool.example", "192.0.2.71:5060".parse().unwrap(), alg::Transport::Udp);
    let mut lab = Lab::with(alg_config(), r);
    lab.send(UA6, inv.as_bytes());
    let out = lab.advance(Duration::from_secs(70));
    assert_eq!(code(&to(&out, UA6).last().unwrap().data), 408);
    lab.assert_empty();
}

#[test]
fn media_aimed_at_the_relay_itself_is_not_acceptable() {
    let mut lab = Lab::new();
    // The TrGW's policy refuses its own address (and loopback) as a far end.
    let out = lab.send(UA6, &invite6("own", &sdp("2001:db8::1", 4000)));
    let r = to(&out, UA6).pop().unwrap();
    assert!(text(r).starts_with("SIP/2.0 488 Not Acceptable Here"), "{}", text(r));
    assert!(to(&out, UA4).is_empty());
    assert_eq!(lab.alg.stats.media_errors, 1);
    lab.assert_empty();
}
