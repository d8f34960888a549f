//! The alerting part of `/api/v1`: notifications with their attempts,
//! silences (CRUD), receivers and the routing tree (read).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{parse_json, rfc3339};
use super::auth::{ReadAccess, WriteAccess};
use super::error::{AppError, ErrorBody};
use super::AppState;
use crate::clock;
use crate::domain::check::FieldError;
use crate::notify::dispatch::DispatchNotice;
use crate::notify::route::GroupBy;
use crate::notify::silence::{silences_every_check, Silence, SilenceInput, SilenceSource};
use crate::notify::silence_cache::StoredSilence;
use crate::store::notify::{AttemptRecord, NotificationFilter, NotificationRecord};

/// The alerting routes, relative to `/api/v1`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_notifications))
        .routes(routes!(get_notification))
        .routes(routes!(list_silences, create_silence))
        .routes(routes!(get_silence, replace_silence, delete_silence))
        .routes(routes!(list_receivers))
        .routes(routes!(get_routes))
}

/// One delivery attempt.
#[derive(Debug, Serialize, ToSchema)]
struct AttemptView {
    at: String,
    outcome: String,
    latency_ms: i64,
    error: Option<String>,
}

/// A notification with its delivery attempts.
#[derive(Debug, Serialize, ToSchema)]
struct NotificationView {
    id: String,
    kind: String,
    group_key: String,
    receiver: String,
    seq: i64,
    state: String,
    created_at: String,
    attempts: i64,
    next_attempt_at: Option<String>,
    last_error: Option<String>,
    delivered_at: Option<String>,
    reported_at: Option<String>,
    /// The notification as sent (Alertmanager's webhook format).
    #[schema(value_type = Object)]
    payload: Value,
    attempt_log: Vec<AttemptView>,
}

fn notification_view(n: NotificationRecord, attempts: &[AttemptRecord]) -> NotificationView {
    NotificationView {
        attempt_log: attempts
            .iter()
            .filter(|a| a.notification_id == n.id)
            .map(|a| AttemptView {
                at: rfc3339(a.at),
                outcome: a.outcome.clone(),
                latency_ms: a.latency_ms,
                error: a.error.clone(),
            })
            .collect(),
        payload: without_ack_links(serde_json::from_str(&n.payload).unwrap_or(Value::Null)),
        created_at: rfc3339(n.created_at),
        next_attempt_at: n.next_attempt_at.map(rfc3339),
        delivered_at: n.delivered_at.map(rfc3339),
        reported_at: n.reported_at.map(rfc3339),
        id: n.id,
        kind: n.kind,
        group_key: n.group_key,
        receiver: n.receiver,
        seq: n.seq,
        state: n.state,
        attempts: n.attempts,
        last_error: n.last_error,
    }
}

/// The payload with its acknowledge links cut to their address: a link
/// acknowledges without an API key, so a read key must not hand it out.
fn without_ack_links(mut payload: Value) -> Value {
    let redact = |annotations: &mut Value| {
        if let Some(link) = annotations.get_mut("acknowledge") {
            if let Some(text) = link.as_str() {
                let kept = text.rsplit_once("/ack/").map_or("", |(base, _)| base);
                *link = Value::String(format!("{kept}/ack/<redacted>"));
            }
        }
    };
    if let Some(alerts) = payload.get_mut("alerts").and_then(Value::as_array_mut) {
        for a in alerts {
            if let Some(ann) = a.get_mut("annotations") {
                redact(ann);
            }
        }
    }
    if let Some(ann) = payload.get_mut("commonAnnotations") {
        redact(ann);
    }
    payload
}

/// Filters of the notification list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct NotificationQuery {
    /// `pending`, `delivered`, `dead` or `obsolete`.
    state: Option<String>,
    receiver: Option<String>,
    limit: Option<u32>,
}

const STATES: &[&str] = &["pending", "delivered", "dead", "obsolete"];

