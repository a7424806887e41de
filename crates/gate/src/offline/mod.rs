//! The offline translator behind `v6gate translate`.
//!
//! Two front ends over one [`Offline`] translator (the engines the
//! configuration builds, as `v6gate run` builds them: `[siit]`,
//! `[nat64]`, or both with the daemon's dispatch) and one reusable [`Out`]:
//!
//! - [`translate_lines`]: one hex-encoded L3 packet per input line, one JSON
//!   line per packet on output (the contract in `DESIGN.md`):
//!   `{"out":[{"hex":"...","kind":"forward"}],"drop":null}` or
//!   `{"out":[],"drop":"<reason>"}`. Surrounding whitespace is ignored;
//!   blank lines and lines starting with `#` produce no output; a line that
//!   is not hex gets `{"out":[],"drop":"bad-hex"}`. Lines starting with `@`
//!   are directives ([`directive`]): `@advance SECONDS` moves the clock and
//!   runs NAT64 expiry (its line lists what expiry emits, in the same
//!   shape), `@set KEY VALUE` changes one setting as a reload does
//!   (`{"out":[],"drop":null}`). A directive that cannot be carried out
//!   changes nothing and gets `{"out":[],"drop":"bad-directive","error":"..."}`;
//!   the run goes on. Output is flushed after every line so a harness can
//!   drive it interactively.
//! - [`translate_pcap`] (module `pcap`): a pcap file in (LINKTYPE_RAW,
//!   IPV4/IPV6, Ethernet with at most one 802.1Q tag, Linux cooked
//!   SLL/SLL2), a pcap file out (LINKTYPE_RAW, input timestamps). The clock
//!   follows the capture: before each packet it moves to the packet's time
//!   since the first packet, running NAT64 expiry, whose packets are
//!   written with that packet's timestamp.
//!
//! With `[nat64]` one stateful NAT64 lives for the whole run: sessions
//! made by one line are there for the next. Its clock starts at 0.

pub mod directive;
mod pcap;
mod session;

pub use directive::Directive;
pub use pcap::{translate_pcap, translate_pcap_files};
pub use session::{Offline, SET_TABLES};

use std::io::{self, BufRead, BufWriter, Write};

use xlat::{DropReason, Out, PacketKind, Verdict};

use crate::amend::{FragmentHolder, Offer};
use crate::daemon::engine::EngineKind;
use crate::explain::summarize;

/// Drop reason reported for an input line that is not hex.
pub const BAD_HEX: &str = "bad-hex";
/// Drop reason reported for a directive line that was not carried out
/// (with an `"error"` member saying why).
pub const BAD_DIRECTIVE: &str = "bad-directive";
/// Reported for a fragment held until its datagram is complete
/// (`amend-udp-checksum-zero`); the translated fragments are emitted on the
/// line of the fragment that completes the datagram.
pub const HELD: &str = "held";

/// Counters of one offline run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handed to the translator.
    pub packets_in: u64,
    /// Packets the translator emitted (translated packets and ICMP
    /// errors, those of NAT64 expiry included).
    pub packets_out: u64,
    /// Inputs that never reached the translator: lines that are not hex,
    /// or pcap frames that do not carry IPv4/IPv6.
    pub skipped: u64,
    /// Directive lines carried out.
    pub directives: u64,
    /// Directive lines refused (`bad-directive`).
    pub bad_directives: u64,
    /// Drops, indexed like [`DropReason::ALL`].
    drops: Vec<u64>,
}

impl Stats {
    fn count_drop(&mut self, r: DropReason) {
        self.count_drops(r, 1);
    }

    fn count_drops(&mut self, r: DropReason, n: u64) {
        if self.drops.is_empty() {
            self.drops = vec![0; DropReason::ALL.len()];
        }
        if let Some(i) = DropReason::ALL.iter().position(|x| *x == r) {
            self.drops[i] += n;
        }
    }

    /// Number of packets dropped, all reasons.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Non-zero drop counters, by reason name, in [`DropReason::ALL`] order.
    pub fn drops(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL.iter().zip(&self.drops).filter(|(_, n)| **n > 0).map(|(r, n)| (r.as_str(), *n))
    }

    /// One-line summary, e.g. `3 packets in, 2 packets out, 1 dropped (truncated=1), 0 non-IP frames skipped`.
    pub fn summary(&self, skipped_what: &str) -> String {
        let mut s =
            format!("{} packets in, {} packets out, {} dropped", self.packets_in, self.packets_out, self.dropped());
        let d: Vec<String> = self.drops().map(|(r, n)| format!("{r}={n}")).collect();
        if !d.is_empty() {
            s.push_str(&format!(" ({})", d.join(", ")));
        }
        s.push_str(&format!(", {} {skipped_what} skipped", self.skipped));
        if self.bad_directives > 0 {
            s.push_str(&format!(", {} directive(s) refused", self.bad_directives));
        }
        s
    }
}

