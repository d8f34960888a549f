//! Item floors (`min_items`, SPEC §3.3) and runs that finish too fast
//! (`min_runtime`, SPEC §3.4), end to end: the real server, pings over HTTP,
//! what the APIs, the job guard and a real webhook receiver see.

mod common;

use std::time::Duration;

use common::sinks::WebhookSink;
use common::{Backend, TestDb, TestServer};
use serde_json::{json, Value};

async fn status(s: &TestServer, uuid: &str) -> (Value, Value) {
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    (v["status"].clone(), v["reason"].clone())
}

fn pair(status: &str, reason: Value) -> (Value, Value) {
    (json!(status), reason)
}

both_backends!(
    a_floor_stalls_with_low_items_and_recovers,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(
                json!({"slug": "etl", "interval": "1h", "min_items": 10, "min_items_runs": 2}),
            )
            .await;
        assert_eq!(
            (c["min_items"].clone(), c["min_items_runs"].clone()),
            (json!(10), json!(2))
        );
        let uuid = c["uuid"].as_str().unwrap().to_string();
        s.ping(&format!("/ping/{uuid}?items=3")).await;
        assert_eq!(status(&s, &uuid).await, pair("up", Value::Null));
        s.ping(&format!("/ping/{uuid}")).await; // no items: neither extends nor breaks
        assert_eq!(status(&s, &uuid).await, pair("up", Value::Null));
        s.ping(&format!("/ping/{uuid}?items=4")).await;
        assert_eq!(status(&s, &uuid).await, pair("stalled", json!("low_items")));
        // The evaluator records it, with its reason.
        let flips = s
            .json_until(&format!("/api/v1/checks/{uuid}/flips"), |f| {
                f["flips"][0]["to"] == "stalled"
            })
            .await;
        assert_eq!(flips["flips"][0]["reason"], "low_items");
        // v3 reports stalled as down, with the floor as extra fields.
        let v3 = s.get_json(&format!("/api/v3/checks/{uuid}")).await;
        assert_eq!(v3["status"], "down");
        assert_eq!(
            (v3["min_items"].clone(), v3["min_items_runs"].clone()),
            (json!(10), json!(2))
        );
        s.ping(&format!("/ping/{uuid}?items=12")).await;
        assert_eq!(status(&s, &uuid).await, pair("up", Value::Null));
        s.stop().await;
    }
);

both_backends!(zero_items_is_named_before_low_items, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"interval": "1h", "min_items": 10, "zero_items_runs": 2}))
        .await;
    assert_eq!(c["min_items_runs"], 1, "defaults to 1 with min_items");
    let uuid = c["uuid"].as_str().unwrap().to_string();
    s.ping(&format!("/ping/{uuid}?items=0")).await;
    assert_eq!(status(&s, &uuid).await, pair("stalled", json!("low_items")));
    s.ping(&format!("/ping/{uuid}?items=0")).await;
    assert_eq!(
        status(&s, &uuid).await,
        pair("stalled", json!("zero_items"))
    );
    s.stop().await;
});

both_backends!(
    a_run_that_finishes_too_fast_is_a_failure,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "backup", "interval": "1h", "min_runtime": "5s"}))
            .await;
        assert_eq!(c["min_runtime"], "5s");
        let uuid = c["uuid"].as_str().unwrap().to_string();
        s.ping(&format!("/ping/{uuid}/start")).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        s.ping(&format!("/ping/{uuid}?items=7")).await;
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(
            (&v["status"], &v["reason"]),
            (&json!("down"), &json!("failed")),
            "{v}"
        );
        assert!(v["last_success"].is_null(), "{v}");
        assert!(v["last_items"].is_null(), "its items are not counted: {v}");
        let runs = s.get_json(&format!("/api/v1/checks/{uuid}/runs")).await;
        assert_eq!(runs["runs"][0]["outcome"], "failed", "{runs}");
        assert_eq!(runs["runs"][0]["reason"], "finished too fast", "{runs}");
        // The job guard's slot is still to do.
        let d = s.get_json(&format!("/ping/{uuid}/due")).await;
        assert_eq!(
            (&d["due"], &d["reason"]),
            (&json!(true), &json!("due")),
            "{d}"
        );
        // A success without a start is judged as before, and recovers.
        s.ping(&format!("/ping/{uuid}")).await;
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "up", "{v}");
        assert!(v["last_success"].is_string());
        s.stop().await;
    }
);

