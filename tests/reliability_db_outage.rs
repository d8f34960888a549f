//! Database outage (SPEC §3.5, §4): the real binary on a throwaway
//! PostgreSQL cluster that this test creates itself (initdb and pg_ctl from
//! the installed PostgreSQL, run as the `postgres` user, on a port and data
//! directory of its own, so the machine's shared server is untouched). The
//! cluster is stopped under load and started again:
//! - while it is down pings get `503`, never `200`, and the server stays up;
//! - once it is back pings get `200` again, without restarting overdue;
//! - the outage is unobserved time: a check whose deadline fell inside it is
//!   not marked late or down because of it, and one that stays silent
//!   afterwards goes down once the rest of its limit has passed.
//!
//! `OVERDUE_SOAK=1` repeats the outage several times (see docs/reliability.md).

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::pg_cluster::PgCluster;
use common::{client, release_binary, write_config, ChildServer, PING_KEY};
use serde_json::{json, Value};

/// One load ping as the client saw it.
#[derive(Debug, Clone)]
struct Outcome {
    sent: Instant,
    answered: Instant,
    /// The HTTP status, or the transport error.
    result: Result<u16, String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_get_503_while_the_database_is_down_and_the_outage_is_unobserved() {
    let Some(cluster) = PgCluster::create("the database outage test") else {
        return;
    };
    let outages = if std::env::var_os("OVERDUE_SOAK").is_some_and(|v| !v.is_empty() && v != "0") {
        5
    } else {
        1
    };
    let dir = tempfile::tempdir().unwrap();
    // A beat a second: an outage longer than two seconds is unobserved.
    let config = write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"{}\"\nping_key = \"{PING_KEY}\"\n\
             heartbeat_period = \"1s\"\nlease_ttl = \"3s\"\nping_log_limit = 1000000\n",
            cluster.url()
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
                    sent,
                    answered: Instant::now(),
                    result,
                });
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }

    for round in 1..=outages {
        outage(round, &cluster, &server, &http, &base, &outcomes).await;
    }

    stop.store(true, Ordering::Release);
    for c in clients {
        c.await.expect("load client");
    }
    let outcomes = outcomes.lock().unwrap().clone();
    let acked = outcomes.iter().filter(|o| o.result == Ok(200)).count();
    let refused = outcomes.iter().filter(|o| o.result == Ok(503)).count();
    // Pings acknowledged before, between and after the outages are all there.
    let c: Value = get(&http, &format!("{base}/api/v1/checks/{load_uuid}")).await;
    assert!(
        c["n_pings"].as_u64().unwrap() >= acked as u64,
        "{acked} acknowledged, {c}"
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
) {
    // Both go late 4s and down 8s after their ping: inside the outage.
    let silent = create(http, base, &format!("silent-{round}"), "4s", "4s").await;
    let returns = create(http, base, &format!("returns-{round}"), "4s", "4s").await;
    let pinged = Utc::now();
    for uuid in [&silent, &returns] {
        let r = http
            .get(format!("{base}/ping/{uuid}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    cluster.stop();
    let down_since = Instant::now();
    let down_wall = Utc::now();
    // 11s down: the deadlines (pinged + 4s, pinged + 8s) pass meanwhile.
    while down_since.elapsed() < Duration::from_secs(11) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_alive(server);
    }
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
    let deadline = Instant::now() + Duration::from_secs(60);
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
    let r = http
        .get(format!("{base}/ping/{returns}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
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
    let deadline = Instant::now() + Duration::from_secs(60);
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
    let r = http
        .post(format!("{base}/api/v1/checks"))
        .json(&json!({"slug": slug, "interval": interval, "grace": grace}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "create {slug}");
    let c: Value = r.json().await.unwrap();
    c["uuid"].as_str().unwrap().to_string()
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
