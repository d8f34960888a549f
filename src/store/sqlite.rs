//! The embedded SQLite store (WAL).
//!
//! Only one process uses a database file, so the ping writer keeps every
//! touched check's summary in memory, numbers and folds each batch of pings
//! there, and appends the batch to the ping log (`pings`, insertion-ordered,
//! no index by check) in ONE INSERT: sqlx's SQLite driver costs ~60–100 µs per
//! call, far more than SQLite itself, and every page a ping dirties counts
//! (see PERF-NOTES.md). Once a second a round writes the summaries, the runs
//! and the per-check ping index, sorted by check; readers apply the log's
//! tail past the last round, and a restart folds it again.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqlitePool};
use tokio::sync::Mutex;
use uuid::Uuid;

use super::{
    bind_check_values, check_ref, insert_check_sql, CheckRef, CheckRow, CheckSource, CheckValues,
    EvalCheck, EvalRow, EventRecord, FlipRecord, Folded, InboxRow, IncidentRecord, RunRow, Store,
    StoreError, Touched, Transition, TransitionRows, WriterCheck, WriterRow, CHECK_COLUMNS,
    EVAL_COLUMNS, INBOX_COLUMNS, QUIET_EVENT, WRITER_COLUMNS,
};
use crate::config;
use crate::domain::check::Check;
use crate::domain::check::CheckSpec;
use crate::domain::fold::{
    apply_pending, apply_pending_runs, merge_runs, plan_fold, FoldPlan, Ping, PingRecord,
    RunRecord, StoredPing, OVERLAP_EVENT,
};
use crate::domain::ping::{clamp_items, PingKind, RunChange, UnixMs};

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    pool: SqlitePool,
    writer: std::sync::Arc<Mutex<Writer>>,
    /// Wakes the checkpointer after the ping writer committed.
    wrote: std::sync::Arc<tokio::sync::Notify>,
    /// Ends the checkpointer when the store is dropped.
    _checkpointer: tokio_util::sync::DropGuard,
}

/// How far the WAL may grow before a connection that commits checkpoints it
/// itself (SQLite's `wal_autocheckpoint`, in pages; its default is 1,000),
/// on every connection. Below this the checkpointer does it on its own
/// connection: a checkpoint ends with fsyncs, 5–30 ms on the benchmark
/// machine, and a commit that checkpoints holds every ping behind it (the
/// ping writer's own, and the other writes that take the writer's lock).
/// It is a backstop: under a sustained load the checkpointer starts the WAL
/// over long before (see [`RESTART_WAL_PAGES`]).
const AUTOCHECKPOINT_PAGES: u32 = 16_384;
/// Once the WAL holds this many pages, the checkpointer finishes its
/// checkpoint holding the writer, so that the writer's next transaction
/// starts the WAL over. Its own PASSIVE checkpoints never see the WAL
/// complete while pings keep coming, and the WAL could only start over when
/// a commit checkpointed it at [`AUTOCHECKPOINT_PAGES`], which held every
/// ping for 31–43 ms (BENCHMARKS.md). Held by the checkpointer, the writer
/// waits only for what was written since its last checkpoint.
const RESTART_WAL_PAGES: i64 = 4_096;
/// How long the checkpointer waits after a ping write before it
/// checkpoints, so that one checkpoint covers many batches.
const CHECKPOINT_AFTER: Duration = Duration::from_millis(200);
/// How often the checkpointer looks anyway, for the writes that do not
/// wake it (the API, the evaluator, heartbeats); a checkpoint with nothing
/// to copy only reads the WAL's header.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// What the single ping writer owns: its connection and the summaries it keeps.
struct Writer {
    conn: SqliteConnection,
    checks: HashMap<i64, Cached>,
    next_run_id: Option<i64>,
    /// The id the next appended ping gets (one writer: ids are assigned here,
    /// so a batch's pings are folded before their INSERT is sent).
    next_ping_id: i64,
    /// The last ping id appended (or replayed at start-up).
    appended_through: i64,
    /// `ping_rounds.through`: every ping up to here is in the ping index and
    /// in its check's written summary.
    written_through: i64,
    /// Checks whose summary changed since the last fold call, for the
    /// evaluator, and how many pings were appended meanwhile.
    touched: BTreeSet<i64>,
    appended: usize,
    /// Folded since the last round, by check: sorted, so a round writes
    /// the pages of the ping index and of the summaries in order.
    dirty: BTreeMap<i64, Dirty>,
    dirty_pings: usize,
    /// The round being written, one chunk per fold call.
    round: VecDeque<Chunk>,
    round_started: Instant,
    /// The ping log's INSERT for each batch size used so far (see
    /// [`insert_rows`]).
    insert_sql: HashMap<usize, String>,
    /// The chunk statement for each shape used so far.
    chunk_sql: HashMap<ChunkShape, String>,
}

type Cached = WriterCheck;

