//! `bench transition`'s outputs: results.json, results.md (the paper's
//! Table 1 shape for session initiation, client-side and the paper's own
//! measure, throughput and delay tables, the bars) and four plots.

use anyhow::Result;
use std::fmt::Write as _;

use super::{MechResult, Report};
use crate::harness::latency::us;
use crate::report::{markdown_table, Align, LinePlot, Outputs, Series};

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn measured(r: &Report) -> impl Iterator<Item = &MechResult> {
    r.results.iter().filter(|m| m.skipped.is_none())
}

fn find<'a>(r: &'a Report, name: &str) -> Option<&'a MechResult> {
    measured(r).find(|m| m.mech == name)
}

/// A signed difference in ns as µs with one decimal and a sign; "" for
/// none.
fn signed_us(ns: Option<i64>) -> String {
    ns.map_or(String::new(), |v| format!("{:+.1}", v as f64 / 1e3))
}

/// A median of the row's baseline, µs; "" without a baseline.
fn base_us(m: &MechResult, pick: impl Fn(&super::Baseline) -> u64) -> String {
    m.baseline.as_ref().map_or(String::new(), |b| us(pick(b)))
}

/// The headers of [`table1_cells`], after the row's name.
const TABLE1_HEAD: [(&str, Align); 7] = [
    ("Device", Align::Left),
    ("Min. (ms)", Align::Right),
    ("Max. (ms)", Align::Right),
    ("Av. (ms)", Align::Right),
    ("median (µs)", Align::Right),
    ("native median (µs)", Align::Right),
    ("added over IPv4 (µs)", Align::Right),
];

/// The paper's Table 1 columns of one figure of row `m`: min, max and
/// average in ms, then the median, the interleaved native baseline's
/// median (`pick` from the baseline) and the added time, in µs.
fn table1_cells(
    m: &MechResult,
    l: &crate::harness::latency::Latency,
    pick: impl Fn(&super::Baseline) -> u64,
    added: Option<i64>,
) -> [String; 6] {
    [ms(l.min_ns), ms(l.max_ns), ms(l.mean_ns), us(l.p50_ns), base_us(m, pick), signed_us(added)]
}

/// `own`, and `/ ` the native baseline's count (`pick`) when there is one.
fn with_native(m: &MechResult, own: u64, pick: impl Fn(&super::Baseline) -> u64) -> String {
    format!("{own}{}", m.baseline.as_ref().map_or(String::new(), |b| format!(" / {}", pick(b))))
}

/// The bars, as (statement, verdict) lines; `None` verdict when
/// a needed row is missing.
pub fn bars(r: &Report) -> Vec<(String, Option<bool>)> {
    let mut v = Vec::new();
    let native = find(r, "ipv4");
    for m in measured(r).filter(|m| m.mech != "ipv4" && m.mech != "socat") {
        let added = m.session_added_ns;
        v.push((
            format!(
                "{}: session initiation adds {} µs (median) over native IPv4 measured interleaved with it (bar: ≤ 50 µs)",
                m.mech,
                added.map_or("?".into(), |a| format!("{:.1}", a as f64 / 1e3))
            ),
            added.map(|a| a <= 50_000),
        ));
    }
    if let Some(t) = find(r, "trt") {
        let socat = find(r, "socat");
        v.push((
            format!(
                "trt: TCP throughput {:.0} Mbit/s = {} × socat's (bar: ≥ 1.5×)",
                t.throughput_mbps,
                socat.map_or("?".into(), |s| format!("{:.2}", t.throughput_mbps / s.throughput_mbps.max(1e-9)))
            ),
            socat.map(|s| t.throughput_mbps >= 1.5 * s.throughput_mbps),
        ));
        v.push((
            format!(
                "trt: TCP throughput = {} % of native IPv4 (bar: ≥ 80 %)",
                native
                    .map_or("?".into(), |n| format!("{:.0}", 100.0 * t.throughput_mbps / n.throughput_mbps.max(1e-9)))
            ),
            native.map(|n| t.throughput_mbps >= 0.8 * n.throughput_mbps),
        ));
    }
    v
}

