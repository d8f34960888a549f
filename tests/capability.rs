//! The ping uuid is a capability (issue #41 §1, docs/security.md): it can
//! ping, skip, lock, unlock and snooze, so it shows only where write access
//! is. Tested as an invariant, not route by route: checks with and without
//! slugs go through every feature (pings, runs, an overlap, incidents, an
//! acknowledgement, a snooze, a lock), then every read route of the OpenAPI
//! document is walked with a read key, and so are the v3 API, `/metrics`,
//! every dashboard page a read-only viewer reaches, and every webhook body
//! and mail that was delivered: no check's uuid may appear in any of them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::sinks::{SmtpOptions, SmtpSink, WebhookSink};
use common::TestServer;
use serde_json::{json, Value};

const READ: &str = "read-key-capability";
const WRITE: &str = "write-key-capability";

fn config(hook: &WebhookSink, smtp: Option<&SmtpSink>) -> String {
    let mail = smtp.map_or(String::new(), SmtpSink::mail_then_hook_toml);
    format!(
        r#"
base_url = "http://overdue.test"

[[api_keys]]
name = "viewer"
scope = "read"
key = "{READ}"

[[api_keys]]
name = "admin"
scope = "write"
key = "{WRITE}"
{hook}{mail}"#,
        hook = hook.hook_toml(
            r#"group_by = ["check"]
group_wait = "200ms"
group_interval = "300ms"
repeat_interval = "1h"
"#
        ),
    )
}

