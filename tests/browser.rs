//! Browsers must not drive the API or the dashboard (SPEC §5, "Browsers";
//! issue #41 §2), against the real server: cross-site writes are refused,
//! API writes must be JSON, with no key configured only loopback host names
//! are answered (DNS rebinding), CSRF tokens and label badge keys come from
//! a random secret of the installation, and the API refuses a silence of
//! every check. The `/ping` routes stay open to every client.
//!
//! Requests here say what a browser would (`Origin`, `Sec-Fetch-Site`, the
//! `Host` of a rebound name); the server cannot tell them from a browser's.

mod common;

use std::time::Duration;

use common::api::status_and_json;
use common::api::WRITE;
use common::browser;
use common::{csrf_of, label_badge_key, Backend, TestDb, TestServer};
use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const EVIL: &str = "http://rebind.evil.example";

fn write_key() -> String {
    format!("[[api_keys]]\nname = \"rw\"\nscope = \"write\"\nkey = \"{WRITE}\"\n")
}

/// One request with these headers and, when given, a body of this type;
/// the status and the body (JSON when it is JSON, else a string).
async fn send(
    s: &TestServer,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(Option<&str>, &str)>,
) -> (u16, Value) {
    let mut r = browser().request(method, s.url(path));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some((content_type, text)) = body {
        if let Some(t) = content_type {
            r = r.header("content-type", t);
        }
        r = r.body(text.to_string());
    }
    status_and_json(r.send().await.unwrap()).await
}

/// The `/api/v1` error message of an answer.
fn v1_error(body: &Value) -> &str {
    body["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not a v1 error: {body}"))
}

/// The `/api/v3` (healthchecks) error of an answer: a string.
fn v3_error(body: &Value) -> &str {
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not a v3 error: {body}"))
}

async fn check_count(s: &TestServer) -> usize {
    s.get_json("/api/v1/checks").await["checks"]
        .as_array()
        .unwrap()
        .len()
}

async fn paused(s: &TestServer, uuid: &str) -> bool {
    s.get_json(&format!("/api/v1/checks/{uuid}")).await["paused"] == true
}

