//! Rows as both backends read and write them, and their conversion to and
//! from domain types: the store turns rows into checks, summaries and pings
//! here, so nothing above it sees a column.

use std::collections::BTreeMap;
use std::time::Duration;

use uuid::Uuid;

use super::eval_rows::stored_status;
use super::{CheckRef, CheckSource, EvalCheck, StoredStatus};
use crate::domain::check::{
    Check, CheckSpec, Methods, Schedule, WindowInput, DEFAULT_ITEMS_WINDOW, WEEK,
};
use crate::domain::fold::{apply_pending_with, FoldCheck, Ping, PingRecord, RunRecord, StoredPing};
use crate::domain::ping::{clamp_items, OpenRun, PingKind, Summary, Thresholds};
use crate::domain::usual::{HourBucket, UsualRule};

/// The columns of `ping_inbox`, as both backends read them.
#[derive(sqlx::FromRow)]
pub(crate) struct InboxRow {
    pub(crate) id: i64,
    check_id: i64,
    at: i64,
    kind: String,
    exit_status: Option<i64>,
    items: Option<i64>,
    rid: Option<String>,
    method: String,
    remote_addr: Option<String>,
    user_agent: Option<String>,
    scheme: String,
    body: Option<Vec<u8>>,
    reason: Option<String>,
    slot: Option<i64>,
}

pub(crate) const INBOX_COLUMNS: &str = "id, check_id, at, kind, exit_status, items, rid, \
    method, remote_addr, user_agent, scheme, body, reason, slot";

impl InboxRow {
    pub(crate) fn into_ping(self) -> StoredPing {
        StoredPing {
            id: self.id,
            ping: Ping {
                check_id: self.check_id,
                at: self.at,
                kind: PingKind::parse(&self.kind).unwrap_or(PingKind::Log),
                exit_status: self.exit_status.and_then(|c| u8::try_from(c).ok()),
                items: self.items.and_then(|i| u64::try_from(i).ok()),
                rid: self.rid.as_deref().and_then(|r| Uuid::parse_str(r).ok()),
                method: self.method,
                remote_addr: self.remote_addr,
                user_agent: self.user_agent,
                scheme: if self.scheme == "https" {
                    "https"
                } else {
                    "http"
                },
                body: self.body.unwrap_or_default(),
                reason: self.reason,
                slot: self.slot,
            },
        }
    }
}

/// The columns of `pings`, as both backends read them.
#[derive(sqlx::FromRow)]
pub(crate) struct PingRow {
    id: i64,
    n: i64,
    at: i64,
    kind: String,
    exit_status: Option<i64>,
    items: Option<i64>,
    rid: Option<String>,
    method: String,
    remote_addr: Option<String>,
    user_agent: Option<String>,
    scheme: String,
    body: Option<Vec<u8>>,
    duration_ms: Option<i64>,
    reason: Option<String>,
    slot: Option<i64>,
}

impl PingRow {
    pub(crate) fn into_record(self) -> PingRecord {
        PingRecord {
            id: self.id,
            n: self.n,
            at: self.at,
            kind: PingKind::parse(&self.kind).unwrap_or(PingKind::Log),
            exit_status: self.exit_status,
            items: self.items,
            rid: self.rid,
            method: self.method,
            remote_addr: self.remote_addr,
            user_agent: self.user_agent,
            scheme: self.scheme,
            body: self.body.unwrap_or_default(),
            duration_ms: self.duration_ms,
            reason: self.reason,
            slot: self.slot,
        }
    }
}

/// The columns of `runs`, as both backends read them.
#[derive(sqlx::FromRow)]
pub(crate) struct RunRow {
    id: i64,
    rid: Option<String>,
    started_at: i64,
    ended_at: Option<i64>,
    outcome: Option<String>,
    reason: Option<String>,
    duration_ms: Option<i64>,
    overlapped: bool,
}

impl RunRow {
    pub(crate) fn into_record(self) -> RunRecord {
        RunRecord {
            id: self.id,
            rid: self.rid,
            started_at: self.started_at,
            ended_at: self.ended_at,
            outcome: self.outcome,
            reason: self.reason,
            duration_ms: self.duration_ms,
            overlapped: self.overlapped,
        }
    }
}

