//! The embedded SQLite store (WAL).
//!
//! Only one process uses a database file, so the ping writer keeps every
//! touched check's summary in memory and writes each batch of pings, with the
//! summaries and runs it changed, as ONE statement string that contains its own
//! `BEGIN IMMEDIATE … COMMIT`: sqlx's SQLite driver costs ~60–100 µs per call,
//! far more than SQLite itself (see PERF-NOTES.md).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqlitePool};
use tokio::sync::Mutex;
use uuid::Uuid;

use super::{
    apply_pending, apply_pending_runs, bind_check_values, check_ref, insert_check_sql, merge_runs,
    plan_fold, Check, CheckRef, CheckRow, CheckSource, CheckValues, EvalCheck, EvalRow,
    EventRecord, FlipRecord, Folded, InboxPing, InboxRow, IncidentRecord, NewPing, PingRecord,
    RunRecord, Store, StoreError, Touched, Transition, TransitionRows, WriterCheck, WriterRow,
    CHECK_COLUMNS, EVAL_COLUMNS, INBOX_COLUMNS, OVERLAP_EVENT, QUIET_EVENT, WRITER_COLUMNS,
};
use crate::config;
use crate::domain::check::CheckSpec;
use crate::domain::ping::{clamp_items, RunChange, UnixMs};

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    pool: SqlitePool,
    writer: Mutex<Writer>,
}

