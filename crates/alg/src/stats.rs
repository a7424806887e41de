//! The ALG's counters: every drop has one, every message is counted by
//! method or status class, every response the ALG writes itself by code,
//! and calls by how they ended. The daemon exports them on `/metrics`
//! (`v6gate_alg_*`) and `/status`.

/// The methods counted one by one; anything else counts as `other`.
pub const METHODS: [&str; 14] = [
    "INVITE",
    "ACK",
    "BYE",
    "CANCEL",
    "REGISTER",
    "OPTIONS",
    "UPDATE",
    "PRACK",
    "SUBSCRIBE",
    "NOTIFY",
    "REFER",
    "INFO",
    "MESSAGE",
    "other",
];

/// Index of `method` in [`METHODS`].
pub fn method_index(method: &str) -> usize {
    METHODS[..METHODS.len() - 1].iter().position(|m| *m == method).unwrap_or(METHODS.len() - 1)
}

/// The status codes the ALG writes itself; the last slot (0, shown as
/// `other`) counts any code not listed.
pub const LOCAL_CODES: [u16; 21] =
    [100, 200, 400, 403, 404, 408, 415, 416, 420, 481, 482, 483, 487, 488, 500, 502, 503, 504, 505, 513, 0];

/// Index of `code` in [`LOCAL_CODES`] (the last slot, shown as `other`,
/// for a code not in the list).
pub fn local_code_index(code: u16) -> usize {
    LOCAL_CODES[..LOCAL_CODES.len() - 1].iter().position(|c| *c == code).unwrap_or(LOCAL_CODES.len() - 1)
}

/// Counters (every drop has one).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Requests received (new and retransmitted).
    pub requests_in: u64,
    /// Requests received, by method ([`METHODS`]).
    pub requests_by_method: [u64; METHODS.len()],
    /// Responses received.
    pub responses_in: u64,
    /// Responses received, by class (1xx .. 6xx).
    pub responses_by_class: [u64; 6],
    /// Requests forwarded (first transmissions).
    pub requests_forwarded: u64,
    /// Responses forwarded.
    pub responses_forwarded: u64,
    /// Responses the ALG wrote itself, by code ([`LOCAL_CODES`]).
    pub local_responses: [u64; LOCAL_CODES.len()],
    /// Retransmissions absorbed (answered from transaction state).
    pub retransmissions_absorbed: u64,
    /// Retransmissions the ALG sent (Timers A, E, G).
    pub retransmissions_sent: u64,
    /// Malformed requests answered with 4xx/5xx.
    pub malformed_answered: u64,
    /// Malformed messages dropped.
    pub malformed_dropped: u64,
    /// Messages over `max-message`.
    pub oversized: u64,
    /// Requests dropped by the per-source rate limit.
    pub rate_limited: u64,
    /// Stray responses dropped (no transaction, top Via not ours).
    pub stray_responses: u64,
    /// Loops detected (482).
    pub loops: u64,
    /// Max-Forwards exhausted (483).
    pub too_many_hops: u64,
    /// Requests with no route / failed DNS (404).
    pub unroutable: u64,
    /// Client transactions that timed out (408).
    pub timeouts: u64,
    /// Media commands that failed.
    pub media_errors: u64,
    /// SDP bodies removed from responses because the relay refused them.
    pub sdp_dropped: u64,
    /// Dialogs created (initial INVITEs).
    pub dialogs_created: u64,
    /// Dialogs released (BYE, failure, CANCEL, timeout).
    pub dialogs_released: u64,
    /// Dialogs released by the session timeout.
    pub dialogs_timed_out: u64,
    /// Initial INVITEs answered with a 2xx.
    pub calls_answered: u64,
    /// Initial INVITEs that ended with a final response >= 300 other than
    /// 487 (including the ALG's own 4xx/5xx and 408 on timeout).
    pub calls_failed: u64,
    /// Initial INVITEs that ended with 487 (CANCEL).
    pub calls_cancelled: u64,
    /// Media re-pointed by a re-INVITE/UPDATE from a new address.
    pub handovers: u64,
    /// Requests parked waiting for DNS.
    pub parked: u64,
    /// Requests sent to the next destination after one never answered.
    pub failovers: u64,
    /// Requests the ALG refused with an answer of its own, by reason
    /// ([`Refusal`]).
    pub refused: [u64; Refusal::ALL.len()],
    /// Messages the ALG could not send (socket errors, full TCP queues).
    pub send_errors: u64,
    /// TCP connections refused, by reason ([`TCP_REFUSALS`]).
    pub tcp_refused: [u64; TCP_REFUSALS.len()],
    /// TCP connections closed by the ALG, by reason ([`TCP_CLOSES`]).
    pub tcp_closed: [u64; TCP_CLOSES.len()],
    /// Media commands waiting for a remote ng server right now (a gauge).
    pub media_pending: u64,
    /// Media replies that came too late (their command had timed out) or
    /// matched no command.
    pub media_late_replies: u64,
}

