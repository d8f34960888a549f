//! The native API: update, upsert and delete, filters, ping pages and bodies,
//! status, API keys, the scope of every route and the OpenAPI document.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::api::call;
use common::api::{api_keys_toml, READ, WRITE};
use common::{Backend, TestServer, PING_KEY};
use serde_json::{json, Value};

fn field(e: &Value) -> &str {
    e["error"]["fields"][0]["field"]
        .as_str()
        .unwrap_or_default()
}

both_backends!(update_upsert_and_delete, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "a", "interval": "5m", "labels": {"team": "data"}}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();

    // PATCH changes only what it names.
    let (st, v) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        None,
        Some(json!({"grace": "1m", "labels": {"team": "ops"}})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["grace"], "1m");
    assert_eq!(v["grace_default"], false);
    assert_eq!(v["interval"], "5m");
    assert_eq!(v["labels"], json!({"team": "ops"}));
    assert_eq!(v["uuid"], uuid);
    // Giving cron drops the interval; null goes back to the default.
    let (st, v) = call(
        &s,
        "PATCH",
        &format!("/api/v1/checks/{uuid}"),
        None,
        Some(json!({"cron": "0 3 * * *", "grace": null})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    // The grace shown is the one in force: for a cron check by default the
    // gap between its due fire time and the next, so none before it is due.
    assert_eq!(
        (
            v["cron"].as_str(),
            v["interval"].as_str(),
            v["grace"].as_str(),
            v["grace_default"].as_bool()
        ),
        (Some("0 3 * * *"), None, None, Some(true))
    );
    // Validation errors name the field.
    let (st, e) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        None,
        Some(json!({"interval": "soon"})),
    )
    .await;
    assert_eq!((st, field(&e)), (400, "interval"), "{e}");
    let (st, e) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        None,
        Some(json!({"uuid": uuid::Uuid::new_v4()})),
    )
    .await;
    assert_eq!((st, field(&e)), (400, "uuid"), "{e}");
    let (st, e) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        None,
        Some(json!({"failure_threshold": "x"})),
    )
    .await;
    assert_eq!((st, field(&e)), (400, "failure_threshold"), "{e}");
    let (st, e) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        None,
        Some(json!({"status": "up"})),
    )
    .await;
    assert_eq!(st, 400);
    assert!(e.to_string().contains("status"), "{e}");
    let (st, _) = call(&s, "PATCH", "/api/v1/checks/a", None, Some(json!([1]))).await;
    assert_eq!(st, 400);

    // A new slug is pingable at once; the old one is gone.
    let (st, v) = call(
        &s,
        "PATCH",
        "/api/v1/checks/a",
        None,
        Some(json!({"slug": "b"})),
    )
    .await;
    assert_eq!((st, v["slug"].as_str()), (200, Some("b")), "{v}");
    assert_eq!(s.ping(&format!("/ping/{PING_KEY}/b")).await.0, 200);
    assert_eq!(s.ping(&format!("/ping/{PING_KEY}/a")).await.0, 404);
    s.create_check(json!({"slug": "other"})).await;
    let (st, e) = call(
        &s,
        "PATCH",
        "/api/v1/checks/b",
        None,
        Some(json!({"slug": "other"})),
    )
    .await;
    assert_eq!(st, 409, "{e}");

    // PUT by slug: created, then replaced whole, keeping its uuid.
    let (st, v) = call(
        &s,
        "PUT",
        "/api/v1/checks/c",
        None,
        Some(json!({"interval": "1m", "grace": "5m"})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let c_uuid = v["uuid"].clone();
    assert_eq!(v["slug"], "c");
    let (st, v) = call(
        &s,
        "PUT",
        "/api/v1/checks/c",
        None,
        Some(json!({"interval": "2m"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (
            v["uuid"].clone(),
            v["interval"].as_str(),
            v["grace"].as_str(),
            v["grace_default"].as_bool()
        ),
        (c_uuid, Some("2m"), Some("2m"), Some(true))
    );
    let (st, e) = call(
        &s,
        "PUT",
        "/api/v1/checks/c",
        None,
        Some(json!({"slug": "d"})),
    )
    .await;
    assert_eq!((st, field(&e)), (400, "slug"), "{e}");
    let (st, e) = call(
        &s,
        "PUT",
        "/api/v1/checks/Not%20A%20Slug",
        None,
        Some(json!({})),
    )
    .await;
    assert_eq!((st, field(&e)), (400, "slug"), "{e}");

    // DELETE removes it from the API and from the ping path.
    let (st, _) = call(&s, "DELETE", "/api/v1/checks/b", None, None).await;
    assert_eq!(st, 204);
    assert_eq!(call(&s, "GET", "/api/v1/checks/b", None, None).await.0, 404);
    assert_eq!(
        call(&s, "GET", &format!("/api/v1/checks/{uuid}"), None, None)
            .await
            .0,
        404
    );
    assert_eq!(s.ping(&format!("/ping/{uuid}")).await.0, 404);
    assert_eq!(
        call(&s, "DELETE", "/api/v1/checks/b", None, None).await.0,
        404
    );
    let list = s.get_json("/api/v1/checks").await;
    let slugs: Vec<&str> = list["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, vec!["other", "c"]);
});

both_backends!(checks_are_found_by_uuid_or_slug, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s.create_check(json!({"slug": "by-slug"})).await;
    let uuid = c["uuid"].as_str().unwrap();
    assert_eq!(s.get_json("/api/v1/checks/by-slug").await["uuid"], uuid);
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{uuid}")).await["slug"],
        "by-slug"
    );
    // A slug spelled like a uuid is still a slug.
    let odd = "00000000-0000-4000-8000-000000000000";
    let o = s.create_check(json!({"slug": odd})).await;
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{odd}")).await["uuid"],
        o["uuid"]
    );
    let (st, e) = call(&s, "GET", "/api/v1/checks/missing", None, None).await;
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("not_found")));
    assert!(
        e["error"]["message"].as_str().unwrap().contains("missing"),
        "{e}"
    );
});

