//! Real receivers for notifications: an HTTP server that records what it gets
//! and answers from a script, an SMTP server (aiosmtpd, in a child process),
//! and a real Alertmanager.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use tokio::task::JoinHandle;

/// Config text: a notification is tried up to 20 times, 100 ms apart at
/// first and 1 s at the most, so that it outlasts an outage.
pub const PERSISTENT_RETRIES: &str = r#"
[notifications]
max_attempts = 20
retry_base = "100ms"
retry_max = "1s"
"#;

/// How often the `wait_for` helpers look again.
const POLL: Duration = Duration::from_millis(10);

/// Polls `got` until it holds at least `n` items and returns them; after
/// the hang guard, panics with what `report` says of what did arrive.
async fn at_least<T>(
    n: usize,
    got: impl Fn() -> Vec<T>,
    report: impl Fn(&[T]) -> String,
) -> Vec<T> {
    let deadline = Instant::now() + super::HANG_GUARD;
    loop {
        let items = got();
        if items.len() >= n {
            return items;
        }
        assert!(Instant::now() < deadline, "{}", report(&items));
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------
// Webhooks

/// What [`WebhookSink`] answers to the next request.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// This status, with the body `sink answered <status>`.
    Status(u16),
    /// This status and these headers.
    StatusWithHeaders(u16, Vec<(String, String)>),
    /// Never answers (the connection stays open until the client gives up).
    Hang,
    /// Holds the request open until the test releases it (`notify_one`),
    /// then answers 200.
    Hold(Arc<tokio::sync::Notify>),
}

/// One request as [`WebhookSink`] received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub received: Instant,
    /// When it was received by the wall clock, in Unix ms: comparable with
    /// instants the server or the database (on this machine) stored.
    pub received_ms: i64,
}

impl Request {
    /// A header's value as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }
}

#[derive(Default)]
struct WebhookState {
    requests: Mutex<Vec<Request>>,
    script: Mutex<VecDeque<Behaviour>>,
}

/// An in-process HTTP server on 127.0.0.1:0 that records every request (any
/// method, any path) and answers from a script, then 200.
pub struct WebhookSink {
    addr: SocketAddr,
    state: Arc<WebhookState>,
    task: JoinHandle<()>,
}

impl WebhookSink {
    pub async fn start() -> WebhookSink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind webhook sink");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(WebhookState::default());
        let app = axum::Router::new()
            .fallback(record)
            .with_state(Arc::clone(&state));
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("webhook sink serves");
        });
        WebhookSink { addr, state, task }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Queues the answer to a coming request (first in, first used).
    pub fn push(&self, behaviour: Behaviour) {
        self.state.script.lock().unwrap().push_back(behaviour);
    }

    /// Config text for a receiver "hook" posting to this sink's `/hook`
    /// and a `[route]` sending it every alert, followed by `rest`: more keys
    /// of the route, then any other tables.
    pub fn hook_toml(&self, rest: &str) -> String {
        self.hook_route_toml("", rest)
    }

    /// Config text for a receiver "hook" posting to this sink's `/hook`,
    /// giving up on a request after `timeout`, and a `[route]` sending it
    /// every alert in a group per check, after `group_wait` and then every
    /// `group_interval`: the replicas' setup in the HA and outage tests.
    pub fn per_check_toml(&self, timeout: &str, group_wait: &str, group_interval: &str) -> String {
        self.hook_route_toml(
            &format!("timeout = \"{timeout}\"\n"),
            &format!(
                "group_by = [\"check\"]\ngroup_wait = \"{group_wait}\"\n\
                 group_interval = \"{group_interval}\"\n"
            ),
        )
    }

    /// Config text for the receiver "hook" (to this sink's `/hook`, with
    /// `receiver`: more of its keys) and a `[route]` to it followed by
    /// `rest`.
    fn hook_route_toml(&self, receiver: &str, rest: &str) -> String {
        format!(
            r#"
[[receivers]]
name = "hook"
type = "webhook"
url = "{url}"
{receiver}
[route]
receiver = "hook"
{rest}"#,
            url = self.url("/hook"),
        )
    }

    /// Everything received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests arrived; panics after the hang
    /// guard ([`super::HANG_GUARD`]) listing what did arrive.
    pub async fn wait_for(&self, n: usize) -> Vec<Request> {
        at_least(
            n,
            || self.requests(),
            |got| {
                let listed: Vec<String> = got
                    .iter()
                    .map(|r| {
                        let text = r.text();
                        let cut: String = text.chars().take(200).collect();
                        format!("  {} {} {cut}", r.method, r.path)
                    })
                    .collect();
                format!(
                    "webhook sink: expected {n} request(s), got {} before the hang guard:\n{}",
                    got.len(),
                    listed.join("\n")
                )
            },
        )
        .await
    }
}

