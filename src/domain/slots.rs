//! Slots (SPEC §13, §14): the runs a check expects, one definition for
//! both kinds of schedule.
//!
//! - Cron check: a slot starts at each fire time and lasts until the next.
//! - Interval check: a slot is a window of one interval aligned to the Unix
//!   epoch in UTC (`1h`: every full hour; `1d`: 00:00 UTC). Aligned windows
//!   do not drift with each run's duration, as "last success + interval"
//!   does.
//!
//! A time belongs to the latest slot start at or before it. A slot is
//! expected unless it lies in quiet time: a cron slot whose fire time is
//! quiet, an interval window with no active time in it.

use chrono::{DateTime, Duration, Utc};

use super::active_hours::ActiveHours;
use super::evaluate::Expect;
use super::guard::latest_fire;

/// The start of the slot `t` falls in: the latest slot start at or before
/// `t`. `None` for a cron expression with no fire time in the nine years
/// before `t`, or an interval that is not positive.
pub fn slot_at(expect: &Expect, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match expect {
        Expect::Cron(cron) => latest_fire(cron, t),
        Expect::Interval(i) => {
            let len = i.num_milliseconds();
            if len <= 0 {
                return None;
            }
            let ms = t.timestamp_millis();
            DateTime::from_timestamp_millis(ms - ms.rem_euclid(len))
        }
    }
}

/// The start of the slot after the one that starts at `start` (or after
/// the slot `start` falls in).
pub fn next_slot(expect: &Expect, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match expect {
        Expect::Cron(cron) => cron.next_after(start),
        Expect::Interval(i) => slot_at(expect, start)?.checked_add_signed(*i),
    }
}

/// Whether the slot that starts at `start` is expected, given the check's
/// active hours: a cron slot whose fire time is inside them; an interval
/// window that holds some active time (a `1d` window from 00:00 UTC is
/// expected for a job active 09:00–17:00).
pub fn expected(expect: &Expect, hours: Option<&ActiveHours>, start: DateTime<Utc>) -> bool {
    let Some(hours) = hours else {
        return true;
    };
    if hours.is_active(start) {
        return true;
    }
    match expect {
        Expect::Cron(_) => false,
        Expect::Interval(i) => hours
            .next_change(start)
            .is_some_and(|c| start.checked_add_signed(*i).is_some_and(|end| c < end)),
    }
}

/// The most slots [`starts_between`] walks in one call.
pub const MAX_WALK: usize = 100_000;

/// The slot starts `s` with `from <= s <= to`, oldest first, at most
/// `limit` (and never more than [`MAX_WALK`]): the slot `from` falls in is
/// not listed unless it starts at `from`.
pub fn starts_between(
    expect: &Expect,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: usize,
) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    if to < from {
        return out;
    }
    let mut cur = match slot_at(expect, from) {
        Some(s) if s == from => Some(s),
        _ => next_after(expect, from),
    };
    while let Some(s) = cur {
        if s > to || out.len() >= limit.min(MAX_WALK) {
            break;
        }
        out.push(s);
        cur = next_slot(expect, s);
    }
    out
}

/// The first slot start strictly after `t`.
pub fn next_after(expect: &Expect, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match expect {
        Expect::Cron(cron) => cron.next_after(t),
        Expect::Interval(_) => next_slot(expect, t),
    }
}

/// The length of the slot that starts at `start` (until the next slot).
pub fn length(expect: &Expect, start: DateTime<Utc>) -> Option<Duration> {
    Some(next_slot(expect, start)? - start)
}

/// The idempotency key of a slot: `<name>@<slot start, RFC 3339 UTC>`,
/// with the check's slug or unique key as its name (SPEC §14).
pub fn key(name: &str, start: DateTime<Utc>) -> String {
    format!("{name}@{}", rfc3339(start))
}

/// A slot start as written in keys, pings and answers: RFC 3339 UTC,
/// seconds, with milliseconds only when there are some.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    use chrono::SecondsFormat;
    let f = if t.timestamp_subsec_millis() == 0 {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Millis
    };
    t.to_rfc3339_opts(f, true)
}