/// A request with a key.
async fn send(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, String) {
    let mut r = server
        .client
        .request(method, server.url(path))
        .header("x-api-key", key);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

async fn get(server: &TestServer, path: &str, key: &str) -> (u16, String) {
    send(server, reqwest::Method::GET, path, key, None).await
}

async fn ping(server: &TestServer, method: reqwest::Method, path: &str) {
    let r = server
        .client
        .request(method, server.url(path))
        .body("done")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert_eq!(status, 200, "{path}: {}", r.text().await.unwrap());
}

/// Polls a read until `ok` holds, under the hang guard.
async fn until(server: &TestServer, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (status, text) = get(server, path, WRITE).await;
        if status == 200 {
            let v: Value = serde_json::from_str(&text).unwrap();
            if ok(&v) {
                return v;
            }
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "hang guard: {path} never got there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The spellings of each uuid a leak could take, with the check it belongs to.
struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// Every secret `text` contains, as "check: spelling".
    fn found_in(&self, text: &str) -> Vec<String> {
        let lower = text.to_ascii_lowercase();
        self.0
            .iter()
            .filter(|(s, _)| lower.contains(s.as_str()))
            .map(|(s, who)| format!("{who}: {s}"))
            .collect()
    }
}

/// Asserts that what `surface` showed holds no uuid.
fn assert_clean(secrets: &Secrets, surface: &str, text: &str) {
    let found = secrets.found_in(text);
    assert!(
        found.is_empty(),
        "{surface} shows a check's uuid ({found:?}):\n{}",
        text.chars().take(3000).collect::<String>()
    );
}

/// The `href="…"` targets of a page that stay on the server.
fn local_links(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|l| l.starts_with('/') && !l.starts_with("//"))
        .map(|l| l.replace("&amp;", "&"))
        .collect()
}

both_backends!(
    no_read_surface_shows_a_check_uuid,
    needs = [aiosmtpd],
    |backend| async move {
        let hook = WebhookSink::start().await;
        let smtp = SmtpSink::start(SmtpOptions::default());
        let server = TestServer::start(backend, &config(&hook, Some(&smtp))).await;
        let post = reqwest::Method::POST;

        // Three checks: one with a slug, two without; the write key sees
        // their uuids (the control that shows the detector works).
        let mut uuids = BTreeMap::new();
        for (name, body) in [
            (
                "with-slug",
                json!({"slug": "with-slug", "name": "With slug", "interval": "1h",
                       "labels": {"team": "data"}, "alert_on_overlap": true}),
            ),
            (
                "no-slug",
                json!({"name": "No slug", "interval": "1h", "labels": {"team": "data"},
                       "alert_on_overlap": true}),
            ),
            (
                "snoozed",
                json!({"name": "", "interval": "1h", "labels": {"team": "ops"}}),
            ),
        ] {
            let (status, text) =
                send(&server, post.clone(), "/api/v1/checks", WRITE, Some(body)).await;
            assert_eq!(status, 201, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            let uuid = v["uuid"]
                .as_str()
                .expect("a writer sees the uuid")
                .to_string();
            assert!(v["ping_url"].as_str().unwrap().ends_with(&uuid));
            assert_eq!(v["unique_key"].as_str().unwrap().len(), 40);
            uuids.insert(name, (uuid, v["unique_key"].as_str().unwrap().to_string()));
        }
        let secrets = Secrets(
            uuids
                .iter()
                .flat_map(|(name, (u, _))| {
                    let simple = u.replace('-', "");
                    [(u.clone(), name.to_string()), (simple, name.to_string())]
                })
                .collect(),
        );
        let uuid = |name: &str| uuids[name].0.clone();

        // Every feature: pings with items and bodies, runs, an overlap, a
        // failure (incidents and notifications), a skip, a lock, a snooze,
        // an acknowledgement, a recovery.
        for name in ["with-slug", "no-slug"] {
            let u = uuid(name);
            ping(&server, post.clone(), &format!("/ping/{u}?items=3")).await;
            ping(&server, post.clone(), &format!("/ping/{u}/log")).await;
            let a = "0f3e8a8e-0000-4000-8000-00000000000a";
            let b = "0f3e8a8e-0000-4000-8000-00000000000b";
            ping(&server, post.clone(), &format!("/ping/{u}/start?rid={a}")).await;
            ping(&server, post.clone(), &format!("/ping/{u}/start?rid={b}")).await;
            ping(&server, post.clone(), &format!("/ping/{u}?rid={a}")).await;
            ping(&server, post.clone(), &format!("/ping/{u}/fail?rid={b}")).await;
            ping(
                &server,
                post.clone(),
                &format!("/ping/{u}/skip?reason=quiet"),
            )
            .await;
            let (status, text) = send(
                &server,
                post.clone(),
                &format!("/ping/{u}/lock?ttl=1h&holder=host-1"),
                "",
                None,
            )
            .await;
            assert_eq!(status, 200, "lock: {text}");
        }
        let snoozed = uuid("snoozed");
        ping(
            &server,
            reqwest::Method::GET,
            &format!("/ping/{snoozed}/snooze?for=2h"),
        )
        .await;
        ping(&server, post.clone(), &format!("/ping/{snoozed}/fail")).await;

        // The failures open incidents that go out to the webhook (and mail).
        let firing = hook.wait_for(2).await;
        let unique_key = |name: &str| uuids[name].1.clone();
        let incidents_of = format!("/api/v1/checks/{}/incidents", unique_key("no-slug"));
        let incident = until(&server, &incidents_of, |v| {
            v["incidents"].as_array().is_some_and(|l| !l.is_empty())
        })
        .await;
        let incident_id = incident["incidents"][0]["id"].as_i64().unwrap();
        let (status, text) = send(
            &server,
            post.clone(),
            &format!("/api/v1/incidents/{incident_id}/ack"),
            WRITE,
            Some(json!({"by": "alice", "comment": "on it"})),
        )
        .await;
        assert_eq!(status, 200, "ack: {text}");
        // The recovery sends resolves.
        for name in ["with-slug", "no-slug"] {
            ping(&server, post.clone(), &format!("/ping/{}", uuid(name))).await;
        }
        let calls = hook.wait_for(firing.len() + 1).await;
        until(&server, "/api/v1/notifications?state=delivered", |v| {
            v["notifications"]
                .as_array()
                .is_some_and(|l| l.len() >= calls.len())
        })
        .await;

        // The checks' names as readers know them.
        let check_names = vec![
            "with-slug".to_string(),
            unique_key("with-slug"),
            unique_key("no-slug"),
            unique_key("snoozed"),
        ];

        // Every read route of the OpenAPI document, with the read key.
        let (status, doc) = get(&server, "/api/v1/openapi.json", READ).await;
        assert_eq!(status, 200);
        let doc: Value = serde_json::from_str(&doc).unwrap();
        let mut ids: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        ids.insert("check", check_names.clone());
        ids.insert("n", vec!["1".into(), "2".into()]);
        let mut incidents = Vec::new();
        for c in &check_names {
            let (_, text) = get(&server, &format!("/api/v1/checks/{c}/incidents"), READ).await;
            let v: Value = serde_json::from_str(&text).unwrap();
            for i in v["incidents"].as_array().unwrap() {
                incidents.push(i["id"].to_string());
            }
        }
        assert!(!incidents.is_empty(), "incidents were opened");
        let (_, text) = get(&server, "/api/v1/notifications", READ).await;
        let notifications: Vec<String> = serde_json::from_str::<Value>(&text).unwrap()
            ["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap().to_string())
            .collect();
        assert!(!notifications.is_empty());
        let (_, text) = get(&server, "/api/v1/silences", READ).await;
        let silences: Vec<String> = serde_json::from_str::<Value>(&text).unwrap()["silences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(silences.len(), 1, "the snooze is a silence: {text}");
        let mut served = BTreeSet::new();
        let mut walked = 0;
        let paths = doc["paths"].as_object().unwrap();
        // The routes a read key may use: their `security` asks for `read`.
        let readable = |p: &String| {
            paths[p]
                .get("get")
                .is_some_and(|g| g["security"].to_string().contains("\"read\""))
        };
        let templates: Vec<&String> = paths.keys().filter(|p| readable(p)).collect();
        assert!(
            templates.len() >= 15,
            "the document lists the read routes: {templates:?}"
        );
        for template in templates {
            let mut urls = vec![format!("/api/v1{template}")];
            for (param, values) in [
                ("check", &ids["check"]),
                ("n", &ids["n"]),
                (
                    "id",
                    if template.starts_with("/incidents") {
                        &incidents
                    } else if template.starts_with("/notifications") {
                        &notifications
                    } else {
                        &silences
                    },
                ),
            ] {
                let pattern = format!("{{{param}}}");
                urls = urls
                    .into_iter()
                    .flat_map(|u| {
                        if u.contains(&pattern) {
                            values.iter().map(|v| u.replace(&pattern, v)).collect()
                        } else {
                            vec![u]
                        }
                    })
                    .collect();
            }
            for url in urls {
                let (status, text) = get(&server, &url, READ).await;
                assert_clean(&secrets, &format!("GET {url} (read key)"), &text);
                walked += 1;
                if status == 200 {
                    served.insert(template.clone());
                }
            }
        }
        let unserved: Vec<_> = paths
            .keys()
            .filter(|p| readable(p) && !served.contains(*p))
            .collect();
        assert!(
            unserved.is_empty(),
            "read routes that never answered 200: {unserved:?}"
        );
        assert!(walked > 40, "{walked} reads");

        // The v3 API with the read key (healthchecks' read-only keys).
        // (healthchecks answers `/channels/` to write keys only.)
        for path in ["/api/v3/checks/", "/api/v3/channels/", "/api/v3/status/"] {
            let (status, text) = get(&server, path, READ).await;
            assert!(
                status == 200 || path == "/api/v3/channels/",
                "{path}: {status}"
            );
            assert_clean(&secrets, &format!("GET {path} (read key)"), &text);
        }
        for c in &check_names {
            for path in [
                format!("/api/v3/checks/{c}"),
                format!("/api/v3/checks/{c}/pings/"),
                format!("/api/v3/checks/{c}/flips/"),
            ] {
                let (_, text) = get(&server, &path, READ).await;
                assert_clean(&secrets, &format!("GET {path} (read key)"), &text);
            }
        }

        // /metrics (public here) and the badges.
        let (status, metrics) = get(&server, "/metrics", "").await;
        assert_eq!(status, 200);
        assert_clean(&secrets, "/metrics", &metrics);
        assert!(
            metrics.contains(&format!("check=\"{}\"", unique_key("no-slug"))),
            "a slug-less check's series are labelled by its unique key"
        );

        // The dashboard as a read-only viewer, following every link it offers.
        let mut pages = vec!["/".to_string()];
        let mut seen = BTreeSet::new();
        while let Some(page) = pages.pop() {
            if !seen.insert(page.clone()) || seen.len() > 60 {
                continue;
            }
            let (status, html) = get(&server, &page, READ).await;
            assert_clean(&secrets, &format!("dashboard {page} (read key)"), &html);
            if status == 200 && !page.starts_with("/badge/") {
                pages.extend(local_links(&html));
            }
        }
        for c in check_names
            .iter()
            .filter(|c| **c != unique_key("with-slug"))
        {
            assert!(
                seen.contains(&format!("/checks/{c}")),
                "the list links {c}'s page: {seen:?}"
            );
        }

        // What went out: every webhook body and every mail.
        for r in hook.requests() {
            assert_clean(&secrets, "a webhook body", &r.text());
        }
        assert!(
            hook.requests()
                .iter()
                .any(|r| r.text().contains(&unique_key("no-slug"))),
            "alerts name a slug-less check by its unique key"
        );
        let mails = smtp.wait_for(1).await;
        for m in &mails {
            assert_clean(&secrets, "a mail", &m.data);
        }

        // The control: the write key does see the uuid.
        let (_, text) = get(
            &server,
            &format!("/api/v1/checks/{}", unique_key("no-slug")),
            WRITE,
        )
        .await;
        assert!(
            secrets
                .found_in(&text)
                .iter()
                .any(|f| f.starts_with("no-slug")),
            "{text}"
        );
    }
);

both_backends!(
    a_client_cannot_choose_a_new_checks_uuid,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &config(&hook, None)).await;
        let chosen = "0f3e8a8e-1111-4000-8000-000000000001";
        for (method, path) in [
            (reqwest::Method::POST, "/api/v1/checks"),
            (reqwest::Method::PUT, "/api/v1/checks/chosen"),
        ] {
            let (status, text) = send(
                &server,
                method.clone(),
                path,
                WRITE,
                Some(json!({"uuid": chosen, "interval": "1h"})),
            )
            .await;
            assert_eq!(status, 400, "{method} {path}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(
                v["error"]["message"].as_str().unwrap().contains("uuid"),
                "{v}"
            );
            assert_eq!(v["error"]["fields"][0]["field"], "uuid", "{v}");
        }
        let (status, _) = get(&server, &format!("/api/v1/checks/{chosen}"), WRITE).await;
        assert_eq!(status, 404, "nothing was created");
        // A replace may repeat the check's own uuid (a GET, edited, PUT back).
        let (status, text) = send(
            &server,
            reqwest::Method::PUT,
            "/api/v1/checks/chosen",
            WRITE,
            Some(json!({"interval": "1h"})),
        )
        .await;
        assert_eq!(status, 201, "{text}");
        let own = serde_json::from_str::<Value>(&text).unwrap()["uuid"].clone();
        let (status, text) = send(
            &server,
            reqwest::Method::PUT,
            "/api/v1/checks/chosen",
            WRITE,
            Some(json!({"uuid": own, "interval": "2h"})),
        )
        .await;
        assert_eq!(status, 200, "{text}");
    }
);

both_backends!(
    a_read_key_names_checks_by_unique_key,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &config(&hook, None)).await;
        let (_, text) = send(
            &server,
            reqwest::Method::POST,
            "/api/v1/checks",
            WRITE,
            Some(json!({"name": "nightly", "interval": "1h"})),
        )
        .await;
        let created: Value = serde_json::from_str(&text).unwrap();
        let key = created["unique_key"].as_str().unwrap();
        let (status, text) = get(&server, &format!("/api/v1/checks/{key}"), READ).await;
        assert_eq!(status, 200, "{text}");
        let seen: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(seen["name"], "nightly");
        assert_eq!(seen["unique_key"], key);
        assert!(
            seen.get("uuid").is_none() && seen.get("ping_url").is_none(),
            "{seen}"
        );
        // The write key reaches it by unique key too, and sees the uuid.
        let (status, text) = get(&server, &format!("/api/v1/checks/{key}"), WRITE).await;
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["uuid"],
            created["uuid"]
        );
        // An unknown key is a 404 that names what was looked for.
        let unknown = "0".repeat(40);
        let (status, text) = get(&server, &format!("/api/v1/checks/{unknown}"), READ).await;
        assert_eq!(status, 404, "{text}");
        assert!(text.contains("unique_key"), "{text}");
    }
);

