//! `bench xlat`'s outputs: results.json, results.md, the throughput and
//! latency-by-load plots.

use anyhow::Result;
use clap::ValueEnum as _;

use super::{Dir, Dut, DutReport, Point, Report};
use crate::harness::latency::us;
use crate::report::{markdown_table, Align, LinePlot, Outputs, Series};

/// The Markdown tables of a report.
pub fn markdown(r: &Report) -> String {
    use Align::{Left as L, Right as R};
    let mut o = String::new();
    o += "# v6gate bench xlat (RFC 8219 / RFC 2544)\n\n";
    o += &format!("{} CPUs, kernel {}. Parameters: `{}`\n\n", r.cpus, r.kernel, r.params);
    o += "\"bound\": what limited the figure: `DUT` (it lost frames the tester offered), `TESTER` \
          (TESTER-BOUND: the search ended below a rate the tester could not offer, or the DUT carried the \
          tester's whole ceiling; the figure is the tester's), `--max-rate` (no loss up to it). A loss cell \
          marked `tester-bound` was measured while the tester fell behind.\n\n";
    let mut rows = Vec::new();
    for d in &r.duts {
        let status_row = || vec![d.dut.to_owned(), String::new(), String::new(), d.status.clone()];
        if d.points.is_empty() {
            rows.push(status_row());
            continue;
        }
        for p in &d.points {
            let loss: Vec<String> = p
                .loss
                .iter()
                .map(|l| {
                    let tb = if l.tester_bound.is_some() { " (tester-bound)" } else { "" };
                    format!("{}%: {:.2}%{tb}", l.load_pct, l.loss_ratio * 100.0)
                })
                .collect();
            let l = p.latency.unwrap_or_default();
            rows.push(vec![
                d.dut.to_owned(),
                p.dir.name().to_owned(),
                p.frame_size.to_string(),
                format!("{:.0}", p.throughput_fps),
                format!("{:.1}", p.throughput_mbps),
                bound(p).to_owned(),
                loss.join(", "),
                us(l.p50_ns),
                us(l.p99_ns),
                us(l.p999_ns),
                us(l.pdv_ns),
            ]);
        }
        if !d.status.starts_with("ok") {
            rows.push(status_row());
        }
    }
    o += &markdown_table(
        &[
            ("DUT", L),
            ("dir", L),
            ("frame", R),
            ("throughput (fps)", R),
            ("Mbit/s", R),
            ("bound", L),
            ("loss above (load: loss)", L),
            ("lat p50 (us)", R),
            ("p99", R),
            ("p99.9", R),
            ("PDV (us)", R),
        ],
        &rows,
    );
    let notes: Vec<String> =
        r.duts.iter().flat_map(|d| d.notes.iter().map(move |n| format!("- {}: {n}\n", d.dut))).collect();
    if !notes.is_empty() {
        o += "\n";
        o += &notes.concat();
    }
    o += &softwire_bar(r);
    let setups: Vec<&DutReport> = r.duts.iter().filter(|d| d.setup.is_some()).collect();
    if !setups.is_empty() {
        o += "\n## NAT64 session setup\n\n";
        let rows: Vec<Vec<String>> = setups
            .iter()
            .filter_map(|d| d.setup.as_ref().map(|s| (d, s)))
            .flat_map(|(d, s)| {
                s.probes.iter().map(move |p| {
                    vec![
                        d.dut.to_owned(),
                        format!("{:.0}{}", s.setup_rate_fps, if s.tester_bound { " (TESTER-BOUND)" } else { "" }),
                        p.busy_poll.clone(),
                        format!("{:.0}", p.rate),
                        us(p.first_packet.p50_ns),
                        us(p.first_packet.p99_ns),
                        us(p.established.p50_ns),
                        us(p.established.p99_ns),
                    ]
                })
            })
            .collect();
        o += &markdown_table(
            &[
                ("DUT", L),
                ("setup rate (new flows/s)", R),
                ("busy-poll", R),
                ("probe (flows/s)", R),
                ("first packet p50 (us)", R),
                ("p99", R),
                ("established p50 (us)", R),
                ("p99", R),
            ],
            &rows,
        );
    }
    o
}