both_backends!(
    bad_floors_and_min_runtimes_are_refused,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        for (body, field) in [
            (json!({"min_items": 0}), "min_items"),
            (json!({"min_items": "ten"}), "min_items"),
            (
                json!({"min_items": 5, "min_items_runs": 1001}),
                "min_items_runs",
            ),
            (json!({"min_items_runs": 2}), "min_items_runs"),
            (json!({"min_runtime": "0s"}), "min_runtime"),
            (
                json!({"min_runtime": "1h", "max_runtime": "10m"}),
                "min_runtime",
            ),
        ] {
            s.assert_create_refused(&body, field).await;
        }
        // PATCH removes the floor with min_items alone (its runs default).
        let c = s.create_check(json!({"slug": "f", "min_items": 3})).await;
        let r = s
            .client
            .patch(s.url("/api/v1/checks/f"))
            .json(&json!({"min_items": null}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert!(
            v["min_items"].is_null() && v["min_items_runs"].is_null(),
            "{v}"
        );
        assert_eq!(c["min_items_runs"], 1);
        // v3 takes the same fields, checked the same way.
        let r = s
            .client
            .post(s.url(&format!("/api/v3/checks/{}", c["uuid"].as_str().unwrap())))
            .json(&json!({"min_items": 4, "min_runtime": "2s"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v3: Value = r.json().await.unwrap();
        assert_eq!(
            (v3["min_items"].clone(), v3["min_runtime"].clone()),
            (json!(4), json!("2s"))
        );
        let r = s
            .client
            .post(s.url(&format!("/api/v3/checks/{}", c["uuid"].as_str().unwrap())))
            .json(&json!({"min_items": 0}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        assert!(r.text().await.unwrap().contains("min_items"));
        s.stop().await;
    }
);

both_backends!(a_low_items_alert_carries_its_reason, |backend| async move {
    let hook = WebhookSink::start().await;
    let toml = hook.hook_toml(
        r#"group_wait = "100ms"
"#,
    );
    let s = TestServer::start(backend, &toml).await;
    let c = s
        .create_check(json!({"slug": "feed", "interval": "1h", "min_items": 10}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    s.ping(&format!("/ping/{uuid}?items=2")).await;
    let calls = hook.wait_for(1).await;
    let body = calls[0].json();
    let alert = &body["alerts"][0];
    assert_eq!(alert["status"], "firing", "{body}");
    assert_eq!(alert["labels"]["check"], "feed", "{body}");
    assert_eq!(alert["labels"]["status"], "stalled", "{body}");
    assert_eq!(alert["labels"]["reason"], "low_items", "{body}");
    s.stop().await;
});

/// Applies the migrations from before stalled carried a reason (up to 0014).
async fn migrate_to_0014(db: &TestDb) {
    use sqlx::Connection;
    let dir = match db.backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let path = format!("{}/migrations/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut m = sqlx::migrate::Migrator::new(std::path::Path::new(&path))
        .await
        .unwrap();
    m.migrations = m
        .migrations
        .iter()
        .filter(|x| x.version <= 14)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    match db.backend {
        Backend::Sqlite => {
            let opts: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
            let mut c = sqlx::SqliteConnection::connect_with(&opts.create_if_missing(true))
                .await
                .unwrap();
            m.run_direct(&mut c).await.unwrap();
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            m.run_direct(&mut c).await.unwrap();
        }
    }
}

both_backends!(
    an_upgrade_names_the_reason_of_stalled_rows,
    |backend| async move {
        let db = TestDb::new(backend).await;
        migrate_to_0014(&db).await;
        // Before 0015 only the zero-items rule stalled a check, without a reason.
        db.sql(
            "INSERT INTO checks (id, uuid, created_at, updated_at) VALUES \
               (1, '7f1c9a52-4a43-4c1b-9f0e-1d2e3f4a5b6c', 0, 0), \
               (2, '8f1c9a52-4a43-4c1b-9f0e-1d2e3f4a5b6c', 0, 0); \
             INSERT INTO check_state (check_id) VALUES (1), (2); \
             INSERT INTO check_status (check_id, status, reason, since) VALUES \
               (1, 'stalled', NULL, 5), (2, 'late', NULL, 5); \
             INSERT INTO flips (check_id, at, old_status, new_status, reason, recorded_at) VALUES \
               (1, 5, 'up', 'stalled', NULL, 5), (2, 5, 'up', 'late', NULL, 5); \
             INSERT INTO incidents (check_id, opened_at, status, reason) VALUES \
               (1, 5, 'stalled', NULL);",
        )
        .await;
        let config = overdue::config::Config::from_toml(&db.config_toml("")).unwrap();
        overdue::store::migrate(config.database()).await.unwrap();
        for (query, want) in [
            (
                "SELECT COUNT(*) FROM check_status WHERE reason = 'zero_items'",
                1,
            ),
            ("SELECT COUNT(*) FROM check_status WHERE reason IS NULL", 1),
            ("SELECT COUNT(*) FROM flips WHERE reason = 'zero_items'", 1),
            ("SELECT COUNT(*) FROM flips WHERE reason IS NULL", 1),
            (
                "SELECT COUNT(*) FROM incidents WHERE reason = 'zero_items'",
                1,
            ),
            (
                "SELECT COUNT(*) FROM check_state WHERE low_streak_runs = 0",
                2,
            ),
        ] {
            assert_eq!(db.count(query).await, want, "{query}");
        }
    }
);
