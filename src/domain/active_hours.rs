//! Active hours (quiet windows) and the clock that counts only active, observed time.
//!
//! A [`Window`] is a wall-clock span in the check's zone: `start` inclusive, `end`
//! exclusive, `end <= start` wrapping past midnight and `start == end` meaning 24 hours.
//! Its `days` name the day a window *starts*, so a Friday `18:00`–`09:00` window covers
//! Saturday 08:59 while a Saturday-only one does not cover Friday 23:00.
//!
//! # Daylight saving time
//!
//! Each window occurrence runs in real time from its start instant to its end instant.
//! A boundary whose wall time does not exist (spring forward) happens at the first valid
//! instant after the gap; one whose wall time occurs twice (fall back) happens at its
//! first occurrence. So on a transition day a window can be shorter or longer than its
//! nominal length, and the second pass through a repeated hour is inside a window only
//! when the window's end lies after the repeated range. Overlapping windows simply union.
//!
//! # The active clock
//!
//! [`ActiveClock`] measures durations only over time that is inside active hours and not
//! inside an unobserved span (the watchdog itself was down), so limits pause over quiet and
//! unobserved time and resume where they stopped.

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono::{Offset, Weekday};
use chrono_tz::{GapInfo, Tz};

use super::timeline::SLEW_RATE;

const MINUTES_PER_DAY: u16 = 1440;

const ALL_DAYS: u8 = 0b111_1111;

const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// How far past `from` [`ActiveClock::advance`] walks before giving up, in days (100 years).
pub const ADVANCE_BOUND_DAYS: i64 = 36_525;

/// Times [`ActiveHours`] re-examines the next week before deciding nothing ever changes;
/// one is enough except when DST swallows the only quiet spell of a week.
const LOOKAHEAD_ROUNDS: usize = 4;

/// One active window: wall-clock start and end as minutes of the day, and the days it may start on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    start: u16,
    end: u16,
    /// Bit `i` set: the window starts on the day `i` days after Monday.
    days: u8,
}

impl Window {
    /// Parses `"HH:MM"` times and day names (`mon`, `monday`, ranges `mon-fri`, `fri-mon`).
    ///
    /// Errors name the field (`start`, `end`, `days[1]`); callers prefix the window's
    /// position, as [`parse_windows`] does.
    pub fn parse(start: &str, end: &str, days: &[String]) -> Result<Window, String> {
        let start_minute = parse_time(start, false)
            .ok_or_else(|| format!("start: {start:?} is not a time HH:MM (00:00 to 23:59)"))?;
        let end_minute = parse_time(end, true)
            .ok_or_else(|| format!("end: {end:?} is not a time HH:MM (00:00 to 24:00)"))?;
        let mut mask = if days.is_empty() { ALL_DAYS } else { 0 };
        for (i, item) in days.iter().enumerate() {
            for part in item.split(',') {
                mask |= parse_day_set(part).map_err(|e| format!("days[{i}]: {e}"))?;
            }
        }
        Ok(Window {
            start: start_minute,
            end: end_minute % MINUTES_PER_DAY,
            days: mask,
        })
    }

    /// Start as minutes after midnight.
    pub fn start_minute(&self) -> u16 {
        self.start
    }

    /// End as minutes after midnight (exclusive).
    pub fn end_minute(&self) -> u16 {
        self.end
    }

    /// The days the window may start on: bit 0 is Monday, bit 6 Sunday.
    pub fn days(&self) -> u8 {
        self.days
    }

    /// Nominal length (DST days aside): 1 minute to 24 hours.
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(self.len_minutes()) * 60)
    }

    fn len_minutes(&self) -> u16 {
        if self.start == self.end {
            MINUTES_PER_DAY
        } else {
            (self.end + MINUTES_PER_DAY - self.start) % MINUTES_PER_DAY
        }
    }

    fn starts_on(&self, day: Weekday) -> bool {
        self.days & (1 << day.num_days_from_monday()) != 0
    }
}

/// Parses every window, reporting every problem at once as `active_hours[i].field: reason`.
pub fn parse_windows<'a, I>(specs: I) -> Result<Vec<Window>, Vec<String>>
where
    I: IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
{
    let mut windows = Vec::new();
    let mut errors = Vec::new();
    for (i, (start, end, days)) in specs.into_iter().enumerate() {
        match Window::parse(start, end, days) {
            Ok(w) => windows.push(w),
            Err(e) => errors.push(format!("active_hours[{i}].{e}")),
        }
    }
    if errors.is_empty() {
        Ok(windows)
    } else {
        Err(errors)
    }
}

/// `end` may be `24:00`, the midnight that closes a day.
fn parse_time(text: &str, allow_24: bool) -> Option<u16> {
    let (h, m) = text.trim().split_once(':')?;
    let digits = |s: &str, max_len: usize| {
        !s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit())
    };
    if !digits(h, 2) || !digits(m, 2) || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    match (h, m) {
        (0..=23, 0..=59) => Some(h * 60 + m),
        (24, 0) if allow_24 => Some(MINUTES_PER_DAY),
        _ => None,
    }
}

fn parse_day(text: &str) -> Option<u8> {
    let t = text.trim().to_ascii_lowercase();
    const FULL: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    let extra: [(&str, u8); 4] = [("tues", 1), ("weds", 2), ("thur", 3), ("thurs", 3)];
    (0u8..7)
        .find(|&i| t == DAY_NAMES[usize::from(i)] || t == FULL[usize::from(i)])
        .or_else(|| extra.iter().find(|(n, _)| *n == t).map(|(_, i)| *i))
}

