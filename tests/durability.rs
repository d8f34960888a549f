//! A 200 means committed (SPEC §4): acknowledged pings survive kill -9, and a
//! store failure answers 503, never 200, without taking the server down.

mod common;

use common::{client, write_config, Backend, ChildServer, TestDb, TestServer};
use serde_json::{json, Value};

both_backends!(acknowledged_pings_survive_sigkill, |backend| async move {
    let db = TestDb::new(backend).await;
    let config = write_config(db.dir.path(), &db.config_toml(""));
    let http = client();

    let server = ChildServer::spawn(&config);
    let mut uuids = Vec::new();
    for i in 0..20 {
        let r = http
            .post(format!("{}/api/v1/checks", server.base))
            .json(&json!({"slug": format!("job-{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let c: Value = r.json().await.unwrap();
        uuids.push(c["uuid"].as_str().unwrap().to_string());
    }
    // 400 concurrent pings spread over the checks; every one must be acknowledged.
    let mut tasks = Vec::new();
    for i in 0..400usize {
        let url = format!("{}/ping/{}?items={}", server.base, uuids[i % 20], i);
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            http.get(url).send().await.unwrap().status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    server.kill9();

    let server = ChildServer::spawn(&config);
    for (k, uuid) in uuids.iter().enumerate() {
        let c: Value = http
            .get(format!("{}/api/v1/checks/{uuid}", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(c["n_pings"], 20, "{c}");
        // The last ping sent to check k carried items = 380 + k, but pings were
        // concurrent, so only check that the stored last_items is one of them.
        let items = c["last_items"].as_i64().unwrap() as usize;
        assert_eq!(items % 20, k);
        let pings: Value = http
            .get(format!("{}/api/v1/checks/{uuid}/pings", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(pings["pings"].as_array().unwrap().len(), 20);
    }
    // The restarted server keeps counting where the old one stopped.
    let r = http
        .get(format!("{}/ping/{}", server.base, uuids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let c: Value = http
        .get(format!("{}/api/v1/checks/{}", server.base, uuids[0]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(c["n_pings"], 21);
    server.kill9();
});

both_backends!(
    store_failure_answers_503_and_recovers,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let check = s.create_check(json!({"slug": "fragile"})).await;
        let uuid = check["uuid"].as_str().unwrap().to_string();
        assert_eq!(s.ping(&format!("/ping/{uuid}?items=1")).await.0, 200);

        // The table the ping path writes: SQLite appends to the log itself.
        let table = match backend {
            Backend::Sqlite => "pings",
            Backend::Postgres => "ping_inbox",
        };
        s.db.break_inserts(table).await;
        let (status, body) = s.ping(&format!("/ping/{uuid}?items=2")).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("could not be stored"));
        // Nothing of the failed ping was recorded.
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["n_pings"], 1);
        assert_eq!(c["last_items"], 1);

        s.db.repair_inserts(table).await;
        assert_eq!(s.ping(&format!("/ping/{uuid}?items=3")).await.0, 200);
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["n_pings"], 2);
        assert_eq!(c["last_items"], 3);
        let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
        let n: Vec<i64> = pings["pings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["n"].as_i64().unwrap())
            .collect();
        assert_eq!(n, vec![2, 1]);
        s.stop().await;
    }
);

both_backends!(a_failing_fold_loses_nothing, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let check = s.create_check(json!({"slug": "folding"})).await;
    let uuid = check["uuid"].as_str().unwrap().to_string();
    // What folds write cannot take rows (PostgreSQL: the ping log; SQLite:
    // the rounds' ping index): pings are still accepted (committed to the
    // inbox, or the log itself) and read back; nothing is lost once the
    // table works again.
    let table = match backend {
        Backend::Sqlite => "ping_index",
        Backend::Postgres => "pings",
    };
    s.db.break_inserts(table).await;
    for i in 1..=3 {
        assert_eq!(s.ping(&format!("/ping/{uuid}?items={i}")).await.0, 200);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await; // a few failed folds
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(
        (c["n_pings"].as_i64(), c["last_items"].as_i64()),
        (Some(3), Some(3))
    );
    s.db.repair_inserts(table).await;
    assert_eq!(s.ping(&format!("/ping/{uuid}?items=4")).await.0, 200);
    let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
    let n: Vec<i64> = pings["pings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["n"].as_i64().unwrap())
        .collect();
    assert_eq!(n, vec![4, 3, 2, 1]);
    s.stop().await;
});

#[tokio::test]
async fn readiness_reports_the_database() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let r = s.client.get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = s.client.get(s.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "ready");
    s.stop().await;
}
