//! Blind spots (SPEC §6.2): an unobserved span (SPEC §3.5) in which no
//! replica accepted pings, and the checks that were expected to check in
//! during it and so could not be judged.
//!
//! - [`is_blind_spot`]: whether a recorded span is one. A span the heartbeat
//!   records around a wall-clock step forward, while a server ran, is
//!   unobserved time too, but the monotonic clock moved far less than the span
//!   claims: taking out what the steps skipped leaves less than the gap, so it
//!   is no blind spot.
//! - [`expected_in`]: the first instant inside the span at which a check was
//!   expected to check in, judged as if the span had been observed:
//!   - an interval check: its due instant (the reference + the interval in
//!     active, observed time, as the evaluator counts it);
//!   - a cron check: a fire time after the reference that lies in active
//!     hours (the job is expected at every fire time; one already missed
//!     before the span does not make the later ones expected less);
//!   - the reference is the last success, else the last failure, both before
//!     the span ended, as for the evaluator (a span begins at the last
//!     heartbeat, and pings accepted after it, before the last replica
//!     stopped, are inside it: a check-in expected after such a ping and
//!     still inside the span is listed); a check with neither (`new`) is not
//!     judged by its schedule, so none of its check-ins was expected; a paused
//!     check is not judged at all.
//! - [`Listing`]: the checks a notice names: the first [`LISTED_MAX`] by
//!   expected instant, and how many in all, so that a deployment with a
//!   million checks sends a notice of a sane size.
//!
//! Pure: spans, references and instants are passed in.

use std::collections::BinaryHeap;

use chrono::{DateTime, Duration, Utc};

use super::active_hours::ActiveClock;
use super::evaluate::{instant, Expect, Rules, Span};
use super::ping::UnixMs;
use super::timeline::Observation;

/// How many checks a blind spot's notice names; the others are counted.
pub const LISTED_MAX: usize = 100;

/// Fire times looked at per check and span, at most (a safety net: the
/// search skips quiet time a window at a time).
const MAX_FIRES: usize = 10_000;

/// Whether the unobserved span `[start, end)` is a blind spot: longer than
/// `gap` once the spans wall-clock steps forward skipped (`skipped`) are
/// taken out, that is, in time that really passed.
pub fn is_blind_spot(span: (UnixMs, UnixMs), skipped: &[(UnixMs, UnixMs)], gap: i64) -> bool {
    let (start, end) = span;
    let mut inside: Vec<(UnixMs, UnixMs)> = skipped
        .iter()
        .map(|&(a, b)| (a.max(start), b.min(end)))
        .filter(|(a, b)| a < b)
        .collect();
    inside.sort_unstable();
    let mut stepped = 0i64;
    let mut reached = start;
    for (a, b) in inside {
        let a = a.max(reached);
        if b > a {
            stepped = stepped.saturating_add(b - a);
            reached = b;
        }
    }
    end.saturating_sub(start).saturating_sub(stepped) > gap
}

/// The first instant in `span` at which a check was expected to check in,
/// if any (see the module documentation). `last_success` and
/// `last_failure` are the check's latest before the span's end; `observation`
/// holds the other unobserved spans and the slewed ones (spans overlapping
/// `span` are ignored: the check is judged as if `span` had been observed).
pub fn expected_in(
    rules: &Rules,
    last_success: Option<UnixMs>,
    last_failure: Option<UnixMs>,
    paused: bool,
    span: Span,
    observation: &Observation,
) -> Option<DateTime<Utc>> {
    let (start, end) = span;
    if paused || start >= end {
        return None;
    }
    let reference = instant(last_success.or(last_failure)?)?;
    match &rules.expect {
        Expect::Interval(interval) => {
            let others: Vec<Span> = observation
                .unobserved
                .iter()
                .copied()
                .filter(|(a, b)| *b <= start || *a >= end)
                .collect();
            let clock = ActiveClock {
                hours: rules.hours.as_deref(),
                unobserved: &others,
                slewed: &observation.slewed,
            };
            clock
                .advance(reference, *interval)
                .filter(|due| *due >= start && *due < end)
        }
        Expect::Cron(cron) => {
            let from = reference.max(start - Duration::milliseconds(1));
            let mut fire = cron.next_after(from)?;
            for _ in 0..MAX_FIRES {
                if fire >= end {
                    return None;
                }
                let Some(hours) = rules.hours.as_deref() else {
                    return Some(fire);
                };
                if hours.is_active(fire) {
                    return Some(fire);
                }
                // Quiet here: the next fire time from where a window opens.
                let opens = hours.next_change(fire)?;
                if opens >= end {
                    return None;
                }
                fire = cron.next_after(opens - Duration::milliseconds(1))?;
            }
            None
        }
    }
}

