//! The evaluator's pure core (SPEC §3): a check's status as a function of its
//! rules, its ping summary, the spans the watchdog did not observe, and `now`;
//! with the next instant at which that status could change.
//!
//! # Time
//!
//! Every duration (interval, grace, `zero_items_after`, `max_runtime`) is
//! measured in *active, observed* time with [`ActiveClock`]: quiet time outside
//! active hours and unobserved time (no replica accepted pings) do not count,
//! so the limits pause over them and resume where they stopped.
//!
//! - Interval check: due = last success + interval, down = due + grace (grace
//!   defaults to the interval: down after twice the interval).
//! - Cron check: due = the first fire time after the last success. A fire time
//!   is already wall-clock, so it is not pushed by the quiet time before it;
//!   but when it falls in quiet or unobserved time, the check cannot be late
//!   there, so due is the first instant after it at which the clock counts
//!   again. down = due + grace, grace defaulting to the gap between that fire
//!   time and the next (two missed fire times).
//! - With no success yet, the last failure is the reference; a check that has
//!   neither is `new` and is not judged by its schedule (a run it started is
//!   still timed out by `max_runtime`).
//!
//! # Precedence
//!
//! paused > down (failed > run_timeout > overdue) > stalled (zero_items >
//! low_items > below_usual) > late > up.
//! Recovery: a success clears overdue, stalled (with items > 0, and at least
//! `min_items`) and run_timeout at once; `failed` needs `recovery_threshold`
//! successes. A success closing a run shorter than `min_runtime` is a failure.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use super::active_hours::{parse_windows, ActiveClock, ActiveHours};
use super::check::{CheckSpec, Schedule, WindowInput};
use super::ping::{Summary, UnixMs};
use super::schedule::{parse_tz, CronSchedule};
use super::status::{Reason, Status};

/// A span when the watchdog accepted no pings: `[start, end)`.
pub type Span = (DateTime<Utc>, DateTime<Utc>);

/// When a check is expected.
#[derive(Debug, Clone)]
pub enum Expect {
    Interval(Duration),
    Cron(Arc<CronSchedule>),
}

/// The parts of a check's definition the evaluator needs, parsed once.
#[derive(Debug, Clone)]
pub struct Rules {
    pub expect: Expect,
    /// `None`: one interval.
    pub grace: Option<Duration>,
    pub hours: Option<Arc<ActiveHours>>,
    pub zero_items_after: Option<Duration>,
    pub zero_items_runs: Option<u32>,
    /// The item floor and how many counted successes below it in a row stall.
    pub min_items: Option<(u64, u32)>,
    /// `items_below_usual`: how many judged successes below the usual count
    /// in a row stall (the judging is the fold's, SPEC §3.3).
    pub below_usual_runs: Option<u32>,
    /// `None`: the grace.
    pub max_runtime: Option<Duration>,
    /// Raise an overlap alert while two or more runs are open (SPEC §3.4).
    pub alert_on_overlap: bool,
    /// Lock seats: up to this many open runs are no overlap (SPEC §13).
    pub max_instances: u32,
}

/// Shares parsed schedules and windows between checks that use the same
/// ones: parsing a cron expression costs tens of microseconds, and a million
/// checks usually use a handful of expressions.
#[derive(Default)]
pub struct RulesCache {
    crons: HashMap<(String, String), Arc<CronSchedule>>,
    hours: HashMap<(Vec<WindowInput>, String), Arc<ActiveHours>>,
}

impl Rules {
    /// Parses a validated spec; fails only on a spec that validation would reject.
    pub fn from_spec(spec: &CheckSpec) -> Result<Rules, String> {
        Self::from_spec_cached(spec, &mut RulesCache::default())
    }

    /// Like [`Rules::from_spec`], sharing what `cache` already parsed.
    pub fn from_spec_cached(spec: &CheckSpec, cache: &mut RulesCache) -> Result<Rules, String> {
        let expect = match &spec.schedule {
            Schedule::Interval(d) => Expect::Interval(duration(*d)),
            Schedule::Cron(expr) => {
                let key = (expr.clone(), spec.tz.clone());
                let cron = match cache.crons.get(&key) {
                    Some(c) => c.clone(),
                    None => {
                        let c = Arc::new(
                            CronSchedule::parse(expr, &spec.tz).map_err(|e| e.to_string())?,
                        );
                        cache.crons.insert(key, c.clone());
                        c
                    }
                };
                Expect::Cron(cron)
            }
        };
        let hours = if spec.active_hours.is_empty() {
            None
        } else {
            let key = (spec.active_hours.clone(), spec.tz.clone());
            match cache.hours.get(&key) {
                Some(h) => Some(h.clone()),
                None => {
                    let tz = parse_tz(&spec.tz).map_err(|e| e.to_string())?;
                    let windows = parse_windows(
                        spec.active_hours
                            .iter()
                            .map(|w| (w.start.as_str(), w.end.as_str(), w.days.as_slice())),
                    )
                    .map_err(|e| e.join("; "))?;
                    let h = Arc::new(ActiveHours::new(windows, tz));
                    cache.hours.insert(key, h.clone());
                    Some(h)
                }
            }
        };
        Ok(Rules {
            expect,
            grace: spec.grace.map(duration),
            hours,
            zero_items_after: spec.zero_items_after.map(duration),
            zero_items_runs: spec.zero_items_runs,
            min_items: spec
                .min_items
                .map(|n| (n, spec.min_items_runs.unwrap_or(1))),
            below_usual_runs: spec
                .items_below_usual_ppm
                .map(|_| spec.min_items_runs.unwrap_or(1)),
            max_runtime: spec.max_runtime.map(duration),
            alert_on_overlap: spec.alert_on_overlap,
            max_instances: spec.max_instances,
        })
    }
}

