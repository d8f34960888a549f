//! The API's error type: one place that turns failures into status codes and
//! `{ "error": { "code", "message" } }` bodies. Internal detail is logged, never sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::domain::check::FieldError;
use crate::store::StoreError;

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
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => AppError::NotFound("not found".to_string()),
            StoreError::Conflict(m) => AppError::Conflict(m),
            StoreError::NotLeader => AppError::Unavailable(anyhow::anyhow!("not the leader")),
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
        };
        let body = match &self {
            AppError::Invalid(fields) => json!({ "error": {
                "code": code,
                "message": fields.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                "fields": fields.iter().map(|f| json!({"field": f.field, "message": f.message})).collect::<Vec<_>>(),
            }}),
            AppError::Unavailable(e) => {
                tracing::error!(error = %format!("{e:#}"), "database error");
                json!({ "error": { "code": code, "message": self.to_string() } })
            }
            other => json!({ "error": { "code": code, "message": other.to_string() } }),
        };
        (status, Json(body)).into_response()
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
    /// `forbidden` or `unavailable`.
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
