//! `GET /metrics` (SPEC §7): the service metrics, then the per-check series
//! rendered from the evaluator's state at scrape time.
//!
//! A scrape pages through the checks' identities in id order; for each page
//! it asks the evaluator task for a copy of those checks' state (one short
//! message: the evaluator only clones, it never measures or formats), and
//! measures them on a blocking thread. The evaluator therefore pauses for
//! one page's copy at a time, never for a whole scrape.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::AppState;
use crate::clock::now_ms;
use crate::domain::evaluate::instant;
use crate::metrics::checks::{rows, select, Exposition, Row};

/// Checks per page of a scrape.
const PAGE: u32 = 5_000;
/// How long one page may wait for the evaluator.
const EVALUATOR_TIMEOUT: Duration = Duration::from_secs(10);

/// The metrics route, for the main listener or a listener of its own.
pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

/// Serves only `/metrics` on `listener` until `stop` fires, then waits at
/// most `drain` for the scrapes in flight.
pub fn spawn_server(
    listener: TcpListener,
    state: AppState,
    stop: CancellationToken,
    drain: Duration,
) -> JoinHandle<std::io::Result<()>> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!("metrics listening on http://{addr}/metrics");
    }
    let app = router().with_state(state);
    tokio::spawn(super::serve::serve(listener, app, stop, drain))
}

async fn scrape(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let settings = &state.config.metrics;
    if let Some(token) = &settings.token {
        let ok = bearer(&headers).is_some_and(|p| {
            let (a, b) = (Sha256::digest(p.as_bytes()), Sha256::digest(token.expose()));
            bool::from(a.ct_eq(&b))
        });
        if !ok {
            let mut r = (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    let now = now_ms();
    let (queue, dead) = match state.store.notification_counts().await {
        Ok(counts) => {
            let count = |s: &str| counts.iter().find(|(k, _)| k == s).map_or(0, |(_, n)| *n);
            (Some(count("pending")), Some(count("dead")))
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "metrics: cannot count notifications");
            (None, None)
        }
    };
    state
        .metrics
        .set_scrape_gauges(queue, dead, state.evaluator.lag_ms(now));
    match state.store.acknowledged_open_incidents().await {
        Ok(n) => state.metrics.set_acknowledged(n),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "metrics: cannot count acknowledged incidents")
        }
    }
    let head = state.metrics.encode();
    let rows = if settings.per_check {
        match per_check(&state, now).await {
            Ok(rows) => rows,
            Err(why) => {
                tracing::warn!(error = %why, "metrics: cannot render per-check series");
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("per-check metrics are unavailable: {why}\n"),
                )
                    .into_response();
            }
        }
    } else {
        Vec::new()
    };
    let body = Body::from_stream(futures_util::stream::iter(
        Exposition::new(head, rows).map(Ok::<_, Infallible>),
    ));
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(prometheus::TEXT_FORMAT),
    );
    r
}

/// How long a scrape waits for other replicas' changes to arrive before it
/// renders what it has.
const SYNC_BOUND: Duration = Duration::from_secs(1);

/// Measures every selected check the evaluator holds, at `now`.
async fn per_check(state: &AppState, now: i64) -> Result<Vec<Row>, String> {
    if !state.evaluator.loaded() {
        // Still loading at start-up: the service metrics say enough meanwhile.
        return Ok(Vec::new());
    }
    // A change committed on another replica before this scrape began must
    // be in it (SPEC §5); the evaluator hears of it through the database.
    if state.store.shared() && !state.changes.pass(&*state.store, SYNC_BOUND).await {
        tracing::debug!("metrics: other replicas' latest changes may be missing from this scrape");
    }
    let Some(now) = instant(now) else {
        return Ok(Vec::new());
    };
    let settings = Arc::new(state.config.metrics.clone());
    let spans = Arc::new(state.observed.observation());
    let locks = Arc::new(
        state
            .store
            .locks_held(now.timestamp_millis())
            .await
            .map_err(|e| format!("cannot read the job guard's locks: {e:#}"))?,
    );
    let dead = Arc::new(
        state
            .store
            .dead_letter_counts()
            .await
            .map_err(|e| format!("cannot read the slot ledger: {e:#}"))?,
    );
    let started = std::time::Instant::now();
    let (mut pages, mut waited, mut longest) = (0u32, Duration::ZERO, Duration::ZERO);
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = state
            .store
            .metric_checks(after, PAGE)
            .await
            .map_err(|e| format!("cannot read checks: {e:#}"))?;
        let Some(last) = page.last() else { break };
        after = last.id;
        let s = settings.clone();
        let selected = tokio::task::spawn_blocking(move || select(page, &s))
            .await
            .map_err(|e| e.to_string())?;
        if selected.is_empty() {
            continue;
        }
        let ids = selected.iter().map(|s| s.id).collect();
        let asked = std::time::Instant::now();
        let states = tokio::time::timeout(EVALUATOR_TIMEOUT, state.evaluator.snapshot(ids))
            .await
            .map_err(|_| "the evaluator did not answer in time".to_string())?
            .ok_or_else(|| "the evaluator has stopped".to_string())?;
        // The evaluator is busy with a page for at most this long.
        let wait = asked.elapsed();
        pages += 1;
        waited += wait;
        longest = longest.max(wait);
        let (spans, locks, dead) = (spans.clone(), locks.clone(), dead.clone());
        let page_rows = tokio::task::spawn_blocking(move || {
            rows(selected, states, &spans, (&locks, &dead), now)
        })
        .await
        .map_err(|e| e.to_string())?;
        out.extend(page_rows);
    }
    tracing::debug!(
        checks = out.len(),
        pages,
        measured_ms = started.elapsed().as_millis() as u64,
        evaluator_wait_ms = waited.as_millis() as u64,
        evaluator_wait_max_us = longest.as_micros() as u64,
        "metrics scrape measured"
    );
    Ok(out)
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = auth.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}
