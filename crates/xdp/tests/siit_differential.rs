//! The SIIT differential test (issue #12, item 3): packets run through the
//! XDP program with BPF_PROG_TEST_RUN and through the Rust core
//! (`xlat::siit::Translator`). Every result is either XDP_PASS with the
//! frame unchanged, or byte-identical (L3 and up; the Ethernet header is
//! checked against the FIB's MACs) to the core's output. Never a different
//! packet. The corpus: the RFC 7915 / RFC 6052 / RFC 7757 vectors of
//! `crates/xlat/tests` (built with the same builders and network), and
//! property-generated packets: valid ones (which must take the fast path
//! unless a named rule sends them to the slow path), mutated ones and
//! arbitrary bytes (which must never come out different).
//!
//! Runs as root in a uniquely named network namespace (removed on exit and
//! on failure); fails, never skips, when BPF is not available.

#[path = "../../xlat/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use proptest::prelude::*;
use support::{frame, hex, ident_of, run, Fwd, Net, Outcome, MAC_GW6, MAC_X6};
use xdp::types::progs;
use xdp::types::Nexthop;
use xdp::FibLookup;
use xlat::siit::{Config, EamHairpinMode, Translator};
use xlat::{Out, PacketKind, Verdict};

const H4: &str = "192.0.2.1";
const H4_AS6: &str = "2001:db8:1c0:2:1::";
const H6: &str = "2001:db8:6::5";
const H6_AS4: &str = "198.51.100.5";

/// What the core emits for `l3` as its single forwarded packet, with the
/// IPv4 Identification generator seeded with `ident`.
fn core_forward(t: &Translator, l3: &[u8], ident: u16) -> Result<Vec<u8>, String> {
    let mut out = Out::with_ident_seed(ident);
    match t.translate(l3, &mut out) {
        Verdict::Emit => {
            let pkts: Vec<_> = out.iter().map(|(k, p)| (k, p.to_vec())).collect();
            match pkts.as_slice() {
                [(PacketKind::Forward, p)] => Ok(p.clone()),
                other => Err(format!(
                    "core emitted {} packets: {:?}",
                    other.len(),
                    other.iter().map(|x| x.0).collect::<Vec<_>>()
                )),
            }
        }
        Verdict::Drop(r) => Err(format!("core dropped it ({r})")),
    }
}

/// The differential check of one L3 packet; returns what the fast path did.
fn diff(net: &Net, t: &Translator, l3: &[u8]) -> Outcome {
    let o = run(net, progs::SIIT, &frame(l3), net.ingress(l3));
    if let Outcome::Forwarded(got) = &o {
        let want = core_forward(t, l3, ident_of(got))
            .unwrap_or_else(|e| panic!("fast path forwarded what the core does not: {e}\ninput {}", hex(l3)));
        assert_eq!(hex(got), hex(&want), "fast path and core differ for input {}", hex(l3));
        // The IP layer always verifies; the transport checksum only when
        // the input's did (translation keeps an error, as it must).
        check_ip(got);
    }
    o
}

fn fast(net: &Net, t: &Translator, name: &str, l3: &[u8]) {
    match diff(net, t, l3) {
        Outcome::Forwarded(p) => check(&p),
        Outcome::Passed => panic!("{name}: expected the fast path to translate it"),
    }
}

fn pass(net: &Net, t: &Translator, name: &str, l3: &[u8]) {
    assert_eq!(diff(net, t, l3), Outcome::Passed, "{name}: expected a pass to the slow path");
}

fn setup(net: &mut Net, cfg: Config) -> Translator {
    net.fp.set_siit(&cfg).unwrap_or_else(|e| panic!("{e}"));
    xlat_with(cfg)
}

fn v4_to_h6(proto: u8) -> V4 {
    V4 { tos: 0xb8, ..V4::new(proto, H4, H6_AS4) }
}
fn v6_to_h4(next: u8) -> V6 {
    V6 { tc: 0xb8, flow: 0xabcde, ..V6::new(next, H6, H4_AS6) }
}

