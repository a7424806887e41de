//! RFC 4475 (SIP torture test messages) §3.1.1 valid and §3.1.2 invalid
//! messages, and RFC 5118 (SIP torture tests for IPv6) messages, sent
//! through the ALG: valid requests are proxied (and what goes out parses
//! and validates again), invalid ones get the answer RFC 4475 describes
//! (400, or 505 for the unknown version) or are dropped (responses).
//! The messages are typed in from the RFCs (3.1.1.11 mpart01, a binary
//! multipart body, is left out).

mod common;

use alg::msg::{Message, Name};
use common::*;

const CORE: &str = "192.0.2.99:5060";

fn lab() -> Lab {
    let mut cfg = alg_config();
    for d in ["example.com", "example.net", "example.org", "example.edu"] {
        cfg.route.push(alg::config::Route {
            domain: d.into(),
            next_hop: CORE.parse().unwrap(),
            transport: alg::Transport::Udp,
        });
    }
    Lab::with(cfg, Default::default())
}

#[derive(Debug, PartialEq)]
enum Want {
    Proxied,
    Answer(u16),
    Dropped,
}

fn run(name: &str, msg: &[u8], want: Want) {
    let mut lab = lab();
    let out = lab.send(UA6, msg);
    let fwd = to(&out, CORE);
    let back: Vec<u16> = to(&out, UA6).iter().map(|t| code(&t.data)).filter(|&c| c != 100).collect();
    match want {
        Want::Proxied => {
            assert_eq!(fwd.len(), 1, "{name}: proxied once: {:#?}", out.iter().map(text).collect::<Vec<_>>());
            assert!(back.is_empty(), "{name}: no error answer: {back:?}");
            let m = Message::parse_datagram(&fwd[0].data).unwrap();
            m.validate().unwrap_or_else(|e| panic!("{name}: what we send is valid SIP: {e}\n{}", text(fwd[0])));
            let orig = Message::parse_datagram(msg).unwrap();
            assert_eq!(m.method(), orig.method(), "{name}");
            assert_eq!(m.call_id(), orig.call_id(), "{name}");
            assert_eq!(m.body.len(), m.header(Name::ContentLength).unwrap().parse::<usize>().unwrap());
        }
        Want::Answer(c) => {
            assert!(fwd.is_empty(), "{name}: not proxied");
            assert_eq!(back, [c], "{name}: answered {c}");
            let ans = to(&out, UA6).into_iter().last().unwrap();
            let m = Message::parse_datagram(&ans.data).unwrap();
            assert!(
                matches!(m.start, alg::msg::Start::Response { reason, .. } if !reason.is_empty()),
                "{name}: a reason phrase"
            );
        }
        Want::Dropped => {
            assert!(out.is_empty(), "{name}: dropped silently: {:#?}", out.iter().map(text).collect::<Vec<_>>());
            assert_eq!(lab.alg.stats.malformed_dropped + lab.alg.stats.stray_responses, 1, "{name}: counted");
        }
    }
}

const SDP150: &str = "v=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n";

#[test]
fn rfc4475_3_1_1_1_wsinv_short_tortuous_invite() {
    let m = "INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0\r\nTO :\r\n sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n\r\nfrom   : \"J Rosenberg \\\\\\\"\"       <sip:jdrosen@example.com>\r\n  ;\r\n  tag = 98asjd8\r\nMaX-fOrWaRdS: 0068\r\nCall-ID: wsinv.ndaksdj@192.0.2.1\r\nContent-Length   : 150\r\ncseq: 0009\r\n  INVITE\r\nVia  : SIP  /   2.0\r\n /UDP\r\n    192.0.2.2;branch=390skdjuw\r\ns :\r\nNewFangledHeader:   newfangled value\r\n continued newfangled value\r\nUnknownHeaderWithUnusualValue: ;;,,;;,;\r\nContent-Type: application/sdp\r\nRoute:\r\n <sip:services.example.com;lr;unknownwith=value;unknown-no-value>\r\nv:  SIP  / 2.0  / TCP     spindle.example.com   ;\r\n  branch  =   z9hG4bK9ikj8  ,\r\n SIP  /    2.0   / UDP  192.168.255.111   ; branch=\r\n z9hG4bK30239\r\nm:\"Quoted string \\\"\\\"\" <sip:jdrosen@example.com> ; newparam =\r\n      newvalue ;\r\n  secondparam ; q = 0.33\r\n\r\nv=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.3\r\ns=-\r\nc=IN IP4 192.0.2.4\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n";
    let p = Message::parse_datagram(m.as_bytes()).unwrap();
    assert_eq!(p.to_tag(), Some("1918181833n"));
    assert_eq!(p.from_tag(), Some("98asjd8"));
    assert_eq!(p.max_forwards(), Some(68));
    assert_eq!(p.cseq(), Some((9, "INVITE")));
    assert_eq!(p.vias().len(), 3);
    assert_eq!(p.body.len(), 150);
    run("wsinv", m.as_bytes(), Want::Proxied);
    let mut lab = lab();
    let out = lab.send(UA6, m.as_bytes());
    let f = text(one(&out, CORE));
    assert!(f.contains("Max-Forwards: 67\r\n"));
    assert!(
        f.contains("NewFangledHeader:   newfangled value\r\n continued newfangled value\r\n"),
        "unknown headers pass as received"
    );
    assert!(f.contains("Route:\r\n <sip:services.example.com;lr;"), "a foreign Route stays");
}

