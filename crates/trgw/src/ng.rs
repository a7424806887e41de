//! rtpengine's "ng" control protocol: a datagram `<cookie> <dictionary>`,
//! the dictionary bencoded (or JSON, starting with `{`); the reply is the
//! same cookie, a space and a dictionary in the same encoding, always with
//! `result` (`ok`, `pong`, `error`) and `error-reason` on errors.
//!
//! Commands: `ping`, `offer`, `answer`, `delete`, `query`, `list`,
//! `statistics`. Keys are matched with spaces, dashes and underscores
//! treated alike (`received from` = `received-from`), as rtpengine does.

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::bencode::{self, Value};
use crate::cookie_cache::CookieCache;
use crate::core::{unix_now, Call, Core, CoreError, MediaReq, Placement, Stream};
use crate::sdp::{MediaRewrite, Rewrite, Sdp};

/// Largest ng datagram accepted.
pub const MAX_MESSAGE: usize = 65_535;
/// Largest reply sent: the UDP payload limit over IPv4 (65,535 minus the
/// IPv4 and UDP headers). A longer reply is replaced by an error reply and
/// counted ([`crate::core::Totals::replies_too_large`]), never silently lost.
pub const MAX_REPLY: usize = 65_507;

fn norm(k: &[u8]) -> Vec<u8> {
    k.iter().map(|&b| if b == b' ' || b == b'_' { b'-' } else { b.to_ascii_lowercase() }).collect()
}

/// Dictionary access with rtpengine's key spelling rules.
struct Req<'a>(&'a [(Vec<u8>, Value)]);

impl<'a> Req<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        let want = norm(key.as_bytes());
        self.0.iter().find(|(k, _)| norm(k) == want).map(|(_, v)| v)
    }

    fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    /// A list of strings (a single string counts as a list of one).
    fn list(&self, key: &str) -> Vec<&'a str> {
        match self.get(key) {
            Some(Value::List(l)) => l.iter().filter_map(Value::as_str).collect(),
            Some(v) => v.as_str().into_iter().collect(),
            None => Vec::new(),
        }
    }

    fn has_flag(&self, flag: &str) -> bool {
        let want = norm(flag.as_bytes());
        self.list("flags").iter().any(|f| norm(f.as_bytes()) == want)
    }
}

fn d(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(pairs.into_iter().map(|(k, v)| (k.as_bytes().to_vec(), v)).collect())
}

fn error(reason: &str) -> Value {
    d(vec![("result", Value::str("error")), ("error-reason", Value::str(reason))])
}

/// Splits a datagram into (cookie, body); None when there is no cookie to
/// answer with (or it is longer than [`MAX_MESSAGE`]).
fn split(msg: &[u8]) -> Option<(&[u8], &[u8])> {
    if msg.len() > MAX_MESSAGE {
        return None;
    }
    let sp = msg.iter().position(|&b| b == b' ')?;
    let (cookie, body) = (&msg[..sp], &msg[sp + 1..]);
    if cookie.is_empty() {
        return None;
    }
    Some((cookie, body))
}

/// Handles one datagram without a reply cache; None when it has no cookie
/// to answer with. The reply is at most [`MAX_REPLY`] bytes.
pub fn handle(core: &mut Core, msg: &[u8]) -> Option<Vec<u8>> {
    let (cookie, body) = split(msg)?;
    Some(execute(core, cookie, body))
}

/// [`handle`] with the reply cache of the listener: a retransmitted
/// cookie is answered from `cache` without running the command again.
pub fn handle_cached(core: &mut Core, cache: &mut CookieCache, msg: &[u8]) -> Option<Vec<u8>> {
    let (cookie, body) = split(msg)?;
    let now = Instant::now();
    if let Some(r) = cache.get(cookie, now) {
        tracing::debug!(cookie = %String::from_utf8_lossy(cookie), "retransmitted ng command answered from the cache");
        return Some(r);
    }
    let out = execute(core, cookie, body);
    cache.put(cookie, &out, now);
    Some(out)
}

fn encode(cookie: &[u8], reply: &Value, json: bool) -> Vec<u8> {
    let mut out = cookie.to_vec();
    out.push(b' ');
    if json {
        out.extend_from_slice(reply.to_json().to_string().as_bytes());
    } else {
        reply.encode_into(&mut out);
    }
    out
}

