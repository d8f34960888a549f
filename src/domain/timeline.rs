//! The server's timeline (SPEC §12, §6.2): the instants it stamps, stores and
//! shows. It follows the wall clock, and it notices when the wall clock steps
//! (NTP correcting a clock, an operator's `date -s`, a VM restored from a
//! snapshot) by comparing how far the wall clock moved with how far the
//! monotonic clock moved between two readings.
//!
//! - A **forward** step: the timeline jumps with the wall clock. The span it
//!   skipped is time in which no ping could arrive; the heartbeat records it as
//!   unobserved (SPEC §3.5), so it counts toward no limit.
//! - A **backward** step: instants already shown must not move back, and the
//!   limits must keep counting the time that really passes. So the timeline
//!   does not go back with the wall clock: from the instant it had reached
//!   (`at`), it runs at 1/[`SLEW_RATE`] of real speed until the wall clock
//!   catches up with it, and then follows the wall clock again (chrony and
//!   ntpd slew a small error the same way). Every instant stays in order, the
//!   gap to the wall clock closes after `SLEW_RATE / (SLEW_RATE - 1)` times
//!   the step, and a duration measured across the slewed span counts each of
//!   its milliseconds `SLEW_RATE` times ([`Timeline::slewed`]), which is the
//!   time that really passed.
//!
//! Pure: readings of both clocks are passed in. The server keeps one
//! [`Timeline`] (`crate::clock`); the slews are stored, so a restart continues
//! the same timeline.

use chrono::{DateTime, Utc};

use super::ping::UnixMs;

/// A disagreement between the wall clock's and the monotonic clock's
/// progress larger than this, in milliseconds, is a step. Smaller ones are
/// absorbed: the timeline never moves back, and a small forward jump counts
/// as the time it claims.
pub const STEP_THRESHOLD_MS: i64 = 2_000;

/// While catching up after a backward step, one millisecond of the timeline
/// is this many milliseconds of real time.
pub const SLEW_RATE: i32 = 2;

const RATE: i64 = SLEW_RATE as i64;

/// One reading of the two clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The wall clock, Unix milliseconds.
    pub wall: UnixMs,
    /// The monotonic clock, milliseconds from any fixed origin.
    pub mono: i64,
}

/// Which way the wall clock stepped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

impl Direction {
    /// The metric label and log spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
    }
}

/// A step of the wall clock, as found between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub direction: Direction,
    /// How far the wall clock moved more (forward) or less (backward) than
    /// the monotonic clock, in milliseconds; always positive.
    pub size_ms: i64,
    /// The timeline's instant just after the step.
    pub at: UnixMs,
    /// The wall clock just after the step.
    pub wall: UnixMs,
}

/// Whether the wall clock stepped between `prev` and `now`: its progress
/// differs from the monotonic clock's by more than [`STEP_THRESHOLD_MS`].
pub fn detect(prev: Reading, now: Reading) -> Option<(Direction, i64)> {
    let expected = prev.wall.saturating_add(now.mono.saturating_sub(prev.mono));
    let drift = now.wall.saturating_sub(expected);
    if drift > STEP_THRESHOLD_MS {
        Some((Direction::Forward, drift))
    } else if drift < -STEP_THRESHOLD_MS {
        Some((Direction::Backward, drift.saturating_neg()))
    } else {
        None
    }
}

/// A backward step the timeline slews over: when the wall clock read `wall`,
/// the timeline stood at `at` (later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Slew {
    pub at: UnixMs,
    pub wall: UnixMs,
}

impl Slew {
    /// Where the timeline meets the wall clock again (`at` plus the step
    /// divided by `SLEW_RATE - 1`).
    fn natural_end(&self) -> UnixMs {
        let size = self.at.saturating_sub(self.wall).max(0);
        self.at.saturating_add(size / (RATE - 1))
    }

    /// The timeline's instant for a wall-clock reading taken after this step.
    fn map(&self, wall: UnixMs) -> UnixMs {
        let slewed = self
            .at
            .saturating_add(wall.saturating_sub(self.wall).div_euclid(RATE));
        wall.max(slewed)
    }
}

