//! What a ping means (SPEC §2–§4): the rules that fold stored pings, in the
//! order they were committed, into their checks' summaries. One set of rules
//! for both databases' writers and for the readers that apply pings not yet
//! written into a summary, so that what a reader shows is what the writer
//! will store. Pure: no I/O and no clock (a ping carries its instant).

use std::borrow::BorrowMut;
use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::check::{Check, Methods};
use super::ping::{
    clamp_items, Applied, PingFacts, PingKind, RunChange, Summary, Thresholds, UnixMs, WithHistory,
};
use super::usual::HourBucket;

/// A ping as it was received, before it is stored and folded.
#[derive(Debug, Clone)]
pub struct Ping {
    pub check_id: i64,
    pub at: UnixMs,
    /// What the URL asked for; may be recorded as ignored.
    pub kind: PingKind,
    pub exit_status: Option<u8>,
    pub items: Option<u64>,
    pub rid: Option<Uuid>,
    pub method: String,
    pub remote_addr: Option<String>,
    pub user_agent: Option<String>,
    pub scheme: &'static str,
    pub body: Vec<u8>,
    /// Why a run was skipped (a `skip` ping).
    pub reason: Option<String>,
    /// The slot the ping was sent for (`?slot=`, SPEC §14); `None`: the
    /// latest slot start at or before `at`.
    pub slot: Option<UnixMs>,
}

impl Ping {
    /// A ping as `GET /ping/<uuid>` over HTTP without a body, query or
    /// headers makes it; change the fields a caller needs with struct
    /// update syntax.
    pub fn new(check_id: i64, at: UnixMs, kind: PingKind) -> Self {
        Ping {
            check_id,
            at,
            kind,
            exit_status: None,
            items: None,
            rid: None,
            method: "GET".to_string(),
            remote_addr: None,
            user_agent: None,
            scheme: "http",
            body: Vec::new(),
            reason: None,
            slot: None,
        }
    }
}

/// A stored ping with its id, which orders it among the pings of every
/// check (a later id was committed later).
#[derive(Debug, Clone)]
pub struct StoredPing {
    pub id: i64,
    pub ping: Ping,
}

/// What folding pings needs to know of a check: its flags, thresholds and
/// summary (updated in place).
#[derive(Debug, Clone, PartialEq)]
pub struct FoldCheck {
    pub summary: Summary,
    pub paused: bool,
    pub manual_resume: bool,
    pub methods: Methods,
    pub thresholds: Thresholds,
    /// The item history's buckets its pings need (`items_below_usual`;
    /// see [`super::usual::hours_needed`]), updated in place; `None`: not
    /// loaded, so the usual count is not judged (readers).
    pub history: Option<Vec<HourBucket>>,
}

/// One folded ping: what it was recorded as.
pub struct FoldedPing {
    pub id: i64,
    pub n: i64,
    pub kind: PingKind,
    pub duration_ms: Option<i64>,
}

/// What folding a run of inbox pings into the given checks produces; the
/// checks' summaries are updated in place.
#[derive(Default)]
pub struct FoldPlan {
    pub pings: Vec<FoldedPing>,
    pub runs: Vec<(i64, RunChange)>,
    pub resumed: Vec<i64>,
    pub touched: Vec<i64>,
    /// Runs that started while others were open: check_id, at, detail.
    pub overlaps: Vec<(i64, UnixMs, String)>,
}

/// The kind of event recorded when a run starts while another is open.
pub const OVERLAP_EVENT: &str = "overlap";

