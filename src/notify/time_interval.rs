//! Named time intervals in Alertmanager's shape (`time_intervals`), used by
//! routes' `mute_time_intervals` and `active_time_intervals`.
//!
//! Semantics are Alertmanager's: every field is judged on the wall clock of
//! the interval's `location` (UTC by default), an omitted field matches all,
//! the fields of one range must all match, and an interval contains an
//! instant when any of its ranges does. Weeks run Sunday to Saturday, so a
//! weekday range may not wrap past Saturday.

use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// One `[[time_intervals]]` entry as written in the configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeIntervalInput {
    pub name: String,
    #[serde(default)]
    pub time_intervals: Vec<TimeRangeInput>,
}

/// One range of an interval as written; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeRangeInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<Vec<TimesInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekdays: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days_of_month: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub months: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub years: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// A time-of-day range as written, `HH:MM` each; defaults to empty so a
/// missing end is reported with its path instead of as a parse error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimesInput {
    #[serde(default)]
    pub start_time: String,
    #[serde(default)]
    pub end_time: String,
}

/// A validated named interval, ready to answer "is `now` inside?".
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTimeInterval {
    pub name: String,
    ranges: Vec<TimeRange>,
}

/// One validated range; `None` fields match everything.
#[derive(Debug, Clone, PartialEq)]
struct TimeRange {
    /// Minutes of the day, start inclusive, end exclusive.
    times: Option<Vec<(u32, u32)>>,
    /// 0 = Sunday, as in Alertmanager (and Go).
    weekdays: Option<Vec<(u32, u32)>>,
    /// Negative values count from the month's end (-1 = last day).
    days_of_month: Option<Vec<(i32, i32)>>,
    months: Option<Vec<(u32, u32)>>,
    years: Option<Vec<(i32, i32)>>,
    location: Option<Tz>,
}

const WEEKDAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

impl NamedTimeInterval {
    /// Validates an input, reporting every problem with its path inside the
    /// interval (e.g. `time_intervals[0].weekdays[1]: …`).
    pub fn from_input(input: TimeIntervalInput) -> Result<NamedTimeInterval, Vec<String>> {
        let mut errors = Vec::new();
        if input.name.trim().is_empty() {
            errors.push("name: required".to_string());
        }
        let mut ranges = Vec::with_capacity(input.time_intervals.len());
        for (i, range) in input.time_intervals.iter().enumerate() {
            if let Some(r) =
                TimeRange::from_input(range, &format!("time_intervals[{i}]"), &mut errors)
            {
                ranges.push(r);
            }
        }
        if errors.is_empty() {
            Ok(NamedTimeInterval {
                name: input.name,
                ranges,
            })
        } else {
            Err(errors)
        }
    }

    /// Whether any range contains `now`; an interval without ranges contains
    /// nothing, as in Alertmanager.
    pub fn contains(&self, now: DateTime<Utc>) -> bool {
        self.ranges.iter().any(|r| r.contains(now))
    }
}

impl TimeRange {
    fn from_input(input: &TimeRangeInput, path: &str, errors: &mut Vec<String>) -> Option<Self> {
        let before = errors.len();
        let times = input.times.as_ref().map(|list| {
            non_empty(list, &format!("{path}.times"), "time of day", errors);
            list.iter()
                .enumerate()
                .filter_map(|(i, t)| parse_times(t, &format!("{path}.times[{i}]"), errors))
                .collect()
        });
        let weekdays = parse_list(
            &input.weekdays,
            path,
            "weekdays",
            "weekday",
            parse_weekdays,
            errors,
        );
        let days_of_month = parse_list(
            &input.days_of_month,
            path,
            "days_of_month",
            "day of the month",
            parse_days_of_month,
            errors,
        );
        let months = parse_list(&input.months, path, "months", "month", parse_months, errors);
        let years = parse_list(&input.years, path, "years", "year", parse_years, errors);
        let location = match input.location.as_deref() {
            None => None,
            Some(name) => match parse_location(name) {
                Ok(tz) => Some(tz),
                Err(e) => {
                    errors.push(format!("{path}.location: {e}"));
                    None
                }
            },
        };
        (errors.len() == before).then_some(TimeRange {
            times,
            weekdays,
            days_of_month,
            months,
            years,
            location,
        })
    }

