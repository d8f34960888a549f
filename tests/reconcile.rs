//! Declarative configuration: the checks, receivers, route, silences and API
//! keys of the config file, brought in at start-up and on reload.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::api::send_json;
use common::sinks::WebhookSink;
use common::{config_path, Backend, ChildServer, TestDb, TestServer};
use serde_json::{json, Value};

const WRITE: &str = "write-key-0123456789abcdef";
const LATER: &str = "later-key-0123456789abcdef";

fn key(name: &str, secret: &str) -> String {
    format!("[[api_keys]]\nname = \"{name}\"\nscope = \"write\"\nkey = \"{secret}\"\n")
}

/// `method path` with `key` as a bearer token and `body` as JSON if any:
/// the status and the body of the answer.
async fn call(
    s: &TestServer,
    method: &str,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let req = s
        .client
        .request(method.parse().unwrap(), s.url(path))
        .bearer_auth(key);
    send_json(req, body).await
}

async fn checks(s: &TestServer, key: &str) -> Vec<Value> {
    let (st, v) = call(s, "GET", "/api/v1/checks", key, None).await;
    assert_eq!(st, 200, "{v}");
    v["checks"].as_array().unwrap().clone()
}

fn by_slug<'a>(list: &'a [Value], slug: &str) -> Option<&'a Value> {
    list.iter().find(|c| c["slug"] == slug)
}

const FIRST: &str = r#"
[[receivers]]
name = "r1"
type = "webhook"
url = "http://127.0.0.1:9/r1"

[route]
receiver = "r1"

[[silences]]
matchers = ['team="data"']
duration = "2h"
comment = "maintenance"

[[checks]]
slug = "a"
interval = "1m"

[[checks]]
slug = "b"
interval = "5m"
labels = { team = "data" }
"#;

const SECOND: &str = r#"
[[receivers]]
name = "r1"
type = "webhook"
url = "http://127.0.0.1:9/r1"

[[receivers]]
name = "r2"
type = "webhook"
url = "http://127.0.0.1:9/r2"

[route]
receiver = "r2"

[[silences]]
matchers = ['team="web"']
duration = "1h"
comment = "other maintenance"

[[checks]]
slug = "a"
interval = "2m"

[[checks]]
slug = "c"
cron = "0 3 * * *"

[[checks]]
slug = "api-made"
interval = "1m"
"#;

