//! The DNS64 logic without sockets or clocks (sans-I/O).
//!
//! A client's query enters through [`Core::query`], which returns an
//! [`Action`]: reply with these bytes, drop, or look something up upstream
//! ([`Task`], whose [`Task::lookup`] says what to ask). The driver performs
//! the lookup however it likes and hands the outcome to
//! [`Core::upstream`], which again returns an [`Action`]. Every query takes
//! at most two lookups. The server in [`crate::server`] is one such driver;
//! the unit tests and the fuzz target are others.
//!
//! The rules follow RFC 6147; each branch names its section. Choices where
//! the RFC leaves options are listed in `docs/dns64.md`.

use core::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{AAAA, CNAME};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::arpa;
use crate::config::{Config, ConfigError, Policy};
use crate::stats::Counters;

/// EDNS payload size we advertise, upstream and to clients (the DNS flag
/// day 2020 value, avoids fragmentation).
pub const EDNS_PAYLOAD: u16 = 1232;
/// Largest UDP answer we send, whatever the client advertises.
pub const MAX_UDP_ANSWER: usize = 4096;
/// RFC 6147 §5.1.7: TTL cap for synthesised records when the negative AAAA
/// answer carried no SOA.
pub const NO_SOA_TTL: u32 = 600;

/// What to ask upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// Query name.
    pub name: Name,
    /// Query type.
    pub qtype: RecordType,
    /// Query class.
    pub qclass: DNSClass,
    /// Copy of the client's CD bit.
    pub cd: bool,
    /// Send an OPT record (the client sent one).
    pub edns: bool,
    /// Copy of the client's DO bit.
    pub dnssec_ok: bool,
}

impl Lookup {
    /// The upstream query message with this ID (RD set).
    pub fn to_bytes(&self, id: u16) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(id)
            .set_message_type(MessageType::Query)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(true)
            .set_checking_disabled(self.cd);
        let mut q = Query::query(self.name.clone(), self.qtype);
        q.set_query_class(self.qclass);
        m.add_query(q);
        if self.edns {
            let mut e = Edns::new();
            e.set_max_payload(EDNS_PAYLOAD).set_dnssec_ok(self.dnssec_ok);
            m.set_edns(e);
        }
        // A name that came out of a parsed message always encodes again.
        m.to_vec().unwrap_or_default()
    }

    /// True when `reply` is a response to this lookup sent with `id`: QR
    /// set, same ID, one question with the same name (case-insensitive),
    /// type and class. Only the header and question are parsed.
    pub fn matches(&self, id: u16, reply: &[u8]) -> bool {
        let mut d = BinDecoder::new(reply);
        let Ok(h) = Header::read(&mut d) else { return false };
        if h.id() != id || h.message_type() != MessageType::Response || h.query_count() != 1 {
            return false;
        }
        let Ok(q) = Query::read(&mut d) else { return false };
        q.name() == &self.name && q.query_type() == self.qtype && q.query_class() == self.qclass
    }
}

/// Whether an upstream reply was truncated (TC bit); `false` when too short.
pub fn is_truncated(reply: &[u8]) -> bool {
    reply.len() >= 12 && reply[2] & 0x02 != 0
}

/// The RCODE (low four bits) of a raw message; `None` when too short.
pub fn raw_rcode(reply: &[u8]) -> Option<u8> {
    (reply.len() >= 12).then(|| reply[3] & 0x0f)
}

/// The outcome of a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A reply that [`Lookup::matches`] (any RCODE).
    Reply(Vec<u8>),
    /// No upstream answered in time (RFC 6147 §5.1.3).
    Timeout,
    /// Every upstream failed otherwise (network errors).
    Failed,
}

/// The client's query, as needed to answer it.
#[derive(Debug, Clone)]
pub struct Client {
    id: u16,
    query: Query,
    rd: bool,
    cd: bool,
    /// Client's EDNS payload size and DO bit, when it sent OPT.
    edns: Option<(u16, bool)>,
    tcp: bool,
}

impl Client {
    fn dnssec_ok(&self) -> bool {
        self.edns.is_some_and(|(_, d)| d)
    }
    fn limit(&self) -> usize {
        if self.tcp {
            usize::from(u16::MAX)
        } else {
            match self.edns {
                Some((p, _)) => usize::from(p).clamp(512, MAX_UDP_ANSWER),
                None => 512,
            }
        }
    }
    fn lookup(&self, name: Name, qtype: RecordType) -> Lookup {
        Lookup {
            name,
            qtype,
            qclass: self.query.query_class(),
            cd: self.cd,
            edns: self.edns.is_some(),
            dnssec_ok: self.dnssec_ok(),
        }
    }
}

#[derive(Debug, Clone)]
enum Phase {
    /// Relay the upstream reply unchanged.
    Forward,
    /// RFC 6147 §5.1: the AAAA query.
    Aaaa,
    /// RFC 6147 §5.1.6: the A query; holds the AAAA reply when it was a
    /// usable NOERROR answer without (non-excluded) AAAA records.
    A { aaaa: Option<Message> },
    /// RFC 6147 §5.3.1: the in-addr.arpa PTR query for a name under the prefix.
    Ptr,
}

/// A query waiting for an upstream lookup.
#[derive(Debug, Clone)]
pub struct Task {
    client: Client,
    phase: Phase,
    lookup: Lookup,
}

