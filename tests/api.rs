//! The management API: auth scopes, validation errors, JSON errors.

mod common;

use common::api::{api_keys_toml, READ, WRITE};
use common::{Backend, TestServer};
use serde_json::{json, Value};

async fn error_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

both_backends!(scopes_are_enforced, |backend| async move {
    let s = TestServer::start(backend, &api_keys_toml()).await;
    let url = s.url("/api/v1/checks");
    let body = json!({"slug": "a"});

    let (status, e) = error_of(s.client.post(&url).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 401);
    assert_eq!(e["error"]["code"], "unauthorized");
    assert_eq!(e["error"]["message"], "missing API key");

    let (status, e) = error_of(
        s.client
            .post(&url)
            .header("x-api-key", "not-a-key")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, e["error"]["message"].as_str()),
        (401, Some("wrong API key"))
    );

    let (status, e) = error_of(
        s.client
            .post(&url)
            .bearer_auth(READ)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(e["error"]["code"], "forbidden");

    let r = s
        .client
        .post(&url)
        .bearer_auth(WRITE)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();

    // Read keys read, through either header.
    let r = s
        .client
        .get(&url)
        .header("x-api-key", READ)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let list: Value = r.json().await.unwrap();
    // A read key sees the unique key, not the uuid (a ping capability).
    assert_eq!(list["checks"][0]["unique_key"], created["unique_key"]);
    assert!(list["checks"][0].get("uuid").is_none(), "{list}");
    let r = s
        .client
        .get(s.url(&format!(
            "/api/v1/checks/{}",
            created["uuid"].as_str().unwrap()
        )))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Without a key, even reads are refused once keys exist.
    assert_eq!(s.client.get(&url).send().await.unwrap().status(), 401);
});

both_backends!(validation_errors_name_the_field, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let url = s.url("/api/v1/checks");
    let (status, e) = error_of(
        s.client
            .post(&url)
            .json(
                &json!({"interval": "soon", "tz": "Mars/Base", "cron": "0 0 30 2 *",
                          "active_hours": [{"start": "9am", "end": "17:00"}]}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["code"], "invalid");
    let fields: Vec<&str> = e["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"interval"), "{e}");
    // A bad duration says in words what was expected, with examples.
    let interval = e["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == "interval")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        interval,
        "\"soon\" is not a duration like \"5m\" or \"1h30m\": a number was expected at position 0"
    );
    assert!(fields.contains(&"tz"), "{e}");
    assert!(fields.contains(&"active_hours[0]"), "{e}");

    let (status, e) = error_of(
        s.client
            .post(&url)
            .json(&json!({"cron": "0 0 30 2 *"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["fields"][0]["field"], "cron");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("February"),
        "{e}"
    );

    // Wrong JSON types and unknown fields name the field too.
    let (status, e) = error_of(
        s.client
            .post(&url)
            .json(&json!({"failure_threshold": "two"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["fields"][0]["field"], "failure_threshold");
    let (status, e) = error_of(
        s.client
            .post(&url)
            .json(&json!({"intervall": "5m"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("intervall"),
        "{e}"
    );
    let (status, e) = error_of(
        s.client
            .post(&url)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["code"], "bad_request");

    // Conflicts and missing checks.
    s.create_check(json!({"slug": "taken"})).await;
    let (status, e) = error_of(
        s.client
            .post(&url)
            .json(&json!({"slug": "taken"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 409);
    assert!(e["error"]["message"].as_str().unwrap().contains("taken"));
    let (status, e) = error_of(
        s.client
            .get(s.url(&format!("/api/v1/checks/{}", uuid::Uuid::new_v4())))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    // Anything that is not a uuid is a slug.
    let (status, e) = error_of(
        s.client
            .get(s.url("/api/v1/checks/nope"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("nope"),
        "{e}"
    );
    let (status, _) = error_of(s.client.get(s.url("/api/v1/nothing")).send().await.unwrap()).await;
    assert_eq!(status, 404);
});

both_backends!(the_check_resource_round_trips, |backend| async move {
    let s = TestServer::start(backend, "base_url = \"https://overdue.example.com/\"").await;
    let c = s
        .create_check(json!({
            "slug": "hot-topics", "name": "Hot topics", "description": "poller",
            "labels": {"team": "data"}, "cron": "*/5 * * * *", "tz": "Asia/Shanghai",
            "grace": "10m", "active_hours": [{"start": "18:00", "end": "09:00", "days": ["mon-fri"]}],
            "zero_items_after": "30m", "zero_items_runs": 3, "failure_threshold": 2,
            "recovery_threshold": 2, "max_runtime": "1h", "alert_on_overlap": true,
            "manual_resume": true, "methods": "POST"
        }))
        .await;
    let uuid = c["uuid"].as_str().unwrap();
    let got = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    for (k, v) in [
        ("slug", json!("hot-topics")),
        ("name", json!("Hot topics")),
        ("description", json!("poller")),
        ("labels", json!({"team": "data"})),
        ("interval", Value::Null),
        ("cron", json!("*/5 * * * *")),
        ("tz", json!("Asia/Shanghai")),
        ("grace", json!("10m")),
        (
            "active_hours",
            json!([{"start": "18:00", "end": "09:00", "days": ["mon-fri"]}]),
        ),
        ("zero_items_after", json!("30m")),
        ("zero_items_runs", json!(3)),
        ("failure_threshold", json!(2)),
        ("recovery_threshold", json!(2)),
        ("max_runtime", json!("1h")),
        ("alert_on_overlap", json!(true)),
        ("manual_resume", json!(true)),
        ("methods", json!("POST")),
        ("status", json!("new")),
        ("running", json!(false)),
        (
            "ping_url",
            json!(format!("https://overdue.example.com/ping/{uuid}")),
        ),
    ] {
        assert_eq!(got[k], v, "{k}");
    }
});

#[tokio::test]
async fn without_keys_loopback_may_write() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    s.create_check(json!({"slug": "local"})).await;
    s.stop().await;
}
