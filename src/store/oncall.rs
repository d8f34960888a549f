//! What the on-call loop keeps (SPEC §6.2): acknowledgements of incidents,
//! what holds an incident back (written by the dispatcher at a flush), and
//! the secrets every replica shares (the key that signs acknowledge links).
//!
//! The SQL is the same for both backends, so one macro implements
//! [`OnCallStore`] for each.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;

/// One incident with its check and its acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IncidentAck {
    pub id: i64,
    pub check_id: i64,
    pub check_uuid: String,
    pub check_slug: Option<String>,
    pub check_name: String,
    pub opened_at: UnixMs,
    pub status: String,
    pub reason: Option<String>,
    pub resolved_at: Option<UnixMs>,
    pub acked_at: Option<UnixMs>,
    pub acked_by: Option<String>,
    pub ack_comment: Option<String>,
}

impl IncidentAck {
    /// The check's `check` label: its slug, or its unique key without one.
    pub fn check_label(&self) -> String {
        crate::domain::name::public_name_of(self.check_slug.as_deref(), &self.check_uuid)
    }
}

/// Storage for the on-call loop.
#[async_trait]
pub trait OnCallStore: Send + Sync {
    /// One incident with its acknowledgement; `None` when there is none.
    async fn incident_ack(&self, id: i64) -> Result<Option<IncidentAck>, StoreError>;
    /// Acknowledges an open incident that nobody acknowledged yet (the
    /// first acknowledgement stands) and returns it as it is now; `None`
    /// when there is no such incident. A resolved incident is returned
    /// unchanged.
    async fn ack_incident(
        &self,
        id: i64,
        by: &str,
        comment: Option<&str>,
        at: UnixMs,
    ) -> Result<Option<IncidentAck>, StoreError>;
    /// Takes an acknowledgement back; `None` when there is no such incident.
    async fn unack_incident(&self, id: i64) -> Result<Option<IncidentAck>, StoreError>;
    /// The acknowledgements of these incidents (open or not), by id.
    async fn incident_acks(&self, ids: &[i64]) -> Result<Vec<IncidentAck>, StoreError>;
    /// How many open incidents are acknowledged.
    async fn acknowledged_open_incidents(&self) -> Result<i64, StoreError>;
    /// Records what holds each incident back (`None`: nothing). A
    /// leader-only write.
    async fn set_inhibited_by(&self, rows: &[(i64, Option<String>)]) -> Result<(), StoreError>;
    /// The secret named `name`: the stored one, or `candidate` stored now
    /// when there was none (the first replica's candidate wins).
    async fn shared_secret(
        &self,
        name: &str,
        candidate: &str,
        now: UnixMs,
    ) -> Result<String, StoreError>;
}

pub(crate) const INCIDENT_ACK_SQL: &str = "SELECT i.id, i.check_id, c.uuid AS check_uuid, \
     c.slug AS check_slug, c.name AS check_name, i.opened_at, i.status, i.reason, i.resolved_at, \
     i.acked_at, i.acked_by, i.ack_comment FROM incidents i JOIN checks c ON c.id = i.check_id";

/// Implements [`OnCallStore`] for a store with a `pool` field.
macro_rules! impl_oncall_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::oncall::OnCallStore for $store {
            async fn incident_ack(
                &self,
                id: i64,
            ) -> Result<Option<$crate::store::oncall::IncidentAck>, $crate::store::StoreError> {
                use $crate::store::oncall::INCIDENT_ACK_SQL;
                let sql = format!("{INCIDENT_ACK_SQL} WHERE i.id = $1");
                Ok(sqlx::query_as(&sql).bind(id).fetch_optional(&self.pool).await?)
            }

            async fn ack_incident(
                &self,
                id: i64,
                by: &str,
                comment: Option<&str>,
                at: $crate::domain::ping::UnixMs,
            ) -> Result<Option<$crate::store::oncall::IncidentAck>, $crate::store::StoreError> {
                sqlx::query(
                    "UPDATE incidents SET acked_at = $2, acked_by = $3, ack_comment = $4 \
                     WHERE id = $1 AND resolved_at IS NULL AND acked_at IS NULL",
                )
                .bind(id)
                .bind(at)
                .bind(by)
                .bind(comment)
                .execute(&self.pool)
                .await?;
                self.incident_ack(id).await
            }

            async fn unack_incident(
                &self,
                id: i64,
            ) -> Result<Option<$crate::store::oncall::IncidentAck>, $crate::store::StoreError> {
                sqlx::query(
                    "UPDATE incidents SET acked_at = NULL, acked_by = NULL, ack_comment = NULL \
                     WHERE id = $1 AND resolved_at IS NULL",
                )
                .bind(id)
                .execute(&self.pool)
                .await?;
                self.incident_ack(id).await
            }

            async fn incident_acks(
                &self,
                ids: &[i64],
            ) -> Result<Vec<$crate::store::oncall::IncidentAck>, $crate::store::StoreError> {
                use $crate::store::notify::{placeholders, CHUNK};
                use $crate::store::oncall::INCIDENT_ACK_SQL;
                let mut out = Vec::new();
                for chunk in ids.chunks(CHUNK) {
                    let sql = format!(
                        "{INCIDENT_ACK_SQL} WHERE i.id IN ({})",
                        placeholders(1, chunk.len())
                    );
                    let mut q = sqlx::query_as(&sql);
                    for id in chunk {
                        q = q.bind(*id);
                    }
                    out.extend(q.fetch_all(&self.pool).await?);
                }
                Ok(out)
            }

            async fn acknowledged_open_incidents(&self) -> Result<i64, $crate::store::StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT COUNT(*) FROM incidents WHERE resolved_at IS NULL AND acked_at IS NOT NULL",
                )
                .fetch_one(&self.pool)
                .await?)
            }

            async fn set_inhibited_by(
                &self,
                rows: &[(i64, Option<String>)],
            ) -> Result<(), $crate::store::StoreError> {
                if rows.is_empty() {
                    return Ok(());
                }
                let mut tx = self.begin_fenced().await?;
                for (id, by) in rows {
                    sqlx::query("UPDATE incidents SET inhibited_by = $2 WHERE id = $1")
                        .bind(*id)
                        .bind(by.as_deref())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn shared_secret(
                &self,
                name: &str,
                candidate: &str,
                now: $crate::domain::ping::UnixMs,
            ) -> Result<String, $crate::store::StoreError> {
                sqlx::query(
                    "INSERT INTO server_secrets (name, value, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(name)
                .bind(candidate)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(
                    sqlx::query_scalar("SELECT value FROM server_secrets WHERE name = $1")
                        .bind(name)
                        .fetch_one(&self.pool)
                        .await?,
                )
            }
        }
    };
}

pub(crate) use impl_oncall_store;
