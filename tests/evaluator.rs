//! The evaluator end to end, with short real intervals, on both databases.

mod common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{client, write_config, ChildServer, TestDb, TestServer};
use serde_json::{json, Value};

/// Polls `GET path` until `pred` holds or `limit` passes; returns the last body.
async fn wait_for(
    http: &reqwest::Client,
    url: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let v: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        if pred(&v) {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting on {url}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn transitions(flips: &Value) -> Vec<String> {
    let mut t: Vec<String> = flips["flips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            format!(
                "{}>{}",
                f["from"].as_str().unwrap(),
                f["to"].as_str().unwrap()
            )
        })
        .collect();
    t.reverse();
    t
}

fn instant(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

both_backends!(late_then_down_then_recovered, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "fast", "interval": "1s"}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let check_url = s.url(&format!("/api/v1/checks/{uuid}"));
    let flips_url = s.url(&format!("/api/v1/checks/{uuid}/flips"));
    assert_eq!(c["status"], "new");

    s.ping(&format!("/ping/{uuid}")).await;
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(v["status"], "up");
    let last_success = instant(&v["last_success"]);
    assert_eq!(
        instant(&v["next_due"]) - last_success,
        chrono::Duration::seconds(1)
    );

    let limit = Duration::from_secs(10);
    wait_for(&s.client, &check_url, limit, |v| v["status"] == "late").await;
    let v = wait_for(&s.client, &check_url, limit, |v| v["status"] == "down").await;
    assert_eq!(v["reason"], "overdue");
    let flips = wait_for(&s.client, &flips_url, limit, |f| transitions(f).len() == 3).await;
    assert_eq!(transitions(&flips), vec!["new>up", "up>late", "late>down"]);
    // Each flip carries the instant it really happened, not when it was noticed.
    let f = flips["flips"].as_array().unwrap();
    assert_eq!(
        instant(&f[1]["at"]) - last_success,
        chrono::Duration::seconds(1)
    );
    assert_eq!(
        instant(&f[0]["at"]) - last_success,
        chrono::Duration::seconds(2)
    );
    assert_eq!(f[0]["reason"], "overdue");

    let incidents = s
        .get_json(&format!("/api/v1/checks/{uuid}/incidents"))
        .await;
    let list = incidents["incidents"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["resolved"], Value::Null);

    s.ping(&format!("/ping/{uuid}")).await;
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{uuid}")).await["status"],
        "up"
    );
    let flips = wait_for(&s.client, &flips_url, limit, |f| transitions(f).len() == 4).await;
    assert_eq!(transitions(&flips)[3], "down>up");
    let incidents = s
        .get_json(&format!("/api/v1/checks/{uuid}/incidents"))
        .await;
    assert!(incidents["incidents"][0]["resolved"].is_string());
    s.stop().await;
});

both_backends!(failures_go_down_at_once, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"interval": "1h", "failure_threshold": 2}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let check_url = s.url(&format!("/api/v1/checks/{uuid}"));
    s.ping(&format!("/ping/{uuid}/fail")).await;
    // One failure is below the threshold: judged by its schedule, so up.
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{uuid}")).await["status"],
        "up"
    );
    s.ping(&format!("/ping/{uuid}/1")).await;
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(
        (v["status"].as_str(), v["reason"].as_str()),
        (Some("down"), Some("failed"))
    );
    let flips_url = s.url(&format!("/api/v1/checks/{uuid}/flips"));
    // Both failures may reach the evaluator in one fold, so the flip into
    // down may come from new or from up.
    let flips = wait_for(&s.client, &flips_url, Duration::from_secs(10), |f| {
        transitions(f).last().is_some_and(|t| t.ends_with(">down"))
    })
    .await;
    assert_eq!(flips["flips"][0]["reason"], "failed");
    s.ping(&format!("/ping/{uuid}")).await;
    wait_for(&s.client, &check_url, Duration::from_secs(5), |v| {
        v["status"] == "up"
    })
    .await;
    s.stop().await;
});

