//! Database outage (SPEC §3.5, §4): the real binary on a throwaway
//! PostgreSQL cluster that this test creates itself (initdb and pg_ctl from
//! the installed PostgreSQL, run as the `postgres` user, on a port and data
//! directory of its own, so the machine's shared server is untouched). The
//! cluster is stopped under load and started again:
//! - while it is down pings get `503`, never `200`, and the server stays up;
//! - once it is back pings get `200` again, without restarting overdue;
//! - the outage is unobserved time: a check whose deadline fell inside it is
//!   not marked late or down because of it, and one that stays silent
//!   afterwards goes down once the rest of its limit has passed;
//! - it is a blind spot: the fallback receiver gets one notice naming the
//!   span and both checks (SPEC §6.2).
//!
//!
//! The database is also restarted (`pg_ctl stop -m immediate`, then start)
//! in the middle of a transaction (see docs/reliability.md, "Database
//! restarted mid-transaction"):
//! - while a delivery is open (the receiver holds the request and accepts
//!   it while the database is down): the notification is sent once, and
//!   recorded as delivered once the database is back;
//! - while a fold is open (the test holds a lock that the fold's summary
//!   write waits for, after it moved pings from the inbox to the log): no
//!   acknowledged ping is lost or folded twice, the log's numbering has no
//!   gap, and the failure folded there is announced once.
//!
//! `OVERDUE_SOAK=1` repeats the outage several times (see docs/reliability.md).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::pg_cluster::PgCluster;
use common::sinks::{alert_checks, Behaviour, Request, WebhookSink, PERSISTENT_RETRIES};
use common::{client, release_binary, write_config, ChildServer, PING_KEY};
use serde_json::{json, Value};
use sqlx::Connection;

/// One load ping as the client saw it.
#[derive(Debug, Clone)]
struct Outcome {
    /// The ping's `items`: one number per ping, never repeated.
    items: u64,
    sent: Instant,
    answered: Instant,
    /// The HTTP status, or the transport error.
    result: Result<u16, String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "initdb",
    ignore = "needs PostgreSQL's server programs, as root (Debian's postgresql)"
)]
async fn pings_get_503_while_the_database_is_down_and_the_outage_is_unobserved() {
    let cluster = PgCluster::create();
    let outages = if std::env::var_os("OVERDUE_SOAK").is_some_and(|v| !v.is_empty() && v != "0") {
        5
    } else {
        1
    };
    let dir = tempfile::tempdir().unwrap();
    // The route's receiver, and the fallback receiver that is told of blind spots.
    let (hook, ops) = (WebhookSink::start().await, WebhookSink::start().await);
    // A beat a second: an outage longer than two seconds is unobserved.
    let config = write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"{}\"\nping_key = \"{PING_KEY}\"\n\
             heartbeat_period = \"1s\"\nlease_ttl = \"3s\"\nping_log_limit = 1000000\n\
             fallback_receiver = \"ops\"\n\n\
             [[receivers]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\ntimeout = \"2s\"\n\n\
             [[receivers]]\nname = \"ops\"\ntype = \"webhook\"\nurl = \"{}\"\ntimeout = \"2s\"\n\n\
             [route]\nreceiver = \"hook\"\n",
            cluster.url(),
            hook.url("/hook"),
            ops.url("/ops")
        ),
    );
    let server = ChildServer::spawn_binary(&release_binary(), &config);
    let base = server.base.clone();
    let http = client();

    let load_uuid = create(&http, &base, "load", "1d", "1d").await;

    // The load: a few clients pinging one check all along.
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    let counter = Arc::new(AtomicU64::new(1));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (http, stop, outcomes, counter) = (
            http.clone(),
            stop.clone(),
            outcomes.clone(),
            counter.clone(),
        );
        let url = format!("{base}/ping/{load_uuid}");
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let items = counter.fetch_add(1, Ordering::Relaxed);
                let sent = Instant::now();
                let result = match http.get(format!("{url}?items={items}")).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body = r.text().await.unwrap_or_default();
                        if status == 503 {
                            assert!(body.contains("could not be stored"), "503 body: {body}");
                        }
                        Ok(status)
                    }
                    Err(e) => Err(format!("{e:#}")),
                };
                outcomes.lock().unwrap().push(Outcome {
                    items,
                    sent,
                    answered: Instant::now(),
                    result,
                });
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }

    for round in 1..=outages {
        outage(round, &cluster, &server, &http, &base, &outcomes, &ops).await;
    }
    assert_eq!(
        ops.requests().len(),
        outages,
        "one blind-spot notice per outage"
    );

    stop.store(true, Ordering::Release);
    for c in clients {
        c.await.expect("load client");
    }
    let outcomes = outcomes.lock().unwrap().clone();
    let acked = outcomes.iter().filter(|o| o.result == Ok(200)).count();
    let refused = outcomes.iter().filter(|o| o.result == Ok(503)).count();
    // Every ping acknowledged before, between and after the outages is in
    // the log, once (a 503 may or may not have been stored: its commit can
    // have succeeded with the answer lost).
    let stored = common::ping_items(&http, &base, &load_uuid).await;
    let lost: Vec<u64> = outcomes
        .iter()
        .filter(|o| o.result == Ok(200) && !stored.contains(&o.items))
        .map(|o| o.items)
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not in the log: items={lost:?}"
    );
    let summary = format!(
        "database outage: {outages} outage(s); {} load pings: {acked} answered 200, {refused} \
         answered 503, {} other; the server never restarted",
        outcomes.len(),
        outcomes.len() - acked - refused
    );
    println!("{summary}");
    server.kill9();
    drop(cluster);
}

