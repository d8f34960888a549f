//! A check's effective schedule in words, for `overdue config check` (SPEC §3.2, §9).
//!
//! Pure: takes a validated [`CheckSpec`] and `now`, returns the lines to print and the
//! warnings about configurations that are valid but probably not what was meant.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;

use crate::domain::active_hours::{parse_windows, ActiveHours, Window};
use crate::domain::check::{CheckSpec, Methods, Schedule};
use crate::domain::schedule::{parse_tz, CronSchedule};

const MINUTES_PER_DAY: usize = 1440;
const MINUTES_PER_WEEK: usize = 7 * MINUTES_PER_DAY;
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// How far ahead a cron check's fire times are compared with its active hours: at least
/// a week (a weekly window pattern repeats) and at least this many fire times.
const FIRE_SAMPLE_DAYS: i64 = 8;
const FIRE_SAMPLE_COUNT: usize = 10;
/// Bound on the fire-time probes; each probe moves to a later fire or window opening.
const MAX_PROBES: usize = 10_000;

/// What `config check` prints about one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explanation {
    /// The schedule sentence, then one indented line per non-default rule.
    pub lines: Vec<String>,
    /// Valid but suspicious settings, without the `warning:` prefix.
    pub warnings: Vec<String>,
}

/// Describes `spec`'s schedule, grace, active hours and other rules as of `now`.
pub fn explain(spec: &CheckSpec, now: DateTime<Utc>) -> Explanation {
    let label = check_label(spec);
    let mut out = Explanation::default();
    let hours = active_hours(spec);
    let of_active = if hours.is_some() {
        " of active time"
    } else {
        ""
    };

    // The interval the window warning compares against, and its wording.
    let mut interval: Option<(Duration, String)> = None;
    let mut cron_schedule = None;
    let mut head = match &spec.schedule {
        Schedule::Interval(every) => {
            let grace = spec.grace.unwrap_or(*every);
            interval = Some((
                *every,
                format!("its interval of {}", duration_words(*every)),
            ));
            format!(
                "{label}: every {}, grace {} (down after {}{of_active} without a success)",
                duration_words(*every),
                duration_words(grace),
                duration_words(*every + grace),
            )
        }
        Schedule::Cron(expr) => match CronSchedule::parse(expr, &spec.tz) {
            Err(e) => format!("{label}: cron {expr:?} in {} ({e})", spec.tz),
            Ok(cron) => {
                let first = cron.next_after(now);
                let second = first.and_then(|f| cron.next_after(f));
                if let (Some(a), Some(b)) = (first, second) {
                    // A job that runs once a day or less often is expected at its
                    // fire times, which a shorter window can rightly cover; only
                    // sub-daily schedules are compared with the window length.
                    if let Ok(gap) = (b - a).to_std() {
                        if gap >= Duration::from_secs(86_400) {
                            // Leave `interval` unset: no short-window warning.
                        } else {
                            interval = Some((
                                gap,
                                format!(
                                    "the {} between its next two fire times",
                                    duration_words(gap)
                                ),
                            ));
                        }
                    }
                }
                let kind = if cron.is_fixed_time() {
                    "fixed time"
                } else {
                    "real time"
                };
                let next = match first {
                    Some(t) => format!("next {}", instant_in(t, cron.tz())),
                    None => "no fire time within 100 years".to_string(),
                };
                let grace = match spec.grace {
                    None => "grace one interval (down after two missed fire times)".to_string(),
                    Some(g) => format!(
                        "grace {} (down {}{of_active} after a missed fire time)",
                        duration_words(g),
                        duration_words(g)
                    ),
                };
                cron_schedule = Some(cron);
                format!(
                    "{label}: cron {expr:?} in {} ({kind}: {next}), {grace}",
                    spec.tz
                )
            }
        },
    };
    if let Some(hours) = &hours {
        head.push_str("; ");
        head.push_str(&hours.describe());
    }
    out.lines.push(head);
    out.lines
        .extend(rules(spec, of_active).into_iter().map(|r| format!("  {r}")));

    let Some(hours) = hours else {
        return out;
    };
    if let (Some((every, wording)), Some((start, minutes))) =
        (interval, shortest_spell(hours.windows()))
    {
        let spell = Duration::from_secs(minutes as u64 * 60);
        if spell < every {
            out.warnings.push(format!(
                "{label}: active {} lasts {}, shorter than {wording}; check that start and end \
                 are not swapped",
                describe_spell(hours.windows(), start, minutes),
                duration_words(spell),
            ));
        }
    }
    if let Some(cron) = &cron_schedule {
        if let Some((false, until)) = fires_inside(cron, &hours, now) {
            out.warnings.push(format!(
                "{label}: none of its fire times until {} falls inside its active hours, so \
                 the job would only ever run while the check is quiet",
                until.with_timezone(&hours.tz()).format("%Y-%m-%d")
            ));
        }
    }
    out
}

