//! The in-process media path is typed (no ng dictionary): it must give the
//! same SDP, the same errors and the same TrGW state as the dictionary a
//! remote ng server gets. Two TrGW cores get the same script of offers,
//! answers, re-offers and deletes, one through [`MediaControl::sdp`] /
//! [`MediaControl::delete`], the other through the ng dictionary of the
//! same command ([`MediaControl::command`]); after every step the replies
//! and the cores are compared.

use alg::media::{Command, LocalCore, MediaControl, SdpCommand, Side};
use trgw::bencode::Value;

mod common;
use common::{sdp, trgw_config};

/// What a core holds for the test's calls: per call, the tags and per
/// stream its kind, protocol, local sockets and signalled far ends; the
/// relay table; the counters.
fn state(c: &LocalCore, calls: &[&str]) -> String {
    let core = &c.0;
    let mut out = String::new();
    for id in calls {
        match core.call(id) {
            None => out.push_str(&format!("{id}: none\n")),
            Some(call) => {
                out.push_str(&format!("{id}: {} {:?}\n", call.from_tag, call.to_tag));
                for s in call.media.iter() {
                    match s {
                        None => out.push_str("  -\n"),
                        Some(s) => out.push_str(&format!(
                            "  {} {} {:?} {:?} {:?} {:?}\n",
                            s.kind,
                            s.proto,
                            (0..4).map(|k| s.local(k)).collect::<Vec<_>>(),
                            s.peers,
                            s.advert(0),
                            s.advert(1)
                        )),
                    }
                }
            }
        }
    }
    let mut table = core.relay_table();
    table.sort_by_key(|(k, _)| format!("{k:?}"));
    out.push_str(&format!("table {table:?}\nfast {:?}\ntotals {:?}\n", core.fast_legs(), core.totals));
    out
}

fn dict_reply(c: &mut LocalCore, cmd: &Command) -> Result<Vec<u8>, alg::media::MediaError> {
    let v = c.command(&cmd.to_value());
    cmd.reply_of(v)
}

struct Pair {
    typed: LocalCore,
    dict: LocalCore,
    calls: Vec<&'static str>,
}

impl Pair {
    fn new() -> Pair {
        Pair { typed: LocalCore::new(trgw_config()), dict: LocalCore::new(trgw_config()), calls: Vec::new() }
    }

    /// Runs `cmd` both ways; the (common) reply.
    fn run(&mut self, cmd: &Command) -> Result<Vec<u8>, alg::media::MediaError> {
        let a = cmd.run(&mut self.typed);
        let b = dict_reply(&mut self.dict, cmd);
        assert_eq!(a, b, "typed vs dictionary reply of {cmd:?}");
        assert_eq!(state(&self.typed, &self.calls), state(&self.dict, &self.calls), "state after {cmd:?}");
        a
    }
}

fn side(iface: Option<&str>, v6: bool) -> Side {
    Side { iface: iface.map(str::to_string), v6 }
}

fn sdp_cmd(offer: bool, call_id: &str, to_tag: Option<&str>, body: &str, from: &Side, to: &Side) -> Command {
    Command::Sdp(Box::new(
        SdpCommand { offer, call_id, from_tag: "a-1", to_tag, sdp: body.as_bytes(), from, to, client: None }
            .to_request(),
    ))
}

fn text(r: Result<Vec<u8>, alg::media::MediaError>) -> String {
    String::from_utf8(r.expect("an SDP")).unwrap()
}