/// The timeline: the slews so far and the latest reading.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// In order of `at` (the timeline never moves back, so also in the order
    /// they happened).
    slews: Vec<Slew>,
    /// The spans forward steps skipped, `[before, after)`, in order.
    skipped: Vec<(UnixMs, UnixMs)>,
    last: Option<Reading>,
    /// The latest instant handed out.
    now: UnixMs,
}

impl Timeline {
    /// A timeline with no slews, which follows the wall clock.
    pub const fn new() -> Timeline {
        Timeline {
            slews: Vec::new(),
            skipped: Vec::new(),
            last: None,
            now: i64::MIN,
        }
    }

    /// Adds slews recorded earlier (by an earlier run of the server), keeping
    /// them in order and each once.
    pub fn install(&mut self, slews: impl IntoIterator<Item = Slew>) {
        self.slews.extend(slews);
        self.slews.sort();
        self.slews.dedup_by_key(|s| s.at);
    }

    /// The slews, in order.
    pub fn slews(&self) -> &[Slew] {
        &self.slews
    }

    /// The timeline's instant for a wall-clock reading, from the latest slew.
    fn map(&self, wall: UnixMs) -> UnixMs {
        self.slews.last().map_or(wall, |s| s.map(wall))
    }

    /// Takes a reading of both clocks: the instant now on the timeline, and
    /// the step the wall clock made since the previous reading, if any.
    /// The instants returned never decrease.
    pub fn observe(&mut self, r: Reading) -> (UnixMs, Option<Step>) {
        let found = self.last.and_then(|prev| detect(prev, r));
        if let Some((Direction::Backward, size)) = found {
            // Where the timeline would be now had the wall clock not stepped.
            let at = self.map(r.wall.saturating_add(size)).max(self.now);
            self.slews.push(Slew { at, wall: r.wall });
        }
        let before = self.now;
        self.last = Some(r);
        self.now = self.now.max(self.map(r.wall));
        if let Some((Direction::Forward, size)) = found {
            // No ping could arrive in the span skipped: it is unobserved.
            let from = self.map(r.wall.saturating_sub(size)).max(before);
            if self.now > from {
                self.skipped.push((from, self.now));
            }
        }
        let step = found.map(|(direction, size_ms)| Step {
            direction,
            size_ms,
            at: self.now,
            wall: r.wall,
        });
        (self.now, step)
    }

    /// The first reading of a server that starts on stored state whose last
    /// heartbeat was at `beat`. A wall clock behind it stepped back while
    /// the server was not running; the server may have recorded instants up
    /// to `margin` after its last heartbeat (it beats every period), so the
    /// timeline resumes there. Behind by more than the threshold, that is a
    /// backward step, slewed over like one seen live; by less, the timeline
    /// only holds still until the wall clock passes it.
    pub fn resume(
        &mut self,
        beat: Option<UnixMs>,
        margin: i64,
        r: Reading,
    ) -> (UnixMs, Option<Step>) {
        let (now, _) = self.observe(r);
        let Some(beat) = beat.filter(|b| *b > now) else {
            return (now, None);
        };
        let at = beat.saturating_add(margin.max(0));
        self.now = at;
        if beat - now <= STEP_THRESHOLD_MS {
            return (at, None);
        }
        self.slews.push(Slew { at, wall: r.wall });
        let step = Step {
            direction: Direction::Backward,
            size_ms: at - now,
            at,
            wall: r.wall,
        };
        (at, Some(step))
    }

    /// The spans forward steps skipped, in order: unobserved time, known at
    /// once (the heartbeat records a span around each too, a little later).
    pub fn skipped(&self) -> &[(UnixMs, UnixMs)] {
        &self.skipped
    }

    /// The spans of the timeline, `[start, end)`, over which it ran at
    /// 1/[`SLEW_RATE`] of real speed: in order, not overlapping. A span ends
    /// where the timeline met the wall clock, or where the next slew began.
    pub fn slewed(&self) -> Vec<(UnixMs, UnixMs)> {
        let mut spans = Vec::with_capacity(self.slews.len());
        for (i, s) in self.slews.iter().enumerate() {
            let mut end = s.natural_end();
            if let Some(next) = self.slews.get(i + 1) {
                end = end.min(next.at);
            }
            if end > s.at {
                spans.push((s.at, end));
            }
        }
        spans
    }

