//! The native management API under `/api/v1` (SPEC §5): checks, their pings,
//! runs, flips, incidents and events. Every handler carries its OpenAPI
//! description, so `/api/v1/openapi.json` is generated from the routes.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::{ReadAccess, WriteAccess};
use super::error::{AppError, ErrorBody};
use super::AppState;
use crate::domain::check::Check;
use crate::domain::check::{format_duration, CheckInput, CheckSpec, FieldError, WindowInput};
use crate::domain::evaluate::{evaluate, Rules, RulesCache, Span};
use crate::domain::fold::{PingRecord, RunRecord};
use crate::domain::ping::UnixMs;
use crate::domain::status::{Reason, Status};
use crate::store::{CheckSource, StoreError};

/// The check routes, relative to `/api/v1`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_checks, create_check))
        .routes(routes!(get_check, update_check, upsert_check, delete_check))
        .routes(routes!(pause_check))
        .routes(routes!(resume_check))
        .routes(routes!(list_pings))
        .routes(routes!(ping_body))
        .routes(routes!(list_runs))
        .routes(routes!(list_flips))
        .routes(routes!(list_incidents))
        .routes(routes!(list_events))
}

/// One active-hours window.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct WindowDoc {
    /// Local start time, `HH:MM`.
    start: String,
    /// Local end time, `HH:MM`; before `start` means the window crosses midnight.
    end: String,
    /// Days the window starts on (`mon`, `mon-fri`, …); empty: every day.
    days: Vec<String>,
}

/// A check as written in a request (and in the config file's `[[checks]]`).
/// Durations are humantime strings (`"30s"`, `"2h"`).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CheckInputDoc {
    /// Given only to choose the uuid of a new check.
    uuid: Option<String>,
    /// Unique; lowercase letters, digits, `-` and `_`.
    slug: Option<String>,
    name: Option<String>,
    description: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    /// Expected period between successes (default `1d`); excludes `cron`.
    interval: Option<String>,
    /// Cron expression (5 fields, or 6 with seconds); excludes `interval`.
    cron: Option<String>,
    /// IANA time zone (default `UTC`).
    tz: Option<String>,
    /// How long past due before `down` (default: one interval).
    grace: Option<String>,
    active_hours: Option<Vec<WindowDoc>>,
    zero_items_after: Option<String>,
    zero_items_runs: Option<u32>,
    failure_threshold: Option<u32>,
    recovery_threshold: Option<u32>,
    max_runtime: Option<String>,
    alert_on_overlap: Option<bool>,
    manual_resume: Option<bool>,
    /// `""` (any method) or `"POST"`.
    methods: Option<String>,
}

/// The check resource as the API returns it: the config fields plus read-only state.
#[derive(Debug, Serialize, ToSchema)]
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
    #[schema(value_type = Vec<WindowDoc>)]
    pub active_hours: Vec<WindowInput>,
    pub zero_items_after: Option<String>,
    pub zero_items_runs: Option<u32>,
    pub failure_threshold: u32,
    pub recovery_threshold: u32,
    /// `null`: the grace.
    pub max_runtime: Option<String>,
    pub alert_on_overlap: bool,
    pub manual_resume: bool,
    #[schema(value_type = String)]
    pub methods: &'static str,
    /// `api`, `config` (declared in the config file) or `ping` (created by `?create=1`).
    pub source: String,
    pub paused: bool,
    /// `new`, `up`, `late`, `down`, `stalled` or `paused`.
    #[schema(value_type = String)]
    pub status: Status,
    /// Why a check is down: `overdue`, `failed` or `run_timeout`.
    #[schema(value_type = Option<String>)]
    pub reason: Option<Reason>,
    pub running: bool,
    pub quiet: bool,
    pub n_pings: i64,
    pub last_ping: Option<String>,
    pub last_success: Option<String>,
    pub last_items: Option<i64>,
    /// Seconds.
    pub last_duration: Option<f64>,
    pub next_due: Option<String>,
    pub ping_url: String,
}