/// What the single ping writer owns: its connection and the summaries it keeps.
struct Writer {
    conn: SqliteConnection,
    checks: HashMap<i64, Cached>,
    next_run_id: Option<i64>,
    /// The inbox's rows, kept in memory once the inbox was seen empty, so a
    /// fold need not read back what this process just wrote (no other
    /// process writes this database). `None` until then.
    queue: Option<VecDeque<InboxPing>>,
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
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .context("cannot open the SQLite database")?;
        sqlx::migrate!("migrations/sqlite")
            .run(&pool)
            .await
            .context("cannot apply SQLite migrations")?;
        let conn = SqliteConnection::connect_with(&options)
            .await
            .context("cannot open the SQLite writer connection")?;
        Ok(SqliteStore {
            pool,
            writer: Mutex::new(Writer {
                conn,
                checks: HashMap::new(),
                next_run_id: None,
                queue: None,
            }),
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

    async fn append_pings(&self, pings: &[NewPing]) -> Result<(), StoreError> {
        if pings.is_empty() {
            return Ok(());
        }
        let mut sql = String::with_capacity(160 + pings.len() * 120);
        sql.push_str(
            "INSERT INTO ping_inbox (check_id, at, kind, exit_status, items, rid, method, \
             remote_addr, user_agent, scheme, body) VALUES ",
        );
        for (i, p) in pings.iter().enumerate() {
            if i > 0 {
                sql.push(',');
            }
            let _ = write!(sql, "({},{},'{}',", p.check_id, p.at, p.kind.as_str());
            ping_facts(&mut sql, p);
            sql.push(')');
        }
        // One INSERT is its own transaction: all of the batch or none of it.
        let mut w = self.writer.lock().await;
        let done = sqlx::Executor::execute(&mut w.conn, sqlx::raw_sql(&sql))
            .await
            .map_err(|e| StoreError::Other(anyhow::Error::new(e).context("cannot append pings")))?;
        if let Some(queue) = &mut w.queue {
            // One writer and AUTOINCREMENT: the rows got consecutive ids
            // ending at the last one inserted.
            let first = done.last_insert_rowid() - pings.len() as i64 + 1;
            queue.extend(pings.iter().enumerate().map(|(i, p)| InboxPing {
                id: first + i as i64,
                ping: p.clone(),
            }));
        }
        Ok(())
    }

    async fn fold(&self, limit: usize) -> Result<Folded, StoreError> {
        self.writer.lock().await.fold(limit).await
    }

    async fn time_out_run(
        &self,
        check_id: i64,
        run_id: i64,
        at: UnixMs,
    ) -> Result<Option<Touched>, StoreError> {
        let mut w = self.writer.lock().await;
        w.load_missing(&[check_id]).await?;
        let Some(mut entry) = w.checks.get(&check_id).cloned() else {
            return Ok(None);
        };
        let Some(change) = entry.summary.time_out_run(run_id, at) else {
            return Ok(None);
        };
        let mut sql = String::from("BEGIN IMMEDIATE;\n");
        let one = HashMap::from([(check_id, entry.clone())]);
        write_summaries(&mut sql, &one)?;
        write_runs(&mut sql, &[(check_id, change)]);
        sql.push_str("COMMIT;");
        w.execute_batch(&sql).await?;
        let touched = Touched {
            check_id,
            summary: entry.summary.clone(),
            paused: entry.paused,
        };
        w.checks.insert(check_id, entry);
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
             LEFT JOIN check_status st ON st.check_id = c.id WHERE c.id = ?"
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
        // One statement string per batch (see the module comment on sqlx's
        // per-call cost); inside a sqlx transaction so a failure rolls back.
        let rows = TransitionRows::new(batch);
        let mut sql = String::with_capacity(batch.len() * 200);
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
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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

    async fn set_paused(&self, check_id: i64, paused: bool) -> Result<(), StoreError> {
        // Under the writer's lock, so the summary cache and the table agree.
        let mut w = self.writer.lock().await;
        let done = sqlx::query("UPDATE checks SET paused = ?, updated_at = ? WHERE id = ?")
            .bind(paused)
            .bind(chrono::Utc::now().timestamp_millis())
            .bind(check_id)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        if let Some(c) = w.checks.get_mut(&check_id) {
            c.paused = paused;
        }
        Ok(())
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
        let rows: Vec<super::PingRow> = sqlx::query_as(
            "SELECT id, n, at, kind, exit_status, items, rid, method, remote_addr, user_agent, \
             scheme, body, duration_ms FROM pings WHERE check_id = ? AND n < ? ORDER BY id DESC LIMIT ?",
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
    ) -> Result<(), StoreError> {
        let v = CheckValues::new(spec, CheckSource::Api)?;
        // Under the writer's lock: the writer caches flags and thresholds.
        let mut w = self.writer.lock().await;
        let sql = super::update_check_sql(|_| "?".to_string());
        let done = super::bind_update_values!(sqlx::query(&sql), v, now, check_id)
            .execute(&self.pool)
            .await?;
        w.checks.remove(&check_id);
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
    async fn delete_check(&self, check_id: i64) -> Result<(), StoreError> {
        let mut w = self.writer.lock().await;
        let done = sqlx::query("DELETE FROM checks WHERE id = ?")
            .bind(check_id)
            .execute(&self.pool)
            .await?;
        w.checks.remove(&check_id);
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }
    async fn list_runs(&self, check_id: i64, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, check_id).await?;
        let pending = pending_on(&mut tx, Some(check_id)).await?;
        let runs: Vec<RunRecord> = sqlx::query_as(
            "SELECT id, rid, started_at, ended_at, outcome, reason, duration_ms, overlapped \
             FROM runs WHERE check_id = ? ORDER BY id DESC LIMIT ?",
        )
        .bind(check_id)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let (_, changes) = apply_pending_runs(&mut check, &pending);
        Ok(merge_runs(runs, changes, limit))
    }
}

impl SqliteStore {
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

/// A check as folded so far, without its pings still in the inbox.
async fn folded_check_on(conn: &mut SqliteConnection, id: i64) -> Result<Check, StoreError> {
    let sql = format!(
        "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
         WHERE c.id = ?"
    );
    let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&mut *conn).await?;
    Ok(row.into_check()?)
}

/// Pings still in the inbox, of one check or of all, oldest first.
async fn pending_on(
    conn: &mut SqliteConnection,
    check_id: Option<i64>,
) -> Result<Vec<InboxPing>, StoreError> {
    let sql = format!(
        "SELECT {INBOX_COLUMNS} FROM ping_inbox WHERE ?1 IS NULL OR check_id = ?1 ORDER BY id"
    );
    let rows: Vec<InboxRow> = sqlx::query_as(&sql)
        .bind(check_id)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(InboxRow::into_ping).collect())
}

impl SqliteStore {}

impl Writer {
    /// Folds the oldest `limit` inbox rows; see [`Store::fold`].
    async fn fold(&mut self, limit: usize) -> Result<Folded, StoreError> {
        let (pings, more) = match &mut self.queue {
            Some(queue) => {
                let n = queue.len().min(limit);
                let taken: Vec<InboxPing> = queue.drain(..n).collect();
                (taken, !queue.is_empty())
            }
            None => {
                let sql = format!(
                    "SELECT {INBOX_COLUMNS} FROM ping_inbox ORDER BY id LIMIT {}",
                    limit + 1
                );
                let rows: Vec<InboxRow> = sqlx::query_as(&sql).fetch_all(&mut self.conn).await?;
                let more = rows.len() > limit;
                let pings = rows
                    .into_iter()
                    .take(limit)
                    .map(InboxRow::into_ping)
                    .collect();
                (pings, more)
            }
        };
        let result = self.fold_rows(&pings, more).await;
        match (&result, &mut self.queue) {
            (Err(_), Some(queue)) => {
                // Not folded: they stay first in line.
                for p in pings.into_iter().rev() {
                    queue.push_front(p);
                }
            }
            (Ok(_), None) if !more => self.queue = Some(VecDeque::new()),
            _ => {}
        }
        result
    }

    async fn fold_rows(&mut self, pings: &[InboxPing], more: bool) -> Result<Folded, StoreError> {
        let Some(last) = pings.last().map(|p| p.id) else {
            return Ok(Folded::default());
        };
        let ids: Vec<i64> = pings.iter().map(|p| p.ping.check_id).collect();
        self.load_missing(&ids).await?;
        if self.next_run_id.is_none() {
            let (max,): (i64,) = sqlx::query_as("SELECT COALESCE(MAX(id), 0) FROM runs")
                .fetch_one(&mut self.conn)
                .await?;
            self.next_run_id = Some(max + 1);
        }

        // Work on copies so that a failed commit leaves the cache as the database is.
        let mut checks: HashMap<i64, Cached> = HashMap::new();
        for id in &ids {
            if let Some(c) = self.checks.get(id) {
                checks.entry(*id).or_insert_with(|| c.clone());
            }
        }
        let mut next_run_id = self.next_run_id.unwrap_or(1);
        let mut plan = plan_fold(pings, &mut checks, &mut || {
            let id = next_run_id;
            next_run_id += 1;
            id
        });
        // Sorted by check, so the ping log's index pages are written in order.
        plan.pings.sort_by_key(|p| (p.ping.check_id, p.id));

        let mut sql = String::with_capacity(256 + plan.pings.len() * 160);
        sql.push_str("BEGIN IMMEDIATE;\n");
        if !plan.pings.is_empty() {
            sql.push_str(
                "INSERT INTO pings (id, check_id, n, at, kind, exit_status, items, rid, method, \
                 remote_addr, user_agent, scheme, body, duration_ms) VALUES ",
            );
            for (i, f) in plan.pings.iter().enumerate() {
                let p = f.ping;
                if i > 0 {
                    sql.push(',');
                }
                let _ = write!(
                    sql,
                    "({},{},{},{},'{}',",
                    f.id,
                    p.check_id,
                    f.n,
                    p.at,
                    f.kind.as_str()
                );
                ping_facts(&mut sql, p);
                let _ = write!(sql, ",{})", opt_int(f.duration_ms));
            }
            sql.push_str(";\n");
            write_summaries(&mut sql, &checks)?;
            write_runs(&mut sql, &plan.runs);
        }
        if !plan.resumed.is_empty() {
            let ids: Vec<String> = plan.resumed.iter().map(i64::to_string).collect();
            let _ = writeln!(
                sql,
                "UPDATE checks SET paused = 0 WHERE id IN ({});",
                ids.join(",")
            );
        }
        for (check_id, at, detail) in &plan.overlaps {
            let _ = writeln!(
                sql,
                "INSERT INTO check_events (check_id, at, kind, detail) VALUES ({check_id}, {at}, {}, {});",
                text(OVERLAP_EVENT),
                text(detail)
            );
        }
        let _ = writeln!(sql, "DELETE FROM ping_inbox WHERE id <= {last};");
        sql.push_str("COMMIT;");

        self.execute_batch(&sql).await?;
        self.next_run_id = Some(next_run_id);
        let touched = plan
            .touched
            .iter()
            .filter_map(|id| {
                checks.get(id).map(|c| Touched {
                    check_id: *id,
                    summary: c.summary.clone(),
                    paused: c.paused,
                })
            })
            .collect();
        let folded = pings.len();
        self.checks.extend(checks);
        Ok(Folded {
            pings: folded,
            touched,
            more,
        })
    }

    /// Runs a statement string that holds its own `BEGIN … COMMIT`.
    async fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError> {
        if let Err(e) = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql(sql)).await {
            // Make sure a failure half-way leaves no transaction open on this connection.
            let _ = sqlx::Executor::execute(&mut self.conn, sqlx::raw_sql("ROLLBACK")).await;
            return Err(StoreError::Other(
                anyhow::Error::new(e).context("cannot write to SQLite"),
            ));
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
        let rows: Vec<WriterRow> = sqlx::query_as(&sql).fetch_all(&mut self.conn).await?;
        for row in rows {
            let (id, check) = row.into_parts()?;
            self.checks.insert(id, check);
        }
        Ok(())
    }
}

fn write_summaries(sql: &mut String, touched: &HashMap<i64, Cached>) -> Result<(), StoreError> {
    sql.push_str(
        "INSERT INTO check_state (check_id, n_pings, last_ping_at, last_ping_kind, \
         last_success_at, last_start_at, last_failure_at, last_items, last_items_at, \
         zero_streak_since, zero_streak_runs, consecutive_failures, consecutive_successes, \
         last_duration_ms, open_runs, overlap_count, failed_since, timed_out_at) VALUES ",
    );
    for (i, (id, c)) in touched.iter().enumerate() {
        let s = &c.summary;
        if i > 0 {
            sql.push(',');
        }
        let open_runs = serde_json::to_string(&s.open_runs).map_err(anyhow::Error::from)?;
        let _ = write!(
            sql,
            "({id},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{})",
            s.n_pings,
            opt_int(s.last_ping_at),
            opt_text(s.last_ping_kind.map(|k| k.as_str())),
            opt_int(s.last_success_at),
            opt_int(s.last_start_at),
            opt_int(s.last_failure_at),
            opt_int(s.last_items),
            opt_int(s.last_items_at),
            opt_int(s.zero_streak_since),
            s.zero_streak_runs,
            s.consecutive_failures,
            s.consecutive_successes,
            opt_int(s.last_duration_ms),
            text(&open_runs),
            s.overlaps,
            opt_int(s.failed_since),
            opt_int(s.timed_out_at),
        );
    }
    sql.push_str(
        " ON CONFLICT (check_id) DO UPDATE SET n_pings = excluded.n_pings, \
         last_ping_at = excluded.last_ping_at, last_ping_kind = excluded.last_ping_kind, \
         last_success_at = excluded.last_success_at, last_start_at = excluded.last_start_at, \
         last_failure_at = excluded.last_failure_at, last_items = excluded.last_items, \
         last_items_at = excluded.last_items_at, zero_streak_since = excluded.zero_streak_since, \
         zero_streak_runs = excluded.zero_streak_runs, \
         consecutive_failures = excluded.consecutive_failures, \
         consecutive_successes = excluded.consecutive_successes, \
         last_duration_ms = excluded.last_duration_ms, open_runs = excluded.open_runs, \
         overlap_count = excluded.overlap_count, failed_since = excluded.failed_since, \
         timed_out_at = excluded.timed_out_at;\n",
    );
    Ok(())
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

/// The columns `exit_status, items, rid, method, remote_addr, user_agent,
/// scheme, body` of a ping, as SQL literals; the inbox and the log share them.
fn ping_facts(sql: &mut String, p: &NewPing) {
    let _ = write!(
        sql,
        "{},{},{},{},{},{},'{}',{}",
        opt_int(p.exit_status.map(i64::from)),
        opt_int(p.items.map(clamp_items)),
        opt_text(p.rid.map(|r| r.to_string()).as_deref()),
        text(&p.method),
        opt_text(p.remote_addr.as_deref()),
        opt_text(p.user_agent.as_deref()),
        p.scheme,
        blob(&p.body),
    );
}

fn opt_int(v: Option<i64>) -> String {
    v.map_or_else(|| "NULL".to_string(), |v| v.to_string())
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

fn blob(b: &[u8]) -> String {
    format!("X'{}'", hex::encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

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

super::notify::impl_notify_store!(SqliteStore);
super::metrics::impl_metrics_store!(SqliteStore);
super::keys::impl_key_store!(SqliteStore);
