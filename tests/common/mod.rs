//! Test harness: the real server on 127.0.0.1:0, on a fresh SQLite file or a
//! fresh PostgreSQL database (when OVERDUE_TEST_POSTGRES_URL is set).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub mod api;
pub mod gate;
pub mod history;
pub mod lease;
pub mod messages;
pub mod peers;
pub mod pg_cluster;
pub mod runs;
pub mod sinks;
pub mod stores;
pub mod waits;

#[allow(unused_imports)]
pub use peers::{missing, need, Peer};
#[allow(unused_imports)]
pub use waits::{eventually, hold, HANG_GUARD};

use overdue::config::Config;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const PING_KEY: &str = "test-ping-key";

/// Which database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs an async test body once per backend: `both_backends!(name, |backend| async move { … })`;
/// with `needs = [aiosmtpd, …]` both tests are ignored where a peer is
/// missing (`peers`), and the PostgreSQL one always needs `postgres`.
#[macro_export]
macro_rules! both_backends {
    ($name:ident, $body:expr) => {
        $crate::both_backends!($name, needs = [], $body);
    };
    ($name:ident, needs = [$($peer:ident),*], $body:expr) => {
        mod $name {
            use super::*;
            $crate::needs_peers!(
                [$($peer),*],
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let f = $body;
                    f($crate::common::Backend::Sqlite).await;
                }
            );
            $crate::needs_peers!(
                [postgres $(, $peer)*],
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    $crate::common::need_postgres();
                    let f = $body;
                    f($crate::common::Backend::Postgres).await;
                }
            );
        }
    };
}

/// A test item, ignored where one of these peers is missing: its first
/// attribute (the test's), then `#[cfg_attr(overdue_missing = "<peer>",
/// ignore = "needs …")]` per peer, with the reasons build.rs gives.
#[macro_export]
macro_rules! needs_peers {
    ([$($peer:ident),*], $($item:tt)*) => { $crate::needs_peers!(@next [$($peer),*], [], $($item)*); };
    (@next [], [$($seen:literal),*], $($item:tt)*) => { $($item)* };
    // One `ignore` at most: a peer's applies only when no peer before it is missing.
    (@with $peer:literal, $why:literal, [$($rest:ident),*], [$($seen:literal),*], #[$test:meta] $($item:tt)*) => {
        $crate::needs_peers!(
            @next [$($rest),*],
            [$($seen,)* $peer],
            #[$test]
            #[cfg_attr(
                all(overdue_missing = $peer, not(any($(overdue_missing = $seen),*))),
                ignore = $why
            )]
            $($item)*
        );
    };
    (@next [postgres $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "postgres", "needs PostgreSQL: set OVERDUE_TEST_POSTGRES_URL", [$($rest),*], $($t)*); };
    (@next [aiosmtpd $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "aiosmtpd", "needs aiosmtpd for /usr/bin/python3 (Debian's python3-aiosmtpd)", [$($rest),*], $($t)*); };
    (@next [alertmanager $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "alertmanager", "needs Alertmanager (Debian's prometheus-alertmanager)", [$($rest),*], $($t)*); };
    (@next [curl $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "curl", "needs curl", [$($rest),*], $($t)*); };
    (@next [healthchecks_io $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "healthchecks_io", "needs healthchecks-io==0.4.4 for /usr/bin/python3 (PyPI)", [$($rest),*], $($t)*); };
    (@next [faketime $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "faketime", "needs libfaketime (Debian's faketime)", [$($rest),*], $($t)*); };
    (@next [python3 $(, $rest:ident)*], $($t:tt)*) => { $crate::needs_peers!(@with "python3", "needs /usr/bin/python3 (Debian's python3)", [$($rest),*], $($t)*); };
}