impl SqliteStore {
    /// Opens (creating if missing) the database and applies migrations.
    pub async fn connect(url: &str, sync: config::SqliteSynchronous) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .with_context(|| "database_url is not a valid sqlite:// URL")?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match sync {
                config::SqliteSynchronous::Normal => SqliteSynchronous::Normal,
                config::SqliteSynchronous::Full => SqliteSynchronous::Full,
            })
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true)
            .pragma("wal_autocheckpoint", AUTOCHECKPOINT_PAGES.to_string());
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .context("cannot open the SQLite database")?;
        sqlx::migrate!("migrations/sqlite")
            .run(&pool)
            .await
            .context("cannot apply SQLite migrations")?;
        // Room for every shape of ping INSERT and of round chunk it prepares.
        let writer_options = options.clone().statement_cache_capacity(WRITER_STATEMENTS);
        let conn = SqliteConnection::connect_with(&writer_options)
            .await
            .context("cannot open the SQLite writer connection")?;
        let checkpoints = SqliteConnection::connect_with(&options)
            .await
            .context("cannot open the SQLite checkpoint connection")?;
        let mut writer = Writer {
            conn,
            checks: HashMap::new(),
            next_run_id: None,
            next_ping_id: 1,
            appended_through: 0,
            written_through: 0,
            touched: BTreeSet::new(),
            appended: 0,
            dirty: BTreeMap::new(),
            dirty_pings: 0,
            round: VecDeque::new(),
            round_started: Instant::now(),
            insert_sql: HashMap::new(),
            chunk_sql: HashMap::new(),
        };
        writer
            .catch_up()
            .await
            .context("cannot bring the ping summaries up to date")?;
        let writer = std::sync::Arc::new(Mutex::new(writer));
        let wrote = std::sync::Arc::new(tokio::sync::Notify::new());
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(checkpointer(
            checkpoints,
            writer.clone(),
            wrote.clone(),
            stop.clone(),
        ));
        Ok(SqliteStore {
            pool,
            writer,
            wrote,
            _checkpointer: stop.drop_guard(),
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn shared(&self) -> bool {
        false
    }

    fn append_concurrency(&self) -> usize {
        // One writer connection: batches queue behind each other anyway.
        1
    }

    async fn health(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_check(
        &self,
        spec: &CheckSpec,
        source: CheckSource,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let v = CheckValues::new(spec, source)?;
        let mut tx = self.pool.begin().await?;
        let sql = insert_check_sql(|_| "?".to_string());
        let (id,): (i64,) = bind_check_values!(sqlx::query_as(&sql), v, now)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO check_state (check_id) VALUES (?)")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.check_by_id(id).await
    }

    async fn check_by_uuid(&self, uuid: Uuid) -> Result<Check, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.uuid = ?"
        );
        // One snapshot for the summary and the log's tail, so a round committing
        // in between can neither hide nor double-count a ping.
        let mut tx = self.read_snapshot().await?;
        let row: CheckRow = sqlx::query_as(&sql)
            .bind(uuid.to_string())
            .fetch_one(&mut *tx)
            .await?;
        let mut check = row.into_check()?;
        let pending = pending_on(&mut tx, Some(check.id)).await?;
        tx.commit().await?;
        apply_pending(&mut check, &pending);
        Ok(check)
    }

    async fn list_checks(&self) -> Result<Vec<Check>, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             ORDER BY c.id"
        );
        let mut tx = self.read_snapshot().await?;
        let rows: Vec<CheckRow> = sqlx::query_as(&sql).fetch_all(&mut *tx).await?;
        let mut pending = by_check(pending_on(&mut tx, None).await?);
        tx.commit().await?;
        rows.into_iter()
            .map(|r| {
                let mut check = r.into_check()?;
                let mine = pending.remove(&check.id).unwrap_or_default();
                apply_pending(&mut check, &mine);
                Ok(check)
            })
            .collect()
    }

    async fn check_ref_by_uuid(&self, uuid: Uuid) -> Result<Option<CheckRef>, StoreError> {
        let row: Option<(i64, String, Option<String>)> =
            sqlx::query_as("SELECT id, uuid, slug FROM checks WHERE uuid = ?")
                .bind(uuid.to_string())
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(check_ref))
    }

    async fn check_ref_by_slug(&self, slug: &str) -> Result<Option<CheckRef>, StoreError> {
        let row: Option<(i64, String, Option<String>)> =
            sqlx::query_as("SELECT id, uuid, slug FROM checks WHERE slug = ?")
                .bind(slug)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(check_ref))
    }

    async fn all_check_refs(&self) -> Result<Vec<CheckRef>, StoreError> {
        let rows: Vec<(i64, String, Option<String>)> =
            sqlx::query_as("SELECT id, uuid, slug FROM checks")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().filter_map(check_ref).collect())
    }

    async fn append_pings(&self, pings: &[Ping]) -> Result<(), StoreError> {
        self.append_owned(pings.to_vec()).await
    }

    async fn append_owned(&self, pings: Vec<Ping>) -> Result<(), StoreError> {
        if pings.is_empty() {
            return Ok(());
        }
        let mut w = self.writer.lock().await;
        let first = w.next_ping_id;
        let batch: Vec<StoredPing> = pings
            .into_iter()
            .enumerate()
            .map(|(i, ping)| StoredPing {
                id: first + i as i64,
                ping,
            })
            .collect();
        let appended = w.append(&batch, false).await;
        drop(w);
        self.wrote.notify_one();
        appended
    }

    async fn fold(&self, _limit: usize) -> Result<Folded, StoreError> {
        // Pings are folded as they are appended; this hands their changes to
        // the evaluator and writes the next chunk of a round.
        let folded = self.writer.lock().await.fold().await;
        if folded.as_ref().is_ok_and(|f| f.writing) {
            self.wrote.notify_one();
        }
        folded
    }

    async fn flush_folds(&self) -> Result<(), StoreError> {
        self.writer.lock().await.flush().await
    }

    async fn time_out_run(
        &self,
        check_id: i64,
        run_id: i64,
        at: UnixMs,
    ) -> Result<Option<Touched>, StoreError> {
        let mut w = self.writer.lock().await;
        w.load_missing(&[check_id]).await?;
        let Some(entry) = w.checks.get_mut(&check_id) else {
            return Ok(None);
        };
        let Some(change) = entry.summary.time_out_run(run_id, at) else {
            return Ok(None);
        };
        let touched = Touched {
            check_id,
            summary: entry.summary.clone(),
            paused: entry.paused,
        };
        // Written with the next round, like a ping's changes: the summary in
        // memory may already hold folded pings a round has yet to write. If
        // the process dies first, the evaluator times the run out again.
        w.dirty.entry(check_id).or_default().runs.push(change);
        Ok(Some(touched))
    }

    async fn check_count(&self) -> Result<usize, StoreError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM checks")
            .fetch_one(&self.pool)
            .await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn eval_checks(&self, after: i64, limit: u32) -> Result<Vec<EvalCheck>, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS}, {EVAL_COLUMNS} FROM checks c \
             JOIN check_state s ON s.check_id = c.id \
             LEFT JOIN check_status st ON st.check_id = c.id \
             WHERE c.id > ? ORDER BY c.id LIMIT ?"
        );
        // With the pings that folds have not written yet, in one snapshot:
        // the evaluator must start from every acknowledged ping (a status
        // recorded before a restart already counts them).
        let mut tx = self.read_snapshot().await?;
        let rows: Vec<EvalRow> = sqlx::query_as(&sql)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        let through = rows.last().map_or(after, |r| r.id());
        let mut pending = by_check(pending_between(&mut tx, after, through).await?);
        tx.commit().await?;
        rows.into_iter()
            .map(|r| {
                let mine = pending.remove(&r.id()).unwrap_or_default();
                r.into_eval_with(&mine).map_err(StoreError::Other)
            })
            .collect()
    }

    async fn eval_check(&self, id: i64) -> Result<Option<EvalCheck>, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS}, {EVAL_COLUMNS} FROM checks c \
             JOIN check_state s ON s.check_id = c.id \
             LEFT JOIN check_status st ON st.check_id = c.id WHERE c.id = ?"
        );
        // With the check's pings that folds have not written yet: the
        // evaluator reloads a check when it changes, and must not lose them.
        let mut tx = self.read_snapshot().await?;
        let row: Option<EvalRow> = sqlx::query_as(&sql)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        let pending = pending_on(&mut tx, Some(id)).await?;
        tx.commit().await?;
        Ok(row.map(|r| r.into_eval_with(&pending)).transpose()?)
    }

    async fn record_transitions(&self, batch: &[Transition]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        // One statement string per batch (see the module comment on sqlx's
        // per-call cost), built before any lock is taken; inside a sqlx
        // transaction so a failure rolls back.
        let all: HashSet<i64> = batch.iter().map(|t| t.check_id).collect();
        let sql = transitions_sql(&TransitionRows::new(batch, &all));
        // Under the writer's lock: a check is deleted only under it, so none
        // can go between the read below and the writes; and the ping writer,
        // kept out meanwhile, waits on the lock rather than sleeping in
        // SQLite's busy handler.
        let _w = self.writer.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        // Changes of checks already gone are dropped (they would fail the
        // whole batch on the foreign keys).
        let ids: Vec<String> = all.iter().map(i64::to_string).collect();
        let live: HashSet<i64> = sqlx::query_scalar(&format!(
            "SELECT id FROM checks WHERE id IN ({})",
            ids.join(",")
        ))
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let sql = if live.len() == all.len() {
            sql
        } else {
            let rows = TransitionRows::new(batch, &live);
            if rows.status.is_empty() {
                return Ok(());
            }
            transitions_sql(&rows)
        };
        sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(&sql)).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn heartbeat(
        &self,
        replica: &str,
        started_at: UnixMs,
        now: UnixMs,
        gap: i64,
    ) -> Result<Option<(UnixMs, UnixMs)>, StoreError> {
        // IMMEDIATE: this transaction reads, then writes. A deferred one would
        // fail at once with "database is locked" when upgrading while another
        // connection writes, instead of waiting for the busy timeout.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let (last,): (Option<i64>,) = sqlx::query_as("SELECT MAX(last_beat_at) FROM replicas")
            .fetch_one(&mut *tx)
            .await?;
        let span = last.filter(|l| now - l > gap).map(|l| (l, now));
        if let Some((start, end)) = span {
            sqlx::query(
                "INSERT INTO unobserved (start_at, end_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(start)
            .bind(end)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO replicas (id, started_at, last_beat_at) VALUES (?, ?, ?) \
             ON CONFLICT (id) DO UPDATE SET last_beat_at = excluded.last_beat_at",
        )
        .bind(replica)
        .bind(started_at)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(span)
    }

    async fn unobserved_spans(&self, since: UnixMs) -> Result<Vec<(UnixMs, UnixMs)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT start_at, end_at FROM unobserved WHERE end_at > ? ORDER BY start_at",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_flips(&self, check_id: i64, limit: u32) -> Result<Vec<FlipRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT at, old_status, new_status, reason FROM flips WHERE check_id = ? \
             ORDER BY id DESC LIMIT ?",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_incidents(
        &self,
        check_id: i64,
        limit: u32,
    ) -> Result<Vec<IncidentRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, opened_at, status, reason, resolved_at FROM incidents \
             WHERE check_id = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_events(&self, check_id: i64, limit: u32) -> Result<Vec<EventRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT at, kind, detail FROM check_events WHERE check_id = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn set_paused(
        &self,
        check_id: i64,
        paused: bool,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        // Under the writer's lock, so the summary cache and the table agree;
        // the pings stored before it are written first (see `Writer::settle`).
        let mut w = self.writer.lock().await;
        w.settle(check_id).await?;
        let done = sqlx::query("UPDATE checks SET paused = ?, updated_at = ? WHERE id = ?")
            .bind(paused)
            .bind(now)
            .bind(check_id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        if let Some(c) = w.checks.get_mut(&check_id) {
            c.paused = paused;
        }
        // Still holding the writer: no ping is stored in between.
        self.check_by_id(check_id).await
    }

    async fn list_pings_before(
        &self,
        check_id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<PingRecord>, StoreError> {
        // Pings the summary does not hold yet first (newest), then the
        // ones the ping index leads to.
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, check_id).await?;
        let pending = pending_on(&mut tx, Some(check_id)).await?;
        let mut out = apply_pending(&mut check, &pending);
        out.reverse();
        let before = before.unwrap_or(i64::MAX);
        out.retain(|p| p.n < before);
        out.truncate(limit as usize);
        let rows: Vec<super::PingRow> = sqlx::query_as(
            "SELECT p.id, p.n, p.at, p.kind, p.exit_status, p.items, p.rid, p.method, \
             p.remote_addr, p.user_agent, p.scheme, p.body, p.duration_ms \
             FROM ping_index i JOIN pings p ON p.id = i.id WHERE i.check_id = ?1 AND p.n < ?2 \
             AND i.id <= (SELECT folded_through FROM check_state WHERE check_id = ?1) \
             ORDER BY i.id DESC LIMIT ?3",
        )
        .bind(check_id)
        .bind(before)
        .bind(i64::from(limit) - out.len() as i64)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        out.extend(rows.into_iter().map(super::PingRow::into_record));
        Ok(out)
    }

    async fn update_check(
        &self,
        check_id: i64,
        spec: &CheckSpec,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let v = CheckValues::new(spec, CheckSource::Api)?;
        // Under the writer's lock: the writer caches flags and thresholds.
        // The pings stored before it keep what they were recorded as.
        let mut w = self.writer.lock().await;
        w.settle(check_id).await?;
        let sql = super::update_check_sql(|_| "?".to_string());
        let done = super::bind_update_values!(sqlx::query(&sql), v, now, check_id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        // The cached summary may be ahead of the table (folded, not yet
        // written): keep it, and take the new flags and thresholds.
        w.refresh_flags(check_id).await?;
        // Still holding the writer: no ping is stored in between.
        self.check_by_id(check_id).await
    }
    async fn delete_check(&self, check_id: i64) -> Result<(), StoreError> {
        let mut w = self.writer.lock().await;
        // The log has no foreign key (a cascade would scan it): its rows
        // go first, found through the index and in the tail.
        let mut tx = self.pool.begin().await?;
        for sql in [
            "DELETE FROM pings WHERE id IN (SELECT id FROM ping_index WHERE check_id = ?)",
            "DELETE FROM pings WHERE id > (SELECT through FROM ping_rounds) AND check_id = ?",
        ] {
            sqlx::query(sql).bind(check_id).execute(&mut *tx).await?;
        }
        let done = sqlx::query("DELETE FROM checks WHERE id = ?")
            .bind(check_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        w.forget(check_id);
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
    async fn list_runs(&self, check_id: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, check_id).await?;
        let pending = pending_on(&mut tx, Some(check_id)).await?;
        let runs: Vec<RunRow> = sqlx::query_as(
            "SELECT id, rid, started_at, ended_at, outcome, reason, duration_ms, overlapped \
             FROM runs WHERE check_id = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let (_, changes) = apply_pending_runs(&mut check, &pending);
        let runs = runs.into_iter().map(RunRow::into_record).collect();
        Ok(merge_runs(runs, changes, limit))
    }
}

impl SqliteStore {
    /// `PRAGMA synchronous` as each connection that commits sees it: a
    /// connection of the pool (the API's writes) and the ping writer's
    /// (1 is NORMAL, 2 is FULL), so that `sqlite_synchronous` can be seen to
    /// be in force.
    pub async fn synchronous(&self) -> Result<Vec<i64>, StoreError> {
        let pool: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&self.pool)
            .await?;
        let mut w = self.writer.lock().await;
        let writer: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut w.conn)
            .await?;
        Ok(vec![pool, writer])
    }

    async fn check_by_id(&self, id: i64) -> Result<Check, StoreError> {
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, id).await?;
        let pending = pending_on(&mut tx, Some(id)).await?;
        tx.commit().await?;
        apply_pending(&mut check, &pending);
        Ok(check)
    }

    /// A read transaction: in WAL mode it reads one snapshot throughout.
    async fn read_snapshot(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin().await?)
    }
}

