//! The job guard's endpoints (SPEC §13), beside the pings they guard:
//! `GET /ping/{uuid}/due`, `POST /ping/{uuid}/lock` and
//! `POST /ping/{uuid}/unlock`, each also in the slug form. Answers are JSON.

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::api::rfc3339;
use super::AppState;
use crate::clock;
use crate::domain::evaluate::{instant, Rules};
use crate::domain::guard::{default_lock_ttl, due, parse_lock_ttl, DueReason, MAX_HOLDER};
use crate::domain::ledger::{self, SlotState};
use crate::domain::name::public_name;
use crate::domain::slots;
use crate::log_throttle::Throttled;
use crate::store::locks::{Acquired, LockAsk, Seat};
use crate::store::StoreError;

/// Guard requests the database could not answer: logged once per interval
/// while they repeat.
static FAILED: Throttled = Throttled::every_10s();

/// The longest request key (`nonce`) kept.
const MAX_NONCE: usize = 100;

/// Which guard endpoint a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardOp {
    Due,
    Lock,
    Unlock,
}

impl GuardOp {
    /// The path segment that names it.
    pub fn parse(segment: &str) -> Option<GuardOp> {
        match segment {
            "due" => Some(GuardOp::Due),
            "lock" => Some(GuardOp::Lock),
            "unlock" => Some(GuardOp::Unlock),
            _ => None,
        }
    }

    fn allows(self, method: &Method) -> bool {
        match self {
            GuardOp::Due => method == Method::GET || method == Method::HEAD,
            GuardOp::Lock | GuardOp::Unlock => method == Method::POST,
        }
    }
}

/// The query of a lock or unlock.
#[derive(Debug, Default, PartialEq, Eq)]
struct LockQuery {
    ttl_ms: Option<i64>,
    holder: Option<String>,
    token: Option<i64>,
    /// The request's key: an acquire retried with it gets its seat back.
    nonce: Option<String>,
}

fn parse_lock_query(query: Option<&str>) -> Result<LockQuery, String> {
    let mut q = LockQuery::default();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "ttl" => {
                let d = parse_lock_ttl(&value)?;
                q.ttl_ms = Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            }
            "holder" => {
                let h = value.trim();
                if h.is_empty() || h.len() > MAX_HOLDER || h.chars().any(char::is_control) {
                    return Err(format!(
                        "holder: 1 to {MAX_HOLDER} bytes without control characters"
                    ));
                }
                q.holder = Some(h.to_string());
            }
            "nonce" => {
                let n = value.trim();
                if n.is_empty() || n.len() > MAX_NONCE || n.chars().any(char::is_control) {
                    return Err(format!(
                        "nonce: 1 to {MAX_NONCE} bytes without control characters"
                    ));
                }
                q.nonce = Some(n.to_string());
            }
            "token" => {
                let t = value.trim();
                q.token = Some(
                    t.parse::<i64>()
                        .ok()
                        .filter(|t| *t > 0)
                        .ok_or_else(|| format!("token: {t:?} is not a lock token"))?,
                );
            }
            _ => {}
        }
    }
    Ok(q)
}

/// How the URL named the check: the slot key (SPEC §14) names it by its
/// slug, or by its unique key without one (never by its uuid).
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    Uuid(uuid::Uuid),
    Slug(&'a str),
}