#[test]
fn rfc4475_3_1_1_2_intmeth_wide_range_of_valid_characters() {
    let m = "!interesting-Method0123456789_*+`.%indeed'~ sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com SIP/2.0\r\nVia: SIP/2.0/TCP host1.example.com;branch=z9hG4bK-.!%66*_+`'~\r\nTo: \"BEL:\\\x07 NUL:\\\x00 DEL:\\\x7F\" <sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com>\r\nFrom: token1~` token2'+_ token3*%!.- <sip:mundane@example.com>;fromParam''~+*_!.-%=\"\u{440}\u{430}\u{431}\u{43e}\u{442}\u{430}\u{44e}\u{449}\u{438}\u{439}\";tag=_token~1'+`*%!-.\r\nCall-ID: intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{\r\nCSeq: 139122385 !interesting-Method0123456789_*+`.%indeed'~\r\nMax-Forwards: 255\r\nextensionHeader-!.%*+_`'~:\u{feff}\u{5927}\u{505c}\u{96fb}\r\nContent-Length: 0\r\n\r\n";
    let p = Message::parse_datagram(m.as_bytes()).unwrap();
    assert_eq!(p.method(), Some("!interesting-Method0123456789_*+`.%indeed'~"));
    assert_eq!(p.top_via().unwrap().branch(), Some("z9hG4bK-.!%66*_+`'~"));
    assert_eq!(p.from_tag(), Some("_token~1'+`*%!-."));
    run("intmeth", m.as_bytes(), Want::Proxied);
}

#[test]
fn rfc4475_3_1_1_3_to_10_12_13_valid_messages_are_proxied() {
    let cases: Vec<(&str, String)> = vec![
        ("esc01", format!("INVITE sip:sips%3Auser%40example.com@example.net SIP/2.0\r\nTo: sip:%75se%72@example.com\r\nFrom: <sip:I%20have%20spaces@example.net>;tag=938\r\nMax-Forwards: 87\r\ni: esc01.239409asdfakjkn23onasd0-3234\r\nCSeq: 234234 INVITE\r\nVia: SIP/2.0/UDP host5.example.net;branch=z9hG4bKkdjuw\r\nC: application/sdp\r\nContact:\r\n  <sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31>\r\nContent-Length: 150\r\n\r\n{SDP150}")),
        ("escnull", "REGISTER sip:example.com SIP/2.0\r\nTo: sip:null-%00-null@example.com\r\nFrom: sip:null-%00-null@example.com;tag=839923423\r\nMax-Forwards: 70\r\nCall-ID: escnull.39203ndfvkjdasfkq3w4otrq0adsfdfnavd\r\nCSeq: 14398234 REGISTER\r\nVia: SIP/2.0/UDP host5.example.com;branch=z9hG4bKkdjuw\r\nContact: <sip:%00@host5.example.com>\r\nContact: <sip:%00%00@host5.example.com>\r\nL:0\r\n\r\n".into()),
        ("esc02", "RE%47IST%45R sip:registrar.example.com SIP/2.0\r\nTo: \"%Z%45\" <sip:resource@example.com>\r\nFrom: \"%Z%45\" <sip:resource@example.com>;tag=f232jadfj23\r\nCall-ID: esc02.asdfnqwo34rq23i34jrjasdcnl23nrlknsdf\r\nVia: SIP/2.0/TCP host.example.com;branch=z9hG4bK209%fzsnel234\r\nCSeq: 29344 RE%47IST%45R\r\nMax-Forwards: 70\r\nContact: <sip:alias1@host1.example.com>\r\nC%6Fntact: <sip:alias2@host2.example.com>\r\nContact: <sip:alias3@host3.example.com>\r\nl: 0\r\n\r\n".into()),
        ("lwsdisp", "OPTIONS sip:user@example.com SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: caller<sip:caller@example.com>;tag=323\r\nMax-Forwards: 70\r\nCall-ID: lwsdisp.1234abcd@funky.example.com\r\nCSeq: 60 OPTIONS\r\nVia: SIP/2.0/UDP funky.example.com;branch=z9hG4bKkdjuw\r\nl: 0\r\n\r\n".into()),
        ("longreq", {
            let mut s = String::from("INVITE sip:user@example.com SIP/2.0\r\nTo: \"I have a user name of extremeextremeextremeextremeextremeextremeextremeextremeextremeextreme proportion\"<sip:user@example.com:6000;unknownparam1=verylonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglongvalue;longparamnamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamename=shortvalue;verylonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglongParameterNameWithNoValue>\r\nF: sip:amazinglylongcallernameamazinglylongcallernameamazinglylongcallernameamazinglylongcallernameamazinglylongcallername@example.net;tag=12982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982982424;unknownheaderparamnamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamenamename=unknowheaderparamvaluevaluevaluevaluevaluevaluevaluevaluevaluevaluevaluevaluevaluevaluevalue;unknownValuelessparamnameparamnameparamnameparamnameparamnameparamnameparamnameparamnameparamnameparamname\r\nCall-ID: longreq.onereallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallyreallylongcallid\r\nCSeq: 3882340 INVITE\r\nUnknown-LongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLongLong-Name: unknown-longlonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglong-value; unknown-longlonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglong-parameter-name = unknown-longlonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglong-parameter-value\r\nVia: SIP/2.0/TCP sip33.example.com\r\nv: SIP/2.0/TCP sip32.example.com\r\nV: SIP/2.0/TCP sip31.example.com\r\nVia: SIP/2.0/TCP sip30.example.com\r\nViA: SIP/2.0/TCP sip29.example.com\r\nVIa: SIP/2.0/TCP sip28.example.com\r\nVIA: SIP/2.0/TCP sip27.example.com\r\nvia: SIP/2.0/TCP sip26.example.com\r\nviA: SIP/2.0/TCP sip25.example.com\r\nvIa: SIP/2.0/TCP sip24.example.com\r\nvIA: SIP/2.0/TCP sip23.example.com\r\nV :  SIP/2.0/TCP sip22.example.com\r\nv :  SIP/2.0/TCP sip21.example.com\r\nV  : SIP/2.0/TCP sip20.example.com\r\nv  : SIP/2.0/TCP sip19.example.com\r\nVia : SIP/2.0/TCP sip18.example.com\r\nVia  : SIP/2.0/TCP sip17.example.com\r\n");
            for i in (1..=16).rev() {
                s.push_str(&format!("Via: SIP/2.0/TCP sip{i}.example.com\r\n"));
            }
            s.push_str("Via: SIP/2.0/TCP host.example.com;received=192.0.2.5;branch=verylonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglonglongbranchvalue\r\nMax-Forwards: 70\r\nContact: <sip:amazinglylongcallernameamazinglylongcallernameamazinglylongcallernameamazinglylongcallernameamazinglylongcallername@host5.example.net>\r\nContent-Type: application/sdp\r\nl: 150\r\n\r\n");
            s.push_str(SDP150);
            s
        }),
        ("semiuri", "OPTIONS sip:user;par=u%40example.net@example.com SIP/2.0\r\nTo: sip:j_user@example.com\r\nFrom: sip:caller@example.org;tag=33242\r\nMax-Forwards: 3\r\nCall-ID: semiuri.0ha0isndaksdj\r\nCSeq: 8 OPTIONS\r\nAccept: application/sdp, application/pkcs7-mime,\r\n        multipart/mixed, multipart/signed,\r\n        message/sip, message/sipfrag\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKkdjuw\r\nl: 0\r\n\r\n".into()),
        ("transports", "OPTIONS sip:user@example.com SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: <sip:caller@example.com>;tag=323\r\nMax-Forwards: 70\r\nCall-ID:  transports.kijh4akdnaqjkwendsasfdj\r\nAccept: application/sdp\r\nCSeq: 60 OPTIONS\r\nVia: SIP/2.0/UDP t1.example.com;branch=z9hG4bKkdjuw\r\nVia: SIP/2.0/SCTP t2.example.com;branch=z9hG4bKklasjdhf\r\nVia: SIP/2.0/TLS t3.example.com;branch=z9hG4bK2980unddj\r\nVia: SIP/2.0/UNKNOWN t4.example.com;branch=z9hG4bKasd0f3en\r\nVia: SIP/2.0/TCP t5.example.com;branch=z9hG4bK0a9idfnee\r\nl: 0\r\n\r\n".into()),
    ];
    for (name, m) in &cases {
        run(name, m.as_bytes(), Want::Proxied);
    }
    // esc02: the method is RE%47IST%45R, not REGISTER: no Path added.
    let mut l = lab();
    let out = l.send(UA6, cases[2].1.as_bytes());
    assert!(header(&one(&out, CORE).data, Name::Path).is_none());
}

