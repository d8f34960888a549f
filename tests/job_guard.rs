//! The job guard's endpoints against the real server, on both databases
//! (SPEC §13): `due`, `lock`, `unlock` and skip pings.

mod common;

use std::time::Duration;

use common::{Backend, TestDb, TestServer, HANG_GUARD, PING_KEY};
use serde_json::{json, Value};

/// A request's status and JSON answer (`null` when it is not JSON).
async fn call(s: &TestServer, method: reqwest::Method, path: &str) -> (u16, Value) {
    let r = s.client.request(method, s.url(path)).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn post(s: &TestServer, path: &str) -> (u16, Value) {
    call(s, reqwest::Method::POST, path).await
}

async fn get(s: &TestServer, path: &str) -> (u16, Value) {
    call(s, reqwest::Method::GET, path).await
}

/// The value of `name{check="slug"}` in a scrape, if present.
fn sample(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}");
    metrics
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn scrape(s: &TestServer) -> String {
    s.get_text("/metrics").await
}

both_backends!(
    locks_take_seats_renew_release_and_name_their_holder,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "backup", "interval": "1h", "max_runtime": "10m"}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        assert_eq!(c["max_instances"], 1);
        let base = format!("/ping/{uuid}");

        // Without ttl: the check's max_runtime.
        let (status, a) = post(&s, &format!("{base}/lock?holder=web-1%3A42")).await;
        assert_eq!(status, 200, "{a}");
        assert_eq!(a["acquired"], true);
        assert_eq!(a["holder"], "web-1:42");
        assert_eq!(a["ttl_ms"], 600_000);
        let token = a["token"].as_i64().expect("token is a JSON integer");
        assert!(a["expires"].as_str().is_some());

        // Every seat held: 423 naming the holder.
        let (status, b) = post(&s, &format!("{base}/lock?holder=web-2%3A7&ttl=1m")).await;
        assert_eq!(status, 423, "{b}");
        assert_eq!(b["acquired"], false);
        assert_eq!(b["holder"], "web-1:42");
        assert_eq!(b["expires"], a["expires"]);

        // Renewing with the token keeps the seat and the token.
        let (status, r) = post(&s, &format!("{base}/lock?token={token}&ttl=20m")).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            (r["token"].as_i64(), r["ttl_ms"].as_i64()),
            (Some(token), Some(1_200_000))
        );
        // Renewing without ttl keeps the seat's own TTL (20m), not the
        // check's default (10m).
        let (status, r) = post(&s, &format!("{base}/lock?token={token}")).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            (r["token"].as_i64(), r["ttl_ms"].as_i64()),
            (Some(token), Some(1_200_000))
        );
        // A token that holds nothing: 409.
        let (status, _) = post(&s, &format!("{base}/lock?token={}", token + 100)).await;
        assert_eq!(status, 409);

        // The check's resource, its page and the metrics show the holder.
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["locks"].as_array().unwrap().len(), 1, "{v}");
        assert_eq!(v["locks"][0]["holder"], "web-1:42");
        assert_eq!(v["locks"][0]["token"], token);
        let page = s.get_text("/checks/backup").await;
        assert!(
            page.contains("<code>web-1:42</code>"),
            "the page names the holder"
        );
        let m = scrape(&s).await;
        assert_eq!(
            sample(&m, "overdue_check_locks_held", "check=\"backup\""),
            Some(1.0)
        );

        // Unlock: 200 once, then 409; the next seat gets a larger token.
        assert_eq!(
            post(&s, &format!("{base}/unlock?token={token}")).await.0,
            200
        );
        assert_eq!(
            post(&s, &format!("{base}/unlock?token={token}")).await.0,
            409
        );
        let m = scrape(&s).await;
        assert_eq!(
            sample(&m, "overdue_check_locks_held", "check=\"backup\""),
            Some(0.0)
        );
        let (status, c2) = post(&s, &format!("/ping/{PING_KEY}/backup/lock?ttl=30s")).await;
        assert_eq!(status, 200, "the slug form");
        assert!(c2["token"].as_i64().unwrap() > token);
        // Without a holder name: the client's address.
        assert_eq!(c2["holder"], "127.0.0.1");
        s.stop().await;
    }
);