/// Answers a guard request for the check `check_id`.
pub async fn answer(
    state: &AppState,
    check_id: i64,
    op: GuardOp,
    method: &Method,
    query: Option<&str>,
    peer: &str,
    named: Named<'_>,
) -> Response {
    if !op.allows(method) {
        let allow = if op == GuardOp::Due {
            "GET, HEAD"
        } else {
            "POST"
        };
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "error": format!("use {allow}") }),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        return r;
    }
    let result = match op {
        GuardOp::Due => match parse_due_query(query) {
            Ok(q) => due_answer(state, check_id, named, q).await,
            Err(e) => Ok(bad_request(e)),
        },
        GuardOp::Lock => match parse_lock_query(query) {
            Ok(q) => lock(state, check_id, q, peer).await,
            Err(e) => Ok(bad_request(e)),
        },
        GuardOp::Unlock => match parse_lock_query(query) {
            Ok(LockQuery { token: Some(t), .. }) => unlock(state, check_id, t).await,
            Ok(_) => Ok(bad_request("token: missing (unlock?token=N)".to_string())),
            Err(e) => Ok(bad_request(e)),
        },
    };
    match result {
        Ok(r) => r,
        Err(StoreError::NotFound) => reply(StatusCode::NOT_FOUND, json!({"error": "not found"})),
        Err(e) => {
            if let Some(suppressed) = FAILED.hit() {
                tracing::error!(error = %format!("{e:#}"), suppressed, "job guard request failed (while this repeats it is logged every 10s, suppressed counting the rest)");
            }
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "the database could not answer, try again"}),
            )
        }
    }
}

/// The check's rules and last success, read as a check read is (pings
/// acknowledged before this request are in it).
async fn rules_of(state: &AppState, check_id: i64) -> Result<(Rules, Option<i64>), StoreError> {
    let check = state
        .store
        .eval_check(check_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    let rules = Rules::from_spec(&check.spec).map_err(|e| StoreError::Other(anyhow::anyhow!(e)))?;
    Ok((rules, check.summary.last_success_at))
}

/// What `due` may be asked besides the current slot (SPEC §14).
#[derive(Debug, Default, PartialEq, Eq)]
struct DueQuery {
    /// `catch_up=each`: list the open slots in the window, oldest first.
    each: bool,
    window_ms: Option<i64>,
    limit: Option<usize>,
    /// `slot=T`: is this slot open (for `overdue run --slot`)?
    slot: Option<chrono::DateTime<chrono::Utc>>,
}

/// The longest catch-up window, and the most slots one answer lists.
const MAX_WINDOW: std::time::Duration = std::time::Duration::from_secs(366 * 86_400);
const MAX_OPEN: usize = 1_000;

fn parse_due_query(query: Option<&str>) -> Result<DueQuery, String> {
    let mut q = DueQuery::default();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "catch_up" => match value.as_ref() {
                "each" => q.each = true,
                "latest" => q.each = false,
                other => return Err(format!("catch_up: {other:?} is neither latest nor each")),
            },
            "window" => {
                let d = crate::domain::check::parse_duration(&value)
                    .map_err(|e| format!("window: {e}"))?;
                if d.is_zero() || d > MAX_WINDOW {
                    return Err("window: from 1s to 366days".to_string());
                }
                q.window_ms = Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            }
            "limit" => {
                q.limit = Some(
                    value
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_OPEN).contains(n))
                        .ok_or_else(|| format!("limit: from 1 to {MAX_OPEN}"))?,
                )
            }
            "slot" => q.slot = Some(slots::parse(&value).map_err(|e| format!("slot: {e}"))?),
            _ => {}
        }
    }
    Ok(q)
}