impl Task {
    /// What to ask upstream.
    pub fn lookup(&self) -> &Lookup {
        &self.lookup
    }
    /// The client's query (for [`Core::servfail`]).
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// What the driver does next.
#[derive(Debug)]
pub enum Action {
    /// Send these bytes to the client.
    Reply(Vec<u8>),
    /// Send nothing (counted).
    Drop,
    /// Perform [`Task::lookup`] and feed the outcome to [`Core::upstream`].
    Lookup(Box<Task>),
}

/// The DNS64 function: policy plus counters.
#[derive(Debug, Clone)]
pub struct Core {
    policy: Policy,
    counters: Arc<Counters>,
    /// The gateway's destination policy: no synthesis for an IPv4 address
    /// a client must not reach through the NAT64 (the gateway's own).
    destinations: Option<Arc<dstpolicy::Policy>>,
}

/// Records of the answer section that must go: A records (replaced by
/// synthesis) and the RRSIGs covering them.
fn rrsig_covers(r: &Record, t: RecordType) -> bool {
    match r.data() {
        RData::Unknown { code: RecordType::RRSIG, rdata } => {
            rdata.anything().get(..2).is_some_and(|b| RecordType::from(u16::from_be_bytes([b[0], b[1]])) == t)
        }
        _ => false,
    }
}

/// RFC 2308 §5: the negative TTL is the lesser of the SOA's TTL and its
/// MINIMUM field.
fn negative_ttl(authority: &[Record]) -> Option<u32> {
    authority.iter().find_map(|r| match r.data() {
        RData::SOA(soa) => Some(r.ttl().min(soa.minimum())),
        _ => None,
    })
}

/// RCODEs that fit the header (extended ones need EDNS; map to SERVFAIL).
fn plain(r: ResponseCode) -> ResponseCode {
    if u16::from(r) > 15 {
        ResponseCode::ServFail
    } else {
        r
    }
}

impl Core {
    /// Build from a configuration; only `prefix`, `exclude-aaaa`,
    /// `exclude-a` and `allow` are used and checked.
    pub fn new(cfg: &Config, counters: Arc<Counters>) -> Result<Core, ConfigError> {
        Ok(Core { policy: cfg.policy()?, counters, destinations: None })
    }

    /// With the gateway's destination policy: A records naming an address
    /// it refuses (the gateway's own addresses and directed broadcasts,
    /// besides the classes `exclude-a` lists by default) are not
    /// synthesised, as RFC 6147 §5.1.4 allows for excluded IPv4 prefixes.
    pub fn with_destinations(mut self, p: Option<Arc<dstpolicy::Policy>>) -> Core {
        self.destinations = p;
        self
    }

    /// The counters this core updates.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// A client's query arrives from `from` (UDP, or TCP when `tcp`).
    pub fn query(&self, from: IpAddr, bytes: &[u8], tcp: bool) -> Action {
        let c = &self.counters;
        Counters::inc(if tcp { &c.queries_tcp } else { &c.queries_udp });
        let msg = match Message::from_vec(bytes) {
            Ok(m) => m,
            Err(_) => {
                // A header we can answer: FORMERR with its ID (RFC 1035
                // §4.1.1); anything shorter, or a response, is dropped.
                if bytes.len() >= 12 && bytes[2] & 0x80 == 0 {
                    Counters::inc(&c.formerr);
                    return Action::Reply(header_only(bytes, ResponseCode::FormErr));
                }
                Counters::inc(&c.dropped_malformed);
                return Action::Drop;
            }
        };
        if msg.message_type() == MessageType::Response {
            Counters::inc(&c.dropped_malformed);
            return Action::Drop;
        }
        let edns = msg.extensions().as_ref().map(|e| (e.max_payload(), e.flags().dnssec_ok));
        let one = msg.queries().len() == 1;
        let client = Client {
            id: msg.id(),
            query: msg.queries().first().cloned().unwrap_or_default(),
            rd: msg.recursion_desired(),
            cd: msg.checking_disabled(),
            edns,
            tcp,
        };
        if msg.op_code() != OpCode::Query {
            Counters::inc(&c.notimp);
            return Action::Reply(self.minimal(&client, one, ResponseCode::NotImp, false));
        }
        if !one {
            Counters::inc(&c.formerr);
            return Action::Reply(self.minimal(&client, false, ResponseCode::FormErr, false));
        }
        // RFC 6891 §6.1.3: an EDNS version we do not implement gets BADVERS.
        if msg.extensions().as_ref().is_some_and(|e| e.version() > 0) {
            Counters::inc(&c.formerr);
            return Action::Reply(self.minimal(&client, true, ResponseCode::BADVERS, false));
        }
        if !self.policy.allow.iter().any(|n| n.contains(from)) {
            Counters::inc(&c.refused);
            return Action::Reply(self.minimal(&client, true, ResponseCode::Refused, false));
        }
        let name = client.query.name().clone();
        let qtype = client.query.query_type();
        Counters::inc(match qtype {
            RecordType::AAAA => &c.qtype_aaaa,
            RecordType::A => &c.qtype_a,
            RecordType::PTR => &c.qtype_ptr,
            _ => &c.qtype_other,
        });
        // RFC 6147 §5.1: DNS64 for classes other than IN is undefined; act
        // as if no DNS64 were configured.
        let is_in = client.query.query_class() == DNSClass::IN;
        // RFC 6147 §5.5 (3): CD and DO set: no synthesis, the client
        // validates and synthesises itself.
        let no_synth = client.cd && client.dnssec_ok();
        let (phase, lookup) = match qtype {
            RecordType::AAAA if is_in && !no_synth => (Phase::Aaaa, client.lookup(name, RecordType::AAAA)),
            RecordType::PTR if is_in => match arpa::ip6_arpa_addr(&name).and_then(|a| self.policy.extract(&a)) {
                Some(v4) if !no_synth => (Phase::Ptr, client.lookup(arpa::in_addr_name(v4), RecordType::PTR)),
                Some(_) => {
                    Counters::inc(&c.dnssec_no_synthesis);
                    (Phase::Forward, client.lookup(name, qtype))
                }
                None => (Phase::Forward, client.lookup(name, qtype)),
            },
            _ => {
                if qtype == RecordType::AAAA && is_in {
                    Counters::inc(&c.dnssec_no_synthesis);
                }
                (Phase::Forward, client.lookup(name, qtype))
            }
        };
        Action::Lookup(Box::new(Task { client, phase, lookup }))
    }

    /// The outcome of `task`'s lookup arrives.
    pub fn upstream(&self, task: Box<Task>, result: Upstream) -> Action {
        let Task { client, phase, .. } = *task;
        match phase {
            Phase::Forward => self.forward(&client, result),
            Phase::Aaaa => self.on_aaaa(client, result),
            Phase::A { aaaa } => self.on_a(&client, aaaa, result),
            Phase::Ptr => self.on_ptr(&client, result),
        }
    }

    /// SERVFAIL for `client` (the driver's answer bound was reached).
    pub fn servfail(&self, client: &Client) -> Vec<u8> {
        Counters::inc(&self.counters.servfail_deadline);
        self.minimal(client, true, ResponseCode::ServFail, false)
    }

    fn upstream_failed(&self, client: &Client) -> Action {
        Counters::inc(&self.counters.servfail_upstream);
        Action::Reply(self.minimal(client, true, ResponseCode::ServFail, false))
    }