both_backends!(list_filters, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "a", "labels": {"team": "data", "env": "prod"}}))
        .await;
    s.create_check(json!({"slug": "b", "labels": {"team": "web"}}))
        .await;
    s.create_check(json!({"slug": "c"})).await;
    call(&s, "POST", "/api/v1/checks/c/pause", None, None).await;
    let slugs = |v: Value| -> Vec<String> {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["slug"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        slugs(s.get_json("/api/v1/checks?label=team=data").await),
        ["a"]
    );
    assert_eq!(
        slugs(s.get_json("/api/v1/checks?label=team").await),
        ["a", "b"]
    );
    assert_eq!(
        slugs(s.get_json("/api/v1/checks?label=team&label=env=prod").await),
        ["a"]
    );
    assert_eq!(
        slugs(s.get_json("/api/v1/checks?status=paused").await),
        ["c"]
    );
    assert_eq!(
        slugs(s.get_json("/api/v1/checks?status=new&status=up").await),
        ["a", "b"]
    );
    assert_eq!(slugs(s.get_json("/api/v1/checks?slug=b").await), ["b"]);
    let (st, e) = call(&s, "GET", "/api/v1/checks?status=sideways", None, None).await;
    assert_eq!((st, field(&e)), (400, "status"), "{e}");
    let (st, _) = call(&s, "GET", "/api/v1/checks?colour=red", None, None).await;
    assert_eq!(st, 400);
});

