//! The evaluator end to end, with short real intervals, on both databases.
//!
//! Nothing here is timed: the tests wait for what must happen (with a hang
//! guard) and assert the instants stored. How soon the evaluator records a
//! due flip is measured by bench/evaluator.sh.

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::{client, write_config, Backend, ChildServer, TestDb, TestServer, HANG_GUARD};
use serde_json::{json, Value};

/// Polls `GET url` until `pred` holds; returns that body. Panics after the
/// hang guard.
async fn wait_for(http: &reqwest::Client, url: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        if pred(&v) {
            return v;
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "hang guard: still waiting on {url}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A flip as the database stored it (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
struct StoredFlip {
    at: i64,
    old_status: String,
    new_status: String,
    recorded_at: i64,
}

/// A check's flips as stored, oldest first, read on a connection of the
/// test's own.
async fn stored_flips(db: &TestDb, uuid: &str) -> Vec<StoredFlip> {
    use sqlx::Connection;
    let sql = "SELECT f.at, f.old_status, f.new_status, f.recorded_at FROM flips f \
               JOIN checks c ON c.id = f.check_id WHERE c.uuid = $1 ORDER BY f.id";
    match db.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::query_as(sql)
                .bind(uuid)
                .fetch_all(&mut c)
                .await
                .unwrap()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query_as(sql)
                .bind(uuid)
                .fetch_all(&mut c)
                .await
                .unwrap()
        }
    }
}

/// The unobserved spans as stored: (start, end), Unix ms, in order.
async fn stored_unobserved(db: &TestDb) -> Vec<(i64, i64)> {
    use sqlx::Connection;
    let sql = "SELECT start_at, end_at FROM unobserved ORDER BY start_at";
    match db.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&mut c).await.unwrap()
        }
    }
}