/// The columns of `checks` joined with `check_state`, as both backends read them.
#[derive(sqlx::FromRow)]
pub(crate) struct CheckRow {
    id: i64,
    uuid: String,
    slug: Option<String>,
    name: String,
    description: String,
    labels: String,
    interval_ms: Option<i64>,
    cron: Option<String>,
    tz: String,
    grace_ms: Option<i64>,
    active_hours: String,
    zero_items_after_ms: Option<i64>,
    zero_items_runs: Option<i64>,
    min_items: Option<i64>,
    min_items_runs: Option<i64>,
    items_below_usual_ppm: Option<i64>,
    items_window_ms: Option<i64>,
    min_runtime_ms: Option<i64>,
    failure_threshold: i64,
    recovery_threshold: i64,
    max_runtime_ms: Option<i64>,
    alert_on_overlap: bool,
    max_instances: i64,
    alert_on_duplicate: bool,
    manual_resume: bool,
    methods: String,
    depends_on: String,
    paused: bool,
    source: String,
    created_at: i64,
    /// `incidents.inhibited_by` of the check's open incident, if any.
    inhibited_by: Option<String>,
    #[sqlx(flatten)]
    state: SummaryRow,
}

/// The columns of `check_state` (also read, in this order, from the JSON
/// array of a page of the evaluator's start-up: eval_rows.rs).
#[derive(sqlx::FromRow, Default, serde::Deserialize)]
pub(crate) struct SummaryRow {
    pub(crate) n_pings: i64,
    pub(crate) last_ping_at: Option<i64>,
    pub(crate) last_ping_kind: Option<String>,
    pub(crate) last_success_at: Option<i64>,
    pub(crate) last_start_at: Option<i64>,
    pub(crate) last_failure_at: Option<i64>,
    pub(crate) last_items: Option<i64>,
    pub(crate) last_items_at: Option<i64>,
    pub(crate) zero_streak_since: Option<i64>,
    pub(crate) zero_streak_runs: i64,
    pub(crate) low_streak_runs: i64,
    pub(crate) below_streak_runs: i64,
    #[serde(deserialize_with = "super::eval_rows::exact_float")]
    pub(crate) usual_items: Option<f64>,
    pub(crate) consecutive_failures: i64,
    pub(crate) consecutive_successes: i64,
    pub(crate) last_duration_ms: Option<i64>,
    pub(crate) open_runs: String,
    pub(crate) overlap_count: i64,
    pub(crate) failed_since: Option<i64>,
    pub(crate) timed_out_at: Option<i64>,
}

pub(crate) const CHECK_COLUMNS: &str = "c.id, c.uuid, c.slug, c.name, c.description, c.labels, \
    c.interval_ms, c.cron, c.tz, c.grace_ms, c.active_hours, c.zero_items_after_ms, \
    c.zero_items_runs, c.min_items, c.min_items_runs, c.items_below_usual_ppm, c.items_window_ms, \
    c.min_runtime_ms, c.failure_threshold, c.recovery_threshold, c.max_runtime_ms, \
    c.alert_on_overlap, c.max_instances, c.alert_on_duplicate, c.manual_resume, c.methods, c.depends_on, c.paused, \
    c.source, c.created_at, \
    (SELECT i.inhibited_by FROM incidents i WHERE i.check_id = c.id AND i.resolved_at IS NULL) \
    AS inhibited_by, \
    s.n_pings, s.last_ping_at, s.last_ping_kind, s.last_success_at, s.last_start_at, \
    s.last_failure_at, s.last_items, s.last_items_at, s.zero_streak_since, s.zero_streak_runs, \
    s.low_streak_runs, s.below_streak_runs, s.usual_items, s.consecutive_failures, \
    s.consecutive_successes, s.last_duration_ms, s.open_runs, s.overlap_count, \
    s.failed_since, s.timed_out_at";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn duration(ms: Option<i64>) -> Option<Duration> {
    ms.map(|m| Duration::from_millis(m.max(0) as u64))
}

