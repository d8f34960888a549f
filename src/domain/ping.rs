//! What one ping does to a check's summary: counters, items, the zero and low
//! streaks, and run bookkeeping, with runs that finish too fast counted as
//! failures (SPEC §2, §3.3, §3.4). Pure: the caller stores the result.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::usual::{judge_and_record, HourBucket, Judged, UsualRule};

/// An instant as Unix milliseconds (UTC), the unit every store uses.
pub type UnixMs = i64;

/// What a ping says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PingKind {
    Success,
    Start,
    Fail,
    Log,
    /// A run the job guard skipped (SPEC §13): recorded with its reason,
    /// changes nothing.
    Skip,
    /// A failed attempt that `overdue run --retries` will retry (SPEC §14):
    /// closes its run, changes no status; the last attempt decides.
    Retry,
    /// Received but not counted (wrong method, or a paused check with manual resume).
    Ignored,
}

impl PingKind {
    /// The stored spelling, also healthchecks' ping `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            PingKind::Success => "success",
            PingKind::Start => "start",
            PingKind::Fail => "fail",
            PingKind::Log => "log",
            PingKind::Skip => "skip",
            PingKind::Retry => "retry",
            PingKind::Ignored => "ign",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<PingKind> {
        Some(match s {
            "success" => PingKind::Success,
            "start" => PingKind::Start,
            "fail" => PingKind::Fail,
            "log" => PingKind::Log,
            "skip" => PingKind::Skip,
            "retry" => PingKind::Retry,
            "ign" => PingKind::Ignored,
            _ => return None,
        })
    }
}

/// A run that has started and not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenRun {
    pub id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<Uuid>,
    pub started_at: UnixMs,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlapped: bool,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    Success,
    Failed,
    /// Replaced by a new start without a run id.
    Superseded,
    /// A failed attempt that will be retried (SPEC §14).
    Retried,
}

impl RunOutcome {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Success => "success",
            RunOutcome::Failed => "failed",
            RunOutcome::Superseded => "superseded",
            RunOutcome::Retried => "retried",
        }
    }
}

/// A change to the runs table that a ping causes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunChange {
    /// A run started.
    Open {
        id: i64,
        rid: Option<Uuid>,
        started_at: UnixMs,
        overlapped: bool,
    },
    /// An open run is now known to overlap another.
    Overlapped { id: i64 },
    /// An open run ended.
    Close {
        id: i64,
        ended_at: UnixMs,
        outcome: RunOutcome,
        duration_ms: i64,
        reason: Option<&'static str>,
    },
}

/// The durable per-check summary of its ping history: what the evaluator and
/// the API need without reading the ping log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub n_pings: i64,
    pub last_ping_at: Option<UnixMs>,
    pub last_ping_kind: Option<PingKind>,
    pub last_success_at: Option<UnixMs>,
    pub last_start_at: Option<UnixMs>,
    pub last_failure_at: Option<UnixMs>,
    pub last_items: Option<i64>,
    pub last_items_at: Option<UnixMs>,
    /// First success reporting `items=0` of the current zero streak.
    pub zero_streak_since: Option<UnixMs>,
    /// Consecutive counted success pings reporting 0 items.
    pub zero_streak_runs: i64,
    /// Consecutive counted success pings reporting fewer than `min_items`
    /// (counted only while the check has a floor).
    pub low_streak_runs: i64,
    /// Consecutive judged counted successes below `items_below_usual` of
    /// the usual count (SPEC §3.3); an unjudged success leaves it as it is.
    pub below_streak_runs: i64,
    /// The usual count the last counted success was judged against: the
    /// value in force (`None` when it was not judged).
    pub usual_items: Option<f64>,
    pub consecutive_failures: i64,
    pub consecutive_successes: i64,
    pub last_duration_ms: Option<i64>,
    pub open_runs: Vec<OpenRun>,
    pub overlaps: i64,
    /// Set when `failure_threshold` consecutive failures arrived; cleared after
    /// `recovery_threshold` consecutive successes.
    pub failed_since: Option<UnixMs>,
    /// Set when a run exceeded `max_runtime`; cleared by the next success.
    pub timed_out_at: Option<UnixMs>,
}

/// The per-check thresholds a ping is applied with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub failure: u32,
    pub recovery: u32,
    /// The item floor (`min_items`): a counted success below it extends the
    /// low streak.
    pub min_items: Option<u64>,
    /// `min_runtime` in milliseconds: a success closing a run shorter than
    /// this is a failure.
    pub min_runtime_ms: Option<i64>,
    /// `items_below_usual`: counted successes are judged against their
    /// history when the fold has it.
    pub below_usual: Option<UsualRule>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            failure: 1,
            recovery: 1,
            min_items: None,
            min_runtime_ms: None,
            below_usual: None,
        }
    }
}

