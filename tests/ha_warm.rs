//! A warm follower (SPEC §12, failover at scale; docs/ha.md): a replica
//! that follows holds every check anyway and keeps it current from what the
//! other replicas announce, so that it starts its term from memory instead
//! of reading every check. Real processes on a real PostgreSQL database.
//!
//! What the follower must not get wrong once it leads: a check edited,
//! paused, or failed (and announced) by the old leader after the follower
//! read it, and pings that the old leader stored but never folded (it was
//! frozen): each would otherwise be judged from the follower's stale copy.
//! The old leader, woken, goes on as a warm follower. Nothing here is
//! timed; the speed of a takeover is bench/failover.sh's.

mod common;

use std::time::{Duration, Instant};

use common::lease;
use common::sinks::WebhookSink;
use common::{client, write_config, Backend, ChildServer, TestDb};
use serde_json::json;

fn config(db: &TestDb, hook: &WebhookSink) -> String {
    db.config_toml(&format!(
        r#"
heartbeat_period = "200ms"
lease_ttl = "3s"
{hook}"#,
        hook = hook.per_check_toml("500ms", "100ms", "200ms"),
    ))
}

async fn ping(http: &reqwest::Client, base: &str, path: &str) {
    let r = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
}

/// Waits until `query` counts at least one row.
async fn wait_count(db: &TestDb, query: &str) {
    let start = Instant::now();
    while db.count(query).await == 0 {
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "nothing for {query} before the hang guard"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn flips(slug: &str, status: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM flips f JOIN checks c ON c.id = f.check_id \
         WHERE c.slug = '{slug}' AND f.new_status = '{status}'"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn a_warm_follower_takes_over_with_what_changed_while_it_followed() {
    common::need_postgres();
    let db = TestDb::new(Backend::Postgres).await;
    let hook = WebhookSink::start().await;
    let path = write_config(db.dir.path(), &config(&db, &hook));
    lease::migrate_and_log_the_lease(&db.url, &path).await;
    let a = ChildServer::spawn(&path);
    let (first, _) = lease::wait_for_leader(&db.url, None).await;
    let http = client();
    // Four checks, up, before the follower starts: what happens to them
    // after it read them reaches it only as announced changes.
    let edited =
        common::create_on(&http, &a.base, json!({"slug": "edited", "interval": "1h"})).await;
    let paused =
        common::create_on(&http, &a.base, json!({"slug": "paused", "interval": "1s"})).await;
    let failed =
        common::create_on(&http, &a.base, json!({"slug": "failed", "interval": "1h"})).await;
    let kept = common::create_on(&http, &a.base, json!({"slug": "kept", "interval": "1s"})).await;
    for uuid in [&edited, &paused, &failed, &kept] {
        ping(&http, &a.base, &format!("/ping/{uuid}")).await;
    }
    for slug in ["edited", "paused", "failed", "kept"] {
        wait_count(&db, &flips(slug, "up")).await;
    }
    let b = ChildServer::spawn(&path);
    let (leader, follower) = if a.replica() == first { (a, b) } else { (b, a) };
    follower
        .wait_log("evaluator holds every check while following")
        .await;

    // After the follower read every check: an hour's interval made a
    // second's (down once the new leader judges it); a check paused (stays
    // paused); one failed (the old leader records it down and announces it,
    // once); one pinged every 250 ms throughout, also while the old leader
    // is frozen, when its pings wait in the inbox (never late).
    let base = follower.base.clone();
    ping(&http, &base, &format!("/ping/{paused}")).await;
    ping(&http, &base, &format!("/ping/{failed}/fail")).await;
    let stop_pinging = tokio_util::sync::CancellationToken::new();
    let pinger = {
        let (http, base, stop) = (http.clone(), base.clone(), stop_pinging.clone());
        let url = format!("{base}/ping/{kept}");
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let r = http.get(&url).send().await.unwrap();
                assert_eq!(r.status(), 200);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let r = http
        .patch(format!("{base}/api/v1/checks/edited"))
        .json(&json!({"interval": "1s"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .post(format!("{base}/api/v1/checks/paused/pause"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // What the old leader recorded and sent before it stops.
    wait_count(&db, &flips("failed", "down")).await;
    hook.wait_for(1).await;

    // The leader freezes (no fold, no renewal); the follower takes over.
    leader.signal("STOP");
    let (holder, _) = lease::wait_for_leader(&db.url, Some(&first)).await;
    assert_eq!(holder, follower.replica());
    follower
        .wait_log("evaluator loaded (held while following")
        .await;
    // The old leader wakes: its term ran out on its own clock, so it steps
    // down, and as a follower it reads every check and keeps them (it led
    // from its start, so it heard its listener come up while leading).
    // What it logged before it wakes is left out: a replica that started
    // as a follower for a moment may have said it already then.
    let woke_at = leader.log().len();
    leader.signal("CONT");
    // The edited check goes down by its new interval, judged by the new
    // leader; the kept one is pinged a while longer.
    wait_count(&db, &flips("edited", "down")).await;
    // The failed check recovers under the new leader: it knew it was down.
    ping(&http, &base, &format!("/ping/{failed}")).await;
    let recovered = format!("{} AND f.old_status = 'down'", flips("failed", "up"));
    wait_count(&db, &recovered).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_pinging.cancel();
    pinger.await.unwrap();

    leader
        .wait_log_after(woke_at, "evaluator holds every check while following")
        .await;
    let log = follower.log();
    // Neither late nor down, ever.
    assert_eq!(
        db.count(
            "SELECT COUNT(*) FROM flips f JOIN checks c ON c.id = f.check_id \
             WHERE c.slug = 'kept' AND f.new_status <> 'up'"
        )
        .await,
        0,
        "{log}"
    );
    assert_eq!(db.count(&flips("paused", "down")).await, 0, "{log}");
    assert_eq!(db.count(&flips("failed", "down")).await, 1, "{log}");
    assert_eq!(db.count(&flips("failed", "up")).await, 2, "{log}");
    assert_eq!(db.count(&flips("edited", "down")).await, 1, "{log}");
    assert_eq!(
        db.count(
            "SELECT COUNT(*) FROM check_status st JOIN checks c ON c.id = st.check_id \
             WHERE c.slug = 'paused' AND st.status = 'paused'"
        )
        .await,
        1
    );
    // The failure was announced once: one notification (an attempt the old
    // leader had in flight as it froze may be sent again by the new one,
    // with the same key), none of the new leader's own.
    let keys: std::collections::BTreeSet<String> = hook
        .requests()
        .into_iter()
        .filter(|r| {
            r.json()["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["labels"]["check"] == "failed" && a["status"] == "firing")
        })
        .map(|r| r.header("idempotency-key").unwrap().to_string())
        .collect();
    assert_eq!(keys.len(), 1, "{:#?}", hook.requests());
}