/// Checkpoints the WAL on its own connection (and thread) a little after the
/// ping writer committed, and every [`CHECKPOINT_EVERY`], so that no commit
/// waits for the fsyncs. PASSIVE: it never waits for a reader or the writer,
/// and the writer goes on appending meanwhile. Once the WAL is long, it
/// copies the rest holding the writer, so that the WAL starts over
/// ([`RESTART_WAL_PAGES`]).
async fn checkpointer(
    mut conn: SqliteConnection,
    writer: std::sync::Arc<Mutex<Writer>>,
    wrote: std::sync::Arc<tokio::sync::Notify>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let pings = tokio::select! {
            _ = stop.cancelled() => break,
            _ = wrote.notified() => true,
            _ = tokio::time::sleep(CHECKPOINT_EVERY) => false,
        };
        if pings {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(CHECKPOINT_AFTER) => {}
            }
        }
        if let Err(e) = checkpoint(&mut conn, &writer, RESTART_WAL_PAGES).await {
            tracing::warn!(error = %e, "cannot checkpoint the SQLite WAL; a commit will");
        }
    }
    let _ = conn.close().await;
}

/// One PASSIVE checkpoint; if the WAL then holds `restart_pages` or more,
/// a second one while the writer is held, which copies what was written
/// meanwhile and leaves the WAL complete: the writer's next transaction
/// starts it over (unless a reader still reads an older snapshot; then a
/// later round does). Returns the WAL's length in pages as the last
/// checkpoint found it, and how many of them are copied.
async fn checkpoint(
    conn: &mut SqliteConnection,
    writer: &Mutex<Writer>,
    restart_pages: i64,
) -> Result<(i64, i64), sqlx::Error> {
    const SQL: &str = "PRAGMA wal_checkpoint(PASSIVE)";
    // (busy, pages in the WAL, pages copied)
    let (_, pages, copied): (i64, i64, i64) = sqlx::query_as(SQL).fetch_one(&mut *conn).await?;
    if pages < restart_pages {
        return Ok((pages, copied));
    }
    let _held = writer.lock().await;
    let (_, pages, copied): (i64, i64, i64) = sqlx::query_as(SQL).fetch_one(&mut *conn).await?;
    Ok((pages, copied))
}

/// A check as its written summary has it, without the pings after it.
async fn folded_check_on(conn: &mut SqliteConnection, id: i64) -> Result<Check, StoreError> {
    let sql = format!(
        "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
         WHERE c.id = ?"
    );
    let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&mut *conn).await?;
    Ok(row.into_check()?)
}

/// Pings not yet in the written summary, of one check or of all, oldest first.
async fn pending_on(
    conn: &mut SqliteConnection,
    check_id: Option<i64>,
) -> Result<Vec<StoredPing>, StoreError> {
    match check_id {
        Some(id) => pending_between(conn, id - 1, id).await,
        None => pending_between(conn, i64::MIN, i64::MAX).await,
    }
}

/// Pings of the checks with `after < id <= through` that their written
/// summaries do not hold yet, oldest first: the log's tail since the last
/// complete round, past each check's `folded_through` (a round that is half
/// written has written some checks' summaries already).
async fn pending_between(
    conn: &mut SqliteConnection,
    after: i64,
    through: i64,
) -> Result<Vec<StoredPing>, StoreError> {
    let sql = format!(
        "SELECT {INBOX_COLUMNS} FROM pings p WHERE p.id > (SELECT through FROM ping_rounds) \
         AND p.check_id > ?1 AND p.check_id <= ?2 \
         AND p.id > COALESCE((SELECT s.folded_through FROM check_state s \
         WHERE s.check_id = p.check_id), 0) ORDER BY p.id"
    );
    let rows: Vec<InboxRow> = sqlx::query_as(&sql)
        .bind(after)
        .bind(through)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(InboxRow::into_ping).collect())
}

