//! The job guard's calls (SPEC §13): is the check's slot due, take, renew and
//! release a lock seat, record a skip. And the rules for them: what a skip
//! says, how often a seat is renewed, when a lock counts as lost.
//!
//! Expiry is the server's business: the client never compares the lock's
//! `expires` with its own clock (the two clocks differ). It renews at a third
//! of the TTL the server applied, timed on tokio's monotonic clock from the
//! moment the request was sent, and counts the lock lost only when the server
//! says so (`409`); a renewal that cannot reach the server is tried again.

use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{endpoint_url, exchange, ping_url, send, Ping, PingKind, Retry};

/// The shortest renewal interval, whatever TTL the server gave.
const RENEW_FLOOR: Duration = Duration::from_millis(250);
/// The longest wait before a failed renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_secs(2);
/// The TTL assumed when an answer does not say (the smallest the server takes).
const TTL_FALLBACK: Duration = Duration::from_secs(1);

/// What to do when the lock is lost while the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LockLost {
    /// Stop the command and report a failure.
    Kill,
    /// Say so and let it finish.
    Warn,
}

/// What to do when the server cannot answer `due` or `lock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IfUnreachable {
    /// Run the command without the guard.
    Run,
    /// Do not run it; exit 0.
    Skip,
}

impl IfUnreachable {
    /// `skip` when `--once` or `--lock` guards the run: with `run`, a job line
    /// on every host would run everywhere while the server is away.
    pub fn default_for(once: bool, lock: bool) -> IfUnreachable {
        if once || lock {
            IfUnreachable::Skip
        } else {
            IfUnreachable::Run
        }
    }
}

/// `--lock` and its options.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// The TTL asked for; none: the check's `max_runtime`.
    pub ttl: Option<Duration>,
    pub lost: LockLost,
    pub holder: String,
}

/// Which slots a run does (SPEC §14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// `--catch-up latest`: the newest due slot only; older open slots stay
    /// recorded as missed or failed.
    Latest,
    /// `--catch-up each`: every open slot in the window, oldest first, at
    /// most `limit`, each with its own key.
    Each { window: Duration, limit: u32 },
    /// `--slot T`: that slot, by hand; a done one only with `force`.
    Slot { at: String, force: bool },
}

/// The guard's flags of `overdue run`.
#[derive(Debug, Clone)]
pub struct GuardOptions {
    pub once: bool,
    pub lock: Option<LockOptions>,
    pub if_unreachable: IfUnreachable,
    pub pick: Pick,
}

impl GuardOptions {
    /// No guard: plain `overdue run`.
    pub fn none() -> GuardOptions {
        GuardOptions {
            once: false,
            lock: None,
            if_unreachable: IfUnreachable::Run,
            pick: Pick::Latest,
        }
    }

    /// Whether the server is asked anything before the command runs.
    pub fn guarded(&self) -> bool {
        self.once || self.lock.is_some()
    }
}

/// `<hostname>:<pid>`, the holder name when none is given.
pub fn default_holder() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `len` bytes into the buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let host = if host.is_empty() { "unknown" } else { &host };
    format!("{host}:{}", std::process::id())
}

/// A call to one of the guard's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call<'a> {
    /// `GET …/due`, for the slots `Pick` wants.
    Due(&'a Pick),
    /// `POST …/lock`: take a seat (its `nonce` makes a retried acquire
    /// get back the seat its first attempt took), or renew the seat of `token`.
    Lock {
        holder: &'a str,
        ttl: Option<Duration>,
        token: Option<i64>,
        nonce: Option<&'a str>,
    },
    /// `POST …/unlock`
    Unlock { token: i64 },
}