/// The vectors of crates/xlat/tests/rfc7915.rs (same names), each with
/// what the fast path must do with it.
#[test]
fn rfc7915_vectors() {
    lab::need_root!();
    let mut net = Net::new("xdp-siit-rfc");
    let t = setup(&mut net, config());
    let n = &net;

    // §4.1 / §5.1 header translation: the common case, fast.
    fast(n, &t, "rfc7915_4_1_udp_header_fields", &v4_to_h6(17).udp(1234, 53, b"hello translator"));
    fast(n, &t, "rfc7915_4_1_tcp_header_fields", &v4_to_h6(6).tcp(40000, 80, 0x02, b""));
    fast(n, &t, "rfc7915_5_1_udp_header_fields", &v6_to_h4(17).udp(53, 1234, b"answer"));
    fast(n, &t, "rfc7915_5_1_tcp_header_fields", &v6_to_h4(6).tcp(80, 40000, 0x12, b"data"));
    fast(n, &t, "rfc7915_5_1_df_clear_at_1260", &v6_to_h4(17).udp(1, 2, &vec![7u8; 1260 - 28]));
    fast(n, &t, "rfc7915_5_1_df_set_above_1260", &v6_to_h4(17).udp(1, 2, &vec![7u8; 1261 - 28]));
    fast(n, &t, "rfc7915_4_1_df_clear_small_packet", &V4 { df: false, ..v4_to_h6(17) }.udp(1, 2, &[1; 100]));
    // §4.2 / §5.2 echo.
    fast(n, &t, "rfc7915_4_2_echo_request", &v4_to_h6(1).icmp(8, 0, [0x12, 0x34, 0, 1], b"ping"));
    fast(n, &t, "rfc7915_4_2_echo_reply", &v4_to_h6(1).icmp(0, 0, [0x12, 0x34, 0, 2], b"pong"));
    fast(n, &t, "rfc7915_4_2_echo_nonzero_code", &v4_to_h6(1).icmp(8, 5, [0x12, 0x34, 0, 3], b"odd code"));
    let v = v6_to_h4(58);
    fast(n, &t, "rfc7915_5_2_echo_request", &v.icmp(128, 0, [0xab, 0xcd, 0, 1], b"ping6"));
    fast(n, &t, "rfc7915_5_2_echo_reply", &v.icmp(129, 0, [0xab, 0xcd, 0, 2], b"pong6"));
    // Ethernet padding after a short IPv4 packet: trimmed, then translated.
    let mut padded = v4_to_h6(6).tcp(1, 2, 0x10, b"");
    let mut f = frame(&padded);
    f.resize(60, 0);
    let o = run(n, progs::SIIT, &f, n.if4);
    let Outcome::Forwarded(got) = o else { panic!("padded TCP ACK not translated") };
    assert_eq!(hex(&got), hex(&core_forward(&t, &padded, 0).unwrap()));
    padded.clear();

    // Everything that needs the full algorithm passes, untouched.
    let opts = [1, 131, 7, 4, 192, 0, 2, 99];
    pass(n, &t, "rfc7915_4_1_unexpired_source_route_option", &v4_to_h6(17).build_opts(&opts, &udp_raw(1, 2, b"")));
    pass(n, &t, "rfc7915_4_1_other_ipv4_options_ignored", &v4_to_h6(17).build_opts(&[1, 1, 1, 0], &udp_raw(1, 2, b"")));
    pass(n, &t, "rfc7915_4_1_ttl_exceeded", &V4 { ttl: 1, ..v4_to_h6(17) }.udp(1, 2, b"x"));
    pass(n, &t, "rfc7915_5_1_hop_limit_exceeded", &V6 { hop: 1, ..v6_to_h4(17) }.udp(1, 2, b"x"));
    pass(n, &t, "rfc7915_4_1_other_protocols_pass_through", &v4_to_h6(47).build(&[0, 0, 8, 0, 1, 2, 3, 4]));
    pass(
        n,
        &t,
        "rfc7915_4_1_df_clear_large_packet_fragmented",
        &V4 { df: false, ..v4_to_h6(17) }.udp(1, 2, &vec![9u8; 1400]),
    );
    pass(n, &t, "rfc7915_4_1_df_set_too_big", &v4_to_h6(17).udp(1, 2, &vec![9u8; 1480]));
    pass(n, &t, "rfc7915_4_1_fragment", &V4 { mf: true, ..v4_to_h6(17) }.udp(1, 2, &[5; 64]));
    pass(n, &t, "rfc7915_5_1_too_big_for_ipv4_link", &v6_to_h4(17).udp(1, 2, &vec![3u8; 1480]));
    let mut zero = v4_to_h6(17).udp(1, 2, b"zero");
    zero[26] = 0;
    zero[27] = 0;
    pass(n, &t, "rfc7915_4_5_zero_udp_checksum_computed", &zero);
    let v = v6_to_h4(0);
    let exts = [17, 0, 1, 4, 0, 0, 0, 0];
    pass(n, &t, "rfc7915_5_1_extension_headers_skipped", &v.build(&exts, &v.udp_payload(53, 1234, b"ext")));
    let v = v6_to_h4(44);
    let fh = [17, 0, 0, 0, 0, 0, 0, 7];
    pass(n, &t, "rfc6946_atomic_fragment", &v.build(&fh, &v.udp_payload(1, 2, b"atomic")));
    let quoted = V4::new(17, H6_AS4, H4).udp(1, 2, b"quoted");
    pass(n, &t, "rfc7915_4_3_port_unreachable", &V4::new(1, H4, H6_AS4).icmp(3, 3, [0; 4], &quoted));
    pass(n, &t, "rfc7915_5_2_neighbor_discovery", &V6::new(58, H6, H4_AS6).icmp(135, 0, [0; 4], &[0; 16]));
    pass(n, &t, "rfc7915_4_2_single_hop_icmpv4", &v4_to_h6(1).icmp(10, 0, [0; 4], b""));
    let mut bad = v4_to_h6(17).udp(1, 2, b"sum");
    bad[10] ^= 0xff;
    pass(n, &t, "bad_ipv4_header_checksum", &bad);
    pass(n, &t, "forbidden_source", &V4::new(17, "127.0.0.1", H6_AS4).udp(1, 2, b""));
    // RFC 7757 §4.2: an IPv6 node behind us reaching another through pool6.
    let hp = V6::new(17, H6, "2001:db8:1c6:3364:7::").udp(1, 2, b"hairpin");
    assert_eq!(
        Translator::new(config()).unwrap().mapper().v6_to_v4(&a6("2001:db8:1c6:3364:7::")),
        Some(a4("198.51.100.7"))
    );
    pass(n, &t, "rfc7757_4_2_hairpinning", &hp);

    // The knobs. RFC 7757 §4.2.1 simple hairpinning: IPv4 sources through
    // pool6 only (an EAMT source too), and nothing is turned around.
    let t = setup(&mut net, Config { eam_hairpin_mode: EamHairpinMode::Simple, ..config() });
    let o = diff(&net, &t, &V4::new(17, "198.51.100.5", "198.51.100.7").udp(1, 2, b"simple"));
    let Outcome::Forwarded(p) = o else { panic!("simple hairpin mode: not translated") };
    assert_eq!(p[8..24], a6("2001:db8:1c6:3364:5::").octets(), "source through pool6, not the EAMT");
    fast(&net, &t, "rfc7757_4_2_1_simple_mode_v6_side", &hp);
    let t = setup(&mut net, Config { eam_hairpin_mode: EamHairpinMode::Off, ..config() });
    fast(&net, &t, "rfc7757_hairpin_off", &hp);
    let t = setup(&mut net, Config { reset_traffic_class: true, ..config() });
    fast(&net, &t, "rfc7915_4_1_reset_traffic_class", &v4_to_h6(17).udp(1, 2, b"x"));
    let t = setup(&mut net, Config { reset_tos: true, new_tos: 0x28, ..config() });
    fast(&net, &t, "rfc7915_5_1_reset_tos_uses_new_tos", &v6_to_h4(17).udp(53, 1234, b"x"));
    let t = setup(&mut net, Config { lowest_ipv6_mtu: 1300, ..config() });
    pass(&net, &t, "rfc7915_4_1_lowest_ipv6_mtu", &V4 { df: false, ..v4_to_h6(17) }.udp(1, 2, &vec![1u8; 1300]));
    fast(&net, &t, "rfc7915_4_1_lowest_ipv6_mtu_fits", &V4 { df: false, ..v4_to_h6(17) }.udp(1, 2, &vec![1u8; 1200]));

    // The counters moved by reason.
    let c = net.fp.counter_map().unwrap();
    assert!(c["siit-4to6"].packets >= 8, "{c:?}");
    assert!(c["siit-6to4"].packets >= 6, "{c:?}");
    for r in ["ipv4-options", "ttl", "protocol", "too-big", "fragment", "udp-zero-checksum", "ipv6-extension", "icmp"] {
        assert!(c[r].packets > 0, "no pass counted as {r}: {c:?}");
    }
}

