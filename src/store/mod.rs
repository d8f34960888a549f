//! Storage: one [`Store`] trait, a SQLite and a PostgreSQL implementation.
//! Rows are turned into domain types here; nothing outside this folder writes SQL.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::check::CheckSpec;
use crate::domain::fold::Ping;
use crate::domain::ping::{Summary, UnixMs};
use crate::domain::status::{Reason, Status};
use crate::settings::{is_postgres_url, DatabaseSettings};

pub mod checks; // checks and their history: the SQL both backends share, written once
mod dialect; // what each backend does its own way, for the code both share
pub(crate) mod eval_rows; // the evaluator's start-up read: a page of checks as one JSON value
mod full; // a full disk told apart from other failures, by the database's error code
mod history; // the item history's buckets: read before a fold, written with its pings
pub mod keys; // API keys (their hashes)
pub mod lease; // the leader lease and the fencing of leader-only writes
pub mod ledger; // the slot ledger: marks and exception rows
pub mod locks; // the job guard's lock seats and fencing tokens
pub mod metrics; // what a metrics scrape reads
pub mod notify; // the notification outbox, delivery attempts, silences
pub mod oncall; // acknowledgements, holding, shared secrets
pub mod postgres; // the PostgreSQL backend: its dialect work, one concern a file
pub mod replicas; // health, heartbeats and unobserved spans: SQL both backends share
pub mod retention; // what retention deletes
mod rows; // rows as both backends read them, and their conversion to domain types
pub mod sqlite; // the SQLite backend: its dialect work, one concern a file

pub(crate) use rows::{
    bind_check_values, bind_update_values, check_ref, eval_check, insert_check_sql,
    update_check_sql, CheckRow, CheckValues, EvalRow, InboxRow, PingRow, RunRow, WriterCheck,
    WriterRow, CHECK_COLUMNS, EVAL_COLUMNS, INBOX_COLUMNS, WRITER_COLUMNS,
};

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
    pub(crate) fn as_str(self) -> &'static str {
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
    /// Who acknowledged it, when, and why (SPEC §6.2).
    pub acked_at: Option<UnixMs>,
    pub acked_by: Option<String>,
    pub ack_comment: Option<String>,
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

/// The storage operations the server needs.
#[async_trait]
pub trait Store:
    checks::CheckStore
    + replicas::ReplicaStore
    + notify::NotifyStore
    + oncall::OnCallStore
    + lease::LeaseStore
    + locks::LockStore
    + metrics::MetricsStore
    + keys::KeyStore
    + ledger::LedgerStore
    + retention::RetentionStore
    + Send
    + Sync
    + 'static
{
    /// True when other processes may write to the same database (PostgreSQL).
    fn shared(&self) -> bool {
        !self.single_process()
    }
    /// How many ping batches may be appended at once. One on both backends:
    /// SQLite has one writer connection, so batches queue behind each other
    /// anyway; on PostgreSQL one batch at a time, the next gathering while it
    /// commits: on the 2-core benchmark machine, 2 or 4 batches in flight
    /// split the waiting pings into smaller batches, each with its own WAL
    /// flush, and were 10-25% slower (BENCHMARKS.md).
    fn append_concurrency(&self) -> usize {
        1
    }
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
    /// Checks with `id > after`, in id order, for the evaluator.
    async fn eval_checks(&self, after: i64, limit: u32) -> Result<Vec<EvalCheck>, StoreError>;
    /// One check for the evaluator; `None` if it no longer exists.
    async fn eval_check(&self, id: i64) -> Result<Option<EvalCheck>, StoreError>;
    /// The checks with pings stored but not folded into their summaries
    /// yet (PostgreSQL: the inbox), for a warm follower's term to read
    /// again. SQLite has no followers: none.
    async fn inbox_checks(&self) -> Result<Vec<i64>, StoreError> {
        Ok(Vec::new())
    }
    /// These checks for the evaluator, in id order, read in one snapshot
    /// (those that no longer exist are left out): what a warm follower reads
    /// again when another replica changed them. PostgreSQL reads them in one
    /// query; the default reads them one by one.
    async fn eval_checks_in(&self, ids: &[i64]) -> Result<Vec<EvalCheck>, StoreError> {
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut out = Vec::with_capacity(sorted.len());
        for id in sorted {
            out.extend(self.eval_check(id).await?);
        }
        Ok(out)
    }
    /// Records a batch of status changes (status, flips, incidents, events)
    /// in one transaction. Changes of a check deleted since it was evaluated
    /// are dropped: a deleted check has no status to record.
    async fn record_transitions(&self, batch: &[Transition]) -> Result<(), StoreError>;
    /// Deletes a check with its pings, runs, flips and incidents; `NotFound`
    /// if it does not exist.
    async fn delete_check(&self, check_id: i64) -> Result<(), StoreError>;
}

/// Opens the store the config names and applies pending migrations.
pub async fn open(db: DatabaseSettings<'_>) -> anyhow::Result<Arc<dyn Store>> {
    let url = db.url.expose();
    if is_postgres_url(url) {
        Ok(Arc::new(
            postgres::PgStore::connect_with_lease(url, db.lease_ttl).await?,
        ))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(
            sqlite::SqliteStore::connect(url, db.sqlite_synchronous).await?,
        ))
    } else {
        anyhow::bail!("database_url: unsupported scheme (use sqlite:// or postgres://)")
    }
}

/// Opens a backend's pool and brings its schema up to date: what both
/// backends' `connect` share. `what` names the database in errors.
async fn open_pool<DB>(
    pool: sqlx::pool::PoolOptions<DB>,
    options: <DB::Connection as sqlx::Connection>::Options,
    migrator: &sqlx::migrate::Migrator,
    what: &str,
) -> anyhow::Result<sqlx::Pool<DB>>
where
    DB: sqlx::Database,
    DB::Connection: sqlx::migrate::Migrate,
{
    use anyhow::Context as _;
    let pool = pool
        .connect_with(options)
        .await
        .with_context(|| format!("cannot open the {what} database"))?;
    migrator
        .run(&pool)
        .await
        .with_context(|| format!("cannot apply {what} migrations"))?;
    Ok(pool)
}

/// Applies migrations only (`overdue migrate`).
pub async fn migrate(db: DatabaseSettings<'_>) -> anyhow::Result<()> {
    open(db).await.map(|_| ())
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