both_backends!(pings_come_in_pages_newest_first, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s.create_check(json!({"slug": "p"})).await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    for i in 1..=4 {
        let r = s
            .client
            .post(s.url(&format!("/ping/{uuid}")))
            .body(format!("p{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = s
        .client
        .post(s.url(&format!("/ping/{uuid}/log")))
        .body(vec![0xffu8, 0x00, 0x41])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ns = |v: &Value| -> Vec<i64> {
        v["pings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["n"].as_i64().unwrap())
            .collect()
    };
    let page = s.get_json("/api/v1/checks/p/pings?limit=2").await;
    assert_eq!(ns(&page), [5, 4]);
    assert_eq!(page["pings"][0]["type"], "log");
    assert_eq!(page["pings"][0]["body_hex"], "ff0041");
    assert_eq!(page["next_before"], 4);
    let page = s.get_json("/api/v1/checks/p/pings?limit=2&before=4").await;
    assert_eq!(ns(&page), [3, 2]);
    assert_eq!(page["pings"][0]["body"], "p3");
    let body_url = page["pings"][0]["body_url"].as_str().unwrap().to_string();
    // Named by slug: read keys get these links too, and never see the uuid.
    assert!(
        body_url.ends_with("/api/v1/checks/p/pings/3/body"),
        "{body_url}"
    );
    let page = s.get_json("/api/v1/checks/p/pings?limit=2&before=2").await;
    assert_eq!(ns(&page), [1]);
    assert_eq!(page["next_before"], Value::Null);

    // Bodies download as they were sent.
    let r = s
        .client
        .get(s.url(&format!("/api/v1/checks/{uuid}/pings/3/body")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert_eq!(r.text().await.unwrap(), "p3");
    let r = s
        .client
        .get(s.url("/api/v1/checks/p/pings/5/body"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(r.bytes().await.unwrap().as_ref(), &[0xff, 0x00, 0x41]);
    assert_eq!(
        call(&s, "GET", "/api/v1/checks/p/pings/99/body", None, None)
            .await
            .0,
        404
    );
    let (st, e) = call(&s, "GET", "/api/v1/checks/p/pings?limit=0", None, None).await;
    assert_eq!((st, field(&e)), (400, "limit"));
});

both_backends!(status_counts_checks, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "a"})).await;
    s.create_check(json!({"slug": "b"})).await;
    call(&s, "POST", "/api/v1/checks/b/pause", None, None).await;
    let v = s.get_json("/api/v1/status").await;
    assert_eq!(v["status"], "ok");
    assert_eq!(v["checks"]["new"], 1);
    assert_eq!(v["checks"]["paused"], 1);
    assert_eq!(v["checks"]["down"], 0);
});

both_backends!(api_keys_created_through_the_api, |backend| async move {
    let s = TestServer::start(backend, &api_keys_toml()).await;
    let (st, k) = call(
        &s,
        "POST",
        "/api/v1/keys",
        Some(WRITE),
        Some(json!({"name": "ci", "scope": "read"})),
    )
    .await;
    assert_eq!(st, 201, "{k}");
    let key = k["key"].as_str().unwrap().to_string();
    let id = k["id"].as_str().unwrap().to_string();
    assert_eq!(
        call(&s, "GET", "/api/v1/checks", Some(&key), None).await.0,
        200
    );
    let (st, e) = call(
        &s,
        "POST",
        "/api/v1/checks",
        Some(&key),
        Some(json!({"slug": "x"})),
    )
    .await;
    assert_eq!((st, e["error"]["code"].as_str()), (403, Some("forbidden")));
    // The key is shown once: never listed, only its name and scope.
    let (st, list) = call(&s, "GET", "/api/v1/keys", Some(WRITE), None).await;
    assert_eq!(st, 200);
    assert!(!list.to_string().contains(&key));
    let names: BTreeSet<&str> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["ro", "rw", "ci"]));
    // A write key made here can write.
    let (_, w) = call(
        &s,
        "POST",
        "/api/v1/keys",
        Some(WRITE),
        Some(json!({"name": "deploy", "scope": "write"})),
    )
    .await;
    let (st, _) = call(
        &s,
        "POST",
        "/api/v1/checks",
        Some(w["key"].as_str().unwrap()),
        Some(json!({"slug": "x"})),
    )
    .await;
    assert_eq!(st, 201);
    // Read keys cannot manage keys.
    assert_eq!(
        call(&s, "GET", "/api/v1/keys", Some(READ), None).await.0,
        403
    );
    let (st, e) = call(
        &s,
        "POST",
        "/api/v1/keys",
        Some(WRITE),
        Some(json!({"name": "", "scope": "admin"})),
    )
    .await;
    assert_eq!(st, 400);
    let fields: Vec<&str> = e["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["name", "scope"]);
    assert_eq!(
        call(&s, "DELETE", "/api/v1/keys/config-rw", Some(WRITE), None)
            .await
            .0,
        409
    );
    assert_eq!(
        call(
            &s,
            "DELETE",
            &format!("/api/v1/keys/{id}"),
            Some(WRITE),
            None
        )
        .await
        .0,
        204
    );
    let (st, e) = call(&s, "GET", "/api/v1/checks", Some(&key), None).await;
    assert_eq!(
        (st, e["error"]["message"].as_str()),
        (401, Some("wrong API key"))
    );
});

#[tokio::test]
async fn a_key_made_through_the_api_ends_loopback_only_mode() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    assert_eq!(call(&s, "GET", "/api/v1/checks", None, None).await.0, 200);
    let (_, k) = call(
        &s,
        "POST",
        "/api/v1/keys",
        None,
        Some(json!({"name": "first", "scope": "write"})),
    )
    .await;
    let (st, e) = call(&s, "GET", "/api/v1/checks", None, None).await;
    assert_eq!(
        (st, e["error"]["message"].as_str()),
        (401, Some("missing API key"))
    );
    assert_eq!(
        call(&s, "GET", "/api/v1/checks", k["key"].as_str(), None)
            .await
            .0,
        200
    );
}

/// Every documented operation: (method, path) → the scope it needs.
fn documented(doc: &Value) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let scope = op["security"][0]["api_key"][0]
                .as_str()
                .unwrap_or("none")
                .to_string();
            out.insert((method.to_uppercase(), path.clone()), scope);
        }
    }
    out
}

