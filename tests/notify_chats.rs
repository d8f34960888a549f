//! The chat and push receivers (SPEC §6.1) against a recorder on loopback
//! standing in for each service (`url` pointed at it): every request is
//! checked against the service's published API (method, path, auth, content
//! type, required fields, size limits), for a firing and then a resolved
//! group, a 429 with `Retry-After` and a 400. Each receiver is built from
//! TOML exactly as a config file gives it.

mod common;

use std::time::Duration;

use common::messages::{self, ctx, labels, message, receiver};
use common::sinks::{Behaviour, Request, WebhookSink};
use overdue::notify::message::{Alert, AlertStatus, Message};
use overdue::notify::receiver::{Receiver, ReceiverInput, SendError};
use serde_json::Value;

const BOT_TOKEN: &str = "123456789:AAHsecretBotTokenXYZ";
const NTFY_TOKEN: &str = "tk_ntfysecrettoken0123456789";
const PUSHOVER_TOKEN: &str = "azGDORePK8gMaC0QOYAMyEEuzJnyUi";
const PUSHOVER_USER: &str = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG";
const GOTIFY_TOKEN: &str = "AgotifyAppToken1";

/// The alert of `check` (named after itself) as the server raises it.
fn alert(status: AlertStatus, check: &str) -> Alert {
    let link = format!("http://overdue.test/checks/{check}");
    let annotations = labels(&[("last_ping", "2026-12-04T02:00:00Z"), ("link", &link)]);
    messages::alert(status, check, check, "overdue", annotations)
}

/// Two firing checks, one with markup (and a mention) in its name.
fn firing() -> Message {
    message(vec![
        alert(AlertStatus::Firing, "nightly-backup"),
        alert(AlertStatus::Firing, "<b>x</b>*y*_z_@everyone"),
    ])
}

fn resolved() -> Message {
    message(vec![alert(AlertStatus::Resolved, "nightly-backup")])
}

/// Three hundred firing checks: more than any service's limit holds.
fn storm() -> Message {
    message(
        (0..300)
            .map(|i| {
                alert(
                    AlertStatus::Firing,
                    &format!("check-with-a-long-name-{i:03}"),
                )
            })
            .collect(),
    )
}

/// Sends `m`, expects it delivered, and returns the request the recorder got.
async fn delivered(r: &Receiver, sink: &WebhookSink, m: &Message) -> Request {
    let before = sink.requests().len();
    r.send(&ctx(), m).await.expect("delivered");
    sink.wait_for(before + 1).await.remove(before)
}

/// A 429 with `Retry-After` is recoverable and says how long to wait; the
/// next attempt is delivered; a 400 is permanent. No error names a secret.
async fn errors_are_classified(r: &Receiver, sink: &WebhookSink, secrets: &[&str]) {
    sink.push(Behaviour::StatusWithHeaders(
        429,
        vec![("Retry-After".into(), "7".into())],
    ));
    match r.send(&ctx(), &firing()).await {
        Err(SendError::Recoverable {
            retry_after,
            message,
        }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)), "{message}");
            for s in secrets {
                assert!(!message.contains(s), "{message}");
            }
        }
        other => panic!("429: {other:?}"),
    }
    r.send(&ctx(), &firing())
        .await
        .expect("the retry is delivered");
    sink.push(Behaviour::Status(400));
    match r.send(&ctx(), &firing()).await {
        Err(SendError::Permanent(message)) => {
            assert!(message.contains("400"), "{message}");
            for s in secrets {
                assert!(!message.contains(s), "{message}");
            }
        }
        other => panic!("400: {other:?}"),
    }
    let shown = format!("{r:?} {}", r.target());
    for s in secrets {
        assert!(!shown.contains(s), "{shown}");
    }
}

