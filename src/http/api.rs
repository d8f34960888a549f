//! The native management API under `/api/v1` (SPEC §5).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::{ReadAccess, WriteAccess};
use super::error::AppError;
use super::AppState;
use crate::domain::check::{format_duration, CheckInput, CheckSpec, FieldError, WindowInput};
use crate::domain::evaluate::{evaluate, Rules, RulesCache, Span};
use crate::domain::ping::UnixMs;
use crate::domain::status::{Reason, Status};
use crate::evaluator::Notice;
use crate::store::{Check, CheckRef, CheckSource, PingRecord, RunRecord};

/// The `/api/v1` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/checks", get(list_checks).post(create_check))
        .route("/checks/{uuid}", get(get_check))
        .route("/checks/{uuid}/pause", post(pause_check))
        .route("/checks/{uuid}/resume", post(resume_check))
        .route("/checks/{uuid}/pings", get(list_pings))
        .route("/checks/{uuid}/runs", get(list_runs))
        .route("/checks/{uuid}/flips", get(list_flips))
        .route("/checks/{uuid}/incidents", get(list_incidents))
        .route("/checks/{uuid}/events", get(list_events))
        .fallback(|| async { AppError::NotFound("no such API route".to_string()) })
}

/// The check resource as the API returns it: the config fields plus read-only state.
#[derive(Debug, Serialize)]
pub struct CheckView {
    pub uuid: Uuid,
    pub slug: Option<String>,
    pub name: String,
    pub description: String,
    pub labels: BTreeMap<String, String>,
    pub interval: Option<String>,
    pub cron: Option<String>,
    pub tz: String,
    /// `null`: one interval.
    pub grace: Option<String>,
    pub active_hours: Vec<WindowInput>,
    pub zero_items_after: Option<String>,
    pub zero_items_runs: Option<u32>,
    pub failure_threshold: u32,
    pub recovery_threshold: u32,
    /// `null`: the grace.
    pub max_runtime: Option<String>,
    pub alert_on_overlap: bool,
    pub manual_resume: bool,
    pub methods: &'static str,
    pub status: Status,
    pub reason: Option<Reason>,
    pub running: bool,
    pub quiet: bool,
    pub n_pings: i64,
    pub last_ping: Option<String>,
    pub last_success: Option<String>,
    pub last_items: Option<i64>,
    pub last_duration: Option<f64>,
    pub next_due: Option<String>,
    pub ping_url: String,
}

impl CheckView {
    /// The resource with its status evaluated live, with the same pure core
    /// the evaluator uses.
    fn new(check: Check, base_url: &str, unobserved: &[Span], cache: &mut RulesCache) -> CheckView {
        let now = Utc::now();
        let eval = Rules::from_spec_cached(&check.spec, cache)
            .map(|rules| evaluate(&rules, &check.summary, check.paused, unobserved, now));
        let (status, reason, quiet, due) = match &eval {
            Ok(e) => (e.status, e.reason, e.quiet, e.due),
            Err(_) => (Status::New, None, false, None),
        };
        let s = &check.summary;
        let spec = check.spec;
        CheckView {
            uuid: check.uuid,
            ping_url: format!("{base_url}/ping/{}", check.uuid),
            interval: spec.interval().map(format_duration),
            cron: spec.cron().map(str::to_string),
            grace: spec.grace.map(format_duration),
            zero_items_after: spec.zero_items_after.map(format_duration),
            max_runtime: spec.max_runtime.map(format_duration),
            methods: spec.methods.as_str(),
            slug: spec.slug,
            name: spec.name,
            description: spec.description,
            labels: spec.labels,
            tz: spec.tz,
            active_hours: spec.active_hours,
            zero_items_runs: spec.zero_items_runs,
            failure_threshold: spec.failure_threshold,
            recovery_threshold: spec.recovery_threshold,
            alert_on_overlap: spec.alert_on_overlap,
            manual_resume: spec.manual_resume,
            status,
            reason,
            running: !s.open_runs.is_empty(),
            quiet,
            n_pings: s.n_pings,
            last_ping: s.last_ping_at.map(rfc3339),
            last_success: s.last_success_at.map(rfc3339),
            last_items: s.last_items,
            last_duration: s.last_duration_ms.map(|ms| ms as f64 / 1000.0),
            next_due: due.map(|t| rfc3339(t.timestamp_millis())),
        }
    }
}

/// An instant as RFC 3339 in UTC with milliseconds.
pub fn rfc3339(ms: UnixMs) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

#[derive(Serialize)]
struct CheckList {
    checks: Vec<CheckView>,
}

async fn list_checks(
    State(state): State<AppState>,
    _: ReadAccess,
) -> Result<Json<CheckList>, AppError> {
    let checks = state.store.list_checks().await?;
    let spans = state.observed.spans();
    let base = &state.config.base_url;
    let mut cache = RulesCache::default();
    Ok(Json(CheckList {
        checks: checks
            .into_iter()
            .map(|c| CheckView::new(c, base, &spans, &mut cache))
            .collect(),
    }))
}

async fn create_check(
    State(state): State<AppState>,
    _: WriteAccess,
    body: Bytes,
) -> Result<(StatusCode, Json<CheckView>), AppError> {
    let input: CheckInput = parse_json(&body)?;
    let spec = CheckSpec::from_input(input).map_err(AppError::Invalid)?;
    let now = Utc::now().timestamp_millis();
    let check = state
        .store
        .create_check(&spec, CheckSource::Api, now)
        .await
        .map_err(|e| match e {
            crate::store::StoreError::Conflict(_) => AppError::Conflict(match &spec.slug {
                Some(slug) => format!("a check with slug {slug:?} or this uuid already exists"),
                None => "a check with this uuid already exists".to_string(),
            }),
            other => other.into(),
        })?;
    state.ingest.remember(CheckRef {
        id: check.id,
        uuid: check.uuid,
        slug: check.spec.slug.clone(),
    });
    state.evaluator.notify(Notice::Changed(check.id));
    Ok((StatusCode::CREATED, Json(view(&state, check))))
}