fn concrete(path: &str, check: &str) -> String {
    format!(
        "/api/v1{}",
        path.replace("{check}", check)
            .replace("{n}", "1")
            .replace("{id}", "no-such-id")
            .replace("{slot}", "2026-12-05T03:00:00Z")
    )
}

both_backends!(
    every_route_refuses_what_its_scope_forbids,
    |backend| async move {
        let s = TestServer::start(backend, &api_keys_toml()).await;
        let c = call(
            &s,
            "POST",
            "/api/v1/checks",
            Some(WRITE),
            Some(json!({"slug": "m"})),
        )
        .await
        .1;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let doc: Value = s
            .client
            .get(s.url("/api/v1/openapi.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ops = documented(&doc);
        assert_eq!(ops.len(), ROUTES.len(), "{ops:?}");
        for ((method, path), scope) in &ops {
            assert!(
                scope == "read" || scope == "write",
                "{method} {path} has no scope"
            );
            // Anything that changes state needs a write key.
            if method != "GET" {
                assert_eq!(scope, "write", "{method} {path}");
            }
            let url = concrete(path, &uuid);
            let body = (method != "GET" && method != "DELETE").then(|| json!({}));
            let (st, e) = call(&s, method, &url, None, body.clone()).await;
            assert_eq!(
                (st, e["error"]["message"].as_str()),
                (401, Some("missing API key")),
                "{method} {url}"
            );
            let (st, e) = call(&s, method, &url, Some("wrong-key-0123456789"), body.clone()).await;
            assert_eq!(
                (st, e["error"]["message"].as_str()),
                (401, Some("wrong API key")),
                "{method} {url}"
            );
            let (st, e) = call(&s, method, &url, Some(READ), body.clone()).await;
            if scope == "write" {
                assert_eq!(
                    (st, e["error"]["code"].as_str()),
                    (403, Some("forbidden")),
                    "{method} {url}"
                );
            } else {
                assert!(
                    st != 401 && st != 403,
                    "{method} {url} refused a read key: {st} {e}"
                );
            }
        }
        // The check is untouched by all the refused writes.
        let (st, v) = call(
            &s,
            "GET",
            &format!("/api/v1/checks/{uuid}"),
            Some(READ),
            None,
        )
        .await;
        assert_eq!((st, v["paused"].as_bool()), (200, Some(false)));
        // Write keys pass every gate (a missing resource is then a 404, never 401/403).
        for (method, path) in ops.keys() {
            let url = concrete(path, "no-such-check");
            let body = (method != "GET" && method != "DELETE").then(|| json!({}));
            let (st, e) = call(&s, method, &url, Some(WRITE), body).await;
            assert!(
                st != 401 && st != 403 && st < 500,
                "{method} {url}: {st} {e}"
            );
        }
    }
);

/// The routes the server has, method by method: the document must list
/// exactly these.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/checks"),
    ("POST", "/checks"),
    ("GET", "/checks/{check}"),
    ("PATCH", "/checks/{check}"),
    ("PUT", "/checks/{check}"),
    ("DELETE", "/checks/{check}"),
    ("POST", "/checks/{check}/pause"),
    ("POST", "/checks/{check}/resume"),
    ("GET", "/checks/{check}/pings"),
    ("GET", "/checks/{check}/pings/{n}/body"),
    ("GET", "/checks/{check}/runs"),
    ("GET", "/checks/{check}/flips"),
    ("GET", "/checks/{check}/incidents"),
    ("GET", "/checks/{check}/events"),
    ("GET", "/checks/{check}/slots"),
    ("POST", "/checks/{check}/slots/{slot}/resolve"),
    ("GET", "/slots"),
    ("GET", "/notifications"),
    ("GET", "/notifications/{id}"),
    ("GET", "/silences"),
    ("POST", "/silences"),
    ("GET", "/silences/{id}"),
    ("PUT", "/silences/{id}"),
    ("DELETE", "/silences/{id}"),
    ("GET", "/receivers"),
    ("GET", "/routes"),
    ("GET", "/status"),
    ("GET", "/keys"),
    ("POST", "/keys"),
    ("DELETE", "/keys/{id}"),
    ("POST", "/reload"),
    ("GET", "/incidents/{id}"),
    ("POST", "/incidents/{id}/ack"),
    ("DELETE", "/incidents/{id}/ack"),
];

/// `GET /api/v1/openapi.json`, as JSON text.
async fn openapi_document(s: &TestServer) -> String {
    let r = s
        .client
        .get(s.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    r.text().await.unwrap()
}

#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let text = openapi_document(&s).await;
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(doc["servers"][0]["url"], "/api/v1");
    let listed: BTreeSet<(String, String)> = documented(&doc).into_keys().collect();
    let expected: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(listed, expected);
    // Each documented path answers every other method with 405: the server
    // has no route there that the document leaves out.
    let c = s.create_check(json!({"slug": "o"})).await;
    let uuid = c["uuid"].as_str().unwrap();
    let paths: BTreeSet<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    for path in paths {
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            if expected.contains(&(method.to_string(), path.to_string())) {
                continue;
            }
            let (st, _) = call(&s, method, &concrete(path, uuid), None, None).await;
            assert_eq!(st, 405, "{method} {path}");
        }
    }
    // The request bodies it documents are the ones the server reads.
    let props = doc["components"]["schemas"]["CheckInputDoc"]["properties"]
        .as_object()
        .unwrap();
    let all: BTreeSet<&str> = props.keys().map(String::as_str).collect();
    let known = [
        "uuid",
        "slug",
        "name",
        "description",
        "labels",
        "interval",
        "cron",
        "tz",
        "grace",
        "active_hours",
        "zero_items_after",
        "zero_items_runs",
        "min_items",
        "min_items_runs",
        "items_below_usual",
        "items_window",
        "min_runtime",
        "failure_threshold",
        "recovery_threshold",
        "max_runtime",
        "alert_on_overlap",
        "max_instances",
        "alert_on_duplicate",
        "manual_resume",
        "methods",
        "depends_on",
    ];
    assert_eq!(all, known.into_iter().collect());
    for f in known {
        let (st, e) = call(&s, "POST", "/api/v1/checks", None, Some(json!({ f: null }))).await;
        assert!(!e.to_string().contains("unknown field"), "{f}: {st} {e}");
    }
    let view = doc["components"]["schemas"]["CheckView"]["properties"]
        .as_object()
        .unwrap();
    let documented_fields: BTreeSet<&str> = view.keys().map(String::as_str).collect();
    // One check read gives every field; the others leave out `locks`.
    let one = s.get_json("/api/v1/checks/o").await;
    let got: BTreeSet<&str> = one
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(got, documented_fields);
    let created: BTreeSet<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        created,
        documented_fields
            .iter()
            .copied()
            .filter(|f| *f != "locks")
            .collect()
    );
}

/// A standard validator (openapi-spec-validator) accepts the document.
#[tokio::test]
#[cfg_attr(
    overdue_missing = "openapi_spec_validator",
    ignore = "needs openapi-spec-validator for /usr/bin/python3 (PyPI)"
)]
async fn the_openapi_document_validates() {
    common::need(common::Peer::OpenapiSpecValidator);
    let s = TestServer::start(Backend::Sqlite, "").await;
    let text = openapi_document(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import sys, json; from openapi_spec_validator import validate; validate(json.load(open(sys.argv[1]))); print('valid')")
        .arg(&file)
        .output()
        .expect("run /usr/bin/python3");
    assert!(
        out.status.success(),
        "the document does not validate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
}
