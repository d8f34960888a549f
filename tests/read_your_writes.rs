//! Read your writes (SPEC §5): the answer to a write shows the state after
//! it, and so does every read that starts after that answer, through v1, v3,
//! the dashboard and metrics; pings and writes take effect in the order they
//! were committed. Each write is tried with pings acknowledged just before it
//! and with pings in flight while it runs, and read again once every ping has
//! been folded into the stored summaries (SQLite writes them in rounds,
//! PostgreSQL folds its inbox), which is where a ping stored before a write
//! but folded after it used to change the answer.

mod common;

use std::time::Duration;

use common::api::send_json;
use common::{Backend, TestDb, TestServer};
use serde_json::{json, Value};

/// A hang guard, not a service level: waits for background work that
/// normally takes about a second.
use common::HANG_GUARD;

/// Who holds the leader lease while a PostgreSQL test keeps folds away.
const TEST_HOLDER: &str = "read-your-writes-test";

/// The server, with the window in which acknowledged pings are not yet in
/// the stored summaries held open, so each write lands in it for sure.
///
/// PostgreSQL: only the leader folds the inbox, so the test holds the lease
/// (a row a replica would write) before the server starts; the server then
/// serves pings and the API as a follower, and its pings wait in the inbox
/// until [`Harness::settle`] gives the lease up. SQLite: the writer writes
/// summaries in rounds a second apart; [`Harness::between_rounds`] waits for
/// one to end, which leaves most of a second before the next.
struct Harness {
    s: TestServer,
    /// Per-check series are rendered by the leader only.
    leads: bool,
}

impl Harness {
    async fn start(backend: Backend) -> Harness {
        let db = TestDb::new(backend).await;
        if backend == Backend::Postgres {
            // Migrated first, so the lease row can be written.
            drop(
                overdue::store::postgres::PgStore::connect(&db.url)
                    .await
                    .unwrap(),
            );
            db.sql(&format!(
                "INSERT INTO leases (name, holder, token, expires_at) VALUES ('leader', \
                 '{TEST_HOLDER}', 1, (extract(epoch from clock_timestamp()) * 1000)::bigint \
                 + 3600000)"
            ))
            .await;
        }
        let s = TestServer::start_on(db, "").await;
        Harness {
            leads: backend == Backend::Sqlite,
            s,
        }
    }

    /// SQLite: waits until a round has written every ping, so that the next
    /// round is most of a second away. PostgreSQL: nothing is folded until
    /// [`Harness::settle`].
    async fn between_rounds(&self) {
        if self.s.db.backend == Backend::Sqlite {
            settled(&self.s.db).await;
        }
    }

