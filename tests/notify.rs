//! Alerting end to end: the real server, a real webhook receiver (an HTTP
//! server that records requests and answers from a script) and a real SMTP
//! server. Checks fail through the ping API; what arrives is asserted.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::sinks::{self, Behaviour, SmtpOptions, SmtpSink, WebhookSink};
use common::{client, notifications_until, write_config, Backend, ChildServer, TestDb, TestServer};
use serde_json::{json, Value};

/// Creates a check with these labels; returns its uuid.
async fn create(server: &TestServer, slug: &str, labels: Value) -> String {
    let c = server
        .create_check(json!({"slug": slug, "name": format!("Job {slug}"), "interval": "1h", "labels": labels}))
        .await;
    c["uuid"].as_str().unwrap().to_string()
}

/// Creates a check with these labels and fails it; returns its uuid.
async fn failing(server: &TestServer, slug: &str, labels: Value) -> String {
    let uuid = create(server, slug, labels).await;
    let (status, _) = server.ping(&format!("/ping/{uuid}/fail")).await;
    assert_eq!(status, 200);
    uuid
}

/// Fails these checks all at once.
async fn fail_together(server: &TestServer, uuids: &[String]) {
    let mut set = tokio::task::JoinSet::new();
    for uuid in uuids {
        let url = server.url(&format!("/ping/{uuid}/fail"));
        let http = server.client.clone();
        set.spawn(async move { http.get(url).send().await.unwrap().status().as_u16() });
    }
    while let Some(status) = set.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
}

/// The set of checks whose alerts in `body` are in `status`.
fn alert_checks(body: &Value, status: &str) -> BTreeSet<String> {
    sinks::alert_checks(body, status).into_iter().collect()
}

