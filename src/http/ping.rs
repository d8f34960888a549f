//! The healthchecks.io-compatible ping endpoints (SPEC §4):
//! `/ping/{uuid}[/start|/fail|/log|/skip|/{exit}]` and
//! `/ping/{ping_key}/{slug}[/…]`; the job guard's `due`, `lock` and `unlock`
//! share their URLs and are answered in [`super::guard`], as does a snooze
//! (`…/snooze?for=D`), answered in [`super::snooze`].

use std::net::SocketAddr;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::auth::client_ip;
use super::guard::{GuardOp, Named};
use super::rate_limit::{retry_after_secs, KeyedLimiter};
use super::AppState;
use crate::clock;
use crate::config::MAX_PING_BODY;
use crate::domain::check::CheckSpec;
use crate::domain::fold::Ping;
use crate::domain::guard::MAX_REASON;
use crate::domain::ping::PingKind;
use crate::domain::slots;
use crate::log_throttle::Throttled;
use crate::metrics::{Metrics, Rejected};
use crate::store::{CheckSource, StoreError};
use crate::workers::ingest::IngestError;

// Failures answered `503` on the ping path, one line per request while the
// database fails: each is logged once per interval while it repeats.
static LOOKUP_FAILED: Throttled = Throttled::every_10s();
static SNOOZE_FAILED: Throttled = Throttled::every_10s();
static CREATE_FAILED: Throttled = Throttled::every_10s();

/// What the URL asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Action {
    kind: PingKind,
    exit_status: Option<u8>,
    /// A job guard request rather than a ping.
    guard: Option<GuardOp>,
    /// A snooze rather than a ping.
    snooze: bool,
}

/// Where the ping goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target<'a> {
    Uuid(Uuid),
    Slug(&'a str),
}