async fn due_answer(
    state: &AppState,
    check_id: i64,
    named: Named<'_>,
    q: DueQuery,
) -> Result<Response, StoreError> {
    let check = state
        .store
        .eval_check(check_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    let rules = Rules::from_spec(&check.spec).map_err(|e| StoreError::Other(anyhow::anyhow!(e)))?;
    let now = instant(clock::now_ms()).unwrap_or_default();
    let mut d = due(&rules, check.summary.last_success_at.and_then(instant), now);
    // A success that came for another slot (a catch-up, a rerun by hand)
    // does not do the current one: once the ledger has applied every ping
    // the summary holds, it says which slot the last success was for.
    if d.reason == DueReason::Done {
        if let Some(slot) = d.slot.map(|s| s.timestamp_millis()) {
            let mark = state.store.ledger_mark(check_id).await?;
            if mark.n >= check.summary.n_pings {
                let rows = state.store.ledger_rows_at(check_id, &[slot]).await?;
                let lr = ledger::LedgerRules {
                    expect: &rules.expect,
                    hours: rules.hours.as_deref(),
                    max_instances: rules.max_instances,
                };
                let rec = ledger::state_at(
                    &lr,
                    &mark,
                    rows.get(&slot),
                    slot,
                    check.paused,
                    now.timestamp_millis(),
                );
                if !matches!(rec.state, SlotState::Done | SlotState::Resolved) {
                    d.due = true;
                    d.reason = DueReason::Due;
                }
            }
        }
    }
    let name = match named {
        Named::Slug(slug) => slug.to_string(),
        Named::Uuid(uuid) => public_name(check.spec.slug.as_deref(), uuid),
    };
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| rfc3339(t.timestamp_millis()));
    let mut body = json!({
        "due": d.due,
        "reason": d.reason.as_str(),
        "slot": d.slot.map(slots::rfc3339),
        "slot_key": d.slot.map(|s| slots::key(&name, s)),
        "last_success": at(d.last_success),
        "next_due": at(d.next_due),
        "quiet": d.quiet,
    });
    let now_ms = now.timestamp_millis();
    let listed = |rules| super::slots::Listed {
        id: check_id,
        rules,
        paused: check.paused,
        created_at: None,
    };
    if let Some(t) = q.slot {
        // One slot, named: its state, and whether a run for it is wanted.
        if slots::slot_at(&rules.expect, t) != Some(t) {
            return Ok(bad_request(format!(
                "slot: {} is not the start of a slot of this check's schedule",
                slots::rfc3339(t)
            )));
        }
        let (records, _) =
            super::slots::slots_of(state, listed(&rules), Some(t), t, now_ms).await?;
        let st = records.first().map_or(SlotState::Pending, |r| r.state);
        body["slot"] = json!(slots::rfc3339(t));
        body["slot_key"] = json!(slots::key(&name, t));
        body["slot_state"] = json!(st.as_str());
        body["due"] = json!(!matches!(
            st,
            SlotState::Done | SlotState::Resolved | SlotState::Quiet
        ));
        body["reason"] = json!(match st {
            SlotState::Done | SlotState::Resolved => "done",
            SlotState::Quiet => "quiet",
            _ => "due",
        });
    } else if q.each {
        // Every open slot in the window, oldest first: dead letters, and
        // the current slot while it is due.
        let window = q.window_ms.unwrap_or(7 * 86_400_000);
        let from = instant(now_ms.saturating_sub(window));
        let (records, _) = super::slots::slots_of(state, listed(&rules), from, now, now_ms).await?;
        let current = d.slot.map(|s| s.timestamp_millis());
        let mut open: Vec<serde_json::Value> = records
            .iter()
            .rev()
            .filter(|r| {
                r.state.is_dead_letter()
                    || (Some(r.slot) == current && d.due && r.state != SlotState::Running)
            })
            .map(|r| {
                let t = ledger::slot_text(r.slot);
                json!({"slot": t, "key": format!("{name}@{t}"), "state": r.state.as_str()})
            })
            .collect();
        let total = open.len();
        open.truncate(q.limit.unwrap_or(24));
        body["open"] = json!(open);
        body["open_total"] = json!(total);
        if total > 0 && !d.quiet {
            body["due"] = json!(true);
            body["reason"] = json!("due");
        }
    }
    Ok(reply(StatusCode::OK, body))
}

