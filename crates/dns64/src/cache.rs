//! The cache of upstream answers (RFC 2308, RFC 1035 §7.4).
//!
//! What is kept is the upstream's reply to a [`Lookup`] (name, type,
//! class and the CD/EDNS/DO bits of the query), not the answer given to a
//! client: synthesis (RFC 6147 §5.1.7's TTL rule included) runs on cached
//! replies exactly as on fresh ones, so a reload that changes the prefix
//! applies at once, and the synthesised TTLs count down with the records
//! they come from.
//!
//! - Positive answers are kept for the smallest TTL of their records;
//!   negative ones (NXDOMAIN, and NODATA: no record of the asked type)
//!   for min(SOA TTL, SOA MINIMUM) (RFC 2308 §5), and only when they carry
//!   an SOA ("negative responses without SOA records SHOULD NOT be
//!   cached", §5). Each is capped by `cache-max-ttl` /
//!   `cache-max-negative-ttl`. Errors (SERVFAIL, REFUSED, ...), truncated
//!   replies and TTL-0 answers are not kept.
//! - An answer from the cache has every TTL decremented by the seconds it
//!   spent there (RFC 1035 §7.4); the SOA of a negative answer carries
//!   min(SOA TTL, MINIMUM) counting down (RFC 2308 §5). It goes when its
//!   TTL runs out.
//! - Bounded by `cache-entries` and `cache-bytes`; the least recently used
//!   answer goes first (counted as an eviction).

use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType};
use lru::LruCache;

use crate::config::CacheLimits;
use crate::core::Lookup;
use crate::stats::Counters;

/// Bytes counted for an entry beyond the reply itself (key, bookkeeping).
const OVERHEAD: usize = 96;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    /// Query name in lower case (names compare case-insensitively).
    name: String,
    qtype: u16,
    qclass: u16,
    /// CD, EDNS, DO: they change what the upstream answers.
    bits: u8,
}

impl Key {
    fn of(l: &Lookup) -> Key {
        Key {
            name: l.name.to_lowercase().to_ascii(),
            qtype: u16::from(l.qtype),
            qclass: u16::from(l.qclass),
            bits: u8::from(l.cd) | u8::from(l.edns) << 1 | u8::from(l.dnssec_ok) << 2,
        }
    }
}

#[derive(Debug)]
struct Entry {
    reply: Vec<u8>,
    stored: Instant,
    /// Seconds it stays.
    ttl: u32,
    size: usize,
}

#[derive(Debug)]
struct Inner {
    map: LruCache<Key, Entry>,
    bytes: usize,
}

/// The cache. Thread-safe; shared by every query of a server (and kept
/// across a reload that does not change the upstreams or the limits).
#[derive(Debug)]
pub struct Cache {
    inner: Mutex<Inner>,
    limits: CacheLimits,
    counters: Arc<Counters>,
}

/// TTLs of every record of `m` (OPT is not among them: EDNS is kept apart).
fn records(m: &Message) -> impl Iterator<Item = &Record> {
    m.answers().iter().chain(m.name_servers()).chain(m.additionals())
}

impl Cache {
    pub(crate) fn new(limits: CacheLimits, counters: Arc<Counters>) -> Cache {
        Cache { inner: Mutex::new(Inner { map: LruCache::unbounded(), bytes: 0 }), limits, counters }
    }

    pub(crate) fn limits(&self) -> CacheLimits {
        self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        function::lock(&self.inner)
    }

    /// (entries, bytes) held now.
    pub fn usage(&self) -> (usize, usize) {
        let g = self.lock();
        (g.map.len(), g.bytes)
    }

