//! Crash under load (SPEC §4, §12 "durability"): the real binary, under a
//! ping load spread over a few hundred checks, is killed with SIGKILL at
//! random moments and restarted on the same database, several times. Every
//! ping that was answered `200` must be in the ping log afterwards, in the
//! order it was sent, and each check's summary (last success, last items,
//! count) must match its log.
//!
//! The binary is the one named by `OVERDUE_TEST_RELEASE_BIN` (a `cargo
//! build --release` binary, say), else the debug build of this test run (as
//! in CI). `OVERDUE_SOAK=1` runs a longer variant (more checks, clients and
//! kills); see docs/reliability.md. Run with `-- --nocapture` to see the
//! figures.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use common::{client, release_binary, write_config, Backend, ChildServer, TestDb};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// How hard and how long to push.
struct Load {
    checks: usize,
    clients: usize,
    kills: usize,
    /// Load runs a random time in this range (ms) before each kill.
    run_ms: (u64, u64),
}

impl Load {
    fn from_env() -> Load {
        if std::env::var_os("OVERDUE_SOAK").is_some_and(|v| !v.is_empty() && v != "0") {
            Load {
                checks: 2_000,
                clients: 32,
                kills: 30,
                run_ms: (500, 5_000),
            }
        } else {
            Load {
                checks: 300,
                clients: 8,
                kills: 6,
                run_ms: (300, 2_000),
            }
        }
    }
}

/// One ping as the client saw it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    items: u64,
    /// Answered `200`: committed, so it must survive.
    acked: bool,
}

/// What one client sent to each check it owns, in sending order.
type Sends = HashMap<usize, Vec<Sent>>;

both_backends!(
    acknowledged_pings_survive_repeated_sigkill_under_load,
    |backend| async move { crash_under_load(backend).await }
);

