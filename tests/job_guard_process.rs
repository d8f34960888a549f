//! `overdue run`'s job guard, client side (SPEC §13), with the real binary:
//! against a fake server that speaks the guard's HTTP contract (due, lock,
//! renew, unlock, skip) and records what it gets, and with no server at all
//! for what happens to the command (time limit, signals, parent death).

mod common;

use std::collections::VecDeque;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::HANG_GUARD;
use serde_json::json;

/// A check's uuid, for runs that name the check by uuid and the server by
/// `--url`.
const UUID: &str = "5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0";

/// `overdue <args>`, its output captured, killed if the test drops it.
fn overdue_command(args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_overdue"));
    c.args(args)
        .env_remove("OVERDUE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A test that fails early leaves no overdue run (nor, by its
        // parent-death signal, its command) behind.
        .kill_on_drop(true);
    c
}

/// The arguments of `overdue run <flags> -- sh -c <script>`.
fn run_sh<'a>(flags: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    args
}

/// Runs `overdue <args>` to its end (under the hang guard): its output.
async fn overdue(args: &[&str]) -> Output {
    let child = overdue_command(args).spawn().unwrap();
    tokio::time::timeout(HANG_GUARD, child.wait_with_output())
        .await
        .expect("hang guard: overdue did not exit")
        .unwrap()
}

/// What it wrote to stderr.
fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A loopback URL nobody listens on.
fn closed_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Waits until `path` holds a whole line (or more) and returns its text.
async fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "hang guard: {path:?} never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `pid` still runs after the hang guard (then it is killed, as
/// the test's own leftover); false as soon as it is gone.
async fn outlives_the_hang_guard(pid: i32) -> bool {
    let started = Instant::now();
    while running(pid) {
        if started.elapsed() >= HANG_GUARD {
            // SAFETY: kill(2) on the test's own leftover.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Whether a process runs (a zombie does not count: it waits only to be reaped).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X'))
        }
    }
}

// ---------------------------------------------------------------------------
// A fake server speaking the guard's contract

#[derive(Debug, Clone)]
struct Req {
    method: String,
    /// The path after `/ping/<uuid>` (`/lock`, `/start`, `/0`, …).
    endpoint: String,
    params: Vec<(String, String)>,
    body: String,
}

