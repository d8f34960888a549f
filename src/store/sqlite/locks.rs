//! The job guard's lock seats on SQLite. One process uses the file, so
//! expiry is judged by the server's monotonic clock, kept here in memory:
//! a wall-clock step neither frees nor extends a seat, and after a restart
//! every seat still stored gets its full TTL again (its holder may still be
//! running; the worst case is one slot waiting a TTL).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::SqliteStore;
use crate::domain::ping::UnixMs;
use crate::store::locks::{Acquired, LockAsk, LockStore, Seat, SeatRow, SEAT_COLUMNS};
use crate::store::StoreError;

/// When each seat (check id, token) expires, by the monotonic clock.
pub(super) type Deadlines = HashMap<(i64, i64), Instant>;

/// How far the shown expiry may be from the stored one before the stored
/// one is taken as out of date (after a restart or a wall-clock step).
const SHOWN_SLACK_MS: i64 = 1_000;

fn ms(d: i64) -> Duration {
    Duration::from_millis(u64::try_from(d).unwrap_or(0))
}

/// The seat a row holds, with its deadline (a row not seen since this
/// process started gets its full TTL); `None` when it has expired.
fn live(
    deadlines: &mut Deadlines,
    check_id: i64,
    row: SeatRow,
    mono: Instant,
    wall: UnixMs,
) -> Option<Seat> {
    let deadline = *deadlines
        .entry((check_id, row.token))
        .or_insert_with(|| mono + ms(row.ttl_ms));
    let left = deadline
        .checked_duration_since(mono)
        .filter(|d| !d.is_zero())?;
    // Shown as stored while that agrees with the monotonic clock, so every
    // answer names the same instant for a seat.
    let by_clock = wall.saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX));
    let expires_at = if (by_clock - row.expires_at).abs() <= SHOWN_SLACK_MS {
        row.expires_at
    } else {
        by_clock
    };
    Some(Seat {
        token: row.token,
        holder: row.holder,
        ttl_ms: row.ttl_ms,
        acquired_at: row.acquired_at,
        expires_at,
    })
}

#[async_trait]
impl LockStore for SqliteStore {
    async fn acquire_lock(&self, ask: LockAsk<'_>, now: UnixMs) -> Result<Acquired, StoreError> {
        let LockAsk {
            check_id,
            holder,
            ttl_ms,
            token,
            nonce,
        } = ask;
        // One acquire at a time in this process, the only one using the file.
        let mut deadlines = self.locks.lock().await;
        let mono = Instant::now();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let seats: Option<i64> =
            sqlx::query_scalar("SELECT max_instances FROM checks WHERE id = ?")
                .bind(check_id)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(seats) = seats else {
            return Err(StoreError::NotFound);
        };
        let rows: Vec<SeatRow> = sqlx::query_as(&format!(
            "SELECT {SEAT_COLUMNS} FROM check_locks WHERE check_id = ? ORDER BY token"
        ))
        .bind(check_id)
        .fetch_all(&mut *tx)
        .await?;
        let mut held = Vec::new();
        let mut mine = None;
        let mut expired = Vec::new();
        for row in rows {
            let t = row.token;
            let same = nonce.is_some() && row.nonce.as_deref() == nonce;
            match live(&mut deadlines, check_id, row, mono, now) {
                Some(seat) => {
                    if same {
                        mine = Some(seat.clone());
                    }
                    held.push(seat);
                }
                None => {
                    // Forgotten only once the delete is committed: a
                    // rolled-back one must not come back with a fresh TTL.
                    expired.push(t);
                    sqlx::query("DELETE FROM check_locks WHERE check_id = ? AND token = ?")
                        .bind(check_id)
                        .bind(t)
                        .execute(&mut *tx)
                        .await?;
                }
            }
        }
        let expires_at = now.saturating_add(ttl_ms);
        // Whether the answer is a seat taken or renewed now (its deadline
        // starts over), not one handed back to a retried acquire.
        let mut fresh = true;
        let answer = if let Some(token) = token {
            match held.into_iter().find(|s| s.token == token) {
                None => Acquired::Lost,
                Some(mut seat) => {
                    sqlx::query(
                        "UPDATE check_locks SET ttl_ms = ?, expires_at = ? \
                         WHERE check_id = ? AND token = ?",
                    )
                    .bind(ttl_ms)
                    .bind(expires_at)
                    .bind(check_id)
                    .bind(token)
                    .execute(&mut *tx)
                    .await?;
                    seat.ttl_ms = ttl_ms;
                    seat.expires_at = expires_at;
                    Acquired::Held(seat)
                }
            }
        } else if let Some(seat) = mine {
            fresh = false;
            Acquired::Held(seat)
        } else if i64::try_from(held.len()).unwrap_or(i64::MAX) >= seats.max(1) {
            held.sort_by_key(|s| (s.expires_at, s.token));
            match held.into_iter().next() {
                Some(s) => Acquired::Busy(s),
                None => Acquired::Lost,
            }
        } else {
            let token: i64 = sqlx::query_scalar(
                "INSERT INTO check_lock_tokens (check_id, last_token) VALUES (?, 1) \
                 ON CONFLICT (check_id) DO UPDATE SET last_token = last_token + 1 \
                 RETURNING last_token",
            )
            .bind(check_id)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO check_locks (check_id, token, holder, ttl_ms, acquired_at, \
                 expires_at, nonce) VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(check_id)
            .bind(token)
            .bind(holder)
            .bind(ttl_ms)
            .bind(now)
            .bind(expires_at)
            .bind(nonce)
            .execute(&mut *tx)
            .await?;
            Acquired::Held(Seat {
                token,
                holder: holder.to_string(),
                ttl_ms,
                acquired_at: now,
                expires_at,
            })
        };
        tx.commit().await?;
        for t in expired {
            deadlines.remove(&(check_id, t));
        }
        // Only once committed: a rolled-back renewal keeps its old deadline.
        // A seat handed back to a retried acquire keeps its own.
        match &answer {
            Acquired::Held(seat) if fresh => {
                deadlines.insert((check_id, seat.token), mono + ms(ttl_ms));
            }
            _ => {}
        }
        Ok(answer)
    }

