//! The `matrix` receiver against a real homeserver (SPEC §6.1): Synapse,
//! from PyPI, started by the test on loopback with a fresh SQLite database;
//! a user registered, a room created through the client-server API, and
//! the messages read back from the room.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::messages::labels;
use overdue::notify::message::{zero_instant, Alert, AlertStatus, LabelSet, Message};
use overdue::notify::receiver::{http_client, Receiver, ReceiverInput, SendContext, SendError};
use serde_json::{json, Value};

const PYTHON: &str = "/usr/bin/python3";
const SHARED_SECRET: &str = "overdue-test-registration-secret";

struct Synapse {
    child: Child,
    base: String,
}

impl Drop for Synapse {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Generates a homeserver config in `dir`, overrides its listener and
/// limits, starts Synapse and waits until it answers.
async fn start_synapse(dir: &Path) -> Synapse {
    let port = free_port();
    let generated = dir.join("homeserver.yaml");
    let out = Command::new(PYTHON)
        .args(["-m", "synapse.app.homeserver", "--server-name", "localhost"])
        .arg("--config-path")
        .arg(&generated)
        .arg("--data-directory")
        .arg(dir)
        .args(["--generate-config", "--report-stats=no"])
        .current_dir(dir)
        .output()
        .expect("run synapse --generate-config");
    assert!(
        out.status.success(),
        "synapse --generate-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let overrides = dir.join("overrides.yaml");
    std::fs::write(
        &overrides,
        format!(
            r#"listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
registration_shared_secret: "{SHARED_SECRET}"
enable_registration: false
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
rc_message: {{per_second: 1000, burst_count: 1000}}
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
"#
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("synapse.out")).unwrap();
    let child = Command::new(PYTHON)
        .args(["-m", "synapse.app.homeserver"])
        .arg("-c")
        .arg(&generated)
        .arg("-c")
        .arg(&overrides)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start synapse");
    let synapse = Synapse {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let http = common::client();
    let started = Instant::now();
    loop {
        let up = http
            .get(format!("{}/_matrix/client/versions", synapse.base))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if up {
            return synapse;
        }
        assert!(
            started.elapsed() < common::HANG_GUARD * 2,
            "hang guard: synapse did not start: {}",
            std::fs::read_to_string(dir.join("synapse.out")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Registers `user` with the shared secret (Synapse's admin registration
/// API, as `register_new_matrix_user` does it) and logs in: its access token.
async fn user_token(base: &str, user: &str) -> String {
    use hmac::{Hmac, Mac};
    let http = common::client();
    let nonce: Value = http
        .get(format!("{base}/_synapse/admin/v1/register"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let nonce = nonce["nonce"].as_str().unwrap().to_string();
    let password = "correct horse battery staple";
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(SHARED_SECRET.as_bytes()).unwrap();
    mac.update(format!("{nonce}\0{user}\0{password}\0notadmin").as_bytes());
    let r = http
        .post(format!("{base}/_synapse/admin/v1/register"))
        .json(&json!({
            "nonce": nonce, "username": user, "password": password, "admin": false,
            "mac": hex::encode(mac.finalize().into_bytes()),
        }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    assert!(status.is_success(), "register: {v}");
    v["access_token"].as_str().unwrap().to_string()
}

fn message(status: AlertStatus, key: &str) -> Message {
    let at = DateTime::<Utc>::from_timestamp(1_764_800_000, 0).unwrap();
    let mut m = Message {
        version: "4".into(),
        group_key: "{}:{team=\"data\"}".into(),
        truncated_alerts: 0,
        status,
        receiver: "room".into(),
        group_labels: labels(&[("team", "data")]),
        common_labels: LabelSet::new(),
        common_annotations: LabelSet::new(),
        external_url: "http://overdue.test".into(),
        alerts: vec![Alert {
            status,
            labels: labels(&[
                ("check", "<script>x</script>"),
                ("status", "down"),
                ("reason", "overdue"),
            ]),
            annotations: labels(&[("link", "http://overdue.test/checks/x")]),
            starts_at: at,
            ends_at: if status == AlertStatus::Resolved {
                at
            } else {
                zero_instant()
            },
            generator_url: "http://overdue.test/checks/x".into(),
            fingerprint: "00000000000000bb".into(),
        }],
        acknowledged: Vec::new(),
        idempotency_key: key.into(),
    };
    m.finish();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    overdue_missing = "synapse",
    ignore = "needs matrix-synapse for /usr/bin/python3 (PyPI)"
)]
async fn messages_reach_a_synapse_room_once_each() {
    common::need(common::Peer::Synapse);
    let has_synapse = Command::new(PYTHON)
        .args(["-c", "import synapse"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_synapse {
        common::missing(
            common::Peer::Synapse,
            "Synapse for /usr/bin/python3",
            "matrix-synapse (PyPI)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let synapse = start_synapse(dir.path()).await;
    let base = synapse.base.clone();
    let token = user_token(&base, "overdue").await;
    let http = common::client();
    let room: Value = http
        .post(format!("{base}/_matrix/client/v3/createRoom"))
        .bearer_auth(&token)
        .json(&json!({"name": "alerts"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let room_id = room["room_id"].as_str().expect("a room id").to_string();

    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let input: ReceiverInput = toml::from_str(&format!(
        "name = \"room\"\ntype = \"matrix\"\nhomeserver = \"{base}\"\nroom_id = \"{room_id}\"\naccess_token_file = \"{}\"",
        token_file.display()
    ))
    .unwrap();
    let r = Receiver::from_input(input).unwrap();
    assert!(!format!("{r:?} {}", r.target()).contains(&token));
    let ctx = SendContext::new(http_client());
    let firing = message(AlertStatus::Firing, "notification-1");
    r.send(&ctx, &firing).await.expect("sent");
    // A resend of the same notification (same transaction id): the
    // homeserver keeps one message.
    r.send(&ctx, &firing).await.expect("resent");
    r.send(&ctx, &message(AlertStatus::Resolved, "notification-2"))
        .await
        .expect("sent");

    let events: Value = http
        .get(format!(
            "{base}/_matrix/client/v3/rooms/{}/messages?dir=b&limit=50",
            urlencode(&room_id)
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let texts: Vec<&Value> = events["chunk"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "m.room.message")
        .map(|e| &e["content"])
        .collect();
    assert_eq!(texts.len(), 2, "one message per notification: {texts:#?}");
    // Newest first.
    let (resolved, fired) = (texts[0], texts[1]);
    assert_eq!(fired["msgtype"], "m.text");
    assert_eq!(fired["format"], "org.matrix.custom.html");
    let body = fired["body"].as_str().unwrap();
    assert!(body.starts_with("[FIRING:1] team=data"), "{body}");
    let html = fired["formatted_body"].as_str().unwrap();
    assert!(
        html.contains("&lt;script&gt;x&lt;/script&gt;"),
        "escaped: {html}"
    );
    assert!(!html.contains("<script>"), "{html}");
    assert!(resolved["body"].as_str().unwrap().contains("RESOLVED"));

    // A token that is not valid: 401, permanent.
    let input: ReceiverInput = toml::from_str(&format!(
        "name = \"room\"\ntype = \"matrix\"\nhomeserver = \"{base}\"\nroom_id = \"{room_id}\"\naccess_token = \"not-a-token\""
    ))
    .unwrap();
    let bad = Receiver::from_input(input).unwrap();
    match bad.send(&ctx, &message(AlertStatus::Firing, "n-3")).await {
        Err(SendError::Permanent(e)) => {
            assert!(e.contains("401"), "{e}");
            assert!(!e.contains("not-a-token"), "{e}");
        }
        other => panic!("bad token: {other:?}"),
    }
    drop(synapse);
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
