//! Whether the database's disk is full, as the ping writer last found it:
//! `/readyz`, `/api/v1/status` and the pings' `503` say so while it is
//! (docs/reliability.md, "Full disk").
//!
//! A spell of fullness starts when a write of pings fails because the disk
//! is full, and ends when a batch of pings is stored again. With no pings
//! at all it also ends [`FORGET_AFTER`] after the last failure: a load
//! balancer that sends pings only to a ready server would otherwise never
//! send the ping that ends it. If the disk is still full, the next ping
//! starts a new spell.

use std::sync::Mutex;
use std::time::Duration;

use crate::domain::ping::UnixMs;

/// How long after the last write that failed for a full disk the spell ends
/// by itself, when no write was tried since.
pub const FORGET_AFTER: Duration = Duration::from_secs(30);

/// A spell of fullness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spell {
    /// When the first write failed.
    pub since: UnixMs,
    /// When the last write failed.
    pub last: UnixMs,
    /// Pings refused (answered `503`) in this spell.
    pub refused: u64,
}

/// What the ping writer last found; shared by the writer and the HTTP
/// handlers.
#[derive(Debug, Default)]
pub struct DiskFull(Mutex<Option<Spell>>);

impl DiskFull {
    /// A write failed at `now` because the disk is full, refusing `pings`
    /// pings. True when this starts a spell (to be logged once).
    pub fn failed(&self, now: UnixMs, pings: u64) -> bool {
        let mut spell = self.lock();
        match spell.as_mut().filter(|s| !expired(s, now)) {
            Some(s) => {
                s.last = s.last.max(now);
                s.refused += pings;
                false
            }
            None => {
                *spell = Some(Spell {
                    since: now,
                    last: now,
                    refused: pings,
                });
                true
            }
        }
    }

    /// A batch of pings was stored: the spell under way, if any, ends and
    /// is returned (to be logged).
    pub fn stored(&self) -> Option<Spell> {
        self.lock().take()
    }

    /// The spell under way at `now`, if any.
    pub fn at(&self, now: UnixMs) -> Option<Spell> {
        self.lock().filter(|s| !expired(s, now))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Spell>> {
        // Plain data, never left half-written: a poisoned lock is usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn expired(s: &Spell, now: UnixMs) -> bool {
    now.saturating_sub(s.last) >= i64::try_from(FORGET_AFTER.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: UnixMs = 1_700_000_000_000;

    #[test]
    fn a_spell_lasts_from_the_first_failure_until_pings_are_stored() {
        let d = DiskFull::default();
        assert_eq!(d.at(T), None);
        assert!(d.failed(T, 3), "the first failure starts a spell");
        assert!(!d.failed(T + 100, 2), "later ones belong to it");
        assert!(
            !d.failed(T + 50, 1),
            "an answer out of order moves nothing back"
        );
        let spell = Spell {
            since: T,
            last: T + 100,
            refused: 6,
        };
        assert_eq!(d.at(T + 1_000), Some(spell));
        assert_eq!(d.stored(), Some(spell));
        assert_eq!(d.at(T + 1_000), None);
        assert_eq!(d.stored(), None, "a second store ends nothing");
    }

    #[test]
    fn with_no_write_tried_a_spell_ends_by_itself_and_a_new_failure_starts_another() {
        let d = DiskFull::default();
        let forget = FORGET_AFTER.as_millis() as i64;
        d.failed(T, 1);
        d.failed(T + 1_000, 1);
        assert!(d.at(T + 1_000 + forget - 1).is_some());
        assert_eq!(d.at(T + 1_000 + forget), None);
        assert!(d.failed(T + 1_000 + forget, 4), "a new spell, logged again");
        assert_eq!(
            d.at(T + 1_000 + forget),
            Some(Spell {
                since: T + 1_000 + forget,
                last: T + 1_000 + forget,
                refused: 4
            })
        );
    }
}
