//! The healthchecks.io v3 management API under `/api/v3` (SPEC §5), so that
//! healthchecks clients and scripts work by changing only the base URL.
//! Shapes follow healthchecks' own code (see HEALTHCHECKS-COMPAT.md):
//! `{"error": "…"}` errors, `X-Api-Key`, read keys that see `unique_key`
//! instead of the uuid and URLs.
//!
//! Mapping: `late` → `grace`, `stalled` → `down`, an open run → `started`;
//! tags are labels (`k=v` is the label k="v", a bare word `w` is w="true");
//! `timeout` is the interval and `schedule` the cron expression; `channels`
//! lists the receivers the check's labels route to, and writing it is
//! accepted and ignored (routing is by labels).

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::DateTime;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::api::{self, CheckView};
use super::auth::{scope_of, Denied};
use super::error::AppError;
pub use super::v3_values::{channel_id, labels_to_tags, tags_to_labels, unique_key, v3_status};
use super::v3_values::{isostring, python_isoformat};
use super::AppState;
use crate::clock;
use crate::config::Scope;
use crate::domain::check::Check;
use crate::domain::check::{
    format_duration, format_weeks, CheckInput, CheckSpec, FieldError, Schedule,
};
use crate::domain::fold::PingRecord;
use crate::domain::ping::PingKind;
use crate::domain::status::Status;
use crate::notify::message::LabelSet;
use crate::store::{CheckSource, StoreError};

/// The `/api/v3` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/checks/", get(list_checks).post(create_check))
        .route("/checks", get(list_checks).post(create_check))
        .route(
            "/checks/{code}",
            get(get_check).post(update_check).delete(delete_check),
        )
        .route("/checks/{code}/pause", post(pause_check))
        .route("/checks/{code}/resume", post(resume_check))
        .route("/checks/{code}/pings/", get(list_pings))
        .route("/checks/{code}/pings/{n}/body", get(ping_body))
        .route("/checks/{code}/flips/", get(list_flips))
        .route("/channels/", get(list_channels))
        .route("/status/", get(status))
        .fallback(|| async { V3Error::new(StatusCode::NOT_FOUND, "not found") })
        .layer(axum::middleware::map_response(v3_rejections))
}

/// Answers axum's own rejections (a path that is not UTF-8, a body over the
/// limit, a method the route lacks) as healthchecks does: `{"error": "…"}`.
async fn v3_rejections(response: Response) -> Response {
    match super::error::Rejected::from_response(response).await {
        Ok(r) => {
            let body = json!({ "error": r.message });
            r.respond(body)
        }
        Err(response) => response,
    }
}

/// An error as healthchecks answers it: `{"error": "…"}`.
#[derive(Debug)]
pub struct V3Error {
    status: StatusCode,
    message: String,
}