impl SummaryRow {
    pub(crate) fn into_summary(self) -> anyhow::Result<Summary> {
        // Most checks have no open run: no parser needed.
        let open_runs: Vec<OpenRun> = if self.open_runs == "[]" {
            Vec::new()
        } else {
            serde_json::from_str(&self.open_runs)
                .map_err(|e| anyhow::anyhow!("check_state.open_runs is not valid JSON: {e}"))?
        };
        Ok(Summary {
            n_pings: self.n_pings,
            last_ping_at: self.last_ping_at,
            last_ping_kind: self.last_ping_kind.as_deref().and_then(PingKind::parse),
            last_success_at: self.last_success_at,
            last_start_at: self.last_start_at,
            last_failure_at: self.last_failure_at,
            last_items: self.last_items,
            last_items_at: self.last_items_at,
            zero_streak_since: self.zero_streak_since,
            zero_streak_runs: self.zero_streak_runs,
            low_streak_runs: self.low_streak_runs,
            below_streak_runs: self.below_streak_runs,
            usual_items: self.usual_items,
            consecutive_failures: self.consecutive_failures,
            consecutive_successes: self.consecutive_successes,
            last_duration_ms: self.last_duration_ms,
            open_runs,
            overlaps: self.overlap_count,
            failed_since: self.failed_since,
            timed_out_at: self.timed_out_at,
        })
    }
}

impl CheckRow {
    pub(crate) fn into_check(self) -> anyhow::Result<Check> {
        let labels: BTreeMap<String, String> = serde_json::from_str(&self.labels)
            .map_err(|e| anyhow::anyhow!("checks.labels is not valid JSON: {e}"))?;
        let active_hours: Vec<WindowInput> = serde_json::from_str(&self.active_hours)
            .map_err(|e| anyhow::anyhow!("checks.active_hours is not valid JSON: {e}"))?;
        let schedule = match (self.cron, self.interval_ms) {
            (Some(expr), _) => Schedule::Cron(expr),
            (None, ms) => {
                Schedule::Interval(duration(ms).unwrap_or(crate::domain::check::DEFAULT_INTERVAL))
            }
        };
        let depends_on: Vec<String> = serde_json::from_str(&self.depends_on)
            .map_err(|e| anyhow::anyhow!("checks.depends_on is not valid JSON: {e}"))?;
        // Written by the dispatcher; a value it could not have written reads
        // as "not held" rather than making the check unreadable.
        let inhibited_by: Vec<String> = self
            .inhibited_by
            .as_deref()
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default();
        let uuid = Uuid::parse_str(&self.uuid)
            .map_err(|e| anyhow::anyhow!("checks.uuid {:?} is not a UUID: {e}", self.uuid))?;
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(Check {
            id: self.id,
            uuid,
            spec: CheckSpec {
                uuid: Some(uuid),
                slug: self.slug,
                name: self.name,
                description: self.description,
                labels,
                schedule,
                tz: self.tz,
                grace: duration(self.grace_ms),
                active_hours,
                zero_items_after: duration(self.zero_items_after_ms),
                zero_items_runs: self.zero_items_runs.map(count),
                min_items: self.min_items.and_then(|n| u64::try_from(n).ok()),
                min_items_runs: self.min_items_runs.map(count),
                items_below_usual_ppm: self.items_below_usual_ppm.map(count),
                items_window: duration(self.items_window_ms),
                min_runtime: duration(self.min_runtime_ms),
                failure_threshold: count(self.failure_threshold),
                recovery_threshold: count(self.recovery_threshold),
                max_runtime: duration(self.max_runtime_ms),
                alert_on_overlap: self.alert_on_overlap,
                max_instances: u32::try_from(self.max_instances).unwrap_or(1).max(1),
                alert_on_duplicate: self.alert_on_duplicate,
                manual_resume: self.manual_resume,
                methods: if self.methods == "POST" {
                    Methods::Post
                } else {
                    Methods::Any
                },
                depends_on,
            },
            paused: self.paused,
            source: self.source,
            created_at: self.created_at,
            summary: self.state.into_summary()?,
            inhibited_by,
        })
    }
}

/// The columns the ping writer needs per check (flags, thresholds, summary).
pub(crate) const WRITER_COLUMNS: &str = "c.id, c.paused, c.manual_resume, c.methods, \
    c.failure_threshold, c.recovery_threshold, c.min_items, c.min_runtime_ms, \
    c.items_below_usual_ppm, c.items_window_ms, c.tz, s.n_pings, s.last_ping_at, s.last_ping_kind, \
    s.last_success_at, s.last_start_at, s.last_failure_at, s.last_items, s.last_items_at, \
    s.zero_streak_since, s.zero_streak_runs, s.low_streak_runs, s.below_streak_runs, \
    s.usual_items, s.consecutive_failures, \
    s.consecutive_successes, s.last_duration_ms, s.open_runs, s.overlap_count, s.failed_since, s.timed_out_at, \
    s.folded_through";