    /// Relay an upstream reply unchanged but for the ID and RD bit; too
    /// big for the client's UDP limit: TC=1 and no records.
    fn relay(&self, client: &Client, mut bytes: Vec<u8>) -> Action {
        if bytes.len() < 12 {
            return self.upstream_failed(client);
        }
        if bytes.len() > client.limit() {
            Counters::inc(&self.counters.truncated);
            let rcode = ResponseCode::from_low(bytes[3] & 0x0f);
            return Action::Reply(self.minimal(client, true, rcode, true));
        }
        bytes[..2].copy_from_slice(&client.id.to_be_bytes());
        // QR set whatever the driver passed in; RD as the client sent it.
        bytes[2] = 0x80 | (bytes[2] & !0x01) | u8::from(client.rd);
        Action::Reply(bytes)
    }

    fn forward(&self, client: &Client, result: Upstream) -> Action {
        match result {
            Upstream::Reply(bytes) => {
                Counters::inc(&self.counters.passthrough);
                self.relay(client, bytes)
            }
            Upstream::Timeout | Upstream::Failed => self.upstream_failed(client),
        }
    }

    fn excluded_aaaa(&self, r: &Record) -> bool {
        match r.data() {
            RData::AAAA(AAAA(a)) => self.policy.exclude_aaaa.iter().any(|p| p.contains(a)),
            _ => false,
        }
    }

    fn to_a_phase(&self, client: Client, aaaa: Option<Message>) -> Action {
        let lookup = client.lookup(client.query.name().clone(), RecordType::A);
        Action::Lookup(Box::new(Task { client, phase: Phase::A { aaaa }, lookup }))
    }

    fn on_aaaa(&self, client: Client, result: Upstream) -> Action {
        let c = &self.counters;
        let bytes = match result {
            Upstream::Reply(b) => b,
            // §5.1.3: a timeout is RCODE=2, which §5.1.2 treats as an empty
            // answer: go on to the A query.
            Upstream::Timeout | Upstream::Failed => return self.to_a_phase(client, None),
        };
        let msg = match Message::from_vec(&bytes) {
            Ok(m) => m,
            Err(_) => {
                Counters::inc(&c.upstream_malformed);
                return self.to_a_phase(client, None);
            }
        };
        match msg.response_code() {
            // §5.1.2: NXDOMAIN is returned as in normal DNS operation.
            ResponseCode::NXDomain => {
                Counters::inc(&c.aaaa_nxdomain);
                return self.relay(&client, bytes);
            }
            ResponseCode::NoError => {}
            // §5.1.2: any other RCODE is treated as NOERROR with an empty
            // answer (no SOA to take a TTL from).
            _ => return self.to_a_phase(client, None),
        }
        let aaaa: Vec<&Record> = msg.answers().iter().filter(|r| r.record_type() == RecordType::AAAA).collect();
        let excluded = aaaa.iter().filter(|r| self.excluded_aaaa(r)).count();
        Counters::add(&c.excluded_aaaa_records, excluded as u64);
        if aaaa.len() > excluded {
            // §5.1.1: real AAAA data: return it, no synthesis. §5.1.4: minus
            // the excluded records (and the now invalid RRSIGs over them).
            Counters::inc(&c.aaaa_real);
            if excluded == 0 {
                return self.relay(&client, bytes);
            }
            let answers: Vec<Record> = msg
                .answers()
                .iter()
                .filter(|r| !self.excluded_aaaa(r) && !rrsig_covers(r, RecordType::AAAA))
                .cloned()
                .collect();
            return self.respond(&client, &msg, msg.response_code(), answers, false);
        }
        // §5.1.4: only excluded AAAA records count as an empty answer;
        // §5.1.6: look for A records.
        self.to_a_phase(client, Some(msg))
    }

    fn on_a(&self, client: &Client, aaaa: Option<Message>, result: Upstream) -> Action {
        let c = &self.counters;
        let bytes = match result {
            Upstream::Reply(b) => b,
            Upstream::Timeout | Upstream::Failed => return self.upstream_failed(client),
        };
        let msg = match Message::from_vec(&bytes) {
            Ok(m) => m,
            Err(_) => {
                Counters::inc(&c.upstream_malformed);
                return self.upstream_failed(client);
            }
        };
        let rcode = msg.response_code();
        if rcode != ResponseCode::NoError {
            // §5.1.6: an error from the A query is the basis of the answer.
            if rcode == ResponseCode::NXDomain {
                Counters::inc(&c.aaaa_nxdomain);
            } else {
                Counters::inc(&c.servfail_upstream);
            }
            let chain = msg.answers().iter().filter(|r| !is_a_data(r)).cloned().collect();
            return self.respond(client, &msg, plain(rcode), chain, false);
        }
        // §5.1.7: TTL = min(A TTL, SOA of the negative AAAA answer), or
        // min(A TTL, 600) without one.
        let cap = aaaa.as_ref().and_then(|m| negative_ttl(m.name_servers())).unwrap_or(NO_SOA_TTL);
        let mut synth = Vec::new();
        for r in msg.answers() {
            let RData::A(a) = r.data() else { continue };
            if r.dns_class() != DNSClass::IN {
                continue;
            }
            match self.synthesize(a.0) {
                Some(v6) => synth.push(Record::from_rdata(r.name().clone(), r.ttl().min(cap), RData::AAAA(AAAA(v6)))),
                None => Counters::inc(&c.excluded_a_records),
            }
        }
        if synth.is_empty() {
            // §5.1.6 / §5.4: no usable A data: answer with the AAAA reply
            // (minus excluded records), or, when that was an error, with the
            // empty A reply.
            Counters::inc(&c.aaaa_nodata);
            return match aaaa {
                Some(m) => {
                    let kept: Vec<Record> = m
                        .answers()
                        .iter()
                        .filter(|r| !self.excluded_aaaa(r) && !rrsig_covers(r, RecordType::AAAA))
                        .cloned()
                        .collect();
                    // AD stays only when the reply goes back unmodified.
                    let ad = m.authentic_data() && kept.len() == m.answers().len();
                    self.respond(client, &m, m.response_code(), kept, ad)
                }
                None => {
                    let chain = msg.answers().iter().filter(|r| !is_a_data(r)).cloned().collect();
                    self.respond(client, &msg, ResponseCode::NoError, chain, false)
                }
            };
        }
        // §5.1.5: the CNAME/DNAME chain stays in the answer; §5.1.6: the A
        // records that formed the basis of synthesis are removed; §5.4: the
        // authority and additional sections come from the A reply (§5.3.2:
        // unchanged). §5.5 (1): we do not validate, so AD is clear.
        Counters::inc(&c.synthesized);
        Counters::add(&c.synthesized_records, synth.len() as u64);
        let mut answers: Vec<Record> = msg.answers().iter().filter(|r| !is_a_data(r)).cloned().collect();
        answers.extend(synth);
        self.respond(client, &msg, ResponseCode::NoError, answers, false)
    }

