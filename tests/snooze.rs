//! Snooze from the job side (SPEC §4, §6): `/ping/{uuid}/snooze?for=D` makes
//! a silence for that check, against the real server on both databases, a
//! real webhook receiver, the `overdue` binary and Python's urllib.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::DateTime;
use common::sinks::{alert_checks, Request, WebhookSink};
use common::{Backend, ChildServer, TestServer, PING_KEY};
use serde_json::{json, Value};

/// A webhook receiver and a route that groups by check and flushes fast.
fn alerting(hook: &WebhookSink) -> String {
    hook.hook_toml(
        r#"group_by = ["check"]
group_wait = "300ms"
group_interval = "500ms"
"#,
    )
}

/// A request's status, `Content-Type` and body.
async fn call(s: &TestServer, method: reqwest::Method, path: &str) -> (u16, String, String) {
    let r = s.client.request(method, s.url(path)).send().await.unwrap();
    let status = r.status().as_u16();
    let kind = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, kind, r.text().await.unwrap())
}

/// Snoozes with GET and returns the JSON answer.
async fn snooze(s: &TestServer, path: &str) -> Value {
    let (status, kind, body) = call(s, reqwest::Method::GET, path).await;
    assert_eq!(status, 200, "{path}: {body}");
    assert_eq!(kind, "application/json", "{path}");
    serde_json::from_str(&body).unwrap()
}

fn ms(rfc3339: &Value) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The stored silences whose id starts with `snooze-`.
async fn snoozes(s: &TestServer) -> Vec<Value> {
    s.get_json("/api/v1/silences").await["silences"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["id"].as_str().unwrap().starts_with("snooze-"))
        .cloned()
        .collect()
}

/// The checks whose firing alerts a notification lists.
fn firing(r: &Request) -> Vec<String> {
    alert_checks(&r.json(), "firing")
}