/// RFC 6052 §2.2, every prefix length (the u octet skipped), and the
/// Well-Known Prefix's restriction to global addresses (§3.1).
#[test]
fn rfc6052_all_prefix_lengths() {
    lab::need_root!();
    let mut net = Net::new("xdp-siit-6052");
    for (prefix, embedded) in xlat::testvec::RFC6052_2_4 {
        let cfg = Config {
            pool6: Some(prefix.parse().unwrap()),
            eamt: vec![("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap())],
            ..Config::default()
        };
        let t = setup(&mut net, cfg);
        let out = diff(&net, &t, &V4::new(17, &xlat::testvec::RFC6052_2_4_IPV4.to_string(), H6_AS4).udp(7, 8, b"6052"));
        let Outcome::Forwarded(p) = out else { panic!("{prefix}: not translated") };
        assert_eq!(p[8..24], a6(embedded).octets(), "{prefix}: RFC 6052 §2.4 source");
        fast(&net, &t, prefix, &V6::new(17, H6, embedded).udp(8, 7, b"back"));
    }
    let t = setup(&mut net, Config { pool6: Some("64:ff9b::/96".parse().unwrap()), ..config_eam_only() });
    fast(&net, &t, "wkp_global", &V6::new(17, H6, "64:ff9b::198.41.0.4").udp(1, 2, b"g"));
    pass(&net, &t, "wkp_refuses_documentation_space", &V6::new(17, H6, "64:ff9b::192.0.2.33").udp(1, 2, b"d"));
    pass(&net, &t, "wkp_refuses_private", &V4::new(17, "10.1.2.3", H6_AS4).udp(1, 2, b"p"));
}

fn config_eam_only() -> Config {
    Config {
        eamt: vec![("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap())],
        ..Config::default()
    }
}

/// RFC 7757: longest-prefix match on each side, suffix placement
/// (Appendix B), overlapping entries.
#[test]
fn rfc7757_eamt_lookups() {
    lab::need_root!();
    let mut net = Net::new("xdp-siit-eamt");
    let cfg = Config {
        pool6: Some("64:ff9b:1::/48".parse().unwrap()),
        eamt: vec![
            ("2001:db8:dddd::/64".parse().unwrap(), "192.0.2.128/26".parse().unwrap()),
            ("2001:db8:ff00::/40".parse().unwrap(), "0.0.0.0/0".parse().unwrap()),
            ("2001:db8::abcd/128".parse().unwrap(), "198.51.100.64/32".parse().unwrap()),
            ("2001:db8:6::/120".parse().unwrap(), "198.51.100.0/24".parse().unwrap()),
        ],
        eam_hairpin_mode: EamHairpinMode::Off,
        ..Config::default()
    };
    let t = setup(&mut net, cfg);
    // Appendix B: 192.0.2.152 -> 2001:db8:dddd:0:6000::
    let o = diff(&net, &t, &V4::new(17, "203.0.113.5", "192.0.2.152").udp(1, 2, b"b"));
    let Outcome::Forwarded(p) = o else { panic!("appendix B not translated") };
    assert_eq!(p[24..40], a6("2001:db8:dddd:0:6000::").octets());
    let back = t.mapper().v4_to_v6(a4("203.0.113.5")).unwrap();
    assert_eq!(back, a6("2001:db8:ffcb:71:500::"), "RFC 7757: the IPv4 suffix right after the /40");
    fast(&net, &t, "appendix_b_back", &V6::new(17, "2001:db8:dddd:0:6000::", &back.to_string()).udp(2, 1, b"r"));
    fast(&net, &t, "longest_match_v4", &V4::new(6, "203.0.113.5", "198.51.100.64").tcp(1, 2, 0x10, b""));
    fast(&net, &t, "longest_match_v6", &V6::new(6, "2001:db8::abcd", "2001:db8:6::9").tcp(1, 2, 0x10, b""));
    fast(&net, &t, "catch_all_with_pool6", &V4::new(1, "203.0.113.5", "198.51.100.9").icmp(8, 0, [0, 1, 0, 1], b"e"));
}

// ---- property-generated packets ---------------------------------------------

/// A valid, translatable packet of the test network, and whether the fast
/// path must take it (`false`: a rule it leaves to the slow path).
#[derive(Debug, Clone)]
struct Gen {
    l3: Vec<u8>,
    fast: bool,
}

fn gen_packet() -> impl Strategy<Value = Gen> {
    (
        any::<bool>(), // IPv6 source?
        0u8..3,        // 0 UDP, 1 TCP, 2 ICMP echo
        any::<u8>(),   // TOS / Traffic Class
        1u8..=255,     // TTL
        any::<bool>(), // DF
        prop::collection::vec(any::<u8>(), 0..1500),
        (any::<u16>(), any::<u16>(), any::<u8>(), any::<u8>(), 0u32..0x100000),
        (1u8..=254, 0u8..=255), // host octets
    )
        .prop_map(|(six, kind, tos, ttl, df, mut data, (sp, dp, flags, code, flow), (h4, h6))| {
            let h4s = format!("192.0.2.{h4}");
            let h6s = format!("2001:db8:6::{h6:x}");
            if !six {
                let v = V4 { tos, ttl, df, ..V4::new([17, 6, 1][kind as usize], &h4s, &format!("198.51.100.{h6}")) };
                let l3 = match kind {
                    0 => v.udp(sp, dp, &data),
                    1 => v.tcp(sp, dp, flags, &data),
                    _ => v.icmp(if flags & 1 == 0 { 8 } else { 0 }, code, [sp as u8, 7, 0, 1], &data),
                };
                let v6len = l3.len() + 20;
                let fast = ttl > 1 && v6len <= 1500 && (df || v6len <= 1280);
                Gen { l3, fast }
            } else {
                let dst = Translator::new(config()).unwrap().mapper().v4_to_v6(a4(&h4s)).unwrap().to_string();
                data.truncate(1400);
                let v = V6 { tc: tos, flow, hop: ttl, ..V6::new([17, 6, 58][kind as usize], &h6s, &dst) };
                let l3 = match kind {
                    0 => v.udp(sp, dp, &data),
                    1 => v.tcp(sp, dp, flags, &data),
                    _ => v.icmp(if flags & 1 == 0 { 128 } else { 129 }, 0, [sp as u8, 9, 0, 1], &data),
                };
                let fast = ttl > 1 && l3.len() - 20 <= 1500;
                Gen { l3, fast }
            }
        })
}

/// Mutations of valid packets: a few bytes flipped, cut short, grown.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (gen_packet(), prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), 0u8..3, any::<u8>())
        .prop_map(|(g, flips, how, extra)| {
            let mut p = g.l3;
            for (i, x) in flips {
                let at = i.index(p.len().min(64));
                p[at] ^= x | 1;
            }
            match how {
                0 => p.truncate(p.len().saturating_sub(usize::from(extra) + 1)),
                1 => p.extend(std::iter::repeat_n(extra, usize::from(extra))),
                _ => {}
            }
            p
        })
}

/// `cases` valid packets: byte-identical to the core, and fast unless a
/// rule says pass.
fn valid_packets(net: &Net, t: &Translator, cases: u32) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases, ..ProptestConfig::default() });
    runner
        .run(&gen_packet(), |g| {
            let o = diff(net, t, &g.l3);
            if let Outcome::Forwarded(p) = &o {
                check(p);
            }
            prop_assert_eq!(matches!(o, Outcome::Forwarded(_)), g.fast, "fast path choice for {}", hex(&g.l3));
            Ok(())
        })
        .unwrap();
}

