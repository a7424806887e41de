//! The reports of `bench sip`: results.json, results.md (call setup times
//! in the shape of the SIP-over-IPv6 paper's Table I, the call rates, the
//! handover, the bars) and one SVG histogram of setup times per
//! path with its 80th percentile.

use std::fmt::Write as _;

use anyhow::Result;

use super::{PathKind, Report};
use crate::report::{markdown_table, Align, HistPlot, Outputs};

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn signed_ms(ns: Option<i64>) -> String {
    ns.map(|n| format!("{:+.3}", n as f64 / 1e6)).unwrap_or_else(|| "—".into())
}

/// The Markdown report.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# v6gate bench sip{}\n", if r.quick { " (--quick smoke run)" } else { "" });
    let _ = writeln!(
        s,
        "{}. Setup workload: {} calls at {} calls/s, {} s of G.711 RTP each. Rate trials: {} s each. \
         Gateway on CPU(s) {}, SIPp on CPU(s) {}{}; {} online CPUs, kernel {}; {}\n",
        r.test,
        r.calls,
        r.rate,
        r.call_secs,
        r.trial_secs,
        r.dut_cpus,
        r.tester_cpus,
        if r.realtime { ", both under SCHED_FIFO (--realtime)" } else { "" },
        r.online_cpus,
        r.kernel,
        r.sipp.as_deref().map_or("SIPp.".into(), |v| format!("{}.", v.trim_end_matches('.')))
    );
    s.push_str(&table_one(r));
    s.push_str("## Call setup time (INVITE sent by the caller → ACK received by the callee), ms\n\n");
    let mut rows = Vec::new();
    for p in &r.paths {
        match (&p.setup, &p.skipped) {
            (Some(x), _) => rows.push(vec![
                p.name.clone(),
                format!("{}/{}", x.measured, x.calls),
                ms(x.setup.mean_ns),
                ms(x.setup.p50_ns),
                ms(x.setup.stdev_ns),
                ms(x.p80_ns),
                ms(x.setup.p99_ns),
                signed_ms(x.added_p50_ns),
                signed_ms(x.added_p80_ns),
                signed_ms(x.added_p99_ns),
            ]),
            (None, Some(why)) => rows.push(vec![p.name.clone(), why.clone()]),
            (None, None) => rows.push(vec![p.name.clone(), "error (see below)".into()]),
        }
    }
    s.push_str(&markdown_table(
        &[
            ("path", Align::Left),
            ("calls", Align::Right),
            ("mean", Align::Right),
            ("median", Align::Right),
            ("deviation", Align::Right),
            ("p80", Align::Right),
            ("p99", Align::Right),
            ("added p50", Align::Right),
            ("added p80", Align::Right),
            ("added p99", Align::Right),
        ],
        &rows,
    ));
    s.push_str("\n\"added\": the gateway's figure minus the direct IPv6 call's.\n\n");

    s.push_str("## Highest call rate with no failed call\n\n");
    s.push_str(
        "The direct IPv6 call (SIPp to SIPp) measures SIPp's own ceiling first; every other path searches up to \
         it (the direct IPv4 call from it down, the gateways doubling from 500 up to it). TESTER-BOUND: the search ended below a rate SIPp could not offer (its INVITEs over 2 % short of \
         the rate or over 100 ms late against their schedule at p99, or a SIPp process running or waiting to run 90 % of 200 ms), or the path \
         carried SIPp's whole ceiling: the figure is SIPp's, not the path's.\n\n",
    );
    let rows: Vec<Vec<String>> = r
        .paths
        .iter()
        .filter_map(|p| {
            let x = p.search.as_ref()?;
            let best = x.trials.iter().find(|t| t.passed && t.rate == x.max_cps);
            let pct = |c: Option<f64>| c.map_or_else(|| "—".into(), |c| format!("{:.0}%", c * 100.0));
            let bound = match (x.tester_bound, x.capped_at) {
                (true, _) => "TESTER-BOUND".to_string(),
                (false, Some(c)) => format!("no failure up to {c}"),
                (false, None) if x.first_failure.is_some() => "the path".into(),
                _ => "—".into(),
            };
            Some(vec![
                p.name.clone(),
                x.max_cps.to_string(),
                x.first_failure.map(|f| f.to_string()).unwrap_or_else(|| "—".into()),
                bound,
                pct(best.and_then(|t| t.dut_cpu)),
                pct(best.and_then(|t| t.sipp_cpu)),
                x.started_at.to_string(),
                format!(
                    "{} ({} tester-bound)",
                    x.trials.len(),
                    x.trials.iter().filter(|t| t.tester_bound.is_some()).count()
                ),
            ])
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            ("path", Align::Left),
            ("calls/s", Align::Right),
            ("first failing", Align::Right),
            ("bound by", Align::Left),
            ("gateway CPU", Align::Right),
            ("SIPp CPU demand", Align::Right),
            ("first trial", Align::Right),
            ("trials", Align::Right),
        ],
        &rows,
    ));
    s.push('\n');

    s.push_str("## Mid-call handover (re-INVITE from a new IPv6 address)\n\n");
    let rows: Vec<Vec<String>> = r
        .paths
        .iter()
        .filter_map(|p| {
            let h = p.handover.as_ref()?;
            Some(vec![
                p.name.clone(),
                format!("{:.1}", h.reinvite_ms),
                format!("{:.1}", h.gap_ms),
                format!("{:+.1}", h.first_new_after_ok_ms),
                format!("{}/{}", h.lost, h.sent),
                h.lost_after_ok.to_string(),
            ])
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            ("gateway", Align::Left),
            ("re-INVITE → 200 OK, ms", Align::Right),
            ("media gap, ms", Align::Right),
            ("first packet at new address after 200 OK, ms", Align::Right),
            ("lost/sent", Align::Right),
            ("lost after 200 OK", Align::Right),
        ],
        &rows,
    ));
    s.push_str(
        "\nMeasured from RTP arrival at the UE (the callee echoes every packet): the gap runs from the last \
         packet at the old address to the first at the new one; the UE sends from the new address from the \
         moment it sends the re-INVITE, one packet every 20 ms.\n\n",
    );

    s.push_str("## The bars (issue 13)\n\n");
    let _ = writeln!(s, "{}", bars(r).join("\n"));
    let errors: Vec<String> =
        r.paths.iter().flat_map(|p| p.errors.iter().map(move |e| format!("- {}: {e}", p.name))).collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "\n## Errors\n\n{}", errors.join("\n"));
    }
    if !r.notes.is_empty() {
        let _ =
            writeln!(s, "\n## Notes\n\n{}", r.notes.iter().map(|n| format!("- {n}")).collect::<Vec<_>>().join("\n"));
    }
    s
}