fn duration(d: StdDuration) -> Duration {
    Duration::from_std(d).unwrap_or(Duration::MAX)
}

/// The evaluator's verdict at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub status: Status,
    pub reason: Option<Reason>,
    /// When the current status began, when the rules can tell (e.g. the instant
    /// a check went down, even if that was before `now`).
    pub since: Option<DateTime<Utc>>,
    /// A run is open.
    pub running: bool,
    /// Outside active hours now.
    pub quiet: bool,
    /// From this instant the check is late (`None`: not scheduled yet).
    pub due: Option<DateTime<Utc>>,
    /// From this instant the check is down for being overdue.
    pub down_at: Option<DateTime<Utc>>,
    /// The interval in force: the configured one, or the gap between the due
    /// fire time and the next for a cron check.
    pub interval: Option<Duration>,
    /// The grace in force.
    pub grace: Option<Duration>,
    /// Active, observed time since the last success (zero without one).
    pub staleness: Duration,
    /// Open runs that exceeded `max_runtime`, with the instant each did:
    /// the caller closes them as failed runs.
    pub timed_out_runs: Vec<(i64, DateTime<Utc>)>,
    /// The next instant at which any of the above could change by itself.
    pub next_change: Option<DateTime<Utc>>,
}

/// Evaluates a check at `now`.
pub fn evaluate(
    rules: &Rules,
    summary: &Summary,
    paused: bool,
    unobserved: &[Span],
    now: DateTime<Utc>,
) -> Evaluation {
    evaluate_in(rules, summary, paused, unobserved, &[], now)
}

/// Evaluates a check at `now`, with the spans the server's timeline slewed
/// over after a backward wall-clock step (`timeline`): time there counts as
/// the real time it stands for.
pub fn evaluate_in(
    rules: &Rules,
    summary: &Summary,
    paused: bool,
    unobserved: &[Span],
    slewed: &[Span],
    now: DateTime<Utc>,
) -> Evaluation {
    let clock = ActiveClock {
        hours: rules.hours.as_deref(),
        unobserved,
        slewed,
    };
    let quiet = rules.hours.as_deref().is_some_and(|h| !h.is_active(now));
    let mut next = Next::default();
    if let Some(h) = rules.hours.as_deref() {
        next.consider(h.next_change(now), now);
    }
    let running = !summary.open_runs.is_empty();
    let mut e = Evaluation {
        status: Status::Up,
        reason: None,
        since: None,
        running,
        quiet,
        due: None,
        down_at: None,
        interval: None,
        grace: None,
        staleness: Duration::zero(),
        timed_out_runs: Vec::new(),
        next_change: None,
    };
    if paused {
        e.status = Status::Paused;
        return e;
    }

    // Runs that outlived max_runtime, from their start in active time.
    for run in &summary.open_runs {
        let Some(start) = instant(run.started_at) else {
            continue;
        };
        let limit = max_runtime(rules, start);
        match limit.and_then(|l| clock.advance(start, l)) {
            Some(at) if at <= now => e.timed_out_runs.push((run.id, at)),
            Some(at) => next.consider(Some(at), now),
            None => {}
        }
    }
    let timed_out_since = summary
        .timed_out_at
        .and_then(instant)
        .into_iter()
        .chain(e.timed_out_runs.iter().map(|(_, at)| *at))
        .min();

    let reference = summary.last_success_at.or(summary.last_failure_at);
    let Some(reference) = reference.and_then(instant) else {
        // Never succeeded nor failed: new, unless a first run already hung.
        match timed_out_since {
            Some(at) => set(&mut e, Status::Down, Some(Reason::RunTimeout), Some(at)),
            None => e.status = Status::New,
        }
        e.next_change = next.0;
        return e;
    };

    if let Some(last) = summary.last_success_at.and_then(instant) {
        e.staleness = clock.elapsed(last, now);
    }
    let (due, interval) = due_and_interval(rules, &clock, reference);
    let grace = rules.grace.or(interval);
    let down_at = match (due, grace) {
        (Some(d), Some(g)) => clock.advance(d, g),
        _ => None,
    };
    e.due = due;
    e.down_at = down_at;
    e.interval = interval;
    e.grace = grace;

    let zero_at = zero_items_at(rules, summary, &clock, now);
    let low_at = low_items_at(rules, summary, now);
    let below_at = below_usual_at(rules, summary, now);
    // The first rule that holds names the reason; the status began when the
    // earliest holding rule did.
    let stalled = [
        (zero_at, Reason::ZeroItems),
        (low_at, Reason::LowItems),
        (below_at, Reason::BelowUsual),
    ]
    .into_iter()
    .filter_map(|(at, reason)| at.filter(|a| *a <= now).map(|a| (a, reason)));
    let stalled = stalled.fold(
        None,
        |acc: Option<(DateTime<Utc>, Reason)>, (at, reason)| {
            Some(acc.map_or((at, reason), |(a, r)| (a.min(at), r)))
        },
    );

    if let Some(at) = summary.failed_since.and_then(instant) {
        set(&mut e, Status::Down, Some(Reason::Failed), Some(at));
    } else if let Some(at) = timed_out_since {
        set(&mut e, Status::Down, Some(Reason::RunTimeout), Some(at));
    } else if down_at.is_some_and(|d| d <= now) {
        set(&mut e, Status::Down, Some(Reason::Overdue), down_at);
    } else if let Some((at, reason)) = stalled {
        set(&mut e, Status::Stalled, Some(reason), Some(at));
    } else if due.is_some_and(|d| d <= now) {
        set(&mut e, Status::Late, None, due);
    } else {
        // Up since the success that made it so (a recovery, or a first
        // ping): the flip carries the instant the ping was stored, not the
        // one the evaluator got to it.
        set(
            &mut e,
            Status::Up,
            None,
            summary.last_success_at.and_then(instant),
        );
    }
    for t in [due, down_at, zero_at, low_at] {
        next.consider(t, now);
    }
    e.next_change = next.0;
    e
}

