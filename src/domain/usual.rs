//! The usual item count of a check (SPEC §3.3, `items_below_usual`): for a
//! counted success, the median, over the weeks of `items_window`, of the
//! mean items per counted success in the same local hour of the week.
//!
//! The history it needs is one aggregate per local hour with successes
//! (`sum` and `count` of the items reported), keyed by the local wall-clock
//! hour in the check's time zone: a "local hour" is the naive local date and
//! hour counted in hours since 1970-01-01T00 (as if the local clock were
//! UTC). Keyed so, the same hour of the week is always 168 local hours
//! earlier, across DST changes: when clocks fall back, the repeated hour's
//! two real hours share one bucket; when they spring forward, the skipped
//! hour has none.
//!
//! Pure: every function takes the instant it judges, never the clock.

use chrono::{Datelike, TimeZone, Timelike};
use chrono_tz::Tz;

/// An instant as Unix milliseconds (as `ping::UnixMs`; this module is below `ping`).
type UnixMs = i64;

/// Hours in a week.
pub const WEEK_HOURS: i64 = 168;
/// How many weeks must have the hour before the usual count is judged.
pub const MIN_WEEKS: usize = 3;

/// The successes of one local hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourBucket {
    /// The local hour (see the module's documentation).
    pub local_hour: i64,
    /// Items reported by the hour's counted successes, summed.
    pub sum: u64,
    /// How many counted successes the hour had.
    pub count: u32,
    /// The id of the last ping counted in it: a ping folded again (after a
    /// restart) is not counted twice.
    pub through: i64,
}

/// A check's `items_below_usual` rule as its pings are folded with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsualRule {
    /// `items_below_usual` in millionths.
    pub fraction_ppm: u32,
    /// Whole weeks of `items_window`.
    pub weeks: u32,
    /// The check's zone: hours of the week are local.
    pub tz: Tz,
}

impl UsualRule {
    /// The fraction below which a count is low.
    pub fn fraction(&self) -> f64 {
        f64::from(self.fraction_ppm) / 1e6
    }
}

/// What judging one counted success against its history gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judged {
    /// Fewer than [`MIN_WEEKS`] weeks had the hour: not judged.
    Unjudged,
    /// Judged against this usual count: low or not.
    Usual { usual: f64, low: bool },
}

/// Judges a counted success reporting `items` at `at` against `buckets`, and
/// records it in them (ping `id`; a ping already recorded is not recorded
/// again). `buckets` must hold the hours [`hours_needed`] names.
pub fn judge_and_record(
    buckets: &mut Vec<HourBucket>,
    rule: UsualRule,
    at: UnixMs,
    items: u64,
    id: i64,
) -> Judged {
    let hour = local_hour(at, rule.tz);
    let judged = match usual(buckets, hour, rule.weeks) {
        None => Judged::Unjudged,
        Some(u) => Judged::Usual {
            usual: u,
            low: below_usual(items, u, rule.fraction()),
        },
    };
    record(buckets, at, rule.tz, items, id);
    judged
}

/// The local hours whose buckets judging and recording a success at `at`
/// reads: its own and the same hour of each week of the window.
pub fn hours_needed(at: UnixMs, rule: UsualRule) -> impl Iterator<Item = i64> {
    let hour = local_hour(at, rule.tz);
    (0..=i64::from(rule.weeks)).map(move |k| hour - k * WEEK_HOURS)
}

impl HourBucket {
    fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / f64::from(self.count))
    }
}

/// The local hour of `at` in `tz`.
pub fn local_hour(at: UnixMs, tz: Tz) -> i64 {
    let local = tz.timestamp_millis_opt(at).single().map_or_else(
        || chrono::DateTime::<chrono::Utc>::UNIX_EPOCH.naive_utc(),
        |t| t.naive_local(),
    );
    let days = i64::from(local.date().num_days_from_ce()) - UNIX_EPOCH_DAYS_FROM_CE;
    days * 24 + i64::from(local.hour())
}

/// Days from 0001-01-01 (day 1) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i64 = 719_163;

/// The hour of the week of a local hour: 0 is Monday 00:00–01:00, 167 is
/// Sunday 23:00–24:00.
pub fn hour_of_week(local_hour: i64) -> i64 {
    // 1970-01-01 was a Thursday: three days after a Monday.
    (local_hour + 3 * 24).rem_euclid(WEEK_HOURS)
}