/// The reason recorded on a run closed because it ran too long.
pub const RUN_TIMEOUT_REASON: &str = "exceeded max_runtime";

/// The reason recorded on a run whose success came before `min_runtime`.
pub const TOO_FAST_REASON: &str = "finished too fast";
/// The reason a run closed by a `retry` ping (an attempt to be retried) carries.
pub const RETRIED_REASON: &str = "will be retried";

/// One ping as the summary sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingFacts {
    pub at: UnixMs,
    pub kind: PingKind,
    pub items: Option<u64>,
    pub rid: Option<Uuid>,
}

/// What applying a ping produced, besides the updated summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The ping's sequence number within its check (healthchecks' `n`).
    pub n: i64,
    /// Duration of the run this ping closed.
    pub duration_ms: Option<i64>,
    pub runs: Vec<RunChange>,
}

/// The item history a ping is folded with: the check's hour buckets (see
/// [`super::usual`]) and the ping's id.
pub struct WithHistory<'a> {
    pub buckets: &'a mut Vec<HourBucket>,
    pub ping_id: i64,
}

impl Summary {
    /// Applies one ping; `next_run_id` allocates ids for runs it opens.
    pub fn apply(
        &mut self,
        ping: &PingFacts,
        thresholds: Thresholds,
        next_run_id: &mut dyn FnMut() -> i64,
    ) -> Applied {
        self.apply_with(ping, thresholds, None, next_run_id)
    }

    /// Like [`Summary::apply`], judging a counted success against the item
    /// history when there is one (`items_below_usual`); without it, the
    /// below-usual streak and the usual count stay as they are.
    pub fn apply_with(
        &mut self,
        ping: &PingFacts,
        thresholds: Thresholds,
        history: Option<WithHistory<'_>>,
        next_run_id: &mut dyn FnMut() -> i64,
    ) -> Applied {
        self.n_pings += 1;
        let mut applied = Applied {
            n: self.n_pings,
            ..Applied::default()
        };
        match ping.kind {
            PingKind::Log | PingKind::Skip | PingKind::Ignored => return applied,
            PingKind::Retry => {
                // Closes the attempt's run, touches no counter or status:
                // the next attempt, or the last one, decides.
                self.finish(
                    ping,
                    RunOutcome::Retried,
                    Some(RETRIED_REASON),
                    &mut applied,
                );
                return applied;
            }
            PingKind::Start => {
                self.start(ping, next_run_id(), &mut applied);
                self.record_items(ping);
            }
            PingKind::Success if self.too_fast(ping, thresholds) => {
                // A failed run (SPEC §3.4): no success, and its items are not counted.
                self.fail(ping.at, thresholds);
                self.finish(
                    ping,
                    RunOutcome::Failed,
                    Some(TOO_FAST_REASON),
                    &mut applied,
                );
            }
            PingKind::Success => {
                self.last_success_at = Some(ping.at);
                self.consecutive_successes += 1;
                self.consecutive_failures = 0;
                self.timed_out_at = None;
                if self.consecutive_successes >= i64::from(thresholds.recovery) {
                    self.failed_since = None;
                }
                if let Some(items) = ping.items {
                    self.count_items(ping.at, items, thresholds.min_items);
                    if let (Some(rule), Some(h)) = (thresholds.below_usual, history) {
                        self.judge_usual(ping.at, items, rule, h);
                    }
                }
                self.finish(ping, RunOutcome::Success, None, &mut applied);
                self.record_items(ping);
            }
            PingKind::Fail => {
                self.fail(ping.at, thresholds);
                self.finish(ping, RunOutcome::Failed, None, &mut applied);
                self.record_items(ping);
            }
        }
        self.last_ping_at = Some(ping.at);
        self.last_ping_kind = Some(ping.kind);
        applied
    }

    fn fail(&mut self, at: UnixMs, thresholds: Thresholds) {
        self.last_failure_at = Some(at);
        self.consecutive_failures += 1;
        self.consecutive_successes = 0;
        if self.failed_since.is_none() && self.consecutive_failures >= i64::from(thresholds.failure)
        {
            self.failed_since = Some(at);
        }
    }

