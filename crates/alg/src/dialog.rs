//! Dialogs and their media: which side offered, the TrGW session behind
//! each Call-ID, terminal mobility (a re-offer from a new address re-points
//! the leg; from a new address family it moves the call to a fresh TrGW
//! session, make-before-break), and release on BYE, failure, CANCEL and
//! the session timeout.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::body::SdpBody;
use crate::media::{Command, Reply, SdpRequest, Side};
use crate::msg::{Message, Name};
use crate::proxy::{reason_of, Alg};
use crate::realm::Realm;
use crate::shares::ClientKey;
use crate::txn::{ServerKey, TimerKind, TimerRef};

/// A dialog (early or confirmed), keyed by Call-ID.
#[derive(Debug, Clone)]
pub struct Dialog {
    /// Timer id.
    pub id: u64,
    /// The caller's From tag.
    pub caller_tag: String,
    /// The callee's tag once answered.
    pub callee_tag: Option<String>,
    /// Realm of the caller.
    pub caller_realm: Realm,
    /// Realm of the callee.
    pub callee_realm: Realm,
    /// A TrGW session exists.
    pub media: bool,
    /// TrGW session generation (a change of address family starts a new
    /// one).
    pub epoch: u32,
    /// The previous generation, deleted once the re-offer is answered.
    pub old_epoch: Option<u32>,
    /// Per tag: the family (v6) and connection address of its last SDP.
    pub sdp_from: Vec<(String, bool, String)>,
    /// 2xx seen.
    pub confirmed: bool,
    /// An ACK (for the 2xx) went through: without one by the end of the
    /// 2xx's server transaction (Timer L) the caller gave up.
    pub acked: bool,
    /// Released when nothing happens until then.
    pub expires: Instant,
    /// When its timer is set for (a later `expires` sets no new timer:
    /// the one set sets itself again when it fires).
    pub timer_at: Instant,
    /// The tag whose offer (in a response) awaits an answer in ACK/PRACK.
    pub late_offer_from: Option<String>,
    /// The client whose budgets it counts against (the caller's).
    pub owner: ClientKey,
    /// Bytes charged to the owner for it.
    pub bytes: u64,
}

/// The most senders a dialog remembers the last SDP of (a caller and a
/// callee, and a few forks or re-offers from new tags; older ones go).
pub const SDP_SENDERS_MAX: usize = 4;
/// What one remembered sender may cost (its tag and address text).
const SDP_SENDER_BYTES: usize = 112;

impl Dialog {
    /// Bytes it holds with its Call-ID (its senders counted at their most).
    pub fn footprint(&self, call_id_len: usize) -> u64 {
        let own = std::mem::size_of::<Dialog>()
            + 2 * call_id_len
            + self.caller_tag.len()
            + self.callee_tag.as_ref().map_or(0, String::len)
            + SDP_SENDERS_MAX * SDP_SENDER_BYTES;
        own as u64 + crate::txn::ENTRY_OVERHEAD
    }

    /// Records the family and address of `tag`'s last SDP (the oldest
    /// sender goes beyond [`SDP_SENDERS_MAX`]); address text past
    /// [`SDP_SENDER_BYTES`] is cut (it is only compared).
    fn remember(&mut self, tag: String, v6: bool, mut addr: String) {
        self.sdp_from.retain(|(t, _, _)| *t != tag);
        if self.sdp_from.len() >= SDP_SENDERS_MAX {
            self.sdp_from.remove(0);
        }
        let mut tag = tag;
        for s in [&mut tag, &mut addr] {
            if s.len() > SDP_SENDER_BYTES / 2 {
                let mut cut = SDP_SENDER_BYTES / 2;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
            }
        }
        self.sdp_from.push((tag, v6, addr));
    }
}

/// An offer or answer for a message being forwarded, and what its reply
/// updates.
#[derive(Debug)]
pub(crate) struct SdpJob {
    /// The offer or answer.
    pub(crate) req: Command,
    /// The SIP Call-ID.
    pub(crate) call_id: String,
    /// The tag of the SDP's sender.
    sender: String,
    /// Its family and connection address (with the first m= port).
    fam6: bool,
    addr: String,
    kind: JobKind,
    /// The body around the SDP part of a multipart body.
    frame: Option<(Vec<u8>, Vec<u8>)>,
}