/// The usual count for a success in local hour `at_hour`: the median of the
/// means of the same hour of the week in each of the `weeks` weeks before
/// it (the hour itself is not its own history), or `None` when fewer than
/// [`MIN_WEEKS`] of those weeks had a counted success in that hour.
/// `buckets` may be in any order and hold other hours.
pub fn usual(buckets: &[HourBucket], at_hour: i64, weeks: u32) -> Option<f64> {
    let oldest = at_hour - WEEK_HOURS * i64::from(weeks);
    let mut means: Vec<f64> = buckets
        .iter()
        .filter(|b| {
            b.local_hour < at_hour
                && b.local_hour >= oldest
                && (at_hour - b.local_hour) % WEEK_HOURS == 0
        })
        .filter_map(HourBucket::mean)
        .collect();
    if means.len() < MIN_WEEKS {
        return None;
    }
    means.sort_by(f64::total_cmp);
    let n = means.len();
    Some(if n % 2 == 1 {
        means[n / 2]
    } else {
        (means[n / 2 - 1] + means[n / 2]) / 2.0
    })
}

/// Whether `items` is low against `usual`: below `fraction` of it. A usual
/// count of zero makes nothing low.
pub fn below_usual(items: u64, usual: f64, fraction: f64) -> bool {
    usual > 0.0 && (items as f64) < fraction * usual
}

/// The weeks `items_window` spans (whole weeks, rounded down).
pub fn window_weeks(window_ms: i64) -> u32 {
    u32::try_from(window_ms / (WEEK_HOURS * 3_600_000)).unwrap_or(u32::MAX)
}

/// Adds one counted success (ping `id`) to the history: the bucket of its
/// local hour. False when the bucket already counts that ping (ids only
/// grow, so `through` says which it holds).
pub fn record(buckets: &mut Vec<HourBucket>, at: UnixMs, tz: Tz, items: u64, id: i64) -> bool {
    let hour = local_hour(at, tz);
    match buckets.iter_mut().find(|b| b.local_hour == hour) {
        Some(b) if b.through >= id => false,
        Some(b) => {
            b.sum = b.sum.saturating_add(items);
            b.count = b.count.saturating_add(1);
            b.through = id;
            true
        }
        None => {
            buckets.push(HourBucket {
                local_hour: hour,
                sum: items,
                count: 1,
                through: id,
            });
            true
        }
    }
}