fn execute(core: &mut Core, cookie: &[u8], body: &[u8]) -> Vec<u8> {
    let json = body.first() == Some(&b'{');
    let mut reply = match parse(body, json) {
        Ok(v) => dispatch(core, &v),
        Err(e) => error(&e),
    };
    let mut out = encode(cookie, &reply, json);
    if out.len() > MAX_REPLY {
        core.totals.replies_too_large += 1;
        tracing::warn!(
            bytes = out.len(),
            limit = MAX_REPLY,
            "ng reply too large for a datagram; an error is sent instead"
        );
        reply = error(&format!(
            "Reply too large ({} bytes; a datagram holds {MAX_REPLY}): use a smaller limit or query single calls",
            out.len()
        ));
        out = encode(cookie, &reply, json);
    }
    if reply.get("result").and_then(Value::as_str) == Some("error") {
        core.totals.control_errors += 1;
        let reason = reply.get("error-reason").and_then(|v| v.as_str()).unwrap_or("");
        tracing::debug!(reason, "ng error reply");
    }
    out
}

fn parse(body: &[u8], json: bool) -> Result<Value, String> {
    if json {
        let j: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("Failed to decode JSON: {e}"))?;
        if !j.is_object() {
            return Err("Could not decode dictionary".into());
        }
        Ok(Value::from_json(&j))
    } else {
        let v = bencode::decode(body).map_err(|_| "Could not decode bencode dictionary".to_string())?;
        if !matches!(v, Value::Dict(_)) {
            return Err("Could not decode bencode dictionary".into());
        }
        Ok(v)
    }
}

fn dispatch(core: &mut Core, v: &Value) -> Value {
    let Value::Dict(pairs) = v else { return error("Could not decode bencode dictionary") };
    let req = Req(pairs);
    let Some(cmd) = req.str("command") else { return error("No command in message") };
    let r = match cmd.to_ascii_lowercase().as_str() {
        "ping" => Ok(d(vec![("result", Value::str("pong"))])),
        "offer" => signal(core, &req, true),
        "answer" => signal(core, &req, false),
        "delete" => delete(core, &req),
        "query" => query(core, &req),
        "list" => Ok(list(core, &req)),
        "statistics" => Ok(statistics(core)),
        _ => Err("Unrecognized command".to_string()),
    };
    r.unwrap_or_else(|e| error(&e))
}

/// Runs one ng command dictionary in-process (no cookie, no datagram, no
/// reply cache): what the IMS-ALG calls instead of sending the same
/// dictionary over UDP. Errors are `result: error` replies, as on the wire,
/// and are counted in `control_errors`.
pub fn command(core: &mut Core, req: &Value) -> Value {
    let reply = dispatch(core, req);
    if reply.get("result").and_then(Value::as_str) == Some("error") {
        core.totals.control_errors += 1;
    }
    reply
}

fn core_err(e: CoreError) -> String {
    e.to_string()
}

fn parse_family(s: &str) -> Option<bool> {
    match s.to_ascii_uppercase().as_str() {
        "IP4" | "IPV4" => Some(false),
        "IP6" | "IPV6" => Some(true),
        _ => None,
    }
}

/// An offer or answer with typed arguments: what an ng `offer` /
/// `answer` dictionary says, for callers in the same process (the
/// IMS-ALG) that have no need for a dictionary. [`offer_answer`] runs it;
/// the ng listener parses its dictionaries into the same struct, so both
/// get the same replies and the same TrGW state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signal<'a> {
    /// `offer` (else `answer`).
    pub offer: bool,
    /// `call-id`.
    pub call_id: &'a str,
    /// `from-tag`: the offerer's tag.
    pub from_tag: &'a str,
    /// `to-tag`: the answerer's tag, when known.
    pub to_tag: Option<&'a str>,
    /// `sdp`.
    pub sdp: &'a [u8],
    /// `direction[0]`: the interface of the sender's leg (None: the
    /// relay's choice).
    pub from_iface: Option<&'a str>,
    /// `direction[1]`: the interface of the other leg.
    pub to_iface: Option<&'a str>,
    /// `address family` of the other leg (Some(true): IPv6).
    pub to_v6: Option<bool>,
    /// The sender's media address instead of the SDP's (`media address`,
    /// or `received from` with `SIP source address`); None: the SDP's
    /// (rtpengine's `trust address`).
    pub media_addr: Option<IpAddr>,
    /// Rewrite `o=` too (`replace: origin`).
    pub replace_origin: bool,
    /// Drop ICE attributes (`ICE: remove`).
    pub remove_ice: bool,
    /// Who sent the signalling (ng `received from`; the ALG's SIP
    /// source): the client whose share a new call's streams count in.
    pub client: Option<IpAddr>,
}

