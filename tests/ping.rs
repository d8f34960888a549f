//! The ping API (SPEC §4) against the real server, on both databases.

mod common;

use common::{Backend, TestServer, PING_KEY};
use serde_json::{json, Value};

async fn server(backend: Backend) -> TestServer {
    TestServer::start(
        backend,
        "ping_body_limit = 100\ntrusted_proxies = [\"127.0.0.1/32\"]",
    )
    .await
}

both_backends!(every_form_and_status_code, |backend| async move {
    let s = server(backend).await;
    let check = s
        .create_check(json!({"slug": "backup", "interval": "1m"}))
        .await;
    let uuid = check["uuid"].as_str().unwrap().to_string();

    let cases: &[(String, u16, &str)] = &[
        (format!("/ping/{uuid}"), 200, "OK"),
        (format!("/ping/{uuid}/start"), 200, "OK"),
        (format!("/ping/{uuid}/fail"), 200, "OK"),
        (format!("/ping/{uuid}/log"), 200, "OK"),
        (format!("/ping/{uuid}/0"), 200, "OK"),
        (format!("/ping/{uuid}/7"), 200, "OK"),
        (format!("/ping/{uuid}/255"), 200, "OK"),
        (format!("/ping/{uuid}/256"), 400, "invalid url format"),
        (format!("/ping/{uuid}/start/extra"), 404, "not found"),
        (format!("/ping/{}", uuid::Uuid::new_v4()), 404, "not found"),
        // A placeholder pasted literally: still 404, saying why.
        (
            "/ping/5b0c…".to_string(),
            404,
            "not found: that is not a uuid (a ping URL is /ping/<uuid>, with the uuid the \
             API or the dashboard shows, or /ping/<ping_key>/<slug>)",
        ),
        (format!("/ping/{PING_KEY}/backup"), 200, "OK"),
        (format!("/ping/{PING_KEY}/backup/start"), 200, "OK"),
        (format!("/ping/{PING_KEY}/backup/fail"), 200, "OK"),
        (format!("/ping/{PING_KEY}/backup/log"), 200, "OK"),
        (format!("/ping/{PING_KEY}/backup/3"), 200, "OK"),
        (
            format!("/ping/{PING_KEY}/backup/300"),
            400,
            "invalid url format",
        ),
        (format!("/ping/{PING_KEY}/missing"), 404, "not found"),
        (
            format!("/ping/{PING_KEY}/Backup"),
            400,
            "slug must be lowercase",
        ),
        ("/ping/wrong-key/backup".to_string(), 404, "not found"),
        (format!("/ping/{uuid}?rid=nope"), 400, "invalid uuid format"),
        (
            format!("/ping/{uuid}?items=-1"),
            400,
            "items must be a non-negative integer",
        ),
        (
            format!("/ping/{uuid}?items=abc"),
            400,
            "items must be a non-negative integer",
        ),
        (
            format!("/ping/{uuid}?items=1.5"),
            400,
            "items must be a non-negative integer",
        ),
        (
            format!("/ping/{uuid}?create=1"),
            400,
            "create=1 needs the slug form of the URL",
        ),
    ];
    for (path, status, body) in cases {
        let (got_status, got_body) = s.ping(path).await;
        assert_eq!((got_status, got_body.as_str()), (*status, *body), "{path}");
    }

    // Only the accepted pings are in the log, newest first, with their kinds.
    let kinds: Vec<String> = s
        .pings(&uuid)
        .await
        .iter()
        .map(|p| {
            format!(
                "{}{}",
                p["type"].as_str().unwrap(),
                p["exit_status"]
                    .as_i64()
                    .map(|c| format!(":{c}"))
                    .unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "fail:3",
            "log",
            "fail",
            "start",
            "success",
            "fail:255",
            "fail:7",
            "success:0",
            "log",
            "fail",
            "start",
            "success"
        ]
    );
    let n: Vec<i64> = s
        .pings(&uuid)
        .await
        .iter()
        .map(|p| p["n"].as_i64().unwrap())
        .collect();
    assert_eq!(n, (1..=12).rev().collect::<Vec<_>>());
});

both_backends!(headers_methods_and_metadata, |backend| async move {
    let s = server(backend).await;
    let check = s.create_check(json!({"name": "x"})).await;
    let uuid = check["uuid"].as_str().unwrap();
    let url = s.url(&format!("/ping/{uuid}"));

    // OPTIONS is a CORS preflight, answered and not stored (tests/bounds.rs).
    for method in ["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH"] {
        let r = s
            .client
            .request(method.parse().unwrap(), &url)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{method}");
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        assert_eq!(r.headers()["ping-body-limit"], "100");
        assert!(r.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("no-store"));
    }
    // Not-found answers carry the same headers.
    let r = s.client.get(s.url("/ping/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");

    // X-Forwarded-For is honoured from the trusted proxy (127.0.0.1 here): the
    // rightmost entry that is not a trusted proxy is the client.
    s.client
        .get(&url)
        .header("x-forwarded-for", "192.0.2.1, 198.51.100.9, 127.0.0.1")
        .header("user-agent", "curl/8.0")
        .send()
        .await
        .unwrap();
    let p = &s.pings(uuid).await[0];
    assert_eq!(p["remote_addr"], "198.51.100.9");
    assert_eq!(p["ua"], "curl/8.0");
    assert_eq!(p["method"], "GET");
    assert_eq!(p["scheme"], "http");
    let methods: Vec<&str> = vec!["PATCH", "DELETE", "PUT", "HEAD", "POST", "GET"];
    let logged = s.pings(uuid).await;
    let got: Vec<&str> = logged[1..]
        .iter()
        .map(|p| p["method"].as_str().unwrap())
        .collect();
    assert_eq!(got, methods);
});

both_backends!(
    untrusted_peers_cannot_spoof_their_address,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        let check = s.create_check(json!({})).await;
        let uuid = check["uuid"].as_str().unwrap();
        s.client
            .get(s.url(&format!("/ping/{uuid}")))
            .header("x-forwarded-for", "192.0.2.1")
            .send()
            .await
            .unwrap();
        assert_eq!(s.pings(uuid).await[0]["remote_addr"], "127.0.0.1");
    }
);

both_backends!(
    bodies_are_truncated_and_binary_is_kept,
    |backend| async move {
        let s = server(backend).await;
        let check = s.create_check(json!({})).await;
        let uuid = check["uuid"].as_str().unwrap();
        let url = s.url(&format!("/ping/{uuid}/fail"));

        let long = "x".repeat(5000);
        let r = s.client.post(&url).body(long).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let p = &s.pings(uuid).await[0];
        assert_eq!(p["body"].as_str().unwrap(), "x".repeat(100));
        assert_eq!(p["body_size"], 100);

        let binary: Vec<u8> = vec![0xff, 0xfe, 0x00, 0x41, 0xc3];
        let r = s
            .client
            .post(&url)
            .body(binary.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let p = &s.pings(uuid).await[0];
        assert_eq!(p["body"], Value::Null);
        assert_eq!(p["body_hex"], hex::encode(&binary));

        // A body far beyond the limit still gets its answer.
        let huge = vec![b'y'; 3 << 20];
        let r = s.client.post(&url).body(huge).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
);

both_backends!(items_and_the_check_summary, |backend| async move {
    let s = server(backend).await;
    let check = s.create_check(json!({"interval": "1h"})).await;
    let uuid = check["uuid"].as_str().unwrap();
    assert_eq!(check["status"], "new");
    assert_eq!(check["last_ping"], Value::Null);

    assert_eq!(s.ping(&format!("/ping/{uuid}?items=12")).await.0, 200);
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(c["status"], "up");
    assert_eq!(c["last_items"], 12);
    assert_eq!(c["n_pings"], 1);
    assert!(c["last_success"].is_string());
    assert!(c["next_due"].is_string());
    assert_eq!(c["running"], false);

    assert_eq!(
        s.ping(&format!("/ping/{uuid}?items=9223372036854775807"))
            .await
            .0,
        200
    );
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(c["last_items"], i64::MAX);
    assert_eq!(s.pings(uuid).await[0]["items"], i64::MAX);
    assert_eq!(
        s.ping(&format!("/ping/{uuid}?items=99999999999999999999999"))
            .await
            .0,
        400
    );

    assert_eq!(s.ping(&format!("/ping/{uuid}/fail")).await.0, 200);
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(c["status"], "down");
    assert_eq!(c["reason"], "failed");
});

both_backends!(slug_auto_create, |backend| async move {
    let s = server(backend).await;
    let (status, body) = s.ping(&format!("/ping/{PING_KEY}/new-job?create=1")).await;
    assert_eq!((status, body.as_str()), (201, "Created"));
    let (status, body) = s.ping(&format!("/ping/{PING_KEY}/new-job?create=1")).await;
    assert_eq!((status, body.as_str()), (200, "OK"));
    let (status, _) = s.ping(&format!("/ping/{PING_KEY}/other-job")).await;
    assert_eq!(status, 404);

    let list = s.get_json("/api/v1/checks").await;
    let checks = list["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0]["slug"], "new-job");
    assert_eq!(checks[0]["interval"], "1day");
    assert_eq!(checks[0]["n_pings"], 2);
});

both_backends!(runs_open_close_and_overlap, |backend| async move {
    let s = server(backend).await;
    let check = s.create_check(json!({})).await;
    let uuid = check["uuid"].as_str().unwrap();
    let runs_path = format!("/api/v1/checks/{uuid}/runs");
    async fn runs_of(s: &TestServer, path: &str) -> Vec<Value> {
        s.get_json(path).await["runs"].as_array().unwrap().clone()
    }

    // Without rid: start, start (supersedes), success closes the latest.
    s.ping(&format!("/ping/{uuid}/start")).await;
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(c["running"], true);
    s.ping(&format!("/ping/{uuid}/start")).await;
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    s.ping(&format!("/ping/{uuid}")).await;
    let r = runs_of(&s, &runs_path).await;
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["outcome"], "success");
    assert!(r[0]["duration"].as_f64().unwrap() >= 0.03);
    assert_eq!(r[1]["outcome"], "superseded");
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(c["running"], false);
    assert!(c["last_duration"].as_f64().unwrap() >= 0.03);
    // The closing ping records the duration.
    assert!(s.pings(uuid).await[0]["duration"].as_f64().unwrap() >= 0.03);

    // With rids: two open runs overlap; each finish closes its own run.
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    s.ping(&format!("/ping/{uuid}/start?rid={a}")).await;
    s.ping(&format!("/ping/{uuid}/start?rid={b}")).await;
    let r = runs_of(&s, &runs_path).await;
    assert_eq!(r[0]["outcome"], "open");
    assert_eq!(r[0]["overlapped"], true);
    assert_eq!(r[1]["outcome"], "open");
    assert_eq!(r[1]["overlapped"], true);
    // The overlap is recorded as an event once the ping is folded.
    let mut events = Value::Null;
    for _ in 0..100 {
        events = s.get_json(&format!("/api/v1/checks/{uuid}/events")).await;
        if !events["events"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(events["events"][0]["kind"], "overlap", "{events}");
    assert!(events["events"][0]["detail"]
        .as_str()
        .unwrap()
        .contains(&b.to_string()));
    s.ping(&format!("/ping/{uuid}/fail?rid={a}")).await;
    let r = runs_of(&s, &runs_path).await;
    assert_eq!(r[1]["rid"], a.to_string());
    assert_eq!(r[1]["outcome"], "failed");
    assert_eq!(r[0]["outcome"], "open");
    s.ping(&format!(
        "/ping/{uuid}/0?rid={}",
        b.to_string().to_uppercase()
    ))
    .await;
    let r = runs_of(&s, &runs_path).await;
    assert_eq!(r[0]["outcome"], "success");
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{uuid}")).await["running"],
        false
    );
});

both_backends!(post_only_and_paused_checks, |backend| async move {
    let s = server(backend).await;
    let check = s.create_check(json!({"methods": "POST"})).await;
    let uuid = check["uuid"].as_str().unwrap();
    assert_eq!(s.ping(&format!("/ping/{uuid}")).await.0, 200);
    let p = &s.pings(uuid).await[0];
    assert_eq!(p["type"], "ign");
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{uuid}")).await["status"],
        "new"
    );
    s.post_200(&format!("/ping/{uuid}")).await;
    assert_eq!(s.pings(uuid).await[0]["type"], "success");
});

both_backends!(concurrent_pings_are_all_counted, |backend| async move {
    let s = server(backend).await;
    let mut uuids = Vec::new();
    for i in 0..5 {
        let c = s.create_check(json!({"slug": format!("c{i}")})).await;
        uuids.push(c["uuid"].as_str().unwrap().to_string());
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let url = s.url(&format!("/ping/{}?items={i}", uuids[i % 5]));
        let client = s.client.clone();
        tasks.push(tokio::spawn(async move {
            client.get(url).send().await.unwrap().status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    for uuid in &uuids {
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["n_pings"], 40);
        let mut n: Vec<i64> = s
            .pings(uuid)
            .await
            .iter()
            .map(|p| p["n"].as_i64().unwrap())
            .collect();
        n.sort_unstable();
        assert_eq!(
            n,
            (1..=40).collect::<Vec<_>>(),
            "sequence numbers are unique and dense"
        );
    }
});

both_backends!(pause_and_resume, |backend| async move {
    let s = server(backend).await;
    let auto = s.create_check(json!({"slug": "auto"})).await;
    let manual = s
        .create_check(json!({"slug": "manual", "manual_resume": true}))
        .await;
    for c in [&auto, &manual] {
        let uuid = c["uuid"].as_str().unwrap();
        let r = s.post_200(&format!("/api/v1/checks/{uuid}/pause")).await;
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], "paused");
        assert_eq!(s.ping(&format!("/ping/{uuid}")).await.0, 200);
    }
    let auto_uuid = auto["uuid"].as_str().unwrap();
    let manual_uuid = manual["uuid"].as_str().unwrap();
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{auto_uuid}")).await["status"],
        "up"
    );
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{manual_uuid}")).await["status"],
        "paused"
    );
    assert_eq!(s.pings(manual_uuid).await[0]["type"], "ign");
    s.post_200(&format!("/api/v1/checks/{manual_uuid}/resume"))
        .await;
    assert_eq!(s.ping(&format!("/ping/{manual_uuid}")).await.0, 200);
    assert_eq!(
        s.get_json(&format!("/api/v1/checks/{manual_uuid}")).await["status"],
        "up"
    );
});
