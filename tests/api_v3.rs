//! healthchecks.io v3 compatibility: responses compared field by field with
//! the shapes in HEALTHCHECKS-COMPAT.md, for write and read keys.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::api::call;
use common::api::{READ, WRITE};
use common::TestServer;
use serde_json::{json, Value};
use sha1::{Digest, Sha1};

const BASE: &str = "https://hc.example.com";

fn config() -> String {
    format!(
        "base_url = \"{BASE}\"\n\
         [[api_keys]]\nname = \"ro\"\nscope = \"read\"\nkey = \"{READ}\"\n\
         [[api_keys]]\nname = \"rw\"\nscope = \"write\"\nkey = \"{WRITE}\"\n\
         [[receivers]]\nname = \"oncall\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/oncall\"\n\
         [[receivers]]\nname = \"data-hooks\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/data\"\n\
         [route]\nreceiver = \"oncall\"\n\
         routes = [ {{ matchers = ['team=\"data\"'], receiver = \"data-hooks\" }} ]\n"
    )
}

const ALWAYS: &[&str] = &[
    "name",
    "slug",
    "tags",
    "desc",
    "grace",
    "n_pings",
    "status",
    "started",
    "last_ping",
    "next_ping",
    "manual_resume",
    "methods",
    "subject",
    "subject_fail",
    "start_kw",
    "success_kw",
    "failure_kw",
    "filter_subject",
    "filter_body",
    "filter_http_body",
    "filter_default_fail",
    "badge_url",
    // overdue's own: the job guard's lock seats (SPEC §13), the checks it
    // depends on (SPEC §6.2), the item floor, the usual count and
    // min_runtime (SPEC §3.3, §3.4), the duplicate-run alert (SPEC §14).
    "max_instances",
    "alert_on_duplicate",
    "depends_on",
    "min_items",
    "min_items_runs",
    "items_below_usual",
    "items_window",
    "usual_items",
    "min_runtime",
];
const WRITE_ONLY: &[&str] = &[
    "uuid",
    "ping_url",
    "update_url",
    "pause_url",
    "resume_url",
    "channels",
];

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn expected(extra: &[&str], readonly: bool) -> BTreeSet<String> {
    let mut k: BTreeSet<String> = ALWAYS.iter().map(|s| s.to_string()).collect();
    k.extend(extra.iter().map(|s| s.to_string()));
    if readonly {
        k.insert("unique_key".into());
    } else {
        k.extend(WRITE_ONLY.iter().map(|s| s.to_string()));
    }
    k
}

fn channel_id(name: &str) -> String {
    overdue::http::v3::channel_id(name).to_string()
}

fn iso_seconds(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 25 && s.ends_with("+00:00") && b[4] == b'-' && b[10] == b'T' && b[19] == b'+'
}

