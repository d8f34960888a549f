//! The job guard's pure rules (SPEC §13): whether a schedule slot is still
//! due, the lock's limits, and how skip reasons are counted.
//!
//! - The slot is the latest slot start at or before `now` (`slots.rs`: a
//!   cron check's fire time, an interval check's window aligned to the
//!   epoch). It is done once a success was recorded at or after its start.
//! - Quiet (outside active hours): never due, whatever the slot.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use super::evaluate::{Expect, Rules};
use super::schedule::CronSchedule;
use super::slots;

/// Why a slot is or is not due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueReason {
    /// The slot has no success yet: run it.
    Due,
    /// A success was recorded for the slot.
    Done,
    /// Outside active hours.
    Quiet,
}

impl DueReason {
    /// The spelling in `/due`'s answer.
    pub fn as_str(self) -> &'static str {
        match self {
            DueReason::Due => "due",
            DueReason::Done => "done",
            DueReason::Quiet => "quiet",
        }
    }
}

/// The answer of `GET /ping/{uuid}/due`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub due: bool,
    pub reason: DueReason,
    /// The current slot's start: the latest slot start at or before now.
    pub slot: Option<DateTime<Utc>>,
    pub last_success: Option<DateTime<Utc>>,
    /// When the next slot after the last success begins: the first fire
    /// time after it (cron), the start of the window after its own
    /// (interval).
    pub next_due: Option<DateTime<Utc>>,
    pub quiet: bool,
}