impl CheckView {
    /// The resource with its status evaluated live, with the same pure core
    /// the evaluator uses.
    pub fn new(
        check: Check,
        base_url: &str,
        unobserved: &[Span],
        cache: &mut RulesCache,
    ) -> CheckView {
        let now = crate::clock::now();
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
            source: check.source,
            paused: check.paused,
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

/// A check's definition as a request would give it: what PATCH merges into.
pub fn input_json(spec: &CheckSpec) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        if !v.is_null() {
            m.insert(k.to_string(), v);
        }
    };
    put("uuid", serde_json::json!(spec.uuid));
    put("slug", serde_json::json!(spec.slug));
    put("name", serde_json::json!(spec.name));
    put("description", serde_json::json!(spec.description));
    put("labels", serde_json::json!(spec.labels));
    put(
        "interval",
        serde_json::json!(spec.interval().map(format_duration)),
    );
    put("cron", serde_json::json!(spec.cron()));
    put("tz", serde_json::json!(spec.tz));
    put("grace", serde_json::json!(spec.grace.map(format_duration)));
    put("active_hours", serde_json::json!(spec.active_hours));
    put(
        "zero_items_after",
        serde_json::json!(spec.zero_items_after.map(format_duration)),
    );
    put("zero_items_runs", serde_json::json!(spec.zero_items_runs));
    put(
        "failure_threshold",
        serde_json::json!(spec.failure_threshold),
    );
    put(
        "recovery_threshold",
        serde_json::json!(spec.recovery_threshold),
    );
    put(
        "max_runtime",
        serde_json::json!(spec.max_runtime.map(format_duration)),
    );
    put("alert_on_overlap", serde_json::json!(spec.alert_on_overlap));
    put("manual_resume", serde_json::json!(spec.manual_resume));
    put("methods", serde_json::json!(spec.methods.as_str()));
    m
}

/// An instant as RFC 3339 in UTC with milliseconds.
pub fn rfc3339(ms: UnixMs) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// A list of checks.
#[derive(Serialize, ToSchema)]
pub struct CheckList {
    checks: Vec<CheckView>,
}

/// Filters of the check list; repeated filters must all match.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct ListFilters {
    /// `name=value` (the label has this value) or `name` (the label is set); repeatable.
    label: Option<Vec<String>>,
    /// `new`, `up`, `late`, `down`, `stalled` or `paused`; repeatable: any of them.
    status: Option<Vec<String>>,
    /// Only the check with this slug.
    slug: Option<String>,
}

const STATUSES: &[&str] = &["new", "up", "late", "down", "stalled", "paused"];

