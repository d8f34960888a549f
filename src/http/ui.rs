//! The web dashboard (SPEC §10, issue #8): a server-rendered list of checks at
//! `/` and a page per check, with templates compiled into the binary and no
//! JavaScript or external assets.
//!
//! Login: an API key entered once and kept (hex-encoded) in an HttpOnly,
//! SameSite=Strict cookie, or HTTP basic auth for `[dashboard] basic_auth`
//! users. Every state-changing form carries a CSRF token bound to the
//! credential that signed in, so a token from one session is no use in another.

use std::sync::Arc;

use axum::extract::{Form, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use chrono::{DateTime, Utc};
use minijinja::{context, Environment};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::api::find;
use super::auth::{scope_of, Denied, ReadAccess};
use super::badge::BadgeState;
use super::error::AppError;
use super::v3::unique_key;
use super::AppState;
mod list; // the list of checks at `/`, in pages
mod slots; // the slot ledger: a strip of ticks per check, a slot table per check page
mod spark; // the item sparkline and the usual band

use self::spark::{band_context, count_text, spark_up_to, usual_band};
use crate::clock;
use crate::config::Scope;
use crate::store::notify::NotificationFilter;

/// The session cookie: the API key, hex-encoded.
pub const COOKIE: &str = "overdue_key";

/// Pings shown in a check's log, and item counts in a sparkline.
const PING_LOG: u32 = 50;
const SPARK_POINTS: usize = 24;
const ORDER: &[&str] = &["down", "stalled", "late", "new", "up", "paused"];

/// The compiled templates.
struct Templates(Environment<'static>);

/// The dashboard routes.
pub fn router() -> Router<AppState> {
    let mut env = Environment::new();
    for (name, text) in [
        ("base.html", include_str!("templates/base.html")),
        ("list.html", include_str!("templates/list.html")),
        ("check.html", include_str!("templates/check.html")),
        ("login.html", include_str!("templates/login.html")),
        ("missing.html", include_str!("templates/missing.html")),
    ] {
        // The templates are part of the binary: a syntax error is a bug caught by every test.
        env.add_template(name, text).expect("dashboard template");
    }
    Router::new()
        .route("/assets/overdue.css", get(stylesheet))
        .route("/", get(list::list))
        .route("/checks/{key}", get(check_page))
        .route("/checks/{key}/pause", post(pause))
        .route("/checks/{key}/resume", post(resume))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .layer(Extension(Arc::new(Templates(env))))
        .layer(axum::middleware::map_response(page_headers))
}

/// What the dashboard's and the acknowledge pages' answers allow a browser:
/// no script at all, style and images from this server only (the one
/// stylesheet; no inline style), forms posted only here, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'none'; \
    style-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// Adds the pages' security headers to an answer (and its errors and
/// redirects): the policy above, no content sniffing, and no referrer (an
/// acknowledge page's address is its token).
pub(super) async fn page_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The pages' stylesheet, part of the binary.
async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("templates/overdue.css"),
    )
        .into_response()
}

/// Who is looking, and the CSRF token their forms must carry.
pub struct Viewer {
    scope: Scope,
    csrf: String,
    /// Signed in with the cookie (so a logout button makes sense).
    cookie: bool,
}