/// Every flip was recorded at or after the instant it happened, and before
/// `seen` (the wall clock once the test had seen them all): none was
/// recorded ahead of its time.
fn assert_recorded_when_due(flips: &[StoredFlip], seen: i64) {
    for f in flips {
        assert!(
            f.at <= f.recorded_at && f.recorded_at <= seen,
            "recorded ahead of its time (all seen by {seen}): {flips:#?}"
        );
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
    let last_success = common::instant(&v["last_success"]);
    assert_eq!(
        common::instant(&v["next_due"]) - last_success,
        chrono::Duration::seconds(1)
    );

    wait_for(&s.client, &check_url, |v| v["status"] == "late").await;
    let v = wait_for(&s.client, &check_url, |v| v["status"] == "down").await;
    assert_eq!(v["reason"], "overdue");
    let flips = wait_for(&s.client, &flips_url, |f| transitions(f).len() == 3).await;
    let seen = wall_ms();
    assert_eq!(transitions(&flips), vec!["new>up", "up>late", "late>down"]);
    // Each flip carries the instant it really happened, not when it was noticed.
    let f = flips["flips"].as_array().unwrap();
    assert_eq!(
        common::instant(&f[1]["at"]) - last_success,
        chrono::Duration::seconds(1)
    );
    assert_eq!(
        common::instant(&f[0]["at"]) - last_success,
        chrono::Duration::seconds(2)
    );
    assert_eq!(f[0]["reason"], "overdue");
    assert_recorded_when_due(&stored_flips(&s.db, &uuid).await, seen);

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
    let flips = wait_for(&s.client, &flips_url, |f| transitions(f).len() == 4).await;
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
    let flips = wait_for(&s.client, &flips_url, |f| {
        transitions(f).last().is_some_and(|t| t.ends_with(">down"))
    })
    .await;
    assert_eq!(flips["flips"][0]["reason"], "failed");
    s.ping(&format!("/ping/{uuid}")).await;
    wait_for(&s.client, &check_url, |v| v["status"] == "up").await;
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
    let v = s.get_json(&format!("/api/v1/checks/{runs_uuid}")).await;
    assert_eq!(
        (&v["status"], &v["reason"]),
        (&json!("stalled"), &json!("zero_items"))
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
    wait_for(&s.client, &url, |v| v["status"] == "stalled").await;
    let flips_url = s.url(&format!("/api/v1/checks/{time_uuid}/flips"));
    let flips = wait_for(&s.client, &flips_url, |f| transitions(f).len() == 2).await;
    assert_eq!(transitions(&flips), vec!["new>up", "up>stalled"]);
    assert_eq!(flips["flips"][0]["reason"], "zero_items", "{flips}");
    s.ping(&format!("/ping/{time_uuid}?items=3")).await;
    wait_for(&s.client, &url, |v| v["status"] == "up").await;
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
    let v = wait_for(&s.client, &url, |v| v["status"] == "down").await;
    assert_eq!(v["reason"], "run_timeout");
    let runs_url = s.url(&format!("/api/v1/checks/{uuid}/runs"));
    let runs = wait_for(&s.client, &runs_url, |r| {
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
    let events = wait_for(&s.client, &events_url, |e| {
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
    common::get_200(http, &format!("{base}/ping/{uuid}")).await;
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
    wait_for(&http, &flips_url, |f| {
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
        let last_success = common::instant(&check["last_success"]);
        server.kill9();
        // Restarted at once: the check goes down once after the restart, at the
        // instant its limit ran out (later by any unobserved part of the restart).
        let server = ChildServer::spawn(&config);
        let flips_url = format!("{}/api/v1/checks/{uuid}/flips", server.base);
        let flips = wait_for(&http, &flips_url, |f| {
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
        let down_at = common::instant(&flips["flips"][0]["at"]);
        // The restart took a moment; whatever of it was unobserved only delays the instant.
        assert!(down_at - last_success >= chrono::Duration::seconds(2));
        server.kill9();
    }
);

/// The instant `need` ms of observed time have passed since `from`: the
/// clocks pause over every unobserved span (SPEC §3.5).
fn after_observed(from: i64, need: i64, spans: &[(i64, i64)]) -> i64 {
    let (mut t, mut left) = (from, need);
    for &(start, end) in spans {
        if end <= t {
            continue;
        }
        let start = start.max(t);
        if start - t >= left {
            break;
        }
        left -= start - t;
        t = end;
    }
    t + left
}

fn wall_ms() -> i64 {
    common::sinks::unix_ms(std::time::SystemTime::now())
}

both_backends!(
    an_outage_longer_than_the_limit_is_not_an_alert_storm,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let config = child_config(&db);
        let http = client();
        let server = ChildServer::spawn(&config);
        let uuid = create_and_ping(&http, &server.base, json!({"interval": "2s"})).await;
        let check = get(&http, &format!("{}/api/v1/checks/{uuid}", server.base)).await;
        let last_success = common::instant(&check["last_success"]).timestamp_millis();
        // Use part of the 4 s limit (interval + grace), then take the whole
        // service down for longer than the limit.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        server.kill9();
        let killed = wall_ms();
        tokio::time::sleep(Duration::from_millis(6000)).await;
        let restarting = wall_ms();
        let server = ChildServer::spawn(&config);
        let flips_url = format!("{}/api/v1/checks/{uuid}/flips", server.base);
        let flips = wait_for(&http, &flips_url, |f| {
            transitions(f).last().is_some_and(|t| t.ends_with(">down"))
        })
        .await;
        let seen = wall_ms();
        assert_eq!(transitions(&flips), vec!["new>up", "up>late", "late>down"]);

        // The outage is stored as unobserved: from the last heartbeat before
        // the kill to the first after the restart.
        let spans = stored_unobserved(&db).await;
        assert!(
            spans.iter().any(|&(s, e)| s <= killed && e >= restarting),
            "no unobserved span over the outage ({killed} to {restarting}): {spans:?}"
        );
        // The clocks paused over it: the check went late and down once 2 s
        // and 4 s of observed time had passed since its last success, both
        // after the restart (the outage did not count), each flip recorded
        // once, at or after its instant.
        let stored = stored_flips(&db, &uuid).await;
        let late_at = after_observed(last_success, 2000, &spans);
        let down_at = after_observed(last_success, 4000, &spans);
        assert_eq!(
            stored.iter().map(|f| f.at).collect::<Vec<_>>()[1..],
            [late_at, down_at],
            "last success {last_success}, unobserved {spans:?}: {stored:#?}"
        );
        assert!(late_at > restarting, "{late_at} vs {restarting}");
        assert_recorded_when_due(&stored, seen);
        let check = get(&http, &format!("{}/api/v1/checks/{uuid}", server.base)).await;
        assert_eq!(check["reason"], "overdue");
        server.kill9();
    }
);

// A check pinged far more often than its deadline is away: each ping
// reschedules it, and the schedule must not keep an entry per ping.
both_backends!(
    a_check_pinged_often_keeps_the_schedule_small,
    |backend| async move {
        use overdue::clock::now_ms;
        use overdue::workers::evaluator::{Evaluator, Notice, Observed};
        use std::sync::Arc;

        let db = TestDb::new(backend).await;
        let config = overdue::config::Config::from_toml(&db.config_toml("")).unwrap();
        let store = overdue::store::open(config.database()).await.unwrap();
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

// A new leader (a failover, a restart) starts from every acknowledged ping,
// also those no fold has written into a summary yet: on PostgreSQL, pings a
// follower put in the inbox just before the old leader died. Judged without
// them, a check pinged in time went down, then up again once the fold caught
// up: a false incident.
both_backends!(
    a_new_leader_starts_from_pings_not_yet_folded,
    |backend| async move {
        use overdue::domain::check::{CheckInput, CheckSpec};
        use overdue::domain::fold::Ping;
        use overdue::domain::ping::PingKind;
        use overdue::store::CheckSource;
        use overdue::workers::evaluator::{Evaluator, Observed};
        use std::sync::Arc;

        let db = TestDb::new(backend).await;
        let config = overdue::config::Config::from_toml(&db.config_toml("")).unwrap();
        let store = overdue::store::open(config.database()).await.unwrap();
        let now = Utc::now().timestamp_millis();
        let t0 = now - 21_000;
        let spec = CheckSpec::from_input(
            serde_json::from_str::<CheckInput>(r#"{"slug":"job","interval":"10s"}"#).unwrap(),
        )
        .unwrap();
        let check = store
            .create_check(&spec, CheckSource::Api, t0 - 1_000)
            .await
            .unwrap();
        // The first ping, folded by the old leader.
        store
            .append_pings(&[Ping::new(check.id, t0, PingKind::Success)])
            .await
            .unwrap();
        common::fold_all(&store).await;
        // The second, acknowledged by a follower; nobody folded it.
        store
            .append_pings(&[Ping::new(check.id, t0 + 15_000, PingKind::Success)])
            .await
            .unwrap();
        // Down at t0 + 20 s without it, due at t0 + 25 s with it.
        let observed = Arc::new(Observed::new(Vec::new(), config.heartbeat_period));
        observed.beat(now, None);
        let (mut evaluator, _) = Evaluator::new(store.clone(), observed);
        evaluator.load(now).await.unwrap();
        evaluator.tick(now).await;
        let flips = store.list_flips(check.id, 10).await.unwrap();
        let to: Vec<&str> = flips.iter().map(|f| f.new_status.as_str()).collect();
        assert_eq!(to, ["up"], "the new leader judged without the second ping");
        let loaded = store.eval_check(check.id).await.unwrap().unwrap();
        assert_eq!(loaded.summary.last_success_at, Some(t0 + 15_000));
    }
);

both_backends!(
    a_flip_to_up_carries_the_instant_of_its_ping,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "stamped", "interval": "1h"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        // new -> up: the flip is the ping's stored instant, not the moment the
        // evaluator got to it (13:12:35.025 for a ping stored at 13:12:34.981).
        let (status, _) = s.ping(&format!("/ping/{uuid}")).await;
        assert_eq!(status, 200);
        let flips_url = s.url(&format!("/api/v1/checks/{uuid}/flips"));
        wait_for(&s.client, &flips_url, |v| {
            !v["flips"].as_array().unwrap().is_empty()
        })
        .await;
        let last_success =
            s.get_json(&format!("/api/v1/checks/{uuid}")).await["last_success"].clone();
        let flips = stored_flips(&s.db, &uuid).await;
        assert_eq!(flips.len(), 1, "{flips:?}");
        assert_eq!(
            (flips[0].old_status.as_str(), flips[0].new_status.as_str()),
            ("new", "up")
        );
        assert_eq!(
            flips[0].at,
            common::instant(&last_success).timestamp_millis(),
            "{flips:?}"
        );
        // down (failed) -> up: the recovering success's instant, after the down.
        let (status, _) = s.ping(&format!("/ping/{uuid}/fail")).await;
        assert_eq!(status, 200);
        wait_for(&s.client, &flips_url, |v| {
            v["flips"].as_array().unwrap().len() == 2
        })
        .await;
        let (status, _) = s.ping(&format!("/ping/{uuid}")).await;
        assert_eq!(status, 200);
        wait_for(&s.client, &flips_url, |v| {
            v["flips"].as_array().unwrap().len() == 3
        })
        .await;
        let last_success =
            s.get_json(&format!("/api/v1/checks/{uuid}")).await["last_success"].clone();
        let flips = stored_flips(&s.db, &uuid).await;
        assert_eq!(
            (flips[2].old_status.as_str(), flips[2].new_status.as_str()),
            ("down", "up")
        );
        assert_eq!(
            flips[2].at,
            common::instant(&last_success).timestamp_millis(),
            "{flips:?}"
        );
        assert!(flips[1].at <= flips[2].at, "in order: {flips:?}");
        // paused -> up by a resume: when it was resumed, not at the last success.
        s.post_200(&format!("/api/v1/checks/{uuid}/pause")).await;
        wait_for(&s.client, &flips_url, |v| {
            v["flips"].as_array().unwrap().len() == 4
        })
        .await;
        s.post_200(&format!("/api/v1/checks/{uuid}/resume")).await;
        wait_for(&s.client, &flips_url, |v| {
            v["flips"].as_array().unwrap().len() == 5
        })
        .await;
        let flips = stored_flips(&s.db, &uuid).await;
        assert_eq!(
            (flips[4].old_status.as_str(), flips[4].new_status.as_str()),
            ("paused", "up")
        );
        assert!(flips[4].at >= flips[3].at, "in order: {flips:?}");
        assert!(
            flips[4].at > flips[2].at,
            "not at the last success: {flips:?}"
        );
    }
);