#[derive(Debug)]
enum JobKind {
    Request { answer: bool, switched: bool, epoch: u32, created: bool },
    Response { request_had_offer: bool },
}

/// What a response's SDP needs.
#[derive(Debug)]
pub(crate) enum ResponsePlan {
    /// Nothing: the body goes as it is.
    Keep,
    /// This body instead (empty: the SDP is removed).
    Body(Vec<u8>),
    /// An offer or answer.
    Job(SdpJob),
}

/// The ng Call-ID of a generation.
pub fn ng_call_id(call_id: &str, epoch: u32) -> String {
    if epoch == 0 {
        call_id.to_string()
    } else {
        format!("{call_id};v6g-e{epoch}")
    }
}

/// The family of an SDP body's first `c=` line, and that address with the
/// first `m=` port (where the sender receives media).
pub fn sdp_conn(body: &[u8]) -> Option<(bool, String)> {
    let text = std::str::from_utf8(body).ok()?;
    let mut conn = None;
    let mut port = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("c=") {
            if conn.is_none() {
                let mut it = rest.split_ascii_whitespace();
                let (_, fam, addr) = (it.next()?, it.next()?, it.next()?);
                let a = addr.split('/').next()?;
                conn = Some((
                    fam.eq_ignore_ascii_case("IP6"),
                    a.trim_start_matches('[').trim_end_matches(']').to_string(),
                ));
            }
        } else if let Some(rest) = line.strip_prefix("m=") {
            if port.is_empty() {
                port = rest.split_ascii_whitespace().nth(1).unwrap_or("");
            }
        }
    }
    conn.map(|(f, a)| (f, format!("{a} {port}")))
}

impl Alg {
    fn side(&self, v6: bool) -> Side {
        let iface = if v6 { &self.cfg.media_v6_interface } else { &self.cfg.media_v4_interface };
        Side { iface: iface.clone(), v6 }
    }

    /// The offer (or answer) command for the media control: the sender's
    /// leg in the family of its SDP, the receiver's in its realm's.
    #[allow(clippy::too_many_arguments)]
    fn sdp_command(
        &self,
        offer: bool,
        ng_id: &str,
        offerer: &str,
        answerer: Option<&str>,
        sdp: &[u8],
        sender_v6: bool,
        receiver_v6: bool,
        client: Option<IpAddr>,
    ) -> Command {
        Command::Sdp(Box::new(SdpRequest {
            offer,
            call_id: ng_id.to_string(),
            from_tag: offerer.to_string(),
            to_tag: answerer.map(str::to_string),
            sdp: sdp.to_vec(),
            from: self.side(sender_v6),
            to: self.side(receiver_v6),
            client,
        }))
    }

    fn early_expiry(&self, now: Instant) -> Instant {
        now + self.timers_cfg.c() + Duration::from_secs(20)
    }

