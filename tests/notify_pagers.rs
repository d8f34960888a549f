//! PagerDuty and Opsgenie receivers end to end (SPEC §6.1): the real server
//! delivers to a recorder on loopback (`url` pointed at it), which checks
//! each request against the service's published API.

mod common;

use std::time::{Duration, Instant};

use common::sinks::{Behaviour, WebhookSink};
use common::{notifications_until, TestServer};
use serde_json::{json, Value};

const ROUTING_KEY: &str = "R0UT1NGKEY0123456789abcdefABCDEF";
const GENIE_KEY: &str = "6f1e3b0a-0000-4d4d-9c9c-000000genie";

async fn create(server: &TestServer, slug: &str, labels: Value) -> String {
    let c = server
        .create_check(json!({"slug": slug, "interval": "1h", "labels": labels}))
        .await;
    c["uuid"].as_str().unwrap().to_string()
}

async fn fail_all(server: &TestServer, uuids: &[String]) {
    let mut set = tokio::task::JoinSet::new();
    for uuid in uuids {
        let url = server.url(&format!("/ping/{uuid}/fail"));
        let http = server.client.clone();
        set.spawn(async move { http.get(url).send().await.unwrap().status().as_u16() });
    }
    while let Some(status) = set.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
}

async fn succeed_all(server: &TestServer, uuids: &[String]) {
    for uuid in uuids {
        assert_eq!(server.ping(&format!("/ping/{uuid}")).await.0, 200);
    }
}

/// An Events API v2 request as PagerDuty documents it.
fn assert_pagerduty_event(r: &common::sinks::Request) -> Value {
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v2/enqueue");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let e = r.json();
    assert_eq!(e["routing_key"], ROUTING_KEY);
    let action = e["event_action"].as_str().unwrap();
    assert!(matches!(action, "trigger" | "resolve"), "{e}");
    let dedup = e["dedup_key"].as_str().unwrap();
    assert!(!dedup.is_empty() && dedup.len() <= 255);
    let p = &e["payload"];
    let summary = p["summary"].as_str().unwrap();
    assert!(!summary.is_empty() && summary.chars().count() <= 1024);
    assert!(!p["source"].as_str().unwrap().is_empty());
    assert!(matches!(
        p["severity"].as_str().unwrap(),
        "critical" | "error" | "warning" | "info"
    ));
    for l in e["links"].as_array().unwrap() {
        assert!(l["href"].as_str().unwrap().contains("/checks/"), "{l}");
    }
    e
}

fn pagerduty_config(sink: &WebhookSink, extra: &str) -> String {
    format!(
        r#"
[[receivers]]
name = "pager"
type = "pagerduty"
routing_key = "{ROUTING_KEY}"
url = "{url}"
{extra}

[route]
receiver = "pager"
group_by = ["team"]
group_wait = "1s"
group_interval = "1s"

[notifications]
retry_base = "100ms"
"#,
        url = sink.url("/v2/enqueue"),
    )
}

