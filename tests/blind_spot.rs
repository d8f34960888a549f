//! Blind spots (SPEC §6.2): after a span in which no replica accepted pings,
//! one `OverdueBlindSpot` notice to the `fallback_receiver` naming the span
//! and the checks expected to check in during it; once per span, across
//! restarts and replicas; none for a wall-clock step while the server ran.
//!
//! - The leader's worker, its step driven directly on a store (both
//!   backends): which checks are listed, the cap, and the spans told
//!   without a notice.
//! - End to end, the real binary with real webhook receivers: stopped for
//!   longer than twice `heartbeat_period` while a check is due, started
//!   again (SQLite); two replicas on PostgreSQL; a wall-clock step under
//!   libfaketime (no notice, the step counted).

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sinks::{unix_ms, WebhookSink};
use common::{Backend, ChildServer, TestDb, HANG_GUARD};
use overdue::config::Config;
use overdue::domain::check::{CheckInput, CheckSpec};
use overdue::domain::fold::Ping;
use overdue::domain::ping::PingKind;
use overdue::store::notify::NotificationFilter;
use overdue::store::{CheckSource, Store};
use overdue::workers::blind_spots::BlindSpots;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// The worker's step, on a store.

/// 2026-12-05T03:00:00Z: the outage starts here and lasts 20 minutes.
const T0: i64 = 1_796_439_600_000;
const MIN: i64 = 60_000;
const GAP: i64 = 2_000;

async fn open(backend: Backend, toml: &str) -> (TestDb, Arc<dyn Store>, BlindSpots) {
    let db = TestDb::new(backend).await;
    let config = Config::from_toml(&db.config_toml(toml)).unwrap();
    let store = overdue::store::open(config.database()).await.unwrap();
    let (_, rx) = tokio::sync::watch::channel(Arc::new(config.notify.clone()));
    let worker = BlindSpots {
        store: store.clone(),
        config: rx,
        base_url: "http://overdue.test".into(),
        deliver: Arc::new(tokio::sync::Notify::new()),
        period: Duration::from_secs(1),
    };
    (db, store, worker)
}

const RECEIVERS: &str = r#"
fallback_receiver = "ops"