/// A ping that is answered without being stored.
#[derive(Debug, PartialEq, Eq)]
enum Rejection {
    NotFound,
    /// A one-segment ping path that is not a uuid (a placeholder pasted
    /// literally, a truncated URL): still `404`, saying why.
    NotAUuid,
    BadRequest(&'static str),
    /// A bad request whose reason names what was given.
    Invalid(String),
    TooLarge,
}

struct Query {
    rid: Option<Uuid>,
    items: Option<u64>,
    create: bool,
    /// A skip's reason.
    reason: Option<String>,
    /// The slot the ping is for (`?slot=`, SPEC §14), Unix ms.
    slot: Option<i64>,
    /// `?retry=1` on a failure: an attempt that will be retried (SPEC §14).
    retry: bool,
}

/// Handles every ping form and method.
pub async fn ping(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    headers: HeaderMap,
    Path(path): Path<String>,
    RawQuery(query): RawQuery,
    mut body: Body,
) -> Response {
    // A browser's CORS preflight asks whether it may ping; it is no ping.
    if method == Method::OPTIONS {
        return preflight(state.config.ping_body_limit);
    }
    let response = answer(state, peer, method, headers, path, query, &mut body).await;
    // A ping rejected before its body was read: read the rest anyway, so that
    // the client reads this answer instead of a reset connection. A GET (no
    // body) ends here at once.
    if !body.is_end_stream() {
        let _ = read_body(&mut body, 0).await;
    }
    response
}

/// The answer to a ping; [`ping`] reads whatever this left of the body.
async fn answer(
    state: AppState,
    peer: SocketAddr,
    method: Method,
    headers: HeaderMap,
    path: String,
    query: Option<String>,
    body: &mut Body,
) -> Response {
    let limit = state.config.ping_body_limit;
    let client = client_ip(peer, &headers, &state.config.trusted_proxies);
    // Before anything else: unknown URLs from one address count too.
    if let Some(r) = over_limit(
        &state,
        state.limits.per_address.as_ref(),
        client,
        Rejected::RateLimitAddress,
        "from this address ([rate_limit] per_address)",
    ) {
        return r;
    }
    let (target, action) =
        match parse_path(&path, state.config.ping_key.as_ref().map(|k| k.expose())) {
            Ok(t) => t,
            Err(r) => return reject(&state.metrics, r, limit),
        };
    let query_text = query;
    let query = match parse_query(query_text.as_deref()) {
        Ok(q) => q,
        Err(r) => return reject(&state.metrics, r, limit),
    };
    if let Some(op) = action.guard {
        let create = query.create && op != GuardOp::Unlock;
        return guard(
            &state,
            target,
            op,
            &method,
            query_text.as_deref(),
            create,
            client,
        )
        .await;
    }
    if action.snooze {
        return snooze(&state, target, query_text.as_deref(), client).await;
    }
    if query.create && !matches!(target, Target::Slug(_)) {
        return reject(
            &state.metrics,
            Rejection::BadRequest("create=1 needs the slug form of the URL"),
            limit,
        );
    }

    let found = match &target {
        Target::Uuid(u) => state.ingest.resolve_uuid(*u).await,
        Target::Slug(s) => state.ingest.resolve_slug(s).await,
    };
    let (check_id, created) = match found {
        Ok(Some(c)) => (c, false),
        Ok(None) => match target {
            Target::Slug(slug) if query.create => match create(&state, slug).await {
                Ok(c) => c,
                Err(_) => return unavailable(&state.metrics, limit),
            },
            _ => return reject(&state.metrics, Rejection::NotFound, limit),
        },
        Err(e) => {
            if let Some(suppressed) = LOOKUP_FAILED.hit() {
                tracing::error!(error = %format!("{e:#}"), suppressed, "cannot look up a check (while this repeats it is logged every 10s, suppressed counting the rest)");
            }
            return unavailable(&state.metrics, limit);
        }
    };

    if let Some(r) = over_limit(
        &state,
        state.limits.per_check.as_ref(),
        check_id,
        Rejected::RateLimitCheck,
        "to this check ([rate_limit] per_check)",
    ) {
        return r;
    }
    // A body cut off (stalled past the read timeout, or a broken chunked
    // encoding) is not a ping: storing it would acknowledge a request the
    // client is told failed, and its retry would be counted twice.
    let body = match read_body(body, limit).await {
        Ok(kept) => kept,
        Err(BodyError::Unreadable) => {
            return reject(
                &state.metrics,
                Rejection::BadRequest("the request body could not be read"),
                limit,
            )
        }
        Err(BodyError::TooLarge) => return reject(&state.metrics, Rejection::TooLarge, limit),
    };
    let user_agent = headers
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // A failure that will be retried changes no status (SPEC §14).
    let kind = match action.kind {
        PingKind::Fail if query.retry => PingKind::Retry,
        k => k,
    };
    let ping = Ping {
        check_id,
        at: clock::now_ms(),
        kind,
        exit_status: action.exit_status,
        items: query.items,
        rid: query.rid,
        method: method.as_str().to_string(),
        remote_addr: Some(client.to_string()),
        user_agent,
        scheme: "http",
        body,
        reason: query.reason.filter(|_| action.kind == PingKind::Skip),
        slot: query.slot,
    };
    let skipped = ping.reason.clone();
    let result = state.ingest.submit(ping).await;
    if result.is_ok() {
        state.metrics.ping(kind);
        if action.kind == PingKind::Skip {
            state.metrics.skip(skipped.as_deref().unwrap_or(""));
        }
    }
    match result {
        Ok(_) if created => respond(StatusCode::CREATED, "Created", limit),
        Ok(_) => respond(StatusCode::OK, "OK", limit),
        Err(IngestError::Unavailable) => unavailable(&state.metrics, limit),
        Err(IngestError::DiskFull) => {
            state.metrics.ping_rejected(Rejected::DiskFull);
            respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "the ping could not be stored: the database's disk is full, try again later",
                limit,
            )
        }
    }
}

/// A job guard request. `create` (`?create=1` in the slug form, for `due`
/// and `lock`) creates a missing check with defaults, as a ping would: a
/// guarded job line may be the first thing that names its check.
async fn guard(
    state: &AppState,
    target: Target<'_>,
    op: GuardOp,
    method: &Method,
    query: Option<&str>,
    create: bool,
    client: std::net::IpAddr,
) -> Response {
    let named = match target {
        Target::Uuid(u) => Named::Uuid(u),
        Target::Slug(s) => Named::Slug(s),
    };
    let check_id = match lookup(state, target, create).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let answer = super::guard::answer(
        state,
        check_id,
        op,
        method,
        query,
        &client.to_string(),
        named,
    )
    .await;
    with_body_limit(answer, state.config.ping_body_limit)
}