both_backends!(
    fifty_checks_down_make_one_mail_and_one_webhook_call,
    needs = [aiosmtpd],
    |backend| async move {
        let hook = WebhookSink::start().await;
        let smtp = SmtpSink::start(SmtpOptions::default());
        let toml = format!(
            r#"{mail}
[[receivers]]
name = "data-hook"
type = "webhook"
url = "{url}"

[[receivers]]
name = "pager"
type = "webhook"
url = "{pager}"

[route]
receiver = "mail"
group_by = ["team"]
group_wait = "2s"
group_interval = "1h"

[[route.routes]]
matchers = ['team="data"']
receiver = "data-hook"
continue = true
routes = [ {{ matchers = ['severity="page"'], receiver = "pager" }} ]

[[route.routes]]
matchers = ['team=~"data|web"']
receiver = "mail"
"#,
            mail = smtp.mail_toml(),
            url = hook.url("/data"),
            pager = hook.url("/pager"),
        );
        let server = TestServer::start(backend, &toml).await;
        let http = client();
        let mut data = BTreeSet::new();
        let mut uuids = Vec::new();
        for i in 0..50 {
            let slug = format!("data-{i:02}");
            uuids.push(create(&server, &slug, json!({"team": "data"})).await);
            data.insert(slug);
        }
        for i in 0..3 {
            uuids.push(create(&server, &format!("web-{i}"), json!({"team": "web"})).await);
        }
        uuids.push(
            create(
                &server,
                "data-pager",
                json!({"team": "data", "severity": "page"}),
            )
            .await,
        );
        uuids.push(create(&server, "ops-0", json!({"team": "ops"})).await);
        // All fifty-five go down within a moment: well inside group_wait.
        fail_together(&server, &uuids).await;

        // data-hook: one call listing the fifty data checks (the nested pager
        // route takes data-pager). pager: one call. mail: data (fifty-one, via
        // continue), web (three), ops (root): one mail each.
        let calls = hook.wait_for(2).await;
        let mails = smtp.wait_for(3).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let calls = if hook.requests().len() > calls.len() {
            hook.requests()
        } else {
            calls
        };
        assert_eq!(calls.len(), 2, "one call per route group");
        let data_call = calls
            .iter()
            .find(|r| r.path == "/data")
            .expect("a /data call");
        let body = data_call.json();
        assert_eq!(alert_checks(&body, "firing"), data);
        assert_eq!(body["version"], "4");
        assert_eq!(body["status"], "firing");
        assert_eq!(body["receiver"], "data-hook");
        assert_eq!(body["groupLabels"], json!({"team": "data"}));
        assert_eq!(body["commonLabels"]["team"], "data");
        assert!(body["groupKey"].as_str().unwrap().contains("team=\"data\""));
        assert_eq!(
            data_call.header("idempotency-key"),
            body["idempotencyKey"].as_str()
        );
        let pager_call = calls
            .iter()
            .find(|r| r.path == "/pager")
            .expect("a /pager call");
        assert_eq!(
            alert_checks(&pager_call.json(), "firing"),
            BTreeSet::from(["data-pager".to_string()])
        );

        let mails = if smtp.messages().len() > mails.len() {
            smtp.messages()
        } else {
            mails
        };
        assert_eq!(mails.len(), 3, "one mail per group");
        let subjects: BTreeSet<String> = mails.iter().map(|m| m.subject.clone().unwrap()).collect();
        assert!(
            subjects
                .iter()
                .any(|s| s.starts_with("[FIRING:51] team=data — ")),
            "{subjects:?}"
        );
        assert!(
            subjects
                .iter()
                .any(|s| s.starts_with("[FIRING:3] team=web — ")),
            "{subjects:?}"
        );
        assert!(
            subjects
                .iter()
                .any(|s| s.starts_with("[FIRING:1] team=ops — ops-0")),
            "{subjects:?}"
        );
        let big = mails
            .iter()
            .find(|m| m.subject.as_deref().unwrap().starts_with("[FIRING:51]"))
            .unwrap();
        let text = big.text.clone().unwrap();
        for slug in &data {
            assert!(text.contains(slug.as_str()), "{slug} missing from the mail");
        }
        assert_eq!(big.rcpt_tos, vec!["oncall@example.com".to_string()]);

        // Every attempt is listed by the API.
        let listed = notifications_until(&server, "?state=delivered", |l| l.len() == 5).await;
        assert!(listed
            .iter()
            .all(|n| n["attempt_log"].as_array().unwrap().len() == 1
                && n["attempt_log"][0]["outcome"] == "delivered"));
        let r = http
            .get(server.url("/api/v1/notifications?state=bogus"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        server.stop().await;
    }
);

both_backends!(
    recoverable_failures_are_retried_then_delivered,
    |backend| async move {
        let hook = WebhookSink::start().await;
        hook.push(Behaviour::Status(500));
        hook.push(Behaviour::StatusWithHeaders(
            429,
            vec![("Retry-After".into(), "1".into())],
        ));
        hook.push(Behaviour::Hang);
        let toml = format!(
            r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"
timeout = "1s"

[route]
receiver = "hook"
group_wait = "100ms"

[notifications]
max_attempts = 5
retry_base = "200ms"
"#,
            url = hook.url("/hook"),
        );
        let server = TestServer::start(backend, &toml).await;
        failing(&server, "a", json!({})).await;
        hook.wait_for(4).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let calls = hook.requests();
        assert_eq!(calls.len(), 4, "500, 429, a hang, then 200");
        let keys: BTreeSet<&str> = calls
            .iter()
            .map(|r| r.header("idempotency-key").unwrap())
            .collect();
        assert_eq!(keys.len(), 1, "every attempt carries the same key");
        // Retry-After: 1 is honoured.
        assert!(calls[2].received - calls[1].received >= Duration::from_millis(950));
        // The hang is cut at the receiver's timeout, then retried.
        assert!(calls[3].received - calls[2].received >= Duration::from_millis(950));
        let listed = notifications_until(&server, "", |l| {
            l.len() == 1 && l[0]["state"] == "delivered"
        })
        .await;
        let log = listed[0]["attempt_log"].as_array().unwrap();
        let outcomes: Vec<&str> = log.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
        assert_eq!(outcomes, vec!["retry", "retry", "retry", "delivered"]);
        let errors: Vec<String> = log
            .iter()
            .map(|a| a["error"].as_str().unwrap_or("").to_lowercase())
            .collect();
        assert!(errors[0].contains("500"), "{errors:?}");
        assert!(errors[1].contains("429"), "{errors:?}");
        assert!(errors[2].contains("timed out"), "{errors:?}");
        assert_eq!(listed[0]["attempts"], 4);
        server.stop().await;
    }
);

both_backends!(a_permanent_failure_is_not_retried, |backend| async move {
    let hook = WebhookSink::start().await;
    hook.push(Behaviour::Status(400));
    let toml = hook.hook_toml(
        r#"group_wait = "100ms"

[notifications]
retry_base = "100ms"
"#,
    );
    let server = TestServer::start(backend, &toml).await;
    failing(&server, "a", json!({})).await;
    let listed = notifications_until(&server, "?state=dead", |l| l.len() == 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(hook.requests().len(), 1, "no retry after HTTP 400");
    assert_eq!(listed[0]["attempts"], 1);
    assert!(listed[0]["last_error"].as_str().unwrap().contains("400"));
    server.stop().await;
});

both_backends!(
    dead_letters_are_retried_and_reported_once,
    |backend| async move {
        let hook = WebhookSink::start().await;
        for _ in 0..50 {
            hook.push(Behaviour::Status(503));
        }
        let fallback = WebhookSink::start().await;
        let toml = format!(
            r#"
fallback_receiver = "fallback"

[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"

[[receivers]]
name = "fallback"
type = "webhook"
url = "{fallback}"

[route]
receiver = "hook"
group_wait = "100ms"

[notifications]
max_attempts = 3
retry_base = "100ms"
sweep_interval = "2s"
"#,
            url = hook.url("/hook"),
            fallback = fallback.url("/fallback"),
        );
        let server = TestServer::start(backend, &toml).await;
        failing(&server, "a", json!({})).await;
        let dead = notifications_until(&server, "?state=dead", |l| l.len() == 1).await;
        assert_eq!(dead[0]["attempts"], 3);
        assert!(dead[0]["last_error"].as_str().unwrap().contains("503"));
        // The payload is kept with the dead letter.
        assert_eq!(dead[0]["payload"]["alerts"][0]["labels"]["check"], "a");

        // The sweep tries once more, then tells the fallback receiver, once.
        let notice = fallback.wait_for(1).await;
        let body = notice[0].json();
        assert_eq!(body["alerts"].as_array().unwrap().len(), 1);
        assert_eq!(
            body["commonAnnotations"]["summary"],
            "1 notifications could not be delivered"
        );
        assert!(
            hook.requests().len() >= 4,
            "the sweep retried the dead letter"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(fallback.requests().len(), 1, "reported once");
        server.stop().await;
    }
);

both_backends!(
    a_dead_firing_notification_is_not_resent_after_its_alerts_resolve,
    |backend| async move {
        let hook = WebhookSink::start().await;
        for _ in 0..50 {
            hook.push(Behaviour::Status(500));
        }
        let toml = hook.hook_toml(
            r#"group_wait = "100ms"

[notifications]
max_attempts = 2
retry_base = "50ms"
sweep_interval = "1s"
"#,
        );
        let server = TestServer::start(backend, &toml).await;
        let uuid = failing(&server, "a", json!({})).await;
        let dead = notifications_until(&server, "?state=dead", |l| l.len() == 1).await;
        let firing_id = dead[0]["id"].as_str().unwrap().to_string();
        let sent_firing = || {
            hook.requests()
                .iter()
                .filter(|r| r.header("idempotency-key") == Some(firing_id.as_str()))
                .count()
        };
        // While its alert still fires, the sweep retries the dead letter.
        let start = Instant::now();
        while sent_firing() < 3 {
            assert!(
                start.elapsed() < common::HANG_GUARD,
                "the sweep never retried the dead letter"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // It recovers: from then on the firing notification is not sent again.
        let (status, _) = server.ping(&format!("/ping/{uuid}")).await;
        assert_eq!(status, 200);
        let obsolete = notifications_until(&server, "?state=obsolete", |l| l.len() == 1).await;
        assert_eq!(obsolete[0]["id"], firing_id.as_str());
        let after = sent_firing();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            sent_firing(),
            after,
            "no re-send as firing after it resolved"
        );
        server.stop().await;
    }
);

both_backends!(
    silences_hold_notifications_back_and_release_them,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let toml = format!(
            r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"

[[silences]]
matchers = ['team="ops"']
duration = "1h"
comment = "declared in config"

[route]
receiver = "hook"
group_by = ["team"]
group_wait = "200ms"
group_interval = "500ms"
"#,
            url = hook.url("/hook"),
        );
        let server = TestServer::start(backend, &toml).await;
        let http = client();
        // Bad silences are refused with the field named.
        let r = http
            .post(server.url("/api/v1/silences"))
            .json(&json!({"matchers": ["team=~\"(\""], "duration": "1h"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["fields"][0]["field"], "matchers[0]");

        let r = http
        .post(server.url("/api/v1/silences"))
        .json(&json!({"matchers": ["team=\"data\""], "duration": "3s", "comment": "deploy", "created_by": "ci"}))
        .send()
        .await
        .unwrap();
        assert_eq!(r.status(), 201);
        let silence: Value = r.json().await.unwrap();
        assert_eq!(silence["state"], "active");
        let r = http
            .post(server.url("/api/v1/silences"))
            .json(&json!({"matchers": ["team=\"web\""], "duration": "1h"}))
            .send()
            .await
            .unwrap();
        let web_silence: Value = r.json().await.unwrap();
        let listed = server.get_json("/api/v1/silences").await;
        let sources: BTreeSet<&str> = listed["silences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["source"].as_str().unwrap())
            .collect();
        assert_eq!(sources, BTreeSet::from(["api", "config"]));
        let r = http
            .delete(server.url("/api/v1/silences/config-0"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409, "config silences are changed in the config");

        let started = Instant::now();
        failing(&server, "d", json!({"team": "data"})).await;
        failing(&server, "w", json!({"team": "web"})).await;
        failing(&server, "o", json!({"team": "ops"})).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(hook.requests().is_empty(), "everything is silenced");

        // Deleting a silence releases its alerts.
        let r = http
            .delete(server.url(&format!(
                "/api/v1/silences/{}",
                web_silence["id"].as_str().unwrap()
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        let calls = hook.wait_for(1).await;
        assert_eq!(
            alert_checks(&calls[0].json(), "firing"),
            BTreeSet::from(["w".to_string()])
        );

        // The data silence ends after 3 s: then it notifies.
        let calls = hook.wait_for(2).await;
        assert!(started.elapsed() >= Duration::from_millis(2900));
        assert_eq!(
            alert_checks(&calls[1].json(), "firing"),
            BTreeSet::from(["d".to_string()])
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(hook.requests().len(), 2, "ops stays silenced");
        server.stop().await;
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_delivery_is_recorded_resends_with_the_same_key_once() {
    let hook = WebhookSink::start().await;
    // The first attempt is accepted by the receiver but never answered: the
    // server dies while it waits.
    hook.push(Behaviour::Hang);
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(Backend::Sqlite).await;
    let toml = db.config_toml(&format!(
        r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"
timeout = "60s"

[route]
receiver = "hook"
group_wait = "100ms"
"#,
        url = hook.url("/hook"),
    ));
    let config = write_config(dir.path(), &toml);
    let server = ChildServer::spawn(&config);
    let http = client();
    let c: Value = http
        .post(format!("{}/api/v1/checks", server.base))
        .json(&json!({"slug": "a", "interval": "1h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let uuid = c["uuid"].as_str().unwrap();
    common::get_200(&http, &format!("{}/ping/{uuid}/fail", server.base)).await;
    let first = hook.wait_for(1).await;
    server.kill9();

    let server = ChildServer::spawn(&config);
    let calls = hook.wait_for(2).await;
    assert_eq!(
        calls[1].header("idempotency-key"),
        first[0].header("idempotency-key"),
        "the resend carries the same key"
    );
    // Delivered once now: nothing more, and one notification in all.
    let start = Instant::now();
    loop {
        let v: Value = http
            .get(format!("{}/api/v1/notifications", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let list = v["notifications"].as_array().unwrap();
        if list.len() == 1 && list[0]["state"] == "delivered" {
            break;
        }
        assert!(start.elapsed() < common::HANG_GUARD, "{v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(hook.requests().len(), 2);
    drop(server);
}

both_backends!(
    a_hanging_receiver_does_not_hold_up_the_others,
    |backend| async move {
        let slow = WebhookSink::start().await;
        for _ in 0..10 {
            slow.push(Behaviour::Hang);
        }
        let fast = WebhookSink::start().await;
        // The slow receiver's timeout is longer than any wait of the test,
        // so its attempts hang until the end (a lease outlives them, and
        // the shutdown cuts them).
        let toml = format!(
            r#"
lease_ttl = "10m"
shutdown_timeout = "1s"

[[receivers]]
name = "slow"
type = "webhook"
url = "{slow}"
timeout = "5m"

[[receivers]]
name = "fast"
type = "webhook"
url = "{fast}"

[route]
receiver = "slow"
group_by = ["check"]
group_wait = "100ms"
routes = [ {{ matchers = ['team="fast"'], receiver = "fast" }} ]

[notifications]
per_receiver = 2
"#,
            slow = slow.url("/slow"),
            fast = fast.url("/fast"),
        );
        let server = TestServer::start(backend, &toml).await;
        // Four failures for the hanging receiver fill its two slots (and wait
        // for them); then one for the fast receiver.
        for i in 0..4 {
            failing(&server, &format!("s{i}"), json!({"team": "slow"})).await;
        }
        slow.wait_for(2).await;
        failing(&server, "f", json!({"team": "fast"})).await;
        let got = fast.wait_for(1).await;
        assert_eq!(
            alert_checks(&got[0].json(), "firing"),
            BTreeSet::from(["f".to_string()])
        );
        // Delivered while the slow receiver's attempts still hang: none of
        // them has come back (their timeout is longer than the hang guard).
        let slow_ones = server.get_json("/api/v1/notifications?receiver=slow").await;
        assert!(
            slow_ones["notifications"]
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["attempt_log"].as_array().unwrap().is_empty()),
            "{slow_ones:#}"
        );
        assert_eq!(
            slow.requests().len(),
            2,
            "only two slots for the slow receiver"
        );
        let pending = notifications_until(&server, "?receiver=slow", |l| l.len() == 4).await;
        assert!(pending.iter().all(|n| n["state"] == "pending"));
        // The evaluator is not held up either: a new failure is recorded at once.
        let uuid = failing(&server, "g", json!({"team": "fast"})).await;
        let check = server.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(check["status"], "down");
        fast.wait_for(2).await;
        drop(slow);
        let _ = tokio::time::timeout(common::HANG_GUARD, server.stop()).await;
    }
);