[[receivers]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9/hook"

[[receivers]]
name = "ops"
type = "webhook"
url = "http://127.0.0.1:9/ops"

[route]
receiver = "hook"
"#;

async fn check(store: &Arc<dyn Store>, json: &str) -> i64 {
    let spec = CheckSpec::from_input(serde_json::from_str::<CheckInput>(json).unwrap()).unwrap();
    store
        .create_check(&spec, CheckSource::Api, T0 - 60 * MIN)
        .await
        .unwrap()
        .id
}

async fn pings(store: &Arc<dyn Store>, list: &[(i64, i64, PingKind)]) {
    let pings: Vec<Ping> = list
        .iter()
        .map(|&(id, at, kind)| Ping::new(id, at, kind))
        .collect();
    store.append_pings(&pings).await.unwrap();
    common::fold_all(store).await;
}

/// No replica beat from `from` to `to`.
async fn outage(store: &Arc<dyn Store>, from: i64, to: i64) {
    assert_eq!(store.heartbeat("r", 0, from, GAP, &[]).await.unwrap(), None);
    let span = store
        .heartbeat("r", 0, to, GAP, &[])
        .await
        .unwrap()
        .unwrap();
    assert!(span.blind);
}

async fn notices(store: &Arc<dyn Store>) -> Vec<Value> {
    store
        .list_notifications(&NotificationFilter {
            limit: 1000,
            ..NotificationFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.kind == "blind_spot")
        .map(|n| {
            assert_eq!(n.receiver, "ops");
            serde_json::from_str(&n.payload).unwrap()
        })
        .collect()
}

both_backends!(
    the_checks_expected_inside_are_listed,
    |backend| async move {
        let (_db, store, worker) = open(backend, RECEIVERS).await;
        let due_inside = check(&store, r#"{"slug":"due-inside","interval":"10m"}"#).await;
        let since = check(&store, r#"{"slug":"pinged-since","interval":"10m"}"#).await;
        let cron = check(&store, r#"{"slug":"cron","cron":"*/15 * * * *"}"#).await;
        let failed = check(&store, r#"{"slug":"failed","interval":"10m"}"#).await;
        let after = check(&store, r#"{"slug":"due-after","interval":"1h"}"#).await;
        let before = check(&store, r#"{"slug":"late-before","interval":"1m"}"#).await;
        let paused = check(&store, r#"{"slug":"paused","interval":"10m"}"#).await;
        check(&store, r#"{"slug":"never-pinged","interval":"1m"}"#).await;
        let quiet = check(
            &store,
            r#"{"slug":"quiet","interval":"10m",
            "active_hours":[{"start":"09:00","end":"17:00","days":["mon-sun"]}]}"#,
        )
        .await;
        pings(
            &store,
            &[
                (due_inside, T0 - 5 * MIN, PingKind::Success),
                (since, T0 - 8 * MIN, PingKind::Success),
                // The job checked in again after the server came back.
                (since, T0 + 21 * MIN, PingKind::Success),
                (cron, T0 - 10 * MIN, PingKind::Success),
                (failed, T0 - 5 * MIN, PingKind::Fail),
                (after, T0 - 5 * MIN, PingKind::Success),
                (before, T0 - 60 * MIN, PingKind::Success),
                (paused, T0 - 5 * MIN, PingKind::Success),
                (quiet, T0 - 5 * MIN, PingKind::Success),
            ],
        )
        .await;
        store.set_paused(paused, true, T0 - MIN).await.unwrap();
        outage(&store, T0, T0 + 20 * MIN).await;

        assert_eq!(worker.tick(T0 + 22 * MIN).await.unwrap(), 1);
        let sent = notices(&store).await;
        assert_eq!(sent.len(), 1);
        let m = &sent[0];
        assert_eq!(m["receiver"], "ops");
        assert_eq!(m["groupLabels"], json!({"alertname": "OverdueBlindSpot"}));
        let alerts = m["alerts"].as_array().unwrap();
        assert_eq!(
            alerts.len(),
            1,
            "the checks are no alerts of their own: {m}"
        );
        let a = &alerts[0];
        assert_eq!(a["labels"]["alertname"], "OverdueBlindSpot");
        assert_eq!(a["annotations"]["span_start"], "2026-12-05T03:00:00Z");
        assert_eq!(a["annotations"]["span_end"], "2026-12-05T03:20:00Z");
        assert_eq!(a["annotations"]["span_duration"], "20m");
        // Earliest expected check-in first: cron at 03:00, pinged-since at
        // 03:02 (from its log: it checked in again since), due-inside and
        // failed (the last failure is the reference) at 03:05.
        assert_eq!(
            a["annotations"]["checks"],
            "cron\npinged-since\ndue-inside\nfailed"
        );
        assert_eq!(a["annotations"]["checks_count"], "4");

        // Told once: a second step (a restart's, a new leader's) tells nothing.
        assert_eq!(worker.tick(T0 + 23 * MIN).await.unwrap(), 0);
        assert_eq!(notices(&store).await.len(), 1);
    }
);

both_backends!(a_long_list_is_cut_to_a_hundred, |backend| async move {
    let (_db, store, worker) = open(backend, RECEIVERS).await;
    let mut list = Vec::new();
    for i in 0..150 {
        let id = check(&store, &format!(r#"{{"slug":"c{i:03}","interval":"10m"}}"#)).await;
        list.push((id, T0 - 5 * MIN, PingKind::Success));
    }
    pings(&store, &list).await;
    outage(&store, T0, T0 + 20 * MIN).await;
    assert_eq!(worker.tick(T0 + 21 * MIN).await.unwrap(), 1);
    let sent = notices(&store).await;
    let a = &sent[0]["alerts"][0]["annotations"];
    let checks: Vec<&str> = a["checks"].as_str().unwrap().lines().collect();
    assert_eq!(checks.len(), 101);
    assert_eq!(checks[0], "c000");
    assert_eq!(checks[99], "c099");
    assert_eq!(checks[100], "… and 50 more");
    assert_eq!(a["checks_count"], "150");
    assert!(a["summary"]
        .as_str()
        .unwrap()
        .contains("150 checks were expected"));
});

both_backends!(
    a_span_with_nothing_expected_or_nobody_to_tell_is_marked_without_a_notice,
    |backend| async move {
        // Nothing expected: no notice, and the span is not looked at again.
        let (_db, store, worker) = open(backend, RECEIVERS).await;
        let later = check(&store, r#"{"slug":"later","interval":"1h"}"#).await;
        pings(&store, &[(later, T0 - 5 * MIN, PingKind::Success)]).await;
        outage(&store, T0, T0 + 20 * MIN).await;
        assert_eq!(worker.tick(T0 + 21 * MIN).await.unwrap(), 0);
        assert!(notices(&store).await.is_empty());
        assert!(store.pending_blind_spots().await.unwrap().is_empty());

        // No receiver configured: logged, marked, nothing enqueued.
        let (_db, store, worker) = open(backend, "").await;
        let due = check(&store, r#"{"slug":"due","interval":"10m"}"#).await;
        pings(&store, &[(due, T0 - 5 * MIN, PingKind::Success)]).await;
        outage(&store, T0, T0 + 20 * MIN).await;
        assert_eq!(worker.tick(T0 + 21 * MIN).await.unwrap(), 0);
        assert!(notices(&store).await.is_empty());
        assert!(store.pending_blind_spots().await.unwrap().is_empty());
    }
);

// ---------------------------------------------------------------------------
// End to end: the real binary, real receivers.

/// A database, a config file pointing at it and two webhook receivers:
/// `hook` (the route's) and `ops` (the fallback receiver).
struct Setup {
    db: TestDb,
    config: PathBuf,
    hook: WebhookSink,
    ops: WebhookSink,
    http: reqwest::Client,
}

impl Setup {
    async fn new(backend: Backend) -> Setup {
        let db = TestDb::new(backend).await;
        let hook = WebhookSink::start().await;
        let ops = WebhookSink::start().await;
        let config = common::write_config(
            db.dir.path(),
            &db.config_toml(&format!(
                r#"heartbeat_period = "1s"
lease_ttl = "3s"
fallback_receiver = "ops"

[[receivers]]
name = "hook"
type = "webhook"
url = "{}"
timeout = "2s"

[[receivers]]
name = "ops"
type = "webhook"
url = "{}"
timeout = "2s"

[route]
receiver = "hook"
group_wait = "100ms"
"#,
                hook.url("/hook"),
                ops.url("/ops")
            )),
        );
        Setup {
            db,
            config,
            hook,
            ops,
            http: common::client(),
        }
    }

    async fn create(&self, server: &ChildServer, body: Value) -> String {
        common::create_on(&self.http, &server.base, body).await
    }

    async fn ping(&self, server: &ChildServer, uuid: &str) {
        let r = self
            .http
            .get(format!("{}/ping/{uuid}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }

    /// The blind-spot notices a sink received.
    fn blind_spots(sink: &WebhookSink) -> Vec<common::sinks::Request> {
        sink.requests()
            .into_iter()
            .filter(|r| r.json()["groupLabels"]["alertname"] == "OverdueBlindSpot")
            .collect()
    }
}

fn sigkill(mut server: ChildServer) {
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// SIGTERM, and wait for a clean exit (its last heartbeat written).
fn stop(mut server: ChildServer) {
    server.signal("TERM");
    let status = tokio::task::block_in_place(|| server.child.wait()).unwrap();
    assert!(status.success(), "{status:?}: {}", server.log());
}

fn instant_ms(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_the_fallback_receiver_is_told_once() {
    let began = Instant::now();
    let s = Setup::new(Backend::Sqlite).await;
    let server = ChildServer::spawn(&s.config);
    let inside = s
        .create(&server, json!({"slug": "nightly-export", "interval": "3s"}))
        .await;
    let later = s
        .create(&server, json!({"slug": "weekly", "interval": "1h"}))
        .await;
    s.create(&server, json!({"slug": "never-pinged", "interval": "1s"}))
        .await;
    let pinged = unix_ms(std::time::SystemTime::now());
    s.ping(&server, &inside).await;
    s.ping(&server, &later).await;

    // Down for 4 s, more than twice the period: nightly-export's due instant
    // (its ping + 3 s) falls inside.
    sigkill(server);
    let killed = unix_ms(std::time::SystemTime::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let restarted = unix_ms(std::time::SystemTime::now());
    let server = ChildServer::spawn(&s.config);

    let got = s.ops.wait_for(1).await;
    let body = got[0].json();
    assert_eq!(body["receiver"], "ops");
    assert_eq!(body["status"], "firing");
    assert_eq!(
        got[0].header("Idempotency-Key"),
        body["idempotencyKey"].as_str()
    );
    let alerts = body["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1, "{body}");
    let a = &alerts[0];
    assert_eq!(a["labels"]["alertname"], "OverdueBlindSpot");
    assert_eq!(a["annotations"]["checks"], "nightly-export", "{body}");
    assert_eq!(a["annotations"]["checks_count"], "1");
    // The span: from the last heartbeat before the kill (at most a period
    // before it) to the first after the restart.
    let (from, to) = (
        instant_ms(&a["annotations"]["span_start"]),
        instant_ms(&a["annotations"]["span_end"]),
    );
    assert!(
        from <= killed && from >= pinged - 2_000,
        "{from} vs killed {killed}"
    );
    assert!(
        to >= restarted - 1_000 && to <= unix_ms(std::time::SystemTime::now()),
        "{to}"
    );
    assert!((instant_ms(&a["startsAt"]) - from).abs() < 1_000, "{body}");
    assert!(
        server.log().contains("a blind spot"),
        "logged: {}",
        server.log()
    );

    // Nothing more: not at the next heartbeats, not to the route's receiver,
    // and not after another restart.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.ops.requests().len(), 1);
    assert!(Setup::blind_spots(&s.hook).is_empty());
    stop(server);
    let server = ChildServer::spawn(&s.config);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.ops.requests().len(), 1, "told again after a restart");
    assert!(
        !server.log().contains("notice enqueued"),
        "{}",
        server.log()
    );
    assert_eq!(
        s.db.count("SELECT COUNT(*) FROM notifications WHERE kind = 'blind_spot'")
            .await,
        1
    );
    drop(server);
    println!(
        "blind spot on SQLite: told once, {:?} in all",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn two_replicas_on_postgres_tell_once() {
    common::need_postgres();
    let began = Instant::now();
    let s = Setup::new(Backend::Postgres).await;
    let a = ChildServer::spawn(&s.config);
    let b = ChildServer::spawn(&s.config);
    let inside = s
        .create(&a, json!({"slug": "nightly-export", "interval": "3s"}))
        .await;
    s.ping(&b, &inside).await;
    sigkill(a);
    sigkill(b);
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Both come back at once; whichever leads tells, the other does not.
    let a = ChildServer::spawn(&s.config);
    let b = ChildServer::spawn(&s.config);
    let got = s.ops.wait_for(1).await;
    assert_eq!(
        got[0].json()["alerts"][0]["annotations"]["checks"],
        "nightly-export"
    );
    // Several heartbeats of both, and a handover of the lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop(a);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.ops.requests().len(),
        1,
        "{:?}",
        s.ops
            .requests()
            .iter()
            .map(|r| r.text())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        s.db.count("SELECT COUNT(*) FROM notifications WHERE kind = 'blind_spot'")
            .await,
        1
    );
    assert_eq!(
        s.db.count("SELECT COUNT(*) FROM unobserved WHERE blind AND noticed_at IS NOT NULL")
            .await,
        1
    );
    drop(b);
    println!(
        "blind spot on PostgreSQL, two replicas: told once, {:?} in all",
        began.elapsed()
    );
}

async fn metric(http: &reqwest::Client, server: &ChildServer, series: &str) -> f64 {
    let text = common::get_text(http, format!("{}/metrics", server.base)).await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "faketime",
    ignore = "needs libfaketime (Debian's faketime)"
)]
async fn a_wall_clock_step_while_running_is_counted_and_no_blind_spot() {
    let began = Instant::now();
    let s = Setup::new(Backend::Sqlite).await;
    let offset = s.db.dir.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let server = ChildServer::spawn_faked(&s.config, &offset);
    let inside = s
        .create(&server, json!({"slug": "nightly-export", "interval": "3s"}))
        .await;
    s.ping(&server, &inside).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Two hours pass in an instant: nightly-export's due instant is in the
    // span skipped, as it would be in an outage of two hours.
    std::fs::write(&offset, "+2h\n").unwrap();
    let forward = "overdue_clock_steps_total{direction=\"forward\"}";
    tokio::time::timeout(HANG_GUARD, async {
        while metric(&s.http, &server, forward).await < 1.0
            || s.db.count("SELECT COUNT(*) FROM unobserved").await == 0
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("hang guard: the step and its span");
    // The leader looks for blind spots every period: three of them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.ops.requests().is_empty(),
        "told: {:?}",
        s.ops
            .requests()
            .iter()
            .map(|r| r.text())
            .collect::<Vec<_>>()
    );
    assert!(Setup::blind_spots(&s.hook).is_empty());
    assert_eq!(metric(&s.http, &server, forward).await, 1.0);
    // The span is unobserved time all the same, and stored as no blind spot.
    assert!(
        s.db.count("SELECT COUNT(*) FROM unobserved WHERE NOT blind")
            .await
            >= 1
    );
    assert_eq!(
        s.db.count("SELECT COUNT(*) FROM unobserved WHERE blind")
            .await,
        0
    );
    let log = server.log();
    assert!(!log.contains("a blind spot"), "{log}");
    assert!(log.contains("a wall-clock step skipped this span"), "{log}");
    drop(server);
    println!(
        "wall-clock step: no blind spot, {:?} in all",
        began.elapsed()
    );
}
