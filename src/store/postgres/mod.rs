//! The PostgreSQL store, for several replicas sharing one database.
//!
//! Any replica appends pings to the inbox (`ping_inbox`) in one array-bound
//! statement per batch, and keeps no summaries in memory. One replica at a
//! time folds the inbox (an advisory lock): it applies the pings to the
//! summaries, moves them to the ping log and writes the summaries, runs and
//! events back with array-bound statements, all in one transaction. Reads of
//! checks apply what is still in the inbox, in the same snapshot.

mod append; // the ping path: appending batches to the inbox on kept connections
mod dialect; // reads in a snapshot with the inbox applied; check changes under the fold lock
mod fold; // folding the inbox into the log and the summaries, and the fold cache
mod lease; // the leader lease, fenced transactions and change notifications
mod locks; // the job guard's lock seats, on the database's clock
mod retention; // trimming the ping log
mod warm; // the checks a warm follower reads again
mod writes; // status changes, summaries and runs written with UNNEST

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use self::append::AppendConnections;
use self::fold::{lock_folds, FoldCache};
use self::writes::{write_runs, write_summaries};
use super::{EvalCheck, Folded, Store, StoreError, Touched, Transition, WriterRow, WRITER_COLUMNS};
use crate::domain::fold::Ping;
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
            .acquire_timeout(Duration::from_secs(5));
        let migrator = sqlx::migrate!("migrations/postgres");
        let pool = super::open_pool(pool, options, &migrator, "PostgreSQL").await?;
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

    async fn eval_checks(&self, after: i64, limit: u32) -> Result<Vec<EvalCheck>, StoreError> {
        self.eval_page(after, limit).await
    }

    async fn eval_check(&self, id: i64) -> Result<Option<EvalCheck>, StoreError> {
        self.eval_one(id).await
    }

    async fn eval_checks_in(&self, ids: &[i64]) -> Result<Vec<EvalCheck>, StoreError> {
        self.eval_in(ids).await
    }

    async fn inbox_checks(&self) -> Result<Vec<i64>, StoreError> {
        let ids: Vec<(i64,)> = sqlx::query_as("SELECT DISTINCT check_id FROM ping_inbox")
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }

    async fn record_transitions(&self, batch: &[Transition]) -> Result<(), StoreError> {
        self.write_transitions(batch).await
    }

    async fn append_pings(&self, pings: &[Ping]) -> Result<(), StoreError> {
        self.append_batch(pings).await
    }

    async fn fold(&self, limit: usize) -> Result<Folded, StoreError> {
        self.fold_inbox(limit).await
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
}

crate::store::notify::impl_notify_store!(PgStore);
crate::store::oncall::impl_oncall_store!(PgStore);
crate::store::metrics::impl_metrics_store!(PgStore);
crate::store::keys::impl_key_store!(PgStore);
crate::store::checks::impl_check_store!(PgStore);
crate::store::replicas::impl_replica_store!(PgStore);

crate::store::ledger::impl_ledger_store!(PgStore);

impl PgStore {
    /// The ledger's pings: each wanted check's logged pings after its mark,
    /// through its index by check.
    async fn ledger_pings_on(
        &self,
        wants: &[(i64, i64, i64)],
    ) -> Result<Vec<(i64, crate::domain::ledger::LedgerPing)>, StoreError> {
        use crate::store::ledger::{LedgerPingRow, LEDGER_PING_COLUMNS};
        if wants.is_empty() {
            return Ok(Vec::new());
        }
        let checks: Vec<i64> = wants.iter().map(|w| w.0).collect();
        let after: Vec<i64> = wants.iter().map(|w| w.1).collect();
        let rows: Vec<LedgerPingRow> = sqlx::query_as(&format!(
            "SELECT {LEDGER_PING_COLUMNS} FROM UNNEST($1::bigint[], $2::bigint[]) AS t(check_id, after_n) \
             JOIN pings p ON p.check_id = t.check_id AND p.n > t.after_n ORDER BY p.check_id, p.n"
        ))
        .bind(&checks)
        .bind(&after)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(LedgerPingRow::into_ping).collect())
    }
}
