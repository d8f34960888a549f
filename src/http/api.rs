//! The native management API under `/api/v1` (SPEC §5): checks (what was
//! recorded of them, their pings, runs, flips, incidents and events, is in
//! history.rs). Every handler carries its OpenAPI description, so
//! `/api/v1/openapi.json` is generated from the routes.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
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
use crate::domain::check::{
    format_duration, format_weeks, CheckInput, CheckSpec, FieldError, WindowInput,
};
use crate::domain::evaluate::{evaluate_in, Rules, RulesCache};
use crate::domain::ping::UnixMs;
use crate::domain::status::{Reason, Status};
use crate::domain::timeline::Observation;
use crate::store::{CheckSource, StoreError};

/// The check routes, relative to `/api/v1`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_checks, create_check))
        .routes(routes!(get_check, update_check, upsert_check, delete_check))
        .routes(routes!(pause_check))
        .routes(routes!(resume_check))
        .merge(super::history::router())
        .merge(super::slots::router())
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
    /// Refused for a new check (the server draws its uuid; only the config
    /// file may choose one); on a replace it must be the check's own.
    uuid: Option<String>,
    /// Unique; lowercase letters, digits, `-` and `_`.
    slug: Option<String>,
    name: Option<String>,
    description: Option<String>,
    /// At most 64; names follow Prometheus's rules, at most 128 bytes;
    /// values at most 1024 bytes.
    labels: Option<BTreeMap<String, String>>,
    /// Expected period between successes (default `1d`); excludes `cron`.
    interval: Option<String>,
    /// Cron expression (5 fields, or 6 with seconds); excludes `interval`.
    cron: Option<String>,
    /// IANA time zone (default `UTC`).
    tz: Option<String>,
    /// How long past due before `down` (default: one interval).
    grace: Option<String>,
    /// At most 64 windows.
    active_hours: Option<Vec<WindowDoc>>,
    zero_items_after: Option<String>,
    zero_items_runs: Option<u32>,
    /// The item floor (at least 1): `stalled` (`low_items`) after
    /// `min_items_runs` counted successes in a row each reporting fewer items.
    min_items: Option<u64>,
    /// 1 to 1000 (default 1); only with `min_items` or `items_below_usual`.
    min_items_runs: Option<u32>,
    /// A fraction above 0 and at most 1: `stalled` (`below_usual`) after
    /// `min_items_runs` counted successes in a row each reporting fewer than
    /// this fraction of the usual count for their local hour of the week.
    items_below_usual: Option<f64>,
    /// The history the usual count looks at: whole weeks, `3w` to `52w`
    /// (default `4w`); only with `items_below_usual`.
    items_window: Option<String>,
    /// A success that finishes a run in less than this (at least `1s`) is a
    /// failed run, reason `finished too fast`.
    min_runtime: Option<String>,
    failure_threshold: Option<u32>,
    recovery_threshold: Option<u32>,
    max_runtime: Option<String>,
    alert_on_overlap: Option<bool>,
    /// Lock seats of the job guard (default 1): runs that may hold the lock at once.
    max_instances: Option<u32>,
    /// Raise `OverdueDuplicateRun` when a slot has more runs than
    /// `max_instances` (default false).
    alert_on_duplicate: Option<bool>,
    manual_resume: Option<bool>,
    /// `""` (any method) or `"POST"`.
    methods: Option<String>,
    /// Slugs of the checks this one depends on (at most 64): while one of
    /// them is `down` or `stalled`, this check's alerts are held back. Each
    /// must be an existing check's slug, and no cycle may form.
    depends_on: Option<Vec<String>>,
}

