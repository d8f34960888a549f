//! Storage: one [`Store`] trait, a SQLite and a PostgreSQL implementation.
//! Rows are turned into domain types here; nothing outside this folder writes SQL.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::config::Config;
use crate::domain::check::{Check, CheckSpec, Methods, Schedule, WindowInput};
use crate::domain::fold::{apply_pending, FoldCheck, Ping, PingRecord, RunRecord, StoredPing};
use crate::domain::ping::{OpenRun, PingKind, Summary, Thresholds, UnixMs};
use crate::domain::status::{Reason, Status};

pub mod keys;
pub mod lease;
pub mod metrics;
pub mod notify;
pub mod postgres;
pub mod retention;
pub mod sqlite;

/// What went wrong in the store, as the rest of the code needs to know it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("conflict: {0}")]
    Conflict(String),
    /// A leader-only write by a replica that does not hold the lease (any
    /// more): refused, so an ex-leader never writes after losing it.
    #[error("this replica does not hold the leader lease")]
    NotLeader,
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::UniqueViolation => {
                StoreError::Conflict("already exists".to_string())
            }
            _ => StoreError::Other(anyhow::Error::new(e)),
        }
    }
}

/// Who created a check: reconcile only touches its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckSource {
    Api,
    Config,
    /// Created by a ping with `?create=1`.
    Ping,
}

impl CheckSource {
    fn as_str(self) -> &'static str {
        match self {
            CheckSource::Api => "api",
            CheckSource::Config => "config",
            CheckSource::Ping => "ping",
        }
    }
}

/// The little the ping path needs to route a ping to its check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRef {
    pub id: i64,
    pub uuid: Uuid,
    pub slug: Option<String>,
}

/// What one fold did.
#[derive(Debug, Clone, Default)]
pub struct Folded {
    /// Inbox rows folded.
    pub pings: usize,
    /// The new state of every check the fold touched (for the evaluator).
    pub touched: Vec<Touched>,
    /// More rows were waiting than one fold takes.
    pub more: bool,
    /// SQLite: a round of writes is under way, one chunk per fold call; the
    /// folder keeps calling until it is done.
    pub writing: bool,
}

/// A check's state after a write.
#[derive(Debug, Clone)]
pub struct Touched {
    pub check_id: i64,
    pub summary: Summary,
    pub paused: bool,
}

/// The status the evaluator last recorded for a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredStatus {
    pub status: Status,
    pub reason: Option<Reason>,
    pub since: UnixMs,
    pub quiet: bool,
}

/// A check as the evaluator loads it.
#[derive(Debug, Clone)]
pub struct EvalCheck {
    pub id: i64,
    pub spec: CheckSpec,
    pub paused: bool,
    pub summary: Summary,
    pub stored: Option<StoredStatus>,
}

/// A change the evaluator records.
#[derive(Debug, Clone)]
pub struct Transition {
    pub check_id: i64,
    /// The stored status this replaces (`None`: nothing stored yet).
    pub from: Option<StoredStatus>,
    pub to: StoredStatus,
    /// Record a flip (status or reason changed) at `to.since`.
    pub flip: bool,
    /// Record entering (`true`) or leaving quiet hours at this instant.
    pub quiet_event: Option<(UnixMs, bool)>,
    pub now: UnixMs,
}

/// A recorded status change.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FlipRecord {
    pub at: UnixMs,
    pub old_status: String,
    pub new_status: String,
    pub reason: Option<String>,
}

/// A recorded incident.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IncidentRecord {
    pub id: i64,
    pub opened_at: UnixMs,
    pub status: String,
    pub reason: Option<String>,
    pub resolved_at: Option<UnixMs>,
}

/// A recorded event that is not a status change.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRecord {
    pub at: UnixMs,
    pub kind: String,
    pub detail: Option<String>,
}

/// The kind of event recorded on entering or leaving quiet hours.
pub const QUIET_EVENT: &str = "skipped: quiet-hours";

/// A `flips` row: check_id, at, old status, new status, reason, recorded_at.
pub(crate) type FlipRow = (
    i64,
    UnixMs,
    &'static str,
    &'static str,
    Option<&'static str>,
    UnixMs,
);