/// Waits for the first notification of `check` and returns it.
async fn first_for(hook: &WebhookSink, check: &str) -> Request {
    let start = Instant::now();
    loop {
        if let Some(r) = hook
            .requests()
            .into_iter()
            .find(|r| firing(r).iter().any(|c| c == check))
        {
            return r;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "hang guard: no alert for {check}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Fails `backup` (snoozed) and `other` (not) at once; `other` alerts, and
/// `backup` only once its snooze, which ends at `ends_at`, is over.
async fn held_until_the_snooze_ends(base: &str, backup: &str, other: &str, hook: &WebhookSink) {
    let http = common::client();
    let ends_at = {
        let r = http
            .post(format!("{base}/ping/{backup}/snooze?for=3s"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        ms(&v["ends_at"])
    };
    for uuid in [backup, other] {
        common::get_200(&http, &format!("{base}/ping/{uuid}/fail")).await;
    }
    // The dispatcher runs: the check not snoozed alerts.
    first_for(hook, "other").await;
    // The snoozed one alerts too, but only once its snooze is over.
    first_for(hook, "backup").await;
    for r in hook.requests() {
        if firing(&r).iter().any(|c| c == "backup") {
            assert!(
                r.received_ms >= ends_at,
                "the snoozed check alerted at {} before its snooze ended at {ends_at}",
                r.received_ms
            );
        }
    }
}

both_backends!(
    a_snoozed_check_sends_nothing_while_it_fails_and_alerts_after,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let s = TestServer::start(backend, &alerting(&hook)).await;
        let backup = s
            .create_check(json!({"slug": "backup", "interval": "1h"}))
            .await["uuid"]
            .as_str()
            .unwrap()
            .to_string();
        let other = s
            .create_check(json!({"slug": "other", "interval": "1h"}))
            .await["uuid"]
            .as_str()
            .unwrap()
            .to_string();
        held_until_the_snooze_ends(&s.base, &backup, &other, &hook).await;
        s.stop().await;
    }
);

both_backends!(
    snoozes_are_silences_listed_replaced_and_deleted,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "backup", "interval": "1h"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();

        let before = now_ms();
        let a = snooze(&s, &format!("/ping/{uuid}/snooze?for=2h")).await;
        // Named by the check's unique key: silences are listed to read keys.
        let id = format!("snooze-{}", c["unique_key"].as_str().unwrap());
        assert_eq!(a["silence"], id);
        assert_eq!(a["check"], "backup");
        assert_eq!(a["matchers"], json!(["check=\"backup\""]));
        let ends = ms(&a["ends_at"]);
        assert!(ends >= before + 7_200_000 && ends <= now_ms() + 7_200_000);

        let listed = snoozes(&s).await;
        assert_eq!(listed.len(), 1, "{listed:#?}");
        let l = &listed[0];
        assert_eq!(l["id"], id);
        assert_eq!(l["matchers"], json!(["check=\"backup\""]));
        assert_eq!(
            (&l["source"], &l["state"]),
            (&json!("api"), &json!("active"))
        );
        assert_eq!(l["comment"], "snoozed from the job side for 2h");
        assert_eq!(l["created_by"], "ping from 127.0.0.1");
        assert_eq!(l["ends_at"], a["ends_at"]);

        // A second snooze replaces the first, shorter or longer, whatever
        // the method and whichever form of the URL.
        let (status, kind, body) = call(
            &s,
            reqwest::Method::POST,
            &format!("/ping/{uuid}/snooze?for=10m&reason=db+migration%0Aof+v2"),
        )
        .await;
        assert_eq!((status, kind.as_str()), (200, "application/json"), "{body}");
        let b: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(b["silence"], id);
        assert!(ms(&b["ends_at"]) < ends, "a shorter snooze shortens it");
        let listed = snoozes(&s).await;
        assert_eq!(listed.len(), 1, "replaced, not piled up: {listed:#?}");
        assert_eq!(
            listed[0]["comment"],
            "snoozed from the job side for 10m: db migration of v2"
        );
        assert_eq!(listed[0]["ends_at"], b["ends_at"]);
        for method in [reqwest::Method::HEAD, reqwest::Method::PUT] {
            let (status, ..) =
                call(&s, method.clone(), &format!("/ping/{uuid}/snooze?for=1h")).await;
            assert_eq!(status, 200, "{method}");
        }
        let c = snooze(&s, &format!("/ping/{PING_KEY}/backup/snooze?for=3h")).await;
        assert_eq!(c["silence"], id);
        assert!(ms(&c["ends_at"]) > ends, "a longer snooze extends it");
        assert_eq!(snoozes(&s).await.len(), 1);

        // A snooze is not a ping: no status change, nothing in the ping log.
        let check = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(check["status"], "new");
        let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
        assert_eq!(pings["pings"], json!([]));

        // Deleted like any silence; snoozing again makes it anew.
        let r = s
            .client
            .delete(s.url(&format!("/api/v1/silences/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        assert!(snoozes(&s).await.is_empty());
        snooze(&s, &format!("/ping/{uuid}/snooze?for=1m")).await;
        assert_eq!(snoozes(&s).await.len(), 1);

        // A check without a slug is matched by its uuid; snoozing a paused
        // check does not resume it, as a ping would.
        let bare = s.create_check(json!({"interval": "1h"})).await;
        let bare_key = bare["unique_key"].as_str().unwrap().to_string();
        let bare = bare["uuid"].as_str().unwrap().to_string();
        s.post_200(&format!("/api/v1/checks/{bare}/pause")).await;
        let d = snooze(&s, &format!("/ping/{bare}/snooze?for=90s")).await;
        let check = s.get_json(&format!("/api/v1/checks/{bare}")).await;
        assert_eq!(check["status"], "paused");
        // A check without a slug is matched by its unique key, never its uuid.
        assert_eq!(d["matchers"], json!([format!("check=\"{bare_key}\"")]));
        let listed = snoozes(&s).await;
        assert_eq!(listed.len(), 2);
        assert!(listed
            .iter()
            .any(|l| l["id"] == format!("snooze-{bare_key}")
                && l["matchers"] == json!([format!("check=\"{bare_key}\"")])
                && l["comment"] == "snoozed from the job side for 1m 30s"));
        s.stop().await;
    }
);

both_backends!(
    bad_snoozes_are_refused_with_the_reason,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s.create_check(json!({"slug": "backup"})).await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        for query in ["", "?reason=x", "?for=", "?for=abc", "?for=0s", "?for=8d"] {
            let (status, kind, body) = call(
                &s,
                reqwest::Method::GET,
                &format!("/ping/{uuid}/snooze{query}"),
            )
            .await;
            assert_eq!(status, 400, "{query}: {body}");
            assert!(kind.starts_with("text/plain"), "{query}: {kind}");
            assert!(body.starts_with("for: "), "{query}: {body}");
        }
        let unknown = uuid::Uuid::new_v4();
        let (status, _, body) = call(
            &s,
            reqwest::Method::GET,
            &format!("/ping/{unknown}/snooze?for=1h"),
        )
        .await;
        assert_eq!((status, body.as_str()), (404, "not found"));
        // The slug form never creates a check to snooze.
        let (status, _, body) = call(
            &s,
            reqwest::Method::GET,
            &format!("/ping/{PING_KEY}/nothing/snooze?for=1h&create=1"),
        )
        .await;
        assert_eq!((status, body.as_str()), (404, "not found"));
        let (status, ..) = call(
            &s,
            reqwest::Method::GET,
            "/ping/wrong-key/backup/snooze?for=1h",
        )
        .await;
        assert_eq!(status, 404);
        assert!(snoozes(&s).await.is_empty(), "nothing refused was stored");
        let r = s
            .client
            .get(s.url("/api/v1/checks/nothing"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "a snooze creates no check");
        s.stop().await;
    }
);

/// `overdue ping ARGS…` against the server; its output.
fn overdue(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overdue"))
        .args(args)
        .env_remove("OVERDUE_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs the binary off the test's runtime, which serves the server.
async fn overdue_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        overdue(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_snoozes_and_says_until_when() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let c = s.create_check(json!({"slug": "cron-job"})).await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let url = s.url(&format!("/ping/{uuid}"));
    let args = |extra: &[&str]| -> Vec<String> {
        ["ping"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };

    let before = now_ms();
    let o = overdue_async(args(&["--snooze", "2h", &url])).await;
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let listed = snoozes(&s).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["matchers"], json!(["check=\"cron-job\""]));
    assert!(ms(&listed[0]["ends_at"]) >= before + 7_200_000);
    assert_eq!(
        out,
        format!(
            "snoozed check=\"cron-job\" until {} (silence snooze-{})\n",
            listed[0]["ends_at"].as_str().unwrap(),
            c["unique_key"].as_str().unwrap()
        )
    );

    // A bare uuid on --url, and the slug form, replace it.
    let o = overdue_async(args(&["--snooze", "30m", &uuid, "--url", &s.base])).await;
    assert_eq!(o.status.code(), Some(0));
    let slug_url = s.url(&format!("/ping/{PING_KEY}/cron-job"));
    let o = overdue_async(args(&["--snooze", "45m", &slug_url])).await;
    assert_eq!(o.status.code(), Some(0));
    let listed = snoozes(&s).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["comment"], "snoozed from the job side for 45m");

    // Refused by the server: exit 1 with its reason; bad input: exit 2.
    let o = overdue_async(args(&["--snooze", "8d", &url])).await;
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("400") && err.contains("for:"), "{err}");
    let missing = s.url(&format!("/ping/{}", uuid::Uuid::new_v4()));
    let o = overdue_async(args(&["--snooze", "1h", &missing])).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("404"));
    for bad in [
        vec!["--snooze", "soon", url.as_str()],
        vec!["--snooze", "1h", "--fail", url.as_str()],
        vec!["--snooze", "1h", "--items", "3", url.as_str()],
    ] {
        let o = overdue_async(args(&bad)).await;
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
    // Unreachable: exit 1, quickly given up.
    let o = overdue_async(args(&[
        "--snooze",
        "1h",
        "--retries",
        "0",
        "--timeout",
        "1s",
        "http://127.0.0.1:9/ping/x",
    ]))
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        snoozes(&s).await[0]["comment"],
        "snoozed from the job side for 45m"
    );
    s.stop().await;
}

both_backends!(
    python_urllib_snoozes_a_check,
    needs = [python3],
    |backend| async move {
        common::need_program(common::Peer::Python3, "/usr/bin/python3", "python3");
        let s = TestServer::start(backend, "").await;
        let c = s.create_check(json!({"slug": "nightly"})).await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        const SCRIPT: &str = r#"
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=30) as r:
        print(r.status, r.headers.get("Content-Type"), r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("Content-Type"), e.read().decode())
"#;
        let run = |url: String| {
            tokio::task::spawn_blocking(move || {
                let out = Command::new("/usr/bin/python3")
                    .args(["-c", SCRIPT, &url])
                    .output()
                    .expect("run python3");
                assert!(out.status.success(), "{out:?}");
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            })
        };
        let seen = run(s.url(&format!("/ping/{uuid}/snooze?for=15m")))
            .await
            .unwrap();
        let (head, body) = seen.split_once(" application/json ").expect(&seen);
        assert_eq!(head, "200");
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            v["silence"],
            format!("snooze-{}", c["unique_key"].as_str().unwrap())
        );
        let listed = snoozes(&s).await;
        assert_eq!(listed[0]["ends_at"], v["ends_at"]);
        let seen = run(s.url(&format!("/ping/{uuid}/snooze?for=abc")))
            .await
            .unwrap();
        assert!(seen.starts_with("400 text/plain"), "{seen}");
        assert!(seen.contains("for: \"abc\""), "{seen}");
        s.stop().await;
    }
);

/// On PostgreSQL a snooze taken by a replica that is not the leader reaches
/// the leader's dispatcher (the silences trigger notifies every replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn a_snooze_on_another_replica_holds_the_leaders_alerts() {
    common::need_postgres();
    let hook = WebhookSink::start().await;
    let toml = format!("heartbeat_period = \"200ms\"\n{}", alerting(&hook));
    let s = TestServer::start(Backend::Postgres, &toml).await;
    let path = common::write_config(s.db.dir.path(), &s.db.config_toml(&toml));
    let child = ChildServer::spawn(&path);
    let replica = child.replica();
    // Whichever holds the lease, the requests go to the other one.
    let leader = leader(&s.db.url).await;
    let base = if leader == replica {
        s.base.clone()
    } else {
        child.base.clone()
    };
    let backup = s
        .create_check(json!({"slug": "backup", "interval": "1h"}))
        .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let other = s
        .create_check(json!({"slug": "other", "interval": "1h"}))
        .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    held_until_the_snooze_ends(&base, &backup, &other, &hook).await;
    drop(child);
    s.stop().await;
}

/// The replica holding the leader lease (waits until one does).
async fn leader(url: &str) -> String {
    use sqlx::Connection;
    let start = Instant::now();
    loop {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let holder: Option<String> = sqlx::query_scalar(
            "SELECT holder FROM leases WHERE name = 'leader' \
             AND expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint",
        )
        .fetch_optional(&mut c)
        .await
        .unwrap();
        if let Some(h) = holder {
            return h;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "hang guard: no leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
