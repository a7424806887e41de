//! The one report module of every bench: the output directory, JSON,
//! Markdown tables and SVG line plots (one line per device, like the
//! papers' figures; written by hand so the output has no dependencies and
//! diffs well). Latency summaries come from [`crate::harness::latency`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Serialize;

/// A run's output directory: created on first use; every file written
/// is listed for the closing message.
#[derive(Debug)]
pub struct Outputs {
    dir: PathBuf,
    written: Vec<String>,
}

impl Outputs {
    /// Creates `dir` (and its parents).
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Outputs { dir: dir.to_path_buf(), written: Vec::new() })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `name` with `text`.
    pub fn text(&mut self, name: &str, text: &str) -> Result<()> {
        let p = self.dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        self.written.push(name.to_owned());
        Ok(())
    }

    /// Writes `name` as pretty JSON.
    pub fn json<T: Serialize>(&mut self, name: &str, value: &T) -> Result<()> {
        let mut s = serde_json::to_string_pretty(value)?;
        s.push('\n');
        self.text(name, &s)
    }

    /// Writes `name` as the SVG of `plot`.
    pub fn svg(&mut self, name: &str, plot: &LinePlot) -> Result<()> {
        self.text(name, &plot.to_svg())
    }

    /// Writes `name` as the SVG of histogram `plot`.
    pub fn histogram(&mut self, name: &str, plot: &HistPlot) -> Result<()> {
        self.text(name, &plot.to_svg())
    }

    /// "wrote DIR/a, b and c".
    pub fn summary(&self) -> String {
        let names = match self.written.as_slice() {
            [] => "nothing".to_owned(),
            [one] => one.clone(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        };
        format!("wrote {names} in {}", self.dir.display())
    }
}

/// Online CPUs of this machine.
pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned()
}

/// Column alignment of a Markdown table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A GitHub-flavoured Markdown table; rows shorter than the header are
/// padded with empty cells (a status row, an error row).
pub fn markdown_table(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let names: Vec<&str> = headers.iter().map(|h| h.0).collect();
    let _ = writeln!(s, "| {} |", names.join(" | "));
    let rule: Vec<&str> = headers.iter().map(|h| if h.1 == Align::Right { "---:" } else { "---" }).collect();
    let _ = writeln!(s, "|{}|", rule.join("|"));
    for r in rows {
        let mut cells = r.clone();
        cells.resize(cells.len().max(headers.len()), String::new());
        let _ = writeln!(s, "| {} |", cells.join(" | "));
    }
    s
}

/// One line of a plot.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub name: String,
    /// (x, y) points; drawn in x order.
    pub points: Vec<(f64, f64)>,
}

/// A line plot with linear axes starting at zero.
#[derive(Debug, Clone)]
pub struct LinePlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const COLOURS: [&str; 6] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
const MARKERS: [&str; 3] = ["circle", "square", "triangle"];

/// A "nice" axis maximum and tick step covering `max` (1, 2, 2.5 or 5 times
/// a power of ten, about five ticks).
pub fn nice_axis(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Horizontal grid lines from 0 to `ymax` every `ystep`, labelled on the
/// left axis at `l`; `sy` maps a value to its y coordinate.
fn y_grid(s: &mut String, l: f64, pw: f64, (ymax, ystep): (f64, f64), sy: impl Fn(f64) -> f64) {
    let mut y = 0.0;
    while y <= ymax + ystep / 2.0 {
        let py = sy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{l}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#e0e0e0"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            l + pw,
            l - 6.0,
            py + 4.0,
            tick_label(y)
        );
        y += ystep;
    }
}

/// The plot area's frame and the x axis label under it (`h`: the image height).
fn frame_and_x_label(s: &mut String, (l, t, pw, ph): (f64, f64, f64, f64), h: f64, x_label: &str) {
    let _ = writeln!(s, r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, l + pw / 2.0, h - 18.0, esc(x_label));
}

