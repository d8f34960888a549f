//! The command line's HTTP client: `overdue ping`, `overdue run` and
//! `overdue checks`, talking to a running server.
//!
//! `ping` and `run` are made for cron lines: short timeouts, a few retries,
//! and `run` never changes its command's exit code nor holds the command up
//! for more than a few seconds when the server cannot be reached.

use std::io::Write as _;
use std::time::Duration;

use uuid::Uuid;

pub mod attempts; // `overdue run --retries`: which failures are retried, backoff with full jitter
pub mod guard; // the job guard's calls (due, lock, renew, unlock, skip) and their rules
pub mod process; // the command `overdue run` wraps: output, timeout, stop, signals, parent death
pub mod run; // `overdue run`: the guard, the command and its pings, in order
pub mod watcher; // kills the command's process group when `overdue run` dies (hidden `__watch-group`)

pub use process::{items_in, Tail};
pub use run::{run, RunOptions};

/// The server a UUID or the `checks` commands talk to, when not given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// What a ping reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingKind {
    Success,
    Start,
    Fail,
    Log,
    Exit(u8),
    /// A run that was not started, and why (SPEC §13).
    Skip(String),
    /// Not a ping: silence the check's alerts for this long (SPEC §4).
    Snooze(Duration),
}

impl PingKind {
    fn suffix(&self) -> String {
        match self {
            PingKind::Success => String::new(),
            PingKind::Start => "/start".into(),
            PingKind::Fail => "/fail".into(),
            PingKind::Log => "/log".into(),
            PingKind::Exit(code) => format!("/{code}"),
            PingKind::Skip(_) => "/skip".into(),
            PingKind::Snooze(_) => "/snooze".into(),
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
    /// The slot the ping is for (RFC 3339), as the server named it.
    pub slot: Option<String>,
    /// A failure that will be retried (`?retry=1`): no status change.
    pub retry: bool,
}

impl Ping {
    /// A ping of `kind` with nothing else.
    pub fn of(kind: PingKind) -> Ping {
        Ping {
            kind,
            items: None,
            rid: None,
            body: Vec::new(),
            slot: None,
            retry: false,
        }
    }
}

/// The ping URL of a target: a full ping URL (its path is extended) or a
/// check UUID on the server at `server`.
pub fn ping_url(target: &str, server: &str, ping: &Ping) -> Result<String, String> {
    let mut params: Vec<(&str, String)> = Vec::new();
    if let Some(items) = ping.items {
        params.push(("items", items.to_string()));
    }
    if let Some(rid) = ping.rid {
        params.push(("rid", rid.to_string()));
    }
    if let Some(slot) = &ping.slot {
        params.push(("slot", slot.clone()));
    }
    if ping.retry {
        params.push(("retry", "1".to_string()));
    }
    match &ping.kind {
        PingKind::Skip(reason) => params.push(("reason", reason.clone())),
        PingKind::Snooze(d) => params.push(("for", humantime::format_duration(*d).to_string())),
        _ => {}
    }
    endpoint_url(target, server, &ping.kind.suffix(), &params)
}

/// A target's ping URL with `suffix` added to its path and `params` to its
/// query (after the query the URL already has, which is kept as written).
fn endpoint_url(
    target: &str,
    server: &str,
    suffix: &str,
    params: &[(&str, String)],
) -> Result<String, String> {
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
        Some((p, q)) => (p.trim_end_matches('/'), q),
        None => (base.trim_end_matches('/'), ""),
    };
    let mut query = query.to_string();
    if !params.is_empty() {
        let added = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        if !query.is_empty() {
            query.push('&');
        }
        query.push_str(&added);
    }
    let mut url = format!("{path}{suffix}");
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query);
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
    match exchange(client, reqwest::Method::POST, url, &ping.body, retry).await? {
        (status, text) if status.is_success() => Ok(text),
        (status, text) => Err(format!("{status}: {}", text.trim())),
    }
}

/// One request with retries: the server's answer when it gave one that
/// retrying cannot change (2xx, or a 4xx other than 429), else why not: it
/// could not be reached, did not answer in time, or kept failing (5xx, 429).
async fn exchange(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: &[u8],
    retry: Retry,
) -> Result<(reqwest::StatusCode, String), String> {
    let attempt = async {
        let mut last = String::new();
        for n in 0..=retry.retries {
            if n > 0 {
                tokio::time::sleep(Duration::from_millis(300 * u64::from(n))).await;
            }
            let r = client
                .request(method.clone(), url)
                .timeout(retry.timeout)
                .body(body.to_vec())
                .send()
                .await;
            match r {
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    // The server understood: retrying cannot help.
                    if status.is_success() || (status.is_client_error() && status.as_u16() != 429) {
                        return Ok((status, text));
                    }
                    last = format!("{status}: {}", text.trim());
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

/// What `overdue ping --snooze` prints of the server's answer: what is
/// silenced, until when, and the silence's id (to delete it early).
pub fn snoozed(answer: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(answer) else {
        return format!("{}\n", answer.trim());
    };
    let text = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    let matchers: Vec<&str> = v["matchers"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m.as_str()).collect())
        .unwrap_or_default();
    format!(
        "snoozed {} until {} (silence {})\n",
        matchers.join(", "),
        text("ends_at"),
        text("silence")
    )
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
        Ping::of(kind)
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
    fn a_snooze_asks_for_its_length_and_says_until_when() {
        let u = "0b8e6a4e-51f4-4d7c-9d2d-2a1a3f6c7e11";
        let p = ping(PingKind::Snooze(Duration::from_secs(5400)));
        assert_eq!(
            ping_url(u, "http://h:1", &p).unwrap(),
            format!("http://h:1/ping/{u}/snooze?for=1h+30m")
        );
        assert_eq!(
            ping_url("https://x/ping/key/slug", "", &p).unwrap(),
            "https://x/ping/key/slug/snooze?for=1h+30m"
        );
        let answer = r#"{"silence":"snooze-x","matchers":["check=\"slug\""],"ends_at":"2026-01-01T02:00:00.000Z"}"#;
        assert_eq!(
            snoozed(answer),
            "snoozed check=\"slug\" until 2026-01-01T02:00:00.000Z (silence snooze-x)\n"
        );
        assert_eq!(snoozed("OK"), "OK\n");
    }

    #[test]
    fn a_skip_carries_its_reason_encoded_in_both_url_forms() {
        let u = "5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0";
        let p = ping(PingKind::Skip(
            "locked by h:1 until 2026-01-01T00:00:00Z & more".into(),
        ));
        assert_eq!(
            ping_url(u, "http://h:1", &p).unwrap(),
            format!(
                "http://h:1/ping/{u}/skip?reason=locked+by+h%3A1+until+2026-01-01T00%3A00%3A00Z+%26+more"
            )
        );
        // The suffix goes before a query the URL already has, which is kept.
        assert_eq!(
            ping_url(
                "https://x/ping/key/slug/?create=1",
                "",
                &ping(PingKind::Skip("quiet hours".into()))
            )
            .unwrap(),
            "https://x/ping/key/slug/skip?create=1&reason=quiet+hours"
        );
    }

    #[tokio::test]
    async fn an_unreachable_server_is_an_error_not_an_answer() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let retry = Retry {
            timeout: Duration::from_secs(1),
            retries: 1,
            total: Duration::from_secs(3),
        };
        let r = exchange(
            &http(retry.timeout),
            reqwest::Method::GET,
            &format!("http://127.0.0.1:{port}/ping/x/due"),
            b"",
            retry,
        )
        .await;
        let e = r.unwrap_err();
        assert!(e.contains("cannot connect"), "{e}");
    }
}