/// The checks a notice names: those with the [`LISTED_MAX`] earliest
/// expected check-ins (ties by name), and how many were offered in all.
#[derive(Debug)]
pub struct Listing {
    max: usize,
    /// The kept ones, the latest on top (so it is the one to drop).
    kept: BinaryHeap<(DateTime<Utc>, String)>,
    total: usize,
}

impl Default for Listing {
    fn default() -> Self {
        Listing::new(LISTED_MAX)
    }
}

impl Listing {
    /// A listing that keeps at most `max` checks.
    pub fn new(max: usize) -> Listing {
        Listing {
            max,
            kept: BinaryHeap::with_capacity(max.min(1024) + 1),
            total: 0,
        }
    }

    /// A check whose expected check-in at `expected` fell inside the span.
    pub fn offer(&mut self, expected: DateTime<Utc>, check: String) {
        self.total += 1;
        if self.max == 0 {
            return;
        }
        if self.kept.len() < self.max {
            self.kept.push((expected, check));
        } else if self
            .kept
            .peek()
            .is_some_and(|top| (expected, check.as_str()) < (top.0, top.1.as_str()))
        {
            self.kept.pop();
            self.kept.push((expected, check));
        }
    }

    /// How many checks were offered.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The kept checks, earliest expected first.
    pub fn into_sorted(self) -> Vec<(DateTime<Utc>, String)> {
        self.kept.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::{CheckInput, CheckSpec};
    use crate::domain::evaluate::evaluate_in;
    use crate::domain::ping::{PingFacts, PingKind, Summary, Thresholds};
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn ms(s: &str) -> UnixMs {
        t(s).timestamp_millis()
    }

    fn rules(json: &str) -> Rules {
        let input: CheckInput = serde_json::from_str(json).unwrap();
        Rules::from_spec(&CheckSpec::from_input(input).unwrap()).unwrap()
    }

    fn span(a: &str, b: &str) -> Span {
        (t(a), t(b))
    }

    fn none() -> Observation {
        Observation::default()
    }

    /// Expected in the span, with a last success at `success`.
    fn after_success(r: &Rules, success: &str, s: Span) -> Option<DateTime<Utc>> {
        expected_in(r, Some(ms(success)), None, false, s, &none())
    }

    // --- which spans are blind spots ---

    const GAP: i64 = 2_000;

    #[test]
    fn an_outage_longer_than_the_gap_is_a_blind_spot() {
        assert!(is_blind_spot((0, 2_001), &[], GAP));
        assert!(is_blind_spot((0, 3_600_000), &[], GAP));
    }

    #[test]
    fn a_span_no_longer_than_the_gap_is_none() {
        // The heartbeat records only longer spans; the rule agrees at the edge.
        assert!(!is_blind_spot((0, 2_000), &[], GAP));
        assert!(!is_blind_spot((5, 5), &[], GAP));
    }

    #[test]
    fn a_step_forward_while_running_is_no_blind_spot() {
        // Beat at 0, the clock jumps 2 h at 400 ms of real time, the next
        // beat comes a period (1 s) of real time later.
        let h2 = 7_200_000;
        let span = (0, 1_000 + h2);
        assert!(!is_blind_spot(span, &[(400, 400 + h2)], GAP));
        // A step found only after a delayed beat: still under the gap.
        assert!(!is_blind_spot((0, 1_900 + h2), &[(1_500, 1_500 + h2)], GAP));
    }

    #[test]
    fn a_step_inside_a_real_outage_leaves_a_blind_spot() {
        // The database was down 10 minutes and the clock stepped 2 h meanwhile.
        let h2 = 7_200_000;
        let span = (0, 600_000 + h2);
        assert!(is_blind_spot(span, &[(300_000, 300_000 + h2)], GAP));
    }

    #[test]
    fn skipped_spans_outside_the_span_or_overlapping_count_once() {
        let h2 = 7_200_000;
        // Outside: nothing taken out.
        assert!(is_blind_spot((0, 10_000), &[(-h2, -1), (20_000, h2)], GAP));
        // Overlapping each other and the edges: taken out once, clipped.
        let skipped = [(-500, 4_000), (3_000, 9_000), (8_500, 20_000)];
        assert!(!is_blind_spot((0, 10_000), &skipped, GAP));
        assert!(is_blind_spot(
            (0, 12_100),
            &[(-500, 4_000), (3_000, 10_000)],
            GAP
        ));
    }

    // --- interval checks ---

    #[test]
    fn an_interval_check_due_inside_the_span_is_expected_at_its_due_instant() {
        let r = rules(r#"{"interval":"1h"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T04:00:00Z");
        assert_eq!(
            after_success(&r, "2026-12-05T02:30:00Z", s),
            Some(t("2026-12-05T03:30:00Z"))
        );
    }

    #[test]
    fn the_span_is_half_open() {
        let r = rules(r#"{"interval":"1h"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T04:00:00Z");
        // Due exactly at the start: inside.
        assert_eq!(
            after_success(&r, "2026-12-05T02:00:00Z", s),
            Some(t("2026-12-05T03:00:00Z"))
        );
        // Due exactly at the end: the server was back.
        assert_eq!(after_success(&r, "2026-12-05T03:00:00Z", s), None);
    }

    #[test]
    fn an_interval_check_due_before_or_after_the_span_is_not_listed() {
        let r = rules(r#"{"interval":"1h"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T03:10:00Z");
        // Already late before the outage: its check-in was expected before.
        assert_eq!(after_success(&r, "2026-12-05T01:00:00Z", s), None);
        // Due after the server came back.
        assert_eq!(after_success(&r, "2026-12-05T02:30:00Z", s), None);
    }

    #[test]
    fn a_check_never_pinged_or_paused_is_not_listed() {
        let r = rules(r#"{"interval":"1m"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T05:00:00Z");
        assert_eq!(expected_in(&r, None, None, false, s, &none()), None);
        let last = Some(ms("2026-12-05T02:59:30Z"));
        assert_eq!(expected_in(&r, last, None, true, s, &none()), None);
        assert!(expected_in(&r, last, None, false, s, &none()).is_some());
    }

    #[test]
    fn without_a_success_the_last_failure_is_the_reference() {
        let r = rules(r#"{"interval":"10m"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T03:30:00Z");
        let failed = Some(ms("2026-12-05T02:55:00Z"));
        assert_eq!(
            expected_in(&r, None, failed, false, s, &none()),
            Some(t("2026-12-05T03:05:00Z"))
        );
        // A success wins over a later failure, as in the evaluator.
        let success = Some(ms("2026-12-05T02:00:00Z"));
        assert_eq!(expected_in(&r, success, failed, false, s, &none()), None);
    }

    #[test]
    fn quiet_time_pushes_an_interval_checks_due_instant() {
        // Active 09:00–17:00 UTC; a 2 h job that last ran at 16:00 is due
        // at 10:00 the next morning (one hour before closing, one after opening).
        let r = rules(
            r#"{"interval":"2h","active_hours":[{"start":"09:00","end":"17:00","days":["mon-sun"]}]}"#,
        );
        let night = span("2026-12-05T17:00:00Z", "2026-12-06T09:30:00Z");
        assert_eq!(after_success(&r, "2026-12-05T16:00:00Z", night), None);
        let morning = span("2026-12-06T09:30:00Z", "2026-12-06T11:00:00Z");
        assert_eq!(
            after_success(&r, "2026-12-05T16:00:00Z", morning),
            Some(t("2026-12-06T10:00:00Z"))
        );
    }

    #[test]
    fn an_earlier_unobserved_span_pushes_the_due_instant_and_the_span_itself_does_not() {
        let r = rules(r#"{"interval":"1h"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T04:00:00Z");
        let earlier = span("2026-12-05T02:00:00Z", "2026-12-05T02:20:00Z");
        let observation = Observation {
            unobserved: vec![earlier, s],
            slewed: Vec::new(),
        };
        // Success at 01:50: 10 min before the earlier outage, 50 min after it.
        assert_eq!(
            expected_in(
                &r,
                Some(ms("2026-12-05T01:50:00Z")),
                None,
                false,
                s,
                &observation
            ),
            Some(t("2026-12-05T03:10:00Z"))
        );
    }

    #[test]
    fn slewed_time_counts_twice_as_the_evaluator_counts_it() {
        let r = rules(r#"{"interval":"1h"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T04:00:00Z");
        let observation = Observation {
            unobserved: Vec::new(),
            slewed: vec![span("2026-12-05T02:00:00Z", "2026-12-05T02:20:00Z")],
        };
        // 40 min of the hour pass by 02:20, 20 more by 02:40.
        assert_eq!(
            expected_in(
                &r,
                Some(ms("2026-12-05T02:00:00Z")),
                None,
                false,
                s,
                &observation
            ),
            None
        );
        assert_eq!(
            expected_in(
                &r,
                Some(ms("2026-12-05T02:10:00Z")),
                None,
                false,
                s,
                &observation
            ),
            Some(t("2026-12-05T03:00:00Z"))
        );
    }

    // --- cron checks ---

    #[test]
    fn a_cron_check_is_expected_at_a_fire_time_inside_the_span() {
        let r = rules(r#"{"cron":"0 3 * * *"}"#);
        let s = span("2026-12-05T02:50:00Z", "2026-12-05T03:10:00Z");
        assert_eq!(
            after_success(&r, "2026-12-04T03:00:05Z", s),
            Some(t("2026-12-05T03:00:00Z"))
        );
        // No fire time inside.
        let s = span("2026-12-05T03:01:00Z", "2026-12-05T03:10:00Z");
        assert_eq!(after_success(&r, "2026-12-04T03:00:05Z", s), None);
    }

    #[test]
    fn a_cron_check_overdue_before_the_span_is_expected_again_at_the_next_fire_time() {
        // Missed yesterday's 03:00 already: today's 03:00 is expected too.
        let r = rules(r#"{"cron":"0 3 * * *"}"#);
        let s = span("2026-12-05T02:00:00Z", "2026-12-05T04:00:00Z");
        assert_eq!(
            after_success(&r, "2026-12-03T03:00:05Z", s),
            Some(t("2026-12-05T03:00:00Z"))
        );
    }

    #[test]
    fn a_cron_span_over_several_fire_times_names_the_first() {
        let r = rules(r#"{"cron":"*/15 * * * *"}"#);
        let s = span("2026-12-05T03:05:00Z", "2026-12-05T04:05:00Z");
        assert_eq!(
            after_success(&r, "2026-12-05T03:00:02Z", s),
            Some(t("2026-12-05T03:15:00Z"))
        );
    }

    #[test]
    fn a_cron_fire_time_at_the_spans_start_is_inside_and_at_its_end_outside() {
        let r = rules(r#"{"cron":"0 * * * *"}"#);
        assert_eq!(
            after_success(
                &r,
                "2026-12-05T02:00:01Z",
                span("2026-12-05T03:00:00Z", "2026-12-05T03:30:00Z")
            ),
            Some(t("2026-12-05T03:00:00Z"))
        );
        assert_eq!(
            after_success(
                &r,
                "2026-12-05T02:00:01Z",
                span("2026-12-05T02:30:00Z", "2026-12-05T03:00:00Z")
            ),
            None
        );
    }

    #[test]
    fn a_check_that_succeeded_inside_the_span_is_expected_after_that_success() {
        // A span starts at the last heartbeat; a ping the last replica
        // accepted after it, before it stopped, is inside: only the
        // check-ins expected after it count.
        let r = rules(r#"{"interval":"3s"}"#);
        let s = span("2026-12-05T03:00:00Z", "2026-12-05T03:00:10Z");
        assert_eq!(
            after_success(&r, "2026-12-05T03:00:00.500Z", s),
            Some(t("2026-12-05T03:00:03.500Z"))
        );
        assert_eq!(after_success(&r, "2026-12-05T03:00:08Z", s), None);
        let r = rules(r#"{"cron":"0 * * * *"}"#);
        let s = span("2026-12-05T02:30:00Z", "2026-12-05T05:30:00Z");
        assert_eq!(
            after_success(&r, "2026-12-05T04:00:10Z", s),
            Some(t("2026-12-05T05:00:00Z"))
        );
        assert_eq!(after_success(&r, "2026-12-05T05:00:10Z", s), None);
    }

    #[test]
    fn a_cron_fire_time_in_quiet_hours_is_not_expected() {
        // Every hour, active 09:00–17:00 UTC: a night outage expects nothing,
        // one that runs into the morning expects the 09:00 run.
        let r = rules(
            r#"{"cron":"0 * * * *","active_hours":[{"start":"09:00","end":"17:00","days":["mon-sun"]}]}"#,
        );
        let night = span("2026-12-05T17:30:00Z", "2026-12-06T08:59:00Z");
        assert_eq!(after_success(&r, "2026-12-05T16:00:05Z", night), None);
        let into_morning = span("2026-12-05T17:30:00Z", "2026-12-06T10:30:00Z");
        assert_eq!(
            after_success(&r, "2026-12-05T16:00:05Z", into_morning),
            Some(t("2026-12-06T09:00:00Z"))
        );
    }

    #[test]
    fn a_per_second_cron_over_a_long_quiet_span_is_found_without_spinning() {
        // A fire every second, quiet for weeks (weekdays only, the span a
        // long weekend plus), found by skipping a window at a time.
        let r = rules(
            r#"{"cron":"* * * * * *","active_hours":[{"start":"09:00","end":"09:01","days":["mon"]}]}"#,
        );
        // 2026-12-05 is a Saturday; the next Monday 09:00 is 12-07.
        let s = span("2026-12-05T00:00:00Z", "2026-12-20T00:00:00Z");
        assert_eq!(
            after_success(&r, "2026-12-04T00:00:00Z", s),
            Some(t("2026-12-07T09:00:00Z"))
        );
    }

    #[test]
    fn cron_fire_times_follow_the_checks_time_zone() {
        // 03:00 in Shanghai is 19:00Z the day before.
        let r = rules(r#"{"cron":"0 3 * * *","tz":"Asia/Shanghai"}"#);
        let s = span("2026-12-04T18:30:00Z", "2026-12-04T19:30:00Z");
        assert_eq!(
            after_success(&r, "2026-12-03T19:00:05Z", s),
            Some(t("2026-12-04T19:00:00Z"))
        );
    }

    // --- the listing ---

    #[test]
    fn the_listing_keeps_the_earliest_and_counts_all() {
        let mut l = Listing::new(3);
        let base = t("2026-12-05T03:00:00Z");
        for (i, name) in ["e", "a", "d", "b", "c"].iter().enumerate() {
            // e at +0, a at +1, d at +2, b at +3, c at +4 minutes.
            l.offer(base + Duration::minutes(i as i64), name.to_string());
        }
        assert_eq!(l.total(), 5);
        let kept: Vec<String> = l.into_sorted().into_iter().map(|(_, n)| n).collect();
        assert_eq!(kept, ["e", "a", "d"]);
    }

    #[test]
    fn ties_in_the_listing_go_by_name() {
        let mut l = Listing::new(2);
        let at = t("2026-12-05T03:00:00Z");
        for name in ["c", "b", "a"] {
            l.offer(at, name.to_string());
        }
        let kept: Vec<String> = l.into_sorted().into_iter().map(|(_, n)| n).collect();
        assert_eq!(kept, ["a", "b"]);
    }

    #[test]
    fn a_million_checks_keep_a_hundred() {
        let mut l = Listing::default();
        let base = t("2026-12-05T03:00:00Z");
        for i in 0..1_000_000i64 {
            // In reverse: every offer displaces the latest kept one.
            l.offer(
                base + Duration::milliseconds(1_000_000 - i),
                format!("c{i}"),
            );
        }
        assert_eq!(l.total(), 1_000_000);
        let kept = l.into_sorted();
        assert_eq!(kept.len(), LISTED_MAX);
        assert_eq!(kept[0].1, "c999999");
        assert_eq!(kept[99].1, "c999900");
    }

    #[test]
    fn an_empty_listing_keeps_nothing() {
        let mut l = Listing::new(0);
        l.offer(t("2026-12-05T03:00:00Z"), "a".into());
        assert_eq!(l.total(), 1);
        assert!(l.into_sorted().is_empty());
    }

    // --- properties ---

    fn success_summary(at: UnixMs) -> Summary {
        let mut s = Summary::default();
        s.apply(
            &PingFacts {
                at,
                kind: PingKind::Success,
                items: None,
                rid: None,
            },
            Thresholds::default(),
            &mut || 1,
        );
        s
    }

    const T0: i64 = 1_796_428_800_000; // 2026-12-05T00:00:00Z
    const MIN: i64 = 60_000;

    proptest! {
        /// An interval check is listed exactly when the evaluator, had the
        /// span been observed, would have put its due instant inside it.
        #[test]
        fn interval_checks_agree_with_the_evaluators_due_instant(
            interval_min in 1i64..600,
            success_min in 0i64..1_000,
            start_min in 0i64..2_000,
            len_min in 1i64..600,
            quiet in any::<bool>(),
            earlier in proptest::option::of((0i64..1_000, 1i64..120)),
        ) {
            let hours = if quiet {
                r#","active_hours":[{"start":"08:00","end":"20:00","days":["mon-fri"]}]"#
            } else {
                ""
            };
            let r = rules(&format!(r#"{{"interval":"{interval_min}m"{hours}}}"#));
            let success = T0 + success_min * MIN;
            let s = (
                instant(T0 + start_min * MIN).unwrap(),
                instant(T0 + (start_min + len_min) * MIN).unwrap(),
            );
            let mut unobserved = Vec::new();
            if let Some((a, l)) = earlier {
                let e = (instant(T0 + a * MIN).unwrap(), instant(T0 + (a + l) * MIN).unwrap());
                if e.1 <= s.0 || e.0 >= s.1 {
                    unobserved.push(e);
                }
            }
            unobserved.sort();
            let observation = Observation { unobserved: unobserved.clone(), slewed: Vec::new() };
            let got = expected_in(&r, Some(success), None, false, s, &observation);
            let due = evaluate_in(&r, &success_summary(success), false, &unobserved, &[], s.1).due;
            let want = due.filter(|d| *d >= s.0 && *d < s.1);
            prop_assert_eq!(got, want);
        }

        /// A cron check is listed with a fire time inside the span, after
        /// its last success, in active hours, and none is skipped before it.
        #[test]
        fn cron_checks_name_the_first_active_fire_time_inside(
            minute in 0u32..60,
            every_hours in 1u32..12,
            success_min in 0i64..3_000,
            start_min in 0i64..3_000,
            len_min in 1i64..2_000,
            quiet in any::<bool>(),
        ) {
            let hours = if quiet {
                r#","active_hours":[{"start":"22:00","end":"06:00","days":["mon-sun"]}]"#
            } else {
                ""
            };
            let expr = format!("{minute} */{every_hours} * * *");
            let r = rules(&format!(r#"{{"cron":"{expr}"{hours}}}"#));
            let Expect::Cron(cron) = &r.expect else { unreachable!() };
            let success = T0 + success_min * MIN;
            let s = (
                instant(T0 + start_min * MIN).unwrap(),
                instant(T0 + (start_min + len_min) * MIN).unwrap(),
            );
            let got = expected_in(&r, Some(success), None, false, s, &none());
            // The same by walking every fire time.
            let mut want = None;
            let mut fire = cron.next_after(instant(success).unwrap()).unwrap();
            while fire < s.1 {
                let active = r.hours.as_deref().is_none_or(|h| h.is_active(fire));
                if fire >= s.0 && active {
                    want = Some(fire);
                    break;
                }
                fire = cron.next_after(fire).unwrap();
            }
            prop_assert_eq!(got, want);
        }

        /// Whatever is offered, the listing keeps the earliest `max` (by
        /// instant, then name) in order, and counts everything.
        #[test]
        fn the_listing_is_the_sorted_prefix(
            offers in proptest::collection::vec((0i64..50, "[a-e]{1,2}"), 0..60),
            max in 0usize..10,
        ) {
            let mut l = Listing::new(max);
            for (at, name) in &offers {
                l.offer(instant(T0 + at * 1_000).unwrap(), name.clone());
            }
            prop_assert_eq!(l.total(), offers.len());
            let mut all: Vec<(DateTime<Utc>, String)> = offers
                .iter()
                .map(|(at, name)| (instant(T0 + at * 1_000).unwrap(), name.clone()))
                .collect();
            all.sort();
            all.truncate(max);
            prop_assert_eq!(l.into_sorted(), all);
        }

        /// Taking skipped spans out never makes a span more blind, and
        /// without any the rule is the heartbeat's own (longer than the gap).
        #[test]
        fn skipped_time_only_ever_clears_a_span(
            start in 0i64..100_000,
            len in 0i64..100_000,
            skipped in proptest::collection::vec((0i64..200_000, 0i64..50_000), 0..5),
            gap in 0i64..10_000,
        ) {
            let span = (start, start + len);
            prop_assert_eq!(is_blind_spot(span, &[], gap), len > gap);
            let skipped: Vec<(i64, i64)> = skipped.into_iter().map(|(a, l)| (a, a + l)).collect();
            if is_blind_spot(span, &skipped, gap) {
                prop_assert!(is_blind_spot(span, &[], gap));
            }
        }
    }
}