both_backends!(guard_requests_name_what_is_wrong, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s.create_check(json!({"slug": "job"})).await;
    let base = format!("/ping/{}", c["uuid"].as_str().unwrap());
    for (path, field) in [
        ("lock?ttl=0s", "ttl"),
        ("lock?ttl=8days", "ttl"),
        ("lock?ttl=later", "ttl"),
        ("lock?holder=", "holder"),
        ("lock?token=abc", "token"),
        ("unlock", "token"),
    ] {
        let (status, v) = post(&s, &format!("{base}/{path}")).await;
        assert_eq!(status, 400, "{path}: {v}");
        assert!(
            v["error"].as_str().unwrap().starts_with(field),
            "{path}: {v}"
        );
    }
    // Wrong methods, unknown checks.
    assert_eq!(get(&s, &format!("{base}/lock")).await.0, 405);
    assert_eq!(post(&s, &format!("{base}/due")).await.0, 405);
    // Every answer under /ping carries Ping-Body-Limit, the guard's too.
    for (method, path) in [
        (reqwest::Method::POST, format!("{base}/due")),
        (reqwest::Method::GET, format!("{base}/due")),
        (reqwest::Method::POST, format!("{base}/lock?ttl=1m")),
        (reqwest::Method::GET, format!("{base}/snooze?for=1m")),
    ] {
        let r = s
            .client
            .request(method.clone(), s.url(&path))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers()
                .get("ping-body-limit")
                .and_then(|v| v.to_str().ok()),
            Some("10000"),
            "{method} {path}: {}",
            r.status()
        );
    }
    let nobody = "/ping/9d4f3e46-5b2c-4f4e-8f56-0a9e2b6c1d00";
    assert_eq!(get(&s, &format!("{nobody}/due")).await.0, 404);
    assert_eq!(post(&s, &format!("{nobody}/lock")).await.0, 404);
    assert_eq!(post(&s, &format!("{nobody}/unlock?token=1")).await.0, 404);
    // max_instances out of range, on create.
    let r = s
        .client
        .post(s.url("/api/v1/checks"))
        .json(&json!({"slug": "many", "max_instances": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("max_instances"));
    s.stop().await;
});

both_backends!(max_instances_seats_several_holders, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "crawl", "interval": "1h", "max_instances": 2}))
        .await;
    let base = format!("/ping/{}", c["uuid"].as_str().unwrap());
    let (a, b) = (
        post(&s, &format!("{base}/lock?holder=a&ttl=1m")).await,
        post(&s, &format!("{base}/lock?holder=b&ttl=2m")).await,
    );
    assert_eq!((a.0, b.0), (200, 200));
    let (status, third) = post(&s, &format!("{base}/lock?holder=c")).await;
    assert_eq!(status, 423);
    // The seat that frees first is named.
    assert_eq!(third["holder"], "a");
    let v = s.get_json("/api/v1/checks/crawl").await;
    assert_eq!(v["max_instances"], 2);
    assert_eq!(v["locks"].as_array().unwrap().len(), 2);
    let v3 = s
        .get_json(&format!("/api/v3/checks/{}", c["uuid"].as_str().unwrap()))
        .await;
    assert_eq!(v3["max_instances"], 2);
    s.stop().await;
});

both_backends!(
    skips_are_logged_with_their_reason_and_change_nothing,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "feed", "interval": "1h", "zero_items_runs": 2}))
            .await;
        let uuid = c["uuid"].as_str().unwrap().to_string();
        assert_eq!(s.ping(&format!("/ping/{uuid}?items=0")).await.0, 200);
        // Skips between two successes with items=0: the streak is neither
        // broken (the second success makes it 2: stalled) nor extended
        // (before it, one success: not stalled).
        for reason in ["locked%20by%20web-2%3A9%20until%20later", "quiet%20hours"] {
            let (status, body) = s.ping(&format!("/ping/{uuid}/skip?reason={reason}")).await;
            assert_eq!((status, body.as_str()), (200, "OK"));
        }
        let (status, _) = s
            .ping(&format!(
                "/ping/{PING_KEY}/feed/skip?reason=already+done+for+slot+x"
            ))
            .await;
        assert_eq!(status, 200, "the slug form");
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "up", "{v}");
        assert_eq!(v["n_pings"], 4);
        let pings = s.get_json(&format!("/api/v1/checks/{uuid}/pings")).await;
        let list = pings["pings"].as_array().unwrap();
        assert_eq!(list[0]["type"], "skip");
        assert_eq!(list[0]["reason"], "already done for slot x");
        assert_eq!(list[2]["reason"], "locked by web-2:9 until later");
        assert!(list[3].get("reason").is_none(), "only skips carry a reason");
        // v3 lists a skip as healthchecks' log kind.
        let v3 = s.get_json(&format!("/api/v3/checks/{uuid}/pings/")).await;
        assert_eq!(v3["pings"][0]["type"], "log");
        assert_eq!(v3["pings"][0]["reason"], "already done for slot x");
        // The dashboard shows the reason.
        let page = s.get_text("/checks/feed").await;
        assert!(page.contains("<strong>quiet hours</strong>"));

        let m = scrape(&s).await;
        for (class, n) in [
            ("done", 1.0),
            ("locked", 1.0),
            ("quiet", 1.0),
            ("other", 0.0),
        ] {
            let line = format!("overdue_skips_total{{reason=\"{class}\"}} {n}");
            assert!(m.contains(&line), "{line} in\n{m}");
        }
        assert!(m.contains("overdue_pings_total{kind=\"skip\"} 3"));

        assert_eq!(s.ping(&format!("/ping/{uuid}?items=0")).await.0, 200);
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(
            v["status"], "stalled",
            "two successes with items=0 in a row: {v}"
        );
        // The last ping is the success, not a skip after it.
        s.ping(&format!("/ping/{uuid}/skip?reason=x")).await;
        let v = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(v["status"], "stalled");
        assert_eq!(v["last_ping"], v["last_success"]);
        s.stop().await;
    }
);