/// Applies inbox pings in order to the checks' summaries (SPEC §2–§4): the
/// one place, for both backends, that decides what a ping is recorded as.
/// Pings of checks that no longer exist are dropped.
pub fn plan_fold<C: BorrowMut<FoldCheck>>(
    pings: &[StoredPing],
    checks: &mut HashMap<i64, C>,
    next_run_id: &mut dyn FnMut() -> i64,
) -> FoldPlan {
    let mut plan = FoldPlan::default();
    let mut seen = HashSet::new();
    for p in pings {
        let Some(entry) = checks.get_mut(&p.ping.check_id) else {
            continue;
        };
        let (kind, resumed, applied) = fold_one(entry.borrow_mut(), p, next_run_id);
        if resumed {
            plan.resumed.push(p.ping.check_id);
        }
        if seen.insert(p.ping.check_id) {
            plan.touched.push(p.ping.check_id);
        }
        for r in &applied.runs {
            if let RunChange::Open {
                overlapped: true,
                rid,
                ..
            } = r
            {
                let open = entry.borrow_mut().summary.open_runs.len();
                plan.overlaps.push((
                    p.ping.check_id,
                    p.ping.at,
                    format!(
                        "run {} started while {} other run(s) were open",
                        rid.map(|r| r.to_string()).unwrap_or_default(),
                        open.saturating_sub(1)
                    ),
                ));
            }
        }
        plan.runs
            .extend(applied.runs.into_iter().map(|r| (p.ping.check_id, r)));
        plan.pings.push(FoldedPing {
            id: p.id,
            n: applied.n,
            kind,
            duration_ms: applied.duration_ms,
        });
    }
    plan
}

fn fold_one(
    entry: &mut FoldCheck,
    stored: &StoredPing,
    next_run_id: &mut dyn FnMut() -> i64,
) -> (PingKind, bool, Applied) {
    let p = &stored.ping;
    let (kind, resume) = effective_kind(
        p.kind,
        &p.method,
        entry.methods,
        entry.paused,
        entry.manual_resume,
    );
    if resume {
        entry.paused = false;
    }
    let facts = PingFacts {
        at: p.at,
        kind,
        items: p.items,
        rid: p.rid,
    };
    let history = entry.history.as_mut().map(|buckets| WithHistory {
        buckets,
        ping_id: stored.id,
    });
    let applied = entry
        .summary
        .apply_with(&facts, entry.thresholds, history, next_run_id);
    (kind, resume, applied)
}

/// Read-your-writes: applies a check's pings still in the inbox to what was
/// read of it, and returns them as ping records (oldest first).
pub fn apply_pending(check: &mut Check, pending: &[StoredPing]) -> Vec<PingRecord> {
    apply_pending_runs(check, pending).0
}

/// Like [`apply_pending`] with the item history the pings need
/// (`items_below_usual`), so a success is judged as the fold will judge it.
pub fn apply_pending_with(
    check: &mut Check,
    pending: &[StoredPing],
    history: Option<Vec<HourBucket>>,
) -> Vec<PingRecord> {
    apply_pending_inner(check, pending, history).0
}

/// Like [`apply_pending`], also returning the run changes those pings make
/// (runs they open get provisional negative ids).
pub fn apply_pending_runs(
    check: &mut Check,
    pending: &[StoredPing],
) -> (Vec<PingRecord>, Vec<RunChange>) {
    apply_pending_inner(check, pending, None)
}

fn apply_pending_inner(
    check: &mut Check,
    pending: &[StoredPing],
    history: Option<Vec<HourBucket>>,
) -> (Vec<PingRecord>, Vec<RunChange>) {
    let mut entry = FoldCheck {
        summary: std::mem::take(&mut check.summary),
        paused: check.paused,
        manual_resume: check.spec.manual_resume,
        methods: check.spec.methods,
        thresholds: check.spec.thresholds(),
        history,
    };
    // Runs opened here get provisional ids; the fold assigns the real ones.
    let mut provisional = 0;
    let mut out = Vec::with_capacity(pending.len());
    let mut runs = Vec::new();
    for p in pending.iter().filter(|p| p.ping.check_id == check.id) {
        let (kind, _, applied) = fold_one(&mut entry, p, &mut || {
            provisional -= 1;
            provisional
        });
        runs.extend(applied.runs.iter().cloned());
        out.push(PingRecord {
            id: p.id,
            n: applied.n,
            at: p.ping.at,
            kind,
            exit_status: p.ping.exit_status.map(i64::from),
            items: p.ping.items.map(clamp_items),
            rid: p.ping.rid.map(|r| r.to_string()),
            method: p.ping.method.clone(),
            remote_addr: p.ping.remote_addr.clone(),
            user_agent: p.ping.user_agent.clone(),
            scheme: p.ping.scheme.to_string(),
            body: p.ping.body.clone(),
            duration_ms: applied.duration_ms,
            reason: p.ping.reason.clone(),
            slot: p.ping.slot,
        });
    }
    check.summary = entry.summary;
    check.paused = entry.paused;
    (out, runs)
}