#[test]
fn rfc4475_3_1_1_8_dblreq_extra_octets_in_a_datagram_are_discarded() {
    let m = "REGISTER sip:example.com SIP/2.0\r\nTo: sip:j.user@example.com\r\nFrom: sip:j.user@example.com;tag=43251j3j324\r\nMax-Forwards: 8\r\nI: dblreq.0ha0isndaksdj99sdfafnl3lk233412\r\nContact: sip:j.user@host.example.com\r\nCSeq: 8 REGISTER\r\nVia: SIP/2.0/UDP 192.0.2.125;branch=z9hG4bKkdjuw23492\r\nContent-Length: 0\r\n\r\n\r\nINVITE sip:joe@example.com SIP/2.0\r\nt: sip:joe@example.com\r\nFrom: sip:caller@example.net;tag=141334\r\nMax-Forwards: 8\r\nCall-ID: dblreq.0ha0isnda977644900765@192.0.2.15\r\nCSeq: 8 INVITE\r\nVia: SIP/2.0/UDP 192.0.2.15;branch=z9hG4bKkdjuw380234\r\nContent-Type: application/sdp\r\nContent-Length: 150\r\n\r\nv=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.15\r\ns=-\r\nc=IN IP4 192.0.2.15\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm =video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n\r\n";
    run("dblreq", m.as_bytes(), Want::Proxied);
    let mut l = lab();
    let out = l.send(UA6, m.as_bytes());
    let f = text(one(&out, CORE));
    assert!(f.starts_with("REGISTER ") && f.ends_with("Content-Length: 0\r\n\r\n") && !f.contains("joe@"), "{f}");
}

#[test]
fn rfc4475_3_1_1_12_13_unusual_and_empty_reason_phrases_pass_through() {
    let unreason_line = "SIP/2.0 200 = 2**3 * 5**2 \u{43d}\u{43e} \u{441}\u{442}\u{43e} \u{434}\u{435}\u{432}\u{44f}\u{43d}\u{43e}\u{441}\u{442}\u{43e} \u{434}\u{435}\u{432}\u{44f}\u{442}\u{44c} - \u{43f}\u{440}\u{43e}\u{441}\u{442}\u{43e}\u{435}";
    let unreason = format!("{unreason_line}\r\nVia: SIP/2.0/UDP 192.0.2.198;branch=z9hG4bK1324923\r\nCall-ID: unreason.1234ksdfak3j2erwedfsASdf\r\nCSeq: 35 INVITE\r\nFrom: sip:user@example.com;tag=11141343\r\nTo: sip:user@example.edu;tag=2229\r\nContent-Length: 154\r\nContent-Type: application/sdp\r\nContact: <sip:user@host198.example.com>\r\n\r\nv=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.198\r\ns=-\r\nc=IN IP4 192.0.2.198\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n");
    let noreason = "SIP/2.0 100 \r\nVia: SIP/2.0/UDP 192.0.2.105;branch=z9hG4bK2398ndaoe\r\nCall-ID: noreason.asndj203insdf99223ndf\r\nCSeq: 35 INVITE\r\nFrom: <sip:user@example.com>;tag=39ansfi3\r\nTo: <sip:user@example.edu>;tag=902jndnke3\r\nContent-Length: 0\r\nContact: <sip:user@host105.example.com>\r\n\r\n";
    for m in [unreason.as_str(), noreason] {
        let p = Message::parse_datagram(m.as_bytes()).unwrap();
        p.validate().unwrap();
    }
    assert_eq!(Message::parse_datagram(unreason.as_bytes()).unwrap().body.len(), 154);
    // Proxied in a transaction: the reason phrase is kept byte for byte.
    let mut l = lab();
    let out = l.send(UA6, &invite6("ur", ""));
    let inv = one(&out, UA4).data.clone();
    let r = String::from_utf8(respond(&inv, 180, "x", Some("t"), None, "")).unwrap();
    let r = r.replacen("SIP/2.0 180 x", &unreason_line.replace(" 200 ", " 180 "), 1);
    let out = l.send(UA4, r.as_bytes());
    assert!(text(one(&out, UA6)).starts_with(&unreason_line.replace(" 200 ", " 180 ")));
}

