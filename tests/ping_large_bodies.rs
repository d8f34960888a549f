//! Large ping bodies (SPEC §4), sent by Python's urllib: a client that writes
//! its whole body before it reads the answer. A server that answers early and
//! closes the connection resets it instead, and the client retries a ping that
//! was stored: a second ping.

mod common;

use std::process::Command;

use common::{Backend, TestServer, PING_KEY};
use serde_json::json;

const MIB: usize = 1 << 20;

/// Posts `size` bytes to `url` with urllib (chunked when asked) and returns
/// what the client saw: "<status> <body>", or "error <what>" when it could
/// not read an answer. Needs /usr/bin/python3.
fn urllib_post(url: &str, size: usize, chunked: bool) -> String {
    const SCRIPT: &str = r#"
import sys, urllib.error, urllib.request
url, size, chunked = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "chunked"
piece = b"z" * 65536
def pieces():
    left = size
    while left > 0:
        yield piece[:min(left, len(piece))]
        left -= len(piece)
# An iterable body without a length is sent with Transfer-Encoding: chunked.
data = pieces() if chunked else b"z" * size
request = urllib.request.Request(url, data=data, method="POST")
try:
    with urllib.request.urlopen(request, timeout=60) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print("error", type(e).__name__, e)
"#;
    common::need_program(
        common::Peer::Python3,
        "/usr/bin/python3",
        "Debian's python3",
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT, url, &size.to_string()])
        .arg(if chunked { "chunked" } else { "length" })
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn server(backend: Backend) -> TestServer {
    TestServer::start(backend, "ping_body_limit = 100").await
}

/// Runs the blocking client off the test's runtime, which serves the server.
async fn post(url: String, size: usize, chunked: bool) -> String {
    tokio::task::spawn_blocking(move || urllib_post(&url, size, chunked))
        .await
        .unwrap()
}

both_backends!(
    eight_mib_is_answered_200_once,
    needs = [python3],
    |backend| async move {
        let s = server(backend).await;
        let check = s.create_check(json!({})).await;
        let uuid = check["uuid"].as_str().unwrap().to_string();
        let seen = post(s.url(&format!("/ping/{uuid}/fail")), 8 * MIB, false).await;
        assert_eq!(seen, "200 OK");
        let stored = s.pings(&uuid).await;
        assert_eq!(stored.len(), 1, "{stored:?}");
        assert_eq!(stored[0]["type"], "fail");
        assert_eq!(stored[0]["body"].as_str().unwrap(), "z".repeat(100));

        // The same through the slug form, chunked.
        s.create_check(json!({"slug": "chunky"})).await;
        let url = s.url(&format!("/ping/{PING_KEY}/chunky"));
        let seen = post(url, 8 * MIB, true).await;
        assert_eq!(seen, "200 OK");
        let c = s.get_json("/api/v1/checks/chunky").await;
        assert_eq!(c["n_pings"], 1, "{c}");

        // A ping answered before its body is read gets that answer too.
        let unknown = s.url("/ping/6f1c1f3e-2b7d-4a43-9f5e-0c8e8f2f6b1a");
        assert_eq!(post(unknown, 8 * MIB, false).await, "404 not found");
    }
);

both_backends!(
    past_16_mib_is_413_and_stores_nothing,
    needs = [python3],
    |backend| async move {
        let s = server(backend).await;
        let check = s.create_check(json!({})).await;
        let uuid = check["uuid"].as_str().unwrap().to_string();
        let url = s.url(&format!("/ping/{uuid}"));
        for chunked in [false, true] {
            let seen = post(url.clone(), 20 * MIB, chunked).await;
            assert_eq!(
            seen,
            "413 ping body too large: at most 16777216 bytes (16 MiB) are accepted; nothing was stored",
            "chunked: {chunked}"
        );
        }
        // Exactly 16 MiB is still a ping.
        let seen = post(url, 16 * MIB, false).await;
        assert_eq!(seen, "200 OK");
        let stored = s.pings(&uuid).await;
        assert_eq!(stored.len(), 1, "{stored:?}");
        let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
        assert_eq!(c["n_pings"], 1, "{c}");
        let metrics = s.client.get(s.url("/metrics")).send().await.unwrap();
        let metrics = metrics.text().await.unwrap();
        assert!(
            metrics.contains("overdue_ping_rejected_total{reason=\"too_large\"} 2\n"),
            "{metrics}"
        );
    }
);
