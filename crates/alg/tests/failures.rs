//! An unanswered or failed call gives back its dialog and its media as
//! soon as its INVITE fails (Timer B, a final non-2xx, the caller's CANCEL,
//! a 2xx the caller never ACKs), not at the dialog timeout; the
//! transactions then end by their RFC 3261 timers, so an overload's
//! failed calls leave nothing behind a minute later.

mod common;

use std::time::Duration;

use common::*;

const ALICE: &str = "<sip:alice@[2001:db8:6::10]>;tag=alice1";

/// (dialogs, media sessions) live now.
fn calls_held(lab: &Lab) -> (usize, usize) {
    (lab.alg.table_sizes().2, lab.media_calls())
}

/// The caller's hop-by-hop ACK for a non-2xx final of INVITE `cid`.
fn ack_final(cid: &str) -> Vec<u8> {
    let branch = format!("z9hG4bK-inv-{cid}");
    in_dialog(
        "ACK",
        &format!("sip:bob@{UA4}"),
        &[],
        UA6,
        &branch,
        ALICE,
        "<sip:bob@192.0.2.50>;tag=x",
        cid,
        1,
        None,
        "",
    )
}

/// INVITE with an offer from UA6; returns it and the forwarded INVITE.
fn invite(lab: &mut Lab, cid: &str) -> (Vec<u8>, Vec<u8>) {
    let inv6 = invite6(cid, &sdp("2001:db8:6::10", 4000));
    let out = lab.send(UA6, &inv6);
    let inv = one(&out, UA4).data.clone();
    assert_eq!(calls_held(lab), (1, 1), "dialog and media allocated");
    (inv6, inv)
}

#[test]
fn timer_b_on_an_unanswered_invite_releases_the_call_at_once() {
    let mut lab = Lab::new();
    invite(&mut lab, "tb");
    lab.advance(Duration::from_millis(31_900));
    assert_eq!(calls_held(&lab), (1, 1), "held while the INVITE may still be answered");
    let out = lab.advance(Duration::from_millis(200));
    assert_eq!(code(&to(&out, UA6).last().unwrap().data), 408);
    assert_eq!(calls_held(&lab), (0, 0), "released with the 408");
    assert!(lab.send(UA6, &ack_final("tb")).is_empty(), "the caller's ACK is absorbed");
    lab.advance(Duration::from_millis(5_100));
    assert_eq!(lab.alg.table_sizes(), (0, 0, 0, 0), "Timer I ended the last transaction");
}

#[test]
fn a_failure_response_releases_the_call_at_once() {
    for (n, status) in [408u16, 486, 503, 603].into_iter().enumerate() {
        let mut lab = Lab::new();
        let cid = format!("ff{n}");
        let (_, inv) = invite(&mut lab, &cid);
        let out = lab.send(UA4, &respond(&inv, 180, "Ringing", Some("bob1"), None, ""));
        assert_eq!(code(&one(&out, UA6).data), 180);
        let out = lab.send(UA4, &respond(&inv, status, "Failed", Some("bob1"), None, ""));
        assert_eq!(code(&one(&out, UA6).data), status);
        assert!(text(one(&out, UA4)).starts_with("ACK "), "{status}: hop-by-hop ACK");
        assert_eq!(calls_held(&lab), (0, 0), "{status}: released when the final went out");
        assert!(lab.send(UA6, &ack_final(&cid)).is_empty());
        lab.advance(Duration::from_millis(32_100));
        assert_eq!(lab.alg.table_sizes(), (0, 0, 0, 0), "{status}: Timer D ended the client transaction");
    }
}

#[test]
fn cancel_releases_the_call_at_once_even_when_the_callee_never_answers_it() {
    // CANCEL after a provisional: forwarded; the callee answers neither it
    // nor the INVITE.
    let mut lab = Lab::new();
    let (inv6, inv) = invite(&mut lab, "cn");
    lab.send(UA4, &respond(&inv, 180, "Ringing", Some("bob1"), None, ""));
    let out = lab.send(UA6, &cancel_of(&inv6));
    assert_eq!(code(&one(&out, UA6).data), 200);
    assert!(text(one(&out, UA4)).starts_with("CANCEL "));
    assert_eq!(calls_held(&lab), (0, 0), "released when the caller cancelled");
    let out = lab.advance(Duration::from_millis(32_100));
    assert_eq!(code(&to(&out, UA6).last().unwrap().data), 487, "the INVITE ends 64 × T1 after our CANCEL");
    assert!(lab.send(UA6, &ack_final("cn")).is_empty());
    lab.advance(Duration::from_millis(5_100));
    assert_eq!(lab.alg.table_sizes(), (0, 0, 0, 0), "nothing waits for Timer C or the dialog timeout");

    // CANCEL before any provisional from the callee: held back (RFC 3261
    // §9.1), the call released all the same; Timer B ends the INVITE with 487.
    let mut lab = Lab::new();
    let (inv6, _) = invite(&mut lab, "c0");
    let out = lab.send(UA6, &cancel_of(&inv6));
    assert_eq!(code(&one(&out, UA6).data), 200);
    assert!(to(&out, UA4).is_empty(), "no CANCEL before a provisional");
    assert_eq!(calls_held(&lab), (0, 0));
    let out = lab.advance(Duration::from_millis(32_100));
    assert_eq!(code(&to(&out, UA6).last().unwrap().data), 487);
    assert!(lab.send(UA6, &ack_final("c0")).is_empty());
    lab.advance(Duration::from_millis(5_100));
    assert_eq!(lab.alg.table_sizes(), (0, 0, 0, 0));
}

#[test]
fn a_2xx_the_caller_never_acks_releases_the_call_with_its_transaction() {
    let mut lab = Lab::new();
    let (_, inv) = invite(&mut lab, "na");
    let ok = respond(&inv, 200, "OK", Some("bob1"), Some("sip:bob@192.0.2.50"), &sdp("192.0.2.50", 5000));
    let first = one(&lab.send(UA4, &ok), UA6).data.clone();
    assert_eq!(code(&first), 200);
    // The callee retransmits its 2xx until the ACK: the same response
    // goes again, from state.
    let again = lab.send(UA4, &ok);
    assert_eq!(one(&again, UA6).data, first, "the 2xx as first relayed");
    assert_eq!(calls_held(&lab), (1, 1), "held while the ACK may come");
    lab.advance(Duration::from_millis(31_900));
    assert_eq!(calls_held(&lab), (1, 1));
    lab.advance(Duration::from_millis(200));
    assert_eq!(calls_held(&lab), (0, 0), "no ACK by Timer L: the caller gave up");
    assert_eq!(lab.alg.table_sizes(), (0, 0, 0, 0));
}
