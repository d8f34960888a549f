//! Duplicate runs end to end (SPEC §14): two hosts that run one job without
//! the guard succeed in one slot; with `alert_on_duplicate` the check
//! carries an `OverdueDuplicateRun` alert, announced once at a real webhook
//! receiver and resolved once a later slot ran once. The status never
//! changes.

mod common;

use common::sinks::WebhookSink;
use common::{eventually, TestServer};
use serde_json::{json, Value};

/// A success ping for `slot` from a host that says it is `host`.
async fn success_from(s: &TestServer, uuid: &str, slot: &str, host: &str) {
    let r = reqwest::Client::builder()
        .user_agent(host)
        .build()
        .unwrap()
        .get(s.url(&format!("/ping/{uuid}")))
        .query(&[("slot", slot)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The current slot, as `/due` names it.
async fn current_slot(s: &TestServer, uuid: &str) -> String {
    s.get_json(&format!("/ping/{uuid}/due")).await["slot"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A slot that has just begun: the two pings of a test then both come
/// within its two seconds (runs after their slot are no duplicates).
async fn fresh_slot(s: &TestServer, uuid: &str) -> String {
    let now = current_slot(s, uuid).await;
    eventually("the next slot begins", || async {
        let next = current_slot(s, uuid).await;
        (next != now).then_some(next)
    })
    .await
}

/// The alerts named `OverdueDuplicateRun` in the requests, with their status.
fn duplicate_alerts(requests: &[common::sinks::Request]) -> Vec<Value> {
    requests
        .iter()
        .flat_map(|r| r.json()["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["labels"]["alertname"] == "OverdueDuplicateRun")
        .collect()
}

/// The slot of a check's slot list with this start.
async fn slot_view(s: &TestServer, slot: &str) -> Option<Value> {
    let v = s
        .get_json(&format!("/api/v1/checks/dup/slots?from={slot}&to={slot}"))
        .await;
    v["slots"].as_array()?.first().cloned()
}

both_backends!(
    two_hosts_in_one_slot_are_announced_once_and_resolved_after_a_clean_slot,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let route = "group_by = [\"check\", \"alertname\"]\ngroup_wait = \"100ms\"\n\
                     group_interval = \"200ms\"\nrepeat_interval = \"1h\"\n";
        let s = TestServer::start(backend, &hook.hook_toml(route)).await;
        // Slots of two seconds; a grace of an hour keeps the check up.
        let uuid = s
            .create_uuid(json!({
                "slug": "dup", "interval": "2s", "grace": "1h", "alert_on_duplicate": true
            }))
            .await;
        let first = fresh_slot(&s, &uuid).await;
        // Two hosts, one slot (each names it, as `overdue run` does).
        success_from(&s, &uuid, &first, "host-a/1.0").await;
        success_from(&s, &uuid, &first, "host-b/1.0").await;
        let firing = eventually("the duplicate-run alert is announced", || async {
            let a = duplicate_alerts(&hook.requests());
            (!a.is_empty()).then_some(a)
        })
        .await;
        let alert = &firing[0];
        assert_eq!(alert["status"], "firing", "{alert:#}");
        assert_eq!(alert["labels"]["check"], "dup");
        assert_eq!(alert["annotations"]["slot"], first.as_str(), "{alert:#}");
        let hosts = alert["annotations"]["hosts"].as_str().unwrap();
        assert!(
            hosts.contains("host-a/1.0") && hosts.contains("host-b/1.0"),
            "{hosts}"
        );
        let shown = slot_view(&s, &first).await.unwrap();
        assert_eq!(
            (&shown["successes"], &shown["duplicate"], &shown["state"]),
            (&json!(2), &json!(1), &json!("done")),
            "{shown:#}"
        );
        // A third host in the same slot: still one alert, announced once.
        success_from(&s, &uuid, &first, "host-c/1.0").await;
        // (Its duplicate count grows only if it came within the slot's own
        // two seconds; counted it always is.)
        eventually("the third run is counted", || async {
            let v = slot_view(&s, &first).await?;
            (v["successes"] == 3).then_some(())
        })
        .await;
        // A later slot with one run, then the one after it begins: the
        // clean slot has ended and the alert resolves.
        let clean = eventually("a later slot begins", || async {
            let now = current_slot(&s, &uuid).await;
            (now > first).then_some(now)
        })
        .await;
        success_from(&s, &uuid, &clean, "host-a/1.0").await;
        let after = eventually("the slot after the clean one begins", || async {
            let now = current_slot(&s, &uuid).await;
            (now > clean).then_some(now)
        })
        .await;
        success_from(&s, &uuid, &after, "host-a/1.0").await;
        eventually("the duplicate-run alert is resolved", || async {
            duplicate_alerts(&hook.requests())
                .iter()
                .any(|a| a["status"] == "resolved")
                .then_some(())
        })
        .await;
        // Nothing late can be counted after the server is gone.
        let flips = s.get_json(&format!("/api/v1/checks/{uuid}/flips")).await;
        s.stop().await;
        let all = duplicate_alerts(&hook.requests());
        let fired: Vec<&Value> = all.iter().filter(|a| a["status"] == "firing").collect();
        let resolved: Vec<&Value> = all.iter().filter(|a| a["status"] == "resolved").collect();
        // Announced once (a group's repeat would say it again: none within
        // repeat_interval), resolved once.
        assert_eq!(fired.len(), 1, "{all:#?}");
        assert_eq!(resolved.len(), 1, "{all:#?}");
        // The duplicates changed no status: the check was never down (the
        // two-second slots may make it late between the test's pings, which
        // is the staleness rule, not the duplicates), and no OverdueCheck
        // alert was sent.
        let to: Vec<&str> = flips["flips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["to"].as_str().unwrap())
            .collect();
        assert!(!to.contains(&"down"), "{flips:#}");
        assert!(
            hook.requests()
                .iter()
                .flat_map(|r| r.json()["alerts"].as_array().cloned().unwrap_or_default())
                .all(|a| a["labels"]["alertname"] == "OverdueDuplicateRun"),
            "only the duplicate-run alert was sent"
        );
    }
);

both_backends!(
    without_alert_on_duplicate_a_duplicate_is_only_counted,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let route = "group_by = [\"check\", \"alertname\"]\ngroup_wait = \"100ms\"\n";
        let s = TestServer::start(backend, &hook.hook_toml(route)).await;
        let uuid = s
            .create_uuid(json!({"slug": "dup", "interval": "2s", "grace": "1h"}))
            .await;
        let first = fresh_slot(&s, &uuid).await;
        success_from(&s, &uuid, &first, "host-a/1.0").await;
        success_from(&s, &uuid, &first, "host-b/1.0").await;
        let shown = eventually("the duplicate is counted", || async {
            let v = slot_view(&s, &first).await?;
            (v["duplicate"] == 1).then_some(v)
        })
        .await;
        assert_eq!(shown["successes"], 2);
        // The ledger applied the pings before it counted them; a duplicate
        // alert would have been opened then. None is open.
        let open = s.get_json("/api/v1/notifications").await;
        s.stop().await;
        assert!(duplicate_alerts(&hook.requests()).is_empty());
        assert!(
            open["notifications"].as_array().unwrap().is_empty(),
            "{open:#}"
        );
    }
);