    /// Dialog bookkeeping for a request being forwarded from `source` (a
    /// new dialog counts against its client's budgets; a new call's relay
    /// streams are that client's share of the TrGW), and the offer or
    /// answer its SDP needs (None: the body goes as it is), or the status
    /// to answer with.
    pub(crate) fn plan_request(
        &mut self,
        now: Instant,
        m: &Message,
        method: &str,
        (in_realm, out_realm): (Realm, Realm),
        source: IpAddr,
    ) -> Result<Option<SdpJob>, (u16, String)> {
        let owner = self.owner_of(source);
        let call_id = m.call_id().to_string();
        let from_tag = m.from_tag().unwrap_or("").to_string();
        let to_tag = m.to_tag().map(str::to_string);
        let mut created = false;
        if method == "INVITE" && to_tag.is_none() && !self.dialogs.contains_key(call_id.as_str()) {
            let id = self.id();
            let expires = self.early_expiry(now);
            self.dialog_insert(
                &call_id,
                Dialog {
                    id,
                    caller_tag: from_tag.clone(),
                    callee_tag: None,
                    caller_realm: in_realm,
                    callee_realm: out_realm,
                    media: false,
                    epoch: 0,
                    old_epoch: None,
                    sdp_from: Vec::new(),
                    confirmed: false,
                    acked: false,
                    expires,
                    timer_at: expires,
                    late_offer_from: None,
                    owner,
                    bytes: 0,
                },
            );
            self.stats.dialogs_created += 1;
            self.schedule(expires, TimerKind::Dialog, TimerRef::Dialog, id);
            created = true;
        } else if to_tag.is_some() {
            let timeout = Duration::from_secs(self.cfg.dialog_timeout_secs);
            if let Some(d) = self.dialogs.get_mut(call_id.as_str()) {
                if d.confirmed {
                    d.expires = now + timeout;
                }
                d.acked |= method == "ACK";
            }
        }
        let body = crate::body::sdp_body(m);
        if !body.present() || self.media.is_none() || !matches!(method, "INVITE" | "UPDATE" | "ACK" | "PRACK") {
            return Ok(None);
        }
        let Some(d) = self.dialogs.get(call_id.as_str()) else { return Ok(None) };
        if in_realm == out_realm && !d.media {
            return Ok(None);
        }
        let sdp = match &body {
            SdpBody::Part(r) => &m.body[r.clone()],
            SdpBody::Unsupported(why) => {
                if created {
                    self.dialog_remove(&call_id);
                    self.stats.dialogs_released += 1;
                }
                return Err((415, format!("Unsupported Media Type ({why})")));
            }
            SdpBody::Whole | SdpBody::None => m.body,
        };
        let Some((fam6, addr)) = sdp_conn(sdp) else {
            if created {
                self.dialog_remove(&call_id);
                self.stats.dialogs_released += 1;
            }
            self.stats.media_errors += 1;
            return Err((400, "Bad SDP: no usable c= line".into()));
        };
        let answer_to = if matches!(method, "ACK" | "PRACK") {
            d.late_offer_from.clone().filter(|t| Some(t) == to_tag.as_ref())
        } else {
            None
        };
        let mut epoch = d.epoch;
        let mut switched = false;
        if answer_to.is_none() {
            if let Some((_, f, a)) = d.sdp_from.iter().find(|(t, _, _)| *t == from_tag) {
                if *a != addr {
                    self.stats.handovers += 1;
                    tracing::info!(call_id = %call_id, from = %a, to = %addr, "media handover");
                }
                if *f != fam6 && d.media {
                    epoch += 1;
                    switched = true;
                }
            }
        }
        let ng_id = ng_call_id(&call_id, epoch);
        let (offerer, answerer) = match &answer_to {
            Some(offerer) => (offerer.as_str(), Some(from_tag.as_str())),
            None => (from_tag.as_str(), None),
        };
        let req =
            self.sdp_command(answer_to.is_none(), &ng_id, offerer, answerer, sdp, fam6, out_realm.v6(), Some(source));
        if let Some(d) = self.dialogs.get_mut(call_id.as_str()) {
            // A session exists (or is being made): a release deletes it,
            // after the command (the call's commands keep their order).
            d.media = true;
            if switched {
                d.old_epoch = Some(d.epoch);
                d.epoch = epoch;
            }
        }
        Ok(Some(SdpJob {
            req,
            call_id,
            sender: from_tag,
            fam6,
            addr,
            kind: JobKind::Request { answer: answer_to.is_some(), switched, epoch, created },
            frame: crate::body::frame_of(m.body, &body),
        }))
    }

