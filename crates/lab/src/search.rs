//! RFC 2544 §26.1 / RFC 8219 §7.1 throughput search: the highest rate at
//! which a trial loses no frame, found by binary search between 0 and the
//! maximum rate.

use anyhow::Result;

/// Search parameters.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    /// Highest rate tried (frames per second); tried first.
    pub max: f64,
    /// Stop when the bracket is narrower than this share of its upper end.
    pub resolution: f64,
    /// Stop after this many trials at the latest.
    pub max_trials: usize,
}

/// The outcome: the highest passing rate (0 when none passed) and every
/// trial in order as (rate, passed).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// Highest rate that passed.
    pub rate: f64,
    /// Trials as (rate, passed).
    pub trials: Vec<(f64, bool)>,
}

impl Search {
    /// Runs the search; `trial(rate)` says whether a trial at `rate` lost
    /// nothing. Stops early once the bracket is within `resolution`.
    pub fn run(&self, mut trial: impl FnMut(f64) -> Result<bool>) -> Result<Found> {
        let mut trials = Vec::new();
        let max_trials = self.max_trials.max(1);
        let pass = trial(self.max)?;
        trials.push((self.max, pass));
        if pass {
            return Ok(Found { rate: self.max, trials });
        }
        let (mut lo, mut hi) = (0.0f64, self.max);
        while trials.len() < max_trials && hi - lo > self.resolution * hi {
            let mid = (lo + hi) / 2.0;
            let pass = trial(mid)?;
            trials.push((mid, pass));
            if pass {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(Found { rate: lo, trials })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(max: f64) -> Search {
        Search { max, resolution: 0.01, max_trials: 30 }
    }

    #[test]
    fn converges_on_the_threshold_from_below() {
        for threshold in [1.0, 333_333.0, 999_000.0] {
            let f = s(1e6).run(|r| Ok(r <= threshold)).unwrap();
            assert!(f.rate <= threshold, "never reports a failing rate");
            assert!(f.rate >= threshold * 0.98, "{} vs {threshold}", f.rate);
            assert!(f.trials.iter().all(|&(r, p)| p == (r <= threshold)));
        }
    }

    #[test]
    fn max_passing_ends_after_one_trial() {
        let f = s(1000.0).run(|_| Ok(true)).unwrap();
        assert_eq!(f, Found { rate: 1000.0, trials: vec![(1000.0, true)] });
    }

    #[test]
    fn nothing_passing_gives_zero_and_respects_the_trial_budget() {
        let f = Search { max: 1e6, resolution: 0.0, max_trials: 7 }.run(|_| Ok(false)).unwrap();
        assert_eq!(f.rate, 0.0);
        assert_eq!(f.trials.len(), 7);
    }

    #[test]
    fn errors_stop_the_search() {
        let mut n = 0;
        let e = s(100.0).run(|_| {
            n += 1;
            anyhow::ensure!(n < 3, "DUT died");
            Ok(false)
        });
        assert!(e.is_err());
        assert_eq!(n, 3);
    }
}
