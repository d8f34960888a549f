//! Reads: a snapshot of the database, and the pings of the log's tail that
//! the written summaries do not hold yet, which every read applies.

use std::collections::HashMap;

use sqlx::sqlite::SqliteConnection;

use super::SqliteStore;
use crate::domain::check::Check;
use crate::domain::fold::{apply_pending, StoredPing};
use crate::store::{CheckRow, InboxRow, StoreError, CHECK_COLUMNS, INBOX_COLUMNS};

impl SqliteStore {
    pub(super) async fn check_by_id(&self, id: i64) -> Result<Check, StoreError> {
        let mut tx = self.read_snapshot().await?;
        let mut check = folded_check_on(&mut tx, id).await?;
        let pending = pending_on(&mut tx, Some(id)).await?;
        tx.commit().await?;
        apply_pending(&mut check, &pending);
        Ok(check)
    }

    /// A read transaction: in WAL mode it reads one snapshot throughout.
    pub(super) async fn read_snapshot(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin().await?)
    }
}

/// A check as its written summary has it, without the pings after it.
pub(super) async fn folded_check_on(
    conn: &mut SqliteConnection,
    id: i64,
) -> Result<Check, StoreError> {
    let sql = format!(
        "SELECT {CHECK_COLUMNS} FROM checks c JOIN check_state s ON s.check_id = c.id \
         WHERE c.id = ?"
    );
    let row: CheckRow = sqlx::query_as(&sql).bind(id).fetch_one(&mut *conn).await?;
    Ok(row.into_check()?)
}

/// Pings not yet in the written summary, of one check or of all, oldest first.
pub(super) async fn pending_on(
    conn: &mut SqliteConnection,
    check_id: Option<i64>,
) -> Result<Vec<StoredPing>, StoreError> {
    match check_id {
        Some(id) => pending_between(conn, id - 1, id).await,
        None => pending_between(conn, i64::MIN, i64::MAX).await,
    }
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
    let rows: Vec<InboxRow> = sqlx::query_as(&sql)
        .bind(after)
        .bind(through)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(InboxRow::into_ping).collect())
}

/// Pending pings grouped by check (in order), so applying them to many
/// checks costs one pass.
pub(super) fn by_check(pending: Vec<StoredPing>) -> HashMap<i64, Vec<StoredPing>> {
    let mut out: HashMap<i64, Vec<StoredPing>> = HashMap::new();
    for p in pending {
        out.entry(p.ping.check_id).or_default().push(p);
    }
    out
}
