//! What a warm follower reads again: the checks another replica changed
//! (SPEC §12, failover at scale; migrations/postgres/0019_state_changes.sql
//! says how it hears of them).

use std::collections::HashSet;

use super::PgStore;
use crate::store::dialect::Dialect as _;
use crate::store::eval_rows::{ids_rows_sql, PageRow};
use crate::store::{EvalCheck, StoreError};

impl PgStore {
    /// The checks with these ids for the evaluator, in id order and in one
    /// snapshot, each with the pings the inbox still holds for it: what
    /// `eval_check` reads for one, for all of them in three queries.
    pub(super) async fn eval_in(&self, ids: &[i64]) -> Result<Vec<EvalCheck>, StoreError> {
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(ids_rows_sql);
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.read_snapshot().await?;
        let rows = sqlx::query(&SQL)
            .bind(ids)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(PageRow::from_pg)
            .collect::<Result<Vec<_>, _>>()?;
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            tx.commit().await?;
            return Ok(Vec::new());
        };
        // The inbox is short (folded every 100 ms): its pings between the
        // first and the last id, then only those of these checks.
        let wanted: HashSet<i64> = rows.iter().map(PageRow::id).collect();
        let mut pending = Self::pending_between(&mut tx, first.id() - 1, last.id()).await?;
        pending.retain(|p| wanted.contains(&p.ping.check_id));
        let mut history = Self::history_on(&mut tx, &pending).await?;
        tx.commit().await?;
        let mut pending = crate::store::checks::by_check(pending);
        rows.into_iter()
            .map(|r| {
                let (id, stored) = (r.id(), r.stored());
                let mine = pending.remove(&id).unwrap_or_default();
                let check = r.into_check()?;
                Ok(crate::store::eval_check(
                    check,
                    stored,
                    &mine,
                    history.remove(&id),
                ))
            })
            .collect()
    }
}