/// Why a page cannot be shown: sign in first, not from here, or the
/// database failed.
pub enum Refused {
    Login { basic: bool },
    Forbidden(String),
    Error(AppError),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            // With basic-auth users, let the browser ask for them; the body
            // still offers the key login for those who cancel.
            Refused::Login { basic: true } => (
                StatusCode::UNAUTHORIZED,
                [
                    (header::WWW_AUTHENTICATE, "Basic realm=\"overdue\", charset=\"UTF-8\""),
                    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                ],
                "<!doctype html><title>overdue: sign in</title><p><a href=\"/login\">Sign in with an API key</a></p>",
            )
                .into_response(),
            Refused::Login { basic: false } => Redirect::to("/login").into_response(),
            Refused::Forbidden(why) => forbidden(&why),
            Refused::Error(e) => e.into_response(),
        }
    }
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Refused;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Refused> {
        let basic = !state.config.dashboard.basic_auth.is_empty();
        if let Some((user, password)) = basic_credentials(&parts.headers) {
            return match state.config.dashboard.basic_scope(&user, &password) {
                Some(scope) => Ok(Viewer {
                    scope,
                    csrf: csrf_token(state, &format!("basic\0{user}\0{password}")),
                    cookie: false,
                }),
                None => Err(Refused::Login { basic }),
            };
        }
        let cookie_key = cookie_key(&parts.headers);
        if let Some(key) = &cookie_key {
            // The cookie stands in for the API key header the API takes.
            let Ok(value) = HeaderValue::from_str(key) else {
                return Err(Refused::Login { basic });
            };
            parts.headers.remove(header::AUTHORIZATION);
            parts.headers.insert("x-api-key", value);
        }
        match scope_of(parts, state).await {
            Ok(scope) => {
                let principal = match (&cookie_key, super::auth::presented_key(&parts.headers)) {
                    (Some(k), _) => format!("key\0{k}"),
                    (None, Some(k)) => format!("key\0{k}"),
                    // Loopback without any key configured.
                    (None, None) => "open".to_string(),
                };
                Ok(Viewer {
                    scope,
                    csrf: csrf_token(state, &principal),
                    cookie: cookie_key.is_some(),
                })
            }
            Err(Denied::Unavailable(e)) => Err(Refused::Error(e.into())),
            // Basic-auth users may still sign in; without them, signing in
            // would not help: the request came by a host name that a
            // rebound page could use.
            Err(Denied::Rebinding(why)) if !basic => Err(Refused::Forbidden(why)),
            Err(_) => Err(Refused::Login { basic }),
        }
    }
}

/// A keyed hash of the credential: the same on every replica and across
/// restarts (keyed by the installation's random page key, which no one
/// outside can compute, unlike anything in the configuration).
fn csrf_token(state: &AppState, principal: &str) -> String {
    state.page_key.tag("overdue csrf", &[principal])
}

fn csrf_ok(expected: &str, given: &str) -> bool {
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The API key in the session cookie.
fn cookie_key(headers: &HeaderMap) -> Option<String> {
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((name, v)) = pair.trim().split_once('=') {
                if name == COOKIE {
                    let bytes = hex::decode(v).ok()?;
                    return String::from_utf8(bytes).ok();
                }
            }
        }
    }
    None
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, data) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(base64_decode(data.trim())?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// Standard base64 with padding, as basic auth sends it.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn render(t: &Templates, name: &str, ctx: minijinja::Value) -> Result<Response, AppError> {
    let html =
        t.0.get_template(name)
            .and_then(|tpl| tpl.render(ctx))
            .map_err(|e| AppError::Unavailable(anyhow::anyhow!("template {name}: {e:#}")))?;
    Ok((
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        ],
        Html(html),
    )
        .into_response())
}

/// "3 min ago" / "in 5 min", from `now`.
pub fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds();
    let future = secs < 0;
    let s = secs.unsigned_abs();
    let words = if s < 5 {
        return "just now".to_string();
    } else if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min", s / 60)
    } else if s < 86_400 * 2 {
        format!("{} h", s / 3600)
    } else {
        format!("{} days", s / 86_400)
    };
    if future {
        format!("in {words}")
    } else {
        format!("{words} ago")
    }
}

/// A timestamp for a template: the words, and the exact instant for a hover.
#[derive(Serialize)]
struct When {
    rel: String,
    exact: String,
}

fn when(ms: Option<i64>, now: DateTime<Utc>) -> Option<When> {
    let t = DateTime::<Utc>::from_timestamp_millis(ms?)?;
    Some(When {
        rel: relative(t, now),
        exact: super::api::rfc3339(ms?),
    })
}

