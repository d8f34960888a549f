//! What SQLite does its own way for the code both backends share: reads see
//! one WAL snapshot and apply the log's tail that no round has written yet;
//! a change to a check is made under the writer's lock, after its pings are
//! written; heartbeats take the write lock up front.

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnection;

use super::SqliteStore;
use crate::domain::check::Check;
use crate::domain::fold::{apply_pending_with, StoredPing};
use crate::store::dialect::{Change, CheckChange, Dialect};
use crate::store::{CheckValues, StoreError, INBOX_COLUMNS};

#[async_trait]
impl Dialect for SqliteStore {
    type Db = sqlx::Sqlite;

    /// The ones the ping index leads to, up to the check's written summary.
    const LOGGED_PINGS: &'static str =
        "SELECT p.id, p.n, p.at, p.kind, p.exit_status, p.items, p.rid, p.method, \
         p.remote_addr, p.user_agent, p.scheme, p.body, p.duration_ms, p.reason, p.slot \
         FROM ping_index i JOIN pings p ON p.id = i.id WHERE i.check_id = ?1 AND p.n < ?2 \
         AND i.id <= (SELECT folded_through FROM check_state WHERE check_id = ?1) \
         ORDER BY i.id DESC LIMIT ?3";

    const JSON_TEXTS: &'static str = "SELECT value FROM json_each($1)";

    /// One process per file: its own heartbeats come in order.
    const BEAT: &'static str = "INSERT INTO replicas (id, started_at, last_beat_at) \
         VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET last_beat_at = excluded.last_beat_at";

    /// One JSON value per page, from SQLite's own functions;
    /// `usual_items` as 17 digits of text, since its JSON writes 15.
    async fn eval_page_on(
        conn: &mut SqliteConnection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<crate::store::eval_rows::PageRow>, StoreError> {
        use crate::store::eval_rows::{page_sql, parse_page};
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            page_sql(
                "json_array",
                "group_concat",
                "CASE WHEN s.usual_items IS NULL THEN NULL ELSE printf('%!.17g', s.usual_items) END",
                "",
            )
        });
        let (page, _last): (Option<String>, Option<i64>) = sqlx::query_as(&SQL)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_one(&mut *conn)
            .await?;
        Ok(parse_page(page.as_deref())?)
    }

    /// A read transaction: in WAL mode it reads one snapshot throughout.
    async fn read_snapshot(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// The log's tail past the last round and each check's written summary.
    async fn pending_between(
        conn: &mut SqliteConnection,
        after: i64,
        through: i64,
    ) -> Result<Vec<StoredPing>, StoreError> {
        pending_between(conn, after, through).await
    }

    /// With the pings the writer appended and a round has yet to write.
    async fn check_by_id(&self, id: i64) -> Result<Check, StoreError> {
        let mut tx = self.read_snapshot().await?;
        let mut check = Self::folded_check_on(&mut *tx, id).await?;
        let pending = Self::pending_on(&mut tx, Some(id)).await?;
        let mut history = Self::history_on(&mut tx, &pending).await?;
        tx.commit().await?;
        apply_pending_with(&mut check, &pending, history.remove(&id));
        Ok(check)
    }

    async fn change_check(&self, change: CheckChange<'_>) -> Result<Check, StoreError> {
        let check_id = change.check_id;
        let now = change.now;
        let what = match change.what {
            Change::Paused(paused) => Owned::Paused(paused),
            Change::Definition(v) => Owned::Definition(Box::new(v.clone())),
        };
        let writer = self.writer.clone();
        let pool = self.pool.clone();
        // In a task of its own, which the request cannot cancel: settling
        // writes chunks on the writer's connection in more than one call, and
        // a request dropped between them (a client that hangs up) would leave
        // a transaction open there, into which the next acknowledged pings
        // would go and be rolled back (PERF-NOTES.md: the writer's work must
        // be owned by a task the client cannot cancel).
        let task = tokio::spawn(async move {
            // Under the writer's lock, so the summary cache and the table
            // agree (the writer caches flags and thresholds); the pings
            // stored before it are written first (see `Writer::settle`) and
            // keep what they were recorded as.
            let mut w = writer.lock_owned().await;
            w.settle(check_id).await?;
            let what = match &what {
                Owned::Paused(paused) => Change::Paused(*paused),
                Owned::Definition(v) => Change::Definition(v),
            };
            let change = CheckChange {
                check_id,
                now,
                what,
            };
            if !Self::write_change(&pool, &change).await? {
                return Err(StoreError::NotFound);
            }
            match change.what {
                Change::Paused(paused) => {
                    if let Some(c) = w.checks.get_mut(&check_id) {
                        c.paused = paused;
                    }
                }
                // The cached summary may be ahead of the table (folded, not
                // yet written): keep it, and take the new flags and
                // thresholds.
                Change::Definition(_) => w.refresh_flags(check_id).await?,
            }
            // Still holding the writer: no ping is stored in between.
            let mut tx = pool.begin().await?;
            let mut check = Self::folded_check_on(&mut *tx, check_id).await?;
            let pending = Self::pending_on(&mut tx, Some(check_id)).await?;
            let mut history = Self::history_on(&mut tx, &pending).await?;
            tx.commit().await?;
            apply_pending_with(&mut check, &pending, history.remove(&check_id));
            Ok(check)
        });
        task.await
            .map_err(|e| StoreError::Other(anyhow::anyhow!("a change to a check failed: {e}")))?
    }

    /// IMMEDIATE: this transaction reads, then writes. A deferred one would
    /// fail at once with "database is locked" when upgrading while another
    /// connection writes, instead of waiting for the busy timeout.
    async fn begin_beats(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// IMMEDIATE, as [`Self::begin_beats`]; one process per file, so no
    /// other replica to keep quiet.
    async fn begin_quiet_check_updates(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// A change to a check that a task owns.
enum Owned {
    Paused(bool),
    Definition(Box<CheckValues>),
}

/// Pings of the checks with `after < id <= through` that their written
/// summaries do not hold yet, oldest first: the log's tail since the last
/// complete round, past each check's `folded_through` (a round that is half
/// written has written some checks' summaries already).
pub(super) async fn pending_between(
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
    SqliteStore::pending_rows(conn, &sql, after, through).await
}
