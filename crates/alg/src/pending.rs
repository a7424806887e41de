//! Media commands that wait for a remote ng server. The core never blocks
//! on one: a message whose SDP needs an offer or answer that the media
//! control cannot answer at once is kept (its bytes and what forwarding
//! it had decided) until the reply comes, and the ALG serves everything
//! else meanwhile. A call's commands keep their order: while one of them
//! runs, the call's later messages and deletes wait behind it in a queue
//! of their own (a BYE's delete never overtakes the offer it deletes).
//! In-process media answers at once and never gets here.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use crate::dialog::{ResponsePlan, SdpJob};
use crate::media::{Command, MediaError, Reply, Started};
use crate::msg::Message;
use crate::proxy::Alg;
use crate::request::Fwd;

/// Something of a call that needs the media control, in the call's order.
#[derive(Debug)]
pub(crate) enum Work {
    /// A request to forward.
    Request { fwd: Box<Fwd>, raw: Vec<u8> },
    /// A response to relay through client transaction `ck`.
    Response { ck: String, raw: Vec<u8> },
    /// A 2xx without a transaction, forwarded by its Via.
    Stateless { raw: Vec<u8> },
    /// A command whose reply nobody needs (delete) of SIP call `call_id`.
    Fire { call_id: String, cmd: Command },
}

/// A command in flight: its call, the work that waits for it and the job
/// its reply finishes.
pub(crate) type InFlight = (String, Work, Option<SdpJob>);

impl Alg {
    /// Starts a command (Done at once without a media control: refused).
    pub(crate) fn media_start(&mut self, now: Instant, cmd: &Command) -> Started {
        match self.media.as_deref_mut() {
            Some(m) => m.start(now, cmd),
            None => Started::Done(Err(MediaError("no media control".into()))),
        }
    }

    /// Runs a command whose reply does not matter (delete), in the call's
    /// order.
    pub(crate) fn media_fire(&mut self, now: Instant, call_id: &str, req: Command) {
        if let Some(q) = self.media_busy.get_mut(call_id) {
            q.push_back(Work::Fire { call_id: call_id.to_string(), cmd: req });
            return;
        }
        match self.media_start(now, &req) {
            Started::Done(r) => log_fire(req.call_id(), r),
            Started::Pending(t) => {
                self.media_busy.insert(call_id.to_string(), VecDeque::new());
                self.media_inflight
                    .insert(t, (call_id.to_string(), Work::Fire { call_id: call_id.to_string(), cmd: req }, None));
            }
        }
    }

    /// Commands waiting for a remote server now.
    pub fn media_pending(&self) -> usize {
        self.media_inflight.len()
    }

    /// The next ng datagram to send: (server, bytes).
    pub fn poll_media_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.media.as_deref_mut()?.poll_transmit()
    }

    /// A datagram from an ng server.
    pub fn handle_media_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.clock = now;
        if let Some(m) = self.media.as_deref_mut() {
            m.handle_datagram(now, from, data);
        }
        self.media_completions(now);
    }

    /// Runs what finished commands let go on.
    pub(crate) fn media_completions(&mut self, now: Instant) {
        while let Some((ticket, reply)) = self.media.as_deref_mut().and_then(|m| m.poll_done()) {
            let Some((call_id, work, job)) = self.media_inflight.remove(&ticket) else { continue };
            self.resume(now, work, job, reply);
            self.media_next(now, &call_id);
        }
        self.stats.media_pending = self.media_inflight.len() as u64;
        if let Some(m) = self.media.as_deref() {
            self.stats.media_late_replies = m.late_replies();
        }
    }

    /// Work whose command was answered goes on.
    fn resume(&mut self, now: Instant, work: Work, job: Option<SdpJob>, reply: Reply) {
        match (work, job) {
            (Work::Request { fwd, raw }, Some(job)) => {
                let Ok(m) = Message::parse_datagram(&raw) else { return };
                self.forward_after_media(now, *fwd, &m, &raw, job, reply);
            }
            (Work::Response { ck, raw }, Some(job)) => {
                let Ok(m) = Message::parse_datagram(&raw) else { return };
                let body = self.finish_response(job, reply);
                self.relay_response_send(now, &ck, &m, Some(body));
            }
            (Work::Stateless { raw }, Some(job)) => {
                let Ok(m) = Message::parse_datagram(&raw) else { return };
                let body = self.finish_response(job, reply);
                self.stateless_send(&m, Some(body));
            }
            (Work::Fire { cmd, .. }, _) => log_fire(cmd.call_id(), reply),
            _ => {}
        }
    }

    /// The call's command finished: its queued work runs, in order, until
    /// one of them waits for the media control again (what it set off
    /// meanwhile, e.g. a delete, goes before the rest).
    fn media_next(&mut self, now: Instant, call_id: &str) {
        while let Some(mut q) = self.media_busy.remove(call_id) {
            let Some(w) = q.pop_front() else { return };
            self.run_work(now, w);
            match self.media_busy.get_mut(call_id) {
                Some(waiting) => {
                    waiting.extend(q);
                    return;
                }
                None if q.is_empty() => return,
                None => {
                    self.media_busy.insert(call_id.to_string(), q);
                }
            }
        }
    }

    /// Runs queued work as if it had just arrived.
    fn run_work(&mut self, now: Instant, w: Work) {
        match w {
            Work::Request { fwd, raw } => {
                if let Ok(m) = Message::parse_datagram(&raw) {
                    self.forward_media(now, *fwd, &m, &raw);
                }
            }
            Work::Response { ck, raw } => {
                if let Ok(m) = Message::parse_datagram(&raw) {
                    self.relay_response(now, &ck, &m, &raw);
                }
            }
            Work::Stateless { raw } => {
                if let Ok(m) = Message::parse_datagram(&raw) {
                    self.forward_response_stateless(now, &m, &raw);
                }
            }
            // Under the SIP Call-ID it waited under (the command's own is
            // the TrGW generation's).
            Work::Fire { call_id, cmd } => self.media_fire(now, &call_id, cmd),
        }
    }

    /// Starts a response's offer or answer; Some(body) when it was
    /// answered at once (or needs none), None when the response waits.
    pub(crate) fn response_media(
        &mut self,
        now: Instant,
        plan: ResponsePlan,
        work: impl FnOnce() -> Work,
    ) -> Option<Option<Vec<u8>>> {
        match plan {
            ResponsePlan::Keep => Some(None),
            ResponsePlan::Body(b) => Some(Some(b)),
            ResponsePlan::Job(job) => match self.media_start(now, &job.req) {
                Started::Done(r) => Some(Some(self.finish_response(job, r))),
                Started::Pending(t) => {
                    let cid = job.call_id.clone();
                    self.media_busy.insert(cid.clone(), VecDeque::new());
                    self.media_inflight.insert(t, (cid, work(), Some(job)));
                    None
                }
            },
        }
    }
}

fn log_fire(call_id: &str, r: Reply) {
    if let Err(e) = r {
        tracing::debug!(call_id, error = %e, "media delete");
    }
}
