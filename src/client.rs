//! The command line's HTTP client: `overdue ping`, `overdue run` and
//! `overdue checks`, talking to a running server.
//!
//! `ping` and `run` are made for cron lines: short timeouts, a few retries,
//! and `run` never changes its command's exit code nor holds the command up
//! for more than a few seconds when the server cannot be reached.

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use regex::Regex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uuid::Uuid;

/// The server a UUID or the `checks` commands talk to, when not given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// What a ping reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingKind {
    Success,
    Start,
    Fail,
    Log,
    Exit(u8),
}

impl PingKind {
    fn suffix(self) -> String {
        match self {
            PingKind::Success => String::new(),
            PingKind::Start => "/start".into(),
            PingKind::Fail => "/fail".into(),
            PingKind::Log => "/log".into(),
            PingKind::Exit(code) => format!("/{code}"),
        }
    }
}

/// How hard to try to deliver one ping.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Each attempt's own limit.
    pub timeout: Duration,
    /// Attempts after the first.
    pub retries: u32,
    /// The limit for all attempts together.
    pub total: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            timeout: Duration::from_secs(5),
            retries: 2,
            total: Duration::from_secs(10),
        }
    }
}

/// One ping to send.
#[derive(Debug, Clone)]
pub struct Ping {
    pub kind: PingKind,
    pub items: Option<u64>,
    pub rid: Option<Uuid>,
    pub body: Vec<u8>,
}

/// The ping URL of a target: a full ping URL (its path is extended) or a
/// check UUID on the server at `server`.
pub fn ping_url(target: &str, server: &str, ping: &Ping) -> Result<String, String> {
    let base = if target.starts_with("http://") || target.starts_with("https://") {
        target.to_string()
    } else if let Ok(uuid) = Uuid::parse_str(target) {
        format!("{}/ping/{uuid}", server.trim_end_matches('/'))
    } else {
        return Err(format!(
            "{target:?} is neither a ping URL (http://…/ping/…) nor a check UUID"
        ));
    };
    let (path, query) = match base.split_once('?') {
        Some((p, q)) => (p.trim_end_matches('/').to_string(), Some(q.to_string())),
        None => (base.trim_end_matches('/').to_string(), None),
    };
    let mut params: Vec<String> = query.into_iter().filter(|q| !q.is_empty()).collect();
    if let Some(items) = ping.items {
        params.push(format!("items={items}"));
    }
    if let Some(rid) = ping.rid {
        params.push(format!("rid={rid}"));
    }
    let mut url = format!("{path}{}", ping.kind.suffix());
    if !params.is_empty() {
        url.push('?');
        url.push_str(&params.join("&"));
    }
    Ok(url)
}

/// One HTTP client for the command's lifetime, ignoring proxy variables for
/// loopback and honouring them otherwise (reqwest's default).
pub fn http(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(3)))
        .user_agent(concat!("overdue/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Sends a ping with retries; `Ok` with the server's answer on 2xx.
pub async fn send(
    client: &reqwest::Client,
    url: &str,
    ping: &Ping,
    retry: Retry,
) -> Result<String, String> {
    let attempt = async {
        let mut last = String::new();
        for n in 0..=retry.retries {
            if n > 0 {
                tokio::time::sleep(Duration::from_millis(300 * u64::from(n))).await;
            }
            let r = client
                .post(url)
                .timeout(retry.timeout)
                .body(ping.body.clone())
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => return Ok(r.text().await.unwrap_or_default()),
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    last = format!("{status}: {}", text.trim());
                    // The server understood and refused: retrying cannot help.
                    if status.is_client_error() && status.as_u16() != 429 {
                        return Err(last);
                    }
                }
                Err(e) => last = without_url(e),
            }
        }
        Err(last)
    };
    match tokio::time::timeout(retry.total, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "gave up after {}",
            humantime::format_duration(retry.total)
        )),
    }
}

fn without_url(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(&e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {detail}")
    }
}

/// Keeps the last `cap` bytes written to it.
#[derive(Debug)]
pub struct Tail {
    cap: usize,
    buf: std::collections::VecDeque<u8>,
}