#[test]
fn rfc4475_3_1_2_invalid_messages_get_400_or_are_dropped() {
    let sdp = |a: &str| {
        format!("v=0\r\no=mhandley 29739 7272939 IN IP4 {a}\r\ns=-\r\nc=IN IP4 {a}\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n")
    };
    let cases: Vec<(&str, String, Want)> = vec![
        ("3.1.2.1 badinv01", format!("INVITE sip:user@example.com SIP/2.0\r\nTo: sip:j.user@example.com\r\nFrom: sip:caller@example.net;tag=134161461246\r\nMax-Forwards: 7\r\nCall-ID: badinv01.0ha0isndaksdjasdf3234nas\r\nCSeq: 8 INVITE\r\nVia: SIP/2.0/UDP 192.0.2.15;;,;,,\r\nContact: \"Joe\" <sip:joe@example.org>;;;;\r\nContent-Length: 152\r\nContent-Type: application/sdp\r\n\r\n{}", sdp("192.0.2.15")), Want::Answer(400)),
        ("3.1.2.2 clerr", format!("INVITE sip:user@example.com SIP/2.0\r\nMax-Forwards: 80\r\nTo: sip:j.user@example.com\r\nFrom: sip:caller@example.net;tag=93942939o2\r\nContact: <sip:caller@hungry.example.net>\r\nCall-ID: clerr.0ha0isndaksdjweiafasdk3\r\nCSeq: 8 INVITE\r\nVia: SIP/2.0/UDP host5.example.com;branch=z9hG4bK-39234-23523\r\nContent-Type: application/sdp\r\nContent-Length: 9999\r\n\r\n{}", sdp("192.0.2.155")), Want::Answer(400)),
        ("3.1.2.3 ncl", format!("INVITE sip:user@example.com SIP/2.0\r\nMax-Forwards: 254\r\nTo: sip:j.user@example.com\r\nFrom: sip:caller@example.net;tag=32394234\r\nCall-ID: ncl.0ha0isndaksdj2193423r542w35\r\nCSeq: 0 INVITE\r\nVia: SIP/2.0/UDP 192.0.2.53;branch=z9hG4bKkdjuw\r\nContact: <sip:caller@example53.example.net>\r\nContent-Type: application/sdp\r\nContent-Length: -999\r\n\r\n{}", sdp("192.0.2.53")), Want::Answer(400)),
        ("3.1.2.4 scalar02", "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/TCP host129.example.com;branch=z9hG4bK342sdfoi3\r\nTo: <sip:user@example.com>\r\nFrom: <sip:user@example.com>;tag=239232jh3\r\nCSeq: 36893488147419103232 REGISTER\r\nCall-ID: scalar02.23o0pd9vanlq3wnrlnewofjas9ui32\r\nMax-Forwards: 300\r\nExpires: 10000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000\r\nContact: <sip:user@host129.example.com>\r\n  ;expires=280297596632815\r\nContent-Length: 0\r\n\r\n".into(), Want::Answer(400)),
        ("3.1.2.5 scalarlg", "SIP/2.0 503 Service Unavailable\r\nVia: SIP/2.0/TCP host129.example.com;branch=z9hG4bKzzxdiwo34sw;received=192.0.2.129\r\nTo: <sip:user@example.com>\r\nFrom: <sip:other@example.net>;tag=2easdjfejw\r\nCSeq: 9292394834772304023312 OPTIONS\r\nCall-ID: scalarlg.noase0of0234hn2qofoaf0232aewf2394r\r\nRetry-After: 949302838503028349304023988\r\nWarning: 1812 overture \"In Progress\"\r\nContent-Length: 0\r\n\r\n".into(), Want::Dropped),
        ("3.1.2.6 quotbal", format!("INVITE sip:user@example.com SIP/2.0\r\nTo: \"Mr. J. User <sip:j.user@example.com>\r\nFrom: sip:caller@example.net;tag=93334\r\nMax-Forwards: 10\r\nCall-ID: quotbal.aksdj\r\nContact: <sip:caller@host59.example.net>\r\nCSeq: 8 INVITE\r\nVia: SIP/2.0/UDP 192.0.2.59:5050;branch=z9hG4bKkdjuw39234\r\nContent-Type: application/sdp\r\nContent-Length: 152\r\n\r\n{}", sdp("192.0.2.15")), Want::Answer(400)),
        ("3.1.2.7 ltgtruri", "INVITE <sip:user@example.com> SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:caller@example.net;tag=39291\r\nMax-Forwards: 23\r\nCall-ID: ltgtruri.1@192.0.2.5\r\nCSeq: 1 INVITE\r\nVia: SIP/2.0/UDP 192.0.2.5\r\nContact: <sip:caller@host5.example.net>\r\nContent-Type: application/sdp\r\nContent-Length: 159\r\n\r\nv=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.5\r\ns=-\r\nc=IN IP4 192.0.2.5\r\nt=3149328700 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n".into(), Want::Answer(400)),
        ("3.1.2.8 lwsruri", "INVITE sip:user@example.com; lr SIP/2.0\r\nTo: sip:user@example.com;tag=3xfe-9921883-z9f\r\nFrom: sip:caller@example.net;tag=231413434\r\nMax-Forwards: 5\r\nCall-ID: lwsruri.asdfasdoeoi2323-asdfwrn23-asd834rk423\r\nCSeq: 2130706432 INVITE\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKkdjuw2395\r\nContact: <sip:caller@host1.example.net>\r\nContent-Type: application/sdp\r\nContent-Length: 159\r\n\r\nv=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=3149328700 0\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n".into(), Want::Answer(400)),
        ("3.1.2.9 lwsstart", format!("INVITE  sip:user@example.com  SIP/2.0\r\nMax-Forwards: 8\r\nTo: sip:user@example.com\r\nFrom: sip:caller@example.net;tag=8814\r\nCall-ID: lwsstart.dfknq234oi243099adsdfnawe3@example.com\r\nCSeq: 1893884 INVITE\r\nVia: SIP/2.0/UDP host1.example.com;branch=z9hG4bKkdjuw3923\r\nContact: <sip:caller@host1.example.net>\r\nContent-Type: application/sdp\r\nContent-Length: 150\r\n\r\n{SDP150}"), Want::Answer(400)),
        ("3.1.2.10 trws", "OPTIONS sip:remote-target@example.com SIP/2.0  \r\nVia: SIP/2.0/TCP host1.examle.com;branch=z9hG4bK299342093\r\nTo: <sip:remote-target@example.com>\r\nFrom: <sip:local-resource@example.com>;tag=329429089\r\nCall-ID: trws.oicu34958239neffasdhr2345r\r\nAccept: application/sdp\r\nCSeq: 238923 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n".into(), Want::Answer(400)),
        ("3.1.2.11 escruri", format!("INVITE sip:user@example.com?Route=%3Csip:example.com%3E SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:caller@example.net;tag=341518\r\nMax-Forwards: 7\r\nContact: <sip:caller@host39923.example.net>\r\nCall-ID: escruri.23940-asdfhj-aje3br-234q098w-fawerh2q-h4n5\r\nCSeq: 149209342 INVITE\r\nVia: SIP/2.0/UDP host-of-the-hour.example.com;branch=z9hG4bKkdjuw\r\nContent-Type: application/sdp\r\nContent-Length: 150\r\n\r\n{SDP150}"), Want::Answer(400)),
        ("3.1.2.12 baddate", format!("INVITE sip:user@example.com SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:caller@example.net;tag=2234923\r\nMax-Forwards: 70\r\nCall-ID: baddate.239423mnsadf3j23lj42--sedfnm234\r\nCSeq: 1392934 INVITE\r\nVia: SIP/2.0/UDP host.example.com;branch=z9hG4bKkdjuw\r\nDate: Fri, 01 Jan 2010 16:00:00 EST\r\nContact: <sip:caller@host5.example.net>\r\nContent-Type: application/sdp\r\nContent-Length: 150\r\n\r\n{}", sdp("192.0.2.5")), Want::Proxied),
        ("3.1.2.13 regbadct", "REGISTER sip:example.com SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@example.com;tag=998332\r\nMax-Forwards: 70\r\nCall-ID: regbadct.k345asrl3fdbv@10.0.0.1\r\nCSeq: 1 REGISTER\r\nVia: SIP/2.0/UDP 135.180.130.133:5060;branch=z9hG4bKkdjuw\r\nContact: sip:user@example.com?Route=%3Csip:sip.example.com%3E\r\nl: 0\r\n\r\n".into(), Want::Answer(400)),
        ("3.1.2.14 badaspec", "OPTIONS sip:user@example.org SIP/2.0\r\nVia: SIP/2.0/UDP host4.example.com:5060;branch=z9hG4bKkdju43234\r\nMax-Forwards: 70\r\nFrom: \"Bell, Alexander\" <sip:a.g.bell@example.com>;tag=433423\r\nTo: \"Watson, Thomas\" < sip:t.watson@example.org >\r\nCall-ID: badaspec.sdf0234n2nds0a099u23h3hnnw009cdkne3\r\nAccept: application/sdp\r\nCSeq: 3923239 OPTIONS\r\nl: 0\r\n\r\n".into(), Want::Answer(400)),
        ("3.1.2.15 baddn", "OPTIONS sip:t.watson@example.org SIP/2.0\r\nVia:     SIP/2.0/UDP c.example.com:5060;branch=z9hG4bKkdjuw\r\nMax-Forwards:      70\r\nFrom:    Bell, Alexander <sip:a.g.bell@example.com>;tag=43\r\nTo:      Watson, Thomas <sip:t.watson@example.org>\r\nCall-ID: baddn.31415@c.example.com\r\nAccept: application/sdp\r\nCSeq:    3923239 OPTIONS\r\nl: 0\r\n\r\n".into(), Want::Answer(400)),
        ("3.1.2.16 badvers", "OPTIONS sip:t.watson@example.org SIP/7.0\r\nVia:     SIP/7.0/UDP c.example.com;branch=z9hG4bKkdjuw\r\nMax-Forwards:     70\r\nFrom:    A. Bell <sip:a.g.bell@example.com>;tag=qweoiqpe\r\nTo:      T. Watson <sip:t.watson@example.org>\r\nCall-ID: badvers.31417@c.example.com\r\nCSeq:    1 OPTIONS\r\nl: 0\r\n\r\n".into(), Want::Answer(505)),
        ("3.1.2.17 mismatch01", "OPTIONS sip:user@example.com SIP/2.0\r\nTo: sip:j.user@example.com\r\nFrom: sip:caller@example.net;tag=34525\r\nMax-Forwards: 6\r\nCall-ID: mismatch01.dj0234sxdfl3\r\nCSeq: 8 INVITE\r\nVia: SIP/2.0/UDP host.example.com;branch=z9hG4bKkdjuw\r\nl: 0\r\n\r\n".into(), Want::Answer(400)),
        ("3.1.2.18 mismatch02", "NEWMETHOD sip:user@example.com SIP/2.0\r\nTo: sip:j.user@example.com\r\nFrom: sip:caller@example.net;tag=34525\r\nMax-Forwards: 6\r\nCall-ID: mismatch02.dj0234sxdfl3\r\nCSeq: 8 INVITE\r\nContact: <sip:caller@host.example.net>\r\nVia: SIP/2.0/UDP host.example.net;branch=z9hG4bKkdjuw\r\nContent-Type: application/sdp\r\nl: 138\r\n\r\nv=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.1\r\nc=IN IP4 192.0.2.1\r\nm=audio 49217 RTP/AVP 0 12\r\nm=video 3227 RTP/AVP 31\r\na=rtpmap:31 LPC\r\n".into(), Want::Answer(400)),
        ("3.1.2.19 bigcode", "SIP/2.0 4294967301 better not break the receiver\r\nVia: SIP/2.0/UDP 192.0.2.105;branch=z9hG4bK2398ndaoe\r\nCall-ID: bigcode.asdof3uj203asdnf3429uasdhfas3ehjasdfas9i\r\nCSeq: 353494 INVITE\r\nFrom: <sip:user@example.com>;tag=39ansfi3\r\nTo: <sip:user@example.edu>;tag=902jndnke3\r\nContent-Length: 0\r\nContact: <sip:user@host105.example.com>\r\n\r\n".into(), Want::Dropped),
    ];
    for (name, m, want) in cases {
        run(name, m.as_bytes(), want);
    }
}