    fn record_items(&mut self, ping: &PingFacts) {
        if let Some(items) = ping.items {
            self.last_items = Some(clamp_items(items));
            self.last_items_at = Some(ping.at);
        }
    }

    /// The open run a finish ping closes: with a run id, only the run with
    /// that id; without, the latest open run.
    fn run_closed_by(&self, ping: &PingFacts) -> Option<usize> {
        match ping.rid {
            Some(rid) => self.open_runs.iter().rposition(|r| r.rid == Some(rid)),
            None => self.open_runs.len().checked_sub(1),
        }
    }

    /// A success that closes a run shorter than `min_runtime` (SPEC §3.4).
    /// Without an open run (no start seen) nothing is too fast.
    fn too_fast(&self, ping: &PingFacts, thresholds: Thresholds) -> bool {
        let Some(min) = thresholds.min_runtime_ms else {
            return false;
        };
        self.run_closed_by(ping)
            .is_some_and(|i| ping.at - self.open_runs[i].started_at < min)
    }

    /// Closes an open run that exceeded `max_runtime` as failed (SPEC §3.4).
    /// `None` when the run is no longer open (it finished meanwhile).
    pub fn time_out_run(&mut self, run_id: i64, at: UnixMs) -> Option<RunChange> {
        let i = self.open_runs.iter().position(|r| r.id == run_id)?;
        let run = self.open_runs.remove(i);
        if self.timed_out_at.is_none() {
            self.timed_out_at = Some(at);
        }
        Some(RunChange::Close {
            id: run.id,
            ended_at: at,
            outcome: RunOutcome::Failed,
            duration_ms: (at - run.started_at).max(0),
            reason: Some(RUN_TIMEOUT_REASON),
        })
    }

    fn count_items(&mut self, at: UnixMs, items: u64, floor: Option<u64>) {
        match floor {
            Some(n) if items < n => self.low_streak_runs += 1,
            _ => self.low_streak_runs = 0,
        }
        if items == 0 {
            if self.zero_streak_since.is_none() {
                self.zero_streak_since = Some(at);
            }
            self.zero_streak_runs += 1;
        } else {
            self.zero_streak_since = None;
            self.zero_streak_runs = 0;
        }
    }

    /// Judges a counted success against its usual count (SPEC §3.3) and
    /// records it in the history.
    fn judge_usual(&mut self, at: UnixMs, items: u64, rule: UsualRule, h: WithHistory<'_>) {
        match judge_and_record(h.buckets, rule, at, items, h.ping_id) {
            Judged::Unjudged => self.usual_items = None,
            Judged::Usual { usual, low } => {
                self.usual_items = Some(usual);
                if low {
                    self.below_streak_runs += 1;
                } else {
                    self.below_streak_runs = 0;
                }
            }
        }
    }

    fn start(&mut self, ping: &PingFacts, id: i64, applied: &mut Applied) {
        self.last_start_at = Some(ping.at);
        // A start that repeats a run id, or any start without one, replaces the
        // run it would otherwise be confused with.
        let replaced: Vec<usize> = self
            .open_runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.rid == ping.rid)
            .map(|(i, _)| i)
            .collect();
        for i in replaced.into_iter().rev() {
            let old = self.open_runs.remove(i);
            applied.runs.push(RunChange::Close {
                id: old.id,
                ended_at: ping.at,
                outcome: RunOutcome::Superseded,
                duration_ms: ping.at - old.started_at,
                reason: None,
            });
        }
        let overlapped = ping.rid.is_some() && !self.open_runs.is_empty();
        if overlapped {
            self.overlaps += 1;
            for r in self.open_runs.iter_mut().filter(|r| !r.overlapped) {
                r.overlapped = true;
                applied.runs.push(RunChange::Overlapped { id: r.id });
            }
        }
        self.open_runs.push(OpenRun {
            id,
            rid: ping.rid,
            started_at: ping.at,
            overlapped,
        });
        applied.runs.push(RunChange::Open {
            id,
            rid: ping.rid,
            started_at: ping.at,
            overlapped,
        });
    }

    fn finish(
        &mut self,
        ping: &PingFacts,
        outcome: RunOutcome,
        reason: Option<&'static str>,
        applied: &mut Applied,
    ) {
        let Some(i) = self.run_closed_by(ping) else {
            return;
        };
        let run = self.open_runs.remove(i);
        let duration_ms = (ping.at - run.started_at).max(0);
        self.last_duration_ms = Some(duration_ms);
        applied.duration_ms = Some(duration_ms);
        applied.runs.push(RunChange::Close {
            id: run.id,
            ended_at: ping.at,
            outcome,
            duration_ms,
            reason,
        });
    }
}