/// A row of [`WRITER_COLUMNS`].
#[derive(sqlx::FromRow)]
pub(crate) struct WriterRow {
    id: i64,
    paused: bool,
    manual_resume: bool,
    methods: String,
    failure_threshold: i64,
    recovery_threshold: i64,
    min_items: Option<i64>,
    min_runtime_ms: Option<i64>,
    items_below_usual_ppm: Option<i64>,
    items_window_ms: Option<i64>,
    tz: String,
    folded_through: i64,
    #[sqlx(flatten)]
    state: SummaryRow,
}

/// What the ping writer keeps of one check: what folding needs, and (SQLite)
/// how far its written summary goes.
#[derive(Debug, Clone)]
pub(crate) struct WriterCheck {
    pub fold: FoldCheck,
    /// The last inbox id whose ping the summary holds (SQLite; see
    /// `check_state.folded_through`).
    pub folded_through: i64,
}

impl std::ops::Deref for WriterCheck {
    type Target = FoldCheck;

    fn deref(&self) -> &FoldCheck {
        &self.fold
    }
}

impl std::ops::DerefMut for WriterCheck {
    fn deref_mut(&mut self) -> &mut FoldCheck {
        &mut self.fold
    }
}

impl std::borrow::Borrow<FoldCheck> for WriterCheck {
    fn borrow(&self) -> &FoldCheck {
        &self.fold
    }
}

impl std::borrow::BorrowMut<FoldCheck> for WriterCheck {
    fn borrow_mut(&mut self) -> &mut FoldCheck {
        &mut self.fold
    }
}

impl WriterRow {
    pub(crate) fn into_parts(self) -> anyhow::Result<(i64, WriterCheck)> {
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok((
            self.id,
            WriterCheck {
                fold: FoldCheck {
                    summary: self.state.into_summary()?,
                    paused: self.paused,
                    manual_resume: self.manual_resume,
                    methods: if self.methods == "POST" {
                        Methods::Post
                    } else {
                        Methods::Any
                    },
                    thresholds: Thresholds {
                        failure: count(self.failure_threshold),
                        recovery: count(self.recovery_threshold),
                        min_items: self.min_items.and_then(|n| u64::try_from(n).ok()),
                        min_runtime_ms: self.min_runtime_ms,
                        below_usual: usual_rule(
                            self.items_below_usual_ppm,
                            self.items_window_ms,
                            &self.tz,
                        ),
                    },
                    history: None,
                },
                folded_through: self.folded_through,
            },
        ))
    }
}

/// The usual-count rule of a check's columns (SPEC §3.3).
pub(crate) fn usual_rule(ppm: Option<i64>, window_ms: Option<i64>, tz: &str) -> Option<UsualRule> {
    let window = duration(window_ms).unwrap_or(DEFAULT_ITEMS_WINDOW);
    Some(UsualRule {
        fraction_ppm: u32::try_from(ppm?).ok()?,
        weeks: u32::try_from(window.as_secs() / WEEK.as_secs()).unwrap_or(u32::MAX),
        tz: tz.parse().ok()?,
    })
}

/// The columns the evaluator loads: the check, its summary and stored status.
pub(crate) const EVAL_COLUMNS: &str = "st.status AS stored_status, st.reason AS stored_reason, \
    st.since AS stored_since, st.quiet AS stored_quiet";

/// A check row with the evaluator's stored status.
#[derive(sqlx::FromRow)]
pub(crate) struct EvalRow {
    #[sqlx(flatten)]
    check: CheckRow,
    stored_status: Option<String>,
    stored_reason: Option<String>,
    stored_since: Option<i64>,
    stored_quiet: Option<bool>,
}

impl EvalRow {
    /// The check with its pings still in the inbox applied (read-your-writes).
    pub(crate) fn into_eval_with(
        self,
        pending: &[StoredPing],
        history: Option<Vec<HourBucket>>,
    ) -> anyhow::Result<EvalCheck> {
        let stored = stored_status(
            self.stored_status.as_deref(),
            self.stored_reason.as_deref(),
            self.stored_since,
            self.stored_quiet,
        );
        Ok(eval_check(
            self.check.into_check()?,
            stored,
            pending,
            history,
        ))
    }
}