both_backends!(zero_items_stall_and_recover, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let by_runs = s
        .create_check(json!({"interval": "1h", "zero_items_runs": 2}))
        .await;
    let by_time = s
        .create_check(json!({"interval": "1h", "zero_items_after": "1s"}))
        .await;
    let runs_uuid = by_runs["uuid"].as_str().unwrap().to_string();
    let time_uuid = by_time["uuid"].as_str().unwrap().to_string();

    s.ping(&format!("/ping/{runs_uuid}?items=5")).await;
    s.ping(&format!("/ping/{runs_uuid}?items=0")).await;
    s.ping(&format!("/ping/{runs_uuid}")).await; // no items: neither extends nor breaks
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{runs_uuid}")).await["status"],
        "up"
    );
    s.ping(&format!("/ping/{runs_uuid}?items=0")).await;
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{runs_uuid}")).await["status"],
        "stalled"
    );
    s.ping(&format!("/ping/{runs_uuid}?items=1")).await;
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{runs_uuid}")).await["status"],
        "up"
    );

    s.ping(&format!("/ping/{time_uuid}?items=0")).await;
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{time_uuid}")).await["status"],
        "up"
    );
    let url = s.url(&format!("/api/v1/checks/{time_uuid}"));
    wait_for(&s.client, &url, Duration::from_secs(10), |v| {
        v["status"] == "stalled"
    })
    .await;
    let flips_url = s.url(&format!("/api/v1/checks/{time_uuid}/flips"));
    let flips = wait_for(&s.client, &flips_url, Duration::from_secs(10), |f| {
        transitions(f).len() == 2
    })
    .await;
    assert_eq!(transitions(&flips), vec!["new>up", "up>stalled"]);
    s.ping(&format!("/ping/{time_uuid}?items=3")).await;
    wait_for(&s.client, &url, Duration::from_secs(5), |v| {
        v["status"] == "up"
    })
    .await;
    s.stop().await;
});

both_backends!(a_run_that_never_finishes_times_out, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"interval": "1h", "max_runtime": "1s"}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    s.ping(&format!("/ping/{uuid}")).await;
    s.ping(&format!("/ping/{uuid}/start")).await;
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(
        (v["status"].as_str(), v["running"].as_bool()),
        (Some("up"), Some(true))
    );

    let url = s.url(&format!("/api/v1/checks/{uuid}"));
    let v = wait_for(&s.client, &url, Duration::from_secs(10), |v| {
        v["status"] == "down"
    })
    .await;
    assert_eq!(v["reason"], "run_timeout");
    let runs_url = s.url(&format!("/api/v1/checks/{uuid}/runs"));
    let runs = wait_for(&s.client, &runs_url, Duration::from_secs(10), |r| {
        r["runs"][0]["outcome"] == "failed"
    })
    .await;
    assert_eq!(runs["runs"][0]["reason"], "exceeded max_runtime");
    assert_eq!(runs["runs"][0]["duration"], 1.0);
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(v["running"], false);
    // A late finish closes nothing; the next success recovers the check.
    s.ping(&format!("/ping/{uuid}")).await;
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{uuid}")).await["status"],
        "up"
    );
    s.stop().await;
});