impl V3Error {
    fn new(status: StatusCode, message: impl Into<String>) -> V3Error {
        V3Error {
            status,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> V3Error {
        V3Error::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for V3Error {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<AppError> for V3Error {
    fn from(e: AppError) -> V3Error {
        match e {
            AppError::BadRequest(m) => V3Error::bad(m),
            AppError::Invalid(fields) => V3Error::bad(validation(&fields)),
            AppError::NotFound(_) => V3Error::new(StatusCode::NOT_FOUND, "not found"),
            AppError::Conflict(m) => V3Error::new(StatusCode::CONFLICT, m),
            AppError::Unauthorized(_) => V3Error::new(StatusCode::UNAUTHORIZED, "wrong api key"),
            AppError::Forbidden(m) => V3Error::new(StatusCode::FORBIDDEN, m),
            AppError::Unavailable(e) => {
                super::error::log_database_error(&e);
                V3Error::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the database is unavailable",
                )
            }
            AppError::DiskFull(e) => {
                super::error::log_database_error(&e);
                V3Error::new(StatusCode::SERVICE_UNAVAILABLE, super::error::DISK_FULL)
            }
        }
    }
}

impl From<StoreError> for V3Error {
    fn from(e: StoreError) -> V3Error {
        AppError::from(e).into()
    }
}

fn validation(fields: &[FieldError]) -> String {
    let parts: Vec<String> = fields
        .iter()
        .map(|f| match f.field.as_str() {
            // healthchecks' own words for these two.
            "cron" => "schedule is not a valid cron or OnCalendar expression".to_string(),
            "tz" => "tz is not a valid timezone".to_string(),
            field => format!("{} {}", v3_field(field), f.message),
        })
        .collect();
    format!("json validation error: {}", parts.join("; "))
}

/// The v3 name of a native field, for error messages.
fn v3_field(native: &str) -> &str {
    match native {
        "interval" => "timeout",
        "cron" => "schedule",
        "description" => "desc",
        f if f.starts_with("labels") => "tags",
        f => f,
    }
}

fn denied(d: Denied) -> V3Error {
    match d {
        Denied::Missing => V3Error::new(StatusCode::UNAUTHORIZED, "missing api key"),
        Denied::Wrong | Denied::ReadOnly => V3Error::new(StatusCode::UNAUTHORIZED, "wrong api key"),
        Denied::LoopbackOnly => V3Error::new(
            StatusCode::FORBIDDEN,
            "no API keys are configured, so the API only answers requests from loopback",
        ),
        Denied::Rebinding(why) => V3Error::new(StatusCode::FORBIDDEN, why),
        Denied::Unavailable(e) => e.into(),
    }
}

/// A caller with a read or a write key; read keys get read-only views.
pub struct V3Read {
    readonly: bool,
}

/// A caller with a write key.
pub struct V3Write;

impl FromRequestParts<AppState> for V3Read {
    type Rejection = V3Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, V3Error> {
        let scope = scope_of(parts, state).await.map_err(denied)?;
        Ok(V3Read {
            readonly: scope == Scope::Read,
        })
    }
}

impl FromRequestParts<AppState> for V3Write {
    type Rejection = V3Error;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, V3Error> {
        match scope_of(parts, state).await.map_err(denied)? {
            Scope::Write => Ok(V3Write),
            // healthchecks looks write keys up only: a read key is a wrong key here.
            Scope::Read => Err(denied(Denied::ReadOnly)),
        }
    }
}

fn secs(d: std::time::Duration) -> u64 {
    d.as_secs()
}

/// The grace as v3 reports it: ours, or one interval when unset.
fn grace_secs(spec: &CheckSpec) -> u64 {
    match (spec.grace, &spec.schedule) {
        (Some(g), _) => secs(g),
        (None, Schedule::Interval(i)) => secs(*i),
        (None, Schedule::Cron(_)) => 3600,
    }
}

/// The receivers a check's labels route to, as a comma-separated list of ids.
fn channels_of(state: &AppState, check: &Check) -> String {
    let config = state.live.config();
    let Some(tree) = config.notify.route.as_ref() else {
        return String::new();
    };
    let mut labels: LabelSet = check.spec.labels.clone();
    // As the check's alerts carry it (`alert_labels`).
    labels.insert(
        "check".into(),
        crate::domain::name::public_name(check.spec.slug.as_deref(), check.uuid),
    );
    labels.insert("name".into(), check.spec.name.clone());
    let mut names: Vec<String> = tree
        .matching(&labels)
        .into_iter()
        .map(|r| r.receiver.clone())
        .collect();
    names.dedup();
    let mut seen = std::collections::BTreeSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .map(|n| channel_id(&n).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A check in healthchecks' v3 shape.
fn check_json(state: &AppState, check: Check, readonly: bool) -> Value {
    let base = state.config.base_url.clone();
    let uuid = check.uuid;
    let key = unique_key(uuid);
    let channels = (!readonly).then(|| channels_of(state, &check));
    let spec = check.spec.clone();
    let summary = check.summary.clone();
    let v: CheckView = api::view(state, check);
    let next_ping = match (summary.last_ping_at, v.status) {
        (None, _) | (_, Status::Paused) => None,
        _ => v
            .next_due
            .as_deref()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .and_then(|t| isostring(t.timestamp_millis())),
    };
    let mut m = Map::new();
    m.insert("name".into(), json!(spec.name));
    m.insert("slug".into(), json!(spec.slug.clone().unwrap_or_default()));
    m.insert("tags".into(), json!(labels_to_tags(&spec.labels)));
    m.insert("desc".into(), json!(spec.description));
    m.insert("grace".into(), json!(grace_secs(&spec)));
    m.insert("n_pings".into(), json!(summary.n_pings));
    m.insert("status".into(), json!(v3_status(v.status)));
    m.insert("started".into(), json!(v.running));
    m.insert(
        "last_ping".into(),
        json!(summary.last_ping_at.and_then(isostring)),
    );
    m.insert("next_ping".into(), json!(next_ping));
    m.insert("manual_resume".into(), json!(spec.manual_resume));
    m.insert("methods".into(), json!(spec.methods.as_str()));
    // overdue's own: the job guard's lock seats, the checks it depends on,
    // and the item floor and min_runtime (spelled as in v1).
    m.insert("max_instances".into(), json!(spec.max_instances));
    m.insert("alert_on_duplicate".into(), json!(spec.alert_on_duplicate));
    m.insert("depends_on".into(), json!(spec.depends_on));
    m.insert("min_items".into(), json!(spec.min_items));
    m.insert("min_items_runs".into(), json!(spec.min_items_runs));
    m.insert("items_below_usual".into(), json!(spec.items_below_usual()));
    let items_window = spec
        .items_below_usual_ppm
        .map(|_| format_weeks(spec.effective_items_window()));
    m.insert("items_window".into(), json!(items_window));
    m.insert(
        "usual_items".into(),
        json!(summary.usual_items.filter(|_| items_window.is_some())),
    );
    let min_runtime = spec.min_runtime.map(format_duration);
    m.insert("min_runtime".into(), json!(min_runtime));
    for k in [
        "subject",
        "subject_fail",
        "start_kw",
        "success_kw",
        "failure_kw",
    ] {
        m.insert(k.into(), json!(""));
    }
    for k in [
        "filter_subject",
        "filter_body",
        "filter_http_body",
        "filter_default_fail",
    ] {
        m.insert(k.into(), json!(false));
    }
    m.insert("badge_url".into(), json!(format!("{base}/badge/{key}.svg")));
    if let Some(ms) = summary.last_duration_ms {
        m.insert("last_duration".into(), json!(ms / 1000));
    }
    if readonly {
        m.insert("unique_key".into(), json!(key));
    } else {
        m.insert("uuid".into(), json!(uuid.to_string()));
        m.insert("ping_url".into(), json!(format!("{base}/ping/{uuid}")));
        let api = format!("{base}/api/v3/checks/{uuid}");
        m.insert("update_url".into(), json!(api));
        m.insert("pause_url".into(), json!(format!("{api}/pause")));
        m.insert("resume_url".into(), json!(format!("{api}/resume")));
        m.insert("channels".into(), json!(channels.unwrap_or_default()));
    }
    match &spec.schedule {
        Schedule::Interval(i) => {
            m.insert("timeout".into(), json!(secs(*i)));
        }
        Schedule::Cron(expr) => {
            m.insert("schedule".into(), json!(expr));
            m.insert("tz".into(), json!(spec.tz));
        }
    }
    Value::Object(m)
}

async fn list_checks(
    State(state): State<AppState>,
    auth: V3Read,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, V3Error> {
    let tags: Vec<&str> = query
        .iter()
        .filter(|(k, _)| k == "tag")
        .map(|(_, v)| v.as_str())
        .collect();
    let slug = query.iter().find(|(k, _)| k == "slug").map(|(_, v)| v);
    let mut out = Vec::new();
    for c in state.store.list_checks().await? {
        if slug.is_some_and(|s| c.spec.slug.as_deref().unwrap_or_default() != s) {
            continue;
        }
        let have = labels_to_tags(&c.spec.labels);
        let words: Vec<&str> = have.split_whitespace().collect();
        if !tags.iter().all(|t| words.contains(t)) {
            continue;
        }
        out.push(check_json(&state, c, auth.readonly));
    }
    Ok(Json(json!({ "checks": out })))
}

/// The check a v3 path names: a uuid, or (for reads) a unique_key.
async fn find(state: &AppState, code: &str, allow_unique_key: bool) -> Result<Check, V3Error> {
    let not_found = || V3Error::new(StatusCode::NOT_FOUND, "not found");
    if let Ok(uuid) = Uuid::parse_str(code) {
        return match state.store.check_by_uuid(uuid).await {
            Ok(c) => Ok(c),
            Err(StoreError::NotFound) => Err(not_found()),
            Err(e) => Err(e.into()),
        };
    }
    if allow_unique_key && crate::domain::name::looks_like_unique_key(code) {
        let Some(r) = state.store.check_ref_by_unique_key(code).await? else {
            return Err(not_found());
        };
        return match state.store.check_by_uuid(r.uuid).await {
            Ok(c) => Ok(c),
            Err(StoreError::NotFound) => Err(not_found()),
            Err(e) => Err(e.into()),
        };
    }
    Err(V3Error::bad("invalid uuid format"))
}

async fn get_check(
    State(state): State<AppState>,
    auth: V3Read,
    Path(code): Path<String>,
) -> Result<Json<Value>, V3Error> {
    let check = find(&state, &code, true).await?;
    Ok(Json(check_json(&state, check, auth.readonly)))
}

/// The fields a v3 create or update may carry, type-checked.
#[derive(Default)]
struct V3Spec {
    name: Option<String>,
    slug: Option<String>,
    tags: Option<String>,
    desc: Option<String>,
    timeout: Option<u64>,
    grace: Option<u64>,
    schedule: Option<String>,
    tz: Option<String>,
    manual_resume: Option<bool>,
    methods: Option<String>,
    /// overdue's own field: the job guard's lock seats (SPEC §13).
    max_instances: Option<u32>,
    /// overdue's own field: slugs of the checks this one depends on (SPEC §6.2).
    depends_on: Option<Vec<String>>,
    /// overdue's own fields in their native form, checked with the rest of
    /// the definition ([`NATIVE_FIELDS`]).
    native: Map<String, Value>,
    unique: Vec<String>,
}

/// overdue's own rules that v3 carries as extra fields, spelled as in v1
/// (SPEC §3.3, §3.4).
const NATIVE_FIELDS: &[&str] = &[
    "min_items",
    "min_items_runs",
    "items_below_usual",
    "items_window",
    "min_runtime",
    "alert_on_duplicate",
];

const UNIQUE_FIELDS: &[&str] = &["name", "slug", "tags", "timeout", "grace"];

fn parse_spec(body: &[u8]) -> Result<V3Spec, V3Error> {
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(body).map_err(|_| V3Error::bad("could not parse request body"))?
    };
    let Value::Object(m) = value else {
        return Err(V3Error::bad(
            "json validation error: value is not an object",
        ));
    };
    let err =
        |field: &str, what: &str| V3Error::bad(format!("json validation error: {field} {what}"));
    let string = |field: &str| -> Result<Option<String>, V3Error> {
        match m.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(err(field, "is not a string")),
        }
    };
    let seconds = |field: &str| -> Result<Option<u64>, V3Error> {
        match m.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let v = n
                    .as_u64()
                    .or_else(|| {
                        n.as_f64()
                            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                            .map(|f| f as u64)
                    })
                    .ok_or_else(|| err(field, "is not a number"))?;
                if v < 60 {
                    return Err(err(field, "is too small"));
                }
                if v > 31_536_000 {
                    return Err(err(field, "is too large"));
                }
                Ok(Some(v))
            }
            Some(_) => Err(err(field, "is not a number")),
        }
    };
    let mut spec = V3Spec {
        name: string("name")?,
        slug: string("slug")?,
        tags: string("tags")?,
        desc: string("desc")?,
        timeout: seconds("timeout")?,
        grace: seconds("grace")?,
        schedule: string("schedule")?,
        tz: string("tz")?,
        methods: string("methods")?,
        max_instances: match m.get("max_instances") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .filter(|v| (1..=crate::domain::check::MAX_INSTANCES).contains(v))
                    .ok_or_else(|| err("max_instances", "is not a number from 1 to 1000"))?,
            ),
        },
        depends_on: match m.get("depends_on") {
            None => None,
            Some(v) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|_| err("depends_on", "is not an array of strings"))?,
            ),
        },
        native: NATIVE_FIELDS
            .iter()
            .filter_map(|k| Some(((*k).to_string(), m.get(*k)?.clone())))
            .collect(),
        ..V3Spec::default()
    };
    // Accepted and ignored: routing is by labels; the e-mail filters do not apply.
    for field in [
        "channels",
        "subject",
        "subject_fail",
        "start_kw",
        "success_kw",
        "failure_kw",
        "api_key",
    ] {
        string(field)?;
    }
    for field in [
        "manual_resume",
        "filter_subject",
        "filter_body",
        "filter_http_body",
        "filter_default_fail",
    ] {
        match m.get(field) {
            None => {}
            Some(Value::Bool(b)) if field == "manual_resume" => spec.manual_resume = Some(*b),
            Some(Value::Bool(_)) => {}
            Some(_) => return Err(err(field, "is not a boolean")),
        }
    }
    if let Some(methods) = &spec.methods {
        if !matches!(methods.as_str(), "" | "POST") {
            return Err(err("methods", "has unexpected value"));
        }
    }
    match m.get("unique") {
        None => {}
        Some(Value::Array(items)) => {
            for item in items {
                match item.as_str() {
                    Some(f) if UNIQUE_FIELDS.contains(&f) => spec.unique.push(f.to_string()),
                    _ => return Err(err("an item in 'unique'", "has unexpected value")),
                }
            }
        }
        Some(_) => return Err(err("unique", "is not an array")),
    }
    Ok(spec)
}

