//! Badges: `/badge/{key}.svg|json|shields` per check and per label, with the
//! healthchecks states up / late / down and a short cache lifetime.

mod common;

use std::time::Duration;

use common::{label_badge_key, TestServer};
use serde_json::{json, Value};

/// The badge key of a check, as the v3 API advertises it in `badge_url`.
async fn badge_key(s: &TestServer, uuid: &str) -> String {
    let v3 = s.get_json(&format!("/api/v3/checks/{uuid}")).await;
    let url = v3["badge_url"].as_str().unwrap().to_string();
    let file = url.rsplit('/').next().unwrap();
    file.trim_end_matches(".svg").to_string()
}

async fn badge_json(s: &TestServer, key: &str) -> Value {
    let r = s
        .client
        .get(s.url(&format!("/badge/{key}.json")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Polls the JSON badge until it shows `want` (status changes with real time).
async fn wait_for(s: &TestServer, key: &str, want: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..100 {
        last = badge_json(s, key).await;
        if last["status"] == want {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("badge never became {want}: {last}");
}

both_backends!(check_badges_show_up_late_and_down, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(
            json!({"slug": "nightly", "name": "Nightly <b>", "interval": "1s", "grace": "1h"}),
        )
        .await;
    let uuid = c["uuid"].as_str().unwrap();
    let key = badge_key(&s, uuid).await;
    assert_eq!(key.len(), 40);

    // New counts as up, as in healthchecks.
    let j = badge_json(&s, &key).await;
    assert_eq!(
        j,
        json!({"status": "up", "total": 1, "grace": 0, "down": 0})
    );

    s.ping(&format!("/ping/{uuid}")).await;
    let j = wait_for(&s, &key, "late").await;
    assert_eq!(j["grace"], 1);

    s.ping(&format!("/ping/{uuid}/fail")).await;
    let j = wait_for(&s, &key, "down").await;
    assert_eq!(j["down"], 1);

    // SVG: the state in words and colour, the title escaped, short caching.
    let r = s
        .client
        .get(s.url(&format!("/badge/{key}.svg")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/svg+xml");
    assert_eq!(r.headers()["cache-control"], "public, max-age=30");
    let svg = r.text().await.unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.contains(">down</text>"), "{svg}");
    assert!(svg.contains("#e05d44"), "{svg}");
    assert!(svg.contains(">nightly</text>"), "{svg}");

    // Shields endpoint format.
    let r = s
        .client
        .get(s.url(&format!("/badge/{key}.shields")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-control"], "public, max-age=30");
    let j: Value = r.json().await.unwrap();
    assert_eq!(
        j,
        json!({"schemaVersion": 1, "label": "nightly", "message": "down", "color": "critical"})
    );

    // Paused counts as up. A ping folded after the pause resumes the check
    // (the ping path's rule), so pause until it sticks.
    for _ in 0..50 {
        s.post_200(&format!("/api/v1/checks/{uuid}/pause")).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        if s.get_json(&format!("/api/v1/checks/{uuid}")).await["paused"] == true {
            break;
        }
    }
    assert_eq!(badge_json(&s, &key).await["status"], "up");
});

both_backends!(label_badges_show_the_worst_check, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let a = s
        .create_check(json!({"slug": "a", "interval": "1h", "labels": {"team": "data"}}))
        .await;
    let b = s
        .create_check(json!({"slug": "b", "interval": "1h", "labels": {"team": "data"}}))
        .await;
    s.create_check(json!({"slug": "c", "interval": "1h", "labels": {"team": "web"}}))
        .await;
    let key = label_badge_key(&s, "team=data").await;
    s.ping(&format!("/ping/{}", a["uuid"].as_str().unwrap()))
        .await;
    assert_eq!(
        badge_json(&s, &key).await,
        json!({"status": "up", "total": 2, "grace": 0, "down": 0})
    );
    s.ping(&format!("/ping/{}/fail", b["uuid"].as_str().unwrap()))
        .await;
    assert_eq!(
        wait_for(&s, &key, "down").await,
        json!({"status": "down", "total": 2, "grace": 0, "down": 1})
    );
    let r = s
        .client
        .get(s.url(&format!("/badge/{key}.shields")))
        .send()
        .await
        .unwrap();
    let j: Value = r.json().await.unwrap();
    assert_eq!(j["label"], "team=data");
    // The web team's badge is unaffected.
    let web = label_badge_key(&s, "team=web").await;
    assert_eq!(badge_json(&s, &web).await["status"], "up");
});

both_backends!(
    unknown_badges_are_404_and_not_cached,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        for path in [
            "/badge/0000000000000000000000000000000000000000.svg",
            "/badge/nothex.json",
            "/badge/0000000000000000000000000000000000000000.png",
            "/badge/noextension",
        ] {
            let r = s.client.get(s.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 404, "{path}");
            assert_eq!(r.headers()["cache-control"], "no-store", "{path}");
        }
    }
);