// RFC 5118 (SIP torture tests for IPv6), §4.

#[test]
fn rfc5118_4_1_valid_ipv6_register_is_proxied_with_an_ipv6_received() {
    let m = "REGISTER sip:[2001:db8::10] SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@example.com;tag=81x2\r\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111\r\nCall-ID: SSG9559905523997077@hlau_4100\r\nMax-Forwards: 70\r\nContact: \"Caller\" <sip:caller@[2001:db8::9:1]>\r\nCSeq: 98176 REGISTER\r\nContent-Length: 0\r\n\r\n";
    let mut l = lab();
    let out = l.send(UA6, m.as_bytes());
    let f = text(one(&out, "[2001:db8::10]:5060"));
    // RFC 5118 §4.5: received carries the IPv6 address (RFC 3261 writes it without brackets).
    assert!(f.contains("Via: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111;received=2001:db8:6::10\r\n"), "{f}");
    assert!(
        f.starts_with("REGISTER sip:[2001:db8::10] SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8::1]:5060;"),
        "same realm: our IPv6 Via: {f}"
    );
}

#[test]
fn rfc5118_4_2_ipv6_without_brackets_is_rejected() {
    let m = "REGISTER sip:2001:db8::10 SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@example.com;tag=81x2\r\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111\r\nCall-ID: SSG9559905523997077@hlau_4100\r\nMax-Forwards: 70\r\nContact: \"Caller\" <sip:caller@[2001:db8::9:1]>\r\nCSeq: 98176 REGISTER\r\nContent-Length: 0\r\n\r\n";
    run("rfc5118 4.2", m.as_bytes(), Want::Answer(400));
}

