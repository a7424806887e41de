//! The rtpproxy control protocol (sippy rtpproxy, protocol 20040107 with
//! the extensions Kamailio's `rtpproxy` module uses): one command per
//! datagram (UDP, after a cookie) or per write (Unix stream, no cookie).
//!
//! | command | reply |
//! |---------|-------|
//! | `V` | `20040107` |
//! | `VF <yyyymmdd>` | `1` if that capability is supported, else `0` |
//! | `U[mods] callid addr port from_tag [to_tag]` | `port addr` (+ ` 6` for IPv6) |
//! | `L[mods] callid addr port offerer_tag answerer_tag` | same; `0` when the session is unknown |
//! | `D callid from_tag [to_tag]` | `0` |
//! | `Q[v] callid from_tag to_tag [counters]` | `ttl npkts_ina npkts_ino nrelayed ndropped` |
//! | `I[b]` | text statistics |
//!
//! Modifiers of U/L: `6` (the address is IPv6), `e`/`i` (bridging: the
//! first names the sender's interface, the second the other leg's, mapped
//! to `rtpproxy-external`/`rtpproxy-internal`), `a`, `s`, `w`, `z<ptime>`,
//! `c<codecs>` accepted and ignored. An address that is not of the
//! family the modifiers say (or a bad port) leaves the far end to latching,
//! as rtpproxy does. Errors are `E<code>` with sippy's codes: 0 unknown
//! command, 1 wrong argument count, 2 bad modifier, 31 unusable interface,
//! 32 media address refused by the media address policy, 50 unknown
//! session, 62 bad counter name, 71 no ports, 72 the interface address is
//! not on the host (or another bind failure), 81 out of file descriptors.
//!
//! Tags may carry Kamailio's `;<n>` media-number suffix; it selects the
//! media stream of the call (1-based).

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::core::{Core, CoreError, MediaReq, Placement};

/// Protocol version `V` returns.
pub const VERSION: &str = "20040107";

/// Capabilities answered `1` to `VF`.
pub const CAPABILITIES: &[&str] = &[
    "20040107", // basic RTP proxy functionality
    "20050322", // multiple RTP sessions per call (media number in tags)
    "20060704", // extra parameter in V command
    "20071116", // codecs in U/L (accepted, not acted on)
    "20080403", // RTP statistics querying (Q)
    "20081102", // codecs in U/L
    "20090810", // automatic bridging
];

const E_CMDUNKN: u32 = 0;
const E_NARGS: u32 = 1;
const E_MODS: u32 = 2;
const E_INVLARG: u32 = 31;
const E_SESUNKN: u32 = 50;
const E_QRYFAIL: u32 = 62;
const E_LSTFAIL: u32 = 71;
const E_LSTFAIL_2: u32 = 72;
const E_NOMEM: u32 = 81;
const E_INVLARG_ADDR: u32 = 32;

/// Handles one command. With `cookie`, the first word is a cookie echoed
/// before the reply (UDP); without, the reply is bare (Unix socket).
/// None when there is nothing to answer (empty, or a cookie alone).
pub fn handle(core: &mut Core, msg: &[u8], cookie: bool) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(msg);
    let mut words: Vec<&str> = text.split_ascii_whitespace().collect();
    let ck = if cookie {
        if words.is_empty() {
            return None;
        }
        Some(words.remove(0))
    } else {
        None
    };
    if words.is_empty() {
        return None;
    }
    let reply = command(core, &words).unwrap_or_else(|code| {
        core.totals.control_errors += 1;
        tracing::debug!(cmd = words[0], code, "rtpproxy error reply");
        format!("E{code}")
    });
    let mut out = String::new();
    if let Some(c) = ck {
        out.push_str(c);
        out.push(' ');
    }
    out.push_str(&reply);
    out.push('\n');
    tracing::debug!(command = %text.trim_end(), reply = %reply, "rtpproxy");
    Some(out.into_bytes())
}

fn split_tag(t: &str) -> (&str, usize) {
    match t.rsplit_once(';') {
        Some((tag, n)) => match n.parse::<usize>() {
            Ok(n) if (1..=crate::sdp::MAX_MEDIA).contains(&n) => (tag, n - 1),
            _ => (t, 0),
        },
        None => (t, 0),
    }
}

