//! Bounded input and other hardening (issue #41 §3 and §4; docs/security.md):
//! the limits on silences and checks, each refused with `400` naming the
//! field and the limit; the dashboard's list in pages under 1 MB; CORS
//! preflights that store nothing; item counts within 2^63−1; TOML syntax
//! errors that never quote the line; webhooks to IPv6 addresses carrying a
//! private IPv4 one; the pages' security headers.

mod common;

use std::time::{Duration, Instant};

use common::sinks::WebhookSink;
use common::{write_config, Backend, ChildServer, TestServer, PING_KEY};
use overdue::config::Config;
use reqwest::Method;
use serde_json::{json, Value};

/// Sends `body` as JSON; returns the status and the JSON answer (`null` when
/// there is none).
async fn send(s: &TestServer, method: Method, path: &str, body: Value) -> (u16, Value) {
    let r = s
        .client
        .request(method, s.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The `field: message` of each field a v1 400 names.
fn fields(answer: &Value) -> Vec<String> {
    answer["error"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("no fields in {answer}"))
        .iter()
        .map(|f| {
            format!(
                "{}: {}",
                f["field"].as_str().unwrap(),
                f["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// `host=~"…"`: about 1 KiB of host names, their dots unescaped as people
/// write them.
fn host_list(n: usize) -> String {
    let mut hosts = Vec::new();
    let mut len = 0;
    while len < 1000 {
        let h = format!("web-{n}-{}.prod.example.com", hosts.len());
        len += h.len() + 1;
        hosts.push(h);
    }
    format!("host=~\"{}\"", hosts.join("|"))
}

fn silence(matchers: &[String]) -> Value {
    json!({"matchers": matchers, "duration": "1h", "comment": "maintenance"})
}

both_backends!(
    silences_are_bounded_and_refused_naming_the_limit,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        // Issue #41's request: 40,000 regex matchers in 1.2 MB.
        let huge: Vec<String> = (0..40_000)
            .map(|i| format!("host=~\"h{i}|x{i}\""))
            .collect();
        let (status, answer) = send(&s, Method::POST, "/api/v1/silences", silence(&huge)).await;
        assert_eq!(status, 400);
        assert_eq!(
            fields(&answer),
            ["matchers: lists 40000 matchers; at most 64"]
        );

        let long = format!("team=\"{}\"", "x".repeat(1018));
        assert_eq!(long.len(), 1025);
        let (status, answer) = send(&s, Method::POST, "/api/v1/silences", silence(&[long])).await;
        assert_eq!(status, 400);
        assert_eq!(
            fields(&answer),
            ["matchers[0]: is 1025 bytes long; at most 1024"]
        );

        // A short regex that compiles huge.
        let (status, answer) = send(
            &s,
            Method::POST,
            "/api/v1/silences",
            silence(&["team=\"data\"".into(), "host=~\"\\\\w{40}\"".into()]),
        )
        .await;
        assert_eq!(status, 400);
        let e = fields(&answer);
        assert!(
            e[0].starts_with(
                "matchers[1]: its regular expression, with those before it, compiles to more than 128 KiB"
            ),
            "{e:?}"
        );

        let mut body = silence(&["team=\"data\"".into()]);
        body["comment"] = json!("c".repeat(10_001));
        let (status, answer) = send(&s, Method::POST, "/api/v1/silences", body).await;
        assert_eq!(status, 400);
        assert_eq!(
            fields(&answer),
            ["comment: is 10001 bytes long; at most 10000"]
        );

        // The largest silence the limits allow is taken, and read back as written.
        let biggest: Vec<String> = (0..64).map(host_list).collect();
        assert!(biggest.iter().all(|m| m.len() <= 1024));
        let (status, created) = send(&s, Method::POST, "/api/v1/silences", silence(&biggest)).await;
        assert_eq!(status, 201, "{created}");
        let id = created["id"].as_str().unwrap().to_string();
        for _ in 0..2 {
            let list = s.get_json("/api/v1/silences").await;
            let got = list["silences"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["id"] == id.as_str())
                .unwrap()
                .clone();
            assert_eq!(got["matchers"], json!(biggest));
        }
        // A matcher stored as it prints (backslashes doubled) may be longer
        // than it was sent: it is read back all the same.
        let escaped = format!("host=~\"{}x\"", "\\.".repeat(506));
        assert_eq!(escaped.len(), 1021);
        let (status, created) =
            send(&s, Method::POST, "/api/v1/silences", silence(&[escaped])).await;
        assert_eq!(status, 201, "{created}");
        let list = s.get_json("/api/v1/silences").await;
        let ids: Vec<&str> = list["silences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap())
            .collect();
        assert!(ids.contains(&created["id"].as_str().unwrap()), "{ids:?}");

        // A replacement past a limit changes nothing.
        let mut more = biggest.clone();
        more.push("team=\"data\"".into());
        let (status, answer) = send(
            &s,
            Method::PUT,
            &format!("/api/v1/silences/{id}"),
            silence(&more),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(fields(&answer), ["matchers: lists 65 matchers; at most 64"]);
        let one = s.get_json(&format!("/api/v1/silences/{id}")).await;
        assert_eq!(one["matchers"], json!(biggest));
        // A replacement within them is read back at once (parsed once per change).
        let (status, _) = send(
            &s,
            Method::PUT,
            &format!("/api/v1/silences/{id}"),
            silence(&biggest[..3]),
        )
        .await;
        assert_eq!(status, 200);
        let one = s.get_json(&format!("/api/v1/silences/{id}")).await;
        assert_eq!(one["matchers"], json!(biggest[..3]));
        s.stop().await;
    }
);

#[test]
fn the_config_file_has_the_same_limits() {
    let matchers: Vec<String> = (0..65).map(|i| format!("\"l{i}=\\\"v\\\"\"")).collect();
    let labels: Vec<String> = (0..65).map(|i| format!("l{i} = \"v\"")).collect();
    let text = format!(
        "[[silences]]\nmatchers = [{}]\nduration = \"1h\"\n\n\
         [[checks]]\nslug = \"a\"\nlabels = {{ {} }}\n",
        matchers.join(", "),
        labels.join(", ")
    );
    let e = Config::from_toml(&text).unwrap_err().to_string();
    assert!(
        e.contains("silences[0].matchers: lists 65 matchers; at most 64"),
        "{e}"
    );
    assert!(
        e.contains("checks[0].labels: has 65 labels; at most 64"),
        "{e}"
    );
}

both_backends!(
    checks_are_bounded_and_refused_naming_the_limit,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let labels = |n: usize| -> serde_json::Map<String, Value> {
            (0..n).map(|i| (format!("l{i}"), json!("v"))).collect()
        };
        let window = json!({"start": "09:00", "end": "17:00"});
        for (body, want) in [
            (
                json!({"slug": "a", "labels": labels(65)}),
                "labels: has 65 labels; at most 64".to_string(),
            ),
            (
                json!({"slug": "a", "labels": {"x".repeat(129): "v"}}),
                format!(
                    "labels: the label name {:?}… is 129 bytes long; at most 128",
                    "x".repeat(32)
                ),
            ),
            (
                json!({"slug": "a", "labels": {"team": "v".repeat(1025)}}),
                "labels.team: the value is 1025 bytes long; at most 1024".to_string(),
            ),
            (
                json!({"slug": "a", "active_hours": vec![window.clone(); 65]}),
                "active_hours: lists 65 windows; at most 64".to_string(),
            ),
            (
                json!({"slug": "a", "depends_on": (0..65).map(|i| format!("c{i}")).collect::<Vec<_>>()}),
                "depends_on: lists 65 checks; at most 64".to_string(),
            ),
        ] {
            let (status, answer) = send(&s, Method::POST, "/api/v1/checks", body).await;
            assert_eq!(status, 400, "{want}");
            assert_eq!(fields(&answer), [want]);
        }
        // As many as the limits allow: 64 labels of the longest name and
        // value, 64 windows, 64 checks depended on.
        let mut deps = Vec::new();
        for i in 0..64 {
            s.create_check(json!({"slug": format!("c{i}"), "interval": "1h"}))
                .await;
            deps.push(format!("c{i}"));
        }
        let big: serde_json::Map<String, Value> = (0..64)
            .map(|i| {
                (
                    format!("{i:0>128}").replace('0', "l"),
                    json!("é".repeat(512)),
                )
            })
            .collect();
        let c = s
            .create_check(json!({"slug": "a", "labels": big, "depends_on": deps,
                                 "active_hours": vec![window.clone(); 64]}))
            .await;
        assert_eq!(c["labels"].as_object().unwrap().len(), 64);
        // Through PUT too.
        let (status, answer) = send(
            &s,
            Method::PUT,
            "/api/v1/checks/a",
            json!({"slug": "a", "labels": labels(65)}),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(fields(&answer), ["labels: has 65 labels; at most 64"]);
        // And v3: tags are labels.
        let tags: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
        let r = s
            .client
            .post(s.url("/api/v3/checks/"))
            .json(&json!({"name": "v3", "tags": tags.join(" ")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let answer: Value = r.json().await.unwrap();
        let e = answer["error"].as_str().unwrap();
        assert!(e.contains("tags") && e.contains("at most 64"), "{e}");
        s.stop().await;
    }
);

/// Every ping form a browser might ask about first.
fn ping_paths(uuid: &str) -> Vec<String> {
    vec![
        format!("/ping/{uuid}"),
        format!("/ping/{uuid}/start"),
        format!("/ping/{uuid}/fail"),
        format!("/ping/{uuid}/log"),
        format!("/ping/{uuid}/0"),
        format!("/ping/{uuid}/3"),
        format!("/ping/{uuid}/skip?reason=x"),
        format!("/ping/{uuid}/lock?ttl=1m"),
        format!("/ping/{uuid}/unlock?token=1"),
        format!("/ping/{uuid}/due"),
        format!("/ping/{uuid}/snooze?for=1h"),
        format!("/ping/{uuid}?items=5&rid=0b8e6a4e-51f4-4d7c-9d2d-2a1a3f6c7e11"),
        format!("/ping/{PING_KEY}/nightly"),
        format!("/ping/{PING_KEY}/nightly/start"),
        format!("/ping/{PING_KEY}/nightly/fail"),
        format!("/ping/{PING_KEY}/nightly/7"),
        format!("/ping/{PING_KEY}/nightly/snooze?for=1h"),
        format!("/ping/{PING_KEY}/created-by-preflight?create=1"),
    ]
}

both_backends!(
    a_cors_preflight_is_answered_and_stores_nothing,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "nightly", "interval": "1h"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        let (status, _) = send(&s, Method::POST, "/api/v1/checks/nightly/pause", json!({})).await;
        assert_eq!(status, 200);

        for path in ping_paths(&uuid) {
            let r = s
                .client
                .request(Method::OPTIONS, s.url(&path))
                .header("origin", "https://status.example.com")
                .header("access-control-request-method", "POST")
                .header("access-control-request-headers", "content-type")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204, "{path}");
            let h = r.headers();
            assert_eq!(h["access-control-allow-origin"], "*", "{path}");
            assert!(
                h["access-control-allow-methods"]
                    .to_str()
                    .unwrap()
                    .contains("POST"),
                "{path}"
            );
            assert!(h.contains_key("access-control-allow-headers"), "{path}");
            assert_eq!(h["access-control-max-age"], "86400", "{path}");
            assert!(r.text().await.unwrap().is_empty(), "{path}");
        }
        // Nothing was stored, nothing resumed, created, locked or snoozed.
        let check = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(check["status"], "paused");
        assert_eq!(check["n_pings"], 0);
        let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
        assert_eq!(pings["pings"], json!([]));
        let checks = s.get_json("/api/v1/checks").await;
        assert_eq!(checks["checks"].as_array().unwrap().len(), 1);
        let silences = s.get_json("/api/v1/silences").await;
        assert_eq!(silences["silences"], json!([]));
        // A ping still is one.
        assert_eq!(s.ping(&format!("/ping/{uuid}")).await.0, 200);
        let check = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(check["n_pings"], 1);
        s.stop().await;
    }
);

both_backends!(items_beyond_2_63_minus_1_are_400, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s.create_check(json!({"interval": "1h"})).await;
    let uuid = c["uuid"].as_str().unwrap();
    for beyond in ["9223372036854775808", "18446744073709551615"] {
        let (status, body) = s.ping(&format!("/ping/{uuid}?items={beyond}")).await;
        assert_eq!(
            (status, body.as_str()),
            (400, "items must be at most 9223372036854775807 (2^63-1)"),
            "items={beyond}"
        );
    }
    let check = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(check["n_pings"], 0);
    let (status, _) = s
        .ping(&format!("/ping/{uuid}?items=9223372036854775807"))
        .await;
    assert_eq!(status, 200);
    let check = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(check["last_items"], i64::MAX);
    s.stop().await;
});

/// A secret in the line a TOML syntax error is on.
const SECRET: &str = "pk-5ecret-in-the-line";

fn broken_config(db: &common::TestDb) -> String {
    db.config_toml("").replace(
        &format!("ping_key = \"{PING_KEY}\""),
        &format!("ping_key = \"{SECRET}\" oops"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toml_syntax_error_names_line_column_and_key_never_the_line() {
    let db = common::TestDb::new(Backend::Sqlite).await;
    let s = TestServer::start_from_file(db, "").await;
    let path = common::config_path(&s.db);
    let broken = broken_config(&s.db);
    assert!(broken.contains(SECRET));
    std::fs::write(&path, &broken).unwrap();
    let line = broken.lines().position(|l| l.contains(SECRET)).unwrap() + 1;
    let r = s.client.post(s.url("/api/v1/reload")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(!text.contains(SECRET) && !text.contains("oops"), "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let message = answer["error"]["fields"][0]["message"].as_str().unwrap();
    let column = format!("ping_key = \"{SECRET}\" ").len() + 1;
    assert_eq!(
        message,
        format!("TOML syntax error at line {line}, column {column}, key ping_key: expected newline, `#`")
    );

    // overdue config check says the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_overdue"))
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");
    assert!(
        stderr.contains(&format!("line {line}, column {column}, key ping_key")),
        "{stderr}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sighup_log_never_quotes_the_line() {
    let db = common::TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &db.config_toml(""));
    let server = ChildServer::spawn(&path);
    std::fs::write(&path, broken_config(&db)).unwrap();
    server.signal("HUP");
    server.wait_log("reload refused").await;
    let log = server.log();
    assert!(!log.contains(SECRET) && !log.contains("oops"), "{log}");
    assert!(log.contains("TOML syntax error at line"), "{log}");
    assert!(log.contains("key ping_key"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_to_an_ipv6_address_carrying_a_private_ipv4_one_is_refused() {
    let hook = WebhookSink::start().await;
    let port = hook.url("").rsplit(':').next().unwrap().to_string();
    // NAT64, 6to4 and IPv4-compatible forms of 127.0.0.1.
    let targets = ["64:ff9b::7f00:1", "2002:7f00:1::1", "::127.0.0.1"];
    let mut toml = String::from("[webhooks]\ndeny = [\"private\"]\n");
    for (i, ip) in targets.iter().enumerate() {
        toml.push_str(&format!(
            "\n[[receivers]]\nname = \"r{i}\"\ntype = \"webhook\"\nurl = \"http://[{ip}]:{port}/hook\"\n"
        ));
    }
    toml.push_str("\n[route]\nreceiver = \"r0\"\ngroup_wait = \"100ms\"\nroutes = [\n");
    for i in 0..targets.len() {
        toml.push_str(&format!(
            "  {{ matchers = ['team=\"data\"'], receiver = \"r{i}\", continue = true }},\n"
        ));
    }
    toml.push_str("]\n\n[notifications]\nretry_base = \"100ms\"\nmax_attempts = 3\n");
    let s = TestServer::start(Backend::Sqlite, &toml).await;
    let c = s
        .create_check(json!({"slug": "job", "interval": "1h", "labels": {"team": "data"}}))
        .await;
    assert_eq!(
        s.ping(&format!("/ping/{}/fail", c["uuid"].as_str().unwrap()))
            .await
            .0,
        200
    );
    let dead = common::notifications_until(&s, "?state=dead", |l| l.len() == targets.len()).await;
    for n in &dead {
        let error = n["last_error"].as_str().unwrap();
        assert_eq!(n["attempts"], 1, "{error}");
        assert!(
            error.contains("carries the IPv4 address 127.0.0.1: 127.0.0.1 is denied by [webhooks] deny 127.0.0.0/8"),
            "{error}"
        );
    }
    assert!(hook.requests().is_empty());
    s.stop().await;
}

/// The security headers of the dashboard's and the acknowledge pages.
fn assert_page_headers(r: &reqwest::Response, what: &str) {
    let h = r.headers();
    let csp = h
        .get("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"))
        .to_str()
        .unwrap();
    for part in [
        "default-src 'self'",
        "script-src 'none'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(part), "{what}: {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
    assert_eq!(h["referrer-policy"], "no-referrer", "{what}");
}

/// What the policy forbids is not in the page: inline style or script.
fn assert_no_inline_code(html: &str, what: &str) {
    for bad in [
        "<style",
        "style=",
        "<script",
        " onclick=",
        " onload=",
        " onsubmit=",
    ] {
        assert!(!html.contains(bad), "{what} has {bad:?}: {html}");
    }
}

both_backends!(pages_send_the_security_headers, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "job", "interval": "1h",
                             "active_hours": [{"start": "09:00", "end": "17:00"}]}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    assert_eq!(s.ping(&format!("/ping/{uuid}/fail")).await.0, 200);
    // Loopback without keys: the dashboard is open.
    for path in ["/", "/login", &format!("/checks/{uuid}"), "/checks/none"] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_page_headers(&r, path);
        let html = r.text().await.unwrap();
        assert_no_inline_code(&html, path);
    }
    let html = s.get_text(&format!("/checks/{uuid}")).await;
    assert!(html.contains("<link rel=\"stylesheet\" href=\"/assets/overdue.css\">"));
    let css = s
        .client
        .get(s.url("/assets/overdue.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.status(), 200);
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    assert!(css.text().await.unwrap().contains(".bar rect"));

    // The incident's acknowledge link, as the check's page offers it.
    let start = Instant::now();
    let ack = loop {
        let html = s.get_text(&format!("/checks/{uuid}")).await;
        // The template escapes the slashes of the address.
        if let Some(at) = html.find("action=\"&#x2f;ack&#x2f;") {
            let rest = &html[at + "action=\"".len()..];
            break rest[..rest.find('"').unwrap()].replace("&#x2f;", "/");
        }
        assert!(start.elapsed() < common::HANG_GUARD, "no incident: {html}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let r = s.client.get(s.url(&ack)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_page_headers(&r, "the acknowledge page");
    let html = r.text().await.unwrap();
    assert_no_inline_code(&html, "the acknowledge page");
    let r = s
        .client
        .post(s.url(&ack))
        .form(&[("by", "ana")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_page_headers(&r, "the acknowledged page");
    let r = s
        .client
        .get(s.url("/ack/not-a-token"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_page_headers(&r, "a bad link");
    s.stop().await;
});

/// A list page's rows, and the address of the next page, if any.
fn list_page(html: &str) -> (usize, Option<String>) {
    let rows = html.matches("<tr class=\"row-").count();
    let next = html.find("id=\"next-page\"").map(|at| {
        let tag = &html[html[..at].rfind("<a ").unwrap()..];
        let href = &tag[tag.find("href=\"").unwrap() + "href=\"".len()..];
        href[..href.find('"').unwrap()]
            .replace("&#x2f;", "/")
            .replace("&amp;", "&")
    });
    (rows, next)
}

both_backends!(
    the_dashboard_list_is_paged_under_1_mb,
    |backend| async move {
        // 501 checks from the config file: more than one page.
        let mut toml = String::new();
        for i in 0..501 {
            toml.push_str(&format!(
            "[[checks]]\nslug = \"job-{i:03}\"\ninterval = \"1h\"\nlabels = {{ team = \"t{}\" }}\n",
            i % 7
        ));
        }
        let s = TestServer::start(backend, &toml).await;
        // And 10 with the largest labels the limits allow: fewer a page.
        for i in 0..10 {
            let labels: serde_json::Map<String, Value> = (0..64)
                .map(|j| {
                    (
                        format!("l{j}_{}", "n".repeat(120)),
                        json!(format!("{i}{}", "v".repeat(1020))),
                    )
                })
                .collect();
            s.create_check(
                json!({"slug": format!("heavy-{i}"), "interval": "1h", "labels": labels}),
            )
            .await;
        }

        let r = s.client.get(s.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let html = r.text().await.unwrap();
        assert!(html.len() < 1_000_000, "{} bytes", html.len());
        let of = &html[html.find("id=\"page-of\">").unwrap()..];
        let pages: usize = of[of.find(" of ").unwrap() + 4..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(pages >= 2, "{of}");
        assert!(of.contains(" of 511)"), "{}", &of[..80]);
        // The labels that do not fit are counted, not listed.
        assert!(html.contains("id=\"more-labels\""), "all labels listed");

        // Following the next links visits every check once, each page under 1 MB.
        let (mut seen, mut next) = list_page(&html);
        let mut visited = 1;
        while let Some(href) = next {
            let html = s.get_text(&href).await;
            assert!(html.len() < 1_000_000, "{href}: {} bytes", html.len());
            assert!(html.contains("rel=\"prev\""), "{href}");
            let (rows, after) = list_page(&html);
            assert!(rows > 0, "{href}");
            seen += rows;
            visited += 1;
            next = after;
        }
        assert_eq!((seen, visited), (511, pages));

        // Filters are kept from page to page.
        let html = s.get_text("/?status=new&page=1").await;
        let (_, next) = list_page(&html);
        let next = next.expect("a second page of new checks");
        assert!(
            next.starts_with("/?status=new&") && next.ends_with("page=2"),
            "{next}"
        );
        let html = s.get_text("/?label=team%3Dt3").await;
        let (rows, next) = list_page(&html);
        assert_eq!(
            (rows, next),
            (72, None),
            "501 / 7 checks of team t3, one page"
        );
        // Out of range: the last page.
        let html = s.get_text("/?page=999").await;
        assert!(
            html.contains(&format!("Page {pages} of {pages}")),
            "page 999"
        );
        s.stop().await;
    }
);
