//! Ping rate limits (`[rate_limit]`, SPEC §4 and §11): per check and per
//! client address, each a GCRA token bucket keyed by the check or the address.
//! The rates themselves are settings: `config::rate_limit`.
//!
//! A hand-written GCRA instead of the `governor` crate: one `Instant` per key
//! in a map under a mutex is all it takes, the step is a pure function tested
//! without a clock, and forgetting idle keys is exact (a key whose bucket is
//! full again is indistinguishable from a key never seen), so memory is bounded
//! by the keys active within one refill period, without a background task.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::rate_limit::{Rate, RateLimitSettings};

/// One GCRA step. `tat` is the key's theoretical arrival time (`None`: a key
/// never seen, or forgotten); returns the new `tat` when the event conforms,
/// else how long until it would.
pub fn gcra(rate: &Rate, tat: Option<Instant>, now: Instant) -> Result<Instant, Duration> {
    let interval = rate.emission_interval();
    // How far ahead of now the TAT may run: the burst minus the event itself.
    let tolerance = interval * (rate.burst - 1);
    let tat = tat.filter(|t| *t > now).unwrap_or(now);
    let allowed_at = tat.checked_sub(tolerance).unwrap_or(now);
    if allowed_at > now {
        return Err(allowed_at - now);
    }
    Ok(tat + interval)
}

/// Whole seconds to put in `Retry-After`: rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// A rate limit per key; keys whose bucket is full again are forgotten.
pub struct KeyedLimiter<K> {
    rate: Rate,
    state: Mutex<Buckets<K>>,
}

struct Buckets<K> {
    tat: HashMap<K, Instant>,
    /// Sweep idle keys when the map reaches this size (amortised O(1)).
    sweep_at: usize,
}

const MIN_SWEEP: usize = 1024;

impl<K: Hash + Eq> KeyedLimiter<K> {
    /// A limiter allowing `rate` per key.
    pub fn new(rate: Rate) -> Self {
        KeyedLimiter {
            rate,
            state: Mutex::new(Buckets {
                tat: HashMap::new(),
                sweep_at: MIN_SWEEP,
            }),
        }
    }

    /// The limit it enforces.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one token for `key`: `Err(wait)` when none is left.
    pub fn check(&self, key: K, now: Instant) -> Result<(), Duration> {
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if b.tat.len() >= b.sweep_at {
            // A full bucket is the same as no entry: dropping it loses nothing.
            b.tat.retain(|_, tat| *tat > now);
            b.sweep_at = (b.tat.len() * 2).max(MIN_SWEEP);
        }
        let tat = b.tat.get(&key).copied();
        let next = gcra(&self.rate, tat, now)?;
        b.tat.insert(key, next);
        Ok(())
    }

    /// How many keys are remembered now.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tat
            .len()
    }

    /// True when no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The ping limits in force.
pub struct PingLimits {
    pub per_check: Option<KeyedLimiter<i64>>,
    pub per_address: Option<KeyedLimiter<std::net::IpAddr>>,
}

impl PingLimits {
    /// Limiters for these settings.
    pub fn new(settings: &RateLimitSettings) -> Self {
        PingLimits {
            per_check: settings.per_check.map(KeyedLimiter::new),
            per_address: settings.per_address.map(KeyedLimiter::new),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rate_limit::parse_rate;

    fn rate(s: &str) -> Rate {
        parse_rate(s).unwrap()
    }

    #[test]
    fn gcra_allows_the_burst_then_one_per_interval() {
        let r = rate("2/s"); // interval 500ms, burst 2
        let t0 = Instant::now();
        let tat = gcra(&r, None, t0).unwrap();
        let tat = gcra(&r, Some(tat), t0).unwrap();
        let wait = gcra(&r, Some(tat), t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        let tat = gcra(&r, Some(tat), t1).unwrap();
        assert!(gcra(&r, Some(tat), t1).is_err());
        // After a long pause the whole burst is back (not more).
        let t2 = t1 + Duration::from_secs(60);
        let tat = gcra(&r, Some(tat), t2).unwrap();
        let tat = gcra(&r, Some(tat), t2).unwrap();
        assert!(gcra(&r, Some(tat), t2).is_err());
    }

    #[test]
    fn retry_after_is_whole_seconds_at_least_one() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }

    #[test]
    fn keys_are_limited_apart_and_idle_ones_forgotten() {
        let l = KeyedLimiter::new(rate("1/min"));
        let t0 = Instant::now();
        assert!(l.check(1, t0).is_ok());
        assert!(l.check(1, t0).is_err());
        assert!(l.check(2, t0).is_ok());
        // Fill past the sweep size with keys that go idle after a minute.
        for k in 3..=(MIN_SWEEP as i64) {
            assert!(l.check(k, t0).is_ok());
        }
        assert_eq!(l.len(), MIN_SWEEP);
        let later = t0 + Duration::from_secs(61);
        assert!(l.check(-1, later).is_ok());
        assert_eq!(l.len(), 1, "idle keys are dropped at the sweep");
        // A forgotten key starts with a full bucket, as it would have anyway.
        assert!(l.check(1, later).is_ok());
    }
}
