//! The server's own resources under `/api/v1`: status, API keys, reload, and
//! the OpenAPI document of the whole native API.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as OpenApiDoc;
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::parse_json;
use super::auth::{ReadAccess, WriteAccess};
use super::error::{AppError, ErrorBody};
use super::AppState;
use crate::config::Scope;
use crate::domain::check::FieldError;
use crate::domain::evaluate::RulesCache;
use crate::store::keys::ApiKeyRecord;
use crate::workers::reconcile::{ReloadError, Report};

/// The server's routes, relative to `/api/v1`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(status))
        .routes(routes!(list_keys, create_key))
        .routes(routes!(delete_key))
        .routes(routes!(reload))
}

/// The whole `/api/v1` router and its OpenAPI document, from one list of routes.
pub fn v1() -> (axum::Router<AppState>, OpenApiDoc) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(super::api::router())
        .merge(super::alerting::router())
        .merge(super::ack::api_router())
        .merge(router())
        .split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    (router, doc)
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "overdue API",
        description = "The native management API of overdue, a heartbeat watchdog. \
                       Authenticate with `X-Api-Key: KEY` or `Authorization: Bearer KEY`; \
                       each operation's security requirement names the scope it needs \
                       (`read` or `write`). Errors are `{\"error\": {\"code\", \"message\"}}`.",
        license(name = "MIT")
    ),
    servers((url = "/api/v1")),
    modifiers(&Security),
    tags(
        (name = "checks", description = "Checks, their pings, runs, flips, incidents and events"),
        (name = "slots", description = "The slot ledger: what became of each schedule slot, dead letters, resolving by hand"),
        (name = "alerting", description = "Notifications, silences, receivers and routes"),
        (name = "server", description = "Status, API keys and configuration reload"),
    )
)]
struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut OpenApiDoc) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-Api-Key"))),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The server's status.
#[derive(Serialize, ToSchema)]
pub struct StatusView {
    /// `ok`, or `degraded` while `problems` lists something.
    status: &'static str,
    version: &'static str,
    /// How many checks are in each status (`new, up, late, down, stalled, paused`).
    checks: BTreeMap<String, usize>,
    /// How many checks are running (have an open run).
    running: usize,
    /// What keeps the server from working as it should; empty when nothing does.
    problems: Vec<ProblemView>,
}

/// Something that keeps the server from working as it should.
#[derive(Serialize, ToSchema)]
pub struct ProblemView {
    /// What it is: `disk_full` (the database's disk is full: pings are
    /// answered `503` and not stored).
    code: &'static str,
    /// What it means, in words.
    message: String,
    /// When it began (RFC 3339).
    since: String,
    /// When it was last seen (RFC 3339).
    last_seen: String,
}

#[utoipa::path(get, path = "/status", tag = "server",
    summary = "The server's status and a count of checks by status",
    responses(
        (status = 200, description = "The server works", body = StatusView),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    ),
    security(("api_key" = ["read"]), ("bearer" = ["read"])))]
async fn status(
    State(state): State<AppState>,
    _: ReadAccess,
) -> Result<Json<StatusView>, AppError> {
    let checks = state.store.list_checks().await?;
    let spans = state.observed.observation();
    let mut cache = RulesCache::default();
    let mut counts: BTreeMap<String, usize> = ["new", "up", "late", "down", "stalled", "paused"]
        .iter()
        .map(|s| (s.to_string(), 0))
        .collect();
    let mut running = 0;
    for c in checks {
        let v = super::api::CheckView::new(c, &state.config.base_url, &spans, &mut cache);
        *counts.entry(v.status.as_str().to_string()).or_default() += 1;
        running += usize::from(v.running);
    }
    let problems: Vec<ProblemView> = state
        .ingest
        .disk_full(crate::clock::now_ms())
        .map(|spell| ProblemView {
            code: "disk_full",
            message: format!(
                "the database's disk is full: pings are answered 503 and not stored \
                 until space is freed ({} refused so far)",
                spell.refused
            ),
            since: super::api::rfc3339(spell.since),
            last_seen: super::api::rfc3339(spell.last),
        })
        .into_iter()
        .collect();
    Ok(Json(StatusView {
        status: if problems.is_empty() {
            "ok"
        } else {
            "degraded"
        },
        version: env!("CARGO_PKG_VERSION"),
        checks: counts,
        running,
        problems,
    }))
}

/// An API key (never the key itself, except once when it is created).
#[derive(Serialize, ToSchema)]
pub struct KeyView {
    id: String,
    name: String,
    /// `read` or `write`.
    scope: String,
    /// `api` (created here) or `config` (declared in the config file).
    source: &'static str,
    created_at: Option<String>,
    /// The key: only in the answer to its creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

/// API keys.
#[derive(Serialize, ToSchema)]
pub struct KeyList {
    keys: Vec<KeyView>,
}

/// A key to create.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyInput {
    name: String,
    /// `read` or `write`.
    scope: String,
}

fn key_view(r: ApiKeyRecord) -> KeyView {
    KeyView {
        id: r.id,
        name: r.name,
        scope: r.scope,
        source: "api",
        created_at: Some(super::api::rfc3339(r.created_at)),
        key: None,
    }
}