#[tokio::test]
async fn discord_webhook() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"d\"\ntype = \"discord\"\nurl = \"{}\"",
        sink.url("/api/webhooks/123/secret-token")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/api/webhooks/123/secret-token");
    assert_eq!(req.header("content-type"), Some("application/json"));
    let b = req.json();
    let content = b["content"].as_str().unwrap();
    assert!(
        content.starts_with("**\\[FIRING:2\\] team=data"),
        "{content}"
    );
    assert!(
        content.contains("\\<b\\>x\\</b\\>\\*y\\*\\_z\\_@everyone"),
        "{content}"
    );
    assert_eq!(b["allowed_mentions"]["parse"], Value::Array(vec![]));
    assert!(b["embeds"][0]["title"].as_str().unwrap().chars().count() <= 256);
    let req = delivered(&r, &sink, &resolved()).await;
    assert!(req.json()["content"].as_str().unwrap().contains("RESOLVED"));
    let req = delivered(&r, &sink, &storm()).await;
    let content = req.json()["content"].as_str().unwrap().to_string();
    assert!(
        content.chars().count() <= 2000,
        "{}",
        content.chars().count()
    );
    assert!(
        content.lines().last().unwrap().starts_with("… and "),
        "{content}"
    );
    errors_are_classified(&r, &sink, &["secret-token"]).await;
}

#[tokio::test]
async fn telegram_send_message() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"t\"\ntype = \"telegram\"\nbot_token = \"{BOT_TOKEN}\"\nchat_id = \"-1001234567890\"\nurl = \"{}\"",
        sink.url("")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, format!("/bot{BOT_TOKEN}/sendMessage"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    let b = req.json();
    assert_eq!(b["chat_id"], "-1001234567890");
    assert_eq!(b["parse_mode"], "HTML");
    let text = b["text"].as_str().unwrap();
    assert!(text.starts_with("<b>[FIRING:2] team=data"), "{text}");
    assert!(text.contains("&lt;b&gt;x&lt;/b&gt;"), "{text}");
    assert!(!text.contains("<b>x</b>"), "user text is escaped: {text}");
    let req = delivered(&r, &sink, &resolved()).await;
    assert!(req.json()["text"].as_str().unwrap().contains("RESOLVED"));
    let req = delivered(&r, &sink, &storm()).await;
    let text = req.json()["text"].as_str().unwrap().to_string();
    assert!(text.chars().count() <= 4096, "{}", text.chars().count());
    assert!(text.lines().last().unwrap().starts_with("… and "));
    assert!(!r.target().contains(BOT_TOKEN), "{}", r.target());
    errors_are_classified(&r, &sink, &[BOT_TOKEN, "AAHsecret"]).await;
}

#[tokio::test]
async fn msteams_adaptive_card() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"m\"\ntype = \"msteams\"\nurl = \"{}\"",
        sink.url("/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("content-type"), Some("application/json"));
    let b = req.json();
    assert_eq!(b["type"], "message");
    let a = &b["attachments"][0];
    assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
    assert_eq!(a["content"]["type"], "AdaptiveCard");
    assert!(a["content"]["version"].as_str().is_some());
    let body = a["content"]["body"].as_array().unwrap();
    assert!(body[0]["text"]
        .as_str()
        .unwrap()
        .starts_with("[FIRING:2] team=data"));
    assert!(body
        .iter()
        .any(|t| t["text"].as_str().unwrap().contains("\\*y\\*")));
    assert_eq!(a["content"]["actions"][0]["type"], "Action.OpenUrl");
    let req = delivered(&r, &sink, &resolved()).await;
    assert!(req.text().contains("RESOLVED"));
    let req = delivered(&r, &sink, &storm()).await;
    assert!(req.body.len() <= 28_000, "{} bytes", req.body.len());
    errors_are_classified(&r, &sink, &["s3cr3t", "/workflows/abc"]).await;
}

/// An RFC 2047 encoded word (`=?UTF-8?B?…?=`) decoded; anything else must be ASCII.
fn decoded(header: &str) -> String {
    use base64::Engine as _;
    match header
        .strip_prefix("=?UTF-8?B?")
        .and_then(|h| h.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
        )
        .expect("UTF-8"),
        None => {
            assert!(header.is_ascii(), "{header}");
            header.to_string()
        }
    }
}

