//! HTTP: the ping endpoints, the management API, health probes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{any, get};
use axum::Router;

use crate::config::Config;
use crate::evaluator::{EvaluatorHandle, Observed};
use crate::ingest::Ingest;
use crate::metrics::Metrics;
use crate::notify::dispatch::DispatchHandle;
use crate::store::Store;

pub mod alerting;
pub mod api;
pub mod auth;
pub mod error;
pub mod metrics;
pub mod ping;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub ingest: Arc<Ingest>,
    pub config: Arc<Config>,
    pub evaluator: EvaluatorHandle,
    pub observed: Arc<Observed>,
    /// Tells the alert dispatcher that silences changed.
    pub dispatch: DispatchHandle,
    /// The service metrics.
    pub metrics: Arc<Metrics>,
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let mut app = Router::new()
        .route("/ping/{*path}", any(ping::ping))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .nest("/api/v1", api::router().merge(alerting::router()));
    // With a listener of its own, /metrics is served only there.
    if state.config.metrics.listen.is_none() {
        app = app.merge(metrics::router());
    }
    app.with_state(state)
}

/// Liveness: the process serves requests.
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the database answers.
async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match state.store.health().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable")
        }
    }
}