    /// The reply to `l` at `now`, its TTLs decremented, when one is kept.
    pub fn get(&self, l: &Lookup, now: Instant) -> Option<Vec<u8>> {
        let key = Key::of(l);
        let mut g = self.lock();
        let Some(e) = g.map.get(&key) else {
            Counters::inc(&self.counters.cache_misses);
            return None;
        };
        let age = now.saturating_duration_since(e.stored).as_secs();
        if age >= u64::from(e.ttl) {
            if let Some(old) = g.map.pop(&key) {
                g.bytes -= old.size;
            }
            Counters::inc(&self.counters.cache_expired);
            Counters::inc(&self.counters.cache_misses);
            return None;
        }
        let reply = e.reply.clone();
        drop(g);
        let age = age as u32;
        let aged = Message::from_vec(&reply).ok().and_then(|mut m| {
            // RFC 2308 §5: a cached negative answer's SOA carries
            // min(SOA TTL, MINIMUM), which then counts down like any TTL.
            let dec = |rs: Vec<Record>| -> Vec<Record> {
                rs.into_iter()
                    .map(|mut r| {
                        let ttl = match r.data() {
                            RData::SOA(s) => r.ttl().min(s.minimum()),
                            _ => r.ttl(),
                        };
                        r.set_ttl(ttl.saturating_sub(age));
                        r
                    })
                    .collect()
            };
            let (a, n, x) = (m.take_answers(), m.take_name_servers(), m.take_additionals());
            m.insert_answers(dec(a));
            m.insert_name_servers(dec(n));
            m.insert_additionals(dec(x));
            m.to_vec().ok()
        });
        match aged {
            Some(b) => {
                Counters::inc(&self.counters.cache_hits);
                Some(b)
            }
            None => {
                Counters::inc(&self.counters.cache_misses);
                None
            }
        }
    }

    /// How long `reply` to `l` may be kept (seconds), `None` when it may
    /// not be (see the module documentation).
    fn ttl_of(&self, l: &Lookup, reply: &[u8]) -> Option<u32> {
        let m = Message::from_vec(reply).ok()?;
        if m.truncated() {
            return None;
        }
        let min_ttl = records(&m).map(Record::ttl).min();
        let qtype = l.qtype;
        let has_data = m.answers().iter().any(|r| r.record_type() == qtype || qtype == RecordType::ANY);
        let ttl = match m.response_code() {
            ResponseCode::NoError if has_data => min_ttl?.min(self.limits.max_ttl),
            ResponseCode::NoError | ResponseCode::NXDomain => {
                // RFC 2308 §5: min(SOA TTL, SOA MINIMUM), and no longer than
                // the other records of the answer (a CNAME chain).
                let soa = m.name_servers().iter().find_map(|r| match r.data() {
                    RData::SOA(s) => Some(r.ttl().min(s.minimum())),
                    _ => None,
                })?;
                soa.min(min_ttl.unwrap_or(soa)).min(self.limits.max_negative_ttl)
            }
            _ => return None,
        };
        (ttl > 0).then_some(ttl)
    }