    /// Alertmanager's `ContainsTime`, judged on the location's wall clock.
    fn contains(&self, now: DateTime<Utc>) -> bool {
        let t: NaiveDateTime = match self.location {
            Some(tz) => now.with_timezone(&tz).naive_local(),
            None => now.naive_utc(),
        };
        if let Some(times) = &self.times {
            let minute = t.hour() * 60 + t.minute();
            if !times.iter().any(|&(s, e)| s <= minute && minute < e) {
                return false;
            }
        }
        if let Some(days) = &self.days_of_month {
            if !days.iter().any(|&r| day_in_range(r, t.date())) {
                return false;
            }
        }
        if let Some(months) = &self.months {
            if !in_ranges(months, t.month()) {
                return false;
            }
        }
        if let Some(weekdays) = &self.weekdays {
            if !in_ranges(weekdays, t.weekday().num_days_from_sunday()) {
                return false;
            }
        }
        if let Some(years) = &self.years {
            if !in_ranges(years, t.year()) {
                return false;
            }
        }
        true
    }
}

fn in_ranges<T: PartialOrd + Copy>(ranges: &[(T, T)], v: T) -> bool {
    ranges.iter().any(|&(b, e)| b <= v && v <= e)
}

/// Alertmanager's day-of-month test: resolve negative indices against this
/// month's length, skip a range that starts after the month ends, clamp the
/// rest to the month.
fn day_in_range((begin, end): (i32, i32), date: NaiveDate) -> bool {
    let len = days_in_month(date.year(), date.month());
    let resolve = |d: i32| if d < 0 { len + d + 1 } else { d };
    let (begin, end) = (resolve(begin), resolve(end));
    if begin > len {
        return false;
    }
    let (begin, end) = (begin.clamp(-len, len), end.clamp(-len, len));
    let day = date.day() as i32;
    begin <= day && day <= end
}

/// Calendar days in a month. Alertmanager divides the month's duration by
/// 24 h, which loses a day in a month that springs forward; the documented
/// meaning ("-1 = last day") is what we implement.
fn days_in_month(year: i32, month: u32) -> i32 {
    let (ny, nm) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    match (
        NaiveDate::from_ymd_opt(year, month, 1),
        NaiveDate::from_ymd_opt(ny, nm, 1),
    ) {
        (Some(a), Some(b)) => (b - a).num_days() as i32,
        // Only at the edge of chrono's year range; no real month is shorter.
        _ => 28,
    }
}

/// An explicitly empty list would never match (Alertmanager accepts it and
/// silently mutes or activates nothing); better to say so.
fn non_empty<T>(list: &[T], path: &str, what: &str, errors: &mut Vec<String>) {
    if list.is_empty() {
        errors.push(format!(
            "{path}: an empty list matches no {what}; omit the field to match every {what}"
        ));
    }
}

type RangeParser<T> = fn(&str) -> Result<(T, T), String>;

fn parse_list<T>(
    list: &Option<Vec<String>>,
    path: &str,
    field: &str,
    what: &str,
    parse: RangeParser<T>,
    errors: &mut Vec<String>,
) -> Option<Vec<(T, T)>> {
    let list = list.as_ref()?;
    non_empty(list, &format!("{path}.{field}"), what, errors);
    Some(
        list.iter()
            .enumerate()
            .filter_map(|(i, s)| match parse(s) {
                Ok(r) => Some(r),
                Err(e) => {
                    errors.push(format!("{path}.{field}[{i}]: {e}"));
                    None
                }
            })
            .collect(),
    )
}

/// Splits `a:b` (or a single `a`, meaning `a:a`), lower-cased and trimmed as
/// Alertmanager lower-cases them.
fn split_range(s: &str) -> Result<(String, String), String> {
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split(':').map(str::trim).collect();
    match parts.as_slice() {
        [one] => Ok((one.to_string(), one.to_string())),
        [a, b] => Ok((a.to_string(), b.to_string())),
        _ => Err(format!("{s:?} is not a range (want start:end)")),
    }
}

fn parse_weekdays(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = split_range(s)?;
    let day = |d: &str| {
        WEEKDAYS
            .iter()
            .position(|w| *w == d)
            .map(|p| p as u32)
            .ok_or_else(|| format!("{d:?} is not a weekday"))
    };
    let (first_day, last_day) = (day(&a)?, day(&b)?);
    if first_day > last_day {
        let first = if first_day == 6 {
            "saturday".to_string()
        } else {
            format!("{a}:saturday")
        };
        let second = if last_day == 0 {
            "sunday".to_string()
        } else {
            format!("sunday:{b}")
        };
        return Err(format!(
            "{s:?} wraps past saturday; weeks run sunday to saturday, so list it as {first:?} and {second:?}"
        ));
    }
    Ok((first_day, last_day))
}