/// Parses a slot as a ping or the API names it (`?slot=`): an RFC 3339
/// instant with an offset; the error says what was wrong.
pub fn parse(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!("slot must be an RFC 3339 instant such as 2026-12-05T03:00:00Z ({e}): {text:?}")
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{NaiveTime, Timelike};
    use chrono_tz::Tz;
    use proptest::prelude::*;

    use super::*;
    use crate::domain::active_hours::Window;
    use crate::domain::schedule::CronSchedule;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cron(expr: &str, tz: &str) -> Expect {
        Expect::Cron(Arc::new(CronSchedule::parse(expr, tz).unwrap()))
    }

    fn every(secs: i64) -> Expect {
        Expect::Interval(Duration::seconds(secs))
    }

    #[test]
    fn interval_slots_are_aligned_to_the_epoch_in_utc() {
        let hourly = every(3600);
        assert_eq!(
            slot_at(&hourly, t("2026-12-05T10:59:59.999Z")),
            Some(t("2026-12-05T10:00:00Z"))
        );
        assert_eq!(
            slot_at(&hourly, t("2026-12-05T11:00:00Z")),
            Some(t("2026-12-05T11:00:00Z"))
        );
        // 1d: 00:00 UTC, whatever the check's zone.
        assert_eq!(
            slot_at(&every(86_400), t("2026-12-05T23:30:00+01:00")),
            Some(t("2026-12-05T00:00:00Z"))
        );
        // Before 1970 too (rem_euclid, not %).
        assert_eq!(
            slot_at(&hourly, t("1969-12-31T23:30:00Z")),
            Some(t("1969-12-31T23:00:00Z"))
        );
        assert_eq!(
            next_slot(&hourly, t("2026-12-05T10:20:00Z")),
            Some(t("2026-12-05T11:00:00Z"))
        );
        assert_eq!(slot_at(&every(0), t("2026-12-05T10:00:00Z")), None);
    }

    #[test]
    fn cron_slots_are_fire_times() {
        let c = cron("0 3 * * *", "Europe/Berlin");
        assert_eq!(
            slot_at(&c, t("2026-12-05T12:00:00Z")),
            Some(t("2026-12-05T02:00:00Z"))
        );
        assert_eq!(
            slot_at(&c, t("2026-12-05T02:00:00Z")),
            Some(t("2026-12-05T02:00:00Z"))
        );
        assert_eq!(
            next_slot(&c, t("2026-12-05T02:00:00Z")),
            Some(t("2026-12-06T02:00:00Z"))
        );
        assert_eq!(
            starts_between(&c, t("2026-12-05T02:00:00Z"), t("2026-12-07T02:00:00Z"), 10),
            vec![
                t("2026-12-05T02:00:00Z"),
                t("2026-12-06T02:00:00Z"),
                t("2026-12-07T02:00:00Z")
            ]
        );
        assert_eq!(
            starts_between(&c, t("2026-12-05T02:00:01Z"), t("2026-12-07T02:00:00Z"), 1),
            vec![t("2026-12-06T02:00:00Z")]
        );
    }

    #[test]
    fn a_spring_forward_night_has_one_slot_for_a_fixed_time_in_the_gap() {
        // 02:30 does not exist in Berlin on 2026-03-29: the slot is 03:00 CEST.
        let c = cron("30 2 * * *", "Europe/Berlin");
        let s = starts_between(&c, t("2026-03-28T00:00:00Z"), t("2026-03-30T23:00:00Z"), 10);
        assert_eq!(
            s,
            vec![
                t("2026-03-28T01:30:00Z"),
                t("2026-03-29T01:00:00Z"),
                t("2026-03-30T00:30:00Z")
            ]
        );
    }

    #[test]
    fn quiet_slots_are_not_expected() {
        let hours = ActiveHours::new(
            vec![Window::parse("09:00", "17:00", &[]).unwrap()],
            "UTC".parse::<Tz>().unwrap(),
        );
        let c = cron("0 * * * *", "UTC");
        assert!(!expected(&c, Some(&hours), t("2026-12-05T08:00:00Z")));
        assert!(expected(&c, Some(&hours), t("2026-12-05T09:00:00Z")));
        assert!(!expected(&c, Some(&hours), t("2026-12-05T17:00:00Z")));
        // A daily window from 00:00 UTC holds 09:00–17:00: expected.
        assert!(expected(
            &every(86_400),
            Some(&hours),
            t("2026-12-05T00:00:00Z")
        ));
        // An hourly window wholly before 09:00 is not.
        assert!(!expected(
            &every(3600),
            Some(&hours),
            t("2026-12-05T08:00:00Z")
        ));
        assert!(expected(
            &every(3600),
            Some(&hours),
            t("2026-12-05T09:00:00Z")
        ));
        assert!(expected(&every(3600), None, t("2026-12-05T03:00:00Z")));
    }

    #[test]
    fn keys_and_parsing() {
        assert_eq!(
            key("backup", t("2026-12-05T03:00:00+01:00")),
            "backup@2026-12-05T02:00:00Z"
        );
        assert_eq!(
            key("b", t("2026-12-05T02:00:00.250Z")),
            "b@2026-12-05T02:00:00.250Z"
        );
        assert_eq!(
            parse("2026-12-05T03:00:00+01:00"),
            Ok(t("2026-12-05T02:00:00Z"))
        );
        let e = parse("yesterday").unwrap_err();
        assert!(e.contains("RFC 3339") && e.contains("yesterday"), "{e}");
    }

    // ---- property tests against brute force that does not use the schedule code ----

    /// Brute force: the fire times of `M H * * *` (fixed) or `*/k * * * *`
    /// in `tz`, found by walking every minute in UTC and reading its local
    /// wall time. A fixed time fires once per local date, at the first
    /// minute whose wall time reaches it (in a spring-forward gap: the first
    /// minute after the gap; in a repeated hour: its first pass).
    fn brute_fires(
        kind: BruteCron,
        tz: Tz,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        // From two days before, so the date `from` falls on is walked whole.
        let mut m = (from - Duration::hours(50))
            .with_second(0)
            .unwrap()
            .with_nanosecond(0)
            .unwrap();
        let mut fired = std::collections::HashSet::new();
        while m <= to {
            let wall = m.with_timezone(&tz).naive_local();
            let fires = match kind {
                BruteCron::Every(k) => wall.minute().is_multiple_of(k),
                BruteCron::At(h, mi) => {
                    wall.time() >= NaiveTime::from_hms_opt(h, mi, 0).unwrap()
                        && fired.insert(wall.date())
                }
            };
            if fires && m >= from - Duration::hours(26) {
                out.push(m);
            }
            m += Duration::minutes(1);
        }
        out
    }

    #[derive(Clone, Copy, Debug)]
    enum BruteCron {
        Every(u32),
        At(u32, u32),
    }

    const ZONES: [&str; 4] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
    ];

    /// Instants near DST transitions of the zones above.
    const NEAR: [&str; 5] = [
        "2026-03-29T00:30:00Z",
        "2026-10-25T00:30:00Z",
        "2026-03-08T06:30:00Z",
        "2026-11-01T05:30:00Z",
        "2026-04-04T14:30:00Z",
    ];

    fn instant() -> impl Strategy<Value = DateTime<Utc>> {
        (prop::sample::select(&NEAR[..]), -600i64..600, 0i64..60_000)
            .prop_map(|(n, min, ms)| t(n) + Duration::minutes(min) + Duration::milliseconds(ms))
    }

    fn brute() -> impl Strategy<Value = BruteCron> {
        prop_oneof![
            prop::sample::select(&[1u32, 5, 10, 15, 30][..]).prop_map(BruteCron::Every),
            (0u32..24, prop::sample::select(&[0u32, 15, 30, 45][..]))
                .prop_map(|(h, m)| BruteCron::At(h, m)),
        ]
    }

    fn expr(b: BruteCron) -> String {
        match b {
            BruteCron::Every(1) => "* * * * *".into(),
            BruteCron::Every(k) => format!("*/{k} * * * *"),
            BruteCron::At(h, m) => format!("{m} {h} * * *"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// An interval slot is the aligned window `t` falls in: it starts at
        /// a multiple of the interval, at or before `t`, less than one
        /// interval before it; the next one starts one interval later.
        #[test]
        fn interval_slots_match_integer_division(
            len_s in 1i64..200_000,
            at_ms in -10_000_000_000_000i64..10_000_000_000_000,
        ) {
            let e = every(len_s);
            let at = DateTime::from_timestamp_millis(at_ms).unwrap();
            let s = slot_at(&e, at).unwrap();
            let len_ms = len_s * 1000;
            prop_assert_eq!(s.timestamp_millis().rem_euclid(len_ms), 0);
            prop_assert!(s <= at && at - s < Duration::milliseconds(len_ms));
            prop_assert_eq!(next_slot(&e, s), Some(s + Duration::milliseconds(len_ms)));
            prop_assert_eq!(next_slot(&e, at), Some(s + Duration::milliseconds(len_ms)));
        }

        /// Cron slots over three hours around a DST night are exactly the
        /// brute force's fire times, and every instant belongs to the
        /// latest of them at or before it.
        #[test]
        fn cron_slots_match_a_minute_walk(
            b in brute(),
            zone in prop::sample::select(&ZONES[..]),
            from in instant(),
            probe_min in 0i64..180,
        ) {
            let tz: Tz = zone.parse().unwrap();
            let e = cron(&expr(b), zone);
            let to = from + Duration::hours(3);
            // Wide enough before `from` to hold one fire time of a daily job.
            let fires = brute_fires(b, tz, from - Duration::hours(26), to);
            let listed = starts_between(&e, from, to, 1_000);
            let expected_list: Vec<_> = fires.iter().copied().filter(|f| *f >= from).collect();
            prop_assert_eq!(&listed, &expected_list, "{} in {}", expr(b), zone);
            let probe = from + Duration::minutes(probe_min);
            let latest = fires.iter().copied().filter(|f| *f <= probe).max();
            prop_assert_eq!(slot_at(&e, probe), latest, "{} in {} at {}", expr(b), zone, probe);
        }

        /// With active hours, a slot is expected exactly when the brute
        /// force finds an active minute at its start (cron) or anywhere in
        /// its window (interval), reading wall times minute by minute.
        #[test]
        fn expected_slots_match_a_walk_of_active_minutes(
            start_h in 0u32..24,
            len_h in 1u32..24,
            zone in prop::sample::select(&ZONES[..]),
            at in instant(),
            interval_min in prop::sample::select(&[15i64, 60, 90, 240, 1440][..]),
        ) {
            let tz: Tz = zone.parse().unwrap();
            let end_h = (start_h + len_h) % 24;
            let w = Window::parse(&format!("{start_h:02}:00"), &format!("{end_h:02}:00"), &[]).unwrap();
            let hours = ActiveHours::new(vec![w], tz);
            let active = |m: DateTime<Utc>| {
                let h = m.with_timezone(&tz).hour();
                if start_h < end_h { h >= start_h && h < end_h } else { h >= start_h || h < end_h }
            };
            let e = every(interval_min * 60);
            let s = slot_at(&e, at).unwrap();
            let any_active = (0..interval_min).any(|k| active(s + Duration::minutes(k)));
            prop_assert_eq!(expected(&e, Some(&hours), s), any_active);
            let c = cron("0 * * * *", zone);
            let f = slot_at(&c, at).unwrap();
            prop_assert_eq!(expected(&c, Some(&hours), f), active(f));
        }
    }
}
