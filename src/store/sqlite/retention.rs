//! Retention on SQLite: the ping log is trimmed through its index, and only
//! up to each check's written summary.

use std::fmt::Write as _;

use async_trait::async_trait;

use super::SqliteStore;
use crate::domain::ping::UnixMs;
use crate::store::StoreError;

#[async_trait]
impl crate::store::retention::RetentionStore for SqliteStore {
    async fn prune_ping_logs(&self, ids: &[i64], keep: u32, limit: u32) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        // Only pings in the index up to the check's written summary: a round
        // indexes a check's pings in one chunk and may write its summary in
        // a later one, and pings past the summary are refolded from the log
        // after a restart. They stay, as does the log's tail past the round.
        let mut sql = String::with_capacity(ids.len() * 500);
        for id in ids {
            let folded = format!(
                "ping_index WHERE check_id = {id} \
                 AND id <= (SELECT folded_through FROM check_state WHERE check_id = {id})"
            );
            let cutoff =
                format!("(SELECT id FROM {folded} ORDER BY id DESC LIMIT 1 OFFSET {keep})");
            // The same rows twice: the index still lists them when the
            // second statement looks.
            let oldest =
                format!("SELECT id FROM {folded} AND id <= {cutoff} ORDER BY id LIMIT {limit}");
            let _ = writeln!(
                sql,
                "DELETE FROM pings WHERE id IN ({oldest});\n\
                 DELETE FROM ping_index WHERE check_id = {id} AND id IN ({oldest});"
            );
        }
        // Under the writer's lock, as the writer's own rounds: a writer
        // kept waiting on SQLite's busy handler sleeps longer than needed.
        let _w = self.writer.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let done = sqlx::Executor::execute(&mut *tx, sqlx::raw_sql(&sql)).await?;
        tx.commit().await?;
        // Each ping deleted is one row of the log and one of the index.
        Ok(done.rows_affected() / 2)
    }

    async fn prune_history(
        &self,
        before: UnixMs,
        limit: u32,
    ) -> Result<crate::store::retention::HistoryStep, StoreError> {
        let _w = self.writer.lock().await;
        crate::store::retention::prune_history_on!(&self.pool, "", before, limit)
    }

    async fn prune_item_history(&self, now: UnixMs, limit: u32) -> Result<u64, StoreError> {
        let _w = self.writer.lock().await;
        crate::store::retention::prune_item_history_on!(&self.pool, "", now, limit)
    }
}