both_backends!(
    due_follows_successes_and_quiet_hours,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let every = s
            .create_check(json!({"slug": "hourly", "interval": "1h"}))
            .await;
        let uuid = every["uuid"].as_str().unwrap().to_string();
        let (status, d) = get(&s, &format!("/ping/{uuid}/due")).await;
        assert_eq!(status, 200);
        assert_eq!(
            (d["due"].as_bool(), d["reason"].as_str()),
            (Some(true), Some("due")),
            "{d}"
        );
        assert!(d["last_success"].is_null() && d["next_due"].is_null());
        // Right after a success (read-your-writes): done until next_due.
        s.ping(&format!("/ping/{uuid}")).await;
        let (_, d) = get(&s, &format!("/ping/{uuid}/due")).await;
        assert_eq!(
            (d["due"].as_bool(), d["reason"].as_str()),
            (Some(false), Some("done")),
            "{d}"
        );
        assert!(d["next_due"].as_str().is_some());
        // A failure does not make the slot done.
        let cron = s
            .create_check(json!({"slug": "minutely", "cron": "* * * * *"}))
            .await;
        let cuuid = cron["uuid"].as_str().unwrap().to_string();
        // A success makes the slot done. Asked again while the minute turns
        // between the two reads (a success in the old minute leaves the
        // new one due): twice in a row it cannot.
        for attempt in 1.. {
            s.ping(&format!("/ping/{cuuid}/fail")).await;
            let (_, d) = get(&s, &format!("/ping/{cuuid}/due")).await;
            assert_eq!(d["due"], true, "{d}");
            let slot = d["slot"].as_str().unwrap().to_string();
            assert!(slot.ends_with(":00Z"), "a fire time: {slot}");
            s.ping(&format!("/ping/{cuuid}")).await;
            let (_, d) = get(&s, &format!("/ping/{cuuid}/due")).await;
            if d["slot"] == slot.as_str() {
                assert_eq!(
                    (d["due"].as_bool(), d["reason"].as_str()),
                    (Some(false), Some("done")),
                    "{d}"
                );
                break;
            }
            assert!(attempt < 3, "the minute turned at every attempt: {d}");
        }
        // Quiet hours now: never due. The window is the hour 12 hours away.
        let h = (chrono::Utc::now() + chrono::Duration::hours(12))
            .format("%H")
            .to_string();
        s.create_check(json!({
            "slug": "nightly", "interval": "1h",
            "active_hours": [{"start": format!("{h}:00"), "end": format!("{h}:30")}],
        }))
        .await;
        let (_, d) = get(&s, &format!("/ping/{PING_KEY}/nightly/due")).await;
        assert_eq!(
            (
                d["due"].as_bool(),
                d["reason"].as_str(),
                d["quiet"].as_bool()
            ),
            (Some(false), Some("quiet"), Some(true)),
            "{d}"
        );
        s.stop().await;
    }
);

both_backends!(seats_and_tokens_outlive_a_restart, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s
        .create_check(json!({"slug": "nightly", "interval": "1d"}))
        .await;
    let base = format!("/ping/{}", c["uuid"].as_str().unwrap());
    let (_, a) = post(&s, &format!("{base}/lock?holder=a&ttl=1h")).await;
    let token = a["token"].as_i64().unwrap();
    let db = s.stop().await;
    let s = TestServer::start_on(db, "").await;
    // The seat is still held after the restart...
    let (status, b) = post(&s, &format!("{base}/lock?holder=b")).await;
    assert_eq!(status, 423, "{b}");
    assert_eq!(b["holder"], "a");
    // ...its holder can still renew and release it, and tokens go on growing.
    assert_eq!(
        post(&s, &format!("{base}/lock?token={token}&ttl=1h"))
            .await
            .0,
        200
    );
    assert_eq!(
        post(&s, &format!("{base}/unlock?token={token}")).await.0,
        200
    );
    let (_, c2) = post(&s, &format!("{base}/lock?holder=b")).await;
    assert!(c2["token"].as_i64().unwrap() > token, "{c2}");
    s.stop().await;
});

