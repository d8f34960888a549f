//! What PostgreSQL does its own way for the code both backends share: reads
//! see one REPEATABLE READ snapshot and apply the inbox; a change to a check
//! holds the fold lock and folds the check's pings first; heartbeats lock
//! their table.

use async_trait::async_trait;

use super::fold::{lock_folds, settle_on};
use super::PgStore;
use crate::domain::check::Check;
use crate::domain::fold::StoredPing;
use crate::store::dialect::{CheckChange, Dialect};
use crate::store::{StoreError, INBOX_COLUMNS};

#[async_trait]
impl Dialect for PgStore {
    type Db = sqlx::Postgres;

    /// The folded log: every row of it is in the summary.
    const LOGGED_PINGS: &'static str =
        "SELECT id, n, at, kind, exit_status, items, rid, method, remote_addr, user_agent, \
         scheme, body, duration_ms, reason, slot FROM pings WHERE check_id = $1 AND n < $2 ORDER BY id DESC LIMIT $3";

    const JSON_TEXTS: &'static str = "SELECT json_array_elements_text($1::json)";

    /// Never moves a replica's last beat back (another process may have
    /// recorded a later one).
    const BEAT: &'static str = "INSERT INTO replicas (id, started_at, last_beat_at) \
         VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET last_beat_at = GREATEST(replicas.last_beat_at, excluded.last_beat_at)";

    /// Rows: cheap to read here, and JSON is not cheap to build.
    async fn eval_page_on(
        conn: &mut sqlx::PgConnection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<crate::store::eval_rows::PageRow>, StoreError> {
        use crate::store::eval_rows::{page_rows_sql, PageRow};
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(page_rows_sql);
        let rows = sqlx::query(&SQL)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows
            .iter()
            .map(PageRow::from_pg)
            .collect::<Result<_, _>>()?)
    }

    /// A read-only transaction that reads one snapshot throughout.
    async fn read_snapshot(&self) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// Pings still in the inbox (it has no index by check: it is short,
    /// folded every 100 ms).
    async fn pending_between(
        conn: &mut sqlx::PgConnection,
        after: i64,
        through: i64,
    ) -> Result<Vec<StoredPing>, StoreError> {
        let sql = format!(
            "SELECT {INBOX_COLUMNS} FROM ping_inbox WHERE check_id > $1 AND check_id <= $2 \
             ORDER BY id"
        );
        Self::pending_rows(conn, &sql, after, through).await
    }

    /// As folded: a check just created has no pings in the inbox.
    async fn check_by_id(&self, id: i64) -> Result<Check, StoreError> {
        Self::folded_check_on(&self.pool, id).await
    }

    async fn change_check(&self, change: CheckChange<'_>) -> Result<Check, StoreError> {
        let mut tx = self.pool.begin().await?;
        lock_folds(&mut tx).await?;
        settle_on(&mut tx, change.check_id).await?;
        if !Self::write_change(&mut *tx, &change).await? {
            return Err(StoreError::NotFound);
        }
        // The inbox is locked and holds none of its pings: this is the check
        // as the write left it.
        let check = Self::folded_check_on(&mut *tx, change.check_id).await?;
        tx.commit().await?;
        Ok(check)
    }

    /// Serialise heartbeats so two replicas cannot both see the same gap.
    async fn begin_beats(&self) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("LOCK TABLE replicas IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// The `checks_changed` trigger sends no `check:<id>` notice in this
    /// transaction (migration 0020).
    async fn begin_quiet_check_updates(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('overdue.unique_key_fill', 'on', true)")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}