/// Pending pings grouped by check (in order), so applying them to many
/// checks costs one pass.
fn by_check(pending: Vec<StoredPing>) -> HashMap<i64, Vec<StoredPing>> {
    let mut out: HashMap<i64, Vec<StoredPing>> = HashMap::new();
    for p in pending {
        out.entry(p.ping.check_id).or_default().push(p);
    }
    out
}

/// How often the pings folded in memory are written out. A round writes them
/// sorted by check, so each page of the ping log's index and of the summaries
/// is written about once per round instead of once per fold (PERF-NOTES.md:
/// with pings spread over many checks, those page writes are the limit).
const ROUND_EVERY: Duration = Duration::from_millis(1_000);
/// A round starts early once this many folded pings wait for it.
const ROUND_MAX_PINGS: usize = 50_000;

/// Ping-index entries per chunk of a round (and at most as many summaries).
/// Each chunk is one short transaction (1–1.5 ms with pings spread over
/// 10,000 checks), so appends wait behind it only briefly.
const CHUNK_PINGS: usize = 500;
/// Prepared statements the writer's connection keeps (least recently used
/// go first): the ping INSERT's sizes (69) and the chunk shapes a load uses
/// (8 in a 10,000-check spread run; at most 11 × 11 padded sizes × through
/// × commit). sqlx's default is 100. Its one-off reads, whose text carries
/// their ids, are not kept.
const WRITER_STATEMENTS: usize = 256;
/// Rows read at a time when start-up replays the log's tail.
const REPLAY_PAGE: i64 = 5_000;

/// What appends changed in one check since its last round.
#[derive(Default)]
struct Dirty {
    /// Ids of its pings not yet in the ping index.
    pings: Vec<i64>,
    runs: Vec<RunChange>,
    overlaps: Vec<(UnixMs, String)>,
    resumed: bool,
}

/// A check's last write of a round: its summary as of the round's start
/// (with `folded_through`), the runs and events its pings made.
struct Final {
    check_id: i64,
    state: Cached,
    runs: Vec<RunChange>,
    overlaps: Vec<(UnixMs, String)>,
    resumed: bool,
}

/// Whether pings being folded are in the log already.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    No,
    Already,
}

/// Pings folded into copies of their checks' summaries, and what else they
/// changed; see [`Writer::absorb`].
struct Absorbed<'a> {
    /// The pings not yet in their summaries, in order: the batch itself
    /// unless some of it was already folded (or is of a deleted check).
    fresh: Cow<'a, [StoredPing]>,
    /// The ones folded (pings of deleted checks are not).
    pings: Vec<AbsorbedPing>,
    runs: Vec<(i64, RunChange)>,
    resumed: Vec<i64>,
    touched: Vec<i64>,
    overlaps: Vec<(i64, UnixMs, String)>,
    states: HashMap<i64, Cached>,
    next_run_id: i64,
}

/// What a folded ping is recorded as.
struct AbsorbedPing {
    /// Its index in [`Absorbed::fresh`].
    at: usize,
    n: i64,
    kind: PingKind,
    duration_ms: Option<i64>,
}

/// One transaction of a round. A check's index entries may span chunks; its
/// summary goes with the last of them, and readers use the index only up to
/// `folded_through`, so a check is never seen half-written.
#[derive(Default)]
struct Chunk {
    /// Ping-index entries: check id, ping id.
    pings: Vec<(i64, i64)>,
    finals: Vec<Final>,
    /// On the round's last chunk: the new `ping_rounds.through`.
    through: Option<i64>,
}

impl Writer {
    /// Hands the evaluator what appends changed since the last call, then
    /// writes one chunk of the round under way (starting a round when one is
    /// due); see [`Store::fold`].
    async fn fold(&mut self) -> Result<Folded, StoreError> {
        let touched = std::mem::take(&mut self.touched)
            .into_iter()
            .filter_map(|id| {
                self.checks.get(&id).map(|c| Touched {
                    check_id: id,
                    summary: c.summary.clone(),
                    paused: c.paused,
                })
            })
            .collect();
        if self.round.is_empty() && self.round_due() {
            self.start_round();
        }
        self.write_next_chunk().await?;
        Ok(Folded {
            pings: std::mem::take(&mut self.appended),
            touched,
            more: false,
            writing: !self.round.is_empty(),
        })
    }

    /// Writes everything folded so far (on shutdown).
    async fn flush(&mut self) -> Result<(), StoreError> {
        if self.round.is_empty() && self.has_unwritten() {
            self.start_round();
        }
        while !self.round.is_empty() {
            self.write_next_chunk().await?;
        }
        Ok(())
    }

