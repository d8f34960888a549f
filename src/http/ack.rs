//! Acknowledging incidents (SPEC §6.2): the API routes under `/api/v1`
//! (write scope) and the signed one-click link `/ack/{token}` that every
//! message carries for each firing incident. The link needs no API key
//! (the token names the incident and is signed); its `GET` only shows a
//! confirmation page, because mail scanners follow links, and its `POST`
//! acknowledges. It expires when the incident resolves.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::rfc3339;
use super::auth::{ReadAccess, WriteAccess};
use super::error::{AppError, ErrorBody};
use super::AppState;
use crate::clock::now_ms;
use crate::domain::check::FieldError;
use crate::notify::ack::{token_incident, Incident};
use crate::notify::dispatch::DispatchNotice;
use crate::store::oncall::IncidentAck;

/// The most characters of `by`.
const MAX_BY: usize = 200;
/// The most characters of `comment`.
const MAX_COMMENT: usize = 2000;

/// The API routes, relative to `/api/v1`.
pub fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_incident))
        .routes(routes!(ack, unack))
}

/// The signed link's page.
pub fn link_router() -> Router<AppState> {
    Router::new()
        .route("/ack/{token}", get(link_page).post(link_ack))
        .layer(axum::middleware::map_response(super::ui::page_headers))
}

/// The path of an incident's acknowledge link (for the dashboard's button).
pub fn ack_path(state: &AppState, check_uuid: &str, id: i64, opened_at: i64) -> String {
    let incident = Incident {
        id,
        check_uuid,
        opened_at,
    };
    format!("/ack/{}", state.links.token(incident))
}

/// Who acknowledged an incident, when, and why.
#[derive(Serialize, ToSchema)]
pub struct AckView {
    by: String,
    at: String,
    comment: Option<String>,
}

/// One incident with its check and its acknowledgement.
#[derive(Serialize, ToSchema)]
pub struct IncidentDetail {
    id: i64,
    /// The check's slug, or its uuid when it has none.
    check: String,
    /// Only for write keys: the uuid is the check's ping capability.
    #[serde(skip_serializing_if = "Option::is_none")]
    check_uuid: Option<String>,
    opened: String,
    status: String,
    reason: Option<String>,
    resolved: Option<String>,
    /// `null` while nobody acknowledged it.
    acknowledged: Option<AckView>,
}

/// The acknowledgement of an incident, as the API shows it.
pub fn ack_view(
    acked_at: Option<i64>,
    by: Option<String>,
    comment: Option<String>,
) -> Option<AckView> {
    acked_at.map(|at| AckView {
        by: by.unwrap_or_default(),
        at: rfc3339(at),
        comment,
    })
}

fn detail(i: IncidentAck, writer: bool) -> IncidentDetail {
    IncidentDetail {
        id: i.id,
        check: i.check_label(),
        check_uuid: writer.then(|| i.check_uuid.clone()),
        opened: rfc3339(i.opened_at),
        status: i.status,
        reason: i.reason,
        resolved: i.resolved_at.map(rfc3339),
        acknowledged: ack_view(i.acked_at, i.acked_by, i.ack_comment),
    }
}

/// Who acknowledges, and why; both optional.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct AckInput {
    /// Who acknowledges (default `api`).
    by: Option<String>,
    comment: Option<String>,
}