    /// The reply to a request's offer or answer: the new body, or the
    /// status to answer with (the dialog a failed INVITE created goes).
    pub(crate) fn finish_request(&mut self, job: SdpJob, reply: Reply) -> Result<Option<Vec<u8>>, (u16, String)> {
        let JobKind::Request { answer, switched, epoch, created } = job.kind else { return Ok(None) };
        let call_id = job.call_id;
        match reply {
            Ok(sdp) => {
                let Some(d) = self.dialogs.get_mut(call_id.as_str()) else {
                    // Released while the command ran (CANCEL): its session goes too.
                    let now = self.clock;
                    self.media_fire(now, &call_id, Command::Delete(ng_call_id(&call_id, epoch)));
                    return Err((487, reason_of(487).into()));
                };
                if switched {
                    // The other side keeps its family in the new session.
                    d.sdp_from.retain(|(t, _, _)| *t == job.sender);
                }
                d.remember(job.sender, job.fam6, job.addr);
                if answer {
                    d.late_offer_from = None;
                }
                Ok(Some(crate::body::splice(job.frame.as_ref(), sdp)))
            }
            Err(e) => {
                self.stats.media_errors += 1;
                const WHAT: &str = "media offer refused";
                if let Some(suppressed) = self.warn_log.admit(WHAT, self.clock) {
                    tracing::warn!(suppressed, call_id = %call_id, error = %e, "{WHAT}");
                }
                if switched {
                    self.revert_epoch(&call_id);
                }
                if created && self.dialog_remove(&call_id).is_some() {
                    self.stats.dialogs_released += 1;
                }
                Err(e.status())
            }
        }
    }

    /// The offer or answer a response's SDP needs.
    pub(crate) fn plan_response(
        &mut self,
        m: &Message,
        method: &str,
        from_realm: Realm,
        to_realm: Realm,
        request_had_offer: bool,
    ) -> ResponsePlan {
        let body = crate::body::sdp_body(m);
        if !body.present() || self.media.is_none() || !matches!(method, "INVITE" | "UPDATE" | "PRACK") {
            return ResponsePlan::Keep;
        }
        let call_id = m.call_id().to_string();
        let Some(d) = self.dialogs.get(call_id.as_str()) else { return ResponsePlan::Keep };
        // Nothing anchored for this dialog: only a late offer crossing the
        // realms starts a session here.
        if !d.media && (from_realm == to_realm || request_had_offer) {
            return ResponsePlan::Keep;
        }
        let sender = m.to_tag().unwrap_or("").to_string();
        let receiver = m.from_tag().unwrap_or("").to_string();
        let sdp = match &body {
            SdpBody::Part(r) => &m.body[r.clone()],
            SdpBody::Unsupported(why) => {
                tracing::debug!(call_id = %call_id, why, "response body that cannot be anchored removed");
                self.stats.sdp_dropped += 1;
                return ResponsePlan::Body(Vec::new());
            }
            SdpBody::Whole | SdpBody::None => m.body,
        };
        let Some((fam6, addr)) = sdp_conn(sdp) else {
            self.stats.sdp_dropped += 1;
            return ResponsePlan::Body(Vec::new());
        };
        let ng_id = ng_call_id(&call_id, d.epoch);
        let (offerer, answerer) =
            if request_had_offer { (receiver.as_str(), Some(sender.as_str())) } else { (sender.as_str(), None) };
        let req = self.sdp_command(!request_had_offer, &ng_id, offerer, answerer, sdp, fam6, to_realm.v6(), None);
        if let Some(d) = self.dialogs.get_mut(call_id.as_str()) {
            d.media = true;
        }
        let frame = crate::body::frame_of(m.body, &body);
        ResponsePlan::Job(SdpJob {
            req,
            call_id,
            sender,
            fam6,
            addr,
            kind: JobKind::Response { request_had_offer },
            frame,
        })
    }

