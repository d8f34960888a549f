//! What was recorded of a check, under `/api/v1/checks/{check}/…` (SPEC §5):
//! its pings (and their bodies), runs, flips, incidents and events, newest
//! first. Every handler carries its OpenAPI description.

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{find, rfc3339};
use super::auth::ReadAccess;
use super::error::{AppError, ErrorBody};
use super::AppState;
use crate::domain::check::{Check, FieldError};
use crate::domain::fold::{PingRecord, RunRecord};

/// The history routes, relative to `/api/v1`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_pings))
        .routes(routes!(ping_body))
        .routes(routes!(list_runs))
        .routes(routes!(list_flips))
        .routes(routes!(list_incidents))
        .routes(routes!(list_events))
}

/// How many entries to return.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Limit {
    /// 1 to 1000 (default 100).
    limit: Option<u32>,
}

/// One ping.
#[derive(Serialize, ToSchema)]
pub struct PingView {
    /// Sequence number within the check, from 1.
    n: i64,
    /// `success`, `start`, `fail`, `log`, `skip` (the job guard skipped a
    /// run), `retry` (a failed attempt `overdue run --retries` retried: no
    /// status change) or `ign` (ignored).
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    kind: &'static str,
    date: String,
    exit_status: Option<i64>,
    items: Option<i64>,
    rid: Option<String>,
    method: String,
    remote_addr: Option<String>,
    ua: Option<String>,
    scheme: String,
    /// Seconds since the matching start.
    duration: Option<f64>,
    /// The body as text when it is UTF-8.
    body: Option<String>,
    /// The body as hex when it is not UTF-8.
    body_hex: Option<String>,
    body_size: usize,
    /// Where the body can be downloaded as it was sent (`null`: no body).
    body_url: Option<String>,
    /// Why the run was skipped (`skip` pings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The schedule slot the ping was sent for (`?slot=`, RFC 3339 UTC);
    /// absent: the latest slot start at or before its date.
    #[serde(skip_serializing_if = "Option::is_none")]
    slot: Option<String>,
}

impl PingView {
    fn new(p: PingRecord, body_base: &str) -> Self {
        let body_size = p.body.len();
        let (body, body_hex) = match String::from_utf8(p.body) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(hex::encode(e.into_bytes()))),
        };
        PingView {
            n: p.n,
            kind: p.kind.as_str(),
            // As the wall clock read when it arrived (SPEC §12).
            date: rfc3339(crate::clock::wall_of(p.at)),
            exit_status: p.exit_status,
            items: p.items,
            rid: p.rid,
            method: p.method,
            remote_addr: p.remote_addr,
            ua: p.user_agent,
            scheme: p.scheme,
            duration: p.duration_ms.map(|ms| ms as f64 / 1000.0),
            body,
            body_hex,
            body_size,
            body_url: (body_size > 0).then(|| format!("{body_base}/{}/body", p.n)),
            reason: p.reason,
            slot: p
                .slot
                .and_then(crate::domain::evaluate::instant)
                .map(crate::domain::slots::rfc3339),
        }
    }
}

/// A page of pings, newest first.
#[derive(Serialize, ToSchema)]
pub struct PingList {
    pings: Vec<PingView>,
    /// Pass as `before` for the next (older) page; `null` on the last page.
    next_before: Option<i64>,
}

/// A page of the ping log.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PingPage {
    /// 1 to 1000 (default 100).
    limit: Option<u32>,
    /// Only pings numbered below this (the previous page's `next_before`).
    before: Option<i64>,
}

