//! Metric families as data: a function reports its counters and gauges as
//! [`Family`] values (name, help, type, samples) and the host encodes
//! them (gate's admin API: OpenMetrics text via `prometheus-client`)
//! without knowing which function they came from.

/// One label set: (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;

/// A metric family: name (counters without their `_total`, which the
/// encoder appends), help, type and samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Full name, e.g. `v6gate_drops` (exposed as `v6gate_drops_total`).
    pub name: String,
    /// Help text.
    pub help: &'static str,
    /// Counter (monotonic) or gauge.
    pub counter: bool,
    /// (labels, value) samples.
    pub samples: Vec<(Labels, f64)>,
}

impl Family {
    /// A counter family without samples yet.
    pub fn counter(name: impl Into<String>, help: &'static str) -> Self {
        Family { name: name.into(), help, counter: true, samples: Vec::new() }
    }

    /// A gauge family without samples yet.
    pub fn gauge(name: impl Into<String>, help: &'static str) -> Self {
        Family { name: name.into(), help, counter: false, samples: Vec::new() }
    }

    /// With one sample without labels.
    pub fn one(mut self, v: impl Into<f64>) -> Self {
        self.samples.push((Vec::new(), v.into()));
        self
    }

    /// With one more sample.
    pub fn with(mut self, labels: Labels, v: impl Into<f64>) -> Self {
        self.samples.push((labels, v.into()));
        self
    }

    /// With one sample per pair, labelled `key`.
    pub fn by(mut self, key: &'static str, pairs: impl IntoIterator<Item = (impl ToString, u64)>) -> Self {
        for (k, v) in pairs {
            self.samples.push((vec![(key, k.to_string())], v as f64));
        }
        self
    }

    /// The sample with exactly these labels, if any (for tests and probes).
    pub fn value(&self, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|(l, _)| l.len() == labels.len() && l.iter().zip(labels).all(|((k, v), (k2, v2))| k == k2 && v == v2))
            .map(|(_, v)| *v)
    }
}

/// A counter name as a label value: `drop_spoofed` -> `drop-spoofed`.
pub fn label(s: &str) -> String {
    s.replace('_', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_keep_type_labels_and_values() {
        let f = Family::counter("v6gate_x", "X.").by("event", [("a", 1), ("b", 2)]).with(vec![("k", "v".into())], 3.5);
        assert!(f.counter);
        assert_eq!(f.value(&[("event", "b")]), Some(2.0));
        assert_eq!(f.value(&[("k", "v")]), Some(3.5));
        assert_eq!(f.value(&[("event", "c")]), None);
        let g = Family::gauge("v6gate_y", "Y.").one(7u32);
        assert!(!g.counter);
        assert_eq!(g.value(&[]), Some(7.0));
        assert_eq!(label("fins_stale"), "fins-stale");
    }
}
