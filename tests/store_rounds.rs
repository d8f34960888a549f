//! SQLite folds pings in memory as they are appended to the log, and writes
//! the summaries and the ping index in rounds sorted by check
//! (src/store/sqlite/): reads, restarts and deletes in the middle of a
//! round must see every ping exactly once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::stores::{open_on as open, spec};
use common::{Backend, TestDb};
use overdue::domain::check::Check;
use overdue::domain::fold::Ping;
use overdue::domain::ping::PingKind;
use overdue::store::{CheckSource, Store};

fn ping(check_id: i64, at: i64, items: i64) -> Ping {
    Ping {
        items: Some(items as u64),
        ..Ping::new(check_id, at, PingKind::Success)
    }
}

async fn create(store: &Arc<dyn Store>, slug: &str) -> Check {
    store
        .create_check(
            &spec(&format!(r#"{{"slug":"{slug}"}}"#)),
            CheckSource::Api,
            0,
        )
        .await
        .unwrap()
}

/// Appends `n` pings to a check, items 1..=n, in batches of 100.
async fn append(store: &Arc<dyn Store>, check_id: i64, n: i64) {
    let pings: Vec<Ping> = (1..=n).map(|i| ping(check_id, 1_000 + i, i)).collect();
    for batch in pings.chunks(100) {
        store.append_pings(batch).await.unwrap();
    }
}

/// Folds everything in memory and leaves a round started with only its
/// first chunk written.
async fn fold_and_write_one_chunk(store: &Arc<dyn Store>) {
    let first = store.fold(100_000).await.unwrap();
    assert!(!first.more);
    if !first.writing {
        // A round starts once a second.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let next = store.fold(100_000).await.unwrap();
        assert!(next.writing, "no round started");
    }
}

/// Two checks, "big" with 2,500 pings (more than one chunk holds, so its
/// rows span chunks) and "small" with 10, folded, with a round started and
/// only its first chunk written.
async fn half_written_round(store: &Arc<dyn Store>) -> (Check, Check) {
    let big = create(store, "big").await;
    let small = create(store, "small").await;
    append(store, big.id, 2_500).await;
    append(store, small.id, 10).await;
    fold_and_write_one_chunk(store).await;
    (big, small)
}

/// The check's pings, exactly once each, numbered 1..=n with items 1..=n.
async fn assert_pings(store: &Arc<dyn Store>, check: &Check, n: i64) {
    let read = store.check_by_uuid(check.uuid).await.unwrap();
    assert_eq!(read.summary.n_pings, n, "n_pings of {}", check.id);
    assert_eq!(read.summary.last_items, Some(n));
    let mut pings = store.list_pings(check.id, 10_000).await.unwrap();
    pings.reverse();
    let numbers: Vec<i64> = pings.iter().map(|p| p.n).collect();
    let items: Vec<i64> = pings.iter().map(|p| p.items.unwrap()).collect();
    let want: Vec<i64> = (1..=n).collect();
    assert_eq!(numbers, want, "ping numbers of {}", check.id);
    assert_eq!(items, want, "ping items of {}", check.id);
}

#[tokio::test]
async fn reads_see_every_ping_while_a_round_is_half_written() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let (big, small) = half_written_round(&store).await;
    assert_pings(&store, &big, 2_500).await;
    assert_pings(&store, &small, 10).await;
    common::fold_all(&store).await;
    assert_pings(&store, &big, 2_500).await;
    assert_pings(&store, &small, 10).await;
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_round_refolds_only_what_was_not_written() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let (big, small) = half_written_round(&store).await;
    // As after kill -9: what the round had not written is gone from memory.
    drop(store);

    let store = open(&db).await;
    assert_pings(&store, &big, 2_500).await;
    assert_pings(&store, &small, 10).await;
    // The writer starts from every ping: new ones are numbered after them.
    store
        .append_pings(&[ping(big.id, 9_000, 2_501)])
        .await
        .unwrap();
    assert_pings(&store, &big, 2_501).await;
    common::fold_all(&store).await;
    assert_pings(&store, &big, 2_501).await;
    assert_pings(&store, &small, 10).await;
    // And once more after a clean round: nothing is folded twice.
    drop(store);
    let store = open(&db).await;
    common::fold_all(&store).await;
    assert_pings(&store, &big, 2_501).await;
    assert_pings(&store, &small, 10).await;
}

#[tokio::test]
async fn a_check_deleted_in_the_middle_of_a_round_does_not_stop_it() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let (big, small) = half_written_round(&store).await;
    store.delete_check(big.id).await.unwrap();
    common::fold_all(&store).await;
    assert_pings(&store, &small, 10).await;
    store
        .append_pings(&[ping(small.id, 5_000, 11)])
        .await
        .unwrap();
    common::fold_all(&store).await;
    assert_pings(&store, &small, 11).await;
}