#[utoipa::path(get, path = "/checks/{check}/pings", tag = "checks",
    summary = "A check's pings, newest first, a page at a time",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key"), PingPage),
    responses(
        (status = 200, description = "A page of pings", body = PingList),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_pings(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
    Query(q): Query<PingPage>,
) -> Result<Json<PingList>, AppError> {
    let check = find(&state, &key).await?;
    let limit = limit(q.limit)?;
    let pings = state
        .store
        .list_pings_before(check.id, q.before, limit)
        .await?;
    let next_before = (pings.len() == limit as usize)
        .then(|| pings.last().map(|p| p.n))
        .flatten()
        .filter(|n| *n > 1);
    // Named as read keys may see it.
    let base = format!(
        "{}/api/v1/checks/{}/pings",
        state.config.base_url,
        crate::domain::name::public_name(check.spec.slug.as_deref(), check.uuid)
    );
    Ok(Json(PingList {
        pings: pings.into_iter().map(|p| PingView::new(p, &base)).collect(),
        next_before,
    }))
}

/// The ping with this number, if the log still holds it.
pub async fn ping_by_n(
    state: &AppState,
    check: &Check,
    n: i64,
) -> Result<Option<PingRecord>, AppError> {
    let page = state
        .store
        .list_pings_before(check.id, n.checked_add(1), 1)
        .await?;
    Ok(page.into_iter().find(|p| p.n == n))
}

#[utoipa::path(get, path = "/checks/{check}/pings/{n}/body", tag = "checks",
    summary = "Download a ping's body as it was sent",
    params(
        ("check" = String, Path, description = "The check's uuid, slug or unique_key"),
        ("n" = i64, Path, description = "The ping's number"),
    ),
    responses(
        (status = 200, description = "The body", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 404, description = "No such check or ping", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn ping_body(
    State(state): State<AppState>,
    _: ReadAccess,
    Path((key, n)): Path<(String, String)>,
) -> Result<Response, AppError> {
    let check = find(&state, &key).await?;
    let n: i64 = n
        .parse()
        .map_err(|_| AppError::BadRequest(format!("{n:?} is not a ping number")))?;
    let Some(ping) = ping_by_n(&state, &check, n).await? else {
        return Err(AppError::NotFound(format!("no ping {n} in the log")));
    };
    Ok(body_response(ping.body))
}

/// A ping body as a download: text when it is UTF-8, bytes otherwise.
pub fn body_response(body: Vec<u8>) -> Response {
    let kind = if std::str::from_utf8(&body).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// One run: a start and its finish.
#[derive(Serialize, ToSchema)]
pub struct RunView {
    id: i64,
    rid: Option<String>,
    started: String,
    ended: Option<String>,
    /// `open` while running, then `success`, `failed` or `superseded`.
    outcome: String,
    reason: Option<String>,
    duration: Option<f64>,
    overlapped: bool,
}

impl From<RunRecord> for RunView {
    fn from(r: RunRecord) -> Self {
        RunView {
            id: r.id,
            rid: r.rid,
            started: rfc3339(r.started_at),
            ended: r.ended_at.map(rfc3339),
            outcome: r.outcome.unwrap_or_else(|| "open".to_string()),
            reason: r.reason,
            duration: r.duration_ms.map(|ms| ms as f64 / 1000.0),
            overlapped: r.overlapped,
        }
    }
}

/// Runs, newest first.
#[derive(Serialize, ToSchema)]
pub struct RunList {
    runs: Vec<RunView>,
}

#[utoipa::path(get, path = "/checks/{check}/runs", tag = "checks",
    summary = "A check's runs, newest first",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key"), Limit),
    responses(
        (status = 200, description = "Runs", body = RunList),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_runs(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<RunList>, AppError> {
    let check = find(&state, &key).await?;
    let runs = state.store.list_runs(check.id, limit(q.limit)?).await?;
    Ok(Json(RunList {
        runs: runs.into_iter().map(RunView::from).collect(),
    }))
}

/// One status change.
#[derive(Serialize, ToSchema)]
pub struct FlipView {
    at: String,
    from: String,
    to: String,
    reason: Option<String>,
}

/// Status changes, newest first.
#[derive(Serialize, ToSchema)]
pub struct FlipList {
    flips: Vec<FlipView>,
}

#[utoipa::path(get, path = "/checks/{check}/flips", tag = "checks",
    summary = "A check's status changes, newest first",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key"), Limit),
    responses(
        (status = 200, description = "Flips", body = FlipList),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_flips(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<FlipList>, AppError> {
    let check = find(&state, &key).await?;
    let flips = state.store.list_flips(check.id, limit(q.limit)?).await?;
    Ok(Json(FlipList {
        flips: flips
            .into_iter()
            .map(|f| FlipView {
                at: rfc3339(f.at),
                from: f.old_status,
                to: f.new_status,
                reason: f.reason,
            })
            .collect(),
    }))
}

/// One incident: from going down or stalled to recovery.
#[derive(Serialize, ToSchema)]
pub struct IncidentView {
    id: i64,
    opened: String,
    status: String,
    reason: Option<String>,
    resolved: Option<String>,
    /// Who acknowledged it, when, and why; `null` while nobody did.
    acknowledged: Option<super::ack::AckView>,
}

/// Incidents, newest first.
#[derive(Serialize, ToSchema)]
pub struct IncidentList {
    incidents: Vec<IncidentView>,
}

#[utoipa::path(get, path = "/checks/{check}/incidents", tag = "checks",
    summary = "A check's incidents, newest first",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key"), Limit),
    responses(
        (status = 200, description = "Incidents", body = IncidentList),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_incidents(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<IncidentList>, AppError> {
    let check = find(&state, &key).await?;
    let incidents = state
        .store
        .list_incidents(check.id, limit(q.limit)?)
        .await?;
    Ok(Json(IncidentList {
        incidents: incidents
            .into_iter()
            .map(|i| IncidentView {
                id: i.id,
                opened: rfc3339(i.opened_at),
                status: i.status,
                reason: i.reason,
                resolved: i.resolved_at.map(rfc3339),
                acknowledged: super::ack::ack_view(i.acked_at, i.acked_by, i.ack_comment),
            })
            .collect(),
    }))
}

/// One event that is not a status change (quiet hours, overlaps).
#[derive(Serialize, ToSchema)]
pub struct EventView {
    at: String,
    kind: String,
    detail: Option<String>,
}

/// Events, newest first.
#[derive(Serialize, ToSchema)]
pub struct EventList {
    events: Vec<EventView>,
}

#[utoipa::path(get, path = "/checks/{check}/events", tag = "checks",
    summary = "A check's other events (quiet hours, overlaps), newest first",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key"), Limit),
    responses(
        (status = 200, description = "Events", body = EventList),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_events(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<EventList>, AppError> {
    let check = find(&state, &key).await?;
    let events = state.store.list_events(check.id, limit(q.limit)?).await?;
    Ok(Json(EventList {
        events: events
            .into_iter()
            .map(|e| EventView {
                at: rfc3339(e.at),
                kind: e.kind,
                detail: e.detail,
            })
            .collect(),
    }))
}

fn limit(limit: Option<u32>) -> Result<u32, AppError> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::Invalid(vec![FieldError {
            field: "limit".into(),
            message: "must be between 1 and 1000".into(),
        }]));
    }
    Ok(limit)
}