/// Markdown summary.
pub fn markdown(r: &Report) -> String {
    use Align::{Left as L, Right as R};
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# v6gate bench transition\n\nThe NAT-PT / TRT / DSTM comparison paper's measurements, one testbed per \
         mechanism (client — gateway — IPv4-only server in network namespaces): {} s of bulk TCP (median of {} \
         transfers), {} new TCP sessions (connect, one byte each way), {} UDP echoes. The sessions and echoes of \
         each row ran in {} blocks, each paired with a block of as many on a native-IPv4 testbed that stayed up \
         for the whole run (ABBA order): \"native\" is the median of the row's own interleaved baseline, \"added\" \
         the row's median minus it; \"− ipv4 row\" is the older figure, the difference from the `ipv4` row measured \
         at another time. {} online CPUs, kernel {}, load average at the \
         start {} (the machine may be shared: timings are noisy). Busy-poll of the v6gate TUN engines and the TRT relay: {}. \
         TRT pre-connect (connect at the client's SYN): {}; TRT open-spin: {}; TRT ack-with-data: {}; TRT close-delay: {}; TRT cpu-latency: {}; cpuidle driver: {}; TCP congestion \
         control of the clients and servers: {}, of the TRT relay's sockets: {}.\n",
        r.seconds,
        r.bulk_runs,
        r.sessions,
        r.pings,
        r.session_blocks,
        r.cpus,
        r.kernel,
        r.loadavg,
        r.busy_poll,
        if r.trt_preconnect == 0 { "off".to_string() } else { format!("up to {}", r.trt_preconnect) },
        r.trt_open_spin,
        if r.trt_ack_with_data { "on" } else { "off" },
        r.trt_close_delay,
        r.trt_cpu_latency.as_deref().unwrap_or("none"),
        r.cpuidle,
        r.tcp_congestion_control,
        r.trt_congestion_control.as_deref().unwrap_or("the same")
    );
    s += &crate::doctor::header_line(&r.doctor);
    let native = find(r, "ipv4");
    let _ = writeln!(s, "## Session initiation (the paper's Table 1)\n");
    let rows: Vec<Vec<String>> = r
        .results
        .iter()
        .map(|m| match &m.skipped {
            Some(why) => vec![m.mech.clone(), format!("skipped: {why}")],
            None => std::iter::once(m.mech.clone())
                .chain(table1_cells(m, &m.session, |b| b.session.p50_ns, m.session_added_ns))
                .chain([
                    signed_us(native.map(|n| m.session.p50_ns as i64 - n.session.p50_ns as i64)),
                    us(m.connect.p50_ns),
                    base_us(m, |b| b.connect.p50_ns),
                    signed_us(m.connect_added_ns),
                    with_native(m, m.session_failures, |b| b.session_failures),
                ])
                .collect(),
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            &TABLE1_HEAD[..],
            &[
                ("− ipv4 row (µs)", R),
                ("connect() median (µs)", R),
                ("native connect() (µs)", R),
                ("connect() added (µs)", R),
                ("failed / native", R),
            ],
        ]
        .concat(),
        &rows,
    ));
    s.push_str(&initiation_table(r));
    let _ = writeln!(s, "\n## TCP throughput (the paper's Fig. 7) and round-trip delay\n");
    let socat = find(r, "socat");
    let rows: Vec<Vec<String>> = measured(r)
        .map(|m| {
            vec![
                m.mech.clone(),
                format!("{:.0}", m.throughput_mbps),
                m.throughput_runs_mbps.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(" / "),
                native.map_or(String::new(), |n| {
                    format!("{:.0} %", 100.0 * m.throughput_mbps / n.throughput_mbps.max(1e-9))
                }),
                socat.map_or(String::new(), |n| format!("{:.2}", m.throughput_mbps / n.throughput_mbps.max(1e-9))),
                us(m.rtt.p50_ns),
                base_us(m, |b| b.rtt.p50_ns),
                signed_us(m.rtt_added_ns),
                us(m.rtt.p99_ns),
                us(m.rtt.p999_ns),
                m.ping_losses.to_string(),
                m.cpu_s.map_or(String::new(), |c| format!("{c:.1}")),
            ]
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            ("Device", L),
            ("Mbit/s", R),
            ("each transfer", R),
            ("of IPv4", R),
            ("× socat", R),
            ("RTT median (µs)", R),
            ("native RTT (µs)", R),
            ("RTT added (µs)", R),
            ("p99 (µs)", R),
            ("p99.9 (µs)", R),
            ("lost", R),
            ("CPU (s)", R),
        ],
        &rows,
    ));
    let _ = writeln!(s, "\n## The issue's bars\n");
    for (what, ok) in bars(r) {
        let v = match ok {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        let _ = writeln!(s, "- {what}: **{v}**");
    }
    s
}