both_backends!(
    an_expired_seat_is_free_and_its_token_lost,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "short", "interval": "1h"}))
            .await;
        let base = format!("/ping/{}", c["uuid"].as_str().unwrap());
        let (_, a) = post(&s, &format!("{base}/lock?holder=a&ttl=1s")).await;
        let token = a["token"].as_i64().unwrap();
        assert_eq!(
            post(&s, &format!("{base}/lock?holder=b&ttl=1s")).await.0,
            423
        );
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let (status, b) = post(&s, &format!("{base}/lock?holder=b&ttl=1m")).await;
        assert_eq!(status, 200, "{b}");
        assert_eq!(post(&s, &format!("{base}/lock?token={token}")).await.0, 409);
        assert_eq!(
            post(&s, &format!("{base}/unlock?token={token}")).await.0,
            409
        );
        s.stop().await;
    }
);

/// PostgreSQL, two replicas asked for the same seat at the same instant,
/// many times: never two holders, and tokens strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
async fn postgres_two_replicas_never_both_grant_the_last_seat() {
    common::need_postgres();
    let db = TestDb::new(Backend::Postgres).await;
    let path = common::write_config(db.dir.path(), &db.config_toml(""));
    let one = common::ChildServer::spawn(&path);
    let two = common::ChildServer::spawn(&path);
    let http = common::client();
    let uuid = common::create_on(&http, &one.base, json!({"slug": "race", "interval": "1h"})).await;
    let bases = [one.base.clone(), two.base.clone()];
    let mut last = 0;
    tokio::time::timeout(HANG_GUARD, async {
        for round in 0..40 {
            let asks = (0..6).map(|i| {
                let url = format!(
                    "{}/ping/{uuid}/lock?holder=r{round}-{i}&ttl=1m",
                    bases[i % 2]
                );
                let http = http.clone();
                async move {
                    let r = http.post(url).send().await.unwrap();
                    let status = r.status().as_u16();
                    (status, r.json::<Value>().await.unwrap())
                }
            });
            let answers = futures_util::future::join_all(asks).await;
            let granted: Vec<&Value> = answers
                .iter()
                .filter(|(s, _)| *s == 200)
                .map(|(_, v)| v)
                .collect();
            assert_eq!(granted.len(), 1, "round {round}: {answers:?}");
            assert!(answers.iter().all(|(s, _)| *s == 200 || *s == 423));
            let token = granted[0]["token"].as_i64().unwrap();
            assert!(token > last, "round {round}: token {token} after {last}");
            last = token;
            let r = http
                .post(format!(
                    "{}/ping/{uuid}/unlock?token={token}",
                    bases[round % 2]
                ))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    })
    .await
    .expect("hang guard");
    assert_eq!(last, 40, "one token per round");
}

both_backends!(
    a_retried_acquire_gets_its_own_seat_back,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let c = s
            .create_check(json!({"slug": "retry", "interval": "1h"}))
            .await;
        let base = format!("/ping/{}", c["uuid"].as_str().unwrap());
        let (status, first) = post(&s, &format!("{base}/lock?holder=h%3A1&ttl=1m&nonce=n-1")).await;
        assert_eq!(status, 200, "{first}");
        // The same request again (its first answer was lost): the same seat,
        // not a 423 naming itself.
        let (status, again) = post(&s, &format!("{base}/lock?holder=h%3A1&ttl=1m&nonce=n-1")).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["token"], first["token"]);
        assert_eq!(again["expires"], first["expires"]);
        // Another request, another key: every seat is held.
        let (status, _) = post(&s, &format!("{base}/lock?holder=h%3A1&ttl=1m&nonce=n-2")).await;
        assert_eq!(status, 423);
        s.stop().await;
    }
);

both_backends!(
    a_guarded_job_line_may_create_its_check,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        // due and lock with ?create=1 create the check, as a ping would.
        let (status, d) = get(&s, &format!("/ping/{PING_KEY}/fresh/due?create=1")).await;
        assert_eq!(status, 200, "{d}");
        assert_eq!(d["due"], true);
        let (status, l) = post(&s, &format!("/ping/{PING_KEY}/newer/lock?create=1&ttl=1m")).await;
        assert_eq!(status, 200, "{l}");
        let v = s.get_json("/api/v1/checks/newer").await;
        assert_eq!(v["locks"].as_array().unwrap().len(), 1);
        // Without create=1 a missing check stays a 404.
        assert_eq!(
            post(&s, &format!("/ping/{PING_KEY}/other/lock")).await.0,
            404
        );
        s.stop().await;
    }
);
