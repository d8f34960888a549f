//! Overlap alerts end to end (SPEC §3.4) and links in messages (SPEC §6):
//! the real server, real receivers (an in-process webhook server and an SMTP
//! server); runs overlap through the ping API and what arrives is asserted.

mod common;

use std::time::{Duration, Instant};

use common::sinks::{Alertmanager, SmtpOptions, SmtpSink, WebhookSink};
use common::TestServer;
use serde_json::{json, Value};

const BASE_URL: &str = "http://overdue.test";

/// A run id for `?rid=`.
fn rid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The alerts of a webhook body in this state with this alertname, by check.
fn alerts<'a>(body: &'a Value, status: &str, alertname: &str) -> Vec<&'a Value> {
    body["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == status && a["labels"]["alertname"] == alertname)
        .collect()
}

fn checks(alerts: &[&Value]) -> Vec<String> {
    let mut v: Vec<String> = alerts
        .iter()
        .map(|a| a["labels"]["check"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// Every notification in the outbox, oldest first (as the API lists them).
async fn outbox(server: &TestServer) -> Vec<Value> {
    let v = server.get_json("/api/v1/notifications?limit=100").await;
    let mut list = v["notifications"].as_array().unwrap().clone();
    list.reverse();
    list
}

/// Waits until the outbox holds `n` delivered notifications.
async fn delivered(server: &TestServer, n: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let list = outbox(server).await;
        if list.iter().filter(|n| n["state"] == "delivered").count() >= n {
            return list;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "waiting for {n} delivered: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A webhook receiver taking every alert, grouped by `group_by`.
fn hook_config(hook: &WebhookSink, group_by: &str) -> String {
    let route = format!(
        r#"group_by = {group_by}
group_wait = "200ms"
group_interval = "300ms"
repeat_interval = "1h"
"#
    );
    format!("base_url = \"{BASE_URL}\"\n{}", hook.hook_toml(&route))
}

both_backends!(
    an_overlap_is_announced_once_and_resolved_once,
    needs = [aiosmtpd],
    |backend| async move {
        let hook = WebhookSink::start().await;
        let smtp = SmtpSink::start(SmtpOptions::default());
        // Every alert goes to the webhook and to the mail, in one group per
        // receiver: each later notification lists all that still fires and
        // all that resolved since, so a second announcement or a second
        // resolve would show in it.
        let toml = format!(
            r#"
base_url = "{BASE_URL}"

[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"
{mail}
[route]
receiver = "hook"
group_by = []
group_wait = "200ms"
group_interval = "300ms"
repeat_interval = "1h"
routes = [
  {{ matchers = ['check=~".+"'], receiver = "hook", continue = true }},
  {{ matchers = ['check=~".+"'], receiver = "mail" }},
]
"#,
            url = hook.url("/hook"),
            mail = smtp.mail_toml(),
        );
        let server = TestServer::start(backend, &toml).await;
        let etl = server
            .create_uuid(
                json!({"slug": "etl", "name": "ETL", "interval": "1h", "alert_on_overlap": true,
                   "labels": {"team": "data"}}),
            )
            .await;
        let plain = server
            .create_uuid(json!({"slug": "plain", "name": "Plain", "interval": "1h"}))
            .await;
        for uuid in [&etl, &plain] {
            server.ping_ok(&format!("/ping/{uuid}")).await;
        }
        let (r1, r2) = (rid(), rid());
        for uuid in [&etl, &plain] {
            server
                .ping_ok(&format!("/ping/{uuid}/start?rid={r1}"))
                .await;
            server
                .ping_ok(&format!("/ping/{uuid}/start?rid={r2}"))
                .await;
        }

        // One notification: etl's overlap, firing; nothing of plain.
        let calls = hook.wait_for(1).await;
        let body = calls[0].json();
        assert_eq!(body["status"], "firing", "{body}");
        let firing = alerts(&body, "firing", "OverdueOverlap");
        assert_eq!(checks(&firing), ["etl"], "{body}");
        assert_eq!(body["alerts"].as_array().unwrap().len(), 1, "{body}");
        let a = firing[0];
        assert_eq!(a["labels"]["name"], "ETL");
        assert_eq!(a["labels"]["team"], "data");
        assert!(a["labels"].get("status").is_none(), "{a}");
        assert!(a["labels"].get("reason").is_none(), "{a}");
        // Links go to the dashboard's page of the check, by slug (never by
        // its uuid: these links reach whole chat channels).
        let link = format!("{BASE_URL}/checks/etl");
        assert_eq!(a["generatorURL"], link.as_str());
        assert_eq!(a["annotations"]["link"], link.as_str());
        assert_eq!(
            a["annotations"]["summary"],
            "ETL has two or more runs open at once"
        );
        assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
        let mails = smtp.wait_for(1).await;
        let text = mails[0].text.clone().unwrap();
        assert!(text.contains("alert:      OverdueOverlap"), "{text}");
        assert!(text.contains(&format!("link:       {link}")), "{text}");

        // The check's status is not changed by an overlap.
        let c = server.get_json(&format!("/api/v1/checks/{etl}")).await;
        assert_eq!(c["status"], "up", "{c}");
        assert_eq!(c["running"], true, "{c}");

        // One run finishes: fewer than two are open, the overlap resolves.
        server.ping_ok(&format!("/ping/{etl}?rid={r1}")).await;
        let calls = hook.wait_for(2).await;
        let body = calls[1].json();
        assert_eq!(body["status"], "resolved", "{body}");
        let resolved = alerts(&body, "resolved", "OverdueOverlap");
        assert_eq!(checks(&resolved), ["etl"], "{body}");
        assert_eq!(body["alerts"].as_array().unwrap().len(), 1, "{body}");
        assert_ne!(resolved[0]["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(
            server.get_json(&format!("/api/v1/checks/{etl}")).await["status"],
            "up"
        );

        // plain fails: its incident is the group's next notification, and it
        // lists neither etl's overlap again nor an overlap of plain.
        server
            .ping_ok(&format!("/ping/{plain}/fail?rid={r1}"))
            .await;
        let calls = hook.wait_for(3).await;
        let body = calls[2].json();
        assert_eq!(body["alerts"].as_array().unwrap().len(), 1, "{body}");
        let incident = alerts(&body, "firing", "OverdueCheck");
        assert_eq!(checks(&incident), ["plain"], "{body}");
        assert_eq!(incident[0]["labels"]["status"], "down");
        assert_eq!(
            incident[0]["generatorURL"],
            format!("{BASE_URL}/checks/plain").as_str()
        );
        let mails = smtp.wait_for(3).await;
        let text = mails[2].text.clone().unwrap();
        assert!(text.contains("alert:      OverdueCheck"), "{text}");

        // Everything enqueued was delivered: three steps per receiver, no more.
        let list = delivered(&server, 6).await;
        assert_eq!(list.len(), 6, "{list:#?}");
        assert_eq!(hook.requests().len(), 3);
        assert_eq!(smtp.messages().len(), 3);
        server.stop().await;
    }
);

both_backends!(
    a_restart_does_not_announce_an_overlap_again,
    |backend| async move {
        let hook = WebhookSink::start().await;
        // One group per check: after the restart, etl's group has nothing new
        // to say until its overlap resolves.
        let toml = hook_config(&hook, r#"["check"]"#);
        let server = TestServer::start(backend, &toml).await;
        let etl = server
            .create_uuid(json!({"slug": "etl", "interval": "1h", "alert_on_overlap": true}))
            .await;
        let plain = server
            .create_uuid(json!({"slug": "plain", "interval": "1h"}))
            .await;
        let (r1, r2) = (rid(), rid());
        server.ping_ok(&format!("/ping/{etl}/start?rid={r1}")).await;
        server.ping_ok(&format!("/ping/{etl}/start?rid={r2}")).await;
        let calls = hook.wait_for(1).await;
        assert_eq!(
            checks(&alerts(&calls[0].json(), "firing", "OverdueOverlap")),
            ["etl"]
        );
        delivered(&server, 1).await;

        let db = server.stop().await;
        let server = TestServer::start_on(db, &toml).await;
        // plain fails after the restart. Its group flushes no earlier than
        // etl's first flush after the restart (both wait group_wait from when
        // the dispatcher took them in, etl at its start): once plain's
        // notification is out, a second announcement of etl would have been
        // enqueued.
        server.ping_ok(&format!("/ping/{plain}/fail")).await;
        let calls = hook.wait_for(2).await;
        let body = calls[1].json();
        assert_eq!(checks(&alerts(&body, "firing", "OverdueCheck")), ["plain"]);
        let list = outbox(&server).await;
        assert_eq!(list.len(), 2, "{list:#?}");

        // Pausing the check resolves its overlap (its runs stay open).
        let r = server
            .client
            .post(server.url(&format!("/api/v1/checks/{etl}/pause")))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let calls = hook.wait_for(3).await;
        let body = calls[2].json();
        assert_eq!(body["status"], "resolved", "{body}");
        assert_eq!(
            checks(&alerts(&body, "resolved", "OverdueOverlap")),
            ["etl"]
        );
        let list = delivered(&server, 3).await;
        assert_eq!(list.len(), 3, "{list:#?}");
        server.stop().await;
    }
);

both_backends!(
    timed_out_and_deleted_checks_resolve_their_overlap,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &hook_config(&hook, "[]")).await;
        let slow = server.create_uuid(json!({"slug": "slow", "interval": "1h", "max_runtime": "2s", "alert_on_overlap": true}),
        )
        .await;
        let gone = server
            .create_uuid(json!({"slug": "gone", "interval": "1h", "alert_on_overlap": true}))
            .await;
        for uuid in [&slow, &gone] {
            server.ping_ok(&format!("/ping/{uuid}")).await;
            server
                .ping_ok(&format!("/ping/{uuid}/start?rid={}", rid()))
                .await;
            server
                .ping_ok(&format!("/ping/{uuid}/start?rid={}", rid()))
                .await;
        }
        let calls = hook.wait_for(1).await;
        assert_eq!(
            checks(&alerts(&calls[0].json(), "firing", "OverdueOverlap")),
            ["gone", "slow"]
        );

        // Deleting a check resolves its overlap at once (not at a resync).
        let r = server
            .client
            .delete(server.url(&format!("/api/v1/checks/{gone}")))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        // slow's runs outlive max_runtime: both are closed as failed, the
        // check goes down, and its overlap resolves.
        let start = Instant::now();
        let mut resolved = Vec::new();
        let mut incident = Vec::new();
        let mut seen = 1;
        while resolved.len() < 2 || incident.is_empty() {
            assert!(
                start.elapsed() < common::HANG_GUARD,
                "{:#?}",
                hook.requests()
            );
            let calls = hook.wait_for(seen + 1).await;
            for call in &calls[seen..] {
                let body = call.json();
                // Once resolved, an overlap is never listed as firing again.
                let refiring = checks(&alerts(&body, "firing", "OverdueOverlap"));
                assert!(refiring.iter().all(|c| !resolved.contains(c)), "{body}");
                resolved.extend(checks(&alerts(&body, "resolved", "OverdueOverlap")));
                incident.extend(checks(&alerts(&body, "firing", "OverdueCheck")));
            }
            seen = calls.len();
        }
        resolved.sort();
        assert_eq!(resolved, ["gone", "slow"], "each resolved once");
        assert!(incident.iter().all(|c| c == "slow"), "{incident:?}");
        let c = server.get_json(&format!("/api/v1/checks/{slow}")).await;
        assert_eq!(c["status"], "down");
        assert_eq!(c["running"], false);
        server.stop().await;
    }
);

/// Our alerts of `check` that a real Alertmanager holds as active, by alertname.
async fn active_in(am: &Alertmanager, check: &str) -> Vec<Value> {
    am.alerts("active=true")
        .await
        .into_iter()
        .filter(|a| a["labels"]["check"] == check && a["status"]["state"] == "active")
        .collect()
}

fn names(alerts: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = alerts
        .iter()
        .map(|a| a["labels"]["alertname"].as_str().unwrap_or("").to_string())
        .collect();
    v.sort();
    v
}

/// Polls a real Alertmanager until `check`'s active alerts are `want`.
async fn alertmanager_until(am: &Alertmanager, check: &str, want: &[&str]) -> Vec<Value> {
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        let active = active_in(am, check).await;
        if names(&active) == want {
            return active;
        }
        assert!(
            Instant::now() < deadline,
            "Alertmanager holds {:?} for {check}, want {want:?}\n{}",
            names(&active),
            am.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

both_backends!(
    alertmanager_holds_the_incident_and_the_overlap_apart,
    needs = [alertmanager],
    |backend| async move {
        let am = Alertmanager::start().await;
        let toml = format!(
            r#"
base_url = "{BASE_URL}"

[[receivers]]
name = "am"
type = "alertmanager"
url = "{url}"

[route]
receiver = "am"
group_by = ["check"]
group_wait = "200ms"
group_interval = "300ms"
"#,
            url = am.base,
        );
        let server = TestServer::start(backend, &toml).await;
        let etl = server
            .create_uuid(json!({"slug": "etl", "interval": "1h", "alert_on_overlap": true}))
            .await;
        let (r1, r2, r3) = (rid(), rid(), rid());
        server.ping_ok(&format!("/ping/{etl}")).await;
        for r in [&r1, &r2, &r3] {
            server.ping_ok(&format!("/ping/{etl}/start?rid={r}")).await;
        }
        // One run fails: the check is down, and two runs are still open.
        server.ping_ok(&format!("/ping/{etl}/fail?rid={r3}")).await;
        let active = alertmanager_until(&am, "etl", &["OverdueCheck", "OverdueOverlap"]).await;
        // By slug: these links reach whole chat channels, never the uuid.
        let link = format!("{BASE_URL}/checks/etl");
        for a in &active {
            assert_eq!(a["generatorURL"], link.as_str(), "{a}");
            assert_eq!(a["annotations"]["link"], link.as_str(), "{a}");
        }
        let incident = active
            .iter()
            .find(|a| a["labels"]["alertname"] == "OverdueCheck")
            .unwrap();
        assert_eq!(incident["annotations"]["status"], "down", "{incident}");

        // Another run fails: one run is left open, the overlap resolves and
        // the incident stays.
        server.ping_ok(&format!("/ping/{etl}/fail?rid={r1}")).await;
        alertmanager_until(&am, "etl", &["OverdueCheck"]).await;
        server.stop().await;
    }
);
