//! The `command` receiver (SPEC §6.1): real programs, and the real Apprise
//! CLI (from PyPI) posting through its `json://` notifier to a recorder on
//! loopback.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::messages::{ctx, receiver};
use common::sinks::WebhookSink;
use overdue::notify::message::{zero_instant, Alert, AlertStatus, LabelSet, Message};
use overdue::notify::receiver::{Receiver, SendError};
use serde_json::Value;

/// A TOML array of strings.
fn argv(args: &[&str]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| toml::Value::String(a.to_string()).to_string())
        .collect();
    format!("[{}]", quoted.join(", "))
}

fn command(args: &[&str], extra: &str) -> Receiver {
    receiver(&format!(
        "name = \"cmd\"\ntype = \"command\"\ncommand = {}\n{extra}",
        argv(args)
    ))
}

fn message(status: AlertStatus) -> Message {
    let labels: LabelSet = [
        ("check", "nightly-backup"),
        ("team", "data"),
        ("status", "down"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let at = DateTime::<Utc>::from_timestamp(1_764_800_000, 0).unwrap();
    let mut m = Message {
        version: "4".into(),
        group_key: "{}:{team=\"data\"}".into(),
        truncated_alerts: 0,
        status,
        receiver: "cmd".into(),
        group_labels: [("team".to_string(), "data".to_string())].into(),
        common_labels: LabelSet::new(),
        common_annotations: LabelSet::new(),
        external_url: "http://overdue.test".into(),
        alerts: vec![Alert {
            status,
            labels,
            annotations: [(
                "link".to_string(),
                "http://overdue.test/checks/nightly-backup".to_string(),
            )]
            .into(),
            starts_at: at,
            ends_at: if status == AlertStatus::Resolved {
                at
            } else {
                zero_instant()
            },
            generator_url: "http://overdue.test/checks/nightly-backup".into(),
            fingerprint: "00000000000000aa".into(),
        }],
        idempotency_key: "cmd-key-1".into(),
        acknowledged: Vec::new(),
    };
    m.finish();
    m
}

#[tokio::test]
async fn the_program_gets_the_webhook_body_and_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let script = format!(
        "cat > {out}/body.json; env | grep '^OVERDUE_' | sort > {out}/env; printf '%s' \"$OVERDUE_TEXT\" > {out}/text"
    );
    let r = command(&["sh", "-c", &script], "");
    assert_eq!(r.kind(), "command");
    assert_eq!(r.target(), "command sh");
    r.send(&ctx(), &message(AlertStatus::Firing))
        .await
        .expect("exit 0 is delivered");
    let body: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("body.json")).unwrap())
            .unwrap();
    assert_eq!(body["version"], "4");
    assert_eq!(body["status"], "firing");
    assert_eq!(body["alerts"][0]["labels"]["check"], "nightly-backup");
    assert_eq!(body["idempotencyKey"], "cmd-key-1");
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    assert!(env.contains("OVERDUE_IDEMPOTENCY_KEY=cmd-key-1\n"), "{env}");
    assert!(env.contains("OVERDUE_STATUS=firing\n"), "{env}");
    assert!(
        env.contains("OVERDUE_TITLE=[FIRING:1] team=data — nightly-backup\n"),
        "{env}"
    );
    let text = std::fs::read_to_string(dir.path().join("text")).unwrap();
    assert!(text.contains("nightly-backup — down"), "{text}");

    r.send(&ctx(), &message(AlertStatus::Resolved))
        .await
        .unwrap();
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    assert!(env.contains("OVERDUE_STATUS=resolved\n"), "{env}");
    assert!(env.contains("OVERDUE_TITLE=[RESOLVED]"), "{env}");
}

#[tokio::test]
async fn exit_75_is_retried_other_exits_are_permanent_and_arguments_are_redacted() {
    let r = command(&["sh", "-c", "echo busy >&2; exit 75"], "");
    match r.send(&ctx(), &message(AlertStatus::Firing)).await {
        Err(SendError::Recoverable { message, .. }) => {
            assert!(
                message.contains("status 75") && message.contains("busy"),
                "{message}"
            )
        }
        other => panic!("exit 75: {other:?}"),
    }
    let secret = "json://user:S3CRETPASS@hooks.example.com/x";
    let r = command(
        &[
            "sh",
            "-c",
            "echo \"$1 refused the message\" >&2; exit 3",
            "sh",
            secret,
        ],
        "",
    );
    match r.send(&ctx(), &message(AlertStatus::Firing)).await {
        Err(SendError::Permanent(message)) => {
            assert!(message.contains("status 3"), "{message}");
            assert!(message.contains("… refused the message"), "{message}");
            assert!(!message.contains("S3CRETPASS"), "{message}");
        }
        other => panic!("exit 3: {other:?}"),
    }
    assert!(!format!("{r:?} {}", r.target()).contains("S3CRETPASS"));
    // A program that does not exist cannot start: permanent.
    let r = command(&["/nonexistent/notify"], "");
    assert!(matches!(
        r.send(&ctx(), &message(AlertStatus::Firing)).await,
        Err(SendError::Permanent(_))
    ));
}

#[tokio::test]
async fn a_program_past_its_timeout_is_killed_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 300", pid.display());
    let r = command(&["sh", "-c", &script], "timeout = \"500ms\"");
    match r.send(&ctx(), &message(AlertStatus::Firing)).await {
        Err(SendError::Recoverable { message, .. }) => {
            assert!(message.contains("timed out"), "{message}")
        }
        other => panic!("timeout: {other:?}"),
    }
    let pid: i32 = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    };
    // Killed, not left to sleep its 300 s: gone within the hang guard.
    let started = std::time::Instant::now();
    while !gone() && started.elapsed() < common::HANG_GUARD {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone(), "the program was killed");
}

#[tokio::test]
#[cfg_attr(
    overdue_missing = "apprise",
    ignore = "needs the apprise CLI (PyPI's apprise)"
)]
async fn apprise_delivers_through_its_json_notifier() {
    let apprise = common::need_program(common::Peer::Apprise, "apprise", "apprise (PyPI)");
    let sink = WebhookSink::start().await;
    let url = sink.url("/notify").replace("http://", "json://");
    let apprise = apprise.display().to_string();
    let script = format!("exec {apprise} -v -t \"$OVERDUE_TITLE\" -b \"$OVERDUE_TEXT\" {url}");
    let r = command(&["sh", "-c", &script], "timeout = \"30s\"");
    r.send(&ctx(), &message(AlertStatus::Firing))
        .await
        .expect("apprise delivered");
    let got = sink.wait_for(1).await;
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].path, "/notify");
    let b = got[0].json();
    assert_eq!(b["title"], "[FIRING:1] team=data — nightly-backup");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("nightly-backup — down"),
        "{b}"
    );
    r.send(&ctx(), &message(AlertStatus::Resolved))
        .await
        .unwrap();
    let got = sink.wait_for(2).await;
    assert!(got[1].json()["title"]
        .as_str()
        .unwrap()
        .starts_with("[RESOLVED]"));
}
