//! The API's error type: one place that turns failures into status codes and
//! `{ "error": { "code", "message" } }` bodies. Internal detail is logged, never sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::domain::check::FieldError;
use crate::log_throttle::Throttled;
use crate::store::StoreError;

/// What a write refused for a full disk answers.
pub const DISK_FULL: &str =
    "the database's disk is full: nothing was changed; try again once space is freed";

/// Database errors answered `503`: logged once per interval while they
/// repeat (one per request would flood the log during an outage).
static DATABASE_ERROR: Throttled = Throttled::every_10s();

/// Logs a database error behind an API answer, throttled.
pub fn log_database_error(e: &anyhow::Error) {
    if let Some(suppressed) = DATABASE_ERROR.hit() {
        tracing::error!(error = %format!("{e:#}"), suppressed, "database error (while this repeats it is logged every 10s, suppressed counting the rest)");
    }
}

/// An error answered by the `/api/v1` routes.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("invalid fields")]
    Invalid(Vec<FieldError>),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("the database is unavailable")]
    Unavailable(#[source] anyhow::Error),
    #[error("{DISK_FULL}")]
    DiskFull(#[source] anyhow::Error),
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        let full = e.is_disk_full();
        match e {
            StoreError::NotFound => AppError::NotFound("not found".to_string()),
            StoreError::Conflict(m) => AppError::Conflict(m),
            StoreError::NotLeader => AppError::Unavailable(anyhow::anyhow!("not the leader")),
            StoreError::Other(e) if full => AppError::DiskFull(e),
            StoreError::Other(e) => AppError::Unavailable(e),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            AppError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AppError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid"),
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AppError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            AppError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            AppError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            AppError::DiskFull(_) => (StatusCode::SERVICE_UNAVAILABLE, "disk_full"),
        };
        let body = match &self {
            AppError::Invalid(fields) => json!({ "error": {
                "code": code,
                "message": fields.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                "fields": fields.iter().map(|f| json!({"field": f.field, "message": f.message})).collect::<Vec<_>>(),
            }}),
            AppError::Unavailable(e) | AppError::DiskFull(e) => {
                log_database_error(e);
                json!({ "error": { "code": code, "message": self.to_string() } })
            }
            other => json!({ "error": { "code": code, "message": other.to_string() } }),
        };
        (status, Json(body)).into_response()
    }
}

/// The largest request body the API reads (JSON bodies); larger ones are 413.
pub const API_BODY_LIMIT: usize = 2 * 1024 * 1024;

/// A client error made by axum itself rather than by a handler: a path that
/// is not UTF-8, a query that does not parse, a body over the limit, a method
/// the route does not have. axum answers those in plain text (or, for 405,
/// with no text at all); the APIs answer every error as JSON.
pub struct Rejected {
    pub status: StatusCode,
    pub message: String,
    allow: Option<HeaderValue>,
}

impl Rejected {
    /// The rejection in `response`, or the response itself when it is not a
    /// plain-text client error.
    pub async fn from_response(response: Response) -> Result<Rejected, Response> {
        let status = response.status();
        let json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        // Only the statuses axum's extractors and method routing answer:
        // a handler's own plain-text answer (v3's 409 is healthchecks')
        // is left alone.
        let axum_made = matches!(
            status,
            StatusCode::BAD_REQUEST
                | StatusCode::METHOD_NOT_ALLOWED
                | StatusCode::PAYLOAD_TOO_LARGE
                | StatusCode::UNSUPPORTED_MEDIA_TYPE
                | StatusCode::UNPROCESSABLE_ENTITY
        );
        if !axum_made || json {
            return Err(response);
        }
        let allow = response.headers().get(header::ALLOW).cloned();
        let text = axum::body::to_bytes(response.into_body(), 64 * 1024)
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        let message = match status {
            // axum's text does not say what the limit is.
            StatusCode::PAYLOAD_TOO_LARGE => {
                format!("the request body is larger than the limit of {API_BODY_LIMIT} bytes")
            }
            StatusCode::METHOD_NOT_ALLOWED => format!(
                "method not allowed; this route allows {}",
                allow
                    .as_ref()
                    .and_then(|a| a.to_str().ok())
                    .unwrap_or("no method")
            ),
            _ if text.is_empty() => status
                .canonical_reason()
                .unwrap_or("bad request")
                .to_lowercase(),
            _ => text,
        };
        Ok(Rejected {
            status,
            message,
            allow,
        })
    }

    /// `bad_request`, `payload_too_large`, `method_not_allowed`, …
    pub fn code(&self) -> String {
        self.status
            .canonical_reason()
            .unwrap_or("bad request")
            .to_lowercase()
            .replace(' ', "_")
    }

    /// The answer with `body`, keeping `Allow` on a 405.
    pub fn respond(self, body: Value) -> Response {
        let mut response = (self.status, Json(body)).into_response();
        if let Some(allow) = self.allow {
            response.headers_mut().insert(header::ALLOW, allow);
        }
        response
    }
}

/// Answers axum's own rejections under `/api/v1` as `{ "error": { "code", "message" } }`.
pub async fn json_rejections(response: Response) -> Response {
    match Rejected::from_response(response).await {
        Ok(r) => {
            let body = json!({ "error": { "code": r.code(), "message": r.message } });
            r.respond(body)
        }
        Err(response) => response,
    }
}

/// The error body of every `/api/v1` route.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ErrorDetail {
    /// `bad_request`, `invalid`, `not_found`, `conflict`, `unauthorized`,
    /// `forbidden` or `unavailable`; for requests refused before they reach
    /// the route, `payload_too_large`, `method_not_allowed` or
    /// `unsupported_media_type`.
    code: String,
    message: String,
    /// With `invalid`: every field at fault.
    fields: Option<Vec<FieldErrorDoc>>,
}

/// One invalid field.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct FieldErrorDoc {
    field: String,
    message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;

    async fn answer(e: StoreError) -> (StatusCode, Value) {
        let response = AppError::from(e).into_response();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_full_disk_is_a_503_that_says_so_and_other_failures_stay_unavailable() {
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::raw_sql("CREATE TABLE t (b BLOB); PRAGMA max_page_count = 3;")
            .execute(&mut c)
            .await
            .unwrap();
        let full = sqlx::query("INSERT INTO t VALUES (zeroblob(100000))")
            .execute(&mut c)
            .await
            .unwrap_err();
        let (status, body) = answer(StoreError::from(full)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "disk_full", "{body}");
        assert_eq!(body["error"]["message"], DISK_FULL, "{body}");

        let other = sqlx::query("SELECT * FROM nowhere")
            .execute(&mut c)
            .await
            .unwrap_err();
        let (status, body) = answer(StoreError::from(other)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "unavailable", "{body}");
        assert_eq!(body["error"]["message"], "the database is unavailable");
    }
}