/// The paper's own session-initiation measure, shaped like its Table 1
/// (min, max, average in ms), with the median and the interleaved native
/// baseline's.
fn initiation_table(r: &Report) -> String {
    use Align::Right as R;
    let mut s = String::from(
        "\n## Session initiation, the paper's measure (Table 1: first packet in to out)\n\nEach session's \
         SYN from leaving the client namespace's stack (its veth, or a TUN B4's device) to its first arrival, \
         as IPv4, in the server namespace: kernel timestamps of capture taps in both namespaces. For native IPv4 \
         the router's forwarding; for a relay (TRT, socat) its accept and its own SYN to the server; for a \
         translator or a softwire the first packet's way through it. Sessions with a retransmitted or missing \
         SYN on either side are unmatched, not timed.\n\n",
    );
    let rows: Vec<Vec<String>> = r
        .results
        .iter()
        .map(|m| match &m.skipped {
            Some(why) => vec![m.mech.clone(), format!("skipped: {why}")],
            None => std::iter::once(m.mech.clone())
                .chain(table1_cells(m, &m.initiation, |b| b.initiation.p50_ns, m.initiation_added_ns))
                .chain([
                    m.initiation.samples.to_string(),
                    with_native(m, m.initiation_unmatched.sessions(), |b| b.initiation_unmatched.sessions()),
                ])
                .collect(),
        })
        .collect();
    s.push_str(&markdown_table(&[&TABLE1_HEAD[..], &[("timed", R), ("unmatched / native", R)]].concat(), &rows));
    s
}

fn percentile_plot(
    r: &Report,
    title: &str,
    pick: impl Fn(&MechResult) -> &crate::harness::latency::Latency,
) -> LinePlot {
    LinePlot {
        title: title.into(),
        x_label: "percentile (0 = min, 100 = max)".into(),
        y_label: "µs".into(),
        series: measured(r)
            .map(|m| {
                let l = pick(m);
                Series {
                    name: m.mech.clone(),
                    points: vec![
                        (0.0, l.min_ns as f64 / 1e3),
                        (50.0, l.p50_ns as f64 / 1e3),
                        (99.0, l.p99_ns as f64 / 1e3),
                        (99.9, l.p999_ns as f64 / 1e3),
                    ],
                }
            })
            .collect(),
    }
}