/// Runs an offer or answer ([`Signal`]); the rewritten SDP, or the
/// error reason an ng reply would carry. Errors are counted in
/// `control_errors`, as [`command`] counts its error replies.
pub fn offer_answer(core: &mut Core, sig: &Signal) -> Result<Vec<u8>, String> {
    let r = check_ids(sig.call_id, sig.from_tag)
        .and_then(|()| parse_sdp(sig.sdp))
        .and_then(|sdp| run_signal(core, sig, &sdp));
    if r.is_err() {
        core.totals.control_errors += 1;
    }
    r
}

/// Deletes call `call_id` (only when its offerer's tag is `from_tag`,
/// when given): what an ng `delete` does. Errors are counted in
/// `control_errors`.
pub fn delete_call(core: &mut Core, call_id: &str, from_tag: Option<&str>) -> Result<Call, String> {
    let r = delete_typed(core, call_id, from_tag);
    if r.is_err() {
        core.totals.control_errors += 1;
    }
    r
}

fn check_ids(call_id: &str, from_tag: &str) -> Result<(), String> {
    if call_id.is_empty() {
        return Err("No call-id in message".into());
    }
    if from_tag.is_empty() {
        return Err("No from-tag in message".into());
    }
    Ok(())
}

fn parse_sdp(body: &[u8]) -> Result<Sdp, String> {
    Sdp::parse(body).map_err(|e| format!("Failed to parse SDP: {}", e.0))
}

fn signal(core: &mut Core, req: &Req, offer: bool) -> Result<Value, String> {
    let call_id = req.str("call-id").unwrap_or("");
    let from_tag = req.str("from-tag").unwrap_or("");
    check_ids(call_id, from_tag)?;
    let to_tag = req.str("to-tag").filter(|s| !s.is_empty());
    let sdp_bytes = req.get("sdp").and_then(Value::as_bytes).ok_or("No SDP body in message")?;
    let sdp = parse_sdp(sdp_bytes)?;

    let dir = req.list("direction");
    let iface = |i: usize| dir.get(i).copied().filter(|s| !s.is_empty() && *s != "round-robin-calls");
    let mut sig = Signal {
        offer,
        call_id,
        from_tag,
        to_tag,
        sdp: sdp_bytes,
        from_iface: iface(0),
        to_iface: iface(1),
        ..Signal::default()
    };
    if let Some(f) = req.str("address-family") {
        sig.to_v6 = Some(parse_family(f).ok_or_else(|| format!("Unsupported address family '{f}'"))?);
    }
    // The sender's address: `media address`, or with `SIP source address`
    // the `received from` address, or (default, rtpengine's `trust address`)
    // the SDP's.
    // `received from` (Kamailio sends the SIP source of every offer and
    // answer) is also the client whose share the call counts in; a
    // malformed one is an error only where it would be the media address.
    let received_from = match req.list("received-from")[..] {
        [fam, addr] => Some(match addr.parse::<IpAddr>() {
            Ok(ip) if parse_family(fam) == Some(ip.is_ipv6()) => Ok(ip),
            Ok(_) => Err("Inconsistent received-from address family".to_string()),
            Err(_) => Err(format!("Failed to parse received-from address '{addr}'")),
        }),
        _ => None,
    };
    sig.client = received_from.clone().and_then(Result::ok);
    if let Some(m) = req.str("media-address") {
        sig.media_addr = Some(m.trim().parse().map_err(|_| format!("Failed to parse media address '{m}'"))?);
    } else if req.has_flag("SIP-source-address") && !req.has_flag("trust-address") {
        sig.media_addr = received_from.transpose()?;
    }
    let replace = req.list("replace");
    sig.replace_origin = replace.iter().any(|r| norm(r.as_bytes()) == b"origin") || req.has_flag("replace-origin");
    sig.remove_ice = req.str("ICE").is_some_and(|s| s.eq_ignore_ascii_case("remove"));
    let out = run_signal(core, &sig, &sdp)?;
    Ok(d(vec![("result", Value::str("ok")), ("sdp", Value::Bytes(out))]))
}

