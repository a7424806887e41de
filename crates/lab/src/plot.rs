//! A small SVG line plot (several named series over a shared numeric x
//! axis) for the bench's figures. No dependencies; the output is a
//! self-contained SVG file that browsers and GitHub render.

use std::fmt::Write as _;

/// One line of a plot.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y), drawn in the order given.
    pub points: Vec<(f64, f64)>,
}

/// A line plot.
#[derive(Debug, Clone)]
pub struct Plot {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" axis maximum: 1, 2 or 5 times a power of ten at or above `v`.
fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

impl Plot {
    /// Renders the plot as an SVG document.
    pub fn svg(&self) -> String {
        let (w, h) = (720.0, 440.0);
        let (l, r, t, b) = (80.0, 190.0, 40.0, 60.0);
        let pw = w - l - r;
        let ph = h - t - b;
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let xmin = pts.clone().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let xmax = pts.clone().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        let ymax = nice_max(pts.map(|p| p.1).fold(0.0, f64::max));
        let (xmin, xmax) = if xmin.is_finite() && xmax > xmin { (xmin, xmax) } else { (0.0, 1.0) };
        let sx = |x: f64| l + (x - xmin) / (xmax - xmin) * pw;
        let sy = |y: f64| t + ph - y / ymax * ph;
        let mut o = String::new();
        let _ = writeln!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            o,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            l + pw / 2.0,
            esc(&self.title)
        );
        for i in 0..=5 {
            let y = ymax * f64::from(i) / 5.0;
            let _ = writeln!(
                o,
                r##"<line x1="{l}" x2="{0}" y1="{1}" y2="{1}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
                l + pw,
                sy(y),
                l - 6.0,
                sy(y) + 4.0,
                fmt_tick(y)
            );
        }
        let mut xs: Vec<f64> = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for x in xs {
            let _ =
                writeln!(o, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, sx(x), t + ph + 18.0, fmt_tick(x));
        }
        let _ = writeln!(o, r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            l + pw / 2.0,
            h - 15.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            o,
            r#"<text transform="translate(20 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
            t + ph / 2.0,
            esc(&self.y_label)
        );
        for (i, s) in self.series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let path: Vec<String> = s.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
            let _ = writeln!(o, r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#, path.join(" "));
            for &(x, y) in &s.points {
                let _ = writeln!(o, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, sx(x), sy(y));
            }
            let ly = t + 10.0 + 18.0 * i as f64;
            let _ = writeln!(
                o,
                r#"<line x1="{0}" x2="{1}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="3"/><text x="{2}" y="{3}">{4}</text>"#,
                l + pw + 10.0,
                l + pw + 30.0,
                l + pw + 36.0,
                ly + 4.0,
                esc(&s.name)
            );
        }
        o.push_str("</svg>\n");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_series_and_escapes_text() {
        let p = Plot {
            title: "a < b".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![
                Series { name: "one".into(), points: vec![(84.0, 1.0), (1518.0, 0.5)] },
                Series { name: "two & three".into(), points: vec![(84.0, 2.5)] },
            ],
        };
        let s = p.svg();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("a &lt; b") && s.contains("two &amp; three"));
        assert!(!s.contains("NaN"));
    }

    #[test]
    fn empty_plot_is_still_valid() {
        let s = Plot { title: "t".into(), x_label: "x".into(), y_label: "y".into(), series: vec![] }.svg();
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn nice_axis_maximum() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(120.0), 200.0);
        assert_eq!(nice_max(1000.0), 1000.0);
    }
}