/// A check as the evaluator loads it: `check` with its pings still in the
/// inbox applied (read-your-writes).
pub(crate) fn eval_check(
    mut check: Check,
    stored: Option<StoredStatus>,
    pending: &[StoredPing],
    history: Option<Vec<HourBucket>>,
) -> EvalCheck {
    apply_pending_with(&mut check, pending, history);
    EvalCheck {
        id: check.id,
        spec: check.spec,
        paused: check.paused,
        summary: check.summary,
        stored,
    }
}

/// The values of a new `checks` row, in one place for both backends.
#[derive(Clone)]
pub(crate) struct CheckValues {
    pub uuid: String,
    pub unique_key: String,
    pub slug: Option<String>,
    pub name: String,
    pub description: String,
    pub labels: String,
    pub interval_ms: Option<i64>,
    pub cron: Option<String>,
    pub tz: String,
    pub grace_ms: Option<i64>,
    pub active_hours: String,
    pub zero_items_after_ms: Option<i64>,
    pub zero_items_runs: Option<i64>,
    pub min_items: Option<i64>,
    pub min_items_runs: Option<i64>,
    pub items_below_usual_ppm: Option<i64>,
    pub items_window_ms: Option<i64>,
    pub min_runtime_ms: Option<i64>,
    pub failure_threshold: i64,
    pub recovery_threshold: i64,
    pub max_runtime_ms: Option<i64>,
    pub alert_on_overlap: bool,
    pub max_instances: i64,
    pub alert_on_duplicate: bool,
    pub manual_resume: bool,
    pub methods: &'static str,
    pub depends_on: String,
    pub source: &'static str,
}

impl CheckValues {
    pub(crate) fn new(spec: &CheckSpec, source: CheckSource) -> anyhow::Result<CheckValues> {
        let uuid = spec.uuid.unwrap_or_else(Uuid::new_v4);
        Ok(CheckValues {
            uuid: uuid.to_string(),
            unique_key: crate::domain::name::unique_key(uuid),
            slug: spec.slug.clone(),
            name: spec.name.clone(),
            description: spec.description.clone(),
            labels: serde_json::to_string(&spec.labels)?,
            interval_ms: spec.interval().map(ms),
            cron: spec.cron().map(str::to_string),
            tz: spec.tz.clone(),
            grace_ms: spec.grace.map(ms),
            active_hours: serde_json::to_string(&spec.active_hours)?,
            zero_items_after_ms: spec.zero_items_after.map(ms),
            zero_items_runs: spec.zero_items_runs.map(i64::from),
            min_items: spec.min_items.map(clamp_items),
            min_items_runs: spec.min_items_runs.map(i64::from),
            items_below_usual_ppm: spec.items_below_usual_ppm.map(i64::from),
            items_window_ms: spec.items_window.map(ms),
            min_runtime_ms: spec.min_runtime.map(ms),
            failure_threshold: i64::from(spec.failure_threshold),
            recovery_threshold: i64::from(spec.recovery_threshold),
            max_runtime_ms: spec.max_runtime.map(ms),
            alert_on_overlap: spec.alert_on_overlap,
            max_instances: i64::from(spec.max_instances),
            alert_on_duplicate: spec.alert_on_duplicate,
            manual_resume: spec.manual_resume,
            methods: spec.methods.as_str(),
            depends_on: serde_json::to_string(&spec.depends_on)?,
            source: source.as_str(),
        })
    }
}

/// The SQL that inserts a check, for both backends.
pub(crate) fn insert_check_sql() -> String {
    let cols = [
        "uuid",
        "unique_key",
        "slug",
        "name",
        "description",
        "labels",
        "interval_ms",
        "cron",
        "tz",
        "grace_ms",
        "active_hours",
        "zero_items_after_ms",
        "zero_items_runs",
        "min_items",
        "min_items_runs",
        "items_below_usual_ppm",
        "items_window_ms",
        "min_runtime_ms",
        "failure_threshold",
        "recovery_threshold",
        "max_runtime_ms",
        "alert_on_overlap",
        "max_instances",
        "alert_on_duplicate",
        "manual_resume",
        "methods",
        "depends_on",
        "source",
        "created_at",
        "updated_at",
    ];
    let params: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
    format!(
        "INSERT INTO checks ({}) VALUES ({}) RETURNING id",
        cols.join(", "),
        params.join(", ")
    )
}