/// Adds `Ping-Body-Limit`, which every answer under `/ping` carries, to a
/// JSON answer of the job guard or a snooze.
fn with_body_limit(mut response: Response, limit: usize) -> Response {
    response
        .headers_mut()
        .insert("ping-body-limit", HeaderValue::from(limit));
    response
}

/// A snooze: `for` is read first, then the check is looked up as for a ping
/// (never created: a check that does not exist has nothing to silence).
async fn snooze(
    state: &AppState,
    target: Target<'_>,
    query: Option<&str>,
    client: std::net::IpAddr,
) -> Response {
    let limit = state.config.ping_body_limit;
    let ask = match super::snooze::parse_query(query) {
        Ok(a) => a,
        Err(e) => return reject(&state.metrics, Rejection::Invalid(e), limit),
    };
    let check_id = match lookup(state, target, false).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    match super::snooze::answer(state, check_id, &ask, &client.to_string()).await {
        Ok(r) => with_body_limit(r, limit),
        Err(StoreError::NotFound) => reject(&state.metrics, Rejection::NotFound, limit),
        Err(e) => {
            if let Some(suppressed) = SNOOZE_FAILED.hit() {
                tracing::error!(error = %format!("{e:#}"), suppressed, "cannot store a snooze (while this repeats it is logged every 10s, suppressed counting the rest)");
            }
            state.metrics.ping_rejected(Rejected::Unavailable);
            respond(
                StatusCode::SERVICE_UNAVAILABLE,
                "the snooze could not be stored, try again",
                limit,
            )
        }
    }
}

/// The check a guard request or a snooze names (created with `create`, as
/// a ping's `?create=1` would), within its per-check rate limit; else the
/// answer to give.
async fn lookup(state: &AppState, target: Target<'_>, create: bool) -> Result<i64, Response> {
    let limit = state.config.ping_body_limit;
    let found = match &target {
        Target::Uuid(u) => state.ingest.resolve_uuid(*u).await,
        Target::Slug(s) => state.ingest.resolve_slug(s).await,
    };
    let check_id = match found {
        Ok(Some(c)) => c,
        Ok(None) => match target {
            Target::Slug(slug) if create => match self::create(state, slug).await {
                Ok((c, _)) => c,
                Err(_) => return Err(unavailable(&state.metrics, limit)),
            },
            _ => return Err(reject(&state.metrics, Rejection::NotFound, limit)),
        },
        Err(e) => {
            if let Some(suppressed) = LOOKUP_FAILED.hit() {
                tracing::error!(error = %format!("{e:#}"), suppressed, "cannot look up a check (while this repeats it is logged every 10s, suppressed counting the rest)");
            }
            return Err(unavailable(&state.metrics, limit));
        }
    };
    match over_limit(
        state,
        state.limits.per_check.as_ref(),
        check_id,
        Rejected::RateLimitCheck,
        "to this check ([rate_limit] per_check)",
    ) {
        Some(r) => Err(r),
        None => Ok(check_id),
    }
}

/// Creates a check with defaults for `?create=1`; a concurrent create of the
/// same slug is not an error. The check's id, and whether this created it.
async fn create(state: &AppState, slug: &str) -> Result<(i64, bool), StoreError> {
    let spec = CheckSpec::with_slug(slug);
    let now = clock::now_ms();
    match state.checks.create(&spec, CheckSource::Ping, now).await {
        Ok(check) => Ok((check.id, true)),
        Err(StoreError::Conflict(_)) => match state.ingest.resolve_slug(slug).await? {
            Some(id) => Ok((id, false)),
            None => Err(StoreError::NotFound),
        },
        Err(e) => {
            if let Some(suppressed) = CREATE_FAILED.hit() {
                tracing::error!(error = %format!("{e:#}"), suppressed, "cannot create a check from a ping (while this repeats it is logged every 10s, suppressed counting the rest)");
            }
            Err(e)
        }
    }
}