fn kind_str(k: PacketKind) -> &'static str {
    match k {
        PacketKind::Forward => "forward",
        PacketKind::IcmpError => "icmp-error",
    }
}

/// What became of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Translated (or dropped); every result was reported.
    Done,
    /// Held by the fragment holder; nothing to report yet.
    Held,
}

/// The translator, one reusable arena and, with `amend-udp-checksum-zero
/// = "hold"`, the fragment holder for the packets SIIT owns (as the
/// daemon's workers): what both front ends run every input through.
struct Engine<'o> {
    x: &'o mut Offline,
    out: Out,
    holder: Option<FragmentHolder>,
    stats: Stats,
}

/// Called with each packet handed to the translator, its verdict and what
/// it emitted.
type Each<'a> = dyn FnMut(&[u8], Verdict, &Out) -> io::Result<()> + 'a;

impl<'o> Engine<'o> {
    fn new(x: &'o mut Offline) -> Self {
        let mut e = Engine { x, out: Out::new(), holder: None, stats: Stats::default() };
        e.refresh();
        e
    }

    /// Pick up `amend-udp-checksum-zero` after a change (`@set`);
    /// fragments held by a holder that goes count as dropped.
    fn refresh(&mut self) {
        let hold = self.x.engines().amend;
        if hold != self.holder.is_some() {
            if let Some(h) = self.holder.take() {
                self.count_unfinished(&h);
            }
            self.holder = hold.then(FragmentHolder::default);
        }
    }

    fn count_unfinished(&mut self, h: &FragmentHolder) {
        let n = h.pending() as u64 + h.evicted_fragments;
        self.stats.count_drops(DropReason::UdpChecksumZeroFragment, n);
    }

    /// Translate `pkt`, or hold it, or (when it completes a held datagram)
    /// translate every fragment of that datagram.
    fn process(&mut self, pkt: &[u8], each: &mut Each<'_>) -> io::Result<Outcome> {
        self.stats.packets_in += 1;
        let offer = match self.holder.as_mut() {
            Some(h) if self.x.owner(pkt) == EngineKind::Siit => h.offer(pkt),
            _ => Offer::Pass,
        };
        match offer {
            Offer::Pass => self.translate_one(pkt, each)?,
            Offer::Held => return Ok(Outcome::Held),
            Offer::Complete(set) => {
                for f in &set {
                    self.translate_one(f, each)?;
                }
            }
            Offer::Failed(r, n) => {
                self.stats.count_drops(r, n as u64);
                self.out.clear();
                each(pkt, Verdict::Drop(r), &self.out)?;
            }
        }
        Ok(Outcome::Done)
    }

    fn translate_one(&mut self, pkt: &[u8], each: &mut Each<'_>) -> io::Result<()> {
        let v = self.x.translate(pkt, &mut self.out);
        match v {
            Verdict::Emit => self.stats.packets_out += self.out.len() as u64,
            Verdict::Drop(r) => self.stats.count_drop(r),
        }
        each(pkt, v, &self.out)
    }

    /// Move the clock to `t_ns` (pcap) and run expiry: what it emits.
    fn advance_to(&mut self, t_ns: u64) -> Vec<Vec<u8>> {
        let e = self.x.advance_to(t_ns);
        self.stats.packets_out += e.len() as u64;
        e
    }

    /// Carry out a directive line: the packets it emits (NAT64 expiry),
    /// or why it was refused.
    fn directive(&mut self, line: &str) -> Result<Vec<Vec<u8>>, String> {
        let r = directive::parse(line).and_then(|d| self.run_directive(&d));
        match r {
            Ok(_) => self.stats.directives += 1,
            Err(_) => self.stats.bad_directives += 1,
        }
        r
    }

    fn run_directive(&mut self, d: &Directive) -> Result<Vec<Vec<u8>>, String> {
        match d {
            Directive::Advance(by) => {
                let e = self.x.advance(*by);
                self.stats.packets_out += e.len() as u64;
                Ok(e)
            }
            Directive::Set { key, value } => self.x.set(key, value).map(|()| {
                self.refresh();
                Vec::new()
            }),
        }
    }

