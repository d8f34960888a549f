//! A batch of status changes: a few statements per table, each writing up
//! to [`CHUNK`] rows given as bound parameters.
//!
//! A full chunk's statement is the same every time, so sqlx prepares it once
//! per connection and keeps it. With the rows as literals in the text, a
//! start-up of 1,000,000 checks spent more of SQLite's time parsing (and
//! freeing) its 500 batches' statements than writing them; and reading which
//! checks are live before each batch cost more than the writes (sqlx hands
//! each row over between threads): a batch is written as it is, and the live
//! checks are read only when a foreign key says one is gone.

use std::collections::HashSet;

use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Sqlite, SqliteConnection};

use crate::store::{StoreError, TransitionRows, QUIET_EVENT};

/// Rows per statement (the evaluator's batch): at most 12,000 parameters,
/// below SQLite's 32,766.
const CHUNK: usize = 2_000;

/// Which of the checks listed (a JSON array of ids) exist.
const LIVE: &str = "SELECT checks.id FROM json_each(?1) AS j JOIN checks ON checks.id = j.value";

/// The checks of `ids` that exist.
pub(super) async fn live(
    conn: &mut SqliteConnection,
    ids: &HashSet<i64>,
) -> Result<HashSet<i64>, StoreError> {
    let ids = serde_json::to_string(ids).map_err(anyhow::Error::from)?;
    let live: Vec<i64> = sqlx::query_scalar(LIVE)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    Ok(live.into_iter().collect())
}

/// True when `e` is a foreign key that refused a row (its check is gone).
pub(super) fn check_gone(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::ForeignKeyViolation)
}

type Q<'q> = Query<'q, Sqlite, SqliteArguments<'q>>;

/// Writes `rows`, in the caller's transaction.
pub(super) async fn write(
    conn: &mut SqliteConnection,
    rows: &TransitionRows,
) -> Result<(), sqlx::Error> {
    chunked(
        conn,
        "INSERT INTO check_status (check_id, status, reason, since, quiet) VALUES ",
        5,
        " ON CONFLICT (check_id) DO UPDATE SET status = excluded.status, \
         reason = excluded.reason, since = excluded.since, quiet = excluded.quiet",
        &rows.status,
        |q, (id, st, r, since, quiet)| {
            q.bind(id)
                .bind(st)
                .bind(r)
                .bind(since)
                .bind(i32::from(*quiet))
        },
    )
    .await?;
    chunked(
        conn,
        "INSERT INTO flips (check_id, at, old_status, new_status, reason, recorded_at) VALUES ",
        6,
        "",
        &rows.flips,
        |q, (id, at, old, new, r, rec)| q.bind(id).bind(at).bind(old).bind(new).bind(r).bind(rec),
    )
    .await?;
    chunked(
        conn,
        "INSERT INTO incidents (check_id, opened_at, status, reason) VALUES ",
        4,
        " ON CONFLICT DO NOTHING",
        &rows.opened,
        |q, (id, at, st, r)| q.bind(id).bind(at).bind(st).bind(r),
    )
    .await?;
    chunked(
        conn,
        "UPDATE incidents SET resolved_at = v.column2 FROM (VALUES ",
        2,
        ") AS v WHERE incidents.check_id = v.column1 AND incidents.resolved_at IS NULL",
        &rows.resolved,
        |q, (id, at)| q.bind(id).bind(at),
    )
    .await?;
    chunked(
        conn,
        "INSERT INTO check_events (check_id, at, kind, detail) VALUES ",
        4,
        "",
        &rows.events,
        |q, (id, at, d)| q.bind(id).bind(at).bind(QUIET_EVENT).bind(d),
    )
    .await
}

