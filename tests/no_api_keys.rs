//! With no API key configured at all (SPEC §5), the API answers loopback
//! clients only, and the server says so in a warning at start-up.
//!
//! A test cannot open a connection from an address that is not loopback
//! without leaving loopback, so the refusal is checked on the real router
//! (the one `app::run` serves, built by `overdue::fuzzing::Server`), given the
//! peer address the accept loop would have given it. The address derivation
//! it relies on (`trusted_proxies`, `X-Forwarded-For`) is checked against
//! the real server over TCP below, too.

mod common;

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::Request;
use common::{Backend, ChildServer, TestServer};
use overdue::fuzzing::Server;
use serde_json::Value;

const REFUSAL: &str = "no API keys are configured, so the API only answers requests from loopback";
const WARNING: &str = "no API keys are configured in the file";

fn get(server: &Server, peer: &str, uri: &str) -> (u16, String) {
    let peer: SocketAddr = peer.parse().unwrap();
    let request = Request::get(uri).body(Body::empty()).unwrap();
    let (status, body) = server.send_from(peer, request);
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn error_message(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"]["message"].clone()
}

#[test]
fn a_client_not_on_loopback_is_refused() {
    let server = Server::start_with("ping_body_limit = 100");
    for peer in [
        "10.1.2.3:40000",
        "[2001:db8::7]:40000",
        "[::ffff:10.1.2.3]:40000",
    ] {
        let (status, body) = get(&server, peer, "/api/v1/checks");
        assert_eq!(status, 403, "{peer}: {body}");
        assert_eq!(error_message(&body), REFUSAL, "{peer}");

        let write = Request::post("/api/v1/checks")
            .header("content-type", "application/json")
            .body(Body::from(r#"{"slug": "from-afar"}"#))
            .unwrap();
        let (status, body) = server.send_from(peer.parse().unwrap(), write);
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 403, "{peer}: {body}");
        assert_eq!(error_message(&body), REFUSAL, "{peer}");

        // healthchecks' v3 API keeps its own error shape.
        let (status, body) = get(&server, peer, "/api/v3/checks/");
        assert_eq!(status, 403, "{peer}: {body}");
        assert!(body.contains(REFUSAL), "{peer}: {body}");

        // The dashboard asks for a key instead of showing the check.
        let (status, body) = get(&server, peer, "/checks/api-check");
        assert_ne!(status, 200, "{peer}: {body}");
        assert!(!body.contains("id=\"pause\""), "{peer}: {body}");

        // Pings need no key, from anywhere.
        let (status, body) = get(&server, peer, "/ping/6f1c2a3e-9d4b-4c1e-8f00-0a1b2c3d4e5f");
        assert_eq!((status, body.as_str()), (404, "not found"), "{peer}");
    }
    // From loopback, the same requests are answered, and nothing was created
    // from afar.
    for peer in [
        "127.0.0.1:40000",
        "127.9.9.9:40000",
        "[::1]:40000",
        "[::ffff:127.0.0.1]:40000",
    ] {
        let (status, body) = get(&server, peer, "/api/v1/checks");
        assert_eq!(status, 200, "{peer}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let slugs: Vec<&str> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["slug"].as_str())
            .collect();
        assert_eq!(slugs, ["api-check"], "{peer}");
    }
}

/// The real server over TCP: a loopback proxy in `trusted_proxies` passing
/// on a client that is not on loopback.
#[tokio::test]
#[cfg_attr(overdue_missing = "curl", ignore = "needs curl")]
async fn a_client_behind_a_trusted_proxy_is_refused() {
    common::need(common::Peer::Curl);
    let s = TestServer::start(Backend::Sqlite, "trusted_proxies = [\"127.0.0.1/32\"]").await;
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--noproxy", "*", "-w", "\n%{http_code}"])
        .args(["-H", "X-Forwarded-For: 10.1.2.3"])
        .arg(s.url("/api/v1/checks"))
        .output()
        .await;
    let (status, body) = match out {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let (body, status) = text.rsplit_once('\n').unwrap();
            (status.to_string(), body.to_string())
        }
        Err(e) => common::missing(common::Peer::Curl, &format!("curl ({e})"), "Debian's curl"),
    };
    assert_eq!(status, "403", "{body}");
    assert_eq!(error_message(&body), REFUSAL);
    // The proxy's own requests (no X-Forwarded-For) are loopback ones.
    let r = s.client.get(s.url("/api/v1/checks")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    s.stop().await;
}

#[test]
fn the_start_up_warning_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("overdue.db").display());
    let config = common::write_config(
        dir.path(),
        &format!("listen = \"127.0.0.1:0\"\ndatabase_url = \"{db}\"\n"),
    );
    let server = ChildServer::spawn(&config);
    // The warning comes before the "listening on" line spawn waited for.
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains(WARNING))
        .unwrap_or_else(|| panic!("no warning in:\n{log}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("answers only requests from loopback"),
        "{line}"
    );
    drop(server);

    // With a key, no such warning.
    let config = common::write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"{db}\"\n\
             [[api_keys]]\nname = \"ops\"\nscope = \"write\"\nkey = \"ops-key-0123456789abcdef\"\n"
        ),
    );
    let server = ChildServer::spawn(&config);
    assert!(!server.log().contains(WARNING), "{}", server.log());
}

/// A POST of JSON to the server, with a key or none: (status, body).
async fn post_json(s: &TestServer, path: &str, key: Option<&str>, body: Value) -> (u16, Value) {
    let mut r = s.client.post(s.url(path)).json(&body);
    if let Some(k) = key {
        r = r.header("x-api-key", k);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

both_backends!(
    the_first_key_cannot_lock_writers_out,
    |backend| async move {
        let s = TestServer::start(backend, "").await;
        // From loopback with no key at all, a read key first would end the
        // open access with nobody left able to write: refused, saying why.
        let (status, e) = post_json(
            &s,
            "/api/v1/keys",
            None,
            serde_json::json!({"name": "grafana", "scope": "read"}),
        )
        .await;
        assert_eq!(status, 409, "{e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains("create a write key first"), "{message}");
        // Nothing changed: loopback still writes without a key.
        let (status, _) = post_json(
            &s,
            "/api/v1/checks",
            None,
            serde_json::json!({"slug": "still-open"}),
        )
        .await;
        assert_eq!(status, 201);
        // The way out: a write key first, then the read key.
        let (status, w) = post_json(
            &s,
            "/api/v1/keys",
            None,
            serde_json::json!({"name": "admin", "scope": "write"}),
        )
        .await;
        assert_eq!(status, 201, "{w}");
        let write = w["key"].as_str().unwrap().to_string();
        let (status, r) = post_json(
            &s,
            "/api/v1/keys",
            Some(&write),
            serde_json::json!({"name": "grafana", "scope": "read"}),
        )
        .await;
        assert_eq!(status, 201, "{r}");
        // The last write key cannot go while a read key remains.
        let id = w["id"].as_str().unwrap();
        let refused = s
            .client
            .delete(s.url(&format!("/api/v1/keys/{id}")))
            .header("x-api-key", &write)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 409);
        let (status, _) = post_json(
            &s,
            "/api/v1/checks",
            Some(&write),
            serde_json::json!({"slug": "still-writable"}),
        )
        .await;
        assert_eq!(status, 201, "the write key still works");
    }
);