/// A batch of transitions as the rows each table receives.
#[derive(Default)]
pub(crate) struct TransitionRows {
    /// check_id, status, reason, since, quiet
    pub status: Vec<(i64, &'static str, Option<&'static str>, UnixMs, bool)>,
    pub flips: Vec<FlipRow>,
    /// check_id, opened_at, status, reason
    pub opened: Vec<(i64, UnixMs, &'static str, Option<&'static str>)>,
    /// check_id, resolved_at
    pub resolved: Vec<(i64, UnixMs)>,
    /// check_id, at, detail
    pub events: Vec<(i64, UnixMs, &'static str)>,
}

impl TransitionRows {
    /// The rows for the transitions of `batch` whose check is in `live`
    /// (the others' checks were deleted since they were evaluated).
    pub(crate) fn new(batch: &[Transition], live: &HashSet<i64>) -> TransitionRows {
        let mut rows = TransitionRows::default();
        for t in batch.iter().filter(|t| live.contains(&t.check_id)) {
            let to = &t.to;
            let reason = to.reason.map(Reason::as_str);
            rows.status
                .push((t.check_id, to.status.as_str(), reason, to.since, to.quiet));
            let old = t.from.map_or(Status::New, |f| f.status);
            if t.flip {
                rows.flips.push((
                    t.check_id,
                    to.since,
                    old.as_str(),
                    to.status.as_str(),
                    reason,
                    t.now,
                ));
            }
            if to.status.is_failing() && !old.is_failing() {
                rows.opened
                    .push((t.check_id, to.since, to.status.as_str(), reason));
            } else if old.is_failing() && !to.status.is_failing() {
                rows.resolved.push((t.check_id, to.since));
            }
            if let Some((at, entering)) = t.quiet_event {
                rows.events.push((t.check_id, at, quiet_detail(entering)));
            }
        }
        rows
    }
}

pub(crate) fn quiet_detail(entering: bool) -> &'static str {
    if entering {
        "entered quiet hours"
    } else {
        "left quiet hours"
    }
}

/// The columns of `ping_inbox`, as both backends read them.
#[derive(sqlx::FromRow)]
pub(crate) struct InboxRow {
    id: i64,
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
}

pub(crate) const INBOX_COLUMNS: &str = "id, check_id, at, kind, exit_status, items, rid, \
    method, remote_addr, user_agent, scheme, body";

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