#[test]
fn generated_packets() {
    lab::need_root!();
    let mut net = Net::new("xdp-siit-prop");
    let t = setup(&mut net, config());
    valid_packets(&net, &t, 600);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 600, ..ProptestConfig::default() });
    // Mutated packets and arbitrary bytes (also behind Ethernet headers of
    // either EtherType): a pass, or the core's very output.
    runner
        .run(&mutated(), |p| {
            diff(&net, &t, &p);
            Ok(())
        })
        .unwrap();
    let any_frame = (any::<bool>(), prop::collection::vec(any::<u8>(), 0..200));
    runner
        .run(&any_frame, |(six, body)| {
            let mut f = frame(if six { &[0x60] } else { &[0x45] });
            f.truncate(14);
            f.extend_from_slice(&body);
            if let Outcome::Forwarded(got) = run(&net, progs::SIIT, &f, if six { net.if6 } else { net.if4 }) {
                let want = core_forward(&t, &f[14..], ident_of(&got)).expect("core translates it too");
                prop_assert_eq!(hex(&got), hex(&want));
            }
            Ok(())
        })
        .unwrap();
    // Frames shorter than an Ethernet header, and other EtherTypes.
    for f in [vec![], vec![0u8; 5], vec![0u8; 13], {
        let mut a = frame(&V4::new(17, H4, H6_AS4).udp(1, 2, b"arp?"));
        a[12] = 0x08;
        a[13] = 0x06;
        a
    }] {
        let r = net.fp.test_run(progs::SIIT, &f, net.if4, 1);
        match r {
            Ok(r) => {
                assert_eq!(r.action, xdp::action::PASS);
                assert_eq!(r.frame, f);
            }
            // The kernel refuses test frames shorter than an Ethernet header.
            Err(e) => assert!(f.len() < 14, "{e}"),
        }
    }
}