    /// At start-up: folds the pings appended after the last complete round
    /// into the summaries in memory (they are durable in `pings`; their
    /// summaries were not written), then moves in the inbox rows an older
    /// version may have left, and writes all of it as one round.
    async fn catch_up(&mut self) -> Result<(), StoreError> {
        let (through, last_ping, last_inbox): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT through FROM ping_rounds), \
             (SELECT COALESCE(MAX(id), 0) FROM pings), \
             (SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = 'ping_inbox')",
        )
        .fetch_one(&mut self.conn)
        .await?;
        self.written_through = through;
        self.appended_through = through;
        // Never an id at or below `through`: readers would not see it.
        self.next_ping_id = last_ping.max(last_inbox).max(through) + 1;
        let mut after = through;
        loop {
            let sql = format!(
                "SELECT {INBOX_COLUMNS} FROM pings WHERE id > {after} ORDER BY id LIMIT {REPLAY_PAGE}"
            );
            let rows: Vec<InboxRow> = sqlx::query_as(&sql)
                .persistent(false)
                .fetch_all(&mut self.conn)
                .await?;
            let tail: Vec<StoredPing> = rows.into_iter().map(InboxRow::into_ping).collect();
            let Some(last) = tail.last().map(|p| p.id) else {
                break;
            };
            self.absorb(&tail, Written::Already).await?;
            after = last;
        }
        loop {
            let sql =
                // Appended as one batch: no larger than the largest INSERT.
                format!(
                    "SELECT {INBOX_COLUMNS} FROM ping_inbox ORDER BY id LIMIT {}",
                    config::PING_BATCH_MAX_LIMIT
                );
            let rows: Vec<InboxRow> = sqlx::query_as(&sql)
                .persistent(false)
                .fetch_all(&mut self.conn)
                .await?;
            if rows.is_empty() {
                break;
            }
            let inbox: Vec<StoredPing> = rows.into_iter().map(InboxRow::into_ping).collect();
            self.append(&inbox, true).await?;
        }
        self.flush().await
    }

    /// Folds a batch of pings (ids assigned) into the summaries and appends
    /// them to the log in one INSERT: all or none. The summaries in memory
    /// change only once it committed. `from_inbox`: the batch is inbox rows
    /// of an older version, deleted in the same transaction.
    async fn append(&mut self, batch: &[StoredPing], from_inbox: bool) -> Result<(), StoreError> {
        let Some(last) = batch.last().map(|p| p.id) else {
            return Ok(());
        };
        let mut plan = self.absorb(batch, Written::No).await?;
        if from_inbox {
            self.execute_batch("BEGIN IMMEDIATE").await?;
            if let Err(e) = self.insert_pings(&plan).await {
                // Leave no transaction open on this connection.
                let _ = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql("ROLLBACK")).await;
                return Err(e);
            }
            // On failure, execute_batch rolls back itself.
            self.execute_batch(&format!(
                "DELETE FROM ping_inbox WHERE id <= {last}; COMMIT;"
            ))
            .await?;
        } else {
            self.insert_pings(&plan).await?;
        }
        // Committed: the summaries and the round take the batch.
        self.next_ping_id = self.next_ping_id.max(last + 1);
        self.appended_through = self.appended_through.max(last);
        self.appended += batch.len();
        self.keep(&mut plan);
        Ok(())
    }

    /// Folds pings into copies of their checks' summaries; [`Writer::keep`]
    /// makes them the summaries. Pings a summary already holds (written
    /// before a restart) are skipped, as are pings of deleted checks.
    /// `Written::Already`: the pings are in the log (replayed at start-up),
    /// and are kept at once.
    async fn absorb<'a>(
        &mut self,
        pings: &'a [StoredPing],
        written: Written,
    ) -> Result<Absorbed<'a>, StoreError> {
        let ids: Vec<i64> = pings.iter().map(|p| p.ping.check_id).collect();
        self.load_missing(&ids).await?;
        if self.next_run_id.is_none() {
            let (max,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(id), 0) FROM runs")
                .fetch_one(&mut self.conn)
                .await?;
            self.next_run_id = Some(max + 1);
        }
        let is_fresh = |p: &StoredPing| {
            self.checks
                .get(&p.ping.check_id)
                .is_some_and(|c| p.id > c.folded_through)
        };
        let fresh: Cow<'a, [StoredPing]> = if pings.iter().all(is_fresh) {
            Cow::Borrowed(pings)
        } else {
            Cow::Owned(pings.iter().filter(|p| is_fresh(p)).cloned().collect())
        };
        let mut states: HashMap<i64, Cached> = fresh
            .iter()
            .filter_map(|p| {
                let id = p.ping.check_id;
                self.checks.get(&id).map(|c| (id, c.clone()))
            })
            .collect();
        let mut next_run_id = self.next_run_id.unwrap_or(1);
        let plan = plan_fold(&fresh, &mut states, &mut || {
            let id = next_run_id;
            next_run_id += 1;
            id
        });
        let folded: Vec<AbsorbedPing> = plan
            .pings
            .iter()
            .map(|f| AbsorbedPing {
                at: fresh.partition_point(|p| p.id < f.id),
                n: f.n,
                kind: f.kind,
                duration_ms: f.duration_ms,
            })
            .collect();
        let FoldPlan {
            runs,
            resumed,
            touched,
            overlaps,
            ..
        } = plan;
        let mut absorbed = Absorbed {
            fresh,
            pings: folded,
            runs,
            resumed,
            touched,
            overlaps,
            states,
            next_run_id,
        };
        if written == Written::Already {
            self.appended_through = self.appended_through.max(pings.last().map_or(0, |p| p.id));
            self.keep(&mut absorbed);
        }
        Ok(absorbed)
    }

    /// Makes folded pings part of the summaries in memory and of the next
    /// round.
    fn keep(&mut self, a: &mut Absorbed<'_>) {
        self.next_run_id = Some(a.next_run_id);
        for f in &a.pings {
            let p = &a.fresh[f.at];
            if let Some(state) = a.states.get_mut(&p.ping.check_id) {
                state.folded_through = state.folded_through.max(p.id);
            }
            self.dirty
                .entry(p.ping.check_id)
                .or_default()
                .pings
                .push(p.id);
            self.dirty_pings += 1;
        }
        self.checks.extend(a.states.drain());
        for (check_id, change) in a.runs.drain(..) {
            self.dirty.entry(check_id).or_default().runs.push(change);
        }
        for check_id in a.resumed.drain(..) {
            self.dirty.entry(check_id).or_default().resumed = true;
        }
        for (check_id, at, detail) in a.overlaps.drain(..) {
            self.dirty
                .entry(check_id)
                .or_default()
                .overlaps
                .push((at, detail));
        }
        self.touched.extend(a.touched.drain(..));
    }

    fn has_unwritten(&self) -> bool {
        !self.dirty.is_empty() || self.appended_through > self.written_through
    }

    fn round_due(&self) -> bool {
        self.has_unwritten()
            && (self.round_started.elapsed() >= ROUND_EVERY || self.dirty_pings >= ROUND_MAX_PINGS)
    }

    /// Cuts what folds changed into chunks, sorted by check, each check's
    /// summary taken as it is now.
    fn start_round(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        self.dirty_pings = 0;
        self.round_started = Instant::now();
        let mut chunks = VecDeque::new();
        let mut chunk = Chunk::default();
        for (check_id, d) in dirty {
            // Deleted since: nothing of it is written.
            let Some(state) = self.checks.get(&check_id).cloned() else {
                continue;
            };
            for id in d.pings {
                if chunk.pings.len() >= CHUNK_PINGS {
                    chunks.push_back(std::mem::take(&mut chunk));
                }
                chunk.pings.push((check_id, id));
            }
            if chunk.finals.len() >= CHUNK_PINGS {
                chunks.push_back(std::mem::take(&mut chunk));
            }
            chunk.finals.push(Final {
                check_id,
                state,
                runs: d.runs,
                overlaps: d.overlaps,
                resumed: d.resumed,
            });
        }
        chunk.through = Some(self.appended_through);
        chunks.push_back(chunk);
        self.round = chunks;
    }

    /// Writes the round's next chunk in one transaction: one call on its
    /// prepared statement ([`chunk_statement`]), and a second for the
    /// extras of the rare chunk that has some ([`chunk_extras`]).
    async fn write_next_chunk(&mut self) -> Result<(), StoreError> {
        let Some(chunk) = self.round.front() else {
            return Ok(());
        };
        let mut extras = chunk_extras(chunk);
        let shape = ChunkShape {
            index_rows: chunk_rows(chunk.pings.len()),
            summary_rows: chunk_rows(chunk.finals.len()),
            through: chunk.through.is_some(),
            commit: extras.is_empty(),
        };
        let sql = self
            .chunk_sql
            .entry(shape)
            .or_insert_with(|| chunk_statement(shape));
        let mut query = sqlx::query(sql.as_str());
        for (check_id, id) in &chunk.pings {
            query = query.bind(*check_id).bind(*id);
        }
        for _ in chunk.pings.len()..shape.index_rows {
            query = query.bind(None::<i64>).bind(None::<i64>);
        }
        for f in &chunk.finals {
            query = bind_summary(query, f.check_id, &f.state)?;
        }
        for _ in chunk.finals.len()..shape.summary_rows {
            for _ in 0..SUMMARY_COLUMNS {
                query = query.bind(None::<i64>);
            }
        }
        if let Some(through) = chunk.through {
            query = query.bind(through);
        }
        if let Err(e) = query.execute(&mut self.conn).await {
            return Err(self.abandon(e).await);
        }
        if !shape.commit {
            // On failure, execute_batch rolls back itself.
            extras.push_str("COMMIT;");
            self.execute_batch(&extras).await?;
        }
        if let Some(chunk) = self.round.pop_front() {
            if let Some(through) = chunk.through {
                self.written_through = through;
            }
        }
        Ok(())
    }

    /// Writes what appends changed in one check (its index entries, summary,
    /// runs and events) now, ahead of its round, taking it out of the round
    /// under way. A change to the check's flags that follows then applies only
    /// to the pings stored after it: readers re-apply a check's pings past its
    /// written summary with the flags in the table, and must not give a ping
    /// stored before a pause the power to resume the check (SPEC §5: pings and
    /// writes take effect in the order they were committed).
    async fn settle(&mut self, check_id: i64) -> Result<(), StoreError> {
        let mut pings = Vec::new();
        let mut last = Final {
            check_id,
            state: match self.checks.get(&check_id) {
                Some(state) => state.clone(),
                None => return Ok(()),
            },
            runs: Vec::new(),
            overlaps: Vec::new(),
            resumed: false,
        };
        let mut unwritten = false;
        // The round under way first: it holds older changes than `dirty`.
        for chunk in &mut self.round {
            chunk.pings.retain(|&(c, id)| {
                if c == check_id {
                    pings.push(id);
                }
                c != check_id
            });
            if let Some(i) = chunk.finals.iter().position(|f| f.check_id == check_id) {
                let f = chunk.finals.remove(i);
                last.runs.extend(f.runs);
                last.overlaps.extend(f.overlaps);
                last.resumed |= f.resumed;
                unwritten = true;
            }
        }
        if let Some(d) = self.dirty.remove(&check_id) {
            self.dirty_pings -= d.pings.len();
            pings.extend(d.pings);
            last.runs.extend(d.runs);
            last.overlaps.extend(d.overlaps);
            last.resumed |= d.resumed;
            unwritten = true;
        }
        if !unwritten {
            return Ok(());
        }
        // As a round would write it: index entries in chunks, the summary
        // with the last one, each chunk a transaction of its own.
        let mut chunks: Vec<Chunk> = pings
            .chunks(CHUNK_PINGS)
            .map(|ids| Chunk {
                pings: ids.iter().map(|&id| (check_id, id)).collect(),
                ..Chunk::default()
            })
            .collect();
        if chunks.is_empty() {
            chunks.push(Chunk::default());
        }
        if let Some(c) = chunks.last_mut() {
            c.finals.push(last);
        }
        let n = chunks.len();
        for chunk in chunks.into_iter().rev() {
            self.round.push_front(chunk);
        }
        for _ in 0..n {
            self.write_next_chunk().await?;
        }
        Ok(())
    }

    /// Forgets a deleted check, including what a round would still write.
    fn forget(&mut self, check_id: i64) {
        self.checks.remove(&check_id);
        if let Some(d) = self.dirty.remove(&check_id) {
            self.dirty_pings -= d.pings.len();
        }
        for chunk in &mut self.round {
            chunk.pings.retain(|(c, _)| *c != check_id);
            chunk.finals.retain(|f| f.check_id != check_id);
        }
    }

    /// Appends a batch's folded pings to the log in one INSERT, on a
    /// prepared statement the connection keeps for batches of this size
    /// (rounded up past [`EXACT_INSERT_ROWS`]): SQLite parses and plans it
    /// once, where a statement of literals cost as much to prepare as to run.
    async fn insert_pings(&mut self, plan: &Absorbed<'_>) -> Result<(), StoreError> {
        if plan.pings.is_empty() {
            return Ok(());
        }
        let rows = insert_rows(plan.pings.len());
        let sql = self
            .insert_sql
            .entry(rows)
            .or_insert_with(|| insert_pings_sql(rows));
        let mut query = sqlx::query(sql.as_str());
        for f in &plan.pings {
            let StoredPing { id, ping: p } = &plan.fresh[f.at];
            query = query
                .bind(*id)
                .bind(p.check_id)
                .bind(f.n)
                .bind(p.at)
                .bind(f.kind.as_str())
                .bind(p.exit_status.map(i64::from))
                .bind(p.items.map(clamp_items))
                .bind(p.rid.map(|r| r.to_string()))
                .bind(p.method.as_str())
                .bind(p.remote_addr.as_deref())
                .bind(p.user_agent.as_deref())
                .bind(p.scheme)
                .bind(p.body.as_slice())
                .bind(f.duration_ms);
        }
        // Padding rows: all NULL, left out by the statement's WHERE.
        for _ in plan.pings.len()..rows {
            for _ in 0..PING_LOG_COLUMNS {
                query = query.bind(None::<i64>);
            }
        }
        query.execute(&mut self.conn).await.map_err(|e| {
            StoreError::Other(anyhow::Error::new(e).context("cannot write to SQLite"))
        })?;
        Ok(())
    }

    /// Runs a statement string that holds its own `BEGIN … COMMIT`.
    async fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError> {
        if let Err(e) = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql(sql)).await {
            return Err(self.abandon(e).await);
        }
        Ok(())
    }

    /// After a write failed half-way: leaves no transaction open on this
    /// connection, and says what failed.
    async fn abandon(&mut self, e: sqlx::Error) -> StoreError {
        let _ = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql("ROLLBACK")).await;
        StoreError::Other(anyhow::Error::new(e).context("cannot write to SQLite"))
    }

    /// Re-reads a cached check's flags and thresholds after an update.
    async fn refresh_flags(&mut self, check_id: i64) -> Result<(), StoreError> {
        if !self.checks.contains_key(&check_id) {
            return Ok(());
        }
        let sql = format!(
            "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id = {check_id}"
        );
        let row: Option<WriterRow> = sqlx::query_as(&sql)
            .persistent(false)
            .fetch_optional(&mut self.conn)
            .await?;
        match row {
            Some(row) => {
                let (_, fresh) = row.into_parts()?;
                if let Some(c) = self.checks.get_mut(&check_id) {
                    c.paused = fresh.paused;
                    c.manual_resume = fresh.manual_resume;
                    c.methods = fresh.methods;
                    c.thresholds = fresh.thresholds;
                }
            }
            None => self.forget(check_id),
        }
        Ok(())
    }

    /// Reads the summaries of checks this writer has not seen yet.
    async fn load_missing(&mut self, ids: &[i64]) -> Result<(), StoreError> {
        let mut missing: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !self.checks.contains_key(id))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_unstable();
        missing.dedup();
        let ids: Vec<String> = missing.iter().map(i64::to_string).collect();
        let sql = format!(
            "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id IN ({})",
            ids.join(",")
        );
        let rows: Vec<WriterRow> = sqlx::query_as(&sql)
            .persistent(false)
            .fetch_all(&mut self.conn)
            .await?;
        for row in rows {
            let (id, check) = row.into_parts()?;
            self.checks.insert(id, check);
        }
        Ok(())
    }
}

