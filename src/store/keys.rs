//! API keys created through the API, stored as SHA-256 hashes.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;

/// A stored API key: never the key itself.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApiKeyRecord {
    pub id: String,
    pub name: String,
    /// `read` or `write`.
    pub scope: String,
    /// Hex SHA-256 of the key.
    pub sha256: String,
    pub created_at: UnixMs,
}

/// Storage of API keys.
#[async_trait]
pub trait KeyStore {
    /// Every stored key, oldest first.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// The key with this hash, if any.
    async fn api_key_by_hash(&self, sha256: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// Stores a new key.
    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError>;
    /// Deletes a key; `NotFound` if there is none with this id.
    async fn delete_api_key(&self, id: &str) -> Result<(), StoreError>;
}

/// Implements [`KeyStore`] for a store with a `pool` field.
macro_rules! impl_key_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::keys::KeyStore for $store {
            async fn list_api_keys(
                &self,
            ) -> Result<Vec<$crate::store::keys::ApiKeyRecord>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, name, scope, sha256, created_at FROM api_keys ORDER BY created_at, id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn api_key_by_hash(
                &self,
                sha256: &str,
            ) -> Result<Option<$crate::store::keys::ApiKeyRecord>, $crate::store::StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, name, scope, sha256, created_at FROM api_keys WHERE sha256 = $1",
                )
                .bind(sha256)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn put_api_key(
                &self,
                k: &$crate::store::keys::ApiKeyRecord,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "INSERT INTO api_keys (id, name, scope, sha256, created_at) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(&k.id)
                .bind(&k.name)
                .bind(&k.scope)
                .bind(&k.sha256)
                .bind(k.created_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn delete_api_key(&self, id: &str) -> Result<(), $crate::store::StoreError> {
                let done = sqlx::query("DELETE FROM api_keys WHERE id = $1")
                    .bind(id)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err($crate::store::StoreError::NotFound);
                }
                Ok(())
            }
        }
    };
}

pub(crate) use impl_key_store;
