//! Receivers against real servers: an SMTP server (aiosmtpd) in plain,
//! STARTTLS and implicit-TLS modes, an in-process HTTP server for webhooks and
//! Slack, and a real Alertmanager. Each receiver is built from TOML exactly
//! as a config file gives it.

mod common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::messages::{self, ctx, labels, message, receiver};
use common::sinks::{
    Alertmanager, Behaviour, SmtpMessage, SmtpOptions, SmtpSink, SmtpTls, WebhookSink,
};
use hmac::{Hmac, Mac};
use overdue::notify::message::{zero_instant, Alert, AlertStatus, Message};
use overdue::notify::receiver::{Receiver, ReceiverInput, SendError};
use serde_json::Value;
use sha2::Sha256;

/// The alert of `check`, named `name`, as the server raises it when late.
fn alert(status: AlertStatus, check: &str, name: &str) -> Alert {
    let summary = format!("{name} is late");
    let link = format!("http://overdue.test/checks/{check}");
    let annotations = labels(&[
        ("summary", &summary),
        ("last_ping", "2024-05-01T02:00:00Z"),
        ("last_items", "0"),
        ("staleness", "2h 5m"),
        ("link", &link),
    ]);
    messages::alert(status, check, name, "late", annotations)
}

/// Three firing checks (one with markup in its name) and one resolved.
fn mixed_message() -> Message {
    message(vec![
        alert(AlertStatus::Firing, "nightly-backup", "Nightly backup"),
        alert(AlertStatus::Firing, "hot-topics-poll", "Hot topics poller"),
        alert(
            AlertStatus::Firing,
            "xss-check",
            "<script>alert(1)</script>",
        ),
        alert(AlertStatus::Resolved, "etl-load", "ETL load"),
    ])
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn expect_recoverable(r: Result<(), SendError>) -> (String, Option<Duration>) {
    eprintln!("send: {r:?}");
    match r {
        Err(SendError::Recoverable {
            message,
            retry_after,
        }) => (message, retry_after),
        other => panic!("expected a recoverable error, got {other:?}"),
    }
}

fn expect_permanent(r: Result<(), SendError>) -> String {
    eprintln!("send: {r:?}");
    match r {
        Err(SendError::Permanent(message)) => message,
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// email

fn email_receiver(port: u16, smtp_extra: &str) -> Receiver {
    receiver(&format!(
        "name = \"oncall-mail\"\ntype = \"email\"\ntimeout = \"5s\"\n\
         to = [\"oncall@example.com\", \"Data Team <data@example.com>\"]\n\
         smtp = {{ host = \"127.0.0.1\", port = {port}, from = \"overdue@example.com\"{smtp_extra} }}"
    ))
}

fn plain(port: u16) -> Receiver {
    email_receiver(port, ", tls = \"none\"")
}

fn assert_lists_every_check(mail: &SmtpMessage, m: &Message) {
    let text = mail.text.as_deref().expect("a text/plain part");
    let html = mail.html.as_deref().expect("a text/html part");
    for a in &m.alerts {
        let check = &a.labels["check"];
        assert!(text.contains(check.as_str()), "{check} in text:\n{text}");
        assert!(html.contains(check.as_str()), "{check} in html:\n{html}");
    }
    for needle in ["Nightly backup", "late", "2024-05-01T02:00:00Z", "2h 5m"] {
        assert!(text.contains(needle), "{needle} in text:\n{text}");
        assert!(html.contains(needle), "{needle} in html:\n{html}");
    }
    assert!(
        text.contains("http://overdue.test/checks/nightly-backup"),
        "{text}"
    );
    assert!(
        text.contains("Firing (3)") && text.contains("Resolved (1)"),
        "{text}"
    );
    // Firing alerts come before resolved ones.
    assert!(
        text.find("nightly-backup") < text.find("etl-load"),
        "{text}"
    );
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_over_plain_smtp() {
    let sink = SmtpSink::start(SmtpOptions::default());
    let m = mixed_message();
    plain(sink.port()).send(&ctx(), &m).await.expect("sent");
    let mails = sink.wait_for(1).await;
    assert_eq!(mails.len(), 1);
    let mail = &mails[0];
    assert_eq!(
        mail.subject.as_deref(),
        Some("[FIRING:3] team=data — nightly-backup, hot-topics-poll, xss-check")
    );
    assert_eq!(mail.mail_from, "overdue@example.com");
    assert_eq!(
        mail.rcpt_tos,
        vec!["oncall@example.com", "data@example.com"]
    );
    assert_eq!(mail.header("from"), Some("overdue@example.com"));
    let to = mail.header("to").unwrap();
    assert!(
        to.contains("oncall@example.com") && to.contains("Data Team <data@example.com>"),
        "{to}"
    );
    assert_eq!(
        mail.header("message-id").map(str::to_string),
        Some(format!("<{}@overdue>", m.idempotency_key))
    );
    assert_eq!(mail.header("auto-submitted"), Some("auto-generated"));
    assert!(!mail.tls);
    assert_eq!(mail.auth_user, None);
    assert_lists_every_check(mail, &m);
    let html = mail.html.as_deref().unwrap();
    assert!(html.contains("&lt;script&gt;alert(1)&lt;"), "{html}");
    assert!(!html.contains("<script>"), "{html}");
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_subject_of_resolved_message() {
    let sink = SmtpSink::start(SmtpOptions::default());
    let m = message(vec![
        alert(AlertStatus::Resolved, "nightly-backup", "Nightly backup"),
        alert(AlertStatus::Resolved, "etl-load", "ETL load"),
    ]);
    plain(sink.port()).send(&ctx(), &m).await.expect("sent");
    let mail = &sink.wait_for(1).await[0];
    assert_eq!(
        mail.subject.as_deref(),
        Some("[RESOLVED] team=data — nightly-backup, etl-load")
    );
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_custom_templates() {
    let sink = SmtpSink::start(SmtpOptions::default());
    let r = receiver(&format!(
        "name = \"m\"\ntype = \"email\"\nto = [\"a@example.com\"]\n\
         smtp = {{ host = \"127.0.0.1\", port = {}, tls = \"none\", from = \"o@example.com\" }}\n\
         subject_template = \"{{{{ firing|length }}}} down: {{{{ groupLabels.team }}}}\"\n\
         text_template = \"key={{{{ idempotencyKey }}}}\"\n\
         html_template = \"<p>{{{{ alerts[2].labels.name }}}}</p>\"",
        sink.port()
    ));
    let m = mixed_message();
    r.send(&ctx(), &m).await.expect("sent");
    let mail = &sink.wait_for(1).await[0];
    assert_eq!(mail.subject.as_deref(), Some("3 down: data"));
    assert_eq!(
        mail.text.as_deref().map(str::trim_end),
        Some(format!("key={}", m.idempotency_key).as_str())
    );
    assert_eq!(
        mail.html.as_deref().map(str::trim_end),
        Some("<p>&lt;script&gt;alert(1)&lt;&#x2f;script&gt;</p>")
    );
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_starttls_with_auth_and_ca_file() {
    let sink = SmtpSink::start(SmtpOptions {
        tls: SmtpTls::StartTls,
        auth: Some(("overdue".into(), "s3cret pass".into())),
        fail: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("smtp-password");
    std::fs::write(&password_file, "s3cret pass\n").unwrap();
    let r = email_receiver(
        sink.port(),
        &format!(
            ", tls = \"starttls\", username = \"overdue\", password_file = {:?}, ca_file = {:?}",
            password_file.display().to_string(),
            sink.ca_file().display().to_string()
        ),
    );
    let m = mixed_message();
    r.send(&ctx(), &m).await.expect("sent over STARTTLS");
    let mail = &sink.wait_for(1).await[0];
    assert!(mail.tls, "the session was not encrypted");
    assert_eq!(mail.auth_user.as_deref(), Some("overdue"));
    assert_lists_every_check(mail, &m);
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_starttls_wrong_password_is_permanent() {
    let sink = SmtpSink::start(SmtpOptions {
        tls: SmtpTls::StartTls,
        auth: Some(("overdue".into(), "right".into())),
        fail: None,
    });
    let r = email_receiver(
        sink.port(),
        &format!(
            ", tls = \"starttls\", username = \"overdue\", password = \"wrong-pw\", ca_file = {:?}",
            sink.ca_file().display().to_string()
        ),
    );
    let e = expect_permanent(r.send(&ctx(), &mixed_message()).await);
    assert!(
        e.starts_with(&format!("SMTP 535 from 127.0.0.1:{}", sink.port())),
        "{e}"
    );
    assert!(!e.contains("wrong-pw"), "{e}");
    assert!(sink.messages().is_empty());
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_starttls_without_the_ca_is_refused() {
    let sink = SmtpSink::start(SmtpOptions {
        tls: SmtpTls::StartTls,
        ..SmtpOptions::default()
    });
    let r = email_receiver(sink.port(), ", tls = \"starttls\"");
    let e = r.send(&ctx(), &mixed_message()).await.unwrap_err();
    eprintln!("send: {e:?}");
    let shown = e.to_string();
    assert!(shown.contains("certificate"), "{shown}");
    assert!(shown.contains("smtp.ca_file"), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", sink.port())),
        "{shown}"
    );
    assert!(sink.messages().is_empty());
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_implicit_tls() {
    let sink = SmtpSink::start(SmtpOptions {
        tls: SmtpTls::Implicit,
        auth: Some(("overdue".into(), "pw".into())),
        fail: None,
    });
    let r = email_receiver(
        sink.port(),
        &format!(
            ", tls = \"tls\", username = \"overdue\", password = \"pw\", ca_file = {:?}",
            sink.ca_file().display().to_string()
        ),
    );
    let m = mixed_message();
    r.send(&ctx(), &m).await.expect("sent over implicit TLS");
    let mail = &sink.wait_for(1).await[0];
    assert!(mail.tls, "the session was not encrypted");
    assert_eq!(mail.auth_user.as_deref(), Some("overdue"));
    assert_eq!(
        mail.header("message-id").map(str::to_string),
        Some(format!("<{}@overdue>", m.idempotency_key))
    );
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_451_is_recoverable_and_the_retry_delivers() {
    let sink = SmtpSink::start(SmtpOptions {
        fail: Some((451, 1)),
        ..SmtpOptions::default()
    });
    let r = plain(sink.port());
    let m = mixed_message();
    let (e, retry_after) = expect_recoverable(r.send(&ctx(), &m).await);
    assert!(
        e.starts_with(&format!("SMTP 451 from 127.0.0.1:{}: ", sink.port())),
        "{e}"
    );
    assert!(e.contains("try again later"), "{e}");
    assert_eq!(retry_after, None);
    assert!(sink.messages().is_empty());
    r.send(&ctx(), &m).await.expect("the retry is accepted");
    let mails = sink.wait_for(1).await;
    assert_eq!(mails.len(), 1);
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "aiosmtpd",
    ignore = "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)"
)]
async fn email_550_is_permanent() {
    let sink = SmtpSink::start(SmtpOptions {
        fail: Some((550, 1)),
        ..SmtpOptions::default()
    });
    let e = expect_permanent(plain(sink.port()).send(&ctx(), &mixed_message()).await);
    assert!(
        e.starts_with(&format!("SMTP 550 from 127.0.0.1:{}: ", sink.port())),
        "{e}"
    );
    assert!(e.contains("rejected by policy"), "{e}");
}

#[tokio::test]
async fn email_connection_refused_is_recoverable() {
    let port = closed_port();
    let (e, _) = expect_recoverable(plain(port).send(&ctx(), &mixed_message()).await);
    assert!(
        e.starts_with(&format!("cannot connect to SMTP server 127.0.0.1:{port}: ")),
        "{e}"
    );
    assert!(e.to_lowercase().contains("refused"), "{e}");
}

#[tokio::test]
async fn email_silent_server_times_out() {
    // Accepts connections (the kernel does) but never says hello.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = receiver(&format!(
        "name = \"m\"\ntype = \"email\"\ntimeout = \"1s\"\nto = [\"a@example.com\"]\n\
         smtp = {{ host = \"127.0.0.1\", port = {port}, tls = \"none\", from = \"o@example.com\" }}"
    ));
    let started = Instant::now();
    let result = tokio::time::timeout(common::HANG_GUARD, r.send(&ctx(), &mixed_message()))
        .await
        .expect("the receiver's own timeout ends the attempt");
    let (e, _) = expect_recoverable(result);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(e.contains("timed out"), "{e}");
    drop(listener);
}

// ---------------------------------------------------------------------------
// webhook

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[tokio::test]
async fn webhook_default_body_is_alertmanager_v4_signed_with_idempotency_key() {
    let sink = WebhookSink::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("hmac");
    std::fs::write(&secret_file, "hmac-secret\n").unwrap();
    let r = receiver(&format!(
        "name = \"data-hooks\"\ntype = \"webhook\"\nurl = \"{}\"\nsecret_file = {:?}\n\
         headers = {{ X-Team = \"data\", Authorization = \"Bearer tok\" }}",
        sink.url("/hook"),
        secret_file.display().to_string()
    ));
    let m = mixed_message();
    r.send(&ctx(), &m).await.expect("sent");
    let reqs = sink.wait_for(1).await;
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/hook");
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(
        req.header("idempotency-key"),
        Some(m.idempotency_key.as_str())
    );
    assert_eq!(req.header("x-team"), Some("data"));
    assert_eq!(req.header("authorization"), Some("Bearer tok"));
    assert!(
        req.header("user-agent").unwrap().starts_with("overdue/"),
        "{:?}",
        req.header("user-agent")
    );
    let signature = req.header("x-overdue-signature").expect("signature header");
    assert_eq!(
        signature,
        format!("sha256={}", hmac_hex("hmac-secret", &req.body))
    );

    let back: Message = serde_json::from_slice(&req.body).expect("a Message");
    assert_eq!(back, m);
    let v = req.json();
    assert_eq!(v["version"], "4");
    assert_eq!(v["status"], "firing");
    assert_eq!(v["receiver"], "test");
    for key in [
        "groupKey",
        "truncatedAlerts",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "alerts",
    ] {
        assert!(v.get(key).is_some(), "{key} missing from {v}");
    }
    assert_eq!(v["commonLabels"]["team"], "data");
    for a in v["alerts"].as_array().unwrap() {
        for key in [
            "status",
            "labels",
            "annotations",
            "startsAt",
            "endsAt",
            "generatorURL",
            "fingerprint",
        ] {
            assert!(a.get(key).is_some(), "alerts[].{key} missing from {a}");
        }
    }
    assert_eq!(v["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
    assert_eq!(v["alerts"][3]["status"], "resolved");
}

#[tokio::test]
async fn webhook_custom_body_template_and_content_type() {
    let sink = WebhookSink::start().await;
    let template = r#"{"text": {{ subject|tojson }}, "checks": [{% for a in firing %}{{ a.labels.check|tojson }}{% if not loop.last %}, {% endif %}{% endfor %}], "key": {{ idempotencyKey|tojson }}}"#;
    let r = receiver(&format!(
        "name = \"w\"\ntype = \"webhook\"\nurl = \"{}\"\nsecret = \"k\"\n\
         content_type = \"application/vnd.example+json\"\nbody_template = '{template}'",
        sink.url("/custom")
    ));
    let m = mixed_message();
    r.send(&ctx(), &m).await.expect("sent");
    let req = &sink.wait_for(1).await[0];
    assert_eq!(
        req.header("content-type"),
        Some("application/vnd.example+json")
    );
    assert_eq!(
        req.json(),
        serde_json::json!({
            "text": "[FIRING:3] team=data — nightly-backup, hot-topics-poll, xss-check",
            "checks": ["nightly-backup", "hot-topics-poll", "xss-check"],
            "key": m.idempotency_key,
        })
    );
    assert_eq!(
        req.header("x-overdue-signature").map(str::to_string),
        Some(format!("sha256={}", hmac_hex("k", &req.body)))
    );
    assert_eq!(
        req.header("idempotency-key"),
        Some(m.idempotency_key.as_str())
    );
}

#[tokio::test]
async fn webhook_without_secret_sends_no_signature() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"w\"\ntype = \"webhook\"\nurl = \"{}\"",
        sink.url("/plain")
    ));
    r.send(&ctx(), &mixed_message()).await.expect("sent");
    let req = &sink.wait_for(1).await[0];
    assert_eq!(req.header("x-overdue-signature"), None);
}

fn webhook_at(sink: &WebhookSink, path: &str) -> Receiver {
    receiver(&format!(
        "name = \"w\"\ntype = \"webhook\"\ntimeout = \"5s\"\nurl = \"{}\"",
        sink.url(path)
    ))
}

#[tokio::test]
async fn webhook_500_is_recoverable() {
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Status(500));
    let (e, retry_after) = expect_recoverable(
        webhook_at(&sink, "/hook")
            .send(&ctx(), &mixed_message())
            .await,
    );
    assert_eq!(
        e,
        format!(
            "HTTP 500 Internal Server Error from {}: sink answered 500",
            sink.url("/hook")
        )
    );
    assert_eq!(retry_after, None);
}

#[tokio::test]
async fn webhook_429_with_retry_after_seconds() {
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::StatusWithHeaders(
        429,
        vec![("Retry-After".into(), "7".into())],
    ));
    let (e, retry_after) = expect_recoverable(
        webhook_at(&sink, "/hook")
            .send(&ctx(), &mixed_message())
            .await,
    );
    assert!(e.starts_with("HTTP 429 Too Many Requests from "), "{e}");
    assert_eq!(retry_after, Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn webhook_503_with_retry_after_date() {
    let sink = WebhookSink::start().await;
    let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
    sink.push(Behaviour::StatusWithHeaders(
        503,
        vec![("Retry-After".into(), date.clone())],
    ));
    let before = std::time::SystemTime::now();
    let (_, retry_after) = expect_recoverable(
        webhook_at(&sink, "/hook")
            .send(&ctx(), &mixed_message())
            .await,
    );
    let after = std::time::SystemTime::now();
    let retry_after = retry_after.expect("Retry-After understood");
    // The wait runs until the date (whole seconds), from when the answer came.
    let when = httpdate::parse_http_date(&date).unwrap();
    assert!(
        when.duration_since(after).unwrap() <= retry_after
            && retry_after <= when.duration_since(before).unwrap(),
        "{retry_after:?} until {date}"
    );
}

#[tokio::test]
async fn webhook_400_is_permanent_and_hides_the_query() {
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Status(400));
    let r = webhook_at(&sink, "/hook?token=very-secret");
    let e = expect_permanent(r.send(&ctx(), &mixed_message()).await);
    assert_eq!(
        e,
        format!(
            "HTTP 400 Bad Request from {}?…: sink answered 400",
            sink.url("/hook")
        )
    );
    assert!(!e.contains("very-secret"));
    assert_eq!(sink.requests()[0].path, "/hook?token=very-secret");
}

#[tokio::test]
async fn webhook_redirect_is_not_followed() {
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::StatusWithHeaders(
        307,
        vec![("Location".into(), "/elsewhere".into())],
    ));
    let e = expect_permanent(
        webhook_at(&sink, "/hook")
            .send(&ctx(), &mixed_message())
            .await,
    );
    assert!(e.contains("redirects are not followed"), "{e}");
    assert!(e.contains("/elsewhere"), "{e}");
    let reqs = sink.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
}

#[tokio::test]
async fn webhook_that_hangs_times_out() {
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Hang);
    let r = receiver(&format!(
        "name = \"w\"\ntype = \"webhook\"\ntimeout = \"1s\"\nurl = \"{}\"",
        sink.url("/slow")
    ));
    let started = Instant::now();
    let result = tokio::time::timeout(common::HANG_GUARD, r.send(&ctx(), &mixed_message()))
        .await
        .expect("the receiver's own timeout ends the attempt");
    let (e, retry_after) = expect_recoverable(result);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        e,
        format!("timed out after 1s sending to {}", sink.url("/slow"))
    );
    assert_eq!(retry_after, None);
    assert_eq!(sink.requests().len(), 1);
}

#[tokio::test]
async fn webhook_unreachable_is_recoverable() {
    let port = closed_port();
    let r = receiver(&format!(
        "name = \"w\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{port}/hook\""
    ));
    let (e, _) = expect_recoverable(r.send(&ctx(), &mixed_message()).await);
    assert!(
        e.starts_with(&format!("cannot connect to http://127.0.0.1:{port}/hook: ")),
        "{e}"
    );
}

#[test]
fn invalid_body_template_is_a_config_error() {
    let input: ReceiverInput = toml::from_str(
        "name = \"w\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nbody_template = \"{{ unclosed\"",
    )
    .unwrap();
    let errors = Receiver::from_input(input).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("body_template: "), "{errors:?}");
    assert!(errors[0].contains("syntax error"), "{errors:?}");
}

#[tokio::test]
async fn template_that_fails_to_render_is_permanent() {
    let sink = WebhookSink::start().await;
    let r = receiver(&format!(
        "name = \"w\"\ntype = \"webhook\"\nurl = \"{}\"\nbody_template = \"{{{{ missing_function() }}}}\"",
        sink.url("/hook")
    ));
    let e = expect_permanent(r.send(&ctx(), &mixed_message()).await);
    assert!(e.starts_with("body_template"), "{e}");
    assert!(sink.requests().is_empty());
}

// ---------------------------------------------------------------------------
// slack

fn slack_receiver(sink: &WebhookSink) -> Receiver {
    receiver(&format!(
        "name = \"chat\"\ntype = \"slack\"\nurl = \"{}\"\nchannel = \"#ops\"\nusername = \"overdue\"",
        sink.url("/services/T000/B000/XXXXSECRET")
    ))
}

/// Slack's documented limits for an incoming-webhook message.
fn assert_valid_slack_body(v: &Value) {
    let text = v["text"].as_str().expect("text fallback");
    assert!(!text.trim().is_empty());
    let blocks = v["blocks"].as_array().expect("blocks");
    assert!(
        !blocks.is_empty() && blocks.len() <= 50,
        "{} blocks",
        blocks.len()
    );
    for b in blocks {
        match b["type"].as_str() {
            Some("header") => {
                assert_eq!(b["text"]["type"], "plain_text");
                let t = b["text"]["text"].as_str().unwrap();
                assert!(!t.is_empty() && t.chars().count() <= 150, "{t}");
            }
            Some("section") => {
                assert_eq!(b["text"]["type"], "mrkdwn");
                let t = b["text"]["text"].as_str().unwrap();
                assert!(!t.is_empty() && t.chars().count() <= 3000, "{t}");
            }
            other => panic!("unexpected block type {other:?}"),
        }
    }
}

#[tokio::test]
async fn slack_default_body() {
    let sink = WebhookSink::start().await;
    let m = mixed_message();
    slack_receiver(&sink).send(&ctx(), &m).await.expect("sent");
    let req = &sink.wait_for(1).await[0];
    assert_eq!(req.path, "/services/T000/B000/XXXXSECRET");
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(
        req.header("idempotency-key"),
        Some(m.idempotency_key.as_str())
    );
    let v = req.json();
    assert_valid_slack_body(&v);
    assert_eq!(v["channel"], "#ops");
    assert_eq!(v["username"], "overdue");
    assert_eq!(
        v["text"],
        "[FIRING:3] team=data — nightly-backup, hot-topics-poll, xss-check"
    );
    let blocks = v["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks.len(), 1 + m.alerts.len());
    let all = v.to_string();
    for a in &m.alerts {
        assert!(all.contains(a.labels["check"].as_str()), "{all}");
    }
    assert!(all.contains("&lt;script&gt;"), "{all}");
    assert!(
        all.contains("<http://overdue.test/checks/nightly-backup|Nightly backup>"),
        "{all}"
    );
}

#[tokio::test]
async fn slack_two_hundred_alerts_fit_in_fifty_blocks() {
    let sink = WebhookSink::start().await;
    let alerts = (0..200)
        .map(|i| {
            alert(
                AlertStatus::Firing,
                &format!("check-{i:03}"),
                &format!("Check {i}"),
            )
        })
        .collect();
    let m = message(alerts);
    slack_receiver(&sink).send(&ctx(), &m).await.expect("sent");
    let v = sink.wait_for(1).await[0].json();
    assert_valid_slack_body(&v);
    let blocks = v["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 50);
    assert_eq!(blocks[49]["text"]["text"], "… and 152 more");
    assert!(v["text"]
        .as_str()
        .unwrap()
        .starts_with("[FIRING:200] team=data — check-000, "));
}

#[tokio::test]
async fn slack_errors_hide_the_webhook_path() {
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Status(404));
    let e = expect_permanent(slack_receiver(&sink).send(&ctx(), &mixed_message()).await);
    assert!(
        e.starts_with("HTTP 404 Not Found from http://127.0.0.1:"),
        "{e}"
    );
    assert!(!e.contains("XXXXSECRET"), "{e}");
}

// ---------------------------------------------------------------------------
// alertmanager

fn ours<'a>(alerts: &'a [Value], check: &str) -> Option<&'a Value> {
    alerts.iter().find(|a| a["labels"]["check"] == check)
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "alertmanager",
    ignore = "needs Alertmanager (Debian's prometheus-alertmanager)"
)]
async fn alertmanager_receives_firing_then_resolved_alerts() {
    let am = Alertmanager::start().await;
    let r = receiver(&format!(
        "name = \"am\"\ntype = \"alertmanager\"\nurl = \"{}\"\nrefresh_interval = \"1m\"",
        am.base
    ));
    assert_eq!(r.refresh_interval(), Some(Duration::from_secs(60)));
    let firing = vec![
        alert(AlertStatus::Firing, "nightly-backup", "Nightly backup"),
        alert(AlertStatus::Firing, "hot-topics-poll", "Hot topics poller"),
    ];
    let before = Utc::now();
    r.send(&ctx(), &message(firing.clone()))
        .await
        .expect("alerts accepted");
    let after = Utc::now();

    // Alertmanager stores the alerts at once and marks them active when its
    // dispatcher has seen them.
    let deadline = Instant::now() + common::HANG_GUARD;
    let active = loop {
        let active = am.alerts("active=true").await;
        let both = ["nightly-backup", "hot-topics-poll"]
            .iter()
            .all(|c| ours(&active, c).is_some_and(|a| a["status"]["state"] == "active"));
        if both {
            break active;
        }
        assert!(
            Instant::now() < deadline,
            "alerts not active in Alertmanager: {active:?}\n{}",
            am.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let a = ours(&active, "nightly-backup").unwrap();
    assert_eq!(a["labels"]["alertname"], "OverdueCheck");
    assert_eq!(a["labels"]["team"], "data");
    assert_eq!(a["labels"]["name"], "Nightly backup");
    // What changes during an incident is no part of Alertmanager's identity.
    assert!(a["labels"].get("reason").is_none(), "{a}");
    assert!(a["labels"].get("status").is_none(), "{a}");
    assert_eq!(a["annotations"]["reason"], "late");
    assert_eq!(a["annotations"]["status"], "down");
    assert_eq!(a["annotations"]["summary"], "Nightly backup is late");
    assert_eq!(
        a["annotations"]["link"],
        "http://overdue.test/checks/nightly-backup"
    );
    assert_eq!(
        a["generatorURL"],
        "http://overdue.test/checks/nightly-backup"
    );
    let starts: DateTime<Utc> = a["startsAt"].as_str().unwrap().parse().unwrap();
    assert_eq!(starts, firing[0].starts_at);
    // Firing alerts expire only if overdue stops refreshing: 4 × 1m ahead.
    let ends: DateTime<Utc> = a["endsAt"].as_str().unwrap().parse().unwrap();
    // Alertmanager keeps milliseconds.
    let lifetime = chrono::Duration::minutes(4);
    let before = chrono::SubsecRound::trunc_subsecs(before, 3);
    assert!(
        before + lifetime <= ends && ends <= after + lifetime,
        "endsAt {ends}, sent between {before} and {after}"
    );

    // The same incidents, resolved: their status and reason labels changed.
    let resolved: Vec<Alert> = firing
        .iter()
        .map(|a| {
            let mut r = alert(AlertStatus::Resolved, &a.labels["check"], &a.labels["name"]);
            r.starts_at = a.starts_at;
            r
        })
        .collect();
    r.send(&ctx(), &message(resolved))
        .await
        .expect("resolution accepted");
    let active = am.alerts("active=true").await;
    for check in ["nightly-backup", "hot-topics-poll"] {
        assert!(
            ours(&active, check).is_none(),
            "{check} still active: {active:?}"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "alertmanager",
    ignore = "needs Alertmanager (Debian's prometheus-alertmanager)"
)]
async fn alertmanager_resolved_alert_without_an_end_is_resolved_now() {
    let am = Alertmanager::start().await;
    let r = receiver(&format!(
        "name = \"am\"\ntype = \"alertmanager\"\nurl = \"{}/\"",
        am.base
    ));
    r.send(
        &ctx(),
        &message(vec![alert(AlertStatus::Firing, "odd", "Odd")]),
    )
    .await
    .expect("firing accepted");
    // Forwarded as is, the zero endsAt would leave the alert active.
    let mut odd = alert(AlertStatus::Resolved, "odd", "Odd");
    odd.ends_at = zero_instant();
    r.send(&ctx(), &message(vec![odd])).await.expect("accepted");
    let active = am.alerts("active=true").await;
    assert!(ours(&active, "odd").is_none(), "{active:?}");
}

#[tokio::test]
async fn alertmanager_body_and_rejection() {
    // A stand-in that answers like Alertmanager does to an invalid alert.
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Status(400));
    let r = receiver(&format!(
        "name = \"am\"\ntype = \"alertmanager\"\nurl = \"{}\"\nrefresh_interval = \"30s\"\n\
         headers = {{ Authorization = \"Basic abc\" }}",
        sink.url("/am")
    ));
    let before = Utc::now();
    // The server's clock counts whole milliseconds.
    let before = chrono::SubsecRound::trunc_subsecs(before, 3);
    let e = expect_permanent(r.send(&ctx(), &mixed_message()).await);
    let after = Utc::now();
    assert_eq!(
        e,
        format!(
            "HTTP 400 Bad Request from {}: sink answered 400",
            sink.url("/am/api/v2/alerts")
        )
    );
    let req = &sink.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/am/api/v2/alerts");
    assert_eq!(req.header("authorization"), Some("Basic abc"));
    let body = req.json();
    let alerts = body.as_array().unwrap();
    assert_eq!(alerts.len(), 4);
    for a in alerts {
        let keys: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "annotations",
                "endsAt",
                "generatorURL",
                "labels",
                "startsAt"
            ],
            "{a}"
        );
        assert_eq!(a["labels"]["alertname"], "OverdueCheck");
    }
    let ends: DateTime<Utc> = alerts[0]["endsAt"].as_str().unwrap().parse().unwrap();
    let lifetime = chrono::Duration::seconds(120);
    assert!(
        before + lifetime <= ends && ends <= after + lifetime,
        "endsAt {ends}, sent between {before} and {after}"
    );
    let ends: DateTime<Utc> = alerts[3]["endsAt"].as_str().unwrap().parse().unwrap();
    assert!(
        ends < before,
        "a resolved alert ends when it resolved: {ends}"
    );
}