async fn get_check(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(uuid): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    let check = find(&state, &uuid).await?;
    Ok(Json(view(&state, check)))
}

fn view(state: &AppState, check: Check) -> CheckView {
    CheckView::new(
        check,
        &state.config.base_url,
        &state.observed.spans(),
        &mut RulesCache::default(),
    )
}

async fn pause_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(uuid): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    set_paused(state, &uuid, true).await
}

async fn resume_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(uuid): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    set_paused(state, &uuid, false).await
}

async fn set_paused(
    state: AppState,
    uuid: &str,
    paused: bool,
) -> Result<Json<CheckView>, AppError> {
    let check = find(&state, uuid).await?;
    state.store.set_paused(check.id, paused).await?;
    state.evaluator.notify(Notice::Changed(check.id));
    let check = find(&state, uuid).await?;
    Ok(Json(view(&state, check)))
}

#[derive(Deserialize)]
struct Limit {
    limit: Option<u32>,
}

#[derive(Serialize)]
struct PingView {
    n: i64,
    #[serde(rename = "type")]
    kind: &'static str,
    date: String,
    exit_status: Option<i64>,
    items: Option<i64>,
    rid: Option<String>,
    method: String,
    remote_addr: Option<String>,
    ua: Option<String>,
    scheme: String,
    duration: Option<f64>,
    /// The body as text when it is UTF-8.
    body: Option<String>,
    /// The body as hex when it is not UTF-8.
    body_hex: Option<String>,
    body_size: usize,
}

impl From<PingRecord> for PingView {
    fn from(p: PingRecord) -> Self {
        let body_size = p.body.len();
        let (body, body_hex) = match String::from_utf8(p.body) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(hex::encode(e.into_bytes()))),
        };
        PingView {
            n: p.n,
            kind: p.kind.as_str(),
            date: rfc3339(p.at),
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
        }
    }
}

#[derive(Serialize)]
struct PingList {
    pings: Vec<PingView>,
}

async fn list_pings(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(uuid): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<PingList>, AppError> {
    let check = find(&state, &uuid).await?;
    let pings = state.store.list_pings(check.id, limit(&q)).await?;
    Ok(Json(PingList {
        pings: pings.into_iter().map(PingView::from).collect(),
    }))
}

#[derive(Serialize)]
struct RunView {
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

#[derive(Serialize)]
struct RunList {
    runs: Vec<RunView>,
}

async fn list_runs(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(uuid): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<RunList>, AppError> {
    let check = find(&state, &uuid).await?;
    let runs = state.store.list_runs(check.id, limit(&q)).await?;
    Ok(Json(RunList {
        runs: runs.into_iter().map(RunView::from).collect(),
    }))
}

#[derive(Serialize)]
struct FlipView {
    at: String,
    from: String,
    to: String,
    reason: Option<String>,
}

#[derive(Serialize)]
struct FlipList {
    flips: Vec<FlipView>,
}

async fn list_flips(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(uuid): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<FlipList>, AppError> {
    let check = find(&state, &uuid).await?;
    let flips = state.store.list_flips(check.id, limit(&q)).await?;
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

#[derive(Serialize)]
struct IncidentView {
    id: i64,
    opened: String,
    status: String,
    reason: Option<String>,
    resolved: Option<String>,
}

#[derive(Serialize)]
struct IncidentList {
    incidents: Vec<IncidentView>,
}

async fn list_incidents(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(uuid): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<IncidentList>, AppError> {
    let check = find(&state, &uuid).await?;
    let incidents = state.store.list_incidents(check.id, limit(&q)).await?;
    Ok(Json(IncidentList {
        incidents: incidents
            .into_iter()
            .map(|i| IncidentView {
                id: i.id,
                opened: rfc3339(i.opened_at),
                status: i.status,
                reason: i.reason,
                resolved: i.resolved_at.map(rfc3339),
            })
            .collect(),
    }))
}

#[derive(Serialize)]
struct EventView {
    at: String,
    kind: String,
    detail: Option<String>,
}

#[derive(Serialize)]
struct EventList {
    events: Vec<EventView>,
}

async fn list_events(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(uuid): Path<String>,
    Query(q): Query<Limit>,
) -> Result<Json<EventList>, AppError> {
    let check = find(&state, &uuid).await?;
    let events = state.store.list_events(check.id, limit(&q)).await?;
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

fn limit(q: &Limit) -> u32 {
    q.limit.unwrap_or(100).min(1000)
}

async fn find(state: &AppState, uuid: &str) -> Result<Check, AppError> {
    let uuid = Uuid::parse_str(uuid)
        .map_err(|_| AppError::BadRequest(format!("{uuid:?} is not a check UUID")))?;
    state.store.check_by_uuid(uuid).await.map_err(|e| match e {
        crate::store::StoreError::NotFound => {
            AppError::NotFound(format!("no check with uuid {uuid}"))
        }
        other => other.into(),
    })
}

/// Parses a JSON body, naming the field at fault on a type error.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() || path.is_empty() || path == "." {
            AppError::BadRequest(format!("invalid JSON body: {inner}"))
        } else {
            AppError::Invalid(vec![FieldError {
                field: path,
                message: inner.to_string(),
            }])
        }
    })
}
