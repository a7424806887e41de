//! The search for the highest load a device carries without loss: frames
//! per second in `bench xlat` (RFC 2544 §26.1 / RFC 8219 §7.1 throughput:
//! the first trial at the maximum, then binary search between 0 and it),
//! concurrent calls in `bench trgw` and calls per second in `bench sip`
//! (the first trial at the tester's measured ceiling, or doubling from a
//! start until a trial does not pass, then binary search). A trial that
//! did not pass can be repeated (`confirm`); every run is kept.
//!
//! Each trial is judged three ways ([`Judged`]): the device carried the
//! load, the device lost (a failure), or the tester fell behind and never
//! offered the load (TESTER-BOUND: DESIGN.md's measurement rules). A
//! tester-bound load is neither a pass nor a failure of the device: the
//! search takes it as the end of the tester's reach and looks below it,
//! and [`Found::tester_bound`] says where that reach ended.

use anyhow::Result;
use serde::Serialize;

/// How the search finds its first load that does not pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// Try the maximum first (RFC 2544; the maximum is the tester's
    /// measured ceiling): passing ends the search.
    Max,
    /// Try this load, double it while trials pass (up to the maximum).
    Doubling(f64),
}

/// What one trial says about the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Judged {
    /// The device carried the load the tester offered.
    Pass,
    /// The tester offered the load and the device did not carry it.
    Fail,
    /// The tester fell behind (send lag, rate shortfall): the load was
    /// never offered, so the trial judges nothing about the device.
    TesterBound,
}

impl Judged {
    /// `Pass` or `Fail`, for a tester that always offers its load.
    pub fn of(passed: bool) -> Judged {
        if passed {
            Judged::Pass
        } else {
            Judged::Fail
        }
    }

    /// Whether the device carried the load.
    pub fn passed(self) -> bool {
        self == Judged::Pass
    }

    /// The verdict of a load tried several times: the first pass decides;
    /// with none, a failure of the device stands when any run was one,
    /// and the load is tester-bound only when every run was.
    fn combine(self, other: Judged) -> Judged {
        match (self, other) {
            (Judged::Pass, _) | (_, Judged::Pass) => Judged::Pass,
            (Judged::Fail, _) | (_, Judged::Fail) => Judged::Fail,
            _ => Judged::TesterBound,
        }
    }
}

/// Search parameters.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    /// Highest load tried (the tester's measured ceiling, or a bound).
    pub max: f64,
    /// The first trials.
    pub start: Start,
    /// Stop when the bracket is no wider than this share of its upper end...
    pub resolution: f64,
    /// ...or than this many units.
    pub min_step: f64,
    /// Stop after this many trials at the latest.
    pub max_trials: usize,
    /// Run a trial that did not pass again up to this many times.
    pub confirm: u32,
    /// Loads are whole multiples of this (1: whole calls); 0: any load.
    pub granularity: f64,
}

/// One trial of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried<T> {
    /// Offered load.
    pub load: f64,
    /// What the trial says about the device.
    pub judged: Judged,
    /// What the trial measured.
    pub result: T,
}

impl<T> Tried<T> {
    /// Whether the device carried the load.
    pub fn passed(&self) -> bool {
        self.judged.passed()
    }
}

/// The outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<T> {
    /// The highest load that passed (0 when none did).
    pub best: f64,
    /// The lowest load above `best` the device failed (the tester offered
    /// it), when one was tried.
    pub first_failure: Option<f64>,
    /// The lowest load above `best` the tester could not offer (every run
    /// of it tester-bound), when one was tried: the end of the tester's
    /// reach in this search.
    pub tester_bound: Option<f64>,
    /// Every trial in order.
    pub trials: Vec<Tried<T>>,
}

impl<T> Found<T> {
    /// Whether the figure is the tester's bound, not the device's: the
    /// bracket above `best` ends at a load the tester could not offer (the
    /// device failed nothing below it).
    pub fn bound_by_tester(&self) -> bool {
        self.tester_bound.is_some_and(|t| self.first_failure.is_none_or(|f| t <= f))
    }