fn parse_days_of_month(s: &str) -> Result<(i32, i32), String> {
    let (a, b) = split_range(s)?;
    let day = |d: &str| {
        match d.parse::<i32>() {
        Ok(n) if n != 0 && (-31..=31).contains(&n) => Ok(n),
        _ => Err(format!(
            "{d:?} is not a day of the month (1 to 31, or -31 to -1 counting back from the last day)"
        )),
    }
    };
    let (begin, end) = (day(&a)?, day(&b)?);
    // Alertmanager's checks: a range starting from the month's end must end
    // there too, and one that is backwards even in a 28-day month is wrong.
    if begin < 0 && end > 0 {
        return Err(format!(
            "{s:?} starts counting from the month's end, so its end must too (e.g. \"-3:-1\")"
        ));
    }
    let as_28 = |d: i32| if d < 0 { 28 + d } else { d };
    if as_28(begin) > as_28(end) {
        return Err(format!(
            "{s:?}: end day {end} is always before start day {begin}"
        ));
    }
    Ok((begin, end))
}

fn parse_months(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = split_range(s)?;
    let month = |m: &str| {
        MONTHS
            .iter()
            .position(|n| *n == m)
            .map(|p| p as u32 + 1)
            .or_else(|| m.parse::<u32>().ok().filter(|n| (1..=12).contains(n)))
            .ok_or_else(|| format!("{m:?} is not a month (january to december, or 1 to 12)"))
    };
    let (begin, end) = (month(&a)?, month(&b)?);
    if begin > end {
        return Err(format!(
            "{s:?}: end month comes before start month; list a range across the new year as two (e.g. \"november:december\" and \"january:february\")"
        ));
    }
    Ok((begin, end))
}

fn parse_years(s: &str) -> Result<(i32, i32), String> {
    let (a, b) = split_range(s)?;
    let year = |y: &str| {
        y.parse::<i32>()
            .ok()
            .filter(|n| (0..=9999).contains(n))
            .ok_or_else(|| format!("{y:?} is not a year"))
    };
    let (begin, end) = (year(&a)?, year(&b)?);
    if begin > end {
        return Err(format!(
            "{s:?}: end year {end} is before start year {begin}"
        ));
    }
    Ok((begin, end))
}

/// `HH:MM` from `00:00` to `23:59`, plus `24:00` as an end of day, exactly
/// Alertmanager's accepted forms.
fn parse_clock(s: &str) -> Option<u32> {
    if s == "24:00" {
        return Some(24 * 60);
    }
    let b = s.as_bytes();
    if b.len() != 5
        || b[2] != b':'
        || !b
            .iter()
            .enumerate()
            .all(|(i, c)| i == 2 || c.is_ascii_digit())
    {
        return None;
    }
    let h = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
    let m = u32::from(b[3] - b'0') * 10 + u32::from(b[4] - b'0');
    (h < 24 && m < 60).then_some(h * 60 + m)
}

fn parse_times(t: &TimesInput, path: &str, errors: &mut Vec<String>) -> Option<(u32, u32)> {
    let mut field = |name: &str, v: &str| {
        if v.is_empty() {
            errors.push(format!("{path}.{name}: required"));
            return None;
        }
        let parsed = parse_clock(v);
        if parsed.is_none() {
            errors.push(format!(
                "{path}.{name}: {v:?} is not a time of day (HH:MM, 00:00 to 24:00)"
            ));
        }
        parsed
    };
    let start = field("start_time", &t.start_time);
    let end = field("end_time", &t.end_time);
    let (start, end) = (start?, end?);
    if start >= end {
        errors.push(format!(
            "{path}: start_time {:?} must be before end_time {:?}; list a range across midnight as two (e.g. {:?} to \"24:00\" and \"00:00\" to {:?})",
            t.start_time, t.end_time, t.start_time, t.end_time
        ));
        return None;
    }
    Some((start, end))
}