/// The name a check is shown under: its slug, else its name, else its
/// unique key (never its uuid, a capability).
pub fn check_label(spec: &CheckSpec) -> String {
    match (&spec.slug, spec.name.is_empty(), spec.uuid) {
        (Some(slug), _, _) => slug.clone(),
        (None, false, _) => spec.name.clone(),
        (None, true, Some(uuid)) => super::name::unique_key(uuid),
        (None, true, None) => "unnamed check".to_string(),
    }
}

/// A duration as the config spells it, compactly: `1m`, `1h30m`, `2d12h`, `1s500ms`.
pub fn duration_words(d: Duration) -> String {
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, name) in [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")] {
        if secs >= unit {
            out.push_str(&format!("{}{name}", secs / unit));
            secs %= unit;
        }
    }
    let ms = d.subsec_millis();
    if ms > 0 {
        out.push_str(&format!("{ms}ms"));
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// An instant as RFC 3339 with the zone's offset at that instant (`+00:00` for UTC).
pub fn instant_in(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .to_rfc3339_opts(SecondsFormat::Secs, false)
}

fn active_hours(spec: &CheckSpec) -> Option<ActiveHours> {
    if spec.active_hours.is_empty() {
        return None;
    }
    let tz = parse_tz(&spec.tz).ok()?;
    let windows = parse_windows(
        spec.active_hours
            .iter()
            .map(|w| (w.start.as_str(), w.end.as_str(), w.days.as_slice())),
    )
    .ok()?;
    Some(ActiveHours::new(windows, tz))
}

/// The non-default rules besides the schedule, one phrase each.
fn rules(spec: &CheckSpec, of_active: &str) -> Vec<String> {
    let mut rules = Vec::new();
    if let Some(d) = spec.zero_items_after {
        rules.push(format!(
            "stalled (zero_items) when successes report items=0 for {}{of_active}",
            duration_words(d)
        ));
    }
    if let Some(n) = spec.zero_items_runs {
        rules.push(format!(
            "stalled (zero_items) after {n} consecutive {} reporting items=0",
            plural(n, "success", "successes")
        ));
    }
    if let (Some(n), Some(k)) = (spec.min_items, spec.min_items_runs) {
        let items = if n == 1 { "item" } else { "items" };
        rules.push(if k == 1 {
            format!("stalled (low_items) when a success reports fewer than {n} {items} (min_items)")
        } else {
            format!(
                "stalled (low_items) after {k} successes in a row each reporting fewer than \
                 {n} {items} (min_items)"
            )
        });
    }
    if let (Some(ppm), Some(k)) = (spec.items_below_usual_ppm, spec.min_items_runs) {
        let weeks = spec.effective_items_window().as_secs() / (7 * 86_400);
        let share = format!("{}%", f64::from(ppm) / 1e4);
        let usual = format!(
            "{share} of the usual count for its hour of the week in {} (the median of the \
             last {weeks} weeks, judged once 3 of them have that hour) (items_below_usual)",
            spec.tz
        );
        rules.push(if k == 1 {
            format!("stalled (below_usual) when a success reports less than {usual}")
        } else {
            format!("stalled (below_usual) after {k} successes in a row each reporting less than {usual}")
        });
    }
    if let Some(d) = spec.min_runtime {
        rules.push(format!(
            "a success that finishes in less than {} counts as a failure (min_runtime)",
            duration_words(d)
        ));
    }
    if let Some(d) = spec.max_runtime {
        rules.push(format!(
            "a run open longer than {}{of_active} fails (max_runtime)",
            duration_words(d)
        ));
    }
    if spec.failure_threshold > 1 {
        rules.push(format!(
            "down after {} consecutive failures",
            spec.failure_threshold
        ));
    }
    if spec.recovery_threshold > 1 {
        rules.push(format!(
            "up again after {} consecutive successes",
            spec.recovery_threshold
        ));
    }
    if spec.max_instances > 1 {
        rules.push(format!(
            "up to {} runs may hold the job guard's lock at once (max_instances)",
            spec.max_instances
        ));
    }
    if spec.alert_on_duplicate {
        rules.push(format!(
            "alerts when a slot runs more than {} (OverdueDuplicateRun)",
            match spec.max_instances {
                1 => "once".to_string(),
                n => format!("{n} times"),
            }
        ));
    }
    if spec.alert_on_overlap {
        rules.push(if spec.max_instances > 1 {
            format!("alerts when more than {} runs overlap", spec.max_instances)
        } else {
            "alerts when runs overlap".to_string()
        });
    }
    if spec.manual_resume {
        rules.push("stays paused when pinged until resumed by hand".to_string());
    }
    if spec.methods == Methods::Post {
        rules.push("only POST requests count as pings".to_string());
    }
    if !spec.depends_on.is_empty() {
        rules.push(format!(
            "its alerts are held while {} is down or stalled (depends_on)",
            or_list(&spec.depends_on)
        ));
    }
    rules
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn plural<'a>(n: u32, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// Which minutes of a week (from Monday 00:00, nominal: DST aside) are active.
fn week_minutes(windows: &[Window]) -> Vec<bool> {
    let mut week = vec![false; MINUTES_PER_WEEK];
    for w in windows {
        let len = (w.duration().as_secs() / 60) as usize;
        for day in (0..7).filter(|d| w.days() & (1 << d) != 0) {
            let start = day * MINUTES_PER_DAY + usize::from(w.start_minute());
            for m in 0..len {
                week[(start + m) % MINUTES_PER_WEEK] = true;
            }
        }
    }
    week
}

/// The shortest stretch of uninterrupted active time in a week, as (start minute of the
/// week, length in minutes). Adjacent or overlapping windows count as one stretch, so
/// `09:00–12:00` and `12:00–18:00` make 9 hours. `None` when always active (or never).
fn shortest_spell(windows: &[Window]) -> Option<(usize, usize)> {
    let week = week_minutes(windows);
    // Start scanning right after a quiet minute so no stretch is cut in two.
    let quiet = week.iter().position(|active| !active)?;
    let mut best: Option<(usize, usize)> = None;
    let mut i = 1;
    while i <= MINUTES_PER_WEEK {
        let at = (quiet + i) % MINUTES_PER_WEEK;
        if !week[at] {
            i += 1;
            continue;
        }
        let mut len = 0;
        while i <= MINUTES_PER_WEEK && week[(quiet + i) % MINUTES_PER_WEEK] {
            len += 1;
            i += 1;
        }
        if best.is_none_or(|(_, shortest)| len < shortest) {
            best = Some((at, len));
        }
    }
    best
}

/// `18:00–09:00` when every window starts on the same days (the schedule line names them)
/// and the stretch is shorter than a day; `fri 18:00–sat 09:00` or `sat 10:00–12:00` otherwise.
fn describe_spell(windows: &[Window], start: usize, minutes: usize) -> String {
    let end = (start + minutes) % MINUTES_PER_WEEK;
    let hhmm = |m: usize| {
        let m = m % MINUTES_PER_DAY;
        format!("{:02}:{:02}", m / 60, m % 60)
    };
    let same_days = windows
        .windows(2)
        .all(|pair| pair[0].days() == pair[1].days());
    if same_days && minutes < MINUTES_PER_DAY {
        return format!("{}–{}", hhmm(start), hhmm(end));
    }
    let day = |m: usize| DAY_NAMES[m / MINUTES_PER_DAY];
    let same_day = start / MINUTES_PER_DAY == end / MINUTES_PER_DAY && minutes < MINUTES_PER_DAY;
    let ends_at_midnight = end.is_multiple_of(MINUTES_PER_DAY) && minutes <= MINUTES_PER_DAY;
    if same_day || ends_at_midnight {
        let end = if ends_at_midnight {
            "24:00".to_string()
        } else {
            hhmm(end)
        };
        format!("{} {}–{end}", day(start), hhmm(start))
    } else {
        format!("{} {}–{} {}", day(start), hhmm(start), day(end), hhmm(end))
    }
}

/// Whether some fire time between `now` and the sample's end falls inside active hours,
/// and that end; `None` when the check is inconclusive (the probe bound was reached).
fn fires_inside(
    cron: &CronSchedule,
    hours: &ActiveHours,
    now: DateTime<Utc>,
) -> Option<(bool, DateTime<Utc>)> {
    let mut until = now.checked_add_signed(chrono::Duration::days(FIRE_SAMPLE_DAYS))?;
    let mut t = now;
    for _ in 0..FIRE_SAMPLE_COUNT {
        match cron.next_after(t) {
            Some(next) => t = next,
            None => break,
        }
    }
    until = until.max(t);

    let mut t = now;
    for _ in 0..MAX_PROBES {
        let Some(fire) = cron.next_after(t).filter(|f| *f <= until) else {
            return Some((false, until));
        };
        if hours.is_active(fire) {
            return Some((true, until));
        }
        // Fires before the next window opens are quiet too: skip to just before it opens.
        match hours.next_change(fire) {
            Some(opens) => t = opens - chrono::Duration::nanoseconds(1),
            None => return Some((false, until)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::CheckInput;

    fn spec(json: serde_json::Value) -> CheckSpec {
        let input: CheckInput = serde_json::from_value(json).unwrap();
        CheckSpec::from_input(input).unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn now() -> DateTime<Utc> {
        utc("2026-11-30T12:00:00Z")
    }

    #[test]
    fn interval_check_with_the_spec_window() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "hot-topics-bilibili", "interval": "1m", "tz": "Asia/Shanghai",
                "active_hours": [{"start": "18:00", "end": "09:00"}],
            })),
            now(),
        );
        assert_eq!(
            e.lines,
            [
                "hot-topics-bilibili: every 1m, grace 1m (down after 2m of active time without a \
                 success); active 18:00–09:00 Asia/Shanghai (15h/day), quiet 09:00–18:00"
            ]
        );
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    }

    #[test]
    fn interval_check_without_windows_and_explicit_grace() {
        let e = explain(
            &spec(serde_json::json!({"name": "Backups", "interval": "1d", "grace": "90m"})),
            now(),
        );
        assert_eq!(
            e.lines,
            ["Backups: every 1d, grace 1h30m (down after 1d1h30m without a success)"]
        );
        assert_eq!(
            explain(&spec(serde_json::json!({})), now()).lines,
            ["unnamed check: every 1d, grace 1d (down after 2d without a success)"]
        );
    }

    #[test]
    fn cron_check_names_its_next_fire_time_in_its_zone() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "nightly", "cron": "0 3 * * *", "tz": "Europe/London",
            })),
            now(),
        );
        assert_eq!(
            e.lines,
            [
                "nightly: cron \"0 3 * * *\" in Europe/London (fixed time: next \
                 2026-12-01T03:00:00+00:00), grace one interval (down after two missed fire times)"
            ]
        );
        let e = explain(
            &spec(serde_json::json!({
                "slug": "poller", "cron": "*/15 * * * *", "tz": "America/New_York",
                "grace": "5m",
            })),
            now(),
        );
        assert_eq!(
            e.lines,
            [
                "poller: cron \"*/15 * * * *\" in America/New_York (real time: next \
                 2026-11-30T07:15:00-05:00), grace 5m (down 5m after a missed fire time)"
            ]
        );
        assert!(e.warnings.is_empty());
    }

    #[test]
    fn non_default_rules_get_a_line_each() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "etl", "interval": "1h", "zero_items_after": "2h", "zero_items_runs": 3,
                "max_runtime": "20m", "failure_threshold": 2, "recovery_threshold": 3,
                "alert_on_overlap": true, "manual_resume": true, "methods": "POST",
            })),
            now(),
        );
        assert_eq!(
            e.lines[1..],
            [
                "  stalled (zero_items) when successes report items=0 for 2h",
                "  stalled (zero_items) after 3 consecutive successes reporting items=0",
                "  a run open longer than 20m fails (max_runtime)",
                "  down after 2 consecutive failures",
                "  up again after 3 consecutive successes",
                "  alerts when runs overlap",
                "  stays paused when pinged until resumed by hand",
                "  only POST requests count as pings",
            ]
        );
    }

    #[test]
    fn item_floors_and_min_runtime_are_explained() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "etl", "interval": "1h", "min_items": 10, "min_items_runs": 3,
                "min_runtime": "5s",
            })),
            now(),
        );
        assert_eq!(
            e.lines[1..],
            [
                "  stalled (low_items) after 3 successes in a row each reporting fewer than 10 items (min_items)",
                "  a success that finishes in less than 5s counts as a failure (min_runtime)",
            ]
        );
        let e = explain(
            &spec(serde_json::json!({"slug": "etl", "interval": "1h", "min_items": 1})),
            now(),
        );
        assert_eq!(
            e.lines[1..],
            ["  stalled (low_items) when a success reports fewer than 1 item (min_items)"]
        );
    }

    #[test]
    fn the_usual_count_rule_is_explained() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "poller", "interval": "1h", "tz": "Europe/Berlin",
                "items_below_usual": 0.25, "items_window": "6w", "min_items_runs": 2,
            })),
            now(),
        );
        assert_eq!(
            e.lines[1..],
            ["  stalled (below_usual) after 2 successes in a row each reporting less than 25% of \
              the usual count for its hour of the week in Europe/Berlin (the median of the last \
              6 weeks, judged once 3 of them have that hour) (items_below_usual)"]
        );
        let e = explain(
            &spec(serde_json::json!({"slug": "p", "interval": "1h", "items_below_usual": 0.125})),
            now(),
        );
        assert_eq!(
            e.lines[1..],
            ["  stalled (below_usual) when a success reports less than 12.5% of the usual count \
              for its hour of the week in UTC (the median of the last 4 weeks, judged once 3 of \
              them have that hour) (items_below_usual)"]
        );
    }

    #[test]
    fn lock_seats_are_explained_with_the_overlaps_they_allow() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "crawl", "interval": "1h", "max_instances": 3, "alert_on_overlap": true,
            })),
            now(),
        );
        assert_eq!(
            e.lines[1..],
            [
                "  up to 3 runs may hold the job guard's lock at once (max_instances)",
                "  alerts when more than 3 runs overlap",
            ]
        );
    }

    #[test]
    fn dependencies_are_explained() {
        let line = |deps: serde_json::Value| {
            explain(
                &spec(serde_json::json!({"slug": "app", "depends_on": deps})),
                now(),
            )
            .lines[1]
                .clone()
        };
        assert_eq!(
            line(serde_json::json!(["nightly-db", "dns"])),
            "  its alerts are held while nightly-db or dns is down or stalled (depends_on)"
        );
        assert_eq!(
            line(serde_json::json!(["db"])),
            "  its alerts are held while db is down or stalled (depends_on)"
        );
        assert_eq!(
            line(serde_json::json!(["a", "b", "c"])),
            "  its alerts are held while a, b or c is down or stalled (depends_on)"
        );
        assert_eq!(
            explain(&spec(serde_json::json!({"slug": "app"})), now())
                .lines
                .len(),
            1
        );
    }

    #[test]
    fn warns_when_a_window_is_shorter_than_the_interval() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "report", "interval": "2h",
                "active_hours": [{"start": "09:00", "end": "10:00"}],
            })),
            now(),
        );
        assert_eq!(
            e.warnings,
            [
                "report: active 09:00–10:00 lasts 1h, shorter than its interval of 2h; check \
                 that start and end are not swapped"
            ]
        );
        // A weekly pattern names the day of the short stretch.
        let e = explain(
            &spec(serde_json::json!({
                "slug": "weekly", "interval": "6h",
                "active_hours": [
                    {"start": "08:00", "end": "20:00", "days": ["mon-fri"]},
                    {"start": "10:00", "end": "12:00", "days": ["sat"]},
                ],
            })),
            now(),
        );
        assert_eq!(e.warnings.len(), 1, "{:?}", e.warnings);
        assert!(e.warnings[0].contains("active sat 10:00–12:00 lasts 2h"));
    }

    #[test]
    fn adjacent_windows_count_as_one_stretch() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "split", "interval": "4h",
                "active_hours": [
                    {"start": "09:00", "end": "12:00"},
                    {"start": "12:00", "end": "18:00"},
                ],
            })),
            now(),
        );
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        // Always active: nothing to compare.
        let e = explain(
            &spec(serde_json::json!({
                "slug": "all", "interval": "2d",
                "active_hours": [{"start": "00:00", "end": "24:00"}],
            })),
            now(),
        );
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    }

    #[test]
    fn cron_interval_is_the_gap_between_the_next_two_fires() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "sync", "cron": "30 */3 * * *",
                "active_hours": [{"start": "02:00", "end": "04:00"}],
            })),
            now(),
        );
        assert_eq!(
            e.warnings,
            [
                "sync: active 02:00–04:00 lasts 2h, shorter than the 3h between its next two \
                 fire times; check that start and end are not swapped"
            ]
        );
    }

    #[test]
    fn daily_cron_jobs_may_have_short_windows() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "nightly", "cron": "0 3 * * *",
                "active_hours": [{"start": "02:00", "end": "04:00"}],
            })),
            now(),
        );
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    }

    #[test]
    fn warns_when_no_fire_time_falls_inside_the_windows() {
        let e = explain(
            &spec(serde_json::json!({
                "slug": "noon", "cron": "0 12 * * *", "tz": "Asia/Shanghai",
                "active_hours": [{"start": "18:00", "end": "09:00"}],
            })),
            now(),
        );
        assert!(
            e.warnings.iter().any(|w| w
                == "noon: none of its fire times until 2026-12-10 falls inside its active \
                    hours, so the job would only ever run while the check is quiet"),
            "{:?}",
            e.warnings
        );
        // A minutely job fires inside a one-hour window even though most fires are quiet.
        let e = explain(
            &spec(serde_json::json!({
                "slug": "busy", "cron": "* * * * *",
                "active_hours": [{"start": "18:00", "end": "19:00"}],
            })),
            now(),
        );
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        // Weekdays-only job, weekend-only window.
        let e = explain(
            &spec(serde_json::json!({
                "slug": "weekday", "cron": "0 9 * * MON-FRI",
                "active_hours": [{"start": "00:00", "end": "24:00", "days": ["sat-sun"]}],
            })),
            now(),
        );
        assert!(
            e.warnings
                .iter()
                .any(|w| w.starts_with("weekday: none of its fire times")),
            "{:?}",
            e.warnings
        );
        // A yearly job is sampled over its next ten fires, not just a week.
        let e = explain(
            &spec(serde_json::json!({
                "slug": "yearly", "cron": "0 3 1 1 *",
                "active_hours": [{"start": "02:00", "end": "04:00", "days": ["thu"]}],
            })),
            now(),
        );
        // 2027-01-01 is a Friday, but 1 January falls on a Thursday in 2032.
        assert!(
            !e.warnings.iter().any(|w| w.contains("none of its fire")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn durations_in_words() {
        let s = Duration::from_secs;
        assert_eq!(duration_words(s(60)), "1m");
        assert_eq!(duration_words(s(5400)), "1h30m");
        assert_eq!(duration_words(s(86_400 * 2 + 43_200)), "2d12h");
        assert_eq!(duration_words(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(duration_words(Duration::ZERO), "0s");
    }

    #[test]
    fn shortest_spell_wraps_around_the_week() {
        let w = |s: &str, e: &str, d: &[&str]| {
            let days: Vec<String> = d.iter().map(|x| x.to_string()).collect();
            Window::parse(s, e, &days).unwrap()
        };
        // Sunday 22:00 to Monday 06:00 straddles the start of the scan.
        let ws = [w("22:00", "06:00", &["sun"]), w("09:00", "21:00", &["wed"])];
        assert_eq!(shortest_spell(&ws), Some((6 * 1440 + 22 * 60, 8 * 60)));
        assert_eq!(
            describe_spell(&ws, 6 * 1440 + 22 * 60, 8 * 60),
            "sun 22:00–mon 06:00"
        );
        assert_eq!(describe_spell(&ws, 2 * 1440, 1440), "wed 00:00–24:00");
        // Same days for every window: the schedule line already names them.
        let weekdays = [w("09:00", "12:00", &["mon-fri"])];
        assert_eq!(shortest_spell(&weekdays), Some((9 * 60, 3 * 60)));
        assert_eq!(describe_spell(&weekdays, 9 * 60, 3 * 60), "09:00–12:00");
        let whole_days = [w("00:00", "24:00", &["mon-fri"])];
        assert_eq!(shortest_spell(&whole_days), Some((0, 5 * 1440)));
        assert_eq!(
            describe_spell(&whole_days, 0, 5 * 1440),
            "mon 00:00–sat 00:00"
        );
        assert_eq!(shortest_spell(&[w("00:00", "00:00", &[])]), None);
    }
}