/// The FIB cache answers like the FIB: the same frames; a packet larger
/// than the cached lookup accepted is looked up again (MTU); a route
/// change reaches the fast path when the entry expires.
#[test]
fn fib_cache() {
    lab::need_root!();
    let mut net = Net::new("xdp-siit-fib");
    let t = setup(&mut net, config());
    // The entry lives 10 s from the first lookup: long enough for the
    // steps before the route change on a loaded machine (checked below,
    // with a second to spare: the program's clock is the coarse one, a
    // tick behind), then the test waits until it has expired.
    const LIFE_MS: u64 = 10_000;
    net.fp.set_fib_cache(LIFE_MS as u32).unwrap();
    net.ns.ip(&["link", "set", "x6", "mtu", "1400"]).unwrap();
    let small = v4_to_h6(17).udp(1, 2, b"small");
    let before = std::time::Instant::now();
    fast(&net, &t, "first lookup", &small);
    let after = std::time::Instant::now();
    fast(&net, &t, "cached", &small);
    // 1420 bytes of IPv6: fits the configured ipv6-mtu (1500), not x6's
    // MTU: the cached small lookup must not vouch for it.
    pass(&net, &t, "larger than the cached lookup allowed", &v4_to_h6(17).udp(1, 2, &vec![0u8; 1400 - 28 - 20 + 20]));
    fast(&net, &t, "6to4 cached too", &v6_to_h4(6).tcp(80, 40000, 0x10, b"x"));
    net.ns.ip(&["-6", "route", "del", "default"]).unwrap();
    let life = std::time::Duration::from_millis(LIFE_MS);
    let spare = std::time::Duration::from_secs(1);
    assert!(before.elapsed() + spare < life, "the steps above outlasted the cache entry: {:?}", before.elapsed());
    fast(&net, &t, "stale until the entry expires", &small);
    std::thread::sleep((life + std::time::Duration::from_millis(100)).saturating_sub(after.elapsed()));
    pass(&net, &t, "expired: the FIB has no route", &small);
    let c = net.fp.counter_map().unwrap();
    assert!(c["fib"].packets >= 1 && c["too-big"].packets >= 1, "{c:?}");
    // Generated packets through the cache: still the core's bytes.
    net.ns.ip(&["-6", "route", "add", "default", "via", "fd00:6::2", "dev", "x6"]).unwrap();
    net.ns.ip(&["link", "set", "x6", "mtu", "1500"]).unwrap();
    valid_packets(&net, &t, 200);
}