#[tokio::test]
async fn ntfy_topic_with_headers() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"n\"\ntype = \"ntfy\"\nurl = \"{}\"\ntoken = \"{NTFY_TOKEN}\"",
        sink.url("/ops-alerts")
    ));
    let mut m = firing();
    m.alerts[0]
        .labels
        .insert("check".into(), "热搜-微博".into());
    m.alerts[0]
        .annotations
        .insert("link".into(), "http://overdue.test/checks/热搜-微博".into());
    let req = delivered(&r, &sink, &m).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/ops-alerts");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {NTFY_TOKEN}").as_str())
    );
    let title = decoded(req.header("title").unwrap());
    assert!(
        title.starts_with("[FIRING:2] team=data — 热搜-微博"),
        "{title}"
    );
    assert_eq!(req.header("priority"), Some("high"));
    assert_eq!(req.header("tags"), Some("rotating_light"));
    // A URL travels percent-encoded, not as an encoded word.
    assert_eq!(
        req.header("click"),
        Some("http://overdue.test/checks/%E7%83%AD%E6%90%9C-%E5%BE%AE%E5%8D%9A")
    );
    assert!(
        req.text().contains("热搜-微博 — down (overdue)"),
        "{}",
        req.text()
    );
    let req = delivered(&r, &sink, &resolved()).await;
    assert_eq!(
        decoded(req.header("title").unwrap()),
        "[RESOLVED] team=data — nightly-backup"
    );
    assert_eq!(req.header("priority"), Some("default"));
    let req = delivered(&r, &sink, &storm()).await;
    assert!(req.body.len() <= 4096, "{} bytes", req.body.len());
    errors_are_classified(&r, &sink, &[NTFY_TOKEN, "ops-alerts"]).await;

    // Basic auth instead of a token.
    let r = receiver(&format!(
        "name = \"n\"\ntype = \"ntfy\"\nurl = \"{}\"\nusername = \"phil\"\npassword = \"pw-secret\"",
        sink.url("/ops-alerts")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(
        req.header("authorization"),
        Some("Basic cGhpbDpwdy1zZWNyZXQ=")
    );
}

#[tokio::test]
async fn pushover_form() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"p\"\ntype = \"pushover\"\ntoken = \"{PUSHOVER_TOKEN}\"\nuser_key = \"{PUSHOVER_USER}\"\npriority = 1\nurl = \"{}\"",
        sink.url("/1/messages.json")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/1/messages.json");
    assert_eq!(
        req.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let form: std::collections::HashMap<String, String> =
        form_urlencoded::parse(&req.body).into_owned().collect();
    assert_eq!(form["token"], PUSHOVER_TOKEN);
    assert_eq!(form["user"], PUSHOVER_USER);
    assert!(form["title"].starts_with("[FIRING:2] team=data"));
    assert!(form["title"].chars().count() <= 250);
    assert_eq!(form["priority"], "1");
    assert!(form["url"].starts_with("http://overdue.test/checks/"));
    assert!(form["message"].contains("nightly-backup — down (overdue)"));
    let req = delivered(&r, &sink, &resolved()).await;
    let form: std::collections::HashMap<String, String> =
        form_urlencoded::parse(&req.body).into_owned().collect();
    assert!(form["title"].contains("RESOLVED"));
    assert_eq!(form["priority"], "0", "a recovery does not alert loudly");
    let req = delivered(&r, &sink, &storm()).await;
    let form: std::collections::HashMap<String, String> =
        form_urlencoded::parse(&req.body).into_owned().collect();
    assert!(form["message"].chars().count() <= 1024);
    assert!(form["message"]
        .lines()
        .last()
        .unwrap()
        .starts_with("… and "));
    errors_are_classified(&r, &sink, &[PUSHOVER_TOKEN, PUSHOVER_USER]).await;
}

#[tokio::test]
async fn gotify_message() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"g\"\ntype = \"gotify\"\ntoken = \"{GOTIFY_TOKEN}\"\nurl = \"{}\"",
        sink.url("/gotify")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/gotify/message");
    assert_eq!(req.header("x-gotify-key"), Some(GOTIFY_TOKEN));
    assert_eq!(req.header("content-type"), Some("application/json"));
    let b = req.json();
    assert!(b["title"].as_str().unwrap().starts_with("[FIRING:2]"));
    assert!(b["message"].as_str().unwrap().contains("nightly-backup"));
    assert_eq!(b["priority"], 8);
    let req = delivered(&r, &sink, &resolved()).await;
    assert!(req.json()["title"].as_str().unwrap().contains("RESOLVED"));
    errors_are_classified(&r, &sink, &[GOTIFY_TOKEN]).await;
}