/// The PostgreSQL server tests use, if any.
pub fn postgres_base_url() -> Option<String> {
    std::env::var("OVERDUE_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// Fails unless PostgreSQL tests can run: a test that needs PostgreSQL is
/// marked `#[cfg_attr(overdue_missing = "postgres", ignore = …)]`, so
/// without `OVERDUE_TEST_POSTGRES_URL` it never gets here (`peers`).
#[track_caller]
pub fn need_postgres() {
    need(Peer::Postgres);
    if postgres_base_url().is_none() {
        missing(
            Peer::Postgres,
            "OVERDUE_TEST_POSTGRES_URL",
            "a PostgreSQL server, and set OVERDUE_TEST_POSTGRES_URL",
        );
    }
}

/// Where `program` is: a path as given, or a name found on `PATH`.
pub fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|p| p.join(program))
        .find(|p| p.is_file())
}

/// Where `program` is installed; fails when it is not (`peers`).
#[track_caller]
pub fn need_program(peer: Peer, program: &str, package: &str) -> PathBuf {
    need(peer);
    find_program(program).unwrap_or_else(|| missing(peer, program, package))
}

/// A database of its own for one test; dropped (PostgreSQL) or deleted (SQLite) after.
pub struct TestDb {
    pub url: String,
    pub backend: Backend,
    pub dir: tempfile::TempDir,
    pg_name: Option<String>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        match backend {
            Backend::Sqlite => TestDb {
                url: format!("sqlite://{}", dir.path().join("overdue.db").display()),
                backend,
                dir,
                pg_name: None,
            },
            Backend::Postgres => {
                need_postgres();
                let base = postgres_base_url().expect("OVERDUE_TEST_POSTGRES_URL");
                let name = format!("overdue_t_{}", uuid::Uuid::new_v4().simple());
                let mut admin = sqlx::PgConnection::connect_lazy(&base).await;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("OVERDUE_TEST_POSTGRES_URL is set but CREATE DATABASE failed: {e}")
                    });
                TestDb {
                    url: replace_db_name(&base, &name),
                    backend,
                    dir,
                    pg_name: Some(name),
                }
            }
        }
    }

    /// Another handle on the same PostgreSQL database, for a second
    /// replica (a SQLite file takes one process): it leaves the database to
    /// this one to drop.
    pub fn alias(&self) -> TestDb {
        TestDb {
            url: self.url.clone(),
            backend: self.backend,
            dir: tempfile::tempdir().expect("temp dir"),
            pg_name: None,
        }
    }

    /// Opens a direct connection to the test database (to inject faults or inspect).
    pub async fn sql(&self, statement: &str) {
        use sqlx::Connection;
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::raw_sql(statement).execute(&mut c).await.unwrap();
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::raw_sql(statement).execute(&mut c).await.unwrap();
            }
        }
    }

    /// The number a `SELECT COUNT(*) …` on a direct connection returns.
    pub async fn count(&self, query: &str) -> i64 {
        use sqlx::Connection;
        match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query_scalar(query).fetch_one(&mut c).await.unwrap()
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query_scalar(query).fetch_one(&mut c).await.unwrap()
            }
        }
    }

    /// Makes every insert into `table` fail, as a broken database would.
    pub async fn break_inserts(&self, table: &str) {
        match self.backend {
            Backend::Sqlite => {
                self.sql(&format!(
                    "CREATE TRIGGER injected_failure_{table} BEFORE INSERT ON {table} \
                     BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
                ))
                .await
            }
            Backend::Postgres => {
                self.sql(&format!(
                    "CREATE FUNCTION injected_failure_{table}() RETURNS trigger AS $$ \
                     BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql; \
                     CREATE TRIGGER injected_failure_{table} BEFORE INSERT ON {table} \
                     FOR EACH ROW EXECUTE FUNCTION injected_failure_{table}();"
                ))
                .await
            }
        }
    }

    /// Undoes [`TestDb::break_inserts`].
    pub async fn repair_inserts(&self, table: &str) {
        match self.backend {
            Backend::Sqlite => {
                self.sql(&format!("DROP TRIGGER injected_failure_{table}"))
                    .await
            }
            Backend::Postgres => {
                self.sql(&format!(
                    "DROP TRIGGER injected_failure_{table} ON {table}; \
                     DROP FUNCTION injected_failure_{table}();"
                ))
                .await
            }
        }
    }

    /// The TOML lines that point a server at this database.
    pub fn config_toml(&self, extra: &str) -> String {
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase_url = \"{}\"\nping_key = \"{PING_KEY}\"\n{extra}\n",
            self.url
        )
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (Some(name), Some(base)) = (self.pg_name.take(), postgres_base_url()) else {
            return;
        };
        // Drop runs outside async context: use a small runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                use sqlx::Connection;
                if let Ok(mut c) = sqlx::PgConnection::connect(&base).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut c)
                        .await;
                }
            });
        })
        .join();
    }
}