impl Tail {
    /// An empty tail holding at most `cap` bytes.
    pub fn new(cap: usize) -> Tail {
        Tail {
            cap,
            buf: std::collections::VecDeque::with_capacity(cap.min(65_536)),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(bytes);
    }

    /// What is kept.
    pub fn bytes(&self) -> Vec<u8> {
        self.buf.iter().copied().collect()
    }
}

/// The item count in a line, by `re`: its first capture group, else the whole match.
pub fn items_in(re: &Regex, line: &str) -> Option<u64> {
    let caps = re.captures(line)?;
    let m = caps.get(1).or_else(|| caps.get(0))?;
    m.as_str().trim().parse().ok()
}

/// How long a start ping may still take once the command is done.
const START_GRACE: Duration = Duration::from_secs(1);

/// Options of `overdue run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Ping URL or UUID.
    pub target: String,
    pub server: String,
    pub items_from: Option<Regex>,
    /// Bytes of output kept for the body.
    pub tail: usize,
    pub retry: Retry,
}

/// Runs `command`, pinging start and then its exit status; returns the
/// command's exit code (128+N when killed by signal N; 127 when it cannot
/// be started), whatever happened to the pings.
pub async fn run(opts: &RunOptions, command: &[String]) -> i32 {
    let client = http(opts.retry.timeout);
    let rid = Uuid::new_v4();
    let start = Ping {
        kind: PingKind::Start,
        items: None,
        rid: Some(rid),
        body: Vec::new(),
    };
    let start_url = match ping_url(&opts.target, &opts.server, &start) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("overdue run: {e}; running the command without pings");
            return spawn_and_wait(command, None, opts.tail).await.code;
        }
    };
    // The start ping goes out while the command already runs.
    let start_task = {
        let client = client.clone();
        let retry = opts.retry;
        tokio::spawn(async move { send(&client, &start_url, &start, retry).await })
    };
    let began = Instant::now();
    let outcome = spawn_and_wait(command, opts.items_from.as_ref(), opts.tail).await;
    let elapsed = began.elapsed();
    // The finish ping matters more: a start still pending when the command
    // is done gets one more second, then is abandoned (it is never sent
    // after the finish).
    let mut start_task = start_task;
    match tokio::time::timeout(START_GRACE, &mut start_task).await {
        Ok(Ok(Ok(_))) => {}
        Ok(Ok(Err(e))) => eprintln!("overdue run: start ping failed: {e}"),
        Ok(Err(_)) => eprintln!("overdue run: start ping failed"),
        Err(_) => {
            start_task.abort();
            eprintln!("overdue run: start ping failed: no answer by the time the command ended");
        }
    }
    let code = outcome.code;
    let mut body = outcome.tail.bytes();
    body.extend_from_slice(
        format!(
            "\n[overdue run: exit status {code} after {:.3}s]\n",
            elapsed.as_secs_f64()
        )
        .as_bytes(),
    );
    let finish = Ping {
        kind: PingKind::Exit(u8::try_from(code).unwrap_or(1)),
        items: outcome.items,
        rid: Some(rid),
        body,
    };
    match ping_url(&opts.target, &opts.server, &finish) {
        Ok(url) => {
            if let Err(e) = send(&client, &url, &finish, opts.retry).await {
                eprintln!("overdue run: exit-status ping failed: {e}");
            }
        }
        Err(e) => eprintln!("overdue run: {e}"),
    }
    code
}

struct Outcome {
    code: i32,
    tail: Tail,
    items: Option<u64>,
}