both_backends!(reload_brings_the_file_in, |backend| async move {
    let db = TestDb::new(backend).await;
    let s = TestServer::start_from_file(db, &format!("{}{FIRST}", key("w", WRITE))).await;
    let path = config_path(&s.db);

    // Start-up created the declared checks.
    let list = checks(&s, WRITE).await;
    assert_eq!(by_slug(&list, "a").unwrap()["source"], "config");
    assert_eq!(by_slug(&list, "b").unwrap()["interval"], "5m");
    let b_uuid = by_slug(&list, "b").unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    // The API may not change what the file declares.
    let (st, e) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        WRITE,
        Some(json!({"interval": "9m"})),
    )
    .await;
    assert_eq!(st, 409, "{e}");
    assert_eq!(
        call(&s, "DELETE", "/api/v1/checks/a", WRITE, None).await.0,
        409
    );
    // … but it may pause it.
    assert_eq!(
        call(&s, "POST", "/api/v1/checks/a/pause", WRITE, None)
            .await
            .0,
        200
    );
    // Checks and silences made through the API.
    let (st, _) = call(
        &s,
        "POST",
        "/api/v1/checks",
        WRITE,
        Some(json!({"slug": "api-made", "interval": "7m"})),
    )
    .await;
    assert_eq!(st, 201);
    let (st, api_silence) = call(
        &s,
        "POST",
        "/api/v1/silences",
        WRITE,
        Some(json!({"matchers": ["team=\"x\""], "duration": "1h", "comment": "by hand"})),
    )
    .await;
    assert_eq!(st, 201, "{api_silence}");

    std::fs::write(
        &path,
        s.db.config_toml(&format!(
            "{}{}{SECOND}",
            key("w", WRITE),
            key("later", LATER)
        )),
    )
    .unwrap();
    let (st, report) = call(&s, "POST", "/api/v1/reload", WRITE, None).await;
    assert_eq!(st, 200, "{report}");
    assert_eq!(report["created"], json!(["c"]));
    assert_eq!(report["updated"], json!(["a"]));
    assert_eq!(report["deleted"], json!(["b"]));
    assert_eq!(report["unchanged"], 0);
    let warnings = report["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{report}");
    assert!(
        warnings[0].as_str().unwrap().contains("api-made"),
        "{report}"
    );

    let list = checks(&s, WRITE).await;
    let slugs: BTreeSet<&str> = list.iter().map(|c| c["slug"].as_str().unwrap()).collect();
    assert_eq!(slugs, BTreeSet::from(["a", "c", "api-made"]));
    let a = by_slug(&list, "a").unwrap();
    assert_eq!(
        (a["interval"].as_str(), a["paused"].as_bool()),
        (Some("2m"), Some(true))
    );
    assert_eq!(by_slug(&list, "c").unwrap()["cron"], "0 3 * * *");
    let api_made = by_slug(&list, "api-made").unwrap();
    assert_eq!(
        (api_made["source"].as_str(), api_made["interval"].as_str()),
        (Some("api"), Some("7m"))
    );
    // The dropped check is gone, from the ping path too.
    assert_eq!(s.ping(&format!("/ping/{b_uuid}")).await.0, 404);
    // A new check is pingable at once.
    assert_eq!(
        s.ping(&format!("/ping/{}/c", common::PING_KEY)).await.0,
        200
    );

    // Receivers, route, silences and keys of the new file are in force.
    let (_, r) = call(&s, "GET", "/api/v1/receivers", LATER, None).await;
    let names: Vec<&str> = r["receivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["r1", "r2"]);
    let (_, route) = call(&s, "GET", "/api/v1/routes", WRITE, None).await;
    assert_eq!(route["route"]["receiver"], "r2");
    let (_, silences) = call(&s, "GET", "/api/v1/silences", WRITE, None).await;
    let silences = silences["silences"].as_array().unwrap();
    let config: Vec<&Value> = silences
        .iter()
        .filter(|s| s["source"] == "config")
        .collect();
    assert_eq!(config.len(), 1);
    assert_eq!(
        (config[0]["id"].as_str(), config[0]["comment"].as_str()),
        (Some("config-0"), Some("other maintenance"))
    );
    assert!(silences
        .iter()
        .any(|s| s["id"] == api_silence["id"] && s["source"] == "api"));

    // Settings a reload cannot change are reported, not applied.
    std::fs::write(
        &path,
        s.db.config_toml(&format!(
            "ping_body_limit = 5\nretention = \"30d\"\nping_log_limit = 7\n{}{}{SECOND}",
            key("w", WRITE),
            key("later", LATER)
        )),
    )
    .unwrap();
    let (st, report) = call(&s, "POST", "/api/v1/reload", WRITE, None).await;
    assert_eq!(st, 200, "{report}");
    assert!(
        report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("ping_body_limit: changed")),
        "{report}"
    );
    for key in ["retention", "ping_log_limit"] {
        assert!(
            report["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().starts_with(&format!("{key}: changed"))),
            "{report}"
        );
    }
    std::fs::write(
        &path,
        s.db.config_toml(&format!(
            "{}{}{SECOND}",
            key("w", WRITE),
            key("later", LATER)
        )),
    )
    .unwrap();

    // Reloading the same file again changes nothing.
    let (st, report) = call(&s, "POST", "/api/v1/reload", WRITE, None).await;
    assert_eq!(st, 200);
    assert_eq!(
        (
            report["created"].clone(),
            report["updated"].clone(),
            report["deleted"].clone(),
            report["unchanged"].clone()
        ),
        (json!([]), json!([]), json!([]), json!(2))
    );
});

both_backends!(an_invalid_file_changes_nothing, |backend| async move {
    let db = TestDb::new(backend).await;
    let s = TestServer::start_from_file(db, &format!("{}{FIRST}", key("w", WRITE))).await;
    let before = checks(&s, WRITE).await;
    let broken = r#"
[[receivers]]
name = "r9"
type = "webhook"
url = "http://127.0.0.1:9/r9"

[route]
receiver = "nobody"

[[checks]]
slug = "a"
interval = "soon"

[[checks]]
interval = "1m"
"#;
    std::fs::write(
        config_path(&s.db),
        s.db.config_toml(&format!("{}{broken}", key("w", WRITE))),
    )
    .unwrap();
    let (st, e) = call(&s, "POST", "/api/v1/reload", WRITE, None).await;
    assert_eq!(st, 400, "{e}");
    let fields: Vec<&str> = e["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    for f in ["checks[0].interval", "checks[1].slug", "route.receiver"] {
        assert!(fields.contains(&f), "{f} missing from {e}");
    }
    let after = checks(&s, WRITE).await;
    let strip = |l: &[Value]| -> Vec<(Value, Value, Value)> {
        l.iter()
            .map(|c| (c["uuid"].clone(), c["slug"].clone(), c["interval"].clone()))
            .collect()
    };
    assert_eq!(strip(&before), strip(&after));
    let (_, r) = call(&s, "GET", "/api/v1/receivers", WRITE, None).await;
    assert_eq!(r["receivers"].as_array().unwrap().len(), 1);
    assert_eq!(r["receivers"][0]["name"], "r1");
});

