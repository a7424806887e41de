//! The XDP tester (bpf/tester.bpf.c, `xdp::tester`, `xdp::xskgen`): the
//! generator builds exactly the frames of the bench's frame format (valid
//! UDP checksum, stamp fields, flows in order), and the userspace stamper
//! of the AF_XDP generator builds the same bytes (compared with the
//! program's through `BPF_PROG_TEST_RUN`, every layout, RTP); through a
//! veth pair the counting receiver counts every frame once, none late,
//! learns each flow's source, samples latencies, and counts other trials'
//! frames and frames after it closed as foreign.
//!
//! Each test that sends runs twice: with the live-frames generator
//! (`BPF_PROG_RUN` with live frames; skipped, saying why, where the kernel
//! refuses them: `xdp::tester::live_frames`) and with the AF_XDP generator
//! (`..._afxdp`, everywhere), the same body and assertions. Root only;
//! a uniquely named namespace, removed when the test ends.

use lab::netns::Netns;
use std::net::Ipv4Addr;
use xdp::tester::{flow_from_frame, Layout, LiveFrames, Stamper, Tester, TesterLimits, RTP_HEADER_LEN, STAMP_LEN};
use xdp::types::{TgenConfig, TgenFlow, TrecvConfig, RTP_SSRC_BASE, TESTER_MAGIC_HI};
use xdp::{action, Mode};

fn csum_ok(data: &[u8]) -> bool {
    xlat::checksum::verifies(xlat::checksum::sum(data))
}

/// A UDP frame: Ethernet + IPv4 + UDP + `payload` zero bytes.
fn frame4(src: Ipv4Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + payload];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 8 + payload) as u16).to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&[198, 51, 100, 7]);
    let c = xlat::checksum::finish(xlat::checksum::sum(ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    f
}

fn udp_checksum_ok4(f: &[u8]) -> bool {
    let ulen = usize::from(u16::from_be_bytes([f[38], f[39]]));
    let mut p = Vec::new();
    p.extend_from_slice(&f[26..34]);
    p.extend_from_slice(&[0, 17]);
    p.extend_from_slice(&(ulen as u16).to_be_bytes());
    p.extend_from_slice(&f[34..34 + ulen]);
    csum_ok(&p)
}

/// A UDP frame: Ethernet + IPv6 + UDP + `payload` zero bytes, from
/// `2001:db8:46::<src>` to `2001:db8:64::cb00:710a`.
fn frame6(src: u16, sport: u16, payload: usize) -> Vec<u8> {
    let ulen = 8 + payload;
    let mut f = vec![0u8; 14 + 40 + ulen];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let ip = &mut f[14..54];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
    ip[6] = 17;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x46, 0, 0, 0, 0, 0, 0, 0, 0, (src >> 8) as u8, src as u8]);
    ip[24..40].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0x64, 0, 0, 0, 0, 0, 0, 0xcb, 0, 0x71, 0x0a]);
    f[54..56].copy_from_slice(&sport.to_be_bytes());
    f[56..58].copy_from_slice(&53u16.to_be_bytes());
    f[58..60].copy_from_slice(&(ulen as u16).to_be_bytes());
    f
}

/// The stamp `st` (after the UDP or RTP header) carries a timestamp,
/// sequence number `seq`, flow `flow` and `magic`.
fn assert_stamp(st: &[u8], seq: u32, flow: u32, magic: u32) {
    assert!(u64::from_be_bytes(st[0..8].try_into().unwrap()) > 0, "timestamp");
    assert_eq!(u32::from_be_bytes(st[8..12].try_into().unwrap()), seq, "sequence number");
    assert_eq!(u32::from(u16::from_be_bytes([st[12], st[13]])), flow, "flow");
    assert_eq!(u32::from_be_bytes(st[14..18].try_into().unwrap()), magic, "magic");
}