/// What limited a point's figure (the report's "bound" column).
fn bound(p: &Point) -> &'static str {
    if p.tester_bound {
        "TESTER"
    } else if p.capped {
        "--max-rate"
    } else if p.throughput_fps > 0.0 || p.search.iter().any(|t| t.tester_bound.is_none() && !t.passed) {
        "DUT"
    } else {
        "-"
    }
}

/// Issue #15's bar: each softwire DUT's zero-loss throughput against the
/// userspace SIIT translator's (`v6gate-siit`) in the same run, at every
/// direction and frame size both measured, with a verdict per softwire.
/// Empty when the run has no softwire DUT.
fn softwire_bar(r: &Report) -> String {
    use Align::{Left as L, Right as R};
    let siit = r.duts.iter().find(|d| d.dut == Dut::V6gateSiit.name());
    let softwires: Vec<&DutReport> =
        r.duts.iter().filter(|d| Dut::value_variants().iter().any(|v| v.softwire() && v.name() == d.dut)).collect();
    if softwires.is_empty() {
        return String::new();
    }
    let mut o = String::from("\n## Softwires against userspace SIIT (issue #15 bar)\n\n");
    o += "The bar: softwire zero-loss throughput ≥ the userspace SIIT translator's (`v6gate-siit`) in the same \
          run, at each direction and frame size (frames/s; the softwire's IPv6-side frames are 4in6, 20 bytes \
          longer, with the same payload).\n\n";
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for d in softwires {
        let (mut met, mut judged) = (0usize, 0usize);
        for p in &d.points {
            let Some(q) = siit.and_then(|s| s.points.iter().find(|q| q.dir == p.dir && q.frame_size == p.frame_size))
            else {
                continue;
            };
            // SIIT with no zero-loss rate (e.g. its frames charged to an
            // XDP generator's CPU: TESTER-BOUND) gives nothing to compare
            // against: that point is not judged.
            if q.throughput_fps <= 0.0 {
                rows.push(vec![
                    d.dut.to_owned(),
                    p.dir.name().to_owned(),
                    p.frame_size.to_string(),
                    format!("{:.0}", p.throughput_fps),
                    "0".into(),
                    "-".into(),
                    "not judged".into(),
                ]);
                continue;
            }
            // A zero-loss rate of zero meets nothing.
            let ok = p.throughput_fps > 0.0 && p.throughput_fps >= q.throughput_fps;
            judged += 1;
            met += usize::from(ok);
            rows.push(vec![
                d.dut.to_owned(),
                p.dir.name().to_owned(),
                p.frame_size.to_string(),
                format!("{:.0}", p.throughput_fps),
                format!("{:.0}", q.throughput_fps),
                if q.throughput_fps > 0.0 { format!("{:.2}", p.throughput_fps / q.throughput_fps) } else { "-".into() },
                if ok { "met" } else { "not met" }.to_owned(),
            ]);
        }
        verdicts.push(match (judged, met) {
            (0, _) => format!(
                "- {}: not judged: no direction and frame size measured for both it and v6gate-siit in this run, \
                 with a zero-loss rate for v6gate-siit ({})\n",
                d.dut, d.status
            ),
            (j, m) if j == m => format!("- {}: **met** at all {j} points\n", d.dut),
            (j, m) => format!("- {}: **not met** (met at {m} of {j} points)\n", d.dut),
        });
    }
    if !rows.is_empty() {
        o += &markdown_table(
            &[
                ("DUT", L),
                ("dir", L),
                ("frame", R),
                ("softwire (fps)", R),
                ("v6gate-siit (fps)", R),
                ("ratio", R),
                ("bar", L),
            ],
            &rows,
        );
        o += "\n";
    }
    o += &verdicts.concat();
    o
}

