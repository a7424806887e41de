//! `bench trgw`'s outputs: results.json, results.md (maximum zero-loss
//! calls, one table per direction) and the Figure 8/9 plots.

use anyhow::Result;
use std::fmt::Write as _;

use super::{Device, DirResult, Direction, Report, Search, Trial};
use crate::harness::latency::us;
use crate::report::{markdown_table, Align, LinePlot, Outputs, Series};

/// Every trial of a device in a direction, by number of calls, each with
/// what it was: a curve point or a search trial (in order).
fn all_trials(d: &DirResult) -> Vec<(&'static str, &Trial)> {
    let mut v: Vec<(&'static str, &Trial)> = d
        .points
        .iter()
        .map(|t| ("curve", t))
        .chain(d.search.iter().flat_map(|s| s.trials.iter().map(|t| ("search", t))))
        .collect();
    v.sort_by_key(|t| t.1.calls);
    v
}

/// The trials a plot shows for a device in a direction: its curve (its
/// search when it has none: the kernel row), without the trials whose
/// media did not run or whose tester fell behind (they measured nothing
/// of the device); for equal N the later trial.
fn plotted(d: &DirResult) -> Vec<&Trial> {
    let from: Vec<&Trial> = if d.points.is_empty() {
        d.search.iter().flat_map(|s| s.trials.iter()).collect()
    } else {
        d.points.iter().collect()
    };
    let mut v: Vec<&Trial> = from.into_iter().filter(|t| t.note.is_none() && t.tester_bound.is_none()).collect();
    v.sort_by_key(|t| t.calls);
    let mut out: Vec<&Trial> = Vec::new();
    for t in v {
        match out.last_mut() {
            Some(l) if l.calls == t.calls => *l = t,
            _ => out.push(t),
        }
    }
    out
}

/// The report's line for `dev`'s curve point at `calls` in `dir` (never a
/// search trial): `f` of a passing point, or why there is none.
fn curve_line(r: &Report, dev: &str, dir: Direction, calls: u32, f: impl Fn(&Trial) -> String) -> Option<String> {
    let d = r.relays.iter().find(|d| d.name == dev && d.skipped.is_none())?;
    let x = d.directions.iter().find(|x| x.direction == dir)?;
    Some(match x.points.iter().rev().find(|t| t.calls == calls) {
        None => format!("not measured (no curve point at {calls} calls)"),
        Some(t) if t.note.is_some() => format!("not measured (not run: {})", t.note.as_deref().unwrap_or("")),
        Some(t) if t.tester_bound.is_some() => "not measured (the curve point was TESTER-BOUND)".into(),
        Some(t) if !t.passed => format!("not measured (the curve point lost packets: {} lost)", t.outcome.lost()),
        Some(t) => f(t),
    })
}

fn devices(r: &Report) -> Vec<&Device> {
    r.ceiling.iter().chain(r.relays.iter()).collect()
}

fn max_cell(s: &Search) -> String {
    match (s.capped_at, s.tester_bound) {
        (Some(c), _) => format!(">= {c}"),
        (None, true) => format!("{} (TESTER-BOUND)", s.max_zero_loss),
        (None, false) => s.max_zero_loss.to_string(),
    }
}

/// Markdown summary of a report.
pub fn markdown(r: &Report) -> String {
    use Align::{Left as L, Right as R};
    let mut s = String::new();
    let _ = writeln!(s, "# v6gate bench trgw\n\n{}.\n", r.test);
    let _ = writeln!(
        s,
        "G.711: RTP header + 160-byte payload every {} ms ({}-byte IPv4 / {}-byte IPv6 frames), {} packets per stream \
         ({} in search trials); a packet later than {} ms counts as lost. Tester CPUs: {}; relay CPUs: {} \
         ({} relay threads); {} online CPUs; kernel {}.\n",
        r.interval_ms,
        r.frame_bytes.ipv4,
        r.frame_bytes.ipv6,
        r.packets,
        r.search_packets,
        r.budget_ms,
        r.tester_cpus,
        r.relay_cpus,
        r.relay_threads,
        r.online_cpus,
        r.kernel
    );
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    for d in r.ceiling.iter().flat_map(|c| c.directions.iter()) {
        if let Some(c) = &d.calibration {
            let _ = writeln!(
                s,
                "- Tester ceiling, {}: {} calls{} (calibration through kernel forwarding: offered {} calls, sent {:.0} \
                 packets/s); the searches start there.",
                d.direction.label(),
                c.ceiling_calls,
                if c.tester_bound { "" } else { " (the tester kept up at --max-calls)" },
                c.trial.calls,
                c.trial.outcome.sent_pps
            );
        }
    }
    let _ = writeln!(s, "\n## Maximum zero-loss concurrent calls\n");
    let _ = writeln!(
        s,
        "TESTER-BOUND: the search ended below a load the tester could not offer (it fell behind: send lag above \
         the jitter budget, or a rate short of the offered one), or the device carried the tester's whole \
         ceiling: the figure is the tester's, not the device's. \">= N\": no loss up to the bound N.\n"
    );
    let devs = devices(r);
    let dirs: Vec<Direction> = {
        let mut d: Vec<Direction> = devs.iter().flat_map(|d| d.directions.iter().map(|x| x.direction)).collect();
        d.sort();
        d.dedup();
        d
    };
    let mut rows = Vec::new();
    for d in &devs {
        let mut row = vec![d.name.clone()];
        for dir in &dirs {
            let cell = d
                .directions
                .iter()
                .find(|x| x.direction == *dir)
                .map(|x| match (&x.search, &x.error) {
                    (_, Some(_)) => "error".to_owned(),
                    (Some(s), None) => max_cell(s),
                    (None, None) => "-".to_owned(),
                })
                .unwrap_or_else(|| d.skipped.clone().map(|_| "skipped".into()).unwrap_or("-".into()));
            row.push(cell);
        }
        rows.push(row);
    }
    let mut headers = vec![("device", Align::Left)];
    headers.extend(dirs.iter().map(|d| (d.label(), Align::Right)));
    s.push_str(&markdown_table(&headers, &rows));
    // The ratios to rtpengine of every direction both were searched in
    // (the XDP bar: >= 10x in IPv6->IPv4 and IPv4->IPv6).
    for dev in ["v6gate", "v6gate-xdp"] {
        for dir in [Direction::V6v4, Direction::V4v6, Direction::Both] {
            if let (Some(a), Some(b)) = (zero_loss(r, dev, dir), zero_loss(r, "rtpengine", dir)) {
                if b > 0 {
                    let _ = writeln!(s, "\n{dev} / rtpengine ({}): {:.2}x", dir.label(), f64::from(a) / f64::from(b));
                }
            }
        }
    }
    // The XDP bar's latency: p99 one-way through the relay at 10,000
    // calls, from its curve point (one direction per XDP trial: the
    // bar's runs use the XDP tester).
    let xdp_run = r.tester == super::TesterKind::Xdp;
    for d in r.relays.iter().filter(|d| d.name == "v6gate-xdp") {
        let bar =
            |x: &&DirResult| x.points.iter().any(|t| t.calls == 10_000) || (xdp_run && x.direction != Direction::Both);
        for x in d.directions.iter().filter(bar) {
            let p99 = |t: &Trial| format!("{} µs", us(t.outcome.latency.p99_ns));
            if let Some(l) = curve_line(r, &d.name, x.direction, 10_000, p99) {
                let _ = writeln!(s, "\n{} p99 one-way latency at 10,000 calls ({}): {l}", d.name, x.direction.label());
            }
        }
    }
    // The second bar: average latency at 1,000 calls, from the
    // curve points (never a search trial).
    let avg = |t: &Trial| format!("{:.1} µs", t.outcome.latency.mean_ns as f64 / 1e3);
    let lines: Vec<String> = ["v6gate", "rtpengine"]
        .into_iter()
        .filter_map(|dev| Some(format!("{dev} {}", curve_line(r, dev, Direction::V6v4, 1000, avg)?)))
        .collect();
    if !lines.is_empty() {
        let _ = writeln!(s, "\nAverage latency at 1,000 calls (IPv6->IPv4): {}.", lines.join(", "));
    }
    for dir in &dirs {
        let _ = writeln!(s, "\n## {}\n", dir.label());
        let mut rows = Vec::new();
        for d in &devs {
            for x in d.directions.iter().filter(|x| x.direction == *dir) {
                for (kind, t) in all_trials(x) {
                    if let Some(n) = &t.note {
                        rows.push(vec![d.name.clone(), kind.into(), t.calls.to_string(), format!("not run: {n}")]);
                        continue;
                    }
                    let o = &t.outcome;
                    rows.push(vec![
                        d.name.clone(),
                        kind.into(),
                        t.calls.to_string(),
                        format!("{:.4}", o.loss_rate * 100.0),
                        o.missing.to_string(),
                        o.late.to_string(),
                        us(o.latency.mean_ns),
                        format!("{:.0}", o.latency.p50_ns as f64 / 1e3),
                        format!("{:.0}", o.latency.p99_ns as f64 / 1e3),
                        format!("{:.0}", o.latency.p999_ns as f64 / 1e3),
                        if o.rising_queue { "yes" } else { "no" }.into(),
                        t.relay_cpu.map(|c| format!("{:.0}", c * 100.0)).unwrap_or("-".into()),
                        format!("{:.0}", o.send_lag.p99_ns as f64 / 1e3),
                        match (&t.tester_bound, t.passed) {
                            (Some(_), _) => "TESTER-BOUND".into(),
                            (None, true) => "pass".into(),
                            (None, false) => "fail".into(),
                        },
                        t.fast_path.as_ref().map_or("-".into(), |f| {
                            format!("{:.1}", f.packets as f64 * 100.0 / (f.packets + f.passed).max(1) as f64)
                        }),
                    ]);
                }
                if let Some(e) = &x.error {
                    rows.push(vec![d.name.clone(), format!("error: {}", e.lines().next().unwrap_or(""))]);
                }
            }
        }
        s.push_str(&markdown_table(
            &[
                ("device", L),
                ("trial", L),
                ("calls", R),
                ("loss %", R),
                ("missing", R),
                ("late", R),
                ("avg µs", R),
                ("p50 µs", R),
                ("p99 µs", R),
                ("p99.9 µs", R),
                ("rising queue", L),
                ("relay CPU %", R),
                ("tester send lag p99 µs", R),
                ("verdict", L),
                ("XDP fast path %", R),
            ],
            &rows,
        ));
    }
    s
}

/// The maximum zero-loss calls found for `device` in `dir`, if searched.
pub fn zero_loss(r: &Report, device: &str, dir: Direction) -> Option<u32> {
    r.relays
        .iter()
        .find(|d| d.name == device)?
        .directions
        .iter()
        .find(|x| x.direction == dir)?
        .search
        .as_ref()
        .map(|s| s.max_zero_loss)
}

pub(super) fn write(r: &Report, o: &mut Outputs) -> Result<()> {
    o.json("results.json", r)?;
    o.text("results.md", &markdown(r))?;
    let devs = devices(r);
    let mut dirs: Vec<Direction> = devs.iter().flat_map(|d| d.directions.iter().map(|x| x.direction)).collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        let series = |f: &dyn Fn(&Trial) -> f64| -> Vec<Series> {
            devs.iter()
                .filter_map(|d| {
                    let x = d.directions.iter().find(|x| x.direction == dir)?;
                    let points: Vec<(f64, f64)> = plotted(x).iter().map(|t| (f64::from(t.calls), f(t))).collect();
                    (!points.is_empty()).then(|| Series { name: d.name.clone(), points })
                })
                .collect()
        };
        let loss = LinePlot {
            title: format!("Packet loss rate, {} (cf. NICI TrGW Fig. 8)", dir.label()),
            x_label: "concurrent calls".into(),
            y_label: "packet loss rate (%)".into(),
            series: series(&|t| t.outcome.loss_rate * 100.0),
        };
        let lat = LinePlot {
            title: format!("Average latency, {} (cf. NICI TrGW Fig. 9)", dir.label()),
            x_label: "concurrent calls".into(),
            y_label: "average latency (µs)".into(),
            series: series(&|t| t.outcome.latency.mean_ns as f64 / 1e3),
        };
        o.svg(&format!("fig8-loss-{}.svg", dir.key()), &loss)?;
        o.svg(&format!("fig9-latency-{}.svg", dir.key()), &lat)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::fake_trial;
    use super::super::FrameBytes;
    use super::*;
    use crate::tester::probe;

    fn device(name: &str, max: u32, avg_us: u64) -> Device {
        let mut t = fake_trial(1000, true);
        t.outcome.latency.mean_ns = avg_us * 1000;
        let search = Search {
            max_zero_loss: max,
            first_failure: Some(max + 10),
            capped_at: None,
            tester_bound: false,
            started_at: max,
            trials: vec![fake_trial(max, true)],
        };
        Device {
            name: name.into(),
            version: None,
            skipped: None,
            directions: vec![DirResult {
                direction: Direction::V6v4,
                points: vec![t],
                search: Some(search),
                calibration: None,
                error: None,
            }],
        }
    }

    /// The XDP relay: 15,000 calls searched, a trial at 10,000 with its
    /// fast-path share.
    fn xdp_device() -> Device {
        let mut d = device("v6gate-xdp", 15_000, 20);
        let mut t = fake_trial(10_000, true);
        t.outcome.latency.p99_ns = 640_000;
        t.fast_path = Some(crate::harness::fastpath::FastPath {
            function: "trgw".into(),
            packets: 990,
            passed: 10,
            passes: vec![("no-match".into(), 10)],
        });
        d.directions[0].points.push(t);
        // 40,000 calls: the relay refused them (a note, no media).
        let mut n = fake_trial(40_000, false);
        n.note = Some("the relay could not set up 40000 calls: too many open files".into());
        d.directions[0].points.push(n);
        // 20,000 calls: the tester fell behind (tester-bound, not passed).
        let mut b = fake_trial(20_000, false);
        b.unsent = 1234;
        b.tester_bound = Some("1234 of 21234 packets not sent in the trial's time".into());
        d.directions[0].points.push(b);
        d
    }

    /// A report of `relays` with a kernel row calibrated at 3,200 calls.
    fn report_of(relays: Vec<Device>) -> Report {
        let mut kernel = device("kernel forwarding (tester ceiling)", 3000, 10);
        let k = &mut kernel.directions[0];
        k.points.clear();
        let mut cal = fake_trial(8000, false);
        cal.outcome.sent_pps = 160_000.0;
        cal.tester_bound = Some("sent 160000 of 400000 packets/s offered (40.0 %)".into());
        k.calibration = Some(super::super::Calibration { ceiling_calls: 3200, tester_bound: true, trial: cal });
        if let Some(s) = &mut k.search {
            s.tester_bound = true;
            s.first_failure = None;
        }
        Report {
            test: "t",
            frame_bytes: FrameBytes { ipv4: 14 + 20 + 8 + probe::LEN, ipv6: 14 + 40 + 8 + probe::LEN },
            packets: 1,
            search_packets: 1,
            interval_ms: 20,
            budget_ms: 20,
            tester_cpus: "0".into(),
            relay_cpus: "1".into(),
            relay_threads: 1,
            realtime: false,
            tester: super::super::TesterKind::Udp,
            sockets_per_side: 1,
            batch: 1,
            online_cpus: 2,
            kernel: "k".into(),
            ceiling: Some(kernel),
            relays,
            notes: vec![],
            namespace_prefix: String::new(),
        }
    }

    #[test]
    fn report_lines_come_from_curve_points_only() {
        // v6gate's curve point at 1,000 calls lost packets; a search trial
        // at 1,000 passed: the line says "not measured", never the search's.
        let mut v = device("v6gate", 1000, 50);
        v.directions[0].points[0].passed = false;
        v.directions[0].points[0].outcome.missing = 3;
        let mut retry = fake_trial(1000, true);
        retry.outcome.latency.mean_ns = 7_000;
        v.directions[0].search.as_mut().unwrap().trials.push(retry);
        // rtpengine has no curve point at 1,000 calls.
        let mut e = device("rtpengine", 500, 80);
        e.directions[0].points[0].calls = 500;
        let md = markdown(&report_of(vec![v, e]));
        assert!(
            md.contains(
                "Average latency at 1,000 calls (IPv6->IPv4): v6gate not measured (the curve point lost packets: 3 \
                 lost), rtpengine not measured (no curve point at 1000 calls)."
            ),
            "{md}"
        );
        assert!(!md.contains("7.0 µs"), "never from a search trial: {md}");
        // A tester-bound curve point is not measured either.
        let mut t = device("v6gate", 1000, 50);
        t.directions[0].points[0].tester_bound = Some("send lag".into());
        let md = markdown(&report_of(vec![t]));
        assert!(md.contains("v6gate not measured (the curve point was TESTER-BOUND)."), "{md}");
        // The tester's ceiling and the kernel row's tester-bound figure.
        assert!(
            md.contains("- Tester ceiling, IPv6->IPv4: 3200 calls (calibration through kernel forwarding: offered 8000 calls, sent 160000 packets/s)"),
            "{md}"
        );
        assert!(md.contains("| kernel forwarding (tester ceiling) | 3000 (TESTER-BOUND) |"), "{md}");
        let json = serde_json::to_value(report_of(vec![])).unwrap();
        assert_eq!(json["ceiling"]["directions"][0]["calibration"]["ceiling_calls"], 3200);
    }

    #[test]
    fn report_states_the_bars_and_writes_plots() {
        let mut r = report_of(vec![device("v6gate", 3000, 50), xdp_device(), device("rtpengine", 1500, 80)]);
        r.tester = super::super::TesterKind::Xdp;
        r.ceiling = None;
        assert_eq!((r.frame_bytes.ipv4, r.frame_bytes.ipv6), (214, 234), "the paper's G.711 frames");
        let md = markdown(&r);
        assert!(md.contains("| v6gate | 3000 |"), "{md}");
        assert!(md.contains("v6gate / rtpengine (IPv6->IPv4): 2.00x"), "{md}");
        assert!(md.contains("v6gate-xdp / rtpengine (IPv6->IPv4): 10.00x"), "{md}");
        assert!(md.contains("v6gate-xdp p99 one-way latency at 10,000 calls (IPv6->IPv4): 640.0 µs\n"), "{md}");
        let udp = report_of(vec![device("v6gate-xdp", 3000, 40)]);
        assert!(
            !markdown(&udp).contains("at 10,000 calls"),
            "no 10,000-call line without such a point in a socket run"
        );
        assert!(md.contains("| v6gate-xdp | curve | 10000 |") && md.contains("| pass | 99.0 |"), "{md}");
        assert!(md.contains("| v6gate-xdp | search | 15000 |"), "{md}");
        assert!(
            md.contains(
                "| v6gate-xdp | curve | 40000 | not run: the relay could not set up 40000 calls: too many open files |"
            ),
            "a refused trial is a row with its note: {md}"
        );
        assert!(md.contains("| v6gate-xdp | curve | 20000 |") && md.contains("| TESTER-BOUND | - |"), "{md}");
        assert!(md.contains("Average latency at 1,000 calls (IPv6->IPv4): v6gate 50.0 µs, rtpengine 80.0 µs."), "{md}");
        assert_eq!(zero_loss(&r, "rtpengine", Direction::V6v4), Some(1500));
        let dir = std::env::temp_dir().join(lab::netns::unique_name("v6gate-bench-report"));
        let mut o = Outputs::create(&dir).unwrap();
        write(&r, &mut o).unwrap();
        assert!(o.summary().starts_with("wrote results.json, results.md, fig8-loss-v6v4.svg"), "{}", o.summary());
        let svg = std::fs::read_to_string(dir.join("fig8-loss-v6v4.svg")).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 3, "one line per relay");
        assert!(!svg.contains("40000") && !svg.contains("40,000"), "the refused trial is not plotted");
        assert!(dir.join("fig9-latency-v6v4.svg").exists());
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
        let tb = &json["relays"][1]["directions"][0]["points"][3];
        assert_eq!(tb["tester_bound"], "1234 of 21234 packets not sent in the trial's time", "a field per trial: {tb}");
        assert_eq!(json["relays"][1]["directions"][0]["search"]["tester_bound"], false, "and per row");
        assert_eq!(json["relays"][1]["directions"][0]["points"][1]["fast_path"]["packets"], 990);
        assert!(json["relays"][0]["directions"][0]["points"][0].get("fast_path").is_none(), "only the XDP relay's");
        let t = &json["relays"][0]["directions"][0]["points"][0];
        assert_eq!((t["calls"].as_u64(), t["latency"]["mean_ns"].as_u64()), (Some(1000), Some(50_000)), "{t}");
        assert!(t["passed"].as_bool().unwrap() && t["rising_queue"].is_boolean(), "the outcome is flattened: {t}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