#[tokio::test]
async fn an_update_keeps_pings_folded_but_not_yet_written() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let check = create(&store, "edited").await;
    append(&store, check.id, 3).await;
    let f = store.fold(100_000).await.unwrap();
    assert_eq!(f.pings, 3);
    store
        .update_check(check.id, &spec(r#"{"slug":"edited","name":"Edited"}"#), 0)
        .await
        .unwrap();
    store
        .append_pings(&[ping(check.id, 5_000, 4)])
        .await
        .unwrap();
    common::fold_all(&store).await;
    assert_pings(&store, &check, 4).await;
    drop(store);
    let store = open(&db).await;
    common::fold_all(&store).await;
    assert_pings(&store, &check, 4).await;
}

/// A database with `slug`'s two pings folded and written, and its store
/// closed, ready for inbox rows as an older version left them.
async fn stopped_after_two_pings(db: &TestDb, slug: &str) -> Check {
    let store = open(db).await;
    let check = create(&store, slug).await;
    append(&store, check.id, 2).await;
    common::fold_all(&store).await;
    check
}

#[tokio::test]
async fn more_inbox_rows_than_one_insert_takes_are_moved_in_pages() {
    let db = TestDb::new(Backend::Sqlite).await;
    let check = stopped_after_two_pings(&db, "backlog").await;
    // 5,000 rows: more than the largest batch INSERT binds (2,048 pings).
    db.sql(&format!(
        "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 4999) \
         INSERT INTO ping_inbox (id, check_id, at, kind, items, method, scheme) \
         SELECT 1000 + i, {id}, 2001 + i, 'success', 3 + i, 'GET', 'http' FROM s",
        id = check.id
    ))
    .await;
    let store = open(&db).await;
    assert_eq!(db.count("SELECT COUNT(*) FROM ping_inbox").await, 0);
    assert_pings(&store, &check, 5_002).await;
}

#[tokio::test]
async fn deleting_a_check_deletes_its_log_rows_indexed_or_not() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    // "big" has rows in the ping index (first chunk) and rows past it.
    let (big, small) = half_written_round(&store).await;
    assert!(
        db.count(&format!(
            "SELECT COUNT(*) FROM ping_index WHERE check_id = {}",
            big.id
        ))
        .await
            > 0
    );
    store.delete_check(big.id).await.unwrap();
    let left = format!("SELECT COUNT(*) FROM pings WHERE check_id = {}", big.id);
    assert_eq!(db.count(&left).await, 0);
    common::fold_all(&store).await;
    assert_eq!(db.count(&left).await, 0);
    assert_pings(&store, &small, 10).await;
}

#[tokio::test]
async fn inbox_rows_left_by_an_older_version_are_moved_into_the_log() {
    let db = TestDb::new(Backend::Sqlite).await;
    let check = stopped_after_two_pings(&db, "upgraded").await;
    // As an older version left them: accepted, not yet folded. The inbox
    // kept counting from where the log was.
    db.sql(&format!(
        "INSERT INTO ping_inbox (id, check_id, at, kind, items, method, scheme) VALUES \
         (1000, {id}, 2001, 'success', 3, 'GET', 'http'), \
         (1001, {id}, 2002, 'success', 4, 'GET', 'http'), \
         (1002, {id}, 2003, 'success', 5, 'GET', 'http');",
        id = check.id
    ))
    .await;
    let store = open(&db).await;
    assert_eq!(db.count("SELECT COUNT(*) FROM ping_inbox").await, 0);
    assert_pings(&store, &check, 5).await;
    // New pings come after them.
    store
        .append_pings(&[ping(check.id, 3_000, 6)])
        .await
        .unwrap();
    assert_pings(&store, &check, 6).await;
    assert_eq!(
        db.count("SELECT MIN(id) FROM pings WHERE n = 6").await,
        1003
    );
    drop(store);
    let store = open(&db).await;
    assert_pings(&store, &check, 6).await;
}