/// Applies a v3 spec to a check definition in native input form.
fn apply_spec(base: &mut Map<String, Value>, s: &V3Spec) {
    let mut set = |k: &str, v: Value| {
        base.insert(k.to_string(), v);
    };
    if let Some(v) = &s.name {
        set("name", json!(v));
    }
    if let Some(v) = &s.slug {
        if v.is_empty() {
            base.remove("slug");
        } else {
            base.insert("slug".into(), json!(v));
        }
    }
    if let Some(v) = &s.tags {
        base.insert("labels".into(), json!(tags_to_labels(v)));
    }
    if let Some(v) = &s.desc {
        base.insert("description".into(), json!(v));
    }
    if let Some(v) = s.grace {
        base.insert(
            "grace".into(),
            json!(format_duration(std::time::Duration::from_secs(v))),
        );
    }
    if let Some(v) = &s.tz {
        base.insert("tz".into(), json!(v));
    }
    if let Some(v) = s.manual_resume {
        base.insert("manual_resume".into(), json!(v));
    }
    if let Some(v) = &s.methods {
        base.insert("methods".into(), json!(v));
    }
    if let Some(v) = s.max_instances {
        base.insert("max_instances".into(), json!(v));
    }
    if let Some(v) = &s.depends_on {
        base.insert("depends_on".into(), json!(v));
    }
    base.extend(s.native.clone());
    match (&s.schedule, s.timeout) {
        (Some(expr), _) => {
            base.remove("interval");
            base.insert("cron".into(), json!(expr));
        }
        (None, Some(t)) => {
            // As in healthchecks: a timeout without a schedule makes a simple check.
            base.remove("cron");
            base.insert(
                "interval".into(),
                json!(format_duration(std::time::Duration::from_secs(t))),
            );
        }
        (None, None) => {}
    }
}