fn parse_path<'a>(
    path: &'a str,
    ping_key: Option<&str>,
) -> Result<(Target<'a>, Action), Rejection> {
    let parts: Vec<&str> = path.split('/').collect();
    let success = Action {
        kind: PingKind::Success,
        exit_status: None,
        guard: None,
        snooze: false,
    };
    match parts[..] {
        [code] => Uuid::parse_str(code)
            .map(|u| (Target::Uuid(u), success))
            .map_err(|_| Rejection::NotAUuid),
        [first, second] => {
            if let Ok(u) = Uuid::parse_str(first) {
                if let Some(action) = parse_action(second)? {
                    return Ok((Target::Uuid(u), action));
                }
            }
            Ok((slug_target(first, second, ping_key)?, success))
        }
        [key, slug, action] => {
            let target = slug_target(key, slug, ping_key)?;
            match parse_action(action)? {
                Some(a) => Ok((target, a)),
                None => Err(Rejection::NotFound),
            }
        }
        _ => Err(Rejection::NotFound),
    }
}

/// `None` when the segment is not an action at all (it may be a slug).
fn parse_action(segment: &str) -> Result<Option<Action>, Rejection> {
    if let Some(op) = GuardOp::parse(segment) {
        return Ok(Some(Action {
            kind: PingKind::Log,
            exit_status: None,
            guard: Some(op),
            snooze: false,
        }));
    }
    if segment == "snooze" {
        return Ok(Some(Action {
            kind: PingKind::Log,
            exit_status: None,
            guard: None,
            snooze: true,
        }));
    }
    let kind = match segment {
        "start" => PingKind::Start,
        "fail" => PingKind::Fail,
        "log" => PingKind::Log,
        "skip" => PingKind::Skip,
        s if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            return match s.parse::<u8>() {
                Ok(0) => Ok(Some(Action {
                    kind: PingKind::Success,
                    exit_status: Some(0),
                    guard: None,
                    snooze: false,
                })),
                Ok(code) => Ok(Some(Action {
                    kind: PingKind::Fail,
                    exit_status: Some(code),
                    guard: None,
                    snooze: false,
                })),
                Err(_) => Err(Rejection::BadRequest("invalid url format")),
            };
        }
        _ => return Ok(None),
    };
    Ok(Some(Action {
        kind,
        exit_status: None,
        guard: None,
        snooze: false,
    }))
}

fn slug_target<'a>(
    key: &str,
    slug: &'a str,
    ping_key: Option<&str>,
) -> Result<Target<'a>, Rejection> {
    let Some(expected) = ping_key else {
        return Err(Rejection::NotFound);
    };
    if !bool::from(key.as_bytes().ct_eq(expected.as_bytes())) {
        return Err(Rejection::NotFound);
    }
    if slug.is_empty()
        || !slug
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Rejection::NotFound);
    }
    if slug.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(Rejection::BadRequest("slug must be lowercase"));
    }
    Ok(Target::Slug(slug))
}

fn parse_query(query: Option<&str>) -> Result<Query, Rejection> {
    let mut q = Query {
        rid: None,
        items: None,
        create: false,
        reason: None,
        slot: None,
        retry: false,
    };
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "rid" => {
                q.rid = Some(
                    Uuid::parse_str(value.trim())
                        .map_err(|_| Rejection::BadRequest("invalid uuid format"))?,
                )
            }
            "items" => {
                let v = value.trim();
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Rejection::BadRequest(
                        "items must be a non-negative integer",
                    ));
                }
                // Stored as a signed 64-bit integer: a larger count was
                // cut to 2^63-1 and answered 200.
                q.items = Some(
                    v.parse::<i64>()
                        .ok()
                        .and_then(|n| u64::try_from(n).ok())
                        .ok_or(Rejection::BadRequest(
                            "items must be at most 9223372036854775807 (2^63-1)",
                        ))?,
                );
            }
            "create" => q.create = value == "1",
            "reason" => q.reason = Some(skip_reason(&value)),
            "slot" => {
                q.slot = Some(
                    slots::parse(&value)
                        .map(|t| t.timestamp_millis())
                        .map_err(|_| {
                            Rejection::BadRequest(
                                "slot must be an RFC 3339 instant such as 2026-12-05T03:00:00Z",
                            )
                        })?,
                )
            }
            "retry" => q.retry = value == "1",
            _ => {}
        }
    }
    Ok(q)
}

/// A skip's reason as stored: without control characters (a log line
/// stays one line), at most [`MAX_REASON`] bytes, cut at a character.
fn skip_reason(text: &str) -> String {
    one_line(text, MAX_REASON)
}

/// `text` trimmed, its control characters made spaces, cut at a character
/// to at most `max` bytes.
pub(super) fn one_line(text: &str, max: usize) -> String {
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut end = clean.len().min(max);
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    clean[..end].to_string()
}

