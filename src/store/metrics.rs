//! What a metrics scrape reads from the database: each check's identity and
//! labels, which the evaluator does not keep in memory. The SQL is the same
//! for both backends, so one macro implements [`MetricsStore`] for each.

use async_trait::async_trait;

use super::StoreError;

/// What names one check's series.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MetricCheck {
    pub id: i64,
    pub uuid: String,
    pub slug: Option<String>,
    pub name: String,
    /// JSON object.
    pub labels: String,
}

/// The reads of a metrics scrape.
#[async_trait]
pub trait MetricsStore {
    /// Checks with `id > after`, in id order, at most `limit`.
    async fn metric_checks(&self, after: i64, limit: u32) -> Result<Vec<MetricCheck>, StoreError>;
}

/// Implements [`MetricsStore`] for a store with a `pool` field.
macro_rules! impl_metrics_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::metrics::MetricsStore for $store {
            async fn metric_checks(
                &self,
                after: i64,
                limit: u32,
            ) -> Result<Vec<$crate::store::metrics::MetricCheck>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, uuid, slug, name, labels FROM checks WHERE id > $1 ORDER BY id LIMIT $2",
                )
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?)
            }
        }
    };
}

pub(crate) use impl_metrics_store;