    /// The wall clock's reading when the timeline stood at `at`: `at` itself
    /// outside slewed spans. For showing when a ping really arrived by the
    /// wall clock (SPEC §12: pings carry the stepped time).
    pub fn wall_of(&self, at: UnixMs) -> UnixMs {
        let i = self.slews.partition_point(|s| s.at <= at);
        let Some(s) = i.checked_sub(1).map(|i| self.slews[i]) else {
            return at;
        };
        let end = self.slewed_end(i - 1);
        if at < end {
            s.wall.saturating_add((at - s.at).saturating_mul(RATE))
        } else {
            at
        }
    }

    fn slewed_end(&self, i: usize) -> UnixMs {
        let end = self.slews[i].natural_end();
        self.slews.get(i + 1).map_or(end, |n| end.min(n.at))
    }

    /// Real milliseconds between two instants of the timeline (zero if
    /// `to <= from`): slewed spans count [`SLEW_RATE`] times.
    pub fn real_between(&self, from: UnixMs, to: UnixMs) -> i64 {
        if to <= from {
            return 0;
        }
        let extra: i64 = self
            .slewed()
            .into_iter()
            .map(|(a, b)| (b.min(to) - a.max(from)).max(0))
            .sum();
        (to - from).saturating_add(extra.saturating_mul(RATE - 1))
    }
}

/// A span of instants, half-open `[start, end)`.
pub type Span = (DateTime<Utc>, DateTime<Utc>);

/// What the server knows of its own time when it measures a check's limits:
/// the spans no replica observed (they do not count) and the spans its
/// timeline slewed over (they count [`SLEW_RATE`] times). Both in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub unobserved: Vec<Span>,
    pub slewed: Vec<Span>,
}