    /// The run's counters; fragments still held (or evicted) count as
    /// `udp-checksum-zero-fragment` drops.
    fn finish(mut self) -> Stats {
        if let Some(h) = self.holder.take() {
            self.count_unfinished(&h);
        }
        self.stats
    }
}

/// Decode `hex` into `buf` (reused). Fails on odd length or non-hex digits.
fn decode_hex(hex: &[u8], buf: &mut Vec<u8>) -> Result<(), hex::FromHexError> {
    // `decode_to_slice` rejects an odd length itself.
    buf.resize(hex.len() / 2, 0);
    hex::decode_to_slice(hex, buf)
}

/// Append one JSON item per packet to `line`, counting them in `items`
/// (for the separating commas).
fn push_json_items<'p>(
    line: &mut Vec<u8>,
    pkts: impl Iterator<Item = (PacketKind, &'p [u8])>,
    items: &mut usize,
    hexbuf: &mut Vec<u8>,
) {
    for (kind, p) in pkts {
        if *items > 0 {
            line.push(b',');
        }
        *items += 1;
        hexbuf.resize(p.len() * 2, 0);
        // Cannot fail: the buffer is exactly twice the input length.
        let _ = hex::encode_to_slice(p, hexbuf);
        line.extend_from_slice(b"{\"hex\":\"");
        line.extend_from_slice(hexbuf);
        line.extend_from_slice(b"\",\"kind\":\"");
        line.extend_from_slice(kind_str(kind).as_bytes());
        line.extend_from_slice(b"\"}");
    }
}

/// Explain one input and its verdict on `e`, one line per packet.
fn write_explain(e: &mut dyn Write, tag: &str, pkt: &[u8], v: Verdict, out: &Out) -> io::Result<()> {
    writeln!(e, "{tag} in        {}", summarize(pkt))?;
    match v {
        Verdict::Emit => {
            for (i, (kind, p)) in out.iter().enumerate() {
                let k = match kind {
                    PacketKind::Forward => "forward   ",
                    PacketKind::IcmpError => "icmp-error",
                };
                writeln!(e, "{tag} out[{i}] {k} {}", summarize(p))?;
            }
        }
        Verdict::Drop(r) => writeln!(e, "{tag} drop      {r}")?,
    }
    Ok(())
}

/// Explain what NAT64 expiry emitted at `clock`.
fn write_expired(e: &mut dyn Write, tag: &str, clock: core::time::Duration, pkts: &[Vec<u8>]) -> io::Result<()> {
    let t = confval::duration::format(clock);
    if pkts.is_empty() && !tag.starts_with("line") {
        return Ok(());
    }
    writeln!(e, "{tag} clock     {t}: expiry emitted {} packet(s)", pkts.len())?;
    for (i, p) in pkts.iter().enumerate() {
        writeln!(e, "{tag} out[{i}] icmp-error {}", summarize(p))?;
    }
    Ok(())
}

