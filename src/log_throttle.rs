//! Holds back repeated log lines: the first of a run is logged, then at most
//! one per interval, carrying how many were held back since the last one.
//!
//! A failure that repeats for every request or every batch (a full disk, a
//! database that is down) would otherwise write one line each time: about
//! 1,900 lines in two seconds of ping load on a full disk, written to a log
//! that may well sit on that same disk.
//!
//! [`LogThrottle`] is the rule, with `now` passed in; [`Throttled`] is the
//! same rule behind a lock and the monotonic clock, to keep in a `static`
//! beside the line it throttles:
//!
//! ```ignore
//! use overdue::log_throttle::Throttled;
//!
//! static FAILED: Throttled = Throttled::every_10s();
//! # let e = "disk full";
//! if let Some(suppressed) = FAILED.hit() {
//!     tracing::error!(error = %e, suppressed, "cannot store a batch");
//! }
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a repeated line is logged at most, by default.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The rule: which occurrences of a repeated event are logged.
#[derive(Debug, Clone)]
pub struct LogThrottle {
    interval: Duration,
    /// When the last logged occurrence was (none yet, or the run ended).
    logged: Option<Instant>,
    /// Occurrences held back since then.
    held: u64,
}

impl LogThrottle {
    /// Logs at most one occurrence per `interval`.
    pub const fn new(interval: Duration) -> LogThrottle {
        LogThrottle {
            interval,
            logged: None,
            held: 0,
        }
    }

    /// One occurrence at `now`: `Some(n)` when it is to be logged, `n` being
    /// how many were held back since the last one logged; `None` when it is
    /// to be held back (and counted).
    pub fn hit(&mut self, now: Instant) -> Option<u64> {
        match self.logged {
            Some(at) if now.saturating_duration_since(at) < self.interval => {
                self.held += 1;
                None
            }
            _ => {
                self.logged = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }

    /// The run ended (the thing that failed works again): how many
    /// occurrences were held back and never reported, and the next
    /// occurrence is logged at once.
    pub fn end(&mut self) -> u64 {
        self.logged = None;
        std::mem::take(&mut self.held)
    }
}

/// A [`LogThrottle`] to share (in a `static`), on the monotonic clock.
#[derive(Debug)]
pub struct Throttled(Mutex<LogThrottle>);

impl Throttled {
    /// Logs at most one occurrence per `interval`.
    pub const fn new(interval: Duration) -> Throttled {
        Throttled(Mutex::new(LogThrottle::new(interval)))
    }

    /// Logs at most one occurrence per [`LOG_EVERY`].
    pub const fn every_10s() -> Throttled {
        Throttled::new(LOG_EVERY)
    }

    /// [`LogThrottle::hit`] now.
    pub fn hit(&self) -> Option<u64> {
        self.lock().hit(Instant::now())
    }

    /// [`LogThrottle::end`].
    pub fn end(&self) -> u64 {
        self.lock().end()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogThrottle> {
        // A counter cannot be left half-updated: a poisoned lock is usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_is_logged_then_one_per_interval_with_the_count_held_back() {
        let t0 = Instant::now();
        let mut t = LogThrottle::new(10 * S);
        assert_eq!(t.hit(t0), Some(0));
        for ms in [1, 500, 5_000, 9_999] {
            assert_eq!(t.hit(t0 + Duration::from_millis(ms)), None);
        }
        // Ten seconds after the last one logged: logged, with the 4 held back.
        assert_eq!(t.hit(t0 + 10 * S), Some(4));
        assert_eq!(t.hit(t0 + 11 * S), None);
        assert_eq!(t.hit(t0 + 19 * S), None);
        assert_eq!(t.hit(t0 + 20 * S), Some(2));
        // A long pause: the next one is logged at once, nothing was held.
        assert_eq!(t.hit(t0 + 100 * S), Some(0));
    }

    #[test]
    fn the_end_of_a_run_reports_what_was_held_and_logs_the_next_at_once() {
        let t0 = Instant::now();
        let mut t = LogThrottle::new(10 * S);
        assert_eq!(t.hit(t0), Some(0));
        assert_eq!(t.hit(t0 + S), None);
        assert_eq!(t.hit(t0 + 2 * S), None);
        assert_eq!(t.end(), 2);
        assert_eq!(t.end(), 0);
        // A new run, a second later: its first occurrence is logged.
        assert_eq!(t.hit(t0 + 3 * S), Some(0));
    }

    #[test]
    fn a_clock_that_goes_back_holds_the_line_back_rather_than_panicking() {
        let t0 = Instant::now() + 100 * S;
        let mut t = LogThrottle::new(10 * S);
        assert_eq!(t.hit(t0), Some(0));
        assert_eq!(t.hit(t0 - 50 * S), None);
    }

    #[test]
    fn the_shared_one_counts_like_the_rule() {
        let shared = Throttled::new(Duration::from_secs(3600));
        assert_eq!(shared.hit(), Some(0));
        assert_eq!(shared.hit(), None);
        assert_eq!(shared.hit(), None);
        assert_eq!(shared.end(), 2);
        assert_eq!(shared.hit(), Some(0));
    }

    proptest! {
        /// Whatever the timing: every occurrence is either logged or counted
        /// in exactly one later report (a logged line or the end of the
        /// run); logged lines are at least an interval apart; and an
        /// occurrence an interval or more after the last logged one is
        /// logged.
        #[test]
        fn nothing_is_lost_and_lines_are_an_interval_apart(
            gaps in prop::collection::vec(0u64..30_000, 1..200),
            interval_ms in 1u64..20_000,
        ) {
            let interval = Duration::from_millis(interval_ms);
            let mut t = LogThrottle::new(interval);
            let mut now = Instant::now();
            let (mut logged, mut reported) = (0u64, 0u64);
            let mut last: Option<Instant> = None;
            for gap in &gaps {
                now += Duration::from_millis(*gap);
                let due = last.is_none_or(|l| now - l >= interval);
                match t.hit(now) {
                    Some(held) => {
                        prop_assert!(due, "logged {:?} after the last", now - last.unwrap());
                        logged += 1;
                        reported += held;
                        last = Some(now);
                    }
                    None => prop_assert!(!due, "held back an occurrence that was due"),
                }
            }
            reported += t.end();
            prop_assert_eq!(logged + reported, gaps.len() as u64);
        }
    }
}