/// Retention between two chunks of a round: the first chunk indexed pings of
/// "big" whose summary the round has not written yet. They are not in any
/// durable summary, so they stay (a kill -9 now must refold them), and are
/// trimmed like the others once the round is written.
#[tokio::test]
async fn retention_in_the_middle_of_a_round_keeps_what_no_summary_holds() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let (big, small) = half_written_round(&store).await;
    let both = [big.id, small.id];
    store.prune_ping_logs(&both, 5, 100_000).await.unwrap();
    assert_pings(&store, &big, 2_500).await;
    assert_pings(&store, &small, 10).await;
    drop(store);

    let store = open(&db).await;
    assert_pings(&store, &big, 2_500).await;
    common::fold_all(&store).await;
    let deleted = store.prune_ping_logs(&both, 5, 100_000).await.unwrap();
    assert_eq!(deleted, 2_495 + 5);
    let kept: Vec<i64> = store
        .list_pings(big.id, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|p| p.n)
        .collect();
    assert_eq!(kept, [2_500, 2_499, 2_498, 2_497, 2_496]);
    let read = store.check_by_uuid(big.uuid).await.unwrap();
    assert_eq!(read.summary.n_pings, 2_500);
}

/// A round's statement pads its rows to a few fixed sizes (15 index entries
/// to 16, 3 summaries to 4); the padding is never written.
#[tokio::test]
async fn a_round_writes_one_summary_per_check_and_one_index_entry_per_ping() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let mut checks = Vec::new();
    for (slug, n) in [("five", 5), ("three", 3), ("seven", 7)] {
        let check = create(&store, slug).await;
        append(&store, check.id, n).await;
        checks.push((check, n));
    }
    common::fold_all(&store).await;
    assert_eq!(db.count("SELECT COUNT(*) FROM check_state").await, 3);
    assert_eq!(db.count("SELECT COUNT(*) FROM ping_index").await, 15);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM ping_index i JOIN pings p ON p.id = i.id AND p.check_id = i.check_id")
            .await,
        15
    );
    assert_eq!(
        db.count("SELECT through FROM ping_rounds").await,
        db.count("SELECT MAX(id) FROM pings").await
    );
    // The written summaries, read back without the writer's memory.
    drop(store);
    let store = open(&db).await;
    for (check, n) in &checks {
        assert_pings(&store, check, *n).await;
        let written = db
            .count(&format!(
                "SELECT n_pings FROM check_state WHERE check_id = {}",
                check.id
            ))
            .await;
        assert_eq!(written, *n);
    }
}

/// The item history of a check with `items_below_usual`: (local hour, sum,
/// successes) of each bucket, oldest first.
async fn item_hours(db: &TestDb, check_id: i64) -> Vec<(i64, i64, i64)> {
    use sqlx::Connection;
    let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::query_as(
        "SELECT local_hour, items_sum, successes FROM item_hours WHERE check_id = ? \
         ORDER BY local_hour",
    )
    .bind(check_id)
    .fetch_all(&mut c)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_restart_before_the_round_counts_no_success_twice_in_the_item_history() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = open(&db).await;
    let check = store
        .create_check(
            &spec(r#"{"slug":"poller","items_below_usual":0.25,"min_items_runs":2}"#),
            CheckSource::Api,
            0,
        )
        .await
        .unwrap();
    let week = 7 * 86_400_000;
    // Three weeks of 40 items at hour 0 of the week, then two lows.
    let mut pings: Vec<Ping> = (0..3).map(|w| ping(check.id, w * week, 40)).collect();
    pings.push(ping(check.id, 3 * week, 5));
    pings.push(ping(check.id, 3 * week + 60_000, 6));
    store.append_pings(&pings).await.unwrap();
    // Folded and in the log, the buckets written with the pings; no round
    // has written the summary yet.
    store.fold(100_000).await.unwrap();
    let before = item_hours(&db, check.id).await;
    assert_eq!(
        before,
        [(0, 40, 1), (168, 40, 1), (336, 40, 1), (504, 11, 2)]
    );
    let read = store.check_by_uuid(check.uuid).await.unwrap();
    assert_eq!(
        (read.summary.below_streak_runs, read.summary.usual_items),
        (2, Some(40.0)),
        "readers judge the pending pings as the fold did"
    );
    // As after kill -9: the writer folds the log's tail again at start-up.
    drop(store);
    let store = open(&db).await;
    common::fold_all(&store).await;
    assert_eq!(
        item_hours(&db, check.id).await,
        before,
        "nothing counted twice"
    );
    let read = store.check_by_uuid(check.uuid).await.unwrap();
    assert_eq!(read.summary.below_streak_runs, 2);
    assert_eq!(read.summary.usual_items, Some(40.0));
    // A normal count breaks the streak; its bucket takes it once.
    store
        .append_pings(&[ping(check.id, 3 * week + 120_000, 30)])
        .await
        .unwrap();
    common::fold_all(&store).await;
    let read = store.check_by_uuid(check.uuid).await.unwrap();
    assert_eq!(read.summary.below_streak_runs, 0);
    assert_eq!(item_hours(&db, check.id).await[3], (504, 41, 3));
}
