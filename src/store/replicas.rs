//! The replicas that accept pings: whether this one's database answers, the
//! heartbeats every replica records, and the spans when none did (checks are
//! not held to pings nobody could receive), and the backward wall-clock steps
//! the server's timeline slews over (`domain::timeline`). The SQL is the same for both
//! backends but for how heartbeats are kept from racing and how one is
//! recorded, which each backend's `Dialect` (dialect.rs) says;
//! one macro implements [`ReplicaStore`] for each.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;
use crate::domain::timeline::Slew;

/// Health, heartbeats, unobserved spans and clock slews.
#[async_trait]
pub trait ReplicaStore {
    /// Succeeds when the database answers.
    async fn health(&self) -> Result<(), StoreError>;
    /// Records that `replica` accepts pings at `now`; if no replica did for
    /// longer than `gap`, records and returns that span as unobserved.
    async fn heartbeat(
        &self,
        replica: &str,
        started_at: UnixMs,
        now: UnixMs,
        gap: i64,
    ) -> Result<Option<(UnixMs, UnixMs)>, StoreError>;
    /// Every unobserved span ending after `since`, in order.
    async fn unobserved_spans(&self, since: UnixMs) -> Result<Vec<(UnixMs, UnixMs)>, StoreError>;
    /// The latest heartbeat of any replica: the latest instant the stored
    /// state can hold.
    async fn latest_beat(&self) -> Result<Option<UnixMs>, StoreError>;
    /// Records a backward wall-clock step the timeline slews over (once).
    async fn record_slew(&self, slew: Slew) -> Result<(), StoreError>;
    /// Every slew recorded, in order.
    async fn slews(&self) -> Result<Vec<Slew>, StoreError>;
}

/// Implements [`ReplicaStore`] for a store with a `pool` field that
/// implements [`Dialect`](super::dialect::Dialect).
macro_rules! impl_replica_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::replicas::ReplicaStore for $store {
            async fn health(&self) -> Result<(), $crate::store::StoreError> {
                sqlx::query("SELECT 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn heartbeat(
                &self,
                replica: &str,
                started_at: $crate::domain::ping::UnixMs,
                now: $crate::domain::ping::UnixMs,
                gap: i64,
            ) -> Result<
                Option<($crate::domain::ping::UnixMs, $crate::domain::ping::UnixMs)>,
                $crate::store::StoreError,
            > {
                use $crate::store::dialect::Dialect as _;
                let mut tx = self.begin_beats().await?;
                let (last,): (Option<i64>,) =
                    sqlx::query_as("SELECT MAX(last_beat_at) FROM replicas")
                        .fetch_one(&mut *tx)
                        .await?;
                let span = last.filter(|l| now - l > gap).map(|l| (l, now));
                if let Some((start, end)) = span {
                    sqlx::query(
                        "INSERT INTO unobserved (start_at, end_at) VALUES ($1, $2) \
                         ON CONFLICT DO NOTHING",
                    )
                    .bind(start)
                    .bind(end)
                    .execute(&mut *tx)
                    .await?;
                }
                sqlx::query(Self::BEAT)
                    .bind(replica)
                    .bind(started_at)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(span)
            }

            async fn unobserved_spans(
                &self,
                since: $crate::domain::ping::UnixMs,
            ) -> Result<
                Vec<($crate::domain::ping::UnixMs, $crate::domain::ping::UnixMs)>,
                $crate::store::StoreError,
            > {
                Ok(sqlx::query_as(
                    "SELECT start_at, end_at FROM unobserved WHERE end_at > $1 ORDER BY start_at",
                )
                .bind(since)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn latest_beat(
                &self,
            ) -> Result<Option<$crate::domain::ping::UnixMs>, $crate::store::StoreError> {
                let (last,): (Option<i64>,) =
                    sqlx::query_as("SELECT MAX(last_beat_at) FROM replicas")
                        .fetch_one(&self.pool)
                        .await?;
                Ok(last)
            }

            async fn record_slew(
                &self,
                slew: $crate::domain::timeline::Slew,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "INSERT INTO clock_slews (at, wall_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                )
                .bind(slew.at)
                .bind(slew.wall)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn slews(
                &self,
            ) -> Result<Vec<$crate::domain::timeline::Slew>, $crate::store::StoreError> {
                let rows: Vec<(i64, i64)> =
                    sqlx::query_as("SELECT at, wall_at FROM clock_slews ORDER BY at")
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(at, wall)| $crate::domain::timeline::Slew { at, wall })
                    .collect())
            }
        }
    };
}

pub(crate) use impl_replica_store;
