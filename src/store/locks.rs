//! The job guard's lock seats (SPEC §13): a check's `max_instances` seats,
//! each held by one run until its TTL runs out, with a fencing token that
//! only grows per check.
//!
//! Expiry is never judged by a replica's wall clock: PostgreSQL compares
//! against the database's clock, SQLite against the server's monotonic
//! clock (kept in memory; a restart gives held seats their full TTL again).

use std::collections::HashMap;

use async_trait::async_trait;

use super::StoreError;
use crate::domain::ping::UnixMs;

/// A held seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub token: i64,
    pub holder: String,
    pub ttl_ms: i64,
    pub acquired_at: UnixMs,
    /// When the seat expires unless renewed, as wall-clock Unix ms (the
    /// database's clock on PostgreSQL; on SQLite, the server's clock now
    /// plus what remains of the TTL by its monotonic clock).
    pub expires_at: UnixMs,
}

/// A seat's row as both backends read it (the columns [`SEAT_COLUMNS`] names).
#[derive(sqlx::FromRow)]
pub(super) struct SeatRow {
    pub token: i64,
    pub holder: String,
    pub ttl_ms: i64,
    pub acquired_at: i64,
    pub expires_at: i64,
    pub nonce: Option<String>,
}

/// The columns of `check_locks` a [`SeatRow`] holds.
pub(super) const SEAT_COLUMNS: &str = "token, holder, ttl_ms, acquired_at, expires_at, nonce";

impl From<SeatRow> for Seat {
    /// The seat as stored (PostgreSQL's expiry is the database's clock).
    fn from(r: SeatRow) -> Seat {
        Seat {
            token: r.token,
            holder: r.holder,
            ttl_ms: r.ttl_ms,
            acquired_at: r.acquired_at,
            expires_at: r.expires_at,
        }
    }
}

/// What an acquire or a renewal got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The seat taken or renewed.
    Held(Seat),
    /// Every seat is held: the one that frees soonest.
    Busy(Seat),
    /// A renewal for a token that no longer holds a seat.
    Lost,
}

/// One acquire or renewal.
#[derive(Debug, Clone, Copy)]
pub struct LockAsk<'a> {
    pub check_id: i64,
    pub holder: &'a str,
    pub ttl_ms: i64,
    /// Renew the seat this token holds.
    pub token: Option<i64>,
    /// The request's key (an acquire retried with it is answered once).
    pub nonce: Option<&'a str>,
}

/// Storage of lock seats.
#[async_trait]
pub trait LockStore {
    /// Takes a free seat of `check_id` for `holder` (after dropping expired
    /// ones), or, with `token`, renews that seat for another `ttl_ms`.
    /// An acquire with the `nonce` of a seat still held gets that seat back
    /// as it is (a retried request whose first answer was lost).
    /// `NotFound` when the check does not exist.
    async fn acquire_lock(&self, ask: LockAsk<'_>, now: UnixMs) -> Result<Acquired, StoreError>;
    /// Releases the seat `token` holds; `false` when it holds none (expired,
    /// released, or taken over after expiring).
    async fn release_lock(&self, check_id: i64, token: i64) -> Result<bool, StoreError>;
    /// The unexpired seats of a check, soonest expiry first.
    async fn locks(&self, check_id: i64, now: UnixMs) -> Result<Vec<Seat>, StoreError>;
    /// How many unexpired seats each check has (checks with none left out).
    async fn locks_held(&self, now: UnixMs) -> Result<HashMap<i64, i64>, StoreError>;
}