/// The check resource as the API returns it: the config fields plus read-only state.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckView {
    /// Only for write keys: the uuid is the check's ping capability.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub uuid: Option<Uuid>,
    /// healthchecks' read-only id of the check (a hash of its uuid): how
    /// read keys, metrics, alerts and badges name a check without a slug.
    pub unique_key: String,
    pub slug: Option<String>,
    pub name: String,
    pub description: String,
    pub labels: BTreeMap<String, String>,
    pub interval: Option<String>,
    pub cron: Option<String>,
    pub tz: String,
    /// The grace in force: the configured one, or by default one interval
    /// (for a cron check, the gap from the due fire time to the next);
    /// `null` only for a cron check not yet due. Write `null` for the default.
    pub grace: Option<String>,
    /// Whether `grace` is the default (none was configured).
    pub grace_default: bool,
    #[schema(value_type = Vec<WindowDoc>)]
    pub active_hours: Vec<WindowInput>,
    pub zero_items_after: Option<String>,
    pub zero_items_runs: Option<u32>,
    pub min_items: Option<u64>,
    /// Set (default 1) exactly when `min_items` or `items_below_usual` is.
    pub min_items_runs: Option<u32>,
    pub items_below_usual: Option<f64>,
    /// Set (default `4w`) exactly when `items_below_usual` is.
    pub items_window: Option<String>,
    pub min_runtime: Option<String>,
    pub failure_threshold: u32,
    pub recovery_threshold: u32,
    /// `null`: the grace.
    pub max_runtime: Option<String>,
    pub alert_on_overlap: bool,
    pub max_instances: u32,
    pub alert_on_duplicate: bool,
    pub manual_resume: bool,
    #[schema(value_type = String)]
    pub methods: &'static str,
    pub depends_on: Vec<String>,
    /// `api`, `config` (declared in the config file) or `ping` (created by `?create=1`).
    pub source: String,
    pub paused: bool,
    /// `new`, `up`, `late`, `down`, `stalled` or `paused`.
    #[schema(value_type = String)]
    pub status: Status,
    /// Why a check is down (`overdue`, `failed`, `run_timeout`) or stalled
    /// (`zero_items`, `low_items`).
    #[schema(value_type = Option<String>)]
    pub reason: Option<Reason>,
    pub running: bool,
    pub quiet: bool,
    pub n_pings: i64,
    pub last_ping: Option<String>,
    pub last_success: Option<String>,
    pub last_items: Option<i64>,
    /// The usual count in force (`items_below_usual`): the one the last
    /// counted success was judged against; `null` when it was not judged
    /// (fewer than 3 weeks had its hour of the week) or without the rule.
    pub usual_items: Option<f64>,
    /// Seconds.
    pub last_duration: Option<f64>,
    pub next_due: Option<String>,
    /// Only for write keys (with `uuid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ping_url: Option<String>,
    /// The checks (by slug, or unique_key without one) whose alerts hold this
    /// check's open incident back; empty when nothing holds it.
    pub inhibited_by: Vec<String>,
    /// The job guard's held lock seats, soonest expiry first (SPEC §13);
    /// given when one check is read (`GET /checks/{check}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<LockView>>,
}

impl CheckView {
    /// The resource as `access` may see it: without the uuid and the ping
    /// URL (the check's ping capability) unless it may write.
    pub fn seen_by(mut self, access: &ReadAccess) -> CheckView {
        if !access.writer {
            self.uuid = None;
            self.ping_url = None;
        }
        self
    }
}

/// A held lock seat.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockView {
    /// The fencing token: it only grows per check.
    pub token: i64,
    pub holder: String,
    pub acquired: String,
    /// When the seat frees unless its holder renews it.
    pub expires: String,
}