/// The paper's Table I: per path the 80th percentile of the call setup
/// time and the RTP one-way delay (mean, median, standard deviation; p99
/// added), both directions of the probe calls together.
fn table_one(r: &Report) -> String {
    let mut s = String::from("## Table I: call setup time and RTP one-way delay, ms\n\n");
    let rows: Vec<Vec<String>> = r
        .paths
        .iter()
        .filter(|p| p.skipped.is_none())
        .map(|p| {
            let dash = || "—".to_string();
            let mut row = vec![p.name.clone(), p.setup.as_ref().map(|x| ms(x.p80_ns)).unwrap_or_else(dash)];
            match p.rtp.as_ref().filter(|d| d.delay.samples > 0) {
                Some(d) => row.extend([
                    ms(d.delay.mean_ns),
                    ms(d.delay.p50_ns),
                    ms(d.delay.stdev_ns),
                    ms(d.delay.p99_ns),
                    format!("{}/{}", d.set_up, d.calls),
                    format!("{}/{}", d.lost(), d.sent_forward + d.sent_back),
                ]),
                None => row.extend(std::iter::repeat_with(dash).take(6)),
            }
            row
        })
        .collect();
    s.push_str(&markdown_table(
        &[
            ("path", Align::Left),
            ("setup p80", Align::Right),
            ("RTP delay mean", Align::Right),
            ("median", Align::Right),
            ("deviation", Align::Right),
            ("p99", Align::Right),
            ("probe calls", Align::Right),
            ("lost/sent", Align::Right),
        ],
        &rows,
    ));
    let _ = writeln!(
        s,
        "\nRTP delay: {} probe calls of the bench's own UAs alongside the setup workload, {} s of G.711 each way; \
         receive time minus the send time carried in each packet, both directions together (each direction in \
         results.json).\n",
        r.rtp_calls, r.call_secs
    );
    s
}

