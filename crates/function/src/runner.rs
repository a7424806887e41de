//! The one runner of the standalone commands (`v6gate trt`, `v6gate
//! softwire`, `v6gate tunnel`): one function, started from its own
//! table, run until the binary says stop, with one signal idiom —
//! [`Signal::Reload`] (SIGHUP) re-reads the table and applies it when the
//! function can ([`Function::plan_reload`]), [`Signal::Stop`]
//! (SIGINT/SIGTERM) stops it. The binary catches the signals and installs
//! the logger; this module only waits on what it is handed.

use std::time::{Duration, Instant};

use crate::{Function, Reload};

/// What the binary tells a runner (and the daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGHUP.
    Reload,
    /// SIGINT or SIGTERM (the number, for the log).
    Stop(i32),
}

/// How often the runner reports (the status file) while it waits.
pub const TICK: Duration = Duration::from_millis(100);

/// What happened to one reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The new table was applied.
    Applied,
    /// The file could not be read or checked; the old table stays.
    Refused(String),
    /// The function cannot take the new table live; the old one stays.
    NeedsRestart(String),
}

/// Re-read the table with `load` and apply it to `f` when it can be.
pub fn reload<F: Function, E: std::fmt::Display>(
    f: &mut F,
    cur: &mut F::Config,
    load: &mut impl FnMut() -> Result<F::Config, E>,
) -> Reloaded {
    let new = match load() {
        Ok(n) => n,
        Err(e) => return Reloaded::Refused(e.to_string()),
    };
    match f.plan_reload(cur, &new) {
        Reload::NeedsRestart(why) => Reloaded::NeedsRestart(why),
        Reload::Applied => match f.reload(&new) {
            Ok(()) => {
                *cur = new;
                Reloaded::Applied
            }
            Err(e) => Reloaded::Refused(e.to_string()),
        },
    }
}

/// Run `f` (started from `cfg`) until `next_signal` says stop. `next_signal(d)`
/// waits at most `d` for a signal. `report` runs every [`TICK`] and once
/// more before the function stops (a standalone command's status file).
/// Returns the function's stop summary, if any.
pub fn run<F: Function, E: std::fmt::Display>(
    mut f: F,
    mut cfg: F::Config,
    mut load: impl FnMut() -> Result<F::Config, E>,
    mut report: impl FnMut(&F),
    next_signal: &mut dyn FnMut(Duration) -> Option<Signal>,
    mut log: impl FnMut(&str),
) -> Option<String> {
    let mut last = Instant::now();
    loop {
        match next_signal(TICK.saturating_sub(last.elapsed())) {
            Some(Signal::Stop(n)) => {
                log(&format!("signal {n}: stopping"));
                break;
            }
            Some(Signal::Reload) => match reload(&mut f, &mut cfg, &mut load) {
                Reloaded::Applied => log("SIGHUP: reloaded"),
                Reloaded::Refused(e) => log(&format!("SIGHUP: reload refused, the old configuration stays: {e}")),
                Reloaded::NeedsRestart(why) => log(&format!("SIGHUP: reload refused: {why}")),
            },
            None => {}
        }
        if last.elapsed() >= TICK {
            report(&f);
            last = Instant::now();
        }
    }
    report(&f);
    f.stop()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Family, ReloadError};

    /// Applies even tables live; an odd one needs a restart.
    struct Counter {
        applied: Vec<u32>,
    }

    impl Function for Counter {
        type Config = u32;
        type Status = usize;
        fn status_key(&self) -> &'static str {
            "counter"
        }
        fn names(&self) -> Vec<&'static str> {
            vec!["counter"]
        }
        fn plan_reload(&self, cur: &u32, new: &u32) -> Reload {
            if new.is_multiple_of(2) {
                Reload::Applied
            } else {
                Reload::unless_changed(cur, new, "[counter]")
            }
        }
        fn reload(&mut self, new: &u32) -> Result<(), ReloadError> {
            self.applied.push(*new);
            Ok(())
        }
        fn status(&self) -> usize {
            self.applied.len()
        }
        fn metrics(&self) -> Vec<Family> {
            Vec::new()
        }
        fn stop(self) -> Option<String> {
            Some(format!("applied {:?}", self.applied))
        }
    }

    #[test]
    fn reload_applies_refuses_or_asks_for_a_restart_and_stop_stops() {
        // The file as it is at each SIGHUP: 4 (applied), unreadable, 5 (restart), 6 (applied).
        let mut files = vec![Ok(4u32), Err("line 2: bad"), Ok(5), Ok(6)].into_iter();
        let mut signals =
            vec![Signal::Reload, Signal::Reload, Signal::Reload, Signal::Reload, Signal::Stop(15)].into_iter();
        let mut reports = 0;
        let mut lines = Vec::new();
        let out = run(
            Counter { applied: Vec::new() },
            2,
            || files.next().unwrap_or(Err("no file")),
            |_| reports += 1,
            &mut |_| signals.next(),
            |l| lines.push(l.to_string()),
        );
        assert_eq!(out.as_deref(), Some("applied [4, 6]"));
        assert_eq!(
            lines,
            [
                "SIGHUP: reloaded",
                "SIGHUP: reload refused, the old configuration stays: line 2: bad",
                "SIGHUP: reload refused: [counter] changed: restart v6gate to apply",
                "SIGHUP: reloaded",
                "signal 15: stopping",
            ]
        );
        // Reported once more before the stop.
        assert!(reports >= 1);
    }
}