#[test]
fn rfc5118_4_3_and_4_4_port_inside_and_outside_the_brackets() {
    for (ruri, dest) in
        [("sip:[2001:db8::10:5070]", "[2001:db8::10:5070]:5060"), ("sip:[2001:db8::10]:5070", "[2001:db8::10]:5070")]
    {
        let m = format!("REGISTER {ruri} SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@example.com;tag=1234\r\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111\r\nCall-ID: SSG95523997077@hlau_4100\r\nContact: \"Caller\" <sip:caller@[2001:db8::9:1]>\r\nMax-Forwards: 70\r\nCSeq: 98176 REGISTER\r\nContent-Length: 0\r\n\r\n");
        let mut l = lab();
        let out = l.send(UA6, m.as_bytes());
        assert_eq!(to(&out, dest).len(), 1, "{ruri} goes to {dest}");
    }
}

#[test]
fn rfc5118_4_5_received_with_brackets_in_a_response_is_followed() {
    // §4.5: a Via whose received carries the IPv6 reference with its
    // brackets is accepted as well; here in a response (stateless path).
    let mut l = lab();
    let ours = "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-x";
    let m = format!("SIP/2.0 200 OK\r\nVia: {ours}\r\nVia: SIP/2.0/UDP [2001:db8::9:1];received=[2001:db8::9:255];branch=z9hG4bKas3\r\nCall-ID: r5118\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n");
    let out = l.send(UA4, m.as_bytes());
    assert_eq!(to(&out, "[2001:db8::9:255]:5060").len(), 1);
}

#[test]
fn rfc5118_4_7_multiple_ip_addresses_in_sip_headers() {
    // §4.7's BYE: Via values of both families, one with an IPv4 received
    // on an IPv6 sent-by; every one parses and keeps its own address.
    let m = "BYE sip:user@host.example.net SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8::9:1]:6050;branch=z9hG4bKas3-111\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKjhja8781hjuaij65144\r\nVia: SIP/2.0/TCP [2001:db8::9:255];branch=z9hG4bK451jj;received=192.0.2.200\r\nCall-ID: 997077@lau_4100\r\nMax-Forwards: 70\r\nCSeq: 89187 BYE\r\nTo: sip:user@example.net;tag=9817--94\r\nFrom: sip:user@example.com;tag=81x2\r\nContent-Length: 0\r\n\r\n";
    let p = alg::msg::Message::parse_datagram(m.as_bytes()).expect("RFC 5118 4.7 is valid");
    use alg::uri::Host;
    let hosts: Vec<(Option<std::net::IpAddr>, Option<u16>)> = p
        .vias()
        .iter()
        .map(|v| alg::msg::Via::parse(v).map(|x| (x.host.ip(), x.port)).expect("each Via parses"))
        .collect();
    let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
    assert_eq!(hosts, [(ip("2001:db8::9:1"), Some(6050)), (ip("192.0.2.1"), None), (ip("2001:db8::9:255"), None)]);
    assert!(matches!(p.top_via().unwrap().host, Host::V6(_)));
}

#[test]
fn rfc5118_4_9_ipv4_mapped_ipv6_goes_to_the_ipv4_realm() {
    let m = "OPTIONS sip:[::ffff:192.0.2.77] SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@example.com;tag=81x2\r\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-112\r\nCall-ID: mapped@x\r\nMax-Forwards: 70\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
    let mut l = lab();
    let out = l.send(UA6, m.as_bytes());
    let f = one(&out, "192.0.2.77:5060");
    assert_eq!(f.peer.realm, alg::Realm::V4);
    assert!(text(f).contains("Via: SIP/2.0/UDP 192.0.2.1:5060;"));
}