/// Writes results.json, results.md and per direction throughput-DIR.svg
/// and latency-DIR.svg into `out`.
pub(super) fn write(r: &Report, o: &mut Outputs) -> Result<()> {
    o.json("results.json", r)?;
    o.text("results.md", &markdown(r))?;
    for dir in [Dir::V6ToV4, Dir::V4ToV6] {
        let dname = dir.name();
        let series: Vec<Series> = r
            .duts
            .iter()
            .map(|d| Series {
                name: d.dut.into(),
                points: d
                    .points
                    .iter()
                    .filter(|p| p.dir == dir)
                    .map(|p| (p.frame_size as f64, p.throughput_fps / 1e6))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let plot = LinePlot {
            title: format!("Zero-loss throughput, {dname}"),
            x_label: "IPv6 frame size (bytes)".into(),
            y_label: "Mframes/s".into(),
            series,
        };
        o.svg(&format!("throughput-{dname}.svg"), &plot)?;
        let smallest = r.duts.iter().flat_map(|d| d.points.iter()).map(|p| p.frame_size).min().unwrap_or(84);
        let series: Vec<Series> = r
            .duts
            .iter()
            .filter_map(|d| {
                let p = d.points.iter().find(|p| p.dir == dir && p.frame_size == smallest)?;
                let pts = p.by_load.iter().map(|l| (f64::from(l.load_pct), l.latency.p50_ns as f64 / 1000.0)).collect();
                Some(Series { name: d.dut.into(), points: pts })
            })
            .collect();
        let plot = LinePlot {
            title: format!("Median latency by load, {dname}, {smallest}-byte frames"),
            x_label: "load (% of the DUT's throughput)".into(),
            y_label: "median latency (us)".into(),
            series,
        };
        o.svg(&format!("latency-{dname}.svg"), &plot)?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::SearchTrial;
    use super::*;
    use crate::harness::latency::Latency;

    fn report() -> Report {
        Report {
            cpus: 2,
            kernel: "k".into(),
            params: "p".into(),
            duts: vec![
                DutReport {
                    dut: "tayga-siit",
                    status: "skipped: tayga is not installed".into(),
                    points: vec![],
                    setup: None,
                    notes: vec![],
                },
                DutReport {
                    dut: "kernel",
                    status: "ok".into(),
                    points: vec![Point {
                        dir: Dir::V6ToV4,
                        frame_size: 84,
                        sent_frame_size: 64,
                        flows: 2,
                        throughput_fps: 1000.0,
                        throughput_mbps: 0.512,
                        ceiling_fps: 2000.0,
                        tester_bound: false,
                        capped: false,
                        search: vec![
                            SearchTrial {
                                rate_fps: 2000.0,
                                passed: false,
                                tester_bound: None,
                                sent_fps: 2000.0,
                                lost: 7,
                            },
                            SearchTrial {
                                rate_fps: 1000.0,
                                passed: true,
                                tester_bound: None,
                                sent_fps: 1000.0,
                                lost: 0,
                            },
                        ],
                        loss: vec![],
                        latency: Some(Latency { p50_ns: 12_345, ..Default::default() }),
                        by_load: vec![],
                    }],
                    setup: None,
                    notes: vec!["6to4: fast path 10 packets".into()],
                },
            ],
        }
    }

    #[test]
    fn markdown_lists_every_dut() {
        let md = markdown(&report());
        assert!(md.contains("| tayga-siit |  |  | skipped: tayga is not installed |"), "{md}");
        assert!(md.contains("| kernel | 6to4 | 84 | 1000 | 0.5 | DUT |  | 12.3 |"), "{md}");
        assert!(md.contains("\n- kernel: 6to4: fast path 10 packets\n"), "{md}");
        assert!(md.contains("|---|---|---:|---:|"), "{md}");
        // A tester-bound row and a loss trial during which the tester fell behind.
        let mut r = report();
        let mut p = point(Dir::V4ToV6, 250_000.0);
        p.tester_bound = true;
        p.loss.push(super::super::LoadResult {
            load_pct: 125,
            rate_fps: 312_500.0,
            loss_ratio: 0.2,
            latency: Latency::default(),
            tester_bound: Some("sent 250000 of 312500 packets/s offered (80.0 %)".into()),
        });
        let mut capped = point(Dir::V6ToV4, 2000.0);
        capped.capped = true;
        r.duts.push(dut("v6gate-siit", vec![p, capped, point(Dir::V6ToV4, 0.0)]));
        let md = markdown(&r);
        assert!(
            md.contains("| v6gate-siit | 4to6 | 84 | 250000 | 0.0 | TESTER | 125%: 20.00% (tester-bound) |"),
            "{md}"
        );
        assert!(md.contains("| v6gate-siit | 6to4 | 84 | 2000 | 0.0 | --max-rate |"), "{md}");
        assert!(md.contains("| v6gate-siit | 6to4 | 84 | 0 | 0.0 | - |"), "nothing judged: {md}");
    }

    pub(in crate::xlat) fn point(dir: Dir, fps: f64) -> Point {
        Point {
            dir,
            frame_size: 84,
            sent_frame_size: 84,
            flows: 2,
            throughput_fps: fps,
            throughput_mbps: 0.0,
            ceiling_fps: 0.0,
            tester_bound: false,
            capped: false,
            search: vec![],
            loss: vec![],
            latency: None,
            by_load: vec![],
        }
    }

    fn dut(name: &'static str, points: Vec<Point>) -> DutReport {
        DutReport { dut: name, status: "ok".into(), points, setup: None, notes: vec![] }
    }

    #[test]
    fn the_softwire_bar_compares_with_siit_of_the_same_run() {
        assert!(!markdown(&report()).contains("issue #15"), "no softwire, no bar");
        let mut r = report();
        r.duts.push(dut("v6gate-siit", vec![point(Dir::V6ToV4, 1000.0), point(Dir::V4ToV6, 800.0)]));
        r.duts.push(dut("v6gate-lw4o6", vec![point(Dir::V6ToV4, 1200.0), point(Dir::V4ToV6, 800.0)]));
        r.duts.push(dut("v6gate-dslite", vec![point(Dir::V6ToV4, 900.0), point(Dir::V4ToV6, 0.0)]));
        let md = markdown(&r);
        assert!(md.contains("## Softwires against userspace SIIT (issue #15 bar)"), "{md}");
        assert!(md.contains("| v6gate-lw4o6 | 6to4 | 84 | 1200 | 1000 | 1.20 | met |"), "{md}");
        assert!(md.contains("| v6gate-lw4o6 | 4to6 | 84 | 800 | 800 | 1.00 | met |"), "{md}");
        assert!(md.contains("| v6gate-dslite | 6to4 | 84 | 900 | 1000 | 0.90 | not met |"), "{md}");
        assert!(md.contains("| v6gate-dslite | 4to6 | 84 | 0 | 800 | 0.00 | not met |"), "{md}");
        assert!(md.contains("- v6gate-lw4o6: **met** at all 2 points\n"), "{md}");
        assert!(md.contains("- v6gate-dslite: **not met** (met at 0 of 2 points)\n"), "{md}");
        // Against a v6gate-siit point with no zero-loss rate (tester-bound)
        // the bar is not judged, never "met".
        let mut zero = r.clone();
        for d in zero.duts.iter_mut().filter(|d| d.dut == "v6gate-siit") {
            for p in &mut d.points {
                p.throughput_fps = 0.0;
            }
        }
        let md = markdown(&zero);
        assert!(md.contains("| v6gate-lw4o6 | 6to4 | 84 | 1200 | 0 | - | not judged |"), "{md}");
        assert!(md.contains("- v6gate-lw4o6: not judged: no direction and frame size measured"), "{md}");
        assert!(!md.contains("| met |"), "{md}");
        // Without v6gate-siit in the run the bar is not judged.
        r.duts.retain(|d| d.dut != "v6gate-siit");
        let md = markdown(&r);
        assert!(md.contains("- v6gate-lw4o6: not judged: no direction and frame size measured"), "{md}");
        assert!(!md.contains("| met |"), "{md}");
    }

    #[test]
    fn writes_json_markdown_and_plots() {
        let dir = std::env::temp_dir().join(lab::netns::unique_name("v6gate-bench-xlat-report"));
        let mut o = Outputs::create(&dir).unwrap();
        write(&report(), &mut o).unwrap();
        assert_eq!(
            o.summary(),
            format!("wrote results.json, results.md, throughput-6to4.svg and latency-6to4.svg in {}", dir.display())
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
        assert_eq!(json["duts"][1]["points"][0]["latency"]["p50_ns"], 12_345);
        let p = &json["duts"][1]["points"][0];
        assert_eq!(p["search"][1]["rate_fps"], 1000.0);
        assert_eq!((p["search"][0]["passed"].as_bool(), p["search"][0]["lost"].as_u64()), (Some(false), Some(7)));
        assert!(p["search"][0]["tester_bound"].is_null(), "a field per trial: {p}");
        assert_eq!(
            (p["tester_bound"].as_bool(), p["ceiling_fps"].as_f64()),
            (Some(false), Some(2000.0)),
            "and per row"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