/// The shape of a chunk's prepared statement: its row counts padded by
/// [`chunk_rows`], whether it moves `ping_rounds.through` (a round's last
/// chunk), and whether it commits. A chunk with runs, resumed checks or
/// overlap events (rare) sends those as SQL text after it, with the COMMIT.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct ChunkShape {
    index_rows: usize,
    summary_rows: usize,
    through: bool,
    commit: bool,
}

/// Ping-index entries or summaries of a chunk, padded to a power of two so
/// that the writer keeps a few dozen chunk statements at most (both are at
/// most [`CHUNK_PINGS`]).
fn chunk_rows(rows: usize) -> usize {
    if rows == 0 {
        0
    } else {
        rows.next_power_of_two()
    }
}

/// The parameters of one summary row, as [`bind_summary`] binds them.
const SUMMARY_COLUMNS: usize = 19;

/// A chunk's statement: `BEGIN IMMEDIATE`, its ping-index entries and its
/// summaries as parameters (a row whose first value is NULL is padding and
/// is not written), `through`, and `COMMIT`. SQLite parses and plans it once
/// per connection; as SQL text, a chunk cost more to parse than to run.
fn chunk_statement(shape: ChunkShape) -> String {
    let mut sql = String::from("BEGIN IMMEDIATE;\n");
    if shape.index_rows > 0 {
        // OR IGNORE: after a crash in the middle of a round, a check's
        // entries written before its summary are written again.
        let _ = writeln!(
            sql,
            "INSERT OR IGNORE INTO ping_index (check_id, id) \
             SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL;",
            vec!["(?,?)"; shape.index_rows].join(",")
        );
    }
    if shape.summary_rows > 0 {
        let row = format!("({})", vec!["?"; SUMMARY_COLUMNS].join(","));
        // The WHERE also settles SQLite's parsing of an upsert after a SELECT.
        let _ = writeln!(
            sql,
            "INSERT INTO check_state (check_id, n_pings, last_ping_at, last_ping_kind, \
             last_success_at, last_start_at, last_failure_at, last_items, last_items_at, \
             zero_streak_since, zero_streak_runs, consecutive_failures, consecutive_successes, \
             last_duration_ms, open_runs, overlap_count, failed_since, timed_out_at, \
             folded_through) SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL \
             ON CONFLICT (check_id) DO UPDATE SET n_pings = excluded.n_pings, \
             last_ping_at = excluded.last_ping_at, last_ping_kind = excluded.last_ping_kind, \
             last_success_at = excluded.last_success_at, last_start_at = excluded.last_start_at, \
             last_failure_at = excluded.last_failure_at, last_items = excluded.last_items, \
             last_items_at = excluded.last_items_at, zero_streak_since = excluded.zero_streak_since, \
             zero_streak_runs = excluded.zero_streak_runs, \
             consecutive_failures = excluded.consecutive_failures, \
             consecutive_successes = excluded.consecutive_successes, \
             last_duration_ms = excluded.last_duration_ms, open_runs = excluded.open_runs, \
             overlap_count = excluded.overlap_count, failed_since = excluded.failed_since, \
             timed_out_at = excluded.timed_out_at, folded_through = excluded.folded_through;",
            vec![row; shape.summary_rows].join(",")
        );
    }
    if shape.through {
        sql.push_str("UPDATE ping_rounds SET through = ?;\n");
    }
    if shape.commit {
        sql.push_str("COMMIT;");
    }
    sql
}

