//! Counters. [`Counters`] is shared (atomics, relaxed); [`Stats`] is a
//! snapshot for `/status` and `/metrics`.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use serde::Serialize;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Live counters, updated by the core and the server.
        #[derive(Debug, Default)]
        pub struct Counters {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A snapshot of [`Counters`].
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        pub struct Stats {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Read every counter.
            pub fn snapshot(&self) -> Stats {
                Stats { $($name: self.$name.load(Relaxed),)* }
            }
        }

        impl Stats {
            /// Every counter as `(name, value)`, in declaration order (for
            /// a Prometheus exporter: `v6gate_dns64_<name>`).
            pub fn pairs(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Queries received over UDP (every datagram, before parsing).
    queries_udp,
    /// Queries received over TCP.
    queries_tcp,
    /// Parsed queries of type AAAA.
    qtype_aaaa,
    /// Parsed queries of type A.
    qtype_a,
    /// Parsed queries of type PTR.
    qtype_ptr,
    /// Parsed queries of any other type.
    qtype_other,
    /// AAAA answers carrying real (upstream) AAAA records.
    aaaa_real,
    /// AAAA answers carrying synthesised records (RFC 6147 §5.1.7).
    synthesized,
    /// Synthesised AAAA records.
    synthesized_records,
    /// AAAA records dropped by `exclude-aaaa` (RFC 6147 §5.1.4).
    excluded_aaaa_records,
    /// A records not synthesised (`exclude-a`, or non-global under the WKP).
    excluded_a_records,
    /// AAAA queries answered with no data (neither AAAA nor usable A).
    aaaa_nodata,
    /// AAAA queries answered NXDOMAIN (RFC 6147 §5.1.2).
    aaaa_nxdomain,
    /// PTR queries under the prefix answered with a CNAME to in-addr.arpa.
    ptr_synthesized,
    /// Queries forwarded and relayed unchanged (other types, other classes,
    /// PTR outside the prefix, CD+DO queries).
    passthrough,
    /// AAAA/PTR queries with CD and DO set, not synthesised (RFC 6147 §5.5).
    dnssec_no_synthesis,
    /// SERVFAIL sent because no upstream answered in time or the upstream
    /// reply was unusable.
    servfail_upstream,
    /// SERVFAIL sent because the answer bound was reached.
    servfail_deadline,
    /// Upstream tries that timed out.
    upstream_timeouts,
    /// Upstream tries that failed with a network error.
    upstream_errors,
    /// Upstream replies retried over TCP because they were truncated.
    upstream_tcp_retries,
    /// Upstream datagrams ignored: wrong ID, question or not a response.
    upstream_mismatched,
    /// Upstream replies that could not be parsed where parsing was needed.
    upstream_malformed,
    /// FORMERR answers to malformed queries (and BADVERS to EDNS versions
    /// other than 0).
    formerr,
    /// REFUSED answers to clients outside `allow`.
    refused,
    /// NOTIMP answers (opcode other than QUERY).
    notimp,
    /// Datagrams dropped: too short to answer, or a response (QR=1).
    dropped_malformed,
    /// Queries dropped because too many were in flight.
    dropped_overload,
    /// UDP answers truncated (TC=1) to fit the client's payload size.
    truncated,
    /// Answers produced and handed to the socket (UDP and TCP).
    answers,
    /// TCP accepts that failed (e.g. out of file descriptors).
    tcp_accept_errors,
    /// Upstream lookups answered from the cache (RFC 2308).
    cache_hits,
    /// Upstream lookups the cache could not answer (sent upstream).
    cache_misses,
    /// Upstream replies put in the cache.
    cache_inserts,
    /// Cached replies pushed out by `cache-entries` / `cache-bytes`
    /// (least recently used first).
    cache_evictions,
    /// Cached replies found past their TTL (and removed).
    cache_expired,
}

impl Counters {
    /// Add one.
    #[inline]
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }
    /// Add `n`.
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_and_pairs_agree() {
        let c = Counters::default();
        Counters::inc(&c.synthesized);
        Counters::add(&c.synthesized_records, 3);
        let s = c.snapshot();
        assert_eq!((s.synthesized, s.synthesized_records, s.queries_udp), (1, 3, 0));
        let p = s.pairs();
        assert_eq!(p[0].0, "queries_udp");
        assert!(p.contains(&("synthesized_records", 3)));
        assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), 4);
        assert_eq!(p.len(), 36);
    }
}
