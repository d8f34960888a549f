//! What each backend does its own way, for the code both share (checks.rs,
//! replicas.rs): how a read sees one snapshot, where the pings that no
//! written summary holds yet wait, how a change to a check is ordered with
//! the pings around it, and how heartbeats are kept from racing.

use async_trait::async_trait;

use super::{CheckValues, StoreError};
use crate::domain::check::Check;
use crate::domain::fold::StoredPing;
use crate::domain::ping::UnixMs;

/// The dialect work the shared code asks a backend for.
#[async_trait]
pub(crate) trait Dialect {
    /// The backend's database.
    type Db: sqlx::Database;
    /// The page of a check's logged pings that its written summary holds,
    /// newest first, in the columns of [`super::PingRow`]: `$1` is the check,
    /// `$2` the number the pings are below, `$3` how many at most.
    const LOGGED_PINGS: &'static str;
    /// Records a replica's heartbeat: `$1` is its id, `$2` when it started,
    /// `$3` now.
    const BEAT: &'static str;
    /// The texts of the JSON array `$1`, as a one-column subquery.
    const JSON_TEXTS: &'static str;
    /// A page of the evaluator's start-up read, in id order: the checks
    /// with `after < id`, at most `limit` (eval_rows.rs).
    async fn eval_page_on(
        conn: &mut <Self::Db as sqlx::Database>::Connection,
        after: i64,
        limit: u32,
    ) -> Result<Vec<super::eval_rows::PageRow>, StoreError>;
    /// A transaction that reads one snapshot throughout.
    async fn read_snapshot(&self) -> Result<sqlx::Transaction<'_, Self::Db>, StoreError>;
    /// Pings that the written summaries do not hold yet (SQLite: the log's
    /// tail; PostgreSQL: the inbox) of the checks with `after < id <=
    /// through`, oldest first.
    async fn pending_between(
        conn: &mut <Self::Db as sqlx::Database>::Connection,
        after: i64,
        through: i64,
    ) -> Result<Vec<StoredPing>, StoreError>;
    /// [`Dialect::pending_between`] for one check, or all.
    async fn pending_on(
        conn: &mut <Self::Db as sqlx::Database>::Connection,
        check_id: Option<i64>,
    ) -> Result<Vec<StoredPing>, StoreError> {
        match check_id {
            Some(id) => Self::pending_between(conn, id - 1, id).await,
            None => Self::pending_between(conn, i64::MIN, i64::MAX).await,
        }
    }
    /// The check as a write that just committed left it.
    async fn check_by_id(&self, id: i64) -> Result<Check, StoreError>;
    /// Makes `change` in order with the pings: those stored before it are
    /// settled first and keep what they did, those stored after it see it.
    /// Returns the check as the change left it; `NotFound` if it does not
    /// exist. (The statement itself is the store's `write_change`, written
    /// once by `impl_check_store!`.)
    async fn change_check(&self, change: CheckChange<'_>) -> Result<Check, StoreError>;
    /// A transaction in which no other heartbeat reads or writes, so two
    /// replicas cannot both see the same gap.
    async fn begin_beats(&self) -> Result<sqlx::Transaction<'_, Self::Db>, StoreError>;
    /// A transaction that reads, then updates `checks` in ways no other
    /// replica needs to hear of (filling `unique_key`).
    async fn begin_quiet_check_updates(
        &self,
    ) -> Result<sqlx::Transaction<'_, Self::Db>, StoreError>;
}

/// A change to a check that must fall between the pings around it.
pub(crate) struct CheckChange<'a> {
    pub check_id: i64,
    pub now: UnixMs,
    pub what: Change<'a>,
}

/// What a [`CheckChange`] changes.
pub(crate) enum Change<'a> {
    /// Pauses (`true`) or resumes the check.
    Paused(bool),
    /// Replaces its definition.
    Definition(&'a CheckValues),
}
