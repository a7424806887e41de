//! The offline translator behind `v6gate translate`.
//!
//! Two front ends over one [`Translator`] and one reusable [`Out`]:
//!
//! - [`translate_lines`]: one hex-encoded L3 packet per input line, one JSON
//!   line per packet on output (the contract in `DESIGN.md`):
//!   `{"out":[{"hex":"...","kind":"forward"}],"drop":null}` or
//!   `{"out":[],"drop":"<reason>"}`. Surrounding whitespace is ignored;
//!   blank lines and lines starting with `#` produce no output; a line that
//!   is not hex gets `{"out":[],"drop":"bad-hex"}`. Output is flushed after
//!   every line so a harness can drive it interactively.
//! - [`translate_pcap`]: a pcap file in (LINKTYPE_RAW, IPV4/IPV6,
//!   Ethernet with at most one 802.1Q tag, Linux cooked SLL/SLL2), a pcap
//!   file out (LINKTYPE_RAW, input timestamps).

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use pcap_file::pcap::{PcapHeader, PcapReader, RawPcapPacket};
use pcap_file::{DataLink, PcapError};
use xlat::siit::{Translator, UdpChecksumZero};
use xlat::{DropReason, Out, PacketKind, Verdict};

use crate::amend::{FragmentHolder, Offer};
use crate::explain::summarize;

/// Drop reason reported for an input line that is not hex.
pub const BAD_HEX: &str = "bad-hex";
/// Reported for a fragment held until its datagram is complete
/// (`amend-udp-checksum-zero`); the translated fragments are emitted on the
/// line of the fragment that completes the datagram.
pub const HELD: &str = "held";

/// Counters of one offline run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets handed to the translator.
    pub packets_in: u64,
    /// Packets the translator emitted (translated packets and ICMP errors).
    pub packets_out: u64,
    /// Inputs that never reached the translator: lines that are not hex,
    /// or pcap frames that do not carry IPv4/IPv6.
    pub skipped: u64,
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

/// One translator, one reusable arena and, with `amend-udp-checksum-zero`,
/// the fragment holder: what both front ends run every input through.
struct Engine<'t> {
    tr: &'t Translator,
    out: Out,
    holder: Option<FragmentHolder>,
    stats: Stats,
}

/// Called with each packet handed to the translator, its verdict and what
/// it emitted.
type Each<'a> = dyn FnMut(&[u8], Verdict, &Out) -> io::Result<()> + 'a;

impl<'t> Engine<'t> {
    fn new(tr: &'t Translator) -> Self {
        let hold = tr.config().amend_udp_checksum_zero == UdpChecksumZero::Hold;
        let holder = hold.then(FragmentHolder::default);
        Engine { tr, out: Out::new(), holder, stats: Stats::default() }
    }