/// A day or a range of days (wrapping past Sunday), as a bit mask.
fn parse_day_set(text: &str) -> Result<u8, String> {
    let not_a_day =
        |s: &str| format!("{s:?} is not a day (mon, tue, ..., sun, or a range like mon-fri)");
    let (first, last) = match text.split_once(['-', '–']) {
        Some((a, b)) => (a, b),
        None => (text, text),
    };
    let a = parse_day(first).ok_or_else(|| not_a_day(text))?;
    let b = parse_day(last).ok_or_else(|| not_a_day(text))?;
    let mut mask = 0;
    let mut d = a;
    loop {
        mask |= 1 << d;
        if d == b {
            return Ok(mask);
        }
        d = (d + 1) % 7;
    }
}

/// A set of active windows in a zone; outside them a check is quiet.
#[derive(Clone, Debug)]
pub struct ActiveHours {
    windows: Vec<Window>,
    tz: Tz,
}

impl ActiveHours {
    /// Active hours made of `windows` (their union) in `tz`; no windows means never active.
    pub fn new(windows: Vec<Window>, tz: Tz) -> Self {
        ActiveHours { windows, tz }
    }

    /// The windows as given.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// The zone the windows are read in.
    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// Whether `t` is inside a window.
    pub fn is_active(&self, t: DateTime<Utc>) -> bool {
        self.state_at(t).0
    }

    /// The next instant > t at which is_active changes; None if it never changes (e.g. a 24h window every day).
    pub fn next_change(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.state_at(t).1
    }

    /// Length of the shortest window (to warn when it is shorter than the check's interval).
    pub fn shortest_window(&self) -> std::time::Duration {
        self.windows
            .iter()
            .map(Window::duration)
            .min()
            .unwrap_or_default()
    }

    /// The schedule in words, e.g. `active 18:00–09:00 Asia/Shanghai (15h/day), quiet 09:00–18:00`.
    pub fn describe(&self) -> String {
        let tz = self.tz;
        if self.windows.is_empty() {
            return format!("never active ({tz})");
        }
        let first_days = self.windows[0].days;
        let same_days = self.windows.iter().all(|w| w.days == first_days);
        if !same_days {
            let list: Vec<String> = self
                .windows
                .iter()
                .map(|w| {
                    let days = describe_days(w.days);
                    format!("{} {days}", describe_span(w))
                        .trim_end()
                        .to_string()
                })
                .collect();
            let weekly = self.week_minutes().iter().filter(|a| **a).count();
            return format!(
                "active {} {tz} ({}/week), quiet otherwise",
                list.join(", "),
                describe_length(weekly)
            );
        }
        let day = self.day_minutes();
        let per_day = describe_length(day.iter().filter(|a| **a).count());
        let list: Vec<String> = self.windows.iter().map(describe_span).collect();
        let list = list.join(", ");
        if first_days != ALL_DAYS {
            let days = describe_days(first_days);
            return format!("active {list} {days} {tz} ({per_day}/day), quiet otherwise");
        }
        let quiet = quiet_runs(&day);
        if quiet.is_empty() {
            return format!("active {list} {tz} ({per_day}/day), never quiet");
        }
        format!(
            "active {list} {tz} ({per_day}/day), quiet {}",
            quiet.join(", ")
        )
    }

    /// Which minutes of a day are active, treating every window as daily.
    fn day_minutes(&self) -> Vec<bool> {
        let mut day = vec![false; usize::from(MINUTES_PER_DAY)];
        for w in &self.windows {
            for m in 0..w.len_minutes() {
                day[usize::from((w.start + m) % MINUTES_PER_DAY)] = true;
            }
        }
        day
    }

    /// Which minutes of a week (from Monday 00:00) are active.
    fn week_minutes(&self) -> Vec<bool> {
        let week = 7 * usize::from(MINUTES_PER_DAY);
        let mut minutes = vec![false; week];
        for w in &self.windows {
            for d in (0..7).filter(|d| w.days & (1 << d) != 0) {
                let start = d * usize::from(MINUTES_PER_DAY) + usize::from(w.start);
                for m in 0..usize::from(w.len_minutes()) {
                    minutes[(start + m) % week] = true;
                }
            }
        }
        minutes
    }

    /// The merged active spans of window occurrences starting from the day before `t` to
    /// eight days after it, and the instant up to which that list is complete.
    fn spans_near(&self, t: DateTime<Utc>) -> Option<(Vec<Span>, DateTime<Utc>)> {
        let today = t.with_timezone(&self.tz).date_naive();
        let mut spans = Vec::new();
        for offset in -1..=8 {
            let day = today.checked_add_signed(Duration::days(offset))?;
            let midnight = day.and_hms_opt(0, 0, 0)?;
            for w in self.windows.iter().filter(|w| w.starts_on(day.weekday())) {
                let start = midnight + Duration::minutes(i64::from(w.start));
                let end = start + Duration::minutes(i64::from(w.len_minutes()));
                let (a, b) = (resolve(self.tz, start), resolve(self.tz, end));
                if a < b {
                    spans.push((a, b));
                }
            }
        }
        spans.sort();
        let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        // Occurrences starting later begin at or after this instant.
        let horizon = today
            .checked_add_signed(Duration::days(9))?
            .and_hms_opt(0, 0, 0)?;
        Some((merged, resolve(self.tz, horizon)))
    }

    /// Whether `t` is active, and when that next changes.
    fn state_at(&self, t: DateTime<Utc>) -> (bool, Option<DateTime<Utc>>) {
        let mut cur = t;
        let mut state = None;
        for _ in 0..LOOKAHEAD_ROUNDS {
            let Some((spans, horizon)) = self.spans_near(cur) else {
                return (state.unwrap_or(false), None);
            };
            let here = spans.iter().find(|(a, b)| *a <= cur && cur < *b);
            let active = here.is_some();
            let first = *state.get_or_insert(active);
            if active != first {
                return (first, Some(cur));
            }
            let next = match here {
                Some((_, end)) => Some(*end),
                None => spans.iter().map(|(a, _)| *a).find(|a| *a > cur),
            };
            if let Some(n) = next.filter(|n| *n < horizon) {
                return (first, Some(n));
            }
            // Unchanged for a whole week: look at the next one before calling it permanent.
            cur = horizon;
        }
        (state.unwrap_or(false), None)
    }
}