async fn lock(
    state: &AppState,
    check_id: i64,
    q: LockQuery,
    peer: &str,
) -> Result<Response, StoreError> {
    let now = clock::now_ms();
    // A renewal without `ttl` keeps the seat's own TTL (a 30-minute seat is
    // not cut to the check's default); a seat already gone is refused below.
    let renewed_ttl = match (q.ttl_ms, q.token) {
        (None, Some(token)) => state
            .store
            .locks(check_id, now)
            .await?
            .into_iter()
            .find(|s| s.token == token)
            .map(|s| s.ttl_ms),
        _ => None,
    };
    let ttl_ms = match q.ttl_ms.or(renewed_ttl) {
        Some(t) => t,
        None => {
            let (rules, _) = rules_of(state, check_id).await?;
            let d = default_lock_ttl(&rules, instant(now).unwrap_or_default());
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
        }
    };
    let holder = q.holder.unwrap_or_else(|| peer.to_string());
    let ask = LockAsk {
        check_id,
        holder: &holder,
        ttl_ms,
        token: q.token,
        nonce: q.nonce.as_deref(),
    };
    let got = state.store.acquire_lock(ask, now).await?;
    Ok(match got {
        Acquired::Held(seat) => {
            let mut body = seat_json(&seat);
            body["acquired"] = json!(true);
            body["ttl_ms"] = json!(seat.ttl_ms);
            reply(StatusCode::OK, body)
        }
        Acquired::Busy(seat) => {
            let mut body = json!({
                "acquired": false,
                "holder": seat.holder,
                "expires": rfc3339(seat.expires_at),
            });
            body["error"] = json!(format!(
                "every seat is held: locked by {} until {}",
                seat.holder,
                rfc3339(seat.expires_at)
            ));
            reply(StatusCode::LOCKED, body)
        }
        Acquired::Lost => reply(
            StatusCode::CONFLICT,
            json!({
                "acquired": false,
                "error": format!(
                    "token {} no longer holds a seat (it expired or was released)",
                    q.token.unwrap_or_default()
                ),
            }),
        ),
    })
}

async fn unlock(state: &AppState, check_id: i64, token: i64) -> Result<Response, StoreError> {
    // A check that does not exist is a 404, not a lost token.
    if state.store.eval_check(check_id).await?.is_none() {
        return Err(StoreError::NotFound);
    }
    Ok(if state.store.release_lock(check_id, token).await? {
        reply(StatusCode::OK, json!({"released": true}))
    } else {
        reply(
            StatusCode::CONFLICT,
            json!({
                "released": false,
                "error": format!("token {token} no longer holds a seat (it expired or was released)"),
            }),
        )
    })
}

/// A held seat as the API shows it.
pub fn seat_json(seat: &Seat) -> Value {
    json!({
        "token": seat.token,
        "holder": seat.holder,
        "acquired": rfc3339(seat.acquired_at),
        "expires": rfc3339(seat.expires_at),
    })
}

fn bad_request(message: String) -> Response {
    reply(StatusCode::BAD_REQUEST, json!({ "error": message }))
}

pub(super) fn reply(status: StatusCode, body: Value) -> Response {
    let mut r = (status, axum::Json(body)).into_response();
    let h = r.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-store, must-revalidate"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_queries_name_what_is_wrong() {
        let q = parse_lock_query(Some("ttl=90s&holder=web-1%3A42&token=7")).unwrap();
        assert_eq!(
            q,
            LockQuery {
                ttl_ms: Some(90_000),
                holder: Some("web-1:42".to_string()),
                token: Some(7),
                nonce: None,
            }
        );
        assert_eq!(parse_lock_query(None).unwrap(), LockQuery::default());
        for (bad, names) in [
            ("ttl=0s", "ttl"),
            ("ttl=8days", "ttl"),
            ("ttl=soon", "ttl"),
            ("holder=", "holder"),
            ("holder=a%0Ab", "holder"),
            ("token=0", "token"),
            ("token=-3", "token"),
            ("token=1.5", "token"),
            ("nonce=", "nonce"),
        ] {
            let e = parse_lock_query(Some(bad)).unwrap_err();
            assert!(e.starts_with(names), "{bad}: {e}");
        }
        let long = format!("holder={}", "x".repeat(MAX_HOLDER + 1));
        assert!(parse_lock_query(Some(&long)).is_err());
    }

    #[test]
    fn each_op_takes_its_methods() {
        assert!(GuardOp::Due.allows(&Method::GET));
        assert!(GuardOp::Due.allows(&Method::HEAD));
        assert!(!GuardOp::Due.allows(&Method::POST));
        assert!(GuardOp::Lock.allows(&Method::POST));
        assert!(!GuardOp::Lock.allows(&Method::GET));
        assert!(!GuardOp::Unlock.allows(&Method::GET));
        assert_eq!(GuardOp::parse("lock"), Some(GuardOp::Lock));
        assert_eq!(GuardOp::parse("locks"), None);
    }
}