/// The receiver's settings for `total` frames of `magic`: IPv4, a
/// second's budget, no samples skipped, nothing learned, no RTP.
fn receiver(magic: u32, total: u64) -> TrecvConfig {
    TrecvConfig {
        budget_ns: 1_000_000_000,
        magic,
        total: total as u32,
        nflows: 0,
        sample_shift: 0,
        rx_v6: 0,
        learn: 0,
        rtp: 0,
    }
}

/// Runs `body` on a thread of its own (it enters a namespace), as root.
fn as_root(body: impl FnOnce() + Send + 'static) {
    std::thread::spawn(body).join().expect("test thread");
}

/// Which generator sends a test's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `BPF_PROG_RUN` of `xdp_tgen` in live frames mode.
    Live,
    /// The AF_XDP generator (`xdp::xskgen`), stamping in userspace.
    AfXdp,
}

/// Runs `body` with `kind` as root; a live-frames run where the kernel
/// refuses live frames is skipped with one line saying why (any other
/// failure of the probe fails the test).
fn run(test: &str, kind: Kind, body: fn(Kind)) {
    if !lab::testenv::need_root(test) {
        return;
    }
    if kind == Kind::Live {
        match xdp::tester::live_frames() {
            Ok(LiveFrames::Granted) => {}
            Ok(refused) => {
                return lab::testenv::skip(
                    test,
                    &format!("live frames {}; the `_afxdp` twin runs this body", refused.describe()),
                );
            }
            Err(e) => panic!("the live frames probe failed: {e}"),
        }
    }
    as_root(move || body(kind));
}

/// A trial's generator of either kind, on the port `ga`.
enum Gen {
    Live { frame: Vec<u8>, ifindex: u32 },
    AfXdp { gen: Box<xdp::xskgen::Generator>, flows: Vec<TgenFlow> },
}

impl Gen {
    /// A generator of `kind` for `cfg` over `flows`, its frames made from
    /// `frame0`, at sequence number 0. The live one is anchored on the idle
    /// pair `gx`/`gy`.
    fn start(kind: Kind, t: &mut Tester, cfg: TgenConfig, frame0: &[u8], flows: &[TgenFlow]) -> Gen {
        match kind {
            Kind::Live => {
                t.anchor_generator("gx").unwrap();
                t.set_generator(cfg).unwrap();
                Gen::Live { frame: frame0.to_vec(), ifindex: cfg.ifindex }
            }
            Kind::AfXdp => {
                let st = Stamper::new(&cfg, flows, frame0.len()).unwrap();
                let gen = xdp::xskgen::Generator::open(cfg.ifindex, frame0, st).unwrap();
                assert!(!gen.socket().zero_copy(), "veth: copy mode");
                Gen::AfXdp { gen: Box::new(gen), flows: flows.to_vec() }
            }
        }
    }

    /// Starts again at sequence number 0 with `cfg`.
    fn restart(&mut self, t: &mut Tester, cfg: TgenConfig) {
        match self {
            Gen::Live { .. } => t.set_generator(cfg).unwrap(),
            Gen::AfXdp { gen, flows } => {
                let st = Stamper::new(&cfg, flows, gen.frame_len()).unwrap();
                gen.restart(st).unwrap();
            }
        }
    }

    /// Sends the next `n` frames and waits until they have left.
    fn send(&mut self, t: &Tester, n: u32) {
        match self {
            Gen::Live { frame, ifindex } => {
                assert!(t.generate(frame, *ifindex, n, n.min(64)).unwrap(), "the kernel refused the frames")
            }
            Gen::AfXdp { gen, .. } => {
                let deadline = xdp::sys::monotonic_ns() + 10_000_000_000;
                let mut left = n;
                while left > 0 {
                    assert!(xdp::sys::monotonic_ns() < deadline, "{left} frames not queued");
                    let k = gen.send(left).unwrap();
                    left -= k;
                    if k == 0 {
                        std::thread::yield_now();
                    }
                }
                assert_eq!(gen.flush(deadline).unwrap(), 0, "frames left in the TX ring");
            }
        }
    }

    /// Frames generated since the last (re)start.
    fn generated(&self, t: &Tester) -> u64 {
        match self {
            Gen::Live { .. } => t.generated().unwrap(),
            Gen::AfXdp { gen, .. } => gen.generated(),
        }
    }