/// The one home of offer/answer: the core allocates or updates the legs,
/// the SDP is rewritten to them.
fn run_signal(core: &mut Core, sig: &Signal, sdp: &Sdp) -> Result<Vec<u8>, String> {
    let place = Placement {
        from_iface: sig.from_iface.map(str::to_string),
        to_iface: sig.to_iface.map(str::to_string),
        to_v6: sig.to_v6,
        client: sig.client,
    };
    let media: Vec<Option<MediaReq>> = sdp
        .media
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if m.port == 0 {
                return None;
            }
            let addr = sig.media_addr.or_else(|| sdp.media_addr(i));
            let rtcp = m.rtcp.and_then(|(p, a)| a.or(addr).map(|a| std::net::SocketAddr::new(a, p)));
            Some(MediaReq {
                kind: m.kind.clone(),
                proto: m.proto.clone(),
                addr,
                family_v6: addr.is_some_and(|a| a.is_ipv6()),
                port: m.port,
                rtcp,
                rtcp_mux: m.rtcp_mux,
                clock: m.rtpmap.clone(),
            })
        })
        .collect();
    let to_tag = sig.to_tag.filter(|s| !s.is_empty());
    let adverts = core.signal(sig.offer, sig.call_id, sig.from_tag, to_tag, &media, &place).map_err(core_err)?;
    let rw = Rewrite {
        media: adverts.iter().map(|a| a.map(|a| MediaRewrite { addr: a.addr, port: a.port })).collect(),
        origin: sig.replace_origin,
        remove_ice: sig.remove_ice,
    };
    Ok(sdp.rewrite(&rw).into_bytes())
}

fn totals_of(call: &Call) -> Value {
    let (mut rtp, mut rtcp) = ([0u64; 3], [0u64; 3]);
    for s in call.media.iter().flatten() {
        for (k, st) in s.stats.slots.iter().enumerate() {
            let t = if k & 1 == 0 { &mut rtp } else { &mut rtcp };
            t[0] += st.packets.load(Relaxed);
            t[1] += st.bytes.load(Relaxed);
            t[2] += st.dropped.load(Relaxed);
        }
    }
    let one = |t: [u64; 3]| {
        d(vec![
            ("packets", Value::Int(t[0] as i64)),
            ("bytes", Value::Int(t[1] as i64)),
            ("errors", Value::Int(t[2] as i64)),
        ])
    };
    d(vec![("RTP", one(rtp)), ("RTCP", one(rtcp))])
}

fn endpoint(a: std::net::SocketAddr) -> Value {
    d(vec![
        ("family", Value::str(if a.is_ipv4() { "IPv4" } else { "IPv6" })),
        ("address", Value::str(&a.ip().to_string())),
        ("port", Value::Int(i64::from(a.port()))),
    ])
}

fn unix_of(core: &Core, ns: u64) -> i64 {
    if ns == 0 {
        return 0;
    }
    let at = core.epoch() + std::time::Duration::from_nanos(ns);
    let ago = Instant::now().saturating_duration_since(at).as_secs();
    unix_now().saturating_sub(ago) as i64
}

/// The streams of one leg (0 = A, 1 = B) of a media, rtpengine style.
fn leg_streams(core: &Core, s: &Stream, leg: usize) -> Value {
    let mut v = Vec::new();
    for k in [leg * 2, leg * 2 + 1] {
        let st = &s.stats.slots[k];
        let latched = st.latched.lock().ok().and_then(|g| *g);
        let mut flags = vec![Value::str(if k & 1 == 0 { "RTP" } else { "RTCP" })];
        if s.peers[k].is_some() {
            flags.push(Value::str("filled"));
        }
        if latched.is_some() {
            flags.push(Value::str("confirmed"));
        }
        let mut e = vec![("local port", Value::Int(i64::from(s.local(k).port())))];
        if let Some(p) = latched.or(s.peers[k]) {
            e.push(("endpoint", endpoint(p)));
        }
        if let Some(p) = s.peers[k] {
            e.push(("advertised endpoint", endpoint(p)));
        }
        e.push(("last packet", Value::Int(unix_of(core, st.last_ns.load(Relaxed)))));
        e.push(("flags", Value::List(flags)));
        e.push((
            "stats",
            d(vec![
                ("packets", Value::Int(st.packets.load(Relaxed) as i64)),
                ("bytes", Value::Int(st.bytes.load(Relaxed) as i64)),
                ("errors", Value::Int(st.dropped.load(Relaxed) as i64)),
                ("lost", Value::Int(st.lost.load(Relaxed) as i64)),
                ("jitter", Value::Int(i64::from(st.jitter.load(Relaxed)))),
            ]),
        ));
        v.push(d(e));
    }
    Value::List(v)
}

