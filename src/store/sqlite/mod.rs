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

mod checkpoint; // the checkpointer: copies the WAL into the database off the writer's path
mod dialect; // reads in a snapshot with the log's tail applied; check changes under the writer
mod locks; // the job guard's lock seats, expiring by the monotonic clock
mod retention; // trimming the ping log and its index
mod rounds; // rounds: the summaries, runs and ping index written out in chunks
mod text; // statements sent as SQL text (a chunk's extras), and their literals
mod transitions; // a batch of status changes: prepared statements of many rows each
mod writer; // the ping writer: folds each batch in memory and appends it to the log

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqlitePool};
use tokio::sync::Mutex;

use self::checkpoint::{checkpointer, AUTOCHECKPOINT_PAGES};
use self::writer::{Writer, WRITER_STATEMENTS};
use super::{EvalCheck, Folded, Store, StoreError, Touched, Transition, TransitionRows};
use crate::domain::fold::{Ping, StoredPing};
use crate::domain::ping::UnixMs;
use crate::settings as config;

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    pool: SqlitePool,
    writer: std::sync::Arc<Mutex<Writer>>,
    /// Wakes the checkpointer after the ping writer committed.
    wrote: std::sync::Arc<tokio::sync::Notify>,
    /// When each held lock seat expires (see [`locks`]).
    locks: Mutex<locks::Deadlines>,
    /// Ends the checkpointer when the store is dropped.
    _checkpointer: tokio_util::sync::DropGuard,
}

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
        let pool = SqlitePoolOptions::new().max_connections(4);
        let migrator = sqlx::migrate!("migrations/sqlite");
        let pool = super::open_pool(pool, options.clone(), &migrator, "SQLite").await?;
        // Room for every shape of ping INSERT and of round chunk it prepares.
        let writer_options = options.clone().statement_cache_capacity(WRITER_STATEMENTS);
        let conn = SqliteConnection::connect_with(&writer_options)
            .await
            .context("cannot open the SQLite writer connection")?;
        let checkpoints = SqliteConnection::connect_with(&options)
            .await
            .context("cannot open the SQLite checkpoint connection")?;
        let mut writer = Writer::new(conn);
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
            locks: Mutex::new(locks::Deadlines::new()),
            _checkpointer: stop.drop_guard(),
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
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

    async fn eval_checks(&self, after: i64, limit: u32) -> Result<Vec<EvalCheck>, StoreError> {
        self.eval_page(after, limit).await
    }

    async fn eval_check(&self, id: i64) -> Result<Option<EvalCheck>, StoreError> {
        self.eval_one(id).await
    }

    async fn record_transitions(&self, batch: &[Transition]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        // Prepared statements of many rows each (see transitions.rs); inside
        // a sqlx transaction so a failure rolls back.
        let all: HashSet<i64> = batch.iter().map(|t| t.check_id).collect();
        let rows = TransitionRows::new(batch, &all);
        // Under the writer's lock: a check is deleted only under it, so none
        // can go between the read below and the writes; and the ping writer,
        // kept out meanwhile, waits on the lock rather than sleeping in
        // SQLite's busy handler.
        let _w = self.writer.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        match transitions::write(&mut tx, &rows).await {
            Ok(()) => {}
            Err(e) if transitions::check_gone(&e) => {
                // Changes of checks already gone are dropped (their foreign
                // keys failed the batch): again without them.
                tx.rollback().await?;
                tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
                let live = transitions::live(&mut tx, &all).await?;
                let rows = TransitionRows::new(batch, &live);
                if rows.status.is_empty() {
                    return Ok(());
                }
                transitions::write(&mut tx, &rows).await?;
            }
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        Ok(())
    }

    async fn delete_check(&self, check_id: i64) -> Result<(), StoreError> {
        let writer = self.writer.clone();
        let pool = self.pool.clone();
        // In a task the request cannot cancel: dropped between the commit and
        // `forget`, the writer would keep the check and write its summary
        // again, which the foreign key refuses on every round after.
        let task = tokio::spawn(async move {
            let mut w = writer.lock_owned().await;
            // The log has no foreign key (a cascade would scan it): its rows
            // go first, found through the index and in the tail.
            let mut tx = pool.begin().await?;
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
        });
        task.await
            .map_err(|e| StoreError::Other(anyhow::anyhow!("deleting a check failed: {e}")))?
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
impl crate::store::lease::LeaseStore for SqliteStore {
    async fn acquire_lease(
        &self,
        _holder: &str,
        _ttl_ms: i64,
    ) -> Result<Option<crate::store::lease::Lease>, StoreError> {
        Ok(Some(crate::store::lease::Lease {
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
        _on_change: Box<dyn Fn(crate::store::lease::Change) + Send + Sync>,
        _stop: tokio_util::sync::CancellationToken,
    ) {
    }
}

crate::store::notify::impl_notify_store!(SqliteStore);
crate::store::oncall::impl_oncall_store!(SqliteStore);
crate::store::metrics::impl_metrics_store!(SqliteStore);
crate::store::keys::impl_key_store!(SqliteStore);
crate::store::checks::impl_check_store!(SqliteStore);
crate::store::replicas::impl_replica_store!(SqliteStore);

crate::store::ledger::impl_ledger_store!(SqliteStore);

impl SqliteStore {
    /// The ledger's pings: the log's tail since the last round for the
    /// wanted checks, and, for a check the tail does not cover from its
    /// mark on, its indexed pings too (one snapshot).
    async fn ledger_pings_on(
        &self,
        wants: &[(i64, i64, i64)],
    ) -> Result<Vec<(i64, crate::domain::ledger::LedgerPing)>, StoreError> {
        use crate::store::ledger::{LedgerPingRow, LEDGER_PING_COLUMNS};
        use std::collections::BTreeMap;
        if wants.is_empty() {
            return Ok(Vec::new());
        }
        let after: std::collections::HashMap<i64, i64> =
            wants.iter().map(|(c, a, _)| (*c, *a)).collect();
        let ids = serde_json::to_string(&after.keys().collect::<Vec<_>>())
            .unwrap_or_else(|_| "[]".to_string());
        let mut tx = crate::store::dialect::Dialect::read_snapshot(self).await?;
        let tail: Vec<LedgerPingRow> = sqlx::query_as(&format!(
            "SELECT {LEDGER_PING_COLUMNS} FROM pings p \
             WHERE p.id > (SELECT through FROM ping_rounds) \
             AND p.check_id IN (SELECT value FROM json_each($1)) ORDER BY p.id"
        ))
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        let mut by_check: BTreeMap<i64, BTreeMap<i64, crate::domain::ledger::LedgerPing>> =
            BTreeMap::new();
        for row in tail {
            let (check, p) = row.into_ping();
            if after.get(&check).is_some_and(|a| p.n > *a) {
                by_check.entry(check).or_default().insert(p.n, p);
            }
        }
        for (check, after_n, upto) in wants {
            let covered = by_check
                .get(check)
                .and_then(|m| m.keys().next())
                .is_some_and(|first| *first == after_n + 1);
            if covered || after_n >= upto {
                continue;
            }
            let rows: Vec<LedgerPingRow> = sqlx::query_as(&format!(
                "SELECT {LEDGER_PING_COLUMNS} FROM ping_index i JOIN pings p ON p.id = i.id \
                 WHERE i.check_id = $1 AND p.n > $2 ORDER BY p.n"
            ))
            .bind(check)
            .bind(after_n)
            .fetch_all(&mut *tx)
            .await?;
            let m = by_check.entry(*check).or_default();
            for row in rows {
                let (_, p) = row.into_ping();
                m.entry(p.n).or_insert(p);
            }
        }
        tx.commit().await?;
        Ok(by_check
            .into_iter()
            .flat_map(|(c, m)| m.into_values().map(move |p| (c, p)))
            .collect())
    }
}
