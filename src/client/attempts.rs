//! `overdue run --retries` (SPEC §14): which failures are retried, and how
//! long to wait before the next attempt: exponential backoff with full
//! jitter ("Exponential Backoff and Jitter", AWS Architecture Blog, 2015):
//! the wait after the k-th failed attempt is uniform in `[0, cap_k]`, with
//! `cap_k = min(max_delay, delay · 2^(k-1))`. Full jitter spreads the
//! retries of many hosts that failed together (a database restart) instead
//! of bringing them back in step.

use std::time::Duration;

use rand::Rng;

use super::process::{End, Outcome};

/// The most retries `--retries` takes.
pub const MAX_RETRIES: u32 = 10;

/// The failures that are retried: exit statuses, and optionally a timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryOn {
    pub codes: Vec<u8>,
    pub timeout: bool,
}

impl Default for RetryOn {
    /// `75` (EX_TEMPFAIL, sysexits.h: "try again later").
    fn default() -> RetryOn {
        RetryOn {
            codes: vec![75],
            timeout: false,
        }
    }
}

impl RetryOn {
    /// `--retry-on`: a comma-separated list of exit statuses 1–255 and
    /// `timeout`, e.g. `75,111,timeout`.
    pub fn parse(text: &str) -> Result<RetryOn, String> {
        let mut on = RetryOn {
            codes: Vec::new(),
            timeout: false,
        };
        for part in text.split(',').map(str::trim) {
            if part.eq_ignore_ascii_case("timeout") {
                on.timeout = true;
                continue;
            }
            match part.parse::<u8>() {
                Ok(code) if code > 0 => {
                    if !on.codes.contains(&code) {
                        on.codes.push(code);
                    }
                }
                _ => {
                    return Err(format!(
                        "{part:?} is neither an exit status from 1 to 255 nor \"timeout\""
                    ))
                }
            }
        }
        Ok(on)
    }

    /// Whether this outcome is a recoverable failure: an exit status listed,
    /// or a timeout when `timeout` is. A command stopped for any other
    /// reason (the lock was lost) is never retried.
    pub fn covers(&self, outcome: &Outcome) -> bool {
        match outcome.end {
            End::Exited => u8::try_from(outcome.code).is_ok_and(|c| self.codes.contains(&c)),
            End::TimedOut { .. } => self.timeout,
            End::Stopped { .. } => false,
        }
    }
}

/// `--retries`, `--retry-delay`, `--retry-max-delay` and `--retry-on`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempts {
    /// Attempts after the first, at most [`MAX_RETRIES`].
    pub retries: u32,
    pub delay: Duration,
    pub max_delay: Duration,
    pub on: RetryOn,
}

impl Default for Attempts {
    /// One attempt; the delays `overdue run` defaults to.
    fn default() -> Attempts {
        Attempts {
            retries: 0,
            delay: Duration::from_secs(10),
            max_delay: Duration::from_secs(600),
            on: RetryOn::default(),
        }
    }
}

impl Attempts {
    /// How many attempts at most.
    pub fn total(&self) -> u32 {
        self.retries.min(MAX_RETRIES) + 1
    }

    /// Whether attempt `attempt` (from 1), which ended as `outcome`, is
    /// retried.
    pub fn retries_after(&self, attempt: u32, outcome: &Outcome) -> bool {
        attempt < self.total() && self.on.covers(outcome)
    }

