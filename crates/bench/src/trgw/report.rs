//! `bench trgw`'s outputs: results.json, results.md (maximum zero-loss
//! calls, one table per direction) and the Figure 8/9 plots.

use anyhow::Result;
use std::fmt::Write as _;

use super::{Device, DirResult, Direction, Report, Search, Trial};
use crate::harness::latency::us;
use crate::report::{markdown_table, Align, LinePlot, Outputs, Series};

/// Every trial of a device in a direction (curve points and search), by
/// number of calls; for equal N the later trial wins.
fn all_trials(d: &DirResult) -> Vec<&Trial> {
    let mut v: Vec<&Trial> = d.points.iter().chain(d.search.iter().flat_map(|s| s.trials.iter())).collect();
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

fn devices(r: &Report) -> Vec<&Device> {
    r.ceiling.iter().chain(r.relays.iter()).collect()
}

fn max_cell(s: &Search) -> String {
    match s.capped_at {
        Some(c) => format!(">= {c}"),
        None => s.max_zero_loss.to_string(),
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
         ({} relay threads); {} online CPUs; kernel {}. Generator: {}.\n",
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
        r.kernel,
        r.generator
    );
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    let _ = writeln!(s, "\n## Maximum zero-loss concurrent calls\n");
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
    // The XDP bar's latency: p99 one-way through the relay at 10,000 calls.
    for d in r.relays.iter().filter(|d| d.name == "v6gate-xdp") {
        for x in &d.directions {
            if let Some(t) = all_trials(x).into_iter().find(|t| t.calls == 10_000) {
                if let Some(n) = &t.note {
                    let _ = writeln!(s, "\n{} at 10,000 calls ({}): not run: {n}", d.name, x.direction.label());
                    continue;
                }
                let _ = writeln!(
                    s,
                    "\n{} p99 one-way latency at 10,000 calls ({}): {} µs{}",
                    d.name,
                    x.direction.label(),
                    us(t.outcome.latency.p99_ns),
                    if t.passed { "" } else { " (the trial lost packets)" }
                );
            }
        }
    }
    // The second bar: average latency at 1,000 calls.
    let at_1000 = |dev: &str| {
        let d = r.relays.iter().find(|d| d.name == dev)?;
        let x = d.directions.iter().find(|x| x.direction == Direction::V6v4)?;
        all_trials(x)
            .into_iter()
            .find(|t| t.calls == 1000 && t.note.is_none())
            .map(|t| t.outcome.latency.mean_ns as f64 / 1e3)
    };
    if let (Some(a), Some(b)) = (at_1000("v6gate"), at_1000("rtpengine")) {
        let _ = writeln!(s, "\nAverage latency at 1,000 calls (IPv6->IPv4): v6gate {a:.1} µs, rtpengine {b:.1} µs.");
    }
    for dir in &dirs {
        let _ = writeln!(s, "\n## {}\n", dir.label());
        let mut rows = Vec::new();
        for d in &devs {
            for x in d.directions.iter().filter(|x| x.direction == *dir) {
                for t in all_trials(x) {
                    if let Some(n) = &t.note {
                        rows.push(vec![d.name.clone(), t.calls.to_string(), format!("not run: {n}")]);
                        continue;
                    }
                    let o = &t.outcome;
                    rows.push(vec![
                        d.name.clone(),
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
                        match t.unsent {
                            0 => format!("{:.0}", o.send_lag.p99_ns as f64 / 1e3),
                            u => format!("{:.0} (tester-bound: {u} not sent)", o.send_lag.p99_ns as f64 / 1e3),
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
                    // Trials whose media did not run have no loss or latency to plot.
                    let points: Vec<(f64, f64)> =
                        all_trials(x).iter().filter(|t| t.note.is_none()).map(|t| (f64::from(t.calls), f(t))).collect();
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
        // 20,000 calls: the tester fell behind (tester-bound, failed).
        let mut b = fake_trial(20_000, false);
        b.unsent = 1234;
        d.directions[0].points.push(b);
        d
    }

    #[test]
    fn report_states_the_bars_and_writes_plots() {
        let r = Report {
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
            tester: super::super::TesterKind::Xdp,
            generator: "xdp (BPF_PROG_RUN live frames; XDP receiver)".into(),
            sockets_per_side: 1,
            batch: 1,
            online_cpus: 2,
            kernel: "k".into(),
            ceiling: None,
            relays: vec![device("v6gate", 3000, 50), xdp_device(), device("rtpengine", 1500, 80)],
            notes: vec![],
            namespace_prefix: String::new(),
        };
        assert_eq!((r.frame_bytes.ipv4, r.frame_bytes.ipv6), (214, 234), "the paper's G.711 frames");
        let md = markdown(&r);
        assert!(md.contains("| v6gate | 3000 |"), "{md}");
        assert!(md.contains("v6gate / rtpengine (IPv6->IPv4): 2.00x"), "{md}");
        assert!(md.contains("v6gate-xdp / rtpengine (IPv6->IPv4): 10.00x"), "{md}");
        assert!(md.contains("v6gate-xdp p99 one-way latency at 10,000 calls (IPv6->IPv4): 640.0 µs\n"), "{md}");
        assert!(md.contains("| v6gate-xdp | 10000 |") && md.contains("| 99.0 |"), "{md}");
        assert!(
            md.contains(
                "| v6gate-xdp | 40000 | not run: the relay could not set up 40000 calls: too many open files |"
            ),
            "a refused trial is a row with its note: {md}"
        );
        assert!(md.contains("| 0 (tester-bound: 1234 not sent) |"), "{md}");
        assert!(md.contains("Generator: xdp (BPF_PROG_RUN live frames; XDP receiver)."), "{md}");
        assert!(md.contains("v6gate 50.0 µs, rtpengine 80.0 µs"), "{md}");
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
        assert_eq!(json["relays"][1]["directions"][0]["points"][1]["fast_path"]["packets"], 990);
        assert!(json["relays"][0]["directions"][0]["points"][0].get("fast_path").is_none(), "only the XDP relay's");
        let t = &json["relays"][0]["directions"][0]["points"][0];
        assert_eq!((t["calls"].as_u64(), t["latency"]["mean_ns"].as_u64()), (Some(1000), Some(50_000)), "{t}");
        assert!(t["passed"].as_bool().unwrap() && t["rising_queue"].is_boolean(), "the outcome is flattened: {t}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
