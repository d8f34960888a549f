//! A full disk told apart from other database failures, by the database's
//! own error code: the ping path answers it with its reason and `/readyz`
//! reports it (docs/reliability.md, "Full disk").

use super::StoreError;

/// SQLite's primary result code SQLITE_FULL ("database or disk is full").
/// sqlx reports the extended code, whose low byte is the primary one.
const SQLITE_FULL: i64 = 13;
/// PostgreSQL's SQLSTATE `disk_full` (class 53, insufficient resources).
const PG_DISK_FULL: &str = "53100";

impl StoreError {
    /// Whether the database refused the write because its disk (or, for
    /// SQLite, its `max_page_count`) is full.
    pub fn is_disk_full(&self) -> bool {
        let StoreError::Other(e) = self else {
            return false;
        };
        e.chain()
            .filter_map(|cause| cause.downcast_ref::<sqlx::Error>())
            .any(is_full)
    }
}

fn is_full(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    if let Some(e) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        let code = sqlx::error::DatabaseError::code(e);
        return code
            .and_then(|c| c.parse::<i64>().ok())
            .is_some_and(|c| c & 0xff == SQLITE_FULL);
    }
    if let Some(e) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return e.code() == PG_DISK_FULL;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;
    use sqlx::Connection as _;

    /// A real SQLITE_FULL: a database limited to three pages, and a row
    /// that needs more.
    async fn sqlite_full_error() -> sqlx::Error {
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::raw_sql("CREATE TABLE t (b BLOB); PRAGMA max_page_count = 3;")
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (zeroblob(100000))")
            .execute(&mut c)
            .await
            .expect_err("the database is full")
    }

    #[tokio::test]
    async fn sqlite_full_is_a_full_disk_also_under_context() {
        let e = StoreError::from(sqlite_full_error().await);
        assert!(e.is_disk_full(), "{e:#}");
        // As the ping writer reports it: with context around it.
        let wrapped = StoreError::Other(
            Err::<(), _>(sqlite_full_error().await)
                .context("cannot write to SQLite")
                .unwrap_err(),
        );
        assert!(wrapped.is_disk_full(), "{wrapped:#}");
    }

    #[tokio::test]
    async fn other_failures_are_not_a_full_disk() {
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        let syntax = sqlx::query("SELEC 1").execute(&mut c).await.unwrap_err();
        assert!(!StoreError::from(syntax).is_disk_full());
        let missing = sqlx::query("SELECT * FROM nowhere")
            .execute(&mut c)
            .await
            .unwrap_err();
        assert!(!StoreError::from(missing).is_disk_full());
        assert!(!StoreError::NotFound.is_disk_full());
        assert!(!StoreError::NotLeader.is_disk_full());
        assert!(!StoreError::Other(anyhow::anyhow!("database or disk is full")).is_disk_full());
        assert!(!StoreError::from(sqlx::Error::PoolTimedOut).is_disk_full());
    }
}