both_backends!(cross_site_api_writes_are_refused, |backend| async move {
    let s = TestServer::start(backend, "base_url = \"https://overdue.example.com\"").await;
    let host = s.base.trim_start_matches("http://").to_string();
    let port = host.rsplit(':').next().unwrap().to_string();
    let evil_host = format!("rebind.evil.example:{port}");
    let evil_origin = format!("{EVIL}:{port}");
    let json = Some((Some("application/json"), r#"{"slug": "x"}"#));

    // The issue's request: a page of another site asks for a write key.
    let (status, body) = send(
        &s,
        Method::POST,
        "/api/v1/keys",
        &[
            ("host", evil_host.as_str()),
            ("origin", evil_origin.as_str()),
        ],
        Some((Some("text/plain"), r#"{"name":"evil","scope":"write"}"#)),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert!(v1_error(&body).contains("cross-site"), "{body}");
    // Even from loopback, with the type right.
    let (status, body) = send(
        &s,
        Method::POST,
        "/api/v1/keys",
        &[("origin", evil_origin.as_str())],
        Some((
            Some("application/json"),
            r#"{"name":"evil","scope":"write"}"#,
        )),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(v1_error(&body).contains(&evil_origin), "{body}");
    assert_eq!(
        s.get_json("/api/v1/keys").await["keys"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    for headers in [
        &[("sec-fetch-site", "cross-site")][..],
        &[("sec-fetch-site", "same-site")],
        &[
            ("sec-fetch-site", "same-site"),
            ("origin", "https://wiki.example.com"),
        ],
        &[("origin", "null")],
        &[("origin", "http://127.0.0.1:1")],
        &[("origin", "https://overdue.example.com:8443")],
        &[
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://evil.example"),
        ],
    ] {
        let (status, body) = send(&s, Method::POST, "/api/v1/checks", headers, json).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(
            v1_error(&body).contains("cross-site request refused"),
            "{body}"
        );
        // healthchecks' shape on /api/v3.
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v3/checks/",
            headers,
            Some((Some("application/json"), r#"{"name": "x"}"#)),
        )
        .await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(
            v3_error(&body).contains("cross-site request refused"),
            "{body}"
        );
    }
    assert_eq!(check_count(&s).await, 0);

    // The server's own pages, and clients that are not browsers.
    let own = s.base.clone();
    for (i, headers) in [
        &[] as &[(&str, &str)],
        &[("sec-fetch-site", "same-origin"), ("origin", own.as_str())],
        &[("sec-fetch-site", "none")],
        &[("origin", "https://overdue.example.com")],
        &[
            ("sec-fetch-site", "same-site"),
            ("origin", "https://overdue.example.com"),
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!(r#"{{"slug": "ok-{i}"}}"#);
        let (status, answer) = send(
            &s,
            Method::POST,
            "/api/v1/checks",
            headers,
            Some((Some("application/json"), &body)),
        )
        .await;
        assert_eq!(status, 201, "{headers:?}: {answer}");
    }
    let (status, body) = send(
        &s,
        Method::POST,
        "/api/v3/checks/",
        &[("origin", own.as_str())],
        Some((Some("application/json"), r#"{"name": "v3"}"#)),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Reads are not writes.
    let (status, body) = send(
        &s,
        Method::GET,
        "/api/v1/checks",
        &[
            ("sec-fetch-site", "cross-site"),
            ("origin", evil_origin.as_str()),
        ],
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Pings stay open to any page.
    let uuid = s.get_json("/api/v1/checks/ok-0").await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = send(
        &s,
        Method::POST,
        &format!("/ping/{uuid}"),
        &[
            ("sec-fetch-site", "cross-site"),
            ("origin", evil_origin.as_str()),
        ],
        Some((Some("text/plain"), "done")),
    )
    .await;
    assert_eq!((status, body), (200, json!("OK")));
});

both_backends!(
    cross_site_writes_are_refused_with_a_key_too,
    |backend| async move {
        let s = TestServer::start(backend, &write_key()).await;
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v1/checks",
            &[("x-api-key", WRITE), ("origin", "http://evil.example")],
            Some((Some("application/json"), r#"{"slug": "x"}"#)),
        )
        .await;
        assert_eq!(status, 403, "{body}");
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v1/checks",
            &[("x-api-key", WRITE)],
            Some((Some("application/json"), r#"{"slug": "x"}"#)),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
);

both_backends!(
    the_dashboard_refuses_cross_site_form_posts,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s.create_check(json!({"slug": "nightly"})).await;
        let uuid = c["uuid"].as_str().unwrap();
        let page = s.get_text(&format!("/checks/{uuid}")).await;
        let csrf = csrf_of(&page);
        let post = |headers: Vec<(&'static str, String)>| {
            let mut r = browser()
                .post(s.url(&format!("/checks/{uuid}/pause")))
                .form(&[("csrf", csrf.as_str())]);
            for (k, v) in headers {
                r = r.header(k, v);
            }
            r.send()
        };
        for headers in [
            vec![("origin", "http://evil.example".to_string())],
            vec![("sec-fetch-site", "cross-site".to_string())],
            vec![
                ("sec-fetch-site", "same-site".to_string()),
                ("origin", "http://a.127.0.0.1.example".to_string()),
            ],
        ] {
            let r = post(headers.clone()).await.unwrap();
            assert_eq!(r.status(), 403, "{headers:?}");
            let text = r.text().await.unwrap();
            assert!(text.contains("cross-site request refused"), "{text}");
            assert!(!paused(&s, uuid).await, "{headers:?}");
        }
        // The dashboard's own form, as a browser sends it.
        let r = post(vec![
            ("sec-fetch-site", "same-origin".to_string()),
            ("origin", s.base.clone()),
        ])
        .await
        .unwrap();
        assert_eq!(r.status(), 303);
        assert!(paused(&s, uuid).await);
    }
);

both_backends!(
    without_keys_only_loopback_host_names_are_answered,
    |backend| async move {
        let s = TestServer::start(backend, "base_url = \"http://overdue.internal:8080\"").await;
        let c = s.create_check(json!({"slug": "nightly"})).await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let port = s.base.rsplit(':').next().unwrap().to_string();
        let evil = format!("rebind.evil.example:{port}");

        let (status, body) =
            send(&s, Method::GET, "/api/v1/checks", &[("host", &evil)], None).await;
        assert_eq!(status, 403, "{body}");
        let why = v1_error(&body);
        assert!(why.contains("DNS rebinding"), "{why}");
        assert!(why.contains("\"rebind.evil.example\""), "{why}");
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v1/keys",
            &[("host", &evil)],
            Some((
                Some("application/json"),
                r#"{"name":"evil","scope":"write"}"#,
            )),
        )
        .await;
        assert_eq!(status, 403, "{body}");
        assert!(v1_error(&body).contains("DNS rebinding"), "{body}");
        let (status, body) =
            send(&s, Method::GET, "/api/v3/checks/", &[("host", &evil)], None).await;
        assert_eq!(status, 403, "{body}");
        assert!(v3_error(&body).contains("DNS rebinding"), "{body}");
        // The dashboard says why instead of asking for a key.
        for path in ["/", &format!("/checks/{uuid}")] {
            let (status, body) = send(&s, Method::GET, path, &[("host", &evil)], None).await;
            assert_eq!(status, 403, "{path}: {body}");
            assert!(body.as_str().unwrap().contains("DNS rebinding"), "{body}");
        }

        // Loopback names and addresses, and base_url's host on any port.
        for host in [
            format!("localhost:{port}"),
            "localhost".to_string(),
            format!("app.localhost:{port}"),
            format!("127.1.2.3:{port}"),
            format!("[::1]:{port}"),
            "overdue.internal:9999".to_string(),
        ] {
            let (status, body) =
                send(&s, Method::GET, "/api/v1/checks", &[("host", &host)], None).await;
            assert_eq!(status, 200, "{host}: {body}");
            let (status, _) = send(&s, Method::GET, "/", &[("host", &host)], None).await;
            assert_eq!(status, 200, "{host}");
        }
        assert_eq!(
            s.get_json("/api/v1/keys").await["keys"]
                .as_array()
                .unwrap()
                .len(),
            0
        );
        // Pings need no key, whatever the host.
        let (status, _) = send(
            &s,
            Method::GET,
            &format!("/ping/{uuid}"),
            &[("host", &evil)],
            None,
        )
        .await;
        assert_eq!(status, 200);

        // Once a key exists, the key decides, not the host.
        let r = s
            .client
            .post(s.url("/api/v1/keys"))
            .json(&json!({"name": "ops", "scope": "write"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let key = r.json::<Value>().await.unwrap()["key"]
            .as_str()
            .unwrap()
            .to_string();
        let (status, body) = send(
            &s,
            Method::GET,
            "/api/v1/checks",
            &[("host", &evil), ("x-api-key", &key)],
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let (status, body) =
            send(&s, Method::GET, "/api/v1/checks", &[("host", &evil)], None).await;
        assert_eq!(status, 401, "{body}");
    }
);

both_backends!(
    without_keys_basic_auth_users_still_sign_in,
    |backend| async move {
        let s = TestServer::start(
            backend,
            "[dashboard]\nbasic_auth = [{ user = \"ops\", password = \"ops-password-1\", scope = \"write\" }]\n",
        )
        .await;
        let host = "overdue.lan:8080";
        // The browser is asked for its user, not turned away.
        let r = browser()
            .get(s.url("/"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        assert!(r.headers().contains_key("www-authenticate"));
        let r = browser()
            .get(s.url("/"))
            .header("host", host)
            .basic_auth("ops", Some("ops-password-1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
);

both_backends!(api_writes_with_a_body_must_be_json, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let check = r#"{"slug": "x"}"#;
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        None,
    ] {
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v1/checks",
            &[],
            Some((content_type, check)),
        )
        .await;
        assert_eq!(status, 415, "{content_type:?}: {body}");
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
        assert!(v1_error(&body).contains("application/json"), "{body}");
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v3/checks/",
            &[],
            Some((content_type, r#"{"name": "x"}"#)),
        )
        .await;
        assert_eq!(status, 415, "{content_type:?}: {body}");
        assert!(v3_error(&body).contains("application/json"), "{body}");
    }
    assert_eq!(check_count(&s).await, 0);

    for (i, content_type) in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!(r#"{{"slug": "ok-{i}", "labels": {{"team": "data"}}}}"#);
        let (status, answer) = send(
            &s,
            Method::POST,
            "/api/v1/checks",
            &[],
            Some((Some(content_type), &body)),
        )
        .await;
        assert_eq!(status, 201, "{content_type}: {answer}");
    }
    let (status, body) = send(
        &s,
        Method::PATCH,
        "/api/v1/checks/ok-0",
        &[],
        Some((Some("text/plain"), r#"{"interval": "5m"}"#)),
    )
    .await;
    assert_eq!(status, 415, "{body}");
    // A write without a body needs no type.
    let (status, body) = send(&s, Method::POST, "/api/v1/checks/ok-0/pause", &[], None).await;
    assert_eq!(status, 200, "{body}");
    let uuid = s.get_json("/api/v1/checks/ok-1").await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = send(
        &s,
        Method::POST,
        &format!("/api/v3/checks/{uuid}/pause"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = send(&s, Method::DELETE, "/api/v1/checks/ok-2", &[], None).await;
    assert_eq!(status, 204, "{body}");
    // Pings take any body.
    let (status, _) = send(
        &s,
        Method::POST,
        &format!("/ping/{uuid}"),
        &[],
        Some((Some("application/x-www-form-urlencoded"), "a=b")),
    )
    .await;
    assert_eq!(status, 200);
});

/// `sha256(prefix + database_url + "\0" + text)`, as tokens and label
/// badge keys were made before: anyone could compute them.
fn old_key(prefix: &str, database_url: &str, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(prefix.as_bytes());
    h.update(database_url.as_bytes());
    h.update(b"\0");
    h.update(text.as_bytes());
    hex::encode(&h.finalize()[..20])
}

/// The CSRF token of `check`'s page (loopback, no key) and the badge key
/// of team=data.
async fn page_secrets(s: &TestServer, check: &str) -> (String, String) {
    let page = s.get_text(&format!("/checks/{check}")).await;
    (csrf_of(&page), label_badge_key(s, "team=data").await)
}

async fn badge_status(s: &TestServer, key: &str) -> u16 {
    s.client
        .get(s.url(&format!("/badge/{key}.json")))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

both_backends!(
    csrf_tokens_and_label_badges_come_from_a_random_secret,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "nightly", "labels": {"team": "data"}}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let (csrf, badge) = page_secrets(&s, "nightly").await;
        let url = s.db.url.clone();
        assert_ne!(csrf, old_key("overdue csrf\0", &url, "open"));
        assert_ne!(badge, old_key("overdue label badge\0", &url, "team=data"));
        assert_eq!(badge_status(&s, &badge).await, 200);

        // A token computed from the configuration does not pause anything.
        let forged = old_key("overdue csrf\0", &url, "open");
        let r = browser()
            .post(s.url(&format!("/checks/{uuid}/pause")))
            .form(&[("csrf", forged.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        assert!(!paused(&s, &uuid).await);

        // The same after a restart...
        let db = s.stop().await;
        let s = TestServer::start_on(db, "").await;
        assert_eq!(
            page_secrets(&s, "nightly").await,
            (csrf.clone(), badge.clone())
        );
        // ...and another once the stored secret is gone: it is what they
        // come from.
        let db = s.stop().await;
        db.sql("DELETE FROM server_secrets WHERE name = 'page_key'")
            .await;
        let s = TestServer::start_on(db, "").await;
        let (csrf2, badge2) = page_secrets(&s, "nightly").await;
        assert_ne!(csrf2, csrf);
        assert_ne!(badge2, badge);
        assert_eq!(badge_status(&s, &badge).await, 404);
        assert_eq!(badge_status(&s, &badge2).await, 200);
    }
);

both_backends!(label_badges_follow_label_changes, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "a", "labels": {"team": "data"}}))
        .await;
    let data = label_badge_key(&s, "team=data").await;
    assert_eq!(badge_status(&s, &data).await, 200);
    assert_eq!(
        badge_status(&s, "0123456789abcdef0123456789abcdef01234567").await,
        404
    );
    // A label that appears after the keys were last looked up.
    s.create_check(json!({"slug": "b", "labels": {"team": "web"}}))
        .await;
    let web = label_badge_key(&s, "team=web").await;
    assert_eq!(badge_status(&s, &web).await, 200);
    // Changed, then deleted: the old labels name nothing.
    let r = s
        .client
        .patch(s.url("/api/v1/checks/a"))
        .json(&json!({"labels": {"team": "ops"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(badge_status(&s, &data).await, 404);
    let ops = label_badge_key(&s, "team=ops").await;
    assert_eq!(badge_status(&s, &ops).await, 200);
    let r = s
        .client
        .delete(s.url("/api/v1/checks/b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(badge_status(&s, &web).await, 404);
});

/// Replicas share the secret, and a label made on one is a badge on the
/// other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn replicas_share_the_page_key() {
    common::need_postgres();
    let a = TestServer::start(Backend::Postgres, "").await;
    let b = TestServer::start_on(a.db.alias(), "").await;
    a.create_check(json!({"slug": "a", "labels": {"team": "data"}}))
        .await;
    let key = label_badge_key(&a, "team=data").await;
    let (csrf_a, _) = page_secrets(&a, "a").await;
    // The other replica hears of the check through the database.
    let start = std::time::Instant::now();
    while badge_status(&b, &key).await != 200 {
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "hang guard: no badge on b"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(page_secrets(&b, "a").await, (csrf_a, key));
    b.stop().await;
    a.stop().await;
}

async fn silence(s: &TestServer, method: Method, path: &str, matchers: &[&str]) -> (u16, Value) {
    let r = s
        .client
        .request(method, s.url(path))
        .json(&json!({"matchers": matchers, "duration": "1h", "comment": "maintenance"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

both_backends!(a_silence_of_every_check_is_refused, |backend| async move {
    let s = TestServer::start(backend, "").await;
    s.create_check(json!({"slug": "a", "labels": {"team": "data"}}))
        .await;
    s.create_check(json!({"slug": "b", "labels": {"team": "web"}, "alert_on_overlap": true}))
        .await;
    for every in [
        &["alertname=~\"Overdue.*\""][..],
        &["check=~\".+\""],
        &["team=~\"data|web\""],
        &["name=~\"a|b\"", "alertname!=\"nothing\""],
    ] {
        let (status, body) = silence(&s, Method::POST, "/api/v1/silences", every).await;
        assert_eq!(status, 400, "{every:?}: {body}");
        assert_eq!(body["error"]["fields"][0]["field"], "matchers", "{body}");
        let why = body["error"]["fields"][0]["message"].as_str().unwrap();
        assert!(why.contains("all 2 checks"), "{why}");
        assert!(why.contains("narrow"), "{why}");
    }
    // As before: matchers that match an empty label set.
    let (status, _) = silence(&s, Method::POST, "/api/v1/silences", &["team=~\".*\""]).await;
    assert_eq!(status, 400);
    assert_eq!(
        s.get_json("/api/v1/silences").await["silences"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    // Narrower ones pass; replacing one with a wider one does not.
    let (status, body) = silence(&s, Method::POST, "/api/v1/silences", &["team=\"data\""]).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let (status, _) = silence(
        &s,
        Method::POST,
        "/api/v1/silences",
        &["alertname=\"OverdueOverlap\""],
    )
    .await;
    assert_eq!(status, 201, "only b alerts on overlaps");
    let (status, body) = silence(
        &s,
        Method::PUT,
        &format!("/api/v1/silences/{id}"),
        &["check=~\"a|b\""],
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // The only check there is may be silenced, as a snooze does.
    let r = s
        .client
        .delete(s.url("/api/v1/checks/b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (status, body) = silence(&s, Method::POST, "/api/v1/silences", &["check=\"a\""]).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = silence(&s, Method::POST, "/api/v1/silences", &["check=~\".+\""]).await;
    assert_eq!(status, 201, "{body}");
});

both_backends!(config_file_silences_keep_their_rule, |backend| async move {
    let db = TestDb::new(backend).await;
    let s = TestServer::start_from_file(
        db,
        "[[silences]]\nmatchers = ['alertname=~\"Overdue.*\"']\nduration = \"1h\"\n\
             [[checks]]\nslug = \"a\"\ninterval = \"1m\"\n\
             [[checks]]\nslug = \"b\"\ninterval = \"1m\"\n",
    )
    .await;
    let r = s.client.post(s.url("/api/v1/reload")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let silences = s.get_json("/api/v1/silences").await;
    assert_eq!(
        silences["silences"].as_array().unwrap().len(),
        1,
        "{silences}"
    );
});

both_backends!(
    healthchecks_curl_examples_still_create_checks,
    needs = [curl],
    |backend| async move {
        let s = TestServer::start(
            backend,
            "[[api_keys]]\nname = \"rw\"\nscope = \"write\"\nkey = \"hc-style-key-0123\"\n",
        )
        .await;
        common::need(common::Peer::Curl);
        // healthchecks' docs: `curl URL --header "X-Api-Key: …" --data '{…}'`,
        // which curl sends as a form. A page cannot send X-Api-Key without a
        // preflight, so v3 reads the body as healthchecks does.
        let out = std::process::Command::new("curl")
            .args(["-sS", "--noproxy", "*", "-w", "\n%{http_code}"])
            .arg(s.url("/api/v3/checks/"))
            .args(["--header", "X-Api-Key: hc-style-key-0123"])
            .args([
                "--data",
                r#"{"name": "backups", "tags": "prod", "timeout": 3600}"#,
            ])
            .output()
            .expect("curl runs");
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, code) = text.rsplit_once('\n').unwrap();
        assert_eq!(code, "201", "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(body).unwrap()["name"],
            "backups"
        );
        // The native API stays strict, key or not.
        let (status, body) = send(
            &s,
            Method::POST,
            "/api/v1/checks",
            &[("x-api-key", "hc-style-key-0123")],
            Some((
                Some("application/x-www-form-urlencoded"),
                r#"{"slug": "x"}"#,
            )),
        )
        .await;
        assert_eq!(status, 415, "{body}");
    }
);