async fn crash_under_load(backend: Backend) {
    let load = Load::from_env();
    let seed: u64 = std::env::var("OVERDUE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("crash under load ({backend:?}): seed {seed} (set OVERDUE_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let db = TestDb::new(backend).await;
    // A high ping_log_limit: nothing is pruned, so the log must hold every
    // acknowledged ping. A short lease: after a kill the new process (a new
    // replica on PostgreSQL) takes the lease over soon.
    let config = write_config(
        db.dir.path(),
        &db.config_toml(
            "ping_log_limit = 1000000\nheartbeat_period = \"1s\"\nlease_ttl = \"3s\"\n",
        ),
    );
    let binary = release_binary();
    let http = client();

    let mut server = ChildServer::spawn_binary(&binary, &config);
    let base = Arc::new(RwLock::new(server.base.clone()));
    let uuids = create_checks(&http, &server.base, load.checks).await;

    // The load: each client owns every `clients`-th check and pings them one
    // request at a time, so a check's pings are sent (and committed) in a
    // known order. Every ping carries an `items` value used nowhere else.
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(1));
    let mut clients = Vec::new();
    for c in 0..load.clients {
        let owned: Vec<usize> = (c..load.checks).step_by(load.clients).collect();
        let uuids = uuids.clone();
        let (http, base, stop, counter) =
            (http.clone(), base.clone(), stop.clone(), counter.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (c as u64 + 1));
        clients.push(tokio::spawn(async move {
            let mut sends: Sends = HashMap::new();
            while !stop.load(Ordering::Acquire) {
                let check = owned[rng.gen_range(0..owned.len())];
                let items = counter.fetch_add(1, Ordering::Relaxed);
                let url = format!(
                    "{}/ping/{}?items={items}",
                    base.read().unwrap(),
                    uuids[check]
                );
                let acked = match http.get(&url).send().await {
                    Ok(r) => r.status() == 200,
                    Err(_) => false,
                };
                sends.entry(check).or_default().push(Sent { items, acked });
                if !acked {
                    // Down or restarting: try again soon, with a new ping.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            sends
        }));
    }

    let started = Instant::now();
    for round in 1..=load.kills {
        let run = rng.gen_range(load.run_ms.0..=load.run_ms.1);
        tokio::time::sleep(Duration::from_millis(run)).await;
        let before = counter.load(Ordering::Relaxed);
        server.kill9();
        if round == load.kills {
            // The last kill ends the load: nothing is acknowledged after it.
            stop.store(true, Ordering::Release);
        }
        server = ChildServer::spawn_binary(&binary, &config);
        *base.write().unwrap() = server.base.clone();
        eprintln!(
            "  kill {round}/{} after {run} ms of load ({} pings sent so far)",
            load.kills,
            before - 1
        );
    }
    let mut sends: Sends = HashMap::new();
    for c in clients {
        sends.extend(c.await.expect("client task"));
    }
    let elapsed = started.elapsed();

    // Every acknowledged ping is there, in order; the summaries match.
    let base = server.base.clone();
    let mut acked_total = 0usize;
    let mut unacked_total = 0usize;
    let mut unacked_stored = 0usize;
    let mut checks_pinged = 0usize;
    for (check, sent) in &sends {
        let uuid = &uuids[*check];
        let log = ping_log(&http, &base, uuid).await;
        let c: Value = get(&http, &format!("{base}/api/v1/checks/{uuid}")).await;
        let order: HashMap<u64, usize> =
            sent.iter().enumerate().map(|(i, s)| (s.items, i)).collect();
        let acked: Vec<u64> = sent.iter().filter(|s| s.acked).map(|s| s.items).collect();
        acked_total += acked.len();
        unacked_total += sent.len() - acked.len();
        checks_pinged += 1;

        // The log as stored, oldest first: (n, items, date).
        let stored: Vec<u64> = log.iter().map(|p| p.1).collect();
        let stored_set: HashSet<u64> = stored.iter().copied().collect();
        assert_eq!(
            stored_set.len(),
            stored.len(),
            "check {uuid}: a ping stored twice: {stored:?}"
        );
        for items in &stored {
            assert!(
                order.contains_key(items),
                "check {uuid}: stored items={items} was never sent"
            );
        }
        let lost: Vec<u64> = acked
            .iter()
            .copied()
            .filter(|i| !stored_set.contains(i))
            .collect();
        assert!(
            lost.is_empty(),
            "check {uuid}: {} acknowledged ping(s) lost after kill -9: items {lost:?}",
            lost.len()
        );
        unacked_stored += stored.len() - acked.len();
        // Sent one at a time, so the log is in sending order.
        let positions: Vec<usize> = stored.iter().map(|i| order[i]).collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "check {uuid}: the log is not in sending order: {stored:?}"
        );
        let numbers: Vec<i64> = log.iter().map(|p| p.0).collect();
        let expected: Vec<i64> = (1..=log.len() as i64).collect();
        assert_eq!(numbers, expected, "check {uuid}: ping numbers have gaps");

        // The summary agrees with the log: count, last items, last success.
        assert_eq!(
            c["n_pings"].as_u64(),
            Some(log.len() as u64),
            "check {uuid}: {c}"
        );
        assert!(log.len() >= acked.len());
        let Some(newest) = log.last() else {
            assert!(acked.is_empty());
            continue;
        };
        assert_eq!(
            c["last_items"].as_u64(),
            Some(newest.1),
            "check {uuid}: {c}"
        );
        assert_eq!(
            c["last_success"].as_str(),
            Some(newest.2.as_str()),
            "check {uuid}: {c}"
        );
        // ... and is the last acknowledged ping, or one sent after it whose
        // answer the kill cut off.
        if let Some(last_acked) = acked.last() {
            assert!(
                order[&newest.1] >= order[last_acked],
                "check {uuid}: last_items {} is older than the last acknowledged ping {last_acked}",
                newest.1
            );
            if let Some(later) = sent[order[last_acked] + 1..]
                .iter()
                .find(|s| s.items == newest.1)
            {
                assert!(!later.acked);
            }
        }
    }
    assert!(acked_total > 0, "no ping was acknowledged at all");
    // The restarted server takes pings where the last one stopped.
    let r = http
        .get(format!("{base}/ping/{}", uuids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let summary =
        format!(
        "crash under load ({backend:?}, {}): {} kills in {:.1}s; {} checks pinged by {} clients; \
         {acked_total} pings acknowledged, all found after restart; {unacked_total} unanswered \
         (cut off by a kill or sent while down), of which {unacked_stored} were stored anyway",
        if std::env::var_os("OVERDUE_TEST_RELEASE_BIN").is_some() { "release" } else { "debug" },
        load.kills,
        elapsed.as_secs_f64(),
        checks_pinged,
        load.clients,
    );
    println!("{summary}");
    server.kill9();
}

/// Creates `n` checks (a few requests at a time); returns their uuids.
async fn create_checks(http: &reqwest::Client, base: &str, n: usize) -> Vec<String> {
    let mut uuids = vec![String::new(); n];
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (http, url) = (http.clone(), format!("{base}/api/v1/checks"));
        set.spawn(async move {
            let r = http
                .post(url)
                .json(&json!({"slug": format!("crash-{i}"), "interval": "1d"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201, "create check {i}");
            let c: Value = r.json().await.unwrap();
            (i, c["uuid"].as_str().unwrap().to_string())
        });
        if set.len() >= 8 {
            let (i, uuid) = set.join_next().await.unwrap().unwrap();
            uuids[i] = uuid;
        }
    }
    while let Some(done) = set.join_next().await {
        let (i, uuid) = done.unwrap();
        uuids[i] = uuid;
    }
    uuids
}

async fn get(http: &reqwest::Client, url: &str) -> Value {
    let r = http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
    r.json().await.unwrap()
}

/// A check's whole ping log, oldest first: (n, items, date).
async fn ping_log(http: &reqwest::Client, base: &str, uuid: &str) -> Vec<(i64, u64, String)> {
    let mut out = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let mut url = format!("{base}/api/v1/checks/{uuid}/pings?limit=1000");
        if let Some(b) = before {
            url.push_str(&format!("&before={b}"));
        }
        let page = get(http, &url).await;
        for p in page["pings"].as_array().unwrap() {
            assert_eq!(p["type"], "success", "{p}");
            out.push((
                p["n"].as_i64().unwrap(),
                p["items"].as_u64().expect("items"),
                p["date"].as_str().unwrap().to_string(),
            ));
        }
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    out.reverse();
    out
}
