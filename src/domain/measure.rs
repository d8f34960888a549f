//! What the metrics endpoint shows of one check (SPEC §7): a pure function of
//! the evaluator's state and `now`. It uses the evaluator's own clocks, so
//! staleness pauses over quiet and unobserved time, and the down threshold it
//! reports is exactly the one the evaluator applies, for any grace.

use chrono::{DateTime, Duration, Utc};

use super::active_hours::ActiveClock;
use super::evaluate::{evaluate_in, instant, Expect, Rules, Span};
use super::ping::Summary;
use super::status::Status;

/// One check's values at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Measures {
    pub status: Status,
    pub last_success: Option<DateTime<Utc>>,
    /// The interval in force (for cron: the gap between the due fire time and the next).
    pub interval: Option<Duration>,
    /// The grace in force.
    pub grace: Option<Duration>,
    /// Active, observed time since the instant the evaluator measures from:
    /// the last success, or the last failure of a check that never succeeded.
    /// `None` for a check that has neither.
    pub staleness: Option<Duration>,
    /// The staleness at which the check goes down for being overdue. `None`
    /// when the check is not judged by its schedule (new or paused).
    pub down_after: Option<Duration>,
    pub last_items: Option<i64>,
    /// The usual count in force (`items_below_usual`), when judged.
    pub usual_items: Option<f64>,
    /// Active, observed time of the current zero-items streak (zero without one).
    pub zero_items: Duration,
    /// Inside active hours now.
    pub active: bool,
    /// A run is open.
    pub running: bool,
    pub last_duration: Option<Duration>,
    /// Runs that started while another was open, ever.
    pub overlaps: i64,
    /// The job guard's lock seats held now (not measured from the summary:
    /// the caller fills it in).
    pub locks_held: i64,
    /// Open dead-letter slots (SPEC §14; the caller fills it in).
    pub dead_letter_slots: i64,
}

impl Measures {
    /// 0 only when down or stalled.
    pub fn up(&self) -> bool {
        !self.status.is_failing()
    }

    /// Staleness over the interval: 2 means twice the interval.
    pub fn staleness_ratio(&self) -> Option<f64> {
        let interval = self.interval?.num_milliseconds();
        let staleness = self.staleness?.num_milliseconds();
        (interval > 0).then(|| staleness as f64 / interval as f64)
    }
}

