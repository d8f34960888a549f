//! Writes of many rows in one statement each (`UNNEST` over arrays): a
//! batch of status changes, the summaries and the runs a fold wrote.

use std::collections::{HashMap, HashSet};

use super::PgStore;
use crate::domain::ping::{RunChange, Summary};
use crate::store::WriterCheck as Locked;
use crate::store::{StoreError, Transition, TransitionRows, QUIET_EVENT};

impl PgStore {
    /// [`Store::record_transitions`](crate::store::Store::record_transitions),
    /// in one fenced transaction.
    pub(super) async fn write_transitions(&self, batch: &[Transition]) -> Result<(), StoreError> {
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
}

pub(super) async fn write_summaries(
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
         low_streak_runs = u.low_streak_runs, consecutive_failures = u.consecutive_failures, \
         consecutive_successes = u.consecutive_successes, last_duration_ms = u.last_duration_ms, \
         open_runs = u.open_runs, overlap_count = u.overlap_count, \
         failed_since = u.failed_since, timed_out_at = u.timed_out_at, \
         below_streak_runs = u.below_streak_runs, usual_items = u.usual_items \
         FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], \
         $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], $16::bigint[], \
         $17::bigint[], $18::bigint[], $19::bigint[], $20::bigint[], $21::float8[]) \
         AS u(check_id, n_pings, last_ping_at, last_ping_kind, last_success_at, last_start_at, \
         last_failure_at, last_items, last_items_at, zero_streak_since, zero_streak_runs, \
         consecutive_failures, consecutive_successes, last_duration_ms, open_runs, overlap_count, \
         failed_since, timed_out_at, low_streak_runs, below_streak_runs, usual_items) \
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
    .bind(&c.low_streak_runs)
    .bind(&c.below_streak_runs)
    .bind(&c.usual_items)
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
    low_streak_runs: Vec<i64>,
    below_streak_runs: Vec<i64>,
    usual_items: Vec<Option<f64>>,
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
        self.low_streak_runs.push(s.low_streak_runs);
        self.below_streak_runs.push(s.below_streak_runs);
        self.usual_items.push(s.usual_items);
        Ok(())
    }
}

/// Inserts first, then updates, so a run opened and closed in one batch works.
pub(super) async fn write_runs(
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