/// Item counts are stored as signed 64-bit integers; larger reports saturate.
pub fn clamp_items(items: u64) -> i64 {
    i64::try_from(items).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping(at: UnixMs, kind: PingKind) -> PingFacts {
        PingFacts {
            at,
            kind,
            items: None,
            rid: None,
        }
    }

    fn with_items(at: UnixMs, items: u64) -> PingFacts {
        PingFacts {
            items: Some(items),
            ..ping(at, PingKind::Success)
        }
    }

    fn with_rid(at: UnixMs, kind: PingKind, rid: Uuid) -> PingFacts {
        PingFacts {
            rid: Some(rid),
            ..ping(at, kind)
        }
    }

    impl Summary {
        fn apply_default(&mut self, p: &PingFacts, next: &mut dyn FnMut() -> i64) -> Applied {
            self.apply(p, Thresholds::default(), next)
        }
    }

    fn ids() -> impl FnMut() -> i64 {
        let mut n = 0;
        move || {
            n += 1;
            n
        }
    }

    #[test]
    fn success_updates_counters() {
        let mut s = Summary::default();
        let mut next = ids();
        let a = s.apply_default(&ping(10, PingKind::Fail), &mut next);
        assert_eq!(a.n, 1);
        assert_eq!(s.consecutive_failures, 1);
        let a = s.apply_default(&ping(20, PingKind::Success), &mut next);
        assert_eq!(a.n, 2);
        assert_eq!(s.last_success_at, Some(20));
        assert_eq!(s.consecutive_failures, 0);
        assert_eq!(s.consecutive_successes, 1);
        assert_eq!(s.last_ping_kind, Some(PingKind::Success));
    }

    #[test]
    fn log_and_ignored_pings_count_but_change_nothing_else() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&ping(10, PingKind::Success), &mut next);
        let before = s.clone();
        let a = s.apply_default(&ping(20, PingKind::Log), &mut next);
        assert_eq!(a.n, 2);
        s.apply_default(&ping(30, PingKind::Ignored), &mut next);
        assert_eq!(s.n_pings, 3);
        assert_eq!(
            Summary {
                n_pings: 3,
                ..before
            },
            s
        );
    }

    #[test]
    fn zero_streak_starts_at_first_zero_and_breaks_on_items() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&with_items(10, 5), &mut next);
        assert_eq!(s.zero_streak_since, None);
        s.apply_default(&with_items(20, 0), &mut next);
        s.apply_default(&ping(25, PingKind::Success), &mut next); // no items: neither extends nor breaks
        s.apply_default(&with_items(30, 0), &mut next);
        assert_eq!(s.zero_streak_since, Some(20));
        assert_eq!(s.zero_streak_runs, 2);
        assert_eq!(s.last_items, Some(0));
        s.apply_default(&with_items(40, 3), &mut next);
        assert_eq!(s.zero_streak_since, None);
        assert_eq!(s.zero_streak_runs, 0);
        assert_eq!(s.last_items, Some(3));
    }

    #[test]
    fn zero_streak_can_start_at_the_first_counted_ping() {
        let mut s = Summary::default();
        s.apply_default(&with_items(10, 0), &mut ids());
        assert_eq!(s.zero_streak_since, Some(10));
        assert_eq!(s.zero_streak_runs, 1);
    }

    #[test]
    fn items_on_a_failure_do_not_touch_the_streak() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&with_items(10, 0), &mut next);
        let mut f = ping(20, PingKind::Fail);
        f.items = Some(7);
        s.apply_default(&f, &mut next);
        assert_eq!(s.zero_streak_since, Some(10));
        assert_eq!(s.last_items, Some(7));
    }

    #[test]
    fn run_without_rid_closes_with_duration() {
        let mut s = Summary::default();
        let mut next = ids();
        let a = s.apply_default(&ping(1_000, PingKind::Start), &mut next);
        assert!(matches!(a.runs[..], [RunChange::Open { id: 1, .. }]));
        let a = s.apply_default(&ping(4_500, PingKind::Success), &mut next);
        assert_eq!(a.duration_ms, Some(3_500));
        assert_eq!(
            a.runs,
            vec![RunChange::Close {
                id: 1,
                ended_at: 4_500,
                outcome: RunOutcome::Success,
                duration_ms: 3_500,
                reason: None
            }]
        );
        assert!(s.open_runs.is_empty());
        assert_eq!(s.last_duration_ms, Some(3_500));
    }

    #[test]
    fn start_without_rid_supersedes_the_open_run() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&ping(1_000, PingKind::Start), &mut next);
        let a = s.apply_default(&ping(2_000, PingKind::Start), &mut next);
        assert_eq!(
            a.runs[0],
            RunChange::Close {
                id: 1,
                ended_at: 2_000,
                outcome: RunOutcome::Superseded,
                duration_ms: 1_000,
                reason: None
            }
        );
        assert!(matches!(
            a.runs[1],
            RunChange::Open {
                id: 2,
                overlapped: false,
                ..
            }
        ));
        assert_eq!(s.open_runs.len(), 1);
        assert_eq!(s.overlaps, 0);
    }

    #[test]
    fn starts_with_rids_overlap_and_finish_by_rid() {
        let (r1, r2) = (Uuid::new_v4(), Uuid::new_v4());
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&with_rid(1_000, PingKind::Start, r1), &mut next);
        let a = s.apply_default(&with_rid(2_000, PingKind::Start, r2), &mut next);
        assert!(a.runs.contains(&RunChange::Overlapped { id: 1 }));
        assert!(a.runs.contains(&RunChange::Open {
            id: 2,
            rid: Some(r2),
            started_at: 2_000,
            overlapped: true
        }));
        assert_eq!(s.overlaps, 1);
        // Finishing r1 closes run 1, not the latest run.
        let a = s.apply_default(&with_rid(5_000, PingKind::Fail, r1), &mut next);
        assert_eq!(
            a.runs,
            vec![RunChange::Close {
                id: 1,
                ended_at: 5_000,
                outcome: RunOutcome::Failed,
                duration_ms: 4_000,
                reason: None
            }]
        );
        assert_eq!(s.open_runs.len(), 1);
        assert_eq!(s.open_runs[0].rid, Some(r2));
    }

    #[test]
    fn finish_with_unknown_rid_closes_nothing() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&with_rid(1_000, PingKind::Start, Uuid::new_v4()), &mut next);
        let a = s.apply_default(
            &with_rid(2_000, PingKind::Success, Uuid::new_v4()),
            &mut next,
        );
        assert!(a.runs.is_empty());
        assert_eq!(a.duration_ms, None);
        assert_eq!(s.open_runs.len(), 1);
        assert_eq!(s.last_success_at, Some(2_000));
    }

    #[test]
    fn finish_without_rid_closes_the_latest_run() {
        let (r1, r2) = (Uuid::new_v4(), Uuid::new_v4());
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&with_rid(1_000, PingKind::Start, r1), &mut next);
        s.apply_default(&with_rid(2_000, PingKind::Start, r2), &mut next);
        let a = s.apply_default(&ping(3_000, PingKind::Success), &mut next);
        assert!(matches!(a.runs[..], [RunChange::Close { id: 2, .. }]));
    }

    #[test]
    fn failure_and_recovery_thresholds() {
        let t = Thresholds {
            failure: 2,
            recovery: 2,
            ..Thresholds::default()
        };
        let mut s = Summary::default();
        let mut next = ids();
        s.apply(&ping(1, PingKind::Fail), t, &mut next);
        assert_eq!(s.failed_since, None);
        s.apply(&ping(2, PingKind::Success), t, &mut next);
        s.apply(&ping(3, PingKind::Fail), t, &mut next);
        assert_eq!(s.failed_since, None, "failures must be consecutive");
        s.apply(&ping(4, PingKind::Fail), t, &mut next);
        assert_eq!(s.failed_since, Some(4));
        s.apply(&ping(5, PingKind::Fail), t, &mut next);
        assert_eq!(s.failed_since, Some(4), "stays at the first instant");
        s.apply(&ping(6, PingKind::Success), t, &mut next);
        assert_eq!(s.failed_since, Some(4), "one success is not enough");
        s.apply(&ping(7, PingKind::Success), t, &mut next);
        assert_eq!(s.failed_since, None);
    }

    #[test]
    fn timed_out_runs_close_as_failed_until_a_success() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply_default(&ping(1_000, PingKind::Start), &mut next);
        let change = s.time_out_run(1, 61_000).unwrap();
        assert_eq!(
            change,
            RunChange::Close {
                id: 1,
                ended_at: 61_000,
                outcome: RunOutcome::Failed,
                duration_ms: 60_000,
                reason: Some(RUN_TIMEOUT_REASON)
            }
        );
        assert!(s.open_runs.is_empty());
        assert_eq!(s.timed_out_at, Some(61_000));
        assert_eq!(s.time_out_run(1, 62_000), None, "already closed");
        // A late finish closes nothing; a success clears the timeout.
        let a = s.apply_default(&ping(70_000, PingKind::Success), &mut next);
        assert!(a.runs.is_empty());
        assert_eq!(s.timed_out_at, None);
    }

    #[test]
    fn huge_item_counts_saturate() {
        let mut s = Summary::default();
        s.apply_default(&with_items(1, u64::MAX), &mut ids());
        assert_eq!(s.last_items, Some(i64::MAX));
    }
    fn floor(n: u64) -> Thresholds {
        Thresholds {
            min_items: Some(n),
            ..Thresholds::default()
        }
    }

    fn fast(secs: i64) -> Thresholds {
        Thresholds {
            min_runtime_ms: Some(secs * 1000),
            ..Thresholds::default()
        }
    }

    #[test]
    fn low_streak_counts_successes_below_the_floor() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply(&with_items(10, 3), floor(10), &mut next);
        s.apply(&ping(15, PingKind::Success), floor(10), &mut next); // no items: no change
        s.apply(&with_items(20, 0), floor(10), &mut next);
        assert_eq!(s.low_streak_runs, 2, "zero is below the floor too");
        let mut f = ping(25, PingKind::Fail);
        f.items = Some(50);
        s.apply(&f, floor(10), &mut next);
        assert_eq!(s.low_streak_runs, 2, "a failure's items are not counted");
        s.apply(&with_items(30, 10), floor(10), &mut next);
        assert_eq!(s.low_streak_runs, 0, "reaching the floor breaks it");
        s.apply(&with_items(40, 9), floor(10), &mut next);
        assert_eq!(s.low_streak_runs, 1);
        s.apply(&with_items(50, 9), Thresholds::default(), &mut next);
        assert_eq!(s.low_streak_runs, 0, "without a floor nothing is low");
    }

    fn usual(fraction_ppm: u32) -> Thresholds {
        Thresholds {
            below_usual: Some(UsualRule {
                fraction_ppm,
                weeks: 4,
                tz: chrono_tz::UTC,
            }),
            min_runtime_ms: Some(5_000),
            ..Thresholds::default()
        }
    }

    const WEEK_MS: i64 = 7 * 86_400_000;

    /// Applies `p` as ping `id` with the history `h`.
    fn judged(s: &mut Summary, h: &mut Vec<HourBucket>, p: &PingFacts, t: Thresholds, id: i64) {
        let with = WithHistory {
            buckets: h,
            ping_id: id,
        };
        s.apply_with(p, t, Some(with), &mut ids());
    }

    #[test]
    fn below_usual_streak_counts_judged_lows_only() {
        let mut s = Summary::default();
        let mut h = Vec::new();
        let t = usual(250_000);
        // Three weeks of 40 items at the same hour: not judged until then.
        for w in 0..3 {
            judged(&mut s, &mut h, &with_items(w * WEEK_MS, 40), t, w + 1);
            assert_eq!(s.usual_items, None, "week {w} is not judged yet");
            assert_eq!(s.below_streak_runs, 0);
        }
        let at = 3 * WEEK_MS;
        judged(&mut s, &mut h, &with_items(at, 9), t, 10);
        assert_eq!(s.usual_items, Some(40.0));
        assert_eq!(s.below_streak_runs, 1, "9 < 0.25 × 40");
        // Another hour of the week has no history: unjudged, the streak stays.
        judged(&mut s, &mut h, &with_items(at + 3_600_000, 0), t, 11);
        assert_eq!(s.usual_items, None);
        assert_eq!(s.below_streak_runs, 1);
        // Pings without items and failures change nothing.
        judged(&mut s, &mut h, &ping(at + 60_000, PingKind::Success), t, 12);
        let mut f = ping(at + 70_000, PingKind::Fail);
        f.items = Some(1);
        judged(&mut s, &mut h, &f, t, 13);
        assert_eq!(s.below_streak_runs, 1);
        judged(&mut s, &mut h, &with_items(at + 80_000, 8), t, 14);
        assert_eq!(s.below_streak_runs, 2);
        // Not below: 10 is exactly 0.25 × 40.
        judged(&mut s, &mut h, &with_items(at + 90_000, 10), t, 15);
        assert_eq!(s.below_streak_runs, 0);
        // The hour this week was recorded too: sum 9 + 8 + 10 over 3.
        let b = h.iter().find(|b| b.local_hour == at / 3_600_000).unwrap();
        assert_eq!((b.sum, b.count, b.through), (27, 3, 15));
    }

    #[test]
    fn a_ping_folded_again_is_not_recorded_twice() {
        let mut s = Summary::default();
        let mut h = Vec::new();
        judged(&mut s, &mut h, &with_items(0, 40), usual(250_000), 7);
        let before = h.clone();
        // After a restart the writer folds ping 7 again into its summary.
        judged(
            &mut Summary::default(),
            &mut h,
            &with_items(0, 40),
            usual(250_000),
            7,
        );
        assert_eq!(h, before);
    }

    #[test]
    fn too_fast_successes_and_readers_without_history_judge_nothing() {
        let mut s = Summary::default();
        let mut h: Vec<HourBucket> = (1..=3)
            .map(|w| HourBucket {
                local_hour: -w * 168,
                sum: 40,
                count: 1,
                through: w,
            })
            .collect();
        let t = usual(250_000);
        judged(&mut s, &mut h, &ping(0, PingKind::Start), t, 10);
        judged(&mut s, &mut h, &with_items(1_000, 1), t, 11);
        assert_eq!(s.consecutive_failures, 1, "finished too fast");
        assert_eq!((s.below_streak_runs, s.usual_items), (0, None));
        assert_eq!(h.len(), 3, "its items are not counted");
        judged(&mut s, &mut h, &with_items(2_000, 1), t, 12);
        assert_eq!((s.below_streak_runs, s.usual_items), (1, Some(40.0)));
        // Without the history (a reader) the streak and usual count stay.
        s.apply(&with_items(3_000, 1), t, &mut ids());
        assert_eq!((s.below_streak_runs, s.usual_items), (1, Some(40.0)));
    }

    #[test]
    fn a_success_before_min_runtime_is_a_failed_run() {
        let mut s = Summary::default();
        let mut next = ids();
        s.apply(&with_items(0, 5), fast(5), &mut next);
        assert_eq!(s.last_success_at, Some(0), "no start: judged as before");
        s.apply(&ping(10_000, PingKind::Start), fast(5), &mut next);
        let a = s.apply(&with_items(11_000, 0), fast(5), &mut next);
        assert_eq!(
            a.runs,
            vec![RunChange::Close {
                id: 1,
                ended_at: 11_000,
                outcome: RunOutcome::Failed,
                duration_ms: 1_000,
                reason: Some(TOO_FAST_REASON)
            }]
        );
        assert_eq!(a.duration_ms, Some(1_000));
        assert_eq!(s.last_success_at, Some(0), "no success");
        assert_eq!(s.last_failure_at, Some(11_000));
        assert_eq!(s.failed_since, Some(11_000), "failure_threshold 1");
        assert_eq!((s.consecutive_failures, s.consecutive_successes), (1, 0));
        assert_eq!(s.last_items, Some(5), "its items are not counted");
        assert_eq!((s.zero_streak_runs, s.zero_streak_since), (0, None));
        assert_eq!(s.last_ping_kind, Some(PingKind::Success));
        // A run that lasts long enough succeeds and recovers.
        s.apply(&ping(20_000, PingKind::Start), fast(5), &mut next);
        let a = s.apply(&ping(25_000, PingKind::Success), fast(5), &mut next);
        assert!(matches!(
            a.runs[..],
            [RunChange::Close {
                outcome: RunOutcome::Success,
                reason: None,
                ..
            }]
        ));
        assert_eq!(s.last_success_at, Some(25_000));
        assert_eq!(s.failed_since, None);
    }

    #[test]
    fn too_fast_runs_count_toward_the_failure_threshold() {
        let t = Thresholds {
            failure: 2,
            ..fast(5)
        };
        let mut s = Summary::default();
        let mut next = ids();
        for (start, end) in [(0, 1_000), (2_000, 3_000)] {
            assert_eq!(s.failed_since, None);
            s.apply(&ping(start, PingKind::Start), t, &mut next);
            s.apply(&ping(end, PingKind::Success), t, &mut next);
        }
        assert_eq!(s.failed_since, Some(3_000));
        assert_eq!(s.last_success_at, None);
    }

    #[test]
    fn min_runtime_judges_the_run_the_success_closes() {
        let (r1, r2) = (Uuid::new_v4(), Uuid::new_v4());
        let mut s = Summary::default();
        let mut next = ids();
        s.apply(&with_rid(0, PingKind::Start, r1), fast(5), &mut next);
        s.apply(&with_rid(4_000, PingKind::Start, r2), fast(5), &mut next);
        // r1 ran 6s: a success although r2 started 2s ago.
        s.apply(&with_rid(6_000, PingKind::Success, r1), fast(5), &mut next);
        assert_eq!(s.last_success_at, Some(6_000));
        // An unknown run id closes nothing, so it is not too fast.
        s.apply(
            &with_rid(6_500, PingKind::Success, Uuid::new_v4()),
            fast(5),
            &mut next,
        );
        assert_eq!(s.last_success_at, Some(6_500));
        s.apply(&with_rid(7_000, PingKind::Success, r2), fast(5), &mut next);
        assert_eq!(s.last_success_at, Some(6_500), "r2 ran 3s");
        assert_eq!(s.failed_since, Some(7_000));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// The below-usual streak counts the judged lows since the last
            /// judged success that was not low; unjudged successes (an hour
            /// of the week without three weeks of history) leave it alone.
            #[test]
            fn below_usual_streak_is_the_trailing_run_of_judged_lows(
                steps in proptest::collection::vec((any::<bool>(), 0u64..60), 1..40),
            ) {
                let hour = 3_600_000;
                // Three weeks of 40 items at hour 0 of the week: usual 40.
                let mut h: Vec<HourBucket> = (1..=3)
                    .map(|w| HourBucket { local_hour: 3 * 168 - w * 168, sum: 40, count: 1, through: w })
                    .collect();
                let t = Thresholds { below_usual: usual(250_000).below_usual, ..Thresholds::default() };
                let mut s = Summary::default();
                let mut model = 0i64;
                for (i, (judged_hour, items)) in steps.iter().enumerate() {
                    // Hour 3 × 168 has history; the hour after it has none.
                    let at = (3 * 168 + i64::from(!*judged_hour)) * hour + i as i64;
                    judged(&mut s, &mut h, &with_items(at, *items), t, 10 + i as i64);
                    if *judged_hour {
                        model = if *items < 10 { model + 1 } else { 0 };
                        prop_assert_eq!(s.usual_items, Some(40.0));
                    } else {
                        prop_assert_eq!(s.usual_items, None);
                    }
                    prop_assert_eq!(s.below_streak_runs, model);
                }
            }

            /// A success is too fast exactly when it closes a run shorter
            /// than min_runtime, and a too-fast success never moves
            /// last_success, the items or their streaks.
            #[test]
            fn too_fast_iff_the_closed_run_is_short(
                steps in proptest::collection::vec((0i64..4_000, any::<bool>(), proptest::option::of(0u64..20)), 1..30),
                min_s in 1i64..4,
                floor_n in proptest::option::of(1u64..15),
            ) {
                let t = Thresholds { min_items: floor_n, ..fast(min_s) };
                let mut s = Summary::default();
                let mut next = ids();
                let mut at = 0;
                for (dt, start, items) in steps {
                    at += dt;
                    let kind = if start { PingKind::Start } else { PingKind::Success };
                    let p = PingFacts { at, kind, items, rid: None };
                    let before = s.clone();
                    let a = s.apply(&p, t, &mut next);
                    if kind != PingKind::Success {
                        continue;
                    }
                    let short = before
                        .open_runs
                        .last()
                        .is_some_and(|r| at - r.started_at < min_s * 1000);
                    if short {
                        prop_assert_eq!(s.last_success_at, before.last_success_at);
                        prop_assert_eq!(s.last_items, before.last_items);
                        prop_assert_eq!(s.low_streak_runs, before.low_streak_runs);
                        prop_assert_eq!(s.zero_streak_runs, before.zero_streak_runs);
                        prop_assert_eq!(s.consecutive_failures, before.consecutive_failures + 1);
                        let too_fast = matches!(a.runs[..], [RunChange::Close { outcome: RunOutcome::Failed, reason: Some(TOO_FAST_REASON), .. }]);
                        prop_assert!(too_fast);
                    } else {
                        prop_assert_eq!(s.last_success_at, Some(at));
                        prop_assert_eq!(s.consecutive_failures, 0);
                        let low = match (floor_n, items) {
                            (Some(n), Some(i)) => i < n,
                            _ => false,
                        };
                        match items {
                            Some(_) if low => prop_assert_eq!(s.low_streak_runs, before.low_streak_runs + 1),
                            Some(_) => prop_assert_eq!(s.low_streak_runs, 0),
                            None => prop_assert_eq!(s.low_streak_runs, before.low_streak_runs),
                        }
                    }
                }
            }
        }
    }
}