impl Drop for WebhookSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A wall-clock instant in Unix ms (floored).
pub fn unix_ms(t: SystemTime) -> i64 {
    let since = t.duration_since(UNIX_EPOCH).expect("after 1970");
    i64::try_from(since.as_millis()).expect("in range")
}

async fn record(State(state): State<Arc<WebhookState>>, req: axum::extract::Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    state.requests.lock().unwrap().push(Request {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts.headers,
        body,
        received: Instant::now(),
        received_ms: unix_ms(SystemTime::now()),
    });
    let behaviour = state.script.lock().unwrap().pop_front();
    let (status, headers) = match behaviour {
        None => (200, Vec::new()),
        Some(Behaviour::Status(s)) => (s, Vec::new()),
        Some(Behaviour::StatusWithHeaders(s, h)) => (s, h),
        Some(Behaviour::Hang) => std::future::pending().await,
        Some(Behaviour::Hold(release)) => {
            release.notified().await;
            (200, Vec::new())
        }
    };
    let mut response = Response::new(Body::from(format!("sink answered {status}")));
    *response.status_mut() = StatusCode::from_u16(status).expect("valid status");
    for (k, v) in headers {
        response.headers_mut().insert(
            HeaderName::from_bytes(k.as_bytes()).expect("header name"),
            HeaderValue::from_str(&v).expect("header value"),
        );
    }
    response
}

// ---------------------------------------------------------------------------
// SMTP

/// The Python with aiosmtpd (Debian's python3-aiosmtpd).
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// How the SMTP sink secures connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SmtpTls {
    #[default]
    None,
    /// STARTTLS offered and required before MAIL.
    StartTls,
    /// TLS from the first byte (SMTPS).
    Implicit,
}

/// How [`SmtpSink`] behaves.
#[derive(Debug, Clone, Default)]
pub struct SmtpOptions {
    pub tls: SmtpTls,
    /// Required AUTH user and password.
    pub auth: Option<(String, String)>,
    /// Answer the DATA of the next `.1` messages with SMTP code `.0` (e.g. 451, 550).
    pub fail: Option<(u16, usize)>,
}

/// One message the SMTP sink accepted, parsed by Python's email module.
#[derive(Debug, Clone, Deserialize)]
pub struct SmtpMessage {
    pub mail_from: String,
    pub rcpt_tos: Vec<String>,
    /// The message as sent.
    pub data: String,
    /// Decoded header values by lower-case name.
    pub headers: BTreeMap<String, Vec<String>>,
    pub subject: Option<String>,
    /// The text/plain part, decoded.
    pub text: Option<String>,
    /// The text/html part, decoded.
    pub html: Option<String>,
    /// Whether the session was encrypted (STARTTLS or implicit TLS).
    pub tls: bool,
    /// The user that authenticated, if any.
    pub auth_user: Option<String>,
}

impl SmtpMessage {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .and_then(|v| v.first())
            .map(String::as_str)
    }
}

/// A real SMTP server (aiosmtpd) in a child process on a port it picks.
pub struct SmtpSink {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    ca_file: Option<PathBuf>,
}

/// Fails unless the system Python can run the sink (`peers`).
pub fn need_smtp_sink() {
    super::need(super::Peer::Aiosmtpd);
    let ok = Command::new(SYSTEM_PYTHON)
        .args(["-c", "import aiosmtpd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        super::missing(
            super::Peer::Aiosmtpd,
            &format!("aiosmtpd for {SYSTEM_PYTHON}"),
            "Debian's python3-aiosmtpd",
        );
    }
}