    /// What the generator of `kind` makes of `frame0` as the next frame:
    /// the live one runs the program once without sending it (plain
    /// `BPF_PROG_TEST_RUN`); the AF_XDP one stamps a copy (the program's
    /// sequence is not advanced: `seq` is passed).
    fn build(&self, t: &Tester, cfg: TgenConfig, frame0: &[u8], seq: u32) -> Vec<u8> {
        match self {
            Gen::Live { ifindex, .. } => {
                let (act, f) = t.build_frame(frame0, *ifindex).unwrap();
                assert_eq!(act, action::TX);
                f
            }
            Gen::AfXdp { flows, .. } => {
                let st = Stamper::new(&cfg, flows, frame0.len()).unwrap();
                let mut f = frame0.to_vec();
                assert!(st.stamp(&mut f, seq, xdp::sys::monotonic_ns()));
                f
            }
        }
    }
}

/// [`veth_lab`] named `name`, the index of `ga`, and a tester loaded for
/// `frames` frames of `flows` flows.
fn lab_tester(name: &str, frames: u64, flows: u32) -> (Netns, u32, Tester) {
    let ns = veth_lab(name);
    let ga = xdp::sys::if_index("ga").unwrap();
    let t = Tester::load(TesterLimits { frames, flows, sample_ring: 1 << 16 }).unwrap();
    (ns, ga, t)
}

/// A namespace with the generator's port `ga` (peer `gb`, where the
/// receiver goes) and an idle pair `gx`/`gy` to anchor the live generator
/// on; the calling thread enters it.
fn veth_lab(name: &str) -> Netns {
    let ns = Netns::unique(name).expect("namespace");
    for c in [
        &["link", "add", "ga", "type", "veth", "peer", "name", "gb"][..],
        &["link", "add", "gx", "type", "veth", "peer", "name", "gy"],
        &["link", "set", "gx", "up"],
        &["link", "set", "gy", "up"],
        &["link", "set", "ga", "up"],
        &["link", "set", "gb", "up"],
    ] {
        ns.ip(c).unwrap();
    }
    ns.enter_thread().unwrap();
    ns
}

