//! The PostgreSQL store, for several replicas sharing one database.
//!
//! Any replica appends pings to the inbox (`ping_inbox`) in one array-bound
//! statement per batch, and keeps no summaries in memory. One replica at a
//! time folds the inbox (an advisory lock): it applies the pings to the
//! summaries, moves them to the ping log and writes the summaries, runs and
//! events back with array-bound statements, all in one transaction. Reads of
//! checks apply what is still in the inbox, in the same snapshot.

mod append; // the ping path: appending batches to the inbox on kept connections
mod fold; // folding the inbox into the log and the summaries, and the fold cache
mod lease; // the leader lease, fenced transactions and change notifications
mod reads; // read snapshots, and the inbox's pings that reads apply
mod retention; // trimming the ping log
mod writes; // status changes, summaries and runs written with UNNEST

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

use self::append::AppendConnections;
use self::fold::{lock_folds, settle_on, FoldCache};
use self::reads::{folded_check_on, pending_on};
use self::writes::{write_runs, write_summaries};
use super::{
    bind_check_values, check_ref, insert_check_sql, CheckRef, CheckRow, CheckSource, CheckValues,
    EvalCheck, EvalRow, EventRecord, FlipRecord, Folded, IncidentRecord, PingRow, RunRow, Store,
    StoreError, Touched, Transition, WriterRow, CHECK_COLUMNS, EVAL_COLUMNS, WRITER_COLUMNS,
};
use crate::domain::check::Check;
use crate::domain::check::CheckSpec;
use crate::domain::fold::{
    apply_pending, apply_pending_runs, merge_runs, Ping, PingRecord, RunRecord,
};
use crate::domain::ping::UnixMs;

/// The PostgreSQL implementation of [`Store`].
pub struct PgStore {
    pool: PgPool,
    /// (holder, token) of the lease this replica last held; leader-only
    /// writes carry it. `None` until the first lease (tools and tests that
    /// write without one).
    fence: std::sync::RwLock<Option<(String, i64)>>,
    /// Connections kept for appending pings, outside the pool (see
    /// [`AppendConnections`]).
    appenders: AppendConnections,
    /// The checks this replica's folds wrote, as they left them.
    fold_cache: std::sync::Mutex<FoldCache>,
    /// Held by a fold from start to end: two folds of this process at once
    /// would hand the cache back out of order.
    folding: tokio::sync::Mutex<()>,
}

impl PgStore {
    /// Connects and applies migrations.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::connect_with_lease(url, Duration::from_secs(15)).await
    }

    /// Connects for a replica whose leader lease lasts `lease_ttl`.
    ///
    /// A leader-only write holds the lease row `FOR SHARE` for its
    /// transaction. If the process stalls inside one (a long pause, SIGSTOP),
    /// PostgreSQL ends the session after half the TTL idle in the
    /// transaction, so the lock cannot keep another replica from taking the
    /// lease over once it has expired.
    pub async fn connect_with_lease(url: &str, lease_ttl: Duration) -> anyhow::Result<Self> {
        let idle = (lease_ttl / 2).max(Duration::from_millis(100));
        let options = sqlx::postgres::PgConnectOptions::from_str(url)
            .context("database_url is not a valid postgres:// URL")?
            .options([(
                "idle_in_transaction_session_timeout",
                format!("{}", idle.as_millis()),
            )]);
        let appenders = AppendConnections::new(options.clone());
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await
            .context("cannot connect to PostgreSQL")?;
        sqlx::migrate!("migrations/postgres")
            .run(&pool)
            .await
            .context("cannot apply PostgreSQL migrations")?;
        Ok(PgStore {
            pool,
            appenders,
            fence: std::sync::RwLock::new(None),
            fold_cache: std::sync::Mutex::new(FoldCache::default()),
            folding: tokio::sync::Mutex::new(()),
        })
    }
}

#[async_trait]
impl Store for PgStore {
    fn shared(&self) -> bool {
        true
    }