fn command(core: &mut Core, w: &[&str]) -> Result<String, u32> {
    let cmd = w[0];
    let mut chars = cmd.chars();
    let op = chars.next().map(|c| c.to_ascii_uppercase()).ok_or(E_CMDUNKN)?;
    let mods: String = chars.collect();
    match op {
        'V' => {
            if mods.eq_ignore_ascii_case("F") {
                let cap = w.get(1).ok_or(E_NARGS)?;
                Ok(if CAPABILITIES.contains(cap) { "1" } else { "0" }.to_string())
            } else if mods.is_empty() {
                Ok(VERSION.to_string())
            } else {
                Err(E_CMDUNKN)
            }
        }
        'U' | 'L' => update(core, op == 'U', &mods, w),
        'D' => {
            if !(3..=4).contains(&w.len()) {
                return Err(E_NARGS);
            }
            let (ft, _) = split_tag(w[2]);
            let tt = w.get(3).map(|t| split_tag(t).0);
            match core.delete(w[1], Some(ft)) {
                Ok(_) => Ok("0".into()),
                Err(_) => match tt {
                    Some(tt) => core.delete(w[1], Some(tt)).map(|_| "0".into()).map_err(|_| E_SESUNKN),
                    None => Err(E_SESUNKN),
                },
            }
        }
        'Q' => query(core, &mods, w),
        'I' => {
            if !mods.is_empty() && !mods.eq_ignore_ascii_case("b") {
                return Err(E_MODS);
            }
            let p = core.packet_totals();
            let rx = p.rtp_packets + p.rtcp_packets;
            Ok(format!(
                "sessions created: {}\nactive sessions: {}\nactive streams: {}\npackets received: {}\npackets transmitted: {}",
                core.totals.calls_created,
                core.call_count(),
                core.stream_count(),
                rx + p.dropped,
                rx
            ))
        }
        'X' => {
            for c in core.list(usize::MAX) {
                let _ = core.delete(&c, None);
            }
            Ok("0".into())
        }
        _ => Err(E_CMDUNKN),
    }
}

fn update(core: &mut Core, offer: bool, mods: &str, w: &[&str]) -> Result<String, u32> {
    let n = w.len();
    if offer && !(5..=8).contains(&n) || !offer && !(6..=8).contains(&n) {
        return Err(E_NARGS);
    }
    let (call_id, addr, port) = (w[1], w[2], w[3]);
    let (from_tag, idx) = split_tag(w[4]);
    let to_tag = w.get(5).map(|t| split_tag(t).0);
    let mut v6 = false;
    let mut ifaces: Vec<&str> = Vec::new();
    let cfg = core.config();
    let mut it = mods.chars().peekable();
    while let Some(c) = it.next() {
        match c.to_ascii_lowercase() {
            '6' => v6 = true,
            'e' | 'i' => {
                let name = if c.eq_ignore_ascii_case(&'e') { &cfg.rtpproxy_external } else { &cfg.rtpproxy_internal };
                let name = name.as_deref().ok_or(E_MODS)?;
                if ifaces.len() == 2 {
                    return Err(E_MODS);
                }
                ifaces.push(name);
            }
            'a' | 's' | 'w' | 'n' => {}
            'z' | 'c' => {
                while it.peek().is_some_and(|c| c.is_ascii_digit() || *c == ',') {
                    it.next();
                }
            }
            _ => {} // rtpproxy logs and ignores unknown modifiers
        }
    }
    // As rtpproxy: an address that does not parse in the family the
    // modifiers say (Kamailio sends the SIP source address, which may be
    // of the other family) leaves the far end unknown until latching
    // learns it; it is not an error.
    let port: Option<u16> = port.parse().ok();
    let ip: Option<IpAddr> = addr.parse().ok().filter(|ip: &IpAddr| ip.is_ipv6() == v6 && port.is_some());
    let port = port.unwrap_or(0);
    let to_v6 = |name: Option<&str>| -> Option<bool> {
        let i = cfg.interfaces.iter().find(|i| Some(i.name.as_str()) == name)?;
        match (i.ipv4.is_some(), i.ipv6.is_some()) {
            (true, false) => Some(false),
            (false, true) => Some(true),
            _ => None,
        }
    };
    let place = Placement {
        from_iface: ifaces.first().map(|s| s.to_string()),
        to_iface: ifaces.get(1).map(|s| s.to_string()),
        to_v6: to_v6(ifaces.get(1).copied()),
        // rtpproxy names no signalling source: the media address is the client.
        client: None,
    };
    let mut media: Vec<Option<MediaReq>> = vec![None; idx];
    media.push(Some(MediaReq {
        kind: "audio".into(),
        proto: "RTP/AVP".into(),
        addr: ip,
        family_v6: v6,
        port,
        ..MediaReq::default()
    }));
    // U: the first tag is the offerer's. L: the offerer's tag, then the
    // answerer's (Kamailio's rtpproxy module swaps From/To tags exactly
    // when that makes it so: a late offer in a reply, an answer in ACK).
    let (ft, tt) = if offer { (from_tag, None) } else { (from_tag, to_tag) };
    match core.signal(offer, call_id, ft, tt, &media, &place) {
        Ok(a) => match a.get(idx).copied().flatten() {
            Some(a) => Ok(format!("{} {}{}", a.port, a.addr, if a.addr.is_ipv6() { " 6" } else { "" })),
            None => Ok("0".into()),
        },
        Err(CoreError::NoPorts(_)) | Err(CoreError::ClientLimit { .. }) => Err(E_LSTFAIL),
        Err(CoreError::AddressNotOnHost(_)) | Err(CoreError::Bind(..)) => Err(E_LSTFAIL_2),
        Err(CoreError::Descriptors { .. }) => Err(E_NOMEM),
        Err(CoreError::Refused { .. }) => Err(E_INVLARG_ADDR),
        Err(CoreError::UnknownCall) if !offer => Ok("0".into()),
        Err(CoreError::UnknownCall) => Err(E_SESUNKN),
        Err(CoreError::Invalid(_)) if !offer => Ok("0".into()),
        Err(CoreError::Invalid(_)) => Err(E_INVLARG),
    }
}