    /// Translate `pkt`, or hold it, or (when it completes a held datagram)
    /// translate every fragment of that datagram.
    fn process(&mut self, pkt: &[u8], each: &mut Each<'_>) -> io::Result<Outcome> {
        self.stats.packets_in += 1;
        let offer = match self.holder.as_mut() {
            Some(h) => h.offer(pkt),
            None => Offer::Pass,
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
        let v = self.tr.translate(pkt, &mut self.out);
        match v {
            Verdict::Emit => self.stats.packets_out += self.out.len() as u64,
            Verdict::Drop(r) => self.stats.count_drop(r),
        }
        each(pkt, v, &self.out)
    }

    /// The run's counters; fragments still held (or evicted) count as
    /// `udp-checksum-zero-fragment` drops.
    fn finish(mut self) -> Stats {
        if let Some(h) = &self.holder {
            let n = h.pending() as u64 + h.evicted_fragments;
            self.stats.count_drops(DropReason::UdpChecksumZeroFragment, n);
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

/// Append the JSON items for the packets in `out` to `line`, counting them
/// in `items` (for the separating commas).
fn push_json_items(line: &mut Vec<u8>, out: &Out, items: &mut usize, hexbuf: &mut Vec<u8>) {
    for (kind, p) in out.iter() {
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

/// Translate hex lines from `input` to JSON lines on `output`. With
/// `explain`, also write a human-readable summary of every input and output
/// packet there. A broken pipe on `output` ends the run quietly.
pub fn translate_lines<R: BufRead, W: Write>(
    tr: &Translator,
    mut input: R,
    output: W,
    mut explain: Option<&mut dyn Write>,
) -> io::Result<Stats> {
    let mut engine = Engine::new(tr);
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
            if decode_hex(t, &mut pkt).is_err() {
                engine.stats.skipped += 1;
                if let Some(e) = explain.as_deref_mut() {
                    writeln!(e, "line {lineno:<3} in        not hex: dropped as {BAD_HEX}")?;
                }
                writeln!(w, "{{\"out\":[],\"drop\":\"{BAD_HEX}\"}}")?;
                w.flush()?;
                continue;
            }
            json.clear();
            json.extend_from_slice(b"{\"out\":[");
            let mut items = 0;
            let mut first_drop = None;
            // Only --explain uses the tag: no formatting per packet otherwise.
            let tag = if explain.is_some() { format!("line {lineno:<3}") } else { String::new() };
            let outcome = engine.process(&pkt, &mut |input, v, out| {
                if let Some(e) = explain.as_deref_mut() {
                    write_explain(e, &tag, input, v, out)?;
                }
                match v {
                    Verdict::Emit => push_json_items(&mut json, out, &mut items, &mut hexbuf),
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

/// How to find the L3 packet in a captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// The frame is the IP packet (LINKTYPE_RAW 101, DLT_RAW 12, IPV4 228, IPV6 229).
    Raw,
    /// Ethernet II, optionally with one 802.1Q / 802.1ad tag.
    Ethernet,
    /// Linux cooked capture v1 (113) or v2 (276).
    Sll,
    Sll2,
}

impl Link {
    fn from_datalink(d: DataLink) -> Option<Link> {
        match u32::from(d) {
            12 | 101 | 228 | 229 => Some(Link::Raw),
            1 => Some(Link::Ethernet),
            113 => Some(Link::Sll),
            276 => Some(Link::Sll2),
            _ => None,
        }
    }

    /// The IPv4/IPv6 packet inside `frame`, or `None` when the frame does
    /// not carry one.
    fn l3(self, frame: &[u8]) -> Option<&[u8]> {
        let is_ip = |et: u16| et == 0x0800 || et == 0x86dd;
        let be16 = |b: &[u8], i: usize| b.get(i..i + 2).map(|x| u16::from_be_bytes([x[0], x[1]]));
        match self {
            Link::Raw => Some(frame).filter(|f| !f.is_empty()),
            Link::Ethernet => {
                let mut et = be16(frame, 12)?;
                let mut off = 14;
                if et == 0x8100 || et == 0x88a8 {
                    et = be16(frame, 16)?;
                    off = 18;
                }
                frame.get(off..).filter(|_| is_ip(et))
            }
            Link::Sll => frame.get(16..).filter(|_| be16(frame, 14).is_some_and(is_ip)),
            Link::Sll2 => frame.get(20..).filter(|_| be16(frame, 0).is_some_and(is_ip)),
        }
    }
}

/// Translate every packet of the pcap stream `input` and write what is
/// emitted to the pcap stream `output` (LINKTYPE_RAW, same timestamps and
/// timestamp resolution as the input).
pub fn translate_pcap<R: Read, W: Write>(
    tr: &Translator,
    input: R,
    output: W,
    mut explain: Option<&mut dyn Write>,
) -> anyhow::Result<Stats> {
    let mut input = BufReader::new(input);
    let magic = input.fill_buf().context("reading the input pcap")?;
    if magic.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        bail!("the input is pcapng, which is not supported; convert it with `editcap -F pcap IN OUT` or `tshark -r IN -w OUT -F pcap`");
    }
    let mut reader = PcapReader::new(input).map_err(|e| match e {
        PcapError::IncompleteBuffer => anyhow::anyhow!("the input is not a pcap file (too short for a pcap header)"),
        e => anyhow::anyhow!("the input is not a pcap file: {e}"),
    })?;
    let hdr = reader.header();
    let Some(link) = Link::from_datalink(hdr.datalink) else {
        bail!(
            "input link type {} ({:?}) is not supported (supported: RAW 101/12, IPV4 228, IPV6 229, ETHERNET 1, LINUX_SLL 113, LINUX_SLL2 276)",
            u32::from(hdr.datalink),
            hdr.datalink
        );
    };
    let out_hdr = PcapHeader { datalink: DataLink::RAW, snaplen: 262_144, ..hdr };
    let mut writer = pcap_file::pcap::PcapWriter::with_header(BufWriter::new(output), out_hdr)
        .map_err(|e| anyhow::anyhow!("writing the output pcap header: {e}"))?;
    let mut engine = Engine::new(tr);
    let mut n = 0u64;
    while let Some(rec) = reader.next_raw_packet() {
        let rec = match rec {
            Ok(r) => r,
            Err(PcapError::IncompleteBuffer) => {
                eprintln!("v6gate translate: warning: the input pcap ends in the middle of a record; stopped there");
                break;
            }
            Err(e) => bail!("reading input packet #{}: {e}", n + 1),
        };
        n += 1;
        let Some(pkt) = link.l3(&rec.data) else {
            engine.stats.skipped += 1;
            if let Some(e) = explain.as_deref_mut() {
                writeln!(e, "pkt {n:<4} in        not IPv4/IPv6: skipped")?;
            }
            continue;
        };
        let tag = if explain.is_some() { format!("pkt {n:<4}") } else { String::new() };
        let mut write_err = None;
        let outcome = engine.process(pkt, &mut |input, v, out| {
            if let Some(e) = explain.as_deref_mut() {
                write_explain(e, &tag, input, v, out)?;
            }
            for (_, p) in out.iter() {
                let Ok(len) = u32::try_from(p.len()) else { continue };
                let raw = RawPcapPacket {
                    ts_sec: rec.ts_sec,
                    ts_frac: rec.ts_frac,
                    incl_len: len,
                    orig_len: len,
                    data: Cow::Borrowed(p),
                };
                if let Err(err) = writer.write_raw_packet(&raw) {
                    write_err.get_or_insert(err);
                }
            }
            Ok(())
        })?;
        if let Some(err) = write_err {
            bail!("writing the output pcap: {err}");
        }
        if outcome == Outcome::Held {
            if let Some(e) = explain.as_deref_mut() {
                writeln!(e, "{tag} held      until its datagram is complete (amend-udp-checksum-zero)")?;
            }
        }
    }
    let stats = engine.finish();
    writer.into_writer().flush().context("writing the output pcap")?;
    Ok(stats)
}

/// [`translate_pcap`] from file to file. The output is written to
/// `OUT.tmp` and renamed into place only when the whole run succeeded.
pub fn translate_pcap_files(
    tr: &Translator,
    input: &Path,
    output: &Path,
    explain: Option<&mut dyn Write>,
) -> anyhow::Result<Stats> {
    let inf = File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
    let mut tmp = PathBuf::from(output.as_os_str().to_owned());
    tmp.as_mut_os_string().push(".tmp");
    let outf = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let res = translate_pcap(tr, inf, outf, explain).with_context(|| format!("{}", input.display()));
    match res {
        Ok(stats) => {
            std::fs::rename(&tmp, output)
                .with_context(|| format!("cannot rename {} to {}", tmp.display(), output.display()))?;
            Ok(stats)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat::siit::Config;

    fn translator() -> Translator {
        let cfg = Config {
            pool6: Some("64:ff9b:1::/96".parse().unwrap()),
            ipv6_address: Some("64:ff9b:1::c000:8".parse().unwrap()),
            ..Config::default()
        };
        Translator::new(cfg).unwrap()
    }

    fn run(input: &str) -> (String, String) {
        let mut out = Vec::new();
        let mut ex = Vec::new();
        translate_lines(&translator(), input.as_bytes(), &mut out, Some(&mut ex)).unwrap();
        (String::from_utf8(out).unwrap(), String::from_utf8(ex).unwrap())
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
        let cfg = Config { amend_udp_checksum_zero: UdpChecksumZero::Hold, ..translator().config().clone() };
        let tr = Translator::new(cfg).unwrap();
        let mut o = Vec::new();
        let stats = translate_lines(&tr, input.as_bytes(), &mut o, None).unwrap();
        let out = String::from_utf8(o).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], r#"{"out":[],"drop":"held"}"#);
        assert_eq!(lines[1].matches("\"hex\"").count(), 2, "{}", lines[1]);
        assert!(lines[1].ends_with(r#""drop":null}"#));
        assert_eq!((stats.packets_in, stats.packets_out, stats.dropped()), (2, 2, 0));
        // An incomplete datagram at the end of input is counted as dropped.
        let mut o = Vec::new();
        let stats =
            translate_lines(&tr, format!("{}\n", frag_hex(0, true, &udp[..16])).as_bytes(), &mut o, None).unwrap();
        assert_eq!(stats.drops().collect::<Vec<_>>(), vec![("udp-checksum-zero-fragment", 1)]);
    }

    #[test]
    fn link_layers() {
        let ip = [0x45u8, 0, 0, 20];
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        assert_eq!(Link::Ethernet.l3(&eth), Some(&ip[..]));
        let mut vlan = vec![0u8; 12];
        vlan.extend_from_slice(&[0x81, 0x00, 0, 5, 0x86, 0xdd]);
        vlan.extend_from_slice(&ip);
        assert_eq!(Link::Ethernet.l3(&vlan), Some(&ip[..]));
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0, 1]);
        assert_eq!(Link::Ethernet.l3(&arp), None);
        assert_eq!(Link::Ethernet.l3(&[0u8; 13]), None);
        assert_eq!(Link::Raw.l3(&ip), Some(&ip[..]));
        assert_eq!(Link::Raw.l3(&[]), None);
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        assert_eq!(Link::Sll.l3(&sll), Some(&ip[..]));
        let mut sll2 = vec![0x86, 0xdd];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        assert_eq!(Link::Sll2.l3(&sll2), Some(&ip[..]));
        assert_eq!(Link::from_datalink(DataLink::Unknown(12)), Some(Link::Raw));
        assert_eq!(Link::from_datalink(DataLink::IPV6), Some(Link::Raw));
        assert_eq!(Link::from_datalink(DataLink::PPP), None);
    }

    #[test]
    fn pcap_round_trip_structure() {
        use pcap_file::pcap::{PcapPacket, PcapWriter};
        use std::time::Duration;
        let mut buf = Vec::new();
        let hdr = PcapHeader { datalink: DataLink::ETHERNET, ..PcapHeader::default() };
        let mut w = PcapWriter::with_header(&mut buf, hdr).unwrap();
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 20]);
        w.write_packet(&PcapPacket::new(Duration::new(1, 5000), eth.len() as u32, &eth)).unwrap();
        let arp = [0u8; 12].iter().chain(&[0x08, 0x06, 0, 0]).copied().collect::<Vec<u8>>();
        w.write_packet(&PcapPacket::new(Duration::new(2, 0), arp.len() as u32, &arp)).unwrap();
        let mut out = Vec::new();
        let stats = translate_pcap(&translator(), &buf[..], &mut out, None).unwrap();
        assert_eq!(stats.packets_in, 1);
        assert_eq!(stats.skipped, 1);
        let r = PcapReader::new(&out[..]).unwrap();
        assert_eq!(r.header().datalink, DataLink::RAW);
        assert!(stats.summary("non-IP frames").contains("1 non-IP frames skipped"));
    }

    #[test]
    fn pcapng_and_garbage_are_refused_clearly() {
        let e = translate_pcap(&translator(), &[0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0][..], Vec::new(), None).unwrap_err();
        assert!(e.to_string().contains("pcapng"), "{e}");
        let e = translate_pcap(&translator(), &b"hello"[..], Vec::new(), None).unwrap_err();
        assert!(e.to_string().contains("not a pcap file"), "{e}");
    }
}