#[tokio::test]
async fn reload_needs_a_file_and_a_write_key() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let r = s.client.post(s.url("/api/v1/reload")).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let db = TestDb::new(Backend::Sqlite).await;
    let s = TestServer::start_from_file(db, &format!(
        "{}[[api_keys]]\nname = \"ro\"\nscope = \"read\"\nkey = \"read-key-0123456789abcdef\"\n", key("w", WRITE))).await;
    let r = s
        .client
        .post(s.url("/api/v1/reload"))
        .bearer_auth("read-key-0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = s.client.post(s.url("/api/v1/reload")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

both_backends!(
    a_reload_sends_alerts_to_the_new_receivers,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let db = TestDb::new(backend).await;
        // No receiver at first: nothing is notified.
        let s = TestServer::start_from_file(db, "").await;
        let c = s.create_check(json!({"slug": "job"})).await;
        let toml = format!(
        "[[receivers]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\n[route]\nreceiver = \"hook\"\ngroup_wait = \"100ms\"\n",
        hook.url("/hook")
    );
        std::fs::write(config_path(&s.db), s.db.config_toml(&toml)).unwrap();
        s.post_200("/api/v1/reload").await;
        assert_eq!(
            s.ping(&format!("/ping/{}/fail", c["uuid"].as_str().unwrap()))
                .await
                .0,
            200
        );
        let got = hook.wait_for(1).await;
        assert_eq!(got.len(), 1);
        let body = got[0].json();
        assert_eq!(body["status"], "firing", "{body}");
        assert_eq!(body["alerts"][0]["labels"]["check"], "job", "{body}");
    }
);

both_backends!(sighup_reloads_a_running_server, |backend| async move {
    let db = TestDb::new(backend).await;
    let path = config_path(&db);
    std::fs::write(
        &path,
        db.config_toml("[[checks]]\nslug = \"first\"\ninterval = \"1m\"\n"),
    )
    .unwrap();
    let child = ChildServer::spawn(&path);
    let client = common::client();
    let slugs = || async {
        let v: Value = client
            .get(format!("{}/api/v1/checks", child.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["slug"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(slugs().await, ["first"]);
    std::fs::write(
        &path,
        db.config_toml("[[checks]]\nslug = \"second\"\ninterval = \"1m\"\n"),
    )
    .unwrap();
    let status = std::process::Command::new("kill")
        .arg("-HUP")
        .arg(child.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let mut seen = Vec::new();
    for _ in 0..400 {
        seen = slugs().await;
        if seen == ["second"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, ["second"]);
    // The server is still serving after the reload.
    common::get_200(&client, &format!("{}/healthz", child.base)).await;
});

/// Replicas of one deployment start together with the same file: both
/// reconcile it, neither fails, and each check exists once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn replicas_starting_together_reconcile_the_same_file() {
    common::need_postgres();
    let db = TestDb::new(Backend::Postgres).await;
    let mut checks = String::new();
    for i in 0..20 {
        checks.push_str(&format!("[[checks]]\nslug = \"c{i}\"\ninterval = \"1m\"\n"));
    }
    let config = || overdue::config::Config::from_toml(&db.config_toml(&checks)).unwrap();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(overdue::app::run(config(), listener, stop.clone()));
        servers.push((base, stop, task));
    }
    let client = common::client();
    for (base, _, task) in &servers {
        let mut ready = false;
        for _ in 0..400 {
            assert!(!task.is_finished(), "a replica failed to start");
            if client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(ready);
    }
    for (base, _, _) in &servers {
        let v: Value = client
            .get(format!("{base}/api/v1/checks"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["checks"].as_array().unwrap().len(), 20);
        // Each replica can ping every check by slug.
        let r = client
            .get(format!("{base}/ping/{}/c7", common::PING_KEY))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    for (_, stop, task) in servers {
        stop.cancel();
        task.await.unwrap().unwrap();
    }
}
