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
    /// `NULL` until filled for a check made before migration 0020.
    pub unique_key: Option<String>,
    pub slug: Option<String>,
    pub name: String,
    /// JSON object.
    pub labels: String,
}

impl MetricCheck {
    /// The `check` label: the slug, or the unique key (never the uuid).
    pub fn public_name(&self) -> String {
        match (&self.slug, &self.unique_key) {
            (Some(s), _) if !s.is_empty() => s.clone(),
            (_, Some(k)) => k.clone(),
            _ => crate::domain::name::public_name_of(None, &self.uuid),
        }
    }
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
                    "SELECT id, uuid, unique_key, slug, name, labels FROM checks \
                     WHERE id > $1 ORDER BY id LIMIT $2",
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
