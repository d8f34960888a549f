//! Partition from PostgreSQL (SPEC §12 "faults", §8): two replicas share a
//! PostgreSQL cluster of the test's own, and every packet between the leader
//! and the database is dropped silently (no reset, no refusal) by nftables,
//! then let through again. Asserts that:
//! - the cut-off leader sends nothing after its lease ended (checked at the
//!   receiver, against the lease's end as the database stored it);
//! - the other replica takes over and announces every incident that falls
//!   due meanwhile exactly once (one `Idempotency-Key` per incident, one
//!   request per key);
//! - pings sent to the cut-off replica are answered `503` while it is cut
//!   off (the server waits at most 5 s for its database, rather than holding
//!   them until the heal), never `200` for a ping that was not stored: every
//!   `200` is in the database afterwards;
//! - once the partition heals the old leader rejoins as a follower (its pings
//!   are stored and reach the leader's evaluator) and nothing is sent twice.
//!
//! How the partition is made: the cluster listens on 127.0.0.1 and
//! 127.0.0.2 (both loopback), the leader reaches it through 127.0.0.2 and
//! everything else through 127.0.0.1. An nftables table of the test's own
//! drops, in the output hook, every TCP packet to or from 127.0.0.2 on the
//! cluster's port: both directions, silently, for established connections
//! and new ones alike; nothing else on the machine is touched. A drop guard
//! deletes the table. Needs root and `nft` (Debian's nftables); elsewhere
//! the test is counted as ignored (under `CI` it fails).
//!
//! The figures printed (with `--nocapture`) are what docs/reliability.md
//! quotes; nothing here asserts on speed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::lease::{self, assert_terms_follow_each_other};
use common::pg_cluster::PgCluster;
use common::sinks::{
    announcements, unix_ms, wait_announced, Request, WebhookSink, PERSISTENT_RETRIES,
};
use common::{client, missing, write_config, ChildServer, Peer, PING_KEY};
use serde_json::json;
use sqlx::Connection;

/// The address the leader-to-be reaches the database through.
const CUT_ADDRESS: &str = "127.0.0.2";
/// How long the partition lasts at least: more than twice the 5 s a ping
/// waits for the database (`PING_WAIT`), so a cut-off replica has answers to
/// give before the heal.
const PARTITION: Duration = Duration::from_secs(12);

/// Every packet between one loopback address and a port, dropped both ways
/// (an nftables table of the test's own; deleted on drop).
struct Partition {
    table: String,
}

impl Partition {
    fn cut(address: &str, port: u16) -> Partition {
        let table = format!("overdue_partition_{}_{port}", std::process::id());
        nft(&format!(
            "table ip {table} {{\n\
               chain out {{\n\
                 type filter hook output priority 0; policy accept;\n\
                 ip daddr {address} tcp dport {port} drop\n\
                 ip saddr {address} tcp sport {port} drop\n\
               }}\n\
             }}\n"
        ))
        .unwrap_or_else(|e| panic!("cannot add the nftables rules: {e}"));
        Partition { table }
    }

    fn heal(self) {
        drop(self);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        if let Err(e) = nft(&format!("delete table ip {}\n", self.table)) {
            eprintln!("cannot delete nftables table {}: {e}", self.table);
        }
    }
}