type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

/// Binds a summary row of [`chunk_statement`], in its column order.
fn bind_summary<'q>(
    query: SqliteQuery<'q>,
    check_id: i64,
    c: &Cached,
) -> Result<SqliteQuery<'q>, StoreError> {
    let s = &c.summary;
    let open_runs = serde_json::to_string(&s.open_runs).map_err(anyhow::Error::from)?;
    Ok(query
        .bind(check_id)
        .bind(s.n_pings)
        .bind(s.last_ping_at)
        .bind(s.last_ping_kind.map(|k| k.as_str()))
        .bind(s.last_success_at)
        .bind(s.last_start_at)
        .bind(s.last_failure_at)
        .bind(s.last_items)
        .bind(s.last_items_at)
        .bind(s.zero_streak_since)
        .bind(s.zero_streak_runs)
        .bind(s.consecutive_failures)
        .bind(s.consecutive_successes)
        .bind(s.last_duration_ms)
        .bind(open_runs)
        .bind(s.overlaps)
        .bind(s.failed_since)
        .bind(s.timed_out_at)
        .bind(c.folded_through))
}

/// What a chunk writes besides its index entries and summaries, as SQL text
/// to run after [`chunk_statement`] in its transaction: runs opened and
/// closed, checks a ping resumed, overlap events. Empty for most chunks.
fn chunk_extras(chunk: &Chunk) -> String {
    let mut sql = String::new();
    let runs: Vec<(i64, RunChange)> = chunk
        .finals
        .iter()
        .flat_map(|f| f.runs.iter().map(|r| (f.check_id, r.clone())))
        .collect();
    write_runs(&mut sql, &runs);
    let resumed: Vec<String> = chunk
        .finals
        .iter()
        .filter(|f| f.resumed)
        .map(|f| f.check_id.to_string())
        .collect();
    if !resumed.is_empty() {
        let _ = writeln!(
            sql,
            "UPDATE checks SET paused = 0 WHERE id IN ({});",
            resumed.join(",")
        );
    }
    for f in &chunk.finals {
        for (at, detail) in &f.overlaps {
            let _ = writeln!(
                sql,
                "INSERT INTO check_events (check_id, at, kind, detail) VALUES ({}, {at}, {}, {});",
                f.check_id,
                text(OVERLAP_EVENT),
                text(detail)
            );
        }
    }
    sql
}

/// Inserts first, then updates, so a run opened and closed in one batch works.
fn write_runs(sql: &mut String, runs: &[(i64, RunChange)]) {
    let mut first = true;
    for (check_id, change) in runs {
        if let RunChange::Open {
            id,
            rid,
            started_at,
            overlapped,
        } = change
        {
            sql.push_str(if first {
                "INSERT INTO runs (id, check_id, rid, started_at, overlapped) VALUES "
            } else {
                ","
            });
            first = false;
            let _ = write!(
                sql,
                "({id},{check_id},{},{started_at},{})",
                opt_text(rid.map(|r| r.to_string()).as_deref()),
                i32::from(*overlapped)
            );
        }
    }
    if !first {
        sql.push_str(";\n");
    }
    for (_, change) in runs {
        match change {
            RunChange::Open { .. } => {}
            RunChange::Overlapped { id } => {
                let _ = writeln!(sql, "UPDATE runs SET overlapped = 1 WHERE id = {id};");
            }
            RunChange::Close {
                id,
                ended_at,
                outcome,
                duration_ms,
                reason,
            } => {
                let _ = writeln!(
                    sql,
                    "UPDATE runs SET ended_at = {ended_at}, outcome = '{}', duration_ms = {duration_ms}, reason = {} WHERE id = {id};",
                    outcome.as_str(),
                    opt_text(*reason)
                );
            }
        }
    }
}

/// The columns of a ping log row, as [`Writer::insert_pings`] binds them.
const PING_LOG_COLUMNS: usize = 14;

/// Batches of up to this many pings get an INSERT of their own size; larger
/// ones the next power of two, padded with rows of NULLs, so that the
/// connection keeps at most a few dozen such statements.
const EXACT_INSERT_ROWS: usize = 64;

fn insert_rows(pings: usize) -> usize {
    if pings <= EXACT_INSERT_ROWS {
        pings
    } else {
        pings.next_power_of_two()
    }
}

/// The ping log's INSERT for `rows` rows of [`PING_LOG_COLUMNS`] parameters.
/// A row whose id is NULL is padding, and is not inserted. `OR REPLACE` only
/// matters for inbox rows of an older version: its round may have copied
/// some of them already.
fn insert_pings_sql(rows: usize) -> String {
    let row = format!("({})", vec!["?"; PING_LOG_COLUMNS].join(","));
    format!(
        "INSERT OR REPLACE INTO pings (id, check_id, n, at, kind, exit_status, items, rid, \
         method, remote_addr, user_agent, scheme, body, duration_ms) \
         SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL",
        vec![row; rows].join(",")
    )
}

/// A text literal: quotes doubled, and NUL (which would end the statement for
/// SQLite's parser) dropped; header values never contain it anyway.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn opt_text(s: Option<&str>) -> String {
    s.map_or_else(|| "NULL".to_string(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection leaves checkpoints to the checkpointer until the WAL
    /// is large: at SQLite's default (1,000 pages), the ping writer, and the
    /// writes that hold its lock (status changes, retention, edits), each
    /// ran a checkpoint's fsyncs while pings waited.
    #[tokio::test]
    async fn no_connection_checkpoints_a_small_wal() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("o.db").display());
        let store = SqliteStore::connect(&url, config::SqliteSynchronous::Normal)
            .await
            .unwrap();
        let pages = |n: i64| assert_eq!(n, i64::from(AUTOCHECKPOINT_PAGES));
        let mut w = store.writer.lock().await;
        pages(
            sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(&mut w.conn)
                .await
                .unwrap(),
        );
        drop(w);
        pages(
            sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(&store.pool)
                .await
                .unwrap(),
        );
    }

    /// Under a steady stream of appends a PASSIVE checkpoint seldom finds
    /// the WAL complete, and a WAL that is never complete never starts over.
    /// The checkpointer's second checkpoint, holding the writer, must leave
    /// it complete, and the WAL must then start over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_wal_is_completed_with_the_writer_held_and_starts_over() {
        use crate::domain::check::CheckInput;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("o.db").display());
        let store = std::sync::Arc::new(
            SqliteStore::connect(&url, config::SqliteSynchronous::Normal)
                .await
                .unwrap(),
        );
        let input: CheckInput = serde_json::from_str(r#"{"slug": "steady"}"#).unwrap();
        let spec = CheckSpec::from_input(input).unwrap();
        let check = store
            .create_check(&spec, CheckSource::Api, 0)
            .await
            .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let appender = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            async move {
                let mut n = 0_i64;
                while !stop.is_cancelled() {
                    let ping = Ping::new(check.id, 1_000 + n, PingKind::Success);
                    store.append_pings(&[ping]).await.unwrap();
                    n += 1;
                }
                n
            }
        });
        let mut conn = SqliteConnection::connect(&url).await.unwrap();
        let mut lengths = Vec::new();
        for _ in 0..30 {
            let (pages, copied) = checkpoint(&mut conn, &store.writer, 1).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            if pages < 0 {
                // The store's own checkpointer was at it (SQLITE_BUSY).
                continue;
            }
            assert_eq!(
                copied, pages,
                "the WAL is complete after a restart checkpoint"
            );
            lengths.push(pages);
        }
        stop.cancel();
        let appended = appender.await.unwrap();
        assert!(appended > 30, "only {appended} appends ran meanwhile");
        // A WAL that does not start over only grows.
        assert!(lengths.len() >= 10, "too few checkpoints ran: {lengths:?}");
        assert!(
            lengths.windows(2).any(|w| w[1] < w[0]),
            "the WAL never started over: {lengths:?}"
        );
    }

    #[test]
    fn ping_inserts_come_in_few_sizes_within_sqlites_parameter_limit() {
        assert_eq!(insert_rows(1), 1);
        assert_eq!(insert_rows(EXACT_INSERT_ROWS), EXACT_INSERT_ROWS);
        assert_eq!(insert_rows(EXACT_INSERT_ROWS + 1), 128);
        assert_eq!(insert_rows(1000), 1024);
        let sizes: BTreeSet<usize> = (1..=1024).map(insert_rows).collect();
        assert_eq!(sizes.len(), EXACT_INSERT_ROWS + 4);
        // The largest batch the config allows.
        let most = insert_rows(config::PING_BATCH_MAX_LIMIT);
        let sql = insert_pings_sql(most);
        assert_eq!(sql.matches('?').count(), most * PING_LOG_COLUMNS);
        assert!(
            most * PING_LOG_COLUMNS <= 32_766,
            "SQLITE_MAX_VARIABLE_NUMBER"
        );
    }

    #[test]
    fn chunk_statements_come_in_few_shapes_within_sqlites_parameter_limit() {
        assert_eq!(chunk_rows(0), 0);
        assert_eq!(chunk_rows(3), 4);
        let sizes: BTreeSet<usize> = (0..=CHUNK_PINGS).map(chunk_rows).collect();
        assert_eq!(sizes.len(), 11);
        let most = chunk_rows(CHUNK_PINGS);
        let shape = ChunkShape {
            index_rows: most,
            summary_rows: most,
            through: true,
            commit: true,
        };
        let sql = chunk_statement(shape);
        let params = most * 2 + most * SUMMARY_COLUMNS + 1;
        assert_eq!(sql.matches('?').count(), params);
        assert!(params <= 32_766, "SQLITE_MAX_VARIABLE_NUMBER");
        assert!(sql.starts_with("BEGIN IMMEDIATE;") && sql.ends_with("COMMIT;"));
        let open = chunk_statement(ChunkShape {
            commit: false,
            through: false,
            ..shape
        });
        assert!(!open.contains("COMMIT") && !open.contains("ping_rounds"));
    }

    #[test]
    fn text_literals_escape_quotes_and_drop_nul() {
        assert_eq!(text("plain"), "'plain'");
        assert_eq!(text("it's"), "'it''s'");
        assert_eq!(text("a\0b"), "'ab'");
        assert_eq!(
            text("'; DROP TABLE pings; --"),
            "'''; DROP TABLE pings; --'"
        );
        assert_eq!(opt_text(None), "NULL");
    }
}

