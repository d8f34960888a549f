//! HTTP: the ping endpoints, the management API, health probes.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::routing::{any, get};
use axum::Router;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::notify::dispatch::DispatchHandle;
use crate::store::Store;
use crate::workers::evaluator::{EvaluatorHandle, Observed};
use crate::workers::ingest::Ingest;
use crate::workers::reconcile::Live;
use error::AppError;

pub mod ack; // acknowledging incidents: the API and the signed one-click link
pub mod admin; // reload and other administrative routes
pub mod alerting; // silences, notifications, receivers and routes under /api/v1
pub mod api; // the native management API /api/v1: checks and their history
pub mod auth; // API keys, scopes and the loopback-only rule without keys
pub mod badge; // status badges (svg, json, shields)
pub mod browser; // what browsers may do: no cross-site writes, JSON bodies, no DNS rebinding
pub mod error; // AppError: one error path to JSON answers
pub mod guard; // the job guard: due, lock and unlock beside the ping URLs
pub mod history; // what was recorded of a check: pings, runs, flips, incidents, events
pub mod metrics; // /metrics, optionally on its own listener and behind a token
pub mod ping; // the healthchecks.io-compatible ping endpoint
pub mod rate_limit; // the ping rate limiters
pub mod serve; // the HTTP server: timeouts, graceful shutdown
pub mod slots; // the slot ledger under /api/v1: slots of a check, dead letters across checks, resolve
pub mod snooze; // snooze from the job side: a silence for one check, beside the ping URLs
pub mod ui; // the server-rendered dashboard
pub mod v3; // the healthchecks.io v3 API subset
mod v3_values; // how healthchecks spells values: unique keys, instants, statuses, tags

/// What every handler shares: axum clones it for every request, so it is
/// one reference count, not one per part.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct Shared {
    pub store: Arc<dyn Store>,
    pub ingest: Arc<Ingest>,
    /// Every change to a check goes through here (read-your-writes).
    pub checks: Arc<crate::checks::Checks>,
    /// Waits for other replicas' changes to reach this one.
    pub changes: Arc<crate::lease::ChangeBarrier>,
    pub config: Arc<Config>,
    pub evaluator: EvaluatorHandle,
    pub observed: Arc<Observed>,
    /// Tells the alert dispatcher that silences changed.
    pub dispatch: DispatchHandle,
    /// The service metrics.
    pub metrics: Arc<Metrics>,
    /// The reloadable configuration (API keys, receivers, routes, silences).
    pub live: Arc<Live>,
    /// `[rate_limit]`: the ping limiters.
    pub limits: Arc<rate_limit::PingLimits>,
    /// Signs and checks acknowledge links.
    pub links: crate::notify::ack::LinkKey,
    /// Derives CSRF tokens and label badge keys.
    pub page_key: browser::PageKey,
    /// Which label a label badge key names.
    pub label_badges: badge::LabelBadges,
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    use axum::middleware::from_fn_with_state as guard;
    // The ping routes stay open to every client, browsers included.
    let mut app = Router::new()
        .route("/ping/{*path}", any(ping::ping))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .nest("/api/v1", v1().layer(guard(state.clone(), browser::api_v1)))
        .nest(
            "/api/v3",
            v3::router().layer(guard(state.clone(), browser::api_v3)),
        )
        .merge(badge::router())
        .merge(ack::link_router())
        .merge(ui::router().layer(guard(state.clone(), browser::dashboard)));
    // With a listener of its own, /metrics is served only there.
    if state.config.metrics.listen.is_none() {
        app = app.merge(metrics::router());
    }
    // Set explicitly so that the limit named in a 413 is the one applied.
    app.layer(DefaultBodyLimit::max(error::API_BODY_LIMIT))
        .with_state(state)
}

/// `/api/v1`: the documented routes, the document itself, and a JSON 404.
fn v1() -> Router<AppState> {
    let (routes, doc) = admin::v1();
    let doc = Arc::new(doc.to_pretty_json().unwrap_or_default());
    routes
        .route(
            "/openapi.json",
            get(move || {
                let doc = doc.clone();
                async move { ([(header::CONTENT_TYPE, "application/json")], (*doc).clone()) }
            }),
        )
        .fallback(|| async { AppError::NotFound("no such API route".to_string()) })
        .layer(axum::middleware::map_response(error::json_rejections))
}

/// The OpenAPI document of `/api/v1`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    admin::v1().1
}

/// Liveness: the process serves requests.
async fn healthz() -> &'static str {
    "ok"
}

/// What `/readyz` answers while pings are refused for a full disk.
pub const READYZ_DISK_FULL: &str =
    "database disk full: pings are refused (503) until space is freed";

/// Readiness: the database answers, and its disk had room for the last
/// pings (see [`crate::workers::disk_full`]).
async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.ingest.disk_full(crate::clock::now_ms()).is_some() {
        return (StatusCode::SERVICE_UNAVAILABLE, READYZ_DISK_FULL);
    }
    match state.store.health().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable")
        }
    }
}
