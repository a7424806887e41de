//! Reporting shared by every bench: latency histograms and percentiles,
//! JSON and Markdown helpers, and SVG line plots (one line per device,
//! like the papers' figures), written by hand so the output has no
//! dependencies and diffs well.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

/// A latency histogram with 1 µs bins up to a limit, plus an overflow
/// count. Exact mean (sum of the raw nanoseconds); percentiles to 1 µs.
/// Cheap to record into (one add), cheap to merge.
#[derive(Debug, Clone)]
pub struct Histogram {
    bins: Vec<u64>,
    overflow: u64,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

/// Width of one histogram bin.
pub const BIN_NS: u64 = 1_000;

impl Histogram {
    /// A histogram with 1 µs bins covering `[0, limit_ns)`.
    pub fn new(limit_ns: u64) -> Self {
        let n = (limit_ns / BIN_NS).max(1) as usize;
        Histogram { bins: vec![0; n], overflow: 0, count: 0, sum_ns: 0, max_ns: 0 }
    }

    /// Records one sample.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let i = (ns / BIN_NS) as usize;
        match self.bins.get_mut(i) {
            Some(b) => *b += 1,
            None => self.overflow += 1,
        }
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every sample of `other` (same bin layout or not).
    pub fn merge(&mut self, other: &Histogram) {
        if self.bins.len() < other.bins.len() {
            self.bins.resize(other.bins.len(), 0);
        }
        for (a, b) in self.bins.iter_mut().zip(&other.bins) {
            *a += b;
        }
        self.overflow += other.overflow;
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean in nanoseconds (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64
        }
    }

    /// The `q` quantile (0..=1) in nanoseconds: the upper edge of the bin
    /// that holds it, or the maximum when it falls in the overflow.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, b) in self.bins.iter().enumerate() {
            seen += b;
            if seen >= rank {
                return ((i as u64 + 1) * BIN_NS).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// Count, mean, median, p99, p99.9 and maximum, in microseconds.
    pub fn summary(&self) -> Summary {
        let us = |ns: u64| ns as f64 / 1e3;
        Summary {
            count: self.count,
            mean_us: self.mean_ns() / 1e3,
            p50_us: us(self.quantile_ns(0.5)),
            p99_us: us(self.quantile_ns(0.99)),
            p999_us: us(self.quantile_ns(0.999)),
            max_us: us(self.max_ns),
        }
    }
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

/// A GitHub-flavoured Markdown table.
pub fn markdown_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", headers.join(" | "));
    let _ = writeln!(s, "|{}|", headers.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
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
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            l + pw / 2.0,
            esc(&self.title)
        );
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
        let _ = writeln!(s, r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            l + pw / 2.0,
            h - 18.0,
            esc(&self.x_label)
        );
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
    fn histogram_percentiles_and_mean() {
        let mut h = Histogram::new(10_000_000);
        for us in 1..=1000u64 {
            h.record(us * 1000 - 500); // 0.5 µs inside bin us-1
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert!((s.mean_us - 500.0).abs() < 0.01, "{s:?}");
        assert_eq!(s.p50_us, 500.0);
        assert_eq!(s.p99_us, 990.0);
        assert_eq!(s.p999_us, 999.0);
        assert_eq!(s.max_us, 999.5);
    }

    #[test]
    fn histogram_overflow_and_merge() {
        let mut a = Histogram::new(1_000_000);
        a.record(5_000_000);
        let mut b = Histogram::new(2_000_000);
        b.record(1_500_000);
        b.record(10);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.quantile_ns(0.2), 1000);
        assert_eq!(a.quantile_ns(0.5), 1_501_000);
        assert_eq!(a.quantile_ns(1.0), 5_000_000);
        assert_eq!(Histogram::new(1000).summary(), Summary::default());
    }

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
    fn markdown() {
        let t = markdown_table(&["a", "b"], &[vec!["1".into(), "2".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}
