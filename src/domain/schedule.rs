//! Cron schedules whose fire times are the ones Debian's cron daemon (Vixie cron) produces.
//!
//! An expression has 5 fields (`minute hour day-of-month month day-of-week`) or 6 with
//! seconds first. Month and weekday names (`JAN`, `MON`), croner's `L`, `W` and `#`
//! extensions and the nicknames `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
//! `@midnight` and `@hourly` are accepted. Field syntax is checked by `croner`; this module
//! decides which instants those wall-clock matches become.
//!
//! # Day of month and day of week
//!
//! As in Vixie cron, a field that *begins* with `*` (`*`, `*/2`) counts as a star (its
//! `DOM_STAR`/`DOW_STAR` flags). When either field is a star the two combine with AND;
//! when both are restricted they combine with OR. So `0 0 1 * MON` fires on the 1st and on
//! every Monday, while `0 0 */2 * MON` fires only on odd-numbered days that are Mondays.
//! croner's own `+` prefix on the day-of-week field (always AND) is honoured as well. A
//! `?` (accepted by croner in the day fields) counts as `*`.
//!
//! # Daylight saving time
//!
//! An expression is *fixed-time* when none of its minute and hour fields (and, for 6 fields,
//! its seconds field) begins with `*`. That is Vixie's test (`MIN_STAR`/`HR_STAR`), so
//! `30 2 * * *`, `0 2,14 * * *`, `0 1-3 * * *` and `0-30/10 2 * * *` are fixed-time while
//! `0 * * * *`, `*/15 * * * *`, `* 2 * * *` and `0 */2 * * *` run in real time.
//!
//! - Fixed-time: a matching local time that does not exist (spring forward) fires at the
//!   first valid instant after the gap: America/New_York 2025-03-09 `30 2 * * *` fires at
//!   03:00 EDT (07:00Z). Several matches inside one gap collapse into that single fire:
//!   the slot is one expected run. Debian's daemon does not collapse them: it runs a
//!   fixed-time job once *per match* that fell in the gap, all in the first minute after
//!   it (cron 3.0pl1-162 under libfaketime, issue #42: `0-59/10 2 * * *` in
//!   Europe/Berlin ran 6 times at 03:00:03–03:00:08 CEST on 2026-03-29), so those runs
//!   all belong to the one fire here and must not count as duplicate runs. A matching
//!   local time that occurs twice (fall back) fires once, at its first occurrence.
//! - Real time: the expression fires at every instant whose local wall time matches, so
//!   nothing fires inside a gap and both occurrences of a repeated time fire. An hourly
//!   job fires once per real hour, 25 times on a fall-back day in New York.
//!
//! # Bounds
//!
//! [`CronSchedule::next_after`] looks at most [`SEARCH_BOUND_DAYS`] (100 years) ahead and
//! returns `None` beyond that; every loop in it is bounded, so it never spins. The longest
//! gap between two fires of an expression that fires at all is about 40 years (29 February
//! on a given weekday, stretched by the non-leap year 2100), so the bound is never reached in
//! practice. [`CronSchedule::parse`] rejects an expression when no date of the 28 years
//! 2001–2028 (which hold every kind of calendar year: each of the 7 weekdays for 1 January,
//! leap and common) matches its day, month and weekday fields, and when it has no fire
//! within the bound after [`REFERENCE`].

use std::fmt;

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono::{Offset, Timelike};
use chrono_tz::{GapInfo, Tz};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// How far ahead `next_after` searches, in days (100 years).
pub const SEARCH_BOUND_DAYS: i64 = 36_525;

/// The instant `parse` searches from to prove an expression fires (2025-01-01T00:00:00Z).
pub const REFERENCE: i64 = 1_735_689_600;

/// Step used to look for the zone's next UTC offset change; no zone changes its offset
/// twice within it.
const OFFSET_PROBE: Duration = Duration::hours(6);

/// Safety net for loops that already terminate by construction.
const MAX_STEPS: usize = 10_000;

/// A parsed cron expression bound to an IANA time zone.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    expr: String,
    tz: Tz,
    cron: Cron,
    fixed_time: bool,
}

/// Why an expression or time zone was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleError {
    /// The expression is malformed or can never fire; the text says why.
    InvalidExpression(String),
    /// The zone name is not in the IANA time zone database.
    UnknownTimeZone(String),
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::InvalidExpression(reason) => {
                write!(f, "invalid cron expression: {reason}")
            }
            ScheduleError::UnknownTimeZone(name) => write!(f, "unknown time zone {name:?}"),
        }
    }
}

impl std::error::Error for ScheduleError {}

fn invalid(reason: impl Into<String>) -> ScheduleError {
    ScheduleError::InvalidExpression(reason.into())
}

const FIELD_NAMES: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Parses an IANA zone name.
pub fn parse_tz(tz: &str) -> Result<Tz, ScheduleError> {
    tz.parse()
        .map_err(|_| ScheduleError::UnknownTimeZone(tz.to_string()))
}