/// The storage operations the server needs.
#[async_trait]
pub trait Store:
    notify::NotifyStore
    + lease::LeaseStore
    + metrics::MetricsStore
    + keys::KeyStore
    + retention::RetentionStore
    + Send
    + Sync
    + 'static
{
    /// Succeeds when the database answers.
    async fn health(&self) -> Result<(), StoreError>;
    /// True when other processes may write to the same database (PostgreSQL).
    fn shared(&self) -> bool;
    /// How many ping batches may be appended at once.
    fn append_concurrency(&self) -> usize;
    /// Creates a check; `Conflict` when its uuid or slug is taken.
    async fn create_check(
        &self,
        spec: &CheckSpec,
        source: CheckSource,
        now: UnixMs,
    ) -> Result<Check, StoreError>;
    /// One check by uuid.
    async fn check_by_uuid(&self, uuid: Uuid) -> Result<Check, StoreError>;
    /// Every check, oldest first.
    async fn list_checks(&self) -> Result<Vec<Check>, StoreError>;
    /// The routing entry of a check by uuid, if it exists.
    async fn check_ref_by_uuid(&self, uuid: Uuid) -> Result<Option<CheckRef>, StoreError>;
    /// The routing entry of a check by slug, if it exists.
    async fn check_ref_by_slug(&self, slug: &str) -> Result<Option<CheckRef>, StoreError>;
    /// Every routing entry, to warm the ping path's cache at start-up.
    async fn all_check_refs(&self) -> Result<Vec<CheckRef>, StoreError>;
    /// Appends a batch of pings in one statement: committed together or not
    /// at all. The ping path's only write. PostgreSQL appends to the inbox;
    /// SQLite folds the batch in memory and appends it to the ping log.
    async fn append_pings(&self, pings: &[Ping]) -> Result<(), StoreError>;
    /// [`Store::append_pings`] for a batch the caller gives up (the ping
    /// path's), which a store may keep instead of copying.
    async fn append_owned(&self, pings: Vec<Ping>) -> Result<(), StoreError> {
        self.append_pings(&pings).await
    }
    /// Folds up to `limit` inbox rows, oldest first, into the ping log, the
    /// summaries and the runs, in one transaction. On PostgreSQL only one
    /// replica folds at a time; the others get an empty result. On SQLite
    /// appends fold at once: this reports what they touched and writes a
    /// chunk of the current round.
    async fn fold(&self, limit: usize) -> Result<Folded, StoreError>;
    /// Writes whatever a fold keeps in memory (on shutdown). The inbox is
    /// durable, so skipping this loses nothing; it only saves work at the
    /// next start.
    async fn flush_folds(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Closes a run that exceeded max_runtime as failed; returns the check's
    /// new summary, or `None` if the run was no longer open.
    async fn time_out_run(
        &self,
        check_id: i64,
        run_id: i64,
        at: UnixMs,
    ) -> Result<Option<Touched>, StoreError>;
    /// How many checks exist.
    async fn check_count(&self) -> Result<usize, StoreError>;
    /// Checks with `id > after`, in id order, for the evaluator.
    async fn eval_checks(&self, after: i64, limit: u32) -> Result<Vec<EvalCheck>, StoreError>;
    /// One check for the evaluator; `None` if it no longer exists.
    async fn eval_check(&self, id: i64) -> Result<Option<EvalCheck>, StoreError>;
    /// Records a batch of status changes (status, flips, incidents, events)
    /// in one transaction. Changes of a check deleted since it was evaluated
    /// are dropped: a deleted check has no status to record.
    async fn record_transitions(&self, batch: &[Transition]) -> Result<(), StoreError>;
    /// Records that `replica` accepts pings at `now`; if no replica did for
    /// longer than `gap`, records and returns that span as unobserved.
    async fn heartbeat(
        &self,
        replica: &str,
        started_at: UnixMs,
        now: UnixMs,
        gap: i64,
    ) -> Result<Option<(UnixMs, UnixMs)>, StoreError>;
    /// Every unobserved span ending after `since`, in order.
    async fn unobserved_spans(&self, since: UnixMs) -> Result<Vec<(UnixMs, UnixMs)>, StoreError>;
    /// The newest flips of a check, newest first.
    async fn list_flips(&self, check_id: i64, limit: u32) -> Result<Vec<FlipRecord>, StoreError>;
    /// The newest incidents of a check, newest first.
    async fn list_incidents(
        &self,
        check_id: i64,
        limit: u32,
    ) -> Result<Vec<IncidentRecord>, StoreError>;
    /// The newest events of a check, newest first.
    async fn list_events(&self, check_id: i64, limit: u32) -> Result<Vec<EventRecord>, StoreError>;
    /// Pauses or resumes a check and returns it as it was right after
    /// (read-your-writes: pings stored later are not in it); `NotFound` if
    /// it does not exist. The pings stored before it keep what they did (a
    /// ping stored before a pause never resumes the check); the ones stored
    /// after it see the new flag.
    async fn set_paused(
        &self,
        check_id: i64,
        paused: bool,
        now: UnixMs,
    ) -> Result<Check, StoreError>;
    /// The newest `limit` pings of a check, newest first.
    async fn list_pings(&self, check_id: i64, limit: u32) -> Result<Vec<PingRecord>, StoreError> {
        self.list_pings_before(check_id, None, limit).await
    }
    /// A page of a check's pings, newest first: those numbered below
    /// `before` (all when `None`), at most `limit`.
    async fn list_pings_before(
        &self,
        check_id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<PingRecord>, StoreError>;
    /// Replaces a check's definition (not its uuid, source or state) and
    /// returns the check as it was right after; `NotFound` if it does not
    /// exist, `Conflict` when its new slug is taken. As with
    /// [`Store::set_paused`], the pings stored before it keep what they did.
    async fn update_check(
        &self,
        check_id: i64,
        spec: &CheckSpec,
        now: UnixMs,
    ) -> Result<Check, StoreError>;
    /// Deletes a check with its pings, runs, flips and incidents; `NotFound`
    /// if it does not exist.
    async fn delete_check(&self, check_id: i64) -> Result<(), StoreError>;
    /// The newest `limit` runs of a check, newest first.
    async fn list_runs(&self, check_id: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError>;
}

/// Opens the store the config names and applies pending migrations.
pub async fn open(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let url = config.database_url.expose();
    if config.is_postgres() {
        Ok(Arc::new(
            postgres::PgStore::connect_with_lease(url, config.lease_ttl).await?,
        ))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(
            sqlite::SqliteStore::connect(url, config.sqlite_synchronous).await?,
        ))
    } else {
        anyhow::bail!("database_url: unsupported scheme (use sqlite:// or postgres://)")
    }
}

/// Applies migrations only (`overdue migrate`).
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    open(config).await.map(|_| ())
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
    failure_threshold: i64,
    recovery_threshold: i64,
    max_runtime_ms: Option<i64>,
    alert_on_overlap: bool,
    manual_resume: bool,
    methods: String,
    paused: bool,
    source: String,
    created_at: i64,
    #[sqlx(flatten)]
    state: SummaryRow,
}

/// The columns of `check_state`.
#[derive(sqlx::FromRow, Default)]
pub(crate) struct SummaryRow {
    n_pings: i64,
    last_ping_at: Option<i64>,
    last_ping_kind: Option<String>,
    last_success_at: Option<i64>,
    last_start_at: Option<i64>,
    last_failure_at: Option<i64>,
    last_items: Option<i64>,
    last_items_at: Option<i64>,
    zero_streak_since: Option<i64>,
    zero_streak_runs: i64,
    consecutive_failures: i64,
    consecutive_successes: i64,
    last_duration_ms: Option<i64>,
    open_runs: String,
    overlap_count: i64,
    failed_since: Option<i64>,
    timed_out_at: Option<i64>,
}

pub(crate) const CHECK_COLUMNS: &str = "c.id, c.uuid, c.slug, c.name, c.description, c.labels, \
    c.interval_ms, c.cron, c.tz, c.grace_ms, c.active_hours, c.zero_items_after_ms, \
    c.zero_items_runs, c.failure_threshold, c.recovery_threshold, c.max_runtime_ms, \
    c.alert_on_overlap, c.manual_resume, c.methods, c.paused, c.source, c.created_at, \
    s.n_pings, s.last_ping_at, s.last_ping_kind, s.last_success_at, s.last_start_at, \
    s.last_failure_at, s.last_items, s.last_items_at, s.zero_streak_since, s.zero_streak_runs, \
    s.consecutive_failures, s.consecutive_successes, s.last_duration_ms, s.open_runs, s.overlap_count, \
    s.failed_since, s.timed_out_at";

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn duration(ms: Option<i64>) -> Option<Duration> {
    ms.map(|m| Duration::from_millis(m.max(0) as u64))
}

impl SummaryRow {
    pub(crate) fn into_summary(self) -> anyhow::Result<Summary> {
        let open_runs: Vec<OpenRun> = serde_json::from_str(&self.open_runs)
            .map_err(|e| anyhow::anyhow!("check_state.open_runs is not valid JSON: {e}"))?;
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
                failure_threshold: count(self.failure_threshold),
                recovery_threshold: count(self.recovery_threshold),
                max_runtime: duration(self.max_runtime_ms),
                alert_on_overlap: self.alert_on_overlap,
                manual_resume: self.manual_resume,
                methods: if self.methods == "POST" {
                    Methods::Post
                } else {
                    Methods::Any
                },
            },
            paused: self.paused,
            source: self.source,
            created_at: self.created_at,
            summary: self.state.into_summary()?,
        })
    }
}