/// An IANA zone name; Go's `LoadLocation` reads "" as UTC, so do we. Go's
/// "Local" (the host's zone) is refused: the answer must not depend on the
/// machine that evaluates it.
fn parse_location(name: &str) -> Result<Tz, String> {
    if name.is_empty() {
        return Ok(Tz::UTC);
    }
    if name == "Local" {
        return Err(
            "\"Local\" depends on the host's time zone; name the zone (e.g. \"Europe/Berlin\")"
                .to_string(),
        );
    }
    Tz::from_str(name).map_err(|_| format!("{name:?} is not an IANA time zone name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone, Weekday};
    use proptest::prelude::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .with_timezone(&Utc)
    }

    fn strings(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    fn times(v: &[(&str, &str)]) -> Option<Vec<TimesInput>> {
        Some(
            v.iter()
                .map(|(s, e)| TimesInput {
                    start_time: s.to_string(),
                    end_time: e.to_string(),
                })
                .collect(),
        )
    }

    fn interval(ranges: Vec<TimeRangeInput>) -> NamedTimeInterval {
        NamedTimeInterval::from_input(TimeIntervalInput {
            name: "t".into(),
            time_intervals: ranges,
        })
        .unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn errors(range: TimeRangeInput) -> Vec<String> {
        NamedTimeInterval::from_input(TimeIntervalInput {
            name: "t".into(),
            time_intervals: vec![range],
        })
        .expect_err("should be rejected")
    }

    fn one_error(range: TimeRangeInput) -> String {
        let e = errors(range);
        assert_eq!(e.len(), 1, "{e:?}");
        e[0].clone()
    }

    #[test]
    fn times_start_inclusive_end_exclusive() {
        let i = interval(vec![TimeRangeInput {
            times: times(&[("09:00", "17:00")]),
            ..Default::default()
        }]);
        assert!(!i.contains(at("2026-03-02T08:59:59Z")));
        assert!(i.contains(at("2026-03-02T09:00:00Z")));
        assert!(i.contains(at("2026-03-02T16:59:59Z")));
        assert!(!i.contains(at("2026-03-02T17:00:00Z")));
    }

    #[test]
    fn end_of_day_24_00() {
        let i = interval(vec![TimeRangeInput {
            times: times(&[("22:00", "24:00")]),
            ..Default::default()
        }]);
        assert!(!i.contains(at("2026-03-02T21:59:59Z")));
        assert!(i.contains(at("2026-03-02T22:00:00Z")));
        assert!(i.contains(at("2026-03-02T23:59:59Z")));
        assert!(!i.contains(at("2026-03-03T00:00:00Z")));
    }

    #[test]
    fn several_times_any_matches() {
        let i = interval(vec![TimeRangeInput {
            times: times(&[("00:00", "02:00"), ("22:00", "24:00")]),
            ..Default::default()
        }]);
        assert!(i.contains(at("2026-03-02T01:00:00Z")));
        assert!(i.contains(at("2026-03-02T23:00:00Z")));
        assert!(!i.contains(at("2026-03-02T12:00:00Z")));
    }

    #[test]
    fn bad_times_are_rejected() {
        for (s, e, want) in [
            ("9:00", "17:00", "start_time: \"9:00\" is not a time of day"),
            ("09:00", "24:01", "end_time: \"24:01\" is not a time of day"),
            (
                "09:60",
                "10:00",
                "start_time: \"09:60\" is not a time of day",
            ),
            (
                "24:00",
                "24:00",
                "start_time \"24:00\" must be before end_time",
            ),
            (
                "17:00",
                "09:00",
                "start_time \"17:00\" must be before end_time \"09:00\"",
            ),
            ("10:00", "10:00", "must be before end_time"),
            (
                "",
                "10:00",
                "time_intervals[0].times[0].start_time: required",
            ),
            ("10:00", "", "time_intervals[0].times[0].end_time: required"),
            ("1a:00", "12:00", "is not a time of day"),
        ] {
            let err = one_error(TimeRangeInput {
                times: times(&[(s, e)]),
                ..Default::default()
            });
            assert!(err.contains(want), "{s}-{e}: {err}");
            assert!(err.starts_with("time_intervals[0].times[0]"), "{err}");
        }
    }

    #[test]
    fn weekdays_single_range_and_case() {
        let i = interval(vec![TimeRangeInput {
            weekdays: strings(&["Monday:Wednesday", "saturday"]),
            ..Default::default()
        }]);
        // 2026-03-01 is a Sunday.
        let day = |d: u32| at(&format!("2026-03-{d:02}T12:00:00Z"));
        let got: Vec<bool> = (1..=7).map(|d| i.contains(day(d))).collect();
        assert_eq!(got, [false, true, true, true, false, false, true]);
    }

    #[test]
    fn week_starts_on_sunday() {
        let i = interval(vec![TimeRangeInput {
            weekdays: strings(&["sunday:saturday"]),
            ..Default::default()
        }]);
        for d in 1..=7 {
            assert!(i.contains(at(&format!("2026-03-{d:02}T00:00:00Z"))));
        }
        let err = one_error(TimeRangeInput {
            weekdays: strings(&["friday:monday"]),
            ..Default::default()
        });
        assert!(
            err.contains(r#"list it as "friday:saturday" and "sunday:monday""#),
            "{err}"
        );
        let err = one_error(TimeRangeInput {
            weekdays: strings(&["saturday:sunday"]),
            ..Default::default()
        });
        assert!(
            err.contains(r#"list it as "saturday" and "sunday""#),
            "{err}"
        );
    }

    #[test]
    fn bad_weekday_names_its_path() {
        let err = one_error(TimeRangeInput {
            weekdays: strings(&["monday", "funday"]),
            ..Default::default()
        });
        assert_eq!(
            err,
            r#"time_intervals[0].weekdays[1]: "funday" is not a weekday"#
        );
        let err = one_error(TimeRangeInput {
            weekdays: strings(&["monday:tuesday:friday"]),
            ..Default::default()
        });
        assert!(err.contains("is not a range"), "{err}");
    }

    #[test]
    fn positive_days_of_month() {
        let i = interval(vec![TimeRangeInput {
            days_of_month: strings(&["1:5", "15"]),
            ..Default::default()
        }]);
        let day = |d: u32| i.contains(at(&format!("2026-01-{d:02}T12:00:00Z")));
        let got: Vec<u32> = (1..=31).filter(|&d| day(d)).collect();
        assert_eq!(got, [1, 2, 3, 4, 5, 15]);
    }

    #[test]
    fn negative_days_in_february_of_a_leap_year() {
        let last = interval(vec![TimeRangeInput {
            days_of_month: strings(&["-1"]),
            ..Default::default()
        }]);
        assert!(last.contains(at("2028-02-29T12:00:00Z")));
        assert!(!last.contains(at("2028-02-28T12:00:00Z")));
        assert!(last.contains(at("2027-02-28T12:00:00Z")));
        assert!(last.contains(at("2028-01-31T12:00:00Z")));
        assert!(last.contains(at("2028-04-30T12:00:00Z")));

        let last3 = interval(vec![TimeRangeInput {
            days_of_month: strings(&["-3:-1"]),
            ..Default::default()
        }]);
        let feb = |y: i32| -> Vec<u32> {
            (1..=29)
                .filter(|&d| {
                    Utc.with_ymd_and_hms(y, 2, d, 12, 0, 0)
                        .single()
                        .is_some_and(|t| last3.contains(t))
                })
                .collect()
        };
        assert_eq!(feb(2028), [27, 28, 29]);
        assert_eq!(feb(2027), [26, 27, 28]);
    }

    #[test]
    fn days_past_the_month_end_are_clamped_or_skipped() {
        let to31 = interval(vec![TimeRangeInput {
            days_of_month: strings(&["25:31"]),
            ..Default::default()
        }]);
        assert!(to31.contains(at("2027-02-28T12:00:00Z")));
        assert!(!to31.contains(at("2027-03-01T12:00:00Z")));
        let from30 = interval(vec![TimeRangeInput {
            days_of_month: strings(&["30:31"]),
            ..Default::default()
        }]);
        assert!(!from30.contains(at("2028-02-29T12:00:00Z")));
        assert!(!from30.contains(at("2028-03-01T12:00:00Z")));
        assert!(from30.contains(at("2028-01-30T12:00:00Z")));
        let whole = interval(vec![TimeRangeInput {
            days_of_month: strings(&["1:-1"]),
            ..Default::default()
        }]);
        assert!(whole.contains(at("2028-02-29T12:00:00Z")));
        assert!(whole.contains(at("2028-03-31T12:00:00Z")));
    }

    #[test]
    fn bad_days_of_month() {
        for (s, want) in [
            ("0", "is not a day of the month"),
            ("32", "is not a day of the month"),
            ("-32", "is not a day of the month"),
            ("x", "is not a day of the month"),
            ("-1:5", "its end must too"),
            ("5:1", "end day 1 is always before start day 5"),
            ("-1:-3", "end day -3 is always before start day -1"),
        ] {
            let err = one_error(TimeRangeInput {
                days_of_month: strings(&[s]),
                ..Default::default()
            });
            assert!(err.contains(want), "{s}: {err}");
            assert!(
                err.starts_with("time_intervals[0].days_of_month[0]: "),
                "{err}"
            );
        }
    }

    #[test]
    fn months_by_name_number_and_range() {
        let i = interval(vec![TimeRangeInput {
            months: strings(&["January:3", "DECEMBER", "7"]),
            ..Default::default()
        }]);
        let got: Vec<u32> = (1..=12)
            .filter(|&m| i.contains(Utc.with_ymd_and_hms(2026, m, 10, 0, 0, 0).unwrap()))
            .collect();
        assert_eq!(got, [1, 2, 3, 7, 12]);
        for (s, want) in [
            ("13", "is not a month"),
            ("0", "is not a month"),
            ("smarch", "is not a month"),
            ("march:january", "end month comes before start month"),
        ] {
            let err = one_error(TimeRangeInput {
                months: strings(&[s]),
                ..Default::default()
            });
            assert!(err.contains(want), "{s}: {err}");
        }
    }

    #[test]
    fn years() {
        let i = interval(vec![TimeRangeInput {
            years: strings(&["2026:2027", "2030"]),
            ..Default::default()
        }]);
        assert!(!i.contains(at("2025-12-31T23:59:59Z")));
        assert!(i.contains(at("2026-01-01T00:00:00Z")));
        assert!(i.contains(at("2027-12-31T23:59:59Z")));
        assert!(!i.contains(at("2028-06-01T00:00:00Z")));
        assert!(i.contains(at("2030-06-01T00:00:00Z")));
        for (s, want) in [
            ("2027:2026", "end year 2026 is before start year 2027"),
            ("twenty", "is not a year"),
            ("-5", "is not a year"),
        ] {
            let err = one_error(TimeRangeInput {
                years: strings(&[s]),
                ..Default::default()
            });
            assert!(err.contains(want), "{s}: {err}");
        }
    }

    #[test]
    fn all_fields_of_a_range_must_match() {
        let i = interval(vec![TimeRangeInput {
            times: times(&[("09:00", "17:00")]),
            weekdays: strings(&["monday:friday"]),
            months: strings(&["march"]),
            ..Default::default()
        }]);
        assert!(i.contains(at("2026-03-02T10:00:00Z"))); // Monday
        assert!(!i.contains(at("2026-03-01T10:00:00Z"))); // Sunday
        assert!(!i.contains(at("2026-03-02T18:00:00Z"))); // after hours
        assert!(!i.contains(at("2026-04-06T10:00:00Z"))); // Monday in April
    }

    #[test]
    fn any_range_of_an_interval_suffices() {
        let i = interval(vec![
            TimeRangeInput {
                weekdays: strings(&["saturday", "sunday"]),
                ..Default::default()
            },
            TimeRangeInput {
                times: times(&[("00:00", "09:00")]),
                ..Default::default()
            },
        ]);
        assert!(i.contains(at("2026-03-01T15:00:00Z"))); // Sunday afternoon
        assert!(i.contains(at("2026-03-02T08:00:00Z"))); // Monday morning
        assert!(!i.contains(at("2026-03-02T15:00:00Z"))); // Monday afternoon
    }

    #[test]
    fn no_ranges_contains_nothing() {
        let i = interval(vec![]);
        assert!(!i.contains(at("2026-03-02T10:00:00Z")));
    }

    #[test]
    fn fields_are_judged_in_the_location() {
        // Sunday 23:30 UTC is Monday 08:30 in Tokyo.
        let tokyo = interval(vec![TimeRangeInput {
            weekdays: strings(&["monday"]),
            times: times(&[("08:00", "09:00")]),
            location: Some("Asia/Tokyo".into()),
            ..Default::default()
        }]);
        assert!(tokyo.contains(at("2026-03-01T23:30:00Z")));
        assert!(!tokyo.contains(at("2026-03-02T08:30:00Z")));
        // New Year in Tokyo while it is still December in UTC.
        let jan = interval(vec![TimeRangeInput {
            months: strings(&["january"]),
            years: strings(&["2027"]),
            days_of_month: strings(&["1"]),
            location: Some("Asia/Tokyo".into()),
            ..Default::default()
        }]);
        assert!(jan.contains(at("2026-12-31T15:00:00Z")));
        assert!(!jan.contains(at("2026-12-31T14:59:59Z")));
    }

    fn minutes_inside(i: &NamedTimeInterval, from: &str, hours: i64) -> i64 {
        let start = at(from);
        (0..hours * 60)
            .filter(|m| i.contains(start + Duration::minutes(*m)))
            .count() as i64
    }

    #[test]
    fn spring_forward_skips_the_missing_hour() {
        // Europe/Berlin jumps from 02:00 CET to 03:00 CEST on 2026-03-29.
        let i = interval(vec![TimeRangeInput {
            times: times(&[("02:00", "03:00")]),
            location: Some("Europe/Berlin".into()),
            ..Default::default()
        }]);
        assert_eq!(minutes_inside(&i, "2026-03-29T00:00:00Z", 24), 0);
        // The day before, 02:00-03:00 CET is 01:00-02:00 UTC.
        assert_eq!(minutes_inside(&i, "2026-03-28T00:00:00Z", 24), 60);
        assert!(i.contains(at("2026-03-28T01:00:00Z")));
        // 03:00 local right after the jump is outside (end exclusive).
        let after = interval(vec![TimeRangeInput {
            times: times(&[("03:00", "04:00")]),
            location: Some("Europe/Berlin".into()),
            ..Default::default()
        }]);
        assert!(after.contains(at("2026-03-29T01:00:00Z")));
        assert!(!after.contains(at("2026-03-29T00:59:59Z")));
    }

    #[test]
    fn fall_back_repeats_the_hour() {
        // Europe/Berlin goes from 03:00 CEST back to 02:00 CET on 2026-10-25,
        // so 02:00-03:00 local happens twice (00:00-02:00 UTC).
        let i = interval(vec![TimeRangeInput {
            times: times(&[("02:00", "03:00")]),
            location: Some("Europe/Berlin".into()),
            ..Default::default()
        }]);
        assert_eq!(minutes_inside(&i, "2026-10-25T00:00:00Z", 24), 120);
        assert!(i.contains(at("2026-10-25T00:30:00Z")));
        assert!(i.contains(at("2026-10-25T01:30:00Z")));
        assert!(!i.contains(at("2026-10-25T02:00:00Z")));
    }

    #[test]
    fn last_day_in_a_month_that_springs_forward() {
        // Documented meaning of -1 (Alertmanager's duration arithmetic would
        // pick March 30 here).
        let i = interval(vec![TimeRangeInput {
            days_of_month: strings(&["-1"]),
            location: Some("Europe/Berlin".into()),
            ..Default::default()
        }]);
        assert!(i.contains(at("2026-03-30T22:30:00Z"))); // Mar 31 00:30 CEST
        assert!(!i.contains(at("2026-03-30T21:30:00Z"))); // Mar 30 23:30 CEST
        assert!(!i.contains(at("2026-03-31T22:30:00Z"))); // Apr 1 00:30 CEST
    }

    #[test]
    fn locations() {
        let err = one_error(TimeRangeInput {
            location: Some("Mars/Olympus_Mons".into()),
            ..Default::default()
        });
        assert_eq!(
            err,
            r#"time_intervals[0].location: "Mars/Olympus_Mons" is not an IANA time zone name"#
        );
        let err = one_error(TimeRangeInput {
            location: Some("Local".into()),
            ..Default::default()
        });
        assert!(err.contains("depends on the host"), "{err}");
        // Go reads "" as UTC.
        let utc = interval(vec![TimeRangeInput {
            times: times(&[("10:00", "11:00")]),
            location: Some(String::new()),
            ..Default::default()
        }]);
        assert!(utc.contains(at("2026-06-01T10:30:00Z")));
    }

    #[test]
    fn empty_lists_are_rejected() {
        let e = errors(TimeRangeInput {
            times: Some(vec![]),
            weekdays: Some(vec![]),
            days_of_month: Some(vec![]),
            months: Some(vec![]),
            years: Some(vec![]),
            location: None,
        });
        assert_eq!(e.len(), 5, "{e:?}");
        assert!(
            e[1].starts_with("time_intervals[0].weekdays: an empty list"),
            "{e:?}"
        );
    }

    #[test]
    fn every_error_is_reported_with_its_range_index() {
        let e = NamedTimeInterval::from_input(TimeIntervalInput {
            name: " ".into(),
            time_intervals: vec![
                TimeRangeInput::default(),
                TimeRangeInput {
                    weekdays: strings(&["funday"]),
                    months: strings(&["13"]),
                    location: Some("Nowhere".into()),
                    ..Default::default()
                },
            ],
        })
        .unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert_eq!(e[0], "name: required");
        assert!(e[1].starts_with("time_intervals[1].weekdays[0]: "), "{e:?}");
        assert!(e[2].starts_with("time_intervals[1].months[0]: "), "{e:?}");
        assert!(e[3].starts_with("time_intervals[1].location: "), "{e:?}");
    }

    #[test]
    fn toml_shape_and_unknown_fields() {
        let input: TimeIntervalInput = toml::from_str(
            r#"
            name = "offhours"
            [[time_intervals]]
            times = [ { start_time = "18:00", end_time = "24:00" } ]
            weekdays = ["monday:friday"]
            location = "Europe/Berlin"
            "#,
        )
        .unwrap();
        let i = NamedTimeInterval::from_input(input).unwrap();
        assert_eq!(i.name, "offhours");
        assert!(i.contains(at("2026-03-02T17:30:00Z"))); // Monday 18:30 CET
        let err = toml::from_str::<TimeIntervalInput>(
            "name = \"x\"\n[[time_intervals]]\nweekday = [\"monday\"]\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `weekday`"), "{err}");
        let err = toml::from_str::<TimeIntervalInput>(
            "name = \"x\"\n[[time_intervals]]\ntimes = [{ start = \"01:00\" }]\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `start`"), "{err}");
    }

    /// A few hand-made intervals, each with an oracle written from the
    /// documentation rather than from the implementation.
    type Oracle = fn(DateTime<Utc>) -> bool;

    fn oracles() -> Vec<(NamedTimeInterval, Oracle)> {
        vec![
            (
                interval(vec![TimeRangeInput {
                    weekdays: strings(&["monday:friday"]),
                    times: times(&[("09:00", "17:00")]),
                    location: Some("Europe/Berlin".into()),
                    ..Default::default()
                }]),
                |t| {
                    let l = t.with_timezone(&chrono_tz::Europe::Berlin);
                    !matches!(l.weekday(), Weekday::Sat | Weekday::Sun)
                        && (9..17).contains(&l.hour())
                },
            ),
            (
                interval(vec![TimeRangeInput {
                    days_of_month: strings(&["-3:-1"]),
                    months: strings(&["1:3", "december"]),
                    location: Some("America/New_York".into()),
                    ..Default::default()
                }]),
                |t| {
                    let l = t.with_timezone(&chrono_tz::America::New_York).date_naive();
                    let in_last_three = (l + Duration::days(3)).month() != l.month();
                    in_last_three && [1, 2, 3, 12].contains(&l.month())
                },
            ),
            (
                interval(vec![TimeRangeInput {
                    times: times(&[("22:00", "24:00"), ("00:00", "02:30")]),
                    years: strings(&["2030:2040"]),
                    days_of_month: strings(&["1", "15:16"]),
                    ..Default::default()
                }]),
                |t| {
                    let mins = t.hour() * 60 + t.minute();
                    !(150..22 * 60).contains(&mins)
                        && (2030..=2040).contains(&t.year())
                        && [1, 15, 16].contains(&t.day())
                },
            ),
            (
                interval(vec![
                    TimeRangeInput {
                        weekdays: strings(&["saturday", "sunday"]),
                        location: Some("Asia/Kolkata".into()),
                        ..Default::default()
                    },
                    TimeRangeInput {
                        times: times(&[("12:00", "13:00")]),
                        location: Some("Asia/Kolkata".into()),
                        ..Default::default()
                    },
                ]),
                |t| {
                    let l = t.with_timezone(&chrono_tz::Asia::Kolkata);
                    matches!(l.weekday(), Weekday::Sat | Weekday::Sun) || l.hour() == 12
                },
            ),
        ]
    }

    fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
        // 2000-01-01 to 2100-01-01.
        (946_684_800i64..4_102_444_800i64)
            .prop_map(|s| DateTime::from_timestamp(s, 0).expect("in range"))
    }

    proptest! {
        #[test]
        fn omitted_fields_contain_everything(t in any_instant(), loc in prop_oneof![
            Just(None), Just(Some("Europe/Berlin")), Just(Some("Pacific/Chatham"))
        ]) {
            let i = interval(vec![TimeRangeInput {
                location: loc.map(str::to_string),
                ..Default::default()
            }]);
            prop_assert!(i.contains(t));
        }

        #[test]
        fn contains_agrees_with_oracles(t in any_instant()) {
            for (n, (i, oracle)) in oracles().iter().enumerate() {
                prop_assert_eq!(i.contains(t), oracle(t), "interval {} at {}", n, t);
            }
        }

        #[test]
        fn contains_agrees_with_oracles_near_month_ends(
            year in 2000i32..2100, month in 1u32..=12, day_back in 0i64..4, secs in 0i64..86_400
        ) {
            // Dense sampling where the day-of-month rules bite.
            let (ny, nm) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
            let first_next = Utc.with_ymd_and_hms(ny, nm, 1, 0, 0, 0).unwrap();
            let t = first_next - Duration::days(day_back) + Duration::seconds(secs) - Duration::hours(12);
            for (n, (i, oracle)) in oracles().iter().enumerate() {
                prop_assert_eq!(i.contains(t), oracle(t), "interval {} at {}", n, t);
            }
        }
    }
}