impl Req {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Script {
    acquire: (u16, String),
    /// Answers to renewals in order; then `renewed`.
    renewals: VecDeque<(u16, String)>,
    due: (u16, String),
    /// How long `due` takes to answer.
    due_delay: Duration,
    /// The first acquire takes the seat but its answer is lost (a 502 from
    /// a proxy after the server committed): then a retry with the same
    /// nonce gets the seat, any other acquire finds it held by that first one.
    lose_first_acquire: bool,
    /// The nonce the seat was taken with, once taken so.
    taken_with: Option<Option<String>>,
    requests: Vec<Req>,
}

#[derive(Clone)]
struct Fake {
    script: Arc<Mutex<Script>>,
    base: String,
}

const TOKEN: i64 = 41;

fn seat(ttl_ms: u64) -> (u16, String) {
    let body = json!({"acquired": true, "token": TOKEN, "expires": "2030-01-01T00:00:00Z",
                      "holder": "test", "ttl_ms": ttl_ms});
    (200, body.to_string())
}

fn held() -> (u16, String) {
    let body = json!({"acquired": false, "holder": "web-2:77", "expires": "2030-01-01T00:05:00Z"});
    (423, body.to_string())
}

fn lost() -> (u16, String) {
    (
        409,
        json!({"acquired": false, "error": "token 41 holds no seat"}).to_string(),
    )
}

fn due(due: bool, reason: &str) -> (u16, String) {
    let body = json!({"due": due, "reason": reason, "slot": "2030-01-01T03:00:00Z",
                      "last_success": null, "next_due": null, "quiet": reason == "quiet"});
    (200, body.to_string())
}

impl Fake {
    async fn start(acquire: (u16, String), due: (u16, String)) -> Fake {
        let script = Arc::new(Mutex::new(Script {
            acquire,
            renewals: VecDeque::new(),
            due,
            due_delay: Duration::ZERO,
            lose_first_acquire: false,
            taken_with: None,
            requests: Vec::new(),
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(Arc::clone(&script));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Fake { script, base }
    }

    fn renewals(&self, answers: &[(u16, String)]) {
        self.script
            .lock()
            .unwrap()
            .renewals
            .extend(answers.iter().cloned());
    }

    fn set(&self, f: impl FnOnce(&mut Script)) {
        f(&mut self.script.lock().unwrap());
    }

    fn requests(&self) -> Vec<Req> {
        self.script.lock().unwrap().requests.clone()
    }

    fn endpoints(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.endpoint).collect()
    }

    fn url(&self) -> String {
        format!("{}/ping/{UUID}", self.base)
    }
}

async fn answer(
    axum::extract::State(script): axum::extract::State<Arc<Mutex<Script>>>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let endpoint = parts
        .uri
        .path()
        .strip_prefix(&format!("/ping/{UUID}"))
        .unwrap_or(parts.uri.path())
        .to_string();
    let params: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let req = Req {
        method: parts.method.to_string(),
        endpoint,
        params,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let delay = {
        let mut s = script.lock().unwrap();
        s.requests.push(req.clone());
        if req.endpoint == "/due" {
            s.due_delay
        } else {
            Duration::ZERO
        }
    };
    tokio::time::sleep(delay).await;
    let mut s = script.lock().unwrap();
    let nonce = req.param("nonce").map(str::to_string);
    let (status, text) = match req.endpoint.as_str() {
        "/lock" if req.param("token").is_some() => {
            s.renewals.pop_front().unwrap_or_else(|| seat(900))
        }
        "/lock" if s.lose_first_acquire => match &s.taken_with {
            None => {
                s.taken_with = Some(nonce);
                (502, "Bad Gateway".to_string())
            }
            Some(Some(first)) if nonce.as_deref() == Some(first.as_str()) => s.acquire.clone(),
            Some(_) => {
                let body = json!({"acquired": false, "holder": "this-very-run",
                                  "expires": "2030-01-01T00:05:00Z"});
                (423, body.to_string())
            }
        },
        "/lock" => s.acquire.clone(),
        "/due" => s.due.clone(),
        "/unlock" => (200, json!({"released": true}).to_string()),
        _ => (200, "OK".to_string()),
    };
    (StatusCode::from_u16(status).unwrap(), text).into_response()
}

// ---------------------------------------------------------------------------
// Against the fake server

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_elsewhere_is_a_recorded_skip_and_the_command_does_not_run() {
    let fake = Fake::start(held(), due(true, "due")).await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}", ran.display());
    let url = fake.url();
    let o = overdue(&run_sh(
        &["--once", "--lock", "--holder", "web-1:5", &url],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
    // A skip is the normal outcome on every host but one: nothing for cron to mail.
    assert_eq!(err(&o), "");
    let r = fake.requests();
    assert_eq!(fake.endpoints(), ["/lock", "/skip"], "{r:?}");
    assert_eq!(r[0].method, "POST");
    assert_eq!(r[0].param("holder"), Some("web-1:5"));
    assert_eq!(
        r[1].param("reason"),
        Some("locked by web-2:77 until 2030-01-01T00:05:00Z")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_already_done_is_asked_while_holding_the_lock_then_released() {
    let fake = Fake::start(seat(60_000), due(false, "done")).await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}", ran.display());
    let url = fake.url();
    let o = overdue(&run_sh(
        &["--once", "--lock", "--lock-ttl", "1m", &url],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
    let r = fake.requests();
    assert_eq!(
        fake.endpoints(),
        ["/lock", "/due", "/skip", "/unlock"],
        "{r:?}"
    );
    assert_eq!(r[0].param("ttl"), Some("60000ms"));
    assert_eq!(r[1].method, "GET");
    assert_eq!(
        r[2].param("reason"),
        Some("already done for slot 2030-01-01T03:00:00Z")
    );
    assert_eq!(r[3].param("token"), Some("41"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_alone_skips_quiet_hours_without_a_lock() {
    let fake = Fake::start(held(), due(false, "quiet")).await;
    let url = fake.url();
    let o = overdue(&run_sh(&["--once", &url], "exit 3")).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(fake.endpoints(), ["/due", "/skip"]);
    assert_eq!(fake.requests()[1].param("reason"), Some("quiet hours"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_renewed_at_a_third_of_its_ttl_and_released_after_the_outcome() {
    // 900 ms: a renewal every 300 ms while the command runs, until the
    // fake has seen three renewals and lets it end.
    let fake = Fake::start(seat(900), due(true, "due")).await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    let go = dir.path().join("go");
    let script = format!(
        "echo $OVERDUE_LOCK_TOKEN > {}; while [ ! -e {} ]; do sleep 0.05; done; echo done",
        token.display(),
        go.display()
    );
    let url = fake.url();
    let child = overdue_command(&run_sh(&["--once", "--lock", &url], &script))
        .spawn()
        .unwrap();
    let started = Instant::now();
    while fake
        .requests()
        .iter()
        .filter(|q| q.endpoint == "/lock" && q.param("token").is_some())
        .count()
        < 3
    {
        assert!(started.elapsed() < HANG_GUARD, "hang guard: three renewals");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(&go, "").unwrap();
    let o = tokio::time::timeout(HANG_GUARD, child.wait_with_output())
        .await
        .expect("hang guard: overdue did not exit")
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&token).unwrap(), "41\n");
    let r = fake.requests();
    let names = fake.endpoints();
    assert_eq!(&names[..2], ["/lock", "/due"], "{names:?}");
    let renewals: Vec<&Req> = r
        .iter()
        .filter(|q| q.endpoint == "/lock" && q.param("token").is_some())
        .collect();
    assert!(renewals.len() >= 3, "{names:?}");
    assert!(renewals
        .iter()
        .all(|q| q.param("token") == Some("41") && q.param("holder").is_some()));
    // The outcome is recorded before the seat is given back.
    let finish = names
        .iter()
        .position(|n| n == "/0")
        .expect("exit-status ping");
    assert_eq!(
        names.last().map(String::as_str),
        Some("/unlock"),
        "{names:?}"
    );
    assert!(finish < names.len() - 1);
    assert!(r[finish].body.contains("done\n"), "{}", r[finish].body);
    assert_eq!(r.last().unwrap().param("token"), Some("41"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_that_fail_to_reach_the_server_do_not_lose_the_lock() {
    let fake = Fake::start(seat(900), due(true, "due")).await;
    fake.renewals(&[
        (503, "down".into()),
        (502, "down".into()),
        (500, "down".into()),
    ]);
    let url = fake.url();
    let o = overdue(&run_sh(&["--lock", &url], "sleep 2; exit 5")).await;
    // Let finish: its own exit code, reported as such.
    assert_eq!(o.status.code(), Some(5), "{}", err(&o));
    assert!(err(&o).contains("cannot renew the lock"), "{}", err(&o));
    let names = fake.endpoints();
    assert!(names.contains(&"/5".to_string()), "{names:?}");
    assert!(!names.contains(&"/fail".to_string()), "{names:?}");
    assert_eq!(
        names.last().map(String::as_str),
        Some("/unlock"),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_command_and_reports_a_failure() {
    let fake = Fake::start(seat(900), due(true, "due")).await;
    fake.renewals(&[lost()]);
    let dir = tempfile::tempdir().unwrap();
    let finished = dir.path().join("finished");
    let script = format!("sleep 30; touch {}", finished.display());
    let url = fake.url();
    let o = overdue(&run_sh(&["--lock", &url], &script)).await;
    // Stopped: let finish, it would have touched `finished` after 30 s.
    assert!(!finished.exists());
    let code = o.status.code().unwrap();
    assert_ne!(code, 0, "{}", err(&o));
    let r = fake.requests();
    let fail = r
        .iter()
        .find(|q| q.endpoint == "/fail")
        .expect("a failure ping");
    assert!(fail.body.contains("lost the lock"), "{}", fail.body);
    // A seat the server took back is not released again.
    assert!(!fake.endpoints().contains(&"/unlock".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_with_warn_lets_the_command_finish() {
    let fake = Fake::start(seat(900), due(true, "due")).await;
    fake.renewals(&[lost()]);
    let url = fake.url();
    let o = overdue(&run_sh(
        &["--lock", "--lock-lost", "warn", &url],
        "sleep 1; exit 4",
    ))
    .await;
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(err(&o).contains("lost the lock"), "{}", err(&o));
    let r = fake.requests();
    let finish = r
        .iter()
        .find(|q| q.endpoint == "/4")
        .expect("the exit-status ping");
    assert!(finish.body.contains("lost the lock"), "{}", finish.body);
    // Renewing stopped with the lock.
    let renewals = r
        .iter()
        .filter(|q| q.param("token").is_some() && q.endpoint == "/lock")
        .count();
    assert_eq!(renewals, 1, "{:?}", fake.endpoints());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_timeout_a_failure_is_reported_and_the_exit_code_is_124() {
    let fake = Fake::start(held(), due(true, "due")).await;
    let url = fake.url();
    let o = overdue(&run_sh(
        &["--timeout", "1s", "--kill-grace", "500ms", &url],
        "trap '' TERM; echo started; sleep 30",
    ))
    .await;
    assert_eq!(o.status.code(), Some(124), "{}", err(&o));
    let r = fake.requests();
    let fail = r
        .iter()
        .find(|q| q.endpoint == "/fail")
        .expect("a failure ping");
    assert!(fail.body.contains("started\n"), "{}", fail.body);
    assert!(fail.body.contains("timed out after 1s"), "{}", fail.body);
    assert!(fail.body.contains("SIGKILL"), "{}", fail.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_an_error_never_a_silent_skip() {
    // 404: an unknown check, a typo in the crontab. The server answered, so
    // --if-unreachable does not apply: exit 2 with the server's message, the
    // command not run, nothing recorded.
    let fake = Fake::start(
        (404, json!({"error": "no check with that uuid"}).to_string()),
        due(true, "due"),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}; exit 3", ran.display());
    let url = fake.url();
    for flags in [&["--lock"][..], &["--lock", "--if-unreachable", "run"]] {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[&url, "--", "sh", "-c", &script]);
        let o = overdue(&args).await;
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", err(&o));
        assert!(!ran.exists(), "{flags:?}: the command ran");
        assert!(err(&o).contains("404"), "{}", err(&o));
        assert!(err(&o).contains("no check with that uuid"), "{}", err(&o));
    }
    assert_eq!(fake.endpoints(), ["/lock", "/lock"]);

    // `due` refused while holding a seat: the seat is given back.
    let fake = Fake::start(seat(60_000), (404, "not found".into())).await;
    let url = fake.url();
    let o = overdue(&run_sh(
        &["--once", "--lock", "--if-unreachable", "run", &url],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
    assert!(err(&o).contains("404 Not Found: not found"), "{}", err(&o));
    assert_eq!(fake.endpoints(), ["/lock", "/due", "/unlock"]);

    // A bad request (here a holder the server would not take) likewise.
    let fake = Fake::start(
        (400, json!({"error": "holder: 1 to 200 bytes"}).to_string()),
        due(true, "due"),
    )
    .await;
    let url = fake.url();
    let o = overdue(&run_sh(&["--lock", &url], &script)).await;
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("holder: 1 to 200 bytes"), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_the_server_would_refuse_is_refused_before_asking() {
    let fake = Fake::start(seat(60_000), due(true, "due")).await;
    let url = fake.url();
    let long = "h".repeat(201);
    for holder in ["", "  ", "web\n1", &long] {
        let o = overdue(&run_sh(&["--lock", "--holder", holder, &url], "exit 3")).await;
        assert_eq!(o.status.code(), Some(2), "{holder:?}: {}", err(&o));
        assert!(err(&o).contains("--holder"), "{}", err(&o));
    }
    assert!(fake.requests().is_empty(), "{:?}", fake.endpoints());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_failing_with_5xx_follows_if_unreachable() {
    let fake = Fake::start((503, "down".into()), due(false, "done")).await;
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}; exit 3", ran.display());
    let url = fake.url();
    let o = overdue(&run_sh(&["--lock", &url], &script)).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
    assert!(
        err(&o).contains("not running the command (--if-unreachable skip)"),
        "{}",
        err(&o)
    );
    // Retried: a 5xx may be passing.
    let attempts = fake.endpoints().len();
    assert_eq!(attempts, 3, "{:?}", fake.endpoints());

    // --if-unreachable run without the lock still asks `due` under --once:
    // the slot is done, so nothing runs.
    let o = overdue(&run_sh(
        &["--once", "--lock", "--if-unreachable", "run", &url],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!ran.exists(), "the command ran though the slot is done");
    let r = fake.requests();
    assert_eq!(
        fake.endpoints()[attempts..],
        ["/lock", "/lock", "/lock", "/due", "/skip"],
        "{r:?}"
    );
    assert_eq!(
        r.last().unwrap().param("reason"),
        Some("already done for slot 2030-01-01T03:00:00Z")
    );

    // Due: it runs, without the guard.
    let fake = Fake::start((503, "down".into()), due(true, "due")).await;
    let url = fake.url();
    let o = overdue(&run_sh(
        &["--once", "--lock", "--if-unreachable", "run", &url],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(ran.exists(), "the command did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_answer_was_lost_gets_its_own_seat_on_retry() {
    // The first attempt takes the seat, its answer is lost; the retry, with
    // the same nonce, gets that seat back instead of a 423 naming itself.
    let fake = Fake::start(seat(900), due(true, "due")).await;
    fake.set(|s| s.lose_first_acquire = true);
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}; sleep 1", ran.display());
    let url = fake.url();
    let o = overdue(&run_sh(&["--once", "--lock", &url], &script)).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(ran.exists(), "the command did not run: {}", err(&o));
    let r = fake.requests();
    let names = fake.endpoints();
    assert!(!names.contains(&"/skip".to_string()), "{names:?}");
    // The first requests, renewals left out: a loaded machine may renew the
    // 900 ms seat (every 300 ms) before `due` is asked.
    let asked: Vec<&Req> = r
        .iter()
        .filter(|q| !(q.endpoint == "/lock" && q.param("token").is_some()))
        .collect();
    let first: Vec<&str> = asked.iter().take(3).map(|q| q.endpoint.as_str()).collect();
    assert_eq!(first, ["/lock", "/lock", "/due"], "{names:?}");
    let nonce = asked[0].param("nonce").expect("an acquire carries a nonce");
    assert!(uuid::Uuid::parse_str(nonce).is_ok(), "{nonce}");
    assert_eq!(asked[1].param("nonce"), Some(nonce));
    // Renewals name their seat by token, not by nonce.
    let renewals: Vec<&Req> = r
        .iter()
        .filter(|q| q.endpoint == "/lock" && q.param("token").is_some())
        .collect();
    assert!(!renewals.is_empty(), "{names:?}");
    assert!(renewals.iter().all(|q| q.param("nonce").is_none()), "{r:?}");
    assert_eq!(names.last().map(String::as_str), Some("/unlock"));

    // Each invocation has its own.
    let fake = Fake::start(seat(60_000), due(true, "due")).await;
    let url = fake.url();
    for _ in 0..2 {
        let o = overdue(&["run", "--lock", &url, "--", "true"]).await;
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    }
    let nonces: Vec<String> = fake
        .requests()
        .iter()
        .filter(|q| q.endpoint == "/lock")
        .filter_map(|q| q.param("nonce").map(str::to_string))
        .collect();
    assert_eq!(nonces.len(), 2, "{nonces:?}");
    assert_ne!(nonces[0], nonces[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lost_before_the_command_starts_is_a_skip() {
    // The first renewal (at 300 ms) answers 409 while `due` takes 1.5 s.
    let fake = Fake::start(seat(900), due(true, "due")).await;
    fake.renewals(&[lost()]);
    fake.set(|s| s.due_delay = Duration::from_millis(1500));
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}", ran.display());
    let url = fake.url();
    let o = overdue(&run_sh(&["--once", "--lock", &url], &script)).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
    let r = fake.requests();
    let names = fake.endpoints();
    assert_eq!(names, ["/lock", "/due", "/lock", "/skip"], "{r:?}");
    assert_eq!(r[3].param("reason"), Some("lost the lock before starting"));
    assert!(err(&o).contains("lost the lock"), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_skip_sends_its_reason() {
    let fake = Fake::start(held(), due(true, "due")).await;
    let url = fake.url();
    let o = overdue(&["ping", &url, "--skip", "maintenance window"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let r = fake.requests();
    assert_eq!(fake.endpoints(), ["/skip"]);
    assert_eq!(r[0].method, "POST");
    assert_eq!(r[0].param("reason"), Some("maintenance window"));
    // One kind at a time.
    let o = overdue(&["ping", &url, "--skip", "x", "--fail"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}

// ---------------------------------------------------------------------------
// Without a server

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_server_unreachable_a_guarded_run_skips_unless_told_to_run() {
    let url = closed_url();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}; exit 3", ran.display());
    let o = overdue(&run_sh(&["--once", "--lock", UUID, "--url", &url], &script)).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!ran.exists(), "the command ran");
    assert!(
        err(&o).contains("not running the command (--if-unreachable skip)"),
        "{}",
        err(&o)
    );

    let o = overdue(&run_sh(
        &[
            "--once",
            "--lock",
            "--if-unreachable",
            "run",
            UUID,
            "--url",
            &url,
        ],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(ran.exists(), "the command did not run");
    assert!(
        err(&o).contains("running the command without the guard"),
        "{}",
        err(&o)
    );
}

/// Runs `script` under `overdue run` (the server unreachable: it runs
/// anyway), waits for the pid the script writes to `pidfile`, kills the
/// guard with SIGKILL, and tells whether that process outlives the hang
/// guard.
async fn outlives_a_killed_guard(script: &str, pidfile: &Path) -> bool {
    let url = closed_url();
    let mut guard = overdue_command(&run_sh(
        &["--if-unreachable", "run", UUID, "--url", &url],
        script,
    ))
    .spawn()
    .unwrap();
    let pid: i32 = wait_for_file(pidfile).await.trim().parse().unwrap();
    assert!(running(pid));
    guard.kill().await.unwrap(); // SIGKILL: no chance to clean up
    outlives_the_hang_guard(pid).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_guard_leaves_no_command_running() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 300", pidfile.display());
    let survived = outlives_a_killed_guard(&script, &pidfile).await;
    assert!(!survived, "the command outlived overdue run (kill -9)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_guard_leaves_no_grandchild_running() {
    // A script's foreground step (pg_dump, rsync): the outer shell waits for
    // the inner one (`; true` keeps it from exec-ing it), which becomes
    // `sleep`. Only the outer shell has the parent-death signal.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("inner.pid");
    let script = format!(
        "sh -c 'echo $$ > {}; exec sleep 300'; true",
        pidfile.display()
    );
    let survived = outlives_a_killed_guard(&script, &pidfile).await;
    assert!(
        !survived,
        "the command's child outlived overdue run (kill -9)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_leaves_behind_when_it_ends_is_not_killed() {
    // Only a guard that dies takes the command's group with it; a command
    // that ended on its own may leave a daemon behind, as without the guard.
    let url = closed_url();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let beats = dir.path().join("beats");
    // The background process beats: it appends a line every 50 ms.
    let script = format!(
        "(while :; do echo . >> {}; sleep 0.05; done) >/dev/null 2>&1 & echo $! > {}",
        beats.display(),
        pidfile.display()
    );
    let o = overdue(&run_sh(
        &["--if-unreachable", "run", UUID, "--url", &url],
        &script,
    ))
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let pid: i32 = wait_for_file(&pidfile).await.trim().parse().unwrap();
    // It beats on after overdue run ended: three more beats than when it
    // exited (killed, it would beat no more, and the hang guard would end
    // the wait).
    let beats_at = |p: &Path| std::fs::read_to_string(p).map_or(0, |s| s.len());
    let at_exit = beats_at(&beats);
    let started = Instant::now();
    let mut alive = true;
    while beats_at(&beats) < at_exit + 3 {
        if started.elapsed() >= HANG_GUARD {
            alive = false;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: kill(2) on the test's own leftover.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        alive,
        "the background process was killed after a normal end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_to_overdue_run_reach_the_command() {
    let url = closed_url();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let usr1 = dir.path().join("usr1");
    let term = dir.path().join("term");
    let script = format!(
        "trap 'echo usr1 > {u}' USR1; trap 'echo term > {t}; exit 0' TERM; echo ready > {r}; \
         while :; do sleep 0.05; done",
        u = usr1.display(),
        t = term.display(),
        r = ready.display()
    );
    let child = overdue_command(&run_sh(
        &["--if-unreachable", "run", UUID, "--url", &url],
        &script,
    ))
    .spawn()
    .unwrap();
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    wait_for_file(&ready).await;
    // SAFETY: kill(2) on the overdue process this test started.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    assert_eq!(wait_for_file(&usr1).await, "usr1\n");
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(wait_for_file(&term).await, "term\n");
    let o = tokio::time::timeout(HANG_GUARD, child.wait_with_output())
        .await
        .expect("hang guard: overdue did not exit")
        .unwrap();
    // The command handled SIGTERM and exited 0: that is its own exit code.
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}