/// The union of two lists of spans, each in order: in order, overlapping
/// and touching spans merged (the evaluator's clock takes them so).
pub fn union(a: &[Span], b: &[Span]) -> Vec<Span> {
    let mut all: Vec<Span> = a.iter().chain(b).copied().filter(|(s, e)| s < e).collect();
    all.sort();
    let mut out: Vec<Span> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Slewed spans as instants, the form the evaluator's clock takes.
pub fn spans_of(spans: &[(UnixMs, UnixMs)]) -> Vec<Span> {
    spans
        .iter()
        .filter_map(|(a, b)| {
            Some((
                DateTime::<Utc>::from_timestamp_millis(*a)?,
                DateTime::<Utc>::from_timestamp_millis(*b)?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: i64 = 3_600_000;
    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn r(wall: i64, mono: i64) -> Reading {
        Reading { wall, mono }
    }

    #[test]
    fn detects_steps_beyond_the_threshold_only() {
        let prev = r(T0, 1_000);
        assert_eq!(detect(prev, r(T0 + 5_000, 6_000)), None, "in step");
        assert_eq!(detect(prev, r(T0 + 7_000, 6_000)), None, "2 s: absorbed");
        assert_eq!(
            detect(prev, r(T0 + 7_001, 6_000)),
            Some((Direction::Forward, 2_001))
        );
        assert_eq!(detect(prev, r(T0 + 3_000, 6_000)), None);
        assert_eq!(
            detect(prev, r(T0 + 2_999, 6_000)),
            Some((Direction::Backward, 2_001))
        );
        assert_eq!(
            detect(prev, r(T0 + 5_000 - 2 * H, 6_000)),
            Some((Direction::Backward, 2 * H))
        );
        assert_eq!(
            detect(prev, r(T0 + 2 * H, 1_000)),
            Some((Direction::Forward, 2 * H)),
            "a step with no time passing between the readings"
        );
    }

    #[test]
    fn follows_the_wall_clock_until_it_steps() {
        let mut t = Timeline::new();
        assert_eq!(t.observe(r(T0, 0)), (T0, None));
        assert_eq!(t.observe(r(T0 + 1_000, 1_000)), (T0 + 1_000, None));
        assert!(t.slewed().is_empty());
        assert_eq!(t.wall_of(T0 + 500), T0 + 500);
    }

    #[test]
    fn a_forward_step_is_followed_and_reported() {
        let mut t = Timeline::new();
        t.observe(r(T0, 0));
        let (now, step) = t.observe(r(T0 + 2 * H + 1_000, 1_000));
        assert_eq!(now, T0 + 2 * H + 1_000, "the server follows the wall clock");
        assert_eq!(
            step,
            Some(Step {
                direction: Direction::Forward,
                size_ms: 2 * H,
                at: now,
                wall: now
            })
        );
        assert!(t.slewed().is_empty(), "nothing to slew over");
        assert_eq!(t.skipped(), &[(T0 + 1_000, T0 + 2 * H + 1_000)]);
    }

    #[test]
    fn spans_are_merged_into_one_ordered_list() {
        let s = |a: i64, b: i64| {
            (
                DateTime::<Utc>::from_timestamp_millis(T0 + a).unwrap(),
                DateTime::<Utc>::from_timestamp_millis(T0 + b).unwrap(),
            )
        };
        assert_eq!(
            union(
                &[s(0, 10), s(20, 30)],
                &[s(5, 12), s(30, 31), s(40, 41), s(50, 50)]
            ),
            vec![s(0, 12), s(20, 31), s(40, 41)]
        );
        assert_eq!(union(&[], &[]), vec![]);
    }

    #[test]
    fn a_backward_step_slews_at_half_speed_until_the_wall_clock_catches_up() {
        let mut t = Timeline::new();
        t.observe(r(T0, 0));
        // One second later the wall clock reads two hours earlier.
        let (now, step) = t.observe(r(T0 + 1_000 - 2 * H, 1_000));
        assert_eq!(now, T0 + 1_000, "the timeline does not move back");
        assert_eq!(
            step,
            Some(Step {
                direction: Direction::Backward,
                size_ms: 2 * H,
                at: T0 + 1_000,
                wall: T0 + 1_000 - 2 * H
            })
        );
        // Ten real seconds later: five more on the timeline.
        let (now, _) = t.observe(r(T0 + 11_000 - 2 * H, 11_000));
        assert_eq!(now, T0 + 6_000);
        // The wall clock catches up after twice the step: 4 h of real time.
        let (now, _) = t.observe(r(T0 + 1_000 + 2 * H, 1_000 + 4 * H));
        assert_eq!(now, T0 + 1_000 + 2 * H);
        let (now, _) = t.observe(r(T0 + 2_000 + 2 * H, 2_000 + 4 * H));
        assert_eq!(now, T0 + 2_000 + 2 * H, "then it follows the wall clock");
        assert_eq!(t.slewed(), vec![(T0 + 1_000, T0 + 1_000 + 2 * H)]);
        // Ten real seconds after the step were five slewed ones.
        assert_eq!(t.real_between(T0 + 1_000, T0 + 6_000), 10_000);
        assert_eq!(t.real_between(T0, T0 + 1_000), 1_000);
        assert_eq!(
            t.real_between(T0, T0 + 3 * H),
            3 * H + 2 * H,
            "the slewed two hours were four"
        );
        // When the pings really arrived by the wall clock.
        assert_eq!(t.wall_of(T0 + 6_000), T0 + 11_000 - 2 * H);
        assert_eq!(t.wall_of(T0 + 500), T0 + 500);
        assert_eq!(t.wall_of(T0 + 3 * H), T0 + 3 * H);
    }

    #[test]
    fn a_second_backward_step_while_slewing_starts_from_where_the_timeline_stood() {
        let mut t = Timeline::new();
        t.observe(r(T0, 0));
        t.observe(r(T0 - 2 * H, 0));
        // 10 s later (5 s on the timeline), back one more hour.
        let (now, step) = t.observe(r(T0 - 3 * H + 10_000, 10_000));
        assert_eq!(now, T0 + 5_000);
        assert_eq!(
            step.map(|s| (s.direction, s.size_ms)),
            Some((Direction::Backward, H))
        );
        assert_eq!(
            t.slewed(),
            vec![(T0, T0 + 5_000), (T0 + 5_000, T0 + 5_000 + 3 * H - 5_000)]
        );
        let (later, _) = t.observe(r(T0 - 3 * H + 12_000, 12_000));
        assert_eq!(later, T0 + 6_000);
    }

    #[test]
    fn small_disagreements_never_move_the_timeline_back() {
        let mut t = Timeline::new();
        t.observe(r(T0, 0));
        let (now, step) = t.observe(r(T0 - 1_500, 0));
        assert_eq!((now, step), (T0, None));
        let (now, _) = t.observe(r(T0 + 200, 1_000));
        assert_eq!(now, T0 + 200);
    }

    #[test]
    fn a_restart_behind_the_stored_state_is_a_backward_step() {
        // Last heartbeat at T0; the server may have gone on for 10 s.
        let mut t = Timeline::new();
        let (now, step) = t.resume(Some(T0), 10_000, r(T0 - 2 * H, 0));
        assert_eq!(now, T0 + 10_000);
        assert_eq!(
            step,
            Some(Step {
                direction: Direction::Backward,
                size_ms: 2 * H + 10_000,
                at: T0 + 10_000,
                wall: T0 - 2 * H
            })
        );
        assert_eq!(t.observe(r(T0 - 2 * H + 2_000, 2_000)).0, T0 + 11_000);
        // Behind the last heartbeat by less than the threshold: held still,
        // no step.
        let mut t = Timeline::new();
        assert_eq!(
            t.resume(Some(T0 + 1_000), 10_000, r(T0, 0)),
            (T0 + 11_000, None)
        );
        assert!(t.slewed().is_empty());
        assert_eq!(t.observe(r(T0 + 5_000, 5_000)).0, T0 + 11_000);
        assert_eq!(t.observe(r(T0 + 12_000, 12_000)).0, T0 + 12_000);
        // Ahead of the last heartbeat (an ordinary restart): the wall clock.
        let mut t = Timeline::new();
        assert_eq!(t.resume(Some(T0 - 1), 10_000, r(T0, 0)), (T0, None));
        assert_eq!(t.resume(None, 10_000, r(T0 + 5, 5)), (T0 + 5, None));
    }

    #[test]
    fn a_restart_continues_the_slew_it_stored() {
        let mut before = Timeline::new();
        before.observe(r(T0, 0));
        before.observe(r(T0 - 2 * H, 0));
        let (then, _) = before.observe(r(T0 - 2 * H + 60_000, 60_000));
        // Restarted a minute later on a new monotonic origin.
        let mut after = Timeline::new();
        after.install(before.slews().to_vec());
        let (now, step) = after.resume(Some(then), 10_000, r(T0 - 2 * H + 120_000, 7));
        assert_eq!(step, None);
        assert_eq!(now, T0 + 60_000);
        assert_eq!(after.slewed(), before.slewed());
    }

    mod judged {
        //! Checks judged across a backward step (SPEC §12), with the pure
        //! evaluator: the timeline's instants and its slewed spans.
        use super::*;
        use crate::domain::check::{CheckInput, CheckSpec};
        use crate::domain::evaluate::{evaluate_in, Rules};
        use crate::domain::ping::{PingFacts, PingKind, Summary, Thresholds};
        use crate::domain::status::{Reason, Status};

        fn every_2s() -> Rules {
            let input: CheckInput = serde_json::from_str(r#"{"interval":"2s"}"#).unwrap();
            Rules::from_spec(&CheckSpec::from_input(input).unwrap()).unwrap()
        }

        fn success(s: &mut Summary, at: UnixMs) {
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
        }

        fn at(ms: UnixMs) -> DateTime<Utc> {
            DateTime::<Utc>::from_timestamp_millis(ms).unwrap()
        }

        /// The timeline after a 2 h step back one second after T0, read at
        /// `mono` milliseconds (the wall clock runs with it after the step).
        fn stepped() -> Timeline {
            let mut t = Timeline::new();
            t.observe(r(T0, 0));
            t.observe(r(T0 + 1_000 - 2 * H, 1_000));
            t
        }

        fn read(t: &mut Timeline, mono: i64) -> UnixMs {
            t.observe(r(T0 + mono - 2 * H, mono)).0
        }

        fn status(s: &Summary, t: &Timeline, now: UnixMs) -> (Status, Option<Reason>) {
            let slewed = spans_of(&t.slewed());
            let e = evaluate_in(&every_2s(), s, false, &[], &slewed, at(now));
            (e.status, e.reason)
        }

        #[test]
        fn a_down_check_stays_down() {
            let mut down = Summary::default();
            success(&mut down, T0 - 10_000);
            let mut t = stepped();
            for mono in [1_000, 2_000, 60_000, 3_600_000, 4 * H] {
                let now = read(&mut t, mono);
                assert_eq!(
                    status(&down, &t, now),
                    (Status::Down, Some(Reason::Overdue)),
                    "{mono} ms"
                );
            }
        }

        #[test]
        fn a_check_that_keeps_pinging_stays_up() {
            let mut up = Summary::default();
            success(&mut up, T0);
            let mut t = stepped();
            let mut last = T0;
            for mono in (1_000..120_000).step_by(1_000) {
                let now = read(&mut t, mono);
                assert_eq!(status(&up, &t, now).0, Status::Up, "{mono} ms");
                success(&mut up, now);
                assert!(
                    up.last_success_at >= Some(last),
                    "shown instants never move back"
                );
                last = now;
            }
        }

        #[test]
        fn a_check_that_stops_after_the_step_goes_down_after_twice_its_interval() {
            let mut stops = Summary::default();
            success(&mut stops, T0);
            let mut t = stepped();
            // Its last ping half a second after the step.
            let last = read(&mut t, 1_500);
            success(&mut stops, last);
            let before = read(&mut t, 1_500 + 3_998);
            assert_eq!(status(&stops, &t, before).0, Status::Late);
            let down = read(&mut t, 1_500 + 4_000);
            assert_eq!(
                status(&stops, &t, down),
                (Status::Down, Some(Reason::Overdue)),
                "4 s of real time after its last ping"
            );
            // Measured on the timeline alone (half speed) it would be late.
            let e = evaluate_in(&every_2s(), &stops, false, &[], &[], at(down));
            assert_eq!(e.status, Status::Late, "the slewed span must count double");
        }
    }

    proptest! {
        /// Whatever the wall clock does, the timeline never moves back; and
        /// while the wall clock only runs or steps back beyond the threshold,
        /// the real time between two of the timeline's instants is the
        /// monotonic time between their readings (to a millisecond per slew,
        /// the timeline's resolution at half speed).
        #[test]
        fn never_back_and_real_time_is_kept(
            moves in prop::collection::vec((0i64..20_000, -3 * H..3 * H, any::<bool>()), 1..40)
        ) {
            let mut t = Timeline::new();
            let (mut wall, mut mono) = (T0, 0i64);
            let (first, _) = t.observe(r(wall, mono));
            let mut last = first;
            let mut exact = true;
            for (dt, jump, stepped) in moves {
                mono += dt;
                wall += dt + if stepped { jump } else { 0 };
                let (now, step) = t.observe(r(wall, mono));
                prop_assert!(now >= last, "moved back: {} -> {}", last, now);
                last = now;
                // A forward jump is time that did not pass; a step back
                // under the threshold is absorbed by holding still.
                let clean = !stepped
                    || matches!(step, Some(Step { direction: Direction::Backward, .. }));
                exact &= clean;
                if exact {
                    let slews = t.slews().len() as i64;
                    let real = t.real_between(first, now);
                    prop_assert!(
                        (real - mono).abs() <= slews * (RATE - 1),
                        "real {} vs monotonic {} over {} slews", real, mono, slews
                    );
                }
            }
        }

        /// Every instant of a slewed span maps back to the wall clock's
        /// reading when the timeline stood there, to the timeline's
        /// resolution.
        #[test]
        fn wall_of_inverts_the_slew(back in 3_000i64..5 * H, after in 0i64..20 * H) {
            let mut t = Timeline::new();
            t.observe(r(T0, 0));
            t.observe(r(T0 - back, 0));
            let wall = T0 - back + after;
            let (at, _) = t.observe(r(wall, after));
            prop_assert!((t.wall_of(at) - wall).abs() < RATE);
        }
    }
}