impl CronSchedule {
    /// Parses a 5-field (or 6-field, seconds first) expression evaluated in the IANA zone `tz`.
    pub fn parse(expr: &str, tz: &str) -> Result<Self, ScheduleError> {
        let zone = parse_tz(tz)?;
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(invalid("the expression is empty"));
        }
        let expanded = expand_nickname(trimmed)?;
        let mut fields: Vec<String> = expanded.split_whitespace().map(str::to_string).collect();
        if fields.len() == 5 {
            fields.insert(0, "0".to_string());
        } else if fields.len() != 6 {
            return Err(invalid(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with \
                 seconds first, got {}",
                fields.len()
            )));
        }
        check_names(&fields)?;

        let starts_star = |f: &str| f.starts_with('*') || f.starts_with('?');
        let fixed_time = !fields[..3].iter().any(|f| f.starts_with('*'));

        // croner treats only a bare `*` as a star, so `*/2` would combine with OR; Vixie
        // treats any field beginning with `*` as a star, which croner spells with `+`.
        let (dom, dow) = (&fields[3], &fields[5]);
        let bare = |f: &str| f == "*" || f == "?";
        let needs_and = (starts_star(dom) || starts_star(dow))
            && !bare(dom)
            && !bare(dow)
            && !dow.starts_with('+');
        let mut croner_fields = fields.clone();
        if needs_and {
            croner_fields[5] = format!("+{dow}");
        }

        let cron = parser()
            .parse(&croner_fields.join(" "))
            .map_err(|e| blame_field(&croner_fields, &e))?;

        check_time_fields(&fields, &cron)?;
        if first_matching_date(&cron).is_none() {
            return Err(invalid(never_matches_reason(&fields, &cron, needs_and)));
        }
        let schedule = CronSchedule {
            expr: expr.to_string(),
            tz: zone,
            cron,
            fixed_time,
        };
        let reference = DateTime::from_timestamp(REFERENCE, 0).unwrap_or_default();
        if schedule.next_after(reference).is_none() {
            return Err(invalid(format!(
                "it never fires in {} within {} days after {}: every matching local time \
                 falls into a daylight-saving gap",
                zone,
                SEARCH_BOUND_DAYS,
                reference.format("%Y-%m-%d")
            )));
        }
        Ok(schedule)
    }

    /// The first fire time strictly after `after`. None only if none exists within the search bound.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let limit = after.checked_add_signed(Duration::days(SEARCH_BOUND_DAYS))?;
        if self.fixed_time {
            self.next_fixed(after, limit)
        } else {
            self.next_real_time(after, limit)
        }
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The zone the expression is evaluated in.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// Whether DST gaps and overlaps use the fixed-time rule (see the module docs).
    pub fn is_fixed_time(&self) -> bool {
        self.fixed_time
    }

    /// How many wall-clock matches the fire time `fire` stands for: one,
    /// except for a fixed-time expression's first fire after a
    /// spring-forward gap, which stands for every match in the gap (and its
    /// own, if it matches). Debian's cron daemon runs each of them in the
    /// first minute after the gap (SPEC §14), where overdue's schedule has
    /// one fire.
    pub fn matches_at(&self, fire: DateTime<Utc>) -> u32 {
        if !self.fixed_time {
            return 1;
        }
        let to = fire.with_timezone(&self.tz).naive_local();
        let from = (fire - Duration::seconds(1))
            .with_timezone(&self.tz)
            .naive_local();
        if to - from <= Duration::seconds(1) {
            return 1;
        }
        let mut n = 0u32;
        let mut cur = from;
        for _ in 0..MAX_STEPS {
            match self.cron.find_next_occurrence(&cur, false) {
                Ok(m) if m <= to => {
                    n += 1;
                    cur = m;
                }
                _ => break,
            }
        }
        n.max(1)
    }

    /// Fixed-time: walk the wall-clock matches in order and map each to its instant
    /// (overlap: first occurrence; gap: end of the gap). That map never decreases, so the
    /// first mapped instant past `after` is the answer.
    fn next_fixed(&self, after: DateTime<Utc>, limit: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local_after = after.with_timezone(&self.tz).naive_local();
        let local_limit = local_after.checked_add_signed(limit - after)?;
        let mut from = local_after;
        let mut inclusive = false;
        for _ in 0..MAX_STEPS {
            let wall = self.cron.find_next_occurrence(&from, inclusive).ok()?;
            if wall > local_limit {
                return None;
            }
            let (instant, ambiguous) = match self.tz.from_local_datetime(&wall) {
                LocalResult::Single(t) => (t, false),
                LocalResult::Ambiguous(first, _) => (first, true),
                LocalResult::None => (GapInfo::new(&wall, &self.tz)?.end?, false),
            };
            let instant = instant.with_timezone(&Utc);
            if instant > after {
                return (instant <= limit).then_some(instant);
            }
            // Only reachable when `after` is in the second pass of a repeated range, where
            // fixed-time jobs never fire: resume after the range.
            (from, inclusive) = if ambiguous {
                (end_of_overlap(self.tz, wall).unwrap_or(wall), true)
            } else {
                (wall, false)
            };
        }
        None
    }

    /// Real time: between two UTC offset changes local time runs in step with real time,
    /// so the first wall-clock match in the current stretch is the answer unless the
    /// stretch ends before it.
    fn next_real_time(&self, after: DateTime<Utc>, limit: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut t = after;
        let mut inclusive = false;
        for _ in 0..MAX_STEPS {
            let offset = offset_at(self.tz, t);
            let local = t.naive_utc().checked_add_signed(offset)?;
            let wall = self.cron.find_next_occurrence(&local, inclusive).ok()?;
            let candidate = wall.checked_sub_signed(offset)?.and_utc();
            match next_offset_change(self.tz, t, candidate.min(limit)) {
                None => return (candidate <= limit).then_some(candidate),
                Some(change) => {
                    t = change;
                    inclusive = true;
                }
            }
        }
        None
    }
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

fn expand_nickname(expr: &str) -> Result<String, ScheduleError> {
    if !expr.starts_with('@') {
        return Ok(expr.to_string());
    }
    let expanded = match expr.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@reboot" => {
            return Err(invalid(
                "@reboot has no fire times; use an interval instead",
            ));
        }
        _ => {
            return Err(invalid(format!(
                "unknown nickname {expr:?} (expected @yearly, @annually, @monthly, @weekly, \
                 @daily, @midnight or @hourly)"
            )));
        }
    };
    Ok(expanded.to_string())
}

/// croner replaces names anywhere in the pattern, so `MON` in the minute field would
/// silently become 1; Vixie only knows names in the month and weekday fields.
fn check_names(fields: &[String]) -> Result<(), ScheduleError> {
    for (i, field) in fields.iter().enumerate() {
        let allowed_letters: &[char] = match i {
            3 => &['L', 'W', 'l', 'w'],
            4 | 5 => continue,
            _ => &[],
        };
        if field
            .chars()
            .any(|c| c.is_ascii_alphabetic() && !allowed_letters.contains(&c))
        {
            return Err(invalid(format!(
                "{} field {field:?}: names are only allowed in the month and day-of-week fields",
                FIELD_NAMES[i]
            )));
        }
    }
    Ok(())
}