both_backends!(checks_look_like_healthchecks, |backend| async move {
    let s = TestServer::start(backend, &config()).await;
    let spec = json!({"name": "Backups", "slug": "backups", "tags": "prod team=data", "desc": "nightly",
                      "timeout": 3600, "grace": 600, "unique": ["name"], "channels": "*"});
    let (st, c) = call(&s, "POST", "/api/v3/checks/", Some(WRITE), Some(spec)).await;
    assert_eq!(st, 201, "{c}");
    assert_eq!(keys_of(&c), expected(&["timeout"], false));
    let uuid = c["uuid"].as_str().unwrap().to_string();
    for (k, v) in [
        ("name", json!("Backups")),
        ("slug", json!("backups")),
        ("tags", json!("prod team=data")),
        ("desc", json!("nightly")),
        ("grace", json!(600)),
        ("timeout", json!(3600)),
        ("n_pings", json!(0)),
        ("status", json!("new")),
        ("started", json!(false)),
        ("last_ping", Value::Null),
        ("next_ping", Value::Null),
        ("manual_resume", json!(false)),
        ("methods", json!("")),
        ("subject", json!("")),
        ("filter_body", json!(false)),
        ("ping_url", json!(format!("{BASE}/ping/{uuid}"))),
        ("update_url", json!(format!("{BASE}/api/v3/checks/{uuid}"))),
        (
            "pause_url",
            json!(format!("{BASE}/api/v3/checks/{uuid}/pause")),
        ),
        (
            "resume_url",
            json!(format!("{BASE}/api/v3/checks/{uuid}/resume")),
        ),
        // Labels team="data" route to data-hooks only.
        ("channels", json!(channel_id("data-hooks"))),
    ] {
        assert_eq!(c[k], v, "{k}");
    }
    // The labels are the tags, seen through the native API.
    let native = call(
        &s,
        "GET",
        &format!("/api/v1/checks/{uuid}"),
        Some(READ),
        None,
    )
    .await
    .1;
    assert_eq!(native["labels"], json!({"prod": "true", "team": "data"}));
    assert_eq!(native["interval"], "1h");
    assert_eq!(native["grace"], "10m");

    // unique: the same name updates that check (200) instead of adding one.
    let (st, u) = call(
        &s,
        "POST",
        "/api/v3/checks/",
        Some(WRITE),
        Some(json!({"name": "Backups", "timeout": 7200, "unique": ["name"]})),
    )
    .await;
    assert_eq!(st, 200, "{u}");
    assert_eq!(
        (
            u["uuid"].as_str(),
            u["timeout"].as_i64(),
            u["tags"].as_str()
        ),
        (Some(uuid.as_str()), Some(7200), Some("prod team=data"))
    );
    let (st, _) = call(
        &s,
        "POST",
        "/api/v3/checks/",
        Some(WRITE),
        Some(json!({"name": "Other", "slug": "other", "tags": "prod", "unique": ["name", "tags"]})),
    )
    .await;
    assert_eq!(st, 201);
    // A unique field the spec leaves out means "no lookup": a new check.
    let (st, extra) = call(
        &s,
        "POST",
        "/api/v3/checks/",
        Some(WRITE),
        Some(json!({"timeout": 7200, "unique": ["name", "timeout"]})),
    )
    .await;
    assert_eq!(st, 201, "{extra}");
    let extra_uuid = extra["uuid"].as_str().unwrap().to_string();
    assert_ne!(extra_uuid, uuid);
    assert_eq!(
        call(
            &s,
            "DELETE",
            &format!("/api/v3/checks/{extra_uuid}"),
            Some(WRITE),
            None
        )
        .await
        .0,
        200
    );

    // Read keys see unique_key instead of the uuid and the URLs.
    let (st, list) = call(&s, "GET", "/api/v3/checks/", Some(READ), None).await;
    assert_eq!(st, 200);
    let ro = list["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["slug"] == "backups")
        .unwrap()
        .clone();
    assert_eq!(keys_of(&ro), expected(&["timeout"], true));
    // healthchecks: sha1 of the first 16 hex digits of the uuid.
    let key = hex::encode(Sha1::digest(&uuid.replace('-', "").as_bytes()[..16]));
    assert_eq!(ro["unique_key"], key);
    let (st, by_key) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{key}"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(
        (st, by_key["unique_key"].as_str()),
        (200, Some(key.as_str()))
    );
    let (st, one) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!((st, keys_of(&one)), (200, expected(&["timeout"], true)));

    // Filters: every tag must match; slug.
    let names = |v: &Value| -> Vec<String> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(
            &call(&s, "GET", "/api/v3/checks/?tag=prod", Some(WRITE), None)
                .await
                .1
        ),
        ["Backups", "Other"]
    );
    assert_eq!(
        names(
            &call(
                &s,
                "GET",
                "/api/v3/checks/?tag=prod&tag=team=data",
                Some(WRITE),
                None
            )
            .await
            .1
        ),
        ["Backups"]
    );
    assert_eq!(
        names(
            &call(&s, "GET", "/api/v3/checks/?slug=other", Some(WRITE), None)
                .await
                .1
        ),
        ["Other"]
    );

    // Cron checks carry schedule and tz instead of timeout.
    let (st, cron) = call(
        &s,
        "POST",
        "/api/v3/checks/",
        Some(WRITE),
        Some(json!({"name": "nightly", "schedule": "0 3 * * *", "tz": "Europe/Riga"})),
    )
    .await;
    assert_eq!(st, 201, "{cron}");
    assert_eq!(keys_of(&cron), expected(&["schedule", "tz"], false));
    assert_eq!(
        (
            cron["schedule"].as_str(),
            cron["tz"].as_str(),
            cron["grace"].as_i64()
        ),
        (Some("0 3 * * *"), Some("Europe/Riga"), Some(3600))
    );

    // POST to a check updates only the given fields.
    let (st, up) = call(
        &s,
        "POST",
        &format!("/api/v3/checks/{uuid}"),
        Some(WRITE),
        Some(json!({"desc": "changed", "manual_resume": true})),
    )
    .await;
    assert_eq!(st, 200, "{up}");
    assert_eq!(
        (
            up["desc"].as_str(),
            up["manual_resume"].as_bool(),
            up["timeout"].as_i64()
        ),
        (Some("changed"), Some(true), Some(7200))
    );

    // Pause and resume (before any ping: a ping folded after a pause
    // would be judged as sent to a paused check); resuming what is not paused is a conflict.
    let (st, c) = call(
        &s,
        "POST",
        &format!("/api/v3/checks/{uuid}/pause"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!((st, c["status"].as_str()), (200, Some("paused")));
    assert_eq!(c["next_ping"], Value::Null);
    let (st, c) = call(
        &s,
        "POST",
        &format!("/api/v3/checks/{uuid}/resume"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!((st, c["status"].as_str()), (200, Some("new")));
    let (st, e) = call(
        &s,
        "POST",
        &format!("/api/v3/checks/{uuid}/resume"),
        Some(WRITE),
        None,
    )
    .await;
    // healthchecks answers this one in plain text.
    assert_eq!((st, e), (409, json!("check is not paused")));

    // Pings, newest first, in healthchecks' shape.
    s.post_200(&format!("/ping/{uuid}/start")).await;
    let (_, c) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!(c["started"], true);
    let r = s
        .client
        .post(s.url(&format!("/ping/{uuid}")))
        .header("user-agent", "curl/8")
        .body("done")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, c) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!(
        (
            c["status"].as_str(),
            c["started"].as_bool(),
            c["n_pings"].as_i64()
        ),
        (Some("up"), Some(false), Some(2))
    );
    assert!(iso_seconds(c["last_ping"].as_str().unwrap()), "{c}");
    assert!(iso_seconds(c["next_ping"].as_str().unwrap()), "{c}");
    assert_eq!(keys_of(&c), expected(&["timeout", "last_duration"], false));
    let (st, pings) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}/pings/"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!(st, 200);
    let pings = pings["pings"].as_array().unwrap();
    assert_eq!(pings.len(), 2);
    let p = &pings[0];
    let want: BTreeSet<String> = [
        "type",
        "date",
        "n",
        "scheme",
        "remote_addr",
        "method",
        "ua",
        "rid",
        "duration",
        "body_url",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(keys_of(p), want);
    assert_eq!(
        (
            p["type"].as_str(),
            p["n"].as_i64(),
            p["scheme"].as_str(),
            p["method"].as_str(),
            p["ua"].as_str()
        ),
        (
            Some("success"),
            Some(2),
            Some("http"),
            Some("POST"),
            Some("curl/8")
        )
    );
    assert_eq!(p["remote_addr"], "127.0.0.1");
    assert!(p["date"].as_str().unwrap().ends_with("+00:00"));
    assert_eq!(pings[1]["type"], "start");
    assert_eq!(pings[1]["body_url"], Value::Null);
    let body_url = p["body_url"].as_str().unwrap();
    assert_eq!(
        body_url,
        format!("{BASE}/api/v3/checks/{uuid}/pings/2/body")
    );
    let r = s
        .client
        .get(s.url(&format!("/api/v3/checks/{uuid}/pings/2/body")))
        .header("X-Api-Key", WRITE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "done");
    // Ping bodies need a write key, as in healthchecks.
    assert_eq!(
        call(
            &s,
            "GET",
            &format!("/api/v3/checks/{uuid}/pings/"),
            Some(READ),
            None
        )
        .await
        .0,
        401
    );

    // Channels and status.
    let (st, ch) = call(&s, "GET", "/api/v3/channels/", Some(WRITE), None).await;
    assert_eq!(st, 200);
    assert_eq!(
        ch,
        json!({"channels": [
            {"id": channel_id("oncall"), "name": "oncall", "kind": "webhook"},
            {"id": channel_id("data-hooks"), "name": "data-hooks", "kind": "webhook"},
        ]})
    );
    let r = s.client.get(s.url("/api/v3/status/")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (200, "OK".to_string())
    );

    // Delete answers with the check, then it is gone.
    let (st, gone) = call(
        &s,
        "DELETE",
        &format!("/api/v3/checks/{uuid}"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!((st, gone["uuid"].as_str()), (200, Some(uuid.as_str())));
    let (st, e) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}"),
        Some(WRITE),
        None,
    )
    .await;
    assert_eq!((st, e), (404, json!({"error": "not found"})));
});

both_backends!(
    errors_and_auth_look_like_healthchecks,
    |backend| async move {
        let s = TestServer::start(backend, &config()).await;
        let (st, c) = call(
            &s,
            "POST",
            "/api/v3/checks/",
            Some(WRITE),
            Some(json!({"name": "x"})),
        )
        .await;
        assert_eq!(st, 201);
        // healthchecks' defaults: a day's timeout, an hour's grace.
        assert_eq!(
            (c["timeout"].as_i64(), c["grace"].as_i64()),
            (Some(86400), Some(3600))
        );
        let uuid = c["uuid"].as_str().unwrap().to_string();
        for (body, message) in [
            (
                json!({"timeout": "abc"}),
                "json validation error: timeout is not a number",
            ),
            (
                json!({"timeout": 10}),
                "json validation error: timeout is too small",
            ),
            (
                json!({"grace": 99999999}),
                "json validation error: grace is too large",
            ),
            (
                json!({"name": 5}),
                "json validation error: name is not a string",
            ),
            (
                json!({"manual_resume": "yes"}),
                "json validation error: manual_resume is not a boolean",
            ),
            (
                json!({"unique": ["desc"]}),
                "json validation error: an item in 'unique' has unexpected value",
            ),
            (
                json!({"unique": "name"}),
                "json validation error: unique is not an array",
            ),
            (
                json!({"schedule": "61 * * * *"}),
                "json validation error: schedule is not a valid cron or OnCalendar expression",
            ),
            (
                json!({"schedule": "* * * * *", "tz": "Mars/Base"}),
                "json validation error: tz is not a valid timezone",
            ),
            (
                json!({"methods": "GET"}),
                "json validation error: methods has unexpected value",
            ),
        ] {
            let (st, e) = call(
                &s,
                "POST",
                "/api/v3/checks/",
                Some(WRITE),
                Some(body.clone()),
            )
            .await;
            assert_eq!((st, e), (400, json!({"error": message})), "{body}");
        }
        let (st, e) = call(
            &s,
            "POST",
            "/api/v3/checks/",
            Some(WRITE),
            Some(json!({"tags": "bad-tag"})),
        )
        .await;
        assert_eq!(st, 400);
        assert!(
            e["error"]
                .as_str()
                .unwrap()
                .starts_with("json validation error: tags"),
            "{e}"
        );

        let routes = [
            ("GET", "/api/v3/checks/".to_string(), false),
            ("POST", "/api/v3/checks/".to_string(), true),
            ("GET", format!("/api/v3/checks/{uuid}"), false),
            ("POST", format!("/api/v3/checks/{uuid}"), true),
            ("DELETE", format!("/api/v3/checks/{uuid}"), true),
            ("POST", format!("/api/v3/checks/{uuid}/pause"), true),
            ("POST", format!("/api/v3/checks/{uuid}/resume"), true),
            ("GET", format!("/api/v3/checks/{uuid}/pings/"), true),
            ("GET", format!("/api/v3/checks/{uuid}/pings/1/body"), true),
            ("GET", format!("/api/v3/checks/{uuid}/flips/"), false),
            ("GET", "/api/v3/channels/".to_string(), true),
        ];
        for (method, path, write) in &routes {
            let body = (*method == "POST").then(|| json!({}));
            let (st, e) = call(&s, method, path, None, body.clone()).await;
            assert_eq!(
                (st, e),
                (401, json!({"error": "missing api key"})),
                "{method} {path}"
            );
            let (st, e) = call(&s, method, path, Some("nope-nope-nope-nope"), body.clone()).await;
            assert_eq!(
                (st, e),
                (401, json!({"error": "wrong api key"})),
                "{method} {path}"
            );
            let (st, e) = call(&s, method, path, Some(READ), body).await;
            if *write {
                assert_eq!(
                    (st, e),
                    (401, json!({"error": "wrong api key"})),
                    "{method} {path}"
                );
            } else {
                assert_eq!(st, 200, "{method} {path}: {e}");
            }
        }
        let (_, c) = call(
            &s,
            "GET",
            &format!("/api/v3/checks/{uuid}"),
            Some(WRITE),
            None,
        )
        .await;
        assert_eq!(c["status"], "new", "read keys changed nothing");
        let (st, e) = call(&s, "GET", "/api/v3/checks/not-a-uuid", Some(WRITE), None).await;
        assert_eq!((st, e), (400, json!({"error": "invalid uuid format"})));
        let (st, e) = call(
            &s,
            "GET",
            &format!("/api/v3/checks/{}", uuid::Uuid::new_v4()),
            Some(WRITE),
            None,
        )
        .await;
        assert_eq!((st, e), (404, json!({"error": "not found"})));
    }
);

both_backends!(flips_report_only_up_and_down, |backend| async move {
    let s = TestServer::start(backend, &config()).await;
    let (_, c) = call(
        &s,
        "POST",
        "/api/v1/checks",
        Some(WRITE),
        Some(json!({"slug": "fast", "interval": "1s", "grace": "1s"})),
    )
    .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let auth = |r: reqwest::RequestBuilder| r.header("X-Api-Key", WRITE);
    assert_eq!(
        auth(s.client.post(s.url(&format!("/ping/{uuid}"))))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // The check goes late, then down, by the evaluator's clock.
    let mut flips = Value::Null;
    for _ in 0..300 {
        let (_, v) = call(
            &s,
            "GET",
            &format!("/api/v3/checks/{uuid}/flips/"),
            Some(READ),
            None,
        )
        .await;
        if v["flips"].as_array().is_some_and(|f| f.len() >= 2) {
            flips = v;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = flips["flips"].as_array().expect("the check went down");
    // new→up, up→late, late→down recorded natively; v3 sees up then down.
    let ups: Vec<i64> = list.iter().map(|f| f["up"].as_i64().unwrap()).collect();
    assert_eq!(ups, [0, 1], "newest first: {flips}");
    for f in list {
        assert!(iso_seconds(f["timestamp"].as_str().unwrap()), "{f}");
        assert_eq!(f.as_object().unwrap().len(), 2);
    }
    let native = call(
        &s,
        "GET",
        &format!("/api/v1/checks/{uuid}/flips"),
        Some(READ),
        None,
    )
    .await
    .1;
    assert!(
        native["flips"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["to"] == "late"),
        "{native}"
    );
    // Filters by time.
    let (_, v) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}/flips/?start=4102444800"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(v, json!({"flips": []}));
    let (_, v) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}/flips/?seconds=3600"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(v["flips"].as_array().unwrap().len(), 2);
    let (st, _) = call(
        &s,
        "GET",
        &format!("/api/v3/checks/{uuid}/flips/?seconds=x"),
        Some(READ),
        None,
    )
    .await;
    assert_eq!(st, 400);
});
