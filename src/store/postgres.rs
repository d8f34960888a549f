//! The PostgreSQL store, for several replicas sharing one database.
//!
//! Any replica may write pings for any check, so the ping writer keeps no
//! summaries in memory: each batch locks the summaries it touches (in id order,
//! so concurrent batches cannot deadlock), applies its pings and writes them
//! back with array-bound statements, all in one transaction.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use uuid::Uuid;

use super::{
    bind_check_values, check_ref, insert_check_sql, CheckRef, CheckRow, CheckSource, CheckValues,
    EvalCheck, EvalRow, EventRecord, FlipRecord, Folded, InboxRow, IncidentRecord, PingRow, RunRow,
    Store, StoreError, Touched, Transition, TransitionRows, WriterCheck, WriterRow, CHECK_COLUMNS,
    EVAL_COLUMNS, INBOX_COLUMNS, QUIET_EVENT, WRITER_COLUMNS,
};
use crate::domain::check::Check;
use crate::domain::check::CheckSpec;
use crate::domain::fold::{
    apply_pending, apply_pending_runs, merge_runs, plan_fold, FoldPlan, Ping, PingRecord,
    RunRecord, StoredPing, OVERLAP_EVENT,
};
use crate::domain::ping::{clamp_items, PingKind, RunChange, Summary, UnixMs};

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

/// The checks this replica's folds wrote (flags, thresholds, summaries), so a
/// fold need not read them back; on the spread load that read was a fifth of
/// the fold's time in PostgreSQL.
///
/// Valid while nothing else changed those rows: every fold bumps `fold_epoch`
/// once and leaves a token of its own there, and every other statement that
/// updates or deletes rows of `checks` or `check_state` bumps it too (a
/// trigger, whichever replica or version of overdue runs it; see
/// migrations/postgres/0010_fold_epoch.sql). A fold that finds the counter
/// and the token as this replica's last fold left them uses the copy;
/// otherwise it starts again from the database.
#[derive(Default)]
struct FoldCache {
    /// The `fold_epoch` the copy is valid for; `None` while a fold is under way
    /// (one that fails leaves it so).
    epoch: Option<Epoch>,
    checks: HashMap<i64, Locked>,
}

/// A value of `fold_epoch`: its counter and the token of the fold that
/// wrote it last.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Epoch {
    n: i64,
    token: Option<String>,
}

/// Checks kept in [`FoldCache`] at most (a few hundred bytes each); past this
/// it starts again empty, and the next fold reads its checks.
const FOLD_CACHE_MAX: usize = 200_000;

/// Connections that append pings, each used by one batch at a time and
/// kept between batches.
///
/// A pool connection costs two extra round trips per statement: sqlx tests it
/// with a `Sync` before handing it out and again when it comes back. At
/// thousands of batches a second those wake-ups of the server cost as much as
/// the inserts (BENCHMARKS.md). Here a connection is tested only after it sat
/// idle for [`APPEND_IDLE_CHECK`] (the server may have restarted meanwhile);
/// one that fails is dropped, and the next batch opens a new one.
struct AppendConnections {
    options: sqlx::postgres::PgConnectOptions,
    idle: std::sync::Mutex<Vec<(sqlx::PgConnection, std::time::Instant)>>,
}

