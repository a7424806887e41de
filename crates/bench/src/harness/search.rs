//! The search for the highest load a device carries without loss: frames
//! per second in `bench xlat` (RFC 2544 §26.1 / RFC 8219 §7.1 throughput:
//! the first trial at the maximum, then binary search between 0 and it),
//! concurrent calls in `bench trgw` (doubling from a start until a trial
//! fails, then binary search). A failed trial can be repeated (`confirm`)
//! and fails only when every run fails; every run is kept.

use anyhow::Result;

/// How the search finds its first failing load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// Try the maximum first (RFC 2544): passing ends the search.
    Max,
    /// Try this load, double it while trials pass (up to the maximum).
    Doubling(f64),
}

/// Search parameters.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    /// Highest load tried.
    pub max: f64,
    /// The first trials.
    pub start: Start,
    /// Stop when the bracket is no wider than this share of its upper end...
    pub resolution: f64,
    /// ...or than this many units.
    pub min_step: f64,
    /// Stop after this many trials at the latest.
    pub max_trials: usize,
    /// Run a failed trial again up to this many times.
    pub confirm: u32,
    /// Loads are whole multiples of this (1: whole calls); 0: any load.
    pub granularity: f64,
}

/// One trial of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried<T> {
    /// Offered load.
    pub load: f64,
    /// Whether it passed.
    pub passed: bool,
    /// What the trial measured.
    pub result: T,
}

/// The outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<T> {
    /// The highest load that passed (0 when none did).
    pub best: f64,
    /// The lowest load that failed, when one did (`None`: no failure up to
    /// the maximum, the device may carry more).
    pub first_failure: Option<f64>,
    /// Every trial in order.
    pub trials: Vec<Tried<T>>,
}

impl Search {
    /// RFC 2544 §26.1 throughput: the maximum first, then binary search to
    /// `resolution`, at most `max_trials` trials.
    pub fn rfc2544(max: f64, resolution: f64, max_trials: usize) -> Self {
        Search { max, start: Start::Max, resolution, min_step: 0.0, max_trials, confirm: 0, granularity: 0.0 }
    }

    fn snap(&self, x: f64) -> f64 {
        if self.granularity > 0.0 {
            (x / self.granularity).floor() * self.granularity
        } else {
            x
        }
    }

