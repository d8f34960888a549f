//! `/metrics` end to end: the real server, scraped over HTTP; its output is
//! checked by the real `promtool`, and one test runs the real Prometheus
//! server with the shipped `alerts/overdue.rules.yml` against it and waits
//! for its alerts to fire and clear.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sinks::{Behaviour, WebhookSink};
use common::{client, Backend, TestDb, TestServer};
use overdue::clock::now_ms;
use overdue::config::Config;
use overdue::domain::check::CheckSpec;
use overdue::lease::leading::LeaderWorker;
use overdue::store::CheckSource;
use overdue::workers::evaluator::{Evaluator, Notice, Observed};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text format's sample lines (unescaping label values).
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => {
                let (n, v) = line.split_once(' ').expect("name value");
                out.push(Sample {
                    name: n.to_string(),
                    labels: BTreeMap::new(),
                    value: v.parse().expect("value"),
                });
                continue;
            }
        };
        let mut labels = BTreeMap::new();
        let mut chars = rest.chars();
        loop {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            let key = key.trim_start_matches(',').to_string();
            if key.starts_with('}') || key.is_empty() {
                break;
            }
            assert_eq!(chars.next(), Some('"'), "{line}");
            let mut value = String::new();
            loop {
                match chars.next().expect("unterminated label value") {
                    '\\' => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => panic!("bad escape in {line}"),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.insert(key, value);
            let rest: String = chars.clone().collect();
            if rest.starts_with('}') {
                chars.next();
                break;
            }
        }
        let value: String = chars.collect();
        out.push(Sample {
            name: name.to_string(),
            labels,
            value: value.trim().parse().expect("value"),
        });
    }
    out
}

/// GET /metrics on `base`, expecting 200.
async fn scrape(base: &str) -> String {
    let r = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        r.headers()
    );
    r.text().await.unwrap()
}

/// The value of the one sample of `name` whose labels include `with`.
fn value(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && with
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(found.len() <= 1, "several {name} {with:?}: {found:?}");
    found.first().map(|s| s.value)
}

/// The `check` labels that carry per-check series.
fn checks_in(samples: &[Sample]) -> Vec<String> {
    let mut c: Vec<String> = samples
        .iter()
        .filter(|s| s.name == "overdue_check_up")
        .map(|s| s.labels["check"].clone())
        .collect();
    c.sort();
    c
}