/// How long an append connection may sit unused before it is tested again.
const APPEND_IDLE_CHECK: Duration = Duration::from_millis(250);
/// How long opening an append connection may take (as the pool's acquire).
const APPEND_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl AppendConnections {
    fn new(options: sqlx::postgres::PgConnectOptions) -> Self {
        AppendConnections {
            options,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    async fn take(&self) -> Result<sqlx::PgConnection, StoreError> {
        use sqlx::Connection as _;
        loop {
            let kept = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some((mut conn, since)) = kept else { break };
            if since.elapsed() < APPEND_IDLE_CHECK || conn.ping().await.is_ok() {
                return Ok(conn);
            }
            // Dead (the server restarted, or ended the session): drop it.
        }
        match tokio::time::timeout(
            APPEND_CONNECT_TIMEOUT,
            sqlx::PgConnection::connect_with(&self.options),
        )
        .await
        {
            Ok(conn) => Ok(conn?),
            Err(_) => Err(anyhow::anyhow!(
                "cannot connect to PostgreSQL within {APPEND_CONNECT_TIMEOUT:?}"
            )
            .into()),
        }
    }

    /// Keeps a connection whose last statement succeeded.
    fn keep(&self, conn: sqlx::PgConnection) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((conn, std::time::Instant::now()));
    }
}

type Locked = WriterCheck;

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

    /// Takes the cached copies of these checks for a fold that found
    /// `fold_epoch` at `found`, and says which must be read: all of them
    /// unless the cache is valid for `found`. Until the fold hands its checks
    /// back ([`Self::keep_checks`]) the cache is marked invalid.
    fn cached_checks(&self, ids: &[i64], found: &Epoch) -> (HashMap<i64, Locked>, Vec<i64>) {
        let mut cache = self.fold_cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.epoch.as_ref() != Some(found) {
            // A new map, not `clear`: one that grew on a peak gives its memory back.
            cache.checks = HashMap::new();
        }
        cache.epoch = None;
        let mut found = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match cache.checks.remove(id) {
                Some(check) => {
                    found.insert(*id, check);
                }
                None => missing.push(*id),
            }
        }
        (found, missing)
    }

    /// Keeps the checks a committed fold wrote, as it wrote them, valid for
    /// the `fold_epoch` it left.
    fn keep_checks(&self, checks: HashMap<i64, Locked>, epoch: Epoch) {
        let mut cache = self.fold_cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.checks.len() + checks.len() > FOLD_CACHE_MAX {
            cache.checks = HashMap::new();
        }
        cache.checks.extend(checks);
        cache.epoch = Some(epoch);
    }

    /// A read-only transaction that reads one snapshot throughout.
    async fn read_snapshot(&self) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    async fn check_by_id(&self, id: i64) -> Result<Check, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id = $1"
        );
        let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&self.pool).await?;
        Ok(row.into_check()?)
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
        if batch.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_fenced().await?;
        // Key-share locks on the checks first, in id order. Without them a
        // delete of one of these checks could take the check's row between
        // this transaction's status upsert (which locks the status row the
        // delete cascades to) and its flip insert (whose foreign key check
        // waits for the check's row): a deadlock. With them the delete waits
        // for this transaction, or this one finds the check already gone and
        // drops its changes.
        let ids: Vec<i64> = batch.iter().map(|t| t.check_id).collect();
        let live: HashSet<i64> = sqlx::query_scalar(
            "SELECT id FROM checks WHERE id = ANY($1) ORDER BY id FOR KEY SHARE",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let rows = TransitionRows::new(batch, &live);
        if rows.status.is_empty() {
            return Ok(());
        }
        let (ids, statuses, reasons, since, quiet): (Vec<_>, Vec<_>, Vec<_>, Vec<_>, Vec<_>) =
            unzip5(rows.status.iter().copied());
        sqlx::query(
            "INSERT INTO check_status (check_id, status, reason, since, quiet) \
             SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::bool[]) \
             ON CONFLICT (check_id) DO UPDATE SET status = excluded.status, \
             reason = excluded.reason, since = excluded.since, quiet = excluded.quiet",
        )
        .bind(&ids)
        .bind(&statuses)
        .bind(&reasons)
        .bind(&since)
        .bind(&quiet)
        .execute(&mut *tx)
        .await?;
        if !rows.flips.is_empty() {
            let mut c = (
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
            );
            for (id, at, old, new, r, rec) in &rows.flips {
                c.0.push(*id);
                c.1.push(*at);
                c.2.push(*old);
                c.3.push(*new);
                c.4.push(*r);
                c.5.push(*rec);
            }
            sqlx::query(
                "INSERT INTO flips (check_id, at, old_status, new_status, reason, recorded_at) \
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[], \
                 $5::text[], $6::bigint[])",
            )
            .bind(&c.0)
            .bind(&c.1)
            .bind(&c.2)
            .bind(&c.3)
            .bind(&c.4)
            .bind(&c.5)
            .execute(&mut *tx)
            .await?;
        }
        if !rows.opened.is_empty() {
            let mut c = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (id, at, st, r) in &rows.opened {
                c.0.push(*id);
                c.1.push(*at);
                c.2.push(*st);
                c.3.push(*r);
            }
            sqlx::query(
                "INSERT INTO incidents (check_id, opened_at, status, reason) \
                 SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[]) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(&c.0)
            .bind(&c.1)
            .bind(&c.2)
            .bind(&c.3)
            .execute(&mut *tx)
            .await?;
        }
        if !rows.resolved.is_empty() {
            let (ids, at): (Vec<i64>, Vec<i64>) = rows.resolved.iter().copied().unzip();
            sqlx::query(
                "UPDATE incidents i SET resolved_at = v.at \
                 FROM UNNEST($1::bigint[], $2::bigint[]) AS v(check_id, at) \
                 WHERE i.check_id = v.check_id AND i.resolved_at IS NULL",
            )
            .bind(&ids)
            .bind(&at)
            .execute(&mut *tx)
            .await?;
        }
        if !rows.events.is_empty() {
            let mut c = (Vec::new(), Vec::new(), Vec::new());
            for (id, at, d) in &rows.events {
                c.0.push(*id);
                c.1.push(*at);
                c.2.push(*d);
            }
            sqlx::query(
                "INSERT INTO check_events (check_id, at, kind, detail) \
                 SELECT v.check_id, v.at, $4, v.detail \
                 FROM UNNEST($1::bigint[], $2::bigint[], $3::text[]) AS v(check_id, at, detail)",
            )
            .bind(&c.0)
            .bind(&c.1)
            .bind(&c.2)
            .bind(QUIET_EVENT)
            .execute(&mut *tx)
            .await?;
        }
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
        if pings.is_empty() {
            return Ok(());
        }
        let mut c = PingColumns::default();
        for p in pings {
            c.push(p);
        }
        // One statement: committed together or not at all.
        let mut conn = self.appenders.take().await?;
        sqlx::query(
            "INSERT INTO ping_inbox (check_id, at, kind, exit_status, items, rid, method, \
             remote_addr, user_agent, scheme, body) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], \
             $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
             $11::bytea[])",
        )
        .bind(&c.check_id)
        .bind(&c.at)
        .bind(&c.kind)
        .bind(&c.exit_status)
        .bind(&c.items)
        .bind(&c.rid)
        .bind(&c.method)
        .bind(&c.remote_addr)
        .bind(&c.user_agent)
        .bind(&c.scheme)
        .bind(&c.body)
        .execute(&mut conn)
        .await?;
        // Only a connection that just succeeded is kept; on an error `?`
        // above dropped (closed) it.
        self.appenders.keep(conn);
        Ok(())
    }

    async fn fold(&self, limit: usize) -> Result<Folded, StoreError> {
        let _one_at_a_time = self.folding.lock().await;
        let mut tx = self.pool.begin().await?;
        // One folder at a time across replicas, so pings of a check are
        // applied in order; the others skip this round. `overdue.folding`
        // keeps the fold's own writes from bumping `fold_epoch` (it bumps it
        // once, below).
        let (got, _): (bool, String) = sqlx::query_as(
            "SELECT pg_try_advisory_xact_lock($1), set_config('overdue.folding', 'on', true)",
        )
        .bind(FOLD_LOCK)
        .fetch_one(&mut *tx)
        .await?;
        if !got {
            return Ok(Folded::default());
        }
        // Only what folding needs: the rest of each row (body, address, user
        // agent) goes from the inbox to the log inside the server, below.
        let rows: Vec<InboxRow> = sqlx::query_as(
            "SELECT id, check_id, at, kind, exit_status, items, rid, method, \
             NULL::text AS remote_addr, NULL::text AS user_agent, '' AS scheme, \
             NULL::bytea AS body FROM ping_inbox ORDER BY id LIMIT $1",
        )
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            return Ok(Folded::default());
        }
        let more = rows.len() >= limit;
        let taken: Vec<i64> = rows.iter().map(|r| r.id).collect();
        // In id order, as read.
        let pings: Vec<StoredPing> = rows.into_iter().map(InboxRow::into_ping).collect();

        let mut ids: Vec<i64> = pings.iter().map(|p| p.ping.check_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let token = Uuid::new_v4().to_string();
        let (found_n, found_token): (i64, Option<String>) = sqlx::query_as(
            "WITH old AS (SELECT n, token FROM fold_epoch WHERE id = 1 FOR UPDATE) \
             UPDATE fold_epoch f SET n = old.n + 1, token = $1 FROM old WHERE f.id = 1 \
             RETURNING old.n, old.token",
        )
        .bind(&token)
        .fetch_one(&mut *tx)
        .await?;
        let found = Epoch {
            n: found_n,
            token: found_token,
        };
        let epoch = Epoch {
            n: found_n + 1,
            token: Some(token),
        };
        let (mut locked, missing) = self.cached_checks(&ids, &found);
        if !missing.is_empty() {
            // No row locks: everything else that changes these rows holds the
            // fold lock too (see [`lock_folds`]), and locking ~1,000 rows per
            // fold wrote each of them once more.
            let sql = format!(
                "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
                 WHERE c.id = ANY($1)"
            );
            let rows: Vec<WriterRow> = sqlx::query_as(&sql)
                .bind(&missing)
                .fetch_all(&mut *tx)
                .await?;
            for row in rows {
                let (id, check) = row.into_parts()?;
                locked.insert(id, check);
            }
        }

        let plan = fold_rows(&mut tx, &pings, &taken, &mut locked).await?;
        tx.commit().await?;
        let touched = plan
            .touched
            .iter()
            .filter_map(|id| {
                locked.get(id).map(|c| Touched {
                    check_id: *id,
                    summary: c.summary.clone(),
                    paused: c.paused,
                })
            })
            .collect();
        self.keep_checks(locked, epoch);
        Ok(Folded {
            pings: pings.len(),
            touched,
            more,
            writing: false,
        })
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

/// Folds inbox rows (in id order) into the checks in `locked` (updated in
/// place) and writes the result in `tx`: the rows in `taken` leave the
/// inbox, the folded ones (not those of deleted checks) enter the log with
/// what the fold made of them, and the summaries, runs, resumed checks and
/// overlap events are written. The fold's rules are [`plan_fold`]'s.
async fn fold_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    pings: &[StoredPing],
    taken: &[i64],
    locked: &mut HashMap<i64, Locked>,
) -> Result<FoldPlan, StoreError> {
    let (Some(&first_taken), Some(&last_taken)) = (taken.first(), taken.last()) else {
        return Ok(FoldPlan::default());
    };
    let starts = pings
        .iter()
        .filter(|p| p.ping.kind == PingKind::Start)
        .count();
    let mut run_ids: Vec<i64> = if starts > 0 {
        sqlx::query_scalar(
            "SELECT nextval(pg_get_serial_sequence('runs', 'id')) FROM generate_series(1, $1)",
        )
        .bind(starts as i64)
        .fetch_all(&mut **tx)
        .await?
    } else {
        Vec::new()
    };
    run_ids.reverse();
    let plan = plan_fold(pings, locked, &mut || run_ids.pop().unwrap_or(-1));

    // The taken rows leave the inbox; the folded ones (not those of
    // deleted checks) enter the log with what the fold made of them.
    let (mut logged, mut ns, mut kinds, mut durations) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for f in &plan.pings {
        logged.push(f.id);
        ns.push(f.n);
        kinds.push(f.kind.as_str());
        durations.push(f.duration_ms);
    }
    sqlx::query(
        "WITH moved AS (DELETE FROM ping_inbox i USING UNNEST($1::bigint[]) AS t(id) \
             WHERE i.id = t.id AND i.id BETWEEN $6 AND $7 RETURNING i.*) \
             INSERT INTO pings (id, n, check_id, at, kind, exit_status, items, rid, method, \
             remote_addr, user_agent, scheme, body, duration_ms) \
             SELECT m.id, f.n, m.check_id, m.at, f.kind, m.exit_status, m.items, m.rid, \
             m.method, m.remote_addr, m.user_agent, m.scheme, m.body, f.duration_ms \
             FROM moved m JOIN UNNEST($2::bigint[], $3::bigint[], $4::text[], $5::bigint[]) \
             AS f(id, n, kind, duration_ms) ON f.id = m.id \
             ORDER BY m.check_id, m.id",
    )
    .bind(taken)
    .bind(&logged)
    .bind(&ns)
    .bind(&kinds)
    .bind(&durations)
    // The range lets the server find the rows through the inbox's index
    // instead of scanning the whole table, dead rows included.
    .bind(first_taken)
    .bind(last_taken)
    .execute(&mut **tx)
    .await?;
    if !plan.pings.is_empty() {
        write_summaries(tx, locked).await?;
        write_runs(tx, &plan.runs).await?;
    }
    if !plan.resumed.is_empty() {
        sqlx::query("UPDATE checks SET paused = FALSE WHERE id = ANY($1)")
            .bind(&plan.resumed)
            .execute(&mut **tx)
            .await?;
    }
    for (check_id, at, detail) in &plan.overlaps {
        sqlx::query(
            "INSERT INTO check_events (check_id, at, kind, detail) VALUES ($1, $2, $3, $4)",
        )
        .bind(check_id)
        .bind(at)
        .bind(OVERLAP_EVENT)
        .bind(detail)
        .execute(&mut **tx)
        .await?;
    }
    Ok(plan)
}