#[utoipa::path(get, path = "/notifications", tag = "alerting",
    summary = "Notifications, newest first, with their delivery attempts",
    params(NotificationQuery),
    responses(
        (status = 200, description = "Notifications", body = NotificationList),
        (status = 400, description = "A bad filter", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_notifications(
    State(state): State<AppState>,
    _: ReadAccess,
    Query(q): Query<NotificationQuery>,
) -> Result<Json<Value>, AppError> {
    if let Some(s) = &q.state {
        if !STATES.contains(&s.as_str()) {
            return Err(AppError::BadRequest(format!(
                "state: {s:?} is not one of {}",
                STATES.join(", ")
            )));
        }
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::BadRequest(
            "limit: must be between 1 and 1000".to_string(),
        ));
    }
    let list = state
        .store
        .list_notifications(&NotificationFilter {
            state: q.state,
            receiver: q.receiver,
            limit,
        })
        .await?;
    let ids: Vec<String> = list.iter().map(|n| n.id.clone()).collect();
    let attempts = state.store.notification_attempts(&ids).await?;
    let views: Vec<NotificationView> = list
        .into_iter()
        .map(|n| notification_view(n, &attempts))
        .collect();
    Ok(Json(serde_json::json!({ "notifications": views })))
}

#[utoipa::path(get, path = "/notifications/{id}", tag = "alerting",
    summary = "One notification with its delivery attempts",
    params(("id" = String, Path, description = "The notification's id")),
    responses(
        (status = 200, description = "The notification", body = NotificationView),
        (status = 404, description = "No such notification", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn get_notification(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(id): Path<String>,
) -> Result<Json<NotificationView>, AppError> {
    let Some(n) = state.store.notification(&id).await? else {
        return Err(AppError::NotFound(format!("no notification {id:?}")));
    };
    let attempts = state.store.notification_attempts(&[id]).await?;
    Ok(Json(notification_view(n, &attempts)))
}

/// A silence: matching checks notify nothing while it is active (the
/// document of what [`silence_json`] writes).
#[derive(ToSchema)]
#[allow(dead_code)]
struct SilenceView {
    id: String,
    /// Alertmanager matchers, each as text.
    matchers: Vec<String>,
    starts_at: String,
    ends_at: String,
    comment: String,
    created_by: String,
    /// `api` or `config` (declared in the config file; change it there).
    source: String,
    /// `pending`, `active` or `expired`.
    state: String,
}

/// A silence's JSON in three pieces around `matchers`, its matchers' JSON
/// list: a stored silence's list goes out as stored, shared with the cache
/// rather than copied (a list of the largest silences is megabytes).
fn silence_json(s: &Silence, matchers: Bytes, now: i64) -> [Bytes; 3] {
    let text = |v: &str| serde_json::to_string(v).unwrap_or_else(|_| "\"\"".to_string());
    let head = format!("{{\"id\":{},\"matchers\":", text(&s.id));
    let tail = format!(
        ",\"starts_at\":{},\"ends_at\":{},\"comment\":{},\"created_by\":{},\"source\":{},\"state\":{}}}",
        text(&rfc3339(s.starts_at)),
        text(&rfc3339(s.ends_at)),
        text(&s.comment),
        text(&s.created_by),
        text(s.source.as_str()),
        text(s.state(now)),
    );
    [Bytes::from(head), matchers, Bytes::from(tail)]
}

/// The matchers of a silence that is not in the cache, as a JSON list.
fn matchers_json(s: &Silence) -> Bytes {
    // A list of strings always serializes.
    Bytes::from(serde_json::to_vec(&s.matchers).unwrap_or_else(|_| b"[]".to_vec()))
}

/// A stored silence's matchers, as the cache keeps them.
struct CachedMatchers(Arc<StoredSilence>);

impl AsRef<[u8]> for CachedMatchers {
    fn as_ref(&self) -> &[u8] {
        self.0.matchers_json.as_bytes()
    }
}

/// The pieces of every silence: the config file's, then the stored ones
/// (parsed once per change).
async fn all_silences(state: &AppState, now: i64) -> Result<Vec<(String, [Bytes; 3])>, AppError> {
    let stored = state.dispatch.silences().read(&*state.store, now).await?;
    let config = state.live.config();
    let mut out: Vec<(String, [Bytes; 3])> = config
        .notify
        .silences
        .iter()
        .map(|s| (s.id.clone(), silence_json(s, matchers_json(s), now)))
        .collect();
    out.extend(stored.into_iter().map(|s| {
        let json = silence_json(
            &s.silence,
            Bytes::from_owner(CachedMatchers(s.clone())),
            now,
        );
        (s.silence.id.clone(), json)
    }));
    Ok(out)
}

/// A JSON answer made of these pieces, sent as they are.
fn json_body(status: StatusCode, pieces: Vec<Bytes>) -> Response {
    let length: usize = pieces.iter().map(Bytes::len).sum();
    let body = Body::from_stream(futures_util::stream::iter(
        pieces.into_iter().map(Ok::<_, std::convert::Infallible>),
    ));
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CONTENT_LENGTH, HeaderValue::from(length)),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(get, path = "/silences", tag = "alerting",
    summary = "Silences from the config file and the API",
    responses((status = 200, description = "Silences", body = SilenceList)),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_silences(State(state): State<AppState>, _: ReadAccess) -> Result<Response, AppError> {
    let now = clock::now_ms();
    let all = all_silences(&state, now).await?;
    let mut pieces = Vec::with_capacity(3 * all.len() + 2);
    pieces.push(Bytes::from_static(b"{\"silences\":["));
    for (i, (_, json)) in all.into_iter().enumerate() {
        if i > 0 {
            pieces.push(Bytes::from_static(b","));
        }
        pieces.extend(json);
    }
    pieces.push(Bytes::from_static(b"]}"));
    Ok(json_body(StatusCode::OK, pieces))
}

#[utoipa::path(get, path = "/silences/{id}", tag = "alerting",
    summary = "One silence",
    params(("id" = String, Path, description = "The silence's id")),
    responses(
        (status = 200, description = "The silence", body = SilenceView),
        (status = 404, description = "No such silence", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn get_silence(
    State(state): State<AppState>,
    _: ReadAccess,
    Path(id): Path<String>,
) -> Result<Response, AppError> {
    let now = clock::now_ms();
    let json = all_silences(&state, now)
        .await?
        .into_iter()
        .find(|(sid, _)| *sid == id)
        .map(|(_, json)| json)
        .ok_or_else(|| AppError::NotFound(format!("no silence {id:?}")))?;
    Ok(json_body(StatusCode::OK, json.to_vec()))
}

fn invalid(errors: Vec<String>) -> AppError {
    AppError::Invalid(
        errors
            .into_iter()
            .map(|e| match e.split_once(": ") {
                Some((field, message)) => FieldError {
                    field: field.to_string(),
                    message: message.to_string(),
                },
                None => FieldError {
                    field: String::new(),
                    message: e,
                },
            })
            .collect(),
    )
}

async fn store_silence(
    state: &AppState,
    id: String,
    body: &[u8],
    created_at: Option<i64>,
    status: StatusCode,
) -> Result<Response, AppError> {
    let input: SilenceInput = parse_json(body)?;
    if input.id.as_ref().is_some_and(|given| given != &id) {
        return Err(AppError::BadRequest(
            "id: does not match the silence's URL".to_string(),
        ));
    }
    let now = clock::now_ms();
    let silence = Silence::from_input(input, id, SilenceSource::Api, now).map_err(invalid)?;
    // Judged against the checks as they are: a regex such as
    // alertname=~"Overdue.*" matches no empty label set, yet every check.
    let checks = state.store.list_checks().await?;
    if let Some(why) = silences_every_check(&silence.matchers, &checks) {
        return Err(invalid(vec![why]));
    }
    let rec = crate::notify::silence_record(&silence, created_at.unwrap_or(now), now);
    state.store.put_silence(&rec).await?;
    state.dispatch.notify(DispatchNotice::Silences);
    let json = silence_json(&silence, matchers_json(&silence), now);
    Ok(json_body(status, json.to_vec()))
}

#[utoipa::path(post, path = "/silences", tag = "alerting",
    summary = "Create a silence",
    request_body = SilenceInputDoc,
    responses(
        (status = 201, description = "Created", body = SilenceView),
        (status = 400, description = "Invalid fields, each named", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn create_silence(
    State(state): State<AppState>,
    _: WriteAccess,
    body: Bytes,
) -> Result<Response, AppError> {
    let id = uuid::Uuid::new_v4().to_string();
    store_silence(&state, id, &body, None, StatusCode::CREATED).await
}

fn refuse_config(state: &AppState, id: &str) -> Result<(), AppError> {
    if state
        .live
        .config()
        .notify
        .silences
        .iter()
        .any(|s| s.id == id)
    {
        return Err(AppError::Conflict(format!(
            "silence {id:?} is declared in the config file; change it there"
        )));
    }
    Ok(())
}

#[utoipa::path(put, path = "/silences/{id}", tag = "alerting",
    summary = "Replace a silence created through the API",
    params(("id" = String, Path, description = "The silence's id")),
    request_body = SilenceInputDoc,
    responses(
        (status = 200, description = "Replaced", body = SilenceView),
        (status = 400, description = "Invalid fields, each named", body = ErrorBody),
        (status = 404, description = "No such silence", body = ErrorBody),
        (status = 409, description = "Declared in the config file", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn replace_silence(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, AppError> {
    refuse_config(&state, &id)?;
    let existing = state
        .store
        .silences_by_id(std::slice::from_ref(&id))
        .await?
        .pop()
        .ok_or_else(|| AppError::NotFound(format!("no silence {id:?}")))?;
    store_silence(&state, id, &body, Some(existing.created_at), StatusCode::OK).await
}

#[utoipa::path(delete, path = "/silences/{id}", tag = "alerting",
    summary = "Delete a silence created through the API",
    params(("id" = String, Path, description = "The silence's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such silence", body = ErrorBody),
        (status = 409, description = "Declared in the config file", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn delete_silence(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    refuse_config(&state, &id)?;
    state.store.delete_silence(&id).await.map_err(|e| match e {
        crate::store::StoreError::NotFound => AppError::NotFound(format!("no silence {id:?}")),
        other => other.into(),
    })?;
    state.dispatch.notify(DispatchNotice::Silences);
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/receivers", tag = "alerting",
    summary = "Configured receivers (secrets never shown)",
    responses((status = 200, description = "Receivers", body = ReceiverList)),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn list_receivers(State(state): State<AppState>, _: ReadAccess) -> Json<Value> {
    let list: Vec<Value> = state
        .live
        .config()
        .notify
        .receivers
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "type": r.kind(),
                "send_resolved": r.send_resolved,
                "timeout": humantime::format_duration(r.timeout).to_string(),
            })
        })
        .collect();
    Json(serde_json::json!({ "receivers": list }))
}

#[utoipa::path(get, path = "/routes", tag = "alerting",
    summary = "The routing tree",
    responses((status = 200, description = "The root route with its children (`null`: none)", body = RouteTreeDoc)),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn get_routes(State(state): State<AppState>, _: ReadAccess) -> Json<Value> {
    let config = state.live.config();
    let Some(tree) = config.notify.route.as_ref() else {
        return Json(serde_json::json!({ "route": null }));
    };
    fn node(tree: &crate::notify::route::RouteTree, id: usize) -> Value {
        let r = tree.route(id);
        serde_json::json!({
            "key": r.key,
            "receiver": r.receiver,
            "matchers": r.matchers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "group_by": match &r.group_by {
                GroupBy::All => vec!["...".to_string()],
                GroupBy::Labels(l) => l.clone(),
            },
            "group_wait": humantime::format_duration(r.group_wait).to_string(),
            "group_interval": humantime::format_duration(r.group_interval).to_string(),
            "repeat_interval": humantime::format_duration(r.repeat_interval).to_string(),
            "continue": r.continue_matching,
            "mute_time_intervals": r.mute_time_intervals,
            "active_time_intervals": r.active_time_intervals,
            "routes": r.children.iter().map(|c| node(tree, *c)).collect::<Vec<_>>(),
        })
    }
    Json(serde_json::json!({ "route": node(tree, 0) }))
}

/// Notifications, newest first.
#[derive(ToSchema)]
#[allow(dead_code)]
struct NotificationList {
    notifications: Vec<NotificationView>,
}

/// Silences.
#[derive(ToSchema)]
#[allow(dead_code)]
struct SilenceList {
    silences: Vec<SilenceView>,
}

/// A silence as written in a request (and in the config file's `[[silences]]`).
#[derive(ToSchema)]
#[allow(dead_code)]
struct SilenceInputDoc {
    /// Only in a PUT, equal to the URL's.
    id: Option<String>,
    /// Alertmanager matchers over check labels, e.g. `team="data"`.
    matchers: Vec<String>,
    /// RFC 3339; default now.
    starts_at: Option<String>,
    /// RFC 3339; or give `duration`.
    ends_at: Option<String>,
    /// Humantime, e.g. `2h`.
    duration: Option<String>,
    comment: String,
    created_by: Option<String>,
}

/// One receiver; its secrets (passwords, tokens, URLs' credentials) are never shown.
#[derive(ToSchema)]
#[allow(dead_code)]
struct ReceiverDoc {
    name: String,
    /// `email`, `webhook`, `slack`, `alertmanager`, `pagerduty`, `opsgenie`,
    /// `msteams`, `discord`, `telegram`, `ntfy`, `pushover` or `gotify`.
    #[schema(rename = "type")]
    kind: String,
    send_resolved: bool,
    timeout: String,
}

/// Receivers.
#[derive(ToSchema)]
#[allow(dead_code)]
struct ReceiverList {
    receivers: Vec<ReceiverDoc>,
}

/// The routing tree.
#[derive(ToSchema)]
#[allow(dead_code)]
struct RouteTreeDoc {
    /// The root route: `key, receiver, matchers, group_by, group_wait, group_interval,
    /// repeat_interval, continue, mute_time_intervals, active_time_intervals, routes`.
    #[schema(value_type = Option<Object>)]
    route: Option<Value>,
}