#[test]
fn rfc5118_4_6_ipv6_sdp_is_rewritten_for_the_ipv4_realm() {
    let body = "v=0\r\no=assistant 971731711378798081 0 IN IP6 2001:db8::20\r\ns=Live video feed for today's meeting\r\nc=IN IP6 2001:db8::20\r\nt=3338481189 3370017201\r\nm=audio 6000 RTP/AVP 2\r\na=rtpmap:2 G726-32/8000\r\nm=video 6024 RTP/AVP 107\r\na=rtpmap:107 H263-1998/90000\r\n";
    let mut l = lab();
    let out = l.send(UA6, &invite6("sdp6", body));
    let b = body_of(one(&out, UA4));
    assert!(
        b.contains("o=assistant 971731711378798081 0 IN IP4 198.51.100.1\r\n")
            && b.contains("c=IN IP4 198.51.100.1\r\n"),
        "{b}"
    );
    assert!(b.contains("m=audio 30000 RTP/AVP 2\r\n") && b.contains("m=video 30002 RTP/AVP 107\r\n"), "{b}");
    assert!(!b.contains("2001:db8::20"));
}

fn body_of(t: &alg::Transmit) -> String {
    body(&t.data)
}

/// The lab of the SDP vectors of RFC 5118 §4.8 and §4.9, whose media
/// addresses are documentation addresses: the TrGW on addresses of its own
/// (2001:db8::1, the common lab's, is §4.8's video address, which the media
/// policy would rightly refuse as the relay's own), and the RFC's
/// 192.0.2.2 allowed even when the test machine carries it (this one does,
/// on eth0; the policy refuses the host's addresses).
fn lab_sdp() -> Lab {
    let mut t = trgw_config();
    t.interfaces = vec![
        trgw::config::Interface::new("v6", None, Some("2001:db8:ff::1".parse().unwrap())),
        trgw::config::Interface::new("v4", Some("198.51.100.1".parse().unwrap()), None),
    ];
    t.media_allow = ["192.0.2.2/32", "192.0.2.0/24", "2001:db8::/32"].iter().map(|a| a.parse().unwrap()).collect();
    let mut l = lab();
    l.trgw = std::sync::Arc::new(std::sync::Mutex::new(alg::media::LocalCore::new(t)));
    let cfg = l.alg.config().clone();
    l.alg = alg::Alg::new(cfg, Box::new(alg::realm::StaticResolver::default()), Some(Box::new(l.trgw.clone())));
    l
}

/// RFC 5118 §4.8's INVITE (mult-ip-in-sdp) to `ruri`: no session `c=`,
/// the audio stream on IPv4, the video stream on IPv6, the origin a host
/// name.
fn mult_ip_in_sdp(ruri: &str) -> Vec<u8> {
    let body = "v=0\r\no=bob 280744730 28977631 IN IP4 host.example.com\r\ns=\r\nt=0 0\r\nm=audio 22334 RTP/AVP 0\r\nc=IN IP4 192.0.2.1\r\nm=video 6024 RTP/AVP 107\r\nc=IN IP6 2001:db8::1\r\na=rtpmap:107 H263-1998/90000\r\n";
    let to = ruri.trim_start_matches("sip:user@");
    with_body(
        &format!("INVITE {ruri} SIP/2.0\r\nTo: sip:user@{to}\r\nFrom: sip:user@example.com;tag=81x2\r\nVia: SIP/2.0/UDP [2001:db8::9:1];branch=z9hG4bKas3-111\r\nCall-ID: SSG9559905523997077@hlau_4100\r\nContact: \"Caller\" <sip:caller@[2001:db8::9:1]>\r\nMax-Forwards: 70\r\nCSeq: 8912 INVITE\r\n"),
        body,
    )
}

/// The callee refuses the call (486): the media of the offer is
/// released, and the tables are empty.
fn refuse_and_check_empty(l: &mut Lab, req: &alg::Transmit) {
    let from = req.peer.addr.to_string();
    let out = l.send(&from, &respond(&req.data, 486, "Busy Here", Some("busy"), None, ""));
    assert_eq!(to(&out, UA6).iter().map(|t| code(&t.data)).collect::<Vec<_>>(), [486], "the 486 goes back");
    l.assert_empty();
}

#[test]
fn rfc5118_4_8_multiple_ip_addresses_in_sdp() {
    // As the RFC writes it (to an IPv6 literal: the IPv6 realm, no media
    // relay): proxied with the SDP as sent, both streams and their own
    // connection lines.
    let mut l = lab_sdp();
    let m = mult_ip_in_sdp("sip:user@[2001:db8::10]");
    let out = l.send(UA6, &m);
    let f = one(&out, "[2001:db8::10]:5060");
    assert_eq!(body_of(f), body(&m), "same realm: the SDP as sent");
    refuse_and_check_empty(&mut l, f);

    // The same offer into the IPv4 realm: each stream relayed, the IPv4
    // audio as well as the IPv6 video, both offered on the relay's IPv4
    // address; neither of the caller's addresses leaks.
    let mut l = lab_sdp();
    let out = l.send(UA6, &mult_ip_in_sdp("sip:user@192.0.2.77"));
    let f = one(&out, "192.0.2.77:5060");
    let b = body_of(f);
    let conns: Vec<&str> = b.lines().filter(|x| x.starts_with("c=")).collect();
    assert_eq!(conns, ["c=IN IP4 198.51.100.1"; 2], "{b}");
    let ports: Vec<&str> = b.lines().filter(|x| x.starts_with("m=")).map(|x| x.split(' ').nth(1).unwrap()).collect();
    assert_eq!(ports.len(), 2, "{b}");
    assert!(ports[0] != "22334" && ports[1] != "6024" && ports[0] != ports[1], "relay ports: {b}");
    assert!(b.contains("o=bob 280744730 28977631 IN IP4 198.51.100.1\r\n"), "{b}");
    assert!(!b.contains("192.0.2.1\r") && !b.contains("2001:db8::1"), "{b}");
    assert_eq!(l.media_calls(), 1);
    refuse_and_check_empty(&mut l, f);
}