#[utoipa::path(get, path = "/checks", tag = "checks",
    summary = "List checks",
    params(ListFilters),
    responses(
        (status = 200, description = "The checks, oldest first", body = CheckList),
        (status = 400, description = "A bad filter", body = ErrorBody),
        (status = 401, description = "No key or a wrong key", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_checks(
    State(state): State<AppState>,
    _: ReadAccess,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<CheckList>, AppError> {
    let mut labels: Vec<(String, Option<String>)> = Vec::new();
    let mut statuses: Vec<String> = Vec::new();
    let mut slug = None;
    for (k, v) in query {
        match k.as_str() {
            "label" => labels.push(match v.split_once('=') {
                Some((n, val)) => (n.to_string(), Some(val.to_string())),
                None => (v, None),
            }),
            "status" => {
                for s in v.split(',') {
                    if !STATUSES.contains(&s) {
                        return Err(AppError::Invalid(vec![FieldError {
                            field: "status".into(),
                            message: format!("{s:?} is not one of {}", STATUSES.join(", ")),
                        }]));
                    }
                    statuses.push(s.to_string());
                }
            }
            "slug" => slug = Some(v),
            other => {
                return Err(AppError::BadRequest(format!(
                    "{other}: unknown filter (use label, status or slug)"
                )))
            }
        }
    }
    let checks = state.store.list_checks().await?;
    let spans = state.observed.spans();
    let base = &state.config.base_url;
    let mut cache = RulesCache::default();
    let checks = checks
        .into_iter()
        .filter(|c| slug.is_none() || c.spec.slug == slug)
        .filter(|c| {
            labels.iter().all(|(n, v)| match (c.spec.labels.get(n), v) {
                (Some(have), Some(want)) => have == want,
                (Some(_), None) => true,
                (None, _) => false,
            })
        })
        .map(|c| CheckView::new(c, base, &spans, &mut cache))
        .filter(|v| statuses.is_empty() || statuses.iter().any(|s| s == v.status.as_str()))
        .collect();
    Ok(Json(CheckList { checks }))
}

#[utoipa::path(post, path = "/checks", tag = "checks",
    summary = "Create a check",
    request_body = CheckInputDoc,
    responses(
        (status = 201, description = "Created", body = CheckView),
        (status = 400, description = "Invalid fields, each named", body = ErrorBody),
        (status = 409, description = "The slug or uuid is taken", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn create_check(
    State(state): State<AppState>,
    _: WriteAccess,
    body: Bytes,
) -> Result<(StatusCode, Json<CheckView>), AppError> {
    let input: CheckInput = parse_json(&body)?;
    let spec = CheckSpec::from_input(input).map_err(AppError::Invalid)?;
    let check = create(&state, &spec, CheckSource::Api).await?;
    Ok((StatusCode::CREATED, Json(view(&state, check))))
}

/// Creates a check (through [`crate::checks::Checks`]), with the API's errors.
pub async fn create(
    state: &AppState,
    spec: &CheckSpec,
    source: CheckSource,
) -> Result<Check, AppError> {
    let now = crate::clock::now_ms();
    state
        .checks
        .create(spec, source, now)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => conflict(spec),
            other => other.into(),
        })
}

fn conflict(spec: &CheckSpec) -> AppError {
    AppError::Conflict(match &spec.slug {
        Some(slug) => format!("a check with slug {slug:?} or this uuid already exists"),
        None => "a check with this uuid already exists".to_string(),
    })
}

/// Replaces a check's definition (through [`crate::checks::Checks`]) and
/// returns it as stored after that, with the API's errors.
pub async fn replace(state: &AppState, old: &Check, spec: &CheckSpec) -> Result<Check, AppError> {
    let now = crate::clock::now_ms();
    state
        .checks
        .update(old, spec, now)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => conflict(spec),
            StoreError::NotFound => gone(old),
            other => other.into(),
        })
}

/// Deletes a check (through [`crate::checks::Checks`]).
pub async fn remove(state: &AppState, check: &Check) -> Result<(), AppError> {
    state.checks.delete(check).await.map_err(|e| match e {
        StoreError::NotFound => gone(check),
        other => other.into(),
    })
}

/// Pauses or resumes a check (through [`crate::checks::Checks`]) and returns
/// it as stored after that.
pub async fn pause(state: &AppState, check: &Check, paused: bool) -> Result<Check, AppError> {
    let now = crate::clock::now_ms();
    state
        .checks
        .set_paused(check, paused, now)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => gone(check),
            other => other.into(),
        })
}

/// A check that went away between its lookup and a write.
fn gone(check: &Check) -> AppError {
    AppError::NotFound(format!("no check with uuid {}", check.uuid))
}