/// Measures a check at `now` from what the evaluator holds for it.
pub fn measure(
    rules: &Rules,
    summary: &Summary,
    paused: bool,
    unobserved: &[Span],
    slewed: &[Span],
    now: DateTime<Utc>,
) -> Measures {
    // A paused check is not judged, but its clocks are still worth showing:
    // evaluate as if it ran and keep only the numbers.
    let e = evaluate_in(rules, summary, false, unobserved, slewed, now);
    let clock = ActiveClock {
        hours: rules.hours.as_deref(),
        unobserved,
        slewed,
    };
    let last_success = summary.last_success_at.and_then(instant);
    let reference = last_success.or_else(|| summary.last_failure_at.and_then(instant));
    let staleness = reference.map(|r| match last_success {
        // evaluate() already measured it from the last success.
        Some(_) => e.staleness,
        None => clock.elapsed(r, now),
    });
    let down_after = match (paused, reference, e.down_at) {
        (false, Some(r), Some(down_at)) => Some(clock.elapsed(r, down_at)),
        _ => None,
    };
    let interval = e.interval.or_else(|| match &rules.expect {
        Expect::Interval(i) => Some(*i),
        Expect::Cron(cron) => {
            let fire = cron.next_after(now)?;
            Some(cron.next_after(fire)? - fire)
        }
    });
    let grace = e.grace.or(rules.grace).or(interval);
    let zero_items = summary
        .zero_streak_since
        .and_then(instant)
        .map_or(Duration::zero(), |since| clock.elapsed(since, now));
    Measures {
        status: if paused { Status::Paused } else { e.status },
        last_success,
        interval,
        grace,
        staleness,
        down_after,
        last_items: summary.last_items,
        usual_items: summary
            .usual_items
            .filter(|_| rules.below_usual_runs.is_some()),
        zero_items,
        active: !e.quiet,
        running: e.running,
        last_duration: summary.last_duration_ms.map(Duration::milliseconds),
        overlaps: summary.overlaps,
        locks_held: 0,
        dead_letter_slots: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::{CheckInput, CheckSpec};
    use crate::domain::ping::{PingFacts, PingKind, Thresholds};
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn rules(json: &str) -> Rules {
        let input: CheckInput = serde_json::from_str(json).unwrap();
        Rules::from_spec(&CheckSpec::from_input(input).unwrap()).unwrap()
    }

    fn ping(s: &mut Summary, at: &str, kind: PingKind, items: Option<u64>) {
        s.apply(
            &PingFacts {
                at: t(at).timestamp_millis(),
                kind,
                items,
                rid: None,
            },
            Thresholds::default(),
            &mut || 1,
        );
    }

    fn success(at: &str) -> Summary {
        let mut s = Summary::default();
        ping(&mut s, at, PingKind::Success, None);
        s
    }

    #[test]
    fn staleness_does_not_grow_while_quiet() {
        // Active 09:00-17:00 UTC; last success at 16:59.
        let r = rules(r#"{"interval":"10m","active_hours":[{"start":"09:00","end":"17:00"}]}"#);
        let s = success("2026-01-05T16:59:00Z");
        let at_close = measure(&r, &s, false, &[], &[], t("2026-01-05T17:00:00Z"));
        let night = measure(&r, &s, false, &[], &[], t("2026-01-05T23:30:00Z"));
        let morning = measure(&r, &s, false, &[], &[], t("2026-01-06T08:59:59Z"));
        for m in [&at_close, &night, &morning] {
            assert_eq!(m.staleness, Some(Duration::minutes(1)));
        }
        assert!(!night.active && !morning.active && !at_close.active);
        // It resumes where it stopped when the window opens.
        let open = measure(&r, &s, false, &[], &[], t("2026-01-06T09:02:00Z"));
        assert!(open.active);
        assert_eq!(open.staleness, Some(Duration::minutes(3)));
        assert_eq!(open.down_after, Some(Duration::minutes(20)));
        assert_eq!(open.staleness_ratio(), Some(0.3));
    }

    #[test]
    fn staleness_does_not_grow_while_unobserved() {
        let r = rules(r#"{"interval":"1m"}"#);
        let s = success("2026-01-01T00:00:00Z");
        let outage = [(t("2026-01-01T00:00:30Z"), t("2026-01-01T01:00:00Z"))];
        let m = measure(&r, &s, false, &outage, &[], t("2026-01-01T01:00:10Z"));
        assert_eq!(m.staleness, Some(Duration::seconds(40)));
        assert_eq!(m.status, Status::Up);
    }

    #[test]
    fn interval_check_values() {
        let r = rules(r#"{"interval":"5m","grace":"1m"}"#);
        let mut s = success("2026-01-01T12:00:00Z");
        ping(&mut s, "2026-01-01T12:00:00Z", PingKind::Success, Some(7));
        let m = measure(&r, &s, false, &[], &[], t("2026-01-01T12:07:00Z"));
        assert_eq!(m.status, Status::Down);
        assert!(!m.up());
        assert_eq!(m.last_success, Some(t("2026-01-01T12:00:00Z")));
        assert_eq!(m.interval, Some(Duration::minutes(5)));
        assert_eq!(m.grace, Some(Duration::minutes(1)));
        assert_eq!(m.staleness, Some(Duration::minutes(7)));
        assert_eq!(m.down_after, Some(Duration::minutes(6)));
        assert_eq!(m.last_items, Some(7));
        assert!(m.active && !m.running);
    }

    #[test]
    fn cron_down_after_is_the_time_to_the_due_fire_time_plus_grace() {
        // Daily at 03:00; a success at 01:00 is due at 03:00 (2h), grace one day.
        let r = rules(r#"{"cron":"0 3 * * *"}"#);
        let s = success("2026-01-01T01:00:00Z");
        let m = measure(&r, &s, false, &[], &[], t("2026-01-01T02:00:00Z"));
        assert_eq!(m.interval, Some(Duration::hours(24)));
        assert_eq!(m.down_after, Some(Duration::hours(26)));
        assert_eq!(m.staleness, Some(Duration::hours(1)));
    }

    #[test]
    fn new_and_paused_checks_are_not_judged() {
        let r = rules(r#"{"interval":"1m"}"#);
        let m = measure(
            &r,
            &Summary::default(),
            false,
            &[],
            &[],
            t("2026-01-01T00:00:00Z"),
        );
        assert_eq!(m.status, Status::New);
        assert!(m.up());
        assert_eq!((m.staleness, m.down_after), (None, None));
        assert_eq!(m.interval, Some(Duration::minutes(1)));
        assert_eq!(m.grace, Some(Duration::minutes(1)));

        let s = success("2026-01-01T00:00:00Z");
        let m = measure(&r, &s, true, &[], &[], t("2026-01-01T01:00:00Z"));
        assert_eq!(m.status, Status::Paused);
        assert_eq!(m.staleness, Some(Duration::hours(1)));
        assert_eq!(
            m.down_after, None,
            "no threshold: a paused check never goes down"
        );
    }

    #[test]
    fn a_check_that_only_failed_is_measured_from_its_failure() {
        let r = rules(r#"{"interval":"1m","failure_threshold":3}"#);
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T00:00:00Z", PingKind::Fail, None);
        let m = measure(&r, &s, false, &[], &[], t("2026-01-01T00:01:30Z"));
        assert_eq!(m.last_success, None);
        assert_eq!(m.staleness, Some(Duration::seconds(90)));
        assert_eq!(m.down_after, Some(Duration::minutes(2)));
    }

    #[test]
    fn zero_items_streak_in_active_time() {
        let r = rules(r#"{"interval":"1h","active_hours":[{"start":"08:00","end":"20:00"}]}"#);
        let mut s = Summary::default();
        ping(&mut s, "2026-01-01T18:00:00Z", PingKind::Success, Some(3));
        ping(&mut s, "2026-01-01T19:00:00Z", PingKind::Success, Some(0));
        let m = measure(&r, &s, false, &[], &[], t("2026-01-02T09:00:00Z"));
        assert_eq!(m.zero_items, Duration::hours(2));
        assert_eq!(m.last_items, Some(0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// A rule `staleness >= down_after` fires exactly when the evaluator
        /// says down (overdue), for any interval, grace and active window.
        #[test]
        fn staleness_reaches_down_after_iff_down(
            interval in 1u64..7200,
            grace in prop::option::of(1u64..7200),
            window in prop::option::of((0u16..1440, 0u16..1440)),
            last in 0i64..86_400,
            offset in 0i64..400_000,
        ) {
            let mut json = format!(r#"{{"interval":"{interval}s""#);
            if let Some(g) = grace {
                json.push_str(&format!(r#","grace":"{g}s""#));
            }
            if let Some((a, b)) = window.filter(|(a, b)| a != b) {
                json.push_str(&format!(
                    r#","active_hours":[{{"start":"{:02}:{:02}","end":"{:02}:{:02}"}}]"#,
                    a / 60, a % 60, b / 60, b % 60
                ));
            }
            json.push('}');
            let r = rules(&json);
            let base = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
            let s = success(&(base + Duration::seconds(last)).to_rfc3339());
            let now = base + Duration::seconds(last + offset);
            let m = measure(&r, &s, false, &[], &[], now);
            let fires = m.staleness.unwrap() >= m.down_after.unwrap();
            prop_assert_eq!(fires, m.status == Status::Down);
        }
    }
}
