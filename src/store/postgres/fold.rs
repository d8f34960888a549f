//! Folding on PostgreSQL: one replica at a time moves the inbox into the
//! ping log and writes what the pings did to the summaries, runs and events;
//! a cache of the checks it wrote spares the next fold reading them back.

use std::collections::HashMap;

use uuid::Uuid;

use super::writes::{write_runs, write_summaries};
use super::PgStore;
use crate::domain::fold::{plan_fold, FoldPlan, StoredPing, OVERLAP_EVENT};
use crate::domain::ping::PingKind;
use crate::store::{
    history, Folded, InboxRow, StoreError, Touched, WriterCheck, WriterRow, INBOX_COLUMNS,
    WRITER_COLUMNS,
};

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
pub(super) struct FoldCache {
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

pub(super) type Locked = WriterCheck;

impl PgStore {
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

    /// [`Store::fold`](crate::store::Store::fold): up to `limit` inbox rows, if no other replica folds.
    pub(super) async fn fold_inbox(&self, limit: usize) -> Result<Folded, StoreError> {
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
             NULL::bytea AS body, NULL::text AS reason, slot FROM ping_inbox ORDER BY id LIMIT $1",
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
    let pairs = history::needed(pings, locked);
    if !pairs.is_empty() {
        let rows: Vec<history::HourRow> = sqlx::query_as(&history::select_sql(&pairs))
            .persistent(false)
            .fetch_all(&mut **tx)
            .await?;
        history::attach(&pairs, rows, locked);
    }
    let plan = plan_fold(pings, locked, &mut || run_ids.pop().unwrap_or(-1));
    if !pairs.is_empty() {
        let buckets = history::detach(locked, pings[0].id);
        if !buckets.is_empty() {
            sqlx::query(&history::upsert_sql(&buckets))
                .persistent(false)
                .execute(&mut **tx)
                .await?;
        }
    }

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
             remote_addr, user_agent, scheme, body, duration_ms, reason, slot) \
             SELECT m.id, f.n, m.check_id, m.at, f.kind, m.exit_status, m.items, m.rid, \
             m.method, m.remote_addr, m.user_agent, m.scheme, m.body, f.duration_ms, m.reason, m.slot \
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
pub(super) async fn settle_on(
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

/// Advisory lock key held by the replica that folds the inbox, and by every
/// other transaction that changes what a fold reads or writes (a check's
/// flags and thresholds, its summary, its existence).
const FOLD_LOCK: i64 = 0x6f76_6572_6475_6501;

/// Waits for the fold in progress, if any, and keeps folds out until `tx`
/// ends: the fold reads checks and summaries without locking their rows.
pub(super) async fn lock_folds(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FOLD_LOCK)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