#[utoipa::path(get, path = "/checks/{check}", tag = "checks",
    summary = "Get a check",
    params(("check" = String, Path, description = "The check's uuid or slug")),
    responses(
        (status = 200, description = "The check", body = CheckView),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn get_check(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(key): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    let check = find(&state, &key).await?;
    Ok(Json(view(&state, check)))
}

fn refuse_config(check: &Check) -> Result<(), AppError> {
    if check.source == "config" {
        return Err(AppError::Conflict(format!(
            "check {} is declared in the config file; change it there",
            check.spec.slug.as_deref().unwrap_or_default()
        )));
    }
    Ok(())
}

#[utoipa::path(patch, path = "/checks/{check}", tag = "checks",
    summary = "Update a check (JSON merge patch)",
    description = "Only the given fields change; a field set to `null` goes back to its default. \
                   Giving `interval` drops `cron` and the other way round.",
    params(("check" = String, Path, description = "The check's uuid or slug")),
    request_body = CheckInputDoc,
    responses(
        (status = 200, description = "The updated check", body = CheckView),
        (status = 400, description = "Invalid fields, each named", body = ErrorBody),
        (status = 404, description = "No such check", body = ErrorBody),
        (status = 409, description = "The new slug is taken, or the check is declared in the config file", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn update_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Json<CheckView>, AppError> {
    let check = find(&state, &key).await?;
    refuse_config(&check)?;
    let patch: Map<String, Value> = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            return Err(AppError::BadRequest(
                "the body must be a JSON object".into(),
            ))
        }
        Err(e) => return Err(AppError::BadRequest(format!("invalid JSON body: {e}"))),
    };
    let spec = merge_patch(&check, patch)?;
    let check = replace(&state, &check, &spec).await?;
    Ok(Json(view(&state, check)))
}

/// Applies a JSON merge patch (RFC 7396) to a check's definition.
pub fn merge_patch(check: &Check, patch: Map<String, Value>) -> Result<CheckSpec, AppError> {
    let mut merged = input_json(&check.spec);
    if let Some(u) = patch.get("uuid") {
        if u.as_str() != Some(check.uuid.to_string().as_str()) {
            return Err(AppError::Invalid(vec![FieldError {
                field: "uuid".into(),
                message: "a check's uuid cannot change".into(),
            }]));
        }
    }
    for (k, v) in patch {
        match k.as_str() {
            "interval" if !v.is_null() => {
                merged.remove("cron");
            }
            "cron" if !v.is_null() => {
                merged.remove("interval");
            }
            _ => {}
        }
        if v.is_null() {
            merged.remove(&k);
        } else {
            merged.insert(k, v);
        }
    }
    let body = serde_json::to_vec(&Value::Object(merged)).unwrap_or_default();
    let input: CheckInput = parse_json(&body)?;
    CheckSpec::from_input(input).map_err(AppError::Invalid)
}

#[utoipa::path(put, path = "/checks/{check}", tag = "checks",
    summary = "Create or replace a check by slug",
    description = "Idempotent: creates the check with this slug (201) or replaces its whole \
                   definition (200); absent fields take their defaults.",
    params(("check" = String, Path, description = "The check's slug")),
    request_body = CheckInputDoc,
    responses(
        (status = 200, description = "Replaced", body = CheckView),
        (status = 201, description = "Created", body = CheckView),
        (status = 400, description = "Invalid fields, each named", body = ErrorBody),
        (status = 409, description = "The check is declared in the config file", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn upsert_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(slug): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<CheckView>), AppError> {
    if let Err(e) = crate::domain::check::validate_slug(&slug) {
        return Err(AppError::Invalid(vec![FieldError {
            field: "slug".into(),
            message: format!("{e} (PUT /checks/{{slug}} creates or replaces by slug)"),
        }]));
    }
    let mut input: CheckInput = parse_json(&body)?;
    if input.slug.as_ref().is_some_and(|s| s != &slug) {
        return Err(AppError::Invalid(vec![FieldError {
            field: "slug".into(),
            message: "does not match the slug in the URL".into(),
        }]));
    }
    input.slug = Some(slug.clone());
    let mut spec = CheckSpec::from_input(input).map_err(AppError::Invalid)?;
    match state.store.check_ref_by_slug(&slug).await? {
        None => {
            let check = create(&state, &spec, CheckSource::Api).await?;
            Ok((StatusCode::CREATED, Json(view(&state, check))))
        }
        Some(r) => {
            let check = state.store.check_by_uuid(r.uuid).await?;
            refuse_config(&check)?;
            if spec.uuid.is_some_and(|u| u != check.uuid) {
                return Err(AppError::Invalid(vec![FieldError {
                    field: "uuid".into(),
                    message: "a check's uuid cannot change".into(),
                }]));
            }
            spec.uuid = Some(check.uuid);
            let check = replace(&state, &check, &spec).await?;
            Ok((StatusCode::OK, Json(view(&state, check))))
        }
    }
}

#[utoipa::path(delete, path = "/checks/{check}", tag = "checks",
    summary = "Delete a check with its pings, runs, flips and incidents",
    params(("check" = String, Path, description = "The check's uuid or slug")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such check", body = ErrorBody),
        (status = 409, description = "The check is declared in the config file", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn delete_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(key): Path<String>,
) -> Result<StatusCode, AppError> {
    let check = find(&state, &key).await?;
    refuse_config(&check)?;
    remove(&state, &check).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The check as the API shows it.
pub fn view(state: &AppState, check: Check) -> CheckView {
    CheckView::new(
        check,
        &state.config.base_url,
        &state.observed.spans(),
        &mut RulesCache::default(),
    )
}

#[utoipa::path(post, path = "/checks/{check}/pause", tag = "checks",
    summary = "Pause a check: no alerts until resumed (or pinged, unless manual_resume)",
    params(("check" = String, Path, description = "The check's uuid or slug")),
    responses(
        (status = 200, description = "The paused check", body = CheckView),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn pause_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(key): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    set_paused(state, &key, true).await
}

#[utoipa::path(post, path = "/checks/{check}/resume", tag = "checks",
    summary = "Resume a paused check",
    params(("check" = String, Path, description = "The check's uuid or slug")),
    responses(
        (status = 200, description = "The resumed check", body = CheckView),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn resume_check(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(key): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    set_paused(state, &key, false).await
}

async fn set_paused(state: AppState, key: &str, paused: bool) -> Result<Json<CheckView>, AppError> {
    let check = find(&state, key).await?;
    let check = pause(&state, &check, paused).await?;
    Ok(Json(view(&state, check)))
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
    /// `success`, `start`, `fail`, `log` or `ign` (ignored).
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
            body_url: (body_size > 0).then(|| format!("{body_base}/{}/body", p.n)),
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
    params(("check" = String, Path, description = "The check's uuid or slug"), PingPage),
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
    let base = format!(
        "{}/api/v1/checks/{}/pings",
        state.config.base_url, check.uuid
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
        ("check" = String, Path, description = "The check's uuid or slug"),
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
    params(("check" = String, Path, description = "The check's uuid or slug"), Limit),
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
    params(("check" = String, Path, description = "The check's uuid or slug"), Limit),
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
}

/// Incidents, newest first.
#[derive(Serialize, ToSchema)]
pub struct IncidentList {
    incidents: Vec<IncidentView>,
}

#[utoipa::path(get, path = "/checks/{check}/incidents", tag = "checks",
    summary = "A check's incidents, newest first",
    params(("check" = String, Path, description = "The check's uuid or slug"), Limit),
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
    params(("check" = String, Path, description = "The check's uuid or slug"), Limit),
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

/// The check with this uuid or slug.
pub async fn find(state: &AppState, key: &str) -> Result<Check, AppError> {
    if let Ok(uuid) = Uuid::parse_str(key) {
        match state.store.check_by_uuid(uuid).await {
            Ok(c) => return Ok(c),
            // A slug may be spelled like a uuid: look it up as one too.
            Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let not_found = || AppError::NotFound(format!("no check with uuid or slug {key:?}"));
    let Some(r) = state.store.check_ref_by_slug(key).await? else {
        return Err(not_found());
    };
    state
        .store
        .check_by_uuid(r.uuid)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => not_found(),
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
