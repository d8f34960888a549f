//! Acknowledging incidents end to end (SPEC §6.2): the signed link every
//! message carries (followed with curl, as a person's browser would), the
//! API routes, the dashboard's button, reminders, resolves, and what later
//! notifications list; with a real webhook receiver and a real SMTP server.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::sinks::{alert_checks, Request, SmtpOptions, SmtpSink, WebhookSink};
use common::TestServer;
use serde_json::{json, Value};

const BASE_URL: &str = "http://overdue.test";

async fn create(server: &TestServer, slug: &str) -> String {
    server
        .create_check(json!({"slug": slug, "name": format!("Job {slug}"), "interval": "1h"}))
        .await["uuid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The newest incident of a check.
async fn incident(server: &TestServer, slug: &str) -> Value {
    let v = server
        .get_json(&format!("/api/v1/checks/{slug}/incidents"))
        .await;
    v["incidents"][0].clone()
}

/// The checks of a webhook body's alerts in this state.
fn checks(body: &Value, status: &str) -> Vec<String> {
    let mut v = alert_checks(body, status);
    v.sort();
    v
}

fn acked_checks(body: &Value) -> Vec<String> {
    let mut v: Vec<String> = body["acknowledged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["check"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// The acknowledge link of a check's firing alert in a webhook body,
/// pointed at the test server instead of the configured base URL.
fn ack_link(server: &TestServer, body: &Value, check: &str) -> String {
    let alert = body["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["check"] == check && a["status"] == "firing")
        .unwrap_or_else(|| panic!("{check} firing in {body:#}"));
    let link = alert["annotations"]["acknowledge"]
        .as_str()
        .unwrap_or_else(|| panic!("an acknowledge link in {alert:#}"));
    let path = link
        .strip_prefix(BASE_URL)
        .unwrap_or_else(|| panic!("{link} starts with the base URL"));
    assert!(path.starts_with("/ack/"), "{link}");
    server.url(path)
}

/// curl, as a person following the link would: (status, body).
fn curl(args: &[&str]) -> (u16, String) {
    common::need(common::Peer::Curl);
    let out = Command::new("curl")
        .args(["-sS", "--noproxy", "*", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

/// Waits for the `n`th webhook call and returns its body.
async fn call(hook: &WebhookSink, n: usize) -> Value {
    let calls: Vec<Request> = hook.wait_for(n).await;
    calls[n - 1].json()
}

fn config(hook: &WebhookSink, smtp: Option<&SmtpSink>) -> String {
    config_ticking(hook, smtp, None)
}

/// [`config`], and with `ticker` the check "ticker" goes to that receiver
/// alone, in a group of its own: its reminders, every repeat_interval, are
/// a clock of the server's own that a test can wait on.
fn config_ticking(
    hook: &WebhookSink,
    smtp: Option<&SmtpSink>,
    ticker: Option<&WebhookSink>,
) -> String {
    let ticker = ticker.map_or(String::new(), |t| {
        format!(
            r#"
[[receivers]]
name = "ticker"
type = "webhook"
url = "{}"

[[route.routes]]
matchers = ['check="ticker"']
receiver = "ticker"
group_by = ["check"]
"#,
            t.url("/ticker")
        )
    });
    let mail = smtp.map_or(String::new(), SmtpSink::mail_then_hook_toml);
    format!(
        r#"
base_url = "{BASE_URL}"
{hook}{ticker}{mail}"#,
        hook = hook.hook_toml(
            r#"group_by = ["alertname"]
group_wait = "300ms"
group_interval = "500ms"
repeat_interval = "3s"
"#
        ),
    )
}

both_backends!(
    an_acknowledged_incident_is_left_out_of_reminders_and_resolves,
    needs = [aiosmtpd, curl],
    |backend| async move {
        let hook = WebhookSink::start().await;
        let smtp = SmtpSink::start(SmtpOptions::default());
        let ticks = WebhookSink::start().await;
        let toml = config_ticking(&hook, Some(&smtp), Some(&ticks));
        let server = TestServer::start(backend, &toml).await;
        let ticker = create(&server, "ticker").await;
        server.ping_ok(&format!("/ping/{ticker}/fail")).await;
        let a = create(&server, "a").await;
        let b = create(&server, "b").await;
        server.ping_ok(&format!("/ping/{a}/fail")).await;
        server.ping_ok(&format!("/ping/{b}/fail")).await;

        // The first notification lists both, each with its own link.
        let mut first = call(&hook, 1).await;
        if checks(&first, "firing").len() < 2 {
            first = call(&hook, 2).await;
        }
        assert_eq!(checks(&first, "firing"), ["a", "b"], "{first:#}");
        assert_eq!(first["acknowledged"], json!([]));
        let link_a = ack_link(&server, &first, "a");
        assert_ne!(link_a, ack_link(&server, &first, "b"));
        let id_a = incident(&server, "a").await["id"].as_i64().unwrap();
        assert!(link_a.contains(&format!("/ack/{id_a}.")), "{link_a}");

        // GET shows a confirmation page and acknowledges nothing (mail
        // scanners follow links).
        for _ in 0..3 {
            let (status, page) = curl(&[&link_a]);
            assert_eq!(status, 200, "{page}");
            assert!(
                page.contains("Job a") && page.contains("<form method=\"post\""),
                "{page}"
            );
        }
        let i = server.get_json(&format!("/api/v1/incidents/{id_a}")).await;
        assert_eq!(i["acknowledged"], Value::Null, "{i:#}");

        // An altered token is refused, by GET and by POST.
        let mut altered = link_a.clone();
        let last = altered.pop().unwrap();
        altered.push(if last == 'A' { 'B' } else { 'A' });
        let other_id = link_a.replace(&format!("/ack/{id_a}."), &format!("/ack/{}.", id_a + 1));
        for bad in [&altered, &other_id] {
            assert_eq!(curl(&[bad]).0, 403, "{bad}");
            assert_eq!(curl(&["-X", "POST", "-d", "by=eve", bad]).0, 403, "{bad}");
        }
        let i = server.get_json(&format!("/api/v1/incidents/{id_a}")).await;
        assert_eq!(i["acknowledged"], Value::Null, "{i:#}");

        // POST acknowledges, naming who and why; it sends nothing by itself.
        let calls_before = hook.requests().len();
        let (status, page) = curl(&["-d", "by=ana", "-d", "comment=restarting the db", &link_a]);
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("Acknowledged by <strong>ana</strong>"),
            "{page}"
        );
        let i = server.get_json(&format!("/api/v1/incidents/{id_a}")).await;
        assert_eq!(i["acknowledged"]["by"], "ana", "{i:#}");
        assert_eq!(i["acknowledged"]["comment"], "restarting the db");
        let listed = incident(&server, "a").await;
        assert_eq!(listed["acknowledged"]["by"], "ana", "{listed:#}");
        // A second acknowledgement leaves the first standing.
        let (status, _) = curl(&["-d", "by=bob", &link_a]);
        assert_eq!(status, 200);
        let i = server.get_json(&format!("/api/v1/incidents/{id_a}")).await;
        assert_eq!(i["acknowledged"]["by"], "ana");
        let metrics = server
            .client
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap();
        let metrics = metrics.text().await.unwrap();
        assert!(
            metrics
                .lines()
                .any(|l| l == "overdue_incidents_acknowledged 1"),
            "{metrics}"
        );

        // The reminder at repeat_interval lists b only, and a as acknowledged.
        let reminder = call(&hook, calls_before + 1).await;
        assert_eq!(checks(&reminder, "firing"), ["b"], "{reminder:#}");
        assert_eq!(acked_checks(&reminder), ["a"], "{reminder:#}");
        assert_eq!(reminder["acknowledged"][0]["by"], "ana");
        assert!(reminder["acknowledged"][0]["at"].is_string());

        // b acknowledged through the API: nothing fires, so no reminder.
        let id_b = incident(&server, "b").await["id"].as_i64().unwrap();
        let r = server
            .client
            .post(server.url(&format!("/api/v1/incidents/{id_b}/ack")))
            .json(&json!({"by": "bob"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["acknowledged"]["by"], "bob", "{v:#}");
        // Two reminders of the ticker later (repeat_interval each), still
        // no call: the group's reminders are owed as often.
        let calls = hook.requests().len();
        let ticked = ticks.requests().len();
        ticks.wait_for(ticked + 2).await;
        assert_eq!(
            hook.requests().len(),
            calls,
            "a reminder of acknowledged alerts"
        );

        // a recovers: its resolve is sent, b still listed as acknowledged.
        let n = hook.requests().len();
        server.ping_ok(&format!("/ping/{a}")).await;
        let resolve = call(&hook, n + 1).await;
        assert_eq!(checks(&resolve, "resolved"), ["a"], "{resolve:#}");
        assert_eq!(checks(&resolve, "firing"), Vec::<String>::new());
        assert_eq!(acked_checks(&resolve), ["b"], "{resolve:#}");
        // The link expired with the incident.
        let (status, page) = curl(&[&link_a]);
        assert_eq!(status, 410, "{page}");
        assert_eq!(curl(&["-X", "POST", &link_a]).0, 410);

        // A new incident of a is not acknowledged: announced again.
        server.ping_ok(&format!("/ping/{a}/fail")).await;
        let again = call(&hook, n + 2).await;
        assert_eq!(checks(&again, "firing"), ["a"], "{again:#}");
        assert_ne!(ack_link(&server, &again, "a"), link_a);

        // Mail: the link in the first mail, "Acknowledged" in a later one.
        let mails = smtp.wait_for(4).await;
        let text = |m: &common::sinks::SmtpMessage| m.text.clone().unwrap_or_default();
        let first_mail = text(&mails[0]);
        assert!(
            first_mail.contains(&format!("acknowledge: {BASE_URL}/ack/{id_a}.")),
            "{first_mail}"
        );
        assert!(
            mails
                .iter()
                .any(|m| text(m).contains("Acknowledged (1):")
                    && text(m).contains("a — by ana at")),
            "{:#?}",
            mails.iter().map(text).collect::<Vec<_>>()
        );
        server.stop().await;
    }
);

both_backends!(
    the_api_acknowledges_and_takes_back_with_clear_errors,
    |backend| async move {
        let hook = WebhookSink::start().await;
        let server = TestServer::start(backend, &config(&hook, None)).await;
        let a = create(&server, "a").await;
        server.ping_ok(&format!("/ping/{a}/fail")).await;
        let first = call(&hook, 1).await;
        assert_eq!(checks(&first, "firing"), ["a"]);
        let id = incident(&server, "a").await["id"].as_i64().unwrap();
        let url = server.url(&format!("/api/v1/incidents/{id}/ack"));
        let http = &server.client;

        // Bad bodies name what is wrong.
        let r = http
            .post(&url)
            .json(&json!({"by": "x".repeat(201)}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        assert!(e.to_string().contains("by"), "{e}");
        let r = http
            .post(&url)
            .json(&json!({"who": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        assert!(r.text().await.unwrap().contains("who"));
        let r = http
            .post(server.url("/api/v1/incidents/999999/ack"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);

        // No body at all: acknowledged by "api".
        let r = http.post(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["acknowledged"]["by"], "api", "{v:#}");
        assert_eq!(v["check"], "a");

        // The notifications API does not hand the link out (a read key
        // could acknowledge with it).
        let listed = server.get_json("/api/v1/notifications").await;
        let text = listed.to_string();
        assert!(text.contains("/ack/<redacted>"), "{text}");
        assert!(!text.contains(&format!("/ack/{id}.")), "{text}");

        // The dashboard shows who acknowledged it.
        let page = common::get_text(http, server.url(&format!("/checks/{a}"))).await;
        assert!(page.contains("class=\"acked-by\">api</strong>"), "{page}");

        // Taken back: reminders start again at repeat_interval.
        let n = hook.requests().len();
        let r = http.delete(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["acknowledged"], Value::Null);
        let reminder = call(&hook, n + 1).await;
        assert_eq!(checks(&reminder, "firing"), ["a"], "{reminder:#}");

        // The dashboard's button acknowledges through the signed link.
        let page = common::get_text(http, server.url(&format!("/checks/{a}"))).await;
        let action = page
            .split("<form method=\"post\" action=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_else(|| panic!("an acknowledge form in {page}"))
            // The attribute is HTML-escaped, as a browser reads it.
            .replace("&#x2f;", "/");
        let action = action.as_str();
        assert!(action.starts_with(&format!("/ack/{id}.")), "{action}");
        let r = http
            .post(server.url(action))
            .form(&[("by", "dash")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let i = server.get_json(&format!("/api/v1/incidents/{id}")).await;
        assert_eq!(i["acknowledged"]["by"], "dash");

        // Resolved: acknowledging is a conflict.
        server.ping_ok(&format!("/ping/{a}")).await;
        let deadline = Instant::now() + common::HANG_GUARD;
        loop {
            let r = http.post(&url).send().await.unwrap();
            if r.status() == 409 {
                assert!(r.text().await.unwrap().contains("resolved"));
                break;
            }
            assert!(Instant::now() < deadline, "still acknowledgeable");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(http.delete(&url).send().await.unwrap().status(), 409);
        server.stop().await;
    }
);

/// PostgreSQL, two replicas: the link the leader signed works on the other
/// replica (the key is shared through the database), an acknowledgement
/// taken there stops the leader's reminders, and taking it back there starts
/// them again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "postgres",
    ignore = "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL"
)]
#[cfg_attr(
    all(overdue_missing = "curl", not(overdue_missing = "postgres")),
    ignore = "needs curl"
)]
async fn postgres_a_link_acknowledged_on_another_replica_stops_the_leaders_reminders() {
    common::need_postgres();
    let hook = WebhookSink::start().await;
    let db = common::TestDb::new(common::Backend::Postgres).await;
    let extra = format!(
        "heartbeat_period = \"500ms\"\nlease_ttl = \"15s\"\n{}",
        config(&hook, None)
    );
    let path = common::write_config(db.dir.path(), &db.config_toml(&extra));
    let leader = common::ChildServer::spawn(&path);
    let http = common::client();
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        let m = http.get(format!("{}/metrics", leader.base)).send().await;
        if let Ok(r) = m {
            if r.text().await.unwrap().contains("overdue_is_leader 1") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the first replica leads");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = common::ChildServer::spawn(&path);
    // far is acknowledged and taken back; control, in the same group, never
    // is: its reminders, every repeat_interval (3s), are the clock the test
    // reads the leader's reminders of far by.
    let mut uuids = Vec::new();
    for slug in ["far", "control"] {
        let uuid =
            common::create_on(&http, &other.base, json!({"slug": slug, "interval": "1h"})).await;
        common::get_200(&http, &format!("{}/ping/{uuid}/fail", other.base)).await;
        uuids.push(uuid);
    }
    let (n, first) = call_where(&hook, 1, |b| checks(b, "firing") == ["control", "far"]).await;
    let link = first["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["check"] == "far")
        .unwrap()["annotations"]["acknowledge"]
        .as_str()
        .unwrap()
        .replace(BASE_URL, &other.base);
    let (status, page) = curl(&["-d", "by=ana", &link]);
    assert_eq!(status, 200, "{page}");
    // Acknowledged on the other replica: the leader's next two reminders
    // (every flush reads acknowledgements again) list control firing and
    // far acknowledged, not firing.
    let reminders = hook.wait_for(n + 2).await;
    for r in &reminders[n..] {
        let body = r.json();
        assert_eq!(checks(&body, "firing"), ["control"], "{body:#}");
        assert_eq!(acked_checks(&body), ["far"], "{body:#}");
    }
    // Taken back on the other replica: the leader reminds of far at its
    // next flush, long before its 30 s resync (ten reminders of control)
    // would tell it: by control's second reminder after.
    let v: Value = http
        .get(format!("{}/api/v1/checks/far/incidents", other.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = v["incidents"][0]["id"].as_i64().unwrap();
    let r = http
        .delete(format!("{}/api/v1/incidents/{id}/ack", other.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let taken_back = hook.requests().len();
    let far_firing = |b: &Value| checks(b, "firing").iter().any(|c| c == "far");
    let (n, _) = call_where(&hook, taken_back + 1, far_firing).await;
    assert!(
        n <= taken_back + 2,
        "far was reminded of only at call {n}, {} calls after it was taken back",
        n - taken_back
    );
    // The resolve still comes, from the leader.
    let r = http
        .get(format!("{}/ping/{}", other.base, uuids[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    call_where(&hook, n + 1, |b| checks(b, "resolved") == ["far"]).await;
}

/// Waits for the first webhook call from the `from`th on (counting from 1)
/// whose body satisfies `pred`; returns its number and body.
async fn call_where(
    hook: &WebhookSink,
    from: usize,
    pred: impl Fn(&Value) -> bool,
) -> (usize, Value) {
    let mut n = from;
    loop {
        let body = call(hook, n).await;
        if pred(&body) {
            return (n, body);
        }
        n += 1;
    }
}