/// The attacker's script of issue #41, in Python's urllib: with a read key,
/// read everything a viewer can, collect whatever looks like a uuid, and
/// try to snooze and lock with it and with the unique keys.
const ATTACK: &str = r#"
import json, re, sys, urllib.error, urllib.request
base, key = sys.argv[1], sys.argv[2]
def call(method, path, headers=None):
    req = urllib.request.Request(base + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
seen = ""
for path in ["/api/v1/checks", "/api/v1/silences", "/api/v1/notifications", "/metrics", "/"]:
    status, body = call("GET", path, {"X-Api-Key": key})
    seen += body
uuids = sorted(set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", seen)))
keys = sorted(set(c["unique_key"] for c in json.loads(call("GET", "/api/v1/checks", {"X-Api-Key": key})[1])["checks"]))
tries = {}
for token in uuids + keys:
    tries[token] = [call("GET", f"/ping/{token}/snooze?for=7d")[0],
                    call("POST", f"/ping/{token}/lock?ttl=7d&holder=attacker")[0]]
print(json.dumps({"uuids": uuids, "keys": keys, "tries": tries}))
"#;

both_backends!(
    a_read_key_cannot_silence_a_check,
    needs = [python3],
    |backend| async move {
        common::need_program(common::Peer::Python3, "/usr/bin/python3", "python3");
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &config(&hook, None)).await;
        for body in [
            json!({"slug": "victim", "interval": "1h"}),
            json!({"interval": "1h"}),
        ] {
            let (status, text) = send(
                &server,
                reqwest::Method::POST,
                "/api/v1/checks",
                WRITE,
                Some(body),
            )
            .await;
            assert_eq!(status, 201, "{text}");
        }
        let base = server.base.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("/usr/bin/python3")
                .args(["-c", ATTACK, &base, READ])
                .output()
                .expect("run python3")
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        // Request ids the server drew (silences, notifications) are uuids too,
        // but none is a check's: nothing it tried reached a check.
        assert_eq!(v["keys"].as_array().unwrap().len(), 2, "{v}");
        for (token, answers) in v["tries"].as_object().unwrap() {
            assert_eq!(answers, &json!([404, 404]), "{token}: {v}");
        }
        let (_, text) = get(&server, "/api/v1/silences", WRITE).await;
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["silences"],
            json!([]),
            "no silence was made"
        );
    }
);

