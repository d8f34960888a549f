//! Reads: a snapshot of the database, and the pings still in the inbox,
//! which reads apply to the folded summaries.

use super::PgStore;
use crate::domain::check::Check;
use crate::domain::fold::StoredPing;
use crate::store::{CheckRow, InboxRow, StoreError, CHECK_COLUMNS, INBOX_COLUMNS};

impl PgStore {
    /// A read-only transaction that reads one snapshot throughout.
    pub(super) async fn read_snapshot(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    pub(super) async fn check_by_id(&self, id: i64) -> Result<Check, StoreError> {
        let sql = format!(
            "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
             WHERE c.id = $1"
        );
        let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&self.pool).await?;
        Ok(row.into_check()?)
    }
}

/// A check as folded so far, without its pings still in the inbox.
pub(super) async fn folded_check_on(
    conn: &mut sqlx::PgConnection,
    id: i64,
) -> Result<Check, StoreError> {
    let sql = format!(
        "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
         WHERE c.id = $1"
    );
    let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&mut *conn).await?;
    Ok(row.into_check()?)
}

/// Pings still in the inbox, of one check or of all, oldest first.
pub(super) async fn pending_on(
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
