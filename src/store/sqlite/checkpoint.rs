//! The checkpointer: copies the WAL into the database on its own connection,
//! so that no commit of the ping writer waits for a checkpoint's fsyncs.

use std::time::Duration;

use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use tokio::sync::Mutex;

use super::writer::Writer;

/// How far the WAL may grow before a connection that commits checkpoints it
/// itself (SQLite's `wal_autocheckpoint`, in pages; its default is 1,000),
/// on every connection. Below this the checkpointer does it on its own
/// connection: a checkpoint ends with fsyncs, 5–30 ms on the benchmark
/// machine, and a commit that checkpoints holds every ping behind it (the
/// ping writer's own, and the other writes that take the writer's lock).
/// It is a backstop: under a sustained load the checkpointer starts the WAL
/// over long before (see [`RESTART_WAL_PAGES`]).
pub(super) const AUTOCHECKPOINT_PAGES: u32 = 16_384;
/// Once the WAL holds this many pages, the checkpointer finishes its
/// checkpoint holding the writer, so that the writer's next transaction
/// starts the WAL over. Its own PASSIVE checkpoints never see the WAL
/// complete while pings keep coming, and the WAL could only start over when
/// a commit checkpointed it at [`AUTOCHECKPOINT_PAGES`], which held every
/// ping for 31–43 ms (BENCHMARKS.md). Held by the checkpointer, the writer
/// waits only for what was written since its last checkpoint.
const RESTART_WAL_PAGES: i64 = 4_096;
/// How long the checkpointer waits after a ping write before it
/// checkpoints, so that one checkpoint covers many batches.
const CHECKPOINT_AFTER: Duration = Duration::from_millis(200);
/// How often the checkpointer looks anyway, for the writes that do not
/// wake it (the API, the evaluator, heartbeats); a checkpoint with nothing
/// to copy only reads the WAL's header.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// Checkpoints that failed: logged once per interval while they repeat.
static FAILED: crate::log_throttle::Throttled = crate::log_throttle::Throttled::every_10s();

/// Checkpoints the WAL on its own connection (and thread) a little after the
/// ping writer committed, and every [`CHECKPOINT_EVERY`], so that no commit
/// waits for the fsyncs. PASSIVE: it never waits for a reader or the writer,
/// and the writer goes on appending meanwhile. Once the WAL is long, it
/// copies the rest holding the writer, so that the WAL starts over
/// ([`RESTART_WAL_PAGES`]).
pub(super) async fn checkpointer(
    mut conn: SqliteConnection,
    writer: std::sync::Arc<Mutex<Writer>>,
    wrote: std::sync::Arc<tokio::sync::Notify>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let pings = tokio::select! {
            _ = stop.cancelled() => break,
            _ = wrote.notified() => true,
            _ = tokio::time::sleep(CHECKPOINT_EVERY) => false,
        };
        if pings {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(CHECKPOINT_AFTER) => {}
            }
        }
        if let Err(e) = checkpoint(&mut conn, &writer, RESTART_WAL_PAGES).await {
            // After every batch of pings while the disk is full: throttled.
            if let Some(suppressed) = FAILED.hit() {
                tracing::warn!(error = %e, suppressed, "cannot checkpoint the SQLite WAL; a commit will (while this repeats it is logged every 10s, suppressed counting the rest)");
            }
        }
    }
    let _ = conn.close().await;
}

/// One PASSIVE checkpoint; if the WAL then holds `restart_pages` or more,
/// a second one while the writer is held, which copies what was written
/// meanwhile and leaves the WAL complete: the writer's next transaction
/// starts it over (unless a reader still reads an older snapshot; then a
/// later round does). Returns the WAL's length in pages as the last
/// checkpoint found it, and how many of them are copied.
async fn checkpoint(
    conn: &mut SqliteConnection,
    writer: &Mutex<Writer>,
    restart_pages: i64,
) -> Result<(i64, i64), sqlx::Error> {
    const SQL: &str = "PRAGMA wal_checkpoint(PASSIVE)";
    // (busy, pages in the WAL, pages copied)
    let (_, pages, copied): (i64, i64, i64) = sqlx::query_as(SQL).fetch_one(&mut *conn).await?;
    if pages < restart_pages {
        return Ok((pages, copied));
    }
    let _held = writer.lock().await;
    let (_, pages, copied): (i64, i64, i64) = sqlx::query_as(SQL).fetch_one(&mut *conn).await?;
    Ok((pages, copied))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::check::CheckSpec;
    use crate::domain::fold::Ping;
    use crate::domain::ping::PingKind;
    use crate::settings as config;
    use crate::store::checks::CheckStore;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{CheckSource, Store};

    /// Every connection leaves checkpoints to the checkpointer until the WAL
    /// is large: at SQLite's default (1,000 pages), the ping writer, and the
    /// writes that hold its lock (status changes, retention, edits), each
    /// ran a checkpoint's fsyncs while pings waited.
    #[tokio::test]
    async fn no_connection_checkpoints_a_small_wal() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("o.db").display());
        let store = SqliteStore::connect(&url, config::SqliteSynchronous::Normal)
            .await
            .unwrap();
        let pages = |n: i64| assert_eq!(n, i64::from(AUTOCHECKPOINT_PAGES));
        let mut w = store.writer.lock().await;
        pages(
            sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(&mut w.conn)
                .await
                .unwrap(),
        );
        drop(w);
        pages(
            sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(&store.pool)
                .await
                .unwrap(),
        );
    }

    /// Under a steady stream of appends a PASSIVE checkpoint seldom finds
    /// the WAL complete, and a WAL that is never complete never starts over.
    /// The checkpointer's second checkpoint, holding the writer, must leave
    /// it complete, and the WAL must then start over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_wal_is_completed_with_the_writer_held_and_starts_over() {
        use crate::domain::check::CheckInput;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("o.db").display());
        let store = std::sync::Arc::new(
            SqliteStore::connect(&url, config::SqliteSynchronous::Normal)
                .await
                .unwrap(),
        );
        let input: CheckInput = serde_json::from_str(r#"{"slug": "steady"}"#).unwrap();
        let spec = CheckSpec::from_input(input).unwrap();
        let check = store
            .create_check(&spec, CheckSource::Api, 0)
            .await
            .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let appender = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            async move {
                let mut n = 0_i64;
                while !stop.is_cancelled() {
                    let ping = Ping::new(check.id, 1_000 + n, PingKind::Success);
                    store.append_pings(&[ping]).await.unwrap();
                    n += 1;
                }
                n
            }
        });
        let mut conn = SqliteConnection::connect(&url).await.unwrap();
        let mut lengths = Vec::new();
        for _ in 0..30 {
            let (pages, copied) = checkpoint(&mut conn, &store.writer, 1).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            if pages < 0 {
                // The store's own checkpointer was at it (SQLITE_BUSY).
                continue;
            }
            assert_eq!(
                copied, pages,
                "the WAL is complete after a restart checkpoint"
            );
            lengths.push(pages);
        }
        stop.cancel();
        let appended = appender.await.unwrap();
        assert!(appended > 30, "only {appended} appends ran meanwhile");
        // A WAL that does not start over only grows.
        assert!(lengths.len() >= 10, "too few checkpoints ran: {lengths:?}");
        assert!(
            lengths.windows(2).any(|w| w[1] < w[0]),
            "the WAL never started over: {lengths:?}"
        );
    }
}
