//! Rate-limited refusal logging (issue #29 D12): a flood of bad input
//! must not become a flood of log lines. Each kind of refusal may write
//! [`LINES_PER_WINDOW`] lines per [`WINDOW`]; the rest are counted, and
//! the next line written says how many were suppressed. The refusals
//! themselves are always counted in `/metrics`; the log is only a sample.

use std::time::{Duration, Instant};

/// How long a window lasts.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Lines each kind may write per window.
pub const LINES_PER_WINDOW: u32 = 5;

/// One kind's limiter.
#[derive(Debug, Clone, Default)]
pub struct RateLog {
    start: Option<Instant>,
    lines: u32,
    suppressed: u64,
}

impl RateLog {
    /// Whether a line may be written at `now`: `Some(n)` with the lines
    /// suppressed since the last one written (write it with the line),
    /// `None` when this one is suppressed (counted).
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self.start.is_none_or(|s| now.saturating_duration_since(s) >= WINDOW) {
            self.start = Some(now);
            self.lines = 0;
        }
        if self.lines >= LINES_PER_WINDOW {
            self.suppressed += 1;
            return None;
        }
        self.lines += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// A rate-limited `tracing` event: `refusal_log!(limiter, now, warn, fields..., "message")`
/// writes the event with `suppressed = n` when the limiter allows it.
#[macro_export]
#[doc(hidden)]
macro_rules! refusal_log {
    ($lim:expr, $now:expr, $lvl:ident, $($rest:tt)+) => {
        if let Some(suppressed) = $lim.allow($now) {
            tracing::$lvl!(suppressed, $($rest)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_writes_a_few_lines_and_the_next_says_how_many_were_left_out() {
        let t0 = Instant::now();
        let mut l = RateLog::default();
        let got: Vec<Option<u64>> = (0..8).map(|_| l.allow(t0)).collect();
        assert_eq!(got[..5], [Some(0); 5]);
        assert_eq!(got[5..], [None; 3]);
        assert_eq!(l.allow(t0 + Duration::from_secs(9)), None, "same window");
        assert_eq!(l.allow(t0 + WINDOW), Some(4), "the next window reports the four suppressed");
        assert_eq!(l.allow(t0 + WINDOW), Some(0));
    }
}