    fn append_concurrency(&self) -> usize {
        // One batch at a time, the next gathering while it commits: on the
        // 2-core benchmark machine, 2 or 4 batches in flight split the
        // waiting pings into smaller batches, each with its own WAL flush,
        // and were 10-25% slower (BENCHMARKS.md).
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
        let sql = insert_check_sql(|i| format!("${i}"));
        let (id,): (i64,) = bind_check_values!(sqlx::query_as(&sql), v, now)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO check_state (check_id) VALUES ($1)")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.check_by_id(id).await
    }

    async fn check_by_uuid(&self, uuid: Uuid) -> Result<Check, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.uuid = $1"
        );
        // One snapshot for the summary and the inbox, so a fold committing
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
        let pending = pending_on(&mut tx, None).await?;
        tx.commit().await?;
        rows.into_iter()
            .map(|r| {
                let mut check = r.into_check()?;
                apply_pending(&mut check, &pending);
                Ok(check)
            })
            .collect()
    }

    async fn check_ref_by_uuid(&self, uuid: Uuid) -> Result<Option<CheckRef>, StoreError> {
        let row: Option<(i64, String, Option<String>)> =
            sqlx::query_as("SELECT id, uuid, slug FROM checks WHERE uuid = $1")
                .bind(uuid.to_string())
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(check_ref))
    }

    async fn check_ref_by_slug(&self, slug: &str) -> Result<Option<CheckRef>, StoreError> {
        let row: Option<(i64, String, Option<String>)> =
            sqlx::query_as("SELECT id, uuid, slug FROM checks WHERE slug = $1")
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

    async fn time_out_run(
        &self,
        check_id: i64,
        run_id: i64,
        at: UnixMs,
    ) -> Result<Option<Touched>, StoreError> {
        let mut tx = self.begin_fenced().await?;
        lock_folds(&mut tx).await?;
        let sql = format!(
            "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id = $1"
        );
        let row: Option<WriterRow> = sqlx::query_as(&sql)
            .bind(check_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let (_, mut entry) = row.into_parts()?;
        let Some(change) = entry.summary.time_out_run(run_id, at) else {
            return Ok(None);
        };
        let one = HashMap::from([(check_id, entry)]);
        write_summaries(&mut tx, &one).await?;
        write_runs(&mut tx, &[(check_id, change)]).await?;
        tx.commit().await?;
        let entry = &one[&check_id];
        Ok(Some(Touched {
            check_id,
            summary: entry.summary.clone(),
            paused: entry.paused,
        }))
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
             WHERE c.id > $1 ORDER BY c.id LIMIT $2"
        );
        let rows: Vec<EvalRow> = sqlx::query_as(&sql)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter()
            .map(|r| r.into_eval().map_err(StoreError::Other))
            .collect()
    }

    async fn eval_check(&self, id: i64) -> Result<Option<EvalCheck>, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS}, {EVAL_COLUMNS} FROM checks c \
             JOIN check_state s ON s.check_id = c.id \
             LEFT JOIN check_status st ON st.check_id = c.id WHERE c.id = $1"
        );
        let row: Option<EvalRow> = sqlx::query_as(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(EvalRow::into_eval).transpose()?)
    }

    async fn record_transitions(&self, batch: &[Transition]) -> Result<(), StoreError> {
        self.write_transitions(batch).await
    }

    async fn heartbeat(
        &self,
        replica: &str,
        started_at: UnixMs,
        now: UnixMs,
        gap: i64,
    ) -> Result<Option<(UnixMs, UnixMs)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Serialise heartbeats so two replicas cannot both see the same gap.
        sqlx::query("LOCK TABLE replicas IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
        let (last,): (Option<i64>,) = sqlx::query_as("SELECT MAX(last_beat_at) FROM replicas")
            .fetch_one(&mut *tx)
            .await?;
        let span = last.filter(|l| now - l > gap).map(|l| (l, now));
        if let Some((start, end)) = span {
            sqlx::query(
                "INSERT INTO unobserved (start_at, end_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(start)
            .bind(end)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO replicas (id, started_at, last_beat_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET last_beat_at = GREATEST(replicas.last_beat_at, excluded.last_beat_at)",
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
            "SELECT start_at, end_at FROM unobserved WHERE end_at > $1 ORDER BY start_at",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_flips(&self, check_id: i64, limit: u32) -> Result<Vec<FlipRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT at, old_status, new_status, reason FROM flips WHERE check_id = $1 \
             ORDER BY id DESC LIMIT $2",
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
             WHERE check_id = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_events(&self, check_id: i64, limit: u32) -> Result<Vec<EventRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT at, kind, detail FROM check_events WHERE check_id = $1 \
             ORDER BY id DESC LIMIT $2",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn append_pings(&self, pings: &[Ping]) -> Result<(), StoreError> {
        self.append_batch(pings).await
    }

    async fn fold(&self, limit: usize) -> Result<Folded, StoreError> {
        self.fold_inbox(limit).await
    }

    async fn set_paused(
        &self,
        check_id: i64,
        paused: bool,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let mut tx = self.pool.begin().await?;
        lock_folds(&mut tx).await?;
        settle_on(&mut tx, check_id).await?;
        let done = sqlx::query("UPDATE checks SET paused = $1, updated_at = $2 WHERE id = $3")
            .bind(paused)
            .bind(now)
            .bind(check_id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        // The inbox is locked and holds none of its pings: this is the check
        // as the write left it.
        let check = folded_check_on(&mut tx, check_id).await?;
        tx.commit().await?;
        Ok(check)
    }

    async fn list_pings_before(
        &self,
        check_id: i64,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<PingRecord>, StoreError> {
        // Pings still in the inbox first (newest), then the folded log.
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, check_id).await?;
        let pending = pending_on(&mut tx, Some(check_id)).await?;
        let mut out = apply_pending(&mut check, &pending);
        out.reverse();
        let before = before.unwrap_or(i64::MAX);
        out.retain(|p| p.n < before);
        out.truncate(limit as usize);
        let rows: Vec<PingRow> = sqlx::query_as(
            "SELECT id, n, at, kind, exit_status, items, rid, method, remote_addr, user_agent, \
             scheme, body, duration_ms FROM pings WHERE check_id = $1 AND n < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(check_id)
        .bind(before)
        .bind(i64::from(limit) - out.len() as i64)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        out.extend(rows.into_iter().map(PingRow::into_record));
        Ok(out)
    }

    async fn update_check(
        &self,
        check_id: i64,
        spec: &CheckSpec,
        now: UnixMs,
    ) -> Result<Check, StoreError> {
        let v = CheckValues::new(spec, CheckSource::Api)?;
        let sql = super::update_check_sql(|i| format!("${i}"));
        let mut tx = self.pool.begin().await?;
        lock_folds(&mut tx).await?;
        settle_on(&mut tx, check_id).await?;
        let done = super::bind_update_values!(sqlx::query(&sql), v, now, check_id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        // The inbox is locked and holds none of its pings: this is the check
        // as the write left it.
        let check = folded_check_on(&mut tx, check_id).await?;
        tx.commit().await?;
        Ok(check)
    }
    async fn delete_check(&self, check_id: i64) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        lock_folds(&mut tx).await?;
        let done = sqlx::query("DELETE FROM checks WHERE id = $1")
            .bind(check_id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        // The ping log has no foreign key (a check per inserted ping cost
        // the fold a third of its time); no fold runs while this holds the
        // fold lock, and none after it will log a ping of this check.
        sqlx::query("DELETE FROM pings WHERE check_id = $1")
            .bind(check_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
    async fn list_runs(&self, check_id: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, check_id).await?;
        let pending = pending_on(&mut tx, Some(check_id)).await?;
        let runs: Vec<RunRow> = sqlx::query_as(
            "SELECT id, rid, started_at, ended_at, outcome, reason, duration_ms, overlapped \
             FROM runs WHERE check_id = $1 ORDER BY id DESC LIMIT $2",
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

crate::store::notify::impl_notify_store!(PgStore);
crate::store::metrics::impl_metrics_store!(PgStore);
crate::store::keys::impl_key_store!(PgStore);