fn to_spec(input: Map<String, Value>) -> Result<CheckSpec, V3Error> {
    let body = serde_json::to_vec(&Value::Object(input)).unwrap_or_default();
    let input: CheckInput = api::parse_json(&body).map_err(V3Error::from)?;
    CheckSpec::from_input(input).map_err(|f| V3Error::from(AppError::Invalid(f)))
}

/// True when the spec gives every field its `unique` names (else healthchecks
/// looks nothing up and creates a check).
fn can_look_up(s: &V3Spec) -> bool {
    !s.unique.is_empty()
        && s.unique.iter().all(|f| match f.as_str() {
            "name" => s.name.is_some(),
            "slug" => s.slug.is_some(),
            "tags" => s.tags.is_some(),
            "timeout" => s.timeout.is_some(),
            "grace" => s.grace.is_some(),
            _ => false,
        })
}

/// Does `check` have the values `s` gives for every `unique` field?
fn matches_unique(check: &Check, s: &V3Spec) -> bool {
    s.unique.iter().all(|f| match f.as_str() {
        "name" => check.spec.name == s.name.clone().unwrap_or_default(),
        "slug" => check.spec.slug.clone().unwrap_or_default() == s.slug.clone().unwrap_or_default(),
        "tags" => {
            let mut a: Vec<String> = labels_to_tags(&check.spec.labels)
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let mut b: Vec<String> = s
                .tags
                .clone()
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            a.sort();
            b.sort();
            a == b
        }
        "timeout" => check.spec.interval().map(secs) == Some(s.timeout.unwrap_or(86_400)),
        "grace" => grace_secs(&check.spec) == s.grace.unwrap_or(3600),
        _ => false,
    })
}

