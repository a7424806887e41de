//! The bench's own small SIP user agents (UDP), for what SIPp cannot do:
//! move its media address (the handover) and carry send times in its RTP
//! (the one-way delay probes). A caller side ([`call`], [`Dialog`]) and a
//! callee side ([`answer`]) — just enough RFC 3261 for one call through a
//! proxy: requests resent until a final response, Record-Route and Contact
//! followed, the 200 OK resent until the ACK.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use alg::msg::{Message, Name};
use anyhow::{anyhow, bail, Result};

use crate::ng::sdp_audio_addr;

/// A host as written in a SIP URI.
pub fn host(ip: IpAddr) -> String {
    super::sipp::uri_host(ip)
}

/// A G.711 audio offer or answer for `ip`:`port` (session version `version`).
pub fn sdp(ip: IpAddr, port: u16, version: u32) -> String {
    let fam = if ip.is_ipv4() { "IP4" } else { "IP6" };
    format!(
        "v=0\r\no=ue 1 {version} IN {fam} {ip}\r\ns=-\r\nc=IN {fam} {ip}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=ptime:20\r\na=sendrecv\r\n"
    )
}

/// `head` (start line and headers, each ending in CRLF) with `body`.
pub fn with_body(head: String, body: &str) -> Vec<u8> {
    let ct = if body.is_empty() { "" } else { "Content-Type: application/sdp\r\n" };
    format!("{head}{ct}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// Sends `req` to `gw` until a final response comes (UDP: resent every
/// 500 ms, 8 times at most); returns it.
pub fn transact(sock: &UdpSocket, gw: SocketAddr, req: &[u8]) -> Result<Vec<u8>> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = vec![0u8; 65536];
    for _ in 0..8 {
        sock.send_to(req, gw)?;
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            let Ok(n) = sock.recv(&mut buf) else { continue };
            let m = Message::parse_datagram(&buf[..n]).map_err(|e| anyhow!("unparsable answer: {e:?}"))?;
            if m.code().is_some_and(|c| c >= 200) {
                return Ok(buf[..n].to_vec());
            }
        }
    }
    bail!("no final response from {gw}")
}

/// The caller's view of its dialog.
pub struct Dialog {
    pub call_id: String,
    pub to_tag: String,
    /// The callee's Contact (the remote target).
    pub target: String,
    /// The route set as Route header lines.
    pub routes: String,
    pub callee: String,
    pub cseq: u32,
    /// The caller's SIP port (on every address it uses).
    pub port: u16,
}

impl Dialog {
    /// An in-dialog request from `from` (a re-INVITE carries a Contact).
    pub fn request(&self, method: &str, from: IpAddr, branch: &str, body: &str) -> Vec<u8> {
        let port = self.port;
        let contact =
            if method == "INVITE" { format!("Contact: <sip:ue@{}:{port}>\r\n", host(from)) } else { String::new() };
        with_body(
            format!(
                "{method} {} SIP/2.0\r\nVia: SIP/2.0/UDP {}:{port};branch={branch}\r\nMax-Forwards: 70\r\n{}\
                 From: <sip:ue@ipv6.bench>;tag=ue\r\nTo: <{}>;tag={}\r\nCall-ID: {}\r\nCSeq: {} {method}\r\n{contact}",
                self.target,
                host(from),
                self.routes,
                self.callee,
                self.to_tag,
                self.call_id,
                self.cseq
            ),
            body,
        )
    }
}

/// Calls `callee` (a `sip:` URI) through `gw` from `sock` (bound to
/// `from`), offering media on `from`:`rtp_port`; acknowledges the 200 OK.
/// Returns the dialog and the media address of the answer.
pub fn call(
    sock: &UdpSocket,
    gw: SocketAddr,
    from: IpAddr,
    callee: &str,
    call_id: &str,
    rtp_port: u16,
) -> Result<(Dialog, SocketAddr)> {
    let port = sock.local_addr()?.port();
    let invite = with_body(
        format!(
            "INVITE {callee} SIP/2.0\r\nVia: SIP/2.0/UDP {h}:{port};branch=z9hG4bK-{call_id}-1\r\nMax-Forwards: 70\r\n\
             From: <sip:ue@ipv6.bench>;tag=ue\r\nTo: <{callee}>\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\n\
             Contact: <sip:ue@{h}:{port}>\r\n",
            h = host(from),
        ),
        &sdp(from, rtp_port, 1),
    );
    let ok = transact(sock, gw, &invite)?;
    let m = Message::parse_datagram(&ok).map_err(|e| anyhow!("{e:?}"))?;
    if m.code() != Some(200) {
        bail!("the call was refused:\n{}", String::from_utf8_lossy(&ok));
    }
    let body = std::str::from_utf8(m.body).unwrap_or("");
    let media = sdp_audio_addr(body).ok_or_else(|| anyhow!("no media address in the 200 OK:\n{body}"))?;
    let mut rr: Vec<String> = m
        .all(Name::RecordRoute)
        .flat_map(|h| alg::msg::addresses(&h.value).into_iter().map(|a| a.uri.to_owned()).collect::<Vec<_>>())
        .collect();
    rr.reverse();
    let target = m
        .header(Name::Contact)
        .and_then(|c| alg::msg::addresses(c).first().map(|a| a.uri.to_owned()))
        .ok_or_else(|| anyhow!("no Contact in the 200 OK"))?;
    let d = Dialog {
        call_id: call_id.to_owned(),
        to_tag: m.to_tag().ok_or_else(|| anyhow!("no To tag in the 200 OK"))?.to_owned(),
        target,
        routes: rr.iter().map(|r| format!("Route: <{r}>\r\n")).collect(),
        callee: callee.to_owned(),
        cseq: 1,
        port,
    };
    sock.send_to(&d.request("ACK", from, &format!("z9hG4bK-{call_id}-2"), ""), gw)?;
    Ok((d, media))
}