/// Folds the check's pings still in the inbox now, in `tx` (which holds the
/// fold lock), so that a change to its flags in the same transaction applies
/// only to the pings committed after it (SPEC §5: pings and writes take
/// effect in the order they were committed). The inbox is locked against
/// appends until `tx` ends: an append committing meanwhile waits, and so
/// comes after the change; the appends already under way finish first, and
/// are folded here.
async fn settle_on(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    check_id: i64,
) -> Result<(), StoreError> {
    sqlx::query("LOCK TABLE ping_inbox IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut **tx)
        .await?;
    let sql = format!("SELECT {INBOX_COLUMNS} FROM ping_inbox WHERE check_id = $1 ORDER BY id");
    let rows: Vec<InboxRow> = sqlx::query_as(&sql)
        .bind(check_id)
        .fetch_all(&mut **tx)
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let pings: Vec<StoredPing> = rows.into_iter().map(InboxRow::into_ping).collect();
    let taken: Vec<i64> = pings.iter().map(|p| p.id).collect();
    let sql = format!(
        "SELECT {WRITER_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
         WHERE c.id = $1"
    );
    let row: Option<WriterRow> = sqlx::query_as(&sql)
        .bind(check_id)
        .fetch_optional(&mut **tx)
        .await?;
    let mut locked = HashMap::new();
    if let Some(row) = row {
        let (id, check) = row.into_parts()?;
        locked.insert(id, check);
    }
    fold_rows(tx, &pings, &taken, &mut locked).await?;
    Ok(())
}

/// A check as folded so far, without its pings still in the inbox.
async fn folded_check_on(conn: &mut sqlx::PgConnection, id: i64) -> Result<Check, StoreError> {
    let sql = format!(
        "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
         WHERE c.id = $1"
    );
    let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&mut *conn).await?;
    Ok(row.into_check()?)
}