impl SqliteStore {
    /// A transaction for a leader-only write: one process per file, so it is
    /// always the leader.
    pub(crate) async fn begin_fenced(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin().await?)
    }
}

#[async_trait]
impl super::lease::LeaseStore for SqliteStore {
    async fn acquire_lease(
        &self,
        _holder: &str,
        _ttl_ms: i64,
    ) -> Result<Option<super::lease::Lease>, StoreError> {
        Ok(Some(super::lease::Lease {
            token: 1,
            remaining_ms: i64::MAX,
        }))
    }

    async fn release_lease(&self, _holder: &str) -> Result<(), StoreError> {
        Ok(())
    }

    fn single_process(&self) -> bool {
        true
    }

    async fn watch_changes(
        &self,
        _on_change: Box<dyn Fn(super::lease::Change) + Send + Sync>,
        _stop: tokio_util::sync::CancellationToken,
    ) {
    }
}

/// The statements that record a batch of transitions, as one string.
fn transitions_sql(rows: &TransitionRows) -> String {
    let mut sql = String::with_capacity(rows.status.len() * 200);
    let values = |sql: &mut String, items: Vec<String>| {
        sql.push_str(&items.join(","));
        sql.push_str(";\n");
    };
    sql.push_str("INSERT INTO check_status (check_id, status, reason, since, quiet) VALUES ");
    values(
        &mut sql,
        rows.status
            .iter()
            .map(|(id, st, r, since, q)| {
                format!("({id},'{st}',{},{since},{})", opt_text(*r), i32::from(*q))
            })
            .collect(),
    );
    sql.truncate(sql.len() - 2);
    sql.push_str(
        " ON CONFLICT (check_id) DO UPDATE SET status = excluded.status, \
         reason = excluded.reason, since = excluded.since, quiet = excluded.quiet;\n",
    );
    if !rows.flips.is_empty() {
        sql.push_str(
            "INSERT INTO flips (check_id, at, old_status, new_status, reason, recorded_at) VALUES ",
        );
        values(
            &mut sql,
            rows.flips
                .iter()
                .map(|(id, at, old, new, r, rec)| {
                    format!("({id},{at},'{old}','{new}',{},{rec})", opt_text(*r))
                })
                .collect(),
        );
    }
    if !rows.opened.is_empty() {
        sql.push_str("INSERT INTO incidents (check_id, opened_at, status, reason) VALUES ");
        values(
            &mut sql,
            rows.opened
                .iter()
                .map(|(id, at, st, r)| format!("({id},{at},'{st}',{})", opt_text(*r)))
                .collect(),
        );
        sql.truncate(sql.len() - 2);
        sql.push_str(" ON CONFLICT DO NOTHING;\n");
    }
    if !rows.resolved.is_empty() {
        sql.push_str("UPDATE incidents SET resolved_at = v.column2 FROM (VALUES ");
        sql.push_str(
            &rows
                .resolved
                .iter()
                .map(|(id, at)| format!("({id},{at})"))
                .collect::<Vec<_>>()
                .join(","),
        );
        sql.push_str(
            ") AS v WHERE incidents.check_id = v.column1 AND incidents.resolved_at IS NULL;\n",
        );
    }
    if !rows.events.is_empty() {
        sql.push_str("INSERT INTO check_events (check_id, at, kind, detail) VALUES ");
        values(
            &mut sql,
            rows.events
                .iter()
                .map(|(id, at, d)| format!("({id},{at},{},{})", text(QUIET_EVENT), text(d)))
                .collect(),
        );
    }
    sql
}

#[async_trait]
impl super::retention::RetentionStore for SqliteStore {
    async fn prune_ping_logs(&self, ids: &[i64], keep: u32, limit: u32) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        // Only pings in the index up to the check's written summary: a round
        // indexes a check's pings in one chunk and may write its summary in
        // a later one, and pings past the summary are refolded from the log
        // after a restart. They stay, as does the log's tail past the round.
        let mut sql = String::with_capacity(ids.len() * 500);
        for id in ids {
            let folded = format!(
                "ping_index WHERE check_id = {id} \
                 AND id <= (SELECT folded_through FROM check_state WHERE check_id = {id})"
            );
            let cutoff =
                format!("(SELECT id FROM {folded} ORDER BY id DESC LIMIT 1 OFFSET {keep})");
            // The same rows twice: the index still lists them when the
            // second statement looks.
            let oldest =
                format!("SELECT id FROM {folded} AND id <= {cutoff} ORDER BY id LIMIT {limit}");
            let _ = writeln!(
                sql,
                "DELETE FROM pings WHERE id IN ({oldest});\n\
                 DELETE FROM ping_index WHERE check_id = {id} AND id IN ({oldest});"
            );
        }
        // Under the writer's lock, as the writer's own rounds: a writer
        // kept waiting on SQLite's busy handler sleeps longer than needed.
        let _w = self.writer.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let done = sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(&sql)).await?;
        tx.commit().await?;
        // Each ping deleted is one row of the log and one of the index.
        Ok(done.rows_affected() / 2)
    }

    async fn prune_history(
        &self,
        before: UnixMs,
        limit: u32,
    ) -> Result<super::retention::HistoryStep, StoreError> {
        let _w = self.writer.lock().await;
        super::retention::prune_history_on!(&self.pool, "", before, limit)
    }
}

super::notify::impl_notify_store!(SqliteStore);
super::metrics::impl_metrics_store!(SqliteStore);
super::keys::impl_key_store!(SqliteStore);