/// A ping's instant: how long ago on the server's timeline, and exactly as
/// the wall clock read when it arrived (after a backward wall-clock step the
/// two differ until the timeline has caught up; SPEC §12).
fn when_pinged(ms: i64, now: DateTime<Utc>) -> Option<When> {
    let t = DateTime::<Utc>::from_timestamp_millis(ms)?;
    Some(When {
        rel: relative(t, now),
        exact: super::api::rfc3339(clock::wall_of(ms)),
    })
}

fn when_str(s: Option<&str>, now: DateTime<Utc>) -> Option<When> {
    let t = DateTime::parse_from_rfc3339(s?).ok()?.with_timezone(&Utc);
    when(Some(t.timestamp_millis()), now)
}

/// The status names the dashboard shows: the ones the API uses.
fn status_word(s: &str) -> &'static str {
    ORDER.iter().find(|o| **o == s).copied().unwrap_or("new")
}

fn reason_words(r: &str) -> String {
    match r {
        "overdue" => "no success in time".to_string(),
        "failed" => "the job reported failure".to_string(),
        "run_timeout" => "a run started and did not finish in time".to_string(),
        "zero_items" => "successes reported no items".to_string(),
        "low_items" => "successes reported fewer items than min_items".to_string(),
        "below_usual" => "successes reported far fewer items than usual for their hour of the week (items_below_usual)".to_string(),
        other => other.replace('_', " "),
    }
}

/// One active-hours window as text and as a 24-hour bar (percent offsets).
#[derive(Serialize)]
struct WindowRow {
    text: String,
    /// (left %, width %) segments of the day that are active.
    segments: Vec<(f64, f64)>,
}

fn minutes(hhmm: &str) -> Option<f64> {
    let (h, m) = hhmm.split_once(':')?;
    Some(h.parse::<f64>().ok()? * 60.0 + m.parse::<f64>().ok()?)
}

fn window_row(start: &str, end: &str, days: &[String], tz: &str) -> WindowRow {
    let on = if days.is_empty() {
        "every day".to_string()
    } else {
        days.join(", ")
    };
    let text = format!("{start}–{end} ({tz}), {on}");
    let day = 1440.0;
    let segments = match (minutes(start), minutes(end)) {
        (Some(s), Some(e)) if s < e => vec![(s / day * 100.0, (e - s) / day * 100.0)],
        // Across midnight (or the whole day when start = end).
        (Some(s), Some(e)) => vec![
            (0.0, e / day * 100.0),
            (s / day * 100.0, (day - s) / day * 100.0),
        ],
        _ => Vec::new(),
    };
    // Two decimals are plenty for the bar and keep the markup short.
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let segments = segments
        .into_iter()
        .map(|(l, w)| (round(l), round(w)))
        .collect();
    WindowRow { text, segments }
}

#[derive(Serialize)]
struct PingRow {
    n: i64,
    kind: &'static str,
    at: Option<When>,
    exit_status: Option<i64>,
    items: Option<i64>,
    rid: Option<String>,
    method: String,
    remote_addr: Option<String>,
    ua: Option<String>,
    duration: Option<String>,
    body: Option<String>,
    body_size: usize,
    /// A skip's reason.
    reason: Option<String>,
}

fn seconds_words(ms: i64) -> String {
    crate::domain::explain::duration_words(std::time::Duration::from_millis(ms.max(0) as u64))
}