fn tag_entry(core: &Core, call: &Call, leg: usize) -> Value {
    let (tag, other) = if leg == 0 {
        (call.from_tag.clone(), call.to_tag.clone().unwrap_or_default())
    } else {
        (call.to_tag.clone().unwrap_or_default(), call.from_tag.clone())
    };
    let medias: Vec<Value> = call
        .media
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
        .map(|(i, s)| {
            d(vec![
                ("index", Value::Int(i as i64 + 1)),
                ("type", Value::str(&s.kind)),
                ("protocol", Value::str(&s.proto)),
                ("streams", leg_streams(core, s, leg)),
            ])
        })
        .collect();
    d(vec![
        ("tag", Value::str(&tag)),
        ("created", Value::Int(call.created_unix as i64)),
        ("in dialogue with", Value::str(&other)),
        ("medias", Value::List(medias)),
    ])
}

fn call_summary(call: &Call) -> Vec<(&'static str, Value)> {
    vec![
        ("result", Value::str("ok")),
        ("created", Value::Int(call.created_unix as i64)),
        ("created_us", Value::Int(0)),
        ("last signal", Value::Int(call.last_signal_unix as i64)),
    ]
}

fn query(core: &mut Core, req: &Req) -> Result<Value, String> {
    let call_id = req.str("call-id").filter(|s| !s.is_empty()).ok_or("No call-id in message")?;
    let call = core.call(call_id).ok_or("Unknown call-id")?;
    let mut r = call_summary(call);
    let mut tags = vec![(call.from_tag.as_bytes().to_vec(), tag_entry(core, call, 0))];
    if let Some(t) = &call.to_tag {
        tags.push((t.as_bytes().to_vec(), tag_entry(core, call, 1)));
    }
    r.push(("tags", Value::Dict(tags)));
    r.push(("totals", totals_of(call)));
    Ok(d(r))
}

fn delete(core: &mut Core, req: &Req) -> Result<Value, String> {
    let call_id = req.str("call-id").unwrap_or("");
    let call = delete_typed(core, call_id, req.str("from-tag"))?;
    let mut r = call_summary(&call);
    r.push(("totals", totals_of(&call)));
    Ok(d(r))
}

fn delete_typed(core: &mut Core, call_id: &str, from_tag: Option<&str>) -> Result<Call, String> {
    if call_id.is_empty() {
        return Err("No call-id in message".into());
    }
    core.delete(call_id, from_tag).map_err(|_| "Call-ID not found or tags didn't match".to_string())
}

fn list(core: &Core, req: &Req) -> Value {
    let limit = req.get("limit").and_then(Value::as_int).unwrap_or(32).clamp(0, 100_000) as usize;
    let calls = core.list(limit).into_iter().map(|c| Value::str(&c)).collect();
    d(vec![("result", Value::str("ok")), ("calls", Value::List(calls))])
}