type Span = (DateTime<Utc>, DateTime<Utc>);

/// A wall-clock boundary as an instant: a gap moves it to the first valid instant after
/// the gap, an overlap to its first occurrence.
fn resolve(tz: Tz, wall: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.with_timezone(&Utc),
        LocalResult::None => match GapInfo::new(&wall, &tz).and_then(|g| g.end) {
            Some(t) => t.with_timezone(&Utc),
            // Only at the edge of the zone's table; the offset in force there is close enough.
            None => {
                let offset = tz.offset_from_utc_datetime(&wall).fix().local_minus_utc();
                wall.and_utc() - Duration::seconds(i64::from(offset))
            }
        },
    }
}

fn hhmm(minutes: u16) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

fn describe_span(w: &Window) -> String {
    match (w.start, w.end) {
        (0, 0) => "00:00–24:00".to_string(),
        (s, e) if s == e => format!("{}–{} next day", hhmm(s), hhmm(e)),
        (s, e) => format!("{}–{}", hhmm(s), hhmm(e)),
    }
}

fn describe_length(minutes: usize) -> String {
    match (minutes / 60, minutes % 60) {
        (h, 0) => format!("{h}h"),
        (0, m) => format!("{m}m"),
        (h, m) => format!("{h}h{m:02}m"),
    }
}

/// `mon–fri`, `sat,sun`, `fri–mon`, `mon,wed,fri`; empty for every day.
fn describe_days(mask: u8) -> String {
    if mask == ALL_DAYS || mask == 0 {
        return String::new();
    }
    let on = |d: usize| mask & (1 << (d % 7)) != 0;
    // Start right after a day that is off, so a run wrapping past Sunday stays whole.
    let Some(off) = (0..7).find(|d| !on(*d)) else {
        return String::new();
    };
    let mut parts = Vec::new();
    let mut d = off + 1;
    while d <= off + 7 {
        if !on(d) {
            d += 1;
            continue;
        }
        let first = d;
        while d < off + 7 && on(d + 1) {
            d += 1;
        }
        let (a, b) = (DAY_NAMES[first % 7], DAY_NAMES[d % 7]);
        parts.push(match d - first {
            0 => a.to_string(),
            1 => format!("{a},{b}"),
            _ => format!("{a}–{b}"),
        });
        d += 1;
    }
    parts.join(",")
}

/// The quiet stretches of a daily pattern, in order of their start.
fn quiet_runs(day: &[bool]) -> Vec<String> {
    let n = day.len();
    let mut runs = Vec::new();
    for start in (0..n).filter(|&i| !day[i] && day[(i + n - 1) % n]) {
        let mut end = start;
        while !day[end % n] {
            end += 1;
        }
        // Both ends fit in u16: a day has 1440 minutes.
        let (s, e) = ((start % n) as u16, (end % n) as u16);
        runs.push(format!("{}–{}", hhmm(s), hhmm(e)));
    }
    runs
}

/// Counts time that is inside active hours and outside unobserved spans;
/// time in a span the server's timeline slewed over counts
/// [`SLEW_RATE`] times, the real time it stands for (see `timeline`).
#[derive(Clone, Copy, Debug)]
pub struct ActiveClock<'a> {
    /// Active hours, or None when the check is always active.
    pub hours: Option<&'a ActiveHours>,
    /// Spans when no replica accepted pings: sorted, non-overlapping, half-open `[start, end)`.
    pub unobserved: &'a [(DateTime<Utc>, DateTime<Utc>)],
    /// Spans over which the timeline ran slow after a backward wall-clock
    /// step: sorted, non-overlapping, half-open.
    pub slewed: &'a [(DateTime<Utc>, DateTime<Utc>)],
}