async fn check_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Extension(t): Extension<Arc<Templates>>,
    Path(key): Path<String>,
) -> Result<Response, AppError> {
    let now = clock::now();
    let writer = viewer.scope >= Scope::Write;
    let check = match find(&state, &key).await {
        Ok(c) => c,
        // A browser gets a page, not the API's JSON.
        Err(AppError::NotFound(_)) => {
            let mut page = render(&t, "missing.html", context! { key })?;
            *page.status_mut() = StatusCode::NOT_FOUND;
            return Ok(page);
        }
        Err(e) => return Err(e),
    };
    let explanation = crate::domain::explain::explain(&check.spec, now);
    let windows: Vec<WindowRow> = check
        .spec
        .active_hours
        .iter()
        .map(|w| window_row(&w.start, &w.end, &w.days, &check.spec.tz))
        .collect();
    let pings = state.store.list_pings(check.id, PING_LOG).await?;
    let items: Vec<i64> = {
        let mut i: Vec<i64> = pings
            .iter()
            .filter_map(|p| p.items)
            .take(SPARK_POINTS)
            .collect();
        i.reverse();
        i
    };
    let pings: Vec<PingRow> = pings
        .into_iter()
        .map(|p| {
            let body_size = p.body.len();
            let body = (body_size > 0).then(|| String::from_utf8_lossy(&p.body).into_owned());
            PingRow {
                n: p.n,
                kind: p.kind.as_str(),
                at: when_pinged(p.at, now),
                exit_status: p.exit_status,
                items: p.items,
                rid: p.rid,
                method: p.method,
                remote_addr: p.remote_addr,
                ua: p.user_agent,
                duration: p.duration_ms.map(seconds_words),
                body,
                body_size,
                reason: p.reason,
            }
        })
        .collect();
    let runs: Vec<_> = state
        .store
        .list_runs(check.id, 50)
        .await?
        .into_iter()
        .map(|r| {
            context! {
                rid => r.rid,
                started => when(Some(r.started_at), now),
                ended => when(r.ended_at, now),
                outcome => r.outcome.unwrap_or_else(|| "open".to_string()),
                reason => r.reason,
                duration => r.duration_ms.map(seconds_words),
                overlapped => r.overlapped,
            }
        })
        .collect();
    let flips: Vec<_> = state
        .store
        .list_flips(check.id, 50)
        .await?
        .into_iter()
        .map(|f| {
            context! {
                at => when(Some(f.at), now),
                from => f.old_status,
                to => f.new_status,
                reason => f.reason,
            }
        })
        .collect();
    let incidents = state.store.list_incidents(check.id, 50).await?;
    let incident_ids: Vec<i64> = incidents.iter().map(|i| i.id).collect();
    let incidents: Vec<_> = incidents
        .into_iter()
        .map(|i| {
            context! {
                id => i.id,
                opened => when(Some(i.opened_at), now),
                status => i.status,
                reason => i.reason,
                resolved => when(i.resolved_at, now),
                acked => when(i.acked_at, now),
                acked_by => i.acked_by,
                ack_comment => i.ack_comment,
                // The acknowledge link is a capability too: writers only.
                ack_path => writer.then(|| super::ack::ack_path(&state, &check.uuid.to_string(), i.id, i.opened_at)),
            }
        })
        .collect();
    // Notifications that listed one of this check's incidents.
    let notifications = state
        .store
        .list_notifications(&NotificationFilter {
            state: None,
            receiver: None,
            limit: 500,
        })
        .await?;
    let notifications: Vec<_> = notifications
        .into_iter()
        .filter(|n| {
            n.firing_ids()
                .iter()
                .chain(n.announced_ids().iter())
                .any(|id| incident_ids.contains(id))
        })
        .take(50)
        .collect();
    let ids: Vec<String> = notifications.iter().map(|n| n.id.clone()).collect();
    let attempts = state.store.notification_attempts(&ids).await?;
    let notifications: Vec<_> = notifications
        .into_iter()
        .map(|n| {
            let tries: Vec<_> = attempts
                .iter()
                .filter(|a| a.notification_id == n.id)
                .map(|a| {
                    context! {
                        at => when(Some(a.at), now),
                        outcome => a.outcome.clone(),
                        latency_ms => a.latency_ms,
                        error => a.error.clone(),
                    }
                })
                .collect();
            context! {
                receiver => n.receiver,
                kind => n.kind,
                state => n.state,
                created => when(Some(n.created_at), now),
                last_error => n.last_error,
                attempts => tries,
            }
        })
        .collect();
    let locks: Vec<_> = state
        .store
        .locks(check.id, clock::now_ms())
        .await?
        .into_iter()
        .map(|l| {
            context! {
                holder => l.holder,
                token => l.token,
                acquired => when(Some(l.acquired_at), now),
                expires => when(Some(l.expires_at), now),
            }
        })
        .collect();
    // The latest slots and what became of each (SPEC §14).
    let slot_records = match crate::domain::evaluate::Rules::from_spec(&check.spec) {
        Ok(rules) => {
            let listed = crate::http::slots::Listed {
                id: check.id,
                rules: &rules,
                paused: check.paused,
                created_at: Some(check.created_at),
            };
            slots::last_slots(&state, listed, now, slots::TABLE).await?
        }
        Err(_) => Vec::new(),
    };
    let slot_rows = slots::table(&slot_records, now);
    let dead_letters = slots::any_open(&slot_records);
    let badge = unique_key(check.uuid);
    // How this page's links name the check: never by its uuid.
    let key = crate::domain::name::public_name(check.spec.slug.as_deref(), check.uuid);
    let v = super::api::view(&state, check).seen_by(&ReadAccess { writer });
    let band = usual_band(&items, v.usual_items, v.items_below_usual);
    let status = status_word(v.status.as_str());
    render(
        &t,
        "check.html",
        context! {
            title => v.slug.clone().unwrap_or_else(|| v.name.clone()),
            check => &v,
            status,
            badge_state => format!("{:?}", BadgeState::of(v.status)).to_lowercase(),
            reason => v.reason.map(|r| reason_words(r.as_str())),
            last_ping => when_str(v.last_ping.as_deref(), now),
            last_success => when_str(v.last_success.as_deref(), now),
            next_due => when_str(v.next_due.as_deref(), now),
            labels => v.labels.iter().collect::<Vec<_>>(),
            explanation => explanation.lines,
            warnings => explanation.warnings,
            windows,
            spark => spark_up_to(&items, v.usual_items.unwrap_or(0.0)),
            band => band.map(|(y, h)| band_context(y, h, &v)),
            usual => v.usual_items.map(count_text),
            pings,
            locks,
            slot_rows,
            dead_letters,
            runs,
            flips,
            incidents,
            notifications,
            badge,
            key,
            csrf => viewer.csrf,
            logout => viewer.cookie,
            can_write => writer,
        },
    )
}