async fn create_check(
    State(state): State<AppState>,
    _: V3Write,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), V3Error> {
    let s = parse_spec(&body)?;
    if can_look_up(&s) {
        let existing = state
            .store
            .list_checks()
            .await?
            .into_iter()
            .find(|c| matches_unique(c, &s));
        if let Some(check) = existing {
            let updated = update(&state, check, &s).await?;
            return Ok((StatusCode::OK, Json(check_json(&state, updated, false))));
        }
    }
    // healthchecks' defaults: a day's timeout, an hour's grace.
    let mut input = Map::new();
    input.insert("interval".into(), json!("1day"));
    input.insert("grace".into(), json!("1h"));
    input.insert("name".into(), json!(""));
    apply_spec(&mut input, &s);
    let spec = to_spec(input)?;
    let check = api::create(&state, &spec, CheckSource::Api).await?;
    Ok((StatusCode::CREATED, Json(check_json(&state, check, false))))
}

async fn update(state: &AppState, check: Check, s: &V3Spec) -> Result<Check, V3Error> {
    if check.source == "config" {
        return Err(V3Error::new(
            StatusCode::CONFLICT,
            "this check is declared in the config file; change it there",
        ));
    }
    let mut input = api::input_json(&check.spec);
    apply_spec(&mut input, s);
    let spec = to_spec(input)?;
    Ok(api::replace(state, &check, &spec).await?)
}