    async fn release_lock(&self, check_id: i64, token: i64) -> Result<bool, StoreError> {
        let mut deadlines = self.locks.lock().await;
        let mono = Instant::now();
        let done = sqlx::query("DELETE FROM check_locks WHERE check_id = ? AND token = ?")
            .bind(check_id)
            .bind(token)
            .execute(&self.pool)
            .await?;
        let deadline = deadlines.remove(&(check_id, token));
        Ok(done.rows_affected() > 0 && deadline.is_none_or(|d| d > mono))
    }

    async fn locks(&self, check_id: i64, now: UnixMs) -> Result<Vec<Seat>, StoreError> {
        let mut deadlines = self.locks.lock().await;
        let mono = Instant::now();
        let rows: Vec<SeatRow> = sqlx::query_as(&format!(
            "SELECT {SEAT_COLUMNS} FROM check_locks WHERE check_id = ? ORDER BY token"
        ))
        .bind(check_id)
        .fetch_all(&self.pool)
        .await?;
        let mut seats: Vec<Seat> = rows
            .into_iter()
            .filter_map(|r| live(&mut deadlines, check_id, r, mono, now))
            .collect();
        seats.sort_by_key(|s| (s.expires_at, s.token));
        Ok(seats)
    }

    async fn locks_held(&self, now: UnixMs) -> Result<HashMap<i64, i64>, StoreError> {
        let mut deadlines = self.locks.lock().await;
        let mono = Instant::now();
        let rows: Vec<(i64, i64, String, i64, i64, i64)> = sqlx::query_as(
            "SELECT check_id, token, holder, ttl_ms, acquired_at, expires_at FROM check_locks",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut held = HashMap::new();
        let mut stored = std::collections::HashSet::new();
        for (check_id, token, holder, ttl_ms, acquired_at, expires_at) in rows {
            stored.insert((check_id, token));
            let row = SeatRow {
                token,
                holder,
                ttl_ms,
                acquired_at,
                expires_at,
                nonce: None,
            };
            if live(&mut deadlines, check_id, row, mono, now).is_some() {
                *held.entry(check_id).or_insert(0) += 1;
            }
        }
        // Deadlines of seats no longer stored (released, or their check
        // deleted) are forgotten here, once per scrape.
        deadlines.retain(|seat, _| stored.contains(seat));
        Ok(held)
    }
}
