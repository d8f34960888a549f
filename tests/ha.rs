//! Several replicas on one PostgreSQL database (SPEC §8): real processes, a
//! real database, a real webhook receiver. The leader is killed, frozen and
//! stopped; incidents are still announced and resolved exactly once.
//!
//! No test here times anything: they assert order, exactly-once and the
//! instants the database stored (every change of the lease row is logged,
//! with the database's clock, by a trigger the tests add). How fast a
//! failover is is measured by bench/failover.sh.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::lease::{self, assert_terms_follow_each_other};
use common::sinks::{
    announcements, wait_announced, Behaviour, Request, WebhookSink, PERSISTENT_RETRIES,
};
use common::{client, write_config, Backend, ChildServer, TestDb};
use rand::Rng;
use serde_json::{json, Value};
use sqlx::Connection;

/// Waits until some replica holds the lease (other than `not`) and returns it.
async fn wait_for_leader(db: &TestDb, not: Option<&str>) -> (String, i64) {
    lease::wait_for_leader(&db.url, not).await
}

async fn migrate_and_log_the_lease(db: &TestDb, config: &Path) {
    lease::migrate_and_log_the_lease(&db.url, config).await
}

async fn terms(db: &TestDb) -> Vec<lease::Term> {
    lease::terms(&db.url).await
}

fn config(db: &TestDb, hook: &WebhookSink, ttl: &str, extra: &str) -> String {
    db.config_toml(&format!(
        r#"
heartbeat_period = "200ms"
lease_ttl = "{ttl}"
{hook}{PERSISTENT_RETRIES}{extra}
"#,
        hook = hook.per_check_toml("500ms", "200ms", "300ms"),
    ))
}

async fn create(http: &reqwest::Client, base: &str, slug: &str) -> String {
    common::create_on(http, base, json!({"slug": slug, "interval": "1h"})).await
}

