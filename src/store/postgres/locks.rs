//! The job guard's lock seats on PostgreSQL: every replica sees the same
//! seats, and every instant is on the database's clock.

use std::collections::HashMap;

use async_trait::async_trait;

use super::lease::DB_NOW_MS;
use super::PgStore;
use crate::domain::ping::UnixMs;
use crate::store::locks::{Acquired, LockAsk, LockStore, Seat, SeatRow, SEAT_COLUMNS};
use crate::store::StoreError;

#[async_trait]
impl LockStore for PgStore {
    /// Every instant is the database's: `_now` (the server's) is not used.
    async fn acquire_lock(&self, ask: LockAsk<'_>, _now: UnixMs) -> Result<Acquired, StoreError> {
        let (check_id, ttl_ms) = (ask.check_id, ask.ttl_ms);
        let mut tx = self.pool.begin().await?;
        // The check's token row, locked (created on first use) until the
        // commit: acquires of one check on every replica take turns here,
        // so two never both see the last seat free.
        let last: Option<i64> = sqlx::query_scalar(
            "INSERT INTO check_lock_tokens (check_id, last_token) \
             SELECT id, 0 FROM checks WHERE id = $1 \
             ON CONFLICT (check_id) DO UPDATE SET last_token = check_lock_tokens.last_token \
             RETURNING last_token",
        )
        .bind(check_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(last) = last else {
            return Err(StoreError::NotFound);
        };
        let now: i64 = sqlx::query_scalar(&format!("SELECT {DB_NOW_MS}"))
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM check_locks WHERE check_id = $1 AND expires_at <= $2")
            .bind(check_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let answer = if let Some(token) = ask.token {
            let renewed: Option<SeatRow> = sqlx::query_as(&format!(
                "UPDATE check_locks SET ttl_ms = $3, expires_at = $4 \
                 WHERE check_id = $1 AND token = $2 RETURNING {SEAT_COLUMNS}"
            ))
            .bind(check_id)
            .bind(token)
            .bind(ttl_ms)
            .bind(now.saturating_add(ttl_ms))
            .fetch_optional(&mut *tx)
            .await?;
            renewed.map_or(Acquired::Lost, |s| Acquired::Held(s.into()))
        } else {
            let seats: i64 = sqlx::query_scalar("SELECT max_instances FROM checks WHERE id = $1")
                .bind(check_id)
                .fetch_one(&mut *tx)
                .await?;
            let held: Vec<SeatRow> = sqlx::query_as(&format!(
                "SELECT {SEAT_COLUMNS} FROM check_locks WHERE check_id = $1 \
                 ORDER BY expires_at, token"
            ))
            .bind(check_id)
            .fetch_all(&mut *tx)
            .await?;
            let mine: Option<SeatRow> = match ask.nonce {
                Some(n) => {
                    sqlx::query_as(&format!(
                        "SELECT {SEAT_COLUMNS} FROM check_locks WHERE check_id = $1 AND nonce = $2"
                    ))
                    .bind(check_id)
                    .bind(n)
                    .fetch_optional(&mut *tx)
                    .await?
                }
                None => None,
            };
            if let Some(seat) = mine {
                Acquired::Held(seat.into())
            } else if i64::try_from(held.len()).unwrap_or(i64::MAX) >= seats.max(1) {
                match held.into_iter().next() {
                    Some(s) => Acquired::Busy(s.into()),
                    None => Acquired::Lost,
                }
            } else {
                let token = last + 1;
                sqlx::query("UPDATE check_lock_tokens SET last_token = $2 WHERE check_id = $1")
                    .bind(check_id)
                    .bind(token)
                    .execute(&mut *tx)
                    .await?;
                let seat: SeatRow = sqlx::query_as(&format!(
                    "INSERT INTO check_locks (check_id, token, holder, ttl_ms, acquired_at, \
                     expires_at, nonce) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {SEAT_COLUMNS}"
                ))
                .bind(check_id)
                .bind(token)
                .bind(ask.holder)
                .bind(ttl_ms)
                .bind(now)
                .bind(now.saturating_add(ttl_ms))
                .bind(ask.nonce)
                .fetch_one(&mut *tx)
                .await?;
                Acquired::Held(seat.into())
            }
        };
        tx.commit().await?;
        Ok(answer)
    }

    async fn release_lock(&self, check_id: i64, token: i64) -> Result<bool, StoreError> {
        let held: Option<bool> = sqlx::query_scalar(&format!(
            "DELETE FROM check_locks WHERE check_id = $1 AND token = $2 \
             RETURNING expires_at > {DB_NOW_MS}"
        ))
        .bind(check_id)
        .bind(token)
        .fetch_optional(&self.pool)
        .await?;
        Ok(held == Some(true))
    }

    async fn locks(&self, check_id: i64, _now: UnixMs) -> Result<Vec<Seat>, StoreError> {
        let rows: Vec<SeatRow> = sqlx::query_as(&format!(
            "SELECT {SEAT_COLUMNS} FROM check_locks WHERE check_id = $1 \
             AND expires_at > {DB_NOW_MS} ORDER BY expires_at, token"
        ))
        .bind(check_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(Seat::from).collect())
    }

    async fn locks_held(&self, _now: UnixMs) -> Result<HashMap<i64, i64>, StoreError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(&format!(
            "SELECT check_id, COUNT(*) FROM check_locks WHERE expires_at > {DB_NOW_MS} \
             GROUP BY check_id"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().collect())
    }
}