    /// The AAAA address for an A record's address, under the prefix of
    /// its range (`[[dns64.prefixes]]`, RFC 6147 §5.2) or `prefix`; `None`
    /// when excluded (`exclude-a`) or not representable (RFC 6052 §3.1:
    /// only global addresses under the Well-Known Prefix).
    pub fn synthesize(&self, a: Ipv4Addr) -> Option<core::net::Ipv6Addr> {
        if self.policy.exclude_a.iter().any(|p| p.contains(a)) {
            return None;
        }
        if self.destinations.as_ref().is_some_and(|d| d.check(IpAddr::V4(a)).is_err()) {
            return None;
        }
        self.policy.prefix_for(a).embed(a)
    }

    fn on_ptr(&self, client: &Client, result: Upstream) -> Action {
        let c = &self.counters;
        let bytes = match result {
            Upstream::Reply(b) => b,
            Upstream::Timeout | Upstream::Failed => return self.upstream_failed(client),
        };
        let msg = match Message::from_vec(&bytes) {
            Ok(m) => m,
            Err(_) => {
                Counters::inc(&c.upstream_malformed);
                return self.upstream_failed(client);
            }
        };
        let rcode = plain(msg.response_code());
        let has_ptr = msg.answers().iter().any(|r| r.record_type() == RecordType::PTR);
        if rcode != ResponseCode::NoError || !has_ptr {
            // §5.3.1 (2): no CNAME unless there is PTR data behind it. The
            // in-addr.arpa authority section belongs to another zone: drop it.
            if rcode == ResponseCode::ServFail {
                Counters::inc(&c.servfail_upstream);
            }
            return Action::Reply(self.encode(client, rcode, false, vec![], vec![], vec![]));
        }
        // §5.3.1 (2): synthesise a CNAME from the ip6.arpa name to the
        // in-addr.arpa name, followed by the upstream's answer (which may
        // itself be an RFC 2317 CNAME chain; see docs/dns64.md).
        Counters::inc(&c.ptr_synthesized);
        let target = msg.queries().first().map(|q| q.name().clone()).unwrap_or_else(Name::root);
        let ttl = msg.answers().iter().map(|r| r.ttl()).min().unwrap_or(0);
        let mut answers = vec![Record::from_rdata(client.query.name().clone(), ttl, RData::CNAME(CNAME(target)))];
        answers.extend(msg.answers().iter().cloned());
        Action::Reply(self.encode(
            client,
            ResponseCode::NoError,
            false,
            answers,
            msg.name_servers().to_vec(),
            msg.additionals().to_vec(),
        ))
    }

    /// §5.4: question from the client, answer as built, authority and
    /// additional from the basis reply.
    fn respond(&self, client: &Client, basis: &Message, rcode: ResponseCode, answers: Vec<Record>, ad: bool) -> Action {
        Action::Reply(self.encode(
            client,
            plain(rcode),
            ad,
            answers,
            basis.name_servers().to_vec(),
            basis.additionals().to_vec(),
        ))
    }

    fn header(&self, client: &Client, rcode: ResponseCode, ad: bool) -> Message {
        let mut m = Message::new();
        m.set_id(client.id)
            .set_message_type(MessageType::Response)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(client.rd)
            .set_recursion_available(true)
            .set_checking_disabled(client.cd)
            .set_authentic_data(ad)
            .set_response_code(rcode);
        if let Some((_, dnssec_ok)) = client.edns {
            let mut e = Edns::new();
            e.set_max_payload(EDNS_PAYLOAD).set_dnssec_ok(dnssec_ok);
            m.set_edns(e);
        }
        m
    }

    /// Encode a full answer; over the client's limit: TC=1 without records.
    fn encode(
        &self,
        client: &Client,
        rcode: ResponseCode,
        ad: bool,
        answers: Vec<Record>,
        authority: Vec<Record>,
        additional: Vec<Record>,
    ) -> Vec<u8> {
        let mut m = self.header(client, rcode, ad);
        m.add_query(client.query.clone());
        m.insert_answers(answers);
        m.insert_name_servers(authority);
        m.insert_additionals(additional);
        match m.to_vec() {
            Ok(b) if b.len() <= client.limit() => b,
            Ok(_) => {
                Counters::inc(&self.counters.truncated);
                self.minimal(client, true, rcode, true)
            }
            Err(_) => {
                Counters::inc(&self.counters.servfail_upstream);
                self.minimal(client, true, ResponseCode::ServFail, false)
            }
        }
    }