/// Why a ping's body is not stored.
enum BodyError {
    /// Cut off: stalled past the read timeout, or a broken chunked encoding.
    Unreadable,
    /// Longer than [`MAX_PING_BODY`] (read to its end all the same).
    TooLarge,
}

/// Reads the body to its end and keeps its first `limit` bytes. The rest is
/// read and thrown away, not left unread: a client that writes its whole body
/// before reading the answer (Python's urllib, requests) would otherwise see
/// a reset connection and retry a ping that was stored. A body longer than
/// [`MAX_PING_BODY`] is read to its end too (within the server's body time
/// limit), so that its client reads the 413.
async fn read_body(body: &mut Body, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(BodyError::Unreadable);
        };
        if let Ok(data) = frame.into_data() {
            if kept.len() < limit {
                let take = (limit - kept.len()).min(data.len());
                kept.extend_from_slice(&data[..take]);
            }
            seen = seen.saturating_add(data.len());
        }
    }
    if seen > MAX_PING_BODY {
        return Err(BodyError::TooLarge);
    }
    Ok(kept)
}

fn respond(status: StatusCode, text: &'static str, limit: usize) -> Response {
    plain(status, text, limit)
}

/// A plain-text answer with the headers every ping answer carries.
pub(super) fn plain(
    status: StatusCode,
    text: impl Into<std::borrow::Cow<'static, str>>,
    limit: usize,
) -> Response {
    let mut response = (status, text.into()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert("ping-body-limit", HeaderValue::from(limit));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-store, must-revalidate"),
    );
    response
}

/// The answer to a CORS preflight (`OPTIONS`): every ping route may be
/// called from any page; nothing is looked up or stored.
fn preflight(limit: usize) -> Response {
    let mut response = plain(StatusCode::NO_CONTENT, "", limit);
    let h = response.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, HEAD, POST, PUT, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    response
}

fn reject(metrics: &Metrics, r: Rejection, limit: usize) -> Response {
    metrics.ping_rejected(match r {
        Rejection::NotFound | Rejection::NotAUuid => Rejected::NotFound,
        Rejection::BadRequest(_) | Rejection::Invalid(_) => Rejected::BadRequest,
        Rejection::TooLarge => Rejected::TooLarge,
    });
    match r {
        Rejection::NotFound => respond(StatusCode::NOT_FOUND, "not found", limit),
        Rejection::NotAUuid => respond(
            StatusCode::NOT_FOUND,
            "not found: that is not a uuid (a ping URL is /ping/<uuid>, with the uuid the \
             API or the dashboard shows, or /ping/<ping_key>/<slug>)",
            limit,
        ),
        Rejection::BadRequest(why) => respond(StatusCode::BAD_REQUEST, why, limit),
        Rejection::Invalid(why) => plain(StatusCode::BAD_REQUEST, why, limit),
        Rejection::TooLarge => respond(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ping body too large: at most 16777216 bytes (16 MiB) are accepted; \
             nothing was stored",
            limit,
        ),
    }
}

/// Takes a token from `limiter` (if that limit is set) for `key`; over it,
/// the 429 to answer, with `Retry-After` in whole seconds (at least 1) and
/// which limit it was.
fn over_limit<K: std::hash::Hash + Eq>(
    state: &AppState,
    limiter: Option<&KeyedLimiter<K>>,
    key: K,
    reason: Rejected,
    which: &str,
) -> Option<Response> {
    let l = limiter?;
    let wait = l.check(key, Instant::now()).err()?;
    state.metrics.ping_rejected(reason);
    let mut response = respond(
        StatusCode::TOO_MANY_REQUESTS,
        "",
        state.config.ping_body_limit,
    );
    *response.body_mut() = Body::from(format!(
        "rate limit exceeded: more than {} pings {which}",
        l.rate()
    ));
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after_secs(wait)),
    );
    Some(response)
}