/// The URL of a guard call on a target (a ping URL or a UUID on `server`).
pub fn call_url(target: &str, server: &str, call: &Call) -> Result<String, String> {
    match call {
        Call::Due(pick) => {
            let params = match pick {
                Pick::Latest => Vec::new(),
                Pick::Each { window, limit } => vec![
                    ("catch_up", "each".to_string()),
                    ("window", format!("{}ms", window.as_millis())),
                    ("limit", limit.to_string()),
                ],
                Pick::Slot { at, .. } => vec![("slot", at.clone())],
            };
            endpoint_url(target, server, "/due", &params)
        }
        Call::Lock {
            holder,
            ttl,
            token,
            nonce,
        } => {
            let mut params = vec![("holder", holder.to_string())];
            if let Some(ttl) = ttl {
                // Milliseconds: exact, and a humantime duration the server reads.
                params.push(("ttl", format!("{}ms", ttl.as_millis())));
            }
            if let Some(token) = token {
                params.push(("token", token.to_string()));
            }
            if let Some(nonce) = nonce {
                params.push(("nonce", nonce.to_string()));
            }
            endpoint_url(target, server, "/lock", &params)
        }
        Call::Unlock { token } => {
            endpoint_url(target, server, "/unlock", &[("token", token.to_string())])
        }
    }
}

/// The skip reason of a lock held elsewhere.
pub fn locked_reason(holder: &str, expires: &str) -> String {
    format!("locked by {holder} until {expires}")
}

/// The skip reason of a slot that is not due.
pub fn not_due_reason(reason: &str, slot: Option<&str>) -> String {
    match (reason, slot) {
        ("done", Some(slot)) => format!("already done for slot {slot}"),
        ("done", None) => "already done for this slot".to_string(),
        ("quiet", _) => "quiet hours".to_string(),
        (other, _) => format!("not due ({other})"),
    }
}

/// How long after a successful renewal (or the acquiring) the next one is due.
pub fn renew_interval(ttl: Duration) -> Duration {
    (ttl / 3).max(RENEW_FLOOR)
}

/// How long after a renewal that did not reach the server it is tried again.
pub fn renew_retry(interval: Duration) -> Duration {
    interval.min(RENEW_RETRY)
}

/// Why `due` or `lock` gave no answer to go by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// The server could not be reached, did not answer in time, kept
    /// failing (5xx, 429) or answered outside the contract: `--if-unreachable`
    /// decides.
    Unreachable(String),
    /// The server answered with a refusal (a 4xx: an unknown check, a bad
    /// request): the invocation itself is wrong, and no retry or later run
    /// would change that.
    Refused(String),
}

/// A 4xx answer as the user reads it: the status and the server's message.
fn refusal(status: reqwest::StatusCode, text: &str) -> Unanswered {
    let message = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| text.trim().to_string());
    Unanswered::Refused(format!("{status}: {message}"))
}

/// A non-2xx answer to `due` or `lock` that the caller has no meaning for.
fn unanswered(status: reqwest::StatusCode, text: &str) -> Unanswered {
    // 409 and 423 are the lock's own answers, 429 is "try later".
    if status.is_client_error() && ![409, 423, 429].contains(&status.as_u16()) {
        refusal(status, text)
    } else {
        Unanswered::Unreachable(format!("{status}: {}", text.trim()))
    }
}

/// The slot a run is for, as the server named it (SPEC §14): the command
/// gets both as `OVERDUE_SLOT` and `OVERDUE_SLOT_KEY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The slot's start, RFC 3339 UTC.
    pub start: String,
    /// `<slug or unique key>@<start>`: the idempotency key.
    pub key: String,
}

/// The server's answer to `due`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Due: run it, once per slot listed, oldest first (one run without a
    /// slot when the check has none yet).
    Yes(Vec<Slot>),
    /// Not due, with the skip reason.
    No(String),
}

/// A seat taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub token: i64,
    /// The TTL the server applied.
    pub ttl: Duration,
    /// When the request that took it was sent: the TTL runs from no earlier.
    pub since: Instant,
}

/// The answer to taking a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    Acquired(Seat),
    /// Every seat is held; the skip reason.
    Held(String),
}

/// The result of one renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// With the TTL the server applied.
    Renewed(Duration),
    /// The server says the token no longer holds a seat.
    Lost(String),
    /// The server could not be reached or did not say; try again.
    Failed(String),
}