/// Why the ALG refused a request with an answer of its own (the
/// `v6gate_alg_refused_total{reason}` family; docs/alg.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `max-transactions` reached (503).
    Transactions,
    /// `max-state-bytes` reached (503).
    StateBytes,
    /// The client holds its share of the transactions or their bytes (503).
    ClientShare,
    /// Too many DNS lookups in flight, or the client's share of them (503).
    DnsBusy,
    /// `max-parked-bytes` reached, or the client's share of it (503).
    Parked,
    /// No DNS answer within `dns-timeout` (504).
    DnsTimeout,
    /// The next hop is refused by the destination policy (403).
    NextHop,
    /// The next hop is one of the ALG's own listeners: a loop (482).
    OwnListener,
    /// The rewritten message is larger than its transport can carry (513).
    TooLarge,
    /// A body the ALG cannot anchor media for (415).
    Body,
}

impl Refusal {
    /// Every reason, in the counters' order.
    pub const ALL: [Refusal; 10] = [
        Refusal::Transactions,
        Refusal::StateBytes,
        Refusal::ClientShare,
        Refusal::DnsBusy,
        Refusal::Parked,
        Refusal::DnsTimeout,
        Refusal::NextHop,
        Refusal::OwnListener,
        Refusal::TooLarge,
        Refusal::Body,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Transactions => "transactions-full",
            Refusal::StateBytes => "state-bytes-full",
            Refusal::ClientShare => "client-share",
            Refusal::DnsBusy => "dns-busy",
            Refusal::Parked => "parked-full",
            Refusal::DnsTimeout => "dns-timeout",
            Refusal::NextHop => "next-hop-refused",
            Refusal::OwnListener => "own-listener",
            Refusal::TooLarge => "too-large",
            Refusal::Body => "unsupported-body",
        }
    }

    /// Its slot in [`Stats::refused`].
    pub fn index(self) -> usize {
        Refusal::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Why a TCP connection was refused (the `v6gate_alg_tcp_refused_total`
/// family): `max-connections` reached, the client's share of it, or
/// `max-outbound-connections` reached for one the ALG would open.
pub const TCP_REFUSALS: [&str; 3] = ["max-connections", "client-share", "max-outbound-connections"];
/// Why the ALG closed a TCP connection (`v6gate_alg_tcp_closed_total`):
/// no message for `tcp-idle-timeout`, a message not complete within
/// `tcp-message-timeout` of its first byte, input that cannot be framed.
pub const TCP_CLOSES: [&str; 3] = ["idle-timeout", "message-timeout", "framing"];

impl Stats {
    /// Every message the ALG did not process, by reason (the
    /// `v6gate_alg_drops_total{reason}` family).
    pub fn drops(&self) -> [(&'static str, u64); 7] {
        [
            ("malformed", self.malformed_dropped),
            ("oversized", self.oversized),
            ("rate-limited", self.rate_limited),
            ("stray-response", self.stray_responses),
            ("send-error", self.send_errors),
            ("tcp-refused", self.tcp_refused.iter().sum()),
            ("tcp-framing", self.tcp_closed[2]),
        ]
    }

    /// (reason, value) of the requests refused with an answer of the ALG's own.
    pub fn by_refusal(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Refusal::ALL.iter().map(|r| r.label()).zip(self.refused.iter().copied())
    }

    /// Requests refused because a budget was full (the 503s).
    pub fn overloaded(&self) -> u64 {
        [Refusal::Transactions, Refusal::StateBytes, Refusal::ClientShare, Refusal::DnsBusy, Refusal::Parked]
            .iter()
            .map(|r| self.refused[r.index()])
            .sum()
    }

    /// (label, value) of the requests received by method.
    pub fn by_method(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        METHODS.iter().copied().zip(self.requests_by_method.iter().copied())
    }

    /// (label, value) of the responses received by class ("1xx" ..).
    pub fn by_class(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ["1xx", "2xx", "3xx", "4xx", "5xx", "6xx"].into_iter().zip(self.responses_by_class.iter().copied())
    }

    /// (code, value) of the responses the ALG wrote itself ("other" for
    /// the last slot).
    pub fn by_local_code(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        LOCAL_CODES
            .iter()
            .zip(self.local_responses.iter())
            .map(|(c, v)| (if *c == 0 { "other".to_string() } else { c.to_string() }, *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes() {
        assert_eq!(METHODS[method_index("INVITE")], "INVITE");
        assert_eq!(METHODS[method_index("PUBLISH")], "other");
        assert_eq!(METHODS[method_index("invite")], "other", "methods are case-sensitive (RFC 3261 §7.1)");
        assert_eq!(LOCAL_CODES[local_code_index(482)], 482);
        assert_eq!(local_code_index(299), LOCAL_CODES.len() - 1);
        let mut s = Stats::default();
        s.local_responses[local_code_index(404)] += 2;
        assert!(s.by_local_code().any(|(c, v)| c == "404" && v == 2));
        assert_eq!(s.by_class().count(), 6);
        for r in Refusal::ALL {
            assert_eq!(Refusal::ALL[r.index()], r);
        }
        s.refused[Refusal::DnsBusy.index()] = 3;
        s.refused[Refusal::NextHop.index()] = 1;
        assert_eq!(s.overloaded(), 3, "403s are not overload");
        assert!(s.by_refusal().any(|(l, v)| l == "dns-busy" && v == 3));
    }
}
