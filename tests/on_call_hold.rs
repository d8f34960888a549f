//! Holding back what depends on a failing check, and inhibit rules, end to
//! end (SPEC §6.2): the real server and a real webhook receiver; the same
//! inhibit rules and alerts are given to a real Alertmanager, which must
//! give the same answer.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::sinks::{alert_checks, Alertmanager, Request, WebhookSink};
use common::TestServer;
use serde_json::{json, Value};

/// The checks of every webhook call's alerts in this state.
fn checks(calls: &[Request], status: &str) -> Vec<String> {
    let mut v: Vec<String> = calls
        .iter()
        .flat_map(|c| alert_checks(&c.json(), status))
        .collect();
    v.sort();
    v
}

/// Polls a check's `inhibited_by` until it equals `want`.
async fn inhibited_by(server: &TestServer, slug: &str, want: &[&str]) {
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        let v = server.get_json(&format!("/api/v1/checks/{slug}")).await;
        if v["inhibited_by"] == json!(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{slug}: inhibited_by {} (want {want:?})",
            v["inhibited_by"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the sink has `n` calls, then that no more come for `settle`.
async fn exactly(hook: &WebhookSink, n: usize, settle: Duration) -> Vec<Request> {
    hook.wait_for(n).await;
    tokio::time::sleep(settle).await;
    let calls = hook.requests();
    assert_eq!(
        calls.len(),
        n,
        "{:#?}",
        calls.iter().map(Request::json).collect::<Vec<_>>()
    );
    calls
}

/// A receiver "hook" that gets every alert, in a group per check, then
/// `extra` config text.
fn hook_config(hook: &WebhookSink, extra: &str) -> String {
    hook.hook_toml(&format!(
        r#"group_by = ["check"]
group_wait = "400ms"
group_interval = "400ms"
repeat_interval = "1h"
{extra}"#
    ))
}

both_backends!(
    a_failing_parent_holds_its_children_until_it_recovers,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &hook_config(&hook, "")).await;
        let db = server
            .create_uuid(json!({"slug": "db", "interval": "1h"}))
            .await;
        let mut children = Vec::new();
        for i in 0..10 {
            let slug = format!("job-{i}");
            let uuid = server
                .create_uuid(json!({"slug": slug, "interval": "1h", "depends_on": ["db"]}))
                .await;
            children.push((slug, uuid));
        }
        // The parent and its ten children go down together, the children
        // first: each in a group of its own, and yet one notification,
        // naming the parent only (holding is decided at each group's flush,
        // when the parent is down).
        for (_, uuid) in &children {
            server.ping_ok(&format!("/ping/{uuid}/fail")).await;
        }
        server.ping_ok(&format!("/ping/{db}/fail")).await;
        let calls = exactly(&hook, 1, Duration::from_secs(2)).await;
        assert_eq!(checks(&calls, "firing"), ["db"]);
        for (slug, _) in &children {
            inhibited_by(&server, slug, &["db"]).await;
        }
        inhibited_by(&server, "db", &[]).await;

        // The parent recovers while the children still fail: its resolve,
        // and each child announced after group_wait.
        server.ping_ok(&format!("/ping/{db}")).await;
        let calls = exactly(&hook, 12, Duration::from_secs(2)).await;
        let want: Vec<String> = children.iter().map(|(s, _)| s.clone()).collect();
        assert_eq!(checks(&calls[1..], "firing"), want);
        assert_eq!(checks(&calls[1..], "resolved"), ["db"]);
        for (slug, _) in &children {
            inhibited_by(&server, slug, &[]).await;
        }

        // The parent fails again: announced; the children, announced
        // before it failed, are held from now on but their resolve is
        // never held back.
        server.ping_ok(&format!("/ping/{db}/fail")).await;
        let calls = exactly(&hook, 13, Duration::from_secs(1)).await;
        assert_eq!(checks(&calls[12..], "firing"), ["db"]);
        let (slug0, uuid0) = &children[0];
        server.ping_ok(&format!("/ping/{uuid0}")).await;
        let calls = exactly(&hook, 14, Duration::from_secs(1)).await;
        assert_eq!(checks(&calls[13..], "resolved"), vec![slug0.to_string()]);
        server.stop().await;
    }
);

/// Alertmanager's own example, extended: critical alerts inhibit warnings in
/// the same cluster; an `infra` alert inhibits every other team's alert in
/// its cluster, but not another `infra` alert (it matches both sides).
const RULES_TOML: &str = r#"
[[inhibit_rules]]
source_matchers = ['severity="critical"']
target_matchers = ['severity="warning"']
equal = ["cluster"]

[[inhibit_rules]]
source_matchers = ['team="infra"']
target_matchers = ['team=~".+"']
equal = ["cluster"]
"#;

const RULES_YAML: &str = r#"
route:
  receiver: blackhole
receivers:
  - name: blackhole
inhibit_rules:
  - source_matchers: ['severity="critical"']
    target_matchers: ['severity="warning"']
    equal: [cluster]
  - source_matchers: ['team="infra"']
    target_matchers: ['team=~".+"']
    equal: [cluster]
"#;

/// The checks: slug and labels.
fn fleet() -> Vec<(&'static str, Value)> {
    vec![
        (
            "db-eu",
            json!({"severity": "critical", "cluster": "eu", "team": "data"}),
        ),
        (
            "web-eu",
            json!({"severity": "warning", "cluster": "eu", "team": "web"}),
        ),
        (
            "web-us",
            json!({"severity": "warning", "cluster": "us", "team": "web"}),
        ),
        (
            "cache-us",
            json!({"severity": "info", "cluster": "us", "team": "web"}),
        ),
        (
            "net-us",
            json!({"severity": "critical", "cluster": "us", "team": "infra"}),
        ),
        (
            "dns-us",
            json!({"severity": "info", "cluster": "us", "team": "infra"}),
        ),
        ("batch-xx", json!({"severity": "warning", "team": "data"})),
        ("lone", json!({})),
    ]
}

both_backends!(
    inhibit_rules_give_the_same_answer_as_alertmanager,
    needs = [alertmanager],
    |backend| async move {
        let am = Alertmanager::start_with(RULES_YAML).await;
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &hook_config(&hook, RULES_TOML)).await;
        let mut uuids = Vec::new();
        for (slug, labels) in fleet() {
            uuids.push(
                server
                    .create_uuid(
                        json!({"slug": slug, "name": slug, "interval": "1h", "labels": labels}),
                    )
                    .await,
            );
        }
        for uuid in &uuids {
            server.ping_ok(&format!("/ping/{uuid}/fail")).await;
        }
        // What overdue announced, and what it holds.
        let announced_n = fleet().len() - 3;
        let calls = exactly(&hook, announced_n, Duration::from_secs(2)).await;
        let announced: BTreeSet<String> = checks(&calls, "firing").into_iter().collect();
        let mut ours = BTreeSet::new();
        for (slug, _) in fleet() {
            let v = server.get_json(&format!("/api/v1/checks/{slug}")).await;
            let by = v["inhibited_by"].as_array().unwrap();
            if !by.is_empty() {
                ours.insert(slug.to_string());
                assert!(!announced.contains(slug), "{slug} held and announced");
            }
        }
        // The same alerts, with the labels overdue gives them, to Alertmanager.
        let alerts: Vec<Value> = fleet()
            .into_iter()
            .map(|(slug, labels)| {
                let mut l = labels.as_object().unwrap().clone();
                l.insert("alertname".into(), json!("OverdueCheck"));
                l.insert("check".into(), json!(slug));
                l.insert("name".into(), json!(slug));
                l.insert("status".into(), json!("down"));
                l.insert("reason".into(), json!("failure"));
                json!({"labels": l})
            })
            .collect();
        let r = common::client()
            .post(format!("{}/api/v2/alerts", am.base))
            .json(&alerts)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        let deadline = Instant::now() + common::HANG_GUARD;
        let theirs = loop {
            let listed = am.alerts("active=true&inhibited=true").await;
            let theirs: BTreeSet<String> = listed
                .iter()
                .filter(|a| !a["status"]["inhibitedBy"].as_array().unwrap().is_empty())
                .map(|a| a["labels"]["check"].as_str().unwrap().to_string())
                .collect();
            if listed.len() == fleet().len() && theirs == ours {
                break theirs;
            }
            if Instant::now() > deadline {
                break theirs;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            ours, theirs,
            "overdue holds {ours:?}, Alertmanager inhibits {theirs:?}"
        );
        // And the answer itself, so agreeing on nothing cannot pass.
        let want: BTreeSet<String> = ["web-eu", "web-us", "cache-us"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(ours, want);
        // Both infra alerts fire: neither inhibits the other.
        assert!(announced.contains("net-us") && announced.contains("dns-us"));
        server.stop().await;
    }
);