/// croner's messages rarely say which field is wrong; find it by parsing each field alone.
fn blame_field(fields: &[String], whole: &croner::errors::CronError) -> ScheduleError {
    for (i, field) in fields.iter().enumerate() {
        let mut alone = vec!["*".to_string(); 6];
        alone[i] = field.clone();
        if let Err(e) = parser().parse(&alone.join(" ")) {
            let shown = field.trim_start_matches('+');
            return invalid(format!("{} field {shown:?}: {e}", FIELD_NAMES[i]));
        }
    }
    invalid(whole.to_string())
}

/// croner skips empty list items, so a field such as `,` parses yet matches no
/// value; the search would then walk day by day to croner's year 5000 on every
/// call. The day fields are proved by [`first_matching_date`]; these are not.
fn check_time_fields(fields: &[String], cron: &Cron) -> Result<(), ScheduleError> {
    let p = &cron.pattern;
    let matches = |i: usize, v: u32| match i {
        0 => p.second_match(v),
        1 => p.minute_match(v),
        _ => p.hour_match(v),
    };
    for (i, max) in [(0, 59), (1, 59), (2, 23)] {
        if !(0..=max).any(|v| matches(i, v).unwrap_or(false)) {
            return Err(invalid(format!(
                "{} field {:?} matches no {} (0-{max})",
                FIELD_NAMES[i], fields[i], FIELD_NAMES[i]
            )));
        }
    }
    Ok(())
}

fn cron_weekday(date: NaiveDate) -> croner::Weekday {
    croner::Weekday::from_days_from_sunday(date.weekday().num_days_from_sunday())
}

fn date_matches(cron: &Cron, date: NaiveDate) -> bool {
    let p = &cron.pattern;
    p.month_match(date.month()).unwrap_or(false)
        && p.day_match(date.year(), date.month(), date.day(), cron_weekday(date))
            .unwrap_or(false)
}

/// Whether a date matches depends only on the kind of year (leap or not, weekday of
/// 1 January), and 2001–2028 contains all 14 kinds.
fn first_matching_date(cron: &Cron) -> Option<NaiveDate> {
    let start = NaiveDate::from_ymd_opt(2001, 1, 1)?;
    let end = NaiveDate::from_ymd_opt(2029, 1, 1)?;
    start
        .iter_days()
        .take_while(|d| *d < end)
        .find(|d| date_matches(cron, *d))
}

fn never_matches_reason(fields: &[String], cron: &Cron, forced_and: bool) -> String {
    let (dom, month, dow) = (&fields[3], &fields[4], &fields[5]);
    let plain_dom = dom
        .chars()
        .all(|c| c.is_ascii_digit() || c == ',' || c == '-');
    if (dow == "*" || dow == "?") && plain_dom {
        let months: Vec<&str> = (1..=12u32)
            .zip(MONTH_NAMES)
            .filter(|(m, _)| cron.pattern.month_match(*m).unwrap_or(false))
            .map(|(_, name)| name)
            .collect();
        return format!("day-of-month {dom} never occurs in {}", join_or(&months));
    }
    let why = if forced_and {
        " (they must all match because a day field starts with '*')"
    } else if dow.starts_with('+') {
        " (the '+' prefix requires both day fields to match)"
    } else {
        ""
    };
    format!("no date matches day-of-month {dom:?}, month {month:?} and day-of-week {dow:?}{why}")
}