both_backends!(
    a_storm_of_fifty_checks_is_one_pagerduty_event_per_group_and_one_resolve,
    |backend| async move {
        let sink = WebhookSink::start().await;
        let server = TestServer::start(backend, &pagerduty_config(&sink, "")).await;
        let mut data = Vec::new();
        for i in 0..50 {
            data.push(create(&server, &format!("data-{i:02}"), json!({"team": "data"})).await);
        }
        let web = vec![create(&server, "web-0", json!({"team": "web"})).await];
        fail_all(&server, &[data.clone(), web.clone()].concat()).await;
        let got = sink.wait_for(2).await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(sink.requests().len(), 2, "one event per group");
        let events: Vec<Value> = got.iter().map(assert_pagerduty_event).collect();
        let data_event = events
            .iter()
            .find(|e| e["payload"]["custom_details"]["num_firing"] == 50)
            .expect("the data group's event lists all fifty");
        assert_eq!(data_event["event_action"], "trigger");
        assert!(data_event["payload"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("[FIRING:50] team=data"));
        assert_eq!(data_event["links"].as_array().unwrap().len(), 50);
        let key = data_event["dedup_key"].clone();
        assert_ne!(events[0]["dedup_key"], events[1]["dedup_key"]);

        // All fifty recover: one resolve for the group, with the same key.
        succeed_all(&server, &data).await;
        let got = sink.wait_for(3).await;
        let resolve = assert_pagerduty_event(&got[2]);
        assert_eq!(resolve["event_action"], "resolve");
        assert_eq!(resolve["dedup_key"], key);
        assert!(resolve["payload"]["summary"]
            .as_str()
            .unwrap()
            .contains("RESOLVED"));
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(sink.requests().len(), 3, "one resolve");

        // The routing key is in no API answer, metric or log-visible target.
        for path in ["/api/v1/receivers", "/api/v1/notifications", "/metrics"] {
            let text = server.get_text(path).await;
            assert!(!text.contains(ROUTING_KEY), "{path} shows the routing key");
        }
        let receivers = server.get_json("/api/v1/receivers").await;
        let pager = receivers["receivers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pager")
            .unwrap()
            .clone();
        assert_eq!(pager["type"], "pagerduty", "{pager}");
        server.stop().await;
    }
);

both_backends!(
    pagerduty_retries_a_429_after_its_retry_after_and_dead_letters_a_400,
    |backend| async move {
        let sink = WebhookSink::start().await;
        sink.push(Behaviour::StatusWithHeaders(
            429,
            vec![("Retry-After".into(), "1".into())],
        ));
        let server = TestServer::start(backend, &pagerduty_config(&sink, "")).await;
        let a = create(&server, "slow", json!({"team": "a"})).await;
        fail_all(&server, &[a]).await;
        let got = sink.wait_for(2).await;
        let waited = got[1].received - got[0].received;
        assert!(
            waited >= Duration::from_millis(900),
            "Retry-After honoured: {waited:?}"
        );
        assert_eq!(got[0].json()["dedup_key"], got[1].json()["dedup_key"]);
        assert_eq!(
            got[0].header("idempotency-key"),
            got[1].header("idempotency-key")
        );
        notifications_until(&server, "?state=delivered", |l| l.len() == 1).await;

        // A 400 (PagerDuty's "invalid event") is not retried.
        sink.push(Behaviour::Status(400));
        let b = create(&server, "bad", json!({"team": "b"})).await;
        fail_all(&server, &[b]).await;
        let dead = notifications_until(&server, "?state=dead", |l| l.len() == 1).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(sink.requests().len(), 3, "no retry after HTTP 400");
        assert_eq!(dead[0]["attempts"], 1);
        let error = dead[0]["last_error"].as_str().unwrap();
        assert!(error.contains("400"), "{error}");
        assert!(!error.contains(ROUTING_KEY));
        server.stop().await;
    }
);

both_backends!(
    opsgenie_creates_by_alias_and_closes_by_alias,
    |backend| async move {
        let sink = WebhookSink::start().await;
        let toml = format!(
            r#"
[[receivers]]
name = "genie"
type = "opsgenie"
api_key = "{GENIE_KEY}"
priority = "P2"
url = "{url}"

[route]
receiver = "genie"
group_by = ["team"]
group_wait = "1s"
group_interval = "1s"
"#,
            url = sink.url("/"),
        );
        let server = TestServer::start(backend, &toml).await;
        let mut uuids = Vec::new();
        for i in 0..30 {
            uuids.push(
                create(
                    &server,
                    &format!("a-long-check-name-number-{i:02}"),
                    json!({"team": "ops"}),
                )
                .await,
            );
        }
        fail_all(&server, &uuids).await;
        let got = sink.wait_for(1).await;
        let create_req = &got[0];
        assert_eq!(create_req.method, "POST");
        assert_eq!(create_req.path, "/v2/alerts");
        assert_eq!(
            create_req.header("authorization"),
            Some(format!("GenieKey {GENIE_KEY}").as_str())
        );
        assert_eq!(create_req.header("content-type"), Some("application/json"));
        let body = create_req.json();
        let message = body["message"].as_str().unwrap();
        assert!(message.chars().count() <= 130, "{message}");
        assert!(message.starts_with("[FIRING:30] team=ops"));
        let alias = body["alias"].as_str().unwrap().to_string();
        assert!(!alias.is_empty() && alias.len() <= 512);
        assert_eq!(body["priority"], "P2");
        assert!(body["description"]
            .as_str()
            .unwrap()
            .contains("a-long-check-name-number-29"));
        assert!(body["tags"].as_array().unwrap().len() <= 20);

        succeed_all(&server, &uuids).await;
        let got = sink.wait_for(2).await;
        let close = &got[1];
        assert_eq!(close.method, "POST");
        assert_eq!(
            close.path,
            format!("/v2/alerts/{alias}/close?identifierType=alias")
        );
        assert_eq!(
            close.header("authorization"),
            Some(format!("GenieKey {GENIE_KEY}").as_str())
        );
        assert!(close.json()["note"].as_str().unwrap().contains("RESOLVED"));
        let receivers = server.get_text("/api/v1/receivers").await;
        assert!(!receivers.contains(GENIE_KEY));
        server.stop().await;
    }
);

/// The server as a process, logging at debug: deliveries that fail and
/// succeed for every secret-bearing type leave no secret in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_the_log() {
    let sink = WebhookSink::start().await;
    for _ in 0..20 {
        sink.push(Behaviour::Status(400));
    }
    let db = common::TestDb::new(common::Backend::Sqlite).await;
    let secrets = [
        ("pagerduty", format!("routing_key = \"{ROUTING_KEY}\"\nurl = \"{}\"", sink.url("/v2/enqueue"))),
        ("opsgenie", format!("api_key = \"{GENIE_KEY}\"\nurl = \"{}\"", sink.url(""))),
        ("telegram", format!("bot_token = \"42:TGsecretTOKEN\"\nchat_id = \"1\"\nurl = \"{}\"", sink.url(""))),
        ("discord", format!("url = \"{}\"", sink.url("/api/webhooks/1/DISCORDsecretPATH"))),
        ("msteams", format!("url = \"{}\"", sink.url("/workflows/x?sig=TEAMSsecretSIG"))),
        ("ntfy", format!("url = \"{}\"\ntoken = \"NTFYsecretTOKEN\"", sink.url("/topic"))),
        ("pushover", format!("token = \"POsecretTOKEN\"\nuser_key = \"POsecretUSER\"\nurl = \"{}\"", sink.url("/1/messages.json"))),
        ("gotify", format!("token = \"GOTIFYsecretTOKEN\"\nurl = \"{}\"", sink.url(""))),
        ("command", "command = [\"sh\", \"-c\", \"echo \\\"$1 failed\\\" >&2; exit 1\", \"sh\", \"json://u:CMDsecretPASS@h/x\"]".to_string()),
    ];
    let mut toml = String::new();
    let mut routes = Vec::new();
    for (kind, keys) in &secrets {
        toml.push_str(&format!(
            "[[receivers]]\nname = \"{kind}\"\ntype = \"{kind}\"\n{keys}\n\n"
        ));
        routes.push(format!(
            "{{ matchers = ['team=\"t\"'], receiver = \"{kind}\", continue = true }}"
        ));
    }
    toml.push_str(&format!(
        "[route]\nreceiver = \"pagerduty\"\ngroup_wait = \"100ms\"\nroutes = [\n{}\n]\n\n[notifications]\nretry_base = \"100ms\"\n",
        routes.join(",\n")
    ));
    let config = common::write_config(db.dir.path(), &db.config_toml(&toml));
    let server = common::ChildServer::spawn_logging(&config, "overdue=debug,info");
    let http = common::client();
    let uuid = common::create_on(
        &http,
        &server.base,
        json!({"slug": "leaky", "interval": "1h", "labels": {"team": "t"}}),
    )
    .await;
    common::get_200(&http, &format!("{}/ping/{uuid}/fail", server.base)).await;
    // Every receiver's notification fails for good (400s, exit 1).
    let start = Instant::now();
    loop {
        let v: Value = http
            .get(format!("{}/api/v1/notifications?state=dead", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["notifications"].as_array().map_or(0, Vec::len) >= secrets.len() {
            break;
        }
        assert!(start.elapsed() < common::HANG_GUARD, "dead letters: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = server.log();
    assert!(
        log.contains("pagerduty"),
        "the log names the receivers:\n{log}"
    );
    for secret in [
        ROUTING_KEY,
        GENIE_KEY,
        "TGsecretTOKEN",
        "DISCORDsecretPATH",
        "TEAMSsecretSIG",
        "NTFYsecretTOKEN",
        "POsecretTOKEN",
        "POsecretUSER",
        "GOTIFYsecretTOKEN",
        "CMDsecretPASS",
    ] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}