/// Pings still in the inbox, of one check or of all, oldest first.
async fn pending_on(
    conn: &mut sqlx::PgConnection,
    check_id: Option<i64>,
) -> Result<Vec<StoredPing>, StoreError> {
    let sql = format!(
        "SELECT {INBOX_COLUMNS} FROM ping_inbox WHERE $1::bigint IS NULL OR check_id = $1 \
         ORDER BY id"
    );
    let rows: Vec<InboxRow> = sqlx::query_as(&sql)
        .bind(check_id)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(InboxRow::into_ping).collect())
}

/// Advisory lock key held by the replica that folds the inbox, and by every
/// other transaction that changes what a fold reads or writes (a check's
/// flags and thresholds, its summary, its existence).
const FOLD_LOCK: i64 = 0x6f76_6572_6475_6501;

/// Waits for the fold in progress, if any, and keeps folds out until `tx`
/// ends: the fold reads checks and summaries without locking their rows.
async fn lock_folds(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FOLD_LOCK)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A batch of pings as column arrays, for one `UNNEST` insert.
#[derive(Default)]
struct PingColumns {
    check_id: Vec<i64>,
    at: Vec<i64>,
    kind: Vec<&'static str>,
    exit_status: Vec<Option<i64>>,
    items: Vec<Option<i64>>,
    rid: Vec<Option<String>>,
    method: Vec<String>,
    remote_addr: Vec<Option<String>>,
    user_agent: Vec<Option<String>>,
    scheme: Vec<&'static str>,
    body: Vec<Vec<u8>>,
}