/// Runs an nftables script.
fn nft(script: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .map_err(|e| format!("nft stdin: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft -f - failed ({}): {}\n{script}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Fails unless this test can drop packets here: `nft` installed, running
/// as root, and nftables usable (`peers`).
fn need_partition() {
    common::need_program(Peer::Nftables, "nft", "Debian's nftables");
    if let Err(e) = nft("list tables\n") {
        missing(
            Peer::Nftables,
            &format!("nftables that takes rules ({e})"),
            "root with CAP_NET_ADMIN",
        );
    }
}

fn config(url: &str, hook: &WebhookSink) -> String {
    format!(
        r#"listen = "127.0.0.1:0"
database_url = "{url}"
ping_key = "{PING_KEY}"
heartbeat_period = "1s"
lease_ttl = "3s"
ping_log_limit = 1000000
{hook}{PERSISTENT_RETRIES}"#,
        hook = hook.per_check_toml("1s", "200ms", "300ms"),
    )
}

async fn create(http: &reqwest::Client, base: &str, slug: &str, interval: &str, grace: &str) {
    let body = json!({"slug": slug, "interval": interval, "grace": grace});
    common::create_on(http, base, body).await;
}

/// A ping by slug through `base` that must be answered 200.
async fn ping(http: &reqwest::Client, base: &str, slug: &str, suffix: &str) {
    common::get_200(http, &format!("{base}/ping/{PING_KEY}/{slug}{suffix}")).await;
}

/// One probe ping as the client saw it.
#[derive(Debug, Clone)]
struct Probe {
    /// Which replica it went to.
    to: &'static str,
    items: u64,
    /// The HTTP status, or "timeout", or another transport error.
    result: Result<u16, String>,
    took: Duration,
    answered: Instant,
}

/// Sends a probe ping (its own `items` value) every 100 ms through each
/// of `targets` until `stop`, each waiting for its answer up to the hang
/// guard.
fn probe_load(
    targets: Vec<(&'static str, String)>,
    stop: tokio_util::sync::CancellationToken,
) -> (Arc<Mutex<Vec<Probe>>>, tokio::task::JoinHandle<()>) {
    let probes = Arc::new(Mutex::new(Vec::new()));
    let kept = probes.clone();
    let task = tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(common::HANG_GUARD)
            .build()
            .unwrap();
        let mut items = 1_000_u64;
        let mut sent = tokio::task::JoinSet::new();
        while !stop.is_cancelled() {
            for (to, base) in &targets {
                items += 1;
                let (http, to, kept) = (http.clone(), *to, kept.clone());
                let url = format!("{base}/ping/{PING_KEY}/probe?items={items}");
                sent.spawn(async move {
                    let start = Instant::now();
                    let result = match http.get(&url).send().await {
                        Ok(r) => Ok(r.status().as_u16()),
                        Err(e) if e.is_timeout() => Err("timeout".to_string()),
                        Err(e) => Err(format!("{e:#}")),
                    };
                    kept.lock().unwrap().push(Probe {
                        to,
                        items,
                        result,
                        took: start.elapsed(),
                        answered: Instant::now(),
                    });
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        while sent.join_next().await.is_some() {}
    });
    (probes, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "initdb",
    ignore = "needs PostgreSQL's server programs, as root (Debian's postgresql)"
)]
#[cfg_attr(
    all(overdue_missing = "nftables", not(overdue_missing = "initdb")),
    ignore = "needs nft, as root (Debian's nftables)"
)]
async fn a_leader_cut_off_from_postgres_stops_sending_and_another_takes_over() {
    need_partition();
    let cluster = PgCluster::create_on(&["127.0.0.1", CUT_ADDRESS]);
    let url = cluster.url();
    let hook = WebhookSink::start().await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config_a = write_config(dir_a.path(), &config(&cluster.url_via(CUT_ADDRESS), &hook));
    let config_b = write_config(dir_b.path(), &config(&url, &hook));
    lease::migrate_and_log_the_lease(&url, &config_b).await;

    // A leads (it starts first), B follows.
    let mut a = ChildServer::spawn(&config_a);
    let (first, _) = lease::wait_for_leader(&url, None).await;
    assert_eq!(first, a.replica());
    let mut b = ChildServer::spawn(&config_b);
    let (name_a, name_b) = (a.replica(), b.replica());
    let http = client();

    // flaky fails now (A announces it) and recovers during the partition;
    // silent-early goes down during the partition before B can have taken
    // over, silent-late after; fails-via-b fails through B during the
    // partition, after-heal through A after it; steady keeps checking in
    // through B and never goes down; probe takes the pings whose answers
    // are checked against the database.
    for (slug, interval, grace) in [
        ("flaky", "1h", "1h"),
        ("silent-early", "1s", "1s"),
        ("silent-late", "3s", "3s"),
        ("fails-via-b", "1h", "1h"),
        ("after-heal", "1h", "1h"),
        ("steady", "5s", "5s"),
        ("probe", "1h", "1h"),
    ] {
        create(&http, &b.base, slug, interval, grace).await;
    }
    ping(&http, &b.base, "flaky", "/fail").await;
    wait_announced(&hook, "flaky", "firing", 1).await;
    // Nothing in flight at the cut: what A sent is recorded as delivered.
    wait_all_delivered(&url).await;
    let before = hook.requests();
    assert!(
        before
            .iter()
            .all(|r| r.header("x-overdue-replica") == Some(name_a.as_str())),
        "the leader sent it, and said so"
    );

    // A knows the probe check (routed from memory, no lookup in the
    // database), so its pings go straight to its ping writer.
    ping(&http, &a.base, "probe", "?items=1").await;
    for slug in ["silent-early", "silent-late", "steady"] {
        ping(&http, &b.base, slug, "").await;
    }
    let stop_probes = tokio_util::sync::CancellationToken::new();
    // steady: a ping through B every 500 ms until the probes stop; every
    // answer is kept and checked once the task is joined.
    let steady = {
        let (http, base, stop) = (http.clone(), b.base.clone(), stop_probes.clone());
        tokio::spawn(async move {
            let mut answers = Vec::new();
            while !stop.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let url = format!("{base}/ping/{PING_KEY}/steady");
                answers.push(http.get(&url).send().await.map(|r| r.status().as_u16()));
            }
            answers
        })
    };
    let (probes, probing) = probe_load(
        vec![("A", a.base.clone()), ("B", b.base.clone())],
        stop_probes.clone(),
    );

    // The cut.
    let partition = Partition::cut(CUT_ADDRESS, cluster.port);
    let cut_ms = unix_ms(std::time::SystemTime::now());
    let cut = Instant::now();

    let (holder, _) = lease::wait_for_leader(&url, Some(&name_a)).await;
    assert_eq!(holder, name_b);
    let took_over = cut.elapsed();
    ping(&http, &b.base, "flaky", "").await;
    ping(&http, &b.base, "fails-via-b", "/fail").await;
    for (check, status) in [
        ("silent-early", "firing"),
        ("silent-late", "firing"),
        ("flaky", "resolved"),
        ("fails-via-b", "firing"),
    ] {
        wait_announced(&hook, check, status, 1).await;
    }
    // Cut off longer than the clients wait for an answer, the probes going on.
    tokio::time::sleep((cut + PARTITION).saturating_duration_since(Instant::now())).await;
    partition.heal();
    let partition_lasted = cut.elapsed();
    let healed = Instant::now();
    let healed_ms = unix_ms(std::time::SystemTime::now());

    // The old leader rejoins as a follower: it learns that it lost the
    // lease, and its pings are stored and reach the leader's evaluator.
    let start = Instant::now();
    let stepped_down = loop {
        let log = a.log();
        let at = [
            "lost the leader lease to another replica",
            "the leader lease ran out; stepping down",
        ]
        .iter()
        .filter_map(|needle| logged_at(&log, needle))
        .min();
        if let Some(at) = at {
            break at;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "the old leader never noticed:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let start = Instant::now();
    let rejoined = loop {
        let r = http
            .get(format!("{}/ping/{PING_KEY}/after-heal/fail", a.base))
            .timeout(common::HANG_GUARD)
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) {
            break healed.elapsed();
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "A never stored a ping again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    wait_announced(&hook, "after-heal", "firing", 1).await;
    stop_probes.cancel();
    probing.await.unwrap();
    let steady = steady.await.expect("the steady pinger");
    assert!(!steady.is_empty(), "steady was pinged");
    let refused: Vec<_> = steady.iter().filter(|a| !matches!(a, Ok(200))).collect();
    assert!(refused.is_empty(), "steady through B: {refused:?}");
    // Everything delivered, then both replicas gone: no late or repeated
    // request can come after this.
    wait_all_delivered(&url).await;
    a.halt();
    b.halt();

    // The lease: A's term, then B's, which began only once A's had run out
    // (by the database's clock); A never led again.
    let terms = lease::terms(&url).await;
    assert_terms_follow_each_other(&terms);
    assert_eq!(
        terms.iter().map(|t| t.holder.as_str()).collect::<Vec<_>>(),
        [name_a.as_str(), name_b.as_str()],
        "{terms:#?}"
    );
    let (a_ended, b_began) = (terms[0].ended, terms[1].began);
    assert!(!terms[0].released, "{terms:#?}");
    // A knew that its term was over, and said so (`overdue_is_leader`
    // follows the same), without an answer from the database: its term ends
    // on its own clock, so it stepped down before the partition healed.
    assert!(
        stepped_down < healed_ms,
        "A stepped down at {stepped_down}, after the heal at {healed_ms} (cut at {cut_ms}, \
         B's term began at {b_began})"
    );

    // Deliveries: nothing from A after its lease ended, nothing from B
    // before its term began.
    let requests = hook.requests();
    let from = |r: &Request| {
        r.header("x-overdue-replica")
            .expect("every request says its replica")
            .to_string()
    };
    let from_a: Vec<&Request> = requests.iter().filter(|r| from(r) == name_a).collect();
    assert!(!from_a.is_empty(), "A delivered before the cut");
    for r in &from_a {
        assert!(
            r.received_ms < a_ended,
            "the cut-off leader sent at {} after its lease ran out at {a_ended} (cut at {cut_ms})",
            r.received_ms
        );
    }
    for r in requests.iter().filter(|r| from(r) != name_a) {
        assert_eq!(from(r), name_b);
        // +1: the database rounds to the millisecond, the receiver floors.
        assert!(
            r.received_ms + 1 >= b_began,
            "B sent at {} before its term began at {b_began}",
            r.received_ms
        );
    }

    // Each incident announced and resolved once: one key each, one request
    // per key (the receiver accepted every one), and no announcement that
    // should not be.
    let seen = announcements(&requests);
    for ((check, starts, status), keys) in &seen {
        assert_eq!(
            keys.len(),
            1,
            "{check} (incident of {starts}) {status} was enqueued {} times: {keys:?}",
            keys.len()
        );
    }
    let expected: BTreeSet<(&str, &str)> = [
        ("flaky", "firing"),
        ("flaky", "resolved"),
        ("silent-early", "firing"),
        ("silent-late", "firing"),
        ("fails-via-b", "firing"),
        ("after-heal", "firing"),
    ]
    .into();
    let got: BTreeSet<(&str, &str)> = seen
        .keys()
        .map(|(c, _, s)| (c.as_str(), s.as_str()))
        .collect();
    assert_eq!(got, expected, "{seen:#?}");
    assert_eq!(seen.len(), expected.len(), "one incident each: {seen:#?}");
    let mut per_key: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &requests {
        *per_key
            .entry(r.header("idempotency-key").unwrap())
            .or_default() += 1;
    }
    let repeated: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "sent more than once: {repeated:?}");
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM notifications")
        .fetch_one(&mut c)
        .await
        .unwrap();
    assert_eq!(stored as usize, per_key.len());

    // Pings: while cut off, A answered 503 or nothing before the client
    // gave up; B answered 200 throughout; every 200 is stored, once.
    let probes = probes.lock().unwrap().clone();
    let stored: Vec<i64> = sqlx::query_scalar(
        "SELECT items FROM pings p JOIN checks c ON c.id = p.check_id WHERE c.slug = 'probe' \
         UNION ALL \
         SELECT items FROM ping_inbox p JOIN checks c ON c.id = p.check_id WHERE c.slug = 'probe'",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let mut stored_count: BTreeMap<u64, usize> = BTreeMap::new();
    for items in &stored {
        *stored_count.entry(*items as u64).or_default() += 1;
    }
    let twice: Vec<_> = stored_count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "pings stored twice: {twice:?}");
    let mut tally: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for p in &probes {
        let outcome = match &p.result {
            Ok(s) => s.to_string(),
            Err(e) => e.clone(),
        };
        *tally.entry((p.to, outcome)).or_default() += 1;
        match &p.result {
            Ok(200) => assert!(
                stored_count.contains_key(&p.items),
                "{p:?} was answered 200 but is not stored"
            ),
            Ok(503) => assert_eq!(p.to, "A", "B was never cut off: {p:?}"),
            other => panic!(
                "{p:?}: {other:?}: a ping is answered 200 or 503, also by a replica cut off \
                 from its database"
            ),
        }
    }
    // A did not hold its pings until the heal: cut off, it answered 503
    // while still cut off.
    assert!(
        probes
            .iter()
            .any(|p| p.to == "A" && p.result == Ok(503) && p.answered < healed),
        "A answered no ping 503 before the heal: {tally:?}"
    );
    let a_unanswered = probes
        .iter()
        .filter(|p| p.to == "A" && p.result != Ok(200))
        .count();
    assert!(a_unanswered > 0, "A was cut off: {tally:?}");
    let stored_anyway = probes
        .iter()
        .filter(|p| p.result != Ok(200) && stored_count.contains_key(&p.items))
        .count();
    let a_503_slowest = probes
        .iter()
        .filter(|p| p.to == "A" && p.result == Ok(503))
        .map(|p| p.took)
        .max()
        .unwrap_or_default();
    let b_failed = probes
        .iter()
        .filter(|p| p.to == "B" && p.result != Ok(200))
        .count();
    assert_eq!(b_failed, 0, "B kept its database: {tally:?}");

    let a_last = from_a.iter().map(|r| r.received_ms).max().unwrap();
    println!(
        "partition: cut for {:.1}s; A's lease ran out {} ms after the cut (database's clock), \
         B's term began {} ms after the cut (B saw it {:.1}s after); A's last request {} ms \
         before the cut; {} notifications, each key sent once; A stepped down {} ms after the \
         cut (the heal came {} ms after it) and stored pings again {:.1}s after the heal; probes \
         {tally:?} (A's slowest 503 after {:.1}s), of those not answered 200, {stored_anyway} \
         stored anyway",
        partition_lasted.as_secs_f64(),
        a_ended - cut_ms,
        b_began - cut_ms,
        took_over.as_secs_f64(),
        cut_ms - a_last,
        per_key.len(),
        stepped_down - cut_ms,
        healed_ms - cut_ms,
        rejoined.as_secs_f64(),
        a_503_slowest.as_secs_f64(),
    );
    drop((a, b));
    drop(cluster);
}

/// Waits until every notification is delivered (none pending or in flight).
async fn wait_all_delivered(url: &str) {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    let start = Instant::now();
    loop {
        let rows: Vec<(String, String)> = sqlx::query_as("SELECT id, state FROM notifications")
            .fetch_all(&mut c)
            .await
            .unwrap();
        if !rows.is_empty() && rows.iter().all(|(_, s)| s == "delivered") {
            return;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "notifications not delivered: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// When a line containing `needle` was first logged (its timestamp, Unix ms).
fn logged_at(log: &str, needle: &str) -> Option<i64> {
    let line = log.lines().find(|l| l.contains(needle))?;
    // Text lines begin with an RFC 3339 instant (ANSI colour codes, if
    // any, before it are skipped).
    let line = line.trim_start_matches(|c: char| !c.is_ascii_digit());
    let stamp = line.split(['Z', ' ']).next()?;
    chrono::DateTime::parse_from_rfc3339(&format!("{stamp}Z"))
        .ok()
        .map(|t| t.timestamp_millis())
}