/// `by` and `comment` trimmed, empty as none, each within its limit.
fn ack_fields(
    by: Option<String>,
    comment: Option<String>,
    default_by: &str,
) -> Result<(String, Option<String>), Vec<FieldError>> {
    let clean = |s: Option<String>| s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let (by, comment) = (clean(by), clean(comment));
    let mut errors = Vec::new();
    for (field, value, max) in [("by", &by, MAX_BY), ("comment", &comment, MAX_COMMENT)] {
        if value.as_ref().is_some_and(|v| v.chars().count() > max) {
            errors.push(FieldError {
                field: field.into(),
                message: format!("must be at most {max} characters"),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok((by.unwrap_or_else(|| default_by.to_string()), comment))
}

async fn incident_or_404(state: &AppState, id: i64) -> Result<IncidentAck, AppError> {
    state
        .store
        .incident_ack(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no incident {id}")))
}

#[utoipa::path(get, path = "/incidents/{id}", tag = "checks",
    summary = "One incident, with who acknowledged it",
    params(("id" = i64, Path, description = "The incident's id")),
    responses(
        (status = 200, description = "The incident", body = IncidentDetail),
        (status = 404, description = "No such incident", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn get_incident(
    State(state): State<AppState>,
    access: ReadAccess,
    Path(id): Path<i64>,
) -> Result<Json<IncidentDetail>, AppError> {
    Ok(Json(detail(
        incident_or_404(&state, id).await?,
        access.writer,
    )))
}

#[utoipa::path(post, path = "/incidents/{id}/ack", tag = "checks",
    summary = "Acknowledge an open incident: no more reminders; its resolve is still sent",
    description = "The first acknowledgement stands: acknowledging again answers the incident \
                   as it is. Acknowledging sends nothing by itself.",
    params(("id" = i64, Path, description = "The incident's id")),
    request_body(content = AckInput, description = "Optional `by` and `comment`"),
    responses(
        (status = 200, description = "The incident, acknowledged", body = IncidentDetail),
        (status = 400, description = "A field is too long", body = ErrorBody),
        (status = 404, description = "No such incident", body = ErrorBody),
        (status = 409, description = "The incident has resolved", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn ack(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(id): Path<i64>,
    body: Bytes,
) -> Result<Json<IncidentDetail>, AppError> {
    let input: AckInput = if body.iter().all(u8::is_ascii_whitespace) {
        AckInput::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| AppError::BadRequest(format!("the body is not an acknowledgement: {e}")))?
    };
    let (by, comment) = ack_fields(input.by, input.comment, "api").map_err(AppError::Invalid)?;
    let before = incident_or_404(&state, id).await?;
    if before.resolved_at.is_some() {
        return Err(AppError::Conflict(format!(
            "incident {id} has resolved; there is nothing to acknowledge"
        )));
    }
    let after = acknowledge(&state, id, &by, comment.as_deref()).await?;
    if after.acked_at.is_none() {
        // It resolved in between.
        return Err(AppError::Conflict(format!(
            "incident {id} has resolved; there is nothing to acknowledge"
        )));
    }
    Ok(Json(detail(after, true)))
}

#[utoipa::path(delete, path = "/incidents/{id}/ack", tag = "checks",
    summary = "Take an acknowledgement back: reminders start again",
    params(("id" = i64, Path, description = "The incident's id")),
    responses(
        (status = 200, description = "The incident, not acknowledged", body = IncidentDetail),
        (status = 404, description = "No such incident", body = ErrorBody),
        (status = 409, description = "The incident has resolved", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn unack(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(id): Path<i64>,
) -> Result<Json<IncidentDetail>, AppError> {
    let before = incident_or_404(&state, id).await?;
    if before.resolved_at.is_some() {
        return Err(AppError::Conflict(format!(
            "incident {id} has resolved; its acknowledgement stays on record"
        )));
    }
    let after = state
        .store
        .unack_incident(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no incident {id}")))?;
    tracing::info!(incident = id, "acknowledgement taken back");
    state
        .dispatch
        .notify(DispatchNotice::Checks(vec![after.check_id]));
    Ok(Json(detail(after, true)))
}

/// Acknowledges and tells the dispatcher.
async fn acknowledge(
    state: &AppState,
    id: i64,
    by: &str,
    comment: Option<&str>,
) -> Result<IncidentAck, AppError> {
    let after = state
        .store
        .ack_incident(id, by, comment, now_ms())
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no incident {id}")))?;
    tracing::info!(incident = id, by = %after.acked_by.as_deref().unwrap_or(""), "incident acknowledged");
    state
        .dispatch
        .notify(DispatchNotice::Checks(vec![after.check_id]));
    Ok(after)
}

/// The incident a link's token names, when the token is its.
async fn linked(state: &AppState, token: &str) -> Result<IncidentAck, Response> {
    let invalid = || {
        page(
            StatusCode::FORBIDDEN,
            "Not a valid link",
            "<p>This acknowledge link is not valid: it was altered, or it was made by \
             another overdue server.</p>"
                .to_string(),
        )
    };
    let Some(id) = token_incident(token) else {
        return Err(invalid());
    };
    let incident = match state.store.incident_ack(id).await {
        Ok(Some(i)) => i,
        Ok(None) => return Err(invalid()),
        Err(e) => return Err(AppError::from(e).into_response()),
    };
    let named = Incident {
        id,
        check_uuid: &incident.check_uuid,
        opened_at: incident.opened_at,
    };
    if !state.links.verify(token, named) {
        return Err(invalid());
    }
    if let Some(at) = incident.resolved_at {
        return Err(page(
            StatusCode::GONE,
            "Already resolved",
            format!(
                "<p>{} recovered at {}: the incident is over and this link has expired.</p>{}",
                esc(&incident.check_name_or_label()),
                esc(&rfc3339(at)),
                check_link(state, &incident)
            ),
        ));
    }
    Ok(incident)
}

/// `GET /ack/{token}`: what would be acknowledged, and a button to do it.
async fn link_page(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    let incident = match linked(&state, &token).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let what = describe(&incident);
    if incident.acked_at.is_some() {
        return page(
            StatusCode::OK,
            "Already acknowledged",
            format!(
                "<p>{what}</p>{}{}",
                acked_line(&incident),
                check_link(&state, &incident)
            ),
        );
    }
    page(
        StatusCode::OK,
        "Acknowledge this incident?",
        format!(
            "<p>{what}</p>\
             <form method=\"post\">\
             <p><label>Your name <input name=\"by\" maxlength=\"{MAX_BY}\" autocomplete=\"name\"></label></p>\
             <p><label>Comment <input name=\"comment\" maxlength=\"{MAX_COMMENT}\" size=\"40\"></label></p>\
             <p><button type=\"submit\">Acknowledge</button></p>\
             </form>\
             <p>Acknowledging stops the reminders of this incident; its recovery is still \
             announced. A new incident of the check is not acknowledged.</p>{}",
            check_link(&state, &incident)
        ),
    )
}

/// `POST /ack/{token}`: acknowledges (the first acknowledgement stands).
async fn link_ack(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Bytes,
) -> Response {
    let incident = match linked(&state, &token).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let mut by = None;
    let mut comment = None;
    for (k, v) in form_urlencoded::parse(&body) {
        match k.as_ref() {
            "by" => by = Some(v.into_owned()),
            "comment" => comment = Some(v.into_owned()),
            _ => {}
        }
    }
    let (by, comment) = match ack_fields(by, comment, "acknowledge link") {
        Ok(f) => f,
        Err(errors) => {
            let list: String = errors
                .iter()
                .map(|e| format!("<li>{}: {}</li>", esc(&e.field), esc(&e.message)))
                .collect();
            return page(
                StatusCode::BAD_REQUEST,
                "Not acknowledged",
                format!("<ul>{list}</ul><p>Go back and shorten it.</p>"),
            );
        }
    };
    match acknowledge(&state, incident.id, &by, comment.as_deref()).await {
        // It resolved in between: the link has just expired.
        Ok(after) if after.acked_at.is_none() => page(
            StatusCode::GONE,
            "Already resolved",
            format!(
                "<p>{} recovered: the incident is over and this link has expired.</p>{}",
                esc(&after.check_name_or_label()),
                check_link(&state, &after)
            ),
        ),
        Ok(after) => page(
            StatusCode::OK,
            "Acknowledged",
            format!(
                "<p>{}</p>{}{}",
                describe(&after),
                acked_line(&after),
                check_link(&state, &after)
            ),
        ),
        Err(e) => e.into_response(),
    }
}

impl IncidentAck {
    fn check_name_or_label(&self) -> String {
        if self.check_name.is_empty() {
            self.check_label()
        } else {
            self.check_name.clone()
        }
    }
}

fn describe(i: &IncidentAck) -> String {
    let reason = i
        .reason
        .as_deref()
        .map(|r| format!(" ({})", esc(r)))
        .unwrap_or_default();
    format!(
        "<strong>{}</strong> is {}{reason} since {}.",
        esc(&i.check_name_or_label()),
        esc(&i.status),
        esc(&rfc3339(i.opened_at))
    )
}

fn acked_line(i: &IncidentAck) -> String {
    let comment = i
        .ack_comment
        .as_deref()
        .map(|c| format!(": “{}”", esc(c)))
        .unwrap_or_default();
    format!(
        "<p>Acknowledged by <strong>{}</strong> at {}{comment}.</p>",
        esc(i.acked_by.as_deref().unwrap_or("")),
        esc(&i.acked_at.map(rfc3339).unwrap_or_default())
    )
}

fn check_link(state: &AppState, i: &IncidentAck) -> String {
    format!(
        "<p><a href=\"{}/checks/{}\">The check's page</a></p>",
        esc(&state.config.base_url),
        esc(&i.check_label())
    )
}

/// A small standalone page; the token in its address must not leak to
/// other sites nor be cached.
fn page(status: StatusCode, title: &str, body: String) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\">\
         <title>overdue: {t}</title>\
         <link rel=\"stylesheet\" href=\"/assets/overdue.css\"></head>\
         <body class=\"ack\"><h1>{t}</h1>{body}</body></html>",
        t = esc(title)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        html,
    )
        .into_response()
}

/// Text made safe for HTML content and attribute values.
fn esc(s: &str) -> String {
    super::badge::xml_escape(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_trimmed_and_limited() {
        assert_eq!(
            ack_fields(Some("  ana ".into()), Some(" ".into()), "api").unwrap(),
            ("ana".to_string(), None)
        );
        assert_eq!(ack_fields(None, None, "api").unwrap().0, "api");
        let e = ack_fields(
            Some("x".repeat(MAX_BY + 1)),
            Some("y".repeat(MAX_COMMENT + 1)),
            "api",
        )
        .unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["by", "comment"]);
    }

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }
}