fn unavailable(metrics: &Metrics, limit: usize) -> Response {
    metrics.ping_rejected(Rejected::Unavailable);
    respond(
        StatusCode::SERVICE_UNAVAILABLE,
        "the ping could not be stored, try again",
        limit,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "0b8e6a4e-51f4-4d7c-9d2d-2a1a3f6c7e11";

    fn parsed(path: &str) -> Result<(Target<'_>, Action), Rejection> {
        parse_path(path, Some("pingkey-123"))
    }

    fn kind(path: &str) -> (PingKind, Option<u8>) {
        let (_, a) = parsed(path).unwrap();
        (a.kind, a.exit_status)
    }

    #[test]
    fn uuid_forms() {
        assert_eq!(kind(U), (PingKind::Success, None));
        assert_eq!(kind(&format!("{U}/start")), (PingKind::Start, None));
        assert_eq!(kind(&format!("{U}/fail")), (PingKind::Fail, None));
        assert_eq!(kind(&format!("{U}/log")), (PingKind::Log, None));
        assert_eq!(kind(&format!("{U}/0")), (PingKind::Success, Some(0)));
        assert_eq!(kind(&format!("{U}/1")), (PingKind::Fail, Some(1)));
        assert_eq!(kind(&format!("{U}/255")), (PingKind::Fail, Some(255)));
        assert_eq!(
            parsed(&format!("{U}/256")).err(),
            Some(Rejection::BadRequest("invalid url format"))
        );
        assert_eq!(parsed("not-a-uuid").err(), Some(Rejection::NotAUuid));
        assert_eq!(
            parsed(&format!("{U}/start/x")).err(),
            Some(Rejection::NotFound)
        );
    }

    #[test]
    fn slug_forms() {
        let (t, a) = parsed("pingkey-123/backup").unwrap();
        assert_eq!(t, Target::Slug("backup"));
        assert_eq!(a.kind, PingKind::Success);
        let (_, a) = parsed("pingkey-123/backup/fail").unwrap();
        assert_eq!(a.kind, PingKind::Fail);
        let (_, a) = parsed("pingkey-123/backup/3").unwrap();
        assert_eq!((a.kind, a.exit_status), (PingKind::Fail, Some(3)));
        assert_eq!(
            parsed("pingkey-123/Backup").err(),
            Some(Rejection::BadRequest("slug must be lowercase"))
        );
        assert_eq!(parsed("wrong-key/backup").err(), Some(Rejection::NotFound));
        assert_eq!(
            parsed("pingkey-123/../etc").err(),
            Some(Rejection::NotFound)
        );
        assert_eq!(
            parsed("pingkey-123/backup/nope").err(),
            Some(Rejection::NotFound)
        );
        assert_eq!(
            parse_path("pingkey-123/backup", None).err(),
            Some(Rejection::NotFound)
        );
    }

    #[test]
    fn snooze_forms() {
        let path = format!("{U}/snooze");
        let (t, a) = parsed(&path).unwrap();
        assert_eq!(t, Target::Uuid(Uuid::parse_str(U).unwrap()));
        assert!(a.snooze && a.guard.is_none());
        let (t, a) = parsed("pingkey-123/backup/snooze").unwrap();
        assert_eq!(t, Target::Slug("backup"));
        assert!(a.snooze);
        // A check whose slug is "snooze" is still pinged by its slug.
        let (t, a) = parsed("pingkey-123/snooze").unwrap();
        assert_eq!(t, Target::Slug("snooze"));
        assert!(!a.snooze);
        assert!(!parsed(&format!("{U}/fail")).unwrap().1.snooze);
    }

    #[test]
    fn query_validation() {
        let q = parse_query(Some(&format!("rid={U}&items=12")))
            .ok()
            .unwrap();
        assert_eq!(q.items, Some(12));
        assert_eq!(q.rid, Some(Uuid::parse_str(U).unwrap()));
        for bad in ["items=-1", "items=1.5", "items=abc", "items=", "rid=nope"] {
            assert!(parse_query(Some(bad)).is_err(), "{bad}");
        }
        assert!(parse_query(Some("items=99999999999999999999999")).is_err());
        assert_eq!(
            parse_query(Some("items=9223372036854775807"))
                .ok()
                .unwrap()
                .items,
            Some(i64::MAX as u64)
        );
        for beyond in ["9223372036854775808", "18446744073709551615"] {
            assert_eq!(
                parse_query(Some(&format!("items={beyond}"))).err(),
                Some(Rejection::BadRequest(
                    "items must be at most 9223372036854775807 (2^63-1)"
                ))
            );
        }
        assert!(parse_query(Some("create=1")).ok().unwrap().create);
    }
}