both_backends!(
    checks_made_before_unique_keys_get_them,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &config(&hook, None)).await;
        let (_, text) = send(
            &server,
            reqwest::Method::POST,
            "/api/v1/checks",
            WRITE,
            Some(json!({"name": "old", "interval": "1h"})),
        )
        .await;
        let key = serde_json::from_str::<Value>(&text).unwrap()["unique_key"]
            .as_str()
            .unwrap()
            .to_string();
        // As a row written before migration 0020 (or by hand) looks.
        server.db.sql("UPDATE checks SET unique_key = NULL").await;
        // A look-up by key that misses fills the keys and finds it: the
        // API, v3 and the badge alike.
        let (status, text) = get(&server, &format!("/api/v1/checks/{key}"), READ).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            server
                .db
                .count("SELECT COUNT(*) FROM checks WHERE unique_key IS NULL")
                .await,
            0
        );
        server.db.sql("UPDATE checks SET unique_key = NULL").await;
        let (status, text) = get(&server, &format!("/badge/{key}.json"), "").await;
        assert_eq!(status, 200, "{text}");
        // At start-up the server fills them by itself.
        server.db.sql("UPDATE checks SET unique_key = NULL").await;
        let db = server.stop().await;
        let server = TestServer::start_on(db, &config(&hook, None)).await;
        let start = Instant::now();
        while server
            .db
            .count("SELECT COUNT(*) FROM checks WHERE unique_key IS NULL")
            .await
            > 0
        {
            assert!(
                start.elapsed() < common::HANG_GUARD,
                "hang guard: the keys were never filled"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (_, metrics) = get(&server, "/metrics", "").await;
        assert!(metrics.contains(&format!("check=\"{key}\"")), "{metrics}");
    }
);