/// Applies run changes of pending pings to runs read back (newest first).
pub fn merge_runs(mut runs: Vec<RunRecord>, changes: Vec<RunChange>, limit: u32) -> Vec<RunRecord> {
    for change in changes {
        match change {
            RunChange::Open {
                id,
                rid,
                started_at,
                overlapped,
            } => runs.insert(
                0,
                RunRecord {
                    id,
                    rid: rid.map(|r| r.to_string()),
                    started_at,
                    ended_at: None,
                    outcome: None,
                    reason: None,
                    duration_ms: None,
                    overlapped,
                },
            ),
            RunChange::Overlapped { id } => {
                if let Some(r) = runs.iter_mut().find(|r| r.id == id) {
                    r.overlapped = true;
                }
            }
            RunChange::Close {
                id,
                ended_at,
                outcome,
                duration_ms,
                reason,
            } => {
                if let Some(r) = runs.iter_mut().find(|r| r.id == id) {
                    r.ended_at = Some(ended_at);
                    r.outcome = Some(outcome.as_str().to_string());
                    r.duration_ms = Some(duration_ms);
                    r.reason = reason.map(str::to_string);
                }
            }
        }
    }
    runs.truncate(limit as usize);
    runs
}

/// A ping read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingRecord {
    pub id: i64,
    pub n: i64,
    pub at: UnixMs,
    pub kind: PingKind,
    pub exit_status: Option<i64>,
    pub items: Option<i64>,
    pub rid: Option<String>,
    pub method: String,
    pub remote_addr: Option<String>,
    pub user_agent: Option<String>,
    pub scheme: String,
    pub body: Vec<u8>,
    pub duration_ms: Option<i64>,
    /// Why a run was skipped (a `skip` ping).
    pub reason: Option<String>,
    /// The slot the ping was sent for (`?slot=`), if it named one.
    pub slot: Option<UnixMs>,
}

/// A run read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub id: i64,
    pub rid: Option<String>,
    pub started_at: UnixMs,
    pub ended_at: Option<UnixMs>,
    pub outcome: Option<String>,
    pub reason: Option<String>,
    pub duration_ms: Option<i64>,
    pub overlapped: bool,
}

