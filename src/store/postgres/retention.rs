//! Retention on PostgreSQL: every row of the ping log is folded, so the log
//! is trimmed by check alone; rows another transaction holds are skipped.

use async_trait::async_trait;

use super::PgStore;
use crate::domain::ping::UnixMs;
use crate::store::StoreError;

#[async_trait]
impl crate::store::retention::RetentionStore for PgStore {
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
    ) -> Result<crate::store::retention::HistoryStep, StoreError> {
        crate::store::retention::prune_history_on!(
            &self.pool,
            " FOR UPDATE SKIP LOCKED",
            before,
            limit
        )
    }

    async fn prune_item_history(&self, now: UnixMs, limit: u32) -> Result<u64, StoreError> {
        crate::store::retention::prune_item_history_on!(
            &self.pool,
            " FOR UPDATE SKIP LOCKED",
            now,
            limit
        )
    }
}