trait ConnectLazy {
    async fn connect_lazy(url: &str) -> sqlx::PgConnection;
}

impl ConnectLazy for sqlx::PgConnection {
    async fn connect_lazy(url: &str) -> sqlx::PgConnection {
        use sqlx::Connection;
        sqlx::PgConnection::connect(url).await.unwrap_or_else(|e| {
            panic!("OVERDUE_TEST_POSTGRES_URL is set but PostgreSQL cannot be reached: {e}")
        })
    }
}

fn replace_db_name(url: &str, name: &str) -> String {
    let (without_query, query) = match url.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (url, None),
    };
    let scheme_end = without_query.find("://").map_or(0, |i| i + 3);
    let base = match without_query[scheme_end..].find('/') {
        Some(slash) => &without_query[..scheme_end + slash],
        None => without_query,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// The real server, in this process, on 127.0.0.1:0.
pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    pub db: TestDb,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    pub async fn start(backend: Backend, extra_toml: &str) -> TestServer {
        let db = TestDb::new(backend).await;
        Self::start_on(db, extra_toml).await
    }

    pub async fn start_on(db: TestDb, extra_toml: &str) -> TestServer {
        let config = Config::from_toml(&db.config_toml(extra_toml)).expect("test config");
        Self::start_with(db, config).await
    }

    /// Starts the server from a config file (so that it can be reloaded);
    /// the file is `config_path(&db)`.
    pub async fn start_from_file(db: TestDb, extra_toml: &str) -> TestServer {
        let path = config_path(&db);
        std::fs::write(&path, db.config_toml(extra_toml)).unwrap();
        let config = Config::load(Some(&path)).expect("test config");
        Self::start_with(db, config).await
    }

    /// Starts the server with this configuration.
    pub async fn start_with(db: TestDb, config: Config) -> TestServer {
        // `RUST_LOG=overdue=warn cargo test …` shows what the servers log.
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .try_init();
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(overdue::app::run(config, listener, shutdown.clone()));
        let mut server = TestServer {
            base,
            client: client(),
            db,
            shutdown,
            task: Some(task),
        };
        server.wait_ready().await;
        server
    }

    /// Polls /readyz: the listener is bound before the task starts, so this only
    /// waits for migrations and the check cache, never for a port.
    async fn wait_ready(&mut self) {
        let start = std::time::Instant::now();
        while start.elapsed() < HANG_GUARD {
            if self.task.as_ref().is_some_and(|t| t.is_finished()) {
                let result = self.task.take().unwrap().await;
                panic!("server stopped while starting: {result:?}");
            }
            if let Ok(r) = self.client.get(self.url("/readyz")).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("hang guard: the server did not become ready");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Creates a check through the API and returns its JSON.
    pub async fn create_check(&self, body: Value) -> Value {
        let r = self
            .client
            .post(self.url("/api/v1/checks"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "create check: {}", r.text().await.unwrap());
        r.json().await.unwrap()
    }

    /// Creates a check through the API and returns its uuid.
    pub async fn create_uuid(&self, body: Value) -> String {
        self.create_check(body).await["uuid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Creates the check `body` through the API, which must refuse it (400)
    /// naming `field`.
    pub async fn assert_create_refused(&self, body: &Value, field: &str) {
        let r = self
            .client
            .post(self.url("/api/v1/checks"))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let text = r.text().await.unwrap();
        assert!(text.contains(field), "{body}: {text}");
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET {path}");
        r.json().await.unwrap()
    }

    /// Polls `GET path` until `pred` holds for its JSON, and returns that.
    pub async fn json_until(&self, path: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let start = std::time::Instant::now();
        loop {
            let v = self.get_json(path).await;
            if pred(&v) {
                return v;
            }
            assert!(start.elapsed() < HANG_GUARD, "timed out on {path}: {v:#}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The body of `GET path`, whatever the status.
    pub async fn get_text(&self, path: &str) -> String {
        get_text(&self.client, self.url(path)).await
    }

    /// Sends a ping that must be answered 200.
    pub async fn ping_ok(&self, path: &str) {
        let (status, body) = self.ping(path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }

    /// The ping log of check `uuid` (its first page), newest first.
    pub async fn pings(&self, uuid: &str) -> Vec<Value> {
        self.get_json(&format!("/api/v1/checks/{uuid}/pings")).await["pings"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// POSTs to `path` with no body, which must be answered 200; the answer.
    pub async fn post_200(&self, path: &str) -> reqwest::Response {
        let r = self.client.post(self.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r
    }

    /// Sends a ping and returns (status, body).
    pub async fn ping(&self, path: &str) -> (u16, String) {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.text().await.unwrap())
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) -> TestDb {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(HANG_GUARD, task)
                .await
                .expect("hang guard: the server did not stop")
                .expect("server task")
                .expect("server ran without error");
        }
        let TestServer { db, .. } = self;
        db
    }
}

/// The CSRF token in a dashboard page's first form.
pub fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// The badge key of `label` (`name=value`) as the dashboard's list of
/// label badges shows it (read from loopback, with no key configured).
pub async fn label_badge_key(s: &TestServer, label: &str) -> String {
    let r = s.client.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET /");
    let html = r.text().await.unwrap();
    let start = format!("<span class=\"label\">{label}: <a href=\"/badge/");
    let at = html
        .find(&start)
        .unwrap_or_else(|| panic!("no badge of {label} in {html}"));
    html[at + start.len()..].chars().take(40).collect()
}

/// Where [`TestServer::start_from_file`] writes its config file.
pub fn config_path(db: &TestDb) -> PathBuf {
    db.dir.path().join("overdue.toml")
}

/// An HTTP client that ignores proxy settings from the environment.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(HANG_GUARD)
        .build()
        .unwrap()
}

/// A client that shows redirects instead of following them, with no cookie
/// jar, as a browser's first request would be seen.
pub fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(HANG_GUARD)
        .build()
        .unwrap()
}

/// The server as a real child process, for kill -9 tests.
pub struct ChildServer {
    pub child: Child,
    pub base: String,
    /// Every line it wrote to stderr so far.
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ChildServer {
    /// Starts `overdue serve` with this config file and waits for its
    /// "listening on" line (the port is chosen by the kernel).
    pub fn spawn(config: &Path) -> ChildServer {
        Self::spawn_with(Path::new(env!("CARGO_BIN_EXE_overdue")), config, "info")
    }

    /// Like [`ChildServer::spawn`], with `RUST_LOG` set to `filter`.
    pub fn spawn_logging(config: &Path, filter: &str) -> ChildServer {
        Self::spawn_with(Path::new(env!("CARGO_BIN_EXE_overdue")), config, filter)
    }

    /// [`ChildServer::spawn`] with another build of the binary (e.g.
    /// [`release_binary`]).
    pub fn spawn_binary(binary: &Path, config: &Path) -> ChildServer {
        Self::spawn_with(binary, config, "info")
    }

    /// Like [`ChildServer::spawn`], with these environment variables added
    /// (e.g. `LD_PRELOAD` for libfaketime).
    pub fn spawn_env(config: &Path, env: &[(&str, &std::ffi::OsStr)]) -> ChildServer {
        Self::spawn_full(
            Path::new(env!("CARGO_BIN_EXE_overdue")),
            config,
            "info",
            env,
        )
    }

    /// `overdue serve` under libfaketime, its wall clock offset by what
    /// `offset` holds (read at every call, not once a second); the
    /// monotonic clock is left alone, as an NTP or operator step leaves it.
    /// The test needs libfaketime (`peers`).
    pub fn spawn_faked(config: &Path, offset: &Path) -> ChildServer {
        let library = peers::libfaketime();
        Self::spawn_env(
            config,
            &[
                ("LD_PRELOAD", library.as_os_str()),
                ("FAKETIME_TIMESTAMP_FILE", offset.as_os_str()),
                ("FAKETIME_NO_CACHE", "1".as_ref()),
                ("DONT_FAKE_MONOTONIC", "1".as_ref()),
            ],
        )
    }

    fn spawn_with(binary: &Path, config: &Path, filter: &str) -> ChildServer {
        Self::spawn_full(binary, config, filter, &[])
    }

    fn spawn_full(
        binary: &Path,
        config: &Path,
        filter: &str,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> ChildServer {
        let mut child = Command::new(binary)
            .arg("--config")
            .arg(config)
            .arg("serve")
            .env("RUST_LOG", filter)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn overdue");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent {
                    if let Some(i) = line.find("overdue listening on http://") {
                        // Text lines end with the URL; JSON lines close a string after it.
                        let rest = &line[i + "overdue listening on ".len()..];
                        let url = rest.split(['"', ' ']).next().unwrap_or("").to_string();
                        let _ = tx.send(url);
                        sent = true;
                    }
                }
                // Keep draining so the child never blocks on a full pipe.
                kept.lock().unwrap().push(line);
            }
        });
        let base = rx
            .recv_timeout(HANG_GUARD)
            .expect("overdue printed its address");
        ChildServer { child, base, lines }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until it has logged a line containing `text`.
    pub async fn wait_log(&self, text: &str) {
        self.wait_log_after(0, text).await;
    }

    /// Waits until it has logged a line containing `text` after the first
    /// `mark` bytes of its log.
    pub async fn wait_log_after(&self, mark: usize, text: &str) {
        let start = std::time::Instant::now();
        while !self.log().get(mark..).is_some_and(|l| l.contains(text)) {
            assert!(
                start.elapsed() < HANG_GUARD,
                "no {text:?} before the hang guard:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its replica id, from its "replica started" line.
    pub fn replica(&self) -> String {
        let log = self.log();
        let line = log
            .lines()
            .find(|l| l.contains("replica started"))
            .expect("a replica started line");
        let at = line.find("replica=").expect("replica= field") + "replica=".len();
        line[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .trim_matches('"')
            .to_string()
    }

    /// Sends a signal (e.g. "STOP", "CONT", "TERM") to the process.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill(1)")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    pub fn kill9(mut self) {
        self.halt();
    }

    /// Kills it (SIGKILL) and waits until it is gone, keeping its log: after
    /// this it can send nothing more, which is how a test shows that
    /// nothing late or repeated was sent, without waiting a while.
    pub fn halt(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary fault-injection tests run: the one named by
/// `OVERDUE_TEST_RELEASE_BIN` (a `cargo build --release` binary, to crash
/// the build users run), else this test build's debug binary (as in CI).
pub fn release_binary() -> PathBuf {
    match std::env::var_os("OVERDUE_TEST_RELEASE_BIN").filter(|s| !s.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "OVERDUE_TEST_RELEASE_BIN={} is not a file",
                path.display()
            );
            path
        }
        None => PathBuf::from(env!("CARGO_BIN_EXE_overdue")),
    }
}

/// Writes a config file into `dir` and returns its path.
pub fn write_config(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("overdue.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// Creates the check "daily" (every default: a daily interval), stores one
/// success ping for it at `now` and folds it: the check's id and what the
/// fold touched.
pub async fn daily_check_pinged(
    store: &std::sync::Arc<dyn overdue::store::Store>,
    now: i64,
) -> (i64, Vec<overdue::store::Touched>) {
    use overdue::domain::check::CheckSpec;
    use overdue::domain::fold::Ping;
    use overdue::domain::ping::PingKind;
    use overdue::store::CheckSource;

    let check = store
        .create_check(&CheckSpec::with_slug("daily"), CheckSource::Api, now)
        .await
        .unwrap();
    store
        .append_pings(&[Ping::new(check.id, now, PingKind::Success)])
        .await
        .unwrap();
    let touched = store.fold(100).await.unwrap().touched;
    (check.id, touched)
}

/// Folds until the inbox is empty and every round is written (SQLite writes
/// summaries and the ping index in rounds), then writes what is kept in
/// memory.
pub async fn fold_all(store: &std::sync::Arc<dyn overdue::store::Store>) {
    loop {
        let f = store.fold(100_000).await.unwrap();
        if !f.more && !f.writing {
            break;
        }
    }
    store.flush_folds().await.unwrap();
}

/// Creates a check through the API at `base` (a replica's address) and
/// returns its uuid; anything but `201` fails the test.
pub async fn create_on(http: &reqwest::Client, base: &str, body: Value) -> String {
    let r = http
        .post(format!("{base}/api/v1/checks"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    r.json::<Value>().await.unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Polls `/api/v1/notifications{query}` until `pred` holds for the list.
pub async fn notifications_until(
    server: &TestServer,
    query: &str,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let start = std::time::Instant::now();
    loop {
        let v = server
            .get_json(&format!("/api/v1/notifications{query}"))
            .await;
        let list = v["notifications"].as_array().unwrap().clone();
        if pred(&list) {
            return list;
        }
        assert!(
            start.elapsed() < HANG_GUARD,
            "hang guard: notifications{query}: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every `items` in a check's ping log, through the API, page by page;
/// fails when one is stored twice.
pub async fn ping_items(
    http: &reqwest::Client,
    base: &str,
    uuid: &str,
) -> std::collections::HashSet<u64> {
    let mut out = std::collections::HashSet::new();
    let mut before: Option<i64> = None;
    loop {
        let mut url = format!("{base}/api/v1/checks/{uuid}/pings?limit=1000");
        if let Some(b) = before {
            url.push_str(&format!("&before={b}"));
        }
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "GET {url}");
        let page: Value = r.json().await.unwrap();
        for p in page["pings"].as_array().unwrap() {
            // Pings without items (a probe's) are left out.
            if let Some(i) = p["items"].as_u64() {
                assert!(out.insert(i), "items={i} stored twice for {uuid}");
            }
        }
        match page["next_before"].as_i64() {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    out
}

/// The body of a GET of `url`, whatever the status.
pub async fn get_text(http: &reqwest::Client, url: impl reqwest::IntoUrl) -> String {
    let r = http.get(url).send().await.unwrap();
    r.text().await.unwrap()
}

/// A GET (a ping, say) that must be answered 200.
pub async fn get_200(http: &reqwest::Client, url: &str) {
    let r = http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200, "GET {url}");
}

/// An instant the API gave (RFC 3339), in UTC; fails naming the value when
/// it is not one.
pub fn instant(v: &Value) -> chrono::DateTime<chrono::Utc> {
    let text = v.as_str().unwrap_or_else(|| panic!("not an instant: {v}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("not an instant: {v}: {e}"))
        .to_utc()
}