/// Runs `head`, a VALUES list of one `(?, …)` of `width` per row, and
/// `tail`, for each chunk of `rows` in order; `bind` binds a row's values.
async fn chunked<'r, T: 'r>(
    conn: &mut SqliteConnection,
    head: &str,
    width: usize,
    tail: &str,
    rows: &'r [T],
    bind: impl for<'q> Fn(Q<'q>, &'q T) -> Q<'q>,
) -> Result<(), sqlx::Error> {
    for chunk in rows.chunks(CHUNK) {
        let sql = statement(head, width, chunk.len(), tail);
        // Only a full chunk's statement comes back: a shorter one is not
        // worth a place in the connection's statement cache.
        let mut q = sqlx::query(&sql).persistent(chunk.len() == CHUNK);
        for row in chunk {
            q = bind(q, row);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

fn statement(head: &str, width: usize, rows: usize, tail: &str) -> String {
    let one = format!("({})", vec!["?"; width].join(","));
    let mut sql = String::with_capacity(head.len() + rows * (one.len() + 1) + tail.len());
    sql.push_str(head);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&one);
    }
    sql.push_str(tail);
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_lists_one_tuple_per_row() {
        assert_eq!(
            statement(
                "INSERT INTO t (a, b) VALUES ",
                2,
                3,
                " ON CONFLICT DO NOTHING"
            ),
            "INSERT INTO t (a, b) VALUES (?,?),(?,?),(?,?) ON CONFLICT DO NOTHING"
        );
    }

    #[tokio::test]
    async fn chunks_keep_the_batch_order() {
        let mut conn = empty_db().await;
        let n = 2 * CHUNK as i64 + 3;
        let rows = TransitionRows {
            status: (1..=n)
                .rev()
                .map(|id| (id, "up", None, id, false))
                .collect(),
            flips: (1..=n)
                .rev()
                .map(|id| (id, id, "new", "up", None, id))
                .collect(),
            ..TransitionRows::default()
        };
        write(&mut conn, &rows).await.unwrap();
        let flips: Vec<(i64, i64)> = sqlx::query_as("SELECT id, check_id FROM flips ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let expected: Vec<(i64, i64)> = (1..=n).map(|i| (i, n + 1 - i)).collect();
        assert_eq!(flips, expected);
        let statuses: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM check_status WHERE since = check_id")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(statuses, n);
    }

    /// Every row of the tables a batch writes, with the SQLite type of each value.
    async fn dump(conn: &mut SqliteConnection) -> Vec<String> {
        let mut out = Vec::new();
        for (table, cols) in [
            ("check_status", "check_id, status, reason, since, quiet"),
            (
                "flips",
                "id, check_id, at, old_status, new_status, reason, recorded_at",
            ),
            (
                "incidents",
                "id, check_id, opened_at, status, reason, resolved_at",
            ),
            ("check_events", "id, check_id, at, kind, detail"),
        ] {
            let typed: Vec<String> = cols
                .split(", ")
                .map(|c| format!("quote({c}) || ':' || typeof({c})"))
                .collect();
            let sql = format!(
                "SELECT {} FROM {table} ORDER BY 1",
                typed.join(" || ' ' || ")
            );
            let rows: Vec<String> = sqlx::query_scalar(&sql)
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            out.extend(rows.into_iter().map(|r| format!("{table}: {r}")));
        }
        out
    }

    async fn empty_db() -> SqliteConnection {
        use sqlx::Connection;
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::migrate!("migrations/sqlite")
            .run(&mut conn)
            .await
            .unwrap();
        sqlx::query("PRAGMA foreign_keys = OFF")
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    }

    #[tokio::test]
    async fn rows_keep_their_order_and_sql_types() {
        let batches = [
            TransitionRows {
                status: vec![
                    (1, "up", None, 10, false),
                    (2, "down", Some("it's"), 20, true),
                    (3, "late", Some("x"), 30, false),
                ],
                flips: vec![
                    (1, 10, "new", "up", None, 11),
                    (2, 20, "up", "down", Some("it's"), 21),
                    (3, 30, "up", "late", Some("x"), 31),
                ],
                opened: vec![(2, 20, "down", Some("it's"))],
                resolved: vec![],
                events: vec![(2, 25, "entered quiet hours")],
            },
            TransitionRows {
                status: vec![(2, "up", None, 40, false), (1, "down", None, 50, true)],
                flips: vec![
                    (2, 40, "down", "up", None, 41),
                    (1, 50, "up", "down", None, 51),
                ],
                opened: vec![(1, 50, "down", None), (2, 40, "down", None)],
                resolved: vec![(2, 40)],
                events: vec![(1, 55, "entered quiet hours"), (2, 45, "left quiet hours")],
            },
        ];
        let mut conn = empty_db().await;
        for rows in &batches {
            write(&mut conn, rows).await.unwrap();
        }
        // What the same batches wrote as literal SQL (VALUES lists), before.
        let expected = [
            "check_status: 1:integer 'down':text NULL:null 50:integer 1:integer",
            "check_status: 2:integer 'up':text NULL:null 40:integer 0:integer",
            "check_status: 3:integer 'late':text 'x':text 30:integer 0:integer",
            "flips: 1:integer 1:integer 10:integer 'new':text 'up':text NULL:null 11:integer",
            "flips: 2:integer 2:integer 20:integer 'up':text 'down':text 'it''s':text 21:integer",
            "flips: 3:integer 3:integer 30:integer 'up':text 'late':text 'x':text 31:integer",
            "flips: 4:integer 2:integer 40:integer 'down':text 'up':text NULL:null 41:integer",
            "flips: 5:integer 1:integer 50:integer 'up':text 'down':text NULL:null 51:integer",
            "incidents: 1:integer 2:integer 20:integer 'down':text 'it''s':text 40:integer",
            "incidents: 2:integer 1:integer 50:integer 'down':text NULL:null NULL:null",
            "check_events: 1:integer 2:integer 25:integer 'skipped: quiet-hours':text \
             'entered quiet hours':text",
            "check_events: 2:integer 1:integer 55:integer 'skipped: quiet-hours':text \
             'entered quiet hours':text",
            "check_events: 3:integer 2:integer 45:integer 'skipped: quiet-hours':text \
             'left quiet hours':text",
        ];
        assert_eq!(dump(&mut conn).await, expected);
    }
}