    /// The reply to a response's offer or answer: the new body (empty when
    /// the relay refused it: the SDP is removed).
    pub(crate) fn finish_response(&mut self, job: SdpJob, reply: Reply) -> Vec<u8> {
        let JobKind::Response { request_had_offer } = job.kind else { return Vec::new() };
        match reply {
            Ok(sdp) => {
                if let Some(d) = self.dialogs.get_mut(job.call_id.as_str()) {
                    let sender = job.sender;
                    if d.callee_tag.is_none() && !sender.is_empty() && sender != d.caller_tag {
                        d.callee_tag = Some(sender.clone());
                    }
                    if !request_had_offer {
                        d.late_offer_from = Some(sender.clone());
                    }
                    d.remember(sender, job.fam6, job.addr);
                }
                crate::body::splice(job.frame.as_ref(), sdp)
            }
            Err(e) => {
                self.stats.media_errors += 1;
                self.stats.sdp_dropped += 1;
                const WHAT: &str = "media answer refused; SDP removed from the response";
                if let Some(suppressed) = self.warn_log.admit(WHAT, self.clock) {
                    tracing::warn!(suppressed, call_id = %job.call_id, error = %e, "{WHAT}");
                }
                Vec::new()
            }
        }
    }

    /// A 2xx to INVITE: the dialog is up; an older TrGW generation goes.
    pub(crate) fn dialog_confirmed(&mut self, now: Instant, m: &Message) {
        let call_id = m.call_id().to_string();
        let se = m
            .header(Name::SessionExpires)
            .and_then(|v| v.split(';').next())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.max(90) * 2));
        let timeout = se.unwrap_or(Duration::from_secs(self.cfg.dialog_timeout_secs));
        let Some(d) = self.dialogs.get_mut(call_id.as_str()) else { return };
        d.confirmed = true;
        if d.callee_tag.is_none() {
            d.callee_tag = m.to_tag().map(str::to_string);
        }
        d.expires = now + timeout;
        let (at, id) = (d.expires, d.id);
        let old = d.old_epoch.take();
        if at < d.timer_at {
            d.timer_at = at;
            self.schedule(at, TimerKind::Dialog, TimerRef::Dialog, id);
        }
        if let Some(old) = old {
            let id = ng_call_id(&call_id, old);
            self.media_fire(now, &call_id, Command::Delete(id));
        }
    }

    /// A failed re-offer that moved to a new TrGW generation goes back to
    /// the old one.
    pub(crate) fn revert_epoch(&mut self, call_id: &str) {
        let Some(d) = self.dialogs.get_mut(call_id) else { return };
        let Some(old) = d.old_epoch.take() else { return };
        let new = std::mem::replace(&mut d.epoch, old);
        let id = ng_call_id(call_id, new);
        let now = self.clock;
        self.media_fire(now, call_id, Command::Delete(id));
    }

    /// Releases a dialog and its media.
    pub(crate) fn release_dialog(&mut self, call_id: &str, why: &str) {
        let Some(d) = self.dialog_remove(call_id) else { return };
        self.stats.dialogs_released += 1;
        tracing::debug!(call_id, why, "dialog released");
        if d.media {
            let now = self.clock;
            for e in std::iter::once(d.epoch).chain(d.old_epoch) {
                self.media_fire(now, call_id, Command::Delete(ng_call_id(call_id, e)));
            }
        }
    }

    /// Releases the (unconfirmed) dialog of a failed initial INVITE.
    pub(crate) fn release_dialog_of(&mut self, sk: &ServerKey) {
        let Some(cid) = self.server.get(sk).map(|s| s.call_id.clone()) else { return };
        if self.dialogs.get(cid.as_str()).is_some_and(|d| !d.confirmed) {
            self.release_dialog(&cid, "INVITE failed");
        }
    }

    pub(crate) fn dialog_timer(&mut self, now: Instant, id: u64) {
        let Some(cid) = self.dialog_key_of(id) else { return };
        let cid: &str = &cid;
        let Some(d) = self.dialogs.get_mut(cid) else { return };
        if d.id != id || now < d.timer_at {
            // Stale: a shorter timer was set after this one.
            return;
        }
        if now >= d.expires {
            self.stats.dialogs_timed_out += 1;
            tracing::info!(call_id = cid, "dialog timed out; media released");
            self.release_dialog(cid, "session timeout");
        } else {
            let at = d.expires;
            d.timer_at = at;
            self.schedule(at, TimerKind::Dialog, TimerRef::Dialog, id);
        }
    }
}