impl PingColumns {
    fn push(&mut self, p: &Ping) {
        self.check_id.push(p.check_id);
        self.at.push(p.at);
        self.kind.push(p.kind.as_str());
        self.exit_status.push(p.exit_status.map(i64::from));
        self.items.push(p.items.map(clamp_items));
        self.rid.push(p.rid.map(|r| r.to_string()));
        self.method.push(p.method.clone());
        self.remote_addr.push(p.remote_addr.clone());
        // PostgreSQL text cannot hold NUL; header values never contain it, but be sure.
        self.user_agent
            .push(p.user_agent.as_ref().map(|s| s.replace('\0', "")));
        self.scheme.push(p.scheme);
        self.body.push(p.body.clone());
    }
}

async fn write_summaries(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    locked: &HashMap<i64, Locked>,
) -> Result<(), StoreError> {
    let mut c = SummaryColumns::default();
    for (id, l) in locked {
        c.push(*id, &l.summary)?;
    }
    sqlx::query(
        "UPDATE check_state s SET n_pings = u.n_pings, last_ping_at = u.last_ping_at, \
         last_ping_kind = u.last_ping_kind, last_success_at = u.last_success_at, \
         last_start_at = u.last_start_at, last_failure_at = u.last_failure_at, \
         last_items = u.last_items, last_items_at = u.last_items_at, \
         zero_streak_since = u.zero_streak_since, zero_streak_runs = u.zero_streak_runs, \
         consecutive_failures = u.consecutive_failures, \
         consecutive_successes = u.consecutive_successes, last_duration_ms = u.last_duration_ms, \
         open_runs = u.open_runs, overlap_count = u.overlap_count, \
         failed_since = u.failed_since, timed_out_at = u.timed_out_at \
         FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], \
         $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], $16::bigint[], \
         $17::bigint[], $18::bigint[]) \
         AS u(check_id, n_pings, last_ping_at, last_ping_kind, last_success_at, last_start_at, \
         last_failure_at, last_items, last_items_at, zero_streak_since, zero_streak_runs, \
         consecutive_failures, consecutive_successes, last_duration_ms, open_runs, overlap_count, \
         failed_since, timed_out_at) \
         WHERE s.check_id = u.check_id",
    )
    .bind(&c.check_id)
    .bind(&c.n_pings)
    .bind(&c.last_ping_at)
    .bind(&c.last_ping_kind)
    .bind(&c.last_success_at)
    .bind(&c.last_start_at)
    .bind(&c.last_failure_at)
    .bind(&c.last_items)
    .bind(&c.last_items_at)
    .bind(&c.zero_streak_since)
    .bind(&c.zero_streak_runs)
    .bind(&c.consecutive_failures)
    .bind(&c.consecutive_successes)
    .bind(&c.last_duration_ms)
    .bind(&c.open_runs)
    .bind(&c.overlap_count)
    .bind(&c.failed_since)
    .bind(&c.timed_out_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[derive(Default)]
struct SummaryColumns {
    check_id: Vec<i64>,
    n_pings: Vec<i64>,
    last_ping_at: Vec<Option<i64>>,
    last_ping_kind: Vec<Option<&'static str>>,
    last_success_at: Vec<Option<i64>>,
    last_start_at: Vec<Option<i64>>,
    last_failure_at: Vec<Option<i64>>,
    last_items: Vec<Option<i64>>,
    last_items_at: Vec<Option<i64>>,
    zero_streak_since: Vec<Option<i64>>,
    zero_streak_runs: Vec<i64>,
    consecutive_failures: Vec<i64>,
    consecutive_successes: Vec<i64>,
    last_duration_ms: Vec<Option<i64>>,
    open_runs: Vec<String>,
    overlap_count: Vec<i64>,
    failed_since: Vec<Option<i64>>,
    timed_out_at: Vec<Option<i64>>,
}

impl SummaryColumns {
    fn push(&mut self, id: i64, s: &Summary) -> Result<(), StoreError> {
        self.check_id.push(id);
        self.n_pings.push(s.n_pings);
        self.last_ping_at.push(s.last_ping_at);
        self.last_ping_kind
            .push(s.last_ping_kind.map(|k| k.as_str()));
        self.last_success_at.push(s.last_success_at);
        self.last_start_at.push(s.last_start_at);
        self.last_failure_at.push(s.last_failure_at);
        self.last_items.push(s.last_items);
        self.last_items_at.push(s.last_items_at);
        self.zero_streak_since.push(s.zero_streak_since);
        self.zero_streak_runs.push(s.zero_streak_runs);
        self.consecutive_failures.push(s.consecutive_failures);
        self.consecutive_successes.push(s.consecutive_successes);
        self.last_duration_ms.push(s.last_duration_ms);
        self.open_runs
            .push(serde_json::to_string(&s.open_runs).map_err(anyhow::Error::from)?);
        self.overlap_count.push(s.overlaps);
        self.failed_since.push(s.failed_since);
        self.timed_out_at.push(s.timed_out_at);
        Ok(())
    }
}

/// Inserts first, then updates, so a run opened and closed in one batch works.
async fn write_runs(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    runs: &[(i64, RunChange)],
) -> Result<(), StoreError> {
    let (mut ids, mut checks, mut rids, mut starts, mut overlapped) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut marked = Vec::new();
    let (mut closed, mut ended, mut outcomes, mut durations, mut reasons) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (check_id, change) in runs {
        match change {
            RunChange::Open {
                id,
                rid,
                started_at,
                overlapped: o,
            } => {
                ids.push(*id);
                checks.push(*check_id);
                rids.push(rid.map(|r| r.to_string()));
                starts.push(*started_at);
                overlapped.push(*o);
            }
            RunChange::Overlapped { id } => marked.push(*id),
            RunChange::Close {
                id,
                ended_at,
                outcome,
                duration_ms,
                reason,
            } => {
                closed.push(*id);
                ended.push(*ended_at);
                outcomes.push(outcome.as_str());
                durations.push(*duration_ms);
                reasons.push(*reason);
            }
        }
    }
    if !ids.is_empty() {
        sqlx::query(
            "INSERT INTO runs (id, check_id, rid, started_at, overlapped) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bool[])",
        )
        .bind(&ids)
        .bind(&checks)
        .bind(&rids)
        .bind(&starts)
        .bind(&overlapped)
        .execute(&mut **tx)
        .await?;
    }
    if !marked.is_empty() {
        sqlx::query("UPDATE runs SET overlapped = TRUE WHERE id = ANY($1)")
            .bind(&marked)
            .execute(&mut **tx)
            .await?;
    }
    if !closed.is_empty() {
        sqlx::query(
            "UPDATE runs r SET ended_at = u.ended_at, outcome = u.outcome, \
             duration_ms = u.duration_ms, reason = u.reason \
             FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[]) \
             AS u(id, ended_at, outcome, duration_ms, reason) WHERE r.id = u.id",
        )
        .bind(&closed)
        .bind(&ended)
        .bind(&outcomes)
        .bind(&durations)
        .bind(&reasons)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

type Columns5<A, B, C, D, E> = (Vec<A>, Vec<B>, Vec<C>, Vec<D>, Vec<E>);

fn unzip5<A, B, C, D, E>(items: impl Iterator<Item = (A, B, C, D, E)>) -> Columns5<A, B, C, D, E> {
    let mut c = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (a, b, cc, d, e) in items {
        c.0.push(a);
        c.1.push(b);
        c.2.push(cc);
        c.3.push(d);
        c.4.push(e);
    }
    c
}

/// The database's clock in Unix ms: every lease instant is on this clock.
const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

impl PgStore {
    /// A transaction for a leader-only write: it locks the lease row for
    /// share and checks that this replica still holds it, so no other
    /// replica can take it over before this transaction ends.
    pub(crate) async fn begin_fenced(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let fence = self.fence.read().map(|f| f.clone()).unwrap_or(None);
        let mut tx = self.pool.begin().await?;
        if let Some((holder, token)) = fence {
            let sql = format!(
                "SELECT token FROM leases WHERE name = $1 AND holder = $2 AND token = $3 \
                 AND expires_at > {DB_NOW_MS} FOR SHARE"
            );
            let held: Option<(i64,)> = sqlx::query_as(&sql)
                .bind(super::lease::LEADER)
                .bind(&holder)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await?;
            if held.is_none() {
                return Err(StoreError::NotLeader);
            }
        }
        Ok(tx)
    }
}

#[async_trait]
impl super::lease::LeaseStore for PgStore {
    async fn acquire_lease(
        &self,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<super::lease::Lease>, StoreError> {
        // Renew our own lease, or take one that has expired; a new holder
        // gets the next token.
        let sql = format!(
            "INSERT INTO leases (name, holder, token, expires_at) VALUES ($1, $2, 1, {DB_NOW_MS} + $3) \
             ON CONFLICT (name) DO UPDATE SET \
               token = CASE WHEN leases.holder = excluded.holder THEN leases.token ELSE leases.token + 1 END, \
               holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= {DB_NOW_MS} \
             RETURNING token, expires_at - {DB_NOW_MS}"
        );
        let got: Option<(i64, i64)> = sqlx::query_as(&sql)
            .bind(super::lease::LEADER)
            .bind(holder)
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await?;
        Ok(got.map(|(token, remaining_ms)| {
            if let Ok(mut f) = self.fence.write() {
                *f = Some((holder.to_string(), token));
            }
            super::lease::Lease {
                token,
                remaining_ms,
            }
        }))
    }

    async fn release_lease(&self, holder: &str) -> Result<(), StoreError> {
        let sql =
            format!("UPDATE leases SET expires_at = {DB_NOW_MS} WHERE name = $1 AND holder = $2");
        sqlx::query(&sql)
            .bind(super::lease::LEADER)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    fn single_process(&self) -> bool {
        false
    }

    async fn sync_changes(&self, token: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify('overdue_changes', 'sync:' || $1)")
            .bind(token)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn watch_changes(
        &self,
        on_change: Box<dyn Fn(super::lease::Change) + Send + Sync>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        use super::lease::Change;
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect_with(&self.pool).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot listen for changes; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            if let Err(e) = listener.listen("overdue_changes").await {
                tracing::warn!(error = %format!("{e:#}"), "cannot listen for changes; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
            // Whatever happened before we listened is unknown.
            on_change(Change::Unknown);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    got = listener.try_recv() => match got {
                        Ok(Some(n)) => on_change(Change::parse(n.payload())),
                        // The connection was lost; sqlx reconnects on the
                        // next receive, and notifications in between are lost.
                        Ok(None) => on_change(Change::Unknown),
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "lost the change listener; reconnecting");
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[async_trait]
impl super::retention::RetentionStore for PgStore {
    async fn prune_ping_logs(&self, ids: &[i64], keep: u32, limit: u32) -> Result<u64, StoreError> {
        // Every row of the log is folded (unfolded pings are in the inbox).
        // Rows another transaction holds (a check being deleted) are
        // skipped, not waited for: the next pass takes them.
        let done = sqlx::query(
            "DELETE FROM pings WHERE id IN (SELECT p.id FROM UNNEST($1::bigint[]) AS c(id) \
             CROSS JOIN LATERAL (SELECT id FROM pings WHERE check_id = c.id \
             ORDER BY id DESC OFFSET $2 LIMIT 1) AS k \
             CROSS JOIN LATERAL (SELECT id FROM pings WHERE check_id = c.id AND id <= k.id \
             ORDER BY id LIMIT $3) AS o \
             JOIN pings p ON p.id = o.id FOR UPDATE OF p SKIP LOCKED)",
        )
        .bind(ids)
        .bind(i64::from(keep))
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn prune_history(
        &self,
        before: UnixMs,
        limit: u32,
    ) -> Result<super::retention::HistoryStep, StoreError> {
        super::retention::prune_history_on!(&self.pool, " FOR UPDATE SKIP LOCKED", before, limit)
    }
}

super::notify::impl_notify_store!(PgStore);
super::metrics::impl_metrics_store!(PgStore);
super::keys::impl_key_store!(PgStore);