fn tick_label(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e9 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

impl LinePlot {
    /// The plot as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let (w, h) = (720.0, 440.0);
        let (l, r, t, b) = (80.0, 170.0, 40.0, 60.0);
        let (pw, ph) = (w - l - r, h - t - b);
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let xmax = pts.clone().map(|p| p.0).fold(0.0, f64::max);
        let ymax = pts.map(|p| p.1).fold(0.0, f64::max);
        let (xmax, xstep) = nice_axis(xmax);
        let (ymax, ystep) = nice_axis(ymax);
        let sx = |x: f64| l + x / xmax * pw;
        let sy = |y: f64| t + ph - y / ymax * ph;
        let mut s = svg_head(w, h, l + pw / 2.0, &self.title);
        // Grid and ticks.
        let mut x = 0.0;
        while x <= xmax + xstep / 2.0 {
            let px = sx(x);
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" y1="{t}" x2="{px:.1}" y2="{}" stroke="#e0e0e0"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
                t + ph,
                t + ph + 16.0,
                tick_label(x)
            );
            x += xstep;
        }
        y_grid(&mut s, l, pw, (ymax, ystep), sy);
        frame_and_x_label(&mut s, (l, t, pw, ph), h, &self.x_label);
        let _ = writeln!(
            s,
            r#"<text transform="translate(20 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
            t + ph / 2.0,
            esc(&self.y_label)
        );
        for (i, ser) in self.series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let mut p = ser.points.clone();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !p.is_empty() {
                let path: Vec<String> = p.iter().map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y))).collect();
                let _ =
                    writeln!(s, r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#, path.join(" "));
            }
            for (x, y) in &p {
                let _ = writeln!(s, "{}", marker(MARKERS[i % MARKERS.len()], sx(*x), sy(*y), c));
            }
            let ly = t + 10.0 + i as f64 * 20.0;
            let lx = l + pw + 12.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/>{}<text x="{}" y="{}">{}</text>"#,
                lx + 24.0,
                marker(MARKERS[i % MARKERS.len()], lx + 12.0, ly, c),
                lx + 30.0,
                ly + 4.0,
                esc(&ser.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// A histogram with its cumulative share (the papers' "histogram with a
/// quantile" figures): bars of equal width, the cumulative percentage as a
/// line on a right-hand axis, and vertical markers (e.g. the 80th
/// percentile).
#[derive(Debug, Clone)]
pub struct HistPlot {
    pub title: String,
    pub x_label: String,
    /// (lower edge, count) per bin, in order; all bins `width` wide.
    pub bins: Vec<(f64, u64)>,
    pub width: f64,
    /// (label, x) vertical lines.
    pub markers: Vec<(String, f64)>,
}

impl HistPlot {
    /// Bins `samples` into `n` bins from 0 to their maximum (rounded to a
    /// nice axis).
    pub fn from_samples(title: &str, x_label: &str, samples: &[f64], n: usize) -> HistPlot {
        let max = samples.iter().copied().fold(0.0, f64::max);
        let (top, _) = nice_axis(max.max(f64::MIN_POSITIVE));
        let n = n.max(1);
        let width = top / n as f64;
        let mut bins: Vec<(f64, u64)> = (0..n).map(|i| (i as f64 * width, 0)).collect();
        for &x in samples {
            let i = ((x / width) as usize).min(n - 1);
            bins[i].1 += 1;
        }
        HistPlot { title: title.into(), x_label: x_label.into(), bins, width, markers: Vec::new() }
    }

    /// The plot as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let (w, h) = (720.0, 440.0);
        let (l, r, t, b) = (70.0, 70.0, 40.0, 60.0);
        let (pw, ph) = (w - l - r, h - t - b);
        let total: u64 = self.bins.iter().map(|b| b.1).sum();
        let xmax = self.bins.last().map_or(1.0, |b| b.0 + self.width).max(f64::MIN_POSITIVE);
        let (ymax, ystep) = nice_axis(self.bins.iter().map(|b| b.1).max().unwrap_or(0) as f64);
        let sx = |x: f64| l + x / xmax * pw;
        let sy = |y: f64| t + ph - y / ymax * ph;
        let sp = |p: f64| t + ph - p / 100.0 * ph;
        let mut s = svg_head(w, h, l + pw / 2.0, &self.title);
        y_grid(&mut s, l, pw, (ymax, ystep), sy);
        for p in [0.0, 20.0, 40.0, 60.0, 80.0, 100.0] {
            let _ = writeln!(s, r#"<text x="{}" y="{:.1}">{}%</text>"#, l + pw + 6.0, sp(p) + 4.0, p);
        }
        let (_, xstep) = nice_axis(xmax);
        let mut x = 0.0;
        while x <= xmax + xstep / 2.0 {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                sx(x),
                t + ph + 16.0,
                tick_label(x)
            );
            x += xstep;
        }
        for (x0, c) in &self.bins {
            if *c == 0 {
                continue;
            }
            let (x1, x2) = (sx(*x0), sx(x0 + self.width));
            let _ = writeln!(
                s,
                r##"<rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#1f77b4" stroke="white"/>"##,
                sy(*c as f64),
                (x2 - x1).max(0.5),
                t + ph - sy(*c as f64)
            );
        }
        if total > 0 {
            let mut acc = 0u64;
            let mut pts = vec![format!("{:.1},{:.1}", sx(0.0), sp(0.0))];
            for (x0, c) in &self.bins {
                acc += c;
                pts.push(format!("{:.1},{:.1}", sx(x0 + self.width), sp(acc as f64 * 100.0 / total as f64)));
            }
            let _ = writeln!(
                s,
                r##"<polyline fill="none" stroke="#d62728" stroke-width="2" points="{}"/>"##,
                pts.join(" ")
            );
        }
        for (i, (label, x)) in self.markers.iter().enumerate() {
            let px = sx(*x);
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" y1="{t}" x2="{px:.1}" y2="{}" stroke="#2ca02c" stroke-dasharray="4 3"/><text x="{:.1}" y="{}" fill="#2ca02c">{}</text>"##,
                t + ph,
                px + 4.0,
                t + 14.0 + 14.0 * i as f64,
                esc(label)
            );
        }
        frame_and_x_label(&mut s, (l, t, pw, ph), h, &self.x_label);
        let _ = writeln!(
            s,
            r#"<text transform="translate(20 {}) rotate(-90)" text-anchor="middle">calls</text>"#,
            t + ph / 2.0
        );
        let _ = writeln!(
            s,
            r##"<text transform="translate({} {}) rotate(90)" text-anchor="middle" fill="#d62728">cumulative share</text>"##,
            w - 14.0,
            t + ph / 2.0
        );
        s.push_str("</svg>\n");
        s
    }
}