/// One outage of the cluster, long enough that two checks' deadlines fall
/// inside it; asserts what SPEC §3.5 and §4 promise.
async fn outage(
    round: usize,
    cluster: &PgCluster,
    server: &ChildServer,
    http: &reqwest::Client,
    base: &str,
    outcomes: &Arc<Mutex<Vec<Outcome>>>,
    ops: &WebhookSink,
) {
    // Both go late 4s and down 8s after their ping: inside the outage.
    let silent = create(http, base, &format!("silent-{round}"), "4s", "4s").await;
    let returns = create(http, base, &format!("returns-{round}"), "4s", "4s").await;
    let pinged = Utc::now();
    for uuid in [&silent, &returns] {
        common::get_200(http, &format!("{base}/ping/{uuid}")).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    cluster.stop();
    let down_since = Instant::now();
    let down_wall = Utc::now();
    // 11s down: the deadlines (pinged + 4s, pinged + 8s) pass meanwhile.
    common::hold(Duration::from_secs(11), || async { assert_alive(server) }).await;
    let up_again = Instant::now();
    let up_wall = Utc::now();
    assert!(
        pinged + chrono::Duration::seconds(8) < up_wall - chrono::Duration::seconds(2),
        "the deadlines must fall well inside the outage"
    );
    cluster.start();

    // Pings sent and answered while the database was down: 503, every one.
    let during: Vec<Outcome> = outcomes
        .lock()
        .unwrap()
        .iter()
        .filter(|o| o.sent >= down_since && o.answered <= up_again)
        .cloned()
        .collect();
    assert!(!during.is_empty(), "no ping was answered during the outage");
    let wrong: Vec<&Outcome> = during.iter().filter(|o| o.result != Ok(503)).collect();
    assert!(
        wrong.is_empty(),
        "pings while the database was down must get 503, got: {wrong:?}\nserver log:\n{}",
        server.log()
    );

    // It recovers by itself: pings get 200 again, same process.
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        let ok = outcomes
            .lock()
            .unwrap()
            .iter()
            .any(|o| o.sent >= up_again && o.result == Ok(200));
        if ok {
            break;
        }
        assert_alive(server);
        assert!(
            Instant::now() < deadline,
            "pings did not get 200 within 60s of the database coming back\nserver log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recovered_after = up_again.elapsed();
    // This job is back to work: it checks in every second from now on.
    common::get_200(http, &format!("{base}/ping/{returns}")).await;
    let returned_at = Utc::now();
    let keeps_pinging = {
        let (http, url) = (http.clone(), format!("{base}/ping/{returns}"));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                // Its outcome is judged by its flips below.
                let _ = http.get(&url).send().await;
            }
        })
    };

    // The silent one goes down, after the outage: the clocks paused over it.
    let deadline = Instant::now() + common::HANG_GUARD;
    let flips = loop {
        let flips = flips_of(http, base, &silent).await;
        if flips.iter().any(|f| f.1 == "down") {
            break flips;
        }
        assert_alive(server);
        assert!(
            Instant::now() < deadline,
            "the silent check never went down after the outage: {flips:?}\nserver log:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        server
            .log()
            .contains("no replica accepted pings in this span"),
        "the outage was not recorded as unobserved:\n{}",
        server.log()
    );
    for (at, to) in &flips {
        assert!(
            *at >= up_wall,
            "silent check flipped to {to} at {at}, before the database came back at \
             {up_wall} (down since {down_wall}): the outage was counted: {flips:?}"
        );
    }
    let downs = flips.iter().filter(|f| f.1 == "down").count();
    assert_eq!(downs, 1, "{flips:?}");
    // The fallback receiver was told of the blind spot, once, naming both
    // checks: their check-ins were due inside it (the one that checked in
    // since is judged from its pings before the outage).
    let told = ops.wait_for(round).await;
    assert_eq!(told.len(), round, "one notice per outage");
    let notice = told[round - 1].json();
    let a = &notice["alerts"][0];
    assert_eq!(a["labels"]["alertname"], "OverdueBlindSpot", "{notice}");
    let listed: Vec<&str> = a["annotations"]["checks"]
        .as_str()
        .unwrap()
        .lines()
        .collect();
    for name in [format!("silent-{round}"), format!("returns-{round}")] {
        assert!(listed.contains(&name.as_str()), "{name} not in {listed:?}");
    }
    assert!(!listed.contains(&"load"), "{listed:?}");
    let span_start: DateTime<Utc> = a["annotations"]["span_start"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let span_end: DateTime<Utc> = a["annotations"]["span_end"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        // A span ends at the first beat after the outage; that beat's instant
        // is read when it starts, and it may start up to one
        // heartbeat_period (1 s) before the database is back and wait for it.
        span_start <= down_wall && span_end > up_wall - chrono::Duration::seconds(2),
        "span {span_start} – {span_end}, database down {down_wall} – {up_wall}"
    );
    let down_at = flips.iter().find(|f| f.1 == "down").unwrap().0;
    // Little of its limit passed before the outage, and it checked in again
    // soon after and all along: the outage must not make it late or down.
    keeps_pinging.abort();
    let returned = flips_of(http, base, &returns).await;
    assert!(
        returned.is_empty(),
        "the job that checked in at {returned_at} after the outage ({down_wall} to {up_wall}, \
         its last ping before at {pinged}) was marked: {returned:?}\nserver log:\n{}",
        server.log()
    );
    eprintln!(
        "  outage {round}: database down {:.1}s; pings got 200 again {:.1}s after pg_ctl start \
         began; the silent check went down at {down_at} ({:.1}s after the database came \
         back; without the pause it would have been {})",
        (up_again - down_since).as_secs_f64(),
        recovered_after.as_secs_f64(),
        (down_at - up_wall).num_milliseconds() as f64 / 1000.0,
        pinged + chrono::Duration::seconds(8)
    );
}

fn assert_alive(server: &ChildServer) {
    // try_wait needs &mut; the pid answering signal 0 is the same question.
    let alive = Command::new("kill")
        .args(["-0", &server.child.id().to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(alive, "overdue died during the outage:\n{}", server.log());
    // A zombie answers signal 0 too: look at its state.
    let stat =
        std::fs::read_to_string(format!("/proc/{}/stat", server.child.id())).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .next();
    assert_ne!(
        state,
        Some("Z"),
        "overdue exited during the outage:\n{}",
        server.log()
    );
}

async fn create(
    http: &reqwest::Client,
    base: &str,
    slug: &str,
    interval: &str,
    grace: &str,
) -> String {
    let body = json!({"slug": slug, "interval": interval, "grace": grace});
    common::create_on(http, base, body).await
}

async fn get(http: &reqwest::Client, url: &str) -> Value {
    let r = http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
    r.json().await.unwrap()
}

/// A check's flips after its first ping (from `new`), oldest first: (at, to).
async fn flips_of(http: &reqwest::Client, base: &str, uuid: &str) -> Vec<(DateTime<Utc>, String)> {
    let v = get(http, &format!("{base}/api/v1/checks/{uuid}/flips")).await;
    let mut flips: Vec<(DateTime<Utc>, String)> = v["flips"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["from"] != "new")
        .map(|f| {
            (
                DateTime::parse_from_rfc3339(f["at"].as_str().unwrap())
                    .unwrap()
                    .with_timezone(&Utc),
                f["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    flips.reverse();
    flips
}

/// One replica on `cluster` that sends every incident to `hook`. The lease
/// outlives a restart of the database by far, so the replica leads
/// throughout.
fn restart_config(cluster: &PgCluster, hook: &WebhookSink) -> String {
    format!(
        r#"listen = "127.0.0.1:0"
database_url = "{url}"
ping_key = "{PING_KEY}"
heartbeat_period = "1s"
lease_ttl = "20s"
ping_log_limit = 1000000
{hook}{PERSISTENT_RETRIES}"#,
        url = cluster.url(),
        hook = hook.per_check_toml("10s", "200ms", "300ms"),
    )
}

/// Requests per `Idempotency-Key`.
fn per_key(requests: &[Request]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in requests {
        *out.entry(r.header("idempotency-key").unwrap().to_string())
            .or_default() += 1;
    }
    out
}

/// The checks (slug) a request announced as firing.
fn firing_checks(r: &Request) -> Vec<String> {
    alert_checks(&r.json(), "firing")
}

/// A direct connection, retried while the cluster comes back up.
async fn connect(url: &str) -> sqlx::PgConnection {
    let start = Instant::now();
    loop {
        match sqlx::PgConnection::connect(url).await {
            Ok(c) => return c,
            Err(e) => assert!(start.elapsed() < common::HANG_GUARD, "cannot connect: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the receiver has heard `check` fire.
async fn wait_firing(hook: &WebhookSink, check: &str) {
    let start = Instant::now();
    while !hook
        .requests()
        .iter()
        .any(|r| firing_checks(r).iter().any(|c| c == check))
    {
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "{check} was never announced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "initdb",
    ignore = "needs PostgreSQL's server programs, as root (Debian's postgresql)"
)]
async fn a_delivery_open_while_the_database_restarts_is_sent_once() {
    let cluster = PgCluster::create();
    let hook = WebhookSink::start().await;
    let release = Arc::new(tokio::sync::Notify::new());
    hook.push(Behaviour::Hold(release.clone()));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &restart_config(&cluster, &hook));
    let server = ChildServer::spawn_binary(&release_binary(), &config);
    let http = client();
    let held = create(&http, &server.base, "held", "1h", "1h").await;
    common::get_200(&http, &format!("{}/ping/{held}/fail", server.base)).await;

    // The receiver has the request and holds it: the attempt is open. The
    // database goes down under it, for longer than the server waits for a
    // connection (5 s), and the receiver accepts while it is down.
    let first = hook.wait_for(1).await;
    let key = first[0].header("idempotency-key").unwrap().to_string();
    cluster.stop();
    let stopped = Instant::now();
    release.notify_one();
    common::hold(Duration::from_secs(7), || async { assert_alive(&server) }).await;
    cluster.start();
    let down_for = stopped.elapsed();

    // Recorded as delivered once the database is back.
    let mut c = connect(&cluster.url()).await;
    let start = Instant::now();
    loop {
        let state: String = sqlx::query_scalar("SELECT state FROM notifications WHERE id = $1")
            .bind(&key)
            .fetch_one(&mut c)
            .await
            .unwrap();
        if state == "delivered" {
            break;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "{key} is still {state}:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recorded_after = start.elapsed();
    // Deliveries go on: a failure after the restart is announced.
    let after = create(&http, &server.base, "after", "1h", "1h").await;
    common::get_200(&http, &format!("{}/ping/{after}/fail", server.base)).await;
    wait_firing(&hook, "after").await;
    // Room for a repeated request to show up (the deliverer looks again at
    // least every 5 s).
    tokio::time::sleep(Duration::from_secs(6)).await;

    let requests = hook.requests();
    let sent = per_key(&requests);
    assert_eq!(
        sent.get(&key),
        Some(&1),
        "the notification the receiver accepted while the database was down was sent again \
         (requests per key: {sent:?})\nserver log:\n{}",
        server.log()
    );
    assert!(sent.values().all(|n| *n == 1), "{sent:?}");
    let outcomes: Vec<String> = sqlx::query_scalar(
        "SELECT outcome FROM notification_attempts WHERE notification_id = $1 ORDER BY id",
    )
    .bind(&key)
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert_eq!(outcomes, ["delivered"], "one attempt, recorded once");
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM notifications")
        .fetch_all(&mut c)
        .await
        .unwrap();
    assert_eq!(states, ["delivered", "delivered"]);
    println!(
        "delivery open across a restart: database down {:.1}s; the attempt was recorded as \
         delivered {:.1}s after pg_ctl start returned; {} request(s) for its key",
        down_for.as_secs_f64(),
        recorded_after.as_secs_f64(),
        sent[&key]
    );
    server.kill9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "initdb",
    ignore = "needs PostgreSQL's server programs, as root (Debian's postgresql)"
)]
async fn a_fold_open_while_the_database_restarts_loses_and_repeats_nothing() {
    let cluster = PgCluster::create();
    let hook = WebhookSink::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &restart_config(&cluster, &hook));
    let server = ChildServer::spawn_binary(&release_binary(), &config);
    let base = server.base.clone();
    let http = client();
    let load_uuid = create(&http, &base, "load", "1d", "1d").await;

    // The load: pings with an items value each, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let counter = Arc::new(AtomicU64::new(1));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (http, stop, acked, counter) =
            (http.clone(), stop.clone(), acked.clone(), counter.clone());
        let url = format!("{base}/ping/{load_uuid}");
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Acquire) {
                let items = counter.fetch_add(1, Ordering::Relaxed);
                if let Ok(r) = http.get(format!("{url}?items={items}")).send().await {
                    let status = r.status().as_u16();
                    assert!(status == 200 || status == 503, "ping answered {status}");
                    if status == 200 {
                        acked.lock().unwrap().push(items);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Hold a fold open: the test locks the summaries, so the next fold
    // moves the inbox to the ping log and then waits to write them. A
    // failure is pinged first thing after the lock is taken; a fold that
    // was already past reading the inbox when the lock came does not hold
    // it, so the round is tried again with another check until one does.
    let url = cluster.url();
    let mut locker = connect(&url).await;
    let mut observer = connect(&url).await;
    let mut failed = Vec::new();
    let mut round = 0;
    loop {
        round += 1;
        assert!(round <= 10, "no fold held the failure in 10 rounds");
        let slug = format!("fails-{round}");
        let uuid = create(&http, &base, &slug, "1h", "1h").await;
        sqlx::raw_sql("BEGIN; LOCK TABLE check_state IN EXCLUSIVE MODE")
            .execute(&mut locker)
            .await
            .unwrap();
        common::get_200(&http, &format!("{base}/ping/{uuid}/fail")).await;
        failed.push(slug);
        let start = Instant::now();
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE NOT granted \
                 AND relation = 'check_state'::regclass",
            )
            .fetch_one(&mut observer)
            .await
            .unwrap();
            if waiting > 0 {
                break;
            }
            assert!(
                start.elapsed() < common::HANG_GUARD,
                "no fold waited for the summaries"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The failure's inbox row is locked by the waiting fold's delete.
        let free: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT 1 FROM ping_inbox i JOIN checks c \
             ON c.id = i.check_id WHERE c.uuid = $1 FOR UPDATE SKIP LOCKED) x",
        )
        .bind(&uuid)
        .fetch_one(&mut observer)
        .await
        .unwrap();
        if free == 0 {
            break;
        }
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut locker)
            .await
            .unwrap();
    }
    let in_flight: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM ping_inbox i JOIN checks c ON c.id = i.check_id \
         WHERE c.slug = 'load'",
    )
    .fetch_one(&mut observer)
    .await
    .unwrap();

    // The restart, with the fold open.
    drop((locker, observer));
    cluster.stop();
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_alive(&server);
    cluster.start();
    let down_for = stopped.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Release);
    for c in clients {
        c.await.expect("load client");
    }

    // Everything is folded again, once.
    let mut c = connect(&url).await;
    let start = Instant::now();
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM ping_inbox")
            .fetch_one(&mut c)
            .await
            .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "{left} pings never folded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log: Vec<(i64, Option<i64>)> = sqlx::query_as(
        "SELECT p.n, p.items FROM pings p JOIN checks c ON c.id = p.check_id \
         WHERE c.slug = 'load' ORDER BY p.n",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let numbers: Vec<i64> = log.iter().map(|(n, _)| *n).collect();
    let expected: Vec<i64> = (1..=log.len() as i64).collect();
    assert!(
        numbers == expected,
        "the log's numbers have gaps or repeats"
    );
    let mut logged: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, items) in &log {
        *logged
            .entry(items.expect("every load ping has items") as u64)
            .or_default() += 1;
    }
    let twice: Vec<_> = logged.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "folded twice: {twice:?}");
    let acked = acked.lock().unwrap().clone();
    let lost: Vec<&u64> = acked.iter().filter(|i| !logged.contains_key(i)).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let (n_pings, last_items): (i64, Option<i64>) = sqlx::query_as(
        "SELECT s.n_pings, s.last_items FROM check_state s JOIN checks c ON c.id = s.check_id \
         WHERE c.slug = 'load'",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(n_pings as usize, log.len());
    assert_eq!(last_items, log.last().unwrap().1);

    // Each failure announced once.
    for slug in &failed {
        wait_firing(&hook, slug).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = hook.requests();
    let mut announced: BTreeMap<String, usize> = BTreeMap::new();
    for r in &requests {
        for check in firing_checks(r) {
            *announced.entry(check).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, usize> = failed.iter().map(|s| (s.clone(), 1)).collect();
    assert_eq!(announced, expected);
    assert!(per_key(&requests).values().all(|n| *n == 1));
    println!(
        "fold open across a restart (round {round}): {in_flight} load pings in the inbox when \
         the database went down for {:.1}s; {} acknowledged, {} logged, none lost, none twice; \
         {} failure(s) announced once each",
        down_for.as_secs_f64(),
        acked.len(),
        log.len(),
        failed.len()
    );
    server.kill9();
}