async fn ping(http: &reqwest::Client, base: &str, path: &str) {
    let r = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn three_replicas_announce_every_incident_once_across_leader_kills() {
    common::need_postgres();
    let db = TestDb::new(Backend::Postgres).await;
    let hook = WebhookSink::start().await;
    let path = write_config(db.dir.path(), &config(&db, &hook, "1s", ""));
    migrate_and_log_the_lease(&db, &path).await;
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
    let mut killed = Vec::new();
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
            let (holder, token) = wait_for_leader(&db, None).await;
            let at = replicas
                .iter()
                .position(|r| r.replica() == holder)
                .expect("the leader is one of ours");
            replicas.remove(at).kill9();
            killed.push((holder.clone(), token));
            replicas.push(ChildServer::spawn(&path));
            wait_for_leader(&db, Some(&holder)).await;
            let n = expected.entry(format!("{slug}/{status}")).or_default();
            *n += 1;
            wait_announced(&hook, slug, status, *n).await;
        }
    }
    assert_eq!(killed.len(), 20);

    // Every kill ended a term, and the next began only once it had run
    // out: a killed leader cannot release its lease, so its successor waited
    // for the lease's expiry as the database stored it.
    let terms = terms(&db).await;
    assert_terms_follow_each_other(&terms);
    for (holder, token) in &killed {
        let i = terms
            .iter()
            .position(|t| t.token == *token)
            .unwrap_or_else(|| panic!("no term {token} in {terms:#?}"));
        assert_eq!(&terms[i].holder, holder, "{terms:#?}");
        assert!(!terms[i].released, "a killed leader released: {terms:#?}");
        assert!(i + 1 < terms.len(), "no successor: {terms:#?}");
    }
    // Only leaders deliver, and a successor's first delivery came after the
    // term before its own had ended (the receiver's wall clock against the
    // database's, on one machine).
    let requests = hook.requests();
    for r in &requests {
        let from = r
            .header("x-overdue-replica")
            .expect("every request says its replica");
        let first_term = terms
            .iter()
            .position(|t| t.holder == from)
            .unwrap_or_else(|| panic!("{from} sent a request but never led: {terms:#?}"));
        if first_term > 0 {
            let before = &terms[first_term - 1];
            // +1: the database rounds to the millisecond, the receiver floors.
            assert!(
                r.received_ms + 1 >= before.ended,
                "{from} (term {}) sent at {} while term {} ran until {}",
                terms[first_term].token,
                r.received_ms,
                before.token,
                before.ended
            );
        }
    }

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
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn a_frozen_leader_starts_no_delivery_after_losing_its_lease() {
    common::need_postgres();
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
    migrate_and_log_the_lease(&db, &path).await;
    let a = ChildServer::spawn(&path);
    let (first, _) = wait_for_leader(&db, None).await;
    let b = ChildServer::spawn(&path);
    let (old, new) = if a.replica() == first { (a, b) } else { (b, a) };
    let second = new.replica();
    let http = client();
    let uuid = create(&http, &new.base, "frozen").await;
    ping(&http, &new.base, &format!("/ping/{uuid}/fail")).await;
    // What the leader sent before the freeze says who sent it: the checks
    // below, on that header, cannot pass for want of it.
    let before = hook.wait_for(1).await;
    for r in &before {
        assert_eq!(
            r.header("x-overdue-replica"),
            Some(first.as_str()),
            "{:?}",
            r.headers
        );
    }

    // Freeze the leader past its TTL: the other replica takes over and
    // delivers; the frozen one is woken once its successor has sent its
    // first request, and must send nothing more.
    old.signal("STOP");
    let (holder, _) = wait_for_leader(&db, Some(&first)).await;
    assert_eq!(holder, second);
    let start = Instant::now();
    while !hook
        .requests()
        .iter()
        .any(|r| r.header("x-overdue-replica") == Some(second.as_str()))
    {
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "the successor sent nothing before the hang guard"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
        assert!(start.elapsed() < common::HANG_GUARD, "hang guard: {v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Room for a late request of the ex-leader to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = hook.requests();
    let senders: BTreeSet<&str> = requests
        .iter()
        .map(|r| {
            r.header("x-overdue-replica")
                .expect("every request says its replica")
        })
        .collect();
    assert_eq!(
        senders,
        BTreeSet::from([first.as_str(), second.as_str()]),
        "both replicas delivered"
    );
    let from_old: Vec<&Request> = requests
        .iter()
        .filter(|r| r.header("x-overdue-replica") == Some(first.as_str()))
        .collect();
    assert!(
        from_old.iter().all(|r| r.received < woke),
        "the ex-leader sent {} request(s) after waking",
        from_old.iter().filter(|r| r.received >= woke).count()
    );
    // In the database's terms: the ex-leader's term ran out (it did not
    // release it, it was frozen), every request it sent came before that,
    // and its successor's term and first request came after.
    let terms = terms(&db).await;
    assert_terms_follow_each_other(&terms);
    assert_eq!(
        terms.iter().map(|t| t.holder.as_str()).collect::<Vec<_>>(),
        [first.as_str(), second.as_str()],
        "{terms:#?}"
    );
    let (ended, began) = (terms[0].ended, terms[1].began);
    assert!(!terms[0].released, "{terms:#?}");
    for r in &from_old {
        assert!(
            r.received_ms < ended,
            "the ex-leader sent at {} after its lease ran out at {ended}",
            r.received_ms
        );
    }
    let first_of_new = requests
        .iter()
        .filter(|r| r.header("x-overdue-replica") == Some(second.as_str()))
        .map(|r| r.received_ms)
        .min()
        .unwrap();
    // +1: the database rounds to the millisecond, the receiver floors.
    assert!(
        first_of_new + 1 >= began,
        "the successor sent at {first_of_new}, before its term began at {began}"
    );
    assert!(
        old.log().contains("lost the leader lease") || old.log().contains("stepping down"),
        "the ex-leader noticed:\n{}",
        old.log()
    );
    let keys: BTreeSet<&str> = requests
        .iter()
        .map(|r| r.header("idempotency-key").unwrap())
        .collect();
    assert_eq!(keys.len(), 1, "one notification, however many attempts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn sigterm_hands_the_lease_over_at_once() {
    common::need_postgres();
    let db = TestDb::new(Backend::Postgres).await;
    let hook = WebhookSink::start().await;
    // A long TTL: a successor that waited for it would take over only when
    // the lease ran out by itself, 20 s after its last renewal.
    let path = write_config(db.dir.path(), &config(&db, &hook, "20s", ""));
    migrate_and_log_the_lease(&db, &path).await;
    let a = ChildServer::spawn(&path);
    let (first, _) = wait_for_leader(&db, None).await;
    let b = ChildServer::spawn(&path);
    let (mut old, new) = if a.replica() == first { (a, b) } else { (b, a) };
    old.signal("TERM");
    let (holder, _) = wait_for_leader(&db, Some(&first)).await;
    assert_eq!(holder, new.replica());
    let status = old.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        old.log().contains("released the leader lease"),
        "{}",
        old.log()
    );
    // As stored: the old term was released, and the successor's began after
    // the release and before the old lease would have run out by itself.
    let terms = terms(&db).await;
    assert_terms_follow_each_other(&terms);
    assert_eq!(terms.len(), 2, "{terms:#?}");
    let (old_term, new_term) = (&terms[0], &terms[1]);
    assert!(old_term.released, "{terms:#?}");
    assert!(
        new_term.began < old_term.would_have_ended,
        "the successor waited for the lease to run out: {terms:#?}"
    );
    // The new leader works: a failure is announced.
    let http = client();
    let uuid = create(&http, &new.base, "after-term").await;
    ping(&http, &new.base, &format!("/ping/{uuid}/fail")).await;
    hook.wait_for(1).await;
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