/// An SVG document's start: its size, a white background and the title
/// centred on `title_x`.
fn svg_head(w: f64, h: f64, title_x: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{title_x}" y="22" text-anchor="middle" font-size="15">{}</text>"#, esc(title));
    s
}

fn marker(kind: &str, x: f64, y: f64, c: &str) -> String {
    match kind {
        "square" => format!(r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{c}"/>"#, x - 3.5, y - 3.5),
        "triangle" => format!(
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{c}"/>"#,
            x,
            y - 4.5,
            x - 4.5,
            y + 3.5,
            x + 4.5,
            y + 3.5
        ),
        _ => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{c}"/>"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(2000.0), (2000.0, 500.0));
        assert_eq!(nice_axis(37.0), (40.0, 10.0));
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
        assert_eq!(nice_axis(0.9), (1.0, 0.2));
    }

    #[test]
    fn svg_has_one_line_per_series() {
        let p = LinePlot {
            title: "Loss <rate>".into(),
            x_label: "calls".into(),
            y_label: "%".into(),
            series: vec![
                Series { name: "a".into(), points: vec![(100.0, 0.0), (200.0, 1.5)] },
                Series { name: "b&c".into(), points: vec![(100.0, 0.0)] },
            ],
        };
        let svg = p.to_svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("Loss &lt;rate&gt;") && svg.contains("b&amp;c"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn histogram_bins_every_sample_and_draws_its_cumulative_line() {
        let samples: Vec<f64> = (0..100).map(|i| f64::from(i) / 10.0).collect();
        let mut h = HistPlot::from_samples("Call setup <IPv6>", "ms", &samples, 10);
        assert_eq!(h.bins.iter().map(|b| b.1).sum::<u64>(), 100);
        assert_eq!(h.bins.len(), 10);
        h.markers.push(("80 %".into(), 8.0));
        let svg = h.to_svg();
        assert!(svg.contains("Call setup &lt;IPv6&gt;") && svg.contains("80 %"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.matches("<rect").count() >= 10, "background, bars, frame");
    }

    #[test]
    fn markdown() {
        let t = markdown_table(
            &[("a", Align::Left), ("b", Align::Right)],
            &[vec!["1".into(), "2".into()], vec!["x".into()]],
        );
        assert_eq!(t, "| a | b |\n|---|---:|\n| 1 | 2 |\n| x |  |\n");
    }

    #[test]
    fn outputs_list_what_they_wrote() {
        let dir = std::env::temp_dir().join(lab::netns::unique_name("v6gate-bench-out")).join("sub");
        let mut o = Outputs::create(&dir).unwrap();
        o.json("r.json", &serde_json::json!({"a": 1})).unwrap();
        o.text("r.md", "# r\n").unwrap();
        o.svg("p.svg", &LinePlot { title: "t".into(), x_label: "x".into(), y_label: "y".into(), series: vec![] })
            .unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("r.json")).unwrap(), "{\n  \"a\": 1\n}\n");
        assert_eq!(o.summary(), format!("wrote r.json, r.md and p.svg in {}", dir.display()));
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