    /// The longest wait after failed attempt `attempt` (from 1):
    /// `min(max_delay, delay · 2^(attempt-1))`.
    pub fn cap(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.delay
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.max_delay)
    }

    /// The wait after failed attempt `attempt`: uniform in `[0, cap]`, to
    /// the millisecond.
    pub fn wait(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let cap_ms = u64::try_from(self.cap(attempt).as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rng.gen_range(0..=cap_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Tail;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn ended(code: i32, end: End) -> Outcome {
        Outcome {
            code,
            end,
            tail: Tail::new(10),
            items: None,
        }
    }

    #[test]
    fn only_listed_statuses_and_timeouts_are_retried() {
        let on = RetryOn::default();
        assert!(on.covers(&ended(75, End::Exited)));
        assert!(!on.covers(&ended(2, End::Exited)));
        assert!(!on.covers(&ended(0, End::Exited)));
        assert!(!on.covers(&ended(124, End::TimedOut { killed: false })));
        let on = RetryOn::parse("75, 111,timeout").unwrap();
        assert_eq!(on.codes, vec![75, 111]);
        assert!(on.covers(&ended(143, End::TimedOut { killed: false })));
        assert!(!on.covers(&ended(
            143,
            End::Stopped {
                reason: "lost the lock".into(),
                killed: false
            }
        )));
        // A signal's 128+N that happens to be listed is still an exit status.
        assert!(RetryOn::parse("137")
            .unwrap()
            .covers(&ended(137, End::Exited)));
        for bad in ["0", "256", "x", "", "75,,1"] {
            let e = RetryOn::parse(bad).unwrap_err();
            assert!(e.contains("exit status from 1 to 255"), "{bad}: {e}");
        }
    }

    #[test]
    fn attempts_stop_after_the_retries() {
        let a = Attempts {
            retries: 3,
            ..Attempts::default()
        };
        assert_eq!(a.total(), 4);
        let fail = ended(75, End::Exited);
        assert!((1..=3).all(|k| a.retries_after(k, &fail)));
        assert!(!a.retries_after(4, &fail));
        assert!(!a.retries_after(1, &ended(2, End::Exited)));
        assert!(!Attempts::default().retries_after(1, &fail));
        let many = Attempts {
            retries: 50,
            ..Attempts::default()
        };
        assert_eq!(many.total(), MAX_RETRIES + 1);
    }

    #[test]
    fn caps_double_up_to_the_maximum() {
        let a = Attempts {
            retries: 10,
            delay: Duration::from_secs(10),
            max_delay: Duration::from_secs(600),
            on: RetryOn::default(),
        };
        let caps: Vec<u64> = (1..=8).map(|k| a.cap(k).as_secs()).collect();
        assert_eq!(caps, vec![10, 20, 40, 80, 160, 320, 600, 600]);
        // No overflow, however many attempts.
        assert_eq!(a.cap(200), Duration::from_secs(600));
    }

    #[test]
    fn waits_are_spread_over_the_whole_range() {
        // Full jitter: uniform in [0, cap], so about a quarter of the waits
        // fall in each quarter of the range (20,000 draws, seeded).
        let a = Attempts {
            retries: 3,
            delay: Duration::from_millis(1000),
            max_delay: Duration::from_secs(600),
            on: RetryOn::default(),
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let mut quarters = [0u32; 4];
        for _ in 0..20_000 {
            let w = a.wait(2, &mut rng).as_millis();
            assert!(w <= 2000);
            quarters[usize::try_from((w * 4 / 2001).min(3)).unwrap()] += 1;
        }
        for q in quarters {
            assert!((4_500..5_500).contains(&q), "{quarters:?}");
        }
    }

    proptest! {
        #[test]
        fn a_wait_is_within_its_cap(
            delay_ms in 0u64..100_000,
            max_ms in 0u64..1_000_000,
            attempt in 1u32..12,
            seed in any::<u64>(),
        ) {
            let a = Attempts {
                retries: 10,
                delay: Duration::from_millis(delay_ms),
                max_delay: Duration::from_millis(max_ms),
                on: RetryOn::default(),
            };
            let cap = a.cap(attempt);
            prop_assert!(cap <= a.max_delay);
            prop_assert_eq!(
                cap.as_millis(),
                (u128::from(delay_ms) << (attempt - 1)).min(u128::from(max_ms))
            );
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            prop_assert!(a.wait(attempt, &mut rng) <= cap);
        }
    }
}