#[derive(Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

fn forbidden(message: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_string(),
    )
        .into_response()
}

async fn pause(
    state: State<AppState>,
    viewer: Viewer,
    key: Path<String>,
    form: Form<CsrfForm>,
) -> Result<Response, AppError> {
    set_paused(state, viewer, key, form, true).await
}

async fn resume(
    state: State<AppState>,
    viewer: Viewer,
    key: Path<String>,
    form: Form<CsrfForm>,
) -> Result<Response, AppError> {
    set_paused(state, viewer, key, form, false).await
}

async fn set_paused(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(key): Path<String>,
    Form(form): Form<CsrfForm>,
    paused: bool,
) -> Result<Response, AppError> {
    if !csrf_ok(&viewer.csrf, &form.csrf) {
        return Ok(forbidden(
            "the form's CSRF token is missing or wrong; reload the page and try again",
        ));
    }
    if viewer.scope < Scope::Write {
        return Ok(forbidden("pausing and resuming needs a write key"));
    }
    let check = find(&state, &key).await?;
    super::api::pause(&state, &check, paused).await?;
    Ok(Redirect::to(&format!(
        "/checks/{}",
        crate::domain::name::public_name(check.spec.slug.as_deref(), check.uuid)
    ))
    .into_response())
}

/// The token of the login form: there is no session yet, so it is bound to
/// the server only; with SameSite=Strict it stops other sites from signing a
/// browser in with a key of theirs.
fn login_csrf(state: &AppState) -> String {
    csrf_token(state, "login")
}