    /// Keep `reply` (an upstream's answer to `l`, received at `now`) if
    /// RFC 2308 lets it be kept.
    pub fn put(&self, l: &Lookup, reply: &[u8], now: Instant) {
        if self.limits.entries == 0 {
            return;
        }
        let Some(ttl) = self.ttl_of(l, reply) else { return };
        let key = Key::of(l);
        let size = reply.len() + key.name.len() + OVERHEAD;
        if size > self.limits.bytes {
            return;
        }
        let mut g = self.lock();
        if let Some(old) = g.map.pop(&key) {
            g.bytes -= old.size;
        }
        while g.map.len() >= self.limits.entries || g.bytes + size > self.limits.bytes {
            let Some((_, old)) = g.map.pop_lru() else { break };
            g.bytes -= old.size;
            Counters::inc(&self.counters.cache_evictions);
        }
        g.bytes += size;
        g.map.put(key, Entry { reply: reply.to_vec(), stored: now, ttl, size });
        Counters::inc(&self.counters.cache_inserts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;
    use hickory_proto::op::{MessageType, OpCode, Query};
    use hickory_proto::rr::rdata::{A, CNAME, SOA};
    use hickory_proto::rr::{DNSClass, Name};

    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn lookup(n: &str, t: RecordType) -> Lookup {
        Lookup { name: name(n), qtype: t, qclass: DNSClass::IN, cd: false, edns: false, dnssec_ok: false }
    }

    fn reply(l: &Lookup, rcode: ResponseCode, answers: Vec<Record>, soa: Option<(u32, u32)>) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(7).set_message_type(MessageType::Response).set_op_code(OpCode::Query).set_response_code(rcode);
        m.add_query(Query::query(l.name.clone(), l.qtype));
        m.insert_answers(answers);
        if let Some((ttl, min)) = soa {
            let s = SOA::new(name("ns.test."), name("host.test."), 1, 3600, 600, 86400, min);
            m.add_name_server(Record::from_rdata(name("test."), ttl, RData::SOA(s)));
        }
        m.to_vec().unwrap()
    }

    fn a(n: &str, ttl: u32) -> Record {
        Record::from_rdata(name(n), ttl, RData::A(A("192.0.2.1".parse().unwrap())))
    }

    fn cache(entries: usize, bytes: usize) -> Cache {
        let limits = CacheLimits { entries, bytes, max_ttl: 86_400, max_negative_ttl: 10_800 };
        Cache::new(limits, Arc::new(Counters::default()))
    }

    fn ttls(b: &[u8]) -> Vec<u32> {
        records(&Message::from_vec(b).unwrap()).map(Record::ttl).collect()
    }

    /// RFC 1035 §7.4 / RFC 2181 §8: kept for the smallest TTL, counted down.
    #[test]
    fn positive_answers_count_down_and_expire() {
        let c = cache(10, 1 << 20);
        let t0 = Instant::now();
        let l = lookup("www.Test.", RecordType::A);
        let r = reply(&l, ResponseCode::NoError, vec![a("www.test.", 300), a("www.test.", 60)], None);
        assert!(c.get(&l, t0).is_none());
        c.put(&l, &r, t0);
        assert_eq!(ttls(&c.get(&l, t0).unwrap()), [300, 60]);
        // Names are case-insensitive.
        let got = c.get(&lookup("WWW.test.", RecordType::A), t0 + Duration::from_secs(45)).unwrap();
        assert_eq!(ttls(&got), [255, 15]);
        assert!(c.get(&l, t0 + Duration::from_secs(60)).is_none(), "gone with the smallest TTL");
        let s = c.counters.snapshot();
        assert_eq!((s.cache_inserts, s.cache_hits, s.cache_misses, s.cache_expired), (1, 2, 2, 1));
        assert_eq!(c.usage(), (0, 0));
        // Other bits of the query are another answer.
        c.put(&l, &r, t0);
        assert!(c.get(&Lookup { dnssec_ok: true, edns: true, ..l.clone() }, t0).is_none());
        assert!(c.get(&lookup("www.test.", RecordType::AAAA), t0).is_none());
    }

    /// RFC 2308 §5: negative answers for min(SOA TTL, SOA MINIMUM), the
    /// SOA counting down; none without an SOA; errors never.
    #[test]
    fn negative_answers_and_what_is_not_kept() {
        let c = cache(10, 1 << 20);
        let t0 = Instant::now();
        let nx = lookup("nx.test.", RecordType::AAAA);
        c.put(&nx, &reply(&nx, ResponseCode::NXDomain, vec![], Some((3600, 120))), t0);
        let got = c.get(&nx, t0 + Duration::from_secs(20)).unwrap();
        assert_eq!(Message::from_vec(&got).unwrap().response_code(), ResponseCode::NXDomain);
        assert_eq!(ttls(&got), [100], "the SOA carries min(TTL, MINIMUM), counting down");
        assert!(c.get(&nx, t0 + Duration::from_secs(120)).is_none(), "MINIMUM 120 s bounds it");
        // NODATA behind a CNAME: bounded by the CNAME's TTL too.
        let nd = lookup("alias.test.", RecordType::AAAA);
        let cname = Record::from_rdata(name("alias.test."), 30, RData::CNAME(CNAME(name("v4.test."))));
        c.put(&nd, &reply(&nd, ResponseCode::NoError, vec![cname], Some((60, 600))), t0);
        assert!(c.get(&nd, t0 + Duration::from_secs(29)).is_some());
        assert!(c.get(&nd, t0 + Duration::from_secs(30)).is_none());
        // Not kept: no SOA, SERVFAIL, TTL 0, truncated.
        let none = [
            reply(&nx, ResponseCode::NXDomain, vec![], None),
            reply(&nx, ResponseCode::ServFail, vec![], Some((60, 60))),
            reply(&lookup("z.test.", RecordType::A), ResponseCode::NoError, vec![a("z.test.", 0)], None),
        ];
        let z = lookup("z.test.", RecordType::A);
        for (i, r) in none.iter().enumerate() {
            let l = if i == 2 { z.clone() } else { nx.clone() };
            c.put(&l, r, t0);
            assert!(c.get(&l, t0).is_none(), "case {i}");
        }
        let mut tc = Message::from_vec(&reply(&z, ResponseCode::NoError, vec![a("z.test.", 60)], None)).unwrap();
        tc.set_truncated(true);
        c.put(&z, &tc.to_vec().unwrap(), t0);
        assert!(c.get(&z, t0).is_none());
        // Capped by cache-max-negative-ttl.
        let capped = Cache::new(
            CacheLimits { entries: 10, bytes: 1 << 20, max_ttl: 50, max_negative_ttl: 5 },
            c.counters.clone(),
        );
        capped.put(&nx, &reply(&nx, ResponseCode::NXDomain, vec![], Some((3600, 3600))), t0);
        assert!(capped.get(&nx, t0 + Duration::from_secs(4)).is_some());
        assert!(capped.get(&nx, t0 + Duration::from_secs(5)).is_none());
        let w = lookup("w.test.", RecordType::A);
        capped.put(&w, &reply(&w, ResponseCode::NoError, vec![a("w.test.", 3600)], None), t0);
        assert!(capped.get(&w, t0 + Duration::from_secs(50)).is_none(), "cache-max-ttl");
    }

    /// Bounded by entries and bytes; the least recently used goes first.
    #[test]
    fn bounds_evict_the_least_recently_used() {
        let c = cache(2, 1 << 20);
        let t0 = Instant::now();
        let ls: Vec<Lookup> = ["a.test.", "b.test.", "c.test."].iter().map(|n| lookup(n, RecordType::A)).collect();
        let put = |c: &Cache, l: &Lookup| {
            c.put(l, &reply(l, ResponseCode::NoError, vec![a(&l.name.to_ascii(), 60)], None), t0)
        };
        put(&c, &ls[0]);
        put(&c, &ls[1]);
        assert!(c.get(&ls[0], t0).is_some(), "a is now the most recently used");
        put(&c, &ls[2]);
        assert!(c.get(&ls[1], t0).is_none(), "b was evicted");
        assert!(c.get(&ls[0], t0).is_some() && c.get(&ls[2], t0).is_some());
        assert_eq!(c.counters.snapshot().cache_evictions, 1);
        assert_eq!(c.usage().0, 2);
        // Bytes: room for about one entry.
        let one = reply(&ls[0], ResponseCode::NoError, vec![a("a.test.", 60)], None).len() + 7 + OVERHEAD;
        let b = cache(100, one + 10);
        put(&b, &ls[0]);
        put(&b, &ls[1]);
        assert_eq!(b.usage().0, 1);
        assert!(b.usage().1 <= one + 10);
        assert!(b.get(&ls[1], t0).is_some());
        // Off.
        let off = cache(0, 1 << 20);
        put(&off, &ls[0]);
        assert!(off.get(&ls[0], t0).is_none());
    }
}
