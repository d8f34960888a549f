//! The store operations behind the management API, on both backends:
//! updating and deleting checks, ping pages, API keys.

mod common;

use std::sync::Arc;

use common::{Backend, TestDb};
use overdue::config::Config;
use overdue::domain::check::{CheckInput, CheckSpec, Methods};
use overdue::domain::ping::PingKind;
use overdue::store::keys::ApiKeyRecord;
use overdue::store::{CheckSource, NewPing, Store, StoreError};

async fn open(backend: Backend) -> (TestDb, Arc<dyn Store>) {
    let db = TestDb::new(backend).await;
    let config = Config::from_toml(&db.config_toml("")).unwrap();
    let store = overdue::store::open(&config).await.unwrap();
    (db, store)
}

fn spec(json: &str) -> CheckSpec {
    CheckSpec::from_input(serde_json::from_str::<CheckInput>(json).unwrap()).unwrap()
}

fn ping(check_id: i64, at: i64, kind: PingKind, method: &str) -> NewPing {
    NewPing {
        check_id,
        at,
        kind,
        exit_status: None,
        items: None,
        rid: None,
        method: method.to_string(),
        remote_addr: None,
        user_agent: None,
        scheme: "http",
        body: format!("ping {at}").into_bytes(),
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
    store
        .create_check(&spec(r#"{"slug":"b"}"#), CheckSource::Api, 1)
        .await
        .unwrap();
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
        let c = store
            .create_check(&spec(r#"{"slug":"sizes"}"#), CheckSource::Api, 1)
            .await
            .unwrap();
        // One ping, the largest batch with an INSERT of its own size (64), and
        // batches padded up to 128 and 256 rows on SQLite.
        let mut sent = 0;
        for size in [1, 64, 65, 200] {
            let batch: Vec<NewPing> = (sent + 1..=sent + size)
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
    let c = store
        .create_check(&spec(r#"{"slug":"p"}"#), CheckSource::Api, 1)
        .await
        .unwrap();
    let batch: Vec<NewPing> = (1..=5)
        .map(|i| ping(c.id, i * 10, PingKind::Success, "GET"))
        .collect();
    store.append_pings(&batch[..3]).await.unwrap();
    store.fold(1000).await.unwrap();
    // Two still in the inbox: pages read them too.
    store.append_pings(&batch[3..]).await.unwrap();
    let ns = |v: Vec<overdue::store::PingRecord>| v.into_iter().map(|p| p.n).collect::<Vec<_>>();
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
