//! Several replicas on one PostgreSQL database (SPEC §8): real processes, a
//! real database, a real webhook receiver. The leader is killed, frozen and
//! stopped; incidents are still announced and resolved exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::sinks::{Behaviour, Request, WebhookSink};
use common::{client, postgres_available, write_config, Backend, ChildServer, TestDb};
use rand::Rng;
use serde_json::{json, Value};
use sqlx::Connection;

const WAIT: Duration = Duration::from_secs(30);

/// The current lease holder and token, if the lease runs.
async fn leader(db: &TestDb) -> Option<(String, i64)> {
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::query_as(
        "SELECT holder, token FROM leases WHERE name = 'leader' \
         AND expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint",
    )
    .fetch_optional(&mut c)
    .await
    .unwrap()
}

/// Waits until some replica holds the lease (other than `not`); returns it
/// and how long that took.
async fn wait_for_leader(db: &TestDb, not: Option<&str>) -> ((String, i64), Duration) {
    let start = Instant::now();
    loop {
        if let Some(l) = leader(db).await {
            if Some(l.0.as_str()) != not {
                return (l, start.elapsed());
            }
        }
        assert!(start.elapsed() < WAIT, "no new leader within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn config(db: &TestDb, hook: &WebhookSink, ttl: &str, extra: &str) -> String {
    db.config_toml(&format!(
        r#"
heartbeat_period = "200ms"
lease_ttl = "{ttl}"

[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"
timeout = "500ms"

[route]
receiver = "hook"
group_by = ["check"]
group_wait = "200ms"
group_interval = "300ms"

[notifications]
max_attempts = 20
retry_base = "100ms"
retry_max = "1s"
{extra}
"#,
        url = hook.url("/hook"),
    ))
}

/// (check, incident start, status) of every alert in every distinct
/// notification, with the number of distinct notifications that listed it.
fn announcements(requests: &[Request]) -> BTreeMap<(String, String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for r in requests {
        let key = r.header("idempotency-key").unwrap().to_string();
        let body = r.json();
        for a in body["alerts"].as_array().unwrap() {
            out.entry((
                a["labels"]["check"].as_str().unwrap().to_string(),
                a["startsAt"].as_str().unwrap().to_string(),
                a["status"].as_str().unwrap().to_string(),
            ))
            .or_default()
            .insert(key.clone());
        }
    }
    out
}

async fn create(http: &reqwest::Client, base: &str, slug: &str) -> String {
    let r = http
        .post(format!("{base}/api/v1/checks"))
        .json(&json!({"slug": slug, "interval": "1h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    v["uuid"].as_str().unwrap().to_string()
}

async fn ping(http: &reqwest::Client, base: &str, path: &str) {
    let r = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
}

/// Waits until the receiver has heard `n` distinct announcements matching.
async fn wait_announced(hook: &WebhookSink, check: &str, status: &str, n: usize) {
    let start = Instant::now();
    loop {
        let got = announcements(&hook.requests())
            .keys()
            .filter(|(c, _, s)| c == check && s == status)
            .count();
        if got >= n {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "{check}: {n} {status} announcement(s) expected, {got} seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_announce_every_incident_once_across_leader_kills() {
    if !postgres_available("three_replicas…") {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let hook = WebhookSink::start().await;
    let path = write_config(db.dir.path(), &config(&db, &hook, "1s", ""));
    let mut replicas: Vec<ChildServer> = (0..3).map(|_| ChildServer::spawn(&path)).collect();
    let http = client();
    let checks: Vec<(String, String)> = {
        let mut v = Vec::new();
        for i in 0..4 {
            let slug = format!("job-{i}");
            let uuid = create(&http, &replicas[i % 3].base, &slug).await;
            v.push((slug, uuid));
        }
        v
    };
    let mut rng = rand::thread_rng();
    let mut kills = 0;
    let mut failovers = Vec::new();
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();

    for cycle in 0..10 {
        let (slug, uuid) = &checks[cycle % checks.len()];
        // Fail the check through a random replica, kill the leader at a
        // random moment, wait for the announcement; then recover it the same
        // way and wait for the resolution.
        for (ping_path, status) in [
            (format!("/ping/{uuid}/fail"), "firing"),
            (format!("/ping/{uuid}"), "resolved"),
        ] {
            let via = rng.gen_range(0..replicas.len());
            ping(&http, &replicas[via].base, &ping_path).await;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..700))).await;
            let ((holder, _), _) = wait_for_leader(&db, None).await;
            let at = replicas
                .iter()
                .position(|r| r.replica() == holder)
                .expect("the leader is one of ours");
            let killed = Instant::now();
            replicas.remove(at).kill9();
            kills += 1;
            replicas.push(ChildServer::spawn(&path));
            let (_, took) = wait_for_leader(&db, Some(&holder)).await;
            failovers.push(killed.elapsed().max(took));
            let n = expected.entry(format!("{slug}/{status}")).or_default();
            *n += 1;
            wait_announced(&hook, slug, status, *n).await;
        }
    }
    assert_eq!(kills, 20);
    // A new leader within the TTL (1 s) plus one second, every time.
    let worst = failovers.iter().max().unwrap();
    assert!(*worst <= Duration::from_secs(2), "failovers: {failovers:?}");

    // Let any last resend land, then count.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = announcements(&hook.requests());
    for ((check, starts, status), keys) in &seen {
        assert_eq!(
            keys.len(),
            1,
            "{check} (incident of {starts}) {status} was enqueued {} times: {keys:?}",
            keys.len()
        );
    }
    for (what, n) in &expected {
        let (check, status) = what.split_once('/').unwrap();
        let got = seen
            .keys()
            .filter(|(c, _, s)| c == check && s == status)
            .count();
        assert_eq!(
            got, *n,
            "{what}: every incident announced and resolved once"
        );
    }
    // The database agrees: one notification per announcement, all delivered.
    let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT id, state FROM notifications ORDER BY created_at")
            .fetch_all(&mut c)
            .await
            .unwrap();
    assert_eq!(rows.len(), seen.len(), "{rows:?}");
    assert!(rows.iter().all(|(_, s)| s == "delivered"), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_starts_no_delivery_after_losing_its_lease() {
    if !postgres_available("a_frozen_leader…") {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let hook = WebhookSink::start().await;
    // The receiver keeps asking to come back later, so a notification stays
    // due while the leader is frozen and after it wakes.
    for _ in 0..8 {
        hook.push(Behaviour::StatusWithHeaders(
            429,
            vec![("Retry-After".into(), "1".into())],
        ));
    }
    let path = write_config(db.dir.path(), &config(&db, &hook, "1s", ""));
    let a = ChildServer::spawn(&path);
    let ((first, _), _) = wait_for_leader(&db, None).await;
    let b = ChildServer::spawn(&path);
    let (old, new) = if a.replica() == first { (a, b) } else { (b, a) };
    let http = client();
    let uuid = create(&http, &new.base, "frozen").await;
    ping(&http, &new.base, &format!("/ping/{uuid}/fail")).await;
    hook.wait_for(1, WAIT).await;

    // Freeze the leader past its TTL: the other replica takes over and
    // delivers; the frozen one, woken up, must send nothing.
    old.signal("STOP");
    let frozen_at = Instant::now();
    let ((holder, _), _) = wait_for_leader(&db, Some(&first)).await;
    assert_eq!(holder, new.replica());
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(frozen_at.elapsed())).await;
    old.signal("CONT");
    let woke = Instant::now();
    let start = Instant::now();
    loop {
        let v: Value = http
            .get(format!("{}/api/v1/notifications", new.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["notifications"][0]["state"] == "delivered" {
            break;
        }
        assert!(start.elapsed() < WAIT, "{v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from_old: Vec<Duration> = hook
        .requests()
        .iter()
        .filter(|r| r.header("x-overdue-replica") == Some(first.as_str()))
        .filter(|r| r.received > woke)
        .map(|r| r.received - woke)
        .collect();
    assert!(
        from_old.is_empty(),
        "the ex-leader sent {} request(s) after waking",
        from_old.len()
    );
    assert!(
        old.log().contains("lost the leader lease") || old.log().contains("stepping down"),
        "the ex-leader noticed:\n{}",
        old.log()
    );
    let requests = hook.requests();
    let keys: BTreeSet<&str> = requests
        .iter()
        .map(|r| r.header("idempotency-key").unwrap())
        .collect();
    assert_eq!(keys.len(), 1, "one notification, however many attempts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_lease_over_at_once() {
    if !postgres_available("sigterm_hands_the_lease_over_at_once") {
        return;
    }
    let db = TestDb::new(Backend::Postgres).await;
    let hook = WebhookSink::start().await;
    // A long TTL: a handover that waited for it would take 20 s.
    let path = write_config(db.dir.path(), &config(&db, &hook, "20s", ""));
    let a = ChildServer::spawn(&path);
    let ((first, _), _) = wait_for_leader(&db, None).await;
    let b = ChildServer::spawn(&path);
    let (mut old, new) = if a.replica() == first { (a, b) } else { (b, a) };
    let stopped = Instant::now();
    old.signal("TERM");
    let ((holder, _), _) = wait_for_leader(&db, Some(&first)).await;
    let took = stopped.elapsed();
    assert_eq!(holder, new.replica());
    assert!(took < Duration::from_secs(5), "handover took {took:?}");
    let status = old.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        old.log().contains("released the leader lease"),
        "{}",
        old.log()
    );
    // The new leader works: a failure is announced.
    let http = client();
    let uuid = create(&http, &new.base, "after-term").await;
    ping(&http, &new.base, &format!("/ping/{uuid}/fail")).await;
    hook.wait_for(1, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_one_sqlite_file_is_refused() {
    let db = TestDb::new(Backend::Sqlite).await;
    let path = write_config(db.dir.path(), &db.config_toml(""));
    let first = ChildServer::spawn(&path);
    let out = Command::new(env!("CARGO_BIN_EXE_overdue"))
        .arg("--config")
        .arg(&path)
        .arg("serve")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is in use by another overdue process"),
        "{err}"
    );
    // The first one is unharmed.
    let r = client()
        .get(format!("{}/readyz", first.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(first);
    // Once it is gone, the file is free again (a crashed process's lock
    // goes with it).
    let again = ChildServer::spawn(&path);
    again.kill9();
}