/// RFC 5118 §4.9's INVITE (ipv4-mapped-ipv6).
fn ipv4_mapped_ipv6() -> Vec<u8> {
    let body = "v=0\r\no=assistant 971731711378798081 0 IN IP6 ::ffff:192.0.2.2\r\ns=Call me soon, please!\r\nc=IN IP6 ::ffff:192.0.2.2\r\nt=3338481189 3370017201\r\nm=audio 6000 RTP/AVP 2\r\na=rtpmap:2 G726-32/8000\r\nm=video 6024 RTP/AVP 107\r\na=rtpmap:107 H263-1998/90000\r\n";
    with_body("INVITE sip:user@example.com SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@east.example.com;tag=81x2\r\nVia: SIP/2.0/UDP [::ffff:192.0.2.10]:19823;branch=z9hG4bKbh19\r\nVia: SIP/2.0/UDP [::ffff:192.0.2.2];branch=z9hG4bKas3-111\r\nCall-ID: SSG9559905523997077@hlau_4100\r\nContact: \"T. desk phone\" <sip:ted@[::ffff:192.0.2.2]>\r\nCSeq: 612 INVITE\r\nMax-Forwards: 70\r\n", body)
}

#[test]
fn rfc5118_4_9_ipv4_mapped_addresses_in_via_contact_and_sdp() {
    // "Must be prepared to parse it": both Vias keep their mapped
    // addresses, the top one its port; the INVITE goes to example.com's
    // next hop (IPv4 realm) with the Contact and the SDP for that realm.
    let m = ipv4_mapped_ipv6();
    let p = Message::parse_datagram(&m).unwrap();
    let vias: Vec<_> =
        p.vias().iter().map(|v| alg::msg::Via::parse(v).map(|x| (x.host.ip(), x.port)).unwrap()).collect();
    let mapped = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
    assert_eq!(vias, [(mapped("::ffff:192.0.2.10"), Some(19823)), (mapped("::ffff:192.0.2.2"), None)]);
    let mut l = lab_sdp();
    let out = l.send(UA6, &m);
    let f = one(&out, CORE);
    let t = text(f);
    assert!(t.contains("\r\nVia: SIP/2.0/UDP [::ffff:192.0.2.10]:19823;branch=z9hG4bKbh19;received=2001:db8:6::10\r\nVia: SIP/2.0/UDP [::ffff:192.0.2.2];branch=z9hG4bKas3-111\r\n"), "{t}");
    assert!(contact_uri(&f.data).ends_with("@192.0.2.1:5060"), "{t}");
    let b = body_of(f);
    assert!(b.contains("c=IN IP4 198.51.100.1\r\n") && !b.contains("::ffff"), "{b}");
    assert_eq!(b.lines().filter(|x| x.starts_with("m=")).count(), 2, "{b}");
    refuse_and_check_empty(&mut l, f);
}

#[test]
fn rfc5118_4_10_the_rfc_3261_abnf_bug_is_tolerated() {
    // Both the three-colon reference (RFC 3261's ABNF bug) and the correct
    // one name 2001:db8::192.0.2.1, and both are proxied there.
    for h in ["2001:db8:::192.0.2.1", "2001:db8::192.0.2.1"] {
        let m = format!("OPTIONS sip:user@[{h}] SIP/2.0\r\nTo: sip:user@[{h}]\r\nFrom: sip:user@example.com;tag=810x2\r\nVia: SIP/2.0/UDP lab1.east.example.com;branch=z9hG4bKas3-111\r\nCall-ID: G9559905523997077@hlau_4100\r\nCSeq: 689 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n");
        let mut l = lab();
        let out = l.send(UA6, m.as_bytes());
        let f = one(&out, "[2001:db8::c000:201]:5060");
        assert!(text(f).starts_with(&format!("OPTIONS sip:user@[{h}] SIP/2.0\r\n")), "{h}");
        assert!(to(&out, UA6).is_empty(), "{h}: no error answer");
    }
}

#[test]
fn rfc5118_4_5_received_with_and_without_brackets_in_requests() {
    let with = "BYE sip:[2001:db8::10] SIP/2.0\r\nTo: sip:user@example.com;tag=bd76ya\r\nFrom: sip:user@example.com;tag=81x2\r\nVia: SIP/2.0/UDP [2001:db8::9:1];received=[2001:db8::9:255];branch=z9hG4bKas3-111\r\nCall-ID: SSG9559905523997077@hlau_4100\r\nMax-Forwards: 70\r\nCSeq: 321 BYE\r\nContent-Length: 0\r\n\r\n";
    let without = "OPTIONS sip:[2001:db8::10] SIP/2.0\r\nTo: sip:user@example.com\r\nFrom: sip:user@example.com;tag=81x2\r\nVia: SIP/2.0/UDP [2001:db8::9:1];received=2001:db8::9:255;branch=z9hG4bKas3\r\nCall-ID: SSG95523997077@hlau_4100\r\nMax-Forwards: 70\r\nContact: \"Caller\" <sip:caller@[2001:db8::9:1]>\r\nCSeq: 921 OPTIONS\r\nContent-Length: 0\r\n\r\n";
    // Both forms parse and the requests are proxied; a received the sender
    // wrote is not where the packet came from (UA6 here): the source
    // replaces it, so the responses come back to where the request came
    // from (the sender's own value is of no use for that).
    for (m, branch) in [(with, "z9hG4bKas3-111"), (without, "z9hG4bKas3")] {
        let mut l = lab();
        let out = l.send(UA6, m.as_bytes());
        let f = text(one(&out, "[2001:db8::10]:5060"));
        let want = format!("\r\nVia: SIP/2.0/UDP [2001:db8::9:1];received=2001:db8:6::10;branch={branch}\r\n");
        assert!(f.contains(&want), "{f}");
        // Its response goes back to UA6 through the received.
        let resp = respond(&one(&out, "[2001:db8::10]:5060").data, 200, "OK", Some("x"), None, "");
        let back = l.send("[2001:db8::10]:5060", &resp);
        assert_eq!(to(&back, UA6).len(), 1, "{:#?}", back.iter().map(text).collect::<Vec<_>>());
    }
}