/// The columns the ping writer needs per check (flags, thresholds, summary).
pub(crate) const WRITER_COLUMNS: &str = "c.id, c.paused, c.manual_resume, c.methods, \
    c.failure_threshold, c.recovery_threshold, s.n_pings, s.last_ping_at, s.last_ping_kind, \
    s.last_success_at, s.last_start_at, s.last_failure_at, s.last_items, s.last_items_at, \
    s.zero_streak_since, s.zero_streak_runs, s.consecutive_failures, s.consecutive_successes, \
    s.last_duration_ms, s.open_runs, s.overlap_count, s.failed_since, s.timed_out_at, \
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
                    },
                },
                folded_through: self.folded_through,
            },
        ))
    }
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
    /// The check's id.
    pub(crate) fn id(&self) -> i64 {
        self.check.id
    }

    pub(crate) fn into_eval(self) -> anyhow::Result<EvalCheck> {
        self.into_eval_with(&[])
    }

    /// The check with its pings still in the inbox applied (read-your-writes).
    pub(crate) fn into_eval_with(self, pending: &[StoredPing]) -> anyhow::Result<EvalCheck> {
        let stored = match (
            self.stored_status.as_deref().and_then(Status::parse),
            self.stored_since,
        ) {
            (Some(status), Some(since)) => Some(StoredStatus {
                status,
                reason: self.stored_reason.as_deref().and_then(Reason::parse),
                since,
                quiet: self.stored_quiet.unwrap_or(false),
            }),
            _ => None,
        };
        let mut check = self.check.into_check()?;
        apply_pending(&mut check, pending);
        Ok(EvalCheck {
            id: check.id,
            spec: check.spec,
            paused: check.paused,
            summary: check.summary,
            stored,
        })
    }
}