impl SmtpSink {
    /// Starts the sink; the test needs aiosmtpd (`peers`).
    pub fn start(options: SmtpOptions) -> SmtpSink {
        need_smtp_sink();
        let dir = tempfile::tempdir().expect("temp dir");
        let messages = dir.path().join("messages");
        std::fs::create_dir(&messages).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/smtp_sink.py");
        let mut cmd = Command::new(SYSTEM_PYTHON);
        cmd.arg(script).arg("--dir").arg(&messages);
        let mut ca_file = None;
        if options.tls != SmtpTls::None {
            let certs = TestCerts::write(dir.path());
            cmd.args([
                "--tls",
                if options.tls == SmtpTls::StartTls {
                    "starttls"
                } else {
                    "tls"
                },
            ]);
            cmd.arg("--cert")
                .arg(&certs.cert)
                .arg("--key")
                .arg(&certs.key);
            ca_file = Some(certs.ca);
        }
        if let Some((user, password)) = &options.auth {
            cmd.args(["--user", user, "--password", password]);
        }
        if let Some((code, count)) = options.fail {
            cmd.args(["--fail-code", &code.to_string()]);
            cmd.args(["--fail-count", &count.to_string()]);
        }
        let stderr_path = dir.path().join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn the SMTP sink");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(port) = line.strip_prefix("PORT ") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                }
            }
        });
        let port = match rx.recv_timeout(super::HANG_GUARD) {
            Ok(Some(port)) => port,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the SMTP sink did not print its port; its stderr:\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
        };
        SmtpSink {
            child,
            port,
            dir,
            ca_file,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Config text for a receiver "mail" that mails oncall@example.com
    /// through this sink, and a first route that sends it every alert and
    /// lets each go on to a route to the receiver "hook".
    pub fn mail_then_hook_toml(&self) -> String {
        format!(
            r#"{mail}
[[route.routes]]
receiver = "mail"
continue = true

[[route.routes]]
receiver = "hook"
"#,
            mail = self.mail_toml(),
        )
    }

    /// Config text for a receiver "mail" that mails oncall@example.com
    /// through this sink.
    pub fn mail_toml(&self) -> String {
        format!(
            r#"
[[receivers]]
name = "mail"
type = "email"
to = ["oncall@example.com"]
smtp = {{ host = "127.0.0.1", port = {}, tls = "none", from = "overdue@example.com" }}
"#,
            self.port()
        )
    }

    /// The PEM file of the CA that signed the sink's certificate (TLS modes).
    pub fn ca_file(&self) -> &Path {
        self.ca_file
            .as_deref()
            .expect("the sink was started without TLS")
    }

    /// The messages accepted so far, in arrival order.
    pub fn messages(&self) -> Vec<SmtpMessage> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path().join("messages"))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}: {text}", p.display()))
            })
            .collect()
    }

    /// Waits until at least `n` messages arrived; panics after the hang guard with
    /// what did arrive and the sink's stderr.
    pub async fn wait_for(&self, n: usize) -> Vec<SmtpMessage> {
        at_least(n, || self.messages(), |got| {
            let subjects: Vec<String> = got
                .iter()
                .map(|m| format!("  {:?} to {:?}", m.subject, m.rcpt_tos))
                .collect();
            format!(
                "SMTP sink: expected {n} message(s) before the hang guard, got {}:\n{}\nstderr:\n{}",
                got.len(),
                subjects.join("\n"),
                self.stderr()
            )
        })
        .await
    }

    /// What the sink logged.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private CA and a server certificate it signed for 127.0.0.1 and
/// localhost, as PEM files.
pub struct TestCerts {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCerts {
    pub fn write(dir: &Path) -> TestCerts {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "overdue test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "overdue test server");
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
        let certs = TestCerts {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        std::fs::write(&certs.ca, ca_cert.pem()).unwrap();
        std::fs::write(&certs.cert, cert.pem()).unwrap();
        std::fs::write(&certs.key, key.serialize_pem()).unwrap();
        certs
    }
}

// ---------------------------------------------------------------------------
// Alertmanager

/// A real Alertmanager on a loopback port it picks (read from its log).
pub struct Alertmanager {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Alertmanager {
    /// The Alertmanager binary: Debian's, else `alertmanager` on PATH.
    pub fn binary() -> Option<PathBuf> {
        let debian = PathBuf::from("/usr/bin/prometheus-alertmanager");
        if debian.is_file() {
            return Some(debian);
        }
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("alertmanager"))
                .find(|p| p.is_file())
        })
    }