#[derive(Deserialize)]
struct DueAnswer {
    due: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    slot: Option<String>,
    #[serde(default)]
    slot_key: Option<String>,
    /// `catch_up=each`: the open slots, oldest first.
    #[serde(default)]
    open: Option<Vec<OpenSlot>>,
}

#[derive(Deserialize)]
struct OpenSlot {
    slot: String,
    key: String,
}

impl DueAnswer {
    fn slot(&self) -> Option<Slot> {
        Some(Slot {
            start: self.slot.clone()?,
            key: self.slot_key.clone()?,
        })
    }

    /// The slots to run, oldest first.
    fn slots(&self) -> Vec<Slot> {
        match &self.open {
            Some(open) if !open.is_empty() => open
                .iter()
                .map(|o| Slot {
                    start: o.slot.clone(),
                    key: o.key.clone(),
                })
                .collect(),
            _ => self.slot().into_iter().collect(),
        }
    }
}

#[derive(Deserialize)]
struct LockAnswer {
    #[serde(default)]
    acquired: bool,
    #[serde(default)]
    token: Option<i64>,
    #[serde(default)]
    holder: Option<String>,
    #[serde(default)]
    expires: Option<String>,
    #[serde(default)]
    ttl_ms: Option<u64>,
}

/// A seat from a `200` answer to `lock`; `asked` is the TTL asked for.
fn seat_of(text: &str, asked: Option<Duration>, since: Instant) -> Result<Seat, String> {
    let answer: LockAnswer =
        serde_json::from_str(text).map_err(|e| format!("unexpected answer to lock ({e})"))?;
    match (answer.acquired, answer.token) {
        (true, Some(token)) => Ok(Seat {
            token,
            ttl: answer
                .ttl_ms
                .map(Duration::from_millis)
                .or(asked)
                .unwrap_or(TTL_FALLBACK),
            since,
        }),
        _ => Err(format!("unexpected answer to lock: {}", text.trim())),
    }
}

/// A check's guard on the server: the calls `overdue run` makes.
#[derive(Debug, Clone)]
pub struct Guard {
    pub client: reqwest::Client,
    pub target: String,
    pub server: String,
    /// For `due`, `lock`, `unlock` and skips.
    pub retry: Retry,
}

impl Guard {
    fn url(&self, call: &Call) -> Result<String, String> {
        call_url(&self.target, &self.server, call)
    }

    /// Asks whether the check's slot is due. `Err` when the server cannot
    /// answer, or refuses (an unknown check).
    pub async fn due(&self, pick: &Pick) -> Result<Due, Unanswered> {
        let answer = self.ask_due(pick, self.retry).await?;
        if let Pick::Slot { at, force } = pick {
            if !answer.due && !force {
                let why = match answer.reason.as_deref() {
                    Some("quiet") => "is quiet (outside the check's active hours)",
                    _ => "is done",
                };
                return Err(Unanswered::Refused(format!(
                    "the slot {at} {why}; give --force to run it anyway"
                )));
            }
            return Ok(Due::Yes(answer.slot().into_iter().collect()));
        }
        if answer.due {
            return Ok(Due::Yes(answer.slots()));
        }
        let reason = answer.reason.as_deref().unwrap_or("done");
        Ok(Due::No(not_due_reason(reason, answer.slot.as_deref())))
    }

    /// The current slot, whether due or not, trying as `retry` says: what a
    /// run without `--once` is for.
    pub async fn current_slot(&self, retry: Retry) -> Result<Option<Slot>, Unanswered> {
        Ok(self.ask_due(&Pick::Latest, retry).await?.slot())
    }

    async fn ask_due(&self, pick: &Pick, retry: Retry) -> Result<DueAnswer, Unanswered> {
        let url = self.url(&Call::Due(pick)).map_err(Unanswered::Refused)?;
        let (status, text) = exchange(&self.client, reqwest::Method::GET, &url, b"", retry)
            .await
            .map_err(Unanswered::Unreachable)?;
        if !status.is_success() {
            return Err(unanswered(status, &text));
        }
        serde_json::from_str(&text)
            .map_err(|e| Unanswered::Unreachable(format!("unexpected answer to due ({e})")))
    }