#[test]
fn offer_answer_reoffer_delete_give_the_same_sdp_and_state_both_ways() {
    let mut p = Pair::new();
    p.calls = vec!["c1", "c1;v6g-e1", "c2"];
    let (v6, v4) = (side(Some("v6"), true), side(Some("v4"), false));

    let offer = text(p.run(&sdp_cmd(true, "c1", None, &sdp("2001:db8:6::10", 9000), &v6, &v4)));
    assert!(offer.contains("c=IN IP4 198.51.100.1\r\n") && offer.contains("o=- 1 1 IN IP4 198.51.100.1"), "{offer}");
    let answer = text(p.run(&sdp_cmd(false, "c1", Some("b-1"), &sdp("192.0.2.50", 8000), &v4, &v6)));
    assert!(answer.contains("c=IN IP6 2001:db8::1\r\n"), "{answer}");
    // Re-offer from a new address (handover), then its answer.
    let re = text(p.run(&sdp_cmd(true, "c1", None, &sdp("2001:db8:6::99", 9100), &v6, &v4)));
    assert_eq!(re, offer, "same legs advertised after a handover");
    p.run(&sdp_cmd(false, "c1", Some("b-1"), &sdp("192.0.2.50", 8000), &v4, &v6)).unwrap();
    // A re-offer from the other family in a new generation, and the
    // re-offer of RFC 5118 §4.8 with both families (the sender's interface
    // is left to the relay).
    p.run(&sdp_cmd(true, "c1;v6g-e1", None, &sdp("192.0.2.77", 9200), &v4, &v4)).unwrap();
    let mixed = "v=0\r\no=- 1 1 IN IP6 2001:db8:6::10\r\ns=-\r\nt=0 0\r\nm=audio 9000 RTP/AVP 0\r\nc=IN IP4 192.0.2.1\r\nm=video 9002 RTP/AVP 96\r\nc=IN IP6 2001:db8:6::10\r\na=rtpmap:96 H264/90000\r\na=candidate:1 1 UDP 1 2001:db8:6::10 9002 typ host\r\n";
    let m = text(p.run(&sdp_cmd(true, "c2", None, mixed, &v6, &v4)));
    assert!(!m.contains("candidate"), "ICE removed: {m}");
    // Without interfaces configured (no direction): the relay picks by family.
    let (n6, n4) = (side(None, true), side(None, false));
    p.run(&sdp_cmd(false, "c2", Some("b-2"), &sdp("192.0.2.51", 8100), &n4, &n6)).unwrap();

    p.run(&Command::Delete("c1;v6g-e1".into())).unwrap();
    p.run(&Command::Delete("c1".into())).unwrap();
    p.run(&Command::Delete("c2".into())).unwrap();
    assert_eq!(p.typed.0.call_count(), 0);
}

#[test]
fn errors_are_the_same_both_ways() {
    let mut p = Pair::new();
    p.calls = vec!["e1", "e2"];
    let (v6, v4) = (side(Some("v6"), true), side(Some("v4"), false));
    let cases: Vec<(Command, &str)> = vec![
        (sdp_cmd(true, "e1", None, "garbage", &v6, &v4), "Failed to parse SDP"),
        (sdp_cmd(false, "e2", Some("b"), &sdp("192.0.2.50", 8000), &v4, &v6), "Unknown call-id"),
        (sdp_cmd(true, "e1", None, &sdp("127.0.0.1", 8000), &v4, &v6), "Media address 127.0.0.1 refused"),
        (sdp_cmd(true, "", None, &sdp("192.0.2.50", 8000), &v4, &v6), "No call-id in message"),
        (sdp_cmd(true, "e1", None, &sdp("192.0.2.50", 8000), &side(Some("nope"), false), &v6), ""),
        (Command::Delete("e1".into()), "Call-ID not found"),
        (Command::Delete(String::new()), "No call-id in message"),
    ];
    for (cmd, reason) in &cases {
        let e = p.run(cmd).expect_err("an error");
        assert!(e.0.starts_with(reason), "{cmd:?}: {e}");
    }
    // Every one counted as a control error on both cores (compared by `run`).
    assert_eq!(p.typed.0.totals.control_errors, cases.len() as u64);
}

#[test]
fn the_dictionary_still_says_what_the_typed_command_says() {
    // What a remote ng server (Kamailio's rtpengine, the bench's clients)
    // gets is unchanged: the rtpengine module's keys.
    let (v6, v4) = (side(Some("v6"), true), side(Some("v4"), false));
    let v = sdp_cmd(false, "c", Some("b"), &sdp("192.0.2.50", 8000), &v4, &v6).to_value();
    let get = |k: &str| v.get(k).cloned();
    assert_eq!(get("command"), Some(Value::str("answer")));
    assert_eq!(get("to-tag"), Some(Value::str("b")));
    assert_eq!(get("flags"), Some(Value::List(vec![Value::str("trust-address")])));
    assert_eq!(get("replace"), Some(Value::List(vec![Value::str("origin"), Value::str("session-connection")])));
    assert_eq!(get("ICE"), Some(Value::str("remove")));
    assert_eq!(get("address family"), Some(Value::str("IP6")));
    assert_eq!(get("direction"), Some(Value::List(vec![Value::str("v4"), Value::str("v6")])));
    let d = Command::Delete("c".into()).to_value();
    assert_eq!(d.get("command"), Some(&Value::str("delete")));
    assert_eq!(d.get("call-id"), Some(&Value::str("c")));
}