/// Drops the buckets older than `weeks` weeks before local hour `now_hour`:
/// nothing older is ever judged.
pub fn prune(buckets: &mut Vec<HourBucket>, now_hour: i64, weeks: u32) {
    let oldest = now_hour - WEEK_HOURS * i64::from(weeks);
    buckets.retain(|b| b.local_hour >= oldest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, Utc};
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000;

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> UnixMs {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0)
            .unwrap()
            .timestamp_millis()
    }

    fn bucket(local_hour: i64, sum: u64, count: u32) -> HourBucket {
        HourBucket {
            local_hour,
            sum,
            count,
            through: 0,
        }
    }

    #[test]
    fn local_hours_count_the_wall_clock() {
        let tz: Tz = "UTC".parse().unwrap();
        assert_eq!(local_hour(0, tz), 0);
        assert_eq!(local_hour(HOUR - 1, tz), 0);
        assert_eq!(local_hour(25 * HOUR, tz), 25);
        assert_eq!(local_hour(-1, tz), -1);
        // Berlin is an hour ahead in winter, two in summer.
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let winter = utc(2026, 1, 5, 8, 30);
        assert_eq!(local_hour(winter, berlin), local_hour(winter, tz) + 1);
        let summer = utc(2026, 7, 6, 8, 30);
        assert_eq!(local_hour(summer, berlin), local_hour(summer, tz) + 2);
        // Half-hour zones: 08:30 UTC is 14:00 in Kolkata.
        let kolkata: Tz = "Asia/Kolkata".parse().unwrap();
        let h = local_hour(utc(2026, 1, 5, 8, 30), kolkata);
        let naive = NaiveDate::from_ymd_opt(2026, 1, 5)
            .unwrap()
            .and_hms_opt(14, 0, 0)
            .unwrap();
        assert_eq!(h, naive.and_utc().timestamp() / 3600);
    }

    #[test]
    fn hours_of_the_week_start_on_monday() {
        let tz: Tz = "UTC".parse().unwrap();
        // 2026-01-05 is a Monday.
        assert_eq!(hour_of_week(local_hour(utc(2026, 1, 5, 0, 0), tz)), 0);
        assert_eq!(hour_of_week(local_hour(utc(2026, 1, 5, 13, 59), tz)), 13);
        assert_eq!(hour_of_week(local_hour(utc(2026, 1, 11, 23, 0), tz)), 167);
        assert_eq!(hour_of_week(local_hour(utc(2026, 1, 12, 0, 0), tz)), 0);
        // 1970-01-01, a Thursday.
        assert_eq!(hour_of_week(0), 72);
        assert_eq!(hour_of_week(-1), 71);
    }

    #[test]
    fn the_usual_count_is_the_median_of_weekly_means() {
        let at = 10_000;
        let w = WEEK_HOURS;
        let b = vec![
            bucket(at - w, 100, 2),     // mean 50
            bucket(at - 2 * w, 40, 1),  // 40
            bucket(at - 3 * w, 180, 3), // 60
            bucket(at - 4 * w, 10, 1),  // 10
            bucket(at - 5 * w, 1, 1),   // outside a 4-week window
            bucket(at - 1, 999, 1),     // another hour of the week
            bucket(at, 999, 1),         // the hour itself
        ];
        // Four weeks: 10, 40, 50, 60 → the mean of the middle two.
        assert_eq!(usual(&b, at, 4), Some(45.0));
        // Three weeks: 40, 50, 60.
        assert_eq!(usual(&b, at, 3), Some(50.0));
    }

    #[test]
    fn fewer_than_three_weeks_are_not_judged() {
        let at = 10_000;
        let w = WEEK_HOURS;
        let b = vec![bucket(at - w, 5, 1), bucket(at - 3 * w, 5, 1)];
        assert_eq!(usual(&b, at, 4), None);
        // An hour with no counted success is no week.
        let b = vec![
            bucket(at - w, 5, 1),
            bucket(at - 2 * w, 0, 0),
            bucket(at - 3 * w, 5, 1),
        ];
        assert_eq!(usual(&b, at, 4), None);
        assert_eq!(usual(&[], at, 4), None);
    }

    #[test]
    fn the_same_local_hour_across_a_dst_change() {
        // A job at 09:15 Berlin time every Monday: before and after the
        // spring change (2026-03-29) it is a different UTC hour, the same
        // local hour of the week.
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let mut b = Vec::new();
        for (d, h_utc, items) in [(9, 8, 40), (16, 8, 50), (23, 8, 60)] {
            record(
                &mut b,
                utc(2026, 3, d, h_utc, 15),
                berlin,
                items,
                i64::from(d),
            );
        }
        // 2026-03-30, 09:15 CEST = 07:15 UTC.
        let at = local_hour(utc(2026, 3, 30, 7, 15), berlin);
        assert_eq!(
            hour_of_week(at),
            hour_of_week(local_hour(utc(2026, 3, 9, 8, 15), berlin))
        );
        assert_eq!(usual(&b, at, 4), Some(50.0));
    }

    #[test]
    fn the_repeated_autumn_hour_is_one_bucket_and_the_skipped_spring_hour_none() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // 2026-10-25: 02:00–03:00 happens twice (00:00 and 01:00 UTC).
        let mut b = Vec::new();
        record(&mut b, utc(2026, 10, 25, 0, 30), berlin, 10, 1);
        record(&mut b, utc(2026, 10, 25, 1, 30), berlin, 30, 2);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].sum, b[0].count), (40, 2));
        // 2026-03-29: 02:00 local does not exist; 01:30 UTC is 03:30 CEST.
        let h = local_hour(utc(2026, 3, 29, 1, 30), berlin);
        assert_eq!(h % 24, 3);
    }

    #[test]
    fn hours_needed_are_the_same_local_hour_each_week_across_dst() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let rule = UsualRule {
            fraction_ppm: 250_000,
            weeks: 4,
            tz: berlin,
        };
        // Monday 2026-04-06 09:15 CEST; three of the four weeks before were CET.
        let at = utc(2026, 4, 6, 7, 15);
        let hours: Vec<i64> = hours_needed(at, rule).collect();
        assert_eq!(hours.len(), 5);
        for (k, h) in hours.iter().enumerate() {
            assert_eq!(h % 24, 9, "09:00 local, week {k}");
            assert_eq!(hour_of_week(*h), 9, "Monday 09:00");
        }
        // The buckets a CET-time success recorded are among them.
        let mut b = Vec::new();
        record(&mut b, utc(2026, 3, 9, 8, 15), berlin, 5, 1);
        assert!(hours.contains(&b[0].local_hour));
    }

    #[test]
    fn judging_records_and_uses_only_earlier_weeks() {
        let rule = UsualRule {
            fraction_ppm: 500_000,
            weeks: 4,
            tz: chrono_tz::UTC,
        };
        let mut b = Vec::new();
        let week = WEEK_HOURS * HOUR;
        for w in 0..3 {
            assert_eq!(
                judge_and_record(&mut b, rule, w * week, 10, w + 1),
                Judged::Unjudged
            );
        }
        assert_eq!(
            judge_and_record(&mut b, rule, 3 * week, 4, 10),
            Judged::Usual {
                usual: 10.0,
                low: true
            }
        );
        // The same hour again: its own earlier success this week is not history.
        assert_eq!(
            judge_and_record(&mut b, rule, 3 * week + 60_000, 5, 11),
            Judged::Usual {
                usual: 10.0,
                low: false
            }
        );
        assert_eq!(b.len(), 4);
        // Ping 11 again (a restart folds it again): not counted twice.
        judge_and_record(&mut b, rule, 3 * week + 60_000, 5, 11);
        let this = b.iter().find(|x| x.local_hour == 3 * WEEK_HOURS).unwrap();
        assert_eq!((this.sum, this.count, this.through), (9, 2, 11));
    }

    #[test]
    fn low_means_below_the_fraction_of_a_positive_usual_count() {
        assert!(below_usual(8, 50.0, 0.25));
        assert!(!below_usual(13, 50.0, 0.25));
        assert!(!below_usual(12, 48.0, 0.25), "equal is not below");
        assert!(!below_usual(0, 0.0, 0.25));
    }

    #[test]
    fn windows_count_whole_weeks() {
        assert_eq!(window_weeks(4 * WEEK_HOURS * HOUR), 4);
        assert_eq!(window_weeks(4 * WEEK_HOURS * HOUR - 1), 3);
        assert_eq!(window_weeks(0), 0);
    }

    #[test]
    fn pruning_keeps_what_can_still_be_judged() {
        let mut b = vec![bucket(0, 1, 1), bucket(100, 1, 1), bucket(1000, 1, 1)];
        prune(&mut b, 1000, 6);
        assert_eq!(b.len(), 3);
        prune(&mut b, 1000 + WEEK_HOURS * 5, 5);
        let left: Vec<i64> = b.iter().map(|b| b.local_hour).collect();
        assert_eq!(left, [1000]);
    }

    proptest! {
        /// The usual count is one of the weekly means or between two of them,
        /// and never looks at other hours, the hour itself, or the future.
        #[test]
        fn usual_is_a_median_of_that_hour_only(
            weekly in proptest::collection::vec(proptest::option::of((0u64..10_000, 1u32..20)), 1..8),
            noise in proptest::collection::vec((-2000i64..2000, 0u64..10_000, 0u32..5), 0..30),
            weeks in 1u32..8,
        ) {
            let at = 50_000;
            let mut b: Vec<HourBucket> = weekly
                .iter()
                .enumerate()
                .filter_map(|(k, w)| w.map(|(sum, count)| bucket(at - WEEK_HOURS * (k as i64 + 1), sum, count)))
                .collect();
            let means: Vec<f64> = weekly
                .iter()
                .take(weeks as usize)
                .flatten()
                .map(|(sum, count)| *sum as f64 / f64::from(*count))
                .collect();
            // Other hours, and later weeks of the same hour, change nothing.
            for (dh, sum, count) in noise {
                let h = at + dh;
                if (at - h) % WEEK_HOURS == 0 && h < at {
                    continue;
                }
                b.push(bucket(h, sum, count));
            }
            let u = usual(&b, at, weeks);
            if means.len() < MIN_WEEKS {
                prop_assert_eq!(u, None);
            } else {
                let u = u.unwrap();
                let below = means.iter().filter(|m| **m < u).count();
                let above = means.iter().filter(|m| **m > u).count();
                prop_assert!(below <= means.len() / 2 && above <= means.len() / 2);
                let lo = means.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                prop_assert!(lo <= u && u <= hi);
            }
        }

        /// Recording keeps one bucket per local hour and adds up exactly.
        #[test]
        fn record_adds_up(pings in proptest::collection::vec((0i64..(30 * 24 * 3_600_000), 0u64..1000), 0..60)) {
            let tz: Tz = "America/New_York".parse().unwrap();
            let mut b = Vec::new();
            for (id, (at, items)) in pings.iter().enumerate() {
                record(&mut b, *at + 1_700_000_000_000, tz, *items, id as i64 + 1);
            }
            let hours: std::collections::BTreeSet<i64> = b.iter().map(|x| x.local_hour).collect();
            prop_assert_eq!(hours.len(), b.len());
            prop_assert_eq!(b.iter().map(|x| u64::from(x.count)).sum::<u64>(), pings.len() as u64);
            prop_assert_eq!(b.iter().map(|x| x.sum).sum::<u64>(), pings.iter().map(|p| p.1).sum::<u64>());
        }
    }
}