/// The columns an update rewrites, in bind order (then `updated_at`, then the id).
const UPDATE_COLUMNS: &[&str] = &[
    "slug",
    "name",
    "description",
    "labels",
    "interval_ms",
    "cron",
    "tz",
    "grace_ms",
    "active_hours",
    "zero_items_after_ms",
    "zero_items_runs",
    "min_items",
    "min_items_runs",
    "items_below_usual_ppm",
    "items_window_ms",
    "min_runtime_ms",
    "failure_threshold",
    "recovery_threshold",
    "max_runtime_ms",
    "alert_on_overlap",
    "max_instances",
    "alert_on_duplicate",
    "manual_resume",
    "methods",
    "depends_on",
    "updated_at",
];

/// The SQL that rewrites a check's definition, for both backends.
pub(crate) fn update_check_sql() -> String {
    let sets: Vec<String> = UPDATE_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = ${}", i + 1))
        .collect();
    format!(
        "UPDATE checks SET {} WHERE id = ${}",
        sets.join(", "),
        UPDATE_COLUMNS.len() + 1
    )
}

/// Binds [`CheckValues`] in the order of [`update_check_sql`].
macro_rules! bind_update_values {
    ($query:expr, $v:expr, $now:expr, $id:expr) => {
        $query
            .bind($v.slug.clone())
            .bind($v.name.clone())
            .bind($v.description.clone())
            .bind($v.labels.clone())
            .bind($v.interval_ms)
            .bind($v.cron.clone())
            .bind($v.tz.clone())
            .bind($v.grace_ms)
            .bind($v.active_hours.clone())
            .bind($v.zero_items_after_ms)
            .bind($v.zero_items_runs)
            .bind($v.min_items)
            .bind($v.min_items_runs)
            .bind($v.items_below_usual_ppm)
            .bind($v.items_window_ms)
            .bind($v.min_runtime_ms)
            .bind($v.failure_threshold)
            .bind($v.recovery_threshold)
            .bind($v.max_runtime_ms)
            .bind($v.alert_on_overlap)
            .bind($v.max_instances)
            .bind($v.alert_on_duplicate)
            .bind($v.manual_resume)
            .bind($v.methods)
            .bind($v.depends_on.clone())
            .bind($now)
            .bind($id)
    };
}
pub(crate) use bind_update_values;

/// Binds [`CheckValues`] in the order of [`insert_check_sql`].
macro_rules! bind_check_values {
    ($query:expr, $v:expr, $now:expr) => {
        $query
            .bind($v.uuid.clone())
            .bind($v.unique_key.clone())
            .bind($v.slug.clone())
            .bind($v.name.clone())
            .bind($v.description.clone())
            .bind($v.labels.clone())
            .bind($v.interval_ms)
            .bind($v.cron.clone())
            .bind($v.tz.clone())
            .bind($v.grace_ms)
            .bind($v.active_hours.clone())
            .bind($v.zero_items_after_ms)
            .bind($v.zero_items_runs)
            .bind($v.min_items)
            .bind($v.min_items_runs)
            .bind($v.items_below_usual_ppm)
            .bind($v.items_window_ms)
            .bind($v.min_runtime_ms)
            .bind($v.failure_threshold)
            .bind($v.recovery_threshold)
            .bind($v.max_runtime_ms)
            .bind($v.alert_on_overlap)
            .bind($v.max_instances)
            .bind($v.alert_on_duplicate)
            .bind($v.manual_resume)
            .bind($v.methods)
            .bind($v.depends_on.clone())
            .bind($v.source)
            .bind($now)
            .bind($now)
    };
}
pub(crate) use bind_check_values;

/// A routing entry from an `(id, uuid, slug)` row.
pub(crate) fn check_ref((id, uuid, slug): (i64, String, Option<String>)) -> Option<CheckRef> {
    Some(CheckRef {
        id,
        uuid: Uuid::parse_str(&uuid).ok()?,
        slug,
    })
}