fn set(e: &mut Evaluation, status: Status, reason: Option<Reason>, since: Option<DateTime<Utc>>) {
    e.status = status;
    e.reason = reason;
    e.since = since;
}

/// The earliest instant strictly after `now` among those considered.
#[derive(Default)]
struct Next(Option<DateTime<Utc>>);

impl Next {
    fn consider(&mut self, t: Option<DateTime<Utc>>, now: DateTime<Utc>) {
        if let Some(t) = t.filter(|t| *t > now) {
            self.0 = Some(self.0.map_or(t, |c| c.min(t)));
        }
    }
}

/// A stored instant as a `DateTime`.
pub fn instant(ms: UnixMs) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

fn due_and_interval(
    rules: &Rules,
    clock: &ActiveClock<'_>,
    reference: DateTime<Utc>,
) -> (Option<DateTime<Utc>>, Option<Duration>) {
    match &rules.expect {
        Expect::Interval(i) => (clock.advance(reference, *i), Some(*i)),
        Expect::Cron(cron) => {
            let Some(fire) = cron.next_after(reference) else {
                return (None, None);
            };
            let interval = cron.next_after(fire).map(|f2| f2 - fire);
            (resume_at(clock, fire), interval)
        }
    }
}

/// `t` if the clock counts there, else the first instant after it at which it does.
fn resume_at(clock: &ActiveClock<'_>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // advance by the smallest unit, then step back: the first counting instant.
    clock
        .advance(t, Duration::milliseconds(1))
        .map(|a| a - Duration::milliseconds(1))
}

fn max_runtime(rules: &Rules, start: DateTime<Utc>) -> Option<Duration> {
    if let Some(m) = rules.max_runtime.or(rules.grace) {
        return Some(m);
    }
    match &rules.expect {
        Expect::Interval(i) => Some(*i),
        Expect::Cron(cron) => {
            let f1 = cron.next_after(start)?;
            Some(cron.next_after(f1)? - f1)
        }
    }
}