    /// Takes a lock seat. Every attempt carries `nonce`, the invocation's
    /// own key: an attempt that took a seat but whose answer was lost would
    /// otherwise make the retry find that seat held (by this very run), record
    /// a skip and leave the seat orphaned for a TTL. `Err` when the server
    /// cannot answer, or refuses.
    pub async fn acquire(&self, lock: &LockOptions, nonce: &str) -> Result<Acquire, Unanswered> {
        let url = self
            .url(&Call::Lock {
                holder: &lock.holder,
                ttl: lock.ttl,
                token: None,
                nonce: Some(nonce),
            })
            .map_err(Unanswered::Refused)?;
        let since = Instant::now();
        let (status, text) = exchange(&self.client, reqwest::Method::POST, &url, b"", self.retry)
            .await
            .map_err(Unanswered::Unreachable)?;
        match status.as_u16() {
            200..=299 => seat_of(&text, lock.ttl, since)
                .map(Acquire::Acquired)
                .map_err(Unanswered::Unreachable),
            423 => {
                let answer: LockAnswer = serde_json::from_str(&text).unwrap_or(LockAnswer {
                    acquired: false,
                    token: None,
                    holder: None,
                    expires: None,
                    ttl_ms: None,
                });
                Ok(Acquire::Held(locked_reason(
                    answer.holder.as_deref().unwrap_or("another holder"),
                    answer.expires.as_deref().unwrap_or("its expiry"),
                )))
            }
            _ => Err(unanswered(status, &text)),
        }
    }

    /// Renews the seat of `token` with one attempt limited to `timeout`.
    pub async fn renew(&self, lock: &LockOptions, token: i64, timeout: Duration) -> Renewal {
        let url = match self.url(&Call::Lock {
            holder: &lock.holder,
            ttl: lock.ttl,
            token: Some(token),
            nonce: None,
        }) {
            Ok(u) => u,
            Err(e) => return Renewal::Failed(e),
        };
        let once = Retry {
            timeout,
            retries: 0,
            total: timeout + Duration::from_millis(100),
        };
        match exchange(&self.client, reqwest::Method::POST, &url, b"", once).await {
            Ok((status, text)) if status.is_success() => {
                match seat_of(&text, lock.ttl, Instant::now()) {
                    Ok(seat) => Renewal::Renewed(seat.ttl),
                    Err(e) => Renewal::Failed(e),
                }
            }
            Ok((status, text)) if status.as_u16() == 409 => {
                Renewal::Lost(format!("{status}: {}", text.trim()))
            }
            Ok((status, text)) => Renewal::Failed(format!("{status}: {}", text.trim())),
            Err(e) => Renewal::Failed(e),
        }
    }

    /// Releases the seat of `token`.
    pub async fn release(&self, token: i64) -> Result<(), String> {
        let url = self.url(&Call::Unlock { token })?;
        match exchange(&self.client, reqwest::Method::POST, &url, b"", self.retry).await? {
            (status, _) if status.is_success() => Ok(()),
            (status, text) => Err(format!("{status}: {}", text.trim())),
        }
    }

    /// Records a skip.
    pub async fn skip(&self, reason: &str) -> Result<(), String> {
        let ping = Ping::of(PingKind::Skip(reason.to_string()));
        let url = ping_url(&self.target, &self.server, &ping)?;
        send(&self.client, &url, &ping, self.retry).await.map(drop)
    }
}

/// Renews a seat in the background while the command runs.
#[derive(Debug)]
pub struct Keeper {
    task: tokio::task::JoinHandle<()>,
    lost: watch::Receiver<Option<String>>,
}

impl Keeper {
    /// Starts renewing `seat`.
    pub fn start(guard: Guard, lock: LockOptions, seat: Seat) -> Keeper {
        let (tx, lost) = watch::channel(None);
        let task = tokio::spawn(keep(guard, lock, seat, tx));
        Keeper { task, lost }
    }