/// The values of a new `checks` row, in one place for both backends.
pub(crate) struct CheckValues {
    pub uuid: String,
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
    pub failure_threshold: i64,
    pub recovery_threshold: i64,
    pub max_runtime_ms: Option<i64>,
    pub alert_on_overlap: bool,
    pub manual_resume: bool,
    pub methods: &'static str,
    pub source: &'static str,
}

impl CheckValues {
    pub(crate) fn new(spec: &CheckSpec, source: CheckSource) -> anyhow::Result<CheckValues> {
        Ok(CheckValues {
            uuid: spec.uuid.unwrap_or_else(Uuid::new_v4).to_string(),
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
            failure_threshold: i64::from(spec.failure_threshold),
            recovery_threshold: i64::from(spec.recovery_threshold),
            max_runtime_ms: spec.max_runtime.map(ms),
            alert_on_overlap: spec.alert_on_overlap,
            manual_resume: spec.manual_resume,
            methods: spec.methods.as_str(),
            source: source.as_str(),
        })
    }
}

/// The SQL that inserts a check, identical for both backends but for placeholders.
pub(crate) fn insert_check_sql(placeholder: fn(usize) -> String) -> String {
    let cols = [
        "uuid",
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
        "failure_threshold",
        "recovery_threshold",
        "max_runtime_ms",
        "alert_on_overlap",
        "manual_resume",
        "methods",
        "source",
        "created_at",
        "updated_at",
    ];
    let params: Vec<String> = (1..=cols.len()).map(placeholder).collect();
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
    "failure_threshold",
    "recovery_threshold",
    "max_runtime_ms",
    "alert_on_overlap",
    "manual_resume",
    "methods",
    "updated_at",
];

/// The SQL that rewrites a check's definition, for both backends.
pub(crate) fn update_check_sql(placeholder: fn(usize) -> String) -> String {
    let sets: Vec<String> = UPDATE_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = {}", placeholder(i + 1)))
        .collect();
    format!(
        "UPDATE checks SET {} WHERE id = {}",
        sets.join(", "),
        placeholder(UPDATE_COLUMNS.len() + 1)
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
            .bind($v.failure_threshold)
            .bind($v.recovery_threshold)
            .bind($v.max_runtime_ms)
            .bind($v.alert_on_overlap)
            .bind($v.manual_resume)
            .bind($v.methods)
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
            .bind($v.failure_threshold)
            .bind($v.recovery_threshold)
            .bind($v.max_runtime_ms)
            .bind($v.alert_on_overlap)
            .bind($v.manual_resume)
            .bind($v.methods)
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

#[cfg(test)]
mod tests {

    #[test]
    fn migration_folders_list_the_same_versions() {
        let versions = |dir: &str| {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter_map(|n| n.split('_').next().map(str::to_string))
                .collect();
            v.sort();
            v
        };
        let root = env!("CARGO_MANIFEST_DIR");
        let sqlite = versions(&format!("{root}/migrations/sqlite"));
        let postgres = versions(&format!("{root}/migrations/postgres"));
        assert!(!sqlite.is_empty());
        assert_eq!(sqlite, postgres);
    }
}