/// When the zero-items rule stalls the check (SPEC §3.3).
fn zero_items_at(
    rules: &Rules,
    s: &Summary,
    clock: &ActiveClock<'_>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let since = s.zero_streak_since.and_then(instant)?;
    let by_runs = rules
        .zero_items_runs
        .filter(|n| s.zero_streak_runs >= i64::from(*n))
        // The streak reached its count at a ping no later than the last one.
        .map(|_| s.last_items_at.and_then(instant).unwrap_or(now).min(now));
    let by_time = rules.zero_items_after.and_then(|d| clock.advance(since, d));
    match (by_runs, by_time) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// When the floor stalls the check: at the counted success that completed
/// the low streak (SPEC §3.3).
fn low_items_at(rules: &Rules, s: &Summary, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let (_, runs) = rules.min_items?;
    (s.low_streak_runs >= i64::from(runs))
        .then(|| s.last_items_at.and_then(instant).unwrap_or(now).min(now))
}

/// When the usual count stalls the check: at the counted success that
/// completed the streak of lows (SPEC §3.3).
fn below_usual_at(rules: &Rules, s: &Summary, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let runs = rules.below_usual_runs?;
    (s.below_streak_runs >= i64::from(runs))
        .then(|| s.last_items_at.and_then(instant).unwrap_or(now).min(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::CheckInput;
    use crate::domain::ping::{OpenRun, PingFacts, PingKind, Thresholds};
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn rules(json: &str) -> Rules {
        let input: CheckInput = serde_json::from_str(json).unwrap();
        Rules::from_spec(&CheckSpec::from_input(input).unwrap()).unwrap()
    }

    fn ms(s: &str) -> UnixMs {
        t(s).timestamp_millis()
    }

    fn success(at: &str) -> Summary {
        let mut s = Summary::default();
        ping(&mut s, at, PingKind::Success, None);
        s
    }

    fn ping(s: &mut Summary, at: &str, kind: PingKind, items: Option<u64>) {
        let mut id = s.open_runs.len() as i64 + 100;
        s.apply(
            &PingFacts {
                at: ms(at),
                kind,
                items,
                rid: None,
            },
            Thresholds::default(),
            &mut || {
                id += 1;
                id
            },
        );
    }

    fn status_at(r: &Rules, s: &Summary, now: &str) -> (Status, Option<Reason>) {
        let e = evaluate(r, s, false, &[], t(now));
        (e.status, e.reason)
    }

    #[test]
    fn never_pinged_is_new_and_never_changes() {
        let r = rules(r#"{"interval":"1m"}"#);
        let e = evaluate(
            &r,
            &Summary::default(),
            false,
            &[],
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(e.status, Status::New);
        assert_eq!(e.next_change, None);
        // A log ping does not take it out of new.
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T00:00:00Z", PingKind::Log, None);
        assert_eq!(status_at(&r, &s, "2026-01-02T00:00:00Z").0, Status::New);
    }

    #[test]
    fn interval_late_then_down_after_twice_the_interval() {
        let r = rules(r#"{"interval":"5m"}"#);
        let s = success("2026-01-01T12:00:00Z");
        let cases = [
            ("2026-01-01T12:00:00Z", Status::Up, None),
            ("2026-01-01T12:04:59.999Z", Status::Up, None),
            ("2026-01-01T12:05:00Z", Status::Late, None),
            ("2026-01-01T12:09:59.999Z", Status::Late, None),
            ("2026-01-01T12:10:00Z", Status::Down, Some(Reason::Overdue)),
            ("2026-01-09T00:00:00Z", Status::Down, Some(Reason::Overdue)),
        ];
        for (now, status, reason) in cases {
            assert_eq!(status_at(&r, &s, now), (status, reason), "{now}");
        }
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T12:01:00Z"));
        assert_eq!(e.status, Status::Up);
        assert_eq!(
            e.since,
            Some(t("2026-01-01T12:00:00Z")),
            "up since the success that made it so, not since `now`"
        );
        assert_eq!(e.due, Some(t("2026-01-01T12:05:00Z")));
        assert_eq!(e.down_at, Some(t("2026-01-01T12:10:00Z")));
        assert_eq!(e.next_change, Some(t("2026-01-01T12:05:00Z")));
        assert_eq!(e.staleness, Duration::minutes(1));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T12:06:00Z"));
        assert_eq!(e.next_change, Some(t("2026-01-01T12:10:00Z")));
        assert_eq!(e.since, Some(t("2026-01-01T12:05:00Z")));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T13:00:00Z"));
        assert_eq!(
            e.since,
            Some(t("2026-01-01T12:10:00Z")),
            "the instant it really went down"
        );
        assert_eq!(e.next_change, None);
    }

    #[test]
    fn explicit_grace() {
        let r = rules(r#"{"interval":"1h","grace":"10m"}"#);
        let s = success("2026-01-01T00:00:00Z");
        assert_eq!(status_at(&r, &s, "2026-01-01T01:09:59Z").0, Status::Late);
        assert_eq!(status_at(&r, &s, "2026-01-01T01:10:00Z").0, Status::Down);
    }

    #[test]
    fn a_success_recovers_an_overdue_check() {
        let r = rules(r#"{"interval":"1m"}"#);
        let mut s = success("2026-01-01T00:00:00Z");
        assert_eq!(status_at(&r, &s, "2026-01-01T00:03:00Z").0, Status::Down);
        ping(&mut s, "2026-01-01T00:03:00Z", PingKind::Success, None);
        assert_eq!(status_at(&r, &s, "2026-01-01T00:03:00Z").0, Status::Up);
    }

    #[test]
    fn cron_down_after_two_missed_fire_times() {
        let r = rules(r#"{"cron":"0 3 * * *","tz":"Europe/London"}"#);
        let s = success("2026-01-01T03:00:05Z");
        let cases = [
            ("2026-01-02T02:59:59Z", Status::Up),
            ("2026-01-02T03:00:00Z", Status::Late),
            ("2026-01-03T02:59:59Z", Status::Late),
            ("2026-01-03T03:00:00Z", Status::Down),
        ];
        for (now, status) in cases {
            assert_eq!(status_at(&r, &s, now).0, status, "{now}");
        }
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T04:00:00Z"));
        assert_eq!(e.interval, Some(Duration::days(1)));
        assert_eq!(e.grace, Some(Duration::days(1)));
    }

    #[test]
    fn cron_in_a_dst_zone_uses_the_real_gap() {
        // New York spring forward 2025-03-09: the day is 23 hours long.
        let r = rules(r#"{"cron":"0 12 * * *","tz":"America/New_York"}"#);
        let s = success("2025-03-08T17:00:00Z"); // 12:00 EST
        let e = evaluate(&r, &s, false, &[], t("2025-03-08T18:00:00Z"));
        assert_eq!(e.due, Some(t("2025-03-09T16:00:00Z"))); // 12:00 EDT
        assert_eq!(e.interval, Some(Duration::hours(24)));
        assert_eq!(e.down_at, Some(t("2025-03-10T16:00:00Z")));
    }

    #[test]
    fn quiet_hours_pause_the_clock() {
        // Active 18:00-09:00 in Shanghai (UTC+8): quiet 01:00Z-10:00Z.
        let r = rules(
            r#"{"interval":"1m","tz":"Asia/Shanghai",
                "active_hours":[{"start":"18:00","end":"09:00"}]}"#,
        );
        // Last success 08:59:30 local (00:59:30Z): 30s left before the window closes.
        let s = success("2026-01-05T00:59:30Z");
        let e = evaluate(&r, &s, false, &[], t("2026-01-05T05:00:00Z"));
        assert_eq!(e.status, Status::Up, "never late because of quiet hours");
        assert!(e.quiet);
        assert_eq!(e.due, Some(t("2026-01-05T10:00:30Z")));
        assert_eq!(e.down_at, Some(t("2026-01-05T10:01:30Z")));
        assert_eq!(
            e.next_change,
            Some(t("2026-01-05T10:00:00Z")),
            "the window opening"
        );
        assert_eq!(e.staleness, Duration::seconds(30));
        assert_eq!(status_at(&r, &s, "2026-01-05T10:00:30Z").0, Status::Late);
        assert_eq!(status_at(&r, &s, "2026-01-05T10:01:30Z").0, Status::Down);
        let e = evaluate(&r, &s, false, &[], t("2026-01-05T10:00:10Z"));
        assert!(!e.quiet);
        assert_eq!(e.staleness, Duration::seconds(40));
    }

    #[test]
    fn late_before_quiet_stays_late_while_quiet() {
        let r = rules(
            r#"{"interval":"10m","tz":"UTC","active_hours":[{"start":"09:00","end":"17:00"}]}"#,
        );
        let s = success("2026-01-05T16:45:00Z");
        // Due 16:55, the grace would end 17:05 but the window closes at 17:00.
        assert_eq!(status_at(&r, &s, "2026-01-05T16:58:00Z").0, Status::Late);
        assert_eq!(status_at(&r, &s, "2026-01-05T23:00:00Z").0, Status::Late);
        let e = evaluate(&r, &s, false, &[], t("2026-01-05T23:00:00Z"));
        assert_eq!(e.down_at, Some(t("2026-01-06T09:05:00Z")));
    }

    #[test]
    fn window_days_and_cron_due_in_quiet_time() {
        // Every 5 minutes by cron, but only expected mon-fri 09:00-17:00 UTC.
        let r = rules(
            r#"{"cron":"*/5 * * * *","active_hours":[{"start":"09:00","end":"17:00","days":["mon-fri"]}]}"#,
        );
        // Friday 2026-01-09 16:55: the next fire (17:00) is quiet until Monday 09:00.
        let s = success("2026-01-09T16:55:00Z");
        let e = evaluate(&r, &s, false, &[], t("2026-01-10T12:00:00Z"));
        assert_eq!(e.status, Status::Up);
        assert_eq!(e.due, Some(t("2026-01-12T09:00:00Z")));
        assert_eq!(e.down_at, Some(t("2026-01-12T09:05:00Z")));
    }

    #[test]
    fn unobserved_time_does_not_count() {
        let r = rules(r#"{"interval":"1m"}"#);
        let s = success("2026-01-01T00:00:00Z");
        // The service was down from 00:00:30 to 01:00:00.
        let outage = [(t("2026-01-01T00:00:30Z"), t("2026-01-01T01:00:00Z"))];
        let e = evaluate(&r, &s, false, &outage, t("2026-01-01T01:00:01Z"));
        assert_eq!(
            e.status,
            Status::Up,
            "no alert because of the watchdog's own outage"
        );
        assert_eq!(e.due, Some(t("2026-01-01T01:00:30Z")));
        assert_eq!(
            e.down_at,
            Some(t("2026-01-01T01:01:30Z")),
            "the rest of the limit"
        );
        assert_eq!(e.staleness, Duration::seconds(31));
    }

    #[test]
    fn failures_and_thresholds() {
        let r = rules(r#"{"interval":"1h"}"#);
        let mut s = success("2026-01-01T00:00:00Z");
        ping(&mut s, "2026-01-01T00:10:00Z", PingKind::Fail, None);
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:10:00Z"));
        assert_eq!((e.status, e.reason), (Status::Down, Some(Reason::Failed)));
        assert_eq!(e.since, Some(t("2026-01-01T00:10:00Z")));
        // Failed beats overdue later on.
        assert_eq!(
            status_at(&r, &s, "2026-01-05T00:00:00Z"),
            (Status::Down, Some(Reason::Failed))
        );
        ping(&mut s, "2026-01-01T00:20:00Z", PingKind::Success, None);
        assert_eq!(status_at(&r, &s, "2026-01-01T00:20:00Z").0, Status::Up);
    }

    #[test]
    fn failure_without_any_success_is_the_reference() {
        let r = rules(r#"{"interval":"1m","failure_threshold":3}"#);
        let mut s = Summary::default();
        let thresholds = Thresholds {
            failure: 3,
            ..Thresholds::default()
        };
        s.apply(
            &PingFacts {
                at: ms("2026-01-01T00:00:00Z"),
                kind: PingKind::Fail,
                items: None,
                rid: None,
            },
            thresholds,
            &mut || 1,
        );
        assert_eq!(status_at(&r, &s, "2026-01-01T00:00:30Z").0, Status::Up);
        assert_eq!(
            status_at(&r, &s, "2026-01-01T00:02:00Z"),
            (Status::Down, Some(Reason::Overdue))
        );
    }

    #[test]
    fn zero_items_by_time_and_by_runs() {
        let r = rules(r#"{"interval":"10m","zero_items_after":"30m"}"#);
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T00:00:00Z", PingKind::Success, Some(4));
        ping(&mut s, "2026-01-01T00:10:00Z", PingKind::Success, Some(0));
        ping(&mut s, "2026-01-01T00:20:00Z", PingKind::Success, Some(0));
        ping(&mut s, "2026-01-01T00:30:00Z", PingKind::Success, None);
        ping(&mut s, "2026-01-01T00:35:00Z", PingKind::Success, Some(0));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:36:00Z"));
        assert_eq!(e.status, Status::Up);
        assert_eq!(
            e.next_change,
            Some(t("2026-01-01T00:40:00Z")),
            "the streak's end"
        );
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:40:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Stalled, Some(Reason::ZeroItems))
        );
        assert_eq!(e.since, Some(t("2026-01-01T00:40:00Z")));
        // Silence beats stalled.
        assert_eq!(status_at(&r, &s, "2026-01-01T00:55:00Z").0, Status::Down);
        // Items > 0 recover.
        ping(&mut s, "2026-01-01T00:41:00Z", PingKind::Success, Some(2));
        assert_eq!(status_at(&r, &s, "2026-01-01T00:41:00Z").0, Status::Up);

        let r = rules(r#"{"interval":"10m","zero_items_runs":3}"#);
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T00:00:00Z", PingKind::Success, Some(0));
        ping(&mut s, "2026-01-01T00:01:00Z", PingKind::Success, Some(0));
        assert_eq!(status_at(&r, &s, "2026-01-01T00:01:00Z").0, Status::Up);
        ping(&mut s, "2026-01-01T00:02:00Z", PingKind::Success, Some(0));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:02:00Z"));
        assert_eq!(e.status, Status::Stalled);
        assert_eq!(e.since, Some(t("2026-01-01T00:02:00Z")));
    }

    /// Applies a success with the thresholds of the check `json` declares.
    fn counted(s: &mut Summary, json: &str, at: &str, items: Option<u64>) {
        let input: CheckInput = serde_json::from_str(json).unwrap();
        let spec = CheckSpec::from_input(input).unwrap();
        let facts = PingFacts {
            at: ms(at),
            kind: PingKind::Success,
            items,
            rid: None,
        };
        s.apply(&facts, spec.thresholds(), &mut || 1);
    }

    #[test]
    fn item_floor_stalls_with_low_items_and_recovers() {
        let json = r#"{"interval":"10m","min_items":10,"min_items_runs":2}"#;
        let r = rules(json);
        let mut s = Summary::default();
        counted(&mut s, json, "2026-01-01T00:00:00Z", Some(3));
        assert_eq!(
            status_at(&r, &s, "2026-01-01T00:00:00Z"),
            (Status::Up, None)
        );
        counted(&mut s, json, "2026-01-01T00:01:00Z", None);
        assert_eq!(status_at(&r, &s, "2026-01-01T00:01:00Z").0, Status::Up);
        counted(&mut s, json, "2026-01-01T00:02:00Z", Some(4));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:03:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Stalled, Some(Reason::LowItems))
        );
        assert_eq!(e.since, Some(t("2026-01-01T00:02:00Z")));
        // Down beats stalled.
        assert_eq!(
            status_at(&r, &s, "2026-01-01T00:30:00Z"),
            (Status::Down, Some(Reason::Overdue))
        );
        counted(&mut s, json, "2026-01-01T00:04:00Z", Some(12));
        assert_eq!(
            status_at(&r, &s, "2026-01-01T00:04:00Z"),
            (Status::Up, None)
        );
    }

    #[test]
    fn zero_items_comes_before_low_items() {
        let json = r#"{"interval":"10m","min_items":10,"zero_items_runs":2}"#;
        let r = rules(json);
        let mut s = Summary::default();
        counted(&mut s, json, "2026-01-01T00:00:00Z", Some(0));
        assert_eq!(
            status_at(&r, &s, "2026-01-01T00:00:00Z"),
            (Status::Stalled, Some(Reason::LowItems)),
            "one success below the floor (min_items_runs 1)"
        );
        counted(&mut s, json, "2026-01-01T00:01:00Z", Some(0));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:01:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Stalled, Some(Reason::ZeroItems))
        );
        assert_eq!(e.since, Some(t("2026-01-01T00:01:00Z")));
        counted(&mut s, json, "2026-01-01T00:02:00Z", Some(1));
        assert_eq!(
            status_at(&r, &s, "2026-01-01T00:02:00Z"),
            (Status::Stalled, Some(Reason::LowItems))
        );
    }

    /// Applies a success with the check's thresholds and an item history.
    fn counted_with(
        s: &mut Summary,
        h: &mut Vec<crate::domain::usual::HourBucket>,
        json: &str,
        at: &str,
        items: u64,
        id: i64,
    ) {
        let spec = CheckSpec::from_input(serde_json::from_str(json).unwrap()).unwrap();
        let facts = PingFacts {
            at: ms(at),
            kind: PingKind::Success,
            items: Some(items),
            rid: None,
        };
        let with = crate::domain::ping::WithHistory {
            buckets: h,
            ping_id: id,
        };
        s.apply_with(&facts, spec.thresholds(), Some(with), &mut || 1);
    }

    #[test]
    fn far_below_the_usual_count_stalls_with_below_usual_and_recovers() {
        let json = r#"{"interval":"1d","items_below_usual":0.25,"min_items_runs":2,
            "tz":"Europe/Berlin","active_hours":[{"start":"08:00","end":"20:00"}]}"#;
        let r = rules(json);
        let (mut s, mut h) = (Summary::default(), Vec::new());
        // Mondays 09:30 and 10:30 Berlin time, three weeks of 50 items.
        for (id, day) in [(1, "05"), (3, "12"), (5, "19")] {
            counted_with(
                &mut s,
                &mut h,
                json,
                &format!("2026-01-{day}T08:30:00Z"),
                50,
                id,
            );
            counted_with(
                &mut s,
                &mut h,
                json,
                &format!("2026-01-{day}T09:30:00Z"),
                50,
                id + 1,
            );
        }
        assert_eq!(
            status_at(&r, &s, "2026-01-19T09:31:00Z"),
            (Status::Up, None)
        );
        counted_with(&mut s, &mut h, json, "2026-01-26T08:30:00Z", 8, 10);
        assert_eq!(s.usual_items, Some(50.0));
        assert_eq!(
            status_at(&r, &s, "2026-01-26T08:31:00Z"),
            (Status::Up, None),
            "one low success of two"
        );
        // The quiet night between two lows does not break the streak.
        counted_with(&mut s, &mut h, json, "2026-01-26T09:30:00Z", 12, 11);
        let e = evaluate(&r, &s, false, &[], t("2026-01-26T09:31:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Stalled, Some(Reason::BelowUsual))
        );
        assert_eq!(e.since, Some(t("2026-01-26T09:30:00Z")));
        let e = evaluate(&r, &s, false, &[], t("2026-01-26T20:00:00Z"));
        assert_eq!(
            (e.status, e.quiet),
            (Status::Stalled, true),
            "stalled while quiet"
        );
        // A normal count recovers it.
        counted_with(&mut s, &mut h, json, "2026-02-02T08:30:00Z", 40, 12);
        assert_eq!(
            status_at(&r, &s, "2026-02-02T08:31:00Z"),
            (Status::Up, None)
        );
    }

    #[test]
    fn below_usual_comes_after_zero_and_low_items() {
        let json = r#"{"interval":"1d","items_below_usual":0.5,"min_items":5,"zero_items_runs":1}"#;
        let r = rules(json);
        let mut s = Summary {
            below_streak_runs: 1,
            last_items_at: Some(ms("2026-01-01T00:00:00Z")),
            last_success_at: Some(ms("2026-01-01T00:00:00Z")),
            ..Summary::default()
        };
        let at = "2026-01-01T00:01:00Z";
        assert_eq!(
            status_at(&r, &s, at),
            (Status::Stalled, Some(Reason::BelowUsual))
        );
        s.low_streak_runs = 1;
        assert_eq!(
            status_at(&r, &s, at),
            (Status::Stalled, Some(Reason::LowItems))
        );
        s.zero_streak_runs = 1;
        s.zero_streak_since = s.last_items_at;
        assert_eq!(
            status_at(&r, &s, at),
            (Status::Stalled, Some(Reason::ZeroItems))
        );
        // Without the rule the streak means nothing.
        let s = Summary {
            below_streak_runs: 5,
            ..s.clone()
        };
        let plain = rules(r#"{"interval":"1d"}"#);
        assert_eq!(
            status_at(
                &plain,
                &Summary {
                    zero_streak_runs: 0,
                    zero_streak_since: None,
                    low_streak_runs: 0,
                    ..s
                },
                at
            ),
            (Status::Up, None)
        );
    }

    #[test]
    fn a_too_fast_run_is_down_failed() {
        let json = r#"{"interval":"1h","min_runtime":"5s"}"#;
        let r = rules(json);
        let spec = CheckSpec::from_input(serde_json::from_str(json).unwrap()).unwrap();
        let mut s = success("2026-01-01T00:00:00Z");
        for (at, kind) in [
            ("2026-01-01T00:10:00Z", PingKind::Start),
            ("2026-01-01T00:10:01Z", PingKind::Success),
        ] {
            let facts = PingFacts {
                at: ms(at),
                kind,
                items: None,
                rid: None,
            };
            s.apply(&facts, spec.thresholds(), &mut || 1);
        }
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:10:02Z"));
        assert_eq!((e.status, e.reason), (Status::Down, Some(Reason::Failed)));
        assert_eq!(
            e.due,
            Some(t("2026-01-01T01:00:00Z")),
            "from the last real success"
        );
    }

    #[test]
    fn zero_streak_pauses_while_quiet() {
        let r = rules(
            r#"{"interval":"1h","zero_items_after":"2h",
                "active_hours":[{"start":"08:00","end":"20:00"}]}"#,
        );
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T19:00:00Z", PingKind::Success, Some(0));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T19:30:00Z"));
        // One hour counts before 20:00, the other after 08:00 next day.
        let stalled = evaluate(&r, &s, false, &[], t("2026-01-02T09:00:00Z"));
        assert_eq!(e.status, Status::Up);
        assert_eq!(
            stalled.status,
            Status::Down,
            "silence also counts: down beats stalled"
        );
        let mut s2 = s.clone();
        ping(&mut s2, "2026-01-02T08:30:00Z", PingKind::Success, Some(0));
        let e = evaluate(&r, &s2, false, &[], t("2026-01-02T08:59:59Z"));
        assert_eq!(e.status, Status::Up);
        let e = evaluate(&r, &s2, false, &[], t("2026-01-02T09:00:00Z"));
        assert_eq!(e.status, Status::Stalled);
    }

    #[test]
    fn runs_time_out_after_max_runtime() {
        let r = rules(r#"{"interval":"1h","max_runtime":"10m"}"#);
        let mut s = success("2026-01-01T00:00:00Z");
        ping(&mut s, "2026-01-01T00:30:00Z", PingKind::Start, None);
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:35:00Z"));
        assert_eq!(e.status, Status::Up);
        assert!(e.running);
        assert_eq!(e.next_change, Some(t("2026-01-01T00:40:00Z")));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:41:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Down, Some(Reason::RunTimeout))
        );
        let run_id = s.open_runs[0].id;
        assert_eq!(e.timed_out_runs, vec![(run_id, t("2026-01-01T00:40:00Z"))]);
        // Once the caller closed the run, the status holds until a success.
        s.time_out_run(run_id, ms("2026-01-01T00:40:00Z")).unwrap();
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:42:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Down, Some(Reason::RunTimeout))
        );
        assert!(e.timed_out_runs.is_empty());
        assert!(!e.running);
        ping(&mut s, "2026-01-01T00:50:00Z", PingKind::Success, None);
        assert_eq!(status_at(&r, &s, "2026-01-01T00:50:00Z").0, Status::Up);
    }

    #[test]
    fn max_runtime_defaults_to_grace_and_catches_a_first_run() {
        let r = rules(r#"{"interval":"1h","grace":"5m"}"#);
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T00:00:00Z", PingKind::Start, None);
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:04:00Z"));
        assert_eq!(e.status, Status::New);
        assert_eq!(e.next_change, Some(t("2026-01-01T00:05:00Z")));
        let e = evaluate(&r, &s, false, &[], t("2026-01-01T00:05:00Z"));
        assert_eq!(
            (e.status, e.reason),
            (Status::Down, Some(Reason::RunTimeout))
        );
    }

    #[test]
    fn max_runtime_pauses_while_quiet() {
        let r = rules(
            r#"{"interval":"1h","max_runtime":"30m","active_hours":[{"start":"08:00","end":"20:00"}]}"#,
        );
        let mut s = success("2026-01-01T19:00:00Z");
        ping(&mut s, "2026-01-01T19:50:00Z", PingKind::Start, None);
        let e = evaluate(&r, &s, false, &[], t("2026-01-02T03:00:00Z"));
        assert!(e.timed_out_runs.is_empty());
        assert_eq!(e.next_change, Some(t("2026-01-02T08:00:00Z")));
        let e = evaluate(&r, &s, false, &[], t("2026-01-02T08:20:00Z"));
        assert_eq!(e.timed_out_runs.len(), 1);
        assert_eq!(e.timed_out_runs[0].1, t("2026-01-02T08:20:00Z"));
    }

    #[test]
    fn paused_is_not_evaluated() {
        let r = rules(r#"{"interval":"1m"}"#);
        let s = success("2026-01-01T00:00:00Z");
        let e = evaluate(&r, &s, true, &[], t("2026-02-01T00:00:00Z"));
        assert_eq!(e.status, Status::Paused);
        assert_eq!(e.next_change, None);
    }

    #[test]
    fn open_runs_are_running() {
        let r = rules(r#"{"interval":"1h"}"#);
        let mut s = success("2026-01-01T00:00:00Z");
        s.open_runs.push(OpenRun {
            id: 9,
            rid: None,
            started_at: ms("2026-01-01T00:01:00Z"),
            overlapped: false,
        });
        assert!(evaluate(&r, &s, false, &[], t("2026-01-01T00:02:00Z")).running);
    }

    #[test]
    fn quiet_flag_and_window_edges_are_changes() {
        let r = rules(
            r#"{"interval":"1d","active_hours":[{"start":"18:00","end":"09:00","days":["fri"]}]}"#,
        );
        let s = success("2026-01-02T18:00:00Z"); // a Friday
        let e = evaluate(&r, &s, false, &[], t("2026-01-03T08:59:00Z"));
        assert!(!e.quiet, "a friday window covers saturday morning");
        assert_eq!(e.next_change, Some(t("2026-01-03T09:00:00Z")));
        let e = evaluate(&r, &s, false, &[], t("2026-01-03T09:00:00Z"));
        assert!(e.quiet);
        assert_eq!(e.next_change, Some(t("2026-01-09T18:00:00Z")));
    }

    fn spec_with_hours() -> impl Strategy<Value = Rules> {
        (
            1u64..7200,
            prop::option::of(1u64..7200),
            prop::option::of((0u16..1440, 0u16..1440)),
        )
            .prop_map(|(interval, grace, window)| {
                let mut spec = CheckSpec::with_slug("p");
                spec.schedule = Schedule::Interval(StdDuration::from_secs(interval));
                spec.grace = grace.map(StdDuration::from_secs);
                if let Some((a, b)) = window {
                    spec.active_hours = vec![WindowInput {
                        start: format!("{:02}:{:02}", a / 60, a % 60),
                        end: format!("{:02}:{:02}", b / 60, b % 60),
                        days: vec![],
                    }];
                }
                Rules::from_spec(&spec).unwrap()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The status only changes at the instants the evaluator announces:
        /// evaluating just before next_change gives the same verdict as now.
        #[test]
        fn status_is_constant_until_next_change(
            rules in spec_with_hours(),
            last in 0i64..86_400,
            offset in 0i64..400_000,
        ) {
            let base = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
            let s = success(&(base + Duration::seconds(last)).to_rfc3339());
            let now = base + Duration::seconds(last + offset);
            let e = evaluate(&rules, &s, false, &[], now);
            if let Some(next) = e.next_change {
                prop_assert!(next > now);
                let before = evaluate(&rules, &s, false, &[], next - Duration::milliseconds(1));
                prop_assert_eq!((before.status, before.reason, before.quiet), (e.status, e.reason, e.quiet));
            } else {
                let later = evaluate(&rules, &s, false, &[], now + Duration::days(30));
                prop_assert_eq!((later.status, later.reason), (e.status, e.reason));
            }
        }

        /// With the item rules by runs, stalled exactly when a streak reached
        /// its count, and the reason is the first rule that holds: zero_items,
        /// then low_items. A streak counts successes with items only.
        #[test]
        fn item_rules_stall_with_the_first_reason_that_holds(
            reports in proptest::collection::vec(proptest::option::of(0u64..6), 1..25),
            floor in 1u64..5,
            floor_runs in 1u32..4,
            zero_runs in 1u32..4,
        ) {
            let json = format!(
                r#"{{"interval":"1d","min_items":{floor},"min_items_runs":{floor_runs},"zero_items_runs":{zero_runs}}}"#
            );
            let r = rules(&json);
            let mut s = Summary::default();
            let (mut zeros, mut lows) = (0u32, 0u32);
            let base = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
            for (i, items) in reports.iter().enumerate() {
                let at = (base + Duration::minutes(i as i64)).to_rfc3339();
                counted(&mut s, &json, &at, *items);
                if let Some(n) = items {
                    zeros = if *n == 0 { zeros + 1 } else { 0 };
                    lows = if *n < floor { lows + 1 } else { 0 };
                }
                let e = evaluate(&r, &s, false, &[], base + Duration::minutes(i as i64));
                let want = if zeros >= zero_runs {
                    (Status::Stalled, Some(Reason::ZeroItems))
                } else if lows >= floor_runs {
                    (Status::Stalled, Some(Reason::LowItems))
                } else {
                    (Status::Up, None)
                };
                prop_assert_eq!((e.status, e.reason), want);
            }
        }

        /// Down exactly when active staleness reached interval + grace.
        #[test]
        fn down_iff_staleness_reaches_the_limit(
            rules in spec_with_hours(),
            last in 0i64..86_400,
            offset in 0i64..400_000,
        ) {
            let base = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
            let s = success(&(base + Duration::seconds(last)).to_rfc3339());
            let now = base + Duration::seconds(last + offset);
            let e = evaluate(&rules, &s, false, &[], now);
            let limit = e.interval.unwrap() + e.grace.unwrap();
            prop_assert_eq!(e.status == Status::Down, e.staleness >= limit);
            prop_assert_eq!(e.status == Status::Late, e.staleness >= e.interval.unwrap() && e.staleness < limit);
        }
    }
}
