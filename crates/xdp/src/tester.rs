//! The XDP tester's userspace side (`bpf/tester.bpf.c`): loads the
//! generator and the counting receiver, fills the flows, runs the
//! generator with `BPF_PROG_RUN` in live frames mode, attaches the
//! receiver, and reads back what it counted. `crates/bench` builds its
//! `--tester xdp` backend on this; the judgement of a trial (loss, late,
//! latency) is the bench's.
//!
//! One [`Tester`] serves one trial: its maps start zeroed (the receiver's
//! bitmap of seen sequence numbers in particular).

use crate::loader::{attach_link, chain, load_xdp, map_err, test_run_once, xdp_md, xdp_mut};
use crate::types::{
    tester as names, TgenConfig, TgenFlow, TgenState, TrecvConfig, TrecvCounts, TrecvLearned, TrecvSample, TrecvTrend,
    TREND_SLOTS,
};
use crate::{Error, Mode};
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use aya::programs::xdp::XdpLinkId;
use aya::programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp};
use aya::{Ebpf, EbpfLoader};

/// The BPF object built by build.rs from `bpf/tester.bpf.c`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tester.bpf.o"));

/// Most frames one generator call sends (the kernel's limit on a live
/// frames batch is 256; a call runs several batches).
pub const MAX_BATCH: u32 = 256;

/// Sizes of one trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TesterLimits {
    /// Frames in the trial (the receiver's bitmap).
    pub frames: u64,
    /// Flows (generator templates and learned sources).
    pub flows: u32,
    /// Bytes of the latency sample ring (a power of two, at least 4096).
    pub sample_ring: u32,
}

/// The loaded tester of one trial.
pub struct Tester {
    bpf: Ebpf,
    receiver: Option<(XdpLinkId, Mode)>,
    anchor: Option<XdpLinkId>,
    limits: TesterLimits,
}

impl std::fmt::Debug for Tester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tester")
            .field("limits", &self.limits)
            .field("receiver", &self.receiver.as_ref().map(|r| r.1))
            .finish()
    }
}

impl Tester {
    /// Load the programs with maps for `limits`.
    pub fn load(limits: TesterLimits) -> Result<Tester, Error> {
        let words = u32::try_from(limits.frames.div_ceil(64).max(1))
            .map_err(|_| Error::Config(format!("{} frames in one trial: too many", limits.frames)))?;
        if limits.flows == 0 {
            return Err(Error::Config("a trial needs at least one flow".into()));
        }
        let ring = limits.sample_ring.max(4096).next_power_of_two();
        let mut bpf = EbpfLoader::new()
            .map_max_entries(names::TGEN_FLOWS, limits.flows)
            .map_max_entries(names::TRECV_LEARNED, limits.flows)
            .map_max_entries(names::TRECV_SEEN, words)
            .map_max_entries(names::TRECV_SAMPLES, ring)
            .load(OBJECT)
            .map_err(|e| Error::Unavailable(format!("loading the tester object: {}", chain(&e))))?;
        for name in [names::PROG_TGEN, names::PROG_TRECV] {
            load_xdp(&mut bpf, name)?;
        }
        Ok(Tester { bpf, receiver: None, anchor: None, limits })
    }

    fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, Error> {
        self.bpf.map_mut(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    fn map(&self, name: &'static str) -> Result<&aya::maps::Map, Error> {
        self.bpf.map(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    fn prog(&self, name: &str) -> Result<&Xdp, Error> {
        self.bpf
            .program(name)
            .ok_or_else(|| Error::Bpf(format!("program {name} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {name}: {e}")))
    }

    fn prog_mut(&mut self, name: &str) -> Result<&mut Xdp, Error> {
        xdp_mut(&mut self.bpf, name)
    }

    fn set<T: aya::Pod>(&mut self, map: &'static str, index: u32, v: T) -> Result<(), Error> {
        let mut a: Array<&mut MapData, T> =
            Array::try_from(self.map_mut(map)?).map_err(|e| Error::Bpf(format!("map {map}: {e}")))?;
        a.set(index, v, 0).map_err(|e| map_err(map, e))
    }

    fn get<T: aya::Pod>(&self, map: &'static str, index: u32) -> Result<T, Error> {
        let a: Array<&MapData, T> =
            Array::try_from(self.map(map)?).map_err(|e| Error::Bpf(format!("map {map}: {e}")))?;
        a.get(&index, 0).map_err(|e| map_err(map, e))
    }

    /// The generator's flows, in order (at most `limits.flows`).
    pub fn set_flows(&mut self, flows: &[TgenFlow]) -> Result<(), Error> {
        if flows.len() > self.limits.flows as usize {
            return Err(Error::Config(format!(
                "{} flows, the tester was loaded for {}",
                flows.len(),
                self.limits.flows
            )));
        }
        for (i, f) in flows.iter().enumerate() {
            self.set(names::TGEN_FLOWS, i as u32, *f)?;
        }
        Ok(())
    }

    /// The generator's settings; also restarts its sequence at 0.
    pub fn set_generator(&mut self, cfg: TgenConfig) -> Result<(), Error> {
        self.set(names::TGEN_STATE, 0, TgenState { seq: 0 })?;
        self.set(names::TGEN_CONFIG, 0, cfg)
    }

    /// Send `count` frames out of `ifindex` (an interface of the calling
    /// thread's network namespace): `BPF_PROG_RUN` of the generator over
    /// `frame` in live frames mode, `batch` frames per kernel batch
    /// (1..=[`MAX_BATCH`]). Each run rewrites the frame for the next
    /// sequence number and sends it (XDP_TX).
    ///
    /// Returns false when the kernel refused the call for lack of room
    /// (`ENOSPC` or `ENOMEM`: a receiving queue or its memory full, which a
    /// device under test slower than the offered rate causes): the frames
    /// of the call that were built count as sent, and whatever did not
    /// arrive counts as lost.
    pub fn generate(&self, frame: &[u8], ifindex: u32, count: u32, batch: u32) -> Result<bool, Error> {
        let p = self.prog(names::PROG_TGEN)?;
        let len = u32::try_from(frame.len()).map_err(|_| Error::Config("frame too large".into()))?;
        let ctx = xdp_md(len, ifindex);
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.ctx_in = Some(&ctx);
        opts.repeat = count.max(1);
        opts.attrs = TestRunAttrs::new().xdp_live_frames(batch.clamp(1, MAX_BATCH));
        match p.test_run(opts) {
            Ok(_) => Ok(true),
            Err(aya::programs::ProgramError::SyscallError(e))
                if matches!(e.io_error.raw_os_error(), Some(libc::ENOSPC | libc::ENOMEM)) =>
            {
                Ok(false)
            }
            Err(e) => Err(Error::Bpf(format!("BPF_PROG_RUN (live frames): {}", chain(&e)))),
        }
    }

    /// Frames the generator has built since [`Tester::set_generator`].
    pub fn generated(&self) -> Result<u64, Error> {
        Ok(self.get::<TgenState>(names::TGEN_STATE, 0)?.seq)
    }

    /// Attach the receiver to `iface` (of the calling thread's network
    /// namespace): native, falling back to generic. Returns the mode.
    pub fn attach_receiver(&mut self, iface: &str, mode: Mode) -> Result<Mode, Error> {
        let ifindex = crate::sys::if_index(iface).ok_or_else(|| Error::Interface(format!("no interface {iface}")))?;
        if self.receiver.is_some() {
            return Err(Error::Interface(format!("{iface}: the receiver is attached already")));
        }
        let p = self.prog_mut(names::PROG_TRECV)?;
        let (link, used, _) = attach_link(p, iface, ifindex, mode)?;
        self.receiver = Some((link, used));
        Ok(used)
    }

    /// Attach the generator (natively) to `iface`, an idle interface of
    /// the calling thread's namespace, for the tester's lifetime. Every
    /// `BPF_PROG_RUN` of a program the kernel's XDP dispatcher does not
    /// hold adds it and removes it again, each time waiting for an RCU
    /// grace period (tens of milliseconds on a busy machine): with the
    /// program attached somewhere, a call costs microseconds. Frames
    /// arriving on `iface` pass untouched (the generator only acts on its
    /// sending port).
    pub fn anchor_generator(&mut self, iface: &str) -> Result<(), Error> {
        let ifindex = crate::sys::if_index(iface).ok_or_else(|| Error::Interface(format!("no interface {iface}")))?;
        if self.anchor.is_some() {
            return Err(Error::Interface(format!("{iface}: the generator is anchored already")));
        }
        let p = self.prog_mut(names::PROG_TGEN)?;
        let (link, _, _) = attach_link(p, iface, ifindex, Mode::Native)?;
        self.anchor = Some(link);
        Ok(())
    }

    /// Detach the receiver (also done on drop).
    pub fn detach_receiver(&mut self) -> Result<(), Error> {
        if let Some((link, _)) = self.receiver.take() {
            let p = self.prog_mut(names::PROG_TRECV)?;
            p.detach(link).map_err(|e| Error::Interface(format!("receiver detach: {}", chain(&e))))?;
        }
        Ok(())
    }

    /// The receiver's settings (`total` = 0 closes it).
    pub fn set_receiver(&mut self, cfg: TrecvConfig) -> Result<(), Error> {
        self.set(names::TRECV_CONFIG, 0, cfg)
    }

    /// The receiver's counters, summed over CPUs.
    pub fn counts(&self) -> Result<TrecvCounts, Error> {
        let a: PerCpuArray<&MapData, TrecvCounts> = PerCpuArray::try_from(self.map(names::TRECV_COUNTS)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", names::TRECV_COUNTS)))?;
        let v = a.get(&0, 0).map_err(|e| map_err(names::TRECV_COUNTS, e))?;
        Ok(v.iter().fold(TrecvCounts::default(), |s, x| TrecvCounts {
            received: s.received + x.received,
            late: s.late + x.late,
            dup: s.dup + x.dup,
            foreign: s.foreign + x.foreign,
            sampled: s.sampled + x.sampled,
            sample_lost: s.sample_lost + x.sample_lost,
        }))
    }

    /// The latency trend: (sum ns, frames) per tenth of the trial, summed over CPUs.
    pub fn trend(&self) -> Result<Vec<(u64, u64)>, Error> {
        let a: PerCpuArray<&MapData, TrecvTrend> = PerCpuArray::try_from(self.map(names::TRECV_TREND)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", names::TRECV_TREND)))?;
        (0..TREND_SLOTS)
            .map(|i| {
                let v = a.get(&i, 0).map_err(|e| map_err(names::TRECV_TREND, e))?;
                Ok(v.iter().fold((0, 0), |s, x| (s.0 + x.sum_ns, s.1 + x.count)))
            })
            .collect()
    }

    /// Hand every latency sample in the ring to `f` (and consume it).
    pub fn drain_samples(&mut self, mut f: impl FnMut(TrecvSample)) -> Result<(), Error> {
        let mut rb: RingBuf<&mut MapData> = RingBuf::try_from(self.map_mut(names::TRECV_SAMPLES)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", names::TRECV_SAMPLES)))?;
        while let Some(item) = rb.next() {
            if item.len() >= 8 {
                let seq = u32::from_ne_bytes(item[0..4].try_into().unwrap_or_default());
                let lat_ns = u32::from_ne_bytes(item[4..8].try_into().unwrap_or_default());
                f(TrecvSample { seq, lat_ns });
            }
        }
        Ok(())
    }

    /// The receiver's bitmap of sequence numbers seen (bit `seq % 64` of
    /// word `seq / 64`; first arrivals, on time or late), for accounting
    /// per flow after a trial. One map read per word.
    pub fn seen(&self) -> Result<Vec<u64>, Error> {
        let words = self.limits.frames.div_ceil(64).max(1) as u32;
        let a: Array<&MapData, u64> = Array::try_from(self.map(names::TRECV_SEEN)?)
            .map_err(|e| Error::Bpf(format!("map {}: {e}", names::TRECV_SEEN)))?;
        (0..words).map(|i| a.get(&i, 0).map_err(|e| map_err(names::TRECV_SEEN, e))).collect()
    }

    /// The learned source of flow `i` (None: no frame of it arrived).
    pub fn learned(&self, i: u32) -> Result<Option<TrecvLearned>, Error> {
        let l: TrecvLearned = self.get(names::TRECV_LEARNED, i)?;
        Ok((l.seq1 != 0).then_some(l))
    }
}

impl Drop for Tester {
    fn drop(&mut self) {
        let _ = self.detach_receiver();
        if let Some(link) = self.anchor.take() {
            if let Ok(p) = self.prog_mut(names::PROG_TGEN) {
                let _ = p.detach(link);
            }
        }
    }
}

/// What the kernel answered when asked once for `BPF_PROG_RUN` in live
/// frames mode ([`live_frames`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveFrames {
    /// Live frames work: the XDP generator (`--tester xdp`) can send.
    Granted,
    /// The kernel refused live frames with `EPERM` (some machines do, while
    /// they run `BPF_PROG_TEST_RUN` without live frames, attach XDP and
    /// open AF_XDP sockets): the XDP generator cannot send here; the
    /// AF_XDP generator can. The string is the kernel's answer.
    Refused(String),
}

impl LiveFrames {
    /// Whether live frames work.
    pub fn granted(&self) -> bool {
        *self == LiveFrames::Granted
    }

    /// One line for reports and skipped tests.
    pub fn describe(&self) -> String {
        match self {
            LiveFrames::Granted => "granted".into(),
            LiveFrames::Refused(why) => format!("refused by the kernel ({why})"),
        }
    }
}

/// Asks the kernel once per process whether it runs XDP programs with
/// `BPF_PROG_RUN` in live frames mode (`BPF_F_TEST_XDP_LIVE_FRAMES`): one
/// run of a program that drops its frame, on the loopback device of the
/// calling thread's namespace. `Ok(Refused)` only when the kernel answers
/// `EPERM` to exactly that call; every other failure (BPF unavailable, the
/// object not loading) is an error, so a caller never mistakes a broken
/// build for a machine without live frames. Needs root (CAP_BPF,
/// CAP_NET_ADMIN).
pub fn live_frames() -> Result<LiveFrames, Error> {
    static ANSWER: std::sync::OnceLock<Result<LiveFrames, Error>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(probe_live_frames).clone()
}

fn probe_live_frames() -> Result<LiveFrames, Error> {
    let mut bpf = EbpfLoader::new()
        .map_max_entries(names::TRECV_SAMPLES, 4096)
        .load(OBJECT)
        .map_err(|e| Error::Unavailable(format!("loading the tester object: {}", chain(&e))))?;
    load_xdp(&mut bpf, names::PROG_TPROBE)?;
    let p = xdp_mut(&mut bpf, names::PROG_TPROBE)?;
    // An Ethernet frame of the local experimental EtherType, to nobody.
    let mut frame = [0u8; 64];
    frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    let ctx = xdp_md(frame.len() as u32, 1);
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(&frame);
    opts.ctx_in = Some(&ctx);
    opts.repeat = 1;
    opts.attrs = TestRunAttrs::new().xdp_live_frames(1);
    match p.test_run(opts) {
        Ok(_) => Ok(LiveFrames::Granted),
        Err(aya::programs::ProgramError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::EPERM) => {
            Ok(LiveFrames::Refused(format!("BPF_PROG_RUN with live frames: {}", e.io_error)))
        }
        Err(e) => Err(Error::Bpf(format!("BPF_PROG_RUN (live frames probe): {}", chain(&e)))),
    }
}

/// Bytes of the tester's stamp after the UDP header (timestamp, sequence
/// number, flow, magic).
pub const STAMP_LEN: usize = 18;
/// Bytes of the RTP header before the stamp in RTP frames
/// (`TgenConfig::rtp`).
pub const RTP_HEADER_LEN: usize = crate::types::RTP_HEADER_LEN as usize;

/// The frame layouts the generator builds (`TgenConfig::v6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Ethernet, IPv4 without options, UDP.
    V4,
    /// Ethernet, IPv6, UDP.
    V6,
    /// Ethernet, IPv6 with next header 4 (RFC 2473), IPv4 without
    /// options, UDP: a B4's softwire frame.
    FourInSix,
}

impl Layout {
    /// The `TgenConfig::v6` value.
    pub fn code(self) -> u8 {
        match self {
            Layout::V4 => 0,
            Layout::V6 => 1,
            Layout::FourInSix => crate::types::TGEN_4IN6,
        }
    }

    /// Where the bytes the generator writes per flow start: the frame's
    /// bytes before are the template's, the same for every flow.
    pub fn head(self) -> usize {
        match self {
            Layout::V4 | Layout::V6 => 0,
            Layout::FourInSix => crate::types::TGEN_4IN6_OFF as usize,
        }
    }

    /// Whether the frame leaves as IPv6 (4in6 included).
    pub fn outer_v6(self) -> bool {
        self != Layout::V4
    }
}

/// An IPv4 header without options carrying UDP, unfragmented: the sum of
/// its addresses (the UDP pseudo-header's).
fn ipv4_udp(ip: &[u8]) -> Option<u64> {
    let ok = ip.len() >= 20 && ip[0] == 0x45 && ip[9] == 17 && u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff == 0;
    ok.then(|| xlat::checksum::sum(&ip[12..20]))
}

/// A generator flow from a whole template frame (Ethernet, then IPv4
/// without options, IPv6, or IPv4 without options in IPv6 (4in6, next
/// header 4), then UDP and a payload of at least [`STAMP_LEN`] bytes, with
/// `rtp` [`RTP_HEADER_LEN`] more before the stamp; the payload after the
/// stamp is kept as it is only up to the end of the 64 bytes the
/// generator writes, so it must be zero there). The per-frame fields (the
/// RTP header with `rtp`, the stamp, the UDP checksum) are left out of the
/// flow's checksum base: the generator writes them. A 4in6 frame's UDP
/// checksum is the inner packet's; its outer IPv6 header and inner IPv4
/// header (with its checksum) are the flow's, as built. Returns the flow,
/// the UDP header's offset and the layout.
pub fn flow_from_frame(frame: &[u8], rtp: bool) -> Result<(TgenFlow, u16, Layout), Error> {
    let bad = |why: &str| Error::Config(format!("tester template: {why}"));
    let et = frame.get(12..14).ok_or_else(|| bad("shorter than an Ethernet header"))?;
    let (layout, udp, pseudo) = match et {
        [0x86, 0xdd] => {
            let ip = frame.get(14..54).ok_or_else(|| bad("short IPv6 header"))?;
            match ip[6] {
                17 => (Layout::V6, 54usize, xlat::checksum::sum(&ip[8..40])),
                4 => {
                    let inner = frame.get(54..74).ok_or_else(|| bad("short inner IPv4 header"))?;
                    let pseudo =
                        ipv4_udp(inner).ok_or_else(|| bad("4in6 with inner IPv4 options, fragment, or not UDP"))?;
                    (Layout::FourInSix, 74, pseudo)
                }
                _ => return Err(bad("IPv6 carrying neither UDP nor IPv4")),
            }
        }
        [0x08, 0x00] => {
            let ip = frame.get(14..34).ok_or_else(|| bad("short IPv4 header"))?;
            let pseudo = ipv4_udp(ip).ok_or_else(|| bad("IPv4 with options, fragment, or not UDP"))?;
            (Layout::V4, 34usize, pseudo)
        }
        _ => return Err(bad("neither IPv4 nor IPv6")),
    };
    let dgram = frame.get(udp..).ok_or_else(|| bad("no UDP header"))?;
    let ulen =
        usize::from(u16::from_be_bytes([dgram.get(4).copied().unwrap_or(0), dgram.get(5).copied().unwrap_or(0)]));
    let per_frame = if rtp { RTP_HEADER_LEN } else { 0 } + STAMP_LEN;
    if ulen < 8 + per_frame || ulen > dgram.len() {
        return Err(bad("UDP length does not cover the stamp or exceeds the frame"));
    }
    let mut d = dgram[..ulen].to_vec();
    d[6] = 0;
    d[7] = 0;
    d[8..8 + per_frame].fill(0);
    let base_sum = pseudo + 17 + ulen as u64 + xlat::checksum::sum(&d);
    // The 64 bytes the generator writes, from the layout's head.
    let at = layout.head();
    let mut head = [0u8; 64];
    let n = frame.len().saturating_sub(at).min(64);
    head[..n].copy_from_slice(&frame[at..at + n]);
    // The stamp's bytes within them are written per frame: zero them.
    let s = (udp + 8 - at).min(64);
    let e = (udp + 8 + per_frame - at).min(64);
    head[s..e].fill(0);
    head[udp + 6 - at] = 0;
    head[udp + 7 - at] = 0;
    let mut hdr = [[0u8; 32]; 2];
    hdr[0].copy_from_slice(&head[..32]);
    hdr[1].copy_from_slice(&head[32..]);
    Ok((TgenFlow { hdr, base_sum }, udp as u16, layout))
}

/// What `xdp_tgen` does to a frame, in userspace: the AF_XDP generator
/// (`crates/bench`, `--tester afxdp`) stamps its frames with it, so both
/// generators send the same bytes and the same receiver counts them
/// (checked byte for byte against the BPF program with
/// `BPF_PROG_TEST_RUN`: crates/xdp/tests/tester.rs). Built once per trial
/// from the generator's settings and flows; [`Stamper::stamp`] then turns a
/// copy of the trial's first template frame into the frame of any
/// sequence number.
#[derive(Debug, Clone)]
pub struct Stamper {
    flows: Vec<TgenFlow>,
    magic: u32,
    /// Where the flow's header bytes go and how many.
    head: usize,
    head_len: usize,
    udp: usize,
    rtp: bool,
    len: usize,
}

impl Stamper {
    /// The stamper of `cfg` (`nflows` of `flows`, in order) for frames of
    /// `len` bytes. Refuses what the BPF program would drop: no flows, a
    /// frame too short for the layout's header bytes or the stamp, a UDP
    /// header past the generator's reach.
    pub fn new(cfg: &TgenConfig, flows: &[TgenFlow], len: usize) -> Result<Stamper, Error> {
        let bad = |why: String| Error::Config(format!("tester stamp: {why}"));
        let n = cfg.nflows as usize;
        if n == 0 || n > flows.len() {
            return Err(bad(format!("{} flows of {} given", cfg.nflows, flows.len())));
        }
        let (head, head_len) = match cfg.v6 {
            0 => (0, 44),
            1 => (0, 64),
            crate::types::TGEN_4IN6 => (crate::types::TGEN_4IN6_OFF as usize, 64),
            v => return Err(bad(format!("layout code {v}"))),
        };
        let udp = usize::from(cfg.udp_off);
        if udp > crate::types::TGEN_4IN6_OFF as usize + 64 {
            return Err(bad(format!("UDP header at {udp}, past the generator's reach")));
        }
        let rtp = cfg.rtp != 0;
        let end = udp + 8 + if rtp { RTP_HEADER_LEN } else { 0 } + STAMP_LEN;
        if len < end.max(head + head_len) {
            return Err(bad(format!("a {len}-byte frame is too short for this layout")));
        }
        Ok(Stamper { flows: flows[..n].to_vec(), magic: cfg.magic, head, head_len, udp, rtp, len })
    }

    /// The frame length this stamper writes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a stamper needs a frame that holds the stamp.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Turns `frame` (a copy of the trial's first template, or a frame this
    /// stamper wrote before) into frame `seq`, timestamped `ts_ns`: the
    /// flow's header bytes, with RTP the RTP header, the stamp and the UDP
    /// checksum, as `xdp_tgen` does. Returns false, writing nothing, for a
    /// frame of another length.
    pub fn stamp(&self, frame: &mut [u8], seq: u32, ts_ns: u64) -> bool {
        if frame.len() != self.len {
            return false;
        }
        let nflows = self.flows.len() as u32;
        let flow = seq % nflows;
        let f = &self.flows[flow as usize];
        let (lo, hi) = f.hdr.split_at(1);
        let hdr = lo[0].iter().chain(hi[0].iter());
        for (d, s) in frame[self.head..self.head + self.head_len].iter_mut().zip(hdr) {
            *d = *s;
        }
        let p = self.udp;
        let mut sum = f.base_sum;
        let mut s = p + 8;
        if self.rtp {
            let n = seq / nflows;
            let (rts, ssrc) = (n.wrapping_mul(160), crate::types::RTP_SSRC_BASE.wrapping_add(flow));
            frame[s..s + 2].copy_from_slice(&0x8000u16.to_be_bytes());
            frame[s + 2..s + 4].copy_from_slice(&(n as u16).to_be_bytes());
            frame[s + 4..s + 8].copy_from_slice(&rts.to_be_bytes());
            frame[s + 8..s + 12].copy_from_slice(&ssrc.to_be_bytes());
            sum += 0x8000 + u64::from(n as u16) + words32(rts) + words32(ssrc);
            s += RTP_HEADER_LEN;
        }
        frame[s..s + 8].copy_from_slice(&ts_ns.to_be_bytes());
        frame[s + 8..s + 12].copy_from_slice(&seq.to_be_bytes());
        frame[s + 12..s + 14].copy_from_slice(&(flow as u16).to_be_bytes());
        frame[s + 14..s + 18].copy_from_slice(&self.magic.to_be_bytes());
        sum += words32((ts_ns >> 32) as u32) + words32(ts_ns as u32) + words32(seq) + u64::from(flow as u16);
        sum += words32(self.magic);
        let c = !xlat::checksum::fold(sum);
        // RFC 768: a computed zero is sent as all ones.
        let c = if c == 0 { 0xffff } else { c };
        frame[p + 6..p + 8].copy_from_slice(&c.to_be_bytes());
        true
    }
}

/// The sum of a `u32`'s two big-endian 16-bit words (`words32` in
/// bpf/tester.bpf.c).
fn words32(v: u32) -> u64 {
    u64::from(v >> 16) + u64::from(v & 0xffff)
}

impl Tester {
    /// Run the generator once over `frame` without sending it (plain
    /// `BPF_PROG_TEST_RUN`) and return the frame it built: for tests.
    pub fn build_frame(&self, frame: &[u8], ifindex: u32) -> Result<(u32, Vec<u8>), Error> {
        let r = test_run_once(self.prog(names::PROG_TGEN)?, frame, ifindex, 1)?;
        Ok((r.action, r.frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat::checksum::{finish, sum, verifies};

    /// Ethernet + IPv4 (DF, valid header checksum) + UDP + 18 zero bytes,
    /// in an outer IPv6 header from `b4` (next header 4) with `outer`.
    fn udp_frame(src4: [u8; 4], sport: u16, outer: Option<[u8; 16]>) -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0];
        ip.extend_from_slice(&src4);
        ip.extend_from_slice(&[198, 51, 100, 7]);
        let c = finish(sum(&ip));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut udp = vec![0u8; 26];
        udp[0..2].copy_from_slice(&sport.to_be_bytes());
        udp[2..4].copy_from_slice(&53u16.to_be_bytes());
        udp[4..6].copy_from_slice(&26u16.to_be_bytes());
        let mut f = vec![2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa];
        match outer {
            Some(b4) => {
                f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 46, 4, 64]);
                f.extend_from_slice(&b4);
                f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            }
            None => f.extend_from_slice(&[0x08, 0x00]),
        }
        f.extend_from_slice(&ip);
        f.extend_from_slice(&udp);
        f
    }

    /// What `xdp_tgen` makes of `frame` as frame `seq` of a trial whose
    /// 1024 flows are all `flow` (so the flow index is `seq % 1024`).
    fn generate(frame: &[u8], flow: &(TgenFlow, u16, Layout), ts: u64, seq: u32, magic: u32) -> Vec<u8> {
        let (f, udp, layout) = *flow;
        let cfg = TgenConfig { nflows: 1024, magic, udp_off: udp, v6: layout.code(), rtp: 0, ifindex: 1 };
        let st = Stamper::new(&cfg, &[f; 1024], frame.len()).unwrap();
        let mut out = frame.to_vec();
        assert!(st.stamp(&mut out, seq, ts));
        out
    }

    /// The UDP checksum of the IPv4 packet at `ip` verifies.
    fn udp4_ok(ip: &[u8]) -> bool {
        let l4 = &ip[20..];
        verifies(sum(&ip[12..20]) + 17 + l4.len() as u64 + sum(l4))
    }

    #[test]
    fn a_4in6_flow_covers_the_outer_addresses_and_inner_headers() {
        let b4 = [0x20, 0x01, 0x0d, 0xb8, 0, 0x46, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10];
        let f = udp_frame([192, 0, 2, 130], 4100, Some(b4));
        assert_eq!(f.len(), 100, "an 84-byte label's 4in6 frame on veth");
        let flow = flow_from_frame(&f, false).unwrap();
        assert_eq!((flow.1, flow.2), (74, Layout::FourInSix));
        assert_eq!((flow.2.code(), flow.2.head(), flow.2.outer_v6()), (2, 18, true));
        let hdr: Vec<u8> = flow.0.hdr.iter().flatten().copied().collect();
        let mut want = f[18..82].to_vec();
        want[62..64].fill(0); // the UDP checksum: written per frame
        assert_eq!(hdr, want, "outer payload length on, through the UDP header");
        // Every stamp gives a frame whose inner UDP checksum verifies, the
        // headers untouched.
        for (ts, seq) in [(1u64, 0u32), (u64::MAX, u32::MAX), (0x0123_4567_89ab_cdef, 99)] {
            let g = generate(&f, &flow, ts, seq, 0x7636_0005);
            assert_eq!(g[..80], f[..80]);
            assert!(verifies(sum(&g[54..74])), "inner IPv4 header checksum");
            assert!(udp4_ok(&g[54..]), "inner UDP checksum, stamp {ts} {seq}");
            assert_eq!(g[90..94], seq.to_be_bytes(), "the sequence number after the inner UDP header");
            assert_eq!(g[94..96], ((seq % 1024) as u16).to_be_bytes(), "the flow index");
        }
    }

    #[test]
    fn plain_flows_keep_their_layout() {
        let f4 = udp_frame([192, 0, 2, 10], 40000, None);
        let flow = flow_from_frame(&f4, false).unwrap();
        assert_eq!((flow.1, flow.2, flow.2.code(), flow.2.head()), (34, Layout::V4, 0, 0));
        let g = generate(&f4, &flow, 42, 3, 0x7636_0001);
        assert!(udp4_ok(&g[14..]));
        assert_eq!(g[..40], f4[..40]);
    }

    #[test]
    fn the_stamper_writes_rtp_frames() {
        // An IPv4 RTP frame: 12 bytes of RTP header room before the stamp.
        let mut f = udp_frame([192, 0, 2, 20], 30000, None);
        f.extend_from_slice(&[0u8; RTP_HEADER_LEN]);
        let ulen = (f.len() - 34) as u16;
        f[38..40].copy_from_slice(&ulen.to_be_bytes());
        f[16..18].copy_from_slice(&(ulen + 20).to_be_bytes());
        f[24..26].fill(0);
        let c = finish(sum(&f[14..34]));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        let (flow, udp, layout) = flow_from_frame(&f, true).unwrap();
        let cfg = TgenConfig { nflows: 3, magic: 0x7636_0009, udp_off: udp, v6: layout.code(), rtp: 1, ifindex: 1 };
        let st = Stamper::new(&cfg, &[flow; 3], f.len()).unwrap();
        assert_eq!((st.len(), st.is_empty()), (f.len(), false));
        // Frame 3 * 65537 + 2: flow 2's packet 65537 (RTP sequence 1 after
        // the wrap); frame u32::MAX: the RTP timestamp wraps too.
        for seq in [0u32, 4, 3 * 65_537 + 2, u32::MAX] {
            let mut g = f.clone();
            assert!(st.stamp(&mut g, seq, 0xdead_beef_0000_0001));
            let (k, n) = (seq % 3, seq / 3);
            assert!(udp4_ok(&g[14..]), "UDP checksum of frame {seq}");
            assert_eq!(g[42..44], [0x80, 0], "V=2, PT 0");
            assert_eq!(g[44..46], (n as u16).to_be_bytes(), "RTP sequence number");
            assert_eq!(g[46..50], n.wrapping_mul(160).to_be_bytes(), "RTP timestamp");
            assert_eq!(g[50..54], (crate::types::RTP_SSRC_BASE + k).to_be_bytes(), "SSRC");
            assert_eq!(g[54..62], 0xdead_beef_0000_0001u64.to_be_bytes(), "timestamp after the RTP header");
            assert_eq!(g[62..66], seq.to_be_bytes());
            assert_eq!(g[66..68], (k as u16).to_be_bytes());
            assert_eq!(g[68..72], 0x7636_0009u32.to_be_bytes());
        }
        let mut short = f[..f.len() - 1].to_vec();
        assert!(!st.stamp(&mut short, 0, 1), "a frame of another length");
        assert_eq!(short, f[..f.len() - 1], "left as it was");
    }

    #[test]
    fn the_stamper_refuses_what_the_program_drops() {
        let f = udp_frame([192, 0, 2, 10], 40000, None);
        let (flow, udp, layout) = flow_from_frame(&f, false).unwrap();
        let cfg = TgenConfig { nflows: 2, magic: 1, udp_off: udp, v6: layout.code(), rtp: 0, ifindex: 1 };
        assert!(Stamper::new(&cfg, &[flow; 2], f.len()).is_ok());
        for (c, flows, len, why) in [
            (TgenConfig { nflows: 0, ..cfg }, 2, f.len(), "no flows"),
            (cfg, 1, f.len(), "fewer flows than nflows"),
            (TgenConfig { v6: 3, ..cfg }, 2, f.len(), "an unknown layout"),
            (TgenConfig { udp_off: 83, ..cfg }, 2, 200, "a UDP header past the 64 bytes written"),
            (cfg, 2, f.len() - 1, "no room for the stamp"),
            (TgenConfig { rtp: 1, ..cfg }, 2, f.len(), "no room for the RTP header"),
            (TgenConfig { v6: 1, ..cfg }, 2, 63, "an IPv6 layout writes 64 header bytes"),
        ] {
            assert!(Stamper::new(&c, &vec![flow; flows], len).is_err(), "{why}");
        }
    }

    #[test]
    fn bad_4in6_templates_are_refused() {
        let good = udp_frame([192, 0, 2, 130], 4100, Some([0x20; 16]));
        assert!(flow_from_frame(&good, false).is_ok());
        let with = |at: usize, v: u8| {
            let mut f = good.clone();
            f[at] = v;
            f
        };
        for (f, why) in [
            (with(20, 41), "next header 41 (IPv6 in IPv6)"),
            (with(54, 0x46), "inner IPv4 options"),
            (with(60, 0x20), "inner fragment (MF)"),
            (with(63, 6), "inner TCP"),
            (with(54, 0x65), "inner version 6"),
        ] {
            assert!(flow_from_frame(&f, false).is_err(), "{why}");
        }
        for cut in [14, 54, 73, 81, 99] {
            assert!(flow_from_frame(&good[..cut], false).is_err(), "truncated at {cut}");
        }
        assert!(flow_from_frame(&good, true).is_err(), "no room for an RTP header");
    }
}
