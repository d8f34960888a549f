//! Security (issue #10 item 6): ping rate limits, `[webhooks] allow / deny`,
//! and secrets that never show in logs, metrics or API responses.

mod common;

use std::time::{Duration, Instant};

use common::sinks::{Behaviour, WebhookSink};
use common::{
    client, notifications_until, write_config, Backend, ChildServer, TestDb, TestServer, PING_KEY,
};
use reqwest::Method;
use serde_json::{json, Value};

/// Sends a ping with `method` (and `X-Forwarded-For` when given); returns
/// (status, Retry-After, body).
async fn ping(
    server: &TestServer,
    method: Method,
    path: &str,
    forwarded_for: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut r = server.client.request(method, server.url(path));
    if let Some(ip) = forwarded_for {
        r = r.header("x-forwarded-for", ip);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry_after, r.text().await.unwrap())
}

async fn ping_count(server: &TestServer, uuid: &str) -> usize {
    let v = server
        .get_json(&format!("/api/v1/checks/{uuid}/pings"))
        .await;
    v["pings"].as_array().expect("pings list").len()
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

both_backends!(
    per_check_limit_answers_429_and_stores_only_accepted_pings,
    |backend| async move {
        let server = TestServer::start(backend, "[rate_limit]\nper_check = \"3/min\"").await;
        let a = server
            .create_check(json!({"slug": "a", "interval": "1h"}))
            .await;
        let a = a["uuid"].as_str().unwrap().to_string();
        let b = server
            .create_check(json!({"slug": "b", "interval": "1h"}))
            .await;
        let b = b["uuid"].as_str().unwrap().to_string();

        // Three pings, three forms: the whole burst.
        for (method, path) in [
            (Method::GET, format!("/ping/{a}")),
            (Method::POST, format!("/ping/{a}/start")),
            (Method::HEAD, format!("/ping/{PING_KEY}/a/fail")),
        ] {
            let (status, _, _) = ping(&server, method, &path, None).await;
            assert_eq!(status, 200, "{path}");
        }
        // Every other form is over the limit now.
        let mut refused = 0;
        for (method, path) in [
            (Method::GET, format!("/ping/{a}/0")),
            (Method::POST, format!("/ping/{a}/log")),
            (Method::GET, format!("/ping/{PING_KEY}/a")),
            (Method::HEAD, format!("/ping/{a}/fail")),
            (Method::POST, format!("/ping/{PING_KEY}/a/start")),
        ] {
            let (status, retry_after, body) = ping(&server, method.clone(), &path, None).await;
            assert_eq!(status, 429, "{method} {path}");
            let secs: u64 = retry_after
                .expect("Retry-After on a 429")
                .parse()
                .expect("Retry-After in whole seconds");
            // 3/min: a token comes back every 20 s.
            assert!((1..=20).contains(&secs), "Retry-After {secs}");
            if method != Method::HEAD {
                assert!(body.contains("[rate_limit] per_check"), "{body}");
                assert!(body.contains("3/min"), "{body}");
            }
            refused += 1;
        }
        assert_eq!(
            ping_count(&server, &a).await,
            3,
            "refused pings are not stored"
        );
        let check = server.get_json(&format!("/api/v1/checks/{a}")).await;
        assert_eq!(
            check["status"], "down",
            "the third ping (fail) counted: {check}"
        );

        // Another check has a bucket of its own.
        let (status, _, _) = ping(&server, Method::GET, &format!("/ping/{b}"), None).await;
        assert_eq!(status, 200);
        assert_eq!(ping_count(&server, &b).await, 1);

        let text = server.get_text("/metrics").await;
        assert_eq!(
            metric(
                &text,
                "overdue_ping_rejected_total{reason=\"rate_limit_check\"}"
            ),
            Some(f64::from(refused)),
            "{text}"
        );
        server.stop().await;
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_address_limit_follows_the_forwarded_client_address() {
    let server = TestServer::start(
        Backend::Sqlite,
        "trusted_proxies = [\"127.0.0.1/32\"]\n[rate_limit]\nper_address = \"2/min\"",
    )
    .await;
    let c = server
        .create_check(json!({"slug": "c", "interval": "1h"}))
        .await;
    let c = c["uuid"].as_str().unwrap().to_string();
    let path = format!("/ping/{c}");
    for _ in 0..2 {
        let (status, _, _) = ping(&server, Method::GET, &path, Some("203.0.113.1")).await;
        assert_eq!(status, 200);
    }
    let (status, retry_after, body) = ping(&server, Method::GET, &path, Some("203.0.113.1")).await;
    assert_eq!(status, 429);
    let secs: u64 = retry_after.unwrap().parse().unwrap();
    assert!((1..=30).contains(&secs), "Retry-After {secs}");
    assert!(body.contains("[rate_limit] per_address"), "{body}");
    // Another client behind the same proxy is not held up.
    let (status, _, _) = ping(&server, Method::POST, &path, Some("203.0.113.2")).await;
    assert_eq!(status, 200);
    // Unknown URLs count too: the limit is taken before the check is looked up.
    let unknown = format!("/ping/{}", uuid::Uuid::new_v4());
    for _ in 0..2 {
        let (status, _, _) = ping(&server, Method::GET, &unknown, Some("203.0.113.3")).await;
        assert_eq!(status, 404);
    }
    let (status, _, _) = ping(&server, Method::GET, &path, Some("203.0.113.3")).await;
    assert_eq!(status, 429);

    let pings = server.get_json(&format!("/api/v1/checks/{c}/pings")).await;
    let mut from: Vec<&str> = pings["pings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["remote_addr"].as_str().unwrap())
        .collect();
    from.sort();
    assert_eq!(from, ["203.0.113.1", "203.0.113.1", "203.0.113.2"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_not_limited_by_default() {
    let server = TestServer::start(Backend::Sqlite, "").await;
    let c = server
        .create_check(json!({"slug": "busy", "interval": "1h"}))
        .await;
    let url = server.url(&format!("/ping/{}", c["uuid"].as_str().unwrap()));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let http = server.client.clone();
        let url = url.clone();
        set.spawn(async move { http.get(url).send().await.unwrap().status().as_u16() });
    }
    while let Some(status) = set.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    server.stop().await;
}

/// Creates a check labelled team=data and fails it.
async fn fail_a_check(server: &TestServer) {
    let c = server
        .create_check(json!({"slug": "job", "interval": "1h", "labels": {"team": "data"}}))
        .await;
    let (status, _) = server
        .ping(&format!("/ping/{}/fail", c["uuid"].as_str().unwrap()))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_targets_fail_permanently_and_receive_nothing() {
    let hook = WebhookSink::start().await;
    let port = hook.url("").rsplit(':').next().unwrap().to_string();
    let toml = format!(
        r#"
[webhooks]
deny = ["127.0.0.0/8", "::1"]

[[receivers]]
name = "literal"
type = "webhook"
url = "{literal}"

[[receivers]]
name = "named"
type = "webhook"
url = "http://localhost:{port}/named"

[[receivers]]
name = "slack"
type = "slack"
url = "{slack}"

[[receivers]]
name = "am"
type = "alertmanager"
url = "{am}"

[[receivers]]
name = "pager"
type = "pagerduty"
routing_key = "rk"
url = "{pager}"

[[receivers]]
name = "bot"
type = "telegram"
bot_token = "1:tok"
chat_id = "1"
url = "{am}"

[route]
receiver = "literal"
group_wait = "100ms"
routes = [
  {{ matchers = ['team="data"'], receiver = "literal", continue = true }},
  {{ matchers = ['team="data"'], receiver = "named", continue = true }},
  {{ matchers = ['team="data"'], receiver = "slack", continue = true }},
  {{ matchers = ['team="data"'], receiver = "pager", continue = true }},
  {{ matchers = ['team="data"'], receiver = "bot", continue = true }},
  {{ matchers = ['team="data"'], receiver = "am" }},
]

[notifications]
retry_base = "100ms"
max_attempts = 3
"#,
        literal = hook.url("/literal"),
        slack = hook.url("/services/T0/B0/x"),
        am = hook.url(""),
        pager = hook.url("/v2/enqueue"),
    );
    let server = TestServer::start(Backend::Sqlite, &toml).await;
    fail_a_check(&server).await;
    let dead = notifications_until(&server, "?state=dead", |l| l.len() == 6).await;
    for n in &dead {
        let receiver = n["receiver"].as_str().unwrap();
        let error = n["last_error"].as_str().unwrap();
        assert_eq!(
            n["attempts"], 1,
            "{receiver}: a denied target is not retried"
        );
        assert!(
            error.contains("127.0.0.1 is denied by [webhooks] deny 127.0.0.0/8")
                || (receiver == "named" && error.contains("::1 is denied by [webhooks] deny ::1")),
            "{receiver}: {error}"
        );
        if receiver == "named" {
            assert!(error.contains("(localhost resolves to it)"), "{error}");
        }
    }
    // Time for a retry that must not come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        hook.requests().is_empty(),
        "a denied target received a request"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_address_is_reached_despite_deny_private() {
    let hook = WebhookSink::start().await;
    let toml = format!(
        r#"
[webhooks]
allow = ["127.0.0.1/32"]
deny = ["private"]

{hook}"#,
        hook = hook.hook_toml("group_wait = \"100ms\"\n"),
    );
    let server = TestServer::start(Backend::Sqlite, &toml).await;
    fail_a_check(&server).await;
    let got = hook.wait_for(1).await;
    assert_eq!(got[0].path, "/hook");
    notifications_until(&server, "?state=delivered", |l| l.len() == 1).await;
    server.stop().await;
}

/// Distinct values in every secret setting: none may show up anywhere.
const API_KEY: &str = "apikey-5ecret-0123456789";
const READ_KEY: &str = "readkey-5ecret-0123456789";
const PING_KEY_SECRET: &str = "pingkey-5ecret";
const SMTP_PASSWORD: &str = "smtppass-5ecret";
const HMAC_SECRET: &str = "hmac-5ecret";
const HEADER_VALUE: &str = "headerval-5ecret";
const URL_PASSWORD: &str = "urlpass-5ecret";
const URL_TOKEN: &str = "urltoken-5ecret";
const SLACK_PATH: &str = "slackpath-5ecret";
const METRICS_TOKEN: &str = "metrics-5ecret";
const DASH_PASSWORD: &str = "dashpass-5ecret";
const PG_PASSWORD: &str = "pgpass-5ecret";

/// Everything the server said: status, headers and body of every response.
#[derive(Default)]
struct Seen(Vec<String>);

impl Seen {
    async fn call(&mut self, r: reqwest::RequestBuilder) -> (u16, String) {
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let mut text = format!("{status}\n");
        for (k, v) in r.headers() {
            text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
        }
        let body = r.text().await.unwrap();
        text.push_str(&body);
        self.0.push(text);
        (status, body)
    }
}

/// Runs the real binary with every secret set and debug logs, exercises it,
/// and looks for each secret in its log, its answers and /metrics.
async fn secrets_stay_secret(backend: Backend, log_format: &str) {
    let hook = WebhookSink::start().await;
    for _ in 0..20 {
        hook.push(Behaviour::Status(500));
    }
    let db = TestDb::new(backend).await;
    let mut secrets = vec![
        API_KEY,
        READ_KEY,
        PING_KEY_SECRET,
        SMTP_PASSWORD,
        HMAC_SECRET,
        HEADER_VALUE,
        URL_PASSWORD,
        URL_TOKEN,
        SLACK_PATH,
        METRICS_TOKEN,
        DASH_PASSWORD,
    ];
    // PostgreSQL with trust auth takes any password: put one in the URL.
    let database_url = match backend {
        Backend::Sqlite => db.url.clone(),
        Backend::Postgres => {
            secrets.push(PG_PASSWORD);
            let (scheme, rest) = db.url.split_once("://").unwrap();
            let (userinfo, host) = rest.split_once('@').expect("user in the test URL");
            let user = userinfo.split(':').next().unwrap();
            format!("{scheme}://{user}:{PG_PASSWORD}@{host}")
        }
    };
    let sink = hook.url("");
    let sink_host = sink.strip_prefix("http://").unwrap();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let toml = format!(
        r#"
listen = "127.0.0.1:0"
database_url = "{database_url}"
ping_key = "{PING_KEY_SECRET}"
log_format = "{log_format}"
api_keys = [
  {{ name = "ops", scope = "write", key = "{API_KEY}" }},
  {{ name = "viewer", scope = "read", key = "{READ_KEY}" }},
]

[[receivers]]
name = "hook"
type = "webhook"
url = "http://user:{URL_PASSWORD}@{sink_host}/hook?token={URL_TOKEN}"
secret = "{HMAC_SECRET}"
headers = {{ Authorization = "Bearer {HEADER_VALUE}" }}

[[receivers]]
name = "slack"
type = "slack"
url = "{sink}/services/{SLACK_PATH}"

[[receivers]]
name = "mail"
type = "email"
to = ["oncall@example.com"]
smtp = {{ host = "127.0.0.1", port = {closed_port}, tls = "none", from = "o@example.com", username = "overdue", password = "{SMTP_PASSWORD}" }}

[route]
receiver = "hook"
group_wait = "100ms"
routes = [
  {{ matchers = ['team="data"'], receiver = "hook", continue = true }},
  {{ matchers = ['team="data"'], receiver = "slack", continue = true }},
  {{ matchers = ['team="data"'], receiver = "mail" }},
]

[notifications]
retry_base = "100ms"
retry_max = "200ms"
max_attempts = 2

[metrics]
token = "{METRICS_TOKEN}"

[dashboard]
basic_auth = [ {{ user = "ops", password = "{DASH_PASSWORD}", scope = "write" }} ]
"#
    );
    let path = write_config(db.dir.path(), &toml);
    let server = ChildServer::spawn_logging(&path, "debug");
    let base = server.base.clone();
    let http = client();
    let url = |p: &str| format!("{base}{p}");
    let mut seen = Seen::default();

    // A check every receiver is routed, failed by slug (the URL carries the
    // ping key); another made by a ping; a wrong slug.
    let (status, body) = seen
        .call(
            http.post(url("/api/v1/checks"))
                .bearer_auth(API_KEY)
                .json(&json!({"slug": "job", "interval": "1h", "labels": {"team": "data"}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = seen
        .call(http.post(url(&format!("/ping/{PING_KEY_SECRET}/other?create=1"))))
        .await;
    assert_eq!(status, 201);
    let (status, _) = seen
        .call(http.get(url(&format!("/ping/{PING_KEY_SECRET}/nope/fail"))))
        .await;
    assert_eq!(status, 404);
    let (status, _) = seen
        .call(http.get(url(&format!("/ping/{PING_KEY_SECRET}/job/fail"))))
        .await;
    assert_eq!(status, 200);

    // API calls with good, wrong and read keys.
    for p in [
        "/api/v1/checks",
        "/api/v1/receivers",
        "/api/v1/routes",
        "/api/v1/keys",
        "/api/v1/status",
        "/api/v1/silences",
        "/api/v3/checks/",
        "/api/v3/channels/",
    ] {
        let (status, body) = seen.call(http.get(url(p)).bearer_auth(API_KEY)).await;
        assert_eq!(status, 200, "{p}: {body}");
        seen.call(http.get(url(p)).header("x-api-key", READ_KEY))
            .await;
        let (status, _) = seen
            .call(http.get(url(p)).header("x-api-key", "wrong-key-0123456789"))
            .await;
        assert_eq!(status, 401, "{p}");
    }
    // A key made through the API is shown once, to its maker; it must not
    // show anywhere else (it is stored hashed).
    let (status, body) = seen
        .call(
            http.post(url("/api/v1/keys"))
                .bearer_auth(API_KEY)
                .json(&json!({"name": "made", "scope": "read"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    seen.0.pop();
    let made: Value = serde_json::from_str(&body).unwrap();
    let made_key = made["key"].as_str().expect("the new key").to_string();
    let (status, _) = seen
        .call(http.get(url("/api/v1/checks")).bearer_auth(&made_key))
        .await;
    assert_eq!(status, 200);
    let (status, _) = seen
        .call(http.get(url("/api/v1/keys")).bearer_auth(API_KEY))
        .await;
    assert_eq!(status, 200);
    let (status, body) = seen
        .call(http.post(url("/api/v1/reload")).bearer_auth(API_KEY))
        .await;
    assert_eq!(status, 200, "{body}");

    // The dashboard: basic auth, right and wrong, and the key login form.
    let (status, _) = seen
        .call(http.get(url("/")).basic_auth("ops", Some(DASH_PASSWORD)))
        .await;
    assert_eq!(status, 200);
    let (status, _) = seen
        .call(http.get(url("/")).basic_auth("ops", Some("wrong-password")))
        .await;
    assert_ne!(status, 200);
    let (_, page) = seen.call(http.get(url("/login"))).await;
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a CSRF token in the login form")
        .to_string();
    let no_redirect = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirect
        .post(url("/login"))
        .form(&[("key", API_KEY), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    // The session cookie is the key's stand-in for the browser that signed
    // in (hex, HttpOnly): it is checked for the plain key with the rest.
    let cookie = r
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    seen.0.push(format!("{:?}", r.headers()));
    let (status, _) = seen.call(http.get(url("/")).header("cookie", cookie)).await;
    assert_eq!(status, 200);

    // Failed deliveries: the webhook answers 500, Slack's too, SMTP is closed.
    let start = Instant::now();
    loop {
        let (_, body) = seen
            .call(
                http.get(url("/api/v1/notifications?state=dead"))
                    .bearer_auth(API_KEY),
            )
            .await;
        let v: Value = serde_json::from_str(&body).unwrap();
        let dead = v["notifications"].as_array().unwrap();
        if dead.len() == 3 {
            assert!(dead.iter().all(|n| n["last_error"].is_string()), "{v}");
            break;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "deliveries did not fail: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!hook.requests().is_empty(), "the webhook was tried");

    // /metrics, with and without its token.
    let (status, metrics) = seen
        .call(http.get(url("/metrics")).bearer_auth(METRICS_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert!(metrics.contains("overdue_notifications_total"), "{metrics}");
    let (status, _) = seen.call(http.get(url("/metrics"))).await;
    assert_eq!(status, 401);

    let log = server.log();
    assert!(
        log.lines().count() > 20,
        "debug logging is on (got {} lines)",
        log.lines().count()
    );
    drop(server);
    secrets.push(&made_key);
    for s in &secrets {
        assert!(!log.contains(s), "{s} is in the log:\n{log}");
        for (i, r) in seen.0.iter().enumerate() {
            assert!(!r.contains(s), "{s} is in response {i}:\n{r}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_text_logs_responses_and_metrics() {
    secrets_stay_secret(Backend::Sqlite, "text").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_json_logs_responses_and_metrics() {
    secrets_stay_secret(Backend::Sqlite, "json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn secrets_stay_out_with_a_postgres_password() {
    secrets_stay_secret(Backend::Postgres, "text").await;
}

both_backends!(api_keys_are_stored_hashed, |backend| async move {
    let server = TestServer::start(backend, "").await;
    let r = server
        .client
        .post(server.url("/api/v1/keys"))
        .json(&json!({"name": "ci", "scope": "write"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    let key = made["key"].as_str().unwrap().to_string();
    // The key works.
    let r = server
        .client
        .get(server.url("/api/v1/checks"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let db = server.stop().await;
    let rows = dump_api_keys(&db).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows[0].join(" ");
    use sha2::Digest;
    let hashed = hex::encode(sha2::Sha256::digest(key.as_bytes()));
    assert!(!row.contains(&key), "plaintext key at rest: {row}");
    assert!(row.contains(&hashed), "the row keeps the SHA-256: {row}");
    if backend == Backend::Sqlite {
        // Not anywhere else in the database either (any table, the WAL).
        for entry in std::fs::read_dir(db.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            // The -shm / -wal files may go as the last connection closes.
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
                "plaintext key in {}",
                path.display()
            );
        }
    }
});

/// Every row of api_keys, every column as text.
async fn dump_api_keys(db: &TestDb) -> Vec<Vec<String>> {
    use sqlx::{Connection, Row};
    const SELECT: &str = "SELECT id, name, scope, sha256, CAST(created_at AS TEXT) FROM api_keys";
    let text = |n: usize, get: &dyn Fn(usize) -> String| (0..n).map(get).collect::<Vec<_>>();
    match db.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            let rows = sqlx::query(SELECT).fetch_all(&mut c).await.unwrap();
            rows.iter()
                .map(|r| text(5, &|i| r.get::<String, _>(i)))
                .collect()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            let rows = sqlx::query(SELECT).fetch_all(&mut c).await.unwrap();
            rows.iter()
                .map(|r| text(5, &|i| r.get::<String, _>(i)))
                .collect()
        }
    }
}