/// Where `t` falls among sorted, non-overlapping spans: inside one, and the
/// next instant (> t) at which that changes.
fn in_spans(
    spans: &[(DateTime<Utc>, DateTime<Utc>)],
    t: DateTime<Utc>,
) -> (bool, Option<DateTime<Utc>>) {
    let i = spans.partition_point(|(_, end)| *end <= t);
    match spans.get(i) {
        Some((start, end)) if *start <= t => (true, Some(*end)),
        Some((start, _)) => (false, Some(*start)),
        None => (false, None),
    }
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl ActiveClock<'_> {
    /// Whether time at `t` counts.
    pub fn is_counting(&self, t: DateTime<Utc>) -> bool {
        self.segment_at(t).0 > 0
    }

    /// How many times time at `t` counts (0: not at all), and the next
    /// instant (> t) at which that may change.
    fn segment_at(&self, t: DateTime<Utc>) -> (i32, Option<DateTime<Utc>>) {
        let (unobserved, span_change) = in_spans(self.unobserved, t);
        let (slewed, slew_change) = in_spans(self.slewed, t);
        let (active, hours_change) = match self.hours {
            Some(h) => h.state_at(t),
            None => (true, None),
        };
        let change = earliest(earliest(span_change, slew_change), hours_change);
        let rate = match (active && !unobserved, slewed) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => SLEW_RATE,
        };
        (rate, change)
    }

    /// Active, observed time elapsed in [from, to) (zero if to <= from).
    pub fn elapsed(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
        let mut total = Duration::zero();
        let mut cur = from;
        while cur < to {
            let (rate, change) = self.segment_at(cur);
            let next = change.map_or(to, |c| c.min(to));
            total += (next - cur) * rate;
            cur = next;
        }
        total
    }

    /// The earliest instant t >= from such that elapsed(from, t) == d.
    ///
    /// A non-positive `d` gives `from`. None when no such instant lies within
    /// [`ADVANCE_BOUND_DAYS`] of `from` (e.g. active hours that are never active).
    pub fn advance(&self, from: DateTime<Utc>, d: Duration) -> Option<DateTime<Utc>> {
        let limit = from.checked_add_signed(Duration::days(ADVANCE_BOUND_DAYS))?;
        let mut remaining = d;
        let mut cur = from;
        while remaining > Duration::zero() {
            if cur > limit {
                return None;
            }
            let (rate, change) = self.segment_at(cur);
            if rate > 0 {
                match change {
                    Some(c) if (c - cur) * rate < remaining => remaining -= (c - cur) * rate,
                    _ => {
                        // Rounded up, so that elapsed(from, target) >= d.
                        let step = remaining / rate;
                        let step = if step * rate < remaining {
                            step + Duration::nanoseconds(1)
                        } else {
                            step
                        };
                        let target = cur.checked_add_signed(step)?;
                        return (target <= limit).then_some(target);
                    }
                }
            }
            cur = change?;
        }
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;
    use proptest::prelude::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn days(list: &[&str]) -> Vec<String> {
        list.iter().map(|d| d.to_string()).collect()
    }

    fn window(start: &str, end: &str, on: &[&str]) -> Window {
        Window::parse(start, end, &days(on)).unwrap()
    }

    /// A window as (start, end, days).
    type Spec<'a> = (&'a str, &'a str, &'a [&'a str]);

    fn hours(tz: &str, windows: &[Spec]) -> ActiveHours {
        let ws = windows.iter().map(|(s, e, d)| window(s, e, d)).collect();
        ActiveHours::new(ws, tz.parse().unwrap())
    }

    /// An instant from a local wall time (first occurrence).
    fn local(tz: &str, wall: &str) -> DateTime<Utc> {
        let zone: Tz = tz.parse().unwrap();
        let naive = NaiveDateTime::parse_from_str(wall, "%Y-%m-%d %H:%M:%S").unwrap();
        zone.from_local_datetime(&naive)
            .earliest()
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn parses_windows_and_days() {
        let w = window("18:00", "09:00", &[]);
        assert_eq!(
            (w.start_minute(), w.end_minute(), w.days()),
            (1080, 540, ALL_DAYS)
        );
        assert_eq!(window("9:05", "24:00", &[]).end_minute(), 0);
        let cases: &[(&[&str], u8)] = &[
            (&["mon"], 0b000_0001),
            (&["Monday", "SUN"], 0b100_0001),
            (&["mon-fri"], 0b001_1111),
            (&["fri-mon"], 0b111_0001),
            (&["sat–sun"], 0b110_0000),
            (&["mon,wed", "fri"], 0b001_0101),
            (&["thurs", "tues"], 0b000_1010),
            (&["wed-wed"], 0b000_0100),
        ];
        for (list, mask) in cases {
            assert_eq!(window("09:00", "17:00", list).days(), *mask, "{list:?}");
        }
    }

    #[test]
    fn rejects_bad_windows_naming_the_field() {
        let cases: &[(&str, &str, &[&str], &str)] = &[
            (
                "25:00",
                "09:00",
                &[],
                "start: \"25:00\" is not a time HH:MM",
            ),
            (
                "24:00",
                "09:00",
                &[],
                "start: \"24:00\" is not a time HH:MM",
            ),
            ("9", "09:00", &[], "start: \"9\" is not a time HH:MM"),
            ("09:60", "10:00", &[], "start: \"09:60\""),
            ("09:0", "10:00", &[], "start: \"09:0\""),
            ("-1:00", "10:00", &[], "start: \"-1:00\""),
            ("09:00", "24:01", &[], "end: \"24:01\" is not a time HH:MM"),
            ("09:00", "", &[], "end: \"\""),
            (
                "09:00",
                "17:00",
                &["mon", "funday"],
                "days[1]: \"funday\" is not a day",
            ),
            (
                "09:00",
                "17:00",
                &["mon-xyz"],
                "days[0]: \"mon-xyz\" is not a day",
            ),
            ("09:00", "17:00", &[""], "days[0]: \"\" is not a day"),
        ];
        for (start, end, list, want) in cases {
            let err = Window::parse(start, end, &days(list)).unwrap_err();
            assert!(err.starts_with(want), "{start} {end} {list:?}: {err}");
        }
        let specs = [
            ("25:00", "09:00", days(&[])),
            ("09:00", "17:00", days(&[])),
            ("09:00", "17:00", days(&["someday"])),
        ];
        let errors =
            parse_windows(specs.iter().map(|(s, e, d)| (*s, *e, d.as_slice()))).unwrap_err();
        assert_eq!(errors.len(), 2);
        assert!(errors[0].starts_with("active_hours[0].start: \"25:00\" is not a time HH:MM"));
        assert!(errors[1].starts_with("active_hours[2].days[0]: \"someday\""));
    }

    #[test]
    fn window_edges() {
        // 2025-06-06 is a Friday.
        let tz = "Asia/Shanghai";
        let evening = hours(tz, &[("18:00", "09:00", &[])]);
        let friday_night = hours(tz, &[("18:00", "09:00", &["fri"])]);
        let saturday_night = hours(tz, &[("18:00", "09:00", &["sat"])]);
        let office = hours(tz, &[("09:00", "17:00", &["mon-fri"])]);
        let weekend_wrap = hours(tz, &[("09:00", "17:00", &["fri-mon"])]);
        let full = hours(tz, &[("07:00", "07:00", &["wed"])]);
        let cases: &[(&ActiveHours, &str, bool)] = &[
            (&evening, "2025-06-06 17:59:59", false),
            (&evening, "2025-06-06 18:00:00", true),
            (&evening, "2025-06-06 23:59:59", true),
            (&evening, "2025-06-07 00:00:00", true),
            (&evening, "2025-06-07 08:59:59", true),
            (&evening, "2025-06-07 09:00:00", false),
            (&friday_night, "2025-06-06 23:00:00", true),
            (&friday_night, "2025-06-07 08:59:00", true),
            (&friday_night, "2025-06-07 09:00:00", false),
            (&friday_night, "2025-06-07 18:00:00", false),
            (&friday_night, "2025-06-06 08:00:00", false),
            (&saturday_night, "2025-06-06 23:00:00", false),
            (&saturday_night, "2025-06-07 08:59:00", false),
            (&saturday_night, "2025-06-07 23:00:00", true),
            (&saturday_night, "2025-06-08 08:59:00", true),
            (&office, "2025-06-06 09:00:00", true),
            (&office, "2025-06-06 16:59:59", true),
            (&office, "2025-06-06 17:00:00", false),
            (&office, "2025-06-07 12:00:00", false),
            (&office, "2025-06-09 12:00:00", true),
            (&weekend_wrap, "2025-06-08 12:00:00", true),
            (&weekend_wrap, "2025-06-09 12:00:00", true),
            (&weekend_wrap, "2025-06-10 12:00:00", false),
            (&weekend_wrap, "2025-06-06 12:00:00", true),
            // A 24h window from Wednesday 07:00.
            (&full, "2025-06-04 06:59:59", false),
            (&full, "2025-06-04 07:00:00", true),
            (&full, "2025-06-05 06:59:59", true),
            (&full, "2025-06-05 07:00:00", false),
        ];
        for (h, wall, want) in cases {
            assert_eq!(
                h.is_active(local(tz, wall)),
                *want,
                "{} at {wall}",
                h.describe()
            );
        }
        let t = local(tz, "2025-06-07 08:59:59") + Duration::milliseconds(999);
        assert!(evening.is_active(t));
    }

    #[test]
    fn window_boundaries_across_dst() {
        let ny = "America/New_York";
        // Spring forward 2025-03-09: 02:00 EST -> 03:00 EDT (07:00Z).
        let starts_in_gap = hours(ny, &[("02:30", "05:00", &[])]);
        assert_eq!(
            starts_in_gap.next_change(utc("2025-03-09T05:00:00Z")),
            Some(utc("2025-03-09T07:00:00Z"))
        );
        let ends_in_gap = hours(ny, &[("18:00", "02:30", &[])]);
        assert!(ends_in_gap.is_active(utc("2025-03-09T06:59:59Z")));
        assert_eq!(
            ends_in_gap.next_change(utc("2025-03-09T01:00:00Z")),
            Some(utc("2025-03-09T07:00:00Z"))
        );
        // Fall back 2025-11-02: 02:00 EDT -> 01:00 EST (06:00Z); 01:00-02:00 repeats.
        let ends_in_overlap = hours(ny, &[("18:00", "01:30", &[])]);
        assert_eq!(
            ends_in_overlap.next_change(utc("2025-11-02T01:00:00Z")),
            Some(utc("2025-11-02T05:30:00Z"))
        );
        // The second pass through 01:00-01:30 is quiet: the window ended at its first.
        assert!(!ends_in_overlap.is_active(utc("2025-11-02T06:15:00Z")));
        let starts_in_overlap = hours(ny, &[("01:15", "05:00", &[])]);
        assert_eq!(
            starts_in_overlap.next_change(utc("2025-11-02T04:00:00Z")),
            Some(utc("2025-11-02T05:15:00Z"))
        );
        assert_eq!(
            starts_in_overlap.next_change(utc("2025-11-02T05:15:00Z")),
            Some(utc("2025-11-02T10:00:00Z"))
        );
        assert!(starts_in_overlap.is_active(utc("2025-11-02T06:10:00Z")));
        // Lord Howe 2025-10-05: 02:00 -> 02:30 (+10:30 -> +11) at 15:30Z the day before.
        let lh = hours("Australia/Lord_Howe", &[("02:15", "03:00", &[])]);
        assert_eq!(
            lh.next_change(utc("2025-10-04T12:00:00Z")),
            Some(utc("2025-10-04T15:30:00Z"))
        );
        assert_eq!(
            lh.next_change(utc("2025-10-04T15:30:00Z")),
            Some(utc("2025-10-04T16:00:00Z"))
        );
        // London 2025-10-26: the 01:00-02:00 window runs 01:00 BST to 02:00 GMT, two hours.
        let london = hours("Europe/London", &[("01:00", "02:00", &[])]);
        let clock = ActiveClock {
            hours: Some(&london),
            unobserved: &[],
            slewed: &[],
        };
        assert_eq!(
            clock.elapsed(utc("2025-10-25T12:00:00Z"), utc("2025-10-26T12:00:00Z")),
            Duration::hours(2)
        );
        assert_eq!(
            clock.elapsed(utc("2025-03-29T12:00:00Z"), utc("2025-03-30T12:00:00Z")),
            Duration::zero()
        );
    }

    #[test]
    fn next_change_cases() {
        let tz = "Asia/Shanghai";
        let evening = hours(tz, &[("18:00", "09:00", &[])]);
        assert_eq!(
            evening.next_change(local(tz, "2025-06-06 08:50:00")),
            Some(local(tz, "2025-06-06 09:00:00"))
        );
        assert_eq!(
            evening.next_change(local(tz, "2025-06-06 09:00:00")),
            Some(local(tz, "2025-06-06 18:00:00"))
        );
        let office = hours(tz, &[("09:00", "17:00", &["mon-fri"])]);
        assert_eq!(
            office.next_change(local(tz, "2025-06-06 17:00:00")),
            Some(local(tz, "2025-06-09 09:00:00"))
        );
        // Touching and overlapping windows merge: no change at 12:00 or 13:00.
        let merged = hours(
            tz,
            &[
                ("08:00", "12:00", &[]),
                ("12:00", "14:00", &[]),
                ("13:00", "15:00", &[]),
            ],
        );
        assert_eq!(
            merged.next_change(local(tz, "2025-06-06 09:00:00")),
            Some(local(tz, "2025-06-06 15:00:00"))
        );
        // Never changes.
        assert_eq!(
            hours(tz, &[("00:00", "00:00", &[])]).next_change(utc("2025-06-06T00:00:00Z")),
            None
        );
        assert_eq!(
            hours("America/New_York", &[("05:00", "05:00", &[])])
                .next_change(utc("2025-03-08T00:00:00Z")),
            None
        );
        let never = ActiveHours::new(Vec::new(), Tz::UTC);
        assert!(!never.is_active(utc("2025-06-06T00:00:00Z")));
        assert_eq!(never.next_change(utc("2025-06-06T00:00:00Z")), None);
        // Active every day but Sunday: the change is 6 days away.
        let six = hours("UTC", &[("00:00", "00:00", &["mon-sat"])]);
        assert_eq!(
            six.next_change(utc("2025-06-02T00:00:00Z")),
            Some(utc("2025-06-08T00:00:00Z"))
        );
        assert_eq!(
            six.next_change(utc("2025-06-08T00:00:00Z")),
            Some(utc("2025-06-09T00:00:00Z"))
        );
    }

    #[test]
    fn a_quiet_spell_swallowed_by_a_gap_is_not_mistaken_for_always_active() {
        // Quiet only Sunday 02:00-03:00, which New York skips on 2025-03-09.
        let h = hours(
            "America/New_York",
            &[
                ("03:00", "02:00", &["sun"]),
                ("02:00", "02:00", &["mon-sat"]),
            ],
        );
        assert!(h.is_active(utc("2025-03-09T06:59:00Z")));
        assert_eq!(
            h.next_change(utc("2025-03-05T12:00:00Z")),
            Some(utc("2025-03-16T06:00:00Z"))
        );
    }

    #[test]
    fn describes_schedules_in_words() {
        let cases: &[(&str, &[Spec], &str)] = &[
            (
                "Asia/Shanghai",
                &[("18:00", "09:00", &[])],
                "active 18:00–09:00 Asia/Shanghai (15h/day), quiet 09:00–18:00",
            ),
            (
                "Europe/London",
                &[("09:00", "17:00", &["mon-fri"])],
                "active 09:00–17:00 mon–fri Europe/London (8h/day), quiet otherwise",
            ),
            (
                "UTC",
                &[("09:00", "12:00", &[]), ("13:00", "17:30", &[])],
                "active 09:00–12:00, 13:00–17:30 UTC (7h30m/day), quiet 12:00–13:00, 17:30–09:00",
            ),
            (
                "UTC",
                &[
                    ("09:00", "17:00", &["mon-fri"]),
                    ("10:00", "14:00", &["sat"]),
                ],
                "active 09:00–17:00 mon–fri, 10:00–14:00 sat UTC (44h/week), quiet otherwise",
            ),
            (
                "UTC",
                &[("22:00", "06:00", &["fri-mon"])],
                "active 22:00–06:00 fri–mon UTC (8h/day), quiet otherwise",
            ),
            (
                "UTC",
                &[("10:00", "10:30", &["sat,sun", "wed"])],
                "active 10:00–10:30 wed,sat,sun UTC (30m/day), quiet otherwise",
            ),
            (
                "UTC",
                &[("00:00", "24:00", &[])],
                "active 00:00–24:00 UTC (24h/day), never quiet",
            ),
            (
                "UTC",
                &[("06:00", "06:00", &["mon"])],
                "active 06:00–06:00 next day mon UTC (24h/day), quiet otherwise",
            ),
        ];
        for (tz, ws, want) in cases {
            assert_eq!(hours(tz, ws).describe(), *want);
        }
        assert_eq!(
            ActiveHours::new(vec![], Tz::UTC).describe(),
            "never active (UTC)"
        );
    }

    #[test]
    fn shortest_window_is_nominal_length() {
        let h = hours(
            "UTC",
            &[("18:00", "09:00", &[]), ("12:00", "12:45", &["sat"])],
        );
        assert_eq!(h.shortest_window(), std::time::Duration::from_secs(45 * 60));
        assert_eq!(
            hours("UTC", &[("07:00", "07:00", &[])])
                .shortest_window()
                .as_secs(),
            86_400
        );
        assert_eq!(
            ActiveHours::new(vec![], Tz::UTC).shortest_window(),
            std::time::Duration::ZERO
        );
    }

    #[test]
    fn clock_pauses_over_quiet_and_unobserved_time() {
        let tz = "Asia/Shanghai";
        let evening = hours(tz, &[("18:00", "09:00", &[])]);
        let clock = ActiveClock {
            hours: Some(&evening),
            unobserved: &[],
            slewed: &[],
        };
        // The example from the brief: 10 minutes before 09:00, 10 after 18:00.
        let from = local(tz, "2025-06-06 08:50:00");
        assert_eq!(
            clock.advance(from, Duration::minutes(20)),
            Some(local(tz, "2025-06-06 18:10:00"))
        );
        // Exactly the rest of the window lands on its end, not on the next start.
        assert_eq!(
            clock.advance(from, Duration::minutes(10)),
            Some(local(tz, "2025-06-06 09:00:00"))
        );
        assert_eq!(clock.advance(from, Duration::zero()), Some(from));
        assert_eq!(clock.advance(from, Duration::minutes(-5)), Some(from));
        assert_eq!(
            clock.elapsed(from, local(tz, "2025-06-06 18:10:00")),
            Duration::minutes(20)
        );
        assert_eq!(
            clock.elapsed(local(tz, "2025-06-06 18:10:00"), from),
            Duration::zero()
        );
        // Three days of a 15h/day window.
        assert_eq!(
            clock.elapsed(
                local(tz, "2025-06-06 12:00:00"),
                local(tz, "2025-06-09 12:00:00")
            ),
            Duration::hours(45)
        );

        let outage = [(utc("2025-06-06T11:30:00Z"), utc("2025-06-06T12:00:00Z"))];
        let both = ActiveClock {
            hours: Some(&evening),
            unobserved: &outage,
            slewed: &[],
        };
        // 19:00 local = 11:00Z; 30 minutes count, 30 are unobserved, then 30 more.
        assert_eq!(
            both.advance(utc("2025-06-06T11:00:00Z"), Duration::hours(1)),
            Some(utc("2025-06-06T12:30:00Z"))
        );
        let plain = ActiveClock {
            hours: None,
            unobserved: &[],
            slewed: &[],
        };
        let t = utc("2025-06-06T11:00:00.123Z");
        assert_eq!(
            plain.advance(t, Duration::seconds(90)),
            Some(t + Duration::seconds(90))
        );
        assert_eq!(plain.elapsed(t, t + Duration::days(3)), Duration::days(3));
        let outages_only = ActiveClock {
            hours: None,
            unobserved: &outage,
            slewed: &[],
        };
        assert_eq!(
            outages_only.elapsed(utc("2025-06-06T00:00:00Z"), utc("2025-06-07T00:00:00Z")),
            Duration::minutes(23 * 60 + 30)
        );
        // Starting inside an outage waits for its end.
        assert_eq!(
            outages_only.advance(utc("2025-06-06T11:45:00Z"), Duration::minutes(1)),
            Some(utc("2025-06-06T12:01:00Z"))
        );
    }

    #[test]
    fn advance_gives_up_when_time_never_counts() {
        let never = ActiveHours::new(vec![], Tz::UTC);
        let clock = ActiveClock {
            hours: Some(&never),
            unobserved: &[],
            slewed: &[],
        };
        assert_eq!(
            clock.advance(utc("2025-01-01T00:00:00Z"), Duration::seconds(1)),
            None
        );
        let outage = [(utc("2025-01-01T00:00:00Z"), DateTime::<Utc>::MAX_UTC)];
        let clock = ActiveClock {
            hours: None,
            unobserved: &outage,
            slewed: &[],
        };
        assert_eq!(
            clock.advance(utc("2025-01-01T00:00:00Z"), Duration::seconds(1)),
            None
        );
        let plain = ActiveClock {
            hours: None,
            unobserved: &[],
            slewed: &[],
        };
        assert_eq!(
            plain.advance(DateTime::<Utc>::MAX_UTC, Duration::seconds(1)),
            None
        );
        assert_eq!(
            plain.advance(utc("2025-01-01T00:00:00Z"), Duration::days(365 * 200)),
            None
        );
        // One minute a week: a day of active time is 1440 weeks, well inside the bound.
        let tiny = hours("UTC", &[("12:00", "12:01", &["wed"])]);
        let clock = ActiveClock {
            hours: Some(&tiny),
            unobserved: &[],
            slewed: &[],
        };
        let from = utc("2025-01-01T00:00:00Z");
        let at = clock.advance(from, Duration::days(1)).unwrap();
        assert_eq!(clock.elapsed(from, at), Duration::days(1));
    }

    // ---- property tests ----

    const ZONES: [&str; 5] = [
        "UTC",
        "Asia/Shanghai",
        "America/New_York",
        "Europe/London",
        "Australia/Lord_Howe",
    ];

    fn arb_window() -> impl Strategy<Value = Window> {
        let minute = prop_oneof![(0u16..96).prop_map(|q| q * 15), 0u16..MINUTES_PER_DAY,];
        (
            minute.clone(),
            minute,
            prop_oneof![Just(ALL_DAYS), 1u8..=ALL_DAYS],
        )
            .prop_map(|(start, end, days)| Window { start, end, days })
    }

    fn arb_hours() -> impl Strategy<Value = ActiveHours> {
        (
            prop::collection::vec(arb_window(), 1..4),
            prop::sample::select(&ZONES[..]),
        )
            .prop_map(|(ws, tz)| ActiveHours::new(ws, tz.parse().unwrap()))
    }

    /// Around the 2025 transitions of the zones above.
    fn arb_instant() -> impl Strategy<Value = DateTime<Utc>> {
        (
            prop::sample::select(
                &[
                    "2025-03-09T07:00:00Z",
                    "2025-11-02T06:00:00Z",
                    "2025-03-30T01:00:00Z",
                    "2025-10-26T01:00:00Z",
                    "2025-10-04T15:30:00Z",
                    "2025-04-05T15:00:00Z",
                    "2025-07-01T00:00:00Z",
                ][..],
            ),
            -10_000i64..10_000,
            prop_oneof![Just(0i64), 0i64..60_000],
        )
            .prop_map(|(base, minutes, ms)| {
                utc(base) + Duration::minutes(minutes) + Duration::milliseconds(ms)
            })
    }

    /// Sorted, disjoint spans near the instants above.
    fn arb_unobserved() -> impl Strategy<Value = Vec<(DateTime<Utc>, DateTime<Utc>)>> {
        (
            arb_instant(),
            prop::collection::vec((0i64..3000, 1i64..3000), 0..4),
        )
            .prop_map(|(base, gaps)| {
                let mut t = base - Duration::days(3);
                gaps.into_iter()
                    .map(|(gap, len)| {
                        let start = t + Duration::minutes(gap);
                        t = start + Duration::minutes(len);
                        (start, t)
                    })
                    .collect()
            })
    }

    fn arb_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (0i64..4 * 1440).prop_map(Duration::minutes),
            (1i64..400_000_000).prop_map(Duration::milliseconds),
        ]
    }

    /// Whether a window covers wall time `wall`, read straight off the definition; valid
    /// away from DST transitions.
    fn naive_active(h: &ActiveHours, wall: NaiveDateTime) -> bool {
        h.windows.iter().any(|w| {
            [wall.date(), wall.date().pred_opt().unwrap()]
                .iter()
                .any(|d| {
                    let start =
                        d.and_hms_opt(0, 0, 0).unwrap() + Duration::minutes(i64::from(w.start));
                    let end = start + Duration::minutes(i64::from(w.len_minutes()));
                    w.starts_on(d.weekday()) && start <= wall && wall < end
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn advance_then_elapsed_round_trips(
            h in arb_hours(),
            unobserved in arb_unobserved(),
            from in arb_instant(),
            d in arb_duration(),
        ) {
            let clock = ActiveClock { hours: Some(&h), unobserved: &unobserved, slewed: &[] };
            let at = clock.advance(from, d);
            let Some(at) = at else {
                // Only windows that never open (e.g. lost in DST gaps) may give up.
                prop_assert!(clock.elapsed(from, from + Duration::days(30)).is_zero(), "{}", h.describe());
                return Ok(());
            };
            prop_assert!(at >= from);
            prop_assert_eq!(clock.elapsed(from, at), d);
            if d > Duration::zero() {
                // Earliest, and never inside quiet or unobserved time except where it begins:
                // the instant just before the result counts.
                let before = at - Duration::nanoseconds(1);
                prop_assert!(clock.is_counting(before), "{} at {}", h.describe(), at);
                prop_assert_eq!(clock.elapsed(from, before), d - Duration::nanoseconds(1));
            }
        }

        /// Slewed spans (SPEC §12) count SLEW_RATE times, under quiet and
        /// unobserved time as anywhere else; advance stays the inverse of
        /// elapsed, to the nanosecond its division rounds up.
        #[test]
        fn slewed_time_counts_at_the_slew_rate(
            h in prop::option::of(arb_hours()),
            unobserved in arb_unobserved(),
            slewed in arb_unobserved(),
            a in arb_instant(),
            x in arb_duration(),
            y in arb_duration(),
        ) {
            let clock = ActiveClock { hours: h.as_ref(), unobserved: &unobserved, slewed: &slewed };
            let (b, c) = (a + x, a + x + y);
            prop_assert_eq!(clock.elapsed(a, b) + clock.elapsed(b, c), clock.elapsed(a, c));
            if let Some(at) = clock.advance(a, x) {
                let got = clock.elapsed(a, at);
                prop_assert!(got >= x && got <= x + Duration::nanoseconds(1), "{} vs {}", got, x);
                if x > Duration::zero() {
                    prop_assert!(clock.elapsed(a, at - Duration::nanoseconds(1)) < x);
                }
            }
            let plain = ActiveClock { hours: None, unobserved: &[], slewed: &slewed };
            let extra: Duration = slewed.iter()
                .map(|(s, e)| ((*e).min(c) - (*s).max(a)).max(Duration::zero()))
                .sum();
            prop_assert_eq!(plain.elapsed(a, c), (c - a) + extra * (SLEW_RATE - 1));
        }

        #[test]
        fn elapsed_is_additive_monotone_and_bounded_by_wall_time(
            h in prop::option::of(arb_hours()),
            unobserved in arb_unobserved(),
            a in arb_instant(),
            x in arb_duration(),
            y in arb_duration(),
        ) {
            let clock = ActiveClock { hours: h.as_ref(), unobserved: &unobserved, slewed: &[] };
            let (b, c) = (a + x, a + x + y);
            let ab = clock.elapsed(a, b);
            let bc = clock.elapsed(b, c);
            let ac = clock.elapsed(a, c);
            prop_assert_eq!(ab + bc, ac);
            prop_assert!(ab <= ac);
            prop_assert!(ab >= Duration::zero() && ab <= b - a);
            prop_assert!(ac <= c - a);
            prop_assert!(clock.elapsed(c, a).is_zero());
            if h.is_none() {
                let lost: Duration = unobserved.iter()
                    .map(|(s, e)| ((*e).min(c) - (*s).max(a)).max(Duration::zero()))
                    .sum();
                prop_assert_eq!(ac, (c - a) - lost);
            }
        }

        #[test]
        fn state_is_constant_until_next_change_and_flips_there(
            h in arb_hours(),
            t in arb_instant(),
            samples in prop::collection::vec(0.0f64..1.0, 8),
        ) {
            let state = h.is_active(t);
            match h.next_change(t) {
                Some(n) => {
                    prop_assert!(n > t);
                    prop_assert_ne!(h.is_active(n), state, "{} at {}", h.describe(), n);
                    prop_assert_eq!(h.is_active(n - Duration::nanoseconds(1)), state);
                    let span = (n - t).num_milliseconds() as f64;
                    for f in samples {
                        let p = t + Duration::milliseconds((span * f) as i64);
                        prop_assert_eq!(h.is_active(p), state, "{} at {}", h.describe(), p);
                    }
                }
                None => {
                    for days in [1, 3, 7, 15, 40] {
                        prop_assert_eq!(h.is_active(t + Duration::days(days)), state);
                    }
                }
            }
        }

        #[test]
        fn is_active_matches_the_wall_clock_definition_away_from_transitions(
            h in arb_hours(),
            t in arb_instant(),
        ) {
            let offset = |x: DateTime<Utc>| x.with_timezone(&h.tz).offset().fix();
            prop_assume!(offset(t - Duration::days(2)) == offset(t + Duration::days(2)));
            let wall = t.with_timezone(&h.tz).naive_local();
            prop_assert_eq!(h.is_active(t), naive_active(&h, wall), "{} at {}", h.describe(), wall);
        }
    }

    #[test]
    fn minute_granularity_sanity() {
        let h = hours("UTC", &[("12:00", "12:01", &[])]);
        let t = utc("2025-06-06T12:00:59.999Z");
        assert!(h.is_active(t));
        assert_eq!(h.next_change(t).map(|n| n.minute()), Some(1));
    }
}