/// Waits (up to 5 s) until the receiver counted `n` first arrivals.
fn wait_received(t: &Tester, n: u64) -> xdp::types::TrecvCounts {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let c = t.counts().unwrap();
        if c.received >= n || std::time::Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits (up to 5 s) until the receiver's counters show `n` frames in
/// all (first arrivals, duplicates and foreign).
fn wait_counted(t: &Tester, n: u64) -> xdp::types::TrecvCounts {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let c = t.counts().unwrap();
        if c.received + c.dup + c.foreign >= n || std::time::Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The userspace stamper builds, byte for byte, the frames `xdp_tgen`
/// builds (`BPF_PROG_TEST_RUN`, no live frames needed), for each layout
/// (IPv4, IPv6, 4in6) and in RTP mode (IPv4, IPv6), over several flows
/// and sequence numbers; the timestamp is the program's, read back.
#[test]
fn the_stamper_builds_the_generators_frames_byte_for_byte() {
    as_root(|| {
        let b4 = |i: u8| [0x20, 0x01, 0x0d, 0xb8, 0, 0x46, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10 + i];
        let rtp_room = RTP_HEADER_LEN + 160;
        let cases: Vec<(&str, bool, Vec<Vec<u8>>)> = vec![
            (
                "IPv4",
                false,
                (0..3u8)
                    .map(|i| frame4(Ipv4Addr::new(192, 0, 2, 10 + i), 4000 + u16::from(i), 53, STAMP_LEN + 4))
                    .collect(),
            ),
            ("IPv6", false, (0..3u16).map(|i| frame6(0x10 + i, 5000 + i, STAMP_LEN)).collect()),
            (
                "4in6",
                false,
                (0..3u8)
                    .map(|i| frame4in6(b4(i), Ipv4Addr::new(192, 0, 2, 130 + i), 4100 + u16::from(i), STAMP_LEN))
                    .collect(),
            ),
            (
                "IPv4 RTP",
                true,
                (0..3u8)
                    .map(|i| frame4(Ipv4Addr::new(192, 0, 2, 20 + i), 30000 + u16::from(i), 20000, rtp_room))
                    .collect(),
            ),
            ("IPv6 RTP", true, (0..3u16).map(|i| frame6(0x20 + i, 30000 + i, rtp_room)).collect()),
        ];
        let lo = xdp::sys::if_index("lo").unwrap();
        for (what, rtp, frames) in cases {
            let flows: Vec<_> = frames.iter().map(|f| flow_from_frame(f, rtp).unwrap()).collect();
            let (udp_off, layout) = (flows[0].1, flows[0].2);
            let flows: Vec<TgenFlow> = flows.iter().map(|f| f.0).collect();
            let cfg = TgenConfig {
                nflows: 3,
                magic: TESTER_MAGIC_HI | 21,
                udp_off,
                v6: layout.code(),
                rtp: u8::from(rtp),
                ifindex: lo,
            };
            let mut t = Tester::load(TesterLimits { frames: 64, flows: 3, sample_ring: 4096 }).unwrap();
            t.set_flows(&flows).unwrap();
            t.set_generator(cfg).unwrap();
            let st = Stamper::new(&cfg, &flows, frames[0].len()).unwrap();
            let s = usize::from(udp_off) + 8 + if rtp { RTP_HEADER_LEN } else { 0 };
            for seq in 0..7u32 {
                let (act, want) = t.build_frame(&frames[0], lo).unwrap();
                assert_eq!(act, action::TX, "{what}");
                let ts = u64::from_be_bytes(want[s..s + 8].try_into().unwrap());
                let mut got = frames[0].clone();
                assert!(st.stamp(&mut got, seq, ts));
                assert_eq!(got, want, "{what}: frame {seq}");
            }
        }
    });
}

/// A test of the live-frames generator and its AF_XDP twin, both running `body`.
macro_rules! twins {
    ($live:ident, $afxdp:ident, $body:ident) => {
        #[test]
        fn $live() {
            run(stringify!($live), Kind::Live, $body);
        }

        #[test]
        fn $afxdp() {
            run(stringify!($afxdp), Kind::AfXdp, $body);
        }
    };
}

twins!(generator_and_receiver_through_a_veth_pair, generator_and_receiver_through_a_veth_pair_afxdp, body);

/// Frames of four IPv4 flows through a veth pair: built in order with
/// their stamps and checksums; every frame counted once, none late, the
/// latency samples and trend, each flow's source learned; another
/// trial's frames and frames after the receiver closed are foreign, a
/// repeat of the same sequence numbers duplicates.
fn body(kind: Kind) {
    const N: u64 = 20_000;
    let (ns, ga, mut t) = lab_tester("xdp-tester", N, 4);
    let srcs: Vec<(Ipv4Addr, u16)> = (0..4).map(|i| (Ipv4Addr::new(192, 0, 2, 10 + i), 40000 + u16::from(i))).collect();
    let frames: Vec<Vec<u8>> = srcs.iter().map(|&(a, p)| frame4(a, p, 53, STAMP_LEN + 4)).collect();
    let flows: Vec<_> = frames.iter().map(|f| flow_from_frame(f, false).unwrap()).collect();
    assert!(flows.iter().all(|f| f.1 == 34 && f.2 == Layout::V4));
    let flows: Vec<TgenFlow> = flows.iter().map(|f| f.0).collect();
    t.set_flows(&flows).unwrap();
    let magic = TESTER_MAGIC_HI | 7;
    let gen = TgenConfig { nflows: 4, magic, udp_off: 34, v6: 0, rtp: 0, ifindex: ga };
    let mut g = Gen::start(kind, &mut t, gen, &frames[0], &flows);

    // The frames the generator builds: flows in order, stamp, checksum.
    for k in 0..6u32 {
        let f = g.build(&t, gen, &frames[0], k);
        let flow = (k % 4) as usize;
        assert_eq!(f[..42], {
            let mut w = frames[flow][..42].to_vec();
            w[40..42].copy_from_slice(&f[40..42]); // the checksum, verified below
            w
        });
        assert!(udp_checksum_ok4(&f), "UDP checksum of frame {k}");
        assert_stamp(&f[42..60], k, flow as u32, magic);
    }
    if kind == Kind::Live {
        assert_eq!(g.generated(&t), 6);
    }
    g.restart(&mut t, gen);

    assert_eq!(t.attach_receiver("gb", Mode::Native).unwrap(), Mode::Native);
    let rx = TrecvConfig {
        budget_ns: 1_000_000_000,
        magic,
        total: N as u32,
        nflows: 4,
        sample_shift: 4,
        rx_v6: 0,
        learn: 1,
        rtp: 0,
    };
    t.set_receiver(rx).unwrap();
    for _ in 0..4 {
        g.send(&t, (N / 4) as u32);
    }
    assert_eq!(g.generated(&t), N);
    let c = wait_received(&t, N);
    assert_eq!((c.received, c.dup, c.late, c.foreign), (N, 0, 0, 0), "{c:?}");
    assert_eq!(c.sampled, N / 16);
    let trend = t.trend().unwrap();
    assert_eq!(trend.iter().map(|x| x.1).sum::<u64>(), N);
    assert!(trend.iter().all(|x| x.1 == N / 10), "{trend:?}");
    let mut samples = Vec::new();
    t.drain_samples(|s| samples.push(s)).unwrap();
    assert_eq!(samples.len() as u64, N / 16);
    assert!(samples.iter().all(|s| s.seq % 16 == 0 && u64::from(s.lat_ns) < rx.budget_ns));
    for (i, &(a, p)) in srcs.iter().enumerate() {
        let l = t.learned(i as u32).unwrap().expect("learned");
        assert_eq!((l.seq1, l.v6, u16::from_be(l.port_be)), (i as u32 + 1, 0, p));
        assert_eq!(l.addr[..4], a.octets());
    }
    // Another trial's frames, then frames after the receiver closed: foreign.
    g.restart(&mut t, TgenConfig { magic: TESTER_MAGIC_HI | 8, ..gen });
    g.send(&t, 10);
    g.restart(&mut t, gen);
    t.set_receiver(TrecvConfig { total: 0, ..rx }).unwrap();
    g.send(&t, 10);
    let c2 = wait_counted(&t, N + 20);
    assert_eq!((c2.received, c2.foreign), (N, 20), "{c2:?}");
    // Frames again from sequence 0 (same trial, receiver reopened): duplicates.
    t.set_receiver(rx).unwrap();
    g.restart(&mut t, gen);
    g.send(&t, 100);
    assert_eq!(wait_counted(&t, N + 120).dup, 100);
    t.detach_receiver().unwrap();
    drop(g);
    drop(t);
    drop(ns);
}

twins!(rtp_frames_and_the_seen_bitmap, rtp_frames_and_the_seen_bitmap_afxdp, rtp_body);

/// RTP frames (`bench trgw --tester xdp`): every frame carries a valid
/// RTP header for its flow (V=2, PT 0, the flow's SSRC, the flow's own
/// sequence number and a timestamp 160 samples apart), the stamp after
/// it, a valid UDP checksum; the receiver finds the stamp after the RTP
/// header and its bitmap tells which frames arrived.
fn rtp_body(kind: Kind) {
    const FLOWS: u32 = 3;
    const N: u64 = 3 * 700; // RTP sequence numbers stay below 2^16 here; wrap is covered in bench
    let (ns, ga, mut t) = lab_tester("xdp-tester-rtp", N, FLOWS);
    let frames: Vec<Vec<u8>> = (0..FLOWS as u8)
        .map(|i| frame4(Ipv4Addr::new(192, 0, 2, 20 + i), 30000 + u16::from(i), 20000, RTP_HEADER_LEN + 160))
        .collect();
    let flows: Vec<_> = frames.iter().map(|f| flow_from_frame(f, true).unwrap().0).collect();
    assert!(flow_from_frame(&frame4(Ipv4Addr::LOCALHOST, 1, 2, STAMP_LEN), true).is_err(), "no room for RTP");
    t.set_flows(&flows).unwrap();
    let magic = TESTER_MAGIC_HI | 9;
    let gen = TgenConfig { nflows: FLOWS, magic, udp_off: 34, v6: 0, rtp: 1, ifindex: ga };
    let mut g = Gen::start(kind, &mut t, gen, &frames[0], &flows);
    for k in 0..7u32 {
        let f = g.build(&t, gen, &frames[0], k);
        let (flow, n) = (k % FLOWS, k / FLOWS);
        assert_eq!(f[26..30], frames[flow as usize][26..30], "the flow's source address");
        assert!(udp_checksum_ok4(&f), "UDP checksum of frame {k}");
        let rtp = &f[42..54];
        assert_eq!(rtp[0..2], [0x80, 0x00], "V=2, PT 0");
        assert_eq!(u16::from_be_bytes([rtp[2], rtp[3]]), n as u16, "RTP sequence number");
        assert_eq!(u32::from_be_bytes(rtp[4..8].try_into().unwrap()), n * 160, "RTP timestamp");
        assert_eq!(u32::from_be_bytes(rtp[8..12].try_into().unwrap()), RTP_SSRC_BASE + flow, "SSRC");
        assert_stamp(&f[54..54 + STAMP_LEN], k, flow, magic);
        assert!(f[54 + STAMP_LEN..].iter().all(|&b| b == 0), "the rest of the payload is zero");
    }
    let rx = TrecvConfig { rtp: 1, ..receiver(magic, N) };
    g.restart(&mut t, gen);
    t.attach_receiver("gb", Mode::Native).unwrap();
    t.set_receiver(rx).unwrap();
    // Everything but the last 5 frames.
    g.send(&t, (N - 5) as u32);
    let c = wait_received(&t, N - 5);
    assert_eq!((c.received, c.dup, c.foreign), (N - 5, 0, 0), "{c:?}");
    let seen = t.seen().unwrap();
    assert_eq!(seen.len() as u64, N.div_ceil(64));
    let ones: u64 = seen.iter().map(|w| u64::from(w.count_ones())).sum();
    assert_eq!(ones, N - 5);
    for seq in N - 5..N {
        assert_eq!(seen[(seq / 64) as usize] >> (seq % 64) & 1, 0, "frame {seq} was not sent");
    }
    t.detach_receiver().unwrap();
    drop(g);
    drop(t);
    drop(ns);
}

/// `frame4`'s IPv4 packet in an outer IPv6 header from `b4` to the AFTR
/// (RFC 2473, next header 4): a softwire frame as a B4 sends it.
fn frame4in6(b4: [u8; 16], src: Ipv4Addr, sport: u16, payload: usize) -> Vec<u8> {
    let inner = frame4(src, sport, 53, payload);
    let plen = inner.len() - 14;
    let mut f = inner[..14].to_vec();
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let mut ip6 = [0u8; 40];
    ip6[0] = 0x60;
    ip6[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
    ip6[6] = 4;
    ip6[7] = 64;
    ip6[8..24].copy_from_slice(&b4);
    ip6[24..40].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&ip6);
    f.extend_from_slice(&inner[14..]);
    f
}

twins!(four_in_six_frames, four_in_six_frames_afxdp, four_in_six_body);

/// 4in6 frames (`bench xlat --tester xdp` with the softwire DUTs): the
/// generator writes each flow's outer addresses and inner headers, stamps
/// the inner UDP payload and fixes the inner UDP checksum, leaving the
/// MACs and the outer version/class/flow label of the template; the
/// receiver judges a 4in6 frame by its inner packet, counts it as IPv6
/// (a receiver counting IPv4 takes it for foreign) and learns the inner
/// IPv4 source.
fn four_in_six_body(kind: Kind) {
    const FLOWS: u32 = 3;
    const N: u64 = 6_000;
    let (ns, ga, mut t) = lab_tester("xdp-tester-4in6", N, FLOWS);
    let b4 = |i: u8| [0x20, 0x01, 0x0d, 0xb8, 0, 0x46, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10 + i];
    let srcs: Vec<(Ipv4Addr, u16)> =
        (0..FLOWS as u8).map(|i| (Ipv4Addr::new(192, 0, 2, 130 + i), 4100 + u16::from(i))).collect();
    // An 84-byte-label softwire frame: 100 bytes on veth, 18 bytes of payload.
    let frames: Vec<Vec<u8>> =
        srcs.iter().enumerate().map(|(i, &(a, p))| frame4in6(b4(i as u8), a, p, STAMP_LEN)).collect();
    assert_eq!(frames[0].len(), 100);
    let flows: Vec<_> = frames.iter().map(|f| flow_from_frame(f, false).unwrap()).collect();
    assert!(flows.iter().all(|f| f.1 == 74 && f.2 == Layout::FourInSix));
    let flows: Vec<TgenFlow> = flows.iter().map(|f| f.0).collect();
    t.set_flows(&flows).unwrap();
    let magic = TESTER_MAGIC_HI | 11;
    let gen = TgenConfig { nflows: FLOWS, magic, udp_off: 74, v6: Layout::FourInSix.code(), rtp: 0, ifindex: ga };
    let mut g = Gen::start(kind, &mut t, gen, &frames[0], &flows);
    for k in 0..5u32 {
        let f = g.build(&t, gen, &frames[0], k);
        let flow = (k % FLOWS) as usize;
        assert_eq!(f.len(), 100);
        let want = &frames[flow];
        assert_eq!(f[..80], want[..80], "frame {k}: MACs, outer header and inner IPv4 header of flow {flow}");
        assert_eq!(f[22..38], b4(flow as u8), "outer source: the flow's B4");
        assert_eq!(u16::from_be_bytes([f[18], f[19]]), 46, "outer payload length");
        assert_eq!(f[20], 4, "next header IPv4");
        assert!(csum_ok(&f[54..74]), "inner IPv4 header checksum");
        assert_eq!(u16::from_be_bytes([f[56], f[57]]), 46, "inner total length");
        assert_eq!(f[74..78], want[74..78], "UDP ports");
        assert_eq!(u16::from_be_bytes([f[78], f[79]]), 26, "UDP length");
        assert!(udp_checksum_ok4(&f[40..]), "inner UDP checksum of frame {k}");
        assert_stamp(&f[82..100], k, flow as u32, magic);
    }
    let rx = TrecvConfig { nflows: FLOWS, sample_shift: 2, rx_v6: 1, learn: 1, ..receiver(magic, N) };
    g.restart(&mut t, gen);
    t.attach_receiver("gb", Mode::Native).unwrap();
    t.set_receiver(rx).unwrap();
    g.send(&t, N as u32);
    let c = wait_received(&t, N);
    assert_eq!((c.received, c.dup, c.late, c.foreign), (N, 0, 0, 0), "{c:?}");
    assert_eq!(c.sampled, N / 4);
    for (i, &(a, p)) in srcs.iter().enumerate() {
        let l = t.learned(i as u32).unwrap().expect("learned");
        assert_eq!((l.seq1, l.v6, u16::from_be(l.port_be)), (i as u32 + 1, 0, p), "the inner source");
        assert_eq!(l.addr[..4], a.octets());
    }
    // A receiver counting IPv4 frames: 4in6 is not one of them.
    t.set_receiver(TrecvConfig { rx_v6: 0, ..rx }).unwrap();
    g.restart(&mut t, gen);
    g.send(&t, 30);
    let c2 = wait_counted(&t, N + 30);
    assert_eq!((c2.received, c2.dup, c2.foreign), (N, 0, 30), "{c2:?}");
    t.detach_receiver().unwrap();
    drop(g);
    drop(t);
    drop(ns);
}