    /// Lets every acknowledged ping be folded into the stored summaries and
    /// waits until it was (PostgreSQL: the server takes the lease and leads).
    async fn settle(&mut self) {
        if self.s.db.backend == Backend::Postgres && !self.leads {
            self.s
                .db
                .sql(&format!(
                    "DELETE FROM leases WHERE holder = '{TEST_HOLDER}'"
                ))
                .await;
            let any = get(&self.s, "/api/v1/checks").await["checks"]
                .as_array()
                .is_some_and(|c| !c.is_empty());
            tokio::time::timeout(HANG_GUARD, async {
                loop {
                    // Leading, and (when there are checks) the evaluator
                    // has loaded them.
                    let text = self.metrics().await;
                    if text.contains("overdue_is_leader 1")
                        && (!any || text.contains("overdue_check_status{"))
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .expect("hang guard: the server took the lease");
            self.leads = true;
        }
        settled(&self.s.db).await;
    }

    async fn metrics(&self) -> String {
        let r = self
            .s
            .client
            .get(self.s.url("/metrics"))
            .send()
            .await
            .unwrap();
        r.text().await.unwrap()
    }

    /// What every read path says of one check (metrics only where rendered).
    async fn seen(&self, uuid: &str, slug: &str) -> Seen {
        let mut seen = seen(&self.s, uuid, slug).await;
        if !self.leads {
            assert_eq!(
                seen.metrics_status, None,
                "a follower renders no per-check series"
            );
            seen.metrics_status = None;
        }
        seen
    }

    /// Paused, through every read path this server renders.
    fn paused(&self) -> Seen {
        Seen {
            v1: (true, "paused".into()),
            v3: "paused".into(),
            dashboard: "paused".into(),
            metrics_status: self.leads.then(|| "paused".into()),
        }
    }
}

/// Waits until every acknowledged ping is in the stored summaries: the
/// SQLite log's tail past the last round is empty, or the PostgreSQL inbox is.
async fn settled(db: &TestDb) {
    let query = match db.backend {
        Backend::Sqlite => {
            "SELECT COUNT(*) FROM pings WHERE id > (SELECT through FROM ping_rounds)"
        }
        Backend::Postgres => "SELECT COUNT(*) FROM ping_inbox",
    };
    tokio::time::timeout(HANG_GUARD, async {
        while db.count(query).await > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("hang guard: the pings were folded");
}

/// `method path` with `body` as JSON if any: the status and the body of
/// the answer.
async fn send(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    send_json(s.client.request(method, s.url(path)), body).await
}

async fn post(s: &TestServer, path: &str) -> Value {
    let (status, body) = send(s, reqwest::Method::POST, path, None).await;
    assert_eq!(status, 200, "POST {path}: {body}");
    body
}

async fn patch(s: &TestServer, path: &str, body: Value) -> Value {
    let (status, body) = send(s, reqwest::Method::PATCH, path, Some(body)).await;
    assert_eq!(status, 200, "PATCH {path}: {body}");
    body
}

async fn ping_ok(s: &TestServer, path: &str) {
    let (status, body) = s.ping(path).await;
    assert_eq!(status, 200, "ping {path}: {body}");
}

/// What every read path says of one check: (paused, status) through v1, v3
/// (its status), the dashboard's list and metrics.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    v1: (bool, String),
    v3: String,
    dashboard: String,
    metrics_status: Option<String>,
}

async fn seen(s: &TestServer, uuid: &str, slug: &str) -> Seen {
    let v1 = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    let v3 = s.get_json(&format!("/api/v3/checks/{uuid}")).await;
    let page = s.get_text(&format!("/checks/{uuid}")).await;
    let metrics = s.get_text("/metrics").await;
    Seen {
        v1: (
            v1["paused"].as_bool().unwrap(),
            v1["status"].as_str().unwrap().to_string(),
        ),
        v3: v3["status"].as_str().unwrap().to_string(),
        dashboard: dashboard_status(&page),
        metrics_status: metrics_status(&metrics, slug),
    }
}

impl Seen {
    fn without_metrics(self) -> Seen {
        Seen {
            metrics_status: None,
            ..self
        }
    }
}

/// The status the dashboard's check page shows.
fn dashboard_status(page: &str) -> String {
    let at = page.find("id=\"status\">").expect("a status on the page") + "id=\"status\">".len();
    page[at..].split('<').next().unwrap_or_default().to_string()
}

/// The status whose `overdue_check_status` series is 1 for this check.
fn metrics_status(text: &str, slug: &str) -> Option<String> {
    let needle = format!("check=\"{slug}\"");
    text.lines()
        .filter(|l| l.starts_with("overdue_check_status{") && l.contains(&needle))
        .filter(|l| l.ends_with(" 1"))
        .find_map(|l| {
            let at = l.find("status=\"")? + "status=\"".len();
            Some(l[at..].split('"').next()?.to_string())
        })
}

async fn create(s: &TestServer, slug: &str, extra: Value) -> (String, String) {
    let mut body = json!({"slug": slug, "interval": "1m"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let c = s.create_check(body).await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    (uuid.clone(), format!("/ping/{uuid}"))
}

async fn get(s: &TestServer, path: &str) -> Value {
    s.get_json(path).await
}

/// Sends `n` pings at once, and `write` while they are in flight; returns
/// the write's answer once every ping was acknowledged.
async fn with_pings_in_flight(
    s: &TestServer,
    ping: &str,
    n: usize,
    write: impl std::future::Future<Output = Value>,
) -> Value {
    let pings: Vec<_> = (0..n)
        .map(|_| {
            let client = s.client.clone();
            let url = s.url(ping);
            tokio::spawn(async move { client.get(url).send().await.unwrap().status().as_u16() })
        })
        .collect();
    tokio::task::yield_now().await;
    let answer = write.await;
    for p in pings {
        assert_eq!(p.await.unwrap(), 200);
    }
    answer
}

both_backends!(
    a_ping_acknowledged_before_a_pause_never_resumes_it,
    |backend| async move {
        let mut h = Harness::start(backend).await;
        let mut checks = Vec::new();
        for (i, api) in ["v1", "v3"].into_iter().enumerate() {
            for n in 0..3 {
                let slug = format!("{api}-{n}");
                let (uuid, ping) = create(&h.s, &slug, json!({})).await;
                h.between_rounds().await;
                ping_ok(&h.s, &ping).await;
                // At once: the ping is acknowledged, not yet in the stored summary.
                let answer = post(&h.s, &format!("/api/{api}/checks/{uuid}/pause")).await;
                assert_eq!(answer["status"], "paused", "{api} answer: {answer}");
                if i == 0 {
                    assert_eq!(answer["paused"], true, "{answer}");
                }
                assert_eq!(
                    h.seen(&uuid, &slug).await,
                    h.paused(),
                    "{slug}: after the pause"
                );
                checks.push((uuid, ping, slug));
            }
        }
        h.settle().await;
        for (uuid, ping, slug) in &checks {
            assert_eq!(
                h.seen(uuid, slug).await,
                h.paused(),
                "{slug}: once the ping was folded"
            );
            // The ping kept what it was: a success, before the pause.
            let v1 = get(&h.s, &format!("/api/v1/checks/{uuid}")).await;
            assert_eq!(v1["n_pings"], 1);
            assert!(v1["last_success"].is_string(), "{v1}");
            // A ping committed after the pause resumes the check.
            ping_ok(&h.s, ping).await;
            let v1 = get(&h.s, &format!("/api/v1/checks/{uuid}")).await;
            assert_eq!(
                (v1["paused"].as_bool(), v1["status"].as_str()),
                (Some(false), Some("up"))
            );
        }
        settled(&h.s.db).await;
        for (uuid, _, _) in &checks {
            let v1 = get(&h.s, &format!("/api/v1/checks/{uuid}")).await;
            assert_eq!(
                (v1["paused"].as_bool(), v1["status"].as_str()),
                (Some(false), Some("up"))
            );
        }
        h.s.stop().await;
    }
);

both_backends!(
    pings_in_flight_during_a_pause_take_effect_in_commit_order,
    |backend| async move {
        let mut h = Harness::start(backend).await;
        // With manual_resume no ping resumes it: paused from the answer on.
        let mut manual = Vec::new();
        // Without it, whatever the reads said stays true once every ping is
        // folded: each ping took effect before or after the pause, never both.
        let mut auto = Vec::new();
        for n in 0..3 {
            for manual_resume in [true, false] {
                let slug = format!("{}-{n}", if manual_resume { "manual" } else { "auto" });
                let (uuid, ping) =
                    create(&h.s, &slug, json!({"manual_resume": manual_resume})).await;
                ping_ok(&h.s, &ping).await;
                h.between_rounds().await;
                let pause = format!("/api/v1/checks/{uuid}/pause");
                let answer = with_pings_in_flight(&h.s, &ping, 24, post(&h.s, &pause)).await;
                assert_eq!(answer["paused"], true, "{answer}");
                // Metrics hear of pings within a second (SPEC §8), not at once:
                // they are left out of what must not change.
                let seen = h.seen(&uuid, &slug).await;
                if manual_resume {
                    assert_eq!(seen, h.paused(), "{slug}");
                    manual.push((uuid, slug));
                } else {
                    auto.push((uuid, slug, seen.without_metrics()));
                }
            }
        }
        h.settle().await;
        for (uuid, slug) in &manual {
            assert_eq!(h.seen(uuid, slug).await, h.paused(), "{slug}, folded");
            let v1 = get(&h.s, &format!("/api/v1/checks/{uuid}")).await;
            assert_eq!(v1["n_pings"], 25, "every ping was stored");
        }
        for (uuid, slug, before) in &auto {
            let after = h.seen(uuid, slug).await.without_metrics();
            assert_eq!(&after, before, "{slug}: folding changed what reads said");
            let v1 = get(&h.s, &format!("/api/v1/checks/{uuid}")).await;
            assert_eq!(v1["n_pings"], 25, "every ping was stored");
        }
        h.s.stop().await;
    }
);

both_backends!(
    an_update_never_reinterprets_pings_stored_before_it,
    |backend| async move {
        let mut h = Harness::start(backend).await;
        // POST only: a GET is recorded as ignored. Allowing GET afterwards must
        // not turn it into a success.
        let (post_only, ping) = create(&h.s, "post-only", json!({"methods": "POST"})).await;
        h.between_rounds().await;
        ping_ok(&h.s, &ping).await;
        let answer = patch(
            &h.s,
            &format!("/api/v1/checks/{post_only}"),
            json!({"methods": ""}),
        )
        .await;
        assert_eq!(
            (answer["methods"].as_str(), answer["status"].as_str()),
            (Some(""), Some("new"))
        );
        assert_eq!(answer["last_success"], Value::Null, "{answer}");

        // Paused with manual_resume: a ping is ignored. Dropping manual_resume
        // afterwards must not let that ping resume the check.
        let (manual, ping) = create(&h.s, "manual", json!({"manual_resume": true})).await;
        post(&h.s, &format!("/api/v1/checks/{manual}/pause")).await;
        h.between_rounds().await;
        ping_ok(&h.s, &ping).await;
        let answer = patch(
            &h.s,
            &format!("/api/v1/checks/{manual}"),
            json!({"manual_resume": false}),
        )
        .await;
        assert_eq!(
            (answer["paused"].as_bool(), answer["status"].as_str()),
            (Some(true), Some("paused"))
        );
        assert_eq!(h.seen(&manual, "manual").await, h.paused());

        // With pings in flight: the update's answer and every later read agree.
        let (busy, ping) = create(&h.s, "busy", json!({})).await;
        h.between_rounds().await;
        let path = format!("/api/v1/checks/{busy}");
        let answer = with_pings_in_flight(
            &h.s,
            &ping,
            24,
            patch(&h.s, &path, json!({"name": "renamed"})),
        )
        .await;
        assert_eq!(answer["name"], "renamed");
        let before = get(&h.s, &path).await;

        h.settle().await;
        let v1 = get(&h.s, &format!("/api/v1/checks/{post_only}")).await;
        assert_eq!(
            (v1["status"].as_str(), v1["n_pings"].as_i64()),
            (Some("new"), Some(1))
        );
        let pings = get(&h.s, &format!("/api/v1/checks/{post_only}/pings")).await;
        assert_eq!(pings["pings"][0]["type"], "ign", "{pings}");
        assert_eq!(h.seen(&manual, "manual").await, h.paused());
        let after = get(&h.s, &path).await;
        assert_eq!(after["n_pings"], 24);
        assert_eq!(before, after);
        h.s.stop().await;
    }
);

both_backends!(a_resume_answers_the_state_after_it, |backend| async move {
    let mut h = Harness::start(backend).await;
    let (uuid, ping) = create(&h.s, "manual", json!({"manual_resume": true})).await;
    ping_ok(&h.s, &ping).await;
    post(&h.s, &format!("/api/v3/checks/{uuid}/pause")).await;
    h.between_rounds().await;
    // Ignored while paused, resumed by the API while more are in flight.
    ping_ok(&h.s, &ping).await;
    let resume = format!("/api/v3/checks/{uuid}/resume");
    let answer = with_pings_in_flight(&h.s, &ping, 8, post(&h.s, &resume)).await;
    assert_eq!(answer["status"], "up", "{answer}");
    let read = h.seen(&uuid, "manual").await;
    assert_eq!(read.v1, (false, "up".to_string()));
    h.settle().await;
    let after = h.seen(&uuid, "manual").await;
    assert_eq!(after.metrics_status.as_deref(), Some("up"));
    assert_eq!(after.without_metrics(), read.without_metrics());
    h.s.stop().await;
});

both_backends!(
    a_delete_with_pings_in_flight_leaves_nothing_behind,
    |backend| async move {
        let mut h = Harness::start(backend).await;
        let (uuid, ping) = create(&h.s, "doomed", json!({})).await;
        ping_ok(&h.s, &ping).await;
        h.between_rounds().await;
        let pings: Vec<_> = (0..24)
            .map(|_| {
                let client = h.s.client.clone();
                let url = h.s.url(&ping);
                tokio::spawn(async move { client.get(url).send().await.unwrap().status().as_u16() })
            })
            .collect();
        tokio::task::yield_now().await;
        let r =
            h.s.client
                .delete(h.s.url(&format!("/api/v1/checks/{uuid}")))
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), 204);
        for p in pings {
            // Acknowledged before the delete, or refused after it.
            assert!(matches!(p.await.unwrap(), 200 | 404));
        }
        for round in ["after the delete", "once every ping was folded"] {
            for path in [
                format!("/api/v1/checks/{uuid}"),
                format!("/api/v3/checks/{uuid}"),
                "/api/v1/checks/doomed".to_string(),
            ] {
                let r = h.s.client.get(h.s.url(&path)).send().await.unwrap();
                assert_eq!(r.status(), 404, "{round}: GET {path}");
            }
            assert_eq!(h.s.ping(&ping).await.0, 404, "{round}: a ping");
            let text = h.metrics().await;
            assert!(
                !text.contains("check=\"doomed\""),
                "{round}: series left in /metrics"
            );
            let list = get(&h.s, "/api/v1/checks").await;
            assert!(!list.to_string().contains(&uuid), "{round}: listed");
            h.settle().await;
        }
        h.s.stop().await;
    }
);

both_backends!(
    a_created_check_is_pingable_and_readable_at_once,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        // Pings in flight to a slug while a check is created with it: refused
        // before, acknowledged after, and every acknowledged one is counted.
        // (The API draws a new check's uuid, so the slug form is the name a
        // ping can use before the check exists.)
        let ping = format!("/ping/{}/made", common::PING_KEY);
        let pings: Vec<_> = (0..24)
            .map(|_| {
                let client = s.client.clone();
                let url = s.url(&ping);
                tokio::spawn(async move { client.get(url).send().await.unwrap().status().as_u16() })
            })
            .collect();
        tokio::task::yield_now().await;
        let created = s.create_check(json!({"slug": "made"})).await;
        let uuid = created["uuid"].as_str().unwrap().to_string();
        let mut acknowledged = 0;
        for p in pings {
            match p.await.unwrap() {
                200 => acknowledged += 1,
                404 => {}
                other => panic!("a ping in flight got {other}"),
            }
        }
        ping_ok(&s, &ping).await;
        let v1 = get(&s, &format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v1["n_pings"], acknowledged + 1, "{v1}");
        assert_eq!(v1["status"], "up");
        for i in 0..5 {
            let slug = format!("new-{i}");
            let (uuid, ping) = create(&s, &slug, json!({})).await;
            ping_ok(&s, &ping).await;
            let v1 = get(&s, &format!("/api/v1/checks/{uuid}")).await;
            assert_eq!(
                (v1["status"].as_str(), v1["n_pings"].as_i64()),
                (Some("up"), Some(1))
            );
            let (status, _) = s
                .ping(&format!("/ping/{}/{slug}-auto?create=1", common::PING_KEY))
                .await;
            assert_eq!(status, 201);
            let v1 = get(&s, &format!("/api/v1/checks/{slug}-auto")).await;
            assert_eq!(v1["n_pings"], 1, "{v1}");
        }
        s.stop().await;
    }
);

both_backends!(
    metrics_show_a_pause_or_resume_as_soon_as_it_is_answered,
    |backend| async move {
        let mut h = Harness::start(backend).await;
        let (uuid, ping) = create(&h.s, "flips", json!({"manual_resume": true})).await;
        ping_ok(&h.s, &ping).await;
        h.settle().await;
        for _ in 0..10 {
            let pause = format!("/api/v1/checks/{uuid}/pause");
            with_pings_in_flight(&h.s, &ping, 4, post(&h.s, &pause)).await;
            assert_eq!(
                metrics_status(&h.metrics().await, "flips").as_deref(),
                Some("paused")
            );
            post(&h.s, &format!("/api/v1/checks/{uuid}/resume")).await;
            assert_eq!(
                metrics_status(&h.metrics().await, "flips").as_deref(),
                Some("up")
            );
        }
        h.s.stop().await;
    }
);

/// A PostgreSQL database and a config file for replicas sharing it.
async fn replica_config(extra: &str) -> (TestDb, std::path::PathBuf) {
    let db = TestDb::new(Backend::Postgres).await;
    let path = common::write_config(db.dir.path(), &db.config_toml(extra));
    (db, path)
}

/// The status a GET of `url` answers.
async fn status_of(http: &reqwest::Client, url: String) -> u16 {
    http.get(url).send().await.unwrap().status().as_u16()
}

/// PostgreSQL, two replicas: a pause answered by one is in the other's
/// metrics (the leader renders per-check series) as soon as it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_a_write_on_one_replica_is_in_the_leaders_metrics_at_once() {
    common::need_postgres();
    let (_db, path) = replica_config("heartbeat_period = \"500ms\"\nlease_ttl = \"3s\"").await;
    let leader = common::ChildServer::spawn(&path);
    let http = common::client();
    let scrape = |base: String| {
        let http = http.clone();
        async move {
            let r = http.get(format!("{base}/metrics")).send().await.unwrap();
            r.text().await.unwrap()
        }
    };
    tokio::time::timeout(HANG_GUARD, async {
        while !scrape(leader.base.clone())
            .await
            .contains("overdue_is_leader 1")
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("hang guard: the first replica leads");
    let other = common::ChildServer::spawn(&path);
    let uuid = common::create_on(
        &http,
        &other.base,
        json!({"slug": "far", "interval": "1m", "manual_resume": true}),
    )
    .await;
    common::get_200(&http, &format!("{}/ping/{uuid}", other.base)).await;
    tokio::time::timeout(HANG_GUARD, async {
        while metrics_status(&scrape(leader.base.clone()).await, "far").as_deref() != Some("up") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("hang guard: the leader renders the check");
    for round in 0..20 {
        for (action, status) in [("pause", "paused"), ("resume", "up")] {
            let r = http
                .post(format!("{}/api/v1/checks/{uuid}/{action}", other.base))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let text = scrape(leader.base.clone()).await;
            assert_eq!(
                metrics_status(&text, "far").as_deref(),
                Some(status),
                "round {round}: the leader's metrics right after a {action} on the other replica"
            );
        }
    }
}

/// PostgreSQL, two replicas: once a check is deleted or renamed on one, the
/// other stops routing pings to it by its old uuid or slug (it used to
/// acknowledge them from memory until it restarted, and drop them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_a_check_deleted_or_renamed_on_one_replica_stops_taking_pings_on_the_other() {
    common::need_postgres();
    let (_db, path) = replica_config("").await;
    let a = common::ChildServer::spawn(&path);
    let b = common::ChildServer::spawn(&path);
    let http = common::client();
    let status = |url: String| status_of(&http, url);
    let key = common::PING_KEY;
    let mut uuids = Vec::new();
    for slug in ["gone", "renamed"] {
        let uuid = common::create_on(&http, &b.base, json!({"slug": slug})).await;
        // A learns of both (by uuid and by slug) from its first pings.
        assert_eq!(status(format!("{}/ping/{uuid}", a.base)).await, 200);
        assert_eq!(status(format!("{}/ping/{key}/{slug}", a.base)).await, 200);
        uuids.push(uuid);
    }
    let r = http
        .delete(format!("{}/api/v1/checks/{}", b.base, uuids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = http
        .patch(format!("{}/api/v1/checks/{}", b.base, uuids[1]))
        .json(&json!({"slug": "renamed-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The change reaches A through the database's notifications, a moment
    // after B answered.
    let refused = [
        format!("{}/ping/{}", a.base, uuids[0]),
        format!("{}/ping/{key}/gone", a.base),
        format!("{}/ping/{key}/renamed", a.base),
    ];
    for url in &refused {
        tokio::time::timeout(HANG_GUARD, async {
            while status(url.clone()).await != 404 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("hang guard: {url} is still acknowledged"));
    }
    assert_eq!(
        status(format!("{}/ping/{key}/renamed-2", a.base)).await,
        200
    );
    assert_eq!(status(format!("{}/ping/{}", a.base, uuids[1])).await, 200);
}

/// PostgreSQL: a replica whose change listener lost its connection may have
/// missed a delete or a rename; it reads its routes again, so it does not go
/// on routing pings by the old uuid or slug.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_a_replica_that_may_have_missed_changes_reads_its_routes_again() {
    common::need_postgres();
    let (db, path) = replica_config("").await;
    let a = common::ChildServer::spawn(&path);
    let http = common::client();
    let status = |url: String| status_of(&http, url);
    let key = common::PING_KEY;
    let uuid = common::create_on(&http, &a.base, json!({"slug": "old-name"})).await;
    assert_eq!(status(format!("{}/ping/{key}/old-name", a.base)).await, 200);
    // Renamed with nobody told (as if A's listener had been away), then A's
    // listener loses its connection.
    db.sql(&format!(
        "ALTER TABLE checks DISABLE TRIGGER checks_changed; \
         UPDATE checks SET slug = 'new-name' WHERE uuid = '{uuid}'; \
         ALTER TABLE checks ENABLE TRIGGER checks_changed;"
    ))
    .await;
    assert_eq!(
        status(format!("{}/ping/{key}/old-name", a.base)).await,
        200,
        "routed from memory while nothing said otherwise"
    );
    db.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    )
    .await;
    tokio::time::timeout(HANG_GUARD, async {
        while status(format!("{}/ping/{key}/old-name", a.base)).await != 404 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("hang guard: the old slug is still routed after the listener reconnected");
    assert_eq!(status(format!("{}/ping/{key}/new-name", a.base)).await, 200);
}
