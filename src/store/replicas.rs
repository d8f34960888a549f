//! The replicas that accept pings: whether this one's database answers, the
//! heartbeats every replica records, and the spans when none did (checks are
//! not held to pings nobody could receive; those a wall-clock step did not
//! make are blind spots, told to the fallback receiver once), and the backward wall-clock steps
//! the server's timeline slews over (`domain::timeline`). The SQL is the same for both
//! backends but for how heartbeats are kept from racing and how one is
//! recorded, which each backend's `Dialect` (dialect.rs) says;
//! one macro implements [`ReplicaStore`] for each.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;
use crate::domain::timeline::Slew;

/// An unobserved span a heartbeat recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unobserved {
    pub start: UnixMs,
    pub end: UnixMs,
    /// A blind spot (`domain::blind_spot::is_blind_spot`): not made by a
    /// wall-clock step while this replica ran.
    pub blind: bool,
}

/// Health, heartbeats, unobserved spans and clock slews.
#[async_trait]
pub trait ReplicaStore {
    /// Succeeds when the database answers.
    async fn health(&self) -> Result<(), StoreError>;
    /// Records that `replica` accepts pings at `now`; if no replica did for
    /// longer than `gap`, records and returns that span as unobserved, and
    /// as a blind spot unless the spans wall-clock steps forward skipped
    /// while this replica ran (`skipped`) leave no more than `gap` of it.
    async fn heartbeat(
        &self,
        replica: &str,
        started_at: UnixMs,
        now: UnixMs,
        gap: i64,
        skipped: &[(UnixMs, UnixMs)],
    ) -> Result<Option<Unobserved>, StoreError>;
    /// Every unobserved span ending after `since`, in order.
    async fn unobserved_spans(&self, since: UnixMs) -> Result<Vec<(UnixMs, UnixMs)>, StoreError>;
    /// The blind spots whose notice was not enqueued yet, oldest first.
    async fn pending_blind_spots(&self) -> Result<Vec<(UnixMs, UnixMs)>, StoreError>;
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
                skipped: &[($crate::domain::ping::UnixMs, $crate::domain::ping::UnixMs)],
            ) -> Result<Option<$crate::store::replicas::Unobserved>, $crate::store::StoreError>
            {
                use $crate::store::dialect::Dialect as _;
                let mut tx = self.begin_beats().await?;
                let (last,): (Option<i64>,) =
                    sqlx::query_as("SELECT MAX(last_beat_at) FROM replicas")
                        .fetch_one(&mut *tx)
                        .await?;
                let span = last.filter(|l| now - l > gap).map(|start| {
                    $crate::store::replicas::Unobserved {
                        start,
                        end: now,
                        blind: $crate::domain::blind_spot::is_blind_spot(
                            (start, now),
                            skipped,
                            gap,
                        ),
                    }
                });
                if let Some(s) = span {
                    sqlx::query(
                        "INSERT INTO unobserved (start_at, end_at, blind) VALUES ($1, $2, $3) \
                         ON CONFLICT DO NOTHING",
                    )
                    .bind(s.start)
                    .bind(s.end)
                    .bind(s.blind)
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

            async fn pending_blind_spots(
                &self,
            ) -> Result<
                Vec<($crate::domain::ping::UnixMs, $crate::domain::ping::UnixMs)>,
                $crate::store::StoreError,
            > {
                Ok(sqlx::query_as(
                    "SELECT start_at, end_at FROM unobserved \
                     WHERE blind AND noticed_at IS NULL ORDER BY start_at",
                )
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