fn join_or(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn offset_at(tz: Tz, t: DateTime<Utc>) -> Duration {
    let secs = tz
        .offset_from_utc_datetime(&t.naive_utc())
        .fix()
        .local_minus_utc();
    Duration::seconds(i64::from(secs))
}

/// The first instant in `(t, until]` at which the zone's UTC offset differs from its offset
/// at `t`. Offsets change on whole seconds, so bisection over seconds finds it exactly.
fn next_offset_change(tz: Tz, t: DateTime<Utc>, until: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let offset = offset_at(tz, t);
    let mut lo = t;
    while lo < until {
        let hi = lo
            .checked_add_signed(OFFSET_PROBE)
            .map_or(until, |h| h.min(until));
        if offset_at(tz, hi) != offset {
            // Changes fall on whole seconds, so the floors keep each end on its side.
            let (mut same, mut changed) = (lo.timestamp(), hi.timestamp());
            while changed - same > 1 {
                let mid = same + (changed - same) / 2;
                let at = DateTime::from_timestamp(mid, 0)?;
                if offset_at(tz, at) == offset {
                    same = mid;
                } else {
                    changed = mid;
                }
            }
            return DateTime::from_timestamp(changed, 0);
        }
        lo = hi;
    }
    None
}

/// The first wall-clock second after `wall` that is no longer ambiguous in `tz`.
fn end_of_overlap(tz: Tz, wall: NaiveDateTime) -> Option<NaiveDateTime> {
    let is_ambiguous =
        |n: NaiveDateTime| matches!(tz.from_local_datetime(&n), LocalResult::Ambiguous(..));
    let start = wall.with_nanosecond(0)?;
    let mut hi = start.checked_add_signed(Duration::days(1))?;
    if is_ambiguous(hi) {
        return None;
    }
    let mut lo = start;
    while hi - lo > Duration::seconds(1) {
        let mid = lo + Duration::seconds((hi - lo).num_seconds() / 2);
        if is_ambiguous(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn sched(expr: &str, tz: &str) -> CronSchedule {
        CronSchedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr} in {tz}: {e}"))
    }

    /// The first `n` fires after `after`, as RFC 3339 UTC strings.
    fn fires(expr: &str, tz: &str, after: &str, n: usize) -> Vec<String> {
        let s = sched(expr, tz);
        let mut t = utc(after);
        let mut out = Vec::new();
        for _ in 0..n {
            t = s.next_after(t).unwrap();
            out.push(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true));
        }
        out
    }

    fn local_midnight(tz: Tz, y: i32, m: u32, d: u32) -> DateTime<Utc> {
        let date = NaiveDate::from_ymd_opt(y, m, d).unwrap();
        tz.from_local_datetime(&date.and_hms_opt(0, 0, 0).unwrap())
            .earliest()
            .unwrap()
            .with_timezone(&Utc)
    }

    /// How many times the schedule fires during one local calendar day.
    fn fires_on_local_day(expr: &str, tz: &str, y: i32, m: u32, d: u32) -> usize {
        let s = sched(expr, tz);
        let zone: Tz = tz.parse().unwrap();
        let start = local_midnight(zone, y, m, d);
        let next = NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .succ_opt()
            .unwrap();
        let end = local_midnight(zone, next.year(), next.month(), next.day());
        // Start one second early so a fire at local midnight counts.
        let mut t = start - Duration::seconds(1);
        let mut n = 0;
        while let Some(f) = s.next_after(t).filter(|f| *f < end) {
            n += 1;
            t = f;
        }
        n
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_like_vixie_cron() {
        // 2025-09-01 is a Monday.
        let cases: &[(&str, &str, &[&str])] = &[
            // Both restricted: OR.
            (
                "0 0 1 * MON",
                "2025-08-31T00:00:00Z",
                &[
                    "2025-09-01T00:00:00Z",
                    "2025-09-08T00:00:00Z",
                    "2025-09-15T00:00:00Z",
                    "2025-09-22T00:00:00Z",
                    "2025-09-29T00:00:00Z",
                    "2025-10-01T00:00:00Z",
                    "2025-10-06T00:00:00Z",
                ],
            ),
            (
                "0 0 1,15 * FRI",
                "2025-09-01T00:00:00Z",
                &[
                    "2025-09-05T00:00:00Z",
                    "2025-09-12T00:00:00Z",
                    "2025-09-15T00:00:00Z",
                    "2025-09-19T00:00:00Z",
                ],
            ),
            // A day field starting with '*' is a star: AND.
            (
                "0 0 */2 * MON",
                "2025-08-31T00:00:00Z",
                &[
                    "2025-09-01T00:00:00Z",
                    "2025-09-15T00:00:00Z",
                    "2025-09-29T00:00:00Z",
                    "2025-10-13T00:00:00Z",
                ],
            ),
            (
                "0 0 1 * */2",
                "2025-09-01T00:00:00Z",
                &[
                    "2025-11-01T00:00:00Z",
                    "2026-01-01T00:00:00Z",
                    "2026-02-01T00:00:00Z",
                ],
            ),
            (
                "0 0 1 * *",
                "2025-08-31T00:00:00Z",
                &[
                    "2025-09-01T00:00:00Z",
                    "2025-10-01T00:00:00Z",
                    "2025-11-01T00:00:00Z",
                ],
            ),
            (
                "0 0 * * MON",
                "2025-09-01T00:00:00Z",
                &["2025-09-08T00:00:00Z", "2025-09-15T00:00:00Z"],
            ),
            (
                "0 0 ? * mon",
                "2025-09-01T00:00:00Z",
                &["2025-09-08T00:00:00Z", "2025-09-15T00:00:00Z"],
            ),
            // croner's explicit AND.
            (
                "0 0 1 * +MON",
                "2025-08-31T00:00:00Z",
                &["2025-09-01T00:00:00Z", "2025-12-01T00:00:00Z"],
            ),
            // Sunday is 0 and 7.
            (
                "0 12 * * 7",
                "2025-09-01T00:00:00Z",
                &["2025-09-07T12:00:00Z", "2025-09-14T12:00:00Z"],
            ),
        ];
        for (expr, after, want) in cases {
            assert_eq!(fires(expr, "UTC", after, want.len()), *want, "{expr}");
        }
    }

    #[test]
    fn names_extensions_seconds_and_nicknames() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "0 9 * jan,JUL mon-fri",
                "2025-06-30T00:00:00Z",
                &["2025-07-01T09:00:00Z", "2025-07-02T09:00:00Z"],
            ),
            (
                "0 0 L 2 *",
                "2025-01-01T00:00:00Z",
                &[
                    "2025-02-28T00:00:00Z",
                    "2026-02-28T00:00:00Z",
                    "2027-02-28T00:00:00Z",
                    "2028-02-29T00:00:00Z",
                ],
            ),
            // Second Friday; 2025-09-05 and 2025-10-03 are Fridays.
            (
                "0 0 * * FRI#2",
                "2025-09-01T00:00:00Z",
                &["2025-09-12T00:00:00Z", "2025-10-10T00:00:00Z"],
            ),
            // 2025-11-15 is a Saturday: the nearest weekday is Friday the 14th.
            (
                "0 0 15W 11 *",
                "2025-11-01T00:00:00Z",
                &["2025-11-14T00:00:00Z"],
            ),
            (
                "*/20 * * * * *",
                "2025-01-01T00:00:00Z",
                &[
                    "2025-01-01T00:00:20Z",
                    "2025-01-01T00:00:40Z",
                    "2025-01-01T00:01:00Z",
                ],
            ),
            (
                "30 15 10 * * *",
                "2025-01-01T10:15:30Z",
                &["2025-01-02T10:15:30Z"],
            ),
            ("@daily", "2025-01-01T00:00:00Z", &["2025-01-02T00:00:00Z"]),
            ("@hourly", "2025-01-01T00:30:00Z", &["2025-01-01T01:00:00Z"]),
            // 2025-01-05 is a Sunday.
            ("@weekly", "2025-01-01T00:00:00Z", &["2025-01-05T00:00:00Z"]),
            ("@yearly", "2025-01-01T00:00:00Z", &["2026-01-01T00:00:00Z"]),
        ];
        for (expr, after, want) in cases {
            assert_eq!(fires(expr, "UTC", after, want.len()), *want, "{expr}");
        }
    }

    #[test]
    fn next_after_is_strictly_after_even_with_subseconds() {
        let s = sched("* * * * *", "UTC");
        let t = utc("2025-01-01T10:00:00Z");
        assert_eq!(s.next_after(t), Some(utc("2025-01-01T10:01:00Z")));
        let t = utc("2025-01-01T09:59:59.999Z");
        assert_eq!(s.next_after(t), Some(utc("2025-01-01T10:00:00Z")));
        let s = sched("30 2 * * *", "America/New_York");
        let gap_fire = utc("2025-03-09T07:00:00Z");
        assert_eq!(
            s.next_after(gap_fire - Duration::nanoseconds(1)),
            Some(gap_fire)
        );
        assert_eq!(s.next_after(gap_fire), Some(utc("2025-03-10T06:30:00Z")));
    }

    #[test]
    fn rejects_impossible_and_malformed_expressions_saying_why() {
        let cases: &[(&str, &str)] = &[
            ("0 0 30 2 *", "day-of-month 30 never occurs in February"),
            (
                "0 0 31 4,6 *",
                "day-of-month 31 never occurs in April or June",
            ),
            (
                "0 0 31 4,6,9 ?",
                "day-of-month 31 never occurs in April, June or September",
            ),
            (
                "0 0 30,31 feb *",
                "day-of-month 30,31 never occurs in February",
            ),
            (
                "0 0 30 2 */2",
                "no date matches day-of-month \"30\", month \"2\" and day-of-week \"*/2\"",
            ),
            ("0 0 30 2 +MON", "no date matches day-of-month \"30\""),
            ("61 * * * *", "minute field \"61\""),
            ("* 24 * * *", "hour field \"24\""),
            ("0 0 0 * *", "day-of-month field \"0\""),
            ("0 0 * 13 *", "month field \"13\""),
            ("0 0 * * 8", "day-of-week field \"8\""),
            ("0 0 * * FOO", "day-of-week field"),
            (
                "MON * * * *",
                "minute field \"MON\": names are only allowed",
            ),
            ("* * *", "expected 5 fields"),
            ("0 0 0 1 1 * 2030", "got 7"),
            ("", "empty"),
            ("   ", "empty"),
            ("@reboot", "@reboot has no fire times"),
            ("@fortnightly", "unknown nickname"),
            ("*/0 * * * *", "minute field"),
            ("5-1 * * * *", "minute field"),
        ];
        for (expr, want) in cases {
            let err = CronSchedule::parse(expr, "UTC").unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with("invalid cron expression: ") && text.contains(want),
                "{expr:?}: {text}"
            );
        }
        let err = CronSchedule::parse("0 0 * * *", "Mars/Base").unwrap_err();
        assert_eq!(err.to_string(), "unknown time zone \"Mars/Base\"");
        assert_eq!(err, ScheduleError::UnknownTimeZone("Mars/Base".into()));
    }

    /// croner skips empty list items, so these parsed and then searched to the
    /// year 5000 on every call (found by the cron fuzz target).
    #[test]
    fn rejects_time_fields_that_match_nothing_naming_the_field() {
        let cases = [
            ("0 , * * *", "hour field \",\" matches no hour"),
            (",, 0 * * *", "minute field \",,\" matches no minute"),
            ("0 , 0 * * *", "minute field \",\" matches no minute"),
            (", 0 0 * * *", "second field \",\" matches no second"),
            ("*/15 , * * *", "hour field \",\" matches no hour"),
        ];
        for (expr, want) in cases {
            for tz in ["UTC", "America/New_York"] {
                let text = CronSchedule::parse(expr, tz).unwrap_err().to_string();
                assert!(
                    text.starts_with("invalid cron expression: ") && text.contains(want),
                    "{expr:?} in {tz}: {text}"
                );
            }
        }
        // A list with an empty item beside a real one still works.
        assert_eq!(
            fires("0 ,3 * * *", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2025-01-01T03:00:00Z"]
        );
    }

    #[test]
    fn rare_but_possible_expressions_are_accepted() {
        for expr in ["0 0 29 2 *", "0 0 29 2 +MON", "0 0 * 2 MON#5", "0 0 31 * *"] {
            let s = sched(expr, "UTC");
            let t = s.next_after(utc("2025-01-01T00:00:00Z")).unwrap();
            assert!(t > utc("2025-01-01T00:00:00Z"), "{expr}");
        }
        // 29 February falls on a Monday in 2044.
        assert_eq!(
            fires("0 0 29 2 +MON", "UTC", "2025-01-01T00:00:00Z", 1),
            ["2044-02-29T00:00:00Z"]
        );
    }

    #[test]
    fn a_fire_after_a_spring_forward_gap_stands_for_every_match_in_it() {
        // Measured under libfaketime with Debian's cron 3.0pl1-162: in
        // Berlin on 2026-03-29, `0-59/10 2 * * *` ran 6 times at 03:00 CEST.
        let at = |expr: &str, fire: &str| {
            CronSchedule::parse(expr, "Europe/Berlin")
                .unwrap()
                .matches_at(utc(fire))
        };
        let gap_end = "2026-03-29T01:00:00Z";
        assert_eq!(at("0-59/10 2 * * *", gap_end), 6);
        assert_eq!(at("30 2 * * *", gap_end), 1);
        // 03:00 itself matches, and nothing in the gap does.
        assert_eq!(at("0 3 * * *", gap_end), 1);
        // 02:30 in the gap and 03:00 itself.
        assert_eq!(at("0,30 2,3 * * *", gap_end), 3);
        // An ordinary night, and a wildcard hour (real time): one each.
        assert_eq!(at("0-59/10 2 * * *", "2026-03-30T00:00:00Z"), 1);
        assert_eq!(at("*/10 * * * *", gap_end), 1);
    }

    #[test]
    fn classifies_fixed_time_like_vixie() {
        let cases = [
            ("30 2 * * *", true),
            ("0 2,14 * * *", true),
            ("0 1-3 * * *", true),
            ("0-30/10 2 * * *", true),
            ("@daily", true),
            ("0 * * * *", false),
            ("*/15 * * * *", false),
            ("* 2 * * *", false),
            ("0 */2 * * *", false),
            ("@hourly", false),
            ("0 30 2 * * *", true),
            ("*/10 30 2 * * *", false),
        ];
        for (expr, fixed) in cases {
            assert_eq!(sched(expr, "UTC").is_fixed_time(), fixed, "{expr}");
        }
    }

    #[test]
    fn fixed_time_across_dst_transitions() {
        let cases: &[(&str, &str, &str, &[&str])] = &[
            // New York springs forward 2025-03-09 02:00 EST -> 03:00 EDT.
            (
                "America/New_York",
                "30 2 * * *",
                "2025-03-08T12:00:00Z",
                &["2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"],
            ),
            (
                "America/New_York",
                "0,30 2 * * *",
                "2025-03-08T12:00:00Z",
                &[
                    "2025-03-09T07:00:00Z",
                    "2025-03-10T06:00:00Z",
                    "2025-03-10T06:30:00Z",
                ],
            ),
            (
                "America/New_York",
                "0 2,14 * * *",
                "2025-03-08T12:00:00Z",
                &[
                    "2025-03-08T19:00:00Z",
                    "2025-03-09T07:00:00Z",
                    "2025-03-09T18:00:00Z",
                ],
            ),
            (
                "America/New_York",
                "30 2,3 * * *",
                "2025-03-09T00:00:00Z",
                &["2025-03-09T07:00:00Z", "2025-03-09T07:30:00Z"],
            ),
            // New York falls back 2025-11-02 02:00 EDT -> 01:00 EST.
            (
                "America/New_York",
                "30 1 * * *",
                "2025-11-01T12:00:00Z",
                &["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"],
            ),
            (
                "America/New_York",
                "0-59/20 1 * * *",
                "2025-11-02T04:59:00Z",
                &[
                    "2025-11-02T05:00:00Z",
                    "2025-11-02T05:20:00Z",
                    "2025-11-02T05:40:00Z",
                    "2025-11-03T06:00:00Z",
                ],
            ),
            // London: 2025-03-30 01:00 GMT -> 02:00 BST; 2025-10-26 02:00 BST -> 01:00 GMT.
            (
                "Europe/London",
                "30 1 * * *",
                "2025-03-29T12:00:00Z",
                &["2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z"],
            ),
            (
                "Europe/London",
                "30 1 * * *",
                "2025-10-25T12:00:00Z",
                &["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"],
            ),
            // Lord Howe shifts by 30 minutes: 2025-10-05 02:00 -> 02:30 (+10:30 -> +11).
            (
                "Australia/Lord_Howe",
                "15 2 * * *",
                "2025-10-04T00:00:00Z",
                &["2025-10-04T15:30:00Z", "2025-10-05T15:15:00Z"],
            ),
            // 2025-04-06 02:00 -> 01:30 (+11 -> +10:30): 01:45 happens twice.
            (
                "Australia/Lord_Howe",
                "45 1 * * *",
                "2025-04-05T00:00:00Z",
                &["2025-04-05T14:45:00Z", "2025-04-06T15:15:00Z"],
            ),
            // No DST at all.
            (
                "Asia/Shanghai",
                "30 2 * * *",
                "2025-03-09T00:00:00Z",
                &["2025-03-09T18:30:00Z", "2025-03-10T18:30:00Z"],
            ),
        ];
        for (tz, expr, after, want) in cases {
            assert_eq!(fires(expr, tz, after, want.len()), *want, "{expr} in {tz}");
        }
    }

    #[test]
    fn fixed_time_never_fires_in_the_second_pass_of_a_repeated_hour() {
        let s = sched("30 1 * * *", "America/New_York");
        // 01:10 EST (second pass), 01:45 EDT (first pass, after the fire), 01:30 EST exactly.
        for after in [
            "2025-11-02T06:10:00Z",
            "2025-11-02T05:45:00Z",
            "2025-11-02T06:30:00Z",
        ] {
            assert_eq!(
                s.next_after(utc(after)),
                Some(utc("2025-11-03T06:30:00Z")),
                "after {after}"
            );
        }
    }

    #[test]
    fn real_time_fires_once_per_real_interval_across_dst() {
        type Case<'a> = (&'a str, (i32, u32, u32), &'a str, usize);
        let cases: &[Case] = &[
            ("America/New_York", (2025, 3, 9), "0 * * * *", 23),
            ("America/New_York", (2025, 3, 9), "*/15 * * * *", 92),
            ("America/New_York", (2025, 11, 2), "0 * * * *", 25),
            ("America/New_York", (2025, 11, 2), "*/15 * * * *", 100),
            ("America/New_York", (2025, 11, 2), "* 1 * * *", 120),
            ("America/New_York", (2025, 3, 9), "* 2 * * *", 0),
            ("America/New_York", (2025, 6, 1), "0 * * * *", 24),
            ("Europe/London", (2025, 3, 30), "0 * * * *", 23),
            ("Europe/London", (2025, 3, 30), "*/15 * * * *", 92),
            ("Europe/London", (2025, 10, 26), "0 * * * *", 25),
            ("Europe/London", (2025, 10, 26), "*/15 * * * *", 100),
            ("Australia/Lord_Howe", (2025, 10, 5), "0 * * * *", 23),
            ("Australia/Lord_Howe", (2025, 10, 5), "*/15 * * * *", 94),
            ("Australia/Lord_Howe", (2025, 4, 6), "0 * * * *", 24),
            ("Australia/Lord_Howe", (2025, 4, 6), "*/15 * * * *", 98),
            ("Asia/Shanghai", (2025, 3, 9), "0 * * * *", 24),
            ("Asia/Shanghai", (2025, 3, 9), "*/15 * * * *", 96),
            ("UTC", (2025, 3, 30), "*/15 * * * *", 96),
        ];
        for (tz, (y, m, d), expr, want) in cases {
            assert_eq!(
                fires_on_local_day(expr, tz, *y, *m, *d),
                *want,
                "{expr} in {tz} on {y}-{m}-{d}"
            );
        }
    }

    #[test]
    fn hourly_fires_at_each_real_hour_through_both_transitions() {
        assert_eq!(
            fires("0 * * * *", "America/New_York", "2025-03-09T05:30:00Z", 3),
            // 01:00 EST, then 03:00 EDT: nothing in the gap.
            [
                "2025-03-09T06:00:00Z",
                "2025-03-09T07:00:00Z",
                "2025-03-09T08:00:00Z"
            ]
        );
        assert_eq!(
            fires("0 * * * *", "America/New_York", "2025-11-02T04:30:00Z", 4),
            // 01:00 EDT, 01:00 EST, 02:00 EST.
            [
                "2025-11-02T05:00:00Z",
                "2025-11-02T06:00:00Z",
                "2025-11-02T07:00:00Z",
                "2025-11-02T08:00:00Z"
            ]
        );
        // Starting inside the second pass stays on it.
        assert_eq!(
            fires("30 * * * *", "America/New_York", "2025-11-02T06:10:00Z", 2),
            ["2025-11-02T06:30:00Z", "2025-11-02T07:30:00Z"]
        );
        assert_eq!(
            fires(
                "0 * * * *",
                "Australia/Lord_Howe",
                "2025-04-05T13:10:00Z",
                3
            ),
            // 01:00 (+11), then 02:00 (+10:30) 90 real minutes later: 01:30-02:00 repeats
            // but holds no :00.
            [
                "2025-04-05T14:00:00Z",
                "2025-04-05T15:30:00Z",
                "2025-04-05T16:30:00Z"
            ]
        );
    }

    #[test]
    fn search_terminates_and_is_bounded() {
        let s = sched("0 0 29 2 +MON", "UTC");
        assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
        assert_eq!(
            s.next_after(DateTime::<Utc>::MAX_UTC - Duration::days(400)),
            None
        );
        // Every match lies in New York's March gap while chrono-tz models DST (to 2099).
        let s = sched("* 2 8-14 3 +SUN", "America/New_York");
        let next = s.next_after(utc("2030-01-01T00:00:00Z")).unwrap();
        assert!(next.year() >= 2099, "{next}");
    }

    /// The largest gap between fires of the rarest expressions stays far below the bound.
    #[test]
    fn rarest_expressions_recur_well_within_the_bound() {
        for dow in ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"] {
            for expr in [format!("0 0 29 2 +{dow}"), format!("0 0 * 2 {dow}#5")] {
                let s = sched(&expr, "UTC");
                let mut t = utc("2000-01-01T00:00:00Z");
                let mut widest = Duration::zero();
                while t.year() < 2400 {
                    let n = s.next_after(t).unwrap();
                    widest = widest.max(n - t);
                    t = n;
                }
                assert!(widest < Duration::days(41 * 366), "{expr}: {widest}");
            }
        }
    }

    #[test]
    fn years_2001_to_2028_hold_every_kind_of_year() {
        let kinds: BTreeSet<(bool, u32)> = (2001..=2028)
            .map(|y| {
                let jan1 = NaiveDate::from_ymd_opt(y, 1, 1).unwrap();
                (jan1.leap_year(), jan1.weekday().num_days_from_monday())
            })
            .collect();
        assert_eq!(kinds.len(), 14);
    }

    // ---- property tests against an independent model of Vixie cron ----

    /// One field: its text and the values it selects, computed here without croner.
    #[derive(Clone, Debug)]
    struct Field {
        text: String,
        values: BTreeSet<u32>,
    }

    fn field(lo: u32, hi: u32, steps: &'static [u32]) -> impl Strategy<Value = Field> {
        let span = lo..=hi;
        prop_oneof![
            Just(Field {
                text: "*".into(),
                values: (lo..=hi).collect()
            }),
            prop::sample::select(steps).prop_map(move |k| Field {
                text: format!("*/{k}"),
                values: (lo..=hi).step_by(k as usize).collect(),
            }),
            span.clone().prop_map(|a| Field {
                text: a.to_string(),
                values: [a].into(),
            }),
            (span.clone(), span.clone()).prop_map(|(a, b)| Field {
                text: format!("{a},{b}"),
                values: [a, b].into(),
            }),
            (span.clone(), span.clone(), prop::sample::select(steps)).prop_map(|(a, b, k)| {
                let (a, b) = (a.min(b), a.max(b));
                Field {
                    text: format!("{a}-{b}/{k}"),
                    values: (a..=b).step_by(k as usize).collect(),
                }
            }),
            (span.clone(), span).prop_map(|(a, b)| {
                let (a, b) = (a.min(b), a.max(b));
                Field {
                    text: format!("{a}-{b}"),
                    values: (a..=b).collect(),
                }
            }),
        ]
    }

    #[derive(Clone, Debug)]
    struct Model {
        minute: Field,
        hour: Field,
        dom: Field,
        month: Field,
        dow: Field,
    }

    impl Model {
        fn expr(&self) -> String {
            format!(
                "{} {} {} {} {}",
                self.minute.text, self.hour.text, self.dom.text, self.month.text, self.dow.text
            )
        }

        fn fixed_time(&self) -> bool {
            !self.minute.text.starts_with('*') && !self.hour.text.starts_with('*')
        }

        fn date_matches(&self, d: NaiveDate) -> bool {
            let dom = self.dom.values.contains(&d.day());
            let wd = d.weekday().num_days_from_sunday();
            let dow = self.dow.values.contains(&wd) || (wd == 0 && self.dow.values.contains(&7));
            let day = if self.dom.text.starts_with('*') || self.dow.text.starts_with('*') {
                dom && dow
            } else {
                dom || dow
            };
            day && self.month.values.contains(&d.month())
        }

        fn wall_matches(&self, n: NaiveDateTime) -> bool {
            n.second() == 0
                && self.minute.values.contains(&n.minute())
                && self.hour.values.contains(&n.hour())
                && self.date_matches(n.date())
        }

        /// Whether the model fires at minute instant `t`, straight from the rules in the docs.
        fn fires_at(&self, tz: Tz, t: DateTime<Utc>) -> bool {
            let wall = t.with_timezone(&tz).naive_local();
            if !self.fixed_time() {
                return self.wall_matches(wall);
            }
            let first_pass = match tz.from_local_datetime(&wall) {
                LocalResult::Single(_) => true,
                LocalResult::Ambiguous(a, _) => a == t,
                LocalResult::None => false,
            };
            if first_pass && self.wall_matches(wall) {
                return true;
            }
            // Right after a gap: any skipped matching minute fires now.
            let before = (t - Duration::minutes(1)).with_timezone(&tz).naive_local();
            let mut skipped = before + Duration::minutes(1);
            while skipped < wall {
                if self.wall_matches(skipped) {
                    return true;
                }
                skipped += Duration::minutes(1);
            }
            false
        }
    }

    fn model() -> impl Strategy<Value = Model> {
        (
            field(0, 59, &[5, 15, 20, 30, 45]),
            prop_oneof![
                field(0, 23, &[2, 3, 5, 12]),
                prop::sample::select(&["1", "2", "1-3", "2,14", "*/2", "*"][..]).prop_map(|t| {
                    let values = match t {
                        "1" => [1].into(),
                        "2" => [2].into(),
                        "1-3" => (1..=3).collect(),
                        "2,14" => [2, 14].into(),
                        "*/2" => (0..24).step_by(2).collect(),
                        _ => (0..24).collect(),
                    };
                    Field {
                        text: t.to_string(),
                        values,
                    }
                }),
            ],
            field(1, 31, &[2, 3, 7, 10]),
            field(1, 12, &[2, 3, 6]),
            field(0, 7, &[2, 3]),
        )
            .prop_map(|(minute, hour, dom, month, dow)| Model {
                minute,
                hour,
                dom,
                month,
                dow,
            })
    }

    const ZONES: [&str; 5] = [
        "UTC",
        "Asia/Shanghai",
        "America/New_York",
        "Europe/London",
        "Australia/Lord_Howe",
    ];

    /// Instants near the 2025 transitions of the zones above, so DST is exercised often.
    const NEAR: [&str; 7] = [
        "2025-03-09T07:00:00Z",
        "2025-11-02T06:00:00Z",
        "2025-03-30T01:00:00Z",
        "2025-10-26T01:00:00Z",
        "2025-10-04T15:30:00Z",
        "2025-04-05T15:00:00Z",
        "2025-07-01T00:00:00Z",
    ];

    fn start() -> impl Strategy<Value = DateTime<Utc>> {
        (
            prop::sample::select(&NEAR[..]),
            -3000i64..3000,
            prop_oneof![Just(0i64), 0i64..60],
        )
            .prop_map(|(base, minutes, secs)| {
                utc(base) + Duration::minutes(minutes) + Duration::seconds(secs)
            })
    }

    fn ceil_minute(t: DateTime<Utc>) -> DateTime<Utc> {
        let floor = t.with_second(0).unwrap().with_nanosecond(0).unwrap();
        if floor == t {
            t
        } else {
            floor + Duration::minutes(1)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(160))]

        /// next_after agrees with a brute-force scan of the model, minute by minute.
        #[test]
        fn next_after_matches_the_vixie_model(
            m in model(),
            tz in prop::sample::select(&ZONES[..]),
            after in start(),
        ) {
            let zone: Tz = tz.parse().unwrap();
            let expr = m.expr();
            let parsed = CronSchedule::parse(&expr, tz);
            let possible = NaiveDate::from_ymd_opt(2001, 1, 1).unwrap().iter_days()
                .take(366 * 28)
                .any(|d| m.date_matches(d));
            prop_assert_eq!(parsed.is_ok(), possible, "{}: {:?}", expr, parsed.err());
            let Ok(s) = parsed else { return Ok(()) };
            prop_assert_eq!(s.is_fixed_time(), m.fixed_time());

            let mut t = after;
            for _ in 0..3 {
                let next = s.next_after(t).unwrap();
                prop_assert!(next > t);
                prop_assert!(m.fires_at(zone, next), "{} {} fired at {} after {}", expr, tz, next, t);
                let scan_end = next.min(t + Duration::days(2));
                let mut probe = ceil_minute(t + Duration::nanoseconds(1));
                while probe < scan_end {
                    prop_assert!(!m.fires_at(zone, probe), "{} {} skipped {} (gave {})", expr, tz, probe, next);
                    probe += Duration::minutes(1);
                }
                t = next;
            }
        }
    }

    fn rich_field() -> impl Strategy<Value = String> {
        prop::sample::select(
            &[
                "0 0 L * *",
                "0 12 LW * *",
                "30 2 15W * *",
                "0 9 * * MON-FRI",
                "15 1 * * FRI#2",
                "0 3 * * 5L",
                "0 0 1 JAN-MAR *",
                "*/10 30 2 * * *",
                "15 30 2 * * SUN",
                "0 */7 * * * *",
                "45 1 * * *",
                "0 0-30/10 1,2 * * *",
                "@hourly",
                "@daily",
                "0 0 1 * MON",
                "0 0 */2 * MON",
            ][..],
        )
        .prop_map(str::to_string)
    }

    /// Whether `t` is the first instant after a gap in which some wall time matching
    /// `s` was skipped (the fixed-time rule).
    fn explained_by_gap(s: &CronSchedule, t: DateTime<Utc>) -> bool {
        let before = (t - Duration::seconds(1))
            .with_timezone(&s.tz)
            .naive_local();
        let wall = t.with_timezone(&s.tz).naive_local();
        let mut skipped = before + Duration::seconds(1);
        while skipped < wall {
            if s.cron.is_time_matching(&skipped).unwrap() {
                return true;
            }
            skipped += Duration::seconds(1);
        }
        false
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// With croner's extensions and seconds: strictly increasing, and every fire is a
        /// matching wall time or a gap-shifted fixed-time fire.
        #[test]
        fn fires_increase_and_match_in_local_time(
            expr in rich_field(),
            tz in prop::sample::select(&ZONES[..]),
            after in start(),
        ) {
            let s = sched(&expr, tz);
            let mut t = after;
            for _ in 0..20 {
                let next = s.next_after(t).unwrap();
                prop_assert!(next > t);
                let local = next.with_timezone(&s.tz);
                let matching = s.cron.is_time_matching(&local.naive_local()).unwrap();
                prop_assert!(
                    matching || (s.is_fixed_time() && explained_by_gap(&s, next)),
                    "{} in {}: {} ({}) does not match", expr, tz, next, local
                );
                t = next;
            }
        }
    }
}