async fn spawn_and_wait(command: &[String], items_from: Option<&Regex>, tail: usize) -> Outcome {
    let mut tail = Tail::new(tail);
    let Some((program, args)) = command.split_first() else {
        eprintln!("overdue run: no command given (overdue run URL -- CMD ARGS…)");
        return Outcome {
            code: 2,
            tail,
            items: None,
        };
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("overdue run: cannot run {program:?}: {e}\n");
            eprint!("{msg}");
            tail.push(msg.as_bytes());
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Outcome {
                code,
                tail,
                items: None,
            };
        }
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(pump(s, tokio::io::stdout(), tx.clone())));
    let err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(pump(s, tokio::io::stderr(), tx.clone())));
    drop(tx);
    let mut items = None;
    let mut partial = Vec::new();
    while let Some(chunk) = rx.recv().await {
        tail.push(&chunk);
        if let Some(re) = items_from {
            partial.extend_from_slice(&chunk);
            while let Some(i) = partial.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = partial.drain(..=i).collect();
                if let Some(n) = items_in(re, &String::from_utf8_lossy(&line)) {
                    items = Some(n);
                }
            }
            if partial.len() > 65_536 {
                partial.clear();
            }
        }
    }
    if let Some(re) = items_from {
        if let Some(n) = items_in(re, &String::from_utf8_lossy(&partial)) {
            items = Some(n);
        }
    }
    for task in [out, err].into_iter().flatten() {
        let _ = task.await;
    }
    let code = match child.wait().await {
        Ok(status) => exit_code(status),
        Err(e) => {
            eprintln!("overdue run: cannot wait for the command: {e}");
            1
        }
    };
    Outcome { code, tail, items }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    1
}

/// Copies a child's stream to ours and hands each chunk on for the tail.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
) {
    let mut buf = vec![0u8; 8192];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let _ = to.write_all(&buf[..n]).await;
                let _ = to.flush().await;
                let _ = tx.send(buf[..n].to_vec()).await;
            }
        }
    }
}

/// A call to the management API.
pub struct Api {
    client: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Api {
    /// A client of the server at `base` with this API key.
    pub fn new(base: &str, key: Option<String>) -> Api {
        Api {
            client: http(Duration::from_secs(30)),
            base: base.trim_end_matches('/').to_string(),
            key,
        }
    }

    /// Sends a request to `/api/v1{path}` and returns the JSON answer (or `null`).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<serde_json::Value, String> {
        let mut req = self
            .client
            .request(method, format!("{}/api/v1{path}", self.base));
        if let Some(k) = &self.key {
            req = req.header("X-Api-Key", k);
        }
        let r = req.send().await.map_err(without_url)?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        let json: serde_json::Value =
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        if status.is_success() {
            return Ok(json);
        }
        let message = json["error"]["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| text.trim().to_string());
        Err(format!("{status}: {message}"))
    }
}

/// The check list as a table: status, slug, name, last ping, uuid.
pub fn checks_table(list: &serde_json::Value) -> String {
    let mut rows = vec![[
        "STATUS".to_string(),
        "SLUG".to_string(),
        "NAME".to_string(),
        "LAST PING".to_string(),
        "UUID".to_string(),
    ]];
    for c in list["checks"].as_array().into_iter().flatten() {
        let s = |k: &str| c[k].as_str().unwrap_or("-").to_string();
        let mut status = s("status");
        if c["running"].as_bool() == Some(true) {
            status.push_str(" (running)");
        }
        rows.push([status, s("slug"), s("name"), s("last_ping"), s("uuid")]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Writes to stdout, ignoring a closed pipe.
pub fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping(kind: PingKind) -> Ping {
        Ping {
            kind,
            items: None,
            rid: None,
            body: Vec::new(),
        }
    }

    #[test]
    fn urls_from_uuids_and_full_urls() {
        let u = "5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0";
        assert_eq!(
            ping_url(u, "http://h:1/", &ping(PingKind::Start)).unwrap(),
            format!("http://h:1/ping/{u}/start")
        );
        let mut p = ping(PingKind::Exit(3));
        p.items = Some(12);
        assert_eq!(
            ping_url("https://x/ping/key/slug?create=1", "", &p).unwrap(),
            "https://x/ping/key/slug/3?create=1&items=12"
        );
        assert!(ping_url("not-a-uuid", "http://h", &p).is_err());
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let mut t = Tail::new(5);
        t.push(b"abc");
        t.push(b"defg");
        assert_eq!(t.bytes(), b"cdefg");
        t.push(b"0123456789");
        assert_eq!(t.bytes(), b"56789");
    }

    #[test]
    fn items_from_a_capture_group_or_the_match() {
        let re = Regex::new(r"found (\d+) new items").unwrap();
        assert_eq!(items_in(&re, "found 12 new items\n"), Some(12));
        assert_eq!(items_in(&re, "nothing"), None);
        let re = Regex::new(r"\d+").unwrap();
        assert_eq!(items_in(&re, "x 7 y"), Some(7));
    }
}