/// The bars against this run's figures (reported, not asserted).
pub fn bars(r: &Report) -> Vec<String> {
    let find = |k: PathKind| r.paths.iter().find(|p| p.path == k);
    let mut v = Vec::new();
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let (v6g, kam) = (find(PathKind::V6gate), find(PathKind::Kamailio));
    if let Some(a) = v6g.and_then(|p| p.setup.as_ref()).and_then(|s| s.added_p80_ns) {
        v.push(format!(
            "- Setup time added at p80 over native IPv6 ≤ 1 ms: {} ms — {}",
            signed_ms(Some(a)),
            verdict(a <= 1_000_000)
        ));
    }
    let cps = |p: Option<&super::PathResult>| p.and_then(|p| p.search.as_ref()).map(|s| s.max_cps);
    if let Some(s) = v6g.and_then(|p| p.search.as_ref()) {
        let c = s.max_cps;
        let ceiling = match cps(find(PathKind::NativeV6)) {
            Some(n) if s.tester_bound => {
                format!(" (TESTER-BOUND: SIPp's figure; the direct IPv6 call, SIPp's own ceiling here, reached {n})")
            }
            _ if s.tester_bound => " (TESTER-BOUND: SIPp's figure, not the gateway's)".into(),
            _ => String::new(),
        };
        // A tester-bound figure is a lower bound: it can meet a bar, not
        // miss one.
        let judged = |ok: bool| if s.tester_bound && !ok { "not judged (TESTER-BOUND)" } else { verdict(ok) };
        v.push(format!("- Highest call rate ≥ 3,000 calls/s: {c}{ceiling} — {}", judged(c >= 3000)));
        if let Some(k) = cps(kam).filter(|k| *k > 0) {
            let x = f64::from(c) / f64::from(k);
            v.push(format!("- ≥ 1.5× Kamailio+rtpengine ({k} calls/s): {x:.2}× — {}", judged(x >= 1.5)));
        }
    }
    if let Some(h) = v6g.and_then(|p| p.handover.as_ref()) {
        let ok = h.first_new_after_ok_ms <= 20.0 && h.lost_after_ok == 0;
        v.push(format!(
            "- Handover: media back ≤ 20 ms after the re-INVITE's 200 OK, no packet lost after it: {:+.1} ms, {} lost — {}",
            h.first_new_after_ok_ms,
            h.lost_after_ok,
            verdict(ok)
        ));
    }
    if r.quick {
        v.push("- (--quick: smoke figures, not the paper's workload)".into());
    }
    v
}

/// Writes results.json, results.md and `setup-<path>.svg` per path.
pub fn write(r: &Report, out: &mut Outputs) -> Result<()> {
    out.json("results.json", r)?;
    out.text("results.md", &markdown(r))?;
    for p in &r.paths {
        let Some(x) = p.setup.as_ref().filter(|x| !x.samples_us.is_empty()) else { continue };
        let samples: Vec<f64> = x.samples_us.iter().map(|u| *u as f64 / 1e3).collect();
        let mut h = HistPlot::from_samples(&format!("Call setup time, {}", p.name), "ms", &samples, 40);
        h.markers.push((format!("80th percentile {} ms", ms(x.p80_ns)), x.p80_ns as f64 / 1e6));
        let key = p.path.to_possible_value_name();
        out.histogram(&format!("setup-{key}.svg"), &h)?;
    }
    Ok(())
}