/// Whether the check's current slot still needs a run at `now`.
pub fn due(rules: &Rules, last_success: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Due {
    let quiet = rules.hours.as_deref().is_some_and(|h| !h.is_active(now));
    let slot = slots::slot_at(&rules.expect, now);
    let next_due = last_success.and_then(|s| slots::next_after(&rules.expect, s));
    // Done when the slot starts at or before the last success.
    let done = match (last_success, slot) {
        (Some(s), Some(slot)) => slot <= s,
        // No slot before now (a yearly job not yet fired): nothing to do.
        (Some(_), None) => true,
        (None, _) => false,
    };
    let reason = if quiet {
        DueReason::Quiet
    } else if done {
        DueReason::Done
    } else {
        DueReason::Due
    };
    Due {
        due: reason == DueReason::Due,
        reason,
        slot,
        last_success,
        next_due,
        quiet,
    }
}

/// How far back [`latest_fire`] looks, widening until it finds a fire time:
/// narrow first, so a dense expression walks few fire times.
const LOOKBACK: [i64; 7] = [
    120,
    3_600,
    2 * 86_400,
    35 * 86_400,
    400 * 86_400,
    3 * 366 * 86_400,
    9 * 366 * 86_400,
];

/// Fire times walked at most per look-back (a bound, never a spin).
const MAX_FIRES: usize = 100_000;

/// The latest fire time at or before `now`, if one lies within nine years.
pub fn latest_fire(cron: &CronSchedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    for secs in LOOKBACK {
        let from = now - Duration::seconds(secs);
        let Some(mut t) = cron.next_after(from).filter(|t| *t <= now) else {
            continue;
        };
        for _ in 0..MAX_FIRES {
            match cron.next_after(t) {
                Some(n) if n <= now => t = n,
                _ => break,
            }
        }
        return Some(t);
    }
    None
}

/// The shortest and longest lock TTL (SPEC §13).
pub const MIN_LOCK_TTL: StdDuration = StdDuration::from_secs(1);
pub const MAX_LOCK_TTL: StdDuration = StdDuration::from_secs(7 * 86_400);

/// A lock's TTL from `?ttl=`: a humantime duration from 1s to 7 days.
pub fn parse_lock_ttl(text: &str) -> Result<StdDuration, String> {
    let d = super::check::parse_duration(text).map_err(|e| format!("ttl: {e}"))?;
    if d < MIN_LOCK_TTL || d > MAX_LOCK_TTL {
        return Err(format!(
            "ttl: {} is out of range: from 1s to 7days",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// The TTL of a lock taken without `?ttl=`: the check's `max_runtime`,
/// which defaults to its grace, which defaults to one interval; within the
/// lock's limits.
pub fn default_lock_ttl(rules: &Rules, now: DateTime<Utc>) -> StdDuration {
    let d = rules.max_runtime.or(rules.grace).or(match &rules.expect {
        Expect::Interval(i) => Some(*i),
        Expect::Cron(cron) => cron
            .next_after(now)
            .and_then(|f1| Some(cron.next_after(f1)? - f1)),
    });
    d.and_then(|d| d.to_std().ok())
        .unwrap_or(MAX_LOCK_TTL)
        .clamp(MIN_LOCK_TTL, MAX_LOCK_TTL)
}

/// The longest holder name and skip reason kept.
pub const MAX_HOLDER: usize = 200;
pub const MAX_REASON: usize = 1_000;

/// The `reason` label of `overdue_skips_total` a skip's reason folds into.
pub fn skip_class(reason: &str) -> &'static str {
    let r = reason.trim_start().to_ascii_lowercase();
    if r.starts_with("already done") {
        "done"
    } else if r.starts_with("locked") {
        "locked"
    } else if r.starts_with("quiet") {
        "quiet"
    } else {
        "other"
    }
}

/// Every label value of `overdue_skips_total`.
pub const SKIP_CLASSES: [&str; 4] = ["done", "locked", "quiet", "other"];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::{CheckInput, CheckSpec};
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn rules(json: serde_json::Value) -> Rules {
        let input: CheckInput = serde_json::from_value(json).unwrap();
        Rules::from_spec(&CheckSpec::from_input(input).unwrap()).unwrap()
    }

    #[test]
    fn a_cron_slot_is_done_once_a_success_is_at_or_after_its_fire_time() {
        let r = rules(serde_json::json!({"cron": "0 3 * * *"}));
        let now = t("2026-03-10T12:00:00Z");
        let slot = t("2026-03-10T03:00:00Z");
        // Never succeeded: due, the slot is today's 03:00.
        let d = due(&r, None, now);
        assert_eq!(
            (d.due, d.reason, d.slot),
            (true, DueReason::Due, Some(slot))
        );
        // Succeeded before the slot (yesterday's run): due.
        let d = due(&r, Some(t("2026-03-09T03:00:05Z")), now);
        assert!(d.due);
        assert_eq!(d.next_due, Some(slot));
        // Exactly at the slot, or after it: done.
        for s in [slot, t("2026-03-10T03:00:01Z"), t("2026-03-10T11:59:59Z")] {
            let d = due(&r, Some(s), now);
            assert_eq!((d.due, d.reason), (false, DueReason::Done), "{s}");
            assert_eq!(d.next_due, Some(t("2026-03-11T03:00:00Z")));
            assert_eq!(d.slot, Some(slot));
        }
        // One millisecond before the slot: due.
        assert!(due(&r, Some(slot - Duration::milliseconds(1)), now).due);
    }

    #[test]
    fn an_interval_slot_is_the_aligned_window_and_does_not_drift() {
        let r = rules(serde_json::json!({"interval": "1h"}));
        // A 1h job that starts at the full hour and takes ten minutes:
        // its success at 10:10 does the 10:00 slot; 11:00 is due again
        // (last success + interval would say 11:10, and drift).
        let last = t("2026-03-10T10:10:00Z");
        let d = due(&r, Some(last), t("2026-03-10T10:59:59.999Z"));
        assert_eq!(
            (d.due, d.reason, d.slot),
            (false, DueReason::Done, Some(t("2026-03-10T10:00:00Z")))
        );
        assert_eq!(d.next_due, Some(t("2026-03-10T11:00:00Z")));
        let d = due(&r, Some(last), t("2026-03-10T11:00:00Z"));
        assert_eq!((d.due, d.slot), (true, Some(t("2026-03-10T11:00:00Z"))));
        // A success just before the window does not do it.
        assert!(
            due(
                &r,
                Some(t("2026-03-10T10:59:59.999Z")),
                t("2026-03-10T11:00:00Z")
            )
            .due
        );
        assert!(due(&r, None, last).due);
    }

    #[test]
    fn quiet_hours_are_never_due() {
        let r = rules(serde_json::json!({
            "interval": "1h", "tz": "UTC",
            "active_hours": [{"start": "09:00", "end": "17:00"}],
        }));
        // 20:00 is quiet: not due, even though no run ever succeeded.
        let d = due(&r, None, t("2026-03-10T20:00:00Z"));
        assert_eq!((d.due, d.reason, d.quiet), (false, DueReason::Quiet, true));
        // A success at 16:30 did the 16:00 slot; 09:00 the next morning
        // is a new window, due at once.
        let d = due(
            &r,
            Some(t("2026-03-10T16:30:00Z")),
            t("2026-03-11T09:10:00Z"),
        );
        assert_eq!((d.due, d.slot), (true, Some(t("2026-03-11T09:00:00Z"))));
    }

    #[test]
    fn the_latest_fire_time_of_sparse_and_dense_expressions() {
        let now = t("2026-03-10T12:34:56Z");
        let cases = [
            ("* * * * * *", "2026-03-10T12:34:56Z"),
            ("*/5 * * * *", "2026-03-10T12:30:00Z"),
            ("0 3 * * *", "2026-03-10T03:00:00Z"),
            ("0 0 1 1 *", "2026-01-01T00:00:00Z"),
            ("0 0 29 2 *", "2024-02-29T00:00:00Z"),
            ("* 0-5 1 * *", "2026-03-01T05:59:00Z"),
        ];
        for (expr, want) in cases {
            let cron = CronSchedule::parse(expr, "UTC").unwrap();
            assert_eq!(latest_fire(&cron, now), Some(t(want)), "{expr}");
        }
    }

    #[test]
    fn lock_ttls_are_bounded_and_default_to_max_runtime() {
        assert_eq!(parse_lock_ttl("1s"), Ok(StdDuration::from_secs(1)));
        assert_eq!(parse_lock_ttl("7days"), Ok(MAX_LOCK_TTL));
        for bad in ["0s", "500ms", "8days", "soon", "", "-1s"] {
            let e = parse_lock_ttl(bad).unwrap_err();
            assert!(e.starts_with("ttl: "), "{bad}: {e}");
        }
        let now = t("2026-03-10T12:00:00Z");
        let r = rules(serde_json::json!({"interval": "1h", "max_runtime": "20m"}));
        assert_eq!(default_lock_ttl(&r, now), StdDuration::from_secs(1200));
        let r = rules(serde_json::json!({"interval": "1h", "grace": "5m"}));
        assert_eq!(default_lock_ttl(&r, now), StdDuration::from_secs(300));
        let r = rules(serde_json::json!({"interval": "1h"}));
        assert_eq!(default_lock_ttl(&r, now), StdDuration::from_secs(3600));
        let r = rules(serde_json::json!({"cron": "*/10 * * * *"}));
        assert_eq!(default_lock_ttl(&r, now), StdDuration::from_secs(600));
        let r = rules(serde_json::json!({"interval": "30days"}));
        assert_eq!(default_lock_ttl(&r, now), MAX_LOCK_TTL);
    }

    #[test]
    fn skip_reasons_fold_into_four_labels() {
        assert_eq!(
            skip_class("already done for slot 2026-03-10T03:00:00Z"),
            "done"
        );
        assert_eq!(
            skip_class("locked by web-1:42 until 2026-03-10T03:05:00Z"),
            "locked"
        );
        assert_eq!(skip_class("quiet hours"), "quiet");
        assert_eq!(skip_class("maintenance"), "other");
        assert_eq!(skip_class(""), "other");
    }

    proptest! {
        /// For a cron check, due ⇔ some fire time lies in (last success, now],
        /// checked against a brute-force walk of fire times.
        #[test]
        fn cron_due_matches_a_walk_of_fire_times(
            minute_step in 1u32..30,
            last_offset in 0i64..(3 * 86_400),
            now_offset in 0i64..(3 * 86_400),
        ) {
            let expr = format!("*/{minute_step} * * * *");
            let r = rules(serde_json::json!({"cron": expr}));
            let base = t("2026-03-08T00:00:00Z");
            let last = base + Duration::seconds(last_offset);
            let now = base + Duration::seconds(now_offset.max(last_offset));
            let Expect::Cron(cron) = &r.expect else { unreachable!() };
            prop_assume!(last.timestamp_subsec_millis() == 0);
            // Brute force, without the schedule code: a whole minute in
            // (last, now] whose minute of the hour divides by the step.
            use chrono::Timelike;
            let mut m = last - Duration::seconds(i64::from(last.second())) + Duration::minutes(1);
            let mut in_between = false;
            while m <= now {
                if m.minute().is_multiple_of(minute_step) {
                    in_between = true;
                    break;
                }
                m += Duration::minutes(1);
            }
            let d = due(&r, Some(last), now);
            prop_assert_eq!(d.due, in_between);
            // The slot is a fire time at or before now, and the next one is after now.
            let slot = d.slot.unwrap();
            prop_assert!(slot <= now);
            prop_assert!(cron.next_after(slot).unwrap() > now);
            prop_assert_eq!(d.due, slot > last);
        }

        /// An interval check is due exactly when no success lies in the
        /// aligned window `now` falls in: brute force by integer division.
        #[test]
        fn interval_due_when_no_success_in_the_aligned_window(
            interval_s in 1i64..86_400,
            last_s in 0i64..(4 * 86_400),
            elapsed in 0i64..(2 * 86_400),
        ) {
            let r = rules(serde_json::json!({"interval": format!("{interval_s}s")}));
            let base = t("2026-03-08T00:00:00Z");
            let last = base + Duration::seconds(last_s);
            let now = last + Duration::seconds(elapsed);
            let window = |x: DateTime<Utc>| x.timestamp().div_euclid(interval_s);
            prop_assert_eq!(due(&r, Some(last), now).due, window(now) > window(last));
        }
    }
}