    /// Whether nothing failed and the tester offered everything up to the
    /// maximum: the device may carry more than the search could ask.
    pub fn capped(&self) -> bool {
        self.first_failure.is_none() && self.tester_bound.is_none()
    }
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
    /// measured and how it is judged. An error stops the search.
    pub fn run<T>(&self, mut trial: impl FnMut(f64) -> Result<(Judged, T)>) -> Result<Found<T>> {
        let budget = self.max_trials.max(1);
        let mut trials: Vec<Tried<T>> = Vec::new();
        let confirm = self.confirm;
        let mut judge = |load: f64, trials: &mut Vec<Tried<T>>| -> Result<Judged> {
            let mut verdict = None::<Judged>;
            for _ in 0..=confirm {
                if verdict.is_some() && trials.len() >= budget {
                    break;
                }
                let (judged, result) = trial(load)?;
                trials.push(Tried { load, judged, result });
                let v = verdict.map_or(judged, |v| v.combine(judged));
                verdict = Some(v);
                if v.passed() {
                    break;
                }
            }
            Ok(verdict.unwrap_or(Judged::TesterBound))
        };
        let mut b = Bracket::default();
        match self.start {
            Start::Max => {
                let j = judge(self.max, &mut trials)?;
                b.note(self.max, j);
            }
            Start::Doubling(first) => {
                let floor = if self.granularity > 0.0 { self.granularity } else { 0.0 };
                let mut x = self.snap(first.min(self.max)).max(floor);
                while trials.len() < budget {
                    let j = judge(x, &mut trials)?;
                    b.note(x, j);
                    if !j.passed() || x >= self.max {
                        break;
                    }
                    x = self.snap((x * 2.0).min(self.max));
                }
            }
        }
        while let Some(h) = b.upper() {
            if trials.len() >= budget || h - b.lo <= (self.resolution * h).max(self.min_step) {
                break;
            }
            let mid = self.snap(b.lo + (h - b.lo) / 2.0);
            if mid <= b.lo || mid >= h {
                break;
            }
            let j = judge(mid, &mut trials)?;
            b.note(mid, j);
        }
        Ok(Found { best: b.lo, first_failure: b.fail, tester_bound: b.reach, trials })
    }
}

/// The search's bracket: `lo` passed; `fail` and `reach` are the lowest
/// loads above it that the device failed and that the tester could not
/// offer.
#[derive(Debug, Default)]
struct Bracket {
    lo: f64,
    fail: Option<f64>,
    reach: Option<f64>,
}

impl Bracket {
    fn note(&mut self, load: f64, j: Judged) {
        let lowest = |x: Option<f64>| Some(x.map_or(load, |x| x.min(load)));
        match j {
            Judged::Pass => self.lo = self.lo.max(load),
            Judged::Fail => self.fail = lowest(self.fail),
            Judged::TesterBound => self.reach = lowest(self.reach),
        }
    }

