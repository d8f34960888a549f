//! The store operations behind the management API, on both backends:
//! updating and deleting checks, ping pages, API keys.

mod common;

use std::sync::Arc;

use common::stores::{create_api_check, open, spec};
use common::Backend;
use overdue::config::Config;
use overdue::domain::check::Methods;
use overdue::domain::fold::Ping;
use overdue::domain::ping::PingKind;
use overdue::store::keys::ApiKeyRecord;
use overdue::store::{CheckSource, Store, StoreError};

fn ping(check_id: i64, at: i64, kind: PingKind, method: &str) -> Ping {
    Ping {
        method: method.to_string(),
        body: format!("ping {at}").into_bytes(),
        ..Ping::new(check_id, at, kind)
    }
}

both_backends!(update_and_delete_checks, |backend| async move {
    let (db, store) = open(backend).await;
    let c = store
        .create_check(
            &spec(r#"{"slug":"a","interval":"5m"}"#),
            CheckSource::Config,
            1,
        )
        .await
        .unwrap();
    create_api_check(&store, r#"{"slug":"b"}"#, 1).await;
    let mut new = spec(r#"{"slug":"a2","cron":"0 3 * * *","methods":"POST","labels":{"x":"y"}}"#);
    new.uuid = Some(c.uuid);
    store.update_check(c.id, &new, 5).await.unwrap();
    let got = store.check_by_uuid(c.uuid).await.unwrap();
    assert_eq!(got.spec, new);
    assert_eq!(got.source, "config", "an update keeps the source");
    // The ping writer sees the new flags at once: a GET to a POST-only check is ignored.
    store
        .append_pings(&[ping(c.id, 10, PingKind::Success, "GET")])
        .await
        .unwrap();
    store.fold(1000).await.unwrap();
    let pings = store.list_pings(c.id, 10).await.unwrap();
    assert_eq!(pings[0].kind, PingKind::Ignored);
    assert_eq!(got.spec.methods, Methods::Post);
    // A taken slug is a conflict; a missing check is not found.
    let taken = spec(r#"{"slug":"b"}"#);
    assert!(matches!(
        store.update_check(c.id, &taken, 6).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.update_check(9999, &taken, 6).await,
        Err(StoreError::NotFound)
    ));

    let logged = format!("SELECT COUNT(*) FROM pings WHERE check_id = {}", c.id);
    assert_eq!(db.count(&logged).await, 1);
    store.delete_check(c.id).await.unwrap();
    // The ping log has no foreign key: deleting the check deletes its pings.
    assert_eq!(db.count(&logged).await, 0);
    assert!(matches!(
        store.check_by_uuid(c.uuid).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.check_ref_by_slug("a2").await.unwrap(), None);
    assert!(matches!(
        store.delete_check(c.id).await,
        Err(StoreError::NotFound)
    ));
    // Pings to a deleted check still in the inbox are dropped, not an error.
    store
        .append_pings(&[ping(c.id, 20, PingKind::Success, "POST")])
        .await
        .unwrap();
    store.fold(1000).await.unwrap();
    assert_eq!(store.list_checks().await.unwrap().len(), 1);
});

both_backends!(
    batches_of_every_size_are_logged_whole,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let c = create_api_check(&store, r#"{"slug":"sizes"}"#, 1).await;
        // One ping, the largest batch with an INSERT of its own size (64), and
        // batches padded up to 128 and 256 rows on SQLite.
        let mut sent = 0;
        for size in [1, 64, 65, 200] {
            let batch: Vec<Ping> = (sent + 1..=sent + size)
                .map(|i| ping(c.id, i, PingKind::Success, "GET"))
                .collect();
            store.append_pings(&batch).await.unwrap();
            store.fold(100_000).await.unwrap();
            sent += size;
        }
        let logged = store.list_pings_before(c.id, None, 1_000).await.unwrap();
        assert_eq!(logged.len(), 330);
        for (i, p) in logged.iter().rev().enumerate() {
            let n = i as i64 + 1;
            assert_eq!((p.n, p.at), (n, n), "ping {n}");
            assert_eq!(p.body, format!("ping {n}").into_bytes());
        }
        assert_eq!(
            store.check_by_uuid(c.uuid).await.unwrap().summary.n_pings,
            330
        );
    }
);

both_backends!(pings_in_pages, |backend| async move {
    let (_db, store) = open(backend).await;
    let c = create_api_check(&store, r#"{"slug":"p"}"#, 1).await;
    let batch: Vec<Ping> = (1..=5)
        .map(|i| ping(c.id, i * 10, PingKind::Success, "GET"))
        .collect();
    store.append_pings(&batch[..3]).await.unwrap();
    store.fold(1000).await.unwrap();
    // Two still in the inbox: pages read them too.
    store.append_pings(&batch[3..]).await.unwrap();
    let ns =
        |v: Vec<overdue::domain::fold::PingRecord>| v.into_iter().map(|p| p.n).collect::<Vec<_>>();
    assert_eq!(
        ns(store.list_pings_before(c.id, None, 2).await.unwrap()),
        [5, 4]
    );
    assert_eq!(
        ns(store.list_pings_before(c.id, Some(4), 2).await.unwrap()),
        [3, 2]
    );
    assert_eq!(
        ns(store.list_pings_before(c.id, Some(2), 2).await.unwrap()),
        [1]
    );
    assert_eq!(
        ns(store.list_pings_before(c.id, Some(5), 10).await.unwrap()),
        [4, 3, 2, 1]
    );
    assert_eq!(
        ns(store.list_pings(c.id, 100).await.unwrap()),
        [5, 4, 3, 2, 1]
    );
});

both_backends!(api_keys_are_stored_as_hashes, |backend| async move {
    let (_db, store) = open(backend).await;
    assert!(store.list_api_keys().await.unwrap().is_empty());
    let k = ApiKeyRecord {
        id: "k1".into(),
        name: "ci".into(),
        scope: "read".into(),
        sha256: "ab".repeat(32),
        created_at: 7,
    };
    store.put_api_key(&k).await.unwrap();
    let got = store
        .api_key_by_hash(&"ab".repeat(32))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            got.id.as_str(),
            got.name.as_str(),
            got.scope.as_str(),
            got.created_at
        ),
        ("k1", "ci", "read", 7)
    );
    assert!(store
        .api_key_by_hash(&"cd".repeat(32))
        .await
        .unwrap()
        .is_none());
    let mut dup = k.clone();
    dup.id = "k2".into();
    assert!(matches!(
        store.put_api_key(&dup).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.list_api_keys().await.unwrap().len(), 1);
    store.delete_api_key("k1").await.unwrap();
    assert!(matches!(
        store.delete_api_key("k1").await,
        Err(StoreError::NotFound)
    ));
});

/// Folds one ping and returns how it was logged.
async fn fold_one(store: &Arc<dyn Store>, p: Ping) -> overdue::domain::fold::PingRecord {
    let check_id = p.check_id;
    store.append_pings(&[p]).await.unwrap();
    store.fold(1000).await.unwrap();
    store.list_pings(check_id, 1).await.unwrap().remove(0)
}

// A fold works from what the check is now, not from what an earlier fold
// left: PostgreSQL keeps the checks it folded in memory (FoldCache), and every
// other change to them must be seen.
both_backends!(
    folds_see_every_change_made_since_the_last_fold,
    |backend| async move {
        let (_db, store) = open(backend).await;
        let c = store
            .create_check(
                &spec(r#"{"slug":"c","manual_resume":true}"#),
                CheckSource::Api,
                1,
            )
            .await
            .unwrap();
        let logged = fold_one(&store, ping(c.id, 10, PingKind::Success, "GET")).await;
        assert_eq!(logged.kind, PingKind::Success);

        // Paused with manual resume: a ping is ignored and does not resume it.
        store.set_paused(c.id, true, 15).await.unwrap();
        let logged = fold_one(&store, ping(c.id, 20, PingKind::Success, "GET")).await;
        assert_eq!(logged.kind, PingKind::Ignored, "the fold saw the pause");
        assert!(store.check_by_uuid(c.uuid).await.unwrap().paused);
        store.set_paused(c.id, false, 25).await.unwrap();

        // Only POST now: a GET is ignored.
        let mut post_only = spec(r#"{"slug":"c","manual_resume":true,"methods":"POST"}"#);
        post_only.uuid = Some(c.uuid);
        store.update_check(c.id, &post_only, 25).await.unwrap();
        let logged = fold_one(&store, ping(c.id, 30, PingKind::Success, "GET")).await;
        assert_eq!(
            logged.kind,
            PingKind::Ignored,
            "the fold saw the new methods"
        );

        // A run timed out after the fold that opened it: the next success
        // closes no run.
        let rid = uuid::Uuid::new_v4();
        let start = Ping {
            rid: Some(rid),
            ..ping(c.id, 40, PingKind::Start, "POST")
        };
        store.append_pings(&[start]).await.unwrap();
        // The run's id as the evaluator learns it.
        let folded = store.fold(1000).await.unwrap();
        let run_id = folded.touched[0].summary.open_runs[0].id;
        assert!(store
            .time_out_run(c.id, run_id, 50)
            .await
            .unwrap()
            .is_some());
        store
            .append_pings(&[ping(c.id, 60, PingKind::Success, "POST")])
            .await
            .unwrap();
        store.fold(1000).await.unwrap();
        // As written: SQLite's readers replay the pings since its last round
        // of writes, and a time-out is not a ping.
        store.flush_folds().await.unwrap();
        let logged = store.list_pings(c.id, 1).await.unwrap().remove(0);
        assert_eq!(logged.duration_ms, None, "the fold saw the time-out");
        let check = store.check_by_uuid(c.uuid).await.unwrap();
        assert!(check.summary.open_runs.is_empty());
        assert_eq!(check.summary.n_pings, 5);
    }
);

/// Another replica's writes, including its own folds (after a change of
/// leader), are seen by the next fold here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_folds_see_what_another_replica_wrote() {
    common::need_postgres();
    let (db, a) = open(Backend::Postgres).await;
    let config = Config::from_toml(&db.config_toml("")).unwrap();
    let b = overdue::store::open(config.database()).await.unwrap();
    let c = a
        .create_check(
            &spec(r#"{"slug":"r","manual_resume":true}"#),
            CheckSource::Api,
            1,
        )
        .await
        .unwrap();
    fold_one(&a, ping(c.id, 10, PingKind::Success, "GET")).await;
    // B folds pings of its own: A must count them.
    fold_one(&b, ping(c.id, 20, PingKind::Success, "GET")).await;
    fold_one(&b, ping(c.id, 30, PingKind::Success, "GET")).await;
    let logged = fold_one(&a, ping(c.id, 40, PingKind::Success, "GET")).await;
    assert_eq!(logged.n, 4, "A's fold counted B's pings");
    // B pauses the check: A's next fold ignores the ping.
    b.set_paused(c.id, true, 45).await.unwrap();
    let logged = fold_one(&a, ping(c.id, 50, PingKind::Success, "GET")).await;
    assert_eq!(logged.kind, PingKind::Ignored);
    // A change made outside overdue (an operator's UPDATE) counts too.
    db.sql(&format!(
        "UPDATE checks SET paused = FALSE WHERE id = {}",
        c.id
    ))
    .await;
    let logged = fold_one(&a, ping(c.id, 60, PingKind::Success, "GET")).await;
    assert_eq!(logged.kind, PingKind::Success);
    let check = a.check_by_uuid(c.uuid).await.unwrap();
    assert_eq!((check.summary.n_pings, check.paused), (6, false));
    // Another history (a restore, a failover that lost commits) whose
    // counter is where A's last fold left it: the token tells them apart.
    db.sql(&format!(
        "UPDATE checks SET paused = TRUE WHERE id = {}; \
         UPDATE fold_epoch SET n = n - 1, token = 'another history'",
        c.id
    ))
    .await;
    let logged = fold_one(&a, ping(c.id, 70, PingKind::Success, "GET")).await;
    assert_eq!(logged.kind, PingKind::Ignored);
}

/// A fold bumps `fold_epoch` once, whatever it writes: were its own writes
/// to bump it too, every fold would find its copy stale and read every check
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_a_fold_bumps_the_fold_epoch_once() {
    common::need_postgres();
    let (db, store) = open(Backend::Postgres).await;
    let c = create_api_check(&store, r#"{"slug":"e"}"#, 1).await;
    store.set_paused(c.id, true, 5).await.unwrap();
    let before = db.count("SELECT n FROM fold_epoch").await;
    // The ping resumes the check: the fold writes checks and check_state.
    fold_one(&store, ping(c.id, 10, PingKind::Success, "GET")).await;
    assert!(!store.check_by_uuid(c.uuid).await.unwrap().paused);
    assert_eq!(db.count("SELECT n FROM fold_epoch").await, before + 1);
}