    /// Runs the search; `trial(load)` returns what a trial at `load`
    /// measured and whether it passed (no loss). An error stops the search.
    pub fn run<T>(&self, mut trial: impl FnMut(f64) -> Result<(bool, T)>) -> Result<Found<T>> {
        let budget = self.max_trials.max(1);
        let mut trials: Vec<Tried<T>> = Vec::new();
        let confirm = self.confirm;
        let mut judge = |load: f64, trials: &mut Vec<Tried<T>>| -> Result<bool> {
            for _ in 0..=confirm {
                let (passed, result) = trial(load)?;
                trials.push(Tried { load, passed, result });
                if passed {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        let (mut lo, mut hi) = (0.0f64, None::<f64>);
        match self.start {
            Start::Max => {
                if judge(self.max, &mut trials)? {
                    lo = self.max;
                } else {
                    hi = Some(self.max);
                }
            }
            Start::Doubling(first) => {
                let floor = if self.granularity > 0.0 { self.granularity } else { 0.0 };
                let mut x = self.snap(first.min(self.max)).max(floor);
                while trials.len() < budget {
                    if !judge(x, &mut trials)? {
                        hi = Some(x);
                        break;
                    }
                    lo = x;
                    if x >= self.max {
                        break;
                    }
                    x = self.snap((x * 2.0).min(self.max));
                }
            }
        }
        if let Some(mut h) = hi {
            while trials.len() < budget && h - lo > (self.resolution * h).max(self.min_step) {
                let mid = self.snap(lo + (h - lo) / 2.0);
                if mid <= lo || mid >= h {
                    break;
                }
                if judge(mid, &mut trials)? {
                    lo = mid;
                } else {
                    h = mid;
                }
            }
            hi = Some(h);
        }
        Ok(Found { best: lo, first_failure: hi, trials })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(max: f64) -> Search {
        Search::rfc2544(max, 0.01, 30)
    }

    fn calls(max: f64, confirm: u32) -> Search {
        Search {
            max,
            start: Start::Doubling(250.0),
            resolution: 0.05,
            min_step: 10.0,
            max_trials: usize::MAX,
            confirm,
            granularity: 1.0,
        }
    }

    #[test]
    fn rfc2544_converges_on_the_threshold_from_below() {
        for threshold in [1.0, 333_333.0, 999_000.0] {
            let f = s(1e6).run(|r| Ok((r <= threshold, ()))).unwrap();
            assert!(f.best <= threshold, "never reports a failing rate");
            assert!(f.best >= threshold * 0.98, "{} vs {threshold}", f.best);
            assert!(f.trials.iter().all(|t| t.passed == (t.load <= threshold)));
            assert_eq!(f.trials[0].load, 1e6, "RFC 2544: the maximum first");
        }
    }

    #[test]
    fn max_passing_ends_after_one_trial() {
        let f = s(1000.0).run(|_| Ok((true, 7))).unwrap();
        assert_eq!(
            f,
            Found { best: 1000.0, first_failure: None, trials: vec![Tried { load: 1000.0, passed: true, result: 7 }] }
        );
    }

    #[test]
    fn nothing_passing_gives_zero_and_respects_the_trial_budget() {
        let f = Search::rfc2544(1e6, 0.0, 7).run(|_| Ok((false, ()))).unwrap();
        assert_eq!(f.best, 0.0);
        assert_eq!(f.trials.len(), 7);
    }

    #[test]
    fn errors_stop_the_search() {
        let mut n = 0;
        let e = s(100.0).run(|_| {
            n += 1;
            anyhow::ensure!(n < 3, "DUT died");
            Ok((false, ()))
        });
        assert!(e.is_err());
        assert_eq!(n, 3);
    }

    #[test]
    fn doubling_then_bisection_to_five_percent_in_whole_calls() {
        let f = calls(8000.0, 0).run(|n| Ok((n <= 1234.0, ()))).unwrap();
        assert_eq!(f.trials.iter().take(4).map(|t| t.load).collect::<Vec<_>>(), [250.0, 500.0, 1000.0, 2000.0]);
        let h = f.first_failure.unwrap();
        assert!(f.best <= 1234.0 && h > 1234.0, "{} {h}", f.best);
        assert!(h - f.best <= (h * 0.05).max(10.0), "{} {h}", f.best);
        assert!(f.trials.iter().all(|t| t.load == t.load.floor()), "whole calls");
        let capped = calls(1000.0, 0).run(|_| Ok((true, ()))).unwrap();
        assert_eq!((capped.best, capped.first_failure), (1000.0, None));
        let none = calls(1000.0, 0).run(|_| Ok((false, ()))).unwrap();
        assert_eq!(none.best, 0.0);
        assert!(none.first_failure.unwrap() <= 10.0);
    }

    #[test]
    fn a_failure_is_confirmed_before_it_stands() {
        // A one-off failure at 500 is run again and passes; both runs are kept.
        let mut seen500 = 0;
        let flaky = calls(1000.0, 1)
            .run(|n| {
                if n == 500.0 {
                    seen500 += 1;
                }
                Ok((n <= 1000.0 && !(n == 500.0 && seen500 == 1), ()))
            })
            .unwrap();
        assert_eq!((flaky.best, flaky.first_failure), (1000.0, None));
        assert_eq!(flaky.trials.iter().filter(|t| t.load == 500.0).count(), 2);
        // With every rerun failing too, the failure stands.
        let hard = calls(1000.0, 2).run(|n| Ok((n < 500.0, ()))).unwrap();
        let f = hard.first_failure.unwrap();
        assert!(f >= 500.0, "{f}");
        assert_eq!(hard.trials.iter().filter(|t| t.load == f).count(), 3, "a failure is run 1 + 2 times");
        assert!(hard.best < 500.0 && hard.best >= 250.0);
    }
}