    /// The bracket's upper end: the lower of the two.
    fn upper(&self) -> Option<f64> {
        match (self.fail, self.reach) {
            (Some(f), Some(r)) => Some(f.min(r)),
            (f, r) => f.or(r),
        }
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

    /// A fake trial: a tester that offers at most `reach` and a device
    /// that carries at most `carries`.
    fn fake(reach: f64, carries: f64) -> impl FnMut(f64) -> Result<(Judged, f64)> {
        move |load| {
            let j = if load > reach { Judged::TesterBound } else { Judged::of(load <= carries) };
            Ok((j, load))
        }
    }

    #[test]
    fn rfc2544_converges_on_the_threshold_from_below() {
        for threshold in [1.0, 333_333.0, 999_000.0] {
            let f = s(1e6).run(|r| Ok((Judged::of(r <= threshold), ()))).unwrap();
            assert!(f.best <= threshold, "never reports a failing rate");
            assert!(f.best >= threshold * 0.98, "{} vs {threshold}", f.best);
            assert!(f.trials.iter().all(|t| t.passed() == (t.load <= threshold)));
            assert_eq!(f.trials[0].load, 1e6, "RFC 2544: the maximum first");
            assert_eq!(f.tester_bound, None);
            assert!(!f.bound_by_tester() && !f.capped());
        }
    }

    #[test]
    fn max_passing_ends_after_one_trial() {
        let f = s(1000.0).run(|_| Ok((Judged::Pass, 7))).unwrap();
        assert_eq!(
            f,
            Found {
                best: 1000.0,
                first_failure: None,
                tester_bound: None,
                trials: vec![Tried { load: 1000.0, judged: Judged::Pass, result: 7 }]
            }
        );
        assert!(f.capped() && !f.bound_by_tester());
    }

    #[test]
    fn nothing_passing_gives_zero_and_respects_the_trial_budget() {
        let f = Search::rfc2544(1e6, 0.0, 7).run(|_| Ok((Judged::Fail, ()))).unwrap();
        assert_eq!(f.best, 0.0);
        assert_eq!(f.trials.len(), 7);
        // Confirmations count against the budget too: it is a hard cap.
        let c = Search { confirm: 2, ..Search::rfc2544(1e6, 0.0, 7) }.run(|_| Ok((Judged::Fail, ()))).unwrap();
        assert_eq!(c.trials.len(), 7);
    }

    #[test]
    fn errors_stop_the_search() {
        let mut n = 0;
        let e = s(100.0).run(|_| {
            n += 1;
            anyhow::ensure!(n < 3, "DUT died");
            Ok((Judged::Fail, ()))
        });
        assert!(e.is_err());
        assert_eq!(n, 3);
    }

    #[test]
    fn a_slow_tester_gives_its_own_reach_never_a_pass_above_it() {
        // The device carries 1 M, the tester offers only 260 k: the search
        // starts at the calibrated 270 k, finds it tester-bound and
        // settles just below the reach, flagged as the tester's figure.
        let f = s(270_000.0).run(fake(260_000.0, 1e6)).unwrap();
        assert!(f.best <= 260_000.0 && f.best >= 260_000.0 * 0.98, "{}", f.best);
        assert_eq!(f.first_failure, None, "a tester-bound trial is never the device's failure");
        assert!(f.tester_bound.is_some_and(|t| t > 260_000.0 && t <= 270_000.0), "{:?}", f.tester_bound);
        assert!(f.bound_by_tester() && !f.capped());
        for t in &f.trials {
            assert_eq!(t.judged == Judged::TesterBound, t.load > 260_000.0, "{t:?}");
            assert!(!(t.passed() && t.load > 260_000.0), "never a pass above the reach: {t:?}");
        }
        // Nothing the tester can offer: zero, tester-bound, no failure.
        let none = Search::rfc2544(1e6, 0.05, 6).run(fake(0.0, 1e6)).unwrap();
        assert_eq!((none.best, none.first_failure), (0.0, None));
        assert!(none.bound_by_tester() && none.trials.iter().all(|t| t.judged == Judged::TesterBound));
    }

    #[test]
    fn a_device_below_the_tester_s_reach_is_the_device_s_figure() {
        let f = s(270_000.0).run(fake(260_000.0, 100_000.0)).unwrap();
        assert!(f.best <= 100_000.0 && f.best >= 98_000.0, "{}", f.best);
        assert!(f.first_failure.is_some_and(|x| x > 100_000.0));
        assert!(!f.bound_by_tester(), "the device failed below the tester's reach");
        assert_eq!(f.tester_bound, Some(270_000.0), "the first trial was beyond the reach");
    }

    #[test]
    fn confirmations_judge_a_load_by_its_runs() {
        let judge = |runs: Vec<Judged>| {
            let mut it = runs.into_iter();
            let f = Search { confirm: 2, ..Search::rfc2544(100.0, 0.5, 3) }
                .run(|_| Ok((it.next().unwrap_or(Judged::Fail), ())))
                .unwrap();
            (f.best, f.first_failure, f.tester_bound, f.trials.len())
        };
        use Judged::{Fail, Pass, TesterBound as Tb};
        assert_eq!(judge(vec![Tb, Pass]), (100.0, None, None, 2), "a rerun that passes decides");
        assert_eq!(judge(vec![Tb, Fail, Tb]), (0.0, Some(100.0), None, 3), "a failure of the device stands");
        assert_eq!(judge(vec![Tb, Tb, Tb]), (0.0, None, Some(100.0), 3), "tester-bound only when every run is");
    }

    #[test]
    fn doubling_stops_at_the_tester_s_reach_and_bisects_below_it() {
        let f = calls(8000.0, 0).run(fake(1500.0, 5000.0)).unwrap();
        assert_eq!(f.trials.iter().take(4).map(|t| t.load).collect::<Vec<_>>(), [250.0, 500.0, 1000.0, 2000.0]);
        assert_eq!(f.trials[3].judged, Judged::TesterBound);
        assert!(f.best <= 1500.0 && f.best >= 1500.0 * 0.95 - 10.0, "{}", f.best);
        assert!(f.bound_by_tester() && f.first_failure.is_none());
    }

    #[test]
    fn doubling_then_bisection_to_five_percent_in_whole_calls() {
        let f = calls(8000.0, 0).run(|n| Ok((Judged::of(n <= 1234.0), ()))).unwrap();
        assert_eq!(f.trials.iter().take(4).map(|t| t.load).collect::<Vec<_>>(), [250.0, 500.0, 1000.0, 2000.0]);
        let h = f.first_failure.unwrap();
        assert!(f.best <= 1234.0 && h > 1234.0, "{} {h}", f.best);
        assert!(h - f.best <= (h * 0.05).max(10.0), "{} {h}", f.best);
        assert!(f.trials.iter().all(|t| t.load == t.load.floor()), "whole calls");
        let capped = calls(1000.0, 0).run(|_| Ok((Judged::Pass, ()))).unwrap();
        assert_eq!((capped.best, capped.first_failure), (1000.0, None));
        assert!(capped.capped());
        let none = calls(1000.0, 0).run(|_| Ok((Judged::Fail, ()))).unwrap();
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
                Ok((Judged::of(n <= 1000.0 && !(n == 500.0 && seen500 == 1)), ()))
            })
            .unwrap();
        assert_eq!((flaky.best, flaky.first_failure), (1000.0, None));
        assert_eq!(flaky.trials.iter().filter(|t| t.load == 500.0).count(), 2);
        // With every rerun failing too, the failure stands.
        let hard = calls(1000.0, 2).run(|n| Ok((Judged::of(n < 500.0), ()))).unwrap();
        let f = hard.first_failure.unwrap();
        assert!(f >= 500.0, "{f}");
        assert_eq!(hard.trials.iter().filter(|t| t.load == f).count(), 3, "a failure is run 1 + 2 times");
        assert!(hard.best < 500.0 && hard.best >= 250.0);
    }
}