/// Scrapes until `pred` holds (the evaluator sees pings within ~100 ms).
async fn scrape_until(base: &str, what: &str, pred: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let start = Instant::now();
    loop {
        let samples = parse(&scrape(base).await);
        if pred(&samples) {
            return samples;
        }
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn uuid_of(c: &Value) -> String {
    c["uuid"].as_str().unwrap().to_string()
}

/// How `/metrics` names a check without a slug.
fn key_of(c: &Value) -> String {
    c["unique_key"].as_str().unwrap().to_string()
}

/// Fails unless Debian's prometheus is installed (`peers`).
fn need_prometheus(program: &str) {
    common::need_program(common::Peer::Prometheus, program, "Debian's prometheus");
}

both_backends!(per_check_series_follow_the_checks, |backend| async move {
    let s = TestServer::start(backend, "[metrics]\nlabels = [\"team\"]").await;
    let a = s
        .create_check(
            json!({"slug": "backup", "name": "Nightly \"backup\" \\ db\nsecond line",
                             "interval": "1h", "grace": "10m",
                             "labels": {"team": "da\"ta\\ops\nx", "tier": "1"}}),
        )
        .await;
    let b = s
        .create_check(json!({"name": "No slug", "interval": "5m"}))
        .await;
    let before_ping = now_ms();
    let (status, _) = s.ping(&format!("/ping/{}?items=12", uuid_of(&a))).await;
    assert_eq!(status, 200);
    let after_ping = now_ms();

    let samples = scrape_until(&s.base, "backup to be up", |x| {
        value(
            x,
            "overdue_check_status",
            &[("check", "backup"), ("status", "up")],
        ) == Some(1.0)
    })
    .await;
    let after_scrape = now_ms();
    // A check without a slug is named by its unique key (never its uuid, a
    // ping capability); a missing label is left out.
    assert_eq!(checks_in(&samples), {
        let mut v = vec!["backup".to_string(), key_of(&b)];
        v.sort();
        v
    });
    let up = samples
        .iter()
        .find(|x| x.name == "overdue_check_up" && x.labels["check"] == "backup")
        .unwrap();
    assert_eq!(
        up.labels,
        BTreeMap::from([
            ("check".to_string(), "backup".to_string()),
            (
                "name".to_string(),
                "Nightly \"backup\" \\ db\nsecond line".to_string()
            ),
            ("team".to_string(), "da\"ta\\ops\nx".to_string()),
        ]),
        "only configured label keys are copied, values round-trip"
    );
    let text = scrape(&s.base).await;
    assert!(
        text.contains(
            r#"overdue_check_up{check="backup",name="Nightly \"backup\" \\ db\nsecond line",team="da\"ta\\ops\nx"} 1"#
        ),
        "escaped as the text format requires:\n{text}"
    );
    let b_labels = samples
        .iter()
        .find(|x| x.name == "overdue_check_up" && x.labels["check"] == key_of(&b))
        .unwrap();
    assert!(!b_labels.labels.contains_key("team"));

    let backup = [("check", "backup")];
    assert_eq!(
        value(&samples, "overdue_check_interval_seconds", &backup),
        Some(3600.0)
    );
    assert_eq!(
        value(&samples, "overdue_check_grace_seconds", &backup),
        Some(600.0)
    );
    assert_eq!(
        value(&samples, "overdue_check_down_after_seconds", &backup),
        Some(4200.0)
    );
    assert_eq!(
        value(&samples, "overdue_check_last_items", &backup),
        Some(12.0)
    );
    assert_eq!(value(&samples, "overdue_check_active", &backup), Some(1.0));
    assert_eq!(value(&samples, "overdue_check_running", &backup), Some(0.0));
    let last = value(
        &samples,
        "overdue_check_last_success_timestamp_seconds",
        &backup,
    )
    .unwrap();
    // The ping's instant, between the clock readings around it (±1 ms for
    // the float); its staleness, at most what passed until the scrape.
    let last_ms = last * 1000.0;
    assert!(
        (before_ping - 1) as f64 <= last_ms && last_ms <= (after_ping + 1) as f64,
        "{last} not between {before_ping} and {after_ping} ms"
    );
    let staleness = value(&samples, "overdue_check_staleness_seconds", &backup).unwrap();
    assert!(
        staleness >= 0.0 && staleness * 1000.0 <= (after_scrape - before_ping + 1) as f64,
        "{staleness}"
    );
    // Exactly one status of the state set is 1.
    for check in ["backup".to_string(), key_of(&b)] {
        let ones: Vec<&Sample> = samples
            .iter()
            .filter(|x| x.name == "overdue_check_status" && x.labels["check"] == check)
            .collect();
        assert_eq!(
            ones.len(),
            6,
            "{check}: new, up, late, down, stalled, paused"
        );
        assert_eq!(ones.iter().filter(|x| x.value == 1.0).count(), 1);
    }
    assert_eq!(
        value(
            &samples,
            "overdue_check_status",
            &[("check", &key_of(&b)), ("status", "new")]
        ),
        Some(1.0)
    );

    // Deleted through the API: its series are gone from the next scrape.
    let r = s
        .client
        .delete(s.url("/api/v1/checks/backup"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let samples = parse(&scrape(&s.base).await);
    assert_eq!(checks_in(&samples), vec![key_of(&b)]);
    assert!(samples
        .iter()
        .all(|x| x.labels.get("check").map(String::as_str) != Some("backup")));
    // The same through healthchecks' v3 API.
    let r = s
        .client
        .delete(s.url(&format!("/api/v3/checks/{}", uuid_of(&b))))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let samples = parse(&scrape(&s.base).await);
    assert_eq!(checks_in(&samples), Vec::<String>::new());
    assert!(samples.iter().all(|x| !x.labels.contains_key("check")));
    s.stop().await;
});

/// The ids of these checks that the evaluator holds, through its snapshot.
async fn held(evaluator: &mut Evaluator, ids: Vec<i64>) -> Vec<i64> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    evaluator.handle(Notice::Snapshot(ids, tx), now_ms()).await;
    rx.await.unwrap().iter().map(|s| s.id).collect()
}

both_backends!(
    the_evaluator_forgets_a_deleted_check,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let config = Config::from_toml(&db.config_toml("")).unwrap();
        let store = overdue::store::open(config.database()).await.unwrap();
        let now = now_ms();
        let check = store
            .create_check(&CheckSpec::with_slug("gone"), CheckSource::Api, now)
            .await
            .unwrap();
        let observed = Arc::new(Observed::new(Vec::new(), config.heartbeat_period));
        observed.beat(now, None);
        let (mut evaluator, handle) = Evaluator::new(store.clone(), observed);
        assert!(!handle.loaded());
        evaluator.load(now).await.unwrap();
        assert!(handle.loaded());
        let ids = vec![check.id, 999_999];
        assert_eq!(held(&mut evaluator, ids.clone()).await, [check.id]);
        db.sql(&format!("DELETE FROM checks WHERE id = {}", check.id))
            .await;
        // What a delete in the API tells the evaluator.
        evaluator.handle(Notice::Changed(check.id), now).await;
        assert!(held(&mut evaluator, ids).await.is_empty());
    }
);

both_backends!(
    an_evaluator_whose_term_ends_holds_no_checks,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let config = Config::from_toml(&db.config_toml("")).unwrap();
        let store = overdue::store::open(config.database()).await.unwrap();
        let now = now_ms();
        let check = store
            .create_check(&CheckSpec::with_slug("held"), CheckSource::Api, now)
            .await
            .unwrap();
        let observed = Arc::new(Observed::new(Vec::new(), config.heartbeat_period));
        let (mut evaluator, handle) = Evaluator::new(store.clone(), observed);
        evaluator.load_term(now).await.unwrap();
        assert!(handle.loaded());
        // Leadership lost: scrapes render service metrics only.
        evaluator.term_ended();
        assert!(!handle.loaded());
        // The next term forgets the last one's checks, then loads them again.
        evaluator.forget();
        assert!(held(&mut evaluator, vec![check.id]).await.is_empty());
        evaluator.load_term(now).await.unwrap();
        assert!(handle.loaded());
        assert_eq!(held(&mut evaluator, vec![check.id]).await, [check.id]);
    }
);

both_backends!(
    evaluator_lag_is_the_age_of_its_earliest_deadline,
    |backend| async move {
        let db = TestDb::new(backend).await;
        let config = Config::from_toml(&db.config_toml("")).unwrap();
        let store = overdue::store::open(config.database()).await.unwrap();
        let now = now_ms();
        common::daily_check_pinged(&store, now).await;
        let observed = Arc::new(Observed::new(Vec::new(), config.heartbeat_period));
        observed.beat(now, None);
        let (evaluator, handle) = Evaluator::new(store.clone(), observed);
        let stop = CancellationToken::new();
        let task = tokio::spawn(evaluator.run(stop.clone(), overdue::lease::always_leader()));
        // Its only deadline: the daily check is late one day after its ping.
        let due = now + 86_400_000;
        let start = Instant::now();
        while handle.lag_ms(due + 5_000) != 5_000 {
            assert!(
                start.elapsed() < common::HANG_GUARD,
                "lag never measured from the deadline"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(handle.lag_ms(due - 1), 0, "nothing overdue yet");
        assert_eq!(handle.lag_ms(now_ms()), 0);
        stop.cancel();
        task.await.unwrap();
    }
);

both_backends!(service_counters_move, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "job", "interval": "1h"}))
        .await;
    let uuid = uuid_of(&c);
    for path in ["", "", "/start", "/0", "/fail", "/3", "/log"] {
        let (status, body) = s.ping(&format!("/ping/{uuid}{path}")).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    assert_eq!(
        s.ping("/ping/0b8e6a4e-51f4-4d7c-9d2d-2a1a3f6c7e11").await.0,
        404
    );
    assert_eq!(s.ping(&format!("/ping/{uuid}?items=x")).await.0, 400);
    assert_eq!(s.ping(&format!("/ping/{uuid}/300")).await.0, 400);
    let samples = parse(&scrape(&s.base).await);
    let pings = |kind| value(&samples, "overdue_pings_total", &[("kind", kind)]);
    assert_eq!(pings("success"), Some(3.0));
    assert_eq!(pings("start"), Some(1.0));
    assert_eq!(pings("fail"), Some(2.0));
    assert_eq!(pings("log"), Some(1.0));
    let rejected = |reason| {
        value(
            &samples,
            "overdue_ping_rejected_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(rejected("not_found"), Some(1.0));
    assert_eq!(rejected("bad_request"), Some(2.0));
    assert_eq!(rejected("unavailable"), Some(0.0));
    assert_eq!(value(&samples, "overdue_is_leader", &[]), Some(1.0));
    assert_eq!(
        value(
            &samples,
            "overdue_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "overdue_notification_queue", &[]),
        Some(0.0)
    );
    assert_eq!(value(&samples, "overdue_dead_letters", &[]), Some(0.0));
    assert!(value(&samples, "overdue_evaluator_lag_seconds", &[]).is_some());
    s.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_attempts_are_counted_by_receiver_and_outcome() {
    let hook = WebhookSink::start().await;
    // The first attempt fails (retried), the second is delivered.
    hook.push(Behaviour::Status(503));
    let toml = hook.hook_toml(
        r#"group_wait = "100ms"

[notifications]
retry_base = "100ms"
"#,
    );
    let s = TestServer::start(Backend::Sqlite, &toml).await;
    let before = parse(&scrape(&s.base).await);
    let count = |x: &[Sample], outcome| {
        value(
            x,
            "overdue_notifications_total",
            &[("receiver", "hook"), ("outcome", outcome)],
        )
    };
    assert_eq!(
        count(&before, "delivered"),
        Some(0.0),
        "known receivers start at 0"
    );
    let c = s
        .create_check(json!({"slug": "etl", "interval": "1h"}))
        .await;
    assert_eq!(s.ping(&format!("/ping/{}/fail", uuid_of(&c))).await.0, 200);
    hook.wait_for(2).await;
    let samples = scrape_until(&s.base, "the delivered attempt", |x| {
        count(x, "delivered") == Some(1.0)
    })
    .await;
    assert_eq!(count(&samples, "retry"), Some(1.0));
    assert_eq!(count(&samples, "dead"), Some(0.0));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_protects_metrics() {
    let s = TestServer::start(Backend::Sqlite, "[metrics]\ntoken = \"scrape-secret\"").await;
    let http = client();
    let url = s.url("/metrics");
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    for wrong in [
        "Bearer nope",
        "Bearer scrape-secre",
        "Basic scrape-secret",
        "scrape-secret",
    ] {
        let r = http
            .get(&url)
            .header("authorization", wrong)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{wrong}");
    }
    let r = http
        .get(&url)
        .bearer_auth("scrape-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("overdue_build_info"));
    // The rest of the server is unaffected.
    assert_eq!(
        http.get(s.url("/healthz")).send().await.unwrap().status(),
        200
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_a_listener_of_their_own() {
    let db = TestDb::new(Backend::Sqlite).await;
    let config = Config::from_toml(&db.config_toml("[metrics]\nlisten = \"127.0.0.1:0\"")).unwrap();
    let main = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", main.local_addr().unwrap());
    let metrics_base = format!("http://{}", metrics.local_addr().unwrap());
    let stop = CancellationToken::new();
    let task = tokio::spawn(overdue::app::run_with_metrics_listener(
        config,
        main,
        Some(metrics),
        stop.clone(),
    ));
    let http = client();
    let start = Instant::now();
    while http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .map_or(true, |r| r.status() != 200)
    {
        assert!(
            start.elapsed() < common::HANG_GUARD,
            "server did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(scrape(&metrics_base).await.contains("overdue_build_info"));
    let r = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 404, "only on the metrics listener");
    let r = http
        .get(format!("{metrics_base}/api/v1/checks"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "the metrics listener serves nothing else");
    stop.cancel();
    tokio::time::timeout(common::HANG_GUARD, task)
        .await
        .expect("hang guard: the server did not stop")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_check_series_can_be_turned_off() {
    let s = TestServer::start(Backend::Sqlite, "[metrics]\nper_check = false").await;
    let c = s.create_check(json!({"slug": "a", "interval": "1h"})).await;
    assert_eq!(s.ping(&format!("/ping/{}", uuid_of(&c))).await.0, 200);
    let text = scrape(&s.base).await;
    assert!(!text.contains("overdue_check_"), "{text}");
    assert!(
        text.contains("overdue_pings_total{kind=\"success\"} 1"),
        "{text}"
    );
    s.stop().await;
}

both_backends!(a_selector_limits_per_check_series, |backend| async move {
    let s = TestServer::start(backend, "[metrics]\nselect = '{team=\"data\"}'").await;
    for (slug, team) in [("d1", "data"), ("w1", "web"), ("d2", "data")] {
        s.create_check(json!({"slug": slug, "interval": "1h", "labels": {"team": team}}))
            .await;
    }
    s.create_check(json!({"slug": "none", "interval": "1h"}))
        .await;
    let samples = scrape_until(&s.base, "both data checks", |x| checks_in(x).len() >= 2).await;
    assert_eq!(checks_in(&samples), ["d1", "d2"]);
    for x in samples
        .iter()
        .filter(|x| x.name.starts_with("overdue_check_"))
    {
        assert!(["d1", "d2"].contains(&x.labels["check"].as_str()), "{x:?}");
    }
    s.stop().await;
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "prometheus",
    ignore = "needs promtool and prometheus (Debian's prometheus)"
)]
async fn promtool_finds_no_problem_in_a_real_scrape() {
    need_prometheus("promtool");
    let hook = WebhookSink::start().await;
    let toml = format!(
        "[metrics]\nlabels = [\"team\", \"tier\"]\n\n[[receivers]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\n\n[route]\nreceiver = \"hook\"\ngroup_wait = \"100ms\"\n",
        hook.url("/")
    );
    let s = TestServer::start(Backend::Sqlite, &toml).await;
    // Every kind of value: new, up with items, failed, running, paused, cron, quiet.
    let up = s
        .create_check(json!({"slug": "up", "interval": "1h", "labels": {"team": "a\"b\\c\nd"}}))
        .await;
    s.create_check(json!({"slug": "new", "cron": "0 3 * * *", "tz": "Europe/Berlin"}))
        .await;
    let failed = s
        .create_check(json!({"slug": "failed", "interval": "1m", "labels": {"tier": "1"}}))
        .await;
    let running = s
        .create_check(json!({"slug": "running", "interval": "1h"}))
        .await;
    let paused = s
        .create_check(json!({"slug": "paused", "interval": "1h"}))
        .await;
    s.create_check(json!({"slug": "quiet", "interval": "1h",
                          "active_hours": [{"start": "00:00", "end": "00:01"}]}))
        .await;
    s.ping(&format!("/ping/{}?items=0", uuid_of(&up))).await;
    s.ping(&format!("/ping/{}/start", uuid_of(&up))).await;
    s.ping(&format!("/ping/{}?items=5", uuid_of(&up))).await;
    s.ping(&format!("/ping/{}/fail", uuid_of(&failed))).await;
    s.ping(&format!("/ping/{}/start", uuid_of(&running))).await;
    let r = s
        .client
        .post(s.url(&format!("/api/v1/checks/{}/pause", uuid_of(&paused))))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    s.ping("/ping/not-a-uuid").await;
    hook.wait_for(1).await;
    let samples = scrape_until(&s.base, "every state", |x| {
        value(
            x,
            "overdue_check_status",
            &[("check", "failed"), ("status", "down")],
        ) == Some(1.0)
            && value(x, "overdue_check_running", &[("check", "running")]) == Some(1.0)
            && value(
                x,
                "overdue_notifications_total",
                &[("outcome", "delivered")],
            ) == Some(1.0)
    })
    .await;
    assert_eq!(checks_in(&samples).len(), 6);

    let text = scrape(&s.base).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.txt");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("run promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
    s.stop().await;
}

/// A Prometheus server in a child process, killed when dropped.
struct Prometheus {
    child: Child,
    base: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (host:port) as job `overdue`
    /// every second, evaluating the rules in `rule_file` every second.
    async fn start(dir: &Path, target: &str, rule_file: &Path) -> Prometheus {
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: overdue\n    static_configs:\n      - targets: ['{target}']\n",
            rule_file.display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        // A free port: the kernel's choice, released just before Prometheus binds it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let http = client();
        let start = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{}/-/ready", p.base)).send().await {
                if r.status() == 200 {
                    break;
                }
            }
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            assert!(
                start.elapsed() < common::HANG_GUARD,
                "prometheus did not become ready:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        p
    }

    /// The active alerts: (alert name, check label or "", state), and each
    /// alert's JSON.
    async fn alerts(&self) -> Vec<(String, String, String, Value)> {
        let v: Value = client()
            .get(format!("{}/api/v1/alerts", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let label = |k: &str| a["labels"][k].as_str().unwrap_or("").to_string();
                (
                    label("alertname"),
                    label("check"),
                    a["state"].as_str().unwrap().to_string(),
                    a.clone(),
                )
            })
            .collect()
    }

    /// Waits until `done` holds for the active alerts, under three hang
    /// guards (Prometheus evaluates its rules on its own schedule, and the
    /// rules wait out their `for:`).
    async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[(String, String, String, Value)]) -> bool,
    ) -> Vec<(String, String, String, Value)> {
        let start = Instant::now();
        loop {
            let alerts = self.alerts().await;
            if done(&alerts) {
                return alerts;
            }
            let seen: Vec<_> = alerts.iter().map(|a| (&a.0, &a.1, &a.2)).collect();
            assert!(
                start.elapsed() < common::HANG_GUARD * 3,
                "{what}: hang guard; active: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Whether `alerts` has `name` for `check` in `state`.
fn has(alerts: &[(String, String, String, Value)], name: &str, check: &str, state: &str) -> bool {
    alerts
        .iter()
        .any(|a| a.0 == name && a.1 == check && a.2 == state)
}

/// The shipped rules, `alerts/overdue.rules.yml` as it is, loaded by a real
/// Prometheus scraping the real server: a failed check fires
/// `OverdueCheckFailed` (its `for` is 1m, so this test takes a minute), a
/// silent one makes `OverdueCheckStale` pending (its `for` is 2m), nothing
/// else fires on a healthy server, and both clear once the jobs ping again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "prometheus",
    ignore = "needs promtool and prometheus (Debian's prometheus)"
)]
async fn prometheus_fires_the_shipped_alerts_and_clears_them_after_pings() {
    need_prometheus("prometheus");
    let s = TestServer::start(Backend::Sqlite, "").await;
    // Down after 2 s without a ping (interval 1 s, grace one interval).
    let fast = s
        .create_check(json!({"slug": "fast", "interval": "1s"}))
        .await;
    let fast = s.url(&format!("/ping/{}", uuid_of(&fast)));
    let broken = s
        .create_check(json!({"slug": "broken", "interval": "1h"}))
        .await;
    let broken = s.url(&format!("/ping/{}", uuid_of(&broken)));
    let http = client();
    assert_eq!(http.get(&fast).send().await.unwrap().status(), 200);
    assert_eq!(
        http.get(format!("{broken}/fail"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    let dir = tempfile::tempdir().unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("alerts/overdue.rules.yml");
    let target = s.base.trim_start_matches("http://");
    let prom = Prometheus::start(dir.path(), target, &rules).await;

    // No more pings to "fast": it goes stale; "broken" stays failed.
    let alerts = prom
        .wait_for(
            "OverdueCheckFailed firing and OverdueCheckStale pending",
            |a| {
                has(a, "OverdueCheckFailed", "broken", "firing")
                    && (has(a, "OverdueCheckStale", "fast", "pending")
                        || has(a, "OverdueCheckStale", "fast", "firing"))
            },
        )
        .await;
    let failed = alerts
        .iter()
        .find(|a| a.0 == "OverdueCheckFailed")
        .map(|a| &a.3)
        .unwrap();
    assert_eq!(failed["labels"]["severity"], "page", "{failed}");
    assert_eq!(failed["labels"]["job"], "overdue", "{failed}");
    assert_eq!(
        failed["annotations"]["summary"], "Check broken is down: its last run failed or timed out",
        "{failed}"
    );
    // On a healthy server the shipped rules raise nothing else: not the
    // watchdog, leader or delivery alerts, and only these two checks.
    let names: Vec<(&str, &str)> = alerts
        .iter()
        .map(|a| (a.0.as_str(), a.1.as_str()))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // The jobs check in again (and "fast" keeps pinging, as a live job would):
    // every alert clears.
    assert_eq!(http.get(&broken).send().await.unwrap().status(), 200);
    let stop = CancellationToken::new();
    let pinger = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let http = client();
            while !stop.is_cancelled() {
                assert_eq!(http.get(&fast).send().await.unwrap().status(), 200);
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    prom.wait_for("every alert cleared", |a| a.is_empty()).await;
    stop.cancel();
    pinger.await.unwrap();
    drop(prom);
    s.stop().await;
}