/// A response to `req` (RFC 3261 §8.2.6: its Via, From, Call-ID and CSeq;
/// its To with `to_tag` added when it has none; its Record-Route on a 2xx
/// to an INVITE), with `extra` header lines and `body`.
pub fn response(req: &Message, code: u16, reason: &str, to_tag: &str, extra: &str, body: &str) -> Vec<u8> {
    let mut head = format!("SIP/2.0 {code} {reason}\r\n");
    let invite = req.method() == Some("INVITE");
    for h in &req.headers {
        match h.name {
            Name::Via | Name::From | Name::CallId | Name::CSeq => head += &format!("{}\r\n", h.line),
            Name::RecordRoute if invite && code / 100 == 2 => head += &format!("{}\r\n", h.line),
            Name::To if req.to_tag().is_none() => head += &format!("{};tag={to_tag}\r\n", h.line),
            Name::To => head += &format!("{}\r\n", h.line),
            _ => {}
        }
    }
    head += extra;
    with_body(head, body)
}

/// The callee's side of one call on `sock` (bound to `at`): waits up to
/// `wait` for an INVITE, answers 200 OK with media on `at`:`rtp_port`
/// (resent on a retransmitted INVITE) until the ACK comes. Returns the
/// media address of the offer.
pub fn answer(sock: &UdpSocket, at: IpAddr, rtp_port: u16, wait: Duration) -> Result<SocketAddr> {
    let port = sock.local_addr()?.port();
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = vec![0u8; 65536];
    let end = Instant::now() + wait;
    let mut ok: Option<(Vec<u8>, SocketAddr, SocketAddr)> = None;
    while Instant::now() < end {
        let Ok((n, src)) = sock.recv_from(&mut buf) else { continue };
        let Ok(m) = Message::parse_datagram(&buf[..n]) else { continue };
        match m.method() {
            Some("INVITE") => {
                if ok.is_none() {
                    let body = std::str::from_utf8(m.body).unwrap_or("");
                    let offer = sdp_audio_addr(body).ok_or_else(|| anyhow!("no media address in the INVITE"))?;
                    let contact = format!("Contact: <sip:probe@{}:{port}>\r\n", host(at));
                    ok = Some((response(&m, 200, "OK", "probe", &contact, &sdp(at, rtp_port, 1)), src, offer));
                }
                if let Some((r, to, _)) = &ok {
                    sock.send_to(r, *to)?;
                }
            }
            Some("ACK") => {
                if let Some((_, _, offer)) = ok {
                    return Ok(offer);
                }
            }
            _ => {}
        }
    }
    bail!("{}", if ok.is_some() { "no ACK for the 200 OK" } else { "no INVITE came" })
}

/// Answers in-dialog requests on `sock` with 200 OK until a BYE comes or
/// `wait` passes.
pub fn await_bye(sock: &UdpSocket, wait: Duration) -> Result<()> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = vec![0u8; 65536];
    let end = Instant::now() + wait;
    while Instant::now() < end {
        let Ok((n, src)) = sock.recv_from(&mut buf) else { continue };
        let Ok(m) = Message::parse_datagram(&buf[..n]) else { continue };
        match m.method() {
            Some("ACK") | None => {}
            Some(method) => {
                sock.send_to(&response(&m, 200, "OK", "probe", "", ""), src)?;
                if method == "BYE" {
                    return Ok(());
                }
            }
        }
    }
    bail!("no BYE came")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_copies_what_rfc_3261_says() {
        let req = with_body(
            "INVITE sip:p@10.0.0.1:5100 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.4.1;branch=z9hG4bK-a\r\n\
             Via: SIP/2.0/UDP [2001:db8::1]:5064;branch=z9hG4bK-b\r\nRecord-Route: <sip:10.0.4.1;lr>\r\n\
             From: <sip:ue@x>;tag=ue\r\nTo: <sip:p@10.0.0.1:5100>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nMax-Forwards: 69\r\n"
                .into(),
            &sdp("10.0.4.1".parse().unwrap(), 20000, 1),
        );
        let m = Message::parse_datagram(&req).unwrap();
        let r = response(&m, 200, "OK", "t1", "Contact: <sip:p@10.0.0.1:5100>\r\n", "");
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 10.0.4.1;branch=z9hG4bK-a\r\nVia: "), "{s}");
        assert!(
            s.contains("Record-Route: <sip:10.0.4.1;lr>\r\n") && s.contains("To: <sip:p@10.0.0.1:5100>;tag=t1\r\n")
        );
        assert!(!s.contains("Max-Forwards") && s.ends_with("Content-Length: 0\r\n\r\n"), "{s}");
        let r = Message::parse_datagram(s.as_bytes()).unwrap().to_tag().map(str::to_owned);
        assert_eq!(r.as_deref(), Some("t1"));
        // A BYE's 200 carries no Record-Route.
        let bye = String::from_utf8(req).unwrap().replace("INVITE sip", "BYE sip").replace("1 INVITE", "2 BYE");
        let m = Message::parse_datagram(bye.as_bytes()).unwrap();
        let s = String::from_utf8(response(&m, 200, "OK", "t1", "", "")).unwrap();
        assert!(!s.contains("Record-Route") && s.contains("CSeq: 2 BYE"), "{s}");
    }
}