/// Translate hex lines (and directive lines) from `input` to JSON lines on
/// `output`, with one [`Offline`] translator for the whole run. With
/// `explain`, also write a human-readable summary of every input and
/// output packet there. A broken pipe on `output` ends the run quietly.
pub fn translate_lines<R: BufRead, W: Write>(
    x: &mut Offline,
    mut input: R,
    output: W,
    mut explain: Option<&mut dyn Write>,
) -> io::Result<Stats> {
    let mut engine = Engine::new(x);
    let mut w = BufWriter::with_capacity(256 * 1024, output);
    let mut line = Vec::with_capacity(8192);
    let mut pkt = Vec::with_capacity(65536);
    let mut hexbuf = Vec::with_capacity(8192);
    let mut json = Vec::with_capacity(8192);
    let mut lineno = 0u64;
    let res = (|| -> io::Result<()> {
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                return Ok(());
            }
            lineno += 1;
            let t = line.trim_ascii();
            if t.is_empty() || t[0] == b'#' {
                continue;
            }
            json.clear();
            json.extend_from_slice(b"{\"out\":[");
            let mut items = 0;
            if t[0] == b'@' {
                let text = String::from_utf8_lossy(t);
                match engine.directive(&text) {
                    Ok(emitted) => {
                        if let Some(e) = explain.as_deref_mut() {
                            writeln!(e, "line {lineno:<3} directive {text}")?;
                            if text.starts_with("@advance") {
                                write_expired(e, &format!("line {lineno:<3}"), engine.x.now(), &emitted)?;
                            }
                        }
                        let kinds = emitted.iter().map(|p| (PacketKind::IcmpError, p.as_slice()));
                        push_json_items(&mut json, kinds, &mut items, &mut hexbuf);
                        json.extend_from_slice(b"],\"drop\":null}\n");
                    }
                    Err(msg) => {
                        if let Some(e) = explain.as_deref_mut() {
                            writeln!(e, "line {lineno:<3} directive {text}: refused: {msg}")?;
                        }
                        json.extend_from_slice(b"],\"drop\":\"");
                        json.extend_from_slice(BAD_DIRECTIVE.as_bytes());
                        json.extend_from_slice(b"\",\"error\":");
                        // A JSON string of any text cannot fail to encode.
                        json.extend_from_slice(serde_json::to_string(&msg).unwrap_or_default().as_bytes());
                        json.extend_from_slice(b"}\n");
                    }
                }
                w.write_all(&json)?;
                w.flush()?;
                continue;
            }
            if decode_hex(t, &mut pkt).is_err() {
                engine.stats.skipped += 1;
                if let Some(e) = explain.as_deref_mut() {
                    writeln!(e, "line {lineno:<3} in        not hex: dropped as {BAD_HEX}")?;
                }
                writeln!(w, "{{\"out\":[],\"drop\":\"{BAD_HEX}\"}}")?;
                w.flush()?;
                continue;
            }
            let mut first_drop = None;
            // Only --explain uses the tag: no formatting per packet otherwise.
            let tag = if explain.is_some() { format!("line {lineno:<3}") } else { String::new() };
            let outcome = engine.process(&pkt, &mut |input, v, out| {
                if let Some(e) = explain.as_deref_mut() {
                    write_explain(e, &tag, input, v, out)?;
                }
                match v {
                    Verdict::Emit => push_json_items(&mut json, out.iter(), &mut items, &mut hexbuf),
                    Verdict::Drop(r) => {
                        first_drop.get_or_insert(r);
                    }
                }
                Ok(())
            })?;
            let drop = match (outcome, first_drop) {
                (Outcome::Held, _) => {
                    if let Some(e) = explain.as_deref_mut() {
                        writeln!(e, "{tag} in        {}", summarize(&pkt))?;
                        writeln!(e, "{tag} held      until its datagram is complete (amend-udp-checksum-zero)")?;
                    }
                    Some(HELD)
                }
                (Outcome::Done, Some(r)) if items == 0 => Some(r.as_str()),
                (Outcome::Done, _) => None,
            };
            match drop {
                Some(reason) => {
                    json.extend_from_slice(b"],\"drop\":\"");
                    json.extend_from_slice(reason.as_bytes());
                    json.extend_from_slice(b"\"}\n");
                }
                None => json.extend_from_slice(b"],\"drop\":null}\n"),
            }
            w.write_all(&json)?;
            w.flush()?;
        }
    })();
    match res {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(engine.finish()),
        Err(e) => Err(e),
        Ok(()) => Ok(engine.finish()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const SIIT: &str = "[siit]\npool6 = \"64:ff9b:1::/96\"\nipv6-address = \"64:ff9b:1::c000:8\"\n";

    pub(super) fn offline(text: &str) -> Offline {
        Offline::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn run_with(text: &str, input: &str) -> (String, String, Stats) {
        let mut out = Vec::new();
        let mut ex = Vec::new();
        let stats = translate_lines(&mut offline(text), input.as_bytes(), &mut out, Some(&mut ex)).unwrap();
        (String::from_utf8(out).unwrap(), String::from_utf8(ex).unwrap(), stats)
    }

    fn run(input: &str) -> (String, String) {
        let (o, e, _) = run_with(SIIT, input);
        (o, e)
    }

    #[test]
    fn one_json_line_per_packet() {
        let (out, ex) = run("# a comment\n\n   \n  45000014000000004011000001020304 \r\nzz\n4\n# end\n6000");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        for l in &lines {
            assert!(l.starts_with("{\"out\":[") && l.ends_with('}'), "{l}");
            assert!(l.contains("\"drop\":"), "{l}");
        }
        assert_eq!(lines[1], r#"{"out":[],"drop":"bad-hex"}"#);
        assert_eq!(lines[2], r#"{"out":[],"drop":"bad-hex"}"#);
        assert!(ex.contains("line 4"), "{ex}");
        assert!(ex.contains("line 5   in        not hex"), "{ex}");
    }

    /// Hex of an IPv4 UDP fragment 192.0.2.1 → 198.51.100.2 (ident 7)
    /// carrying `payload` at `offset8`.
    fn frag_hex(offset8: u16, mf: bool, payload: &[u8]) -> String {
        let tl = 20 + payload.len();
        let flags = (u16::from(mf) << 13) | offset8;
        let mut b = vec![0x45, 0, (tl >> 8) as u8, tl as u8, 0, 7, (flags >> 8) as u8, flags as u8];
        b.extend_from_slice(&[64, 17, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2]);
        let c = xlat::checksum::finish(xlat::checksum::sum(&b));
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b.extend_from_slice(payload);
        hex::encode(b)
    }

    #[test]
    fn json_shapes_for_drop_and_emit() {
        // A truncated IPv4 header, then a UDP packet that translates.
        let (out, _) = run(&format!("450000\n{}\n", frag_hex(0, false, &[0x13, 0x88, 0, 53, 0, 8, 0x12, 0x34])));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], r#"{"out":[],"drop":"truncated"}"#);
        assert!(lines[1].starts_with(r#"{"out":[{"hex":"6"#), "{}", lines[1]);
        assert!(lines[1].ends_with(r#","kind":"forward"}],"drop":null}"#), "{}", lines[1]);
    }

    #[test]
    fn amend_holds_zero_checksum_fragments_until_complete() {
        let udp: Vec<u8> = {
            let mut u = vec![0x13, 0x88, 0, 53, 0, 40, 0, 0]; // checksum zero
            u.resize(40, 0x42);
            u
        };
        let input = format!("{}\n{}\n", frag_hex(0, true, &udp[..16]), frag_hex(2, false, &udp[16..]));
        // Without amending: the first fragment is refused (an ICMPv4 3/13
        // back to the sender), the second (no UDP header in it) translates
        // on its own.
        let (out, _) = run(&input);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with(r#"{"out":[{"hex":"45"#), "{}", lines[0]);
        assert!(lines[0].ends_with(r#""kind":"icmp-error"}],"drop":null}"#), "{}", lines[0]);
        assert_eq!(lines[1].matches("\"hex\"").count(), 1);
        // With amending: held, then both fragments on the completing line.
        let hold = format!("{SIIT}amend-udp-checksum-zero = \"hold\"\n");
        let (out, _, stats) = run_with(&hold, &input);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], r#"{"out":[],"drop":"held"}"#);
        assert_eq!(lines[1].matches("\"hex\"").count(), 2, "{}", lines[1]);
        assert!(lines[1].ends_with(r#""drop":null}"#));
        assert_eq!((stats.packets_in, stats.packets_out, stats.dropped()), (2, 2, 0));
        // An incomplete datagram at the end of input is counted as dropped,
        // and so is one whose holder goes with an @set.
        let (_, _, stats) = run_with(&hold, &format!("{}\n", frag_hex(0, true, &udp[..16])));
        assert_eq!(stats.drops().collect::<Vec<_>>(), vec![("udp-checksum-zero-fragment", 1)]);
        let input = format!(
            "{}\n@set amend-udp-checksum-zero true\n{}\n",
            frag_hex(0, true, &udp[..16]),
            frag_hex(2, false, &udp[16..])
        );
        let (out, _, stats) = run_with(&hold, &input);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], r#"{"out":[],"drop":"held"}"#);
        assert_eq!(lines[1], r#"{"out":[],"drop":null}"#);
        assert_eq!(lines[2].matches("\"hex\"").count(), 1, "translated on its own: {}", lines[2]);
        assert_eq!(stats.drops().collect::<Vec<_>>(), vec![("udp-checksum-zero-fragment", 1)]);
        assert_eq!(stats.directives, 1);
    }

    #[test]
    fn directives_answer_on_their_line() {
        let (out, ex, stats) = run_with(SIIT, "@advance 5\n@set ipv4-mtu 1400\n@set ipv4-mtu 10\n@bogus\n@set\n");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert_eq!(lines[0], r#"{"out":[],"drop":null}"#);
        assert_eq!(lines[1], r#"{"out":[],"drop":null}"#);
        assert!(lines[2].starts_with(r#"{"out":[],"drop":"bad-directive","error":"[siit] ipv4-mtu: "#), "{}", lines[2]);
        assert!(lines[3].contains(r#""error":"unknown directive `@bogus`"#), "{}", lines[3]);
        for l in &lines[2..] {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["drop"], "bad-directive");
            assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
        assert_eq!((stats.directives, stats.bad_directives), (2, 3));
        assert!(stats.summary("lines").ends_with("3 directive(s) refused"), "{}", stats.summary("lines"));
        assert!(ex.contains("line 1   directive @advance 5"), "{ex}");
        assert!(ex.contains("clock     5s: expiry emitted 0 packet(s)"), "{ex}");
        assert!(ex.contains("refused: unknown directive"), "{ex}");
    }
}
