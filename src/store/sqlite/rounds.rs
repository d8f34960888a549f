//! What a round writes: once a second, what the writer folded (summaries,
//! runs, events, the per-check ping index) is written out sorted by check, in
//! chunks of one short transaction each, on prepared statements. The writer
//! (writer.rs) cuts the chunks and sends them.

use std::fmt::Write as _;
use std::time::Duration;

use super::text::{opt_text, text};
use crate::domain::fold::OVERLAP_EVENT;
use crate::domain::ping::{RunChange, UnixMs};
use crate::store::{StoreError, WriterCheck};

/// How often the pings folded in memory are written out. A round writes them
/// sorted by check, so each page of the ping log's index and of the summaries
/// is written about once per round instead of once per fold (PERF-NOTES.md:
/// with pings spread over many checks, those page writes are the limit).
pub(super) const ROUND_EVERY: Duration = Duration::from_millis(1_000);
/// A round starts early once this many folded pings wait for it.
pub(super) const ROUND_MAX_PINGS: usize = 50_000;

/// Ping-index entries per chunk of a round (and at most as many summaries).
/// Each chunk is one short transaction (1–1.5 ms with pings spread over
/// 10,000 checks), so appends wait behind it only briefly.
pub(super) const CHUNK_PINGS: usize = 500;

/// A check's last write of a round: its summary as of the round's start
/// (with `folded_through`), the runs and events its pings made.
pub(super) struct Final {
    pub(super) check_id: i64,
    pub(super) state: WriterCheck,
    pub(super) runs: Vec<RunChange>,
    pub(super) overlaps: Vec<(UnixMs, String)>,
    pub(super) resumed: bool,
}

/// One transaction of a round. A check's index entries may span chunks; its
/// summary goes with the last of them, and readers use the index only up to
/// `folded_through`, so a check is never seen half-written.
#[derive(Default)]
pub(super) struct Chunk {
    /// Ping-index entries: check id, ping id.
    pub(super) pings: Vec<(i64, i64)>,
    pub(super) finals: Vec<Final>,
    /// On the round's last chunk: the new `ping_rounds.through`.
    pub(super) through: Option<i64>,
}

/// The shape of a chunk's prepared statement: its row counts padded by
/// [`chunk_rows`], whether it moves `ping_rounds.through` (a round's last
/// chunk), and whether it commits. A chunk with runs, resumed checks or
/// overlap events (rare) sends those as SQL text after it, with the COMMIT.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) struct ChunkShape {
    pub(super) index_rows: usize,
    pub(super) summary_rows: usize,
    pub(super) through: bool,
    pub(super) commit: bool,
}

/// Ping-index entries or summaries of a chunk, padded to a power of two so
/// that the writer keeps a few dozen chunk statements at most (both are at
/// most [`CHUNK_PINGS`]).
pub(super) fn chunk_rows(rows: usize) -> usize {
    if rows == 0 {
        0
    } else {
        rows.next_power_of_two()
    }
}

/// The parameters of one summary row, as [`bind_summary`] binds them.
pub(super) const SUMMARY_COLUMNS: usize = 22;

/// A chunk's statement: `BEGIN IMMEDIATE`, its ping-index entries and its
/// summaries as parameters (a row whose first value is NULL is padding and
/// is not written), `through`, and `COMMIT`. SQLite parses and plans it once
/// per connection; as SQL text, a chunk cost more to parse than to run.
pub(super) fn chunk_statement(shape: ChunkShape) -> String {
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
             folded_through, low_streak_runs, below_streak_runs, usual_items) SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL \
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
             timed_out_at = excluded.timed_out_at, folded_through = excluded.folded_through, \
             low_streak_runs = excluded.low_streak_runs, \
             below_streak_runs = excluded.below_streak_runs, usual_items = excluded.usual_items;",
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

pub(super) type SqliteQuery<'q> =
    sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

/// Binds a summary row of [`chunk_statement`], in its column order.
pub(super) fn bind_summary<'q>(
    query: SqliteQuery<'q>,
    check_id: i64,
    c: &WriterCheck,
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
        .bind(c.folded_through)
        .bind(s.low_streak_runs)
        .bind(s.below_streak_runs)
        .bind(s.usual_items))
}

/// What a chunk writes besides its index entries and summaries, as SQL text
/// to run after [`chunk_statement`] in its transaction: runs opened and
/// closed, checks a ping resumed, overlap events. Empty for most chunks.
pub(super) fn chunk_extras(chunk: &Chunk) -> String {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

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
}