async fn update_check(
    State(state): State<AppState>,
    _: V3Write,
    Path(code): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, V3Error> {
    let check = find(&state, &code, false).await?;
    let s = parse_spec(&body)?;
    let updated = update(&state, check, &s).await?;
    Ok(Json(check_json(&state, updated, false)))
}

async fn delete_check(
    State(state): State<AppState>,
    _: V3Write,
    Path(code): Path<String>,
) -> Result<Json<Value>, V3Error> {
    let check = find(&state, &code, false).await?;
    if check.source == "config" {
        return Err(V3Error::new(
            StatusCode::CONFLICT,
            "this check is declared in the config file; remove it there",
        ));
    }
    let body = check_json(&state, check.clone(), false);
    api::remove(&state, &check).await?;
    Ok(Json(body))
}

async fn pause_check(
    State(state): State<AppState>,
    _: V3Write,
    Path(code): Path<String>,
) -> Result<Json<Value>, V3Error> {
    let check = find(&state, &code, false).await?;
    let check = api::pause(&state, &check, true).await?;
    Ok(Json(check_json(&state, check, false)))
}

async fn resume_check(
    State(state): State<AppState>,
    _: V3Write,
    Path(code): Path<String>,
) -> Result<Response, V3Error> {
    let check = find(&state, &code, false).await?;
    if !check.paused {
        // healthchecks answers this one in plain text.
        return Ok((StatusCode::CONFLICT, "check is not paused").into_response());
    }
    let check = api::pause(&state, &check, false).await?;
    Ok(Json(check_json(&state, check, false)).into_response())
}

fn ping_json(base: &str, uuid: Uuid, p: PingRecord) -> Value {
    let mut m = Map::new();
    // healthchecks has no skip nor retried attempt: each is its `log`
    // kind (which changes no status either), with overdue's own `reason`
    // or `retry` beside it.
    match p.kind {
        PingKind::Skip => {
            m.insert("type".into(), json!(PingKind::Log.as_str()));
            m.insert("reason".into(), json!(p.reason));
        }
        PingKind::Retry => {
            m.insert("type".into(), json!(PingKind::Log.as_str()));
            m.insert("retry".into(), json!(true));
        }
        kind => {
            m.insert("type".into(), json!(kind.as_str()));
        }
    }
    if let Some(slot) = p.slot.and_then(crate::domain::evaluate::instant) {
        m.insert("slot".into(), json!(crate::domain::slots::rfc3339(slot)));
    }
    // As the wall clock read when it arrived (SPEC §12).
    m.insert(
        "date".into(),
        json!(python_isoformat(crate::clock::wall_of(p.at))),
    );
    m.insert("n".into(), json!(p.n));
    m.insert("scheme".into(), json!(p.scheme));
    m.insert(
        "remote_addr".into(),
        json!(p.remote_addr.unwrap_or_default()),
    );
    m.insert("method".into(), json!(p.method));
    m.insert("ua".into(), json!(p.user_agent.unwrap_or_default()));
    m.insert("rid".into(), json!(p.rid));
    if let Some(ms) = p.duration_ms {
        m.insert("duration".into(), json!(ms as f64 / 1000.0));
    }
    let body_url =
        (!p.body.is_empty()).then(|| format!("{base}/api/v3/checks/{uuid}/pings/{}/body", p.n));
    m.insert("body_url".into(), json!(body_url));
    Value::Object(m)
}

async fn list_pings(
    State(state): State<AppState>,
    _: V3Write,
    Path(code): Path<String>,
) -> Result<Json<Value>, V3Error> {
    let check = find(&state, &code, false).await?;
    let limit = state.config.ping_log_limit.clamp(1, 1000);
    let pings = state.store.list_pings(check.id, limit).await?;
    let base = state.config.base_url.clone();
    let list: Vec<Value> = pings
        .into_iter()
        .map(|p| ping_json(&base, check.uuid, p))
        .collect();
    Ok(Json(json!({ "pings": list })))
}

async fn ping_body(
    State(state): State<AppState>,
    _: V3Write,
    Path((code, n)): Path<(String, String)>,
) -> Result<Response, V3Error> {
    let check = find(&state, &code, false).await?;
    let n: i64 = n.parse().map_err(|_| V3Error::bad("invalid ping number"))?;
    match super::history::ping_by_n(&state, &check, n).await? {
        Some(p) if !p.body.is_empty() => Ok(super::history::body_response(p.body)),
        _ => Err(V3Error::new(StatusCode::NOT_FOUND, "not found")),
    }
}

async fn list_flips(
    State(state): State<AppState>,
    _: V3Read,
    Path(code): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, V3Error> {
    let check = find(&state, &code, true).await?;
    let mut seconds = None;
    let mut start = None;
    let mut end = None;
    for (k, v) in &query {
        let n: i64 = v
            .parse()
            .ok()
            .filter(|n: &i64| *n >= 0)
            .ok_or_else(|| V3Error::bad(format!("invalid value for {k}")))?;
        match k.as_str() {
            "seconds" => seconds = Some(n),
            "start" => start = Some(n),
            "end" => end = Some(n),
            _ => {}
        }
    }
    let now = clock::now_ms();
    let mut flips = state.store.list_flips(check.id, 1000).await?;
    flips.reverse();
    // Only up/down changes, as healthchecks records them.
    let mut out = Vec::new();
    let mut last: Option<u8> = None;
    for f in flips {
        let up = match Status::parse(&f.new_status) {
            Some(Status::Up | Status::Late) => 1,
            Some(Status::Down | Status::Stalled) => 0,
            _ => continue,
        };
        if last == Some(up) {
            continue;
        }
        last = Some(up);
        if seconds.is_some_and(|s| f.at < now - s * 1000)
            || start.is_some_and(|s| f.at < s * 1000)
            || end.is_some_and(|e| f.at >= e * 1000)
        {
            continue;
        }
        out.push(json!({ "timestamp": isostring(f.at), "up": up }));
    }
    out.reverse();
    Ok(Json(json!({ "flips": out })))
}

async fn list_channels(State(state): State<AppState>, _: V3Write) -> Json<Value> {
    let config = state.live.config();
    let list: Vec<Value> = config
        .notify
        .receivers
        .iter()
        .map(|r| {
            json!({
                "id": channel_id(&r.name).to_string(),
                "name": r.name,
                "kind": r.healthchecks_kind(),
            })
        })
        .collect();
    Json(json!({ "channels": list }))
}

async fn status() -> &'static str {
    "OK"
}
