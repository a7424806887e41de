//! The pcap front end of `v6gate translate` (`--pcap-in`/`--pcap-out`).

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use pcap_file::pcap::{PcapHeader, PcapReader, RawPcapPacket};
use pcap_file::{DataLink, PcapError, TsResolution};

use super::{write_expired, write_explain, Engine, Offline, Outcome, Stats};

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

/// A pcap record of `p` with the timestamp of `at` (`None`: too long).
fn record<'p>(at: &RawPcapPacket<'_>, p: &'p [u8]) -> Option<RawPcapPacket<'p>> {
    let len = u32::try_from(p.len()).ok()?;
    Some(RawPcapPacket { ts_sec: at.ts_sec, ts_frac: at.ts_frac, incl_len: len, orig_len: len, data: Cow::Borrowed(p) })
}

/// Translate every packet of the pcap stream `input` and write what is
/// emitted to the pcap stream `output` (LINKTYPE_RAW, same timestamps and
/// timestamp resolution as the input). The offline clock follows the
/// capture: before each packet it moves to the packet's time since the
/// first packet (never backwards), running NAT64 expiry; what expiry
/// emits is written first, with that packet's timestamp.
pub fn translate_pcap<R: Read, W: Write>(
    x: &mut Offline,
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
    let mut engine = Engine::new(x);
    let ns_per_frac: u64 = if hdr.ts_resolution == TsResolution::NanoSecond { 1 } else { 1_000 };
    let mut first_ts: Option<u64> = None;
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
        let ts =
            u64::from(rec.ts_sec).saturating_mul(1_000_000_000).saturating_add(u64::from(rec.ts_frac) * ns_per_frac);
        let t0 = *first_ts.get_or_insert(ts);
        let expired = engine.advance_to(ts.saturating_sub(t0));
        if let Some(e) = explain.as_deref_mut() {
            write_expired(e, &format!("pkt {n:<4}"), engine.x.now(), &expired)?;
        }
        for p in &expired {
            if let Some(raw) = record(&rec, p) {
                writer.write_raw_packet(&raw).map_err(|e| anyhow::anyhow!("writing the output pcap: {e}"))?;
            }
        }
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
                let Some(raw) = record(&rec, p) else { continue };
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
    x: &mut Offline,
    input: &Path,
    output: &Path,
    explain: Option<&mut dyn Write>,
) -> anyhow::Result<Stats> {
    let inf = File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
    let mut tmp = PathBuf::from(output.as_os_str().to_owned());
    tmp.as_mut_os_string().push(".tmp");
    let outf = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let res = translate_pcap(x, inf, outf, explain).with_context(|| format!("{}", input.display()));
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
        let stats =
            translate_pcap(&mut super::super::tests::offline(super::super::tests::SIIT), &buf[..], &mut out, None)
                .unwrap();
        assert_eq!(stats.packets_in, 1);
        assert_eq!(stats.skipped, 1);
        let r = PcapReader::new(&out[..]).unwrap();
        assert_eq!(r.header().datalink, DataLink::RAW);
        assert!(stats.summary("non-IP frames").contains("1 non-IP frames skipped"));
    }

    #[test]
    fn pcapng_and_garbage_are_refused_clearly() {
        let e = translate_pcap(
            &mut super::super::tests::offline(super::super::tests::SIIT),
            &[0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0][..],
            Vec::new(),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("pcapng"), "{e}");
        let e = translate_pcap(
            &mut super::super::tests::offline(super::super::tests::SIIT),
            &b"hello"[..],
            Vec::new(),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a pcap file"), "{e}");
    }
}