/// Mirrored routes and next hops (the daemon-owned forwarding table):
/// generated packets give the core's bytes with the next hop's MACs
/// (`run` checks them); a next hop's MTU is honoured; a destination no
/// mirrored route covers, or a cleared next hop, takes bpf_fib_lookup;
/// BPF_FIB_LOOKUP_DIRECT answers as the full lookup does here.
#[test]
fn mirrored_routes() {
    lab::need_root!();
    let mut net = Net::new("xdp-siit-routes");
    let t = setup(&mut net, config());
    support::set_forwarding(&mut net, &Fwd::Routes);
    valid_packets(&net, &t, 200);
    let small = v4_to_h6(17).udp(1, 2, b"small");
    fast(&net, &t, "through the mirrored default route", &small);
    // The kernel's route goes away; the mirrored one still serves.
    net.ns.ip(&["-6", "route", "del", "default"]).unwrap();
    fast(&net, &t, "the mirror answers, not the FIB", &small);
    // A smaller next-hop MTU: too big for the fast path.
    let nh6 = Nexthop { ifindex: net.if6, mtu: 1280, dmac: MAC_GW6, smac: MAC_X6, pad: [0; 2] };
    net.fp.nexthop_set(1, nh6).unwrap();
    let big = v4_to_h6(17).udp(1, 2, &vec![0u8; 1300]);
    pass(&net, &t, "above the next hop's MTU", &big);
    assert!(net.fp.counter_map().unwrap()["too-big"].packets >= 1);
    // A cleared next hop and a removed route both fall back to the FIB,
    // which has no IPv6 route now.
    net.fp.nexthop_clear(1).unwrap();
    pass(&net, &t, "next hop cleared, FIB has no route", &small);
    net.ns.ip(&["-6", "route", "add", "default", "via", "fd00:6::2", "dev", "x6"]).unwrap();
    fast(&net, &t, "next hop cleared: the FIB answers", &small);
    assert!(net.fp.route6_remove("::/0".parse().unwrap()).unwrap());
    assert!(!net.fp.route6_remove("::/0".parse().unwrap()).unwrap(), "already gone");
    fast(&net, &t, "no mirrored route: the FIB answers", &small);
    // Next hops only on interfaces the fast path may send on.
    let lo = xdp::sys::if_index("lo").unwrap();
    let bad = Nexthop { ifindex: lo, mtu: 1500, dmac: MAC_GW6, smac: MAC_X6, pad: [0; 2] };
    assert!(matches!(net.fp.nexthop_set(2, bad), Err(xdp::Error::Config(_))));
    assert!(matches!(net.fp.route4_insert("0.0.0.0/0".parse().unwrap(), 999), Err(xdp::Error::Config(_))));
    // BPF_FIB_LOOKUP_DIRECT: same frames in this namespace (no policy rules).
    support::set_forwarding(&mut net, &Fwd::Fib(FibLookup::Main, 0));
    valid_packets(&net, &t, 100);
}