#[tokio::test]
async fn secrets_can_come_from_files_and_bad_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("bot");
    std::fs::write(&token, format!("{BOT_TOKEN}\n")).unwrap();
    let r = receiver(&format!(
        "name = \"t\"\ntype = \"telegram\"\nbot_token_file = \"{}\"\nchat_id = \"@ops\"",
        token.display()
    ));
    assert_eq!(r.kind(), "telegram");
    assert!(!r.target().contains(BOT_TOKEN));
    for (toml_text, field) in [
        ("name = \"x\"\ntype = \"discord\"", "url: required"),
        (
            "name = \"x\"\ntype = \"telegram\"\nchat_id = \"1\"",
            "bot_token: required",
        ),
        (
            "name = \"x\"\ntype = \"ntfy\"\nurl = \"http://h/t\"\npriority = \"urgent\"",
            "priority:",
        ),
        (
            "name = \"x\"\ntype = \"ntfy\"\nurl = \"http://h/t\"\nusername = \"u\"",
            "password: required",
        ),
        (
            "name = \"x\"\ntype = \"pushover\"\ntoken = \"t\"",
            "user_key: required",
        ),
        (
            "name = \"x\"\ntype = \"pushover\"\ntoken = \"t\"\nuser_key = \"u\"\npriority = 2",
            "priority:",
        ),
        (
            "name = \"x\"\ntype = \"gotify\"\nurl = \"http://h\"",
            "token: required",
        ),
        (
            "name = \"x\"\ntype = \"msteams\"\nurl = \"ftp://h\"",
            "url:",
        ),
    ] {
        let input: ReceiverInput = toml::from_str(toml_text).expect("TOML");
        let e = Receiver::from_input(input).expect_err(toml_text);
        assert!(e.iter().any(|m| m.starts_with(field)), "{toml_text}: {e:?}");
    }
}

#[tokio::test]
async fn opsgenie_classifies_errors_and_pagerduty_templates_its_summary() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"o\"\ntype = \"opsgenie\"\napi_key = \"genie-secret-key\"\nurl = \"{}\"",
        sink.url("")
    ));
    errors_are_classified(&r, &sink, &["genie-secret-key"]).await;
    let r = receiver(&format!(
        "name = \"p\"\ntype = \"pagerduty\"\nrouting_key = \"rk-secret\"\nurl = \"{}\"\n\
         summary_template = \"{{{{ alerts | length }}}} checks need you\"",
        sink.url("/v2/enqueue")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    assert_eq!(req.json()["payload"]["summary"], "2 checks need you");
    errors_are_classified(&r, &sink, &["rk-secret"]).await;
}

#[tokio::test]
async fn a_text_template_replaces_the_text_within_the_limit() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"d\"\ntype = \"discord\"\nurl = \"{}\"\n\
         text_template = \"{{% for a in alerts %}}{{{{ a.labels.check }}}} {{% endfor %}}{{{{ 'x' * 3000 }}}}\"",
        sink.url("/api/webhooks/1/t")
    ));
    let req = delivered(&r, &sink, &firing()).await;
    let content = req.json()["content"].as_str().unwrap().to_string();
    assert!(content.starts_with("nightly-backup <b>x</b>"), "{content}");
    assert_eq!(content.chars().count(), 2000);
    assert!(content.ends_with('…'));
}