fn statistics(core: &Core) -> Value {
    let t = core.totals;
    let p = core.packet_totals();
    let n = core.call_count() as i64;
    let current = d(vec![
        ("sessionsown", Value::Int(n)),
        ("sessionsforeign", Value::Int(0)),
        ("sessionstotal", Value::Int(n)),
        ("transcodedmedia", Value::Int(0)),
        ("streams", Value::Int(core.stream_count() as i64)),
    ]);
    let total = d(vec![
        ("uptime", Value::Int(core.epoch().elapsed().as_secs() as i64)),
        ("managedsessions", Value::Int(t.calls_created as i64)),
        ("rejectedsessions", Value::Int(t.port_exhausted as i64)),
        ("timeoutsessions", Value::Int(t.calls_timed_out as i64)),
        ("regularterminatedsessions", Value::Int(t.calls_deleted as i64)),
        ("relayedpackets", Value::Int((p.rtp_packets + p.rtcp_packets) as i64)),
        ("relayedbytes", Value::Int((p.rtp_bytes + p.rtcp_bytes) as i64)),
        ("relayedpacketerrors", Value::Int(p.dropped as i64)),
        ("portexhausted", Value::Int(t.port_exhausted as i64)),
        ("controlerrors", Value::Int(t.control_errors as i64)),
        ("controldenied", Value::Int(t.control_denied as i64)),
    ]);
    d(vec![
        ("result", Value::str("ok")),
        ("statistics", d(vec![("currentstatistics", current), ("totalstatistics", total)])),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::NullPlane;

    fn core() -> Core {
        let mut cfg = crate::core::tests_support::config();
        cfg.port_max = 30011;
        Core::new(cfg, Box::new(NullPlane), Instant::now())
    }

    /// Sends `msg` with its cookie made unique (replies are cached by
    /// cookie); returns the original cookie if the reply echoed ours.
    fn call(c: &mut Core, msg: &[u8]) -> (String, Value) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let sp = msg.iter().position(|&b| b == b' ').unwrap();
        let orig = String::from_utf8(msg[..sp].to_vec()).unwrap();
        let unique = format!("{orig}.{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut m = unique.clone().into_bytes();
        m.extend_from_slice(&msg[sp..]);
        let r = handle(c, &m).expect("a reply");
        let sp = r.iter().position(|&b| b == b' ').unwrap();
        assert_eq!(&r[..sp], unique.as_bytes(), "cookie echoed");
        let cookie = orig;
        let body = &r[sp + 1..];
        let v = if body.first() == Some(&b'{') {
            Value::from_json(&serde_json::from_slice(body).unwrap())
        } else {
            bencode::decode(body).unwrap()
        };
        (cookie, v)
    }

    fn msg(cookie: &str, v: Value) -> Vec<u8> {
        let mut m = format!("{cookie} ").into_bytes();
        v.encode_into(&mut m);
        m
    }

    const SDP6: &str = "v=0\r\no=- 1 1 IN IP6 2001:db8:6::10\r\ns=-\r\nc=IN IP6 2001:db8:6::10\r\nt=0 0\r\nm=audio 9002 RTP/AVP 0\r\na=candidate:1 1 UDP 1 2001:db8:6::10 9002 typ host\r\n";
    const SDP4: &str =
        "v=0\r\no=- 2 2 IN IP4 192.0.2.50\r\ns=-\r\nc=IN IP4 192.0.2.50\r\nt=0 0\r\nm=audio 9000 RTP/AVP 0\r\n";

    #[test]
    fn ping_pong() {
        let mut c = core();
        let (ck, v) = call(&mut c, b"5323_1 d7:command4:pinge");
        assert_eq!(ck, "5323_1");
        assert_eq!(v.get("result").and_then(Value::as_str), Some("pong"));
        let (_, v) = call(&mut c, br#"abc {"command":"ping"}"#);
        assert_eq!(v.get("result").and_then(Value::as_str), Some("pong"));
    }

    #[test]
    fn offer_answer_query_delete_like_kamailio() {
        let mut c = core();
        let offer = d(vec![
            ("sdp", Value::str(SDP6)),
            ("call-id", Value::str("cid1")),
            ("from-tag", Value::str("ft1")),
            ("via-branch", Value::str("z9hG4bK1")),
            ("flags", Value::List(vec![Value::str("trust-address")])),
            ("replace", Value::List(vec![Value::str("origin"), Value::str("session-connection")])),
            ("ICE", Value::str("remove")),
            ("direction", Value::List(vec![Value::str("v6"), Value::str("v4")])),
            ("address family", Value::str("IP4")),
            ("received from", Value::List(vec![Value::str("IP6"), Value::str("2001:db8:6::10")])),
            ("command", Value::str("offer")),
        ]);
        let (_, v) = call(&mut c, &msg("1_1", offer));
        assert_eq!(v.get("result").and_then(Value::as_str), Some("ok"), "{v:?}");
        let sdp = v.get("sdp").and_then(Value::as_str).unwrap();
        assert_eq!(
            sdp,
            "v=0\r\no=- 1 1 IN IP4 198.51.100.1\r\ns=-\r\nc=IN IP4 198.51.100.1\r\nt=0 0\r\nm=audio 30000 RTP/AVP 0\r\na=rtcp:30001\r\n"
        );
        let answer = d(vec![
            ("sdp", Value::str(SDP4)),
            ("call-id", Value::str("cid1")),
            ("from-tag", Value::str("ft1")),
            ("to-tag", Value::str("tt1")),
            ("direction", Value::List(vec![Value::str("v4"), Value::str("v6")])),
            ("address family", Value::str("IP6")),
            ("command", Value::str("answer")),
        ]);
        let (_, v) = call(&mut c, &msg("1_2", answer));
        let sdp = v.get("sdp").and_then(Value::as_str).unwrap();
        assert!(sdp.contains("c=IN IP6 2001:db8::1\r\n") && sdp.contains("m=audio 30000 RTP/AVP 0\r\n"), "{sdp}");
        assert!(sdp.contains("o=- 2 2 IN IP4 192.0.2.50\r\n"), "origin untouched without replace: {sdp}");

        let (_, v) = call(&mut c, b"q d7:command5:query7:call-id4:cid1e");
        assert_eq!(v.get("result").and_then(Value::as_str), Some("ok"));
        let tags = v.get("tags").unwrap();
        let ft = tags.get("ft1").unwrap();
        assert_eq!(ft.get("in dialogue with").and_then(Value::as_str), Some("tt1"));
        let s0 =
            &ft.get("medias").and_then(Value::as_list).unwrap()[0].get("streams").and_then(Value::as_list).unwrap()[0];
        assert_eq!(s0.get("local port").and_then(Value::as_int), Some(30000));
        assert_eq!(s0.get("endpoint").and_then(|e| e.get("address")).and_then(Value::as_str), Some("2001:db8:6::10"));
        assert!(v.get("totals").and_then(|t| t.get("RTP")).is_some());

        let (_, v) = call(&mut c, b"l d7:command4:liste");
        assert_eq!(v.get("calls"), Some(&Value::List(vec![Value::str("cid1")])));
        let (_, v) = call(&mut c, b"s d7:command10:statisticse");
        let cur = v.get("statistics").and_then(|s| s.get("currentstatistics")).unwrap();
        assert_eq!(cur.get("sessionsown"), Some(&Value::Int(1)));

        let (_, v) = call(&mut c, b"d d7:command6:delete7:call-id4:cid18:from-tag3:ft1e");
        assert_eq!(v.get("result").and_then(Value::as_str), Some("ok"));
        let (_, v) = call(&mut c, b"d d7:command6:delete7:call-id4:cid1e");
        assert_eq!(v.get("result").and_then(Value::as_str), Some("error"));
        let (_, v) = call(&mut c, b"q d7:command5:query7:call-id4:cid1e");
        assert_eq!(v.get("error-reason").and_then(Value::as_str), Some("Unknown call-id"));
    }

    #[test]
    fn two_media_streams_and_a_disabled_one() {
        let mut c = core();
        let body = "v=0\r\no=- 1 1 IN IP4 192.0.2.50\r\ns=-\r\nc=IN IP4 192.0.2.50\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\nm=video 4002 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\nm=audio 0 RTP/AVP 0\r\n";
        let (_, v) = call(
            &mut c,
            &msg(
                "m",
                d(vec![
                    ("command", Value::str("offer")),
                    ("call-id", Value::str("mm")),
                    ("from-tag", Value::str("f")),
                    ("sdp", Value::str(body)),
                ]),
            ),
        );
        let sdp = v.get("sdp").and_then(Value::as_str).unwrap();
        assert!(sdp.contains("m=audio 30002 RTP/AVP 0\r\n"), "{sdp}");
        assert!(sdp.contains("m=video 30006 RTP/AVP 96\r\n"), "{sdp}");
        assert!(sdp.contains("m=audio 0 RTP/AVP 0\r\n"), "{sdp}");
        let call = c.call("mm").unwrap();
        assert_eq!(call.media.iter().flatten().count(), 2);
        // Only packets towards the offerer (B -> A, RTP and RTCP) have a far end yet.
        assert_eq!(c.relay_table().len(), 4);
    }

    #[test]
    fn retransmissions_get_the_cached_reply() {
        let mut c = core();
        let offer = msg(
            "kam_1",
            d(vec![
                ("command", Value::str("offer")),
                ("call-id", Value::str("rt")),
                ("from-tag", Value::str("f")),
                ("sdp", Value::str(SDP4)),
            ]),
        );
        let mut cache = CookieCache::default();
        let first = handle_cached(&mut c, &mut cache, &offer).unwrap();
        let del = msg("kam_2", d(vec![("command", Value::str("delete")), ("call-id", Value::str("rt"))]));
        let d1 = handle_cached(&mut c, &mut cache, &del).unwrap();
        // Retransmitted delete: same reply (ok), not "not found".
        assert_eq!(handle_cached(&mut c, &mut cache, &del).unwrap(), d1);
        assert!(String::from_utf8_lossy(&d1).contains("6:result2:ok"));
        // Retransmitted offer: the cached reply, the call is not recreated.
        assert_eq!(handle_cached(&mut c, &mut cache, &offer).unwrap(), first);
        assert!(c.call("rt").is_none());
        assert_eq!(c.totals.calls_created, 1);
        assert_eq!(cache.stats().hits, 2);
        // Without the cache the delete runs again and fails.
        assert!(String::from_utf8_lossy(&handle(&mut c, &del).unwrap()).contains("error"));
    }

    #[test]
    fn a_reply_over_the_datagram_limit_is_an_error_and_counted() {
        let mut c = core();
        // Two calls whose Call-IDs alone fill more than a datagram.
        let long = |i: u8| String::from_utf8(vec![b'a' + i; 40_000]).unwrap();
        for i in 0..2u8 {
            let (_, v) = call(
                &mut c,
                &msg(
                    "k",
                    d(vec![
                        ("command", Value::str("offer")),
                        ("call-id", Value::str(&long(i))),
                        ("from-tag", Value::str("f")),
                        ("sdp", Value::str(SDP4)),
                    ]),
                ),
            );
            assert_eq!(v.get("result").and_then(Value::as_str), Some("ok"));
        }
        let r = handle(&mut c, b"big d7:command4:liste").unwrap();
        assert!(r.len() <= MAX_REPLY);
        let v = bencode::decode(&r[4..]).unwrap();
        assert_eq!(v.get("result").and_then(Value::as_str), Some("error"));
        assert!(v.get("error-reason").and_then(Value::as_str).unwrap().starts_with("Reply too large"));
        assert_eq!(c.totals.replies_too_large, 1);
        // A list that fits is still answered.
        let r = handle(&mut c, b"small d7:command4:list5:limiti1ee").unwrap();
        assert!(String::from_utf8_lossy(&r).contains("6:result2:ok"));
    }

    #[test]
    fn malformed_messages_get_errors() {
        let mut c = core();
        assert!(handle(&mut c, b"nocookie").is_none());
        assert!(handle(&mut c, b" d7:command4:pinge").is_none());
        for (m, reason) in [
            (&b"x d7:command"[..], "Could not decode bencode dictionary"),
            (b"x li1ee", "Could not decode bencode dictionary"),
            (b"x {bad json", "Failed to decode JSON"),
            (b"x de", "No command in message"),
            (b"x d7:command5:fancye", "Unrecognized command"),
            (b"x d7:command5:offere", "No call-id in message"),
            (b"x d7:command5:offer7:call-id1:ae", "No from-tag in message"),
            (b"x d7:command5:offer7:call-id1:a8:from-tag1:be", "No SDP body in message"),
            (b"x d7:command5:offer7:call-id1:a8:from-tag1:b3:sdp3:xyze", "Failed to parse SDP"),
            (b"x d7:command6:answer7:call-id1:z8:from-tag1:b3:sdp3:v=0e", "Unknown call-id"),
            (b"x d7:command6:deletee", "No call-id in message"),
        ] {
            let (_, v) = call(&mut c, m);
            assert_eq!(v.get("result").and_then(Value::as_str), Some("error"), "{:?}", String::from_utf8_lossy(m));
            let r = v.get("error-reason").and_then(Value::as_str).unwrap();
            assert!(r.starts_with(reason), "{r} vs {reason}");
        }
        assert_eq!(c.totals.control_errors, 11);
    }

    #[test]
    fn port_exhaustion_reply() {
        let mut c = core();
        let mk = |i: usize| {
            d(vec![
                ("command", Value::str("offer")),
                ("call-id", Value::str(&format!("c{i}"))),
                ("from-tag", Value::str("f")),
                ("sdp", Value::str(SDP4)),
            ])
        };
        // 6 RTP ports on 192.0.2.1: three calls of two legs each.
        for i in 0..3 {
            let (_, v) = call(&mut c, &msg("k", mk(i)));
            assert_eq!(v.get("result").and_then(Value::as_str), Some("ok"));
        }
        let (_, v) = call(&mut c, &msg("k", mk(9)));
        assert!(v.get("error-reason").and_then(Value::as_str).unwrap().contains("Ran out of ports"));
        assert_eq!(c.totals.port_exhausted, 1);
    }
}