both_backends!(quiet_hours_are_reported, |backend| async move {
    let s = TestServer::start(backend, "").await;
    // A window that is never open now: from one hour ahead, for one minute.
    let now = Utc::now();
    let start = now + chrono::Duration::hours(1);
    let end = start + chrono::Duration::minutes(1);
    let c = s
        .create_check(json!({"interval": "1s", "active_hours": [{
            "start": start.format("%H:%M").to_string(), "end": end.format("%H:%M").to_string()}]}))
        .await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    s.ping(&format!("/ping/{uuid}")).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(v["quiet"], true);
    assert_eq!(
        v["status"], "up",
        "never late or down because of quiet hours"
    );
    let events_url = s.url(&format!("/api/v1/checks/{uuid}/events"));
    let events = wait_for(&s.client, &events_url, Duration::from_secs(5), |e| {
        !e["events"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(events["events"][0]["kind"], "skipped: quiet-hours");
    let flips = s.get_json(&format!("/api/v1/checks/{uuid}/flips")).await;
    assert_eq!(transitions(&flips), vec!["new>up"]);
    s.stop().await;
});

fn child_config(db: &TestDb) -> std::path::PathBuf {
    write_config(
        db.dir.path(),
        &db.config_toml("heartbeat_period = \"200ms\"\nlease_ttl = \"1s\""),
    )
}

/// Creates a check on a child server, pings it once, and returns its uuid.
async fn create_and_ping(http: &reqwest::Client, base: &str, body: Value) -> String {
    let c: Value = http
        .post(format!("{base}/api/v1/checks"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let r = http
        .get(format!("{base}/ping/{uuid}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    uuid
}

async fn get(http: &reqwest::Client, url: &str) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

both_backends!(a_restart_records_nothing_twice, |backend| async move {
    let db = TestDb::new(backend).await;
    let config = child_config(&db);
    let http = client();
    let server = ChildServer::spawn(&config);
    let uuid = create_and_ping(&http, &server.base, json!({"interval": "1s"})).await;
    let flips_url = format!("{}/api/v1/checks/{uuid}/flips", server.base);
    wait_for(&http, &flips_url, Duration::from_secs(10), |f| {
        transitions(f).last().map(String::as_str) == Some("late>down")
    })
    .await;
    server.kill9();

    // Restarted quickly (within twice the heartbeat period there is no
    // unobserved span to speak of): the check is still down, and its flips
    // and incidents are exactly what they were.
    let server = ChildServer::spawn(&config);
    let check = get(&http, &format!("{}/api/v1/checks/{uuid}", server.base)).await;
    assert_eq!(check["status"], "down");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let flips = get(
        &http,
        &format!("{}/api/v1/checks/{uuid}/flips", server.base),
    )
    .await;
    assert_eq!(transitions(&flips), vec!["new>up", "up>late", "late>down"]);
    let incidents = get(
        &http,
        &format!("{}/api/v1/checks/{uuid}/incidents", server.base),
    )
    .await;
    assert_eq!(incidents["incidents"].as_array().unwrap().len(), 1);
    server.kill9();
});

both_backends!(
    a_quick_restart_still_catches_the_check,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let config = child_config(&db);
        let http = client();
        let server = ChildServer::spawn(&config);
        let uuid = create_and_ping(&http, &server.base, json!({"interval": "1s"})).await;
        let check = get(&http, &format!("{}/api/v1/checks/{uuid}", server.base)).await;
        let last_success = instant(&check["last_success"]);
        server.kill9();
        // Restarted at once: the check goes down once after the restart, at the
        // instant its limit ran out (later by any unobserved part of the restart).
        let server = ChildServer::spawn(&config);
        let flips_url = format!("{}/api/v1/checks/{uuid}/flips", server.base);
        let flips = wait_for(&http, &flips_url, Duration::from_secs(15), |f| {
            transitions(f).last().map(String::as_str) == Some("late>down")
        })
        .await;
        // Killed at once, the first process may not have recorded `up` yet
        // (on PostgreSQL it first takes the leader lease); either way the
        // check goes down exactly once.
        let seen = transitions(&flips);
        assert!(
            seen == ["new>up", "up>late", "late>down"] || seen == ["new>late", "late>down"],
            "{seen:?}"
        );
        let down_at = instant(&flips["flips"][0]["at"]);
        // The restart took a moment; whatever of it was unobserved only delays the instant.
        assert!(down_at - last_success >= chrono::Duration::seconds(2));
        server.kill9();
    }
);

both_backends!(
    an_outage_longer_than_the_limit_is_not_an_alert_storm,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let config = child_config(&db);
        let http = client();
        let server = ChildServer::spawn(&config);
        let uuid = create_and_ping(&http, &server.base, json!({"interval": "2s"})).await;
        let pinged = Instant::now();
        // Use part of the 4 s limit (interval + grace), then take the whole service down.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        server.kill9();
        let used = pinged.elapsed();
        tokio::time::sleep(Duration::from_millis(6000)).await; // longer than the limit

        let server = ChildServer::spawn(&config);
        let restarted = Instant::now();
        let check_url = format!("{}/api/v1/checks/{uuid}", server.base);
        let check = get(&http, &check_url).await;
        assert_ne!(
            check["status"], "down",
            "the outage must not count: {check}"
        );
        let down = wait_for(&http, &check_url, Duration::from_secs(15), |v| {
            v["status"] == "down"
        })
        .await;
        let after_restart = restarted.elapsed();
        assert_eq!(down["reason"], "overdue");
        // It goes down once the rest of its limit has passed: 4 s minus what was
        // used before the outage (the outage starts at the last heartbeat, up to
        // one heartbeat period before the kill, so allow that much earlier).
        let rest = Duration::from_secs(4) - used;
        assert!(
            after_restart + Duration::from_millis(250) >= rest - Duration::from_millis(200),
            "down {after_restart:?} after restart, expected about {rest:?}"
        );
        assert!(
            after_restart <= rest + Duration::from_secs(3),
            "{after_restart:?} vs {rest:?}"
        );
        // The API evaluates live; the evaluator records the flip a moment later.
        let flips_url = format!("{}/api/v1/checks/{uuid}/flips", server.base);
        let flips = wait_for(&http, &flips_url, Duration::from_secs(5), |f| {
            transitions(f).len() >= 3
        })
        .await;
        assert_eq!(transitions(&flips), vec!["new>up", "up>late", "late>down"]);
        server.kill9();
    }
);

// A check pinged far more often than its deadline is away: each ping
// reschedules it, and the schedule must not keep an entry per ping.
both_backends!(
    a_check_pinged_often_keeps_the_schedule_small,
    |backend| async move {
        use overdue::clock::now_ms;
        use overdue::evaluator::{Evaluator, Notice, Observed};
        use std::sync::Arc;

        let db = TestDb::new(backend).await;
        let config = overdue::config::Config::from_toml(&db.config_toml("")).unwrap();
        let store = overdue::store::open(&config).await.unwrap();
        let now = now_ms();
        let (_, touched) = common::daily_check_pinged(&store, now).await;
        assert_eq!(touched.len(), 1, "the fold touched the check");
        let observed = Arc::new(Observed::new(Vec::new(), config.heartbeat_period));
        observed.beat(now, None);
        let (mut evaluator, _handle) = Evaluator::new(store.clone(), observed.clone());
        evaluator.load(now).await.unwrap();
        evaluator.tick(now).await;
        let deadline = evaluator.next_wake().expect("the check has a deadline");
        assert!(deadline > now);
        // What 20,000 folds of one ping each tell the evaluator: each makes
        // the check due now, and its evaluation schedules the next deadline,
        // a day away.
        for _ in 0..20_000 {
            evaluator
                .handle(Notice::Touched(touched.clone()), now)
                .await;
            evaluator.tick(now).await;
        }
        assert!(
            evaluator.scheduled() <= 4_097,
            "the schedule holds {} entries for one check",
            evaluator.scheduled()
        );
        // The check's own deadline is kept: stale entries share its time, so
        // look past it. At the deadline the check is evaluated and scheduled
        // again; had the rebuild kept only stale entries, none would be left.
        assert_eq!(evaluator.next_wake(), Some(deadline));
        observed.beat(deadline, None);
        evaluator.tick(deadline).await;
        let next = evaluator.next_wake();
        assert!(
            next.is_some_and(|n| n > deadline),
            "after its deadline the check is no longer scheduled: {next:?}"
        );
    }
);