impl PathKind {
    /// The path's command-line name ("native-v6", ...), for file names.
    pub fn to_possible_value_name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    #[test]
    fn tables_and_bars() {
        let mut lat = Latency { p50_ns: 1_200_000, p99_ns: 3_000_000, mean_ns: 1_300_000, ..Default::default() };
        lat.samples = 3;
        let setup = |added: Option<i64>| Setup {
            calls: 3,
            measured: 3,
            setup: lat,
            p80_ns: 1_500_000,
            added_p50_ns: added,
            added_p80_ns: added,
            added_p99_ns: added,
            samples_us: vec![1000, 1200, 3000],
        };
        let search = |max: u32| RateSearch {
            max_cps: max,
            first_failure: Some(max + 100),
            capped_at: None,
            tester_bound: false,
            started_at: max,
            trials: vec![],
        };
        let r = Report {
            test: "t",
            quick: true,
            rate: 10,
            calls: 3,
            call_secs: 1,
            rtp_calls: 3,
            trial_secs: 1,
            dut_cpus: "1".into(),
            tester_cpus: "0".into(),
            dut_threads: 1,
            realtime: false,
            online_cpus: 2,
            kernel: "6".into(),
            sipp: None,
            paths: vec![
                PathResult {
                    path: PathKind::V6gate,
                    name: "v6gate ALG+TrGW".into(),
                    version: None,
                    skipped: None,
                    setup: Some(setup(Some(300_000))),
                    rtp: Some(RtpDelay {
                        calls: 3,
                        set_up: 2,
                        sent_forward: 50,
                        received_forward: 49,
                        sent_back: 50,
                        received_back: 50,
                        delay: Latency {
                            samples: 99,
                            mean_ns: 250_000,
                            p50_ns: 200_000,
                            stdev_ns: 50_000,
                            p99_ns: 400_000,
                            ..Default::default()
                        },
                        forward: Latency::default(),
                        back: Latency::default(),
                        errors: vec!["callee: no INVITE came".into()],
                    }),
                    search: Some(search(4000)),
                    handover: Some(Handover {
                        sent: 100,
                        echoed_old: 50,
                        echoed_new: 49,
                        reinvite_ms: 2.0,
                        gap_ms: 21.0,
                        first_new_after_ok_ms: 5.0,
                        lost: 1,
                        lost_after_ok: 0,
                    }),
                    errors: vec![],
                },
                PathResult {
                    path: PathKind::Kamailio,
                    name: "Kamailio+rtpengine".into(),
                    version: None,
                    skipped: None,
                    setup: None,
                    rtp: None,
                    search: Some(search(2000)),
                    handover: None,
                    errors: vec!["boom".into()],
                },
            ],
            notes: vec![],
        };
        let md = markdown(&r);
        assert!(md.contains("| v6gate ALG+TrGW | 3/3 | 1.300 | 1.200 |"), "{md}");
        assert!(
            md.contains("| path | setup p80 | RTP delay mean | median | deviation | p99 | probe calls | lost/sent |")
        );
        assert!(md.contains("| v6gate ALG+TrGW | 1.500 | 0.250 | 0.200 | 0.050 | 0.400 | 2/3 | 1/100 |"), "{md}");
        assert!(md.contains("| Kamailio+rtpengine | — | — | — | — | — | — | — |"), "{md}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["paths"][0]["rtp"]["delay"]["stdev_ns"], 50_000);
        assert_eq!(json["paths"][0]["rtp"]["received_back"], 50);
        assert!(json["paths"][1]["rtp"].is_null());
        assert!(md.contains("+0.300"), "{md}");
        assert!(md.contains("| v6gate ALG+TrGW | 4000 | 4100 | the path |"), "{md}");
        assert!(md.contains("- Kamailio+rtpengine: boom"), "{md}");
        let b = bars(&r).join("\n");
        assert!(b.contains("≤ 1 ms: +0.300 ms — met"), "{b}");
        assert!(b.contains("≥ 3,000 calls/s: 4000 — met") && b.contains("2.00× — met"), "{b}");
        assert!(b.contains("+5.0 ms, 0 lost — met"), "{b}");
        assert_eq!(PathKind::NativeV6.to_possible_value_name(), "native-v6");
        // SIPp's ceiling (the direct call) at 1,500 calls/s, the gateway
        // carried all of it: tester-bound, the bar not judged.
        let mut t = r.clone();
        let trial = |rate: u32, tb: Option<&str>| RateTrial {
            rate,
            calls: u64::from(rate),
            passed: tb.is_none(),
            tester_bound: tb.map(Into::into),
            sipp_cpu: Some(if tb.is_some() { 0.97 } else { 0.6 }),
            invite_rate: None,
            invite_lag_p99_ms: None,
            successful: None,
            failed: None,
            achieved_cps: f64::from(rate),
            dut_cpu: Some(0.07),
            note: None,
        };
        let s = t.paths[0].search.as_mut().unwrap();
        *s = RateSearch {
            max_cps: 1500,
            first_failure: None,
            capped_at: None,
            tester_bound: true,
            started_at: 1600,
            trials: vec![
                trial(1600, Some("SIPp fell behind: a SIPp process ran or waited for a CPU 97 % of the time")),
                trial(1500, None),
            ],
        };
        t.paths.push(PathResult {
            path: PathKind::NativeV6,
            name: "native IPv6".into(),
            version: None,
            skipped: None,
            setup: None,
            rtp: None,
            search: Some(search(1600)),
            handover: None,
            errors: vec![],
        });
        let md = markdown(&t);
        assert!(
            md.contains("| v6gate ALG+TrGW | 1500 | — | TESTER-BOUND | 7% | 60% | 1600 | 2 (1 tester-bound) |"),
            "{md}"
        );
        let b = bars(&t).join("\n");
        assert!(
            b.contains("≥ 3,000 calls/s: 1500 (TESTER-BOUND: SIPp's figure; the direct IPv6 call, SIPp's own ceiling here, reached 1600) — not judged"),
            "{b}"
        );
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["paths"][0]["search"]["tester_bound"], true, "per row");
        assert_eq!(
            json["paths"][0]["search"]["trials"][0]["tester_bound"],
            "SIPp fell behind: a SIPp process ran or waited for a CPU 97 % of the time",
            "per trial"
        );
    }
}
