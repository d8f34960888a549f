//! The leader lease on PostgreSQL (one row, the database's clock), the
//! fencing of leader-only writes, and the notifications that tell every
//! replica what another changed.

use std::time::Duration;

use async_trait::async_trait;

use super::PgStore;
use crate::store::StoreError;

/// The database's clock in Unix ms: every lease instant is on this clock.
pub(super) const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

impl PgStore {
    /// A transaction for a leader-only write: it locks the lease row for
    /// share and checks that this replica still holds it, so no other
    /// replica can take it over before this transaction ends.
    pub(crate) async fn begin_fenced(
        &self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, StoreError> {
        let fence = self.fence.read().map(|f| f.clone()).unwrap_or(None);
        let mut tx = self.pool.begin().await?;
        if let Some((holder, token)) = fence {
            let sql = format!(
                "SELECT token FROM leases WHERE name = $1 AND holder = $2 AND token = $3 \
                 AND expires_at > {DB_NOW_MS} FOR SHARE"
            );
            let held: Option<(i64,)> = sqlx::query_as(&sql)
                .bind(crate::store::lease::LEADER)
                .bind(&holder)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await?;
            if held.is_none() {
                return Err(StoreError::NotLeader);
            }
        }
        Ok(tx)
    }
}

#[async_trait]
impl crate::store::lease::LeaseStore for PgStore {
    async fn acquire_lease(
        &self,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<crate::store::lease::Lease>, StoreError> {
        // Renew our own lease, or take one that has expired; a new holder
        // gets the next token.
        let sql = format!(
            "INSERT INTO leases (name, holder, token, expires_at) VALUES ($1, $2, 1, {DB_NOW_MS} + $3) \
             ON CONFLICT (name) DO UPDATE SET \
               token = CASE WHEN leases.holder = excluded.holder THEN leases.token ELSE leases.token + 1 END, \
               holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= {DB_NOW_MS} \
             RETURNING token, expires_at - {DB_NOW_MS}"
        );
        let got: Option<(i64, i64)> = sqlx::query_as(&sql)
            .bind(crate::store::lease::LEADER)
            .bind(holder)
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await?;
        Ok(got.map(|(token, remaining_ms)| {
            if let Ok(mut f) = self.fence.write() {
                *f = Some((holder.to_string(), token));
            }
            crate::store::lease::Lease {
                token,
                remaining_ms,
            }
        }))
    }

    async fn release_lease(&self, holder: &str) -> Result<(), StoreError> {
        let sql =
            format!("UPDATE leases SET expires_at = {DB_NOW_MS} WHERE name = $1 AND holder = $2");
        sqlx::query(&sql)
            .bind(crate::store::lease::LEADER)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    fn single_process(&self) -> bool {
        false
    }

    async fn sync_changes(&self, token: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify('overdue_changes', 'sync:' || $1)")
            .bind(token)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn watch_changes(
        &self,
        on_change: Box<dyn Fn(crate::store::lease::Change) + Send + Sync>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        use crate::store::lease::Change;
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect_with(&self.pool).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot listen for changes; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            if let Err(e) = listener.listen("overdue_changes").await {
                tracing::warn!(error = %format!("{e:#}"), "cannot listen for changes; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
            // Whatever happened before we listened is unknown.
            on_change(Change::Unknown);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    got = listener.try_recv() => match got {
                        Ok(Some(n)) => on_change(Change::parse(n.payload())),
                        // The connection was lost; sqlx reconnects on the
                        // next receive, and notifications in between are lost.
                        Ok(None) => on_change(Change::Unknown),
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "lost the change listener; reconnecting");
                            break;
                        }
                    }
                }
            }
        }
    }
}