async fn login_page(
    State(state): State<AppState>,
    Extension(t): Extension<Arc<Templates>>,
) -> Result<Response, AppError> {
    render(
        &t,
        "login.html",
        context! { csrf => login_csrf(&state), error => None::<String>, basic => !state.config.dashboard.basic_auth.is_empty() },
    )
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    key: String,
    #[serde(default)]
    csrf: String,
}

async fn login(
    State(state): State<AppState>,
    Extension(t): Extension<Arc<Templates>>,
    extensions: Extensions,
    Form(form): Form<LoginForm>,
) -> Result<Response, AppError> {
    if !csrf_ok(&login_csrf(&state), &form.csrf) {
        return Ok(forbidden(
            "the form's CSRF token is missing or wrong; reload the page and try again",
        ));
    }
    let key = form.key.trim();
    let refuse = |message: &str| -> Result<Response, AppError> {
        let mut r = render(
            &t,
            "login.html",
            context! { csrf => login_csrf(&state), error => message, basic => !state.config.dashboard.basic_auth.is_empty() },
        )?;
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        Ok(r)
    };
    let Ok(value) = HeaderValue::from_str(key) else {
        return refuse("That is not an API key.");
    };
    if key.is_empty() {
        return refuse("Enter an API key.");
    }
    // Judge the key exactly as the API would judge it in a header.
    let (mut parts, ()) = axum::http::Request::new(()).into_parts();
    parts.extensions = extensions;
    parts.headers.insert("x-api-key", value);
    match scope_of(&parts, &state).await {
        Ok(_) => {}
        Err(Denied::Unavailable(e)) => return Err(e.into()),
        Err(_) => return refuse("Wrong API key."),
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000{}",
        hex::encode(key.as_bytes()),
        if secure_cookie(&state) {
            "; Secure"
        } else {
            ""
        }
    );
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/".to_string()),
        ],
    )
        .into_response())
}

/// `Secure` on the cookie: as configured, else when base_url is https.
fn secure_cookie(state: &AppState) -> bool {
    state
        .config
        .dashboard
        .secure_cookie
        .unwrap_or_else(|| state.config.base_url.starts_with("https://"))
}

async fn logout(
    State(state): State<AppState>,
    viewer: Viewer,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !csrf_ok(&viewer.csrf, &form.csrf) {
        return forbidden(
            "the form's CSRF token is missing or wrong; reload the page and try again",
        );
    }
    let cookie = format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure_cookie(&state) {
            "; Secure"
        } else {
            ""
        }
    );
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/login".to_string()),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_naturally() {
        let now = Utc::now();
        assert_eq!(
            relative(now - chrono::Duration::seconds(190), now),
            "3 min ago"
        );
        assert_eq!(
            relative(now + chrono::Duration::seconds(300), now),
            "in 5 min"
        );
        assert_eq!(relative(now, now), "just now");
        assert_eq!(relative(now - chrono::Duration::hours(5), now), "5 h ago");
    }

    #[test]
    fn base64_decodes_basic_credentials() {
        assert_eq!(base64_decode("b3BzOnNlY3JldA==").unwrap(), b"ops:secret");
        assert_eq!(base64_decode("YQ").unwrap(), b"a");
        assert!(base64_decode("*").is_none());
    }

    #[test]
    fn windows_across_midnight_make_two_segments() {
        let w = window_row("18:00", "09:00", &[], "UTC");
        assert_eq!(w.segments.len(), 2);
        assert!(w.text.contains("every day"));
        let w = window_row("09:00", "17:00", &["mon".into()], "UTC");
        assert_eq!(w.segments, vec![(37.5, 33.33)]);
    }

    #[test]
    fn stalled_reasons_read_as_words() {
        assert_eq!(reason_words("zero_items"), "successes reported no items");
        assert_eq!(
            reason_words("low_items"),
            "successes reported fewer items than min_items"
        );
    }
}