    /// Starts it and waits for `/-/ready`; the test needs Alertmanager (`peers`).
    pub async fn start() -> Alertmanager {
        Self::start_with("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n").await
    }

    /// Starts it with this configuration (YAML).
    pub async fn start_with(yaml: &str) -> Alertmanager {
        super::need(super::Peer::Alertmanager);
        let Some(binary) = Self::binary() else {
            super::missing(
                super::Peer::Alertmanager,
                "prometheus-alertmanager (or alertmanager on PATH)",
                "Debian's prometheus-alertmanager",
            );
        };
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(&config, yaml).unwrap();
        let mut child = Command::new(binary)
            .arg("--web.listen-address=127.0.0.1:0")
            .arg("--cluster.listen-address=")
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--config.file={}", config.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn alertmanager");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log_writer = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent && line.contains("msg=\"Listening on\"") {
                    if let Some(addr) = line.split("address=").nth(1) {
                        let _ = tx.send(addr.split_whitespace().next().unwrap_or("").to_string());
                        sent = true;
                    }
                }
                // Keep draining so the child never blocks on a full pipe.
                log_writer.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(super::HANG_GUARD) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "alertmanager did not log its address:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        let am = Alertmanager {
            child,
            base: format!("http://{addr}"),
            log,
            _dir: dir,
        };
        am.wait_ready().await;
        am
    }

    /// The port is bound already; this waits for Alertmanager to load its
    /// configuration and state.
    async fn wait_ready(&self) {
        let client = super::client();
        let deadline = Instant::now() + super::HANG_GUARD;
        while Instant::now() < deadline {
            if let Ok(r) = client.get(format!("{}/-/ready", self.base)).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("alertmanager did not become ready:\n{}", self.log());
    }

    /// `GET /api/v2/alerts` with this query (e.g. `active=true`).
    pub async fn alerts(&self, query: &str) -> Vec<serde_json::Value> {
        let r = super::client()
            .get(format!("{}/api/v2/alerts?{query}", self.base))
            .send()
            .await
            .expect("GET /api/v2/alerts");
        assert_eq!(r.status(), 200, "GET /api/v2/alerts");
        r.json().await.expect("alerts JSON")
    }

    /// What Alertmanager logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Announcements

/// (check, incident start, status) of every alert in every distinct
/// notification (by `Idempotency-Key`), with the keys of the notifications
/// that listed it.
pub fn announcements(requests: &[Request]) -> BTreeMap<(String, String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for r in requests {
        let key = r.header("idempotency-key").unwrap().to_string();
        let body = r.json();
        for a in body["alerts"].as_array().unwrap() {
            out.entry((
                a["labels"]["check"].as_str().unwrap().to_string(),
                a["startsAt"].as_str().unwrap().to_string(),
                a["status"].as_str().unwrap().to_string(),
            ))
            .or_default()
            .insert(key.clone());
        }
    }
    out
}

/// The checks whose alerts in `body` (a notification's webhook payload) are
/// in `status`, in the order it lists them.
pub fn alert_checks(body: &serde_json::Value, status: &str) -> Vec<String> {
    body["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == status)
        .map(|a| a["labels"]["check"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until `hook` has heard `n` distinct announcements (incidents) of
/// `check` going `status`.
pub async fn wait_announced(hook: &WebhookSink, check: &str, status: &str, n: usize) {
    let start = Instant::now();
    loop {
        let got = announcements(&hook.requests())
            .keys()
            .filter(|(c, _, s)| c == check && s == status)
            .count();
        if got >= n {
            return;
        }
        assert!(
            start.elapsed() < super::HANG_GUARD,
            "{check}: {n} {status} announcement(s) expected, {got} seen before the hang guard"
        );
        tokio::time::sleep(POLL).await;
    }
}