fn query(core: &mut Core, mods: &str, w: &[&str]) -> Result<String, u32> {
    let verbose = match mods.to_ascii_lowercase().as_str() {
        "" => false,
        "v" => true,
        _ => return Err(E_MODS),
    };
    if w.len() < 4 {
        return Err(E_NARGS);
    }
    let (ft, idx) = split_tag(w[2]);
    let call = core.call(w[1]).ok_or(E_SESUNKN)?;
    let tt = split_tag(w[3]).0;
    let mine = if call.from_tag == ft {
        0
    } else if call.to_tag.as_deref() == Some(ft) || call.from_tag == tt {
        1
    } else {
        return Err(E_SESUNKN);
    };
    let s = call.media.get(idx).and_then(Option::as_ref).ok_or(E_SESUNKN)?;
    let idle_s = Instant::now().saturating_duration_since(call.last_activity(core.epoch())).as_secs();
    let ttl = core.config().timeout_secs.saturating_sub(idle_s);
    let sl = &s.stats.slots;
    let ina = sl[mine * 2].packets.load(Relaxed);
    let ino = sl[(mine ^ 1) * 2].packets.load(Relaxed);
    let relayed: u64 = sl.iter().map(|x| x.packets.load(Relaxed)).sum();
    let dropped: u64 = sl.iter().map(|x| x.dropped.load(Relaxed)).sum();
    let lost = sl[mine * 2].lost.load(Relaxed);
    let names: Vec<&str> =
        if w.len() > 4 { w[4..].to_vec() } else { vec!["ttl", "npkts_ina", "npkts_ino", "nrelayed", "ndropped"] };
    let mut out = Vec::new();
    for n in names {
        let v = match n {
            "ttl" => ttl,
            "npkts_ina" => ina,
            "npkts_ino" => ino,
            "nrelayed" => relayed,
            "ndropped" => dropped,
            "rtpa_nlost" => lost,
            _ => return Err(E_QRYFAIL),
        };
        out.push(if verbose { format!("{n}={v}") } else { v.to_string() });
    }
    Ok(out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::NullPlane;

    fn core() -> Core {
        let mut cfg = crate::core::tests_support::config();
        cfg.rtpproxy_internal = Some("v4".into());
        cfg.rtpproxy_external = Some("v6".into());
        Core::new(cfg, Box::new(NullPlane), Instant::now())
    }

    fn run(c: &mut Core, s: &str) -> String {
        String::from_utf8(handle(c, s.as_bytes(), true).unwrap()).unwrap()
    }

    #[test]
    fn version_and_capabilities() {
        let mut c = core();
        assert_eq!(run(&mut c, "123 V"), "123 20040107\n");
        assert_eq!(run(&mut c, "123 VF 20050322"), "123 1\n");
        assert_eq!(run(&mut c, "123 VF 20991231"), "123 0\n");
        assert_eq!(run(&mut c, "123 VF"), "123 E1\n");
        assert_eq!(String::from_utf8(handle(&mut c, b"V\n", false).unwrap()).unwrap(), "20040107\n");
    }

    #[test]
    fn update_lookup_query_delete_bridged_6_to_4() {
        let mut c = core();
        // INVITE from the IPv6 side (external) towards IPv4 (internal): "ei".
        assert_eq!(run(&mut c, "1 U6ei cid 2001:db8:6::10 9002 ft;1"), "1 30000 198.51.100.1\n");
        // 200 OK from the IPv4 side: the offerer's tag first (Kamailio
        // sends the From and To tags of the reply unswapped).
        assert_eq!(run(&mut c, "2 Lie cid 192.0.2.50 9000 ft;1 tt;1"), "2 30000 2001:db8::1 6\n");
        let call = c.call("cid").unwrap();
        assert_eq!((call.from_tag.as_str(), call.to_tag.as_deref()), ("ft", Some("tt")));
        let s = call.media[0].as_ref().unwrap();
        assert_eq!(s.peers[2], Some("192.0.2.50:9000".parse().unwrap()), "the answerer faces leg B");
        // A re-INVITE from the callee (its tag first) updates leg B again.
        assert_eq!(run(&mut c, "2 Uie cid 192.0.2.51 9100 tt;1 ft;1"), "2 30000 2001:db8::1 6\n");
        let s = c.call("cid").unwrap().media[0].as_ref().unwrap();
        assert_eq!(s.peers[2], Some("192.0.2.51:9100".parse().unwrap()));
        assert_eq!(run(&mut c, "3 Q cid ft;1 tt;1"), "3 60 0 0 0 0\n");
        assert_eq!(run(&mut c, "3 Qv cid ft;1 tt;1 ttl nrelayed"), "3 ttl=60 nrelayed=0\n");
        assert_eq!(run(&mut c, "3 Q cid ft;1 tt;1 bogus"), "3 E62\n");
        let i = run(&mut c, "4 I");
        assert!(i.contains("active sessions: 1\n"), "{i}");
        assert_eq!(run(&mut c, "5 D cid ft tt"), "5 0\n");
        assert_eq!(run(&mut c, "6 D cid ft tt"), "6 E50\n");
        assert_eq!(run(&mut c, "7 Q cid ft tt"), "7 E50\n");
        assert_eq!(run(&mut c, "8 L cid 192.0.2.50 9000 ft tt"), "8 0\n");
    }

    #[test]
    fn plain_update_keeps_family() {
        let mut c = core();
        assert_eq!(run(&mut c, "1 U c2 192.0.2.7 4000 a"), "1 30002 198.51.100.1\n");
        assert_eq!(run(&mut c, "1 U6 c3 2001:db8::7 4000 a"), "1 30002 2001:db8::1 6\n");
    }

    #[test]
    fn malformed_commands() {
        let mut c = core();
        for (cmd, want) in [
            ("1 Z", "1 E0\n"),
            ("1 U", "1 E1\n"),
            ("1 U cid 1.2.3.4", "1 E1\n"),
            ("1 Ueee cid 1.2.3.4 4000 ft", "1 E2\n"),
            ("1 D", "1 E1\n"),
            ("1 Q cid", "1 E1\n"),
            ("1 Qx cid a b", "1 E2\n"),
            ("1 Ix", "1 E2\n"),
            ("1 VX", "1 E0\n"),
        ] {
            assert_eq!(run(&mut c, cmd), want, "{cmd}");
        }
        assert!(handle(&mut c, b"", true).is_none());
        assert!(handle(&mut c, b"cookieonly", true).is_none());
        assert_eq!(c.totals.control_errors, 9);
    }

    #[test]
    fn unusable_address_is_left_to_latching() {
        let mut c = core();
        // Kamailio's shape when the SIP source is IPv4 and the SDP IPv6.
        assert_eq!(
            run(&mut c, "1 UEI6c0 k 127.0.0.1 9002 ft;1"),
            "1 30000 192.0.2.1\n".replace("192.0.2.1", "198.51.100.1")
        );
        let s = c.call("k").unwrap().media[0].as_ref().unwrap();
        assert_eq!(s.peers[0], None);
        assert!(run(&mut c, "2 U x 1.2.3.4 notaport ft").starts_with("2 3"));
        assert!(run(&mut c, "3 U6 y 2001:db8::9 4000 ft").ends_with(" 6\n"));
    }

    #[test]
    fn refused_media_address_is_e32() {
        let mut c = core();
        assert_eq!(run(&mut c, "1 U c1 127.0.0.1 5555 a"), "1 E32\n");
        assert_eq!(run(&mut c, "1 U6 c1 ff02::1 5555 a"), "1 E32\n");
        assert!(c.call("c1").is_none());
        assert_eq!(c.totals.media_refused, 2);
    }

    #[test]
    fn exhaustion_is_e71() {
        let mut c = core();
        for i in 0..2 {
            assert!(!run(&mut c, &format!("1 U c{i} 192.0.2.7 4000 a")).contains('E'));
        }
        assert_eq!(run(&mut c, "1 U c9 192.0.2.7 4000 a"), "1 E71\n");
    }
}