#[utoipa::path(get, path = "/keys", tag = "server",
    summary = "API keys from the config file and the API (never the keys themselves)",
    responses((status = 200, description = "Keys", body = KeyList)),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn list_keys(
    State(state): State<AppState>,
    _: WriteAccess,
) -> Result<Json<KeyList>, AppError> {
    let config = state.live.config();
    let mut keys: Vec<KeyView> = config
        .api_keys
        .iter()
        .map(|k| KeyView {
            id: format!("config-{}", k.name),
            name: k.name.clone(),
            scope: scope_name(k.scope).to_string(),
            source: "config",
            created_at: None,
            key: None,
        })
        .collect();
    keys.extend(state.store.list_api_keys().await?.into_iter().map(key_view));
    Ok(Json(KeyList { keys }))
}

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Read => "read",
        Scope::Write => "write",
    }
}

#[utoipa::path(post, path = "/keys", tag = "server",
    summary = "Create an API key; the answer is the only place the key is ever shown",
    request_body = KeyInput,
    responses(
        (status = 201, description = "Created; `key` holds the key", body = KeyView),
        (status = 400, description = "Invalid fields, each named", body = ErrorBody),
        (status = 409, description = "A read key while no write key exists", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn create_key(
    State(state): State<AppState>,
    _: WriteAccess,
    body: Bytes,
) -> Result<(StatusCode, Json<KeyView>), AppError> {
    let input: KeyInput = parse_json(&body)?;
    let mut errors = Vec::new();
    if input.name.trim().is_empty() || input.name.len() > 100 {
        errors.push(FieldError {
            field: "name".into(),
            message: "must be 1 to 100 characters".into(),
        });
    }
    if !matches!(input.scope.as_str(), "read" | "write") {
        errors.push(FieldError {
            field: "scope".into(),
            message: format!("{:?} is not one of \"read\", \"write\"", input.scope),
        });
    }
    if !errors.is_empty() {
        return Err(AppError::Invalid(errors));
    }
    // The first key ends the loopback's open access: were it a read key,
    // nobody could write any more (nor make a write key) without editing
    // the config file and restarting.
    if input.scope == "read" && !write_key_exists(&state, None).await? {
        return Err(AppError::Conflict(
            "no write key exists yet: create a write key first (scope \"write\"), or this \
             read key would end the loopback's write access and lock every writer out"
                .into(),
        ));
    }
    let secret = format!("od_{}", hex::encode(rand::random::<[u8; 24]>()));
    let record = ApiKeyRecord {
        id: uuid::Uuid::new_v4().to_string(),
        name: input.name,
        scope: input.scope,
        sha256: hex::encode(Sha256::digest(secret.as_bytes())),
        created_at: crate::clock::now_ms(),
    };
    state.store.put_api_key(&record).await?;
    let mut view = key_view(record);
    view.key = Some(secret);
    Ok((StatusCode::CREATED, Json(view)))
}

/// Whether a write key exists, in the config file or made through the API
/// (other than `except`).
async fn write_key_exists(state: &AppState, except: Option<&str>) -> Result<bool, AppError> {
    if state
        .live
        .config()
        .api_keys
        .iter()
        .any(|k| k.scope == Scope::Write)
    {
        return Ok(true);
    }
    Ok(state
        .store
        .list_api_keys()
        .await?
        .iter()
        .any(|k| k.scope == "write" && Some(k.id.as_str()) != except))
}

#[utoipa::path(delete, path = "/keys/{id}", tag = "server",
    summary = "Delete an API key created through the API",
    params(("id" = String, Path, description = "The key's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such key", body = ErrorBody),
        (status = 409, description = "Declared in the config file, or the last write key while read keys remain", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn delete_key(
    State(state): State<AppState>,
    _: WriteAccess,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    if id.starts_with("config-") {
        return Err(AppError::Conflict(format!(
            "key {id:?} is declared in the config file; remove it there"
        )));
    }
    // Deleting the last write key while read keys remain locks writers out
    // just as a first read key would.
    let stored = state.store.list_api_keys().await?;
    let others_read = stored.iter().any(|k| k.id != id && k.scope == "read")
        || state
            .live
            .config()
            .api_keys
            .iter()
            .any(|k| k.scope == Scope::Read);
    let is_write = stored.iter().any(|k| k.id == id && k.scope == "write");
    if is_write && others_read && !write_key_exists(&state, Some(&id)).await? {
        return Err(AppError::Conflict(format!(
            "key {id:?} is the last write key and read keys remain: create another write key \
             first, or delete the read keys, so that writers are not locked out"
        )));
    }
    state.store.delete_api_key(&id).await.map_err(|e| match e {
        crate::store::StoreError::NotFound => AppError::NotFound(format!("no API key {id:?}")),
        other => other.into(),
    })?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/reload", tag = "server",
    summary = "Read the config file again and put it in force (as SIGHUP does)",
    description = "Checks declared in the file are created, updated or deleted to match it; \
                   checks created through the API are never touched. Receivers, routes, \
                   silences and API keys of the file replace the old ones. An invalid file \
                   changes nothing: the answer lists every problem.",
    responses(
        (status = 200, description = "Reloaded", body = Report),
        (status = 400, description = "The file is invalid; nothing changed", body = ErrorBody),
        (status = 409, description = "The server was started without a config file", body = ErrorBody),
    ),
    security(("api_key" = ["write"]), ("bearer" = ["write"])))]
async fn reload(State(state): State<AppState>, _: WriteAccess) -> Result<Json<Report>, AppError> {
    match state.live.reload().await {
        Ok(report) => Ok(Json(report)),
        Err(ReloadError::Invalid(errors)) => Err(AppError::Invalid(
            errors
                .0
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
        )),
        Err(e @ ReloadError::NoFile) => Err(AppError::Conflict(e.to_string())),
        Err(ReloadError::Store(e)) => Err(e.into()),
    }
}