/// Write results.json, results.md and the plots.
pub fn write(r: &Report, mut out: Outputs) -> Result<()> {
    out.json("results.json", r)?;
    out.text("results.md", &markdown(r))?;
    out.svg(
        "throughput.svg",
        &LinePlot {
            title: "Bulk TCP through each mechanism".into(),
            x_label: "s".into(),
            y_label: "Mbit/s".into(),
            series: measured(r)
                .map(|m| Series {
                    name: m.mech.clone(),
                    points: m.series_mbps.iter().enumerate().map(|(i, v)| (i as f64 / 10.0, *v)).collect(),
                })
                .collect(),
        },
    )?;
    out.svg("session.svg", &percentile_plot(r, "Session initiation (connect to first echoed byte)", |m| &m.session))?;
    out.svg(
        "initiation.svg",
        &percentile_plot(r, "Session initiation, the paper's measure (client SYN out to server SYN in)", |m| {
            &m.initiation
        }),
    )?;
    out.svg("rtt.svg", &percentile_plot(r, "UDP round-trip delay", |m| &m.rtt))?;
    eprintln!("bench transition: {}", out.summary());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Baseline, Unmatched};
    use super::*;
    use crate::harness::latency::Latency;

    fn l(p50_us: u64) -> Latency {
        Latency { samples: 10, p50_ns: p50_us * 1000, min_ns: 1000, max_ns: 9000, mean_ns: 5000, ..Default::default() }
    }

    /// A row whose interleaved baseline's session median was `base_us`.
    fn m(name: &str, mbps: f64, session_us: u64, base_us: u64) -> MechResult {
        let baseline = Baseline {
            session: l(base_us),
            connect: l(base_us / 2),
            initiation: l(base_us / 10),
            initiation_unmatched: Unmatched { no_server_syn: 2, ..Default::default() },
            session_failures: 1,
            rtt: l(30),
            ping_losses: 0,
        };
        MechResult {
            mech: name.into(),
            throughput_mbps: mbps,
            session: l(session_us),
            connect: l(session_us / 2),
            initiation: l(session_us / 10),
            initiation_unmatched: Unmatched { repeated_syn: 1, failed: 2, stray_captures: 5, ..Default::default() },
            rtt: l(35),
            session_added_ns: super::super::added(&l(session_us), &baseline.session),
            connect_added_ns: super::super::added(&l(session_us / 2), &baseline.connect),
            initiation_added_ns: super::super::added(&l(session_us / 10), &baseline.initiation),
            rtt_added_ns: super::super::added(&l(35), &baseline.rtt),
            baseline: Some(baseline),
            ..Default::default()
        }
    }

    #[test]
    fn table_and_bars() {
        let r = Report {
            seconds: 1,
            bulk_runs: 1,
            sessions: 10,
            pings: 10,
            session_blocks: 2,
            ns_prefix: "v6tr1-".into(),
            cpus: 2,
            kernel: "6.x".into(),
            doctor: "kernel 6.x, 2 CPUs; has: xdp-native".into(),
            loadavg: "1 1 1".into(),
            busy_poll: "0s".into(),
            trt_preconnect: 0,
            trt_open_spin: "100us".into(),
            trt_ack_with_data: true,
            trt_congestion_control: None,
            trt_close_delay: "0s".into(),
            trt_cpu_latency: None,
            cpuidle: "haltpoll, limit 2000000000 µs".into(),
            tcp_congestion_control: "cubic".into(),
            results: vec![
                m("ipv4", 1000.0, 100, 98),
                // Paired: +30 (the ipv4 row says +40).
                m("trt", 900.0, 140, 110),
                // Paired: +60 (the ipv4 row says +80).
                m("dslite", 950.0, 180, 120),
                m("socat", 500.0, 300, 100),
                MechResult { mech: "nat64".into(), session: l(120), ..Default::default() },
                MechResult { mech: "dstm".into(), skipped: Some("no lease".into()), ..Default::default() },
            ],
        };
        let b = bars(&r);
        assert_eq!(
            b[0],
            (
                "trt: session initiation adds 30.0 µs (median) over native IPv4 measured interleaved with it (bar: ≤ 50 µs)"
                    .into(),
                Some(true)
            )
        );
        assert!(b[1].0.starts_with("dslite: session initiation adds 60.0 µs"), "{:?}", b[1]);
        assert_eq!(b[1].1, Some(false), "dslite adds 60 µs");
        assert_eq!(b[2], ("nat64: session initiation adds ? µs (median) over native IPv4 measured interleaved with it (bar: ≤ 50 µs)".into(), None), "no baseline: not judged");
        assert!(b[3].0.contains("1.80 × socat") && b[3].1 == Some(true));
        assert!(b[4].0.contains("90 % of native") && b[4].1 == Some(true));
        let md = markdown(&r);
        assert!(md.contains("\n\nHost (`v6gate doctor`): kernel 6.x, 2 CPUs; has: xdp-native.\n\n"), "{md}");
        assert!(
            md.contains(
                "| Device | Min. (ms) | Max. (ms) | Av. (ms) | median (µs) | native median (µs) | added over IPv4 (µs) \
                 | − ipv4 row (µs) | connect() median (µs) | native connect() (µs) | connect() added (µs) | failed / native |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| ipv4 | 0.001 | 0.009 | 0.005 | 100.0 | 98.0 | +2.0 | +0.0 | 50.0 | 49.0 | +1.0 | 0 / 1 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| trt | 0.001 | 0.009 | 0.005 | 140.0 | 110.0 | +30.0 | +40.0 | 70.0 | 55.0 | +15.0 | 0 / 1 |"
            ),
            "{md}"
        );
        assert!(md.contains("| nat64 | 0.001 | 0.009 | 0.005 | 120.0 |  |  | +20.0 | 0.0 |  |  | 0 |"), "{md}");
        // The paper's measure: ipv4 10 µs against 9 µs (+1.0), trt 14
        // against 11 (+3.0); unmatched: 3 sessions (strays are not
        // sessions) against 2.
        assert!(
            md.contains(
                "| Device | Min. (ms) | Max. (ms) | Av. (ms) | median (µs) | native median (µs) | added over IPv4 (µs) \
                 | timed | unmatched / native |"
            ),
            "{md}"
        );
        assert!(md.contains("| ipv4 | 0.001 | 0.009 | 0.005 | 10.0 | 9.0 | +1.0 | 10 | 3 / 2 |"), "{md}");
        assert!(md.contains("| trt | 0.001 | 0.009 | 0.005 | 14.0 | 11.0 | +3.0 | 10 | 3 / 2 |"), "{md}");
        assert!(md.contains("| nat64 | 0.000 | 0.000 | 0.000 | 0.0 |  |  | 0 | 0 |"), "{md}");
        assert_eq!(md.matches("| dstm | skipped: no lease |").count(), 2, "{md}");
        assert!(md.contains("| RTT median (µs) | native RTT (µs) | RTT added (µs) |"), "{md}");
        assert!(md.contains("| 35.0 | 30.0 | +5.0 |"), "{md}");
        assert!(md.contains("| dstm | skipped: no lease |"), "{md}");
        assert!(md.contains("**NOT met**"));
    }
}