    /// Header, the question (when `question`), OPT when the client sent one.
    fn minimal(&self, client: &Client, question: bool, rcode: ResponseCode, tc: bool) -> Vec<u8> {
        let mut m = self.header(client, rcode, false);
        m.set_truncated(tc);
        if question {
            m.add_query(client.query.clone());
        }
        m.to_vec().unwrap_or_else(|_| {
            let mut h = [0u8; 12];
            h[..2].copy_from_slice(&client.id.to_be_bytes());
            header_only(&h, rcode)
        })
    }
}

/// A records and the RRSIGs over them.
fn is_a_data(r: &Record) -> bool {
    r.record_type() == RecordType::A || rrsig_covers(r, RecordType::A)
}

/// A 12-byte answer to a query whose body cannot be parsed: same ID and
/// opcode, QR=1, RD copied, no sections.
fn header_only(query: &[u8], rcode: ResponseCode) -> Vec<u8> {
    let mut h = vec![0u8; 12];
    h[..2].copy_from_slice(&query[..2]);
    h[2] = 0x80 | (query[2] & 0x79); // QR, opcode, RD
    h[3] = 0x80 | (u16::from(rcode) as u8 & 0x0f); // RA, RCODE
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv6Addr;
    use hickory_proto::rr::rdata::{A, NULL, PTR, SOA};

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn core(prefix: &str) -> Core {
        let cfg = Config { prefix: prefix.into(), ..Config::default() };
        Core::new(&cfg, Arc::default()).unwrap()
    }
    fn name(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }
    fn query(n: &str, t: RecordType, edns: Option<bool>, cd: bool) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(0x1234).set_recursion_desired(true).set_checking_disabled(cd);
        m.add_query(Query::query(name(n), t));
        if let Some(d) = edns {
            let mut e = Edns::new();
            e.set_max_payload(1232).set_dnssec_ok(d);
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }
    fn a(n: &str, ttl: u32, v4: &str) -> Record {
        Record::from_rdata(name(n), ttl, RData::A(A(v4.parse().unwrap())))
    }
    fn aaaa(n: &str, ttl: u32, v6: &str) -> Record {
        Record::from_rdata(name(n), ttl, RData::AAAA(AAAA(v6.parse().unwrap())))
    }
    fn cname(n: &str, ttl: u32, t: &str) -> Record {
        Record::from_rdata(name(n), ttl, RData::CNAME(CNAME(name(t))))
    }
    fn soa(zone: &str, ttl: u32, minimum: u32) -> Record {
        let s = SOA::new(name("ns.example."), name("host.example."), 1, 3600, 600, 86400, minimum);
        Record::from_rdata(name(zone), ttl, RData::SOA(s))
    }
    fn rrsig(n: &str, covered: RecordType) -> Record {
        let mut rdata = u16::from(covered).to_be_bytes().to_vec();
        rdata.extend_from_slice(&[8, 2, 0, 0, 1, 44]);
        Record::from_rdata(name(n), 300, RData::Unknown { code: RecordType::RRSIG, rdata: NULL::with(rdata) })
    }
    /// An upstream reply to `l`.
    fn reply(l: &Lookup, rcode: ResponseCode, ans: Vec<Record>, auth: Vec<Record>, ad: bool) -> Upstream {
        let mut m = Message::new();
        m.set_id(7).set_message_type(MessageType::Response).set_recursion_available(true);
        m.set_response_code(rcode).set_authentic_data(ad);
        let mut q = Query::query(l.name.clone(), l.qtype);
        q.set_query_class(l.qclass);
        m.add_query(q);
        m.insert_answers(ans);
        m.insert_name_servers(auth);
        let b = m.to_vec().unwrap();
        assert!(l.matches(7, &b));
        Upstream::Reply(b)
    }
    fn lookup(a: Action) -> Box<Task> {
        match a {
            Action::Lookup(t) => t,
            other => panic!("expected a lookup, got {other:?}"),
        }
    }
    fn answer(a: Action) -> Message {
        match a {
            Action::Reply(b) => Message::from_vec(&b).unwrap(),
            other => panic!("expected a reply, got {other:?}"),
        }
    }
    fn addrs(m: &Message) -> Vec<(String, u32, Ipv6Addr)> {
        m.answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::AAAA(AAAA(a)) => Some((r.name().to_ascii(), r.ttl(), *a)),
                _ => None,
            })
            .collect()
    }
    /// AAAA query that upstream answers NODATA (with `auth`), then A with `ans`.
    fn synth(c: &Core, qname: &str, auth: Vec<Record>, ans: Vec<Record>) -> Message {
        let t = lookup(c.query(LOCAL, &query(qname, RecordType::AAAA, None, false), false));
        assert_eq!(t.lookup().qtype, RecordType::AAAA);
        let r = reply(t.lookup(), ResponseCode::NoError, vec![], auth, false);
        let t = lookup(c.upstream(t, r));
        assert_eq!(t.lookup().qtype, RecordType::A);
        assert_eq!(t.lookup().name, name(qname));
        let r = reply(t.lookup(), ResponseCode::NoError, ans, vec![], false);
        answer(c.upstream(t, r))
    }

    /// RFC 6052 §2.4 table through the DNS: each prefix length.
    #[test]
    fn synthesis_with_each_rfc6052_prefix_length() {
        use xlat::testvec::{RFC6052_2_4, RFC6052_2_4_IPV4};
        for (prefix, want) in RFC6052_2_4 {
            let c = core(prefix);
            let m = synth(&c, "h2.example.", vec![], vec![a("h2.example.", 300, &RFC6052_2_4_IPV4.to_string())]);
            assert_eq!(m.response_code(), ResponseCode::NoError);
            assert_eq!(m.id(), 0x1234);
            assert_eq!(m.queries()[0].query_type(), RecordType::AAAA);
            assert_eq!(addrs(&m), vec![("h2.example.".into(), 300, want.parse().unwrap())], "{prefix}");
            assert!(m.answers().iter().all(|r| r.record_type() != RecordType::A));
            assert_eq!(c.counters().snapshot().synthesized, 1);
        }
    }

    /// RFC 6052 §3.1: under the WKP only global IPv4 addresses are synthesised.
    #[test]
    fn wkp_synthesises_only_global_addresses() {
        let c = core("64:ff9b::/96");
        let m = synth(
            &c,
            "mixed.example.",
            vec![],
            vec![a("mixed.example.", 300, "198.41.0.4"), a("mixed.example.", 300, "10.0.0.1")],
        );
        assert_eq!(addrs(&m), vec![("mixed.example.".into(), 300, "64:ff9b::c629:4".parse().unwrap())]);
        let s = c.counters().snapshot();
        assert_eq!((s.synthesized_records, s.excluded_a_records), (1, 1));
        // Only private addresses: NODATA, the original AAAA answer.
        let m = synth(&c, "priv.example.", vec![soa("example.", 60, 60)], vec![a("priv.example.", 300, "192.168.1.1")]);
        assert_eq!(m.response_code(), ResponseCode::NoError);
        assert!(m.answers().is_empty());
        assert_eq!(m.name_servers().len(), 1, "SOA of the AAAA answer kept");
        assert_eq!(c.counters().snapshot().aaaa_nodata, 1);
    }

    /// The gateway's own addresses (and its subnets' broadcasts) are not
    /// synthesised: a client would reach the gateway itself through its
    /// NAT64. Refusals are counted by the policy's plane.
    #[test]
    fn the_gateways_own_addresses_are_not_synthesised() {
        use dstpolicy::{Gateway, Lists, Policy, Spec};
        let gw = Gateway::new(Spec { own: vec!["198.51.100.7".parse().unwrap()], ..Spec::default() });
        gw.apply(Ok(vec![netsys::netlink::Address {
            ifindex: 2,
            local: netsys::IfAddr { addr: "203.0.113.1".parse().unwrap(), len: 24 },
            broadcast: None,
        }]));
        // Even while the list cannot be re-read: DNS64 does not fail closed.
        gw.apply(Err(std::io::Error::other("Too many open files")));
        let p = Arc::new(Policy::new("dns64", Arc::new(gw), Lists::default()).failing_open());
        let c = core("64:ff9b:1::/96").with_destinations(Some(p.clone()));
        let m = synth(
            &c,
            "gw.example.",
            vec![],
            vec![
                a("gw.example.", 300, "203.0.113.1"),
                a("gw.example.", 300, "198.51.100.7"),
                a("gw.example.", 300, "203.0.113.255"),
                a("gw.example.", 300, "192.0.2.9"),
            ],
        );
        assert_eq!(addrs(&m), vec![("gw.example.".into(), 300, "64:ff9b:1::c000:209".parse().unwrap())]);
        assert_eq!(c.counters().snapshot().excluded_a_records, 3);
        assert_eq!(p.refused_total(), 3);
    }

    #[test]
    fn exclude_a_is_honoured() {
        let c = core("64:ff9b:1::/96");
        let m = synth(
            &c,
            "x.example.",
            vec![],
            vec![
                a("x.example.", 300, "127.0.0.1"),
                a("x.example.", 300, "224.0.0.1"),
                a("x.example.", 300, "10.1.1.1"),
            ],
        );
        assert_eq!(addrs(&m), vec![("x.example.".into(), 300, "64:ff9b:1::a01:101".parse().unwrap())]);
        assert_eq!(c.counters().snapshot().excluded_a_records, 2);
    }

    /// RFC 6147 §5.1.1: real AAAA data goes back unchanged, no A query.
    #[test]
    fn real_aaaa_passes_through() {
        let c = core("64:ff9b::/96");
        let t = lookup(c.query(LOCAL, &query("v6.example.", RecordType::AAAA, None, false), false));
        let r = reply(t.lookup(), ResponseCode::NoError, vec![aaaa("v6.example.", 123, "2001:db8::1")], vec![], true);
        let m = answer(c.upstream(t, r));
        assert_eq!(m.id(), 0x1234);
        assert_eq!(addrs(&m), vec![("v6.example.".into(), 123, "2001:db8::1".parse().unwrap())]);
        assert!(m.authentic_data(), "unchanged reply keeps the upstream's AD bit");
        assert_eq!(c.counters().snapshot().aaaa_real, 1);
    }

    /// RFC 6147 §5.1.4: excluded AAAA records are removed; only excluded
    /// records means synthesis.
    #[test]
    fn aaaa_exclusion() {
        let c = core("64:ff9b:1::/96");
        let t = lookup(c.query(LOCAL, &query("m.example.", RecordType::AAAA, None, false), false));
        let ans = vec![aaaa("m.example.", 60, "::ffff:192.0.2.1"), aaaa("m.example.", 60, "2001:db8::5")];
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, ans, vec![], true)));
        assert_eq!(addrs(&m), vec![("m.example.".into(), 60, "2001:db8::5".parse().unwrap())]);
        assert!(!m.authentic_data(), "modified answer is not authentic");
        let m = synth(&c, "only.example.", vec![], vec![a("only.example.", 60, "192.0.2.1")]);
        assert_eq!(addrs(&m), vec![("only.example.".into(), 60, "64:ff9b:1::c000:201".parse().unwrap())]);
        // Only mapped AAAA records, and no A records: NODATA without the
        // offending records.
        let t = lookup(c.query(LOCAL, &query("bad.example.", RecordType::AAAA, None, false), false));
        let r =
            reply(t.lookup(), ResponseCode::NoError, vec![aaaa("bad.example.", 60, "::ffff:1.2.3.4")], vec![], false);
        let t = lookup(c.upstream(t, r));
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], false)));
        assert!(m.answers().is_empty());
        assert_eq!(c.counters().snapshot().excluded_aaaa_records, 2);
    }

    /// RFC 6147 §5.1.7 with RFC 2308 §5: TTL = min(A TTL, SOA TTL, SOA
    /// MINIMUM); without an SOA, min(A TTL, 600).
    #[test]
    fn ttl_rule() {
        let c = core("64:ff9b:1::/96");
        let ttl =
            |auth, a_ttl| synth(&c, "t.example.", auth, vec![a("t.example.", a_ttl, "192.0.2.1")]).answers()[0].ttl();
        assert_eq!(ttl(vec![soa("example.", 3600, 60)], 300), 60);
        assert_eq!(ttl(vec![soa("example.", 30, 900)], 300), 30);
        assert_eq!(ttl(vec![soa("example.", 3600, 3600)], 300), 300);
        assert_eq!(ttl(vec![], 86400), 600);
        assert_eq!(ttl(vec![], 5), 5);
    }

    /// RFC 6147 §5.1.5: the CNAME chain stays, synthesis at its end.
    #[test]
    fn cname_chain() {
        let c = core("64:ff9b:1::/96");
        let ans = vec![
            cname("www.example.", 300, "cdn.example.net."),
            cname("cdn.example.net.", 300, "edge.example.net."),
            a("edge.example.net.", 20, "198.51.100.7"),
            rrsig("edge.example.net.", RecordType::A),
            rrsig("www.example.", RecordType::CNAME),
        ];
        let m = synth(&c, "www.example.", vec![], ans);
        let types: Vec<RecordType> = m.answers().iter().map(|r| r.record_type()).collect();
        assert_eq!(types, [RecordType::CNAME, RecordType::CNAME, RecordType::RRSIG, RecordType::AAAA]);
        assert_eq!(addrs(&m), vec![("edge.example.net.".into(), 20, "64:ff9b:1::c633:6407".parse().unwrap())]);
        assert!(rrsig_covers(&m.answers()[2], RecordType::CNAME), "only the RRSIG over A goes");
    }

    /// RFC 6147 §5.1.2: NXDOMAIN is returned as is, no A query.
    #[test]
    fn nxdomain_no_synthesis() {
        let c = core("64:ff9b::/96");
        let t = lookup(c.query(LOCAL, &query("nx.example.", RecordType::AAAA, None, false), false));
        let r = reply(t.lookup(), ResponseCode::NXDomain, vec![], vec![soa("example.", 60, 60)], false);
        let m = answer(c.upstream(t, r));
        assert_eq!(m.response_code(), ResponseCode::NXDomain);
        assert_eq!(m.name_servers().len(), 1);
        assert_eq!(c.counters().snapshot().aaaa_nxdomain, 1);
    }

    /// RFC 6147 §5.1.2/§5.1.3: other RCODEs and timeouts count as an empty
    /// answer; an A failure is the answer's basis.
    #[test]
    fn aaaa_errors_and_timeouts() {
        let c = core("64:ff9b:1::/96");
        let t = lookup(c.query(LOCAL, &query("sf.example.", RecordType::AAAA, None, false), false));
        let r = reply(t.lookup(), ResponseCode::ServFail, vec![], vec![soa("example.", 5, 5)], false);
        let t = lookup(c.upstream(t, r));
        let r = reply(t.lookup(), ResponseCode::NoError, vec![a("sf.example.", 3600, "192.0.2.9")], vec![], false);
        let m = answer(c.upstream(t, r));
        assert_eq!(addrs(&m), vec![("sf.example.".into(), 600, "64:ff9b:1::c000:209".parse().unwrap())]);

        let t = lookup(c.query(LOCAL, &query("to.example.", RecordType::AAAA, None, false), false));
        let t = lookup(c.upstream(t, Upstream::Timeout));
        assert_eq!(t.lookup().qtype, RecordType::A);
        let m = answer(c.upstream(t, Upstream::Timeout));
        assert_eq!(m.response_code(), ResponseCode::ServFail);
        assert_eq!(m.queries()[0].name(), &name("to.example."));

        let t = lookup(c.query(LOCAL, &query("nx2.example.", RecordType::AAAA, None, false), false));
        let t = lookup(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], false)));
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NXDomain, vec![], vec![], false)));
        assert_eq!(m.response_code(), ResponseCode::NXDomain);

        let t = lookup(c.query(LOCAL, &query("g.example.", RecordType::AAAA, None, false), false));
        let t = lookup(c.upstream(t, Upstream::Reply(b"garbage!garbage!".to_vec())));
        let m = answer(c.upstream(t, Upstream::Reply(vec![0; 3])));
        assert_eq!(m.response_code(), ResponseCode::ServFail);
        let s = c.counters().snapshot();
        assert_eq!((s.servfail_upstream, s.upstream_malformed), (2, 2));
    }

    /// RFC 6147 §5.3.1 option 2: CNAME to in-addr.arpa plus its PTR.
    #[test]
    fn ptr_under_prefix() {
        use xlat::testvec::RFC6052_2_4;
        // Every prefix length of RFC 6052 §2.4 leads to the same PTR lookup.
        for (prefix, v6) in RFC6052_2_4 {
            let c = core(prefix);
            let qname = arpa::ip6_arpa_name(v6.parse().unwrap()).to_ascii();
            let t = lookup(c.query(LOCAL, &query(&qname, RecordType::PTR, None, false), false));
            assert_eq!(t.lookup().name, name("33.2.0.192.in-addr.arpa."), "{prefix}");
        }
        let (prefix, v6) = RFC6052_2_4[2];
        let c = core(prefix);
        let v6: Ipv6Addr = v6.parse().unwrap();
        let qname = arpa::ip6_arpa_name(v6).to_ascii();
        let t = lookup(c.query(LOCAL, &query(&qname, RecordType::PTR, None, false), false));
        assert_eq!(t.lookup().name, name("33.2.0.192.in-addr.arpa."));
        assert_eq!(t.lookup().qtype, RecordType::PTR);
        let ptr = Record::from_rdata(name("33.2.0.192.in-addr.arpa."), 900, RData::PTR(PTR(name("h2.example."))));
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![ptr], vec![], false)));
        assert_eq!(m.answers().len(), 2);
        assert_eq!(m.answers()[0].name(), &name(&qname));
        assert_eq!(m.answers()[0].data(), &RData::CNAME(CNAME(name("33.2.0.192.in-addr.arpa."))));
        assert_eq!(m.answers()[0].ttl(), 900);
        assert_eq!(m.answers()[1].data(), &RData::PTR(PTR(name("h2.example."))));
        // No PTR data: no CNAME, the upstream's RCODE.
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NXDomain, vec![], vec![], false)));
        assert_eq!((m.response_code(), m.answers().len()), (ResponseCode::NXDomain, 0));
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], false)));
        assert_eq!((m.response_code(), m.answers().len()), (ResponseCode::NoError, 0));
        let m = answer(c.upstream(t, Upstream::Timeout));
        assert_eq!(m.response_code(), ResponseCode::ServFail);
        assert_eq!(c.counters().snapshot().ptr_synthesized, 1);
        // Outside the prefix, or a partial name: forwarded unchanged.
        for q in
            [arpa::ip6_arpa_name("2001:db8::1".parse().unwrap()).to_ascii(), "2.2.1.0.8.b.d.0.1.0.0.2.ip6.arpa.".into()]
        {
            let t = lookup(c.query(LOCAL, &query(&q, RecordType::PTR, None, false), false));
            assert_eq!(t.lookup().name, name(&q));
            let r = reply(t.lookup(), ResponseCode::NXDomain, vec![], vec![], false);
            assert_eq!(answer(c.upstream(t, r)).response_code(), ResponseCode::NXDomain);
        }
    }

    /// RFC 6147 §5.5: CD+DO: no synthesis; DO alone: synthesis without AD.
    #[test]
    fn dnssec_bits() {
        let c = core("64:ff9b:1::/96");
        let t = lookup(c.query(LOCAL, &query("s.example.", RecordType::AAAA, Some(true), true), false));
        assert!(t.lookup().cd && t.lookup().dnssec_ok && t.lookup().edns);
        let r = reply(t.lookup(), ResponseCode::NoError, vec![], vec![soa("example.", 60, 60)], true);
        let m = answer(c.upstream(t, r));
        assert!(m.answers().is_empty() && m.authentic_data(), "relayed unchanged");
        assert_eq!(c.counters().snapshot().dnssec_no_synthesis, 1);

        let t = lookup(c.query(LOCAL, &query("s.example.", RecordType::AAAA, Some(true), false), false));
        let t = lookup(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], true)));
        assert!(t.lookup().dnssec_ok && !t.lookup().cd);
        let ans = vec![a("s.example.", 60, "192.0.2.1"), rrsig("s.example.", RecordType::A)];
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, ans, vec![], true)));
        assert!(!m.authentic_data());
        assert_eq!(m.answers().len(), 1, "RRSIG over A removed");
        assert!(m.extensions().as_ref().is_some_and(|e| e.flags().dnssec_ok));

        // CD alone (no DO): synthesis.
        let t = lookup(c.query(LOCAL, &query("s.example.", RecordType::AAAA, None, true), false));
        let t = lookup(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], false)));
        assert_eq!(t.lookup().qtype, RecordType::A);
    }

    /// RFC 6147 §5.3.3: other types (A included) are returned unchanged.
    #[test]
    fn other_types_and_classes_pass_through() {
        let c = core("64:ff9b::/96");
        for t in [RecordType::A, RecordType::MX, RecordType::TXT] {
            let task = lookup(c.query(LOCAL, &query("o.example.", t, None, false), false));
            assert_eq!(task.lookup().qtype, t);
            let r = reply(task.lookup(), ResponseCode::NoError, vec![a("o.example.", 1, "192.0.2.1")], vec![], false);
            let Upstream::Reply(raw) = r.clone() else { unreachable!() };
            let Action::Reply(out) = c.upstream(task, r) else { panic!() };
            assert_eq!(out[3..], raw[3..], "only the ID and RD change");
            assert_eq!(out[2], raw[2] | 0x01, "RD copied from the query");
            assert_eq!(out[..2], [0x12, 0x34]);
        }
        // AAAA in class CH: no DNS64.
        let mut m = Message::new();
        let mut q = Query::query(name("version.bind."), RecordType::AAAA);
        q.set_query_class(DNSClass::CH);
        m.add_query(q);
        let t = lookup(c.query(LOCAL, &m.to_vec().unwrap(), false));
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], false)));
        assert!(m.answers().is_empty());
        assert_eq!(c.counters().snapshot().passthrough, 4);
    }

    #[test]
    fn malformed_and_refused_queries() {
        let c = core("64:ff9b::/96");
        // Garbage after a query header: FORMERR with the same ID.
        let m = answer(c.query(LOCAL, b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff", false));
        assert_eq!((m.id(), m.response_code()), (0xabcd, ResponseCode::FormErr));
        assert!(matches!(c.query(LOCAL, b"\x01\x02\x03", false), Action::Drop));
        // A response is never answered.
        let mut resp = query("a.example.", RecordType::A, None, false);
        resp[2] |= 0x80;
        assert!(matches!(c.query(LOCAL, &resp, false), Action::Drop));
        // Two questions: FORMERR.
        let mut m = Message::new();
        m.add_query(Query::query(name("a.example."), RecordType::A));
        m.add_query(Query::query(name("b.example."), RecordType::A));
        assert_eq!(answer(c.query(LOCAL, &m.to_vec().unwrap(), false)).response_code(), ResponseCode::FormErr);
        // Opcode NOTIFY: NOTIMP.
        let mut m = Message::new();
        m.set_op_code(OpCode::Notify).add_query(Query::query(name("a.example."), RecordType::SOA));
        assert_eq!(answer(c.query(LOCAL, &m.to_vec().unwrap(), false)).response_code(), ResponseCode::NotImp);
        // EDNS version 1: BADVERS (an extended RCODE, carried in OPT).
        let mut m = Message::from_vec(&query("a.example.", RecordType::A, Some(false), false)).unwrap();
        m.extensions_mut().as_mut().unwrap().set_version(1);
        let r = answer(c.query(LOCAL, &m.to_vec().unwrap(), false));
        assert_eq!(u16::from(r.response_code()), 16, "BADVERS (16, decoded as its alias BADSIG)");
        assert_eq!(r.extensions().as_ref().map(|e| e.version()), Some(0));
        // Outside `allow`: REFUSED.
        let q = query("a.example.", RecordType::AAAA, None, false);
        assert_eq!(answer(c.query("203.0.113.5".parse().unwrap(), &q, false)).response_code(), ResponseCode::Refused);
        assert_eq!(answer(c.query("2001:db8::5".parse().unwrap(), &q, false)).response_code(), ResponseCode::Refused);
        assert!(matches!(c.query("fd00::5".parse().unwrap(), &q, false), Action::Lookup(_)));
        let s = c.counters().snapshot();
        assert_eq!((s.formerr, s.dropped_malformed, s.notimp, s.refused), (3, 2, 1, 2));
    }

    /// Answers over the client's UDP size are truncated; TCP gets them whole.
    #[test]
    fn truncation() {
        let c = core("64:ff9b:1::/96");
        let many: Vec<Record> = (0..40).map(|i| a("big.example.", 60, &format!("192.0.2.{i}"))).collect();
        let m = synth(&c, "big.example.", vec![], many.clone());
        assert!(m.truncated() && m.answers().is_empty());
        assert_eq!(m.queries().len(), 1);
        let t = lookup(c.query(LOCAL, &query("big.example.", RecordType::AAAA, None, false), true));
        let t = lookup(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, vec![], vec![], false)));
        let m = answer(c.upstream(t.clone(), reply(t.lookup(), ResponseCode::NoError, many, vec![], false)));
        assert!(!m.truncated());
        assert_eq!(addrs(&m).len(), 40);
    }

    #[test]
    fn lookup_matching() {
        let l = Lookup {
            name: name("Example.COM."),
            qtype: RecordType::A,
            qclass: DNSClass::IN,
            cd: false,
            edns: true,
            dnssec_ok: false,
        };
        let q = l.to_bytes(99);
        assert!(!l.matches(99, &q), "a query is not a reply");
        let Upstream::Reply(r) = reply(&l, ResponseCode::NoError, vec![], vec![], false) else { unreachable!() };
        assert!(l.matches(7, &r) && !l.matches(8, &r));
        let other = Lookup { qtype: RecordType::AAAA, ..l.clone() };
        assert!(!other.matches(7, &r));
        let lower = Lookup { name: name("example.com."), ..l };
        assert!(lower.matches(7, &r), "names compare case-insensitively");
        assert!(!lower.matches(7, &r[..11]));
    }
}