impl CheckView {
    /// The resource with its status evaluated live, with the same pure core
    /// the evaluator uses.
    pub fn new(
        check: Check,
        base_url: &str,
        observed: &Observation,
        cache: &mut RulesCache,
    ) -> CheckView {
        let now = crate::clock::now();
        let eval = Rules::from_spec_cached(&check.spec, cache).map(|rules| {
            evaluate_in(
                &rules,
                &check.summary,
                check.paused,
                &observed.unobserved,
                &observed.slewed,
                now,
            )
        });
        let (status, reason, quiet, due) = match &eval {
            Ok(e) => (e.status, e.reason, e.quiet, e.due),
            Err(_) => (Status::New, None, false, None),
        };
        let grace = eval
            .as_ref()
            .ok()
            .and_then(|e| e.grace)
            .and_then(|g| g.to_std().ok())
            .or(check.spec.grace)
            .or(check.spec.interval());
        let s = &check.summary;
        let spec = check.spec;
        let spec_has_usual = spec.items_below_usual_ppm.is_some();
        let items_below_usual = spec.items_below_usual();
        let items_window = spec
            .items_below_usual_ppm
            .map(|_| format_weeks(spec.effective_items_window()));
        CheckView {
            uuid: Some(check.uuid),
            unique_key: crate::domain::name::unique_key(check.uuid),
            ping_url: Some(format!("{base_url}/ping/{}", check.uuid)),
            interval: spec.interval().map(format_duration),
            cron: spec.cron().map(str::to_string),
            grace: grace.map(format_duration),
            grace_default: spec.grace.is_none(),
            zero_items_after: spec.zero_items_after.map(format_duration),
            max_runtime: spec.max_runtime.map(format_duration),
            min_runtime: spec.min_runtime.map(format_duration),
            methods: spec.methods.as_str(),
            slug: spec.slug,
            name: spec.name,
            description: spec.description,
            labels: spec.labels,
            tz: spec.tz,
            active_hours: spec.active_hours,
            zero_items_runs: spec.zero_items_runs,
            min_items: spec.min_items,
            min_items_runs: spec.min_items_runs,
            items_below_usual,
            items_window,
            failure_threshold: spec.failure_threshold,
            recovery_threshold: spec.recovery_threshold,
            alert_on_overlap: spec.alert_on_overlap,
            max_instances: spec.max_instances,
            alert_on_duplicate: spec.alert_on_duplicate,
            manual_resume: spec.manual_resume,
            depends_on: spec.depends_on,
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
            usual_items: s.usual_items.filter(|_| spec_has_usual),
            last_duration: s.last_duration_ms.map(|ms| ms as f64 / 1000.0),
            next_due: due.map(|t| rfc3339(t.timestamp_millis())),
            inhibited_by: check.inhibited_by,
            locks: None,
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
    put("min_items", serde_json::json!(spec.min_items));
    // Left out at its default, so that a patch removing `min_items` alone
    // does not leave a `min_items_runs` without it.
    put(
        "min_items_runs",
        serde_json::json!(spec.min_items_runs.filter(|k| *k != 1)),
    );
    put(
        "items_below_usual",
        serde_json::json!(spec.items_below_usual()),
    );
    // Left out at its default, like min_items_runs.
    put(
        "items_window",
        serde_json::json!(spec.items_window.map(format_weeks)),
    );
    put(
        "min_runtime",
        serde_json::json!(spec.min_runtime.map(format_duration)),
    );
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
    put("max_instances", serde_json::json!(spec.max_instances));
    put(
        "alert_on_duplicate",
        serde_json::json!(spec.alert_on_duplicate),
    );
    put("manual_resume", serde_json::json!(spec.manual_resume));
    put("methods", serde_json::json!(spec.methods.as_str()));
    put("depends_on", serde_json::json!(spec.depends_on));
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
    access: ReadAccess,
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
    let spans = state.observed.observation();
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
        .map(|c| CheckView::new(c, base, &spans, &mut cache).seen_by(&access))
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
        (status = 409, description = "The slug is taken", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn create_check(
    State(state): State<AppState>,
    _: WriteAccess,
    body: Bytes,
) -> Result<(StatusCode, Json<CheckView>), AppError> {
    let input: CheckInput = parse_json(&body)?;
    refuse_chosen_uuid(&input)?;
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
    let _graph = check_depends(state, spec, None).await?;
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

/// Refuses a `depends_on` that names a slug no check has or closes a cycle
/// (SPEC §6.2), judged against the stored checks with this one written
/// (`old` is the check it replaces). On success the graph lock is held, to
/// be kept until the write is done. A check that depends on nothing cannot
/// be on a cycle, so it is let through without a look at the others.
async fn check_depends<'a>(
    state: &'a AppState,
    spec: &CheckSpec,
    old: Option<&Check>,
) -> Result<Option<tokio::sync::MutexGuard<'a, ()>>, AppError> {
    if spec.depends_on.is_empty() {
        return Ok(None);
    }
    let guard = state.checks.graph_lock().await;
    let mut graph = state.store.depends_graph().await?;
    if let Some(slug) = old.and_then(|c| c.spec.slug.as_deref()) {
        graph.remove(slug);
    }
    if let Some(slug) = &spec.slug {
        graph.set(slug, &spec.depends_on);
    }
    let problems = graph.problems(spec.slug.as_deref(), &spec.depends_on);
    if problems.is_empty() {
        return Ok(Some(guard));
    }
    Err(AppError::Invalid(
        problems
            .into_iter()
            .map(|p| FieldError {
                field: "depends_on".into(),
                message: p.to_string(),
            })
            .collect(),
    ))
}

/// A new check's uuid is its ping capability: the server draws it, so that
/// no client can pick one it already knows. The config file may still
/// choose it (its author holds the uuid anyway).
fn refuse_chosen_uuid(input: &CheckInput) -> Result<(), AppError> {
    match input.uuid {
        Some(_) => Err(chosen_uuid()),
        None => Ok(()),
    }
}

fn chosen_uuid() -> AppError {
    AppError::Invalid(vec![FieldError {
        field: "uuid".into(),
        message: "a new check's uuid is drawn by the server and cannot be chosen through the \
                  API (declare the check in the config file to choose it)"
            .into(),
    }])
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
    let _graph = check_depends(state, spec, Some(old)).await?;
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
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key")),
    responses(
        (status = 200, description = "The check", body = CheckView),
        (status = 404, description = "No such check", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn get_check(
    State(state): State<AppState>,
    access: ReadAccess,
    Path(key): Path<String>,
) -> Result<Json<CheckView>, AppError> {
    let check = find(&state, &key).await?;
    let locks = state.store.locks(check.id, crate::clock::now_ms()).await?;
    let mut v = view(&state, check).seen_by(&access);
    v.locks = Some(
        locks
            .into_iter()
            .map(|s| LockView {
                token: s.token,
                holder: s.holder,
                acquired: rfc3339(s.acquired_at),
                expires: rfc3339(s.expires_at),
            })
            .collect(),
    );
    Ok(Json(v))
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
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key")),
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
            if spec.uuid.is_some() {
                return Err(chosen_uuid());
            }
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
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key")),
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
        &state.observed.observation(),
        &mut RulesCache::default(),
    )
}

#[utoipa::path(post, path = "/checks/{check}/pause", tag = "checks",
    summary = "Pause a check: no alerts until resumed (or pinged, unless manual_resume)",
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key")),
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
    params(("check" = String, Path, description = "The check's uuid, slug or unique_key")),
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

/// The check with this uuid, slug or unique_key.
pub async fn find(state: &AppState, key: &str) -> Result<Check, AppError> {
    if let Ok(uuid) = Uuid::parse_str(key) {
        match state.store.check_by_uuid(uuid).await {
            Ok(c) => return Ok(c),
            // A slug may be spelled like a uuid: look it up as one too.
            Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let not_found =
        || AppError::NotFound(format!("no check with uuid, slug or unique_key {key:?}"));
    let mut found = state.store.check_ref_by_slug(key).await?;
    // A slug may be spelled like a unique key too: the slug wins.
    if found.is_none() && crate::domain::name::looks_like_unique_key(key) {
        found = state.store.check_ref_by_unique_key(key).await?;
    }
    let Some(r) = found else {
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