    /// Why the lock was lost, once it is.
    pub fn lost(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// Resolves with why the lock was lost, when it is.
    pub fn when_lost(&self) -> impl std::future::Future<Output = String> + 'static {
        let mut rx = self.lost.clone();
        async move {
            match rx.wait_for(Option::is_some).await {
                Ok(why) => why.clone().unwrap_or_default(),
                Err(_) => std::future::pending().await,
            }
        }
    }

    /// Stops renewing; why the lock was lost, if it was.
    pub async fn stop(self) -> Option<String> {
        self.task.abort();
        let _ = self.task.await;
        let lost = self.lost.borrow().clone();
        lost
    }
}

async fn keep(guard: Guard, lock: LockOptions, seat: Seat, lost: watch::Sender<Option<String>>) {
    let mut interval = renew_interval(seat.ttl);
    let mut next = seat.since + interval;
    let mut failing = false;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let timeout = guard
            .retry
            .timeout
            .min(interval.max(Duration::from_secs(1)));
        match guard.renew(&lock, seat.token, timeout).await {
            Renewal::Renewed(ttl) => {
                if failing {
                    eprintln!("overdue run: the lock is renewed again");
                    failing = false;
                }
                interval = renew_interval(ttl);
                next = sent + interval;
            }
            Renewal::Lost(why) => {
                if lock.lost == LockLost::Warn {
                    eprintln!(
                        "overdue run: warning: lost the lock ({why}); the command goes on (--lock-lost warn)"
                    );
                }
                let _ = lost.send(Some(format!("lost the lock ({why})")));
                return;
            }
            Renewal::Failed(why) => {
                if !failing {
                    eprintln!(
                        "overdue run: cannot renew the lock ({why}); trying again, it is held until the server says otherwise"
                    );
                    failing = true;
                }
                next = Instant::now() + renew_retry(interval);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "5f4cc5e5-0c51-4f1e-a1fc-3d0d8c4d5ee0";

    #[test]
    fn unreachable_defaults_to_skip_only_for_guarded_runs() {
        assert_eq!(IfUnreachable::default_for(false, false), IfUnreachable::Run);
        assert_eq!(IfUnreachable::default_for(true, false), IfUnreachable::Skip);
        assert_eq!(IfUnreachable::default_for(false, true), IfUnreachable::Skip);
        assert_eq!(IfUnreachable::default_for(true, true), IfUnreachable::Skip);
    }

    #[test]
    fn guard_urls_for_a_uuid() {
        assert_eq!(
            call_url(U, "http://h:1/", &Call::Due(&Pick::Latest)).unwrap(),
            format!("http://h:1/ping/{U}/due")
        );
        let lock = Call::Lock {
            holder: "web-1:42",
            ttl: Some(Duration::from_secs(90)),
            token: None,
            nonce: Some("n-1"),
        };
        assert_eq!(
            call_url(U, "http://h:1", &lock).unwrap(),
            format!("http://h:1/ping/{U}/lock?holder=web-1%3A42&ttl=90000ms&nonce=n-1")
        );
        let renew = Call::Lock {
            holder: "a b",
            ttl: None,
            token: Some(7),
            nonce: None,
        };
        assert_eq!(
            call_url(U, "http://h:1", &renew).unwrap(),
            format!("http://h:1/ping/{U}/lock?holder=a+b&token=7")
        );
        assert_eq!(
            call_url(U, "http://h:1", &Call::Unlock { token: 7 }).unwrap(),
            format!("http://h:1/ping/{U}/unlock?token=7")
        );
        assert!(call_url("nope", "http://h:1", &Call::Due(&Pick::Latest)).is_err());
    }

    #[test]
    fn guard_urls_for_a_slug_url_with_a_query() {
        let t = "https://x/ping/key/nightly?create=1";
        assert_eq!(
            call_url(t, "", &Call::Due(&Pick::Latest)).unwrap(),
            "https://x/ping/key/nightly/due?create=1"
        );
        let lock = Call::Lock {
            holder: "h",
            ttl: None,
            token: Some(3),
            nonce: None,
        };
        assert_eq!(
            call_url(t, "", &lock).unwrap(),
            "https://x/ping/key/nightly/lock?create=1&holder=h&token=3"
        );
        assert_eq!(
            call_url(t, "", &Call::Unlock { token: 3 }).unwrap(),
            "https://x/ping/key/nightly/unlock?create=1&token=3"
        );
        // A full URL ignores the server.
        assert_eq!(
            call_url(
                "http://a/ping/key/s/",
                "http://other",
                &Call::Due(&Pick::Latest)
            )
            .unwrap(),
            "http://a/ping/key/s/due"
        );
    }

    #[test]
    fn renewal_at_a_third_of_the_ttl_never_faster_than_the_floor() {
        assert_eq!(
            renew_interval(Duration::from_secs(90)),
            Duration::from_secs(30)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(1)),
            Duration::from_secs(1) / 3
        );
        assert_eq!(renew_interval(Duration::ZERO), RENEW_FLOOR);
        assert_eq!(renew_interval(Duration::from_millis(600)), RENEW_FLOOR);
        // A failed renewal is tried again within a few seconds, sooner for short TTLs.
        assert_eq!(renew_retry(Duration::from_secs(30)), RENEW_RETRY);
        assert_eq!(
            renew_retry(Duration::from_millis(333)),
            Duration::from_millis(333)
        );
    }

    #[test]
    fn skip_reasons() {
        assert_eq!(
            locked_reason("web-1:42", "2026-01-01T00:05:00Z"),
            "locked by web-1:42 until 2026-01-01T00:05:00Z"
        );
        assert_eq!(
            not_due_reason("done", Some("2026-01-01T03:00:00Z")),
            "already done for slot 2026-01-01T03:00:00Z"
        );
        assert_eq!(not_due_reason("quiet", None), "quiet hours");
        assert_eq!(not_due_reason("paused", None), "not due (paused)");
    }

    #[test]
    fn a_seat_takes_the_ttl_the_server_applied() {
        let now = Instant::now();
        let seat = seat_of(
            r#"{"acquired": true, "token": 12, "expires": "2026-01-01T00:00:00Z", "holder": "h", "ttl_ms": 90000}"#,
            Some(Duration::from_secs(5)),
            now,
        )
        .unwrap();
        assert_eq!((seat.token, seat.ttl), (12, Duration::from_secs(90)));
        // Without ttl_ms: the TTL asked for, else the smallest one.
        let seat = seat_of(
            r#"{"acquired": true, "token": 1}"#,
            Some(Duration::from_secs(5)),
            now,
        )
        .unwrap();
        assert_eq!(seat.ttl, Duration::from_secs(5));
        let seat = seat_of(r#"{"acquired": true, "token": 1}"#, None, now).unwrap();
        assert_eq!(seat.ttl, TTL_FALLBACK);
        assert!(seat_of(r#"{"acquired": true}"#, None, now).is_err());
        assert!(seat_of("OK", None, now).is_err());
    }

    #[test]
    fn a_4xx_is_a_refusal_with_the_servers_message_except_the_locks_own() {
        use reqwest::StatusCode as S;
        assert_eq!(
            unanswered(S::NOT_FOUND, r#"{"error": "no such check"}"#),
            Unanswered::Refused("404 Not Found: no such check".into())
        );
        assert_eq!(
            unanswered(S::BAD_REQUEST, "holder: too long\n"),
            Unanswered::Refused("400 Bad Request: holder: too long".into())
        );
        for status in [S::CONFLICT, S::LOCKED, S::TOO_MANY_REQUESTS, S::BAD_GATEWAY] {
            assert!(
                matches!(unanswered(status, "x"), Unanswered::Unreachable(_)),
                "{status}"
            );
        }
    }

    #[test]
    fn the_default_holder_is_host_and_pid() {
        let h = default_holder();
        let (host, pid) = h.rsplit_once(':').unwrap();
        assert!(!host.is_empty());
        assert_eq!(pid, std::process::id().to_string());
    }
}
