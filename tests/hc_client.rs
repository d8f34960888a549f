//! The healthchecks-io client from PyPI (a client nobody here wrote) against
//! the real server: its `pause_check` right after a ping used to return a
//! check that was `up` (SPEC §5, read your writes).

mod common;

use std::process::Command;

use common::sinks::SYSTEM_PYTHON;
use common::TestServer;

/// Fails unless Debian's python3 has the client (`peers`).
fn need_client() {
    common::need(common::Peer::HealthchecksIo);
    let ok = Command::new(SYSTEM_PYTHON)
        .args(["-c", "import healthchecks_io"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        common::missing(
            common::Peer::HealthchecksIo,
            "the healthchecks_io module of /usr/bin/python3",
            "healthchecks-io from PyPI",
        );
    }
}

/// Pings each check with the client, pauses it at once, and prints what
/// `pause_check` returned and what `get_check` reads right after.
const SCRIPT: &str = r#"
import sys
from healthchecks_io import Client

base = sys.argv[1]
client = Client(api_key="unused", api_url=base + "/api/", api_version=3, ping_url=base + "/ping/")
for uuid in sys.argv[2:]:
    ok, _ = client.success_ping(uuid=uuid)
    assert ok, "ping refused"
    paused = client.pause_check(uuid)
    read = client.get_check(uuid)
    print(paused.status, read.status)
"#;

both_backends!(
    pause_check_right_after_a_ping_returns_a_paused_check,
    needs = [healthchecks_io],
    |backend| async move {
        need_client();
        let s = TestServer::start(backend, "").await;
        let mut uuids = Vec::new();
        for i in 0..5 {
            let c = s
                .create_check(serde_json::json!({"slug": format!("hc-{i}"), "interval": "1m"}))
                .await;
            uuids.push(c["uuid"].as_str().unwrap().to_string());
        }
        let base = s.base.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(SYSTEM_PYTHON)
                .arg("-c")
                .arg(SCRIPT)
                .arg(&base)
                .args(&uuids)
                .output()
                .expect("run python3")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the client failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 5, "{stdout}");
        for line in lines {
            assert_eq!(
                line, "paused paused",
                "pause_check, then get_check: {stdout}"
            );
        }
        s.stop().await;
    }
);