/// Decides what a ping is recorded as, given its check's flags (SPEC §3.4, §4):
/// returns the recorded kind and whether the ping resumes a paused check.
pub fn effective_kind(
    requested: PingKind,
    method: &str,
    methods: Methods,
    paused: bool,
    manual_resume: bool,
) -> (PingKind, bool) {
    if methods == Methods::Post && method != "POST" {
        return (PingKind::Ignored, false);
    }
    let counts = matches!(
        requested,
        PingKind::Success | PingKind::Start | PingKind::Fail
    );
    if paused && counts {
        if manual_resume {
            return (PingKind::Ignored, false);
        }
        return (requested, true);
    }
    (requested, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_only_checks_ignore_other_methods() {
        assert_eq!(
            effective_kind(PingKind::Success, "GET", Methods::Post, false, false),
            (PingKind::Ignored, false)
        );
        assert_eq!(
            effective_kind(PingKind::Success, "POST", Methods::Post, false, false),
            (PingKind::Success, false)
        );
    }

    #[test]
    fn pings_resume_paused_checks_unless_manual_resume() {
        assert_eq!(
            effective_kind(PingKind::Success, "GET", Methods::Any, true, false),
            (PingKind::Success, true)
        );
        assert_eq!(
            effective_kind(PingKind::Start, "GET", Methods::Any, true, true),
            (PingKind::Ignored, false)
        );
        // A log ping neither resumes nor is ignored.
        assert_eq!(
            effective_kind(PingKind::Log, "GET", Methods::Any, true, false),
            (PingKind::Log, false)
        );
    }

    mod properties {
        use super::super::*;
        use crate::domain::check::CheckSpec;
        use proptest::prelude::*;

        /// Check, milliseconds after the ping before, kind, items, run id,
        /// sent with POST.
        type RawPing = (i64, i64, PingKind, Option<u64>, Option<u8>, bool);

        /// A ping to check 1 or 2, some milliseconds after the one before.
        fn ping() -> impl Strategy<Value = RawPing> {
            (
                1i64..=2,
                0i64..5_000,
                prop_oneof![
                    Just(PingKind::Success),
                    Just(PingKind::Start),
                    Just(PingKind::Fail),
                    Just(PingKind::Log),
                ],
                proptest::option::of(0u64..4),
                proptest::option::of(0u8..3),
                any::<bool>(),
            )
        }

        fn stored(raw: &[RawPing]) -> Vec<StoredPing> {
            let mut at = 1_000_000;
            raw.iter()
                .enumerate()
                .map(|(i, &(check, dt, kind, items, rid, post))| {
                    at += dt;
                    StoredPing {
                        id: i as i64 + 1,
                        ping: Ping {
                            items,
                            rid: rid.map(|r| Uuid::from_u128(u128::from(r) + 1)),
                            method: if post { "POST" } else { "GET" }.to_string(),
                            ..Ping::new(check, at, kind)
                        },
                    }
                })
                .collect()
        }

        fn check() -> impl Strategy<Value = FoldCheck> {
            (
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                1u32..3,
                1u32..3,
                proptest::option::of(1u64..4),
                proptest::option::of(1i64..3),
            )
                .prop_map(
                    |(
                        paused,
                        manual_resume,
                        post_only,
                        failure,
                        recovery,
                        min_items,
                        min_runtime_s,
                    )| {
                        FoldCheck {
                            summary: Summary::default(),
                            paused,
                            manual_resume,
                            methods: if post_only {
                                Methods::Post
                            } else {
                                Methods::Any
                            },
                            thresholds: Thresholds {
                                failure,
                                recovery,
                                min_items,
                                min_runtime_ms: min_runtime_s.map(|s| s * 1000),
                                below_usual: None,
                            },
                            history: None,
                        }
                    },
                )
        }

        /// Run ids differ between the writer (real ids) and readers
        /// (provisional ones); everything else must agree.
        fn without_run_ids(mut s: Summary) -> Summary {
            for r in &mut s.open_runs {
                r.id = 0;
            }
            s
        }

        fn fold(
            pings: &[StoredPing],
            checks: &mut HashMap<i64, FoldCheck>,
            next: &mut i64,
        ) -> Vec<(i64, i64, PingKind, Option<i64>)> {
            let plan = plan_fold(pings, checks, &mut || {
                *next += 1;
                *next
            });
            plan.pings
                .iter()
                .map(|f| (f.id, f.n, f.kind, f.duration_ms))
                .collect()
        }

        proptest! {
            /// Folding pings in one batch or in two gives the same summaries
            /// and records every ping the same way: where a fold cuts the
            /// stream (a batch, a round, a write settling a check) never
            /// changes what a ping means.
            #[test]
            fn batches_do_not_change_what_pings_mean(
                raw in proptest::collection::vec(ping(), 0..40),
                cut in 0usize..40,
                a in check(),
                b in check(),
            ) {
                let pings = stored(&raw);
                let cut = cut.min(pings.len());
                let start = HashMap::from([(1, a), (2, b)]);
                let mut whole = start.clone();
                let mut next = 0;
                let once = fold(&pings, &mut whole, &mut next);
                let mut split = start;
                let mut next = 0;
                let mut twice = fold(&pings[..cut], &mut split, &mut next);
                twice.extend(fold(&pings[cut..], &mut split, &mut next));
                prop_assert_eq!(once, twice);
                prop_assert_eq!(whole, split);
            }

            /// A reader applying a check's pending pings to what it read
            /// shows what the writer's fold stores: the same summary, the
            /// same paused flag, every ping recorded the same way.
            #[test]
            fn readers_agree_with_the_writer(
                raw in proptest::collection::vec(ping(), 0..40),
                a in check(),
            ) {
                let pings = stored(&raw);
                let mut checks = HashMap::from([(1, a.clone())]);
                let mut next = 0;
                let written = fold(&pings, &mut checks, &mut next);
                let written: Vec<_> = written
                    .into_iter()
                    .filter(|(id, ..)| pings[*id as usize - 1].ping.check_id == 1)
                    .collect();
                let mut spec = CheckSpec::with_slug("c");
                spec.manual_resume = a.manual_resume;
                spec.methods = a.methods;
                spec.failure_threshold = a.thresholds.failure;
                spec.recovery_threshold = a.thresholds.recovery;
                spec.min_items = a.thresholds.min_items;
                spec.min_items_runs = spec.min_items.map(|_| 1);
                spec.min_runtime = a
                    .thresholds
                    .min_runtime_ms
                    .map(|ms| std::time::Duration::from_millis(ms as u64));
                let mut read = Check {
                    id: 1,
                    uuid: Uuid::nil(),
                    spec,
                    paused: a.paused,
                    source: "api".into(),
                    created_at: 0,
                    summary: Summary::default(),
                    inhibited_by: Vec::new(),
                };
                let records = apply_pending(&mut read, &pings);
                let shown: Vec<_> = records
                    .iter()
                    .map(|r| (r.id, r.n, r.kind, r.duration_ms))
                    .collect();
                prop_assert_eq!(shown, written);
                prop_assert_eq!(read.paused, checks[&1].paused);
                prop_assert_eq!(
                    without_run_ids(read.summary),
                    without_run_ids(checks[&1].summary.clone())
                );
            }

            /// One check's pings never change another check.
            #[test]
            fn checks_are_folded_apart(
                raw in proptest::collection::vec(ping(), 0..40),
                a in check(),
                b in check(),
            ) {
                let pings = stored(&raw);
                let mut both = HashMap::from([(1, a.clone()), (2, b)]);
                let mut next = 0;
                fold(&pings, &mut both, &mut next);
                let mine: Vec<StoredPing> =
                    pings.iter().filter(|p| p.ping.check_id == 1).cloned().collect();
                let mut alone = HashMap::from([(1, a)]);
                let mut next = 0;
                fold(&mine, &mut alone, &mut next);
                prop_assert_eq!(
                    without_run_ids(both[&1].summary.clone()),
                    without_run_ids(alone[&1].summary.clone())
                );
                prop_assert_eq!(both[&1].paused, alone[&1].paused);
            }

            /// What a ping is recorded as, and whether it resumes the check,
            /// for every combination of flags (SPEC §3.4, §4).
            #[test]
            fn effective_kind_follows_the_flags(
                kind in prop_oneof![
                    Just(PingKind::Success),
                    Just(PingKind::Start),
                    Just(PingKind::Fail),
                    Just(PingKind::Log),
                ],
                post in any::<bool>(),
                post_only in any::<bool>(),
                paused in any::<bool>(),
                manual_resume in any::<bool>(),
            ) {
                let method = if post { "POST" } else { "GET" };
                let methods = if post_only { Methods::Post } else { Methods::Any };
                let (recorded, resumes) =
                    effective_kind(kind, method, methods, paused, manual_resume);
                let wrong_method = post_only && !post;
                let counts = kind != PingKind::Log;
                let ignored = wrong_method || (paused && manual_resume && counts);
                prop_assert_eq!(recorded == PingKind::Ignored, ignored);
                if !ignored {
                    prop_assert_eq!(recorded, kind);
                }
                prop_assert_eq!(resumes, !wrong_method && paused && !manual_resume && counts);
            }
        }
    }
}
