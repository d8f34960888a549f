//! `overdue ping`, `overdue run` and `overdue checks` against a real server.

mod common;

use std::process::{Output, Stdio};

use common::{Backend, TestServer, HANG_GUARD};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

async fn overdue(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_overdue"))
        .args(args)
        .env_remove("OVERDUE_URL")
        .env_remove("OVERDUE_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    tokio::time::timeout(HANG_GUARD, child.wait_with_output())
        .await
        .expect("hang guard: overdue did not exit")
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_sends_each_kind() {
    let s = TestServer::start(Backend::Sqlite, "").await;
    let c = s.create_check(json!({"slug": "cron-job"})).await;
    let uuid = c["uuid"].as_str().unwrap().to_string();
    let rid = uuid::Uuid::new_v4().to_string();
    let o = overdue(
        &["ping", &uuid, "--url", &s.base, "--start", "--rid", &rid],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.txt");
    std::fs::write(&body, "it broke").unwrap();
    let url = s.url(&format!("/ping/{uuid}"));
    let o = overdue(
        &[
            "ping",
            &url,
            "--exit",
            "3",
            "--items",
            "5",
            "--rid",
            &rid,
            "--body-file",
            body.to_str().unwrap(),
        ],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = overdue(
        &["ping", &uuid, "--url", &s.base, "--log", "--body-file", "-"],
        Some("from stdin"),
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = overdue(&["ping", &uuid, "--url", &s.base, "--items", "7"], None).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let p = s.pings(&uuid).await;
    let kinds: Vec<&str> = p.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["success", "log", "fail", "start"]);
    assert_eq!(p[0]["items"], 7);
    assert_eq!(p[1]["body"], "from stdin");
    assert_eq!(
        (
            p[2]["exit_status"].as_i64(),
            p[2]["items"].as_i64(),
            p[2]["body"].as_str()
        ),
        (Some(3), Some(5), Some("it broke"))
    );
    assert_eq!(p[2]["rid"], rid);
    assert_eq!(p[3]["rid"], rid);
    assert!(
        p[2]["duration"].as_f64().is_some(),
        "the fail closed the run"
    );

    // Refusals: an unknown check is a failure; a bad target is bad input.
    let o = overdue(
        &["ping", &uuid::Uuid::new_v4().to_string(), "--url", &s.base],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("404"), "{}", err(&o));
    let o = overdue(&["ping", "not-a-target", "--url", &s.base], None).await;
    assert_eq!(o.status.code(), Some(2));
    let o = overdue(&["ping", &uuid, "--start", "--fail"], None).await;
    assert_eq!(o.status.code(), Some(2), "one kind at a time");
}

both_backends!(run_wraps_a_command, |backend| async move {
    let s = TestServer::start(backend, "").await;
    let c = s.create_check(json!({"slug": "poller"})).await;
    let uuid = c["uuid"].as_str().unwrap().to_string();

    // Success, with items from the output and stdin passed through.
    let o = overdue(
        &[
            "run",
            &uuid,
            "--url",
            &s.base,
            "--items-from",
            r"found (\d+) new items",
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"; echo found 12 new items; echo warn >&2",
        ],
        Some("hello\n"),
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "got hello\nfound 12 new items\n");
    assert_eq!(err(&o), "warn\n");
    let p = s.pings(&uuid).await;
    assert_eq!(p.len(), 2);
    assert_eq!(
        (
            p[0]["type"].as_str(),
            p[0]["exit_status"].as_i64(),
            p[0]["items"].as_i64()
        ),
        (Some("success"), Some(0), Some(12))
    );
    assert_eq!(p[1]["type"], "start");
    assert_eq!(p[0]["rid"], p[1]["rid"]);
    assert!(p[0]["rid"].is_string());
    let body = p[0]["body"].as_str().unwrap();
    assert!(
        body.contains("found 12 new items") && body.contains("warn"),
        "{body}"
    );
    assert!(
        body.contains("[overdue run: exit status 0 after "),
        "{body}"
    );
    let runs = s.get_json(&format!("/api/v1/checks/{uuid}/runs")).await;
    assert_eq!(runs["runs"][0]["outcome"], "success");
    assert!(runs["runs"][0]["duration"].as_f64().is_some());

    // A failure: the command's exit code is kept and reported.
    let o = overdue(
        &[
            "run",
            &uuid,
            "--url",
            &s.base,
            "--",
            "sh",
            "-c",
            "echo oops; exit 3",
        ],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(3));
    let p = s.pings(&uuid).await;
    assert_eq!(
        (p[0]["type"].as_str(), p[0]["exit_status"].as_i64()),
        (Some("fail"), Some(3))
    );
    assert!(p[0]["body"].as_str().unwrap().starts_with("oops\n"));
    let c = s.get_json(&format!("/api/v1/checks/{uuid}")).await;
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("down"), Some("failed"))
    );

    // A command that cannot start: 127, and the check hears of it.
    let o = overdue(
        &["run", &uuid, "--url", &s.base, "--", "/nonexistent/cmd"],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(127));
    let p = s.pings(&uuid).await;
    assert_eq!(p[0]["exit_status"], 127);
    assert!(
        p[0]["body"].as_str().unwrap().contains("cannot run"),
        "{}",
        p[0]
    );
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_the_server_down_still_runs_the_command() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let uuid = uuid::Uuid::new_v4().to_string();
    // Bounded by the client's own limit (5 s for all attempts); `overdue`
    // would fail at its hang guard if the client kept retrying.
    let o = overdue(
        &[
            "run",
            &uuid,
            "--url",
            &url,
            "--",
            "sh",
            "-c",
            "echo still ran; exit 7",
        ],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(7), "{}", err(&o));
    assert_eq!(out(&o), "still ran\n");
    assert!(err(&o).contains("ping failed"), "{}", err(&o));
    let o = overdue(&["run", &uuid, "--url", &url, "--", "true"], None).await;
    assert_eq!(o.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_commands_talk_to_the_api() {
    let read = "read-key-0123456789abcdef";
    let write = "write-key-0123456789abcdef";
    let s = TestServer::start(
        Backend::Sqlite,
        &format!(
            "[[api_keys]]\nname = \"ro\"\nscope = \"read\"\nkey = \"{read}\"\n\
             [[api_keys]]\nname = \"rw\"\nscope = \"write\"\nkey = \"{write}\"\n"
        ),
    )
    .await;
    let r = s
        .client
        .post(s.url("/api/v1/checks"))
        .bearer_auth(write)
        .json(&json!({"slug": "nightly", "name": "Nightly backup", "labels": {"team": "ops"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let o = overdue(
        &["checks", "list", "--url", &s.base, "--api-key", read],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("STATUS"), "{text}");
    assert!(
        lines[1].starts_with("new")
            && lines[1].contains("nightly")
            && lines[1].contains("Nightly backup"),
        "{text}"
    );
    let o = overdue(
        &[
            "checks",
            "list",
            "--json",
            "--label",
            "team=web",
            "--url",
            &s.base,
            "--api-key",
            read,
        ],
        None,
    )
    .await;
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["checks"], json!([]));
    let o = overdue(
        &[
            "checks",
            "show",
            "nightly",
            "--url",
            &s.base,
            "--api-key",
            read,
        ],
        None,
    )
    .await;
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["name"], "Nightly backup");
    let o = overdue(
        &[
            "checks",
            "pause",
            "nightly",
            "--url",
            &s.base,
            "--api-key",
            read,
        ],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("403") && err(&o).contains("read scope"),
        "{}",
        err(&o)
    );
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_overdue"))
        .args(["checks", "pause", "nightly"])
        .env("OVERDUE_URL", &s.base)
        .env("OVERDUE_API_KEY", write)
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["status"], "paused");
    let o = overdue(
        &[
            "checks",
            "resume",
            "nightly",
            "--url",
            &s.base,
            "--api-key",
            write,
        ],
        None,
    )
    .await;
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["paused"], false);
    let o = overdue(
        &[
            "checks",
            "delete",
            "nightly",
            "--url",
            &s.base,
            "--api-key",
            write,
        ],
        None,
    )
    .await;
    assert_eq!(
        (o.status.code(), out(&o)),
        (Some(0), "deleted nightly\n".to_string())
    );
    let o = overdue(
        &[
            "checks",
            "show",
            "nightly",
            "--url",
            &s.base,
            "--api-key",
            read,
        ],
        None,
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("404"), "{}", err(&o));
    let o = overdue(&["checks", "list", "--url", &s.base], None).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("missing API key"), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_retries_what_may_pass_and_not_what_was_refused() {
    use common::sinks::{Behaviour, WebhookSink};
    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Status(503));
    sink.push(Behaviour::Status(502));
    let url = sink.url("/ping/5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0");
    let o = overdue(&["ping", &url, "--items", "3"], None).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let got = sink.requests();
    assert_eq!(got.len(), 3, "two failures, then success");
    assert!(got
        .iter()
        .all(|r| r.path.ends_with("?items=3") && r.method == "POST"));

    let sink = WebhookSink::start().await;
    sink.push(Behaviour::Status(404));
    let o = overdue(&["ping", &sink.url("/ping/x/y")], None).await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(sink.requests().len(), 1, "a refusal is not retried");

    let sink = WebhookSink::start().await;
    for _ in 0..3 {
        sink.push(Behaviour::Status(500));
    }
    let o = overdue(&["ping", &sink.url("/ping/x/y"), "--retries", "1"], None).await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(sink.requests().len(), 2);
    assert!(err(&o).contains("500"), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_is_not_held_up_by_a_server_that_never_answers() {
    use common::sinks::{Behaviour, WebhookSink};
    let sink = WebhookSink::start().await;
    for _ in 0..10 {
        sink.push(Behaviour::Hang);
    }
    let url = sink.url("/ping/5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0");
    let o = overdue(&["run", &url, "--", "sh", "-c", "echo done; exit 4"], None).await;
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert_eq!(out(&o), "done\n");
    // A start still pending when the command is done gets 1 s more, then
    // is abandoned for the finish (the client would otherwise wait for it
    // in full, 5 s, and retry it): one start, sent before the finish and
    // never after it.
    assert!(
        err(&o).contains("start ping failed: no answer by the time the command ended"),
        "{}",
        err(&o)
    );
    let paths: Vec<String> = sink
        .requests()
        .iter()
        .map(|r| r.path.split('?').next().unwrap().to_string())
        .collect();
    // First the slot is asked for, once (SPEC §14: OVERDUE_SLOT); without
    // an answer the command runs without it.
    let due = "/ping/5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0/due";
    let start = "/ping/5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0/start";
    let finish = "/ping/5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0/4";
    assert_eq!(paths.first().map(String::as_str), Some(due), "{paths:?}");
    assert!(
        err(&o).contains("cannot name this run's slot") && err(&o).contains("without OVERDUE_SLOT"),
        "{}",
        err(&o)
    );
    assert_eq!(paths.get(1).map(String::as_str), Some(start), "{paths:?}");
    assert_eq!(paths.iter().filter(|p| *p == start).count(), 1, "{paths:?}");
    assert!(paths[2..].iter().all(|p| p == finish), "{paths:?}");
    assert!(paths.len() >= 3, "the finish was sent: {paths:?}");
    assert!(err(&o).contains("exit-status ping failed"), "{}", err(&o));
}
